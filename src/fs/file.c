/*
 * Open regular files: read, write, truncate, sync, stat and close.
 *
 * A file's bytes are a liblode byte array over the inode's object, chunked
 * by the chunk size in its attribute record; its size is the record's, not
 * the array's. While a file is open its attributes are cached in the
 * in-memory inode (fs.h):
 *
 *   - A write that ends past the durable size registers the new end
 *     (want_size, under seq) and, while its data is in flight, makes the
 *     size durable with an attribute transaction, which merges every end
 *     registered so far; a writer whose end another writer's transaction
 *     already covered just waits for it. Sizes only grow this way, so
 *     writers of distinct ranges never lose one another's size.
 *   - A write that does not extend only notes mtime and ctime in memory;
 *     they are stored by sync, close, getattr, and by the next write or
 *     read once they are more than a second old.
 *   - A read is clipped to the cached size; one that reaches it fetches the
 *     record once more (another instance may have grown the file).
 *   - atime follows relatime: a read stores it only when it is not newer
 *     than mtime or ctime, or is a day old.
 */
#include "fs/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define IO_MAX 0x7ffff000u /* the most one read or write moves, as Linux */
#define DAY_NS (86400LL * 1000000000LL)

static int64_t ts_ns(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec;
}

static bool ts_le(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec <= b->tv_nsec);
}

static void chunk_key(uint64_t idx, uint8_t dkey[8], struct lode_key *k)
{
	for (int i = 0; i < 8; i++)
		dkey[i] = (uint8_t)(idx >> (56 - 8 * i));
	*k = (struct lode_key){dkey, 8, "d", 1};
}

/* Punch whole chunks [from, to) of ino, FS_BATCH at a time. */
static int chunks_punch(struct fs_chan *ch, uint64_t ino, uint64_t from, uint64_t to)
{
	lode_event_t ev[FS_BATCH];
	uint8_t keys[FS_BATCH][8];
	lode_eq_t *eq = fs_eq_get(ch);
	int rc = 0;

	if (!eq)
		return -ENOMEM;
	memset(ev, 0, sizeof(ev));
	while (from < to && rc == 0) {
		unsigned n = 0;

		for (; n < FS_BATCH && from < to; n++, from++) {
			struct lode_key k;

			chunk_key(from, keys[n], &k);
			lode_event_init(&ev[n], eq);
			if ((rc = lode_dkey_punch(ch->cont, fs_oid(ino), &k, &ev[n])) < 0)
				break;
		}
		{
			int r2 = fs_eq_wait(eq, n, -ENOENT);

			if (rc == 0)
				rc = r2;
		}
	}
	fs_eq_put(ch, eq);
	return rc;
}

/* Punch every chunk at index from or above, found by listing the object's dkeys. */
static int chunks_punch_listed(struct fs_chan *ch, uint64_t ino, uint64_t from)
{
	struct lode_anchor an;
	uint8_t *buf = malloc(64 << 10);
	int rc = 0;

	if (!buf)
		return -ENOMEM;
	memset(&an, 0, sizeof(an));
	while (!an.eof && rc == 0) {
		int n = lode_dkey_list(ch->cont, fs_oid(ino), LODE_EPOCH_MAX, &an, buf, 64 << 10);
		size_t o = 0;

		if (n < 0) {
			rc = n;
			break;
		}
		for (int i = 0; i < n && rc == 0; i++) {
			size_t kl = (size_t)buf[o] | (size_t)buf[o + 1] << 8;
			const uint8_t *key = buf + o + 2;
			uint64_t idx = 0;

			o += 2 + kl;
			if (kl != 8 || key[0] != 0)
				continue;
			for (int b = 0; b < 8; b++)
				idx = idx << 8 | key[b];
			if (idx >= from)
				rc = chunks_punch(ch, ino, idx, idx + 1);
		}
	}
	free(buf);
	return rc;
}

/*
 * Remove the bytes of the file past size (r->size is the current size):
 * whole chunks, then the tail of the chunk size ends in. The caller holds
 * the inode's transaction and stores the new size after.
 */
