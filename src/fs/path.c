/*
 * The path calls: resolve a path to an inode number (or to a parent and a
 * last name), then do what the inode-number twin does.
 *
 * Resolution starts at the root for absolute and relative paths alike,
 * checks search permission on every directory it walks, follows symlinks
 * (LODEFS_SYMLOOP_MAX in one resolution; a final one only when asked or
 * when the path ends in '/'), and treats ".." of the root as the root, as
 * path_resolution(7) describes. A symlink's target replaces the component
 * in the rest of the path, so the work buffer never holds more than
 * LODEFS_PATH_MAX bytes.
 */
#include "fs/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct lode_key link_key = {"i", 1, "l", 1};

static bool trailing_slash(const char *path)
{
	size_t n = strlen(path);

	return n > 1 && path[n - 1] == '/';
}

/* Resolve path; *a gets the final inode's attributes. */
static int resolve(lodefs_t *fs, struct fs_chan *ch, const struct lodefs_cred *c,
		   const char *path, bool follow, uint64_t *ino_out, struct fs_attr *a_out)
{
	char *buf, *p;
	uint64_t cur = LODEFS_ROOT_INO;
	struct fs_attr ca;
	unsigned links = 0;
	size_t n;
	int rc;

	if (!path)
		return -EFAULT;
	n = strlen(path);
	if (n == 0)
		return -ENOENT;
	if (n >= LODEFS_PATH_MAX)
		return -ENAMETOOLONG;
	if (!(buf = malloc(2 * LODEFS_PATH_MAX)))
		return -ENOMEM;
	memcpy(buf, path, n + 1);
	p = buf;
	if ((rc = attr_fetch(ch, cur, &ca)) < 0)
		goto out;
	for (;;) {
		char name[LODEFS_NAME_MAX + 1];
		const char *start;
		bool last, slash_after;
		struct fs_entry e;
		struct fs_attr na;
		size_t len;

		while (*p == '/')
			p++;
		if (!*p)
			break;
		start = p;
		while (*p && *p != '/')
			p++;
		len = (size_t)(p - start);
		slash_after = *p == '/';
		{
			const char *q = p;

			while (*q == '/')
				q++;
			last = *q == 0;
		}
		if (len > LODEFS_NAME_MAX) {
			rc = -ENAMETOOLONG;
			goto out;
		}
		memcpy(name, start, len);
		name[len] = 0;
		if (!S_ISDIR(ca.mode)) {
			rc = -ENOTDIR;
			goto out;
		}
		if ((rc = perm_check(c, &ca, X_OK)) < 0)
			goto out;
		if (strcmp(name, ".") == 0)
			continue;
		if (strcmp(name, "..") == 0) {
			if (cur != LODEFS_ROOT_INO) {
				cur = ca.parent;
				if ((rc = attr_fetch(ch, cur, &ca)) < 0)
					goto out;
			}
			continue;
		}
		if ((rc = entry_get(ch, cur, name, &e)) < 0)
			goto out;
		if ((rc = attr_fetch(ch, e.ino, &na)) < 0)
			goto out;
		if (S_ISLNK(na.mode) && (!last || follow || slash_after)) {
			char target[LODEFS_PATH_MAX];
			uint32_t tl = 0;
			size_t rest = strlen(p);

			if (++links > LODEFS_SYMLOOP_MAX) {
				rc = -ELOOP;
				goto out;
			}
			rc = lode_obj_fetch(ch->cont, fs_oid(e.ino), LODE_EPOCH_MAX, &link_key, target,
					    sizeof(target) - 1, &tl, NULL);
			if (rc < 0)
				goto out;
			if (tl == 0) {
				rc = -ENOENT;
				goto out;
			}
			if (tl + rest + 1 >= 2 * LODEFS_PATH_MAX) {
				rc = -ENAMETOOLONG;
				goto out;
			}
			/* target + the rest of the path, in place of the component. */
			memmove(buf + tl, p, rest + 1);
			memcpy(buf, target, tl);
			p = buf;
			if (target[0] == '/') {
				cur = LODEFS_ROOT_INO;
				if ((rc = attr_fetch(ch, cur, &ca)) < 0)
					goto out;
			}
			continue;
		}
		cur = e.ino;
		ca = na;
		if (slash_after && last && !S_ISDIR(ca.mode)) {
			rc = -ENOTDIR;
			goto out;
		}
	}
	*ino_out = cur;
	if (a_out)
		*a_out = ca;
	rc = 0;
out:
	free(buf);
	return rc;
}

