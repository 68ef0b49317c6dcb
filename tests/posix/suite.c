/*
 * The POSIX behaviour suite (see suite.h): what a program may expect of a
 * file system, checked case by case through a struct px_ops, so that
 * liblodefs and the FUSE mount are held to the same cases and the same
 * exact error codes — the ones Linux gives on a local file system.
 *
 * Every case writes data that depends on its position in the file (and on
 * a seed), so a byte read back from the wrong place or the wrong chunk
 * shows; holes must read as zeros. Error cases compare the exact negative
 * errno. Cases that use threads collect their errors and let the main
 * thread fail the case, because cmocka's assertions only work there.
 *
 * $PX_READDIR_N sets how many entries the large-directory case makes
 * (default PX_READDIR_DEFAULT) and $PX_CREATE_THREADS how many threads make
 * them (default PX_CREATE_THREADS); $PX_CASES, a comma-separated list of case
 * names, runs only those.
 */
#include <setjmp.h> /* cmocka.h needs these first */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "suite.h"

#define KIB 1024ULL
#define MIB (1024ULL * 1024)
#define GIB (1024ULL * MIB)
#define CHUNK MIB /* lodefs's default chunk size: boundaries worth crossing */
#define PX_READDIR_DEFAULT 100000
#define PX_CREATE_THREADS 8
#define PX_WRITERS 8
#define USER_UID 1000 /* the non-root credential of the permission cases */
#define USER_GID 1000

/* The backend of the run now going on, and the case's directory. */
static const struct px_ops *ops;
static void *B;
static const char *label;
static char cdir[PX_NAME_MAX + 2];
static const char *cname;

/* px_suite_fill's backend for the large directory's entries, or NULL. */
static const struct px_ops *fill_ops;
static void *fill_b;
static const char *fill_label;

/* ---- helpers -------------------------------------------------------------- */

/* "-ENOENT" for -2, the number itself otherwise; one of a few static buffers. */
static const char *rc_name(long long rc)
{
	static __thread char bufs[4][48];
	static __thread unsigned next;
	char *b = bufs[next++ % 4];
	const char *n;

	if (rc < 0 && rc > -4096 && (n = strerrorname_np((int)-rc)))
		snprintf(b, sizeof(bufs[0]), "-%s", n);
	else
		snprintf(b, sizeof(bufs[0]), "%lld", rc);
	return b;
}

/* Fail the case, naming backend, case, the call and both values. */
static void check_eq(long long got, long long want, const char *what, const char *file, int line)
{
	if (got == want)
		return;
	print_error("%s.%s: %s\n    got %s, want %s\n", label, cname, what, rc_name(got),
		    rc_name(want));
	_fail(file, line);
}

/* CHECK(call, want): call's result must be exactly want (0, a count or -Exxx). */
#define CHECK(call, want) check_eq((long long)(call), (long long)(want), #call, __FILE__, __LINE__)
/* TRUE(cond): a condition that must hold. */
#define TRUE(cond) check_eq((cond) ? 1 : 0, 1, #cond, __FILE__, __LINE__)

/* The case's path for rel, in one of a few rotating buffers (main thread only). */
static const char *P(const char *rel)
{
	static char bufs[8][PATH_MAX];
	static unsigned next;
	char *b = bufs[next++ % 8];

	snprintf(b, PATH_MAX, "%s/%s", cdir, rel);
	return b;
}

static void *xmalloc(size_t len)
{
	void *p = malloc(len ? len : 1);

	assert_non_null(p);
	return p;
}

/* The byte a file written with seed holds at off; seed 0: a hole, zero. */
static inline uint8_t pat_byte(uint64_t off, uint64_t seed)
{
	uint64_t x;

	if (!seed)
		return 0;
	x = (off ^ (seed << 40)) * 0x9e3779b97f4a7c15ULL;
	return (uint8_t)(x >> 56);
}

static void pat_fill(uint8_t *buf, size_t len, uint64_t off, uint64_t seed)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = pat_byte(off + i, seed);
}

/* Where buf differs from the pattern, or -1. */
static long long pat_diff(const uint8_t *buf, size_t len, uint64_t off, uint64_t seed)
{
	for (size_t i = 0; i < len; i++)
		if (buf[i] != pat_byte(off + i, seed))
			return (long long)i;
	return -1;
}

static int open_ok(const char *path, int flags, mode_t mode, const char *file, int line)
{
	int fd = ops->open(B, path, flags, mode);

	if (fd < 0) {
		print_error("%s.%s: open(%s, %#o) = %s\n", label, cname, path, flags, rc_name(fd));
		_fail(file, line);
	}
	return fd;
}
#define OPEN(path, flags, mode) open_ok(path, flags, mode, __FILE__, __LINE__)

/* Write len pattern bytes of seed at off, in one call, and check the count. */
static void pwrite_pat(int fd, uint64_t off, size_t len, uint64_t seed, const char *file, int line)
{
	uint8_t *buf = xmalloc(len);
	ssize_t n;

	pat_fill(buf, len, off, seed);
	n = ops->pwrite(B, fd, buf, len, off);
	free(buf);
	if (n != (ssize_t)len) {
		print_error("%s.%s: pwrite(%zu at %llu) = %s\n", label, cname, len,
			    (unsigned long long)off, rc_name(n));
		_fail(file, line);
	}
}
#define PWRITE(fd, off, len, seed) pwrite_pat(fd, off, len, seed, __FILE__, __LINE__)

/* [off, off+len) must read back as seed's pattern (0: zeros), in full. */
static void expect_range(int fd, uint64_t off, uint64_t len, uint64_t seed, const char *file,
			 int line)
{
	size_t step = (size_t)(len < 4 * MIB ? len : 4 * MIB);
	uint8_t *buf = xmalloc(step);

	for (uint64_t done = 0; done < len;) {
		size_t want = (size_t)(len - done < step ? len - done : step);
		ssize_t n = ops->pread(B, fd, buf, want, off + done);
		long long at;

		if (n != (ssize_t)want) {
			print_error("%s.%s: pread(%zu at %llu) = %s\n", label, cname, want,
				    (unsigned long long)(off + done), rc_name(n));
			free(buf);
			_fail(file, line);
		}
		if ((at = pat_diff(buf, want, off + done, seed)) >= 0) {
			print_error("%s.%s: byte at %llu is %#x, want %#x (%s)\n", label, cname,
				    (unsigned long long)(off + done + (uint64_t)at), buf[at],
				    pat_byte(off + done + (uint64_t)at, seed),
				    seed ? "data" : "hole");
			free(buf);
			_fail(file, line);
		}
		done += want;
	}
	free(buf);
}
#define EXPECT_RANGE(fd, off, len, seed) expect_range(fd, off, len, seed, __FILE__, __LINE__)

/* The whole file at path reads as the string s, and not a byte more. */
static void expect_content(const char *path, const char *s, const char *file, int line)
{
	size_t len = strlen(s);
	char *buf = xmalloc(len + 64);
	int fd = open_ok(path, O_RDONLY, 0, file, line);
	ssize_t n = ops->pread(B, fd, buf, len + 64, 0);

	ops->close(B, fd);
	if (n != (ssize_t)len || memcmp(buf, s, len) != 0) {
		print_error("%s.%s: %s holds %s bytes \"%.*s\", want \"%s\"\n", label, cname,
			    path, rc_name(n), n > 0 ? (int)n : 0, buf, s);
		free(buf);
		_fail(file, line);
	}
	free(buf);
}
#define EXPECT_CONTENT(path, s) expect_content(path, s, __FILE__, __LINE__)

/* Make path a file holding s (mode 0644). */
static void put_file(const char *path, const char *s, const char *file, int line)
{
	int fd = open_ok(path, O_CREAT | O_TRUNC | O_WRONLY, 0644, file, line);
	ssize_t n = ops->pwrite(B, fd, s, strlen(s), 0);

	check_eq(n, (long long)strlen(s), "pwrite", file, line);
	check_eq(ops->close(B, fd), 0, "close", file, line);
}
#define PUT(path, s) put_file(path, s, __FILE__, __LINE__)

static struct stat stat_ok(const char *path, bool follow, const char *file, int line)
{
	struct stat st;
	int rc = follow ? ops->stat(B, path, &st) : ops->lstat(B, path, &st);

	if (rc != 0) {
		print_error("%s.%s: %s(%s) = %s\n", label, cname, follow ? "stat" : "lstat", path,
			    rc_name(rc));
		_fail(file, line);
	}
	return st;
}
#define STAT(path) stat_ok(path, true, __FILE__, __LINE__)
#define LSTAT(path) stat_ok(path, false, __FILE__, __LINE__)

static struct stat fstat_ok(int fd, const char *file, int line)
{
	struct stat st;

	check_eq(ops->fstat(B, fd, &st), 0, "fstat", file, line);
	return st;
}
#define FSTAT(fd) fstat_ok(fd, __FILE__, __LINE__)

static struct timespec now_real(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts;
}

static int ts_cmp(struct timespec a, struct timespec b)
{
	if (a.tv_sec != b.tv_sec)
		return a.tv_sec < b.tv_sec ? -1 : 1;
	if (a.tv_nsec != b.tv_nsec)
		return a.tv_nsec < b.tv_nsec ? -1 : 1;
	return 0;
}

