/*
 * The engine's API against its contract in engine.h: every documented error
 * code for bad arguments, then the semantics (single values, byte arrays,
 * epochs, punches, snapshots, aggregation, containers, enumeration and
 * resumable anchors, asynchronous completion and callbacks that queue more
 * work, buffers never written past their end, targets on several threads,
 * persistence across close and open), each run on a RAM-mode and a
 * disk-mode target. Expected values of the richer cases come from the
 * reference model in test_util.c.
 */
#include "test_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* A pointer to a key built in place (lives until the end of the block). */
#define KEYP(...) (&(struct eng_key[1]){tu_key(__VA_ARGS__)}[0])

static struct tu_fix *fixture(void **state)
{
	return *state;
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	assert_non_null(p);
	return p;
}

/* Write a single value of len pattern bytes (seed), blocking, expecting 0. */
static void sv_put(struct eng_target *t, const struct eng_key *k, lode_epoch_t e, uint32_t len,
		   uint64_t seed)
{
	uint8_t *b = xmalloc(len);
	int rc;

	tu_pat_fill(b, len, seed, 0);
	rc = eng_sv_update(t, k, e, b, len, NULL, NULL);
	free(b);
	if (rc != 0)
		fail_msg("eng_sv_update len %u @%llu: %d (%s)", len, (unsigned long long)e, rc,
			 lode_strerror(rc));
}

/* Fetch a single value and expect exactly len pattern bytes (seed). */
static void sv_expect(struct eng_target *t, const struct eng_key *k, lode_epoch_t e, uint32_t len,
		      uint64_t seed, bool async)
{
	uint32_t cap = len + 32, got = 0;
	uint8_t *b = xmalloc(cap);
	int rc;

	memset(b, 0xee, cap);
	if (async)
		rc = tu_sv_fetch_wait(t, k, e, b, cap, &got);
	else
		rc = eng_sv_fetch(t, k, e, b, cap, &got, NULL, NULL);
	if (rc != 0 || got != len) {
		free(b);
		fail_msg("eng_sv_fetch @%llu: rc %d (%s) len %u, expected 0 and len %u",
			 (unsigned long long)e, rc, lode_strerror(rc), got, len);
	}
	long bad = tu_pat_check(b, len, seed, 0);
	free(b);
	if (bad >= 0)
		fail_msg("eng_sv_fetch @%llu len %u: byte %ld differs", (unsigned long long)e, len,
			 bad);
}

static int sv_fetch_rc(struct eng_target *t, const struct eng_key *k, lode_epoch_t e)
{
	uint8_t b[64];
	uint32_t got;

	return eng_sv_fetch(t, k, e, b, sizeof(b), &got, NULL, NULL);
}

static int arr_fetch_rc(struct eng_target *t, const struct eng_key *k, lode_epoch_t e)
{
	uint8_t b[64];

	return eng_arr_fetch(t, k, e, 0, b, sizeof(b), NULL, NULL);
}

static struct eng_stats stats(struct eng_target *t)
{
	struct eng_stats st;

	memset(&st, 0xff, sizeof(st));
	assert_int_equal(eng_tgt_stats(t, &st), 0);
	return st;
}

/* Let queued work (frees after aggregation, a pending commit) finish. */
static void settle(struct eng_target *t)
{
	for (int i = 0; i < 1000 && eng_inflight(t); i++)
		assert_true(eng_progress(t) >= 0);
	assert_true(eng_progress(t) >= 0);
}

/* ==== argument validation ================================================= */

/*
 * A NULL target must give -EFAULT. Run in a forked child with plain checks
 * (no cmocka there), so that a crash fails this test alone.
 */
static int null_target_child(struct tu_fix *f)
{
	struct eng_key k = tu_key(&f->cont, tu_oid(1), "d", "a");
	struct eng_stats st;
	uint8_t b[8] = {1};
	uint32_t len;
	uint64_t size;
	struct lode_uuid l[2];
	lode_epoch_t eps[2];
	struct eng_anchor anchor = ENG_ANCHOR_INIT;
	struct lode_oid oids[2];
	int bad = 0;
#define NULL_TGT(call)                                                                \
	do {                                                                            \
		int rc_ = (call);                                                       \
		if (rc_ != -EFAULT) {                                                   \
			fprintf(stderr, "%s: got %d, expected -EFAULT\n", #call, rc_);  \
			bad++;                                                          \
		}                                                                       \
	} while (0)

	NULL_TGT(eng_progress(NULL));
	NULL_TGT(eng_tgt_close(NULL));
	NULL_TGT(eng_cont_create(NULL, &f->cont));
	NULL_TGT(eng_cont_destroy(NULL, &f->cont));
	NULL_TGT(eng_cont_list(NULL, l, 2));
	NULL_TGT(eng_snap_create(NULL, &f->cont, 5));
	NULL_TGT(eng_snap_destroy(NULL, &f->cont, 5));
	NULL_TGT(eng_snap_list(NULL, &f->cont, eps, 2));
	NULL_TGT(eng_sv_update(NULL, &k, 1, b, sizeof(b), NULL, NULL));
	NULL_TGT(eng_sv_fetch(NULL, &k, 1, b, sizeof(b), &len, NULL, NULL));
	NULL_TGT(eng_arr_update(NULL, &k, 1, 0, b, sizeof(b), NULL, NULL));
	NULL_TGT(eng_arr_fetch(NULL, &k, 1, 0, b, sizeof(b), NULL, NULL));
	NULL_TGT(eng_arr_size(NULL, &k, 1, &size));
	NULL_TGT(eng_obj_punch(NULL, &k, 1, NULL, NULL));
	NULL_TGT(eng_dkey_punch(NULL, &k, 1, NULL, NULL));
	NULL_TGT(eng_akey_punch(NULL, &k, 1, NULL, NULL));
	NULL_TGT(eng_arr_punch(NULL, &k, 1, 0, 1, NULL, NULL));
	NULL_TGT(eng_obj_list(NULL, &f->cont, 1, &anchor, oids, 2));
	NULL_TGT(eng_dkey_list(NULL, &k, 1, &anchor, b, sizeof(b)));
	NULL_TGT(eng_akey_list(NULL, &k, 1, &anchor, b, sizeof(b)));
	NULL_TGT(eng_aggregate(NULL, &f->cont, 1));
	NULL_TGT(eng_tgt_stats(NULL, &st));
#undef NULL_TGT
	return bad;
}

static void null_target_checks(struct tu_fix *f)
{
	int status;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(null_target_child(f) ? 3 : 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status))
		fail_msg("a call with a NULL target crashed (signal %d); expected -EFAULT",
			 WTERMSIG(status));
	if (WEXITSTATUS(status) == 3)
		fail_msg("calls with a NULL target did not return -EFAULT (see above)");
	if (WEXITSTATUS(status) != 0)
		fail_msg("a call with a NULL target crashed (exit %d, sanitizer report above); "
			 "expected -EFAULT",
			 WEXITSTATUS(status));
}

static void test_open_args(void **state)
{
	struct tu_fix *f = fixture(state);
	struct eng_tgt_opts o = f->opts;
	struct eng_target *t = NULL;
	struct eng_key k = tu_key(&f->cont, tu_oid(1), "d", "a");
	char *second = tu_path_join(f->dir, "second");

	assert_int_equal(eng_tgt_open(NULL, &t), -EFAULT);
	assert_int_equal(eng_tgt_open(&o, NULL), -EFAULT);
	o.path = NULL;
	assert_int_equal(eng_tgt_open(&o, &t), -EFAULT);
	o.path = second;
	o.mode = (enum eng_mode)7;
	assert_int_equal(eng_tgt_open(&o, &t), -EINVAL);

	/* a required target pointer: checked in a child, so a crash is reported cleanly */
	null_target_checks(f);

	/* a second, independent target beside the first */
	o.mode = f->mode;
	assert_int_equal(eng_tgt_open(&o, &t), 0);
	assert_non_null(t);
	struct lode_uuid l[2];
	assert_int_equal(eng_cont_list(t, l, 2), 0);
	assert_int_equal(eng_cont_create(t, &f->cont), 0);
	sv_put(t, &k, 3, 100, 7);
	assert_int_equal(eng_tgt_close(t), 0);
	assert_int_equal(sv_fetch_rc(f->tgt, &k, LODE_EPOCH_MAX), -ENOENT);
	assert_int_equal(eng_tgt_open(&o, &t), 0);
	sv_expect(t, &k, LODE_EPOCH_MAX, 100, 7, false);
	assert_int_equal(eng_tgt_close(t), 0);
	free(second);
}

enum op {
	OP_SV_UPDATE,
	OP_SV_FETCH,
	OP_ARR_UPDATE,
	OP_ARR_FETCH,
	OP_ARR_SIZE,
	OP_OBJ_PUNCH,
	OP_DKEY_PUNCH,
	OP_AKEY_PUNCH,
	OP_ARR_PUNCH,
	OP_DKEY_LIST,
	OP_AKEY_LIST,
	OP_COUNT,
};

static const char *const op_names[OP_COUNT] = {
	"sv_update", "sv_fetch",  "arr_update", "arr_fetch", "arr_size", "obj_punch",
	"dkey_punch", "akey_punch", "arr_punch", "dkey_list", "akey_list",
};

static bool op_uses_dkey(enum op op)
{
	return op != OP_OBJ_PUNCH && op != OP_DKEY_LIST;
}

static bool op_uses_akey(enum op op)
{
	return op_uses_dkey(op) && op != OP_DKEY_PUNCH && op != OP_AKEY_LIST;
}

static bool op_async(enum op op)
{
	return op != OP_ARR_SIZE && op != OP_DKEY_LIST && op != OP_AKEY_LIST;
}

/*
 * Run op on key with otherwise valid arguments; with async, through a
 * callback. Returns what the operation returned (or completed with).
 */
static int run_op(struct eng_target *t, enum op op, const struct eng_key *k, bool async)
{
	static uint8_t buf[4096];
	struct eng_anchor anchor = ENG_ANCHOR_INIT;
	struct tu_op top = {0};
	eng_cb_t cb = async ? tu_op_cb : NULL;
	void *arg = async ? &top : NULL;
	uint64_t size;
	uint32_t len;
	int rc = 0;

	switch (op) {
	case OP_SV_UPDATE:
		rc = eng_sv_update(t, k, 5, buf, 10, cb, arg);
		break;
	case OP_SV_FETCH:
		rc = eng_sv_fetch(t, k, LODE_EPOCH_MAX, buf, sizeof(buf), &len, cb, arg);
		break;
	case OP_ARR_UPDATE:
		rc = eng_arr_update(t, k, 5, 0, buf, 10, cb, arg);
		break;
	case OP_ARR_FETCH:
		rc = eng_arr_fetch(t, k, LODE_EPOCH_MAX, 0, buf, 10, cb, arg);
		break;
	case OP_ARR_SIZE:
		return eng_arr_size(t, k, LODE_EPOCH_MAX, &size);
	case OP_OBJ_PUNCH:
		rc = eng_obj_punch(t, k, 5, cb, arg);
		break;
	case OP_DKEY_PUNCH:
		rc = eng_dkey_punch(t, k, 5, cb, arg);
		break;
	case OP_AKEY_PUNCH:
		rc = eng_akey_punch(t, k, 5, cb, arg);
		break;
	case OP_ARR_PUNCH:
		rc = eng_arr_punch(t, k, 5, 0, 10, cb, arg);
		break;
	case OP_DKEY_LIST:
		return eng_dkey_list(t, k, LODE_EPOCH_MAX, &anchor, buf, sizeof(buf));
	case OP_AKEY_LIST:
		return eng_akey_list(t, k, LODE_EPOCH_MAX, &anchor, buf, sizeof(buf));
	case OP_COUNT:
		break;
	}
	return async ? tu_op_finish(t, &top, rc) : rc;
}

static void expect_op(struct eng_target *t, enum op op, const struct eng_key *k, bool async,
		      int want, const char *what)
{
	int rc = run_op(t, op, k, async);

	if (rc != want)
		fail_msg("%s%s with %s: got %d (%s), expected %d (%s)", op_names[op],
			 async ? " (async)" : "", what, rc, lode_strerror(rc), want,
			 lode_strerror(want));
}

static void only_dkey_visit(void *arg, const uint8_t *name, uint16_t len)
{
	if (len != 4 || memcmp(name, "dkey", 4) != 0)
		fail_msg("a dkey of %u bytes other than \"dkey\" was listed", len);
}

static void only_akeys_visit(void *arg, const uint8_t *name, uint16_t len)
{
	if (!(len == 2 && memcmp(name, "sv", 2) == 0) && !(len == 3 && memcmp(name, "arr", 3) == 0))
		fail_msg("an akey of %u bytes other than \"sv\" or \"arr\" was listed", len);
}

static void test_key_validation(void **state)
{
	struct tu_fix *f = fixture(state);
	struct lode_uuid nocont = tu_uuid(99);
	char *longkey = xmalloc(LODE_KEY_MAX + 2);

	memset(longkey, 'k', LODE_KEY_MAX + 1);
	longkey[LODE_KEY_MAX + 1] = '\0';
	for (int async = 0; async < 2; async++) {
		for (enum op op = 0; op < OP_COUNT; op++) {
			bool as = async && op_async(op);
			/* single values and arrays on different akeys: no type clash */
			const char *akey = op == OP_SV_UPDATE || op == OP_SV_FETCH ? "sv" : "arr";
			struct eng_key good = tu_key(&f->cont, tu_oid(1), "dkey", akey);
			struct eng_key k;

			if (async && !op_async(op))
				continue;
			expect_op(f->tgt, op, NULL, as, -EFAULT, "key NULL");
			k = good;
			k.cont = NULL;
			expect_op(f->tgt, op, &k, as, -EFAULT, "key->cont NULL");
			k = good;
			k.cont = &nocont;
			expect_op(f->tgt, op, &k, as, -LODE_ENOCONT, "an unknown container");
			if (op_uses_dkey(op)) {
				k = good;
				k.dkey = NULL;
				expect_op(f->tgt, op, &k, as, -EFAULT, "dkey NULL");
				k = good;
				k.dkey_len = 0;
				expect_op(f->tgt, op, &k, as, -LODE_EKEYEMPTY, "dkey_len 0");
				k = good;
				k.dkey = longkey;
				k.dkey_len = LODE_KEY_MAX + 1;
				expect_op(f->tgt, op, &k, as, -ENAMETOOLONG, "dkey_len KEY_MAX+1");
			}
			if (op_uses_akey(op)) {
				k = good;
				k.akey = NULL;
				expect_op(f->tgt, op, &k, as, -EFAULT, "akey NULL");
				k = good;
				k.akey_len = 0;
				expect_op(f->tgt, op, &k, as, -LODE_EKEYEMPTY, "akey_len 0");
				k = good;
				k.akey = longkey;
				k.akey_len = LODE_KEY_MAX + 1;
				expect_op(f->tgt, op, &k, as, -ENAMETOOLONG, "akey_len KEY_MAX+1");
			}
			/* fields the call ignores may be anything, NULL included */
			int want = run_op(f->tgt, op, &good, as);
			if (!op_uses_dkey(op)) {
				k = good;
				k.dkey = NULL;
				k.dkey_len = 0;
				expect_op(f->tgt, op, &k, as, want, "an ignored NULL dkey");
			}
			if (!op_uses_akey(op)) {
				k = good;
				k.akey = NULL;
				k.akey_len = 0;
				expect_op(f->tgt, op, &k, as, want, "an ignored NULL akey");
				k.akey = longkey;
				k.akey_len = LODE_KEY_MAX + 1;
				expect_op(f->tgt, op, &k, as, want, "an ignored over-long akey");
			}
		}
	}
	/* no empty or over-long key got in */
	struct eng_key k = tu_key(&f->cont, tu_oid(1), "dkey", NULL);
	tu_list_keys(f->tgt, &k, false, 5, 4096, only_dkey_visit, NULL);
	tu_list_keys(f->tgt, &k, true, 5, 4096, only_akeys_visit, NULL);
	free(longkey);
}

