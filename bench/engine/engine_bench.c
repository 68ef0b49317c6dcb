/*
 * lode-engine-bench: what one engine target does on one thread, next to
 * what the same machine can do at best, measured in the same run.
 *
 * Every engine case drives one target through the asynchronous API: it keeps
 * --qd operations in flight, each with a completion callback, and spins on
 * eng_progress(). An engine case is a pair of phases on a fresh target:
 *
 *   update  passes over the data set (--size bytes of bs-byte single values),
 *           one new epoch per pass, for --seconds; the first pass always
 *           completes (its tail untimed if the clock ran out) so that the
 *           fetch phase finds every key. Between passes the clock stops while
 *           eng_aggregate() frees the versions the next pass replaces, so a
 *           long run needs no more space than two copies of the data set.
 *   fetch   reads the latest version of keys of the same set for --seconds.
 *
 * The disk 4 KiB case adds a third phase, durable updates of keys that all
 * exist at qd 32, to set beside pwrite + fdatasync overwriting a file.
 *
 * Each ceiling is measured in the same run, on the same buffers' sizes and
 * the same access pattern: memcpy for RAM mode, raw io_uring with O_DIRECT
 * (and pwrite + fdatasync for durable small updates) on a file in the same
 * directory for disk mode. The ratio result / ceiling is what a reader should
 * look at; the issue targets are printed beside it.
 *
 * Values carry real content: a pseudo-random body with a 16-byte stamp
 * (key, epoch, block) at the head of every 4 KiB block. Every fetch checks
 * the length and the first stamp (poisoned before the fetch is issued); one
 * fetch in VERIFY_EVERY is compared in full. Any engine error or wrong byte
 * ends the run with a message and a non-zero exit, as does an engine that
 * stops completing work (see STALL_SECONDS, BLOCKING_STALL); what the run
 * created on disk is removed on every exit path but a second interrupt.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/magic.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

#include "common/json.h"
#include "engine/engine.h"

#define KIB ((uint64_t)1024)
#define MIB (1024 * KIB)
#define GIB (1024 * MIB)

#define BLOCK 4096u              /* stamp granularity, O_DIRECT alignment */
#define DKEYS_PER_OBJ 10000u     /* keys spread as objects x dkeys, akey "v" */
#define STAMP_MAGIC UINT64_C(0x4c6f646542656e63)
#define VERIFY_EVERY 64u         /* one fetch in this many is compared in full */
#define STALL_SECONDS 60.0       /* no completion for this long: the engine hangs */
#define BLOCKING_STALL 300.0     /* a blocking engine call taking this long hangs */
#define FILL_BYTES (64 * MIB)    /* in-flight bytes while filling untimed */
#define DURABLE_QD 32u           /* the durable-update case's queue depth */
#define SMALL_VALUE 16u          /* the memory case's value size */
#define RSS_LIMIT (2 * GIB)

#define TARGET_FETCH_4K 500e3
#define TARGET_UPDATE_4K 300e3
#define TARGET_FETCH_1M 0.70
#define TARGET_DISK 0.85
#define TARGET_DURABLE 0.80

enum pattern { PAT_SEQ, PAT_RAND };

static const char *const pat_name[] = {"seq", "rand"};

/* ---- options ----------------------------------------------------------- */

#define MODE_RAM 1u
#define MODE_DISK 2u

static struct {
	unsigned modes;
	const char *dir;
	uint64_t size;
	unsigned qd;
	double seconds;
	bool json;
	uint64_t small_count;
} g_opt = {
	.modes = MODE_RAM | MODE_DISK,
	.size = 256 * MIB,
	.qd = 32,
	.seconds = 4.0,
	.small_count = 10000000,
};

static const char *const g_prog = "lode-engine-bench";

/* ---- exit paths -------------------------------------------------------- */

/*
 * A run works inside <dir>/run-<pid>, created at start; <dir> itself is
 * created (and removed again) only when it did not exist. Both RAM and disk
 * directories are registered here so that die() can remove them.
 */
struct workdir {
	char base[PATH_MAX];
	char path[PATH_MAX];
	bool made_base;
	bool live;
};

static struct workdir g_wd[2];
static volatile sig_atomic_t g_interrupted;

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	if (remove(path) != 0 && errno != ENOENT)
		fprintf(stderr, "%s: warning: cannot remove %s: %s\n", g_prog, path,
			strerror(errno));
	return 0;
}

static void rm_tree(const char *path)
{
	nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void workdir_remove(struct workdir *w)
{
	if (!w->live)
		return;
	w->live = false;
	rm_tree(w->path);
	if (w->made_base)
		rmdir(w->base);
}

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

static void die(const char *fmt, ...)
{
	static int dying;
	va_list ap;

	/* The watchdog thread may die() too: the first caller cleans up and exits. */
	if (__atomic_exchange_n(&dying, 1, __ATOMIC_ACQ_REL))
		for (;;)
			pause();
	fflush(stdout);
	fprintf(stderr, "%s: ", g_prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	for (unsigned i = 0; i < 2; i++)
		workdir_remove(&g_wd[i]);
	exit(1);
}

static void usage_error(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

static void usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", g_prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see --help)\n");
	exit(2);
}

/* The loops notice the flag; a second signal kills at once, files left behind. */
static void on_signal(int sig)
{
	if (g_interrupted) {
		signal(sig, SIG_DFL);
		raise(sig);
	}
	g_interrupted = 1;
}

static void check(int rc, const char *what)
{
	if (rc < 0)
		die("%s: %s (%d)", what, lode_strerror(rc), rc);
}

static void *xmalloc_aligned(size_t size)
{
	void *p = NULL;

	if (posix_memalign(&p, BLOCK, size ? size : BLOCK) != 0)
		die("out of memory (%zu bytes)", size);
	return p;
}

static void workdir_make(struct workdir *w, const char *base)
{
	struct stat st;

	snprintf(w->base, sizeof(w->base), "%s", base);
	if (stat(base, &st) != 0) {
		if (errno != ENOENT || mkdir(base, 0700) != 0)
			die("cannot create directory %s: %s", base, strerror(errno));
		w->made_base = true;
	} else if (!S_ISDIR(st.st_mode)) {
		die("%s is not a directory", base);
	}
	if ((size_t)snprintf(w->path, sizeof(w->path), "%s/run-%d", base, (int)getpid()) >=
	    sizeof(w->path))
		die("directory name too long: %s", base);
	if (mkdir(w->path, 0700) != 0) {
		int e = errno;

		if (w->made_base)
			rmdir(w->base);
		die("cannot create directory %s: %s", w->path, strerror(e));
	}
	w->live = true;
}

/* ---- small helpers ----------------------------------------------------- */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * A blocking engine call (open, close, aggregate, ...) that never returns
 * cannot be caught by the polling loops, so a watchdog thread watches the
 * one in progress: it ends the run, with the call's name, on an interrupt or
 * after BLOCKING_STALL seconds.
 */
static const char *g_blocking_what;
static int64_t g_blocking_since_ms;

static void blocking_begin(const char *what)
{
	__atomic_store_n(&g_blocking_since_ms, (int64_t)(now_s() * 1e3), __ATOMIC_RELAXED);
	__atomic_store_n(&g_blocking_what, what, __ATOMIC_RELEASE);
}

static void blocking_end(void)
{
	__atomic_store_n(&g_blocking_what, NULL, __ATOMIC_RELEASE);
}

static void *watchdog(void *arg)
{
	for (;;) {
		const char *what;
		double held;

		sleep(1);
		what = __atomic_load_n(&g_blocking_what, __ATOMIC_ACQUIRE);
		if (!what)
			continue;
		held = now_s() - (double)__atomic_load_n(&g_blocking_since_ms, __ATOMIC_RELAXED) / 1e3;
		if (g_interrupted && held > 1)
			die("interrupted while %s was running (for %.0f s)", what, held);
		if (held > BLOCKING_STALL)
			die("%s has not returned after %.0f s; the engine appears stuck", what, held);
	}
	return NULL;
}

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Uniform in [0, n) without the modulo bias mattering at these sizes. */
static uint64_t rand_below(uint64_t *s, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)splitmix64(s) * n) >> 64);
}

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static unsigned pow2_at_least(unsigned v)
{
	unsigned p = 1;

	while (p < v)
		p <<= 1;
	return p;
}

static const char *fs_kind(const char *path)
{
	struct statfs sf;

	if (statfs(path, &sf) != 0)
		return "unknown";
	if (sf.f_type == TMPFS_MAGIC)
		return "tmpfs";
	if (sf.f_type == EXT4_SUPER_MAGIC)
		return "ext4";
	if (sf.f_type == XFS_SUPER_MAGIC)
		return "xfs";
	if (sf.f_type == BTRFS_SUPER_MAGIC)
		return "btrfs";
	return "other";
}

/* VmRSS and RssAnon of this process in bytes. */
static void read_rss(uint64_t *rss, uint64_t *anon)
{
	char line[256];
	FILE *f = fopen("/proc/self/status", "r");

	*rss = *anon = 0;
	if (!f)
		die("cannot open /proc/self/status: %s", strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		unsigned long long kb;

		if (sscanf(line, "VmRSS: %llu kB", &kb) == 1)
			*rss = kb * KIB;
		else if (sscanf(line, "RssAnon: %llu kB", &kb) == 1)
			*anon = kb * KIB;
	}
	fclose(f);
}

