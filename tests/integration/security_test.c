/*
 * The security suite: a real loded with its management service, two
 * tenants, and every way in this list of trying to reach data one
 * may not. Each attempt must be refused with its own error, and after each
 * refusal the data must be exactly as it was.
 *
 * Tokens are tampered with where a client keeps them (client/client.h): the
 * pool-wide one in c->tok and each opened container's in c->caps, because
 * that is what an attacker who controls a client process can do too.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "auth/auth.h"
#include "client/client.h"
#include "harness.h"
#include "lode/lode.h"
#include "lode/mgmt/v1/mgmt.pb-c.h"
#include "mgmt/rpc.h"

#define M(name) "/lode.mgmt.v1.Mgmt/" name

static struct hs_server srv;
static const struct lode_oid oid = {0x1000000000000001ull, 7};

/* ---- control-plane helpers -------------------------------------------------------- */

/* Connect as user/secret (NULL: the admin's credentials file). */
static int connect_as(const char *user, const char *secret, lode_conn_t **c)
{
	struct lode_conn_opts o = {.transport = "tcp", .timeout_ms = 5000, .user = user,
				   .secret = secret};

	return lode_connect(hs_addr(&srv), &o, c);
}

static lode_conn_t *admin(void)
{
	lode_conn_t *c = NULL;

	assert_int_equal(connect_as(NULL, NULL, &c), 0);
	return c;
}

/* An admin RPC that must succeed. */
static void admin_call(lode_conn_t *c, const char *method, const ProtobufCMessage *req,
		       const ProtobufCMessageDescriptor *rd)
{
	ProtobufCMessage *rep = NULL;
	int rc = conn_mgmt_call(c, method, req, rd, &rep, -ENOENT);

	if (rc < 0)
		fail_msg("%s: %s (%s)", method, lode_strerror(rc), conn_mgmt_error(c));
	protobuf_c_message_free_unpacked(rep, NULL);
}

static void tenant_create(lode_conn_t *c, const char *name)
{
	Lode__Mgmt__V1__NameRef r = LODE__MGMT__V1__NAME_REF__INIT;

	r.name = (char *)name;
	admin_call(c, M("TenantCreate"), &r.base, &lode__mgmt__v1__tenant__descriptor);
}

static void user_create(lode_conn_t *c, const char *tenant, const char *name, const char *secret)
{
	Lode__Mgmt__V1__UserCreateRequest r = LODE__MGMT__V1__USER_CREATE_REQUEST__INIT;

	r.tenant = (char *)tenant;
	r.name = (char *)name;
	r.secret.data = (uint8_t *)secret;
	r.secret.len = strlen(secret);
	admin_call(c, M("UserCreate"), &r.base, &lode__mgmt__v1__user__descriptor);
}

static void acl_set(lode_conn_t *c, const char *resource, const char *principal, uint32_t rights)
{
	Lode__Mgmt__V1__AclEntry r = LODE__MGMT__V1__ACL_ENTRY__INIT;

	r.resource = (char *)resource;
	r.principal = (char *)principal;
	r.rights = rights;
	admin_call(c, M("AclSet"), &r.base, &lode__mgmt__v1__acl_entry__descriptor);
}

static void user_revoke(lode_conn_t *c, const char *name, bool revoke)
{
	Lode__Mgmt__V1__NameRef r = LODE__MGMT__V1__NAME_REF__INIT;

	r.name = (char *)name;
	admin_call(c, revoke ? M("UserRevoke") : M("UserRestore"), &r.base,
		   &lode__mgmt__v1__user__descriptor);
}

/* ---- data helpers ----------------------------------------------------------------- */

static const char value_a[] = "tenant A's secret value";

/* The value under "k" and the keys of the object, as tenant A sees them. */
static void expect_untouched(lode_cont_t *ct)
{
	char got[64] = {0};
	uint32_t len = 0;

	assert_int_equal(lode_kv_get(ct, oid, "k", got, sizeof(got), &len, NULL), 0);
	assert_int_equal(len, sizeof(value_a));
	assert_memory_equal(got, value_a, sizeof(value_a));
	len = 0;
	assert_int_equal(lode_kv_get(ct, oid, "other", got, sizeof(got), &len, NULL), -ENOENT);
}

