/*
 * The namespace by inode number: lookup, attributes, creation, links,
 * removal and rename.
 *
 * Every namespace change runs under the instance's ns_rw (read-locked;
 * rename write-locks it, so a rename sees no other change of this instance
 * while it checks ancestry) and inside an attribute transaction of the
 * parent directory, which serialises changes of one directory here and
 * makes the parent's nlink, mtime and ctime update part of the change.
 * Transactions are taken parent before child, never the other way.
 *
 * Write order decides what a crash of the caller can leave (README): an
 * inode is written before the entry that names it, a link count is raised
 * before and lowered after the entry changes, so a crash leaves at worst an
 * unreachable inode or a count too high, never an entry naming nothing.
 */
#include "fs/fs.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct lode_key link_key = {"i", 1, "l", 1};

static bool is_dot(const char *name)
{
	return strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
}

int ns_lookup(lodefs_t *fs, struct fs_chan *ch, const struct lodefs_cred *c, uint64_t parent,
	      const char *name, uint64_t *ino, struct fs_attr *a)
{
	struct fs_areq rp, re;
	struct fs_attr pa;
	struct fs_entry e;
	unsigned n = 0;
	lode_eq_t *eq;
	bool dots;
	int rc, rc2;

	if ((rc = name_check(name, false)) < 0)
		return rc;
	dots = is_dot(name);
	if (!(eq = fs_eq_get(ch)))
		return -ENOMEM;
	/* The parent's record and the entry together: one round trip. */
	if ((rc = attr_fetch_ev(ch, eq, parent, &rp)) == 0)
		n++;
	if (!dots && rc == 0 && (rc = entry_get_ev(ch, eq, parent, name, &re)) == 0)
		n++;
	rc2 = fs_eq_wait(eq, n, 0);
	fs_eq_put(ch, eq);
	(void)rc2;
	if (rc < 0)
		return rc;
	if ((rc = attr_fetch_done(&rp, &pa)) < 0)
		return rc;
	if (!S_ISDIR(pa.mode))
		return -ENOTDIR;
	if ((rc = perm_check(c, &pa, X_OK)) < 0)
		return rc;
	if (strcmp(name, ".") == 0) {
		*ino = parent;
		*a = pa;
		return 0;
	}
	if (strcmp(name, "..") == 0) {
		*ino = parent == LODEFS_ROOT_INO ? LODEFS_ROOT_INO : pa.parent;
		return attr_fetch(ch, *ino, a);
	}
	if ((rc = entry_get_done(&re, &e)) < 0)
		return rc;
	*ino = e.ino;
	/* An entry whose inode is gone (a crash, a race with another instance) is no entry. */
	return attr_fetch(ch, e.ino, a);
}

int lodefs_lookup(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t parent,
		  const char *name, struct stat *st)
{
	struct fs_attr a;
	uint64_t ino;
	int rc;

	if (!fs || !st)
		return -EFAULT;
	rc = ns_lookup(fs, fs_chan(fs), fs_cred(fs, cred), parent, name, &ino, &a);
	if (rc == 0)
		attr_to_stat(ino, &a, st);
	return rc;
}

int lodefs_getattr(lodefs_t *fs, uint64_t ino, struct stat *st)
{
	struct fs_chan *ch;
	struct fs_inode *in;
	struct fs_attr a;
	int rc;

	if (!fs || !st)
		return -EFAULT;
	ch = fs_chan(fs);
	if ((in = inode_find(fs, ino))) {
		/* An open inode: make this instance's pending times visible first. */
		rc = inode_sync(ch, in, false);
		inode_put(fs, in);
		if (rc < 0)
			return rc;
	}
	if ((rc = attr_fetch(ch, ino, &a)) < 0)
		return rc;
	attr_to_stat(ino, &a, st);
	return 0;
}

int lodefs_access(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t ino, int mask)
{
	struct fs_attr a;
	int rc;

	if (!fs)
		return -EFAULT;
	if (mask & ~(R_OK | W_OK | X_OK))
		return -EINVAL;
	if ((rc = attr_fetch(fs_chan(fs), ino, &a)) < 0)
		return rc;
	return mask == F_OK ? 0 : perm_check(fs_cred(fs, cred), &a, mask);
}

/* ---- setattr -------------------------------------------------------------------- */

