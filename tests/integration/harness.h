/*
 * The integration-test harness: runs a real loded from a test program.
 *
 * hs_start() picks a free port on 127.0.0.1, makes a scratch directory
 * (under $LODE_TEST_TMP, else /tmp) for the server's log and, unless the
 * caller names one, its data, then forks and execs the loded this build
 * made (LODE_LODED_PATH) and waits until a client can connect. The server's
 * stdout and stderr go to <scratch>/loded.log; a failed start prints that
 * log's tail to stderr so the test output says why.
 *
 * Lifetime: the server is killed when the test process dies (the child
 * asks for SIGKILL on its parent's death), and every exit of the child is
 * reaped by hs_stop/hs_kill/hs_running/hs_cleanup, so no zombies stay
 * behind. A server a test abandoned (a failed cmocka assertion jumps past
 * its hs_cleanup) is killed and its directories removed at exit(), or
 * when hs_start is called again on the same hs_server. The parent-death
 * signal follows the *thread* that forked, so call hs_start/hs_restart
 * from a thread that outlives the server (the main thread in a cmocka
 * test).
 *
 * hs_start sets UCX_NET_DEVICES=lo in the test's environment unless it is
 * set already: the tests talk over loopback only.
 *
 * Errors follow Lode's convention: 0 or a negative errno / -LODE_E* code.
 * None of these functions is thread-safe on one hs_server.
 */
#ifndef LODE_TESTS_HARNESS_H
#define LODE_TESTS_HARNESS_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#include "lode/lode.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HS_EXTRA_MAX 16 /* extra loded arguments kept for hs_restart */

struct hs_opts {
	const char *transport;         /* loded --transport; NULL: "auto" */
	unsigned targets;              /* loded --targets; 0: 1 */
	bool ram;                      /* --ram, data under /dev/shm */
	const char *path;              /* data directory; NULL: a fresh one (hs_cleanup removes it) */
	const char *const *extra_args; /* more loded arguments, NULL-terminated; may be NULL */
	unsigned start_timeout_ms;     /* how long hs_start waits for a connect; 0: 15000 */
};

/* One loded under test. Zero it (or let hs_start fill it); the fields are read-only. */
struct hs_server {
	pid_t pid;                  /* 0 when not running */
	unsigned port;
	char addr[32];              /* "127.0.0.1:<port>" */
	char dir[PATH_MAX];         /* scratch directory: log, address file */
	char data[PATH_MAX];        /* loded --path */
	char log[PATH_MAX];         /* loded's stdout and stderr, appended across restarts */
	char cred[PATH_MAX];        /* the admin's credentials (loded --admin-cred); clients use them */
	bool own_data;              /* data was made here and is removed by hs_cleanup */
	char transport[16];
	unsigned targets;
	bool ram;
	unsigned start_timeout_ms;
	char *extra[HS_EXTRA_MAX + 1];
	int last_status;            /* what the last exit decoded to, see hs_stop */
};

/*
 * Make the scratch directory, pick a port and start loded; returns once
 * lode_connect() to it succeeds. On failure nothing is left running, the
 * scratch directory stays for hs_cleanup (which is always safe to call).
 * Errors: -EADDRINUSE (no free port found), -ECHILD (loded exited during
 * start-up; its log was printed), -ETIMEDOUT, -E2BIG (too many extra
 * arguments), errors of mkdir/fork.
 */
int hs_start(struct hs_server *s, const struct hs_opts *o);

/*
 * Start the stopped server again with the same data, port and options.
 * Errors: as hs_start, -EBUSY (still running).
 */
int hs_restart(struct hs_server *s);

/* "127.0.0.1:<port>". */
const char *hs_addr(const struct hs_server *s);

/*
 * SIGTERM, then wait (up to 30 s) for the exit. Returns the exit code
 * (0..255) or 128 + the signal number that ended it; -ECHILD if it was not
 * running; -ETIMEDOUT if it ignored SIGTERM (it was then SIGKILLed and reaped).
 */
int hs_stop(struct hs_server *s);

/* SIGKILL and reap. Returns 0, or -ECHILD if it was not running. */
int hs_kill(struct hs_server *s);

/*
 * Whether loded is still running; reaps it (and keeps its status in
 * s->last_status) if it exited on its own.
 */
bool hs_running(struct hs_server *s);

/*
 * Kill the server if it runs and remove the scratch directory and the data
 * directory if hs_start made it ($LODE_TEST_KEEP set: keep both). Safe on a
 * zeroed or already cleaned-up hs_server.
 */
void hs_cleanup(struct hs_server *s);

/* lode_connect() to the server; transport NULL means "auto", timeout_ms 0 the default. */
int hs_connect(const struct hs_server *s, const char *transport, unsigned timeout_ms,
	       lode_conn_t **conn_out);

/* Print the last max_bytes of the server's log to stderr, framed. */
void hs_dump_log(const struct hs_server *s, size_t max_bytes);

#ifdef __cplusplus
}
#endif
#endif
