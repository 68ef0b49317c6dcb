/*
 * The intercepted POSIX calls.
 *
 * Every open goes to the kernel first, through the FUSE mount, so that the
 * kernel descriptor exists and lode-fuse applies O_CREAT, O_EXCL, O_TRUNC
 * and permissions exactly as without the preload. Only then, if the result
 * is a regular file on a Lode mount, the same inode is opened in liblodefs
 * and the descriptor is entered in the table (fdtab.c). From then on its
 * data moves through liblodefs; anything the preload does not handle still
 * works through the kernel descriptor.
 *
 * The file offset stays in the kernel descriptor: read and write take it
 * with lseek(fd, 0, SEEK_CUR), do the I/O at that offset and put the new
 * one back with SEEK_SET (the FUSE kernel module answers both without a
 * round trip to the daemon). That way dup'd descriptors, a forked child and
 * a program that mixes intercepted and plain calls all share one offset,
 * as they would without the preload. A description's lock keeps two
 * threads' reads on one descriptor from taking the same offset.
 *
 * Errors from liblodefs become errno; Lode's own codes (above 4095), a
 * lost connection and a lost engine (EHOSTDOWN) become EIO, since no
 * program expects ECONNRESET from read(2).
 */
#undef _FORTIFY_SOURCE
#include "preload/preload.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#define PL_RW_MAX 0x7ffff000 /* Linux's largest single read or write */

/* Declared by glibc only under _FORTIFY_SOURCE, or not at all since 2.33. */
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);
ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen);
ssize_t __pread_chk(int fd, void *buf, size_t len, off_t off, size_t buflen);
ssize_t __pread64_chk(int fd, void *buf, size_t len, off_t off, size_t buflen);
int __fxstat(int ver, int fd, struct stat *st);
int __fxstat64(int ver, int fd, struct stat64 *st);
int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags);
int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags);
void __chk_fail(void) __attribute__((noreturn));

#define PL_EXPORT __attribute__((visibility("default")))

/* Set errno from a negative code and return -1. */
static int pl_fail(int rc)
{
	pl_stat_add(PL_ST_ERRORS, 1);
	if (rc < -4095 || rc == -EHOSTDOWN || pl_conn_error(rc))
		rc = -EIO;
	errno = -rc;
	return -1;
}

static int err_set(int e)
{
	errno = e;
	return -1;
}

/* ---- handles --------------------------------------------------------- */

/*
 * Open inode ino in fs. The kernel already granted this open (the
 * descriptor exists), so when liblodefs' own check disagrees (a file
 * created 0444 and opened for writing, say) the open is repeated as root.
 */
static int handle_open(lodefs_t *fs, uint64_t ino, int flags, lodefs_file_t **f)
{
	static const struct lodefs_cred root = { 0, 0, 0, NULL };
	int rc = lodefs_open(fs, NULL, ino, flags, f);
	if (rc == -EACCES || rc == -EPERM)
		rc = lodefs_open(fs, &root, ino, flags, f);
	return rc;
}

/*
 * Open a fresh handle for d in its mount's current instance and make it
 * the one in use; the old one is kept to be closed with d. Called with
 * d->lock held. 0 or a negative code.
 */
static int desc_reopen(struct pl_desc *d, int flags)
{
	unsigned epoch;
	lodefs_t *fs = pl_mount_fs(d->mnt, &epoch);
	if (!fs)
		return -EIO;
	struct pl_handle *h = malloc(sizeof(*h));
	if (!h)
		return -ENOMEM;
	pl_enter();
	int rc = handle_open(fs, d->ino, flags, &h->f);
	pl_leave();
	if (rc < 0) {
		free(h);
		if (pl_conn_error(rc))
			pl_mount_lost(d->mnt, epoch, rc);
		return rc;
	}
	h->epoch = epoch;
	h->flags = flags;
	struct pl_handle *old = atomic_load(&d->h);
	if (old) {
		old->next = d->retired;
		d->retired = old;
	}
	atomic_store_explicit(&d->h, h, memory_order_release);
	d->flags = flags;
	return 0;
}

/*
 * The handle to use for d, reopened first if its instance died (fork, lost
 * server). locked: the caller holds d->lock. NULL with *rc set on failure.
 */
