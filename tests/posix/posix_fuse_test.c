/*
 * The POSIX behaviour suite (suite.c) against a FUSE mount: a real loded
 * started by the harness, a container made with lode_cont_create(), the
 * lode-fuse this build made (LODE_FUSE_PATH) mounting it with
 * -o allow_other,default_permissions in a scratch directory, and the
 * cases run through plain system calls (backend_sys.c) — so the kernel,
 * the daemon and liblodefs are tested together, as programs use them.
 *
 * A mount must never outlive the test, however the test ends:
 *   - the orderly path unmounts with fusermount3 -u before stopping loded;
 *   - an exit() anywhere (a failed start, a cmocka abort) unmounts from
 *     an atexit handler;
 *   - for a SIGKILL or a crash, a guard process (started before the
 *     mount, in a session of its own so that a signal to the test's
 *     process group spares it) waits on a pipe whose only writer is this
 *     process: end of file without the "done" byte means the test died,
 *     and the guard lazily unmounts (fusermount3 -u -z) and removes the
 *     scratch directory. lode-fuse exits once its mount is gone.
 *
 * With $PX_FILL=lib the large-directory case makes its entries through
 * liblodefs (a mount of the same container in this process) and lists them
 * through both: 100,000 creates through the kernel take minutes under ASan,
 * and it is the listing that the case is there for.
 *
 * Without a usable /dev/fuse the test exits 77, which CMake counts as skipped.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "lode/lodefs.h"
#include "suite.h"

#ifndef LODE_FUSE_PATH
#error "LODE_FUSE_PATH (the lode-fuse binary) must be defined by the build"
#endif

#define NTARGETS 3
#define CONTAINER "px-fuse"
#define MOUNT_TIMEOUT_MS 30000
#define PROBE_UID 1000 /* the permission cases' user: it must reach the mount point */

static char scratch[PATH_MAX - 64]; /* room for "/lode-fuse.log" after it */
static char mnt[PATH_MAX];
static char fuse_log[PATH_MAX];
static char fuse_pid[PATH_MAX];
static bool mounted;
static int guard_fd = -1; /* the guard's pipe, write end */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Run argv (a program found on $PATH) with stdout/stderr to /dev/null; its exit code or -1. */
static int run_quiet(char *const argv[])
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		return -1;
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		if (null >= 0) {
			dup2(null, 1);
			dup2(null, 2);
		}
		execvp(argv[0], argv);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Whether path is a mount point of a FUSE file system, from /proc/self/mountinfo. */
static bool is_fuse_mount(const char *path)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	char line[4096 + PATH_MAX];
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		char point[PATH_MAX], *sep, type[64];

		/* id parent maj:min root point options ... - type source superoptions */
		if (sscanf(line, "%*s %*s %*s %*s %4095s", point) != 1 || strcmp(point, path) != 0)
			continue;
		if ((sep = strstr(line, " - ")) && sscanf(sep + 3, "%63s", type) == 1)
			found = strncmp(type, "fuse", 4) == 0;
	}
	fclose(f);
	return found;
}

/* fusermount3 -u, retried while busy (the kernel may still hold a file), then -u -z. */
static int unmount_fuse(void)
{
	char *argv[] = {"fusermount3", "-u", mnt, NULL};
	char *lazy[] = {"fusermount3", "-u", "-z", mnt, NULL};

	if (!mounted)
		return 0;
	for (int i = 0; i < 20; i++) {
		if (run_quiet(argv) == 0 || !is_fuse_mount(mnt)) {
			mounted = false;
			return 0;
		}
		sleep_ms(250);
	}
	fprintf(stderr, "posix_fuse_test: %s stays busy: unmounting lazily\n", mnt);
	run_quiet(lazy);
	mounted = is_fuse_mount(mnt);
	return -EBUSY;
}

/* The daemon's pid from its pidfile, or 0. */
static pid_t daemon_pid(void)
{
	FILE *f = fopen(fuse_pid, "r");
	long pid = 0;

	if (f) {
		if (fscanf(f, "%ld", &pid) != 1)
			pid = 0;
		fclose(f);
	}
	return (pid_t)pid;
}

/* After the unmount the daemon must go by itself (it is not our child: poll). */
/* Whether pid has exited: gone, or a zombie waiting for its reaper (pid 1,
 * which can take seconds here to reap an orphaned daemon). */
static bool pid_exited(pid_t pid)
{
	char path[64], buf[256], *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (!(f = fopen(path, "r")))
		return true;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	/* "pid (comm) S ...": the state follows the last ')' */
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] == 'Z';
}

/*
 * 30 s: after the 100k-entry run, lode-fuse frees that many cached inodes
 * and closes its connections under ASan, and in the full suite on two cores
 * (another 100k-entry test beside it) that once took more than 10 s. A hang
 * still shows.
 */
#define GONE_WAIT_S 30