/* ---- value content ----------------------------------------------------- */

/*
 * Every value is g_pattern's first len bytes with a stamp over the first 16
 * bytes of each 4 KiB block. The body never changes, so an update only
 * rewrites the stamps; a fetch compares stamps and body.
 */
struct stamp {
	uint64_t key;
	uint32_t epoch;
	uint32_t block;
};

static uint8_t *g_pattern;
static size_t g_pattern_len;

static void pattern_init(size_t len)
{
	uint64_t s = 0x10de;

	g_pattern_len = len;
	g_pattern = xmalloc_aligned(len);
	for (size_t i = 0; i < len; i += 8) {
		uint64_t w = splitmix64(&s);

		memcpy(g_pattern + i, &w, 8);
	}
}

static struct stamp stamp_make(uint64_t key, uint32_t epoch, uint32_t block)
{
	struct stamp st = {key ^ STAMP_MAGIC, epoch, block ^ 0xb10c0000u};

	return st;
}

static void value_stamp(uint8_t *buf, uint32_t len, uint64_t key, uint32_t epoch)
{
	for (uint32_t b = 0; (uint64_t)b * BLOCK < len; b++) {
		struct stamp st = stamp_make(key, epoch, b);

		memcpy(buf + (size_t)b * BLOCK, &st, sizeof(st));
	}
}

/* 0 if buf holds value (key, epoch); else fills why. */
static int value_check(const uint8_t *buf, uint32_t len, uint64_t key, uint32_t epoch, bool full,
		       char *why, size_t why_len)
{
	uint32_t nblocks = full ? (uint32_t)((len + BLOCK - 1) / BLOCK) : 1;

	for (uint32_t b = 0; b < nblocks; b++) {
		size_t off = (size_t)b * BLOCK;
		size_t blen = len - off < BLOCK ? len - off : BLOCK;
		struct stamp want = stamp_make(key, epoch, b), got;

		memcpy(&got, buf + off, sizeof(got));
		if (memcmp(&want, &got, sizeof(want)) != 0) {
			snprintf(why, why_len,
				 "block %u stamp is (key %" PRIu64 ", epoch %u, block %u), "
				 "expected (key %" PRIu64 ", epoch %u, block %u)",
				 b, got.key ^ STAMP_MAGIC, got.epoch, got.block ^ 0xb10c0000u, key,
				 epoch, b);
			return -1;
		}
		if (full && memcmp(buf + off + sizeof(got), g_pattern + off + sizeof(got),
				   blen - sizeof(got)) != 0) {
			snprintf(why, why_len, "block %u content differs from what was written", b);
			return -1;
		}
	}
	return 0;
}

/* ---- key orders -------------------------------------------------------- */

/*
 * The order in which a phase visits the n keys (or blocks of a file).
 * cover: each pass visits every index once (sequential or a fresh random
 * permutation) and order_next() returns false at the end of the pass; used
 * for updates and writes. !cover: sequential wraps around, random is uniform
 * with repeats; never ends; used for fetches and reads.
 */
struct order {
	uint64_t n;
	enum pattern pat;
	bool cover;
	uint32_t *perm;
	uint64_t pos;
	uint64_t rng;
};

static void order_new_pass(struct order *o)
{
	o->pos = 0;
	if (!o->perm)
		return;
	for (uint64_t i = o->n - 1; i > 0; i--) {
		uint64_t j = rand_below(&o->rng, i + 1);
		uint32_t t = o->perm[i];

		o->perm[i] = o->perm[j];
		o->perm[j] = t;
	}
}

static void order_init(struct order *o, uint64_t n, enum pattern pat, bool cover, uint64_t seed)
{
	memset(o, 0, sizeof(*o));
	o->n = n;
	o->pat = pat;
	o->cover = cover;
	o->rng = seed;
	if (cover && pat == PAT_RAND) {
		o->perm = malloc(n * sizeof(*o->perm));
		if (!o->perm)
			die("out of memory");
		for (uint64_t i = 0; i < n; i++)
			o->perm[i] = (uint32_t)i;
	}
	order_new_pass(o);
}

static void order_fini(struct order *o)
{
	free(o->perm);
	o->perm = NULL;
}

static bool order_next(struct order *o, uint64_t *idx)
{
	if (o->cover) {
		if (o->pos >= o->n)
			return false;
		*idx = o->perm ? o->perm[o->pos] : o->pos;
		o->pos++;
		return true;
	}
	if (o->pat == PAT_RAND) {
		*idx = rand_below(&o->rng, o->n);
	} else {
		*idx = o->pos;
		o->pos = o->pos + 1 == o->n ? 0 : o->pos + 1;
	}
	return true;
}

/* ---- engine targets ---------------------------------------------------- */

struct btgt {
	struct eng_target *tgt;
	struct lode_uuid cont;
	char path[PATH_MAX];
	lode_epoch_t next_epoch;
};

static void btgt_open(struct btgt *b, const struct workdir *w, const char *name,
		      enum eng_mode mode, uint64_t capacity, unsigned slots)
{
	struct eng_tgt_opts o = {
		.path = b->path,
		.mode = mode,
		.capacity = capacity,
		.queue_depth = pow2_at_least(2 * slots) > 256 ? pow2_at_least(2 * slots) : 256,
	};
	char what[PATH_MAX + 32];

	memset(b->cont.b, 0, sizeof(b->cont.b));
	memcpy(b->cont.b, "lode-bench-cont", 15);
	b->next_epoch = 1;
	if ((size_t)snprintf(b->path, sizeof(b->path), "%s/%s", w->path, name) >= sizeof(b->path))
		die("directory name too long: %s/%s", w->path, name);
	snprintf(what, sizeof(what), "eng_tgt_open(%s)", b->path);
	blocking_begin("eng_tgt_open");
	check(eng_tgt_open(&o, &b->tgt), what);
	blocking_begin("eng_cont_create");
	check(eng_cont_create(b->tgt, &b->cont), "eng_cont_create");
	blocking_end();
}

static void btgt_close(struct btgt *b)
{
	blocking_begin("eng_tgt_close");
	check(eng_tgt_close(b->tgt), "eng_tgt_close");
	blocking_end();
	b->tgt = NULL;
	rm_tree(b->path);
}

static void btgt_stats(struct btgt *b, struct eng_stats *st)
{
	memset(st, 0, sizeof(*st));
	blocking_begin("eng_tgt_stats");
	check(eng_tgt_stats(b->tgt, st), "eng_tgt_stats");
	blocking_end();
}

static void btgt_aggregate(struct btgt *b)
{
	blocking_begin("eng_aggregate");
	check(eng_aggregate(b->tgt, &b->cont, LODE_EPOCH_MAX), "eng_aggregate");
	blocking_end();
}

/* Key number i: object i / DKEYS_PER_OBJ, dkey the big-endian rest, akey "v". */
static void key_make(struct eng_key *ek, uint8_t dkey[8], const struct lode_uuid *cont,
		     uint64_t i)
{
	uint64_t d = i % DKEYS_PER_OBJ;

	for (int b = 7; b >= 0; b--, d >>= 8)
		dkey[b] = (uint8_t)d;
	ek->cont = cont;
	ek->oid = lode_oid_make(LODE_OT_KV, 0, 0xbe4c, i / DKEYS_PER_OBJ + 1);
	ek->dkey = dkey;
	ek->dkey_len = 8;
	ek->akey = "v";
	ek->akey_len = 1;
}

/* ---- asynchronous engine driver ---------------------------------------- */

struct run;

struct slot {
	struct run *run;
	uint8_t *buf;
	bool registered;
	bool fetch;
	bool full;
	uint64_t key;
	uint32_t len_out;
	uint8_t dkey[8];
	struct eng_key ek;
};

/*
 * One set of nkeys values of bs bytes on one target, and the slots that keep
 * operations in flight on it. key_epoch remembers the epoch last written to
 * each key so that a fetch knows which stamp to expect.
 */
struct run {
	struct btgt *bt;
	const char *name;
	uint32_t bs;
	uint64_t nkeys;
	uint32_t *key_epoch;
	struct slot *slots;
	unsigned nslots;
	unsigned *free_ids;
	unsigned nfree;
	unsigned inflight;
	uint64_t issued;
	uint64_t completed;
	uint64_t verified_full;
	unsigned unregistered;
	double last_done;
	int err;            /* first engine error, or 1 for wrong data */
	uint64_t err_key;
	const char *err_op;
	char why[256];
};

/* Host memory only, so that the memory case can take its baseline after. */
static void run_alloc(struct run *r, const char *name, uint32_t bs, uint64_t nkeys,
		      unsigned nslots)
{
	memset(r, 0, sizeof(*r));
	r->name = name;
	r->bs = bs;
	r->nkeys = nkeys;
	r->nslots = nslots;
	r->key_epoch = malloc(nkeys * sizeof(*r->key_epoch));
	r->slots = calloc(nslots, sizeof(*r->slots));
	r->free_ids = malloc(nslots * sizeof(*r->free_ids));
	if (!r->key_epoch || !r->slots || !r->free_ids)
		die("out of memory");
	memset(r->key_epoch, 0, nkeys * sizeof(*r->key_epoch));
}

