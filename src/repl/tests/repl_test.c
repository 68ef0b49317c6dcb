/*
 * Tests for src/repl in one process: every configuration repl_start must
 * refuse (with its code and a message), and one single-voter replica's
 * cycle: it elects itself, proposals are applied in order, snapshots are
 * taken, and a restart on the same directory comes back with the latest
 * state (from its snapshot plus the log after it) before it leads again.
 * Groups of several processes are tests/repl_cluster_test.py's.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lode/errno.h"
#include "repl/repl.h"

/* The state: a string, plus counts of what the replica did with it. */
struct text_fsm {
	pthread_mutex_t mu;
	char *state;
	unsigned applies, snapshots, restores, leads;
	bool leader;
	uint64_t leader_id;
};

static int text_set(struct text_fsm *t, const void *buf, size_t len)
{
	char *s = malloc(len + 1);

	if (s == NULL)
		return -ENOMEM;
	memcpy(s, buf, len);
	s[len] = '\0';
	free(t->state);
	t->state = s;
	return 0;
}

static int text_apply(void *arg, const void *buf, size_t len)
{
	struct text_fsm *t = arg;
	int rc;

	pthread_mutex_lock(&t->mu);
	rc = text_set(t, buf, len);
	t->applies++;
	pthread_mutex_unlock(&t->mu);
	return rc;
}

static int text_snapshot(void *arg, void **buf, size_t *len)
{
	struct text_fsm *t = arg;

	pthread_mutex_lock(&t->mu);
	*len = t->state ? strlen(t->state) : 0;
	*buf = malloc(*len + 1);
	if (*len > 0)
		memcpy(*buf, t->state, *len);
	t->snapshots++;
	pthread_mutex_unlock(&t->mu);
	return 0;
}

static int text_restore(void *arg, const void *buf, size_t len)
{
	struct text_fsm *t = arg;
	int rc;

	pthread_mutex_lock(&t->mu);
	rc = text_set(t, buf, len);
	t->restores++;
	pthread_mutex_unlock(&t->mu);
	return rc;
}

static void text_role(void *arg, bool is_leader, uint64_t leader_id)
{
	struct text_fsm *t = arg;

	pthread_mutex_lock(&t->mu);
	t->leader = is_leader;
	t->leader_id = leader_id;
	t->leads += is_leader;
	pthread_mutex_unlock(&t->mu);
}

static struct repl_fsm fsm_of(struct text_fsm *t)
{
	return (struct repl_fsm){.arg = t, .apply = text_apply, .snapshot = text_snapshot,
				 .restore = text_restore, .role = text_role};
}

static void text_init(struct text_fsm *t)
{
	memset(t, 0, sizeof(*t));
	pthread_mutex_init(&t->mu, NULL);
}

static void text_fini(struct text_fsm *t)
{
	free(t->state);
	pthread_mutex_destroy(&t->mu);
}

static char tmp[512];

/* A fresh directory under $LODE_TEST_TMP (or /tmp) for this run. */
static int setup(void **st)
{
	const char *base = getenv("LODE_TEST_TMP");

	if (base == NULL)
		base = "/tmp";
	mkdir(base, 0700);
	snprintf(tmp, sizeof(tmp), "%s/repl_test.XXXXXX", base);
	assert_non_null(mkdtemp(tmp));
	return 0;
}

static int teardown(void **st)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	return system(cmd) == 0 ? 0 : -1;
}

/* A loopback port nobody listens on (bound, then released). */
static unsigned free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	close(fd);
	return ntohs(sa.sin_port);
}

/* One voter, id 7, on a free port, in tmp/name. */
static struct repl_config one_voter(const char *name, char *dir, size_t cap)
{
	struct repl_config cfg = {.id = 7, .npeers = 1, .election_ms = 300, .heartbeat_ms = 30,
				  .snapshot_every = 4};

	snprintf(dir, cap, "%s/%s", tmp, name);
	cfg.dir = dir;
	cfg.peers[0].id = 7;
	snprintf(cfg.peers[0].addr, REPL_ADDR_MAX, "127.0.0.1:%u", free_port());
	return cfg;
}

/* repl_start must fail with want, say something, and leave *out alone. */
static void start_fails(const struct repl_config *cfg, const struct repl_fsm *fsm, int want,
			const char *what)
{
	repl_t *r = (repl_t *)0x1;
	char msg[256] = "";
	int rc = repl_start(cfg, fsm, &r, msg, sizeof(msg));

	if (rc != want)
		fail_msg("%s: got %d (%s), want %d", what, rc, msg, want);
	assert_ptr_equal(r, (repl_t *)0x1);
	if (msg[0] == '\0')
		fail_msg("%s: no message", what);
}

