/*
 * lode_rpc over TLS, with two test CAs from scripts/make-test-ca.sh: a TLS
 * client that trusts the server's CA is served; a plaintext client, a
 * client that trusts another CA and (where the server asks for client
 * certificates) a client with a certificate from another CA are refused at
 * the handshake (UNAVAILABLE); TLS files that are missing, garbage or do not
 * match make start and open fail with -EINVAL and say which file.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "lode/mgmt/v1/mgmt.pb-c.h"
#include "mgmt/rpc.h"

#define M_TENANT_CREATE "/lode.mgmt.v1.Mgmt/TenantCreate"

static char g_dir[512];     /* the temporary directory */
static char g_a[600];       /* CA "a" and its certificates */
static char g_b[600];       /* CA "b": another authority */

static char *path(const char *ca_dir, const char *file)
{
	static char buf[8][700];
	static unsigned next;
	char *p = buf[next++ % 8];

	snprintf(p, sizeof(buf[0]), "%s/%s", ca_dir, file);
	return p;
}

static ProtobufCMessage *msg_copy(const ProtobufCMessage *m)
{
	size_t n = protobuf_c_message_get_packed_size(m);
	uint8_t *buf = malloc(n ? n : 1);
	ProtobufCMessage *c;

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

static int h_tenant_create(void *arg, const struct rpc_call_info *ci, const ProtobufCMessage *req,
			   ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	const Lode__Mgmt__V1__NameRef *r = (const Lode__Mgmt__V1__NameRef *)req;
	Lode__Mgmt__V1__Tenant t = LODE__MGMT__V1__TENANT__INIT;

	t.name = r->name;
	*reply = msg_copy(&t.base);
	return RPC_OK;
}

static const struct rpc_method g_methods[] = {
	{ M_TENANT_CREATE, &lode__mgmt__v1__name_ref__descriptor, h_tenant_create, msg_free },
};

static int run_script(const char *dir)
{
	char cmd[1200];

	snprintf(cmd, sizeof(cmd), "'%s/scripts/make-test-ca.sh' '%s' >/dev/null", LODE_SOURCE_DIR,
		 dir);
	return system(cmd);
}

static int group_setup(void **state)
{
	const char *base = getenv("LODE_TEST_TMP");
	char cmd[700];

	if (!base || !*base)
		base = "/tmp";
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", base);
	if (system(cmd) != 0)
		return -1;
	snprintf(g_dir, sizeof(g_dir), "%s/rpc_tls_test.XXXXXX", base);
	if (!mkdtemp(g_dir))
		return -1;
	snprintf(g_a, sizeof(g_a), "%s/a", g_dir);
	snprintf(g_b, sizeof(g_b), "%s/b", g_dir);
	if (run_script(g_a) != 0 || run_script(g_b) != 0)
		return -1;
	return 0;
}

static int group_teardown(void **state)
{
	char cmd[700];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* The file's bytes, for comparing. */
static char *slurp(const char *p)
{
	FILE *f = fopen(p, "r");
	char *buf = calloc(1, 65536);

	assert_non_null(f);
	assert_non_null(buf);
	assert_true(fread(buf, 1, 65535, f) > 0);
	fclose(f);
	return buf;
}

static void test_script(void **state)
{
	char *before = slurp(path(g_a, "ca.pem"));
	char *key_before = slurp(path(g_a, "server-key.pem"));
	char *after, *key_after;
	struct stat st;
	char cmd[1200];

	/* Again: nothing changes. */
	assert_int_equal(run_script(g_a), 0);
	after = slurp(path(g_a, "ca.pem"));
	key_after = slurp(path(g_a, "server-key.pem"));
	assert_string_equal(before, after);
	assert_string_equal(key_before, key_after);
	/* Two runs in two places: two different CAs. */
	free(after);
	after = slurp(path(g_b, "ca.pem"));
	assert_string_not_equal(before, after);
	/* Keys are private to their owner. */
	assert_int_equal(stat(path(g_a, "server-key.pem"), &st), 0);
	assert_int_equal(st.st_mode & 077, 0);
	/* No directory: usage, and a failure. */
	snprintf(cmd, sizeof(cmd), "'%s/scripts/make-test-ca.sh' >/dev/null 2>&1", LODE_SOURCE_DIR);
	assert_int_not_equal(system(cmd), 0);
	snprintf(cmd, sizeof(cmd), "'%s/scripts/make-test-ca.sh' --help | grep -q usage",
		 LODE_SOURCE_DIR);
	assert_int_equal(system(cmd), 0);
	free(before);
	free(after);
	free(key_before);
	free(key_after);
}

struct tls_server {
	rpc_server_t *s;
	int port;
	char addr[64];
};

static void server_start(struct tls_server *ts, const struct rpc_tls *tls)
{
	char msg[256];
	int rc = rpc_server_start("127.0.0.1:0", tls, g_methods, 1, NULL, &ts->port, &ts->s, msg,
				  sizeof(msg));

	if (rc)
		fprintf(stderr, "rpc_server_start: %d %s\n", rc, msg);
	assert_int_equal(rc, 0);
	snprintf(ts->addr, sizeof(ts->addr), "127.0.0.1:%d", ts->port);
}

/* One TenantCreate on a new channel to addr; returns the status. */
static int call_with(const char *addr, const struct rpc_tls *tls, char *msg, size_t msg_cap)
{
	Lode__Mgmt__V1__NameRef r = LODE__MGMT__V1__NAME_REF__INIT;
	ProtobufCMessage *reply = NULL;
	rpc_channel_t *ch;
	int st;

	assert_int_equal(rpc_channel_open(addr, tls, &ch), 0);
	r.name = "secure";
	st = rpc_call(ch, M_TENANT_CREATE, &r.base, &lode__mgmt__v1__tenant__descriptor, NULL, 0,
		      5000, &reply, msg, msg_cap);
	if (st == RPC_OK) {
		assert_string_equal(((Lode__Mgmt__V1__Tenant *)reply)->name, "secure");
		protobuf_c_message_free_unpacked(reply, NULL);
	} else {
		assert_null(reply);
	}
	rpc_channel_close(ch);
	return st;
}

static void test_tls(void **state)
{
	struct rpc_tls srv = { .cert = path(g_a, "server.pem"), .key = path(g_a, "server-key.pem") };
	struct rpc_tls trusts_a = { .ca = path(g_a, "ca.pem") };
	struct rpc_tls trusts_b = { .ca = path(g_b, "ca.pem") };
	struct tls_server ts;
	char addr[64], msg[256];

	server_start(&ts, &srv);
	assert_int_equal(call_with(ts.addr, &trusts_a, msg, sizeof(msg)), RPC_OK);
	/* The certificate names localhost too. */
	snprintf(addr, sizeof(addr), "localhost:%d", ts.port);
	assert_int_equal(call_with(addr, &trusts_a, msg, sizeof(msg)), RPC_OK);
	/* Plaintext to a TLS server: refused. */
	assert_int_equal(call_with(ts.addr, NULL, msg, sizeof(msg)), RPC_UNAVAILABLE);
	/* A client that trusts another CA: refused. */
	assert_int_equal(call_with(ts.addr, &trusts_b, msg, sizeof(msg)), RPC_UNAVAILABLE);
	/* A client certificate the server did not ask for does no harm. */
	trusts_a.cert = path(g_a, "client.pem");
	trusts_a.key = path(g_a, "client-key.pem");
	assert_int_equal(call_with(ts.addr, &trusts_a, msg, sizeof(msg)), RPC_OK);
	/* And after all that, still serving. */
	trusts_a.cert = trusts_a.key = NULL;
	assert_int_equal(call_with(ts.addr, &trusts_a, msg, sizeof(msg)), RPC_OK);
	rpc_server_stop(ts.s);
}

/* A TLS client to a plaintext server fails too. */
static void test_tls_to_plaintext(void **state)
{
	struct rpc_tls trusts_a = { .ca = path(g_a, "ca.pem") };
	struct tls_server ts;
	char msg[256];

	server_start(&ts, NULL);
	assert_int_equal(call_with(ts.addr, NULL, msg, sizeof(msg)), RPC_OK);
	assert_int_equal(call_with(ts.addr, &trusts_a, msg, sizeof(msg)), RPC_UNAVAILABLE);
	rpc_server_stop(ts.s);
}

/* A server with a CA asks for client certificates: one from its CA or none
 * is served, one from another CA is refused. */
static void test_client_certs(void **state)
{
	struct rpc_tls srv = { .cert = path(g_a, "server.pem"),
			       .key = path(g_a, "server-key.pem"),
			       .ca = path(g_a, "ca.pem") };
	struct rpc_tls cli = { .ca = path(g_a, "ca.pem") };
	struct tls_server ts;
	char msg[256];

	server_start(&ts, &srv);
	assert_int_equal(call_with(ts.addr, &cli, msg, sizeof(msg)), RPC_OK);
	cli.cert = path(g_a, "client.pem");
	cli.key = path(g_a, "client-key.pem");
	assert_int_equal(call_with(ts.addr, &cli, msg, sizeof(msg)), RPC_OK);
	cli.cert = path(g_b, "client.pem");
	cli.key = path(g_b, "client-key.pem");
	assert_int_equal(call_with(ts.addr, &cli, msg, sizeof(msg)), RPC_UNAVAILABLE);
	rpc_server_stop(ts.s);
}

static void write_file(const char *p, const char *text)
{
	FILE *f = fopen(p, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* rpc_server_start with tls must fail with -EINVAL and a message naming want. */
static void start_fails(const struct rpc_tls *tls, const char *want)
{
	rpc_server_t *s = (rpc_server_t *)1;
	char msg[512];
	int port = -1;
	int rc = rpc_server_start("127.0.0.1:0", tls, g_methods, 1, NULL, &port, &s, msg,
				  sizeof(msg));

	assert_int_equal(rc, -EINVAL);
	assert_null(s);
	assert_int_equal(port, -1);
	if (!strstr(msg, want))
		fail_msg("message \"%s\" does not mention \"%s\"", msg, want);
}

static void test_bad_files(void **state)
{
	char *garbage = path(g_dir, "garbage.pem");
	char *half = path(g_dir, "half.pem");
	char *missing = path(g_dir, "missing.pem");
	char *cert_a = path(g_a, "server.pem"), *key_a = path(g_a, "server-key.pem");
	char *key_b = path(g_b, "server-key.pem"), *ca_a = path(g_a, "ca.pem");
	char *both = path(g_dir, "both.pem");
	rpc_channel_t *ch = (rpc_channel_t *)1;
	char *cert_text = slurp(cert_a);
	struct rpc_tls t;

	write_file(garbage, "this is not a certificate\n");
	/* A certificate cut in half. */
	cert_text[strlen(cert_text) / 2] = '\0';
	write_file(half, cert_text);
	free(cert_text);

	t = (struct rpc_tls){ .cert = missing, .key = key_a };
	start_fails(&t, missing);
	t = (struct rpc_tls){ .cert = cert_a, .key = missing };
	start_fails(&t, missing);
	t = (struct rpc_tls){ .cert = garbage, .key = key_a };
	start_fails(&t, garbage);
	t = (struct rpc_tls){ .cert = half, .key = key_a };
	start_fails(&t, half);
	t = (struct rpc_tls){ .cert = cert_a, .key = garbage };
	start_fails(&t, garbage);
	/* A certificate in place of the key. */
	t = (struct rpc_tls){ .cert = cert_a, .key = cert_a };
	start_fails(&t, "key");
	/* Another CA's key: does not match. */
	t = (struct rpc_tls){ .cert = cert_a, .key = key_b };
	start_fails(&t, "does not match");
	t = (struct rpc_tls){ .cert = cert_a, .key = key_a, .ca = garbage };
	start_fails(&t, garbage);
	t = (struct rpc_tls){ .cert = cert_a, .key = key_a, .ca = missing };
	start_fails(&t, missing);
	/* The server needs both; a CA alone is not TLS for a server. */
	t = (struct rpc_tls){ .ca = ca_a };
	start_fails(&t, "certificate and its key");
	t = (struct rpc_tls){ .cert = cert_a };
	start_fails(&t, "certificate and its key");

	/* Client side. */
	t = (struct rpc_tls){ .ca = garbage };
	assert_int_equal(rpc_channel_open("127.0.0.1:1", &t, &ch), -EINVAL);
	assert_null(ch);
	t = (struct rpc_tls){ .ca = missing };
	assert_int_equal(rpc_channel_open("127.0.0.1:1", &t, &ch), -EINVAL);
	t = (struct rpc_tls){ .ca = ca_a, .cert = path(g_a, "client.pem") };
	assert_int_equal(rpc_channel_open("127.0.0.1:1", &t, &ch), -EINVAL);
	t = (struct rpc_tls){ .ca = ca_a, .cert = path(g_a, "client.pem"), .key = key_b };
	assert_int_equal(rpc_channel_open("127.0.0.1:1", &t, &ch), -EINVAL);

	/* Certificate and key in one file work for both. */
	{
		char *c = slurp(cert_a), *k = slurp(key_a);
		FILE *f = fopen(both, "w");
		struct tls_server ts;
		char msg[256];

		assert_non_null(f);
		fputs(c, f);
		fputs(k, f);
		fclose(f);
		free(c);
		free(k);
		t = (struct rpc_tls){ .cert = both, .key = both };
		server_start(&ts, &t);
		t = (struct rpc_tls){ .ca = ca_a };
		assert_int_equal(call_with(ts.addr, &t, msg, sizeof(msg)), RPC_OK);
		rpc_server_stop(ts.s);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_script),
		cmocka_unit_test(test_tls),
		cmocka_unit_test(test_tls_to_plaintext),
		cmocka_unit_test(test_client_certs),
		cmocka_unit_test(test_bad_files),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