#define SET_ALL                                                                              \
	(LODEFS_SET_MODE | LODEFS_SET_UID | LODEFS_SET_GID | LODEFS_SET_SIZE | LODEFS_SET_ATIME | \
	 LODEFS_SET_MTIME | LODEFS_SET_ATIME_NOW | LODEFS_SET_MTIME_NOW | LODEFS_SET_CTIME)

/* chown(2), chmod(2), truncate(2) and utimensat(2)'s permission rules, in Linux's order. */
static int setattr_check(const struct lodefs_cred *c, const struct fs_attr *r,
			 const struct stat *in, unsigned set)
{
	bool owner = c->uid == 0 || c->uid == r->uid;
	int rc;

	if ((set & LODEFS_SET_UID) && c->uid != 0 &&
	    !(c->uid == r->uid && in->st_uid == r->uid))
		return -EPERM;
	if ((set & LODEFS_SET_GID) && c->uid != 0 &&
	    !(c->uid == r->uid && (cred_in_group(c, in->st_gid) || in->st_gid == r->gid)))
		return -EPERM;
	if ((set & LODEFS_SET_MODE) && !owner)
		return -EPERM;
	if (set & LODEFS_SET_SIZE) {
		if (S_ISDIR(r->mode))
			return -EISDIR;
		if (!S_ISREG(r->mode) || in->st_size < 0)
			return -EINVAL;
		if ((rc = perm_check(c, r, W_OK)) < 0)
			return rc;
	}
	if ((set & (LODEFS_SET_ATIME | LODEFS_SET_MTIME | LODEFS_SET_CTIME)) && !owner)
		return -EPERM;
	if ((set & (LODEFS_SET_ATIME_NOW | LODEFS_SET_MTIME_NOW)) && !owner &&
	    perm_check(c, r, W_OK) < 0)
		return -EACCES;
	return 0;
}

static bool ts_valid(const struct timespec *ts)
{
	return ts->tv_nsec >= 0 && ts->tv_nsec < 1000000000L;
}

int lodefs_setattr(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t ino,
		   const struct stat *inst, unsigned set, struct stat *out)
{
	const struct lodefs_cred *c;
	struct fs_chan *ch;
	struct fs_inode *in;
	struct fs_txn t;
	struct fs_attr *r = &t.r;
	struct timespec now;
	int rc;

	if (!fs || (!inst && set))
		return -EFAULT;
	if (set & ~(unsigned)SET_ALL)
		return -EINVAL;
	if (((set & LODEFS_SET_ATIME) && !ts_valid(&inst->st_atim)) ||
	    ((set & LODEFS_SET_MTIME) && !ts_valid(&inst->st_mtim)) ||
	    ((set & LODEFS_SET_CTIME) && !ts_valid(&inst->st_ctim)))
		return -EINVAL;
	if ((set & LODEFS_SET_SIZE) && inst->st_size >= 0 && (uint64_t)inst->st_size > FS_SIZE_MAX)
		return -EFBIG;
	c = fs_cred(fs, cred);
	ch = fs_chan(fs);
	if (!(in = inode_get(fs, ino)))
		return -ENOMEM;
	if ((rc = inode_begin(ch, in, TXN_STORE, &t)) < 0)
		goto out;
	if ((rc = setattr_check(c, r, inst, set)) < 0) {
		inode_end(ch, in, &t, rc);
		goto out;
	}
	fs_now(&now);
	if (set & LODEFS_SET_SIZE) {
		uint64_t size = (uint64_t)inst->st_size;

		if (size < r->size && (rc = file_truncate_locked(ch, in, r, size)) < 0) {
			inode_end(ch, in, &t, rc);
			goto out;
		}
		if (size != r->size) {
			r->size = size;
			r->mtime = now;
		}
		if (c->uid != 0 && (r->mode & (S_ISUID | S_ISGID))) {
			r->mode &= ~(mode_t)S_ISUID;
			if (r->mode & S_IXGRP)
				r->mode &= ~(mode_t)S_ISGID;
		}
	}
	if (set & LODEFS_SET_UID)
		r->uid = inst->st_uid;
	if (set & LODEFS_SET_GID)
		r->gid = inst->st_gid;
	if ((set & (LODEFS_SET_UID | LODEFS_SET_GID)) && !(set & LODEFS_SET_MODE) &&
	    !S_ISDIR(r->mode)) {
		/* As Linux: a chown of a non-directory drops setuid, and setgid with group exec. */
		r->mode &= ~(mode_t)S_ISUID;
		if (r->mode & S_IXGRP)
			r->mode &= ~(mode_t)S_ISGID;
	}
	if (set & LODEFS_SET_MODE) {
		mode_t m = inst->st_mode & 07777;

		if (c->uid != 0 && !cred_in_group(c, r->gid))
			m &= ~(mode_t)S_ISGID;
		r->mode = (r->mode & S_IFMT) | m;
	}
	if (set & LODEFS_SET_ATIME)
		r->atime = inst->st_atim;
	if (set & LODEFS_SET_MTIME)
		r->mtime = inst->st_mtim;
	if (set & LODEFS_SET_ATIME_NOW)
		r->atime = now;
	if (set & LODEFS_SET_MTIME_NOW)
		r->mtime = now;
	r->ctime = (set & LODEFS_SET_CTIME) ? inst->st_ctim : now;
	/* Times set here replace what this instance had pending. */
	if (set & (LODEFS_SET_MTIME | LODEFS_SET_ATIME | LODEFS_SET_MTIME_NOW |
		   LODEFS_SET_ATIME_NOW)) {
		pthread_mutex_lock(&in->mu);
		in->dirty_gen++;
		if (set & (LODEFS_SET_MTIME | LODEFS_SET_MTIME_NOW))
			in->mtime_dirty = false;
		if (set & (LODEFS_SET_ATIME | LODEFS_SET_ATIME_NOW))
			in->atime_dirty = false;
		pthread_mutex_unlock(&in->mu);
	}
	if ((rc = inode_end(ch, in, &t, 0)) == 0 && out)
		attr_to_stat(ino, r, out);
out:
	inode_put(fs, in);
	return rc;
}