int file_truncate_locked(struct fs_chan *ch, struct fs_inode *in, struct fs_attr *r,
			 uint64_t size)
{
	uint64_t cs = r->chunk, first, last;
	int rc;

	if (size >= r->size || !S_ISREG(r->mode))
		return 0;
	first = size / cs + (size % cs != 0);
	last = r->size / cs + (r->size % cs != 0);
	if (last - first <= 4096)
		rc = chunks_punch(ch, in->ino, first, last);
	else
		rc = chunks_punch_listed(ch, in->ino, first);
	if (rc == 0 && size % cs) {
		uint8_t dkey[8];
		struct lode_key k;

		chunk_key(size / cs, dkey, &k);
		rc = lode_range_punch(ch->cont, fs_oid(in->ino), &k, size % cs, cs - size % cs, NULL);
		if (rc == -ENOENT)
			rc = 0;
	}
	return rc;
}

/* ---- open and close -------------------------------------------------------------- */

int file_open_inode(lodefs_t *fs, struct fs_chan *ch, const struct lodefs_cred *c,
		    uint64_t ino, int flags, bool created, lodefs_file_t **out)
{
	int acc = flags & O_ACCMODE;
	struct lodefs_file *f;
	struct fs_inode *in;
	struct fs_txn t;
	int rc, mask = 0;

	if (acc == O_ACCMODE)
		return -EINVAL;
	if (!(f = calloc(1, sizeof(*f))))
		return -ENOMEM;
	f->fs = fs;
	f->flags = flags;
	f->uid = c->uid;
	f->rd = acc == O_RDONLY || acc == O_RDWR;
	f->wr = acc == O_WRONLY || acc == O_RDWR;
	f->append = (flags & O_APPEND) != 0;
	if (!(in = inode_get(fs, ino))) {
		free(f);
		return -ENOMEM;
	}
	/* Close-to-open: what other instances changed is seen from here on. */
	if ((rc = inode_begin(ch, in, TXN_READ, &t)) < 0)
		goto fail;
	if (S_ISDIR(t.r.mode))
		rc = f->wr || (flags & O_TRUNC) ? -EISDIR : 0;
	else if (S_ISLNK(t.r.mode))
		rc = -ELOOP;
	else if (!S_ISREG(t.r.mode))
		rc = -ENXIO;
	f->isdir = S_ISDIR(t.r.mode);
	if (f->rd)
		mask |= R_OK;
	if (f->wr || (flags & O_TRUNC))
		mask |= W_OK;
	if (rc == 0 && !created)
		rc = perm_check(c, &t.r, mask);
	if ((rc = inode_end(ch, in, &t, rc)) < 0)
		goto fail;
	pthread_mutex_lock(&in->mu);
	in->opens++;
	in->file_opens++;
	pthread_mutex_unlock(&in->mu);
	f->in = in;
	if ((flags & O_TRUNC) && !created && !f->isdir) {
		struct timespec now;

		if ((rc = inode_begin(ch, in, TXN_STORE, &t)) == 0) {
			rc = file_truncate_locked(ch, in, &t.r, 0);
			fs_now(&now);
			t.r.size = 0;
			t.r.mtime = t.r.ctime = now;
			if (c->uid != 0 && (t.r.mode & S_ISUID))
				t.r.mode &= ~(mode_t)S_ISUID;
			if (c->uid != 0 && (t.r.mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP))
				t.r.mode &= ~(mode_t)S_ISGID;
			rc = inode_end(ch, in, &t, rc);
		}
		if (rc < 0) {
			inode_open_release(fs, ch, in, true);
			free(f);
			return rc;
		}
	}
	pthread_mutex_lock(&fs->imu);
	f->next = fs->files;
	if (f->next)
		f->next->prev = f;
	fs->files = f;
	pthread_mutex_unlock(&fs->imu);
	*out = f;
	return 0;
fail:
	inode_put(fs, in);
	free(f);
	return rc;
}

