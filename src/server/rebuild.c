/*
 * Rebuild: this engine's part in re-creating the shards of DOWN engines on
 * the engines the map will assign them to once those engines are OUT.
 *
 * How the parts fit. The map the service publishes says which engines are
 * DOWN; the map a rebuild ends in is the same map with them OUT (the
 * service publishes it when every engine that is UP has reported done for
 * this version, src/mgmt/engines.c). Placement keeps every member at home
 * and gives each DOWN member a replacement (src/layout), so the copies to
 * make are exactly: for each dkey, from a member that holds it to the
 * replacement of each DOWN member of its group.
 *
 * Each engine copies the dkeys it holds as the group's first live member,
 * so that each copy is made once. A thread of loded does it as a client:
 * a liblode connection to the system (as the administrator of the
 * credentials file), per pool and per container; on each of this engine's
 * targets it lists objects, dkeys and akeys (requests to that one target),
 * reads every value at the latest epoch and writes it to the replacement's
 * target with NET_F_REBUILD at a low epoch: the last snapshot's + 1, or 1.
 *
 * Why a low epoch: clients keep writing while this runs, and a write goes to
 * the replacements too (src/client/place.c, c->map_next), so a replacement
 * holds every change made after its copy began. The copy lands beneath
 * those versions, so it never hides a newer write or resurrects what a
 * newer punch removed; reads at the latest epoch see the newest of both.
 * History: before the latest view, each snapshot's view is copied at the
 * snapshot's own epoch (copy_akey, copy_array), so snapshot reads see on
 * the copy what they saw on the original; so do rebuilt EC cells
 * (ec_array: each view's cells from the others' at that view).
 *
 * The report (rebuild_report) goes to the service with each heartbeat (or
 * through the hosting service's hook): the map version, running or done,
 * objects and bytes so far, the first error. A newer map starts the
 * rebuild again for it; an error is reported and retried after a pause.
 * A drain is the same work: the client's map keeps a DRAIN engine in the
 * layout (UP) and the end map has it OUT, so its members have new places
 * to be copied to, by the first live member, which may be on it. So is an
 * integration: the end map has the NEW engines UP, and the members that
 * placement then puts on them (and the ones those push) are copied there.
 *
 * The reclaim (docs/decisions/0014), before any of that. A copy lands
 * beneath what its target holds, so a target must hold nothing of a dkey
 * it held under an older layout before a move brings that dkey back. When
 * a move ends (and when an engine joins NEW), the service records the map
 * version as settled; every UP, DRAIN and NEW engine then removes from its
 * targets, physically (NET_OP_DKEY_DROP), each dkey that layout places
 * elsewhere, makes the containers and snapshots its targets lack, and
 * says so in its report (reclaimed_version). Until all have, the map says
 * so (reclaimed < settled): clients write no copies to next places and
 * no engine copies (conn_rebuild_due answers -EAGAIN).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "client/client.h"
#include "common/clock.h"
#include "ec/ec.h"
#include "layout/layout.h"
#include "lode/errno.h"
#include "lode/lode.h"
#include "server/join.h"
#include "server/rebuild.h"
#include "server/srv.h"

#define PIECE (1u << 20)      /* bytes of an array copied at once */
#define RETRY_MS 2000         /* after a failed pass; doubled for each like one after it */
#define RETRY_MAX_MS 10000    /* at most */
#define EC_PIECE (256u << 10) /* bytes of each cell range rebuilt at once */
#define EC_TRIES 4            /* reads of one range that a racing write changed */
#define CONT_WAIT_TRIES 20    /* 100 ms each: a container on no target yet (scan_pool) */
#define RECLAIM_BUSY_TRIES 300 /* 10 ms each: a drop while a write is in flight (reclaim_io) */

struct rebuild {
	struct srv *s;
	char addr[300];
	char user[256], secret[512];
	char cred[4300];
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop, joined;
	uint32_t torn_told;            /* the map version torn arrays were logged for */
	struct mgmt_rebuild_info info; /* under mu */
	uint32_t reclaimed;            /* the settled map version reclaimed through; under mu */
};

/* One pass over one map version. */
struct pass {
	struct rebuild *rb;
	uint32_t version, self;
	lode_conn_t *c;
	lode_cont_t *ct;
	lode_epoch_t epoch;        /* where copies land */
	uint8_t *buf;              /* a value */
	size_t cap;
	uint8_t keys[64 << 10];    /* a batch of dkeys */
	uint8_t akeys[64 << 10];   /* a batch of akeys */
	struct ec_codec *codec[3]; /* EC_2P1, EC_4P2, EC_8P2, made at the first need */
	bool torn;                 /* an EC array was left torn (see ec_lease) */
	uint64_t beside;           /* EC members moved beside another of their group */
	bool reclaim;              /* this scan reclaims (dkey_reclaim) instead of copying */
	uint64_t dropped;          /* dkeys the reclaim removed */
	uint64_t token;            /* this pass's lease token */
	uint8_t *ecbuf;            /* EC pieces: 2 (k + p) x EC_PIECE */
	uint8_t *ecprev;           /* the lost cells of a piece in the view before (ec_piece) */
	lode_epoch_t *snaps;       /* the open container's snapshots, ascending */
	int nsnaps, snaps_cap;
	uint64_t *sizes;           /* an array's size in each view: snaps_cap + 1 */
	uint64_t *marks;           /* an EC array's end mark in each view (ec_array): as many */
	uint8_t *prev;             /* a copy's view before (copy_array, copy_akey) */
	size_t prev_cap;
};

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool stopping(struct rebuild *rb)
{
	bool v;

	pthread_mutex_lock(&rb->mu);
	v = rb->stop;
	pthread_mutex_unlock(&rb->mu);
	return v;
}

/* Sleep up to ms, or until told to stop. */
static void nap(struct rebuild *rb, unsigned ms)
{
	struct timespec until;

	clock_mono_after(&until, ms);
	pthread_mutex_lock(&rb->mu);
	if (!rb->stop)
		pthread_cond_timedwait(&rb->cv, &rb->mu, &until);
	pthread_mutex_unlock(&rb->mu);
}

/* The wait after a failed pass that again failed as the one before it:
 * RETRY_MS doubled that many times, at most RETRY_MAX_MS. */
static unsigned retry_ms(unsigned again)
{
	unsigned ms = RETRY_MS << (again < 8 ? again : 8);

	return ms < RETRY_MAX_MS ? ms : RETRY_MAX_MS;
}

/* Nap ms, or less if the map moves on from v (a new map is new work). */
static void nap_on(struct rebuild *rb, unsigned ms, uint32_t v)
{
	for (unsigned left = ms; left > 0 && !stopping(rb) && atomic_load(&rb->s->map_ver) == v;) {
		unsigned step = left < 200 ? left : 200;

		nap(rb, step);
		left -= step;
	}
}

static void count(struct rebuild *rb, uint64_t objects, uint64_t bytes)
{
	pthread_mutex_lock(&rb->mu);
	rb->info.objects_done += objects;
	if (rb->info.objects_total < rb->info.objects_done)
		rb->info.objects_total = rb->info.objects_done;
	rb->info.bytes_done += bytes;
	if (rb->info.bytes_total < rb->info.bytes_done)
		rb->info.bytes_total = rb->info.bytes_done;
	pthread_mutex_unlock(&rb->mu);
}

/* ---- copying -------------------------------------------------------------------------- */

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* *buf of *cap bytes made at least n. */
static int room(uint8_t **buf, size_t *cap, size_t n)
{
	uint8_t *b;

	if (n <= *cap)
		return 0;
	if (!(b = realloc(*buf, n)))
		return -ENOMEM;
	*buf = b;
	*cap = n;
	return 0;
}

static int buf_room(struct pass *p, size_t n)
{
	return room(&p->buf, &p->cap, n);
}

/*
 * A copy's write to its new place dst. A target of an engine that joined
 * after the container was made, by a client that did not know it yet,
 * lacks the container: it is made there, with its snapshots, and the
 * write goes again.
 */
/*
 * The open container on target t, and its snapshots (p->snaps), which the
 * target's aggregation must keep; what t has already stays.
 */
static int cont_make(struct pass *p, unsigned t)
{
	struct conn_tgt_io io = {.epoch = LODE_EPOCH_MAX};
	int rc = conn_tgt_io(p->ct, t, NET_OP_CONT_CREATE, (struct lode_oid){0, 0}, NULL, &io);

	for (int s = 0; (rc == 0 || rc == -EEXIST) && s < p->nsnaps; s++) {
		io = (struct conn_tgt_io){.epoch = p->snaps[s]};
		rc = conn_tgt_io(p->ct, t, NET_OP_SNAP_CREATE, (struct lode_oid){0, 0}, NULL, &io);
	}
	return rc == -EEXIST ? 0 : rc;
}

static int copy_write(struct pass *p, unsigned dst, uint16_t op, struct lode_oid oid,
		      const struct lode_key *k, struct conn_tgt_io *wr)
{
	int rc = conn_tgt_io(p->ct, dst, op, oid, k, wr);

	if (rc != -LODE_ENOCONT || (rc = cont_make(p, dst)) < 0)
		return rc;
	return conn_tgt_io(p->ct, dst, op, oid, k, wr);
}

/*
 * The views a copy carries: each snapshot of the container, oldest first,
 * then the latest. View v is read at view_read(v) and written at
 * view_write(v): a snapshot's at its own epoch (beneath every write made
 * since), the latest at p->epoch (above every snapshot). So reads at a
 * snapshot see on the new place what they saw on the old (decision 0011).
 */
