/*
 * Tests for src/ec: the Reed-Solomon codec and the stripe arithmetic.
 *
 * Encoding is checked against tests/ec_ref.h, GF(2^8) written out bit by
 * bit from the formula ec.h promises, so the parity written to media
 * cannot change under Lode without a test failing. Rebuilding is checked
 * byte for byte against the stripe before it lost anything, for every
 * pattern of lost cells up to p (data and parity), and past p for the
 * refusal. Every cell is malloc'ed to its exact length, so AddressSanitizer
 * sees any read or write past one; lengths are odd on purpose (1, 31, 4097)
 * so ISA-L's tail code runs. The same file is also built as ec_chunk_test,
 * where ec.c calls ISA-L in 1000-byte pieces.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ec/ec.h"
#include "ec/tests/ec_ref.h"

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	/* xorshift64*: reproducible, so a failure replays the same way. */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ull;
}

static void fill(uint8_t *b, size_t len)
{
	for (size_t i = 0; i < len; i++)
		b[i] = (uint8_t)rnd();
}

/* A stripe: k + p cells of len bytes, each its own allocation. */
struct stripe {
	unsigned k, p, m;
	size_t len;
	uint8_t *cell[EC_CELLS_MAX];
};

static struct stripe *stripe_new(unsigned k, unsigned p, size_t len)
{
	struct stripe *s = calloc(1, sizeof(*s));

	assert_non_null(s);
	s->k = k;
	s->p = p;
	s->m = k + p;
	s->len = len;
	for (unsigned i = 0; i < s->m; i++) {
		s->cell[i] = malloc(len);
		assert_non_null(s->cell[i]);
	}
	return s;
}

static void stripe_free(struct stripe *s)
{
	for (unsigned i = 0; i < s->m; i++)
		free(s->cell[i]);
	free(s);
}

/* Random data, parity by the codec, and the parity checked against the
 * reference. */
static struct stripe *stripe_coded(struct ec_codec *c, size_t len)
{
	unsigned k = ec_codec_k(c), p = ec_codec_p(c);
	struct stripe *s = stripe_new(k, p, len), *ref = stripe_new(k, p, len);

	for (unsigned i = 0; i < k; i++)
		fill(s->cell[i], len);
	assert_int_equal(ec_encode(c, s->cell, s->cell + k, len), 0);
	ref_encode(k, p, s->cell, ref->cell + k, len);
	for (unsigned j = 0; j < p; j++)
		assert_memory_equal(s->cell[k + j], ref->cell[k + j], len);
	stripe_free(ref);
	return s;
}

static void stripe_copy(struct stripe *dst, const struct stripe *src)
{
	for (unsigned i = 0; i < src->m; i++)
		memcpy(dst->cell[i], src->cell[i], src->len);
}

static bool all_bytes(const uint8_t *b, size_t len, uint8_t v)
{
	for (size_t i = 0; i < len; i++)
		if (b[i] != v)
			return false;
	return true;
}

static struct ec_codec *codec(unsigned k, unsigned p)
{
	struct ec_codec *c = NULL;

	assert_int_equal(ec_codec_create(k, p, &c), 0);
	assert_non_null(c);
	return c;
}

static const struct {
	unsigned k, p;
} codes[] = {
    {2, 1}, {4, 2}, {8, 2}, /* the object classes */
    {1, 1}, {1, 4}, {3, 3}, {6, 3}, {10, 4}, {16, 4},
};
#define NCODES (sizeof(codes) / sizeof(codes[0]))

/* ---- the codec ---------------------------------------------------------- */

static void test_codec_create(void **state)
{
	struct ec_codec *c = (struct ec_codec *)0x1;

	assert_int_equal(ec_codec_create(0, 1, &c), -EINVAL);
	assert_int_equal(ec_codec_create(17, 1, &c), -EINVAL);
	assert_int_equal(ec_codec_create(2, 0, &c), -EINVAL);
	assert_int_equal(ec_codec_create(8, 5, &c), -EINVAL);
	assert_int_equal(ec_codec_create(100000, 100000, &c), -EINVAL);
	assert_ptr_equal(c, (struct ec_codec *)0x1); /* untouched on error */
	assert_int_equal(ec_codec_create(2, 1, NULL), -EINVAL);
	for (unsigned k = 1; k <= EC_K_MAX; k++)
		for (unsigned p = 1; p <= EC_P_MAX; p++) {
			c = codec(k, p);
			assert_int_equal(ec_codec_k(c), k);
			assert_int_equal(ec_codec_p(c), p);
			ec_codec_destroy(c);
		}
	ec_codec_destroy(NULL);
}

