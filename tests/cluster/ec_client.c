/*
 * ec_client: erasure-coded objects over several engines, driven by
 * ec_cluster_test.sh (which starts the engines and kills them between and during
 * commands). Every command prints "ok ..." and exits 0, or prints what
 * failed and exits 1.
 *
 *   ops ADDR CONT CLASS SEED N    N random writes, punches and reads of byte
 *                                 arrays of CLASS (S1, RP_2, EC_2P1, ...):
 *                                 whole stripes, partial ones, unaligned,
 *                                 spanning stripes, punched to far past the
 *                                 end; every read and size checked against a
 *                                 model in memory; single values and a
 *                                 chunked array of the class too.
 *   dops ADDR CONT CLASS SEED N   ops with engines lost. Sizes are exact (the
 *                                 end mark says a lost data member's end),
 *                                 but after a punch to past the end while a
 *                                 data member was lost they may reach as far
 *                                 as the punch's start: the model keeps that
 *                                 bound beside the exact size.
 *   verify ADDR CONT CLASS SEED N the state ops SEED N left (the model is
 *                                 replayed, nothing written) read back, and
 *                                 the sizes exact (within that bound for a
 *                                 seed dops wrote: EC_DOPS=1).
 *   cells ADDR CONT CLASS SEED N  every member's cells of those arrays,
 *                                 each read from its member alone, against
 *                                 the model (parity: their code)
 *   stream ADDR CONT CLASS SECS   full and partial stripe writes of new
 *                                 objects for SECS seconds, no error allowed;
 *                                 the count acknowledged printed, then every
 *                                 one read back.
 *   check ADDR CONT CLASS N       objects 0..N-1 of stream read back.
 *   race ADDR CONT CLASS WHO N    writer WHO (< k) of one array: a 4 KiB
 *                                 write into data cell WHO of stripes 0..N-1
 *                                 in turn, all at the same offset in the
 *                                 cell, so that k writers in k processes
 *                                 change the same parity ranges at about the
 *                                 same time (each starts at the second
 *                                 $RACE_START, if set).
 *   parity ADDR CONT CLASS N      after k race writers of N stripes: each
 *                                 member's bytes of those ranges read from
 *                                 the member itself; the data cells hold
 *                                 their writer's bytes, and the parity
 *                                 cells are the code of the data cells
 *                                 (as of EC_EPOCH, if set).
 *   tear ADDR CONT CLASS N        a writer that dies mid-write: takes the
 *                                 array's lease, writes writer 0's bytes of
 *                                 stripes 0..N-1 into data member 0 alone
 *                                 (no parity), and exits holding the lease.
 *   lease ADDR CONT CLASS W SECS  hold the race array's lease (W array),
 *                                 its dkey's (dkey) or its object's (obj),
 *                                 as a writer or a punch would; says "held"
 *                                 and gives it back after SECS.
 *   pick ADDR CONT CLASS ENGINE   the first race object index from 100 (or
 *                                 $RACE_PICK_FROM) up whose data member 0 is
 *                                 on engine ENGINE.
 *   ends ADDR CONT CLASS ENGINE W two arrays whose last data member (k - 1)
 *                                 is on engine ENGINE, made so that their
 *                                 sizes need the end mark when it is lost
 *                                 (W "write": written, then checked; else
 *                                 only checked): one ends in data member 0
 *                                 a stripe after member k - 1's last bytes
 *                                 (the parity reaches a cell further), one
 *                                 ends in 500 written zeros on member k - 1;
 *                                 and one of 200000 bytes whose first parity
 *                                 member is on ENGINE (and data member k - 1
 *                                 on engine $ENDS_ALSO, if set), which W
 *                                 "punch" punches from 150000 to far past
 *                                 its end. Their bytes and exact sizes are
 *                                 checked. "write" prints "ends objects I J
 *                                 K", their indexes (and checks that writes
 *                                 and punches of a mark's akey are refused,
 *                                 -EINVAL);
 *                                 "punch" and "check" (after the punch)
 *                                 take them from $ENDS_OBJS (the map may
 *                                 have moved them).
 *   straddle ADDR CONT CLASS N    one thread rewrites stripe 0 of an array
 *                                 whole, over and over, while N snapshots
 *                                 are taken (and destroyed); each snapshot's
 *                                 view of every member is read from the
 *                                 member alone, and a view whose parity is
 *                                 not the code of its data (a write the
 *                                 snapshot cut in two: decision 0012, the
 *                                 barrier in lode_snap_create) is counted.
 *                                 Exits 1 if any was.
 *   olist ADDR CONT CLASS N       N key-value objects of the container's
 *                                 class written, then listed: every listed
 *                                 id is a caller's and reads back.
 *   rread ADDR CONT CLASS N       read stripes 0..N-1 of the race array
 *                                 through the EC path; prints the result
 *                                 (with RREAD_GONE set, each must be
 *                                 absent: -ENOENT; with RREAD_ZEROS, each
 *                                 must read, and read zeros).
 *   punch ADDR CONT CLASS N       punch the race array's akey (under the
 *                                 lease; N is not used); dpunch its dkey,
 *                                 opunch its object; rpunch its range of
 *                                 stripes 0..N-1.
 *   sizes ADDR CONT CLASS SEED    the sizes of the arrays ops SEED writes,
 *                                 printed on one line (to compare them
 *                                 degraded and rebuilt).
 * The race commands work on race object $RACE_OBJ (1 if unset).
 * With EC_EPOCH=E in the environment, verify reads as of epoch E (a
 * snapshot). With EC_GEN=G, ops and verify use the single values of
 * generation G (default 0), and an odd G has the last one's dkey punched:
 * a snapshot's view of them is told from the latest. With EC_FROM=F, ops
 * takes its first F operations as done already (an earlier ops of the
 * same seed did them): replayed on the model only.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/client.h"
#include "ec/ec.h"
#include "layout/layout.h"
#include "lode/lode.h"

#define NARR 3
#define ARR_MAX (1536u << 10) /* the model's arrays: 1.5 MiB each */
#define SV_N 4

static lode_epoch_t at = LODE_EPOCH_MAX; /* EC_EPOCH */
static unsigned gen;                      /* EC_GEN */
static unsigned ops_from;                 /* EC_FROM */

static void die(const char *what, int rc)
{
	printf("FAIL %s: %d (%s)\n", what, rc, lode_strerror(rc));
	exit(1);
}

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Eight bytes a step: the model's CPU is most of a run under ASan. */
static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed | 1, v;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		v = rng(&x);
		memcpy(p + i, &v, 8);
	}
	v = rng(&x);
	memcpy(p + i, &v, n - i);
}

/* What the arrays should hold: bytes and which of them are written. A
 * byte never written, or punched, is 0 in data too, as a read returns it. */
struct model {
	uint8_t data[NARR][ARR_MAX];
	uint8_t written[NARR][ARR_MAX];
	uint8_t sv[SV_N][5000];
	uint32_t sv_len[SV_N];
	uint64_t bound[NARR]; /* the most a size may say (dops); the exact size otherwise */
};

static uint64_t model_size(const struct model *m, unsigned a)
{
	uint64_t i = ARR_MAX, w;

	for (; i >= 8; i -= 8) { /* a word at a time (ARR_MAX is a multiple of 8) */
		memcpy(&w, &m->written[a][i - 8], 8);
		if (w)
			break;
	}
	for (; i > 0; i--)
		if (m->written[a][i - 1])
			return i;
	return 0;
}