/* ---- creation ------------------------------------------------------------------- */

static int mode_check(const struct lodefs_cred *c, mode_t mode)
{
	switch (mode & S_IFMT) {
	case 0:
	case S_IFREG:
	case S_IFIFO:
	case S_IFSOCK:
	case S_IFDIR:
	case S_IFLNK:
		return 0;
	case S_IFCHR:
	case S_IFBLK:
		return c->uid == 0 ? 0 : -EPERM;
	default:
		return -EINVAL;
	}
}

/*
 * The entry name in parent (rc 0 and *e, or -ENOENT) and, in the same round
 * trip, a fresh inode number: random, and checked to be unused (a
 * collision, about n / 2^63 likely with n inodes, costs one more try).
 */
static int entry_probe(struct fs_chan *ch, uint64_t parent, const char *name,
		       struct fs_entry *e, uint64_t *ino)
{
	struct fs_areq re, ra;
	lode_eq_t *eq = fs_eq_get(ch);
	int rc = 0;

	if (!eq)
		return -ENOMEM;
	for (int tries = 0; tries < 16; tries++) {
		unsigned n = 0;
		int rc2;

		*ino = fs_ino_new();
		if (tries == 0 && (rc = entry_get_ev(ch, eq, parent, name, &re)) == 0)
			n++;
		if (rc == 0 && (rc2 = attr_fetch_ev(ch, eq, *ino, &ra)) == 0)
			n++;
		else if (rc == 0)
			rc = rc2;
		fs_eq_wait(eq, n, 0);
		if (rc < 0)
			break;
		if (tries == 0 && (rc = entry_get_done(&re, e)) != -ENOENT)
			break; /* it exists (0), or an error */
		if (ra.ev.rc == -ENOENT) {
			rc = -ENOENT;
			break;
		}
		rc = ra.ev.rc < 0 ? ra.ev.rc : -EIO;
		if (ra.ev.rc < 0)
			break;
	}
	fs_eq_put(ch, eq);
	return rc;
}

/*
 * Make name in parent: a directory (mode S_IFDIR), a symlink (target set),
 * or anything else mknod makes. If the name exists: -EEXIST when excl, else
 * *ino_out names it and *created is false.
 */