/* A time set "now" lies within a few seconds of this machine's clock. */
static bool ts_recent(struct timespec t)
{
	struct timespec n = now_real();

	return t.tv_sec >= n.tv_sec - 5 && t.tv_sec <= n.tv_sec + 5;
}

static bool ts_eq(struct timespec a, time_t sec, long nsec)
{
	return a.tv_sec == sec && a.tv_nsec == nsec;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Set path's atime and mtime to a time long past, so that any change shows. */
static void times_old(const char *path, const char *file, int line)
{
	struct timespec t[2] = {{1000000000, 0}, {1000000000, 0}};

	check_eq(ops->utimens(B, path, t), 0, "utimens(old)", file, line);
}
#define TIMES_OLD(path) times_old(path, __FILE__, __LINE__)

/* ---- opening and creating -------------------------------------------------- */

static void t_open_flags(void **state)
{
	char name[PX_NAME_MAX + 2];
	char buf[16];
	struct stat st;
	int fd;

	fd = OPEN(P("f"), O_CREAT | O_EXCL | O_RDWR, 0640);
	CHECK(ops->pwrite(B, fd, "hello", 5, 0), 5);
	st = FSTAT(fd);
	TRUE(S_ISREG(st.st_mode));
	CHECK(st.st_mode & 07777, 0640);
	CHECK(st.st_size, 5);
	CHECK(st.st_nlink, 1);
	CHECK(ops->close(B, fd), 0);

	/* O_EXCL refuses an existing name; O_CREAT alone opens it, keeping the data. */
	CHECK(ops->open(B, P("f"), O_CREAT | O_EXCL | O_RDWR, 0644), -EEXIST);
	fd = OPEN(P("f"), O_CREAT | O_RDWR, 0600);
	CHECK(ops->pread(B, fd, buf, sizeof(buf), 0), 5);
	CHECK(memcmp(buf, "hello", 5), 0);
	CHECK(FSTAT(fd).st_mode & 07777, 0640); /* the mode of an existing file stays */
	CHECK(ops->close(B, fd), 0);

	/* O_TRUNC empties it. */
	fd = OPEN(P("f"), O_RDWR | O_TRUNC, 0);
	CHECK(FSTAT(fd).st_size, 0);
	CHECK(ops->pread(B, fd, buf, sizeof(buf), 0), 0);
	CHECK(ops->close(B, fd), 0);
	CHECK(STAT(P("f")).st_size, 0);

	/* Access modes are enforced per descriptor. */
	fd = OPEN(P("f"), O_RDONLY, 0);
	CHECK(ops->pwrite(B, fd, "x", 1, 0), -EBADF);
	CHECK(ops->close(B, fd), 0);
	fd = OPEN(P("f"), O_WRONLY, 0);
	CHECK(ops->pread(B, fd, buf, 1, 0), -EBADF);
	CHECK(ops->close(B, fd), 0);

	/* Missing names, directories, files used as directories. */
	CHECK(ops->open(B, P("missing"), O_RDONLY, 0), -ENOENT);
	CHECK(ops->open(B, P("nodir/f"), O_CREAT | O_RDWR, 0644), -ENOENT);
	CHECK(ops->mkdir(B, P("d"), 0755), 0);
	CHECK(ops->open(B, P("d"), O_WRONLY, 0), -EISDIR);
	CHECK(ops->open(B, P("d"), O_RDWR, 0), -EISDIR);
	CHECK(ops->open(B, P("d"), O_CREAT | O_RDWR, 0644), -EISDIR);
	CHECK(ops->open(B, P("f/x"), O_RDONLY, 0), -ENOTDIR);
	CHECK(ops->open(B, P("f/x"), O_CREAT | O_RDWR, 0644), -ENOTDIR);
	CHECK(ops->stat(B, P("f/x"), &st), -ENOTDIR);
	CHECK(ops->mkdir(B, P("f/x"), 0755), -ENOTDIR);

	/* 255 bytes is the longest name; 256 is refused by every call. */
	memset(name, 'n', PX_NAME_MAX + 1);
	name[PX_NAME_MAX + 1] = '\0';
	CHECK(ops->open(B, P(name), O_CREAT | O_RDWR, 0644), -ENAMETOOLONG);
	CHECK(ops->stat(B, P(name), &st), -ENAMETOOLONG);
	CHECK(ops->mkdir(B, P(name), 0755), -ENAMETOOLONG);
	name[PX_NAME_MAX] = '\0';
	fd = OPEN(P(name), O_CREAT | O_EXCL | O_RDWR, 0644);
	CHECK(ops->close(B, fd), 0);
	TRUE(S_ISREG(STAT(P(name)).st_mode));
	CHECK(ops->unlink(B, P(name)), 0);
}

/* ---- reading and writing --------------------------------------------------- */

static void t_rw_offsets(void **state)
{
	uint8_t *model = xmalloc(2 * MIB), *buf = xmalloc(2 * MIB);
	struct {
		uint64_t off, len, seed;
	} w[] = {
		{0, 10000, 1},
		{7000, 5000, 2},            /* overlaps and extends */
		{CHUNK - 100, 300, 3},      /* across a chunk boundary */
		{3, 1, 4},                  /* one byte inside */
		{CHUNK + 5000, 200000, 5},  /* leaves a gap */
		{CHUNK - 1, 2, 6},
	};
	uint64_t size = 0;
	int fd = OPEN(P("f"), O_CREAT | O_RDWR, 0644);

	memset(model, 0, 2 * MIB);
	for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
		PWRITE(fd, w[i].off, w[i].len, w[i].seed);
		pat_fill(model + w[i].off, w[i].len, w[i].off, w[i].seed);
		if (w[i].off + w[i].len > size)
			size = w[i].off + w[i].len;
		CHECK(FSTAT(fd).st_size, size);
	}
	CHECK(ops->pread(B, fd, buf, 2 * MIB, 0), size); /* short at the end */
	CHECK(memcmp(buf, model, size), 0);
	/* Reads that start inside and end past the end are short, past the end empty. */
	CHECK(ops->pread(B, fd, buf, 4096, size - 100), 100);
	CHECK(memcmp(buf, model + size - 100, 100), 0);
	CHECK(ops->pread(B, fd, buf, 4096, size), 0);
	CHECK(ops->pread(B, fd, buf, 4096, size + 12345), 0);
	CHECK(ops->close(B, fd), 0);

	/* A second descriptor sees it all, and so does a fresh open. */
	fd = OPEN(P("f"), O_RDONLY, 0);
	memset(buf, 0xee, size);
	CHECK(ops->pread(B, fd, buf, size, 0), size);
	CHECK(memcmp(buf, model, size), 0);
	CHECK(ops->close(B, fd), 0);
	CHECK(STAT(P("f")).st_size, size);
	free(model);
	free(buf);
}

static void t_holes(void **state)
{
	int fd = OPEN(P("sparse"), O_CREAT | O_RDWR, 0644);
	uint64_t far = 3 * CHUNK + 5;

	PWRITE(fd, 0, 4096, 7);
	PWRITE(fd, far, 10, 8);
	CHECK(FSTAT(fd).st_size, far + 10);
	CHECK(STAT(P("sparse")).st_size, far + 10);
	EXPECT_RANGE(fd, 0, 4096, 7);
	EXPECT_RANGE(fd, 4096, far - 4096, 0); /* never written: zeros, over whole chunks */
	EXPECT_RANGE(fd, far, 10, 8);
	/* A write into the middle of the hole leaves zeros on both sides. */
	PWRITE(fd, 2 * CHUNK + 100, 50, 9);
	EXPECT_RANGE(fd, 2 * CHUNK, 100, 0);
	EXPECT_RANGE(fd, 2 * CHUNK + 100, 50, 9);
	EXPECT_RANGE(fd, 2 * CHUNK + 150, far - 2 * CHUNK - 150, 0);
	CHECK(FSTAT(fd).st_size, far + 10);
	CHECK(ops->close(B, fd), 0);

	/* A file that is only a hole. */
	fd = OPEN(P("empty"), O_CREAT | O_RDWR, 0644);
	CHECK(ops->ftruncate(B, fd, 2 * CHUNK + 7), 0);
	CHECK(FSTAT(fd).st_size, 2 * CHUNK + 7);
	EXPECT_RANGE(fd, 0, 2 * CHUNK + 7, 0);
	CHECK(ops->close(B, fd), 0);
}

