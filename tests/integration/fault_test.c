/*
 * Faults against a real loded: the server killed with SIGKILL in the middle
 * of a stream of writes, stopped with SIGSTOP, stopped with SIGTERM while
 * writes are in flight, and clients that die in the middle of theirs.
 *
 * What must hold:
 *   - a client never hangs: every request in flight when the server dies or
 *     stalls completes with a negative code within the connection's timeout
 *     and some slack, and later requests fail too;
 *   - every write the client saw acknowledged (event rc 0) reads back with
 *     exactly its value after the server restarts on the same data, and a
 *     write that was not acknowledged reads back whole or not at all;
 *   - SIGTERM drains: loded exits 0, and what it acknowledged is durable;
 *   - a client that exits or is killed mid-stream does not take the server
 *     down or stop it from serving the next client.
 *
 * Values are derived from their key (round, index), so any value read back
 * can be checked without keeping it.
 *
 * $LODE_TEST_TRANSPORTS names the client transports (default "tcp shm";
 * shm falls back to tcp where the server does not offer it);
 * $LODE_TEST_FILTER runs only the tests whose names match (cmocka's pattern).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client/client.h"
#include "harness.h"

#define TIMEOUT_MS 3000      /* the connections' request timeout */
#define SLACK_MS 7000        /* what failing a connection may take beyond it */
#define INFLIGHT 16          /* writes in flight in the kill -9 stream */
#define STREAM_MS 1000       /* how long the stream runs before the kill */
#define STREAM_ACKS 4000     /* or how many acknowledgements */
#define ROUNDS 3
#define RECONNECT_MS 15000   /* a restarted server to serve an old connection again */
#define SMALL 100
#define LARGE (64u << 10)
#define MIB (1u << 20)

/* The server under test and a child client, cleaned up whatever way a test ends. */
static struct hs_server srv;
static pid_t child = -1;

/* The transports to test, from $LODE_TEST_TRANSPORTS (default "tcp shm"). */
#define TPS_MAX 4
static char tps[TPS_MAX][16];
static unsigned ntps;

static const struct lode_oid kv_oid = {(uint64_t)LODE_OT_KV << LODE_OID_TYPE_SHIFT, 7};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Whether process pid is stopped (state T in /proc): kill() only asks for it. */
static bool proc_stopped(pid_t pid)
{
	char path[64], buf[512], *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (!(f = fopen(path, "r")))
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	/* The state follows the command name, which is in parentheses. */
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && (p[2] == 'T' || p[2] == 't');
}

/* SIGSTOP the server and wait until it is stopped. */
static void server_sigstop(const struct hs_server *s)
{
	uint64_t t0 = now_ms();

	assert_int_equal(kill(s->pid, SIGSTOP), 0);
	while (!proc_stopped(s->pid)) {
		if (now_ms() - t0 > 5000)
			fail_msg("loded %d did not stop within 5 s of SIGSTOP", (int)s->pid);
		sleep_ms(1);
	}
}

/* ---- values derived from their key ----------------------------------------------- */

static void key_of(unsigned round, unsigned i, char *key, size_t cap)
{
	snprintf(key, cap, "r%u-%u", round, i);
}

/* Sizes alternate so that both inline and bulk (rendezvous or RMA) paths are in flight. */
static uint32_t size_of(unsigned i, uint32_t large)
{
	return i % 4 == 3 ? large : SMALL;
}

/* Fill buf with value (round, i) of len bytes: the key first, then a keyed stream. */
static void value_fill(unsigned round, unsigned i, uint8_t *buf, uint32_t len)
{
	uint64_t x = ((uint64_t)round << 32 | i) * 0x9e3779b97f4a7c15ull + 1;

	for (uint32_t b = 0; b < len; b++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		buf[b] = (uint8_t)(x >> 24);
	}
	if (len >= 8) {
		memcpy(buf, &round, 4);
		memcpy(buf + 4, &i, 4);
	}
}

/* Whether buf[0..len) is exactly value (round, i) of want bytes. */
static bool value_is(unsigned round, unsigned i, const uint8_t *buf, uint32_t len, uint32_t want,
		     uint8_t *scratch)
{
	if (len != want)
		return false;
	value_fill(round, i, scratch, want);
	return memcmp(buf, scratch, want) == 0;
}

/* ---- bookkeeping of writes ------------------------------------------------------------ */

struct wrec {
	unsigned round, i;
	uint32_t len;
};

struct wlist {
	struct wrec *v;
	size_t n, cap;
};

static void wlist_add(struct wlist *l, unsigned round, unsigned i, uint32_t len)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 1024;
		l->v = realloc(l->v, l->cap * sizeof(*l->v));
		assert_non_null(l->v);
	}
	l->v[l->n++] = (struct wrec){round, i, len};
}

/*
 * Read back every acknowledged write (each must be exactly its value) and
 * every unacknowledged one (each must be absent or exactly its value).
 */
static void verify(lode_cont_t *ct, const struct wlist *acked, const struct wlist *unacked,
		   const struct hs_server *s)
{
	uint8_t *buf = malloc(MIB), *scratch = malloc(MIB);
	unsigned present = 0;

	assert_non_null(buf);
	assert_non_null(scratch);
	for (size_t n = 0; n < acked->n; n++) {
		const struct wrec *w = &acked->v[n];
		char key[32];
		uint32_t len = 0;
		int rc;

		key_of(w->round, w->i, key, sizeof(key));
		rc = lode_kv_get(ct, kv_oid, key, buf, MIB, &len, NULL);
		if (rc < 0 || !value_is(w->round, w->i, buf, len, w->len, scratch)) {
			hs_dump_log(s, 4096);
			fail_msg("acknowledged write %s (%u bytes) reads back as rc %d (%s), %u bytes%s",
				 key, w->len, rc, lode_strerror(rc), len,
				 rc == 0 ? ", wrong bytes" : "");
		}
	}
	for (size_t n = 0; n < unacked->n; n++) {
		const struct wrec *w = &unacked->v[n];
		char key[32];
		uint32_t len = 0;
		int rc;

		key_of(w->round, w->i, key, sizeof(key));
		rc = lode_kv_get(ct, kv_oid, key, buf, MIB, &len, NULL);
		if (rc == -ENOENT)
			continue;
		if (rc < 0 || !value_is(w->round, w->i, buf, len, w->len, scratch))
			fail_msg("unacknowledged write %s (%u bytes) reads back as rc %d (%s), %u "
				 "bytes: neither absent nor whole",
				 key, w->len, rc, lode_strerror(rc), len);
		present++;
	}
	print_message("  verified %zu acknowledged writes; %u of %zu unacknowledged ones landed\n",
		      acked->n, present, unacked->n);
	free(buf);
	free(scratch);
}

