/*
 * lode-fuse: mount a Lode container's POSIX file system (liblodefs) through
 * the kernel's FUSE, so that every program can use it.
 *
 * How the parts fit: main() parses the command line into struct options
 * (our own -o options are taken out; the rest go to libfuse and the
 * kernel); unless -f, it forks at once and the parent waits on a pipe for
 * the child to say how the mount went, so the exit status of `lode-fuse`
 * means "mounted" (0), "could not mount" (1) or "bad arguments" (2). The
 * fork comes before anything is connected because UCX, under liblodefs,
 * does not survive one. The child then checks the mountpoint, makes the
 * FUSE session, mounts the container with liblodefs, mounts the session,
 * reports success, detaches from the terminal and serves requests
 * (ops.c, dir.c) with its poll loop (poll.c) until it is unmounted or gets
 * SIGTERM, SIGINT or SIGHUP; then it unmounts and exits 0.
 *
 * Messages: a failure before the mount prints one line, "lode-fuse: WHAT:
 * WHY", on the caller's stderr. libfuse's own messages are caught while
 * mounting (so they can become that line) and afterwards go, prefixed, to
 * stderr: the --log file once detached, else /dev/null.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/daemon.h"
#include "fuse/lfuse.h"

#if __has_include("lode/version.h")
#include "lode/version.h"
#endif
#ifndef LODE_VERSION
#define LODE_VERSION "0.3.0"
#endif

#define EXIT_USAGE 2
#define MAX_THREADS_DEFAULT 64
#define MAX_IDLE_THREADS_DEFAULT 16
#define POLLERS_DEFAULT 1
#define POLLERS_MAX 64
#define READAHEAD_DEFAULT 1024 /* KiB: one chunk */

struct options {
	const char *addr;           /* --addr, or NULL: liblodefs finds it */
	const char *transport;      /* --transport */
	unsigned timeout_ms;        /* --timeout */
	unsigned channels;          /* --channels */
	const char *pidfile;        /* --pidfile */
	const char *logfile;        /* --log */
	const char *container;
	const char *mountpoint;
	bool foreground, debug, single;
	double attr_timeout, entry_timeout, negative_timeout;
	enum lfuse_cache cache;
	bool writeback;
	bool clone_fd;
	bool default_permissions;
	unsigned max_threads, max_idle_threads;
	unsigned pollers;           /* -o pollers=; 0: libfuse's thread pool */
	unsigned readahead_kib;     /* -o readahead=; 0: the kernel's */
	char *kernel_opts;          /* -o options for libfuse and the kernel, comma-separated */
};

/* ---- messages ------------------------------------------------------------- */

/*
 * libfuse's messages, which may come a line in several pieces: caught
 * while mounting (the first line, so one line can say why it failed), else
 * printed as "lode-fuse: LINE".
 */
static struct {
	pthread_mutex_t lock;
	bool capture;
	char first[512];           /* the first line caught */
	bool first_done;
	char line[1024];           /* the line being assembled */
	size_t len;
} flog = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void log_capture_start(void)
{
	pthread_mutex_lock(&flog.lock);
	flog.capture = true;
	flog.first[0] = 0;
	flog.first_done = false;
	pthread_mutex_unlock(&flog.lock);
}

static void log_capture_stop(void)
{
	pthread_mutex_lock(&flog.lock);
	flog.capture = false;
	pthread_mutex_unlock(&flog.lock);
}

