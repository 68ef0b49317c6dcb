/*
 * lode-fuse's request handlers: each FUSE low-level request becomes one
 * liblodefs call, made with the requesting process's credentials, and its
 * result becomes the reply.
 *
 * Inode numbers are liblodefs's own (the root is 1, FUSE_ROOT_ID), so there
 * is no table to keep: forget has nothing to release. An open regular file
 * is one lodefs_file_t per FUSE open (fi->fh), closed in release, which is
 * what lets liblodefs keep an unlinked file until its last close. Open
 * directories live in dir.c.
 *
 * Two extended attributes are the daemon's, not the file system's:
 * user.lode.mount on the root names the system behind the mount (the
 * preload library reads it to reach the same container without the
 * kernel), and setting user.lode.invalidate on any inode makes the kernel
 * drop what it caches of it (inval.c). README.md documents both.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <linux/fuse.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fuse/lfuse.h"

static struct lfuse *lf_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static lodefs_file_t *file_of(const struct fuse_file_info *fi)
{
	return (lodefs_file_t *)(uintptr_t)fi->fh;
}

int lfuse_errno(int rc)
{
	int e = -rc;

	if (e <= 0 || e >= LODE_ERR_BASE)
		return EIO;
	switch (e) {
	case ECONNRESET:
	case ETIMEDOUT:
	case EHOSTDOWN: /* the engine holding it is lost, or DOWN with no copy left */
	case EPROTO:
	case ECANCELED:
	case ENOSYS:
		return EIO;
	default:
		return e;
	}
}

static void reply_rc(fuse_req_t req, int rc)
{
	fuse_reply_err(req, rc < 0 ? lfuse_errno(rc) : 0);
}

/*
 * fuse_reply_open with FOPEN_PARALLEL_DIRECT_WRITES added, for which
 * libfuse 3.14's fuse_file_info has no field (the reply is the same
 * struct fuse_open_out it sends). The kernel then lets O_DIRECT writes
 * inside a file run side by side instead of one at a time; writes that
 * extend the file or append still take the inode's lock alone. liblodefs
 * keeps concurrent writers to one file apart.
 */
static int reply_open(fuse_req_t req, const struct fuse_file_info *fi)
{
	struct fuse_open_out o = {.fh = fi->fh, .open_flags = FOPEN_PARALLEL_DIRECT_WRITES};

	if (fi->direct_io)
		o.open_flags |= FOPEN_DIRECT_IO;
	if (fi->keep_cache)
		o.open_flags |= FOPEN_KEEP_CACHE;
	if (fi->nonseekable)
		o.open_flags |= FOPEN_NONSEEKABLE;
	if (fi->cache_readdir)
		o.open_flags |= FOPEN_CACHE_DIR;
	if (fi->noflush)
		o.open_flags |= FOPEN_NOFLUSH;
	return fuse_reply_buf(req, (const char *)&o, sizeof(o));
}

/* ---- credentials ---------------------------------------------------------- */

void lfuse_cred_init(struct lfuse_cred *cr, fuse_req_t req)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	cr->req = req;
	cr->c.uid = ctx->uid;
	cr->c.gid = ctx->gid;
	cr->c.ngroups = 0;
	cr->c.groups = NULL;
	cr->heap = NULL;
	/* root passes every check groups could pass */
	cr->loaded = ctx->uid == 0;
}

void lfuse_cred_groups(struct lfuse_cred *cr)
{
	int n;

	if (cr->loaded)
		return;
	cr->loaded = true;
	n = fuse_req_getgroups(cr->req, LFUSE_GROUPS_INLINE, cr->inline_groups);
	if (n <= 0)
		return; /* the process is gone or /proc is unreadable: no groups */
	if (n <= LFUSE_GROUPS_INLINE) {
		cr->c.groups = cr->inline_groups;
		cr->c.ngroups = (unsigned)n;
		return;
	}
	/* more than fit inline; the count may change between the two reads */
	if (!(cr->heap = malloc((size_t)n * sizeof(gid_t))))
		return;
	n = fuse_req_getgroups(cr->req, n, cr->heap);
	if (n > 0) {
		cr->c.groups = cr->heap;
		cr->c.ngroups = (unsigned)n;
	}
}