static void test_null_pointers(void **state)
{
	struct tu_fix *f = fixture(state);
	struct eng_key k = tu_key(&f->cont, tu_oid(1), "d", "a");
	struct eng_key ka = tu_key(&f->cont, tu_oid(1), "d", "arr");
	struct eng_anchor anchor = ENG_ANCHOR_INIT;
	struct lode_oid oids[4];
	lode_epoch_t eps[4];
	uint8_t b[64] = {0};
	uint32_t len;
	struct tu_op op = {0};

	sv_put(f->tgt, &k, 2, 10, 1);
	assert_int_equal(eng_arr_update(f->tgt, &ka, 2, 0, b, 10, NULL, NULL), 0);

	assert_int_equal(eng_sv_update(f->tgt, &k, 3, NULL, 10, NULL, NULL), -EFAULT);
	assert_int_equal(tu_op_finish(f->tgt, &op, eng_sv_update(f->tgt, &k, 3, NULL, 10,
								 tu_op_cb, &op)),
			 -EFAULT);
	assert_int_equal(eng_sv_fetch(f->tgt, &k, 3, NULL, 10, &len, NULL, NULL), -EFAULT);
	assert_int_equal(eng_sv_fetch(f->tgt, &k, 3, b, sizeof(b), NULL, NULL, NULL), -EFAULT);
	memset(&op, 0, sizeof(op));
	assert_int_equal(tu_op_finish(f->tgt, &op, eng_sv_fetch(f->tgt, &k, 3, b, sizeof(b), NULL,
								tu_op_cb, &op)),
			 -EFAULT);
	assert_int_equal(eng_arr_update(f->tgt, &ka, 3, 0, NULL, 10, NULL, NULL), -EFAULT);
	assert_int_equal(eng_arr_fetch(f->tgt, &ka, 3, 0, NULL, 10, NULL, NULL), -EFAULT);
	assert_int_equal(eng_arr_size(f->tgt, &ka, 3, NULL), -EFAULT);
	assert_int_equal(eng_cont_create(f->tgt, NULL), -EFAULT);
	assert_int_equal(eng_cont_destroy(f->tgt, NULL), -EFAULT);
	assert_int_equal(eng_cont_list(f->tgt, NULL, 4), -EFAULT);
	assert_int_equal(eng_snap_create(f->tgt, NULL, 5), -EFAULT);
	assert_int_equal(eng_snap_destroy(f->tgt, NULL, 5), -EFAULT);
	assert_int_equal(eng_snap_list(f->tgt, NULL, eps, 4), -EFAULT);
	assert_int_equal(eng_snap_list(f->tgt, &f->cont, NULL, 4), -EFAULT);
	assert_int_equal(eng_obj_list(f->tgt, NULL, LODE_EPOCH_MAX, &anchor, oids, 4), -EFAULT);
	assert_int_equal(eng_obj_list(f->tgt, &f->cont, LODE_EPOCH_MAX, NULL, oids, 4), -EFAULT);
	assert_int_equal(eng_obj_list(f->tgt, &f->cont, LODE_EPOCH_MAX, &anchor, NULL, 4),
			 -EFAULT);
	assert_int_equal(eng_dkey_list(f->tgt, &k, LODE_EPOCH_MAX, NULL, b, sizeof(b)), -EFAULT);
	assert_int_equal(eng_dkey_list(f->tgt, &k, LODE_EPOCH_MAX, &anchor, NULL, 64), -EFAULT);
	assert_int_equal(eng_akey_list(f->tgt, &k, LODE_EPOCH_MAX, NULL, b, sizeof(b)), -EFAULT);
	assert_int_equal(eng_akey_list(f->tgt, &k, LODE_EPOCH_MAX, &anchor, NULL, 64), -EFAULT);
	assert_int_equal(eng_aggregate(f->tgt, NULL, LODE_EPOCH_MAX), -EFAULT);
	assert_int_equal(eng_tgt_stats(f->tgt, NULL), -EFAULT);

	/* none of that changed anything */
	sv_expect(f->tgt, &k, LODE_EPOCH_MAX, 10, 1, false);
	assert_int_equal(eng_snap_list(f->tgt, &f->cont, eps, 4), 0);
	struct lode_uuid l[2];
	assert_int_equal(eng_cont_list(f->tgt, l, 2), 1);
}

static void test_einval(void **state)
{
	struct tu_fix *f = fixture(state);
	struct eng_key k = tu_key(&f->cont, tu_oid(1), "d", "sv");
	struct eng_key ka = tu_key(&f->cont, tu_oid(1), "d", "arr");
	uint8_t b[64] = {0};
	uint32_t len;
	struct tu_op op = {0};

	assert_int_equal(eng_sv_update(f->tgt, &k, 0, b, 10, NULL, NULL), -EINVAL);
	assert_int_equal(tu_op_finish(f->tgt, &op, eng_sv_update(f->tgt, &k, 0, b, 10, tu_op_cb,
								 &op)),
			 -EINVAL);
	assert_int_equal(eng_sv_fetch(f->tgt, &k, 0, b, sizeof(b), &len, NULL, NULL), -EINVAL);
	assert_int_equal(eng_arr_update(f->tgt, &ka, 0, 0, b, 10, NULL, NULL), -EINVAL);
	assert_int_equal(eng_arr_update(f->tgt, &ka, 4, 0, b, 0, NULL, NULL), -EINVAL);
	memset(&op, 0, sizeof(op));
	assert_int_equal(tu_op_finish(f->tgt, &op, eng_arr_update(f->tgt, &ka, 4, 0, b, 0,
								  tu_op_cb, &op)),
			 -EINVAL);
	assert_int_equal(eng_arr_fetch(f->tgt, &ka, 0, 0, b, 10, NULL, NULL), -EINVAL);
	assert_int_equal(eng_obj_punch(f->tgt, &k, 0, NULL, NULL), -EINVAL);
	assert_int_equal(eng_dkey_punch(f->tgt, &k, 0, NULL, NULL), -EINVAL);
	assert_int_equal(eng_akey_punch(f->tgt, &k, 0, NULL, NULL), -EINVAL);
	assert_int_equal(eng_arr_punch(f->tgt, &ka, 0, 0, 10, NULL, NULL), -EINVAL);
	assert_int_equal(eng_snap_create(f->tgt, &f->cont, 0), -EINVAL);
	assert_int_equal(eng_snap_create(f->tgt, &f->cont, LODE_EPOCH_MAX), -EINVAL);

	/* nothing was written or retained */
	assert_int_equal(sv_fetch_rc(f->tgt, &k, LODE_EPOCH_MAX), -ENOENT);
	assert_int_equal(arr_fetch_rc(f->tgt, &ka, LODE_EPOCH_MAX), -ENOENT);
	lode_epoch_t eps[2];
	assert_int_equal(eng_snap_list(f->tgt, &f->cont, eps, 2), 0);
}

static void test_overflow_e2big(void **state)
{
	struct tu_fix *f = fixture(state);
	struct eng_key k = tu_key(&f->cont, tu_oid(1), "d", "sv");
	struct eng_key ka = tu_key(&f->cont, tu_oid(1), "d", "arr");
	uint8_t *big = calloc(1, (size_t)LODE_IO_MAX + 1);
	uint8_t b[128] = {0};
	uint64_t used = stats(f->tgt).extent_used;
	struct tu_op op = {0};

	assert_non_null(big);
	/* off + len wraps */
	assert_int_equal(eng_arr_update(f->tgt, &ka, 3, UINT64_MAX - 10, b, 100, NULL, NULL),
			 -EOVERFLOW);
	assert_int_equal(tu_op_finish(f->tgt, &op, eng_arr_update(f->tgt, &ka, 3, UINT64_MAX - 10,
								  b, 100, tu_op_cb, &op)),
			 -EOVERFLOW);
	assert_int_equal(eng_arr_fetch(f->tgt, &ka, 3, UINT64_MAX - 10, b, 100, NULL, NULL),
			 -EOVERFLOW);
	assert_int_equal(eng_arr_punch(f->tgt, &ka, 3, UINT64_MAX - 10, 100, NULL, NULL),
			 -EOVERFLOW);
	assert_int_equal(eng_arr_punch(f->tgt, &ka, 3, 1, UINT64_MAX, NULL, NULL), -EOVERFLOW);

	/* more than LODE_IO_MAX in one go */
	assert_int_equal(eng_sv_update(f->tgt, &k, 3, big, LODE_IO_MAX + 1, NULL, NULL), -E2BIG);
	memset(&op, 0, sizeof(op));
	assert_int_equal(tu_op_finish(f->tgt, &op, eng_sv_update(f->tgt, &k, 3, big,
								 LODE_IO_MAX + 1, tu_op_cb, &op)),
			 -E2BIG);
	assert_int_equal(eng_arr_update(f->tgt, &ka, 3, 0, big, LODE_IO_MAX + 1, NULL, NULL),
			 -E2BIG);
	assert_int_equal(eng_arr_update(f->tgt, &ka, 3, 0, big, UINT32_MAX, NULL, NULL), -E2BIG);
	assert_int_equal(eng_arr_update(f->tgt, &ka, 4, 0, b, 10, NULL, NULL), 0);
	assert_int_equal(eng_arr_fetch(f->tgt, &ka, 4, 0, big, LODE_IO_MAX + 1, NULL, NULL),
			 -E2BIG);
	memset(&op, 0, sizeof(op));
	assert_int_equal(tu_op_finish(f->tgt, &op, eng_arr_fetch(f->tgt, &ka, 4, 0, big,
								 LODE_IO_MAX + 1, tu_op_cb, &op)),
			 -E2BIG);

	/* the refused single value left nothing behind */
	assert_int_equal(sv_fetch_rc(f->tgt, &k, LODE_EPOCH_MAX), -ENOENT);
	assert_int_equal(stats(f->tgt).extent_used, used);
	uint64_t size = 0;
	assert_int_equal(eng_arr_size(f->tgt, &ka, LODE_EPOCH_MAX, &size), 0);
	assert_int_equal(size, 10);
	free(big);
}

/* Exactly LODE_IO_MAX bytes is allowed, as a single value and as an extent. */
static void test_io_max(void **state)
{
	struct tu_fix *f = fixture(state);
	struct eng_key k = tu_key(&f->cont, tu_oid(1), "d", "sv");
	struct eng_key ka = tu_key(&f->cont, tu_oid(1), "d", "arr");
	uint8_t *big = xmalloc(LODE_IO_MAX);
	uint32_t got = 0;

	tu_pat_fill(big, LODE_IO_MAX, 42, 0);
	assert_int_equal(eng_sv_update(f->tgt, &k, 3, big, LODE_IO_MAX, NULL, NULL), 0);
	tu_pat_fill(big, LODE_IO_MAX, 43, 4096);
	assert_int_equal(tu_arr_update_wait(f->tgt, &ka, 3, 4096, big, LODE_IO_MAX), 0);
	memset(big, 0, LODE_IO_MAX);
	assert_int_equal(eng_sv_fetch(f->tgt, &k, 3, big, LODE_IO_MAX, &got, NULL, NULL), 0);
	assert_int_equal(got, LODE_IO_MAX);
	assert_int_equal(tu_pat_check(big, LODE_IO_MAX, 42, 0), -1);
	memset(big, 0xee, LODE_IO_MAX);
	assert_int_equal(tu_arr_fetch_wait(f->tgt, &ka, 3, 0, big, LODE_IO_MAX), 0);
	assert_int_equal(tu_zero_check(big, 4096), -1);
	assert_int_equal(tu_pat_check(big + 4096, LODE_IO_MAX - 4096, 43, 4096), -1);
	uint64_t size = 0;
	assert_int_equal(eng_arr_size(f->tgt, &ka, LODE_EPOCH_MAX, &size), 0);
	assert_int_equal(size, 4096 + (uint64_t)LODE_IO_MAX);
	free(big);
}

static void test_etype(void **state)
{
	struct tu_fix *f = fixture(state);
	struct eng_key k = tu_key(&f->cont, tu_oid(1), "d", "sv");
	struct eng_key ka = tu_key(&f->cont, tu_oid(1), "d", "arr");
	uint8_t b[200] = {0};
	uint32_t len;
	struct tu_op op = {0};

	sv_put(f->tgt, &k, 5, 100, 1);
	assert_int_equal(eng_arr_update(f->tgt, &ka, 5, 0, b, 100, NULL, NULL), 0);

	assert_int_equal(eng_arr_update(f->tgt, &k, 6, 0, b, 10, NULL, NULL), -LODE_ETYPE);
	assert_int_equal(tu_arr_update_wait(f->tgt, &k, 6, 0, b, 10), -LODE_ETYPE);
	assert_int_equal(eng_arr_fetch(f->tgt, &k, 6, 0, b, 10, NULL, NULL), -LODE_ETYPE);
	assert_int_equal(tu_arr_fetch_wait(f->tgt, &k, 6, 0, b, 10), -LODE_ETYPE);
	assert_int_equal(eng_sv_update(f->tgt, &ka, 6, b, 10, NULL, NULL), -LODE_ETYPE);
	assert_int_equal(tu_sv_update_wait(f->tgt, &ka, 6, b, 10), -LODE_ETYPE);
	assert_int_equal(eng_sv_fetch(f->tgt, &ka, 6, b, sizeof(b), &len, NULL, NULL), -LODE_ETYPE);
	assert_int_equal(tu_op_finish(f->tgt, &op, eng_sv_fetch(f->tgt, &ka, 6, b, sizeof(b), &len,
								tu_op_cb, &op)),
			 -LODE_ETYPE);
	/* the refused writes changed nothing */
	sv_expect(f->tgt, &k, LODE_EPOCH_MAX, 100, 1, false);
	uint64_t size = 0;
	assert_int_equal(eng_arr_size(f->tgt, &ka, LODE_EPOCH_MAX, &size), 0);
	assert_int_equal(size, 100);
	tu_fix_reopen(f);
	assert_int_equal(eng_arr_update(f->tgt, &k, 7, 0, b, 10, NULL, NULL), -LODE_ETYPE);
	assert_int_equal(eng_sv_update(f->tgt, &ka, 7, b, 10, NULL, NULL), -LODE_ETYPE);
}