int lodefs_path_resolve(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
			unsigned flags, uint64_t *ino_out)
{
	if (!fs || !ino_out)
		return -EFAULT;
	return resolve(fs, fs_chan(fs), fs_cred(fs, cred), path, !(flags & LODEFS_NOFOLLOW),
		       ino_out, NULL);
}

int lodefs_path_parent(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
		       uint64_t *parent_out, char *name)
{
	struct fs_attr a;
	char *dir;
	size_t n, s;
	int rc;

	if (!fs || !path || !parent_out || !name)
		return -EFAULT;
	n = strlen(path);
	if (n == 0)
		return -ENOENT;
	if (n >= LODEFS_PATH_MAX)
		return -ENAMETOOLONG;
	while (n > 0 && path[n - 1] == '/')
		n--;
	if (n == 0)
		return -EINVAL; /* "/" */
	for (s = n; s > 0 && path[s - 1] != '/'; s--)
		;
	if (n - s > LODEFS_NAME_MAX)
		return -ENAMETOOLONG;
	if (s == 0) {
		*parent_out = LODEFS_ROOT_INO;
	} else {
		if (!(dir = strndup(path, s)))
			return -ENOMEM;
		rc = resolve(fs, fs_chan(fs), fs_cred(fs, cred), dir, true, parent_out, &a);
		free(dir);
		if (rc < 0)
			return rc;
		if (!S_ISDIR(a.mode))
			return -ENOTDIR;
	}
	memcpy(name, path + s, n - s);
	name[n - s] = 0;
	return 0;
}

static int stat_common(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
		       bool follow, struct stat *st)
{
	struct fs_inode *in;
	struct fs_attr a;
	uint64_t ino;
	int rc;

	if (!fs || !st)
		return -EFAULT;
	if ((rc = resolve(fs, fs_chan(fs), fs_cred(fs, cred), path, follow, &ino, &a)) < 0)
		return rc;
	/* An inode open here may have times not yet stored: getattr stores them. */
	if ((in = inode_find(fs, ino))) {
		inode_put(fs, in);
		return lodefs_getattr(fs, ino, st);
	}
	attr_to_stat(ino, &a, st);
	return 0;
}

int lodefs_path_stat(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
		     struct stat *st)
{
	return stat_common(fs, cred, path, true, st);
}

int lodefs_path_lstat(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
		      struct stat *st)
{
	return stat_common(fs, cred, path, false, st);
}

static bool is_dot(const char *name)
{
	return strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
}

/*
 * The path a final symlink of path leads to: its target if absolute, else
 * the target in path's directory. A new string, or NULL (*rc says why).
 */
static char *link_path(struct fs_chan *ch, uint64_t link, const char *path, int *rc)
{
	char target[LODEFS_PATH_MAX], *out;
	uint32_t tl = 0;
	size_t dir = strlen(path);

	*rc = lode_obj_fetch(ch->cont, fs_oid(link), LODE_EPOCH_MAX, &link_key, target,
			     sizeof(target) - 1, &tl, NULL);
	if (*rc < 0)
		return NULL;
	target[tl] = 0;
	while (dir > 0 && path[dir - 1] != '/')
		dir--;
	if (target[0] == '/')
		dir = 0;
	if (dir + tl >= LODEFS_PATH_MAX) {
		*rc = -ENAMETOOLONG;
		return NULL;
	}
	if (!(out = malloc(dir + tl + 1))) {
		*rc = -ENOMEM;
		return NULL;
	}
	memcpy(out, path, dir);
	memcpy(out + dir, target, tl + 1);
	return out;
}

static int path_open(lodefs_t *fs, const struct lodefs_cred *cred, const char *path, int flags,
		     mode_t mode, lodefs_file_t **file_out, unsigned depth)
{
	const struct lodefs_cred *c = fs_cred(fs, cred);
	struct fs_chan *ch = fs_chan(fs);
	struct fs_attr a;
	uint64_t ino;
	int rc;

	if (flags & O_CREAT) {
		char name[LODEFS_NAME_MAX + 1], *next;
		uint64_t parent;

		if ((rc = lodefs_path_parent(fs, cred, path, &parent, name)) < 0)
			return rc == -EINVAL ? -EISDIR : rc;
		if (trailing_slash(path) || is_dot(name))
			return -EISDIR;
		rc = ns_lookup(fs, ch, c, parent, name, &ino, &a);
		if (rc == -ENOENT)
			return lodefs_create(fs, cred, parent, name, flags, mode, NULL, file_out);
		if (rc < 0)
			return rc;
		if (flags & O_EXCL)
			return -EEXIST;
		if (S_ISLNK(a.mode)) {
			if (flags & O_NOFOLLOW)
				return -ELOOP;
			/* open(2) follows it, and creates a missing target. */
			if (depth >= LODEFS_SYMLOOP_MAX)
				return -ELOOP;
			if (!(next = link_path(ch, ino, path, &rc)))
				return rc;
			rc = path_open(fs, cred, next, flags, mode, file_out, depth + 1);
			free(next);
			return rc;
		}
		if (S_ISDIR(a.mode))
			return -EISDIR;
	} else {
		if ((rc = resolve(fs, ch, c, path, !(flags & O_NOFOLLOW), &ino, &a)) < 0)
			return rc;
		if (S_ISLNK(a.mode))
			return -ELOOP;
	}
	if ((flags & O_DIRECTORY) && !S_ISDIR(a.mode))
		return -ENOTDIR;
	return file_open_inode(fs, ch, c, ino, flags, false, file_out);
}

