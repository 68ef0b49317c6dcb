/*
 * The RPCs of lode.mgmt.v1.Mgmt (proto/lode/mgmt/v1/mgmt.proto), one
 * function each, and the method table rpc_server_start serves.
 *
 * Every call goes through dispatch(): it takes the service's lock, and for
 * every method but Connect and RenewCapability checks the capability in the
 * call's metadata (signature, expiry, revocation, its user still there)
 * before the handler runs; the handler then decides authorization against
 * the current state, not against the rights written in the token, so an ACL
 * change counts at once for management calls. The token's rights are for
 * the targets.
 *
 * A handler that changes the state changes the model, then commits it
 * (state.c) before it replies; a failed commit has already put the model
 * back, so the handler only undoes what it did outside the model (the live
 * revocation table) and answers INTERNAL. Replies are built from malloc'ed
 * pieces and freed with protobuf_c_message_free_unpacked.
 *
 * Names of users and groups are per tenant. Where a request names one
 * without its tenant ("bob"), the caller's tenant is meant; "acme/bob"
 * names it in tenant acme. Connect's user is "TENANT/NAME", or a bare name
 * in tenant "system".
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "layout/layout.h"
#include "lode/errno.h"
#include "lode/mgmt/v1/mgmt.pb-c.h"
#include "mgmt/state.h"

#ifndef LODE_VERSION
#define LODE_VERSION "0.3.0"
#endif

#define QNAME_MAX (2 * MS_NAME_MAX + 2) /* "TENANT/NAME" and its NUL */

/* The caller, as its capability names it and the state knows it. */
struct caller {
	struct auth_cap cap;
	ms_user *u;
	ms_tenant *t;
	bool sys; /* a system administrator */
};

typedef int (*op_fn)(struct mgmt *m, const struct caller *who, const void *req,
		     ProtobufCMessage **reply, char *msg, size_t msg_cap);

static int fail(char *msg, size_t msg_cap, int status, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int fail(char *msg, size_t msg_cap, int status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, msg_cap, fmt, ap);
	va_end(ap);
	return status;
}

/* A failed commit: the model is back to what is on disk (replicated: to
 * the last committed state, and the client may try the leader again). */
static int fail_commit(char *msg, size_t msg_cap, int rc)
{
	if (rc == -LODE_ENOTLEADER || rc == -ETIMEDOUT || rc == -ECANCELED)
		return fail(msg, msg_cap, RPC_UNAVAILABLE,
			    "the change was not committed (%s: no majority, or the leader "
			    "changed); nothing changed here",
			    lode_strerror(rc));
	return fail(msg, msg_cap, RPC_INTERNAL,
		    "the change was not persisted (%s); nothing changed", lode_strerror(rc));
}

/* ---- building replies ------------------------------------------------------------ */

/*
 * Reply builders record running out of memory in one flag instead of
 * failing at every field; the handler checks it once at the end (rb_done).
 * A failed string becomes protobuf-c's empty string, which freeing skips.
 */
struct rb {
	bool oom;
};

static void *rb_msg(struct rb *b, const ProtobufCMessageDescriptor *d)
{
	void *m = malloc(d->sizeof_message);

	if (!m) {
		b->oom = true;
		return NULL;
	}
	protobuf_c_message_init(d, m);
	return m;
}

static char *rb_str(struct rb *b, const char *s)
{
	char *d = strdup(s);

	if (!d) {
		b->oom = true;
		return (char *)protobuf_c_empty_string;
	}
	return d;
}

static void rb_bytes(struct rb *b, ProtobufCBinaryData *f, const void *p, size_t n)
{
	if (ms_bytes_set(f, p, n))
		b->oom = true;
}

/* An array for n elements of size sz (zeroed); NULL and oom when it fails. */
static void *rb_array(struct rb *b, size_t n, size_t sz)
{
	void *a = calloc(n ? n : 1, sz);

	if (!a)
		b->oom = true;
	return a;
}

static int rb_done(struct rb *b, void *r, ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	if (b->oom || !r) {
		if (r)
			protobuf_c_message_free_unpacked(r, NULL);
		return fail(msg, msg_cap, RPC_INTERNAL, "out of memory");
	}
	*reply = r;
	return RPC_OK;
}

static Lode__Mgmt__V1__Tenant *tenant_msg(struct rb *b, const ms_tenant *t)
{
	Lode__Mgmt__V1__Tenant *r = rb_msg(b, &lode__mgmt__v1__tenant__descriptor);

	if (r) {
		r->name = rb_str(b, t->name);
		r->created_unix_ms = t->created_unix_ms;
	}
	return r;
}

static Lode__Mgmt__V1__User *user_msg(struct rb *b, const ms_state *s, const ms_user *u)
{
	Lode__Mgmt__V1__User *r = rb_msg(b, &lode__mgmt__v1__user__descriptor);
	const ms_tenant *t = ms_tenant_by_id(s, u->tenant);

	if (!r)
		return NULL;
	r->tenant = rb_str(b, t ? t->name : "");
	r->name = rb_str(b, u->name);
	r->admin = u->admin;
	r->node = u->node;
	r->revoked = u->revoked;
	r->groups = rb_array(b, s->n_groups, sizeof(char *));
	for (size_t i = 0; r->groups && i < s->n_groups; i++) {
		if (s->groups[i]->tenant != u->tenant || !ms_group_has(s->groups[i], u->id))
			continue;
		char *g = strdup(s->groups[i]->name);

		if (!g) {
			b->oom = true;
			break;
		}
		r->groups[r->n_groups++] = g;
	}
	return r;
}

static Lode__Mgmt__V1__Group *group_msg(struct rb *b, const ms_state *s, const ms_group *g)
{
	Lode__Mgmt__V1__Group *r = rb_msg(b, &lode__mgmt__v1__group__descriptor);
	const ms_tenant *t = ms_tenant_by_id(s, g->tenant);

	if (!r)
		return NULL;
	r->tenant = rb_str(b, t ? t->name : "");
	r->name = rb_str(b, g->name);
	r->members = rb_array(b, g->n_members, sizeof(char *));
	for (size_t i = 0; r->members && i < g->n_members; i++) {
		const ms_user *u = ms_user_by_id(s, g->members[i]);

		if (!u)
			continue;
		char *n = strdup(u->name);

		if (!n) {
			b->oom = true;
			break;
		}
		r->members[r->n_members++] = n;
	}
	return r;
}

static Lode__Mgmt__V1__AclEntry *acl_msg(struct rb *b, const char *res, const char *pr,
					 unsigned rights)
{
	Lode__Mgmt__V1__AclEntry *r = rb_msg(b, &lode__mgmt__v1__acl_entry__descriptor);

	if (r) {
		r->resource = rb_str(b, res);
		r->principal = rb_str(b, pr);
		r->rights = rights;
	}
	return r;
}

static Lode__Mgmt__V1__PoolInfo *pool_msg(struct rb *b, const ms_state *s, const ms_pool *p)
{
	Lode__Mgmt__V1__PoolInfo *r = rb_msg(b, &lode__mgmt__v1__pool_info__descriptor);

	if (!r)
		return NULL;
	r->label = rb_str(b, p->label);
	rb_bytes(b, &r->uuid, p->uuid.data, p->uuid.len);
	r->size = p->size;
	r->targets = rb_array(b, p->n_targets, sizeof(uint32_t));
	if (r->targets) {
		memcpy(r->targets, p->targets, p->n_targets * sizeof(uint32_t));
		r->n_targets = p->n_targets;
	}
	r->containers = ms_pool_containers(s, p);
	r->used = 0; /* per-pool accounting is not kept yet */
	r->created_unix_ms = p->created_unix_ms;
	return r;
}

/* A container's description; with_key adds the wrapped data key (OpenContainer). */
static Lode__Mgmt__V1__ContInfo *cont_msg(struct rb *b, const ms_state *s, const ms_cont *c,
					  bool with_key)
{
	Lode__Mgmt__V1__ContInfo *r = rb_msg(b, &lode__mgmt__v1__cont_info__descriptor);
	const ms_tenant *t = ms_tenant_by_id(s, c->tenant);
	Lode__Mgmt__V1__ContProps *pr;

	if (!r)
		return NULL;
	r->pool = rb_str(b, c->pool);
	r->label = rb_str(b, c->label);
	rb_bytes(b, &r->uuid, c->uuid.data, c->uuid.len);
	r->tenant = rb_str(b, t ? t->name : "");
	r->created_unix_ms = c->created_unix_ms;
	pr = r->props = rb_msg(b, &lode__mgmt__v1__cont_props__descriptor);
	if (pr) {
		pr->object_class = rb_str(b, c->object_class);
		pr->chunk_size = c->chunk_size;
		pr->checksum = rb_str(b, c->checksum);
		pr->encryption = c->encryption;
		pr->crypt_block = c->crypt_block;
	}
	if (with_key && c->encryption)
		rb_bytes(b, &r->wrapped_key, c->wrapped_key.data, c->wrapped_key.len);
	return r;
}

static Lode__Mgmt__V1__Target *target_msg(struct rb *b, uint32_t id, unsigned state,
					  const struct mgmt_target_info *ti)
{
	Lode__Mgmt__V1__Target *t = rb_msg(b, &lode__mgmt__v1__target__descriptor);

	if (!t)
		return NULL;
	t->id = id;
	t->state = (Lode__Mgmt__V1__State)state; /* layout's states are the API's numbers */
	if (ti) {
		t->capacity = ti->capacity;
		t->used = ti->used;
		t->requests = ti->requests;
		t->errors = ti->errors;
		t->load = ti->load;
		t->ram = ti->ram;
	}
	return t;
}

/*
 * One engine of the map: its record, its states, and its targets' live
 * numbers (the host's from hooks->targets, the others' from their last
 * heartbeat). Adds what its targets hold to *capacity and *used unless it
 * is OUT.
 */
static Lode__Mgmt__V1__Engine *engine_msg(struct rb *b, struct mgmt *m,
					  const struct layout_engine *le,
					  const struct mgmt_target_info *host, unsigned nhost,
					  uint64_t *capacity, uint64_t *used)
{
	Lode__Mgmt__V1__Engine *e = rb_msg(b, &lode__mgmt__v1__engine__descriptor);
	const ms_engine *rec = ms_engine_by_id(m->st.s, le->id);
	const struct mgmt_engine_live *l = NULL;

	if (!e)
		return NULL;
	for (size_t i = 0; i < m->nlive && !l; i++)
		if (m->live[i].id == le->id)
			l = &m->live[i];
	e->id = le->id;
	e->address = rb_str(b, rec ? rec->address : "");
	e->state = (Lode__Mgmt__V1__State)le->state;
	if (rec)
		rb_bytes(b, &e->uuid, rec->uuid.data, rec->uuid.len);
	e->heartbeat_unix_ms = le->id == MGMT_HOST_ENGINE || !l ? 0 : l->heartbeat_ms;
	e->targets = rb_array(b, le->ntgts, sizeof(*e->targets));
	for (unsigned i = 0; e->targets && i < le->ntgts; i++) {
		const struct mgmt_target_info *ti = NULL;
		Lode__Mgmt__V1__Target *t;

		if (le->id == MGMT_HOST_ENGINE) {
			for (unsigned j = 0; j < nhost && !ti; j++)
				if (host[j].id == i)
					ti = &host[j];
		} else if (l && i < l->ntargets) {
			ti = &l->targets[i];
		}
		t = target_msg(b, i, le->tgt[i], ti);
		if (!t)
			break;
		e->targets[e->n_targets++] = t;
		if (ti && le->state != LAYOUT_OUT) {
			*capacity += ti->capacity;
			*used += ti->used;
		}
	}
	return e;
}

