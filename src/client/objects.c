/*
 * liblode's data calls: containers, snapshots, objects, key-value objects
 * and byte arrays, each built from requests (client.c) to the target that
 * owns the data, or to every target at once under a parent request.
 *
 * Containers are named by label. Until the control plane keeps them, the
 * labels live in a directory inside the root container that loded creates
 * on every target: a key-value object mapping label to uuid. Creating a
 * container makes it on every target first and names it last, so a crash in
 * between leaves an unnamed container, never a name without one.
 *
 * A byte array keeps chunk i at dkey i (8 bytes, big-endian, so dkeys sort
 * by offset) under akey "d"; the size set by the last truncate is a single
 * value at dkey "meta", akey "size". Its size is the larger of that and the
 * end of the highest chunk holding data.
 *
 * In an encrypted container (docs/decisions/0007) the data leaves and
 * arrives sealed with the container's key (crypt.c): a single value is
 * stored as iv || ciphertext || tag; a byte array's extent is sealed in
 * 4 KiB blocks whose ciphertext lies at the plaintext's offsets, and the
 * record of block b (iv, tag, the block's length) lies at offset 32*b of a
 * sibling akey ("\0gcm" + akey) under the same dkey, so on the same target.
 */
#include "client/agent_client.h"
#include "client/client.h"
#include "client/cont_props.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static const char AKEY_VALUE[] = "v";
static const char AKEY_DATA[] = "d";
static const char DKEY_META[] = "meta";
static const char AKEY_SIZE[] = "size";


/* ---- request helpers --------------------------------------------------------- */

static void args_key(struct net_args *a, const lode_cont_t *ct, struct lode_oid oid,
		     const struct lode_key *k)
{
	a->cont = ct->uuid;
	a->oid = oid;
	if (k) {
		a->dkey = k->dkey;
		a->dkey_len = (uint16_t)(k->dkey_len > 0xffff ? 0xffff : k->dkey_len);
		a->akey = k->akey;
		a->akey_len = (uint16_t)(k->akey_len > 0xffff ? 0xffff : k->akey_len);
	}
}

static int key_check(const struct lode_key *k, bool akey)
{
	if (!k || !k->dkey || (akey && !k->akey))
		return -EFAULT;
	if (k->dkey_len == 0 || (akey && k->akey_len == 0))
		return -LODE_EKEYEMPTY;
	if (k->dkey_len > LODE_KEY_MAX || (akey && k->akey_len > LODE_KEY_MAX))
		return -ENAMETOOLONG;
	return 0;
}

/* Whether op changes data: it then goes to every live member of the group. */
static bool op_writes(uint16_t op)
{
	return op == NET_OP_SV_UPDATE || op == NET_OP_ARR_UPDATE || op == NET_OP_DKEY_PUNCH ||
	       op == NET_OP_AKEY_PUNCH || op == NET_OP_ARR_PUNCH || op == NET_OP_OBJ_PUNCH;
}

/* A request on the group holding (oid, dkey), keyed by k; placed at submit. */
static struct creq *key_req(lode_cont_t *ct, uint16_t op, struct lode_oid oid,
			    const struct lode_key *k)
{
	struct creq *r = creq_new_placed(ct, op, oid, k->dkey, k->dkey_len, op_writes(op));

	if (r) {
		args_key(&r->a, ct, oid, k);
		if (r->a.dkey_len > LODE_KEY_MAX || r->a.akey_len > LODE_KEY_MAX)
			return r; /* the target refuses it: nothing to send again */
		memcpy(r->keys, k->dkey, r->a.dkey_len);
		r->a.dkey = r->keys;
		if (r->a.akey) {
			memcpy(r->keys + LODE_KEY_MAX, r->a.akey, r->a.akey_len);
			r->a.akey = r->keys + LODE_KEY_MAX;
		}
	}
	return r;
}

struct creq *conn_key_req(lode_cont_t *ct, uint16_t op, struct lode_oid oid,
			  const struct lode_key *k)
{
	return key_req(ct, op, oid, k);
}

/* Attach a value going out: inline in the message, or by RMA when large. */
static int value_out(struct creq *r, const void *buf, size_t len)
{
	r->a.len = len;
	if (len > r->c->inline_max && r->c->rma)
		return creq_rma(r, (void *)buf, len);
	r->out = buf;
	r->out_len = len;
	return 0;
}

/* Attach a buffer for a value coming back. */
static int value_in(struct creq *r, void *buf, size_t cap)
{
	r->a.len = cap;
	if (cap > r->c->inline_max && r->c->rma)
		return creq_rma(r, buf, cap);
	r->in = buf;
	r->in_cap = cap;
	return 0;
}

int conn_value_out(struct creq *r, const void *buf, size_t len)
{
	return value_out(r, buf, len);
}

int conn_value_in(struct creq *r, void *buf, size_t cap)
{
	return value_in(r, buf, cap);
}

/* Whether oid is erasure-coded in ct (its class then in *cls): ec_io.c does its arrays. */
static bool is_ec(const lode_cont_t *ct, struct lode_oid oid, struct layout_class *cls)
{
	return conn_obj_class(ct, oid, cls) == 0 && cls->redun == LAYOUT_R_EC;
}

/* Whether k names an end mark (ec_io.c) of an EC object: the library's, not the caller's. */
static bool is_ec_mark(const lode_cont_t *ct, struct lode_oid oid, const struct lode_key *k)
{
	struct layout_class cls;

	return conn_ec_is_mark(k->akey, k->akey_len) && is_ec(ct, oid, &cls);
}

static int submit_or_free(struct creq *r, int rc, lode_event_t *ev, struct creq *parent)
{
	if (rc < 0) {
		creq_free(r);
		return rc;
	}
	return creq_submit(r, ev, parent);
}

/*
 * 0 when a call that reaches every target may go ahead, -EHOSTDOWN when a
 * target it may not skip is lost (conn_target_reach): asked before
 * anything is sent, so that the call is not done on some targets only.
 */
static int targets_reachable(lode_conn_t *c)
{
	for (unsigned i = 0; i < c->ntargets; i++)
		if (conn_target_reach(c, i) < 0)
			return -EHOSTDOWN;
	return 0;
}

/* Send op to every target under one parent; ev NULL blocks. */
static int broadcast(lode_conn_t *c, uint16_t op, const struct net_args *a, lode_event_t *ev)
{
	struct creq *p;
	int rc;

	if ((rc = targets_reachable(c)) < 0)
		return rc;
	if (!(p = creq_new(c, 0, 0)))
		return -ENOMEM;
	for (unsigned i = 0; i < c->ntargets && rc == 0; i++) {
		struct creq *r;

		if ((rc = conn_target_reach(c, i)) != 0) {
			rc = rc < 0 ? rc : 0; /* one the map serves from elsewhere is skipped */
			continue;
		}
		if (!(r = creq_new(c, op, i))) {
			rc = -ENOMEM;
			break;
		}
		r->a = *a;
		rc = creq_submit(r, NULL, p);
	}
	if (rc < 0)
		p->rc = rc;
	return creq_seal(p, rc < 0 ? NULL : ev);
}

void conn_targets_undo(lode_conn_t *c, uint16_t op, const struct net_args *a, const bool *only)
{
	struct creq *p = creq_new(c, 0, 0), *r;

	for (unsigned t = 0; p && t < c->ntargets; t++) {
		if ((only && !only[t]) || !conn_target_live(c, t) || !(r = creq_new(c, op, t)))
			continue;
		r->a = *a;
		creq_submit(r, NULL, p);
	}
	if (p)
		creq_seal(p, NULL);
}

/* ---- status -------------------------------------------------------------------- */

int lode_status(lode_conn_t *c, struct lode_target_status *st, unsigned max)
{
	if (!c || (max && !st))
		return -EFAULT;
	for (unsigned i = 0; i < c->ntargets && i < max; i++) {
		uint8_t raw[NET_STATUS_SIZE];
		struct net_status ns;
		struct creq *r;
		int rc;

		if (!conn_target_live(c, i)) {
			/* A lost engine's targets: nothing to say (all zero). */
			memset(&st[i], 0, sizeof(st[i]));
			continue;
		}
		if (!(r = creq_new(c, NET_OP_STATUS, i)))
			return -ENOMEM;
		r->in = raw;
		r->in_cap = sizeof(raw);
		rc = creq_submit(r, NULL, NULL);
		if (rc < 0)
			return rc;
		if ((rc = net_status_decode(raw, sizeof(raw), &ns)) < 0)
			return rc;
		st[i] = (struct lode_target_status){ns.records, ns.extent_used, ns.extent_cap,
						     ns.requests, ns.errors, ns.cpu_ns,
						     ns.ram, ns.direct_io};
	}
	return (int)c->ntargets;
}

/* ---- single values and extents ------------------------------------------------ */

static void fetch_len_done(struct creq *r)
{
	if (r->ctx && (r->rc == 0 || r->rc == -EOVERFLOW))
		*(uint32_t *)r->ctx = (uint32_t)r->val;
}

static int sv_update_enc(lode_cont_t *ct, struct lode_oid oid, const struct lode_key *k,
			 const void *buf, uint32_t len, lode_event_t *ev);
static int sv_fetch_enc(lode_cont_t *ct, struct lode_oid oid, lode_epoch_t epoch,
			const struct lode_key *k, void *buf, uint32_t cap, uint32_t *len_out,
			lode_event_t *ev);

int lode_obj_update(lode_cont_t *ct, struct lode_oid oid, const struct lode_key *k,
		    const void *buf, uint32_t len, lode_event_t *ev)
{
	struct creq *r;
	int rc;

	if (!ct || (len && !buf))
		return -EFAULT;
	if ((rc = key_check(k, true)) < 0)
		return rc;
	if (len > LODE_IO_MAX)
		return -E2BIG;
	if (is_ec_mark(ct, oid, k))
		return -EINVAL;
	if (ct->encrypted)
		return sv_update_enc(ct, oid, k, buf, len, ev);
	if (!(r = key_req(ct, NET_OP_SV_UPDATE, oid, k)))
		return -ENOMEM;
	return submit_or_free(r, value_out(r, buf, len), ev, NULL);
}

int lode_obj_fetch(lode_cont_t *ct, struct lode_oid oid, lode_epoch_t epoch,
		   const struct lode_key *k, void *buf, uint32_t cap, uint32_t *len_out,
		   lode_event_t *ev)
{
	struct creq *r;
	int rc;

	if (!ct || !len_out || (cap && !buf))
		return -EFAULT;
	if ((rc = key_check(k, true)) < 0)
		return rc;
	if (cap > LODE_IO_MAX)
		cap = LODE_IO_MAX;
	if (ct->encrypted)
		return sv_fetch_enc(ct, oid, epoch, k, buf, cap, len_out, ev);
	if (!(r = key_req(ct, NET_OP_SV_FETCH, oid, k)))
		return -ENOMEM;
	r->a.epoch = epoch == LODE_EPOCH_MAX ? 0 : epoch;
	r->on_done = fetch_len_done;
	r->ctx = len_out;
	return submit_or_free(r, value_in(r, buf, cap), ev, NULL);
}

