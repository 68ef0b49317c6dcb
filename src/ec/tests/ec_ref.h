/*
 * What tests/ec_test.c and fuzz/ec_fuzz.c check src/ec against, written
 * from the definitions and not from ec.c or ISA-L:
 *
 * - GF(2^8) with the polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11d), one bit
 *   at a time, and the parity ec.h promises: parity row j of a k + p code
 *   is sum over c of data[c] * 1/((k+j) xor c). Slow on purpose.
 * - The stripe layout of an object, byte by byte, against the spans
 *   ec_range_next gives.
 *
 * Header-only so that both programs share one copy.
 */
#ifndef LODE_EC_REF_H
#define LODE_EC_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ec/ec.h"

static inline uint8_t ref_mul(uint8_t a, uint8_t b)
{
	uint8_t r = 0;

	while (b) {
		if (b & 1)
			r ^= a;
		a = (uint8_t)((a << 1) ^ ((a & 0x80) ? 0x1d : 0));
		b >>= 1;
	}
	return r;
}

static inline uint8_t ref_inv(uint8_t a)
{
	for (unsigned x = 1; x < 256; x++)
		if (ref_mul(a, (uint8_t)x) == 1)
			return (uint8_t)x;
	return 0; /* 0 has none */
}

/* The parity cells of a stripe, by the formula in ec.h. */
static inline void ref_encode(unsigned k, unsigned p, uint8_t *const *data, uint8_t *const *parity,
			      size_t len)
{
	uint8_t coef[EC_P_MAX][EC_K_MAX];

	for (unsigned j = 0; j < p; j++)
		for (unsigned c = 0; c < k; c++)
			coef[j][c] = ref_inv((uint8_t)((k + j) ^ c));
	for (unsigned j = 0; j < p; j++)
		for (size_t i = 0; i < len; i++) {
			uint8_t s = 0;

			for (unsigned c = 0; c < k; c++)
				s ^= ref_mul(coef[j][c], data[c][i]);
			parity[j][i] = s;
		}
}

/*
 * Walk [off, off + len) with ec_range_*, and check every span against the
 * layout computed independently, with 128-bit arithmetic so that nothing
 * can wrap: spans follow one another with no gap, each stays in its stripe,
 * each cell piece is where the layout puts those bytes, pieces follow one
 * another through the cells, full and the parity range are right. Returns
 * the number of spans, or -1 on the first thing wrong (*why says what).
 */
static inline long ref_check_range(unsigned k, uint64_t cs, uint64_t off, uint64_t len,
				   const char **why)
{
	typedef unsigned __int128 u128;
	struct ec_range r;
	struct ec_span s;
	u128 ss = (u128)cs * k, pos = off, end = (u128)off + len;
	long n = 0;

#define REF_FAIL(msg)                                                                              \
	do {                                                                                       \
		*why = msg;                                                                        \
		return -1;                                                                         \
	} while (0)
	if (ec_range_init(&r, k, cs, off, len) != 0)
		REF_FAIL("init refused a valid range");
	while (ec_range_next(&r, &s)) {
		u128 base = (u128)s.stripe * ss, at;

		n++;
		if (s.obj_off != pos || s.buf_off != pos - off)
			REF_FAIL("span does not start where the last one ended");
		if (s.len == 0 || (u128)s.obj_off + s.len > end)
			REF_FAIL("span empty or past the range");
		if (s.stripe != (uint64_t)(pos / ss) || (u128)s.obj_off + s.len > base + ss)
			REF_FAIL("span not within its stripe");
		if (s.first_cell > s.last_cell || s.last_cell >= k)
			REF_FAIL("bad cells");
		at = s.obj_off;
		for (unsigned c = 0; c < k; c++) {
			bool in = c >= s.first_cell && c <= s.last_cell;

			if (!in) {
				if (s.cell_len[c] || s.cell_off[c] || s.cell_buf[c])
					REF_FAIL("a cell outside the span has a piece");
				continue;
			}
			if (s.cell_len[c] == 0 || s.cell_off[c] + s.cell_len[c] > cs)
				REF_FAIL("cell piece empty or past its cell");
			if (base + (u128)c * cs + s.cell_off[c] != at)
				REF_FAIL("cell piece is not where the layout puts its bytes");
			if ((u128)s.cell_buf[c] != at - off)
				REF_FAIL("cell piece's buffer offset is wrong");
			if (c > s.first_cell && s.cell_off[c] != 0)
				REF_FAIL("a later cell does not start at 0");
			if (c < s.last_cell && s.cell_off[c] + s.cell_len[c] != cs)
				REF_FAIL("an earlier cell does not run to its end");
			at += s.cell_len[c];
		}
		if (at != (u128)s.obj_off + s.len)
			REF_FAIL("cell pieces do not add up to the span");
		if (s.full != ((u128)s.len == ss))
			REF_FAIL("full is wrong");
		if (s.first_cell == s.last_cell ? s.parity_off != s.cell_off[s.first_cell] ||
						      s.parity_len != s.cell_len[s.first_cell]
						: s.parity_off != 0 || s.parity_len != cs)
			REF_FAIL("parity range is wrong");
		pos += s.len;
	}
	if (pos != end)
		REF_FAIL("spans do not cover the range");
	if (ec_range_next(&r, &s))
		REF_FAIL("a span after the end");
#undef REF_FAIL
	return n;
}

#endif
