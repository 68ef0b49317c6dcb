/*
 * libFuzzer target: malformed requests to every management RPC handler
 * (src/mgmt/handlers.c, and state.c under it), called through the method
 * table with no network in between, as the unit test does.
 *
 * The service runs on a real state directory (mkdtemp under $TMPDIR, else
 * /tmp; removed at exit), first started by the first input the way the
 * handler test does it, with a cast whose capabilities get fuzzed calls
 * past authentication, and records for them to act on:
 *   - the system administrator (Connect with the first start's secret);
 *   - tenant t: its administrator t/a, a plain user t/u in group t/g; the
 *     tenant may read and write pool "default", and t/u made the encrypted
 *     container default/c (its wrapped data key: opaque bytes), whose
 *     container-scoped capability (from OpenContainer) is the fifth role;
 *   - tenant e (no containers, so TenantDestroy can succeed): user e/v in
 *     group e/h, with an ACL entry on "default";
 *   - node user system/n (Connect on_behalf_of), pool q and containers q/k
 *     and default/k made by the system administrator (tenant t has no
 *     rights on them: the refusals).
 * Every user's secret is "s". Names are short, so that the fuzzer hits them.
 *
 * An input is:
 *   byte 0   the method (modulo the number of methods);
 *   byte 1   the capability sent as lode-cap-bin (modulo 6): none, the
 *            system administrator's, the tenant administrator's, the plain
 *            user's, the container capability, or garbage: the next
 *            AUTH_CAP_SIZE bytes (fewer if the input ends first);
 *   the rest the request body, unpacked with the method's request type as
 *            the rpc server does (protobuf_c_message_unpack; one that does
 *            not parse the server answers INVALID_ARGUMENT itself, so the
 *            input stops there).
 * The handler then runs and its reply is packed and freed as the server
 * does. Besides crashes, leaks and undefined behaviour, abort()s (so the
 * fuzzer reports them) when:
 *   - the handler breaks its contract (rpc.h): OK without a reply, an error
 *     with one, an error without a message, a status not in rpc_status, a
 *     reply that does not pack or does not unpack again;
 *   - a method that needs a capability answers anything but
 *     UNAUTHENTICATED to no capability or garbage, or anything but
 *     UNAUTHENTICATED / PERMISSION_DENIED to a container capability (but
 *     PoolMapGet, which any valid capability may call);
 *   - the tenant administrator or the plain user succeeds at what only a
 *     system administrator (or, for EngineJoin and EngineHeartbeat, a node
 *     user of tenant system) may do (PoolCreate, TenantCreate,
 *     TenantDestroy, RotateKey, EngineJoin, EngineHeartbeat,
 *     EngineSetState);
 *   - after the call the model differs from what state.pb holds (every
 *     change is on disk or nowhere), or no longer passes
 *     protobuf_c_message_check.
 *
 * Every change is persisted (fsync and rename), so every RESET_EVERY inputs
 * the state goes back to the cast's (its bytes written over state.pb and
 * loaded again, which also runs the loader) and the cast's tokens are
 * renewed: the state stays small, and capabilities the fuzzer revoked, or
 * whose user or tenant it destroyed, come back. A crash that needs earlier
 * inputs' changes may therefore not reproduce from its input alone (run the
 * inputs before it as well, or the whole corpus).
 *
 * A custom mutator (below) makes a quarter of the inputs well-formed
 * requests that name the cast's records; libFuzzer's own mutations corrupt
 * them and everything else.
 *
 * Nothing is skipped. RotateKey makes a key and persists it, as cheap as
 * any change; since the keyring keeps 8 keys, the cast's tokens are renewed
 * after each rotation, or they would stop verifying. Connect, UserCreate
 * and UserSetSecret hash a secret with PBKDF2 on purpose (about 10 ms, far
 * more under ASan, whose allocator OpenSSL's PBKDF2 keeps busy): they are
 * the slow inputs, a few hundred to a thousand inputs a second overall
 * under ASan. No handler sleeps or binds a socket (that is rpc_server's,
 * which this does not start).
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lode/mgmt/v1/mgmt.pb-c.h"
#include "mgmt/state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "mgmt_handler_fuzz: %s:%d: %s (%s)\n", __FILE__, __LINE__, \
				#cond, msg);                                                       \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

#define RESET_EVERY 500 /* inputs between fresh states */
#define MSG_CAP 512	/* what rpc_server gives a handler */
#define NTARGETS 2
#define CAPACITY (1ull << 30)
#define SECRET "s"