int ns_make(lodefs_t *fs, const struct lodefs_cred *c, uint64_t parent, const char *name,
	    mode_t mode, dev_t rdev, const char *target, bool excl, struct stat *st,
	    uint64_t *ino_out, bool *created)
{
	struct fs_chan *ch;
	struct fs_inode *pin;
	struct fs_txn t;
	struct fs_attr *pa = &t.r, a;
	struct fs_entry e;
	struct timespec now;
	size_t tlen = target ? strlen(target) : 0;
	uint64_t ino = 0;
	int rc;

	if ((rc = name_check(name, true)) < 0)
		return rc;
	if (target && tlen == 0)
		return -ENOENT;
	if (target && tlen >= LODEFS_PATH_MAX)
		return -ENAMETOOLONG;
	ch = fs_chan(fs);
	pthread_rwlock_rdlock(&fs->ns_rw);
	if (!(pin = inode_get(fs, parent))) {
		rc = -ENOMEM;
		goto unlock;
	}
	if ((rc = inode_begin(ch, pin, TXN_STORE, &t)) < 0)
		goto put;
	if (!S_ISDIR(pa->mode))
		rc = -ENOTDIR;
	else if ((rc = perm_check(c, pa, X_OK)) < 0)
		;
	else if ((rc = entry_probe(ch, parent, name, &e, &ino)) == 0) {
		rc = -EEXIST;
		if (!excl) {
			*ino_out = e.ino;
			*created = false;
			rc = 0;
		}
		inode_end(ch, pin, &t, rc < 0 ? rc : -EEXIST);
		goto put;
	} else if (rc == -ENOENT)
		rc = perm_check(c, pa, W_OK | X_OK);
	if (rc == 0 && S_ISDIR(mode) && pa->nlink >= FS_LINK_MAX)
		rc = -EMLINK;
	if (rc < 0) {
		inode_end(ch, pin, &t, rc);
		goto put;
	}
	fs_now(&now);
	a = (struct fs_attr){
		.mode = (mode & S_IFMT ? mode & S_IFMT : S_IFREG) | (mode & 07777),
		.uid = c->uid,
		.gid = (pa->mode & S_ISGID) ? pa->gid : c->gid,
		.nlink = 1,
		.chunk = fs->chunk,
		.rdev = (S_ISCHR(mode) || S_ISBLK(mode)) ? rdev : 0,
		.gen = fs_ino_new(),
		.atime = now,
		.mtime = now,
		.ctime = now,
	};
	if (S_ISDIR(mode)) {
		a.nlink = 2;
		a.parent = parent;
		if (pa->mode & S_ISGID)
			a.mode |= S_ISGID;
	} else if (target) {
		a.mode = S_IFLNK | 0777;
		a.size = tlen;
	} else if ((a.mode & S_ISGID) && c->uid != 0 && !cred_in_group(c, a.gid)) {
		a.mode &= ~(mode_t)S_ISGID;
	}
	if (target)
		rc = lode_obj_update(ch->cont, fs_oid(ino), &link_key, target, (uint32_t)tlen, NULL);
	if (rc == 0)
		rc = attr_store(ch, ino, &a);
	if (rc < 0) {
		inode_end(ch, pin, &t, rc);
		goto put;
	}
	/* The inode exists: now its entry, and the parent's times and count with it. */
	e = (struct fs_entry){ino, (uint8_t)IFTODT(a.mode)};
	pa->mtime = pa->ctime = now;
	if (S_ISDIR(a.mode))
		pa->nlink++;
	{
		struct fs_areq rq;
		lode_eq_t *eq = fs_eq_get(ch);
		bool sent = eq && entry_put_ev(ch, eq, parent, name, &e, &rq) == 0;
		int erc = 0, rc2;

		if (!sent)
			erc = entry_put(ch, parent, name, &e);
		rc2 = inode_end(ch, pin, &t, erc);
		if (sent) {
			fs_eq_wait(eq, 1, 0);
			erc = rq.ev.rc;
		}
		if (eq)
			fs_eq_put(ch, eq);
		/* No entry: the inode is unreachable (the parent may keep a count too high). */
		if (erc < 0)
			obj_remove(ch, ino);
		rc = erc < 0 ? erc : rc2;
	}
	if (rc == 0) {
		*ino_out = ino;
		*created = true;
		if (st)
			attr_to_stat(ino, &a, st);
	}
put:
	inode_put(fs, pin);
unlock:
	pthread_rwlock_unlock(&fs->ns_rw);
	return rc;
}