static void test_enoent(void **state)
{
	struct tu_fix *f = fixture(state);
	struct eng_key k = tu_key(&f->cont, tu_oid(1), "d", "sv");
	struct eng_key ka = tu_key(&f->cont, tu_oid(1), "d", "arr");
	struct eng_key other = tu_key(&f->cont, tu_oid(1), "d", "other");
	struct eng_key nobj = tu_key(&f->cont, tu_oid(2), "d", "sv");
	uint8_t b[100];
	uint64_t size = 77;

	assert_int_equal(sv_fetch_rc(f->tgt, &k, LODE_EPOCH_MAX), -ENOENT);
	assert_int_equal(arr_fetch_rc(f->tgt, &ka, LODE_EPOCH_MAX), -ENOENT);
	assert_int_equal(eng_arr_size(f->tgt, &ka, LODE_EPOCH_MAX, &size), 0);
	assert_int_equal(size, 0);
	sv_put(f->tgt, &k, 10, 30, 1);
	tu_pat_fill(b, sizeof(b), 2, 0);
	assert_int_equal(eng_arr_update(f->tgt, &ka, 10, 0, b, sizeof(b), NULL, NULL), 0);
	assert_int_equal(sv_fetch_rc(f->tgt, &other, LODE_EPOCH_MAX), -ENOENT);
	assert_int_equal(sv_fetch_rc(f->tgt, &nobj, LODE_EPOCH_MAX), -ENOENT);
	/* before the first version */
	assert_int_equal(sv_fetch_rc(f->tgt, &k, 9), -ENOENT);
	assert_int_equal(arr_fetch_rc(f->tgt, &ka, 9), -ENOENT);
	assert_int_equal(eng_arr_size(f->tgt, &ka, 9, &size), 0);
	assert_int_equal(size, 0);
	uint32_t len;
	assert_int_equal(tu_sv_fetch_wait(f->tgt, &k, 9, b, sizeof(b), &len), -ENOENT);
	assert_int_equal(tu_arr_fetch_wait(f->tgt, &ka, 9, 0, b, 10), -ENOENT);
	sv_expect(f->tgt, &k, 10, 30, 1, true);
}

static void test_fetch_small_buffer(void **state)
{
	struct tu_fix *f = fixture(state);
	static const uint32_t sizes[] = {40, 64, 100, 10000, 70000};

	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char akey[16];
		uint32_t n = sizes[i], cap = n / 2, got;
		uint8_t *b = xmalloc(n + 64);
		struct eng_key k;

		snprintf(akey, sizeof(akey), "v%u", i);
		k = tu_key(&f->cont, tu_oid(1), "d", akey);
		sv_put(f->tgt, &k, 5, n, 100 + i);
		for (int async = 0; async < 2; async++) {
			int rc;

			memset(b, 0xee, n + 64);
			got = 0;
			rc = async ? tu_sv_fetch_wait(f->tgt, &k, 5, b, cap, &got)
				   : eng_sv_fetch(f->tgt, &k, 5, b, cap, &got, NULL, NULL);
			assert_int_equal(rc, -EOVERFLOW);
			assert_int_equal(got, n);
			/* cap bytes copied, not one more */
			assert_int_equal(tu_pat_check(b, cap, 100 + i, 0), -1);
			for (uint32_t j = cap; j < n + 64; j++)
				if (b[j] != 0xee)
					fail_msg("size %u cap %u: byte %u past cap written", n, cap,
						 j);
			got = 0;
			rc = async ? tu_sv_fetch_wait(f->tgt, &k, 5, b, 0, &got)
				   : eng_sv_fetch(f->tgt, &k, 5, b, 0, &got, NULL, NULL);
			assert_int_equal(rc, -EOVERFLOW);
			assert_int_equal(got, n);
			got = 0;
			rc = async ? tu_sv_fetch_wait(f->tgt, &k, 5, b, n - 1, &got)
				   : eng_sv_fetch(f->tgt, &k, 5, b, n - 1, &got, NULL, NULL);
			assert_int_equal(rc, -EOVERFLOW);
			assert_int_equal(got, n);
			/* exactly enough, and more than enough */
			got = 0;
			assert_int_equal(eng_sv_fetch(f->tgt, &k, 5, b, n, &got, NULL, NULL), 0);
			assert_int_equal(got, n);
			assert_int_equal(tu_pat_check(b, n, 100 + i, 0), -1);
		}
		sv_expect(f->tgt, &k, LODE_EPOCH_MAX, n, 100 + i, true);
		free(b);
	}
}

/*
 * Fetches write nothing outside [buf, buf + cap): checked with page-aligned
 * buffers (where a disk read may land directly) followed by guard bytes.
 */
static void test_fetch_guard(void **state)
{
	struct tu_fix *f = fixture(state);
	static const uint32_t sizes[] = {100, 4095, 4096, 4097, 5000, 8192, 32768, 32769, 65536};
	enum { GUARD = 8192 };

	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint32_t n = sizes[i], got = 0;
		char akey[16];
		struct eng_key k, ka;
		uint8_t *b = NULL;

		snprintf(akey, sizeof(akey), "g%u", i);
		k = tu_key(&f->cont, tu_oid(7), "sv", akey);
		ka = tu_key(&f->cont, tu_oid(7), "arr", akey);
		sv_put(f->tgt, &k, 5, n, 300 + i);
		b = xmalloc(n + GUARD);
		tu_pat_fill(b, n + GUARD, 400 + i, 0);
		assert_int_equal(eng_arr_update(f->tgt, &ka, 5, 0, b, n + GUARD, NULL, NULL), 0);
		free(b);
		assert_int_equal(posix_memalign((void **)&b, 4096, n + GUARD), 0);
		for (int round = 0; round < 2; round++) {
			for (int way = 0; way < 4; way++) {
				int rc;

				memset(b, 0xee, n + GUARD);
				switch (way) {
				case 0:
					rc = eng_sv_fetch(f->tgt, &k, 5, b, n, &got, NULL, NULL);
					break;
				case 1:
					rc = tu_sv_fetch_wait(f->tgt, &k, 5, b, n, &got);
					break;
				case 2:
					rc = eng_arr_fetch(f->tgt, &ka, 5, 0, b, n, NULL, NULL);
					break;
				default:
					rc = tu_arr_fetch_wait(f->tgt, &ka, 5, 4096, b, n);
					break;
				}
				assert_int_equal(rc, 0);
				assert_int_equal(tu_pat_check(b, n, way < 2 ? 300 + i : 400 + i,
							      way == 3 ? 4096 : 0),
						 -1);
				for (uint32_t j = n; j < n + GUARD; j++)
					if (b[j] != 0xee)
						fail_msg("fetch %d of %u bytes wrote byte %u past the "
							 "buffer",
							 way, n, j);
			}
			tu_fix_reopen(f); /* and again with nothing cached */
		}
		free(b);
	}
}

static void test_snap_errors(void **state)
{
	struct tu_fix *f = fixture(state);
	struct lode_uuid nocont = tu_uuid(99);
	lode_epoch_t eps[4];

	assert_int_equal(eng_snap_create(f->tgt, &f->cont, 10), 0);
	assert_int_equal(eng_snap_create(f->tgt, &f->cont, 10), -EEXIST);
	assert_int_equal(eng_snap_create(f->tgt, &nocont, 10), -LODE_ENOCONT);
	assert_int_equal(eng_snap_destroy(f->tgt, &f->cont, 11), -LODE_ENOSNAP);
	assert_int_equal(eng_snap_destroy(f->tgt, &f->cont, 9), -LODE_ENOSNAP);
	assert_int_equal(eng_snap_destroy(f->tgt, &nocont, 10), -LODE_ENOCONT);
	assert_int_equal(eng_snap_list(f->tgt, &nocont, eps, 4), -LODE_ENOCONT);
	assert_int_equal(eng_snap_list(f->tgt, &f->cont, eps, 4), 1);
	assert_int_equal(eps[0], 10);
	assert_int_equal(eng_snap_destroy(f->tgt, &f->cont, 10), 0);
	assert_int_equal(eng_snap_destroy(f->tgt, &f->cont, 10), -LODE_ENOSNAP);
	assert_int_equal(eng_snap_list(f->tgt, &f->cont, eps, 4), 0);
	/* a destroyed snapshot can be created again */
	assert_int_equal(eng_snap_create(f->tgt, &f->cont, 10), 0);
	assert_int_equal(eng_snap_list(f->tgt, &f->cont, eps, 4), 1);
}

static void test_cont_errors(void **state)
{
	struct tu_fix *f = fixture(state);
	struct lode_uuid c2 = tu_uuid(2), nocont = tu_uuid(99);
	struct eng_anchor anchor = ENG_ANCHOR_INIT;
	struct lode_oid oids[4];

	assert_int_equal(eng_cont_create(f->tgt, &f->cont), -EEXIST);
	assert_int_equal(eng_cont_destroy(f->tgt, &nocont), -LODE_ENOCONT);
	assert_int_equal(eng_aggregate(f->tgt, &nocont, LODE_EPOCH_MAX), -LODE_ENOCONT);
	assert_int_equal(eng_obj_list(f->tgt, &nocont, LODE_EPOCH_MAX, &anchor, oids, 4),
			 -LODE_ENOCONT);
	assert_int_equal(eng_cont_create(f->tgt, &c2), 0);
	assert_int_equal(eng_cont_create(f->tgt, &c2), -EEXIST);
	assert_int_equal(eng_cont_destroy(f->tgt, &c2), 0);
	assert_int_equal(eng_cont_destroy(f->tgt, &c2), -LODE_ENOCONT);
	struct lode_uuid l[2];
	assert_int_equal(eng_cont_list(f->tgt, l, 2), 1);
	tu_fix_reopen(f);
	assert_int_equal(eng_cont_create(f->tgt, &f->cont), -EEXIST);
	assert_int_equal(eng_cont_destroy(f->tgt, &c2), -LODE_ENOCONT);
}

/* ==== single values ======================================================= */

static void test_sv_sizes(void **state)
{
	struct tu_fix *f = fixture(state);
	static const uint32_t sizes[] = {1,    2,     63,    64,    65,    100,    4095,
					 4096, 4097,  8192,  32767, 32768, 32769,  65539,
					 1u << 20,    (1u << 20) + 1,      3u << 20};
	enum { N = sizeof(sizes) / sizeof(sizes[0]) };
	char names[N][16];

	for (unsigned i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "s%u", sizes[i]);
		struct eng_key k = tu_key(&f->cont, tu_oid(1), "d", names[i]);
		uint8_t *b = xmalloc(sizes[i]);

		tu_pat_fill(b, sizes[i], 1000 + i, 0);
		if (i & 1)
			assert_int_equal(tu_sv_update_wait(f->tgt, &k, 10 + i, b, sizes[i]), 0);
		else
			assert_int_equal(eng_sv_update(f->tgt, &k, 10 + i, b, sizes[i], NULL, NULL),
					 0);
		free(b);
	}
	for (int round = 0; round < 2; round++) {
		for (unsigned i = 0; i < N; i++) {
			struct eng_key k = tu_key(&f->cont, tu_oid(1), "d", names[i]);

			sv_expect(f->tgt, &k, LODE_EPOCH_MAX, sizes[i], 1000 + i, i & 1);
			sv_expect(f->tgt, &k, 10 + i, sizes[i], 1000 + i, !(i & 1));
			assert_int_equal(sv_fetch_rc(f->tgt, &k, 9 + i), -ENOENT);
		}
		tu_fix_reopen(f);
	}
}

static void test_sv_replace(void **state)
{
	struct tu_fix *f = fixture(state);
	struct eng_key k = tu_key(&f->cont, tu_oid(1), "d", "a");

	sv_put(f->tgt, &k, 5, 20, 1);
	sv_put(f->tgt, &k, 10, 100, 2);
	sv_put(f->tgt, &k, 10, 30, 3); /* extent replaced by an inline value */
	sv_expect(f->tgt, &k, 10, 30, 3, false);
	sv_put(f->tgt, &k, 10, 9000, 4); /* inline replaced by an extent */
	sv_expect(f->tgt, &k, LODE_EPOCH_MAX, 9000, 4, false);
	sv_put(f->tgt, &k, 10, 50, 5);
	assert_int_equal(tu_sv_update_wait(f->tgt, &k, 10, (uint8_t[7]){1, 2, 3, 4, 5, 6, 7}, 7),
			 0);
	sv_put(f->tgt, &k, 10, 7000, 6);
	for (int round = 0; round < 2; round++) {
		sv_expect(f->tgt, &k, 10, 7000, 6, false);
		sv_expect(f->tgt, &k, LODE_EPOCH_MAX, 7000, 6, true);
		sv_expect(f->tgt, &k, 9, 20, 1, false);
		sv_expect(f->tgt, &k, 5, 20, 1, false);
		tu_fix_reopen(f);
	}
	/* replaced extents are not kept: one 4 KiB... 8 KiB extent remains */
	settle(f->tgt);
	sv_put(f->tgt, KEYP(&f->cont, tu_oid(9), "x", "y"), 1, 1, 1);
	assert_true(stats(f->tgt).extent_used <= 8192);
}

static void test_sv_epochs(void **state)
{
	struct tu_fix *f = fixture(state);
	struct eng_key k = tu_key(&f->cont, tu_oid(1), "d", "a");

	/* written out of epoch order: a later call with an older epoch */
	sv_put(f->tgt, &k, 30, 3000, 3);
	sv_put(f->tgt, &k, 10, 10, 1);
	sv_put(f->tgt, &k, 20, 200, 2);
	for (int round = 0; round < 2; round++) {
		assert_int_equal(sv_fetch_rc(f->tgt, &k, 9), -ENOENT);
		assert_int_equal(sv_fetch_rc(f->tgt, &k, 1), -ENOENT);
		sv_expect(f->tgt, &k, 10, 10, 1, false);
		sv_expect(f->tgt, &k, 19, 10, 1, true);
		sv_expect(f->tgt, &k, 20, 200, 2, false);
		sv_expect(f->tgt, &k, 29, 200, 2, true);
		sv_expect(f->tgt, &k, 30, 3000, 3, false);
		sv_expect(f->tgt, &k, 31, 3000, 3, false);
		sv_expect(f->tgt, &k, LODE_EPOCH_MAX - 1, 3000, 3, false);
		sv_expect(f->tgt, &k, LODE_EPOCH_MAX, 3000, 3, true);
		tu_fix_reopen(f);
	}
}

/* ==== byte arrays ========================================================= */