/* Connect with "shm" if the server offers it, else "tcp"; returns the transport used. */
static const char *connect_any(const struct hs_server *s, const char *want, lode_conn_t **c)
{
	int rc = hs_connect(s, want, TIMEOUT_MS, c);

	if (rc == -EPROTONOSUPPORT && strcmp(want, "tcp") != 0) {
		want = "tcp";
		rc = hs_connect(s, want, TIMEOUT_MS, c);
	}
	if (rc < 0) {
		hs_dump_log(s, 4096);
		fail_msg("connect (%s): %s", want, lode_strerror(rc));
	}
	return want;
}

#define STOP_WAIT_MS 10000 /* how long a drain on SIGTERM may take here */

/*
 * SIGTERM and wait for the exit, at most STOP_WAIT_MS (hs_stop would wait
 * 30 s): returns the exit status; a server that does not exit in time is
 * killed and fails the test, naming after what.
 */
static int stop_status(struct hs_server *s, const char *after)
{
	uint64_t t0 = now_ms();

	if (hs_running(s)) {
		kill(s->pid, SIGTERM);
		while (hs_running(s) && now_ms() - t0 < STOP_WAIT_MS)
			sleep_ms(10);
		if (hs_running(s)) {
			hs_dump_log(s, 4096);
			hs_kill(s);
			fail_msg("loded did not exit within %u ms of SIGTERM (after %s)", STOP_WAIT_MS,
				 after);
		}
	}
	return s->last_status;
}

/* A well-behaved client stores and reads back a small and a 1 MiB value. */
static void client_works(struct hs_server *s, const char *transport, const char *label)
{
	uint8_t *buf = malloc(MIB), *got = malloc(MIB);
	lode_conn_t *c;
	lode_cont_t *ct;
	uint32_t len;
	int rc;

	assert_non_null(buf);
	assert_non_null(got);
	connect_any(s, transport, &c);
	rc = lode_cont_create(c, label, NULL);
	assert_true(rc == 0 || rc == -EEXIST);
	assert_int_equal(lode_cont_open(c, label, &ct), 0);
	for (unsigned i = 0; i < 2; i++) {
		uint32_t n = i ? MIB : SMALL;
		char key[32];

		key_of(999, i, key, sizeof(key));
		value_fill(999, i, buf, n);
		assert_int_equal(lode_kv_put(ct, kv_oid, key, buf, n, NULL), 0);
		len = 0;
		assert_int_equal(lode_kv_get(ct, kv_oid, key, got, MIB, &len, NULL), 0);
		assert_int_equal(len, n);
		assert_memory_equal(got, buf, n);
	}
	lode_cont_close(ct);
	lode_disconnect(c);
	free(buf);
	free(got);
}

/* ---- a: SIGKILL in the middle of a stream ------------------------------------------- */

struct slot {
	lode_event_t ev;
	unsigned i;
	uint32_t len;
	bool busy;
	uint8_t *buf;
};

/*
 * Stream writes with up to INFLIGHT in flight until STREAM_MS or
 * STREAM_ACKS, kill the server, and drain: returns once every event
 * completed, failing if that takes longer than the timeout and slack.
 */
static void stream_and_kill(struct hs_server *s, lode_cont_t *ct, lode_eq_t *eq, unsigned round,
			    struct wlist *acked, struct wlist *unacked)
{
	struct slot slots[INFLIGHT] = {0};
	unsigned next = 0, inflight = 0, acks = 0, errs_after = 0, late_acks = 0;
	uint64_t t0 = now_ms(), killed_at = 0, last_done = 0;
	int first_err = 0;

