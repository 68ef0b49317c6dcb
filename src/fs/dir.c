/*
 * Directory streams. A stream is a liblode dkey-listing cursor (an anchor)
 * over the directory's object plus one buffer of listed dkeys, so a
 * directory of any size is read in constant memory. Listed dkeys that are
 * entries ("/" + name) are turned into dirents by fetching their values,
 * up to FS_BATCH at once; read_plus then fetches the inodes' attribute
 * records the same way. An entry removed between the listing and the fetch
 * is skipped.
 */
#include "fs/fs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LIST_BUF (16u << 10)

struct lodefs_dir {
	lodefs_t *fs;
	struct fs_inode *in;
	struct lode_anchor an;
	uint8_t *buf;      /* keys of the last listing */
	int nkeys, next;   /* keys in buf, and the next one to look at */
	size_t pos;        /* its offset */
	struct lodefs_dir *prev, *nextd;
};

void fs_dir_unlist(struct lodefs_dir *d)
{
	lodefs_t *fs = d->fs;

	pthread_mutex_lock(&fs->imu);
	if (d->prev)
		d->prev->nextd = d->nextd;
	else if (fs->dirs == d)
		fs->dirs = d->nextd;
	if (d->nextd)
		d->nextd->prev = d->prev;
	d->prev = d->nextd = NULL;
	pthread_mutex_unlock(&fs->imu);
}

int lodefs_dir_open(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t ino,
		    lodefs_dir_t **dir_out)
{
	struct lodefs_dir *d;
	struct fs_chan *ch;
	struct fs_inode *in;
	struct fs_txn t;
	int rc;

	if (!fs || !dir_out)
		return -EFAULT;
	ch = fs_chan(fs);
	if (!(d = calloc(1, sizeof(*d))) || !(d->buf = malloc(LIST_BUF)) ||
	    !(in = inode_get(fs, ino))) {
		if (d)
			free(d->buf);
		free(d);
		return -ENOMEM;
	}
	if ((rc = inode_begin(ch, in, TXN_READ, &t)) == 0) {
		if (!S_ISDIR(t.r.mode))
			rc = -ENOTDIR;
		else
			rc = perm_check(fs_cred(fs, cred), &t.r, R_OK);
		rc = inode_end(ch, in, &t, rc);
	}
	if (rc < 0) {
		inode_put(fs, in);
		free(d->buf);
		free(d);
		return rc;
	}
	pthread_mutex_lock(&in->mu);
	in->opens++;
	pthread_mutex_unlock(&in->mu);
	d->fs = fs;
	d->in = in;
	pthread_mutex_lock(&fs->imu);
	d->nextd = fs->dirs;
	if (d->nextd)
		d->nextd->prev = d;
	fs->dirs = d;
	pthread_mutex_unlock(&fs->imu);
	*dir_out = d;
	return 0;
}

/* The next up to max names from the listing; fetches more keys as needed. */
static int names_next(lodefs_dir_t *d, struct fs_chan *ch, struct lodefs_dirent *ents,
		      unsigned max)
{
	unsigned n = 0;

	while (n < max) {
		size_t kl;
		const uint8_t *key;

		if (d->next == d->nkeys) {
			int got;

			if (d->an.eof)
				break;
			got = lode_dkey_list(ch->cont, fs_oid(d->in->ino), LODE_EPOCH_MAX, &d->an,
					     d->buf, LIST_BUF);
			if (got < 0)
				return n ? (int)n : got;
			d->nkeys = got;
			d->next = 0;
			d->pos = 0;
			continue;
		}
		kl = (size_t)d->buf[d->pos] | (size_t)d->buf[d->pos + 1] << 8;
		key = d->buf + d->pos + 2;
		d->pos += 2 + kl;
		d->next++;
		if (kl < 2 || kl > LODEFS_NAME_MAX + 1 || key[0] != '/')
			continue;
		memcpy(ents[n].name, key + 1, kl - 1);
		ents[n].name[kl - 1] = 0;
		n++;
	}
	return (int)n;
}

/* Fill ino and type of ents[0..n) (and st, if given); drop entries that are gone. */
static int ents_fill(lodefs_dir_t *d, struct fs_chan *ch, struct lodefs_dirent *ents,
		     struct stat *st, unsigned n)
{
	static const struct lode_key attr_key = {"i", 1, "a", 1};
	lode_event_t ev[FS_BATCH];
	uint8_t keys[FS_BATCH][LODEFS_NAME_MAX + 1];
	uint8_t vals[FS_BATCH][128];
	uint32_t lens[FS_BATCH];
	bool keep[FS_BATCH];
	lode_eq_t *eq = fs_eq_get(ch);
	unsigned sent = 0, out = 0;
	int rc = 0;

