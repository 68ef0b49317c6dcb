/*
 * liblodefs: a POSIX namespace over the objects of one Lode container.
 *
 * A mounted container (lodefs_t) holds directories, regular files,
 * symlinks, hard links and special files with their mode, owner, times and
 * extended attributes. Every inode is one object: a regular file's bytes
 * are a byte array chunked over dkeys (1 MiB chunks unless the file or the
 * container says otherwise), so one large file spreads over every target; a
 * directory maps names to entries. src/fs/README.md gives the layout.
 *
 * Two ways in:
 *   - by inode number, as the FUSE daemon works: lodefs_lookup(),
 *     lodefs_create(), lodefs_open() ... Inode numbers are stable for the
 *     life of the inode; the root is LODEFS_ROOT_INO.
 *   - by path, as programs and the preload library work: lodefs_path_*().
 *     Paths are resolved from the container's root ("/a/b" and "a/b" are
 *     the same); symbolic links are followed except where a call says not.
 *
 * Credentials: calls that check permissions take a `const struct
 * lodefs_cred *`; NULL means the credentials lodefs_mount() recorded (the
 * mounting process's effective uid, gid and groups). uid 0 passes every
 * check except execute on a file with no execute bit, as on Linux.
 *
 * Errors: every call returns 0 (or a count, where stated) or a negative
 * errno value, or a negative LODE_E* code from lode/errno.h; the POSIX
 * calls return exactly what the corresponding system call would set errno
 * to, negated. Any call may also return the connection errors listed in
 * lode/lode.h (-EHOSTDOWN, -ETIMEDOUT, -ECONNRESET, -ENOTCONN, -EPROTO), -ENOMEM and
 * -EIO.
 *
 * Threads: every call is thread-safe. An instance keeps several
 * connections to the server and gives each calling thread one of them, so
 * threads do not wait for each other's I/O (lodefs_opts.channels).
 *
 * Consistency: within one instance every call sees the effects of every
 * call that returned before it. Between instances (processes), a change is
 * visible to calls that start after it returned, except that a file's size
 * and times, cached while the file is open, are refreshed when a read
 * reaches the cached end of the file, on lodefs_file_stat(), and on open
 * (close-to-open). Namespace operations are not atomic across a crash of the
 * calling process: src/fs/README.md says what a crash can leave behind.
 *
 * Durability: a write is durable when it returns (Lode acknowledges only
 * durable updates); lodefs_file_sync() makes the file's cached attributes
 * (size, mtime) durable too, and closing a file does the same.
 */
#ifndef LODE_LODEFS_H
#define LODE_LODEFS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "lode/lode.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lodefs lodefs_t;           /* a mounted container */
typedef struct lodefs_file lodefs_file_t; /* an open regular file */
typedef struct lodefs_dir lodefs_dir_t;   /* an open directory stream */

#define LODEFS_ROOT_INO 1ULL  /* the root directory's inode number */
#define LODEFS_NAME_MAX 255   /* longest name in a directory, in bytes */
#define LODEFS_PATH_MAX 4096  /* longest path or symlink target, with its NUL */
#define LODEFS_XATTR_NAME_MAX 255
#define LODEFS_XATTR_SIZE_MAX 65536
#define LODEFS_SYMLOOP_MAX 40 /* symlinks followed in one resolution */

/* Who is asking. groups[0..ngroups) are supplementary groups. */
struct lodefs_cred {
	uid_t uid;
	gid_t gid;
	unsigned ngroups;
	const gid_t *groups;
};

struct lodefs_opts {
	const char *transport; /* lode_conn_opts.transport; NULL: the server's best */
	unsigned timeout_ms;   /* lode_conn_opts.timeout_ms; 0: the default */
	unsigned channels;     /* connections shared by calling threads; 0: $LODEFS_CHANNELS, else 16 */
	uint32_t chunk_size;   /* chunk size of files this instance creates; 0: the container's */
};

/*
 * Mount the container labelled `container` of the system at addr (NULL:
 * found as lode_connect() finds it). A container with no file system yet
 * gets one: a root directory owned by the caller, mode 0755, and the chunk
 * size opts->chunk_size (0: 1 MiB) as its default. Blocks.
 * Errors: -LODE_ENOCONT, -ECONNREFUSED (no server), -EINVAL (bad options),
 * -EUCLEAN (the file system's superblock is damaged or of an unknown
 * version). Objects that other APIs put in the same container are left
 * alone: the file system uses only objects of type LODE_OT_FS.
 */