/* The parity bytes against the reference for every length up to 300 and a
 * few larger odd ones: every path of ISA-L's SIMD code and its tails. */
static void test_encode_reference(void **state)
{
	static const size_t big[] = {511, 1000, 4095, 4096, 4097, 65537};

	for (unsigned i = 0; i < NCODES; i++) {
		struct ec_codec *c = codec(codes[i].k, codes[i].p);

		for (size_t len = 1; len <= 300; len++)
			stripe_free(stripe_coded(c, len));
		for (unsigned j = 0; j < sizeof(big) / sizeof(big[0]); j++)
			stripe_free(stripe_coded(c, big[j]));
		ec_codec_destroy(c);
	}
}

/* One vector written down by hand, so that the reference itself is pinned:
 * for 2 + 1, the parity coefficients are 1/(2 xor 0) and 1/(2 xor 1), that
 * is 1/2 = 0x8e and 1/3 = 0xf4 in GF(2^8)/0x11d. */
static void test_encode_known_vector(void **state)
{
	struct ec_codec *c = codec(2, 1);
	uint8_t d0[4] = {1, 0, 2, 0xff}, d1[4] = {0, 1, 2, 0xff}, par[4];
	uint8_t *data[2] = {d0, d1}, *parity[1] = {par};

	/* 2 * 0x8e = 0x11c = 1 mod 0x11d; 3 * 0xf4 = 0xf4 ^ 0x1e8 = 0xf4 ^ 0xf5 = 1 */
	assert_int_equal(ref_inv(2), 0x8e);
	assert_int_equal(ref_inv(3), 0xf4);
	assert_int_equal(ec_encode(c, data, parity, 4), 0);
	assert_int_equal(par[0], 0x8e); /* 1/2 */
	assert_int_equal(par[1], 0xf4); /* 1/3 */
	assert_int_equal(par[2], 0xf4); /* 2/2 + 2/3 = 1 ^ 0xf5 */
	assert_int_equal(par[3], ref_mul(0xff, 0x8e ^ 0xf4));
	ec_codec_destroy(c);
}

static void test_encode_args(void **state)
{
	struct ec_codec *c = codec(4, 2);
	struct stripe *s = stripe_new(4, 2, 64);
	uint8_t *data[4], *parity[2];

	memcpy(data, s->cell, sizeof(data));
	memcpy(parity, s->cell + 4, sizeof(parity));
	memset(s->cell[4], 0x5a, 64);
	assert_int_equal(ec_encode(NULL, data, parity, 64), -EINVAL);
	assert_int_equal(ec_encode(c, NULL, parity, 64), -EINVAL);
	assert_int_equal(ec_encode(c, data, NULL, 64), -EINVAL);
	assert_int_equal(ec_encode(c, data, parity, 0), -EINVAL);
	data[3] = NULL;
	assert_int_equal(ec_encode(c, data, parity, 64), -EINVAL);
	data[3] = s->cell[3];
	parity[1] = NULL;
	assert_int_equal(ec_encode(c, data, parity, 64), -EINVAL);
	for (unsigned i = 0; i < 64; i++)
		assert_int_equal(s->cell[4][i], 0x5a); /* nothing written */
	stripe_free(s);
	ec_codec_destroy(c);
}

/* ---- rebuilding --------------------------------------------------------- */

/* Lose the cells of `lost` (garbage in their place), rebuild those of want
 * (a subset of lost), and compare the whole stripe with orig: rebuilt cells
 * equal, present cells unchanged, lost cells not wanted untouched. */
static void lose_and_rebuild(struct ec_codec *c, const struct stripe *orig, struct stripe *work,
			     uint32_t lost, uint32_t want, const struct ec_plan *plan)
{
	uint32_t all = (1u << orig->m) - 1;

	stripe_copy(work, orig);
	for (unsigned i = 0; i < orig->m; i++)
		if (lost & (1u << i))
			memset(work->cell[i], (int)(0xa5 ^ i), orig->len);
	if (plan)
		assert_int_equal(ec_plan_run(plan, work->cell, orig->len), 0);
	else
		assert_int_equal(ec_reconstruct(c, work->cell, all & ~lost, want, orig->len), 0);
	for (unsigned i = 0; i < orig->m; i++) {
		if (!(lost & (1u << i)) || (want & (1u << i))) {
			assert_memory_equal(work->cell[i], orig->cell[i], orig->len);
			continue;
		}
		assert_true(all_bytes(work->cell[i], orig->len, (uint8_t)(0xa5 ^ i)));
	}
}