/* Slot buffers come from eng_buf_alloc(): the engine's registered memory. */
static void run_attach(struct run *r, struct btgt *bt)
{
	r->bt = bt;
	for (unsigned i = 0; i < r->nslots; i++) {
		struct slot *s = &r->slots[i];

		s->run = r;
		s->buf = eng_buf_alloc(bt->tgt, r->bs);
		s->registered = s->buf != NULL;
		if (!s->buf) {
			s->buf = xmalloc_aligned(round_up(r->bs, BLOCK));
			r->unregistered++;
		}
		memcpy(s->buf, g_pattern, r->bs);
		r->free_ids[r->nfree++] = i;
	}
	if (r->unregistered)
		fprintf(stderr, "%s: warning: %s: eng_buf_alloc(%u) failed for %u of %u buffers; "
			"those use unregistered memory\n", g_prog, r->name, r->bs,
			r->unregistered, r->nslots);
	r->last_done = now_s();
}

static void run_free(struct run *r)
{
	for (unsigned i = 0; i < r->nslots; i++) {
		struct slot *s = &r->slots[i];

		if (s->registered)
			eng_buf_free(r->bt->tgt, s->buf);
		else
			free(s->buf);
	}
	free(r->slots);
	free(r->free_ids);
	free(r->key_epoch);
}

static void run_done(void *arg, int rc)
{
	struct slot *s = arg;
	struct run *r = s->run;

	if (rc == 0 && s->fetch && r->err == 0) {
		if (s->len_out != r->bs) {
			snprintf(r->why, sizeof(r->why), "length %u, expected %u", s->len_out,
				 r->bs);
			rc = 1;
		} else if (value_check(s->buf, r->bs, s->key, r->key_epoch[s->key], s->full,
				       r->why, sizeof(r->why)) != 0) {
			rc = 1;
		} else if (s->full) {
			r->verified_full++;
		}
	}
	if (rc != 0 && r->err == 0) {
		r->err = rc;
		r->err_key = s->key;
		r->err_op = s->fetch ? "eng_sv_fetch" : "eng_sv_update";
	}
	r->inflight--;
	r->completed++;
	r->free_ids[r->nfree++] = (unsigned)(s - r->slots);
}

/* One eng_progress() round and every check that can end the run. Returns now. */
static double run_poll(struct run *r)
{
	int rc = eng_progress(r->bt->tgt);
	double t = now_s();

	if (rc < 0)
		die("%s: eng_progress: %s (%d)", r->name, lode_strerror(rc), rc);
	if (r->err > 0)
		die("%s: wrong data from %s of key %" PRIu64 ": %s", r->name, r->err_op,
		    r->err_key, r->why);
	if (r->err < 0)
		die("%s: %s of key %" PRIu64 " completed with %s (%d)", r->name, r->err_op,
		    r->err_key, lode_strerror(r->err), r->err);
	if (g_interrupted)
		die("interrupted");
	if (rc > 0)
		r->last_done = t;
	else if (r->inflight > 0 && t - r->last_done > STALL_SECONDS)
		die("%s: no completion for %.0f s with %u operations in flight "
		    "(eng_inflight() says %u); the engine appears stuck",
		    r->name, STALL_SECONDS, r->inflight, eng_inflight(r->bt->tgt));
	return t;
}

static void run_drain(struct run *r)
{
	while (r->inflight > 0)
		run_poll(r);
}

static void run_submit(struct run *r, uint64_t key, bool fetch, lode_epoch_t epoch)
{
	struct slot *s = &r->slots[r->free_ids[--r->nfree]];
	int rc;

	s->key = key;
	s->fetch = fetch;
	s->full = fetch && r->issued % VERIFY_EVERY == 0;
	key_make(&s->ek, s->dkey, &r->bt->cont, key);
	if (fetch) {
		/* Poisoned, so a fetch that "succeeds" without writing is caught. */
		memset(s->buf, 0xee, s->full ? r->bs : sizeof(struct stamp));
		s->len_out = 0;
	} else {
		value_stamp(s->buf, r->bs, key, (uint32_t)epoch);
		r->key_epoch[key] = (uint32_t)epoch;
	}
	r->inflight++;
	r->issued++;
	if (fetch)
		rc = eng_sv_fetch(r->bt->tgt, &s->ek, LODE_EPOCH_MAX, s->buf, r->bs, &s->len_out,
				  run_done, s);
	else
		rc = eng_sv_update(r->bt->tgt, &s->ek, epoch, s->buf, r->bs, run_done, s);
	if (rc != 0)
		die("%s: %s of key %" PRIu64 " refused: %s (%d)", r->name,
		    fetch ? "eng_sv_fetch" : "eng_sv_update", key, lode_strerror(rc), rc);
}

struct phase {
	uint64_t ops;        /* completed in the timed window */
	double secs;         /* length of the timed window */
	unsigned passes;     /* complete passes over the data set (updates) */
	double untimed_secs; /* aggregation and fill, outside the window */
	unsigned qd;
};

/*
 * Update phase: see the top of the file. seconds <= 0 means exactly one
 * pass, all of it timed. Leaves one version per key (aggregated).
 */
static void run_updates(struct run *r, enum pattern pat, unsigned qd, double seconds,
			struct phase *ph)
{
	struct order o;
	unsigned fill_qd = qd;
	bool more = true;

	memset(ph, 0, sizeof(*ph));
	ph->qd = qd;
	if ((uint64_t)fill_qd * r->bs < FILL_BYTES)
		fill_qd = (unsigned)(FILL_BYTES / r->bs);
	if (fill_qd > r->nslots)
		fill_qd = r->nslots;
	if (fill_qd < qd)
		fill_qd = qd;
	order_init(&o, r->nkeys, pat, true, 0x5eed0000u + r->bs + pat);
	for (;;) {
		lode_epoch_t epoch = r->bt->next_epoch++;
		uint64_t c0 = r->completed, idx = 0;
		double t0 = now_s(), t;
		bool stop = false;

		more = order_next(&o, &idx);
		while (more && !stop) {
			while (more && r->inflight < qd) {
				run_submit(r, idx, false, epoch);
				more = order_next(&o, &idx);
			}
			t = run_poll(r);
			stop = seconds > 0 && ph->secs + (t - t0) >= seconds;
		}
		run_drain(r);
		ph->secs += now_s() - t0;
		ph->ops += r->completed - c0;
		if (!more)
			ph->passes++;
		if (ph->passes == 0) {
			/* Out of time in the first pass: finish it untimed for the fetches. */
			t0 = now_s();
			while (more) {
				while (more && r->inflight < fill_qd) {
					run_submit(r, idx, false, epoch);
					more = order_next(&o, &idx);
				}
				run_poll(r);
			}
			run_drain(r);
			ph->untimed_secs += now_s() - t0;
			break;
		}
		if (stop || seconds <= 0)
			break;
		t0 = now_s();
		btgt_aggregate(r->bt);
		order_new_pass(&o);
		ph->untimed_secs += now_s() - t0;
	}
	if (ph->passes > 1 || more) {
		double t0 = now_s();

		btgt_aggregate(r->bt);
		ph->untimed_secs += now_s() - t0;
	}
	order_fini(&o);
}

/* Fetch phase: keep qd fetches of the latest versions in flight for seconds. */
static void run_fetches(struct run *r, enum pattern pat, unsigned qd, double seconds,
			struct phase *ph)
{
	struct order o;
	uint64_t c0 = r->completed, idx = 0;
	double t0 = now_s(), t;

	memset(ph, 0, sizeof(*ph));
	ph->qd = qd;
	order_init(&o, r->nkeys, pat, false, 0xfe7c0000u + r->bs + pat);
	do {
		while (r->inflight < qd) {
			order_next(&o, &idx);
			run_submit(r, idx, true, 0);
		}
		t = run_poll(r);
	} while (t - t0 < seconds);
	run_drain(r);
	ph->secs = now_s() - t0;
	ph->ops = r->completed - c0;
	order_fini(&o);
}

/* ---- ceilings: memory copy --------------------------------------------- */

/*
 * Single-thread memcpy of bs-byte blocks from a size-byte source (as large
 * and as cold in cache as the engine's data set) into qd rotating
 * destinations (the slots), in the given order, for seconds.
 */
static void memcpy_case(const uint8_t *src, uint64_t size, uint8_t *dst, unsigned qd, uint32_t bs,
			enum pattern pat, double seconds, struct phase *ph)
{
	struct order o;
	uint64_t ops = 0, idx = 0;
	double t0 = now_s(), t;

	memset(ph, 0, sizeof(*ph));
	ph->qd = qd;
	order_init(&o, size / bs, pat, false, 0xc0b10000u + bs + pat);
	do {
		for (unsigned i = 0; i < 64; i++, ops++) {
			order_next(&o, &idx);
			memcpy(dst + (size_t)(ops % qd) * bs, src + idx * bs, bs);
			__asm__ volatile("" ::: "memory");
		}
		t = now_s();
	} while (t - t0 < seconds);
	ph->ops = ops;
	ph->secs = t - t0;
	order_fini(&o);
}

/* ---- ceilings: raw io_uring with O_DIRECT ------------------------------ */

struct raw {
	const char *path;
	int fd;
	struct io_uring ring;
	unsigned qd;
	uint32_t bs;
	uint8_t *bufs;
	bool fixed;
	unsigned *free_ids;
	unsigned nfree;
	unsigned inflight;
};

