/*
 * lode_rpc over plaintext: a server on 127.0.0.1 with a few methods of the
 * real proto (lode.mgmt.v1.Mgmt), called through rpc_call. Checks replies,
 * status codes and messages, the capability metadata byte for byte, bad
 * requests of every kind (each followed by a good call, as the server must
 * keep serving), concurrency, timeouts, and starting and stopping.
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#include "lode/errno.h"
#include "lode/mgmt/v1/mgmt.pb-c.h"
#include "mgmt/rpc.h"

#define M_TENANT_CREATE "/lode.mgmt.v1.Mgmt/TenantCreate"
#define M_USER_REVOKE "/lode.mgmt.v1.Mgmt/UserRevoke"
#define M_RENEW "/lode.mgmt.v1.Mgmt/RenewCapability"
#define M_TENANT_DESTROY "/lode.mgmt.v1.Mgmt/TenantDestroy"
#define M_POOL_QUERY "/lode.mgmt.v1.Mgmt/PoolQuery"

/* What the handlers saw, for the tests to check. */
struct seen {
	pthread_mutex_t mu;
	char peer[128];
	unsigned calls;
};

static struct seen g_seen = { .mu = PTHREAD_MUTEX_INITIALIZER };

static int64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* A heap copy of a message built on the stack, so every reply frees the same way. */
static ProtobufCMessage *msg_copy(const ProtobufCMessage *m)
{
	size_t n = protobuf_c_message_get_packed_size(m);
	uint8_t *buf = malloc(n ? n : 1);
	ProtobufCMessage *c;

	/* Runs on the server's thread, where cmocka cannot fail a test. */
	if (!buf)
		abort();
	protobuf_c_message_pack(m, buf);
	c = protobuf_c_message_unpack(m->descriptor, NULL, n, buf);
	free(buf);
	if (!c)
		abort();
	return c;
}

static void msg_free(ProtobufCMessage *m)
{
	protobuf_c_message_free_unpacked(m, NULL);
}

static void seen_note(void *arg, const struct rpc_call_info *ci)
{
	struct seen *s = arg;

	pthread_mutex_lock(&s->mu);
	snprintf(s->peer, sizeof(s->peer), "%s", ci->peer);
	s->calls++;
	pthread_mutex_unlock(&s->mu);
}

/* TenantCreate: echo the name. */
static int h_tenant_create(void *arg, const struct rpc_call_info *ci, const ProtobufCMessage *req,
			   ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const Lode__Mgmt__V1__NameRef *r = (const Lode__Mgmt__V1__NameRef *)req;
	Lode__Mgmt__V1__Tenant t = LODE__MGMT__V1__TENANT__INIT;

	seen_note(arg, ci);
	t.name = r->name;
	t.created_unix_ms = 42;
	*reply = msg_copy(&t.base);
	return RPC_OK;
}

/* UserRevoke: there is never such a user. */
static int h_user_revoke(void *arg, const struct rpc_call_info *ci, const ProtobufCMessage *req,
			 ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const Lode__Mgmt__V1__NameRef *r = (const Lode__Mgmt__V1__NameRef *)req;

	seen_note(arg, ci);
	snprintf(msg, msg_cap, "no user %s", r->name);
	return RPC_NOT_FOUND;
}

/* RenewCapability: send back the capability metadata as received, and its
 * length (-1: none came). */
static int h_renew(void *arg, const struct rpc_call_info *ci, const ProtobufCMessage *req,
		   ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	Lode__Mgmt__V1__RenewReply r = LODE__MGMT__V1__RENEW_REPLY__INIT;

	seen_note(arg, ci);
	r.capability.data = (uint8_t *)ci->cap;
	r.capability.len = ci->cap_len;
	r.expires_unix_ms = ci->cap ? (int64_t)ci->cap_len : -1;
	*reply = msg_copy(&r.base);
	return RPC_OK;
}

/* TenantDestroy: "sleep:N" sleeps N ms and succeeds; "status:N" fails with
 * status N; "reply:N" fails with status N but sets a reply anyway. */
static int h_tenant_destroy(void *arg, const struct rpc_call_info *ci, const ProtobufCMessage *req,
			    ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const Lode__Mgmt__V1__NameRef *r = (const Lode__Mgmt__V1__NameRef *)req;
	Lode__Mgmt__V1__Empty e = LODE__MGMT__V1__EMPTY__INIT;
	int n;

	seen_note(arg, ci);
	if (sscanf(r->name, "sleep:%d", &n) == 1) {
		usleep((useconds_t)n * 1000);
	} else if (sscanf(r->name, "status:%d", &n) == 1) {
		snprintf(msg, msg_cap, "status %d", n);
		return n;
	} else if (sscanf(r->name, "reply:%d", &n) == 1) {
		*reply = msg_copy(&e.base);
		snprintf(msg, msg_cap, "status %d with a reply", n);
		return n;
	}
	*reply = msg_copy(&e.base);
	return RPC_OK;
}

