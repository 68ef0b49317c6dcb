/*
 * The management service's handlers, called through its method table with
 * no network in between: who may do what (system administrator, tenant
 * administrator, plain user, another tenant's user, node user), revocation
 * and restore, key rotation and renewal, bad input, persistence across a
 * restart, a damaged state file, and a write that fails part way; and the
 * pool map: engines joining and heartbeating, failure detection driven by
 * mgmt_tick instead of sleeps, rebuild bookkeeping, EngineSetState, the
 * map across restarts, and the map_changed hook.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "lode/errno.h"
#include "lode/mgmt/v1/mgmt.pb-c.h"
#include "mgmt/state.h"
#include "net/proto.h"

#define NTARGETS 2
#define CAPACITY (1ull << 30)

static char test_dir[512];
static char msg[512];

/* ---- the service under test ----------------------------------------------------- */

static unsigned fake_targets(void *arg, struct mgmt_target_info *out, unsigned max)
{
	for (unsigned i = 0; i < NTARGETS && i < max; i++)
		out[i] = (struct mgmt_target_info){.id = i, .capacity = CAPACITY, .used = 100};
	return NTARGETS;
}

/* Every version map_changed was called with, in order. */
static uint32_t hook_versions[64];
static unsigned hook_calls;

static void map_changed(void *arg, uint32_t version)
{
	if (hook_calls < sizeof(hook_versions) / sizeof(hook_versions[0]))
		hook_versions[hook_calls] = version;
	hook_calls++;
}

static const struct mgmt_hooks hooks = {.targets = fake_targets, .map_changed = map_changed};

static struct mgmt *svc_open(const char *dir)
{
	char cred[600];
	struct mgmt_config cfg = {.state_dir = dir,
				  .admin_cred = cred,
				  .ntargets = NTARGETS,
				  .engine_addr = "127.0.0.1:1"};
	struct mgmt *m = NULL;
	int rc;

	snprintf(cred, sizeof(cred), "%s/admin.cred", dir);
	rc = mgmt_open(&cfg, &hooks, &m, msg, sizeof(msg));
	if (rc)
		fail_msg("mgmt_open %s: %d %s", dir, rc, msg);
	return m;
}

static void dir_fresh(char *out, size_t cap, const char *name)
{
	const char *base = getenv("LODE_TEST_TMP");
	char cmd[700];

	if (!base)
		base = "/tmp";
	mkdir(base, 0755);
	snprintf(out, cap, "%s/mgmt_state_test.%d.%s", base, (int)getpid(), name);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", out);
	assert_int_equal(system(cmd), 0);
}

/* ---- calls ------------------------------------------------------------------------ */

struct sess {
	uint8_t cap[AUTH_CAP_SIZE];
	size_t len;
};

/* Call a method as the holder of s (NULL: no capability); the reply, if
 * wanted, is the caller's to free. */
static int call(struct mgmt *m, const char *method, const void *req, const struct sess *s,
		ProtobufCMessage **reply)
{
	const struct rpc_method *me = mgmt_method_find(method);
	struct rpc_call_info ci = {.cap = s ? s->cap : NULL, .cap_len = s ? s->len : 0};
	ProtobufCMessage *r = NULL;
	int st;

	assert_non_null(me);
	/* The request must be of the type the table says. */
	assert_ptr_equal(((const ProtobufCMessage *)req)->descriptor, me->in);
	msg[0] = '\0';
	st = me->fn(m, &ci, req, &r, msg, sizeof(msg));
	if (st == RPC_OK)
		assert_non_null(r);
	else
		assert_null(r);
	if (reply)
		*reply = r;
	else if (r)
		me->reply_free(r);
	return st;
}

static void expect(struct mgmt *m, const char *method, const void *req, const struct sess *s,
		   int status)
{
	int st = call(m, method, req, s, NULL);

	if (st != status)
		fail_msg("%s: status %d, wanted %d (%s)", method, st, status, msg);
}

static int sess_connect(struct mgmt *m, const char *user, const char *secret, const char *pool,
			const char *obo, struct sess *s)
{
	Lode__Mgmt__V1__ConnectRequest req = LODE__MGMT__V1__CONNECT_REQUEST__INIT;
	Lode__Mgmt__V1__ConnectReply *r;
	int st;

	req.user = (char *)user;
	req.secret.data = (uint8_t *)secret;
	req.secret.len = strlen(secret);
	req.pool = (char *)pool;
	req.on_behalf_of = (char *)obo;
	st = call(m, "Connect", &req, NULL, (ProtobufCMessage **)&r);
	if (st)
		return st;
	assert_int_equal(r->capability.len, AUTH_CAP_SIZE);
	memcpy(s->cap, r->capability.data, AUTH_CAP_SIZE);
	s->len = AUTH_CAP_SIZE;
	protobuf_c_message_free_unpacked(&r->base, NULL);
	return 0;
}

static struct sess connect_ok(struct mgmt *m, const char *user, const char *secret)
{
	struct sess s;
	int st = sess_connect(m, user, secret, "", "", &s);

	if (st)
		fail_msg("Connect %s: %d (%s)", user, st, msg);
	return s;
}

static struct auth_cap cap_of(const struct sess *s)
{
	struct auth_cap c;

	assert_int_equal(auth_cap_decode(s->cap, s->len, &c), 0);
	return c;
}

static void tenant_create(struct mgmt *m, const struct sess *s, const char *name, int status)
{
	Lode__Mgmt__V1__NameRef req = LODE__MGMT__V1__NAME_REF__INIT;

	req.name = (char *)name;
	expect(m, "TenantCreate", &req, s, status);
}

static void user_create(struct mgmt *m, const struct sess *s, const char *tenant, const char *name,
			const char *secret, bool admin, bool node, int status)
{
	Lode__Mgmt__V1__UserCreateRequest req = LODE__MGMT__V1__USER_CREATE_REQUEST__INIT;

	req.tenant = (char *)tenant;
	req.name = (char *)name;
	req.secret.data = (uint8_t *)secret;
	req.secret.len = strlen(secret);
	req.admin = admin;
	req.node = node;
	expect(m, "UserCreate", &req, s, status);
}

static void acl_set(struct mgmt *m, const struct sess *s, const char *res, const char *pr,
		    unsigned rights, int status)
{
	Lode__Mgmt__V1__AclEntry req = LODE__MGMT__V1__ACL_ENTRY__INIT;

	req.resource = (char *)res;
	req.principal = (char *)pr;
	req.rights = rights;
	expect(m, "AclSet", &req, s, status);
}

static int cont_create(struct mgmt *m, const struct sess *s, const char *pool, const char *label,
		       const Lode__Mgmt__V1__ContProps *props)
{
	Lode__Mgmt__V1__ContCreateRequest req = LODE__MGMT__V1__CONT_CREATE_REQUEST__INIT;

	req.pool = (char *)pool;
	req.label = (char *)label;
	req.props = (Lode__Mgmt__V1__ContProps *)props;
	return call(m, "ContCreate", &req, s, NULL);
}

static int cont_call(struct mgmt *m, const char *method, const struct sess *s, const char *pool,
		     const char *label, ProtobufCMessage **reply)
{
	Lode__Mgmt__V1__ContRef req = LODE__MGMT__V1__CONT_REF__INIT;

	req.pool = (char *)pool;
	req.label = (char *)label;
	return call(m, method, &req, s, reply);
}

/* Open a container; returns its capability in *out (if not NULL) and the rights. */
static int cont_open(struct mgmt *m, const struct sess *s, const char *label, struct sess *out,
		     unsigned *rights)
{
	Lode__Mgmt__V1__OpenContainerReply *r;
	int st = cont_call(m, "OpenContainer", s, "default", label, (ProtobufCMessage **)&r);

	if (st)
		return st;
	if (out) {
		assert_int_equal(r->capability.len, AUTH_CAP_SIZE);
		memcpy(out->cap, r->capability.data, AUTH_CAP_SIZE);
		out->len = AUTH_CAP_SIZE;
	}
	if (rights)
		*rights = r->rights;
	protobuf_c_message_free_unpacked(&r->base, NULL);
	return 0;
}

/* Does s's ContListAll of the default pool show label? */
static bool cont_listed(struct mgmt *m, const struct sess *s, const char *label)
{
	Lode__Mgmt__V1__PoolRef req = LODE__MGMT__V1__POOL_REF__INIT;
	Lode__Mgmt__V1__ContList *r;
	bool found = false;

	req.label = "default";
	assert_int_equal(call(m, "ContListAll", &req, s, (ProtobufCMessage **)&r), RPC_OK);
	for (size_t i = 0; i < r->n_containers; i++)
		found |= strcmp(r->containers[i]->label, label) == 0;
	protobuf_c_message_free_unpacked(&r->base, NULL);
	return found;
}

static int empty_call(struct mgmt *m, const char *method, const struct sess *s,
		      ProtobufCMessage **reply)
{
	Lode__Mgmt__V1__Empty req = LODE__MGMT__V1__EMPTY__INIT;

	return call(m, method, &req, s, reply);
}

static int name_call(struct mgmt *m, const char *method, const struct sess *s, const char *name,
		     ProtobufCMessage **reply)
{
	Lode__Mgmt__V1__NameRef req = LODE__MGMT__V1__NAME_REF__INIT;

	req.name = (char *)name;
	return call(m, method, &req, s, reply);
}

static uint32_t signing_key(struct mgmt *m, const struct sess *s)
{
	Lode__Mgmt__V1__SystemStatus *r;
	uint32_t id;

	assert_int_equal(empty_call(m, "SystemQuery", s, (ProtobufCMessage **)&r), RPC_OK);
	id = r->signing_key_id;
	protobuf_c_message_free_unpacked(&r->base, NULL);
	return id;
}

/*
 * The cast of every test: tenants acme and beta, each with rights to make
 * containers in the default pool; acme/admin (tenant admin), acme/bob,
 * beta/eve, system/agent (node); container default/c1 made by bob.
 */
struct world {
	struct mgmt *m;
	struct sess root, acme_admin, bob, eve, agent;
};

static void world_make(struct world *w, const char *name)
{
	dir_fresh(test_dir, sizeof(test_dir), name);
	w->m = svc_open(test_dir);
	w->root = connect_ok(w->m, "admin", w->m->admin_secret);
	tenant_create(w->m, &w->root, "acme", RPC_OK);
	tenant_create(w->m, &w->root, "beta", RPC_OK);
	user_create(w->m, &w->root, "acme", "admin", "acme-admin-secret", true, false, RPC_OK);
	user_create(w->m, &w->root, "acme", "bob", "bob-secret", false, false, RPC_OK);
	user_create(w->m, &w->root, "beta", "eve", "eve-secret", false, false, RPC_OK);
	user_create(w->m, &w->root, "", "agent", "agent-secret", false, true, RPC_OK);
	acl_set(w->m, &w->root, "default", "tenant:acme", AUTH_R_READ | AUTH_R_WRITE, RPC_OK);
	acl_set(w->m, &w->root, "default", "tenant:beta", AUTH_R_READ | AUTH_R_WRITE, RPC_OK);
	w->acme_admin = connect_ok(w->m, "acme/admin", "acme-admin-secret");
	w->bob = connect_ok(w->m, "acme/bob", "bob-secret");
	w->eve = connect_ok(w->m, "beta/eve", "eve-secret");
	w->agent = connect_ok(w->m, "agent", "agent-secret");
	assert_int_equal(cont_create(w->m, &w->bob, "default", "c1", NULL), RPC_OK);
}

static void world_end(struct world *w)
{
	char cmd[700];

	mgmt_close(w->m);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", test_dir);
	assert_int_equal(system(cmd), 0);
}

/* ---- tests ------------------------------------------------------------------------ */

static void test_first_start(void **state)
{
	struct world w;
	struct sess s;
	struct auth_cap c;
	ms_pool *p;

	dir_fresh(test_dir, sizeof(test_dir), "first");
	w.m = svc_open(test_dir);
	assert_true(w.m->first_start);
	assert_int_equal(strlen(w.m->admin_secret), 64);
	assert_non_null(ms_tenant_find(w.m->st.s, "system"));
	p = ms_pool_find(w.m->st.s, "default");
	assert_non_null(p);
	assert_int_equal(p->n_targets, NTARGETS);
	assert_int_equal(w.m->st.s->n_keys, 1);

	s = connect_ok(w.m, "admin", w.m->admin_secret);
	c = cap_of(&s);
	assert_int_equal(c.rights, MS_RIGHTS_ALL);
	assert_memory_equal(c.pool.b, p->uuid.data, 16);
	assert_true(c.expires_ms > c.issued_ms);
	/* The same refusal, word for word, for a wrong secret and a wrong user. */
	assert_int_equal(sess_connect(w.m, "admin", "nope", "", "", &s), RPC_UNAUTHENTICATED);
	char first[512];

	snprintf(first, sizeof(first), "%s", msg);
	assert_int_equal(sess_connect(w.m, "nobody", "nope", "", "", &s), RPC_UNAUTHENTICATED);
	assert_string_equal(msg, first);
	assert_int_equal(sess_connect(w.m, "ghost/admin", "nope", "", "", &s), RPC_UNAUTHENTICATED);
	assert_string_equal(msg, first);
	assert_int_equal(sess_connect(w.m, "admin", "", "", "", &s), RPC_UNAUTHENTICATED);
	/* A right secret to a pool that is not there. */
	assert_int_equal(sess_connect(w.m, "admin", w.m->admin_secret, "nope", "", &s),
			 RPC_NOT_FOUND);
	world_end(&w);
}

static void test_capability_checks(void **state)
{
	struct world w;
	struct sess bad;

	world_make(&w, "caps");
	/* Missing, forged, truncated, expired: UNAUTHENTICATED, each saying which. */
	assert_int_equal(empty_call(w.m, "PoolListAll", NULL, NULL), RPC_UNAUTHENTICATED);
	assert_non_null(strstr(msg, "no capability"));
	bad = w.bob;
	bad.cap[30] ^= 1; /* the client id */
	assert_int_equal(empty_call(w.m, "PoolListAll", &bad, NULL), RPC_UNAUTHENTICATED);
	assert_non_null(strstr(msg, "forged"));
	bad = w.bob;
	bad.len = 50;
	assert_int_equal(empty_call(w.m, "PoolListAll", &bad, NULL), RPC_UNAUTHENTICATED);
	assert_non_null(strstr(msg, "forged"));
	assert_int_equal(empty_call(w.m, "PoolListAll", &w.bob, NULL), RPC_OK);
	w.m->clock_skew_ms = 601 * 1000;
	assert_int_equal(empty_call(w.m, "PoolListAll", &w.bob, NULL), RPC_UNAUTHENTICATED);
	assert_non_null(strstr(msg, "expired"));
	{
		Lode__Mgmt__V1__RenewRequest rq = LODE__MGMT__V1__RENEW_REQUEST__INIT;

		rq.capability.data = w.bob.cap;
		rq.capability.len = w.bob.len;
		expect(w.m, "RenewCapability", &rq, NULL, RPC_UNAUTHENTICATED);
	}
	w.m->clock_skew_ms = 0;
	/* A container capability cannot act as its user in management calls. */
	struct sess cc;

	assert_int_equal(cont_open(w.m, &w.bob, "c1", &cc, NULL), 0);
	assert_int_equal(empty_call(w.m, "PoolListAll", &cc, NULL), RPC_PERMISSION_DENIED);
	world_end(&w);
}