/* What every extent call checks before it sends anything. */
static int ext_check(const struct lode_key *k, uint64_t off, uint32_t len)
{
	int rc = key_check(k, true);

	if (rc < 0)
		return rc;
	if (len == 0)
		return -EINVAL;
	if (len > LODE_IO_MAX)
		return -E2BIG;
	return off + len < off ? -EOVERFLOW : 0;
}

static int ext_write_raw(lode_cont_t *ct, struct lode_oid oid, const struct lode_key *k,
			 uint64_t off, const void *buf, uint32_t len, lode_event_t *ev,
			 struct creq *parent)
{
	struct creq *r;
	int rc;

	struct layout_class cls;

	if ((rc = ext_check(k, off, len)) < 0)
		return rc;
	if (is_ec_mark(ct, oid, k))
		return -EINVAL;
	if (is_ec(ct, oid, &cls))
		return ev || parent ? conn_ec_async(ct, &cls, NET_OP_ARR_UPDATE, oid, 0, k, off,
						    (void *)buf, len, false, ev, parent)
				    : conn_ec_write(ct, &cls, oid, k, off, buf, len);
	if (!(r = key_req(ct, NET_OP_ARR_UPDATE, oid, k)))
		return -ENOMEM;
	r->a.off = off;
	return submit_or_free(r, value_out(r, buf, len), ev, parent);
}

/* An array read of a chunk never written reads as zeros. */
static void hole_done(struct creq *r)
{
	if (r->rc == -ENOENT) {
		memset(r->ctx, 0, r->a.len);
		r->rc = 0;
	}
}

static int ext_read_raw(lode_cont_t *ct, struct lode_oid oid, lode_epoch_t epoch,
			const struct lode_key *k, uint64_t off, void *buf, uint32_t len,
			lode_event_t *ev, struct creq *parent, bool holes)
{
	struct creq *r;
	int rc;

	struct layout_class cls;

	if ((rc = ext_check(k, off, len)) < 0)
		return rc;
	if (is_ec(ct, oid, &cls))
		return ev || parent ? conn_ec_async(ct, &cls, NET_OP_ARR_FETCH, oid, epoch, k, off,
						    buf, len, holes, ev, parent)
				    : conn_ec_read(ct, &cls, oid, epoch, k, off, buf, len, holes);
	if (!(r = key_req(ct, NET_OP_ARR_FETCH, oid, k)))
		return -ENOMEM;
	r->a.off = off;
	r->a.epoch = epoch == LODE_EPOCH_MAX ? 0 : epoch;
	if (holes) {
		r->on_done = hole_done;
		r->ctx = buf;
	}
	return submit_or_free(r, value_in(r, buf, len), ev, parent);
}

/* ---- inline encryption ---------------------------------------------------------- */

/*
 * Blocks of ct->crypt_block bytes, a container property (4 KiB by default,
 * up to 1 MiB). 4 KiB is the page size and the smallest I/O liblodefs and
 * the benchmarks issue, so a 4 KiB random read opens one block and moves no
 * extra byte. But OpenSSL's fixed cost per seal or open (~0.2 us, as much
 * as sealing 1 KiB) is paid per block: 1 MiB I/O reaches 0.7-0.8 of the
 * cipher's speed with 4 KiB blocks and more with 64 KiB ones, which then
 * read and rewrite whole 64 KiB blocks for small I/O (docs/decisions/0007).
 * Every block has a record of 32 bytes (iv, tag, length) in a second akey.
 */
#define CRYPT_REC 32u /* iv (12), tag (16), the block's length (4, little-endian) */
#define SV_SEAL (AUTH_AEAD_IV + AUTH_AEAD_TAG)
static const uint8_t REC_PREFIX[4] = {0, 'g', 'c', 'm'};

/* What a sealed value is bound to: kind, container, object, keys (and the
 * block index), so that bytes moved anywhere else fail to open. */
struct aad {
	uint8_t b[1 + 16 + 16 + 4 + LODE_KEY_MAX + 4 + LODE_KEY_MAX + 8];
	size_t len;
};

static void put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void aad_make(struct aad *x, char kind, const lode_cont_t *ct, struct lode_oid oid,
		     const struct lode_key *k)
{
	uint8_t *p = x->b;

	*p++ = (uint8_t)kind;
	memcpy(p, ct->uuid.b, 16);
	p += 16;
	put_le(p, oid.hi, 8);
	put_le(p + 8, oid.lo, 8);
	p += 16;
	put_le(p, k->dkey_len, 4);
	memcpy(p + 4, k->dkey, k->dkey_len);
	p += 4 + k->dkey_len;
	put_le(p, k->akey_len, 4);
	memcpy(p + 4, k->akey, k->akey_len);
	p += 4 + k->akey_len;
	x->len = (size_t)(p - x->b);
}

/* The aad of block b: x as aad_make left it, then b. */
static size_t aad_block(struct aad *x, size_t base, uint64_t b)
{
	put_le(x->b + base, b, 8);
	return base + 8;
}

/* The akey holding k's block records: k's akey behind a prefix no caller's
 * akey is likely to start with. */
