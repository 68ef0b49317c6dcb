/*
 * liblodefs internals shared by its files:
 *
 *   mount.c   instances, channels (connections per thread), the superblock,
 *             statfs
 *   inode.c   the attribute record, the in-memory inode and its attribute
 *             transactions, permission checks, directory entries
 *   ns.c      the inode-number namespace calls (lookup ... rename)
 *   file.c    open files: read, write, truncate, sync, close
 *   dir.c     directory streams
 *   xattr.c   extended attributes
 *   path.c    the path calls: resolution, then the inode-number twins
 *
 * Only include/lode/lode.h is called below this layer.
 */
#ifndef LODE_FS_FS_H
#define LODE_FS_FS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "lode/lode.h"
#include "lode/lodefs.h"

#define FS_SB_MAGIC "lodefs\0\0" /* 8 bytes at the start of the superblock */
#define FS_SB_VERSION 1u
#define FS_ATTR_VERSION 1u
#define FS_ATTR_LEN 92u          /* bytes of a version-1 attribute record */
#define FS_ENTRY_LEN 9u          /* u64 ino, u8 type */
#define FS_CHUNK_MIN 4096u       /* smallest chunk: keeps chunk dkeys' first byte 0 */
#define FS_CHUNK_MAX LODE_IO_MAX
#define FS_SIZE_MAX ((uint64_t)INT64_MAX)
#define FS_LINK_MAX 65000u       /* as ext4's EXT4_LINK_MAX */
#define FS_DIRTY_NS 1000000000LL /* cached times older than this are flushed */
#define FS_ICACHE_BUCKETS 1024u
#define FS_BATCH 128u            /* requests kept in flight by one call */

/* The attribute record of an inode (dkey "i", akey "a"), decoded. */
struct fs_attr {
	uint32_t mode, uid, gid, nlink, chunk;
	uint64_t size, rdev, parent, gen;
	struct timespec atime, mtime, ctime;
};

/* One connection with its opened container; threads are bound to one. */
struct fs_chan {
	pthread_mutex_t mu;      /* guards eqs */
	pthread_mutex_t open_mu; /* making this channel's connection */
	lode_conn_t *conn;
	lode_cont_t *cont;
	lode_eq_t *eqs[8];  /* idle event queues, reused by calls on this channel */
	unsigned neqs;
};

/*
 * An inode in memory. It exists while something refers to it: an open file
 * or directory, or a call working on it. Its attributes (a) are a cache,
 * kept current while the inode is open. Every change of the attribute
 * record made by this instance is a transaction (inode_begin ... inode_end)
 * and transactions of one inode run one at a time (busy), so that no
 * update of this instance is lost to another.
 */
struct fs_inode {
	struct fs_inode *next; /* hash chain, under fs->imu */
	uint64_t ino;
	unsigned refs;         /* under fs->imu */
	pthread_mutex_t mu;    /* guards everything below */
	pthread_cond_t cv;     /* busy cleared, done_seq advanced */
	unsigned opens;        /* open files and directories */
	unsigned file_opens;   /* of those, files */
	bool valid;            /* a holds the record (as of the last transaction) */
	bool busy;             /* a transaction runs */
	bool orphan;           /* unlinked while open here: remove at last close */
	struct fs_attr a;
	/* Writes past the durable size register here and wait for done_seq. */
	uint64_t seq, done_seq, want_size;
	/* Times changed here and not yet stored (writes that did not extend, reads). */
	bool mtime_dirty, atime_dirty;
	uint64_t dirty_gen;
	struct timespec dirty_since;
	bool kill_suid;        /* a write by non-root: clear setuid/setgid at the next store */
	/*
	 * What a read needs, copied from a under mu by file_publish and read
	 * without the lock (threads reading one file would all queue on mu).
	 */
	uint64_t rd_size;        /* a.size */
	uint32_t rd_chunk;       /* a.chunk */
	int64_t rd_quiet_until;  /* ns: a read before this leaves atime alone; 0: it looks */
};

struct lodefs {
	char *addr;
	char *container;
	struct lodefs_opts opts;
	uint64_t gen;              /* instance generation: keys the thread bindings */
	uint32_t chunk;            /* chunk size of new files */
	uid_t uid;
	gid_t gid;
	unsigned ngroups;
	gid_t *groups;
	struct lodefs_cred cred;   /* the mounter's, for NULL creds */
	unsigned nchans;
	struct fs_chan *chans;     /* nchans, made lazily (chans[0] at mount) */
	unsigned next_chan;        /* round robin, atomic */
	pthread_rwlock_t ns_rw;    /* rename: write; other namespace changes: read */
	pthread_mutex_t imu;       /* the inode hash and the open lists */
	struct fs_inode *ihash[FS_ICACHE_BUCKETS];
	struct lodefs_file *files; /* open files, for umount */
	struct lodefs_dir *dirs;
};

struct lodefs_file {
	lodefs_t *fs;
	struct fs_inode *in;
	int flags;
	uid_t uid;                 /* the opener's: decides setuid clearing on write */
	bool rd, wr, append, isdir;
	struct lodefs_file *prev, *next;
};