/* Every pattern of 1..p lost cells, data and parity, for the codes above at
 * odd lengths: rebuild all of them, and (through a kept plan) only the
 * lowest-numbered one. */
static void test_reconstruct_every_pattern(void **state)
{
	static const size_t lens[] = {1, 31, 4097};

	for (unsigned i = 0; i < NCODES; i++) {
		struct ec_codec *c = codec(codes[i].k, codes[i].p);
		unsigned m = codes[i].k + codes[i].p;

		for (unsigned l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
			struct stripe *orig = stripe_coded(c, lens[l]);
			struct stripe *work = stripe_new(codes[i].k, codes[i].p, lens[l]);
			unsigned patterns = 0;

			for (uint32_t lost = 1; lost < (1u << m); lost++) {
				struct ec_plan plan;
				uint32_t lowest = lost & -lost;

				if ((unsigned)__builtin_popcount(lost) > codes[i].p)
					continue;
				patterns++;
				lose_and_rebuild(c, orig, work, lost, lost, NULL);
				assert_int_equal(
				    ec_plan_init(c, ((1u << m) - 1) & ~lost, lowest, &plan), 0);
				assert_int_equal(plan.nout, 1);
				lose_and_rebuild(c, orig, work, lost, lowest, &plan);
			}
			/* sum of C(m, e) for e = 1..p: 2+1 has 6, 8+2 has 55, 16+4 6195 */
			if (codes[i].k == 8 && codes[i].p == 2)
				assert_int_equal(patterns, 55);
			if (codes[i].k == 16 && codes[i].p == 4)
				assert_int_equal(patterns, 6195);
			stripe_free(work);
			stripe_free(orig);
		}
		ec_codec_destroy(c);
	}
}

/* For every supported (k, p) and every set of exactly k present cells: the
 * k x k matrix inverts (the plan is made) and the plan rebuilds the other p
 * cells of a coded stripe. This is the property the Cauchy matrix is chosen
 * for (ec.c), checked rather than trusted. */
static void test_every_submatrix(void **state)
{
	unsigned total = 0;

	for (unsigned k = 1; k <= EC_K_MAX; k++)
		for (unsigned p = 1; p <= EC_P_MAX; p++) {
			struct ec_codec *c = codec(k, p);
			struct stripe *orig = stripe_coded(c, 33);
			struct stripe *work = stripe_new(k, p, 33);
			uint32_t all = (1u << (k + p)) - 1;

			for (uint32_t present = 0; present <= all; present++) {
				struct ec_plan plan;

				if ((unsigned)__builtin_popcount(present) != k)
					continue;
				total++;
				assert_int_equal(ec_plan_init(c, present, all & ~present, &plan),
						 0);
				lose_and_rebuild(c, orig, work, all & ~present, all & ~present,
						 &plan);
			}
			stripe_free(work);
			stripe_free(orig);
			ec_codec_destroy(c);
		}
	/* sum over k = 1..16, p = 1..4 of C(k + p, p) */
	assert_int_equal(total, 26312);
}

/* More than p lost: -EIO, whatever is asked for, and nothing written. */
static void test_too_many_lost(void **state)
{
	for (unsigned i = 0; i < NCODES; i++) {
		unsigned k = codes[i].k, p = codes[i].p, m = k + p;
		struct ec_codec *c = codec(k, p);
		struct stripe *orig = stripe_coded(c, 31);
		struct stripe *work = stripe_new(k, p, 31);
		uint32_t all = (1u << m) - 1;
		unsigned refused = 0;

		for (uint32_t lost = 1; lost <= all; lost++) {
			struct ec_plan plan;

			/* Every pattern up to 12 cells; a sample of the 10^6 of 16 + 4. */
			if ((unsigned)__builtin_popcount(lost) <= p || (m > 12 && lost % 61))
				continue;
			refused++;
			stripe_copy(work, orig);
			for (unsigned j = 0; j < m; j++)
				if (lost & (1u << j))
					memset(work->cell[j], 0xee, 31);
			assert_int_equal(ec_reconstruct(c, work->cell, all & ~lost, lost, 31),
					 -EIO);
			assert_int_equal(
			    ec_reconstruct(c, work->cell, all & ~lost, lost & -lost, 31), -EIO);
			assert_int_equal(ec_plan_init(c, all & ~lost, 0, &plan), -EIO);
			for (unsigned j = 0; j < m; j++) {
				if (!(lost & (1u << j))) {
					assert_memory_equal(work->cell[j], orig->cell[j], 31);
					continue;
				}
				assert_true(all_bytes(work->cell[j], 31, 0xee));
			}
		}
		assert_true(refused > 0);
		stripe_free(work);
		stripe_free(orig);
		ec_codec_destroy(c);
	}
}

