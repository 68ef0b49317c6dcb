/*
 * The integration-test harness (see harness.h): starts, stops, kills and
 * restarts a real loded for a test, on a port of its own and in a scratch
 * directory of its own, so that tests can run side by side and leave
 * nothing behind.
 */
#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef LODE_LODED_PATH
#error "LODE_LODED_PATH (the loded binary) must be defined by the build"
#endif

#define START_TIMEOUT_MS 15000
#define STOP_TIMEOUT_MS 30000
#define PORT_LO 20000
#define PORT_HI 60000
#define PORT_TRIES 64
#define START_TRIES 3 /* another process may take the port between probe and bind */
#define LIVE_MAX 64

/*
 * Every server started and not yet cleaned up, by copy: a failed cmocka
 * assertion jumps past the test's own hs_cleanup and may abandon the
 * hs_server itself (a stack variable), yet its process and directories
 * must still go. The exit handler does that; an hs_start on the address of
 * an abandoned hs_server does it for that one first.
 */
static struct live {
	const struct hs_server *s;
	pid_t pid;
	bool own_data;
	char dir[PATH_MAX];
	char data[PATH_MAX];
} live[LIVE_MAX];
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t live_once = PTHREAD_ONCE_INIT;

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

/*
 * A port nothing is bound to now. The probe binds without SO_REUSEADDR, so
 * a port with connections in TIME_WAIT counts as taken too; loded itself
 * binds with SO_REUSEADDR, so hs_restart can take the same port back.
 */
static int port_pick(unsigned *port_out)
{
	static uint64_t seed;

	if (!seed)
		seed = ((uint64_t)getpid() << 32) ^ now_ms() ^ (uint64_t)(uintptr_t)&seed;
	for (int i = 0; i < PORT_TRIES; i++) {
		struct sockaddr_in sa = {.sin_family = AF_INET};
		unsigned port;
		int fd, rc;

		/* xorshift64: rand() would share its state with the test. */
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
		port = PORT_LO + (unsigned)(seed % (PORT_HI - PORT_LO));
		sa.sin_port = htons((uint16_t)port);
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
			return -errno;
		rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
		close(fd);
		if (rc == 0) {
			*port_out = port;
			return 0;
		}
	}
	return -EADDRINUSE;
}

