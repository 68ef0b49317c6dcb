/*
 * Crash consistency of a target (disk mode; RAM mode for a killed process):
 * a forked child issues many asynchronous updates (small inline and
 * multi-block values, single values and array slots) and reports each
 * acknowledged one through a pipe; the parent SIGKILLs it at a random
 * moment, reopens the target (running recovery) and checks that
 *   - every acknowledged update is there: each key reads a version at least
 *     as new as its newest acknowledged one, and none that an acknowledged
 *     punch hides;
 *   - nothing is torn: each value names its key, slot and epoch in a header
 *     and the rest of its bytes derive from them, so a value that is not
 *     exactly one written version is caught.
 * The same target is reused across rounds, so recovery runs on the state
 * earlier rounds and recoveries left; some kills land during open.
 */
#include "test_util.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Keys: single values (small, large), then arrays of fixed-size slots. */
#define NSV_SMALL 16
#define NSV_LARGE 16
#define NARR 16
#define NKEYS (NSV_SMALL + NSV_LARGE + NARR)
#define MAX_SLOTS 64
#define HDR 24
#define MAGIC 0x4c4f4445u /* "LODE" */
#define CHILD_OPS_MAX 3000 /* updates per child, then it idles until killed */
#define CHILD_INFLIGHT 128

enum key_kind { K_SV_SMALL, K_SV_LARGE, K_ARR };

static enum key_kind kind_of(unsigned k)
{
	return k < NSV_SMALL ? K_SV_SMALL : k < NSV_SMALL + NSV_LARGE ? K_SV_LARGE : K_ARR;
}

/* Array slot geometry: inline-sized, a block and a bit, and over one checksum chunk. */
static uint32_t slot_size(unsigned k)
{
	static const uint32_t sizes[] = {48, 4608, 40000, 8192};

	return sizes[(k - NSV_SMALL - NSV_LARGE) % 4];
}

static unsigned nslots(unsigned k)
{
	return kind_of(k) != K_ARR ? 1 : slot_size(k) < 1024 ? MAX_SLOTS : 8;
}

/* The length of the version of key k written at epoch e. */
static uint32_t value_len(unsigned k, lode_epoch_t e)
{
	uint64_t h = tu_mix64(k * 0x9e37ull + e);

	switch (kind_of(k)) {
	case K_SV_SMALL:
		return HDR + (uint32_t)(h % 41); /* 24..64: inline */
	case K_SV_LARGE:
		return 4096 + (uint32_t)(h % 36000);
	case K_ARR:
		break;
	}
	return slot_size(k);
}

static uint64_t value_seed(unsigned k, unsigned slot, lode_epoch_t e)
{
	return tu_mix64(((uint64_t)k << 40) ^ ((uint64_t)slot << 32) ^ e ^ 0xc4a5);
}

static void value_fill(uint8_t *b, unsigned k, unsigned slot, lode_epoch_t e, uint32_t len)
{
	uint32_t h[4] = {MAGIC, k, slot, 0};

	memcpy(b, h, 16);
	memcpy(b + 16, &e, 8);
	tu_pat_fill(b + HDR, len - HDR, value_seed(k, slot, e), HDR);
}

/*
 * Check that b[0..len) is exactly a version of (k, slot); returns its epoch,
 * or 0 with a reason in why.
 */
static lode_epoch_t value_check(const uint8_t *b, uint32_t len, unsigned k, unsigned slot,
				char *why, size_t n)
{
	uint32_t h[4];
	lode_epoch_t e;

	if (len < HDR) {
		snprintf(why, n, "length %u too short", len);
		return 0;
	}
	memcpy(h, b, 16);
	memcpy(&e, b + 16, 8);
	if (h[0] != MAGIC || h[1] != k || h[2] != slot || h[3] != 0) {
		snprintf(why, n, "header names magic %x key %u slot %u", h[0], h[1], h[2]);
		return 0;
	}
	if (len != value_len(k, e)) {
		snprintf(why, n, "length %u, the version @%" PRIu64 " has %u", len, e,
			 value_len(k, e));
		return 0;
	}
	long bad = tu_pat_check(b + HDR, len - HDR, value_seed(k, slot, e), HDR);
	if (bad >= 0) {
		snprintf(why, n, "torn: byte %ld differs from the version @%" PRIu64, bad + HDR, e);
		return 0;
	}
	return e;
}

