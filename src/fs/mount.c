/*
 * Instances of liblodefs: mount and unmount, the connections that calling
 * threads share (channels), the superblock, and statfs.
 *
 * liblode serialises the threads of one connection, so an instance keeps
 * up to opts.channels connections, made on first use, and binds each
 * calling thread to one of them, round robin. The binding is thread-local
 * and keyed by the instance's generation number, so a thread that uses two
 * instances (or a new instance at the address of a freed one) never takes
 * a channel of the wrong instance.
 *
 * The superblock is the object of inode number 0: dkey "sb", akey "sb",
 * {magic "lodefs\0\0", u32 version, u32 default chunk size, i64 sec and
 * u32 nsec of creation}, little-endian. Mount makes the root directory
 * first and the superblock last, so a superblock always has a root.
 */
#include "fs/fs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define SB_LEN 28u
#define BIND_SLOTS 8u

static uint64_t fs_generation; /* atomic: the last instance's generation */

/* Which channel this thread uses in recently used instances. */
static __thread struct {
	uint64_t gen;
	unsigned idx;
} bind[BIND_SLOTS];

void fs_now(struct timespec *ts)
{
	clock_gettime(CLOCK_REALTIME, ts);
}

uint64_t fs_ino_new(void)
{
	uint64_t v = 0;

	/* 63 random bits; 0 (the superblock) and 1 (the root) are taken. */
	do {
		if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
			struct timespec ts;

			/* No entropy source: fall back to a clock-seeded mix. */
			clock_gettime(CLOCK_MONOTONIC, &ts);
			v ^= (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^ (uint64_t)ts.tv_sec;
			v ^= v >> 29;
			v *= 0xbf58476d1ce4e5b9ULL;
			v ^= v >> 32;
		}
		v &= (uint64_t)INT64_MAX;
	} while (v <= LODEFS_ROOT_INO);
	return v;
}

const struct lodefs_cred *fs_cred(lodefs_t *fs, const struct lodefs_cred *cred)
{
	return cred ? cred : &fs->cred;
}

static int chan_open(lodefs_t *fs, struct fs_chan *ch)
{
	struct lode_conn_opts co = {.transport = fs->opts.transport, .timeout_ms = fs->opts.timeout_ms};
	lode_conn_t *conn;
	lode_cont_t *cont;
	int rc;

	if ((rc = lode_connect(fs->addr, &co, &conn)) < 0)
		return rc;
	if ((rc = lode_cont_open(conn, fs->container, &cont)) < 0) {
		lode_disconnect(conn);
		return rc;
	}
	ch->conn = conn;
	__atomic_store_n(&ch->cont, cont, __ATOMIC_RELEASE);
	return 0;
}

struct fs_chan *fs_chan(lodefs_t *fs)
{
	unsigned slot = (unsigned)(fs->gen % BIND_SLOTS), idx;
	struct fs_chan *ch;

	if (bind[slot].gen == fs->gen)
		return &fs->chans[bind[slot].idx];
	idx = __atomic_fetch_add(&fs->next_chan, 1, __ATOMIC_RELAXED) % fs->nchans;
	ch = &fs->chans[idx];
	if (!__atomic_load_n(&ch->cont, __ATOMIC_ACQUIRE)) {
		/* Each channel has its own lock, so that threads starting at once
		 * connect at once: a connection takes tens of milliseconds, and
		 * 16 threads used to queue for 0.9 s (src/fs/README.md). A
		 * channel that cannot be made leaves the thread on channel 0. */
		pthread_mutex_lock(&ch->open_mu);
		if (!ch->cont && chan_open(fs, ch) < 0)
			idx = 0;
		pthread_mutex_unlock(&ch->open_mu);
	}
	bind[slot].gen = fs->gen;
	bind[slot].idx = idx;
	return &fs->chans[idx];
}