	if (!eq)
		return -ENOMEM;
	memset(ev, 0, sizeof(ev));
	for (unsigned i = 0; i < n && rc == 0; i++, sent++) {
		struct lode_key k;

		entry_key(ents[i].name, keys[i], &k);
		lode_event_init(&ev[i], eq);
		rc = lode_obj_fetch(ch->cont, fs_oid(d->in->ino), LODE_EPOCH_MAX, &k, vals[i],
				    sizeof(vals[i]), &lens[i], &ev[i]);
		if (rc < 0)
			break;
	}
	if (rc < 0) {
		fs_eq_wait(eq, sent, 0);
		goto out;
	}
	fs_eq_wait(eq, sent, 0);
	for (unsigned i = 0; i < n; i++) {
		keep[i] = ev[i].rc == 0 && lens[i] >= FS_ENTRY_LEN;
		if (ev[i].rc < 0 && ev[i].rc != -ENOENT && rc == 0)
			rc = ev[i].rc;
		if (keep[i]) {
			struct fs_entry e;

			entry_decode(vals[i], &e);
			ents[i].ino = e.ino;
			ents[i].type = e.type;
		}
	}
	if (rc == 0 && st) {
		sent = 0;
		for (unsigned i = 0; i < n && rc == 0; i++) {
			if (!keep[i])
				continue;
			lode_event_init(&ev[i], eq);
			rc = lode_obj_fetch(ch->cont, fs_oid(ents[i].ino), LODE_EPOCH_MAX, &attr_key,
					    vals[i], sizeof(vals[i]), &lens[i], &ev[i]);
			if (rc == 0)
				sent++;
		}
		fs_eq_wait(eq, sent, 0);
		for (unsigned i = 0; i < n && rc == 0; i++) {
			struct fs_attr a;

			if (!keep[i])
				continue;
			if (ev[i].rc == -ENOENT) {
				keep[i] = false;
				continue;
			}
			if (ev[i].rc < 0)
				rc = ev[i].rc;
			else if ((rc = attr_decode(vals[i], lens[i], &a)) == 0)
				attr_to_stat(ents[i].ino, &a, &st[i]);
		}
	}
	if (rc < 0)
		goto out;
	for (unsigned i = 0; i < n; i++) {
		if (!keep[i])
			continue;
		if (out != i) {
			ents[out] = ents[i];
			if (st)
				st[out] = st[i];
		}
		out++;
	}
out:
	fs_eq_put(ch, eq);
	return rc < 0 ? rc : (int)out;
}

static int dir_read(lodefs_dir_t *d, struct lodefs_dirent *ents, struct stat *st, unsigned max)
{
	struct fs_chan *ch;
	unsigned got = 0;

	if (!d || (max && !ents))
		return -EFAULT;
	ch = fs_chan(d->fs);
	while (got < max) {
		unsigned want = max - got < FS_BATCH ? max - got : FS_BATCH;
		int n = names_next(d, ch, ents + got, want);

		if (n < 0)
			return got ? (int)got : n;
		if (n == 0)
			break;
		n = ents_fill(d, ch, ents + got, st ? st + got : NULL, (unsigned)n);
		if (n < 0)
			return got ? (int)got : n;
		got += (unsigned)n;
	}
	return (int)got;
}

int lodefs_dir_read(lodefs_dir_t *d, struct lodefs_dirent *ents, unsigned max)
{
	return dir_read(d, ents, NULL, max);
}

int lodefs_dir_read_plus(lodefs_dir_t *d, struct lodefs_dirent *ents, struct stat *st,
			 unsigned max)
{
	if (max && !st)
		return -EFAULT;
	return dir_read(d, ents, st, max);
}

void lodefs_dir_rewind(lodefs_dir_t *d)
{
	if (!d)
		return;
	memset(&d->an, 0, sizeof(d->an));
	d->nkeys = d->next = 0;
	d->pos = 0;
}

uint64_t lodefs_dir_ino(const lodefs_dir_t *d)
{
	return d ? d->in->ino : 0;
}

int lodefs_dir_close(lodefs_dir_t *d)
{
	if (!d)
		return -EFAULT;
	fs_dir_unlist(d);
	inode_open_release(d->fs, fs_chan(d->fs), d->in, false);
	free(d->buf);
	free(d);
	return 0;
}
