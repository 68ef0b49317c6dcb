/*
 * Long random sequences of engine operations checked read by read against
 * the reference model in test_util.c: single-value updates (same-epoch
 * replacements included), byte-array writes, punches at every level,
 * snapshots created and destroyed, aggregation, close and reopen.
 *
 * Epochs come from one counter that only grows. Updates are issued
 * asynchronously in batches of random size; reads run once a batch has
 * completed. After an aggregation at current epoch C, reads are checked at
 * live snapshots and at epochs >= C only: aggregation may drop what only
 * older, unsnapshotted epochs could see.
 *
 * Each case prints its seed; LODE_TEST_SEED overrides it and
 * LODE_MODEL_OPS the number of operations, so a failure reported as
 * "seed S op N" reproduces with LODE_TEST_SEED=S LODE_MODEL_OPS=N+1.
 */
#include "test_util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOBJ 4
#define NDKEY 8 /* dkey 7 is LODE_KEY_MAX bytes long, dkey 3 a few hundred */
#define NAKEY 4 /* akeys 0, 2: single values; 1, 3: byte arrays */
#define ARR_SPACE (192u << 10)
#define MAX_SNAPS 8

/* The probabilities of each step, in thousandths; the rest is a read phase. */
struct mix {
	unsigned sv, arr, range_punch, akey_punch, dkey_punch, obj_punch, replace, snap_create,
		snap_destroy, aggregate, reopen;
};

struct run {
	struct tu_fix *f;
	struct tu_model *m;
	struct tu_rng rng;
	uint64_t seed;
	unsigned long op, nops;
	lode_epoch_t epoch; /* the last epoch used */
	lode_epoch_t floor; /* non-snapshot reads below this are not checked */
	lode_epoch_t snaps[MAX_SNAPS];
	unsigned nsnap;
	struct tu_io io;
	unsigned pending, batch_limit;
	unsigned long reads, aggregations, reopens, snapshots;
	char ctx[160];
};

static uint64_t rnd(struct run *r, uint64_t lo, uint64_t hi)
{
	return tu_rand_range(&r->rng, lo, hi);
}

static const char *ctx(struct run *r)
{
	snprintf(r->ctx, sizeof(r->ctx), "%s seed %" PRIu64 " op %lu", tu_mode_name(r->f->mode),
		 r->seed, r->op);
	return r->ctx;
}

static void flush(struct run *r)
{
	if (r->pending)
		tu_io_wait(r->f->tgt, &r->io);
	r->pending = 0;
}

static uint32_t sv_len(struct run *r)
{
	unsigned p = (unsigned)rnd(r, 0, 99);

	if (p < 50)
		return (uint32_t)rnd(r, 1, 64);
	if (p < 90)
		return (uint32_t)rnd(r, 65, 16384);
	return (uint32_t)rnd(r, 16385, 200000);
}

static void arr_extent(struct run *r, uint64_t *off, uint32_t *len)
{
	unsigned p = (unsigned)rnd(r, 0, 99);

	*off = rnd(r, 0, ARR_SPACE - 1);
	if (p < 20)
		*off &= ~4095ull; /* block aligned */
	if (p < 70)
		*len = (uint32_t)rnd(r, 1, 4096);
	else if (p < 95)
		*len = (uint32_t)rnd(r, 4097, 32768);
	else
		*len = (uint32_t)rnd(r, 32769, 131072);
}

/* An epoch whose view is still guaranteed to be intact. */
static lode_epoch_t read_epoch(struct run *r)
{
	unsigned p = (unsigned)rnd(r, 0, 99);

	if (p < 30)
		return LODE_EPOCH_MAX;
	if (p < 50 && r->nsnap)
		return r->snaps[rnd(r, 0, r->nsnap - 1)];
	return rnd(r, r->floor, r->epoch ? r->epoch : 1);
}

static void check_one(struct run *r, unsigned o, unsigned d, unsigned a, lode_epoch_t e,
		      bool whole)
{
	struct eng_target *t = r->f->tgt;
	bool async = rnd(r, 0, 1);

	r->reads++;
	if (!tu_akey_is_arr(a)) {
		tu_check_sv(t, &r->f->cont, r->m, o, d, a, e, async, ctx(r));
		return;
	}
	uint64_t off = whole ? 0 : rnd(r, 0, ARR_SPACE + 8192);
	uint32_t len = whole ? ARR_SPACE + 131072 : (uint32_t)rnd(r, 1, 40000);

	tu_check_arr(t, &r->f->cont, r->m, o, d, a, e, off, len, async, ctx(r));
	if (whole || rnd(r, 0, 3) == 0)
		tu_check_arr_size(t, &r->f->cont, r->m, o, d, a, e, ctx(r));
}