static void test_arr_sparse(void **state)
{
	struct tu_fix *f = fixture(state);
	struct tu_model *m = tu_model_new(1, 1, 2);
	struct eng_target *t = f->tgt;
	static const lode_epoch_t eps[] = {1, 2, 3, 4, 5, LODE_EPOCH_MAX};
	const uint32_t span = (1u << 20) + 8192;

	tu_do_arr(t, &f->cont, m, 0, 0, 1, 1, 0, 100, 1, NULL);
	tu_do_arr(t, &f->cont, m, 0, 0, 1, 2, 1u << 20, 100, 2, NULL);
	tu_do_arr(t, &f->cont, m, 0, 0, 1, 3, 3 * 4096 + 7, 5000, 3, NULL);
	tu_do_arr(t, &f->cont, m, 0, 0, 1, 4, 40, 10, 4, NULL); /* inline-sized */
	tu_do_arr(t, &f->cont, m, 0, 0, 1, 5, 500000, 70000, 5, NULL);
	for (int round = 0; round < 2; round++) {
		t = f->tgt;
		for (unsigned i = 0; i < sizeof(eps) / sizeof(eps[0]); i++) {
			tu_check_arr(t, &f->cont, m, 0, 0, 1, eps[i], 0, span, i & 1, "sparse");
			tu_check_arr(t, &f->cont, m, 0, 0, 1, eps[i], 99, 2, false, "sparse");
			tu_check_arr(t, &f->cont, m, 0, 0, 1, eps[i], 4096 * 3, 4096, true,
				     "sparse");
			tu_check_arr_size(t, &f->cont, m, 0, 0, 1, eps[i], "sparse");
		}
		/* entirely past the end: zeros, not an error */
		tu_check_arr(t, &f->cont, m, 0, 0, 1, LODE_EPOCH_MAX, 5u << 20, 4096, false,
			     "past end");
		tu_check_arr(t, &f->cont, m, 0, 0, 1, LODE_EPOCH_MAX, UINT64_MAX - 4096, 4096,
			     false, "far past end");
		uint64_t size = 0;
		struct eng_key k1 = tu_grid_key(&f->cont, 0, 0, 1);

		assert_int_equal(eng_arr_size(t, &k1, 1, &size), 0);
		assert_int_equal(size, 100);
		assert_int_equal(eng_arr_size(t, &k1, 2, &size), 0);
		assert_int_equal(size, (1u << 20) + 100);
		tu_fix_reopen(f);
	}
	/* the highest offsets representable */
	tu_do_arr(f->tgt, &f->cont, m, 0, 0, 1, 6, UINT64_MAX - 100, 100, 6, NULL);
	tu_check_arr(f->tgt, &f->cont, m, 0, 0, 1, LODE_EPOCH_MAX, UINT64_MAX - 200, 200, false,
		     "top");
	tu_check_arr_size(f->tgt, &f->cont, m, 0, 0, 1, LODE_EPOCH_MAX, "top");
	tu_model_free(m);
}

static void test_arr_overlap(void **state)
{
	struct tu_fix *f = fixture(state);
	struct tu_model *m = tu_model_new(1, 1, 2);
	struct tu_io io = {0};

	tu_do_arr(f->tgt, &f->cont, m, 0, 0, 1, 10, 0, 10000, 1, NULL);
	tu_do_arr(f->tgt, &f->cont, m, 0, 0, 1, 20, 5000, 10000, 2, &io);
	tu_do_arr(f->tgt, &f->cont, m, 0, 0, 1, 30, 7000, 100, 3, &io);
	tu_do_arr(f->tgt, &f->cont, m, 0, 0, 1, 40, 0, 3, 4, &io);
	tu_io_wait(f->tgt, &io);
	/* older epochs written last: only where nothing newer covers */
	tu_do_arr(f->tgt, &f->cont, m, 0, 0, 1, 15, 0, 20000, 5, NULL);
	tu_do_arr(f->tgt, &f->cont, m, 0, 0, 1, 35, 6990, 30, 6, NULL);
	tu_do_arr(f->tgt, &f->cont, m, 0, 0, 1, 5, 9000, 40000, 7, NULL);
	/* many small overlapping writes */
	for (unsigned i = 0; i < 200; i++)
		tu_do_arr(f->tgt, &f->cont, m, 0, 0, 1, 100 + i, (i * 7919) % 30000, 1 + i * 37 % 700,
			  1000 + i, &io);
	tu_io_wait(f->tgt, &io);
	for (int round = 0; round < 2; round++) {
		for (lode_epoch_t e = 4; e <= 45; e++)
			tu_check_arr(f->tgt, &f->cont, m, 0, 0, 1, e, 0, 60000, e & 1, "overlap");
		for (lode_epoch_t e = 100; e < 300; e += 13)
			tu_check_arr(f->tgt, &f->cont, m, 0, 0, 1, e, 0, 60000, false, "overlap");
		tu_check_arr(f->tgt, &f->cont, m, 0, 0, 1, LODE_EPOCH_MAX, 6000, 2000, true,
			     "overlap");
		tu_check_arr_size(f->tgt, &f->cont, m, 0, 0, 1, LODE_EPOCH_MAX, "overlap");
		tu_check_arr_size(f->tgt, &f->cont, m, 0, 0, 1, 12, "overlap");
		tu_fix_reopen(f);
	}
	tu_model_free(m);
}

/* ==== punches ============================================================== */

/* Write every akey of an nobj x ndkey x nakey grid once, epochs from *e on. */
static void fill_grid(struct tu_fix *f, struct tu_model *m, unsigned nobj, unsigned ndkey,
		      unsigned nakey, lode_epoch_t *e, uint64_t seed)
{
	struct tu_io io = {0};

	for (unsigned o = 0; o < nobj; o++)
		for (unsigned d = 0; d < ndkey; d++)
			for (unsigned a = 0; a < nakey; a++) {
				uint64_t s = seed + (o * 100 + d) * 100 + a;
				lode_epoch_t ep = (*e)++;

				if (tu_akey_is_arr(a)) {
					tu_do_arr(f->tgt, &f->cont, m, o, d, a, ep, 0,
						  (uint32_t)(1000 + s % 9000), s, &io);
					tu_do_arr(f->tgt, &f->cont, m, o, d, a, ep, 20000,
						  (uint32_t)(10 + s % 50), s + 1, &io);
				} else {
					tu_do_sv(f->tgt, &f->cont, m, o, d, a, ep,
						 (uint32_t)(s % 3 ? 1 + s % 64 : 65 + s % 20000), s,
						 &io);
				}
			}
	tu_io_wait(f->tgt, &io);
}

static void check_epochs(struct tu_fix *f, struct tu_model *m, const lode_epoch_t *eps,
			 unsigned n, uint64_t span, const char *what)
{
	char ctx[96];

	for (unsigned i = 0; i < n; i++) {
		snprintf(ctx, sizeof(ctx), "%s (%s)", what, tu_mode_name(f->mode));
		tu_check_all(f->tgt, &f->cont, m, eps[i], span, ctx);
	}
}

static void test_punch_levels(void **state)
{
	struct tu_fix *f = fixture(state);
	struct tu_model *m = tu_model_new(3, 3, 4);
	struct tu_io io = {0};
	lode_epoch_t e = 10;
	static const lode_epoch_t eps[] = {60,  99,  100, 101, 109, 110, 119, 120, 121, 125,
					   129, 130, 135, 139, 140, 145, 150, LODE_EPOCH_MAX};

	fill_grid(f, m, 3, 3, 4, &e, 1);
	assert_true(e < 60);
	tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_OBJ, 0, 0, 0, 100, 0, 0, NULL);
	tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_DKEY, 1, 1, 0, 110, 0, 0, &io);
	tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_AKEY, 2, 0, 0, 120, 0, 0, &io);
	tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_AKEY, 2, 0, 1, 121, 0, 0, NULL);
	tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_RANGE, 2, 2, 3, 130, 1000, 4000, &io);
	tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_RANGE, 2, 1, 3, 131, 20005, 1u << 20, &io);
	/* a punch covering all of an array's extents */
	tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_RANGE, 1, 2, 1, 132, 0, 1u << 20, NULL);
	/* punching what does not exist is no error */
	assert_int_equal(eng_obj_punch(f->tgt, KEYP(&f->cont, tu_oid(77), NULL, NULL), 133, NULL,
				       NULL),
			 0);
	assert_int_equal(eng_akey_punch(f->tgt, KEYP(&f->cont, tu_oid(1), "nod", "noa"), 133,
					NULL, NULL),
			 0);
	tu_io_wait(f->tgt, &io);
	/* writes after the punches are visible again from their epoch on */
	tu_do_sv(f->tgt, &f->cont, m, 0, 0, 0, 140, 33, 500, NULL);
	tu_do_arr(f->tgt, &f->cont, m, 1, 1, 1, 150, 100, 5000, 501, NULL);
	tu_do_arr(f->tgt, &f->cont, m, 2, 2, 3, 150, 2000, 10, 502, NULL);
	for (int round = 0; round < 2; round++) {
		check_epochs(f, m, eps, sizeof(eps) / sizeof(eps[0]), 24000, "punch");
		tu_fix_reopen(f);
	}
	tu_model_free(m);
}

/* ==== snapshots ============================================================ */

static void test_snapshots(void **state)
{
	struct tu_fix *f = fixture(state);
	struct tu_model *m = tu_model_new(2, 2, 4);
	lode_epoch_t e = 10, eps[8];
	struct lode_uuid c2 = tu_uuid(2);

	fill_grid(f, m, 2, 2, 4, &e, 1); /* epochs 10..25 */
	assert_int_equal(eng_snap_create(f->tgt, &f->cont, 30), 0);
	e = 40;
	fill_grid(f, m, 2, 2, 4, &e, 2); /* 40..55 */
	tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_DKEY, 0, 1, 0, 60, 0, 0, NULL);
	tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_RANGE, 1, 0, 1, 61, 500, 600, NULL);
	assert_int_equal(eng_snap_create(f->tgt, &f->cont, 70), 0);
	e = 80;
	fill_grid(f, m, 2, 2, 4, &e, 3); /* 80..95 */
	tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_OBJ, 1, 0, 0, 100, 0, 0, NULL);
	/* a snapshot of an epoch in the past, created after later writes */
	assert_int_equal(eng_snap_create(f->tgt, &f->cont, 50), 0);
	assert_int_equal(eng_snap_create(f->tgt, &f->cont, 50), -EEXIST);

	/* listed in ascending order; the total even when max is smaller */
	memset(eps, 0, sizeof(eps));
	assert_int_equal(eng_snap_list(f->tgt, &f->cont, eps, 8), 3);
	assert_int_equal(eps[0], 30);
	assert_int_equal(eps[1], 50);
	assert_int_equal(eps[2], 70);
	memset(eps, 0, sizeof(eps));
	assert_int_equal(eng_snap_list(f->tgt, &f->cont, eps, 2), 3);
	assert_int_equal(eps[0], 30);
	assert_int_equal(eps[1], 50);
	assert_int_equal(eps[2], 0);
	assert_int_equal(eng_snap_list(f->tgt, &f->cont, eps, 0), 3);
	/* snapshots belong to their container */
	assert_int_equal(eng_cont_create(f->tgt, &c2), 0);
	assert_int_equal(eng_snap_list(f->tgt, &c2, eps, 8), 0);

	static const lode_epoch_t views[] = {30, 50, 70, LODE_EPOCH_MAX};
	check_epochs(f, m, views, 4, 21000, "snapshots");
	/* aggregation keeps what each snapshot sees */
	assert_int_equal(eng_aggregate(f->tgt, &f->cont, LODE_EPOCH_MAX), 0);
	check_epochs(f, m, views, 4, 21000, "snapshots after aggregation");

	assert_int_equal(eng_snap_destroy(f->tgt, &f->cont, 50), 0);
	tu_fix_reopen(f);
	memset(eps, 0, sizeof(eps));
	assert_int_equal(eng_snap_list(f->tgt, &f->cont, eps, 8), 2);
	assert_int_equal(eps[0], 30);
	assert_int_equal(eps[1], 70);
	static const lode_epoch_t views2[] = {30, 70, LODE_EPOCH_MAX};
	check_epochs(f, m, views2, 3, 21000, "snapshots after reopen");
	assert_int_equal(eng_aggregate(f->tgt, &f->cont, LODE_EPOCH_MAX), 0);
	check_epochs(f, m, views2, 3, 21000, "snapshots after destroy and aggregation");
	tu_model_free(m);
}

/* ==== aggregation ========================================================= */

static void test_aggregate(void **state)
{
	struct tu_fix *f = fixture(state);
	struct tu_model *m = tu_model_new(2, 2, 4);
	struct tu_model *m2 = tu_model_new(2, 2, 4);
	struct lode_uuid c2 = tu_uuid(2);
	lode_epoch_t e = 1, snaps[2];
	struct tu_rng rng;
	char ctx[64];

	tu_rng_seed(&rng, 7);
	assert_int_equal(eng_cont_create(f->tgt, &c2), 0);
	for (unsigned v = 0; v < 30; v++) {
		struct tu_io io = {0};

		if (v == 10 || v == 20) {
			snaps[v / 10 - 1] = e++;
			assert_int_equal(eng_snap_create(f->tgt, &f->cont, snaps[v / 10 - 1]), 0);
		}
		for (unsigned o = 0; o < 2; o++)
			for (unsigned d = 0; d < 2; d++)
				for (unsigned a = 0; a < 4; a++) {
					uint64_t s = tu_rand(&rng);
					lode_epoch_t ep = e++;

					if (tu_akey_is_arr(a)) {
						uint64_t off = tu_rand_below(&rng, 60000);
						uint32_t len = (uint32_t)tu_rand_range(&rng, 1, 9000);

						tu_do_arr(f->tgt, &f->cont, m, o, d, a, ep, off, len,
							  s, &io);
						tu_do_arr(f->tgt, &c2, m2, o, d, a, ep, off, len, s,
							  &io);
					} else {
						uint32_t len = (uint32_t)tu_rand_range(&rng, 1, 20000);

						tu_do_sv(f->tgt, &f->cont, m, o, d, a, ep, len, s,
							 &io);
						tu_do_sv(f->tgt, &c2, m2, o, d, a, ep, len, s, &io);
					}
				}
		if (v == 25) {
			tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_AKEY, 0, 0, 0, e, 0, 0, &io);
			tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_RANGE, 1, 1, 1, e++, 100, 20000,
				    &io);
		}
		tu_io_wait(f->tgt, &io);
	}
	lode_epoch_t views[] = {snaps[0], snaps[1], LODE_EPOCH_MAX};

	check_epochs(f, m, views, 3, 70000, "before aggregation");
	settle(f->tgt);
	struct eng_stats before = stats(f->tgt);

	assert_int_equal(eng_aggregate(f->tgt, &f->cont, LODE_EPOCH_MAX), 0);
	check_epochs(f, m, views, 3, 70000, "after aggregation");
	settle(f->tgt);
	struct eng_stats after = stats(f->tgt);
	if (after.extent_used >= before.extent_used || after.records >= before.records) {
		/* space is freed once the removal is durable: after one more commit */
		sv_put(f->tgt, KEYP(&c2, tu_oid(50), "x", "y"), e++, 1, 1);
		settle(f->tgt);
		after = stats(f->tgt);
	}
	print_message("aggregation (%s): records %llu -> %llu, extent_used %llu -> %llu\n",
		      tu_mode_name(f->mode), (unsigned long long)before.records,
		      (unsigned long long)after.records, (unsigned long long)before.extent_used,
		      (unsigned long long)after.extent_used);
	assert_true(after.records < before.records);
	assert_true(after.extent_used < before.extent_used);
	/* the other container was not aggregated: its old versions are all there */
	for (lode_epoch_t ep = 1; ep < e; ep += 17) {
		snprintf(ctx, sizeof(ctx), "other container @%llu", (unsigned long long)ep);
		tu_check_all(f->tgt, &c2, m2, ep, 70000, ctx);
	}
	/* aggregating again changes nothing visible */
	assert_int_equal(eng_aggregate(f->tgt, &f->cont, LODE_EPOCH_MAX), 0);
	tu_fix_reopen(f);
	check_epochs(f, m, views, 3, 70000, "aggregated, reopened");

	/* partial aggregation of the other container: up to epoch hi only */
	lode_epoch_t hi = e / 2, now = e;
	assert_int_equal(eng_aggregate(f->tgt, &c2, hi), 0);
	snprintf(ctx, sizeof(ctx), "partial aggregation");
	tu_check_all(f->tgt, &c2, m2, LODE_EPOCH_MAX, 70000, ctx);
	tu_check_all(f->tgt, &c2, m2, now, 70000, ctx);
	tu_model_free(m);
	tu_model_free(m2);
}