static void test_reconstruct_args(void **state)
{
	struct ec_codec *c = codec(4, 2);
	struct stripe *orig = stripe_coded(c, 100), *work = stripe_new(4, 2, 100);
	struct ec_plan plan;
	uint8_t *cells[EC_CELLS_MAX] = {0};
	uint32_t all = 0x3f, lost = 0x5; /* cells 0 and 2 */

	stripe_copy(work, orig);
	memset(work->cell[0], 0, 100);
	memset(work->cell[2], 0, 100);
	memcpy(cells, work->cell, sizeof(cells));
	assert_int_equal(ec_reconstruct(NULL, cells, all & ~lost, lost, 100), -EINVAL);
	assert_int_equal(ec_reconstruct(c, NULL, all & ~lost, lost, 100), -EINVAL);
	assert_int_equal(ec_reconstruct(c, cells, all & ~lost, lost, 0), -EINVAL);
	/* A bit past the stripe, in present or in want. */
	assert_int_equal(ec_reconstruct(c, cells, (all & ~lost) | 0x40, lost, 100), -EINVAL);
	assert_int_equal(ec_reconstruct(c, cells, all & ~lost, lost | 0x80000000u, 100), -EINVAL);
	/* A cell both present and wanted. */
	assert_int_equal(ec_reconstruct(c, cells, all & ~lost, lost | 0x2, 100), -EINVAL);
	/* Bad bits win over too few present. */
	assert_int_equal(ec_reconstruct(c, cells, 0x1, 0x100, 100), -EINVAL);
	/* A buffer the plan needs is NULL: one it reads, one it writes. */
	cells[1] = NULL;
	assert_int_equal(ec_reconstruct(c, cells, all & ~lost, lost, 100), -EINVAL);
	cells[1] = work->cell[1];
	cells[2] = NULL;
	assert_int_equal(ec_reconstruct(c, cells, all & ~lost, lost, 100), -EINVAL);
	for (unsigned b = 0; b < 100; b++)
		assert_int_equal(work->cell[0][b], 0); /* nothing written */
	/* A buffer the plan neither reads nor writes may be NULL: with cells
	 * 1, 3, 4, 5 present it reads 1, 3, 4, 5 and writes 0; 2 stays lost. */
	assert_int_equal(ec_reconstruct(c, cells, all & ~lost, 0x1, 100), 0);
	assert_memory_equal(work->cell[0], orig->cell[0], 100);
	/* When more than k are present, the lowest-numbered k are read: cell 5
	 * may then be NULL. */
	cells[2] = work->cell[2];
	memcpy(work->cell[2], orig->cell[2], 100);
	memset(work->cell[0], 0, 100);
	cells[5] = NULL;
	assert_int_equal(ec_reconstruct(c, cells, all & ~0x1u, 0x1, 100), 0);
	assert_memory_equal(work->cell[0], orig->cell[0], 100);
	cells[5] = work->cell[5];
	/* Nothing wanted: a plan that does nothing. */
	assert_int_equal(ec_plan_init(c, all & ~lost, 0, &plan), 0);
	assert_int_equal(plan.nout, 0);
	assert_int_equal(ec_reconstruct(c, cells, all & ~lost, 0, 100), 0);
	/* The plan's own argument checks. */
	assert_int_equal(ec_plan_init(NULL, all, 0, &plan), -EINVAL);
	assert_int_equal(ec_plan_init(c, all, 0, NULL), -EINVAL);
	assert_int_equal(ec_plan_init(c, all & ~lost, lost, &plan), 0);
	assert_int_equal(plan.src[0], 1);
	assert_int_equal(plan.src[1], 3);
	assert_int_equal(plan.src[2], 4);
	assert_int_equal(plan.src[3], 5);
	assert_int_equal(plan.out[0], 0);
	assert_int_equal(plan.out[1], 2);
	assert_int_equal(ec_plan_run(NULL, cells, 100), -EINVAL);
	assert_int_equal(ec_plan_run(&plan, NULL, 100), -EINVAL);
	assert_int_equal(ec_plan_run(&plan, cells, 0), -EINVAL);
	stripe_free(work);
	stripe_free(orig);
	ec_codec_destroy(c);
}