	for (unsigned k = 0; k < INFLIGHT; k++) {
		slots[k].buf = malloc(LARGE);
		assert_non_null(slots[k].buf);
	}
	for (;;) {
		lode_event_t *evs[INFLIGHT];
		int n;

		for (unsigned k = 0; !killed_at && k < INFLIGHT; k++) {
			struct slot *sl = &slots[k];
			char key[32];
			int rc;

			if (sl->busy)
				continue;
			sl->i = next++;
			sl->len = size_of(sl->i, LARGE);
			key_of(round, sl->i, key, sizeof(key));
			value_fill(round, sl->i, sl->buf, sl->len);
			assert_int_equal(lode_event_init(&sl->ev, eq), 0);
			sl->ev.user = sl;
			rc = lode_kv_put(ct, kv_oid, key, sl->buf, sl->len, &sl->ev);
			if (rc < 0) {
				hs_dump_log(s, 4096);
				fail_msg("round %u: put %s refused before the kill: %s", round, key,
					 lode_strerror(rc));
			}
			sl->busy = true;
			inflight++;
		}
		n = lode_eq_poll(eq, 1, INFLIGHT, 10000, evs);
		assert_true(n >= 0);
		for (int e = 0; e < n; e++) {
			struct slot *sl = evs[e]->user;

			sl->busy = false;
			inflight--;
			last_done = now_ms();
			if (sl->ev.rc == 0) {
				wlist_add(acked, round, sl->i, sl->len);
				acks++;
				late_acks += killed_at != 0;
				continue;
			}
			wlist_add(unacked, round, sl->i, sl->len);
			if (!killed_at) {
				hs_dump_log(s, 4096);
				fail_msg("round %u: write %u failed before the kill: %s", round, sl->i,
					 lode_strerror(sl->ev.rc));
			}
			errs_after++;
			if (!first_err)
				first_err = sl->ev.rc;
		}
		if (!killed_at && (now_ms() - t0 >= STREAM_MS || acks >= STREAM_ACKS)) {
			assert_int_equal(hs_kill(s), 0);
			killed_at = now_ms();
		}
		if (killed_at && inflight == 0)
			break;
		if (killed_at && now_ms() - killed_at > TIMEOUT_MS + SLACK_MS)
			fail_msg("round %u: %u writes still in flight %u ms after the kill", round,
				 inflight, TIMEOUT_MS + SLACK_MS);
	}
	print_message("  round %u: %u acknowledged (%u of them after the kill), %u failed after "
		      "the kill (first: %s), all done %" PRIu64 " ms after it\n",
		      round, acks, late_acks, errs_after, lode_strerror(first_err),
		      last_done > killed_at ? last_done - killed_at : 0);
	assert_true(acks > 0);
	for (unsigned k = 0; k < INFLIGHT; k++)
		free(slots[k].buf);
}

/*
 * Wait until ct, whose engine was killed and has been restarted, serves a
 * put again: the connection's renewer connects the engine once the
 * management service's map has it again (src/client/README.md). Fails
 * after ms.
 */
static void back_within(const struct hs_server *s, lode_cont_t *ct, const char *what,
			unsigned round, unsigned ms)
{
	uint64_t t0 = now_ms();
	uint8_t v[SMALL];
	int rc;

	value_fill(round, 1u << 29, v, SMALL);
	while ((rc = lode_kv_put(ct, kv_oid, "back", v, SMALL, NULL)) < 0) {
		if (rc != -EHOSTDOWN && rc != -ETIMEDOUT && rc != -ECONNRESET)
			fail_msg("%s: a put with the server back: %s", what, lode_strerror(rc));
		if (now_ms() - t0 > ms) {
			hs_dump_log(s, 4096);
			fail_msg("%s: the connection made before did not serve again within %u ms "
				 "of the server's return (last: %s)",
				 what, ms, lode_strerror(rc));
		}
		sleep_ms(50);
	}
	print_message("  %s: the connection made before serves again %" PRIu64
		      " ms after the server's return\n", what, now_ms() - t0);
}

static void test_kill9_midstream(void **state)
{
	struct hs_opts o = {.targets = 2, .ram = false};
	struct wlist acked = {0}, unacked = {0};
	struct hs_server *s = &srv;
	int rc;

	assert_int_equal(hs_start(s, &o), 0);
	for (unsigned round = 0; round < ROUNDS; round++) {
		lode_conn_t *c;
		lode_cont_t *ct;
		lode_eq_t *eq;
		const char *tp;
		uint64_t t0;
		uint8_t small[SMALL];
		char what[32];

		tp = connect_any(s, tps[round % ntps], &c);
		print_message("  round %u over %s\n", round, tp);
		if (round == 0)
			assert_int_equal(lode_cont_create(c, "fault", NULL), 0);
		assert_int_equal(lode_cont_open(c, "fault", &ct), 0);
		assert_int_equal(lode_eq_create(&eq), 0);
		stream_and_kill(s, ct, eq, round, &acked, &unacked);

		/* With its engine gone, the connection fails what comes after
		 * with -EHOSTDOWN, promptly. */
		t0 = now_ms();
		value_fill(round, 1u << 30, small, SMALL);
		rc = lode_kv_put(ct, kv_oid, "after-kill", small, SMALL, NULL);
		if (rc != -EHOSTDOWN)
			fail_msg("round %u: a put after the kill: %s, not %s", round,
				 lode_strerror(rc), lode_strerror(-EHOSTDOWN));
		assert_true(now_ms() - t0 <= TIMEOUT_MS + SLACK_MS);
		/* A call that reaches every target does not skip the lost one
		 * and say it is done: the object would be there afterwards. */
		rc = lode_obj_punch(ct, kv_oid, NULL);
		if (rc != -EHOSTDOWN)
			fail_msg("round %u: an object punch with the engine lost: %s, not %s", round,
				 lode_strerror(rc), lode_strerror(-EHOSTDOWN));

		if (round == ROUNDS - 1) {
			/* The last round: a connection to a dead server closes
			 * promptly. */
			assert_int_equal(lode_cont_close(ct), 0);
			t0 = now_ms();
			assert_int_equal(lode_disconnect(c), 0);
			if (now_ms() - t0 > 2000)
				fail_msg("round %u: disconnecting from a dead server took %" PRIu64
					 " ms", round, now_ms() - t0);
			assert_int_equal(lode_eq_destroy(eq), 0);
			assert_int_equal(hs_restart(s), 0);
			connect_any(s, tps[round % ntps], &c);
			assert_int_equal(lode_cont_open(c, "fault", &ct), 0);
			verify(ct, &acked, &unacked, s);
			assert_int_equal(lode_cont_close(ct), 0);
			assert_int_equal(lode_disconnect(c), 0);
			continue;
		}

		/* Restart on the same data: the same connection and container
		 * handle serve again once the engine is back, and everything
		 * acknowledged is there. */
		assert_int_equal(hs_restart(s), 0);
		snprintf(what, sizeof(what), "round %u", round);
		back_within(s, ct, what, round, RECONNECT_MS);
		verify(ct, &acked, &unacked, s);
		assert_int_equal(lode_kv_put(ct, kv_oid, "after-restart", small, SMALL, NULL), 0);
		assert_int_equal(lode_cont_close(ct), 0);
		assert_int_equal(lode_disconnect(c), 0);
		assert_int_equal(lode_eq_destroy(eq), 0);
	}
	rc = stop_status(s, "kill -9 rounds");
	if (rc != 0)
		hs_dump_log(s, 4096);
	assert_int_equal(rc, 0);
	hs_cleanup(s);
	free(acked.v);
	free(unacked.v);
}