bool lfuse_cred_retry(struct lfuse_cred *cr, int rc)
{
	if ((rc != -EACCES && rc != -EPERM) || cr->loaded)
		return false;
	lfuse_cred_groups(cr);
	return cr->c.ngroups > 0;
}

void lfuse_cred_done(struct lfuse_cred *cr)
{
	free(cr->heap);
	cr->heap = NULL;
}

/* ---- entries and attributes ----------------------------------------------- */

void lfuse_entry_fill(const struct lfuse *lf, const struct stat *st, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = st->st_ino;
	/* inode numbers are random 63-bit values, never reused in practice */
	e->generation = 0;
	e->attr = *st;
	e->attr_timeout = lf->attr_timeout;
	e->entry_timeout = lf->entry_timeout;
}

static void reply_entry(fuse_req_t req, int rc, const struct stat *st)
{
	struct fuse_entry_param e;

	if (rc < 0) {
		reply_rc(req, rc);
		return;
	}
	lfuse_entry_fill(lf_of(req), st, &e);
	fuse_reply_entry(req, &e);
}

static void lf_init(void *userdata, struct fuse_conn_info *conn)
{
	struct lfuse *lf = userdata;

	conn->max_write = LFUSE_IO_MAX;
	conn->max_read = LFUSE_IO_MAX; /* equal to the max_read mount option main.c passes */
	if (conn->max_background < 64)
		conn->max_background = 64; /* async reads and write-back in flight */
	conn->time_gran = 1;

	conn->want |= conn->capable & (FUSE_CAP_ASYNC_READ | FUSE_CAP_PARALLEL_DIROPS |
				       FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO |
				       FUSE_CAP_ATOMIC_O_TRUNC | FUSE_CAP_HANDLE_KILLPRIV);
	/* Requests are copied whole into memory; splicing buys nothing here. */
	conn->want &= ~(unsigned)(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE |
				  FUSE_CAP_SPLICE_MOVE);
	/* No locks: the kernel keeps POSIX and flock locks local to this mount. */
	conn->want &= ~(unsigned)(FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
	if (lf->cache == LFUSE_CACHE_AUTO)
		conn->want |= conn->capable & FUSE_CAP_AUTO_INVAL_DATA;
	else
		conn->want &= ~(unsigned)FUSE_CAP_AUTO_INVAL_DATA;
	if (lf->writeback)
		conn->want |= conn->capable & FUSE_CAP_WRITEBACK_CACHE;
	if (lf->cache == LFUSE_CACHE_ALWAYS)
		conn->want |= conn->capable & FUSE_CAP_CACHE_SYMLINKS;
}

static void lf_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct lfuse *lf = lf_of(req);
	struct lfuse_cred cr;
	struct stat st;
	int rc;

	lfuse_cred_init(&cr, req);
	do
		rc = lodefs_lookup(lf->fs, &cr.c, parent, name, &st);
	while (lfuse_cred_retry(&cr, rc));
	lfuse_cred_done(&cr);
	if (rc == -ENOENT && lf->negative_timeout > 0) {
		/* inode 0: the kernel remembers the name as absent */
		struct fuse_entry_param e = {.entry_timeout = lf->negative_timeout};

		fuse_reply_entry(req, &e);
		return;
	}
	reply_entry(req, rc, &st);
}

static void lf_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	fuse_reply_none(req);
}

static void lf_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	fuse_reply_none(req);
}

static void lf_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct lfuse *lf = lf_of(req);
	struct stat st;
	int rc = lodefs_getattr(lf->fs, ino, &st);

	if (rc < 0)
		reply_rc(req, rc);
	else
		fuse_reply_attr(req, &st, lf->attr_timeout);
}

/*
 * A chmod refused to a writer that is not the owner. With
 * default_permissions the kernel refuses such a chmod itself, so this is
 * the kernel clearing the setuid and setgid bits before a write or
 * truncate (libfuse 3.14 cannot ask for FUSE_HANDLE_KILLPRIV). liblodefs
 * clears them itself when that write lands, so this succeeds with no
 * change; anything else stays -EPERM.
 */