static void random_reads(struct run *r, unsigned n)
{
	flush(r);
	for (unsigned i = 0; i < n; i++)
		check_one(r, (unsigned)rnd(r, 0, NOBJ - 1), (unsigned)rnd(r, 0, NDKEY - 1),
			  (unsigned)rnd(r, 0, NAKEY - 1), read_epoch(r), false);
	if (rnd(r, 0, 49) == 0)
		tu_check_lists(r->f->tgt, &r->f->cont, r->m, read_epoch(r),
			       (size_t)rnd(r, 2 + LODE_KEY_MAX, 8192), ctx(r));
}

/* Every akey at the latest epoch and at every live snapshot. */
static void sweep(struct run *r)
{
	lode_epoch_t eps[MAX_SNAPS + 1];
	unsigned n = 0;

	flush(r);
	eps[n++] = LODE_EPOCH_MAX;
	for (unsigned i = 0; i < r->nsnap; i++)
		eps[n++] = r->snaps[i];
	for (unsigned i = 0; i < n; i++)
		for (unsigned o = 0; o < NOBJ; o++)
			for (unsigned d = 0; d < NDKEY; d++)
				for (unsigned a = 0; a < NAKEY; a++)
					check_one(r, o, d, a, eps[i], false);
	tu_check_lists(r->f->tgt, &r->f->cont, r->m, LODE_EPOCH_MAX, 2 + LODE_KEY_MAX, ctx(r));
}

static void check_snap_list(struct run *r)
{
	lode_epoch_t got[MAX_SNAPS + 1], want[MAX_SNAPS];
	int n = eng_snap_list(r->f->tgt, &r->f->cont, got, MAX_SNAPS + 1);

	memcpy(want, r->snaps, sizeof(want));
	/* the model keeps them in creation order, which is ascending */
	if (n != (int)r->nsnap)
		fail_msg("%s: eng_snap_list returned %d, expected %u", ctx(r), n, r->nsnap);
	for (unsigned i = 0; i < r->nsnap; i++)
		if (got[i] != want[i])
			fail_msg("%s: snapshot %u is %" PRIu64 ", expected %" PRIu64, ctx(r), i,
				 got[i], want[i]);
}

static void step(struct run *r, const struct mix *mx)
{
	struct eng_target *t = r->f->tgt;
	const struct lode_uuid *c = &r->f->cont;
	unsigned o = (unsigned)rnd(r, 0, NOBJ - 1), d = (unsigned)rnd(r, 0, NDKEY - 1);
	unsigned a = (unsigned)rnd(r, 0, NAKEY - 1);
	unsigned p = (unsigned)rnd(r, 0, 999), acc = 0;
	uint64_t seed = tu_rand(&r->rng);
	uint64_t off;
	uint32_t len;

#define PICK(field) (acc += mx->field, p < acc)
	if (PICK(sv)) {
		a &= ~1u;
		tu_do_sv(t, c, r->m, o, d, a, ++r->epoch, sv_len(r), seed, &r->io);
		r->pending++;
	} else if (PICK(arr)) {
		a |= 1u;
		arr_extent(r, &off, &len);
		tu_do_arr(t, c, r->m, o, d, a, ++r->epoch, off, len, seed, &r->io);
		r->pending++;
	} else if (PICK(range_punch)) {
		a |= 1u;
		off = rnd(r, 0, ARR_SPACE);
		tu_do_punch(t, c, r->m, TU_PUNCH_RANGE, o, d, a, ++r->epoch, off,
			    rnd(r, 1, 65536), &r->io);
		r->pending++;
	} else if (PICK(akey_punch)) {
		tu_do_punch(t, c, r->m, TU_PUNCH_AKEY, o, d, a, ++r->epoch, 0, 0, &r->io);
		r->pending++;
	} else if (PICK(dkey_punch)) {
		tu_do_punch(t, c, r->m, TU_PUNCH_DKEY, o, d, a, ++r->epoch, 0, 0, &r->io);
		r->pending++;
	} else if (PICK(obj_punch)) {
		tu_do_punch(t, c, r->m, TU_PUNCH_OBJ, o, d, a, ++r->epoch, 0, 0, &r->io);
		r->pending++;
	} else if (PICK(replace)) {
		/* two updates at one epoch, one after the other: the second wins */
		flush(r);
		a &= ~1u;
		++r->epoch;
		tu_do_sv(t, c, r->m, o, d, a, r->epoch, sv_len(r), seed, NULL);
		tu_do_sv(t, c, r->m, o, d, a, r->epoch, sv_len(r), seed + 1, NULL);
		check_one(r, o, d, a, r->epoch, false);
		check_one(r, o, d, a, LODE_EPOCH_MAX, false);
	} else if (PICK(snap_create)) {
		flush(r);
		if (r->nsnap == MAX_SNAPS)
			return;
		r->snaps[r->nsnap++] = ++r->epoch;
		r->snapshots++;
		assert_int_equal(eng_snap_create(t, c, r->epoch), 0);
		assert_int_equal(eng_snap_create(t, c, r->epoch), -EEXIST);
	} else if (PICK(snap_destroy)) {
		flush(r);
		if (!r->nsnap) {
			assert_int_equal(eng_snap_destroy(t, c, r->epoch + 1000), -LODE_ENOSNAP);
			return;
		}
		unsigned i = (unsigned)rnd(r, 0, r->nsnap - 1);
		int rc = eng_snap_destroy(t, c, r->snaps[i]);
		if (rc != 0)
			fail_msg("%s: eng_snap_destroy(%" PRIu64 "): %d (%s)", ctx(r), r->snaps[i],
				 rc, lode_strerror(rc));
		memmove(&r->snaps[i], &r->snaps[i + 1], (r->nsnap - i - 1) * sizeof(r->snaps[0]));
		r->nsnap--;
		check_snap_list(r);
	} else if (PICK(aggregate)) {
		flush(r);
		unsigned q = (unsigned)rnd(r, 0, 3);
		lode_epoch_t hi = q < 2 ? LODE_EPOCH_MAX : q == 2 ? r->epoch : rnd(r, 1, r->epoch + 1);
		int rc = eng_aggregate(t, c, hi);

		if (rc != 0)
			fail_msg("%s: eng_aggregate(%" PRIu64 "): %d (%s)", ctx(r), hi, rc,
				 lode_strerror(rc));
		r->aggregations++;
		r->floor = r->epoch ? r->epoch : 1;
		sweep(r);
	} else if (PICK(reopen)) {
		flush(r);
		tu_fix_reopen(r->f);
		r->reopens++;
		check_snap_list(r);
		sweep(r);
	} else {
		/* a read phase */
		random_reads(r, (unsigned)rnd(r, 1, 8));
	}
#undef PICK
	if (r->pending >= r->batch_limit) {
		flush(r);
		r->batch_limit = (unsigned)rnd(r, 1, 64);
		random_reads(r, (unsigned)rnd(r, 1, 6));
	}
}

