/*
 * lode-index-bench: which embedded, crash-safe index should hold a target's
 * metadata? See docs/decisions/0001-metadata-index.md for the answer and the
 * numbers this program produced.
 *
 * Three candidates run the engine's real index workload:
 *   lmdb     LMDB, one write transaction per batch
 *   rocksdb  RocksDB, one WriteBatch per batch, WAL on
 *   own      the engine's in-memory B+tree (src/engine/btree.c) behind the
 *            engine's own write-ahead log: one pwrite of the encoded batch,
 *            then fdatasync, then insert into the tree
 * plus a fourth row that is no index at all:
 *   ceiling  one pwrite of a 4 KiB block + one fdatasync per batch: the most
 *            durable batches per second this disk can give one thread
 *
 * The workload. Keys are binary and big-endian so that memcmp order is index
 * order:
 *   [cont u32][oid 16 B][dkey_len u16][dkey 12..20 B][akey_len u16]
 *   [akey 1..4 B][~epoch u64]
 * about 51 bytes. The epoch is stored inverted so that the newest version of
 * an akey sorts first and "the newest version visible at epoch E" is the
 * first key >= prefix|~E. Values are 24 bytes: extent address 8, length 4,
 * crc32c 4, flags 4, offset 4. Record i is a pure function of i (see
 * rec_make()): 4 versions per akey, 2 akeys per dkey, 8 dkeys per object,
 * objects spread over 4 containers, object ids hashed so objects land all
 * over the key space. Records are inserted in a random order.
 *
 * Every (candidate, repetition) runs in its own forked child on its own
 * fresh directory, so resident memory is measured from a clean process and
 * nothing is shared between runs. A child runs these phases in order:
 *   load     (b) N random inserts, 32 per transaction / batch / log write,
 *                nothing flushed (LMDB MDB_NOSYNC, RocksDB sync=false, own
 *                log written without fdatasync)
 *   settle       make the load durable once; RocksDB also flushes its
 *                memtable and compacts fully, so that reads see its best,
 *                steady shape rather than a pile of level-0 files; then
 *                (e) the bytes the candidate's files occupy on disk
 *   lookup   (c) newest version of random existing akeys: first key >=
 *                prefix|~LODE_EPOCH_MAX, checked to be that akey's newest
 *   scan     (d) 100k consecutive keys from a random place, several times
 *   memory   (e) growth of anonymous resident memory since before open, and
 *                the resident pages of mapped index files (LMDB's map),
 *                measured now that the reads have warmed the caches
 *   durable  (a) batches of 32 new random records into the loaded index,
 *                each batch durable before the next is started; counts the
 *                fsync/fdatasync calls (see the wrappers below) and the
 *                flush requests the block device completed
 *   ckpt         own only: write a checkpoint of the tree (its size is the
 *                own index's bytes on disk), then load it into a fresh
 *                tree; the load is most of what recovery costs
 *
 * The medians of the repetitions are printed with their spread (min..max)
 * as a Markdown table.
 */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <isa-l/crc.h>
#include <linux/magic.h>
#include <lmdb.h>
#include <rocksdb/c.h>

#include "engine/btree.h"
#include "lode/types.h"

#define BATCH 32            /* updates per group commit */
#define VERSIONS 4          /* versions per akey */
#define AKEYS 2             /* akeys per dkey */
#define DKEYS 8             /* dkeys per object */
#define CONTS 4             /* containers */
#define KEY_CAP 64          /* longest key rec_make() builds, rounded up */
#define VAL_LEN 24
#define EPOCH_LEN 8
#define LOG_BLOCK 4096      /* a durable group commit starts on a block boundary */
#define WAL_SIZE (64u << 20)

#ifndef LODE_LMDB_VERSION
#define LODE_LMDB_VERSION "?"
#endif
#ifndef LODE_ROCKSDB_VERSION
#define LODE_ROCKSDB_VERSION "?"
#endif

/* Results are summed into this so that no read can be optimised away. */
static volatile uint64_t sink;

/* ---- counting flushes ---------------------------------------------------- */

/*
 * LMDB and RocksDB call fsync()/fdatasync() from inside their libraries
 * (RocksDB from its background threads too). Defining the two here makes the
 * dynamic linker bind the libraries' calls to these wrappers, so each phase
 * can count its own flush calls without strace. strace -c -f gives the same
 * counts; the decision record shows both.
 */
static atomic_ulong sync_calls;

int fsync(int fd)
{
	atomic_fetch_add(&sync_calls, 1);
	return (int)syscall(SYS_fsync, fd);
}

int fdatasync(int fd)
{
	atomic_fetch_add(&sync_calls, 1);
	return (int)syscall(SYS_fdatasync, fd);
}

/*
 * A flush call is not a flush of the disk's cache: an fdatasync that must
 * also commit the file system journal costs more than one, and LMDB's meta
 * page goes through an O_DSYNC descriptor with no fsync call at all. The
 * block layer counts completed flush requests per device (field 16 of
 * /sys/dev/block/M:m/stat, Linux >= 5.5); the count is for the whole device,
 * so other work on the same disk adds to it.
 */
static char dev_stat_path[128];

static long long dev_flushes(void)
{
	unsigned long long f[17];
	FILE *fp;
	int n;

	if (!dev_stat_path[0] || !(fp = fopen(dev_stat_path, "r")))
		return -1;
	n = fscanf(fp, "%llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu",
		   &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7], &f[8], &f[9], &f[10],
		   &f[11], &f[12], &f[13], &f[14], &f[15], &f[16]);
	fclose(fp);
	return n == 17 ? (long long)f[15] : -1;
}

/* ---- small helpers -------------------------------------------------------- */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * Wall time and the CPU time of the whole process (every thread, so
 * RocksDB's background flushes and compactions are charged to it). Other
 * people's jobs on a shared machine stretch wall time; CPU time per
 * operation is what they disturb least, so the CPU-bound phases report both.
 */
struct stopwatch {
	uint64_t wall, cpu, w0, c0;
};

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sw_start(struct stopwatch *sw)
{
	sw->w0 = now_ns();
	sw->c0 = cpu_ns();
}

static void sw_stop(struct stopwatch *sw)
{
	sw->cpu += cpu_ns() - sw->c0;
	sw->wall += now_ns() - sw->w0;
}

/* n operations over what sw measured, per wall second and per CPU second. */
static void sw_rates(const struct stopwatch *sw, uint64_t n, double *wall_rate, double *cpu_rate)
{
	*wall_rate = sw->wall ? (double)n / ((double)sw->wall / 1e9) : NAN;
	*cpu_rate = sw->cpu ? (double)n / ((double)sw->cpu / 1e9) : NAN;
}

/* splitmix64's finaliser: a cheap, good 64-bit mix. */
static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static void put_be16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put_be32(uint8_t *p, uint32_t v)
{
	for (int i = 3; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static void put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++, v >>= 8)
		p[i] = (uint8_t)v;
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++, v >>= 8)
		p[i] = (uint8_t)v;
}