static void log_func(enum fuse_log_level level, const char *fmt, va_list ap)
{
	const char *msg;
	int n;

	if (level == FUSE_LOG_DEBUG) {
		vfprintf(stderr, fmt, ap);
		return;
	}
	pthread_mutex_lock(&flog.lock);
	n = vsnprintf(flog.line + flog.len, sizeof(flog.line) - flog.len, fmt, ap);
	if (n > 0)
		flog.len += (size_t)n < sizeof(flog.line) - flog.len ? (size_t)n
								   : sizeof(flog.line) - flog.len - 1;
	if (flog.len == 0 || (flog.line[flog.len - 1] != '\n' && flog.len < sizeof(flog.line) - 1)) {
		pthread_mutex_unlock(&flog.lock);
		return; /* the rest of the line is still to come */
	}
	while (flog.len && flog.line[flog.len - 1] == '\n')
		flog.line[--flog.len] = 0;
	msg = strncmp(flog.line, "fuse: ", 6) == 0 ? flog.line + 6 : flog.line;
	if (!flog.capture) {
		fprintf(stderr, "lode-fuse: %s\n", msg);
	} else if (!flog.first_done && level <= FUSE_LOG_ERR) {
		size_t len = strnlen(msg, sizeof(flog.first) - 1);

		memcpy(flog.first, msg, len);
		flog.first[len] = 0;
		flog.first_done = true;
	}
	flog.len = 0;
	flog.line[0] = 0;
	pthread_mutex_unlock(&flog.lock);
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	va_list ap;

	fputs("lode-fuse: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: lode-fuse [options] CONTAINER MOUNTPOINT\n"
		"\n"
		"Mount the file system in Lode container CONTAINER at MOUNTPOINT. Without -f\n"
		"it returns once mounted (exit 0) and serves in the background; unmount with\n"
		"`fusermount3 -u MOUNTPOINT` or by sending the daemon SIGTERM.\n"
		"\n"
		"options:\n"
		"  --addr HOST:PORT     the loded (default: $LODE_ADDR, else the address in\n"
		"                       $LODE_ADDR_FILE, else in $XDG_STATE_HOME/lode/addr\n"
		"                       (~/.local/state/lode/addr),\n"
		"                       else 127.0.0.1:7420)\n"
		"  --transport NAME     auto, tcp, shm or rdma\n"
		"                       (default: $LODE_TRANSPORT, else auto)\n"
		"  --timeout MS         per-request timeout\n"
		"                       (default: $LODE_TIMEOUT_MS, else 10000)\n"
		"  --channels N         server connections shared by the request threads\n"
		"                       (default: $LODEFS_CHANNELS, else 16)\n"
		"  -f, --foreground     do not detach\n"
		"  -d, --debug          print every request (implies -f)\n"
		"  -s                   serve requests on one thread\n"
		"  --pidfile FILE       write the daemon's pid to FILE once mounted\n"
		"                       (removed when it exits)\n"
		"  --log FILE           append the daemon's messages to FILE once detached\n"
		"                       (default: /dev/null)\n"
		"  -o OPT[,OPT...]      mount options, below\n"
		"  -h, --help           this text\n"
		"  -V, --version        the version\n"
		"\n"
		"mount options of lode-fuse (README.md says what they mean for coherence):\n"
		"  attr_timeout=S       seconds the kernel trusts cached attributes (default: 1)\n"
		"  entry_timeout=S      seconds the kernel trusts a cached name (default: 1)\n"
		"  negative_timeout=S   seconds the kernel remembers that a name is absent\n"
		"                       (default: 0)\n"
		"  cache=auto           page cache dropped at each open and when another client\n"
		"                       changes the file's size or mtime (the default)\n"
		"  cache=none           no page cache: every read and write reaches Lode\n"
		"  cache=always         page cache kept across opens (only user.lode.invalidate\n"
		"                       drops it)\n"
		"  writeback            the kernel gathers writes in its cache (default: off)\n"
		"  readahead=KIB        how far the kernel reads ahead of a sequential reader\n"
		"                       (default: %d; 0: the kernel's own, 128)\n"
		"  pollers=N            threads that take requests without blocking and keep\n"
		"                       many reads in flight each, handing the rest to request\n"
		"                       threads (default: %d); 0: every request on a request\n"
		"                       thread (libfuse's thread pool)\n"
		"  max_threads=N        most request threads (default: %d)\n"
		"  max_idle_threads=N   idle request threads kept (default: %d)\n"
		"  noclone_fd           all threads read one /dev/fuse descriptor\n"
		"                       (default: one each)\n"
		"  nodefault_permissions  only liblodefs checks permissions (default: the\n"
		"                       kernel checks them too, default_permissions)\n"
		"mount options passed to the kernel (see mount.fuse3(8)): allow_other,\n"
		"  allow_root, auto_unmount, ro, rw, noatime, nosuid, nodev, noexec, sync,\n"
		"  dirsync, fsname=NAME (default: lode:CONTAINER), ...; the file system type\n"
		"  is always fuse.lode.\n"
		"\n"
		"Exit status: 0 mounted (or, for the daemon, cleanly unmounted), 1 the mount\n"
		"failed, 2 bad arguments.\n",
		READAHEAD_DEFAULT, POLLERS_DEFAULT, MAX_THREADS_DEFAULT, MAX_IDLE_THREADS_DEFAULT);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("lode-fuse: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (lode-fuse --help lists the options)\n", stderr);
	return EXIT_USAGE;
}