/* The pool map: every engine, in slot (= id) order, with their targets;
 * *capacity and *used sum the targets of the engines that are not OUT. */
static Lode__Mgmt__V1__PoolMap *map_msg(struct rb *b, struct mgmt *m, uint64_t *capacity,
					uint64_t *used)
{
	Lode__Mgmt__V1__PoolMap *r = rb_msg(b, &lode__mgmt__v1__pool_map__descriptor);
	struct mgmt_target_info *host = calloc(MGMT_TARGETS_MAX, sizeof(*host));
	struct layout_map *map = NULL;
	unsigned nhost = 0;
	bool live;

	*capacity = *used = 0;
	if (!r || !host || mgmt_map_load(m, &map)) {
		b->oom = true;
		free(host);
		return r;
	}
	nhost = mgmt_targets_get(m, host, MGMT_TARGETS_MAX, &live);
	r->version = (uint32_t)map->version;
	r->heartbeat_ms = m->heartbeat_ms;
	r->grace_ms = m->grace_ms;
	r->settled_version = m->st.s->settled_version;
	r->reclaimed_version = m->st.s->reclaimed_version;
	r->engines = rb_array(b, map->nengines, sizeof(*r->engines));
	for (uint32_t i = 0; r->engines && i < map->nengines; i++) {
		Lode__Mgmt__V1__Engine *e =
			engine_msg(b, m, &map->engines[i], host, nhost, capacity, used);

		if (!e)
			break;
		r->engines[r->n_engines++] = e;
	}
	layout_map_free(map);
	free(host);
	return r;
}

/* Every signing key of the keyring and every revocation: what an engine
 * needs to check capabilities as the service does. */
static void keys_msg(struct rb *b, const ms_state *s, Lode__Mgmt__V1__SigningKeyInfo ***keys,
		     size_t *nkeys, Lode__Mgmt__V1__RevocationInfo ***revs, size_t *nrevs)
{
	*keys = rb_array(b, s->n_keys, sizeof(**keys));
	for (size_t i = 0; *keys && i < s->n_keys; i++) {
		Lode__Mgmt__V1__SigningKeyInfo *k =
			rb_msg(b, &lode__mgmt__v1__signing_key_info__descriptor);

		if (!k)
			break;
		k->id = s->keys[i]->id;
		rb_bytes(b, &k->key, s->keys[i]->key.data, s->keys[i]->key.len);
		k->retired_unix_ms = s->keys[i]->retired_unix_ms;
		(*keys)[(*nkeys)++] = k;
	}
	*revs = rb_array(b, s->n_revocations, sizeof(**revs));
	for (size_t i = 0; *revs && i < s->n_revocations; i++) {
		Lode__Mgmt__V1__RevocationInfo *v =
			rb_msg(b, &lode__mgmt__v1__revocation_info__descriptor);

		if (!v)
			break;
		v->user = s->revocations[i]->user;
		v->before_unix_ms = s->revocations[i]->before_unix_ms;
		(*revs)[(*nrevs)++] = v;
	}
}

static Lode__Mgmt__V1__RebuildStatus *rebuild_msg(struct rb *b, struct mgmt *m)
{
	Lode__Mgmt__V1__RebuildStatus *r = rb_msg(b, &lode__mgmt__v1__rebuild_status__descriptor);
	struct layout_map *map = NULL;
	struct mgmt_rebuild_info ri;
	uint32_t pending;

	if (!r || mgmt_map_load(m, &map)) {
		b->oom = true;
		return r;
	}
	mgmt_rebuild_sum(m, map, &ri, &pending);
	layout_map_free(map);
	r->map_version = ri.map_version;
	r->running = ri.running;
	r->objects_done = ri.objects_done;
	r->objects_total = ri.objects_total;
	r->bytes_done = ri.bytes_done;
	r->bytes_total = ri.bytes_total;
	r->started_unix_ms = ri.started_unix_ms;
	r->finished_unix_ms = ri.finished_unix_ms;
	r->errno_value = ri.errno_value;
	r->engines_pending = pending;
	return r;
}

/* ---- names, principals, resources --------------------------------------------------- */

/*
 * Split "TENANT/NAME" or "NAME" (then tenant is dflt) and find the tenant.
 * RPC_OK, or INVALID_ARGUMENT / NOT_FOUND with msg set.
 */
static int qname_split(const ms_state *s, const char *q, const ms_tenant *dflt, ms_tenant **t,
		       char *name, char *msg, size_t msg_cap)
{
	const char *slash = strchr(q, '/');
	char tname[MS_NAME_MAX + 2];

	if (!slash) {
		if (!ms_name_valid(q))
			return fail(msg, msg_cap, RPC_INVALID_ARGUMENT, "bad name \"%.*s\"",
				    MS_NAME_MAX + 1, q);
		*t = (ms_tenant *)dflt;
		snprintf(name, MS_NAME_MAX + 1, "%s", q);
		return RPC_OK;
	}
	if (slash - q > MS_NAME_MAX || !ms_name_valid(slash + 1))
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT, "bad name \"%.*s\"",
			    2 * MS_NAME_MAX + 1, q);
	snprintf(tname, sizeof(tname), "%.*s", (int)(slash - q), q);
	if (!ms_name_valid(tname))
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT, "bad tenant name \"%s\"", tname);
	*t = ms_tenant_find(s, tname);
	if (!*t)
		return fail(msg, msg_cap, RPC_NOT_FOUND, "no tenant %s", tname);
	snprintf(name, MS_NAME_MAX + 1, "%s", slash + 1);
	return RPC_OK;
}

static int user_resolve(const ms_state *s, const char *q, const ms_tenant *dflt, ms_user **u,
			char *msg, size_t msg_cap)
{
	char name[MS_NAME_MAX + 1];
	ms_tenant *t = NULL;
	int st = qname_split(s, q, dflt, &t, name, msg, msg_cap);

	if (st)
		return st;
	*u = t ? ms_user_find(s, t->id, name) : NULL;
	if (!*u)
		return fail(msg, msg_cap, RPC_NOT_FOUND, "no user %s/%s", t ? t->name : "?", name);
	return RPC_OK;
}

static int group_resolve(const ms_state *s, const char *q, const ms_tenant *dflt, ms_group **g,
			 char *msg, size_t msg_cap)
{
	char name[MS_NAME_MAX + 1];
	ms_tenant *t = NULL;
	int st = qname_split(s, q, dflt, &t, name, msg, msg_cap);

	if (st)
		return st;
	*g = t ? ms_group_find(s, t->id, name) : NULL;
	if (!*g)
		return fail(msg, msg_cap, RPC_NOT_FOUND, "no group %s/%s", t ? t->name : "?", name);
	return RPC_OK;
}

/* A tenant by name, "" meaning the caller's. */
static int tenant_resolve(const ms_state *s, const struct caller *who, const char *name,
			  ms_tenant **t, char *msg, size_t msg_cap)
{
	if (!name[0]) {
		*t = who->t;
		return RPC_OK;
	}
	if (!ms_name_valid(name))
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT, "bad tenant name \"%.*s\"",
			    MS_NAME_MAX + 1, name);
	*t = ms_tenant_find(s, name);
	if (!*t)
		return fail(msg, msg_cap, RPC_NOT_FOUND, "no tenant %s", name);
	return RPC_OK;
}

/* "user:[T/]N", "group:[T/]N" or "tenant:T" to its stored form (always qualified). */
static int principal_resolve(const ms_state *s, const struct caller *who, const char *in, char *out,
			     size_t out_cap, char *msg, size_t msg_cap)
{
	int st;

	if (strncmp(in, "tenant:", 7) == 0) {
		ms_tenant *t;

		if (!in[7])
			return fail(msg, msg_cap, RPC_INVALID_ARGUMENT,
				    "principal tenant: needs a name");
		st = tenant_resolve(s, who, in + 7, &t, msg, msg_cap);
		if (st)
			return st;
		snprintf(out, out_cap, "tenant:%s", t->name);
		return RPC_OK;
	}
	if (strncmp(in, "user:", 5) == 0) {
		ms_user *u;

		st = user_resolve(s, in + 5, who->t, &u, msg, msg_cap);
		if (st)
			return st;
		snprintf(out, out_cap, "user:%s/%s", ms_tenant_by_id(s, u->tenant)->name, u->name);
		return RPC_OK;
	}
	if (strncmp(in, "group:", 6) == 0) {
		ms_group *g;

		st = group_resolve(s, in + 6, who->t, &g, msg, msg_cap);
		if (st)
			return st;
		snprintf(out, out_cap, "group:%s/%s", ms_tenant_by_id(s, g->tenant)->name, g->name);
		return RPC_OK;
	}
	return fail(msg, msg_cap, RPC_INVALID_ARGUMENT,
		    "bad principal \"%.*s\": user:NAME, group:NAME or tenant:NAME", 2 * MS_NAME_MAX,
		    in);
}

static ms_pool *pool_get(const ms_state *s, const char *label)
{
	return ms_pool_find(s, label[0] ? label : MS_DEFAULT_POOL);
}

/* "POOL" or "POOL/CONTAINER" to the records (*c NULL for a pool). */
static int resource_resolve(const ms_state *s, const char *in, ms_pool **p, ms_cont **c, char *msg,
			    size_t msg_cap)
{
	const char *slash = strchr(in, '/');
	char pool[MS_NAME_MAX + 2];

	*c = NULL;
	if (!slash) {
		if (!ms_name_valid(in))
			return fail(msg, msg_cap, RPC_INVALID_ARGUMENT,
				    "bad resource \"%.*s\": POOL or POOL/CONTAINER",
				    2 * MS_NAME_MAX, in);
		*p = ms_pool_find(s, in);
		if (!*p)
			return fail(msg, msg_cap, RPC_NOT_FOUND, "no pool %s", in);
		return RPC_OK;
	}
	snprintf(pool, sizeof(pool), "%.*s", (int)(slash - in > MS_NAME_MAX + 1 ? 0 : slash - in),
		 in);
	if (!ms_name_valid(pool) || !ms_name_valid(slash + 1))
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT,
			    "bad resource \"%.*s\": POOL or POOL/CONTAINER", 2 * MS_NAME_MAX, in);
	*p = ms_pool_find(s, pool);
	if (!*p)
		return fail(msg, msg_cap, RPC_NOT_FOUND, "no pool %s", pool);
	*c = ms_cont_find(s, pool, slash + 1);
	if (!*c)
		return fail(msg, msg_cap, RPC_NOT_FOUND, "no container %s", in);
	return RPC_OK;
}

static int cont_resolve(const ms_state *s, const Lode__Mgmt__V1__ContRef *ref, ms_pool **p,
			ms_cont **c, char *msg, size_t msg_cap)
{
	*p = pool_get(s, ref->pool);
	if (!*p)
		return fail(msg, msg_cap, RPC_NOT_FOUND, "no pool %s", ref->pool);
	if (!ms_name_valid(ref->label))
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT, "bad container label \"%.*s\"",
			    MS_NAME_MAX + 1, ref->label);
	*c = ms_cont_find(s, (*p)->label, ref->label);
	if (!*c)
		return fail(msg, msg_cap, RPC_NOT_FOUND, "no container %s/%s", (*p)->label,
			    ref->label);
	return RPC_OK;
}