static struct eng_key key_of(const struct lode_uuid *cont, unsigned k, char *akey)
{
	snprintf(akey, 16, "%s%u", kind_of(k) == K_ARR ? "arr" : "sv", k);
	return tu_key(cont, tu_oid(k % 3), k % 2 ? "dkey-odd" : "dkey-even", akey);
}

/* ---- the child ---------------------------------------------------------- */

enum { MSG_READY = 1, MSG_ACK, MSG_ERR, MSG_DONE, MSG_CKPT, MSG_PUNCHING };

struct msg {
	uint32_t type, key, slot, punch; /* punch: the ACK is of an akey punch */
	uint64_t epoch;
	int64_t rc;
};

struct child {
	int fd;
	unsigned inflight;
};

struct cop {
	struct child *ch;
	uint32_t key, slot, punch;
	uint64_t epoch;
	uint8_t *buf;
};

static void send_msg(int fd, const struct msg *m)
{
	const char *p = (const char *)m;
	size_t left = sizeof(*m);

	while (left) {
		ssize_t n = write(fd, p, left);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			_exit(4);
		p += n;
		left -= (size_t)n;
	}
}

static void child_cb(void *arg, int rc)
{
	struct cop *c = arg;
	struct msg m = {.type = rc == 0 ? MSG_ACK : MSG_ERR,
			.key = c->key,
			.slot = c->slot,
			.punch = c->punch,
			.epoch = c->epoch,
			.rc = rc};

	send_msg(c->ch->fd, &m);
	c->ch->inflight--;
	free(c->buf);
	free(c);
}

static void child_fail(int fd, int rc, uint32_t what)
{
	struct msg m = {.type = MSG_ERR, .key = what, .rc = rc};

	send_msg(fd, &m);
	_exit(3);
}

/* Never returns: issues updates until killed. No cmocka in here. */
static void child_main(const struct eng_tgt_opts *opts, const struct lode_uuid *cont, int fd,
		       unsigned round, uint64_t seed, unsigned nops)
{
	struct child ch = {.fd = fd};
	struct eng_target *t;
	struct tu_rng rng;
	struct msg ready = {.type = MSG_READY};
	lode_epoch_t base = ((lode_epoch_t)round + 1) << 32;
	uint64_t ckpts = 0;
	int rc = eng_tgt_open(opts, &t);

	if (rc != 0)
		child_fail(fd, rc, 1000);
	send_msg(fd, &ready);
	tu_rng_seed(&rng, seed);
	for (unsigned i = 0; i < nops || ch.inflight;) {
		while (i < nops && ch.inflight < CHILD_INFLIGHT) {
			unsigned k = (unsigned)tu_rand_below(&rng, NKEYS);
			struct cop *c = malloc(sizeof(*c));
			char akey[16];
			struct eng_key key = key_of(cont, k, akey);

			if (!c)
				child_fail(fd, -ENOMEM, 1001);
			c->ch = &ch;
			c->key = k;
			/* now and then a single value is punched instead */
			c->punch = kind_of(k) != K_ARR && tu_rand_below(&rng, 25) == 0;
			c->slot = (uint32_t)tu_rand_below(&rng, nslots(k));
			c->epoch = base + i++;
			uint32_t len = value_len(k, c->epoch);
			c->buf = malloc(len);
			if (!c->buf)
				child_fail(fd, -ENOMEM, 1001);
			value_fill(c->buf, k, c->slot, c->epoch, len);
			if (c->punch) {
				/* announced first: once queued it may survive unacknowledged */
				struct msg m = {.type = MSG_PUNCHING, .key = k, .epoch = c->epoch};

				send_msg(fd, &m);
				rc = eng_akey_punch(t, &key, c->epoch, child_cb, c);
			}
			else if (kind_of(k) == K_ARR)
				rc = eng_arr_update(t, &key, c->epoch, (uint64_t)c->slot * len,
						    c->buf, len, child_cb, c);
			else
				rc = eng_sv_update(t, &key, c->epoch, c->buf, len, child_cb, c);
			if (rc != 0)
				child_fail(fd, rc, 1002);
			ch.inflight++;
		}
		rc = eng_progress(t);
		if (rc < 0)
			child_fail(fd, rc, 1003);
		/* report checkpoints, to show that kills land around them too */
		struct eng_stats st;
		if (eng_tgt_stats(t, &st) == 0 && st.checkpoints != ckpts) {
			struct msg m = {.type = MSG_CKPT};

			ckpts = st.checkpoints;
			send_msg(fd, &m);
		}
	}
	struct msg done = {.type = MSG_DONE};
	if (round % 2)
		eng_tgt_close(t); /* a clean close before the kill, sometimes */
	send_msg(fd, &done);
	for (;;)
		pause();
}