static int make_one(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t parent,
		    const char *name, mode_t mode, dev_t rdev, const char *target, struct stat *st)
{
	uint64_t ino;
	bool created;

	if (!fs)
		return -EFAULT;
	return ns_make(fs, fs_cred(fs, cred), parent, name, mode, rdev, target, true, st, &ino,
		       &created);
}

int lodefs_mknod(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t parent,
		 const char *name, mode_t mode, dev_t rdev, struct stat *st)
{
	int rc;

	if (!fs)
		return -EFAULT;
	if (S_ISDIR(mode))
		return -EPERM;
	if (S_ISLNK(mode))
		return -EINVAL;
	if ((rc = mode_check(fs_cred(fs, cred), mode)) < 0)
		return rc;
	return make_one(fs, cred, parent, name, mode, rdev, NULL, st);
}

int lodefs_mkdir(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t parent,
		 const char *name, mode_t mode, struct stat *st)
{
	return make_one(fs, cred, parent, name, S_IFDIR | (mode & 07777), 0, NULL, st);
}

int lodefs_symlink(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t parent,
		   const char *name, const char *target, struct stat *st)
{
	if (!target)
		return -EFAULT;
	return make_one(fs, cred, parent, name, S_IFLNK | 0777, 0, target, st);
}

int lodefs_readlink(lodefs_t *fs, uint64_t ino, char *buf, size_t cap)
{
	char t[LODEFS_PATH_MAX];
	struct fs_chan *ch;
	struct fs_attr a;
	uint32_t len = 0;
	int rc;

	if (!fs || (!buf && cap))
		return -EFAULT;
	ch = fs_chan(fs);
	if ((rc = attr_fetch(ch, ino, &a)) < 0)
		return rc;
	if (!S_ISLNK(a.mode))
		return -EINVAL;
	if (cap == 0)
		return -EINVAL;
	rc = lode_obj_fetch(ch->cont, fs_oid(ino), LODE_EPOCH_MAX, &link_key, t, sizeof(t), &len,
			    NULL);
	if (rc == -EOVERFLOW)
		return -EUCLEAN;
	if (rc < 0)
		return rc;
	if (len > cap)
		len = (uint32_t)cap;
	memcpy(buf, t, len);
	return (int)len;
}

/* ---- links -------------------------------------------------------------------- */

int lodefs_link(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t ino, uint64_t newparent,
		const char *newname, struct stat *st)
{
	const struct lodefs_cred *c;
	struct fs_chan *ch;
	struct fs_inode *pin, *cin = NULL;
	struct fs_txn t, ct;
	struct fs_entry e;
	struct timespec now;
	int rc;

	if (!fs)
		return -EFAULT;
	if (newname && is_dot(newname))
		return -EEXIST;
	if ((rc = name_check(newname, true)) < 0)
		return rc;
	fs_now(&now);
	c = fs_cred(fs, cred);
	ch = fs_chan(fs);
	pthread_rwlock_rdlock(&fs->ns_rw);
	if (!(pin = inode_get(fs, newparent))) {
		rc = -ENOMEM;
		goto unlock;
	}
	if ((rc = inode_begin(ch, pin, TXN_STORE, &t)) < 0)
		goto put;
	if (!S_ISDIR(t.r.mode))
		rc = -ENOTDIR;
	else if ((rc = perm_check(c, &t.r, X_OK)) < 0)
		;
	else if ((rc = entry_get(ch, newparent, newname, &e)) == 0)
		rc = -EEXIST;
	else if (rc == -ENOENT)
		rc = perm_check(c, &t.r, W_OK | X_OK);
	if (rc == 0 && ino == newparent)
		rc = -EPERM; /* a directory, and already locked */
	if (rc == 0 && !(cin = inode_get(fs, ino)))
		rc = -ENOMEM;
	if (rc == 0 && (rc = inode_begin(ch, cin, TXN_STORE, &ct)) == 0) {
		if (S_ISDIR(ct.r.mode))
			rc = -EPERM;
		else if (ct.r.nlink == 0)
			rc = -ENOENT;
		else if (ct.r.nlink >= FS_LINK_MAX)
			rc = -EMLINK;
		fs_now(&now);
		ct.r.nlink++;
		ct.r.ctime = now;
		/* The count goes up before the new entry exists. */
		if ((rc = inode_end(ch, cin, &ct, rc)) == 0) {
			e = (struct fs_entry){ino, (uint8_t)IFTODT(ct.r.mode)};
			rc = entry_put(ch, newparent, newname, &e);
			if (rc == 0 && st)
				attr_to_stat(ino, &ct.r, st);
		}
	}
	if (rc == 0)
		t.r.mtime = t.r.ctime = now;
	inode_end(ch, pin, &t, rc == 0 ? 0 : -1);
	inode_put(fs, cin);
put:
	inode_put(fs, pin);
unlock:
	pthread_rwlock_unlock(&fs->ns_rw);
	return rc;
}