/*
 * Aggregation over punches of every kind: extents wholly or partly covered
 * by range punches, punched akeys, dkeys and objects, with and without a
 * snapshot that still sees what was punched.
 */
static void test_aggregate_punches(void **state)
{
	struct tu_fix *f = fixture(state);
	struct tu_model *m = tu_model_new(3, 2, 6);
	lode_epoch_t e = 1;

	fill_grid(f, m, 3, 2, 4, &e, 1); /* epochs 1..24 */
	e = 30;
	/* akey 5: single extents, one wholly punched, one punched at its head */
	tu_do_arr(f->tgt, &f->cont, m, 0, 0, 5, e++, 0, 5000, 90, NULL);
	tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_RANGE, 0, 0, 5, e++, 0, 5000, NULL);
	tu_do_arr(f->tgt, &f->cont, m, 0, 1, 5, e++, 4096, 9000, 91, NULL);
	tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_RANGE, 0, 1, 5, e++, 0, 8192, NULL);
	tu_do_arr(f->tgt, &f->cont, m, 1, 0, 5, e++, 0, 5000, 92, NULL);
	tu_do_arr(f->tgt, &f->cont, m, 1, 0, 5, e++, 0, 5000, 93, NULL); /* wholly shadowed */
	/* aggregated with no snapshot to keep anything */
	assert_int_equal(eng_aggregate(f->tgt, &f->cont, LODE_EPOCH_MAX), 0);
	check_epochs(f, m, (lode_epoch_t[]){LODE_EPOCH_MAX}, 1, 21000, "single punched extents");
	/* (0,0,1): one extent wholly punched, (0,0,3): both extents */
	tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_RANGE, 0, 0, 1, e++, 0, 1u << 20, NULL);
	tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_RANGE, 0, 0, 3, e++, 0, 10000, NULL);
	tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_RANGE, 0, 0, 3, e++, 20000, 100, NULL);
	/* (0,1,1): partly punched, then overwritten in part */
	tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_RANGE, 0, 1, 1, e++, 500, 1000, NULL);
	tu_do_arr(f->tgt, &f->cont, m, 0, 1, 1, e++, 700, 300, 77, NULL);
	tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_AKEY, 0, 1, 0, e++, 0, 0, NULL);
	tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_DKEY, 1, 0, 0, e++, 0, 0, NULL);
	lode_epoch_t snap = e++;
	assert_int_equal(eng_snap_create(f->tgt, &f->cont, snap), 0);
	tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_OBJ, 2, 0, 0, e++, 0, 0, NULL);
	tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_RANGE, 1, 1, 3, e++, 0, 1u << 20, NULL);
	tu_do_arr(f->tgt, &f->cont, m, 1, 1, 3, e++, 5, 10, 78, NULL);

	lode_epoch_t views[] = {snap, LODE_EPOCH_MAX};
	check_epochs(f, m, views, 2, 21000, "punched, before aggregation");
	settle(f->tgt);
	struct eng_stats before = stats(f->tgt);
	assert_int_equal(eng_aggregate(f->tgt, &f->cont, LODE_EPOCH_MAX), 0);
	check_epochs(f, m, views, 2, 21000, "punched, aggregated");
	tu_fix_reopen(f);
	check_epochs(f, m, views, 2, 21000, "punched, aggregated, reopened");
	assert_true(stats(f->tgt).records < before.records);
	/* without the snapshot, the rest of what was punched goes too */
	assert_int_equal(eng_snap_destroy(f->tgt, &f->cont, snap), 0);
	assert_int_equal(eng_aggregate(f->tgt, &f->cont, LODE_EPOCH_MAX), 0);
	check_epochs(f, m, views + 1, 1, 21000, "punched, aggregated without the snapshot");
	tu_fix_reopen(f);
	check_epochs(f, m, views + 1, 1, 21000, "punched, aggregated twice, reopened");
	tu_model_free(m);
}

/* ==== containers ========================================================== */

static bool uuid_in(const struct lode_uuid *u, const struct lode_uuid *v, int n)
{
	for (int i = 0; i < n; i++)
		if (memcmp(u, &v[i], sizeof(*u)) == 0)
			return true;
	return false;
}

static void test_containers(void **state)
{
	struct tu_fix *f = fixture(state);
	struct lode_uuid c2 = tu_uuid(2), c3 = tu_uuid(3), l[8];
	struct eng_key k1 = tu_key(&f->cont, tu_oid(1), "d", "a");
	struct eng_key k2 = tu_key(&c2, tu_oid(1), "d", "a");
	struct eng_key k3 = tu_key(&c3, tu_oid(1), "d", "a");
	struct eng_anchor anchor = ENG_ANCHOR_INIT;
	struct lode_oid oids[8];

	assert_int_equal(eng_cont_create(f->tgt, &c2), 0);
	assert_int_equal(eng_cont_create(f->tgt, &c3), 0);
	memset(l, 0, sizeof(l));
	assert_int_equal(eng_cont_list(f->tgt, l, 8), 3);
	assert_true(uuid_in(&f->cont, l, 3) && uuid_in(&c2, l, 3) && uuid_in(&c3, l, 3));
	memset(l, 0, sizeof(l));
	assert_int_equal(eng_cont_list(f->tgt, l, 1), 3);
	assert_true(uuid_in(&l[0], (struct lode_uuid[]){f->cont, c2, c3}, 3));
	assert_true(uuid_in(&l[1], (struct lode_uuid[]){{{0}}}, 1));

	/* the same key in each container holds its own value */
	sv_put(f->tgt, &k1, 5, 1000, 1);
	sv_put(f->tgt, &k2, 5, 1u << 20, 2);
	sv_put(f->tgt, &k3, 5, 30, 3);
	sv_put(f->tgt, KEYP(&c2, tu_oid(2), "d", "a"), 5, 8192, 4);
	assert_int_equal(eng_snap_create(f->tgt, &c2, 6), 0);
	sv_expect(f->tgt, &k1, LODE_EPOCH_MAX, 1000, 1, false);
	sv_expect(f->tgt, &k2, LODE_EPOCH_MAX, 1u << 20, 2, false);
	sv_expect(f->tgt, &k3, LODE_EPOCH_MAX, 30, 3, false);
	assert_int_equal(eng_obj_list(f->tgt, &c2, LODE_EPOCH_MAX, &anchor, oids, 8), 2);
	memset(&anchor, 0, sizeof(anchor));
	assert_int_equal(eng_obj_list(f->tgt, &c3, LODE_EPOCH_MAX, &anchor, oids, 8), 1);

	settle(f->tgt);
	uint64_t used = stats(f->tgt).extent_used;
	assert_int_equal(eng_cont_destroy(f->tgt, &c2), 0);
	assert_int_equal(sv_fetch_rc(f->tgt, &k2, LODE_EPOCH_MAX), -LODE_ENOCONT);
	assert_int_equal(eng_sv_update(f->tgt, &k2, 7, "x", 1, NULL, NULL), -LODE_ENOCONT);
	lode_epoch_t eps[2];
	assert_int_equal(eng_snap_list(f->tgt, &c2, eps, 2), -LODE_ENOCONT);
	sv_expect(f->tgt, &k1, LODE_EPOCH_MAX, 1000, 1, false);
	sv_expect(f->tgt, &k3, LODE_EPOCH_MAX, 30, 3, false);
	/* its space comes back (once the destruction is durable) */
	sv_put(f->tgt, &k3, 8, 10, 5);
	settle(f->tgt);
	assert_true(stats(f->tgt).extent_used + (1u << 20) <= used);

	tu_fix_reopen(f);
	memset(l, 0, sizeof(l));
	assert_int_equal(eng_cont_list(f->tgt, l, 8), 2);
	assert_true(uuid_in(&f->cont, l, 2) && uuid_in(&c3, l, 2));
	assert_int_equal(sv_fetch_rc(f->tgt, &k2, LODE_EPOCH_MAX), -LODE_ENOCONT);
	/* created again, it starts empty */
	assert_int_equal(eng_cont_create(f->tgt, &c2), 0);
	assert_int_equal(sv_fetch_rc(f->tgt, &k2, LODE_EPOCH_MAX), -ENOENT);
	assert_int_equal(sv_fetch_rc(f->tgt, &k2, 5), -ENOENT);
	memset(&anchor, 0, sizeof(anchor));
	assert_int_equal(eng_obj_list(f->tgt, &c2, LODE_EPOCH_MAX, &anchor, oids, 8), 0);
	assert_true(anchor.eof);
	assert_int_equal(eng_snap_list(f->tgt, &c2, eps, 2), 0);
	sv_expect(f->tgt, &k1, LODE_EPOCH_MAX, 1000, 1, false);
	tu_fix_reopen(f);
	assert_int_equal(eng_cont_list(f->tgt, l, 8), 3);
	assert_int_equal(sv_fetch_rc(f->tgt, &k2, LODE_EPOCH_MAX), -ENOENT);
	sv_expect(f->tgt, &k3, LODE_EPOCH_MAX, 10, 5, false);
}

/* ==== keys ================================================================ */

static void test_key_bytes(void **state)
{
	struct tu_fix *f = fixture(state);
	uint8_t *big = xmalloc(LODE_KEY_MAX);
	/* binary keys: embedded zeros, prefixes of each other */
	static const struct {
		const char *b;
		uint32_t len;
	} names[] = {{"x", 1}, {"x\0", 2}, {"x\0\0", 3}, {"xy", 2}, {"\0", 1}, {"\xff", 1}};
	enum { N = sizeof(names) / sizeof(names[0]) };

	for (unsigned i = 0; i < LODE_KEY_MAX; i++)
		big[i] = (uint8_t)(i * 31 + 7);
	for (int round = 0; round < 3; round++) {
		for (unsigned i = 0; i <= N; i++) {
			for (unsigned j = 0; j <= N; j++) {
				struct eng_key k = {.cont = &f->cont, .oid = tu_oid(1)};

				k.dkey = i < N ? names[i].b : (const char *)big;
				k.dkey_len = i < N ? names[i].len : LODE_KEY_MAX;
				k.akey = j < N ? names[j].b : (const char *)big;
				k.akey_len = j < N ? names[j].len : LODE_KEY_MAX;
				if (round == 0)
					sv_put(f->tgt, &k, 5, 10 + i * 8 + j, i * 100 + j);
				else
					sv_expect(f->tgt, &k, LODE_EPOCH_MAX, 10 + i * 8 + j,
						  i * 100 + j, false);
			}
		}
		if (round == 0)
			continue;
		/* listed byte for byte */
		struct eng_key k = {.cont = &f->cont, .oid = tu_oid(1)};
		struct eng_anchor anchor = ENG_ANCHOR_INIT;
		uint8_t *buf = xmalloc(4 * (2 + LODE_KEY_MAX));
		unsigned seen[N + 1] = {0};
		int total = 0;

		while (!anchor.eof) {
			int n = eng_dkey_list(f->tgt, &k, LODE_EPOCH_MAX, &anchor, buf,
					      4 * (2 + LODE_KEY_MAX));
			size_t pos = 0;

			assert_true(n >= 0);
			assert_true(n > 0 || anchor.eof);
			for (int x = 0; x < n; x++) {
				uint16_t len = (uint16_t)(buf[pos] | buf[pos + 1] << 8);
				unsigned i;

				pos += 2;
				for (i = 0; i < N; i++)
					if (len == names[i].len &&
					    memcmp(buf + pos, names[i].b, len) == 0)
						break;
				if (i == N && !(len == LODE_KEY_MAX &&
						memcmp(buf + pos, big, len) == 0))
					fail_msg("unexpected dkey of %u bytes listed", len);
				seen[i]++;
				pos += len;
			}
			total += n;
		}
		assert_int_equal(total, N + 1);
		for (unsigned i = 0; i <= N; i++)
			assert_int_equal(seen[i], 1);
		/* a buffer too small for even one key */
		memset(&anchor, 0, sizeof(anchor));
		k.dkey = big;
		k.dkey_len = LODE_KEY_MAX;
		assert_int_equal(eng_akey_list(f->tgt, &k, LODE_EPOCH_MAX, &anchor, buf, 1),
				 -EOVERFLOW);
		free(buf);
		tu_fix_reopen(f);
	}
	free(big);
}

/* ==== enumeration ========================================================= */

static void test_enum_objects(void **state)
{
	struct tu_fix *f = fixture(state);
	enum { N = 1000 };
	struct tu_batch b = {0};
	uint8_t *seen = calloc(N + 10, 1);
	static uint8_t val[8];

	assert_non_null(seen);
	for (unsigned i = 0; i < N; i++) {
		struct eng_key k = tu_key(&f->cont, tu_oid(i), "d", "a");

		assert_int_equal(eng_sv_update(f->tgt, &k, 10, val, sizeof(val), tu_batch_cb, &b),
				 0);
		b.issued++;
		tu_batch_throttle(f->tgt, &b, 256);
	}
	for (unsigned i = 0; i < N; i += 50) {
		assert_int_equal(eng_obj_punch(f->tgt, KEYP(&f->cont, tu_oid(i), NULL, NULL), 20,
					       tu_batch_cb, &b),
				 0);
		b.issued++;
	}
	for (unsigned i = N; i < N + 10; i++) {
		assert_int_equal(eng_sv_update(f->tgt, KEYP(&f->cont, tu_oid(i), "d", "a"), 30, val,
					       sizeof(val), tu_batch_cb, &b),
				 0);
		b.issued++;
	}
	tu_batch_wait(f->tgt, &b);
	assert_int_equal(b.failed, 0);

	static const lode_epoch_t eps[] = {9, 15, 25, LODE_EPOCH_MAX};
	for (int round = 0; round < 2; round++) {
		for (unsigned x = 0; x < 4; x++) {
			struct eng_anchor anchor = ENG_ANCHOR_INIT;
			struct lode_oid oids[7];
			unsigned total = 0, expect = 0;

			memset(seen, 0, N + 10);
			while (!anchor.eof) {
				struct eng_anchor copy = anchor;
				int n = eng_obj_list(f->tgt, &f->cont, eps[x], &copy, oids, 7);

				assert_true(n >= 0 && n <= 7);
				assert_true(n > 0 || copy.eof);
				anchor = copy;
				for (int i = 0; i < n; i++) {
					uint64_t lo = oids[i].lo, idx = (lo - 1) / 0x10001;

					if ((lo - 1) % 0x10001 || idx >= N + 10 ||
					    oids[i].hi != tu_oid(idx).hi)
						fail_msg("unknown oid listed");
					if (seen[idx]++)
						fail_msg("object %llu listed twice @%llu",
							 (unsigned long long)idx,
							 (unsigned long long)eps[x]);
				}
				total += (unsigned)n;
			}
			for (unsigned i = 0; i < N + 10; i++) {
				bool vis = eps[x] >= 10 && (i < N || eps[x] >= 30) &&
					   (i >= N || i % 50 || eps[x] < 20);

				expect += vis;
				if (vis != (seen[i] == 1))
					fail_msg("object %u @%llu: listed %u, visible %d", i,
						 (unsigned long long)eps[x], seen[i], vis);
			}
			assert_int_equal(total, expect);
		}
		tu_fix_reopen(f);
	}
	free(seen);
}