/* PoolQuery: claims success but gives no reply (a handler bug). */
static int h_pool_query(void *arg, const struct rpc_call_info *ci, const ProtobufCMessage *req,
			ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	seen_note(arg, ci);
	return RPC_OK;
}

static const struct rpc_method g_methods[] = {
	{ M_TENANT_CREATE, &lode__mgmt__v1__name_ref__descriptor, h_tenant_create, msg_free },
	{ M_USER_REVOKE, &lode__mgmt__v1__name_ref__descriptor, h_user_revoke, msg_free },
	{ M_RENEW, &lode__mgmt__v1__renew_request__descriptor, h_renew, msg_free },
	{ M_TENANT_DESTROY, &lode__mgmt__v1__name_ref__descriptor, h_tenant_destroy, msg_free },
	{ M_POOL_QUERY, &lode__mgmt__v1__pool_ref__descriptor, h_pool_query, msg_free },
};
#define NMETHODS (sizeof(g_methods) / sizeof(g_methods[0]))

struct fix {
	rpc_server_t *srv;
	rpc_channel_t *ch;
	int port;
	char addr[64];
};

static int start_server(struct fix *f)
{
	char msg[256];
	int rc = rpc_server_start("127.0.0.1:0", NULL, g_methods, NMETHODS, &g_seen, &f->port,
				  &f->srv, msg, sizeof(msg));

	if (rc) {
		fprintf(stderr, "rpc_server_start: %d %s\n", rc, msg);
		return rc;
	}
	snprintf(f->addr, sizeof(f->addr), "127.0.0.1:%d", f->port);
	return rpc_channel_open(f->addr, NULL, &f->ch);
}

static int group_setup(void **state)
{
	static struct fix f;

	*state = &f;
	return start_server(&f);
}

static int group_teardown(void **state)
{
	struct fix *f = *state;

	rpc_channel_close(f->ch);
	rpc_server_stop(f->srv);
	return 0;
}

/* What tenant_create returns for an OK reply that is not the echo. */
#define ECHO_WRONG 1000

/* TenantCreate(name) through rpc_call; returns the status, or ECHO_WRONG.
 * No cmocka asserts: worker threads call it. */
static int tenant_create(rpc_channel_t *ch, const char *name, unsigned timeout_ms, char *msg,
			 size_t msg_cap)
{
	Lode__Mgmt__V1__NameRef r = LODE__MGMT__V1__NAME_REF__INIT;
	ProtobufCMessage *reply = NULL;
	int st;

	r.name = (char *)name;
	st = rpc_call(ch, M_TENANT_CREATE, &r.base, &lode__mgmt__v1__tenant__descriptor, NULL, 0,
		      timeout_ms, &reply, msg, msg_cap);
	if (st == RPC_OK) {
		Lode__Mgmt__V1__Tenant *t = (Lode__Mgmt__V1__Tenant *)reply;

		if (!t || strcmp(t->name, name) != 0 || t->created_unix_ms != 42)
			st = ECHO_WRONG;
		if (t)
			protobuf_c_message_free_unpacked(reply, NULL);
	} else if (reply) {
		st = ECHO_WRONG;
	}
	return st;
}

static void assert_serving(struct fix *f)
{
	char msg[256];

	assert_int_equal(tenant_create(f->ch, "still-serving", 5000, msg, sizeof(msg)), RPC_OK);
}

static int name_call(rpc_channel_t *ch, const char *method, const char *name, unsigned timeout_ms,
		     char *msg, size_t msg_cap)
{
	Lode__Mgmt__V1__NameRef r = LODE__MGMT__V1__NAME_REF__INIT;
	ProtobufCMessage *reply = NULL;
	int st;

	r.name = (char *)name;
	st = rpc_call(ch, method, &r.base, &lode__mgmt__v1__empty__descriptor, NULL, 0, timeout_ms,
		      &reply, msg, msg_cap);
	if (reply)
		protobuf_c_message_free_unpacked(reply, NULL);
	return st;
}

static void test_echo(void **state)
{
	struct fix *f = *state;
	char msg[256];

	assert_int_equal(tenant_create(f->ch, "alpha", 5000, msg, sizeof(msg)), RPC_OK);
	assert_string_equal(msg, "");
	/* An empty name is a valid (empty) string field. */
	assert_int_equal(tenant_create(f->ch, "", 5000, msg, sizeof(msg)), RPC_OK);
	pthread_mutex_lock(&g_seen.mu);
	assert_memory_equal(g_seen.peer, "ipv4:127.0.0.1:", strlen("ipv4:127.0.0.1:"));
	pthread_mutex_unlock(&g_seen.mu);
}