static void test_authorization_matrix(void **state)
{
	Lode__Mgmt__V1__PoolCreateRequest pc = LODE__MGMT__V1__POOL_CREATE_REQUEST__INIT;
	struct world w;
	struct sess s;
	unsigned rights;

	world_make(&w, "matrix");
	pc.label = "p2";
	/* System administrator only: pools, tenants, rotation. */
	expect(w.m, "PoolCreate", &pc, &w.bob, RPC_PERMISSION_DENIED);
	expect(w.m, "PoolCreate", &pc, &w.acme_admin, RPC_PERMISSION_DENIED);
	tenant_create(w.m, &w.bob, "gamma", RPC_PERMISSION_DENIED);
	tenant_create(w.m, &w.acme_admin, "gamma", RPC_PERMISSION_DENIED);
	assert_int_equal(empty_call(w.m, "RotateKey", &w.acme_admin, NULL), RPC_PERMISSION_DENIED);
	assert_int_equal(name_call(w.m, "TenantDestroy", &w.acme_admin, "beta", NULL),
			 RPC_PERMISSION_DENIED);
	expect(w.m, "PoolCreate", &pc, &w.root, RPC_OK);

	/* Tenant administrator: its own tenant's users and groups, no node users. */
	user_create(w.m, &w.acme_admin, "", "carol", "carol-secret", false, false, RPC_OK);
	user_create(w.m, &w.acme_admin, "beta", "mallory", "x", false, false,
		    RPC_PERMISSION_DENIED);
	user_create(w.m, &w.acme_admin, "acme", "n2", "x", false, true, RPC_PERMISSION_DENIED);
	user_create(w.m, &w.bob, "acme", "dave", "x", false, false, RPC_PERMISSION_DENIED);
	assert_int_equal(name_call(w.m, "UserListAll", &w.acme_admin, "", NULL), RPC_OK);
	assert_int_equal(name_call(w.m, "UserListAll", &w.acme_admin, "beta", NULL),
			 RPC_PERMISSION_DENIED);
	assert_int_equal(name_call(w.m, "UserListAll", &w.bob, "", NULL), RPC_PERMISSION_DENIED);
	assert_int_equal(name_call(w.m, "UserRevoke", &w.acme_admin, "beta/eve", NULL),
			 RPC_PERMISSION_DENIED);
	assert_int_equal(name_call(w.m, "UserRevoke", &w.bob, "carol", NULL),
			 RPC_PERMISSION_DENIED);

	/* Containers: the owner tenant has everything; another tenant nothing. */
	assert_true(cont_listed(w.m, &w.bob, "c1"));
	assert_false(cont_listed(w.m, &w.eve, "c1"));
	assert_int_equal(cont_open(w.m, &w.eve, "c1", NULL, NULL), RPC_PERMISSION_DENIED);
	assert_int_equal(cont_call(w.m, "ContQuery", &w.eve, "default", "c1", NULL),
			 RPC_PERMISSION_DENIED);
	assert_int_equal(cont_call(w.m, "ContDestroy", &w.eve, "default", "c1", NULL),
			 RPC_PERMISSION_DENIED);
	assert_int_equal(name_call(w.m, "AclGet", &w.eve, "default/c1", NULL),
			 RPC_PERMISSION_DENIED);
	acl_set(w.m, &w.eve, "default/c1", "user:beta/eve", AUTH_R_READ, RPC_PERMISSION_DENIED);
	assert_int_equal(cont_open(w.m, &w.bob, "c1", NULL, &rights), 0);
	assert_int_equal(rights, MS_RIGHTS_ALL);
	assert_int_equal(cont_open(w.m, &w.acme_admin, "c1", NULL, &rights), 0);
	assert_int_equal(rights, MS_RIGHTS_ALL);
	assert_int_equal(cont_open(w.m, &w.root, "c1", NULL, &rights), 0);
	assert_int_equal(rights, MS_RIGHTS_ALL);

	/* A grant lets eve in, with exactly what was granted, same client. */
	acl_set(w.m, &w.bob, "default/c1", "user:beta/eve", AUTH_R_READ, RPC_OK);
	assert_true(cont_listed(w.m, &w.eve, "c1"));
	assert_int_equal(cont_open(w.m, &w.eve, "c1", &s, &rights), 0);
	assert_int_equal(rights, AUTH_R_READ);
	{
		struct auth_cap c = cap_of(&s), e = cap_of(&w.eve);
		ms_cont *c1 = ms_cont_find(w.m->st.s, "default", "c1");
		static const struct lode_uuid root = NET_ROOT_CONT_INIT;

		assert_int_equal(c.client, e.client);
		assert_int_equal(c.rights, AUTH_R_READ);
		assert_memory_equal(c.cont.b, c1->uuid.data, 16);
		assert_memory_not_equal(c.cont.b, root.b, 16);
	}
	assert_int_equal(cont_call(w.m, "ContDestroy", &w.eve, "default", "c1", NULL),
			 RPC_PERMISSION_DENIED);
	/* Taking it back (rights 0) shuts the door again. */
	acl_set(w.m, &w.bob, "default/c1", "user:beta/eve", 0, RPC_OK);
	assert_int_equal(cont_open(w.m, &w.eve, "c1", NULL, NULL), RPC_PERMISSION_DENIED);

	/* Groups: a grant to a group reaches its members only. */
	{
		Lode__Mgmt__V1__GroupCreateRequest gc = LODE__MGMT__V1__GROUP_CREATE_REQUEST__INIT;
		Lode__Mgmt__V1__GroupMemberRequest gm = LODE__MGMT__V1__GROUP_MEMBER_REQUEST__INIT;
		struct sess carol = connect_ok(w.m, "acme/carol", "carol-secret");

		gc.name = "ops";
		expect(w.m, "GroupCreate", &gc, &w.bob, RPC_PERMISSION_DENIED);
		expect(w.m, "GroupCreate", &gc, &w.acme_admin, RPC_OK);
		assert_int_equal(cont_create(w.m, &w.eve, "default", "b1", NULL), RPC_OK);
		assert_int_equal(cont_open(w.m, &carol, "b1", NULL, NULL), RPC_PERMISSION_DENIED);
		acl_set(w.m, &w.eve, "default/b1", "group:acme/ops", AUTH_R_READ | AUTH_R_WRITE,
			RPC_OK);
		assert_int_equal(cont_open(w.m, &carol, "b1", NULL, NULL), RPC_PERMISSION_DENIED);
		gm.group = "ops";
		gm.user = "carol";
		expect(w.m, "GroupAddUser", &gm, &w.bob, RPC_PERMISSION_DENIED);
		expect(w.m, "GroupAddUser", &gm, &w.acme_admin, RPC_OK);
		assert_int_equal(cont_open(w.m, &carol, "b1", NULL, &rights), 0);
		assert_int_equal(rights, AUTH_R_READ | AUTH_R_WRITE);
		assert_int_equal(cont_open(w.m, &w.bob, "b1", NULL, NULL), RPC_PERMISSION_DENIED);
		/* Members come from the group's tenant only. */
		gm.group = "acme/ops";
		gm.user = "beta/eve";
		expect(w.m, "GroupAddUser", &gm, &w.root, RPC_INVALID_ARGUMENT);
		gm.group = "ops";
		gm.user = "carol";
		expect(w.m, "GroupRemoveUser", &gm, &w.acme_admin, RPC_OK);
		expect(w.m, "GroupRemoveUser", &gm, &w.acme_admin, RPC_NOT_FOUND);
		assert_int_equal(cont_open(w.m, &carol, "b1", NULL, NULL), RPC_PERMISSION_DENIED);
	}

	/* Pool rights do not cascade to containers; a pool without rights is invisible. */
	acl_set(w.m, &w.root, "p2", "user:acme/bob", AUTH_R_READ, RPC_OK);
	acl_set(w.m, &w.bob, "p2", "user:acme/bob", MS_RIGHTS_ALL, RPC_PERMISSION_DENIED);
	{
		Lode__Mgmt__V1__PoolRef pr = LODE__MGMT__V1__POOL_REF__INIT;

		pr.label = "p2";
		expect(w.m, "PoolQuery", &pr, &w.bob, RPC_OK);
		expect(w.m, "PoolQuery", &pr, &w.eve, RPC_PERMISSION_DENIED);
		assert_int_equal(cont_create(w.m, &w.bob, "p2", "x", NULL), RPC_PERMISSION_DENIED);
	}

	/* Node users connect on behalf of others; nobody else does. */
	assert_int_equal(sess_connect(w.m, "agent", "agent-secret", "", "acme/bob", &s), 0);
	{
		struct auth_cap c = cap_of(&s), b = cap_of(&w.bob);

		assert_int_equal(c.user, b.user);
		assert_int_equal(c.tenant, b.tenant);
		assert_int_equal(c.rights, b.rights);
	}
	assert_true(cont_listed(w.m, &s, "c1"));
	assert_int_equal(sess_connect(w.m, "acme/bob", "bob-secret", "", "beta/eve", &s),
			 RPC_PERMISSION_DENIED);
	assert_int_equal(sess_connect(w.m, "agent", "wrong", "", "acme/bob", &s),
			 RPC_UNAUTHENTICATED);
	assert_int_equal(sess_connect(w.m, "agent", "agent-secret", "", "acme/nobody", &s),
			 RPC_NOT_FOUND);

	/* Tenants: others see only their own. */
	{
		Lode__Mgmt__V1__TenantList *tl;

		assert_int_equal(empty_call(w.m, "TenantListAll", &w.bob, (ProtobufCMessage **)&tl),
				 RPC_OK);
		assert_int_equal(tl->n_tenants, 1);
		assert_string_equal(tl->tenants[0]->name, "acme");
		protobuf_c_message_free_unpacked(&tl->base, NULL);
		assert_int_equal(
			empty_call(w.m, "TenantListAll", &w.root, (ProtobufCMessage **)&tl),
			RPC_OK);
		assert_int_equal(tl->n_tenants, 3);
		protobuf_c_message_free_unpacked(&tl->base, NULL);
	}
	/* A user may change its own secret, not another's. */
	{
		Lode__Mgmt__V1__UserSecretRequest us = LODE__MGMT__V1__USER_SECRET_REQUEST__INIT;

		us.name = "bob";
		us.secret.data = (uint8_t *)"bob-new";
		us.secret.len = 7;
		expect(w.m, "UserSetSecret", &us, &w.bob, RPC_OK);
		us.name = "carol";
		expect(w.m, "UserSetSecret", &us, &w.bob, RPC_PERMISSION_DENIED);
		assert_int_equal(sess_connect(w.m, "acme/bob", "bob-secret", "", "", &s),
				 RPC_UNAUTHENTICATED);
		assert_int_equal(sess_connect(w.m, "acme/bob", "bob-new", "", "", &s), 0);
	}
	world_end(&w);
}

static void test_revoke_restore(void **state)
{
	Lode__Mgmt__V1__RenewRequest rq = LODE__MGMT__V1__RENEW_REQUEST__INIT;
	struct world w;
	struct sess cc, fresh;
	struct auth_cap c;

	world_make(&w, "revoke");
	assert_int_equal(cont_open(w.m, &w.bob, "c1", &cc, NULL), 0);
	assert_int_equal(name_call(w.m, "UserRevoke", &w.bob, "bob", NULL), RPC_PERMISSION_DENIED);
	assert_int_equal(name_call(w.m, "UserRevoke", &w.root, "admin", NULL),
			 RPC_FAILED_PRECONDITION);
	assert_int_equal(name_call(w.m, "UserRevoke", &w.acme_admin, "bob", NULL), RPC_OK);
	/* Every token bob holds is dead at once: here and on the targets. */
	assert_int_equal(empty_call(w.m, "PoolListAll", &w.bob, NULL), RPC_UNAUTHENTICATED);
	assert_non_null(strstr(msg, "revoked"));
	assert_int_equal(auth_cap_verify(mgmt_keyring(w.m), mgmt_revoked(w.m), cc.cap, cc.len,
					 mgmt_now_ms(w.m), &c),
			 -LODE_ECAPREVOKED);
	rq.capability.data = w.bob.cap;
	rq.capability.len = w.bob.len;
	expect(w.m, "RenewCapability", &rq, NULL, RPC_UNAUTHENTICATED);
	assert_int_equal(sess_connect(w.m, "acme/bob", "bob-secret", "", "", &fresh),
			 RPC_UNAUTHENTICATED);
	assert_int_equal(sess_connect(w.m, "agent", "agent-secret", "", "acme/bob", &fresh),
			 RPC_UNAUTHENTICATED);
	/* Others are not touched. */
	assert_int_equal(empty_call(w.m, "PoolListAll", &w.eve, NULL), RPC_OK);

	/* Restore: new sessions work at once (same millisecond included), old tokens stay dead. */
	assert_int_equal(name_call(w.m, "UserRestore", &w.acme_admin, "acme/bob", NULL), RPC_OK);
	fresh = connect_ok(w.m, "acme/bob", "bob-secret");
	assert_int_equal(empty_call(w.m, "PoolListAll", &fresh, NULL), RPC_OK);
	assert_int_equal(empty_call(w.m, "PoolListAll", &w.bob, NULL), RPC_UNAUTHENTICATED);
	assert_int_equal(auth_cap_verify(mgmt_keyring(w.m), mgmt_revoked(w.m), cc.cap, cc.len,
					 mgmt_now_ms(w.m), &c),
			 -LODE_ECAPREVOKED);
	assert_int_equal(auth_cap_verify(mgmt_keyring(w.m), mgmt_revoked(w.m), fresh.cap, fresh.len,
					 mgmt_now_ms(w.m), &c),
			 0);
	world_end(&w);
}

static void test_rotation_renewal(void **state)
{
	Lode__Mgmt__V1__RenewRequest rq = LODE__MGMT__V1__RENEW_REQUEST__INIT;
	Lode__Mgmt__V1__RotateKeyReply *rk;
	Lode__Mgmt__V1__RenewReply *rr;
	struct world w;
	struct sess renewed, cc;
	struct auth_cap old, now;

	world_make(&w, "rotate");
	assert_int_equal(signing_key(w.m, &w.bob), 1);
	assert_int_equal(empty_call(w.m, "RotateKey", &w.bob, NULL), RPC_PERMISSION_DENIED);
	assert_int_equal(empty_call(w.m, "RotateKey", &w.root, (ProtobufCMessage **)&rk), RPC_OK);
	assert_int_equal(rk->key_id, 2);
	protobuf_c_message_free_unpacked(&rk->base, NULL);
	assert_int_equal(signing_key(w.m, &w.bob), 2);
	/* The keyring the targets use agrees with the state: key 1 retired, key 2 signs. */
	{
		struct auth_key keys[AUTH_KEYS_MAX];
		unsigned n = auth_keyring_export(mgmt_keyring(w.m), keys, AUTH_KEYS_MAX);

		assert_int_equal(n, 2);
		assert_int_equal(keys[0].id, 1);
		assert_true(keys[0].retired_ms > 0);
		assert_int_equal(keys[0].retired_ms, w.m->st.s->keys[0]->retired_unix_ms);
		assert_int_equal(keys[1].id, 2);
		assert_int_equal(keys[1].retired_ms, 0);
		assert_memory_equal(keys[1].key, w.m->st.s->keys[1]->key.data, AUTH_KEY_SIZE);
	}
	/* Old tokens keep working until they expire; new ones are signed by key 2. */
	assert_int_equal(empty_call(w.m, "PoolListAll", &w.bob, NULL), RPC_OK);
	assert_int_equal(cap_of(&w.bob).key_id, 1);
	assert_int_equal(cap_of(&w.eve).key_id, 1);
	assert_int_equal(cont_open(w.m, &w.bob, "c1", &cc, NULL), 0);
	assert_int_equal(cap_of(&cc).key_id, 2);

	/* Renewal: the same claims, a later expiry, the current key. */
	w.m->clock_skew_ms = 5000;
	rq.capability.data = w.bob.cap;
	rq.capability.len = w.bob.len;
	assert_int_equal(call(w.m, "RenewCapability", &rq, NULL, (ProtobufCMessage **)&rr), RPC_OK);
	assert_int_equal(rr->capability.len, AUTH_CAP_SIZE);
	memcpy(renewed.cap, rr->capability.data, AUTH_CAP_SIZE);
	renewed.len = AUTH_CAP_SIZE;
	old = cap_of(&w.bob);
	now = cap_of(&renewed);
	assert_int_equal(rr->expires_unix_ms, now.expires_ms);
	protobuf_c_message_free_unpacked(&rr->base, NULL);
	assert_int_equal(now.key_id, 2);
	assert_true(now.expires_ms > old.expires_ms);
	assert_int_equal(now.client, old.client);
	assert_int_equal(now.user, old.user);
	assert_int_equal(now.tenant, old.tenant);
	assert_int_equal(now.rights, old.rights);
	assert_memory_equal(now.pool.b, old.pool.b, 16);
	assert_int_equal(empty_call(w.m, "PoolListAll", &renewed, NULL), RPC_OK);
	/* A container token renews into a container token. */
	rq.capability.data = cc.cap;
	assert_int_equal(call(w.m, "RenewCapability", &rq, NULL, (ProtobufCMessage **)&rr), RPC_OK);
	memcpy(renewed.cap, rr->capability.data, AUTH_CAP_SIZE);
	protobuf_c_message_free_unpacked(&rr->base, NULL);
	assert_memory_equal(cap_of(&renewed).cont.b, cap_of(&cc).cont.b, 16);
	/* Forged and empty tokens do not renew. */
	cc.cap[40] ^= 0x80;
	expect(w.m, "RenewCapability", &rq, NULL, RPC_UNAUTHENTICATED);
	rq.capability.len = 0;
	expect(w.m, "RenewCapability", &rq, NULL, RPC_UNAUTHENTICATED);
	w.m->clock_skew_ms = 0;
	world_end(&w);
}