/* ---- capabilities ----------------------------------------------------------------------- */

/*
 * Sign a capability for u. Its issue time is after any revocation of u,
 * even one in this same millisecond (a user restored and connecting at
 * once), since the revocation table refuses what was issued at or before.
 */
static int cap_issue(struct mgmt *m, const ms_user *u, const ms_pool *p, const ms_cont *c,
		     unsigned rights, uint64_t client, uint8_t *out, int64_t *expires)
{
	const ms_revocation *r = ms_revocation_find(m->st.s, u->id);
	struct auth_cap cap = {0};
	int64_t now = mgmt_now_ms(m);

	cap.issued_ms = now;
	if (r && r->before_unix_ms >= now)
		cap.issued_ms = r->before_unix_ms + 1;
	cap.expires_ms = cap.issued_ms + m->lifetime_ms;
	cap.rights = (uint16_t)rights;
	cap.client = client;
	cap.tenant = u->tenant;
	cap.user = u->id;
	memcpy(cap.pool.b, p->uuid.data, 16);
	if (c)
		memcpy(cap.cont.b, c->uuid.data, 16);
	*expires = cap.expires_ms;
	return auth_cap_sign(&m->kr, &cap, out);
}

static int cap_error(int rc, char *msg, size_t msg_cap)
{
	switch (rc) {
	case -LODE_ECAPMISSING:
		return fail(
			msg, msg_cap, RPC_UNAUTHENTICATED,
			"no capability: call Connect and send it as metadata " RPC_CAP_METADATA);
	case -LODE_ECAPFORGED:
		return fail(msg, msg_cap, RPC_UNAUTHENTICATED, "capability forged or malformed");
	case -LODE_ECAPEXPIRED:
		return fail(msg, msg_cap, RPC_UNAUTHENTICATED, "capability expired: renew it");
	case -LODE_ECAPREVOKED:
		return fail(msg, msg_cap, RPC_UNAUTHENTICATED, "capability revoked");
	default:
		return fail(msg, msg_cap, RPC_INTERNAL, "checking the capability: %s",
			    lode_strerror(rc));
	}
}

/* The user a verified token names, if it still exists and is not revoked. */
static int cap_user(struct mgmt *m, const struct auth_cap *cap, ms_user **u, char *msg,
		    size_t msg_cap)
{
	*u = ms_user_by_id(m->st.s, cap->user);
	if (!*u || (*u)->tenant != cap->tenant)
		return fail(msg, msg_cap, RPC_UNAUTHENTICATED,
			    "the capability's user no longer exists");
	if ((*u)->revoked)
		return fail(msg, msg_cap, RPC_UNAUTHENTICATED, "the capability's user is revoked");
	return RPC_OK;
}

/* The caller as its capability says; any_scope lets a container-scoped
 * token through (PoolMapGet: what every client may read). */
static int caller_get(struct mgmt *m, const struct rpc_call_info *ci, bool any_scope,
		      struct caller *who, char *msg, size_t msg_cap)
{
	static const uint8_t zero[16];
	int rc, st;

	rc = auth_cap_verify(&m->kr, &m->rv, ci->cap, ci->cap ? ci->cap_len : 0, mgmt_now_ms(m),
			     &who->cap);
	if (rc)
		return cap_error(rc, msg, msg_cap);
	/* Management calls act as the user; a token narrowed to one container
	 * (handed to a program to do I/O there) must not do more than that. */
	if (!any_scope && memcmp(who->cap.cont.b, zero, 16) != 0)
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED,
			    "a container capability cannot make management calls: use the one from "
			    "Connect");
	st = cap_user(m, &who->cap, &who->u, msg, msg_cap);
	if (st)
		return st;
	who->t = ms_tenant_by_id(m->st.s, who->u->tenant);
	if (!who->t)
		return fail(msg, msg_cap, RPC_UNAUTHENTICATED, "the capability's tenant is gone");
	who->sys = ms_user_sysadmin(m->st.s, who->u);
	return RPC_OK;
}

/* Change user's line in the live revocation table (the model changes apart). */
static int live_revoke(struct mgmt *m, uint32_t user, int64_t before_ms)
{
	return auth_revoked_set(&m->rv, user, before_ms);
}

/* What the model says the live table holds for user (to undo a live change). */
static int64_t revoked_before(const struct mgmt *m, uint32_t user)
{
	const ms_revocation *r = ms_revocation_find(m->st.s, user);

	return r ? r->before_unix_ms : 0;
}

/* ---- sessions ------------------------------------------------------------------------- */

static int op_connect(struct mgmt *m, const struct caller *unused, const void *in,
		      ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const Lode__Mgmt__V1__ConnectRequest *req = in;
	static const char *wrong = "wrong user name or secret";
	ms_state *s = m->st.s;
	ms_tenant *system = ms_tenant_find(s, MS_SYSTEM_TENANT);
	Lode__Mgmt__V1__ConnectReply *r;
	uint8_t tok[AUTH_CAP_SIZE];
	ms_user *u = NULL, *eff;
	ms_pool *p;
	struct rb b = {0};
	uint64_t client, cap_sum, used_sum;
	int64_t expires;
	int st, rc;

	if (req->secret.len > AUTH_SECRET_MAX)
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT, "secret longer than %d bytes",
			    AUTH_SECRET_MAX);
	st = user_resolve(s, req->user, system, &u, msg, msg_cap);
	if (st == RPC_INVALID_ARGUMENT)
		return st;
	/* An unknown user costs a hash check like a known one, and reads the
	 * same: the reply tells nothing about which names exist. */
	rc = auth_secret_check(req->secret.data, req->secret.len,
			       u ? u->secret_hash : m->decoy_hash);
	if (!u || rc == -LODE_EAUTH)
		return fail(msg, msg_cap, RPC_UNAUTHENTICATED, "%s", wrong);
	if (rc)
		return fail(msg, msg_cap, RPC_INTERNAL, "the stored secret of %s does not parse",
			    u->name);
	if (u->revoked)
		return fail(msg, msg_cap, RPC_UNAUTHENTICATED, "user %s is revoked", req->user);
	eff = u;
	if (req->on_behalf_of[0]) {
		if (!u->node)
			return fail(msg, msg_cap, RPC_PERMISSION_DENIED,
				    "only a node user may connect on behalf of another");
		st = user_resolve(s, req->on_behalf_of, ms_tenant_by_id(s, u->tenant), &eff, msg,
				  msg_cap);
		if (st)
			return st;
		if (eff->revoked)
			return fail(msg, msg_cap, RPC_UNAUTHENTICATED, "user %s is revoked",
				    req->on_behalf_of);
	}
	p = pool_get(s, req->pool);
	if (!p)
		return fail(msg, msg_cap, RPC_NOT_FOUND, "no pool %s",
			    req->pool[0] ? req->pool : MS_DEFAULT_POOL);
	/* Rights on the pool may be none: a user granted only a container of
	 * the pool still connects to it, then opens that container. */
	if (auth_random(&client, sizeof(client)))
		return fail(msg, msg_cap, RPC_INTERNAL, "no randomness");
	rc = cap_issue(m, eff, p, NULL, ms_rights(s, eff, p, NULL), client, tok, &expires);
	if (rc)
		return fail(msg, msg_cap, RPC_INTERNAL, "signing: %s", lode_strerror(rc));

	r = rb_msg(&b, &lode__mgmt__v1__connect_reply__descriptor);
	if (r) {
		rb_bytes(&b, &r->capability, tok, sizeof(tok));
		r->expires_unix_ms = expires;
		rb_bytes(&b, &r->pool_uuid, p->uuid.data, 16);
		r->map = map_msg(&b, m, &cap_sum, &used_sum);
		r->tenant = rb_str(&b, ms_tenant_by_id(s, eff->tenant)->name);
		r->user = rb_str(&b, eff->name);
		r->pool_targets = rb_array(&b, p->n_targets, sizeof(uint32_t));
		if (r->pool_targets) {
			memcpy(r->pool_targets, p->targets, p->n_targets * sizeof(uint32_t));
			r->n_pool_targets = p->n_targets;
		}
		r->mgmt_replicas = rb_array(&b, m->nreplicas, sizeof(char *));
		for (unsigned i = 0; r->mgmt_replicas && i < m->nreplicas; i++) {
			/* Not rb_str: a repeated string's elements are all freed. */
			char *a = strdup(m->replicas[i].grpc);

			if (!a) {
				b.oom = true;
				break;
			}
			r->mgmt_replicas[r->n_mgmt_replicas++] = a;
		}
	}
	OPENSSL_cleanse(tok, sizeof(tok));
	return rb_done(&b, r, reply, msg, msg_cap);
}

static int op_renew(struct mgmt *m, const struct caller *unused, const void *in,
		    ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const Lode__Mgmt__V1__RenewRequest *req = in;
	Lode__Mgmt__V1__RenewReply *r;
	uint8_t tok[AUTH_CAP_SIZE];
	struct auth_cap cap;
	struct rb b = {0};
	ms_user *u;
	ms_pool *p;
	ms_cont *c = NULL;
	int64_t expires;
	int rc, st;
	static const uint8_t zero[16];

	rc = auth_cap_verify(&m->kr, &m->rv, req->capability.data, req->capability.len,
			     mgmt_now_ms(m), &cap);
	if (rc)
		return cap_error(rc, msg, msg_cap);
	st = cap_user(m, &cap, &u, msg, msg_cap);
	if (st)
		return st;
	p = ms_pool_by_uuid(m->st.s, cap.pool.b);
	if (!p)
		return fail(msg, msg_cap, RPC_NOT_FOUND, "the capability's pool no longer exists");
	if (memcmp(cap.cont.b, zero, 16) != 0) {
		c = ms_cont_by_uuid(m->st.s, cap.cont.b);
		if (!c)
			return fail(msg, msg_cap, RPC_NOT_FOUND,
				    "the capability's container no longer exists");
	}
	/* The same claims, except rights an ACL change took away meanwhile:
	 * renewing must not keep alive what the state no longer grants. */
	rc = cap_issue(m, u, p, c, cap.rights & ms_rights(m->st.s, u, p, c), cap.client, tok,
		       &expires);
	if (rc)
		return fail(msg, msg_cap, RPC_INTERNAL, "signing: %s", lode_strerror(rc));
	r = rb_msg(&b, &lode__mgmt__v1__renew_reply__descriptor);
	if (r) {
		rb_bytes(&b, &r->capability, tok, sizeof(tok));
		r->expires_unix_ms = expires;
	}
	OPENSSL_cleanse(tok, sizeof(tok));
	return rb_done(&b, r, reply, msg, msg_cap);
}

/* ---- pools ---------------------------------------------------------------------------- */

/* Does who see pool p: rights on it or on one of its containers. */
static bool pool_visible(const ms_state *s, const struct caller *who, const ms_pool *p)
{
	if (who->sys || ms_rights(s, who->u, p, NULL))
		return true;
	for (size_t i = 0; i < s->n_containers; i++)
		if (strcmp(s->containers[i]->pool, p->label) == 0 &&
		    ms_rights(s, who->u, p, s->containers[i]))
			return true;
	return false;
}