static int squat = -1; /* test_mgmt_moved's listener on the old port */

/* The value of "KEY: value" in the credentials file at path, into out. */
static void cred_line(const char *path, const char *key, char *out, size_t cap)
{
	char line[1024];
	size_t kl = strlen(key);
	FILE *f = fopen(path, "r");

	assert_non_null(f);
	out[0] = '\0';
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
			snprintf(out, cap, "%s", line + kl + 1 + strspn(line + kl + 1, " "));
			out[strcspn(out, "\n")] = '\0';
		}
	fclose(f);
	assert_true(out[0] != '\0');
}

/* A tcp connection as the admin of s, the user and secret passed in
 * lode_conn_opts (so no credentials file, no mgmt line). */
static void connect_given(const struct hs_server *s, lode_conn_t **c)
{
	struct lode_conn_opts o = {.transport = "tcp", .timeout_ms = TIMEOUT_MS};
	char user[128], secret[256];

	cred_line(s->cred, "user", user, sizeof(user));
	cred_line(s->cred, "secret", secret, sizeof(secret));
	o.user = user;
	o.secret = secret;
	assert_int_equal(lode_connect(s->addr, &o, c), 0);
}

/*
 * Away longer than the capability lives: a connection whose own token
 * expired while the service could not renew it logs in again once the
 * service is back (src/client/README.md), with the credentials it found
 * the first time (here the credentials file), opens its container again
 * and serves; the container handle of before works. One whose secret was
 * passed in lode_conn_opts (not kept) cannot: it fails, and says why,
 * rather than answer -EHOSTDOWN for ever. A new connection works.
 */
static void test_expired_while_away(void **state)
{
	static const char *const extra[] = {"--cap-lifetime", "10", NULL};
	struct hs_opts o = {.targets = 1, .ram = false, .extra_args = extra};
	struct hs_server *s = &srv;
	lode_conn_t *c, *cg;
	lode_cont_t *ct, *ctg;
	uint8_t v[SMALL];
	uint64_t t0;
	int rc;

	assert_int_equal(hs_start(s, &o), 0);
	connect_any(s, "tcp", &c);
	connect_given(s, &cg);
	assert_int_equal(lode_cont_create(c, "away", NULL), 0);
	assert_int_equal(lode_cont_open(c, "away", &ct), 0);
	assert_int_equal(lode_cont_open(cg, "away", &ctg), 0);
	value_fill(7, 7, v, SMALL);
	assert_int_equal(lode_kv_put(ct, kv_oid, "k", v, SMALL, NULL), 0);
	assert_int_equal(hs_kill(s), 0);
	/* The token, renewed at two thirds of its 10 s, has expired 11 s on. */
	t0 = now_ms();
	do {
		rc = lode_kv_put(ct, kv_oid, "k", v, SMALL, NULL);
		if (rc != -EHOSTDOWN && rc != -LODE_ECAPEXPIRED)
			fail_msg("a put with the server away: %s", lode_strerror(rc));
		rc = lode_kv_put(ctg, kv_oid, "k", v, SMALL, NULL);
		if (rc != -EHOSTDOWN && rc != -LODE_ECAPEXPIRED && rc != -ENOTCONN)
			fail_msg("a put with the server away (secret passed in): %s",
				 lode_strerror(rc));
		sleep_ms(200);
	} while (now_ms() - t0 < 11000);
	assert_int_equal(hs_restart(s), 0);
	back_within(s, ct, "logged in again", 0, RECONNECT_MS);
	rc = lode_kv_put(ctg, kv_oid, "k", v, SMALL, NULL);
	if (rc != -ENOTCONN)
		fail_msg("a put on a connection whose capability expired while the server was away, "
			 "its secret passed in: %s, not %s",
			 lode_strerror(rc), lode_strerror(-ENOTCONN));
	lode_cont_close(ctg);
	lode_disconnect(cg);
	lode_cont_close(ct);
	lode_disconnect(c);
	connect_any(s, "tcp", &c);
	assert_int_equal(lode_cont_open(c, "away", &ct), 0);
	assert_int_equal(lode_kv_put(ct, kv_oid, "k", v, SMALL, NULL), 0);
	lode_cont_close(ct);
	lode_disconnect(c);
	assert_int_equal(stop_status(s, "an expired connection"), 0);
	hs_cleanup(s);
}

/* TenantCreate NAME through c's control plane. */
static int tenant_create(lode_conn_t *c, const char *name)
{
	Lode__Mgmt__V1__NameRef req = LODE__MGMT__V1__NAME_REF__INIT;
	ProtobufCMessage *rep = NULL;
	int rc;

	req.name = (char *)name;
	rc = conn_mgmt_call(c, "/lode.mgmt.v1.Mgmt/TenantCreate", &req.base,
			    &lode__mgmt__v1__tenant__descriptor, &rep, -ENOENT);
	if (rep)
		protobuf_c_message_free_unpacked(rep, NULL);
	return rc;
}

/*
 * The management service moved: its port was taken while loded was down,
 * so it came back on another (src/server). Connections made before find it
 * again (src/client/README.md): one that read the service's address from
 * the credentials file reads it there again, one that learnt it from
 * loded's welcome asks for a new welcome. Both serve again, and open a
 * container, which only the service can grant. A control-plane connection
 * whose first call after the move is a change (not sent twice) has that
 * call fail, and its next change goes to the service where it is now.
 */