/* ---- the command line ----------------------------------------------------- */

static bool parse_uint(const char *s, unsigned min, unsigned max, unsigned *out)
{
	char *end;
	unsigned long v;

	if (!s || !*s || *s == '-')
		return false;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return false;
	*out = (unsigned)v;
	return true;
}

static bool parse_seconds(const char *s, double *out)
{
	char *end;
	double v;

	if (!s || !*s)
		return false;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !isfinite(v) || v < 0 || v > 1e9)
		return false;
	*out = v;
	return true;
}

/* Append opt to a comma-separated list; false when out of memory. */
static bool opts_append(char **list, const char *opt)
{
	size_t old = *list ? strlen(*list) : 0, len = strlen(opt);
	char *s = realloc(*list, old + len + 2);

	if (!s)
		return false;
	if (old)
		s[old++] = ',';
	memcpy(s + old, opt, len + 1);
	*list = s;
	return true;
}

/* One -o option: ours are taken, the rest kept for libfuse. 0 or EXIT_USAGE. */
static int parse_mount_opt(struct options *o, const char *opt)
{
	const char *eq = strchr(opt, '=');
	const char *val = eq ? eq + 1 : NULL;
	size_t klen = eq ? (size_t)(eq - opt) : strlen(opt);

#define KEY(k) (klen == strlen(k) && strncmp(opt, k, klen) == 0)
	if (KEY("attr_timeout")) {
		if (!parse_seconds(val, &o->attr_timeout))
			return usage_error("-o attr_timeout needs seconds, 0 or more");
	} else if (KEY("entry_timeout")) {
		if (!parse_seconds(val, &o->entry_timeout))
			return usage_error("-o entry_timeout needs seconds, 0 or more");
	} else if (KEY("negative_timeout")) {
		if (!parse_seconds(val, &o->negative_timeout))
			return usage_error("-o negative_timeout needs seconds, 0 or more");
	} else if (KEY("cache")) {
		if (val && strcmp(val, "none") == 0)
			o->cache = LFUSE_CACHE_NONE;
		else if (val && strcmp(val, "auto") == 0)
			o->cache = LFUSE_CACHE_AUTO;
		else if (val && strcmp(val, "always") == 0)
			o->cache = LFUSE_CACHE_ALWAYS;
		else
			return usage_error("-o cache needs none, auto or always");
	} else if (KEY("writeback") && !val) {
		o->writeback = true;
	} else if (KEY("nowriteback") && !val) {
		o->writeback = false;
	} else if (KEY("max_threads")) {
		if (!parse_uint(val, 1, 100000, &o->max_threads))
			return usage_error("-o max_threads needs a count, 1 or more");
	} else if (KEY("pollers")) {
		if (!parse_uint(val, 0, POLLERS_MAX, &o->pollers))
			return usage_error("-o pollers needs a count, 0 to %d", POLLERS_MAX);
	} else if (KEY("max_idle_threads")) {
		if (!parse_uint(val, 1, 100000, &o->max_idle_threads))
			return usage_error("-o max_idle_threads needs a count, 1 or more");
	} else if (KEY("readahead")) {
		if (!parse_uint(val, 0, 1u << 20, &o->readahead_kib))
			return usage_error("-o readahead needs KiB, 0 or more");
	} else if (KEY("clone_fd") && !val) {
		o->clone_fd = true;
	} else if (KEY("noclone_fd") && !val) {
		o->clone_fd = false;
	} else if (KEY("default_permissions") && !val) {
		o->default_permissions = true;
	} else if (KEY("nodefault_permissions") && !val) {
		o->default_permissions = false;
	} else if (KEY("subtype")) {
		return usage_error("-o subtype: the type is always fuse.lode");
	} else if (KEY("max_read")) {
		return usage_error("-o max_read: lode-fuse sets it (%u)", LFUSE_IO_MAX);
	} else if (!*opt) {
		return usage_error("-o needs options");
	} else if (!opts_append(&o->kernel_opts, opt)) {
		fail("out of memory");
		return 1;
	}
#undef KEY
	return 0;
}

