/*
 * The suite's liblodefs backend: each px_ops call is the lodefs_path_* or
 * lodefs_file_* call a program (or the preload library) would make.
 *
 * liblodefs has file handles, not descriptors, and no file position; this
 * backend keeps a small descriptor table mapping an int to a handle and a
 * position, so that write(2)-style calls work as they do on a kernel file:
 * a plain descriptor writes at its position, an O_APPEND one at the end
 * (liblodefs says where through end_out), and the position moves past
 * what was written. Extended attributes have no path calls in liblodefs:
 * the path is resolved (following symlinks, as setxattr(2) does) and the
 * inode calls used.
 *
 * Credentials are per thread: as_user() records a struct lodefs_cred for
 * the calling thread; root means NULL, the credentials of the mount.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h> /* RENAME_NOREPLACE, RENAME_EXCHANGE */
#include <stdlib.h>
#include <string.h>

#include "lode/lodefs.h"
#include "suite.h"

#define LIB_FDS 1024
#define LIB_FD_BASE 3 /* descriptors look like the kernel's: 0..2 are never handed out */
#define LIB_DIR_BATCH 256

struct lib_fd {
	lodefs_file_t *f; /* NULL: free */
	uint64_t pos;
};

struct lib {
	lodefs_t *fs;
	pthread_mutex_t lock; /* the table; calls on a handle run unlocked */
	struct lib_fd fds[LIB_FDS];
};

static __thread struct lodefs_cred tl_cred;
static __thread bool tl_user;

static const struct lodefs_cred *cred(void)
{
	return tl_user ? &tl_cred : NULL;
}

/* The handle behind fd, or NULL. The slot stays valid until that fd's close. */
static lodefs_file_t *fd_file(struct lib *l, int fd)
{
	lodefs_file_t *f = NULL;

	if (fd < LIB_FD_BASE || fd >= LIB_FD_BASE + LIB_FDS)
		return NULL;
	pthread_mutex_lock(&l->lock);
	f = l->fds[fd - LIB_FD_BASE].f;
	pthread_mutex_unlock(&l->lock);
	return f;
}

static int lib_open(void *b, const char *path, int flags, mode_t mode)
{
	struct lib *l = b;
	lodefs_file_t *f;
	int rc;

	if ((rc = lodefs_path_open(l->fs, cred(), path, flags, mode, &f)) < 0)
		return rc;
	pthread_mutex_lock(&l->lock);
	for (int i = 0; i < LIB_FDS; i++) {
		if (!l->fds[i].f) {
			l->fds[i] = (struct lib_fd){.f = f, .pos = 0};
			pthread_mutex_unlock(&l->lock);
			return LIB_FD_BASE + i;
		}
	}
	pthread_mutex_unlock(&l->lock);
	lodefs_file_close(f);
	return -EMFILE;
}

static int lib_close(void *b, int fd)
{
	struct lib *l = b;
	lodefs_file_t *f;

	if (fd < LIB_FD_BASE || fd >= LIB_FD_BASE + LIB_FDS)
		return -EBADF;
	pthread_mutex_lock(&l->lock);
	f = l->fds[fd - LIB_FD_BASE].f;
	l->fds[fd - LIB_FD_BASE].f = NULL;
	pthread_mutex_unlock(&l->lock);
	return f ? lodefs_file_close(f) : -EBADF;
}

static ssize_t lib_pread(void *b, int fd, void *buf, size_t len, uint64_t off)
{
	lodefs_file_t *f = fd_file(b, fd);

	return f ? lodefs_file_read(f, buf, len, off) : -EBADF;
}

static ssize_t lib_pwrite(void *b, int fd, const void *buf, size_t len, uint64_t off)
{
	lodefs_file_t *f = fd_file(b, fd);

	return f ? lodefs_file_write(f, buf, len, off, NULL) : -EBADF;
}

