/*
 * The per-target storage engine: versioned objects on local media.
 *
 * One struct eng_target is one target: an in-memory ordered index of every
 * record, made durable by a write-ahead log (wal) and periodic checkpoints,
 * plus an extent file that holds values larger than the inline threshold.
 * See src/engine/README.md for the design and docs/decisions/ for why.
 *
 * Threading: a target is owned by one thread. No call may be made on the
 * same target from two threads at once; different targets are independent.
 *
 * Asynchrony: eng_update(), eng_fetch() and the other I/O calls take an
 * optional completion (cb, arg). With cb == NULL the call blocks until the
 * operation is complete and returns its result. With a cb the call returns 0
 * once the operation is queued (or a negative code if it was refused up
 * front, in which case cb is never called); cb(arg, rc) runs later from
 * inside eng_progress() on the owning thread. The caller's buffer belongs to
 * the engine until then: an update may read it, a fetch writes into it, up
 * to the callback. Callbacks may queue new operations but must not make
 * blocking calls (cb == NULL) on the same target. An update's cb runs only once
 * its data and metadata are durable (disk mode) or written to the RAM-backed
 * files (RAM mode); the update is visible to fetches from that moment on.
 *
 * Errors: 0 or a negative code (include/lode/errno.h). Every call may return
 *   -EFAULT         a required pointer argument was NULL
 *   -EINVAL         an argument is out of range (flags, epoch 0, ...)
 * and those listed with it.
 */
#ifndef LODE_ENGINE_H
#define LODE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "lode/errno.h"
#include "lode/types.h"

struct eng_target;

enum eng_mode {
	ENG_MODE_DISK = 0, /* durable: O_DIRECT extents, fdatasync group commit */
	ENG_MODE_RAM = 1,  /* files on tmpfs (or anywhere), mmap'd, no flushes */
};

struct eng_tgt_opts {
	const char *path;      /* directory of the target; created if missing */
	enum eng_mode mode;
	uint64_t capacity;     /* max size of the extent file; 0 = 1 GiB */
	uint32_t inline_max;   /* values <= this many bytes live in the index; 0 = 64 */
	uint64_t wal_size;     /* wal file size; 0 = 64 MiB (RAM) / 256 MiB (disk) */
	unsigned queue_depth;  /* io_uring entries; 0 = 256, at least 4 */
};

/*
 * Open (creating if needed) the target at opts->path. After a crash this
 * replays the log: every acknowledged update is back, no half-written update
 * is visible, and space leaked by unacknowledged updates is free again.
 * Errors: -ENOSPC (cannot create the files), -EIO, -LODE_ECORRUPT, -ENOMEM,
 * and errno values from open/mkdir.
 */
int eng_tgt_open(const struct eng_tgt_opts *opts, struct eng_target **tgt_out);

/* Wait for queued work, write a final log record, release everything. */
int eng_tgt_close(struct eng_target *tgt);

/*
 * Run completions: reap finished I/O, start a group commit if updates are
 * waiting, call completion callbacks. Never blocks. Returns the number of
 * callbacks run, or a negative code if the target failed.
 */
int eng_progress(struct eng_target *tgt);

/* Number of operations queued and not yet completed. */
unsigned eng_inflight(const struct eng_target *tgt);

typedef void (*eng_cb_t)(void *arg, int rc);

/* ---- containers and snapshots ---------------------------------------- */

/* Errors: -EEXIST. */
int eng_cont_create(struct eng_target *tgt, const struct lode_uuid *cont);
/* Destroys the container and everything in it. Errors: -LODE_ENOCONT. */
int eng_cont_destroy(struct eng_target *tgt, const struct lode_uuid *cont);
/* Fills up to max uuids; returns the total number of containers. */
int eng_cont_list(struct eng_target *tgt, struct lode_uuid *conts, unsigned max);

/* Retains epoch for reads. Errors: -LODE_ENOCONT, -EEXIST, -EINVAL (epoch 0 or MAX). */
int eng_snap_create(struct eng_target *tgt, const struct lode_uuid *cont, lode_epoch_t epoch);
/* Errors: -LODE_ENOCONT, -LODE_ENOSNAP. */
int eng_snap_destroy(struct eng_target *tgt, const struct lode_uuid *cont, lode_epoch_t epoch);
/* Fills up to max epochs in ascending order; returns the total. Errors: -LODE_ENOCONT. */
int eng_snap_list(struct eng_target *tgt, const struct lode_uuid *cont, lode_epoch_t *epochs,
		  unsigned max);

/* ---- objects ------------------------------------------------------------ */

/* Where an I/O lands. Keys are byte strings of 1..LODE_KEY_MAX bytes. */
struct eng_key {
	const struct lode_uuid *cont;
	struct lode_oid oid;
	const void *dkey;
	uint32_t dkey_len;
	const void *akey;
	uint32_t akey_len;
};