static void t_truncate(void **state)
{
	uint64_t len = 3 * CHUNK + 100;
	struct stat st;
	int fd = OPEN(P("f"), O_CREAT | O_RDWR, 0644);

	PWRITE(fd, 0, len, 11);
	/* Down across a chunk boundary: the tail is gone, also after growing again. */
	CHECK(ops->ftruncate(B, fd, 2 * CHUNK + 10), 0);
	CHECK(FSTAT(fd).st_size, 2 * CHUNK + 10);
	EXPECT_RANGE(fd, 0, 2 * CHUNK + 10, 11);
	CHECK(ops->truncate(B, P("f"), 4 * CHUNK), 0);
	CHECK(FSTAT(fd).st_size, 4 * CHUNK);
	CHECK(STAT(P("f")).st_size, 4 * CHUNK);
	EXPECT_RANGE(fd, 0, 2 * CHUNK + 10, 11);
	EXPECT_RANGE(fd, 2 * CHUNK + 10, 2 * CHUNK - 10, 0);

	/* Exactly at a boundary, and one byte short of one. */
	CHECK(ops->ftruncate(B, fd, CHUNK), 0);
	CHECK(ops->ftruncate(B, fd, CHUNK + 1), 0);
	EXPECT_RANGE(fd, 0, CHUNK, 11);
	EXPECT_RANGE(fd, CHUNK, 1, 0);
	CHECK(ops->ftruncate(B, fd, CHUNK - 1), 0);
	CHECK(ops->ftruncate(B, fd, CHUNK), 0);
	EXPECT_RANGE(fd, 0, CHUNK - 1, 11);
	EXPECT_RANGE(fd, CHUNK - 1, 1, 0);
	/* Inside a chunk. */
	CHECK(ops->ftruncate(B, fd, 1000), 0);
	CHECK(ops->ftruncate(B, fd, 5000), 0);
	EXPECT_RANGE(fd, 0, 1000, 11);
	EXPECT_RANGE(fd, 1000, 4000, 0);

	/* To 0, then a write past the start leaves a hole. */
	CHECK(ops->ftruncate(B, fd, 0), 0);
	CHECK(FSTAT(fd).st_size, 0);
	CHECK(ops->pread(B, fd, &st, 1, 0), 0);
	PWRITE(fd, 100, 10, 12);
	CHECK(FSTAT(fd).st_size, 110);
	EXPECT_RANGE(fd, 0, 100, 0);
	EXPECT_RANGE(fd, 100, 10, 12);
	CHECK(ops->close(B, fd), 0);

	/* By path: the same, and the errors. */
	CHECK(ops->truncate(B, P("f"), 0), 0);
	CHECK(STAT(P("f")).st_size, 0);
	CHECK(ops->mkdir(B, P("d"), 0755), 0);
	CHECK(ops->truncate(B, P("d"), 0), -EISDIR);
	CHECK(ops->truncate(B, P("missing"), 0), -ENOENT);
}

static void t_append(void **state)
{
	uint64_t big = 700 * KIB;
	uint8_t *buf = xmalloc(big);
	int a, b;

	PUT(P("f"), "base");
	a = OPEN(P("f"), O_WRONLY | O_APPEND, 0);
	b = OPEN(P("f"), O_WRONLY | O_APPEND, 0);
	CHECK(ops->write(B, a, "aaaa", 4), 4);
	CHECK(ops->write(B, b, "bbbbbb", 6), 6);
	CHECK(ops->write(B, a, "cc", 2), 2);
	EXPECT_CONTENT(P("f"), "baseaaaabbbbbbcc");

	/* Large appends that cross chunk boundaries, alternating. */
	for (int i = 0; i < 4; i++) {
		int fd = i % 2 ? b : a;

		memset(buf, 'A' + i, big);
		CHECK(ops->write(B, fd, buf, big), big);
	}
	CHECK(ops->close(B, a), 0);
	CHECK(ops->close(B, b), 0);
	CHECK(STAT(P("f")).st_size, 16 + 4 * big);
	a = OPEN(P("f"), O_RDONLY, 0);
	for (int i = 0; i < 4; i++) {
		CHECK(ops->pread(B, a, buf, big, 16 + i * big), big);
		for (uint64_t j = 0; j < big; j += 4099)
			CHECK(buf[j], 'A' + i);
		CHECK(buf[big - 1], 'A' + i);
	}
	CHECK(ops->close(B, a), 0);

	/* A plain descriptor writes at its position, from 0. */
	a = OPEN(P("g"), O_CREAT | O_WRONLY, 0644);
	CHECK(ops->write(B, a, "12", 2), 2);
	CHECK(ops->write(B, a, "345", 3), 3);
	CHECK(ops->close(B, a), 0);
	EXPECT_CONTENT(P("g"), "12345");
	free(buf);
}

static void t_big_offsets(void **state)
{
	uint64_t off = 5 * GIB + 12345, len = 100000;
	int fd = OPEN(P("big"), O_CREAT | O_RDWR, 0644);

	PWRITE(fd, off, len, 21);
	CHECK(FSTAT(fd).st_size, off + len);
	CHECK(STAT(P("big")).st_size, off + len);
	EXPECT_RANGE(fd, off, len, 21);
	EXPECT_RANGE(fd, off - 4096, 4096, 0);
	EXPECT_RANGE(fd, 4 * GIB - 10, 20, 0);
	/* Across the 4 GiB line, where a 32-bit offset would wrap. */
	PWRITE(fd, 4 * GIB - 50, 100, 22);
	EXPECT_RANGE(fd, 4 * GIB - 50, 100, 22);
	EXPECT_RANGE(fd, 0, 4096, 0); /* nothing landed at the wrapped offset */
	CHECK(ops->close(B, fd), 0);

	fd = OPEN(P("big"), O_RDWR, 0);
	EXPECT_RANGE(fd, off, len, 21);
	/* Truncating away everything past 4 GiB + 1, then the byte before 4 GiB. */
	CHECK(ops->ftruncate(B, fd, 4 * GIB + 1), 0);
	CHECK(FSTAT(fd).st_size, 4 * GIB + 1);
	EXPECT_RANGE(fd, 4 * GIB - 50, 51, 22);
	CHECK(ops->ftruncate(B, fd, 4 * GIB - 1), 0);
	CHECK(FSTAT(fd).st_size, 4 * GIB - 1);
	CHECK(ops->ftruncate(B, fd, off + len), 0);
	EXPECT_RANGE(fd, 4 * GIB - 50, 49, 22);
	EXPECT_RANGE(fd, 4 * GIB - 1, 4096, 0);
	EXPECT_RANGE(fd, off, len, 0);
	CHECK(ops->close(B, fd), 0);
}

/* ---- rename ---------------------------------------------------------------- */

static void t_rename_file(void **state)
{
	struct stat st, a, c2;

	/* Plain: same inode, new name, old name gone. */
	PUT(P("a"), "A");
	a = STAT(P("a"));
	CHECK(ops->rename(B, P("a"), P("b"), 0), 0);
	CHECK(ops->stat(B, P("a"), &st), -ENOENT);
	CHECK(STAT(P("b")).st_ino, a.st_ino);
	EXPECT_CONTENT(P("b"), "A");

	/* Across directories. */
	CHECK(ops->mkdir(B, P("d1"), 0755), 0);
	CHECK(ops->mkdir(B, P("d2"), 0755), 0);
	PUT(P("d1/x"), "X");
	a = STAT(P("d1/x"));
	CHECK(ops->rename(B, P("d1/x"), P("d2/y"), 0), 0);
	CHECK(ops->stat(B, P("d1/x"), &st), -ENOENT);
	CHECK(STAT(P("d2/y")).st_ino, a.st_ino);
	EXPECT_CONTENT(P("d2/y"), "X");

	/* Over an existing file: the victim loses that name (its other link shows it). */
	PUT(P("c"), "C");
	CHECK(ops->link(B, P("c"), P("c2")), 0);
	PUT(P("s"), "S");
	a = STAT(P("s"));
	CHECK(ops->rename(B, P("s"), P("c"), 0), 0);
	CHECK(STAT(P("c")).st_ino, a.st_ino);
	EXPECT_CONTENT(P("c"), "S");
	c2 = STAT(P("c2"));
	TRUE(c2.st_ino != a.st_ino);
	CHECK(c2.st_nlink, 1);
	EXPECT_CONTENT(P("c2"), "C");
	CHECK(ops->stat(B, P("s"), &st), -ENOENT);

	/* Onto itself, and onto another link of itself: nothing happens. */
	CHECK(ops->rename(B, P("c"), P("c"), 0), 0);
	EXPECT_CONTENT(P("c"), "S");
	CHECK(ops->link(B, P("c"), P("c3")), 0);
	CHECK(ops->rename(B, P("c"), P("c3"), 0), 0);
	CHECK(STAT(P("c")).st_nlink, 2);
	CHECK(STAT(P("c3")).st_ino, a.st_ino);

	/* RENAME_NOREPLACE. */
	PUT(P("p"), "P");
	PUT(P("q"), "Q");
	CHECK(ops->rename(B, P("p"), P("q"), RENAME_NOREPLACE), -EEXIST);
	EXPECT_CONTENT(P("p"), "P");
	EXPECT_CONTENT(P("q"), "Q");
	CHECK(ops->rename(B, P("p"), P("r"), RENAME_NOREPLACE), 0);
	EXPECT_CONTENT(P("r"), "P");
	CHECK(ops->stat(B, P("p"), &st), -ENOENT);

	/* RENAME_EXCHANGE: two files, then a file and a directory. */
	PUT(P("e1"), "one");
	PUT(P("e2"), "two");
	CHECK(ops->rename(B, P("e1"), P("e2"), RENAME_EXCHANGE), 0);
	EXPECT_CONTENT(P("e1"), "two");
	EXPECT_CONTENT(P("e2"), "one");
	CHECK(ops->mkdir(B, P("ed"), 0755), 0);
	PUT(P("ed/inner"), "in");
	CHECK(ops->rename(B, P("e1"), P("ed"), RENAME_EXCHANGE), 0);
	TRUE(S_ISDIR(STAT(P("e1")).st_mode));
	EXPECT_CONTENT(P("e1/inner"), "in");
	EXPECT_CONTENT(P("ed"), "two");
	CHECK(ops->rename(B, P("e2"), P("nothere"), RENAME_EXCHANGE), -ENOENT);
	EXPECT_CONTENT(P("e2"), "one");
	CHECK(ops->rename(B, P("e2"), P("r"), RENAME_EXCHANGE | RENAME_NOREPLACE), -EINVAL);

	/* Errors. */
	CHECK(ops->rename(B, P("missing"), P("z"), 0), -ENOENT);
	CHECK(ops->rename(B, P("r"), P("nodir/z"), 0), -ENOENT);
	CHECK(ops->rename(B, P("r/x"), P("z"), 0), -ENOTDIR);
	EXPECT_CONTENT(P("r"), "P");
}