static void run_model(struct tu_fix *f, uint64_t default_seed, unsigned long default_ops,
		      const struct mix *mx)
{
	struct run r;

	memset(&r, 0, sizeof(r));
	r.f = f;
	r.seed = tu_seed_from_env(default_seed);
	r.nops = tu_env_u64("LODE_MODEL_OPS", default_ops);
	r.m = tu_model_new(NOBJ, NDKEY, NAKEY);
	r.floor = 1;
	r.batch_limit = 16;
	tu_rng_seed(&r.rng, r.seed);
	print_message("model: mode %s seed %" PRIu64 " ops %lu (LODE_TEST_SEED, "
		      "LODE_MODEL_OPS)\n",
		      tu_mode_name(f->mode), r.seed, r.nops);
	for (r.op = 0; r.op < r.nops; r.op++)
		step(&r, mx);
	flush(&r);
	r.op = r.nops;
	sweep(&r);
	/* the whole address space of every array once, at the latest epoch */
	for (unsigned o = 0; o < NOBJ; o++)
		for (unsigned d = 0; d < NDKEY; d++)
			for (unsigned a = 1; a < NAKEY; a += 2)
				check_one(&r, o, d, a, LODE_EPOCH_MAX, true);
	tu_fix_reopen(f);
	check_snap_list(&r);
	sweep(&r);
	print_message("model: %lu reads, %lu snapshots, %lu aggregations, %lu reopens, last "
		      "epoch %" PRIu64 "\n",
		      r.reads, r.snapshots, r.aggregations, r.reopens, r.epoch);
	tu_model_free(r.m);
}

/* Mostly data, some punches, occasional maintenance. */
static void test_model_data(void **state)
{
	static const struct mix mx = {.sv = 420, .arr = 420, .range_punch = 50, .akey_punch = 25,
				      .dkey_punch = 10, .obj_punch = 4, .replace = 10,
				      .snap_create = 5, .snap_destroy = 4, .aggregate = 3,
				      .reopen = 1};
	struct tu_fix *f = *state;

	run_model(f, f->mode == ENG_MODE_RAM ? 1001 : 2002, 25000, &mx);
}

/* Punches, snapshots, aggregation and reopening much more often. */
static void test_model_maintenance(void **state)
{
	static const struct mix mx = {.sv = 300, .arr = 300, .range_punch = 100, .akey_punch = 70,
				      .dkey_punch = 45, .obj_punch = 20, .replace = 20,
				      .snap_create = 20, .snap_destroy = 15, .aggregate = 15,
				      .reopen = 5};
	struct tu_fix *f = *state;

	run_model(f, f->mode == ENG_MODE_RAM ? 3003 : 4004, 10000, &mx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TU_BOTH_MODES(test_model_data),
		TU_BOTH_MODES(test_model_maintenance),
	};

	tu_main_init();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
