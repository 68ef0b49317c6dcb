/*
 * liblode-preload.so's internal interfaces, shared by its source files.
 *
 *   real.c   the libc functions the preload stands in front of, found with
 *            dlsym(RTLD_NEXT); start-up, the on/off decision, fork
 *            handlers, debug output, counters
 *   mount.c  which kernel file systems are Lode FUSE mounts
 *            (/proc/self/mountinfo), and one liblodefs instance per mount,
 *            mounted on first use and replaced after fork or a lost server
 *   fdtab.c  the table from file descriptor to open file description
 *   posix.c  the intercepted POSIX calls (open, read, write, ...)
 *   stdio.c  fopen/fdopen: stdio streams over the intercepted descriptors
 *
 * Nothing here is exported from the shared object: exports.map names the
 * intercepted symbols, and everything else is hidden.
 */
#ifndef LODE_PRELOAD_H
#define LODE_PRELOAD_H

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "lode/lodefs.h"
#include "preload/lode_preload.h"

_Static_assert(sizeof(off_t) == 8, "the preload assumes a 64-bit off_t (x86_64, aarch64)");

#define PL_HIDDEN __attribute__((visibility("hidden")))

/* ---- real.c: the functions behind ours -------------------------------- */

/*
 * The next definition of each intercepted function (libc's, or a
 * sanitizer's that in turn calls libc's). Until pl_init() resolved them,
 * the ones a resolution could conceivably need hold raw-syscall
 * stand-ins; the others are NULL and their wrappers fail with ENOSYS.
 */
struct pl_real {
	int (*open)(const char *, int, ...);
	int (*openat)(int, const char *, int, ...);
	int (*creat)(const char *, mode_t);
	ssize_t (*read)(int, void *, size_t);
	ssize_t (*write)(int, const void *, size_t);
	ssize_t (*readv)(int, const struct iovec *, int);
	ssize_t (*writev)(int, const struct iovec *, int);
	ssize_t (*pread)(int, void *, size_t, off_t);
	ssize_t (*pwrite)(int, const void *, size_t, off_t);
	ssize_t (*preadv)(int, const struct iovec *, int, off_t);
	ssize_t (*pwritev)(int, const struct iovec *, int, off_t);
	ssize_t (*preadv2)(int, const struct iovec *, int, off_t, int);
	ssize_t (*pwritev2)(int, const struct iovec *, int, off_t, int);
	off_t (*lseek)(int, off_t, int);
	int (*fstat)(int, struct stat *);
	int (*fxstat)(int, int, struct stat *);
	int (*fstatat)(int, const char *, struct stat *, int);
	int (*fxstatat)(int, int, const char *, struct stat *, int);
	int (*statx)(int, const char *, int, unsigned, struct statx *);
	int (*ftruncate)(int, off_t);
	int (*fsync)(int);
	int (*fdatasync)(int);
	int (*close)(int);
	int (*close_range)(unsigned, unsigned, int);
	void (*closefrom)(int);
	int (*dup)(int);
	int (*dup2)(int, int);
	int (*dup3)(int, int, int);
	int (*fcntl)(int, int, ...);
	void *(*mmap)(void *, size_t, int, int, int, off_t);
	FILE *(*fopen)(const char *, const char *);
	FILE *(*fdopen)(int, const char *);
};
extern struct pl_real pl_real PL_HIDDEN;

/*
 * Nesting depth of the calling thread inside the preload's own work
 * (liblodefs, UCX, mountinfo parsing): calls made from in there go straight
 * to libc. initial-exec: reading it must not allocate (a preloaded library
 * always gets static TLS).
 */
extern __thread int pl_inside PL_HIDDEN __attribute__((tls_model("initial-exec")));

/*
 * Resolve the real functions and decide whether this process intercepts
 * at all (LODE_PRELOAD_DISABLE, the Lode daemons themselves). Idempotent,
 * cheap after the first call; safe to call from any wrapper at any time.
 */
void pl_init(void) PL_HIDDEN;

/*
 * Whether the calling thread should route this call through the preload:
 * initialised, enabled, and not already inside the preload. Calls pl_init.
 */
bool pl_active(void) PL_HIDDEN;

/* Enter/leave the preload's own work (see pl_inside). */
static inline void pl_enter(void)
{
	pl_inside++;
}
static inline void pl_leave(void)
{
	pl_inside--;
}

/*
 * Set in a child forked from a process that had started UCX: nothing is
 * intercepted there any more (see real.c on fork).
 */
extern bool pl_bypass PL_HIDDEN;

/* Set once this process has started UCX (its first lodefs_mount). */
extern _Atomic bool pl_ucx_used PL_HIDDEN;