enum role { R_NONE, R_SYSADMIN, R_TENANT_ADMIN, R_USER, R_CONTAINER, R_GARBAGE, R_KINDS };

struct token {
	uint8_t b[AUTH_CAP_SIZE];
};

static struct mgmt *svc;
static char dir[4096];
static struct token tokens[R_KINDS]; /* the genuine ones: R_SYSADMIN..R_CONTAINER */
static unsigned inputs;
static char msg[MSG_CAP];
static char admin_secret[2 * 32 + 1]; /* the first start's, as the credentials file would say */
/* The state right after the cast was made, and the cast's tokens then. */
static uint8_t *cast_state;
static size_t cast_len;
static struct token cast_tokens[R_KINDS];
/* The methods the checks single out. */
static const struct rpc_method *m_connect, *m_renew, *m_rotate, *m_pool_create, *m_tenant_create,
	*m_tenant_destroy, *m_map_get, *m_engine_join, *m_engine_heartbeat, *m_engine_set_state;

/* ---- the service ------------------------------------------------------------------- */

static unsigned fake_targets(void *arg, struct mgmt_target_info *out, unsigned max)
{
	(void)arg;
	for (unsigned i = 0; i < NTARGETS && i < max; i++)
		out[i] = (struct mgmt_target_info){.id = i, .capacity = CAPACITY, .used = 100};
	return NTARGETS;
}

static const struct mgmt_hooks hooks = {.targets = fake_targets};

/* Call a method as the holder of cap (NULL: none); the reply is the caller's. */
static int call(const struct rpc_method *me, const void *req, const uint8_t *cap, size_t cap_len,
		ProtobufCMessage **reply)
{
	struct rpc_call_info ci = {.cap = cap, .cap_len = cap_len, .peer = "ipv4:127.0.0.1:1"};

	*reply = NULL;
	msg[0] = '\0';
	return me->fn(svc, &ci, req, reply, msg, sizeof(msg));
}

/* A setup call that must succeed; its reply is the caller's (or freed). */
static ProtobufCMessage *call_ok(const char *method, const void *req, enum role as)
{
	const struct rpc_method *me = mgmt_method_find(method);
	ProtobufCMessage *r;
	int st;

	CHECK(me);
	st = call(me, req, as == R_NONE ? NULL : tokens[as].b, as == R_NONE ? 0 : AUTH_CAP_SIZE, &r);
	if (st != RPC_OK)
		fprintf(stderr, "mgmt_handler_fuzz: setup %s: status %d: %s\n", method, st, msg);
	CHECK(st == RPC_OK && r);
	return r;
}

static void token_take(enum role as, const ProtobufCBinaryData *cap)
{
	CHECK(cap->len == AUTH_CAP_SIZE);
	memcpy(tokens[as].b, cap->data, AUTH_CAP_SIZE);
}

static void session_connect(enum role as, const char *user, const char *secret)
{
	Lode__Mgmt__V1__ConnectRequest req = LODE__MGMT__V1__CONNECT_REQUEST__INIT;
	Lode__Mgmt__V1__ConnectReply *r;

	req.user = (char *)user;
	req.secret.data = (uint8_t *)secret;
	req.secret.len = strlen(secret);
	r = (Lode__Mgmt__V1__ConnectReply *)call_ok("Connect", &req, R_NONE);
	token_take(as, &r->capability);
	protobuf_c_message_free_unpacked(&r->base, NULL);
}

static void setup_done(ProtobufCMessage *r)
{
	protobuf_c_message_free_unpacked(r, NULL);
}

static void tenant_make(const char *name)
{
	Lode__Mgmt__V1__NameRef req = LODE__MGMT__V1__NAME_REF__INIT;

	req.name = (char *)name;
	setup_done(call_ok("TenantCreate", &req, R_SYSADMIN));
}