static void t_rename_dir(void **state)
{
	struct stat st, d, pf, pg;

	CHECK(ops->mkdir(B, P("D"), 0755), 0);
	CHECK(ops->mkdir(B, P("D/sub"), 0755), 0);
	PUT(P("D/sub/f"), "deep");
	d = STAT(P("D"));
	CHECK(ops->rename(B, P("D"), P("E"), 0), 0);
	CHECK(ops->stat(B, P("D"), &st), -ENOENT);
	CHECK(ops->stat(B, P("D/sub/f"), &st), -ENOENT);
	CHECK(STAT(P("E")).st_ino, d.st_ino);
	EXPECT_CONTENT(P("E/sub/f"), "deep");

	/* Over an empty directory: allowed. */
	CHECK(ops->mkdir(B, P("F"), 0755), 0);
	CHECK(ops->rename(B, P("E"), P("F"), 0), 0);
	CHECK(ops->stat(B, P("E"), &st), -ENOENT);
	EXPECT_CONTENT(P("F/sub/f"), "deep");

	/* Over a non-empty directory, a file; a file over a directory. */
	CHECK(ops->mkdir(B, P("G"), 0755), 0);
	PUT(P("G/x"), "x");
	CHECK(ops->rename(B, P("F"), P("G"), 0), -ENOTEMPTY);
	PUT(P("file"), "file");
	CHECK(ops->rename(B, P("F"), P("file"), 0), -ENOTDIR);
	CHECK(ops->rename(B, P("file"), P("F"), 0), -EISDIR);
	/* Into itself or below. */
	CHECK(ops->rename(B, P("F"), P("F/sub/new"), 0), -EINVAL);
	CHECK(ops->rename(B, P("F"), P("F/new"), 0), -EINVAL);
	EXPECT_CONTENT(P("F/sub/f"), "deep");
	EXPECT_CONTENT(P("G/x"), "x");
	EXPECT_CONTENT(P("file"), "file");

	/* Moving a subdirectory moves a parent link: ".." counts in st_nlink. */
	pf = STAT(P("F"));
	pg = STAT(P("G"));
	CHECK(pf.st_nlink, 3);
	CHECK(pg.st_nlink, 2);
	CHECK(ops->rename(B, P("F/sub"), P("G/sub2"), 0), 0);
	CHECK(STAT(P("F")).st_nlink, 2);
	CHECK(STAT(P("G")).st_nlink, 3);
	EXPECT_CONTENT(P("G/sub2/f"), "deep");
	CHECK(ops->rename(B, P("G/sub2"), P("G/sub3"), RENAME_NOREPLACE), 0);
	CHECK(ops->rename(B, P("G/sub3"), P("G/x"), RENAME_NOREPLACE), -EEXIST);
	EXPECT_CONTENT(P("G/sub3/f"), "deep");
}

/* ---- links ------------------------------------------------------------------ */

static void t_hard_links(void **state)
{
	struct stat f, g, st;
	int fd;

	PUT(P("f"), "data");
	CHECK(ops->link(B, P("f"), P("g")), 0);
	f = STAT(P("f"));
	g = STAT(P("g"));
	CHECK(f.st_ino, g.st_ino);
	CHECK(f.st_nlink, 2);
	CHECK(g.st_nlink, 2);
	/* Into another directory. */
	CHECK(ops->mkdir(B, P("d"), 0755), 0);
	CHECK(ops->link(B, P("f"), P("d/h")), 0);
	CHECK(STAT(P("g")).st_nlink, 3);

	/* One inode: a write through one name shows through the others. */
	fd = OPEN(P("g"), O_WRONLY, 0);
	CHECK(ops->pwrite(B, fd, "DA", 2, 0), 2);
	CHECK(ops->close(B, fd), 0);
	EXPECT_CONTENT(P("f"), "DAta");
	EXPECT_CONTENT(P("d/h"), "DAta");

	/* Unlinking names keeps the data while one is left. */
	CHECK(ops->unlink(B, P("f")), 0);
	CHECK(ops->stat(B, P("f"), &st), -ENOENT);
	CHECK(STAT(P("g")).st_nlink, 2);
	CHECK(ops->unlink(B, P("d/h")), 0);
	st = STAT(P("g"));
	CHECK(st.st_nlink, 1);
	CHECK(st.st_ino, f.st_ino);
	EXPECT_CONTENT(P("g"), "DAta");

	/* Errors. */
	CHECK(ops->link(B, P("d"), P("dlink")), -EPERM);
	CHECK(ops->link(B, P("g"), P("d")), -EEXIST);
	PUT(P("other"), "o");
	CHECK(ops->link(B, P("g"), P("other")), -EEXIST);
	CHECK(ops->link(B, P("missing"), P("m2")), -ENOENT);
	CHECK(ops->link(B, P("g"), P("nodir/x")), -ENOENT);
	CHECK(STAT(P("g")).st_nlink, 1);
}

static void t_symlinks(void **state)
{
	char buf[2048], target[1001];
	struct stat st, t;
	int fd;

	PUT(P("t"), "target data");
	t = STAT(P("t"));
	CHECK(ops->symlink(B, "t", P("s")), 0);
	CHECK(ops->readlink(B, P("s"), buf, sizeof(buf)), 1);
	CHECK(buf[0], 't');
	/* stat follows, lstat does not. */
	st = STAT(P("s"));
	TRUE(S_ISREG(st.st_mode));
	CHECK(st.st_ino, t.st_ino);
	CHECK(st.st_size, 11);
	st = LSTAT(P("s"));
	TRUE(S_ISLNK(st.st_mode));
	TRUE(st.st_ino != t.st_ino);
	CHECK(st.st_size, 1); /* a symlink's size is its target's length */
	EXPECT_CONTENT(P("s"), "target data");

	/* A symlink in the middle of a path. */
	CHECK(ops->mkdir(B, P("dir"), 0755), 0);
	PUT(P("dir/in"), "inside");
	CHECK(ops->symlink(B, "dir", P("sd")), 0);
	EXPECT_CONTENT(P("sd/in"), "inside");
	CHECK(ops->symlink(B, "../t", P("dir/up")), 0);
	EXPECT_CONTENT(P("sd/up"), "target data");

	/* Dangling and looping. */
	CHECK(ops->symlink(B, "nonexistent", P("dl")), 0);
	CHECK(ops->stat(B, P("dl"), &st), -ENOENT);
	TRUE(S_ISLNK(LSTAT(P("dl")).st_mode));
	CHECK(ops->open(B, P("dl"), O_RDONLY, 0), -ENOENT);
	CHECK(ops->symlink(B, "l2", P("l1")), 0);
	CHECK(ops->symlink(B, "l1", P("l2")), 0);
	CHECK(ops->stat(B, P("l1"), &st), -ELOOP);
	CHECK(ops->open(B, P("l1"), O_RDONLY, 0), -ELOOP);
	CHECK(ops->stat(B, P("l1/x"), &st), -ELOOP);

	/* A long target comes back whole; a short buffer gets its first bytes. */
	memset(target, 'a', 1000);
	for (int i = 100; i < 1000; i += 100)
		target[i] = '/';
	target[1000] = '\0';
	CHECK(ops->symlink(B, target, P("long")), 0);
	CHECK(ops->readlink(B, P("long"), buf, sizeof(buf)), 1000);
	CHECK(memcmp(buf, target, 1000), 0);
	CHECK(LSTAT(P("long")).st_size, 1000);
	memset(buf, 0, sizeof(buf));
	CHECK(ops->readlink(B, P("long"), buf, 10), 10);
	CHECK(memcmp(buf, target, 10), 0);

	/* Errors. */
	CHECK(ops->symlink(B, "x", P("t")), -EEXIST);
	CHECK(ops->symlink(B, "x", P("s")), -EEXIST);
	CHECK(ops->readlink(B, P("t"), buf, sizeof(buf)), -EINVAL);
	CHECK(ops->readlink(B, P("missing"), buf, sizeof(buf)), -ENOENT);

	/* Removing the link leaves the target; removing the target dangles the link. */
	CHECK(ops->unlink(B, P("s")), 0);
	EXPECT_CONTENT(P("t"), "target data");
	CHECK(ops->symlink(B, "t", P("s")), 0);
	CHECK(ops->unlink(B, P("t")), 0);
	CHECK(ops->stat(B, P("s"), &st), -ENOENT);
	fd = OPEN(P("s"), O_CREAT | O_WRONLY, 0644); /* O_CREAT through a dangling link creates the target */
	CHECK(ops->close(B, fd), 0);
	TRUE(S_ISREG(LSTAT(P("t")).st_mode));
}

