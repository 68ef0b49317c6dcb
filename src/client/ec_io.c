/*
 * Byte arrays of erasure-coded objects (EC_2P1, EC_4P2, EC_8P2): the cells
 * of each stripe on the members of the dkey's group, encoded here.
 *
 * An array (one akey under one dkey) is laid out in stripes of k data
 * cells of EC_IO_CELL bytes (src/ec's arithmetic): array byte x is in
 * stripe x / (k * cell), data cell (x / cell) % k. Member c of the group
 * (c < k) holds data cell c of every stripe, and member k + j parity cell
 * j, each as an ordinary byte array under the same keys (in an object of
 * the member's own on its target: layout_oid_member), with cell i of
 * stripe s at the member's offset s * cell + (offset in the cell). So a
 * run of stripes is one contiguous range on every member, a hole reads as
 * zeros on every member, and the parity of zeros is zeros.
 *
 * Every request here is pinned to one member (creq.pinned; place.c): it
 * goes there or fails, and a write to a DOWN member goes to its
 * replacement while a rebuild runs. The calls are synchronous: the pieces
 * of one call go out together under one parent and the caller waits.
 *
 *   write   a whole stripe is encoded from the caller's bytes and its k + p
 *           cells written; a partial stripe reads the rest of the stripe
 *           over the range its parity changes (degraded if need be), and
 *           writes the changed data and that parity range.
 *   read    the data cells' ranges, straight into the caller's buffer;
 *           a range whose member is lost (DOWN, unreachable, fenced, too
 *           slow) is rebuilt from the same range of k other members.
 *   punch   whole stripes are punched on every member; a partial stripe
 *           has its data ranges punched and its parity range encoded
 *           again (punched too when that comes out all zero).
 *   size    the highest byte of any data member, mapped back; with a data
 *           member lost, the array's end mark (below) says it.
 *
 * Single values of an EC object are not coded: they live whole on every
 * member, as a replica class's do (objects.c's path; they are small:
 * directory entries, attributes). The lists of an EC object's dkeys and
 * akeys ask its first parity member, which every array write reaches.
 *
 * A write that lost members is acknowledged when the map says each lost
 * one is DOWN (waited for, up to the connection's timeout, as replicated
 * writes wait) and at most p are lost: the stripe can then be read.
 *
 * Writes to one akey are serialised within the process (a partial stripe
 * is read, modified and written) by a lock, and across processes by the
 * array's write lease on one member of the group (docs/decisions/0015).
 */
#include "client/client.h"
#include "ec/ec.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* ---- codecs and locks ------------------------------------------------------------ */

static struct ec_codec *codecs[3]; /* EC_2P1, EC_4P2, EC_8P2 */
static pthread_once_t codecs_once = PTHREAD_ONCE_INIT;

static void codecs_make(void)
{
	static const unsigned kp[3][2] = {{2, 1}, {4, 2}, {8, 2}};

	for (int i = 0; i < 3; i++)
		if (ec_codec_create(kp[i][0], kp[i][1], &codecs[i]) < 0)
			codecs[i] = NULL;
}

static const struct ec_codec *codec_of(const struct layout_class *cls)
{
	pthread_once(&codecs_once, codecs_make);
	for (int i = 0; i < 3; i++)
		if (codecs[i] && ec_codec_k(codecs[i]) == cls->k && ec_codec_p(codecs[i]) == cls->p)
			return codecs[i];
	return NULL;
}

#define WLOCKS 64
static pthread_mutex_t wlocks[WLOCKS] = {[0 ... WLOCKS - 1] = PTHREAD_MUTEX_INITIALIZER};

/* The lock of one akey's writers in this process. */
static pthread_mutex_t *wlock_of(const lode_cont_t *ct, struct lode_oid oid,
				 const struct lode_key *k)
{
	uint64_t h = conn_dkey_hash(k->dkey, k->dkey_len) ^ conn_dkey_hash(k->akey, k->akey_len) * 31;

	h ^= oid.lo * 0x9e3779b97f4a7c15ull ^ oid.hi;
	h ^= (uint64_t)ct->uuid.b[0] | (uint64_t)ct->uuid.b[1] << 8;
	return &wlocks[h % WLOCKS];
}

/* ---- pieces: one request to one member ------------------------------------------- */

struct piece {
	uint16_t op;      /* NET_OP_ARR_FETCH, _UPDATE, _PUNCH or _SIZE */
	uint8_t member;
	uint64_t off;     /* on the member */
	uint64_t len;
	void *in;         /* a fetch's bytes */
	const void *out;  /* an update's bytes */
	int rc;
	uint64_t val;     /* a size's answer */
	const struct lode_key *key; /* NULL: the call's; else another (an end mark's) */
};

/* The member cannot be reached: read around it, write without it. */
static bool lost(int rc)
{
	return rc == -EHOSTDOWN || rc == -LODE_EFENCED || rc == -ETIMEDOUT;
}

static void piece_done(struct creq *r)
{
	struct piece *pc = r->ctx;

	pc->rc = r->rc;
	pc->val = r->val;
	r->rc = 0; /* the piece's own result, not the batch's */
}

/* Send piece pc under parent p; its result lands in pc->rc. */
static void piece_submit(lode_cont_t *ct, struct lode_oid oid, const struct lode_key *k,
			 lode_epoch_t epoch, struct piece *pc, struct creq *p)
{
	struct creq *r = conn_key_req(ct, pc->op, oid, pc->key ? pc->key : k);
	int rc = 0;

	pc->rc = 0;
	if (!r) {
		pc->rc = -ENOMEM;
		return;
	}
	r->pinned = true;
	r->member = pc->member;
	r->a.off = pc->off;
	r->a.epoch = epoch == LODE_EPOCH_MAX ? 0 : epoch;
	r->on_done = piece_done;
	r->ctx = pc;
	if (pc->op == NET_OP_ARR_UPDATE)
		rc = conn_value_out(r, pc->out, pc->len);
	else if (pc->op == NET_OP_ARR_FETCH)
		rc = conn_value_in(r, pc->in, pc->len);
	else
		r->a.len = pc->len;
	if (rc < 0) {
		creq_free(r);
		pc->rc = rc;
	} else if ((rc = creq_submit(r, NULL, p)) < 0) {
		pc->rc = rc;
	}
}

/* Send pieces [0, n) together and wait for all; each gets its own rc. */
static int batch_run(lode_cont_t *ct, struct lode_oid oid, const struct lode_key *k,
		     lode_epoch_t epoch, struct piece *pc, size_t n)
{
	struct creq *p;

	if (n == 0)
		return 0;
	if (!(p = creq_new(ct->c, 0, 0)))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		piece_submit(ct, oid, k, epoch, &pc[i], p);
	return creq_seal(p, NULL);
}

/* A growing array of pieces. */
struct pieces {
	struct piece *v;
	size_t n, cap;
};

static struct piece *piece_add(struct pieces *ps, uint16_t op, unsigned member, uint64_t off,
			       uint64_t len)
{
	if (ps->n == ps->cap) {
		size_t cap = ps->cap ? 2 * ps->cap : 32;
		struct piece *v = realloc(ps->v, cap * sizeof(*v));

		if (!v)
			return NULL;
		ps->v = v;
		ps->cap = cap;
	}
	ps->v[ps->n] = (struct piece){.op = op, .member = (uint8_t)member, .off = off, .len = len};
	return &ps->v[ps->n++];
}

/* ---- reads ------------------------------------------------------------------------- */

struct ec_ctx {
	lode_cont_t *ct;
	const struct layout_class *cls;
	const struct ec_codec *codec;
	struct lode_oid oid;
	const struct lode_key *k;
	lode_epoch_t epoch;
	unsigned nk, nm;  /* k, and k + p */
	uint32_t lost;    /* members found lost by this call */
	pthread_mutex_t *wlock; /* held by this call (a write): the akey's writers' lock */
	bool leased;      /* this call holds the array's write lease ... */
	uint8_t lease_member; /* ... on this member */
	uint64_t lease_token;
	uint64_t lease_off, lease_len; /* ... for this range of the members, */
	int64_t lease_at;  /* taken or renewed then (monotonic ms) */
	uint32_t holder;  /* a snapshot's mend: its hold's token, which its lease passes */
	uint32_t scope;   /* 0: the array's lease; NET_F_LEASE_DKEY, _OBJ: a punch's */
	bool torn;        /* ... and the array may be torn: given back so */
	uint64_t torn_off, torn_end; /* where (the members' range) */
	bool marked;      /* the array has an end mark (conn_ec_mark_key) ... */
	struct lode_key mk; /* ... under this key, in mkbuf */
	uint8_t mkbuf[LODE_KEY_MAX];
};