/* ---- partial-stripe updates --------------------------------------------- */

/* Random writes inside one cell: the parity ec_update leaves equals the
 * parity of the new stripe encoded from scratch. */
static void test_update_matches_encode(void **state)
{
	static const size_t cell_sizes[] = {1, 31, 4097, 10000};

	for (unsigned i = 0; i < NCODES; i++) {
		unsigned k = codes[i].k, p = codes[i].p;
		struct ec_codec *c = codec(k, p);

		for (unsigned z = 0; z < sizeof(cell_sizes) / sizeof(cell_sizes[0]); z++) {
			size_t cs = cell_sizes[z];
			struct stripe *s = stripe_coded(c, cs), *fresh = stripe_new(k, p, cs);
			uint8_t *newb = malloc(cs);

			assert_non_null(newb);
			for (unsigned t = 0; t < 50; t++) {
				unsigned cell = (unsigned)(rnd() % k);
				size_t o = (size_t)(rnd() % cs), n = 1 + (size_t)(rnd() % (cs - o));
				uint8_t *par[EC_P_MAX];

				if (t == 0) { /* the whole cell once */
					o = 0;
					n = cs;
				}
				for (unsigned j = 0; j < p; j++)
					par[j] = s->cell[k + j] + o;
				fill(newb, n);
				assert_int_equal(
				    ec_update(c, cell, s->cell[cell] + o, newb, par, n), 0);
				memcpy(s->cell[cell] + o, newb, n);
				assert_int_equal(ec_encode(c, s->cell, fresh->cell + k, cs), 0);
				for (unsigned j = 0; j < p; j++)
					assert_memory_equal(s->cell[k + j], fresh->cell[k + j], cs);
			}
			/* old == new: the parity does not move. */
			memcpy(fresh->cell[k], s->cell[k], cs);
			{
				uint8_t *par[EC_P_MAX];

				for (unsigned j = 0; j < p; j++)
					par[j] = s->cell[k + j];
				assert_int_equal(ec_update(c, 0, s->cell[0], s->cell[0], par, cs),
						 0);
			}
			assert_memory_equal(s->cell[k], fresh->cell[k], cs);
			free(newb);
			stripe_free(fresh);
			stripe_free(s);
		}
		ec_codec_destroy(c);
	}
}

/* A parity target's view: a delta applied to its one parity cell. */
static void test_update_delta_one_parity(void **state)
{
	struct ec_codec *c = codec(8, 2);
	size_t cs = 4097, o = 13, n = 3001;
	struct stripe *s = stripe_coded(c, cs), *fresh = stripe_new(8, 2, cs);
	uint8_t *newb = malloc(n), *delta = malloc(n), *keep = malloc(cs);
	uint8_t *par[EC_P_MAX] = {0};

	assert_non_null(newb);
	assert_non_null(delta);
	assert_non_null(keep);
	fill(newb, n);
	ec_delta(delta, s->cell[5] + o, newb, n);
	for (size_t b = 0; b < n; b++)
		assert_int_equal(delta[b], s->cell[5][o + b] ^ newb[b]);
	memcpy(s->cell[5] + o, newb, n);
	assert_int_equal(ec_encode(c, s->cell, fresh->cell + 8, cs), 0);

	/* Parity 1 only: parity 0 is not touched. */
	memcpy(keep, s->cell[8], cs);
	par[1] = s->cell[9] + o;
	assert_int_equal(ec_update_delta(c, 5, delta, par, n), 0);
	assert_memory_equal(s->cell[9], fresh->cell[9], cs);
	assert_memory_equal(s->cell[8], keep, cs);
	/* Then parity 0 on its own. */
	par[0] = s->cell[8] + o;
	par[1] = NULL;
	assert_int_equal(ec_update_delta(c, 5, delta, par, n), 0);
	assert_memory_equal(s->cell[8], fresh->cell[8], cs);
	/* All NULL: nothing to do. */
	par[0] = NULL;
	assert_int_equal(ec_update_delta(c, 5, delta, par, n), 0);

	/* ec_delta in place, over either input, and for lengths around a word. */
	for (size_t len = 0; len < 20; len++) {
		uint8_t a[20], b[20], x[20];

		fill(a, sizeof(a));
		fill(b, sizeof(b));
		for (size_t i = 0; i < len; i++)
			x[i] = a[i] ^ b[i];
		ec_delta(a, a, b, len);
		assert_memory_equal(a, x, len);
		ec_delta(b, x, b, len);
	}
	free(keep);
	free(delta);
	free(newb);
	stripe_free(fresh);
	stripe_free(s);
	ec_codec_destroy(c);
}