static int setattr_killpriv(struct lfuse *lf, fuse_ino_t ino, mode_t want, struct stat *st)
{
	const mode_t priv = S_ISUID | S_ISGID;
	int rc = lodefs_getattr(lf->fs, ino, st);

	if (rc < 0)
		return rc;
	if ((want & 07777) == (st->st_mode & 07777) || (want & 07777 & priv & ~st->st_mode) ||
	    (want & 07777 & ~priv) != (st->st_mode & 07777 & ~priv))
		return -EPERM; /* more than dropping setuid/setgid bits */
	st->st_mode = (st->st_mode & ~(mode_t)07777) | (want & 07777);
	return 0;
}

static void lf_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct lfuse *lf = lf_of(req);
	struct lfuse_cred cr;
	struct stat st;
	unsigned set = 0;
	int rc = 0;

	if (to_set & FUSE_SET_ATTR_MODE)
		set |= LODEFS_SET_MODE;
	if (to_set & FUSE_SET_ATTR_UID)
		set |= LODEFS_SET_UID;
	if (to_set & FUSE_SET_ATTR_GID)
		set |= LODEFS_SET_GID;
	if (to_set & FUSE_SET_ATTR_ATIME_NOW)
		set |= LODEFS_SET_ATIME_NOW;
	else if (to_set & FUSE_SET_ATTR_ATIME)
		set |= LODEFS_SET_ATIME;
	if (to_set & FUSE_SET_ATTR_MTIME_NOW)
		set |= LODEFS_SET_MTIME_NOW;
	else if (to_set & FUSE_SET_ATTR_MTIME)
		set |= LODEFS_SET_MTIME;
	if (to_set & FUSE_SET_ATTR_CTIME)
		set |= LODEFS_SET_CTIME;

	if (to_set & FUSE_SET_ATTR_SIZE) {
		if (fi) {
			/* ftruncate: the open file's right to write, not the path's */
			rc = lodefs_file_truncate(file_of(fi), (uint64_t)attr->st_size);
		} else {
			set |= LODEFS_SET_SIZE;
		}
	}
	if (rc == 0 && set) {
		lfuse_cred_init(&cr, req);
		/* whether chmod keeps the setgid bit depends on group membership */
		if (set & (LODEFS_SET_MODE | LODEFS_SET_GID))
			lfuse_cred_groups(&cr);
		do
			rc = lodefs_setattr(lf->fs, &cr.c, ino, attr, set, &st);
		while (lfuse_cred_retry(&cr, rc));
		lfuse_cred_done(&cr);
		if (rc == -EPERM && set == LODEFS_SET_MODE && lf->kernel_checks)
			rc = setattr_killpriv(lf, ino, attr->st_mode, &st);
	} else if (rc == 0) {
		rc = lodefs_getattr(lf->fs, ino, &st);
	}
	if (rc < 0)
		reply_rc(req, rc);
	else
		fuse_reply_attr(req, &st, lf->attr_timeout);
}

static void lf_readlink(fuse_req_t req, fuse_ino_t ino)
{
	char buf[LODEFS_PATH_MAX];
	int rc = lodefs_readlink(lf_of(req)->fs, ino, buf, sizeof(buf) - 1);

	if (rc < 0) {
		reply_rc(req, rc);
		return;
	}
	buf[rc] = 0;
	fuse_reply_readlink(req, buf);
}

/* A new inode's group can come from a group the caller is only a member of. */
static void make_cred(struct lfuse_cred *cr, fuse_req_t req, mode_t mode)
{
	lfuse_cred_init(cr, req);
	if (mode & S_ISGID)
		lfuse_cred_groups(cr);
}

static void lf_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		     dev_t rdev)
{
	struct lfuse_cred cr;
	struct stat st;
	int rc;

	make_cred(&cr, req, mode);
	do
		rc = lodefs_mknod(lf_of(req)->fs, &cr.c, parent, name, mode, rdev, &st);
	while (lfuse_cred_retry(&cr, rc));
	lfuse_cred_done(&cr);
	reply_entry(req, rc, &st);
}

static void lf_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct lfuse_cred cr;
	struct stat st;
	int rc;

	make_cred(&cr, req, mode);
	do
		rc = lodefs_mkdir(lf_of(req)->fs, &cr.c, parent, name, mode, &st);
	while (lfuse_cred_retry(&cr, rc));
	lfuse_cred_done(&cr);
	reply_entry(req, rc, &st);
}