static int rec_key(const struct lode_key *k, uint8_t *buf, struct lode_key *out)
{
	if (k->akey_len + sizeof(REC_PREFIX) > LODE_KEY_MAX)
		return -ENAMETOOLONG;
	memcpy(buf, REC_PREFIX, sizeof(REC_PREFIX));
	memcpy(buf + sizeof(REC_PREFIX), k->akey, k->akey_len);
	*out = (struct lode_key){k->dkey, k->dkey_len, buf,
				 (uint32_t)(k->akey_len + sizeof(REC_PREFIX))};
	return 0;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/*
 * Open block b of the extent k (stored in data[0..ct->crypt_block), its record
 * in rec) in place: the block's plaintext, zeros past its length. A record
 * of zeros is a block never written: zeros. -LODE_ECSUM: the block or its
 * record was changed, moved, or half written (a crash between the two).
 */
static int block_open(lode_cont_t *ct, void *cx, struct aad *x, size_t base, uint64_t b,
		      uint8_t *data, const uint8_t *rec, uint32_t *len_out)
{
	uint32_t n;
	int rc;

	*len_out = 0;
	if (all_zero(rec, CRYPT_REC)) {
		memset(data, 0, ct->crypt_block);
		return 0;
	}
	n = (uint32_t)get_le(rec + AUTH_AEAD_IV + AUTH_AEAD_TAG, 4);
	if (n == 0 || n > ct->crypt_block) {
		memset(data, 0, ct->crypt_block);
		return -LODE_ECSUM;
	}
	rc = crypt_open(ct, cx, rec, x->b, aad_block(x, base, b), data, n, data,
			rec + AUTH_AEAD_IV);
	memset(data + n, 0, ct->crypt_block - n);
	*len_out = rc == 0 ? n : 0;
	return rc;
}

/* Seal plain[0..n) as block b into data and rec, with a fresh iv (through
 * cx, or a context borrowed for it: NULL). */
static int block_seal(lode_cont_t *ct, void *cx, struct aad *x, size_t base, uint64_t b,
		      const uint8_t *iv, const uint8_t *plain, uint32_t n, uint8_t *data,
		      uint8_t *rec)
{
	memcpy(rec, iv, AUTH_AEAD_IV);
	put_le(rec + AUTH_AEAD_IV + AUTH_AEAD_TAG, n, 4);
	return crypt_seal(ct, cx, rec, x->b, aad_block(x, base, b), plain, n, data,
			  rec + AUTH_AEAD_IV);
}

/* The request's on_done for a read whose ENOENT means "zeros": note it. */
static void enoent_zero(struct creq *r)
{
	if (r->rc == -ENOENT) {
		memset(r->ctx, 0, r->a.len);
		r->rc = 0;
	}
}

/*
 * Block b of extent k, opened, into plain (ct->crypt_block bytes); *len_out its
 * length (0: never written). Blocks.
 */
static int block_load(lode_cont_t *ct, struct lode_oid oid, const struct lode_key *k,
		      struct aad *x, uint64_t b, uint8_t *plain, uint32_t *len_out)
{
	uint8_t rkb[LODE_KEY_MAX], rec[CRYPT_REC];
	struct lode_key rk;
	struct creq *p, *r;
	int rc;

	if ((rc = rec_key(k, rkb, &rk)) < 0)
		return rc;
	if (!(p = creq_new(ct->c, 0, 0)))
		return -ENOMEM;
	for (int i = 0; i < 2 && rc == 0; i++) {
		if (!(r = key_req(ct, NET_OP_ARR_FETCH, oid, i ? &rk : k))) {
			rc = -ENOMEM;
			break;
		}
		r->a.off = i ? b * CRYPT_REC : b * ct->crypt_block;
		r->on_done = enoent_zero;
		r->ctx = i ? (void *)rec : (void *)plain;
		rc = submit_or_free(r, value_in(r, r->ctx, i ? CRYPT_REC : ct->crypt_block), NULL, p);
	}
	if (rc < 0)
		p->rc = rc;
	if ((rc = creq_seal(p, NULL)) < 0)
		return rc;
	return block_open(ct, NULL, x, x->len, b, plain, rec, len_out);
}

/* Complete ev now with rc (the work was done synchronously), or pass rc on. */
static int done_now(lode_conn_t *c, int rc, lode_event_t *ev)
{
	struct creq *p;

	if (!ev || rc < 0)
		return rc;
	if (!(p = creq_new(c, 0, 0)))
		return -ENOMEM;
	return creq_seal(p, ev);
}

/*
 * An extent read or write in flight: the data request and the records
 * request, and what to do when both are done. refs counts them and the
 * submitter; whoever drops the last runs xio_finish.
 */
struct xio {
	lode_cont_t *ct;
	atomic_int refs;
	int rc;                  /* the first error of either request */
	bool write, holes, data_missing, recs_missing, data_ours;
	uint64_t b0;
	uint32_t nb;
	uint8_t *data;           /* ciphertext, block b0 first (data_ours: in bounce) */
	uint8_t *recs;           /* nb records (in bounce) */
	uint8_t *bounce;         /* from crypt_buf_get: [data] recs */
	size_t bounce_cap;
	uint8_t *buf;            /* reads: the caller's buffer ... */
	uint32_t len, skip;      /* ... gets len bytes from offset skip of data */
	struct aad aad;
};

static void xio_free(struct xio *x);

static int xio_finish(struct xio *x)
{
	lode_cont_t *ct = x->ct;
	int rc = x->rc;

	if (!x->write && rc == 0) {
		if (x->data_missing && x->recs_missing && !x->holes)
			rc = -ENOENT;
		if (x->data_missing)
			memset(x->data, 0, (size_t)x->nb * ct->crypt_block);
		if (x->recs_missing)
			memset(x->recs, 0, (size_t)x->nb * CRYPT_REC);
		void *cx = crypt_ctx_get(x->ct, 0);

		if (!cx && rc == 0)
			rc = -ENOMEM;
		for (uint32_t i = 0; i < x->nb && rc == 0; i++) {
			uint32_t n;

			rc = block_open(x->ct, cx, &x->aad, x->aad.len, x->b0 + i,
					x->data + (size_t)i * ct->crypt_block, x->recs + (size_t)i * CRYPT_REC,
					&n);
		}
		if (cx)
			crypt_ctx_put(x->ct, 0, cx);
		if (rc == 0 && x->data_ours)
			memcpy(x->buf, x->data + x->skip, x->len);
	}
	if (!x->write && rc < 0)
		memset(x->buf, 0, x->len);
	xio_free(x);
	return rc;
}

static void xio_drop(struct creq *r, struct xio *x, bool *missing)
{
	if (r->rc == -ENOENT && !x->write) {
		*missing = true;
		r->rc = 0;
	}
	if (r->rc < 0 && x->rc == 0)
		x->rc = r->rc;
	if (atomic_fetch_sub(&x->refs, 1) == 1) {
		int rc = xio_finish(x);

		if (r->rc == 0)
			r->rc = rc;
	}
}

static void xio_data_done(struct creq *r)
{
	struct xio *x = r->ctx;

	xio_drop(r, x, &x->data_missing);
}

static void xio_recs_done(struct creq *r)
{
	struct xio *x = r->ctx;

	xio_drop(r, x, &x->recs_missing);
}

/*
 * Send x's two requests: data at off (dlen bytes) and the records, under
 * parent if given, else under a parent of our own completing ev (or
 * blocking). Frees x in every case.
 */
static int xio_submit(struct xio *x, struct lode_oid oid, const struct lode_key *k,
		      lode_epoch_t epoch, uint64_t off, uint32_t dlen, lode_event_t *ev,
		      struct creq *parent)
{
	lode_conn_t *c = x->ct->c;
	uint8_t rkb[LODE_KEY_MAX];
	struct lode_key rk;
	struct creq *p = parent, *r;
	int rc = rec_key(k, rkb, &rk), res = 0;

	atomic_store(&x->refs, 1);
	if (rc == 0 && !p && !(p = creq_new(c, 0, 0)))
		rc = -ENOMEM;
	for (int i = 0; i < 2 && rc == 0; i++) {
		uint16_t op = x->write ? NET_OP_ARR_UPDATE : NET_OP_ARR_FETCH;
		void *b = i ? x->recs : x->data;
		size_t n = i ? (size_t)x->nb * CRYPT_REC : dlen;

		if (!(r = key_req(x->ct, op, oid, i ? &rk : k))) {
			rc = -ENOMEM;
			break;
		}
		r->a.off = i ? x->b0 * CRYPT_REC : off;
		r->a.epoch = epoch == LODE_EPOCH_MAX ? 0 : epoch;
		r->on_done = i ? xio_recs_done : xio_data_done;
		r->ctx = x;
		atomic_fetch_add(&x->refs, 1);
		rc = submit_or_free(r, x->write ? value_out(r, b, n) : value_in(r, b, n), NULL, p);
		if (rc < 0)
			atomic_fetch_sub(&x->refs, 1);
	}
	if (atomic_fetch_sub(&x->refs, 1) == 1)
		res = xio_finish(x); /* both done already (or never sent) */
	if (rc == 0 && res < 0 && p) {
		pthread_mutex_lock(&c->lock);
		if (p->rc == 0)
			p->rc = res;
		pthread_mutex_unlock(&c->lock);
	}
	if (!p || p == parent)
		return rc;
	if (rc < 0) {
		p->rc = rc;
		creq_seal(p, NULL);
		return rc;
	}
	return creq_seal(p, ev);
}

static struct xio *xio_new(lode_cont_t *ct, const struct lode_key *k, uint64_t off,
			   uint32_t len, struct lode_oid oid)
{
	struct xio *x = calloc(1, sizeof(*x));

	if (!x)
		return NULL;
	x->ct = ct;
	x->b0 = off / ct->crypt_block;
	x->nb = (uint32_t)((off + len - 1) / ct->crypt_block - x->b0 + 1);
	aad_make(&x->aad, 'b', ct, oid, k);
	return x;
}

static void xio_free(struct xio *x)
{
	crypt_buf_put(x->ct, x->bounce, x->bounce_cap);
	free(x);
}

/* x's bounce buffer: the records, after the ciphertext when with_data. */
static int xio_bounce(struct xio *x, bool with_data)
{
	size_t dn = with_data ? (size_t)x->nb * x->ct->crypt_block : 0;

	if (!(x->bounce = crypt_buf_get(x->ct, dn + (size_t)x->nb * CRYPT_REC, &x->bounce_cap)))
		return -ENOMEM;
	if (with_data) {
		x->data = x->bounce;
		x->data_ours = true;
	}
	x->recs = x->bounce + dn;
	return 0;
}

/*
 * Write [off, off+len) of extent k, sealed. Every block touched gets a new
 * iv, so its whole ciphertext changes: the blocks at either end that the
 * write covers only in part are read and opened first (synchronously), and
 * the write sends [first block's start, last block's end of data).
 */
static int ext_write_enc(lode_cont_t *ct, struct lode_oid oid, const struct lode_key *k,
			 uint64_t off, const uint8_t *buf, uint32_t len, lode_event_t *ev,
			 struct creq *parent)
{
	uint64_t end = off + len;
	uint8_t *ivs = NULL, *edge[2] = {NULL, NULL};
	uint32_t old[2] = {0, 0}, last = 0;
	struct xio *x = xio_new(ct, k, off, len, oid);
	void *cx = NULL;
	int rc = 0;

	if (!x)
		return -ENOMEM;
	x->write = true;
	if ((uint64_t)x->nb * ct->crypt_block > LODE_IO_MAX) {
		xio_free(x);
		return -E2BIG;
	}
	/* The ends the write covers in part: their old contents. */
	for (int e = 0; e < 2 && rc == 0; e++) {
		uint64_t b = e ? x->b0 + x->nb - 1 : x->b0;
		bool part = e ? end % ct->crypt_block != 0 : off % ct->crypt_block != 0;

		if (!part || (e && x->nb == 1 && edge[0]))
			continue;
		if (!(edge[e] = malloc(ct->crypt_block)))
			rc = -ENOMEM;
		else
			rc = block_load(ct, oid, k, &x->aad, b, edge[e], &old[e]);
	}
	if (x->nb == 1 && edge[0] && !edge[1]) {
		edge[1] = edge[0];
		old[1] = old[0];
	}
	if (rc == 0 && (!(ivs = malloc((size_t)x->nb * AUTH_AEAD_IV)) || xio_bounce(x, true) < 0 ||
			!(cx = crypt_ctx_get(ct, 1))))
		rc = -ENOMEM;
	if (rc == 0 && auth_random(ivs, (size_t)x->nb * AUTH_AEAD_IV))
		rc = -EIO;
	for (uint32_t i = 0; i < x->nb && rc == 0; i++) {
		uint64_t b = x->b0 + i, bs = b * ct->crypt_block;
		uint8_t *plain = i == 0 && edge[0] ? edge[0] : i == x->nb - 1 ? edge[1] : NULL;
		uint32_t was = i == 0 && edge[0] ? old[0] : i == x->nb - 1 ? old[1] : 0;
		uint32_t n = (uint32_t)((end - bs) < ct->crypt_block ? end - bs : ct->crypt_block);

		if (plain) {
			uint64_t from = off > bs ? off - bs : 0;

			memcpy(plain + from, buf + (bs + from - off), n - from);
		} else {
			plain = (uint8_t *)buf + (bs - off);
		}
		if (was > n)
			n = was;
		rc = block_seal(ct, cx, &x->aad, x->aad.len, b, ivs + (size_t)i * AUTH_AEAD_IV, plain,
				n, x->data + (size_t)i * ct->crypt_block, x->recs + (size_t)i * CRYPT_REC);
		last = n;
	}
	if (cx)
		crypt_ctx_put(ct, 1, cx);
	free(ivs);
	if (edge[1] && edge[1] != edge[0])
		explicit_bzero(edge[1], ct->crypt_block), free(edge[1]);
	if (edge[0])
		explicit_bzero(edge[0], ct->crypt_block), free(edge[0]);
	if (rc < 0) {
		xio_free(x);
		return rc;
	}
	return xio_submit(x, oid, k, LODE_EPOCH_MAX, x->b0 * ct->crypt_block,
			  (x->nb - 1) * ct->crypt_block + last, ev, parent);
}

/* Read [off, off+len) of extent k: whole blocks come in (straight into buf
 * when the read is block-aligned) and are opened when both requests are
 * done. */
static int ext_read_enc(lode_cont_t *ct, struct lode_oid oid, lode_epoch_t epoch,
			const struct lode_key *k, uint64_t off, uint8_t *buf, uint32_t len,
			lode_event_t *ev, struct creq *parent, bool holes)
{
	struct xio *x = xio_new(ct, k, off, len, oid);

	if (!x)
		return -ENOMEM;
	if ((uint64_t)x->nb * ct->crypt_block > LODE_IO_MAX) {
		xio_free(x);
		return -E2BIG;
	}
	x->holes = holes;
	x->buf = buf;
	x->len = len;
	x->skip = (uint32_t)(off - x->b0 * ct->crypt_block);
	/* Block-aligned: the ciphertext lands in buf and is opened there. */
	if (off % ct->crypt_block == 0 && len % ct->crypt_block == 0)
		x->data = buf;
	if (xio_bounce(x, x->data == NULL) < 0) {
		xio_free(x);
		return -ENOMEM;
	}
	memset(x->recs, 0, (size_t)x->nb * CRYPT_REC); /* what a short reply leaves */
	return xio_submit(x, oid, k, epoch, x->b0 * ct->crypt_block, x->nb * ct->crypt_block, ev, parent);
}

/* Ignore a missing record akey. */
static void enoent_ok(struct creq *r)
{
	if (r->rc == -ENOENT)
		r->rc = 0;
}

/* Send one request of op on k, keyed, under p (the caller frees nothing). */
static int simple_req(lode_cont_t *ct, uint16_t op, struct lode_oid oid, const struct lode_key *k,
		      uint64_t off, uint64_t len, creq_fn done, struct creq *p)
{
	struct creq *r = key_req(ct, op, oid, k);

	if (!r)
		return -ENOMEM;
	r->a.off = off;
	r->a.len = len;
	r->on_done = done;
	return creq_submit(r, NULL, p);
}

/*
 * Punch [off, off+len) of extent k, sealed: the blocks it covers whole lose
 * their data and records; a block it covers in part is opened, zeroed
 * there and sealed again (shortened when the punch reaches its end, so the
 * extent's size shrinks as it would unencrypted). Synchronous.
 */
static int punch_enc(lode_cont_t *ct, struct lode_oid oid, const struct lode_key *k,
		     uint64_t off, uint64_t len)
{
	uint64_t end = off + len, full0 = (off + ct->crypt_block - 1) / ct->crypt_block,
		 full1 = end / ct->crypt_block;
	uint8_t rkb[LODE_KEY_MAX], *plain[2] = {NULL, NULL};
	uint32_t old[2] = {0, 0};
	uint64_t eb[2] = {off / ct->crypt_block, len ? (end - 1) / ct->crypt_block : 0};
	struct lode_key rk;
	struct aad x;
	struct creq *p;
	int rc;

	if (len == 0)
		return 0;
	if ((rc = rec_key(k, rkb, &rk)) < 0)
		return rc;
	aad_make(&x, 'b', ct, oid, k);
	for (int e = 0; e < 2 && rc == 0; e++) {
		bool part = e ? end % ct->crypt_block != 0 : off % ct->crypt_block != 0;

		if (!part || (e && eb[1] == eb[0] && plain[0]))
			continue;
		if (!(plain[e] = malloc(ct->crypt_block)))
			rc = -ENOMEM;
		else
			rc = block_load(ct, oid, k, &x, eb[e], plain[e], &old[e]);
	}
	if (rc == 0 && !(p = creq_new(ct->c, 0, 0)))
		rc = -ENOMEM;
	if (rc == 0) {
		rc = simple_req(ct, NET_OP_ARR_PUNCH, oid, k, off, len, NULL, p);
		if (rc == 0 && full1 > full0)
			rc = simple_req(ct, NET_OP_ARR_PUNCH, oid, &rk, full0 * CRYPT_REC,
					(full1 - full0) * CRYPT_REC, enoent_ok, p);
		if (rc < 0)
			p->rc = rc;
		rc = creq_seal(p, NULL);
	}
	/* The blocks covered in part, sealed again without the punched bytes. */
	for (int e = 0; e < 2 && rc == 0; e++) {
		uint64_t bs = eb[e] * ct->crypt_block, from = off > bs ? off - bs : 0;
		uint64_t to = end - bs < ct->crypt_block ? end - bs : ct->crypt_block;
		uint8_t iv[AUTH_AEAD_IV], *data = NULL, rec[CRYPT_REC] = {0};
		uint32_t n = old[e];

		if (!plain[e] || n == 0)
			continue;
		memset(plain[e] + from, 0, to - from);
		if (to >= n)
			n = (uint32_t)(from < n ? from : n);
		if (n && auth_random(iv, sizeof(iv)))
			rc = -EIO;
		if (rc == 0 && n && !(data = malloc(n)))
			rc = -ENOMEM;
		if (rc == 0 && n)
			rc = block_seal(ct, NULL, &x, x.len, eb[e], iv, plain[e], n, data, rec);
		if (rc == 0 && n)
			rc = ext_write_raw(ct, oid, k, bs, data, n, NULL, NULL);
		free(data);
		if (rc == 0)
			rc = ext_write_raw(ct, oid, &rk, eb[e] * CRYPT_REC, rec, CRYPT_REC, NULL, NULL);
	}
	for (int e = 0; e < 2; e++)
		if (plain[e])
			explicit_bzero(plain[e], ct->crypt_block), free(plain[e]);
	return rc;
}


/*
 * A single value, sealed: iv || ciphertext || tag, bound to where it lives.
 * Its buffer is ours; with an event or a parent the request's on_done
 * frees it, else the caller does once the request is done.
 */
struct sv_io {
	lode_cont_t *ct;
	bool async;
	uint8_t *raw;
	size_t raw_cap;
	uint8_t *buf;            /* fetch: the caller's */
	uint32_t cap;
	uint32_t *len_out;
	struct aad aad;
};

static void sv_io_free(struct sv_io *io)
{
	if (io->raw)
		explicit_bzero(io->raw, io->raw_cap);
	free(io->raw);
	free(io);
}

static struct sv_io *sv_io_new(lode_cont_t *ct, struct lode_oid oid, const struct lode_key *k,
			       size_t raw_cap)
{
	struct sv_io *io = calloc(1, sizeof(*io));

	if (!io)
		return NULL;
	io->ct = ct;
	io->raw_cap = raw_cap;
	if (!(io->raw = malloc(raw_cap ? raw_cap : 1))) {
		free(io);
		return NULL;
	}
	aad_make(&io->aad, 's', ct, oid, k);
	return io;
}

static void sv_update_done(struct creq *r)
{
	struct sv_io *io = r->ctx;

	if (io->async)
		sv_io_free(io);
}

static int sv_update_enc(lode_cont_t *ct, struct lode_oid oid, const struct lode_key *k,
			 const void *buf, uint32_t len, lode_event_t *ev)
{
	struct sv_io *io;
	struct creq *r = NULL;
	int rc;

	if (len > LODE_IO_MAX - SV_SEAL)
		return -E2BIG;
	if (!(io = sv_io_new(ct, oid, k, (size_t)len + SV_SEAL)))
		return -ENOMEM;
	if (auth_random(io->raw, AUTH_AEAD_IV))
		rc = -EIO;
	else
		rc = crypt_seal(ct, NULL, io->raw, io->aad.b, io->aad.len, buf, len,
				io->raw + AUTH_AEAD_IV, io->raw + AUTH_AEAD_IV + len);
	if (rc == 0 && !(r = key_req(ct, NET_OP_SV_UPDATE, oid, k)))
		rc = -ENOMEM;
	if (rc < 0) {
		sv_io_free(io);
		return rc;
	}
	io->async = ev != NULL;
	r->on_done = sv_update_done;
	r->ctx = io;
	rc = submit_or_free(r, value_out(r, io->raw, io->raw_cap), ev, NULL);
	if (!io->async || rc < 0)
		sv_io_free(io); /* done (blocking), or never sent */
	return rc;
}

static void sv_fetch_done(struct creq *r)
{
	struct sv_io *io = r->ctx;
	uint64_t stored = r->val;

	if ((r->rc == 0 || r->rc == -EOVERFLOW) && stored < SV_SEAL)
		r->rc = -LODE_ECSUM; /* too short to have been sealed */
	if (r->rc == -EOVERFLOW) {
		/* Longer than cap: the tag covers all of it, so nothing of it
		 * can be handed out unchecked. */
		*io->len_out = (uint32_t)(stored - SV_SEAL);
		memset(io->buf, 0, io->cap);
	} else if (r->rc == 0) {
		uint32_t n = (uint32_t)(stored - SV_SEAL);

		r->rc = crypt_open(io->ct, NULL, io->raw, io->aad.b, io->aad.len,
				   io->raw + AUTH_AEAD_IV, n, io->buf, io->raw + AUTH_AEAD_IV + n);
		if (r->rc == 0)
			*io->len_out = n;
	}
	if (r->rc < 0 && r->rc != -EOVERFLOW && io->cap)
		memset(io->buf, 0, io->cap);
	if (io->async)
		sv_io_free(io);
}

static int sv_fetch_enc(lode_cont_t *ct, struct lode_oid oid, lode_epoch_t epoch,
			const struct lode_key *k, void *buf, uint32_t cap, uint32_t *len_out,
			lode_event_t *ev)
{
	size_t raw_cap = (size_t)cap + SV_SEAL;
	struct sv_io *io;
	struct creq *r;
	int rc;

	if (raw_cap > LODE_IO_MAX)
		raw_cap = LODE_IO_MAX;
	if (!(io = sv_io_new(ct, oid, k, raw_cap)))
		return -ENOMEM;
	if (!(r = key_req(ct, NET_OP_SV_FETCH, oid, k))) {
		sv_io_free(io);
		return -ENOMEM;
	}
	io->buf = buf;
	io->cap = cap;
	io->len_out = len_out;
	io->async = ev != NULL;
	r->a.epoch = epoch == LODE_EPOCH_MAX ? 0 : epoch;
	r->on_done = sv_fetch_done;
	r->ctx = io;
	rc = submit_or_free(r, value_in(r, io->raw, raw_cap), ev, NULL);
	if (!io->async || rc < 0)
		sv_io_free(io);
	return rc;
}

/* Extent I/O: sealed in an encrypted container, as it is elsewhere. */
static int ext_write(lode_cont_t *ct, struct lode_oid oid, const struct lode_key *k, uint64_t off,
		     const void *buf, uint32_t len, lode_event_t *ev, struct creq *parent)
{
	int rc;

	struct layout_class cls;

	if (!ct->encrypted)
		return ext_write_raw(ct, oid, k, off, buf, len, ev, parent);
	if ((rc = ext_check(k, off, len)) < 0)
		return rc;
	if (is_ec(ct, oid, &cls))
		return -EOPNOTSUPP; /* sealed blocks are not coded yet */
	return ext_write_enc(ct, oid, k, off, buf, len, ev, parent);
}

static int ext_read(lode_cont_t *ct, struct lode_oid oid, lode_epoch_t epoch,
		    const struct lode_key *k, uint64_t off, void *buf, uint32_t len,
		    lode_event_t *ev, struct creq *parent, bool holes)
{
	int rc;

	struct layout_class cls;

	if (!ct->encrypted)
		return ext_read_raw(ct, oid, epoch, k, off, buf, len, ev, parent, holes);
	if ((rc = ext_check(k, off, len)) < 0)
		return rc;
	if (is_ec(ct, oid, &cls))
		return -EOPNOTSUPP;
	return ext_read_enc(ct, oid, epoch, k, off, buf, len, ev, parent, holes);
}

int lode_obj_write(lode_cont_t *ct, struct lode_oid oid, const struct lode_key *k, uint64_t off,
		   const void *buf, uint32_t len, lode_event_t *ev)
{
	if (!ct || !buf)
		return -EFAULT;
	return ext_write(ct, oid, k, off, buf, len, ev, NULL);
}

int lode_obj_read(lode_cont_t *ct, struct lode_oid oid, lode_epoch_t epoch,
		  const struct lode_key *k, uint64_t off, void *buf, uint32_t len,
		  lode_event_t *ev)
{
	if (!ct || !buf)
		return -EFAULT;
	return ext_read(ct, oid, epoch, k, off, buf, len, ev, NULL, false);
}

static void val_done(struct creq *r)
{
	if (r->rc == 0 && r->ctx)
		*(uint64_t *)r->ctx = r->val;
}

int lode_obj_size(lode_cont_t *ct, struct lode_oid oid, lode_epoch_t epoch,
		  const struct lode_key *k, uint64_t *size_out)
{
	struct layout_class cls;
	struct creq *r;
	int rc;

	if (!ct || !size_out)
		return -EFAULT;
	if ((rc = key_check(k, true)) < 0)
		return rc;
	if (is_ec(ct, oid, &cls))
		return conn_ec_size(ct, &cls, oid, epoch, k, size_out);
	if (!(r = key_req(ct, NET_OP_ARR_SIZE, oid, k)))
		return -ENOMEM;
	r->a.epoch = epoch == LODE_EPOCH_MAX ? 0 : epoch;
	r->on_done = val_done;
	r->ctx = size_out;
	return creq_submit(r, NULL, NULL);
}

/* ---- punches -------------------------------------------------------------------- */

int lode_obj_punch(lode_cont_t *ct, struct lode_oid oid, lode_event_t *ev)
{
	struct layout_class cls;
	struct net_args a = {0};

	if (!ct)
		return -EFAULT;
	/* An EC object lives in one group, each member's part an object of
	 * its own there (layout_oid_member): a write to the group punches
	 * every member's, and a moving member's new place too. */
	if (is_ec(ct, oid, &cls) && cls.groups == 1) {
		static const struct lode_key any = {"", 0, NULL, 0};

		return ev ? conn_ec_async(ct, &cls, NET_OP_OBJ_PUNCH, oid, 0, &any, 0, NULL, 0, false,
					  ev, NULL)
			  : conn_ec_key_punch(ct, &cls, oid, NULL);
	}
	a.cont = ct->uuid;
	a.oid = oid;
	return broadcast(ct->c, NET_OP_OBJ_PUNCH, &a, ev);
}

/* An akey and its block records (if it is an encrypted byte array). */
static int akey_punch_enc(lode_cont_t *ct, struct lode_oid oid, const struct lode_key *k,
			  lode_event_t *ev, struct creq *parent)
{
	uint8_t rkb[LODE_KEY_MAX];
	struct lode_key rk;
	struct creq *p = parent;
	int rc = rec_key(k, rkb, &rk);

	if (rc == -ENAMETOOLONG)
		rk.akey = NULL; /* too long to be an encrypted array: a single value */
	else if (rc < 0)
		return rc;
	if (!p && !(p = creq_new(ct->c, 0, 0)))
		return -ENOMEM;
	rc = simple_req(ct, NET_OP_AKEY_PUNCH, oid, k, 0, 0, NULL, p);
	if (rc == 0 && rk.akey)
		rc = simple_req(ct, NET_OP_AKEY_PUNCH, oid, &rk, 0, 0, enoent_ok, p);
	if (p == parent)
		return rc;
	if (rc < 0)
		p->rc = rc;
	return creq_seal(p, rc < 0 ? NULL : ev);
}

static int punch(lode_cont_t *ct, uint16_t op, struct lode_oid oid, const struct lode_key *k,
		 uint64_t off, uint64_t len, lode_event_t *ev, struct creq *parent)
{
	struct lode_key dk;
	struct layout_class cls;
	struct creq *r;
	int rc;

	if (!ct)
		return -EFAULT;
	if ((rc = key_check(k, op != NET_OP_DKEY_PUNCH)) < 0)
		return rc;
	if (op == NET_OP_DKEY_PUNCH) { /* the akey is ignored: whatever it holds */
		dk = (struct lode_key){k->dkey, k->dkey_len, NULL, 0};
		k = &dk;
	}
	if (is_ec_mark(ct, oid, k))
		return -EINVAL;
	if (op == NET_OP_ARR_PUNCH && is_ec(ct, oid, &cls)) {
		if (ct->encrypted)
			return -EOPNOTSUPP;
		return ev || parent ? conn_ec_async(ct, &cls, NET_OP_ARR_PUNCH, oid, 0, k, off, NULL,
						    len, false, ev, parent)
				    : conn_ec_punch(ct, &cls, oid, k, off, len);
	}
	if (op == NET_OP_DKEY_PUNCH && is_ec(ct, oid, &cls) && !ct->encrypted)
		return ev || parent ? conn_ec_async(ct, &cls, NET_OP_DKEY_PUNCH, oid, 0, k, 0, NULL,
						    0, false, ev, parent)
				    : conn_ec_key_punch(ct, &cls, oid, k);
	if (op == NET_OP_AKEY_PUNCH && is_ec(ct, oid, &cls) && !ct->encrypted)
		return ev || parent ? conn_ec_async(ct, &cls, NET_OP_AKEY_PUNCH, oid, 0, k, 0, NULL,
						    0, false, ev, parent)
				    : conn_ec_akey_punch(ct, &cls, oid, k);
	if (ct->encrypted && op == NET_OP_ARR_PUNCH)
		return done_now(ct->c, punch_enc(ct, oid, k, off, len), parent ? NULL : ev);
	if (ct->encrypted && op == NET_OP_AKEY_PUNCH)
		return akey_punch_enc(ct, oid, k, ev, parent);
	if (!(r = key_req(ct, op, oid, k)))
		return -ENOMEM;
	r->a.off = off;
	r->a.len = len;
	return creq_submit(r, ev, parent);
}

int lode_dkey_punch(lode_cont_t *ct, struct lode_oid oid, const struct lode_key *k,
		    lode_event_t *ev)
{
	return punch(ct, NET_OP_DKEY_PUNCH, oid, k, 0, 0, ev, NULL);
}

int lode_akey_punch(lode_cont_t *ct, struct lode_oid oid, const struct lode_key *k,
		    lode_event_t *ev)
{
	return punch(ct, NET_OP_AKEY_PUNCH, oid, k, 0, 0, ev, NULL);
}

int lode_range_punch(lode_cont_t *ct, struct lode_oid oid, const struct lode_key *k,
		     uint64_t off, uint64_t len, lode_event_t *ev)
{
	if (off + len < off)
		return -EOVERFLOW;
	return punch(ct, NET_OP_ARR_PUNCH, oid, k, off, len, ev, NULL);
}

/* ---- enumeration ---------------------------------------------------------------- */

struct list_out {
	struct lode_anchor *an;
	unsigned ntargets;
	uint64_t count;
	size_t bytes;
};

/* Carry the target's cursor into the caller's anchor; at its end, go to the next target. */
static void list_done(struct creq *r)
{
	struct list_out *o = r->ctx;
	struct lode_anchor *an = o->an;

	if (r->rc < 0)
		return;
	o->count = r->val;
	o->bytes = r->in_len;
	if (r->anchor.eof) {
		an->tgt++;
		an->len = 0;
		an->eof = an->tgt >= o->ntargets;
	} else {
		an->len = r->anchor.len;
		memcpy(an->key, r->anchor_key, r->anchor.len);
	}
}

/*
 * Ask targets, starting at the anchor's, for up to cap bytes of items into
 * buf, until one returns some or every target is done. Returns the item
 * count; *bytes gets their size.
 */
/*
 * With placed set, the items live in one group (a dkey's akeys; the dkeys
 * of an object of one group, replicated or not): its first live member is
 * asked, another on failure, and the anchor's target is not used.
 * Otherwise every reachable target is asked in turn (global indexes).
 */
static int list_run(lode_cont_t *ct, uint16_t op, struct lode_oid oid, const struct lode_key *k,
		    lode_epoch_t epoch, struct lode_anchor *an, void *buf, size_t cap,
		    size_t *bytes, bool placed)
{
	lode_conn_t *c = ct->c;

	if (!an || !buf)
		return -EFAULT;
	if (an->len > sizeof(an->key))
		return -EINVAL;
	while (!an->eof) {
		struct list_out o = {an, placed ? 0 : c->ntargets, 0, 0};
		struct creq *r;
		int rc;

		while (!placed && an->tgt < c->ntargets && (rc = conn_target_reach(c, an->tgt)) != 0) {
			if (rc < 0)
				return rc; /* its items would be missing from the list */
			an->tgt++; /* a DOWN or OUT engine's target: its items are elsewhere */
			an->len = 0;
		}
		if (!placed && an->tgt >= c->ntargets) {
			an->eof = 1;
			break;
		}
		if (placed)
			r = creq_new_placed(ct, op, oid, k ? k->dkey : NULL, k ? k->dkey_len : 0,
					    false);
		else
			r = creq_new(c, op, an->tgt);
		if (!r)
			return -ENOMEM;
		args_key(&r->a, ct, oid, k);
		r->a.epoch = epoch == LODE_EPOCH_MAX ? 0 : epoch;
		r->a.anchor.len = an->len;
		r->a.anchor.key = an->key;
		/* Objects are counted in oids, keys in bytes. */
		if (op == NET_OP_OBJ_LIST)
			r->a.max = (uint32_t)(cap / 16);
		else
			r->a.max = (uint32_t)(cap > UINT32_MAX ? UINT32_MAX : cap);
		r->in = buf;
		r->in_cap = cap;
		r->on_done = list_done;
		r->ctx = &o;
		if ((rc = creq_submit(r, NULL, NULL)) < 0)
			return rc;
		if (o.count) {
			*bytes = o.bytes;
			return (int)o.count;
		}
	}
	*bytes = 0;
	return 0;
}

int lode_obj_list(lode_cont_t *ct, lode_epoch_t epoch, struct lode_anchor *an,
		  struct lode_oid *oids, unsigned max)
{
	struct layout_class cls;
	size_t bytes;
	uint8_t *raw;
	int n;

	if (!ct || !oids)
		return -EFAULT;
	if (max == 0)
		return -EINVAL;
	if (max > 4096)
		max = 4096;
	if (!(raw = malloc((size_t)max * 16)))
		return -ENOMEM;
	n = list_run(ct, NET_OP_OBJ_LIST, (struct lode_oid){0, 0}, NULL, epoch, an, raw,
		     (size_t)max * 16, &bytes, false);
	if (n > 0 && bytes != (size_t)n * 16)
		n = -EPROTO;
	for (int i = 0; i < n; i++) {
		oids[i].hi = oids[i].lo = 0;
		for (unsigned b = 0; b < 8; b++) {
			oids[i].hi |= (uint64_t)raw[16 * i + b] << (8 * b);
			oids[i].lo |= (uint64_t)raw[16 * i + 8 + b] << (8 * b);
		}
		/* An EC member's own object (its class the id's or the
		 * container's): the caller's id. */
		if (layout_oid_member_of(oids[i]) >= 0 && is_ec(ct, oids[i], &cls))
			oids[i] = layout_oid_plain(oids[i]);
	}
	free(raw);
	return n;
}

/* List requests name their maximum in items (oids) or bytes (keys); see proto.c. */
int lode_dkey_list(lode_cont_t *ct, struct lode_oid oid, lode_epoch_t epoch,
		   struct lode_anchor *an, void *buf, size_t buf_len)
{
	struct layout_class cls;
	size_t bytes;
	int rc;

	if (!ct)
		return -EFAULT;
	/* An object of one group (S1, RP_n) has all its dkeys on each member:
	 * ask one. Others spread dkeys over groups of one member each. */
	if ((rc = conn_obj_class(ct, oid, &cls)) < 0)
		return rc;
	return list_run(ct, NET_OP_DKEY_LIST, oid, NULL, epoch, an, buf, buf_len, &bytes,
			cls.groups == 1);
}

int lode_akey_list(lode_cont_t *ct, struct lode_oid oid, const struct lode_key *k,
		   lode_epoch_t epoch, struct lode_anchor *an, void *buf, size_t buf_len)
{
	struct layout_class cls;
	size_t bytes;
	bool ec;
	int rc;

	if (!ct || !an)
		return -EFAULT;
	if ((rc = key_check(k, false)) < 0)
		return rc;
	/* A dkey's akeys all live in its group: list a member of it. An EC
	 * object's end marks (ec_io.c) are left out; a page of nothing else
	 * is followed by the next. */
	ec = is_ec(ct, oid, &cls);
	for (;;) {
		int n = list_run(ct, NET_OP_AKEY_LIST, oid, k, epoch, an, buf, buf_len, &bytes,
				 true), kept = 0;
		uint8_t *b = buf;
		size_t at = 0, to = 0;

		if (n <= 0 || !ec)
			return n;
		for (int i = 0; i < n; i++) {
			size_t len = at + 2 <= bytes ? get_le(b + at, 2) : bytes;

			if (at + 2 + len > bytes)
				return -EPROTO; /* a reply that does not hold its count */
			if (!conn_ec_is_mark(b + at + 2, len)) {
				memmove(b + to, b + at, 2 + len);
				to += 2 + len;
				kept++;
			}
			at += 2 + len;
		}
		if (kept || an->eof)
			return kept;
	}
}

/* ---- one target, for rebuild ------------------------------------------------------ */

/* A list reply's cursor into io->an; a fetch's or list's sizes into io. */
static void tgt_io_done(struct creq *r)
{
	struct conn_tgt_io *io = r->ctx;

	if (r->rc < 0)
		return;
	io->val = r->val;
	io->in_len = r->in_len;
	if (io->an) {
		io->an->eof = r->anchor.eof;
		io->an->len = r->anchor.eof ? 0 : r->anchor.len;
		memcpy(io->an->key, r->anchor_key, io->an->len);
	}
}

int conn_tgt_io(lode_cont_t *ct, unsigned tgt, uint16_t op, struct lode_oid oid,
		const struct lode_key *k, struct conn_tgt_io *io)
{
	struct creq *r;
	int rc = 0;

	if (!ct || !io || (io->an && io->an->len > sizeof(io->an->key)))
		return -EFAULT;
	if (tgt >= ct->c->ntargets)
		return -EINVAL;
	if (!(r = creq_new(ct->c, op, tgt)))
		return -ENOMEM;
	args_key(&r->a, ct, oid, k);
	r->a.epoch = io->epoch == LODE_EPOCH_MAX ? 0 : io->epoch;
	r->a.off = io->off;
	r->a.len = io->len;
	r->rebuild = io->rebuild;
	r->hflags = io->hflags;
	if (io->an) {
		r->a.anchor.len = io->an->len;
		r->a.anchor.key = io->an->key;
		r->a.max = (uint32_t)(op == NET_OP_OBJ_LIST ? io->cap / 16
				      : io->cap > UINT32_MAX ? UINT32_MAX : io->cap);
		r->in = io->in;
		r->in_cap = io->cap;
	} else if (op == NET_OP_SV_UPDATE || op == NET_OP_ARR_UPDATE) {
		rc = value_out(r, io->out, io->len);
	} else if (op == NET_OP_SV_FETCH || op == NET_OP_ARR_FETCH) {
		rc = value_in(r, io->in, io->cap);
	} else if (op == NET_OP_SNAP_LIST) {
		r->a.max = io->max;
		r->in = io->in;
		r->in_cap = io->cap;
	} else if (op == NET_OP_LEASE) {
		r->a.max = io->max;
		r->in = io->in;
		r->in_cap = io->cap;
	}
	r->on_done = tgt_io_done;
	r->ctx = io;
	return submit_or_free(r, rc, NULL, NULL);
}

/* ---- key-value objects ----------------------------------------------------------- */

static int kv_key(const char *key, struct lode_key *k)
{
	size_t n;

	if (!key)
		return -EFAULT;
	n = strlen(key);
	*k = (struct lode_key){key, (uint32_t)(n > LODE_KEY_MAX ? LODE_KEY_MAX + 1 : n),
			       AKEY_VALUE, 1};
	return 0;
}

int lode_kv_put(lode_cont_t *ct, struct lode_oid oid, const char *key, const void *val,
		uint32_t len, lode_event_t *ev)
{
	struct lode_key k;
	int rc = kv_key(key, &k);

	return rc < 0 ? rc : lode_obj_update(ct, oid, &k, val, len, ev);
}

int lode_kv_get(lode_cont_t *ct, struct lode_oid oid, const char *key, void *buf, uint32_t cap,
		uint32_t *len_out, lode_event_t *ev)
{
	struct lode_key k;
	int rc = kv_key(key, &k);

	return rc < 0 ? rc : lode_obj_fetch(ct, oid, LODE_EPOCH_MAX, &k, buf, cap, len_out, ev);
}

int lode_kv_remove(lode_cont_t *ct, struct lode_oid oid, const char *key, lode_event_t *ev)
{
	struct lode_key k;
	int rc = kv_key(key, &k);

	return rc < 0 ? rc : lode_dkey_punch(ct, oid, &k, ev);
}

int lode_kv_list(lode_cont_t *ct, struct lode_oid oid, struct lode_anchor *an, void *buf,
		 size_t buf_len)
{
	return lode_dkey_list(ct, oid, LODE_EPOCH_MAX, an, buf, buf_len);
}

/* ---- byte arrays ------------------------------------------------------------------- */

static void chunk_key(uint64_t idx, uint8_t dkey[8], struct lode_key *k)
{
	for (int i = 0; i < 8; i++)
		dkey[i] = (uint8_t)(idx >> (56 - 8 * i));
	*k = (struct lode_key){dkey, 8, AKEY_DATA, 1};
}

static int chunk_check(uint32_t *chunk)
{
	if (*chunk == 0)
		*chunk = LODE_CHUNK_DEFAULT;
	return *chunk > LODE_IO_MAX ? -EINVAL : 0;
}

/* Run fn on each chunk-sized piece of [off, off+len), all under one parent. */
static int array_io(lode_cont_t *ct, struct lode_oid oid, uint32_t chunk, lode_epoch_t epoch,
		    uint64_t off, void *buf, size_t len, bool write, lode_event_t *ev)
{
	struct creq *p;
	uint8_t *b = buf;
	int rc = 0;

	if (!ct || (len && !buf))
		return -EFAULT;
	if ((rc = chunk_check(&chunk)) < 0)
		return rc;
	if (off + len < off)
		return -EOVERFLOW;
	if (!(p = creq_new(ct->c, 0, 0)))
		return -ENOMEM;
	while (len && rc == 0) {
		uint64_t idx = off / chunk, in = off % chunk;
		uint32_t n = (uint32_t)(len < chunk - in ? len : chunk - in);
		uint8_t dkey[8];
		struct lode_key k;

		chunk_key(idx, dkey, &k);
		rc = write ? ext_write(ct, oid, &k, in, b, n, NULL, p)
			   : ext_read(ct, oid, epoch, &k, in, b, n, NULL, p, true);
		off += n;
		b += n;
		len -= n;
	}
	if (rc < 0)
		p->rc = rc;
	return creq_seal(p, rc < 0 ? NULL : ev);
}

int lode_array_write(lode_cont_t *ct, struct lode_oid oid, uint32_t chunk, uint64_t off,
		     const void *buf, size_t len, lode_event_t *ev)
{
	return array_io(ct, oid, chunk, LODE_EPOCH_MAX, off, (void *)buf, len, true, ev);
}

int lode_array_read(lode_cont_t *ct, struct lode_oid oid, uint32_t chunk, lode_epoch_t epoch,
		    uint64_t off, void *buf, size_t len, lode_event_t *ev)
{
	return array_io(ct, oid, chunk, epoch, off, buf, len, false, ev);
}

/* Every chunk index holding a dkey of the array, in no particular order. */
static int array_chunks(lode_cont_t *ct, struct lode_oid oid, lode_epoch_t epoch,
			uint64_t **idx_out, size_t *n_out)
{
	struct lode_anchor an = {0};
	size_t n = 0, cap = 0, bytes = 64 << 10;
	uint64_t *idx = NULL;
	uint8_t *buf = malloc(bytes);
	int rc = 0;

	if (!buf)
		return -ENOMEM;
	while (!an.eof) {
		int got = lode_dkey_list(ct, oid, epoch, &an, buf, bytes);
		size_t o = 0;

		if (got < 0) {
			rc = got;
			break;
		}
		for (int i = 0; i < got; i++) {
			size_t kl = (size_t)buf[o] | (size_t)buf[o + 1] << 8;
			const uint8_t *key = buf + o + 2;

			o += 2 + kl;
			if (kl != 8)
				continue;
			if (n == cap) {
				uint64_t *ni = realloc(idx, (cap = cap ? 2 * cap : 64) * sizeof(*ni));

				if (!ni) {
					rc = -ENOMEM;
					goto out;
				}
				idx = ni;
			}
			idx[n] = 0;
			for (int b = 0; b < 8; b++)
				idx[n] = idx[n] << 8 | key[b];
			n++;
		}
	}
out:
	free(buf);
	if (rc < 0) {
		free(idx);
		return rc;
	}
	*idx_out = idx;
	*n_out = n;
	return 0;
}

static int cmp_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? 1 : x > y ? -1 : 0;
}