static void test_update_args(void **state)
{
	struct ec_codec *c = codec(4, 2);
	uint8_t old[8] = {0}, newb[8] = {1}, p0[8] = {7}, p1[8] = {7};
	uint8_t *par[2] = {p0, p1}, *half[2] = {p0, NULL};

	assert_int_equal(ec_update(NULL, 0, old, newb, par, 8), -EINVAL);
	assert_int_equal(ec_update(c, 4, old, newb, par, 8), -EINVAL); /* cell >= k */
	assert_int_equal(ec_update(c, 0, NULL, newb, par, 8), -EINVAL);
	assert_int_equal(ec_update(c, 0, old, NULL, par, 8), -EINVAL);
	assert_int_equal(ec_update(c, 0, old, newb, NULL, 8), -EINVAL);
	assert_int_equal(ec_update(c, 0, old, newb, half, 8), -EINVAL);
	assert_int_equal(ec_update(c, 0, old, newb, par, 0), -EINVAL);
	assert_int_equal(ec_update_delta(NULL, 0, newb, par, 8), -EINVAL);
	assert_int_equal(ec_update_delta(c, 4, newb, par, 8), -EINVAL);
	assert_int_equal(ec_update_delta(c, 0, NULL, par, 8), -EINVAL);
	assert_int_equal(ec_update_delta(c, 0, newb, NULL, 8), -EINVAL);
	assert_int_equal(ec_update_delta(c, 0, newb, par, 0), -EINVAL);
	assert_int_equal(p0[0], 7); /* nothing written */
	assert_int_equal(p1[0], 7);
	ec_codec_destroy(c);
}

/* ---- one codec, many threads --------------------------------------------- */

struct worker {
	struct ec_codec *c;
	uint64_t seed;
	int failures;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	unsigned k = ec_codec_k(w->c), p = ec_codec_p(w->c), m = k + p;
	size_t len = 3000 + (size_t)(w->seed % 100);
	uint8_t *orig[EC_CELLS_MAX], *work[EC_CELLS_MAX];
	uint64_t x = w->seed;

	for (unsigned i = 0; i < m; i++) {
		orig[i] = malloc(len);
		work[i] = malloc(len);
		if (!orig[i] || !work[i])
			abort();
	}
	for (unsigned i = 0; i < k; i++)
		for (size_t b = 0; b < len; b++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			orig[i][b] = (uint8_t)(x >> 56);
		}
	if (ec_encode(w->c, orig, orig + k, len) != 0)
		w->failures++;
	for (unsigned it = 0; it < 300; it++) {
		uint32_t lost = (1u << (it % m)) | (1u << ((it * 7 + 3) % m));

		for (unsigned i = 0; i < m; i++) {
			memcpy(work[i], orig[i], len);
			if (lost & (1u << i))
				memset(work[i], 0, len);
		}
		if (ec_reconstruct(w->c, work, ((1u << m) - 1) & ~lost, lost, len) != 0)
			w->failures++;
		for (unsigned i = 0; i < m; i++)
			if (memcmp(work[i], orig[i], len) != 0)
				w->failures++;
	}
	for (unsigned i = 0; i < m; i++) {
		free(orig[i]);
		free(work[i]);
	}
	return NULL;
}

static void test_threads_share_codec(void **state)
{
	struct ec_codec *c = codec(8, 2);
	struct worker w[4];
	pthread_t t[4];

	for (unsigned i = 0; i < 4; i++) {
		w[i] = (struct worker){.c = c, .seed = 1000 + i};
		assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
	}
	for (unsigned i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		assert_int_equal(w[i].failures, 0);
	}
	ec_codec_destroy(c);
}

/* ---- the stripe arithmetic ---------------------------------------------- */

static void check_range(unsigned k, uint64_t cs, uint64_t off, uint64_t len, long spans)
{
	const char *why = NULL;
	long n = ref_check_range(k, cs, off, len, &why);

	if (n < 0)
		fail_msg("k %u cs %llu off %llu len %llu: %s", k, (unsigned long long)cs,
			 (unsigned long long)off, (unsigned long long)len, why);
	if (spans >= 0)
		assert_int_equal(n, spans);
}

