/*
 * liblode: the native client of Lode.
 *
 * A connection (lode_conn_t) reaches one loded and every target it serves,
 * over UCX: `tcp`, `shm` (same host) or `rdma`. Containers are opened by
 * label; objects inside them are addressed by a 128-bit id (lode_oid_make()
 * in lode/types.h), then a dkey (which decides the target) and an akey
 * (which names a value). A value is either a single value, replaced whole,
 * or a byte array written and read at offsets. On top of those sit a
 * key-value API (lode_kv_*) and a byte-array API (lode_array_*) that chunks
 * a large array over dkeys so that it spreads over every target.
 *
 * Errors: every call returns 0 (or a count, where stated) or a negative code
 * from lode/errno.h; lode_strerror() names it. Besides those listed with
 * each call, any call may return
 *   -EFAULT        a required pointer was NULL
 *   -EINVAL        an argument is out of range
 *   -ENOMEM        out of memory
 *   -ENOTCONN      the connection cannot move data: it is being closed, its
 *                  capability expired while the management service was
 *                  away and it cannot log in again (its secret was passed
 *                  in lode_conn_opts, which is not kept; its credentials
 *                  are gone; the service refused: connect again), or a
 *                  target found no session for it
 *   -ETIMEDOUT     the server did not answer within the connection's timeout
 *   -ECONNRESET    the server went away while the request was in flight
 *   -EHOSTDOWN     the engine holding the data is lost (it died, went away
 *                  or stopped answering within the timeout) or DOWN, and no
 *                  replica can serve the request. The connection goes on:
 *                  it connects a lost engine again once the engine is back
 *                  (a loded restarted on the same address), so the same
 *                  call made later may succeed. A write in flight when
 *                  its engine is lost may wait up to one more timeout for
 *                  a map that says why before it fails
 *   -EPROTO        the server sent something this client cannot parse
 *
 * Asynchrony: every call that moves data takes `lode_event_t *ev`. With ev
 * NULL the call blocks until the operation completes and returns its result.
 * With an event (initialised by lode_event_init() on an event queue) the call
 * returns 0 once the request is sent, or a negative code if it was refused up
 * front (then the event is not completed); the result arrives later in
 * ev->rc, reported by lode_eq_poll(). Buffers passed to an asynchronous call
 * belong to the library until its event completes. Many requests may be in
 * flight on one connection.
 *
 * Threads: every call is thread-safe. A connection serialises the threads
 * that use it around one UCX worker, so for parallel throughput give each
 * thread its own connection. Objects are never locked: concurrent writers
 * to the same value are ordered by the server (the last one to reach the
 * owning target wins).
 *
 * Timeouts: a request that gets no answer within the timeout (10 s by
 * default, lode_conn_opts.timeout_ms or $LODE_TIMEOUT_MS), or whose server
 * dies (seen as soon as the transport notices on tcp and rdma, within
 * 100 ms on shm, where the client watches the server's process), loses
 * that engine: its requests fail with -EHOSTDOWN (reads of replicated
 * objects go to another replica instead; a write may wait one more timeout
 * for a map that says why) and the connection goes on, with one engine as
 * with many. Calls that reach every target (object punch, listings,
 * snapshots, container creation and destruction) fail with -EHOSTDOWN
 * while a target the map has serving is lost, rather than skip it; a
 * container's or a snapshot's creation also while an engine the map has
 * serving never answered this connection (it would never have them). The
 * connection connects a lost engine again once it is back (docs/decisions/
 * 0016). If the management service stays away longer than a third of the
 * capability's life (10 minutes by default), the connection's capability
 * expires; it logs in again once the service is back, with the
 * credentials found again (the file, the environment, the node's agent).
 * One whose secret was passed in lode_conn_opts cannot, and fails:
 * -LODE_ECAPEXPIRED in flight, -ENOTCONN after; connect again. No call
 * waits forever.
 */
#ifndef LODE_LODE_H
#define LODE_LODE_H

#include <stddef.h>
#include <stdint.h>