static struct pl_handle *desc_handle(struct pl_desc *d, bool locked, int *rc)
{
	struct pl_handle *h = atomic_load_explicit(&d->h, memory_order_acquire);
	if (h && h->epoch == pl_mount_epoch(d->mnt))
		return h;
	if (!locked)
		pthread_mutex_lock(&d->lock);
	h = atomic_load(&d->h);
	*rc = 0;
	if (!h || h->epoch != pl_mount_epoch(d->mnt)) {
		if ((*rc = desc_reopen(d, d->flags)) == 0) {
			pl_stat_add(PL_ST_REOPENS, 1);
			if (pl_debug_on)
				pl_debug("reopened inode %llu in a new instance",
					 (unsigned long long)d->ino);
		}
		h = *rc == 0 ? atomic_load(&d->h) : NULL;
	}
	if (!locked)
		pthread_mutex_unlock(&d->lock);
	return h;
}

/* A call on h failed with rc: give up its instance if the server is gone. */
static int desc_fail(struct pl_desc *d, struct pl_handle *h, int rc)
{
	if (h && pl_conn_error(rc))
		pl_mount_lost(d->mnt, h->epoch, rc);
	return pl_fail(rc);
}

/* ---- open ------------------------------------------------------------ */

int pl_open(int dirfd, const char *path, int flags, mode_t mode)
{
	int fd = pl_real.openat(dirfd, path, flags, mode);
	if (fd < 0 || (flags & (O_PATH | O_DIRECTORY)))
		return fd;
	int saved = errno;
	struct statx stx;
	/* DONT_SYNC: the type and inode number never change, no need to ask
	 * the FUSE daemon again (it just answered the open's lookup). */
	if (syscall(SYS_statx, fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_TYPE | STATX_INO,
		    &stx) != 0 ||
	    !S_ISREG(stx.stx_mode)) {
		errno = saved;
		return fd;
	}
	dev_t dev = makedev(stx.stx_dev_major, stx.stx_dev_minor);
	struct pl_mount *m = pl_mount_find(dev, fd);
	if (!m) {
		errno = saved;
		return fd;
	}
	int aflags = (flags & O_ACCMODE) | (flags & O_APPEND);
	struct pl_desc *d = pl_desc_alloc();
	int rc = -ENOMEM;
	if (d) {
		d->mnt = m;
		d->ino = stx.stx_ino;
		d->dev = dev;
		pthread_mutex_lock(&d->lock);
		rc = desc_reopen(d, aflags);
		pthread_mutex_unlock(&d->lock);
		if (rc == 0 && !pl_fd_install(fd, d))
			rc = -EMFILE;
		pl_desc_put(d);
	}
	if (rc < 0) {
		pl_stat_add(PL_ST_OPENS_PASSED, 1);
		if (pl_debug_on)
			pl_debug("open %s: fd %d inode %llu left to FUSE (%s)", path, fd,
				 (unsigned long long)stx.stx_ino, lode_strerror(rc));
	} else {
		pl_stat_add(PL_ST_OPENS, 1);
		if (pl_debug_on)
			pl_debug("open %s: fd %d inode %llu served by liblodefs", path, fd,
				 (unsigned long long)stx.stx_ino);
	}
	errno = saved;
	return fd;
}

/* glibc's test for whether open's third argument is there. */
static bool open_needs_mode(int flags)
{
	return (flags & O_CREAT) || (flags & __O_TMPFILE) == __O_TMPFILE;
}