/* Drop one open of in (and the reference it held); the last close of an unlinked file removes it. */
void inode_open_release(lodefs_t *fs, struct fs_chan *ch, struct fs_inode *in, bool file)
{
	bool last;

	pthread_mutex_lock(&in->mu);
	in->opens--;
	if (file)
		in->file_opens--;
	last = file && in->file_opens == 0 && in->orphan;
	if (last)
		in->orphan = false;
	pthread_mutex_unlock(&in->mu);
	if (last) {
		struct fs_attr a;

		/* Unless another instance linked it again meanwhile. */
		if (attr_fetch(ch, in->ino, &a) == 0 && a.nlink == 0)
			obj_remove(ch, in->ino);
	}
	inode_put(fs, in);
}

int lodefs_open(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t ino, int flags,
		lodefs_file_t **file_out)
{
	if (!fs || !file_out)
		return -EFAULT;
	return file_open_inode(fs, fs_chan(fs), fs_cred(fs, cred), ino, flags, false, file_out);
}

int lodefs_create(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t parent,
		  const char *name, int flags, mode_t mode, struct stat *st,
		  lodefs_file_t **file_out)
{
	const struct lodefs_cred *c;
	uint64_t ino;
	bool created = false;
	int rc;

	if (!fs || !file_out)
		return -EFAULT;
	if ((flags & O_ACCMODE) == O_ACCMODE)
		return -EINVAL;
	c = fs_cred(fs, cred);
	rc = ns_make(fs, c, parent, name, S_IFREG | (mode & 07777), 0, NULL, (flags & O_EXCL) != 0,
		     st, &ino, &created);
	if (rc < 0)
		return rc;
	rc = file_open_inode(fs, fs_chan(fs), c, ino, created ? flags & ~O_TRUNC : flags, created,
			     file_out);
	if (rc == 0 && st && !created)
		rc = lodefs_file_stat(*file_out, st);
	return rc;
}

uint64_t lodefs_file_ino(const lodefs_file_t *f)
{
	return f ? f->in->ino : 0;
}

int lodefs_file_sync(lodefs_file_t *f, int datasync)
{
	if (!f)
		return -EFAULT;
	return inode_sync(fs_chan(f->fs), f->in, false);
}

int lodefs_file_stat(lodefs_file_t *f, struct stat *st)
{
	int rc;

	if (!f || !st)
		return -EFAULT;
	if ((rc = inode_sync(fs_chan(f->fs), f->in, true)) < 0)
		return rc;
	pthread_mutex_lock(&f->in->mu);
	attr_to_stat(f->in->ino, &f->in->a, st);
	pthread_mutex_unlock(&f->in->mu);
	return 0;
}

int lodefs_file_close(lodefs_file_t *f)
{
	struct fs_chan *ch;
	int rc;

	if (!f)
		return -EFAULT;
	ch = fs_chan(f->fs);
	rc = inode_sync(ch, f->in, false);
	fs_file_unlist(f);
	inode_open_release(f->fs, ch, f->in, true);
	free(f);
	return rc;
}

/* ---- read ------------------------------------------------------------------------ */

/* Flush pending times once they are older than FS_DIRTY_NS. */
static int times_age_check(struct fs_chan *ch, struct fs_inode *in, const struct timespec *now)
{
	bool old;

	pthread_mutex_lock(&in->mu);
	old = (in->mtime_dirty || in->atime_dirty) &&
	      ts_ns(now) - ts_ns(&in->dirty_since) > FS_DIRTY_NS && !in->busy;
	pthread_mutex_unlock(&in->mu);
	return old ? inode_sync(ch, in, false) : 0;
}

static void dirty_mark(struct fs_inode *in, const struct timespec *now)
{
	if (!in->mtime_dirty && !in->atime_dirty)
		in->dirty_since = *now;
	in->dirty_gen++;
}