/* A -o argument: comma-separated options, "\," a comma inside one. */
static int parse_mount_opts(struct options *o, const char *arg)
{
	char *opt = malloc(strlen(arg) + 1);
	const char *s = arg;
	int rc = 0;

	if (!opt) {
		fail("out of memory");
		return 1;
	}
	while (rc == 0) {
		char *d = opt;

		while (*s && *s != ',') {
			if (*s == '\\' && s[1])
				s++;
			*d++ = *s++;
		}
		*d = 0;
		rc = parse_mount_opt(o, opt);
		if (!*s++)
			break;
	}
	free(opt);
	return rc;
}

/*
 * --name VALUE or --name=VALUE at argv[*i]: 1 and *val set when it matches
 * (with *i moved past the value), 0 when it does not, -1 when the value is
 * missing.
 */
static int long_opt(int argc, char **argv, int *i, const char *name, const char **val)
{
	size_t len = strlen(name);

	if (strncmp(argv[*i], name, len) != 0)
		return 0;
	if (argv[*i][len] == '=') {
		*val = argv[*i] + len + 1;
		return 1;
	}
	if (argv[*i][len])
		return 0;
	if (*i + 1 >= argc)
		return -1;
	*val = argv[++*i];
	return 1;
}

/* 0: parsed; -1: --help or --version done, exit 0; else the exit status. */
static int parse_args(int argc, char **argv, struct options *o)
{
	const char *pos[2];
	int npos = 0, rc;
	bool dashdash = false;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v;

		if (dashdash || a[0] != '-' || !a[1]) {
			if (npos == 2)
				return usage_error("too many arguments: '%s'", a);
			pos[npos++] = a;
		} else if (strcmp(a, "--") == 0) {
			dashdash = true;
		} else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout);
			return -1;
		} else if (strcmp(a, "-V") == 0 || strcmp(a, "--version") == 0) {
			printf("lode-fuse %s (libfuse %d)\n", LODE_VERSION, fuse_version());
			return -1;
		} else if (strcmp(a, "-f") == 0 || strcmp(a, "--foreground") == 0) {
			o->foreground = true;
		} else if (strcmp(a, "-d") == 0 || strcmp(a, "--debug") == 0) {
			o->debug = o->foreground = true;
		} else if (strcmp(a, "-s") == 0) {
			o->single = true;
		} else if (strncmp(a, "-o", 2) == 0) {
			if (a[2]) {
				v = a + 2;
			} else if (i + 1 < argc) {
				v = argv[++i];
			} else {
				return usage_error("-o needs options");
			}
			if ((rc = parse_mount_opts(o, v)) != 0)
				return rc;
		} else if ((rc = long_opt(argc, argv, &i, "--addr", &v)) != 0) {
			if (rc < 0 || !*v)
				return usage_error("--addr needs HOST:PORT");
			o->addr = v;
		} else if ((rc = long_opt(argc, argv, &i, "--transport", &v)) != 0) {
			if (rc < 0 || (strcmp(v, "auto") && strcmp(v, "tcp") && strcmp(v, "shm") &&
				       strcmp(v, "rdma")))
				return usage_error("--transport needs auto, tcp, shm or rdma");
			o->transport = v;
		} else if ((rc = long_opt(argc, argv, &i, "--timeout", &v)) != 0) {
			if (rc < 0 || !parse_uint(v, 1, UINT_MAX, &o->timeout_ms))
				return usage_error("--timeout needs milliseconds, 1 or more");
		} else if ((rc = long_opt(argc, argv, &i, "--channels", &v)) != 0) {
			if (rc < 0 || !parse_uint(v, 1, 1024, &o->channels))
				return usage_error("--channels needs a count from 1 to 1024");
		} else if ((rc = long_opt(argc, argv, &i, "--pidfile", &v)) != 0) {
			if (rc < 0 || !*v)
				return usage_error("--pidfile needs a file");
			o->pidfile = v;
		} else if ((rc = long_opt(argc, argv, &i, "--log", &v)) != 0) {
			if (rc < 0 || !*v)
				return usage_error("--log needs a file");
			o->logfile = v;
		} else {
			return usage_error("unknown option '%s'", a);
		}
	}
	if (npos < 2)
		return usage_error(npos ? "missing MOUNTPOINT" : "missing CONTAINER and MOUNTPOINT");
	o->container = pos[0];
	o->mountpoint = pos[1];
	if (!*o->container)
		return usage_error("CONTAINER is empty");
	return 0;
}

