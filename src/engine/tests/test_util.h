/*
 * Helpers shared by the engine's test programs: temporary target
 * directories, a deterministic random generator and byte pattern, waiting
 * on asynchronous completions, a cmocka fixture that opens one target in a
 * given mode, and a reference model of the engine's versioning semantics.
 *
 * The helpers that can fail call cmocka's assertions, so they may only be
 * used from inside a running cmocka test (not from a forked child).
 */
#ifndef LODE_ENGINE_TEST_UTIL_H
#define LODE_ENGINE_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "engine/engine.h"

/*
 * Call first in main(): $LODE_TEST_FILTER (a cmocka pattern such as
 * "test_snap*") selects the tests to run.
 */
void tu_main_init(void);

/* ---- directories --------------------------------------------------------- */

/*
 * A fresh empty directory for a target in the given mode: under /dev/shm for
 * ENG_MODE_RAM, under $LODE_TEST_TMP (or /tmp) for ENG_MODE_DISK. The name
 * starts with tag. Returns a malloc'd path; asserts on failure.
 */
char *tu_tmpdir(enum eng_mode mode, const char *tag);
/* Remove path and everything below it (unless LODE_TEST_KEEP is set). */
void tu_rmtree(const char *path);
/* malloc'd "dir/name". */
char *tu_path_join(const char *dir, const char *name);
const char *tu_mode_name(enum eng_mode mode);

/* ---- random numbers and patterns --------------------------------------- */

struct tu_rng {
	uint64_t s;
};

uint64_t tu_mix64(uint64_t x);
void tu_rng_seed(struct tu_rng *r, uint64_t seed);
uint64_t tu_rand(struct tu_rng *r);
/* Uniform in [0, n); n > 0. */
uint64_t tu_rand_below(struct tu_rng *r, uint64_t n);
/* Uniform in [lo, hi]. */
uint64_t tu_rand_range(struct tu_rng *r, uint64_t lo, uint64_t hi);
/* $LODE_TEST_SEED if set, else def. */
uint64_t tu_seed_from_env(uint64_t def);
/* $name parsed as an unsigned number if set, else def. */
uint64_t tu_env_u64(const char *name, uint64_t def);

/*
 * A byte pattern addressed by (seed, absolute position): the same seed and
 * position always give the same byte, so a sub-range of a value can be
 * checked without keeping the value. Seeds are never expected to give
 * all-zero runs.
 */
uint8_t tu_pat_byte(uint64_t seed, uint64_t pos);
void tu_pat_fill(void *buf, size_t len, uint64_t seed, uint64_t pos);
/* Index of the first byte that differs from the pattern, or -1 if none. */
long tu_pat_check(const void *buf, size_t len, uint64_t seed, uint64_t pos);
/* Index of the first non-zero byte, or -1 if none. */
long tu_zero_check(const void *buf, size_t len);

/* ---- keys ----------------------------------------------------------------- */

struct lode_uuid tu_uuid(unsigned n);
struct lode_oid tu_oid(uint64_t n);
/* A key naming NUL-terminated dkey and akey strings (which must outlive it). */
struct eng_key tu_key(const struct lode_uuid *cont, struct lode_oid oid, const char *dkey,
		      const char *akey);

/* ---- waiting for completions ------------------------------------------- */

/* One asynchronous operation: pass tu_op_cb and a struct tu_op. */
struct tu_op {
	int done;
	int rc;
};
void tu_op_cb(void *arg, int rc);

/*
 * Many asynchronous operations sharing one counter: pass tu_batch_cb and the
 * batch, and count each successfully queued operation in issued.
 */
struct tu_batch {
	unsigned issued;
	unsigned completed;
	unsigned failed;
	int first_err;
};
void tu_batch_cb(void *arg, int rc);

/* Call eng_progress until op is done (asserting it never fails); returns op->rc. */
int tu_op_wait(struct eng_target *tgt, struct tu_op *op);
/* Call eng_progress until every issued operation of b has completed. */
void tu_batch_wait(struct eng_target *tgt, struct tu_batch *b);
/* Wait until at most max operations of b are still outstanding. */
void tu_batch_throttle(struct eng_target *tgt, struct tu_batch *b, unsigned max);

/*
 * Finish an asynchronous call that returned rc: if it refused the operation
 * (rc < 0), check that the callback never runs and return rc; else check the
 * callback did not run inside the call, wait for it and return its code.
 */
int tu_op_finish(struct eng_target *tgt, struct tu_op *op, int rc);

/*
 * The asynchronous calls, issued with a callback and then waited for: each
 * returns the refusal code if the call refused the operation up front (and
 * then checks that no callback ever came), else the completion's code.
 */
int tu_sv_update_wait(struct eng_target *tgt, const struct eng_key *key, lode_epoch_t epoch,
		      const void *buf, uint32_t len);
int tu_sv_fetch_wait(struct eng_target *tgt, const struct eng_key *key, lode_epoch_t epoch,
		     void *buf, uint32_t cap, uint32_t *len_out);
