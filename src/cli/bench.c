/*
 * lode bench: a fio-like load generator on the native client API, which
 * reports what it measured beside what this machine can do at best.
 *
 * Usage:
 *
 *   lode bench [--name=value | --name value]...     (`lode bench --help`)
 *
 *   # 1 MiB sequential reads over shared memory, 4 in flight
 *   lode bench --transport shm --rw read --bs 1m --iodepth 4
 *   # 4 KiB random reads over TCP, 32 in flight, 4 threads
 *   lode bench --addr 10.0.0.5:7420 --transport tcp --rw randread --bs 4k \
 *       --iodepth 32 --numjobs 4 --runtime 30
 *
 * How a run goes. The main thread connects once (the control connection;
 * with --api posix only to ask for the targets' CPU time, and a failure is
 * no error), creates the container if it is missing (and then destroys it
 * at the end; not with --api posix),
 * and measures the ceilings: single-thread memcpy in bs pieces, and loopback
 * TCP between two threads (a stream for bs >= 64k, bs-byte round trips for
 * smaller bs, with as many in flight as the run keeps). Only then do --numjobs threads start, each with its
 * own connection and event queue, since one connection serialises the
 * threads that share it. A job that will read first writes its whole region
 * once, unmeasured (--prefill). When every job is ready they start together;
 * after --ramp seconds the measured interval begins, and client CPU
 * (getrusage) and server CPU (the targets' cpu_ns from lode_status) are
 * sampled at both of its ends.
 *
 * Each job owns a region of --size bytes cut into bs-byte blocks, in an
 * object of its own (the same oid from run to run, so a read test with
 * --prefill 0 finds what an earlier write test left). With --api obj, block
 * i is dkey i (8 bytes, big-endian so that dkeys sort in block order)
 * holding a byte array under akey "d" at offset 0: blocks spread over the
 * targets by their dkeys. With --api array the region is one byte-array
 * object, chunked over dkeys by the library. With --api fs the region is a
 * file, /lode-bench/job-N, in the container mounted through liblodefs;
 * liblodefs calls block, so there each job keeps one I/O in flight and
 * concurrency comes from --numjobs (the instance gives each job's thread a
 * connection of its own), as with fio's psync engine. With --api posix the
 * region is DIR/job-N, opened O_DIRECT (--direct 0: not), read and written
 * with pread and pwrite: the same loop on any file system, so that a Lode
 * mount under LD_PRELOAD=liblode-preload.so and --api fs compare the
 * preload library with liblodefs under one driver (fio's own cost per I/O
 * is not in it).
 * No container is used then; a Lode system, if one answers, is asked for
 * its targets' CPU time only.
 *
 * A job keeps iodepth requests in flight and resubmits a slot as soon as
 * lode_eq_poll reports it. An I/O counts when it was submitted inside the
 * measured interval; at its end the jobs stop submitting and drain, and the
 * interval ends when the last job has drained. Latency runs from just
 * before the call to the return of the lode_eq_poll that reported it, and is
 * kept in a log-linear histogram per job and direction, merged at the end.
 *
 * With --progress (the default when stderr is a terminal) the main thread
 * says on stderr when the jobs start, and every second how many I/Os the
 * test phase has completed so far.
 *
 * Exit status: 0; 1 on an I/O error (the first one is printed), a verify
 * mismatch, or a failure to connect or set up; 2 on a bad argument; 130 when
 * interrupted (what was measured is still reported).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "common/json.h"
#include "lode/lode.h"
#include "lode/lodefs.h"
#include "cli/bench.h"
#include "client/client.h"
#include "client/cont_props.h"

#define KIB ((uint64_t)1024)
#define MIB (1024 * KIB)
#define GIB (1024 * MIB)
#define NS_PER_S 1000000000ull

#define BS_MAX LODE_IO_MAX        /* one I/O is one call, and no call moves more */
#define IODEPTH_MAX 1024u
#define NUMJOBS_MAX 64u
#define RUNTIME_MAX 86400.0
#define POLL_US 100000            /* a job with nothing completing wakes this often */
#define OID_TAG UINT64_C(0x62656e6368) /* "bench" in the oid's user bits */
#define AKEY "d"

#define MEMCPY_REGION (256 * MIB)
#define MEMCPY_OPS_MAX (4u << 20)   /* pieces per pass, so a tiny bs still ends soon */
#define MEMCPY_PASSES 3
#define TCP_SECONDS 1.0
#define TCP_STREAM_MIN_BS (64 * KIB) /* below this, round trips are the ceiling */

static const char *const g_prog = "lode bench";

/* ---- options ----------------------------------------------------------- */

enum bench_rw { RW_READ, RW_WRITE, RW_RANDREAD, RW_RANDWRITE, RW_MIXED };
static const char *const rw_name[] = {"read", "write", "randread", "randwrite", "mixed"};

enum bench_api { API_OBJ, API_ARRAY, API_FS, API_POSIX };
static const char *const api_name[] = {"obj", "array", "fs", "posix"};
#define FS_DIR "/lode-bench"

struct bench_opts {
	const char *addr;      /* NULL: lode_connect finds the local system */
	const char *transport; /* NULL: $LODE_TRANSPORT, else auto */
	enum bench_rw rw;
	unsigned rwmixread;    /* percent of reads with --rw mixed */
	uint32_t bs;
	unsigned iodepth;
	unsigned numjobs;
	uint64_t size;         /* bytes per job */
	double runtime;        /* 0: one pass's worth of I/Os */
	double ramp;
	const char *cont;
	enum bench_api api;
	const char *dir;       /* --api posix: where the jobs' files are */
	bool direct;           /* --api posix: O_DIRECT */
	bool registered;
	bool prefill;
	bool verify;
	bool json;
	bool ceiling;
	int progress;          /* 1: lines on stderr as the run goes; -1: when stderr is a tty */
	bool encrypt;          /* the container encrypts in the client (AES-256-GCM) */
	uint32_t crypt_block;  /* encrypt: bytes per sealed block; 0: the service's default */
};

static const struct bench_opts opts_default = {
	.rw = RW_READ,
	.rwmixread = 70,
	.bs = 4 * KIB,
	.iodepth = 1,
	.numjobs = 1,
	.size = 64 * MIB,
	.runtime = 10,
	.ramp = 0,
	.cont = "bench",
	.api = API_OBJ,
	.direct = true,
	.registered = true,
	.prefill = true,
	.verify = false,
	.json = false,
	.ceiling = true,
	.progress = -1,
};

static bool rw_reads(enum bench_rw rw)
{
	return rw == RW_READ || rw == RW_RANDREAD || rw == RW_MIXED;
}

/* ---- time and numbers -------------------------------------------------- */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

static uint64_t cpu_self_ns(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * NS_PER_S +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000;
}

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Uniform in [0, n) without a division (Lemire's multiply-shift). */
static uint64_t rand_below(uint64_t *s, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)splitmix64(s) * n) >> 64);
}

static double safe_div(double a, double b)
{
	return b > 0 ? a / b : 0;
}

/* "4k", "1m", "64m", or bytes when no suffix divides it. */
static const char *fmt_size(char *b, size_t n, uint64_t v)
{
	if (v && v % GIB == 0)
		snprintf(b, n, "%" PRIu64 "g", v / GIB);
	else if (v && v % MIB == 0)
		snprintf(b, n, "%" PRIu64 "m", v / MIB);
	else if (v && v % KIB == 0)
		snprintf(b, n, "%" PRIu64 "k", v / KIB);
	else
		snprintf(b, n, "%" PRIu64, v);
	return b;
}

/* ---- latency histogram ------------------------------------------------- */

/*
 * Log-linear: values below 128 ns have a bucket each; above, every power of
 * two is cut into 64 equal buckets, so a percentile is within 1/64 (1.6 %)
 * of the truth for 30 KiB per histogram, whatever the run's length.
 */
#define HIST_SUB_BITS 6
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_BUCKETS ((64 - HIST_SUB_BITS + 1) * HIST_SUB)

struct hist {
	uint64_t n;
	uint64_t sum_ns;
	uint64_t min_ns;
	uint64_t max_ns;
	uint64_t b[HIST_BUCKETS];
};

static unsigned hist_bucket(uint64_t v)
{
	unsigned msb;

	if (v < 2 * HIST_SUB)
		return (unsigned)v;
	msb = 63u - (unsigned)__builtin_clzll(v);
	return (msb - HIST_SUB_BITS + 1) * HIST_SUB +
	       (unsigned)((v >> (msb - HIST_SUB_BITS)) - HIST_SUB);
}

/* The middle of bucket i's range. */
static uint64_t hist_value(unsigned i)
{
	unsigned shift;

	if (i < 2 * HIST_SUB)
		return i;
	shift = i / HIST_SUB - 1;
	return ((uint64_t)(HIST_SUB + i % HIST_SUB) << shift) + ((uint64_t)1 << shift) / 2;
}

static void hist_add(struct hist *h, uint64_t ns)
{
	if (h->n == 0 || ns < h->min_ns)
		h->min_ns = ns;
	if (ns > h->max_ns)
		h->max_ns = ns;
	h->n++;
	h->sum_ns += ns;
	h->b[hist_bucket(ns)]++;
}

static void hist_merge(struct hist *into, const struct hist *h)
{
	unsigned i;

	if (h->n == 0)
		return;
	if (into->n == 0 || h->min_ns < into->min_ns)
		into->min_ns = h->min_ns;
	if (h->max_ns > into->max_ns)
		into->max_ns = h->max_ns;
	into->n += h->n;
	into->sum_ns += h->sum_ns;
	for (i = 0; i < HIST_BUCKETS; i++)
		into->b[i] += h->b[i];
}