/* ---- mount.c ---- */
struct fs_chan *fs_chan(lodefs_t *fs);
lode_eq_t *fs_eq_get(struct fs_chan *ch);
void fs_eq_put(struct fs_chan *ch, lode_eq_t *eq);
/* Wait for n events submitted on eq; returns the first failure other than ignore, else 0. */
int fs_eq_wait(lode_eq_t *eq, unsigned n, int ignore);
const struct lodefs_cred *fs_cred(lodefs_t *fs, const struct lodefs_cred *cred);
uint64_t fs_ino_new(void);
void fs_now(struct timespec *ts);
void fs_file_unlist(struct lodefs_file *f);
void fs_dir_unlist(struct lodefs_dir *d);

/* ---- inode.c ---- */
struct lode_oid fs_oid(uint64_t ino);
void attr_encode(const struct fs_attr *a, uint8_t out[FS_ATTR_LEN]);
int attr_decode(const uint8_t *in, uint32_t len, struct fs_attr *a);
int attr_fetch(struct fs_chan *ch, uint64_t ino, struct fs_attr *a);
int attr_store(struct fs_chan *ch, uint64_t ino, const struct fs_attr *a);
void attr_to_stat(uint64_t ino, const struct fs_attr *a, struct stat *st);

struct fs_inode *inode_get(lodefs_t *fs, uint64_t ino);
struct fs_inode *inode_find(lodefs_t *fs, uint64_t ino);
void inode_put(lodefs_t *fs, struct fs_inode *in);
/*
 * An attribute transaction: inode_begin waits for the inode's previous one,
 * fetches the record into t->r and (TXN_STORE) merges this instance's
 * pending changes into it; the caller checks and changes t->r; inode_end
 * stores it (TXN_STORE and rc 0), updates the cache and lets the next one
 * run. inode_end with rc < 0 stores nothing and returns rc; with rc > 0 it
 * stores and adopts nothing and returns 0.
 */
enum { TXN_STORE, TXN_READ };
struct fs_txn {
	int mode;
	uint64_t seq, dgen;
	struct fs_attr r;
};
int inode_begin(struct fs_chan *ch, struct fs_inode *in, int mode, struct fs_txn *t);
int inode_end(struct fs_chan *ch, struct fs_inode *in, struct fs_txn *t, int rc);
int inode_sync(struct fs_chan *ch, struct fs_inode *in, bool force_read);
bool inode_dirty(struct fs_inode *in);
/* Under in->mu, after in->a changed: refresh the copies reads take without the lock. */
void file_publish(struct fs_inode *in);

bool cred_in_group(const struct lodefs_cred *c, gid_t gid);
int perm_check(const struct lodefs_cred *c, const struct fs_attr *a, int mask);
int sticky_check(const struct lodefs_cred *c, const struct fs_attr *dir,
		 const struct fs_attr *victim);
int name_check(const char *name, bool create);

struct fs_entry {
	uint64_t ino;
	uint8_t type;
};
int entry_key(const char *name, uint8_t *buf, struct lode_key *k);
int entry_get(struct fs_chan *ch, uint64_t dir, const char *name, struct fs_entry *e);
int entry_put(struct fs_chan *ch, uint64_t dir, const char *name, const struct fs_entry *e);
int entry_del(struct fs_chan *ch, uint64_t dir, const char *name);
void entry_decode(const uint8_t *v, struct fs_entry *e);
/*
 * One request of several in flight together (issued on eq, then waited for
 * with fs_eq_wait): its key and value live here until it completes.
 */
struct fs_areq {
	lode_event_t ev;
	uint8_t key[LODEFS_NAME_MAX + 1];
	uint8_t val[128];
	uint32_t len;
};
int attr_fetch_ev(struct fs_chan *ch, lode_eq_t *eq, uint64_t ino, struct fs_areq *r);
int attr_fetch_done(struct fs_areq *r, struct fs_attr *a);
int entry_get_ev(struct fs_chan *ch, lode_eq_t *eq, uint64_t dir, const char *name,
		 struct fs_areq *r);
int entry_get_done(struct fs_areq *r, struct fs_entry *e);
int entry_put_ev(struct fs_chan *ch, lode_eq_t *eq, uint64_t dir, const char *name,
		 const struct fs_entry *e, struct fs_areq *r);
int dir_empty(struct fs_chan *ch, uint64_t ino);
int obj_remove(struct fs_chan *ch, uint64_t ino);

/* ---- file.c ---- */
int file_truncate_locked(struct fs_chan *ch, struct fs_inode *in, struct fs_attr *r,
			 uint64_t size);
int file_open_inode(lodefs_t *fs, struct fs_chan *ch, const struct lodefs_cred *c,
		    uint64_t ino, int flags, bool created, lodefs_file_t **out);
void inode_open_release(lodefs_t *fs, struct fs_chan *ch, struct fs_inode *in, bool file);

/* ---- ns.c ---- */
int ns_lookup(lodefs_t *fs, struct fs_chan *ch, const struct lodefs_cred *c, uint64_t parent,
	      const char *name, uint64_t *ino, struct fs_attr *a);
int ns_make(lodefs_t *fs, const struct lodefs_cred *c, uint64_t parent, const char *name,
	    mode_t mode, dev_t rdev, const char *target, bool excl, struct stat *st,
	    uint64_t *ino_out, bool *created);

#endif