static void test_bad_input(void **state)
{
	Lode__Mgmt__V1__PoolCreateRequest pc = LODE__MGMT__V1__POOL_CREATE_REQUEST__INIT;
	Lode__Mgmt__V1__ContProps pr = LODE__MGMT__V1__CONT_PROPS__INIT;
	Lode__Mgmt__V1__PoolDestroyRequest pd = LODE__MGMT__V1__POOL_DESTROY_REQUEST__INIT;
	char long_name[200];
	uint32_t targets[2];
	char big_secret[AUTH_SECRET_MAX + 2];
	struct world w;
	struct sess s;

	world_make(&w, "bad");
	memset(long_name, 'n', 128);
	long_name[128] = '\0';
	const char *bad_names[] = {"", long_name, "a/b", "a b", "caf\xc3\xa9", "x:y"};

	for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
		tenant_create(w.m, &w.root, bad_names[i], RPC_INVALID_ARGUMENT);
		pc.label = (char *)bad_names[i];
		expect(w.m, "PoolCreate", &pc, &w.root, RPC_INVALID_ARGUMENT);
		assert_int_equal(cont_create(w.m, &w.bob, "default", bad_names[i], NULL),
				 RPC_INVALID_ARGUMENT);
	}
	long_name[127] = '\0';
	assert_int_equal(cont_create(w.m, &w.bob, "default", long_name, NULL), RPC_OK);

	/* Properties. */
	pr.object_class = "S129"; /* no such class */
	assert_int_equal(cont_create(w.m, &w.bob, "default", "p", &pr), RPC_INVALID_ARGUMENT);
	pr.object_class = "EC_2P1"; /* encrypted containers are not erasure-coded yet */
	pr.encryption = true;
	assert_int_equal(cont_create(w.m, &w.bob, "default", "p", &pr), RPC_INVALID_ARGUMENT);
	pr.encryption = false;
	pr.object_class = "SX";
	pr.chunk_size = 2048;
	assert_int_equal(cont_create(w.m, &w.bob, "default", "p", &pr), RPC_INVALID_ARGUMENT);
	pr.chunk_size = 128u << 20;
	assert_int_equal(cont_create(w.m, &w.bob, "default", "p", &pr), RPC_INVALID_ARGUMENT);
	pr.chunk_size = 6000;
	assert_int_equal(cont_create(w.m, &w.bob, "default", "p", &pr), RPC_INVALID_ARGUMENT);
	pr.chunk_size = 64u << 10;
	pr.checksum = "md5";
	assert_int_equal(cont_create(w.m, &w.bob, "default", "p", &pr), RPC_INVALID_ARGUMENT);
	pr.checksum = "none";
	assert_int_equal(cont_create(w.m, &w.bob, "default", "p", &pr), RPC_OK);
	{
		Lode__Mgmt__V1__ContInfo *ci;

		assert_int_equal(cont_call(w.m, "ContQuery", &w.bob, "default", "p",
					   (ProtobufCMessage **)&ci),
				 RPC_OK);
		assert_string_equal(ci->props->object_class, "SX");
		assert_int_equal(ci->props->chunk_size, 64u << 10);
		assert_string_equal(ci->props->checksum, "none");
		assert_string_equal(ci->tenant, "acme");
		assert_int_equal(ci->uuid.len, 16);
		protobuf_c_message_free_unpacked(&ci->base, NULL);
		/* Defaults are filled in. */
		assert_int_equal(cont_call(w.m, "ContQuery", &w.bob, "default", "c1",
					   (ProtobufCMessage **)&ci),
				 RPC_OK);
		assert_string_equal(ci->props->object_class, "SX");
		assert_int_equal(ci->props->chunk_size, 1u << 20);
		assert_string_equal(ci->props->checksum, "crc32c");
		protobuf_c_message_free_unpacked(&ci->base, NULL);
	}
	assert_int_equal(cont_create(w.m, &w.bob, "default", "p", NULL), RPC_ALREADY_EXISTS);
	assert_int_equal(cont_create(w.m, &w.bob, "nopool", "p", NULL), RPC_NOT_FOUND);
	assert_int_equal(cont_call(w.m, "ContQuery", &w.bob, "default", "nope", NULL),
			 RPC_NOT_FOUND);

	/* Pools: sizes, targets, existence. */
	pc.label = "big";
	pc.size = 2 * CAPACITY + 1;
	expect(w.m, "PoolCreate", &pc, &w.root, RPC_RESOURCE_EXHAUSTED);
	targets[0] = 1;
	pc.targets = targets;
	pc.n_targets = 1;
	pc.size = CAPACITY + 1;
	expect(w.m, "PoolCreate", &pc, &w.root, RPC_RESOURCE_EXHAUSTED);
	targets[0] = 7;
	pc.size = 0;
	expect(w.m, "PoolCreate", &pc, &w.root, RPC_INVALID_ARGUMENT);
	targets[0] = 1;
	targets[1] = 1;
	pc.n_targets = 2;
	expect(w.m, "PoolCreate", &pc, &w.root, RPC_INVALID_ARGUMENT);
	pc.n_targets = 1;
	pc.size = CAPACITY;
	expect(w.m, "PoolCreate", &pc, &w.root, RPC_OK);
	expect(w.m, "PoolCreate", &pc, &w.root, RPC_ALREADY_EXISTS);
	{
		Lode__Mgmt__V1__PoolRef ref = LODE__MGMT__V1__POOL_REF__INIT;
		Lode__Mgmt__V1__PoolInfo *pi;

		ref.label = "big";
		assert_int_equal(call(w.m, "PoolQuery", &ref, &w.root, (ProtobufCMessage **)&pi),
				 RPC_OK);
		assert_int_equal(pi->size, CAPACITY);
		assert_int_equal(pi->n_targets, 1);
		assert_int_equal(pi->targets[0], 1);
		protobuf_c_message_free_unpacked(&pi->base, NULL);
		ref.label = "nope";
		expect(w.m, "PoolQuery", &ref, &w.root, RPC_NOT_FOUND);
	}
	/* A pool with containers goes only by force, and takes them along. */
	pd.label = "default";
	expect(w.m, "PoolDestroy", &pd, &w.bob, RPC_PERMISSION_DENIED);
	expect(w.m, "PoolDestroy", &pd, &w.root, RPC_FAILED_PRECONDITION);
	pd.label = "nope";
	expect(w.m, "PoolDestroy", &pd, &w.root, RPC_NOT_FOUND);

	/* ACL entries. */
	acl_set(w.m, &w.bob, "default/c1", "someone", AUTH_R_READ, RPC_INVALID_ARGUMENT);
	acl_set(w.m, &w.bob, "default/c1", "user:", AUTH_R_READ, RPC_INVALID_ARGUMENT);
	acl_set(w.m, &w.bob, "default/c1", "user:nobody", AUTH_R_READ, RPC_NOT_FOUND);
	acl_set(w.m, &w.bob, "default/c1", "group:nogroup", AUTH_R_READ, RPC_NOT_FOUND);
	acl_set(w.m, &w.bob, "default/c1", "tenant:beta", 8, RPC_INVALID_ARGUMENT);
	acl_set(w.m, &w.bob, "default/none", "tenant:beta", 1, RPC_NOT_FOUND);
	acl_set(w.m, &w.bob, "default/c1/x", "tenant:beta", 1, RPC_INVALID_ARGUMENT);
	acl_set(w.m, &w.bob, "", "tenant:beta", 1, RPC_INVALID_ARGUMENT);

	/* Users and secrets. */
	user_create(w.m, &w.root, "acme", "bob", "x", false, false, RPC_ALREADY_EXISTS);
	user_create(w.m, &w.root, "acme", "empty", "", false, false, RPC_INVALID_ARGUMENT);
	user_create(w.m, &w.root, "nope", "x", "x", false, false, RPC_NOT_FOUND);
	memset(big_secret, 's', sizeof(big_secret) - 1);
	big_secret[sizeof(big_secret) - 1] = '\0';
	user_create(w.m, &w.root, "acme", "big", big_secret, false, false, RPC_INVALID_ARGUMENT);
	assert_int_equal(sess_connect(w.m, "admin", big_secret, "", "", &s), RPC_INVALID_ARGUMENT);
	assert_int_equal(sess_connect(w.m, "a b", "x", "", "", &s), RPC_INVALID_ARGUMENT);
	tenant_create(w.m, &w.root, "acme", RPC_ALREADY_EXISTS);
	assert_int_equal(name_call(w.m, "TenantDestroy", &w.root, "system", NULL),
			 RPC_FAILED_PRECONDITION);
	assert_int_equal(name_call(w.m, "UserRevoke", &w.root, "acme/nobody", NULL), RPC_NOT_FOUND);
	world_end(&w);
}

static void test_destroy(void **state)
{
	Lode__Mgmt__V1__PoolDestroyRequest pd = LODE__MGMT__V1__POOL_DESTROY_REQUEST__INIT;
	Lode__Mgmt__V1__ContInfo *ci;
	Lode__Mgmt__V1__AclList *al;
	struct world w;
	struct sess bob_cc;

	world_make(&w, "destroy");
	assert_int_equal(cont_open(w.m, &w.bob, "c1", &bob_cc, NULL), 0);
	/* Tenant destruction waits for its containers, then takes its users' tokens along. */
	assert_int_equal(name_call(w.m, "TenantDestroy", &w.root, "acme", NULL),
			 RPC_FAILED_PRECONDITION);
	assert_int_equal(
		cont_call(w.m, "ContDestroy", &w.bob, "default", "c1", (ProtobufCMessage **)&ci),
		RPC_OK);
	assert_string_equal(ci->label, "c1");
	protobuf_c_message_free_unpacked(&ci->base, NULL);
	assert_int_equal(cont_call(w.m, "ContQuery", &w.bob, "default", "c1", NULL), RPC_NOT_FOUND);
	assert_null(ms_acl_find(w.m->st.s, "default/c1", "tenant:acme"));
	assert_int_equal(name_call(w.m, "TenantDestroy", &w.root, "acme", NULL), RPC_OK);
	assert_int_equal(empty_call(w.m, "PoolListAll", &w.bob, NULL), RPC_UNAUTHENTICATED);
	assert_int_equal(auth_cap_verify(mgmt_keyring(w.m), mgmt_revoked(w.m), bob_cc.cap,
					 bob_cc.len, mgmt_now_ms(w.m), NULL),
			 -LODE_ECAPREVOKED);
	assert_int_equal(name_call(w.m, "AclGet", &w.root, "default", (ProtobufCMessage **)&al),
			 RPC_OK);
	assert_int_equal(al->n_entries, 1); /* tenant:beta's */
	assert_string_equal(al->entries[0]->principal, "tenant:beta");
	protobuf_c_message_free_unpacked(&al->base, NULL);
	/* A tenant of the same name later is a new tenant: the old tokens stay dead. */
	tenant_create(w.m, &w.root, "acme", RPC_OK);
	user_create(w.m, &w.root, "acme", "bob", "bob-secret", false, false, RPC_OK);
	assert_int_equal(empty_call(w.m, "PoolListAll", &w.bob, NULL), RPC_UNAUTHENTICATED);

	/* Pool by force, containers and all. */
	assert_int_equal(cont_create(w.m, &w.eve, "default", "e1", NULL), RPC_OK);
	pd.label = "default";
	pd.force = true;
	expect(w.m, "PoolDestroy", &pd, &w.root, RPC_OK);
	assert_int_equal(w.m->st.s->n_containers, 0);
	assert_int_equal(w.m->st.s->n_pools, 0);
	assert_int_equal(w.m->st.s->n_acl, 0);
	world_end(&w);
}

static void test_encryption(void **state)
{
	Lode__Mgmt__V1__ContCreateRequest req = LODE__MGMT__V1__CONT_CREATE_REQUEST__INIT;
	Lode__Mgmt__V1__ContProps pr = LODE__MGMT__V1__CONT_PROPS__INIT;
	Lode__Mgmt__V1__OpenContainerReply *oc;
	Lode__Mgmt__V1__ContInfo *ci;
	uint8_t wrapped[AUTH_WRAPPED_SIZE + 1];
	struct world w;

	world_make(&w, "crypt");
	for (size_t i = 0; i < sizeof(wrapped); i++)
		wrapped[i] = (uint8_t)(0xa5 ^ i);
	pr.encryption = true;
	req.pool = "default";
	req.label = "secret";
	req.props = &pr;
	/* The data key is the client's; the service needs it wrapped, whole. */
	assert_int_equal(call(w.m, "ContCreate", &req, &w.bob, NULL), RPC_INVALID_ARGUMENT);
	req.wrapped_key.data = wrapped;
	req.wrapped_key.len = AUTH_WRAPPED_SIZE - 1;
	assert_int_equal(call(w.m, "ContCreate", &req, &w.bob, NULL), RPC_INVALID_ARGUMENT);
	req.wrapped_key.len = AUTH_WRAPPED_SIZE + 1;
	assert_int_equal(call(w.m, "ContCreate", &req, &w.bob, NULL), RPC_INVALID_ARGUMENT);
	assert_null(ms_cont_find(w.m->st.s, "default", "secret"));
	req.wrapped_key.len = AUTH_WRAPPED_SIZE;
	assert_int_equal(call(w.m, "ContCreate", &req, &w.bob, NULL), RPC_OK);
	assert_int_equal(
		cont_call(w.m, "ContQuery", &w.bob, "default", "secret", (ProtobufCMessage **)&ci),
		RPC_OK);
	assert_true(ci->props->encryption);
	assert_int_equal(ci->wrapped_key.len, 0); /* only OpenContainer hands it out */
	protobuf_c_message_free_unpacked(&ci->base, NULL);
	assert_int_equal(cont_call(w.m, "OpenContainer", &w.bob, "default", "secret",
				   (ProtobufCMessage **)&oc),
			 RPC_OK);
	/* Opaque: exactly the bytes the creator sent. */
	assert_int_equal(oc->info->wrapped_key.len, AUTH_WRAPPED_SIZE);
	assert_memory_equal(oc->info->wrapped_key.data, wrapped, AUTH_WRAPPED_SIZE);
	protobuf_c_message_free_unpacked(&oc->base, NULL);
	/* Unencrypted containers have none, and a key sent for one is not kept. */
	req.label = "plain";
	pr.encryption = false;
	assert_int_equal(call(w.m, "ContCreate", &req, &w.bob, NULL), RPC_OK);
	assert_int_equal(
		cont_call(w.m, "OpenContainer", &w.bob, "default", "plain", (ProtobufCMessage **)&oc),
		RPC_OK);
	assert_int_equal(oc->info->wrapped_key.len, 0);
	protobuf_c_message_free_unpacked(&oc->base, NULL);
	assert_int_equal(
		cont_call(w.m, "OpenContainer", &w.bob, "default", "c1", (ProtobufCMessage **)&oc),
		RPC_OK);
	assert_int_equal(oc->info->wrapped_key.len, 0);
	protobuf_c_message_free_unpacked(&oc->base, NULL);
	world_end(&w);
}