/* ---- unlink, rmdir, mkdir ------------------------------------------------------ */

static void t_unlink_open(void **state)
{
	struct stat st;
	int fd = OPEN(P("f"), O_CREAT | O_RDWR, 0644), fd2;

	PWRITE(fd, 0, 100, 31);
	CHECK(ops->unlink(B, P("f")), 0);
	CHECK(ops->stat(B, P("f"), &st), -ENOENT);
	CHECK(ops->open(B, P("f"), O_RDONLY, 0), -ENOENT);
	/* The open descriptor still reads and writes the data. */
	EXPECT_RANGE(fd, 0, 100, 31);
	PWRITE(fd, CHUNK + 10, 1000, 32);
	EXPECT_RANGE(fd, CHUNK + 10, 1000, 32);
	EXPECT_RANGE(fd, 100, CHUNK - 90, 0);
	st = FSTAT(fd);
	CHECK(st.st_size, CHUNK + 1010);
	CHECK(st.st_nlink, 0);

	/* A new file under the old name is another inode. */
	fd2 = OPEN(P("f"), O_CREAT | O_EXCL | O_RDWR, 0644);
	CHECK(FSTAT(fd2).st_size, 0);
	TRUE(FSTAT(fd2).st_ino != st.st_ino);
	CHECK(ops->pwrite(B, fd2, "new", 3, 0), 3);
	EXPECT_RANGE(fd, 0, 100, 31);
	CHECK(ops->close(B, fd), 0);
	CHECK(ops->close(B, fd2), 0);
	EXPECT_CONTENT(P("f"), "new");
	CHECK(STAT(P("f")).st_nlink, 1);
}

static void t_dir_errors(void **state)
{
	struct stat st, parent;

	CHECK(ops->mkdir(B, P("d"), 0750), 0);
	st = STAT(P("d"));
	TRUE(S_ISDIR(st.st_mode));
	CHECK(st.st_mode & 07777, 0750);
	CHECK(st.st_nlink, 2);
	PUT(P("d/f"), "f");
	CHECK(ops->mkdir(B, P("d"), 0755), -EEXIST);
	CHECK(ops->mkdir(B, P("d/f"), 0755), -EEXIST);
	CHECK(ops->mkdir(B, P("nodir/x"), 0755), -ENOENT);
	CHECK(ops->rmdir(B, P("d")), -ENOTEMPTY);
	CHECK(ops->rmdir(B, P("d/f")), -ENOTDIR);
	CHECK(ops->unlink(B, P("d")), -EISDIR);
	CHECK(ops->rmdir(B, P("missing")), -ENOENT);
	CHECK(ops->unlink(B, P("missing")), -ENOENT);
	CHECK(ops->rmdir(B, P("d/.")), -EINVAL);
	CHECK(ops->unlink(B, P("d/f/x")), -ENOTDIR);

	/* Subdirectories count in the parent's link count. */
	parent = STAT(cdir);
	CHECK(ops->mkdir(B, P("d/s1"), 0755), 0);
	CHECK(ops->mkdir(B, P("d/s2"), 0755), 0);
	CHECK(STAT(P("d")).st_nlink, 4);
	CHECK(ops->rmdir(B, P("d/s1")), 0);
	CHECK(STAT(P("d")).st_nlink, 3);
	CHECK(ops->stat(B, P("d/s1"), &st), -ENOENT);

	/* Emptied, it goes. */
	CHECK(ops->unlink(B, P("d/f")), 0);
	CHECK(ops->rmdir(B, P("d/s2")), 0);
	CHECK(ops->rmdir(B, P("d")), 0);
	CHECK(ops->stat(B, P("d"), &st), -ENOENT);
	CHECK(STAT(cdir).st_nlink, parent.st_nlink - 1);
	CHECK(ops->mkdir(B, P("d"), 0755), 0); /* and the name is free again */
}

/* ---- permissions -------------------------------------------------------------- */

static void t_perms_root(void **state)
{
	struct stat st;
	int fd;

	PUT(P("f"), "root");
	CHECK(ops->chmod(B, P("f"), 0600), 0);
	CHECK(STAT(P("f")).st_mode & 07777, 0600);
	CHECK(ops->chmod(B, P("f"), 04755), 0);
	st = STAT(P("f"));
	TRUE(S_ISREG(st.st_mode));
	CHECK(st.st_mode & 07777, 04755);
	CHECK(ops->chmod(B, P("missing"), 0644), -ENOENT);

	CHECK(ops->chmod(B, P("f"), 0644), 0);
	CHECK(ops->chown(B, P("f"), 1000, 1001), 0);
	st = STAT(P("f"));
	CHECK(st.st_uid, 1000);
	CHECK(st.st_gid, 1001);
	CHECK(ops->chown(B, P("f"), (uid_t)-1, 2000), 0); /* -1: unchanged */
	st = STAT(P("f"));
	CHECK(st.st_uid, 1000);
	CHECK(st.st_gid, 2000);
	CHECK(ops->chown(B, P("f"), 0, (gid_t)-1), 0);
	st = STAT(P("f"));
	CHECK(st.st_uid, 0);
	CHECK(st.st_gid, 2000);
	CHECK(ops->mkdir(B, P("d"), 0755), 0);
	CHECK(ops->chown(B, P("d"), 1234, 1234), 0);
	CHECK(STAT(P("d")).st_uid, 1234);

	/* Root reads and writes whatever the mode; execute needs some x bit. */
	CHECK(ops->chmod(B, P("f"), 0), 0);
	fd = OPEN(P("f"), O_RDWR, 0);
	CHECK(ops->pwrite(B, fd, "R", 1, 0), 1);
	CHECK(ops->close(B, fd), 0);
	EXPECT_CONTENT(P("f"), "Root");
	CHECK(ops->access(B, P("f"), R_OK | W_OK), 0);
	CHECK(ops->access(B, P("f"), X_OK), -EACCES);
	CHECK(ops->chmod(B, P("f"), 0100), 0);
	CHECK(ops->access(B, P("f"), X_OK), 0);
	CHECK(ops->access(B, P("f"), F_OK), 0);
	CHECK(ops->access(B, P("missing"), F_OK), -ENOENT);
}