static lode_epoch_t view_read(const struct pass *p, int v)
{
	return v < p->nsnaps ? p->snaps[v] : LODE_EPOCH_MAX;
}

static lode_epoch_t view_write(const struct pass *p, int v)
{
	return v < p->nsnaps ? p->snaps[v] : p->epoch;
}

static int prev_room(struct pass *p, size_t n)
{
	return room(&p->prev, &p->prev_cap, n);
}

/* A punch of what view v no longer has (rebuild epoch): an akey, or a range. */
static int copy_punch(struct pass *p, unsigned dst, uint16_t op, struct lode_oid oid,
		      const struct lode_key *k, int v, uint64_t off, uint64_t len)
{
	struct conn_tgt_io wr = {.epoch = view_write(p, v), .off = off, .len = len,
				 .rebuild = true};

	return copy_write(p, dst, op, oid, k, &wr);
}

/*
 * An array akey, piece by piece, in views v0 (0: every snapshot's, then
 * the latest; p->nsnaps: the latest only) to the latest. In each view a
 * piece is written where its bytes or its extent differ from the view
 * before (the first: from nothing), and punched where it became a hole or
 * ends sooner, so that reads and the array's size (the end of its last
 * extent) are on the copy what they are on the original. A piece of
 * zeros that is not a view's last stays a hole, or becomes one.
 */
static int copy_array(struct pass *p, unsigned src, unsigned dst, struct lode_oid soid,
		      struct lode_oid doid, const struct lode_key *k, int v0)
{
	uint64_t *size = p->sizes, top = 0;
	int rc;

	for (int v = v0; v <= p->nsnaps; v++) {
		struct conn_tgt_io sz = {.epoch = view_read(p, v)};

		rc = conn_tgt_io(p->ct, src, NET_OP_ARR_SIZE, soid, k, &sz);
		if (rc < 0 && rc != -ENOENT)
			return rc;
		size[v] = rc < 0 ? 0 : sz.val;
		top = size[v] > top ? size[v] : top;
	}
	if ((rc = buf_room(p, PIECE)) < 0 || (rc = prev_room(p, PIECE)) < 0)
		return rc;
	for (uint64_t off = 0; off < top && !stopping(p->rb); off += PIECE) {
		uint64_t span = top - off < PIECE ? top - off : PIECE, had = 0;

		memset(p->prev, 0, span);
		for (int v = v0; v <= p->nsnaps; v++) {
			uint64_t n = off >= size[v] ? 0 : size[v] - off < span ? size[v] - off : span;
			bool last = n > 0 && off + n == size[v], zero;
			struct conn_tgt_io rd = {.epoch = view_read(p, v), .off = off, .len = n,
						 .in = p->buf, .cap = n};
			struct conn_tgt_io wr = {.epoch = view_write(p, v), .off = off, .len = n,
						 .out = p->buf, .rebuild = true};

			memset(p->buf + n, 0, span - n);
			if (n && (rc = conn_tgt_io(p->ct, src, NET_OP_ARR_FETCH, soid, k, &rd)) < 0) {
				if (rc != -ENOENT)
					return rc;
				memset(p->buf, 0, n); /* gone in this view */
				n = 0;
				last = false;
			}
			if (n == had && memcmp(p->buf, p->prev, span) == 0)
				continue;
			zero = all_zero(p->buf, n);
			rc = 0;
			if (n == 0 || (zero && !last)) {
				/* A hole here: one to make only if the view before had
				 * something (bytes, or the extent that made its size). */
				if (!all_zero(p->prev, span) || (n == 0 && had))
					rc = copy_punch(p, dst, NET_OP_ARR_PUNCH, doid, k, v, off,
							n == 0 ? had : span);
			} else {
				rc = copy_write(p, dst, NET_OP_ARR_UPDATE, doid, k, &wr);
				if (rc == 0 && n < had)
					rc = copy_punch(p, dst, NET_OP_ARR_PUNCH, doid, k, v, off + n,
							had - n);
				if (v == p->nsnaps)
					count(p->rb, 0, n); /* the latest view's bytes */
			}
			if (rc < 0)
				return rc;
			memcpy(p->prev, p->buf, span);
			had = n;
		}
	}
	return 0;
}

/* What an akey is in view v: 1 an array, 2 a single value, 0 neither (an
 * array's size is 0 where it has no extent, as where there is nothing). */
static int akey_kind(struct pass *p, unsigned src, struct lode_oid oid, const struct lode_key *k,
		     int v)
{
	struct conn_tgt_io sz = {.epoch = view_read(p, v)};
	int rc = conn_tgt_io(p->ct, src, NET_OP_ARR_SIZE, oid, k, &sz);

	if (rc == 0)
		return sz.val > 0 ? 1 : 0;
	return rc == -LODE_ETYPE ? 2 : rc == -ENOENT ? 0 : rc;
}

/*
 * One akey: a single value whole, or an array by pieces, in every view: a
 * value is written in a view when it differs from the view before, and
 * punched there when it was removed. An akey that is an array in one view
 * and a single value in another (punched, then written as the other) is
 * copied as the latest view only: the copy cannot hold both kinds.
 */
static int copy_akey(struct pass *p, unsigned src, unsigned dst, struct lode_oid soid,
		     struct lode_oid doid, const struct lode_key *k)
{
	size_t have = 0; /* the view before's value: p->prev[0, have) */
	bool had = false;
	int rc, v0 = 0, kinds = 0;

	for (int v = 0; v <= p->nsnaps && p->nsnaps > 0; v++) {
		if ((rc = akey_kind(p, src, soid, k, v)) < 0)
			return rc;
		kinds |= rc == 0 ? 0 : 1 << rc;
	}
	if (kinds == (1 << 1 | 1 << 2))
		v0 = p->nsnaps;
	/* An array: the same member's (an EC member's cells are its own). */
	if (kinds == 1 << 1)
		return soid.hi == doid.hi ? copy_array(p, src, dst, soid, doid, k, 0) : -EAGAIN;
	if ((rc = buf_room(p, PIECE)) < 0)
		return rc;
	for (int v = v0; v <= p->nsnaps; v++) {
		struct conn_tgt_io rd;
		size_t n;

		for (;;) {
			rd = (struct conn_tgt_io){.epoch = view_read(p, v), .in = p->buf,
						  .cap = p->cap};
			rc = conn_tgt_io(p->ct, src, NET_OP_SV_FETCH, soid, k, &rd);
			if (rc != -EOVERFLOW || p->cap >= LODE_IO_MAX)
				break;
			if ((rc = buf_room(p, LODE_IO_MAX)) < 0)
				return rc;
		}
		if (rc == -LODE_ETYPE) {
			if (v < p->nsnaps || soid.hi != doid.hi)
				return -EAGAIN; /* its kind changed meanwhile: the pass again */
			return copy_array(p, src, dst, soid, doid, k, p->nsnaps);
		}
		if (rc < 0 && rc != -ENOENT)
			return rc;
		if (rc == -ENOENT) {
			/* Not there in this view (or punched meanwhile). */
			if (had && (rc = copy_punch(p, dst, NET_OP_AKEY_PUNCH, doid, k, v, 0, 0)) < 0)
				return rc;
			had = false;
			continue;
		}
		/* The reply's value is the length (the bytes may have come by RMA). */
		n = rd.val < p->cap ? (size_t)rd.val : p->cap;
		if (had && n == have && memcmp(p->buf, p->prev, n) == 0)
			continue;
		{
			struct conn_tgt_io wr = {.epoch = view_write(p, v), .out = p->buf, .len = n,
						 .rebuild = true};

			if ((rc = copy_write(p, dst, NET_OP_SV_UPDATE, doid, k, &wr)) < 0)
				return rc;
		}
		if (v == p->nsnaps)
			count(p->rb, 0, n); /* the latest view's bytes */
		if (v < p->nsnaps) {
			if ((rc = prev_room(p, n ? n : 1)) < 0)
				return rc;
			memcpy(p->prev, p->buf, n);
		}
		have = n;
		had = true;
	}
	return 0;
}

/*
 * Every key a list op (NET_OP_DKEY_LIST of oid, k NULL; NET_OP_AKEY_LIST
 * under k's dkey) finds on target tgt, batch by batch into buf, each given
 * to fn until one fails. Keys come packed as [u16 length][bytes]. A list
 * that finds the object or dkey gone is empty.
 */
struct keys_walk {
	struct pass *p;
	unsigned tgt;
	struct lode_oid oid;
	uint8_t *buf;
	size_t cap;
	int (*fn)(struct keys_walk *w, const uint8_t *key, uint16_t len);
	/* fn's */
	const struct layout_class *cls;
	const uint8_t *dkey;
	uint16_t dlen, local;
	unsigned dst;
	struct key_set *set;
	bool all; /* list what punches hid too (NET_F_LIST_ALL) */
};

static int keys_each(struct keys_walk *w, uint16_t op, const struct lode_key *k)
{
	struct lode_anchor an = {0};
	int rc = 0;

	while (!an.eof && rc == 0 && !stopping(w->p->rb)) {
		struct conn_tgt_io io = {.epoch = LODE_EPOCH_MAX, .an = &an, .in = w->buf,
					 .cap = w->cap, .hflags = w->all ? NET_F_LIST_ALL : 0};
		size_t at = 0;

		if ((rc = conn_tgt_io(w->p->ct, w->tgt, op, w->oid, k, &io)) < 0)
			return rc == -ENOENT ? 0 : rc;
		for (uint64_t i = 0; i < io.val && rc == 0 && at + 2 <= io.in_len; i++) {
			uint16_t len = (uint16_t)(w->buf[at] | w->buf[at + 1] << 8);

			if (at + 2 + len > io.in_len)
				return -EPROTO;
			rc = w->fn(w, w->buf + at + 2, len);
			at += 2 + (size_t)len;
		}
	}
	return rc;
}