PL_EXPORT int open(const char *path, int flags, ...)
{
	mode_t mode = 0;
	if (open_needs_mode(flags)) {
		va_list ap;
		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	if (!pl_active())
		return pl_real.open(path, flags, mode);
	return pl_open(AT_FDCWD, path, flags, mode);
}

PL_EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
	mode_t mode = 0;
	if (open_needs_mode(flags)) {
		va_list ap;
		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	if (!pl_active())
		return pl_real.openat(dirfd, path, flags, mode);
	return pl_open(dirfd, path, flags, mode);
}

PL_EXPORT int open64(const char *path, int flags, ...) __attribute__((alias("open")));
PL_EXPORT int openat64(int dirfd, const char *path, int flags, ...)
	__attribute__((alias("openat")));

PL_EXPORT int creat(const char *path, mode_t mode)
{
	if (!pl_active())
		return pl_real.creat ? pl_real.creat(path, mode)
				     : pl_real.open(path, O_CREAT | O_WRONLY | O_TRUNC, mode);
	return pl_open(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}
PL_EXPORT int creat64(const char *path, mode_t mode) __attribute__((alias("creat")));

/* The _FORTIFY_SOURCE variants: called when open has no mode argument. */
PL_EXPORT int __open_2(const char *path, int flags)
{
	if (open_needs_mode(flags))
		__chk_fail();
	if (!pl_active())
		return pl_real.open(path, flags);
	return pl_open(AT_FDCWD, path, flags, 0);
}
PL_EXPORT int __open64_2(const char *path, int flags) __attribute__((alias("__open_2")));

PL_EXPORT int __openat_2(int dirfd, const char *path, int flags)
{
	if (open_needs_mode(flags))
		__chk_fail();
	if (!pl_active())
		return pl_real.openat(dirfd, path, flags);
	return pl_open(dirfd, path, flags, 0);
}
PL_EXPORT int __openat64_2(int dirfd, const char *path, int flags)
	__attribute__((alias("__openat_2")));

/* ---- read and write at the descriptor's offset ------------------------ */

/* The description behind fd if the calling thread should serve it. */
static struct pl_desc *desc_of(int fd)
{
	return pl_active() ? pl_fd_get(fd) : NULL;
}

static ssize_t iov_len(const struct iovec *iov, int iovcnt)
{
	size_t n = 0;
	for (int i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len > (size_t)SSIZE_MAX - n)
			return -EINVAL;
		n += iov[i].iov_len;
	}
	return (ssize_t)n;
}

/*
 * Read or write at offset `off` (-1: at the descriptor's offset, which then
 * moves past the bytes moved; an O_APPEND write always goes to the end).
 * One of buf and iov is used. sync: RWF_DSYNC/RWF_SYNC asked for.
 */
static ssize_t desc_rw(int fd, struct pl_desc *d, bool write, void *buf, size_t len,
		       const struct iovec *iov, int iovcnt, off_t off, int sync)
{
	bool at_pos = off == -1;
	int rc = 0;
	ssize_t n;
	if (!at_pos && off < 0)
		return err_set(EINVAL);
	if (iov && (iovcnt < 0 || iovcnt > IOV_MAX))
		return err_set(EINVAL);
	if (iov && iov_len(iov, iovcnt) < 0)
		return err_set(EINVAL);
	if (!iov && len > PL_RW_MAX)
		len = PL_RW_MAX;
	pl_enter();
	if (at_pos)
		pthread_mutex_lock(&d->lock);
	struct pl_handle *h = desc_handle(d, at_pos, &rc);
	if (!h) {
		n = rc;
		goto out;
	}
	/* The handle's own flag is what liblodefs acts on (F_SETFL swaps handles). */
	bool append = write && (h->flags & O_APPEND);
	if (at_pos && !append && (off = pl_real.lseek(fd, 0, SEEK_CUR)) < 0) {
		n = -errno;
		goto out;
	}
	uint64_t end = 0;
	if (write) {
		if (append)
			off = 0; /* ignored: liblodefs writes at the end */
		n = iov ? lodefs_file_writev(h->f, iov, iovcnt, (uint64_t)off, &end)
			: lodefs_file_write(h->f, buf, len, (uint64_t)off, &end);
		if (n >= 0) {
			atomic_store(&d->dirty, true);
			atomic_store(&d->kstale, true);
			if (sync)
				(void)lodefs_file_sync(h->f, !(sync & RWF_SYNC));
		}
	} else {
		n = iov ? lodefs_file_readv(h->f, iov, iovcnt, (uint64_t)off)
			: lodefs_file_read(h->f, buf, len, (uint64_t)off);
		end = (uint64_t)off + (uint64_t)(n > 0 ? n : 0);
	}
	if (n >= 0 && at_pos && (n > 0 || append) && pl_real.lseek(fd, (off_t)end, SEEK_SET) < 0)
		n = -errno;
out:
	if (at_pos)
		pthread_mutex_unlock(&d->lock);
	pl_leave();
	if (n < 0)
		return desc_fail(d, h, (int)n);
	pl_stat_add(write ? PL_ST_WRITES : PL_ST_READS, 1);
	pl_stat_add(write ? PL_ST_BYTES_WRITTEN : PL_ST_BYTES_READ, (uint64_t)n);
	return n;
}

/* Run an I/O call on fd's description and drop the reference. */
#define DESC_RW(d, ...)                                           \
	do {                                                      \
		ssize_t n_ = desc_rw(__VA_ARGS__);                \
		int e_ = errno;                                   \
		pl_desc_put(d);                                   \
		errno = e_;                                       \
		return n_;                                        \
	} while (0)

ssize_t pl_read(int fd, void *buf, size_t len)
{
	struct pl_desc *d = desc_of(fd);
	if (!d)
		return pl_real.read(fd, buf, len);
	DESC_RW(d, fd, d, false, buf, len, NULL, 0, -1, 0);
}

ssize_t pl_write(int fd, const void *buf, size_t len)
{
	struct pl_desc *d = desc_of(fd);
	if (!d)
		return pl_real.write(fd, buf, len);
	DESC_RW(d, fd, d, true, (void *)buf, len, NULL, 0, -1, 0);
}

PL_EXPORT ssize_t read(int fd, void *buf, size_t len)
{
	return pl_read(fd, buf, len);
}

PL_EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
	return pl_write(fd, buf, len);
}