#include "lode/errno.h"
#include "lode/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lode_conn lode_conn_t;
typedef struct lode_cont lode_cont_t;
typedef struct lode_eq lode_eq_t;

/* ---- connections ------------------------------------------------------- */

#define LODE_PORT_DEFAULT 7420

struct lode_conn_opts {
	/* "auto" (shm when the server is on this host, else rdma, else tcp),
	 * "tcp", "shm" or "rdma". NULL: $LODE_TRANSPORT, else "auto". */
	const char *transport;
	/* Per-request timeout. 0: $LODE_TIMEOUT_MS, else 10000. */
	unsigned timeout_ms;
	/* Who connects. NULL: $LODE_USER and $LODE_SECRET, else the credentials
	 * file $LODE_CREDENTIALS names, else ~/.config/lode/credentials (lines
	 * "user: NAME", "secret: TEXT", optionally "mgmt: HOST:PORT", "tls_ca:
	 * FILE", "pool: NAME"). A secret given here is not kept: such a
	 * connection cannot log in again after a long outage (above). */
	const char *user;
	const char *secret;
	/* The pool to work in. NULL: $LODE_POOL, else the file's, else "default". */
	const char *pool;
};

/*
 * Connect to the loded at addr ("host", "host:port" or "[v6]:port"; NULL:
 * $LODE_ADDR, else the address in the file named by $LODE_ADDR_FILE, else
 * the one `make up` wrote to $XDG_STATE_HOME/lode/addr (default
 * ~/.local/state/lode/addr), else
 * "127.0.0.1:7420"), and authenticate to its management service, which
 * answers with a capability every request carries. opts may be NULL.
 * Blocks. Errors: -ECONNREFUSED (nothing listens there), -EHOSTUNREACH,
 * -EPROTONOSUPPORT (the transport is unknown, not built into UCX, or the
 * server does not offer it), -EPROTO (the peer is not a loded or speaks
 * another protocol version), -ETIMEDOUT, -LODE_EAUTH (no credentials, or
 * wrong ones), -ENOENT (no such pool), -EACCES (no rights on the pool).
 */
int lode_connect(const char *addr, const struct lode_conn_opts *opts, lode_conn_t **conn_out);

/*
 * Why the last lode_connect on this thread failed, in the words of whoever
 * refused it (the management service, lode-agent), e.g. "user t/bob is
 * revoked"; "" when it succeeded or nobody said more than its error code.
 * The string is the thread's own, valid until its next lode_connect.
 */
const char *lode_last_error(void);

/*
 * Close a connection. Requests still in flight complete with -ECANCELED
 * first (their events are reported by lode_eq_poll on their queues, which
 * must outlive the connection's requests). Containers opened on it must be
 * closed before. Always returns 0.
 */
int lode_disconnect(lode_conn_t *conn);

/* What lode_conn_query() reports about the connection and its server. */
struct lode_conn_info {
	char transport[16];       /* the transport in use: "tcp", "shm" or "rdma" */
	char bulk[8];             /* how large values move: "rma" or "am" */
	unsigned ntargets;        /* targets the server has */
	uint32_t inline_max;      /* values up to this size travel inside messages */
	char server[256];         /* the address connected to */
	uint32_t map_version;     /* the pool map version requests are placed with now */
};
int lode_conn_query(lode_conn_t *conn, struct lode_conn_info *info);

/* One target's state, as lode_status() reports it. */
struct lode_target_status {
	uint64_t records;          /* index records */
	uint64_t extent_used;      /* bytes allocated in the extent file */
	uint64_t extent_cap;       /* extent file capacity */
	uint64_t requests;         /* requests served since the server started */
	uint64_t errors;           /* of those, answered with an error */
	uint64_t cpu_ns;           /* CPU time of the target's thread */
	uint8_t ram;               /* RAM mode */
	uint8_t direct_io;         /* extents use O_DIRECT */
};

/*
 * Ask every target for its state; fills up to max entries and returns the
 * number of targets. Blocks.
 */