static ssize_t lib_write(void *b, int fd, const void *buf, size_t len)
{
	struct lib *l = b;
	lodefs_file_t *f = fd_file(l, fd);
	struct lib_fd *slot;
	uint64_t end = 0;
	ssize_t n;

	if (!f)
		return -EBADF;
	slot = &l->fds[fd - LIB_FD_BASE];
	/* A descriptor's position is its own thread's business, as with write(2) on one fd. */
	n = lodefs_file_write(f, buf, len, slot->pos, &end);
	if (n >= 0)
		slot->pos = end;
	return n;
}

static int lib_ftruncate(void *b, int fd, uint64_t size)
{
	lodefs_file_t *f = fd_file(b, fd);

	return f ? lodefs_file_truncate(f, size) : -EBADF;
}

static int lib_fsync(void *b, int fd)
{
	lodefs_file_t *f = fd_file(b, fd);

	return f ? lodefs_file_sync(f, 0) : -EBADF;
}

static int lib_fstat(void *b, int fd, struct stat *st)
{
	lodefs_file_t *f = fd_file(b, fd);

	return f ? lodefs_file_stat(f, st) : -EBADF;
}

static int lib_stat(void *b, const char *path, struct stat *st)
{
	return lodefs_path_stat(((struct lib *)b)->fs, cred(), path, st);
}

static int lib_lstat(void *b, const char *path, struct stat *st)
{
	return lodefs_path_lstat(((struct lib *)b)->fs, cred(), path, st);
}

static int lib_mkdir(void *b, const char *path, mode_t mode)
{
	return lodefs_path_mkdir(((struct lib *)b)->fs, cred(), path, mode);
}

static int lib_rmdir(void *b, const char *path)
{
	return lodefs_path_rmdir(((struct lib *)b)->fs, cred(), path);
}

static int lib_unlink(void *b, const char *path)
{
	return lodefs_path_unlink(((struct lib *)b)->fs, cred(), path);
}

static int lib_rename(void *b, const char *from, const char *to, unsigned flags)
{
	unsigned lf = 0;

	/* renameat2's flags, spelled as liblodefs spells them. */
	if (flags & RENAME_NOREPLACE)
		lf |= LODEFS_RENAME_NOREPLACE;
	if (flags & RENAME_EXCHANGE)
		lf |= LODEFS_RENAME_EXCHANGE;
	if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;
	return lodefs_path_rename(((struct lib *)b)->fs, cred(), from, to, lf);
}

static int lib_link(void *b, const char *from, const char *to)
{
	return lodefs_path_link(((struct lib *)b)->fs, cred(), from, to);
}

static int lib_symlink(void *b, const char *target, const char *path)
{
	return lodefs_path_symlink(((struct lib *)b)->fs, cred(), target, path);
}

static ssize_t lib_readlink(void *b, const char *path, char *buf, size_t cap)
{
	return lodefs_path_readlink(((struct lib *)b)->fs, cred(), path, buf, cap);
}

static int lib_truncate(void *b, const char *path, uint64_t size)
{
	return lodefs_path_truncate(((struct lib *)b)->fs, cred(), path, size);
}

static int lib_chmod(void *b, const char *path, mode_t mode)
{
	return lodefs_path_chmod(((struct lib *)b)->fs, cred(), path, mode);
}

static int lib_chown(void *b, const char *path, uid_t uid, gid_t gid)
{
	return lodefs_path_chown(((struct lib *)b)->fs, cred(), path, uid, gid, 0);
}

static int lib_utimens(void *b, const char *path, const struct timespec times[2])
{
	return lodefs_path_utimens(((struct lib *)b)->fs, cred(), path, times, 0);
}

static int lib_access(void *b, const char *path, int mask)
{
	return lodefs_path_access(((struct lib *)b)->fs, cred(), path, mask);
}