/*
 * Drop one link of the inode whose transaction t is open (its entry is
 * already gone) and end t. At zero the object goes, unless a file of this
 * instance has it open: then the last close removes it.
 */
static int link_drop_txn(struct fs_chan *ch, struct fs_inode *in, struct fs_txn *t)
{
	bool remove = false;
	int rc;

	if (t->r.nlink > 0)
		t->r.nlink--;
	if (S_ISDIR(t->r.mode))
		t->r.nlink = 0;
	fs_now(&t->r.ctime);
	if (t->r.nlink == 0) {
		pthread_mutex_lock(&in->mu);
		if (in->file_opens)
			in->orphan = true;
		else
			remove = true;
		pthread_mutex_unlock(&in->mu);
	}
	rc = inode_end(ch, in, t, remove ? 1 : 0);
	if (remove)
		rc = obj_remove(ch, in->ino);
	return rc;
}

static int link_drop(lodefs_t *fs, struct fs_chan *ch, uint64_t ino)
{
	struct fs_inode *in = inode_get(fs, ino);
	struct fs_txn t;
	int rc;

	if (!in)
		return -ENOMEM;
	if ((rc = inode_begin(ch, in, TXN_STORE, &t)) == 0)
		rc = link_drop_txn(ch, in, &t);
	inode_put(fs, in);
	return rc == -ENOENT ? 0 : rc;
}

/* unlink and rmdir. */
static int ns_remove(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t parent,
		     const char *name, bool dir)
{
	const struct lodefs_cred *c;
	struct fs_chan *ch;
	struct fs_inode *pin, *cin = NULL;
	struct fs_txn t, ct;
	struct fs_entry e;
	int rc;

	if (!fs)
		return -EFAULT;
	if ((rc = name_check(name, false)) < 0)
		return rc;
	if (strcmp(name, ".") == 0)
		return dir ? -EINVAL : -EISDIR;
	if (strcmp(name, "..") == 0)
		return dir ? -ENOTEMPTY : -EISDIR;
	c = fs_cred(fs, cred);
	ch = fs_chan(fs);
	pthread_rwlock_rdlock(&fs->ns_rw);
	if (!(pin = inode_get(fs, parent))) {
		rc = -ENOMEM;
		goto unlock;
	}
	if ((rc = inode_begin(ch, pin, TXN_STORE, &t)) < 0)
		goto put;
	if (!S_ISDIR(t.r.mode))
		rc = -ENOTDIR;
	else if ((rc = perm_check(c, &t.r, X_OK)) < 0)
		;
	else if ((rc = entry_get(ch, parent, name, &e)) < 0)
		;
	else if ((rc = perm_check(c, &t.r, W_OK | X_OK)) < 0)
		;
	else if (!(cin = inode_get(fs, e.ino)))
		rc = -ENOMEM;
	else if ((rc = inode_begin(ch, cin, TXN_STORE, &ct)) == -ENOENT) {
		/* An entry left by a crash: removing it is all there is to do. */
		rc = entry_del(ch, parent, name);
		goto done;
	}
	if (rc < 0)
		goto fail;
	if (dir && !S_ISDIR(ct.r.mode))
		rc = -ENOTDIR;
	else if (!dir && S_ISDIR(ct.r.mode))
		rc = -EISDIR;
	else if ((rc = sticky_check(c, &t.r, &ct.r)) < 0)
		;
	else if (dir && e.ino == LODEFS_ROOT_INO)
		rc = -EBUSY;
	else if (dir)
		rc = dir_empty(ch, e.ino);
	if (rc == 0)
		rc = entry_del(ch, parent, name);
	if (rc < 0) {
		inode_end(ch, cin, &ct, rc);
		goto fail;
	}
	rc = link_drop_txn(ch, cin, &ct);
	if (dir && t.r.nlink > 2)
		t.r.nlink--;
done:
	fs_now(&t.r.mtime);
	t.r.ctime = t.r.mtime;
	{
		int r2 = inode_end(ch, pin, &t, 0);

		if (rc == 0)
			rc = r2;
	}
	goto put;
fail:
	inode_end(ch, pin, &t, rc);
put:
	inode_put(fs, cin);
	inode_put(fs, pin);
unlock:
	pthread_rwlock_unlock(&fs->ns_rw);
	return rc;
}