static void test_not_found(void **state)
{
	struct fix *f = *state;
	Lode__Mgmt__V1__NameRef r = LODE__MGMT__V1__NAME_REF__INIT;
	ProtobufCMessage *reply = (ProtobufCMessage *)&r; /* must come back NULL */
	char msg[256];
	int st;

	r.name = "bob";
	st = rpc_call(f->ch, M_USER_REVOKE, &r.base, &lode__mgmt__v1__user__descriptor, NULL, 0,
		      5000, &reply, msg, sizeof(msg));
	assert_int_equal(st, RPC_NOT_FOUND);
	assert_null(reply);
	assert_string_equal(msg, "no user bob");
	assert_int_equal(rpc_status_errno(st), -ENOENT);
}

static int renew(rpc_channel_t *ch, const void *cap, size_t cap_len,
		 Lode__Mgmt__V1__RenewReply **out)
{
	Lode__Mgmt__V1__RenewRequest r = LODE__MGMT__V1__RENEW_REQUEST__INIT;
	ProtobufCMessage *reply = NULL;
	char msg[256];
	int st;

	st = rpc_call(ch, M_RENEW, &r.base, &lode__mgmt__v1__renew_reply__descriptor, cap, cap_len,
		      5000, &reply, msg, sizeof(msg));
	*out = (Lode__Mgmt__V1__RenewReply *)reply;
	return st;
}

static void test_cap_metadata(void **state)
{
	struct fix *f = *state;
	static const uint8_t small[] = { 0, 1, 2, 0, 0xff, 'a', 0 };
	uint8_t big[104];
	Lode__Mgmt__V1__RenewReply *r;

	assert_int_equal(renew(f->ch, small, sizeof(small), &r), RPC_OK);
	assert_int_equal(r->expires_unix_ms, sizeof(small));
	assert_int_equal(r->capability.len, sizeof(small));
	assert_memory_equal(r->capability.data, small, sizeof(small));
	protobuf_c_message_free_unpacked(&r->base, NULL);

	/* Every byte value, at a capability's size. */
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 37 + 11);
	big[0] = 0;
	big[103] = 0xff;
	assert_int_equal(renew(f->ch, big, sizeof(big), &r), RPC_OK);
	assert_int_equal(r->capability.len, sizeof(big));
	assert_memory_equal(r->capability.data, big, sizeof(big));
	protobuf_c_message_free_unpacked(&r->base, NULL);

	/* No capability: the handler sees none. */
	assert_int_equal(renew(f->ch, NULL, 0, &r), RPC_OK);
	assert_int_equal(r->expires_unix_ms, -1);
	assert_int_equal(r->capability.len, 0);
	protobuf_c_message_free_unpacked(&r->base, NULL);
}

static void test_unknown_method(void **state)
{
	struct fix *f = *state;
	char msg[256];
	int st;

	st = name_call(f->ch, "/lode.mgmt.v1.Mgmt/NoSuchMethod", "x", 5000, msg, sizeof(msg));
	assert_int_equal(st, RPC_UNIMPLEMENTED);
	assert_int_equal(st, GRPC_STATUS_UNIMPLEMENTED);
	assert_non_null(strstr(msg, "/lode.mgmt.v1.Mgmt/NoSuchMethod"));
	assert_int_equal(rpc_status_errno(st), -EOPNOTSUPP);
	/* Twice: the unregistered-method slot takes the next one too. */
	st = name_call(f->ch, "/other.Service/Method", "x", 5000, msg, sizeof(msg));
	assert_int_equal(st, RPC_UNIMPLEMENTED);
	assert_serving(f);
}

/*
 * A call made with gRPC core directly, sending bytes no encoder would:
 * payload (len bytes) or, with payload NULL, no message at all.
 */