static int op_pool_create(struct mgmt *m, const struct caller *who, const void *in,
			  ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const Lode__Mgmt__V1__PoolCreateRequest *req = in;
	ms_state *s = m->st.s;
	struct mgmt_target_info *ti;
	uint32_t *targets = NULL;
	size_t ntargets = 0;
	uint64_t capacity = 0;
	uint8_t uuid[16];
	struct rb b = {0};
	unsigned n;
	ms_pool *p;
	bool live;
	int st = RPC_OK, rc;

	if (!who->sys)
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED,
			    "creating a pool needs a system administrator");
	if (!ms_name_valid(req->label))
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT, "bad pool label \"%.*s\"",
			    MS_NAME_MAX + 1, req->label);
	if (ms_pool_find(s, req->label))
		return fail(msg, msg_cap, RPC_ALREADY_EXISTS, "pool %s exists", req->label);
	ti = calloc(MGMT_TARGETS_MAX, sizeof(*ti));
	targets = calloc(MGMT_TARGETS_MAX, sizeof(*targets));
	if (!ti || !targets) {
		st = fail(msg, msg_cap, RPC_INTERNAL, "out of memory");
		goto out;
	}
	n = mgmt_targets_get(m, ti, MGMT_TARGETS_MAX, &live);
	if (req->n_targets == 0) {
		for (unsigned i = 0; i < n; i++) {
			targets[ntargets++] = ti[i].id;
			capacity += ti[i].capacity;
		}
	}
	for (size_t i = 0; i < req->n_targets; i++) {
		unsigned j;

		for (j = 0; j < n && ti[j].id != req->targets[i]; j++)
			;
		if (j == n) {
			st = fail(msg, msg_cap, RPC_INVALID_ARGUMENT, "no target %u (there are %u)",
				  req->targets[i], n);
			goto out;
		}
		for (size_t k = 0; k < ntargets; k++)
			if (targets[k] == req->targets[i]) {
				st = fail(msg, msg_cap, RPC_INVALID_ARGUMENT,
					  "target %u named twice", req->targets[i]);
				goto out;
			}
		if (ntargets == MGMT_TARGETS_MAX)
			break;
		targets[ntargets++] = req->targets[i];
		capacity += ti[j].capacity;
	}
	if (ntargets == 0) {
		st = fail(msg, msg_cap, RPC_FAILED_PRECONDITION, "there are no targets");
		goto out;
	}
	/* Capacity 0: the host does not know it (RAM targets, or not started). */
	if (capacity > 0 && req->size > capacity) {
		st = fail(msg, msg_cap, RPC_RESOURCE_EXHAUSTED,
			  "size %llu is over the targets' capacity %llu",
			  (unsigned long long)req->size, (unsigned long long)capacity);
		goto out;
	}
	if (ms_uuid_fresh(s, uuid)) {
		st = fail(msg, msg_cap, RPC_INTERNAL, "no randomness");
		goto out;
	}
	p = ms_pool_add(s, req->label, uuid, req->size, targets, ntargets, mgmt_now_ms(m));
	if (!p) {
		st = fail(msg, msg_cap, RPC_INTERNAL, "out of memory");
		goto out;
	}
	rc = mgmt_state_commit(&m->st);
	if (rc) {
		st = fail_commit(msg, msg_cap, rc);
		goto out;
	}
	st = rb_done(&b, pool_msg(&b, m->st.s, p), reply, msg, msg_cap);
out:
	free(ti);
	free(targets);
	return st;
}

static int op_pool_list(struct mgmt *m, const struct caller *who, const void *in,
			ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const ms_state *s = m->st.s;
	Lode__Mgmt__V1__PoolList *r;
	struct rb b = {0};

	r = rb_msg(&b, &lode__mgmt__v1__pool_list__descriptor);
	if (r)
		r->pools = rb_array(&b, s->n_pools, sizeof(*r->pools));
	for (size_t i = 0; r && r->pools && i < s->n_pools; i++) {
		if (!pool_visible(s, who, s->pools[i]))
			continue;
		Lode__Mgmt__V1__PoolInfo *pi = pool_msg(&b, s, s->pools[i]);

		if (pi)
			r->pools[r->n_pools++] = pi;
	}
	return rb_done(&b, r, reply, msg, msg_cap);
}

static int op_pool_query(struct mgmt *m, const struct caller *who, const void *in,
			 ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const Lode__Mgmt__V1__PoolRef *req = in;
	const ms_pool *p = pool_get(m->st.s, req->label);
	Lode__Mgmt__V1__PoolInfo *r;
	uint64_t capacity, used;
	struct rb b = {0};

	if (!p)
		return fail(msg, msg_cap, RPC_NOT_FOUND, "no pool %s", req->label);
	if (!pool_visible(m->st.s, who, p))
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED, "no rights on pool %s", p->label);
	r = pool_msg(&b, m->st.s, p);
	if (r) {
		r->map = map_msg(&b, m, &capacity, &used);
		r->rebuild = rebuild_msg(&b, m);
	}
	return rb_done(&b, r, reply, msg, msg_cap);
}

static int op_pool_destroy(struct mgmt *m, const struct caller *who, const void *in,
			   ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const Lode__Mgmt__V1__PoolDestroyRequest *req = in;
	ms_pool *p = ms_pool_find(m->st.s, req->label);
	unsigned nc;
	struct rb b = {0};
	int rc;

	if (!p)
		return fail(msg, msg_cap, RPC_NOT_FOUND, "no pool %s", req->label);
	if (!(ms_rights(m->st.s, who->u, p, NULL) & AUTH_R_ADMIN))
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED,
			    "destroying pool %s needs admin rights on it", p->label);
	nc = ms_pool_containers(m->st.s, p);
	if (nc && !req->force)
		return fail(msg, msg_cap, RPC_FAILED_PRECONDITION,
			    "pool %s has %u container(s): destroy them or force", p->label, nc);
	ms_pool_remove(m->st.s, p);
	rc = mgmt_state_commit(&m->st);
	if (rc)
		return fail_commit(msg, msg_cap, rc);
	return rb_done(&b, rb_msg(&b, &lode__mgmt__v1__empty__descriptor), reply, msg, msg_cap);
}

/* ---- containers ----------------------------------------------------------------------- */

/* Check props and fill in the defaults. */
static int props_check(const Lode__Mgmt__V1__ContProps *in, const char **oclass, uint32_t *chunk,
		       const char **csum, uint32_t *cblock, char *msg, size_t msg_cap)
{
	const char *oc = in && in->object_class ? in->object_class : "";
	const char *cs = in && in->checksum ? in->checksum : "";
	uint32_t ch = in ? in->chunk_size : 0, cb = in ? in->crypt_block : 0;
	struct layout_class lc;

	/* Any class layout knows; sealed arrays are not erasure-coded yet. */
	if (oc[0] && layout_class_parse(oc, &lc) < 0)
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT,
			    "object class \"%.16s\": S1..S128, SX, RP_2, RP_3, EC_2P1, EC_4P2 or "
			    "EC_8P2", oc);
	if (oc[0] && lc.redun == LAYOUT_R_EC && in && in->encryption)
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT,
			    "object class %.16s with encryption: encrypted containers are not "
			    "erasure-coded yet", oc);
	if (ch && (ch < 4096 || ch > (64u << 20) || (ch & (ch - 1))))
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT,
			    "chunk size %u: a power of two from 4 KiB to 64 MiB", ch);
	if (cs[0] && strcmp(cs, "crc32c") && strcmp(cs, "none"))
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT,
			    "checksum \"%.16s\": crc32c or none", cs);
	if (cb && !in->encryption)
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT,
			    "a crypt block size needs encryption");
	if (cb && (cb < 4096 || cb > (1u << 20) || (cb & (cb - 1))))
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT,
			    "crypt block size %u: a power of two from 4 KiB to 1 MiB", cb);
	*oclass = oc[0] ? oc : "SX";
	*chunk = ch ? ch : 1u << 20;
	*csum = cs[0] ? cs : "crc32c";
	*cblock = in && in->encryption ? (cb ? cb : 4096) : 0;
	return RPC_OK;
}

static int op_cont_create(struct mgmt *m, const struct caller *who, const void *in,
			  ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const Lode__Mgmt__V1__ContCreateRequest *req = in;
	ms_state *s = m->st.s;
	ms_pool *p = pool_get(s, req->pool);
	char res[QNAME_MAX], owner[MS_NAME_MAX + 8];
	const char *oclass = NULL, *csum = NULL;
	uint8_t uuid[16];
	uint32_t chunk = 0, cblock = 0;
	struct rb b = {0};
	ms_cont *c;
	int st, rc;

	if (!p)
		return fail(msg, msg_cap, RPC_NOT_FOUND, "no pool %s", req->pool);
	if (!(ms_rights(s, who->u, p, NULL) & AUTH_R_WRITE))
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED,
			    "creating a container needs write rights on pool %s", p->label);
	if (!ms_name_valid(req->label))
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT, "bad container label \"%.*s\"",
			    MS_NAME_MAX + 1, req->label);
	if (ms_cont_find(s, p->label, req->label))
		return fail(msg, msg_cap, RPC_ALREADY_EXISTS, "container %s/%s exists", p->label,
			    req->label);
	st = props_check(req->props, &oclass, &chunk, &csum, &cblock, msg, msg_cap);
	if (st)
		return st;
	/* The data key is the client's: made there and wrapped by its tenant
	 * key, which never comes here. The service keeps the wrapped form
	 * opaque and hands it to whoever opens the container. */
	if (req->props && req->props->encryption && req->wrapped_key.len != AUTH_WRAPPED_SIZE)
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT,
			    "an encrypted container needs its wrapped data key (%d bytes, got %zu)",
			    AUTH_WRAPPED_SIZE, req->wrapped_key.len);
	if (ms_uuid_fresh(s, uuid))
		return fail(msg, msg_cap, RPC_INTERNAL, "no randomness");
	c = ms_cont_add(s, p->label, req->label, uuid, who->t->id, mgmt_now_ms(m));
	if (!c)
		return fail(msg, msg_cap, RPC_INTERNAL, "out of memory");
	c->creator = who->u->id;
	c->chunk_size = chunk;
	c->encryption = req->props && req->props->encryption;
	c->crypt_block = cblock;
	rc = ms_str_set(&c->object_class, oclass) ?: ms_str_set(&c->checksum, csum);
	if (!rc && c->encryption)
		rc = ms_bytes_set(&c->wrapped_key, req->wrapped_key.data, req->wrapped_key.len);
	ms_resource_name(p, c, res, sizeof(res));
	snprintf(owner, sizeof(owner), "tenant:%s", who->t->name);
	if (!rc)
		rc = ms_acl_set(s, res, owner, MS_RIGHTS_ALL);
	if (!rc)
		rc = mgmt_state_commit(&m->st);
	else
		ms_cont_remove(s, c); /* nothing was written yet */
	if (rc)
		return fail_commit(msg, msg_cap, rc);
	return rb_done(&b, cont_msg(&b, m->st.s, c, false), reply, msg, msg_cap);
}