static void raw_open(struct raw *x, const char *path, uint64_t size, uint32_t bs, unsigned qd)
{
	struct iovec *iov;
	struct stat st;
	int rc;

	memset(x, 0, sizeof(*x));
	x->path = path;
	x->qd = qd;
	x->bs = bs;
	x->fd = open(path, O_RDWR | O_CREAT | O_DIRECT, 0600);
	if (x->fd < 0)
		die("raw ceiling: open %s with O_DIRECT: %s", path, strerror(errno));
	if (fstat(x->fd, &st) != 0)
		die("raw ceiling: stat %s: %s", path, strerror(errno));
	if ((uint64_t)st.st_size < size) {
		/* Write the whole file once, untimed: a ceiling measured on
		 * fallocated (unwritten) space would pay the extent conversion
		 * that the engine avoids by zero-filling its own growth. */
		uint8_t *z = xmalloc_aligned(MIB);

		memset(z, 0, MIB);
		for (uint64_t o = 0; o < size; o += MIB)
			if (pwrite(x->fd, z, size - o < MIB ? size - o : MIB, (off_t)o) < 0)
				die("raw ceiling: cannot write %s: %s", path, strerror(errno));
		if (fdatasync(x->fd) != 0)
			die("raw ceiling: fdatasync %s: %s", path, strerror(errno));
		free(z);
	}
	rc = io_uring_queue_init(pow2_at_least(qd), &x->ring, 0);
	if (rc < 0)
		die("raw ceiling: io_uring_queue_init(%u): %s", qd, strerror(-rc));
	x->bufs = xmalloc_aligned((size_t)qd * bs);
	x->free_ids = malloc(qd * sizeof(*x->free_ids));
	iov = malloc(qd * sizeof(*iov));
	if (!x->free_ids || !iov)
		die("out of memory");
	for (unsigned i = 0; i < qd; i++) {
		memcpy(x->bufs + (size_t)i * bs, g_pattern, bs);
		iov[i].iov_base = x->bufs + (size_t)i * bs;
		iov[i].iov_len = bs;
		x->free_ids[x->nfree++] = i;
	}
	/* Registered buffers, as the engine uses; plain ones if the kernel says no. */
	x->fixed = io_uring_register_buffers(&x->ring, iov, qd) == 0;
	free(iov);
}

static void raw_close(struct raw *x)
{
	if (x->fixed)
		io_uring_unregister_buffers(&x->ring);
	io_uring_queue_exit(&x->ring);
	close(x->fd);
	free(x->bufs);
	free(x->free_ids);
}

/*
 * Keep qd reads or writes in flight in order o. fill: stop at the end of
 * o's current pass; else run for seconds, starting new passes as needed.
 * Returns the completed operations; *secs the time taken.
 */
static uint64_t raw_pump(struct raw *x, struct order *o, bool write, bool fill, double seconds,
			 unsigned *passes, double *secs)
{
	uint64_t done = 0, idx = 0;
	double t0 = now_s();
	bool more = true;

	for (;;) {
		while (more && x->inflight < x->qd) {
			struct io_uring_sqe *sqe;
			unsigned id;
			uint8_t *buf;

			if (!order_next(o, &idx)) {
				(*passes)++;
				if (fill) {
					more = false;
					break;
				}
				order_new_pass(o);
				order_next(o, &idx);
			}
			id = x->free_ids[--x->nfree];
			buf = x->bufs + (size_t)id * x->bs;
			sqe = io_uring_get_sqe(&x->ring);
			if (!sqe)
				die("raw ceiling: io_uring submission queue full");
			if (write) {
				value_stamp(buf, x->bs, idx, *passes + 1);
				if (x->fixed)
					io_uring_prep_write_fixed(sqe, x->fd, buf, x->bs,
								  idx * x->bs, (int)id);
				else
					io_uring_prep_write(sqe, x->fd, buf, x->bs, idx * x->bs);
			} else if (x->fixed) {
				io_uring_prep_read_fixed(sqe, x->fd, buf, x->bs, idx * x->bs,
							 (int)id);
			} else {
				io_uring_prep_read(sqe, x->fd, buf, x->bs, idx * x->bs);
			}
			io_uring_sqe_set_data64(sqe, ((uint64_t)id << 40) | idx);
			x->inflight++;
		}
		if (x->inflight == 0)
			break;
		int rc = io_uring_submit_and_wait(&x->ring, 1);

		if (rc < 0 && rc != -EINTR)
			die("raw ceiling: io_uring_submit_and_wait: %s", strerror(-rc));
		struct io_uring_cqe *cqe;
		unsigned head, n = 0;

		io_uring_for_each_cqe(&x->ring, head, cqe) {
			uint64_t ud = io_uring_cqe_get_data64(cqe);

			if (cqe->res != (int)x->bs)
				die("raw ceiling: %s of %u bytes at offset %" PRIu64 " in %s: %s",
				    write ? "write" : "read", x->bs,
				    (ud & ((UINT64_C(1) << 40) - 1)) * x->bs, x->path,
				    cqe->res < 0 ? strerror(-cqe->res) : "short transfer");
			x->free_ids[x->nfree++] = (unsigned)(ud >> 40);
			x->inflight--;
			done++;
			n++;
		}
		io_uring_cq_advance(&x->ring, n);
		if (g_interrupted)
			die("interrupted");
		if (!fill && now_s() - t0 >= seconds)
			more = false;
	}
	*secs = now_s() - t0;
	return done;
}

/* Issue n writes in order o (starting new passes as needed) and wait for all. */
static uint64_t raw_pump_batch(struct raw *x, struct order *o, unsigned n, unsigned *passes,
			       double *secs)
{
	uint64_t done = 0, idx = 0;
	double t0 = now_s();

	for (unsigned i = 0; i < n && i < x->qd; i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&x->ring);
		uint8_t *buf = x->bufs + (size_t)i * x->bs;

		if (!sqe)
			die("durable write ceiling: io_uring submission queue full");
		if (!order_next(o, &idx)) {
			(*passes)++;
			order_new_pass(o);
			order_next(o, &idx);
		}
		value_stamp(buf, x->bs, idx, *passes + 1);
		if (x->fixed)
			io_uring_prep_write_fixed(sqe, x->fd, buf, x->bs, idx * x->bs, (int)i);
		else
			io_uring_prep_write(sqe, x->fd, buf, x->bs, idx * x->bs);
		x->inflight++;
	}
	while (x->inflight) {
		struct io_uring_cqe *cqe;
		unsigned head, k = 0;
		int rc = io_uring_submit_and_wait(&x->ring, 1);

		if (rc < 0 && rc != -EINTR)
			die("durable write ceiling: io_uring_submit_and_wait: %s", strerror(-rc));
		io_uring_for_each_cqe(&x->ring, head, cqe) {
			if (cqe->res != (int)x->bs)
				die("durable write ceiling: write of %u bytes in %s: %s", x->bs, x->path,
				    cqe->res < 0 ? strerror(-cqe->res) : "short transfer");
			x->inflight--;
			done++;
			k++;
		}
		io_uring_cq_advance(&x->ring, k);
	}
	*secs = now_s() - t0;
	return done;
}

/*
 * A raw O_DIRECT case on path (size bytes, bs blocks, qd in flight).
 * Writes cover the file in passes and always complete the first one (its
 * tail untimed), so later reads find written blocks.
 */
static void raw_case(const char *path, uint64_t size, uint32_t bs, unsigned qd, enum pattern pat,
		     bool write, double seconds, struct phase *ph, bool *fixed)
{
	struct raw x;
	struct order o;

	memset(ph, 0, sizeof(*ph));
	ph->qd = qd;
	raw_open(&x, path, size, bs, qd);
	*fixed = x.fixed;
	order_init(&o, size / bs, pat, write, 0x7a400000u + bs + pat);
	ph->ops = raw_pump(&x, &o, write, false, seconds, &ph->passes, &ph->secs);
	if (write && ph->passes == 0)
		raw_pump(&x, &o, write, true, 0, &ph->passes, &ph->untimed_secs);
	order_fini(&o);
	raw_close(&x);
}

/*
 * The durable large-write ceiling: qd O_DIRECT writes in flight through
 * io_uring, then fdatasync, then the next qd: the least a durable write at
 * this queue depth must wait for on this device.
 */
static void raw_sync_case(const char *path, uint64_t size, uint32_t bs, unsigned qd,
			  double seconds, struct phase *ph)
{
	struct raw x;
	struct order o;
	double t0, t;

	memset(ph, 0, sizeof(*ph));
	ph->qd = qd;
	raw_open(&x, path, size, bs, qd);
	order_init(&o, size / bs, PAT_SEQ, true, 0x5d000000u + bs);
	t0 = now_s();
	do {
		unsigned passes = ph->passes;
		double secs;

		ph->ops += raw_pump_batch(&x, &o, qd, &passes, &secs);
		ph->passes = passes;
		if (fdatasync(x.fd) != 0)
			die("durable write ceiling: fdatasync %s: %s", path, strerror(errno));
		t = now_s();
		if (g_interrupted)
			die("interrupted");
	} while (t - t0 < seconds);
	ph->secs = t - t0;
	order_fini(&o);
	raw_close(&x);
}