/* The p-quantile (0 < p <= 1) in µs; 0 for an empty histogram. */
static double hist_pct_us(const struct hist *h, double p)
{
	uint64_t rank, seen = 0, v;
	unsigned i;

	if (h->n == 0)
		return 0;
	rank = (uint64_t)(p * (double)h->n + 0.999999);
	if (rank < 1)
		rank = 1;
	for (i = 0; i < HIST_BUCKETS; i++) {
		seen += h->b[i];
		if (seen >= rank)
			break;
	}
	v = hist_value(i < HIST_BUCKETS ? i : HIST_BUCKETS - 1);
	if (v < h->min_ns)
		v = h->min_ns;
	if (v > h->max_ns)
		v = h->max_ns;
	return (double)v / 1e3;
}

static double hist_mean_us(const struct hist *h)
{
	return h->n ? (double)h->sum_ns / (double)h->n / 1e3 : 0;
}

/* ---- data pattern ------------------------------------------------------ */

/*
 * What --verify writes into block `block` of job `job`: a pseudo-random
 * stream seeded by both, so that a block read from the wrong place, the
 * wrong job's object, or not at all (the buffer is poisoned before each
 * read) fails the check.
 */
static uint64_t pattern_seed(unsigned job, uint64_t block)
{
	return (block << 8 | job) ^ UINT64_C(0x4c6f646542656e63);
}

static void pattern_fill(uint8_t *buf, uint32_t len, unsigned job, uint64_t block)
{
	uint64_t s = pattern_seed(job, block), w;
	uint32_t i;

	for (i = 0; i + 8 <= len; i += 8) {
		w = splitmix64(&s);
		memcpy(buf + i, &w, 8);
	}
	if (i < len) {
		w = splitmix64(&s);
		memcpy(buf + i, &w, len - i);
	}
}

/* The offset of the first wrong byte, or -1 when buf holds the pattern. */
static int64_t pattern_check(const uint8_t *buf, uint32_t len, unsigned job, uint64_t block)
{
	uint64_t s = pattern_seed(job, block), w;
	uint32_t i, k, n;

	for (i = 0; i < len; i += 8) {
		w = splitmix64(&s);
		n = len - i < 8 ? len - i : 8;
		if (memcmp(buf + i, &w, n) == 0)
			continue;
		for (k = 0; k < n && buf[i + k] == ((const uint8_t *)&w)[k]; k++)
			;
		return (int64_t)i + k;
	}
	return -1;
}

/* ---- shared state and the first error ---------------------------------- */

/*
 * A phase is one loop of a job over its region: the unmeasured prefill, or
 * the test itself (ramp included).
 */
struct phase {
	const char *name;
	bool rand;
	unsigned readpct;    /* chance in percent that an I/O reads */
	bool timed;
	uint64_t count;      /* I/Os to issue when not timed */
	uint64_t measure_ns; /* I/Os submitted from here on count */
	uint64_t end_ns;     /* nothing is submitted from here on, when timed */
	bool record;
};

static struct {
	struct bench_opts o;
	struct phase run;        /* written by the main thread before it opens the gate */
	atomic_int abort;        /* an error happened: every job stops submitting */
	atomic_int mismatch_told;
	pthread_mutex_t err_lock;
	int err_rc;
	char err_msg[256];
	lodefs_t *fs;            /* --api fs: the mounted container */
	/* The gate the jobs wait at, ready, until the main thread says go. */
	pthread_mutex_t gate_lock;
	pthread_cond_t gate_cond;
	unsigned gate_ready;
	bool gate_go;
	atomic_uint finished;    /* jobs that returned */
} g;

static volatile sig_atomic_t g_interrupted;

static void on_signal(int sig)
{
	g_interrupted = 1;
}

static bool stopping(void)
{
	return g_interrupted || atomic_load_explicit(&g.abort, memory_order_relaxed);
}

/*
 * Record a failure: the first one is what the run reports; every one stops
 * the jobs. Returns rc, so that callers can `return bench_fail(rc, ...)`.
 */
static int bench_fail(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int bench_fail(int rc, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&g.err_lock);
	if (g.err_rc == 0) {
		g.err_rc = rc;
		va_start(ap, fmt);
		vsnprintf(g.err_msg, sizeof(g.err_msg), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&g.err_lock);
	atomic_store(&g.abort, 1);
	return rc;
}

/* ---- jobs -------------------------------------------------------------- */

enum dir { DIR_READ, DIR_WRITE };

struct job;

/* One request in flight: its event, its buffer and its key stay put until it completes. */
struct slot {
	lode_event_t ev;
	struct job *job;
	uint8_t *buf;
	uint64_t block;
	uint64_t t_submit;
	enum dir dir;
	uint8_t dkey[8];
	struct lode_key key;
};

struct job_stats {
	struct hist hist[2]; /* by enum dir */
	uint64_t errors;
	uint64_t mismatches;
};

struct job {
	unsigned id;
	pthread_t thread;
	bool started;
	lode_conn_t *conn;
	lode_cont_t *cont;
	lode_eq_t *eq;
	lodefs_file_t *file;    /* --api fs */
	int fd;                 /* --api posix; -1: none */
	struct lode_conn_info info;
	uint8_t *bufs;          /* iodepth slices of bs bytes */
	struct slot *slots;
	lode_event_t **evs;
	struct lode_oid oid;
	uint64_t nblocks;
	uint64_t rng;
	uint64_t next_block;
	uint64_t issued;
	unsigned inflight;
	uint64_t t_done;        /* when the test phase drained; 0 if it never ran */
	atomic_uint_fast64_t done; /* test-phase I/Os completed, for --progress */
	struct job_stats st;
};

static const char *op_name(enum dir d)
{
	if (g.o.api == API_OBJ)
		return d == DIR_READ ? "lode_obj_read" : "lode_obj_write";
	if (g.o.api == API_FS)
		return d == DIR_READ ? "lodefs_file_read" : "lodefs_file_write";
	if (g.o.api == API_POSIX)
		return d == DIR_READ ? "pread" : "pwrite";
	return d == DIR_READ ? "lode_array_read" : "lode_array_write";
}

/* --api fs and posix: the job's file, one slot, and a plain buffer. */
static int job_setup_fs(struct job *j)
{
	const struct bench_opts *o = &g.o;
	char path[PATH_MAX];
	void *p;
	int rc;

	if (o->api == API_POSIX) {
		/* O_DIRECT, as fio's --direct=1: the file system under test
		 * serves every I/O, not the page cache. */
		snprintf(path, sizeof(path), "%s/job-%u", o->dir, j->id);
		if ((j->fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC | (o->direct ? O_DIRECT : 0),
				  0644)) < 0)
			return bench_fail(-errno, "job %u: open %s%s", j->id, path,
					  o->direct ? " (O_DIRECT)" : "");
	} else {
		snprintf(path, sizeof(path), FS_DIR "/job-%u", j->id);
		rc = lodefs_path_open(g.fs, NULL, path, O_CREAT | O_RDWR, 0644, &j->file);
		if (rc < 0)
			return bench_fail(rc, "job %u: lodefs_path_open %s", j->id, path);
	}
	rc = posix_memalign(&p, 4096, o->bs);
	if (rc)
		return bench_fail(-rc, "job %u: malloc of %u bytes", j->id, o->bs);
	j->bufs = p;
	pattern_fill(j->bufs, o->bs, j->id, j->id);
	if (!(j->slots = calloc(1, sizeof(*j->slots))))
		return bench_fail(-ENOMEM, "job %u: out of memory", j->id);
	j->slots[0].job = j;
	j->slots[0].buf = j->bufs;
	j->nblocks = o->size / o->bs;
	j->rng = now_ns() ^ ((uint64_t)j->id << 32);
	return 0;
}

static int job_setup(struct job *j)
{
	const struct bench_opts *o = &g.o;
	struct lode_conn_opts copts = {.transport = o->transport};
	size_t len = (size_t)o->iodepth * o->bs;
	uint64_t s;
	unsigned i;
	int rc;

	if (o->api == API_FS || o->api == API_POSIX)
		return job_setup_fs(j);
	rc = lode_connect(o->addr, &copts, &j->conn);
	if (rc < 0)
		return bench_fail(rc, "job %u: lode_connect", j->id);
	rc = lode_conn_query(j->conn, &j->info);
	if (rc < 0)
		return bench_fail(rc, "job %u: lode_conn_query", j->id);
	rc = lode_cont_open(j->conn, o->cont, &j->cont);
	if (rc < 0)
		return bench_fail(rc, "job %u: lode_cont_open \"%s\"", j->id, o->cont);
	rc = lode_eq_create(&j->eq);
	if (rc < 0)
		return bench_fail(rc, "job %u: lode_eq_create", j->id);
	if (o->registered) {
		j->bufs = lode_buf_alloc(j->conn, len);
		if (!j->bufs)
			return bench_fail(-ENOMEM, "job %u: lode_buf_alloc of %zu bytes", j->id, len);
	} else {
		void *p;

		rc = posix_memalign(&p, 4096, len);
		if (rc)
			return bench_fail(-rc, "job %u: malloc of %zu bytes", j->id, len);
		j->bufs = p;
	}
	/* Touched now, so that page faults stay out of the measurement. */
	s = j->id;
	for (i = 0; i < o->iodepth; i++)
		pattern_fill(j->bufs + (size_t)i * o->bs, o->bs, j->id, splitmix64(&s));
	j->slots = calloc(o->iodepth, sizeof(*j->slots));
	j->evs = calloc(o->iodepth, sizeof(*j->evs));
	if (!j->slots || !j->evs)
		return bench_fail(-ENOMEM, "job %u: out of memory", j->id);
	for (i = 0; i < o->iodepth; i++) {
		struct slot *sl = &j->slots[i];

		sl->job = j;
		sl->buf = j->bufs + (size_t)i * o->bs;
		sl->key.dkey = sl->dkey;
		sl->key.dkey_len = sizeof(sl->dkey);
		sl->key.akey = AKEY;
		sl->key.akey_len = sizeof(AKEY) - 1;
	}
	j->oid = lode_oid_make(o->api == API_OBJ ? LODE_OT_KV : LODE_OT_ARRAY, 0, OID_TAG, j->id);
	j->nblocks = o->size / o->bs;
	j->rng = now_ns() ^ ((uint64_t)j->id << 32);
	return 0;
}