int lodefs_mount(const char *addr, const char *container, const struct lodefs_opts *opts,
		 lodefs_t **fs_out);

/*
 * Unmount: make cached attributes durable, close open files and
 * directories left open, and disconnect. fs is freed even on error. Blocks.
 */
int lodefs_umount(lodefs_t *fs);

/* The address and container label the instance mounted (for display). */
const char *lodefs_addr(const lodefs_t *fs);
const char *lodefs_container(const lodefs_t *fs);

/* Capacity and use of the container's targets. Blocks. */
int lodefs_statfs(lodefs_t *fs, struct statvfs *st);

/* ---- by inode number ---------------------------------------------------- */

/*
 * Find name in directory parent and fill *st (st_ino is the inode number).
 * Errors: -ENOENT, -ENOTDIR (parent is not a directory), -EACCES (no search
 * permission on parent), -ENAMETOOLONG.
 */
int lodefs_lookup(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t parent,
		  const char *name, struct stat *st);

/* Attributes of an inode. Errors: -ENOENT (no such inode, or it was removed). */
int lodefs_getattr(lodefs_t *fs, uint64_t ino, struct stat *st);

/* What lodefs_setattr() changes: any combination. */
enum {
	LODEFS_SET_MODE = 1 << 0,      /* st_mode's permission bits (07777) */
	LODEFS_SET_UID = 1 << 1,
	LODEFS_SET_GID = 1 << 2,
	LODEFS_SET_SIZE = 1 << 3,      /* truncate or extend (regular files) */
	LODEFS_SET_ATIME = 1 << 4,     /* st_atim */
	LODEFS_SET_MTIME = 1 << 5,     /* st_mtim */
	LODEFS_SET_ATIME_NOW = 1 << 6,
	LODEFS_SET_MTIME_NOW = 1 << 7,
	LODEFS_SET_CTIME = 1 << 8,     /* st_ctim (otherwise ctime becomes now) */
};

/*
 * Change the attributes named by `set` to those in *in; *out (may be NULL)
 * gets the result. Permission rules are chmod(2), chown(2), truncate(2) and
 * utimensat(2)'s; a chown by non-root and a write by non-owner clear the
 * setuid/setgid bits as Linux does.
 * Errors: -EPERM, -EACCES, -EISDIR (size of a directory), -EINVAL, -EFBIG,
 * -ENOENT.
 */
int lodefs_setattr(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t ino,
		   const struct stat *in, unsigned set, struct stat *out);

/*
 * Permission check as access(2): mask is F_OK or any of R_OK, W_OK, X_OK.
 * Errors: -EACCES, -ENOENT.
 */
int lodefs_access(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t ino, int mask);

/*
 * Make a directory entry. lodefs_mknod makes regular files, FIFOs, sockets
 * and device nodes (mode's type bits; rdev for devices). *st (may be NULL)
 * gets the new inode's attributes. The owner is cred's uid; the group is
 * cred's gid, or the parent's if the parent has the setgid bit.
 * Errors: -EEXIST, -ENOENT (parent removed), -ENOTDIR, -EACCES (no write or
 * search permission on parent), -ENAMETOOLONG, -EINVAL (bad name: empty,
 * ".", "..", or containing '/'), -ENOSPC.
 */
int lodefs_mknod(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t parent,
		 const char *name, mode_t mode, dev_t rdev, struct stat *st);
int lodefs_mkdir(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t parent,
		 const char *name, mode_t mode, struct stat *st);
/* target: 1..LODEFS_PATH_MAX-1 bytes, stored as given. */
int lodefs_symlink(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t parent,
		   const char *name, const char *target, struct stat *st);

/*
 * Copy a symlink's target into buf (not NUL-terminated when it fills cap)
 * and return its length. Errors: -EINVAL (not a symlink), -ENOENT.
 */
int lodefs_readlink(lodefs_t *fs, uint64_t ino, char *buf, size_t cap);