static void test_mgmt_moved(void **state)
{
	struct hs_opts o = {.targets = 1, .ram = false};
	struct hs_server *s = &srv;
	struct lode_conn_opts wo = {.transport = "tcp", .timeout_ms = TIMEOUT_MS};
	char mgmt0[300], mgmt1[300];
	lode_conn_t *cf, *cw, *cm;
	lode_cont_t *ctf, *ctw, *ct2;
	uint64_t t0;
	int rc;
	struct sockaddr_in sin = {.sin_family = AF_INET};
	uint8_t v[SMALL];
	int one = 1;

	assert_int_equal(hs_start(s, &o), 0);
	cred_line(s->cred, "mgmt", mgmt0, sizeof(mgmt0));
	connect_any(s, "tcp", &cf); /* the file's mgmt line */
	connect_given(s, &cw);      /* no file: the welcome's port */
	assert_int_equal(conn_mgmt_connect(s->addr, &wo, &cm), 0);
	assert_int_equal(lode_cont_create(cf, "moved", NULL), 0);
	assert_int_equal(lode_cont_open(cf, "moved", &ctf), 0);
	assert_int_equal(lode_cont_open(cw, "moved", &ctw), 0);
	value_fill(9, 9, v, SMALL);
	assert_int_equal(lode_kv_put(ctf, kv_oid, "k", v, SMALL, NULL), 0);

	assert_int_equal(hs_kill(s), 0);
	/* Take the service's port while loded is down. */
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sin.sin_port = htons((uint16_t)atoi(strrchr(mgmt0, ':') + 1));
	squat = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(squat >= 0);
	setsockopt(squat, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(squat, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(squat, 4) < 0)
		fail_msg("taking the management port %s: %s", mgmt0, strerror(errno));
	assert_int_equal(hs_restart(s), 0);
	cred_line(s->cred, "mgmt", mgmt1, sizeof(mgmt1));
	if (strcmp(mgmt0, mgmt1) == 0)
		fail_msg("the management service kept %s although it was taken", mgmt0);
	print_message("  the management service moved from %s to %s\n", mgmt0, mgmt1);

	back_within(s, ctf, "through the credentials file", 0, RECONNECT_MS);
	back_within(s, ctw, "through the welcome", 0, RECONNECT_MS);
	assert_int_equal(lode_cont_open(cf, "moved", &ct2), 0);
	assert_int_equal(lode_cont_close(ct2), 0);
	assert_int_equal(lode_cont_open(cw, "moved", &ct2), 0);
	assert_int_equal(lode_cont_close(ct2), 0);
	rc = tenant_create(cm, "moved1");
	print_message("  a change on the old port: %s\n", lode_strerror(rc));
	assert_true(rc < 0);
	t0 = now_ms();
	assert_int_equal(tenant_create(cm, "moved2"), 0);
	assert_true(now_ms() - t0 < TIMEOUT_MS); /* not the old port again */
	lode_disconnect(cm);
	close(squat);
	squat = -1;
	lode_cont_close(ctf);
	lode_cont_close(ctw);
	lode_disconnect(cf);
	lode_disconnect(cw);
	assert_int_equal(stop_status(s, "a moved management service"), 0);
	hs_cleanup(s);
}

/* ---- b: a stalled server ------------------------------------------------------------ */

/*
 * SIGSTOP: the server neither answers nor dies, so only the request
 * timeout can notice. A blocking get must fail within the timeout and
 * slack; a batch of asynchronous puts within twice the timeout and slack
 * (a write whose engine was lost waits one more timeout for a map that
 * says why, src/client/README.md). After SIGCONT the first connection
 * serves again, and a new one works.
 */
static void test_sigstop_timeout(void **state)
{
	struct hs_opts o = {.targets = 2, .ram = true};
	struct hs_server *s = &srv;

	assert_int_equal(hs_start(s, &o), 0);
	for (unsigned t = 0; t < ntps; t++) {
		uint8_t val[LARGE], got[LARGE];
		lode_conn_t *c1, *c2;
		lode_cont_t *ct1, *ct2;
		lode_event_t evs[8], *done[8];
		lode_eq_t *eq;
		char label[32];
		const char *tp;
		uint32_t len = 0;
		unsigned left = 8;
		uint64_t t0;
		int rc;

		tp = connect_any(s, tps[t], &c1);
		connect_any(s, tp, &c2);
		snprintf(label, sizeof(label), "stop-%s", tp);
		assert_int_equal(lode_cont_create(c1, label, NULL), 0);
		assert_int_equal(lode_cont_open(c1, label, &ct1), 0);
		assert_int_equal(lode_cont_open(c2, label, &ct2), 0);
		value_fill(t, 0, val, sizeof(val));
		assert_int_equal(lode_kv_put(ct1, kv_oid, "k", val, sizeof(val), NULL), 0);

		server_sigstop(s);
		t0 = now_ms();
		rc = lode_kv_get(ct1, kv_oid, "k", got, sizeof(got), &len, NULL);
		print_message("  %s: a get from a stopped server returned %d (%s) after %" PRIu64
			      " ms\n",
			      tp, rc, lode_strerror(rc), now_ms() - t0);
		assert_true(rc < 0);
		assert_true(now_ms() - t0 <= TIMEOUT_MS + 2000);

		/* Asynchronous writes on the second connection, all failing in time. */
		assert_int_equal(lode_eq_create(&eq), 0);
		t0 = now_ms();
		for (unsigned k = 0; k < 8; k++) {
			char key[32];

			key_of(100 + t, k, key, sizeof(key));
			assert_int_equal(lode_event_init(&evs[k], eq), 0);
			assert_int_equal(lode_kv_put(ct2, kv_oid, key, val, size_of(k, LARGE), &evs[k]),
					 0);
		}
		while (left) {
			int n = lode_eq_poll(eq, 1, 8, 100000, done);

			assert_true(n >= 0);
			for (int e = 0; e < n; e++) {
				if (done[e]->rc >= 0)
					fail_msg("%s: a write to a stopped server succeeded", tp);
			}
			left -= (unsigned)n;
			if (now_ms() - t0 > 2 * TIMEOUT_MS + 2000)
				fail_msg("%s: %u writes to a stopped server still in flight after %u ms",
					 tp, left, 2 * TIMEOUT_MS + 2000);
		}
		print_message("  %s: 8 puts to a stopped server failed within %" PRIu64 " ms\n", tp,
			      now_ms() - t0);
		/* Connections whose engine is lost refuse new work at once. */
		t0 = now_ms();
		rc = lode_kv_get(ct1, kv_oid, "k", got, sizeof(got), &len, NULL);
		if (rc != -EHOSTDOWN || now_ms() - t0 > 1000)
			fail_msg("%s: a get with the engine lost: %s after %" PRIu64 " ms", tp,
				 lode_strerror(rc), now_ms() - t0);
		assert_int_equal(lode_eq_destroy(eq), 0);

		/* Going on, the server serves the first connection again. */
		assert_int_equal(kill(s->pid, SIGCONT), 0);
		back_within(s, ct1, tp, t, RECONNECT_MS);
		len = 0;
		assert_int_equal(lode_kv_get(ct1, kv_oid, "k", got, sizeof(got), &len, NULL), 0);
		assert_int_equal(len, sizeof(val));
		assert_memory_equal(got, val, sizeof(val));
		lode_cont_close(ct1);
		lode_cont_close(ct2);
		lode_disconnect(c1);
		lode_disconnect(c2);
		if (!hs_running(s)) {
			hs_dump_log(s, 4096);
			fail_msg("loded died after SIGCONT (status %d)", s->last_status);
		}
		/* A new connection sees the value written before the stop. */
		connect_any(s, tp, &c1);
		assert_int_equal(lode_cont_open(c1, label, &ct1), 0);
		assert_int_equal(lode_kv_get(ct1, kv_oid, "k", got, sizeof(got), &len, NULL), 0);
		assert_int_equal(len, sizeof(val));
		assert_memory_equal(got, val, sizeof(val));
		lode_cont_close(ct1);
		lode_disconnect(c1);
		client_works(s, tp, label);
	}
	assert_int_equal(stop_status(s, "clients timed out on a stopped server"), 0);
	hs_cleanup(s);
}

/* ---- c: SIGTERM with writes in flight ------------------------------------------------- */

#define DRAIN_WRITES 32

/*
 * SIGTERM while DRAIN_WRITES writes are in flight: the server drains and
 * exits 0; the client sees each write succeed or fail, none hang; every
 * acknowledged one is there after a restart; requests sent after the
 * server went away fail promptly.
 */
static void test_sigterm_drain(void **state)
{
	struct hs_opts o = {.targets = 2, .ram = false};
	struct hs_server *s = &srv;
	uint8_t *bufs[DRAIN_WRITES];

	for (unsigned k = 0; k < DRAIN_WRITES; k++) {
		bufs[k] = malloc(256u << 10);
		assert_non_null(bufs[k]);
	}
	assert_int_equal(hs_start(s, &o), 0);
	for (unsigned t = 0; t < ntps; t++) {
		struct wlist acked = {0}, unacked = {0};
		lode_event_t evs[DRAIN_WRITES], *done[DRAIN_WRITES], late;
		unsigned round = 200 + t, left = DRAIN_WRITES;
		lode_conn_t *c;
		lode_cont_t *ct;
		lode_eq_t *eq;
		char label[32];
		const char *tp;
		uint64_t t0;
		int rc, st, first_err = 0;

		tp = connect_any(s, tps[t], &c);
		snprintf(label, sizeof(label), "drain-%s", tp);
		assert_int_equal(lode_cont_create(c, label, NULL), 0);
		assert_int_equal(lode_cont_open(c, label, &ct), 0);
		assert_int_equal(lode_eq_create(&eq), 0);
		for (unsigned k = 0; k < DRAIN_WRITES; k++) {
			char key[32];
			uint32_t len = size_of(k, 256u << 10);

			key_of(round, k, key, sizeof(key));
			value_fill(round, k, bufs[k], len);
			assert_int_equal(lode_event_init(&evs[k], eq), 0);
			evs[k].user = (void *)(uintptr_t)k;
			assert_int_equal(lode_kv_put(ct, kv_oid, key, bufs[k], len, &evs[k]), 0);
		}
		assert_int_equal(kill(s->pid, SIGTERM), 0);
		t0 = now_ms();
		while (left) {
			int n = lode_eq_poll(eq, 1, DRAIN_WRITES, 100000, done);

			assert_true(n >= 0);
			for (int e = 0; e < n; e++) {
				unsigned k = (unsigned)(uintptr_t)done[e]->user;

				wlist_add(done[e]->rc == 0 ? &acked : &unacked, round, k,
					  size_of(k, 256u << 10));
				if (done[e]->rc < 0 && !first_err)
					first_err = done[e]->rc;
			}
			left -= (unsigned)n;
			if (now_ms() - t0 > TIMEOUT_MS + SLACK_MS)
				fail_msg("%s: %u writes still in flight %u ms after SIGTERM", tp, left,
					 TIMEOUT_MS + SLACK_MS);
		}
		print_message("  %s: %zu of %u writes acknowledged around SIGTERM, the rest failed "
			      "(first: %s)\n",
			      tp, acked.n, DRAIN_WRITES, lode_strerror(first_err));

		/* The server exits 0 by itself. */
		st = stop_status(s, "SIGTERM with writes in flight");
		if (st != 0)
			hs_dump_log(s, 4096);
		assert_int_equal(st, 0);

		/* Requests after it went: a blocking one and an asynchronous one, both fail. */
		t0 = now_ms();
		rc = lode_kv_put(ct, kv_oid, "late", bufs[0], SMALL, NULL);
		assert_true(rc < 0);
		assert_int_equal(lode_event_init(&late, eq), 0);
		rc = lode_kv_put(ct, kv_oid, "late2", bufs[1], LARGE, &late);
		if (rc == 0) {
			lode_event_t *ev;

			while (lode_eq_poll(eq, 1, 1, 100000, &ev) == 0 &&
			       now_ms() - t0 <= TIMEOUT_MS + SLACK_MS)
				;
			assert_int_equal(lode_eq_inflight(eq), 0);
			assert_true(late.rc < 0);
		}
		assert_true(now_ms() - t0 <= TIMEOUT_MS + SLACK_MS);
		assert_int_equal(lode_eq_destroy(eq), 0);
		lode_cont_close(ct);
		lode_disconnect(c);

		assert_int_equal(hs_restart(s), 0);
		connect_any(s, tp, &c);
		assert_int_equal(lode_cont_open(c, label, &ct), 0);
		verify(ct, &acked, &unacked, s);
		lode_cont_close(ct);
		lode_disconnect(c);
		free(acked.v);
		free(unacked.v);
	}
	assert_int_equal(stop_status(s, "the drain tests"), 0);
	hs_cleanup(s);
	for (unsigned k = 0; k < DRAIN_WRITES; k++)
		free(bufs[k]);
}

/* ---- d: clients that die ---------------------------------------------------------------- */

/* Child exit codes, so the parent can say what went wrong in a child. */
enum { CH_OK = 0, CH_CONNECT = 10, CH_OPEN, CH_NOMEM, CH_PUT, CH_POLL };

/* A child's stream of 1 MiB writes; after `signal_after` acks it writes a byte to fd. */
static int child_stream(const struct hs_server *s, const char *tp, const char *label,
			unsigned nwrites, bool forever, int fd)
{
	lode_event_t evs[32] = {0}, *done[32];
	uint8_t *bufs[32];
	lode_conn_t *c;
	lode_cont_t *ct;
	lode_eq_t *eq;
	unsigned acks = 0, next = 0;

	if (hs_connect(s, tp, TIMEOUT_MS, &c) < 0)
		return CH_CONNECT;
	if (lode_cont_open(c, label, &ct) < 0)
		return CH_OPEN;
	if (lode_eq_create(&eq) < 0)
		return CH_NOMEM;
	for (unsigned k = 0; k < nwrites; k++) {
		char key[32];

		if (!(bufs[k] = malloc(MIB)))
			return CH_NOMEM;
		key_of(300, next, key, sizeof(key));
		value_fill(300, next++, bufs[k], MIB);
		lode_event_init(&evs[k], eq);
		evs[k].user = bufs[k];
		int rc = lode_kv_put(ct, kv_oid, key, bufs[k], MIB, &evs[k]);

		if (rc < 0) {
			fprintf(stderr, "child (%s): write %u refused: %s\n", tp, k, lode_strerror(rc));
			return CH_PUT;
		}
	}
	while (forever) {
		int n = lode_eq_poll(eq, 1, 32, 1000000, done);

		if (n < 0)
			return CH_POLL;
		for (int e = 0; e < n; e++) {
			char key[32];

			if (done[e]->rc < 0) {
				fprintf(stderr, "child (%s): a write failed: %s\n", tp,
					lode_strerror(done[e]->rc));
				return CH_PUT;
			}
			if (++acks == 8 && fd >= 0 && write(fd, "x", 1) != 1)
				return CH_POLL;
			key_of(300, next, key, sizeof(key));
			value_fill(300, next++, done[e]->user, MIB);
			lode_event_init(done[e], eq);
			if (lode_kv_put(ct, kv_oid, key, done[e]->user, MIB, done[e]) < 0)
				return CH_PUT;
		}
	}
	/* Leave without disconnecting: the writes are still in flight. */
	return CH_OK;
}

/*
 * In a forked child: cmocka's handlers would turn a crash into a longjmp
 * back into the test runner, which would then run the remaining tests in
 * the child too. A crash must stay a crash the parent can see.
 */
static void child_defaults(void)
{
	static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};

	for (unsigned i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], SIG_DFL);
}