static size_t iov_total(const struct iovec *iov, int iovcnt, int *rc)
{
	size_t n = 0;

	*rc = 0;
	if (iovcnt < 0 || iovcnt > IOV_MAX) {
		*rc = -EINVAL;
		return 0;
	}
	for (int i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len && !iov[i].iov_base)
			*rc = -EFAULT;
		if (n + iov[i].iov_len < n)
			*rc = -EINVAL;
		n += iov[i].iov_len;
	}
	return n;
}

/* Read or write len bytes at off spread over iov, all requests in flight together. */
static int iov_io(struct fs_chan *ch, uint64_t ino, uint32_t chunk, const struct iovec *iov,
		  int iovcnt, uint64_t off, size_t len, bool write, lode_eq_t *eq,
		  lode_event_t *ev, unsigned *nev)
{
	int rc = 0;

	for (int i = 0; i < iovcnt && len && rc == 0; i++) {
		size_t n = iov[i].iov_len < len ? iov[i].iov_len : len;

		if (n == 0)
			continue;
		if (*nev == FS_BATCH) {
			if ((rc = fs_eq_wait(eq, *nev, 0)) < 0)
				break;
			*nev = 0;
		}
		memset(&ev[*nev], 0, sizeof(ev[*nev]));
		lode_event_init(&ev[*nev], eq);
		if (write)
			rc = lode_array_write(ch->cont, fs_oid(ino), chunk, off, iov[i].iov_base, n,
					      &ev[*nev]);
		else
			rc = lode_array_read(ch->cont, fs_oid(ino), chunk, LODE_EPOCH_MAX, off,
					     iov[i].iov_base, n, &ev[*nev]);
		if (rc == 0)
			(*nev)++;
		off += n;
		len -= n;
	}
	return rc;
}

/*
 * A read's checks and its length: the bytes of [off, off + len) that lie
 * inside the file, fetching the size again when the read reaches the one
 * cached (another instance may have written further). *chunk gets the
 * file's chunk size. Returns that length, 0 at or past the end, or an error.
 */
static ssize_t read_span(lodefs_file_t *f, struct fs_chan *ch, uint64_t off, size_t len,
			 uint32_t *chunk)
{
	struct fs_inode *in = f->in;
	uint64_t size;
	int rc;

	if (!f->rd)
		return -EBADF;
	if (f->isdir)
		return -EISDIR;
	if (off > FS_SIZE_MAX)
		return -EINVAL;
	if (len == 0)
		return 0;
	if (len > IO_MAX)
		len = IO_MAX;
	/* No lock: threads reading one file would all queue on it (file_publish). */
	size = __atomic_load_n(&in->rd_size, __ATOMIC_ACQUIRE);
	*chunk = __atomic_load_n(&in->rd_chunk, __ATOMIC_ACQUIRE);
	if (off + len > size) {
		if ((rc = inode_sync(ch, in, true)) < 0)
			return rc;
		size = __atomic_load_n(&in->rd_size, __ATOMIC_ACQUIRE);
		*chunk = __atomic_load_n(&in->rd_chunk, __ATOMIC_ACQUIRE);
	}
	return (ssize_t)(off >= size ? 0 : (size - off < len ? size - off : len));
}

/*
 * The copies of what reads need. The chunk size goes first: a reader that
 * sees a size sees at least its chunk size (which changes only while the
 * file is empty). Relatime: reads leave atime alone while it is later than
 * mtime and ctime and less than a day old.
 */
void file_publish(struct fs_inode *in)
{
	int64_t until = 0;

	if (!ts_le(&in->a.atime, &in->a.mtime) && !ts_le(&in->a.atime, &in->a.ctime))
		until = ts_ns(&in->a.atime) + DAY_NS;
	__atomic_store_n(&in->rd_chunk, in->a.chunk, __ATOMIC_RELEASE);
	__atomic_store_n(&in->rd_size, in->a.size, __ATOMIC_RELEASE);
	__atomic_store_n(&in->rd_quiet_until, until, __ATOMIC_RELEASE);
}