static void test_range_args(void **state)
{
	struct ec_range r;
	struct ec_span s;

	assert_int_equal(ec_range_init(NULL, 2, 4096, 0, 1), -EINVAL);
	assert_int_equal(ec_range_init(&r, 0, 4096, 0, 1), -EINVAL);
	assert_int_equal(ec_range_init(&r, EC_K_MAX + 1, 4096, 0, 1), -EINVAL);
	assert_int_equal(ec_range_init(&r, 2, 0, 0, 1), -EINVAL);
	assert_int_equal(ec_range_init(&r, 2, EC_CELL_MAX + 1, 0, 1), -EINVAL);
	assert_int_equal(ec_range_init(&r, 2, EC_CELL_MAX, 0, 1), 0);
	assert_int_equal(ec_range_init(&r, 2, 4096, UINT64_MAX, 1), -EOVERFLOW);
	assert_int_equal(ec_range_init(&r, 2, 4096, 1, UINT64_MAX), -EOVERFLOW);
	assert_int_equal(ec_range_init(&r, 2, 4096, 1ull << 63, 1ull << 63), -EOVERFLOW);
	assert_int_equal(ec_range_init(&r, 2, 4096, (1ull << 63) + 1, (1ull << 63) - 1),
			 -EOVERFLOW);
	assert_int_equal(ec_range_init(&r, 2, 4096, (1ull << 63) + 1, (1ull << 63) - 2), 0);
	assert_int_equal(r.end, UINT64_MAX);
	/* Zero length touches nothing, anywhere, the very end included. */
	assert_int_equal(ec_range_init(&r, 2, 4096, 12345, 0), 0);
	assert_false(ec_range_next(&r, &s));
	assert_int_equal(ec_range_init(&r, 2, 4096, UINT64_MAX, 0), 0);
	assert_false(ec_range_next(&r, &s));
	check_range(3, 7, 0, 0, 0);
}

static void test_range_shapes(void **state)
{
	struct ec_range r;
	struct ec_span s;

	/* Inside one cell: 4 + 2 of 4 KiB, bytes 100..109. */
	assert_int_equal(ec_range_init(&r, 4, 4096, 100, 10), 0);
	assert_true(ec_range_next(&r, &s));
	assert_int_equal(s.stripe, 0);
	assert_int_equal(s.first_cell, 0);
	assert_int_equal(s.last_cell, 0);
	assert_int_equal(s.cell_off[0], 100);
	assert_int_equal(s.cell_len[0], 10);
	assert_int_equal(s.parity_off, 100);
	assert_int_equal(s.parity_len, 10);
	assert_false(s.full);
	assert_false(ec_range_next(&r, &s));

	/* Across a cell boundary: 96 bytes of cell 0, 104 of cell 1. */
	assert_int_equal(ec_range_init(&r, 4, 4096, 4000, 200), 0);
	assert_true(ec_range_next(&r, &s));
	assert_int_equal(s.first_cell, 0);
	assert_int_equal(s.last_cell, 1);
	assert_int_equal(s.cell_off[0], 4000);
	assert_int_equal(s.cell_len[0], 96);
	assert_int_equal(s.cell_off[1], 0);
	assert_int_equal(s.cell_len[1], 104);
	assert_int_equal(s.cell_buf[1], 96);
	assert_int_equal(s.parity_off, 0);
	assert_int_equal(s.parity_len, 4096);
	assert_false(ec_range_next(&r, &s));

	/* 2 cells of 10 bytes (stripes of 20): [15, 45) is a tail of stripe 0,
	 * all of stripe 1, the head of stripe 2. */
	assert_int_equal(ec_range_init(&r, 2, 10, 15, 30), 0);
	assert_true(ec_range_next(&r, &s));
	assert_int_equal(s.stripe, 0);
	assert_int_equal(s.len, 5);
	assert_int_equal(s.first_cell, 1);
	assert_int_equal(s.cell_off[1], 5);
	assert_int_equal(s.cell_len[0], 0);
	assert_false(s.full);
	assert_true(ec_range_next(&r, &s));
	assert_int_equal(s.stripe, 1);
	assert_int_equal(s.obj_off, 20);
	assert_int_equal(s.buf_off, 5);
	assert_int_equal(s.len, 20);
	assert_true(s.full);
	assert_int_equal(s.cell_buf[1], 15);
	assert_true(ec_range_next(&r, &s));
	assert_int_equal(s.stripe, 2);
	assert_int_equal(s.len, 5);
	assert_int_equal(s.last_cell, 0);
	assert_int_equal(s.cell_len[0], 5);
	assert_false(s.full);
	assert_false(ec_range_next(&r, &s));

	/* Exactly one stripe, and exactly two. */
	check_range(8, 4096, 8 * 4096, 8 * 4096, 1);
	check_range(8, 4096, 8 * 4096, 16 * 4096, 2);
	/* One byte short at either end. */
	check_range(8, 4096, 8 * 4096 + 1, 8 * 4096 - 1, 1);
	check_range(8, 4096, 8 * 4096, 8 * 4096 - 1, 1);
	check_range(8, 4096, 8 * 4096 - 1, 8 * 4096 + 2, 3);
	/* Cell sizes that are not powers of two. */
	check_range(3, 1000, 2999, 3002, 3);
	check_range(5, 3, 0, 1000, 67);
	check_range(1, 1, 5, 10, 10);
	check_range(16, EC_CELL_MAX, 0, 3, 1);
	check_range(16, EC_CELL_MAX, 16 * EC_CELL_MAX - 1, 2, 2);
}