/* Every data operation on ct must fail with want, and change nothing. */
static void refused_all(lode_cont_t *ct, int want, const char *what)
{
	char buf[64];
	uint32_t len;
	struct lode_anchor an = {0};
	int rc;

	rc = lode_kv_get(ct, oid, "k", buf, sizeof(buf), &len, NULL);
	if (rc != want)
		fail_msg("%s: read: %s, expected %s", what, lode_strerror(rc), lode_strerror(want));
	rc = lode_kv_put(ct, oid, "k", "overwritten", 11, NULL);
	if (rc != want)
		fail_msg("%s: write: %s, expected %s", what, lode_strerror(rc), lode_strerror(want));
	rc = lode_kv_put(ct, oid, "other", "new", 3, NULL);
	if (rc != want)
		fail_msg("%s: insert: %s, expected %s", what, lode_strerror(rc), lode_strerror(want));
	rc = lode_kv_list(ct, oid, &an, buf, sizeof(buf));
	if (rc != want)
		fail_msg("%s: list: %s, expected %s", what, lode_strerror(rc), lode_strerror(want));
	rc = lode_kv_remove(ct, oid, "k", NULL);
	if (rc != want)
		fail_msg("%s: punch: %s, expected %s", what, lode_strerror(rc), lode_strerror(want));
	print_message("  %s: read, write, list and punch refused with %s\n", what,
		      lode_strerror(want));
}

/* ---- the setup: tenants alpha and beta, one user each ------------------------------ */

static lode_conn_t *ca;    /* alpha's user */
static lode_cont_t *cta;   /* alpha's container "vault" */

static int setup(void **state)
{
	struct hs_opts o = {.targets = 2, .ram = true, .transport = "tcp"};
	static const char *const extra[] = {"--cap-lifetime", "10", NULL};
	lode_conn_t *c;

	o.extra_args = extra;
	if (hs_start(&srv, &o) < 0)
		return -1;
	c = admin();
	tenant_create(c, "alpha");
	tenant_create(c, "beta");
	user_create(c, "alpha", "alice", "alice-secret-1");
	user_create(c, "beta", "bob", "bob-secret-1");
	user_create(c, "beta", "reader", "reader-secret-1");
	acl_set(c, "default", "tenant:alpha", AUTH_R_READ | AUTH_R_WRITE);
	acl_set(c, "default", "tenant:beta", AUTH_R_READ | AUTH_R_WRITE);
	lode_disconnect(c);

	assert_int_equal(connect_as("alpha/alice", "alice-secret-1", &ca), 0);
	assert_int_equal(lode_cont_create(ca, "vault", NULL), 0);
	assert_int_equal(lode_cont_open(ca, "vault", &cta), 0);
	assert_int_equal(lode_kv_put(cta, oid, "k", value_a, sizeof(value_a), NULL), 0);
	return 0;
}

static int teardown(void **state)
{
	lode_cont_close(cta);
	lode_disconnect(ca);
	hs_cleanup(&srv);
	return 0;
}

/* ---- the attempts ---------------------------------------------------------------- */

static void test_no_credentials(void **state)
{
	char home[PATH_MAX];
	const char *saved = getenv("LODE_CREDENTIALS");
	char keep[PATH_MAX];
	lode_conn_t *c = NULL;

	snprintf(keep, sizeof(keep), "%s", saved ? saved : "");
	snprintf(home, sizeof(home), "%s", srv.dir); /* no .config/lode/credentials there */
	unsetenv("LODE_CREDENTIALS");
	setenv("HOME", home, 1);
	unsetenv("XDG_CONFIG_HOME");
	assert_int_equal(lode_connect(hs_addr(&srv), NULL, &c), -LODE_EAUTH);
	assert_null(c);
	setenv("LODE_CREDENTIALS", keep, 1);
	assert_int_equal(connect_as("alpha/alice", "wrong", &c), -LODE_EAUTH);
	assert_int_equal(connect_as("alpha/nobody", "alice-secret-1", &c), -LODE_EAUTH);
	expect_untouched(cta);
}