static void t_perms_user(void **state)
{
	struct timespec t[2] = {{1000000000, 0}, {1000000000, 0}};
	char buf[8];
	struct stat st;
	int fd;

	/* As root: the things the user will try to touch. */
	CHECK(ops->mkdir(B, P("pub"), 0777), 0);
	CHECK(ops->chmod(B, P("pub"), 0777), 0);
	PUT(P("pub/rootfile"), "r");
	PUT(P("secret"), "secret");
	CHECK(ops->chmod(B, P("secret"), 0600), 0);
	PUT(P("rootfile"), "rootfile"); /* 0644 */
	CHECK(ops->mkdir(B, P("closed"), 0755), 0);
	CHECK(ops->mkdir(B, P("nox"), 0700), 0);
	PUT(P("nox/f"), "f");
	CHECK(ops->mkdir(B, P("sticky"), 0777), 0);
	CHECK(ops->chmod(B, P("sticky"), 01777), 0);
	PUT(P("sticky/rootfile"), "r");
	CHECK(ops->chmod(B, P("sticky/rootfile"), 0666), 0);

	CHECK(ops->as_user(B, USER_UID, USER_GID), 0);
	/* Reading a 0600 file of root's. */
	CHECK(ops->open(B, P("secret"), O_RDONLY, 0), -EACCES);
	CHECK(ops->access(B, P("secret"), R_OK), -EACCES);
	CHECK(ops->access(B, P("secret"), F_OK), 0);
	CHECK(STAT(P("secret")).st_size, 6); /* stat needs only search permission */
	CHECK(ops->open(B, P("rootfile"), O_WRONLY, 0), -EACCES);
	CHECK(ops->truncate(B, P("rootfile"), 0), -EACCES);
	fd = OPEN(P("rootfile"), O_RDONLY, 0);
	CHECK(ops->pread(B, fd, buf, sizeof(buf), 0), 8);
	CHECK(ops->close(B, fd), 0);
	/* Creating in a 0755 directory of root's; searching a 0700 one. */
	CHECK(ops->open(B, P("closed/new"), O_CREAT | O_WRONLY, 0644), -EACCES);
	CHECK(ops->mkdir(B, P("closed/newdir"), 0755), -EACCES);
	CHECK(ops->symlink(B, "x", P("closed/sl")), -EACCES);
	CHECK(ops->stat(B, P("nox/f"), &st), -EACCES);
	CHECK(ops->open(B, P("nox/f"), O_RDONLY, 0), -EACCES);
	/* Creating in a 0777 one: the user owns what it makes. */
	fd = OPEN(P("pub/mine"), O_CREAT | O_EXCL | O_RDWR, 0644);
	st = FSTAT(fd);
	CHECK(st.st_uid, USER_UID);
	CHECK(st.st_gid, USER_GID);
	CHECK(ops->close(B, fd), 0);
	CHECK(ops->mkdir(B, P("pub/mydir"), 0755), 0);
	CHECK(STAT(P("pub/mydir")).st_uid, USER_UID);
	/* Only the owner changes the mode; nobody but root gives files away. */
	CHECK(ops->chmod(B, P("rootfile"), 0666), -EPERM);
	CHECK(ops->chmod(B, P("pub/mine"), 0600), 0);
	CHECK(ops->chown(B, P("pub/mine"), 0, (gid_t)-1), -EPERM);
	CHECK(ops->chown(B, P("rootfile"), USER_UID, (gid_t)-1), -EPERM);
	/* Times: setting them needs ownership, "now" needs write permission. */
	CHECK(ops->utimens(B, P("rootfile"), t), -EPERM);
	CHECK(ops->utimens(B, P("rootfile"), NULL), -EACCES);
	CHECK(ops->utimens(B, P("pub/mine"), t), 0);
	CHECK(ops->setxattr(B, P("rootfile"), "user.x", "v", 1, 0), -EACCES);
	/* A sticky directory: only the owner of a file removes or renames it. */
	CHECK(ops->unlink(B, P("sticky/rootfile")), -EPERM);
	CHECK(ops->rename(B, P("sticky/rootfile"), P("sticky/moved"), 0), -EPERM);
	fd = OPEN(P("sticky/rootfile"), O_WRONLY, 0); /* writing it is another matter */
	CHECK(ops->close(B, fd), 0);
	PUT(P("sticky/userfile"), "u");
	CHECK(ops->rename(B, P("sticky/userfile"), P("sticky/userfile2"), 0), 0);
	CHECK(ops->unlink(B, P("sticky/userfile2")), 0);
	/* Without the sticky bit, write permission on the directory is enough. */
	CHECK(ops->unlink(B, P("pub/rootfile")), 0);
	/* Removing from a directory of root's. */
	CHECK(ops->unlink(B, P("rootfile")), -EACCES);
	CHECK(ops->as_user(B, 0, 0), 0);

	/* Back as root: everything refused is still there. */
	EXPECT_CONTENT(P("rootfile"), "rootfile");
	EXPECT_CONTENT(P("sticky/rootfile"), "r");
	CHECK(STAT(P("rootfile")).st_mode & 07777, 0644);
	CHECK(STAT(P("pub/mine")).st_mode & 07777, 0600);
	CHECK(STAT(P("pub/mine")).st_uid, USER_UID);
	CHECK(ops->stat(B, P("pub/rootfile"), &st), -ENOENT);
}

/* ---- times --------------------------------------------------------------------- */

static void t_utimens(void **state)
{
	struct timespec t[2] = {{1000000000, 123456789}, {1100000000, 987654321}};
	struct timespec before, after;
	struct stat st;

	PUT(P("f"), "f");
	CHECK(ops->utimens(B, P("f"), t), 0);
	st = STAT(P("f"));
	TRUE(ts_eq(st.st_atim, 1000000000, 123456789));
	TRUE(ts_eq(st.st_mtim, 1100000000, 987654321));

	/* UTIME_OMIT leaves one alone. */
	t[0].tv_nsec = UTIME_OMIT;
	t[1] = (struct timespec){1200000000, 5};
	CHECK(ops->utimens(B, P("f"), t), 0);
	st = STAT(P("f"));
	TRUE(ts_eq(st.st_atim, 1000000000, 123456789));
	TRUE(ts_eq(st.st_mtim, 1200000000, 5));
	t[0] = (struct timespec){1300000000, 7};
	t[1].tv_nsec = UTIME_OMIT;
	CHECK(ops->utimens(B, P("f"), t), 0);
	st = STAT(P("f"));
	TRUE(ts_eq(st.st_atim, 1300000000, 7));
	TRUE(ts_eq(st.st_mtim, 1200000000, 5));

	/* UTIME_NOW sets the clock's time, and so does NULL for both. */
	before = now_real();
	t[0].tv_nsec = UTIME_OMIT;
	t[1].tv_nsec = UTIME_NOW;
	CHECK(ops->utimens(B, P("f"), t), 0);
	after = now_real();
	st = STAT(P("f"));
	TRUE(ts_eq(st.st_atim, 1300000000, 7));
	TRUE(st.st_mtim.tv_sec >= before.tv_sec - 1 && st.st_mtim.tv_sec <= after.tv_sec + 1);
	TRUE(ts_recent(st.st_ctim));
	CHECK(ops->utimens(B, P("f"), NULL), 0);
	st = STAT(P("f"));
	TRUE(ts_recent(st.st_atim));
	TRUE(ts_recent(st.st_mtim));

	/* Directories, symlinks (followed), missing names. */
	CHECK(ops->mkdir(B, P("d"), 0755), 0);
	t[0] = (struct timespec){1400000000, 1};
	t[1] = (struct timespec){1400000001, 2};
	CHECK(ops->utimens(B, P("d"), t), 0);
	st = STAT(P("d"));
	TRUE(ts_eq(st.st_atim, 1400000000, 1));
	TRUE(ts_eq(st.st_mtim, 1400000001, 2));
	CHECK(ops->symlink(B, "f", P("s")), 0);
	CHECK(ops->utimens(B, P("s"), t), 0);
	TRUE(ts_eq(STAT(P("f")).st_mtim, 1400000001, 2));
	TRUE(!ts_eq(LSTAT(P("s")).st_mtim, 1400000001, 2));
	CHECK(ops->utimens(B, P("missing"), t), -ENOENT);
}

static void t_times_change(void **state)
{
	struct timespec c0;
	struct stat st;
	int fd;

	/* Writing changes mtime and ctime. */
	fd = OPEN(P("f"), O_CREAT | O_RDWR, 0644);
	TIMES_OLD(P("f"));
	c0 = FSTAT(fd).st_ctim;
	sleep_ms(20);
	PWRITE(fd, 0, 100, 41);
	st = FSTAT(fd);
	TRUE(ts_recent(st.st_mtim));
	TRUE(ts_cmp(st.st_ctim, c0) > 0);
	/* So does truncating. */
	TIMES_OLD(P("f"));
	c0 = FSTAT(fd).st_ctim;
	sleep_ms(20);
	CHECK(ops->ftruncate(B, fd, 10), 0);
	st = FSTAT(fd);
	TRUE(ts_recent(st.st_mtim));
	TRUE(ts_cmp(st.st_ctim, c0) > 0);
	CHECK(ops->close(B, fd), 0);
	st = STAT(P("f"));
	TRUE(ts_recent(st.st_mtim));

	/* Metadata changes move ctime only. */
	TIMES_OLD(P("f"));
	c0 = STAT(P("f")).st_ctim;
	sleep_ms(20);
	CHECK(ops->chmod(B, P("f"), 0600), 0);
	st = STAT(P("f"));
	TRUE(ts_cmp(st.st_ctim, c0) > 0);
	TRUE(ts_eq(st.st_mtim, 1000000000, 0));
	c0 = st.st_ctim;
	sleep_ms(20);
	CHECK(ops->chown(B, P("f"), 1000, 1000), 0);
	st = STAT(P("f"));
	TRUE(ts_cmp(st.st_ctim, c0) > 0);
	TRUE(ts_eq(st.st_mtim, 1000000000, 0));
	c0 = st.st_ctim;
	sleep_ms(20);
	CHECK(ops->link(B, P("f"), P("f2")), 0);
	TRUE(ts_cmp(STAT(P("f")).st_ctim, c0) > 0);
	c0 = STAT(P("f")).st_ctim;
	sleep_ms(20);
	CHECK(ops->setxattr(B, P("f"), "user.t", "v", 1, 0), 0);
	st = STAT(P("f"));
	TRUE(ts_cmp(st.st_ctim, c0) > 0);
	TRUE(ts_eq(st.st_mtim, 1000000000, 0));

	/* A directory's mtime and ctime move when its entries change. */
	CHECK(ops->mkdir(B, P("d"), 0755), 0);
	TIMES_OLD(P("d"));
	PUT(P("d/a"), "a");
	TRUE(ts_recent(STAT(P("d")).st_mtim));
	TIMES_OLD(P("d"));
	CHECK(ops->rename(B, P("d/a"), P("d/b"), 0), 0);
	TRUE(ts_recent(STAT(P("d")).st_mtim));
	TIMES_OLD(P("d"));
	CHECK(ops->unlink(B, P("d/b")), 0);
	TRUE(ts_recent(STAT(P("d")).st_mtim));
	TIMES_OLD(P("d"));
	CHECK(ops->mkdir(B, P("d/sub"), 0755), 0);
	TRUE(ts_recent(STAT(P("d")).st_mtim));
	TIMES_OLD(P("d"));
	CHECK(ops->symlink(B, "x", P("d/sl")), 0);
	TRUE(ts_recent(STAT(P("d")).st_mtim));
	TIMES_OLD(P("d"));
	CHECK(ops->rmdir(B, P("d/sub")), 0);
	TRUE(ts_recent(STAT(P("d")).st_mtim));
}

