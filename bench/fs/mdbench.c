/*
 * lode-mdbench: metadata rates in the style of mdtest: creates, stats and
 * unlinks per second, in one shared directory and spread over many, through
 * liblodefs (--api lib) or through system calls on any directory (--api
 * posix: a Lode FUSE mount, a FUSE passthrough, a local file system).
 *
 *   lode-mdbench --api lib --container default --files 20000 --threads 4
 *   lode-mdbench --api posix --dir /mnt/lode/md --files 20000 --threads 4
 *
 * Each thread creates its share of --files empty files (open with O_CREAT |
 * O_EXCL, then close), then stats each, then unlinks each; a phase's rate is
 * all threads' operations over the time from the common start to the last
 * thread's end. With --dirs 1 every thread works in one directory; with
 * --dirs n (n >= threads) the files spread over n directories, each used by
 * one thread only. The tree is made before and removed after, unmeasured.
 *
 * Output: one line per phase, or with --json one object. Exit status 0, 1 on
 * any failed operation (the first is printed), 2 on a bad argument.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lode/lodefs.h"

#define THREADS_MAX 256u

enum api { API_LIB, API_POSIX };
enum phase { PH_CREATE, PH_STAT, PH_UNLINK, PH_COUNT };
static const char *const phase_name[] = {"create", "stat", "unlink"};

static struct {
	enum api api;
	const char *dir;       /* posix: the directory to work under */
	const char *addr;      /* lib: the system (NULL: found as lode finds it) */
	const char *container; /* lib */
	unsigned files;
	unsigned dirs;
	unsigned threads;
	bool json;
	lodefs_t *fs;
	uint64_t *dir_ino;     /* lib: each work directory's inode */
	pthread_barrier_t gate;
	uint64_t t_start[PH_COUNT];
	uint64_t t_end[PH_COUNT];
	pthread_mutex_t lock;
	int first_err;
} g = {.api = API_LIB, .container = "default", .files = 10000, .dirs = 1, .threads = 1};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void fail(int rc, const char *what, const char *name)
{
	pthread_mutex_lock(&g.lock);
	if (!g.first_err) {
		g.first_err = rc;
		fprintf(stderr, "lode-mdbench: %s %s: %s\n", what, name, strerror(-rc));
	}
	pthread_mutex_unlock(&g.lock);
}

/* The work directory of file i of thread t, and the file's name. */
static unsigned dir_of(unsigned t, unsigned i)
{
	unsigned per = g.dirs / g.threads;

	return g.dirs == 1 ? 0 : t * per + i % per;
}

static void file_name(char *buf, size_t n, unsigned t, unsigned i)
{
	snprintf(buf, n, "f.%u.%u", t, i);
}

static int op_lib(enum phase ph, unsigned d, const char *name)
{
	uint64_t parent = g.dir_ino[d];
	lodefs_file_t *f;
	struct stat st;
	int rc;

	switch (ph) {
	case PH_CREATE:
		rc = lodefs_create(g.fs, NULL, parent, name, O_CREAT | O_EXCL | O_WRONLY, 0644,
				   NULL, &f);
		return rc < 0 ? rc : lodefs_file_close(f);
	case PH_STAT:
		return lodefs_lookup(g.fs, NULL, parent, name, &st);
	default:
		return lodefs_unlink(g.fs, NULL, parent, name);
	}
}

static int op_posix(enum phase ph, unsigned d, const char *name)
{
	char path[4096];
	struct stat st;
	int fd;

	snprintf(path, sizeof(path), "%s/d%u/%s", g.dir, d, name);
	switch (ph) {
	case PH_CREATE:
		fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
		if (fd < 0)
			return -errno;
		return close(fd) < 0 ? -errno : 0;
	case PH_STAT:
		return stat(path, &st) < 0 ? -errno : 0;
	default:
		return unlink(path) < 0 ? -errno : 0;
	}
}

static void *worker(void *arg)
{
	unsigned t = (unsigned)(uintptr_t)arg;
	unsigned n = g.files / g.threads;
	char name[64];

	for (int ph = 0; ph < PH_COUNT; ph++) {
		pthread_barrier_wait(&g.gate);
		if (t == 0)
			g.t_start[ph] = now_ns();
		pthread_barrier_wait(&g.gate);
		for (unsigned i = 0; i < n && !g.first_err; i++) {
			unsigned d = dir_of(t, i);
			int rc;

			file_name(name, sizeof(name), t, i);
			rc = g.api == API_LIB ? op_lib((enum phase)ph, d, name)
					      : op_posix((enum phase)ph, d, name);
			if (rc < 0)
				fail(rc, phase_name[ph], name);
		}
		pthread_barrier_wait(&g.gate);
		if (t == 0)
			g.t_end[ph] = now_ns();
	}
	return NULL;
}