int lode_status(lode_conn_t *conn, struct lode_target_status *st, unsigned max);

/* ---- registered buffers ------------------------------------------------ */

/*
 * Memory registered with the transport: I/O whose buffer lies in such a
 * buffer moves by single-copy shared memory (shm) or zero-copy RDMA with no
 * registration per request. Any other memory works too, through a
 * registration made for that one request. NULL on failure.
 */
void *lode_buf_alloc(lode_conn_t *conn, size_t size);
void lode_buf_free(lode_conn_t *conn, void *buf);

/* ---- events and event queues ------------------------------------------ */

/*
 * An event tracks one asynchronous call. It is the caller's memory; the
 * library uses the private part between the call and its completion.
 */
typedef struct lode_event {
	int rc;          /* the call's result, valid once the event completed */
	void *user;      /* the caller's, untouched by the library */
	struct {
		lode_eq_t *eq;
		void *req;
		struct lode_event *next;
		int state;
		uint64_t aux[4];
	} priv;
} lode_event_t;

/* Create an event queue. Errors: -ENOMEM. */
int lode_eq_create(lode_eq_t **eq_out);

/* Destroy a queue. Errors: -EBUSY (events are still in flight). */
int lode_eq_destroy(lode_eq_t *eq);

/*
 * Attach ev to eq, ready for one call; again once lode_eq_poll reported it.
 * Zero an event before its first init (`lode_event_t ev = {0};`): any other
 * memory is almost surely taken as idle, but only zeroes are sure to be.
 * Errors: -EBUSY (ev is in flight, or completed and not yet reported).
 */
int lode_event_init(lode_event_t *ev, lode_eq_t *eq);

/*
 * Drive every connection that has requests for this queue and return up to
 * max completed events in evs (each is reported once). Waits until at least
 * min events completed or timeout_us passed (0: do not wait; -1: no limit,
 * though every request still ends by its connection's timeout). Returns the
 * number of events stored.
 */
int lode_eq_poll(lode_eq_t *eq, unsigned min, unsigned max, int64_t timeout_us,
		 lode_event_t **evs);

/* Events attached to eq and not yet reported by lode_eq_poll. */
unsigned lode_eq_inflight(lode_eq_t *eq);

/* ---- containers and snapshots ----------------------------------------- */

#define LODE_LABEL_MAX 127 /* longest container label, in bytes */

/*
 * Containers belong to the connection's pool and are named, owned (by the
 * creator's tenant) and listed by the management service; access follows
 * its ACLs.
 *
 * Create a container named label (1..LODE_LABEL_MAX bytes of letters,
 * digits, '.', '-', '_') with the system's default properties. uuid_out
 * may be NULL. Blocks. Errors: -EEXIST, -EINVAL (bad label), -ENOSPC,
 * -EACCES (no write right on the pool), -EHOSTDOWN (an engine the pool
 * map has serving does not answer: nothing is left made; try again once
 * it answers or the map has it DOWN), -EPROTONOSUPPORT (such an engine
 * does not offer the connection's transport), -E2BIG (the pool has more
 * engines or targets than a connection holds).
 */
int lode_cont_create(lode_conn_t *conn, const char *label, struct lode_uuid *uuid_out);

/* Destroy a container and everything in it. Blocks. Errors: -LODE_ENOCONT,
 * -EACCES (no admin right on it). */
int lode_cont_destroy(lode_conn_t *conn, const char *label);

/*
 * List the labels of the pool's containers the caller has some right on:
 * copies up to max labels (each NUL-terminated) into labels and returns
 * the number of such containers. Blocks.
 */
int lode_cont_list(lode_conn_t *conn, char (*labels)[LODE_LABEL_MAX + 1], unsigned max);