static void user_make(const char *tenant, const char *name, bool admin, bool node)
{
	Lode__Mgmt__V1__UserCreateRequest req = LODE__MGMT__V1__USER_CREATE_REQUEST__INIT;

	req.tenant = (char *)tenant;
	req.name = (char *)name;
	req.secret.data = (uint8_t *)SECRET;
	req.secret.len = strlen(SECRET);
	req.admin = admin;
	req.node = node;
	setup_done(call_ok("UserCreate", &req, R_SYSADMIN));
}

/* Group tenant/name with member user. */
static void group_make(const char *tenant, const char *name, const char *user)
{
	Lode__Mgmt__V1__GroupCreateRequest req = LODE__MGMT__V1__GROUP_CREATE_REQUEST__INIT;
	Lode__Mgmt__V1__GroupMemberRequest member = LODE__MGMT__V1__GROUP_MEMBER_REQUEST__INIT;
	char q[64];

	req.tenant = (char *)tenant;
	req.name = (char *)name;
	setup_done(call_ok("GroupCreate", &req, R_SYSADMIN));
	snprintf(q, sizeof(q), "%s/%s", tenant, name);
	member.group = q;
	member.user = (char *)user;
	setup_done(call_ok("GroupAddUser", &member, R_SYSADMIN));
}

static void acl_make(const char *resource, const char *principal, unsigned rights)
{
	Lode__Mgmt__V1__AclEntry req = LODE__MGMT__V1__ACL_ENTRY__INIT;

	req.resource = (char *)resource;
	req.principal = (char *)principal;
	req.rights = rights;
	setup_done(call_ok("AclSet", &req, R_SYSADMIN));
}

static void pool_make(const char *label)
{
	Lode__Mgmt__V1__PoolCreateRequest req = LODE__MGMT__V1__POOL_CREATE_REQUEST__INIT;

	req.label = (char *)label;
	setup_done(call_ok("PoolCreate", &req, R_SYSADMIN));
}

static void cont_make(const char *pool, const char *label, bool encrypted, enum role as)
{
	Lode__Mgmt__V1__ContProps props = LODE__MGMT__V1__CONT_PROPS__INIT;
	Lode__Mgmt__V1__ContCreateRequest req = LODE__MGMT__V1__CONT_CREATE_REQUEST__INIT;

	uint8_t wrapped[AUTH_WRAPPED_SIZE];

	/* The service keeps the client's wrapped data key opaque: any bytes do. */
	memset(wrapped, 0xa5, sizeof(wrapped));
	props.encryption = encrypted;
	req.pool = (char *)pool;
	req.label = (char *)label;
	req.props = &props;
	if (encrypted) {
		req.wrapped_key.data = wrapped;
		req.wrapped_key.len = sizeof(wrapped);
	}
	setup_done(call_ok("ContCreate", &req, as));
}

/* The cast: see the top of the file. Each user costs a PBKDF2 hash (and
 * each Connect another), so there are only as many as the roles need. */
static void cast_make(void)
{
	Lode__Mgmt__V1__ContRef ref = LODE__MGMT__V1__CONT_REF__INIT;
	Lode__Mgmt__V1__OpenContainerReply *open;

	session_connect(R_SYSADMIN, MS_ADMIN_USER, admin_secret);
	tenant_make("t");
	user_make("t", "a", true, false);
	user_make("t", "u", false, false);
	group_make("t", "g", "u");
	acl_make(MS_DEFAULT_POOL, "tenant:t", AUTH_R_READ | AUTH_R_WRITE);
	tenant_make("e");
	user_make("e", "v", false, false);
	group_make("e", "h", "v");
	acl_make(MS_DEFAULT_POOL, "user:e/v", AUTH_R_READ);
	user_make(MS_SYSTEM_TENANT, "n", false, true);
	pool_make("q");
	cont_make("q", "k", false, R_SYSADMIN);
	cont_make(MS_DEFAULT_POOL, "k", false, R_SYSADMIN);
	session_connect(R_TENANT_ADMIN, "t/a", SECRET);
	session_connect(R_USER, "t/u", SECRET);
	cont_make(MS_DEFAULT_POOL, "c", true, R_USER);
	ref.pool = MS_DEFAULT_POOL;
	ref.label = "c";
	open = (Lode__Mgmt__V1__OpenContainerReply *)call_ok("OpenContainer", &ref, R_USER);
	token_take(R_CONTAINER, &open->capability);
	protobuf_c_message_free_unpacked(&open->base, NULL);
}