/* Resources of a job whose requests are all complete go back; others stay. */
static void job_teardown(struct job *j)
{
	/* A job left with requests in flight (lode_eq_poll failed) keeps its
	 * buffers and events: they are the library's until completion. */
	if (j->inflight)
		return;
	if (j->file)
		lodefs_file_close(j->file);
	if (j->fd >= 0)
		close(j->fd);
	if (j->bufs) {
		if (g.o.registered && g.o.api != API_FS && g.o.api != API_POSIX)
			lode_buf_free(j->conn, j->bufs);
		else
			free(j->bufs);
	}
	if (j->cont)
		lode_cont_close(j->cont);
	if (j->conn)
		lode_disconnect(j->conn);
	if (j->eq)
		lode_eq_destroy(j->eq);
	free(j->slots);
	free(j->evs);
}

/* Pick the slot's next block and direction, and fill or poison its buffer. */
static void slot_choose(struct job *j, struct slot *s, const struct phase *ph)
{
	const struct bench_opts *o = &g.o;

	s->block = ph->rand ? rand_below(&j->rng, j->nblocks) : j->next_block++ % j->nblocks;
	if (ph->readpct >= 100)
		s->dir = DIR_READ;
	else if (ph->readpct == 0)
		s->dir = DIR_WRITE;
	else
		s->dir = rand_below(&j->rng, 100) < ph->readpct ? DIR_READ : DIR_WRITE;
	if (o->verify) {
		if (s->dir == DIR_WRITE)
			pattern_fill(s->buf, o->bs, j->id, s->block);
		else
			memset(s->buf, 0xa5, o->bs);
	}
}

static int slot_submit(struct job *j, struct slot *s, const struct phase *ph)
{
	const struct bench_opts *o = &g.o;
	uint64_t off;
	unsigned k;
	int rc;

	slot_choose(j, s, ph);
	rc = lode_event_init(&s->ev, j->eq);
	if (rc < 0)
		return bench_fail(rc, "job %u: lode_event_init", j->id);
	s->ev.user = s;
	off = s->block * o->bs;
	s->t_submit = now_ns();
	if (o->api == API_OBJ) {
		for (k = 0; k < 8; k++)
			s->dkey[k] = (uint8_t)(s->block >> (56 - 8 * k));
		if (s->dir == DIR_READ)
			rc = lode_obj_read(j->cont, j->oid, LODE_EPOCH_MAX, &s->key, 0, s->buf, o->bs,
					   &s->ev);
		else
			rc = lode_obj_write(j->cont, j->oid, &s->key, 0, s->buf, o->bs, &s->ev);
	} else {
		if (s->dir == DIR_READ)
			rc = lode_array_read(j->cont, j->oid, 0, LODE_EPOCH_MAX, off, s->buf, o->bs,
					     &s->ev);
		else
			rc = lode_array_write(j->cont, j->oid, 0, off, s->buf, o->bs, &s->ev);
	}
	if (rc < 0)
		return bench_fail(rc, "job %u: %s of block %" PRIu64 " (%s)", j->id,
				  op_name(s->dir), s->block, ph->name);
	j->issued++;
	j->inflight++;
	return 0;
}

static void slot_complete(struct job *j, struct slot *s, const struct phase *ph, uint64_t now)
{
	int64_t bad;

	j->inflight--;
	if (s->ev.rc < 0) {
		j->st.errors++;
		bench_fail(s->ev.rc, "job %u: %s of block %" PRIu64 " (%s)", j->id,
			   op_name(s->dir), s->block, ph->name);
		return;
	}
	if (g.o.verify && s->dir == DIR_READ) {
		bad = pattern_check(s->buf, g.o.bs, j->id, s->block);
		if (bad >= 0) {
			j->st.mismatches++;
			if (!atomic_exchange(&g.mismatch_told, 1))
				fprintf(stderr, "%s: job %u: block %" PRIu64 " differs from what "
					"was written at byte %" PRId64 " (first mismatch)\n",
					g_prog, j->id, s->block, bad);
		}
	}
	if (ph->record)
		atomic_fetch_add_explicit(&j->done, 1, memory_order_relaxed);
	if (ph->record && s->t_submit >= ph->measure_ns)
		hist_add(&j->st.hist[s->dir], now - s->t_submit);
}

static bool job_more(const struct job *j, const struct phase *ph, uint64_t now)
{
	if (stopping())
		return false;
	return ph->timed ? now < ph->end_ns : j->issued < ph->count;
}

/*
 * Keep iodepth requests in flight until the phase ends, then drain. Returns
 * early, with requests still in flight, only if lode_eq_poll itself fails.
 */
/* One blocking read or write of s's block: bytes moved, or -errno. */
static ssize_t fs_io(struct job *j, struct slot *s)
{
	uint64_t off = s->block * g.o.bs;
	ssize_t n;

	if (g.o.api == API_FS)
		return s->dir == DIR_READ ? lodefs_file_read(j->file, s->buf, g.o.bs, off)
					  : lodefs_file_write(j->file, s->buf, g.o.bs, off, NULL);
	n = s->dir == DIR_READ ? pread(j->fd, s->buf, g.o.bs, (off_t)off)
			       : pwrite(j->fd, s->buf, g.o.bs, (off_t)off);
	return n < 0 ? -errno : n;
}

/* --api fs and posix: one blocking call after another, each timed like a completion. */
static void job_phase_fs(struct job *j, const struct phase *ph)
{
	struct slot *s = &j->slots[0];
	uint64_t now = now_ns();
	ssize_t n;

	j->issued = 0;
	j->next_block = 0;
	while (job_more(j, ph, now)) {
		slot_choose(j, s, ph);
		s->t_submit = now_ns();
		n = fs_io(j, s);
		now = now_ns();
		if (n >= 0 && n < (ssize_t)g.o.bs && s->dir == DIR_READ) {
			/* Not an I/O error: the file is shorter than the job's region. */
			bench_fail(-ENODATA,
				   "job %u: %s of block %" PRIu64 " (%s) got %zd of %u bytes: the file "
				   "ends before --size (a write run cut short by --runtime? --prefill 1 "
				   "writes it in full)",
				   j->id, op_name(s->dir), s->block, ph->name, n, g.o.bs);
			break;
		}
		s->ev.rc = n < 0 ? (int)n : n != (ssize_t)g.o.bs ? -EIO : 0;
		j->issued++;
		j->inflight++;
		slot_complete(j, s, ph, now);
		if (s->ev.rc < 0)
			break;
	}
	j->t_done = now_ns();
}

static void job_phase(struct job *j, const struct phase *ph)
{
	unsigned depth = g.o.iodepth, i;
	uint64_t now = now_ns();
	int n, k;

	if (g.o.api == API_FS || g.o.api == API_POSIX) {
		job_phase_fs(j, ph);
		return;
	}
	j->issued = 0;
	j->next_block = 0;
	for (i = 0; i < depth && job_more(j, ph, now); i++)
		if (slot_submit(j, &j->slots[i], ph) < 0)
			break;
	while (j->inflight) {
		n = lode_eq_poll(j->eq, 1, depth, POLL_US, j->evs);
		if (n < 0) {
			bench_fail(n, "job %u: lode_eq_poll (%s)", j->id, ph->name);
			return;
		}
		now = now_ns();
		for (k = 0; k < n; k++) {
			struct slot *s = j->evs[k]->user;

			slot_complete(j, s, ph, now);
			if (job_more(j, ph, now))
				slot_submit(j, s, ph);
		}
	}
	j->t_done = now_ns();
}

static void *job_main(void *arg)
{
	struct job *j = arg;
	struct phase prefill = {
		.name = "prefill",
		.readpct = 0,
		.count = 0,
	};

	if (job_setup(j) == 0 && g.o.prefill && rw_reads(g.o.rw) && !stopping()) {
		prefill.count = j->nblocks;
		job_phase(j, &prefill);
	}
	pthread_mutex_lock(&g.gate_lock);
	g.gate_ready++;
	pthread_cond_broadcast(&g.gate_cond);
	while (!g.gate_go)
		pthread_cond_wait(&g.gate_cond, &g.gate_lock);
	pthread_mutex_unlock(&g.gate_lock);
	if (!stopping() && !j->inflight)
		job_phase(j, &g.run);
	atomic_fetch_add(&g.finished, 1);
	return NULL;
}

/* ---- ceilings ---------------------------------------------------------- */

struct ceilings {
	bool have_memcpy;
	double memcpy_bps;
	bool have_tcp;
	bool tcp_stream;     /* stream bandwidth, else bs-byte round trips */
	double tcp_bps;
	double tcp_rt_s;     /* round trips per second */
	unsigned tcp_depth;  /* requests in flight for tcp_rt_s */
	bool have_aes;
	double aes_bps;      /* --encrypt: one core sealing 1 MiB buffers with AES-256-GCM */
};

/*
 * --encrypt: what one core seals with AES-256-GCM in 1 MiB buffers, for
 * about a second (the yardstick: encrypted 1 MiB I/O should reach
 * 80% of it, since a client encrypts or decrypts every byte it moves).
 */
static int ceiling_aes(double *bps)
{
	uint8_t key[AUTH_AEAD_KEY] = {1}, iv[AUTH_AEAD_IV] = {2}, tag[AUTH_AEAD_TAG];
	size_t n = MIB;
	uint8_t *in = malloc(n), *out = malloc(n);
	uint64_t t0, t, done = 0;
	int rc = 0;

	if (!in || !out) {
		free(in);
		free(out);
		return -ENOMEM;
	}
	memset(in, 0x5a, n);
	memset(out, 0, n);
	/* A warm-up pass, then ~1 s. */
	rc = auth_aead_seal(key, iv, NULL, 0, in, n, out, tag);
	t0 = now_ns();
	do {
		if (rc == 0)
			rc = auth_aead_seal(key, iv, NULL, 0, in, n, out, tag);
		done += n;
		t = now_ns();
	} while (rc == 0 && t - t0 < NS_PER_S);
	*bps = safe_div((double)done * 1e9, (double)(t - t0));
	free(in);
	free(out);
	return rc;
}

