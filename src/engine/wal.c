/*
 * The codec of the engine's log and checkpoint files, and index records.
 *
 * Both files are sequences of the same self-checking records:
 *
 *   u32 crc32c   of everything after this field, to the end of the record
 *   u32 len      of the whole record, header included, a multiple of 8
 *   u32 gen      log generation; a record of another generation is stale
 *   u8  op       WAL_INSERT, WAL_DELETE, WAL_DELPFX, WAL_MARK
 *   u8  pad[3]
 *   u64 seq      per-target sequence number
 *   payload      INSERT: u8 type, u8 flags, u16 klen, u32 len, u32 crc,
 *                        u64 loc, u64 off, key, tail (inline data or chunk CRCs)
 *                DELETE, DELPFX: u16 klen, key
 *                MARK: u64 highest acknowledged seq
 *
 * All integers are little-endian. The log is preallocated and zero-filled,
 * so its end is the first record that does not decode: all zeros (-EAGAIN) or
 * a torn or stale one. Nothing here does I/O, so the decoder can be fuzzed
 * as it is.
 */
#include <errno.h>
#include <isa-l.h>
#include <stdlib.h>
#include <string.h>

#include "engine/eng_internal.h"

#define INS_FIXED 28u /* type flags klen len crc loc off */

uint32_t eng_crc32c(uint32_t seed, const void *buf, size_t len)
{
	return crc32_iscsi((unsigned char *)buf, (int)len, seed);
}

struct rec *rec_alloc(uint32_t klen, size_t tail)
{
	struct rec *r = malloc(sizeof(*r) + klen + tail);

	if (r) {
		memset(r, 0, sizeof(*r));
		r->klen = (uint16_t)klen;
	}
	return r;
}

const uint8_t *rec_key_of(const void *item, uint32_t *len)
{
	const struct rec *r = item;

	*len = r->klen;
	return r->key;
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}

static uint16_t get16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return le16toh(v);
}

static void put16(uint8_t *p, uint16_t v)
{
	v = htole16(v);
	memcpy(p, &v, 2);
}

static void put32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static void put64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

int wal_decode(const uint8_t *buf, size_t avail, struct wal_view *v)
{
	const uint8_t *p;
	size_t plen;

	if (avail < WAL_HDR)
		return -EAGAIN;
	memset(v, 0, sizeof(*v));
	v->len = get32(buf + 4);
	if (v->len == 0 && get32(buf) == 0)
		return -EAGAIN;
	if (v->len < WAL_HDR + 8 || v->len % 8 || v->len > avail)
		return -LODE_ECORRUPT;
	if (eng_crc32c(0, buf + 4, v->len - 4) != get32(buf))
		return -LODE_ECORRUPT;
	v->gen = get32(buf + 8);
	v->op = buf[12];
	v->seq = get64(buf + 16);
	p = buf + WAL_HDR;
	plen = v->len - WAL_HDR;
	switch (v->op) {
	case WAL_INSERT:
		if (plen < INS_FIXED)
			return -LODE_ECORRUPT;
		v->type = p[0];
		v->flags = p[1];
		v->klen = get16(p + 2);
		v->dlen = get32(p + 4);
		v->crc = get32(p + 8);
		v->loc = get64(p + 12);
		v->off = get64(p + 20);
		if (v->type == 0 || v->type > REC_TYPE_MAX || (v->flags & ~REC_F_ALL) ||
		    v->klen == 0 || v->klen > plen - INS_FIXED)
			return -LODE_ECORRUPT;
		v->key = p + INS_FIXED;
		v->tail = v->key + v->klen;
		v->tail_len = plen - INS_FIXED - v->klen;
		{
			/* The tail is exactly what the record says follows the
			 * key; only padding to 8 bytes may come after it. */
			struct rec probe = {.len = v->dlen, .type = v->type, .flags = v->flags};
			size_t want = rec_tail(&probe);

			if (want > v->tail_len || v->tail_len - want >= 8)
				return -LODE_ECORRUPT;
			v->tail_len = want;
		}
		return 0;
	case WAL_DELETE:
	case WAL_DELPFX:
		if (plen < 2)
			return -LODE_ECORRUPT;
		v->klen = get16(p);
		if (v->klen == 0 || v->klen > plen - 2)
			return -LODE_ECORRUPT;
		v->key = p + 2;
		return 0;
	case WAL_MARK:
		v->mark = get64(p);
		return 0;
	default:
		return -LODE_ECORRUPT;
	}
}