/*
 * Open a container for I/O: the management service grants a capability for
 * it with the caller's rights, which every request on it carries (a request
 * the rights do not cover fails with -LODE_ECAPRIGHTS). Blocks. Errors:
 * -LODE_ENOCONT, -EACCES (no right on it).
 *
 * Encrypted containers (created with the `encryption` property, `lode cont
 * create --encrypt`) are sealed in this library with AES-256-GCM under a
 * data key that only holders of the owner's tenant key can unwrap; the
 * tenant key is read from the file $LODE_TENANT_KEY names, else the
 * credentials file's "tenant_key: FILE" line, else
 * ~/.config/lode/tenant.key (`lode keygen`; 64 hex digits, mode 0600).
 * Opening one also fails with -ENOKEY (no tenant key), -EKEYREJECTED (a
 * key that does not unwrap it), -EACCES (a key file others may read),
 * -EINVAL (a key file that holds no key). What changes for callers of an
 * encrypted container:
 *   - data that was changed on a storage node reads as -LODE_ECSUM, with
 *     the buffer zeroed (so does a byte-array block whose write was cut
 *     short by a crash between its data and its tag: see decision 0007);
 *   - lode_obj_fetch with a value longer than cap gives -EOVERFLOW and the
 *     length but leaves buf zeroed (only a whole value can be checked);
 *   - values are at most LODE_IO_MAX - 28 bytes; akeys of byte arrays at
 *     most LODE_KEY_MAX - 4 bytes (each has a sibling akey holding its
 *     blocks' tags, which lode_akey_list shows);
 *   - writes to a byte array that cover a 4 KiB block in part read it
 *     first; concurrent writers to one 4 KiB block may lose each other's
 *     bytes or leave it reading -LODE_ECSUM;
 *   - range punches and the reads of read-modify-writes run synchronously
 *     even with an event (the event then completes at once).
 * Sizes, offsets, keys and the results of every call are otherwise as in
 * any container.
 */
int lode_cont_open(lode_conn_t *conn, const char *label, lode_cont_t **cont_out);

/* Close an opened container (its requests must have completed). Returns 0. */
int lode_cont_close(lode_cont_t *cont);

/* The container's uuid. */
void lode_cont_uuid(const lode_cont_t *cont, struct lode_uuid *uuid_out);

/*
 * Take a snapshot: every read at the returned epoch sees the container as it
 * was when the snapshot was taken, until the snapshot is destroyed. Blocks.
 * An erasure-coded write or punch is in a snapshot whole or not at all:
 * new EC writes and punches of the container wait while the ones in
 * flight finish (usually under a millisecond), then EC arrays a writer
 * left half written (it died or failed mid-write) are mended, as their
 * next writer would mend them, so that the snapshot's stripes all have
 * matching parity (one that cannot be, with a data member lost, is left
 * as it is), and the snapshot is taken at an epoch above every target's
 * clock. Errors: -EHOSTDOWN, -EPROTONOSUPPORT, -E2BIG (as for
 * lode_cont_create; a snapshot some targets took already is destroyed
 * again where reachable), -EBUSY (an EC write held its array's lease for
 * three request timeouts; the lease of a writer that died runs out after
 * four), -EPROTO (a target's list of torn arrays is malformed), or a
 * mend's error.
 */
int lode_snap_create(lode_cont_t *cont, lode_epoch_t *epoch_out);
/* Errors: -LODE_ENOSNAP. Blocks. */
int lode_snap_destroy(lode_cont_t *cont, lode_epoch_t epoch);
/* Copies up to max snapshot epochs, ascending; returns their number. Blocks. */
int lode_snap_list(lode_cont_t *cont, lode_epoch_t *epochs, unsigned max);

/*
 * Merge and remove versions that no snapshot and no reader of the latest
 * state can see, on every target, freeing their space. Blocks.
 */
int lode_cont_aggregate(lode_cont_t *cont);

/* ---- objects: dkeys, akeys, values ------------------------------------ */

/*
 * Where a value lives: dkey (1..LODE_KEY_MAX bytes) picks the target, akey
 * (1..LODE_KEY_MAX bytes) names the value under it.
 */
struct lode_key {
	const void *dkey;
	uint32_t dkey_len;
	const void *akey;
	uint32_t akey_len;
};