static bool mem_has(const uint8_t *hay, size_t n, const uint8_t *needle, size_t k)
{
	for (size_t i = 0; i + k <= n; i++)
		if (memcmp(hay + i, needle, k) == 0)
			return true;
	return false;
}

/*
 * A state file from before the tenant keys moved to the clients holds a
 * 32-byte key in each Tenant's field 4 (now reserved): it still loads, and
 * the next write leaves the key out.
 */
static void test_old_tenant_keys(void **state)
{
	uint8_t key[32], *tbuf, *sbuf;
	size_t tlen, slen;
	ms_state *s;
	ms_tenant *old;
	struct world w;
	char path[700];
	FILE *f;

	world_make(&w, "oldkeys");
	for (size_t i = 0; i < sizeof(key); i++)
		key[i] = (uint8_t)(0x3c + 7 * i);
	s = lode__mgmt__state__v1__state__unpack(NULL, w.m->st.saved_len, w.m->st.saved);
	assert_non_null(s);
	assert_true(s->n_tenants >= 2);
	/* Tenant 1 as the old code wrote it: its fields, then "4: 32 bytes". */
	tlen = protobuf_c_message_get_packed_size(&s->tenants[1]->base);
	tbuf = malloc(tlen + 2 + sizeof(key));
	protobuf_c_message_pack(&s->tenants[1]->base, tbuf);
	tbuf[tlen] = 4 << 3 | 2;
	tbuf[tlen + 1] = sizeof(key);
	memcpy(tbuf + tlen + 2, key, sizeof(key));
	old = lode__mgmt__state__v1__tenant__unpack(NULL, tlen + 2 + sizeof(key), tbuf);
	assert_non_null(old);
	assert_int_equal(old->base.n_unknown_fields, 1);
	protobuf_c_message_free_unpacked(&s->tenants[1]->base, NULL);
	s->tenants[1] = old;
	slen = protobuf_c_message_get_packed_size(&s->base);
	sbuf = malloc(slen);
	protobuf_c_message_pack(&s->base, sbuf);
	assert_true(mem_has(sbuf, slen, key, sizeof(key)));
	protobuf_c_message_free_unpacked(&s->base, NULL);
	mgmt_close(w.m);
	snprintf(path, sizeof(path), "%s/state.pb", test_dir);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(sbuf, 1, slen, f), slen);
	fclose(f);

	w.m = svc_open(test_dir);
	assert_non_null(ms_tenant_find(w.m->st.s, "acme"));
	assert_int_equal(ms_tenant_find(w.m->st.s, "acme")->base.n_unknown_fields, 0);
	assert_true(cont_listed(w.m, &w.bob, "c1"));
	assert_int_equal(cont_create(w.m, &w.bob, "default", "c2", NULL), RPC_OK);
	assert_false(mem_has(w.m->st.saved, w.m->st.saved_len, key, sizeof(key)));
	free(tbuf);
	free(sbuf);
	world_end(&w);
}