/* mkdir -p for the scratch base; only the last two levels can be missing in practice. */
static int mkdir_p(const char *path)
{
	char buf[PATH_MAX];
	size_t n = strlen(path);

	if (n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static int make_tmpdir(const char *base, char *out, size_t outlen)
{
	int rc;

	if ((rc = mkdir_p(base)) < 0)
		return rc;
	if ((size_t)snprintf(out, outlen, "%s/lode-hs-XXXXXX", base) >= outlen)
		return -ENAMETOOLONG;
	if (!mkdtemp(out)) {
		rc = -errno;
		out[0] = '\0';
		return rc;
	}
	return 0;
}

/* dir/name into out; -ENAMETOOLONG rather than a cut path. */
static int path_join(char *out, size_t outlen, const char *dir, const char *name)
{
	if ((size_t)snprintf(out, outlen, "%s/%s", dir, name) >= outlen)
		return -ENAMETOOLONG;
	return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

static void rm_rf(const char *path)
{
	if (path[0])
		nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static bool keep_files(void)
{
	const char *keep = getenv("LODE_TEST_KEEP");

	return keep && keep[0];
}

/* Kill and reap what an entry names and remove its directories; the lock is held. */
static void live_drop(struct live *l)
{
	if (l->pid > 0) {
		kill(l->pid, SIGKILL);
		while (waitpid(l->pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	if (!keep_files()) {
		if (l->own_data)
			rm_rf(l->data);
		rm_rf(l->dir);
	}
	memset(l, 0, sizeof(*l));
}

static void live_atexit(void)
{
	pthread_mutex_lock(&live_lock);
	for (int i = 0; i < LIVE_MAX; i++)
		if (live[i].s)
			live_drop(&live[i]);
	pthread_mutex_unlock(&live_lock);
}

static void live_init(void)
{
	atexit(live_atexit);
}

/* The entry of s, or (add) a free one claimed for it; NULL if none. The lock is held. */
static struct live *live_find(const struct hs_server *s, bool add)
{
	struct live *free_slot = NULL;

	for (int i = 0; i < LIVE_MAX; i++) {
		if (live[i].s == s)
			return &live[i];
		if (!live[i].s && !free_slot)
			free_slot = &live[i];
	}
	if (add && free_slot)
		free_slot->s = s;
	return add ? free_slot : NULL;
}

/* Record s's directories (start) or pid (spawn, reap). */
static void live_update(const struct hs_server *s)
{
	struct live *l;

	pthread_mutex_lock(&live_lock);
	if ((l = live_find(s, true))) {
		l->pid = s->pid;
		l->own_data = s->own_data;
		memcpy(l->dir, s->dir, sizeof(l->dir));
		memcpy(l->data, s->data, sizeof(l->data));
	}
	pthread_mutex_unlock(&live_lock);
}

/*
 * Forget s. With drop, also end what the entry still names: an hs_server
 * abandoned at this address by a failed test.
 */
static void live_forget(const struct hs_server *s, bool drop)
{
	struct live *l;

	pthread_mutex_lock(&live_lock);
	if ((l = live_find(s, false))) {
		if (drop)
			live_drop(l);
		else
			memset(l, 0, sizeof(*l));
	}
	pthread_mutex_unlock(&live_lock);
}

/* A wait status as hs_stop reports it. */
static int status_decode(int st)
{
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return -ECHILD;
}

/* Reap the child if it has exited; true if it did (or was already gone). */
static bool reap(struct hs_server *s, bool block)
{
	int st;
	pid_t p;

	if (!s->pid)
		return true;
	do
		p = waitpid(s->pid, &st, block ? 0 : WNOHANG);
	while (p < 0 && errno == EINTR);
	if (p == 0)
		return false;
	s->last_status = p == s->pid ? status_decode(st) : -ECHILD;
	s->pid = 0;
	live_update(s);
	return true;
}

/*
 * In the child between fork and exec: only async-signal-safe calls. The
 * parent-death signal is set before checking the parent, so a parent that
 * died in between is noticed either way.
 */
static void __attribute__((noreturn)) child_exec(const struct hs_server *s, char **argv,
						 pid_t parent)
{
	sigset_t none;
	int fd;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	/* cmocka and the test may block signals; loded must see SIGTERM. */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	if ((fd = open("/dev/null", O_RDONLY)) >= 0) {
		dup2(fd, 0);
		close(fd);
	}
	if ((fd = open(s->log, O_WRONLY | O_CREAT | O_APPEND, 0644)) >= 0) {
		dup2(fd, 1);
		dup2(fd, 2);
		close(fd);
	}
	/* The test's own sockets and files must not stay open in the server. */
	closefrom(3);
	execv(argv[0], argv);
	_exit(127);
}

/* Fork and exec loded with the server's settings. */
static int spawn(struct hs_server *s, const char *addrfile)
{
	char listen[48], targets[16];
	char *argv[16 + HS_EXTRA_MAX];
	unsigned n = 0;
	pid_t pid, parent = getpid();

	snprintf(listen, sizeof(listen), "%s", s->addr);
	snprintf(targets, sizeof(targets), "%u", s->targets);
	argv[n++] = (char *)LODE_LODED_PATH;
	argv[n++] = (char *)"--listen";
	argv[n++] = listen;
	argv[n++] = (char *)"--targets";
	argv[n++] = targets;
	argv[n++] = (char *)"--path";
	argv[n++] = s->data;
	argv[n++] = (char *)"--transport";
	argv[n++] = s->transport;
	argv[n++] = (char *)"--addrfile";
	argv[n++] = (char *)addrfile;
	argv[n++] = (char *)"--admin-cred";
	argv[n++] = s->cred;
	if (s->ram)
		argv[n++] = (char *)"--ram";
	for (unsigned i = 0; s->extra[i]; i++)
		argv[n++] = s->extra[i];
	argv[n] = NULL;

	/* Whatever the test buffered must not be written twice. */
	fflush(NULL);
	if ((pid = fork()) < 0)
		return -errno;
	if (pid == 0)
		child_exec(s, argv, parent);
	s->pid = pid;
	live_update(s);
	return 0;
}

/*
 * Start loded on s->port and wait until a client gets through. A connect
 * that succeeds proves more than a listening socket: the targets answered
 * a ping each.
 */
static int launch(struct hs_server *s)
{
	struct lode_conn_opts co = {0};
	char addrfile[PATH_MAX];
	uint64_t deadline;
	lode_conn_t *c;
	int rc;

	snprintf(s->addr, sizeof(s->addr), "127.0.0.1:%u", s->port);
	if ((rc = path_join(addrfile, sizeof(addrfile), s->dir, "addr")) < 0)
		return rc;
	unlink(addrfile);
	if ((rc = spawn(s, addrfile)) < 0)
		return rc;
	/* The server may offer only the transport it was told; "auto" picks from those. */
	co.transport = strcmp(s->transport, "auto") == 0 ? NULL : s->transport;
	co.timeout_ms = 2000;
	deadline = now_ms() + s->start_timeout_ms;
	for (;;) {
		if (reap(s, false))
			return -ECHILD;
		/* Connect only once loded says it serves: before that, only refusals. */
		if (access(addrfile, F_OK) == 0) {
			rc = lode_connect(s->addr, &co, &c);
			if (rc == 0) {
				lode_disconnect(c);
				return 0;
			}
		}
		if (now_ms() >= deadline)
			break;
		sleep_ms(20);
	}
	fprintf(stderr, "harness: loded on %s did not answer within %u ms (last connect: %s)\n",
		s->addr, s->start_timeout_ms, rc < 0 ? lode_strerror(rc) : "not tried");
	hs_kill(s);
	return -ETIMEDOUT;
}

int hs_start(struct hs_server *s, const struct hs_opts *o)
{
	const char *base = getenv("LODE_TEST_TMP");
	unsigned n = 0;
	int rc;

	if (!s || !o)
		return -EFAULT;
	pthread_once(&live_once, live_init);
	live_forget(s, true);
	memset(s, 0, sizeof(*s));
	/* The tests talk over loopback; UCX would otherwise try every interface. */
	setenv("UCX_NET_DEVICES", "lo", 0);
	if (!base || !base[0])
		base = "/tmp";
	if ((rc = make_tmpdir(base, s->dir, sizeof(s->dir))) < 0)
		return rc;
	live_update(s);
	if ((rc = path_join(s->log, sizeof(s->log), s->dir, "loded.log")) < 0)
		return rc;
	/* Every client of this process presents the admin's credentials, which
	 * the server writes on its first start. */
	if ((rc = path_join(s->cred, sizeof(s->cred), s->dir, "admin.credentials")) < 0)
		return rc;
	setenv("LODE_CREDENTIALS", s->cred, 1);
	snprintf(s->transport, sizeof(s->transport), "%s", o->transport ? o->transport : "auto");
	s->targets = o->targets ? o->targets : 1;
	s->ram = o->ram;
	s->start_timeout_ms = o->start_timeout_ms ? o->start_timeout_ms : START_TIMEOUT_MS;
	for (; o->extra_args && o->extra_args[n]; n++) {
		if (n == HS_EXTRA_MAX)
			return -E2BIG;
		if (!(s->extra[n] = strdup(o->extra_args[n])))
			return -ENOMEM;
	}
	if (o->path) {
		if ((size_t)snprintf(s->data, sizeof(s->data), "%s", o->path) >= sizeof(s->data))
			return -ENAMETOOLONG;
	} else if (o->ram && access("/dev/shm", W_OK) == 0) {
		/* RAM mode wants tmpfs; the scratch base is usually a disk. */
		if ((rc = make_tmpdir("/dev/shm", s->data, sizeof(s->data))) < 0)
			return rc;
		s->own_data = true;
	} else {
		if ((rc = path_join(s->data, sizeof(s->data), s->dir, "data")) < 0)
			return rc;
		s->own_data = true;
	}
	live_update(s);
	for (int i = 0; i < START_TRIES; i++) {
		if ((rc = port_pick(&s->port)) < 0)
			return rc;
		rc = launch(s);
		if (rc != -ECHILD)
			break;
		/* Most likely lost the port to someone else; a real failure repeats. */
	}
	if (rc < 0) {
		fprintf(stderr, "harness: cannot start loded (%s)\n", lode_strerror(rc));
		hs_dump_log(s, 4096);
	}
	return rc;
}

int hs_restart(struct hs_server *s)
{
	int rc;

	if (!s)
		return -EFAULT;
	if (hs_running(s))
		return -EBUSY;
	if ((rc = launch(s)) < 0) {
		fprintf(stderr, "harness: cannot restart loded (%s)\n", lode_strerror(rc));
		hs_dump_log(s, 4096);
	}
	return rc;
}

const char *hs_addr(const struct hs_server *s)
{
	return s->addr;
}

int hs_stop(struct hs_server *s)
{
	uint64_t deadline;

	if (!s)
		return -EFAULT;
	if (reap(s, false))
		return -ECHILD;
	kill(s->pid, SIGTERM);
	deadline = now_ms() + STOP_TIMEOUT_MS;
	while (!reap(s, false)) {
		if (now_ms() >= deadline) {
			fprintf(stderr, "harness: loded %d ignored SIGTERM for %d ms; killing it\n",
				(int)s->pid, STOP_TIMEOUT_MS);
			hs_kill(s);
			return -ETIMEDOUT;
		}
		sleep_ms(10);
	}
	return s->last_status;
}

int hs_kill(struct hs_server *s)
{
	if (!s)
		return -EFAULT;
	if (reap(s, false))
		return -ECHILD;
	kill(s->pid, SIGKILL);
	reap(s, true);
	return 0;
}

bool hs_running(struct hs_server *s)
{
	return s && !reap(s, false);
}

void hs_cleanup(struct hs_server *s)
{
	if (!s)
		return;
	if (s->pid)
		hs_kill(s);
	live_forget(s, false);
	if (keep_files()) {
		if (s->dir[0])
			fprintf(stderr, "harness: kept %s and %s\n", s->dir, s->data);
	} else {
		if (s->own_data)
			rm_rf(s->data);
		rm_rf(s->dir);
	}
	for (unsigned i = 0; i < HS_EXTRA_MAX && s->extra[i]; i++) {
		free(s->extra[i]);
		s->extra[i] = NULL;
	}
	s->dir[0] = s->data[0] = '\0';
	s->own_data = false;
}

int hs_connect(const struct hs_server *s, const char *transport, unsigned timeout_ms,
	       lode_conn_t **conn_out)
{
	struct lode_conn_opts co = {.transport = transport, .timeout_ms = timeout_ms};

	if (!s || !conn_out)
		return -EFAULT;
	return lode_connect(s->addr, &co, conn_out);
}

void hs_dump_log(const struct hs_server *s, size_t max_bytes)
{
	char buf[1024];
	off_t size;
	ssize_t n;
	int fd;

	if (!s || !s->log[0] || (fd = open(s->log, O_RDONLY | O_CLOEXEC)) < 0)
		return;
	size = lseek(fd, 0, SEEK_END);
	if (size > (off_t)max_bytes)
		lseek(fd, size - (off_t)max_bytes, SEEK_SET);
	else
		lseek(fd, 0, SEEK_SET);
	fprintf(stderr, "---- %s ----\n", s->log);
	fflush(stderr);
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		fwrite(buf, 1, (size_t)n, stderr);
	fprintf(stderr, "---- end of log ----\n");
	close(fd);
}