/* ---- extended attributes ------------------------------------------------------ */

static void t_xattrs(void **state)
{
	char buf[8192], big[4000];
	ssize_t n;

	PUT(P("f"), "x");
	CHECK(ops->listxattr(B, P("f"), buf, sizeof(buf)), 0);
	CHECK(ops->setxattr(B, P("f"), "user.a", "hello", 5, 0), 0);
	CHECK(ops->getxattr(B, P("f"), "user.a", buf, sizeof(buf)), 5);
	CHECK(memcmp(buf, "hello", 5), 0);
	CHECK(ops->getxattr(B, P("f"), "user.a", NULL, 0), 5); /* size only */
	CHECK(ops->getxattr(B, P("f"), "user.a", buf, 4), -ERANGE);
	CHECK(ops->getxattr(B, P("f"), "user.missing", buf, sizeof(buf)), -ENODATA);

	/* CREATE and REPLACE. */
	CHECK(ops->setxattr(B, P("f"), "user.a", "again", 5, XATTR_CREATE), -EEXIST);
	CHECK(ops->setxattr(B, P("f"), "user.b", "x", 1, XATTR_REPLACE), -ENODATA);
	CHECK(ops->setxattr(B, P("f"), "user.a", "hi", 2, XATTR_REPLACE), 0);
	CHECK(ops->getxattr(B, P("f"), "user.a", buf, sizeof(buf)), 2);
	CHECK(memcmp(buf, "hi", 2), 0);
	CHECK(ops->setxattr(B, P("f"), "user.b", "\0bin\0", 5, XATTR_CREATE), 0);
	CHECK(ops->getxattr(B, P("f"), "user.b", buf, sizeof(buf)), 5);
	CHECK(memcmp(buf, "\0bin\0", 5), 0);
	CHECK(ops->setxattr(B, P("f"), "user.empty", "", 0, 0), 0);
	CHECK(ops->getxattr(B, P("f"), "user.empty", buf, sizeof(buf)), 0);
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)(i * 7);
	CHECK(ops->setxattr(B, P("f"), "user.big", big, sizeof(big), 0), 0);
	CHECK(ops->getxattr(B, P("f"), "user.big", buf, sizeof(buf)), sizeof(big));
	CHECK(memcmp(buf, big, sizeof(big)), 0);

	/* The list: every name once, NUL-terminated, in any order. */
	n = ops->listxattr(B, P("f"), buf, sizeof(buf));
	CHECK(n, sizeof("user.a") + sizeof("user.b") + sizeof("user.empty") + sizeof("user.big"));
	CHECK(ops->listxattr(B, P("f"), NULL, 0), n);
	CHECK(ops->listxattr(B, P("f"), buf, (size_t)n - 1), -ERANGE);
	n = ops->listxattr(B, P("f"), buf, sizeof(buf));
	{
		const char *want[] = {"user.a", "user.b", "user.empty", "user.big"};
		unsigned seen = 0;

		for (ssize_t i = 0; i < n; i += (ssize_t)strlen(buf + i) + 1) {
			bool known = false;

			for (unsigned w = 0; w < 4; w++)
				if (strcmp(buf + i, want[w]) == 0) {
					TRUE(!(seen & (1u << w)));
					seen |= 1u << w;
					known = true;
				}
			TRUE(known);
		}
		CHECK(seen, 0xf);
	}

	/* Remove. */
	CHECK(ops->removexattr(B, P("f"), "user.a"), 0);
	CHECK(ops->getxattr(B, P("f"), "user.a", buf, sizeof(buf)), -ENODATA);
	CHECK(ops->removexattr(B, P("f"), "user.a"), -ENODATA);
	CHECK(ops->listxattr(B, P("f"), NULL, 0),
	      sizeof("user.b") + sizeof("user.empty") + sizeof("user.big"));

	/* On a directory too, and through a symlink (followed). */
	CHECK(ops->mkdir(B, P("d"), 0755), 0);
	CHECK(ops->setxattr(B, P("d"), "user.dir", "D", 1, 0), 0);
	CHECK(ops->getxattr(B, P("d"), "user.dir", buf, sizeof(buf)), 1);
	CHECK(ops->symlink(B, "f", P("s")), 0);
	CHECK(ops->getxattr(B, P("s"), "user.b", buf, sizeof(buf)), 5);
	CHECK(ops->getxattr(B, P("missing"), "user.b", buf, sizeof(buf)), -ENOENT);
	/* A new inode under an old name has none of them. */
	CHECK(ops->unlink(B, P("f")), 0);
	PUT(P("f"), "y");
	CHECK(ops->listxattr(B, P("f"), buf, sizeof(buf)), 0);
}

static void t_statfs(void **state)
{
	struct statvfs sv;

	CHECK(ops->statfs(B, &sv), 0);
	TRUE(sv.f_bsize > 0);
	TRUE(sv.f_frsize > 0);
	TRUE(sv.f_blocks > 0);
	TRUE(sv.f_bfree <= sv.f_blocks);
	TRUE(sv.f_bavail <= sv.f_bfree);
	CHECK(sv.f_namemax, PX_NAME_MAX);
}

/* ---- directories -------------------------------------------------------------- */

struct names {
	unsigned n;
	char seen[8][16];
	bool dup;
};

static int names_add(void *arg, const char *name)
{
	struct names *s = arg;

	for (unsigned i = 0; i < s->n && i < 8; i++)
		if (strcmp(s->seen[i], name) == 0)
			s->dup = true;
	if (s->n < 8)
		snprintf(s->seen[s->n], sizeof(s->seen[0]), "%s", name);
	s->n++;
	return 0;
}

static bool names_has(const struct names *s, const char *name)
{
	for (unsigned i = 0; i < s->n && i < 8; i++)
		if (strcmp(s->seen[i], name) == 0)
			return true;
	return false;
}

static void t_readdir_small(void **state)
{
	struct names s = {0};

	CHECK(ops->mkdir(B, P("d"), 0755), 0);
	CHECK(ops->readdir(B, P("d"), names_add, &s), 0);
	CHECK(s.n, 0);
	PUT(P("d/file"), "f");
	CHECK(ops->mkdir(B, P("d/sub"), 0755), 0);
	CHECK(ops->symlink(B, "file", P("d/link")), 0);
	CHECK(ops->link(B, P("d/file"), P("d/hard")), 0);
	CHECK(ops->readdir(B, P("d"), names_add, &s), 0);
	CHECK(s.n, 4);
	TRUE(!s.dup);
	TRUE(names_has(&s, "file") && names_has(&s, "sub") && names_has(&s, "link") &&
	     names_has(&s, "hard"));
	CHECK(ops->unlink(B, P("d/hard")), 0);
	CHECK(ops->rename(B, P("d/link"), P("d/link2"), 0), 0);
	memset(&s, 0, sizeof(s));
	CHECK(ops->readdir(B, P("d"), names_add, &s), 0);
	CHECK(s.n, 3);
	TRUE(names_has(&s, "link2") && !names_has(&s, "link") && !names_has(&s, "hard"));
	CHECK(ops->readdir(B, P("d/file"), names_add, &s), -ENOTDIR);
	CHECK(ops->readdir(B, P("missing"), names_add, &s), -ENOENT);
}

struct many {
	unsigned n;       /* entries to make */
	unsigned next;    /* creation: the next index to take */
	int err;          /* creation: the first error */
	const struct px_ops *mk; /* creation: the backend that makes them */
	void *mb;
	char dir[PATH_MAX];
	uint8_t *seen;    /* listing: times each index was seen */
	unsigned count, unknown, dups;
	const char *who;  /* listing: the backend's label */
	pthread_mutex_t lock;
};

static void *many_create(void *arg)
{
	struct many *m = arg;
	char path[PATH_MAX + 32];

	for (;;) {
		unsigned i = __atomic_fetch_add(&m->next, 1, __ATOMIC_RELAXED);
		int fd;

		if (i >= m->n || __atomic_load_n(&m->err, __ATOMIC_RELAXED))
			return NULL;
		snprintf(path, sizeof(path), "%s/e%u", m->dir, i);
		fd = m->mk->open(m->mb, path, O_CREAT | O_EXCL | O_WRONLY, 0644);
		if (fd < 0 || (fd = m->mk->close(m->mb, fd)) < 0) {
			pthread_mutex_lock(&m->lock);
			if (!m->err) {
				m->err = fd;
				print_error("%s.%s: create %s: %s\n", label, cname, path,
					    rc_name(fd));
			}
			pthread_mutex_unlock(&m->lock);
			return NULL;
		}
	}
}

static int many_seen(void *arg, const char *name)
{
	struct many *m = arg;
	char *end;
	unsigned long i;

	m->count++;
	if (name[0] != 'e' || !name[1] || (i = strtoul(name + 1, &end, 10), *end) || i >= m->n) {
		if (m->unknown++ < 5)
			print_error("%s.%s: %s lists an unexpected entry \"%s\"\n", label, cname,
				    m->who, name);
		return 0;
	}
	if (m->seen[i]++ && m->dups++ < 5)
		print_error("%s.%s: %s lists \"%s\" twice\n", label, cname, m->who, name);
	return 0;
}

