/*
 * Extended attributes: dkey "x" of the inode's object, one akey per name,
 * the value a single value. Listing is an akey listing of dkey "x";
 * removal punches the akey.
 *
 * Namespaces follow Linux's rules: "user." needs read (get) or write (set,
 * remove) permission and exists on regular files and directories only;
 * "trusted." is root's; "security." is open to all; "system." (ACLs) is not
 * supported (-EOPNOTSUPP), nor is a name in no namespace.
 *
 * "lode.chunk_size" is virtual: reading it gives a regular file's chunk
 * size in decimal; the owner (or root) may set it while the file is empty
 * (-EBUSY once it has data), to 4096 .. 64 MiB. It is never listed.
 */
#include "fs/fs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#define CHUNK_XATTR "lode.chunk_size"
#define LIST_BUF (16u << 10)

enum xns { XNS_USER, XNS_TRUSTED, XNS_SECURITY, XNS_CHUNK };

static int xattr_ns(const char *name, enum xns *ns)
{
	size_t n;

	if (!name)
		return -EFAULT;
	n = strlen(name);
	if (n == 0 || n > LODEFS_XATTR_NAME_MAX)
		return -ERANGE;
	if (strcmp(name, CHUNK_XATTR) == 0)
		*ns = XNS_CHUNK;
	else if (strncmp(name, "user.", 5) == 0)
		*ns = XNS_USER;
	else if (strncmp(name, "trusted.", 8) == 0)
		*ns = XNS_TRUSTED;
	else if (strncmp(name, "security.", 9) == 0)
		*ns = XNS_SECURITY;
	else
		return -EOPNOTSUPP;
	return 0;
}

/* Linux's xattr_permission(): mask is R_OK or W_OK. */
static int xattr_perm(const struct lodefs_cred *c, const struct fs_attr *a, enum xns ns,
		      int mask)
{
	switch (ns) {
	case XNS_TRUSTED:
		if (c->uid != 0)
			return mask == W_OK ? -EPERM : -ENODATA;
		return 0;
	case XNS_SECURITY:
		return 0;
	case XNS_CHUNK:
		if (mask == W_OK && c->uid != 0 && c->uid != a->uid)
			return -EPERM;
		return 0;
	case XNS_USER:
		break;
	}
	if (!S_ISREG(a->mode) && !S_ISDIR(a->mode))
		return mask == W_OK ? -EPERM : -ENODATA;
	if (mask == W_OK && S_ISDIR(a->mode) && (a->mode & S_ISVTX) && c->uid != 0 &&
	    c->uid != a->uid)
		return -EPERM;
	return perm_check(c, a, mask);
}

static void xattr_key(const char *name, struct lode_key *k)
{
	*k = (struct lode_key){"x", 1, name, (uint32_t)strlen(name)};
}

/* Bump ctime: a set or a remove changes the inode. The caller holds t. */
static void ctime_now(struct fs_txn *t)
{
	fs_now(&t->r.ctime);
}

static int chunk_set(struct fs_chan *ch, struct fs_inode *in, struct fs_txn *t,
		     const void *value, size_t size)
{
	char text[32];
	unsigned long v;
	char *end;

	if (!S_ISREG(t->r.mode))
		return -EINVAL;
	if (size == 0 || size >= sizeof(text))
		return -EINVAL;
	memcpy(text, value, size);
	text[size] = 0;
	v = strtoul(text, &end, 10);
	if (*end || text[0] < '0' || text[0] > '9' || v < FS_CHUNK_MIN || v > FS_CHUNK_MAX)
		return -EINVAL;
	if (t->r.size > 0)
		return -EBUSY;
	pthread_mutex_lock(&in->mu);
	/* A write in flight on an empty file has data coming: too late to change. */
	if (in->seq > in->done_seq)
		v = 0;
	pthread_mutex_unlock(&in->mu);
	if (!v)
		return -EBUSY;
	t->r.chunk = (uint32_t)v;
	return 0;
}

int lodefs_xattr_set(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t ino,
		     const char *name, const void *value, size_t size, int flags)
{
	const struct lodefs_cred *c;
	struct fs_chan *ch;
	struct fs_inode *in;
	struct lode_key k;
	struct fs_txn t;
	enum xns ns;
	int rc;

	if (!fs || (size && !value))
		return -EFAULT;
	if (flags & ~(XATTR_CREATE | XATTR_REPLACE))
		return -EINVAL;
	if ((rc = xattr_ns(name, &ns)) < 0)
		return rc;
	if (size > LODEFS_XATTR_SIZE_MAX)
		return -E2BIG;
	c = fs_cred(fs, cred);
	ch = fs_chan(fs);
	if (!(in = inode_get(fs, ino)))
		return -ENOMEM;
	/* Under the inode's transaction, so CREATE and REPLACE see no race from here. */
	if ((rc = inode_begin(ch, in, TXN_STORE, &t)) < 0)
		goto out;
	if ((rc = xattr_perm(c, &t.r, ns, W_OK)) < 0)
		goto fail;
	if (ns == XNS_CHUNK) {
		if (flags & XATTR_CREATE)
			rc = -EEXIST; /* it always exists */
		else
			rc = chunk_set(ch, in, &t, value, size);
		if (rc < 0)
			goto fail;
	} else {
		uint8_t probe[1];
		uint32_t len = 0;

		xattr_key(name, &k);
		if (flags & (XATTR_CREATE | XATTR_REPLACE)) {
			rc = lode_obj_fetch(ch->cont, fs_oid(ino), LODE_EPOCH_MAX, &k, probe,
					    sizeof(probe), &len, NULL);
			if (rc == 0 || rc == -EOVERFLOW)
				rc = (flags & XATTR_CREATE) ? -EEXIST : 0;
			else if (rc == -ENOENT)
				rc = (flags & XATTR_REPLACE) ? -ENODATA : 0;
			if (rc < 0)
				goto fail;
		}
		if ((rc = lode_obj_update(ch->cont, fs_oid(ino), &k, value, (uint32_t)size, NULL)) <
		    0)
			goto fail;
	}
	ctime_now(&t);
	rc = inode_end(ch, in, &t, 0);
	goto out;
fail:
	inode_end(ch, in, &t, rc);
out:
	inode_put(fs, in);
	return rc;
}

