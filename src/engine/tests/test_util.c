/*
 * Helpers shared by the engine's test programs (see test_util.h): temporary
 * directories, a random generator and addressable byte pattern, waiting on
 * completions, the one-target fixture and the reference model.
 */
#include "test_util.h"

#include <endian.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void tu_main_init(void)
{
	const char *filter = getenv("LODE_TEST_FILTER");

	if (filter && *filter)
		cmocka_set_test_filter(filter);
	setvbuf(stdout, NULL, _IOLBF, 0);
}

/* ---- directories --------------------------------------------------------- */

static void mkdir_p(const char *path)
{
	char tmp[PATH_MAX];
	size_t n = strlen(path);

	assert_true(n > 0 && n < sizeof(tmp));
	memcpy(tmp, path, n + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
			fail_msg("mkdir %s: %s", tmp, strerror(errno));
		*p = '/';
	}
	if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
		fail_msg("mkdir %s: %s", tmp, strerror(errno));
}

char *tu_tmpdir(enum eng_mode mode, const char *tag)
{
	char buf[PATH_MAX];
	const char *base;

	if (mode == ENG_MODE_RAM) {
		base = "/dev/shm";
	} else {
		base = getenv("LODE_TEST_TMP");
		if (!base || !*base)
			base = "/tmp";
		mkdir_p(base);
	}
	snprintf(buf, sizeof(buf), "%s/lode-%s-%s-XXXXXX", base, tag, tu_mode_name(mode));
	if (!mkdtemp(buf))
		fail_msg("mkdtemp %s: %s", buf, strerror(errno));
	char *r = strdup(buf);
	assert_non_null(r);
	return r;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	if (remove(path) != 0 && errno != ENOENT)
		fprintf(stderr, "remove %s: %s\n", path, strerror(errno));
	return 0;
}