static void count_visit(void *arg, const uint8_t *name, uint16_t len)
{
	uint8_t *seen = arg;
	unsigned idx;
	char tmp[16];

	if (len != 8 || name[0] != 'k')
		fail_msg("unexpected dkey of %u bytes", len);
	memcpy(tmp, name + 1, 7);
	tmp[7] = '\0';
	idx = (unsigned)strtoul(tmp, NULL, 10);
	if (seen[idx]++)
		fail_msg("dkey %u listed twice", idx);
}

static void test_enum_dkeys_100k(void **state)
{
	struct tu_fix *f = fixture(state);
	unsigned n = (unsigned)tu_env_u64("LODE_TEST_NDKEYS", 100000);
	struct tu_batch b = {0};
	uint8_t *seen = calloc(n, 1);
	char (*names)[9] = calloc(n, 9);
	static uint8_t val[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	unsigned punched = 0;

	assert_true(seen && names && n <= 9999999);
	for (unsigned i = 0; i < n; i++) {
		snprintf(names[i], 9, "k%07u", i % 10000000u);
		struct eng_key k = tu_key(&f->cont, tu_oid(1), names[i], "v");

		assert_int_equal(eng_sv_update(f->tgt, &k, 10, val, sizeof(val), tu_batch_cb, &b),
				 0);
		b.issued++;
		tu_batch_throttle(f->tgt, &b, 512);
	}
	for (unsigned i = 5; i < n; i += 997, punched++) {
		struct eng_key k = tu_key(&f->cont, tu_oid(1), names[i], NULL);

		assert_int_equal(eng_dkey_punch(f->tgt, &k, 20, tu_batch_cb, &b), 0);
		b.issued++;
	}
	tu_batch_wait(f->tgt, &b);
	assert_int_equal(b.failed, 0);

	struct eng_key k = tu_key(&f->cont, tu_oid(1), NULL, NULL);
	size_t total = tu_list_keys(f->tgt, &k, false, LODE_EPOCH_MAX, 200, count_visit, seen);
	assert_int_equal(total, n - punched);
	for (unsigned i = 0; i < n; i++)
		if (seen[i] != ((i < 5 || (i - 5) % 997) ? 1 : 0))
			fail_msg("dkey %u listed %u times @MAX", i, seen[i]);
	memset(seen, 0, n);
	total = tu_list_keys(f->tgt, &k, false, 15, 64, count_visit, seen);
	assert_int_equal(total, n);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(seen[i], 1);
	/* nothing was visible before the writes */
	memset(seen, 0, n);
	assert_int_equal(tu_list_keys(f->tgt, &k, false, 9, 64, count_visit, seen), 0);
	/* a buffer too small for one key */
	struct eng_anchor anchor = ENG_ANCHOR_INIT;
	uint8_t small[9];
	assert_int_equal(eng_dkey_list(f->tgt, &k, LODE_EPOCH_MAX, &anchor, small, sizeof(small)),
			 -EOVERFLOW);
	free(seen);
	free(names);
}

struct akey_seen {
	unsigned n;
	unsigned *count;
};

static unsigned akey_len_of(unsigned i)
{
	return i == 0 ? LODE_KEY_MAX : 1 + (i * 13) % 300;
}

/* Unique: the number and ':' lead, letters pad to the length. */
static void akey_name(unsigned i, char *buf)
{
	unsigned len = akey_len_of(i);
	unsigned n = (unsigned)sprintf(buf, "%u:", i);

	if (len > n)
		memset(buf + n, 'a' + i % 26, len - n);
	buf[len > n ? len : n] = '\0';
}

static void akey_visit(void *arg, const uint8_t *name, uint16_t len)
{
	struct akey_seen *s = arg;
	char buf[LODE_KEY_MAX + 8];

	for (unsigned i = 0; i < s->n; i++) {
		akey_name(i, buf);
		if (strlen(buf) == len && memcmp(buf, name, len) == 0) {
			s->count[i]++;
			return;
		}
	}
	fail_msg("unknown akey of %u bytes listed", len);
}

static void test_enum_akeys(void **state)
{
	struct tu_fix *f = fixture(state);
	enum { N = 300 };
	char (*names)[LODE_KEY_MAX + 8] = calloc(N, LODE_KEY_MAX + 8);
	unsigned count[N];
	struct akey_seen s = {.n = N, .count = count};
	struct eng_key k = tu_key(&f->cont, tu_oid(3), "dk", NULL);

	assert_non_null(names);
	for (unsigned i = 0; i < N; i++)
		akey_name(i, names[i]);
	for (lode_epoch_t base = 0; base <= 100; base += 100) {
		static const size_t bufs[] = {2 + LODE_KEY_MAX, 2 + LODE_KEY_MAX + 100, 65536};

		for (unsigned i = 0; i < N; i++) {
			struct eng_key ki = tu_key(&f->cont, tu_oid(3), "dk", names[i]);

			if (i % 2)
				sv_put(f->tgt, &ki, base + 10, 8, i);
			else
				assert_int_equal(eng_arr_update(f->tgt, &ki, base + 10, i,
								"abcdefgh", 8, NULL, NULL),
						 0);
			/* the same akey names under another dkey must not show up */
			if (i % 3 == 0)
				sv_put(f->tgt, KEYP(&f->cont, tu_oid(3), "dk2", names[i]),
				       base + 10, 8, i);
		}
		for (unsigned i = 0; i < N; i += 10)
			assert_int_equal(eng_akey_punch(f->tgt,
							KEYP(&f->cont, tu_oid(3), "dk", names[i]),
							base + 20, NULL, NULL),
					 0);
		for (int reopen = 0; reopen < 2; reopen++) {
			for (unsigned x = 0; x < 3; x++) {
				memset(count, 0, sizeof(count));
				assert_int_equal(tu_list_keys(f->tgt, &k, true, LODE_EPOCH_MAX,
							      bufs[x], akey_visit, &s),
						 N - N / 10);
				for (unsigned i = 0; i < N; i++)
					assert_int_equal(count[i], i % 10 ? 1 : 0);
				memset(count, 0, sizeof(count));
				assert_int_equal(tu_list_keys(f->tgt, &k, true, base + 15, bufs[x],
							      akey_visit, &s),
						 N);
			}
			tu_fix_reopen(f);
		}
		/* a punched dkey lists nothing from the punch on */
		assert_int_equal(eng_dkey_punch(f->tgt, &k, base + 30, NULL, NULL), 0);
		memset(count, 0, sizeof(count));
		assert_int_equal(tu_list_keys(f->tgt, &k, true, LODE_EPOCH_MAX, 4096, akey_visit,
					      &s),
				 0);
		assert_int_equal(tu_list_keys(f->tgt, &k, true, base + 25, 4096, akey_visit, &s),
				 N - N / 10);
	}
	free(names);
}

/*
 * An anchor resumes after the last item it returned even when that item is
 * gone (punched and aggregated away) and the target was reopened in
 * between: the anchor is plain data, kept here as bytes.
 */
static void test_enum_resume(void **state)
{
	struct tu_fix *f = fixture(state);
	enum { N = 600 };
	char names[N][8];
	uint8_t seen[N] = {0}, anchor_bytes[sizeof(struct eng_anchor)];
	struct eng_anchor anchor = ENG_ANCHOR_INIT;
	struct eng_key k = tu_key(&f->cont, tu_oid(5), NULL, NULL);
	uint8_t buf[64];
	struct lode_oid oids[3];
	struct tu_batch b = {0};
	int n, last = -1, other = -1;

	for (unsigned i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "r%04u", i);
		struct eng_key ki = tu_key(&f->cont, tu_oid(5), names[i], "v");
		struct eng_key ko = tu_key(&f->cont, tu_oid(1000 + i), "d", "v");

		assert_int_equal(eng_sv_update(f->tgt, &ki, 10, "x", 1, tu_batch_cb, &b), 0);
		assert_int_equal(eng_sv_update(f->tgt, &ko, 10, "x", 1, tu_batch_cb, &b), 0);
		b.issued += 2;
		tu_batch_throttle(f->tgt, &b, 128);
	}
	tu_batch_wait(f->tgt, &b);
	assert_int_equal(b.failed, 0);

	/* dkeys: one small batch, then the last one returned and another disappear */
	n = eng_dkey_list(f->tgt, &k, LODE_EPOCH_MAX, &anchor, buf, sizeof(buf));
	assert_true(n > 0 && !anchor.eof);
	for (int i = 0, pos = 0; i < n; i++) {
		uint16_t len = (uint16_t)(buf[pos] | buf[pos + 1] << 8);
		unsigned idx;

		assert_int_equal(len, 5);
		assert_int_equal(sscanf((const char *)buf + pos + 3, "%4u", &idx), 1);
		assert_true(idx < N);
		seen[idx]++;
		last = (int)idx;
		pos += 2 + len;
	}
	for (unsigned i = 0; i < N && other < 0; i++)
		if (!seen[N - 1 - i])
			other = (int)(N - 1 - i);
	memcpy(anchor_bytes, &anchor, sizeof(anchor));
	assert_int_equal(eng_dkey_punch(f->tgt, KEYP(&f->cont, tu_oid(5), names[last], NULL), 20,
					NULL, NULL),
			 0);
	assert_int_equal(eng_dkey_punch(f->tgt, KEYP(&f->cont, tu_oid(5), names[other], NULL),
					20, NULL, NULL),
			 0);
	assert_int_equal(eng_aggregate(f->tgt, &f->cont, LODE_EPOCH_MAX), 0);
	tu_fix_reopen(f);
	memset(&anchor, 0x55, sizeof(anchor));
	memcpy(&anchor, anchor_bytes, sizeof(anchor));
	while (!anchor.eof) {
		n = eng_dkey_list(f->tgt, &k, LODE_EPOCH_MAX, &anchor, buf, sizeof(buf));
		assert_true(n > 0 || (n == 0 && anchor.eof));
		for (int i = 0, pos = 0; i < n; i++) {
			uint16_t len = (uint16_t)(buf[pos] | buf[pos + 1] << 8);
			unsigned idx;

			assert_int_equal(sscanf((const char *)buf + pos + 3, "%4u", &idx), 1);
			assert_true(idx < N);
			if (seen[idx]++)
				fail_msg("dkey %u listed again after resuming", idx);
			pos += 2 + len;
		}
	}
	for (unsigned i = 0; i < N; i++)
		if (seen[i] != (i == (unsigned)other ? 0 : 1))
			fail_msg("dkey %u listed %u times (the anchor's was %d, punched %d)", i, seen[i],
				 last, other);

	/* objects, the same way */
	memset(seen, 0, sizeof(seen));
	memset(&anchor, 0, sizeof(anchor));
	unsigned base = 0, total = 0;
	n = eng_obj_list(f->tgt, &f->cont, LODE_EPOCH_MAX, &anchor, oids, 3);
	assert_int_equal(n, 3);
	/* objects 1000.. and object 5: map oids back */
	last = other = -1;
	for (int i = 0; i < n; i++) {
		bool known = false;

		for (unsigned j = 0; j < N; j++) {
			struct lode_oid w = tu_oid(1000 + j);

			if (w.hi == oids[i].hi && w.lo == oids[i].lo) {
				seen[j]++;
				last = (int)j;
				known = true;
			}
		}
		base += !known; /* object 5 */
		total++;
	}
	for (unsigned i = 0; i < N && other < 0; i++)
		if (!seen[N - 1 - i])
			other = (int)(N - 1 - i);
	memcpy(anchor_bytes, &anchor, sizeof(anchor));
	if (last >= 0)
		assert_int_equal(eng_obj_punch(f->tgt, KEYP(&f->cont, tu_oid(1000 + (unsigned)last),
							     NULL, NULL),
					       30, NULL, NULL),
				 0);
	assert_int_equal(eng_obj_punch(f->tgt,
				       KEYP(&f->cont, tu_oid(1000 + (unsigned)other), NULL, NULL),
				       30, NULL, NULL),
			 0);
	assert_int_equal(eng_aggregate(f->tgt, &f->cont, LODE_EPOCH_MAX), 0);
	tu_fix_reopen(f);
	memcpy(&anchor, anchor_bytes, sizeof(anchor));
	while (!anchor.eof) {
		n = eng_obj_list(f->tgt, &f->cont, LODE_EPOCH_MAX, &anchor, oids, 3);
		assert_true(n > 0 || (n == 0 && anchor.eof));
		for (int i = 0; i < n; i++) {
			bool known = false;

			for (unsigned j = 0; j < N; j++) {
				struct lode_oid w = tu_oid(1000 + j);

				if (w.hi == oids[i].hi && w.lo == oids[i].lo) {
					if (seen[j]++)
						fail_msg("object %u listed again after resuming", j);
					known = true;
				}
			}
			base += !known; /* object 5 */
			total++;
		}
	}
	assert_int_equal(base, 1); /* object 5, once */
	for (unsigned i = 0; i < N; i++)
		if (seen[i] != (i == (unsigned)other ? 0 : 1))
			fail_msg("object %u listed %u times (the anchor's was %d, punched %d)", 1000 + i,
				 seen[i], last, other);
	assert_int_equal(total, N); /* N - 1 of 1000.., plus object 5 */
}

/* ==== asynchronous use ===================================================== */

struct aop {
	struct eng_key k;
	char akey[16];
	int calls;
	int rc;
	uint32_t len, got;
	uint64_t off;
	uint8_t *buf;
	unsigned *done; /* shared count of completions */
};

static void aop_cb(void *arg, int rc)
{
	struct aop *a = arg;

	a->calls++;
	a->rc = rc;
	++*a->done;
}

/* eng_progress until at most max of issued are still out; returns callbacks
 * run. Fails once 10 s pass without a completion (a hang costs 10 s, not
 * the test's timeout). */