/* Point the handle ct and the connection's token entry for it at cont. */
static void retarget(lode_cont_t *ct, const struct lode_uuid *cont, const uint8_t *tok)
{
	lode_conn_t *c = ct->c;

	pthread_mutex_lock(&c->lock);
	for (unsigned i = 0; i < c->ncaps; i++) {
		if (memcmp(&c->caps[i].cont, &ct->uuid, sizeof(ct->uuid)) == 0) {
			c->caps[i].cont = *cont;
			if (tok)
				memcpy(c->caps[i].tok, tok, AUTH_CAP_SIZE);
		}
	}
	pthread_mutex_unlock(&c->lock);
	ct->uuid = *cont;
}

static void test_cross_tenant(void **state)
{
	char labels[8][LODE_LABEL_MAX + 1];
	lode_conn_t *cb;
	lode_cont_t *ctb = NULL, bare = {0}; /* zeros: no key, not encrypted */
	int n;

	assert_int_equal(connect_as("beta/bob", "bob-secret-1", &cb), 0);
	/* bob cannot open, see or destroy alice's container. */
	assert_int_equal(lode_cont_open(cb, "vault", &ctb), -EACCES);
	n = lode_cont_list(cb, labels, 8);
	for (int i = 0; i < n && i < 8; i++)
		assert_string_not_equal(labels[i], "vault");
	assert_int_equal(lode_cont_destroy(cb, "vault"), -EACCES);

	/* Knowing the uuid is not enough: with no token for it, nothing goes. */
	bare.c = cb;
	bare.uuid = cta->uuid;
	refused_all(&bare, -LODE_ECAPMISSING, "no token for the container");

	/* bob's token for his own container, aimed at alice's: wrong container. */
	assert_int_equal(lode_cont_create(cb, "bobs", NULL), 0);
	assert_int_equal(lode_cont_open(cb, "bobs", &ctb), 0);
	retarget(ctb, &cta->uuid, NULL);
	refused_all(ctb, -LODE_ECAPSCOPE, "another container's token");
	lode_cont_close(ctb);
	lode_disconnect(cb);
	expect_untouched(cta);
}

/*
 * A token of one connection replayed on another: bob's connection carries
 * alice's container token (as if stolen off the wire) for alice's container.
 */
static void test_stolen_token(void **state)
{
	lode_conn_t *cb;
	lode_cont_t *ctb;
	struct lode_uuid vault;
	uint8_t tok[AUTH_CAP_SIZE];

	lode_cont_uuid(cta, &vault);
	pthread_mutex_lock(&ca->lock);
	for (unsigned i = 0; i < ca->ncaps; i++)
		if (memcmp(&ca->caps[i].cont, &vault, sizeof(vault)) == 0)
			memcpy(tok, ca->caps[i].tok, sizeof(tok));
	pthread_mutex_unlock(&ca->lock);

	assert_int_equal(connect_as("beta/bob", "bob-secret-1", &cb), 0);
	assert_int_equal(lode_cont_create(cb, "bobs2", NULL), 0);
	assert_int_equal(lode_cont_open(cb, "bobs2", &ctb), 0);
	retarget(ctb, &vault, tok);
	refused_all(ctb, -LODE_ECAPSCOPE, "alice's token on bob's session");
	lode_cont_close(ctb);
	lode_disconnect(cb);
	expect_untouched(cta);
}