/* ---- the parent ---------------------------------------------------------- */

struct state {
	lode_epoch_t acked[NKEYS][MAX_SLOTS]; /* newest acknowledged epoch, 0: none */
	lode_epoch_t punched[NKEYS];          /* newest acknowledged akey punch */
	lode_epoch_t punch_issued[NKEYS];     /* newest akey punch ever queued */
	unsigned long acks, kills_in_open, done_before_kill, checkpoints;
};

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Consume whole messages from buf; returns how many bytes were used. */
static size_t take_msgs(struct state *s, const uint8_t *buf, size_t len, bool *ready,
			unsigned round)
{
	size_t used = 0;

	while (len - used >= sizeof(struct msg)) {
		struct msg m;

		memcpy(&m, buf + used, sizeof(m));
		used += sizeof(m);
		switch (m.type) {
		case MSG_READY:
			*ready = true;
			break;
		case MSG_ACK:
			assert_true(m.key < NKEYS && m.slot < MAX_SLOTS);
			if (m.punch) {
				if (m.epoch > s->punched[m.key])
					s->punched[m.key] = m.epoch;
			} else if (m.epoch > s->acked[m.key][m.slot])
				s->acked[m.key][m.slot] = m.epoch;
			s->acks++;
			break;
		case MSG_ERR:
			fail_msg("round %u: the child failed (step %u): %d (%s)", round, m.key,
				 (int)m.rc, lode_strerror((int)m.rc));
			break;
		case MSG_DONE:
			s->done_before_kill++;
			break;
		case MSG_CKPT:
			s->checkpoints++;
			break;
		case MSG_PUNCHING:
			assert_true(m.key < NKEYS);
			if (m.epoch > s->punch_issued[m.key])
				s->punch_issued[m.key] = m.epoch;
			break;
		default:
			fail_msg("round %u: bad message type %u", round, m.type);
		}
	}
	return used;
}