int lodefs_path_open(lodefs_t *fs, const struct lodefs_cred *cred, const char *path, int flags,
		     mode_t mode, lodefs_file_t **file_out)
{
	if (!fs || !path || !file_out)
		return -EFAULT;
	return path_open(fs, cred, path, flags, mode, file_out, 0);
}

int lodefs_path_mkdir(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
		      mode_t mode)
{
	char name[LODEFS_NAME_MAX + 1];
	uint64_t parent;
	int rc;

	if ((rc = lodefs_path_parent(fs, cred, path, &parent, name)) < 0)
		return rc == -EINVAL ? -EEXIST : rc;
	if (is_dot(name))
		return -EEXIST;
	return lodefs_mkdir(fs, cred, parent, name, mode, NULL);
}

int lodefs_path_unlink(lodefs_t *fs, const struct lodefs_cred *cred, const char *path)
{
	char name[LODEFS_NAME_MAX + 1];
	uint64_t parent;
	int rc;

	if ((rc = lodefs_path_parent(fs, cred, path, &parent, name)) < 0)
		return rc == -EINVAL ? -EISDIR : rc;
	if (trailing_slash(path)) {
		struct fs_attr a;
		uint64_t ino;

		if ((rc = resolve(fs, fs_chan(fs), fs_cred(fs, cred), path, true, &ino, &a)) < 0)
			return rc;
		return S_ISDIR(a.mode) ? -EISDIR : -ENOTDIR;
	}
	return lodefs_unlink(fs, cred, parent, name);
}

int lodefs_path_rmdir(lodefs_t *fs, const struct lodefs_cred *cred, const char *path)
{
	char name[LODEFS_NAME_MAX + 1];
	uint64_t parent;
	int rc;

	if ((rc = lodefs_path_parent(fs, cred, path, &parent, name)) < 0)
		return rc == -EINVAL ? -EBUSY : rc;
	return lodefs_rmdir(fs, cred, parent, name);
}

int lodefs_path_rename(lodefs_t *fs, const struct lodefs_cred *cred, const char *from,
		       const char *to, unsigned flags)
{
	char name[LODEFS_NAME_MAX + 1], newname[LODEFS_NAME_MAX + 1];
	uint64_t parent, newparent;
	int rc;

	if (!fs || !from || !to)
		return -EFAULT;
	if ((rc = lodefs_path_parent(fs, cred, from, &parent, name)) < 0 ||
	    (rc = lodefs_path_parent(fs, cred, to, &newparent, newname)) < 0)
		return rc == -EINVAL ? -EBUSY : rc;
	if (trailing_slash(from) || trailing_slash(to)) {
		struct stat st;

		/* A trailing slash says "directory": anything else is -ENOTDIR. */
		if ((rc = lodefs_lookup(fs, cred, parent, name, &st)) < 0)
			return rc;
		if (!S_ISDIR(st.st_mode))
			return -ENOTDIR;
	}
	return lodefs_rename(fs, cred, parent, name, newparent, newname, flags);
}

int lodefs_path_link(lodefs_t *fs, const struct lodefs_cred *cred, const char *from,
		     const char *to)
{
	char name[LODEFS_NAME_MAX + 1];
	uint64_t ino, parent;
	int rc;

	if (!fs || !from || !to)
		return -EFAULT;
	if ((rc = lodefs_path_resolve(fs, cred, from, LODEFS_NOFOLLOW, &ino)) < 0)
		return rc;
	if ((rc = lodefs_path_parent(fs, cred, to, &parent, name)) < 0)
		return rc == -EINVAL ? -EEXIST : rc;
	if (trailing_slash(to))
		return -ENOENT;
	return lodefs_link(fs, cred, ino, parent, name, NULL);
}

