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
 */
#include "client/client.h"
#include "client/cont_props.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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

/* A request on the target owning (oid, dkey), keyed by k. */
static struct creq *key_req(lode_cont_t *ct, uint16_t op, struct lode_oid oid,
			    const struct lode_key *k)
{
	struct creq *r = creq_new(ct->c, op, conn_target_of(ct->c, oid, k->dkey, k->dkey_len));

	if (r)
		args_key(&r->a, ct, oid, k);
	return r;
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

static int submit_or_free(struct creq *r, int rc, lode_event_t *ev, struct creq *parent)
{
	if (rc < 0) {
		creq_free(r);
		return rc;
	}
	return creq_submit(r, ev, parent);
}

/* Send op to every target under one parent; ev NULL blocks. */
static int broadcast(lode_conn_t *c, uint16_t op, const struct net_args *a, lode_event_t *ev)
{
	struct creq *p = creq_new(c, 0, 0);
	int rc = 0;

	if (!p)
		return -ENOMEM;
	for (unsigned i = 0; i < c->ntargets && rc == 0; i++) {
		struct creq *r = creq_new(c, op, i);

		if (!r) {
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

/* ---- status -------------------------------------------------------------------- */

int lode_status(lode_conn_t *c, struct lode_target_status *st, unsigned max)
{
	if (!c || (max && !st))
		return -EFAULT;
	for (unsigned i = 0; i < c->ntargets && i < max; i++) {
		uint8_t raw[NET_STATUS_SIZE];
		struct net_status ns;
		struct creq *r = creq_new(c, NET_OP_STATUS, i);
		int rc;

		if (!r)
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

static int ext_write(lode_cont_t *ct, struct lode_oid oid, const struct lode_key *k, uint64_t off,
		     const void *buf, uint32_t len, lode_event_t *ev, struct creq *parent)
{
	struct creq *r;
	int rc;

	if ((rc = ext_check(k, off, len)) < 0)
		return rc;
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

static int ext_read(lode_cont_t *ct, struct lode_oid oid, lode_epoch_t epoch,
		    const struct lode_key *k, uint64_t off, void *buf, uint32_t len,
		    lode_event_t *ev, struct creq *parent, bool holes)
{
	struct creq *r;
	int rc;

	if ((rc = ext_check(k, off, len)) < 0)
		return rc;
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
	struct creq *r;
	int rc;

	if (!ct || !size_out)
		return -EFAULT;
	if ((rc = key_check(k, true)) < 0)
		return rc;
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
	struct net_args a = {0};

	if (!ct)
		return -EFAULT;
	a.cont = ct->uuid;
	a.oid = oid;
	return broadcast(ct->c, NET_OP_OBJ_PUNCH, &a, ev);
}

static int punch(lode_cont_t *ct, uint16_t op, struct lode_oid oid, const struct lode_key *k,
		 uint64_t off, uint64_t len, lode_event_t *ev, struct creq *parent)
{
	struct creq *r;
	int rc;

	if (!ct)
		return -EFAULT;
	if ((rc = key_check(k, op != NET_OP_DKEY_PUNCH)) < 0)
		return rc;
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
static int list_run(lode_cont_t *ct, uint16_t op, struct lode_oid oid, const struct lode_key *k,
		    lode_epoch_t epoch, struct lode_anchor *an, void *buf, size_t cap,
		    size_t *bytes)
{
	lode_conn_t *c = ct->c;

	if (!an || !buf)
		return -EFAULT;
	if (an->len > sizeof(an->key))
		return -EINVAL;
	while (!an->eof) {
		struct list_out o = {an, c->ntargets, 0, 0};
		struct creq *r;
		int rc;

		if (an->tgt >= c->ntargets) {
			an->eof = 1;
			break;
		}
		if (!(r = creq_new(c, op, an->tgt)))
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
		     (size_t)max * 16, &bytes);
	if (n > 0 && bytes != (size_t)n * 16)
		n = -EPROTO;
	for (int i = 0; i < n; i++) {
		oids[i].hi = oids[i].lo = 0;
		for (unsigned b = 0; b < 8; b++) {
			oids[i].hi |= (uint64_t)raw[16 * i + b] << (8 * b);
			oids[i].lo |= (uint64_t)raw[16 * i + 8 + b] << (8 * b);
		}
	}
	free(raw);
	return n;
}

/* List requests name their maximum in items (oids) or bytes (keys); see proto.c. */
int lode_dkey_list(lode_cont_t *ct, struct lode_oid oid, lode_epoch_t epoch,
		   struct lode_anchor *an, void *buf, size_t buf_len)
{
	size_t bytes;

	if (!ct)
		return -EFAULT;
	return list_run(ct, NET_OP_DKEY_LIST, oid, NULL, epoch, an, buf, buf_len, &bytes);
}

int lode_akey_list(lode_cont_t *ct, struct lode_oid oid, const struct lode_key *k,
		   lode_epoch_t epoch, struct lode_anchor *an, void *buf, size_t buf_len)
{
	unsigned owner;
	size_t bytes;
	int rc;

	if (!ct || !an)
		return -EFAULT;
	if ((rc = key_check(k, false)) < 0)
		return rc;
	if (an->eof)
		return 0;
	/* A dkey's akeys all live on its target: list that one alone. */
	owner = conn_target_of(ct->c, oid, k->dkey, k->dkey_len);
	if (an->len == 0)
		an->tgt = owner;
	if (an->tgt != owner)
		return -EINVAL;
	rc = list_run(ct, NET_OP_AKEY_LIST, oid, k, epoch, an, buf, buf_len, &bytes);
	if (rc >= 0 && an->tgt != owner)
		an->eof = 1;
	return rc;
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
	lode_cont_t *ct;
	int rc;

	if (!c || !out)
		return -EFAULT;
	if ((rc = label_check(label)) < 0)
		return rc;
	if (!(ct = calloc(1, sizeof(*ct))))
		return -ENOMEM;
	ct->c = c;
	if ((rc = conn_cont_acquire(c, label, &ct->uuid, NULL)) < 0) {
		free(ct);
		return rc;
	}
	*out = ct;
	return 0;
}

int lode_cont_close(lode_cont_t *ct)
{
	if (ct) {
		conn_cont_release(ct->c, &ct->uuid);
		free(ct);
	}
	return 0;
}

void lode_cont_uuid(const lode_cont_t *ct, struct lode_uuid *uuid_out)
{
	*uuid_out = ct->uuid;
}

int lode_snap_create(lode_cont_t *ct, lode_epoch_t *epoch_out)
{
	struct net_args a = {0};
	struct creq *r;
	uint64_t epoch = 0;
	int rc;

	if (!ct || !epoch_out)
		return -EFAULT;
	/* Target 0's clock picks the epoch; the others retain the same one. */
	if (!(r = creq_new(ct->c, NET_OP_SNAP_CREATE, 0)))
		return -ENOMEM;
	r->a.cont = ct->uuid;
	r->on_done = val_done;
	r->ctx = &epoch;
	if ((rc = creq_submit(r, NULL, NULL)) < 0)
		return rc;
	a.cont = ct->uuid;
	a.epoch = epoch;
	if (ct->c->ntargets > 1) {
		struct creq *p = creq_new(ct->c, 0, 0);

		if (!p)
			return -ENOMEM;
		for (unsigned i = 1; i < ct->c->ntargets && rc == 0; i++) {
			if (!(r = creq_new(ct->c, NET_OP_SNAP_CREATE, i))) {
				rc = -ENOMEM;
				break;
			}
			r->a = a;
			rc = creq_submit(r, NULL, p);
		}
		if (rc < 0)
			p->rc = rc;
		if ((rc = creq_seal(p, NULL)) < 0)
			return rc;
	}
	*epoch_out = epoch;
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
	if (!(r = creq_new(ct->c, NET_OP_SNAP_LIST, 0))) {
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