/* Remove dir and the files in it (the service makes no subdirectories). */
static void dir_remove(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[sizeof(dir) + 256];

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		unlink(path);
	}
	closedir(d);
	rmdir(dir);
}

static void at_exit(void)
{
	if (svc)
		mgmt_close(svc);
	svc = NULL;
	dir_remove();
	free(cast_state);
	cast_state = NULL;
}

/* After a rotation or a reset: the cast's tokens signed again with the
 * current key and a fresh expiry (a token that no longer renews, its user
 * revoked or gone, stays as it is). */
static void tokens_renew(void)
{
	for (int as = R_SYSADMIN; as <= R_CONTAINER; as++) {
		Lode__Mgmt__V1__RenewRequest req = LODE__MGMT__V1__RENEW_REQUEST__INIT;
		ProtobufCMessage *r;

		req.capability.data = tokens[as].b;
		req.capability.len = AUTH_CAP_SIZE;
		if (call(m_renew, &req, NULL, 0, &r) == RPC_OK)
			token_take(as, &((Lode__Mgmt__V1__RenewReply *)r)->capability);
		if (r)
			protobuf_c_message_free_unpacked(r, NULL);
	}
}

static void svc_open(void)
{
	char cred[sizeof(dir) + 16];
	struct mgmt_config cfg = {.state_dir = dir,
				  .ntargets = NTARGETS,
				  .engine_addr = "127.0.0.1:1",
				  .cap_lifetime_s = 24 * 3600,
				  .admin_cred = cred};

	/* mgmt_open needs the path on a first start; only mgmt_start writes it. */
	snprintf(cred, sizeof(cred), "%s/admin.cred", dir);
	CHECK(mgmt_open(&cfg, &hooks, &svc, msg, sizeof(msg)) == 0);
}

static void methods_find(void)
{
	m_connect = mgmt_method_find("Connect");
	m_renew = mgmt_method_find("RenewCapability");
	m_rotate = mgmt_method_find("RotateKey");
	m_pool_create = mgmt_method_find("PoolCreate");
	m_tenant_create = mgmt_method_find("TenantCreate");
	m_tenant_destroy = mgmt_method_find("TenantDestroy");
	m_map_get = mgmt_method_find("PoolMapGet");
	m_engine_join = mgmt_method_find("EngineJoin");
	m_engine_heartbeat = mgmt_method_find("EngineHeartbeat");
	m_engine_set_state = mgmt_method_find("EngineSetState");
	CHECK(m_connect && m_renew && m_rotate && m_pool_create && m_tenant_create &&
	      m_tenant_destroy && m_map_get && m_engine_join && m_engine_heartbeat &&
	      m_engine_set_state);
}

/*
 * The first time: a state directory, a first start in it and the cast,
 * whose state and tokens are kept. Later: that state written back over
 * whatever the fuzzer made of it and loaded again (rebuilding the cast
 * through the handlers costs a dozen PBKDF2 hashes, very slow under ASan),
 * and the tokens renewed.
 */
static void svc_begin(void)
{
	char path[sizeof(dir) + 32], tmp_path[sizeof(dir) + 32];

	if (!cast_state) {
		const char *tmp = getenv("TMPDIR");

		snprintf(dir, sizeof(dir), "%s/mgmt_handler_fuzz.XXXXXX",
			 tmp && tmp[0] ? tmp : "/tmp");
		CHECK(mkdtemp(dir));
		atexit(at_exit);
		methods_find();
		svc_open();
		snprintf(admin_secret, sizeof(admin_secret), "%s", svc->admin_secret);
		cast_make();
		cast_len = svc->st.saved_len;
		cast_state = malloc(cast_len);
		CHECK(cast_state);
		memcpy(cast_state, svc->st.saved, cast_len);
		memcpy(cast_tokens, tokens, sizeof(tokens));
		return;
	}
	mgmt_close(svc);
	svc = NULL;
	snprintf(path, sizeof(path), "%s/%s", dir, MS_STATE_FILE);
	snprintf(tmp_path, sizeof(tmp_path), "%s/%s.tmp", dir, MS_STATE_FILE);
	CHECK(ms_file_write_atomic(dir, tmp_path, path, cast_state, cast_len) == 0);
	svc_open();
	memcpy(tokens, cast_tokens, sizeof(tokens));
	tokens_renew();
}

