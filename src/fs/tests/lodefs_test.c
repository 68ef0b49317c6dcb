/*
 * liblodefs (lode/lodefs.h) end to end, against a real loded of three
 * targets in RAM mode started by the harness, once per transport in
 * $LODE_TEST_TRANSPORTS (default "tcp shm").
 *
 * Every test mounts a fresh container. Data is checked by reading it back
 * byte for byte, errors by their exact codes. The larger POSIX behaviour
 * suite lives in tests/posix; this one covers the inode API, the on-object
 * layout's edges (chunk boundaries, offsets past 4 GiB, sparse files), and
 * the consistency rules: two instances seeing each other's writes and
 * sizes, threads writing distinct ranges of one file, unlink while open.
 */
#include <setjmp.h> /* cmocka.h needs these first */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "harness.h"
#include "lode/lodefs.h"

#define NTARGETS 3
#define KIB 1024u
#define MIB (1024u * 1024u)
#define GIB (1024ull * MIB)
#define ROOT LODEFS_ROOT_INO

static struct hs_server srv;
static const char *tp;
static lode_conn_t *conn;
static unsigned label_seq;

struct tctx {
	char label[64];
	lodefs_t *fs;
};

/* Credentials of an unprivileged user (1000:1000, also in group 2000) and another (1001). */
static const gid_t groups_u1[] = {2000};
static const struct lodefs_cred u1 = {1000, 1000, 1, groups_u1};
static const struct lodefs_cred u2 = {1001, 1001, 0, NULL};
static const struct lodefs_cred root_cred = {0, 0, 0, NULL};

/* ---- helpers -------------------------------------------------------------- */

static void fill(void *buf, size_t len, uint64_t seed)
{
	uint8_t *p = buf;
	uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;

	for (size_t i = 0; i < len; i++) {
		if ((i & 7) == 0) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
		}
		p[i] = (uint8_t)(x >> ((i & 7) * 8));
	}
}

static bool all_zero(const void *buf, size_t len)
{
	const uint8_t *p = buf;

	for (size_t i = 0; i < len; i++)
		if (p[i])
			return false;
	return true;
}

static lodefs_t *mount_new(const char *label, uint32_t chunk)
{
	struct lodefs_opts o = {.transport = tp, .channels = 4, .chunk_size = chunk};
	lodefs_t *fs = NULL;
	int rc = lodefs_mount(srv.addr, label, &o, &fs);

	if (rc < 0)
		fail_msg("lodefs_mount %s: %s", label, lode_strerror(rc));
	return fs;
}

static uint64_t mk(lodefs_t *fs, uint64_t parent, const char *name, mode_t mode)
{
	struct stat st;

	if (S_ISDIR(mode))
		assert_int_equal(lodefs_mkdir(fs, NULL, parent, name, mode & 07777, &st), 0);
	else
		assert_int_equal(lodefs_mknod(fs, NULL, parent, name, mode, 0, &st), 0);
	return st.st_ino;
}

static lodefs_file_t *fopen_rw(lodefs_t *fs, uint64_t parent, const char *name)
{
	lodefs_file_t *f = NULL;

	assert_int_equal(lodefs_create(fs, NULL, parent, name, O_RDWR, 0644, NULL, &f), 0);
	return f;
}

static void write_all(lodefs_file_t *f, const void *buf, size_t len, uint64_t off)
{
	assert_int_equal(lodefs_file_write(f, buf, len, off, NULL), (ssize_t)len);
}

static void read_check(lodefs_file_t *f, const void *want, size_t len, uint64_t off)
{
	uint8_t *got = malloc(len ? len : 1);

	assert_non_null(got);
	assert_int_equal(lodefs_file_read(f, got, len, off), (ssize_t)len);
	assert_memory_equal(got, want, len);
	free(got);
}

static uint64_t ino_of(lodefs_t *fs, uint64_t parent, const char *name)
{
	struct stat st;

	assert_int_equal(lodefs_lookup(fs, NULL, parent, name, &st), 0);
	return st.st_ino;
}

static struct stat stat_of(lodefs_t *fs, uint64_t ino)
{
	struct stat st;

	assert_int_equal(lodefs_getattr(fs, ino, &st), 0);
	return st;
}

/* ---- setup ---------------------------------------------------------------- */

static int group_setup(void **state)
{
	struct hs_opts o = {.transport = "auto", .targets = NTARGETS, .ram = true};
	int rc;

	if ((rc = hs_start(&srv, &o)) < 0) {
		fprintf(stderr, "lodefs_test: cannot start loded: %s\n", lode_strerror(rc));
		return -1;
	}
	if ((rc = hs_connect(&srv, tp, 0, &conn)) < 0) {
		fprintf(stderr, "lodefs_test: connect over %s: %s\n", tp, lode_strerror(rc));
		hs_dump_log(&srv, 4096);
		return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	int rc;

	if (conn)
		lode_disconnect(conn);
	conn = NULL;
	rc = hs_stop(&srv);
	if (rc != 0) {
		fprintf(stderr, "lodefs_test: loded exited with %d\n", rc);
		hs_dump_log(&srv, 8192);
	}
	hs_cleanup(&srv);
	return rc == 0 ? 0 : -1;
}

static int fs_setup(void **state)
{
	struct tctx *t = calloc(1, sizeof(*t));
	int rc;

	if (!t)
		return -1;
	snprintf(t->label, sizeof(t->label), "fs-%s-%u", tp, ++label_seq);
	if ((rc = lode_cont_create(conn, t->label, NULL)) < 0) {
		fprintf(stderr, "container %s: %s\n", t->label, lode_strerror(rc));
		free(t);
		return -1;
	}
	t->fs = mount_new(t->label, 0);
	*state = t;
	return 0;
}

static int fs_teardown(void **state)
{
	struct tctx *t = *state;
	int rc = 0;

	if (t->fs)
		rc = lodefs_umount(t->fs);
	if (lode_cont_destroy(conn, t->label) < 0)
		rc = -1;
	free(t);
	return rc == 0 ? 0 : -1;
}

#define T(state) ((struct tctx *)*(state))
#define FS(state) (T(state)->fs)

/* ---- mount ------------------------------------------------------------------ */

static void test_mount_root(void **state)
{
	lodefs_t *fs = FS(state), *fs2;
	struct statvfs sv;
	struct stat st = stat_of(fs, ROOT);
	struct lodefs_opts bad = {.transport = tp, .chunk_size = 100};

	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0755);
	assert_int_equal(st.st_nlink, 2);
	assert_int_equal(st.st_uid, geteuid());
	assert_int_equal(st.st_ino, ROOT);
	assert_string_equal(lodefs_container(fs), T(state)->label);
	assert_true(strlen(lodefs_addr(fs)) > 0);

	assert_int_equal(lodefs_statfs(fs, &sv), 0);
	assert_int_equal(sv.f_bsize, 4096);
	assert_int_equal(sv.f_namemax, 255);
	assert_true(sv.f_blocks > 0);
	assert_true(sv.f_bfree <= sv.f_blocks);

	/* A second mount finds the file system the first made. */
	mk(fs, ROOT, "d", S_IFDIR | 0700);
	fs2 = mount_new(T(state)->label, 0);
	assert_int_equal(stat_of(fs2, ino_of(fs2, ROOT, "d")).st_mode & 07777, 0700);
	assert_int_equal(lodefs_umount(fs2), 0);

	assert_int_equal(lodefs_mount(srv.addr, "no-such-container", &bad, &fs2), -EINVAL);
	bad.chunk_size = 0;
	assert_int_equal(lodefs_mount(srv.addr, "no-such-container", &bad, &fs2),
			 -LODE_ENOCONT);
	assert_int_equal(lodefs_mount(srv.addr, NULL, &bad, &fs2), -EFAULT);
}

static void test_mount_damaged(void **state)
{
	struct lode_key k = {"sb", 2, "sb", 2};
	lode_cont_t *ct;
	lodefs_t *fs2 = NULL;
	char junk[40];

	/* A superblock that is not lodefs's: mount refuses the container. */
	memset(junk, 'x', sizeof(junk));
	assert_int_equal(lode_cont_open(conn, T(state)->label, &ct), 0);
	assert_int_equal(lode_obj_update(ct, lode_oid_make(LODE_OT_FS, 0, 0, 0), &k, junk,
					 sizeof(junk), NULL),
			 0);
	assert_int_equal(lodefs_mount(srv.addr, T(state)->label, NULL, &fs2), -EUCLEAN);
	lode_cont_close(ct);
}

/* ---- files ------------------------------------------------------------------ */

static void test_create_write_read(void **state)
{
	lodefs_t *fs = FS(state);
	lodefs_file_t *f, *g;
	uint8_t buf[10000], got[12000];
	struct stat st;
	uint64_t end = 0;

	fill(buf, sizeof(buf), 1);
	assert_int_equal(lodefs_create(fs, NULL, ROOT, "f", O_RDWR, 0640, &st, &f), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0640);
	assert_int_equal(st.st_size, 0);
	assert_int_equal(st.st_nlink, 1);
	assert_int_equal(lodefs_file_ino(f), st.st_ino);
	assert_int_equal(lodefs_file_write(f, buf, sizeof(buf), 0, &end), (ssize_t)sizeof(buf));
	assert_int_equal(end, sizeof(buf));
	read_check(f, buf, sizeof(buf), 0);
	/* Short at the end, 0 past it. */
	assert_int_equal(lodefs_file_read(f, got, sizeof(got), 5000), 5000);
	assert_memory_equal(got, buf + 5000, 5000);
	assert_int_equal(lodefs_file_read(f, got, 10, 10000), 0);
	assert_int_equal(lodefs_file_read(f, got, 10, 1ull << 40), 0);
	assert_int_equal(lodefs_file_stat(f, &st), 0);
	assert_int_equal(st.st_size, sizeof(buf));
	assert_int_equal(lodefs_file_close(f), 0);

	/* Reopen read-only: data and size survive; writes are refused. */
	assert_int_equal(lodefs_open(fs, NULL, st.st_ino, O_RDONLY, &g), 0);
	read_check(g, buf, sizeof(buf), 0);
	assert_int_equal(lodefs_file_write(g, buf, 1, 0, NULL), -EBADF);
	assert_int_equal(lodefs_file_truncate(g, 0), -EBADF);
	assert_int_equal(lodefs_file_close(g), 0);
	assert_int_equal(stat_of(fs, st.st_ino).st_size, sizeof(buf));

	/* Write-only: reads are refused. */
	assert_int_equal(lodefs_open(fs, NULL, st.st_ino, O_WRONLY, &g), 0);
	assert_int_equal(lodefs_file_read(g, got, 1, 0), -EBADF);
	assert_int_equal(lodefs_file_close(g), 0);

	/* O_EXCL on an existing name; without it the file is opened, O_TRUNC empties it. */
	assert_int_equal(lodefs_create(fs, NULL, ROOT, "f", O_RDWR | O_EXCL, 0644, NULL, &g),
			 -EEXIST);
	assert_int_equal(lodefs_create(fs, NULL, ROOT, "f", O_RDWR | O_TRUNC, 0600, &st, &g), 0);
	assert_int_equal(st.st_size, 0);
	assert_int_equal(st.st_mode & 07777, 0640); /* not re-created */
	assert_int_equal(lodefs_file_read(g, got, 100, 0), 0);
	assert_int_equal(lodefs_file_close(g), 0);

	/* Bad names. */
	assert_int_equal(lodefs_create(fs, NULL, ROOT, "", O_RDWR, 0644, NULL, &g), -EINVAL);
	assert_int_equal(lodefs_create(fs, NULL, ROOT, ".", O_RDWR, 0644, NULL, &g), -EINVAL);
	assert_int_equal(lodefs_create(fs, NULL, ROOT, "..", O_RDWR, 0644, NULL, &g), -EINVAL);
	assert_int_equal(lodefs_create(fs, NULL, ROOT, "a/b", O_RDWR, 0644, NULL, &g), -EINVAL);
	memset(got, 'n', 256);
	got[256] = 0;
	assert_int_equal(lodefs_create(fs, NULL, ROOT, (char *)got, O_RDWR, 0644, NULL, &g),
			 -ENAMETOOLONG);
	got[255] = 0; /* 255 bytes: the longest name */
	assert_int_equal(lodefs_create(fs, NULL, ROOT, (char *)got, O_RDWR, 0644, NULL, &g), 0);
	assert_int_equal(lodefs_file_close(g), 0);
	assert_int_equal(lodefs_lookup(fs, NULL, ROOT, (char *)got, &st), 0);
	/* Not a directory; no such parent. */
	assert_int_equal(lodefs_create(fs, NULL, ino_of(fs, ROOT, "f"), "x", O_RDWR, 0644, NULL,
				       &g),
			 -ENOTDIR);
	assert_int_equal(lodefs_create(fs, NULL, 12345, "x", O_RDWR, 0644, NULL, &g), -ENOENT);
}