static int raw_call(const char *addr, const char *method, const void *payload, size_t len,
		    char *msg, size_t msg_cap)
{
	grpc_channel_credentials *creds;
	grpc_completion_queue *cq;
	grpc_channel *ch;
	grpc_call *call;
	grpc_byte_buffer *send = NULL, *recv = NULL;
	grpc_metadata_array init_md, trail_md;
	grpc_status_code status = GRPC_STATUS_UNKNOWN;
	grpc_slice details = grpc_empty_slice(), mslice;
	grpc_op ops[6], *op = ops;

	grpc_init();
	creds = grpc_insecure_credentials_create();
	ch = grpc_channel_create(addr, creds, NULL);
	grpc_channel_credentials_release(creds);
	cq = grpc_completion_queue_create_for_pluck(NULL);
	mslice = grpc_slice_from_copied_string(method);
	call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, mslice, NULL,
					gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
						     gpr_time_from_millis(5000, GPR_TIMESPAN)),
					NULL);
	grpc_slice_unref(mslice);
	grpc_metadata_array_init(&init_md);
	grpc_metadata_array_init(&trail_md);
	memset(ops, 0, sizeof(ops));
	op->op = GRPC_OP_SEND_INITIAL_METADATA;
	op++;
	if (payload) {
		grpc_slice s = grpc_slice_from_copied_buffer(payload, len);

		send = grpc_raw_byte_buffer_create(&s, 1);
		grpc_slice_unref(s);
		op->op = GRPC_OP_SEND_MESSAGE;
		op->data.send_message.send_message = send;
		op++;
	}
	op->op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
	op++;
	op->op = GRPC_OP_RECV_INITIAL_METADATA;
	op->data.recv_initial_metadata.recv_initial_metadata = &init_md;
	op++;
	op->op = GRPC_OP_RECV_MESSAGE;
	op->data.recv_message.recv_message = &recv;
	op++;
	op->op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	op->data.recv_status_on_client.trailing_metadata = &trail_md;
	op->data.recv_status_on_client.status = &status;
	op->data.recv_status_on_client.status_details = &details;
	op++;
	assert_int_equal(grpc_call_start_batch(call, ops, (size_t)(op - ops), call, NULL),
			 GRPC_CALL_OK);
	grpc_completion_queue_pluck(cq, call, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
	snprintf(msg, msg_cap, "%.*s", (int)GRPC_SLICE_LENGTH(details),
		 (const char *)GRPC_SLICE_START_PTR(details));
	assert_null(recv);

	grpc_call_unref(call);
	grpc_completion_queue_shutdown(cq);
	while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
	       GRPC_QUEUE_SHUTDOWN)
		;
	grpc_completion_queue_destroy(cq);
	grpc_slice_unref(details);
	grpc_metadata_array_destroy(&init_md);
	grpc_metadata_array_destroy(&trail_md);
	if (send)
		grpc_byte_buffer_destroy(send);
	grpc_channel_destroy(ch);
	grpc_shutdown();
	return (int)status;
}