/* ---- detaching ------------------------------------------------------------ */




/* ---- mounting ------------------------------------------------------------- */

/*
 * The address lode_connect() reaches when given none, for the mount xattr
 * when liblodefs does not say: $LODE_ADDR, the first word of
 * $LODE_ADDR_FILE or $XDG_STATE_HOME/lode/addr (~/.local/state/lode/addr),
 * else the default.
 */
static void addr_resolve(char *buf, size_t cap)
{
	const char *env = getenv("LODE_ADDR"), *file = getenv("LODE_ADDR_FILE");
	char path[PATH_MAX];
	FILE *f;

	if (env && *env) {
		snprintf(buf, cap, "%s", env);
		return;
	}
	if (!file || !*file) {
		const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");

		if (state && *state)
			snprintf(path, sizeof(path), "%s/lode/addr", state);
		else
			snprintf(path, sizeof(path), "%s/.local/state/lode/addr", home ? home : "");
		file = path;
	}
	if ((f = fopen(file, "r"))) {
		bool got = fgets(buf, (int)cap, f) != NULL;

		fclose(f);
		if (got) {
			buf[strcspn(buf, " \t\r\n")] = 0;
			if (*buf)
				return;
		}
	}
	snprintf(buf, cap, "127.0.0.1:%d", LODE_PORT_DEFAULT);
}

/* The mountpoint as an absolute path, checked: an existing, unmounted directory. */
static int mountpoint_check(const char *mp, char *abs)
{
	struct stat st, up;
	char parent[PATH_MAX + 3];

	if (!realpath(mp, abs)) {
		if (errno == ENOTCONN)
			fail("mountpoint %s: %s (a dead mount: fusermount3 -u it)", mp,
			     strerror(errno));
		else
			fail("mountpoint %s: %s", mp, strerror(errno));
		return 1;
	}
	if (stat(abs, &st) < 0) {
		fail("mountpoint %s: %s", mp, strerror(errno));
		return 1;
	}
	if (!S_ISDIR(st.st_mode)) {
		fail("mountpoint %s: %s", mp, strerror(ENOTDIR));
		return 1;
	}
	snprintf(parent, sizeof(parent), "%s/..", abs);
	if (strcmp(abs, "/") == 0 || (stat(parent, &up) == 0 && up.st_dev != st.st_dev)) {
		fail("mountpoint %s: already a mount point (%s)", mp, strerror(EBUSY));
		return 1;
	}
	return 0;
}

/* The -o list for libfuse: our fixed options, then the caller's. */
static char *session_opts(const struct options *o)
{
	char *list = NULL, *fsname;
	size_t n = 0;
	const char *c;
	bool ok;

	/* fsname=lode:CONTAINER, with the separators of an -o list escaped */
	if (!(fsname = malloc(2 * strlen(o->container) + 16)))
		return NULL;
	n = (size_t)sprintf(fsname, "fsname=lode:");
	for (c = o->container; *c; c++) {
		if (*c == ',' || *c == '\\')
			fsname[n++] = '\\';
		fsname[n++] = *c;
	}
	fsname[n] = 0;
	ok = opts_append(&list, fsname) && opts_append(&list, "max_read=1048576") &&
	     (!o->default_permissions || opts_append(&list, "default_permissions")) &&
	     (!o->kernel_opts || opts_append(&list, o->kernel_opts)) &&
	     opts_append(&list, "subtype=lode");
	free(fsname);
	if (!ok) {
		free(list);
		return NULL;
	}
	return list;
}