static pid_t fork_child(const struct hs_server *s, const char *tp, const char *label,
			unsigned nwrites, bool forever, int fd)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		child_defaults();
		_exit(child_stream(s, tp, label, nwrites, forever, fd));
	}
	child = pid;
	return pid;
}

static int wait_child(pid_t pid)
{
	int st;

	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (pid == child)
		child = -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Exits with its 32 writes of 1 MiB in flight, without disconnecting. */
static void client_exits(struct hs_server *s, const char *tp)
{
	int rc = wait_child(fork_child(s, tp, "killed", 32, false, -1));

	if (rc != CH_OK)
		fail_msg("%s: the exiting child failed with %d before exiting", tp, rc);
}

/* Killed with SIGKILL in the middle of a stream of 1 MiB writes. */
static void client_killed(struct hs_server *s, const char *tp)
{
	struct pollfd p;
	int pfd[2];
	pid_t pid;
	char x;

	assert_int_equal(pipe(pfd), 0);
	pid = fork_child(s, tp, "killed", 16, true, pfd[1]);
	close(pfd[1]);
	p = (struct pollfd){pfd[0], POLLIN, 0};
	/* 30 s: under ASan beside another suite on two cores, once more than 10. */
	if (poll(&p, 1, 30000) != 1 || read(pfd[0], &x, 1) != 1) {
		close(pfd[0]);
		kill(pid, SIGKILL);
		fail_msg("%s: the streaming child got no 8 acks in 30 s (exit %d)", tp,
			 wait_child(pid));
	}
	close(pfd[0]);
	sleep_ms(50);
	kill(pid, SIGKILL);
	assert_int_equal(wait_child(pid), 128 + SIGKILL);
}

/*
 * Killed while connecting, at different points of the handshake. Over tcp
 * this is what made UCX 1.13 abort loded when clients connected by worker
 * address; they now connect through the targets' UCX listeners
 * (docs/decisions/0004).
 */
static void client_killed_connecting(struct hs_server *s, const char *tp)
{
	for (unsigned k = 0; k < 10; k++) {
		pid_t pid = fork_child(s, tp, "killed", 0, false, -1);

		sleep_ms(k * 3);
		kill(pid, SIGKILL);
		wait_child(pid);
	}
}

/*
 * Run one way for a client to die over every transport; after each the
 * server must be up and serve the next client, and at the end drain and
 * exit 0 on SIGTERM.
 */
static void client_dies(void (*die)(struct hs_server *, const char *), const char *what)
{
	struct hs_opts o = {.targets = 2, .ram = true};
	struct hs_server *s = &srv;
	lode_conn_t *c;
	int rc;

	assert_int_equal(hs_start(s, &o), 0);
	connect_any(s, "tcp", &c);
	assert_int_equal(lode_cont_create(c, "killed", NULL), 0);
	lode_disconnect(c);
	for (unsigned t = 0; t < ntps; t++) {
		const char *tp = tps[t];

		if (hs_connect(s, tp, TIMEOUT_MS, &c) == -EPROTONOSUPPORT) {
			print_message("  (%s not offered; skipped)\n", tp);
			continue;
		}
		lode_disconnect(c);
		die(s, tp);
		sleep_ms(200);
		if (!hs_running(s)) {
			hs_dump_log(s, 4096);
			fail_msg("%s: loded died after %s (status %d)", tp, what, s->last_status);
		}
		client_works(s, tp, "killed");
	}
	rc = stop_status(s, what);
	if (rc != 0)
		hs_dump_log(s, 4096);
	assert_int_equal(rc, 0);
	hs_cleanup(s);
}

static void test_client_exits_midstream(void **state)
{
	client_dies(client_exits, "a client exited with 32 writes of 1 MiB in flight");
}

static void test_client_killed_midstream(void **state)
{
	client_dies(client_killed, "a client was killed in the middle of a stream");
}

static void test_client_killed_connecting(void **state)
{
	client_dies(client_killed_connecting, "clients were killed while connecting");
}

/*
 * A client stalled (SIGSTOP) with large writes half-sent: SIGTERM must still
 * stop the server in bounded time; it cannot wait for that client forever.
 */
static void test_sigterm_stalled_client(void **state)
{
	struct hs_opts o = {.targets = 1, .ram = true};
	struct hs_server *s = &srv;
	lode_conn_t *c;
	uint64_t t0;
	pid_t pid;
	int st;

	assert_int_equal(hs_start(s, &o), 0);
	connect_any(s, "tcp", &c);
	assert_int_equal(lode_cont_create(c, "stalled", NULL), 0);
	lode_disconnect(c);

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* Start the writes, then stop before the transfers can finish. */
		int rc;

		child_defaults();
		rc = child_stream(s, "tcp", "stalled", 8, false, -1);

		if (rc == CH_OK)
			raise(SIGSTOP);
		_exit(rc);
	}
	child = pid;
	while (waitpid(pid, &st, WUNTRACED) < 0 && errno == EINTR)
		;
	if (!WIFSTOPPED(st)) {
		hs_cleanup(s);
		fail_msg("the child did not get to stop (status %#x)", st);
	}
	assert_int_equal(kill(s->pid, SIGTERM), 0);
	t0 = now_ms();
	while (hs_running(s) && now_ms() - t0 < 10000)
		sleep_ms(10);
	if (hs_running(s)) {
		/* Does the client's death release it? Report, then clean up either way. */
		kill(pid, SIGKILL);
		wait_child(pid);
		t0 = now_ms();
		while (hs_running(s) && now_ms() - t0 < 10000)
			sleep_ms(10);
		st = hs_running(s) ? -1 : s->last_status;
		hs_dump_log(s, 4096);
		hs_cleanup(s);
		fail_msg("loded still running 10 s after SIGTERM with a stalled client; after that "
			 "client was killed it %s (status %d)",
			 st < 0 ? "still did not exit" : "exited", st);
	}
	kill(pid, SIGKILL);
	wait_child(pid);
	st = stop_status(s, "a stalled client");
	if (st != 0)
		hs_dump_log(s, 4096);
	assert_int_equal(st, 0);
	hs_cleanup(s);
}