static void test_malformed_request(void **state)
{
	struct fix *f = *state;
	/* A string field whose length runs past the end. */
	static const uint8_t truncated[] = { 0x0a, 0x10, 'a' };
	/* A field with wire type 7, which does not exist. */
	static const uint8_t bad_wire[] = { 0x0f, 0x01 };
	/* A varint that never ends. */
	static const uint8_t endless[] = { 0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
					   0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	Lode__Mgmt__V1__PoolMap pm = LODE__MGMT__V1__POOL_MAP__INIT;
	ProtobufCMessage *reply = NULL;
	char msg[256];
	int st;

	assert_int_equal(raw_call(f->addr, M_TENANT_CREATE, truncated, sizeof(truncated), msg,
				  sizeof(msg)),
			 RPC_INVALID_ARGUMENT);
	assert_string_equal(msg, "malformed request");
	assert_serving(f);
	assert_int_equal(raw_call(f->addr, M_TENANT_CREATE, bad_wire, sizeof(bad_wire), msg,
				  sizeof(msg)),
			 RPC_INVALID_ARGUMENT);
	assert_int_equal(raw_call(f->addr, M_RENEW, endless, sizeof(endless), msg, sizeof(msg)),
			 RPC_INVALID_ARGUMENT);
	assert_serving(f);
	/* No message at all. */
	assert_int_equal(raw_call(f->addr, M_TENANT_CREATE, NULL, 0, msg, sizeof(msg)),
			 RPC_INVALID_ARGUMENT);
	assert_string_equal(msg, "malformed request");
	assert_serving(f);

	/* A well-formed message of another type whose field 1 is a varint,
	 * where NameRef has a string. */
	pm.version = 5;
	st = rpc_call(f->ch, M_TENANT_CREATE, &pm.base, &lode__mgmt__v1__tenant__descriptor, NULL,
		      0, 5000, &reply, msg, sizeof(msg));
	assert_int_equal(st, RPC_INVALID_ARGUMENT);
	assert_null(reply);
	assert_string_equal(msg, "malformed request");
	assert_int_equal(rpc_status_errno(st), -EINVAL);
	assert_serving(f);
}

static void test_malformed_reply(void **state)
{
	struct fix *f = *state;
	Lode__Mgmt__V1__NameRef r = LODE__MGMT__V1__NAME_REF__INIT;
	ProtobufCMessage *reply = NULL;
	char msg[256];

	/* The server sends a Tenant; read as a PoolMap its field 1 has the
	 * wrong wire type. */
	r.name = "gamma";
	assert_int_equal(rpc_call(f->ch, M_TENANT_CREATE, &r.base,
				  &lode__mgmt__v1__pool_map__descriptor, NULL, 0, 5000, &reply, msg,
				  sizeof(msg)),
			 RPC_INTERNAL);
	assert_null(reply);
	assert_string_equal(msg, "malformed reply");
}

static void test_handler_errors(void **state)
{
	struct fix *f = *state;
	Lode__Mgmt__V1__PoolRef pr = LODE__MGMT__V1__POOL_REF__INIT;
	ProtobufCMessage *reply = NULL;
	char msg[256];

	/* OK without a reply. */
	assert_int_equal(rpc_call(f->ch, M_POOL_QUERY, &pr.base,
				  &lode__mgmt__v1__pool_info__descriptor, NULL, 0, 5000, &reply,
				  msg, sizeof(msg)),
			 RPC_INTERNAL);
	assert_null(reply);
	assert_non_null(strstr(msg, "gave no reply"));
	/* A status that is not gRPC's goes out as UNKNOWN. */
	assert_int_equal(name_call(f->ch, M_TENANT_DESTROY, "status:99", 5000, msg, sizeof(msg)),
			 RPC_UNKNOWN);
	assert_string_equal(msg, "status 99");
	assert_int_equal(name_call(f->ch, M_TENANT_DESTROY, "status:-5", 5000, msg, sizeof(msg)),
			 RPC_UNKNOWN);
	/* An error with a reply set: the reply is freed (ASan checks), the
	 * error goes out. */
	assert_int_equal(name_call(f->ch, M_TENANT_DESTROY, "reply:7", 5000, msg, sizeof(msg)),
			 RPC_PERMISSION_DENIED);
	assert_string_equal(msg, "status 7 with a reply");
	assert_int_equal(name_call(f->ch, M_TENANT_DESTROY, "status:16", 5000, msg, sizeof(msg)),
			 RPC_UNAUTHENTICATED);
	assert_int_equal(name_call(f->ch, M_TENANT_DESTROY, "plain", 5000, msg, sizeof(msg)),
			 RPC_OK);
	assert_serving(f);
}

static void test_message_limit(void **state)
{
	struct fix *f = *state;
	size_t n = RPC_MAX_MESSAGE + 1024;
	char *big = malloc(n + 1);
	char msg[256];

	assert_non_null(big);
	memset(big, 'x', n);
	big[n] = '\0';
	assert_int_equal(tenant_create(f->ch, big, 10000, msg, sizeof(msg)),
			 RPC_RESOURCE_EXHAUSTED);
	/* Just under the limit goes through, both ways. */
	big[RPC_MAX_MESSAGE - 64] = '\0';
	assert_int_equal(tenant_create(f->ch, big, 10000, msg, sizeof(msg)), RPC_OK);
	free(big);
	assert_serving(f);
}

static void test_many_calls(void **state)
{
	struct fix *f = *state;
	char name[32], msg[256];

	for (int i = 0; i < 300; i++) {
		snprintf(name, sizeof(name), "tenant-%d", i);
		assert_int_equal(tenant_create(f->ch, name, 5000, msg, sizeof(msg)), RPC_OK);
	}
}

struct worker {
	rpc_channel_t *ch;
	int id;
	int ok;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	char name[32], msg[256];

	for (int i = 0; i < 100; i++) {
		snprintf(name, sizeof(name), "w%d-%d", w->id, i);
		if (tenant_create(w->ch, name, 10000, msg, sizeof(msg)) == RPC_OK)
			w->ok++;
	}
	return NULL;
}

static void test_threads(void **state)
{
	struct fix *f = *state;
	struct worker w[4];
	pthread_t t[4];
	unsigned before, after;

	pthread_mutex_lock(&g_seen.mu);
	before = g_seen.calls;
	pthread_mutex_unlock(&g_seen.mu);
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){ .ch = f->ch, .id = i };
		assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(w[i].ok, 100);
	}
	pthread_mutex_lock(&g_seen.mu);
	after = g_seen.calls;
	pthread_mutex_unlock(&g_seen.mu);
	assert_int_equal(after - before, 400);
}

static void test_deadline(void **state)
{
	struct fix *f = *state;
	char msg[256];
	int64_t t0 = now_ms(), dt;
	int st;

	st = name_call(f->ch, M_TENANT_DESTROY, "sleep:1500", 300, msg, sizeof(msg));
	dt = now_ms() - t0;
	assert_int_equal(st, RPC_DEADLINE_EXCEEDED);
	assert_int_equal(rpc_status_errno(st), -ETIMEDOUT);
	assert_true(dt >= 250 && dt < 1200);
	/* The server finishes the sleep, then serves the next call. */
	assert_serving(f);
}

struct sleeper {
	rpc_channel_t *ch;
	int st;
};

static void *sleeper_main(void *arg)
{
	struct sleeper *sl = arg;
	char msg[256];

	sl->st = name_call(sl->ch, M_TENANT_DESTROY, "sleep:1000", 5000, msg, sizeof(msg));
	return NULL;
}

static unsigned seen_calls(void)
{
	unsigned n;

	pthread_mutex_lock(&g_seen.mu);
	n = g_seen.calls;
	pthread_mutex_unlock(&g_seen.mu);
	return n;
}