/* The FUSE session; NULL (and a message) for options libfuse refuses. */
static struct fuse_session *session_make(const struct options *o, struct lfuse *lf, int *code)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_session *se = NULL;
	char *list = session_opts(o);

	*code = 1;
	if (!list || fuse_opt_add_arg(&args, "lode-fuse") != 0 ||
	    (o->debug && fuse_opt_add_arg(&args, "-d") != 0) ||
	    fuse_opt_add_arg(&args, "-o") != 0 || fuse_opt_add_arg(&args, list) != 0) {
		fail("out of memory");
		goto out;
	}
	log_capture_start();
	se = fuse_session_new(&args, &lfuse_ops, sizeof(lfuse_ops), lf);
	log_capture_stop();
	if (!se) {
		fail("bad mount options: %s", flog.first[0] ? flog.first : "refused by libfuse");
		*code = EXIT_USAGE;
	}
out:
	fuse_opt_free_args(&args);
	free(list);
	return se;
}


/*
 * The device number ("major:minor") of the mount at path, from
 * /proc/self/mountinfo (the last such mount: the one on top). Looking
 * there, not stat(), because the file system cannot answer yet.
 */
static bool mount_dev(const char *path, char *dev, size_t cap)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	char *line = NULL;
	size_t len = 0;
	bool found = false;

	if (!f)
		return false;
	while (getline(&line, &len, f) > 0) {
		char devs[64], mp[PATH_MAX], *d = mp;

		/* id parent major:minor root mountpoint ... */
		if (sscanf(line, "%*s %*s %63s %*s %4095s", devs, mp) != 2)
			continue;
		/* mountinfo escapes space, tab, newline and backslash as \ooo */
		for (const char *s = mp; *s; s++) {
			if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] && s[3]) {
				*d++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 | (s[3] - '0'));
				s += 3;
			} else {
				*d++ = *s;
			}
		}
		*d = 0;
		if (strcmp(mp, path) == 0) {
			snprintf(dev, cap, "%s", devs);
			found = true;
		}
	}
	free(line);
	fclose(f);
	return found;
}

/*
 * Answer the kernel's INIT, then widen the mount's read-ahead. The kernel
 * starts a FUSE mount at 128 KiB and lowers it, never raises it, when INIT
 * is answered; so it is raised through sysfs after that (root only: for
 * others it stays as it is). One chunk ahead keeps a sequential reader's
 * requests at 1 MiB.
 */
static void session_init(struct fuse_session *se, const char *path, unsigned kib)
{
	struct fuse_buf buf = {0};
	char dev[64], file[128];
	FILE *f;
	int n = fuse_session_receive_buf(se, &buf);

	if (n > 0)
		fuse_session_process_buf(se, &buf);
	free(buf.mem);
	if (n <= 0 || kib == 0 || !mount_dev(path, dev, sizeof(dev)))
		return;
	snprintf(file, sizeof(file), "/sys/class/bdi/%s/read_ahead_kb", dev);
	if ((f = fopen(file, "w"))) {
		fprintf(f, "%u\n", kib);
		fclose(f);
	}
}

/* Serve requests until unmounted or signalled; libfuse's status. */
static int serve(const struct options *o, struct lfuse *lf)
{
	struct fuse_session *se = lf->se;
	struct fuse_loop_config *cfg;
	int rc;

	if (o->single)
		return fuse_session_loop(se);
	if (o->pollers)
		return lfuse_poll_serve(lf, o->pollers, o->max_threads, o->max_idle_threads);
	if (!(cfg = fuse_loop_cfg_create()))
		return -ENOMEM;
	fuse_loop_cfg_set_clone_fd(cfg, o->clone_fd);
	fuse_loop_cfg_set_max_threads(cfg, o->max_threads);
	fuse_loop_cfg_set_idle_threads(cfg, o->max_idle_threads);
	rc = fuse_session_loop_mt(se, cfg);
	fuse_loop_cfg_destroy(cfg);
	return rc;
}