static int lease_take_whole(struct ec_ctx *x);
static int lease_take_read(struct ec_ctx *x);
static void lease_give(struct ec_ctx *x);
static int mark_set(struct ec_ctx *x, uint64_t end, uint64_t off, uint64_t len);
static int data_end(const struct ec_ctx *x, const struct piece *pc, uint64_t *end,
		    unsigned *dlost);

/* The lease's range for rebuilding pieces want[0, nw): where they lie on the members. */
static void lease_range_of(struct ec_ctx *x, struct piece *const *want, size_t nw)
{
	uint64_t lo = UINT64_MAX, hi = 0;

	for (size_t i = 0; i < nw; i++) {
		if (want[i]->off < lo)
			lo = want[i]->off;
		if (want[i]->off + want[i]->len > hi)
			hi = want[i]->off + want[i]->len;
	}
	x->lease_off = nw ? lo : 0;
	x->lease_len = nw ? hi - lo : 0;
}

/*
 * Rebuild the fetch pieces ps[i] of lost members (their in buffers) from
 * the same ranges of k members not lost; members that fail now are lost
 * too, and the sources chosen again.
 */
static int rebuild_pieces(struct ec_ctx *x, struct piece **want, size_t nw)
{
	uint64_t total = 0;
	uint8_t *tmp;
	int rc = 0;

	for (size_t i = 0; i < nw; i++)
		total += want[i]->len;
	if (!(tmp = malloc(total * x->nk + 1)))
		return -ENOMEM;
	for (;;) {
		uint8_t src[EC_CELLS_MAX];
		unsigned ns = 0;
		struct pieces ps = {0};
		uint64_t at = 0;
		bool again = false;

		for (unsigned m = 0; m < x->nm && ns < x->nk; m++)
			if (!(x->lost & 1u << m))
				src[ns++] = (uint8_t)m;
		if (ns < x->nk) {
			rc = -EIO; /* more than p members lost */
			break;
		}
		for (size_t i = 0; i < nw && rc == 0; i++) {
			for (unsigned s = 0; s < ns; s++) {
				struct piece *pc = piece_add(&ps, NET_OP_ARR_FETCH, src[s], want[i]->off,
							     want[i]->len);

				if (!pc) {
					rc = -ENOMEM;
					break;
				}
				pc->in = tmp + at;
				at += want[i]->len;
			}
		}
		if (rc == 0)
			rc = batch_run(x->ct, x->oid, x->k, x->epoch, ps.v, ps.n);
		for (size_t i = 0; i < ps.n && rc == 0; i++) {
			if (ps.v[i].rc == -ENOENT)
				memset(ps.v[i].in, 0, ps.v[i].len);
			else if (lost(ps.v[i].rc)) {
				x->lost |= 1u << ps.v[i].member;
				again = true;
			} else if (ps.v[i].rc < 0)
				rc = ps.v[i].rc;
		}
		for (size_t i = 0, j = 0; i < nw && rc == 0 && !again; i++) {
			uint8_t *cells[EC_CELLS_MAX] = {0};
			uint32_t present = 0;

			for (unsigned s = 0; s < ns; s++, j++) {
				cells[src[s]] = ps.v[j].in;
				present |= 1u << src[s];
			}
			cells[want[i]->member] = want[i]->in;
			rc = ec_reconstruct(x->codec, cells, present, 1u << want[i]->member,
					    want[i]->len);
		}
		free(ps.v);
		if (rc < 0 || !again)
			break;
	}
	free(tmp);
	return rc;
}

/*
 * Run fetch pieces of data members into their buffers, rebuilding those of
 * lost members. *all_absent: every piece found nothing there (-ENOENT).
 */
static int fetch_run(struct ec_ctx *x, struct pieces *ps, bool *all_absent)
{
	struct piece **want = NULL;
	size_t nw = 0;
	bool absent = true;
	int rc;

	if ((rc = batch_run(x->ct, x->oid, x->k, x->epoch, ps->v, ps->n)) < 0)
		return rc;
	for (size_t i = 0; i < ps->n; i++) {
		struct piece *pc = &ps->v[i];

		if (pc->rc == 0) {
			absent = false;
		} else if (pc->rc == -ENOENT) {
			memset(pc->in, 0, pc->len);
		} else if (lost(pc->rc)) {
			absent = false; /* unknown: read as what the others say */
			x->lost |= 1u << pc->member;
			if (!want && !(want = calloc(ps->n, sizeof(*want))))
				return -ENOMEM;
			want[nw++] = pc;
		} else {
			free(want);
			return pc->rc;
		}
	}
	if (nw && x->wlock) {
		rc = rebuild_pieces(x, want, nw);
	} else if (nw) {
		/* A read: no write of this process is halfway through a stripe
		 * while its cells are rebuilt from the others. */
		pthread_mutex_t *lk = wlock_of(x->ct, x->oid, x->k);

		pthread_mutex_lock(lk);
		lease_range_of(x, want, nw);
		if ((rc = lease_take_read(x)) == 0)
			rc = rebuild_pieces(x, want, nw);
		lease_give(x);
		pthread_mutex_unlock(lk);
	}
	free(want);
	if (all_absent)
		*all_absent = absent;
	return rc;
}

static int ctx_init(struct ec_ctx *x, lode_cont_t *ct, const struct layout_class *cls,
		    struct lode_oid oid, const struct lode_key *k, lode_epoch_t epoch)
{
	*x = (struct ec_ctx){.ct = ct, .cls = cls, .oid = oid, .k = k, .epoch = epoch,
			     .nk = cls->k, .nm = cls->k + cls->p};
	x->marked = conn_ec_mark_key(k, x->mkbuf, &x->mk);
	return (x->codec = codec_of(cls)) ? 0 : -ENOMEM;
}

/*
 * Whether any member holds the array: the members a read went to may hold
 * nothing of it while others do (a hole there, zeros), or none of them does
 * (-ENOENT, as for any array never written, or punched by its dkey or
 * object). Each member is asked the engine's own question, a one-byte
 * fetch: -ENOENT when it has no extent of the array at all, as a
 * replicated array's read is answered. A member that cannot answer may
 * hold bytes.
 */
static bool array_exists(struct ec_ctx *x)
{
	struct piece pc[EC_CELLS_MAX];
	uint8_t one[EC_CELLS_MAX];

	for (unsigned m = 0; m < x->nm; m++)
		pc[m] = (struct piece){.op = NET_OP_ARR_FETCH, .member = (uint8_t)m, .len = 1,
				       .in = &one[m]};
	if (batch_run(x->ct, x->oid, x->k, x->epoch, pc, x->nm) < 0)
		return true; /* cannot tell: zeros rather than a false absence */
	for (unsigned m = 0; m < x->nm; m++)
		if (pc[m].rc != -ENOENT)
			return true;
	return false;
}

int conn_ec_read(lode_cont_t *ct, const struct layout_class *cls, struct lode_oid oid,
		 lode_epoch_t epoch, const struct lode_key *k, uint64_t off, void *buf,
		 uint32_t len, bool holes)
{
	struct ec_ctx x;
	struct ec_range it;
	struct ec_span sp;
	struct pieces ps = {0};
	bool absent = true;
	int rc;

	if ((rc = ctx_init(&x, ct, cls, oid, k, epoch)) < 0 ||
	    (rc = ec_range_init(&it, cls->k, EC_IO_CELL, off, len)) < 0)
		return rc;
	while (rc == 0 && ec_range_next(&it, &sp)) {
		for (unsigned c = sp.first_cell; c <= sp.last_cell; c++) {
			struct piece *pc = piece_add(&ps, NET_OP_ARR_FETCH, c,
						     sp.stripe * EC_IO_CELL + sp.cell_off[c],
						     sp.cell_len[c]);

			if (!pc) {
				rc = -ENOMEM;
				break;
			}
			pc->in = (uint8_t *)buf + sp.cell_buf[c];
		}
	}
	if (rc == 0)
		rc = fetch_run(&x, &ps, &absent);
	free(ps.v);
	if (rc == 0 && absent && !holes && !array_exists(&x))
		rc = -ENOENT;
	return rc;
}