/* After a read: relatime, and times old enough to store are stored. */
static int read_done(struct fs_chan *ch, struct fs_inode *in)
{
	struct timespec now;

	fs_now(&now);
	/* The lock only when atime may be due (a racing change is ordered after this read). */
	if (ts_ns(&now) > __atomic_load_n(&in->rd_quiet_until, __ATOMIC_ACQUIRE)) {
		pthread_mutex_lock(&in->mu);
		if (ts_le(&in->a.atime, &in->a.mtime) || ts_le(&in->a.atime, &in->a.ctime) ||
		    ts_ns(&now) - ts_ns(&in->a.atime) > DAY_NS) {
			dirty_mark(in, &now);
			in->a.atime = now;
			in->atime_dirty = true;
			file_publish(in);
		}
		pthread_mutex_unlock(&in->mu);
	}
	/* A racy look first: the lock only when something may be old enough to store. */
	if (__atomic_load_n(&in->mtime_dirty, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&in->atime_dirty, __ATOMIC_RELAXED))
		return times_age_check(ch, in, &now);
	return 0;
}

ssize_t lodefs_file_readv(lodefs_file_t *f, const struct iovec *iov, int iovcnt, uint64_t off)
{
	lode_event_t ev[FS_BATCH];
	struct fs_chan *ch;
	lode_eq_t *eq;
	uint32_t chunk = 0;
	unsigned nev = 0;
	ssize_t len;
	int rc, r2;

	if (!f || (iovcnt && !iov))
		return -EFAULT;
	len = (ssize_t)iov_total(iov, iovcnt, &rc);
	if (rc < 0)
		return rc;
	ch = fs_chan(f->fs);
	if ((len = read_span(f, ch, off, (size_t)len, &chunk)) <= 0)
		return len;
	if (!(eq = fs_eq_get(ch)))
		return -ENOMEM;
	rc = iov_io(ch, f->in->ino, chunk, iov, iovcnt, off, (size_t)len, false, eq, ev, &nev);
	r2 = fs_eq_wait(eq, nev, 0);
	fs_eq_put(ch, eq);
	if (rc == 0)
		rc = r2;
	if (rc == 0)
		rc = read_done(ch, f->in);
	return rc < 0 ? rc : len;
}

int lodefs_aio_read(lodefs_file_t *f, void *buf, size_t len, uint64_t off, lode_eq_t *eq,
		    struct lodefs_aio *a)
{
	struct fs_chan *ch;
	uint32_t chunk = 0;
	ssize_t n;
	int rc;

	if (!f || !eq || !a || (len && !buf))
		return -EFAULT;
	ch = fs_chan(f->fs);
	if ((n = read_span(f, ch, off, len, &chunk)) <= 0) {
		if (n < 0)
			return (int)n;
		a->rc = 0;
		return 1; /* nothing to read: done already */
	}
	memset(&a->priv, 0, sizeof(a->priv));
	a->priv.f = f;
	a->priv.len = (size_t)n;
	if ((rc = lode_event_init(&a->priv.ev, eq)) < 0)
		return rc;
	return lode_array_read(ch->cont, fs_oid(f->in->ino), chunk, LODE_EPOCH_MAX, off, buf,
			       (size_t)n, &a->priv.ev);
}

/* ---- write ----------------------------------------------------------------------- */

/* Wait until the size registered as seq my is durable, storing it if nobody else does. */
static int size_commit(struct fs_chan *ch, struct fs_inode *in, uint64_t my)
{
	int rc = 0;

	pthread_mutex_lock(&in->mu);
	while (in->done_seq < my) {
		if (!in->busy) {
			struct fs_txn t;

			pthread_mutex_unlock(&in->mu);
			if ((rc = inode_begin(ch, in, TXN_STORE, &t)) == 0)
				rc = inode_end(ch, in, &t, 0);
			pthread_mutex_lock(&in->mu);
			if (rc < 0)
				break;
			continue;
		}
		pthread_cond_wait(&in->cv, &in->mu);
	}
	pthread_mutex_unlock(&in->mu);
	return rc;
}