/*
 * Asynchronous reads (lodefs_aio_read / lodefs_aio_reap): 64 reads of 4 KiB
 * and a few across chunk boundaries in flight at once on one queue, each
 * reaped once with its bytes; a read past the end needs no I/O (1), one
 * that reaches the end is short; refusals leave nothing in flight.
 */
static void test_aio_read(void **state)
{
	enum { N = 64, BIG = 3 * MIB + 100 };
	lodefs_t *fs = FS(state);
	lodefs_file_t *f, *w;
	struct lodefs_aio a[N + 2], *done[N + 2], one;
	uint8_t *data = malloc(BIG), *bufs = malloc((size_t)N * 4 * KIB), *big = malloc(2 * MIB);
	unsigned seen[N + 2] = {0}, got = 0;
	lode_eq_t *eq;
	uint8_t c;

	assert_non_null(data);
	assert_non_null(bufs);
	assert_non_null(big);
	fill(data, BIG, 77);
	assert_int_equal(lode_eq_create(&eq), 0);
	assert_int_equal(lodefs_create(fs, NULL, ROOT, "aio", O_RDWR, 0644, NULL, &f), 0);
	assert_int_equal(lodefs_file_write(f, data, BIG, 0, NULL), BIG);

	for (unsigned i = 0; i < N; i++) {
		a[i].user = &seen[i];
		assert_int_equal(lodefs_aio_read(f, bufs + (size_t)i * 4 * KIB, 4 * KIB,
						 (uint64_t)i * 37 * KIB, eq, &a[i]),
				 0);
	}
	/* 2 MiB across a chunk boundary, and the last 100 bytes with a short read. */
	a[N].user = &seen[N];
	assert_int_equal(lodefs_aio_read(f, big, 2 * MIB, MIB / 2, eq, &a[N]), 0);
	a[N + 1].user = &seen[N + 1];
	assert_int_equal(lodefs_aio_read(f, &c, 1, 0, eq, &a[N + 1]), 0);
	while (got < N + 2) {
		int n = lodefs_aio_reap(eq, done, N + 2);

		assert_true(n >= 0);
		for (int k = 0; k < n; k++) {
			unsigned i = (unsigned)(done[k] - a);

			assert_true(i < N + 2);
			assert_ptr_equal(done[k]->user, &seen[i]);
			seen[i]++;
		}
		got += (unsigned)n;
	}
	for (unsigned i = 0; i < N; i++) {
		assert_int_equal(seen[i], 1);
		assert_int_equal(a[i].rc, 4 * KIB);
		assert_memory_equal(bufs + (size_t)i * 4 * KIB, data + (size_t)i * 37 * KIB, 4 * KIB);
	}
	assert_int_equal(a[N].rc, 2 * MIB);
	assert_memory_equal(big, data + MIB / 2, 2 * MIB);
	assert_int_equal(a[N + 1].rc, 1);
	assert_int_equal(c, data[0]);
	assert_int_equal(lodefs_aio_reap(eq, done, N), 0);

	/* At the end: short; past it: no I/O. */
	assert_int_equal(lodefs_aio_read(f, big, MIB, BIG - 100, eq, &one), 0);
	while (lodefs_aio_reap(eq, done, 1) == 0)
		;
	assert_ptr_equal(done[0], &one);
	assert_int_equal(one.rc, 100);
	assert_memory_equal(big, data + BIG - 100, 100);
	one.rc = -1;
	assert_int_equal(lodefs_aio_read(f, big, 10, BIG, eq, &one), 1);
	assert_int_equal(one.rc, 0);
	assert_int_equal(lodefs_aio_read(f, big, 0, 0, eq, &one), 1);

	/* Refusals: nothing goes in flight. */
	assert_int_equal(lodefs_open(fs, NULL, lodefs_file_ino(f), O_WRONLY, &w), 0);
	assert_int_equal(lodefs_aio_read(w, big, 10, 0, eq, &one), -EBADF);
	assert_int_equal(lodefs_aio_read(NULL, big, 10, 0, eq, &one), -EFAULT);
	assert_int_equal(lodefs_aio_read(f, NULL, 10, 0, eq, &one), -EFAULT);
	assert_int_equal(lodefs_aio_read(f, big, 10, 0, NULL, &one), -EFAULT);
	assert_int_equal(lodefs_aio_reap(NULL, done, 1), -EFAULT);
	assert_int_equal(lode_eq_inflight(eq), 0);
	assert_int_equal(lodefs_file_close(w), 0);
	assert_int_equal(lodefs_file_close(f), 0);
	assert_int_equal(lode_eq_destroy(eq), 0);
	free(data);
	free(bufs);
	free(big);
}

/* Reap until a is back; every other aio reaped meanwhile is a failure. */
static void aio_wait(lode_eq_t *eq, struct lodefs_aio *a)
{
	struct lodefs_aio *done[1];
	int n;

	while ((n = lodefs_aio_reap(eq, done, 1)) == 0)
		;
	assert_int_equal(n, 1);
	assert_ptr_equal(done[0], a);
}

/*
 * Asynchronous writes (lodefs_aio_write): 32 writes of 4 KiB in flight
 * inside a file, then writes that extend it (the size is stored when they
 * are reaped: another instance sees it), an appender's write landing at the
 * end, an empty write needing no I/O, and refusals.
 */
static void test_aio_write(void **state)
{
	enum { N = 32, SZ = 256 * KIB };
	lodefs_t *fs = FS(state), *fs2;
	lodefs_file_t *f, *r, *ap;
	struct lodefs_aio a[N], *done[N], one;
	uint8_t *data = malloc(SZ + 8 * KIB), *got = malloc(SZ + 8 * KIB);
	unsigned reaped = 0;
	lode_eq_t *eq;
	struct stat st;

	assert_non_null(data);
	assert_non_null(got);
	fill(data, SZ + 8 * KIB, 5);
	assert_int_equal(lode_eq_create(&eq), 0);
	assert_int_equal(lodefs_create(fs, NULL, ROOT, "aw", O_RDWR, 0644, NULL, &f), 0);
	assert_int_equal(lodefs_file_truncate(f, SZ), 0);
	for (unsigned i = 0; i < N; i++)
		assert_int_equal(lodefs_aio_write(f, data + (size_t)i * 8 * KIB, 4 * KIB,
						  (uint64_t)i * 8 * KIB, eq, &a[i]),
				 0);
	while (reaped < N) {
		int n = lodefs_aio_reap(eq, done, N);

		assert_true(n >= 0);
		for (int k = 0; k < n; k++)
			assert_int_equal(done[k]->rc, 4 * KIB);
		reaped += (unsigned)n;
	}
	assert_int_equal(lodefs_file_read(f, got, SZ, 0), SZ);
	for (unsigned i = 0; i < N; i++) {
		assert_memory_equal(got + (size_t)i * 8 * KIB, data + (size_t)i * 8 * KIB, 4 * KIB);
		assert_true(all_zero(got + (size_t)i * 8 * KIB + 4 * KIB, 4 * KIB));
	}

	/* Extending: the new size is durable once reaped. */
	assert_int_equal(lodefs_aio_write(f, data, 8 * KIB, SZ, eq, &one), 0);
	aio_wait(eq, &one);
	assert_int_equal(one.rc, 8 * KIB);
	fs2 = mount_new(T(state)->label, 0);
	assert_int_equal(lodefs_open(fs2, NULL, lodefs_file_ino(f), O_RDONLY, &r), 0);
	assert_int_equal(lodefs_file_stat(r, &st), 0);
	assert_int_equal(st.st_size, SZ + 8 * KIB);
	assert_int_equal(lodefs_file_read(r, got, 8 * KIB, SZ), 8 * KIB);
	assert_memory_equal(got, data, 8 * KIB);
	assert_int_equal(lodefs_file_close(r), 0);
	assert_int_equal(lodefs_umount(fs2), 0);

	/* An appender's offset is ignored: its write lands at the end. */
	assert_int_equal(lodefs_open(fs, NULL, lodefs_file_ino(f), O_WRONLY | O_APPEND, &ap), 0);
	assert_int_equal(lodefs_aio_write(ap, "tail", 4, 0, eq, &one), 0);
	aio_wait(eq, &one);
	assert_int_equal(one.rc, 4);
	assert_int_equal(lodefs_file_read(f, got, 10, SZ + 8 * KIB), 4);
	assert_memory_equal(got, "tail", 4);

	/* Nothing to write; refusals leave nothing in flight. */
	one.rc = -1;
	assert_int_equal(lodefs_aio_write(f, data, 0, 0, eq, &one), 1);
	assert_int_equal(one.rc, 0);
	assert_int_equal(lodefs_open(fs, NULL, lodefs_file_ino(f), O_RDONLY, &r), 0);
	assert_int_equal(lodefs_aio_write(r, data, 1, 0, eq, &one), -EBADF);
	assert_int_equal(lodefs_aio_write(f, data, 1, 1ull << 63, eq, &one), -EFBIG);
	assert_int_equal(lodefs_aio_write(f, NULL, 1, 0, eq, &one), -EFAULT);
	assert_int_equal(lodefs_aio_write(f, data, 1, 0, NULL, &one), -EFAULT);
	assert_int_equal(lode_eq_inflight(eq), 0);
	assert_int_equal(lodefs_file_close(r), 0);
	assert_int_equal(lodefs_file_close(ap), 0);
	assert_int_equal(lodefs_file_close(f), 0);
	assert_int_equal(lode_eq_destroy(eq), 0);
	free(data);
	free(got);
}