/* Flip one byte of alice's token at a time: every one is a forgery. */
static void test_forged(void **state)
{
	struct lode_uuid vault;
	uint8_t saved[AUTH_CAP_SIZE];
	struct conn_cap *cc = NULL;

	lode_cont_uuid(cta, &vault);
	pthread_mutex_lock(&ca->lock);
	for (unsigned i = 0; i < ca->ncaps; i++)
		if (memcmp(&ca->caps[i].cont, &vault, sizeof(vault)) == 0)
			cc = &ca->caps[i];
	assert_non_null(cc);
	memcpy(saved, cc->tok, sizeof(saved));
	pthread_mutex_unlock(&ca->lock);
	for (unsigned b = 0; b < AUTH_CAP_SIZE; b += 7) {
		char buf[64];
		uint32_t len;
		int rc;

		pthread_mutex_lock(&ca->lock);
		memcpy(cc->tok, saved, sizeof(saved));
		cc->tok[b] ^= 0x5a;
		pthread_mutex_unlock(&ca->lock);
		rc = lode_kv_put(cta, oid, "k", "forged", 6, NULL);
		/* Byte 0 is the version, byte 4.. the key id: still "forged". */
		if (rc != -LODE_ECAPFORGED)
			fail_msg("byte %u flipped: write got %s", b, lode_strerror(rc));
		rc = lode_kv_get(cta, oid, "k", buf, sizeof(buf), &len, NULL);
		if (rc != -LODE_ECAPFORGED)
			fail_msg("byte %u flipped: read got %s", b, lode_strerror(rc));
	}
	pthread_mutex_lock(&ca->lock);
	memcpy(cc->tok, saved, sizeof(saved));
	pthread_mutex_unlock(&ca->lock);
	print_message("  forged tokens (one byte in seven flipped) refused\n");
	expect_untouched(cta);
}

/* A user of another tenant granted read on the container: reads, never writes. */
static void test_read_only(void **state)
{
	lode_conn_t *c = admin(), *cr;
	lode_cont_t *ct;
	char buf[64];
	uint32_t len = 0;

	acl_set(c, "default/vault", "user:beta/reader", AUTH_R_READ);
	lode_disconnect(c);
	assert_int_equal(connect_as("beta/reader", "reader-secret-1", &cr), 0);
	assert_int_equal(lode_cont_open(cr, "vault", &ct), 0);
	assert_int_equal(lode_kv_get(ct, oid, "k", buf, sizeof(buf), &len, NULL), 0);
	assert_int_equal(lode_kv_put(ct, oid, "k", "nope", 4, NULL), -LODE_ECAPRIGHTS);
	assert_int_equal(lode_kv_remove(ct, oid, "k", NULL), -LODE_ECAPRIGHTS);
	assert_int_equal(lode_cont_destroy(cr, "vault"), -EACCES);
	{
		/* The reclaim's operations need admin rights: a dkey dropped, an
		 * object's punches folded, a list of what punches hid. */
		struct lode_key dk = {"k", 1, NULL, 0};
		struct lode_anchor an = {0};
		uint8_t keys[256];
		struct conn_tgt_io io = {.epoch = LODE_EPOCH_MAX};

		assert_int_equal(conn_tgt_io(ct, 0, NET_OP_DKEY_DROP, oid, &dk, &io),
				 -LODE_ECAPRIGHTS);
		assert_int_equal(conn_tgt_io(ct, 0, NET_OP_OBJ_FOLD, oid, NULL, &io),
				 -LODE_ECAPRIGHTS);
		io = (struct conn_tgt_io){.epoch = LODE_EPOCH_MAX, .an = &an, .in = keys,
					  .cap = sizeof(keys), .hflags = NET_F_LIST_ALL};
		assert_int_equal(conn_tgt_io(ct, 0, NET_OP_DKEY_LIST, oid, NULL, &io),
				 -LODE_ECAPRIGHTS);
		io.hflags = 0; /* without the flag, read rights do */
		assert_int_equal(conn_tgt_io(ct, 0, NET_OP_DKEY_LIST, oid, NULL, &io), 0);
	}
	lode_cont_close(ct);
	lode_disconnect(cr);
	expect_untouched(cta);
}