PL_EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
	struct pl_desc *d = desc_of(fd);
	if (!d)
		return pl_real.readv(fd, iov, iovcnt);
	DESC_RW(d, fd, d, false, NULL, 0, iov, iovcnt, -1, 0);
}

PL_EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
	struct pl_desc *d = desc_of(fd);
	if (!d)
		return pl_real.writev(fd, iov, iovcnt);
	DESC_RW(d, fd, d, true, NULL, 0, iov, iovcnt, -1, 0);
}

/* ---- positioned I/O --------------------------------------------------- */

static ssize_t pread_at(int fd, void *buf, size_t len, off_t off)
{
	struct pl_desc *d = desc_of(fd);
	if (!d)
		return pl_real.pread(fd, buf, len, off);
	if (off == -1) {
		pl_desc_put(d);
		return err_set(EINVAL);
	}
	DESC_RW(d, fd, d, false, buf, len, NULL, 0, off, 0);
}

PL_EXPORT ssize_t pread(int fd, void *buf, size_t len, off_t off)
{
	return pread_at(fd, buf, len, off);
}
PL_EXPORT ssize_t pread64(int fd, void *buf, size_t len, off_t off) __attribute__((alias("pread")));

PL_EXPORT ssize_t pwrite(int fd, const void *buf, size_t len, off_t off)
{
	struct pl_desc *d = desc_of(fd);
	if (!d)
		return pl_real.pwrite(fd, buf, len, off);
	if (off == -1) {
		pl_desc_put(d);
		return err_set(EINVAL);
	}
	DESC_RW(d, fd, d, true, (void *)buf, len, NULL, 0, off, 0);
}
PL_EXPORT ssize_t pwrite64(int fd, const void *buf, size_t len, off_t off)
	__attribute__((alias("pwrite")));

PL_EXPORT ssize_t preadv(int fd, const struct iovec *iov, int iovcnt, off_t off)
{
	struct pl_desc *d = desc_of(fd);
	if (!d)
		return pl_real.preadv(fd, iov, iovcnt, off);
	if (off == -1) {
		pl_desc_put(d);
		return err_set(EINVAL);
	}
	DESC_RW(d, fd, d, false, NULL, 0, iov, iovcnt, off, 0);
}
PL_EXPORT ssize_t preadv64(int fd, const struct iovec *iov, int iovcnt, off_t off)
	__attribute__((alias("preadv")));

PL_EXPORT ssize_t pwritev(int fd, const struct iovec *iov, int iovcnt, off_t off)
{
	struct pl_desc *d = desc_of(fd);
	if (!d)
		return pl_real.pwritev(fd, iov, iovcnt, off);
	if (off == -1) {
		pl_desc_put(d);
		return err_set(EINVAL);
	}
	DESC_RW(d, fd, d, true, NULL, 0, iov, iovcnt, off, 0);
}
PL_EXPORT ssize_t pwritev64(int fd, const struct iovec *iov, int iovcnt, off_t off)
	__attribute__((alias("pwritev")));

/*
 * preadv2/pwritev2: offset -1 means the descriptor's offset. RWF_HIPRI is
 * a hint; RWF_DSYNC/RWF_SYNC sync after the write; RWF_NOWAIT cannot be
 * honoured by a network file system (the kernel says EOPNOTSUPP for such
 * files too); RWF_APPEND writes at the size liblodefs reports, which is
 * not atomic against other appenders.
 */
PL_EXPORT ssize_t preadv2(int fd, const struct iovec *iov, int iovcnt, off_t off, int flags)
{
	struct pl_desc *d = desc_of(fd);
	if (!d)
		return pl_real.preadv2(fd, iov, iovcnt, off, flags);
	if (flags & ~RWF_HIPRI) {
		pl_desc_put(d);
		return err_set(EOPNOTSUPP);
	}
	if (off < -1) {
		pl_desc_put(d);
		return err_set(EINVAL);
	}
	DESC_RW(d, fd, d, false, NULL, 0, iov, iovcnt, off, 0);
}
PL_EXPORT ssize_t preadv64v2(int fd, const struct iovec *iov, int iovcnt, off_t off, int flags)
	__attribute__((alias("preadv2")));