/* ---- writes and punches ------------------------------------------------------------ */

/* Whether the map now has member m of (oid, k's dkey) DOWN. */
static bool member_down(struct ec_ctx *x, unsigned m)
{
	lode_conn_t *c = x->ct->c;
	struct layout_group g;
	bool down = false;

	pthread_mutex_lock(&c->lock);
	if (c->map && layout_dkey_place(c->map, x->oid, x->cls,
					conn_dkey_hash(x->k->dkey, x->k->dkey_len), &g) == 0)
		down = m < g.size && g.shard[m].down;
	pthread_mutex_unlock(&c->lock);
	return down;
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Send again the failed pieces of the members of mask that the map now has
 * DOWN: to the replacement if a rebuild runs, else they fail at once.
 */
static int resend_down(struct ec_ctx *x, struct pieces *ps, uint32_t mask)
{
	struct piece *again;
	size_t *idx, na = 0;
	uint32_t down = 0;
	int rc;

	for (unsigned m = 0; m < x->nm; m++)
		if (mask & 1u << m && member_down(x, m))
			down |= 1u << m;
	if (!down)
		return 0;
	again = calloc(ps->n, sizeof(*again));
	idx = calloc(ps->n, sizeof(*idx));
	if (!again || !idx) {
		free(again);
		free(idx);
		return -ENOMEM;
	}
	for (size_t i = 0; i < ps->n; i++) {
		if (ps->v[i].rc < 0 && down & 1u << ps->v[i].member) {
			again[na] = ps->v[i];
			idx[na++] = i;
		}
	}
	rc = batch_run(x->ct, x->oid, x->k, LODE_EPOCH_MAX, again, na);
	for (size_t j = 0; j < na && rc == 0; j++)
		ps->v[idx[j]].rc = again[j].rc;
	free(again);
	free(idx);
	return rc;
}

/*
 * Run write pieces (updates and punches). A member that does not take its
 * piece is waited on until the map says it is DOWN, as a replicated write
 * waits, and its pieces sent again (to its replacement, while a rebuild
 * runs). The write stands with at most p members lost, all DOWN.
 */
static int write_run(struct ec_ctx *x, struct pieces *ps)
{
	int64_t deadline = mono_ms() + x->ct->c->timeout_ms;
	uint32_t resent = 0;
	int rc;

	if ((rc = batch_run(x->ct, x->oid, x->k, LODE_EPOCH_MAX, ps->v, ps->n)) < 0)
		return rc;
	for (;;) {
		uint32_t gone = 0, down = 0;

		for (size_t i = 0; i < ps->n; i++) {
			if (ps->v[i].rc == 0)
				continue;
			if (!lost(ps->v[i].rc))
				return ps->v[i].rc;
			gone |= 1u << ps->v[i].member;
		}
		for (unsigned m = 0; m < x->nm; m++)
			if (gone & 1u << m && member_down(x, m))
				down |= 1u << m;
		if (down & ~resent) {
			/* DOWN now: sent again, once, to the replacement if a rebuild
			 * runs (else they fail at once, a degraded write). */
			if ((rc = resend_down(x, ps, down & ~resent)) < 0)
				return rc;
			resent |= down;
			continue;
		}
		/* Lost while the old bytes were read, or now: at most p. */
		if (__builtin_popcount(gone | x->lost) > (int)x->cls->p)
			return -EIO; /* the stripes could not be read back */
		if (!(gone & ~down))
			return 0;
		if (mono_ms() > deadline)
			return -EHOSTDOWN; /* no map said they are DOWN in time */
		conn_map_wake(x->ct->c, atomic_load(&x->ct->c->map_ver) + 1);
		nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
	}
}

/*
 * The array's write lease (src/server/lease.h), so that writers in other
 * processes do not read, modify and write the same stripes at once. It
 * lives on the first member the map has live, parity members first (the
 * first parity member is what every write reaches); clients with the same
 * map agree on it, and an engine refuses a request placed with an older
 * map. Taken after the process's own lock of the akey, held until the
 * write's pieces are durable; degraded reads take it too, so that no cell
 * is rebuilt from a stripe half written.
 *
 * A lease lasts LEASE_TIMEOUTS request timeouts, longer than a write can
 * take, and ends early when its session closes (a tcp client that died);
 * a busy lease is asked for again, waits doubling from 50 µs to 5 ms,
 * until its holder's time could have run out, then -EBUSY. A member that
 * does not answer is waited on until the map says it is DOWN, as writes
 * wait, and the next live member holds the leases then.
 *
 * The write hole: a holder that dies, or whose write fails, may leave a
 * stripe's data and parity out of step. Its lease is then given back torn
 * (or ends torn: expiry, session closed), with the members' range it
 * covered, and the next holder mends that range (mend_array) before it
 * writes or rebuilds anything; one that cannot gives it back torn again.
 */
#define LEASE_TIMEOUTS 4

static uint64_t lease_token_new(void)
{
	static _Atomic uint64_t seq;
	uint64_t v = 0;

	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v))
		v = ((uint64_t)getpid() << 32 ^ (uint64_t)mono_ms()) * 0x9e3779b97f4a7c15ull;
	v ^= atomic_fetch_add(&seq, 1);
	return v ? v : 1;
}

/* The member holding the leases of x's group now; -EIO if none is live. */
static int lease_host(struct ec_ctx *x)
{
	for (unsigned i = 0; i < x->nm; i++) {
		unsigned m = (x->nk + i) % x->nm;

		if (!member_down(x, m))
			return (int)m;
	}
	return -EIO;
}

/* The members' range [*mo, *mo + *ml) of the stripes of array bytes [off, off + len). */
static void lease_range(struct ec_ctx *x, uint64_t off, uint64_t len)
{
	uint64_t stripe = (uint64_t)x->nk * EC_IO_CELL, s0 = off / stripe, s1;

	if (len == 0)
		len = 1;
	s1 = (len - 1 > UINT64_MAX - off ? UINT64_MAX : off + len - 1) / stripe;
	x->lease_off = s0 * EC_IO_CELL;
	x->lease_len = (s1 - s0 + 1) * EC_IO_CELL;
}


/* A NET_OP_LEASE of x's array to member m: take it for ms, or give it back (0). */
static struct creq *lease_req(struct ec_ctx *x, unsigned m, uint64_t token, uint32_t ms)
{
	struct creq *r = conn_key_req(x->ct, NET_OP_LEASE, x->oid, x->k);

	if (r) {
		r->pinned = true;
		r->member = (uint8_t)m;
		r->hflags = x->wlock ? 0 : NET_F_LEASE_READ; /* a degraded read's */
		r->hflags |= (x->holder ? NET_F_SNAP_HOLD : 0) | x->scope;
		r->a.epoch = token;
		r->a.off = x->lease_off;
		r->a.len = x->lease_len;
		r->a.max = ms;
	}
	return r;
}

/*
 * Ask member m for the lease (token, ms; renew: the holder again) and
 * wait: the result, with lr and range filled.
 */
static int lease_ask(struct ec_ctx *x, unsigned m, uint64_t token, uint32_t ms, bool renew,
		     struct conn_answer *lr, uint8_t range[16])
{
	struct creq *r = lease_req(x, m, token, ms);
	int rc;

	if (!r)
		return -ENOMEM;
	if (renew)
		r->hflags |= NET_F_LEASE_RENEW; /* -ENOENT if it is not still ours */
	r->in = range;
	r->in_cap = 16;
	r->on_done = conn_answer_done;
	r->ctx = lr;
	if ((rc = creq_submit(r, NULL, NULL)) == 0)
		rc = lr->rc;
	return rc;
}