/*
 * A new name for ino in newparent. Errors: as lodefs_mknod, and -EPERM (ino
 * is a directory), -EMLINK (too many links).
 */
int lodefs_link(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t ino, uint64_t newparent,
		const char *newname, struct stat *st);

/*
 * Remove a name. The inode goes when its last name is removed and the last
 * open file on it in this instance is closed (unlink while open works).
 * Errors: -ENOENT, -ENOTDIR, -EACCES, -EPERM (sticky directory not owned,
 * or unlink of a directory: -EISDIR), -ENOTEMPTY (rmdir), -EBUSY (rmdir of
 * the root), -EINVAL (rmdir of ".").
 */
int lodefs_unlink(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t parent,
		  const char *name);
int lodefs_rmdir(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t parent,
		 const char *name);

/* Flags of lodefs_rename(): the values of renameat2(2)'s. */
#define LODEFS_RENAME_NOREPLACE (1u << 0)
#define LODEFS_RENAME_EXCHANGE (1u << 1)

/*
 * rename(2) / renameat2(2): move name in parent to newname in newparent,
 * replacing what is there (a file by a file, a directory by an empty
 * directory), unless flags say NOREPLACE (-EEXIST if it exists) or EXCHANGE
 * (swap the two; both must exist). Renaming onto itself succeeds.
 * Errors: -ENOENT, -EEXIST, -ENOTDIR, -EISDIR, -ENOTEMPTY, -EINVAL (moving
 * a directory under itself, or both flags), -EACCES, -EPERM (sticky),
 * -EBUSY (the root).
 */
int lodefs_rename(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t parent,
		  const char *name, uint64_t newparent, const char *newname, unsigned flags);

/* ---- extended attributes ------------------------------------------------ */

/*
 * Names are up to LODEFS_XATTR_NAME_MAX bytes, values up to
 * LODEFS_XATTR_SIZE_MAX. Any namespace prefix is stored as given.
 * flags: 0, XATTR_CREATE (-EEXIST if present), XATTR_REPLACE (-ENODATA if
 * absent). get returns the value's length (with cap 0: just the length);
 * list returns the NUL-separated names' total length (cap 0 likewise).
 * Errors: -ENODATA, -ERANGE (cap too small; or, as Linux's setxattr(2), a
 * name that is empty or longer than LODEFS_XATTR_NAME_MAX), -E2BIG (value
 * too large), -EPERM/-EACCES (Linux's rules per namespace: "user." needs
 * read or write permission and exists on regular files and directories
 * only, "trusted." is root's), -EOPNOTSUPP (a name outside the "user.",
 * "trusted." and "security." namespaces; "system.", i.e. ACLs, included).
 * The name "lode.chunk_size" reads and, on an empty regular file, sets the
 * file's chunk size (decimal text; -EBUSY once the file has data; see
 * src/fs/README.md).
 */
int lodefs_xattr_set(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t ino,
		     const char *name, const void *value, size_t size, int flags);
int lodefs_xattr_get(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t ino,
		     const char *name, void *buf, size_t cap);
int lodefs_xattr_list(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t ino, char *buf,
		      size_t cap);
int lodefs_xattr_remove(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t ino,
			const char *name);

/* ---- regular files ------------------------------------------------------ */

/*
 * Open an existing inode. flags: O_RDONLY, O_WRONLY or O_RDWR, and
 * O_TRUNC, O_APPEND (every write goes to the end); other flags are ignored.
 * Errors: -EACCES, -EISDIR (a directory opened for writing; directories are
 * read with lodefs_dir_open), -ELOOP (a symlink), -ENXIO (a FIFO, socket
 * or device), -ENOENT.
 */
int lodefs_open(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t ino, int flags,
		lodefs_file_t **file_out);

/*
 * Create name in parent and open it (as open(2) with O_CREAT): if it exists,
 * -EEXIST with O_EXCL, else it is opened as lodefs_open() would. *st (may
 * be NULL) gets the attributes. Errors: those of lodefs_mknod and
 * lodefs_open.
 */
int lodefs_create(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t parent,
		  const char *name, int flags, mode_t mode, struct stat *st,
		  lodefs_file_t **file_out);

/*
 * Read up to len bytes at off; returns the number read, short only at the
 * end of the file (0 at or past it). Holes read as zeros.
 * Errors: -EBADF (not open for reading).
 */