int tu_arr_update_wait(struct eng_target *tgt, const struct eng_key *key, lode_epoch_t epoch,
		       uint64_t off, const void *buf, uint32_t len);
int tu_arr_fetch_wait(struct eng_target *tgt, const struct eng_key *key, lode_epoch_t epoch,
		      uint64_t off, void *buf, uint32_t len);

/* ---- a fixture: one open target with one container ----------------------- */

struct tu_fix {
	enum eng_mode mode;
	char *dir;  /* temporary directory, removed at teardown */
	char *path; /* dir/tgt: the target's directory, created by the engine */
	struct eng_tgt_opts opts;
	struct eng_target *tgt;
	struct lode_uuid cont; /* created by the setup */
};

/* Initial states for the fixture: pass &tu_mode_ram or &tu_mode_disk. */
extern enum eng_mode tu_mode_ram;
extern enum eng_mode tu_mode_disk;

/* Setup: *state points to an enum eng_mode; replaced by a struct tu_fix *. */
int tu_fix_setup(void **state);
/* Teardown: close the target (if open) and remove the directory. */
int tu_fix_teardown(void **state);
/* Close and reopen the fixture's target with the same options. */
void tu_fix_reopen(struct tu_fix *f);
/* Open f->opts into f->tgt, asserting success. */
void tu_fix_open(struct tu_fix *f);
/* Close f->tgt, asserting success. */
void tu_fix_close(struct tu_fix *f);