static void fill_bytes(uint8_t *p, unsigned n, uint64_t seed)
{
	for (unsigned i = 0; i < n; i += 8) {
		uint64_t h = mix64(seed + i);

		memcpy(p + i, &h, n - i < 8 ? n - i : 8);
	}
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n);

	if (!p) {
		fprintf(stderr, "index-bench: out of memory (%zu bytes)\n", n);
		exit(1);
	}
	return p;
}

/* Resident memory in bytes, from /proc/self/status ("RssAnon:" etc.). */
static uint64_t rss_bytes(const char *field)
{
	char line[256];
	size_t flen = strlen(field);
	uint64_t kb = 0;
	FILE *fp = fopen("/proc/self/status", "r");

	if (!fp)
		return 0;
	while (fgets(line, sizeof(line), fp))
		if (!strncmp(line, field, flen)) {
			kb = strtoull(line + flen, NULL, 10);
			break;
		}
	fclose(fp);
	return kb * 1024;
}

/*
 * Resident bytes of the mappings of files under dir (LMDB's map), from
 * /proc/self/smaps. RssFile would also count the libraries' code pages, which
 * for RocksDB alone are megabytes.
 */
static uint64_t rss_mapped_under(const char *dir)
{
	char line[4200];
	size_t dlen = strlen(dir);
	bool mine = false;
	uint64_t kb = 0;
	FILE *fp = fopen("/proc/self/smaps", "r");

	if (!fp)
		return 0;
	while (fgets(line, sizeof(line), fp)) {
		char *path;

		/* A mapping's line starts with its address in lowercase hex. */
		if ((line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f')) {
			path = strchr(line, '/');
			mine = path && !strncmp(path, dir, dlen);
		} else if (mine && !strncmp(line, "Rss:", 4)) {
			kb += strtoull(line + 4, NULL, 10);
		}
	}
	fclose(fp);
	return kb * 1024;
}

/* Bytes allocated on disk to the files directly in dir. */
static uint64_t dir_disk_bytes(const char *dir)
{
	struct dirent *de;
	struct stat st;
	uint64_t sum = 0;
	DIR *d = opendir(dir);

	if (!d)
		return 0;
	while ((de = readdir(d)))
		if (!fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) && S_ISREG(st.st_mode))
			sum += (uint64_t)st.st_blocks * 512;
	closedir(d);
	return sum;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

static void rm_tree(const char *dir)
{
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- the workload ---------------------------------------------------------- */

struct rec {
	uint8_t klen;
	uint8_t key[KEY_CAP];
	uint8_t val[VAL_LEN];
};

/*
 * The key of akey number a without its epoch: container, object id, dkey and
 * akey. Returns its length. Objects are numbered a / (AKEYS * DKEYS); their
 * ids are hashed so that neighbouring numbers land far apart in the index.
 */
static unsigned key_prefix(uint64_t a, uint8_t *p)
{
	uint64_t dkey_no = a / AKEYS, obj = dkey_no / DKEYS;
	uint64_t h = mix64(obj);
	uint64_t dh = mix64(dkey_no ^ 0x5bd1e995ull), ah = mix64(a ^ 0x27d4eb2full);
	unsigned dlen = 12 + (unsigned)(dh % 9), alen = 1 + (unsigned)(ah % 4);
	uint8_t *s = p;

	put_be32(p, (uint32_t)(obj % CONTS));
	p += 4;
	put_be64(p, ((uint64_t)LODE_OT_KV << LODE_OID_TYPE_SHIFT) | (h & LODE_OID_USER_MASK));
	put_be64(p + 8, mix64(h));
	p += 16;
	put_be16(p, (uint16_t)dlen);
	fill_bytes(p + 2, dlen, dh);
	p += 2 + dlen;
	put_be16(p, (uint16_t)alen);
	fill_bytes(p + 2, alen, ah);
	p[2] = (uint8_t)(a % AKEYS); /* the akeys of one dkey must differ */
	p += 2 + alen;
	return (unsigned)(p - s);
}

/* Record i: version i % VERSIONS of akey i / VERSIONS. */
static void rec_make(uint64_t i, struct rec *r)
{
	uint64_t a = i / VERSIONS, v = i % VERSIONS;
	unsigned n = key_prefix(a, r->key);
	uint64_t epoch = (v + 1) * 1000000000ull + mix64(a) % 1000000000ull;
	uint64_t h = mix64(i ^ 0x9747b28cull);

	put_be64(r->key + n, ~epoch);
	r->klen = (uint8_t)(n + EPOCH_LEN);
	put_le64(r->val, (h & 0xffffffffff000ull));           /* extent address */
	put_le32(r->val + 8, 4096u << (h % 5));                /* length */
	put_le32(r->val + 12, (uint32_t)(h >> 32));            /* crc32c */
	put_le32(r->val + 16, (uint32_t)(v & 3));              /* flags */
	put_le32(r->val + 20, 0);                              /* offset */
}

/* A random permutation of [lo, lo + n): the order records are inserted in. */
static uint32_t *perm_make(uint64_t lo, uint64_t n, uint64_t seed)
{
	uint32_t *p = xmalloc((n ? n : 1) * sizeof(*p));

	for (uint64_t i = 0; i < n; i++)
		p[i] = (uint32_t)(lo + i);
	for (uint64_t i = n; i > 1; i--) {
		uint64_t j = mix64(seed + i) % i;
		uint32_t t = p[i - 1];

		p[i - 1] = p[j];
		p[j] = t;
	}
	return p;
}

/* What a child reports; NAN where a candidate has no such number. */
enum metric {
	M_DUR_UPS,     /* (a) durable updates/s */
	M_DUR_P50,     /* (a) batch latency, us */
	M_DUR_P99,
	M_DUR_SYNCS,   /* (a) fsync + fdatasync calls per batch */
	M_DUR_FLUSHES, /* (a) device flush requests per batch */
	M_DUR_CPU,     /* (a) CPU us per batch */
	M_LOAD_OPS,    /* (b) inserts/s, nothing flushed */
	M_LOAD_CPU,    /* (b) inserts per CPU second */
	M_LOOKUP_OPS,  /* (c) */
	M_LOOKUP_CPU,
	M_SCAN_KEYS,   /* (d) */
	M_SCAN_CPU,
	M_RSS_ANON,    /* (e) bytes per record */
	M_RSS_FILE,
	M_DISK,
	M_SETTLE_S,
	M_CKPT_W_S,
	M_CKPT_L_S,
	M_BT_RANDOM,   /* own: tree node bytes per record after random inserts */
	M_BT_RELOAD,   /* own: the same after loading the checkpoint in order */
	M_COUNT
};

static const char *const metric_names[M_COUNT] = {
	"(a) durable updates/s (batches of 32)",
	"(a) batch latency p50, us",
	"(a) batch latency p99, us",
	"(a) fsync+fdatasync calls / batch",
	"(a) device flushes / batch",
	"(a) CPU time per batch, us",
	"(b) RAM-mode inserts/s (no flush)",
	"(b) RAM-mode inserts per CPU-second",
	"(c) newest-version lookups/s",
	"(c) lookups per CPU-second",
	"(d) enumeration keys/s",
	"(d) keys per CPU-second",
	"(e) RSS anon growth, B/record",
	"(e) resident mapped index files, B/record",
	"(e) on disk, B/record (own: checkpoint)",
	"settle after load, s",
	"checkpoint write, s",
	"checkpoint load (recovery), s",
	"own: B+tree nodes, B/record (random inserts)",
	"own: B+tree nodes, B/record (checkpoint load)",
};

/* ---- the candidates --------------------------------------------------------- */

struct kv {
	const uint8_t *k, *v;
	size_t klen, vlen;
};

/*
 * What the benchmark asks of a candidate. Every call returns 0 or a negative
 * code, except seek and next, which return 1 with *out set, 0 at the end of
 * the index, or a negative code.
 */
struct idx_ops {
	const char *name;
	int (*open)(const char *dir, void **h);
	/* Insert n records as one transaction; durable or not per set_durable. */
	int (*put)(void *h, const struct rec *r, unsigned n);
	/* From now on every put returns only once its records are durable. */
	int (*set_durable)(void *h);
	/* Make everything so far durable and let background work finish. */
	int (*settle)(void *h);
	int (*read_begin)(void *h);
	/* Position at the first key >= key (len 0: the first key). */
	int (*seek)(void *h, const uint8_t *key, size_t len, struct kv *out);
	int (*next)(void *h, struct kv *out);
	void (*read_end)(void *h);
	void (*close)(void *h);
	/* Own index only: write a checkpoint and load it back; fills metrics. */
	int (*checkpoint)(void *h, double *m);
};

/* -- LMDB -- */

struct lmdb_idx {
	MDB_env *env;
	MDB_dbi dbi;
	MDB_txn *rtxn;
	MDB_cursor *cur;
};

static int lmdb_err(const char *what, int rc)
{
	fprintf(stderr, "index-bench: lmdb %s: %s\n", what, mdb_strerror(rc));
	return rc > 0 ? -rc : -EIO;
}

static int lmdb_open(const char *dir, void **h)
{
	struct lmdb_idx *x = calloc(1, sizeof(*x));
	MDB_txn *txn;
	int rc;

	if (!x)
		return -ENOMEM;
	*h = x;
	if ((rc = mdb_env_create(&x->env)))
		return lmdb_err("env_create", rc);
	/* A sparse reservation: without MDB_WRITEMAP the file grows as used. */
	if ((rc = mdb_env_set_mapsize(x->env, 64ull << 30)))
		return lmdb_err("set_mapsize", rc);
	if ((rc = mdb_env_open(x->env, dir, MDB_NOSYNC, 0644)))
		return lmdb_err("env_open", rc);
	if ((rc = mdb_txn_begin(x->env, NULL, 0, &txn)))
		return lmdb_err("txn_begin", rc);
	if ((rc = mdb_dbi_open(txn, NULL, 0, &x->dbi)))
		return lmdb_err("dbi_open", rc);
	if ((rc = mdb_txn_commit(txn)))
		return lmdb_err("txn_commit", rc);
	return 0;
}

static int lmdb_put(void *h, const struct rec *r, unsigned n)
{
	struct lmdb_idx *x = h;
	MDB_txn *txn;
	int rc;

	if ((rc = mdb_txn_begin(x->env, NULL, 0, &txn)))
		return lmdb_err("txn_begin", rc);
	for (unsigned i = 0; i < n; i++) {
		MDB_val k = {r[i].klen, (void *)r[i].key}, v = {VAL_LEN, (void *)r[i].val};

		if ((rc = mdb_put(txn, x->dbi, &k, &v, 0))) {
			mdb_txn_abort(txn);
			return lmdb_err("put", rc);
		}
	}
	if ((rc = mdb_txn_commit(txn)))
		return lmdb_err("txn_commit", rc);
	return 0;
}

static int lmdb_set_durable(void *h)
{
	struct lmdb_idx *x = h;
	int rc;

	/* Default LMDB: commit = write pages, fdatasync, write meta (O_DSYNC). */
	if ((rc = mdb_env_sync(x->env, 1)))
		return lmdb_err("env_sync", rc);
	if ((rc = mdb_env_set_flags(x->env, MDB_NOSYNC, 0)))
		return lmdb_err("set_flags", rc);
	return 0;
}

static int lmdb_settle(void *h)
{
	struct lmdb_idx *x = h;
	int rc = mdb_env_sync(x->env, 1);

	return rc ? lmdb_err("env_sync", rc) : 0;
}

static int lmdb_read_begin(void *h)
{
	struct lmdb_idx *x = h;
	int rc;

	/* One read transaction for a whole phase: LMDB's cheapest way to read. */
	if ((rc = mdb_txn_begin(x->env, NULL, MDB_RDONLY, &x->rtxn)))
		return lmdb_err("txn_begin(rdonly)", rc);
	if ((rc = mdb_cursor_open(x->rtxn, x->dbi, &x->cur)))
		return lmdb_err("cursor_open", rc);
	return 0;
}

static int lmdb_get(struct lmdb_idx *x, MDB_val *k, MDB_cursor_op op, struct kv *out)
{
	MDB_val v;
	int rc = mdb_cursor_get(x->cur, k, &v, op);

	if (rc == MDB_NOTFOUND)
		return 0;
	if (rc)
		return lmdb_err("cursor_get", rc);
	out->k = k->mv_data;
	out->klen = k->mv_size;
	out->v = v.mv_data;
	out->vlen = v.mv_size;
	return 1;
}

static int lmdb_seek(void *h, const uint8_t *key, size_t len, struct kv *out)
{
	MDB_val k = {len, (void *)key};

	return lmdb_get(h, &k, len ? MDB_SET_RANGE : MDB_FIRST, out);
}

static int lmdb_next(void *h, struct kv *out)
{
	MDB_val k;

	return lmdb_get(h, &k, MDB_NEXT, out);
}

static void lmdb_read_end(void *h)
{
	struct lmdb_idx *x = h;

	mdb_cursor_close(x->cur);
	mdb_txn_abort(x->rtxn);
}

static void lmdb_close(void *h)
{
	struct lmdb_idx *x = h;

	if (x->env)
		mdb_env_close(x->env);
	free(x);
}

/* -- RocksDB -- */

struct rdb_idx {
	rocksdb_t *db;
	rocksdb_options_t *opts;
	rocksdb_writeoptions_t *wo;
	rocksdb_readoptions_t *ro;
	rocksdb_writebatch_t *wb;
	rocksdb_iterator_t *it;
};

static int rdb_err(const char *what, char *err)
{
	fprintf(stderr, "index-bench: rocksdb %s: %s\n", what, err);
	rocksdb_free(err);
	return -EIO;
}

static int rdb_open(const char *dir, void **h)
{
	struct rdb_idx *x = calloc(1, sizeof(*x));
	char *err = NULL;

	if (!x)
		return -ENOMEM;
	*h = x;
	/* Defaults throughout (64 MiB memtable, level compaction, WAL on). */
	x->opts = rocksdb_options_create();
	rocksdb_options_set_create_if_missing(x->opts, 1);
	x->db = rocksdb_open(x->opts, dir, &err);
	if (err)
		return rdb_err("open", err);
	x->wo = rocksdb_writeoptions_create();
	rocksdb_writeoptions_set_sync(x->wo, 0);
	x->ro = rocksdb_readoptions_create();
	x->wb = rocksdb_writebatch_create();
	return 0;
}

static int rdb_put(void *h, const struct rec *r, unsigned n)
{
	struct rdb_idx *x = h;
	char *err = NULL;

	rocksdb_writebatch_clear(x->wb);
	for (unsigned i = 0; i < n; i++)
		rocksdb_writebatch_put(x->wb, (const char *)r[i].key, r[i].klen,
				       (const char *)r[i].val, VAL_LEN);
	rocksdb_write(x->db, x->wo, x->wb, &err);
	return err ? rdb_err("write", err) : 0;
}

static int rdb_set_durable(void *h)
{
	struct rdb_idx *x = h;

	rocksdb_writeoptions_set_sync(x->wo, 1);
	return 0;
}

static int rdb_settle(void *h)
{
	struct rdb_idx *x = h;
	rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
	char *err = NULL;

	rocksdb_flushoptions_set_wait(fo, 1);
	rocksdb_flush(x->db, fo, &err);
	rocksdb_flushoptions_destroy(fo);
	if (err)
		return rdb_err("flush", err);
	rocksdb_compact_range(x->db, NULL, 0, NULL, 0);
	return 0;
}

static int rdb_read_begin(void *h)
{
	struct rdb_idx *x = h;

	/* One iterator re-seeked for every lookup, as a reader thread would. */
	x->it = rocksdb_create_iterator(x->db, x->ro);
	return x->it ? 0 : -ENOMEM;
}

static int rdb_cur(struct rdb_idx *x, struct kv *out)
{
	char *err = NULL;

	if (!rocksdb_iter_valid(x->it)) {
		rocksdb_iter_get_error(x->it, &err);
		return err ? rdb_err("iterator", err) : 0;
	}
	out->k = (const uint8_t *)rocksdb_iter_key(x->it, &out->klen);
	out->v = (const uint8_t *)rocksdb_iter_value(x->it, &out->vlen);
	return 1;
}

static int rdb_seek(void *h, const uint8_t *key, size_t len, struct kv *out)
{
	struct rdb_idx *x = h;

	if (len)
		rocksdb_iter_seek(x->it, (const char *)key, len);
	else
		rocksdb_iter_seek_to_first(x->it);
	return rdb_cur(x, out);
}

static int rdb_next(void *h, struct kv *out)
{
	struct rdb_idx *x = h;

	rocksdb_iter_next(x->it);
	return rdb_cur(x, out);
}

static void rdb_read_end(void *h)
{
	struct rdb_idx *x = h;

	rocksdb_iter_destroy(x->it);
	x->it = NULL;
}

static void rdb_close(void *h)
{
	struct rdb_idx *x = h;

	if (x->db)
		rocksdb_close(x->db);
	if (x->wb)
		rocksdb_writebatch_destroy(x->wb);
	if (x->ro)
		rocksdb_readoptions_destroy(x->ro);
	if (x->wo)
		rocksdb_writeoptions_destroy(x->wo);
	if (x->opts)
		rocksdb_options_destroy(x->opts);
	free(x);
}

/* -- own: in-memory B+tree + write-ahead log -- */

/*
 * The log format the engine's own design would use, reduced to what costs
 * time: a group commit is a 24-byte header (magic, crc32c of the body, lsn,
 * record count, body length) and then per record [klen u8][vlen u8][key][val].
 * In durable mode a commit is padded to a LOG_BLOCK boundary so that no
 * write ever rewrites a block holding an acknowledged commit (a torn write
 * could otherwise destroy it). The log is a fixed-size, zero-filled file
 * used as a ring, so a commit's fdatasync never has file size or extent
 * changes to journal: one fdatasync = one device flush. The same encoding
 * is the checkpoint's, with no commit headers.
 */
#define LOG_MAGIC 0x4c4f4457u /* "LODW" */
#define LOG_HDR 24

struct own_item {
	uint8_t val[VAL_LEN];
	uint8_t klen;
	uint8_t key[];
};

/* Items live in 4 MiB chunks handed out by bumping a pointer. */
struct arena {
	uint8_t *cur, *end;
	void **chunks;
	size_t n, cap;
};

#define ARENA_CHUNK (4u << 20)

static void *arena_alloc(struct arena *a, size_t size)
{
	void *p;

	size = (size + 7) & ~(size_t)7;
	if ((size_t)(a->end - a->cur) < size) {
		if (a->n == a->cap) {
			a->cap = a->cap ? 2 * a->cap : 64;
			a->chunks = realloc(a->chunks, a->cap * sizeof(*a->chunks));
			if (!a->chunks)
				return NULL;
		}
		if (!(a->cur = malloc(ARENA_CHUNK)))
			return NULL;
		a->chunks[a->n++] = a->cur;
		a->end = a->cur + ARENA_CHUNK;
	}
	p = a->cur;
	a->cur += size;
	return p;
}

static void arena_free(struct arena *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->chunks[i]);
	free(a->chunks);
	memset(a, 0, sizeof(*a));
}

static const uint8_t *own_key(const void *item, uint32_t *len)
{
	const struct own_item *it = item;

	*len = it->klen;
	return it->key;
}

struct own_idx {
	struct bt *t;
	struct bt_cur cur;
	struct arena arena;
	int wal_fd;
	bool durable;
	uint64_t wal_off, lsn;
	uint8_t *buf;
	char dir[4096];
};

static int own_open(const char *dir, void **h)
{
	struct own_idx *x = calloc(1, sizeof(*x));
	char path[4200];
	int rc;

	if (!x)
		return -ENOMEM;
	*h = x;
	x->wal_fd = -1;
	snprintf(x->dir, sizeof(x->dir), "%s", dir);
	if (posix_memalign((void **)&x->buf, LOG_BLOCK, 1u << 20))
		return -ENOMEM;
	if ((rc = bt_create(own_key, &x->t)))
		return rc;
	snprintf(path, sizeof(path), "%s/wal", dir);
	x->wal_fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (x->wal_fd < 0)
		return -errno;
	/* Created once with the target: zero-filled and flushed (untimed). */
	memset(x->buf, 0, 1u << 20);
	for (uint64_t off = 0; off < WAL_SIZE; off += 1u << 20)
		if (pwrite(x->wal_fd, x->buf, 1u << 20, (off_t)off) != 1 << 20)
			return -EIO;
	if (fdatasync(x->wal_fd))
		return -errno;
	return 0;
}

static size_t own_encode(uint8_t *p, const struct rec *r, unsigned n)
{
	size_t len = 0;

	for (unsigned i = 0; i < n; i++) {
		p[len] = r[i].klen;
		p[len + 1] = VAL_LEN;
		memcpy(p + len + 2, r[i].key, r[i].klen);
		memcpy(p + len + 2 + r[i].klen, r[i].val, VAL_LEN);
		len += 2 + r[i].klen + VAL_LEN;
	}
	return len;
}

static int own_insert(struct own_idx *x, const uint8_t *key, unsigned klen, const uint8_t *val)
{
	struct own_item *it = arena_alloc(&x->arena, sizeof(*it) + klen);
	void *old = NULL;
	int rc;

	if (!it)
		return -ENOMEM;
	memcpy(it->val, val, VAL_LEN);
	it->klen = (uint8_t)klen;
	memcpy(it->key, key, klen);
	rc = bt_insert(x->t, it, &old);
	/* A replaced item stays in the arena; this workload never replaces. */
	return rc < 0 ? rc : 0;
}

static int own_put(void *h, const struct rec *r, unsigned n)
{
	struct own_idx *x = h;
	size_t body = own_encode(x->buf + LOG_HDR, r, n), len = LOG_HDR + body;
	int rc;

	put_le32(x->buf, LOG_MAGIC);
	put_le32(x->buf + 4, crc32_iscsi(x->buf + LOG_HDR, (int)body, 0xffffffffu));
	put_le64(x->buf + 8, ++x->lsn);
	put_le32(x->buf + 16, n);
	put_le32(x->buf + 20, (uint32_t)body);
	if (x->durable) {
		size_t pad = (LOG_BLOCK - len % LOG_BLOCK) % LOG_BLOCK;

		memset(x->buf + len, 0, pad);
		len += pad;
	}
	if (x->wal_off + len > WAL_SIZE)
		x->wal_off = 0; /* the ring wraps; a checkpoint would have run first */
	if (pwrite(x->wal_fd, x->buf, len, (off_t)x->wal_off) != (ssize_t)len)
		return -EIO;
	x->wal_off += len;
	if (x->durable && fdatasync(x->wal_fd))
		return -errno;
	/* Visible only once durable, as eng_*_update promises. */
	for (unsigned i = 0; i < n; i++)
		if ((rc = own_insert(x, r[i].key, r[i].klen, r[i].val)))
			return rc;
	return 0;
}

static int own_set_durable(void *h)
{
	struct own_idx *x = h;

	x->durable = true;
	x->wal_off = (x->wal_off + LOG_BLOCK - 1) / LOG_BLOCK * LOG_BLOCK;
	return fdatasync(x->wal_fd) ? -errno : 0;
}

static int own_settle(void *h)
{
	struct own_idx *x = h;

	return fdatasync(x->wal_fd) ? -errno : 0;
}

static int own_read_begin(void *h)
{
	return 0;
}

static int own_cur(struct own_idx *x, const struct own_item *it, struct kv *out)
{
	if (!it)
		return 0;
	out->k = it->key;
	out->klen = it->klen;
	out->v = it->val;
	out->vlen = VAL_LEN;
	return 1;
}

static int own_seek(void *h, const uint8_t *key, size_t len, struct kv *out)
{
	struct own_idx *x = h;

	if (!len)
		return own_cur(x, bt_first(x->t, &x->cur), out);
	return own_cur(x, bt_seek(x->t, &x->cur, key, (uint32_t)len), out);
}

static int own_next(void *h, struct kv *out)
{
	struct own_idx *x = h;

	return own_cur(x, bt_next(&x->cur), out);
}

static void own_read_end(void *h)
{
}

static void own_close(void *h)
{
	struct own_idx *x = h;

	if (x->t)
		bt_destroy(x->t, NULL);
	arena_free(&x->arena);
	if (x->wal_fd >= 0)
		close(x->wal_fd);
	free(x->buf);
	free(x);
}

/*
 * Write every record of the tree, in key order and in the log's record
 * encoding, to dir/ckpt and make it durable; then drop it from the page
 * cache and read it back into a fresh tree the way recovery would. Returns
 * both times and the checkpoint's size.
 */
static int own_checkpoint(void *h, double *m)
{
	const size_t cap = 1u << 20;
	struct own_idx *x = h, y = {0};
	char path[4200];
	struct kv kv;
	uint64_t t0, loaded = 0, bytes = 0, count = bt_count(x->t);
	size_t len = 0, have = 0, pos = 0;
	int fd, rc;

	snprintf(path, sizeof(path), "%s/ckpt", x->dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	m[M_BT_RANDOM] = (double)bt_bytes(x->t) / (double)count;
	t0 = now_ns();
	for (rc = own_seek(x, NULL, 0, &kv); rc == 1; rc = own_next(x, &kv)) {
		if (len + 2 + kv.klen + kv.vlen > cap) {
			if (write(fd, x->buf, len) != (ssize_t)len)
				goto io;
			bytes += len;
			len = 0;
		}
		x->buf[len] = (uint8_t)kv.klen;
		x->buf[len + 1] = (uint8_t)kv.vlen;
		memcpy(x->buf + len + 2, kv.k, kv.klen);
		memcpy(x->buf + len + 2 + kv.klen, kv.v, kv.vlen);
		len += 2 + kv.klen + kv.vlen;
	}
	if (rc < 0 || write(fd, x->buf, len) != (ssize_t)len || fdatasync(fd))
		goto io;
	bytes += len;
	m[M_CKPT_W_S] = (double)(now_ns() - t0) / 1e9;
	m[M_DISK] = (double)bytes / (double)count;

	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	if (lseek(fd, 0, SEEK_SET) < 0)
		goto io;
	t0 = now_ns();
	if ((rc = bt_create(own_key, &y.t)))
		goto out;
	for (;;) {
		ssize_t got;

		if (have - pos >= 2 && have - pos >= 2u + x->buf[pos] + x->buf[pos + 1]) {
			rc = own_insert(&y, x->buf + pos + 2, x->buf[pos], x->buf + pos + 2 + x->buf[pos]);
			if (rc)
				goto out;
			pos += 2u + x->buf[pos] + x->buf[pos + 1];
			loaded++;
			continue;
		}
		memmove(x->buf, x->buf + pos, have - pos);
		have -= pos;
		pos = 0;
		got = read(fd, x->buf + have, cap - have);
		if (got < 0)
			goto io;
		if (got == 0)
			break;
		have += (size_t)got;
	}
	m[M_CKPT_L_S] = (double)(now_ns() - t0) / 1e9;
	m[M_BT_RELOAD] = (double)bt_bytes(y.t) / (double)count;
	rc = have == 0 && loaded == count && bt_count(y.t) == count ? 0 : -EIO;
	if (rc)
		fprintf(stderr, "index-bench: checkpoint reload lost records\n");
out:
	bt_destroy(y.t, NULL);
	arena_free(&y.arena);
	close(fd);
	return rc;
io:
	rc = errno ? -errno : -EIO;
	goto out;
}

/* -- ceiling: no index, one block write + one flush per batch -- */

static int ceil_open(const char *dir, void **h)
{
	return own_open(dir, h);
}

static int ceil_put(void *h, const struct rec *r, unsigned n)
{
	struct own_idx *x = h;

	/* The same bytes the own log would carry, minus header and index work. */
	size_t len = own_encode(x->buf, r, n);

	assert(len <= LOG_BLOCK);
	memset(x->buf + len, 0, LOG_BLOCK - len);
	if (x->wal_off + LOG_BLOCK > WAL_SIZE)
		x->wal_off = 0;
	if (pwrite(x->wal_fd, x->buf, LOG_BLOCK, (off_t)x->wal_off) != LOG_BLOCK)
		return -EIO;
	x->wal_off += LOG_BLOCK;
	return x->durable && fdatasync(x->wal_fd) ? -errno : 0;
}

static const struct idx_ops candidates[] = {
	{"lmdb", lmdb_open, lmdb_put, lmdb_set_durable, lmdb_settle, lmdb_read_begin, lmdb_seek,
	 lmdb_next, lmdb_read_end, lmdb_close, NULL},
	{"rocksdb", rdb_open, rdb_put, rdb_set_durable, rdb_settle, rdb_read_begin, rdb_seek,
	 rdb_next, rdb_read_end, rdb_close, NULL},
	{"own", own_open, own_put, own_set_durable, own_settle, own_read_begin, own_seek, own_next,
	 own_read_end, own_close, own_checkpoint},
	{"ceiling", ceil_open, ceil_put, own_set_durable, own_settle, NULL, NULL, NULL, NULL,
	 own_close, NULL},
};
#define NCAND (sizeof(candidates) / sizeof(candidates[0]))

/* ---- one run ------------------------------------------------------------------ */

struct params {
	uint64_t records, batches, lookups, scans, scan_len;
	unsigned repeat;
	const char *dir;
};

struct result {
	int rc;
	double m[M_COUNT];
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int phase_load(const struct idx_ops *ops, void *h, const uint32_t *perm, uint64_t n,
		      double *m)
{
	struct stopwatch sw = {0};
	struct rec r[BATCH];
	int rc;

	for (uint64_t i = 0; i < n; i += BATCH) {
		unsigned b = n - i < BATCH ? (unsigned)(n - i) : BATCH;

		for (unsigned j = 0; j < b; j++)
			rec_make(perm[i + j], &r[j]);
		sw_start(&sw);
		rc = ops->put(h, r, b);
		sw_stop(&sw);
		if (rc)
			return rc;
	}
	sw_rates(&sw, n, &m[M_LOAD_OPS], &m[M_LOAD_CPU]);
	return 0;
}

/*
 * Newest version of random existing akeys. Targets are built 1024 at a time
 * outside the timed part, each with the key the lookup must find: the
 * akey's newest record.
 */
static int phase_lookup(const struct idx_ops *ops, void *h, const struct params *p, double *m)
{
	enum { CHUNK = 1024 };
	static struct rec want[CHUNK];
	static uint8_t target[CHUNK][KEY_CAP];
	struct stopwatch sw = {0};
	uint64_t akeys = (p->records + VERSIONS - 1) / VERSIONS, sum = 0;
	struct kv kv;
	int rc = 0;

	if (!akeys || !p->lookups)
		return 0;
	if ((rc = ops->read_begin(h)))
		return rc;
	for (uint64_t i = 0; i < p->lookups && !rc; i += CHUNK) {
		unsigned n = p->lookups - i < CHUNK ? (unsigned)(p->lookups - i) : CHUNK;

		for (unsigned j = 0; j < n; j++) {
			uint64_t a = mix64(i + j + 12345) % akeys, newest = a * VERSIONS + VERSIONS - 1;

			rec_make(newest < p->records ? newest : p->records - 1, &want[j]);
			memcpy(target[j], want[j].key, want[j].klen);
			memset(target[j] + want[j].klen - EPOCH_LEN, 0, EPOCH_LEN); /* ~EPOCH_MAX */
		}
		sw_start(&sw);
		for (unsigned j = 0; j < n; j++) {
			if ((rc = ops->seek(h, target[j], want[j].klen, &kv)) < 0)
				break;
			if (rc == 0 || kv.klen != want[j].klen || memcmp(kv.k, want[j].key, kv.klen) ||
			    kv.vlen != VAL_LEN) {
				fprintf(stderr, "index-bench: %s: lookup %" PRIu64 " found the wrong key\n",
					ops->name, i + j);
				rc = -ENOENT;
				break;
			}
			sum += kv.v[0];
			rc = 0;
		}
		sw_stop(&sw);
	}
	ops->read_end(h);
	sink += sum;
	sw_rates(&sw, p->lookups, &m[M_LOOKUP_OPS], &m[M_LOOKUP_CPU]);
	return rc;
}

/* scans x scan_len consecutive keys from random places; wraps at the end. */
static int phase_scan(const struct idx_ops *ops, void *h, const struct params *p, double *m)
{
	uint64_t akeys = p->records / VERSIONS, len = p->scan_len, done = 0, sum = 0;
	struct stopwatch sw = {0};
	uint8_t key[KEY_CAP];
	struct kv kv;
	int rc = 0;

	if (!akeys)
		return 0;
	if (len > p->records)
		len = p->records;
	if ((rc = ops->read_begin(h)))
		return rc;
	for (uint64_t s = 0; s < p->scans; s++) {
		unsigned klen = key_prefix(mix64(s + 777) % akeys, key);
		uint64_t n = 0;

		memset(key + klen, 0, EPOCH_LEN);
		sw_start(&sw);
		rc = ops->seek(h, key, klen + EPOCH_LEN, &kv);
		while (rc >= 0 && n < len) {
			if (rc == 0) {
				rc = ops->seek(h, NULL, 0, &kv);
				continue;
			}
			sum += kv.k[kv.klen - 1] + kv.v[8];
			n++;
			rc = ops->next(h, &kv);
		}
		sw_stop(&sw);
		done += n;
		if (rc < 0)
			break;
	}
	ops->read_end(h);
	sink += sum;
	sw_rates(&sw, done, &m[M_SCAN_KEYS], &m[M_SCAN_CPU]);
	return rc < 0 ? rc : 0;
}

static int phase_durable(const struct idx_ops *ops, void *h, const uint32_t *perm, uint64_t batches,
			 double *m)
{
	struct rec r[BATCH];
	double *lat = xmalloc((batches ? batches : 1) * sizeof(*lat));
	uint64_t t = 0, syncs, cpu = 0;
	long long f0, f1;
	int rc;

	if ((rc = ops->set_durable(h)))
		goto out;
	syncs = atomic_load(&sync_calls);
	f0 = dev_flushes();
	for (uint64_t i = 0; i < batches; i++) {
		uint64_t t0, c0;

		for (unsigned j = 0; j < BATCH; j++)
			rec_make(perm[i * BATCH + j], &r[j]);
		c0 = cpu_ns();
		t0 = now_ns();
		if ((rc = ops->put(h, r, BATCH)))
			goto out;
		lat[i] = (double)(now_ns() - t0);
		cpu += cpu_ns() - c0;
		t += (uint64_t)lat[i];
	}
	f1 = dev_flushes();
	m[M_DUR_SYNCS] = (double)(atomic_load(&sync_calls) - syncs) / (double)batches;
	m[M_DUR_FLUSHES] = f0 >= 0 && f1 >= 0 ? (double)(f1 - f0) / (double)batches : NAN;
	m[M_DUR_UPS] = (double)(batches * BATCH) / ((double)t / 1e9);
	m[M_DUR_CPU] = (double)cpu / 1e3 / (double)batches;
	qsort(lat, batches, sizeof(*lat), cmp_double);
	m[M_DUR_P50] = lat[batches / 2] / 1e3;
	m[M_DUR_P99] = lat[batches * 99 / 100] / 1e3;
out:
	free(lat);
	return rc;
}

static void run_one(const struct idx_ops *ops, const struct params *p, const char *dir,
		    struct result *res)
{
	uint32_t *load = perm_make(0, p->records, 1);
	uint32_t *dur = perm_make(p->records, p->batches * BATCH, 2);
	bool is_index = ops->seek != NULL;
	uint64_t anon0, t0;
	void *h = NULL;
	int rc;

	for (int i = 0; i < M_COUNT; i++)
		res->m[i] = NAN;
	anon0 = rss_bytes("RssAnon:");
	if ((rc = ops->open(dir, &h)))
		goto out;
	if (is_index) {
		double n = (double)(p->records ? p->records : 1);

		if ((rc = phase_load(ops, h, load, p->records, res->m)))
			goto out;
		t0 = now_ns();
		if ((rc = ops->settle(h)))
			goto out;
		res->m[M_SETTLE_S] = (double)(now_ns() - t0) / 1e9;
		if (!ops->checkpoint)
			res->m[M_DISK] = (double)dir_disk_bytes(dir) / n;
		if ((rc = phase_lookup(ops, h, p, res->m)) ||
		    (rc = phase_scan(ops, h, p, res->m)))
			goto out;
		/* After the reads: RocksDB's block cache and LMDB's map are warm. */
		if (p->records) {
			res->m[M_RSS_ANON] = ((double)rss_bytes("RssAnon:") - (double)anon0) / n;
			res->m[M_RSS_FILE] = (double)rss_mapped_under(dir) / n;
		}
	}
	if ((rc = phase_durable(ops, h, dur, p->batches, res->m)))
		goto out;
	if (ops->checkpoint)
		rc = ops->checkpoint(h, res->m);
out:
	if (h)
		ops->close(h);
	free(load);
	free(dur);
	if (rc)
		fprintf(stderr, "index-bench: %s failed: %s\n", ops->name, strerror(-rc));
	res->rc = rc;
}

/* Run one candidate in a child process; its result comes back through a pipe. */
static int run_child(const struct idx_ops *ops, const struct params *p, unsigned rep,
		     struct result *res)
{
	char dir[4096];
	int fds[2], status;
	pid_t pid;
	ssize_t got;

	snprintf(dir, sizeof(dir), "%s/%s-%u", p->dir, ops->name, rep);
	rm_tree(dir);
	if (mkdir(dir, 0755) || pipe(fds))
		return -errno;
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		close(fds[0]);
		run_one(ops, p, dir, res);
		_exit(write(fds[1], res, sizeof(*res)) == sizeof(*res) ? 0 : 1);
	}
	close(fds[1]);
	got = read(fds[0], res, sizeof(*res));
	close(fds[0]);
	waitpid(pid, &status, 0);
	rm_tree(dir);
	if (got != sizeof(*res) || !WIFEXITED(status) || WEXITSTATUS(status))
		return -ECHILD;
	return res->rc;
}

/* ---- output ------------------------------------------------------------------- */

/* Three significant figures with k/M/G. */
static void fmt_num(char *s, size_t cap, double v)
{
	const char *suffix = "";

	if (isnan(v)) {
		snprintf(s, cap, "-");
		return;
	}
	if (v >= 1e9) {
		v /= 1e9;
		suffix = "G";
	} else if (v >= 1e6) {
		v /= 1e6;
		suffix = "M";
	} else if (v >= 1e4) {
		v /= 1e3;
		suffix = "k";
	}
	snprintf(s, cap, v >= 100 ? "%.0f%s" : v >= 10 ? "%.1f%s" : "%.2f%s", v, suffix);
}

static void print_cell(double *v, unsigned n)
{
	char med[32], lo[32], hi[32];

	if (!n) {
		printf(" - |");
		return;
	}
	qsort(v, n, sizeof(v[0]), cmp_double);
	fmt_num(med, sizeof(med), n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
	fmt_num(lo, sizeof(lo), v[0]);
	fmt_num(hi, sizeof(hi), v[n - 1]);
	if (n > 1)
		printf(" %s (%s..%s) |", med, lo, hi);
	else
		printf(" %s |", med);
}

static void print_table(const bool *sel, struct result (*res)[NCAND], unsigned reps)
{
	const unsigned ceil_c = NCAND - 1; /* the ceiling is the last candidate */

	printf("\n| metric (median of %u, min..max) |", reps);
	for (unsigned c = 0; c < NCAND; c++)
		if (sel[c])
			printf(" %s |", candidates[c].name);
	printf("\n| --- |");
	for (unsigned c = 0; c < NCAND; c++)
		if (sel[c])
			printf(" --- |");
	printf("\n");
	for (int m = 0; m < M_COUNT; m++) {
		printf("| %s |", metric_names[m]);
		for (unsigned c = 0; c < NCAND; c++) {
			double v[64];
			unsigned n = 0;

			if (!sel[c])
				continue;
			for (unsigned r = 0; r < reps; r++)
				if (!isnan(res[r][c].m[m]))
					v[n++] = res[r][c].m[m];
			print_cell(v, n);
		}
		printf("\n");
		if (m != M_DUR_UPS || !sel[ceil_c])
			continue;
		/*
		 * A disk's flush latency can drift by an order of magnitude
		 * within minutes (a virtual disk's host, a neighbour's
		 * writeback); each repetition's ceiling ran minutes from its
		 * candidates, so the ratio holds up better than the rate.
		 */
		printf("| (a) durable updates/s as %% of the same repetition's ceiling |");
		for (unsigned c = 0; c < NCAND; c++) {
			double v[64];
			unsigned n = 0;

			if (!sel[c])
				continue;
			for (unsigned r = 0; r < reps; r++)
				if (!isnan(res[r][c].m[m]) && !isnan(res[r][ceil_c].m[m]))
					v[n++] = 100 * res[r][c].m[m] / res[r][ceil_c].m[m];
			print_cell(v, n);
		}
		printf("\n");
	}
}

static void usage(FILE *fp)
{
	fprintf(fp,
		"usage: lode-index-bench [options]\n"
		"Compares LMDB, RocksDB and the engine's own B+tree + write-ahead log as a\n"
		"target's metadata index on the engine's index workload (~51-byte keys,\n"
		"24-byte values). Prints a Markdown table of medians over the repetitions.\n"
		"\n"
		"  --dir DIR        where the indexes are created (default /tmp/lode-index-bench);\n"
		"                   must be on the real disk, not tmpfs, for durable numbers\n"
		"  --records N      records loaded before lookups/scans (default 1000000)\n"
		"  --only NAME      lmdb, rocksdb, own or ceiling; repeat or comma-separate\n"
		"                   (default: all four)\n"
		"  --repeat R       repetitions of everything (default 3)\n"
		"  --batches B      durable batches of 32 in phase (a) (default 2000)\n"
		"  --lookups L      point lookups in phase (c) (default 1000000)\n"
		"  --scans S        scans of --scan-len keys in phase (d) (default 10)\n"
		"  --scan-len K     keys per scan (default 100000)\n"
		"  --help           this text\n");
}

static int select_names(char *arg, bool *sel)
{
	for (char *tok = strtok(arg, ","); tok; tok = strtok(NULL, ",")) {
		unsigned c;

		for (c = 0; c < NCAND && strcmp(tok, candidates[c].name); c++)
			;
		if (c == NCAND)
			return -EINVAL;
		sel[c] = true;
	}
	return 0;
}

/* Find the block device under dir for the flush counter; report the setup. */
static void describe_setup(const struct params *p)
{
	struct statfs sfs;
	struct stat st;
	struct utsname u;
	char model[256] = "?", line[512];
	FILE *fp;

	if (!stat(p->dir, &st))
		snprintf(dev_stat_path, sizeof(dev_stat_path), "/sys/dev/block/%u:%u/stat",
			 major(st.st_dev), minor(st.st_dev));
	if ((fp = fopen("/proc/cpuinfo", "r"))) {
		while (fgets(line, sizeof(line), fp))
			if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
				snprintf(model, sizeof(model), "%s", strchr(line, ':') + 2);
				model[strcspn(model, "\n")] = 0;
				break;
			}
		fclose(fp);
	}
	uname(&u);
	printf("lode-index-bench: %" PRIu64 " records, %" PRIu64 " durable batches of %d, %" PRIu64
	       " lookups, %" PRIu64 " scans of %" PRIu64 ", %u repetitions\n",
	       p->records, p->batches, BATCH, p->lookups, p->scans, p->scan_len, p->repeat);
	printf("machine: %s, %ld cpus, %.1f GiB RAM, Linux %s\n", model, sysconf(_SC_NPROCESSORS_ONLN),
	       (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) / (1 << 30), u.release);
	printf("dir: %s (fs magic 0x%lx%s), flush counter %s%s\n", p->dir,
	       statfs(p->dir, &sfs) ? 0ul : (unsigned long)sfs.f_type,
	       !statfs(p->dir, &sfs) && sfs.f_type == TMPFS_MAGIC ? ", TMPFS: flushes are free" : "",
	       dev_stat_path, dev_flushes() < 0 ? " (unreadable)" : "");
	printf("lmdb %s, rocksdb %s, crc32c isa-l\n", LODE_LMDB_VERSION, LODE_ROCKSDB_VERSION);
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{"help", no_argument, NULL, 'h'},       {"dir", required_argument, NULL, 'd'},
		{"records", required_argument, NULL, 'n'}, {"only", required_argument, NULL, 'o'},
		{"repeat", required_argument, NULL, 'r'}, {"batches", required_argument, NULL, 'b'},
		{"lookups", required_argument, NULL, 'l'}, {"scans", required_argument, NULL, 's'},
		{"scan-len", required_argument, NULL, 'k'}, {NULL, 0, NULL, 0},
	};
	struct params p = {1000000, 2000, 1000000, 10, 100000, 3, "/tmp/lode-index-bench"};
	bool sel[NCAND] = {false}, any = false;
	struct result (*res)[NCAND];
	int opt, failed = 0;

	while ((opt = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
		switch (opt) {
		case 'h':
			usage(stdout);
			return 0;
		case 'd':
			p.dir = optarg;
			break;
		case 'n':
			p.records = strtoull(optarg, NULL, 0);
			break;
		case 'o':
			if (select_names(optarg, sel)) {
				usage(stderr);
				return 2;
			}
			break;
		case 'r':
			p.repeat = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'b':
			p.batches = strtoull(optarg, NULL, 0);
			break;
		case 'l':
			p.lookups = strtoull(optarg, NULL, 0);
			break;
		case 's':
			p.scans = strtoull(optarg, NULL, 0);
			break;
		case 'k':
			p.scan_len = strtoull(optarg, NULL, 0);
			break;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || p.repeat < 1 || p.repeat > 64 || p.batches < 1 ||
	    p.records + p.batches * BATCH > UINT32_MAX) {
		usage(stderr);
		return 2;
	}
	for (unsigned c = 0; c < NCAND; c++)
		any |= sel[c];
	for (unsigned c = 0; c < NCAND && !any; c++)
		sel[c] = true;
	if (mkdir(p.dir, 0755) && errno != EEXIST) {
		fprintf(stderr, "index-bench: mkdir %s: %s\n", p.dir, strerror(errno));
		return 1;
	}
	describe_setup(&p);
	res = xmalloc(p.repeat * sizeof(*res));
	/* Repetitions interleave candidates so that a noisy minute hits all alike. */
	for (unsigned r = 0; r < p.repeat; r++)
		for (unsigned c = 0; c < NCAND; c++) {
			uint64_t t0 = now_ns();
			int rc;

			if (!sel[c])
				continue;
			rc = run_child(&candidates[c], &p, r, &res[r][c]);
			fprintf(stderr,
				"index-bench: %s run %u/%u: %s (%.1f s): durable %.0f/s p50 %.0f us, "
				"%.2f flushes/batch; load %.0f/s; lookups %.0f/s\n",
				candidates[c].name, r + 1, p.repeat, rc ? strerror(-rc) : "ok",
				(double)(now_ns() - t0) / 1e9, res[r][c].m[M_DUR_UPS],
				res[r][c].m[M_DUR_P50], res[r][c].m[M_DUR_FLUSHES], res[r][c].m[M_LOAD_OPS],
				res[r][c].m[M_LOOKUP_OPS]);
			if (rc) {
				failed = 1;
				for (int m = 0; m < M_COUNT; m++)
					res[r][c].m[m] = NAN;
			}
		}
	print_table(sel, res, p.repeat);
	free(res);
	return failed;
}