static void lf_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct lfuse_cred cr;
	int rc;

	lfuse_cred_init(&cr, req);
	do
		rc = lodefs_unlink(lf_of(req)->fs, &cr.c, parent, name);
	while (lfuse_cred_retry(&cr, rc));
	lfuse_cred_done(&cr);
	reply_rc(req, rc);
}

static void lf_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct lfuse_cred cr;
	int rc;

	lfuse_cred_init(&cr, req);
	do
		rc = lodefs_rmdir(lf_of(req)->fs, &cr.c, parent, name);
	while (lfuse_cred_retry(&cr, rc));
	lfuse_cred_done(&cr);
	reply_rc(req, rc);
}

static void lf_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	struct lfuse_cred cr;
	struct stat st;
	int rc;

	lfuse_cred_init(&cr, req);
	do
		rc = lodefs_symlink(lf_of(req)->fs, &cr.c, parent, name, link, &st);
	while (lfuse_cred_retry(&cr, rc));
	lfuse_cred_done(&cr);
	reply_entry(req, rc, &st);
}

static void lf_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	struct lfuse_cred cr;
	unsigned lflags = 0;
	int rc;

	if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE)) {
		fuse_reply_err(req, EINVAL); /* RENAME_WHITEOUT: no overlay support */
		return;
	}
	if (flags & RENAME_NOREPLACE)
		lflags |= LODEFS_RENAME_NOREPLACE;
	if (flags & RENAME_EXCHANGE)
		lflags |= LODEFS_RENAME_EXCHANGE;
	lfuse_cred_init(&cr, req);
	do
		rc = lodefs_rename(lf_of(req)->fs, &cr.c, parent, name, newparent, newname, lflags);
	while (lfuse_cred_retry(&cr, rc));
	lfuse_cred_done(&cr);
	reply_rc(req, rc);
}

static void lf_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	struct lfuse_cred cr;
	struct stat st;
	int rc;

	lfuse_cred_init(&cr, req);
	do
		rc = lodefs_link(lf_of(req)->fs, &cr.c, ino, newparent, newname, &st);
	while (lfuse_cred_retry(&cr, rc));
	lfuse_cred_done(&cr);
	reply_entry(req, rc, &st);
}

/* ---- regular files -------------------------------------------------------- */

/*
 * The flags liblodefs gets for an open. With the write-back cache the
 * kernel reads pages around partial writes, so a write-only open must be
 * able to read, and it places appends itself, so O_APPEND must go.
 */
static int open_flags(const struct lfuse *lf, int flags, bool *upgraded)
{
	flags &= O_ACCMODE | O_TRUNC | O_APPEND | O_CREAT | O_EXCL;
	*upgraded = false;
	if (lf->writeback) {
		flags &= ~O_APPEND;
		if ((flags & O_ACCMODE) == O_WRONLY) {
			flags = (flags & ~O_ACCMODE) | O_RDWR;
			*upgraded = true;
		}
	}
	return flags;
}

/* How the kernel may cache the file this open returns. */
static void open_cache(const struct lfuse *lf, struct fuse_file_info *fi)
{
	fi->direct_io = lf->cache == LFUSE_CACHE_NONE;
	fi->keep_cache = lf->cache == LFUSE_CACHE_ALWAYS;
}

static void lf_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct lfuse *lf = lf_of(req);
	struct lfuse_cred cr;
	lodefs_file_t *f = NULL;
	bool upgraded;
	int flags = open_flags(lf, fi->flags, &upgraded) & ~(O_CREAT | O_EXCL), rc;

	lfuse_cred_init(&cr, req);
	do
		rc = lodefs_open(lf->fs, &cr.c, ino, flags, &f);
	while (lfuse_cred_retry(&cr, rc));
	if (rc == -EACCES && upgraded) {
		/* no read permission: the write-back cache then does without */
		flags = (flags & ~O_ACCMODE) | O_WRONLY;
		rc = lodefs_open(lf->fs, &cr.c, ino, flags, &f);
	}
	lfuse_cred_done(&cr);
	if (rc < 0) {
		reply_rc(req, rc);
		return;
	}
	fi->fh = (uintptr_t)f;
	open_cache(lf, fi);
	if (reply_open(req, fi) != 0)
		lodefs_file_close(f); /* the opener was interrupted and is gone */
}