static long aop_drain(struct eng_target *t, const unsigned *done, unsigned issued, unsigned max)
{
	struct timespec t0, t1;
	unsigned seen = *done;
	long ran = 0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (issued - *done > max) {
		int r = eng_progress(t);

		if (r < 0)
			fail_msg("eng_progress: %d (%s)", r, lode_strerror(r));
		ran += r;
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (*done != seen) {
			seen = *done;
			t0 = t1;
		} else if (t1.tv_sec - t0.tv_sec >= 10) {
			fail_msg("%u of %u operations completed, then none in 10 s of eng_progress",
				 *done, issued);
		}
	}
	return ran;
}

static void test_async_many(void **state)
{
	struct tu_fix *f = fixture(state);
	enum { N = 3000, BURST = 1000 };
	struct aop *ops = calloc(N, sizeof(*ops));
	struct eng_stats st0 = stats(f->tgt);
	unsigned done = 0;
	long ran = 0;

	assert_non_null(ops);
	for (unsigned i = 0; i < N; i++) {
		struct aop *a = &ops[i];
		bool arr = i % 3 == 2;

		snprintf(a->akey, sizeof(a->akey), "%c%u", arr ? 'r' : 's', arr ? i % 7 : i);
		a->k = tu_key(&f->cont, tu_oid(i % 5), "dkey", a->akey);
		a->len = i % 3 == 0 ? 1 + i % 64 : i % 3 == 1 ? 4096 + (i * 37) % 70000
							     : 1 + (i * 11) % 9000;
		a->off = (uint64_t)i * 10000;
		a->buf = xmalloc(a->len);
		a->done = &done;
		tu_pat_fill(a->buf, a->len, i, arr ? a->off : 0);
	}
	/* a burst queued before any progress, then the rest through a window */
	for (unsigned i = 0; i < N; i++) {
		struct aop *a = &ops[i];
		int rc = i % 3 == 2 ? eng_arr_update(f->tgt, &a->k, 100 + i, a->off, a->buf, a->len,
						     aop_cb, a)
				    : eng_sv_update(f->tgt, &a->k, 100 + i, a->buf, a->len, aop_cb,
						    a);

		if (rc != 0)
			fail_msg("queueing update %u: %d (%s)", i, rc, lode_strerror(rc));
		if (i + 1 < BURST)
			continue;
		if (i + 1 == BURST && done)
			fail_msg("%u callbacks ran before eng_progress", done);
		ran += aop_drain(f->tgt, &done, i + 1, 64);
	}
	ran += aop_drain(f->tgt, &done, N, 0);
	assert_int_equal(ran, N); /* eng_progress counts the callbacks it ran */
	for (unsigned i = 0; i < N; i++) {
		if (ops[i].calls != 1 || ops[i].rc != 0)
			fail_msg("update %u: %d callbacks, rc %d", i, ops[i].calls, ops[i].rc);
		ops[i].calls = 0;
	}
	assert_int_equal(eng_inflight(f->tgt), 0);
	assert_int_equal(eng_progress(f->tgt), 0);

	struct eng_stats st = stats(f->tgt);
	print_message("%s: %llu group commits for %llu updates\n", tu_mode_name(f->mode),
		      (unsigned long long)(st.flushes - st0.flushes),
		      (unsigned long long)(st.flushed_updates - st0.flushed_updates));
	if (f->mode == ENG_MODE_DISK) {
		assert_true(st.flushed_updates - st0.flushed_updates >= N);
		assert_true(st.flushes > st0.flushes);
		/* group commit: 3000 updates, most of them in flight together */
		assert_true(st.flushes - st0.flushes < N);
	}

	/* fetches in flight, each into its own buffer */
	for (int round = 0; round < 2; round++) {
		done = 0;
		ran = 0;
		for (unsigned i = 0; i < N; i++) {
			struct aop *a = &ops[i];
			int rc;

			memset(a->buf, 0, a->len);
			a->got = 0;
			if (i % 3 == 2)
				rc = eng_arr_fetch(f->tgt, &a->k, LODE_EPOCH_MAX, a->off, a->buf,
						   a->len, aop_cb, a);
			else
				rc = eng_sv_fetch(f->tgt, &a->k, LODE_EPOCH_MAX, a->buf, a->len,
						  &a->got, aop_cb, a);
			assert_int_equal(rc, 0);
			ran += aop_drain(f->tgt, &done, i + 1, 500);
		}
		ran += aop_drain(f->tgt, &done, N, 0);
		assert_int_equal(ran, N);
		for (unsigned i = 0; i < N; i++) {
			struct aop *a = &ops[i];

			if (a->calls != 1 || a->rc != 0)
				fail_msg("fetch %u: %d callbacks, rc %d", i, a->calls, a->rc);
			if (i % 3 != 2 && a->got != a->len)
				fail_msg("fetch %u: len %u, expected %u", i, a->got, a->len);
			long bad = tu_pat_check(a->buf, a->len, i, i % 3 == 2 ? a->off : 0);
			if (bad >= 0)
				fail_msg("fetch %u: byte %ld differs", i, bad);
			a->calls = 0;
		}
		tu_fix_reopen(f);
	}
	for (unsigned i = 0; i < N; i++)
		free(ops[i].buf);
	free(ops);
}

/*
 * A queue depth of 4, the least (8 completions): 64 updates queued together,
 * then 64 reads in flight, each more than the completion queue holds (the
 * kernel keeps the rest aside until asked for them). Progress alone (no
 * wait, nothing more to submit) must finish every one; a caller's loop of
 * eng_progress is bounded here by time instead of hanging.
 */
static void test_completion_overflow(void **state)
{
	struct tu_fix *f = fixture(state);
	enum { N = 64, LEN = 8192 };
	struct aop *ops = calloc(N, sizeof(*ops));
	/* on the heap: a failed check leaves callbacks for the teardown to run */
	unsigned *done = calloc(1, sizeof(*done));

	assert_non_null(ops);
	assert_non_null(done);
	tu_fix_close(f);
	f->opts.queue_depth = 4;
	tu_fix_open(f);
	for (unsigned i = 0; i < N; i++) {
		struct aop *a = &ops[i];

		snprintf(a->akey, sizeof(a->akey), "q%u", i);
		a->k = tu_key(&f->cont, tu_oid(7), "dkey", a->akey);
		a->len = LEN;
		a->buf = xmalloc(LEN);
		a->done = done;
		tu_pat_fill(a->buf, LEN, i, 0);
		/* Queued together: a group commit may find the ring nearly full. */
		assert_int_equal(eng_arr_update(f->tgt, &a->k, 10, 0, a->buf, LEN, aop_cb, a), 0);
	}
	aop_drain(f->tgt, done, N, 0);
	for (unsigned i = 0; i < N; i++) {
		assert_int_equal(ops[i].rc, 0);
		ops[i].calls = 0;
	}
	*done = 0;
	for (unsigned i = 0; i < N; i++) {
		memset(ops[i].buf, 0, LEN);
		assert_int_equal(eng_arr_fetch(f->tgt, &ops[i].k, LODE_EPOCH_MAX, 0, ops[i].buf, LEN,
					       aop_cb, &ops[i]),
				 0);
	}
	aop_drain(f->tgt, done, N, 0);
	for (unsigned i = 0; i < N; i++) {
		assert_int_equal(ops[i].rc, 0);
		if (tu_pat_check(ops[i].buf, LEN, i, 0) >= 0)
			fail_msg("read %u: wrong bytes", i);
		free(ops[i].buf);
	}
	free(ops);
	free(done);
}

/*
 * Two array records of one akey at one epoch, a write and then a punch of
 * the range after it, as a rebuild copies a view: with a fetch in flight
 * when the write was queued, and everything completed before the punch,
 * the punch must not take the write's place in the index (their keys once
 * came from the log's sequence plus the ops in flight, which repeats). The
 * read at the latest epoch sees the write, not the older version beneath;
 * and after recovery, a later record at that epoch still sorts first.
 */
static void test_same_epoch_write_then_punch(void **state)
{
	struct tu_fix *f = fixture(state);
	enum { LEN = 48 << 10, TAIL = 16 << 10 };
	struct eng_key k = tu_key(&f->cont, tu_oid(8), "d", "a");
	struct eng_key kv = tu_key(&f->cont, tu_oid(8), "d", "small");
	uint8_t *old = xmalloc(LEN + TAIL), *new = xmalloc(LEN), *got = xmalloc(LEN + TAIL);
	uint8_t small[8] = {7};
	uint32_t slen = 0;
	struct tu_batch b = {0};

	tu_pat_fill(old, LEN + TAIL, 1, 0);
	tu_pat_fill(new, LEN, 2, 0);
	assert_int_equal(eng_sv_update(f->tgt, &kv, 10, small, sizeof(small), NULL, NULL), 0);
	assert_int_equal(eng_arr_update(f->tgt, &k, 10, 0, old, LEN + TAIL, NULL, NULL), 0);
	/* a fetch in flight while the write at epoch 11 is queued */
	assert_int_equal(eng_sv_fetch(f->tgt, &kv, LODE_EPOCH_MAX, small, sizeof(small), &slen,
				      tu_batch_cb, &b),
			 0);
	b.issued++;
	assert_int_equal(eng_arr_update(f->tgt, &k, 11, 0, new, LEN, tu_batch_cb, &b), 0);
	b.issued++;
	tu_batch_wait(f->tgt, &b);
	assert_int_equal(b.failed, 0);
	assert_int_equal(eng_arr_punch(f->tgt, &k, 11, LEN, TAIL, NULL, NULL), 0);
	for (int pass = 0; pass < 2; pass++) {
		uint64_t size = 0;

		memset(got, 0xee, LEN + TAIL);
		assert_int_equal(eng_arr_fetch(f->tgt, &k, LODE_EPOCH_MAX, 0, got, LEN + TAIL, NULL,
					       NULL),
				 0);
		if (tu_pat_check(got, LEN, 2, 0) >= 0)
			fail_msg("the write at epoch 11 is gone (pass %d): byte %ld differs", pass,
				 tu_pat_check(got, LEN, 2, 0));
		for (uint32_t i = LEN; i < LEN + TAIL; i++)
			if (got[i] != 0)
				fail_msg("the punch at epoch 11 is gone (pass %d): byte %u", pass, i);
		assert_int_equal(eng_arr_size(f->tgt, &k, LODE_EPOCH_MAX, &size), 0);
		assert_int_equal(size, LEN);
		/* the view at 10 is untouched */
		assert_int_equal(eng_arr_fetch(f->tgt, &k, 10, 0, got, LEN + TAIL, NULL, NULL), 0);
		assert_true(tu_pat_check(got, LEN + TAIL, 1, 0) < 0);
		tu_fix_reopen(f); /* and after recovery */
	}
	/* After recovery a later record at the same epoch still sorts first. */
	tu_pat_fill(new, 4096, 3, 0);
	assert_int_equal(eng_arr_update(f->tgt, &k, 11, 0, new, 4096, NULL, NULL), 0);
	assert_int_equal(eng_arr_fetch(f->tgt, &k, LODE_EPOCH_MAX, 0, got, 4096, NULL, NULL), 0);
	if (tu_pat_check(got, 4096, 3, 0) >= 0)
		fail_msg("a write at epoch 11 after recovery sorts beneath the one before it");
	free(old);
	free(new);
	free(got);
}

/*
 * Callbacks may queue new operations: chains in which each completion
 * queues the next update (or fetch) of its chain.
 */
struct chain {
	struct eng_target *t;
	const struct lode_uuid *cont;
	unsigned n, next, done, err_count;
	bool fetching;
	int first_err;
	uint8_t **bufs;
	uint32_t *lens;
};

static void chain_issue(struct chain *c);

static void chain_cb(void *arg, int rc)
{
	struct chain *c = arg;

	c->done++;
	if (rc != 0 && !c->err_count++)
		c->first_err = rc;
	if (c->next < c->n)
		chain_issue(c);
}

static void chain_issue(struct chain *c)
{
	unsigned i = c->next++;
	char akey[16];
	struct eng_key k;
	int rc;

	snprintf(akey, sizeof(akey), "c%u", i);
	k = tu_key(c->cont, tu_oid(i % 4), "chain", akey);
	if (c->fetching)
		rc = eng_sv_fetch(c->t, &k, LODE_EPOCH_MAX, c->bufs[i], c->lens[i] + 8, &c->lens[i],
				  chain_cb, c);
	else
		rc = eng_sv_update(c->t, &k, 1 + i, c->bufs[i], c->lens[i], chain_cb, c);
	if (rc != 0) {
		c->done++; /* never coming */
		if (!c->err_count++)
			c->first_err = rc;
	}
}

static void test_async_chain(void **state)
{
	struct tu_fix *f = fixture(state);
	enum { N = 600, WIDTH = 5 };
	struct chain c = {.t = f->tgt, .cont = &f->cont, .n = N};

	c.bufs = calloc(N, sizeof(*c.bufs));
	c.lens = calloc(N, sizeof(*c.lens));
	assert_true(c.bufs && c.lens);
	for (unsigned i = 0; i < N; i++) {
		c.lens[i] = i % 2 ? 1 + i % 64 : 100 + i * 17;
		c.bufs[i] = xmalloc(c.lens[i] + 8);
		tu_pat_fill(c.bufs[i], c.lens[i], 5000 + i, 0);
	}
	for (int phase = 0; phase < 2; phase++) {
		c.fetching = phase == 1;
		c.next = c.done = c.err_count = 0;
		if (c.fetching)
			for (unsigned i = 0; i < N; i++)
				memset(c.bufs[i], 0, c.lens[i] + 8);
		for (unsigned w = 0; w < WIDTH; w++)
			chain_issue(&c);
		aop_drain(f->tgt, &c.done, N, 0);
		if (c.err_count)
			fail_msg("%s chain: %u failed, first with %d (%s)",
				 c.fetching ? "fetch" : "update", c.err_count, c.first_err,
				 lode_strerror(c.first_err));
		assert_int_equal(c.done, N);
		assert_int_equal(eng_inflight(f->tgt), 0);
	}
	for (unsigned i = 0; i < N; i++) {
		assert_int_equal(c.lens[i], i % 2 ? 1 + i % 64 : 100 + i * 17);
		assert_int_equal(tu_pat_check(c.bufs[i], c.lens[i], 5000 + i, 0), -1);
		free(c.bufs[i]);
	}
	free(c.bufs);
	free(c.lens);
}

