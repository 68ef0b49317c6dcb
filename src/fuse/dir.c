/*
 * lode-fuse's open directories: readdir and readdirplus over a liblodefs
 * directory stream, in constant memory whatever the directory's size.
 *
 * Offsets. Entry i of the listing (0 is ".", 1 is "..", 2 + k is the
 * stream's k-th entry) carries offset i + 1, the offset at which a listing
 * resumes after it. A handle remembers the index of the next entry it will
 * emit; a request at that offset continues, one at any other offset
 * rewinds the stream and skips forward, so telldir()/seekdir() and
 * rewinddir() give what POSIX promises (as long as the directory does not
 * change in between). The stream is read a batch at a time; entries that
 * did not fit in one reply stay in the batch for the next.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fuse/lfuse.h"

#define DIR_BATCH 64 /* entries read from the stream at once */

struct lfuse_dir {
	pthread_mutex_t lock;        /* one request at a time per handle */
	lodefs_dir_t *d;
	uint64_t ino;                /* the directory's inode */
	uint64_t parent;             /* what ".." names (the directory itself for the root) */
	uint64_t next;               /* index of the next entry to emit */
	unsigned cur, n;             /* the batch's unsent entries: [cur, n) */
	bool has_st;                 /* the batch came with attributes */
	bool eof;                    /* the stream has no more entries */
	struct lodefs_dirent ents[DIR_BATCH];
	struct stat st[DIR_BATCH];
};

static struct lfuse_dir *dir_of(const struct fuse_file_info *fi)
{
	return (struct lfuse_dir *)(uintptr_t)fi->fh;
}

void lfuse_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct lfuse *lf = fuse_req_userdata(req);
	struct lfuse_cred cr;
	struct lfuse_dir *h;
	struct stat st;
	int rc;

	if (!(h = calloc(1, sizeof(*h)))) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	lfuse_cred_init(&cr, req);
	do
		rc = lodefs_dir_open(lf->fs, &cr.c, ino, &h->d);
	while (lfuse_cred_retry(&cr, rc));
	/* ".." for the listing; any failure leaves the directory's own number */
	h->ino = h->parent = ino;
	if (rc == 0 && ino != FUSE_ROOT_ID && lodefs_lookup(lf->fs, &cr.c, ino, "..", &st) == 0)
		h->parent = st.st_ino;
	lfuse_cred_done(&cr);
	if (rc < 0) {
		free(h);
		fuse_reply_err(req, lfuse_errno(rc));
		return;
	}
	pthread_mutex_init(&h->lock, NULL);
	fi->fh = (uintptr_t)h;
	fi->cache_readdir = lf->cache == LFUSE_CACHE_ALWAYS;
	fi->keep_cache = lf->cache == LFUSE_CACHE_ALWAYS;
	if (fuse_reply_open(req, fi) != 0) {
		lodefs_dir_close(h->d);
		pthread_mutex_destroy(&h->lock);
		free(h);
	}
}

/* Read the next batch from the stream; with plus, with attributes. */
static int dir_fill(struct lfuse_dir *h, bool plus)
{
	int rc = plus ? lodefs_dir_read_plus(h->d, h->ents, h->st, DIR_BATCH)
		      : lodefs_dir_read(h->d, h->ents, DIR_BATCH);

	h->cur = h->n = 0;
	if (rc < 0)
		return rc;
	h->n = (unsigned)rc;
	h->has_st = plus;
	h->eof = rc == 0;
	return 0;
}

/* Make the stream's next entry batch entry h->cur; false at the end. */
static int dir_peek(struct lfuse_dir *h, bool plus)
{
	int rc;

	if (h->cur < h->n)
		return 1;
	if (h->eof)
		return 0;
	if ((rc = dir_fill(h, plus)) < 0)
		return rc;
	return h->n > 0;
}

/* Position the handle so that the next entry emitted is index `to`. */
static int dir_seek(struct lfuse_dir *h, uint64_t to)
{
	int rc;

	if (to == h->next)
		return 0;
	if (to < h->next) {
		lodefs_dir_rewind(h->d);
		h->next = 0;
		h->cur = h->n = 0;
		h->eof = false;
	}
	while (h->next < to) {
		uint64_t skip;

		if (h->next < 2) {
			h->next++;
			continue;
		}
		if ((rc = dir_peek(h, false)) <= 0)
			return rc; /* past the end: the reply will be empty */
		skip = h->n - h->cur;
		if (skip > to - h->next)
			skip = to - h->next;
		h->cur += (unsigned)skip;
		h->next += skip;
	}
	return 0;
}

/*
 * Attributes for batch entry i of a readdirplus: from the batch when it was
 * read with them, else fetched now (the kernel switched from readdir to
 * readdirplus on this handle). False when there are none to give.
 */
static bool dir_entry_stat(struct lfuse *lf, struct lfuse_dir *h, unsigned i)
{
	if (h->has_st)
		return h->st[i].st_ino != 0;
	if (lodefs_getattr(lf->fs, h->ents[i].ino, &h->st[i]) < 0) {
		h->st[i].st_ino = 0;
		return false;
	}
	return true;
}

static void dir_list(fuse_req_t req, size_t size, off_t off, struct fuse_file_info *fi,
		     bool plus)
{
	struct lfuse *lf = fuse_req_userdata(req);
	struct lfuse_dir *h = dir_of(fi);
	size_t used = 0;
	char *buf;
	int rc;

	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (!(buf = malloc(size ? size : 1))) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pthread_mutex_lock(&h->lock);
	rc = dir_seek(h, (uint64_t)off);
	while (rc >= 0) {
		struct fuse_entry_param e;
		struct stat st;
		const char *name;
		size_t len;

		memset(&e, 0, sizeof(e));
		memset(&st, 0, sizeof(st));
		if (h->next < 2) {
			name = h->next == 0 ? "." : "..";
			st.st_ino = h->next == 0 ? h->ino : h->parent;
			st.st_mode = S_IFDIR;
			/* inode 0: the kernel makes no dentry for "." and ".." */
			e.attr = st;
		} else {
			const struct lodefs_dirent *de;

			if ((rc = dir_peek(h, plus)) <= 0)
				break;
			de = &h->ents[h->cur];
			name = de->name;
			st.st_ino = de->ino;
			st.st_mode = (mode_t)de->type << 12;
			if (plus && dir_entry_stat(lf, h, h->cur))
				lfuse_entry_fill(lf, &h->st[h->cur], &e);
			else
				e.attr = st;
		}
		if (plus)
			len = fuse_add_direntry_plus(req, buf + used, size - used, name, &e,
						     (off_t)(h->next + 1));
		else
			len = fuse_add_direntry(req, buf + used, size - used, name, &st,
						(off_t)(h->next + 1));
		if (len > size - used)
			break; /* full: this entry leads the next reply */
		used += len;
		if (h->next >= 2)
			h->cur++;
		h->next++;
	}
	pthread_mutex_unlock(&h->lock);
	/* an error after some entries: give those; the next call meets it again */
	if (rc < 0 && used == 0)
		fuse_reply_err(req, lfuse_errno(rc));
	else
		fuse_reply_buf(req, buf, used);
	free(buf);
}

void lfuse_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		   struct fuse_file_info *fi)
{
	dir_list(req, size, off, fi, false);
}

void lfuse_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	dir_list(req, size, off, fi, true);
}

void lfuse_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct lfuse_dir *h = dir_of(fi);

	lodefs_dir_close(h->d);
	pthread_mutex_destroy(&h->lock);
	free(h);
	fuse_reply_err(req, 0);
}