/*
 * The durable small-update ceiling: buffered pwrite of 4 KiB at random
 * offsets of a written file, fdatasync after every batch writes.
 */
static void sync_case(const char *path, uint64_t size, unsigned batch, double seconds,
		      struct phase *ph)
{
	struct order o;
	uint8_t *buf = xmalloc_aligned(BLOCK);
	uint64_t idx = 0;
	double t0, t;
	int fd = open(path, O_RDWR);

	memset(ph, 0, sizeof(*ph));
	ph->qd = batch;
	if (fd < 0)
		die("sync ceiling: open %s: %s", path, strerror(errno));
	memcpy(buf, g_pattern, BLOCK);
	order_init(&o, size / BLOCK, PAT_RAND, true, 0x5c000000u);
	t0 = now_s();
	do {
		for (unsigned i = 0; i < batch; i++, ph->ops++) {
			if (!order_next(&o, &idx)) {
				ph->passes++;
				order_new_pass(&o);
				order_next(&o, &idx);
			}
			value_stamp(buf, BLOCK, idx, ph->passes + 1);
			if (pwrite(fd, buf, BLOCK, (off_t)(idx * BLOCK)) != (ssize_t)BLOCK)
				die("sync ceiling: pwrite %s: %s", path, strerror(errno));
		}
		if (fdatasync(fd) != 0)
			die("sync ceiling: fdatasync %s: %s", path, strerror(errno));
		t = now_s();
		if (g_interrupted)
			die("interrupted");
	} while (t - t0 < seconds);
	ph->secs = t - t0;
	close(fd);
	order_fini(&o);
	free(buf);
}

/* ---- results ----------------------------------------------------------- */

enum target_kind { TGT_NONE, TGT_OPS, TGT_RATIO };

struct ceiling {
	char name[48];
	uint32_t bs;
	struct phase ph;
	double ops_s;
	char note[64];
};

struct result {
	char name[64];
	const char *mode;
	const char *op;
	const char *pat;
	uint32_t bs;
	struct phase ph;
	double ops_s;
	const struct ceiling *ceil;
	double ratio;
	enum target_kind tkind;
	double tval;
	bool pass;
	char note[160];
};

struct index_use {
	char name[48];
	uint64_t values;
	struct eng_stats st;
};

struct memory_use {
	bool done;
	uint64_t values;
	uint64_t objects;
	struct phase insert;
	struct phase check;
	struct eng_stats st;
	uint64_t rss0, rss1, anon0, anon1;
	uint64_t files; /* bytes the target's files hold on tmpfs: RAM too */
};

/* Bytes allocated to the files of directory dir (st_blocks, not st_size). */
static uint64_t dir_bytes(const char *dir)
{
	char p[PATH_MAX + 64];
	struct dirent *e;
	struct stat st;
	uint64_t n = 0;
	DIR *d = opendir(dir);

	if (!d)
		return 0;
	while ((e = readdir(d)) != NULL) {
		if ((size_t)snprintf(p, sizeof(p), "%s/%s", dir, e->d_name) < sizeof(p) &&
		    stat(p, &st) == 0 && S_ISREG(st.st_mode))
			n += (uint64_t)st.st_blocks * 512;
	}
	closedir(d);
	return n;
}

#define MAX_RESULTS 24
#define MAX_CEILINGS 16
#define MAX_INDEX 8

static struct result g_res[MAX_RESULTS];
static unsigned g_nres;
static struct ceiling g_ceil[MAX_CEILINGS];
static unsigned g_nceil;
static struct index_use g_index[MAX_INDEX];
static unsigned g_nindex;
static struct memory_use g_mem;

static double rate(const struct phase *ph)
{
	return ph->secs > 0 ? (double)ph->ops / ph->secs : 0;
}

/* "512.3K ops/s (2001 MiB/s)" for small blocks, "8123 MiB/s" for large ones. */
static void fmt_rate(char *b, size_t n, double ops_s, uint32_t bs)
{
	double mib = ops_s * bs / (double)MIB;

	if (bs >= 64 * KIB)
		snprintf(b, n, "%.0f MiB/s", mib);
	else if (ops_s >= 1e6)
		snprintf(b, n, "%.2fM ops/s (%.0f MiB/s)", ops_s / 1e6, mib);
	else if (ops_s >= 1e3)
		snprintf(b, n, "%.1fK ops/s (%.0f MiB/s)", ops_s / 1e3, mib);
	else
		snprintf(b, n, "%.0f ops/s (%.1f MiB/s)", ops_s, mib);
}

static void fmt_bytes(char *b, size_t n, double v)
{
	if (v >= GIB)
		snprintf(b, n, "%.2f GiB", v / GIB);
	else if (v >= MIB)
		snprintf(b, n, "%.1f MiB", v / MIB);
	else if (v >= KIB)
		snprintf(b, n, "%.1f KiB", v / KIB);
	else
		snprintf(b, n, "%.0f B", v);
}

static void progress(const char *mode, const char *what, const struct phase *ph, uint32_t bs)
{
	char r[64];

	if (!ph) {
		fprintf(stderr, "  [%s] %s ...\n", mode, what);
		return;
	}
	fmt_rate(r, sizeof(r), rate(ph), bs);
	fprintf(stderr, "  [%s] %-34s %s, %" PRIu64 " ops in %.2f s", mode, what, r, ph->ops,
		ph->secs);
	if (ph->passes)
		fprintf(stderr, ", %u pass%s", ph->passes, ph->passes == 1 ? "" : "es");
	if (ph->untimed_secs > 0.005)
		fprintf(stderr, " (+%.2f s untimed)", ph->untimed_secs);
	fputc('\n', stderr);
}

static const struct ceiling *ceiling_add(const char *mode, const char *name, uint32_t bs,
					 const struct phase *ph, const char *note)
{
	struct ceiling *c = &g_ceil[g_nceil++];

	snprintf(c->name, sizeof(c->name), "%s", name);
	snprintf(c->note, sizeof(c->note), "%s", note ? note : "");
	c->bs = bs;
	c->ph = *ph;
	c->ops_s = rate(ph);
	progress(mode, name, ph, bs);
	return c;
}

static struct result *result_add(const char *mode, const char *name, const char *op,
				 enum pattern pat, uint32_t bs, const struct phase *ph,
				 const struct ceiling *ceil)
{
	struct result *r = &g_res[g_nres++];

	snprintf(r->name, sizeof(r->name), "%s %s", mode, name);
	r->mode = mode;
	r->op = op;
	r->pat = pat_name[pat];
	r->bs = bs;
	r->ph = *ph;
	r->ops_s = rate(ph);
	r->ceil = ceil;
	r->ratio = ceil && ceil->ops_s > 0 ? r->ops_s / ceil->ops_s : -1;
	r->tkind = TGT_NONE;
	progress(mode, name, ph, bs);
	return r;
}

static void result_target_ops(struct result *r, double min_ops_s)
{
	r->tkind = TGT_OPS;
	r->tval = min_ops_s;
	r->pass = r->ops_s >= min_ops_s;
}

static void result_target_ratio(struct result *r, double min_ratio)
{
	r->tkind = TGT_RATIO;
	r->tval = min_ratio;
	r->pass = r->ratio >= min_ratio;
}

/* ---- the cases --------------------------------------------------------- */

struct group {
	struct phase upd, fet, upd32;
	struct eng_stats st;     /* after the update phase, one version per key */
	uint64_t flushes;        /* group commits during the update phase */
	uint64_t flushed;        /* updates they made durable */
	uint64_t nkeys;
	uint64_t verified_full;
};

static uint64_t target_capacity(void)
{
	return round_up(3 * g_opt.size + 64 * MIB, MIB);
}

/*
 * One engine case on a fresh target in w: size / bs values updated then
 * fetched in pattern pat, at --qd; with qd32 also a third phase at
 * DURABLE_QD that updates keys which all exist already.
 */
static void engine_group(const struct workdir *w, const char *mode_name, enum eng_mode mode,
			 uint32_t bs, enum pattern pat, bool qd32, struct group *g)
{
	char label[64], dir[64];
	unsigned nslots = g_opt.qd;
	unsigned fill = (unsigned)(FILL_BYTES / bs);
	struct eng_stats s0;
	struct btgt bt;
	struct run r;

	memset(g, 0, sizeof(*g));
	if (fill > 256)
		fill = 256;
	if (nslots < fill)
		nslots = fill;
	if (qd32 && nslots < DURABLE_QD)
		nslots = DURABLE_QD;
	g->nkeys = g_opt.size / bs;
	if (bs >= MIB) {
		snprintf(label, sizeof(label), "%s %uM %s", mode_name, (unsigned)(bs / MIB),
			 pat_name[pat]);
		snprintf(dir, sizeof(dir), "%s-%um-%s", mode_name, (unsigned)(bs / MIB),
			 pat_name[pat]);
	} else {
		snprintf(label, sizeof(label), "%s %uK %s", mode_name, (unsigned)(bs / KIB),
			 pat_name[pat]);
		snprintf(dir, sizeof(dir), "%s-%uk-%s", mode_name, (unsigned)(bs / KIB),
			 pat_name[pat]);
	}
	run_alloc(&r, label, bs, g->nkeys, nslots);
	btgt_open(&bt, w, dir, mode, target_capacity(), nslots);
	run_attach(&r, &bt);

	btgt_stats(&bt, &s0);
	run_updates(&r, pat, g_opt.qd, g_opt.seconds, &g->upd);
	btgt_stats(&bt, &g->st);
	g->flushes = g->st.flushes - s0.flushes;
	g->flushed = g->st.flushed_updates - s0.flushed_updates;
	run_fetches(&r, pat, g_opt.qd, g_opt.seconds, &g->fet);
	if (qd32)
		run_updates(&r, pat, DURABLE_QD, g_opt.seconds, &g->upd32);
	g->verified_full = r.verified_full;
	run_free(&r);
	btgt_close(&bt);
}

