/*
 * The POSIX behaviour suite: one set of cases, run against any backend that
 * can carry out file-system calls on a namespace.
 *
 * A backend is a struct px_ops: the calls a program makes (open, pread,
 * rename, setxattr, ...), each taking paths relative to the backend's own
 * root ("/a/b" names a/b under it) and returning what the system call
 * would, with errors as a negative errno instead of -1 and errno, so that
 * a case can compare exact error codes whatever the backend. Two exist:
 * backend_lib.c (liblodefs's path API) and backend_sys.c (system calls
 * under a directory, for a FUSE mount).
 *
 * px_suite_run() runs every case as a cmocka group; each case works in a
 * fresh directory of its own ("/<case>") under the backend's root, so one
 * failed case leaves nothing that breaks the next. The case names printed
 * carry the backend's label ("lib/tcp.rename_dir"), so a failure says
 * which case on which backend.
 */
#ifndef LODE_TESTS_POSIX_SUITE_H
#define LODE_TESTS_POSIX_SUITE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <time.h>

#define PX_NAME_MAX 255 /* longest name either backend stores */

/* Called once per directory entry (never "." or ".."); nonzero stops the walk. */
typedef int (*px_name_fn)(void *arg, const char *name);

/*
 * A backend. b is the backend's own state (px_suite_run's b). Calls that
 * return int give 0 (or a descriptor, or a count where stated) or a
 * negative errno; ssize_t calls give a count or a negative errno. Every call
 * may be made from several threads at once.
 */
struct px_ops {
	/* open(2) with O_CREAT, O_EXCL, O_TRUNC, O_APPEND, O_RDONLY/O_WRONLY/O_RDWR: a descriptor >= 0. */
	int (*open)(void *b, const char *path, int flags, mode_t mode);
	int (*close)(void *b, int fd);
	ssize_t (*pread)(void *b, int fd, void *buf, size_t len, uint64_t off);
	ssize_t (*pwrite)(void *b, int fd, const void *buf, size_t len, uint64_t off);
	/* write(2): at the descriptor's position (the end with O_APPEND), which then advances. */
	ssize_t (*write)(void *b, int fd, const void *buf, size_t len);
	int (*ftruncate)(void *b, int fd, uint64_t size);
	int (*fsync)(void *b, int fd);
	int (*fstat)(void *b, int fd, struct stat *st);

	int (*stat)(void *b, const char *path, struct stat *st);
	int (*lstat)(void *b, const char *path, struct stat *st);
	int (*mkdir)(void *b, const char *path, mode_t mode);
	int (*rmdir)(void *b, const char *path);
	int (*unlink)(void *b, const char *path);
	/* renameat2(2): flags 0, RENAME_NOREPLACE or RENAME_EXCHANGE. */
	int (*rename)(void *b, const char *from, const char *to, unsigned flags);
	int (*link)(void *b, const char *from, const char *to);
	int (*symlink)(void *b, const char *target, const char *path);
	/* readlink(2): the length copied (no NUL added). */
	ssize_t (*readlink)(void *b, const char *path, char *buf, size_t cap);
	int (*truncate)(void *b, const char *path, uint64_t size);
	int (*chmod)(void *b, const char *path, mode_t mode);
	int (*chown)(void *b, const char *path, uid_t uid, gid_t gid);
	/* utimensat(2) following symlinks; times NULL means both now. */
	int (*utimens)(void *b, const char *path, const struct timespec times[2]);
	int (*access)(void *b, const char *path, int mask);
	/* opendir, readdir until the end calling fn per name, closedir. */
	int (*readdir)(void *b, const char *path, px_name_fn fn, void *arg);

	int (*setxattr)(void *b, const char *path, const char *name, const void *value,
			size_t size, int flags);
	ssize_t (*getxattr)(void *b, const char *path, const char *name, void *buf, size_t cap);
	ssize_t (*listxattr)(void *b, const char *path, char *buf, size_t cap);
	int (*removexattr)(void *b, const char *path, const char *name);
	int (*statfs)(void *b, struct statvfs *st);

	/*
	 * Make the calling thread's later calls act as uid/gid with no
	 * supplementary groups; (0, 0) goes back to root. Only the thread
	 * that calls it is affected.
	 */
	int (*as_user)(void *b, uid_t uid, gid_t gid);
};

/*
 * Run every case against ops/b, printing per-case results; label names the
 * backend in the output ("lib/tcp", "fuse"). The caller runs as root. The
 * backend's root must be an empty (or at least case-free) directory.
 * Returns the number of failed cases.
 */
int px_suite_run(const char *label, const struct px_ops *ops, void *b);

/*
 * Make the large-directory case (readdir_many) create its entries through
 * fops/fb, labelled flabel, instead of the backend under test, and list
 * them through both. The two must name the same namespace with the same
 * paths. For a FUSE run whose own creates would take minutes under ASan;
 * NULL goes back to the backend under test.
 */
void px_suite_fill(const char *flabel, const struct px_ops *fops, void *fb);

/*
 * backend_lib.c: liblodefs's path API on a mounted instance, with a table
 * of descriptors of its own. px_lib_create fails with -ENOMEM only.
 */
struct lodefs;
extern const struct px_ops px_lib_ops;
int px_lib_create(struct lodefs *fs, void **b_out);
void px_lib_destroy(void *b); /* closes what the cases left open */

/*
 * backend_sys.c: system calls on the directory root (an absolute path);
 * as_user switches the calling thread's file-system uid and gid. Errors of
 * px_sys_create: -ENAMETOOLONG, -ENOMEM, those of getgroups(2).
 */
extern const struct px_ops px_sys_ops;
int px_sys_create(const char *root, void **b_out);
void px_sys_destroy(void *b);

#endif