/* A write's plan, made under the inode's lock before its data goes out. */
struct write_plan {
	uint64_t off, end; /* where it lands (an appender's offset is the file's end) */
	size_t len;
	uint64_t my;       /* an extending write's size sequence number */
	uint32_t chunk;
	bool extend, kill; /* it grows the file; it clears setuid/setgid */
	struct timespec now;
};

/*
 * Plan a write of len bytes at off: the times, the size it wants, setuid
 * clearing. Returns 0 (w is set), 1 when nothing is to be written (w->end
 * says where the writer stands), or an error.
 */
static int write_begin(lodefs_file_t *f, uint64_t off, size_t len, struct write_plan *w)
{
	struct fs_inode *in = f->in;

	if (!f->wr)
		return -EBADF;
	if (len > IO_MAX)
		len = IO_MAX;
	memset(w, 0, sizeof(*w));
	fs_now(&w->now);
	pthread_mutex_lock(&in->mu);
	if (f->append)
		off = in->a.size > in->want_size ? in->a.size : in->want_size;
	if (len == 0 || off >= FS_SIZE_MAX) {
		pthread_mutex_unlock(&in->mu);
		w->end = off;
		return len && off >= FS_SIZE_MAX ? -EFBIG : 1;
	}
	if (len > FS_SIZE_MAX - off)
		len = (size_t)(FS_SIZE_MAX - off);
	w->off = off;
	w->len = len;
	w->end = off + len;
	w->extend = w->end > in->a.size;
	if (w->extend) {
		w->my = ++in->seq;
		if (w->end > in->want_size)
			in->want_size = w->end;
	}
	dirty_mark(in, &w->now);
	in->a.mtime = in->a.ctime = w->now;
	in->mtime_dirty = true;
	file_publish(in);
	if (f->uid != 0 && ((in->a.mode & S_ISUID) ||
			    (in->a.mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP))) {
		in->kill_suid = true;
		w->kill = true;
	}
	w->chunk = in->a.chunk;
	pthread_mutex_unlock(&in->mu);
	return 0;
}

/* What a write stores besides its data: the size it extends to, cleared setuid bits, times. */
static int write_end(struct fs_chan *ch, struct fs_inode *in, const struct write_plan *w)
{
	if (w->extend)
		return size_commit(ch, in, w->my);
	if (w->kill)
		return inode_sync(ch, in, false);
	return times_age_check(ch, in, &w->now);
}

ssize_t lodefs_file_writev(lodefs_file_t *f, const struct iovec *iov, int iovcnt, uint64_t off,
			   uint64_t *end_out)
{
	lode_event_t ev[FS_BATCH];
	struct write_plan w;
	struct fs_chan *ch;
	lode_eq_t *eq;
	unsigned nev = 0;
	size_t len;
	int rc, r2;

	if (!f || (iovcnt && !iov))
		return -EFAULT;
	len = iov_total(iov, iovcnt, &rc);
	if (rc < 0)
		return rc;
	if ((rc = write_begin(f, off, len, &w)) != 0) {
		if (rc == 1 && end_out)
			*end_out = w.end;
		return rc == 1 ? 0 : rc;
	}
	ch = fs_chan(f->fs);
	if (!(eq = fs_eq_get(ch)))
		return -ENOMEM;
	/* The data and the size go out together; the call returns when both are durable. */
	rc = iov_io(ch, f->in->ino, w.chunk, iov, iovcnt, w.off, w.len, true, eq, ev, &nev);
	if (rc == 0)
		rc = write_end(ch, f->in, &w);
	r2 = fs_eq_wait(eq, nev, 0);
	fs_eq_put(ch, eq);
	if (rc == 0)
		rc = r2;
	if (rc < 0)
		return rc;
	if (end_out)
		*end_out = w.end;
	return (ssize_t)w.len;
}