/* List m->dir through lops/lb (labelled who): every entry once, nothing else. */
static void many_list(struct many *m, const struct px_ops *lops, void *lb, const char *who)
{
	struct timespec t0 = now_real(), t1;
	unsigned missing = 0;

	m->seen = calloc(m->n ? m->n : 1, 1);
	assert_non_null(m->seen);
	m->count = m->unknown = m->dups = 0;
	m->who = who;
	CHECK(lops->readdir(lb, m->dir, many_seen, m), 0);
	t1 = now_real();
	for (unsigned i = 0; i < m->n; i++)
		if (!m->seen[i] && missing++ < 5)
			print_error("%s.%s: %s misses entry e%u\n", label, cname, who, i);
	free(m->seen);
	m->seen = NULL;
	print_message("    %s.%s: %u entries listed through %s in %.1f s\n", label, cname, m->n,
		      who, (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	CHECK(missing, 0);
	CHECK(m->dups, 0);
	CHECK(m->unknown, 0);
	CHECK(m->count, m->n);
}

static void t_readdir_many(void **state)
{
	const char *env = getenv("PX_READDIR_N");
	struct many m = {.n = env ? (unsigned)strtoul(env, NULL, 10) : PX_READDIR_DEFAULT,
			 .mk = fill_ops ? fill_ops : ops,
			 .mb = fill_ops ? fill_b : B,
			 .lock = PTHREAD_MUTEX_INITIALIZER};
	const char *tenv = getenv("PX_CREATE_THREADS");
	unsigned nth = tenv ? (unsigned)strtoul(tenv, NULL, 10) : PX_CREATE_THREADS;
	pthread_t th[64];
	struct timespec t0 = now_real(), t1;

	snprintf(m.dir, sizeof(m.dir), "%s", P("many"));
	CHECK(ops->mkdir(B, m.dir, 0755), 0);
	if (nth < 1 || nth > 64)
		nth = PX_CREATE_THREADS;
	for (unsigned i = 0; i < nth; i++)
		CHECK(pthread_create(&th[i], NULL, many_create, &m), 0);
	for (unsigned i = 0; i < nth; i++)
		pthread_join(th[i], NULL);
	CHECK(m.err, 0);
	t1 = now_real();
	print_message("    %s.%s: %u entries made through %s in %.1f s\n", label, cname, m.n,
		      fill_ops ? fill_label : label,
		      (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	many_list(&m, ops, B, label);
	if (fill_ops)
		many_list(&m, fill_ops, fill_b, fill_label);
}

/* ---- concurrency and durability ------------------------------------------------ */

/* Each writer owns [i * WSPAN, (i + 1) * WSPAN): 1.5 MiB, so neighbours share chunks. */
#define WSPAN (3 * CHUNK / 2 + 4097)
#define WPIECE (64 * KIB + 3)

struct writer {
	int fd;       /* a shared descriptor, or -1: open its own */
	unsigned idx;
	char path[PATH_MAX];
	long long err;
};

static void *writer_run(void *arg)
{
	struct writer *w = arg;
	uint8_t *buf = malloc(WPIECE);
	uint64_t base = (uint64_t)w->idx * WSPAN;
	int fd = w->fd;

	if (!buf) {
		w->err = -ENOMEM;
		return NULL;
	}
	if (fd < 0 && (fd = ops->open(B, w->path, O_WRONLY, 0)) < 0) {
		w->err = fd;
		free(buf);
		return NULL;
	}
	/* From the back to the front, so the file's size is contended too. */
	for (uint64_t left = WSPAN; left > 0 && !w->err;) {
		uint64_t len = left < WPIECE ? left : WPIECE;
		uint64_t off = base + left - len;
		ssize_t n;

		pat_fill(buf, (size_t)len, off, 51);
		if ((n = ops->pwrite(B, fd, buf, (size_t)len, off)) != (ssize_t)len)
			w->err = n < 0 ? n : -EIO;
		left -= len;
	}
	if (w->fd < 0) {
		int rc = ops->close(B, fd);

		if (!w->err)
			w->err = rc;
	}
	free(buf);
	return NULL;
}

static void t_concurrent_writers(void **state)
{
	struct writer w[PX_WRITERS];
	pthread_t th[PX_WRITERS];
	int fd = OPEN(P("shared"), O_CREAT | O_RDWR, 0644);

	/* Half share one descriptor, half open their own. */
	for (unsigned i = 0; i < PX_WRITERS; i++) {
		w[i] = (struct writer){.fd = i % 2 ? -1 : fd, .idx = i};
		snprintf(w[i].path, sizeof(w[i].path), "%s", P("shared"));
		CHECK(pthread_create(&th[i], NULL, writer_run, &w[i]), 0);
	}
	for (unsigned i = 0; i < PX_WRITERS; i++)
		pthread_join(th[i], NULL);
	for (unsigned i = 0; i < PX_WRITERS; i++)
		CHECK(w[i].err, 0);
	CHECK(FSTAT(fd).st_size, (uint64_t)PX_WRITERS * WSPAN);
	EXPECT_RANGE(fd, 0, (uint64_t)PX_WRITERS * WSPAN, 51);
	CHECK(ops->close(B, fd), 0);
	fd = OPEN(P("shared"), O_RDONLY, 0);
	EXPECT_RANGE(fd, 0, (uint64_t)PX_WRITERS * WSPAN, 51);
	CHECK(ops->close(B, fd), 0);
}

static void t_fsync(void **state)
{
	int fd = OPEN(P("f"), O_CREAT | O_RDWR, 0644);

	CHECK(ops->fsync(B, fd), 0);
	PWRITE(fd, 0, 3 * CHUNK, 61);
	CHECK(ops->fsync(B, fd), 0);
	CHECK(FSTAT(fd).st_size, 3 * CHUNK);
	CHECK(ops->close(B, fd), 0);
	fd = OPEN(P("f"), O_RDONLY, 0);
	CHECK(ops->fsync(B, fd), 0);
	EXPECT_RANGE(fd, 0, 3 * CHUNK, 61);
	CHECK(ops->close(B, fd), 0);
}

/* ---- running ------------------------------------------------------------------- */

static const struct {
	const char *name;
	CMUnitTestFunction fn;
} cases[] = {
	{"open_flags", t_open_flags},
	{"rw_offsets", t_rw_offsets},
	{"holes", t_holes},
	{"truncate", t_truncate},
	{"append", t_append},
	{"big_offsets", t_big_offsets},
	{"rename_file", t_rename_file},
	{"rename_dir", t_rename_dir},
	{"hard_links", t_hard_links},
	{"symlinks", t_symlinks},
	{"unlink_open", t_unlink_open},
	{"dir_errors", t_dir_errors},
	{"perms_root", t_perms_root},
	{"perms_user", t_perms_user},
	{"utimens", t_utimens},
	{"times_change", t_times_change},
	{"xattrs", t_xattrs},
	{"statfs", t_statfs},
	{"readdir_small", t_readdir_small},
	{"readdir_many", t_readdir_many},
	{"concurrent_writers", t_concurrent_writers},
	{"fsync", t_fsync},
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

/* The case a cmocka test name ("<label>.<case>") stands for. */
static int case_setup(void **state)
{
	const char *full = *state, *dot = strrchr(full, '.');
	int rc;

	cname = dot ? dot + 1 : full;
	snprintf(cdir, sizeof(cdir), "/%s", cname);
	if ((rc = ops->mkdir(B, cdir, 0755)) < 0) {
		print_error("%s.%s: mkdir %s: %s\n", label, cname, cdir, rc_name(rc));
		return -1;
	}
	return 0;
}

/* A failed case may have jumped out as another user: be root again. */
static int case_teardown(void **state)
{
	return ops->as_user(B, 0, 0) < 0 ? -1 : 0;
}

static bool case_wanted(const char *name)
{
	const char *only = getenv("PX_CASES");
	size_t n = strlen(name);

	if (!only || !only[0])
		return true;
	for (const char *p = only; (p = strstr(p, name)); p += n)
		if ((p == only || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
			return true;
	return false;
}

void px_suite_fill(const char *flabel, const struct px_ops *fops, void *fb)
{
	fill_label = flabel;
	fill_ops = fops;
	fill_b = fb;
}

int px_suite_run(const char *run_label, const struct px_ops *run_ops, void *b)
{
	struct CMUnitTest tests[NCASES];
	char names[NCASES][96];
	char group[128];
	size_t n = 0;

	ops = run_ops;
	B = b;
	label = run_label;
	for (size_t i = 0; i < NCASES; i++) {
		if (!case_wanted(cases[i].name))
			continue;
		snprintf(names[n], sizeof(names[n]), "%s.%s", run_label, cases[i].name);
		tests[n] = (struct CMUnitTest){
			.name = names[n],
			.test_func = cases[i].fn,
			.setup_func = case_setup,
			.teardown_func = case_teardown,
			.initial_state = names[n],
		};
		n++;
	}
	snprintf(group, sizeof(group), "posix suite on %s", run_label);
	return _cmocka_run_group_tests(group, tests, n, NULL, NULL);
}