static int lease_take(struct ec_ctx *x)
{
	lode_conn_t *c = x->ct->c;
	uint64_t ms = (uint64_t)c->timeout_ms * LEASE_TIMEOUTS;
	int64_t start = mono_ms(), lost_until = 0;
	/* A snapshot's mend waits one timeout: what holds the lease longer
	 * (a degraded reader, another snapshot's mend of it) keeps it, and
	 * the array is left as it is (mend_listed). */
	int64_t busy_until = start + (x->holder ? 0 : (int64_t)ms) + c->timeout_ms;
	long wait_ns = 50 * 1000;
	uint64_t token = lease_token_new();

	if (x->holder) /* the hold it may pass is the one its high half names */
		token = (uint64_t)x->holder << 32 | (token & 0xffffffffu);

	if (ms > UINT32_MAX)
		ms = UINT32_MAX;
	for (;;) {
		int m = lease_host(x), rc;
		struct conn_answer pc = {0};
		uint8_t range[16];

		if (m < 0)
			return m;
		if ((rc = lease_ask(x, (unsigned)m, token, (uint32_t)ms, false, &pc, range)) == 0) {
			x->leased = true;
			x->lease_member = (uint8_t)m;
			x->lease_token = token;
			x->lease_at = mono_ms();
			x->torn = pc.val & 1;
			x->torn_off = 0;
			x->torn_end = UINT64_MAX; /* where the reply does not say */
			if (x->torn && pc.in_len == sizeof(range)) {
				x->torn_off = x->torn_end = 0;
				for (int i = 7; i >= 0; i--) {
					x->torn_off = x->torn_off << 8 | range[i];
					x->torn_end = x->torn_end << 8 | range[8 + i];
				}
			}
			return 0;
		}
		if (rc == -EBUSY || rc == -EAGAIN) { /* held, or the host's table full */
			if (mono_ms() > busy_until)
				return rc;
			nanosleep(&(struct timespec){0, wait_ns}, NULL);
			if ((wait_ns *= 2) > 5 * 1000 * 1000)
				wait_ns = 5 * 1000 * 1000;
			continue;
		}
		if (!lost(rc))
			return rc;
		if (member_down(x, (unsigned)m))
			continue; /* the next live member holds them now */
		if (!lost_until)
			lost_until = mono_ms() + c->timeout_ms;
		else if (mono_ms() > lost_until)
			return -EHOSTDOWN; /* no map said it is DOWN in time */
		conn_map_wake(c, atomic_load(&c->map_ver) + 1);
		nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
	}
}

/*
 * Renew the lease once a quarter of it has gone (a long mend, or a write
 * that waited for a map), so that it does not run out under the work. A
 * lease found lost (another holds it now) fails the call: its pieces may
 * interleave with the other's, and its torn give-back marks the range.
 */
static int lease_renew(struct ec_ctx *x)
{
	uint64_t ms = (uint64_t)x->ct->c->timeout_ms * LEASE_TIMEOUTS;
	struct conn_answer lr = {0};
	uint8_t range[16];
	int rc;

	if (!x->leased || mono_ms() - x->lease_at < (int64_t)(ms / 4))
		return 0;
	if (ms > UINT32_MAX)
		ms = UINT32_MAX;
	if ((rc = lease_ask(x, x->lease_member, x->lease_token, (uint32_t)ms, true, &lr, range)) == 0)
		x->lease_at = mono_ms();
	return rc;
}

/*
 * Give the lease back, without waiting for the answer: the write is done
 * either way, and a lease that is not given back runs out (or ends with
 * its member, if that is DOWN now) and leaves the array torn.
 */
static void lease_give(struct ec_ctx *x)
{
	struct creq *r;

	if (!x->leased)
		return;
	x->leased = false;
	if (member_down(x, x->lease_member) ||
	    !(r = lease_req(x, x->lease_member, x->lease_token, 0)))
		return;
	r->hflags |= x->torn ? NET_F_TORN : 0;
	r->detached = true;
	(void)creq_submit(r, NULL, NULL);
}

/*
 * A torn array (the lease's last holder did not give it back whole: it
 * died, or its write failed, maybe between a stripe's data and parity):
 * make every parity cell the code of its stripe's data cells again, over
 * the torn range (the members' range its holders wrote, as far as any
 * member holds bytes), MEND_PIECE bytes of each member at a time. Each
 * cell then holds its old bytes or the unfinished write's, and the
 * stripes read back the same healthy or degraded. Needs every data
 * member: with one lost, the parity is all that could rebuild it, and it
 * cannot be trusted (-EIO). Clears x->torn on success.
 */
#define MEND_PIECE (256u << 10)

static int mend_array(struct ec_ctx *x)
{
	struct piece sz[EC_CELLS_MAX];
	uint64_t end = 0;
	uint8_t *buf;
	int rc;

	for (unsigned m = 0; m < x->nm; m++)
		sz[m] = (struct piece){.op = NET_OP_ARR_SIZE, .member = (uint8_t)m};
	if ((rc = batch_run(x->ct, x->oid, x->k, LODE_EPOCH_MAX, sz, x->nm)) < 0)
		return rc;
	for (unsigned m = 0; m < x->nm; m++) {
		if (sz[m].rc == -ENOENT)
			continue;
		if (sz[m].rc < 0 && (m < x->nk || !lost(sz[m].rc)))
			return lost(sz[m].rc) ? -EIO : sz[m].rc;
		if (sz[m].rc == 0 && sz[m].val > end)
			end = sz[m].val;
	}
	if (end > x->torn_end)
		end = x->torn_end;
	if (!(buf = malloc((size_t)x->nm * MEND_PIECE)))
		return -ENOMEM;
	for (uint64_t off = x->torn_off; off < end && rc == 0; off += MEND_PIECE) {
		uint64_t n = end - off < MEND_PIECE ? end - off : MEND_PIECE;
		struct piece rd[EC_K_MAX];
		struct pieces ws = {0};
		uint8_t *data[EC_K_MAX], *par[EC_P_MAX];

		for (unsigned c = 0; c < x->nk; c++) {
			data[c] = buf + (size_t)c * MEND_PIECE;
			rd[c] = (struct piece){.op = NET_OP_ARR_FETCH, .member = (uint8_t)c, .off = off,
					       .len = n, .in = data[c]};
		}
		if ((rc = lease_renew(x)) < 0 ||
		    (rc = batch_run(x->ct, x->oid, x->k, LODE_EPOCH_MAX, rd, x->nk)) < 0)
			break;
		for (unsigned c = 0; c < x->nk && rc == 0; c++) {
			if (rd[c].rc == -ENOENT)
				memset(data[c], 0, n);
			else if (rd[c].rc < 0)
				rc = lost(rd[c].rc) ? -EIO : rd[c].rc;
		}
		for (unsigned j = 0; j < x->cls->p && rc == 0; j++) {
			struct piece *pc;

			par[j] = buf + (size_t)(x->nk + j) * MEND_PIECE;
			if (!(pc = piece_add(&ws, NET_OP_ARR_UPDATE, x->nk + j, off, n)))
				rc = -ENOMEM;
			else
				pc->out = par[j];
		}
		if (rc == 0)
			rc = ec_encode(x->codec, data, par, n);
		if (rc == 0)
			rc = write_run(x, &ws);
		free(ws.v);
	}
	free(buf);
	/* The torn write's mark may not have landed where its data did, or
	 * landed where its data did not: set at the data members' end (every
	 * one is live here), and punched past it. */
	if (rc == 0 && x->marked) {
		unsigned dlost;

		if ((rc = data_end(x, sz, &end, &dlost)) == 0)
			rc = mark_set(x, end, end, UINT64_MAX - end);
	}
	if (rc == 0)
		x->torn = false;
	return rc;
}

/*
 * Take the lease, and mend the array if it is torn. A call that fails
 * with the lease held gives it back torn (lease_give).
 */
static int lease_take_whole(struct ec_ctx *x)
{
	int rc = lease_take(x);

	if (rc == 0 && x->torn)
		rc = mend_array(x);
	return rc;
}

/*
 * Take the lease for a degraded read. A torn array is not mended here: a
 * read has lost a data member, without which the parity cannot be made
 * whole (and a reader may lack write rights): -EIO.
 */
static int lease_take_read(struct ec_ctx *x)
{
	int rc = lease_take(x);

	return rc == 0 && x->torn ? -EIO : rc;
}

/*
 * A stripe written or punched in part: the new contents of every data cell
 * over the parity range [po, po + pl) in nb (cell c at nb + c * pl), from
 * the old bytes where the span does not cover the range. The old bytes
 * come first, for every partial span at once: olds.
 */