static void test_config_refused(void **st)
{
	struct text_fsm t;
	struct repl_fsm fsm;
	struct repl_config good, c;
	char dir[600], path[700];
	static const char *const bad_addrs[] = {
		"127.0.0.1",	     "127.0.0.1:",	 "127.0.0.1:0",	      "127.0.0.1:65536",
		":8080",	     "127.0.0.1:80x",	 "127.0.0.1:-5",      "[::1]:8080",
		"localhost:8080",    "1.2.3:8080",	 "300.0.0.1:8080",    "127.0.0.1:8080:1",
		"",
	};

	text_init(&t);
	fsm = fsm_of(&t);
	good = one_voter("cfg", dir, sizeof(dir));

	c = good;
	c.id = 8;
	start_fails(&c, &fsm, -EINVAL, "id not among the peers");
	c.id = 0;
	start_fails(&c, &fsm, -EINVAL, "id 0");
	for (unsigned n = 0; n <= REPL_PEERS_MAX; n++) {
		if (n == 1 || n == 3 || n == 5)
			continue;
		c = good;
		c.npeers = n;
		for (unsigned i = 1; i < n; i++) {
			c.peers[i].id = 7 + i;
			snprintf(c.peers[i].addr, REPL_ADDR_MAX, "127.0.0.1:%u", 20000 + i);
		}
		start_fails(&c, &fsm, -EINVAL, "npeers not 1, 3 or 5");
	}
	c = good;
	c.npeers = 6;
	start_fails(&c, &fsm, -EINVAL, "6 peers");
	for (size_t i = 0; i < sizeof(bad_addrs) / sizeof(bad_addrs[0]); i++) {
		c = good;
		snprintf(c.peers[0].addr, REPL_ADDR_MAX, "%s", bad_addrs[i]);
		start_fails(&c, &fsm, -EINVAL, bad_addrs[i]);
	}
	c = good;
	memset(c.peers[0].addr, 'x', REPL_ADDR_MAX); /* no NUL */
	start_fails(&c, &fsm, -EINVAL, "address without its NUL");

	c = good;
	c.npeers = 3;
	c.peers[1] = (struct repl_peer){.id = 7, .addr = "127.0.0.1:20001"};
	c.peers[2] = (struct repl_peer){.id = 9, .addr = "127.0.0.1:20002"};
	start_fails(&c, &fsm, -EINVAL, "duplicate id");
	c.peers[1] = (struct repl_peer){.id = 8, .addr = "127.0.0.1:20002"};
	start_fails(&c, &fsm, -EINVAL, "duplicate address");
	c.peers[0].id = 0;
	start_fails(&c, &fsm, -EINVAL, "peer id 0");

	c = good;
	c.heartbeat_ms = c.election_ms;
	start_fails(&c, &fsm, -EINVAL, "heartbeat not below election");
	c = good;
	c.election_ms = 50; /* default heartbeat 100 */
	c.heartbeat_ms = 0;
	start_fails(&c, &fsm, -EINVAL, "default heartbeat above election");

	c = good;
	c.dir = NULL;
	start_fails(&c, &fsm, -EINVAL, "no dir");
	c.dir = "";
	start_fails(&c, &fsm, -EINVAL, "empty dir");

	/* A directory that cannot be made: a regular file in the way. */
	snprintf(path, sizeof(path), "%s/plain", tmp);
	close(open(path, O_CREAT | O_WRONLY, 0600));
	c = good;
	c.dir = path;
	start_fails(&c, &fsm, -ENOTDIR, "dir is a regular file");
	snprintf(path, sizeof(path), "%s/plain/sub", tmp);
	c.dir = path;
	start_fails(&c, &fsm, -ENOTDIR, "dir under a regular file");

	fsm.restore = NULL;
	start_fails(&good, &fsm, -EINVAL, "no restore");
	fsm = fsm_of(&t);
	fsm.apply = NULL;
	start_fails(&good, &fsm, -EINVAL, "no apply");
	fsm = fsm_of(&t);
	fsm.snapshot = NULL;
	start_fails(&good, &fsm, -EINVAL, "no snapshot");
	start_fails(&good, NULL, -EINVAL, "no fsm");

	/* Nothing above ran far enough to call back. */
	assert_int_equal(t.applies + t.snapshots + t.restores + t.leads, 0);
	text_fini(&t);
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};

	nanosleep(&ts, NULL);
}

/* Wait up to 5 s for r to lead. */
static void wait_leader(repl_t *r)
{
	for (int i = 0; i < 500 && !repl_is_leader(r); i++)
		sleep_ms(10);
	assert_true(repl_is_leader(r));
}