/* An akey of w->dkey: copy it to w->dst. */
static int akey_copy(struct keys_walk *w, const uint8_t *akey, uint16_t alen)
{
	struct lode_key k = {w->dkey, w->dlen, akey, alen};

	return copy_akey(w->p, w->tgt, w->dst, w->oid, w->oid, &k);
}

/* A dkey of w->oid: copy every akey to each replacement we are to fill. */
static int dkey_copy(struct keys_walk *w, const uint8_t *dkey, uint16_t dlen)
{
	struct keys_walk aw = {.p = w->p, .tgt = w->tgt, .oid = w->oid, .buf = w->p->akeys,
			       .cap = sizeof(w->p->akeys), .fn = akey_copy};
	struct lode_key dk = {dkey, dlen, NULL, 0};
	struct conn_rebuild_group g;
	int n = conn_rebuild_group(w->p->c, w->cls, w->oid, conn_dkey_hash(dkey, dlen), w->p->self,
				   w->local, &g), rc = 0;

	/* We copy when we hold the group's first live member here. */
	if (n <= 0 || g.first != g.me)
		return n < 0 ? n : 0;
	aw.dkey = dkey;
	aw.dlen = dlen;
	aw.all = w->all;
	for (int m = 0; m < n && rc == 0; m++) {
		if (g.dst[m] < 0)
			continue;
		aw.dst = (unsigned)g.dst[m];
		rc = keys_each(&aw, NET_OP_AKEY_LIST, &dk);
	}
	return rc;
}

/* ---- erasure-coded objects -------------------------------------------------------- */

/*
 * The members of an EC group hold different cells, so a DOWN member's
 * replacement gets its cells computed from k others (src/client/ec_io.c has
 * the layout): per akey, the array's range on every member read piece by
 * piece from k live ones, the lost cells rebuilt and written to the
 * replacements: in a container with snapshots, each snapshot's view at
 * its epoch (from the cells as of it), then the latest at the rebuild's.
 * A live member that the map the rebuild ends in moves (a replacement
 * pushed it) has its own cells copied. A single value lives whole on
 * every member and is copied like a replica. So is an array's end mark
 * among the parity members (ec_mark; docs/decisions/0018), and a lost
 * data member's cells end where the mark puts its end (ec_piece), so that
 * the array's size is the same after the rebuild.
 *
 * Who rebuilds a dkey: its first live parity member, which every array
 * write and single value reaches (a data member may hold nothing of a
 * small array); with every parity member lost, each live holder.
 *
 * Each member keeps its part as an object of its own on its target
 * (layout_oid_member), so every read and write here names the member's
 * id, and a member that moves onto the target another member of its group
 * is leaving (an integration, or two failures in turn, can swap them:
 * src/layout/place.c) lands beside it, not on it (docs/decisions/0017).
 * The lease is the array's, under the caller's id, as clients take it.
 *
 * A client write racing the rebuild of its stripe could change some of the
 * k cells between the reads, and the cells rebuilt from them would be
 * wrong with no newer version above them. So each range is read again after
 * rebuilding, and rebuilt again while it changed; a range that keeps
 * changing fails the pass, which is retried (decision 0012).
 */
struct ec_group {
	const struct layout_class *cls;
	const struct ec_codec *codec;
	struct lode_oid oid;         /* the caller's id */
	int n;
	struct conn_rebuild_group m; /* where each member is and goes */
};

/* Member m's own object. */
static struct lode_oid mo(const struct ec_group *g, unsigned m)
{
	return layout_oid_member(g->oid, m);
}

/* The akeys of one dkey over every live member, each once. */
struct key_set {
	uint8_t *buf; /* [u16 length][bytes] ... */
	size_t used, cap;
};

static int set_add(struct keys_walk *w, const uint8_t *key, uint16_t len)
{
	struct key_set *ks = w->set;

	for (size_t at = 0; at < ks->used; at += 2 + (size_t)(ks->buf[at] | ks->buf[at + 1] << 8)) {
		uint16_t l = (uint16_t)(ks->buf[at] | ks->buf[at + 1] << 8);

		if (l == len && !memcmp(ks->buf + at + 2, key, len))
			return 0;
	}
	if (ks->used + 2 + len > ks->cap) {
		size_t cap = (ks->cap + 2 + len) * 2;
		uint8_t *b = realloc(ks->buf, cap);

		if (!b)
			return -ENOMEM;
		ks->buf = b;
		ks->cap = cap;
	}
	ks->buf[ks->used] = (uint8_t)len;
	ks->buf[ks->used + 1] = (uint8_t)(len >> 8);
	memcpy(ks->buf + ks->used + 2, key, len);
	ks->used += 2 + (size_t)len;
	return 0;
}

static const struct ec_codec *codec_for(struct pass *p, const struct layout_class *cls)
{
	int i = cls->id == LAYOUT_CLASS_EC_2P1 ? 0 : cls->id == LAYOUT_CLASS_EC_4P2 ? 1 : 2;

	if (!p->codec[i] && ec_codec_create(cls->k, cls->p, &p->codec[i]) < 0)
		return NULL;
	return p->codec[i];
}

/* Read [off, off + n) of akey k as of epoch at from each of the k source
 * members into bufs. */
static int ec_read_srcs(struct pass *p, const struct ec_group *g, const uint8_t *src,
			const struct lode_key *k, lode_epoch_t at, uint64_t off, uint64_t n,
			uint8_t *bufs)
{
	for (unsigned s = 0; s < g->cls->k; s++) {
		struct conn_tgt_io rd = {.epoch = at, .off = off, .len = n,
					 .in = bufs + (size_t)s * EC_PIECE, .cap = n};
		int rc = conn_tgt_io(p->ct, (unsigned)g->m.tgt[src[s]], NET_OP_ARR_FETCH,
				     mo(g, src[s]), k, &rd);

		if (rc == -ENOENT)
			memset(rd.in, 0, n);
		else if (rc < 0)
			return rc;
	}
	return 0;
}

/*
 * The array's end in view v from its data members' sizes (*end; 0: none),
 * or 1 when one of them is not live (then nothing says it).
 */
static int ec_data_end(struct pass *p, const struct ec_group *g, const struct lode_key *k, int v,
		       uint64_t *end)
{
	*end = 0;
	for (unsigned c = 0; c < g->cls->k; c++) {
		struct conn_tgt_io sz = {.epoch = view_read(p, v)};
		int rc;

		if (g->m.tgt[c] < 0)
			return 1;
		rc = conn_tgt_io(p->ct, (unsigned)g->m.tgt[c], NET_OP_ARR_SIZE, mo(g, c), k, &sz);
		if (rc < 0 && rc != -ENOENT && rc != -LODE_ETYPE)
			return rc; /* (a single value in that view: no array) */
		if (rc == 0 && sz.val && conn_ec_end(g->cls->k, c, sz.val) > *end)
			*end = conn_ec_end(g->cls->k, c, sz.val);
	}
	return 0;
}

/*
 * Parity member m's end mark (key mk) at end, on target t at epoch at: one
 * byte at end - 1 (none for 0), and punched from end on. copy: t is a
 * replacement or a move's new place (copy_write, which makes the container
 * there), and at a rebuild's epoch.
 */
static int mark_put(struct pass *p, unsigned t, bool copy, const struct ec_group *g, unsigned m,
		    const struct lode_key *mk, lode_epoch_t at, uint64_t end)
{
	static const uint8_t zero;
	struct conn_tgt_io wr = {.epoch = at, .off = end - 1, .len = 1, .out = &zero,
				 .rebuild = copy};
	struct conn_tgt_io pu = {.epoch = at, .off = end, .len = UINT64_MAX - end, .rebuild = copy};
	int rc = 0;

	if (end)
		rc = copy ? copy_write(p, t, NET_OP_ARR_UPDATE, mo(g, m), mk, &wr)
			  : conn_tgt_io(p->ct, t, NET_OP_ARR_UPDATE, mo(g, m), mk, &wr);
	if (rc == 0)
		rc = copy ? copy_write(p, t, NET_OP_ARR_PUNCH, mo(g, m), mk, &pu)
			  : conn_tgt_io(p->ct, t, NET_OP_ARR_PUNCH, mo(g, m), mk, &pu);
	return rc;
}

/*
 * After a torn array's mend (every data member live): its end mark set at
 * the data's end on every live parity member, and a moving one's new
 * place, and punched past it; a torn write's mark may fall short of its
 * data or past it (ec_io.c's mend_array does the same).
 */
static int ec_mend_mark(struct pass *p, const struct ec_group *g, const struct lode_key *k)
{
	uint8_t mkb[LODE_KEY_MAX];
	struct lode_key mk;
	uint64_t end;
	int rc;

	if (!conn_ec_mark_key(k, mkb, &mk) || (rc = ec_data_end(p, g, k, p->nsnaps, &end)) > 0)
		return 0;
	for (unsigned m = g->cls->k; m < (unsigned)g->n && rc == 0; m++) {
		if (g->m.tgt[m] < 0)
			continue;
		rc = mark_put(p, (unsigned)g->m.tgt[m], false, g, m, &mk, LODE_EPOCH_MAX, end);
		if (rc == 0 && g->m.dst[m] >= 0)
			rc = mark_put(p, (unsigned)g->m.dst[m], true, g, m, &mk, LODE_EPOCH_MAX, end);
	}
	return rc;
}

