/*
 * The suite's system-call backend: each px_ops call is the system call
 * itself on <root><path>, with -errno for -1 — so the same cases run on
 * a FUSE mount (or, to check the cases themselves, on any local file
 * system).
 *
 * as_user() changes the calling thread's file-system uid and gid
 * (setfsuid/setfsgid act on one thread) and its supplementary groups
 * through the raw system call, because glibc's setgroups() would change
 * every thread of the process. The kernel drops the file-system
 * capabilities of a thread whose fsuid is not 0, so the checks the suite
 * makes are the kernel's (and, on a FUSE mount with default_permissions,
 * the daemon sees that uid in its requests).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "suite.h"

#define SYS_GROUPS_MAX 64

struct sys {
	char root[PATH_MAX];
	int ngroups;                   /* the process's groups, restored by as_user(0, 0) */
	gid_t groups[SYS_GROUPS_MAX];
};

/* A path for the system: root + path, in the caller's buffer. */
#define FULL(b, path, out)                                                                     \
	char out[2 * PATH_MAX];                                                                \
	if ((size_t)snprintf(out, sizeof(out), "%s%s%s", ((struct sys *)(b))->root,           \
			     (path)[0] == '/' ? "" : "/", (path)) >= sizeof(out))              \
		return -ENAMETOOLONG;

static long ret(long rc)
{
	return rc < 0 ? -errno : rc;
}

static int sys_open(void *b, const char *path, int flags, mode_t mode)
{
	FULL(b, path, p);
	return (int)ret(open(p, flags | O_CLOEXEC, mode));
}

static int sys_close(void *b, int fd)
{
	return (int)ret(close(fd));
}

static ssize_t sys_pread(void *b, int fd, void *buf, size_t len, uint64_t off)
{
	return ret(pread(fd, buf, len, (off_t)off));
}

static ssize_t sys_pwrite(void *b, int fd, const void *buf, size_t len, uint64_t off)
{
	return ret(pwrite(fd, buf, len, (off_t)off));
}

static ssize_t sys_write(void *b, int fd, const void *buf, size_t len)
{
	return ret(write(fd, buf, len));
}

static int sys_ftruncate(void *b, int fd, uint64_t size)
{
	return (int)ret(ftruncate(fd, (off_t)size));
}

static int sys_fsync(void *b, int fd)
{
	return (int)ret(fsync(fd));
}

static int sys_fstat(void *b, int fd, struct stat *st)
{
	return (int)ret(fstat(fd, st));
}

static int sys_stat(void *b, const char *path, struct stat *st)
{
	FULL(b, path, p);
	return (int)ret(stat(p, st));
}

static int sys_lstat(void *b, const char *path, struct stat *st)
{
	FULL(b, path, p);
	return (int)ret(lstat(p, st));
}

static int sys_mkdir(void *b, const char *path, mode_t mode)
{
	FULL(b, path, p);
	return (int)ret(mkdir(p, mode));
}

static int sys_rmdir(void *b, const char *path)
{
	FULL(b, path, p);
	return (int)ret(rmdir(p));
}

static int sys_unlink(void *b, const char *path)
{
	FULL(b, path, p);
	return (int)ret(unlink(p));
}

static int sys_rename(void *b, const char *from, const char *to, unsigned flags)
{
	FULL(b, from, p);
	FULL(b, to, q);
	return (int)ret(renameat2(AT_FDCWD, p, AT_FDCWD, q, flags));
}

static int sys_link(void *b, const char *from, const char *to)
{
	FULL(b, from, p);
	FULL(b, to, q);
	return (int)ret(link(p, q));
}

static int sys_symlink(void *b, const char *target, const char *path)
{
	FULL(b, path, p);
	return (int)ret(symlink(target, p));
}

static ssize_t sys_readlink(void *b, const char *path, char *buf, size_t cap)
{
	FULL(b, path, p);
	return ret(readlink(p, buf, cap));
}

static int sys_truncate(void *b, const char *path, uint64_t size)
{
	FULL(b, path, p);
	return (int)ret(truncate(p, (off_t)size));
}

static int sys_chmod(void *b, const char *path, mode_t mode)
{
	FULL(b, path, p);
	return (int)ret(chmod(p, mode));
}

static int sys_chown(void *b, const char *path, uid_t uid, gid_t gid)
{
	FULL(b, path, p);
	return (int)ret(chown(p, uid, gid));
}

