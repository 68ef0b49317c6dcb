/* Becoming a daemon: see daemon.h. */
#include "common/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int daemon_fork(const char *prog, const char *what)
{
	int p[2], status = 0;
	unsigned char code;
	pid_t pid;
	ssize_t n;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	fflush(NULL);
	if ((pid = fork()) < 0) {
		int e = errno;

		close(p[0]);
		close(p[1]);
		return -e;
	}
	if (pid == 0) {
		close(p[0]);
		setsid();
		return p[1];
	}
	close(p[1]);
	do
		n = read(p[0], &code, 1);
	while (n < 0 && errno == EINTR);
	if (n == 1)
		_exit(code);
	/* No verdict: it died before giving one; say how. */
	waitpid(pid, &status, 0);
	if (WIFSIGNALED(status))
		fprintf(stderr, "%s: the daemon died (signal %d) before %s\n", prog, WTERMSIG(status),
			what);
	else
		fprintf(stderr, "%s: the daemon exited before %s\n", prog, what);
	_exit(1);
}

void daemon_ready(int *fd, int code)
{
	unsigned char c = (unsigned char)code;

	if (*fd < 0)
		return;
	if (write(*fd, &c, 1) != 1) {
		/* the parent is gone; nobody is waiting */
	}
	close(*fd);
	*fd = -1;
}

void daemon_stdio(int logfd, bool detach)
{
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (detach) {
		if (chdir("/") != 0) {
			/* only to release the caller's directory; harmless if it fails */
		}
		if (null >= 0) {
			dup2(null, STDIN_FILENO);
			dup2(null, STDOUT_FILENO);
		}
	}
	if (logfd >= 0)
		dup2(logfd, STDERR_FILENO);
	else if (detach && null >= 0)
		dup2(null, STDERR_FILENO);
	if (null > STDERR_FILENO)
		close(null);
	if (logfd > STDERR_FILENO)
		close(logfd);
}

int daemon_pidfile(const char **path, char *abs, size_t cap, char *msg, size_t msg_cap)
{
	FILE *f;
	int e;

	if ((*path)[0] != '/') {
		char cwd[PATH_MAX];

		if (!getcwd(cwd, sizeof(cwd)) ||
		    (size_t)snprintf(abs, cap, "%s/%s", cwd, *path) >= cap) {
			snprintf(msg, msg_cap, "pidfile %s: %s", *path, strerror(ENAMETOOLONG));
			return -ENAMETOOLONG;
		}
		*path = abs;
	}
	if (!(f = fopen(*path, "w"))) {
		e = errno;
		snprintf(msg, msg_cap, "pidfile %s: %s", *path, strerror(e));
		return -e;
	}
	fprintf(f, "%ld\n", (long)getpid());
	if (fclose(f) != 0) {
		e = errno;
		snprintf(msg, msg_cap, "pidfile %s: %s", *path, strerror(e));
		unlink(*path);
		return -e;
	}
	return 0;
}