static int daemon_wait_gone(pid_t pid)
{
	for (int i = 0; pid > 0 && i < GONE_WAIT_S * 20; i++) {
		if (pid_exited(pid))
			return 0;
		sleep_ms(50);
	}
	return pid > 0 ? -ETIMEDOUT : 0;
}

/* The guard says nothing when the test finished: tell it so, then let it go. */
static void guard_release(void)
{
	if (guard_fd >= 0) {
		if (write(guard_fd, "d", 1) != 1)
			perror("posix_fuse_test: guard");
		close(guard_fd);
		guard_fd = -1;
	}
}

static void at_exit_unmount(void)
{
	unmount_fuse();
	if (!mounted)
		guard_release();
	if (scratch[0] && !mounted) {
		rmdir(mnt);
		unlink(fuse_log);
		unlink(fuse_pid);
		rmdir(scratch);
	}
}

/*
 * Start the guard process: it blocks reading the pipe and, on end of file
 * with no "done" byte, unmounts lazily. Only async-signal-safe calls after
 * fork: this process has threads.
 */
static int guard_start(void)
{
	char *lazy[] = {"fusermount3", "-u", "-z", mnt, NULL};
	int p[2];
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	if ((pid = fork()) < 0)
		return -errno;
	if (pid == 0) {
		char c;
		ssize_t n;

		setsid();
		close(p[1]);
		if (fork() != 0) /* the test does not wait for its guard: no zombie either way */
			_exit(0);
		while ((n = read(p[0], &c, 1)) < 0 && errno == EINTR)
			;
		if (n == 0) {
			pid_t u = fork();

			if (u == 0) {
				execvp(lazy[0], lazy);
				_exit(127);
			}
			if (u > 0)
				waitpid(u, NULL, 0);
			/* What the exit handler would have removed (rmdir fails on a live mount). */
			if (rmdir(mnt) == 0) {
				unlink(fuse_log);
				unlink(fuse_pid);
				rmdir(scratch);
			}
		}
		_exit(0);
	}
	close(p[0]);
	waitpid(pid, NULL, 0);
	guard_fd = p[1];
	return 0;
}

/* Whether the daemon's log holds a sanitizer's report (an ASan build's daemon writes them there). */
static bool fuse_log_has_report(void)
{
	char line[1024];
	FILE *f = fopen(fuse_log, "r");
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, "Sanitizer") || strstr(line, "runtime error:");
	fclose(f);
	return found;
}

static void dump_fuse_log(void)
{
	char buf[4096];
	FILE *f = fopen(fuse_log, "r");
	size_t n;

	if (!f)
		return;
	fprintf(stderr, "---- %s ----\n", fuse_log);
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		fwrite(buf, 1, n, stderr);
	fprintf(stderr, "---- end ----\n");
	fclose(f);
}

/* lode-fuse --addr A --log L --pidfile P -o allow_other,default_permissions CONTAINER MNT; it daemonizes once mounted. */
static int mount_fuse(const struct hs_server *srv)
{
	char addr[64];
	char *argv[] = {LODE_FUSE_PATH, "--addr", addr, "--log", fuse_log, "--pidfile", fuse_pid,
			"-o", "allow_other,default_permissions", CONTAINER, mnt, NULL};
	double deadline = now_s() + MOUNT_TIMEOUT_MS / 1000.0;
	pid_t pid;
	int status;

	snprintf(addr, sizeof(addr), "%s", hs_addr(srv));
	if ((pid = fork()) < 0)
		return -errno;
	if (pid == 0) {
		int log = open(fuse_log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		if (log >= 0) {
			dup2(log, 1);
			dup2(log, 2);
		}
		execv(argv[0], argv);
		_exit(127);
	}
	for (;;) {
		pid_t w = waitpid(pid, &status, WNOHANG);

		if (w == pid)
			break;
		if (w < 0 && errno != EINTR)
			return -errno;
		if (now_s() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			fprintf(stderr, "posix_fuse_test: lode-fuse did not finish mounting in %d s\n",
				MOUNT_TIMEOUT_MS / 1000);
			dump_fuse_log();
			return -ETIMEDOUT;
		}
		sleep_ms(20);
	}
	/* Whatever it says, a mount may be there now: the exit handler must look. */
	mounted = true;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "posix_fuse_test: lode-fuse exited with status %#x\n", status);
		dump_fuse_log();
		return -ECHILD;
	}
	if (!is_fuse_mount(mnt)) {
		fprintf(stderr, "posix_fuse_test: lode-fuse exited 0 but %s is no FUSE mount\n", mnt);
		dump_fuse_log();
		return -ENOENT;
	}
	return 0;
}