/*
 * One thread copying a region far larger than the caches in bs pieces,
 * best of MEMCPY_PASSES: what moving the bytes once costs, at best.
 */
static int ceiling_memcpy(uint32_t bs, double *bps)
{
	uint64_t nops = MEMCPY_REGION / bs, i, t0, dt;
	size_t region;
	uint8_t *src, *dst;
	double best = 0;
	unsigned pass;

	if (nops > MEMCPY_OPS_MAX)
		nops = MEMCPY_OPS_MAX;
	region = (size_t)nops * bs;
	src = malloc(region);
	dst = malloc(region);
	if (!src || !dst) {
		free(src);
		free(dst);
		return -ENOMEM;
	}
	memset(src, 0x5a, region);
	memset(dst, 0, region);
	for (pass = 0; pass < MEMCPY_PASSES && !g_interrupted; pass++) {
		t0 = now_ns();
		for (i = 0; i < nops; i++) {
			memcpy(dst + i * bs, src + i * bs, bs);
			/* The copies are never read: keep the compiler from dropping them. */
			__asm__ __volatile__("" : : "r"(dst) : "memory");
		}
		dt = now_ns() - t0;
		if (dt && (double)region * 1e9 / (double)dt > best)
			best = (double)region * 1e9 / (double)dt;
	}
	free(src);
	free(dst);
	*bps = best;
	return 0;
}

static int io_full(int fd, void *buf, size_t len, bool wr)
{
	uint8_t *p = buf;
	ssize_t n;

	while (len) {
		n = wr ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ECONNRESET;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* A connected loopback TCP pair, made in one thread through the backlog. */
static int tcp_pair(int *cfd, int *sfd, bool nodelay)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t alen = sizeof(a);
	int lfd, c = -1, s = -1, one = 1, rc = 0;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		return -errno;
	if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 1) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&a, &alen) < 0) {
		rc = -errno;
		goto out;
	}
	c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&a, alen) < 0) {
		rc = -errno;
		goto out;
	}
	s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (s < 0) {
		rc = -errno;
		goto out;
	}
	if (nodelay) {
		setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
out:
	close(lfd);
	if (rc < 0) {
		if (c >= 0)
			close(c);
		return rc;
	}
	*cfd = c;
	*sfd = s;
	return 0;
}

struct tcp_peer {
	int fd;
	uint32_t bs;
	bool echo;           /* answer each bs-byte message, else only read */
	uint64_t bytes;
	uint64_t t_end;
};

