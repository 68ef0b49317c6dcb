/*
 * stdio over Lode files.
 *
 * glibc's fopen opens its file with an internal open that no preload can
 * see, and its FILE then reads and writes with internal calls too. So
 * fopen and fdopen are intercepted: the file is opened with the preload's
 * own open, and a Lode file gets a stream from fopencookie() whose read,
 * write, seek and close functions go through the descriptor layer
 * (posix.c). fread, fwrite, fgets, fprintf, fseek, ftell and fclose then
 * all work through liblodefs with glibc's own buffering. The stream's
 * _fileno is set to the descriptor so that fileno() (and fstat, flock, ...
 * on it) still does what programs expect.
 *
 * Any other file gets an ordinary glibc stream from fdopen() on the
 * descriptor just opened (not a second open: O_EXCL or O_TRUNC must not be
 * applied twice). freopen is not intercepted: it opens through the kernel
 * and FUSE, and must not be used on a stream this file made.
 */
#undef _FORTIFY_SOURCE
#include "preload/preload.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define PL_EXPORT __attribute__((visibility("default")))

static ssize_t cookie_read(void *c, char *buf, size_t len)
{
	return pl_read((int)(intptr_t)c, buf, len);
}

/* glibc loops while a cookie write returns 0, so an error must be -1. */
static ssize_t cookie_write(void *c, const char *buf, size_t len)
{
	return pl_write((int)(intptr_t)c, buf, len);
}

static int cookie_seek(void *c, off64_t *pos, int whence)
{
	off_t r = pl_lseek((int)(intptr_t)c, *pos, whence);
	if (r < 0)
		return -1;
	*pos = r;
	return 0;
}

static int cookie_close(void *c)
{
	return pl_close((int)(intptr_t)c);
}

static const cookie_io_functions_t g_cookie_io = {
	.read = cookie_read,
	.write = cookie_write,
	.seek = cookie_seek,
	.close = cookie_close,
};

/*
 * open(2) flags for an fopen mode, and the plain mode fopencookie() takes
 * ("r", "r+", "w", "w+", "a", "a+"). -1 for a mode this file does not
 * handle (then glibc's fopen sees it unchanged).
 */
static int mode_parse(const char *mode, char plain[3])
{
	int flags;
	switch (mode[0]) {
	case 'r':
		flags = O_RDONLY;
		break;
	case 'w':
		flags = O_WRONLY | O_CREAT | O_TRUNC;
		break;
	case 'a':
		flags = O_WRONLY | O_CREAT | O_APPEND;
		break;
	default:
		return -1;
	}
	plain[0] = mode[0];
	plain[1] = plain[2] = '\0';
	for (const char *p = mode + 1; *p; p++) {
		switch (*p) {
		case '+':
			flags = (flags & ~O_ACCMODE) | O_RDWR;
			plain[1] = '+';
			break;
		case 'e':
			flags |= O_CLOEXEC;
			break;
		case 'x':
			flags |= O_EXCL;
			break;
		case ',': /* ",ccs=...": wide-character conversion is glibc's business */
			return -1;
		default: /* 'b', 't', 'm', 'c' change nothing here, as in glibc */
			break;
		}
	}
	return flags;
}

/* A stream over Lode descriptor fd, or NULL (errno set; fd left open). */
static FILE *stream_make(int fd, const char *plain)
{
	FILE *fp = fopencookie((void *)(intptr_t)fd, plain, g_cookie_io);
	if (fp)
		fp->_fileno = fd;
	return fp;
}

static bool fd_is_lode(int fd)
{
	struct pl_desc *d = pl_fd_get(fd);
	if (d)
		pl_desc_put(d);
	return d != NULL;
}

PL_EXPORT FILE *fopen(const char *path, const char *mode)
{
	char plain[3];
	int flags;
	if (!pl_active() || (flags = mode_parse(mode, plain)) < 0)
		return pl_real.fopen(path, mode);
	int fd = pl_open(AT_FDCWD, path, flags, 0666);
	if (fd < 0)
		return NULL;
	FILE *fp = fd_is_lode(fd) ? stream_make(fd, plain) : pl_real.fdopen(fd, mode);
	if (!fp) {
		int e = errno;
		pl_close(fd);
		errno = e;
	} else if (pl_debug_on && fd_is_lode(fd)) {
		pl_debug("fopen %s: stream on fd %d", path, fd);
	}
	return fp;
}
PL_EXPORT FILE *fopen64(const char *path, const char *mode) __attribute__((alias("fopen")));

PL_EXPORT FILE *fdopen(int fd, const char *mode)
{
	char plain[3];
	int flags;
	if (!pl_active() || !fd_is_lode(fd) || (flags = mode_parse(mode, plain)) < 0)
		return pl_real.fdopen(fd, mode);
	/* As glibc checks: the mode must fit the descriptor's access mode. */
	int fl = pl_real.fcntl(fd, F_GETFL);
	if (fl < 0)
		return NULL;
	int want = flags & O_ACCMODE, have = fl & O_ACCMODE;
	if (have != O_RDWR && want != have) {
		errno = EINVAL;
		return NULL;
	}
	/* "a" on a descriptor without O_APPEND turns it on, as glibc's fdopen does. */
	if ((flags & O_APPEND) && !(fl & O_APPEND) && fcntl(fd, F_SETFL, fl | O_APPEND) < 0)
		return NULL;
	return stream_make(fd, plain);
}