static void index_note(const char *name, const struct group *g)
{
	struct index_use *u = &g_index[g_nindex++];

	snprintf(u->name, sizeof(u->name), "%s", name);
	u->values = g->nkeys;
	u->st = g->st;
}

static void note_verified(struct result *r, const struct group *g)
{
	snprintf(r->note, sizeof(r->note), "%" PRIu64 " fetches compared in full",
		 g->verified_full);
}

/*
 * Memory: small_count 16-byte values over objects x DKEYS_PER_OBJ dkeys in
 * a RAM target; index_bytes and RSS growth per value. The baseline is taken
 * after the benchmark's own per-key bookkeeping is allocated and touched.
 */
static void memory_case(const struct workdir *w)
{
	struct memory_use *m = &g_mem;
	struct btgt bt;
	struct run r;

	m->values = g_opt.small_count;
	m->objects = (m->values + DKEYS_PER_OBJ - 1) / DKEYS_PER_OBJ;
	progress("ram", "memory: inserting small values", NULL, 0);
	run_alloc(&r, "ram small values", SMALL_VALUE, m->values, g_opt.qd);
	read_rss(&m->rss0, &m->anon0);
	btgt_open(&bt, w, "ram-small", ENG_MODE_RAM, 64 * MIB, g_opt.qd);
	run_attach(&r, &bt);
	run_updates(&r, PAT_SEQ, g_opt.qd, 0, &m->insert);
	btgt_stats(&bt, &m->st);
	read_rss(&m->rss1, &m->anon1);
	m->files = dir_bytes(bt.path);
	progress("ram", "16B update (memory case)", &m->insert, SMALL_VALUE);
	run_fetches(&r, PAT_RAND, g_opt.qd, g_opt.seconds < 1 ? g_opt.seconds : 1, &m->check);
	progress("ram", "16B rand fetch (memory case check)", &m->check, SMALL_VALUE);
	run_free(&r);
	btgt_close(&bt);
	m->done = true;
}

/*
 * Measure the memcpy ceiling for (bs, pat) just before the engine case it
 * stands beside, so that both see the same machine (other load, turbo).
 */
static const struct ceiling *memcpy_ceiling(const uint8_t *src, uint8_t *dst, uint32_t bs,
					    enum pattern pat)
{
	double cs = g_opt.seconds / 4 > 0.5 ? g_opt.seconds / 4 : 0.5;
	char name[32];
	struct phase ph;

	if (cs > g_opt.seconds)
		cs = g_opt.seconds;
	memcpy_case(src, g_opt.size, dst, g_opt.qd, bs, pat, cs, &ph);
	snprintf(name, sizeof(name), "memcpy %u%s %s", bs >= MIB ? (unsigned)(bs / MIB) :
		 (unsigned)(bs / KIB), bs >= MIB ? "M" : "K", pat_name[pat]);
	return ceiling_add("ram", name, bs, &ph, NULL);
}

static void ram_cases(const struct workdir *w)
{
	const uint32_t b4 = 4 * (uint32_t)KIB, b1 = (uint32_t)MIB;
	const struct ceiling *c;
	uint8_t *src, *dst;
	struct group g;
	struct result *r;

	if (g_opt.small_count)
		memory_case(w);

	/* The memcpy source is as big as one case's data set, touched first. */
	src = xmalloc_aligned(g_opt.size);
	dst = xmalloc_aligned((size_t)g_opt.qd * MIB);
	for (uint64_t off = 0; off < g_opt.size; off += MIB)
		memcpy(src + off, g_pattern, g_opt.size - off < MIB ? g_opt.size - off : MIB);
	memset(dst, 0, (size_t)g_opt.qd * MIB);

	for (int p = PAT_SEQ; p <= PAT_RAND; p++) {
		char name[32];

		c = memcpy_ceiling(src, dst, b4, p);
		engine_group(w, "ram", ENG_MODE_RAM, b4, p, false, &g);
		snprintf(name, sizeof(name), "4K %s update", pat_name[p]);
		r = result_add("ram", name, "update", p, b4, &g.upd, c);
		result_target_ops(r, TARGET_UPDATE_4K);
		snprintf(name, sizeof(name), "4K %s fetch", pat_name[p]);
		r = result_add("ram", name, "fetch", p, b4, &g.fet, c);
		result_target_ops(r, TARGET_FETCH_4K);
		note_verified(r, &g);
		snprintf(name, sizeof(name), "ram 4K %s", pat_name[p]);
		index_note(name, &g);
	}
	c = memcpy_ceiling(src, dst, b1, PAT_SEQ);
	engine_group(w, "ram", ENG_MODE_RAM, b1, PAT_SEQ, false, &g);
	result_add("ram", "1M seq update", "update", PAT_SEQ, b1, &g.upd, c);
	r = result_add("ram", "1M seq fetch", "fetch", PAT_SEQ, b1, &g.fet, c);
	result_target_ratio(r, TARGET_FETCH_1M);
	note_verified(r, &g);
	free(src);
	free(dst);
}

static void disk_cases(const struct workdir *w)
{
	const uint32_t b4 = 4 * (uint32_t)KIB, b1 = (uint32_t)MIB;
	const struct ceiling *cw, *cr, *csync, *cwd;
	const char *kind = NULL;
	char raw[PATH_MAX + 16], name[48], note[64];
	bool fixed;
	struct phase ph;
	struct group g;
	struct result *r;

	snprintf(raw, sizeof(raw), "%s/raw.dat", w->path);

	raw_case(raw, g_opt.size, b1, g_opt.qd, PAT_SEQ, true, g_opt.seconds, &ph, &fixed);
	kind = fixed ? "registered buffers" : "unregistered buffers";
	cw = ceiling_add("disk", "raw O_DIRECT 1M seq write", b1, &ph, kind);
	raw_case(raw, g_opt.size, b1, g_opt.qd, PAT_SEQ, false, g_opt.seconds, &ph, &fixed);
	cr = ceiling_add("disk", "raw O_DIRECT 1M seq read", b1, &ph, kind);
	snprintf(name, sizeof(name), "raw 1M seq write + fdatasync/%u", g_opt.qd);
	raw_sync_case(raw, g_opt.size, b1, g_opt.qd, g_opt.seconds, &ph);
	cwd = ceiling_add("disk", name, b1, &ph, kind);
	engine_group(w, "disk", ENG_MODE_DISK, b1, PAT_SEQ, false, &g);
	r = result_add("disk", "1M seq update", "update", PAT_SEQ, b1, &g.upd, cwd);
	result_target_ratio(r, TARGET_DISK);
	snprintf(r->note, sizeof(r->note), "durable (%" PRIu64 " group commits), so set beside raw "
		 "writes made durable at the same queue depth", g.flushes);
	r = result_add("disk", "1M seq update (vs unflushed)", "update", PAT_SEQ, b1, &g.upd, cw);
	snprintf(r->note, sizeof(r->note), "the same updates beside raw writes that are never "
		 "flushed (the device's write cache)");
	r = result_add("disk", "1M seq fetch", "fetch", PAT_SEQ, b1, &g.fet, cr);
	result_target_ratio(r, TARGET_DISK);
	note_verified(r, &g);

	raw_case(raw, g_opt.size, b4, g_opt.qd, PAT_RAND, true, g_opt.seconds, &ph, &fixed);
	cw = ceiling_add("disk", "raw O_DIRECT 4K rand write", b4, &ph, kind);
	raw_case(raw, g_opt.size, b4, g_opt.qd, PAT_RAND, false, g_opt.seconds, &ph, &fixed);
	cr = ceiling_add("disk", "raw O_DIRECT 4K rand read", b4, &ph, kind);
	snprintf(name, sizeof(name), "pwrite 4K + fdatasync/%u", DURABLE_QD);
	sync_case(raw, g_opt.size, DURABLE_QD, g_opt.seconds, &ph);
	csync = ceiling_add("disk", name, b4, &ph, "buffered pwrite, random offsets");
	engine_group(w, "disk", ENG_MODE_DISK, b4, PAT_RAND, true, &g);
	snprintf(note, sizeof(note), "%" PRIu64 " group commits, %.1f updates each",
		 g.flushes, g.flushes ? (double)g.flushed / (double)g.flushes : 0.0);
	r = result_add("disk", "4K rand update", "update", PAT_RAND, b4, &g.upd, cw);
	snprintf(r->note, sizeof(r->note), "durable, first writes to a fresh target (%s); "
		 "ceiling is not durable, no target", note);
	r = result_add("disk", "4K rand fetch", "fetch", PAT_RAND, b4, &g.fet, cr);
	result_target_ratio(r, TARGET_DISK);
	note_verified(r, &g);
	snprintf(name, sizeof(name), "4K durable update qd %u", DURABLE_QD);
	r = result_add("disk", name, "update", PAT_RAND, b4, &g.upd32, csync);
	result_target_ratio(r, TARGET_DURABLE);
	snprintf(r->note, sizeof(r->note), "new versions of existing keys, like the ceiling's "
		 "overwrites of a written file");
	index_note("disk 4K rand", &g);
	unlink(raw);
}