lode_eq_t *fs_eq_get(struct fs_chan *ch)
{
	lode_eq_t *eq = NULL;

	pthread_mutex_lock(&ch->mu);
	if (ch->neqs)
		eq = ch->eqs[--ch->neqs];
	pthread_mutex_unlock(&ch->mu);
	if (!eq && lode_eq_create(&eq) < 0)
		return NULL;
	return eq;
}

void fs_eq_put(struct fs_chan *ch, lode_eq_t *eq)
{
	if (!eq)
		return;
	pthread_mutex_lock(&ch->mu);
	if (ch->neqs < sizeof(ch->eqs) / sizeof(ch->eqs[0])) {
		ch->eqs[ch->neqs++] = eq;
		eq = NULL;
	}
	pthread_mutex_unlock(&ch->mu);
	if (eq)
		lode_eq_destroy(eq);
}

int fs_eq_wait(lode_eq_t *eq, unsigned n, int ignore)
{
	lode_event_t *got[FS_BATCH];
	int first = 0;

	while (n) {
		int r = lode_eq_poll(eq, 1, n < FS_BATCH ? n : FS_BATCH, -1, got);

		if (r < 0)
			return r; /* not reached with a valid eq */
		for (int i = 0; i < r; i++)
			if (got[i]->rc < 0 && got[i]->rc != ignore && first == 0)
				first = got[i]->rc;
		n -= (unsigned)r;
	}
	return first;
}

/* ---- superblock ------------------------------------------------------------- */

static const struct lode_key sb_key = {"sb", 2, "sb", 2};

static int sb_check(const uint8_t *b, uint32_t len, uint32_t *chunk)
{
	uint32_t v = 0, c = 0;

	if (len < SB_LEN || memcmp(b, FS_SB_MAGIC, 8) != 0)
		return -EUCLEAN;
	for (int i = 0; i < 4; i++) {
		v |= (uint32_t)b[8 + i] << (8 * i);
		c |= (uint32_t)b[12 + i] << (8 * i);
	}
	if (v != FS_SB_VERSION || c < FS_CHUNK_MIN || c > FS_CHUNK_MAX)
		return -EUCLEAN;
	*chunk = c;
	return 0;
}

/* Make the root (unless a mount that died half-way made it) and then the superblock. */
static int sb_create(lodefs_t *fs, struct fs_chan *ch, uint32_t chunk)
{
	uint8_t b[SB_LEN];
	struct fs_attr root;
	struct timespec now;
	int rc;

	rc = attr_fetch(ch, LODEFS_ROOT_INO, &root);
	if (rc == -ENOENT || rc == -EUCLEAN) {
		fs_now(&now);
		root = (struct fs_attr){
			.mode = S_IFDIR | 0755,
			.uid = fs->uid,
			.gid = fs->gid,
			.nlink = 2,
			.chunk = chunk,
			.parent = LODEFS_ROOT_INO,
			.gen = fs_ino_new(),
			.atime = now,
			.mtime = now,
			.ctime = now,
		};
		rc = attr_store(ch, LODEFS_ROOT_INO, &root);
	}
	if (rc < 0)
		return rc;
	fs_now(&now);
	memcpy(b, FS_SB_MAGIC, 8);
	for (int i = 0; i < 4; i++) {
		b[8 + i] = (uint8_t)(FS_SB_VERSION >> (8 * i));
		b[12 + i] = (uint8_t)(chunk >> (8 * i));
		b[24 + i] = (uint8_t)((uint32_t)now.tv_nsec >> (8 * i));
	}
	for (int i = 0; i < 8; i++)
		b[16 + i] = (uint8_t)((uint64_t)now.tv_sec >> (8 * i));
	return lode_obj_update(ch->cont, fs_oid(0), &sb_key, b, SB_LEN, NULL);
}