struct ctx {
	lode_cont_t *ct;
	unsigned cls;
	uint64_t seed;
	bool io;      /* false: replay the model only */
	bool degraded; /* dops, or a verify of what dops wrote: sizes within bound */
	struct model *m;
	unsigned stripe; /* bytes of a stripe of the class, or 64 KiB */
};

static struct lode_oid arr_oid(const struct ctx *x, unsigned a)
{
	return lode_oid_make(LODE_OT_ARRAY, x->cls, (uint32_t)(x->seed & 0xffffff), a);
}

static const struct lode_key akey = {"d", 1, "a", 1};

/* Where each member of o's group (dkey "d") is in the current map. */
static void print_group(struct ctx *x, struct lode_oid o)
{
	struct layout_class lc;
	struct layout_group g;

	layout_class_from_id(x->cls, &lc);
	pthread_mutex_lock(&x->ct->c->lock);
	if (layout_dkey_place(x->ct->c->map, o, &lc, conn_dkey_hash("d", 1), &g) == 0)
		for (unsigned m = 0; m < g.size; m++)
			printf("member %u: engine %u target %u%s (map version %llu)\n", m,
			       g.shard[m].engine, g.shard[m].tgt, g.shard[m].down ? " DOWN" : "",
			       (unsigned long long)x->ct->c->map->version);
	pthread_mutex_unlock(&x->ct->c->lock);
}

/* Bytes of a member's cells covering the model's arrays. */
static uint64_t member_span(const struct layout_class *lc)
{
	uint64_t sw = (uint64_t)lc->k * EC_IO_CELL;

	return (ARR_MAX + sw - 1) / sw * EC_IO_CELL;
}

/* What every member of array a holds by the model, member_span bytes each
 * into want[m]: a data member its cells, a parity member their code. */
static void model_cells(const struct ctx *x, const struct layout_class *lc,
			const struct ec_codec *codec, unsigned a, uint8_t **want)
{
	uint64_t cs = EC_IO_CELL, sw = lc->k * cs;

	for (uint64_t y = 0; y < ARR_MAX; y++)
		want[y / cs % lc->k][y / sw * cs + y % cs] = x->m->data[a][y];
	ec_encode(codec, want, want + lc->k, member_span(lc));
}

/* [off, off + len) of member m of array a, read from that member alone as
 * of the epoch the command reads at. */
static int member_read(struct ctx *x, unsigned a, unsigned m, uint64_t off, uint8_t *buf,
		       uint64_t len)
{
	struct creq *r = conn_key_req(x->ct, NET_OP_ARR_FETCH, arr_oid(x, a), &akey);

	if (!r)
		return -ENOMEM;
	memset(buf, 0xee, len);
	r->pinned = true;
	r->member = (uint8_t)m;
	r->a.off = off;
	r->a.epoch = at == LODE_EPOCH_MAX ? 0 : at;
	conn_value_in(r, buf, len);
	return creq_submit(r, NULL, NULL);
}

/*
 * After a wrong byte at array offset y of array a of an EC class: where
 * the group's members are, and 16 bytes of each member at the cell y is
 * in, read from that member alone as of the same epoch, beside what the
 * model says the member holds there, so that a failure says which member
 * was wrong.
 */
static void explain(struct ctx *x, unsigned a, uint64_t y)
{
	enum { N = 16 };
	struct layout_class lc;
	uint64_t sw, moff;
	uint8_t *want[EC_CELLS_MAX] = {0}, got[N];
	struct ec_codec *codec;

	if (layout_class_from_id(x->cls, &lc) < 0 || lc.redun != LAYOUT_R_EC ||
	    ec_codec_create(lc.k, lc.p, &codec) < 0)
		return;
	sw = lc.k * (uint64_t)EC_IO_CELL;
	moff = y / sw * EC_IO_CELL + y % EC_IO_CELL;
	for (unsigned m = 0; m < lc.k + lc.p; m++)
		if (!(want[m] = calloc(1, member_span(&lc) + N)))
			return;
	model_cells(x, &lc, codec, a, want);
	print_group(x, arr_oid(x, a));
	for (unsigned m = 0; m < lc.k + lc.p; m++) {
		int rc = member_read(x, a, m, moff, got, N);

		printf("member %u at %llu: rc %d, got", m, (unsigned long long)moff, rc);
		for (unsigned i = 0; i < N; i++)
			printf(" %02x", got[i]);
		printf(", model");
		for (unsigned i = 0; i < N; i++)
			printf(" %02x", want[m][moff + i]);
		printf("\n");
		free(want[m]);
	}
	ec_codec_destroy(codec);
}

static int check_read(struct ctx *x, unsigned a, uint64_t off, uint32_t len, const char *what)
{
	uint8_t *got = malloc(len);
	int rc;

	if (!got)
		die("malloc", -ENOMEM);
	memset(got, 0xee, len);
	rc = lode_obj_read(x->ct, arr_oid(x, a), at, &akey, off, got, len, NULL);
	if (rc == -ENOENT && model_size(x->m, a) == 0)
		rc = 0, memset(got, 0, len);
	if (rc < 0) {
		printf("FAIL %s: read %u [%llu, +%u): %d (%s)\n", what, a, (unsigned long long)off,
		       len, rc, lode_strerror(rc));
		exit(1);
	}
	/* Most reads match: one memcmp, then byte by byte only to name one. */
	if (off + len <= ARR_MAX && memcmp(got, &x->m->data[a][off], len) == 0) {
		free(got);
		return 0;
	}
	for (uint32_t i = 0; i < len; i++) {
		uint8_t want = off + i < ARR_MAX ? x->m->data[a][off + i] : 0;

		if (got[i] != want) {
			printf("FAIL %s: array %u byte %llu is %02x, not %02x (read [%llu, +%u))\n", what,
			       a, (unsigned long long)(off + i), got[i], want,
			       (unsigned long long)off, len);
			explain(x, a, off + i);
			exit(1);
		}
	}
	free(got);
	return 0;
}

