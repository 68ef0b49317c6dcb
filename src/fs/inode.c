/*
 * Inodes: the attribute record on the server, the inode in memory with its
 * attribute transactions, permission checks and directory entries.
 *
 * The attribute record (dkey "i", akey "a") is FS_ATTR_LEN bytes,
 * little-endian: u16 version, u16 0, u32 mode, uid, gid, nlink, chunk
 * size, u64 size, rdev, parent (directories), generation, then atime,
 * mtime and ctime as i64 seconds and u32 nanoseconds each.
 *
 * A directory entry is dkey "/" + name, akey "e": u64 inode number and the
 * DT_* type byte. Names never hold '/', so entries never meet the inode's
 * own dkeys ("i", "x") nor a file's chunk dkeys (8 bytes, first byte 0).
 *
 * Transactions (inode_begin/inode_end) are how every attribute change of
 * this instance is made: fetch the record, merge what this instance has
 * pending (sizes written past the end, times of writes and reads), apply
 * the change, store. One runs at a time per inode, so two changes made
 * here never overwrite each other; changes made by other instances between
 * a transaction's fetch and its store can be (README: consistency).
 */
#include "fs/fs.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct lode_key attr_key = {"i", 1, "a", 1};

struct lode_oid fs_oid(uint64_t ino)
{
	return lode_oid_make(LODE_OT_FS, 0, 0, ino);
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static void put_ts(uint8_t *p, const struct timespec *ts)
{
	put_le(p, (uint64_t)ts->tv_sec, 8);
	put_le(p + 8, (uint64_t)ts->tv_nsec, 4);
}

static void get_ts(const uint8_t *p, struct timespec *ts)
{
	ts->tv_sec = (time_t)(int64_t)get_le(p, 8);
	ts->tv_nsec = (long)get_le(p + 8, 4);
}

void attr_encode(const struct fs_attr *a, uint8_t out[FS_ATTR_LEN])
{
	put_le(out, FS_ATTR_VERSION, 2);
	put_le(out + 2, 0, 2);
	put_le(out + 4, a->mode, 4);
	put_le(out + 8, a->uid, 4);
	put_le(out + 12, a->gid, 4);
	put_le(out + 16, a->nlink, 4);
	put_le(out + 20, a->chunk, 4);
	put_le(out + 24, a->size, 8);
	put_le(out + 32, a->rdev, 8);
	put_le(out + 40, a->parent, 8);
	put_le(out + 48, a->gen, 8);
	put_ts(out + 56, &a->atime);
	put_ts(out + 68, &a->mtime);
	put_ts(out + 80, &a->ctime);
}

int attr_decode(const uint8_t *in, uint32_t len, struct fs_attr *a)
{
	if (len < FS_ATTR_LEN || get_le(in, 2) != FS_ATTR_VERSION)
		return -EUCLEAN;
	a->mode = (uint32_t)get_le(in + 4, 4);
	a->uid = (uint32_t)get_le(in + 8, 4);
	a->gid = (uint32_t)get_le(in + 12, 4);
	a->nlink = (uint32_t)get_le(in + 16, 4);
	a->chunk = (uint32_t)get_le(in + 20, 4);
	a->size = get_le(in + 24, 8);
	a->rdev = get_le(in + 32, 8);
	a->parent = get_le(in + 40, 8);
	a->gen = get_le(in + 48, 8);
	get_ts(in + 56, &a->atime);
	get_ts(in + 68, &a->mtime);
	get_ts(in + 80, &a->ctime);
	if (a->atime.tv_nsec >= 1000000000L || a->mtime.tv_nsec >= 1000000000L ||
	    a->ctime.tv_nsec >= 1000000000L || a->size > FS_SIZE_MAX)
		return -EUCLEAN;
	if (S_ISREG(a->mode) && (a->chunk < FS_CHUNK_MIN || a->chunk > FS_CHUNK_MAX))
		return -EUCLEAN;
	return 0;
}

int attr_fetch(struct fs_chan *ch, uint64_t ino, struct fs_attr *a)
{
	uint8_t b[256];
	uint32_t len = 0;
	int rc = lode_obj_fetch(ch->cont, fs_oid(ino), LODE_EPOCH_MAX, &attr_key, b, sizeof(b),
				&len, NULL);

	if (rc == -EOVERFLOW)
		return -EUCLEAN;
	return rc < 0 ? rc : attr_decode(b, len, a);
}

int attr_store(struct fs_chan *ch, uint64_t ino, const struct fs_attr *a)
{
	uint8_t b[FS_ATTR_LEN];

	attr_encode(a, b);
	return lode_obj_update(ch->cont, fs_oid(ino), &attr_key, b, FS_ATTR_LEN, NULL);
}

void attr_to_stat(uint64_t ino, const struct fs_attr *a, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mode = a->mode;
	st->st_nlink = a->nlink;
	st->st_uid = a->uid;
	st->st_gid = a->gid;
	st->st_rdev = a->rdev;
	st->st_size = (off_t)a->size;
	st->st_blksize = S_ISREG(a->mode) ? (blksize_t)a->chunk : 4096;
	/* Allocation is not tracked: a sparse file counts as full. */
	st->st_blocks = (blkcnt_t)((a->size + 511) / 512);
	st->st_atim = a->atime;
	st->st_mtim = a->mtime;
	st->st_ctim = a->ctime;
}

/* ---- inodes in memory --------------------------------------------------------- */

static unsigned ino_bucket(uint64_t ino)
{
	return (unsigned)((ino * 0x9e3779b97f4a7c15ULL) >> 54) % FS_ICACHE_BUCKETS;
}

static struct fs_inode *inode_lookup(lodefs_t *fs, uint64_t ino, bool make)
{
	unsigned b = ino_bucket(ino);
	struct fs_inode *in;