/* A call whose caller gave up while it waited behind a slow one is
 * answered DEADLINE_EXCEEDED without running its handler: under a backlog
 * the thread spends nothing on answers nobody reads. */
static void test_expired_skipped(void **state)
{
	struct fix *f = *state;
	struct sleeper sl = {.ch = f->ch};
	char msg[256];
	unsigned before;
	pthread_t t;

	before = seen_calls();
	assert_int_equal(pthread_create(&t, NULL, sleeper_main, &sl), 0);
	for (int i = 0; i < 400 && seen_calls() == before; i++)
		usleep(2000);
	assert_int_equal(seen_calls(), before + 1); /* the slow call runs */
	before++;
	assert_int_equal(tenant_create(f->ch, "too-late", 300, msg, sizeof(msg)),
			 RPC_DEADLINE_EXCEEDED);
	pthread_join(t, NULL);
	assert_int_equal(sl.st, RPC_OK);
	assert_serving(f);
	/* Only assert_serving's call ran. */
	assert_int_equal(seen_calls() - before, 1);
}

static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

static void test_unavailable(void **state)
{
	rpc_channel_t *ch;
	char addr[64], msg[256];
	int64_t t0, dt;
	int st;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", free_port());
	assert_int_equal(rpc_channel_open(addr, NULL, &ch), 0);
	t0 = now_ms();
	st = tenant_create(ch, "nobody", 5000, msg, sizeof(msg));
	dt = now_ms() - t0;
	assert_int_equal(st, RPC_UNAVAILABLE);
	assert_int_equal(rpc_status_errno(st), -ECONNREFUSED);
	assert_true(dt < 4500);
	assert_true(strlen(msg) > 0);
	rpc_channel_close(ch);
}

static void test_stop_idle(void **state)
{
	struct fix f = { 0 };
	int64_t t0;

	assert_int_equal(start_server(&f), 0);
	t0 = now_ms();
	rpc_server_stop(f.srv);
	assert_true(now_ms() - t0 < 1000);
	rpc_channel_close(f.ch);
	rpc_server_stop(NULL);
	rpc_channel_close(NULL);
}

/* A client still connected (its channel open, idle) does not hold stop up. */
static void test_stop_connected(void **state)
{
	struct fix f = { 0 };
	char msg[256];
	int64_t t0;

	assert_int_equal(start_server(&f), 0);
	assert_int_equal(tenant_create(f.ch, "one", 5000, msg, sizeof(msg)), RPC_OK);
	t0 = now_ms();
	rpc_server_stop(f.srv);
	assert_true(now_ms() - t0 < 1000);
	/* The channel now finds no server. */
	assert_int_equal(tenant_create(f.ch, "two", 2000, msg, sizeof(msg)), RPC_UNAVAILABLE);
	rpc_channel_close(f.ch);
}

struct slow_call {
	rpc_channel_t *ch;
	const char *name; /* "sleep:N" */
	int st;
};

static void *slow_call_main(void *arg)
{
	struct slow_call *c = arg;
	char msg[256];

	c->st = name_call(c->ch, M_TENANT_DESTROY, c->name, 10000, msg, sizeof(msg));
	return NULL;
}

/* A raw call that sends its request but never closes its side. */
struct half_open {
	grpc_channel *ch;
	grpc_completion_queue *cq;
	grpc_call *call;
	grpc_byte_buffer *send, *recv;
	grpc_metadata_array init_md, trail_md;
	grpc_status_code status;
	grpc_slice details;
};

static void half_open_start(struct half_open *h, const char *addr)
{
	Lode__Mgmt__V1__NameRef r = LODE__MGMT__V1__NAME_REF__INIT;
	grpc_channel_credentials *creds;
	grpc_slice mslice, s;
	uint8_t buf[64];
	grpc_op ops[5];

	memset(h, 0, sizeof(*h));
	grpc_init();
	creds = grpc_insecure_credentials_create();
	h->ch = grpc_channel_create(addr, creds, NULL);
	grpc_channel_credentials_release(creds);
	h->cq = grpc_completion_queue_create_for_pluck(NULL);
	mslice = grpc_slice_from_static_string(M_TENANT_CREATE);
	h->call = grpc_channel_create_call(h->ch, NULL, GRPC_PROPAGATE_DEFAULTS, h->cq, mslice,
					   NULL,
					   gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
							gpr_time_from_millis(60000, GPR_TIMESPAN)),
					   NULL);
	r.name = "half-open";
	s = grpc_slice_from_copied_buffer((const char *)buf,
					  protobuf_c_message_pack(&r.base, buf));
	h->send = grpc_raw_byte_buffer_create(&s, 1);
	grpc_slice_unref(s);
	h->details = grpc_empty_slice();
	grpc_metadata_array_init(&h->init_md);
	grpc_metadata_array_init(&h->trail_md);
	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
	ops[1].op = GRPC_OP_SEND_MESSAGE;
	ops[1].data.send_message.send_message = h->send;
	/* no GRPC_OP_SEND_CLOSE_FROM_CLIENT */
	ops[2].op = GRPC_OP_RECV_INITIAL_METADATA;
	ops[2].data.recv_initial_metadata.recv_initial_metadata = &h->init_md;
	ops[3].op = GRPC_OP_RECV_MESSAGE;
	ops[3].data.recv_message.recv_message = &h->recv;
	ops[4].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	ops[4].data.recv_status_on_client.trailing_metadata = &h->trail_md;
	ops[4].data.recv_status_on_client.status = &h->status;
	ops[4].data.recv_status_on_client.status_details = &h->details;
	assert_int_equal(grpc_call_start_batch(h->call, ops, 5, h->call, NULL), GRPC_CALL_OK);
}