static int sys_utimens(void *b, const char *path, const struct timespec times[2])
{
	FULL(b, path, p);
	return (int)ret(utimensat(AT_FDCWD, p, times, 0));
}

static int sys_access(void *b, const char *path, int mask)
{
	FULL(b, path, p);
	/* faccessat with AT_EACCESS checks as the fsuid set by as_user, not the real uid. */
	return (int)ret(faccessat(AT_FDCWD, p, mask, AT_EACCESS));
}

static int sys_readdir(void *b, const char *path, px_name_fn fn, void *arg)
{
	struct dirent *e;
	DIR *d;
	int rc = 0;

	FULL(b, path, p);
	if (!(d = opendir(p)))
		return -errno;
	for (;;) {
		errno = 0;
		if (!(e = readdir(d))) {
			rc = -errno;
			break;
		}
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (fn(arg, e->d_name))
			break;
	}
	closedir(d);
	return rc;
}

static int sys_setxattr(void *b, const char *path, const char *name, const void *value,
			size_t size, int flags)
{
	FULL(b, path, p);
	return (int)ret(setxattr(p, name, value, size, flags));
}

static ssize_t sys_getxattr(void *b, const char *path, const char *name, void *buf, size_t cap)
{
	FULL(b, path, p);
	return ret(getxattr(p, name, buf, cap));
}

static ssize_t sys_listxattr(void *b, const char *path, char *buf, size_t cap)
{
	FULL(b, path, p);
	return ret(listxattr(p, buf, cap));
}

static int sys_removexattr(void *b, const char *path, const char *name)
{
	FULL(b, path, p);
	return (int)ret(removexattr(p, name));
}

static int sys_statfs(void *b, struct statvfs *st)
{
	return (int)ret(statvfs(((struct sys *)b)->root, st));
}

/* setfsuid/setfsgid say nothing of failure: read the value back. */
static int fsid_set(uid_t uid, gid_t gid)
{
	setfsgid(gid);
	setfsuid(uid);
	if ((uid_t)setfsuid((uid_t)-1) != uid || (gid_t)setfsgid((gid_t)-1) != gid)
		return -EPERM;
	return 0;
}

static int sys_as_user(void *b, uid_t uid, gid_t gid)
{
	struct sys *s = b;

	if (uid == 0 && gid == 0) {
		/* Root again first: changing groups needs the capabilities back. */
		if (fsid_set(0, 0) < 0)
			return -EPERM;
		return (int)ret(syscall(SYS_setgroups, (size_t)s->ngroups, s->groups));
	}
	if (syscall(SYS_setgroups, (size_t)0, NULL) < 0)
		return -errno;
	return fsid_set(uid, gid);
}

const struct px_ops px_sys_ops = {
	.open = sys_open,
	.close = sys_close,
	.pread = sys_pread,
	.pwrite = sys_pwrite,
	.write = sys_write,
	.ftruncate = sys_ftruncate,
	.fsync = sys_fsync,
	.fstat = sys_fstat,
	.stat = sys_stat,
	.lstat = sys_lstat,
	.mkdir = sys_mkdir,
	.rmdir = sys_rmdir,
	.unlink = sys_unlink,
	.rename = sys_rename,
	.link = sys_link,
	.symlink = sys_symlink,
	.readlink = sys_readlink,
	.truncate = sys_truncate,
	.chmod = sys_chmod,
	.chown = sys_chown,
	.utimens = sys_utimens,
	.access = sys_access,
	.readdir = sys_readdir,
	.setxattr = sys_setxattr,
	.getxattr = sys_getxattr,
	.listxattr = sys_listxattr,
	.removexattr = sys_removexattr,
	.statfs = sys_statfs,
	.as_user = sys_as_user,
};

int px_sys_create(const char *root, void **b_out)
{
	struct sys *s = calloc(1, sizeof(*s));
	size_t n = strlen(root);

	if (!s)
		return -ENOMEM;
	/* No trailing slash: paths are appended as "/case/...". */
	while (n > 1 && root[n - 1] == '/')
		n--;
	if (n >= sizeof(s->root)) {
		free(s);
		return -ENAMETOOLONG;
	}
	memcpy(s->root, root, n);
	if ((s->ngroups = getgroups(SYS_GROUPS_MAX, s->groups)) < 0) {
		int rc = -errno;

		free(s);
		return rc;
	}
	*b_out = s;
	return 0;
}

void px_sys_destroy(void *b)
{
	free(b);
}