/* Check every key against what was acknowledged. */
static void verify(struct eng_target *t, const struct lode_uuid *cont, struct state *s,
		   unsigned round, uint64_t seed)
{
	uint8_t *buf = malloc(1 << 16);
	char why[160];

	assert_non_null(buf);
	for (unsigned k = 0; k < NKEYS; k++) {
		char akey[16];
		struct eng_key key = key_of(cont, k, akey);

		if (kind_of(k) != K_ARR) {
			uint32_t len = 0;
			int rc = eng_sv_fetch(t, &key, LODE_EPOCH_MAX, buf, 1 << 16, &len, NULL, NULL);

			/*
			 * Nothing is fine if no acknowledged update is newer than
			 * a punch that was queued (acknowledged or not).
			 */
			if (rc == -ENOENT && s->acked[k][0] < s->punch_issued[k])
				continue;
			if (rc == -ENOENT && !s->acked[k][0])
				continue;
			if (rc != 0)
				fail_msg("round %u (seed %" PRIu64 "): key %u acknowledged @%" PRIu64
					 " (punched @%" PRIu64 "): fetch %d (%s)",
					 round, seed, k, s->acked[k][0], s->punched[k], rc,
					 lode_strerror(rc));
			lode_epoch_t e = value_check(buf, len, k, 0, why, sizeof(why));
			if (!e)
				fail_msg("round %u (seed %" PRIu64 "): key %u: %s", round, seed, k,
					 why);
			if (e < s->acked[k][0])
				fail_msg("round %u (seed %" PRIu64 "): key %u reads the version @%" PRIu64
					 ", older than the acknowledged @%" PRIu64,
					 round, seed, k, e, s->acked[k][0]);
			if (e <= s->punched[k])
				fail_msg("round %u (seed %" PRIu64 "): key %u reads the version @%" PRIu64
					 ", hidden by the acknowledged punch @%" PRIu64,
					 round, seed, k, e, s->punched[k]);
			continue;
		}
		uint32_t ss = slot_size(k);
		bool any = false;

		for (unsigned sl = 0; sl < nslots(k); sl++)
			any |= s->acked[k][sl] != 0;
		for (unsigned sl = 0; sl < nslots(k); sl++) {
			int rc = eng_arr_fetch(t, &key, LODE_EPOCH_MAX, (uint64_t)sl * ss, buf, ss,
					       NULL, NULL);

			if (rc == -ENOENT && !any)
				break;
			if (rc != 0)
				fail_msg("round %u (seed %" PRIu64 "): array key %u slot %u "
					 "acknowledged @%" PRIu64 ": fetch %d (%s)",
					 round, seed, k, sl, s->acked[k][sl], rc, lode_strerror(rc));
			if (tu_zero_check(buf, ss) < 0) {
				if (s->acked[k][sl])
					fail_msg("round %u (seed %" PRIu64 "): array key %u slot %u "
						 "acknowledged @%" PRIu64 " reads as zeros",
						 round, seed, k, sl, s->acked[k][sl]);
				continue;
			}
			lode_epoch_t e = value_check(buf, ss, k, sl, why, sizeof(why));
			if (!e)
				fail_msg("round %u (seed %" PRIu64 "): array key %u slot %u: %s", round,
					 seed, k, sl, why);
			if (e < s->acked[k][sl])
				fail_msg("round %u (seed %" PRIu64 "): array key %u slot %u reads "
					 "@%" PRIu64 ", older than the acknowledged @%" PRIu64,
					 round, seed, k, sl, e, s->acked[k][sl]);
		}
	}
	free(buf);
}

/*
 * Read what the child sent into buf (have bytes already there) and take the
 * complete messages; a partial one stays for the next call. False at the
 * end of the pipe.
 */
static bool pipe_take(int fd, uint8_t *buf, size_t cap, size_t *have, struct state *s, bool *ready,
		      unsigned round)
{
	ssize_t n = read(fd, buf + *have, cap - *have);
	size_t used;

	if (n == 0)
		return false;
	if (n < 0) {
		assert_int_equal(errno, EINTR);
		return true;
	}
	*have += (size_t)n;
	used = take_msgs(s, buf, *have, ready, round);
	memmove(buf, buf + used, *have - used);
	*have -= used;
	return true;
}

/* The child of the round in progress, killed by the teardown if a check fails. */
static pid_t live_child;

/* One round: fork, let the child write, kill it, collect what it acknowledged. */
static void crash_round(const struct eng_tgt_opts *opts, const struct lode_uuid *cont,
			struct state *s, unsigned round, struct tu_rng *rng, uint64_t seed)
{
	int p[2];
	uint8_t buf[1 << 16];
	size_t have = 0;
	bool ready = false, in_open = tu_rand_below(rng, 10) == 0;
	double delay = in_open ? (double)tu_rand_range(rng, 0, 30)
			       : (double)tu_rand_range(rng, 3, 200);
	uint64_t child_seed = tu_rand(rng);
	unsigned child_ops = (unsigned)tu_rand_range(rng, 200, CHILD_OPS_MAX);
	double start, deadline = 0;
	int status;
	pid_t pid;