static void test_expired(void **state)
{
	struct lode_conn_opts o = {.transport = "tcp", .timeout_ms = 5000};
	lode_conn_t *c, *ce;
	lode_cont_t *ct, *cte, *cte2;
	char buf[64];
	uint32_t len;
	int rc = -1;

	assert_int_equal(connect_as("alpha/alice", "alice-secret-1", &c), 0);
	assert_int_equal(lode_cont_open(c, "vault", &ct), 0);
	/* Alice again, her secret from the environment: found again later. */
	setenv("LODE_USER", "alpha/alice", 1);
	setenv("LODE_SECRET", "alice-secret-1", 1);
	assert_int_equal(lode_connect(hs_addr(&srv), &o, &ce), 0);
	assert_int_equal(lode_cont_open(ce, "vault", &cte), 0);
	/* Stop both from renewing, and outlive the 10 s lifetime. The second
	 * opens a container of its own 4 s in: that token expires after the
	 * pool's, and is still valid when the login again comes, but names
	 * the old login's client id. */
	atomic_store(&c->renew_at_ms, INT64_MAX);
	atomic_store(&ce->renew_at_ms, INT64_MAX);
	sleep(4);
	assert_int_equal(lode_cont_create(ce, "vault-late", NULL), 0);
	assert_int_equal(lode_cont_open(ce, "vault-late", &cte2), 0);
	assert_int_equal(lode_kv_put(cte2, oid, "k", "late", 4, NULL), 0);
	atomic_store(&ce->renew_at_ms, INT64_MAX);
	sleep(7);
	assert_int_equal(lode_kv_get(ct, oid, "k", buf, sizeof(buf), &len, NULL), -LODE_ECAPEXPIRED);
	assert_int_equal(lode_kv_put(ct, oid, "k", "late", 4, NULL), -LODE_ECAPEXPIRED);
	assert_int_equal(lode_kv_get(cte, oid, "k", buf, sizeof(buf), &len, NULL),
			 -LODE_ECAPEXPIRED);
	/* Let the second renew: its token expired, so it logs in again, its
	 * sessions are made again for the new login on the engine that stayed
	 * up, and its container handle of before serves. */
	atomic_store(&ce->renew_at_ms, 0);
	for (int i = 0; i < 100 && rc != 0; i++) {
		rc = lode_kv_get(cte, oid, "k", buf, sizeof(buf), &len, NULL);
		if (rc != 0)
			usleep(100 * 1000);
	}
	if (rc != 0)
		fail_msg("a connection that logged in again: %s", lode_strerror(rc));
	rc = lode_kv_get(cte2, oid, "k", buf, sizeof(buf), &len, NULL);
	if (rc != 0)
		fail_msg("a container whose token had not expired at the login again: %s",
			 lode_strerror(rc));
	assert_int_equal(len, 4);
	assert_memory_equal(buf, "late", 4);
	lode_cont_close(cte2);
	assert_int_equal(lode_cont_destroy(ce, "vault-late"), 0);
	unsetenv("LODE_USER");
	unsetenv("LODE_SECRET");
	/* The connection that renews on its own (alice's first) goes on working. */
	expect_untouched(cta);
	lode_cont_close(cte);
	lode_disconnect(ce);
	lode_cont_close(ct);
	lode_disconnect(c);
}

static void test_revoked(void **state)
{
	lode_conn_t *c = admin(), *cr;
	lode_cont_t *ct;
	char buf[64];
	uint32_t len;

	assert_int_equal(connect_as("beta/reader", "reader-secret-1", &cr), 0);
	assert_int_equal(lode_cont_open(cr, "vault", &ct), 0);
	assert_int_equal(lode_kv_get(ct, oid, "k", buf, sizeof(buf), &len, NULL), 0);
	user_revoke(c, "beta/reader", true);
	/* Effective at once, on a connection that already had its tokens. */
	assert_int_equal(lode_kv_get(ct, oid, "k", buf, sizeof(buf), &len, NULL), -LODE_ECAPREVOKED);
	lode_cont_close(ct);
	lode_disconnect(cr);
	assert_int_equal(connect_as("beta/reader", "reader-secret-1", &cr), -LODE_EAUTH);
	user_revoke(c, "beta/reader", false);
	assert_int_equal(connect_as("beta/reader", "reader-secret-1", &cr), 0);
	lode_disconnect(cr);
	lode_disconnect(c);
	expect_untouched(cta);
}