/* ---- output ------------------------------------------------------------ */

static char g_cpu[128] = "unknown";
static char g_kernel[160] = "unknown";
static long g_ncpu;
static char g_ram_dir[PATH_MAX], g_disk_dir[PATH_MAX];
static const char *g_ram_fs = "", *g_disk_fs = ""; /* taken while the dirs exist */

static void host_info(void)
{
	char line[512];
	struct utsname u;
	FILE *f = fopen("/proc/cpuinfo", "r");

	while (f && fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');

		if (strncmp(line, "model name", 10) == 0 && colon) {
			snprintf(g_cpu, sizeof(g_cpu), "%s", colon + 2);
			g_cpu[strcspn(g_cpu, "\n")] = 0;
			break;
		}
	}
	if (f)
		fclose(f);
	if (uname(&u) == 0)
		snprintf(g_kernel, sizeof(g_kernel), "%s %s", u.sysname, u.release);
	g_ncpu = sysconf(_SC_NPROCESSORS_ONLN);
}

static void print_header(FILE *f)
{
	char sz[32];

	fmt_bytes(sz, sizeof(sz), (double)g_opt.size);
	fprintf(f, "lode-engine-bench: one target, one thread, async API; qd %u, %.1f s per phase, "
		"%s data set per case\n", g_opt.qd, g_opt.seconds, sz);
	fprintf(f, "host: %s, %ld CPUs, %s\n", g_cpu, g_ncpu, g_kernel);
	if (g_opt.modes & MODE_RAM)
		fprintf(f, "ram dir: %s (%s)\n", g_ram_dir, g_ram_fs);
	if (g_opt.modes & MODE_DISK)
		fprintf(f, "disk dir: %s (%s)\n", g_disk_dir, g_disk_fs);
}

static void print_table(void)
{
	char res[64], ceil[96], ratio[16], tgt[40], b1[32], b2[32];

	printf("\n%-30s %-27s %-54s %7s  %s\n", "case", "result", "ceiling (same run)", "ratio",
	       "target");
	for (unsigned i = 0; i < g_nres; i++) {
		const struct result *r = &g_res[i];

		fmt_rate(res, sizeof(res), r->ops_s, r->bs);
		if (r->ceil) {
			fmt_rate(b1, sizeof(b1), r->ceil->ops_s, r->ceil->bs);
			snprintf(ceil, sizeof(ceil), "%s: %s", r->ceil->name, b1);
			snprintf(ratio, sizeof(ratio), "%.1f%%", r->ratio * 100);
		} else {
			snprintf(ceil, sizeof(ceil), "-");
			snprintf(ratio, sizeof(ratio), "-");
		}
		if (r->tkind == TGT_OPS)
			snprintf(tgt, sizeof(tgt), ">= %.0fK ops/s  %s", r->tval / 1e3,
				 r->pass ? "PASS" : "FAIL");
		else if (r->tkind == TGT_RATIO)
			snprintf(tgt, sizeof(tgt), ">= %.0f%% of ceiling  %s", r->tval * 100,
				 r->pass ? "PASS" : "FAIL");
		else
			snprintf(tgt, sizeof(tgt), "-");
		printf("%-30s %-27s %-54s %7s  %s\n", r->name, res, ceil, ratio, tgt);
	}
	for (unsigned i = 0; i < g_nres; i++)
		if (g_res[i].note[0])
			printf("  note: %s: %s\n", g_res[i].name, g_res[i].note);

	if (g_nindex)
		printf("\nindex overhead per stored 4 KiB value (after aggregation, one version "
		       "per key):\n");
	for (unsigned i = 0; i < g_nindex; i++) {
		const struct index_use *u = &g_index[i];

		fmt_bytes(b1, sizeof(b1), (double)u->st.index_bytes);
		printf("  %-16s %" PRIu64 " values: index_bytes %s = %.1f B/value, %" PRIu64
		       " records\n", u->name, u->values, b1,
		       (double)u->st.index_bytes / (double)u->values, u->st.records);
	}

	if (g_mem.done) {
		const struct memory_use *m = &g_mem;
		int64_t grow = (int64_t)m->rss1 - (int64_t)m->rss0;
		int64_t agrow = (int64_t)m->anon1 - (int64_t)m->anon0;

		printf("\nmemory: %" PRIu64 " values of %u B in RAM mode, %" PRIu64
		       " objects x up to %u dkeys, akey \"v\"\n", m->values, SMALL_VALUE,
		       m->objects, DKEYS_PER_OBJ);
		fmt_rate(b1, sizeof(b1), rate(&m->insert), SMALL_VALUE);
		printf("  insert rate         %s (qd %u)\n", b1, g_opt.qd);
		fmt_bytes(b1, sizeof(b1), (double)m->st.index_bytes);
		printf("  index_bytes         %s = %.1f B/value (%" PRIu64 " records)\n", b1,
		       (double)m->st.index_bytes / (double)m->values, m->st.records);
		fmt_bytes(b1, sizeof(b1), (double)grow);
		fmt_bytes(b2, sizeof(b2), (double)m->rss1);
		printf("  VmRSS growth        %s = %.1f B/value (VmRSS now %s)\n",
		       b1, (double)grow / (double)m->values, b2);
		fmt_bytes(b1, sizeof(b1), (double)agrow);
		printf("  RssAnon growth      %s (heap; the rest is mapped tmpfs files)\n", b1);
		fmt_bytes(b1, sizeof(b1), (double)m->files);
		printf("  target files        %s on tmpfs (log, checkpoint): RAM as well\n", b1);
		fmt_bytes(b1, sizeof(b1), (double)agrow + (double)m->files);
		printf("  heap + files        %s = %.1f B/value   target < 2 GiB  %s\n", b1,
		       ((double)agrow + (double)m->files) / (double)m->values,
		       agrow + (int64_t)m->files < (int64_t)RSS_LIMIT ? "PASS" : "FAIL");
		printf("  check               %" PRIu64 " random fetches verified\n", m->check.ops);
	}
}

static void json_str(const char *s)
{
	lode_json_str(stdout, s);
}

static void json_phase(const struct phase *ph, uint32_t bs)
{
	printf("\"ops\": %" PRIu64 ", \"seconds\": %.4f, \"ops_per_s\": %.1f, \"mib_per_s\": %.1f, "
	       "\"qd\": %u, \"passes\": %u, \"untimed_seconds\": %.4f",
	       ph->ops, ph->secs, rate(ph), rate(ph) * bs / (double)MIB, ph->qd, ph->passes,
	       ph->untimed_secs);
}

static void json_stats(const struct eng_stats *st)
{
	printf("{\"records\": %" PRIu64 ", \"index_bytes\": %" PRIu64 ", \"extent_used\": %" PRIu64
	       ", \"extent_cap\": %" PRIu64 ", \"wal_used\": %" PRIu64 ", \"checkpoints\": %" PRIu64
	       ", \"flushes\": %" PRIu64 ", \"flushed_updates\": %" PRIu64 "}",
	       st->records, st->index_bytes, st->extent_used, st->extent_cap, st->wal_used,
	       st->checkpoints, st->flushes, st->flushed_updates);
}