int lodefs_aio_write(lodefs_file_t *f, const void *buf, size_t len, uint64_t off, lode_eq_t *eq,
		     struct lodefs_aio *a)
{
	struct write_plan w;
	struct fs_chan *ch;
	int rc;

	if (!f || !eq || !a || (len && !buf))
		return -EFAULT;
	if ((rc = write_begin(f, off, len, &w)) != 0) {
		if (rc == 1)
			a->rc = 0;
		return rc;
	}
	memset(&a->priv, 0, sizeof(a->priv));
	a->priv.f = f;
	a->priv.len = w.len;
	a->priv.write = true;
	a->priv.extend = w.extend;
	a->priv.kill = w.kill;
	a->priv.seq = w.my;
	ch = fs_chan(f->fs);
	if ((rc = lode_event_init(&a->priv.ev, eq)) < 0)
		return rc;
	return lode_array_write(ch->cont, fs_oid(f->in->ino), w.chunk, w.off, buf, w.len,
				&a->priv.ev);
}

/* The aio whose event ev is. */
static struct lodefs_aio *aio_of(lode_event_t *ev)
{
	return (struct lodefs_aio *)((char *)ev - offsetof(struct lodefs_aio, priv.ev));
}

int lodefs_aio_reap(lode_eq_t *eq, struct lodefs_aio **done, unsigned max)
{
	lode_event_t *evs[64];
	unsigned got = 0;

	if (!eq || (max && !done))
		return -EFAULT;
	while (got < max) {
		unsigned want = max - got < 64 ? max - got : 64;
		int n = lode_eq_poll(eq, 0, want, 0, evs);

		if (n < 0)
			return got ? (int)got : n;
		for (int i = 0; i < n; i++) {
			struct lodefs_aio *a = aio_of(evs[i]);
			lodefs_file_t *f = a->priv.f;
			int rc = evs[i]->rc;

			if (a->priv.write) {
				struct write_plan w = {.extend = a->priv.extend,
						       .kill = a->priv.kill,
						       .my = a->priv.seq};
				int r2;

				/* The size is stored after the data here, not beside it. */
				fs_now(&w.now);
				r2 = write_end(fs_chan(f->fs), f->in, &w);
				rc = rc < 0 ? rc : r2;
			} else if (rc == 0) {
				rc = read_done(fs_chan(f->fs), f->in);
			}
			a->rc = rc < 0 ? rc : (ssize_t)a->priv.len;
			done[got++] = a;
		}
		if ((unsigned)n < want)
			break;
	}
	return (int)got;
}

ssize_t lodefs_file_read(lodefs_file_t *f, void *buf, size_t len, uint64_t off)
{
	struct iovec v = {buf, len};

	if (len && !buf)
		return -EFAULT;
	return lodefs_file_readv(f, &v, 1, off);
}

ssize_t lodefs_file_write(lodefs_file_t *f, const void *buf, size_t len, uint64_t off,
			  uint64_t *end_out)
{
	struct iovec v = {(void *)buf, len};

	if (len && !buf)
		return -EFAULT;
	return lodefs_file_writev(f, &v, 1, off, end_out);
}

int lodefs_file_truncate(lodefs_file_t *f, uint64_t size)
{
	struct fs_chan *ch;
	struct fs_txn t;
	int rc;

	if (!f)
		return -EFAULT;
	if (!f->wr || f->isdir)
		return -EBADF;
	if (size > FS_SIZE_MAX)
		return -EFBIG;
	ch = fs_chan(f->fs);
	if ((rc = inode_begin(ch, f->in, TXN_STORE, &t)) < 0)
		return rc;
	rc = file_truncate_locked(ch, f->in, &t.r, size);
	t.r.size = size;
	fs_now(&t.r.mtime);
	t.r.ctime = t.r.mtime;
	if (f->uid != 0) {
		t.r.mode &= ~(mode_t)S_ISUID;
		if (t.r.mode & S_IXGRP)
			t.r.mode &= ~(mode_t)S_ISGID;
	}
	return inode_end(ch, f->in, &t, rc);
}