/* Wait for the call's status (the server answers without our close). */
static int half_open_wait(struct half_open *h)
{
	grpc_event ev = grpc_completion_queue_pluck(
		h->cq, h->call,
		gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(10000, GPR_TIMESPAN)),
		NULL);

	assert_int_equal(ev.type, GRPC_OP_COMPLETE);
	return (int)h->status;
}

static void half_open_free(struct half_open *h)
{
	grpc_call_unref(h->call);
	grpc_completion_queue_shutdown(h->cq);
	while (grpc_completion_queue_pluck(h->cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
		       .type != GRPC_QUEUE_SHUTDOWN)
		;
	grpc_completion_queue_destroy(h->cq);
	grpc_byte_buffer_destroy(h->send);
	if (h->recv)
		grpc_byte_buffer_destroy(h->recv);
	grpc_slice_unref(h->details);
	grpc_metadata_array_destroy(&h->init_md);
	grpc_metadata_array_destroy(&h->trail_md);
	grpc_channel_destroy(h->ch);
	grpc_shutdown();
}

/* A client that never closes its side holds up neither the method nor stop. */
static void test_half_open_client(void **state)
{
	struct fix f = { 0 };
	struct half_open h[3];
	char msg[256];
	int64_t t0, dt;

	assert_int_equal(start_server(&f), 0);
	for (int i = 0; i < 3; i++)
		half_open_start(&h[i], f.addr);
	for (int i = 0; i < 20; i++)
		assert_int_equal(tenant_create(f.ch, "beside", 5000, msg, sizeof(msg)), RPC_OK);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(half_open_wait(&h[i]), RPC_OK);
		assert_non_null(h[i].recv);
	}
	/* Their calls still open on our side, stop the server. */
	t0 = now_ms();
	rpc_server_stop(f.srv);
	dt = now_ms() - t0;
	assert_true(dt < 3500);
	for (int i = 0; i < 3; i++)
		half_open_free(&h[i]);
	rpc_channel_close(f.ch);
}

/* Stop lets the call in progress finish with its reply. */
static void test_stop_in_flight(void **state)
{
	struct fix f = { 0 };
	struct slow_call c = { .name = "sleep:500", .st = -1 };
	pthread_t t;

	assert_int_equal(start_server(&f), 0);
	c.ch = f.ch;
	assert_int_equal(pthread_create(&t, NULL, slow_call_main, &c), 0);
	usleep(200 * 1000);
	rpc_server_stop(f.srv);
	pthread_join(t, NULL);
	assert_int_equal(c.st, RPC_OK);
	rpc_channel_close(f.ch);
}

/* A call that outlasts stop's grace period (2 s) is cancelled; stop still
 * waits for its handler to return. */
static void test_stop_grace(void **state)
{
	struct fix f = { 0 };
	struct slow_call c = { .name = "sleep:3000", .st = -1 };
	int64_t t0, dt;
	pthread_t t;

	assert_int_equal(start_server(&f), 0);
	c.ch = f.ch;
	assert_int_equal(pthread_create(&t, NULL, slow_call_main, &c), 0);
	usleep(200 * 1000);
	t0 = now_ms();
	rpc_server_stop(f.srv);
	dt = now_ms() - t0;
	pthread_join(t, NULL);
	assert_true(dt >= 2500 && dt < 5000);
	assert_int_not_equal(c.st, RPC_OK);
	assert_int_not_equal(c.st, RPC_DEADLINE_EXCEEDED);
	rpc_channel_close(f.ch);
}

