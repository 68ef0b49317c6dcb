/*
 * lode-fuse's internals, shared by its files: the daemon's state (struct
 * lfuse), the request handlers (ops.c, dir.c), and the thread that sends
 * the kernel cache invalidations (inval.c). main.c owns the command line,
 * the mount and the session loop. README.md says how the pieces fit.
 */
#ifndef LODE_FUSE_LFUSE_H
#define LODE_FUSE_LFUSE_H

#define FUSE_USE_VERSION 312

#include <fuse_lowlevel.h>
#include <stdbool.h>
#include <stdint.h>

#include "lode/lodefs.h"

/* What the kernel may keep in its page cache (-o cache=). */
enum lfuse_cache {
	LFUSE_CACHE_NONE,   /* direct I/O: every read and write reaches liblodefs */
	LFUSE_CACHE_AUTO,   /* cached while open, dropped at open and when mtime/size change */
	LFUSE_CACHE_ALWAYS, /* kept across opens; only user.lode.invalidate drops it */
};

/* The largest read or write one request carries: liblodefs's chunk size. */
#define LFUSE_IO_MAX (1u << 20)

/* The xattr on the root that names the system and container behind a mount. */
#define LFUSE_XATTR_MOUNT "user.lode.mount"
/* Setting it on an inode drops the kernel's cached attributes and pages. */
#define LFUSE_XATTR_INVALIDATE "user.lode.invalidate"

struct lfuse_inval;

/* The daemon: one mounted container behind one FUSE session. */
struct lfuse {
	lodefs_t *fs;
	struct fuse_session *se;
	struct lfuse_inval *inval;   /* NULL until the session loop starts */
	char *mount_xattr;           /* "<server address> <container label>" */
	double attr_timeout;         /* seconds, -o attr_timeout= */
	double entry_timeout;        /* seconds, -o entry_timeout= */
	double negative_timeout;     /* seconds, -o negative_timeout= */
	enum lfuse_cache cache;
	bool writeback;              /* -o writeback: the kernel's write-back cache */
	bool kernel_checks;          /* -o default_permissions: the kernel checked first */
};

/* The request handlers, for fuse_session_new(). */
extern const struct fuse_lowlevel_ops lfuse_ops;

/*
 * The errno a reply carries for a liblodefs return code rc < 0: Lode's own
 * codes, connection failures and a lost engine (EHOSTDOWN) become EIO
 * (ENOTCONN stays: the connection failed for good), and ENOSYS, which the
 * kernel takes as "never ask again", too.
 */
int lfuse_errno(int rc);

/* Entry attributes for a reply: inode, attributes and the cache timeouts. */
void lfuse_entry_fill(const struct lfuse *lf, const struct stat *st,
		      struct fuse_entry_param *e);

/* ---- dir.c: open directories and their offsets ------------------------- */

void lfuse_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void lfuse_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		   struct fuse_file_info *fi);
void lfuse_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi);
void lfuse_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);

/* ---- credentials -------------------------------------------------------- */

#define LFUSE_GROUPS_INLINE 32

/*
 * A request's credentials as liblodefs takes them. Supplementary groups
 * cost a read of /proc per request, so they are loaded only when an answer
 * can depend on them: lfuse_cred_retry() loads them after a refusal and
 * says to try again; lfuse_cred_groups() loads them up front.
 */
struct lfuse_cred {
	struct lodefs_cred c;
	fuse_req_t req;
	bool loaded;                 /* groups are in c (or cannot be had) */
	gid_t *heap;                 /* groups beyond the inline array */
	gid_t inline_groups[LFUSE_GROUPS_INLINE];
};

void lfuse_cred_init(struct lfuse_cred *cr, fuse_req_t req);
void lfuse_cred_groups(struct lfuse_cred *cr);
bool lfuse_cred_retry(struct lfuse_cred *cr, int rc);
void lfuse_cred_done(struct lfuse_cred *cr);

/* ---- poll.c: the poll loop --------------------------------------------- */

/*
 * Serve the session on npollers threads (the calling thread is the first)
 * until it ends: unmounted, or a signal on the calling thread. Requests
 * other than reads go to worker threads, at most max_workers, max_idle of
 * them kept idle. Returns 0, or a negative errno when /dev/fuse could not
 * be read or set up.
 */
int lfuse_poll_serve(struct lfuse *lf, unsigned npollers, unsigned max_workers,
		     unsigned max_idle);

/* The calling poller's queue of reads in flight; NULL off a poller. */
lode_eq_t *lfuse_poller_eq(void);

/* A read or write was started on the calling poller's queue. */
void lfuse_poller_started(void);

/*
 * Keep the buffer the calling poller's current request lies in (a write's
 * data) past the handler: the poller reads its next request into another.
 * NULL when out of memory. lfuse_poller_release gives it back.
 */
void *lfuse_poller_hold(void);
void lfuse_poller_release(void *hold);

/* Reply to a read or write that completed (ops.c); frees what its handler allocated. */
void lfuse_aio_done(struct lodefs_aio *a);

/* ---- inval.c: invalidations sent outside the request handlers ----------- */

/*
 * Start the thread that tells the kernel to drop cached state. The kernel
 * may hold the very inode's lock while a handler runs, so a handler must
 * not notify itself; it posts here and replies. Errors: -ENOMEM, -EAGAIN.
 */
int lfuse_inval_start(struct fuse_session *se, struct lfuse_inval **out);

/*
 * Queue an invalidation of ino's attributes and pages; with name (may be
 * NULL), also of the name in directory ino. Never blocks on the kernel.
 * Errors: -ENOMEM (dropped).
 */
int lfuse_inval_post(struct lfuse_inval *q, uint64_t ino, const char *name);

/*
 * Stop the thread, drop what is still queued and free q. Call it after the
 * session is unmounted: a notification can wait on pages that only the
 * (now stopped) request threads would release, until the unmount ends them.
 */
void lfuse_inval_stop(struct lfuse_inval *q);

#endif