static int old_ranges(struct ec_ctx *x, const struct ec_span *sp, uint8_t *nb, struct pieces *olds)
{
	for (unsigned c = 0; c < x->nk; c++) {
		struct piece *pc;

		if (sp->cell_len[c] && sp->cell_off[c] <= sp->parity_off &&
		    sp->cell_off[c] + sp->cell_len[c] >= sp->parity_off + sp->parity_len)
			continue; /* all new */
		if (!(pc = piece_add(olds, NET_OP_ARR_FETCH, c,
				     sp->stripe * EC_IO_CELL + sp->parity_off, sp->parity_len)))
			return -ENOMEM;
		pc->in = nb + (size_t)c * sp->parity_len;
	}
	return 0;
}

/* Lay the span's new bytes (buf; NULL: a punch, zeros) over nb. */
static void new_ranges(struct ec_ctx *x, const struct ec_span *sp, uint8_t *nb, const uint8_t *buf)
{
	for (unsigned c = 0; c < x->nk; c++) {
		uint8_t *d;

		if (!sp->cell_len[c])
			continue;
		d = nb + (size_t)c * sp->parity_len + (sp->cell_off[c] - sp->parity_off);
		if (buf)
			memcpy(d, buf + sp->cell_buf[c], sp->cell_len[c]);
		else
			memset(d, 0, sp->cell_len[c]);
	}
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* The partial spans of one write or punch, with their working buffers. */
struct partial {
	struct ec_span sp;
	uint8_t *nb;  /* k cells of parity_len: new data */
	uint8_t *par; /* p cells of parity_len */
};

/*
 * The parity of each partial span, and the pieces that write it: its data
 * ranges (written from buf, or punched) and its parity ranges (written, or
 * punched when all zero).
 */
static int partials_finish(struct ec_ctx *x, struct partial *pa, unsigned npa, const uint8_t *buf,
			   struct pieces *ws)
{
	for (unsigned i = 0; i < npa; i++) {
		const struct ec_span *sp = &pa[i].sp;
		uint8_t *data[EC_K_MAX], *par[EC_P_MAX];
		bool zero;
		int rc;

		new_ranges(x, sp, pa[i].nb, buf);
		for (unsigned c = 0; c < x->nk; c++)
			data[c] = pa[i].nb + (size_t)c * sp->parity_len;
		for (unsigned j = 0; j < x->cls->p; j++)
			par[j] = pa[i].par + (size_t)j * sp->parity_len;
		if ((rc = ec_encode(x->codec, data, par, sp->parity_len)) < 0)
			return rc;
		/* A punch whose parity comes out zero punches it too (past the end,
		 * it must not grow); a write always writes it, so that the first
		 * parity member holds every array written (the lists ask it). */
		zero = !buf && all_zero(pa[i].par, (size_t)x->cls->p * sp->parity_len);
		for (unsigned c = 0; c < x->nk; c++) {
			struct piece *pc;

			if (!sp->cell_len[c])
				continue;
			if (!(pc = piece_add(ws, buf ? NET_OP_ARR_UPDATE : NET_OP_ARR_PUNCH, c,
					     sp->stripe * EC_IO_CELL + sp->cell_off[c],
					     sp->cell_len[c])))
				return -ENOMEM;
			pc->out = buf ? buf + sp->cell_buf[c] : NULL;
		}
		for (unsigned j = 0; j < x->cls->p; j++) {
			struct piece *pc = piece_add(ws, zero ? NET_OP_ARR_PUNCH : NET_OP_ARR_UPDATE,
						     x->nk + j,
						     sp->stripe * EC_IO_CELL + sp->parity_off,
						     sp->parity_len);

			if (!pc)
				return -ENOMEM;
			pc->out = par[j];
		}
	}
	return 0;
}

/* Start a partial span: its buffers, and the fetches of its old bytes. */
static int partial_add(struct ec_ctx *x, struct partial *pa, const struct ec_span *sp,
		       struct pieces *olds)
{
	size_t n = (size_t)(x->nk + x->cls->p) * sp->parity_len;

	pa->sp = *sp;
	if (!(pa->nb = calloc(1, n)))
		return -ENOMEM;
	pa->par = pa->nb + (size_t)x->nk * sp->parity_len;
	return old_ranges(x, sp, pa->nb, olds);
}

/*
 * The end of a write or punch whose pieces so far are ws (rc: how their
 * making went): the old bytes of the partial spans fetched, their parity
 * made and its pieces added, everything written. Frees what the spans and
 * piece lists hold.
 */
static int writes_finish(struct ec_ctx *x, int rc, struct partial *pa, unsigned npa,
			 const uint8_t *buf, struct pieces *olds, struct pieces *ws)
{
	if (rc == 0 && olds->n)
		rc = fetch_run(x, olds, NULL);
	if (rc == 0)
		rc = partials_finish(x, pa, npa, buf, ws);
	if (rc == 0)
		rc = lease_renew(x);
	if (rc == 0)
		rc = write_run(x, ws);
	for (unsigned i = 0; i < npa; i++)
		free(pa[i].nb);
	free(olds->v);
	free(ws->v);
	return rc;
}

/* ---- end marks --------------------------------------------------------------------- */

/*
 * The array's end mark (client.h, docs/decisions/0018): each write also
 * writes one byte at its last array byte into the mark on every parity
 * member, and a punch punches the same range of it, so the mark's size is
 * the array's: the furthest end that a write reached and no punch took
 * back. A punch that reaches the mark's end sets it again at the end the
 * data members' sizes give after it; with one of them lost, that member's
 * end is taken as the punch's start (everything from there on went), which
 * is then an upper bound. A mend of a torn array sets it at the data
 * members' end (mend_array). The mark is what a size and a rebuild go by
 * when a data member is lost; with every data member live their sizes say.
 */
static const uint8_t mark_byte; /* what a mark holds: its size is all that counts */

bool conn_ec_mark_key(const struct lode_key *k, uint8_t *buf, struct lode_key *out)
{
	if (!k->akey || k->akey_len > LODE_KEY_MAX - CONN_EC_MARK_LEN)
		return false;
	memcpy(buf, CONN_EC_MARK, CONN_EC_MARK_LEN);
	memcpy(buf + CONN_EC_MARK_LEN, k->akey, k->akey_len);
	*out = (struct lode_key){k->dkey, k->dkey_len, buf, k->akey_len + CONN_EC_MARK_LEN};
	return true;
}

bool conn_ec_is_mark(const void *akey, size_t len)
{
	return len > CONN_EC_MARK_LEN && !memcmp(akey, CONN_EC_MARK, CONN_EC_MARK_LEN);
}

uint64_t conn_ec_end(unsigned nk, unsigned c, uint64_t n)
{
	uint64_t s = (n - 1) / EC_IO_CELL, o = (n - 1) % EC_IO_CELL;

	return s * nk * EC_IO_CELL + (uint64_t)c * EC_IO_CELL + o + 1;
}

/* A piece of op on the mark of every parity member: [off, off + len). */
static int mark_pieces(struct ec_ctx *x, struct pieces *ps, uint16_t op, uint64_t off, uint64_t len)
{
	for (unsigned j = 0; j < x->cls->p; j++) {
		struct piece *pc = piece_add(ps, op, x->nk + j, off, len);

		if (!pc)
			return -ENOMEM;
		pc->key = &x->mk;
		pc->out = &mark_byte;
	}
	return 0;
}

/* The mark set at end (one byte at end - 1; none for 0), then punched
 * over [off, off + len), which does not hold end - 1. */
static int mark_set(struct ec_ctx *x, uint64_t end, uint64_t off, uint64_t len)
{
	struct pieces ws = {0};
	int rc = 0;

	if (end && (rc = mark_pieces(x, &ws, NET_OP_ARR_UPDATE, end - 1, 1)) == 0)
		rc = write_run(x, &ws);
	ws.n = 0;
	if (rc == 0 && (rc = mark_pieces(x, &ws, NET_OP_ARR_PUNCH, off, len)) == 0)
		rc = write_run(x, &ws);
	free(ws.v);
	return rc;
}

/* The mark's size (the most a live parity member holds; 0: none), or
 * -ENOENT when no parity member answered. */
static int mark_read(struct ec_ctx *x, uint64_t *end)
{
	struct pieces ps = {0};
	bool any = false;
	int rc = mark_pieces(x, &ps, NET_OP_ARR_SIZE, 0, 0);

	*end = 0;
	if (rc == 0)
		rc = batch_run(x->ct, x->oid, x->k, x->epoch, ps.v, ps.n);
	for (size_t i = 0; i < ps.n && rc == 0; i++) {
		const struct piece *pc = &ps.v[i];

		if (pc->rc == 0 || pc->rc == -ENOENT) {
			any = true;
			if (pc->rc == 0 && pc->val > *end)
				*end = pc->val;
		} else if (!lost(pc->rc)) {
			rc = pc->rc;
		}
	}
	free(ps.v);
	return rc < 0 ? rc : any ? 0 : -ENOENT;
}

/*
 * The array's end over its data members' sizes (pc[0, nk) answered): the
 * furthest; *dlost: how many of them were lost (they count nothing).
 */
static int data_end(const struct ec_ctx *x, const struct piece *pc, uint64_t *end,
		    unsigned *dlost)
{
	*end = 0;
	*dlost = 0;
	for (unsigned c = 0; c < x->nk; c++) {
		uint64_t e;

		if (lost(pc[c].rc)) {
			++*dlost;
			continue;
		}
		if (pc[c].rc == -ENOENT || (pc[c].rc == 0 && pc[c].val == 0))
			continue;
		if (pc[c].rc < 0)
			return pc[c].rc;
		if ((e = conn_ec_end(x->nk, c, pc[c].val)) > *end)
			*end = e;
	}
	return 0;
}

/*
 * After a punch of [off, off + len) that reached the mark's end (old; 0
 * when there was none, or it was not known): the mark set at the array's
 * end now, from the data members' sizes (a lost one's end taken as
 * min(off, old); with no old mark, none is made), and only then its range
 * punched, so that the mark is never short of the array meanwhile (a
 * rebuild or a size may read it).
 */
static int mark_after_punch(struct ec_ctx *x, uint64_t off, uint64_t len, uint64_t old)
{
	struct piece pc[EC_CELLS_MAX];
	uint64_t end;
	unsigned dlost;
	int rc;

	for (unsigned c = 0; c < x->nk; c++)
		pc[c] = (struct piece){.op = NET_OP_ARR_SIZE, .member = (uint8_t)c};
	if ((rc = batch_run(x->ct, x->oid, x->k, x->epoch, pc, x->nk)) < 0 ||
	    (rc = data_end(x, pc, &end, &dlost)) < 0)
		return rc;
	if (dlost && !old)
		end = 0; /* nothing bounds the lost member's end: no mark made */
	else if (dlost && (off < old ? off : old) > end)
		end = off < old ? off : old;
	/* With every data member live the end is exact: mark bytes between it
	 * and the punch (a bound left by an earlier punch, a torn write's)
	 * go too. */
	if (!dlost && end < off) {
		len += off - end;
		off = end;
	}
	return mark_set(x, end, off, len);
}

int conn_ec_write(lode_cont_t *ct, const struct layout_class *cls, struct lode_oid oid,
		  const struct lode_key *k, uint64_t off, const void *buf, uint32_t len)
{
	const uint8_t *b = buf;
	struct ec_ctx x;
	struct ec_range it;
	struct ec_span sp;
	struct pieces ws = {0}, olds = {0};
	struct partial pa[2];
	unsigned npa = 0, p = cls->p;
	uint8_t *par = NULL;
	uint64_t nfull = 0;
	pthread_mutex_t *lk;
	int rc;

	if ((rc = ctx_init(&x, ct, cls, oid, k, LODE_EPOCH_MAX)) < 0 ||
	    (rc = ec_range_init(&it, cls->k, EC_IO_CELL, off, len)) < 0)
		return rc;
	/* Only the first and the last stripe of a range can be partial. */
	nfull = len / ((uint64_t)cls->k * EC_IO_CELL) + 1;
	if (!(par = malloc(nfull * p * EC_IO_CELL)))
		return -ENOMEM;
	lk = x.wlock = wlock_of(ct, oid, k);
	pthread_mutex_lock(lk);
	lease_range(&x, off, len);
	rc = lease_take_whole(&x);
	nfull = 0;
	while (rc == 0 && ec_range_next(&it, &sp)) {
		if (!sp.full) {
			rc = partial_add(&x, &pa[npa++], &sp, &olds);
			continue;
		}
		uint8_t *data[EC_K_MAX], *pp[EC_P_MAX];

		for (unsigned c = 0; c < cls->k; c++) {
			struct piece *pc = piece_add(&ws, NET_OP_ARR_UPDATE, c,
						     sp.stripe * EC_IO_CELL, EC_IO_CELL);

			if (!pc) {
				rc = -ENOMEM;
				break;
			}
			pc->out = data[c] = (uint8_t *)b + sp.cell_buf[c];
		}
		for (unsigned j = 0; j < p && rc == 0; j++) {
			struct piece *pc = piece_add(&ws, NET_OP_ARR_UPDATE, cls->k + j,
						     sp.stripe * EC_IO_CELL, EC_IO_CELL);

			if (!pc) {
				rc = -ENOMEM;
				break;
			}
			pc->out = pp[j] = par + (nfull * p + j) * EC_IO_CELL;
		}
		if (rc == 0)
			rc = ec_encode(x.codec, data, pp, EC_IO_CELL);
		nfull++;
	}
	if (rc == 0 && x.marked)
		rc = mark_pieces(&x, &ws, NET_OP_ARR_UPDATE, off + len - 1, 1);
	rc = writes_finish(&x, rc, pa, npa, b, &olds, &ws);
	if (rc < 0)
		x.torn = true; /* some pieces may have landed, others not */
	lease_give(&x);
	pthread_mutex_unlock(lk);
	free(par);
	return rc;
}

int conn_ec_punch(lode_cont_t *ct, const struct layout_class *cls, struct lode_oid oid,
		  const struct lode_key *k, uint64_t off, uint64_t len)
{
	uint64_t stripe = (uint64_t)cls->k * EC_IO_CELL, end = off + len;
	uint64_t s0 = off / stripe + (off % stripe != 0), s1 = end / stripe; /* whole stripes [s0, s1) */
	struct ec_ctx x;
	struct pieces ws = {0}, olds = {0};
	struct partial pa[2];
	unsigned npa = 0;
	uint64_t mark = 0;
	pthread_mutex_t *lk;
	int rc;

	if (len == 0)
		return 0;
	if (len > UINT64_MAX - off)
		return -EOVERFLOW;
	if ((rc = ctx_init(&x, ct, cls, oid, k, LODE_EPOCH_MAX)) < 0)
		return rc;
	lk = x.wlock = wlock_of(ct, oid, k);
	pthread_mutex_lock(lk);
	lease_range(&x, off, len);
	rc = lease_take_whole(&x);
	/* The mark's end before (unknown with every parity member lost: 0,
	 * so that it is set again below, on their replacements). A punch
	 * short of it punches its range of the mark with the rest. */
	if (rc == 0 && x.marked && (rc = mark_read(&x, &mark)) == -ENOENT)
		rc = 0;
	if (rc == 0 && x.marked && end < mark)
		rc = mark_pieces(&x, &ws, NET_OP_ARR_PUNCH, off, len);
	/* The partial stripes at either end: [off, s0 * stripe) and
	 * [s1 * stripe, end), or [off, end) inside one stripe. */
	for (int side = 0; side < 2 && rc == 0; side++) {
		uint64_t a = side ? s1 * stripe : off, e = side ? end : s0 * stripe;
		struct ec_range it;
		struct ec_span sp;

		if (side && s1 < s0)
			break; /* the head was the whole range */
		if (a < off)
			a = off;
		if (e > end)
			e = end;
		if (e <= a)
			continue;
		if ((rc = ec_range_init(&it, cls->k, EC_IO_CELL, a, e - a)) < 0)
			break;
		while (rc == 0 && ec_range_next(&it, &sp))
			rc = sp.full ? -EPROTO : partial_add(&x, &pa[npa++], &sp, &olds);
	}
	/* The whole stripes: one range on every member. */
	for (unsigned m = 0; m < x.nm && rc == 0 && s1 > s0; m++)
		if (!piece_add(&ws, NET_OP_ARR_PUNCH, m, s0 * EC_IO_CELL, (s1 - s0) * EC_IO_CELL))
			rc = -ENOMEM;
	rc = writes_finish(&x, rc, pa, npa, NULL, &olds, &ws);
	if (rc == 0 && x.marked && end >= mark)
		rc = mark_after_punch(&x, off, len, mark);
	if (rc < 0)
		x.torn = true; /* some pieces may have landed, others not */
	lease_give(&x);
	pthread_mutex_unlock(lk);
	return rc;
}

int conn_ec_akey_punch(lode_cont_t *ct, const struct layout_class *cls, struct lode_oid oid,
		       const struct lode_key *k)
{
	struct ec_ctx x;
	struct creq *r;
	pthread_mutex_t *lk;
	int rc;

	if ((rc = ctx_init(&x, ct, cls, oid, k, LODE_EPOCH_MAX)) < 0)
		return rc;
	lk = x.wlock = wlock_of(ct, oid, k);
	pthread_mutex_lock(lk);
	lease_range(&x, 0, UINT64_MAX);
	if ((rc = lease_take(&x)) == 0) {
		/* The end mark, then the akey, on every member, as any key punch
		 * goes (a replicated write): a mark left by a failure between
		 * them is one of an array that is there. */
		bool unmarked = false;

		if (x.marked)
			rc = (r = conn_key_req(ct, NET_OP_AKEY_PUNCH, oid, &x.mk))
				     ? creq_submit(r, NULL, NULL)
				     : -ENOMEM;
		unmarked = x.marked && rc == 0;
		if (rc == 0)
			rc = (r = conn_key_req(ct, NET_OP_AKEY_PUNCH, oid, k))
				     ? creq_submit(r, NULL, NULL)
				     : -ENOMEM;
		/* Torn when the mark went and the array did not (the next
		 * holder marks it again), as when the punch may have landed. */
		x.torn = rc < 0 && (x.torn || unmarked || rc != -ENOMEM);
	}
	lease_give(&x);
	pthread_mutex_unlock(lk);
	return rc;
}

int conn_ec_mend(lode_cont_t *ct, const struct layout_class *cls, struct lode_oid oid,
		 const struct lode_key *k, uint64_t off, uint64_t end, uint32_t holder)
{
	struct ec_ctx x;
	int rc;

	if ((rc = ctx_init(&x, ct, cls, oid, k, LODE_EPOCH_MAX)) < 0)
		return rc;
	x.wlock = wlock_of(ct, oid, k);
	x.holder = holder;
	pthread_mutex_lock(x.wlock);
	/* The torn range is where a writer after it would say its own write
	 * went: a mender that dies leaves the same range torn. */
	x.lease_off = off;
	x.lease_len = end > off ? end - off : 1;
	if ((rc = lease_take(&x)) == 0) {
		/* Mended over the listed range whatever the holder says: the mark
		 * may be on a member that held the leases before (the map moved
		 * them), and mending again is harmless. */
		if (!x.torn || off < x.torn_off)
			x.torn_off = off;
		if (!x.torn || end > x.torn_end)
			x.torn_end = end;
		x.torn = true;
		rc = mend_array(&x);
	}
	lease_give(&x); /* torn again if the mend failed */
	pthread_mutex_unlock(x.wlock);
	return rc;
}

int conn_ec_key_punch(lode_cont_t *ct, const struct layout_class *cls, struct lode_oid oid,
		      const struct lode_key *k)
{
	static const char one[1] = {0};
	/* The lease's key: the dkey (the object's: any, all its dkeys are in
	 * one group), and an akey the engine ignores (the request needs one). */
	struct lode_key lk = {k ? k->dkey : one, k ? k->dkey_len : 1, one, 1};
	static const struct lode_key any = {"", 0, NULL, 0};
	struct ec_ctx x;
	struct creq *r;
	int rc;

	if ((rc = ctx_init(&x, ct, cls, oid, &lk, LODE_EPOCH_MAX)) < 0)
		return rc;
	x.scope = k ? NET_F_LEASE_DKEY : NET_F_LEASE_OBJ;
	x.wlock = wlock_of(ct, oid, &lk);
	pthread_mutex_lock(x.wlock);
	lease_range(&x, 0, UINT64_MAX);
	if ((rc = lease_take(&x)) == 0) {
		r = conn_key_req(ct, k ? NET_OP_DKEY_PUNCH : NET_OP_OBJ_PUNCH, oid, k ? k : &any);
		rc = r ? creq_submit(r, NULL, NULL) : -ENOMEM;
	}
	/* A punch's lease never tears (lease.h): "torn" says it failed, and
	 * then the marks of the arrays under it stay. */
	x.torn = rc < 0;
	lease_give(&x);
	pthread_mutex_unlock(x.wlock);
	return rc;
}

/* ---- size -------------------------------------------------------------------------- */

int conn_ec_size(lode_cont_t *ct, const struct layout_class *cls, struct lode_oid oid,
		 lode_epoch_t epoch, const struct lode_key *k, uint64_t *size_out)
{
	struct piece pc[EC_CELLS_MAX];
	struct ec_ctx x;
	uint64_t size = 0, pmax = 0, mark = 0;
	unsigned nlost = 0, dlost;
	int rc;

	if ((rc = ctx_init(&x, ct, cls, oid, k, epoch)) < 0)
		return rc;
	for (unsigned m = 0; m < x.nm; m++)
		pc[m] = (struct piece){.op = NET_OP_ARR_SIZE, .member = (uint8_t)m};
	if ((rc = batch_run(ct, oid, k, epoch, pc, x.nm)) < 0)
		return rc;
	for (unsigned m = 0; m < x.nm; m++) {
		if (pc[m].rc == -ENOENT)
			pc[m].val = 0;
		else if (lost(pc[m].rc))
			nlost++;
		else if (pc[m].rc < 0)
			return pc[m].rc;
		if (m >= x.nk && pc[m].rc == 0 && pc[m].val > pmax)
			pmax = pc[m].val;
	}
	if (nlost > cls->p)
		return -EIO;
	if ((rc = data_end(&x, pc, &size, &dlost)) < 0)
		return rc;
	/* A lost data member: the end mark says where the array ends. Without
	 * one (an akey too long for it, or an array written before marks),
	 * no further than the parity reaches in the lost member's column: an
	 * upper bound (the bytes past the end read as zeros). */
	if (dlost && x.marked && (rc = mark_read(&x, &mark)) < 0 && rc != -ENOENT)
		return rc;
	for (unsigned c = 0; c < x.nk && dlost && !mark; c++)
		if (lost(pc[c].rc) && pmax && conn_ec_end(x.nk, c, pmax) > size)
			size = conn_ec_end(x.nk, c, pmax);
	*size_out = size > mark ? size : mark;
	return 0;
}

/* ---- calls with an event: worker threads ------------------------------------------------ */

#define WORKERS 8 /* each waits on its call's pieces most of the time */

struct aread;

struct job {
	struct job *next;
	struct aread *cont; /* a read whose pieces came back: the rest of it (read_finish) */
	lode_cont_t *ct;
	struct layout_class cls;
	uint16_t op;
	struct lode_oid oid;
	lode_epoch_t epoch;
	uint64_t off, len;
	void *buf;
	bool holes;
	struct creq *held;
	uint8_t dkey[LODE_KEY_MAX], akey[LODE_KEY_MAX];
	struct lode_key k;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct job *head, *tail;
	unsigned nthreads, idle;
} jobs = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, 0, 0};