/* A cmocka test entry run once in each mode. */
#define TU_BOTH_MODES(f)                                                    \
	{#f "/ram", f, tu_fix_setup, tu_fix_teardown, (void *)&tu_mode_ram},    \
	{#f "/disk", f, tu_fix_setup, tu_fix_teardown, (void *)&tu_mode_disk}

/* ---- reference model ---------------------------------------------------- */

/*
 * What the engine should return, computed from every version ever written
 * (nothing is ever forgotten, so reads at old epochs can be answered too).
 * Keys are small indices: object o, dkey d, akey a in a fixed-size grid;
 * the test maps indices to names. Values are patterns: a single value is
 * tu_pat_fill(buf, len, seed, 0); a byte array extent written at off holds
 * tu_pat_byte(seed, p) at every absolute position p it covers.
 *
 * Semantics modelled: a read at epoch E sees the newest version <= E unless
 * a punch at an epoch in [that version's epoch, E] covers it (object, dkey,
 * akey, or for arrays a byte range). A second single-value update at the
 * same epoch replaces the first.
 *
 * Where the contract in engine.h leaves a choice open (an array whose every
 * extent is hidden by range punches: -ENOENT or zeros? listed or not?), the
 * model reports both answers as acceptable.
 */
struct tu_model;

enum tu_vis {
	TU_VIS_NO = 0,    /* must not be listed */
	TU_VIS_YES = 1,   /* must be listed */
	TU_VIS_MAYBE = 2, /* the contract allows either */
};

struct tu_model *tu_model_new(unsigned nobj, unsigned ndkey, unsigned nakey);
void tu_model_free(struct tu_model *m);

void tu_model_sv_put(struct tu_model *m, unsigned o, unsigned d, unsigned a, lode_epoch_t e,
		     uint32_t len, uint64_t seed);
void tu_model_arr_put(struct tu_model *m, unsigned o, unsigned d, unsigned a, lode_epoch_t e,
		      uint64_t off, uint32_t len, uint64_t seed);
void tu_model_obj_punch(struct tu_model *m, unsigned o, lode_epoch_t e);
void tu_model_dkey_punch(struct tu_model *m, unsigned o, unsigned d, lode_epoch_t e);
void tu_model_akey_punch(struct tu_model *m, unsigned o, unsigned d, unsigned a, lode_epoch_t e);
void tu_model_range_punch(struct tu_model *m, unsigned o, unsigned d, unsigned a, lode_epoch_t e,
			  uint64_t off, uint64_t len);

/* 0 and (*len, *seed, *ver_epoch) of the visible single value, or -ENOENT. */
int tu_model_sv_get(const struct tu_model *m, unsigned o, unsigned d, unsigned a, lode_epoch_t e,
		    uint32_t *len, uint64_t *seed, lode_epoch_t *ver_epoch);

/*
 * Expected bytes of [off, off+len) of an array at epoch e into out. Returns
 * 0, or -ENOENT when the akey has no visible extent. *enoent_ok is set when
 * -ENOENT is an acceptable answer as well (every extent is range-punched).
 */
int tu_model_arr_get(const struct tu_model *m, unsigned o, unsigned d, unsigned a, lode_epoch_t e,
		     uint64_t off, uint32_t len, uint8_t *out, bool *enoent_ok);

/*
 * Acceptable array sizes at e: *size_raw ignores range punches (highest
 * byte of a visible extent + 1), *size_punched applies them (highest
 * visible byte + 1). Both 0 when nothing is visible.
 */
void tu_model_arr_size(const struct tu_model *m, unsigned o, unsigned d, unsigned a,
		       lode_epoch_t e, uint64_t *size_raw, uint64_t *size_punched);

enum tu_vis tu_model_akey_vis(const struct tu_model *m, unsigned o, unsigned d, unsigned a,
			      lode_epoch_t e);
enum tu_vis tu_model_dkey_vis(const struct tu_model *m, unsigned o, unsigned d, lode_epoch_t e);
enum tu_vis tu_model_obj_vis(const struct tu_model *m, unsigned o, lode_epoch_t e);

/*
 * Doing an operation on the engine and the model at once. With io NULL the
 * call blocks and must succeed; else it is issued asynchronously, must be
 * queued, and its buffer is kept until tu_io_wait, which waits for every
 * operation and fails the test if any did not complete with 0.
 */
struct tu_io {
	struct tu_batch b;
	void **bufs;
	size_t nbufs, cap;
};
void tu_io_wait(struct eng_target *tgt, struct tu_io *io);

enum tu_punch {
	TU_PUNCH_OBJ,
	TU_PUNCH_DKEY,
	TU_PUNCH_AKEY,
	TU_PUNCH_RANGE,
};

void tu_do_sv(struct eng_target *tgt, const struct lode_uuid *cont, struct tu_model *m,
	      unsigned o, unsigned d, unsigned a, lode_epoch_t e, uint32_t len, uint64_t seed,
	      struct tu_io *io);
void tu_do_arr(struct eng_target *tgt, const struct lode_uuid *cont, struct tu_model *m,
	       unsigned o, unsigned d, unsigned a, lode_epoch_t e, uint64_t off, uint32_t len,
	       uint64_t seed, struct tu_io *io);
/* off and len are used by TU_PUNCH_RANGE only. */
void tu_do_punch(struct eng_target *tgt, const struct lode_uuid *cont, struct tu_model *m,
		 enum tu_punch level, unsigned o, unsigned d, unsigned a, lode_epoch_t e,
		 uint64_t off, uint64_t len, struct tu_io *io);

/* ---- checking the engine against the model ----------------------------- */

/*
 * Names for the model's grid: dkey d (d < TU_MAX_DKEYS; some are hundreds of
 * bytes long, one is LODE_KEY_MAX), akey a (odd a: a byte array, even: a
 * single value), object o (tu_oid(o)).
 */
#define TU_MAX_DKEYS 64
#define TU_MAX_AKEYS 16
const char *tu_dkey_name(unsigned d);
const char *tu_akey_name(unsigned a);
static inline bool tu_akey_is_arr(unsigned a)
{
	return a & 1;
}
/* The engine key of grid cell (o, d, a) in cont. */
struct eng_key tu_grid_key(const struct lode_uuid *cont, unsigned o, unsigned d, unsigned a);

/*
 * Read one akey of the grid from the engine at epoch e and compare with the
 * model: a single value (whole), or the array range [off, off+len) and its
 * size. On a mismatch the test fails with ctx and the details. With async,
 * the read is issued with a callback and waited for.
 */
void tu_check_sv(struct eng_target *tgt, const struct lode_uuid *cont, const struct tu_model *m,
		 unsigned o, unsigned d, unsigned a, lode_epoch_t e, bool async, const char *ctx);
void tu_check_arr(struct eng_target *tgt, const struct lode_uuid *cont, const struct tu_model *m,
		  unsigned o, unsigned d, unsigned a, lode_epoch_t e, uint64_t off, uint32_t len,
		  bool async, const char *ctx);
void tu_check_arr_size(struct eng_target *tgt, const struct lode_uuid *cont,
		       const struct tu_model *m, unsigned o, unsigned d, unsigned a, lode_epoch_t e,
		       const char *ctx);
/*
 * Check every akey of the model's grid at e (arrays over [0, arr_span)),
 * and the dkey / akey / object enumerations against the model.
 */
void tu_check_all(struct eng_target *tgt, const struct lode_uuid *cont, const struct tu_model *m,
		  lode_epoch_t e, uint64_t arr_span, const char *ctx);
/* Only the enumerations at e (batch buffers of buf_len bytes). */
void tu_check_lists(struct eng_target *tgt, const struct lode_uuid *cont, const struct tu_model *m,
		    lode_epoch_t e, size_t buf_len, const char *ctx);

/*
 * Enumerate all dkeys (akey_list false) of key->oid or all akeys of
 * key->dkey (true) at e, buf_len bytes per batch, copying the anchor between
 * calls. Calls visit(arg, name, len) per key. Returns the number of keys;
 * fails the test on an error or a malformed batch.
 */
size_t tu_list_keys(struct eng_target *tgt, const struct eng_key *key, bool akey_list,
		    lode_epoch_t e, size_t buf_len,
		    void (*visit)(void *arg, const uint8_t *name, uint16_t len), void *arg);

#endif