static void file_put(const char *path, const void *buf, size_t len)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(fwrite(buf, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

static void test_persistence(void **state)
{
	char secret[80], path[700], cred[600];
	struct mgmt_config cfg = {.ntargets = NTARGETS, .admin_cred = cred};
	struct mgmt *m2 = NULL;
	struct world w;
	struct stat sb;
	uint8_t *saved;
	size_t saved_len;
	struct sess cc, renewed;
	int rc;

	world_make(&w, "persist");
	snprintf(secret, sizeof(secret), "%s", w.m->admin_secret);
	assert_int_equal(cont_open(w.m, &w.bob, "c1", &cc, NULL), 0);
	assert_int_equal(empty_call(w.m, "RotateKey", &w.root, NULL), RPC_OK);
	assert_int_equal(name_call(w.m, "UserRevoke", &w.root, "beta/eve", NULL), RPC_OK);
	snprintf(path, sizeof(path), "%s/state.pb", test_dir);
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);
	assert_int_equal(stat(test_dir, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0700);
	saved_len = w.m->st.saved_len;
	saved = malloc(saved_len);
	memcpy(saved, w.m->st.saved, saved_len);

	/* A second service on the same directory is refused while the first runs. */
	snprintf(cred, sizeof(cred), "%s/admin.cred", test_dir);
	cfg.state_dir = test_dir;
	assert_int_equal(mgmt_open(&cfg, &hooks, &m2, msg, sizeof(msg)), -EBUSY);
	mgmt_close(w.m);

	/* Everything is back: same bytes, same secrets, same keys, same revocations. */
	w.m = svc_open(test_dir);
	assert_false(w.m->first_start);
	assert_int_equal(w.m->st.saved_len, saved_len);
	assert_memory_equal(w.m->st.saved, saved, saved_len);
	assert_int_equal(signing_key(w.m, &w.bob), 2);
	assert_int_equal(empty_call(w.m, "PoolListAll", &w.bob, NULL),
			 RPC_OK); /* key 1 still verifies */
	assert_int_equal(empty_call(w.m, "PoolListAll", &w.eve, NULL), RPC_UNAUTHENTICATED);
	assert_int_equal(auth_cap_verify(mgmt_keyring(w.m), mgmt_revoked(w.m), cc.cap, cc.len,
					 mgmt_now_ms(w.m), NULL),
			 0);
	renewed = connect_ok(w.m, "admin", secret);
	assert_int_equal(cap_of(&renewed).key_id, 2);
	assert_true(cont_listed(w.m, &w.bob, "c1"));
	assert_int_equal(sess_connect(w.m, "beta/eve", "eve-secret", "", "", &renewed),
			 RPC_UNAUTHENTICATED);
	mgmt_close(w.m);

	/* A damaged file refuses to start, and is left as it was. */
	file_put(path, "\xff\xff\xff\xff garbage", 13);
	rc = mgmt_open(&cfg, &hooks, &m2, msg, sizeof(msg));
	assert_int_equal(rc, -LODE_ECORRUPT);
	assert_non_null(strstr(msg, "state.pb"));
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_size, 13);
	file_put(path, "", 0); /* unpacks, as version 0: still not a state */
	assert_int_equal(mgmt_open(&cfg, &hooks, &m2, msg, sizeof(msg)), -LODE_ECORRUPT);
	/* A truncated one too. */
	file_put(path, saved, saved_len / 2);
	assert_int_equal(mgmt_open(&cfg, &hooks, &m2, msg, sizeof(msg)), -LODE_ECORRUPT);
	file_put(path, saved, saved_len);
	w.m = svc_open(test_dir);
	assert_int_equal(signing_key(w.m, &w.bob), 2);
	free(saved);
	world_end(&w);
}

static void test_failed_write_rolls_back(void **state)
{
	char path[700];
	struct world w;
	struct sess cc;
	uint32_t n_users;

	world_make(&w, "rollback");
	snprintf(path, sizeof(path), "%s/state.pb", test_dir);
	n_users = (uint32_t)w.m->st.s->n_users;
	assert_int_equal(cont_open(w.m, &w.bob, "c1", &cc, NULL), 0);
	/* A directory where state.pb goes: the rename fails, whoever runs the test. */
	assert_int_equal(unlink(path), 0);
	assert_int_equal(mkdir(path, 0700), 0);

	assert_int_equal(cont_create(w.m, &w.bob, "default", "c2", NULL), RPC_INTERNAL);
	assert_int_equal(cont_call(w.m, "ContQuery", &w.bob, "default", "c2", NULL), RPC_NOT_FOUND);
	user_create(w.m, &w.root, "acme", "zed", "zed-secret", false, false, RPC_INTERNAL);
	assert_int_equal(w.m->st.s->n_users, n_users);
	assert_int_equal(name_call(w.m, "UserRevoke", &w.root, "acme/bob", NULL), RPC_INTERNAL);
	/* Not revoked anywhere: not in the model, not on the targets. */
	assert_int_equal(empty_call(w.m, "PoolListAll", &w.bob, NULL), RPC_OK);
	assert_int_equal(auth_cap_verify(mgmt_keyring(w.m), mgmt_revoked(w.m), cc.cap, cc.len,
					 mgmt_now_ms(w.m), NULL),
			 0);
	assert_int_equal(empty_call(w.m, "RotateKey", &w.root, NULL), RPC_INTERNAL);
	assert_int_equal(signing_key(w.m, &w.bob), 1);
	assert_int_equal(cont_open(w.m, &w.bob, "c1", &cc, NULL), 0);
	assert_int_equal(cap_of(&cc).key_id, 1);
	assert_int_equal(cont_call(w.m, "ContDestroy", &w.bob, "default", "c1", NULL),
			 RPC_INTERNAL);
	assert_true(cont_listed(w.m, &w.bob, "c1"));
	assert_int_equal(name_call(w.m, "TenantDestroy", &w.root, "beta", NULL), RPC_INTERNAL);
	assert_int_equal(empty_call(w.m, "PoolListAll", &w.eve, NULL), RPC_OK);
	acl_set(w.m, &w.bob, "default/c1", "tenant:beta", AUTH_R_READ, RPC_INTERNAL);
	assert_int_equal(cont_open(w.m, &w.eve, "c1", NULL, NULL), RPC_PERMISSION_DENIED);

	/* The disk back: changes go through again, and restart finds them. */
	assert_int_equal(rmdir(path), 0);
	assert_int_equal(cont_create(w.m, &w.bob, "default", "c2", NULL), RPC_OK);
	mgmt_close(w.m);
	w.m = svc_open(test_dir);
	assert_true(cont_listed(w.m, &w.bob, "c2"));
	assert_int_equal(w.m->st.s->n_users, n_users);
	world_end(&w);
}

static void test_system_query(void **state)
{
	Lode__Mgmt__V1__SystemStatus *ss;
	struct world w;

	world_make(&w, "system");
	assert_int_equal(empty_call(w.m, "SystemQuery", &w.eve, (ProtobufCMessage **)&ss), RPC_OK);
	assert_int_equal(ss->capacity, NTARGETS * CAPACITY);
	assert_int_equal(ss->used, NTARGETS * 100);
	assert_int_equal(ss->pools, 1);
	assert_int_equal(ss->containers, 1);
	assert_int_equal(ss->signing_key_id, 1);
	assert_non_null(ss->map);
	assert_int_equal(ss->map->n_engines, 1);
	assert_string_equal(ss->map->engines[0]->address, "127.0.0.1:1");
	assert_int_equal(ss->map->engines[0]->n_targets, NTARGETS);
	assert_int_equal(ss->map->engines[0]->targets[1]->id, 1);
	protobuf_c_message_free_unpacked(&ss->base, NULL);
	assert_non_null(mgmt_method_find("RotateKey"));
	assert_null(mgmt_method_find("Nope"));
	assert_int_equal(mgmt_nmethods, 31);
	/* The host engine is the map: UP, with the defaults for heartbeats. */
	assert_int_equal(empty_call(w.m, "SystemQuery", &w.eve, (ProtobufCMessage **)&ss), RPC_OK);
	assert_int_equal(ss->map->version, 1);
	assert_int_equal(ss->map->heartbeat_ms, 500);
	assert_int_equal(ss->map->grace_ms, 3000);
	assert_int_equal(ss->map->engines[0]->id, 0);
	assert_int_equal(ss->map->engines[0]->state, LODE__MGMT__V1__STATE__STATE_UP);
	assert_int_equal(ss->map->engines[0]->uuid.len, 16);
	assert_int_equal(ss->map->engines[0]->heartbeat_unix_ms, 0);
	assert_int_equal(ss->map->engines[0]->targets[0]->state, LODE__MGMT__V1__STATE__STATE_UP);
	protobuf_c_message_free_unpacked(&ss->base, NULL);
	world_end(&w);
}

/* ---- the pool map ------------------------------------------------------------------ */

#define S_UP LODE__MGMT__V1__STATE__STATE_UP
#define S_DOWN LODE__MGMT__V1__STATE__STATE_DOWN
#define S_DRAIN LODE__MGMT__V1__STATE__STATE_DRAIN
#define S_NEW LODE__MGMT__V1__STATE__STATE_NEW
#define S_OUT LODE__MGMT__V1__STATE__STATE_OUT

/* Engine uuids in the tests: 16 bytes of b. */
static void uuid_of(uint8_t b, uint8_t out[16])
{
	memset(out, b, 16);
}

static int engine_join(struct mgmt *m, const struct sess *s, uint8_t u, const char *addr,
		       uint32_t ntargets, Lode__Mgmt__V1__EngineJoinReply **reply)
{
	Lode__Mgmt__V1__EngineJoinRequest req = LODE__MGMT__V1__ENGINE_JOIN_REQUEST__INIT;
	uint8_t uuid[16];

	uuid_of(u, uuid);
	req.uuid.data = uuid;
	req.uuid.len = u ? 16 : 0;
	req.address = (char *)addr;
	req.ntargets = ntargets;
	return call(m, "EngineJoin", &req, s, (ProtobufCMessage **)reply);
}

/* Join and return the engine's id. */
static uint32_t join_ok(struct mgmt *m, const struct sess *s, uint8_t u, const char *addr)
{
	Lode__Mgmt__V1__EngineJoinReply *r;
	uint32_t id;
	int st = engine_join(m, s, u, addr, 2, &r);

	if (st)
		fail_msg("EngineJoin: %d (%s)", st, msg);
	id = r->engine_id;
	protobuf_c_message_free_unpacked(&r->base, NULL);
	return id;
}

static int heartbeat(struct mgmt *m, const struct sess *s, uint32_t id, uint8_t u,
		     const Lode__Mgmt__V1__RebuildStatus *rb, Lode__Mgmt__V1__HeartbeatReply **reply)
{
	Lode__Mgmt__V1__HeartbeatRequest req = LODE__MGMT__V1__HEARTBEAT_REQUEST__INIT;
	uint8_t uuid[16];

	uuid_of(u, uuid);
	req.engine_id = id;
	req.uuid.data = uuid;
	req.uuid.len = 16;
	req.rebuild = (Lode__Mgmt__V1__RebuildStatus *)rb;
	return call(m, "EngineHeartbeat", &req, s, (ProtobufCMessage **)reply);
}

static int set_state(struct mgmt *m, const struct sess *s, uint32_t id,
		     Lode__Mgmt__V1__State state)
{
	Lode__Mgmt__V1__EngineStateRequest req = LODE__MGMT__V1__ENGINE_STATE_REQUEST__INIT;

	req.engine_id = id;
	req.state = state;
	return call(m, "EngineSetState", &req, s, NULL);
}

static Lode__Mgmt__V1__PoolMap *map_get(struct mgmt *m, const struct sess *s)
{
	Lode__Mgmt__V1__PoolMap *r;

	assert_int_equal(empty_call(m, "PoolMapGet", s, (ProtobufCMessage **)&r), RPC_OK);
	return r;
}

/* Engine id's state in the map (STATE_UNKNOWN: not in it), and the version. */
static int engine_state(struct mgmt *m, const struct sess *s, uint32_t id, uint32_t *version)
{
	Lode__Mgmt__V1__PoolMap *map = map_get(m, s);
	int st = LODE__MGMT__V1__STATE__STATE_UNKNOWN;

	for (size_t i = 0; i < map->n_engines; i++)
		if (map->engines[i]->id == id)
			st = map->engines[i]->state;
	if (version)
		*version = map->version;
	protobuf_c_message_free_unpacked(&map->base, NULL);
	return st;
}

static Lode__Mgmt__V1__RebuildStatus *pool_rebuild(struct mgmt *m, const struct sess *s,
						   Lode__Mgmt__V1__PoolInfo **info)
{
	Lode__Mgmt__V1__PoolRef req = LODE__MGMT__V1__POOL_REF__INIT;

	req.label = "default";
	assert_int_equal(call(m, "PoolQuery", &req, s, (ProtobufCMessage **)info), RPC_OK);
	assert_non_null((*info)->map);
	assert_non_null((*info)->rebuild);
	return (*info)->rebuild;
}

/* A service with no container yet (engines join UP), its administrator, a
 * node user of tenant system and a plain user. */
struct bare {
	struct mgmt *m;
	struct sess root, node, plain;
};

static void bare_make(struct bare *w, const char *name)
{
	dir_fresh(test_dir, sizeof(test_dir), name);
	w->m = svc_open(test_dir);
	w->root = connect_ok(w->m, "admin", w->m->admin_secret);
	user_create(w->m, &w->root, "", "node", "node-secret", false, true, RPC_OK);
	user_create(w->m, &w->root, "", "plain", "plain-secret", false, false, RPC_OK);
	w->node = connect_ok(w->m, "node", "node-secret");
	w->plain = connect_ok(w->m, "plain", "plain-secret");
}

static void bare_end(struct bare *w)
{
	struct world x = {.m = w->m};

	world_end(&x);
}

/* The map's settled and reclaimed versions (docs/decisions/0014). */
static void map_reclaim(struct mgmt *m, const struct sess *s, uint32_t *version,
			uint32_t *settled, uint32_t *reclaimed)
{
	Lode__Mgmt__V1__PoolMap *map = map_get(m, s);

	*version = map->version;
	*settled = map->settled_version;
	*reclaimed = map->reclaimed_version;
	protobuf_c_message_free_unpacked(&map->base, NULL);
}

/* Engine id (uuid byte u) says it has reclaimed the map's settled layout. */
static int reclaim_ok(struct mgmt *m, const struct sess *root, const struct sess *s, uint32_t id,
		      uint8_t u)
{
	Lode__Mgmt__V1__RebuildStatus rb = LODE__MGMT__V1__REBUILD_STATUS__INIT;
	uint32_t v, settled, reclaimed;

	map_reclaim(m, root, &v, &settled, &reclaimed);
	rb.reclaimed_version = settled;
	return heartbeat(m, s, id, u, &rb, NULL);
}

static void test_engine_join(void **state)
{
	Lode__Mgmt__V1__EngineJoinReply *r;
	struct world wd;
	struct bare w;
	uint32_t v0, v;

	bare_make(&w, "join");
	assert_int_equal(engine_state(w.m, &w.root, 0, &v0), S_UP);
	/* Who may: a node user of system or a system administrator. */
	assert_int_equal(engine_join(w.m, &w.plain, 1, "10.0.0.1:7000", 2, NULL),
			 RPC_PERMISSION_DENIED);
	assert_int_equal(engine_join(w.m, NULL, 1, "10.0.0.1:7000", 2, NULL), RPC_UNAUTHENTICATED);
	/* A new engine, while no container exists: UP at once, the next id. */
	assert_int_equal(engine_join(w.m, &w.node, 1, "10.0.0.1:7000", 2, &r), RPC_OK);
	assert_int_equal(r->engine_id, 1);
	assert_non_null(r->map);
	assert_int_equal(r->map->version, v0 + 1);
	assert_int_equal(r->map->n_engines, 2);
	assert_int_equal(r->map->engines[1]->state, S_UP);
	assert_string_equal(r->map->engines[1]->address, "10.0.0.1:7000");
	assert_int_equal(r->map->engines[1]->n_targets, 2);
	/* Everything a target needs to verify tokens: every key, every revocation. */
	assert_int_equal(r->n_keys, 1);
	assert_int_equal(r->keys[0]->id, 1);
	assert_int_equal(r->keys[0]->key.len, AUTH_KEY_SIZE);
	assert_memory_equal(r->keys[0]->key.data, w.m->st.s->keys[0]->key.data, AUTH_KEY_SIZE);
	assert_int_equal(r->n_revocations, 0);
	protobuf_c_message_free_unpacked(&r->base, NULL);
	assert_int_equal(join_ok(w.m, &w.root, 2, "10.0.0.2:7000"), 2);
	/* The same uuid again: its id back, nothing changed, no new version. */
	assert_int_equal(engine_state(w.m, &w.root, 1, &v0), S_UP);
	assert_int_equal(join_ok(w.m, &w.node, 1, "10.0.0.1:7000"), 1);
	assert_int_equal(engine_state(w.m, &w.root, 1, &v), S_UP);
	assert_int_equal(v, v0);
	/* A new address is a change; a DOWN engine that rejoins stays DOWN. */
	assert_int_equal(set_state(w.m, &w.root, 1, S_DOWN), RPC_OK);
	assert_int_equal(join_ok(w.m, &w.node, 1, "10.0.0.9:7001"), 1);
	assert_int_equal(engine_state(w.m, &w.root, 1, &v), S_DOWN);
	assert_int_equal(v, v0 + 2);
	assert_string_equal(ms_engine_by_id(w.m->st.s, 1)->address, "10.0.0.9:7001");
	/* Its targets are fixed. */
	assert_int_equal(engine_join(w.m, &w.node, 1, "10.0.0.9:7001", 3, NULL),
			 RPC_FAILED_PRECONDITION);
	assert_non_null(strstr(msg, "fixed"));
	/* Bad fields. */
	assert_int_equal(engine_join(w.m, &w.node, 0, "10.0.0.3:7000", 2, NULL),
			 RPC_INVALID_ARGUMENT);
	{
		Lode__Mgmt__V1__EngineJoinRequest req = LODE__MGMT__V1__ENGINE_JOIN_REQUEST__INIT;
		static uint8_t zero[16], short_uuid[15] = {1};

		req.address = "10.0.0.3:7000";
		req.ntargets = 2;
		req.uuid.data = zero;
		req.uuid.len = 16;
		expect(w.m, "EngineJoin", &req, &w.node, RPC_INVALID_ARGUMENT);
		req.uuid.data = short_uuid;
		req.uuid.len = sizeof(short_uuid);
		expect(w.m, "EngineJoin", &req, &w.node, RPC_INVALID_ARGUMENT);
	}
	static const char *const bad_addr[] = {"", "10.0.0.3", ":7000", "h:", "h:0", "h:65536",
					       "h:7x", "h o:1", "[::1:7000"};

	for (size_t i = 0; i < sizeof(bad_addr) / sizeof(bad_addr[0]); i++)
		assert_int_equal(engine_join(w.m, &w.node, 3, bad_addr[i], 2, NULL),
				 RPC_INVALID_ARGUMENT);
	assert_int_equal(engine_join(w.m, &w.node, 3, "[::1]:7000", 2, NULL), RPC_OK);
	assert_int_equal(engine_join(w.m, &w.node, 4, "h:1", 0, NULL), RPC_INVALID_ARGUMENT);
	assert_int_equal(engine_join(w.m, &w.node, 4, "h:1", 65, NULL), RPC_INVALID_ARGUMENT);
	assert_int_equal(engine_join(w.m, &w.node, 4, "h:1", 64, NULL), RPC_OK);
	bare_end(&w);

	/* Once a container exists, a new engine waits as NEW; a tenant
	 * administrator may not join one. */
	world_make(&wd, "join-new");
	assert_int_equal(engine_join(wd.m, &wd.acme_admin, 1, "h:1", 2, NULL),
			 RPC_PERMISSION_DENIED);
	assert_int_equal(engine_join(wd.m, &wd.agent, 1, "h:1", 2, &r), RPC_OK);
	assert_int_equal(r->map->engines[1]->state, S_NEW);
	protobuf_c_message_free_unpacked(&r->base, NULL);
	world_end(&wd);
}

static void test_engine_heartbeat(void **state)
{
	Lode__Mgmt__V1__HeartbeatRequest req = LODE__MGMT__V1__HEARTBEAT_REQUEST__INIT;
	Lode__Mgmt__V1__Target t0 = LODE__MGMT__V1__TARGET__INIT, *tp[1] = {&t0};
	Lode__Mgmt__V1__HeartbeatReply *r;
	Lode__Mgmt__V1__SystemStatus *ss;
	uint8_t uuid[16];
	struct bare w;
	uint32_t id;

	bare_make(&w, "heartbeat");
	id = join_ok(w.m, &w.node, 7, "10.0.0.7:7000");
	assert_int_equal(heartbeat(w.m, &w.plain, id, 7, NULL, NULL), RPC_PERMISSION_DENIED);
	/* Unknown: join again. */
	assert_int_equal(heartbeat(w.m, &w.node, id + 1, 7, NULL, NULL), RPC_NOT_FOUND);
	assert_non_null(strstr(msg, "join"));
	assert_int_equal(heartbeat(w.m, &w.node, id, 8, NULL, NULL), RPC_NOT_FOUND);
	assert_int_equal(heartbeat(w.m, &w.node, 0, 7, NULL, NULL), RPC_NOT_FOUND);
	/* Its targets' numbers show in the map. */
	uuid_of(7, uuid);
	req.engine_id = id;
	req.uuid.data = uuid;
	req.uuid.len = 16;
	t0.id = 1;
	t0.capacity = 5000;
	t0.used = 70;
	req.targets = tp;
	req.n_targets = 1;
	assert_int_equal(call(w.m, "EngineHeartbeat", &req, &w.node, (ProtobufCMessage **)&r),
			 RPC_OK);
	assert_int_equal(r->n_keys, 1);
	assert_int_equal(r->n_revocations, 0);
	assert_true(r->map->engines[1]->heartbeat_unix_ms > 0);
	assert_int_equal(r->map->engines[1]->targets[1]->capacity, 5000);
	assert_int_equal(r->map->engines[1]->targets[0]->capacity, 0);
	/* An engine that holds the current version is not sent it again; one
	 * a version behind is. */
	req.map_version = r->map->version;
	protobuf_c_message_free_unpacked(&r->base, NULL);
	assert_int_equal(call(w.m, "EngineHeartbeat", &req, &w.node, (ProtobufCMessage **)&r),
			 RPC_OK);
	assert_null(r->map);
	assert_int_equal(r->n_keys, 1);
	/* The settings come without the map: a restart may change them. */
	assert_int_equal(r->heartbeat_ms, w.m->heartbeat_ms);
	assert_int_equal(r->grace_ms, w.m->grace_ms);
	protobuf_c_message_free_unpacked(&r->base, NULL);
	req.map_version--;
	assert_int_equal(call(w.m, "EngineHeartbeat", &req, &w.node, (ProtobufCMessage **)&r),
			 RPC_OK);
	assert_non_null(r->map);
	assert_int_equal(r->map->version, req.map_version + 1);
	protobuf_c_message_free_unpacked(&r->base, NULL);
	req.map_version = 0;
	assert_int_equal(empty_call(w.m, "SystemQuery", &w.root, (ProtobufCMessage **)&ss), RPC_OK);
	assert_int_equal(ss->capacity, NTARGETS * CAPACITY + 5000);
	assert_int_equal(ss->used, NTARGETS * 100 + 70);
	protobuf_c_message_free_unpacked(&ss->base, NULL);
	t0.id = 2; /* it has 2 */
	expect(w.m, "EngineHeartbeat", &req, &w.node, RPC_INVALID_ARGUMENT);
	/* A rotation and a revocation show up in the next reply. */
	assert_int_equal(empty_call(w.m, "RotateKey", &w.root, NULL), RPC_OK);
	assert_int_equal(name_call(w.m, "UserRevoke", &w.root, "plain", NULL), RPC_OK);
	assert_int_equal(heartbeat(w.m, &w.node, id, 7, NULL, &r), RPC_OK);
	assert_int_equal(r->n_keys, 2);
	assert_int_equal(r->keys[0]->id, 1);
	assert_true(r->keys[0]->retired_unix_ms > 0);
	assert_int_equal(r->keys[1]->id, 2);
	assert_int_equal(r->keys[1]->retired_unix_ms, 0);
	assert_int_equal(r->n_revocations, 1);
	assert_int_equal(r->revocations[0]->user, ms_user_find(w.m->st.s, 1, "plain")->id);
	assert_true(r->revocations[0]->before_unix_ms > 0);
	protobuf_c_message_free_unpacked(&r->base, NULL);
	bare_end(&w);
}

/* Engine e, silent since now: still UP at now + early_ms, DOWN past the grace. */
static void up_then_down(struct world *w, uint32_t e, int64_t now, int64_t early_ms)
{
	assert_int_equal(mgmt_tick(w->m, now + early_ms), 0);
	assert_int_equal(engine_state(w->m, &w->root, e, NULL), S_UP);
	assert_int_equal(mgmt_tick(w->m, now + 3100), 1);
	assert_int_equal(engine_state(w->m, &w->root, e, NULL), S_DOWN);
}

static void test_engine_detection(void **state)
{
	struct world w;
	uint32_t up, nw, v0, v;
	int64_t now;

	world_make(&w, "detect");
	/* Short so that the numbers read well; the clock is driven by hand. */
	w.m->grace_ms = 3000;
	up = join_ok(w.m, &w.agent, 1, "h:1");
	assert_int_equal(engine_state(w.m, &w.root, up, NULL), S_NEW);
	/* Not integrated before it says it is ready (reclaimed), although the
	 * host has nothing to rebuild. */
	assert_int_equal(mgmt_tick(w.m, mgmt_live_ms(w.m)), 0);
	assert_int_equal(engine_state(w.m, &w.root, up, NULL), S_NEW);
	/* Its report completes the integration at once; make it UP that way. */
	assert_int_equal(reclaim_ok(w.m, &w.root, &w.agent, up, 1), RPC_OK);
	assert_int_equal(engine_state(w.m, &w.root, up, NULL), S_UP);
	nw = join_ok(w.m, &w.agent, 2, "h:2");
	assert_int_equal(engine_state(w.m, &w.root, nw, &v0), S_NEW);
	now = mgmt_live_ms(w.m);
	/* Within grace: nothing. */
	assert_int_equal(heartbeat(w.m, &w.agent, up, 1, NULL, NULL), RPC_OK);
	assert_int_equal(heartbeat(w.m, &w.agent, nw, 2, NULL, NULL), RPC_OK);
	assert_int_equal(mgmt_tick(w.m, now + 2000), 0);
	assert_int_equal(engine_state(w.m, &w.root, up, &v), S_UP);
	assert_int_equal(v, v0);
	/* Silent past grace: the UP one DOWN, the NEW one gone, one new version. */
	assert_int_equal(mgmt_tick(w.m, now + 3100), 1);
	assert_int_equal(engine_state(w.m, &w.root, up, &v), S_DOWN);
	assert_int_equal(v, v0 + 1);
	assert_int_equal(engine_state(w.m, &w.root, nw, NULL),
			 LODE__MGMT__V1__STATE__STATE_UNKNOWN);
	assert_null(ms_engine_by_id(w.m->st.s, nw));
	assert_int_equal(heartbeat(w.m, &w.agent, nw, 2, NULL, NULL), RPC_NOT_FOUND);
	/* The host never goes DOWN. It is the one engine left to rebuild, and
	 * reports nothing (nothing to do), so the next check completes the
	 * rebuild: the DOWN engine goes OUT; then there is nothing to do. */
	assert_int_equal(mgmt_tick(w.m, now + 100000), 1);
	assert_int_equal(engine_state(w.m, &w.root, 0, &v), S_UP);
	assert_int_equal(engine_state(w.m, &w.root, up, &v), S_OUT);
	assert_int_equal(v, v0 + 2);
	/* The new layout is reclaimed (the host, reporting nothing, has
	 * nothing of the old one): one more version says so, then nothing. */
	assert_int_equal(mgmt_tick(w.m, now + 150000), 1);
	assert_int_equal(engine_state(w.m, &w.root, 0, &v), S_UP);
	assert_int_equal(v, v0 + 3);
	assert_int_equal(mgmt_tick(w.m, now + 200000), 0);
	/* Rejoining after removal is a new engine: a new id, never the old one. */
	assert_int_equal(join_ok(w.m, &w.agent, 2, "h:2"), nw + 1);
	/* Back from OUT: refused at its next heartbeat, it joins again as a new
	 * engine; with the other NEW one, integrated once both are ready. */
	assert_int_equal(set_state(w.m, &w.root, up, S_UP), RPC_OK);
	assert_int_equal(engine_state(w.m, &w.root, up, NULL), S_OUT);
	assert_int_equal(heartbeat(w.m, &w.agent, up, 1, NULL, NULL), RPC_NOT_FOUND);
	up = join_ok(w.m, &w.agent, 1, "h:1");
	assert_int_equal(up, nw + 2);
	assert_int_equal(reclaim_ok(w.m, &w.root, &w.agent, up, 1), RPC_OK);
	assert_int_equal(engine_state(w.m, &w.root, up, NULL), S_NEW);
	assert_int_equal(reclaim_ok(w.m, &w.root, &w.agent, nw + 1, 2), RPC_OK);
	assert_int_equal(engine_state(w.m, &w.root, up, NULL), S_UP);
	assert_int_equal(engine_state(w.m, &w.root, nw + 1, NULL), S_UP);
	/* A silent DRAIN engine goes DOWN too (its shards are rebuilt). */
	assert_int_equal(set_state(w.m, &w.root, up, S_DRAIN), RPC_OK);
	now = mgmt_live_ms(w.m);
	assert_int_equal(heartbeat(w.m, &w.agent, up, 1, NULL, NULL), RPC_OK);
	assert_int_equal(heartbeat(w.m, &w.agent, nw + 1, 2, NULL, NULL), RPC_OK);
	engine_state(w.m, &w.root, up, &v0);
	assert_int_equal(mgmt_tick(w.m, now + 3100), 1);
	assert_int_equal(engine_state(w.m, &w.root, up, &v), S_DOWN);
	assert_int_equal(v, v0 + 1);

	/* A restart: silence counts from the restart, not from before it. */
	assert_int_equal(set_state(w.m, &w.root, up, S_UP), RPC_OK);
	w.m->live_skew_ms = -60000; /* its last heartbeat, a minute ago */
	assert_int_equal(heartbeat(w.m, &w.agent, up, 1, NULL, NULL), RPC_OK);
	mgmt_close(w.m);
	w.m = svc_open(test_dir);
	up_then_down(&w, up, mgmt_live_ms(w.m), 1000);
	world_end(&w);
}

/* Holds the service's lock for 1.2 s once the test waits on the barrier. */
struct holder {
	struct mgmt *m;
	pthread_barrier_t held;
};

static void *hold_lock(void *arg)
{
	struct holder *h = arg;

	pthread_mutex_lock(&h->m->lock);
	pthread_barrier_wait(&h->held);
	usleep(1200 * 1000);
	pthread_mutex_unlock(&h->m->lock);
	return NULL;
}

/* A world whose clock reads well: a 3 s grace, heartbeats every 200 ms. */
static void world_make_timed(struct world *w, const char *name)
{
	world_make(w, name);
	w->m->grace_ms = 3000;
	w->m->heartbeat_ms = 200;
}

/* Engine n (at addr) joined and its report in, so UP when it is alone. Returns its id. */
static uint32_t join_up(struct world *w, uint32_t n, const char *addr)
{
	uint32_t e = join_ok(w->m, &w->agent, n, addr);

	assert_int_equal(reclaim_ok(w->m, &w->root, &w->agent, e, n), RPC_OK);
	return e;
}

/*
 * The service's own deafness is not the engines' silence: a call that
 * waited 1.2 s for the lock (as behind a slow handler) moves every
 * engine's silence on by that, so a check 3.1 s after the last heartbeat
 * (grace 3 s) finds the engine UP; a gap of a heartbeat or less, or a
 * stretch counted already, moves nothing; nor more than a grace between
 * two heartbeats; past the grace it goes DOWN.
 */
static void test_service_deaf(void **state)
{
	struct world w;
	struct holder h;
	pthread_t t;
	struct mgmt_engine_live *l;
	int64_t heard, moved;
	uint32_t up;

	world_make_timed(&w, "deaf");
	up = join_up(&w, 1, "h:1");
	assert_int_equal(engine_state(w.m, &w.root, up, NULL), S_UP);
	assert_int_equal(heartbeat(w.m, &w.agent, up, 1, NULL, NULL), RPC_OK);
	l = mgmt_live_get(w.m, up, 0);
	heard = l->silent_since_ms;

	h.m = w.m;
	assert_int_equal(pthread_barrier_init(&h.held, NULL, 2), 0);
	assert_int_equal(pthread_create(&t, NULL, hold_lock, &h), 0);
	pthread_barrier_wait(&h.held);
	assert_int_equal(engine_state(w.m, &w.root, up, NULL), S_UP); /* waits for the lock */
	pthread_join(t, NULL);
	pthread_barrier_destroy(&h.held);
	l = mgmt_live_get(w.m, up, 0);
	moved = l->silent_since_ms - heard;
	if (moved < 1000)
		fail_msg("the engine's silence moved %lld ms for a call that waited 1.2 s",
			 (long long)moved);
	assert_int_equal(mgmt_tick(w.m, heard + 3100), 0);
	assert_int_equal(engine_state(w.m, &w.root, up, NULL), S_UP);

	heard = l->silent_since_ms;
	pthread_mutex_lock(&w.m->lock);
	mgmt_live_deaf(w.m, heard + 10, heard + 10 + 200); /* a heartbeat's gap */
	mgmt_live_deaf(w.m, w.m->deaf_until_ms - 1000, w.m->deaf_until_ms + 150); /* mostly counted */
	pthread_mutex_unlock(&w.m->lock);
	assert_int_equal(mgmt_live_get(w.m, up, 0)->silent_since_ms, heard);
	/* At most a grace between heartbeats: a 5 s stretch moves it by what
	 * the first left of 3 s; a heartbeat starts the count again. */
	l = mgmt_live_get(w.m, up, 0);
	moved = l->deaf_ms;
	assert_true(moved >= 1000 && moved < 3000);
	pthread_mutex_lock(&w.m->lock);
	mgmt_live_deaf(w.m, w.m->deaf_until_ms + 1, w.m->deaf_until_ms + 5001);
	pthread_mutex_unlock(&w.m->lock);
	assert_int_equal(l->deaf_ms, 3000);
	assert_int_equal(l->silent_since_ms, heard + 3000 - moved);
	assert_int_equal(heartbeat(w.m, &w.agent, up, 1, NULL, NULL), RPC_OK);
	l = mgmt_live_get(w.m, up, 0);
	assert_int_equal(l->deaf_ms, 0);
	heard = l->silent_since_ms;
	assert_int_equal(mgmt_tick(w.m, heard + 3100), 1);
	assert_int_equal(engine_state(w.m, &w.root, up, NULL), S_DOWN);
	world_end(&w);
}

/*
 * The whole service not run for 4.5 s (SIGSTOP, or no CPU): the first call
 * to take the lock after it counts the stretch before it is handled, so a
 * heartbeat of one engine heard then does not leave the other, whose
 * heartbeat has not had its turn yet, silent for 4.5 s (grace 3 s). Past a
 * grace of real silence, it goes DOWN.
 */
static void test_service_stopped(void **state)
{
	struct world w;
	uint32_t e1, e2;
	int64_t now;

	(void)state;
	world_make_timed(&w, "stopped");
	e1 = join_ok(w.m, &w.agent, 1, "h:1");
	e2 = join_ok(w.m, &w.agent, 2, "h:2");
	assert_int_equal(reclaim_ok(w.m, &w.root, &w.agent, e1, 1), RPC_OK);
	assert_int_equal(reclaim_ok(w.m, &w.root, &w.agent, e2, 2), RPC_OK);
	assert_int_equal(engine_state(w.m, &w.root, e2, NULL), S_UP);
	/* Both last heard, and the lock last held, 4.5 s ago. */
	pthread_mutex_lock(&w.m->lock);
	now = mgmt_live_ms(w.m);
	w.m->awake_ms = now - 4500;
	w.m->deaf_until_ms = now - 4500;
	mgmt_live_get(w.m, e1, 0)->silent_since_ms = now - 4500;
	mgmt_live_get(w.m, e2, 0)->silent_since_ms = now - 4500;
	pthread_mutex_unlock(&w.m->lock);
	assert_int_equal(heartbeat(w.m, &w.agent, e1, 1, NULL, NULL), RPC_OK);
	/* Counted before the heartbeat was handled: e1's count starts again
	 * from none (counted after, it would hold the stretch), and e2's
	 * silence moved by a grace, all a stretch may move it. */
	assert_int_equal(mgmt_live_get(w.m, e1, 0)->deaf_ms, 0);
	assert_int_equal(mgmt_live_get(w.m, e2, 0)->deaf_ms, 3000);
	up_then_down(&w, e2, mgmt_live_ms(w.m), 100);
	world_end(&w);
}

/*
 * A follower counts its own deafness too, and no heartbeat comes to it to
 * clear the count, so a long-standing follower's count sits at a grace.
 * Elected, it counts again from none: a stretch of not being run right
 * after the election is still not the engine's silence.
 */
static void test_lead_restart(void **state)
{
	struct mgmt_engine_live *l;
	struct world w;
	int64_t since;
	uint32_t up;

	(void)state;
	world_make_timed(&w, "lead");
	up = join_up(&w, 1, "h:1");
	assert_int_equal(engine_state(w.m, &w.root, up, NULL), S_UP);
	pthread_mutex_lock(&w.m->lock);
	l = mgmt_live_get(w.m, up, 0);
	/* As a follower: 5 s not run, a grace of it counted. */
	mgmt_live_deaf(w.m, l->silent_since_ms + 1, l->silent_since_ms + 5001);
	assert_int_equal(l->deaf_ms, 3000);
	/* Elected (the role callback's time), then not run for 2.5 s: the
	 * first to take the lock after it counts the stretch, on counts the
	 * election reset first. */
	since = l->silent_since_ms + 6000;
	__atomic_store_n(&w.m->lead_since_ms, since, __ATOMIC_RELEASE);
	w.m->awake_ms = since + 100;
	mgmt_live_awake(w.m, since + 2600);
	assert_int_equal(l->deaf_ms, 2500);
	assert_int_equal(l->silent_since_ms, since + 2500);
	pthread_mutex_unlock(&w.m->lock);
	/* The timer's own look at the election, after its awake, finds it done. */
	pthread_mutex_lock(&w.m->lock);
	assert_true(mgmt_replica_lead(w.m));
	pthread_mutex_unlock(&w.m->lock);
	assert_int_equal(l->silent_since_ms, since + 2500);
	up_then_down(&w, up, since + 2500, 2900);
	world_end(&w);
}

/*
 * A step of the wall clock (NTP's, an operator's `date`) is no engine's
 * silence: an hour forward does not make a heartbeating engine DOWN, and
 * an hour back does not keep a silent one UP.
 */
static void test_wall_clock_step(void **state)
{
	struct world w;
	uint32_t up;

	(void)state;
	world_make_timed(&w, "step");
	up = join_up(&w, 1, "h:1");
	assert_int_equal(heartbeat(w.m, &w.agent, up, 1, NULL, NULL), RPC_OK);
	w.m->clock_skew_ms = 3600 * 1000;
	/* A call now (its capability may have expired meanwhile; the service
	 * counts time it was not run before looking at the caller). */
	(void)empty_call(w.m, "PoolMapGet", &w.root, NULL);
	assert_int_equal(mgmt_tick(w.m, mgmt_live_ms(w.m)), 0);
	w.m->clock_skew_ms = -3600 * 1000;
	(void)empty_call(w.m, "PoolMapGet", &w.root, NULL);
	assert_int_equal(mgmt_tick(w.m, mgmt_live_ms(w.m)), 0);
	w.m->clock_skew_ms = 0;
	assert_int_equal(engine_state(w.m, &w.root, up, NULL), S_UP);
	/* An hour back, and no more heartbeats: the checks' time is the live
	 * clock's, which the step did not move (on the wall clock, every check
	 * would be an hour before the last heartbeat). */
	w.m->clock_skew_ms = -3600 * 1000;
	up_then_down(&w, up, mgmt_live_ms(w.m), 1000);
	w.m->clock_skew_ms = 0;
	world_end(&w);
}

static void rebuild_report(Lode__Mgmt__V1__RebuildStatus *rb, uint32_t version, bool running,
			   uint64_t objs, uint64_t bytes, int64_t started, int64_t finished)
{
	lode__mgmt__v1__rebuild_status__init(rb);
	rb->map_version = version;
	rb->running = running;
	rb->objects_done = objs;
	rb->objects_total = 100;
	rb->bytes_done = bytes;
	rb->bytes_total = 4000;
	rb->started_unix_ms = started;
	rb->finished_unix_ms = finished;
}

static void test_rebuild(void **state)
{
	Lode__Mgmt__V1__RebuildStatus rb1, rb2, *q;
	Lode__Mgmt__V1__HeartbeatReply *hr;
	Lode__Mgmt__V1__PoolInfo *pi;
	struct bare w;
	uint32_t e1, e2, e3, e4, v, v2, settled, reclaimed;

	bare_make(&w, "rebuild");
	e1 = join_ok(w.m, &w.node, 1, "h:1");
	e2 = join_ok(w.m, &w.node, 2, "h:2");
	/* Nothing due: no rebuild has run. */
	q = pool_rebuild(w.m, &w.root, &pi);
	assert_int_equal(q->map_version, 0);
	assert_int_equal(q->engines_pending, 0);
	assert_int_equal(pi->map->n_engines, 3);
	protobuf_c_message_free_unpacked(&pi->base, NULL);
	assert_int_equal(cont_create(w.m, &w.root, "default", "c1", NULL), RPC_OK);
	e3 = join_ok(w.m, &w.node, 3, "h:3");
	assert_int_equal(engine_state(w.m, &w.root, e3, &v), S_NEW);
	/* Every engine says it holds nothing of an older layout (test_reclaim
	 * has the gate): a new version lets the moves start. */
	assert_int_equal(reclaim_ok(w.m, &w.root, &w.node, e1, 1), RPC_OK);
	assert_int_equal(reclaim_ok(w.m, &w.root, &w.node, e2, 2), RPC_OK);
	assert_int_equal(reclaim_ok(w.m, &w.root, &w.node, e3, 3), RPC_OK);
	assert_int_equal(engine_state(w.m, &w.root, e3, &settled), S_NEW);
	assert_int_equal(settled, v + 1);
	v = settled;
	/* Due to v: the UP engines but the host (which reports nothing, so has
	 * nothing to do) are pending. */
	q = pool_rebuild(w.m, &w.root, &pi);
	assert_int_equal(q->map_version, v);
	assert_int_equal(q->engines_pending, 2);
	assert_int_equal(q->finished_unix_ms, 0);
	protobuf_c_message_free_unpacked(&pi->base, NULL);
	/* e1 runs, e2 is done: sums, the earliest start, not finished. */
	rebuild_report(&rb1, v, true, 10, 1000, 5, 0);
	rebuild_report(&rb2, v, false, 30, 500, 3, 20);
	assert_int_equal(heartbeat(w.m, &w.node, e1, 1, &rb1, NULL), RPC_OK);
	assert_int_equal(heartbeat(w.m, &w.node, e2, 2, &rb2, NULL), RPC_OK);
	q = pool_rebuild(w.m, &w.root, &pi);
	assert_int_equal(q->map_version, v);
	assert_true(q->running);
	assert_int_equal(q->objects_done, 40);
	assert_int_equal(q->objects_total, 200);
	assert_int_equal(q->bytes_done, 1500);
	assert_int_equal(q->bytes_total, 8000);
	assert_int_equal(q->started_unix_ms, 3);
	assert_int_equal(q->finished_unix_ms, 0);
	assert_int_equal(q->engines_pending, 1);
	protobuf_c_message_free_unpacked(&pi->base, NULL);
	/* An error, or a report for another version, is not done. */
	rebuild_report(&rb1, v, false, 100, 4000, 5, 25);
	rb1.errno_value = -5;
	assert_int_equal(heartbeat(w.m, &w.node, e1, 1, &rb1, NULL), RPC_OK);
	assert_int_equal(mgmt_tick(w.m, mgmt_live_ms(w.m)), 0);
	q = pool_rebuild(w.m, &w.root, &pi);
	assert_int_equal(q->errno_value, -5);
	assert_int_equal(q->engines_pending, 1);
	protobuf_c_message_free_unpacked(&pi->base, NULL);
	rb1.errno_value = 0;
	rb1.map_version = v - 1;
	assert_int_equal(heartbeat(w.m, &w.node, e1, 1, &rb1, NULL), RPC_OK);
	assert_int_equal(engine_state(w.m, &w.root, e3, NULL), S_NEW);
	/* The last report: the heartbeat's reply has the NEW engine UP. */
	rb1.map_version = v;
	assert_int_equal(heartbeat(w.m, &w.node, e1, 1, &rb1, &hr), RPC_OK);
	assert_int_equal(hr->map->version, v + 1);
	assert_int_equal(hr->map->engines[3]->state, S_UP);
	protobuf_c_message_free_unpacked(&hr->base, NULL);
	q = pool_rebuild(w.m, &w.root, &pi);
	assert_int_equal(q->map_version, v); /* the last completed */
	assert_int_equal(q->engines_pending, 0);
	assert_int_equal(q->finished_unix_ms, 25);
	assert_int_equal(q->objects_done, 130);
	assert_int_equal(pi->map->version, v + 1);
	protobuf_c_message_free_unpacked(&pi->base, NULL);

	/* Excluding e2: due; e2 is not asked; when e1 and e3 are done, e2 is OUT. */
	assert_int_equal(set_state(w.m, &w.root, e2, S_DOWN), RPC_OK);
	assert_int_equal(engine_state(w.m, &w.root, e2, &v), S_DOWN);
	q = pool_rebuild(w.m, &w.root, &pi);
	assert_int_equal(q->map_version, v);
	assert_int_equal(q->engines_pending, 2);
	protobuf_c_message_free_unpacked(&pi->base, NULL);
	rebuild_report(&rb1, v, false, 1, 1, 40, 50);
	map_reclaim(w.m, &w.root, &v2, &settled, &reclaimed);
	rb1.reclaimed_version = settled; /* the integration's layout, reclaimed */
	assert_int_equal(heartbeat(w.m, &w.node, e1, 1, &rb1, NULL), RPC_OK);
	assert_int_equal(engine_state(w.m, &w.root, e2, NULL), S_DOWN);
	assert_int_equal(heartbeat(w.m, &w.node, e3, 3, &rb1, NULL), RPC_OK);
	assert_int_equal(engine_state(w.m, &w.root, e2, NULL), S_OUT);
	assert_int_equal(engine_state(w.m, &w.root, e3, &v), S_UP);
	/* Drained, then done: OUT. */
	assert_int_equal(set_state(w.m, &w.root, e3, S_DRAIN), RPC_OK);
	engine_state(w.m, &w.root, e3, &v);
	rebuild_report(&rb1, v, false, 1, 1, 60, 70);
	map_reclaim(w.m, &w.root, &v2, &settled, &reclaimed);
	rb1.reclaimed_version = settled;
	assert_int_equal(heartbeat(w.m, &w.node, e1, 1, &rb1, NULL), RPC_OK);
	assert_int_equal(engine_state(w.m, &w.root, e3, NULL), S_DRAIN); /* it copies: asked too */
	assert_int_equal(heartbeat(w.m, &w.node, e3, 3, &rb1, NULL), RPC_OK);
	assert_int_equal(engine_state(w.m, &w.root, e3, NULL), S_OUT);
	/* Back from OUT: the record stays OUT in its slot, the engine is
	 * refused at its next heartbeat and joins again as a new engine, NEW. */
	assert_int_equal(set_state(w.m, &w.root, e2, S_UP), RPC_OK);
	assert_int_equal(engine_state(w.m, &w.root, e2, &v), S_OUT);
	assert_int_equal(heartbeat(w.m, &w.node, e2, 2, &rb1, NULL), RPC_NOT_FOUND);
	e4 = join_ok(w.m, &w.node, 2, "h:2");
	assert_true(e4 > e3);
	assert_int_equal(engine_state(w.m, &w.root, e4, NULL), S_NEW);
	assert_int_equal(engine_state(w.m, &w.root, e2, NULL), S_OUT);
	/* Its own record is what it answers to from now on. */
	assert_int_equal(heartbeat(w.m, &w.node, e4, 2, &rb1, NULL), RPC_OK);
	bare_end(&w);
}

/*
 * The reclaim gate: a NEW engine joining a pool with containers, and the
 * end of its integration, each settle a layout; the map says it is
 * reclaimed once every UP, DRAIN and NEW engine has reported so, and not
 * before; a DOWN one is not waited for.
 */
static void test_reclaim(void **state)
{
	Lode__Mgmt__V1__RebuildStatus rb;
	struct bare w;
	uint32_t e1, e2, e3, e4, v, v2, s2, settled, reclaimed;

	bare_make(&w, "reclaim");
	e1 = join_ok(w.m, &w.node, 1, "h:1");
	e2 = join_ok(w.m, &w.node, 2, "h:2");
	map_reclaim(w.m, &w.root, &v, &settled, &reclaimed);
	assert_int_equal(settled, 0); /* engines UP at once: nothing moved */
	assert_int_equal(reclaimed, 0);
	assert_int_equal(cont_create(w.m, &w.root, "default", "c1", NULL), RPC_OK);
	e3 = join_ok(w.m, &w.node, 3, "h:3");
	map_reclaim(w.m, &w.root, &v, &settled, &reclaimed);
	assert_int_equal(settled, v); /* the join's version */
	assert_int_equal(reclaimed, 0);
	/* e1 and e2 say so; e3, NEW, has not: still closed. */
	rebuild_report(&rb, 0, false, 0, 0, 0, 0);
	rb.reclaimed_version = settled;
	assert_int_equal(heartbeat(w.m, &w.node, e1, 1, &rb, NULL), RPC_OK);
	assert_int_equal(heartbeat(w.m, &w.node, e2, 2, &rb, NULL), RPC_OK);
	rb.reclaimed_version = settled - 1; /* an older layout's is not this one's */
	assert_int_equal(heartbeat(w.m, &w.node, e3, 3, &rb, NULL), RPC_OK);
	assert_int_equal(mgmt_tick(w.m, mgmt_live_ms(w.m)), 0);
	map_reclaim(w.m, &w.root, &v2, &settled, &reclaimed);
	assert_int_equal(v2, v);
	assert_int_equal(reclaimed, 0);
	rb.reclaimed_version = settled;
	assert_int_equal(heartbeat(w.m, &w.node, e3, 3, &rb, NULL), RPC_OK);
	map_reclaim(w.m, &w.root, &v2, &settled, &reclaimed);
	assert_int_equal(v2, v + 1); /* a new version tells the clients */
	assert_int_equal(reclaimed, settled);
	assert_int_equal(engine_state(w.m, &w.root, e3, NULL), S_NEW);
	/* The integration ends: e3 UP, and that layout is settled, not reclaimed. */
	rebuild_report(&rb, v2, false, 1, 1, 5, 6);
	rb.reclaimed_version = settled;
	assert_int_equal(heartbeat(w.m, &w.node, e1, 1, &rb, NULL), RPC_OK);
	assert_int_equal(heartbeat(w.m, &w.node, e2, 2, &rb, NULL), RPC_OK);
	map_reclaim(w.m, &w.root, &v, &settled, &reclaimed);
	assert_int_equal(engine_state(w.m, &w.root, e3, NULL), S_UP);
	assert_int_equal(v, v2 + 1);
	assert_int_equal(settled, v);
	assert_true(reclaimed < settled);
	/* e2 dies before it reports: it is not waited for. */
	assert_int_equal(set_state(w.m, &w.root, e2, S_DOWN), RPC_OK);
	rb.reclaimed_version = settled;
	assert_int_equal(heartbeat(w.m, &w.node, e1, 1, &rb, NULL), RPC_OK);
	map_reclaim(w.m, &w.root, &v2, &v, &reclaimed);
	assert_true(reclaimed < settled);
	assert_int_equal(heartbeat(w.m, &w.node, e3, 3, &rb, NULL), RPC_OK);
	map_reclaim(w.m, &w.root, &v2, &v, &reclaimed);
	assert_int_equal(reclaimed, settled);
	/* An engine joins while e2's rebuild is due: that rebuild ends without
	 * it (a move that cannot end must not hold a failure's rebuild up);
	 * it is integrated by the next. */
	e4 = join_ok(w.m, &w.node, 4, "h:4");
	/* e4 restarting meanwhile changes nothing: that rebuild integrates
	 * nothing, and must not wait for e4 to walk again. */
	map_reclaim(w.m, &w.root, &v, &settled, &reclaimed);
	assert_int_equal(join_ok(w.m, &w.node, 4, "h:4"), e4);
	map_reclaim(w.m, &w.root, &v2, &s2, &reclaimed);
	assert_int_equal(v2, v);
	assert_int_equal(s2, settled);
	assert_int_equal(reclaim_ok(w.m, &w.root, &w.node, e1, 1), RPC_OK);
	assert_int_equal(reclaim_ok(w.m, &w.root, &w.node, e3, 3), RPC_OK);
	assert_int_equal(reclaim_ok(w.m, &w.root, &w.node, e4, 4), RPC_OK);
	map_reclaim(w.m, &w.root, &v, &settled, &reclaimed);
	assert_int_equal(reclaimed, settled);
	rebuild_report(&rb, v, false, 1, 1, 7, 8);
	rb.reclaimed_version = settled;
	assert_int_equal(heartbeat(w.m, &w.node, e1, 1, &rb, NULL), RPC_OK);
	assert_int_equal(heartbeat(w.m, &w.node, e3, 3, &rb, NULL), RPC_OK);
	assert_int_equal(engine_state(w.m, &w.root, e2, NULL), S_OUT);
	assert_int_equal(engine_state(w.m, &w.root, e4, NULL), S_NEW);
	assert_int_equal(reclaim_ok(w.m, &w.root, &w.node, e1, 1), RPC_OK);
	assert_int_equal(reclaim_ok(w.m, &w.root, &w.node, e3, 3), RPC_OK);
	assert_int_equal(reclaim_ok(w.m, &w.root, &w.node, e4, 4), RPC_OK);
	map_reclaim(w.m, &w.root, &v, &settled, &reclaimed);
	rebuild_report(&rb, v, false, 1, 1, 9, 10);
	rb.reclaimed_version = settled;
	assert_int_equal(heartbeat(w.m, &w.node, e1, 1, &rb, NULL), RPC_OK);
	/* e4 restarts while it is filled (RAM targets come back empty): the
	 * copies reported so far do not count; every engine copies again for
	 * a new version, after e4 has walked its targets again. */
	assert_int_equal(join_ok(w.m, &w.node, 4, "h:4"), e4);
	map_reclaim(w.m, &w.root, &v2, &settled, &reclaimed);
	assert_int_equal(v2, v + 1);
	assert_int_equal(settled, v2);
	assert_true(reclaimed < settled);
	assert_int_equal(heartbeat(w.m, &w.node, e3, 3, &rb, NULL), RPC_OK);
	assert_int_equal(engine_state(w.m, &w.root, e4, NULL), S_NEW);
	assert_int_equal(reclaim_ok(w.m, &w.root, &w.node, e1, 1), RPC_OK);
	assert_int_equal(reclaim_ok(w.m, &w.root, &w.node, e3, 3), RPC_OK);
	assert_int_equal(reclaim_ok(w.m, &w.root, &w.node, e4, 4), RPC_OK);
	map_reclaim(w.m, &w.root, &v, &settled, &reclaimed);
	assert_int_equal(reclaimed, settled);
	assert_int_equal(engine_state(w.m, &w.root, e4, NULL), S_NEW);
	rebuild_report(&rb, v, false, 1, 1, 11, 12);
	rb.reclaimed_version = settled;
	assert_int_equal(heartbeat(w.m, &w.node, e1, 1, &rb, NULL), RPC_OK);
	assert_int_equal(heartbeat(w.m, &w.node, e3, 3, &rb, NULL), RPC_OK);
	assert_int_equal(engine_state(w.m, &w.root, e4, NULL), S_UP);
	bare_end(&w);
}

static void test_engine_set_state(void **state)
{
	Lode__Mgmt__V1__EngineStateRequest req = LODE__MGMT__V1__ENGINE_STATE_REQUEST__INIT;
	Lode__Mgmt__V1__Engine *e;
	struct bare w;
	uint32_t id, v0, v, settled, reclaimed;

	bare_make(&w, "setstate");
	id = join_ok(w.m, &w.node, 1, "h:1");
	assert_int_equal(engine_state(w.m, &w.root, id, &v0), S_UP);
	/* System administrator only. */
	assert_int_equal(set_state(w.m, &w.node, id, S_DOWN), RPC_PERMISSION_DENIED);
	assert_int_equal(set_state(w.m, &w.plain, id, S_DOWN), RPC_PERMISSION_DENIED);
	/* Exclude: returns the engine, bumps the version by one. */
	req.engine_id = id;
	req.state = S_DOWN;
	assert_int_equal(call(w.m, "EngineSetState", &req, &w.root, (ProtobufCMessage **)&e),
			 RPC_OK);
	assert_int_equal(e->id, id);
	assert_int_equal(e->state, S_DOWN);
	assert_string_equal(e->address, "h:1");
	protobuf_c_message_free_unpacked(&e->base, NULL);
	assert_int_equal(engine_state(w.m, &w.root, id, &v), S_DOWN);
	assert_int_equal(v, v0 + 1);
	/* Refusals name both states and change nothing. */
	assert_int_equal(set_state(w.m, &w.root, id, S_DRAIN), RPC_FAILED_PRECONDITION);
	assert_non_null(strstr(msg, "DOWN"));
	assert_non_null(strstr(msg, "DRAIN"));
	assert_int_equal(set_state(w.m, &w.root, id, S_DOWN), RPC_FAILED_PRECONDITION);
	assert_int_equal(engine_state(w.m, &w.root, id, &v), S_DOWN);
	assert_int_equal(v, v0 + 1);
	/* Reintegrate, drain, and what a DRAIN engine may not do. Back from
	 * DOWN, it may have missed a reclaim: every engine walks again. */
	assert_int_equal(set_state(w.m, &w.root, id, S_UP), RPC_OK);
	map_reclaim(w.m, &w.root, &v, &settled, &reclaimed);
	assert_int_equal(settled, v);
	assert_true(reclaimed < settled);
	assert_int_equal(set_state(w.m, &w.root, id, S_UP), RPC_FAILED_PRECONDITION);
	assert_non_null(strstr(msg, "UP"));
	assert_int_equal(set_state(w.m, &w.root, id, S_DRAIN), RPC_OK);
	assert_int_equal(set_state(w.m, &w.root, id, S_DOWN), RPC_FAILED_PRECONDITION);
	assert_non_null(strstr(msg, "DRAIN"));
	assert_int_equal(engine_state(w.m, &w.root, id, &v), S_DRAIN);
	assert_int_equal(v, v0 + 3);
	/* The host is never taken out; unknown engines and states. */
	assert_int_equal(set_state(w.m, &w.root, 0, S_DOWN), RPC_FAILED_PRECONDITION);
	assert_non_null(strstr(msg, "hosts"));
	assert_int_equal(set_state(w.m, &w.root, 0, S_DRAIN), RPC_FAILED_PRECONDITION);
	assert_int_equal(set_state(w.m, &w.root, 0, S_UP), RPC_FAILED_PRECONDITION);
	assert_int_equal(set_state(w.m, &w.root, 99, S_DOWN), RPC_NOT_FOUND);
	assert_int_equal(set_state(w.m, &w.root, id, S_OUT), RPC_INVALID_ARGUMENT);
	assert_int_equal(set_state(w.m, &w.root, id, S_NEW), RPC_INVALID_ARGUMENT);
	assert_int_equal(set_state(w.m, &w.root, id, 77), RPC_INVALID_ARGUMENT);
	assert_int_equal(engine_state(w.m, &w.root, 0, &v), S_UP);
	assert_int_equal(v, v0 + 3);
	bare_end(&w);
}

static void test_map_get(void **state)
{
	Lode__Mgmt__V1__PoolMap *map;
	struct world w;
	struct sess cc;

	world_make(&w, "mapget");
	/* Any valid capability, a container-scoped one too. */
	assert_int_equal(cont_open(w.m, &w.bob, "c1", &cc, NULL), 0);
	map = map_get(w.m, &cc);
	assert_int_equal(map->n_engines, 1);
	assert_int_equal(map->version, mgmt_map_version(w.m));
	protobuf_c_message_free_unpacked(&map->base, NULL);
	map = map_get(w.m, &w.eve);
	protobuf_c_message_free_unpacked(&map->base, NULL);
	assert_int_equal(empty_call(w.m, "PoolMapGet", NULL, NULL), RPC_UNAUTHENTICATED);
	/* Other management calls still refuse a container capability. */
	assert_int_equal(set_state(w.m, &cc, 0, S_UP), RPC_PERMISSION_DENIED);
	world_end(&w);
}

static void test_map_persistence(void **state)
{
	struct mgmt_config cfg = {.ntargets = NTARGETS + 1, .engine_addr = "127.0.0.1:1"};
	char path[700], cred[600];
	uint8_t uuid[16], host_uuid[16];
	struct mgmt *m2 = NULL;
	struct bare w;
	uint32_t e1, e2, v;

	bare_make(&w, "mappersist");
	e1 = join_ok(w.m, &w.node, 1, "h:1");
	e2 = join_ok(w.m, &w.node, 2, "h:2");
	assert_int_equal(set_state(w.m, &w.root, e1, S_DOWN), RPC_OK);
	assert_int_equal(set_state(w.m, &w.root, e2, S_DRAIN), RPC_OK);
	engine_state(w.m, &w.root, 0, &v);
	memcpy(host_uuid, ms_engine_by_id(w.m->st.s, 0)->uuid.data, 16);
	mgmt_close(w.m);
	w.m = svc_open(test_dir);
	assert_int_equal(mgmt_map_version(w.m), v);
	assert_int_equal(engine_state(w.m, &w.root, e1, NULL), S_DOWN);
	assert_int_equal(engine_state(w.m, &w.root, e2, NULL), S_DRAIN);
	assert_memory_equal(ms_engine_by_id(w.m->st.s, 0)->uuid.data, host_uuid, 16);
	uuid_of(1, uuid);
	assert_memory_equal(ms_engine_by_id(w.m->st.s, e1)->uuid.data, uuid, 16);
	assert_string_equal(ms_engine_by_id(w.m->st.s, e2)->address, "h:2");
	/* Ids are never reused, across restarts too. */
	assert_int_equal(join_ok(w.m, &w.node, 3, "h:3"), e2 + 1);
	mgmt_close(w.m);

	/* The host engine's targets are fixed; its uuid follows the configuration. */
	snprintf(cred, sizeof(cred), "%s/admin.cred", test_dir);
	cfg.state_dir = test_dir;
	cfg.admin_cred = cred;
	assert_int_equal(mgmt_open(&cfg, &hooks, &m2, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "targets"));
	cfg.ntargets = NTARGETS;
	uuid_of(0x5a, uuid);
	cfg.engine_uuid = uuid;
	assert_int_equal(mgmt_open(&cfg, &hooks, &m2, msg, sizeof(msg)), 0);
	assert_memory_equal(ms_engine_by_id(m2->st.s, 0)->uuid.data, uuid, 16);
	assert_true(mgmt_map_version(m2) > v);
	mgmt_close(m2);

	/* A map that does not match the engines is a damaged state. */
	w.m = svc_open(test_dir);
	snprintf(path, sizeof(path), "%s/state.pb", test_dir);
	w.m->st.s->n_engines--; /* the model's last record, not the map's */
	assert_int_equal(mgmt_state_commit(&w.m->st), 0);
	w.m->st.s->n_engines++;
	mgmt_close(w.m);
	assert_int_equal(mgmt_open(&cfg, &hooks, &m2, msg, sizeof(msg)), -LODE_ECORRUPT);
	assert_non_null(strstr(msg, "pool map"));
	unlink(path);
	w.m = NULL;
	{
		char cmd[700];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", test_dir);
		assert_int_equal(system(cmd), 0);
	}
}

static void test_map_hook(void **state)
{
	struct bare w;
	uint32_t id;

	hook_calls = 0;
	bare_make(&w, "hook");
	/* At start, with the loaded version (a first start's map is version 1). */
	assert_int_equal(hook_calls, 1);
	assert_int_equal(hook_versions[0], 1);
	id = join_ok(w.m, &w.node, 1, "h:1");
	assert_int_equal(hook_calls, 2);
	assert_int_equal(hook_versions[1], 2);
	/* Calls that change nothing: no call. */
	join_ok(w.m, &w.node, 1, "h:1");
	assert_int_equal(set_state(w.m, &w.root, 0, S_DOWN), RPC_FAILED_PRECONDITION);
	assert_int_equal(mgmt_tick(w.m, mgmt_live_ms(w.m)), 0);
	assert_int_equal(hook_calls, 2);
	assert_int_equal(set_state(w.m, &w.root, id, S_DRAIN), RPC_OK);
	assert_int_equal(hook_calls, 3);
	assert_int_equal(hook_versions[2], 3);
	assert_int_equal(mgmt_tick(w.m, mgmt_live_ms(w.m) + 10000), 1); /* silent: DOWN */
	assert_int_equal(hook_calls, 4);
	assert_int_equal(hook_versions[3], 4);
	assert_int_equal(mgmt_map_version(w.m), 4);
	mgmt_close(w.m);
	w.m = svc_open(test_dir);
	assert_int_equal(hook_calls, 5);
	assert_int_equal(hook_versions[4], 4);
	bare_end(&w);
}

static void test_map_failed_write(void **state)
{
	char path[700];
	struct bare w;
	uint32_t id, v0, v;

	bare_make(&w, "mapwrite");
	id = join_ok(w.m, &w.node, 1, "h:1");
	engine_state(w.m, &w.root, id, &v0);
	snprintf(path, sizeof(path), "%s/state.pb", test_dir);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(mkdir(path, 0700), 0);
	/* Nothing of any of these stays. */
	assert_int_equal(engine_join(w.m, &w.node, 2, "h:2", 2, NULL), RPC_INTERNAL);
	assert_int_equal(set_state(w.m, &w.root, id, S_DOWN), RPC_INTERNAL);
	assert_int_equal(mgmt_tick(w.m, mgmt_live_ms(w.m) + 10000), -EISDIR);
	assert_int_equal(engine_state(w.m, &w.root, id, &v), S_UP);
	assert_int_equal(v, v0);
	assert_int_equal(mgmt_map_version(w.m), v0);
	assert_null(ms_engine_by_uuid(w.m->st.s, (uint8_t[16]){2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
								2, 2, 2, 2}));
	assert_int_equal(w.m->st.s->next_engine_id, id + 1);
	assert_int_equal(rmdir(path), 0);
	assert_int_equal(join_ok(w.m, &w.node, 2, "h:2"), id + 1);
	bare_end(&w);
}

/*
 * The replicated apply path without raft (replica.c): a state packed by one
 * service and applied to another replaces its model, keyring, revocations
 * and map version, writes its state.pb and becomes its snapshot; bytes that
 * are not a state, or an impossible one, change nothing.
 */
static void test_replica_apply(void **state)
{
	struct world w;
	struct mgmt *m2;
	char dir2[600], path[700];
	uint8_t *buf, junk[16] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f};
	void *snap;
	size_t len, snap_len;
	struct auth_key keys[AUTH_KEYS_MAX];
	struct stat sb;
	ms_state *bad;

	(void)state;
	world_make(&w, "apply");
	assert_int_equal(empty_call(w.m, "RotateKey", &w.root, NULL), RPC_OK);
	assert_int_equal(name_call(w.m, "UserRevoke", &w.root, "acme/bob", NULL), RPC_OK);
	len = protobuf_c_message_get_packed_size(&w.m->st.s->base);
	buf = malloc(len);
	assert_non_null(buf);
	protobuf_c_message_pack(&w.m->st.s->base, buf);

	snprintf(dir2, sizeof(dir2), "%s.second", test_dir);
	m2 = svc_open(dir2);
	assert_null(ms_tenant_find(m2->st.s, "acme"));
	assert_int_equal(mgmt_replica_apply(m2, buf, len), 0);
	assert_non_null(ms_tenant_find(m2->st.s, "acme"));
	assert_non_null(ms_cont_find(m2->st.s, "default", "c1"));
	assert_int_equal(mgmt_map_version(m2), mgmt_map_version(w.m));
	/* The keyring holds exactly the applied keys: 1 retired, 2 signing. */
	assert_int_equal(auth_keyring_export(mgmt_keyring(m2), keys, AUTH_KEYS_MAX), 2);
	assert_int_equal(keys[1].id, 2);
	assert_int_equal(keys[1].retired_ms, 0);
	assert_memory_equal(keys[1].key, w.m->st.s->keys[1]->key.data, AUTH_KEY_SIZE);
	/* A token the first service signs with key 2 verifies on the second;
	 * bob, revoked there, cannot connect here. */
	{
		struct sess root2 = connect_ok(w.m, "admin", w.m->admin_secret), b2;
		struct auth_cap c;

		assert_int_equal(auth_cap_verify(mgmt_keyring(m2), mgmt_revoked(m2), root2.cap,
						 root2.len, mgmt_now_ms(m2), &c),
				 0);
		assert_int_equal(c.key_id, 2);
		assert_int_equal(sess_connect(m2, "acme/bob", "bob-secret", "default", NULL, &b2),
				 RPC_UNAUTHENTICATED);
	}
	/* state.pb has it for a restart; the snapshot is those bytes. */
	snprintf(path, sizeof(path), "%s/state.pb", dir2);
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal((size_t)sb.st_size, len);
	assert_int_equal(mgmt_replica_snapshot(m2, &snap, &snap_len), 0);
	assert_int_equal(snap_len, len);
	assert_memory_equal(snap, buf, len);
	free(snap);
	/* Not a state, and an impossible one: refused, nothing changes. */
	assert_int_equal(mgmt_replica_apply(m2, junk, sizeof(junk)), -LODE_ECORRUPT);
	bad = lode__mgmt__state__v1__state__unpack(NULL, len, buf);
	assert_non_null(bad);
	bad->version = 99;
	{
		size_t bl = protobuf_c_message_get_packed_size(&bad->base);
		uint8_t *bb = malloc(bl);

		assert_non_null(bb);
		protobuf_c_message_pack(&bad->base, bb);
		assert_int_equal(mgmt_replica_apply(m2, bb, bl), -LODE_ECORRUPT);
		free(bb);
	}
	protobuf_c_message_free_unpacked(&bad->base, NULL);
	assert_non_null(ms_tenant_find(m2->st.s, "acme"));
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal((size_t)sb.st_size, len);
	/* Restarted on the directory, the applied state is there. */
	mgmt_close(m2);
	m2 = svc_open(dir2);
	assert_non_null(ms_cont_find(m2->st.s, "default", "c1"));
	mgmt_close(m2);
	free(buf);
	{
		char cmd[700];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir2);
		assert_int_equal(system(cmd), 0);
	}
	world_end(&w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_first_start),
		cmocka_unit_test(test_capability_checks),
		cmocka_unit_test(test_authorization_matrix),
		cmocka_unit_test(test_revoke_restore),
		cmocka_unit_test(test_rotation_renewal),
		cmocka_unit_test(test_bad_input),
		cmocka_unit_test(test_destroy),
		cmocka_unit_test(test_encryption),
		cmocka_unit_test(test_old_tenant_keys),
		cmocka_unit_test(test_persistence),
		cmocka_unit_test(test_failed_write_rolls_back),
		cmocka_unit_test(test_system_query),
		cmocka_unit_test(test_engine_join),
		cmocka_unit_test(test_engine_heartbeat),
		cmocka_unit_test(test_engine_detection),
		cmocka_unit_test(test_service_deaf),
		cmocka_unit_test(test_service_stopped),
		cmocka_unit_test(test_lead_restart),
		cmocka_unit_test(test_wall_clock_step),
		cmocka_unit_test(test_rebuild),
		cmocka_unit_test(test_reclaim),
		cmocka_unit_test(test_engine_set_state),
		cmocka_unit_test(test_map_get),
		cmocka_unit_test(test_map_persistence),
		cmocka_unit_test(test_map_hook),
		cmocka_unit_test(test_map_failed_write),
		cmocka_unit_test(test_replica_apply),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