static int read_finish(struct aread *a);

static int job_run(struct job *j)
{
	if (j->cont)
		return read_finish(j->cont);
	switch (j->op) {
	case NET_OP_ARR_UPDATE:
		return conn_ec_write(j->ct, &j->cls, j->oid, &j->k, j->off, j->buf, (uint32_t)j->len);
	case NET_OP_ARR_FETCH:
		return conn_ec_read(j->ct, &j->cls, j->oid, j->epoch, &j->k, j->off, j->buf,
				    (uint32_t)j->len, j->holes);
	case NET_OP_AKEY_PUNCH:
		return conn_ec_akey_punch(j->ct, &j->cls, j->oid, &j->k);
	case NET_OP_DKEY_PUNCH:
		return conn_ec_key_punch(j->ct, &j->cls, j->oid, &j->k);
	case NET_OP_OBJ_PUNCH:
		return conn_ec_key_punch(j->ct, &j->cls, j->oid, NULL);
	default:
		return conn_ec_punch(j->ct, &j->cls, j->oid, &j->k, j->off, j->len);
	}
}

static void *worker(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "lode-ec");
	pthread_mutex_lock(&jobs.lock);
	for (;;) {
		struct job *j;

		while (!(j = jobs.head)) {
			jobs.idle++;
			pthread_cond_wait(&jobs.cond, &jobs.lock);
			jobs.idle--;
		}
		jobs.head = j->next;
		if (!jobs.head)
			jobs.tail = NULL;
		pthread_mutex_unlock(&jobs.lock);
		conn_req_complete(j->held, job_run(j));
		free(j);
		pthread_mutex_lock(&jobs.lock);
	}
	return NULL;
}