/*
 * The array's write lease, taken as a writer takes it (src/client/ec_io.c,
 * docs/decisions/0015): on the first live member, parity first, for the
 * members' range [at_off, at_off + at_len), so that no client writes the
 * array while those cells are rebuilt. *host gets the member's target
 * (-1: none taken). A busy lease is asked for again for up to
 * EC_LEASE_WAIT_MS, then -EAGAIN (the pass again). size: the most any
 * live member holds.
 *
 * A torn array (a writer died between data and parity) cannot be rebuilt
 * from its parity. With every data member live, its torn range's parity
 * is made whole from the data first (what a writer would do); with one
 * lost, nothing can: the lease goes back torn, the array is left, and the
 * pass fails at its end (1 returned here; the pass -ENOTRECOVERABLE), so
 * the engine stays DOWN and clients
 * get -EIO for that array's degraded reads rather than cells rebuilt from
 * parity that matches nothing.
 */
#define EC_LEASE_MS 60000
#define EC_LEASE_WAIT_MS 30000

/*
 * A NET_OP_LEASE of the array to target host for this pass's token, over
 * [off, off + len): give it back (max 0; how: 0 whole, NET_F_TORN torn,
 * NET_F_LEASE_READ leaving a mark as it was), or renew it (max ms, how
 * NET_F_LEASE_RENEW: -ENOENT if it is not still ours).
 */
static int ec_lease_op(struct pass *p, int host, struct lode_oid oid, const struct lode_key *k,
		       uint64_t off, uint64_t len, uint32_t max, uint32_t how)
{
	struct conn_tgt_io io = {.epoch = p->token, .off = off, .len = len, .max = max,
				 .hflags = how};

	return host < 0 ? -ENOENT : conn_tgt_io(p->ct, (unsigned)host, NET_OP_LEASE, oid, k, &io);
}

static int ec_lease(struct pass *p, const struct ec_group *g, struct lode_oid oid,
		    const struct lode_key *k, uint64_t at_off, uint64_t at_len, uint64_t size,
		    int *host)
{
	unsigned nk = g->cls->k, nm = nk + g->cls->p;
	int64_t until = clock_mono_ms() + EC_LEASE_WAIT_MS;
	uint8_t range[16];
	struct conn_tgt_io io;
	uint64_t off = 0, end = UINT64_MAX;
	int rc;

	*host = -1;
	for (unsigned i = 0; i < nm && *host < 0; i++)
		if (g->m.tgt[(nk + i) % nm] >= 0)
			*host = g->m.tgt[(nk + i) % nm];
	if (*host < 0)
		return -EIO;
	for (;;) {
		io = (struct conn_tgt_io){.epoch = p->token, .off = at_off, .len = at_len,
					  .max = EC_LEASE_MS, .in = range, .cap = sizeof(range)};
		rc = conn_tgt_io(p->ct, (unsigned)*host, NET_OP_LEASE, oid, k, &io);
		if (rc != -EBUSY)
			break;
		if (clock_mono_ms() > until || stopping(p->rb)) {
			*host = -1;
			return -EAGAIN;
		}
		nap(p->rb, 5);
	}
	if (rc < 0) {
		*host = -1;
		return rc;
	}
	if (!(io.val & 1))
		return 0;
	if (io.in_len == sizeof(range)) {
		off = end = 0;
		for (int i = 7; i >= 0; i--) {
			off = off << 8 | range[i];
			end = end << 8 | range[8 + i];
		}
	}
	if (end > size)
		end = size;
	for (unsigned c = 0; c < nk; c++) {
		if (g->m.tgt[c] < 0) {
			if (p->rb->torn_told != p->version)
				srv_log("rebuild for pool map version %u: object %016llx.%016llx is "
					"torn (a writer died mid-write) and its data member %u is "
					"lost: left degraded",
					p->version, (unsigned long long)oid.hi,
					(unsigned long long)oid.lo, c);
			p->torn = true;
			/* Back as it was: nothing was written, the mark stays. */
			(void)ec_lease_op(p, *host, oid, k, at_off, at_len, 0, NET_F_LEASE_READ);
			*host = -1;
			return 1;
		}
	}
	/* Every data member is live: the torn range's parity from the data,
	 * the lease renewed before each piece (a mend may be long). A mend
	 * that fails gives it back torn. */
	for (uint64_t at = off; at < end && rc == 0; at += EC_PIECE) {
		uint64_t n = end - at < EC_PIECE ? end - at : EC_PIECE;
		uint8_t src[EC_K_MAX], *data[EC_K_MAX], *par[EC_P_MAX];

		for (unsigned c = 0; c < nk; c++) {
			src[c] = (uint8_t)c;
			data[c] = p->ecbuf + (size_t)c * EC_PIECE;
		}
		for (unsigned j = 0; j < g->cls->p; j++)
			par[j] = p->ecbuf + (size_t)(nk + j) * EC_PIECE;
		if (stopping(p->rb))
			rc = -ECANCELED;
		else if ((rc = ec_lease_op(p, *host, oid, k, at_off, at_len, EC_LEASE_MS,
					   NET_F_LEASE_RENEW)) == 0 &&
			 (rc = ec_read_srcs(p, g, src, k, LODE_EPOCH_MAX, at, n, p->ecbuf)) == 0)
			rc = ec_encode(g->codec, data, par, n);
		for (unsigned j = 0; j < g->cls->p && rc == 0; j++) {
			struct conn_tgt_io wr = {.epoch = LODE_EPOCH_MAX, .off = at, .len = n,
						 .out = par[j]};

			if (g->m.tgt[nk + j] >= 0)
				rc = conn_tgt_io(p->ct, (unsigned)g->m.tgt[nk + j], NET_OP_ARR_UPDATE,
						 mo(g, nk + j), k, &wr);
			/* A parity member that moves had its torn parity copied to
			 * its new place already (ec_array): mended there too. */
			if (rc == 0 && g->m.tgt[nk + j] >= 0 && g->m.dst[nk + j] >= 0)
				rc = copy_write(p, (unsigned)g->m.dst[nk + j], NET_OP_ARR_UPDATE,
						mo(g, nk + j), k, &wr);
		}
	}
	if (rc == 0)
		rc = ec_mend_mark(p, g, k);
	if (rc < 0) {
		(void)ec_lease_op(p, *host, oid, k, at_off, at_len, 0, NET_F_TORN);
		*host = -1;
	}
	return rc;
}

/*
 * Where data member c's cells end (its local size) in an array whose end is
 * mark, were every byte before it written.
 */
static uint64_t mark_local(unsigned nk, unsigned c, uint64_t mark)
{
	uint64_t stripe = (uint64_t)nk * EC_IO_CELL, s = (mark - 1) / stripe;
	uint64_t at = (mark - 1) % stripe;
	unsigned col = (unsigned)(at / EC_IO_CELL);

	if (c < col)
		return (s + 1) * EC_IO_CELL;
	return s * EC_IO_CELL + (c == col ? at % EC_IO_CELL + 1 : 0);
}

/*
 * The lost cells of [off, off + n) on every member in view v, rebuilt from
 * the sources src[0, ns) as of that view and written at its epoch where
 * they differ from the view before (p->ecprev, extent ext[m]; nothing
 * before the first): as far as the view's size (size, the most any live
 * member holds) reaches into the piece, and punched where they became
 * zeros or end sooner. With the array's end mark (mark; 0: none), a lost
 * data member's cells end where the mark puts them: the zeros past that
 * are no bytes of the array, and the member that holds the array's last
 * byte reaches it, zeros or not, so that the array's size is the same
 * after the rebuild. A snapshot's view does not change; the latest is
 * read again after it is rebuilt (below).
 */