/* ---- the checks ---------------------------------------------------------------------- */

static bool status_known(int st)
{
	switch (st) {
	case RPC_OK:
	case RPC_CANCELLED:
	case RPC_UNKNOWN:
	case RPC_INVALID_ARGUMENT:
	case RPC_DEADLINE_EXCEEDED:
	case RPC_NOT_FOUND:
	case RPC_ALREADY_EXISTS:
	case RPC_PERMISSION_DENIED:
	case RPC_RESOURCE_EXHAUSTED:
	case RPC_FAILED_PRECONDITION:
	case RPC_ABORTED:
	case RPC_UNIMPLEMENTED:
	case RPC_INTERNAL:
	case RPC_UNAVAILABLE:
	case RPC_UNAUTHENTICATED:
		return true;
	default:
		return false;
	}
}

/* What the server does with a reply (pack it), and that a client could read it. */
static void reply_check(const ProtobufCMessage *reply)
{
	size_t n = protobuf_c_message_get_packed_size(reply);
	uint8_t *buf = malloc(n ? n : 1);
	ProtobufCMessage *back;

	CHECK(buf);
	CHECK(protobuf_c_message_check(reply));
	CHECK(protobuf_c_message_pack(reply, buf) == n);
	back = protobuf_c_message_unpack(reply->descriptor, NULL, n, buf);
	CHECK(back);
	protobuf_c_message_free_unpacked(back, NULL);
	free(buf);
}

/* The model is what state.pb holds: a change is on disk or nowhere. */
static void model_check(void)
{
	const struct mgmt_state *st = &svc->st;
	size_t n;
	uint8_t *buf;

	CHECK(protobuf_c_message_check(&st->s->base));
	n = protobuf_c_message_get_packed_size(&st->s->base);
	CHECK(st->saved && n == st->saved_len);
	buf = malloc(n ? n : 1);
	CHECK(buf);
	CHECK(protobuf_c_message_pack(&st->s->base, buf) == n);
	CHECK(memcmp(buf, st->saved, n) == 0);
	free(buf);
}

static void verdict_check(const struct rpc_method *me, enum role as, const uint8_t *cap,
			  size_t cap_len, int st)
{
	bool needs_cap = me != m_connect && me != m_renew;
	bool genuine = false;

	for (int i = R_SYSADMIN; i <= R_CONTAINER; i++)
		genuine |= cap_len == AUTH_CAP_SIZE && memcmp(cap, tokens[i].b, AUTH_CAP_SIZE) == 0;
	if (needs_cap && (as == R_NONE || (as == R_GARBAGE && !genuine)))
		CHECK(st == RPC_UNAUTHENTICATED);
	/* PoolMapGet is for any holder of a valid capability. */
	if (needs_cap && as == R_CONTAINER && me != m_map_get)
		CHECK(st == RPC_UNAUTHENTICATED || st == RPC_PERMISSION_DENIED);
	/* Engines join and heartbeat as a node user of system or a system
	 * administrator; neither is a tenant's. */
	if ((as == R_TENANT_ADMIN || as == R_USER) &&
	    (me == m_pool_create || me == m_tenant_create || me == m_tenant_destroy ||
	     me == m_rotate || me == m_engine_join || me == m_engine_heartbeat ||
	     me == m_engine_set_state))
		CHECK(st != RPC_OK);
}

/* ---- the mutator ------------------------------------------------------------------------ */

/*
 * Blind mutation seldom turns bytes into a request that names something the
 * state holds ("t/u" inside a length-delimited field of the right number),
 * so a quarter of the mutations make a well-formed request instead: a
 * random method and capability, and a body built from the method's request
 * descriptor, each field set (or left out) from words and numbers the
 * handlers care about. The other mutations are libFuzzer's, which then
 * corrupt these too. Inputs stay plain bytes: a crash reproduces without
 * the mutator.
 */
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);

/* The longest name (MS_NAME_MAX bytes); with one more byte, one too long. */
#define NAME_127                                                                                   \
	"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" \
	"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"

/* Words by what a field names; any string field also gets a bad one now and then
 * (empty, unknown, too many slashes, bad bytes, 127 and 128 bytes long). */