/* LODE_PRELOAD_DEBUG=1: one line per decision on stderr. */
extern bool pl_debug_on PL_HIDDEN;
void pl_debug(const char *fmt, ...) PL_HIDDEN __attribute__((format(printf, 1, 2)));

/* Counters behind lode_preload_stats(). */
enum pl_stat {
	PL_ST_OPENS,
	PL_ST_OPENS_PASSED,
	PL_ST_READS,
	PL_ST_WRITES,
	PL_ST_BYTES_READ,
	PL_ST_BYTES_WRITTEN,
	PL_ST_MOUNTS,
	PL_ST_REOPENS,
	PL_ST_ERRORS,
	PL_ST_COUNT
};
/*
 * In stripes two cache lines apart: a thread counts in its own stripe
 * (given on its first count), so that threads on different cores do not
 * pass one line back and forth twice per I/O. A reader sums the stripes.
 */
#define PL_STAT_STRIPES 16
struct pl_stat_stripe {
	_Atomic uint64_t n[PL_ST_COUNT];
} __attribute__((aligned(128)));
extern struct pl_stat_stripe pl_stats[PL_STAT_STRIPES] PL_HIDDEN;
/* The calling thread's stripe, plus one (0: none yet). */
extern __thread unsigned pl_stat_mine PL_HIDDEN __attribute__((tls_model("initial-exec")));
unsigned pl_stat_pick(void) PL_HIDDEN;
static inline void pl_stat_add(enum pl_stat s, uint64_t n)
{
	unsigned i = pl_stat_mine ? pl_stat_mine : pl_stat_pick();

	atomic_fetch_add_explicit(&pl_stats[i - 1].n[s], n, memory_order_relaxed);
}
/* Counter s over every stripe. */
uint64_t pl_stat_get(enum pl_stat s) PL_HIDDEN;

/* Monotonic clock in nanoseconds. */
int64_t pl_now_ns(void) PL_HIDDEN;

/* ---- mount.c: Lode mounts and their liblodefs instances --------------- */

struct pl_mount;

/*
 * The Lode mount that kernel file (st_dev dev) lies on, or NULL when it is
 * on some other file system. fd is the open kernel descriptor (fstatfs
 * tells an unknown FUSE mount from anything else). Blocks briefly (reads
 * /proc/self/mountinfo at most once a second, or when a FUSE file system
 * appears that was not mounted at the last read).
 */
struct pl_mount *pl_mount_find(dev_t dev, int fd) PL_HIDDEN;

/*
 * The mount's liblodefs instance, mounted now if it is not yet (or was
 * lost to fork or a failed connection), and its epoch: handles opened in an
 * older epoch belong to a dead instance. NULL when the mount is passed
 * through to FUSE (no server reachable, no "user.lode.mount" attribute),
 * for now; a later call tries again after a pause. Blocks on first use.
 */
lodefs_t *pl_mount_fs(struct pl_mount *m, unsigned *epoch_out) PL_HIDDEN;

/* The current epoch: a handle of an older one must be opened again. */
unsigned pl_mount_epoch(const struct pl_mount *m) PL_HIDDEN;

/*
 * A call on the instance of `epoch` failed with connection error rc: give
 * that instance up (it is leaked, never freed, since other threads may be
 * inside it) so that the next use mounts a fresh one.
 */
void pl_mount_lost(struct pl_mount *m, unsigned epoch, int rc) PL_HIDDEN;

/* Whether rc says the connection to the server is gone. */
bool pl_conn_error(int rc) PL_HIDDEN;

/* Fork handlers: keep the mount table consistent across fork. */
void pl_mount_fork_prepare(void) PL_HIDDEN;
void pl_mount_fork_parent(void) PL_HIDDEN;
void pl_mount_fork_child(void) PL_HIDDEN;

/* ---- fdtab.c: descriptors and open file descriptions ------------------ */

/* One liblodefs handle of a description, opened in one mount epoch. */
struct pl_handle {
	lodefs_file_t *f;
	int flags;              /* what it was opened with: O_ACCMODE | O_APPEND */
	unsigned epoch;
	struct pl_handle *next; /* on the description's or the global retired list */
};

/*
 * An open file description served by liblodefs, shared by every descriptor
 * dup'd from the first one (as the kernel shares its own). The file offset
 * is not here: it lives in the kernel descriptor.
 *
 * Lifetime: refs counts table slots plus callers inside an operation;
 * nfds counts table slots only. At refs 0 the handles are closed and the
 * memory goes back to a free list: descriptions are never returned to
 * malloc, so a reader that loaded a stale pointer from the table can still
 * look at its refs safely (see pl_fd_get).
 */