ssize_t lodefs_file_read(lodefs_file_t *f, void *buf, size_t len, uint64_t off);
ssize_t lodefs_file_readv(lodefs_file_t *f, const struct iovec *iov, int iovcnt, uint64_t off);

/*
 * Asynchronous reads and writes, for a server that keeps many in flight on
 * one thread (lode-fuse's poll loop). The caller owns a struct lodefs_aio
 * from lodefs_aio_read or lodefs_aio_write until lodefs_aio_reap returns
 * it, and keeps buf and the file open that long.
 */
struct lodefs_aio {
	void *user;  /* the caller's, untouched */
	ssize_t rc;  /* once reaped: bytes read or written, or an error */
	struct {     /* the library's */
		lode_event_t ev;
		lodefs_file_t *f;
		size_t len;
		uint64_t seq;
		bool write, extend, kill;
	} priv;
};

/*
 * Start reading up to len bytes at off into buf, as lodefs_file_read does,
 * on the calling thread's connection; completion is reported on eq (any
 * lode_eq_create queue; lodefs_aio_reap takes it). Returns 0 when the read
 * is in flight; 1 when it needed no I/O (at or past the end of the file:
 * a->rc is 0, nothing to reap); or an error, with nothing in flight. Blocks
 * only when the read reaches the size this instance has cached: it fetches
 * the size first (another instance may have written further).
 * Errors: those of lodefs_file_read, -EFAULT (NULL f, eq, a, or buf with
 * len), -ENOMEM.
 */
int lodefs_aio_read(lodefs_file_t *f, void *buf, size_t len, uint64_t off, lode_eq_t *eq,
		    struct lodefs_aio *a);

/*
 * Start writing len bytes of buf at off, as lodefs_file_write does (at the
 * end of the file when it was opened O_APPEND), on the calling thread's
 * connection; completion is reported on eq. Returns 0 when the write is in
 * flight; 1 when there was nothing to write (len 0: a->rc is 0); or an
 * error, with nothing in flight. A write that extends the file stores the
 * new size when it is reaped, after its data (lodefs_file_write stores both
 * at once), so reaping it waits for that round trip.
 * Errors: those of lodefs_file_write, -EFAULT, -ENOMEM.
 */
int lodefs_aio_write(lodefs_file_t *f, const void *buf, size_t len, uint64_t off, lode_eq_t *eq,
		     struct lodefs_aio *a);

/*
 * The reads and writes started on eq that have completed, at most max of
 * them, into done[]; never waits for a server (it moves the connections
 * along once), but a reaped write that extended its file stores the size
 * first. Each one's rc is set. Use eq for lodefs_aio calls alone. Returns
 * how many, or -EFAULT.
 */
int lodefs_aio_reap(lode_eq_t *eq, struct lodefs_aio **done, unsigned max);

/*
 * Write len bytes at off (at the end of the file when opened O_APPEND; then
 * off is ignored) and return len. *end_out (may be NULL) gets the offset
 * just past the bytes written, which is what an O_APPEND writer's file
 * position becomes. Concurrent writers to distinct ranges never lose bytes.
 * Errors: -EBADF (not open for writing), -EFBIG (past the largest size,
 * 2^63 - 1), -ENOSPC.
 */
ssize_t lodefs_file_write(lodefs_file_t *f, const void *buf, size_t len, uint64_t off,
			  uint64_t *end_out);
ssize_t lodefs_file_writev(lodefs_file_t *f, const struct iovec *iov, int iovcnt, uint64_t off,
			   uint64_t *end_out);

/* Truncate or extend to size. Errors: -EBADF (not open for writing), -EFBIG. */
int lodefs_file_truncate(lodefs_file_t *f, uint64_t size);

/* Make the file's cached size and times durable (data already is). */
int lodefs_file_sync(lodefs_file_t *f, int datasync);

/* Attributes, refreshed from the server and merged with this instance's changes. */
int lodefs_file_stat(lodefs_file_t *f, struct stat *st);

/* The inode number of an open file. */
uint64_t lodefs_file_ino(const lodefs_file_t *f);

/*
 * Close: as lodefs_file_sync, then release the handle (freed even on
 * error). Removes the inode if this was the last open of an unlinked file.
 */