	pthread_mutex_lock(&fs->imu);
	for (in = fs->ihash[b]; in && in->ino != ino; in = in->next)
		;
	if (!in && make && (in = calloc(1, sizeof(*in)))) {
		in->ino = ino;
		pthread_mutex_init(&in->mu, NULL);
		pthread_cond_init(&in->cv, NULL);
		in->next = fs->ihash[b];
		fs->ihash[b] = in;
	}
	if (in)
		in->refs++;
	pthread_mutex_unlock(&fs->imu);
	return in;
}

struct fs_inode *inode_get(lodefs_t *fs, uint64_t ino)
{
	return inode_lookup(fs, ino, true);
}

struct fs_inode *inode_find(lodefs_t *fs, uint64_t ino)
{
	return inode_lookup(fs, ino, false);
}

void inode_put(lodefs_t *fs, struct fs_inode *in)
{
	struct fs_inode **pp;

	if (!in)
		return;
	pthread_mutex_lock(&fs->imu);
	if (--in->refs > 0) {
		pthread_mutex_unlock(&fs->imu);
		return;
	}
	for (pp = &fs->ihash[ino_bucket(in->ino)]; *pp != in; pp = &(*pp)->next)
		;
	*pp = in->next;
	pthread_mutex_unlock(&fs->imu);
	pthread_mutex_destroy(&in->mu);
	pthread_cond_destroy(&in->cv);
	free(in);
}

int inode_begin(struct fs_chan *ch, struct fs_inode *in, int mode, struct fs_txn *t)
{
	int rc;

	pthread_mutex_lock(&in->mu);
	while (in->busy)
		pthread_cond_wait(&in->cv, &in->mu);
	in->busy = true;
	pthread_mutex_unlock(&in->mu);

	t->mode = mode;
	rc = attr_fetch(ch, in->ino, &t->r);

	pthread_mutex_lock(&in->mu);
	if (rc < 0) {
		in->busy = false;
		pthread_cond_broadcast(&in->cv);
		pthread_mutex_unlock(&in->mu);
		return rc;
	}
	t->seq = in->seq;
	t->dgen = in->dirty_gen;
	if (mode == TXN_STORE) {
		if (in->seq > in->done_seq && in->want_size > t->r.size)
			t->r.size = in->want_size;
		if (in->mtime_dirty) {
			t->r.mtime = in->a.mtime;
			t->r.ctime = in->a.ctime;
		}
		if (in->atime_dirty)
			t->r.atime = in->a.atime;
		if (in->kill_suid && S_ISREG(t->r.mode)) {
			t->r.mode &= ~(mode_t)S_ISUID;
			if (t->r.mode & S_IXGRP)
				t->r.mode &= ~(mode_t)S_ISGID;
		}
	}
	pthread_mutex_unlock(&in->mu);
	return 0;
}

int inode_end(struct fs_chan *ch, struct fs_inode *in, struct fs_txn *t, int rc)
{
	if (rc > 0) {
		/* Nothing to store or adopt: just let the next transaction run. */
		pthread_mutex_lock(&in->mu);
		in->busy = false;
		pthread_cond_broadcast(&in->cv);
		pthread_mutex_unlock(&in->mu);
		return 0;
	}
	if (rc == 0 && t->mode == TXN_STORE)
		rc = attr_store(ch, in->ino, &t->r);
	pthread_mutex_lock(&in->mu);
	if (rc == 0) {
		struct fs_attr old = in->a;
		bool had = in->valid;

		in->a = t->r;
		in->valid = true;
		if (t->mode == TXN_STORE) {
			if (in->dirty_gen == t->dgen)
				in->mtime_dirty = in->atime_dirty = in->kill_suid = false;
			if (t->seq > in->done_seq)
				in->done_seq = t->seq;
			if (in->done_seq == in->seq)
				in->want_size = 0;
		} else if (had) {
			/* A read keeps what this instance has not stored yet. */
			if (in->mtime_dirty) {
				in->a.mtime = old.mtime;
				in->a.ctime = old.ctime;
			}
			if (in->atime_dirty)
				in->a.atime = old.atime;
		}
		file_publish(in);
	}
	in->busy = false;
	pthread_cond_broadcast(&in->cv);
	pthread_mutex_unlock(&in->mu);
	return rc;
}

bool inode_dirty(struct fs_inode *in)
{
	bool d;

	pthread_mutex_lock(&in->mu);
	d = in->mtime_dirty || in->atime_dirty || in->kill_suid;
	pthread_mutex_unlock(&in->mu);
	return d;
}

int inode_sync(struct fs_chan *ch, struct fs_inode *in, bool force_read)
{
	int mode = inode_dirty(in) ? TXN_STORE : TXN_READ;
	struct fs_txn t;
	int rc;

	if (mode == TXN_READ && !force_read)
		return 0;
	if ((rc = inode_begin(ch, in, mode, &t)) < 0)
		return rc;
	return inode_end(ch, in, &t, 0);
}

/* ---- permissions ---------------------------------------------------------------- */

bool cred_in_group(const struct lodefs_cred *c, gid_t gid)
{
	if (c->gid == gid)
		return true;
	for (unsigned i = 0; i < c->ngroups; i++)
		if (c->groups[i] == gid)
			return true;
	return false;
}

int perm_check(const struct lodefs_cred *c, const struct fs_attr *a, int mask)
{
	unsigned bits;

	mask &= R_OK | W_OK | X_OK;
	if (c->uid == 0) {
		/* root executes only what someone may execute; directories it always searches. */
		if ((mask & X_OK) && !S_ISDIR(a->mode) && !(a->mode & 0111))
			return -EACCES;
		return 0;
	}
	if (c->uid == a->uid)
		bits = (a->mode >> 6) & 7;
	else if (cred_in_group(c, a->gid))
		bits = (a->mode >> 3) & 7;
	else
		bits = a->mode & 7;
	return ((unsigned)mask & bits) == (unsigned)mask ? 0 : -EACCES;
}

int sticky_check(const struct lodefs_cred *c, const struct fs_attr *dir,
		 const struct fs_attr *victim)
{
	if (!(dir->mode & S_ISVTX) || c->uid == 0 || c->uid == dir->uid || c->uid == victim->uid)
		return 0;
	return -EPERM;
}

int name_check(const char *name, bool create)
{
	size_t n;

	if (!name)
		return -EFAULT;
	n = strlen(name);
	if (n > LODEFS_NAME_MAX)
		return -ENAMETOOLONG;
	if (strchr(name, '/'))
		return -EINVAL;
	if (n == 0)
		return create ? -EINVAL : -ENOENT;
	if (create && (strcmp(name, ".") == 0 || strcmp(name, "..") == 0))
		return -EINVAL;
	return 0;
}

/* ---- directory entries ------------------------------------------------------------ */

int entry_key(const char *name, uint8_t *buf, struct lode_key *k)
{
	size_t n = strlen(name);

	if (n == 0 || n > LODEFS_NAME_MAX)
		return n ? -ENAMETOOLONG : -ENOENT;
	buf[0] = '/';
	memcpy(buf + 1, name, n);
	*k = (struct lode_key){buf, (uint32_t)n + 1, "e", 1};
	return 0;
}

void entry_decode(const uint8_t *v, struct fs_entry *e)
{
	e->ino = get_le(v, 8);
	e->type = v[8];
}

int entry_get(struct fs_chan *ch, uint64_t dir, const char *name, struct fs_entry *e)
{
	uint8_t kb[LODEFS_NAME_MAX + 1], v[64];
	struct lode_key k;
	uint32_t len = 0;
	int rc;

	if ((rc = entry_key(name, kb, &k)) < 0)
		return rc;
	rc = lode_obj_fetch(ch->cont, fs_oid(dir), LODE_EPOCH_MAX, &k, v, sizeof(v), &len, NULL);
	if (rc == 0 && len < FS_ENTRY_LEN)
		rc = -EUCLEAN;
	if (rc == -EOVERFLOW)
		rc = -EUCLEAN;
	if (rc == 0)
		entry_decode(v, e);
	return rc;
}

int entry_put(struct fs_chan *ch, uint64_t dir, const char *name, const struct fs_entry *e)
{
	uint8_t kb[LODEFS_NAME_MAX + 1], v[FS_ENTRY_LEN];
	struct lode_key k;
	int rc;

	if ((rc = entry_key(name, kb, &k)) < 0)
		return rc;
	put_le(v, e->ino, 8);
	v[8] = e->type;
	return lode_obj_update(ch->cont, fs_oid(dir), &k, v, FS_ENTRY_LEN, NULL);
}

int entry_del(struct fs_chan *ch, uint64_t dir, const char *name)
{
	uint8_t kb[LODEFS_NAME_MAX + 1];
	struct lode_key k;
	int rc;

	if ((rc = entry_key(name, kb, &k)) < 0)
		return rc;
	return lode_dkey_punch(ch->cont, fs_oid(dir), &k, NULL);
}

int attr_fetch_ev(struct fs_chan *ch, lode_eq_t *eq, uint64_t ino, struct fs_areq *r)
{
	memset(&r->ev, 0, sizeof(r->ev));
	lode_event_init(&r->ev, eq);
	return lode_obj_fetch(ch->cont, fs_oid(ino), LODE_EPOCH_MAX, &attr_key, r->val,
			      sizeof(r->val), &r->len, &r->ev);
}

int attr_fetch_done(struct fs_areq *r, struct fs_attr *a)
{
	if (r->ev.rc == -EOVERFLOW)
		return -EUCLEAN;
	return r->ev.rc < 0 ? r->ev.rc : attr_decode(r->val, r->len, a);
}

int entry_get_ev(struct fs_chan *ch, lode_eq_t *eq, uint64_t dir, const char *name,
		 struct fs_areq *r)
{
	struct lode_key k;
	int rc;

