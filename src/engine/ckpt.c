/*
 * The checkpoint codec: the whole index, compactly.
 *
 * A checkpoint is written in key order, so consecutive keys share long
 * prefixes (container, object, often most of the dkey). Each record stores
 * only how many bytes it shares with the previous key and the rest, and its
 * integers as varints; records are grouped in blocks of about 1 MiB, each
 * with its own CRC32C and decodable on its own (the first key of a block
 * shares nothing). In RAM mode the checkpoint lives on tmpfs, so its size is
 * memory: this format holds small values in about a third of the space the
 * log's framing would take.
 *
 *   block:  u32 magic 'LCKB', u32 payload bytes, u32 records, u32 crc32c(payload)
 *   record: u8 type, u8 flags, varint shared, varint suffix length, suffix,
 *           varint len, u32 crc, varint loc, varint off, tail (inline data or
 *           chunk CRCs, as long as rec_tail() says)
 *
 * All integers are little-endian. Nothing here does I/O; the decoder is
 * fuzzed (fuzz/ckpt_decode_fuzz.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/eng_internal.h"

#define BLOCK_MAGIC 0x424b434cu /* "LCKB" */
#define BLOCK_HDR 16u
#define BLOCK_TARGET (1u << 20)

static int put_varint(struct wbuf *b, uint64_t v)
{
	uint8_t t[10];
	size_t n = 0;

	do {
		t[n++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
		v >>= 7;
	} while (v);
	return wbuf_put(b, t, n);
}

static int get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	uint64_t r = 0;

	for (unsigned shift = 0; shift < 64; shift += 7) {
		uint8_t c;

		if (*p >= end)
			return -LODE_ECORRUPT;
		c = *(*p)++;
		r |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80)) {
			*v = r;
			return 0;
		}
	}
	return -LODE_ECORRUPT;
}

static void put32le(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static uint32_t get32le(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

/* Close the open block: fill in its header. */
static void block_close(struct ckpt_enc *e)
{
	uint8_t *h = e->b.p + e->blk;
	size_t n = e->b.len - e->blk - BLOCK_HDR;

	put32le(h, BLOCK_MAGIC);
	put32le(h + 4, (uint32_t)n);
	put32le(h + 8, e->nrec);
	put32le(h + 12, eng_crc32c(0, h + BLOCK_HDR, n));
	e->open = false;
}

int ckpt_enc_put(struct ckpt_enc *e, const struct rec *r)
{
	uint32_t shared = 0;
	uint8_t hdr[BLOCK_HDR] = {0}, crc[4];
	int rc;

	if (!e->open) {
		e->blk = e->b.len;
		e->nrec = 0;
		e->prev_len = 0;
		rc = wbuf_put(&e->b, hdr, sizeof(hdr));
		if (rc < 0)
			return rc;
		e->open = true;
	}
	while (shared < e->prev_len && shared < r->klen && e->prev[shared] == r->key[shared])
		shared++;
	put32le(crc, r->crc);
	rc = wbuf_put(&e->b, &r->type, 1);
	rc = rc ? rc : wbuf_put(&e->b, &r->flags, 1);
	rc = rc ? rc : put_varint(&e->b, shared);
	rc = rc ? rc : put_varint(&e->b, r->klen - shared);
	rc = rc ? rc : wbuf_put(&e->b, r->key + shared, r->klen - shared);
	rc = rc ? rc : put_varint(&e->b, r->len);
	rc = rc ? rc : wbuf_put(&e->b, crc, 4);
	rc = rc ? rc : put_varint(&e->b, r->loc);
	rc = rc ? rc : put_varint(&e->b, r->off);
	rc = rc ? rc : wbuf_put(&e->b, r->key + r->klen, rec_tail(r));
	if (rc < 0)
		return rc;
	memcpy(e->prev, r->key, r->klen);
	e->prev_len = r->klen;
	e->nrec++;
	if (e->b.len - e->blk >= BLOCK_TARGET)
		block_close(e);
	return 0;
}

void ckpt_enc_finish(struct ckpt_enc *e)
{
	if (e->open)
		block_close(e);
}

int ckpt_block_decode(const uint8_t *buf, size_t avail, size_t *used, ckpt_rec_fn fn, void *ctx)
{
	uint8_t prev[CKPT_KEY_MAX];
	uint32_t prev_len = 0, n, nrec;
	const uint8_t *p, *end;

	if (avail < BLOCK_HDR || get32le(buf) != BLOCK_MAGIC)
		return -LODE_ECORRUPT;
	n = get32le(buf + 4);
	nrec = get32le(buf + 8);
	if (n > avail - BLOCK_HDR || eng_crc32c(0, buf + BLOCK_HDR, n) != get32le(buf + 12))
		return -LODE_ECORRUPT;
	p = buf + BLOCK_HDR;
	end = p + n;
	for (uint32_t i = 0; i < nrec; i++) {
		uint64_t shared, slen, len, loc, off;
		uint8_t type, flags;
		uint32_t crc;
		struct rec probe, *r;
		size_t tail;
		int rc;

		if (end - p < 2)
			return -LODE_ECORRUPT;
		type = *p++;
		flags = *p++;
		if (get_varint(&p, end, &shared) || get_varint(&p, end, &slen) || shared > prev_len ||
		    slen > (uint64_t)(end - p) || shared + slen == 0 || shared + slen > CKPT_KEY_MAX)
			return -LODE_ECORRUPT;
		memcpy(prev + shared, p, slen);
		prev_len = (uint32_t)(shared + slen);
		p += slen;
		if (get_varint(&p, end, &len) || len > UINT32_MAX || end - p < 4)
			return -LODE_ECORRUPT;
		crc = get32le(p);
		p += 4;
		if (get_varint(&p, end, &loc) || get_varint(&p, end, &off))
			return -LODE_ECORRUPT;
		if (type == 0 || type > REC_TYPE_MAX || (flags & ~REC_F_ALL))
			return -LODE_ECORRUPT;
		probe = (struct rec){.len = (uint32_t)len, .type = type, .flags = flags};
		tail = rec_tail(&probe);
		if (tail > (size_t)(end - p))
			return -LODE_ECORRUPT;
		r = rec_alloc(prev_len, tail);
		if (!r)
			return -ENOMEM;
		*r = probe;
		r->klen = (uint16_t)prev_len;
		r->crc = crc;
		r->loc = loc;
		r->off = off;
		memcpy(r->key, prev, prev_len);
		memcpy(r->key + prev_len, p, tail);
		p += tail;
		rc = fn(ctx, r); /* takes r, also on failure */
		if (rc < 0)
			return rc;
	}
	if (p != end)
		return -LODE_ECORRUPT;
	*used = BLOCK_HDR + n;
	return (int)nrec;
}