static int ec_piece(struct pass *p, const struct ec_group *g, struct lode_oid oid,
		    const struct lode_key *k, const uint8_t *src, unsigned ns, uint32_t want,
		    uint64_t off, uint64_t n, int v, uint64_t size, uint64_t mark, uint64_t *ext)
{
	uint64_t nv = off >= size ? 0 : size - off < n ? size - off : n;
	unsigned nm = g->cls->k + g->cls->p;
	uint8_t *a = p->ecbuf, *b = p->ecbuf + (size_t)nm * EC_PIECE;
	uint8_t *cells[EC_CELLS_MAX] = {0};
	uint32_t present = 0;
	int tries = 0, rc;

	for (unsigned s = 0; s < ns; s++) {
		cells[src[s]] = a + (size_t)s * EC_PIECE;
		present |= 1u << src[s];
	}
	for (unsigned m = 0, o = ns; m < nm; m++)
		if (want & 1u << m)
			cells[m] = a + (size_t)o++ * EC_PIECE;
	if ((rc = ec_read_srcs(p, g, src, k, view_read(p, v), off, n, a)) < 0)
		return rc;
	for (;;) {
		if ((rc = ec_reconstruct(g->codec, cells, present, want, n)) < 0)
			return rc;
		if (v < p->nsnaps)
			break;
		/* Read again: a write that changed a source meanwhile makes the
		 * rebuilt cells wrong; then rebuild from the new bytes. (Writers
		 * take the lease, which this holds; a writer of an older build
		 * would not.) */
		if ((rc = ec_read_srcs(p, g, src, k, LODE_EPOCH_MAX, off, n, b)) < 0)
			return rc;
		bool same = true;

		for (unsigned s = 0; s < ns && same; s++)
			same = !memcmp(a + (size_t)s * EC_PIECE, b + (size_t)s * EC_PIECE, n);
		if (same)
			break;
		if (++tries >= EC_TRIES)
			return -EAGAIN; /* writes keep changing it: the pass again */
		for (unsigned s = 0; s < ns; s++)
			memcpy(a + (size_t)s * EC_PIECE, b + (size_t)s * EC_PIECE, n);
	}
	for (unsigned m = 0; m < nm; m++) {
		uint8_t *prev = p->ecprev + (size_t)m * EC_PIECE;
		uint64_t nvm = nv, keep;
		bool reach = false;

		if (m < g->cls->k && mark && size && (want & 1u << m)) {
			keep = mark_local(g->cls->k, m, mark);
			keep = keep > off ? keep - off : 0;
			if (keep < nvm && all_zero(cells[m] + keep, nvm - keep))
				nvm = keep;
			/* The member with the array's last byte: up to it. */
			reach = m == (mark - 1) / EC_IO_CELL % g->cls->k && keep > 0 && keep <= n;
			if (reach && nvm < keep)
				nvm = keep;
		}

		struct conn_tgt_io wr = {.epoch = view_write(p, v), .off = off, .len = nvm,
					 .out = cells[m], .rebuild = true};
		unsigned dst = (unsigned)g->m.dst[m];

		/* Past the view's size every source is empty: zeros. */
		if (!(want & 1u << m) || (memcmp(cells[m], prev, n) == 0 && nvm == ext[m]))
			continue;
		rc = 0;
		if (all_zero(cells[m], nvm) && !reach) {
			/* A hole here: one to make only if the view before had
			 * something. */
			if (ext[m])
				rc = copy_punch(p, dst, NET_OP_ARR_PUNCH, mo(g, m), k, v, off, ext[m]);
			ext[m] = 0;
		} else {
			rc = copy_write(p, dst, NET_OP_ARR_UPDATE, mo(g, m), k, &wr);
			if (rc == 0 && nvm < ext[m])
				rc = copy_punch(p, dst, NET_OP_ARR_PUNCH, mo(g, m), k, v, off + nvm,
						ext[m] - nvm);
			if (rc == 0 && v == p->nsnaps)
				count(p->rb, 0, nvm); /* the latest view's bytes */
			ext[m] = nvm;
		}
		if (rc < 0)
			return rc;
		memcpy(prev, cells[m], n);
	}
	return 0;
}

/*
 * An array's end mark (ec_io.c) lives whole on every parity member: copied
 * to each one's replacement from the first live one, and by a moving one
 * from itself, in every view, as a replica's array is.
 */
static int ec_mark(struct pass *p, const struct ec_group *g, const struct lode_key *k)
{
	int from = -1, rc = 0;

	for (int m = (int)g->cls->k; m < g->n && from < 0; m++)
		if (g->m.tgt[m] >= 0)
			from = m;
	for (int m = (int)g->cls->k; m < g->n && from >= 0 && rc == 0; m++) {
		int s = g->m.tgt[m] >= 0 ? m : from;

		if (g->m.dst[m] >= 0)
			rc = copy_array(p, (unsigned)g->m.tgt[s], (unsigned)g->m.dst[m], mo(g, (unsigned)s),
					mo(g, (unsigned)m), k, 0);
	}
	return rc;
}

/*
 * With every parity member lost, no live member holds the array's end
 * mark (ec_mark has nothing to copy): made again on their replacements
 * from the data members' sizes, which are all live then, in every view:
 * one byte at its end, and punched past it (where the view before reached
 * further).
 */