static int op_cont_list(struct mgmt *m, const struct caller *who, const void *in,
			ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const Lode__Mgmt__V1__PoolRef *req = in;
	const ms_state *s = m->st.s;
	const ms_pool *p = pool_get(s, req->label);
	Lode__Mgmt__V1__ContList *r;
	struct rb b = {0};

	if (!p)
		return fail(msg, msg_cap, RPC_NOT_FOUND, "no pool %s", req->label);
	if (!(ms_rights(s, who->u, p, NULL) & AUTH_R_READ))
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED,
			    "listing containers needs read rights on pool %s", p->label);
	r = rb_msg(&b, &lode__mgmt__v1__cont_list__descriptor);
	if (r)
		r->containers = rb_array(&b, s->n_containers, sizeof(*r->containers));
	for (size_t i = 0; r && r->containers && i < s->n_containers; i++) {
		const ms_cont *c = s->containers[i];

		if (strcmp(c->pool, p->label) != 0 || !ms_rights(s, who->u, p, c))
			continue;
		Lode__Mgmt__V1__ContInfo *ci = cont_msg(&b, s, c, false);

		if (ci)
			r->containers[r->n_containers++] = ci;
	}
	return rb_done(&b, r, reply, msg, msg_cap);
}

static int op_cont_query(struct mgmt *m, const struct caller *who, const void *in,
			 ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	ms_pool *p;
	ms_cont *c;
	struct rb b = {0};
	int st = cont_resolve(m->st.s, in, &p, &c, msg, msg_cap);

	if (st)
		return st;
	if (!ms_rights(m->st.s, who->u, p, c))
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED, "no rights on container %s/%s",
			    p->label, c->label);
	return rb_done(&b, cont_msg(&b, m->st.s, c, false), reply, msg, msg_cap);
}

static int op_cont_destroy(struct mgmt *m, const struct caller *who, const void *in,
			   ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	Lode__Mgmt__V1__ContInfo *info;
	ms_pool *p;
	ms_cont *c;
	struct rb b = {0};
	int rc, st = cont_resolve(m->st.s, in, &p, &c, msg, msg_cap);

	if (st)
		return st;
	if (!(ms_rights(m->st.s, who->u, p, c) & AUTH_R_ADMIN) &&
	    !(ms_rights(m->st.s, who->u, p, NULL) & AUTH_R_ADMIN))
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED,
			    "destroying container %s/%s needs admin rights on it", p->label,
			    c->label);
	/* The reply describes what is about to go. */
	info = cont_msg(&b, m->st.s, c, false);
	st = rb_done(&b, info, reply, msg, msg_cap);
	if (st)
		return st;
	ms_cont_remove(m->st.s, c);
	rc = mgmt_state_commit(&m->st);
	if (rc) {
		protobuf_c_message_free_unpacked(*reply, NULL);
		*reply = NULL;
		return fail_commit(msg, msg_cap, rc);
	}
	return RPC_OK;
}

static int op_cont_open(struct mgmt *m, const struct caller *who, const void *in,
			ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	Lode__Mgmt__V1__OpenContainerReply *r;
	uint8_t tok[AUTH_CAP_SIZE];
	unsigned rights;
	int64_t expires;
	ms_pool *p;
	ms_cont *c;
	struct rb b = {0};
	int rc, st = cont_resolve(m->st.s, in, &p, &c, msg, msg_cap);

	if (st)
		return st;
	rights = ms_rights(m->st.s, who->u, p, c);
	if (!rights)
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED, "no rights on container %s/%s",
			    p->label, c->label);
	/* The same session (client id) as the token presented. */
	rc = cap_issue(m, who->u, p, c, rights, who->cap.client, tok, &expires);
	if (rc)
		return fail(msg, msg_cap, RPC_INTERNAL, "signing: %s", lode_strerror(rc));
	r = rb_msg(&b, &lode__mgmt__v1__open_container_reply__descriptor);
	if (r) {
		r->info = cont_msg(&b, m->st.s, c, true);
		rb_bytes(&b, &r->capability, tok, sizeof(tok));
		r->expires_unix_ms = expires;
		r->rights = rights;
	}
	OPENSSL_cleanse(tok, sizeof(tok));
	return rb_done(&b, r, reply, msg, msg_cap);
}

/* ---- tenants ---------------------------------------------------------------------------- */

static int op_tenant_create(struct mgmt *m, const struct caller *who, const void *in,
			    ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const Lode__Mgmt__V1__NameRef *req = in;
	ms_tenant *t;
	struct rb b = {0};
	int rc;

	if (!who->sys)
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED,
			    "creating a tenant needs a system administrator");
	if (!ms_name_valid(req->name))
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT, "bad tenant name \"%.*s\"",
			    MS_NAME_MAX + 1, req->name);
	if (ms_tenant_find(m->st.s, req->name))
		return fail(msg, msg_cap, RPC_ALREADY_EXISTS, "tenant %s exists", req->name);
	t = ms_tenant_add(m->st.s, req->name, mgmt_now_ms(m));
	if (!t)
		return fail(msg, msg_cap, RPC_INTERNAL, "out of memory");
	rc = mgmt_state_commit(&m->st);
	if (rc)
		return fail_commit(msg, msg_cap, rc);
	return rb_done(&b, tenant_msg(&b, t), reply, msg, msg_cap);
}

static int op_tenant_list(struct mgmt *m, const struct caller *who, const void *in,
			  ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const ms_state *s = m->st.s;
	Lode__Mgmt__V1__TenantList *r;
	struct rb b = {0};

	r = rb_msg(&b, &lode__mgmt__v1__tenant_list__descriptor);
	if (r)
		r->tenants = rb_array(&b, s->n_tenants, sizeof(*r->tenants));
	for (size_t i = 0; r && r->tenants && i < s->n_tenants; i++) {
		/* Others see only their own. */
		if (!who->sys && s->tenants[i] != who->t)
			continue;
		Lode__Mgmt__V1__Tenant *t = tenant_msg(&b, s->tenants[i]);

		if (t)
			r->tenants[r->n_tenants++] = t;
	}
	return rb_done(&b, r, reply, msg, msg_cap);
}

static int op_tenant_destroy(struct mgmt *m, const struct caller *who, const void *in,
			     ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const Lode__Mgmt__V1__NameRef *req = in;
	ms_state *s = m->st.s;
	ms_tenant *t = ms_tenant_find(s, req->name);
	struct {
		uint32_t user;
		int64_t before;
	} *undo = NULL;
	size_t nundo = 0;
	int64_t now = mgmt_now_ms(m);
	struct rb b = {0};
	int rc = 0;

	if (!who->sys)
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED,
			    "destroying a tenant needs a system administrator");
	if (!t)
		return fail(msg, msg_cap, RPC_NOT_FOUND, "no tenant %s", req->name);
	if (strcmp(t->name, MS_SYSTEM_TENANT) == 0)
		return fail(msg, msg_cap, RPC_FAILED_PRECONDITION, "tenant system cannot go");
	for (size_t i = 0; i < s->n_containers; i++)
		if (s->containers[i]->tenant == t->id)
			return fail(msg, msg_cap, RPC_FAILED_PRECONDITION,
				    "tenant %s owns containers (%s/%s, ...): destroy them first",
				    t->name, s->containers[i]->pool, s->containers[i]->label);
	/* Its users go; their capabilities must stop working now, on the
	 * targets too: revoke them (the entries outlive the users). */
	undo = calloc(s->n_users ? s->n_users : 1, sizeof(*undo));
	if (!undo)
		return fail(msg, msg_cap, RPC_INTERNAL, "out of memory");
	for (size_t i = 0; !rc && i < s->n_users; i++) {
		if (s->users[i]->tenant != t->id)
			continue;
		undo[nundo].user = s->users[i]->id;
		undo[nundo].before = revoked_before(m, s->users[i]->id);
		rc = live_revoke(m, s->users[i]->id, now);
		if (!rc) {
			nundo++;
			rc = ms_revocation_set(s, s->users[i]->id, now);
		}
	}
	if (rc) {
		/* Out of memory half way: nothing was written yet. */
		mgmt_state_rollback(&m->st);
	} else {
		ms_tenant_remove(s, t);
		rc = mgmt_state_commit(&m->st);
	}
	if (rc) {
		for (size_t i = 0; i < nundo; i++)
			live_revoke(m, undo[i].user, undo[i].before);
		free(undo);
		return fail_commit(msg, msg_cap, rc);
	}
	free(undo);
	return rb_done(&b, rb_msg(&b, &lode__mgmt__v1__empty__descriptor), reply, msg, msg_cap);
}

/* ---- users ------------------------------------------------------------------------------ */

static int secret_check_len(const ProtobufCBinaryData *sec, char *msg, size_t msg_cap)
{
	if (sec->len == 0 || sec->len > AUTH_SECRET_MAX)
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT, "a secret is 1 to %d bytes",
			    AUTH_SECRET_MAX);
	return RPC_OK;
}

static int op_user_create(struct mgmt *m, const struct caller *who, const void *in,
			  ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const Lode__Mgmt__V1__UserCreateRequest *req = in;
	char hash[AUTH_HASH_TEXT];
	ms_tenant *t;
	ms_user *u;
	struct rb b = {0};
	int st, rc;

	st = tenant_resolve(m->st.s, who, req->tenant, &t, msg, msg_cap);
	if (st)
		return st;
	if (!ms_user_tenant_admin(m->st.s, who->u, t->id))
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED,
			    "creating users of tenant %s needs its administrator", t->name);
	if (req->node && !who->sys)
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED,
			    "creating a node user needs a system administrator");
	if (!ms_name_valid(req->name))
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT, "bad user name \"%.*s\"",
			    MS_NAME_MAX + 1, req->name);
	if (ms_user_find(m->st.s, t->id, req->name))
		return fail(msg, msg_cap, RPC_ALREADY_EXISTS, "user %s/%s exists", t->name,
			    req->name);
	st = secret_check_len(&req->secret, msg, msg_cap);
	if (st)
		return st;
	rc = auth_secret_hash(req->secret.data, req->secret.len, hash, sizeof(hash));
	if (rc)
		return fail(msg, msg_cap, RPC_INTERNAL, "hashing the secret: %s",
			    lode_strerror(rc));
	u = ms_user_add(m->st.s, t->id, req->name, hash, mgmt_now_ms(m));
	if (!u)
		return fail(msg, msg_cap, RPC_INTERNAL, "out of memory");
	u->admin = req->admin;
	u->node = req->node;
	rc = mgmt_state_commit(&m->st);
	if (rc)
		return fail_commit(msg, msg_cap, rc);
	return rb_done(&b, user_msg(&b, m->st.s, u), reply, msg, msg_cap);
}

static int op_user_list(struct mgmt *m, const struct caller *who, const void *in,
			ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const Lode__Mgmt__V1__NameRef *req = in;
	const ms_state *s = m->st.s;
	Lode__Mgmt__V1__UserList *r;
	ms_tenant *t;
	struct rb b = {0};
	int st = tenant_resolve(s, who, req->name, &t, msg, msg_cap);

	if (st)
		return st;
	if (!ms_user_tenant_admin(s, who->u, t->id))
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED,
			    "listing users of tenant %s needs its administrator", t->name);
	r = rb_msg(&b, &lode__mgmt__v1__user_list__descriptor);
	if (r)
		r->users = rb_array(&b, s->n_users, sizeof(*r->users));
	for (size_t i = 0; r && r->users && i < s->n_users; i++) {
		if (s->users[i]->tenant != t->id)
			continue;
		Lode__Mgmt__V1__User *u = user_msg(&b, s, s->users[i]);

		if (u)
			r->users[r->n_users++] = u;
	}
	return rb_done(&b, r, reply, msg, msg_cap);
}