/*
 * Key errors shared by the calls below: -LODE_EKEYEMPTY (a length of 0),
 * -ENAMETOOLONG (a length above LODE_KEY_MAX).
 */

/*
 * Replace the single value at key with buf[0..len) (len may be 0).
 * Durable when it completes. Errors: -E2BIG (len > LODE_IO_MAX),
 * -LODE_ETYPE (the akey holds a byte array), -ENOSPC, -EIO.
 */
int lode_obj_update(lode_cont_t *cont, struct lode_oid oid, const struct lode_key *key,
		    const void *buf, uint32_t len, lode_event_t *ev);

/*
 * Read the single value at key as of epoch (LODE_EPOCH_MAX: the latest) into
 * buf. *len_out (which must stay valid until completion) gets the value's
 * full length; a value longer than cap fills buf and fails with -EOVERFLOW.
 * Errors: -ENOENT, -LODE_ETYPE, -LODE_ECSUM, -EOVERFLOW, -EIO.
 */
int lode_obj_fetch(lode_cont_t *cont, struct lode_oid oid, lode_epoch_t epoch,
		   const struct lode_key *key, void *buf, uint32_t cap, uint32_t *len_out,
		   lode_event_t *ev);

/*
 * Write buf[0..len) at byte offset off of the byte array at key.
 * Errors: -EOVERFLOW (off + len wraps), -E2BIG, -EINVAL (len 0),
 * -LODE_ETYPE, -ENOSPC, -EIO.
 */
int lode_obj_write(lode_cont_t *cont, struct lode_oid oid, const struct lode_key *key,
		   uint64_t off, const void *buf, uint32_t len, lode_event_t *ev);

/*
 * Read [off, off+len) of the byte array at key as of epoch; holes read as
 * zeros. Errors: -ENOENT (nothing was ever written there), -LODE_ETYPE,
 * -LODE_ECSUM, -EIO.
 */
int lode_obj_read(lode_cont_t *cont, struct lode_oid oid, lode_epoch_t epoch,
		  const struct lode_key *key, uint64_t off, void *buf, uint32_t len,
		  lode_event_t *ev);

/* Highest written byte + 1 of the byte array at key (0 if none). Blocks. */
int lode_obj_size(lode_cont_t *cont, struct lode_oid oid, lode_epoch_t epoch,
		  const struct lode_key *key, uint64_t *size_out);

/*
 * Punches, visible from their completion on (snapshots keep what they saw):
 *   lode_obj_punch    the whole object, on every target (key ignored, may be NULL)
 *   lode_dkey_punch   one dkey and all under it (key->akey ignored)
 *   lode_akey_punch   one value
 *   lode_range_punch  [off, off+len) of a byte array, which then reads as zeros
 * In an erasure-coded object each takes a lease (docs/decisions/0015): a
 * dkey's or the object's punch waits for the writers and degraded readers
 * of the arrays under it, and they wait for it; -EBUSY if it was held all
 * along (five request timeouts).
 */
int lode_obj_punch(lode_cont_t *cont, struct lode_oid oid, lode_event_t *ev);
int lode_dkey_punch(lode_cont_t *cont, struct lode_oid oid, const struct lode_key *key,
		    lode_event_t *ev);
int lode_akey_punch(lode_cont_t *cont, struct lode_oid oid, const struct lode_key *key,
		    lode_event_t *ev);
int lode_range_punch(lode_cont_t *cont, struct lode_oid oid, const struct lode_key *key,
		     uint64_t off, uint64_t len, lode_event_t *ev);

/*
 * Enumeration cursor over every target. Zero it to start; each call goes on
 * after what the last returned; eof is set at the end. Plain data. Keys come
 * in order within a target, targets one after another.
 */
struct lode_anchor {
	uint32_t tgt;
	uint8_t eof;
	uint16_t len;
	uint8_t key[2 + LODE_KEY_MAX];
};