static void lf_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	struct lfuse *lf = lf_of(req);
	struct lfuse_cred cr;
	struct fuse_entry_param e;
	lodefs_file_t *f = NULL;
	struct stat st;
	bool upgraded;
	int flags = open_flags(lf, fi->flags, &upgraded), rc;

	make_cred(&cr, req, mode);
	do
		rc = lodefs_create(lf->fs, &cr.c, parent, name, flags, mode, &st, &f);
	while (lfuse_cred_retry(&cr, rc));
	if (rc == -EACCES && upgraded) {
		flags = (flags & ~(O_ACCMODE | O_EXCL)) | O_WRONLY;
		rc = lodefs_create(lf->fs, &cr.c, parent, name, flags, mode, &st, &f);
	}
	lfuse_cred_done(&cr);
	if (rc < 0) {
		reply_rc(req, rc);
		return;
	}
	fi->fh = (uintptr_t)f;
	open_cache(lf, fi);
	lfuse_entry_fill(lf, &st, &e);
	if (fuse_reply_create(req, &e, fi) != 0)
		lodefs_file_close(f);
}

/*
 * A read or write started by a poller (poll.c): its request, and the
 * buffer: a read's own, after this struct; a write's data stays in the
 * request's buffer, which the poller lends it (hold) until the reply.
 */
struct lf_aio {
	struct lodefs_aio aio;
	fuse_req_t req;
	void *hold;
	char buf[];
};

void lfuse_aio_done(struct lodefs_aio *a)
{
	struct lf_aio *r = a->user;

	if (a->rc < 0)
		reply_rc(r->req, (int)a->rc);
	else if (r->hold)
		fuse_reply_write(r->req, (size_t)a->rc);
	else
		fuse_reply_buf(r->req, r->buf, (size_t)a->rc);
	if (r->hold)
		lfuse_poller_release(r->hold);
	free(r);
}

/*
 * On a poller the read is started and answered when it completes, so the
 * poller goes on taking requests meanwhile; on a request thread (or -s) it
 * is answered here.
 */
static void lf_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	lode_eq_t *eq = lfuse_poller_eq();
	struct lf_aio *r;
	int rc;

	if (size > LFUSE_IO_MAX)
		size = LFUSE_IO_MAX;
	if (!(r = malloc(sizeof(*r) + (size ? size : 1)))) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	r->req = req;
	r->hold = NULL;
	r->aio.user = r;
	if (eq) {
		if ((rc = lodefs_aio_read(file_of(fi), r->buf, size, (uint64_t)off, eq, &r->aio)) == 0) {
			lfuse_poller_started();
			return;
		}
		if (rc < 0)
			r->aio.rc = rc;
	} else {
		r->aio.rc = lodefs_file_read(file_of(fi), r->buf, size, (uint64_t)off);
	}
	lfuse_aio_done(&r->aio);
}

/* On a poller, started and answered when it completes, as lf_read. */
static void lf_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	lode_eq_t *eq = lfuse_poller_eq();
	struct lf_aio *r;
	ssize_t n;
	int rc;

	if (eq && (r = malloc(sizeof(*r)))) {
		if (!(r->hold = lfuse_poller_hold())) {
			free(r);
		} else {
			r->req = req;
			r->aio.user = r;
			rc = lodefs_aio_write(file_of(fi), buf, size, (uint64_t)off, eq, &r->aio);
			if (rc == 0) {
				lfuse_poller_started();
				return;
			}
			if (rc < 0)
				r->aio.rc = rc;
			lfuse_aio_done(&r->aio);
			return;
		}
	}
	n = lodefs_file_write(file_of(fi), buf, size, (uint64_t)off, NULL);

	if (n < 0)
		reply_rc(req, (int)n);
	else
		fuse_reply_write(req, (size_t)n);
}

/*
 * Writes arrive here (libfuse prefers write_buf when both are set). The
 * data is normally one buffer in memory, written from where it lies;
 * anything else (a pipe, several pieces) is gathered into one buffer first.
 */