static int ec_mark_make(struct pass *p, const struct ec_group *g, const struct lode_key *mk,
			const struct lode_key *k, int v0)
{
	int rc;

	for (unsigned m = g->cls->k; m < (unsigned)g->n; m++)
		if (g->m.tgt[m] >= 0)
			return 0; /* a live one: ec_mark copies it */
	for (int v = v0; v <= p->nsnaps; v++) {
		uint64_t end;

		if ((rc = ec_data_end(p, g, k, v, &end)) != 0)
			return rc > 0 ? 0 : rc; /* more than p lost: nothing was rebuilt */
		for (unsigned m = g->cls->k; m < (unsigned)g->n && rc == 0; m++)
			if (g->m.dst[m] >= 0)
				rc = mark_put(p, (unsigned)g->m.dst[m], true, g, m, mk,
					      view_write(p, v), end);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/*
 * An array akey in views v0 (0: every snapshot's, then the latest;
 * p->nsnaps: the latest only) to the latest: every lost member's cells,
 * piece by piece, each piece in every view in turn, under the array's
 * lease (held for one piece at a time, so that writers of a large array
 * wait for a piece, not for the whole array; a snapshot's view cannot
 * change, but the lease says first whether the array is torn).
 */
static int ec_array(struct pass *p, const struct ec_group *g, struct lode_oid oid,
		    const struct lode_key *k, int v0)
{
	unsigned nk = g->cls->k, nm = nk + g->cls->p, ns = 0;
	uint8_t src[EC_CELLS_MAX], mkb[LODE_KEY_MAX];
	uint64_t *size = p->sizes, *mark = p->marks, top = 0;
	uint32_t want = 0;
	struct lode_key mk;
	bool marked = conn_ec_mark_key(k, mkb, &mk);
	int rc;

	for (unsigned m = 0; m < nm; m++) {
		if (g->m.tgt[m] < 0)
			want |= g->m.dst[m] >= 0 ? 1u << m : 0;
		else if (ns < nk)
			src[ns++] = (uint8_t)m;
	}
	if (ns < nk)
		return -EIO; /* more than p lost: nothing to rebuild from */
	/* A live member the rebuild moves (pushed by a replacement): its own
	 * cells, copied. */
	for (unsigned m = 0; m < nm; m++)
		if (g->m.tgt[m] >= 0 && g->m.dst[m] >= 0 &&
		    (rc = copy_array(p, (unsigned)g->m.tgt[m], (unsigned)g->m.dst[m], mo(g, m),
				      mo(g, m), k, v0)) < 0)
			return rc;
	if (!want)
		return 0;
	/* Each view's size: the most any live member holds in it; and its
	 * end mark: the most any live parity member's says (ec_io.c), read
	 * only when a data member is rebuilt (nothing else uses it). */
	for (int v = v0; v <= p->nsnaps; v++) {
		size[v] = mark[v] = 0;
		for (unsigned m = 0; m < nm; m++) {
			struct conn_tgt_io sz = {.epoch = view_read(p, v)};

			if (g->m.tgt[m] < 0)
				continue;
			rc = conn_tgt_io(p->ct, (unsigned)g->m.tgt[m], NET_OP_ARR_SIZE, mo(g, m), k,
					 &sz);
			if (rc < 0 && rc != -ENOENT)
				return rc;
			if (rc == 0 && sz.val > size[v])
				size[v] = sz.val;
			if (m < nk || !marked || !(want & ((1u << nk) - 1)))
				continue;
			sz = (struct conn_tgt_io){.epoch = view_read(p, v)};
			rc = conn_tgt_io(p->ct, (unsigned)g->m.tgt[m], NET_OP_ARR_SIZE, mo(g, m), &mk,
					 &sz);
			if (rc < 0 && rc != -ENOENT)
				return rc;
			if (rc == 0 && sz.val > mark[v])
				mark[v] = sz.val;
		}
		top = size[v] > top ? size[v] : top;
		/* A lost data member may reach further than every live one
		 * (written zeros where the parity was punched): the mark says. */
		for (unsigned m = 0; m < nk && size[v] && mark[v]; m++)
			if (want & 1u << m && mark_local(nk, m, mark[v]) > top)
				top = mark_local(nk, m, mark[v]);
	}
	if (!p->ecprev && !(p->ecprev = malloc(EC_CELLS_MAX * (size_t)EC_PIECE)))
		return -ENOMEM;
	for (uint64_t off = 0; off < top && !stopping(p->rb); off += EC_PIECE) {
		uint64_t n = top - off < EC_PIECE ? top - off : EC_PIECE, ext[EC_CELLS_MAX] = {0};
		int host = -1;

		for (unsigned m = 0; m < nm; m++)
			if (want & 1u << m)
				memset(p->ecprev + (size_t)m * EC_PIECE, 0, n);
		/* A piece's failure writes only to the replacements: the lease goes
		 * back whole. ec_lease gives it back itself when it did not mend.
		 * The snapshots' views cannot change: the lease is taken first
		 * only to learn whether the array is torn (and mend it), and
		 * not held while they are rebuilt, which writers would wait for. */
		rc = 0;
		if (v0 < p->nsnaps) {
			rc = ec_lease(p, g, oid, k, off, n, size[p->nsnaps], &host);
			(void)ec_lease_op(p, host, oid, k, off, n, 0, 0);
			host = -1;
		}
		for (int v = v0; v < p->nsnaps && rc == 0; v++)
			rc = ec_piece(p, g, oid, k, src, ns, want, off, n, v, size[v], mark[v], ext);
		if (rc == 0 && (rc = ec_lease(p, g, oid, k, off, n, size[p->nsnaps], &host)) == 0)
			rc = ec_piece(p, g, oid, k, src, ns, want, off, n, p->nsnaps,
				      size[p->nsnaps], mark[p->nsnaps], ext);
		(void)ec_lease_op(p, host, oid, k, off, n, 0, 0);
		if (rc > 0)
			return 0; /* torn, and left so: the pass fails at its end */
		if (rc < 0)
			return rc;
	}
	return marked && want >> nk ? ec_mark_make(p, g, &mk, k, v0) : 0;
}

/*
 * What akey k is in view v over the group's live members, as akey_kind
 * says: a single value lives whole on every member, but a member may hold
 * none of a small array's cells, so each is asked until one has the akey.
 */
static int ec_kind(struct pass *p, const struct ec_group *g, const struct lode_key *k, int v,
		   int *holder)
{
	for (int m = 0; m < g->n; m++) {
		int rc;

		if (g->m.tgt[m] < 0)
			continue;
		if ((rc = akey_kind(p, (unsigned)g->m.tgt[m], mo(g, (unsigned)m), k, v)) != 0) {
			*holder = *holder < 0 ? m : *holder;
			return rc;
		}
	}
	return 0;
}

/*
 * One akey under an EC dkey, in every view: a single value copied from a
 * live member that holds it to each replacement, as a replica's is; an
 * array's lost cells rebuilt. An akey whose kind changed between views is
 * rebuilt as its latest view only, as copy_akey does.
 */
static int ec_akey(struct pass *p, const struct ec_group *g, struct lode_oid oid,
		   const struct lode_key *k)
{
	int kinds = 0, latest = 0, holder = -1, rc = 0;

	if (conn_ec_is_mark(k->akey, k->akey_len))
		return ec_mark(p, g, k);
	for (int v = 0; v <= p->nsnaps; v++) {
		int h = -1;

		if ((latest = ec_kind(p, g, k, v, &h)) < 0)
			return latest;
		kinds |= latest ? 1 << latest : 0;
		holder = h >= 0 ? h : holder; /* the latest view's that has it */
	}
	if (latest == 2 || kinds == 1 << 2) {
		/* A single value (copy_akey takes the latest view alone where
		 * its kind changed), from a member that has it in the latest
		 * view it is in: one that held an array's cells before has no
		 * such value to give. */
		for (int m = 0; m < g->n && rc == 0; m++)
			if (g->m.dst[m] >= 0)
				rc = copy_akey(p, (unsigned)g->m.tgt[holder], (unsigned)g->m.dst[m],
					       mo(g, (unsigned)holder), mo(g, (unsigned)m), k);
		return rc;
	}
	if (kinds == 0)
		return 0;
	return ec_array(p, g, oid, k, kinds == 1 << 1 ? 0 : p->nsnaps);
}

/* A dkey of an EC member's object on our target (w->oid names the member):
 * rebuild the group's if we are that member, and its first live parity member. */
static int dkey_ec(struct keys_walk *w, const uint8_t *dkey, uint16_t dlen)
{
	struct pass *p = w->p;
	struct ec_group g = {.cls = w->cls, .oid = layout_oid_plain(w->oid)};
	struct lode_key dk = {dkey, dlen, NULL, 0};
	struct key_set ks = {0};
	struct keys_walk aw = {.p = p, .oid = w->oid, .buf = p->akeys, .cap = sizeof(p->akeys),
			       .fn = set_add, .set = &ks, .all = w->all};
	bool any = false;
	int rc = 0;

	g.n = conn_rebuild_group(p->c, w->cls, g.oid, conn_dkey_hash(dkey, dlen), p->self,
				 w->local, &g.m);
	/* Not the member this target is now: a copy a move is making here, or
	 * what a move left here for the reclaim. */
	if (g.n <= 0 || g.m.me < 0 || g.m.me != layout_oid_member_of(w->oid))
		return g.n < 0 ? g.n : 0;
	for (int m = 0; m < g.n; m++)
		any |= g.m.dst[m] >= 0;
	/* The first live parity member rebuilds it: every array write and
	 * every single value reaches it, and the map says which it is, so no
	 * write made during the pass changes the choice. With every parity
	 * member lost, each live holder does (twice is harmless). */
	for (int m = (int)w->cls->k; m < g.n && any; m++) {
		if (g.m.tgt[m] < 0)
			continue;
		if (m != g.m.me)
			return 0;
		break;
	}
	if (!any || !(g.codec = codec_for(p, w->cls)))
		return any ? -ENOMEM : 0;
	if (!p->ecbuf && !(p->ecbuf = malloc(2 * EC_CELLS_MAX * (size_t)EC_PIECE)))
		return -ENOMEM;
	/* Counted for the log: members that go where another is now. */
	for (int m = 0; m < g.n; m++)
		for (int o = 0; o < g.n && g.m.dst[m] >= 0; o++)
			p->beside += o != m && g.m.tgt[o] == g.m.dst[m];
	for (int m = 0; m < g.n && rc == 0; m++) {
		if (g.m.tgt[m] < 0)
			continue;
		aw.tgt = (unsigned)g.m.tgt[m];
		aw.oid = mo(&g, (unsigned)m);
		rc = keys_each(&aw, NET_OP_AKEY_LIST, &dk);
	}
	for (size_t at = 0; at < ks.used && rc == 0 && !stopping(p->rb);) {
		uint16_t len = (uint16_t)(ks.buf[at] | ks.buf[at + 1] << 8);
		struct lode_key k = {dkey, dlen, ks.buf + at + 2, len};

		rc = ec_akey(p, &g, g.oid, &k);
		at += 2 + (size_t)len;
	}
	free(ks.buf);
	return rc;
}

/*
 * A drop or fold (op) on target t. The target answers -EBUSY while a write
 * of what it would remove is in flight there, or while its map is older
 * than ours (src/server/service.c, op_reclaim_clear): asked again, for up
 * to RECLAIM_BUSY_TRIES x 10 ms, then -EAGAIN (the walk again, later).
 */
static int reclaim_io(struct pass *p, unsigned t, uint16_t op, struct lode_oid oid,
		      const struct lode_key *k)
{
	int rc = -EBUSY;

	for (int i = 0; rc == -EBUSY && i < RECLAIM_BUSY_TRIES && !stopping(p->rb); i++) {
		struct conn_tgt_io io = {.epoch = LODE_EPOCH_MAX};

		if (i)
			nap(p->rb, 10);
		rc = conn_tgt_io(p->ct, t, op, oid, k, &io);
	}
	if (rc != -EBUSY || stopping(p->rb))
		return rc == -EBUSY ? -EAGAIN : rc;
	srv_log("reclaim: target %u kept refusing to remove what older writes in flight "
		"(or its older map) still reach, for %d ms: the walk goes again",
		t, RECLAIM_BUSY_TRIES * 10);
	return -EAGAIN;
}

/*
 * The reclaim (docs/decisions/0014): a dkey on our target that the settled
 * layout does not place here any more (a move took it elsewhere) goes,
 * physically, so that a later move back here copies it onto nothing. Only
 * what placement surely puts elsewhere: an error keeps the dkey.
 */
static int dkey_reclaim(struct keys_walk *w, const uint8_t *dkey, uint16_t dlen)
{
	struct lode_key dk = {dkey, dlen, NULL, 0};
	int rc = conn_dkey_member(w->p->c, w->cls, w->oid, conn_dkey_hash(dkey, dlen), w->p->self,
				  w->local);

	if (rc != 0)
		return rc == -ENOENT || rc == -EAGAIN ? rc : 0; /* a member, or not placeable: kept */
	rc = reclaim_io(w->p, w->tgt, NET_OP_DKEY_DROP, w->oid, &dk);
	if (rc == -LODE_EKEYEMPTY || rc == -ENOENT || rc == -LODE_ENOCONT)
		rc = 0; /* gone meanwhile */
	if (rc == 0)
		w->p->dropped++;
	return rc;
}

/* The dkeys of one object on our target (global t, local tl) that we copy
 * (or reclaim). */
static int scan_object(struct pass *p, unsigned t, uint16_t tl, struct lode_oid oid)
{
	struct layout_class cls;
	struct keys_walk w = {.p = p, .tgt = t, .oid = oid, .buf = p->keys, .cap = sizeof(p->keys),
			      .fn = dkey_copy};
	int rc;

	if (conn_obj_class(p->ct, oid, &cls) < 0)
		return 0; /* no class we place by */
	if (p->reclaim) {
		/* The object's punches here become punches of the dkeys here
		 * (which the walk then keeps or drops): one would otherwise hide
		 * a dkey copied back here later. */
		if ((rc = reclaim_io(p, t, NET_OP_OBJ_FOLD, oid, NULL)) < 0)
			return rc;
		w.fn = dkey_reclaim;
	} else if (cls.redun == LAYOUT_R_EC)
		w.fn = dkey_ec;
	/* The reclaim must find punched dkeys, to drop their punches; a copy
	 * with snapshots, the keys a snapshot has and the latest lacks. */
	w.all = p->reclaim || p->nsnaps > 0;
	w.cls = &cls;
	w.local = tl;
	if ((rc = keys_each(&w, NET_OP_DKEY_LIST, NULL)) == 0 && !p->reclaim)
		count(p->rb, 1, 0);
	return rc;
}

/* Every object of the open container on each of our targets. */
static int scan_container(struct pass *p)
{
	unsigned first, n;
	uint8_t raw[16 * 256];
	int rc = 0;

	if (conn_engine_targets(p->c, p->self, &first, &n) < 0)
		return -EHOSTDOWN; /* we are not connected to ourselves */
	for (unsigned t = first; t < first + n && rc == 0; t++) {
		struct lode_anchor an = {0};

		while (!an.eof && rc == 0 && !stopping(p->rb)) {
			struct conn_tgt_io io = {.epoch = LODE_EPOCH_MAX, .an = &an, .in = raw,
						 .cap = sizeof(raw),
						 .hflags = p->reclaim || p->nsnaps ? NET_F_LIST_ALL
										   : 0};

			if ((rc = conn_tgt_io(p->ct, t, NET_OP_OBJ_LIST, (struct lode_oid){0, 0}, NULL,
					      &io)) < 0)
				break;
			for (uint64_t i = 0; i < io.val && (i + 1) * 16 <= io.in_len && rc == 0; i++) {
				struct lode_oid oid = {0, 0};

				for (unsigned b = 0; b < 8; b++) {
					oid.hi |= (uint64_t)raw[16 * i + b] << (8 * b);
					oid.lo |= (uint64_t)raw[16 * i + 8 + b] << (8 * b);
				}
				rc = scan_object(p, t, (uint16_t)(t - first), oid);
			}
		}
	}
	return rc;
}

/* ---- a pass -------------------------------------------------------------------------- */

/* Until c has map version v: 0; -EAGAIN when it has a newer one; -ETIMEDOUT. */
static int map_ready(struct rebuild *rb, lode_conn_t *c, uint32_t v)
{
	for (int i = 0; i < 500 && !stopping(rb); i++) {
		uint32_t have = conn_map_version(c);

		if (have == v)
			return 0;
		if (have > v)
			return -EAGAIN;
		conn_map_wake(c, v);
		nap(rb, 20);
	}
	return -ETIMEDOUT;
}

static int connect_pool(struct rebuild *rb, const char *pool, uint32_t v, lode_conn_t **out)
{
	struct lode_conn_opts o = {
		.transport = (rb->s->transports & NET_TP_RDMA) ? "rdma" : "tcp",
		.user = rb->user,
		.secret = rb->secret,
		.pool = pool,
	};
	int rc;

	if ((rc = lode_connect(rb->addr, &o, out)) < 0)
		return rc;
	if ((rc = map_ready(rb, *out, v)) < 0) {
		lode_disconnect(*out);
		*out = NULL;
	}
	return rc;
}

/*
 * Before a reclaim: the open container and its snapshots on each of our
 * targets. A target that missed its creation (an engine that joined, or
 * was away, when it was made) gets them here, before anything moves onto
 * it; the others have them already.
 */
static int cont_prepare(struct pass *p)
{
	unsigned first, n;
	int rc = 0;

	if (conn_engine_targets(p->c, p->self, &first, &n) < 0)
		return -EHOSTDOWN; /* we are not connected to ourselves */
	for (unsigned t = first; t < first + n && rc == 0; t++)
		rc = cont_make(p, t);
	return rc;
}

/* Room for cap snapshots in p->snaps, and a size and a mark per view in
 * p->sizes and p->marks. */
static int snaps_room(struct pass *p, int cap)
{
	lode_epoch_t *s;
	uint64_t *z;

	if (cap <= p->snaps_cap && p->snaps)
		return 0;
	if (!(s = realloc(p->snaps, (size_t)cap * sizeof(*s))))
		return -ENOMEM;
	p->snaps = s;
	if (!(z = realloc(p->sizes, ((size_t)cap + 1) * sizeof(*z))))
		return -ENOMEM;
	p->sizes = z;
	if (!(z = realloc(p->marks, ((size_t)cap + 1) * sizeof(*z))))
		return -ENOMEM;
	p->marks = z;
	p->snaps_cap = cap;
	return 0;
}

/* Epoch e into p->snaps, ascending, once. */
static int snap_merge(struct pass *p, lode_epoch_t e)
{
	int i = 0, rc;

	while (i < p->nsnaps && p->snaps[i] < e)
		i++;
	if (i < p->nsnaps && p->snaps[i] == e)
		return 0;
	if (p->nsnaps == p->snaps_cap && (rc = snaps_room(p, 2 * p->snaps_cap + 16)) < 0)
		return rc;
	memmove(p->snaps + i + 1, p->snaps + i, (size_t)(p->nsnaps - i) * sizeof(*p->snaps));
	p->snaps[i] = e;
	p->nsnaps++;
	return 0;
}

/*
 * The open container's snapshots, ascending, into p->snaps: those of every
 * live target that has the container, merged. A target may lack some (a
 * snapshot made while a client did not reach it, or ours when we joined
 * after they were made: cont_prepare makes them from this list); a target
 * that fails is left out. -LODE_ENOCONT when no target has the container;
 * another error when none answered.
 */
static int snaps_get(struct pass *p)
{
	uint8_t *raw = NULL;
	size_t cap = 0;
	int rc, first_rc = -LODE_ENOCONT;
	bool any = false;

	p->nsnaps = 0;
	if ((rc = snaps_room(p, 16)) < 0 || (rc = room(&raw, &cap, 16 * 8)) < 0) {
		free(raw);
		return rc;
	}
	for (unsigned t = 0; t < p->c->ntargets; t++) {
		struct conn_tgt_io io;

		if (!conn_target_live(p->c, t))
			continue;
		do {
			io = (struct conn_tgt_io){.epoch = LODE_EPOCH_MAX, .in = raw, .cap = cap,
						  .max = (uint32_t)(cap / 8)};
			rc = conn_tgt_io(p->ct, t, NET_OP_SNAP_LIST, (struct lode_oid){0, 0}, NULL,
					 &io);
			if ((rc == 0 && io.val * 8 > cap) || rc == -EOVERFLOW) {
				size_t want = rc == 0 ? (size_t)io.val * 8 + 128 : 2 * cap + 128;

				if ((rc = room(&raw, &cap, want)) == 0)
					rc = -EAGAIN; /* again, with room */
			}
		} while (rc == -EAGAIN);
		if (rc < 0) {
			if (first_rc == -LODE_ENOCONT)
				first_rc = rc;
			continue;
		}
		any = true;
		for (uint64_t i = 0; i < io.val && (i + 1) * 8 <= io.in_len && rc == 0; i++) {
			lode_epoch_t e = 0;

			for (unsigned b = 0; b < 8; b++)
				e |= (lode_epoch_t)raw[8 * i + b] << (8 * b);
			rc = snap_merge(p, e);
		}
		if (rc < 0)
			break;
	}
	free(raw);
	if (rc == -ENOMEM)
		return rc;
	return any ? 0 : first_rc;
}

/* Every container of one pool. */
static int scan_pool(struct pass *p)
{
	char (*labels)[LODE_LABEL_MAX + 1] = calloc(4096, sizeof(*labels));
	int n, cap = 4096, rc = 0;

	if (!labels)
		return -ENOMEM;
	/* The count is of every container: list again into room for all. */
	while ((n = lode_cont_list(p->c, labels, cap)) > cap) {
		free(labels);
		cap = n;
		if (!(labels = calloc((size_t)cap, sizeof(*labels))))
			return -ENOMEM;
	}
	if (n < 0)
		rc = n;
	for (int i = 0; i < n && rc == 0 && !stopping(p->rb); i++) {
		if ((rc = lode_cont_open(p->c, labels[i], &p->ct)) < 0) {
			if (rc == -ENOENT)
				rc = 0; /* destroyed meanwhile */
			continue;
		}
		/* The latest view lands beneath every version written since the
		 * rebuild began, above the snapshots; each snapshot's at its own
		 * epoch (view_write). */
		p->epoch = 1;
		/* No target has it: destroyed meanwhile, or made at the service
		 * and not yet on any target. The reclaim waits a little for
		 * the second, lest a client that did not know this engine
		 * when it fetched its map leave it out here; a destroyed one
		 * never comes, and is left. */
		for (int t = 0;; t++) {
			rc = snaps_get(p);
			if (rc != -LODE_ENOCONT || !p->reclaim || t == CONT_WAIT_TRIES ||
			    stopping(p->rb))
				break;
			nap(p->rb, 100);
		}
		if (rc == -LODE_ENOCONT) {
			rc = 0;
			goto next;
		}
		for (int s = 0; rc == 0 && s < p->nsnaps; s++)
			if (p->snaps[s] >= p->epoch)
				p->epoch = p->snaps[s] + 1;
		if (rc == 0 && p->reclaim)
			rc = cont_prepare(p);
		if (rc == 0)
			rc = scan_container(p);
		if (rc == 0 && !p->reclaim) {
			/* A snapshot taken while we copied would read, on the
			 * copies, views read after it: the pass goes again. */
			int before = p->nsnaps;
			lode_epoch_t newest = before ? p->snaps[before - 1] : 0;

			if ((rc = snaps_get(p)) == 0 &&
			    (p->nsnaps != before || (before && p->snaps[before - 1] != newest)))
				rc = -EAGAIN;
		}
	next:
		lode_cont_close(p->ct);
		p->ct = NULL;
	}
	free(labels);
	return rc;
}

/* Every container of every pool (c0: a connection to our own), scanned. */
static int pools_scan(struct pass *p, lode_conn_t *c0)
{
	Lode__Mgmt__V1__Empty req = LODE__MGMT__V1__EMPTY__INIT;
	Lode__Mgmt__V1__PoolList *pools = NULL;
	int rc;

	rc = conn_mgmt_call(c0, "/lode.mgmt.v1.Mgmt/PoolListAll", &req.base,
			    &lode__mgmt__v1__pool_list__descriptor, (ProtobufCMessage **)&pools,
			    -ENOENT);
	for (size_t i = 0; rc == 0 && pools && i < pools->n_pools && !stopping(p->rb); i++) {
		const char *label = pools->pools[i]->label;
		bool own = strcmp(label, conn_pool(c0)) == 0;

		p->c = own ? c0 : NULL;
		if (!own && (rc = connect_pool(p->rb, label, p->version, &p->c)) < 0)
			break;
		rc = scan_pool(p);
		if (!own)
			lode_disconnect(p->c);
		p->c = NULL;
	}
	if (pools)
		protobuf_c_message_free_unpacked(&pools->base, NULL);
	return rc;
}

/*
 * The reclaim, before any rebuild (docs/decisions/0014): when the map says
 * a settled layout is not reclaimed everywhere yet and we have not done our
 * part, remove from our targets every dkey it places elsewhere, then say
 * so (rebuild_report, with the heartbeats). When the map says it is, we
 * have nothing of an older layout (we said so, or we were not one that
 * held shards). 0 or an error.
 */
static int reclaim_run(struct pass *p, lode_conn_t *c0)
{
	struct rebuild *rb = p->rb;
	uint32_t settled, have, again;
	int rc, due = conn_reclaim_due(c0, &settled);

	pthread_mutex_lock(&rb->mu);
	have = rb->reclaimed;
	if (!due && have < settled)
		rb->reclaimed = settled;
	pthread_mutex_unlock(&rb->mu);
	if (!due || have >= settled)
		return 0;
	srv_log("reclaim of what pool map version %u places elsewhere: started", settled);
	p->reclaim = true;
	p->dropped = 0;
	rc = pools_scan(p, c0);
	p->reclaim = false;
	if (rc == 0 && stopping(rb))
		rc = -ECANCELED;
	conn_reclaim_due(c0, &again);
	if (rc == 0 && again != settled)
		rc = -EAGAIN; /* another layout meanwhile: its reclaim is to do */
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&rb->mu);
	rb->reclaimed = settled;
	pthread_mutex_unlock(&rb->mu);
	srv_log("reclaim of what pool map version %u places elsewhere: done, %llu dkeys removed",
		settled, (unsigned long long)p->dropped);
	return 0;
}

/*
 * What this engine does for map version v: its reclaim if one is due,
 * then 1 when there is nothing to rebuild (no DOWN engine or target, no
 * drain or integration), 0 when it rebuilt its part, -EAGAIN when a newer
 * map came or the moves wait for every engine's reclaim (nothing is
 * reported for v then), else an error.
 */
static int pass_run(struct rebuild *rb, uint32_t v, uint32_t self)
{
	struct pass *p = calloc(1, sizeof(*p));
	lode_conn_t *c0 = NULL;
	uint64_t used = 0;
	double share = 0;
	int rc;

	if (!p)
		return -ENOMEM;
	p->rb = rb;
	p->version = v;
	p->self = self;
	if (getrandom(&p->token, sizeof(p->token), GRND_NONBLOCK) != (ssize_t)sizeof(p->token))
		p->token = (uint64_t)now_ms() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
	p->token |= 1; /* never 0 */
	if ((rc = connect_pool(rb, NULL, v, &c0)) < 0 || (rc = reclaim_run(p, c0)) < 0)
		goto out;
	if ((rc = conn_rebuild_due(c0, self, &share)) <= 0) {
		rc = rc == 0 ? 1 : rc;
		goto out;
	}
	for (unsigned i = 0; i < rb->s->ntargets; i++) {
		struct srv_tgt_info ti;

		srv_tgt_info(rb->s, i, &ti);
		used += ti.used;
	}
	pthread_mutex_lock(&rb->mu);
	memset(&rb->info, 0, sizeof(rb->info));
	rb->info.map_version = v;
	rb->info.running = true;
	rb->info.started_unix_ms = now_ms();
	rb->info.bytes_total = (uint64_t)((double)used * (share > 1 ? 1 : share));
	pthread_mutex_unlock(&rb->mu);
	srv_log("rebuild for pool map version %u: started", v);
	rc = pools_scan(p, c0);
	if (rc == 0 && stopping(rb))
		rc = -ECANCELED;
	if (rc == 0 && p->torn)
		rc = -ENOTRECOVERABLE; /* likewise: torn arrays whose data members are lost */
	if (p->torn)
		rb->torn_told = v; /* each torn array is logged once per map version */
	if (rc == 0 && p->beside)
		srv_log("rebuild for pool map version %u: %llu erasure-coded members went where "
			"another member of their group is now (each keeps its own object there)",
			v, (unsigned long long)p->beside);
	if (rc == 0 && conn_map_version(c0) != v)
		rc = -EAGAIN; /* the map moved under us: the copies may be for the old one */
out:
	if (c0)
		lode_disconnect(c0);
	for (int i = 0; i < 3; i++)
		ec_codec_destroy(p->codec[i]);
	free(p->ecbuf);
	free(p->ecprev);
	free(p->buf);
	free(p->prev);
	free(p->snaps);
	free(p->sizes);
	free(p->marks);
	free(p);
	return rc;
}

static void *rb_main(void *arg)
{
	struct rebuild *rb = arg;
	uint32_t done = 0, failed = 0;
	unsigned again = 0; /* passes failed in a row as the last one did */
	int failed_rc = 0;

	pthread_setname_np(pthread_self(), "loded-rebuild");
	while (!stopping(rb)) {
		uint32_t v = atomic_load(&rb->s->map_ver);
		int64_t self = atomic_load(&rb->s->engine_id);
		int rc;

		if (!rb->user[0] || v == 0 || v == done || self < 0 || atomic_load(&rb->s->fenced)) {
			nap(rb, 200);
			continue;
		}
		rc = pass_run(rb, v, (uint32_t)self);
		pthread_mutex_lock(&rb->mu);
		if (rc >= 0) {
			if (rc == 1) {
				memset(&rb->info, 0, sizeof(rb->info));
				rb->info.started_unix_ms = now_ms();
			}
			rb->info.map_version = v;
			rb->info.running = false;
			rb->info.errno_value = 0;
			rb->info.finished_unix_ms = now_ms();
			done = v;
		} else if (rc != -EAGAIN && rc != -ECANCELED) {
			rb->info.map_version = v;
			rb->info.running = false;
			rb->info.errno_value = rc;
		}
		pthread_mutex_unlock(&rb->mu);
		if (rc == 0)
			srv_log("rebuild for pool map version %u: done, %llu objects, %llu bytes", v,
				(unsigned long long)rb->info.objects_done,
				(unsigned long long)rb->info.bytes_done);
		else if (rc < 0 && rc != -EAGAIN && rc != -ECANCELED) {
			if (v == failed && rc == failed_rc) {
				again++;
			} else {
				/* Once per version and error: it is retried. */
				srv_log("rebuild for pool map version %u: %s; trying again", v,
					rc == -ENOSPC ? "too few engines left to place every replica"
					: rc == -ENOTRECOVERABLE
						? "an erasure-coded array is torn and lost a data "
						  "member (see above; it stays degraded until it is "
						  "punched)"
						: lode_strerror(rc));
				failed = v;
				failed_rc = rc;
				again = 0;
			}
		}
		/*
		 * The same failure again (too few engines left, a torn array)
		 * waits longer each time, up to 10 s: every pass connects to
		 * every engine and the service, and on a pool that cannot be
		 * rebuilt until an engine comes back that load never ends. A
		 * new map ends the wait.
		 */
		if (rc < 0)
			nap_on(rb, rc == -EAGAIN ? 200 : retry_ms(again), v);
	}
	return NULL;
}

int rebuild_start(struct srv *s, const char *addr, const char *cred, struct rebuild **out)
{
	struct rebuild *rb = calloc(1, sizeof(*rb));
	char msg[512];
	int rc;

	if (!rb)
		return -ENOMEM;
	rb->s = s;
	snprintf(rb->addr, sizeof(rb->addr), "%s", addr);
	snprintf(rb->cred, sizeof(rb->cred), "%s", cred);
	if ((rc = srv_cred_read(cred, rb->user, sizeof(rb->user), rb->secret, sizeof(rb->secret),
				msg, sizeof(msg))) < 0) {
		srv_log("rebuild: %s: this engine will not rebuild", msg);
		rb->user[0] = 0;
	}
	pthread_mutex_init(&rb->mu, NULL);
	clock_cond_init(&rb->cv);
	if (pthread_create(&rb->thread, NULL, rb_main, rb) != 0) {
		pthread_mutex_destroy(&rb->mu);
		pthread_cond_destroy(&rb->cv);
		free(rb);
		return -EAGAIN;
	}
	*out = rb;
	return 0;
}

void rebuild_stop(struct rebuild *rb)
{
	bool joined;

	if (!rb)
		return;
	pthread_mutex_lock(&rb->mu);
	rb->stop = true;
	joined = rb->joined;
	rb->joined = true;
	pthread_cond_broadcast(&rb->cv);
	pthread_mutex_unlock(&rb->mu);
	if (!joined)
		pthread_join(rb->thread, NULL);
}

void rebuild_free(struct rebuild *rb)
{
	if (!rb)
		return;
	rebuild_stop(rb);
	pthread_mutex_destroy(&rb->mu);
	pthread_cond_destroy(&rb->cv);
	explicit_bzero(rb->secret, sizeof(rb->secret));
	free(rb);
}

void rebuild_report(struct rebuild *rb, struct mgmt_rebuild_info *out)
{
	memset(out, 0, sizeof(*out));
	if (!rb)
		return;
	pthread_mutex_lock(&rb->mu);
	*out = rb->info;
	out->reclaimed_version = rb->reclaimed;
	pthread_mutex_unlock(&rb->mu);
}
