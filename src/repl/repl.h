/*
 * A replicated state machine over Raft (Debian's libraft, C-Raft 0.15), for
 * a state small enough to be replicated whole.
 *
 * The management service keeps its whole state as one protobuf message
 * (src/mgmt/README.md). It is replicated by state transfer: the leader runs
 * a request's handler, packs the new whole state and proposes those bytes;
 * every replica applies an entry by replacing its state with them; a
 * snapshot is simply the latest state. This module is that replication and
 * knows nothing of what the bytes mean.
 *
 * A replica is one member of a group of 1, 3 or 5 voters, each with its own
 * data directory (raft's log, metadata and snapshots) and a TCP address the
 * others reach it at. repl_start runs it on a thread of its own (a libuv
 * loop); the fsm callbacks below are called on that thread, one at a time,
 * in log order. Any thread may propose; repl_propose blocks until the entry
 * was committed and applied on this replica, or says why not.
 *
 * Every call returns 0 or a negative error code (include/lode/errno.h);
 * the codes each call returns are listed beside it. See README.md for the
 * threading model, timeouts and limits.
 */
#ifndef LODE_REPL_H
#define LODE_REPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REPL_PEERS_MAX 5
#define REPL_ADDR_MAX 64          /* bytes of "A.B.C.D:PORT", its NUL included */
#define REPL_STATE_MAX (64u << 20) /* the largest state repl_propose takes */

/*
 * A voter of the group: a non-zero id and the "A.B.C.D:PORT" it listens on
 * (an IPv4 address: raft's TCP transport speaks IPv4 only, and the address
 * is part of the replica's identity, so no names that may resolve
 * differently later).
 */
struct repl_peer {
	uint64_t id;
	char addr[REPL_ADDR_MAX];
};

struct repl_config {
	uint64_t id;      /* this replica: one of peers[] */
	const char *dir;  /* its data directory; created (0700, parents too) if missing */
	struct repl_peer peers[REPL_PEERS_MAX];
	unsigned npeers;  /* 1, 3 or 5 */
	unsigned election_ms;    /* election timeout; 0: 1000 */
	unsigned heartbeat_ms;   /* leader's heartbeat; 0: 100; less than election_ms */
	unsigned snapshot_every; /* snapshot after this many entries, keeping as many; 0: 64 */
};

/*
 * The replicated state, as the host keeps it. Every callback runs on the
 * replica's thread, never two at once, and must not call repl_propose or
 * repl_stop (repl_leader and repl_is_leader are fine). A non-zero return is
 * a failure; see each one for what follows.
 */
struct repl_fsm {
	void *arg;
	/*
	 * An entry was committed: replace the state with buf (len may be 0).
	 * Called in log order on every replica, the leader included. buf is
	 * only valid during the call. A failure stops this replica applying:
	 * raft calls it again with the same entry at the next commit, so apply
	 * should fail only when it cannot hold the state (out of memory).
	 */
	int (*apply)(void *arg, const void *buf, size_t len);
	/*
	 * The current state, for a snapshot: a malloc'ed copy in *buf (which
	 * this module frees) and its length in *len. A failure skips this
	 * snapshot; the next commit tries again.
	 */
	int (*snapshot)(void *arg, void **buf, size_t *len);
	/*
	 * Replace the state with a snapshot's: at start, from this replica's
	 * own latest snapshot, or later, one the leader sent because this
	 * replica was too far behind. buf is only valid during the call. A
	 * failure at start fails repl_start; later, the install is dropped and
	 * the leader sends it again.
	 */
	int (*restore)(void *arg, const void *buf, size_t len);
	/*
	 * Optional (NULL: not called). Leadership changed as this replica sees
	 * it: whether it leads now (as repl_is_leader), and the leader's id
	 * (0: none known, as during an election or while this replica was just
	 * elected and is still applying what came before its term).
	 */
	void (*role)(void *arg, bool is_leader, uint64_t leader_id);
};

typedef struct repl repl_t;

/*
 * Check the configuration, open (on the first start: bootstrap) the data
 * directory and start the replica on a thread of its own. It then takes
 * part in elections and replicates at once; restore is called from that
 * thread before this returns if the directory holds a snapshot, and apply
 * for every committed entry after it. The peers matter on the first start
 * only: later starts use the configuration raft stored, and fail if it
 * differs from cfg's. cfg and fsm are copied. Blocks until the replica runs
 * (a local disk read, no network wait). msg (cap bytes, may be NULL) gets a
 * reason on failure.
 * Errors: -EINVAL (id 0 or not among the peers, npeers not 1, 3 or 5, a
 * duplicate id or address, an address that is not "A.B.C.D:PORT" with a
 * port 1..65535, heartbeat not below election, no dir, no apply,
 * snapshot or restore, a directory that holds another configuration),
 * -ENOTDIR, -EACCES and other -errno for the directory, -EBUSY (another
 * replica has the directory open), -EADDRINUSE (the address is taken),
 * -EIO or -LODE_ECORRUPT (raft's files do not load), -ENOMEM.
 */
int repl_start(const struct repl_config *cfg, const struct repl_fsm *fsm, repl_t **out,
	       char *msg, size_t cap);

/*
 * Propose buf (copied) as the new state. Returns 0 once the entry was
 * committed by a majority and applied on this replica (its apply callback
 * has returned). Blocks up to timeout_ms. Any thread may call it, several
 * at once; never from an fsm callback (-EDEADLK).
 * Errors: -LODE_ENOTLEADER (this replica does not lead, has just been
 * elected and not yet applied everything before its term, or stopped
 * leading before the entry committed: repl_leader says who leads now, if
 * anyone knows), -ETIMEDOUT (not committed in time, as without a majority),
 * -EINVAL (timeout_ms 0), -E2BIG (len over REPL_STATE_MAX), -ECANCELED
 * (the replica is stopping), -ENOMEM, -EIO (raft failed to write its log).
 * After -LODE_ENOTLEADER for a lost leadership and after -ETIMEDOUT the
 * entry may still be committed later (a new leader may keep it): the
 * outcome is unknown, as with any consensus system. Since entries are whole
 * states, a caller that retries on the new leader recomputes from the state
 * it finds there.
 */
int repl_propose(repl_t *r, const void *buf, size_t len, unsigned timeout_ms);

/*
 * The leader as this replica last saw it: its id in *id and its address in
 * addr (cap bytes; either may be NULL). The leader may be this replica.
 * Does not block on the network. Errors: -ENOENT (no leader known, as
 * during an election), -ERANGE (cap too small for the address).
 */
int repl_leader(repl_t *r, uint64_t *id, char *addr, size_t cap);

/*
 * Whether this replica leads, as of the last turn of its thread: it was
 * elected and has applied every entry before its term, so its state is the
 * latest committed one. What it returns may be stale by the time the
 * caller acts on it; repl_propose is what decides.
 */
bool repl_is_leader(repl_t *r);

/*
 * Stop the replica: fail pending proposals with -ECANCELED, close raft
 * (its files stay for the next start), end the thread and free r. No other
 * call on r may run or follow. Blocks until done. NULL is a no-op.
 */
void repl_stop(repl_t *r);

#endif