int lode_array_size(lode_cont_t *ct, struct lode_oid oid, uint32_t chunk, lode_epoch_t epoch,
		    uint64_t *size_out)
{
	struct lode_key mk = {DKEY_META, 4, AKEY_SIZE, 4};
	uint64_t *idx = NULL, data = 0, trunc = 0;
	uint8_t raw[8];
	uint32_t got = 0;
	size_t n;
	int rc;

	if (!ct || !size_out)
		return -EFAULT;
	if ((rc = chunk_check(&chunk)) < 0)
		return rc;
	if ((rc = array_chunks(ct, oid, epoch, &idx, &n)) < 0)
		return rc;
	if (n)
		qsort(idx, n, sizeof(*idx), cmp_desc);
	for (size_t i = 0; i < n; i++) {
		uint8_t dkey[8];
		struct lode_key k;
		uint64_t s = 0;

		chunk_key(idx[i], dkey, &k);
		rc = lode_obj_size(ct, oid, epoch, &k, &s);
		if (rc < 0 && rc != -ENOENT)
			break;
		rc = 0;
		if (s) {
			data = idx[i] * chunk + s;
			break;
		}
	}
	free(idx);
	if (rc < 0)
		return rc;
	rc = lode_obj_fetch(ct, oid, epoch, &mk, raw, sizeof(raw), &got, NULL);
	if (rc == 0 && got == 8)
		for (int b = 0; b < 8; b++)
			trunc |= (uint64_t)raw[b] << (8 * b);
	else if (rc < 0 && rc != -ENOENT)
		return rc;
	*size_out = data > trunc ? data : trunc;
	return 0;
}