static void test_single_cycle(void **st)
{
	struct text_fsm t;
	struct repl_fsm fsm;
	struct repl_config cfg, other;
	char dir[600], addr[REPL_ADDR_MAX], text[32], msg[256];
	uint64_t id = 0;
	repl_t *r, *r2;
	int rc;

	text_init(&t);
	fsm = fsm_of(&t);
	cfg = one_voter("single", dir, sizeof(dir));
	rc = repl_start(&cfg, &fsm, &r, msg, sizeof(msg));
	if (rc != 0)
		fail_msg("repl_start: %d %s", rc, msg);
	wait_leader(r);
	assert_int_equal(repl_leader(r, &id, addr, sizeof(addr)), 0);
	assert_int_equal(id, 7);
	assert_string_equal(addr, cfg.peers[0].addr);
	assert_int_equal(repl_leader(r, NULL, addr, 4), -ERANGE);
	pthread_mutex_lock(&t.mu);
	assert_true(t.leader);
	assert_int_equal(t.leader_id, 7);
	assert_int_equal(t.leads, 1);
	pthread_mutex_unlock(&t.mu);

	/* A second replica on the same directory is refused. */
	other = cfg;
	snprintf(other.peers[0].addr, REPL_ADDR_MAX, "127.0.0.1:%u", free_port());
	assert_int_equal(repl_start(&other, &fsm, &r2, msg, sizeof(msg)), -EBUSY);

	/* Bad proposals. */
	assert_int_equal(repl_propose(r, "x", 1, 0), -EINVAL);
	assert_int_equal(repl_propose(r, "x", (size_t)REPL_STATE_MAX + 1, 1000), -E2BIG);

	/* Ten states; each is applied before its propose returns. */
	for (int i = 1; i <= 10; i++) {
		snprintf(text, sizeof(text), "state %d", i);
		assert_int_equal(repl_propose(r, text, strlen(text), 5000), 0);
		pthread_mutex_lock(&t.mu);
		assert_string_equal(t.state, text);
		pthread_mutex_unlock(&t.mu);
	}
	/* An empty state is a state too. */
	assert_int_equal(repl_propose(r, "", 0, 5000), 0);
	pthread_mutex_lock(&t.mu);
	assert_string_equal(t.state, "");
	pthread_mutex_unlock(&t.mu);
	assert_int_equal(repl_propose(r, "last", 4, 5000), 0);
	pthread_mutex_lock(&t.mu);
	assert_int_equal(t.applies, 12);
	assert_true(t.snapshots >= 1); /* every 4 entries, unless one is still being written */
	assert_int_equal(t.restores, 0);
	pthread_mutex_unlock(&t.mu);
	repl_stop(r);
	text_fini(&t);

	/* A restart comes back with "last" before it leads: snapshot, then the log after it. */
	text_init(&t);
	fsm = fsm_of(&t);
	rc = repl_start(&cfg, &fsm, &r, msg, sizeof(msg));
	if (rc != 0)
		fail_msg("restart: %d %s", rc, msg);
	wait_leader(r);
	pthread_mutex_lock(&t.mu);
	/* From its snapshot, unless stop came while the last one was being written. */
	assert_true(t.restores <= 1);
	assert_non_null(t.state);
	assert_string_equal(t.state, "last");
	pthread_mutex_unlock(&t.mu);
	assert_int_equal(repl_propose(r, "after restart", 13, 5000), 0);
	pthread_mutex_lock(&t.mu);
	assert_string_equal(t.state, "after restart");
	pthread_mutex_unlock(&t.mu);
	repl_stop(r);
	text_fini(&t);

	/* The same directory under another configuration is refused. */
	text_init(&t);
	fsm = fsm_of(&t);
	other = cfg;
	snprintf(other.peers[0].addr, REPL_ADDR_MAX, "127.0.0.1:%u", free_port());
	assert_int_equal(repl_start(&other, &fsm, &r, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "configuration"));
	text_fini(&t);
}

/* Proposals from several threads at once all land, each applied once. */
struct proposer {
	repl_t *r;
	int n, id, failures;
};

static void *propose_many(void *arg)
{
	struct proposer *p = arg;
	char text[32];

	for (int i = 0; i < p->n; i++) {
		snprintf(text, sizeof(text), "t%d-%d", p->id, i);
		if (repl_propose(p->r, text, strlen(text), 5000) != 0)
			p->failures++;
	}
	return NULL;
}

static void test_threads_and_stop(void **st)
{
	struct text_fsm t;
	struct repl_fsm fsm;
	struct repl_config cfg;
	struct proposer p[4];
	pthread_t th[4];
	char dir[600], msg[256];
	repl_t *r;

	text_init(&t);
	fsm = fsm_of(&t);
	cfg = one_voter("threads", dir, sizeof(dir));
	assert_int_equal(repl_start(&cfg, &fsm, &r, msg, sizeof(msg)), 0);
	wait_leader(r);
	for (int i = 0; i < 4; i++) {
		p[i] = (struct proposer){.r = r, .n = 25, .id = i};
		assert_int_equal(pthread_create(&th[i], NULL, propose_many, &p[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(p[i].failures, 0);
	}
	pthread_mutex_lock(&t.mu);
	assert_int_equal(t.applies, 100);
	pthread_mutex_unlock(&t.mu);
	repl_stop(r);
	repl_stop(NULL);
	text_fini(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config_refused),
		cmocka_unit_test(test_single_cycle),
		cmocka_unit_test(test_threads_and_stop),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