	assert_int_equal(pipe(p), 0);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		child_main(opts, cont, p[1], round, child_seed, child_ops);
		_exit(5);
	}
	live_child = pid;
	close(p[1]);
	start = now_ms();
	if (in_open)
		deadline = start + delay;
	for (;;) {
		double now = now_ms();

		if (!deadline && ready)
			deadline = now + delay;
		if (deadline && now >= deadline)
			break;
		if (now - start > 60000)
			fail_msg("round %u: the child never became ready", round);
		struct pollfd pfd = {.fd = p[0], .events = POLLIN};
		int wait = deadline ? (int)(deadline - now) + 1 : 100;
		if (poll(&pfd, 1, wait) <= 0)
			continue;
		if (!pipe_take(p[0], buf, sizeof(buf), &have, s, &ready, round))
			break; /* the child exited by itself: an error message follows */
	}
	if (!ready)
		s->kills_in_open++;
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	live_child = 0;
	/* what the child wrote before it died */
	while (pipe_take(p[0], buf, sizeof(buf), &have, s, &ready, round))
		;
	close(p[0]);
	if (!WIFSIGNALED(status))
		fail_msg("round %u (seed %" PRIu64 "): the child exited with %d instead of being "
			 "killed",
			 round, seed, WEXITSTATUS(status));
}

static void test_crash_recovery(void **state)
{
	enum eng_mode mode = *(enum eng_mode *)*state;
	uint64_t seed = tu_seed_from_env(mode == ENG_MODE_DISK ? 0xc2a54 : 0x2a3);
	unsigned rounds = (unsigned)tu_env_u64("LODE_CRASH_ROUNDS", mode == ENG_MODE_DISK ? 60 : 25);
	char *dir = tu_tmpdir(mode, "crash");
	char *path = tu_path_join(dir, "tgt");
	struct eng_tgt_opts opts = {.path = path, .mode = mode, .wal_size = 1u << 20};
	struct lode_uuid cont = tu_uuid(1);
	struct state *s = calloc(1, sizeof(*s));
	struct eng_target *t;
	struct tu_rng rng;
	double t0 = now_ms();
	int rc;

	assert_non_null(s);
	tu_rng_seed(&rng, seed);
	print_message("crash: %s mode, seed %" PRIu64 ", %u rounds (LODE_TEST_SEED, "
		      "LODE_CRASH_ROUNDS)\n",
		      tu_mode_name(mode), seed, rounds);
	assert_int_equal(eng_tgt_open(&opts, &t), 0);
	assert_int_equal(eng_cont_create(t, &cont), 0);
	assert_int_equal(eng_tgt_close(t), 0);

	for (unsigned round = 0; round < rounds; round++) {
		crash_round(&opts, &cont, s, round, &rng, seed);
		rc = eng_tgt_open(&opts, &t);
		if (rc != 0)
			fail_msg("round %u (seed %" PRIu64 "): recovery failed: %d (%s)", round, seed,
				 rc, lode_strerror(rc));
		verify(t, &cont, s, round, seed);
		if (round % 8 == 7)
			assert_int_equal(eng_aggregate(t, &cont, LODE_EPOCH_MAX), 0);
		assert_int_equal(eng_tgt_close(t), 0);
	}
	/* a clean close and open at the end */
	assert_int_equal(eng_tgt_open(&opts, &t), 0);
	verify(t, &cont, s, rounds, seed);
	assert_int_equal(eng_tgt_close(t), 0);
	assert_int_equal(eng_tgt_open(&opts, &t), 0);
	verify(t, &cont, s, rounds + 1, seed);
	assert_int_equal(eng_tgt_close(t), 0);
	print_message("crash: %lu acknowledged updates, %lu checkpoints, %lu kills during open, "
		      "%lu children finished first, %.1f s\n",
		      s->acks, s->checkpoints, s->kills_in_open, s->done_before_kill,
		      (now_ms() - t0) / 1000);
	assert_true(s->acks > 0);
	tu_rmtree(dir);
	free(path);
	free(dir);
	free(s);
}

static int kill_child(void **state)
{
	(void)state;
	if (live_child > 0) {
		kill(live_child, SIGKILL);
		waitpid(live_child, NULL, 0);
		live_child = 0;
	}
	return 0;
}

int main(void)
{
	/*
	 * Disk mode is the one that must survive power loss; RAM mode promises
	 * only that a killed process loses nothing, which is what is tested.
	 */
	const struct CMUnitTest tests[] = {
		{"test_crash_recovery/disk", test_crash_recovery, NULL, kill_child, &tu_mode_disk},
		{"test_crash_recovery/ram", test_crash_recovery, NULL, kill_child, &tu_mode_ram},
	};

	tu_main_init();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