int lode_array_truncate(lode_cont_t *ct, struct lode_oid oid, uint32_t chunk, uint64_t size)
{
	struct lode_key mk = {DKEY_META, 4, AKEY_SIZE, 4};
	uint64_t *idx = NULL;
	uint8_t raw[8];
	struct creq *p;
	size_t n;
	int rc;

	if (!ct)
		return -EFAULT;
	if ((rc = chunk_check(&chunk)) < 0)
		return rc;
	if ((rc = array_chunks(ct, oid, LODE_EPOCH_MAX, &idx, &n)) < 0)
		return rc;
	if (!(p = creq_new(ct->c, 0, 0))) {
		free(idx);
		return -ENOMEM;
	}
	/* Remove what lies past size: whole chunks, and the tail of the one it ends in. */
	for (size_t i = 0; i < n && rc == 0; i++) {
		uint8_t dkey[8];
		struct lode_key k;
		uint64_t start = idx[i] * chunk;

		chunk_key(idx[i], dkey, &k);
		if (start >= size)
			rc = punch(ct, NET_OP_DKEY_PUNCH, oid, &k, 0, 0, NULL, p);
		else if (size < start + chunk)
			rc = punch(ct, NET_OP_ARR_PUNCH, oid, &k, size - start, start + chunk - size,
				   NULL, p);
	}
	free(idx);
	if (rc < 0)
		p->rc = rc;
	if ((rc = creq_seal(p, NULL)) < 0)
		return rc;
	for (int b = 0; b < 8; b++)
		raw[b] = (uint8_t)(size >> (8 * b));
	return lode_obj_update(ct, oid, &mk, raw, sizeof(raw), NULL);
}