static void test_start_errors(void **state)
{
	struct fix *f = *state;
	struct rpc_method dup[2] = { g_methods[0], g_methods[0] };
	struct rpc_method nofn = g_methods[0];
	rpc_server_t *s = (rpc_server_t *)1;
	char addr[64], msg[256];
	int port = -1, rc;

	/* The fixture's port, taken. */
	rc = rpc_server_start(f->addr, NULL, g_methods, NMETHODS, NULL, &port, &s, msg,
			      sizeof(msg));
	assert_int_equal(rc, -EADDRINUSE);
	assert_null(s);
	assert_non_null(strstr(msg, "in use"));
	assert_int_equal(port, -1);

	rc = rpc_server_start("127.0.0.1:99999", NULL, g_methods, NMETHODS, NULL, &port, &s, msg,
			      sizeof(msg));
	assert_int_equal(rc, -EINVAL);
	assert_null(s);
	assert_non_null(strstr(msg, "127.0.0.1:99999"));
	rc = rpc_server_start("no-port-here", NULL, g_methods, NMETHODS, NULL, &port, &s, msg,
			      sizeof(msg));
	assert_int_equal(rc, -EINVAL);

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", free_port());
	rc = rpc_server_start(addr, NULL, dup, 2, NULL, &port, &s, msg, sizeof(msg));
	assert_int_equal(rc, -EINVAL);
	assert_non_null(strstr(msg, "registered twice"));
	nofn.fn = NULL;
	rc = rpc_server_start(addr, NULL, &nofn, 1, NULL, &port, &s, msg, sizeof(msg));
	assert_int_equal(rc, -EINVAL);
	rc = rpc_server_start(NULL, NULL, g_methods, NMETHODS, NULL, &port, &s, msg, sizeof(msg));
	assert_int_equal(rc, -EINVAL);

	/* No methods at all is a server that answers UNIMPLEMENTED. */
	rc = rpc_server_start(addr, NULL, NULL, 0, NULL, &port, &s, msg, sizeof(msg));
	assert_int_equal(rc, 0);
	{
		rpc_channel_t *ch;

		assert_int_equal(rpc_channel_open(addr, NULL, &ch), 0);
		assert_int_equal(tenant_create(ch, "x", 5000, msg, sizeof(msg)), RPC_UNIMPLEMENTED);
		rpc_channel_close(ch);
	}
	rpc_server_stop(s);
}

static void test_status_errno(void **state)
{
	assert_int_equal(rpc_status_errno(RPC_OK), 0);
	assert_int_equal(rpc_status_errno(RPC_PERMISSION_DENIED), -EACCES);
	assert_int_equal(rpc_status_errno(RPC_UNAUTHENTICATED), -LODE_EAUTH);
	assert_int_equal(rpc_status_errno(RPC_NOT_FOUND), -ENOENT);
	assert_int_equal(rpc_status_errno(RPC_ALREADY_EXISTS), -EEXIST);
	assert_int_equal(rpc_status_errno(RPC_INVALID_ARGUMENT), -EINVAL);
	assert_int_equal(rpc_status_errno(RPC_FAILED_PRECONDITION), -ENOTEMPTY);
	assert_int_equal(rpc_status_errno(RPC_RESOURCE_EXHAUSTED), -ENOSPC);
	assert_int_equal(rpc_status_errno(RPC_DEADLINE_EXCEEDED), -ETIMEDOUT);
	assert_int_equal(rpc_status_errno(RPC_UNAVAILABLE), -ECONNREFUSED);
	assert_int_equal(rpc_status_errno(RPC_UNIMPLEMENTED), -EOPNOTSUPP);
	assert_int_equal(rpc_status_errno(RPC_INTERNAL), -EIO);
	assert_int_equal(rpc_status_errno(RPC_CANCELLED), -EIO);
	assert_int_equal(rpc_status_errno(12345), -EIO);
	assert_int_equal(rpc_status_errno(-1), -EIO);
	/* rpc.h's values are gRPC's. */
	assert_int_equal(RPC_UNAUTHENTICATED, GRPC_STATUS_UNAUTHENTICATED);
	assert_int_equal(RPC_UNAVAILABLE, GRPC_STATUS_UNAVAILABLE);
	assert_int_equal(RPC_INTERNAL, GRPC_STATUS_INTERNAL);
	assert_int_equal(RPC_ABORTED, GRPC_STATUS_ABORTED);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_echo),
		cmocka_unit_test(test_not_found),
		cmocka_unit_test(test_cap_metadata),
		cmocka_unit_test(test_unknown_method),
		cmocka_unit_test(test_malformed_request),
		cmocka_unit_test(test_malformed_reply),
		cmocka_unit_test(test_handler_errors),
		cmocka_unit_test(test_message_limit),
		cmocka_unit_test(test_many_calls),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_deadline),
		cmocka_unit_test(test_expired_skipped),
		cmocka_unit_test(test_unavailable),
		cmocka_unit_test(test_stop_idle),
		cmocka_unit_test(test_stop_connected),
		cmocka_unit_test(test_half_open_client),
		cmocka_unit_test(test_stop_in_flight),
		cmocka_unit_test(test_stop_grace),
		cmocka_unit_test(test_start_errors),
		cmocka_unit_test(test_status_errno),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