/*
 * Key validation, shared by every call below that takes a struct eng_key:
 *   -EFAULT          key, cont, dkey or akey NULL
 *   -LODE_EKEYEMPTY  dkey_len or akey_len is 0
 *   -ENAMETOOLONG    dkey_len or akey_len > LODE_KEY_MAX
 *   -LODE_ENOCONT    the container does not exist
 */

/*
 * Write a single value: the akey's whole value at epoch is buf[0..len).
 * A second update at the same epoch replaces the first.
 * Errors: -E2BIG (len > LODE_IO_MAX), -LODE_ETYPE (akey holds a byte array),
 * -ENOSPC, -EIO, -LODE_EBADTGT.
 */
int eng_sv_update(struct eng_target *tgt, const struct eng_key *key, lode_epoch_t epoch,
		  const void *buf, uint32_t len, eng_cb_t cb, void *arg);

/*
 * Read the single value visible at epoch (LODE_EPOCH_MAX: the latest) into
 * buf; *len_out is set to the value's full length even when it exceeds cap
 * (then only cap bytes are copied and -EOVERFLOW is returned). len_out must
 * stay valid until completion.
 * Errors: -ENOENT (no value visible: never written, or punched),
 * -LODE_ETYPE, -LODE_ECSUM, -EOVERFLOW, -EIO.
 */
int eng_sv_fetch(struct eng_target *tgt, const struct eng_key *key, lode_epoch_t epoch, void *buf,
		 uint32_t cap, uint32_t *len_out, eng_cb_t cb, void *arg);

/*
 * Write buf[0..len) at byte offset off of the akey's byte array.
 * Errors: -EOVERFLOW (off + len wraps), -E2BIG, -EINVAL (len 0),
 * -LODE_ETYPE, -ENOSPC, -EIO, -LODE_EBADTGT.
 */
int eng_arr_update(struct eng_target *tgt, const struct eng_key *key, lode_epoch_t epoch,
		   uint64_t off, const void *buf, uint32_t len, eng_cb_t cb, void *arg);

/*
 * Read [off, off+len) of the byte array as visible at epoch. Holes, punched
 * ranges and bytes past the end read as zeros.
 * Errors: -ENOENT (the akey has no visible extent at all), -EOVERFLOW,
 * -E2BIG, -LODE_ETYPE, -LODE_ECSUM, -EIO.
 */
int eng_arr_fetch(struct eng_target *tgt, const struct eng_key *key, lode_epoch_t epoch,
		  uint64_t off, void *buf, uint32_t len, eng_cb_t cb, void *arg);

/* Highest written byte + 1 of the byte array at epoch (0 if none). Blocks. */
int eng_arr_size(struct eng_target *tgt, const struct eng_key *key, lode_epoch_t epoch,
		 uint64_t *size_out);

/*
 * Punches: at epoch, remove what is named; reads at epoch or later see it
 * gone, reads at earlier epochs (snapshots) still see it.
 *   eng_obj_punch   the object (key->dkey and akey ignored; may be NULL)
 *   eng_dkey_punch  one dkey and every akey under it (akey ignored)
 *   eng_akey_punch  one akey
 *   eng_arr_punch   the range [off, off+len) of a byte array (reads as zeros)
 * Errors: key validation as above, -EOVERFLOW, -ENOSPC, -EIO.
 */
int eng_obj_punch(struct eng_target *tgt, const struct eng_key *key, lode_epoch_t epoch,
		  eng_cb_t cb, void *arg);
int eng_dkey_punch(struct eng_target *tgt, const struct eng_key *key, lode_epoch_t epoch,
		   eng_cb_t cb, void *arg);
int eng_akey_punch(struct eng_target *tgt, const struct eng_key *key, lode_epoch_t epoch,
		   eng_cb_t cb, void *arg);
int eng_arr_punch(struct eng_target *tgt, const struct eng_key *key, lode_epoch_t epoch,
		  uint64_t off, uint64_t len, eng_cb_t cb, void *arg);

/* ---- enumeration ------------------------------------------------------ */

/*
 * A resumable cursor. Zero it (or use ENG_ANCHOR_INIT) to start; each call
 * continues after the last item it returned; eof is set when nothing is
 * left. The anchor is plain data: it can be copied and sent over a wire.
 */
struct eng_anchor {
	uint8_t eof;
	uint16_t len;
	uint8_t key[2 + LODE_KEY_MAX];
};
#define ENG_ANCHOR_INIT {0}

/*
 * The epoch that lists every object, dkey and akey holding any record
 * under it, visible or not (punched ones too): the reclaim's walk, which
 * must find a dkey's punches to remove them (docs/decisions/0014), and a
 * rebuild's copy of snapshots, which must find what only a snapshot still
 * has. An object that holds nothing but its punches is listed too.
 */
#define ENG_EPOCH_ANY 0

/*
 * List objects of a container with something visible at epoch (or, at
 * ENG_EPOCH_ANY, with any record under a dkey). Fills up to max oids;
 * returns the number filled (0 with anchor->eof set at the end).
 */
int eng_obj_list(struct eng_target *tgt, const struct lode_uuid *cont, lode_epoch_t epoch,
		 struct eng_anchor *anchor, struct lode_oid *oids, unsigned max);

