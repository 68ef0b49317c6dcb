/*
 * repl-node: one replica of src/repl whose state is a line of text (apply
 * replaces it), driven over stdin so that a test can run a group of them as
 * real processes and kill them (tests/repl_cluster_test.py).
 *
 *   repl-node --id N --dir DIR --peer ID=HOST:PORT... [--election MS]
 *             [--heartbeat MS] [--snapshot-every N] [--timeout MS]
 *
 * Prints "started" once the replica runs (or "error RC MESSAGE" and exits
 * 1), then answers one line per command:
 *
 *   propose TEXT   ok | notleader ID ADDR | notleader none | timeout | error RC MESSAGE
 *   state          state TEXT
 *   leader         leader ID ADDR | leader none
 *   timeout MS     ok (the timeout of later proposals; default 3000)
 *   quit           bye (after repl_stop); end of input does the same
 *
 * and, whenever they happen, lines the test may wait for:
 *
 *   event restore TEXT           a snapshot was installed (at start or from the leader)
 *   event role leader|follower ID
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lode/errno.h"
#include "repl/repl.h"

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t state_mu = PTHREAD_MUTEX_INITIALIZER;
static char *state; /* NUL-terminated copy of the replicated bytes */

/* One whole line on stdout, never interleaved with another thread's. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void say(const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&out_mu);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	pthread_mutex_unlock(&out_mu);
}

static int state_set(const void *buf, size_t len)
{
	char *s = malloc(len + 1);

	if (s == NULL)
		return -ENOMEM;
	memcpy(s, buf, len);
	s[len] = '\0';
	pthread_mutex_lock(&state_mu);
	free(state);
	state = s;
	pthread_mutex_unlock(&state_mu);
	return 0;
}

static int node_apply(void *arg, const void *buf, size_t len)
{
	return state_set(buf, len);
}

static int node_snapshot(void *arg, void **buf, size_t *len)
{
	pthread_mutex_lock(&state_mu);
	*len = state ? strlen(state) : 0;
	*buf = malloc(*len + 1);
	if (*buf != NULL && *len > 0)
		memcpy(*buf, state, *len);
	pthread_mutex_unlock(&state_mu);
	return *buf ? 0 : -ENOMEM;
}

static int node_restore(void *arg, const void *buf, size_t len)
{
	int rc = state_set(buf, len);

	if (rc == 0)
		say("event restore %.*s", (int)len, (const char *)buf);
	return rc;
}

static void node_role(void *arg, bool is_leader, uint64_t leader_id)
{
	say("event role %s %" PRIu64, is_leader ? "leader" : "follower", leader_id);
}

static void usage(void)
{
	fprintf(stderr, "usage: repl-node --id N --dir DIR --peer ID=HOST:PORT... [--election MS]"
			" [--heartbeat MS] [--snapshot-every N] [--timeout MS]\n");
	exit(2);
}

static unsigned long num(const char *s)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno != 0 || *end != '\0' || end == s)
		usage();
	return v;
}

static void propose(repl_t *r, const char *text, unsigned timeout_ms)
{
	char addr[REPL_ADDR_MAX];
	uint64_t id;
	int rc = repl_propose(r, text, strlen(text), timeout_ms);

	if (rc == 0)
		say("ok");
	else if (rc == -LODE_ENOTLEADER && repl_leader(r, &id, addr, sizeof(addr)) == 0)
		say("notleader %" PRIu64 " %s", id, addr);
	else if (rc == -LODE_ENOTLEADER)
		say("notleader none");
	else if (rc == -ETIMEDOUT)
		say("timeout");
	else
		say("error %d %s", rc, lode_strerror(rc));
}

int main(int argc, char **argv)
{
	struct repl_config cfg = {0};
	struct repl_fsm fsm = {.apply = node_apply, .snapshot = node_snapshot,
			       .restore = node_restore, .role = node_role};
	unsigned timeout_ms = 3000;
	char line[4096], msg[256];
	repl_t *r;
	int rc;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (v == NULL)
			usage();
		i++;
		if (strcmp(a, "--id") == 0) {
			cfg.id = num(v);
		} else if (strcmp(a, "--dir") == 0) {
			cfg.dir = v;
		} else if (strcmp(a, "--peer") == 0) {
			const char *eq = strchr(v, '=');
			char idtext[32];

			if (eq == NULL || cfg.npeers == REPL_PEERS_MAX ||
			    (size_t)(eq - v) >= sizeof(idtext))
				usage();
			memcpy(idtext, v, (size_t)(eq - v));
			idtext[eq - v] = '\0';
			cfg.peers[cfg.npeers].id = num(idtext);
			snprintf(cfg.peers[cfg.npeers].addr, REPL_ADDR_MAX, "%s", eq + 1);
			cfg.npeers++;
		} else if (strcmp(a, "--election") == 0) {
			cfg.election_ms = (unsigned)num(v);
		} else if (strcmp(a, "--heartbeat") == 0) {
			cfg.heartbeat_ms = (unsigned)num(v);
		} else if (strcmp(a, "--snapshot-every") == 0) {
			cfg.snapshot_every = (unsigned)num(v);
		} else if (strcmp(a, "--timeout") == 0) {
			timeout_ms = (unsigned)num(v);
		} else {
			usage();
		}
	}

	rc = repl_start(&cfg, &fsm, &r, msg, sizeof(msg));
	if (rc != 0) {
		say("error %d %s", rc, msg);
		return 1;
	}
	say("started");
	while (fgets(line, sizeof(line), stdin) != NULL) {
		char addr[REPL_ADDR_MAX];
		uint64_t id;

		line[strcspn(line, "\n")] = '\0';
		if (strncmp(line, "propose ", 8) == 0) {
			propose(r, line + 8, timeout_ms);
		} else if (strcmp(line, "state") == 0) {
			pthread_mutex_lock(&state_mu);
			say("state %s", state ? state : "");
			pthread_mutex_unlock(&state_mu);
		} else if (strcmp(line, "leader") == 0) {
			if (repl_leader(r, &id, addr, sizeof(addr)) == 0)
				say("leader %" PRIu64 " %s", id, addr);
			else
				say("leader none");
		} else if (strncmp(line, "timeout ", 8) == 0) {
			timeout_ms = (unsigned)strtoul(line + 8, NULL, 10);
			say("ok");
		} else if (strcmp(line, "quit") == 0) {
			break;
		} else {
			say("error %d unknown command", -EINVAL);
		}
	}
	repl_stop(r);
	free(state);
	say("bye");
	return 0;
}