int main(int argc, char **argv)
{
	struct options o = {
		.attr_timeout = 1,
		.entry_timeout = 1,
		.negative_timeout = 0,
		.cache = LFUSE_CACHE_AUTO,
		.clone_fd = true,
		.default_permissions = true,
		.max_threads = MAX_THREADS_DEFAULT,
		.max_idle_threads = MAX_IDLE_THREADS_DEFAULT,
		.pollers = POLLERS_DEFAULT,
		.readahead_kib = READAHEAD_DEFAULT,
	};
	struct lodefs_opts fo = {0};
	struct lfuse lf = {0};
	char abs[PATH_MAX], addr[512], pidfile[PATH_MAX + 64], msg[PATH_MAX + 128];
	const char *where;
	int ready = -1, logfd = -1, code, rc;

	signal(SIGPIPE, SIG_IGN);
	fuse_set_log_func(log_func);
	if ((code = parse_args(argc, argv, &o)) != 0)
		goto out_args;
	if (!o.foreground && (ready = daemon_fork("lode-fuse", "mounting")) < 0) {
		fail("fork: %s", strerror(-ready));
		code = 1;
		goto out_args;
	}

	code = 1;
	if (o.logfile && (logfd = open(o.logfile, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
				       0644)) < 0) {
		fail("log %s: %s", o.logfile, strerror(errno));
		goto out_ready;
	}
	if ((code = mountpoint_check(o.mountpoint, abs)) != 0)
		goto out_ready;
	lf.attr_timeout = o.attr_timeout;
	lf.entry_timeout = o.entry_timeout;
	lf.negative_timeout = o.negative_timeout;
	lf.cache = o.cache;
	lf.writeback = o.writeback;
	lf.kernel_checks = o.default_permissions;
	if (!(lf.se = session_make(&o, &lf, &code)))
		goto out_ready;

	code = 1;
	fo.transport = o.transport;
	fo.timeout_ms = o.timeout_ms;
	fo.channels = o.channels;
	addr_resolve(addr, sizeof(addr));
	where = o.addr ? o.addr : addr;
	if ((rc = lodefs_mount(o.addr, o.container, &fo, &lf.fs)) < 0) {
		fail("container %s at %s: %s", o.container, where, lode_strerror(rc));
		goto out_session;
	}
	if (lodefs_addr(lf.fs) && *lodefs_addr(lf.fs))
		where = lodefs_addr(lf.fs);
	if (asprintf(&lf.mount_xattr, "%s %s", where, lodefs_container(lf.fs)) < 0) {
		lf.mount_xattr = NULL;
		fail("out of memory");
		goto out_fs;
	}
	if (fuse_set_signal_handlers(lf.se) != 0) {
		fail("cannot set signal handlers");
		goto out_fs;
	}
	log_capture_start();
	rc = fuse_session_mount(lf.se, abs);
	log_capture_stop();
	if (rc != 0) {
		fail("mount at %s: %s", abs, flog.first[0] ? flog.first : "refused");
		goto out_signals;
	}
	if (o.pidfile && daemon_pidfile(&o.pidfile, pidfile, sizeof(pidfile), msg, sizeof(msg)) < 0) {
		fail("%s", msg);
		goto out_unmount;
	}
	if ((rc = lfuse_inval_start(lf.se, &lf.inval)) < 0) {
		fail("invalidation thread: %s", strerror(-rc));
		goto out_pidfile;
	}

	/* Mounted: the caller may go, and so may the terminal. */
	if (!o.foreground) {
		daemon_stdio(logfd, true);
		logfd = -1;
	}
	daemon_ready(&ready, 0);
	session_init(lf.se, abs, o.readahead_kib);
	rc = serve(&o, &lf);
	if (rc < 0)
		fprintf(stderr, "lode-fuse: serving %s: %s\n", abs, strerror(-rc));
	else if (rc > 0)
		fprintf(stderr, "lode-fuse: signal %d: unmounting %s\n", rc, abs);
	code = rc < 0 ? 1 : 0;
out_pidfile:
	if (o.pidfile)
		unlink(o.pidfile);
out_unmount:
	fuse_session_unmount(lf.se);
	lfuse_inval_stop(lf.inval);
out_signals:
	fuse_remove_signal_handlers(lf.se);
out_fs:
	/* every request thread has stopped: nothing uses the instance now */
	if ((rc = lodefs_umount(lf.fs)) < 0 && code == 0)
		fprintf(stderr, "lode-fuse: unmount container %s: %s\n", o.container,
			lode_strerror(rc));
	free(lf.mount_xattr);
out_session:
	fuse_session_destroy(lf.se);
out_ready:
	if (logfd >= 0)
		close(logfd);
	daemon_ready(&ready, code);
out_args:
	free(o.kernel_opts);
	return code < 0 ? 0 : code;
}
