/*
 * Becoming a daemon the way Lode's daemons do (lode-fuse, lode-agent): the
 * parent stays until the child says whether it started, so that the exit
 * status of the command that started it means "serving" or "not serving",
 * and scripts never poll for a socket or a mount.
 */
#ifndef LODE_COMMON_DAEMON_H
#define LODE_COMMON_DAEMON_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Fork. The child (in a new session) gets the writing end of a pipe, for
 * daemon_ready(). The parent never returns: it exits with the code the
 * child reports, or, when the child died first, says so on stderr as
 * "PROG: the daemon died (signal N) before WHAT" and exits 1. When the pipe
 * or the fork fails, nothing is forked and -errno is returned.
 */
int daemon_fork(const char *prog, const char *what);

/* Report code (0: serving) to the waiting parent, if any; *fd becomes -1. */
void daemon_ready(int *fd, int code);

/*
 * stderr to logfd when it is >= 0 (which is then closed); when detaching,
 * also stdin and stdout to /dev/null (stderr too without a log) and the
 * working directory to /.
 */
void daemon_stdio(int logfd, bool detach);

/*
 * Write this process's pid to *path. A relative *path is made absolute in
 * abs (cap bytes) and *path points there, so that it can be removed after
 * chdir("/"). Errors: -errno, with "pidfile PATH: reason" in msg.
 */
int daemon_pidfile(const char **path, char *abs, size_t cap, char *msg, size_t msg_cap);

#endif