int lodefs_file_close(lodefs_file_t *f);

/* ---- directories -------------------------------------------------------- */

struct lodefs_dirent {
	uint64_t ino;
	unsigned char type; /* DT_REG, DT_DIR, DT_LNK, ... */
	char name[LODEFS_NAME_MAX + 1];
};

/* Errors: -ENOTDIR, -EACCES (no read permission), -ENOENT. */
int lodefs_dir_open(lodefs_t *fs, const struct lodefs_cred *cred, uint64_t ino,
		    lodefs_dir_t **dir_out);

/*
 * The next entries (never "." or ".."), up to max; returns how many, 0 at
 * the end. The stream is a cursor: directories of any size are read in
 * constant memory. lodefs_dir_read_plus also fills st[i] for each entry
 * (fetched in parallel). Entries added or removed while reading may or may
 * not be seen; none is returned twice.
 */
int lodefs_dir_read(lodefs_dir_t *d, struct lodefs_dirent *ents, unsigned max);
int lodefs_dir_read_plus(lodefs_dir_t *d, struct lodefs_dirent *ents, struct stat *st,
			 unsigned max);

/* Start the stream again from the first entry. */
void lodefs_dir_rewind(lodefs_dir_t *d);

/* The directory's own inode number. */
uint64_t lodefs_dir_ino(const lodefs_dir_t *d);

int lodefs_dir_close(lodefs_dir_t *d);

/* ---- by path ------------------------------------------------------------ */

/* What lodefs_path_resolve() does with a final symlink. */
#define LODEFS_NOFOLLOW 1u

/*
 * Resolve path to an inode number. Errors: -ENOENT, -ENOTDIR, -EACCES,
 * -ELOOP, -ENAMETOOLONG.
 */
int lodefs_path_resolve(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
			unsigned flags, uint64_t *ino_out);

/*
 * Resolve every component but the last: *parent_out gets the directory and
 * name (LODEFS_NAME_MAX + 1 bytes) the last component. Trailing slashes are
 * dropped. Errors: as lodefs_path_resolve, -EINVAL ("/" has no last
 * component).
 */
int lodefs_path_parent(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
		       uint64_t *parent_out, char *name);

/* The path calls below are their inode-number twins after resolution. */
int lodefs_path_stat(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
		     struct stat *st);
int lodefs_path_lstat(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
		      struct stat *st);
/* open(2): flags as lodefs_open plus O_CREAT, O_EXCL, O_NOFOLLOW, O_DIRECTORY. */
int lodefs_path_open(lodefs_t *fs, const struct lodefs_cred *cred, const char *path, int flags,
		     mode_t mode, lodefs_file_t **file_out);
int lodefs_path_mkdir(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
		      mode_t mode);
int lodefs_path_unlink(lodefs_t *fs, const struct lodefs_cred *cred, const char *path);
int lodefs_path_rmdir(lodefs_t *fs, const struct lodefs_cred *cred, const char *path);
int lodefs_path_rename(lodefs_t *fs, const struct lodefs_cred *cred, const char *from,
		       const char *to, unsigned flags);
int lodefs_path_link(lodefs_t *fs, const struct lodefs_cred *cred, const char *from,
		     const char *to);
int lodefs_path_symlink(lodefs_t *fs, const struct lodefs_cred *cred, const char *target,
			const char *path);
int lodefs_path_readlink(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
			 char *buf, size_t cap);
int lodefs_path_truncate(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
			 uint64_t size);
int lodefs_path_chmod(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
		      mode_t mode);
/* uid or gid (uid_t)-1 / (gid_t)-1: leave unchanged. Does not follow a final symlink
 * when flags has LODEFS_NOFOLLOW. */
int lodefs_path_chown(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
		      uid_t uid, gid_t gid, unsigned flags);
/* times as utimensat(2): UTIME_NOW and UTIME_OMIT work; NULL means both now. */
int lodefs_path_utimens(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
			const struct timespec times[2], unsigned flags);
int lodefs_path_access(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
		       int mask);
int lodefs_path_opendir(lodefs_t *fs, const struct lodefs_cred *cred, const char *path,
			lodefs_dir_t **dir_out);

#ifdef __cplusplus
}
#endif
#endif