static void print_json(void)
{
	printf("{\n  \"config\": {\"modes\": [");
	if (g_opt.modes & MODE_RAM)
		printf("\"ram\"%s", g_opt.modes & MODE_DISK ? ", " : "");
	if (g_opt.modes & MODE_DISK)
		printf("\"disk\"");
	printf("], \"size\": %" PRIu64 ", \"qd\": %u, \"seconds\": %.3f, \"small_count\": %" PRIu64
	       ", \"verify_every\": %u", g_opt.size, g_opt.qd, g_opt.seconds, g_opt.small_count,
	       VERIFY_EVERY);
	if (g_opt.modes & MODE_RAM) {
		printf(", \"ram_dir\": ");
		json_str(g_ram_dir);
		printf(", \"ram_fs\": \"%s\"", g_ram_fs);
	}
	if (g_opt.modes & MODE_DISK) {
		printf(", \"disk_dir\": ");
		json_str(g_disk_dir);
		printf(", \"disk_fs\": \"%s\"", g_disk_fs);
	}
	printf("},\n  \"host\": {\"cpu\": ");
	json_str(g_cpu);
	printf(", \"cpus\": %ld, \"kernel\": ", g_ncpu);
	json_str(g_kernel);
	printf("},\n  \"cases\": [");
	for (unsigned i = 0; i < g_nres; i++) {
		const struct result *r = &g_res[i];

		printf("%s\n    {\"name\": ", i ? "," : "");
		json_str(r->name);
		printf(", \"mode\": \"%s\", \"op\": \"%s\", \"pattern\": \"%s\", \"block_size\": %u, ",
		       r->mode, r->op, r->pat, r->bs);
		json_phase(&r->ph, r->bs);
		printf(",\n     \"ceiling\": ");
		if (r->ceil) {
			printf("{\"name\": ");
			json_str(r->ceil->name);
			printf(", ");
			json_phase(&r->ceil->ph, r->ceil->bs);
			printf(", \"note\": ");
			json_str(r->ceil->note);
			printf("}, \"ratio\": %.4f", r->ratio);
		} else {
			printf("null, \"ratio\": null");
		}
		printf(",\n     \"target\": ");
		if (r->tkind == TGT_NONE)
			printf("null");
		else
			printf("{\"kind\": \"%s\", \"value\": %g, \"pass\": %s}",
			       r->tkind == TGT_OPS ? "min_ops_per_s" : "min_ratio", r->tval,
			       r->pass ? "true" : "false");
		printf(", \"note\": ");
		json_str(r->note);
		printf("}");
	}
	printf("\n  ],\n  \"index_4k\": [");
	for (unsigned i = 0; i < g_nindex; i++) {
		const struct index_use *u = &g_index[i];

		printf("%s\n    {\"case\": ", i ? "," : "");
		json_str(u->name);
		printf(", \"values\": %" PRIu64 ", \"index_bytes_per_value\": %.2f, \"stats\": ",
		       u->values, (double)u->st.index_bytes / (double)u->values);
		json_stats(&u->st);
		printf("}");
	}
	printf("\n  ],\n  \"memory\": ");
	if (g_mem.done) {
		const struct memory_use *m = &g_mem;
		int64_t grow = (int64_t)m->rss1 - (int64_t)m->rss0;

		printf("{\"values\": %" PRIu64 ", \"value_size\": %u, \"objects\": %" PRIu64
		       ", \"dkeys_per_object\": %u, \"insert\": {", m->values, SMALL_VALUE,
		       m->objects, DKEYS_PER_OBJ);
		json_phase(&m->insert, SMALL_VALUE);
		printf("},\n     \"index_bytes\": %" PRIu64 ", \"index_bytes_per_value\": %.2f, "
		       "\"rss_before\": %" PRIu64 ", \"rss_after\": %" PRIu64 ", \"rss_growth\": %" PRId64
		       ", \"rss_growth_per_value\": %.2f, \"rss_anon_growth\": %" PRId64
		       ", \"rss_limit\": %" PRIu64 ", \"under_limit\": %s, \"verified_fetches\": %" PRIu64
		       ",\n     \"stats\": ",
		       m->st.index_bytes, (double)m->st.index_bytes / (double)m->values, m->rss0,
		       m->rss1, grow, (double)grow / (double)m->values,
		       (int64_t)m->anon1 - (int64_t)m->anon0, RSS_LIMIT,
		       grow < (int64_t)RSS_LIMIT ? "true" : "false", m->check.ops);
		json_stats(&m->st);
		printf("}");
	} else {
		printf("null");
	}
	printf("\n}\n");
}

/* ---- arguments --------------------------------------------------------- */

static void usage(void)
{
	printf("usage: %s [options]\n"
	       "Measure one Lode engine target (one thread, async API) against the ceiling of\n"
	       "this machine measured in the same run: memcpy (RAM mode), raw io_uring with\n"
	       "O_DIRECT and pwrite+fdatasync in the same directory (disk mode).\n"
	       "\n"
	       "  --mode ram|disk|all   which cases to run (default all)\n"
	       "  --dir PATH            where targets and files go; a run-<pid> directory is\n"
	       "                        made in it and removed at the end (default\n"
	       "                        /dev/shm/lode-bench for ram, ./lode-bench-data for disk)\n"
	       "  --size BYTES          data set per case, suffix K/M/G allowed (default 256M)\n"
	       "  --qd N                operations kept in flight (default 32)\n"
	       "  --seconds S           length of each timed phase (default 4)\n"
	       "  --small-count N       values in the memory case, 0 to skip (default 10000000)\n"
	       "  --json                print one JSON object instead of the table\n"
	       "  --help                this text\n",
	       g_prog);
}

static uint64_t parse_u64(const char *opt, const char *s, bool suffix)
{
	char *end;
	unsigned long long v;
	uint64_t mul = 1;

	errno = 0;
	if (*s < '0' || *s > '9')
		usage_error("%s: '%s' is not a number", opt, s);
	v = strtoull(s, &end, 10);
	if (suffix && *end) {
		switch (*end) {
		case 'k': case 'K': mul = KIB; break;
		case 'm': case 'M': mul = MIB; break;
		case 'g': case 'G': mul = GIB; break;
		case 't': case 'T': mul = 1024 * GIB; break;
		default: usage_error("%s: unknown suffix in '%s'", opt, s);
		}
		end++;
		if (*end == 'i')
			end++;
		if (*end == 'B')
			end++;
	}
	if (errno || *end || (v && mul > UINT64_MAX / v))
		usage_error("%s: '%s' is not a valid number", opt, s);
	return v * mul;
}

static void parse_args(int argc, char **argv)
{
	enum { O_MODE = 256, O_DIR, O_SIZE, O_QD, O_SECONDS, O_JSON, O_SMALL, O_HELP };
	static const struct option longopts[] = {
		{"mode", required_argument, NULL, O_MODE},
		{"dir", required_argument, NULL, O_DIR},
		{"size", required_argument, NULL, O_SIZE},
		{"qd", required_argument, NULL, O_QD},
		{"seconds", required_argument, NULL, O_SECONDS},
		{"json", no_argument, NULL, O_JSON},
		{"small-count", required_argument, NULL, O_SMALL},
		{"help", no_argument, NULL, O_HELP},
		{NULL, 0, NULL, 0},
	};
	int c;
	uint64_t v;
	char *end;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case O_MODE:
			if (strcmp(optarg, "ram") == 0)
				g_opt.modes = MODE_RAM;
			else if (strcmp(optarg, "disk") == 0)
				g_opt.modes = MODE_DISK;
			else if (strcmp(optarg, "all") == 0)
				g_opt.modes = MODE_RAM | MODE_DISK;
			else
				usage_error("--mode: '%s' is not ram, disk or all", optarg);
			break;
		case O_DIR:
			if (!*optarg)
				usage_error("--dir: empty path");
			g_opt.dir = optarg;
			break;
		case O_SIZE:
			v = parse_u64("--size", optarg, true);
			if (v < MIB || v > 1024 * GIB)
				usage_error("--size: must be between 1M and 1T");
			g_opt.size = v / MIB * MIB;
			break;
		case O_QD:
			v = parse_u64("--qd", optarg, false);
			if (v < 1 || v > 1024)
				usage_error("--qd: must be between 1 and 1024");
			g_opt.qd = (unsigned)v;
			break;
		case O_SECONDS:
			errno = 0;
			g_opt.seconds = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(g_opt.seconds >= 0.05) ||
			    g_opt.seconds > 3600)
				usage_error("--seconds: '%s' is not a duration between 0.05 and 3600",
					    optarg);
			break;
		case O_JSON:
			g_opt.json = true;
			break;
		case O_SMALL:
			v = parse_u64("--small-count", optarg, false);
			if (v > 1000000000ULL)
				usage_error("--small-count: at most 1000000000");
			g_opt.small_count = v;
			break;
		case 'h':
		case O_HELP:
			usage();
			exit(0);
		case ':':
			usage_error("option '%s' needs a value", argv[optind - 1]);
		default:
			usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		usage_error("unexpected argument '%s'", argv[optind]);
}

int main(int argc, char **argv)
{
	struct sigaction sa;
	pthread_t wd;

	parse_args(argc, argv);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (pthread_create(&wd, NULL, watchdog, NULL) != 0)
		die("cannot start the watchdog thread");
	pthread_detach(wd);

	pattern_init(MIB);
	host_info();
	snprintf(g_ram_dir, sizeof(g_ram_dir), "%s", g_opt.dir ? g_opt.dir : "/dev/shm/lode-bench");
	snprintf(g_disk_dir, sizeof(g_disk_dir), "%s", g_opt.dir ? g_opt.dir : "./lode-bench-data");

	if (g_opt.modes & MODE_RAM) {
		workdir_make(&g_wd[0], g_ram_dir);
		g_ram_fs = fs_kind(g_ram_dir);
		if (strcmp(g_ram_fs, "tmpfs") != 0)
			fprintf(stderr, "%s: warning: %s is not tmpfs; RAM mode will touch its "
				"file system\n", g_prog, g_ram_dir);
	}
	if (g_opt.modes & MODE_DISK) {
		workdir_make(&g_wd[1], g_disk_dir);
		g_disk_fs = fs_kind(g_disk_dir);
		if (strcmp(g_disk_fs, "tmpfs") == 0)
			fprintf(stderr, "%s: warning: %s is tmpfs; disk mode will measure memory, "
				"not a disk\n", g_prog, g_disk_dir);
	}
	print_header(stderr);
	if (g_opt.modes & MODE_RAM) {
		ram_cases(&g_wd[0]);
		workdir_remove(&g_wd[0]);
	}
	if (g_opt.modes & MODE_DISK) {
		disk_cases(&g_wd[1]);
		workdir_remove(&g_wd[1]);
	}
	if (g_opt.json) {
		print_json();
	} else {
		fputc('\n', stdout);
		print_header(stdout);
		print_table();
	}
	free(g_pattern);
	return 0;
}