/* Registered buffers work as update sources and fetch destinations. */
static void test_buf_alloc(void **state)
{
	struct tu_fix *f = fixture(state);
	struct eng_key k = tu_key(&f->cont, tu_oid(1), "d", "sv");
	struct eng_key ka = tu_key(&f->cont, tu_oid(1), "d", "arr");
	uint8_t *p = eng_buf_alloc(f->tgt, 5000), *q = eng_buf_alloc(f->tgt, 1u << 20);
	uint32_t got = 0;

	assert_non_null(p);
	assert_non_null(q);
	tu_pat_fill(p, 5000, 77, 0);
	assert_int_equal(tu_sv_update_wait(f->tgt, &k, 5, p, 5000), 0);
	assert_int_equal(eng_sv_update(f->tgt, &k, 6, p, 40, NULL, NULL), 0);
	memset(q, 0, 1u << 20);
	assert_int_equal(tu_sv_fetch_wait(f->tgt, &k, 5, q, 1u << 20, &got), 0);
	assert_int_equal(got, 5000);
	assert_int_equal(tu_pat_check(q, 5000, 77, 0), -1);
	assert_int_equal(eng_sv_fetch(f->tgt, &k, 6, q, 1u << 20, &got, NULL, NULL), 0);
	assert_int_equal(got, 40);
	assert_int_equal(tu_pat_check(q, 40, 77, 0), -1);
	tu_pat_fill(q, 1u << 20, 78, 12345);
	assert_int_equal(tu_arr_update_wait(f->tgt, &ka, 5, 12345, q, 1u << 20), 0);
	memset(p, 0, 5000);
	assert_int_equal(tu_arr_fetch_wait(f->tgt, &ka, 5, 12345 + 100000, p, 5000), 0);
	assert_int_equal(tu_pat_check(p, 5000, 78, 12345 + 100000), -1);
	eng_buf_free(f->tgt, p);
	eng_buf_free(f->tgt, q);
	/* many small registered buffers */
	void *bufs[64];
	for (int i = 0; i < 64; i++) {
		bufs[i] = eng_buf_alloc(f->tgt, 1 + (size_t)i * 1000);
		assert_non_null(bufs[i]);
		memset(bufs[i], i, 1 + (size_t)i * 1000);
	}
	for (int i = 0; i < 64; i++)
		eng_buf_free(f->tgt, bufs[i]);
}

/*
 * Values landed in reserved extent space (RAM mode): the update takes the
 * space without copying, what was reserved and never used goes back, and
 * disk mode and inline-sized values get no reservation.
 */
static void test_value_reserve(void **state)
{
	struct tu_fix *f = fixture(state);
	struct eng_key k = tu_key(&f->cont, tu_oid(2), "d", "sv");
	struct eng_key ka = tu_key(&f->cont, tu_oid(2), "d", "arr");
	struct eng_stats s0 = stats(f->tgt);
	uint8_t *back = malloc(1u << 20);
	uint8_t *p, *q;
	uint32_t got = 0;

	assert_non_null(back);
	assert_null(eng_value_reserve(f->tgt, 64)); /* inline-sized */
	p = eng_value_reserve(f->tgt, 100000);
	if (f->mode == ENG_MODE_DISK) {
		assert_null(p);
		free(back);
		return;
	}
	assert_non_null(p);
	assert_int_equal(stats(f->tgt).extent_used, s0.extent_used + 25 * 4096);
	tu_pat_fill(p, 100000, 91, 0);
	assert_int_equal(tu_sv_update_wait(f->tgt, &k, 5, p, 100000), 0);
	assert_int_equal(tu_sv_fetch_wait(f->tgt, &k, 5, back, 1u << 20, &got), 0);
	assert_int_equal(got, 100000);
	assert_int_equal(tu_pat_check(back, 100000, 91, 0), -1);
	/* A reservation larger than the value: the rest is freed. */
	q = eng_value_reserve(f->tgt, 1u << 20);
	assert_non_null(q);
	tu_pat_fill(q, 8192, 92, 4096);
	assert_int_equal(tu_arr_update_wait(f->tgt, &ka, 6, 4096, q, 8192), 0);
	assert_int_equal(stats(f->tgt).extent_used, s0.extent_used + 27 * 4096);
	memset(back, 0, 8192);
	assert_int_equal(tu_arr_fetch_wait(f->tgt, &ka, 6, 4096, back, 8192), 0);
	assert_int_equal(tu_pat_check(back, 8192, 92, 4096), -1);
	/* Reserved and given back. */
	q = eng_value_reserve(f->tgt, 300000);
	assert_non_null(q);
	eng_buf_free(f->tgt, q);
	assert_int_equal(stats(f->tgt).extent_used, s0.extent_used + 27 * 4096);
	/* Survives a reopen: the data is in the extent file like any other. */
	tu_fix_reopen(f);
	assert_int_equal(tu_sv_fetch_wait(f->tgt, &k, 5, back, 1u << 20, &got), 0);
	assert_int_equal(tu_pat_check(back, 100000, 91, 0), -1);
	free(back);
}

/* ==== inline values, stats and options ==================================== */

static void test_inline_and_stats(void **state)
{
	struct tu_fix *f = fixture(state);
	struct eng_key k = tu_key(&f->cont, tu_oid(1), "d", "a");
	struct eng_key ka = tu_key(&f->cont, tu_oid(1), "d", "arr");
	uint8_t b[8192] = {0};
	struct eng_stats s0 = stats(f->tgt), s;

	assert_int_equal(s0.extent_cap, 1ull << 30); /* capacity 0 = 1 GiB */
	assert_true(s0.extent_used <= s0.extent_cap);
	sv_put(f->tgt, &k, 1, 64, 1); /* inline */
	s = stats(f->tgt);
	assert_int_equal(s.extent_used, s0.extent_used);
	assert_true(s.records > s0.records);
	sv_put(f->tgt, &k, 2, 65, 2);
	assert_int_equal(stats(f->tgt).extent_used, s0.extent_used + 4096);
	sv_put(f->tgt, &k, 3, 4097, 3);
	assert_int_equal(stats(f->tgt).extent_used, s0.extent_used + 4096 + 8192);
	assert_int_equal(eng_arr_update(f->tgt, &ka, 1, 100, b, 64, NULL, NULL), 0);
	assert_int_equal(stats(f->tgt).extent_used, s0.extent_used + 4096 + 8192);
	assert_int_equal(eng_arr_update(f->tgt, &ka, 2, 100, b, 4096, NULL, NULL), 0);
	assert_int_equal(stats(f->tgt).extent_used, s0.extent_used + 4096 + 8192 + 4096);
	sv_expect(f->tgt, &k, 1, 64, 1, false);
	sv_expect(f->tgt, &k, 2, 65, 2, false);
	tu_fix_reopen(f);
	/* the allocation is rebuilt at open */
	assert_int_equal(stats(f->tgt).extent_used, s0.extent_used + 4096 + 8192 + 4096);
	sv_expect(f->tgt, &k, 3, 4097, 3, false);

	/* options: a bigger inline threshold and a smaller capacity */
	struct eng_tgt_opts o = {.mode = f->mode, .inline_max = 200, .capacity = 64u << 20};
	char *path = tu_path_join(f->dir, "opts");
	struct eng_target *t;

	o.path = path;
	assert_int_equal(eng_tgt_open(&o, &t), 0);
	assert_int_equal(eng_cont_create(t, &f->cont), 0);
	s0 = stats(t);
	assert_int_equal(s0.extent_cap, 64u << 20);
	sv_put(t, &k, 1, 200, 5);
	assert_int_equal(stats(t).extent_used, s0.extent_used);
	sv_put(t, &k, 2, 201, 6);
	assert_int_equal(stats(t).extent_used, s0.extent_used + 4096);
	assert_int_equal(eng_tgt_close(t), 0);
	assert_int_equal(eng_tgt_open(&o, &t), 0);
	sv_expect(t, &k, 1, 200, 5, false);
	sv_expect(t, &k, 2, 201, 6, true);
	assert_int_equal(eng_tgt_close(t), 0);
	free(path);
}

/* ==== independent targets on their own threads ============================ */

struct thr {
	enum eng_mode mode;
	char *path;
	unsigned id;
	char err[160]; /* empty when all went well */
};

/* A thread owning one target; plain checks only (cmocka is not thread-safe). */
static void *thr_main(void *arg)
{
	struct thr *th = arg;
	struct eng_tgt_opts o = {.path = th->path, .mode = th->mode};
	struct lode_uuid c = tu_uuid(th->id);
	struct eng_target *t;
	struct tu_batch b = {0};
	enum { N = 400 };
	uint8_t *bufs = malloc((size_t)N * 5000);
	int rc = eng_tgt_open(&o, &t);

	if (rc != 0 || !bufs) {
		snprintf(th->err, sizeof(th->err), "open: %d", rc);
		free(bufs);
		return NULL;
	}
	rc = eng_cont_create(t, &c);
	for (unsigned i = 0; rc == 0 && i < N; i++) {
		char akey[16];
		struct eng_key k;

		snprintf(akey, sizeof(akey), "a%u", i);
		k = tu_key(&c, tu_oid(i % 9), "d", akey);
		tu_pat_fill(bufs + (size_t)i * 5000, 1 + i * 12, th->id * 1000 + i, 0);
		rc = eng_sv_update(t, &k, 1 + i, bufs + (size_t)i * 5000, 1 + i * 12, tu_batch_cb,
				   &b);
		b.issued += rc == 0;
		while (rc == 0 && b.issued - b.completed > 32)
			rc = eng_progress(t) < 0 ? -EIO : 0;
	}
	while (rc == 0 && b.completed < b.issued)
		rc = eng_progress(t) < 0 ? -EIO : 0;
	if (rc != 0 || b.failed) {
		snprintf(th->err, sizeof(th->err), "updates: %d, %u failed", rc, b.failed);
		goto out;
	}
	for (unsigned i = 0; i < N; i++) {
		char akey[16];
		struct eng_key k;
		uint32_t got = 0;

		snprintf(akey, sizeof(akey), "a%u", i);
		k = tu_key(&c, tu_oid(i % 9), "d", akey);
		rc = eng_sv_fetch(t, &k, LODE_EPOCH_MAX, bufs, 5000, &got, NULL, NULL);
		if (rc != 0 || got != 1 + i * 12 || tu_pat_check(bufs, got, th->id * 1000 + i, 0) >= 0) {
			snprintf(th->err, sizeof(th->err), "fetch %u: %d len %u", i, rc, got);
			goto out;
		}
	}
out:
	rc = eng_tgt_close(t);
	if (rc != 0 && !th->err[0])
		snprintf(th->err, sizeof(th->err), "close: %d", rc);
	free(bufs);
	return NULL;
}

/* Different targets are independent: each driven by its own thread at once. */
static void test_threads(void **state)
{
	struct tu_fix *f = fixture(state);
	struct thr th[3];
	pthread_t tid[3];

	for (unsigned i = 0; i < 3; i++) {
		char name[16];

		snprintf(name, sizeof(name), "thr%u", i);
		th[i] = (struct thr){.mode = f->mode, .path = tu_path_join(f->dir, name), .id = i + 10};
		assert_int_equal(pthread_create(&tid[i], NULL, thr_main, &th[i]), 0);
	}
	/* the fixture's own target keeps working meanwhile on this thread */
	for (unsigned i = 0; i < 50; i++)
		sv_put(f->tgt, KEYP(&f->cont, tu_oid(1), "main", "a"), 1 + i, 3000, i);
	for (unsigned i = 0; i < 3; i++) {
		assert_int_equal(pthread_join(tid[i], NULL), 0);
		if (th[i].err[0])
			fail_msg("thread %u: %s", i, th[i].err);
		free(th[i].path);
	}
	sv_expect(f->tgt, KEYP(&f->cont, tu_oid(1), "main", "a"), LODE_EPOCH_MAX, 3000, 49, false);
}

/* ==== persistence ========================================================= */

static void test_reopen_random(void **state)
{
	struct tu_fix *f = fixture(state);
	struct tu_model *m = tu_model_new(3, 4, 4);
	struct tu_rng rng;
	lode_epoch_t e = 1;

	tu_rng_seed(&rng, 1234);
	for (int round = 0; round < 4; round++) {
		struct tu_io io = {0};

		for (unsigned i = 0; i < 150; i++) {
			unsigned o = (unsigned)tu_rand_below(&rng, 3);
			unsigned d = (unsigned)tu_rand_below(&rng, 4);
			unsigned a = (unsigned)tu_rand_below(&rng, 4);
			unsigned r = (unsigned)tu_rand_below(&rng, 100);
			uint64_t s = tu_rand(&rng);
			struct tu_io *iop = r & 1 ? &io : NULL;

			if (r < 3)
				tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_OBJ, o, d, a, e++, 0, 0, iop);
			else if (r < 6)
				tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_DKEY, o, d, a, e++, 0, 0, iop);
			else if (r < 10)
				tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_AKEY, o, d, a, e++, 0, 0, iop);
			else if (tu_akey_is_arr(a) && r < 15)
				tu_do_punch(f->tgt, &f->cont, m, TU_PUNCH_RANGE, o, d, a, e++,
					    tu_rand_below(&rng, 40000), tu_rand_range(&rng, 1, 20000),
					    iop);
			else if (tu_akey_is_arr(a))
				tu_do_arr(f->tgt, &f->cont, m, o, d, a, e++, tu_rand_below(&rng, 40000),
					  (uint32_t)tu_rand_range(&rng, 1, 12000), s, iop);
			else
				tu_do_sv(f->tgt, &f->cont, m, o, d, a, e++,
					 (uint32_t)(r < 60 ? tu_rand_range(&rng, 1, 64)
							   : tu_rand_range(&rng, 65, 50000)),
					 s, iop);
		}
		tu_io_wait(f->tgt, &io);
		tu_fix_reopen(f);
		if (round & 1)
			tu_fix_reopen(f); /* reopen without writes in between */
		lode_epoch_t eps[] = {e / 4, e / 2, e - 1, LODE_EPOCH_MAX};
		check_epochs(f, m, eps, 4, 52000, "reopen");
	}
	tu_model_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TU_BOTH_MODES(test_open_args),
		TU_BOTH_MODES(test_key_validation),
		TU_BOTH_MODES(test_null_pointers),
		TU_BOTH_MODES(test_einval),
		TU_BOTH_MODES(test_overflow_e2big),
		TU_BOTH_MODES(test_io_max),
		TU_BOTH_MODES(test_etype),
		TU_BOTH_MODES(test_enoent),
		TU_BOTH_MODES(test_fetch_small_buffer),
		TU_BOTH_MODES(test_fetch_guard),
		TU_BOTH_MODES(test_snap_errors),
		TU_BOTH_MODES(test_cont_errors),
		TU_BOTH_MODES(test_sv_sizes),
		TU_BOTH_MODES(test_sv_replace),
		TU_BOTH_MODES(test_sv_epochs),
		TU_BOTH_MODES(test_arr_sparse),
		TU_BOTH_MODES(test_arr_overlap),
		TU_BOTH_MODES(test_punch_levels),
		TU_BOTH_MODES(test_snapshots),
		TU_BOTH_MODES(test_aggregate),
		TU_BOTH_MODES(test_aggregate_punches),
		TU_BOTH_MODES(test_containers),
		TU_BOTH_MODES(test_key_bytes),
		TU_BOTH_MODES(test_enum_objects),
		TU_BOTH_MODES(test_enum_dkeys_100k),
		TU_BOTH_MODES(test_enum_akeys),
		TU_BOTH_MODES(test_enum_resume),
		TU_BOTH_MODES(test_async_many),
		TU_BOTH_MODES(test_completion_overflow),
		TU_BOTH_MODES(test_same_epoch_write_then_punch),
		TU_BOTH_MODES(test_async_chain),
		TU_BOTH_MODES(test_buf_alloc),
		TU_BOTH_MODES(test_value_reserve),
		TU_BOTH_MODES(test_inline_and_stats),
		TU_BOTH_MODES(test_threads),
		TU_BOTH_MODES(test_reopen_random),
	};

	tu_main_init();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