/* ---- containers and snapshots --------------------------------------------------- */

static int label_check(const char *label)
{
	size_t n;

	if (!label)
		return -EFAULT;
	n = strlen(label);
	if (n == 0 || n > LODE_LABEL_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		char ch = label[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == '_'))
			return -EINVAL;
	}
	return 0;
}

/*
 * Containers are named, owned and listed by the management service
 * (session.c). Creating one registers it there first, then makes it on
 * every target with the capability the service grants its owner; destroying
 * one removes it from the targets first and then from the service, so a
 * crash in between leaves a name whose container is empty, never data
 * without a name that could be reached.
 */
int lode_cont_create(lode_conn_t *c, const char *label, struct lode_uuid *uuid_out)
{
	static const struct conn_cont_props defaults;
	int rc;

	if (!c)
		return -EFAULT;
	if ((rc = label_check(label)) < 0)
		return rc;
	return conn_cont_create_props(c, label, &defaults, uuid_out);
}

int lode_cont_destroy(lode_conn_t *c, const char *label)
{
	struct conn_cont_info info;
	struct net_args a = {0};
	int rc;

	if (!c)
		return -EFAULT;
	if ((rc = label_check(label)) < 0)
		return rc;
	if ((rc = conn_cont_acquire(c, label, &a.cont, &info)) < 0)
		return rc;
	if (!(info.rights & AUTH_R_ADMIN)) {
		conn_cont_release(c, &a.cont);
		return -EACCES;
	}
	rc = broadcast(c, NET_OP_CONT_DESTROY, &a, NULL);
	conn_cont_release(c, &a.cont);
	if (rc < 0 && rc != -LODE_ENOCONT)
		return rc;
	return conn_cont_unregister(c, label);
}