/*
 * Objects with something visible at epoch: fills up to max; returns the
 * count. Targets are listed one after another, so an object with data on
 * several (a replicated or erasure-coded one, or one whose dkeys spread
 * over targets) comes once per target that holds part of it; a caller
 * that needs each object once removes the repeats.
 */
int lode_obj_list(lode_cont_t *cont, lode_epoch_t epoch, struct lode_anchor *anchor,
		  struct lode_oid *oids, unsigned max);

/*
 * The dkeys of oid (lode_dkey_list) or the akeys under key->dkey
 * (lode_akey_list) visible at epoch, packed into buf as [u16 little-endian
 * length][bytes] one after another; returns the number packed. Errors:
 * -EOVERFLOW (buf cannot hold even one key). In an erasure-coded object,
 * akeys of more than four bytes that begin with "\0end" are the library's
 * (each byte array's end mark, whose akey is that prefix + the array's):
 * they are not listed, and writes and punches of them are refused
 * (-EINVAL). An array whose akey is longer than LODE_KEY_MAX - 4 has no
 * mark, and its size read while a data member is lost is an upper bound.
 */
int lode_dkey_list(lode_cont_t *cont, struct lode_oid oid, lode_epoch_t epoch,
		   struct lode_anchor *anchor, void *buf, size_t buf_len);
int lode_akey_list(lode_cont_t *cont, struct lode_oid oid, const struct lode_key *key,
		   lode_epoch_t epoch, struct lode_anchor *anchor, void *buf, size_t buf_len);

/* ---- key-value objects ------------------------------------------------ */

/*
 * A KV object maps keys (1..LODE_KEY_MAX bytes, NUL-terminated strings
 * here) to single values. Each key is a dkey, so keys spread over targets.
 */
int lode_kv_put(lode_cont_t *cont, struct lode_oid oid, const char *key, const void *val,
		uint32_t len, lode_event_t *ev);
/* Errors: -ENOENT, -EOVERFLOW (value longer than cap; *len_out has its length). */
int lode_kv_get(lode_cont_t *cont, struct lode_oid oid, const char *key, void *buf,
		uint32_t cap, uint32_t *len_out, lode_event_t *ev);
/* Errors: none beyond the common ones (removing a missing key succeeds). */
int lode_kv_remove(lode_cont_t *cont, struct lode_oid oid, const char *key, lode_event_t *ev);
/* Keys, packed as lode_dkey_list() packs them. */
int lode_kv_list(lode_cont_t *cont, struct lode_oid oid, struct lode_anchor *anchor,
		 void *buf, size_t buf_len);

/* ---- byte arrays ------------------------------------------------------ */

#define LODE_CHUNK_DEFAULT (1u << 20)

/*
 * A byte array object: bytes [0, size) chunked over dkeys (chunk i of
 * chunk_size bytes is dkey i), so a large array spreads over every target.
 * The chunk size is the caller's to keep: every access to one array must use
 * the same (0 means LODE_CHUNK_DEFAULT). Reads of holes and of bytes past the
 * end return zeros.
 */
int lode_array_write(lode_cont_t *cont, struct lode_oid oid, uint32_t chunk_size, uint64_t off,
		     const void *buf, size_t len, lode_event_t *ev);
/* Fills buf[0..len) (zeros where nothing was written); use lode_array_size() for the end. */
int lode_array_read(lode_cont_t *cont, struct lode_oid oid, uint32_t chunk_size,
		    lode_epoch_t epoch, uint64_t off, void *buf, size_t len, lode_event_t *ev);
/* The array's size: its highest written byte + 1, or the size last set by
 * lode_array_truncate() if that is larger. Blocks. */
int lode_array_size(lode_cont_t *cont, struct lode_oid oid, uint32_t chunk_size,
		    lode_epoch_t epoch, uint64_t *size_out);
/* Set the size: bytes past it are removed; growing reads as zeros. Blocks. */
int lode_array_truncate(lode_cont_t *cont, struct lode_oid oid, uint32_t chunk_size,
			uint64_t size);

#ifdef __cplusplus
}
#endif
#endif