static void lf_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *bufv, off_t off,
			 struct fuse_file_info *fi)
{
	size_t size = fuse_buf_size(bufv);
	struct fuse_bufvec dst = FUSE_BUFVEC_INIT(size);
	const struct fuse_buf *b = &bufv->buf[bufv->idx];
	ssize_t n;

	if (bufv->count - bufv->idx == 1 && !(b->flags & FUSE_BUF_IS_FD)) {
		lf_write(req, ino, (const char *)b->mem + bufv->off, size, off, fi);
		return;
	}
	if (!(dst.buf[0].mem = malloc(size ? size : 1))) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	n = fuse_buf_copy(&dst, bufv, 0);
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else
		lf_write(req, ino, dst.buf[0].mem, (size_t)n, off, fi);
	free(dst.buf[0].mem);
}

/*
 * Every close(2) of a descriptor: make the cached size and times durable so
 * that the next open anywhere sees them (close-to-open), before close
 * returns. release comes later and asynchronously.
 */
static void lf_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	reply_rc(req, lodefs_file_sync(file_of(fi), 0));
}

static void lf_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	reply_rc(req, lodefs_file_close(file_of(fi)));
}

static void lf_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	reply_rc(req, lodefs_file_sync(file_of(fi), datasync));
}

/* Directory updates are durable when they return: nothing is left to sync. */
static void lf_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	fuse_reply_err(req, 0);
}

/* Only plain preallocation, as a size extension: holes cost nothing here. */
static void lf_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
			 struct fuse_file_info *fi)
{
	lodefs_file_t *f = file_of(fi);
	struct stat st;
	int rc;

	if (mode != 0) {
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	if (off < 0 || len <= 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (off > INT64_MAX - len) {
		fuse_reply_err(req, EFBIG);
		return;
	}
	rc = lodefs_file_stat(f, &st);
	if (rc == 0 && st.st_size < off + len)
		rc = lodefs_file_truncate(f, (uint64_t)(off + len));
	reply_rc(req, rc);
}

/*
 * SEEK_DATA and SEEK_HOLE, with the whole file counted as data (holes are
 * not tracked): data is wherever off is, the only hole is at the end.
 */
static void lf_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
		     struct fuse_file_info *fi)
{
	struct stat st;
	int rc;

	if (whence != SEEK_DATA && whence != SEEK_HOLE) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if ((rc = lodefs_file_stat(file_of(fi), &st)) < 0) {
		reply_rc(req, rc);
		return;
	}
	if (off < 0 || off >= st.st_size)
		fuse_reply_err(req, ENXIO);
	else
		fuse_reply_lseek(req, whence == SEEK_DATA ? off : st.st_size);
}

/* ---- the rest ------------------------------------------------------------- */

static void lf_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs st;
	int rc = lodefs_statfs(lf_of(req)->fs, &st);

	if (rc < 0)
		reply_rc(req, rc);
	else
		fuse_reply_statfs(req, &st);
}

static void lf_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	struct lfuse_cred cr;
	int rc;

	lfuse_cred_init(&cr, req);
	do
		rc = lodefs_access(lf_of(req)->fs, &cr.c, ino, mask);
	while (lfuse_cred_retry(&cr, rc));
	lfuse_cred_done(&cr);
	reply_rc(req, rc);
}

/* ---- extended attributes -------------------------------------------------- */

/*
 * A reply to getxattr or listxattr of len bytes at buf: the length alone
 * when the caller asked for it (size 0), ERANGE when it does not fit.
 */
static void reply_xattr(fuse_req_t req, const char *buf, size_t len, size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (len > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, buf, len);
}