int lode_cont_list(lode_conn_t *c, char (*labels)[LODE_LABEL_MAX + 1], unsigned max)
{
	if (!c || (max && !labels))
		return -EFAULT;
	return conn_cont_names(c, labels, max);
}

int lode_cont_open(lode_conn_t *c, const char *label, lode_cont_t **out)
{
	struct conn_cont_info info;
	lode_cont_t *ct;
	int rc;

	if (!c || !out)
		return -EFAULT;
	if ((rc = label_check(label)) < 0)
		return rc;
	if (!(ct = calloc(1, sizeof(*ct))))
		return -ENOMEM;
	ct->c = c;
	if ((rc = conn_cont_acquire(c, label, &ct->uuid, &info)) < 0) {
		free(ct);
		return rc;
	}
	/* Objects of class 0 take the container's: SX unless it names one.
	 * Sealed arrays are not erasure-coded yet. */
	rc = layout_class_parse(info.object_class[0] ? info.object_class : "SX", &ct->cls);
	if (rc == 0 && ct->cls.redun == LAYOUT_R_EC && info.encryption)
		rc = -EOPNOTSUPP;
	if (rc < 0) {
		explicit_bzero(&info, sizeof(info));
		conn_cont_release(c, &ct->uuid);
		free(ct);
		return rc;
	}
	/* The data key: wrapped by the creator's tenant key, unwrapped here
	 * with ours; the service only ever held the wrapped form. */
	if (info.encryption && (rc = crypt_cont_init(ct, info.wrapped_key, info.wrapped_len,
							    info.crypt_block)) < 0) {
		explicit_bzero(&info, sizeof(info));
		conn_cont_release(c, &ct->uuid);
		free(ct);
		return rc;
	}
	explicit_bzero(&info, sizeof(info));
	*out = ct;
	return 0;
}

int lode_cont_close(lode_cont_t *ct)
{
	if (ct) {
		crypt_cont_fini(ct);
		conn_cont_release(ct->c, &ct->uuid);
		free(ct);
	}
	return 0;
}

void lode_cont_uuid(const lode_cont_t *ct, struct lode_uuid *uuid_out)
{
	*uuid_out = ct->uuid;
}

/* A snapshot's request to a target: a NEW engine whose walk has not
 * reached the container yet has none, and its walk makes the snapshot
 * there from the others' (docs/decisions/0014); one whose walk was faster
 * than us has it already (the same epoch: the same snapshot). Lock held. */
static void snap_done(struct creq *r)
{
	if ((r->rc == -LODE_ENOCONT && conn_target_new(r->c, r->tgt)) || r->rc == -EEXIST)
		r->rc = 0;
}

/*
 * The snapshot a names to every target of c that done[] does not have yet,
 * all at once; done[] gains those it is sent to.
 */
static int snap_send(lode_conn_t *c, const struct net_args *a, bool *done)
{
	struct creq *p, *r;
	int rc = 0;

	if (!(p = creq_new(c, 0, 0)))
		return -ENOMEM;
	for (unsigned i = 0; i < c->ntargets && rc == 0; i++) {
		if (done[i])
			continue;
		if ((rc = conn_target_reach(c, i)) != 0) {
			rc = rc < 0 ? rc : 0; /* a lost engine the map has UP would miss it */
			continue;
		}
		if (!(r = creq_new(c, NET_OP_SNAP_CREATE, i))) {
			rc = -ENOMEM;
			break;
		}
		r->a = *a;
		r->on_done = snap_done;
		done[i] = true;
		rc = creq_submit(r, NULL, p);
	}
	if (rc < 0)
		p->rc = rc;
	return creq_seal(p, NULL);
}

void conn_answer_done(struct creq *r)
{
	struct conn_answer *a = r->ctx;

	a->rc = r->rc;
	a->val = r->val;
	a->in_len = r->in_len;
	r->rc = 0;
}

/* One target's answer to a snapshot's barrier: leases held (val), its clock, its torn arrays. */
struct hold_reply {
	struct conn_answer a;
	uint8_t *data; /* the clock (8 bytes); with NET_F_SNAP_TORN, the torn arrays after it */
};

/* What one round of the barrier found over the targets. */
struct hold_sum {
	uint64_t held, clock;
	unsigned torn;
};

/*
 * One round of the barrier's question (snap_hold) to every reachable
 * target: hold for ms (0: let go), and with torn, list the torn arrays
 * too. h[0, *nt) are the answers (a.rc 1: not asked), their data in *bufp
 * (the caller frees it, also on error).
 */
static int hold_round(lode_cont_t *ct, uint32_t token, uint32_t ms, bool torn,
		      struct hold_reply *h, unsigned *nt, uint8_t **bufp, struct hold_sum *sum)
{
	lode_conn_t *c = ct->c;
	size_t cap = torn ? 12 + NET_TORN_LIST_MAX : 8;
	unsigned n = c->ntargets; /* one round's: an engine may join meanwhile */
	struct creq *p = creq_new(c, 0, 0), *r;
	uint8_t *buf = malloc((n ? n : 1) * cap);
	int rc = p && buf ? 0 : -ENOMEM;

	*bufp = buf;
	*nt = n;
	*sum = (struct hold_sum){0};
	for (unsigned i = 0; i < n && rc == 0; i++) {
		h[i] = (struct hold_reply){.a.rc = 1, .data = buf + i * cap}; /* 1: not asked */
		if (conn_target_reach(c, i) != 0)
			continue;
		if (!(r = creq_new(c, NET_OP_SNAP_CREATE, i))) {
			rc = -ENOMEM;
			break;
		}
		r->a.cont = ct->uuid;
		r->a.epoch = (uint64_t)token << 32 | ms;
		r->hflags = NET_F_SNAP_HOLD | (torn ? NET_F_SNAP_TORN : 0);
		r->in = h[i].data;
		r->in_cap = cap;
		r->on_done = conn_answer_done;
		r->ctx = &h[i].a;
		rc = creq_submit(r, NULL, p);
	}
	if (p && rc < 0)
		p->rc = rc;
	if (p)
		rc = creq_seal(p, NULL);
	for (unsigned i = 0; i < n && rc == 0; i++) {
		uint64_t e;

		if (h[i].a.rc == 1)
			continue;
		if (h[i].a.rc == -EAGAIN && ms) {
			sum->held++; /* its table of holds is full: others' snapshots */
			continue;
		}
		if ((rc = h[i].a.rc) < 0)
			break;
		/* The clock, and with torn the count; one that took the hold for
		 * a snapshot answers no clock. */
		if (torn ? h[i].a.in_len < 12 : h[i].a.in_len != 8) {
			rc = -EPROTO;
			break;
		}
		e = get_le(h[i].data, 8);
		sum->held += h[i].a.val;
		sum->clock = e > sum->clock ? e : sum->clock;
		if (torn)
			sum->torn += (unsigned)get_le(h[i].data + 8, 4);
	}
	return rc;
}

/*
 * A snapshot's barrier (docs/decisions/0012): every reachable target holds
 * back new writers' leases of the container's EC arrays, for this taker's
 * token, for ms (0: lets go) and says how many are held still, and its
 * clock. Asked again each millisecond until none is held anywhere (each
 * holder gives its lease back once its pieces have landed, or it runs
 * out), until the snapshot's deadline (three request timeouts from its
 * start), then -EBUSY (before writers waiting behind the hold give up).
 * *clock_out: the latest clock any said in a round after the first that
 * found none held, so that a piece that landed just before its lease's
 * give-back is below it wherever it is.
 */
static int snap_hold(lode_cont_t *ct, uint32_t token, uint32_t ms, int64_t until,
		     lode_epoch_t *clock_out)
{
	struct hold_reply *h = calloc(CONN_TARGETS_MAX, sizeof(*h));
	bool drained = false;
	int rc;

	if (!h)
		return -ENOMEM;
	for (;;) {
		struct hold_sum sum;
		uint8_t *buf;
		unsigned n;

		rc = hold_round(ct, token, ms, false, h, &n, &buf, &sum);
		free(buf);
		if (rc == 0 && ms && !sum.held && !drained) {
			drained = true; /* once more: see above */
			continue;
		}
		if (rc < 0 || !ms || !sum.held) {
			if (rc == 0 && clock_out)
				*clock_out = sum.clock;
			free(h);
			return rc;
		}
		drained = false;
		if (agent_now_ms() > until) {
			free(h);
			return -EBUSY; /* an EC write held its lease all along */
		}
		nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
	}
}

/* The torn arrays one snapshot has dealt with, by their listed bytes. */
struct torn_seen {
	uint8_t **v;
	size_t *len, n;
};

static bool seen_has(const struct torn_seen *ts, const uint8_t *e, size_t len)
{
	for (size_t i = 0; i < ts->n; i++)
		if (ts->len[i] == len && memcmp(ts->v[i], e, len) == 0)
			return true;
	return false;
}