/* Make (or with remove, remove) the work directories. */
static int tree(bool remove)
{
	char path[4096], name[32];
	int rc = 0;

	for (unsigned d = 0; d < g.dirs && rc == 0; d++) {
		snprintf(name, sizeof(name), "d%u", d);
		if (g.api == API_LIB) {
			struct stat st;

			if (remove) {
				rc = lodefs_rmdir(g.fs, NULL, LODEFS_ROOT_INO, name);
			} else {
				rc = lodefs_mkdir(g.fs, NULL, LODEFS_ROOT_INO, name, 0755, &st);
				if (rc == -EEXIST)
					rc = lodefs_lookup(g.fs, NULL, LODEFS_ROOT_INO, name, &st);
				g.dir_ino[d] = st.st_ino;
			}
		} else {
			snprintf(path, sizeof(path), "%s/%s", g.dir, name);
			rc = remove ? rmdir(path) : mkdir(path, 0755);
			rc = rc < 0 && !(errno == EEXIST && !remove) ? -errno : 0;
		}
		if (rc < 0)
			fprintf(stderr, "lode-mdbench: %s %s: %s\n", remove ? "rmdir" : "mkdir", name,
				strerror(-rc));
	}
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: lode-mdbench [options]\n"
		"  --api lib|posix      through liblodefs (default) or system calls\n"
		"  --dir PATH           posix: directory to work under (required)\n"
		"  --addr ADDR          lib: the system (default: as `lode` finds it)\n"
		"  --container LABEL    lib: container to mount (default: default)\n"
		"  --files N            files in all (default 10000)\n"
		"  --dirs N             1: one shared directory (default); else >= threads\n"
		"  --threads N          threads (default 1, at most %u)\n"
		"  --json               one JSON object instead of lines\n"
		"  --help\n",
		THREADS_MAX);
}

static int parse_uint(const char *s, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v == 0 || v > 100000000ul)
		return -1;
	*out = (unsigned)v;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{"api", required_argument, NULL, 'a'},     {"dir", required_argument, NULL, 'd'},
		{"addr", required_argument, NULL, 'A'},    {"container", required_argument, NULL, 'c'},
		{"files", required_argument, NULL, 'n'},   {"dirs", required_argument, NULL, 'D'},
		{"threads", required_argument, NULL, 't'}, {"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
	};
	pthread_t th[THREADS_MAX];
	int c, rc;

	while ((c = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		switch (c) {
		case 'a':
			if (strcmp(optarg, "lib") && strcmp(optarg, "posix"))
				goto bad;
			g.api = strcmp(optarg, "lib") ? API_POSIX : API_LIB;
			break;
		case 'd':
			g.dir = optarg;
			break;
		case 'A':
			g.addr = optarg;
			break;
		case 'c':
			g.container = optarg;
			break;
		case 'n':
			if (parse_uint(optarg, &g.files))
				goto bad;
			break;
		case 'D':
			if (parse_uint(optarg, &g.dirs))
				goto bad;
			break;
		case 't':
			if (parse_uint(optarg, &g.threads) || g.threads > THREADS_MAX)
				goto bad;
			break;
		case 'j':
			g.json = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			goto bad;
		}
	}
	if (optind != argc || (g.api == API_POSIX && !g.dir) ||
	    (g.dirs > 1 && g.dirs < g.threads) || g.files < g.threads) {
		fprintf(stderr, "lode-mdbench: %s\n",
			optind != argc ? "unexpected argument"
			: g.api == API_POSIX && !g.dir ? "--api posix needs --dir"
			: g.files < g.threads ? "--files must be at least --threads"
					      : "--dirs must be 1 or at least --threads");
		return 2;
	}
	if (!(g.dir_ino = calloc(g.dirs, sizeof(*g.dir_ino))))
		return 1;
	if (g.api == API_LIB) {
		rc = lodefs_mount(g.addr, g.container, NULL, &g.fs);
		if (rc < 0) {
			fprintf(stderr, "lode-mdbench: mount %s: %s\n", g.container, lode_strerror(rc));
			return 1;
		}
	}
	pthread_mutex_init(&g.lock, NULL);
	pthread_barrier_init(&g.gate, NULL, g.threads);
	if (tree(false) < 0)
		return 1;
	for (unsigned t = 0; t < g.threads; t++)
		if (pthread_create(&th[t], NULL, worker, (void *)(uintptr_t)t)) {
			fprintf(stderr, "lode-mdbench: cannot start thread %u\n", t);
			return 1;
		}
	for (unsigned t = 0; t < g.threads; t++)
		pthread_join(th[t], NULL);
	rc = tree(true);
	if (g.fs)
		lodefs_umount(g.fs);

	unsigned done = g.files / g.threads * g.threads;
	if (g.json)
		printf("{\"api\":\"%s\",\"files\":%u,\"dirs\":%u,\"threads\":%u", g.api == API_LIB ? "lib" : "posix",
		       done, g.dirs, g.threads);
	for (int ph = 0; ph < PH_COUNT; ph++) {
		double s = (double)(g.t_end[ph] - g.t_start[ph]) / 1e9;
		double rate = s > 0 ? done / s : 0;

		if (g.json)
			printf(",\"%s_per_s\":%.1f", phase_name[ph], rate);
		else
			printf("%-7s %10.0f /s  (%u in %.3f s)\n", phase_name[ph], rate, done, s);
	}
	if (g.json)
		printf("}\n");
	return g.first_err || rc < 0 ? 1 : 0;
bad:
	usage(stderr);
	return 2;
}