static void lf_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	struct lfuse *lf = lf_of(req);
	struct lfuse_cred cr;
	int rc;

	if (strcmp(name, LFUSE_XATTR_INVALIDATE) == 0) {
		/*
		 * The preload library wrote around the kernel. On a directory
		 * a value that is a name invalidates that entry too (it was
		 * created, removed or renamed).
		 */
		char entry[LODEFS_NAME_MAX + 1];
		const char *ename = NULL;
		struct stat st;

		if (size > 0 && size <= LODEFS_NAME_MAX && !memchr(value, '/', size) &&
		    !memchr(value, 0, size) && lodefs_getattr(lf->fs, ino, &st) == 0 &&
		    S_ISDIR(st.st_mode)) {
			memcpy(entry, value, size);
			entry[size] = 0;
			ename = entry;
		}
		fuse_reply_err(req, 0);
		if (lf->inval)
			lfuse_inval_post(lf->inval, ino, ename);
		return;
	}
	if (strcmp(name, LFUSE_XATTR_MOUNT) == 0) {
		fuse_reply_err(req, EPERM);
		return;
	}
	lfuse_cred_init(&cr, req);
	do
		rc = lodefs_xattr_set(lf->fs, &cr.c, ino, name, value, size, flags);
	while (lfuse_cred_retry(&cr, rc));
	lfuse_cred_done(&cr);
	reply_rc(req, rc);
}

static void lf_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct lfuse *lf = lf_of(req);
	struct lfuse_cred cr;
	char *buf = NULL;
	int rc;

	if (strcmp(name, LFUSE_XATTR_MOUNT) == 0 && ino == FUSE_ROOT_ID) {
		reply_xattr(req, lf->mount_xattr, strlen(lf->mount_xattr), size);
		return;
	}
	if (strcmp(name, LFUSE_XATTR_MOUNT) == 0 || strcmp(name, LFUSE_XATTR_INVALIDATE) == 0) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	if (size > LODEFS_XATTR_SIZE_MAX)
		size = LODEFS_XATTR_SIZE_MAX;
	if (size && !(buf = malloc(size))) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	lfuse_cred_init(&cr, req);
	do
		rc = lodefs_xattr_get(lf->fs, &cr.c, ino, name, buf, size);
	while (lfuse_cred_retry(&cr, rc));
	lfuse_cred_done(&cr);
	if (rc < 0)
		reply_rc(req, rc);
	else
		reply_xattr(req, buf, (size_t)rc, size);
	free(buf);
}

static void lf_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct lfuse *lf = lf_of(req);
	struct lfuse_cred cr;
	char *buf = NULL;
	int rc;

	if (size && !(buf = malloc(size))) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	lfuse_cred_init(&cr, req);
	do
		rc = lodefs_xattr_list(lf->fs, &cr.c, ino, buf, size);
	while (lfuse_cred_retry(&cr, rc));
	lfuse_cred_done(&cr);
	if (rc < 0)
		reply_rc(req, rc);
	else
		reply_xattr(req, buf, (size_t)rc, size);
	free(buf);
}

static void lf_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct lfuse_cred cr;
	int rc;

	if (strcmp(name, LFUSE_XATTR_MOUNT) == 0) {
		fuse_reply_err(req, EPERM);
		return;
	}
	lfuse_cred_init(&cr, req);
	do
		rc = lodefs_xattr_remove(lf_of(req)->fs, &cr.c, ino, name);
	while (lfuse_cred_retry(&cr, rc));
	lfuse_cred_done(&cr);
	reply_rc(req, rc);
}

const struct fuse_lowlevel_ops lfuse_ops = {
	.init = lf_init,
	.lookup = lf_lookup,
	.forget = lf_forget,
	.forget_multi = lf_forget_multi,
	.getattr = lf_getattr,
	.setattr = lf_setattr,
	.readlink = lf_readlink,
	.mknod = lf_mknod,
	.mkdir = lf_mkdir,
	.unlink = lf_unlink,
	.rmdir = lf_rmdir,
	.symlink = lf_symlink,
	.rename = lf_rename,
	.link = lf_link,
	.open = lf_open,
	.create = lf_create,
	.read = lf_read,
	.write = lf_write,
	.write_buf = lf_write_buf,
	.flush = lf_flush,
	.release = lf_release,
	.fsync = lf_fsync,
	.opendir = lfuse_opendir,
	.readdir = lfuse_readdir,
	.readdirplus = lfuse_readdirplus,
	.releasedir = lfuse_releasedir,
	.fsyncdir = lf_fsyncdir,
	.statfs = lf_statfs,
	.setxattr = lf_setxattr,
	.getxattr = lf_getxattr,
	.listxattr = lf_listxattr,
	.removexattr = lf_removexattr,
	.access = lf_access,
	.fallocate = lf_fallocate,
	.lseek = lf_lseek,
};