/* The top of the offset space: near 2^63, and the last bytes below 2^64,
 * where the last stripe's end does not fit in 64 bits. */
static void test_range_far(void **state)
{
	struct ec_range r;
	struct ec_span s;
	const uint64_t h = 1ull << 63;

	check_range(8, 4096, h - 5, 10, 2); /* 2^63 is a stripe boundary */
	check_range(8, 4096, h + 5, 10, 1);
	check_range(3, 4096, h - 5, 10, 1); /* 3 * 4096 does not divide 2^63 */
	check_range(8, 4096, h - 5, 8 * 4096 + 10, -1);
	check_range(3, 1000, h - 1, 2, -1);
	check_range(4, 4096, UINT64_MAX - 100, 100, -1);
	check_range(3, 7, UINT64_MAX - 1, 1, 1);
	check_range(16, EC_CELL_MAX, UINT64_MAX - 3 * EC_CELL_MAX, 3 * EC_CELL_MAX, -1);
	check_range(16, EC_CELL_MAX, UINT64_MAX - 40 * EC_CELL_MAX, 40 * EC_CELL_MAX, -1);
	/* The whole offset space is a valid range (too long to walk here). */
	assert_int_equal(ec_range_init(&r, 2, 4096, 0, UINT64_MAX), 0);
	assert_true(ec_range_next(&r, &s));
	assert_true(s.full);
	assert_int_equal(s.len, 8192);

	/* The last byte: 2^64 - 2 with 3 cells of 7 (stripes of 21). */
	assert_int_equal(ec_range_init(&r, 3, 7, UINT64_MAX - 1, 1), 0);
	assert_true(ec_range_next(&r, &s));
	assert_int_equal(s.stripe, (UINT64_MAX - 1) / 21);
	assert_int_equal(s.first_cell, ((UINT64_MAX - 1) % 21) / 7);
	assert_int_equal(s.cell_off[s.first_cell], (UINT64_MAX - 1) % 7);
	assert_false(ec_range_next(&r, &s));
}

/* Random ranges against the byte-level layout: small cells so that ranges
 * cross many cells and stripes, offsets anywhere, near 2^63 and near 2^64. */
static void test_range_random(void **state)
{
	for (unsigned t = 0; t < 20000; t++) {
		unsigned k = 1 + (unsigned)(rnd() % EC_K_MAX);
		uint64_t cs = 1 + rnd() % 50, len = rnd() % 600, off;

		switch (t % 4) {
		case 0:
			off = rnd() % 5000;
			break;
		case 1:
			off = (1ull << 63) - 300 + rnd() % 600;
			break;
		case 2:
			off = UINT64_MAX - len - rnd() % 300;
			break;
		default:
			off = rnd();
			if (len > UINT64_MAX - off)
				len = UINT64_MAX - off;
		}
		check_range(k, cs, off, len, -1);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_codec_create),
	    cmocka_unit_test(test_encode_reference),
	    cmocka_unit_test(test_encode_known_vector),
	    cmocka_unit_test(test_encode_args),
	    cmocka_unit_test(test_reconstruct_every_pattern),
	    cmocka_unit_test(test_every_submatrix),
	    cmocka_unit_test(test_too_many_lost),
	    cmocka_unit_test(test_reconstruct_args),
	    cmocka_unit_test(test_update_matches_encode),
	    cmocka_unit_test(test_update_delta_one_parity),
	    cmocka_unit_test(test_update_args),
	    cmocka_unit_test(test_threads_share_codec),
	    cmocka_unit_test(test_range_args),
	    cmocka_unit_test(test_range_shapes),
	    cmocka_unit_test(test_range_far),
	    cmocka_unit_test(test_range_random),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