static void test_open_types(void **state)
{
	lodefs_t *fs = FS(state);
	lodefs_file_t *f;
	uint64_t d = mk(fs, ROOT, "d", S_IFDIR | 0755);
	uint64_t fifo = mk(fs, ROOT, "p", S_IFIFO | 0644);
	uint64_t sock = mk(fs, ROOT, "s", S_IFSOCK | 0644);
	uint64_t chr;
	struct stat st;
	char b[4];

	assert_int_equal(lodefs_mknod(fs, &root_cred, ROOT, "c", S_IFCHR | 0644, 0, &st), 0);
	chr = st.st_ino;
	assert_int_equal(lodefs_symlink(fs, NULL, ROOT, "l", "d", &st), 0);
	assert_int_equal(lodefs_open(fs, NULL, d, O_RDWR, &f), -EISDIR);
	assert_int_equal(lodefs_open(fs, NULL, d, O_WRONLY, &f), -EISDIR);
	assert_int_equal(lodefs_open(fs, NULL, d, O_RDONLY, &f), 0);
	assert_int_equal(lodefs_file_read(f, b, 4, 0), -EISDIR);
	assert_int_equal(lodefs_file_close(f), 0);
	assert_int_equal(lodefs_open(fs, NULL, st.st_ino, O_RDONLY, &f), -ELOOP);
	assert_int_equal(lodefs_open(fs, NULL, fifo, O_RDONLY, &f), -ENXIO);
	assert_int_equal(lodefs_open(fs, NULL, sock, O_RDONLY, &f), -ENXIO);
	assert_int_equal(lodefs_open(fs, NULL, chr, O_RDONLY, &f), -ENXIO);
	assert_int_equal(lodefs_open(fs, NULL, 999999, O_RDONLY, &f), -ENOENT);
	assert_true(S_ISFIFO(stat_of(fs, fifo).st_mode));
	assert_true(S_ISSOCK(stat_of(fs, sock).st_mode));
	assert_true(S_ISCHR(stat_of(fs, chr).st_mode));
	assert_int_equal(lodefs_mknod(fs, &root_cred, ROOT, "dev", S_IFBLK | 0600, makedev(8, 1), &st),
			 0);
	assert_int_equal(st.st_rdev, makedev(8, 1));
	assert_int_equal(stat_of(fs, st.st_ino).st_rdev, makedev(8, 1));
	/* Device nodes need root; mknod makes no directories. */
	assert_int_equal(lodefs_mknod(fs, &u1, ROOT, "dev2", S_IFCHR | 0600, 0, NULL), -EPERM);
	assert_int_equal(lodefs_mknod(fs, NULL, ROOT, "dir2", S_IFDIR | 0600, 0, NULL), -EPERM);
	/* Type 0 means a regular file. */
	assert_int_equal(lodefs_mknod(fs, NULL, ROOT, "reg", 0644, 0, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(lodefs_mknod(fs, NULL, ROOT, "reg", 0644, 0, &st), -EEXIST);
}

/* ---- directories ---------------------------------------------------------------- */

static int name_cmp(const void *a, const void *b)
{
	return strcmp(((const struct lodefs_dirent *)a)->name,
		      ((const struct lodefs_dirent *)b)->name);
}

static void test_mkdir_readdir(void **state)
{
	lodefs_t *fs = FS(state);
	struct lodefs_dirent ents[64];
	struct stat sts[64], st;
	lodefs_dir_t *d;
	uint64_t a = mk(fs, ROOT, "a", S_IFDIR | 0755), sub;
	int n;

	assert_int_equal(stat_of(fs, ROOT).st_nlink, 3);
	sub = mk(fs, a, "sub", S_IFDIR | 0700);
	assert_int_equal(stat_of(fs, a).st_nlink, 3);
	assert_int_equal(stat_of(fs, sub).st_nlink, 2);
	mk(fs, a, "file", S_IFREG | 0600);
	assert_int_equal(lodefs_symlink(fs, NULL, a, "link", "file", NULL), 0);
	assert_int_equal(lodefs_mkdir(fs, NULL, a, "sub", 0755, NULL), -EEXIST);
	assert_int_equal(lodefs_mkdir(fs, NULL, a, "file", 0755, NULL), -EEXIST);

	/* "." and ".." resolve in lookup. */
	assert_int_equal(lodefs_lookup(fs, NULL, sub, ".", &st), 0);
	assert_int_equal(st.st_ino, sub);
	assert_int_equal(lodefs_lookup(fs, NULL, sub, "..", &st), 0);
	assert_int_equal(st.st_ino, a);
	assert_int_equal(lodefs_lookup(fs, NULL, ROOT, "..", &st), 0);
	assert_int_equal(st.st_ino, ROOT);
	assert_int_equal(lodefs_lookup(fs, NULL, a, "nope", &st), -ENOENT);
	assert_int_equal(lodefs_lookup(fs, NULL, ino_of(fs, a, "file"), "x", &st), -ENOTDIR);

	assert_int_equal(lodefs_dir_open(fs, NULL, a, &d), 0);
	assert_int_equal(lodefs_dir_ino(d), a);
	n = lodefs_dir_read_plus(d, ents, sts, 64);
	assert_int_equal(n, 3);
	for (int i = 0; i < n; i++) {
		assert_int_equal(sts[i].st_ino, ents[i].ino);
		if (strcmp(ents[i].name, "sub") == 0) {
			assert_int_equal(ents[i].type, DT_DIR);
			assert_int_equal(ents[i].ino, sub);
			assert_true(S_ISDIR(sts[i].st_mode));
		} else if (strcmp(ents[i].name, "file") == 0) {
			assert_int_equal(ents[i].type, DT_REG);
			assert_int_equal(sts[i].st_mode & 07777, 0600);
		} else {
			assert_string_equal(ents[i].name, "link");
			assert_int_equal(ents[i].type, DT_LNK);
			assert_true(S_ISLNK(sts[i].st_mode));
		}
	}
	assert_int_equal(lodefs_dir_read(d, ents, 64), 0);
	lodefs_dir_rewind(d);
	assert_int_equal(lodefs_dir_read(d, ents, 64), 3);
	assert_int_equal(lodefs_dir_close(d), 0);

	assert_int_equal(lodefs_dir_open(fs, NULL, ino_of(fs, a, "file"), &d), -ENOTDIR);
	assert_int_equal(lodefs_dir_open(fs, NULL, 424242, &d), -ENOENT);
	assert_int_equal(lodefs_dir_open(fs, &u1, sub, &d), -EACCES);
}

/*
 * Many entries read in small batches: each once, none missing. Long names
 * make each target's entries take several listings (16 KiB each).
 */
static void entry_name(char *buf, unsigned i)
{
	memset(buf, 'n', 200);
	snprintf(buf + 200, 32, "-%05u", i);
}

static void test_readdir_many(void **state)
{
	lodefs_t *fs = FS(state);
	const unsigned N = 300;
	struct lodefs_dirent *all = calloc(N + 10, sizeof(*all)), ents[7];
	uint64_t d = mk(fs, ROOT, "big", S_IFDIR | 0755);
	struct stat sts[7];
	lodefs_dir_t *dh;
	unsigned got = 0;
	char name[256];
	int n;

	assert_non_null(all);
	for (unsigned i = 0; i < N; i++) {
		entry_name(name, i);
		assert_int_equal(lodefs_mknod(fs, NULL, d, name, S_IFREG | 0644, 0, NULL), 0);
	}
	assert_int_equal(lodefs_dir_open(fs, NULL, d, &dh), 0);
	while ((n = lodefs_dir_read(dh, ents, 7)) > 0) {
		assert_true(got + (unsigned)n <= N);
		memcpy(all + got, ents, (size_t)n * sizeof(*ents));
		got += (unsigned)n;
	}
	assert_int_equal(n, 0);
	assert_int_equal(got, N);
	qsort(all, N, sizeof(*all), name_cmp);
	for (unsigned i = 0; i < N; i++) {
		entry_name(name, i);
		assert_string_equal(all[i].name, name);
		assert_int_equal(all[i].type, DT_REG);
	}
	/* Again with attributes, after removing some: those are not returned. */
	for (unsigned i = 0; i < N; i += 3) {
		entry_name(name, i);
		assert_int_equal(lodefs_unlink(fs, NULL, d, name), 0);
	}
	lodefs_dir_rewind(dh);
	got = 0;
	while ((n = lodefs_dir_read_plus(dh, ents, sts, 7)) > 0) {
		for (int i = 0; i < n; i++) {
			assert_true(S_ISREG(sts[i].st_mode));
			assert_int_equal(sts[i].st_ino, ents[i].ino);
			assert_true(atoi(ents[i].name + 201) % 3 != 0);
		}
		got += (unsigned)n;
	}
	assert_int_equal(got, N - N / 3);
	assert_int_equal(lodefs_dir_close(dh), 0);
	free(all);
}

/* ---- removal ---------------------------------------------------------------------- */

static void test_unlink_rmdir(void **state)
{
	lodefs_t *fs = FS(state);
	uint64_t d = mk(fs, ROOT, "d", S_IFDIR | 0755), f, e;
	struct stat st;

	f = mk(fs, d, "f", S_IFREG | 0644);
	e = mk(fs, d, "e", S_IFDIR | 0755);
	assert_int_equal(lodefs_unlink(fs, NULL, d, "e"), -EISDIR);
	assert_int_equal(lodefs_rmdir(fs, NULL, d, "f"), -ENOTDIR);
	assert_int_equal(lodefs_rmdir(fs, NULL, ROOT, "d"), -ENOTEMPTY);
	assert_int_equal(lodefs_rmdir(fs, NULL, d, "."), -EINVAL);
	assert_int_equal(lodefs_rmdir(fs, NULL, d, ".."), -ENOTEMPTY);
	assert_int_equal(lodefs_unlink(fs, NULL, d, "nope"), -ENOENT);
	assert_int_equal(lodefs_unlink(fs, NULL, f, "x"), -ENOTDIR);
	assert_int_equal(lodefs_unlink(fs, NULL, d, "f"), 0);
	assert_int_equal(lodefs_getattr(fs, f, &st), -ENOENT);
	assert_int_equal(lodefs_lookup(fs, NULL, d, "f", &st), -ENOENT);
	assert_int_equal(stat_of(fs, d).st_nlink, 3);
	assert_int_equal(lodefs_rmdir(fs, NULL, d, "e"), 0);
	assert_int_equal(lodefs_getattr(fs, e, &st), -ENOENT);
	assert_int_equal(stat_of(fs, d).st_nlink, 2);
	assert_int_equal(lodefs_rmdir(fs, NULL, ROOT, "d"), 0);
	assert_int_equal(stat_of(fs, ROOT).st_nlink, 2);
	assert_int_equal(lodefs_mknod(fs, NULL, d, "x", S_IFREG | 0644, 0, NULL), -ENOENT);
}

static void test_unlink_while_open(void **state)
{
	lodefs_t *fs = FS(state);
	lodefs_file_t *f = fopen_rw(fs, ROOT, "f");
	uint64_t ino = lodefs_file_ino(f);
	uint8_t buf[3000];
	struct stat st;

	fill(buf, sizeof(buf), 7);
	write_all(f, buf, sizeof(buf), 0);
	assert_int_equal(lodefs_unlink(fs, NULL, ROOT, "f"), 0);
	assert_int_equal(lodefs_lookup(fs, NULL, ROOT, "f", &st), -ENOENT);
	/* Still readable and writable through the open file. */
	read_check(f, buf, sizeof(buf), 0);
	write_all(f, buf, 100, 3000);
	assert_int_equal(lodefs_file_stat(f, &st), 0);
	assert_int_equal(st.st_nlink, 0);
	assert_int_equal(st.st_size, 3100);
	assert_int_equal(lodefs_file_close(f), 0);
	assert_int_equal(lodefs_getattr(fs, ino, &st), -ENOENT);

	/* The same when a rename replaces the open file. */
	f = fopen_rw(fs, ROOT, "victim");
	ino = lodefs_file_ino(f);
	write_all(f, buf, 100, 0);
	mk(fs, ROOT, "newer", S_IFREG | 0644);
	assert_int_equal(lodefs_rename(fs, NULL, ROOT, "newer", ROOT, "victim", 0), 0);
	assert_true(ino_of(fs, ROOT, "victim") != ino);
	read_check(f, buf, 100, 0);
	assert_int_equal(lodefs_file_close(f), 0);
	assert_int_equal(lodefs_getattr(fs, ino, &st), -ENOENT);
}

/* ---- attributes and permissions --------------------------------------------------- */

/* A world-writable directory for the unprivileged users' tests. */
static uint64_t scratch_dir(lodefs_t *fs, const char *name, mode_t mode)
{
	struct stat st;

	assert_int_equal(lodefs_mkdir(fs, &root_cred, ROOT, name, 0777, &st), 0);
	memset(&st, 0, sizeof(st));
	st.st_mode = mode;
	assert_int_equal(lodefs_setattr(fs, &root_cred, ino_of(fs, ROOT, name), &st,
					LODEFS_SET_MODE, NULL),
			 0);
	return ino_of(fs, ROOT, name);
}

static void test_setattr_perms(void **state)
{
	lodefs_t *fs = FS(state);
	uint64_t tmp = scratch_dir(fs, "tmp", 0777), f, d;
	struct stat in, out;
	lodefs_file_t *h;

	assert_int_equal(lodefs_mknod(fs, &u1, tmp, "f", S_IFREG | 0644, 0, &out), 0);
	f = out.st_ino;
	assert_int_equal(out.st_uid, 1000);
	assert_int_equal(out.st_gid, 1000);

	/* chmod: owner or root. */
	memset(&in, 0, sizeof(in));
	in.st_mode = 0600;
	assert_int_equal(lodefs_setattr(fs, &u2, f, &in, LODEFS_SET_MODE, NULL), -EPERM);
	assert_int_equal(lodefs_setattr(fs, &u1, f, &in, LODEFS_SET_MODE, &out), 0);
	assert_int_equal(out.st_mode, S_IFREG | 0600);
	assert_int_equal(stat_of(fs, f).st_mode, S_IFREG | 0600);

	/* chown: only root gives away; the owner may pick one of its groups. */
	in.st_uid = 1001;
	assert_int_equal(lodefs_setattr(fs, &u1, f, &in, LODEFS_SET_UID, NULL), -EPERM);
	in.st_uid = 1000;
	assert_int_equal(lodefs_setattr(fs, &u1, f, &in, LODEFS_SET_UID, NULL), 0);
	assert_int_equal(lodefs_setattr(fs, &u2, f, &in, LODEFS_SET_UID, NULL), -EPERM);
	in.st_gid = 2000;
	assert_int_equal(lodefs_setattr(fs, &u1, f, &in, LODEFS_SET_GID, &out), 0);
	assert_int_equal(out.st_gid, 2000);
	in.st_gid = 3000;
	assert_int_equal(lodefs_setattr(fs, &u1, f, &in, LODEFS_SET_GID, NULL), -EPERM);
	assert_int_equal(lodefs_setattr(fs, &root_cred, f, &in, LODEFS_SET_GID, NULL), 0);

	/* A non-member's chmod cannot set setgid; chown drops setuid and setgid. */
	in.st_mode = 02755;
	assert_int_equal(lodefs_setattr(fs, &u1, f, &in, LODEFS_SET_MODE, &out), 0);
	assert_int_equal(out.st_mode & 07777, 0755);
	in.st_mode = 06755;
	assert_int_equal(lodefs_setattr(fs, &root_cred, f, &in, LODEFS_SET_MODE, &out), 0);
	assert_int_equal(out.st_mode & 07777, 06755);
	in.st_uid = 1000;
	assert_int_equal(lodefs_setattr(fs, &root_cred, f, &in, LODEFS_SET_UID, &out), 0);
	assert_int_equal(out.st_mode & 07777, 0755);

	/* A write by a non-root writer drops setuid. */
	in.st_mode = 04777;
	assert_int_equal(lodefs_setattr(fs, &root_cred, f, &in, LODEFS_SET_MODE, NULL), 0);
	assert_int_equal(lodefs_open(fs, &u2, f, O_WRONLY, &h), 0);
	assert_int_equal(lodefs_file_write(h, "x", 1, 0, NULL), 1);
	assert_int_equal(lodefs_file_close(h), 0);
	assert_int_equal(stat_of(fs, f).st_mode & 07777, 0777);

	/* utimensat: explicit times need the owner; "now" also write permission. */
	in.st_mode = 0644;
	assert_int_equal(lodefs_setattr(fs, &root_cred, f, &in, LODEFS_SET_MODE, NULL), 0);
	in.st_atim = (struct timespec){1000, 5};
	in.st_mtim = (struct timespec){2000, 999999999};
	assert_int_equal(lodefs_setattr(fs, &u2, f, &in, LODEFS_SET_MTIME, NULL), -EPERM);
	assert_int_equal(lodefs_setattr(fs, &u2, f, &in, LODEFS_SET_MTIME_NOW, NULL), -EACCES);
	assert_int_equal(lodefs_setattr(fs, &u1, f, &in, LODEFS_SET_ATIME | LODEFS_SET_MTIME,
					&out),
			 0);
	out = stat_of(fs, f);
	assert_int_equal(out.st_atim.tv_sec, 1000);
	assert_int_equal(out.st_atim.tv_nsec, 5);
	assert_int_equal(out.st_mtim.tv_sec, 2000);
	assert_int_equal(out.st_mtim.tv_nsec, 999999999);
	assert_true(out.st_ctim.tv_sec > 2000);
	in.st_mtim.tv_nsec = 1000000000L;
	assert_int_equal(lodefs_setattr(fs, &u1, f, &in, LODEFS_SET_MTIME, NULL), -EINVAL);
	in.st_mode = 0666;
	assert_int_equal(lodefs_setattr(fs, &u1, f, &in, LODEFS_SET_MODE, NULL), 0);
	assert_int_equal(lodefs_setattr(fs, &u2, f, &in, LODEFS_SET_MTIME_NOW, &out), 0);
	assert_true(out.st_mtim.tv_sec > 2000);

	/* truncate(2) rules. */
	in.st_size = 5;
	in.st_mode = 0644;
	assert_int_equal(lodefs_setattr(fs, &u1, f, &in, LODEFS_SET_MODE, NULL), 0);
	assert_int_equal(lodefs_setattr(fs, &u2, f, &in, LODEFS_SET_SIZE, NULL), -EACCES);
	assert_int_equal(lodefs_setattr(fs, &u1, f, &in, LODEFS_SET_SIZE, &out), 0);
	assert_int_equal(out.st_size, 5);
	assert_int_equal(lodefs_setattr(fs, NULL, tmp, &in, LODEFS_SET_SIZE, NULL), -EISDIR);
	d = mk(fs, tmp, "fifo", S_IFIFO | 0666);
	assert_int_equal(lodefs_setattr(fs, NULL, d, &in, LODEFS_SET_SIZE, NULL), -EINVAL);
	in.st_size = -1;
	assert_int_equal(lodefs_setattr(fs, NULL, f, &in, LODEFS_SET_SIZE, NULL), -EINVAL);
	assert_int_equal(lodefs_setattr(fs, NULL, f, &in, 1u << 20, NULL), -EINVAL);
	assert_int_equal(lodefs_setattr(fs, NULL, 777777, &in, LODEFS_SET_MODE, NULL), -ENOENT);

	/* access(2). */
	assert_int_equal(lodefs_access(fs, &u1, f, R_OK | W_OK), 0);
	assert_int_equal(lodefs_access(fs, &u2, f, R_OK), 0);
	assert_int_equal(lodefs_access(fs, &u2, f, W_OK), -EACCES);
	assert_int_equal(lodefs_access(fs, &root_cred, f, W_OK), 0);
	assert_int_equal(lodefs_access(fs, &root_cred, f, X_OK), -EACCES);
	assert_int_equal(lodefs_access(fs, &root_cred, tmp, X_OK), 0);
	assert_int_equal(lodefs_access(fs, &u1, f, F_OK), 0);
	assert_int_equal(lodefs_access(fs, &u1, 777777, F_OK), -ENOENT);
	assert_int_equal(lodefs_access(fs, &u1, f, 8), -EINVAL);
	/* Group permission through a supplementary group. */
	in.st_mode = 0060;
	in.st_gid = 2000;
	assert_int_equal(lodefs_setattr(fs, &root_cred, f, &in, LODEFS_SET_MODE | LODEFS_SET_GID,
					NULL),
			 0);
	assert_int_equal(lodefs_access(fs, &u1, f, R_OK | W_OK), -EACCES); /* owner bits rule */
	in.st_uid = 1001;
	assert_int_equal(lodefs_setattr(fs, &root_cred, f, &in, LODEFS_SET_UID, NULL), 0);
	assert_int_equal(lodefs_access(fs, &u1, f, R_OK | W_OK), 0);
	assert_int_equal(lodefs_open(fs, &u1, f, O_RDWR, &h), 0);
	assert_int_equal(lodefs_file_close(h), 0);
	assert_int_equal(lodefs_open(fs, &u2, f, O_RDONLY, &h), -EACCES);
}

static void test_dir_perms(void **state)
{
	lodefs_t *fs = FS(state);
	uint64_t sticky = scratch_dir(fs, "sticky", 01777), priv, sg, sub;
	struct stat st, in;
	lodefs_file_t *h;

	/* Sticky: only the file's owner, the directory's owner or root remove. */
	assert_int_equal(lodefs_mknod(fs, &u1, sticky, "mine", S_IFREG | 0666, 0, NULL), 0);
	assert_int_equal(lodefs_unlink(fs, &u2, sticky, "mine"), -EPERM);
	assert_int_equal(lodefs_rename(fs, &u2, sticky, "mine", sticky, "theirs", 0), -EPERM);
	assert_int_equal(lodefs_unlink(fs, &u1, sticky, "mine"), 0);

	/* No search permission: lookups below fail; no write permission: no creation. */
	priv = scratch_dir(fs, "priv", 0700);
	mk(fs, priv, "x", S_IFREG | 0644);
	assert_int_equal(lodefs_lookup(fs, &u1, priv, "x", &st), -EACCES);
	assert_int_equal(lodefs_lookup(fs, &root_cred, priv, "x", &st), 0);
	in.st_mode = 0755;
	assert_int_equal(lodefs_setattr(fs, &root_cred, priv, &in, LODEFS_SET_MODE, NULL), 0);
	assert_int_equal(lodefs_lookup(fs, &u1, priv, "x", &st), 0);
	assert_int_equal(lodefs_mknod(fs, &u1, priv, "y", S_IFREG | 0644, 0, NULL), -EACCES);
	assert_int_equal(lodefs_create(fs, &u1, priv, "y", O_RDWR, 0644, NULL, &h), -EACCES);
	assert_int_equal(lodefs_mkdir(fs, &u1, priv, "y", 0755, NULL), -EACCES);
	assert_int_equal(lodefs_unlink(fs, &u1, priv, "x"), -EACCES);
	assert_int_equal(lodefs_link(fs, &u1, st.st_ino, priv, "x2", NULL), -EACCES);

	/* setgid directory: its group passes to new entries, and setgid to new directories. */
	sg = scratch_dir(fs, "sg", 02777);
	in.st_gid = 2000;
	assert_int_equal(lodefs_setattr(fs, &root_cred, sg, &in, LODEFS_SET_GID, NULL), 0);
	assert_int_equal(lodefs_mknod(fs, &u2, sg, "f", S_IFREG | 0644, 0, &st), 0);
	assert_int_equal(st.st_gid, 2000);
	assert_int_equal(lodefs_mkdir(fs, &u2, sg, "d", 0755, &st), 0);
	sub = st.st_ino;
	assert_int_equal(st.st_gid, 2000);
	assert_int_equal(st.st_mode & 07777, 02755);
	assert_int_equal(stat_of(fs, sub).st_mode & 07777, 02755);
}

static void test_times(void **state)
{
	lodefs_t *fs = FS(state);
	lodefs_file_t *f = fopen_rw(fs, ROOT, "t");
	uint64_t ino = lodefs_file_ino(f);
	struct stat a, b, in;
	char buf[16];

	assert_int_equal(lodefs_file_stat(f, &a), 0);
	usleep(20000);
	write_all(f, "hello", 5, 0);
	write_all(f, "HE", 2, 0); /* not extending: mtime only in memory until... */
	assert_int_equal(lodefs_getattr(fs, ino, &b), 0); /* ...getattr stores it */
	assert_true(b.st_mtim.tv_sec > a.st_mtim.tv_sec ||
		    (b.st_mtim.tv_sec == a.st_mtim.tv_sec && b.st_mtim.tv_nsec > a.st_mtim.tv_nsec));
	assert_int_equal(b.st_size, 5);
	/* The parent's mtime moved with the create. */
	assert_true(stat_of(fs, ROOT).st_mtim.tv_sec >= a.st_mtim.tv_sec);

	/* relatime: a read after a write moves atime; an explicit old atime is moved too. */
	memset(&in, 0, sizeof(in));
	in.st_atim = (struct timespec){100, 0};
	assert_int_equal(lodefs_setattr(fs, NULL, ino, &in, LODEFS_SET_ATIME, NULL), 0);
	assert_int_equal(lodefs_file_read(f, buf, 5, 0), 5);
	assert_memory_equal(buf, "HEllo", 5);
	assert_int_equal(lodefs_file_sync(f, 0), 0);
	assert_true(stat_of(fs, ino).st_atim.tv_sec > 100);
	assert_int_equal(lodefs_file_close(f), 0);
}

/* ---- the byte layout ------------------------------------------------------------------ */

static void test_truncate(void **state)
{
	lodefs_t *fs = FS(state);
	lodefs_file_t *f = fopen_rw(fs, ROOT, "t");
	const size_t cs = 64 * KIB, len = 5 * cs + 1000;
	uint8_t *buf = malloc(len), *got = malloc(len);
	const uint64_t far = 4 * GIB + 100;
	struct stat st;

	assert_non_null(buf);
	assert_non_null(got);
	fill(buf, len, 3);
	assert_int_equal(lodefs_xattr_set(fs, NULL, lodefs_file_ino(f), "lode.chunk_size", "65536",
					  5, 0),
			 0);
	write_all(f, buf, len, 0);
	read_check(f, buf, len, 0);

	/* Down into the middle of a chunk, then up again: the cut bytes read as zeros. */
	assert_int_equal(lodefs_file_truncate(f, 2 * cs + 123), 0);
	assert_int_equal(lodefs_file_read(f, got, len, 0), (ssize_t)(2 * cs + 123));
	assert_memory_equal(got, buf, 2 * cs + 123);
	assert_int_equal(lodefs_file_truncate(f, len), 0);
	assert_int_equal(lodefs_file_read(f, got, len, 0), (ssize_t)len);
	assert_memory_equal(got, buf, 2 * cs + 123);
	assert_true(all_zero(got + 2 * cs + 123, len - 2 * cs - 123));
	/* Exactly on a chunk boundary. */
	write_all(f, buf, len, 0);
	assert_int_equal(lodefs_file_truncate(f, cs), 0);
	assert_int_equal(lodefs_file_truncate(f, 3 * cs), 0);
	assert_int_equal(lodefs_file_read(f, got, 3 * cs, 0), (ssize_t)(3 * cs));
	assert_memory_equal(got, buf, cs);
	assert_true(all_zero(got + cs, 2 * cs));

	/* Past 4 GiB: sparse below, data at the far end, truncation across the boundary. */
	write_all(f, buf, 1000, far);
	assert_int_equal(lodefs_file_stat(f, &st), 0);
	assert_int_equal(st.st_size, far + 1000);
	read_check(f, buf, 1000, far);
	assert_int_equal(lodefs_file_read(f, got, 4096, 4 * GIB - 2048), 2048 + 1100);
	assert_true(all_zero(got, 2048 + 100));
	assert_memory_equal(got + 2148, buf, 1000);
	assert_int_equal(lodefs_file_truncate(f, far + 10), 0);
	assert_int_equal(lodefs_file_read(f, got, 1000, far), 10);
	assert_memory_equal(got, buf, 10);
	assert_int_equal(lodefs_file_truncate(f, 4 * GIB - 5), 0);
	assert_int_equal(lodefs_file_truncate(f, far + 1000), 0);
	assert_int_equal(lodefs_file_read(f, got, 1000, far), 1000);
	assert_true(all_zero(got, 1000));
	/* A huge sparse file: truncation lists the chunks instead of punching each. */
	write_all(f, buf, 100, 1ull << 40);
	assert_int_equal(lodefs_file_truncate(f, 10), 0);
	assert_int_equal(lodefs_file_truncate(f, (1ull << 40) + 100), 0);
	assert_int_equal(lodefs_file_read(f, got, 100, 1ull << 40), 100);
	assert_true(all_zero(got, 100));
	assert_int_equal(lodefs_file_read(f, got, 10, 0), 10);
	assert_memory_equal(got, buf, 10);

	/* The largest size. */
	assert_int_equal(lodefs_file_truncate(f, (uint64_t)INT64_MAX + 1), -EFBIG);
	assert_int_equal(lodefs_file_write(f, buf, 1, (uint64_t)INT64_MAX, NULL), -EFBIG);
	assert_int_equal(lodefs_file_write(f, buf, 100, (uint64_t)INT64_MAX - 10, NULL), 10);
	assert_int_equal(lodefs_file_stat(f, &st), 0);
	assert_int_equal(st.st_size, INT64_MAX);
	read_check(f, buf, 10, (uint64_t)INT64_MAX - 10);
	assert_int_equal(lodefs_file_close(f), 0);
	free(buf);
	free(got);
}

static void test_readv_writev_append(void **state)
{
	lodefs_t *fs = FS(state);
	lodefs_file_t *f = fopen_rw(fs, ROOT, "v"), *a1, *a2;
	uint8_t p1[3000], p2[5000], got[8000];
	struct iovec w[2] = {{p1, sizeof(p1)}, {p2, sizeof(p2)}};
	struct iovec r[3] = {{got, 100}, {got + 100, 0}, {got + 100, 7900}};
	uint64_t end;

	fill(p1, sizeof(p1), 1);
	fill(p2, sizeof(p2), 2);
	assert_int_equal(lodefs_file_writev(f, w, 2, 1000, &end), 8000);
	assert_int_equal(end, 9000);
	assert_int_equal(lodefs_file_readv(f, r, 3, 1000), 8000);
	assert_memory_equal(got, p1, sizeof(p1));
	assert_memory_equal(got + 3000, p2, sizeof(p2));
	assert_int_equal(lodefs_file_read(f, got, 1000, 0), 1000);
	assert_true(all_zero(got, 1000));
	assert_int_equal(lodefs_file_close(f), 0);

	/* Two O_APPEND handles: each write lands at the end, end_out says where. */
	assert_int_equal(lodefs_open(fs, NULL, ino_of(fs, ROOT, "v"), O_WRONLY | O_APPEND, &a1), 0);
	assert_int_equal(lodefs_open(fs, NULL, ino_of(fs, ROOT, "v"), O_RDWR | O_APPEND, &a2), 0);
	assert_int_equal(lodefs_file_write(a1, "abc", 3, 0, &end), 3);
	assert_int_equal(end, 9003);
	assert_int_equal(lodefs_file_write(a2, "defg", 4, 5, &end), 4);
	assert_int_equal(end, 9007);
	assert_int_equal(lodefs_file_read(a2, got, 10, 9000), 7);
	assert_memory_equal(got, "abcdefg", 7);
	assert_int_equal(lodefs_file_close(a1), 0);
	assert_int_equal(lodefs_file_close(a2), 0);
}

/* ---- consistency ------------------------------------------------------------------------ */

static void test_two_instances(void **state)
{
	lodefs_t *fs = FS(state), *fs2 = mount_new(T(state)->label, 0);
	lodefs_file_t *f1 = fopen_rw(fs, ROOT, "shared"), *f2;
	uint8_t a[5000], b[7000], got[12000];
	struct stat st;
	uint64_t ino = lodefs_file_ino(f1);

	fill(a, sizeof(a), 11);
	fill(b, sizeof(b), 12);
	write_all(f1, a, sizeof(a), 0);
	/* Instance 2 sees the name, the size and the bytes. */
	assert_int_equal(ino_of(fs2, ROOT, "shared"), ino);
	assert_int_equal(lodefs_open(fs2, NULL, ino, O_RDWR, &f2), 0);
	assert_int_equal(lodefs_file_stat(f2, &st), 0);
	assert_int_equal(st.st_size, sizeof(a));
	read_check(f2, a, sizeof(a), 0);
	/* Instance 2 grows it; instance 1's open file sees that when it reads to its end. */
	write_all(f2, b, sizeof(b), sizeof(a));
	assert_int_equal(lodefs_file_read(f1, got, sizeof(got), 0), (ssize_t)(sizeof(a) + sizeof(b)));
	assert_memory_equal(got, a, sizeof(a));
	assert_memory_equal(got + sizeof(a), b, sizeof(b));
	assert_int_equal(lodefs_file_stat(f1, &st), 0);
	assert_int_equal(st.st_size, sizeof(a) + sizeof(b));
	/* Both extend distinct ranges; after both close the size covers both. */
	write_all(f1, a, 100, 20000);
	write_all(f2, b, 100, 30000);
	write_all(f1, a, 100, 25000);
	assert_int_equal(lodefs_file_close(f1), 0);
	assert_int_equal(lodefs_file_close(f2), 0);
	assert_int_equal(stat_of(fs, ino).st_size, 30100);
	assert_int_equal(stat_of(fs2, ino).st_size, 30100);
	/* Namespace changes are seen at once. */
	mk(fs2, ROOT, "from2", S_IFDIR | 0755);
	assert_int_equal(lodefs_lookup(fs, NULL, ROOT, "from2", &st), 0);
	assert_int_equal(lodefs_unlink(fs, NULL, ROOT, "shared"), 0);
	assert_int_equal(lodefs_lookup(fs2, NULL, ROOT, "shared", &st), -ENOENT);
	assert_int_equal(lodefs_umount(fs2), 0);
}

struct wjob {
	lodefs_file_t *f;
	unsigned idx;
	size_t len;
	int rc;
};

static void *writer(void *arg)
{
	struct wjob *j = arg;
	uint8_t *buf = malloc(j->len);

	j->rc = -ENOMEM;
	if (buf) {
		fill(buf, j->len, 100 + j->idx);
		/* In pieces, so size updates of the threads interleave. */
		j->rc = 0;
		for (size_t o = 0; o < j->len && j->rc == 0; o += 8 * KIB) {
			ssize_t n = lodefs_file_write(j->f, buf + o, 8 * KIB,
						      (uint64_t)j->idx * j->len + o, NULL);

			if (n != 8 * KIB)
				j->rc = n < 0 ? (int)n : -EIO;
		}
		free(buf);
	}
	return NULL;
}

static void test_threads_distinct_ranges(void **state)
{
	enum { NT = 6 };
	lodefs_t *fs = FS(state);
	lodefs_file_t *f = fopen_rw(fs, ROOT, "mt");
	struct wjob jobs[NT];
	pthread_t th[NT];
	const size_t len = 128 * KIB;
	uint8_t *want = malloc(len), *got = malloc(len);
	struct stat st;

	assert_non_null(want);
	assert_non_null(got);
	for (unsigned i = 0; i < NT; i++) {
		jobs[i] = (struct wjob){f, i, len, 0};
		assert_int_equal(pthread_create(&th[i], NULL, writer, &jobs[i]), 0);
	}
	for (unsigned i = 0; i < NT; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(jobs[i].rc, 0);
	}
	assert_int_equal(lodefs_file_close(f), 0);
	assert_int_equal(stat_of(fs, ino_of(fs, ROOT, "mt")).st_size, NT * len);
	assert_int_equal(lodefs_open(fs, NULL, ino_of(fs, ROOT, "mt"), O_RDONLY, &f), 0);
	for (unsigned i = 0; i < NT; i++) {
		fill(want, len, 100 + i);
		assert_int_equal(lodefs_file_read(f, got, len, i * len), (ssize_t)len);
		assert_memory_equal(got, want, len);
	}
	assert_int_equal(lodefs_file_stat(f, &st), 0);
	assert_int_equal(st.st_size, NT * len);
	assert_int_equal(lodefs_file_close(f), 0);
	free(want);
	free(got);
}

/* ---- links ---------------------------------------------------------------------------- */

static void test_links(void **state)
{
	lodefs_t *fs = FS(state);
	uint64_t d = mk(fs, ROOT, "d", S_IFDIR | 0755), f;
	lodefs_file_t *h = fopen_rw(fs, d, "f");
	char buf[LODEFS_PATH_MAX + 10];
	struct stat st;

	write_all(h, "data", 4, 0);
	assert_int_equal(lodefs_file_close(h), 0);
	f = ino_of(fs, d, "f");
	assert_int_equal(lodefs_link(fs, NULL, f, ROOT, "g", &st), 0);
	assert_int_equal(st.st_nlink, 2);
	assert_int_equal(ino_of(fs, ROOT, "g"), f);
	assert_int_equal(lodefs_link(fs, NULL, f, ROOT, "g", NULL), -EEXIST);
	assert_int_equal(lodefs_link(fs, NULL, d, ROOT, "dd", NULL), -EPERM);
	assert_int_equal(lodefs_link(fs, NULL, f, f, "x", NULL), -ENOTDIR);
	assert_int_equal(lodefs_link(fs, NULL, 888888, ROOT, "x", NULL), -ENOENT);
	assert_int_equal(lodefs_unlink(fs, NULL, d, "f"), 0);
	assert_int_equal(stat_of(fs, f).st_nlink, 1);
	assert_int_equal(lodefs_open(fs, NULL, f, O_RDONLY, &h), 0);
	read_check(h, "data", 4, 0);
	assert_int_equal(lodefs_file_close(h), 0);

	/* Symlinks: stored as given, read back whole or cut at cap. */
	assert_int_equal(lodefs_symlink(fs, NULL, ROOT, "s", "d/../g", &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	assert_int_equal(st.st_size, 6);
	assert_int_equal(lodefs_readlink(fs, st.st_ino, buf, sizeof(buf)), 6);
	assert_memory_equal(buf, "d/../g", 6);
	assert_int_equal(lodefs_readlink(fs, st.st_ino, buf, 3), 3);
	assert_memory_equal(buf, "d/.", 3);
	assert_int_equal(lodefs_readlink(fs, f, buf, sizeof(buf)), -EINVAL);
	assert_int_equal(lodefs_readlink(fs, 888888, buf, sizeof(buf)), -ENOENT);
	assert_int_equal(lodefs_symlink(fs, NULL, ROOT, "e", "", NULL), -ENOENT);
	memset(buf, 'a', LODEFS_PATH_MAX);
	buf[LODEFS_PATH_MAX] = 0;
	assert_int_equal(lodefs_symlink(fs, NULL, ROOT, "long", buf, NULL), -ENAMETOOLONG);
	buf[LODEFS_PATH_MAX - 1] = 0;
	assert_int_equal(lodefs_symlink(fs, NULL, ROOT, "long", buf, &st), 0);
	assert_int_equal(lodefs_readlink(fs, st.st_ino, buf, sizeof(buf)), LODEFS_PATH_MAX - 1);
	assert_int_equal(lodefs_symlink(fs, NULL, ROOT, "s", "x", NULL), -EEXIST);
}

/* ---- rename --------------------------------------------------------------------------- */

static void test_rename(void **state)
{
	lodefs_t *fs = FS(state);
	uint64_t a = mk(fs, ROOT, "a", S_IFDIR | 0755), b = mk(fs, ROOT, "b", S_IFDIR | 0755);
	uint64_t f = mk(fs, a, "f", S_IFREG | 0644), g = mk(fs, a, "g", S_IFREG | 0644), sub, e;
	struct stat st;

	/* Within a directory; onto itself; over a file (which goes). */
	assert_int_equal(lodefs_rename(fs, NULL, a, "f", a, "f2", 0), 0);
	assert_int_equal(lodefs_lookup(fs, NULL, a, "f", &st), -ENOENT);
	assert_int_equal(ino_of(fs, a, "f2"), f);
	assert_int_equal(lodefs_rename(fs, NULL, a, "f2", a, "f2", 0), 0);
	assert_int_equal(ino_of(fs, a, "f2"), f);
	assert_int_equal(lodefs_rename(fs, NULL, a, "f2", a, "g", 0), 0);
	assert_int_equal(ino_of(fs, a, "g"), f);
	assert_int_equal(lodefs_getattr(fs, g, &st), -ENOENT);

	/* Hard links of one inode: success, nothing changes. */
	assert_int_equal(lodefs_link(fs, NULL, f, a, "h", NULL), 0);
	assert_int_equal(lodefs_rename(fs, NULL, a, "g", a, "h", 0), 0);
	assert_int_equal(ino_of(fs, a, "g"), f);
	assert_int_equal(ino_of(fs, a, "h"), f);
	assert_int_equal(stat_of(fs, f).st_nlink, 2);

	/* A directory to another parent: nlinks and ".." follow. */
	sub = mk(fs, a, "sub", S_IFDIR | 0755);
	assert_int_equal(stat_of(fs, a).st_nlink, 3);
	assert_int_equal(lodefs_rename(fs, NULL, a, "sub", b, "sub", 0), 0);
	assert_int_equal(stat_of(fs, a).st_nlink, 2);
	assert_int_equal(stat_of(fs, b).st_nlink, 3);
	assert_int_equal(lodefs_lookup(fs, NULL, sub, "..", &st), 0);
	assert_int_equal(st.st_ino, b);

	/* Under itself. */
	assert_int_equal(lodefs_rename(fs, NULL, ROOT, "b", sub, "x", 0), -EINVAL);
	assert_int_equal(lodefs_rename(fs, NULL, ROOT, "b", b, "x", 0), -EINVAL);

	/* Type conflicts and non-empty targets. */
	assert_int_equal(lodefs_rename(fs, NULL, b, "sub", a, "g", 0), -ENOTDIR);
	assert_int_equal(lodefs_rename(fs, NULL, a, "g", b, "sub", 0), -EISDIR);
	mk(fs, sub, "inner", S_IFREG | 0644);
	e = mk(fs, a, "empty", S_IFDIR | 0755);
	assert_int_equal(lodefs_rename(fs, NULL, a, "empty", b, "sub", 0), -ENOTEMPTY);
	/* A directory over an empty one: the empty one goes. */
	assert_int_equal(lodefs_rename(fs, NULL, b, "sub", a, "empty", 0), 0);
	assert_int_equal(lodefs_getattr(fs, e, &st), -ENOENT);
	assert_int_equal(ino_of(fs, a, "empty"), sub);
	assert_int_equal(stat_of(fs, a).st_nlink, 3);
	assert_int_equal(stat_of(fs, b).st_nlink, 2);

	/* Flags. */
	assert_int_equal(lodefs_rename(fs, NULL, a, "g", a, "h", LODEFS_RENAME_NOREPLACE), -EEXIST);
	assert_int_equal(lodefs_rename(fs, NULL, a, "h", b, "h", LODEFS_RENAME_NOREPLACE), 0);
	assert_int_equal(lodefs_rename(fs, NULL, a, "g", b, "none", LODEFS_RENAME_EXCHANGE),
			 -ENOENT);
	assert_int_equal(lodefs_rename(fs, NULL, a, "g", b, "h",
				       LODEFS_RENAME_EXCHANGE | LODEFS_RENAME_NOREPLACE),
			 -EINVAL);
	assert_int_equal(lodefs_rename(fs, NULL, a, "g", b, "h", 8), -EINVAL);
	/* Exchange a directory and a file across parents. */
	assert_int_equal(lodefs_rename(fs, NULL, a, "empty", b, "h", LODEFS_RENAME_EXCHANGE), 0);
	assert_int_equal(ino_of(fs, a, "empty"), f);
	assert_int_equal(ino_of(fs, b, "h"), sub);
	assert_int_equal(stat_of(fs, a).st_nlink, 2);
	assert_int_equal(stat_of(fs, b).st_nlink, 3);
	assert_int_equal(lodefs_lookup(fs, NULL, sub, "..", &st), 0);
	assert_int_equal(st.st_ino, b);

	/* Bad names and missing sources. */
	assert_int_equal(lodefs_rename(fs, NULL, a, "nope", b, "x", 0), -ENOENT);
	assert_int_equal(lodefs_rename(fs, NULL, a, ".", b, "x", 0), -EBUSY);
	assert_int_equal(lodefs_rename(fs, NULL, a, "g", b, "..", 0), -EBUSY);
	assert_int_equal(lodefs_rename(fs, NULL, a, "g", b, "..", LODEFS_RENAME_NOREPLACE), -EEXIST);
	assert_int_equal(lodefs_rename(fs, NULL, a, "g", f, "x", 0), -ENOTDIR);
}

/* ---- extended attributes ---------------------------------------------------------------- */

static void test_xattr(void **state)
{
	lodefs_t *fs = FS(state);
	uint64_t tmp = scratch_dir(fs, "tmp", 0777), f, l;
	char buf[256], big[LODEFS_XATTR_SIZE_MAX + 1], names[512];
	struct stat st;
	lodefs_file_t *h;
	int n;

	assert_int_equal(lodefs_mknod(fs, &u1, tmp, "f", S_IFREG | 0644, 0, &st), 0);
	f = st.st_ino;
	assert_int_equal(lodefs_xattr_set(fs, &u1, f, "user.a", "alpha", 5, 0), 0);
	assert_int_equal(lodefs_xattr_set(fs, &u1, f, "user.empty", "", 0, 0), 0);
	assert_int_equal(lodefs_xattr_get(fs, &u1, f, "user.a", buf, sizeof(buf)), 5);
	assert_memory_equal(buf, "alpha", 5);
	assert_int_equal(lodefs_xattr_get(fs, &u1, f, "user.a", NULL, 0), 5);
	assert_int_equal(lodefs_xattr_get(fs, &u1, f, "user.a", buf, 4), -ERANGE);
	assert_int_equal(lodefs_xattr_get(fs, &u1, f, "user.empty", buf, sizeof(buf)), 0);
	assert_int_equal(lodefs_xattr_get(fs, &u1, f, "user.none", buf, sizeof(buf)), -ENODATA);
	/* Flags. */
	assert_int_equal(lodefs_xattr_set(fs, &u1, f, "user.a", "x", 1, XATTR_CREATE), -EEXIST);
	assert_int_equal(lodefs_xattr_set(fs, &u1, f, "user.b", "x", 1, XATTR_REPLACE), -ENODATA);
	assert_int_equal(lodefs_xattr_set(fs, &u1, f, "user.a", "beta", 4, XATTR_REPLACE), 0);
	assert_int_equal(lodefs_xattr_get(fs, &u1, f, "user.a", buf, sizeof(buf)), 4);
	assert_memory_equal(buf, "beta", 4);
	assert_int_equal(lodefs_xattr_set(fs, &u1, f, "user.b", "bb", 2, XATTR_CREATE), 0);
	/* Sizes and names. */
	memset(big, 'v', sizeof(big));
	assert_int_equal(lodefs_xattr_set(fs, &u1, f, "user.big", big, sizeof(big), 0), -E2BIG);
	assert_int_equal(lodefs_xattr_set(fs, &u1, f, "user.big", big, sizeof(big) - 1, 0), 0);
	assert_int_equal(lodefs_xattr_get(fs, &u1, f, "user.big", NULL, 0), sizeof(big) - 1);
	memset(names, 'n', 300);
	memcpy(names, "user.", 5);
	names[256] = 0;
	assert_int_equal(lodefs_xattr_set(fs, &u1, f, names, "x", 1, 0), -ERANGE);
	assert_int_equal(lodefs_xattr_set(fs, &u1, f, "", "x", 1, 0), -ERANGE);
	assert_int_equal(lodefs_xattr_set(fs, &u1, f, "nonamespace", "x", 1, 0), -EOPNOTSUPP);
	assert_int_equal(lodefs_xattr_set(fs, &u1, f, "user.a", "x", 1, 4), -EINVAL);
	/* Permissions. */
	assert_int_equal(lodefs_xattr_set(fs, &u2, f, "user.c", "x", 1, 0), -EACCES);
	assert_int_equal(lodefs_xattr_get(fs, &u2, f, "user.a", buf, sizeof(buf)), 4);
	assert_int_equal(lodefs_xattr_set(fs, &u1, f, "trusted.t", "x", 1, 0), -EPERM);
	assert_int_equal(lodefs_xattr_set(fs, &root_cred, f, "trusted.t", "tt", 2, 0), 0);
	assert_int_equal(lodefs_xattr_get(fs, &u1, f, "trusted.t", buf, sizeof(buf)), -ENODATA);
	assert_int_equal(lodefs_xattr_get(fs, &root_cred, f, "trusted.t", buf, sizeof(buf)), 2);
	assert_int_equal(lodefs_symlink(fs, &u1, tmp, "l", "f", &st), 0);
	l = st.st_ino;
	assert_int_equal(lodefs_xattr_set(fs, &u1, l, "user.x", "x", 1, 0), -EPERM);
	assert_int_equal(lodefs_xattr_get(fs, &u1, l, "user.x", buf, sizeof(buf)), -ENODATA);
	/* List: NUL-separated; trusted.* for root only. */
	n = lodefs_xattr_list(fs, &u1, f, NULL, 0);
	assert_int_equal(n, (int)strlen("user.a user.empty user.b user.big "));
	assert_int_equal(lodefs_xattr_list(fs, &u1, f, names, sizeof(names)), n);
	{
		int seen = 0;

		for (char *p = names; p < names + n; p += strlen(p) + 1)
			seen |= strcmp(p, "user.a") == 0 ? 1
				: strcmp(p, "user.empty") == 0 ? 2
				: strcmp(p, "user.b") == 0 ? 4
				: strcmp(p, "user.big") == 0 ? 8
							     : 16;
		assert_int_equal(seen, 15);
	}
	assert_int_equal(lodefs_xattr_list(fs, &u1, f, names, 5), -ERANGE);
	assert_int_equal(lodefs_xattr_list(fs, &root_cred, f, NULL, 0), n + 10);
	/* Remove. */
	assert_int_equal(lodefs_xattr_remove(fs, &u2, f, "user.a"), -EACCES);
	assert_int_equal(lodefs_xattr_remove(fs, &u1, f, "user.a"), 0);
	assert_int_equal(lodefs_xattr_remove(fs, &u1, f, "user.a"), -ENODATA);
	assert_int_equal(lodefs_xattr_get(fs, &u1, f, "user.a", buf, sizeof(buf)), -ENODATA);
	assert_int_equal(lodefs_xattr_list(fs, &u1, f, NULL, 0), n - 7);
	assert_int_equal(lodefs_xattr_get(fs, &u1, 999999, "user.a", buf, sizeof(buf)), -ENOENT);
	/* On a directory too. */
	assert_int_equal(lodefs_xattr_set(fs, &root_cred, tmp, "user.d", "dir", 3, 0), 0);
	assert_int_equal(lodefs_xattr_get(fs, &u2, tmp, "user.d", buf, sizeof(buf)), 3);

	/* lode.chunk_size: read, set while empty, refused once there is data. */
	n = lodefs_xattr_get(fs, &u1, f, "lode.chunk_size", buf, sizeof(buf));
	assert_int_equal(n, 7);
	assert_memory_equal(buf, "1048576", 7);
	assert_int_equal(lodefs_xattr_set(fs, &u2, f, "lode.chunk_size", "8192", 4, 0), -EPERM);
	assert_int_equal(lodefs_xattr_set(fs, &u1, f, "lode.chunk_size", "100", 3, 0), -EINVAL);
	assert_int_equal(lodefs_xattr_set(fs, &u1, f, "lode.chunk_size", "8k", 2, 0), -EINVAL);
	assert_int_equal(lodefs_xattr_set(fs, &u1, f, "lode.chunk_size", "8192", 4, 0), 0);
	assert_int_equal(lodefs_xattr_get(fs, &u1, f, "lode.chunk_size", buf, sizeof(buf)), 4);
	assert_memory_equal(buf, "8192", 4);
	assert_int_equal(lodefs_open(fs, &u1, f, O_RDWR, &h), 0);
	{
		uint8_t data[40000], got[40000];

		fill(data, sizeof(data), 9);
		write_all(h, data, sizeof(data), 0);
		read_check(h, data, sizeof(data), 0);
		assert_int_equal(lodefs_file_stat(h, &st), 0);
		assert_int_equal(st.st_blksize, 8192);
		assert_int_equal(lodefs_file_close(h), 0);
		assert_int_equal(lodefs_open(fs, &u1, f, O_RDONLY, &h), 0);
		assert_int_equal(lodefs_file_read(h, got, sizeof(got), 0), (ssize_t)sizeof(got));
		assert_memory_equal(got, data, sizeof(data));
		assert_int_equal(lodefs_file_close(h), 0);
	}
	assert_int_equal(lodefs_xattr_set(fs, &u1, f, "lode.chunk_size", "65536", 5, 0), -EBUSY);
	assert_int_equal(lodefs_xattr_set(fs, &root_cred, tmp, "lode.chunk_size", "65536", 5, 0),
			 -EINVAL);
}

/* ---- paths ---------------------------------------------------------------------------- */

static void test_paths(void **state)
{
	lodefs_t *fs = FS(state);
	lodefs_file_t *f;
	lodefs_dir_t *d;
	struct lodefs_dirent ents[8];
	struct stat st;
	char name[LODEFS_NAME_MAX + 1], buf[LODEFS_PATH_MAX + 300];
	struct timespec ts[2];
	uint64_t ino, parent;

	assert_int_equal(lodefs_path_mkdir(fs, NULL, "/a", 0755), 0);
	assert_int_equal(lodefs_path_mkdir(fs, NULL, "a/b/", 0755), 0);
	assert_int_equal(lodefs_path_mkdir(fs, NULL, "/a/b", 0755), -EEXIST);
	assert_int_equal(lodefs_path_mkdir(fs, NULL, "/a/x/y", 0755), -ENOENT);
	assert_int_equal(lodefs_path_mkdir(fs, NULL, "/", 0755), -EEXIST);
	assert_int_equal(lodefs_path_open(fs, NULL, "/a/b/f", O_CREAT | O_RDWR, 0600, &f), 0);
	write_all(f, "content", 7, 0);
	assert_int_equal(lodefs_file_close(f), 0);
	assert_int_equal(lodefs_path_open(fs, NULL, "/a/b/f", O_CREAT | O_EXCL | O_RDWR, 0600, &f),
			 -EEXIST);
	assert_int_equal(lodefs_path_open(fs, NULL, "/a/b", O_CREAT | O_RDWR, 0600, &f), -EISDIR);
	assert_int_equal(lodefs_path_open(fs, NULL, "/a/b/f", O_RDONLY | O_DIRECTORY, 0, &f),
			 -ENOTDIR);
	assert_int_equal(lodefs_path_open(fs, NULL, "/a/nope", O_RDONLY, 0, &f), -ENOENT);

	/* Resolution: "//", ".", "..", the root's "..", symlinks relative and absolute. */
	assert_int_equal(lodefs_path_stat(fs, NULL, "//a/./b/../b//f", &st), 0);
	assert_int_equal(st.st_size, 7);
	ino = st.st_ino;
	assert_int_equal(lodefs_path_stat(fs, NULL, "/../../a/b/f", &st), 0);
	assert_int_equal(st.st_ino, ino);
	assert_int_equal(lodefs_path_symlink(fs, NULL, "b/f", "/a/rel"), 0);
	assert_int_equal(lodefs_path_symlink(fs, NULL, "/a/b", "/abs"), 0);
	assert_int_equal(lodefs_path_stat(fs, NULL, "/a/rel", &st), 0);
	assert_int_equal(st.st_ino, ino);
	assert_int_equal(lodefs_path_lstat(fs, NULL, "/a/rel", &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	assert_int_equal(lodefs_path_stat(fs, NULL, "/abs/f", &st), 0);
	assert_int_equal(st.st_ino, ino);
	assert_int_equal(lodefs_path_resolve(fs, NULL, "/abs", LODEFS_NOFOLLOW, &parent), 0);
	assert_int_equal(lodefs_path_resolve(fs, NULL, "/abs/", LODEFS_NOFOLLOW, &ino), 0);
	assert_true(ino != parent); /* a trailing slash follows */
	assert_int_equal(lodefs_path_readlink(fs, NULL, "/abs", buf, sizeof(buf)), 4);
	assert_memory_equal(buf, "/a/b", 4);
	assert_int_equal(lodefs_path_open(fs, NULL, "/a/rel", O_RDONLY | O_NOFOLLOW, 0, &f), -ELOOP);
	assert_int_equal(lodefs_path_open(fs, NULL, "/a/rel", O_RDONLY, 0, &f), 0);
	read_check(f, "content", 7, 0);
	assert_int_equal(lodefs_file_close(f), 0);
	/* O_CREAT through a dangling symlink creates its target, as open(2). */
	assert_int_equal(lodefs_path_symlink(fs, NULL, "b/made", "/a/dangling"), 0);
	assert_int_equal(lodefs_path_open(fs, NULL, "/a/dangling", O_CREAT | O_EXCL | O_WRONLY,
					  0600, &f),
			 -EEXIST);
	assert_int_equal(lodefs_path_open(fs, NULL, "/a/dangling", O_CREAT | O_WRONLY, 0600, &f), 0);
	assert_int_equal(lodefs_file_close(f), 0);
	assert_int_equal(lodefs_path_lstat(fs, NULL, "/a/b/made", &st), 0);
	assert_true(S_ISREG(st.st_mode));
	/* Loops, files in the middle, trailing slashes on files, long names. */
	assert_int_equal(lodefs_path_symlink(fs, NULL, "loop2", "/loop1"), 0);
	assert_int_equal(lodefs_path_symlink(fs, NULL, "loop1", "/loop2"), 0);
	assert_int_equal(lodefs_path_stat(fs, NULL, "/loop1", &st), -ELOOP);
	assert_int_equal(lodefs_path_lstat(fs, NULL, "/loop1", &st), 0);
	assert_int_equal(lodefs_path_stat(fs, NULL, "/a/b/f/x", &st), -ENOTDIR);
	assert_int_equal(lodefs_path_stat(fs, NULL, "/a/b/f/", &st), -ENOTDIR);
	assert_int_equal(lodefs_path_stat(fs, NULL, "", &st), -ENOENT);
	memset(buf, 'x', 300);
	buf[0] = '/';
	buf[300] = 0;
	assert_int_equal(lodefs_path_stat(fs, NULL, buf, &st), -ENAMETOOLONG);
	memset(buf, 'x', sizeof(buf));
	for (size_t i = 0; i < sizeof(buf); i += 100)
		buf[i] = '/';
	buf[LODEFS_PATH_MAX] = 0;
	assert_int_equal(lodefs_path_stat(fs, NULL, buf, &st), -ENAMETOOLONG);

	/* path_parent. */
	assert_int_equal(lodefs_path_parent(fs, NULL, "/a/b/f", &parent, name), 0);
	assert_int_equal(parent, ino_of(fs, ino_of(fs, ROOT, "a"), "b"));
	assert_string_equal(name, "f");
	assert_int_equal(lodefs_path_parent(fs, NULL, "top//", &parent, name), 0);
	assert_int_equal(parent, ROOT);
	assert_string_equal(name, "top");
	assert_int_equal(lodefs_path_parent(fs, NULL, "/", &parent, name), -EINVAL);
	assert_int_equal(lodefs_path_parent(fs, NULL, "/a/b/f/g", &parent, name), -ENOTDIR);

	/* Permission on the way: search. */
	assert_int_equal(lodefs_path_chmod(fs, NULL, "/a", 0700), 0);
	assert_int_equal(lodefs_path_stat(fs, &u1, "/a/b/f", &st), -EACCES);
	assert_int_equal(lodefs_path_access(fs, &u1, "/a", X_OK), -EACCES);
	assert_int_equal(lodefs_path_chmod(fs, NULL, "/a", 0755), 0);
	assert_int_equal(lodefs_path_access(fs, &u1, "/a/b/f", R_OK), -EACCES);
	assert_int_equal(lodefs_path_access(fs, &u1, "/a/b/f", F_OK), 0);

	/* The attribute calls. */
	assert_int_equal(lodefs_path_truncate(fs, NULL, "/a/rel", 3), 0);
	assert_int_equal(lodefs_path_stat(fs, NULL, "/a/b/f", &st), 0);
	assert_int_equal(st.st_size, 3);
	assert_int_equal(lodefs_path_truncate(fs, NULL, "/a", 3), -EISDIR);
	assert_int_equal(lodefs_path_chown(fs, &root_cred, "/a/b/f", 1000, (gid_t)-1, 0), 0);
	assert_int_equal(lodefs_path_stat(fs, NULL, "/a/b/f", &st), 0);
	assert_int_equal(st.st_uid, 1000);
	assert_int_equal(st.st_gid, getegid());
	assert_int_equal(lodefs_path_chown(fs, &root_cred, "/a/rel", (uid_t)-1, 2000,
					   LODEFS_NOFOLLOW),
			 0);
	assert_int_equal(lodefs_path_lstat(fs, NULL, "/a/rel", &st), 0);
	assert_int_equal(st.st_gid, 2000);
	ts[0] = (struct timespec){.tv_sec = 5, .tv_nsec = UTIME_OMIT};
	ts[1] = (struct timespec){.tv_sec = 12345, .tv_nsec = 678};
	assert_int_equal(lodefs_path_utimens(fs, NULL, "/a/b/f", ts, 0), 0);
	assert_int_equal(lodefs_path_stat(fs, NULL, "/a/b/f", &st), 0);
	assert_int_equal(st.st_mtim.tv_sec, 12345);
	assert_int_equal(st.st_mtim.tv_nsec, 678);
	assert_true(st.st_atim.tv_sec != 5);
	ts[1].tv_nsec = UTIME_NOW;
	assert_int_equal(lodefs_path_utimens(fs, NULL, "/a/b/f", ts, 0), 0);
	assert_int_equal(lodefs_path_stat(fs, NULL, "/a/b/f", &st), 0);
	assert_true(st.st_mtim.tv_sec > 12345);
	assert_int_equal(lodefs_path_utimens(fs, NULL, "/a/b/f", NULL, 0), 0);
	ts[1].tv_nsec = -5;
	assert_int_equal(lodefs_path_utimens(fs, NULL, "/a/b/f", ts, 0), -EINVAL);

	/* Links, renames, removal. */
	assert_int_equal(lodefs_path_link(fs, NULL, "/a/b/f", "/hard"), 0);
	assert_int_equal(lodefs_path_stat(fs, NULL, "/hard", &st), 0);
	assert_int_equal(st.st_nlink, 2);
	assert_int_equal(lodefs_path_link(fs, NULL, "/a/rel", "/hardsym"), 0);
	assert_int_equal(lodefs_path_lstat(fs, NULL, "/hardsym", &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	assert_int_equal(lodefs_path_rename(fs, NULL, "/hard", "/a/moved", 0), 0);
	assert_int_equal(lodefs_path_stat(fs, NULL, "/hard", &st), -ENOENT);
	assert_int_equal(lodefs_path_rename(fs, NULL, "/a/moved/", "/x", 0), -ENOTDIR);
	assert_int_equal(lodefs_path_rename(fs, NULL, "/", "/x", 0), -EBUSY);
	assert_int_equal(lodefs_path_unlink(fs, NULL, "/a/moved/"), -ENOTDIR);
	assert_int_equal(lodefs_path_unlink(fs, NULL, "/a/b/"), -EISDIR);
	assert_int_equal(lodefs_path_unlink(fs, NULL, "/a/moved"), 0);
	assert_int_equal(lodefs_path_rmdir(fs, NULL, "/a/b"), -ENOTEMPTY);
	assert_int_equal(lodefs_path_rmdir(fs, NULL, "/"), -EBUSY);
	assert_int_equal(lodefs_path_rmdir(fs, NULL, "/a/b/f"), -ENOTDIR);

	/* opendir. */
	assert_int_equal(lodefs_path_opendir(fs, NULL, "/abs", &d), 0);
	assert_int_equal(lodefs_dir_read(d, ents, 8), 2);
	qsort(ents, 2, sizeof(ents[0]), name_cmp);
	assert_string_equal(ents[0].name, "f");
	assert_string_equal(ents[1].name, "made");
	assert_int_equal(lodefs_dir_close(d), 0);
	assert_int_equal(lodefs_path_opendir(fs, NULL, "/a/b/f", &d), -ENOTDIR);
}

/* Files left open at unmount are closed by it; their pending times are stored. */
static void test_umount_closes(void **state)
{
	struct tctx *t = *state;
	lodefs_t *fs2 = mount_new(t->label, 0);
	lodefs_file_t *f = fopen_rw(fs2, ROOT, "left-open");
	lodefs_dir_t *d;

	write_all(f, "abc", 3, 0);
	assert_int_equal(lodefs_dir_open(fs2, NULL, ROOT, &d), 0);
	assert_int_equal(lodefs_umount(fs2), 0);
	assert_int_equal(stat_of(t->fs, ino_of(t->fs, ROOT, "left-open")).st_size, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_mount_root, fs_setup, fs_teardown),
		cmocka_unit_test_setup_teardown(test_mount_damaged, fs_setup, fs_teardown),
		cmocka_unit_test_setup_teardown(test_create_write_read, fs_setup, fs_teardown),
		cmocka_unit_test_setup_teardown(test_aio_read, fs_setup, fs_teardown),
		cmocka_unit_test_setup_teardown(test_aio_write, fs_setup, fs_teardown),
		cmocka_unit_test_setup_teardown(test_open_types, fs_setup, fs_teardown),
		cmocka_unit_test_setup_teardown(test_mkdir_readdir, fs_setup, fs_teardown),
		cmocka_unit_test_setup_teardown(test_readdir_many, fs_setup, fs_teardown),
		cmocka_unit_test_setup_teardown(test_unlink_rmdir, fs_setup, fs_teardown),
		cmocka_unit_test_setup_teardown(test_unlink_while_open, fs_setup, fs_teardown),
		cmocka_unit_test_setup_teardown(test_setattr_perms, fs_setup, fs_teardown),
		cmocka_unit_test_setup_teardown(test_dir_perms, fs_setup, fs_teardown),
		cmocka_unit_test_setup_teardown(test_times, fs_setup, fs_teardown),
		cmocka_unit_test_setup_teardown(test_truncate, fs_setup, fs_teardown),
		cmocka_unit_test_setup_teardown(test_readv_writev_append, fs_setup, fs_teardown),
		cmocka_unit_test_setup_teardown(test_two_instances, fs_setup, fs_teardown),
		cmocka_unit_test_setup_teardown(test_threads_distinct_ranges, fs_setup, fs_teardown),
		cmocka_unit_test_setup_teardown(test_links, fs_setup, fs_teardown),
		cmocka_unit_test_setup_teardown(test_rename, fs_setup, fs_teardown),
		cmocka_unit_test_setup_teardown(test_xattr, fs_setup, fs_teardown),
		cmocka_unit_test_setup_teardown(test_paths, fs_setup, fs_teardown),
		cmocka_unit_test_setup_teardown(test_umount_closes, fs_setup, fs_teardown),
	};
	const char *env = getenv("LODE_TEST_TRANSPORTS");
	char list[64], *save = NULL;
	int failed = 0;

	snprintf(list, sizeof(list), "%s", env && *env ? env : "tcp shm");
	for (char *t = strtok_r(list, " ,", &save); t; t = strtok_r(NULL, " ,", &save)) {
		char name[64];

		tp = t;
		label_seq = 0;
		snprintf(name, sizeof(name), "lodefs_%s", t);
		failed += _cmocka_run_group_tests(name, tests, sizeof(tests) / sizeof(tests[0]),
						  group_setup, group_teardown);
	}
	return failed ? 1 : 0;
}