PL_EXPORT ssize_t pwritev2(int fd, const struct iovec *iov, int iovcnt, off_t off, int flags)
{
	struct pl_desc *d = desc_of(fd);
	if (!d)
		return pl_real.pwritev2(fd, iov, iovcnt, off, flags);
	if (flags & ~(RWF_HIPRI | RWF_DSYNC | RWF_SYNC | RWF_APPEND)) {
		pl_desc_put(d);
		return err_set(EOPNOTSUPP);
	}
	if (off < -1) {
		pl_desc_put(d);
		return err_set(EINVAL);
	}
	if (flags & RWF_APPEND) {
		int rc = 0;
		struct stat st;
		pl_enter();
		struct pl_handle *h = desc_handle(d, false, &rc);
		if (h)
			rc = lodefs_file_stat(h->f, &st);
		pl_leave();
		if (rc < 0) {
			rc = desc_fail(d, h, rc);
			pl_desc_put(d);
			return rc;
		}
		off = st.st_size;
	}
	DESC_RW(d, fd, d, true, NULL, 0, iov, iovcnt, off, flags & (RWF_DSYNC | RWF_SYNC));
}
PL_EXPORT ssize_t pwritev64v2(int fd, const struct iovec *iov, int iovcnt, off_t off, int flags)
	__attribute__((alias("pwritev2")));

/* _FORTIFY_SOURCE's checked reads. */
PL_EXPORT ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen)
{
	if (len > buflen)
		__chk_fail();
	return pl_read(fd, buf, len);
}

PL_EXPORT ssize_t __pread_chk(int fd, void *buf, size_t len, off_t off, size_t buflen)
{
	if (len > buflen)
		__chk_fail();
	return pread_at(fd, buf, len, off);
}
PL_EXPORT ssize_t __pread64_chk(int fd, void *buf, size_t len, off_t off, size_t buflen)
	__attribute__((alias("__pread_chk")));

/* ---- offset ----------------------------------------------------------- */

/*
 * SEEK_SET and SEEK_CUR are the kernel's. SEEK_END, SEEK_DATA and
 * SEEK_HOLE need the size, which the kernel may not know yet (this
 * process's writes did not go through it): take it from liblodefs. Files
 * have no holes worth reporting: data runs to the end.
 */
off_t pl_lseek(int fd, off_t off, int whence)
{
	struct pl_desc *d;
	if ((whence != SEEK_END && whence != SEEK_DATA && whence != SEEK_HOLE) ||
	    !(d = desc_of(fd)))
		return pl_real.lseek(fd, off, whence);
	int rc = 0;
	struct stat st;
	off_t pos = -1;
	pl_enter();
	pthread_mutex_lock(&d->lock);
	struct pl_handle *h = desc_handle(d, true, &rc);
	if (h && (rc = lodefs_file_stat(h->f, &st)) == 0) {
		if (whence == SEEK_END) {
			if (__builtin_add_overflow(st.st_size, off, &pos))
				rc = -EOVERFLOW;
			else if (pos < 0)
				rc = -EINVAL;
		} else if (off < 0) {
			rc = -ENXIO;
		} else if (off >= st.st_size) {
			rc = -ENXIO;
		} else {
			pos = whence == SEEK_DATA ? off : st.st_size;
		}
		if (rc == 0 && (pos = pl_real.lseek(fd, pos, SEEK_SET)) < 0)
			rc = -errno;
	}
	pthread_mutex_unlock(&d->lock);
	pl_leave();
	if (rc < 0)
		pos = desc_fail(d, h, rc);
	int e = errno;
	pl_desc_put(d);
	errno = e;
	return pos;
}

PL_EXPORT off_t lseek(int fd, off_t off, int whence)
{
	return pl_lseek(fd, off, whence);
}
PL_EXPORT off_t lseek64(int fd, off_t off, int whence) __attribute__((alias("lseek")));

/* ---- attributes ------------------------------------------------------- */

/* fstat of an intercepted descriptor: liblodefs' view, with the kernel's st_dev. */
static int desc_stat(struct pl_desc *d, struct stat *st)
{
	int rc = 0;
	pl_enter();
	struct pl_handle *h = desc_handle(d, false, &rc);
	if (h)
		rc = lodefs_file_stat(h->f, st);
	pl_leave();
	if (rc == 0)
		st->st_dev = d->dev;
	else
		rc = desc_fail(d, h, rc);
	int e = errno;
	pl_desc_put(d);
	errno = e;
	return rc;
}

/* Out of line, so that the compiler does not see a nonnull parameter tested. */
static __attribute__((noinline)) bool path_empty(const char *path)
{
	return !path || !*path;
}

/* The description fstatat(dirfd, path, flags) names, if it is one of ours. */
static struct pl_desc *desc_at(int dirfd, const char *path, int flags)
{
	return (flags & AT_EMPTY_PATH) && path_empty(path) ? desc_of(dirfd) : NULL;
}

static int stat_fd(int fd, struct stat *st)
{
	struct pl_desc *d = desc_of(fd);
	if (!d)
		return pl_real.fstat ? pl_real.fstat(fd, st) : pl_real.fxstat(1, fd, st);
	return desc_stat(d, st);
}