/* UserRevoke (revoke) and UserRestore. */
static int user_revocation(struct mgmt *m, const struct caller *who, const void *in,
			   ProtobufCMessage **reply, char *msg, size_t msg_cap, bool revoke)
{
	const Lode__Mgmt__V1__NameRef *req = in;
	int64_t now = mgmt_now_ms(m), old;
	struct rb b = {0};
	ms_user *u;
	uint32_t id;
	int st, rc;

	st = user_resolve(m->st.s, req->name, who->t, &u, msg, msg_cap);
	if (st)
		return st;
	if (!ms_user_tenant_admin(m->st.s, who->u, u->tenant))
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED,
			    "revoking or restoring %s needs its tenant's administrator", u->name);
	if (u == who->u)
		return fail(msg, msg_cap, RPC_FAILED_PRECONDITION, "a user cannot %s itself",
			    revoke ? "revoke" : "restore");
	if (u->revoked == revoke) /* already so */
		return rb_done(&b, user_msg(&b, m->st.s, u), reply, msg, msg_cap);
	/*
	 * Revoking refuses every token issued until now. Restoring keeps
	 * refusing them, and moves the line to now: whatever was issued
	 * before the restore stays dead, only new Connects count.
	 */
	id = u->id;
	old = revoked_before(m, id);
	rc = live_revoke(m, id, now);
	if (rc)
		return fail(msg, msg_cap, RPC_INTERNAL, "out of memory");
	u->revoked = revoke;
	rc = ms_revocation_set(m->st.s, id, now);
	if (!rc)
		rc = mgmt_state_commit(&m->st);
	else
		u->revoked = !revoke;
	if (rc) {
		live_revoke(m, id, old);
		return rc == -ENOMEM ? fail(msg, msg_cap, RPC_INTERNAL, "out of memory")
				     : fail_commit(msg, msg_cap, rc);
	}
	return rb_done(&b, user_msg(&b, m->st.s, u), reply, msg, msg_cap);
}

static int op_user_revoke(struct mgmt *m, const struct caller *who, const void *in,
			  ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	return user_revocation(m, who, in, reply, msg, msg_cap, true);
}

static int op_user_restore(struct mgmt *m, const struct caller *who, const void *in,
			   ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	return user_revocation(m, who, in, reply, msg, msg_cap, false);
}

static int op_user_secret(struct mgmt *m, const struct caller *who, const void *in,
			  ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const Lode__Mgmt__V1__UserSecretRequest *req = in;
	char hash[AUTH_HASH_TEXT];
	struct rb b = {0};
	ms_user *u;
	int st, rc;

	st = user_resolve(m->st.s, req->name, who->t, &u, msg, msg_cap);
	if (st)
		return st;
	if (u != who->u && !ms_user_tenant_admin(m->st.s, who->u, u->tenant))
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED,
			    "setting %s's secret needs that user or its tenant's administrator",
			    u->name);
	st = secret_check_len(&req->secret, msg, msg_cap);
	if (st)
		return st;
	rc = auth_secret_hash(req->secret.data, req->secret.len, hash, sizeof(hash));
	if (rc)
		return fail(msg, msg_cap, RPC_INTERNAL, "hashing the secret: %s",
			    lode_strerror(rc));
	if (ms_str_set(&u->secret_hash, hash))
		return fail(msg, msg_cap, RPC_INTERNAL, "out of memory");
	rc = mgmt_state_commit(&m->st);
	if (rc)
		return fail_commit(msg, msg_cap, rc);
	return rb_done(&b, rb_msg(&b, &lode__mgmt__v1__empty__descriptor), reply, msg, msg_cap);
}

/* ---- groups ------------------------------------------------------------------------------- */

static int op_group_create(struct mgmt *m, const struct caller *who, const void *in,
			   ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const Lode__Mgmt__V1__GroupCreateRequest *req = in;
	ms_tenant *t;
	ms_group *g;
	struct rb b = {0};
	int st, rc;

	st = tenant_resolve(m->st.s, who, req->tenant, &t, msg, msg_cap);
	if (st)
		return st;
	if (!ms_user_tenant_admin(m->st.s, who->u, t->id))
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED,
			    "creating groups of tenant %s needs its administrator", t->name);
	if (!ms_name_valid(req->name))
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT, "bad group name \"%.*s\"",
			    MS_NAME_MAX + 1, req->name);
	if (ms_group_find(m->st.s, t->id, req->name))
		return fail(msg, msg_cap, RPC_ALREADY_EXISTS, "group %s/%s exists", t->name,
			    req->name);
	g = ms_group_add(m->st.s, t->id, req->name);
	if (!g)
		return fail(msg, msg_cap, RPC_INTERNAL, "out of memory");
	rc = mgmt_state_commit(&m->st);
	if (rc)
		return fail_commit(msg, msg_cap, rc);
	return rb_done(&b, group_msg(&b, m->st.s, g), reply, msg, msg_cap);
}

/* GroupAddUser (add) and GroupRemoveUser. Members are users of the group's tenant. */
static int group_member(struct mgmt *m, const struct caller *who, const void *in,
			ProtobufCMessage **reply, char *msg, size_t msg_cap, bool add)
{
	const Lode__Mgmt__V1__GroupMemberRequest *req = in;
	ms_group *g;
	ms_user *u;
	struct rb b = {0};
	int st, rc;

	st = group_resolve(m->st.s, req->group, who->t, &g, msg, msg_cap);
	if (st)
		return st;
	if (!ms_user_tenant_admin(m->st.s, who->u, g->tenant))
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED,
			    "changing group %s needs its tenant's administrator", g->name);
	st = user_resolve(m->st.s, req->user, ms_tenant_by_id(m->st.s, g->tenant), &u, msg,
			  msg_cap);
	if (st)
		return st;
	if (u->tenant != g->tenant)
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT,
			    "group %s takes users of its own tenant only", g->name);
	if (add) {
		if (ms_group_member_add(g, u->id))
			return fail(msg, msg_cap, RPC_INTERNAL, "out of memory");
	} else {
		if (!ms_group_has(g, u->id))
			return fail(msg, msg_cap, RPC_NOT_FOUND, "%s is not in group %s", u->name,
				    g->name);
		ms_group_member_remove(g, u->id);
	}
	rc = mgmt_state_commit(&m->st);
	if (rc)
		return fail_commit(msg, msg_cap, rc);
	return rb_done(&b, group_msg(&b, m->st.s, g), reply, msg, msg_cap);
}

static int op_group_add(struct mgmt *m, const struct caller *who, const void *in,
			ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	return group_member(m, who, in, reply, msg, msg_cap, true);
}

static int op_group_remove(struct mgmt *m, const struct caller *who, const void *in,
			   ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	return group_member(m, who, in, reply, msg, msg_cap, false);
}

static int op_group_list(struct mgmt *m, const struct caller *who, const void *in,
			 ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const Lode__Mgmt__V1__NameRef *req = in;
	const ms_state *s = m->st.s;
	Lode__Mgmt__V1__GroupList *r;
	ms_tenant *t;
	struct rb b = {0};
	int st = tenant_resolve(s, who, req->name, &t, msg, msg_cap);

	if (st)
		return st;
	if (!ms_user_tenant_admin(s, who->u, t->id))
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED,
			    "listing groups of tenant %s needs its administrator", t->name);
	r = rb_msg(&b, &lode__mgmt__v1__group_list__descriptor);
	if (r)
		r->groups = rb_array(&b, s->n_groups, sizeof(*r->groups));
	for (size_t i = 0; r && r->groups && i < s->n_groups; i++) {
		if (s->groups[i]->tenant != t->id)
			continue;
		Lode__Mgmt__V1__Group *g = group_msg(&b, s, s->groups[i]);

		if (g)
			r->groups[r->n_groups++] = g;
	}
	return rb_done(&b, r, reply, msg, msg_cap);
}

/* ---- ACLs --------------------------------------------------------------------------------- */

static int op_acl_set(struct mgmt *m, const struct caller *who, const void *in,
		      ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const Lode__Mgmt__V1__AclEntry *req = in;
	char pr[QNAME_MAX + 8], res[QNAME_MAX];
	ms_pool *p;
	ms_cont *c;
	struct rb b = {0};
	int st, rc;

	st = resource_resolve(m->st.s, req->resource, &p, &c, msg, msg_cap);
	if (st)
		return st;
	if (!(ms_rights(m->st.s, who->u, p, c) & AUTH_R_ADMIN))
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED,
			    "changing the ACL of %s needs admin rights on it", req->resource);
	st = principal_resolve(m->st.s, who, req->principal, pr, sizeof(pr), msg, msg_cap);
	if (st)
		return st;
	if (req->rights & ~(uint32_t)MS_RIGHTS_ALL)
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT,
			    "rights %#x: READ 1, WRITE 2, ADMIN 4", req->rights);
	ms_resource_name(p, c, res, sizeof(res));
	if (ms_acl_set(m->st.s, res, pr, req->rights))
		return fail(msg, msg_cap, RPC_INTERNAL, "out of memory");
	rc = mgmt_state_commit(&m->st);
	if (rc)
		return fail_commit(msg, msg_cap, rc);
	return rb_done(&b, acl_msg(&b, res, pr, req->rights), reply, msg, msg_cap);
}

static int op_acl_get(struct mgmt *m, const struct caller *who, const void *in,
		      ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const Lode__Mgmt__V1__NameRef *req = in;
	const ms_state *s = m->st.s;
	char res[QNAME_MAX];
	Lode__Mgmt__V1__AclList *r;
	ms_pool *p;
	ms_cont *c;
	struct rb b = {0};
	int st = resource_resolve(s, req->name, &p, &c, msg, msg_cap);

	if (st)
		return st;
	if (!ms_rights(s, who->u, p, c))
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED, "no rights on %s", req->name);
	ms_resource_name(p, c, res, sizeof(res));
	r = rb_msg(&b, &lode__mgmt__v1__acl_list__descriptor);
	if (r)
		r->entries = rb_array(&b, s->n_acl, sizeof(*r->entries));
	for (size_t i = 0; r && r->entries && i < s->n_acl; i++) {
		if (strcmp(s->acl[i]->resource, res) != 0)
			continue;
		Lode__Mgmt__V1__AclEntry *e =
			acl_msg(&b, res, s->acl[i]->principal, s->acl[i]->rights);

		if (e)
			r->entries[r->n_entries++] = e;
	}
	return rb_done(&b, r, reply, msg, msg_cap);
}

/* ---- system ------------------------------------------------------------------------------- */

static int op_system_query(struct mgmt *m, const struct caller *who, const void *in,
			   ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const ms_state *s = m->st.s;
	Lode__Mgmt__V1__SystemStatus *r;
	struct rb b = {0};

	r = rb_msg(&b, &lode__mgmt__v1__system_status__descriptor);
	if (r) {
		r->map = map_msg(&b, m, &r->capacity, &r->used);
		r->pools = (uint32_t)s->n_pools;
		r->containers = (uint32_t)s->n_containers;
		r->version = rb_str(&b, LODE_VERSION);
		r->started_unix_ms = m->started_unix_ms;
		r->signing_key_id = s->n_keys ? s->keys[s->n_keys - 1]->id : 0;
	}
	return rb_done(&b, r, reply, msg, msg_cap);
}