static int sb_load(lodefs_t *fs, struct fs_chan *ch)
{
	uint8_t b[256];
	uint32_t len = 0, chunk = fs->opts.chunk_size ? fs->opts.chunk_size : LODE_CHUNK_DEFAULT;
	int rc = lode_obj_fetch(ch->cont, fs_oid(0), LODE_EPOCH_MAX, &sb_key, b, sizeof(b), &len,
				NULL);

	if (rc == -ENOENT) {
		if ((rc = sb_create(fs, ch, chunk)) < 0)
			return rc;
		fs->chunk = chunk;
		return 0;
	}
	if (rc == -EOVERFLOW)
		return -EUCLEAN;
	if (rc < 0)
		return rc;
	if ((rc = sb_check(b, len, &chunk)) < 0)
		return rc;
	fs->chunk = fs->opts.chunk_size ? fs->opts.chunk_size : chunk;
	return 0;
}

/* ---- mount ------------------------------------------------------------------ */

static int opts_take(lodefs_t *fs, const struct lodefs_opts *o)
{
	const char *env;

	if (o)
		fs->opts = *o;
	/* Own the transport string first: fs_free frees it whatever happens next. */
	if (fs->opts.transport && !(fs->opts.transport = strdup(fs->opts.transport)))
		return -ENOMEM;
	if (fs->opts.chunk_size &&
	    (fs->opts.chunk_size < FS_CHUNK_MIN || fs->opts.chunk_size > FS_CHUNK_MAX))
		return -EINVAL;
	if (fs->opts.channels > 1024)
		return -EINVAL;
	fs->nchans = fs->opts.channels;
	if (!fs->nchans && (env = getenv("LODEFS_CHANNELS")) && *env) {
		char *end;
		unsigned long v = strtoul(env, &end, 10);

		if (*end == 0 && v >= 1 && v <= 1024)
			fs->nchans = (unsigned)v;
	}
	if (!fs->nchans)
		fs->nchans = 16;
	return 0;
}

static int cred_take(lodefs_t *fs)
{
	int n;

	fs->uid = geteuid();
	fs->gid = getegid();
	n = getgroups(0, NULL);
	if (n > 0) {
		if (!(fs->groups = calloc((size_t)n, sizeof(gid_t))))
			return -ENOMEM;
		n = getgroups(n, fs->groups);
	}
	fs->ngroups = n > 0 ? (unsigned)n : 0;
	fs->cred = (struct lodefs_cred){fs->uid, fs->gid, fs->ngroups, fs->groups};
	return 0;
}

static void fs_free(lodefs_t *fs)
{
	for (unsigned i = 0; fs->chans && i < fs->nchans; i++) {
		struct fs_chan *ch = &fs->chans[i];

		while (ch->neqs)
			lode_eq_destroy(ch->eqs[--ch->neqs]);
		if (ch->cont)
			lode_cont_close(ch->cont);
		if (ch->conn)
			lode_disconnect(ch->conn);
		pthread_mutex_destroy(&ch->mu);
		pthread_mutex_destroy(&ch->open_mu);
	}
	for (unsigned b = 0; b < FS_ICACHE_BUCKETS; b++)
		while (fs->ihash[b]) {
			struct fs_inode *in = fs->ihash[b];

			fs->ihash[b] = in->next;
			pthread_mutex_destroy(&in->mu);
			pthread_cond_destroy(&in->cv);
			free(in);
		}
	free(fs->chans);
	free(fs->groups);
	free((char *)fs->opts.transport);
	free(fs->addr);
	free(fs->container);
	pthread_mutex_destroy(&fs->imu);
	pthread_rwlock_destroy(&fs->ns_rw);
	free(fs);
}