/* What binaries built against glibc before 2.33 call for fstat. */
static int stat_fd_ver(int ver, int fd, struct stat *st)
{
	struct pl_desc *d = desc_of(fd);
	if (!d)
		return pl_real.fxstat ? pl_real.fxstat(ver, fd, st) : err_set(ENOSYS);
	return desc_stat(d, st);
}

static int stat_at(int dirfd, const char *path, struct stat *st, int flags)
{
	struct pl_desc *d = desc_at(dirfd, path, flags);
	if (!d)
		return pl_real.fstatat ? pl_real.fstatat(dirfd, path, st, flags) : err_set(ENOSYS);
	return desc_stat(d, st);
}

static int stat_at_ver(int ver, int dirfd, const char *path, struct stat *st, int flags)
{
	struct pl_desc *d = desc_at(dirfd, path, flags);
	if (!d)
		return pl_real.fxstatat ? pl_real.fxstatat(ver, dirfd, path, st, flags)
					: err_set(ENOSYS);
	return desc_stat(d, st);
}

/* struct stat64 is struct stat where off_t is 64 bits (asserted in preload.h). */
PL_EXPORT int fstat(int fd, struct stat *st)
{
	return stat_fd(fd, st);
}

PL_EXPORT int fstat64(int fd, struct stat64 *st)
{
	return stat_fd(fd, (struct stat *)st);
}

PL_EXPORT int __fxstat(int ver, int fd, struct stat *st)
{
	return stat_fd_ver(ver, fd, st);
}

PL_EXPORT int __fxstat64(int ver, int fd, struct stat64 *st)
{
	return stat_fd_ver(ver, fd, (struct stat *)st);
}

PL_EXPORT int fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
	return stat_at(dirfd, path, st, flags);
}

PL_EXPORT int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags)
{
	return stat_at(dirfd, path, (struct stat *)st, flags);
}

PL_EXPORT int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags)
{
	return stat_at_ver(ver, dirfd, path, st, flags);
}

PL_EXPORT int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags)
{
	return stat_at_ver(ver, dirfd, path, (struct stat *)st, flags);
}

static struct statx_timestamp ts_statx(struct timespec ts)
{
	struct statx_timestamp t = { .tv_sec = ts.tv_sec, .tv_nsec = (uint32_t)ts.tv_nsec };
	return t;
}

PL_EXPORT int statx(int dirfd, const char *path, int flags, unsigned mask, struct statx *stx)
{
	struct pl_desc *d = desc_at(dirfd, path, flags);
	if (!d) {
		if (!pl_real.statx)
			return err_set(ENOSYS);
		return pl_real.statx(dirfd, path, flags, mask, stx);
	}
	struct stat st;
	if (desc_stat(d, &st) < 0)
		return -1;
	memset(stx, 0, sizeof(*stx));
	stx->stx_mask = STATX_BASIC_STATS;
	stx->stx_blksize = (uint32_t)st.st_blksize;
	stx->stx_nlink = (uint32_t)st.st_nlink;
	stx->stx_uid = st.st_uid;
	stx->stx_gid = st.st_gid;
	stx->stx_mode = (uint16_t)st.st_mode;
	stx->stx_ino = st.st_ino;
	stx->stx_size = (uint64_t)st.st_size;
	stx->stx_blocks = (uint64_t)st.st_blocks;
	stx->stx_atime = ts_statx(st.st_atim);
	stx->stx_mtime = ts_statx(st.st_mtim);
	stx->stx_ctime = ts_statx(st.st_ctim);
	stx->stx_dev_major = major(st.st_dev);
	stx->stx_dev_minor = minor(st.st_dev);
	return 0;
}

PL_EXPORT int ftruncate(int fd, off_t len)
{
	struct pl_desc *d = desc_of(fd);
	if (!d)
		return pl_real.ftruncate(fd, len);
	int rc = 0;
	struct pl_handle *h = NULL;
	if (len < 0) {
		rc = -EINVAL;
	} else {
		pl_enter();
		/* The kernel's answer for a descriptor not open for writing. */
		if ((d->flags & O_ACCMODE) == O_RDONLY)
			rc = -EINVAL;
		else if ((h = desc_handle(d, false, &rc)))
			rc = lodefs_file_truncate(h->f, (uint64_t)len);
		if (rc == 0) {
			atomic_store(&d->dirty, true);
			atomic_store(&d->kstale, true);
		}
		pl_leave();
	}
	if (rc < 0)
		rc = desc_fail(d, h, rc);
	int e = errno;
	pl_desc_put(d);
	errno = e;
	return rc;
}
PL_EXPORT int ftruncate64(int fd, off_t len) __attribute__((alias("ftruncate")));