static int op_rotate_key(struct mgmt *m, const struct caller *who, const void *in,
			 ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	Lode__Mgmt__V1__RotateKeyReply *r;
	struct rb b = {0};
	int id;

	if (!who->sys)
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED,
			    "rotating the signing key needs a system administrator");
	id = mgmt_key_rotate(m);
	if (id < 0)
		return fail(msg, msg_cap, RPC_INTERNAL, "the key was not rotated: %s",
			    lode_strerror(id));
	r = rb_msg(&b, &lode__mgmt__v1__rotate_key_reply__descriptor);
	if (r)
		r->key_id = (uint32_t)id;
	return rb_done(&b, r, reply, msg, msg_cap);
}

/* ---- the pool map ---------------------------------------------------------------------------- */

/* Engines join and heartbeat as a node user of tenant system (the
 * engine's own credentials) or as a system administrator. */
static int engine_caller_check(const ms_state *s, const struct caller *who, const char *what,
			       char *msg, size_t msg_cap)
{
	if (who->sys || (who->u->node && strcmp(who->t->name, MS_SYSTEM_TENANT) == 0))
		return RPC_OK;
	return fail(msg, msg_cap, RPC_PERMISSION_DENIED,
		    "%s needs a system administrator or a node user of tenant system", what);
}

/* "host:port": a host (a name, an address or [v6]) and a port 1..65535. */
static bool address_valid(const char *a)
{
	const char *colon = strrchr(a, ':');
	char *end;
	unsigned long port;

	if (!colon || colon == a || strlen(a) > 255)
		return false;
	if (a[0] == '[' && colon[-1] != ']')
		return false;
	for (const char *p = a; p < colon; p++)
		if (*p <= ' ' || *p > '~')
			return false;
	if (colon[1] < '0' || colon[1] > '9')
		return false;
	port = strtoul(colon + 1, &end, 10);
	return *end == '\0' && port >= 1 && port <= 65535;
}

#define ENGINE_TARGETS_MAX 64 /* what EngineJoin takes */

static int op_engine_join(struct mgmt *m, const struct caller *who, const void *in,
			  ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	static const uint8_t zero[16];
	const Lode__Mgmt__V1__EngineJoinRequest *req = in;
	ms_state *s = m->st.s;
	Lode__Mgmt__V1__EngineJoinReply *r;
	struct layout_map *map = NULL;
	uint64_t capacity, used;
	int64_t now = mgmt_now_ms(m), live = mgmt_live_ms(m);
	struct rb b = {0};
	bool changed = false;
	struct mgmt_engine_live *l;
	ms_engine *e;
	uint32_t id;
	uint64_t v0;
	int st, rc;

	st = engine_caller_check(s, who, "joining an engine", msg, msg_cap);
	if (st)
		return st;
	if (req->uuid.len != 16 || memcmp(req->uuid.data, zero, 16) == 0)
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT,
			    "an engine uuid is 16 bytes, not all zero (got %zu)", req->uuid.len);
	if (!address_valid(req->address))
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT, "bad address \"%.64s\": host:port",
			    req->address);
	if (req->ntargets < 1 || req->ntargets > ENGINE_TARGETS_MAX)
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT, "%u targets: an engine has 1 to %d",
			    req->ntargets, ENGINE_TARGETS_MAX);
	rc = mgmt_map_load(m, &map);
	if (rc)
		return fail(msg, msg_cap, RPC_INTERNAL, "the pool map: %s", lode_strerror(rc));
	v0 = map->version;
	e = ms_engine_by_uuid(s, req->uuid.data);
	if (e) {
		const struct layout_engine *le = layout_map_engine(map, e->id);

		/* A restarted engine: its id back, its state as it was. */
		if (e->ntargets != req->ntargets) {
			st = fail(msg, msg_cap, RPC_FAILED_PRECONDITION,
				  "engine %u joined with %u targets, not %u: an engine's targets "
				  "are fixed",
				  e->id, e->ntargets, req->ntargets);
			goto out;
		}
		if (strcmp(e->address, req->address) != 0) {
			if (ms_str_set(&e->address, req->address)) {
				st = fail(msg, msg_cap, RPC_INTERNAL, "out of memory");
				goto out;
			}
			changed = true;
		}
		if (le && le->state == LAYOUT_NEW && layout_map_integrates(map)) {
			/* Restarted while being filled: what was copied to it may
			 * be gone (RAM targets), and the copies the engines
			 * reported done for this map version would count without
			 * it. A new version has them copy again, once it has
			 * walked its targets again (docs/decisions/0014). Not
			 * while an engine is DOWN: that rebuild integrates
			 * nothing, and must not wait for this one. */
			s->settled_version = (uint32_t)v0 + 1;
			changed = true;
		}
	} else {
		/* Nothing to move while no container exists: straight into the
		 * layout, unless an engine already waits (NEW ones go last). */
		bool up = s->n_containers == 0 && layout_map_count(map, LAYOUT_NEW) == 0;

		if (s->next_engine_id == UINT32_MAX) {
			st = fail(msg, msg_cap, RPC_RESOURCE_EXHAUSTED, "no engine ids left");
			goto out;
		}
		id = s->next_engine_id;
		rc = layout_map_engine_add(map, id, req->ntargets, up ? LAYOUT_UP : LAYOUT_NEW);
		if (rc == -E2BIG) {
			st = fail(msg, msg_cap, RPC_RESOURCE_EXHAUSTED, "the pool map is full");
			goto out;
		}
		e = rc ? NULL
		       : ms_engine_add(s, id, req->uuid.data, req->address, req->ntargets, now);
		if (!e) {
			mgmt_state_rollback(&m->st);
			st = fail(msg, msg_cap, RPC_INTERNAL, "adding the engine: %s",
				  lode_strerror(rc ? rc : -ENOMEM));
			goto out;
		}
		s->next_engine_id++;
		/* Nothing moves onto it before it has said it is ready (the
		 * containers made, nothing of a past life left): every engine
		 * reclaims again (docs/decisions/0014). */
		if (!up)
			s->settled_version = (uint32_t)v0 + 1;
		changed = true;
	}
	id = e->id;
	if (!(l = mgmt_live_get(m, id, live))) {
		mgmt_state_rollback(&m->st);
		st = fail(msg, msg_cap, RPC_INTERNAL, "out of memory");
		goto out;
	}
	/* A restarted engine has forgotten what it reported (its reclaim
	 * above all): nothing of it counts until it reports again. */
	l->reported = false;
	if (changed) {
		map->version = v0 + 1;
		rc = mgmt_map_commit(m, map);
		if (rc) {
			st = fail_commit(msg, msg_cap, rc);
			goto out;
		}
	}
	/* Joining is a sign of life. */
	if ((l = mgmt_live_get(m, id, live)) != NULL) {
		l->silent_since_ms = live;
		l->deaf_ms = 0;
	}
	r = rb_msg(&b, &lode__mgmt__v1__engine_join_reply__descriptor);
	if (r) {
		r->engine_id = id;
		r->map = map_msg(&b, m, &capacity, &used);
		keys_msg(&b, m->st.s, &r->keys, &r->n_keys, &r->revocations, &r->n_revocations);
	}
	st = rb_done(&b, r, reply, msg, msg_cap);
out:
	layout_map_free(map);
	return st;
}

static void rebuild_take(struct mgmt_rebuild_info *ri, const Lode__Mgmt__V1__RebuildStatus *r)
{
	ri->map_version = r->map_version;
	ri->running = r->running;
	ri->objects_done = r->objects_done;
	ri->objects_total = r->objects_total;
	ri->bytes_done = r->bytes_done;
	ri->bytes_total = r->bytes_total;
	ri->started_unix_ms = r->started_unix_ms;
	ri->finished_unix_ms = r->finished_unix_ms;
	ri->errno_value = r->errno_value;
	ri->reclaimed_version = r->reclaimed_version;
}

static int op_engine_heartbeat(struct mgmt *m, const struct caller *who, const void *in,
			       ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const Lode__Mgmt__V1__HeartbeatRequest *req = in;
	const ms_engine *e = ms_engine_by_id(m->st.s, req->engine_id);
	Lode__Mgmt__V1__HeartbeatReply *r;
	struct mgmt_engine_live *l;
	struct mgmt_target_info *tgts = NULL;
	struct layout_map *map = NULL;
	uint64_t capacity, used, v0;
	int64_t now = mgmt_now_ms(m), live = mgmt_live_ms(m);
	struct rb b = {0};
	bool changed = false;
	int st, rc;

	st = engine_caller_check(m->st.s, who, "a heartbeat", msg, msg_cap);
	if (st)
		return st;
	if (!e || req->uuid.len != 16 || memcmp(e->uuid.data, req->uuid.data, 16) != 0)
		return fail(msg, msg_cap, RPC_NOT_FOUND,
			    "no engine %u with that uuid: join again", req->engine_id);
	if (req->n_targets > e->ntargets)
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT, "%zu targets: engine %u has %u",
			    req->n_targets, e->id, e->ntargets);
	for (size_t i = 0; i < req->n_targets; i++)
		if (req->targets[i]->id >= e->ntargets)
			return fail(msg, msg_cap, RPC_INVALID_ARGUMENT,
				    "target %u: engine %u has %u", req->targets[i]->id, e->id,
				    e->ntargets);
	l = mgmt_live_get(m, e->id, live);
	if (l && !l->targets)
		l->targets = tgts = calloc(e->ntargets, sizeof(*tgts));
	if (!l || !l->targets)
		return fail(msg, msg_cap, RPC_INTERNAL, "out of memory");
	l->ntargets = e->ntargets;
	l->silent_since_ms = live;
	l->heartbeat_ms = now; /* wall clock: shown as heartbeat_unix_ms */
	l->deaf_ms = 0;
	for (size_t i = 0; i < req->n_targets; i++) {
		const Lode__Mgmt__V1__Target *t = req->targets[i];

		l->targets[t->id] = (struct mgmt_target_info){.id = t->id,
							      .capacity = t->capacity,
							      .used = t->used,
							      .requests = t->requests,
							      .errors = t->errors,
							      .load = t->load,
							      .ram = t->ram};
	}
	if (req->rebuild) {
		rebuild_take(&l->rebuild, req->rebuild);
		l->reported = true;
	}
	/* This report may be the last one a rebuild waited for. */
	rc = mgmt_map_load(m, &map);
	if (rc)
		return fail(msg, msg_cap, RPC_INTERNAL, "the pool map: %s", lode_strerror(rc));
	v0 = map->version;
	rc = mgmt_rebuild_settle(m, map, &changed);
	if (!rc && changed) {
		map->version = v0 + 1;
		rc = mgmt_map_commit(m, map);
		if (rc) {
			layout_map_free(map);
			return fail_commit(msg, msg_cap, rc);
		}
	} else if (rc) {
		mgmt_state_rollback(&m->st);
	}
	layout_map_free(map);
	if (rc)
		return fail(msg, msg_cap, RPC_INTERNAL, "completing the rebuild: %s",
			    lode_strerror(rc));
	r = rb_msg(&b, &lode__mgmt__v1__heartbeat_reply__descriptor);
	if (r) {
		/* Most heartbeats: the engine holds this version already. */
		if (req->map_version != mgmt_map_version(m))
			r->map = map_msg(&b, m, &capacity, &used);
		r->heartbeat_ms = m->heartbeat_ms;
		r->grace_ms = m->grace_ms;
		keys_msg(&b, m->st.s, &r->keys, &r->n_keys, &r->revocations, &r->n_revocations);
	}
	return rb_done(&b, r, reply, msg, msg_cap);
}