/* One random operation of ops. */
static void one_op(struct ctx *x, uint64_t *s, unsigned i)
{
	unsigned a = (unsigned)(rng(s) % NARR), kind = (unsigned)(rng(s) % 100);
	uint64_t off, len;
	int rc;

	/* Offsets: aligned to a stripe, to 4 KiB, or anywhere. */
	switch (rng(s) % 3) {
	case 0:
		off = rng(s) % (ARR_MAX / x->stripe) * x->stripe;
		break;
	case 1:
		off = rng(s) % (ARR_MAX / 4096) * 4096;
		break;
	default:
		off = rng(s) % ARR_MAX;
	}
	switch (rng(s) % 4) {
	case 0:
		len = 1 + rng(s) % 100;
		break;
	case 1:
		len = x->stripe * (1 + rng(s) % 3);
		break;
	case 2:
		len = 4096;
		break;
	default:
		len = 1 + rng(s) % (300u << 10);
	}
	if (off + len > ARR_MAX)
		len = ARR_MAX - off;
	if (len == 0)
		len = 1, off = ARR_MAX - 1;
	if (kind < 45) {
		uint8_t *b = malloc(len);

		fill(b, len, x->seed * 1000003 + i);
		if (x->io && (rc = lode_obj_write(x->ct, arr_oid(x, a), &akey, off, b,
						  (uint32_t)len, NULL)) < 0) {
			printf("FAIL op %u: write %u [%llu, +%llu): %d (%s)\n", i, a,
			       (unsigned long long)off, (unsigned long long)len, rc,
			       lode_strerror(rc));
			exit(1);
		}
		memcpy(&x->m->data[a][off], b, len);
		memset(&x->m->written[a][off], 1, len);
		if (off + len > x->m->bound[a])
			x->m->bound[a] = off + len;
		free(b);
	} else if (kind < 60) {
		/* Sometimes to far past the end, as truncate does. */
		uint64_t plen = kind < 50 ? (1ull << 40) : len;

		if (x->io && (rc = lode_range_punch(x->ct, arr_oid(x, a), &akey, off, plen, NULL)) < 0) {
			printf("FAIL op %u: punch %u [%llu, +%llu): %d (%s)\n", i, a,
			       (unsigned long long)off, (unsigned long long)plen, rc,
			       lode_strerror(rc));
			exit(1);
		}
		memset(&x->m->written[a][off], 0, plen > ARR_MAX - off ? ARR_MAX - off : plen);
		memset(&x->m->data[a][off], 0, plen > ARR_MAX - off ? ARR_MAX - off : plen);
		/* A punch to the end mark's end sets it again: at the size now,
		 * or (a data member lost) as far as the punch's start. */
		if (off + plen >= x->m->bound[a]) {
			uint64_t sz = model_size(x->m, a), b = x->m->bound[a];

			x->m->bound[a] = x->degraded && (off < b ? off : b) > sz ? (off < b ? off : b) : sz;
		}
	} else if (kind < 90) {
		if (x->io)
			check_read(x, a, off, (uint32_t)len, "read");
	} else if (x->io) {
		uint64_t size = 0;

		if ((rc = lode_obj_size(x->ct, arr_oid(x, a), LODE_EPOCH_MAX, &akey, &size)) < 0 &&
		    rc != -ENOENT)
			die("size", rc);
		if (size < model_size(x->m, a) || size > x->m->bound[a]) {
			printf("FAIL op %u: array %u size %llu, not %llu (at most %llu)\n", i, a,
			       (unsigned long long)size, (unsigned long long)model_size(x->m, a),
			       (unsigned long long)x->m->bound[a]);
			exit(1);
		}
	}
}

/* Four writes in flight at once with events, then four reads: each completes
 * through the queue with its own result (EC calls run on worker threads). */
static void events(struct ctx *x, bool write)
{
	struct lode_oid o = lode_oid_make(LODE_OT_ARRAY, x->cls, (uint32_t)(x->seed & 0xffffff), 97);
	enum { N = 4, LEN = 200000 };
	static uint8_t want[N][LEN], got[N][LEN];
	lode_event_t ev[N] = {{0}}, *done[N];
	lode_eq_t *eq;
	int rc, n = 0;

	if ((rc = lode_eq_create(&eq)) < 0)
		die("eq create", rc);
	for (int pass = write ? 0 : 1; pass < 2; pass++) {
		for (int i = 0; i < N; i++) {
			uint64_t off = (uint64_t)i * 300000 + 777;

			fill(want[i], LEN, x->seed * 31 + (uint64_t)i);
			memset(got[i], 0xee, LEN);
			if ((rc = lode_event_init(&ev[i], eq)) < 0)
				die("event init", rc);
			rc = pass ? lode_obj_read(x->ct, o, at, &akey, off, got[i], LEN, &ev[i])
				  : lode_obj_write(x->ct, o, &akey, off, want[i], LEN, &ev[i]);
			if (rc < 0)
				die(pass ? "read with an event" : "write with an event", rc);
		}
		for (n = 0; n < N;) {
			int got_n = lode_eq_poll(eq, 1, N, -1, done);

			if (got_n < 0)
				die("eq poll", got_n);
			for (int i = 0; i < got_n; i++)
				if (done[i]->rc < 0)
					die("an event's result", done[i]->rc);
			n += got_n;
		}
	}
	for (int i = 0; i < N; i++)
		if (memcmp(got[i], want[i], LEN))
			die("bytes written and read with events differ", -EIO);
	lode_eq_destroy(eq);
}

/* Single values and a chunked array of the class: written by ops, checked by both. */
static void extras(struct ctx *x, bool write)
{
	struct lode_oid o = lode_oid_make(LODE_OT_KV, x->cls, (uint32_t)(x->seed & 0xffffff), 99);
	struct lode_oid ao = lode_oid_make(LODE_OT_ARRAY, x->cls, (uint32_t)(x->seed & 0xffffff), 98);
	size_t alen = (3u << 20) + 12345;
	uint8_t *want = malloc(alen), *got = malloc(alen);
	int rc;

	fill(want, alen, x->seed + 77);
	for (unsigned j = 0; j < SV_N; j++) {
		char dk[16];
		struct lode_key k = {dk, 0, "v", 1};
		uint8_t buf[5000];
		uint32_t len = 0;
		bool gone = gen % 2 == 1 && j == SV_N - 1;

		k.dkey_len = (uint32_t)snprintf(dk, sizeof(dk), "sv%u", j);
		x->m->sv_len[j] = 100 + 1000 * j;
		fill(x->m->sv[j], x->m->sv_len[j], x->seed + j + 7919ull * gen);
		if (write && (rc = gone ? lode_dkey_punch(x->ct, o, &k, NULL)
					: lode_obj_update(x->ct, o, &k, x->m->sv[j], x->m->sv_len[j],
							  NULL)) < 0)
			die("sv update", rc);
		if (!x->io)
			continue;
		rc = lode_obj_fetch(x->ct, o, at, &k, buf, sizeof(buf), &len, NULL);
		if (gone) {
			if (rc != -ENOENT)
				die("a punched single value's fetch", rc < 0 ? rc : -EEXIST);
			continue;
		}
		if (rc < 0)
			die("sv fetch", rc);
		if (len != x->m->sv_len[j] || memcmp(buf, x->m->sv[j], len))
			die("sv bytes differ", -EIO);
	}
	if (write && (rc = lode_array_write(x->ct, ao, 0, 777, want, alen, NULL)) < 0)
		die("array write", rc);
	if (write) {
		/* Zeros written where nothing was: the array has a size and an akey
		 * (its parity holds zeros, not a punch). */
		struct lode_oid zo = lode_oid_make(LODE_OT_ARRAY, x->cls, (uint32_t)(x->seed & 0xffffff), 96);
		struct lode_key zk = {"z", 1, "a", 1};
		struct lode_anchor an = {0};
		uint64_t zsize = 0;
		uint8_t zeros[4096] = {0}, names[64];
		int nk;

		if ((rc = lode_obj_write(x->ct, zo, &zk, 1 << 20, zeros, sizeof(zeros), NULL)) < 0)
			die("write of zeros", rc);
		if ((rc = lode_obj_size(x->ct, zo, LODE_EPOCH_MAX, &zk, &zsize)) < 0)
			die("size after zeros", rc);
		if (zsize != (1 << 20) + sizeof(zeros)) {
			printf("FAIL size after a write of zeros: %llu\n", (unsigned long long)zsize);
			exit(1);
		}
		if ((nk = lode_akey_list(x->ct, zo, &zk, LODE_EPOCH_MAX, &an, names, sizeof(names))) != 1)
			die("akey list after a write of zeros", nk < 0 ? nk : -ENOENT);
		/* A punch at the top of the offsets touches nothing below. */
		if ((rc = lode_range_punch(x->ct, arr_oid(x, 0), &akey, UINT64_MAX - 100, 50, NULL)) < 0)
			die("punch at the top", rc);
	}
	if (x->io) {
		if ((rc = lode_array_read(x->ct, ao, 0, at, 777, got, alen, NULL)) < 0)
			die("array read", rc);
		if (memcmp(got, want, alen))
			die("chunked array bytes differ", -EIO);
		/* Its size comes from listing its chunks (dkeys) and their sizes. */
		uint64_t size = 0;

		if ((rc = lode_array_size(x->ct, ao, 0, at, &size)) < 0)
			die("array size", rc);
		if (size != 777 + alen) {
			printf("FAIL chunked array size %llu, not %zu\n", (unsigned long long)size,
			       777 + alen);
			exit(1);
		}
		/* The single values' dkeys, each listed once. */
		struct lode_anchor an = {0};
		int n = lode_dkey_list(x->ct, o, at, &an, got, alen), total = 0;

		while (n > 0) {
			total += n;
			n = an.eof ? 0 : lode_dkey_list(x->ct, o, at, &an, got, alen);
		}
		if (n < 0)
			die("dkey list", n);
		if (total != SV_N - (int)(gen % 2)) {
			printf("FAIL %d dkeys listed, not %d\n", total, SV_N - (int)(gen % 2));
			exit(1);
		}
	}
	free(want);
	free(got);
}

