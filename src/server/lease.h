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
 *
 * A holder names the range of the members' arrays its write covers. A
 * lease that ends any other way than given back whole leaves that range
 * **torn**: its holder may have died between a stripe's data and parity
 * writes (the write hole). The key is kept, marked with the range (the
 * union, when holders in turn leave it torn), and the next holder is told,
 * so that it makes the parity there whole again before it writes, or
 * gives the lease back torn if it cannot. A torn mark never expires.
 */
#ifndef LODE_SERVER_LEASE_H
#define LODE_SERVER_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/proto.h"

#define LEASE_MAX_MS NET_LEASE_MAX_MS /* longest lease granted */
#define LEASE_KEY_MAX 4096u   /* longest key: cont, oid and two keys of LODE_KEY_MAX fit */

struct lease;

/* What a taker asks for. */
struct lease_ask {
	uint64_t token;   /* the holder's, not 0 */
	uint32_t session; /* the session it came on */
	uint64_t dur_ms;  /* how long (capped at LEASE_MAX_MS) */
	uint64_t off, len; /* the members' range its write covers */
	bool reader;      /* a degraded read's: it writes nothing, so it neither
			   * tears the array nor mends it (its give-back keeps a mark) */
	uint32_t holder;  /* nonzero: a snapshot's mend of an array, which passes
			   * every hold of the container while this taker's
			   * (lease_hold's token) lasts; no pass for a punch's */
	bool untorn;      /* a dkey's or an object's punch: a writer (held back by
			   * holds, counted by lease_held_in) whose end never marks
			   * anything torn: no mend could redo it */
	/* Keys that cover this one (a dkey's and its object's, for an array):
	 * while another holds any of them, -EBUSY. */
	const void *up[2];
	size_t up_len[2];
	/* Nonzero: this key covers every key that begins with its first sub
	 * bytes (a dkey's the arrays under it; an object's everything in it):
	 * while another holds any of them, -EBUSY. */
	size_t sub;
};

/* What a taker is told: whether, and where, the array is torn. */
struct lease_torn {
	bool torn;
	uint64_t off, end;
};

#define LEASE_HOLDS 8u /* containers held at once (lease_hold) */

struct lease_tab {
	struct lease **b; /* buckets */
	unsigned nb;      /* a power of two */
	unsigned n;       /* keys: leases held and torn marks */
	unsigned held, max; /* leases held (some may have run out), and the most */
	struct {
		uint8_t cont[16];
		uint32_t token;    /* the snapshot taker's */
		uint64_t until_us; /* 0: a free place */
	} holds[LEASE_HOLDS];
};

/*
 * An empty table that lets at most max leases be held at once. Torn marks
 * do not count: each is an array a writer died writing, and it stays until
 * a writer mends it. -ENOMEM.
 */
int lease_tab_init(struct lease_tab *t, unsigned max);
void lease_tab_fini(struct lease_tab *t);

/*
 * The keys (lease_ask): arrays', dkeys' and objects' leases nest, so that
 * a dkey's or an object's EC punch, which removes every array under it,
 * waits for their writers and degraded readers and they wait for it.
 *
 * Take (or renew, for the same token) the lease of key[0..klen) as a asks,
 * from now_us. Returns 0 with *torn saying whether and where the array is
 * torn, or -EBUSY with *left_ms the holder's time left, -EINVAL (a zero
 * token, an empty or too long key, a zero duration), -EAGAIN (max leases
 * are held), -ENOMEM.
 */
int lease_take(struct lease_tab *t, const void *key, size_t klen, const struct lease_ask *a,
	       uint64_t now_us, uint64_t *left_ms, struct lease_torn *torn);

/*
 * A snapshot's barrier (lode_snap_create; docs/decisions/0012): while a
 * hold on a container lasts, writers may not take leases of its arrays
 * (-EBUSY; degraded readers and the takers' mends may), so once the
 * leases held are given back, no EC write of it is in flight here.
 * lease_hold: taker token's hold of container cont (its 16 bytes, which
 * begin every lease key) until until_us, or let go (0); each taker's hold
 * is its own, so one letting go leaves another's; -ENOSPC with
 * LEASE_HOLDS others held. lease_held_in: writers' leases of cont held now
 * (not run out).
 */
int lease_hold(struct lease_tab *t, const uint8_t cont[16], uint32_t token, uint64_t until_us,
	       uint64_t now_us);
unsigned lease_held_in(struct lease_tab *t, const uint8_t cont[16], uint64_t now_us);

/*
 * The torn arrays of container cont now (a snapshot mends them first, so
 * that none of its views has parity that does not match its data): marks
 * held by nobody or by a degraded reader, and writers' leases that ran
 * out (their range counts as torn). A writer's lease still held is left
 * out: the barrier waits for it. Returns how many; as many as fit in cap
 * bytes are written to buf, each as u16 n, the key's n bytes after the
 * container's 16, u64 off and u64 end of the torn range (little-endian),
 * and *len says how many bytes that took.
 */
unsigned lease_torn_in(struct lease_tab *t, const uint8_t cont[16], uint64_t now_us, uint8_t *buf,
		       size_t cap, size_t *len);

/*
 * Renew the lease a->token holds, for a->dur_ms from now_us: 0, or -ENOENT
 * if it is not held by a->token any more (it ran out, or its session
 * closed: another may have had it since).
 */
int lease_renew(struct lease_tab *t, const void *key, size_t klen, const struct lease_ask *a,
		uint64_t now_us);

/*
 * A punch's lease (a->untorn) given back whole also drops the torn marks
 * of the arrays under it (a->sub): the punch removed them. Given back
 * "torn" (the punch failed) it marks nothing and leaves them.
 *
 * Give it back (a->token; a->off and len: the range the holder wrote),
 * whole (torn false: the key is forgotten, unless a late torn give-back
 * marked it meanwhile) or torn (marked for the next holder): 0, or -ENOENT
 * (not held by a->token: it ran out, or its session closed). A torn
 * give-back that finds the lease gone still marks its range torn: the
 * holder's pieces may have landed after another mended the array. A
 * reader's give-back (a->reader) ignores torn and leaves a mark as it was.
 */
int lease_give(struct lease_tab *t, const void *key, size_t klen, const struct lease_ask *a,
	       bool torn);

/* End every lease the session holds (it closed), each left torn. Returns how many. */
unsigned lease_drop_session(struct lease_tab *t, uint32_t session);

#endif