static const char *const w_bad[] = {
	"", "nope", "nope/x", "a/b/c", "/", "/u", "t/", "..", "bad name", "u\xff", "tenant:",
	NAME_127, NAME_127 "x", "t/" NAME_127, NAME_127 "/u", NAME_127 "x/u"};
static const char *const w_tenants[] = {"", "t", "e", MS_SYSTEM_TENANT, "t2"};
static const char *const w_users[] = {"a", "u", "v", "n", "b", MS_ADMIN_USER,
				      "t/u", "t/a", "e/v", "system/n", "t2/b", "system/admin"};
static const char *const w_groups[] = {"g", "h", "t/g", "e/h", "f", "t/f"};
static const char *const w_pools[] = {"", MS_DEFAULT_POOL, "q", "p"};
static const char *const w_conts[] = {"c", "k", "d"};
static const char *const w_principals[] = {
	"user:u", "user:t/u", "user:t/a", "user:e/v", "user:system/admin", "user:system/n",
	"user:", "group:g", "group:t/g", "group:e/h", "tenant:t", "tenant:e", "tenant:t2",
	"tenant:system", "bogus:x"};
static const char *const w_resources[] = {
	MS_DEFAULT_POOL, "default/c", "default/k", "default/d", "q", "q/k", "p", "p/d"};
static const char *const w_classes[] = {"", "S1", "S2", "SX", "S3", "s1"};
static const char *const w_checksums[] = {"", "crc32c", "none", "md5", "CRC32C"};
static const uint32_t n_u32[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 15, 4095, 4096, 12288, 1u << 20,
				 64u << 20, 128u << 20, INT32_MAX, UINT32_MAX};
static const uint64_t n_u64[] = {0, 1, 1ull << 30, 2ull << 30, 3ull << 30, INT64_MAX, UINT64_MAX};

#define PICK(a, r) ((a)[rnd(r) % (sizeof(a) / sizeof((a)[0]))])

static uint32_t rnd(uint32_t *r)
{
	/* xorshift32: enough to spread choices; seeded by libFuzzer. */
	*r ^= *r << 13;
	*r ^= *r >> 17;
	*r ^= *r << 5;
	return *r;
}

/* What a built request points at, freed after packing. */
struct arena {
	void *p[64];
	unsigned n;
};

static void *arena_alloc(struct arena *a, size_t n)
{
	void *p;

	if (a->n == sizeof(a->p) / sizeof(a->p[0]))
		return NULL;
	p = calloc(1, n ? n : 1);
	if (p)
		a->p[a->n++] = p;
	return p;
}

static void arena_free(struct arena *a)
{
	while (a->n)
		free(a->p[--a->n]);
}

static bool field_is(const ProtobufCFieldDescriptor *f, const char *name)
{
	return strcmp(f->name, name) == 0;
}

/* NameRef.name names a tenant, a user or a resource; a label is a container's
 * in ContRef and ContCreateRequest, a pool's elsewhere. */
static const char *string_make(const ProtobufCMessageDescriptor *d,
			       const ProtobufCFieldDescriptor *f, uint32_t *r)
{
	bool cont = d == &lode__mgmt__v1__cont_ref__descriptor ||
		    d == &lode__mgmt__v1__cont_create_request__descriptor;

	if (rnd(r) % 8 == 0)
		return PICK(w_bad, r);
	if (field_is(f, "principal"))
		return PICK(w_principals, r);
	if (field_is(f, "resource"))
		return PICK(w_resources, r);
	if (field_is(f, "object_class"))
		return PICK(w_classes, r);
	if (field_is(f, "checksum"))
		return PICK(w_checksums, r);
	if (field_is(f, "tenant"))
		return PICK(w_tenants, r);
	if (field_is(f, "user") || field_is(f, "on_behalf_of"))
		return PICK(w_users, r);
	if (field_is(f, "group"))
		return PICK(w_groups, r);
	if (field_is(f, "pool"))
		return PICK(w_pools, r);
	if (field_is(f, "label"))
		return cont ? PICK(w_conts, r) : PICK(w_pools, r);
	switch (rnd(r) % 5) { /* a name of anything */
	case 0:
		return PICK(w_tenants, r);
	case 1:
		return PICK(w_users, r);
	case 2:
		return PICK(w_groups, r);
	case 3:
		return PICK(w_resources, r);
	default:
		return PICK(w_conts, r);
	}
}