static int lib_readdir(void *b, const char *path, px_name_fn fn, void *arg)
{
	struct lodefs_dirent *ents = malloc(LIB_DIR_BATCH * sizeof(*ents));
	lodefs_dir_t *d;
	int rc, n;

	if (!ents)
		return -ENOMEM;
	if ((rc = lodefs_path_opendir(((struct lib *)b)->fs, cred(), path, &d)) < 0) {
		free(ents);
		return rc;
	}
	while ((n = lodefs_dir_read(d, ents, LIB_DIR_BATCH)) > 0) {
		for (int i = 0; i < n; i++)
			if (fn(arg, ents[i].name))
				goto out;
	}
	rc = n;
out:
	free(ents);
	n = lodefs_dir_close(d);
	return rc < 0 ? rc : n;
}

/* The inode an xattr call on path acts on: the symlink's target, as setxattr(2). */
static int xattr_ino(struct lib *l, const char *path, uint64_t *ino)
{
	return lodefs_path_resolve(l->fs, cred(), path, 0, ino);
}

static int lib_setxattr(void *b, const char *path, const char *name, const void *value,
			size_t size, int flags)
{
	struct lib *l = b;
	uint64_t ino;
	int rc = xattr_ino(l, path, &ino);

	return rc < 0 ? rc : lodefs_xattr_set(l->fs, cred(), ino, name, value, size, flags);
}

static ssize_t lib_getxattr(void *b, const char *path, const char *name, void *buf, size_t cap)
{
	struct lib *l = b;
	uint64_t ino;
	int rc = xattr_ino(l, path, &ino);

	return rc < 0 ? rc : lodefs_xattr_get(l->fs, cred(), ino, name, buf, cap);
}

static ssize_t lib_listxattr(void *b, const char *path, char *buf, size_t cap)
{
	struct lib *l = b;
	uint64_t ino;
	int rc = xattr_ino(l, path, &ino);

	return rc < 0 ? rc : lodefs_xattr_list(l->fs, cred(), ino, buf, cap);
}

static int lib_removexattr(void *b, const char *path, const char *name)
{
	struct lib *l = b;
	uint64_t ino;
	int rc = xattr_ino(l, path, &ino);

	return rc < 0 ? rc : lodefs_xattr_remove(l->fs, cred(), ino, name);
}

static int lib_statfs(void *b, struct statvfs *st)
{
	return lodefs_statfs(((struct lib *)b)->fs, st);
}

static int lib_as_user(void *b, uid_t uid, gid_t gid)
{
	tl_user = uid != 0 || gid != 0;
	tl_cred = (struct lodefs_cred){.uid = uid, .gid = gid, .ngroups = 0, .groups = NULL};
	return 0;
}

const struct px_ops px_lib_ops = {
	.open = lib_open,
	.close = lib_close,
	.pread = lib_pread,
	.pwrite = lib_pwrite,
	.write = lib_write,
	.ftruncate = lib_ftruncate,
	.fsync = lib_fsync,
	.fstat = lib_fstat,
	.stat = lib_stat,
	.lstat = lib_lstat,
	.mkdir = lib_mkdir,
	.rmdir = lib_rmdir,
	.unlink = lib_unlink,
	.rename = lib_rename,
	.link = lib_link,
	.symlink = lib_symlink,
	.readlink = lib_readlink,
	.truncate = lib_truncate,
	.chmod = lib_chmod,
	.chown = lib_chown,
	.utimens = lib_utimens,
	.access = lib_access,
	.readdir = lib_readdir,
	.setxattr = lib_setxattr,
	.getxattr = lib_getxattr,
	.listxattr = lib_listxattr,
	.removexattr = lib_removexattr,
	.statfs = lib_statfs,
	.as_user = lib_as_user,
};

int px_lib_create(struct lodefs *fs, void **b_out)
{
	struct lib *l = calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	l->fs = fs;
	pthread_mutex_init(&l->lock, NULL);
	*b_out = l;
	return 0;
}

void px_lib_destroy(void *b)
{
	struct lib *l = b;

	if (!l)
		return;
	for (int i = 0; i < LIB_FDS; i++)
		if (l->fds[i].f)
			lodefs_file_close(l->fds[i].f);
	pthread_mutex_destroy(&l->lock);
	free(l);
}