static int teardown(void **state)
{
	if (squat >= 0) {
		close(squat);
		squat = -1;
	}
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		child = -1;
	}
	hs_cleanup(&srv);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_kill9_midstream, teardown),
		cmocka_unit_test_teardown(test_expired_while_away, teardown),
		cmocka_unit_test_teardown(test_mgmt_moved, teardown),
		cmocka_unit_test_teardown(test_sigstop_timeout, teardown),
		cmocka_unit_test_teardown(test_sigterm_drain, teardown),
		cmocka_unit_test_teardown(test_client_exits_midstream, teardown),
		cmocka_unit_test_teardown(test_client_killed_midstream, teardown),
		cmocka_unit_test_teardown(test_client_killed_connecting, teardown),
		cmocka_unit_test_teardown(test_sigterm_stalled_client, teardown),
	};
	const char *only = getenv("LODE_TEST_FILTER"), *env = getenv("LODE_TEST_TRANSPORTS");
	char list[256], *save = NULL;

	snprintf(list, sizeof(list), "%s", env && *env ? env : "tcp shm");
	for (char *w = strtok_r(list, " ,", &save); w && ntps < TPS_MAX;
	     w = strtok_r(NULL, " ,", &save))
		snprintf(tps[ntps++], sizeof(tps[0]), "%s", w);
	if (only && *only)
		cmocka_set_test_filter(only);
	/* A write to a socket the server closed must fail, not kill the test. */
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
