/*
 * The data-plane wire codec (see proto.h for the format). A cursor (struct
 * wbuf / rbuf) writes or reads little-endian fields; reading past the end
 * sets an error that the caller checks once at the end, so no field can be
 * taken from outside the buffer.
 */
#include "net/proto.h"

#include <string.h>

struct wbuf {
	uint8_t *p;
	size_t cap, off;
	int err;
};

struct rbuf {
	const uint8_t *p;
	size_t len, off;
	int err;
};

static void put(struct wbuf *w, const void *src, size_t n)
{
	if (w->err || n > w->cap - w->off) {
		w->err = -EMSGSIZE;
		return;
	}
	if (n)
		memcpy(w->p + w->off, src, n);
	w->off += n;
}

static void put_le(struct wbuf *w, uint64_t v, unsigned bytes)
{
	uint8_t b[8];

	for (unsigned i = 0; i < bytes; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	put(w, b, bytes);
}

static const uint8_t *take(struct rbuf *r, size_t n)
{
	const uint8_t *p;

	if (r->err || n > r->len - r->off) {
		r->err = -EPROTO;
		return NULL;
	}
	p = r->p + r->off;
	r->off += n;
	return p;
}

static uint64_t get_le(struct rbuf *r, unsigned bytes)
{
	const uint8_t *b = take(r, bytes);
	uint64_t v = 0;

	if (!b)
		return 0;
	for (unsigned i = 0; i < bytes; i++)
		v |= (uint64_t)b[i] << (8 * i);
	return v;
}

static void wr_u64(uint8_t *p, uint64_t v)
{
	for (unsigned i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t rd_u64(const uint8_t *p)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

#define K (NET_FLD_CONT | NET_FLD_OID | NET_FLD_DKEY | NET_FLD_AKEY)

static const struct {
	const char *name;
	uint32_t fields;
	int has_anchor;
} ops[NET_OP_COUNT] = {
	[NET_OP_PING] = {"ping", 0, 0},
	[NET_OP_STATUS] = {"status", 0, 0},
	[NET_OP_CONT_CREATE] = {"cont_create", NET_FLD_CONT, 0},
	[NET_OP_CONT_DESTROY] = {"cont_destroy", NET_FLD_CONT, 0},
	[NET_OP_SNAP_CREATE] = {"snap_create", NET_FLD_CONT | NET_FLD_EPOCH, 0},
	[NET_OP_SNAP_DESTROY] = {"snap_destroy", NET_FLD_CONT | NET_FLD_EPOCH, 0},
	[NET_OP_SNAP_LIST] = {"snap_list", NET_FLD_CONT | NET_FLD_MAX, 0},
	[NET_OP_SV_UPDATE] = {"sv_update", K | NET_FLD_EPOCH | NET_FLD_LEN | NET_FLD_BULK, 0},
	[NET_OP_SV_FETCH] = {"sv_fetch", K | NET_FLD_EPOCH | NET_FLD_LEN | NET_FLD_BULK, 0},
	[NET_OP_ARR_UPDATE] = {"arr_update",
			       K | NET_FLD_EPOCH | NET_FLD_OFF | NET_FLD_LEN | NET_FLD_BULK, 0},
	[NET_OP_ARR_FETCH] = {"arr_fetch",
			      K | NET_FLD_EPOCH | NET_FLD_OFF | NET_FLD_LEN | NET_FLD_BULK, 0},
	[NET_OP_ARR_SIZE] = {"arr_size", K | NET_FLD_EPOCH, 0},
	[NET_OP_OBJ_PUNCH] = {"obj_punch", NET_FLD_CONT | NET_FLD_OID | NET_FLD_EPOCH, 0},
	[NET_OP_DKEY_PUNCH] = {"dkey_punch",
			       NET_FLD_CONT | NET_FLD_OID | NET_FLD_DKEY | NET_FLD_EPOCH, 0},
	[NET_OP_AKEY_PUNCH] = {"akey_punch", K | NET_FLD_EPOCH, 0},
	[NET_OP_ARR_PUNCH] = {"arr_punch", K | NET_FLD_EPOCH | NET_FLD_OFF | NET_FLD_LEN, 0},
	[NET_OP_OBJ_LIST] = {"obj_list", NET_FLD_CONT | NET_FLD_EPOCH | NET_FLD_ANCHOR | NET_FLD_MAX,
			     1},
	[NET_OP_DKEY_LIST] = {"dkey_list",
			      NET_FLD_CONT | NET_FLD_OID | NET_FLD_EPOCH | NET_FLD_ANCHOR | NET_FLD_MAX,
			      1},
	[NET_OP_AKEY_LIST] = {"akey_list",
			      NET_FLD_CONT | NET_FLD_OID | NET_FLD_DKEY | NET_FLD_EPOCH |
				      NET_FLD_ANCHOR | NET_FLD_MAX,
			      1},
	[NET_OP_AGGREGATE] = {"aggregate", NET_FLD_CONT | NET_FLD_EPOCH, 0},
	[NET_OP_HELLO] = {"hello", 0, 0},
	[NET_OP_BYE] = {"bye", 0, 0},
	[NET_OP_LEASE] = {"lease", K | NET_FLD_EPOCH | NET_FLD_OFF | NET_FLD_LEN | NET_FLD_MAX, 0},
	[NET_OP_DKEY_DROP] = {"dkey_drop", NET_FLD_CONT | NET_FLD_OID | NET_FLD_DKEY, 0},
	[NET_OP_OBJ_FOLD] = {"obj_fold", NET_FLD_CONT | NET_FLD_OID, 0},
};

uint32_t net_op_fields(uint16_t opcode)
{
	return opcode < NET_OP_COUNT ? ops[opcode].fields : 0;
}

const char *net_op_name(uint16_t opcode)
{
	return opcode < NET_OP_COUNT && ops[opcode].name ? ops[opcode].name : "unknown";
}

int net_op_has_anchor(uint16_t opcode)
{
	return opcode < NET_OP_COUNT && ops[opcode].has_anchor;
}

void net_hdr_encode(const struct net_hdr *h, uint8_t *out)
{
	struct wbuf w = {out, NET_HDR_SIZE, 0, 0};

	put_le(&w, h->magic, 4);
	put_le(&w, h->version, 2);
	put_le(&w, h->opcode, 2);
	put_le(&w, h->flags, 4);
	put_le(&w, (uint32_t)h->status, 4);
	put_le(&w, h->req_id, 8);
	put_le(&w, h->map_ver, 4);
	put_le(&w, h->cap_len, 2);
	put_le(&w, h->args_len, 2);
	put_le(&w, h->target, 4);
	put_le(&w, h->session, 4);
}

int net_hdr_decode(const void *buf, size_t len, struct net_hdr *h)
{
	struct rbuf r = {buf, len, 0, 0};

	if (!buf || len < NET_HDR_SIZE)
		return -EPROTO;
	h->magic = (uint32_t)get_le(&r, 4);
	h->version = (uint16_t)get_le(&r, 2);
	h->opcode = (uint16_t)get_le(&r, 2);
	h->flags = (uint32_t)get_le(&r, 4);
	h->status = (int32_t)(uint32_t)get_le(&r, 4);
	h->req_id = get_le(&r, 8);
	h->map_ver = (uint32_t)get_le(&r, 4);
	h->cap_len = (uint16_t)get_le(&r, 2);
	h->args_len = (uint16_t)get_le(&r, 2);
	h->target = (uint32_t)get_le(&r, 4);
	h->session = (uint32_t)get_le(&r, 4);
	if (h->magic != NET_MAGIC)
		return -EPROTO;
	if (h->version != NET_VERSION)
		return -EPROTONOSUPPORT;
	if (h->cap_len > NET_CAP_MAX || h->args_len > NET_ARGS_MAX)
		return -EMSGSIZE;
	if ((size_t)NET_HDR_SIZE + h->cap_len + h->args_len != len)
		return -EPROTO;
	return 0;
}

static int key_len_check(uint32_t len)
{
	if (len == 0)
		return -LODE_EKEYEMPTY;
	if (len > LODE_KEY_MAX)
		return -ENAMETOOLONG;
	return 0;
}

/* One rule for both sides, so that no encoder sends an anchor its peer refuses. */
static int anchor_check(const struct net_anchor *a)
{
	return a->eof > 1 || a->len > 2 + LODE_KEY_MAX ? -EINVAL : 0;
}

static int put_anchor(struct wbuf *w, const struct net_anchor *a)
{
	int rc = anchor_check(a);

	if (rc < 0)
		return rc;
	put_le(w, a->eof, 1);
	put_le(w, a->len, 2);
	put(w, a->key, a->len);
	return 0;
}

static void get_anchor(struct rbuf *r, struct net_anchor *a)
{
	a->eof = (uint8_t)get_le(r, 1);
	a->len = (uint16_t)get_le(r, 2);
	if (anchor_check(a) < 0)
		r->err = -EPROTO;
	a->key = take(r, r->err ? 0 : a->len);
}

int net_args_encode(uint16_t opcode, const struct net_args *a, uint8_t *out, size_t cap)
{
	uint32_t f = net_op_fields(opcode);
	struct wbuf w = {out, cap, 0, 0};
	int rc;

	if (opcode == 0 || opcode >= NET_OP_COUNT)
		return -EINVAL;
	if (f & NET_FLD_CONT)
		put(&w, a->cont.b, 16);
	if (f & NET_FLD_OID) {
		put_le(&w, a->oid.hi, 8);
		put_le(&w, a->oid.lo, 8);
	}
	if (f & NET_FLD_DKEY) {
		if ((rc = key_len_check(a->dkey_len)) < 0)
			return rc;
		put_le(&w, a->dkey_len, 2);
		put(&w, a->dkey, a->dkey_len);
	}
	if (f & NET_FLD_AKEY) {
		if ((rc = key_len_check(a->akey_len)) < 0)
			return rc;
		put_le(&w, a->akey_len, 2);
		put(&w, a->akey, a->akey_len);
	}
	if (f & NET_FLD_EPOCH)
		put_le(&w, a->epoch, 8);
	if (f & NET_FLD_OFF)
		put_le(&w, a->off, 8);
	if (f & NET_FLD_LEN)
		put_le(&w, a->len, 8);
	if ((f & NET_FLD_ANCHOR) && (rc = put_anchor(&w, &a->anchor)) < 0)
		return rc;
	if (f & NET_FLD_MAX)
		put_le(&w, a->max, 4);
	if (f & NET_FLD_BULK) {
		put_le(&w, a->bulk, 1);
		if (a->bulk == NET_BULK_RMA) {
			if (a->rkey_len == 0) /* the decoder refuses it */
				return -EINVAL;
			if (a->rkey_len > NET_RKEY_MAX)
				return -EMSGSIZE;
			put_le(&w, a->rma_addr, 8);
			put_le(&w, a->rma_reg, 8);
			put_le(&w, a->rkey_len, 2);
			put(&w, a->rkey, a->rkey_len);
		} else if (a->bulk != NET_BULK_NONE) {
			return -EINVAL;
		}
	}
	return w.err ? w.err : (int)w.off;
}

int net_args_decode(uint16_t opcode, const void *buf, size_t len, struct net_args *a)
{
	uint32_t f = net_op_fields(opcode);
	struct rbuf r = {buf, len, 0, 0};
	const uint8_t *p;
	int rc;

	memset(a, 0, sizeof(*a));
	if (f == 0 && (opcode == 0 || opcode >= NET_OP_COUNT))
		return -EOPNOTSUPP;
	if (len && !buf)
		return -EPROTO;
	if (f & NET_FLD_CONT) {
		if ((p = take(&r, 16)))
			memcpy(a->cont.b, p, 16);
	}
	if (f & NET_FLD_OID) {
		a->oid.hi = get_le(&r, 8);
		a->oid.lo = get_le(&r, 8);
	}
	if (f & NET_FLD_DKEY) {
		a->dkey_len = (uint16_t)get_le(&r, 2);
		if (!r.err && (rc = key_len_check(a->dkey_len)) < 0)
			return rc;
		a->dkey = take(&r, a->dkey_len);
	}
	if (f & NET_FLD_AKEY) {
		a->akey_len = (uint16_t)get_le(&r, 2);
		if (!r.err && (rc = key_len_check(a->akey_len)) < 0)
			return rc;
		a->akey = take(&r, a->akey_len);
	}
	if (f & NET_FLD_EPOCH)
		a->epoch = get_le(&r, 8);
	if (f & NET_FLD_OFF)
		a->off = get_le(&r, 8);
	if (f & NET_FLD_LEN)
		a->len = get_le(&r, 8);
	if (f & NET_FLD_ANCHOR)
		get_anchor(&r, &a->anchor);
	if (f & NET_FLD_MAX)
		a->max = (uint32_t)get_le(&r, 4);
	if (f & NET_FLD_BULK) {
		a->bulk = (uint8_t)get_le(&r, 1);
		if (a->bulk == NET_BULK_RMA) {
			a->rma_addr = get_le(&r, 8);
			a->rma_reg = get_le(&r, 8);
			a->rkey_len = (uint16_t)get_le(&r, 2);
			if (a->rkey_len == 0 || a->rkey_len > NET_RKEY_MAX)
				r.err = -EPROTO;
			a->rkey = take(&r, r.err ? 0 : a->rkey_len);
		} else if (a->bulk != NET_BULK_NONE) {
			r.err = -EPROTO;
		}
	}
	if (r.err)
		return r.err;
	return r.off == len ? 0 : -EPROTO;
}

int net_reply_encode(const struct net_reply_args *ra, int has_anchor, uint8_t *out, size_t cap)
{
	struct wbuf w = {out, cap, 0, 0};
	int rc;

	put_le(&w, ra->val, 8);
	if (has_anchor && (rc = put_anchor(&w, &ra->anchor)) < 0)
		return rc;
	return w.err ? w.err : (int)w.off;
}

int net_reply_decode(const void *buf, size_t len, int has_anchor, struct net_reply_args *ra)
{
	struct rbuf r = {buf, len, 0, 0};

	memset(ra, 0, sizeof(*ra));
	if (len && !buf)
		return -EPROTO;
	ra->val = get_le(&r, 8);
	if (has_anchor)
		get_anchor(&r, &ra->anchor);
	if (r.err)
		return r.err;
	return r.off == len ? 0 : -EPROTO;
}

void net_status_encode(const struct net_status *s, uint8_t *out)
{
	memset(out, 0, NET_STATUS_SIZE);
	wr_u64(out + 0, s->records);
	wr_u64(out + 8, s->extent_used);
	wr_u64(out + 16, s->extent_cap);
	wr_u64(out + 24, s->requests);
	wr_u64(out + 32, s->errors);
	wr_u64(out + 40, s->cpu_ns);
	out[48] = s->ram;
	out[49] = s->direct_io;
}

int net_status_decode(const void *buf, size_t len, struct net_status *s)
{
	const uint8_t *p = buf;

	if (!buf || len != NET_STATUS_SIZE)
		return -EPROTO;
	s->records = rd_u64(p + 0);
	s->extent_used = rd_u64(p + 8);
	s->extent_cap = rd_u64(p + 16);
	s->requests = rd_u64(p + 24);
	s->errors = rd_u64(p + 32);
	s->cpu_ns = rd_u64(p + 40);
	s->ram = p[48];
	s->direct_io = p[49];
	return 0;
}

void net_hello_encode(uint8_t *out)
{
	struct wbuf w = {out, NET_HELLO_SIZE, 0, 0};

	put_le(&w, NET_BOOT_MAGIC, 4);
	put_le(&w, NET_VERSION, 2);
	put_le(&w, 0, 2);
}

int net_hello_decode(const void *buf, size_t len)
{
	struct rbuf r = {buf, len, 0, 0};
	uint32_t magic;
	uint16_t version;

	if (!buf || len != NET_HELLO_SIZE)
		return -EPROTO;
	magic = (uint32_t)get_le(&r, 4);
	version = (uint16_t)get_le(&r, 2);
	if (magic != NET_BOOT_MAGIC)
		return -EPROTO;
	return version == NET_VERSION ? 0 : -EPROTONOSUPPORT;
}

int net_welcome_encode(const struct net_welcome *wl, uint8_t *out, size_t cap)
{
	struct wbuf w = {out, cap, 0, 0};
	size_t hl = strnlen(wl->host, sizeof(wl->host) - 1);

	if (wl->ntargets > NET_TARGETS_MAX)
		return -EINVAL;
	put_le(&w, NET_BOOT_MAGIC, 4);
	put_le(&w, NET_VERSION, 2);
	put_le(&w, wl->ntargets, 2);
	put_le(&w, (uint32_t)wl->status, 4);
	put_le(&w, wl->inline_max, 4);
	put_le(&w, wl->transports, 4);
	put_le(&w, wl->bulk, 1);
	put_le(&w, wl->pid, 4);
	put_le(&w, hl, 1);
	put(&w, wl->host, hl);
	put_le(&w, wl->mgmt_port, 2);
	put_le(&w, wl->mgmt_tls, 1);
	for (unsigned i = 0; i < wl->ntargets; i++) {
		if (wl->addr_len[i] == 0) /* the decoder refuses it */
			return -EINVAL;
		if (wl->addr_len[i] > NET_WORKER_ADDR_MAX)
			return -EMSGSIZE;
		put_le(&w, wl->addr_len[i], 4);
		put(&w, wl->addr[i], wl->addr_len[i]);
		put_le(&w, wl->port[i], 2);
	}
	return w.err ? w.err : (int)w.off;
}

int net_welcome_decode(const void *buf, size_t len, struct net_welcome *wl)
{
	struct rbuf r = {buf, len, 0, 0};
	const uint8_t *p;
	uint32_t magic;
	uint16_t version;
	uint8_t hl;

	memset(wl, 0, sizeof(*wl));
	if (!buf)
		return -EPROTO;
	magic = (uint32_t)get_le(&r, 4);
	version = (uint16_t)get_le(&r, 2);
	if (r.err || magic != NET_BOOT_MAGIC)
		return -EPROTO;
	if (version != NET_VERSION)
		return -EPROTONOSUPPORT;
	wl->ntargets = (uint16_t)get_le(&r, 2);
	wl->status = (int32_t)(uint32_t)get_le(&r, 4);
	wl->inline_max = (uint32_t)get_le(&r, 4);
	wl->transports = (uint32_t)get_le(&r, 4);
	wl->bulk = (uint8_t)get_le(&r, 1);
	wl->pid = (uint32_t)get_le(&r, 4);
	hl = (uint8_t)get_le(&r, 1);
	if ((p = take(&r, hl)))
		memcpy(wl->host, p, hl);
	wl->mgmt_port = (uint16_t)get_le(&r, 2);
	wl->mgmt_tls = (uint8_t)get_le(&r, 1);
	if (wl->mgmt_tls > 1)
		return -EPROTO;
	if (wl->ntargets > NET_TARGETS_MAX)
		return -EMSGSIZE;
	for (unsigned i = 0; i < wl->ntargets && !r.err; i++) {
		wl->addr_len[i] = (uint32_t)get_le(&r, 4);
		if (wl->addr_len[i] == 0 || wl->addr_len[i] > NET_WORKER_ADDR_MAX)
			return r.err ? r.err : -EMSGSIZE;
		wl->addr[i] = take(&r, wl->addr_len[i]);
		wl->port[i] = (uint16_t)get_le(&r, 2);
	}
	if (r.err)
		return r.err;
	return r.off == len ? 0 : -EPROTO;
}