static int seen_add(struct torn_seen *ts, const uint8_t *e, size_t len)
{
	uint8_t **v = realloc(ts->v, (ts->n + 1) * sizeof(*v));
	size_t *l = v ? realloc(ts->len, (ts->n + 1) * sizeof(*l)) : NULL;

	if (v)
		ts->v = v;
	if (l)
		ts->len = l;
	if (!v || !l || !(ts->v[ts->n] = malloc(len)))
		return -ENOMEM;
	memcpy(ts->v[ts->n], e, len);
	ts->len[ts->n++] = len;
	return 0;
}

/* A snapshot's mends: its hold, kept up while they run, and what they did. */
struct mends {
	lode_cont_t *ct;
	uint32_t token, ms;
	int64_t renewed;       /* the hold last asked for then (agent_now_ms) */
	struct hold_reply *h2; /* the renewals' answers */
	struct torn_seen seen; /* listed arrays dealt with: mended, or not mendable */
	unsigned mended;
};

/* Renew the hold once a quarter of it has gone, so that it lasts the mends. */
static int mends_renew(struct mends *md)
{
	struct hold_sum sum;
	uint8_t *buf;
	unsigned n;
	int rc;

	if (agent_now_ms() - md->renewed < (int64_t)md->ms / 4)
		return 0;
	rc = hold_round(md->ct, md->token, md->ms, false, md->h2, &n, &buf, &sum);
	free(buf);
	md->renewed = agent_now_ms();
	return rc;
}

/*
 * Mend the torn arrays listed in one answer's data d[0, end)
 * (NET_F_SNAP_TORN) that were not dealt with before. 0, -EPROTO for a
 * malformed list, or a mend's error other than -EIO (a data member lost)
 * and -EBUSY (a reader or another snapshot's mend held the lease all
 * along): those are left torn.
 */
static int mend_listed(struct mends *md, const uint8_t *d, const uint8_t *end)
{
	while (end - d >= 2) {
		size_t kl = get_le(d, 2);
		const uint8_t *q = d + 2, *e = d;
		struct layout_class cls;
		struct lode_oid oid;
		struct lode_key k;
		uint64_t off, to;
		int rc;

		if (kl < 20 || (size_t)(end - q) < kl + 16)
			return -EPROTO;
		oid = (struct lode_oid){.hi = get_le(q, 8), .lo = get_le(q + 8, 8)};
		off = get_le(q + kl, 8);
		to = get_le(q + kl + 8, 8);
		k.dkey_len = get_le(q + 16, 2);
		k.dkey = q + 18;
		if (18 + k.dkey_len + 2 > kl)
			return -EPROTO;
		k.akey_len = get_le(q + 18 + k.dkey_len, 2);
		k.akey = q + 20 + k.dkey_len;
		if (20 + k.dkey_len + k.akey_len != kl)
			return -EPROTO;
		d = q + kl + 16;
		/* Once each: a mark on a member that no longer holds the array's
		 * leases is listed again after its mend (the mend's give-back
		 * clears the one on the member that holds them now). */
		if (seen_has(&md->seen, e, (size_t)(d - e)))
			continue;
		if ((rc = seen_add(&md->seen, e, (size_t)(d - e))) < 0 ||
		    (rc = mends_renew(md)) < 0)
			return rc;
		/* Not an EC array as this client sees the container: none to mend. */
		if (!is_ec(md->ct, oid, &cls) || key_check(&k, true) < 0)
			continue;
		rc = conn_ec_mend(md->ct, &cls, oid, &k, off, to, md->token);
		if (rc == 0)
			md->mended++;
		else if (rc != -EIO && rc != -EBUSY)
			return rc;
	}
	return d == end ? 0 : -EPROTO;
}

/*
 * With the barrier drained and held: mend every torn EC array of the
 * container that the targets list (a writer died or failed mid-write), so
 * that no view of the snapshot keeps parity that does not match its data
 * (a degraded read or a rebuild of that view would compute wrong cells
 * from it, long after the array itself was mended). The mends' leases
 * pass the container's holds while this taker's, kept up meanwhile,
 * lasts: no writer can tear another array. An array with a data member
 * lost cannot be mended, nor one whose lease another holds for a request
 * timeout: those are left torn. Asked again while a round finds arrays
 * not dealt with (an answer lists at most NET_TORN_LIST_MAX bytes of
 * them), and while other takers' mends hold leases, until the deadline
 * (-EBUSY then, as for the barrier). Returns how many were mended, or an
 * error (a mend's other than those: the snapshot fails with it).
 */
static int snap_mend(lode_cont_t *ct, uint32_t token, uint32_t ms, int64_t until)
{
	struct hold_reply *h = calloc(CONN_TARGETS_MAX, sizeof(*h));
	struct mends md = {.ct = ct, .token = token, .ms = ms, .renewed = agent_now_ms(),
			   .h2 = calloc(CONN_TARGETS_MAX, sizeof(*md.h2))};
	bool again;
	int rc = h && md.h2 ? 0 : -ENOMEM;

	do {
		struct hold_sum sum = {0};
		uint8_t *buf = NULL;
		size_t seen = md.seen.n;
		unsigned n;

		if (rc == 0)
			rc = hold_round(ct, token, ms, true, h, &n, &buf, &sum);
		md.renewed = agent_now_ms();
		for (unsigned i = 0; rc == 0 && sum.torn && i < n; i++)
			if (h[i].a.rc == 0)
				rc = mend_listed(&md, h[i].data + 12, h[i].data + h[i].a.in_len);
		free(buf);
		/* Leases held now are other takers' mends (writers wait behind
		 * the holds; this taker's give-backs are on their way): an array
		 * one of them holds is not listed, and is listed again if its
		 * mend fails. Asked again until they end. */
		if (rc == 0 && md.seen.n == seen && sum.held && agent_now_ms() > until)
			rc = -EBUSY;
		again = rc == 0 && (md.seen.n > seen || sum.held);
		if (again && md.seen.n == seen)
			nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
	} while (again);
	for (size_t i = 0; i < md.seen.n; i++)
		free(md.seen.v[i]);
	free(md.seen.v);
	free(md.seen.len);
	free(md.h2);
	free(h);
	return rc < 0 ? rc : (int)md.mended;
}

int lode_snap_create(lode_cont_t *ct, lode_epoch_t *epoch_out)
{
	struct net_args a = {0};
	bool done[CONN_TARGETS_MAX] = {false};
	lode_epoch_t clock = 0;
	uint32_t token = 0, hold_ms;
	int64_t until;
	int rc;

	if (!ct || !epoch_out)
		return -EFAULT;
	hold_ms = ct->c->timeout_ms > NET_LEASE_MAX_MS / 2 ? NET_LEASE_MAX_MS : 2 * ct->c->timeout_ms;
	/* Every engine the map has now, as for a container's creation. */
	if (!ct->c->map_local) {
		if ((rc = conn_map_fetch(ct->c)) < 0 || (rc = conn_engines_fresh(ct->c)) < 0)
			return rc;
	}
	if ((rc = targets_reachable(ct->c)) < 0)
		return rc; /* no snapshot left on some targets only */
	/* The barrier first: with no EC write of the container in flight
	 * anywhere, and the epoch above every target's clock (each takes it
	 * as its own clock's floor), a snapshot never cuts one in two (its
	 * pieces land at their own engines' clocks), which would leave the
	 * snapshot's stripes with parity that matches neither. */
	if (getrandom(&token, sizeof(token), GRND_NONBLOCK) != (ssize_t)sizeof(token))
		token = (uint32_t)agent_now_ms() ^ (uint32_t)getpid() << 16;
	if (!token)
		token = 1;
	/* Torn arrays are mended under the hold (snap_mend), and the clock
	 * asked again above their mends. Again even when this taker mended
	 * none: another taker's mend may have held an array torn at the
	 * first clock while this one listed them (a held lease is not
	 * listed), and the second barrier waits for that mend to end. */
	until = agent_now_ms() + 3 * (int64_t)ct->c->timeout_ms;
	rc = snap_hold(ct, token, hold_ms, until, &clock);
	if (rc == 0 && (rc = snap_mend(ct, token, hold_ms, until)) >= 0)
		rc = snap_hold(ct, token, hold_ms, until, &clock);
	if (rc < 0) {
		(void)snap_hold(ct, token, 0, 0, NULL);
		return rc;
	}
	a.cont = ct->uuid;
	a.epoch = clock + 1;
	rc = snap_send(ct->c, &a, done);
	/* An engine that joined after the fetch above lists snapshots in its
	 * walk, maybe before the first target took this one: a second fetch
	 * names it, and it gets the snapshot here (docs/decisions/0014); so
	 * does one that was being connected during the first round. */
	if (rc == 0 && !ct->c->map_local &&
	    (rc = conn_map_fetch(ct->c)) == 0 && (rc = conn_engines_fresh(ct->c)) == 0)
		rc = snap_send(ct->c, &a, done);
	(void)snap_hold(ct, token, 0, 0, NULL);
	if (rc < 0) {
		/* Taken on some targets: dropped again where it was sent, so
		 * that a failure leaves no snapshot (the first error is what
		 * the caller gets). */
		conn_targets_undo(ct->c, NET_OP_SNAP_DESTROY, &a, done);
		return rc;
	}
	*epoch_out = a.epoch;
	return 0;
}

int lode_snap_destroy(lode_cont_t *ct, lode_epoch_t epoch)
{
	struct net_args a = {0};

	if (!ct)
		return -EFAULT;
	if (epoch == 0 || epoch == LODE_EPOCH_MAX)
		return -EINVAL;
	a.cont = ct->uuid;
	a.epoch = epoch;
	return broadcast(ct->c, NET_OP_SNAP_DESTROY, &a, NULL);
}

int lode_snap_list(lode_cont_t *ct, lode_epoch_t *epochs, unsigned max)
{
	uint64_t total = 0;
	uint8_t *raw;
	struct creq *r;
	int rc;

	if (!ct || (max && !epochs))
		return -EFAULT;
	if (max > 65536)
		max = 65536;
	if (!(raw = malloc((size_t)max * 8 + 8)))
		return -ENOMEM;
	if (!(r = creq_new(ct->c, NET_OP_SNAP_LIST, conn_target_first(ct->c)))) {
		free(raw);
		return -ENOMEM;
	}
	r->a.cont = ct->uuid;
	r->a.max = max;
	r->in = raw;
	r->in_cap = (size_t)max * 8;
	r->on_done = val_done;
	r->ctx = &total;
	rc = creq_submit(r, NULL, NULL);
	if (rc == 0) {
		for (unsigned i = 0; i < max && i < total; i++) {
			epochs[i] = 0;
			for (unsigned b = 0; b < 8; b++)
				epochs[i] |= (uint64_t)raw[8 * i + b] << (8 * b);
		}
	}
	free(raw);
	return rc < 0 ? rc : (int)total;
}

int lode_cont_aggregate(lode_cont_t *ct)
{
	struct net_args a = {0};

	if (!ct)
		return -EFAULT;
	a.cont = ct->uuid;
	return broadcast(ct->c, NET_OP_AGGREGATE, &a, NULL);
}