static void job_queue(struct job *j)
{
	pthread_mutex_lock(&jobs.lock);
	if (jobs.tail)
		jobs.tail->next = j;
	else
		jobs.head = j;
	jobs.tail = j;
	pthread_cond_signal(&jobs.cond);
	pthread_mutex_unlock(&jobs.lock);
}

/* At least one worker, or one more while none is idle (up to WORKERS). */
static int workers_ensure(void)
{
	int rc = 0;

	pthread_mutex_lock(&jobs.lock);
	if (!jobs.idle && jobs.nthreads < WORKERS) {
		pthread_t t;
		pthread_attr_t at;

		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &at, worker, NULL) == 0)
			jobs.nthreads++;
		pthread_attr_destroy(&at);
	}
	if (!jobs.nthreads)
		rc = -EAGAIN; /* no thread to run it */
	pthread_mutex_unlock(&jobs.lock);
	return rc;
}

/*
 * A read with an event, healthy: its pieces go out under a parent of their
 * own and land in the caller's buffer; when they are back, read_done (in
 * whichever thread completes them) ends the call, unless a member was lost
 * or nothing was found: then a worker does the rest (read_finish).
 */
struct aread {
	struct ec_ctx x;
	struct layout_class cls;
	uint8_t dkey[LODE_KEY_MAX], akey[LODE_KEY_MAX];
	struct lode_key k;
	struct pieces ps;
	struct creq *held;
	bool holes;
};