struct rec *wal_view_rec(const struct wal_view *v)
{
	struct rec *r = rec_alloc(v->klen, v->tail_len);

	if (!r)
		return NULL;
	r->type = v->type;
	r->flags = v->flags;
	r->len = v->dlen;
	r->crc = v->crc;
	r->loc = v->loc;
	r->off = v->off;
	memcpy(r->key, v->key, v->klen);
	memcpy(r->key + v->klen, v->tail, v->tail_len);
	return r;
}

static uint8_t *wbuf_reserve(struct wbuf *b, size_t n)
{
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 64 << 10;
		uint8_t *p;

		while (cap < b->len + n)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p)
			return NULL;
		b->p = p;
		b->cap = cap;
	}
	return b->p + b->len;
}

int wbuf_put(struct wbuf *b, const void *p, size_t n)
{
	uint8_t *q = wbuf_reserve(b, n);

	if (!q)
		return -ENOMEM;
	if (n)
		memcpy(q, p, n);
	b->len += n;
	return 0;
}

void wbuf_free(struct wbuf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

/* Reserve a record of payload plen, fill the header but the crc. */
static uint8_t *rec_begin(struct wbuf *b, uint32_t gen, uint64_t seq, uint8_t op, size_t plen,
			  size_t *total)
{
	size_t n = (WAL_HDR + plen + 7) & ~(size_t)7;
	uint8_t *p;

	if (n < WAL_HDR + 8)
		n = WAL_HDR + 8;
	p = wbuf_reserve(b, n);
	if (!p)
		return NULL;
	memset(p, 0, n);
	put32(p + 4, (uint32_t)n);
	put32(p + 8, gen);
	p[12] = op;
	put64(p + 16, seq);
	*total = n;
	return p;
}

static void rec_end(struct wbuf *b, uint8_t *p, size_t n)
{
	put32(p, eng_crc32c(0, p + 4, n - 4));
	b->len += n;
}

int wal_put_insert(struct wbuf *b, uint32_t gen, uint64_t seq, const struct rec *r)
{
	size_t tail = rec_tail(r), n;
	uint8_t *p = rec_begin(b, gen, seq, WAL_INSERT, INS_FIXED + r->klen + tail, &n);
	uint8_t *q;

	if (!p)
		return -ENOMEM;
	q = p + WAL_HDR;
	q[0] = r->type;
	q[1] = r->flags;
	put16(q + 2, r->klen);
	put32(q + 4, r->len);
	put32(q + 8, r->crc);
	put64(q + 12, r->loc);
	put64(q + 20, r->off);
	memcpy(q + INS_FIXED, r->key, r->klen + tail);
	rec_end(b, p, n);
	return 0;
}

int wal_put_key(struct wbuf *b, uint32_t gen, uint64_t seq, uint8_t op, const uint8_t *key,
		uint16_t klen)
{
	size_t n;
	uint8_t *p = rec_begin(b, gen, seq, op, 2u + klen, &n);

	if (!p)
		return -ENOMEM;
	put16(p + WAL_HDR, klen);
	memcpy(p + WAL_HDR + 2, key, klen);
	rec_end(b, p, n);
	return 0;
}

int wal_put_mark(struct wbuf *b, uint32_t gen, uint64_t seq, uint64_t mark)
{
	size_t n;
	uint8_t *p = rec_begin(b, gen, seq, WAL_MARK, 8, &n);

	if (!p)
		return -ENOMEM;
	put64(p + WAL_HDR, mark);
	rec_end(b, p, n);
	return 0;
}

void wal_restamp(struct wbuf *b, uint32_t gen)
{
	size_t off = 0;

	while (off + WAL_HDR <= b->len) {
		uint8_t *p = b->p + off;
		uint32_t n = get32(p + 4);

		put32(p + 8, gen);
		put32(p, eng_crc32c(0, p + 4, n - 4));
		off += n;
	}
}