static int desc_sync(int fd, int datasync)
{
	struct pl_desc *d = desc_of(fd);
	if (!d)
		return datasync ? pl_real.fdatasync(fd) : pl_real.fsync(fd);
	int rc = 0;
	pl_enter();
	struct pl_handle *h = desc_handle(d, false, &rc);
	if (h)
		rc = lodefs_file_sync(h->f, datasync);
	pl_leave();
	if (rc < 0)
		rc = desc_fail(d, h, rc);
	int e = errno;
	pl_desc_put(d);
	errno = e;
	return rc;
}

PL_EXPORT int fsync(int fd)
{
	return desc_sync(fd, 0);
}

PL_EXPORT int fdatasync(int fd)
{
	return desc_sync(fd, 1);
}

/* ---- close and dup ---------------------------------------------------- */

/* Have the kernel ask lode-fuse for fd's attributes now (not from its cache). */
static void kernel_refresh(int fd)
{
	struct statx stx;
	(void)syscall(SYS_statx, fd, "", AT_EMPTY_PATH | AT_STATX_FORCE_SYNC, STATX_BASIC_STATS,
		      &stx);
}

void pl_desc_flush(int fd, struct pl_desc *d)
{
	if (!atomic_exchange(&d->dirty, false))
		return;
	pl_enter();
	struct pl_handle *h = atomic_load(&d->h);
	if (h && h->epoch == pl_mount_epoch(d->mnt))
		(void)lodefs_file_sync(h->f, 0);
	/* lode-fuse drops the kernel's cached attributes and pages of the file
	 * (from its own thread, a moment later)... */
	(void)fsetxattr(fd, "user.lode.invalidate", "1", 1, 0);
	/* ...and this makes the kernel fetch the attributes now, so that the
	 * next stat or read through FUSE sees the size written here. */
	atomic_store(&d->kstale, false);
	kernel_refresh(fd);
	pl_leave();
}

int pl_close(int fd)
{
	bool last;
	struct pl_desc *d = pl_inside || pl_bypass ? NULL : pl_fd_remove(fd, &last);
	if (!d)
		return pl_real.close(fd);
	if (last)
		pl_desc_flush(fd, d);
	/* The liblodefs handle goes first while the kernel descriptor still
	 * pins the inode in lode-fuse: an unlinked file is removed at the
	 * kernel's close, and nothing of it must be written after that. The
	 * slot is empty, so a count of 1 is ours alone. */
	if (atomic_load(&d->refs) == 1) {
		pl_desc_put(d);
		d = NULL;
	}
	int rc = pl_real.close(fd);
	if (d) {
		int e = errno;
		pl_desc_put(d);
		errno = e;
	}
	return rc;
}

PL_EXPORT int close(int fd)
{
	return pl_close(fd);
}

/* The descriptors of [first, last] that the table knows. */
struct close_range_arg {
	unsigned first, last;
};

static void close_one(int fd, struct pl_desc *d, void *arg)
{
	const struct close_range_arg *r = arg;
	if ((unsigned)fd >= r->first && (unsigned)fd <= r->last)
		pl_close(fd);
}

PL_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
	pl_init();
	if (!pl_real.close_range)
		return err_set(ENOSYS);
	if (!(flags & CLOSE_RANGE_CLOEXEC) && first <= last && pl_active()) {
		struct close_range_arg r = { first, last };
		pl_fd_foreach(close_one, &r);
	}
	return pl_real.close_range(first, last, flags);
}

PL_EXPORT void closefrom(int lowfd)
{
	pl_init();
	if (lowfd >= 0 && pl_active()) {
		struct close_range_arg r = { (unsigned)lowfd, ~0u };
		pl_fd_foreach(close_one, &r);
	}
	if (pl_real.closefrom)
		pl_real.closefrom(lowfd);
}

/* newfd now refers to what oldfd does (after a successful dup of some kind). */
static void dup_share(int oldfd, int newfd)
{
	struct pl_desc *d = pl_fd_get(oldfd);
	if (d) {
		if (!pl_fd_install(newfd, d) && pl_debug_on)
			pl_debug("dup of fd %d to %d: beyond the table, left to FUSE", oldfd, newfd);
		pl_desc_put(d);
	} else {
		/* newfd may have been a Lode descriptor that dup2 closed. */
		bool last;
		if ((d = pl_fd_remove(newfd, &last)))
			pl_desc_put(d);
	}
}

PL_EXPORT int dup(int fd)
{
	pl_init();
	int nfd = pl_real.dup(fd);
	if (nfd >= 0 && pl_active())
		dup_share(fd, nfd);
	return nfd;
}

