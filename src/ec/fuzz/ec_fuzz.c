/*
 * libFuzzer target: stripes, losses and writes drawn from the input
 * (src/ec/ec.c, stripe.c), checked against tests/ec_ref.h.
 *
 * The first bytes choose the code (k, p), a set of lost cells (any size,
 * so more than p too), which of them to ask for, a write inside one data
 * cell, and a range of an object; the rest is the data, spread over k
 * cells of len bytes. Then:
 *
 * - the parity ec_encode writes must equal the reference's, byte for byte
 *   (the differential check: ISA-L against GF(2^8) written out);
 * - the lost cells are overwritten and rebuilt: with at most p lost, the
 *   asked-for cells come back equal and nothing else changes; with more,
 *   the call says -EIO and writes nothing;
 * - the write goes through ec_update, and the parity must equal encoding
 *   the new stripe from scratch;
 * - the object range is walked with ec_range_* and checked byte for byte
 *   against the layout (ref_check_range).
 *
 * Any failure abort()s, so the fuzzer reports it.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ec/ec.h"
#include "ec/tests/ec_ref.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond))                                                                       \
			abort();                                                                   \
	} while (0)

/* The header: what each input byte chooses (zeros when the input is short). */
enum {
	H_K = 0,      /* k = 1 + b % 16 */
	H_P = 1,      /* p = 1 + b % 4 */
	H_LOST = 2,   /* 3 bytes: the lost cells, a bitmask */
	H_SKIP = 5,   /* 3 bytes: lost cells not to rebuild */
	H_FILL = 8,   /* the byte lost cells are overwritten with */
	H_CELL = 9,   /* the data cell written */
	H_OFF = 10,   /* 2 bytes: where in it */
	H_LEN = 12,   /* 2 bytes: how much */
	H_SALT = 14,  /* xored into the bytes written */
	H_RK = 15,    /* the range's k */
	H_RCELL = 16, /* 2 bytes: the range's cell size, 1..4096 */
	H_RLEN = 18,  /* 2 bytes: the range's length, below 64 cells */
	H_ROFF = 20,  /* 8 bytes: the range's offset */
	HDR = 28
};
#define LEN_MAX 8192 /* bytes per cell, at most */

/* One codec per (k, p), made on first use and kept: they are immutable. */
static struct ec_codec *codecs[EC_K_MAX + 1][EC_P_MAX + 1];

static struct ec_codec *codec(unsigned k, unsigned p)
{
	if (!codecs[k][p])
		CHECK(ec_codec_create(k, p, &codecs[k][p]) == 0);
	return codecs[k][p];
}

static uint64_t le(const uint8_t *b, unsigned n)
{
	uint64_t v = 0;

	while (n--)
		v = v << 8 | b[n];
	return v;
}

static uint8_t *cell_new(size_t len)
{
	uint8_t *b = malloc(len);

	CHECK(b);
	return b;
}

static void codec_checks(const uint8_t *hdr, const uint8_t *rest, size_t nrest)
{
	unsigned k = 1 + hdr[H_K] % EC_K_MAX, p = 1 + hdr[H_P] % EC_P_MAX, m = k + p;
	uint32_t all = (1u << m) - 1;
	uint32_t lost = (uint32_t)le(hdr + H_LOST, 3) & all;
	uint32_t want = lost & ~(uint32_t)le(hdr + H_SKIP, 3);
	size_t len = nrest / k;
	struct ec_codec *c = codec(k, p);
	uint8_t *orig[EC_CELLS_MAX], *work[EC_CELLS_MAX], *ref[EC_P_MAX];
	unsigned nlost = (unsigned)__builtin_popcount(lost);
	int rc;

	if (len == 0)
		len = 1;
	if (len > LEN_MAX)
		len = LEN_MAX;
	for (unsigned i = 0; i < m; i++) {
		orig[i] = cell_new(len);
		work[i] = cell_new(len);
	}
	for (unsigned j = 0; j < p; j++)
		ref[j] = cell_new(len);
	/* The data: the input's bytes in order, cycled when short (zeros when
	 * there are none), and salted per cell so that cells differ. */
	for (unsigned i = 0; i < k; i++)
		for (size_t b = 0; b < len; b++) {
			size_t at = i * len + b;

			orig[i][b] = nrest ? (uint8_t)(rest[at % nrest] + at / nrest * 31) : 0;
		}

	CHECK(ec_encode(c, orig, orig + k, len) == 0);
	ref_encode(k, p, orig, ref, len);
	for (unsigned j = 0; j < p; j++)
		CHECK(memcmp(orig[k + j], ref[j], len) == 0);

	/* Lose, rebuild, compare. */
	for (unsigned i = 0; i < m; i++) {
		memcpy(work[i], orig[i], len);
		if (lost & (1u << i))
			memset(work[i], hdr[H_FILL], len);
	}
	rc = ec_reconstruct(c, work, all & ~lost, want, len);
	if (nlost > p) {
		CHECK(rc == -EIO);
		want = 0; /* nothing may have changed */
	} else {
		CHECK(rc == 0);
	}
	for (unsigned i = 0; i < m; i++) {
		if (!(lost & (1u << i)) || (want & (1u << i))) {
			CHECK(memcmp(work[i], orig[i], len) == 0);
			continue;
		}
		for (size_t b = 0; b < len; b++)
			CHECK(work[i][b] == hdr[H_FILL]);
	}

	/* A write of [o, o + n) of one data cell, by delta, against encoding
	 * the new stripe. The new bytes are the input read backwards. */
	{
		unsigned cell = hdr[H_CELL] % k;
		size_t o = le(hdr + H_OFF, 2) % len;
		size_t n = 1 + le(hdr + H_LEN, 2) % (len - o);
		uint8_t *newb = cell_new(n), *par[EC_P_MAX];

		for (size_t b = 0; b < n; b++)
			newb[b] = nrest ? rest[nrest - 1 - b % nrest] ^ hdr[H_SALT] : hdr[H_SALT];
		for (unsigned j = 0; j < p; j++)
			par[j] = orig[k + j] + o;
		CHECK(ec_update(c, cell, orig[cell] + o, newb, par, n) == 0);
		memcpy(orig[cell] + o, newb, n);
		ref_encode(k, p, orig, ref, len);
		for (unsigned j = 0; j < p; j++)
			CHECK(memcmp(orig[k + j], ref[j], len) == 0);
		free(newb);
	}

	for (unsigned i = 0; i < m; i++) {
		free(orig[i]);
		free(work[i]);
	}
	for (unsigned j = 0; j < p; j++)
		free(ref[j]);
}

/* An object range: k and a cell size from the header, offset and length
 * from 8 bytes each, the length kept small enough to walk. Offsets reach
 * 2^64 - 1; a range past it must be refused with -EOVERFLOW. */
static void range_checks(const uint8_t *hdr)
{
	unsigned k = 1 + hdr[H_RK] % EC_K_MAX;
	uint64_t cs = 1 + le(hdr + H_RCELL, 2) % 4096;
	uint64_t off = le(hdr + H_ROFF, 8), len = le(hdr + H_RLEN, 2) % (64 * cs);
	struct ec_range r;
	const char *why = NULL;

	if (len > UINT64_MAX - off) {
		CHECK(ec_range_init(&r, k, cs, off, len) == -EOVERFLOW);
		return;
	}
	CHECK(ref_check_range(k, cs, off, len, &why) >= 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t hdr[HDR] = {0};
	size_t nh = size < HDR ? size : HDR;

	memcpy(hdr, data, nh);
	codec_checks(hdr, data + nh, size - nh);
	range_checks(hdr);
	return 0;
}