/*
 * List the dkeys of key->oid (eng_dkey_list) or the akeys of key->dkey
 * (eng_akey_list) visible at epoch (ENG_EPOCH_ANY: each with a record).
 * Keys are packed into buf as
 * [u16 little-endian length][bytes] one after another; returns the number of
 * keys packed. A key that does not fit in the remaining space ends the batch
 * (returns -EOVERFLOW if not even one fits).
 * Errors: key validation for the fields used, -EOVERFLOW.
 */
int eng_dkey_list(struct eng_target *tgt, const struct eng_key *key, lode_epoch_t epoch,
		  struct eng_anchor *anchor, void *buf, size_t buf_len);
int eng_akey_list(struct eng_target *tgt, const struct eng_key *key, lode_epoch_t epoch,
		  struct eng_anchor *anchor, void *buf, size_t buf_len);

/* ---- maintenance ------------------------------------------------------- */

/*
 * Aggregate versions with epoch <= hi (LODE_EPOCH_MAX: all) in cont: every
 * version that no snapshot and no read at the latest epoch can see is
 * removed, and its space freed once the removal is durable. Blocks.
 * Errors: -LODE_ENOCONT, -EIO.
 */
int eng_aggregate(struct eng_target *tgt, const struct lode_uuid *cont, lode_epoch_t hi);

/*
 * Remove everything of one dkey (key's container, object and dkey; the akey
 * is ignored) from the target: every version of every akey and the dkey's
 * punches, as if it had never been written here. Unlike a punch it leaves
 * nothing that would hide a later write at a low epoch: it is the reclaim
 * of a dkey the target no longer holds (docs/decisions/0014). Punches of
 * the whole object stay. Durable when it returns; blocks are freed then.
 * Errors: -LODE_ENOCONT, -LODE_EKEYEMPTY, -LODE_EBADTGT, -ENOMEM (the
 * target then fails: the removal may be half logged), -EIO.
 */
int eng_dkey_drop(struct eng_target *tgt, const struct eng_key *key);

/*
 * Fold the punches of key's object (key->dkey and akey ignored) into its
 * dkeys on the target: each dkey held here gets a dkey punch at each of the
 * object's punch epochs (durable first), then the object's punches go. Reads
 * of every dkey here see what they saw; a dkey copied here later (beneath,
 * at a low epoch) is not hidden by a punch made while it lived elsewhere
 * (the reclaim, docs/decisions/0014). 0 when the object has no punch here.
 * Errors: -LODE_ENOCONT, -LODE_EBADTGT, -ENOMEM, -EIO.
 */
int eng_obj_fold(struct eng_target *tgt, const struct eng_key *key);

struct eng_stats {
	uint64_t records;        /* index records (versions, punches, metadata) */
	uint64_t index_bytes;    /* heap bytes held by the index */
	uint64_t extent_used;    /* bytes allocated in the extent file */
	uint64_t extent_cap;     /* extent file capacity */
	uint64_t wal_used;       /* bytes in the current wal generation */
	uint64_t checkpoints;    /* checkpoints written since open */
	uint64_t flushes;        /* group commits since open */
	uint64_t flushed_updates;/* updates made durable by those group commits */
	uint64_t long_walks;     /* array reads that visited more than ENG_WALK_LONG versions
				  * (many small writes to one akey: aggregation merges them) */
	uint8_t direct_io;       /* extents use O_DIRECT (0: the file system refused it,
				  * buffered I/O plus the same flushes, or RAM mode) */
	uint8_t registered_bufs; /* io_uring I/O buffers are registered (fixed) */
};
int eng_tgt_stats(struct eng_target *tgt, struct eng_stats *st);
#define ENG_WALK_LONG 64

/*
 * Registered I/O buffers: memory the target has registered with io_uring
 * (and, in the server, with UCX). Updates and fetches whose buf lies in such
 * a buffer skip a bounce copy. size is rounded up to 4 KiB. NULL on failure.
 */
void *eng_buf_alloc(struct eng_target *tgt, size_t size);
void eng_buf_free(struct eng_target *tgt, void *buf);

/*
 * RAM mode: reserve extent space for a value of len bytes and return where
 * it goes, so that a server can land the value there directly (by RMA) and
 * the update skips its copy. Pass the pointer, filled, as the buf of the
 * eng_sv_update()/eng_arr_update() that follows, with a len no larger: the
 * update takes the space (even if its callback later reports an error).
 * If that call is refused up front, or never made, give the space back with
 * eng_buf_free(). NULL in disk mode, for values that would be inline, or
 * when there is no space; callers then use eng_buf_alloc().
 */
void *eng_value_reserve(struct eng_target *tgt, uint32_t len);

/*
 * The region eng_buf_alloc() carves buffers from, so that a network layer can
 * register it once (loded registers it with UCX). *base is NULL and *len 0
 * when the target has no such region (no io_uring, or its memory was refused).
 */
void eng_buf_region(struct eng_target *tgt, void **base, size_t *len);

#endif