int lodefs_unlink(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t parent,
		  const char *name)
{
	return ns_remove(fs, cred, parent, name, false);
}

int lodefs_rmdir(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t parent,
		 const char *name)
{
	return ns_remove(fs, cred, parent, name, true);
}

/* ---- rename ------------------------------------------------------------------- */

/* -EINVAL if dir is ino or lies under it (walking parent pointers up to the root). */
static int ancestry_check(struct fs_chan *ch, uint64_t ino, uint64_t dir)
{
	for (unsigned depth = 0; depth < 4096; depth++) {
		struct fs_attr a;
		int rc;

		if (dir == ino)
			return -EINVAL;
		if (dir == LODEFS_ROOT_INO)
			return 0;
		if ((rc = attr_fetch(ch, dir, &a)) < 0)
			return rc;
		dir = a.parent;
	}
	return -ELOOP;
}

/* Point a moved directory at its new parent; bump an inode's ctime. */
static int moved_update(lodefs_t *fs, struct fs_chan *ch, uint64_t ino, uint64_t newparent)
{
	struct fs_inode *in = inode_get(fs, ino);
	struct fs_txn t;
	int rc;

	if (!in)
		return -ENOMEM;
	if ((rc = inode_begin(ch, in, TXN_STORE, &t)) == 0) {
		if (S_ISDIR(t.r.mode) && newparent)
			t.r.parent = newparent;
		fs_now(&t.r.ctime);
		rc = inode_end(ch, in, &t, 0);
	}
	inode_put(fs, in);
	return rc == -ENOENT ? 0 : rc;
}

static int rename_name_check(const char *name)
{
	int rc = name_check(name, false);

	if (rc < 0)
		return rc;
	return is_dot(name) ? -EBUSY : 0;
}