int lodefs_path_symlink(lodefs_t *fs, const struct lodefs_cred *cred, const char *target,
			const char *path)
{
	char name[LODEFS_NAME_MAX + 1];
	uint64_t parent;
	int rc;

	if (!fs || !target || !path)
		return -EFAULT;
	if ((rc = lodefs_path_parent(fs, cred, path, &parent, name)) < 0)
		return rc == -EINVAL ? -EEXIST : rc;
	if (is_dot(name))
		return -EEXIST;
	return lodefs_symlink(fs, cred, parent, name, target, NULL);
}

int lodefs_path_readlink(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
			 char *buf, size_t cap)
{
	uint64_t ino;
	int rc;

	if ((rc = lodefs_path_resolve(fs, cred, path, LODEFS_NOFOLLOW, &ino)) < 0)
		return rc;
	return lodefs_readlink(fs, ino, buf, cap);
}

static int path_setattr(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
			unsigned flags, const struct stat *st, unsigned set)
{
	uint64_t ino;
	int rc;

	if ((rc = lodefs_path_resolve(fs, cred, path, flags, &ino)) < 0)
		return rc;
	return lodefs_setattr(fs, cred, ino, st, set, NULL);
}

int lodefs_path_truncate(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
			 uint64_t size)
{
	struct stat st;

	if (size > FS_SIZE_MAX)
		return -EFBIG;
	memset(&st, 0, sizeof(st));
	st.st_size = (off_t)size;
	return path_setattr(fs, cred, path, 0, &st, LODEFS_SET_SIZE);
}

int lodefs_path_chmod(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
		      mode_t mode)
{
	struct stat st;

	memset(&st, 0, sizeof(st));
	st.st_mode = mode;
	return path_setattr(fs, cred, path, 0, &st, LODEFS_SET_MODE);
}

int lodefs_path_chown(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
		      uid_t uid, gid_t gid, unsigned flags)
{
	struct stat st;
	unsigned set = 0;

	memset(&st, 0, sizeof(st));
	if (uid != (uid_t)-1) {
		st.st_uid = uid;
		set |= LODEFS_SET_UID;
	}
	if (gid != (gid_t)-1) {
		st.st_gid = gid;
		set |= LODEFS_SET_GID;
	}
	return path_setattr(fs, cred, path, flags & LODEFS_NOFOLLOW, &st, set);
}

int lodefs_path_utimens(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
			const struct timespec times[2], unsigned flags)
{
	struct stat st;
	unsigned set = 0;
	uint64_t ino;
	int rc;

	memset(&st, 0, sizeof(st));
	if (!times) {
		set = LODEFS_SET_ATIME_NOW | LODEFS_SET_MTIME_NOW;
	} else {
		for (int i = 0; i < 2; i++) {
			const struct timespec *t = &times[i];

			if (t->tv_nsec == UTIME_OMIT)
				continue;
			if (t->tv_nsec == UTIME_NOW) {
				set |= i == 0 ? LODEFS_SET_ATIME_NOW : LODEFS_SET_MTIME_NOW;
				continue;
			}
			if (t->tv_nsec < 0 || t->tv_nsec >= 1000000000L)
				return -EINVAL;
			set |= i == 0 ? LODEFS_SET_ATIME : LODEFS_SET_MTIME;
			if (i == 0)
				st.st_atim = *t;
			else
				st.st_mtim = *t;
		}
	}
	if ((rc = lodefs_path_resolve(fs, cred, path, flags & LODEFS_NOFOLLOW, &ino)) < 0)
		return rc;
	if (set == 0)
		return 0; /* both UTIME_OMIT: nothing changes, not even ctime */
	return lodefs_setattr(fs, cred, ino, &st, set, NULL);
}

int lodefs_path_access(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
		       int mask)
{
	uint64_t ino;
	int rc;

	if (mask & ~(R_OK | W_OK | X_OK))
		return -EINVAL;
	if ((rc = lodefs_path_resolve(fs, cred, path, 0, &ino)) < 0)
		return rc;
	return lodefs_access(fs, cred, ino, mask);
}

int lodefs_path_opendir(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
			lodefs_dir_t **dir_out)
{
	uint64_t ino;
	int rc;

	if ((rc = lodefs_path_resolve(fs, cred, path, 0, &ino)) < 0)
		return rc;
	return lodefs_dir_open(fs, cred, ino, dir_out);
}