static void open_cont(const char *addr, const char *label, lode_conn_t **c, lode_cont_t **ct)
{
	int rc;

	if ((rc = lode_connect(addr, NULL, c)) < 0)
		die("connect", rc);
	if ((rc = lode_cont_open(*c, label, ct)) < 0)
		die("cont open", rc);
}

static int cmd_ops(struct ctx *x, unsigned n, bool verify)
{
	uint64_t s = x->seed * 0x9e3779b97f4a7c15ull | 1;

	for (unsigned i = 0; i < n; i++) {
		x->io = !verify && i >= ops_from;
		one_op(x, &s, i);
	}
	x->io = true;
	extras(x, !verify);
	events(x, !verify);
	for (unsigned a = 0; a < NARR; a++) {
		uint64_t size = 0;
		int rc;

		check_read(x, a, 0, ARR_MAX, verify ? "verify" : "final read");
		if ((rc = lode_obj_size(x->ct, arr_oid(x, a), at, &akey, &size)) < 0 &&
		    rc != -ENOENT)
			die("size", rc);
		/* Exact, degraded or rebuilt: the end mark says it (a bound
		 * only after dops's punches with a data member lost). */
		if (size < model_size(x->m, a) || size > x->m->bound[a]) {
			printf("FAIL array %u size %llu, model %llu (at most %llu)\n", a,
			       (unsigned long long)size, (unsigned long long)model_size(x->m, a),
			       (unsigned long long)x->m->bound[a]);
			return 1;
		}
	}
	printf("ok   %s seed %llu: %u operations, every byte and size as the model says\n",
	       verify ? "verify" : "ops", (unsigned long long)x->seed, n);
	return 0;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Object i of stream: a whole stripe and a bit at 0, a partial write inside. */
static int stream_obj(struct ctx *x, unsigned i, bool write)
{
	struct lode_oid o = lode_oid_make(LODE_OT_ARRAY, x->cls, 0x57ea, i);
	uint32_t n = x->stripe + 5000;
	uint8_t *want = malloc(n), *got = malloc(n);
	int rc;

	fill(want, n, i + 1);
	if (write) {
		if ((rc = lode_obj_write(x->ct, o, &akey, 0, want, n, NULL)) == 0)
			rc = lode_obj_write(x->ct, o, &akey, 1000, want + 1000, 3000, NULL);
	} else {
		rc = lode_obj_read(x->ct, o, LODE_EPOCH_MAX, &akey, 0, got, n, NULL);
		if (rc == 0 && memcmp(got, want, n)) {
			uint32_t b = 0, e = n, bad = 0;

			while (got[b] == want[b])
				b++;
			while (got[e - 1] == want[e - 1])
				e--;
			for (uint32_t j = b; j < e; j++)
				bad += got[j] != want[j];
			printf("object %u: %u bytes differ in [%u, %u)\n", i, bad, b, e);
			rc = 1;
		}
	}
	free(want);
	free(got);
	return rc;
}

/* Which members of stream object i hold what they should (EC_2P1): for a failure's report. */
static void members(struct ctx *x, unsigned i)
{
	struct lode_oid o = lode_oid_make(LODE_OT_ARRAY, x->cls, 0x57ea, i);
	uint32_t n = x->stripe + 5000, cs = 64u << 10;
	uint8_t *want = malloc(n), *cell[3], *got = malloc(cs + 5000);
	struct ec_codec *codec;

	fill(want, n, i + 1);
	cell[0] = calloc(1, cs + 5000);
	cell[1] = calloc(1, cs + 5000);
	cell[2] = calloc(1, cs + 5000);
	memcpy(cell[0], want, cs);
	memcpy(cell[0] + cs, want + 2 * cs, 5000);
	memcpy(cell[1], want + cs, cs);
	ec_codec_create(2, 1, &codec);
	print_group(x, o);
	ec_encode(codec, cell, cell + 2, cs + 5000);
	for (unsigned m = 0; m < 3; m++) {
		struct creq *r = conn_key_req(x->ct, NET_OP_ARR_FETCH, o, &akey);
		int rc;

		r->pinned = true;
		r->member = (uint8_t)m;
		conn_value_in(r, got, m == 1 ? cs : cs + 5000);
		rc = creq_submit(r, NULL, NULL);
		printf("member %u: rc %d, %s\n", m, rc,
		       rc ? "-" : memcmp(got, cell[m], m == 1 ? cs : cs + 5000) ? "WRONG" : "right");
	}
}

/* ---- writers of one stripe in several processes ---- */

#define RACE_OFF 8192u /* in the cell */
#define RACE_LEN 4096u

static uint32_t race_obj(void)
{
	const char *e = getenv("RACE_OBJ");

	return e && *e ? (uint32_t)strtoul(e, NULL, 10) : 1;
}

static struct lode_oid race_oid(const struct ctx *x)
{
	return lode_oid_make(LODE_OT_ARRAY, x->cls, 0x4ace, race_obj());
}

static uint64_t race_seed(unsigned who, unsigned s)
{
	return ((uint64_t)who + 1) * 1000003u + (uint64_t)s * 7919u;
}

static int cmd_race(struct ctx *x, unsigned who, unsigned n)
{
	const char *start = getenv("RACE_START");
	uint8_t buf[RACE_LEN];
	int rc;

	while (start && time(NULL) < (time_t)strtoll(start, NULL, 10))
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	for (unsigned s = 0; s < n; s++) {
		fill(buf, sizeof(buf), race_seed(who, s));
		rc = lode_obj_write(x->ct, race_oid(x), &akey,
				    (uint64_t)s * x->stripe + (uint64_t)who * (64u << 10) + RACE_OFF, buf,
				    sizeof(buf), NULL);
		if (rc < 0) {
			printf("FAIL writer %u stripe %u: %d (%s)\n", who, s, rc, lode_strerror(rc));
			return 1;
		}
	}
	printf("ok   writer %u: %u partial-stripe writes\n", who, n);
	return 0;
}

static int cmd_parity(struct ctx *x, const struct layout_class *lc, unsigned n)
{
	unsigned nm = lc->k + lc->p;
	uint8_t *cell[EC_CELLS_MAX], want[RACE_LEN], par[EC_P_MAX][RACE_LEN];
	struct ec_codec *codec;
	int bad = 0;

	if (lc->redun != LAYOUT_R_EC || ec_codec_create(lc->k, lc->p, &codec) < 0) {
		printf("FAIL parity needs an EC class\n");
		return 1;
	}
	for (unsigned m = 0; m < nm; m++)
		cell[m] = malloc(RACE_LEN);
	for (unsigned s = 0; s < n; s++) {
		for (unsigned m = 0; m < nm; m++) {
			struct creq *r = conn_key_req(x->ct, NET_OP_ARR_FETCH, race_oid(x), &akey);
			int rc;

			r->pinned = true;
			r->member = (uint8_t)m;
			r->a.off = (uint64_t)s * (64u << 10) + RACE_OFF;
			r->a.epoch = at == LODE_EPOCH_MAX ? 0 : at; /* EC_EPOCH: a snapshot's */
			conn_value_in(r, cell[m], RACE_LEN);
			if ((rc = creq_submit(r, NULL, NULL)) < 0) {
				printf("FAIL stripe %u member %u: %d (%s)\n", s, m, rc, lode_strerror(rc));
				return 1;
			}
		}
		for (unsigned w = 0; w < lc->k; w++) {
			fill(want, RACE_LEN, race_seed(w, s));
			if (memcmp(cell[w], want, RACE_LEN) != 0) {
				printf("FAIL stripe %u: data cell %u is not what its writer wrote\n", s, w);
				bad++;
			}
		}
		uint8_t *pp[EC_P_MAX];

		for (unsigned j = 0; j < lc->p; j++)
			pp[j] = par[j];
		ec_encode(codec, cell, pp, RACE_LEN);
		for (unsigned j = 0; j < lc->p; j++)
			if (memcmp(par[j], cell[lc->k + j], RACE_LEN) != 0) {
				printf("FAIL stripe %u: parity cell %u is not the code of the data cells\n",
				       s, j);
				bad++;
			}
	}
	for (unsigned m = 0; m < nm; m++)
		free(cell[m]);
	ec_codec_destroy(codec);
	if (!bad)
		printf("ok   %u stripes: data cells as written, parity their code\n", n);
	else
		printf("FAIL %d cells of %u stripes wrong\n", bad, n);
	return bad ? 1 : 0;
}

/*
 * cells: after the model of ops SEED N (replayed, nothing written), every
 * member of each array, read from that member alone as of EC_EPOCH (or the
 * latest): a data member holds the model's bytes of its cells, a parity
 * member their code, up to the end of the arrays' range (past a member's
 * extent it reads as zeros). Members whose engine is lost are left out.
 * This checks a rebuilt member directly, a parity member included, which
 * reads of the arrays touch only once a data member is lost.
 */
static int cmd_cells(struct ctx *x, const struct layout_class *lc, unsigned n)
{
	uint64_t ms = member_span(lc), s = x->seed * 0x9e3779b97f4a7c15ull | 1;
	unsigned nm = lc->k + lc->p;
	uint8_t *want[EC_CELLS_MAX], *got = malloc(ms);
	struct ec_codec *codec;
	int bad = 0, lost = 0;

	if (lc->redun != LAYOUT_R_EC || !got || ec_codec_create(lc->k, lc->p, &codec) < 0) {
		printf("FAIL cells needs an EC class\n");
		return 1;
	}
	for (unsigned i = 0; i < n; i++) {
		x->io = false;
		one_op(x, &s, i);
	}
	for (unsigned m = 0; m < nm; m++)
		want[m] = calloc(1, ms);
	for (unsigned a = 0; a < NARR; a++) {
		model_cells(x, lc, codec, a, want);
		for (unsigned m = 0; m < nm; m++) {
			int rc = member_read(x, a, m, 0, got, ms);

			if (rc == -ENOENT)
				rc = 0, memset(got, 0, ms);
			if (rc == -EHOSTDOWN || rc == -LODE_EFENCED) {
				lost++;
				continue;
			}
			if (rc < 0) {
				printf("FAIL array %u member %u: %d (%s)\n", a, m, rc, lode_strerror(rc));
				bad++;
				continue;
			}
			for (uint64_t o = 0; o < ms; o++)
				if (got[o] != want[m][o]) {
					printf("FAIL array %u member %u byte %llu is %02x, not %02x\n", a, m,
					       (unsigned long long)o, got[o], want[m][o]);
					print_group(x, arr_oid(x, a));
					bad++;
					break;
				}
		}
	}
	for (unsigned m = 0; m < nm; m++)
		free(want[m]);
	free(got);
	ec_codec_destroy(codec);
	if (bad)
		return 1;
	printf("ok   cells of seed %llu: %u arrays, every member as the model says (%d lost)\n",
	       (unsigned long long)x->seed, NARR, lost);
	return 0;
}

/* Send a pinned request of the race array to member m; its result. */
static int race_raw(struct ctx *x, uint16_t op, unsigned m, uint64_t off, uint64_t len,
		    const void *out)
{
	struct creq *r = conn_key_req(x->ct, op, race_oid(x), &akey);
	int rc;

	if (!r)
		return -ENOMEM;
	r->pinned = true;
	r->member = (uint8_t)m;
	r->a.off = off;
	r->a.len = len;
	if (out && (rc = conn_value_out(r, out, len)) < 0) {
		creq_free(r);
		return rc;
	}
	return creq_submit(r, NULL, NULL);
}

static int cmd_tear(struct ctx *x, const struct layout_class *lc, unsigned n)
{
	uint8_t buf[RACE_LEN];
	int rc;

	struct creq *r = conn_key_req(x->ct, NET_OP_LEASE, race_oid(x), &akey);
	uint8_t torn_range[16];

	/* The lease lives on the first parity member while all are UP; the
	 * write covers stripes 0..n-1 of every member. */
	if (!r)
		return 1;
	r->pinned = true;
	r->member = (uint8_t)lc->k;
	r->a.epoch = 0x7ea7; /* the token */
	r->a.off = 0;
	r->a.len = (uint64_t)n * (64u << 10);
	r->a.max = 60000;
	r->in = torn_range; /* an array torn before says where */
	r->in_cap = sizeof(torn_range);
	if ((rc = creq_submit(r, NULL, NULL)) < 0) {
		printf("FAIL tear: the lease: %d (%s)\n", rc, lode_strerror(rc));
		return 1;
	}
	for (unsigned s = 0; s < n; s++) {
		fill(buf, sizeof(buf), race_seed(0, s));
		if ((rc = race_raw(x, NET_OP_ARR_UPDATE, 0, (uint64_t)s * (64u << 10) + RACE_OFF,
				   RACE_LEN, buf)) < 0) {
			printf("FAIL tear: stripe %u: %d (%s)\n", s, rc, lode_strerror(rc));
			return 1;
		}
	}
	printf("ok   data member 0 of %u stripes written, no parity, the lease held\n", n);
	fflush(stdout);
	_exit(0); /* no give-back, no goodbye: as a crash */
}

/*
 * Hold the race array's lease (array), its dkey's (dkey) or its object's
 * (obj) on its lease host (the first parity member, all UP), as a writer
 * or a punch would, for secs; then give it back and exit. Says "held"
 * once it holds it.
 */
static int cmd_lease(struct ctx *x, const struct layout_class *lc, const char *what, unsigned secs)
{
	uint32_t scope = !strcmp(what, "dkey") ? NET_F_LEASE_DKEY
			 : !strcmp(what, "obj") ? NET_F_LEASE_OBJ : 0;
	uint8_t torn_range[16];
	int rc;

	for (int give = 0; give < 2; give++) {
		struct creq *r = conn_key_req(x->ct, NET_OP_LEASE, race_oid(x), &akey);

		if (!r)
			return 1;
		r->pinned = true;
		r->member = (uint8_t)lc->k;
		r->hflags = scope;
		r->a.epoch = 0x1ea5e; /* the token */
		r->a.len = UINT64_MAX;
		r->a.max = give ? 0 : 60000;
		r->in = torn_range;
		r->in_cap = sizeof(torn_range);
		if ((rc = creq_submit(r, NULL, NULL)) < 0) {
			printf("FAIL lease %s: %d (%s)\n", what, rc, lode_strerror(rc));
			return 1;
		}
		if (!give) {
			printf("held the %s lease\n", what);
			fflush(stdout);
			sleep(secs);
		}
	}
	printf("ok   the %s lease held for %u s and given back\n", what, secs);
	return 0;
}

static int cmd_pick(struct ctx *x, const struct layout_class *lc, uint32_t engine)
{
	const char *from = getenv("RACE_PICK_FROM");

	for (uint32_t i = from ? (uint32_t)strtoul(from, NULL, 10) : 100; i < 100000; i++) {
		struct layout_group g;
		bool hit = false;

		pthread_mutex_lock(&x->ct->c->lock);
		if (layout_dkey_place(x->ct->c->map, lode_oid_make(LODE_OT_ARRAY, x->cls, 0x4ace, i),
				      lc, conn_dkey_hash("d", 1), &g) == 0)
			hit = g.shard[0].engine == engine;
		pthread_mutex_unlock(&x->ct->c->lock);
		if (hit) {
			printf("%u\n", i);
			return 0;
		}
	}
	printf("FAIL no object has member 0 on engine %u\n", engine);
	return 1;
}

/* The index of the i-th array (from 0) of ends whose member m is on engine
 * (and, for m >= k with $ENDS_ALSO set, data member k - 1 on that engine). */
static uint32_t ends_pick(struct ctx *x, const struct layout_class *lc, uint32_t engine,
			  unsigned m, unsigned i)
{
	const char *also = m >= lc->k ? getenv("ENDS_ALSO") : NULL;

	for (uint32_t n = 0; n < 100000; n++) {
		struct lode_oid o = lode_oid_make(LODE_OT_ARRAY, x->cls, 0xe0d, n);
		struct layout_group g;
		bool hit = false;

		pthread_mutex_lock(&x->ct->c->lock);
		if (layout_dkey_place(x->ct->c->map, o, lc, conn_dkey_hash("d", 1), &g) == 0)
			hit = g.shard[m].engine == engine &&
			      (!also || g.shard[lc->k - 1].engine == (uint32_t)strtoul(also, NULL, 10));
		pthread_mutex_unlock(&x->ct->c->lock);
		if (hit && i-- == 0)
			return n;
	}
	printf("FAIL no object has member %u on engine %u\n", m, engine);
	exit(1);
}

#define ENDS_N 3

static int cmd_ends(struct ctx *x, const struct layout_class *lc, uint32_t engine, const char *mode)
{
	bool write = !strcmp(mode, "write"), punch_now = !strcmp(mode, "punch");
	uint64_t cell = EC_IO_CELL, stripe = lc->k * cell, last = (lc->k - 1) * cell;
	/* [off, off + len) of each: nonzero bytes (fill), or zeros (z); then
	 * what is punched from punch on (0: nothing). */
	struct {
		uint64_t off, len;
		bool z;
	} w[ENDS_N][2] = {{{0, last + 34464, false}, {stripe, 1000, false}},
			  {{0, 1000, false}, {last, 500, true}},
			  {{0, 200000, false}, {0, 0, false}}};
	uint64_t end[ENDS_N] = {stripe + 1000, last + 500, write ? 200000 : 150000};
	uint32_t idx[ENDS_N] = {0};
	const char *objs = getenv("ENDS_OBJS");

	if (write) {
		idx[0] = ends_pick(x, lc, engine, lc->k - 1, 0);
		idx[1] = ends_pick(x, lc, engine, lc->k - 1, 1);
		idx[2] = ends_pick(x, lc, engine, lc->k, 0);
		printf("ends objects %u %u %u\n", idx[0], idx[1], idx[2]);
		/* A mark's akey is the library's: writes to it are refused. */
		static const struct lode_key mk = {"d", 1, "\0endx", 5};
		struct lode_oid o = lode_oid_make(LODE_OT_ARRAY, x->cls, 0xe0d, idx[0]);
		int rc1 = lode_obj_write(x->ct, o, &mk, 0, "z", 1, NULL);
		int rc2 = lode_obj_update(x->ct, o, &mk, "z", 1, NULL);
		int rc3 = lode_range_punch(x->ct, o, &mk, 0, 1, NULL);
		int rc4 = lode_akey_punch(x->ct, o, &mk, NULL);

		if (rc1 != -EINVAL || rc2 != -EINVAL || rc3 != -EINVAL || rc4 != -EINVAL) {
			printf("FAIL writes and punches of an end mark's akey: %d, %d, %d, %d, "
			       "not -EINVAL\n", rc1, rc2, rc3, rc4);
			return 1;
		}
	} else if (!objs || sscanf(objs, "%u %u %u", &idx[0], &idx[1], &idx[2]) != ENDS_N) {
		printf("FAIL ends check needs ENDS_OBJS=\"I J K\"\n");
		return 1;
	}
	for (unsigned a = 0; a < ENDS_N; a++) {
		struct lode_oid o = lode_oid_make(LODE_OT_ARRAY, x->cls, 0xe0d, idx[a]);
		uint8_t *want = calloc(1, 200000), *got = malloc(200000);
		uint64_t size = 0;
		int rc;

		if (!want || !got)
			die("malloc", -ENOMEM);
		for (unsigned j = 0; j < 2 && w[a][j].len; j++) {
			if (!w[a][j].z)
				fill(want + w[a][j].off, w[a][j].len, 1000 * a + j + 1);
			if (write && (rc = lode_obj_write(x->ct, o, &akey, w[a][j].off,
							  want + w[a][j].off, (uint32_t)w[a][j].len,
							  NULL)) < 0)
				die("ends write", rc);
		}
		/* "punch": to far past the end, as truncate does, with the
		 * array's parity member lost (nothing to keep its mark on). */
		if (a == 2 && punch_now &&
		    (rc = lode_range_punch(x->ct, o, &akey, 150000, 1ull << 40, NULL)) < 0)
			die("ends punch", rc);
		if ((rc = lode_obj_size(x->ct, o, LODE_EPOCH_MAX, &akey, &size)) < 0)
			die("ends size", rc);
		if (size != end[a]) {
			printf("FAIL ends array %u size %llu, not %llu\n", a, (unsigned long long)size,
			       (unsigned long long)end[a]);
			print_group(x, o);
			return 1;
		}
		memset(got, 0xee, end[a]);
		if ((rc = lode_obj_read(x->ct, o, LODE_EPOCH_MAX, &akey, 0, got, (uint32_t)end[a],
					NULL)) < 0)
			die("ends read", rc);
		if (memcmp(got, want, end[a])) {
			printf("FAIL ends array %u reads back other bytes\n", a);
			return 1;
		}
		free(want);
		free(got);
	}
	printf("ok   ends: the arrays read back, sizes %llu, %llu and %llu\n",
	       (unsigned long long)end[0], (unsigned long long)end[1], (unsigned long long)end[2]);
	return 0;
}

struct straddle {
	struct ctx *x;
	struct lode_oid o;
	unsigned len; /* a stripe */
	atomic_bool stop;
	unsigned writes;
};

static void *straddle_writer(void *arg)
{
	struct straddle *sd = arg;
	uint8_t *b = malloc(sd->len);

	for (uint64_t i = 1; b && !atomic_load(&sd->stop); i++) {
		int rc;

		fill(b, sd->len, i);
		if ((rc = lode_obj_write(sd->x->ct, sd->o, &akey, 0, b, sd->len, NULL)) < 0)
			die("straddle write", rc);
		sd->writes++;
	}
	free(b);
	return NULL;
}

static int cmd_straddle(struct ctx *x, const struct layout_class *lc, unsigned n)
{
	unsigned nm = lc->k + lc->p, cut = 0;
	struct straddle sd = {.x = x, .len = lc->k * EC_IO_CELL};
	uint8_t *cell[EC_CELLS_MAX], *par[EC_P_MAX];
	struct ec_codec *codec;
	pthread_t th;
	int rc;

	if (lc->redun != LAYOUT_R_EC || ec_codec_create(lc->k, lc->p, &codec) < 0) {
		printf("FAIL straddle needs an EC class\n");
		return 1;
	}
	sd.o = lode_oid_make(LODE_OT_ARRAY, x->cls, 0x57a, 0);
	for (unsigned m = 0; m < nm; m++)
		cell[m] = malloc(EC_IO_CELL);
	for (unsigned j = 0; j < lc->p; j++)
		par[j] = malloc(EC_IO_CELL);
	pthread_create(&th, NULL, straddle_writer, &sd);
	for (unsigned i = 0; i < n; i++) {
		lode_epoch_t e;

		usleep(1000 + (unsigned)(rng(&x->seed) % 4000));
		if ((rc = lode_snap_create(x->ct, &e)) < 0)
			die("straddle snapshot", rc);
		for (unsigned m = 0; m < nm; m++) {
			struct creq *r = conn_key_req(x->ct, NET_OP_ARR_FETCH, sd.o, &akey);

			memset(cell[m], 0, EC_IO_CELL);
			r->pinned = true;
			r->member = (uint8_t)m;
			r->a.epoch = e;
			conn_value_in(r, cell[m], EC_IO_CELL);
			if ((rc = creq_submit(r, NULL, NULL)) < 0 && rc != -ENOENT)
				die("straddle member read", rc);
		}
		ec_encode(codec, cell, par, EC_IO_CELL);
		for (unsigned j = 0; j < lc->p; j++)
			if (memcmp(par[j], cell[lc->k + j], EC_IO_CELL) != 0) {
				cut++;
				break;
			}
		if ((rc = lode_snap_destroy(x->ct, e)) < 0)
			die("straddle snapshot destroy", rc);
	}
	atomic_store(&sd.stop, true);
	pthread_join(th, NULL);
	for (unsigned m = 0; m < nm; m++)
		free(cell[m]);
	for (unsigned j = 0; j < lc->p; j++)
		free(par[j]);
	ec_codec_destroy(codec);
	printf("%s straddle: %u of %u snapshots cut a write in two (%u writes meanwhile)\n",
	       cut ? "FAIL" : "ok  ", cut, n, sd.writes);
	return cut ? 1 : 0;
}

/*
 * Objects of the container's class (class byte 0) as lode_obj_list gives
 * them: n key-value objects written, then every object listed; each listed
 * id is a caller's (type below 16: no member's own id, decision 0017), and
 * each written one is there and reads back through the id listed.
 */
static int cmd_olist(struct ctx *x, unsigned n)
{
	struct lode_anchor an = {0};
	struct lode_oid got[256];
	unsigned listed = 0;
	char v[32], back[32];
	bool *seen = calloc(n ? n : 1, sizeof(*seen));
	uint32_t len;
	int rc, nb;

	if (!seen)
		die("olist", -ENOMEM);
	for (unsigned i = 0; i < n; i++) {
		snprintf(v, sizeof(v), "olist-%u", i);
		if ((rc = lode_kv_put(x->ct, lode_oid_make(LODE_OT_KV, 0, 0x0115, i), "k", v,
				      strlen(v), NULL)) < 0)
			die("olist put", rc);
	}
	while (!an.eof) {
		if ((nb = lode_obj_list(x->ct, LODE_EPOCH_MAX, &an, got, 256)) < 0)
			die("obj list", nb);
		for (int i = 0; i < nb; i++, listed++) {
			if (lode_oid_type(got[i]) >= 16) {
				printf("FAIL listed id %016llx.%016llx names a member\n",
				       (unsigned long long)got[i].hi, (unsigned long long)got[i].lo);
				return 1;
			}
			if ((got[i].hi & LODE_OID_USER_MASK) != 0x0115 || lode_oid_class(got[i]) != 0 ||
			    got[i].lo >= n)
				continue;
			if ((rc = lode_kv_get(x->ct, got[i], "k", back, sizeof(back) - 1, &len,
					      NULL)) < 0)
				die("olist get of a listed id", rc);
			back[len < sizeof(back) ? len : sizeof(back) - 1] = 0;
			snprintf(v, sizeof(v), "olist-%llu", (unsigned long long)got[i].lo);
			if (strcmp(back, v) != 0) {
				printf("FAIL listed object %llu reads '%s'\n",
				       (unsigned long long)got[i].lo, back);
				return 1;
			}
			seen[got[i].lo] = true;
		}
	}
	for (unsigned i = 0; i < n; i++)
		if (!seen[i]) {
			printf("FAIL object %u is not in a list of %u\n", i, listed);
			return 1;
		}
	free(seen);
	printf("ok   %u objects of the container's class listed by their own ids (%u listed)\n",
	       n, listed);
	return 0;
}

static int cmd_rread(struct ctx *x, unsigned n)
{
	uint8_t buf[RACE_LEN];

	bool gone = getenv("RREAD_GONE"); /* punched: absent, as a replicated array is */
	bool zeros = getenv("RREAD_ZEROS"); /* its range punched: zeros, as a replicated one */

	for (unsigned s = 0; s < n; s++) {
		int rc = lode_obj_read(x->ct, race_oid(x), LODE_EPOCH_MAX, &akey,
				       (uint64_t)s * x->stripe + RACE_OFF, buf, sizeof(buf), NULL);

		if (gone && rc == -ENOENT)
			continue;
		if (gone && rc == 0) {
			printf("FAIL stripe %u of a punched array reads (-ENOENT expected)\n", s);
			return 1;
		}
		for (unsigned i = 0; zeros && rc == 0 && i < sizeof(buf); i++)
			if (buf[i]) {
				printf("FAIL stripe %u of a range-punched array holds bytes\n", s);
				return 1;
			}
		if (rc < 0) {
			printf("FAIL read of stripe %u: %d (%s)\n", s, rc, lode_strerror(rc));
			return 1;
		}
	}
	printf("ok   %u stripes read\n", n);
	return 0;
}

static int cmd_sizes(struct ctx *x)
{
	printf("sizes");
	for (unsigned a = 0; a < NARR; a++) {
		uint64_t size = 0;
		int rc = lode_obj_size(x->ct, arr_oid(x, a), at, &akey, &size);

		if (rc < 0 && rc != -ENOENT)
			die("size", rc);
		printf(" %llu", (unsigned long long)size);
	}
	printf("\n");
	return 0;
}

int main(int argc, char **argv)
{
	static struct model m;
	struct ctx x = {.m = &m};
	struct layout_class lc;
	lode_conn_t *c;
	int rc = 2;

	bool ops = argc == 7 && (!strcmp(argv[1], "ops") || !strcmp(argv[1], "verify") ||
				 !strcmp(argv[1], "dops") || !strcmp(argv[1], "race") ||
				 !strcmp(argv[1], "cells") || !strcmp(argv[1], "ends") ||
				 !strcmp(argv[1], "lease"));

	if ((!ops && argc != 6) || layout_class_parse(argv[4], &lc) < 0) {
		fprintf(stderr, "usage: ec_client ops|dops|verify|cells ADDR CONT CLASS SEED N\n"
				"       ec_client stream ADDR CONT CLASS SECS\n"
				"       ec_client check ADDR CONT CLASS N\n"
				"       ec_client race ADDR CONT CLASS WHO N\n"
				"       ec_client parity ADDR CONT CLASS N\n"
				"       ec_client tear ADDR CONT CLASS N\n"
				"       ec_client lease ADDR CONT CLASS array|dkey|obj SECS\n"
				"       ec_client pick ADDR CONT CLASS ENGINE\n"
				"       ec_client ends ADDR CONT CLASS ENGINE write|punch|check\n"
				"       ec_client olist ADDR CONT CLASS N\n"
				"       ec_client straddle ADDR CONT CLASS N\n"
				"       ec_client rread ADDR CONT CLASS N\n"
				"       ec_client punch|dpunch|opunch ADDR CONT CLASS N\n"
				"       ec_client sizes ADDR CONT CLASS SEED\n");
		return 2;
	}
	/* A line at a time: a failure's exit may skip stdio's flush (LeakSanitizer
	 * ends the process itself when the connection is left open). */
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (getenv("EC_EPOCH"))
		at = strtoull(getenv("EC_EPOCH"), NULL, 10);
	if (getenv("EC_FROM"))
		ops_from = (unsigned)strtoul(getenv("EC_FROM"), NULL, 10);
	if (getenv("EC_GEN"))
		gen = (unsigned)strtoul(getenv("EC_GEN"), NULL, 10);
	x.cls = lc.id;
	x.stripe = lc.redun == LAYOUT_R_EC ? lc.k * (64u << 10) : 64u << 10;
	open_cont(argv[2], argv[3], &c, &x.ct);
	if (!strcmp(argv[1], "cells")) {
		x.seed = strtoull(argv[5], NULL, 10);
		rc = cmd_cells(&x, &lc, (unsigned)strtoul(argv[6], NULL, 10));
	} else if (!strcmp(argv[1], "race")) {
		rc = cmd_race(&x, (unsigned)strtoul(argv[5], NULL, 10),
			      (unsigned)strtoul(argv[6], NULL, 10));
	} else if (!strcmp(argv[1], "parity")) {
		rc = cmd_parity(&x, &lc, (unsigned)strtoul(argv[5], NULL, 10));
	} else if (!strcmp(argv[1], "tear")) {
		rc = cmd_tear(&x, &lc, (unsigned)strtoul(argv[5], NULL, 10));
	} else if (!strcmp(argv[1], "lease")) {
		rc = cmd_lease(&x, &lc, argv[5], argc > 6 ? (unsigned)strtoul(argv[6], NULL, 10) : 10);
	} else if (!strcmp(argv[1], "dpunch") || !strcmp(argv[1], "opunch")) {
		rc = argv[1][0] == 'd' ? lode_dkey_punch(x.ct, race_oid(&x), &akey, NULL)
				       : lode_obj_punch(x.ct, race_oid(&x), NULL);
		printf("%s %s punch of race object %u: %s\n", rc ? "FAIL" : "ok  ",
		       argv[1][0] == 'd' ? "dkey" : "object", race_obj(), lode_strerror(rc));
		rc = rc ? 1 : 0;
	} else if (!strcmp(argv[1], "pick")) {
		rc = cmd_pick(&x, &lc, (uint32_t)strtoul(argv[5], NULL, 10));
	} else if (!strcmp(argv[1], "straddle")) {
		x.seed = 12345;
		rc = cmd_straddle(&x, &lc, (unsigned)strtoul(argv[5], NULL, 10));
	} else if (!strcmp(argv[1], "ends") && argc > 6) {
		rc = cmd_ends(&x, &lc, (uint32_t)strtoul(argv[5], NULL, 10), argv[6]);
	} else if (!strcmp(argv[1], "olist")) {
		rc = cmd_olist(&x, (unsigned)strtoul(argv[5], NULL, 10));
	} else if (!strcmp(argv[1], "rread")) {
		rc = cmd_rread(&x, (unsigned)strtoul(argv[5], NULL, 10));
	} else if (!strcmp(argv[1], "sizes")) {
		x.seed = strtoull(argv[5], NULL, 10);
		rc = cmd_sizes(&x);
	} else if (!strcmp(argv[1], "rpunch")) {
		rc = lode_range_punch(x.ct, race_oid(&x), &akey, 0,
				      (uint64_t)strtoul(argv[5], NULL, 10) * x.stripe, NULL);
		printf("%s range punch of race object %u: %s\n", rc ? "FAIL" : "ok  ", race_obj(),
		       lode_strerror(rc));
		rc = rc ? 1 : 0;
	} else if (!strcmp(argv[1], "punch")) {
		rc = lode_akey_punch(x.ct, race_oid(&x), &akey, NULL);
		printf("%s akey punch of race object %u: %s\n", rc ? "FAIL" : "ok  ", race_obj(),
		       lode_strerror(rc));
		rc = rc ? 1 : 0;
	} else if (ops) {
		x.seed = strtoull(argv[5], NULL, 10);
		x.degraded = !strcmp(argv[1], "dops") || getenv("EC_DOPS");
		rc = cmd_ops(&x, (unsigned)strtoul(argv[6], NULL, 10), !strcmp(argv[1], "verify"));
	} else if (!strcmp(argv[1], "stream")) {
		int64_t end = now_ms() + 1000 * (int64_t)strtoul(argv[5], NULL, 10);
		unsigned i = 0;

		for (; now_ms() < end; i++)
			if ((rc = stream_obj(&x, i, true)) < 0) {
				printf("FAIL stream object %u: %d (%s)\n", i, rc, lode_strerror(rc));
				return 1;
			}
		printf("count %u\n", i);
		fflush(stdout);
		for (unsigned j = 0; j < i; j++)
			if ((rc = stream_obj(&x, j, false)) != 0) {
				printf("FAIL stream object %u reads back: %d\n", j, rc);
				return 1;
			}
		printf("ok   %u objects written across the stream, every one read back\n", i);
		rc = 0;
	} else if (!strcmp(argv[1], "check")) {
		unsigned n = (unsigned)strtoul(argv[5], NULL, 10);

		for (unsigned j = 0; j < n; j++)
			if ((rc = stream_obj(&x, j, false)) != 0) {
				printf("FAIL stream object %u reads back: %d\n", j, rc);
				if (x.cls == LAYOUT_CLASS_EC_2P1)
					members(&x, j);
				return 1;
			}
		printf("ok   %u stream objects read back\n", n);
		rc = 0;
	}
	lode_cont_close(x.ct);
	lode_disconnect(c);
	return rc;
}