int lodefs_mount(const char *addr, const char *container, const struct lodefs_opts *opts,
		 lodefs_t **fs_out)
{
	lodefs_t *fs;
	int rc;

	if (!container || !fs_out)
		return -EFAULT;
	if (!(fs = calloc(1, sizeof(*fs))))
		return -ENOMEM;
	pthread_mutex_init(&fs->imu, NULL);
	pthread_rwlock_init(&fs->ns_rw, NULL);
	fs->gen = __atomic_add_fetch(&fs_generation, 1, __ATOMIC_RELAXED);
	if ((rc = opts_take(fs, opts)) < 0 || (rc = cred_take(fs)) < 0)
		goto fail;
	fs->container = strdup(container);
	fs->addr = addr ? strdup(addr) : NULL;
	fs->chans = calloc(fs->nchans, sizeof(*fs->chans));
	if (!fs->container || (addr && !fs->addr) || !fs->chans) {
		rc = -ENOMEM;
		goto fail;
	}
	for (unsigned i = 0; i < fs->nchans; i++) {
		pthread_mutex_init(&fs->chans[i].mu, NULL);
		pthread_mutex_init(&fs->chans[i].open_mu, NULL);
	}
	if ((rc = chan_open(fs, &fs->chans[0])) < 0)
		goto fail;
	if (!fs->addr) {
		struct lode_conn_info info;

		if (lode_conn_query(fs->chans[0].conn, &info) == 0)
			fs->addr = strdup(info.server); /* NULL: lodefs_addr says "" */
	}
	if ((rc = sb_load(fs, &fs->chans[0])) < 0)
		goto fail;
	*fs_out = fs;
	return 0;
fail:
	fs_free(fs);
	return rc;
}

void fs_file_unlist(struct lodefs_file *f)
{
	lodefs_t *fs = f->fs;

	pthread_mutex_lock(&fs->imu);
	if (f->prev)
		f->prev->next = f->next;
	else if (fs->files == f)
		fs->files = f->next;
	if (f->next)
		f->next->prev = f->prev;
	f->prev = f->next = NULL;
	pthread_mutex_unlock(&fs->imu);
}

int lodefs_umount(lodefs_t *fs)
{
	int rc = 0, r;

	if (!fs)
		return -EFAULT;
	for (;;) {
		lodefs_file_t *f;

		pthread_mutex_lock(&fs->imu);
		f = fs->files;
		pthread_mutex_unlock(&fs->imu);
		if (!f)
			break;
		if ((r = lodefs_file_close(f)) < 0 && rc == 0)
			rc = r;
	}
	for (;;) {
		lodefs_dir_t *d;

		pthread_mutex_lock(&fs->imu);
		d = fs->dirs;
		pthread_mutex_unlock(&fs->imu);
		if (!d)
			break;
		lodefs_dir_close(d);
	}
	fs_free(fs);
	return rc;
}

const char *lodefs_addr(const lodefs_t *fs)
{
	return fs && fs->addr ? fs->addr : "";
}

const char *lodefs_container(const lodefs_t *fs)
{
	return fs ? fs->container : "";
}

int lodefs_statfs(lodefs_t *fs, struct statvfs *st)
{
	struct lode_target_status ts[256];
	struct lode_uuid u;
	struct fs_chan *ch;
	uint64_t cap = 0, used = 0, fsid = 0;
	int n;

	if (!fs || !st)
		return -EFAULT;
	ch = fs_chan(fs);
	if ((n = lode_status(ch->conn, ts, 256)) < 0)
		return n;
	for (int i = 0; i < n && i < 256; i++) {
		cap += ts[i].extent_cap;
		used += ts[i].extent_used < ts[i].extent_cap ? ts[i].extent_used : ts[i].extent_cap;
	}
	lode_cont_uuid(ch->cont, &u);
	for (int i = 0; i < 8; i++)
		fsid = fsid << 8 | (u.b[i] ^ u.b[8 + i]);
	memset(st, 0, sizeof(*st));
	st->f_bsize = 4096;
	st->f_frsize = 4096;
	st->f_blocks = cap / 4096;
	st->f_bfree = (cap - used) / 4096;
	st->f_bavail = st->f_bfree;
	/* Inodes are objects: there is no table to run out of. */
	st->f_files = 1ULL << 40;
	st->f_ffree = 1ULL << 40;
	st->f_favail = 1ULL << 40;
	st->f_fsid = (unsigned long)fsid;
	st->f_namemax = LODEFS_NAME_MAX;
	return 0;
}