/* A wrapped data key (mostly of the right size), a capability (a genuine
 * one, one byte of it changed, or a cut one) or a secret. */
static void bytes_make(struct arena *a, const ProtobufCFieldDescriptor *f, ProtobufCBinaryData *b,
		       uint32_t *r)
{
	static const uint8_t secret[] = SECRET;
	uint8_t *p;

	if (field_is(f, "wrapped_key") && rnd(r) % 4) {
		b->len = AUTH_WRAPPED_SIZE + (rnd(r) % 8 == 0 ? 1 : 0);
		p = arena_alloc(a, b->len);
		if (p)
			memset(p, (int)(rnd(r) & 0xff), b->len);
		b->data = p;
		if (!p)
			b->len = 0;
		return;
	}
	switch (rnd(r) % 6) {
	case 0: /* a genuine token */
	case 1: /* one byte of it changed */
	case 2: /* cut short */
		p = arena_alloc(a, AUTH_CAP_SIZE);
		if (!p)
			return;
		memcpy(p, tokens[R_SYSADMIN + rnd(r) % (R_CONTAINER - R_SYSADMIN + 1)].b,
		       AUTH_CAP_SIZE);
		b->data = p;
		b->len = AUTH_CAP_SIZE;
		if (rnd(r) % 3 == 1)
			p[rnd(r) % AUTH_CAP_SIZE] ^= (uint8_t)(1u + rnd(r) % 255);
		else if (rnd(r) % 3 == 2)
			b->len = rnd(r) % AUTH_CAP_SIZE;
		break;
	case 3: /* the cast's secret */
		b->data = (uint8_t *)secret;
		b->len = sizeof(secret) - 1;
		break;
	case 4: /* the administrator's */
		b->data = (uint8_t *)admin_secret;
		b->len = strlen(admin_secret);
		break;
	default: /* 0 bytes, AUTH_SECRET_MAX bytes, or one more */
		b->len = rnd(r) % 3 == 0 ? 0 : AUTH_SECRET_MAX + rnd(r) % 2;
		p = arena_alloc(a, b->len);
		if (p)
			memset(p, 'x', b->len);
		b->data = p;
		if (!p)
			b->len = 0;
		break;
	}
}

static ProtobufCMessage *message_make(struct arena *a, const ProtobufCMessageDescriptor *d,
				      uint32_t *r, int depth)
{
	ProtobufCMessage *m = arena_alloc(a, d->sizeof_message);

	if (!m)
		return NULL;
	protobuf_c_message_init(d, m);
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		char *at = (char *)m + f->offset;

		if (rnd(r) % 8 == 0)
			continue; /* left out: its default */
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t n = rnd(r) % 4, *count = (size_t *)((char *)m + f->quantifier_offset);
			uint32_t *v;

			/* Requests repeat only target ids (0 and 1 exist). */
			if (f->type != PROTOBUF_C_TYPE_UINT32)
				continue;
			v = arena_alloc(a, n * sizeof(*v));
			if (!v)
				continue;
			for (size_t k = 0; k < n; k++)
				v[k] = rnd(r) % 8 == 0 ? PICK(n_u32, r) : rnd(r) % 3;
			*(uint32_t **)at = v;
			*count = n;
			continue;
		}
		switch (f->type) {
		case PROTOBUF_C_TYPE_STRING:
			*(const char **)at = string_make(d, f, r);
			break;
		case PROTOBUF_C_TYPE_BYTES:
			bytes_make(a, f, (ProtobufCBinaryData *)at, r);
			break;
		case PROTOBUF_C_TYPE_BOOL:
			*(protobuf_c_boolean *)at = rnd(r) % 2;
			break;
		case PROTOBUF_C_TYPE_UINT32:
		case PROTOBUF_C_TYPE_INT32:
		case PROTOBUF_C_TYPE_ENUM:
			*(uint32_t *)at = PICK(n_u32, r);
			break;
		case PROTOBUF_C_TYPE_UINT64:
		case PROTOBUF_C_TYPE_INT64:
			*(uint64_t *)at = PICK(n_u64, r);
			break;
		case PROTOBUF_C_TYPE_MESSAGE:
			if (depth < 2)
				*(ProtobufCMessage **)at = message_make(a, f->descriptor, r, depth + 1);
			break;
		default:
			break;
		}
	}
	return m;
}