struct pl_desc {
	_Atomic unsigned refs;
	_Atomic unsigned nfds;
	pthread_mutex_t lock;          /* offset-moving I/O, handle swaps, flags */
	_Atomic(struct pl_handle *) h; /* the handle in use */
	struct pl_handle *retired;     /* older handles, closed at the end; under lock */
	struct pl_mount *mnt;
	uint64_t ino;
	_Atomic int flags;             /* O_ACCMODE | O_APPEND; changed under lock */
	dev_t dev;                     /* st_dev the kernel reports, for fstat */
	_Atomic bool dirty;            /* written since the last sync (see pl_desc_flush) */
	_Atomic bool kstale;           /* written since the kernel last fetched the size */
	struct pl_desc *free_next;
};

/* A fresh description (refs 1, nfds 0), or NULL when out of memory. */
struct pl_desc *pl_desc_alloc(void) PL_HIDDEN;

/* Take and drop a reference. The last drop closes the handles. */
void pl_desc_hold(struct pl_desc *d) PL_HIDDEN;
void pl_desc_put(struct pl_desc *d) PL_HIDDEN;

/*
 * The description behind fd with a reference taken, or NULL when fd is not
 * served by the preload. Lock-free; the caller must pl_desc_put() it.
 */
struct pl_desc *pl_fd_get(int fd) PL_HIDDEN;

/*
 * The description in fd's slot without a reference, or NULL: only for
 * reading its flags where nothing may allocate or block (a memory hook).
 * The memory stays valid (descriptions are never freed) but may already
 * serve another descriptor.
 */
struct pl_desc *pl_fd_peek(int fd) PL_HIDDEN;

/*
 * Make fd refer to d (takes its own reference). Whatever stale description
 * the slot held (its fd was closed behind the preload's back) is dropped.
 * Returns false when fd is beyond the table (the fd is then left to FUSE).
 */
bool pl_fd_install(int fd, struct pl_desc *d) PL_HIDDEN;

/*
 * Take fd out of the table and return its description, whose slot
 * reference the caller now owns (drop it with pl_desc_put), or NULL.
 * *last is set when fd was the description's last descriptor.
 */
struct pl_desc *pl_fd_remove(int fd, bool *last) PL_HIDDEN;

/* Call fn for every descriptor in the table (no references taken). */
void pl_fd_foreach(void (*fn)(int fd, struct pl_desc *d, void *arg), void *arg) PL_HIDDEN;

/* Fork handlers of the table's own locks. */
void pl_fd_fork_prepare(void) PL_HIDDEN;
void pl_fd_fork_parent(void) PL_HIDDEN;
void pl_fd_fork_child(void) PL_HIDDEN;

/* ---- posix.c ------------------------------------------------------------ */

/*
 * The preload's open: the real open through FUSE, then the description if
 * the result is a regular file on a Lode mount. Returns the fd or -1/errno
 * like open(2). Used by the stdio layer too.
 */
int pl_open(int dirfd, const char *path, int flags, mode_t mode) PL_HIDDEN;

/* read/write/lseek/close of a descriptor, intercepted or not (-1/errno). */
ssize_t pl_read(int fd, void *buf, size_t len) PL_HIDDEN;
ssize_t pl_write(int fd, const void *buf, size_t len) PL_HIDDEN;
off_t pl_lseek(int fd, off_t off, int whence) PL_HIDDEN;
int pl_close(int fd) PL_HIDDEN;

/*
 * Before the last descriptor of a description that was written goes away
 * (close, dup2 over it, exit): make liblodefs' cached size durable and tell
 * lode-fuse through the kernel descriptor to drop what the kernel caches
 * of the file. Errors are ignored: the data itself is durable already.
 */
void pl_desc_flush(int fd, struct pl_desc *d) PL_HIDDEN;

/*
 * fd is about to be mapped: if liblodefs wrote past what the kernel knows
 * of the file, make the kernel fetch its size (one statx, nothing else:
 * called from inside UCX's memory hooks too, where nothing may allocate).
 */
void pl_mmap_prepare(int fd) PL_HIDDEN;

/* At exit: flush every description that was written. */
void pl_posix_exit(void) PL_HIDDEN;

/*
 * Fork of a process using UCX: before, flush every written description;
 * in the child, have the kernel fetch the attributes of every inherited
 * Lode file again, since the child will use them through FUSE.
 */
void pl_posix_fork_prepare(void) PL_HIDDEN;
void pl_posix_fork_child(void) PL_HIDDEN;

#endif