static int op_engine_set_state(struct mgmt *m, const struct caller *who, const void *in,
			       ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const Lode__Mgmt__V1__EngineStateRequest *req = in;
	struct layout_map *map = NULL;
	const struct layout_engine *le;
	Lode__Mgmt__V1__PoolMap *pm;
	Lode__Mgmt__V1__Engine *r = NULL;
	uint64_t capacity, used, v0;
	unsigned to = (unsigned)req->state;
	struct rb b = {0};
	bool ok;
	int st = RPC_OK, rc;

	if (!who->sys)
		return fail(msg, msg_cap, RPC_PERMISSION_DENIED,
			    "changing an engine's state needs a system administrator");
	if (to != LAYOUT_DOWN && to != LAYOUT_DRAIN && to != LAYOUT_UP)
		return fail(msg, msg_cap, RPC_INVALID_ARGUMENT,
			    "state %d: an engine is set DOWN, DRAIN or UP", (int)req->state);
	rc = mgmt_map_load(m, &map);
	if (rc)
		return fail(msg, msg_cap, RPC_INTERNAL, "the pool map: %s", lode_strerror(rc));
	le = layout_map_engine(map, req->engine_id);
	if (!le) {
		st = fail(msg, msg_cap, RPC_NOT_FOUND, "no engine %u", req->engine_id);
		goto out;
	}
	if (le->id == MGMT_HOST_ENGINE && to != LAYOUT_UP) {
		st = fail(msg, msg_cap, RPC_FAILED_PRECONDITION,
			  "engine %u hosts the management service: it cannot be set %s",
			  le->id, layout_state_name(to));
		goto out;
	}
	/* Exclude and drain from UP; reintegrate what is DOWN or OUT. */
	ok = to == LAYOUT_UP ? le->state == LAYOUT_DOWN || le->state == LAYOUT_OUT
			     : le->state == LAYOUT_UP;
	if (!ok) {
		st = fail(msg, msg_cap, RPC_FAILED_PRECONDITION, "engine %u is %s: it cannot go %s",
			  le->id, layout_state_name(le->state), layout_state_name(to));
		goto out;
	}
	v0 = map->version;
	if (le->state == LAYOUT_OUT) {
		/* Its old place would come back with what it held when it
		 * left, and the places its members had since would keep stale
		 * copies: it joins again as a new engine instead, and moves
		 * fill it (docs/decisions/0014). */
		rc = mgmt_engine_retire(m, le->id);
		if (rc) {
			mgmt_state_rollback(&m->st);
			st = fail(msg, msg_cap, RPC_INTERNAL, "engine %u: %s", le->id,
				  lode_strerror(rc));
			goto out;
		}
		rc = mgmt_state_commit(&m->st);
		if (rc) {
			st = fail_commit(msg, msg_cap, rc);
			goto out;
		}
		goto reply;
	}
	rc = layout_map_engine_set(map, req->engine_id, to);
	if (rc) {
		st = fail(msg, msg_cap, RPC_FAILED_PRECONDITION, "engine %u: %s -> %s: %s",
			  le->id, layout_state_name(le->state), layout_state_name(to),
			  lode_strerror(rc));
		goto out;
	}
	map->version = v0 + 1;
	/* Back from DOWN: it may have missed a reclaim while it was away (it
	 * is not waited for): every engine walks again before anything moves
	 * (docs/decisions/0014). */
	if (to == LAYOUT_UP)
		m->st.s->settled_version = (uint32_t)map->version;
	rc = mgmt_map_commit(m, map);
	if (rc) {
		st = fail_commit(msg, msg_cap, rc);
		goto out;
	}
reply:
	pm = map_msg(&b, m, &capacity, &used);
	for (size_t i = 0; pm && i < pm->n_engines; i++)
		if (pm->engines[i]->id == req->engine_id) {
			r = pm->engines[i];
			pm->engines[i] = pm->engines[--pm->n_engines];
		}
	if (pm)
		protobuf_c_message_free_unpacked(&pm->base, NULL);
	st = rb_done(&b, r, reply, msg, msg_cap);
out:
	layout_map_free(map);
	return st;
}

static int op_pool_map_get(struct mgmt *m, const struct caller *who, const void *in,
			   ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	uint64_t capacity, used;
	struct rb b = {0};

	return rb_done(&b, map_msg(&b, m, &capacity, &used), reply, msg, msg_cap);
}

/* ---- the table ------------------------------------------------------------------------------ */

/* What a method asks of its caller's capability. */
enum auth_need {
	AUTH_NONE,  /* Connect, RenewCapability: the request is the proof */
	AUTH_POOL,  /* a pool-wide capability (management calls act as the user) */
	AUTH_ANY,   /* any valid one, container-scoped too */
};

/* Replicated (replica.c), who may serve a method. */
enum serve_where {
	LEADER,      /* changes the state, or needs the current one (Connect) */
	ANY_REPLICA, /* reads: any replica answers from its applied state */
};

static int dispatch(void *arg, const struct rpc_call_info *ci, const ProtobufCMessage *req,
		    ProtobufCMessage **reply, char *msg, size_t msg_cap, enum auth_need auth,
		    enum serve_where where, op_fn fn)
{
	struct mgmt *m = arg;
	struct caller who;
	int64_t t0 = mgmt_live_ms(m);
	int st = RPC_OK;

	*reply = NULL;
	/* A follower sends the client to the leader (mgmt_replica_serves). */
	if (m->repl && where == LEADER && !mgmt_replica_serves(m, msg, msg_cap))
		return RPC_UNAVAILABLE;
	pthread_mutex_lock(&m->lock);
	/* First after the service was not run (SIGSTOP, no CPU)? That time is
	 * counted before this call, a heartbeat perhaps, is handled. */
	mgmt_live_awake(m, mgmt_live_ms(m));
	if (auth != AUTH_NONE)
		st = caller_get(m, ci, auth == AUTH_ANY, &who, msg, msg_cap);
	if (st == RPC_OK)
		st = fn(m, auth != AUTH_NONE ? &who : NULL, req, reply, msg, msg_cap);
	/* Calls are served one at a time: while this one waited for the
	 * lock and ran, no heartbeat was heard. */
	mgmt_live_deaf(m, t0, mgmt_live_ms(m));
	mgmt_live_awake(m, mgmt_live_ms(m));
	pthread_mutex_unlock(&m->lock);
	/* A change of the map is told to the host outside the lock. */
	mgmt_map_publish(m);
	return st;
}

static void reply_free(ProtobufCMessage *reply)
{
	protobuf_c_message_free_unpacked(reply, NULL);
}

/* name, request type, handler, what the call needs of its capability, who may serve it */
#define MGMT_METHODS(X)                                                                            \
	X(Connect, connect_request, op_connect, AUTH_NONE, LEADER)                                  \
	X(RenewCapability, renew_request, op_renew, AUTH_NONE, LEADER)                              \
	X(PoolCreate, pool_create_request, op_pool_create, AUTH_POOL, LEADER)                       \
	X(PoolListAll, empty, op_pool_list, AUTH_POOL, ANY_REPLICA)                                 \
	X(PoolQuery, pool_ref, op_pool_query, AUTH_POOL, ANY_REPLICA)                               \
	X(PoolDestroy, pool_destroy_request, op_pool_destroy, AUTH_POOL, LEADER)                    \
	X(ContCreate, cont_create_request, op_cont_create, AUTH_POOL, LEADER)                       \
	X(ContListAll, pool_ref, op_cont_list, AUTH_POOL, ANY_REPLICA)                              \
	X(ContQuery, cont_ref, op_cont_query, AUTH_POOL, ANY_REPLICA)                               \
	X(ContDestroy, cont_ref, op_cont_destroy, AUTH_POOL, LEADER)                                \
	X(OpenContainer, cont_ref, op_cont_open, AUTH_POOL, LEADER)                                 \
	X(TenantCreate, name_ref, op_tenant_create, AUTH_POOL, LEADER)                              \
	X(TenantListAll, empty, op_tenant_list, AUTH_POOL, ANY_REPLICA)                             \
	X(TenantDestroy, name_ref, op_tenant_destroy, AUTH_POOL, LEADER)                            \
	X(UserCreate, user_create_request, op_user_create, AUTH_POOL, LEADER)                       \
	X(UserListAll, name_ref, op_user_list, AUTH_POOL, ANY_REPLICA)                              \
	X(UserRevoke, name_ref, op_user_revoke, AUTH_POOL, LEADER)                                  \
	X(UserRestore, name_ref, op_user_restore, AUTH_POOL, LEADER)                                \
	X(UserSetSecret, user_secret_request, op_user_secret, AUTH_POOL, LEADER)                    \
	X(GroupCreate, group_create_request, op_group_create, AUTH_POOL, LEADER)                    \
	X(GroupAddUser, group_member_request, op_group_add, AUTH_POOL, LEADER)                      \
	X(GroupRemoveUser, group_member_request, op_group_remove, AUTH_POOL, LEADER)                \
	X(GroupListAll, name_ref, op_group_list, AUTH_POOL, ANY_REPLICA)                            \
	X(AclSet, acl_entry, op_acl_set, AUTH_POOL, LEADER)                                         \
	X(AclGet, name_ref, op_acl_get, AUTH_POOL, ANY_REPLICA)                                     \
	X(SystemQuery, empty, op_system_query, AUTH_POOL, ANY_REPLICA)                              \
	X(RotateKey, empty, op_rotate_key, AUTH_POOL, LEADER)                                       \
	X(PoolMapGet, empty, op_pool_map_get, AUTH_ANY, ANY_REPLICA)                                \
	X(EngineJoin, engine_join_request, op_engine_join, AUTH_POOL, LEADER)                       \
	X(EngineHeartbeat, heartbeat_request, op_engine_heartbeat, AUTH_POOL, LEADER)               \
	X(EngineSetState, engine_state_request, op_engine_set_state, AUTH_POOL, LEADER)

/* rpc_handler_fn has no method argument: one small function per method. */
#define MGMT_ENTRY_FN(name, in, fn, auth, where)                                                   \
	static int rpc_##name(void *arg, const struct rpc_call_info *ci,                           \
			      const ProtobufCMessage *req, ProtobufCMessage **reply, char *msg,    \
			      size_t msg_cap)                                                      \
	{                                                                                          \
		return dispatch(arg, ci, req, reply, msg, msg_cap, auth, where, fn);               \
	}
MGMT_METHODS(MGMT_ENTRY_FN)

#define MGMT_ENTRY(name, in, fn, auth, where)                                                      \
	{"/lode.mgmt.v1.Mgmt/" #name, &lode__mgmt__v1__##in##__descriptor, rpc_##name, reply_free},

const struct rpc_method mgmt_methods[] = {MGMT_METHODS(MGMT_ENTRY)};
const unsigned mgmt_nmethods = sizeof(mgmt_methods) / sizeof(mgmt_methods[0]);

const struct rpc_method *mgmt_method_find(const char *name)
{
	static const char prefix[] = "/lode.mgmt.v1.Mgmt/";

	for (unsigned i = 0; i < mgmt_nmethods; i++)
		if (strcmp(mgmt_methods[i].name + sizeof(prefix) - 1, name) == 0)
			return &mgmt_methods[i];
	return NULL;
}