static void *tcp_peer_main(void *arg)
{
	struct tcp_peer *p = arg;
	uint8_t *buf = malloc(p->bs);
	ssize_t n;

	if (!buf)
		goto out;
	if (p->echo) {
		while (io_full(p->fd, buf, p->bs, false) == 0 && io_full(p->fd, buf, p->bs, true) == 0)
			p->bytes += p->bs;
	} else {
		for (;;) {
			n = recv(p->fd, buf, p->bs, 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			p->bytes += (uint64_t)n;
		}
	}
out:
	p->t_end = now_ns();
	free(buf);
	close(p->fd);
	return NULL;
}

/*
 * How many bs-byte round trips the ceiling keeps in flight: as many as the
 * run (iodepth x numjobs), so that a result with 32 requests in flight is
 * not held against one that waits for each reply; at most 128, and at most
 * 1 MiB in flight, which the socket buffers set in ceiling_tcp hold.
 */
static unsigned ceiling_depth(uint32_t bs)
{
	uint64_t d = (uint64_t)g.o.iodepth * g.o.numjobs, cap = (1u << 20) / (bs ? bs : 1);

	if (d > 128)
		d = 128;
	if (d > cap)
		d = cap;
	return d ? (unsigned)d : 1;
}

/*
 * One TCP stream over 127.0.0.1 between two threads: for bs >= 64k the
 * bandwidth of bs-byte sends (timed until the reader has seen the last
 * byte); below, bs-byte requests each answered by bs bytes, with as many
 * in flight as the run keeps (ceiling_depth): the rate a host-mediated
 * request and reply can go at, with no storage behind it.
 */
static int ceiling_tcp(uint32_t bs, struct ceilings *c)
{
	struct tcp_peer peer = {.bs = bs};
	bool stream = bs >= TCP_STREAM_MIN_BS;
	unsigned depth = stream ? 1 : ceiling_depth(bs), sent = 0, got = 0, timed;
	uint64_t t0, t1, deadline;
	int cfd = -1, rc, sz = 4 << 20;
	pthread_t th;
	uint8_t *buf;

	buf = malloc(bs);
	if (!buf)
		return -ENOMEM;
	memset(buf, 0x5a, bs);
	rc = tcp_pair(&cfd, &peer.fd, !stream);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	/* Room for every request in flight each way, so neither side blocks the other. */
	setsockopt(cfd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	setsockopt(cfd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	setsockopt(peer.fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	setsockopt(peer.fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	peer.echo = !stream;
	rc = pthread_create(&th, NULL, tcp_peer_main, &peer);
	if (rc) {
		close(cfd);
		close(peer.fd);
		free(buf);
		return -rc;
	}
	t0 = now_ns();
	deadline = t0 + (uint64_t)(TCP_SECONDS * 1e9);
	while (rc == 0 && !g_interrupted && now_ns() < deadline) {
		if (stream) {
			rc = io_full(cfd, buf, bs, true);
			continue;
		}
		while (rc == 0 && sent - got < depth) {
			rc = io_full(cfd, buf, bs, true);
			sent++;
		}
		if (rc == 0 && (rc = io_full(cfd, buf, bs, false)) == 0)
			got++;
	}
	t1 = now_ns();
	timed = got;
	while (rc == 0 && got < sent && (rc = io_full(cfd, buf, bs, false)) == 0)
		got++; /* the replies still in flight, outside the timed part */
	shutdown(cfd, SHUT_WR);
	pthread_join(th, NULL);
	close(cfd);
	free(buf);
	if (rc < 0)
		return rc;
	c->tcp_stream = stream;
	if (stream) {
		c->tcp_bps = safe_div((double)peer.bytes * 1e9, (double)(peer.t_end - t0));
	} else {
		c->tcp_rt_s = safe_div((double)timed * 1e9, (double)(t1 - t0));
		c->tcp_depth = depth;
	}
	c->have_tcp = true;
	return 0;
}

static void ceilings_measure(struct ceilings *c)
{
	int rc;

	rc = ceiling_memcpy(g.o.bs, &c->memcpy_bps);
	if (rc < 0)
		fprintf(stderr, "%s: warning: memcpy ceiling not measured: %s\n", g_prog,
			lode_strerror(rc));
	else
		c->have_memcpy = true;
	rc = ceiling_tcp(g.o.bs, c);
	if (rc < 0)
		fprintf(stderr, "%s: warning: loopback TCP ceiling not measured: %s\n", g_prog,
			lode_strerror(rc));
	if (g.o.encrypt) {
		rc = ceiling_aes(&c->aes_bps);
		if (rc < 0)
			fprintf(stderr, "%s: warning: AES-GCM ceiling not measured: %s\n", g_prog,
				lode_strerror(rc));
		else
			c->have_aes = true;
	}
}

/* ---- the run ----------------------------------------------------------- */

/* Sum of the targets' CPU time; -1 (with a warning) when lode_status failed. */
static int64_t server_cpu_ns(lode_conn_t *conn, struct lode_target_status *st, unsigned max)
{
	uint64_t sum = 0;
	int n, i;

	if (max == 0)
		return -1;
	n = lode_status(conn, st, max);
	if (n < 0) {
		fprintf(stderr, "%s: warning: lode_status: %s; no server CPU time\n", g_prog,
			lode_strerror(n));
		return -1;
	}
	for (i = 0; i < n && i < (int)max; i++)
		sum += st[i].cpu_ns;
	return (int64_t)sum;
}

struct result {
	bool measured;           /* the test phase ran */
	double wall_s;
	struct hist dir[2];
	struct hist all;
	uint64_t errors;
	uint64_t mismatches;
	double client_cpu_s;
	bool have_server_cpu;
	double server_cpu_s;
	unsigned server_targets;
	struct lode_conn_info info;
	bool cont_created;
	uint32_t crypt_block; /* encrypt: the container's bytes per sealed block */
	struct ceilings ceil;
};

static double res_bps(const struct result *r, const struct hist *h)
{
	return safe_div((double)h->n * g.o.bs, r->wall_s);
}

static double res_iops(const struct result *r, const struct hist *h)
{
	return safe_div((double)h->n, r->wall_s);
}

/* result / ceiling, the number a reader should look at. */
static double res_ratio_memcpy(const struct result *r)
{
	return safe_div(res_bps(r, &r->all), r->ceil.memcpy_bps);
}

static double res_ratio_tcp(const struct result *r)
{
	if (r->ceil.tcp_stream)
		return safe_div(res_bps(r, &r->all), r->ceil.tcp_bps);
	return safe_div(res_iops(r, &r->all), r->ceil.tcp_rt_s);
}

static void text_lat(const char *label, const struct result *r, const struct hist *h)
{
	printf("  %-13s %.0f IOPS, %.2f MiB/s; latency µs mean %.1f, p50 %.1f, p99 %.1f, "
	       "p99.9 %.1f\n", label, res_iops(r, h), res_bps(r, h) / MIB, hist_mean_us(h),
	       hist_pct_us(h, 0.5), hist_pct_us(h, 0.99), hist_pct_us(h, 0.999));
}

static void print_text(const struct result *r)
{
	const struct bench_opts *o = &g.o;
	const struct hist *h = &r->all;
	char b1[32], b2[32];

	printf("lode bench: %s", rw_name[o->rw]);
	if (o->rw == RW_MIXED)
		printf(" (%u%% reads)", o->rwmixread);
	printf(", bs %s, iodepth %u, %u job%s x %s, api %s, ", fmt_size(b1, sizeof(b1), o->bs),
	       o->iodepth, o->numjobs, o->numjobs > 1 ? "s" : "",
	       fmt_size(b2, sizeof(b2), o->size / o->bs * o->bs), api_name[o->api]);
	if (o->api == API_POSIX)
		printf("files in %s\n", o->dir);
	else
		printf("%s buffers, container \"%s\"%s\n", o->registered ? "registered" : "malloc'd",
		       o->cont, r->cont_created ? " (created for this run)" : "");
	if (!r->info.transport[0])
		printf("connection: none (no Lode system was reached)\n");
	else
		printf("connection: %s, bulk %s, %u target%s, server %s\n", r->info.transport,
		       r->info.bulk, r->info.ntargets, r->info.ntargets == 1 ? "" : "s",
		       r->info.server);
	if (r->measured) {
		printf("measured %.2f s", r->wall_s);
		if (o->ramp > 0)
			printf(" after %.2f s of ramp", o->ramp);
		printf("\n");
		printf("  %-13s %.2f MiB/s, %.3f GiB/s\n", "bandwidth", res_bps(r, h) / MIB,
		       res_bps(r, h) / GIB);
		printf("  %-13s %.0f\n", "IOPS", res_iops(r, h));
		/* "µ" is two bytes: a field width would misalign it. */
		printf("  latency µs    mean %.1f, p50 %.1f, p99 %.1f, p99.9 %.1f (min %.1f, "
		       "max %.1f)\n", hist_mean_us(h), hist_pct_us(h, 0.5), hist_pct_us(h, 0.99),
		       hist_pct_us(h, 0.999), (double)h->min_ns / 1e3, (double)h->max_ns / 1e3);
		printf("  %-13s %" PRIu64 " (%" PRIu64 " reads, %" PRIu64 " writes), %.2f MiB\n",
		       "I/Os", h->n, r->dir[DIR_READ].n, r->dir[DIR_WRITE].n,
		       (double)h->n * o->bs / MIB);
		if (o->rw == RW_MIXED) {
			text_lat("reads", r, &r->dir[DIR_READ]);
			text_lat("writes", r, &r->dir[DIR_WRITE]);
		}
		printf("  %-13s %.2f s, %.1f%% of wall time\n", "client CPU", r->client_cpu_s,
		       safe_div(100 * r->client_cpu_s, r->wall_s));
		if (r->have_server_cpu)
			printf("  %-13s %.2f s, %.1f%% of wall time, over %u target%s\n",
			       "server CPU", r->server_cpu_s,
			       safe_div(100 * r->server_cpu_s, r->wall_s), r->server_targets,
			       r->server_targets == 1 ? "" : "s");
		else
			printf("  %-13s n/a\n", "server CPU");
	}
	printf("  %-13s %" PRIu64 "\n", "errors", r->errors);
	if (o->verify)
		printf("  %-13s %" PRIu64 " mismatches\n", "verify", r->mismatches);
	if (!o->ceiling || !r->measured)
		return;
	printf("ceilings, measured in this run before the test (ratio = result / ceiling):\n");
	if (r->ceil.have_memcpy)
		printf("  memcpy, 1 thread, %s pieces:      %10.2f MiB/s   ratio %.3f\n",
		       fmt_size(b1, sizeof(b1), o->bs), r->ceil.memcpy_bps / MIB,
		       res_ratio_memcpy(r));
	if (r->ceil.have_tcp && r->ceil.tcp_stream)
		printf("  loopback tcp stream, %s sends:    %10.2f MiB/s   ratio %.3f\n",
		       fmt_size(b1, sizeof(b1), o->bs), r->ceil.tcp_bps / MIB, res_ratio_tcp(r));
	else if (r->ceil.have_tcp)
		printf("  tcp round trips/s, %s, depth %u: %9.0f         ratio %.3f (IOPS)\n",
		       fmt_size(b1, sizeof(b1), o->bs), r->ceil.tcp_depth, r->ceil.tcp_rt_s,
		       res_ratio_tcp(r));
	if (r->ceil.have_aes)
		printf("  AES-256-GCM seal, 1 core, 1 MiB: %10.2f MiB/s   ratio %.3f (target >= 0.8;"
		       " %s crypt blocks)\n",
		       r->ceil.aes_bps / MIB, safe_div(res_bps(r, &r->all), r->ceil.aes_bps),
		       fmt_size(b1, sizeof(b1), r->crypt_block));
}

static void json_str(const char *s)
{
	lode_json_str(stdout, s);
}

static void json_dir(const char *name, const struct result *r, const struct hist *h)
{
	printf("\"%s\":{\"ios\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"iops\":%.1f,"
	       "\"bw_mib_s\":%.3f,\"bw_gib_s\":%.5f,\"lat_mean_us\":%.2f,\"lat_p50_us\":%.2f,"
	       "\"lat_p99_us\":%.2f,\"lat_p99_9_us\":%.2f,\"lat_min_us\":%.2f,"
	       "\"lat_max_us\":%.2f}",
	       name, h->n, h->n * g.o.bs, res_iops(r, h), res_bps(r, h) / MIB,
	       res_bps(r, h) / GIB, hist_mean_us(h), hist_pct_us(h, 0.5), hist_pct_us(h, 0.99),
	       hist_pct_us(h, 0.999), (double)h->min_ns / 1e3, (double)h->max_ns / 1e3);
}

static void print_json(const struct result *r, bool interrupted)
{
	const struct bench_opts *o = &g.o;
	char err[sizeof(g.err_msg) + 64];

	snprintf(err, sizeof(err), "%s: %s", g.err_msg, lode_strerror(g.err_rc));
	printf("{\"ok\":%s,\"error\":", g.err_rc == 0 && r->mismatches == 0 ? "true" : "false");
	json_str(g.err_rc ? err : NULL);
	printf(",\"error_code\":%d", g.err_rc);
	printf(",\"interrupted\":%s,\"config\":{\"addr\":", interrupted ? "true" : "false");
	json_str(o->addr);
	printf(",\"transport\":");
	json_str(o->transport);
	printf(",\"rw\":\"%s\",\"rwmixread\":%u,\"bs\":%" PRIu32 ",\"iodepth\":%u,\"numjobs\":%u,"
	       "\"size_per_job\":%" PRIu64 ",\"runtime_s\":%g,\"ramp_s\":%g,\"cont\":",
	       rw_name[o->rw], o->rwmixread, o->bs, o->iodepth, o->numjobs,
	       o->size / o->bs * o->bs, o->runtime, o->ramp);
	json_str(o->cont);
	printf(",\"dir\":");
	json_str(o->dir);
	printf(",\"direct\":%s", o->direct ? "true" : "false");
	printf(",\"cont_created\":%s,\"api\":\"%s\",\"registered\":%s,\"prefill\":%s,"
	       "\"verify\":%s,\"ceiling\":%s,\"encrypt\":%s,\"crypt_block\":%" PRIu32 "},",
	       r->cont_created ? "true" : "false", api_name[o->api],
	       o->registered ? "true" : "false", o->prefill ? "true" : "false",
	       o->verify ? "true" : "false", o->ceiling ? "true" : "false",
	       o->encrypt ? "true" : "false", r->crypt_block);
	printf("\"connection\":{\"transport\":");
	json_str(r->info.transport);
	printf(",\"bulk\":");
	json_str(r->info.bulk);
	printf(",\"targets\":%u,\"inline_max\":%" PRIu32 ",\"server\":", r->info.ntargets,
	       r->info.inline_max);
	json_str(r->info.server);
	printf("},\"measured\":%s,\"wall_s\":%.6f,", r->measured ? "true" : "false", r->wall_s);
	json_dir("result", r, &r->all);
	putchar(',');
	json_dir("read", r, &r->dir[DIR_READ]);
	putchar(',');
	json_dir("write", r, &r->dir[DIR_WRITE]);
	printf(",\"errors\":%" PRIu64 ",\"verify_mismatches\":%" PRIu64 ",", r->errors,
	       r->mismatches);
	printf("\"cpu\":{\"client_s\":%.4f,\"client_pct_of_wall\":%.2f,", r->client_cpu_s,
	       safe_div(100 * r->client_cpu_s, r->wall_s));
	if (r->have_server_cpu)
		printf("\"server_s\":%.4f,\"server_pct_of_wall\":%.2f,\"server_targets\":%u},",
		       r->server_cpu_s, safe_div(100 * r->server_cpu_s, r->wall_s),
		       r->server_targets);
	else
		printf("\"server_s\":null,\"server_pct_of_wall\":null,\"server_targets\":null},");
	printf("\"ceilings\":{\"memcpy\":");
	if (r->ceil.have_memcpy)
		printf("{\"bs\":%" PRIu32 ",\"bw_mib_s\":%.3f,\"bw_gib_s\":%.5f,\"ops_s\":%.1f,"
		       "\"ratio\":%.5f,\"ratio_of\":\"bw\",\"result_bw_mib_s\":%.3f}",
		       o->bs, r->ceil.memcpy_bps / MIB, r->ceil.memcpy_bps / GIB,
		       r->ceil.memcpy_bps / o->bs, res_ratio_memcpy(r), res_bps(r, &r->all) / MIB);
	else
		printf("null");
	printf(",\"tcp\":");
	if (r->ceil.have_tcp && r->ceil.tcp_stream)
		printf("{\"kind\":\"stream\",\"bs\":%" PRIu32 ",\"bw_mib_s\":%.3f,"
		       "\"bw_gib_s\":%.5f,\"ratio\":%.5f,\"ratio_of\":\"bw\","
		       "\"result_bw_mib_s\":%.3f}",
		       o->bs, r->ceil.tcp_bps / MIB, r->ceil.tcp_bps / GIB, res_ratio_tcp(r),
		       res_bps(r, &r->all) / MIB);
	else if (r->ceil.have_tcp)
		printf("{\"kind\":\"round_trip\",\"bs\":%" PRIu32 ",\"depth\":%u,"
		       "\"round_trips_s\":%.1f,\"ratio\":%.5f,\"ratio_of\":\"iops\","
		       "\"result_iops\":%.1f}",
		       o->bs, r->ceil.tcp_depth, r->ceil.tcp_rt_s, res_ratio_tcp(r),
		       res_iops(r, &r->all));
	else
		printf("null");
	printf(",\"aes_gcm\":");
	if (r->ceil.have_aes)
		printf("{\"buf\":1048576,\"bw_mib_s\":%.3f,\"ratio\":%.5f,\"ratio_of\":\"bw\","
		       "\"result_bw_mib_s\":%.3f}",
		       r->ceil.aes_bps / MIB, safe_div(res_bps(r, &r->all), r->ceil.aes_bps),
		       res_bps(r, &r->all) / MIB);
	else
		printf("null");
	printf("}}\n");
}

/* Until every job has returned: a line a second, the I/Os completed so far. */
static void bench_progress(struct job *jobs, unsigned started, uint64_t t_start)
{
	uint64_t next = t_start + NS_PER_S, now = now_ns(), total, last = 0;
	struct timespec ts;
	unsigned i;

	while (next <= now) /* after a ramp: from the next whole second on */
		next += NS_PER_S;
	while (atomic_load(&g.finished) < started) {
		now = now_ns();
		if (now >= next) {
			for (total = 0, i = 0; i < g.o.numjobs; i++)
				total += atomic_load_explicit(&jobs[i].done, memory_order_relaxed);
			fprintf(stderr, "%s: %" PRIu64 " s: %" PRIu64 " I/Os done, %" PRIu64
				" in the last second\n", g_prog, (uint64_t)((now - t_start) / NS_PER_S), total,
				total - last);
			last = total;
			next += NS_PER_S;
			continue;
		}
		/* Short steps, so that the end of the run is not kept waiting. */
		now += POLL_US * 1000ull;
		if (now > next)
			now = next;
		ts.tv_sec = (time_t)(now / NS_PER_S);
		ts.tv_nsec = (long)(now % NS_PER_S);
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
	}
}

/*
 * Start the jobs, let them set up and prefill, then open the gate and time
 * the test. Fills the measurement part of r.
 */
static void bench_run(lode_conn_t *ctl, struct job *jobs, struct result *r)
{
	const struct bench_opts *o = &g.o;
	unsigned i, started = 0, ntgt = r->info.ntargets;
	struct lode_target_status *st = calloc(ntgt ? ntgt : 1, sizeof(*st));
	int64_t srv0 = -1, srv1 = -1;
	uint64_t cpu0 = 0, t_start, t_end = 0;
	sigset_t all, old;
	struct timespec ts;

	/* Jobs, and any thread the library starts in them, leave the signals
	 * to the main thread, so that one interrupt stops the run cleanly. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	for (i = 0; i < o->numjobs; i++) {
		jobs[i].id = i;
		if (pthread_create(&jobs[i].thread, NULL, job_main, &jobs[i]) != 0) {
			bench_fail(-EAGAIN, "cannot start job %u", i);
			break;
		}
		jobs[i].started = true;
		started++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);

	pthread_mutex_lock(&g.gate_lock);
	while (g.gate_ready < started)
		pthread_cond_wait(&g.gate_cond, &g.gate_lock);
	pthread_mutex_unlock(&g.gate_lock);

	g.run = (struct phase){
		.name = "test",
		.rand = o->rw == RW_RANDREAD || o->rw == RW_RANDWRITE || o->rw == RW_MIXED,
		.readpct = o->rw == RW_MIXED ? o->rwmixread : rw_reads(o->rw) ? 100 : 0,
		.timed = o->runtime > 0,
		.record = true,
	};
	if (!stopping() && !st)
		bench_fail(-ENOMEM, "out of memory");
	if (!stopping() && o->ramp <= 0) {
		srv0 = server_cpu_ns(ctl, st, ntgt);
		cpu0 = cpu_self_ns();
	}
	t_start = now_ns();
	g.run.measure_ns = t_start + (uint64_t)(o->ramp * 1e9);
	g.run.end_ns = g.run.measure_ns + (uint64_t)(o->runtime * 1e9);
	g.run.count = o->size / o->bs;
	r->measured = !stopping();

	pthread_mutex_lock(&g.gate_lock);
	g.gate_go = true;
	pthread_cond_broadcast(&g.gate_cond);
	pthread_mutex_unlock(&g.gate_lock);
	if (o->progress && r->measured) {
		if (o->runtime > 0)
			fprintf(stderr, "%s: %u job%s running: %.3g s of ramp, then %.3g s measured\n",
				g_prog, started, started == 1 ? "" : "s", o->ramp, o->runtime);
		else
			fprintf(stderr, "%s: %u job%s running: %" PRIu64 " I/Os each\n", g_prog,
				started, started == 1 ? "" : "s", g.run.count);
	}

	if (r->measured && o->ramp > 0) {
		/* Sleep in steps so that an error or an interrupt is not kept waiting. */
		while (!stopping() && now_ns() < g.run.measure_ns) {
			uint64_t until = g.run.measure_ns, step = now_ns() + POLL_US * 1000ull;

			if (step < until)
				until = step;
			ts.tv_sec = (time_t)(until / NS_PER_S);
			ts.tv_nsec = (long)(until % NS_PER_S);
			clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
		}
		srv0 = server_cpu_ns(ctl, st, ntgt);
		cpu0 = cpu_self_ns();
	}

	if (o->progress && r->measured)
		bench_progress(jobs, started, t_start);
	for (i = 0; i < o->numjobs; i++) {
		if (!jobs[i].started)
			continue;
		pthread_join(jobs[i].thread, NULL);
		if (jobs[i].t_done > t_end)
			t_end = jobs[i].t_done;
	}
	if (r->measured) {
		r->client_cpu_s = (double)(cpu_self_ns() - cpu0) / 1e9;
		srv1 = srv0 >= 0 ? server_cpu_ns(ctl, st, ntgt) : -1;
		if (srv0 >= 0 && srv1 >= 0) {
			r->have_server_cpu = true;
			r->server_cpu_s = (double)(srv1 - srv0) / 1e9;
			r->server_targets = ntgt;
		}
		r->wall_s = t_end > g.run.measure_ns ?
				    (double)(t_end - g.run.measure_ns) / 1e9 : 0;
	}
	for (i = 0; i < o->numjobs; i++) {
		struct job *j = &jobs[i];

		hist_merge(&r->dir[DIR_READ], &j->st.hist[DIR_READ]);
		hist_merge(&r->dir[DIR_WRITE], &j->st.hist[DIR_WRITE]);
		r->errors += j->st.errors;
		r->mismatches += j->st.mismatches;
		if (j->started && j->conn && i > 0 && j->info.transport[0] &&
		    strcmp(j->info.transport, jobs[0].info.transport) != 0)
			fprintf(stderr, "%s: warning: job %u uses %s, job 0 %s\n", g_prog, i,
				j->info.transport, jobs[0].info.transport);
	}
	hist_merge(&r->all, &r->dir[DIR_READ]);
	hist_merge(&r->all, &r->dir[DIR_WRITE]);
	/* The jobs' transport is what the run used; the control connection's
	 * only stands in when no job got as far as connecting. */
	if (o->numjobs && jobs[0].info.transport[0])
		r->info = jobs[0].info;
	free(st);
}

/* ---- arguments --------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
"usage: lode bench [--name=value | --name value]...\n"
"\n"
"A fio-like load generator on the native client API. Each job is a thread with\n"
"its own connection and event queue that keeps --iodepth requests in flight on\n"
"its own region of --size bytes, cut into --bs blocks (with --api fs or posix,\n"
"one blocking call at a time on a file of its own). The report gives\n"
"bandwidth, IOPS, latency (mean, p50, p99, p99.9), client and server CPU time,\n"
"and, beside each result, the ceilings measured in the same run: single-thread\n"
"memcpy in bs pieces, and loopback TCP (a stream for bs >= 64k, bs-byte round\n"
"trips for smaller bs, as many in flight as the run keeps: iodepth x numjobs,\n"
"at most 128).\n"
"\n"
"options (default in brackets):\n"
"  --addr HOST:PORT     the loded to use [$LODE_ADDR, else the local system's]\n"
"  --transport T        auto, tcp, shm or rdma [$LODE_TRANSPORT, else auto]\n"
"  --rw MODE            read, write (sequential), randread, randwrite, or mixed\n"
"                       (random blocks, each read with --rwmixread %% chance) [read]\n"
"  --rwmixread PCT      reads among the I/Os of --rw mixed, 0..100 [70]\n"
"  --bs SIZE            bytes per I/O, 1..64m; suffixes k, m, g are powers of\n"
"                       1024 [4k]\n"
"  --iodepth N          requests in flight per job, 1..1024 [1]\n"
"  --numjobs N          jobs (threads, each with its own connection), 1..64 [1]\n"
"  --size SIZE          each job's region, at least --bs [64m]\n"
"  --runtime SECONDS    length of the measured interval; 0: one pass's worth of\n"
"                       I/Os (size / bs), each block once when sequential [10]\n"
"  --ramp SECONDS       I/O before the measured interval, not counted; needs a\n"
"                       --runtime above 0 [0]\n"
"  --cont LABEL         container; created if missing, and then destroyed at\n"
"                       the end [bench]\n"
"  --api API            obj: lode_obj_write/read, one dkey per block (its 8-byte\n"
"                       index), akey \"" AKEY "\", offset 0; array: lode_array_write/read\n"
"                       on one array object per job; fs: lodefs_file_write/read\n"
"                       on one file per job through liblodefs; posix: pread and\n"
"                       pwrite on one file per job in --dir, on any file system\n"
"                       that takes them (a Lode mount with or without the preload\n"
"                       library); --cont and --registered do not apply, and\n"
"                       --transport only to asking a Lode system for its CPU time\n"
"                       (fs and posix: --iodepth must be 1, use --numjobs) [obj]\n"
"  --dir DIR            --api posix: the directory of the jobs' files, job-N\n"
"  --direct 0|1         --api posix: open with O_DIRECT, so that the file system\n"
"                       serves every I/O, not the page cache (--bs then a\n"
"                       multiple of 512) [1]\n"
"  --registered 0|1     1: buffers from lode_buf_alloc; 0: malloc'd [1]\n"
"  --prefill 0|1        before a test that reads, write each job's region once,\n"
"                       unmeasured [1]\n"
"  --verify 0|1         write a pattern derived from the job and block, check it\n"
"                       on every read, fail if any block differs [0]\n"
"  --ceiling 0|1        measure and print the ceilings and ratios [1]\n"
"  --encrypt            use an encrypted container (AES-256-GCM in the client;\n"
"                       default name bench-enc; needs a tenant key, lode keygen)\n"
"                       and measure one core's AES-256-GCM on 1 MiB beside it\n"
"  --crypt-block SIZE   with --encrypt: bytes sealed together, a power of two\n"
"                       from 4k to 1m (default container name bench-enc-SIZE)\n"
"                       [the service's default, 4k]\n"
"  --json               print one JSON object instead of the text report\n"
"  --progress 0|1       on stderr: a line when the jobs start, then one a second\n"
"                       with the I/Os done [1 when stderr is a terminal]\n"
"  --help               this text\n"
"\n"
"examples:\n"
"  # 1 MiB sequential reads over shared memory from the local system\n"
"  lode bench --transport shm --rw read --bs 1m --iodepth 4\n"
"  # 4 KiB random reads over TCP, 32 in flight\n"
"  lode bench --addr 10.0.0.5:7420 --transport tcp --rw randread --bs 4k --iodepth 32\n"
"\n"
"exit status: 0; 1 on an I/O error, a verify mismatch or a failure to connect;\n"
"2 on a bad argument; 130 when interrupted.\n");
}

static int arg_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int arg_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", g_prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see lode bench --help)\n");
	return -EINVAL;
}

/* A count, or with suffix a size: k, m, g (powers of 1024), then "i", "B" or "iB". */
static int parse_u64(const char *opt, const char *s, bool suffix, uint64_t *out)
{
	unsigned long long v;
	uint64_t mul = 1;
	char *end;

	*out = 0;
	if (*s < '0' || *s > '9')
		return arg_error("%s: '%s' is not a number", opt, s);
	errno = 0;
	v = strtoull(s, &end, 10);
	if (suffix && *end) {
		switch (*end) {
		case 'k': case 'K': mul = KIB; break;
		case 'm': case 'M': mul = MIB; break;
		case 'g': case 'G': mul = GIB; break;
		default: return arg_error("%s: unknown suffix in '%s'", opt, s);
		}
		end++;
		if (*end == 'i')
			end++;
		if (*end == 'B')
			end++;
	}
	if (errno || *end || (v && mul > UINT64_MAX / v))
		return arg_error("%s: '%s' is not a valid %s", opt, s, suffix ? "size" : "number");
	*out = v * mul;
	return 0;
}

static int parse_range(const char *opt, const char *s, uint64_t lo, uint64_t hi, unsigned *out)
{
	uint64_t v;
	int rc = parse_u64(opt, s, false, &v);

	if (rc < 0)
		return rc;
	if (v < lo || v > hi)
		return arg_error("%s: %" PRIu64 " is not within %" PRIu64 "..%" PRIu64, opt, v, lo,
				 hi);
	*out = (unsigned)v;
	return 0;
}

static int parse_seconds(const char *opt, const char *s, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end != s && *end == 's')
		end++;
	if (errno || end == s || *end || !(v >= 0) || v > RUNTIME_MAX)
		return arg_error("%s: '%s' is not a number of seconds within 0..%.0f", opt, s,
				 RUNTIME_MAX);
	*out = v;
	return 0;
}

static int parse_bool(const char *opt, const char *s, bool *out)
{
	if (strcmp(s, "1") == 0 || strcmp(s, "true") == 0 || strcmp(s, "yes") == 0)
		*out = true;
	else if (strcmp(s, "0") == 0 || strcmp(s, "false") == 0 || strcmp(s, "no") == 0)
		*out = false;
	else
		return arg_error("%s: '%s' is not 0 or 1", opt, s);
	return 0;
}

static int parse_label(const char *s)
{
	size_t n = strlen(s), i;

	if (n < 1 || n > LODE_LABEL_MAX)
		return arg_error("--cont: a label has 1..%u bytes", LODE_LABEL_MAX);
	for (i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == '-' || s[i] == '_'))
			return arg_error("--cont: '%s' has a character other than letters, "
					 "digits, '.', '-' and '_'", s);
	return 0;
}

/* Returns 0, 1 when --help was printed, or -EINVAL (already told). */
static int parse_args(int argc, char **argv, struct bench_opts *o)
{
	enum {
		O_ADDR = 256, O_TRANSPORT, O_RW, O_MIX, O_BS, O_IODEPTH, O_NUMJOBS, O_SIZE,
		O_RUNTIME, O_RAMP, O_CONT, O_API, O_DIR, O_DIRECT_IO, O_REGISTERED, O_PREFILL, O_VERIFY, O_JSON,
		O_CEILING, O_PROGRESS, O_ENCRYPT, O_CRYPT_BLOCK, O_HELP,
	};
	static const struct option longopts[] = {
		{"addr", required_argument, NULL, O_ADDR},
		{"transport", required_argument, NULL, O_TRANSPORT},
		{"rw", required_argument, NULL, O_RW},
		{"rwmixread", required_argument, NULL, O_MIX},
		{"bs", required_argument, NULL, O_BS},
		{"iodepth", required_argument, NULL, O_IODEPTH},
		{"numjobs", required_argument, NULL, O_NUMJOBS},
		{"size", required_argument, NULL, O_SIZE},
		{"runtime", required_argument, NULL, O_RUNTIME},
		{"ramp", required_argument, NULL, O_RAMP},
		{"cont", required_argument, NULL, O_CONT},
		{"api", required_argument, NULL, O_API},
		{"dir", required_argument, NULL, O_DIR},
		{"direct", required_argument, NULL, O_DIRECT_IO},
		{"registered", required_argument, NULL, O_REGISTERED},
		{"prefill", required_argument, NULL, O_PREFILL},
		{"verify", required_argument, NULL, O_VERIFY},
		{"json", no_argument, NULL, O_JSON},
		{"ceiling", required_argument, NULL, O_CEILING},
		{"progress", required_argument, NULL, O_PROGRESS},
		{"encrypt", no_argument, NULL, O_ENCRYPT},
		{"crypt-block", required_argument, NULL, O_CRYPT_BLOCK},
		{"help", no_argument, NULL, O_HELP},
		{NULL, 0, NULL, 0},
	};
	const char *opt;
	uint64_t v;
	unsigned i;
	bool progress = false;
	int c, rc = 0;

	*o = opts_default;
	opterr = 0;
	optind = 0; /* glibc: start over, whatever `lode` parsed before */
	while (rc == 0 && (c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		opt = argv[optind - 1];
		switch (c) {
		case O_ADDR:
			if (!*optarg)
				rc = arg_error("--addr: empty address");
			o->addr = optarg;
			break;
		case O_TRANSPORT:
			if (strcmp(optarg, "auto") != 0 && strcmp(optarg, "tcp") != 0 &&
			    strcmp(optarg, "shm") != 0 && strcmp(optarg, "rdma") != 0)
				rc = arg_error("--transport: '%s' is not auto, tcp, shm or rdma",
					       optarg);
			o->transport = optarg;
			break;
		case O_RW:
			for (i = 0; i < sizeof(rw_name) / sizeof(rw_name[0]); i++)
				if (strcmp(optarg, rw_name[i]) == 0)
					break;
			if (i == sizeof(rw_name) / sizeof(rw_name[0]))
				rc = arg_error("--rw: '%s' is not read, write, randread, randwrite "
					       "or mixed", optarg);
			o->rw = (enum bench_rw)i;
			break;
		case O_MIX:
			rc = parse_range("--rwmixread", optarg, 0, 100, &o->rwmixread);
			break;
		case O_BS:
			rc = parse_u64("--bs", optarg, true, &v);
			if (rc == 0 && (v < 1 || v > BS_MAX))
				rc = arg_error("--bs: '%s' is not within 1..64m", optarg);
			o->bs = (uint32_t)v;
			break;
		case O_IODEPTH:
			rc = parse_range("--iodepth", optarg, 1, IODEPTH_MAX, &o->iodepth);
			break;
		case O_NUMJOBS:
			rc = parse_range("--numjobs", optarg, 1, NUMJOBS_MAX, &o->numjobs);
			break;
		case O_SIZE:
			rc = parse_u64("--size", optarg, true, &o->size);
			break;
		case O_RUNTIME:
			rc = parse_seconds("--runtime", optarg, &o->runtime);
			break;
		case O_RAMP:
			rc = parse_seconds("--ramp", optarg, &o->ramp);
			break;
		case O_CONT:
			rc = parse_label(optarg);
			o->cont = optarg;
			break;
		case O_API:
			if (strcmp(optarg, "obj") == 0)
				o->api = API_OBJ;
			else if (strcmp(optarg, "array") == 0)
				o->api = API_ARRAY;
			else if (strcmp(optarg, "fs") == 0)
				o->api = API_FS;
			else if (strcmp(optarg, "posix") == 0)
				o->api = API_POSIX;
			else
				rc = arg_error("--api: '%s' is not obj, array, fs or posix", optarg);
			break;
		case O_DIR:
			o->dir = optarg;
			if (!*optarg)
				rc = arg_error("--dir: empty");
			break;
		case O_DIRECT_IO:
			rc = parse_bool("--direct", optarg, &o->direct);
			break;
		case O_REGISTERED:
			rc = parse_bool("--registered", optarg, &o->registered);
			break;
		case O_PREFILL:
			rc = parse_bool("--prefill", optarg, &o->prefill);
			break;
		case O_VERIFY:
			rc = parse_bool("--verify", optarg, &o->verify);
			break;
		case O_CEILING:
			rc = parse_bool("--ceiling", optarg, &o->ceiling);
			break;
		case O_PROGRESS:
			rc = parse_bool("--progress", optarg, &progress);
			if (rc == 0)
				o->progress = progress;
			break;
		case O_JSON:
			o->json = true;
			break;
		case O_ENCRYPT:
			o->encrypt = true;
			if (strcmp(o->cont, opts_default.cont) == 0)
				o->cont = "bench-enc"; /* never an unencrypted "bench" */
			break;
		case O_CRYPT_BLOCK:
			rc = parse_u64("--crypt-block", optarg, true, &v);
			if (rc == 0 && !crypt_block_valid(v))
				rc = arg_error("--crypt-block: '%s' is not a power of two from 4k to 1m",
					       optarg);
			o->crypt_block = (uint32_t)v;
			break;
		case 'h':
		case O_HELP:
			usage(stdout);
			return 1;
		case ':':
			rc = arg_error("option '%s' needs a value", opt);
			break;
		default:
			rc = arg_error("unknown option '%s'", opt);
			break;
		}
	}
	if (rc < 0)
		return rc;
	if (optind < argc)
		return arg_error("unexpected argument '%s'", argv[optind]);
	if (o->size < o->bs)
		return arg_error("--size (%" PRIu64 ") is smaller than --bs (%" PRIu32 ")", o->size,
				 o->bs);
	if (o->ramp > 0 && o->runtime <= 0)
		return arg_error("--ramp needs a --runtime above 0");
	if (o->crypt_block && !o->encrypt)
		return arg_error("--crypt-block needs --encrypt");
	if (o->crypt_block && strcmp(o->cont, "bench-enc") == 0) {
		static char name[32];

		snprintf(name, sizeof(name), "bench-enc-%" PRIu32 "k", o->crypt_block >> 10);
		o->cont = name;
	}
	if (o->api == API_FS && o->iodepth != 1)
		return arg_error("--api fs: liblodefs calls block, so --iodepth must be 1; "
				 "use --numjobs for concurrency");
	if (o->api == API_POSIX && o->iodepth != 1)
		return arg_error("--api posix: pread and pwrite block, so --iodepth must be 1; "
				 "use --numjobs for concurrency");
	if ((o->api == API_POSIX) != (o->dir != NULL))
		return arg_error(o->dir ? "--dir is for --api posix" : "--api posix needs --dir");
	if (o->api == API_POSIX && o->encrypt)
		return arg_error("--encrypt is a container's: not with --api posix");
	if (o->api == API_POSIX && o->direct && o->bs % 512)
		return arg_error("--direct 1: --bs must be a multiple of 512 (O_DIRECT)");
	if (o->progress < 0)
		o->progress = isatty(STDERR_FILENO);
	return 0;
}

/* ---- entry ------------------------------------------------------------- */

/*
 * The container the jobs use, created unless there (r->cont_created says
 * so), and with --api fs mounted. Returns 0, or -1 once the error is said.
 */
static int cont_prepare(lode_conn_t *ctl, struct result *r)
{
	int rc;

	if (g.o.encrypt) {
		struct conn_cont_props p = {.encryption = true, .crypt_block = g.o.crypt_block};

		rc = conn_cont_create_props(ctl, g.o.cont, &p, NULL);
	} else {
		rc = lode_cont_create(ctl, g.o.cont, NULL);
	}
	if (rc == -EEXIST && g.o.encrypt) {
		lode_cont_t *ct = NULL;

		/* An existing container must be an encrypted one, with the
		 * block size asked for. */
		rc = lode_cont_open(ctl, g.o.cont, &ct);
		if (rc == 0 && !ct->encrypted) {
			fprintf(stderr, "%s: container \"%s\" exists and is not encrypted\n",
				g_prog, g.o.cont);
			rc = -EINVAL;
		} else if (rc == 0 && g.o.crypt_block && ct->crypt_block != g.o.crypt_block) {
			fprintf(stderr, "%s: container \"%s\" exists with %" PRIu32
				"-byte crypt blocks, not %" PRIu32 "\n",
				g_prog, g.o.cont, ct->crypt_block, g.o.crypt_block);
			rc = -EINVAL;
		}
		if (rc == 0)
			r->crypt_block = ct->crypt_block;
		lode_cont_close(ct);
		if (rc == 0)
			rc = -EEXIST;
	} else if (rc == 0 && g.o.encrypt) {
		lode_cont_t *ct = NULL;

		if (lode_cont_open(ctl, g.o.cont, &ct) == 0)
			r->crypt_block = ct->crypt_block;
		lode_cont_close(ct);
	}
	if (rc < 0 && rc != -EEXIST) {
		fprintf(stderr, "%s: cannot create container \"%s\": %s\n", g_prog, g.o.cont,
			lode_strerror(rc));
		return -1;
	}
	r->cont_created = rc == 0;
	if (g.o.api == API_FS) {
		struct lodefs_opts fo = {.transport = g.o.transport};

		rc = lodefs_mount(g.o.addr, g.o.cont, &fo, &g.fs);
		if (rc == 0)
			rc = lodefs_path_mkdir(g.fs, NULL, FS_DIR, 0755);
		if (rc < 0 && rc != -EEXIST) {
			fprintf(stderr, "%s: cannot mount container \"%s\" through liblodefs: %s\n",
				g_prog, g.o.cont, lode_strerror(rc));
			return -1;
		}
	}
	return 0;

}


int lode_bench_main(int argc, char **argv)
{
	struct lode_conn_opts copts;
	struct sigaction sa, old_int, old_term;
	struct result *r = NULL;
	struct job *jobs = NULL;
	lode_conn_t *ctl = NULL;
	int rc, status = 0;
	unsigned i;

	memset(&g, 0, sizeof(g));
	pthread_mutex_init(&g.err_lock, NULL);
	pthread_mutex_init(&g.gate_lock, NULL);
	pthread_cond_init(&g.gate_cond, NULL);
	g_interrupted = 0;

	rc = parse_args(argc, argv, &g.o);
	if (rc == 1)
		return 0;
	if (rc < 0)
		return 2;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESETHAND; /* a second interrupt kills as usual */
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);

	r = calloc(1, sizeof(*r));
	jobs = calloc(g.o.numjobs, sizeof(*jobs));
	if (!r || !jobs) {
		fprintf(stderr, "%s: out of memory\n", g_prog);
		status = 1;
		goto out;
	}
	for (i = 0; i < g.o.numjobs; i++)
		jobs[i].fd = -1;
	copts = (struct lode_conn_opts){.transport = g.o.transport};
	rc = lode_connect(g.o.addr, &copts, &ctl);
	if (rc < 0 && g.o.api == API_POSIX) {
		/* The files need no Lode: the system is asked only for its
		 * targets' CPU time, when one is there. */
		fprintf(stderr, "%s: no Lode system at %s (%s): no server CPU time\n", g_prog,
			g.o.addr ? g.o.addr : "the local system's address", lode_strerror(rc));
		ctl = NULL;
	} else if (rc < 0) {
		fprintf(stderr, "%s: cannot connect to %s: %s\n", g_prog,
			g.o.addr ? g.o.addr : "the local system", lode_strerror(rc));
		status = 1;
		goto out;
	}
	rc = ctl ? lode_conn_query(ctl, &r->info) : 0;
	if (rc < 0 && g.o.api == API_POSIX) {
		fprintf(stderr, "%s: lode_conn_query: %s: no server CPU time\n", g_prog,
			lode_strerror(rc));
		memset(&r->info, 0, sizeof(r->info));
	} else if (rc < 0) {
		fprintf(stderr, "%s: lode_conn_query: %s\n", g_prog, lode_strerror(rc));
		status = 1;
		goto out;
	}
	if (g.o.api != API_POSIX && cont_prepare(ctl, r) < 0) {
		status = 1;
		goto out;
	}
	if (g.o.ceiling)
		ceilings_measure(&r->ceil);
	if (!g_interrupted)
		bench_run(ctl, jobs, r);

	if (g.o.json)
		print_json(r, g_interrupted);
	else if (r->measured)
		print_text(r);
	if (g.err_rc) {
		fprintf(stderr, "%s: %s: %s\n", g_prog, g.err_msg, lode_strerror(g.err_rc));
		status = 1;
	} else if (r->mismatches) {
		fprintf(stderr, "%s: %" PRIu64 " reads differed from what was written\n", g_prog,
			r->mismatches);
		status = 1;
	} else if (g_interrupted) {
		fprintf(stderr, "%s: interrupted\n", g_prog);
		status = 130;
	}

	for (i = 0; i < g.o.numjobs; i++)
		job_teardown(&jobs[i]);
	if (g.fs) {
		lodefs_umount(g.fs);
		g.fs = NULL;
	}
	if (r->cont_created) {
		rc = lode_cont_destroy(ctl, g.o.cont);
		if (rc < 0)
			fprintf(stderr, "%s: warning: cannot destroy container \"%s\" created for "
				"this run: %s\n", g_prog, g.o.cont, lode_strerror(rc));
	}
out:
	if (ctl)
		lode_disconnect(ctl);
	free(jobs);
	free(r);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	pthread_cond_destroy(&g.gate_cond);
	pthread_mutex_destroy(&g.gate_lock);
	pthread_mutex_destroy(&g.err_lock);
	return status;
}