int lodefs_xattr_get(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t ino,
		     const char *name, void *buf, size_t cap)
{
	const struct lodefs_cred *c;
	struct fs_chan *ch;
	struct fs_attr a;
	struct lode_key k;
	uint8_t *tmp;
	uint32_t len = 0;
	enum xns ns;
	int rc;

	if (!fs || (cap && !buf))
		return -EFAULT;
	if ((rc = xattr_ns(name, &ns)) < 0)
		return rc;
	c = fs_cred(fs, cred);
	ch = fs_chan(fs);
	if ((rc = attr_fetch(ch, ino, &a)) < 0)
		return rc;
	if ((rc = xattr_perm(c, &a, ns, R_OK)) < 0)
		return rc;
	if (ns == XNS_CHUNK) {
		char text[32];
		int n;

		if (!S_ISREG(a.mode))
			return -ENODATA;
		n = snprintf(text, sizeof(text), "%u", a.chunk);
		if (cap == 0)
			return n;
		if ((size_t)n > cap)
			return -ERANGE;
		memcpy(buf, text, (size_t)n);
		return n;
	}
	xattr_key(name, &k);
	if (!(tmp = malloc(LODEFS_XATTR_SIZE_MAX)))
		return -ENOMEM;
	rc = lode_obj_fetch(ch->cont, fs_oid(ino), LODE_EPOCH_MAX, &k, tmp, LODEFS_XATTR_SIZE_MAX,
			    &len, NULL);
	if (rc == -ENOENT)
		rc = -ENODATA;
	else if (rc == -EOVERFLOW)
		rc = -E2BIG;
	else if (rc == 0 && cap == 0)
		rc = (int)len;
	else if (rc == 0 && len > cap)
		rc = -ERANGE;
	else if (rc == 0) {
		memcpy(buf, tmp, len);
		rc = (int)len;
	}
	free(tmp);
	return rc;
}

int lodefs_xattr_list(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t ino, char *buf,
		      size_t cap)
{
	const struct lodefs_cred *c;
	struct lode_anchor an;
	struct fs_chan *ch;
	struct fs_attr a;
	struct lode_key k = {"x", 1, "x", 1};
	uint8_t *lb;
	size_t total = 0;
	int rc = 0;

	if (!fs || (cap && !buf))
		return -EFAULT;
	c = fs_cred(fs, cred);
	ch = fs_chan(fs);
	if ((rc = attr_fetch(ch, ino, &a)) < 0)
		return rc;
	if (!(lb = malloc(LIST_BUF)))
		return -ENOMEM;
	memset(&an, 0, sizeof(an));
	while (!an.eof && rc == 0) {
		int n = lode_akey_list(ch->cont, fs_oid(ino), &k, LODE_EPOCH_MAX, &an, lb, LIST_BUF);
		size_t o = 0;

		if (n < 0) {
			rc = n;
			break;
		}
		if (n == 0)
			break;
		for (int i = 0; i < n; i++) {
			size_t kl = (size_t)lb[o] | (size_t)lb[o + 1] << 8;
			const char *name = (const char *)lb + o + 2;

			o += 2 + kl;
			/* trusted.* is listed for root only, as Linux does. */
			if (kl >= 8 && strncmp(name, "trusted.", 8) == 0 && c->uid != 0)
				continue;
			if (cap) {
				if (total + kl + 1 > cap) {
					rc = -ERANGE;
					break;
				}
				memcpy(buf + total, name, kl);
				buf[total + kl] = 0;
			}
			total += kl + 1;
		}
	}
	free(lb);
	if (rc < 0)
		return rc;
	return total > INT32_MAX ? -E2BIG : (int)total;
}

int lodefs_xattr_remove(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t ino,
			const char *name)
{
	const struct lodefs_cred *c;
	struct fs_chan *ch;
	struct fs_inode *in;
	struct lode_key k;
	struct fs_txn t;
	uint8_t probe[1];
	uint32_t len = 0;
	enum xns ns;
	int rc;

	if (!fs)
		return -EFAULT;
	if ((rc = xattr_ns(name, &ns)) < 0)
		return rc;
	c = fs_cred(fs, cred);
	ch = fs_chan(fs);
	if (!(in = inode_get(fs, ino)))
		return -ENOMEM;
	if ((rc = inode_begin(ch, in, TXN_STORE, &t)) < 0)
		goto out;
	if ((rc = xattr_perm(c, &t.r, ns, W_OK)) < 0)
		goto fail;
	if (ns == XNS_CHUNK) {
		rc = -EPERM;
		goto fail;
	}
	xattr_key(name, &k);
	rc = lode_obj_fetch(ch->cont, fs_oid(ino), LODE_EPOCH_MAX, &k, probe, sizeof(probe), &len,
			    NULL);
	if (rc == -ENOENT)
		rc = -ENODATA;
	else if (rc == -EOVERFLOW)
		rc = 0;
	if (rc < 0 || (rc = lode_akey_punch(ch->cont, fs_oid(ino), &k, NULL)) < 0)
		goto fail;
	ctime_now(&t);
	rc = inode_end(ch, in, &t, 0);
	goto out;
fail:
	inode_end(ch, in, &t, rc);
out:
	inode_put(fs, in);
	return rc;
}