/* A well-formed input in data (max_size bytes); 0 if it does not fit. */
static size_t request_make(uint8_t *data, size_t max_size, uint32_t *r)
{
	/* Mostly roles that get past authentication. */
	static const enum role roles[] = {R_NONE, R_SYSADMIN, R_SYSADMIN, R_SYSADMIN,
					  R_TENANT_ADMIN, R_TENANT_ADMIN, R_USER, R_USER,
					  R_CONTAINER, R_GARBAGE};
	unsigned mi = rnd(r) % mgmt_nmethods;
	enum role as = PICK(roles, r);
	struct arena a = {.n = 0};
	ProtobufCMessage *req;
	size_t n, off = 2;

	if (max_size < 2)
		return 0;
	data[0] = (uint8_t)mi;
	data[1] = (uint8_t)as;
	if (as == R_GARBAGE) {
		/* A genuine token with one byte changed: past the decoder, not the MAC. */
		if (max_size < off + AUTH_CAP_SIZE)
			return 0;
		memcpy(data + off, tokens[R_SYSADMIN + rnd(r) % (R_CONTAINER - R_SYSADMIN + 1)].b,
		       AUTH_CAP_SIZE);
		data[off + rnd(r) % AUTH_CAP_SIZE] ^= (uint8_t)(1u + rnd(r) % 255);
		off += AUTH_CAP_SIZE;
	}
	req = message_make(&a, mgmt_methods[mi].in, r, 0);
	n = req ? protobuf_c_message_get_packed_size(req) : 0;
	if (!req || n > max_size - off) {
		arena_free(&a);
		return 0;
	}
	protobuf_c_message_pack(req, data + off);
	arena_free(&a);
	return off + n;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
	uint32_t r = seed ? seed : 1;
	size_t n;

	if (rnd(&r) % 4 == 0 && (n = request_make(data, max_size, &r)) > 0)
		return n;
	return LLVMFuzzerMutate(data, size, max_size);
}

/* ---- the target ------------------------------------------------------------------------ */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct rpc_method *me;
	ProtobufCMessage *req, *reply = NULL;
	struct rpc_call_info ci = {.peer = "ipv4:127.0.0.1:1"};
	uint8_t *cap = NULL;
	size_t cap_len = 0;
	enum role as;
	int st;

	if (inputs % RESET_EVERY == 0)
		svc_begin();
	inputs++;
	if (size < 2)
		return 0;
	me = &mgmt_methods[data[0] % mgmt_nmethods];
	as = (enum role)(data[1] % R_KINDS);
	data += 2;
	size -= 2;
	/* The capability in a buffer of its own, exactly as long, so that a
	 * read past it is ASan's to see. */
	if (as == R_GARBAGE) {
		cap_len = size < AUTH_CAP_SIZE ? size : AUTH_CAP_SIZE;
		cap = malloc(cap_len ? cap_len : 1);
		CHECK(cap);
		memcpy(cap, data, cap_len);
		data += cap_len;
		size -= cap_len;
	} else if (as != R_NONE) {
		cap_len = AUTH_CAP_SIZE;
		cap = malloc(cap_len);
		CHECK(cap);
		memcpy(cap, tokens[as].b, cap_len);
	}

	req = protobuf_c_message_unpack(me->in, NULL, size, data);
	if (!req) {
		free(cap);
		return 0; /* the server's INVALID_ARGUMENT "malformed request" */
	}
	ci.cap = cap;
	ci.cap_len = cap_len;
	memset(msg, 0, sizeof(msg));
	st = me->fn(svc, &ci, req, &reply, msg, sizeof(msg));
	protobuf_c_message_free_unpacked(req, NULL);

	CHECK(status_known(st));
	CHECK(memchr(msg, '\0', sizeof(msg)));
	if (st == RPC_OK) {
		CHECK(reply);
		reply_check(reply);
		me->reply_free(reply);
	} else {
		CHECK(!reply);
		CHECK(msg[0]);
	}
	verdict_check(me, as, cap, cap_len, st);
	model_check();
	free(cap);
	if (st == RPC_OK && me == m_rotate)
		tokens_renew();
	return 0;
}