void tu_rmtree(const char *path)
{
	if (!path || getenv("LODE_TEST_KEEP"))
		return;
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

char *tu_path_join(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = malloc(n);

	assert_non_null(p);
	snprintf(p, n, "%s/%s", dir, name);
	return p;
}

const char *tu_mode_name(enum eng_mode mode)
{
	return mode == ENG_MODE_RAM ? "ram" : "disk";
}

/* ---- random numbers and patterns --------------------------------------- */

uint64_t tu_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

void tu_rng_seed(struct tu_rng *r, uint64_t seed)
{
	r->s = seed;
}

uint64_t tu_rand(struct tu_rng *r)
{
	r->s += 0x9e3779b97f4a7c15ULL;
	return tu_mix64(r->s);
}

uint64_t tu_rand_below(struct tu_rng *r, uint64_t n)
{
	return tu_rand(r) % n;
}

uint64_t tu_rand_range(struct tu_rng *r, uint64_t lo, uint64_t hi)
{
	return lo + tu_rand_below(r, hi - lo + 1);
}

uint64_t tu_env_u64(const char *name, uint64_t def)
{
	const char *s = getenv(name);

	if (!s || !*s)
		return def;
	return strtoull(s, NULL, 0);
}

uint64_t tu_seed_from_env(uint64_t def)
{
	return tu_env_u64("LODE_TEST_SEED", def);
}

/* The pattern's words: word widx of seed is pat_word(pat_key(seed), widx). */
static inline uint64_t pat_key(uint64_t seed)
{
	return tu_mix64(seed + 0x632be59bd9b4e019ULL);
}

static inline uint64_t pat_word(uint64_t key, uint64_t widx)
{
	return tu_mix64(key ^ (widx * 0x9e3779b97f4a7c15ULL));
}

uint8_t tu_pat_byte(uint64_t seed, uint64_t pos)
{
	return (uint8_t)(pat_word(pat_key(seed), pos >> 3) >> ((pos & 7) * 8));
}

/*
 * Byte i of a pattern is byte (pos + i) & 7 of its word, least significant
 * first: a whole aligned word is that word stored little-endian, which is
 * how the fill and the check take the middle of a range, 8 bytes at a time
 * (the model checks of the engine's tests spend most of their time here).
 */
void tu_pat_fill(void *buf, size_t len, uint64_t seed, uint64_t pos)
{
	uint64_t key = pat_key(seed);
	uint8_t *b = buf;
	size_t i = 0;

	while (i < len) {
		uint64_t p = pos + i;
		uint64_t w = pat_word(key, p >> 3);

		if ((p & 7) == 0 && len - i >= 8) {
			w = htole64(w);
			memcpy(b + i, &w, 8);
			i += 8;
			continue;
		}
		for (unsigned k = p & 7; k < 8 && i < len; k++, i++)
			b[i] = (uint8_t)(w >> (k * 8));
	}
}

long tu_pat_check(const void *buf, size_t len, uint64_t seed, uint64_t pos)
{
	uint64_t key = pat_key(seed);
	const uint8_t *b = buf;
	size_t i = 0;

	while (i < len) {
		uint64_t p = pos + i;
		uint64_t w = pat_word(key, p >> 3), got;

		if ((p & 7) == 0 && len - i >= 8) {
			memcpy(&got, b + i, 8);
			if (got == htole64(w)) {
				i += 8;
				continue;
			}
		}
		for (unsigned k = p & 7; k < 8 && i < len; k++, i++)
			if (b[i] != (uint8_t)(w >> (k * 8)))
				return (long)i;
	}
	return -1;
}

long tu_zero_check(const void *buf, size_t len)
{
	const uint8_t *b = buf;

	for (size_t i = 0; i < len; i++)
		if (b[i])
			return (long)i;
	return -1;
}

/* ---- keys ----------------------------------------------------------------- */

struct lode_uuid tu_uuid(unsigned n)
{
	struct lode_uuid u;

	for (unsigned i = 0; i < sizeof(u.b); i++)
		u.b[i] = (uint8_t)(0xa0 + i + n * 7);
	memcpy(u.b, &n, sizeof(n));
	return u;
}

struct lode_oid tu_oid(uint64_t n)
{
	return lode_oid_make(LODE_OT_KV, 0, n >> 32, n * 0x10001 + 1);
}

struct eng_key tu_key(const struct lode_uuid *cont, struct lode_oid oid, const char *dkey,
		      const char *akey)
{
	struct eng_key k;

	memset(&k, 0, sizeof(k));
	k.cont = cont;
	k.oid = oid;
	k.dkey = dkey;
	k.dkey_len = dkey ? (uint32_t)strlen(dkey) : 0;
	k.akey = akey;
	k.akey_len = akey ? (uint32_t)strlen(akey) : 0;
	return k;
}

/* ---- waiting for completions ------------------------------------------- */

#define TU_WAIT_LIMIT_S 120

void tu_op_cb(void *arg, int rc)
{
	struct tu_op *op = arg;

	op->done++;
	op->rc = rc;
}

void tu_batch_cb(void *arg, int rc)
{
	struct tu_batch *b = arg;

	b->completed++;
	if (rc != 0) {
		if (!b->failed)
			b->first_err = rc;
		b->failed++;
	}
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One round of eng_progress, failing the test if the target failed or hangs. */
static void progress_once(struct eng_target *tgt, double start, unsigned *spins)
{
	int rc = eng_progress(tgt);

	if (rc < 0)
		fail_msg("eng_progress failed: %d (%s)", rc, lode_strerror(rc));
	if (rc == 0 && (++*spins & 0xfff) == 0 && now_s() - start > TU_WAIT_LIMIT_S)
		fail_msg("no completion after %d s (eng_inflight %u)", TU_WAIT_LIMIT_S,
			 eng_inflight(tgt));
}

int tu_op_wait(struct eng_target *tgt, struct tu_op *op)
{
	double start = now_s();
	unsigned spins = 0;

	while (!op->done)
		progress_once(tgt, start, &spins);
	assert_int_equal(op->done, 1);
	return op->rc;
}

void tu_batch_throttle(struct eng_target *tgt, struct tu_batch *b, unsigned max)
{
	double start = now_s();
	unsigned spins = 0;

	while (b->issued - b->completed > max)
		progress_once(tgt, start, &spins);
	assert_true(b->completed <= b->issued);
}

void tu_batch_wait(struct eng_target *tgt, struct tu_batch *b)
{
	tu_batch_throttle(tgt, b, 0);
}

/*
 * After an operation was refused up front its callback must never run:
 * give the engine a few rounds to (wrongly) call it.
 */
static int refused(struct eng_target *tgt, struct tu_op *op, int rc)
{
	assert_true(rc < 0);
	for (int i = 0; i < 64 && eng_inflight(tgt); i++)
		assert_true(eng_progress(tgt) >= 0);
	assert_true(eng_progress(tgt) >= 0);
	if (op->done)
		fail_msg("callback ran (rc %d) for an operation refused with %d", op->rc, rc);
	return rc;
}

int tu_op_finish(struct eng_target *tgt, struct tu_op *op, int rc)
{
	if (rc != 0)
		return refused(tgt, op, rc);
	if (op->done)
		fail_msg("callback ran inside the call instead of from eng_progress");
	return tu_op_wait(tgt, op);
}

int tu_sv_update_wait(struct eng_target *tgt, const struct eng_key *key, lode_epoch_t epoch,
		      const void *buf, uint32_t len)
{
	struct tu_op op = {0};

	return tu_op_finish(tgt, &op, eng_sv_update(tgt, key, epoch, buf, len, tu_op_cb, &op));
}

int tu_sv_fetch_wait(struct eng_target *tgt, const struct eng_key *key, lode_epoch_t epoch,
		     void *buf, uint32_t cap, uint32_t *len_out)
{
	struct tu_op op = {0};

	return tu_op_finish(tgt, &op, eng_sv_fetch(tgt, key, epoch, buf, cap, len_out, tu_op_cb, &op));
}

int tu_arr_update_wait(struct eng_target *tgt, const struct eng_key *key, lode_epoch_t epoch,
		       uint64_t off, const void *buf, uint32_t len)
{
	struct tu_op op = {0};

	return tu_op_finish(tgt, &op, eng_arr_update(tgt, key, epoch, off, buf, len, tu_op_cb, &op));
}

int tu_arr_fetch_wait(struct eng_target *tgt, const struct eng_key *key, lode_epoch_t epoch,
		      uint64_t off, void *buf, uint32_t len)
{
	struct tu_op op = {0};

	return tu_op_finish(tgt, &op, eng_arr_fetch(tgt, key, epoch, off, buf, len, tu_op_cb, &op));
}

/* ---- operations on the engine and the model -------------------------- */

static void io_keep(struct tu_io *io, void *buf)
{
	if (io->nbufs == io->cap) {
		io->cap = io->cap ? io->cap * 2 : 64;
		io->bufs = realloc(io->bufs, io->cap * sizeof(*io->bufs));
		assert_non_null(io->bufs);
	}
	io->bufs[io->nbufs++] = buf;
}

void tu_io_wait(struct eng_target *tgt, struct tu_io *io)
{
	tu_batch_wait(tgt, &io->b);
	for (size_t i = 0; i < io->nbufs; i++)
		free(io->bufs[i]);
	free(io->bufs);
	io->bufs = NULL;
	io->nbufs = io->cap = 0;
	if (io->b.failed)
		fail_msg("%u of %u asynchronous operations failed, first with %d (%s)",
			 io->b.failed, io->b.issued, io->b.first_err,
			 lode_strerror(io->b.first_err));
	memset(&io->b, 0, sizeof(io->b));
}

/* Account for an issued call: blocking (io NULL) or queued. */
static void io_issued(struct tu_io *io, void *buf, int rc, const char *what, lode_epoch_t e)
{
	if (rc != 0) {
		free(buf);
		fail_msg("%s @%llu%s: %d (%s)", what, (unsigned long long)e,
			 io ? " (queueing)" : "", rc, lode_strerror(rc));
	}
	if (io) {
		io->b.issued++;
		io_keep(io, buf);
	} else {
		free(buf);
	}
}

void tu_do_sv(struct eng_target *tgt, const struct lode_uuid *cont, struct tu_model *m,
	      unsigned o, unsigned d, unsigned a, lode_epoch_t e, uint32_t len, uint64_t seed,
	      struct tu_io *io)
{
	struct eng_key k = tu_grid_key(cont, o, d, a);
	uint8_t *buf = malloc(len ? len : 1);
	int rc;

	assert_non_null(buf);
	tu_pat_fill(buf, len, seed, 0);
	rc = eng_sv_update(tgt, &k, e, buf, len, io ? tu_batch_cb : NULL, io ? &io->b : NULL);
	io_issued(io, buf, rc, "eng_sv_update", e);
	if (m)
		tu_model_sv_put(m, o, d, a, e, len, seed);
}

void tu_do_arr(struct eng_target *tgt, const struct lode_uuid *cont, struct tu_model *m,
	       unsigned o, unsigned d, unsigned a, lode_epoch_t e, uint64_t off, uint32_t len,
	       uint64_t seed, struct tu_io *io)
{
	struct eng_key k = tu_grid_key(cont, o, d, a);
	uint8_t *buf = malloc(len ? len : 1);
	int rc;

	assert_non_null(buf);
	tu_pat_fill(buf, len, seed, off);
	rc = eng_arr_update(tgt, &k, e, off, buf, len, io ? tu_batch_cb : NULL,
			    io ? &io->b : NULL);
	io_issued(io, buf, rc, "eng_arr_update", e);
	if (m)
		tu_model_arr_put(m, o, d, a, e, off, len, seed);
}

void tu_do_punch(struct eng_target *tgt, const struct lode_uuid *cont, struct tu_model *m,
		 enum tu_punch level, unsigned o, unsigned d, unsigned a, lode_epoch_t e,
		 uint64_t off, uint64_t len, struct tu_io *io)
{
	struct eng_key k = tu_grid_key(cont, o, d, a);
	eng_cb_t cb = io ? tu_batch_cb : NULL;
	void *arg = io ? &io->b : NULL;
	int rc = 0;

	switch (level) {
	case TU_PUNCH_OBJ:
		k.dkey = NULL;
		k.dkey_len = 0;
		k.akey = NULL;
		k.akey_len = 0;
		rc = eng_obj_punch(tgt, &k, e, cb, arg);
		if (m)
			tu_model_obj_punch(m, o, e);
		break;
	case TU_PUNCH_DKEY:
		k.akey = NULL;
		k.akey_len = 0;
		rc = eng_dkey_punch(tgt, &k, e, cb, arg);
		if (m)
			tu_model_dkey_punch(m, o, d, e);
		break;
	case TU_PUNCH_AKEY:
		rc = eng_akey_punch(tgt, &k, e, cb, arg);
		if (m)
			tu_model_akey_punch(m, o, d, a, e);
		break;
	case TU_PUNCH_RANGE:
		rc = eng_arr_punch(tgt, &k, e, off, len, cb, arg);
		if (m)
			tu_model_range_punch(m, o, d, a, e, off, len);
		break;
	}
	io_issued(io, NULL, rc, "punch", e);
}

/* ---- the fixture ------------------------------------------------------- */

enum eng_mode tu_mode_ram = ENG_MODE_RAM;
enum eng_mode tu_mode_disk = ENG_MODE_DISK;

void tu_fix_open(struct tu_fix *f)
{
	int rc = eng_tgt_open(&f->opts, &f->tgt);

	if (rc != 0)
		fail_msg("eng_tgt_open(%s, %s): %d (%s)", f->path, tu_mode_name(f->mode), rc,
			 lode_strerror(rc));
	assert_non_null(f->tgt);
}

void tu_fix_close(struct tu_fix *f)
{
	struct eng_target *t = f->tgt;

	f->tgt = NULL;
	assert_int_equal(eng_tgt_close(t), 0);
}

void tu_fix_reopen(struct tu_fix *f)
{
	tu_fix_close(f);
	tu_fix_open(f);
}

int tu_fix_setup(void **state)
{
	struct tu_fix *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->mode = *(enum eng_mode *)*state;
	f->dir = tu_tmpdir(f->mode, "eng");
	f->path = tu_path_join(f->dir, "tgt");
	f->opts.path = f->path;
	f->opts.mode = f->mode;
	*state = f;
	tu_fix_open(f);
	f->cont = tu_uuid(1);
	assert_int_equal(eng_cont_create(f->tgt, &f->cont), 0);
	return 0;
}

int tu_fix_teardown(void **state)
{
	struct tu_fix *f = *state;

	if (f->tgt)
		eng_tgt_close(f->tgt);
	tu_rmtree(f->dir);
	free(f->path);
	free(f->dir);
	free(f);
	return 0;
}

/* ---- reference model ---------------------------------------------------- */

enum { EV_SV = 1, EV_ARR = 2, EV_RPUNCH = 3 };

/* One write or range punch on an akey. */
struct ev {
	lode_epoch_t epoch;
	uint64_t off, len, seed;
	int kind;
};

struct evec {
	struct ev *v;
	size_t n, cap;
};

struct epvec {
	lode_epoch_t *v;
	size_t n, cap;
};

struct tu_model {
	unsigned nobj, ndkey, nakey;
	struct epvec *obj_p;  /* [o] */
	struct epvec *dkey_p; /* [o][d] */
	struct epvec *akey_p; /* [o][d][a] */
	struct evec *ev;      /* [o][d][a], ascending epoch */
};

struct tu_model *tu_model_new(unsigned nobj, unsigned ndkey, unsigned nakey)
{
	struct tu_model *m = calloc(1, sizeof(*m));
	size_t na = (size_t)nobj * ndkey * nakey;

	assert_non_null(m);
	m->nobj = nobj;
	m->ndkey = ndkey;
	m->nakey = nakey;
	m->obj_p = calloc(nobj, sizeof(*m->obj_p));
	m->dkey_p = calloc((size_t)nobj * ndkey, sizeof(*m->dkey_p));
	m->akey_p = calloc(na, sizeof(*m->akey_p));
	m->ev = calloc(na, sizeof(*m->ev));
	assert_true(m->obj_p && m->dkey_p && m->akey_p && m->ev);
	return m;
}

void tu_model_free(struct tu_model *m)
{
	if (!m)
		return;
	size_t na = (size_t)m->nobj * m->ndkey * m->nakey;
	for (unsigned i = 0; i < m->nobj; i++)
		free(m->obj_p[i].v);
	for (size_t i = 0; i < (size_t)m->nobj * m->ndkey; i++)
		free(m->dkey_p[i].v);
	for (size_t i = 0; i < na; i++) {
		free(m->akey_p[i].v);
		free(m->ev[i].v);
	}
	free(m->obj_p);
	free(m->dkey_p);
	free(m->akey_p);
	free(m->ev);
	free(m);
}

static size_t di(const struct tu_model *m, unsigned o, unsigned d)
{
	assert_true(o < m->nobj && d < m->ndkey);
	return (size_t)o * m->ndkey + d;
}

static size_t ai(const struct tu_model *m, unsigned o, unsigned d, unsigned a)
{
	assert_true(a < m->nakey);
	return di(m, o, d) * m->nakey + a;
}

static void epvec_add(struct epvec *v, lode_epoch_t e)
{
	if (v->n == v->cap) {
		v->cap = v->cap ? v->cap * 2 : 8;
		v->v = realloc(v->v, v->cap * sizeof(*v->v));
		assert_non_null(v->v);
	}
	v->v[v->n++] = e;
}

/* The highest epoch <= e in v, 0 if none. */
static lode_epoch_t epvec_max_le(const struct epvec *v, lode_epoch_t e)
{
	lode_epoch_t best = 0;

	for (size_t i = 0; i < v->n; i++)
		if (v->v[i] <= e && v->v[i] > best)
			best = v->v[i];
	return best;
}

/* Insert keeping ascending epochs; equal epochs keep insertion order. */
static void evec_add(struct evec *v, const struct ev *x)
{
	size_t i;

	if (v->n == v->cap) {
		v->cap = v->cap ? v->cap * 2 : 8;
		v->v = realloc(v->v, v->cap * sizeof(*v->v));
		assert_non_null(v->v);
	}
	for (i = v->n; i > 0 && v->v[i - 1].epoch > x->epoch; i--)
		;
	memmove(&v->v[i + 1], &v->v[i], (v->n - i) * sizeof(*v->v));
	v->v[i] = *x;
	v->n++;
}

void tu_model_sv_put(struct tu_model *m, unsigned o, unsigned d, unsigned a, lode_epoch_t e,
		     uint32_t len, uint64_t seed)
{
	struct evec *v = &m->ev[ai(m, o, d, a)];
	struct ev x = {.epoch = e, .len = len, .seed = seed, .kind = EV_SV};

	for (size_t i = 0; i < v->n; i++) {
		if (v->v[i].kind == EV_SV && v->v[i].epoch == e) {
			v->v[i] = x; /* same epoch: replaces */
			return;
		}
	}
	evec_add(v, &x);
}

void tu_model_arr_put(struct tu_model *m, unsigned o, unsigned d, unsigned a, lode_epoch_t e,
		      uint64_t off, uint32_t len, uint64_t seed)
{
	struct ev x = {.epoch = e, .off = off, .len = len, .seed = seed, .kind = EV_ARR};

	evec_add(&m->ev[ai(m, o, d, a)], &x);
}

void tu_model_range_punch(struct tu_model *m, unsigned o, unsigned d, unsigned a, lode_epoch_t e,
			  uint64_t off, uint64_t len)
{
	struct ev x = {.epoch = e, .off = off, .len = len, .kind = EV_RPUNCH};

	evec_add(&m->ev[ai(m, o, d, a)], &x);
}

void tu_model_obj_punch(struct tu_model *m, unsigned o, lode_epoch_t e)
{
	assert_true(o < m->nobj);
	epvec_add(&m->obj_p[o], e);
}

void tu_model_dkey_punch(struct tu_model *m, unsigned o, unsigned d, lode_epoch_t e)
{
	epvec_add(&m->dkey_p[di(m, o, d)], e);
}

void tu_model_akey_punch(struct tu_model *m, unsigned o, unsigned d, unsigned a, lode_epoch_t e)
{
	epvec_add(&m->akey_p[ai(m, o, d, a)], e);
}

/* Newest object/dkey punch <= e. */
static lode_epoch_t dkey_punched(const struct tu_model *m, unsigned o, unsigned d, lode_epoch_t e)
{
	lode_epoch_t p = epvec_max_le(&m->obj_p[o], e);
	lode_epoch_t q = epvec_max_le(&m->dkey_p[di(m, o, d)], e);

	return p > q ? p : q;
}

/* Newest punch <= e at the object, dkey or akey level. */
static lode_epoch_t key_punched(const struct tu_model *m, unsigned o, unsigned d, unsigned a,
				lode_epoch_t e)
{
	lode_epoch_t p = dkey_punched(m, o, d, e);
	lode_epoch_t q = epvec_max_le(&m->akey_p[ai(m, o, d, a)], e);

	return p > q ? p : q;
}

int tu_model_sv_get(const struct tu_model *m, unsigned o, unsigned d, unsigned a, lode_epoch_t e,
		    uint32_t *len, uint64_t *seed, lode_epoch_t *ver_epoch)
{
	const struct evec *v = &m->ev[ai(m, o, d, a)];
	lode_epoch_t pk = key_punched(m, o, d, a, e);

	for (size_t i = v->n; i > 0; i--) {
		const struct ev *x = &v->v[i - 1];

		if (x->kind != EV_SV || x->epoch > e)
			continue;
		if (x->epoch <= pk)
			return -ENOENT;
		*len = (uint32_t)x->len;
		*seed = x->seed;
		if (ver_epoch)
			*ver_epoch = x->epoch;
		return 0;
	}
	return -ENOENT;
}

struct ival {
	uint64_t lo, hi;
};

static int ival_cmp(const void *a, const void *b)
{
	const struct ival *x = a, *y = b;

	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/*
 * The highest byte + 1 of extent v->v[k] that no range punch in
 * (its epoch, e] covers; 0 if punches cover all of it.
 */
static uint64_t uncovered_top(const struct evec *v, size_t k, lode_epoch_t e)
{
	const struct ev *x = &v->v[k];
	uint64_t lo = x->off, hi = x->off + x->len;
	struct ival *iv = NULL;
	size_t n = 0, cap = 0;
	uint64_t top;

	for (size_t i = 0; i < v->n; i++) {
		const struct ev *p = &v->v[i];

		if (p->kind != EV_RPUNCH || p->epoch <= x->epoch || p->epoch > e)
			continue;
		uint64_t a = p->off > lo ? p->off : lo;
		uint64_t b = p->off + p->len < hi ? p->off + p->len : hi;
		if (a >= b)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 8;
			iv = realloc(iv, cap * sizeof(*iv));
			assert_non_null(iv);
		}
		iv[n].lo = a;
		iv[n].hi = b;
		n++;
	}
	if (n == 0) {
		free(iv);
		return hi;
	}
	qsort(iv, n, sizeof(*iv), ival_cmp);
	/* merge touching intervals; only the last merged one matters */
	size_t m = 0;
	for (size_t i = 1; i < n; i++) {
		if (iv[i].lo <= iv[m].hi) {
			if (iv[i].hi > iv[m].hi)
				iv[m].hi = iv[i].hi;
		} else {
			iv[++m] = iv[i];
		}
	}
	if (iv[m].hi < hi)
		top = hi;
	else if (iv[m].lo > lo)
		top = iv[m].lo;
	else
		top = 0;
	free(iv);
	return top;
}

/* Sizes and visibility of an array akey at e (see tu_model_arr_size). */
static void arr_extent_info(const struct tu_model *m, unsigned o, unsigned d, unsigned a,
			    lode_epoch_t e, bool *has_ext, uint64_t *size_raw,
			    uint64_t *size_punched)
{
	const struct evec *v = &m->ev[ai(m, o, d, a)];
	lode_epoch_t pk = key_punched(m, o, d, a, e);

	*has_ext = false;
	*size_raw = 0;
	*size_punched = 0;
	for (size_t i = 0; i < v->n; i++) {
		const struct ev *x = &v->v[i];

		if (x->kind != EV_ARR || x->epoch > e || x->epoch <= pk)
			continue;
		*has_ext = true;
		if (x->off + x->len > *size_raw)
			*size_raw = x->off + x->len;
		uint64_t t = uncovered_top(v, i, e);
		if (t > *size_punched)
			*size_punched = t;
	}
}

int tu_model_arr_get(const struct tu_model *m, unsigned o, unsigned d, unsigned a, lode_epoch_t e,
		     uint64_t off, uint32_t len, uint8_t *out, bool *enoent_ok)
{
	const struct evec *v = &m->ev[ai(m, o, d, a)];
	lode_epoch_t pk = key_punched(m, o, d, a, e);
	bool has_ext;
	uint64_t raw, punched;

	memset(out, 0, len);
	arr_extent_info(m, o, d, a, e, &has_ext, &raw, &punched);
	*enoent_ok = !has_ext || punched == 0;
	if (!has_ext)
		return -ENOENT;
	/* paint in ascending epoch order: the newest write or punch wins */
	for (size_t i = 0; i < v->n; i++) {
		const struct ev *x = &v->v[i];

		if (x->epoch > e || x->epoch <= pk || x->kind == EV_SV)
			continue;
		uint64_t lo = x->off > off ? x->off : off;
		uint64_t hi = x->off + x->len < off + len ? x->off + x->len : off + len;
		if (lo >= hi)
			continue;
		if (x->kind == EV_ARR)
			tu_pat_fill(out + (lo - off), hi - lo, x->seed, lo);
		else
			memset(out + (lo - off), 0, hi - lo);
	}
	return 0;
}

void tu_model_arr_size(const struct tu_model *m, unsigned o, unsigned d, unsigned a,
		       lode_epoch_t e, uint64_t *size_raw, uint64_t *size_punched)
{
	bool has_ext;

	arr_extent_info(m, o, d, a, e, &has_ext, size_raw, size_punched);
}

enum tu_vis tu_model_akey_vis(const struct tu_model *m, unsigned o, unsigned d, unsigned a,
			      lode_epoch_t e)
{
	const struct evec *v = &m->ev[ai(m, o, d, a)];
	bool is_arr = false;

	for (size_t i = 0; i < v->n && !is_arr; i++)
		is_arr = v->v[i].kind != EV_SV;
	if (!is_arr) {
		uint32_t len;
		uint64_t seed;

		return tu_model_sv_get(m, o, d, a, e, &len, &seed, NULL) == 0 ? TU_VIS_YES
									: TU_VIS_NO;
	}
	bool has_ext;
	uint64_t raw, punched;

	arr_extent_info(m, o, d, a, e, &has_ext, &raw, &punched);
	if (!has_ext)
		return TU_VIS_NO;
	return punched ? TU_VIS_YES : TU_VIS_MAYBE;
}

/* Whether any write under (o, d) has an epoch in (above, e]. */
static bool dkey_has_write(const struct tu_model *m, unsigned o, unsigned d, lode_epoch_t above,
			   lode_epoch_t e)
{
	for (unsigned a = 0; a < m->nakey; a++) {
		const struct evec *v = &m->ev[ai(m, o, d, a)];

		for (size_t i = 0; i < v->n; i++)
			if (v->v[i].kind != EV_RPUNCH && v->v[i].epoch > above && v->v[i].epoch <= e)
				return true;
	}
	return false;
}

enum tu_vis tu_model_dkey_vis(const struct tu_model *m, unsigned o, unsigned d, lode_epoch_t e)
{
	for (unsigned a = 0; a < m->nakey; a++)
		if (tu_model_akey_vis(m, o, d, a, e) == TU_VIS_YES)
			return TU_VIS_YES;
	return dkey_has_write(m, o, d, dkey_punched(m, o, d, e), e) ? TU_VIS_MAYBE : TU_VIS_NO;
}

enum tu_vis tu_model_obj_vis(const struct tu_model *m, unsigned o, lode_epoch_t e)
{
	enum tu_vis r = TU_VIS_NO;
	lode_epoch_t p = epvec_max_le(&m->obj_p[o], e);

	for (unsigned d = 0; d < m->ndkey; d++) {
		enum tu_vis dv = tu_model_dkey_vis(m, o, d, e);

		if (dv == TU_VIS_YES)
			return TU_VIS_YES;
		if (dv == TU_VIS_MAYBE || dkey_has_write(m, o, d, p, e))
			r = TU_VIS_MAYBE;
	}
	return r;
}

/* ---- checking the engine against the model ----------------------------- */

const char *tu_dkey_name(unsigned d)
{
	static char names[TU_MAX_DKEYS][LODE_KEY_MAX + 1];

	assert_true(d < TU_MAX_DKEYS);
	if (!names[d][0]) {
		size_t n = (size_t)snprintf(names[d], sizeof(names[d]), "d%u", d);

		/* a few long names, one of the longest allowed */
		size_t want = d == 7 ? LODE_KEY_MAX : d % 4 == 3 ? 100 + 37 * d : n;
		for (size_t i = n; i < want; i++)
			names[d][i] = (char)('a' + (i * 7 + d) % 26);
		names[d][want] = '\0';
	}
	return names[d];
}

const char *tu_akey_name(unsigned a)
{
	static char names[TU_MAX_AKEYS][64];

	assert_true(a < TU_MAX_AKEYS);
	if (!names[a][0])
		snprintf(names[a], sizeof(names[a]), "%s%u%s", tu_akey_is_arr(a) ? "arr" : "sv", a,
			 a == 5 ? "-with-a-longer-name" : "");
	return names[a];
}

struct eng_key tu_grid_key(const struct lode_uuid *cont, unsigned o, unsigned d, unsigned a)
{
	return tu_key(cont, tu_oid(o), tu_dkey_name(d), tu_akey_name(a));
}

static const char *ep_str(lode_epoch_t e, char *buf, size_t n)
{
	if (e == LODE_EPOCH_MAX)
		snprintf(buf, n, "MAX");
	else
		snprintf(buf, n, "%llu", (unsigned long long)e);
	return buf;
}

/* The epoch of a single-value version of (o, d, a) whose bytes are buf[0..len), or 0. */
static lode_epoch_t which_sv(const struct tu_model *m, unsigned o, unsigned d, unsigned a,
			     const void *buf, uint32_t len)
{
	const struct evec *v = &m->ev[ai(m, o, d, a)];

	for (size_t i = v->n; i > 0; i--)
		if (v->v[i - 1].kind == EV_SV && v->v[i - 1].len == len &&
		    tu_pat_check(buf, len, v->v[i - 1].seed, 0) < 0)
			return v->v[i - 1].epoch;
	return 0;
}

/* Epoch of the newest array write covering pos whose pattern gives byte b there, or 0. */
static lode_epoch_t which_arr(const struct tu_model *m, unsigned o, unsigned d, unsigned a,
			      uint64_t pos, uint8_t b)
{
	const struct evec *v = &m->ev[ai(m, o, d, a)];

	for (size_t i = v->n; i > 0; i--) {
		const struct ev *x = &v->v[i - 1];

		if (x->kind == EV_ARR && pos >= x->off && pos < x->off + x->len &&
		    tu_pat_byte(x->seed, pos) == b)
			return x->epoch;
	}
	return 0;
}

/* Print the history of one akey (and its dkey and object punches) to stderr. */
static void model_dump(const struct tu_model *m, unsigned o, unsigned d, unsigned a)
{
	const struct evec *v = &m->ev[ai(m, o, d, a)];
	const struct epvec *po = &m->obj_p[o], *pd = &m->dkey_p[di(m, o, d)];
	const struct epvec *pa = &m->akey_p[ai(m, o, d, a)];
	static const char *const kinds[] = {"?", "sv", "arr", "range-punch"};

	fprintf(stderr, "history of o%u d%u a%u (model):\n", o, d, a);
	for (size_t i = 0; i < po->n; i++)
		fprintf(stderr, "  object punch @%llu\n", (unsigned long long)po->v[i]);
	for (size_t i = 0; i < pd->n; i++)
		fprintf(stderr, "  dkey punch @%llu\n", (unsigned long long)pd->v[i]);
	for (size_t i = 0; i < pa->n; i++)
		fprintf(stderr, "  akey punch @%llu\n", (unsigned long long)pa->v[i]);
	for (size_t i = 0; i < v->n; i++)
		fprintf(stderr, "  %s @%llu off %llu len %llu seed %llu\n", kinds[v->v[i].kind],
			(unsigned long long)v->v[i].epoch, (unsigned long long)v->v[i].off,
			(unsigned long long)v->v[i].len, (unsigned long long)v->v[i].seed);
}

void tu_check_sv(struct eng_target *tgt, const struct lode_uuid *cont, const struct tu_model *m,
		 unsigned o, unsigned d, unsigned a, lode_epoch_t e, bool async, const char *ctx)
{
	struct eng_key k = tu_grid_key(cont, o, d, a);
	uint32_t elen = 0, glen = 0xdeadbeef;
	uint64_t seed = 0;
	lode_epoch_t ve = 0;
	char es[32];
	int exp = tu_model_sv_get(m, o, d, a, e, &elen, &seed, &ve);
	uint32_t cap = exp == 0 ? elen + 16 : 4096;
	uint8_t *buf = malloc(cap);
	int rc;

	assert_non_null(buf);
	memset(buf, 0xee, cap);
	if (async)
		rc = tu_sv_fetch_wait(tgt, &k, e, buf, cap, &glen);
	else
		rc = eng_sv_fetch(tgt, &k, e, buf, cap, &glen, NULL, NULL);
	ep_str(e, es, sizeof(es));
	if (exp != 0) {
		if (rc != -ENOENT) {
			lode_epoch_t w = rc == 0 ? which_sv(m, o, d, a, buf, glen) : 0;

			free(buf);
			model_dump(m, o, d, a);
			fail_msg("%s: sv fetch o%u d%u a%u @%s: expected -ENOENT, got %d (%s), "
				 "len %u, bytes of the version @%llu",
				 ctx, o, d, a, es, rc, lode_strerror(rc), glen,
				 (unsigned long long)w);
		}
	} else if (rc != 0 || glen != elen || tu_pat_check(buf, elen, seed, 0) >= 0) {
		long bad = rc == 0 && glen == elen ? tu_pat_check(buf, elen, seed, 0) : -1;
		lode_epoch_t w = rc == 0 && glen <= cap ? which_sv(m, o, d, a, buf, glen) : 0;

		free(buf);
		model_dump(m, o, d, a);
		fail_msg("%s: sv fetch o%u d%u a%u @%s: expected version @%llu len %u, got rc %d "
			 "(%s) len %u, first bad byte %ld, bytes of the version @%llu",
			 ctx, o, d, a, es, (unsigned long long)ve, elen, rc, lode_strerror(rc), glen,
			 bad, (unsigned long long)w);
	}
	free(buf);
}

/* The two buffers of tu_check_arr, kept per thread and grown as needed: a
 * fresh large allocation each read (page faults, under ASan an mmap) was
 * much of the model tests' time. */
static void check_bufs(uint32_t len, uint8_t **exp, uint8_t **got)
{
	static __thread uint8_t *b[2];
	static __thread uint32_t cap;

	if (len > cap || !b[0]) {
		free(b[0]);
		free(b[1]);
		cap = len > cap ? len : cap;
		b[0] = malloc(cap ? cap : 1);
		b[1] = malloc(cap ? cap : 1);
		assert_true(b[0] && b[1]);
	}
	*exp = b[0];
	*got = b[1];
}

void tu_check_arr(struct eng_target *tgt, const struct lode_uuid *cont, const struct tu_model *m,
		  unsigned o, unsigned d, unsigned a, lode_epoch_t e, uint64_t off, uint32_t len,
		  bool async, const char *ctx)
{
	struct eng_key k = tu_grid_key(cont, o, d, a);
	uint8_t *exp, *got;
	bool enoent_ok;
	char es[32];
	int erc, rc;

	check_bufs(len, &exp, &got);
	memset(got, 0xee, len);
	erc = tu_model_arr_get(m, o, d, a, e, off, len, exp, &enoent_ok);
	if (async)
		rc = tu_arr_fetch_wait(tgt, &k, e, off, got, len);
	else
		rc = eng_arr_fetch(tgt, &k, e, off, got, len, NULL, NULL);
	ep_str(e, es, sizeof(es));
	if (rc == -ENOENT && (erc == -ENOENT || enoent_ok))
		return;
	if (rc != 0 || erc != 0) {
		long nz = rc == 0 ? tu_zero_check(got, len) : -1;

		model_dump(m, o, d, a);
		fail_msg("%s: arr fetch o%u d%u a%u @%s [%llu, +%u): expected %d, got %d (%s)%s", ctx,
			 o, d, a, es, (unsigned long long)off, len, erc, rc, lode_strerror(rc),
			 rc == 0 && nz < 0 ? " and all zeros" : "");
	}
	if (memcmp(exp, got, len) == 0)
		return;
	for (uint32_t i = 0; i < len; i++) {
		if (exp[i] == got[i])
			continue;
		uint64_t pos = off + i;
		lode_epoch_t we = which_arr(m, o, d, a, pos, exp[i]);
		lode_epoch_t wg = which_arr(m, o, d, a, pos, got[i]);
		uint8_t eb = exp[i], gb = got[i];

		model_dump(m, o, d, a);
		fail_msg("%s: arr fetch o%u d%u a%u @%s [%llu, +%u): byte at %llu is 0x%02x, "
			 "expected 0x%02x (expected from write @%llu, got matches write @%llu; "
			 "0 = none/zero)",
			 ctx, o, d, a, es, (unsigned long long)off, len, (unsigned long long)pos, gb,
			 eb, (unsigned long long)we, (unsigned long long)wg);
	}
}

void tu_check_arr_size(struct eng_target *tgt, const struct lode_uuid *cont,
		       const struct tu_model *m, unsigned o, unsigned d, unsigned a, lode_epoch_t e,
		       const char *ctx)
{
	struct eng_key k = tu_grid_key(cont, o, d, a);
	uint64_t raw, punched, got = 0xdeadbeef;
	char es[32];
	int rc = eng_arr_size(tgt, &k, e, &got);

	tu_model_arr_size(m, o, d, a, e, &raw, &punched);
	if (rc != 0 || (got != raw && got != punched))
		model_dump(m, o, d, a);
	if (rc != 0 || (got != raw && got != punched))
		fail_msg("%s: arr size o%u d%u a%u @%s: expected %llu (or %llu with range punches "
			 "applied), got rc %d (%s) size %llu",
			 ctx, o, d, a, ep_str(e, es, sizeof(es)), (unsigned long long)raw,
			 (unsigned long long)punched, rc, lode_strerror(rc), (unsigned long long)got);
}

size_t tu_list_keys(struct eng_target *tgt, const struct eng_key *key, bool akey_list,
		    lode_epoch_t e, size_t buf_len,
		    void (*visit)(void *arg, const uint8_t *name, uint16_t len), void *arg)
{
	struct eng_anchor anchor = ENG_ANCHOR_INIT;
	uint8_t *buf = malloc(buf_len);
	size_t total = 0, calls = 0;

	assert_non_null(buf);
	for (;;) {
		/* the anchor is plain data: carry it through a copy between calls */
		struct eng_anchor cur;
		int rc;

		memcpy(&cur, &anchor, sizeof(cur));
		rc = akey_list ? eng_akey_list(tgt, key, e, &cur, buf, buf_len)
			       : eng_dkey_list(tgt, key, e, &cur, buf, buf_len);
		if (rc < 0) {
			free(buf);
			fail_msg("eng_%s_list: %d (%s) after %zu keys", akey_list ? "akey" : "dkey",
				 rc, lode_strerror(rc), total);
		}
		size_t pos = 0;
		for (int i = 0; i < rc; i++) {
			if (pos + 2 > buf_len)
				fail_msg("key list batch of %d overruns its buffer", rc);
			uint16_t len = (uint16_t)(buf[pos] | buf[pos + 1] << 8);
			pos += 2;
			if (len == 0 || len > LODE_KEY_MAX || pos + len > buf_len)
				fail_msg("key list: bad length %u at %zu of %zu", len, pos - 2,
					 buf_len);
			visit(arg, buf + pos, len);
			pos += len;
		}
		total += (size_t)rc;
		memcpy(&anchor, &cur, sizeof(anchor));
		if (anchor.eof)
			break;
		if (rc == 0)
			fail_msg("key list returned 0 keys without setting eof");
		if (++calls > 10000000)
			fail_msg("key list does not end");
	}
	free(buf);
	return total;
}

/* Which grid names a listing returned. */
struct seen {
	unsigned n;        /* names in the grid dimension */
	unsigned *count;   /* [n] times each was listed */
	bool akeys;        /* names are akeys (else dkeys) */
	unsigned foreign;  /* names not in the grid */
};

static void seen_visit(void *arg, const uint8_t *name, uint16_t len)
{
	struct seen *s = arg;

	for (unsigned i = 0; i < s->n; i++) {
		const char *want = s->akeys ? tu_akey_name(i) : tu_dkey_name(i);

		if (strlen(want) == len && memcmp(want, name, len) == 0) {
			s->count[i]++;
			return;
		}
	}
	s->foreign++;
}

static void check_listed(const char *ctx, const char *what, unsigned idx, unsigned count,
			 enum tu_vis vis, lode_epoch_t e)
{
	char es[32];

	ep_str(e, es, sizeof(es));
	if (count > 1)
		fail_msg("%s: %s %u listed %u times @%s", ctx, what, idx, count, es);
	if (vis == TU_VIS_YES && count == 0)
		fail_msg("%s: %s %u is visible @%s but not listed", ctx, what, idx, es);
	if (vis == TU_VIS_NO && count == 1)
		fail_msg("%s: %s %u is listed @%s but has nothing visible (punched or never "
			 "written)",
			 ctx, what, idx, es);
}

void tu_check_lists(struct eng_target *tgt, const struct lode_uuid *cont, const struct tu_model *m,
		    lode_epoch_t e, size_t buf_len, const char *ctx)
{
	unsigned ocount[64] = {0}, dcount[TU_MAX_DKEYS], acount[TU_MAX_AKEYS];
	struct eng_anchor anchor = ENG_ANCHOR_INIT;
	struct lode_oid oids[3];
	char what[64];

	assert_true(m->nobj <= 64 && m->ndkey <= TU_MAX_DKEYS && m->nakey <= TU_MAX_AKEYS);
	for (unsigned iter = 0;; iter++) {
		int rc = eng_obj_list(tgt, cont, e, &anchor, oids, 3);

		if (rc < 0 || rc > 3)
			fail_msg("%s: eng_obj_list: %d (%s)", ctx, rc, lode_strerror(rc));
		for (int i = 0; i < rc; i++) {
			unsigned o;

			for (o = 0; o < m->nobj; o++) {
				struct lode_oid w = tu_oid(o);

				if (w.hi == oids[i].hi && w.lo == oids[i].lo)
					break;
			}
			if (o == m->nobj)
				fail_msg("%s: eng_obj_list returned an unknown oid %llx.%llx", ctx,
					 (unsigned long long)oids[i].hi,
					 (unsigned long long)oids[i].lo);
			ocount[o]++;
		}
		if (anchor.eof)
			break;
		if (rc == 0 || iter > 100000)
			fail_msg("%s: eng_obj_list returned %d without eof", ctx, rc);
	}
	for (unsigned o = 0; o < m->nobj; o++) {
		struct eng_key k = tu_key(cont, tu_oid(o), NULL, NULL);
		struct seen s = {.n = m->ndkey, .count = dcount};

		check_listed(ctx, "object", o, ocount[o], tu_model_obj_vis(m, o, e), e);
		memset(dcount, 0, sizeof(dcount));
		tu_list_keys(tgt, &k, false, e, buf_len, seen_visit, &s);
		if (s.foreign)
			fail_msg("%s: %u unknown dkeys listed in object %u", ctx, s.foreign, o);
		for (unsigned d = 0; d < m->ndkey; d++) {
			struct eng_key kd = tu_key(cont, tu_oid(o), tu_dkey_name(d), NULL);
			struct seen sa = {.n = m->nakey, .count = acount, .akeys = true};

			snprintf(what, sizeof(what), "dkey of object %u:", o);
			check_listed(ctx, what, d, dcount[d], tu_model_dkey_vis(m, o, d, e), e);
			memset(acount, 0, sizeof(acount));
			tu_list_keys(tgt, &kd, true, e, buf_len, seen_visit, &sa);
			if (sa.foreign)
				fail_msg("%s: %u unknown akeys listed in o%u d%u", ctx, sa.foreign,
					 o, d);
			snprintf(what, sizeof(what), "akey of o%u d%u:", o, d);
			for (unsigned a = 0; a < m->nakey; a++)
				check_listed(ctx, what, a, acount[a],
					     tu_model_akey_vis(m, o, d, a, e), e);
		}
	}
}

void tu_check_all(struct eng_target *tgt, const struct lode_uuid *cont, const struct tu_model *m,
		  lode_epoch_t e, uint64_t arr_span, const char *ctx)
{
	for (unsigned o = 0; o < m->nobj; o++)
		for (unsigned d = 0; d < m->ndkey; d++)
			for (unsigned a = 0; a < m->nakey; a++) {
				if (!tu_akey_is_arr(a)) {
					tu_check_sv(tgt, cont, m, o, d, a, e, false, ctx);
					continue;
				}
				tu_check_arr(tgt, cont, m, o, d, a, e, 0, (uint32_t)arr_span,
					     false, ctx);
				tu_check_arr_size(tgt, cont, m, o, d, a, e, ctx);
			}
	tu_check_lists(tgt, cont, m, e, 2 + LODE_KEY_MAX + 100, ctx);
}