int main(void)
{
	const char *base = getenv("LODE_TEST_TMP");
	struct hs_opts o = {.transport = "auto", .targets = NTARGETS, .ram = true};
	struct hs_server srv = {0};
	const char *fill = getenv("PX_FILL");
	lode_conn_t *conn = NULL;
	lodefs_t *fs = NULL;
	void *b = NULL, *lb = NULL;
	int failed = 0, rc;
	pid_t pid;
	double t0;

	if (access("/dev/fuse", R_OK | W_OK) < 0) {
		printf("posix_fuse_test: skipped: no usable /dev/fuse (%s)\n", strerror(errno));
		return 77;
	}
	umask(0); /* the kernel would mask the modes the cases ask for */
	if ((rc = hs_start(&srv, &o)) < 0) {
		fprintf(stderr, "posix_fuse_test: cannot start loded: %s\n", lode_strerror(rc));
		hs_cleanup(&srv);
		return 1;
	}
	if ((rc = hs_connect(&srv, NULL, 0, &conn)) < 0 ||
	    (rc = lode_cont_create(conn, CONTAINER, NULL)) < 0) {
		fprintf(stderr, "posix_fuse_test: container %s: %s\n", CONTAINER, lode_strerror(rc));
		hs_cleanup(&srv);
		return 1;
	}
	lode_disconnect(conn);

	/* The scratch directory: searchable by everyone, for the non-root cases. */
	snprintf(scratch, sizeof(scratch), "%s/lode-pxfuse-XXXXXX", base && base[0] ? base : "/tmp");
	if (base && base[0])
		mkdir(base, 0755);
	if (!mkdtemp(scratch) || chmod(scratch, 0755) < 0) {
		perror("posix_fuse_test: scratch directory");
		scratch[0] = '\0';
		hs_cleanup(&srv);
		return 1;
	}
	snprintf(mnt, sizeof(mnt), "%s/mnt", scratch);
	snprintf(fuse_log, sizeof(fuse_log), "%s/lode-fuse.log", scratch);
	snprintf(fuse_pid, sizeof(fuse_pid), "%s/lode-fuse.pid", scratch);
	if (mkdir(mnt, 0755) < 0) {
		perror("posix_fuse_test: mount point");
		hs_cleanup(&srv);
		return 1;
	}
	/* The exit handler runs before the harness's (registered earlier): unmount, then kill loded. */
	atexit(at_exit_unmount);
	if ((rc = guard_start()) < 0) {
		fprintf(stderr, "posix_fuse_test: guard: %s\n", strerror(-rc));
		return 1;
	}
	if ((rc = mount_fuse(&srv)) < 0)
		return 1;

	if ((rc = px_sys_create(mnt, &b)) < 0) {
		fprintf(stderr, "posix_fuse_test: backend: %s\n", strerror(-rc));
		return 1;
	}
	/* The non-root cases need the mount point reachable by their uid. */
	if ((rc = px_sys_ops.as_user(b, PROBE_UID, PROBE_UID)) < 0 ||
	    (rc = px_sys_ops.access(b, "/", X_OK)) < 0) {
		fprintf(stderr, "posix_fuse_test: uid %d cannot reach %s (%s): make its parent "
				"directories searchable\n",
			PROBE_UID, mnt, strerror(-rc));
		failed++;
	}
	px_sys_ops.as_user(b, 0, 0);
	if (fill && strcmp(fill, "lib") == 0) {
		if ((rc = lodefs_mount(hs_addr(&srv), CONTAINER, NULL, &fs)) < 0 ||
		    (rc = px_lib_create(fs, &lb)) < 0) {
			fprintf(stderr, "posix_fuse_test: liblodefs mount of %s: %s\n", CONTAINER,
				lode_strerror(rc));
			if (fs)
				lodefs_umount(fs);
			px_sys_destroy(b);
			return 1;
		}
		px_suite_fill("lib", &px_lib_ops, lb);
	}

	t0 = now_s();
	failed += px_suite_run("fuse", &px_sys_ops, b);
	px_sys_destroy(b);
	if (fs) {
		px_lib_destroy(lb);
		if ((rc = lodefs_umount(fs)) < 0) {
			fprintf(stderr, "posix_fuse_test: lodefs_umount: %s\n", lode_strerror(rc));
			failed++;
		}
	}
	printf("posix_fuse_test: fuse: %d case(s) failed, %.1f s\n", failed, now_s() - t0);

	pid = daemon_pid();
	if ((rc = unmount_fuse()) < 0) {
		fprintf(stderr, "posix_fuse_test: fusermount3 -u %s failed\n", mnt);
		failed++;
	} else if (daemon_wait_gone(pid) < 0) {
		fprintf(stderr, "posix_fuse_test: lode-fuse (pid %d) still runs %d s after the "
				"unmount\n", (int)pid, GONE_WAIT_S);
		failed++;
	}
	if (fuse_log_has_report()) {
		fprintf(stderr, "posix_fuse_test: lode-fuse's log has a sanitizer report\n");
		failed++;
	}
	if (failed)
		dump_fuse_log();
	if ((rc = hs_stop(&srv)) != 0) {
		fprintf(stderr, "posix_fuse_test: loded exited with %d\n", rc);
		hs_dump_log(&srv, 8192);
		failed++;
	}
	hs_cleanup(&srv);
	return failed ? 1 : 0;
}