/*
 * dup2/dup3 close newfd silently: if it is the last descriptor of a
 * written Lode file, flush that first, as close would.
 */
static void dup_before(int oldfd, int newfd)
{
	struct pl_desc *dn = pl_fd_get(newfd);
	if (!dn)
		return;
	struct pl_desc *dold = pl_fd_get(oldfd);
	if (dn != dold && atomic_load(&dn->nfds) == 1)
		pl_desc_flush(newfd, dn);
	if (dold)
		pl_desc_put(dold);
	pl_desc_put(dn);
}

PL_EXPORT int dup2(int oldfd, int newfd)
{
	pl_init();
	if (oldfd == newfd || !pl_active())
		return pl_real.dup2(oldfd, newfd);
	dup_before(oldfd, newfd);
	int rc = pl_real.dup2(oldfd, newfd);
	if (rc >= 0) {
		int e = errno;
		dup_share(oldfd, newfd);
		errno = e;
	}
	return rc;
}

PL_EXPORT int dup3(int oldfd, int newfd, int flags)
{
	pl_init();
	if (oldfd == newfd || !pl_active())
		return pl_real.dup3(oldfd, newfd, flags);
	dup_before(oldfd, newfd);
	int rc = pl_real.dup3(oldfd, newfd, flags);
	if (rc >= 0) {
		int e = errno;
		dup_share(oldfd, newfd);
		errno = e;
	}
	return rc;
}

/* F_SETFL succeeded on the kernel descriptor: follow its O_APPEND. */
static void desc_setfl(int fd, int fl)
{
	struct pl_desc *d = pl_fd_get(fd);
	if (!d)
		return;
	pl_enter();
	pthread_mutex_lock(&d->lock);
	int flags = (d->flags & ~O_APPEND) | (fl & O_APPEND);
	if (flags != d->flags) {
		int rc = desc_reopen(d, flags);
		if (rc < 0 && pl_debug_on)
			pl_debug("fd %d: O_APPEND change not followed: %s", fd, lode_strerror(rc));
	}
	pthread_mutex_unlock(&d->lock);
	pl_leave();
	pl_desc_put(d);
}

PL_EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	/* As glibc does: every argument fcntl takes fits in a pointer's slot. */
	void *arg = va_arg(ap, void *);
	va_end(ap);
	pl_init();
	int rc = pl_real.fcntl(fd, cmd, arg);
	if (rc < 0 || !pl_active())
		return rc;
	int e = errno;
	if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
		dup_share(fd, rc);
	else if (cmd == F_SETFL)
		desc_setfl(fd, (int)(intptr_t)arg);
	errno = e;
	return rc;
}
PL_EXPORT int fcntl64(int fd, int cmd, ...) __attribute__((alias("fcntl")));

/* ---- mmap ------------------------------------------------------------- */

/*
 * A mapping is the kernel's (pages through FUSE), and the kernel may not
 * know the size this process wrote through liblodefs: a page past its idea
 * of the end would raise SIGBUS (SQLite's WAL index is written, then
 * mapped). So the kernel is made to fetch the size of a written Lode file
 * before it is mapped. Once UCX has installed its memory hooks, it patches
 * this very function and calls pl_mmap_prepare from its mmap event instead
 * (mount.c); anonymous mappings cost one test either way.
 */
void pl_mmap_prepare(int fd)
{
	struct pl_desc *d = pl_fd_peek(fd);
	if (d && !pl_bypass && atomic_exchange(&d->kstale, false))
		kernel_refresh(fd);
}

PL_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (fd >= 0 && !(flags & MAP_ANONYMOUS))
		pl_mmap_prepare(fd);
	return pl_real.mmap(addr, len, prot, flags, fd, off);
}
PL_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
	__attribute__((alias("mmap")));

/* ---- exit ------------------------------------------------------------- */

/* Flush fd's description, holding a reference against a concurrent close. */
static void flush_held(int fd, struct pl_desc *unused, void *arg)
{
	struct pl_desc *d = pl_fd_get(fd);
	if (d) {
		pl_desc_flush(fd, d);
		pl_desc_put(d);
	}
}

void pl_posix_exit(void)
{
	if (pl_stat_get(PL_ST_OPENS) == 0)
		return;
	fflush(NULL); /* stdio streams over Lode files, before their files are synced */
	pl_fd_foreach(flush_held, NULL);
}

void pl_posix_fork_prepare(void)
{
	pl_fd_foreach(flush_held, NULL);
}

static void fork_refresh(int fd, struct pl_desc *d, void *arg)
{
	kernel_refresh(fd);
}

void pl_posix_fork_child(void)
{
	pl_fd_foreach(fork_refresh, NULL);
}
