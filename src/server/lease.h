/*
 * Write leases of one target: who may read, modify and write an
 * erasure-coded array (one akey) now. An EC write of part of a stripe
 * reads the other cells and writes new parity from them; two processes
 * doing that to one stripe at once leave parity that matches neither. So
 * every EC writer first takes the array's lease on one member of its group
 * (src/client/ec_io.c says which), and gives it back when its pieces are
 * durable.
 *
 * A lease is held by a token the client draws, for a time the client asks
 * (capped at LEASE_MAX_MS), and ends at its release, at its expiry, or when
 * the session that took it closes (a client that died over tcp). The table
 * belongs to the target's thread: no locks.
 */
#ifndef LODE_SERVER_LEASE_H
#define LODE_SERVER_LEASE_H

#include <stddef.h>
#include <stdint.h>

#define LEASE_MAX_MS 600000u  /* longest lease granted */
#define LEASE_KEY_MAX 4096u   /* longest key: cont, oid and two keys of LODE_KEY_MAX fit */

struct lease;

struct lease_tab {
	struct lease **b; /* buckets */
	unsigned nb;      /* a power of two */
	unsigned n, max;  /* leases held (some may have expired), and the most kept */
};

/* An empty table that keeps at most max leases. -ENOMEM. */
int lease_tab_init(struct lease_tab *t, unsigned max);
void lease_tab_fini(struct lease_tab *t);

/*
 * Take (or renew, for the same token) the lease of key[0..klen) for dur_ms
 * from now_us. Returns 0, or -EBUSY with *left_ms the holder's time left,
 * -EINVAL (a zero token, an empty or too long key, a zero duration), -EAGAIN
 * (max leases are held and none has expired), -ENOMEM.
 */
int lease_take(struct lease_tab *t, const void *key, size_t klen, uint64_t token, uint32_t session,
	       uint64_t dur_ms, uint64_t now_us, uint64_t *left_ms);

/* Give it back: 0, or -ENOENT (not held by token: expired, or another's). */
int lease_give(struct lease_tab *t, const void *key, size_t klen, uint64_t token);

/* End every lease the session holds (it closed). Returns how many. */
unsigned lease_drop_session(struct lease_tab *t, uint32_t session);

#endif