	if ((rc = entry_key(name, r->key, &k)) < 0)
		return rc;
	memset(&r->ev, 0, sizeof(r->ev));
	lode_event_init(&r->ev, eq);
	return lode_obj_fetch(ch->cont, fs_oid(dir), LODE_EPOCH_MAX, &k, r->val, sizeof(r->val),
			      &r->len, &r->ev);
}

int entry_get_done(struct fs_areq *r, struct fs_entry *e)
{
	if (r->ev.rc < 0)
		return r->ev.rc == -EOVERFLOW ? -EUCLEAN : r->ev.rc;
	if (r->len < FS_ENTRY_LEN)
		return -EUCLEAN;
	entry_decode(r->val, e);
	return 0;
}

int entry_put_ev(struct fs_chan *ch, lode_eq_t *eq, uint64_t dir, const char *name,
		 const struct fs_entry *e, struct fs_areq *r)
{
	struct lode_key k;
	int rc;

	if ((rc = entry_key(name, r->key, &k)) < 0)
		return rc;
	put_le(r->val, e->ino, 8);
	r->val[8] = e->type;
	memset(&r->ev, 0, sizeof(r->ev));
	lode_event_init(&r->ev, eq);
	return lode_obj_update(ch->cont, fs_oid(dir), &k, r->val, FS_ENTRY_LEN, &r->ev);
}

/* 0 when the directory has no entry, -ENOTEMPTY when it has one. */
int dir_empty(struct fs_chan *ch, uint64_t ino)
{
	struct lode_anchor an;
	uint8_t buf[4096];

	memset(&an, 0, sizeof(an));
	while (!an.eof) {
		int n = lode_dkey_list(ch->cont, fs_oid(ino), LODE_EPOCH_MAX, &an, buf, sizeof(buf));
		size_t o = 0;

		if (n < 0)
			return n;
		for (int i = 0; i < n; i++) {
			size_t kl = (size_t)buf[o] | (size_t)buf[o + 1] << 8;

			if (kl > 0 && buf[o + 2] == '/')
				return -ENOTEMPTY;
			o += 2 + kl;
		}
	}
	return 0;
}

int obj_remove(struct fs_chan *ch, uint64_t ino)
{
	return lode_obj_punch(ch->cont, fs_oid(ino), NULL);
}