static void aread_free(struct aread *a)
{
	free(a->ps.v);
	free(a);
}

static int read_finish(struct aread *a)
{
	struct piece **want = calloc(a->ps.n ? a->ps.n : 1, sizeof(*want));
	size_t nw = 0;
	bool absent = true;
	int rc = 0;

	if (!want) {
		aread_free(a);
		return -ENOMEM;
	}
	for (size_t i = 0; i < a->ps.n && rc == 0; i++) {
		struct piece *pc = &a->ps.v[i];

		if (pc->rc == 0)
			absent = false;
		else if (lost(pc->rc)) {
			absent = false;
			a->x.lost |= 1u << pc->member;
			want[nw++] = pc;
		} else if (pc->rc != -ENOENT)
			rc = pc->rc;
	}
	if (rc == 0 && nw) {
		pthread_mutex_t *lk = wlock_of(a->x.ct, a->x.oid, a->x.k);

		pthread_mutex_lock(lk);
		lease_range_of(&a->x, want, nw);
		if ((rc = lease_take_read(&a->x)) == 0)
			rc = rebuild_pieces(&a->x, want, nw);
		lease_give(&a->x);
		pthread_mutex_unlock(lk);
	}
	if (rc == 0 && absent && !a->holes && !array_exists(&a->x))
		rc = -ENOENT;
	free(want);
	aread_free(a);
	return rc;
}

/* The pieces are back (lock held): end the call here, or hand it on. */
static void read_done(struct creq *p)
{
	struct aread *a = p->ctx;
	bool rest = false, absent = true;
	struct job *j;

	for (size_t i = 0; i < a->ps.n; i++) {
		struct piece *pc = &a->ps.v[i];

		if (pc->rc == -ENOENT)
			memset(pc->in, 0, pc->len);
		else if (pc->rc == 0)
			absent = false;
		else
			rest = true; /* lost, or an error: read_finish says which */
	}
	if (!rest && (!absent || a->holes)) {
		conn_req_drop_locked(a->held); /* p's completion ends the call */
		aread_free(a);
		return;
	}
	if ((j = calloc(1, sizeof(*j)))) {
		j->cont = a;
		j->held = a->held;
		job_queue(j); /* lock order: the connection's, then the jobs' */
		return;
	}
	p->rc = -ENOMEM;
	conn_req_drop_locked(a->held);
	aread_free(a);
}

static int read_async(lode_cont_t *ct, const struct layout_class *cls, struct lode_oid oid,
		      lode_epoch_t epoch, const struct lode_key *k, uint64_t off, void *buf,
		      uint64_t len, bool holes, lode_event_t *ev, struct creq *parent)
{
	struct aread *a = calloc(1, sizeof(*a));
	struct ec_range it;
	struct ec_span sp;
	struct creq *p = NULL;
	int rc;

	if (!a)
		return -ENOMEM;
	memcpy(a->dkey, k->dkey, k->dkey_len);
	memcpy(a->akey, k->akey, k->akey_len);
	a->k = (struct lode_key){a->dkey, k->dkey_len, a->akey, k->akey_len};
	a->cls = *cls;
	a->holes = holes;
	if ((rc = ctx_init(&a->x, ct, &a->cls, oid, &a->k, epoch)) < 0 ||
	    (rc = ec_range_init(&it, cls->k, EC_IO_CELL, off, len)) < 0) {
		free(a);
		return rc;
	}
	while (rc == 0 && ec_range_next(&it, &sp))
		for (unsigned c = sp.first_cell; c <= sp.last_cell && rc == 0; c++) {
			struct piece *pc = piece_add(&a->ps, NET_OP_ARR_FETCH, c,
						     sp.stripe * EC_IO_CELL + sp.cell_off[c],
						     sp.cell_len[c]);

			if (!pc)
				rc = -ENOMEM;
			else
				pc->in = (uint8_t *)buf + sp.cell_buf[c];
		}
	if (rc == 0 && (rc = workers_ensure()) == 0 && !(p = creq_new(ct->c, 0, 0)))
		rc = -ENOMEM;
	if (rc == 0 && !(a->held = conn_req_hold(ct->c, ev, parent, &rc)))
		creq_free(p);
	if (rc < 0) {
		aread_free(a);
		return rc;
	}
	for (size_t i = 0; i < a->ps.n; i++)
		piece_submit(ct, oid, &a->k, epoch, &a->ps.v[i], p);
	p->on_done = read_done;
	p->ctx = a;
	return conn_req_seal_under(p, a->held);
}

int conn_ec_async(lode_cont_t *ct, const struct layout_class *cls, uint16_t op,
		  struct lode_oid oid, lode_epoch_t epoch, const struct lode_key *k, uint64_t off,
		  void *buf, uint64_t len, bool holes, lode_event_t *ev, struct creq *parent)
{
	struct job *j;
	int rc = 0;

	if (op == NET_OP_ARR_FETCH)
		return read_async(ct, cls, oid, epoch, k, off, buf, len, holes, ev, parent);
	if (!(j = calloc(1, sizeof(*j))))
		return -ENOMEM;
	*j = (struct job){.ct = ct, .cls = *cls, .op = op, .oid = oid, .epoch = epoch, .off = off,
			  .len = len, .buf = buf, .holes = holes};
	if (k->dkey_len) /* a dkey's or an object's punch: no akey; an object's: no dkey */
		memcpy(j->dkey, k->dkey, k->dkey_len);
	if (k->akey_len)
		memcpy(j->akey, k->akey, k->akey_len);
	j->k = (struct lode_key){j->dkey, k->dkey_len, j->akey, k->akey_len};
	if ((rc = workers_ensure()) < 0 || !(j->held = conn_req_hold(ct->c, ev, parent, &rc))) {
		free(j);
		return rc;
	}
	job_queue(j);
	return 0;
}