int lodefs_rename(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t parent,
		  const char *name, uint64_t newparent, const char *newname, unsigned flags)
{
	const struct lodefs_cred *c;
	struct fs_chan *ch;
	struct fs_inode *pin = NULL, *npin = NULL;
	struct fs_txn pt, nt, *np = &pt;
	struct fs_entry se, de;
	struct fs_attr sa, da;
	struct timespec now;
	bool exchange = flags & LODEFS_RENAME_EXCHANGE, has_dst, sdir, ddir = false;
	bool moving;
	int rc;

	if (!fs)
		return -EFAULT;
	if ((flags & ~(LODEFS_RENAME_NOREPLACE | LODEFS_RENAME_EXCHANGE)) ||
	    (flags == (LODEFS_RENAME_NOREPLACE | LODEFS_RENAME_EXCHANGE)))
		return -EINVAL;
	if ((rc = rename_name_check(name)) < 0)
		return rc;
	if ((rc = rename_name_check(newname)) < 0)
		return rc == -EBUSY && (flags & LODEFS_RENAME_NOREPLACE) ? -EEXIST : rc;
	c = fs_cred(fs, cred);
	ch = fs_chan(fs);
	pthread_rwlock_wrlock(&fs->ns_rw);
	pin = inode_get(fs, parent);
	npin = newparent == parent ? pin : inode_get(fs, newparent);
	if (!pin || !npin) {
		rc = -ENOMEM;
		goto put;
	}
	if ((rc = inode_begin(ch, pin, TXN_STORE, &pt)) < 0)
		goto put;
	if (!S_ISDIR(pt.r.mode))
		rc = -ENOTDIR;
	else if ((rc = perm_check(c, &pt.r, X_OK)) == 0 &&
		 (rc = entry_get(ch, parent, name, &se)) == 0 && se.ino == newparent)
		/* Into itself (a directory), or under a file. */
		rc = (rc = attr_fetch(ch, se.ino, &sa)) < 0 ? rc : S_ISDIR(sa.mode) ? -EINVAL : -ENOTDIR;
	if (rc < 0) {
		inode_end(ch, pin, &pt, rc);
		goto put;
	}
	if (npin != pin) {
		np = &nt;
		if ((rc = inode_begin(ch, npin, TXN_STORE, &nt)) < 0) {
			inode_end(ch, pin, &pt, rc);
			goto put;
		}
	}
	if (!S_ISDIR(np->r.mode))
		rc = -ENOTDIR;
	else if ((rc = perm_check(c, &np->r, X_OK)) == 0)
		rc = attr_fetch(ch, se.ino, &sa);
	if (rc < 0)
		goto fail;
	rc = entry_get(ch, newparent, newname, &de);
	has_dst = rc == 0;
	if (rc == -ENOENT && !exchange)
		rc = 0;
	if (rc < 0)
		goto fail;
	if (has_dst && (flags & LODEFS_RENAME_NOREPLACE)) {
		rc = -EEXIST;
		goto fail;
	}
	if ((rc = perm_check(c, &pt.r, W_OK | X_OK)) < 0 ||
	    (rc = perm_check(c, &np->r, W_OK | X_OK)) < 0)
		goto fail;
	if (has_dst && de.ino == se.ino) {
		rc = 0; /* two names of one inode: nothing changes */
		goto fail;
	}
	if (has_dst && (rc = attr_fetch(ch, de.ino, &da)) < 0) {
		if (rc != -ENOENT || exchange)
			goto fail;
		has_dst = false; /* an entry left by a crash: replace it */
		rc = 0;
	}
	sdir = S_ISDIR(sa.mode);
	ddir = has_dst && S_ISDIR(da.mode);
	moving = parent != newparent;
	if ((rc = sticky_check(c, &pt.r, &sa)) < 0 ||
	    (has_dst && (rc = sticky_check(c, &np->r, &da)) < 0))
		goto fail;
	if (!exchange && has_dst) {
		if (sdir && !ddir)
			rc = -ENOTDIR;
		else if (!sdir && ddir)
			rc = -EISDIR;
		else if (ddir)
			rc = dir_empty(ch, de.ino);
		if (rc < 0)
			goto fail;
	}
	if (moving && sdir) {
		if ((rc = perm_check(c, &sa, W_OK)) < 0 ||
		    (rc = ancestry_check(ch, se.ino, newparent)) < 0)
			goto fail;
		if (!ddir && np->r.nlink >= FS_LINK_MAX) {
			rc = -EMLINK;
			goto fail;
		}
	}
	if (moving && exchange && ddir) {
		if ((rc = perm_check(c, &da, W_OK)) < 0 ||
		    (rc = ancestry_check(ch, de.ino, parent)) < 0)
			goto fail;
	}

	/* The new name first: a crash leaves an extra name, never none. */
	fs_now(&now);
	if ((rc = entry_put(ch, newparent, newname, &se)) < 0)
		goto fail;
	if (exchange) {
		rc = entry_put(ch, parent, name, &de);
	} else {
		rc = entry_del(ch, parent, name);
	}
	if (rc < 0)
		goto fail;
	if (moving && sdir) {
		pt.r.nlink--;
		np->r.nlink++;
	}
	if (exchange && moving && ddir) {
		np->r.nlink--;
		pt.r.nlink++;
	}
	if (!exchange && ddir)
		np->r.nlink--; /* the replaced directory */
	pt.r.mtime = pt.r.ctime = now;
	np->r.mtime = np->r.ctime = now;
	if (np != &pt)
		inode_end(ch, npin, np, 0);
	rc = inode_end(ch, pin, &pt, 0);
	{
		int r2 = moved_update(fs, ch, se.ino, moving ? newparent : 0);

		if (rc == 0)
			rc = r2;
		if (has_dst && exchange)
			r2 = moved_update(fs, ch, de.ino, moving ? parent : 0);
		else if (has_dst)
			r2 = link_drop(fs, ch, de.ino);
		if (rc == 0)
			rc = r2;
	}
	goto put;
fail:
	if (np != &pt)
		inode_end(ch, npin, np, rc < 0 ? rc : 1);
	inode_end(ch, pin, &pt, rc < 0 ? rc : 1);
put:
	if (npin && npin != pin)
		inode_put(fs, npin);
	inode_put(fs, pin);
	pthread_rwlock_unlock(&fs->ns_rw);
	return rc;
}