/* Rotating the signing key stops nobody: old tokens verify, renewals get the new key. */
static void test_rotation(void **state)
{
	lode_conn_t *c = admin();
	Lode__Mgmt__V1__Empty e = LODE__MGMT__V1__EMPTY__INIT;
	struct auth_cap before, after;
	char buf[64];
	uint32_t len;

	assert_int_equal(auth_cap_decode(ca->tok, AUTH_CAP_SIZE, &before), 0);
	admin_call(c, M("RotateKey"), &e.base, &lode__mgmt__v1__rotate_key_reply__descriptor);
	assert_int_equal(lode_kv_get(cta, oid, "k", buf, sizeof(buf), &len, NULL), 0);
	conn_caps_renew(ca, true);
	assert_int_equal(auth_cap_decode(ca->tok, AUTH_CAP_SIZE, &after), 0);
	assert_true(after.key_id > before.key_id);
	assert_int_equal(lode_kv_get(cta, oid, "k", buf, sizeof(buf), &len, NULL), 0);
	lode_disconnect(c);
	expect_untouched(cta);
}

/*
 * A loded whose management service speaks TLS: a client that trusts its CA
 * connects; one that does not, or that speaks plaintext to it, is refused.
 */
static void test_tls(void **state)
{
	struct hs_server tls = {0};
	struct hs_opts o = {.targets = 1, .ram = true, .transport = "tcp"};
	static char cmd[PATH_MAX * 2], cert[PATH_MAX + 32], key[PATH_MAX + 32], cafile[PATH_MAX + 32],
		addr[PATH_MAX + 32];
	const char *extra[] = {"--tls-cert", cert, "--tls-key", key, "--mgmt-addrfile", addr, NULL};
	char keep[PATH_MAX];
	rpc_channel_t *ch;
	ProtobufCMessage *rep = NULL;
	Lode__Mgmt__V1__ConnectRequest req = LODE__MGMT__V1__CONNECT_REQUEST__INIT;
	char msg[256], maddr[64] = "";
	lode_conn_t *c = NULL;
	FILE *f;

	snprintf(keep, sizeof(keep), "%s", getenv("LODE_CREDENTIALS"));
	snprintf(cmd, sizeof(cmd), "%s/scripts/make-test-ca.sh %s/ca >/dev/null", LODE_SOURCE_DIR,
		 srv.dir);
	assert_int_equal(system(cmd), 0);
	snprintf(cert, sizeof(cert), "%s/ca/server.pem", srv.dir);
	snprintf(key, sizeof(key), "%s/ca/server-key.pem", srv.dir);
	snprintf(cafile, sizeof(cafile), "%s/ca/ca.pem", srv.dir);
	snprintf(addr, sizeof(addr), "%s/ca/mgmt-addr", srv.dir);
	o.extra_args = extra;
	/* hs_start itself connects, so the CA must be trusted from the start. */
	setenv("LODE_TLS_CA", cafile, 1);
	assert_int_equal(hs_start(&tls, &o), 0);
	assert_int_equal(lode_connect(hs_addr(&tls), NULL, &c), 0);
	lode_disconnect(c);
	unsetenv("LODE_TLS_CA");
	c = NULL;
	assert_true(lode_connect(hs_addr(&tls), NULL, &c) < 0);
	assert_null(c);

	/* Plaintext gRPC to the TLS port: refused, not served. */
	assert_non_null(f = fopen(addr, "r"));
	assert_non_null(fgets(maddr, sizeof(maddr), f));
	fclose(f);
	maddr[strcspn(maddr, "\n")] = 0;
	assert_int_equal(rpc_channel_open(maddr, NULL, &ch), 0);
	req.user = (char *)"admin";
	assert_int_equal(rpc_call(ch, M("Connect"), &req.base, &lode__mgmt__v1__connect_reply__descriptor,
				  NULL, 0, 3000, &rep, msg, sizeof(msg)),
			 RPC_UNAVAILABLE);
	assert_null(rep);
	rpc_channel_close(ch);
	print_message("  TLS: trusted client served; untrusted and plaintext clients refused\n");
	hs_cleanup(&tls);
	/* hs_start pointed the process at the TLS server's admin; point it back. */
	setenv("LODE_CREDENTIALS", keep, 1);
	expect_untouched(cta);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_credentials),
		cmocka_unit_test(test_cross_tenant),
		cmocka_unit_test(test_stolen_token),
		cmocka_unit_test(test_forged),
		cmocka_unit_test(test_read_only),
		cmocka_unit_test(test_revoked),
		cmocka_unit_test(test_rotation),
		cmocka_unit_test(test_expired),
		cmocka_unit_test(test_tls),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
