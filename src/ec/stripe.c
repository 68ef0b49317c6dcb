/*
 * Where a byte range of an object falls in its stripes: pure arithmetic for
 * the client, which splits every read and write of an EC object by stripe
 * and, within a stripe, by cell, and must know which stripes a write covers
 * whole (encode them) and which only in part (update their parity by delta,
 * or read the rest and encode: see README.md).
 *
 * Offsets go up to 2^64 - 1, so nothing here computes the end of a stripe
 * as an object offset (the last stripe's end need not fit in 64 bits); it
 * works with offsets inside the stripe, which stay below k * EC_CELL_MAX.
 */
#include "ec/ec.h"

#include <errno.h>
#include <string.h>

int ec_range_init(struct ec_range *r, unsigned k, uint64_t cell_size, uint64_t off, uint64_t len)
{
	if (!r || k < 1 || k > EC_K_MAX || cell_size < 1 || cell_size > EC_CELL_MAX)
		return -EINVAL;
	if (len > UINT64_MAX - off)
		return -EOVERFLOW;
	r->k = k;
	r->cell_size = cell_size;
	r->start = off;
	r->pos = off;
	r->end = off + len;
	return 0;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

bool ec_range_next(struct ec_range *r, struct ec_span *s)
{
	uint64_t cs = r->cell_size, ss = cs * r->k, in, n;

	if (r->pos >= r->end)
		return false;
	memset(s, 0, sizeof(*s));
	s->stripe = r->pos / ss;
	in = r->pos % ss; /* where the span starts within the stripe's data */
	n = min_u64(r->end - r->pos, ss - in);
	s->obj_off = r->pos;
	s->buf_off = r->pos - r->start;
	s->len = n;
	s->first_cell = (unsigned)(in / cs);
	s->last_cell = (unsigned)((in + n - 1) / cs);
	for (unsigned c = s->first_cell; c <= s->last_cell; c++) {
		uint64_t lo = max_u64(in, c * cs), hi = min_u64(in + n, (c + 1) * cs);

		s->cell_off[c] = lo - c * cs;
		s->cell_len[c] = hi - lo;
		s->cell_buf[c] = s->buf_off + (lo - in);
	}
	/* Two cells or more: the first runs to the end of its cell and the last
	 * starts at 0, so only the whole cell holds both. */
	if (s->first_cell == s->last_cell) {
		s->parity_off = s->cell_off[s->first_cell];
		s->parity_len = s->cell_len[s->first_cell];
	} else {
		s->parity_off = 0;
		s->parity_len = cs;
	}
	s->full = n == ss;
	r->pos += n;
	return true;
}
