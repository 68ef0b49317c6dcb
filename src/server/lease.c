/*
 * Write leases of one target (lease.h): a chained hash table of keys, each
 * with its holder's token, session and expiry. A key leaves the table only
 * when its lease is given back whole; one that expires or whose session
 * closes stays, marked torn, for the next holder.
 */
#include "server/lease.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define LEASE_BUCKETS 1024u

struct lease {
	struct lease *next;
	uint64_t token;      /* the holder's; 0: a torn mark, held by nobody */
	uint64_t expires_us; /* a holder's; UINT64_MAX for a mark */
	uint32_t session;
	uint64_t off, end;   /* the holder's range */
	bool torn;           /* a holder before did not give it back whole, */
	uint64_t torn_off, torn_end; /* leaving this range torn */
	bool late;           /* a torn give-back of an earlier holder came during this hold */
	bool reader;         /* the holder is a degraded read: it cannot tear anything */
	bool untorn;         /* the holder is a dkey's or object's punch: nor can it */
	uint16_t klen;
	uint8_t key[];
};

int lease_tab_init(struct lease_tab *t, unsigned max)
{
	*t = (struct lease_tab){.nb = LEASE_BUCKETS, .max = max};
	t->b = calloc(t->nb, sizeof(*t->b));
	return t->b ? 0 : -ENOMEM;
}

void lease_tab_fini(struct lease_tab *t)
{
	for (unsigned i = 0; t->b && i < t->nb; i++) {
		struct lease *l = t->b[i], *next;

		for (; l; l = next) {
			next = l->next;
			free(l);
		}
	}
	free(t->b);
	t->b = NULL;
	t->n = t->held = 0;
}

/* FNV-1a over the key. */
static unsigned bucket_of(const struct lease_tab *t, const uint8_t *key, size_t klen)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < klen; i++)
		h = (h ^ key[i]) * 0x100000001b3ull;
	return (unsigned)(h ^ h >> 32) & (t->nb - 1);
}

static bool key_is(const struct lease *l, const void *key, size_t klen)
{
	return l->klen == klen && memcmp(l->key, key, klen) == 0;
}

static uint64_t range_end(uint64_t off, uint64_t len)
{
	return len > UINT64_MAX - off ? UINT64_MAX : off + len;
}

/* Add [off, end) to l's torn range. */
static void torn_add(struct lease *l, uint64_t off, uint64_t end)
{
	if (!l->torn) {
		l->torn_off = off;
		l->torn_end = end;
	} else {
		if (off < l->torn_off)
			l->torn_off = off;
		if (end > l->torn_end)
			l->torn_end = end;
	}
	l->torn = true;
}

/*
 * l's holder is gone without giving it back whole: its range may be torn
 * (a reader's cannot be; the key then stays, held by nobody, marked or not).
 */
static void mark_torn(struct lease_tab *t, struct lease *l)
{
	if (!l->reader && !l->untorn)
		torn_add(l, l->off, l->end);
	if (l->token)
		t->held--;
	l->token = 0;
	l->expires_us = UINT64_MAX;
	l->session = 0;
	l->late = false;
}

/* Every lease that ran out becomes a torn mark (the table is full). */
static void sweep(struct lease_tab *t, uint64_t now_us)
{
	for (unsigned i = 0; i < t->nb; i++)
		for (struct lease *l = t->b[i]; l; l = l->next)
			if (l->token && l->expires_us <= now_us)
				mark_torn(t, l);
}

static struct lease **find(struct lease_tab *t, const void *key, size_t klen)
{
	struct lease **pp = &t->b[bucket_of(t, key, klen)];

	while (*pp && !key_is(*pp, key, klen))
		pp = &(*pp)->next;
	return pp;
}

/* A new entry for key at *pp, held by nobody and not torn; NULL: no memory. */
static struct lease *entry_new(struct lease_tab *t, struct lease **pp, const void *key,
			       size_t klen)
{
	struct lease *l = malloc(sizeof(*l) + klen);

	if (!l)
		return NULL;
	*l = (struct lease){.expires_us = UINT64_MAX, .klen = (uint16_t)klen};
	memcpy(l->key, key, klen);
	*pp = l;
	t->n++;
	return l;
}

/* Whether l is held now by another than token; *left_ms its time left. */
static bool held_by_other(const struct lease *l, uint64_t token, uint64_t now_us,
			  uint64_t *left_ms)
{
	if (!l || !l->token || l->token == token || l->expires_us <= now_us)
		return false;
	*left_ms = (l->expires_us - now_us + 999) / 1000;
	return true;
}

/* Whether another holds a key covering key, or one key covers (lease_ask's up and sub). */
static bool nested_busy(struct lease_tab *t, const void *key, size_t klen,
			const struct lease_ask *a, uint64_t now_us, uint64_t *left_ms)
{
	for (int i = 0; i < 2; i++)
		if (a->up[i] && a->up_len[i] && a->up_len[i] <= LEASE_KEY_MAX &&
		    held_by_other(*find(t, a->up[i], a->up_len[i]), a->token, now_us, left_ms))
			return true;
	for (unsigned i = 0; a->sub && a->sub <= klen && i < t->nb && t->held; i++)
		for (const struct lease *l = t->b[i]; l; l = l->next)
			if (l->klen >= a->sub && memcmp(l->key, key, a->sub) == 0 &&
			    !key_is(l, key, klen) && held_by_other(l, a->token, now_us, left_ms))
				return true;
	return false;
}

/* Whether token's hold of the container that key begins with lasts now. */
static bool hold_of(const struct lease_tab *t, const void *key, uint32_t token, uint64_t now_us)
{
	for (unsigned i = 0; i < LEASE_HOLDS; i++)
		if (t->holds[i].token == token && t->holds[i].until_us > now_us &&
		    !memcmp(t->holds[i].cont, key, 16))
			return true;
	return false;
}

int lease_take(struct lease_tab *t, const void *key, size_t klen, const struct lease_ask *a,
	       uint64_t now_us, uint64_t *left_ms, struct lease_torn *torn)
{
	uint64_t dur_ms = a->dur_ms, token = a->token;
	struct lease **pp, *l;
	bool mend;

	if (!token || !klen || klen > LEASE_KEY_MAX || !dur_ms)
		return -EINVAL;
	if (dur_ms > LEASE_MAX_MS)
		dur_ms = LEASE_MAX_MS;
	pp = find(t, key, klen);
	if ((l = *pp)) {
		if (l->token && l->expires_us <= now_us)
			mark_torn(t, l); /* its holder ran out of time mid-write */
		if (l->token && l->token != token) {
			*left_ms = (l->expires_us - now_us + 999) / 1000;
			return -EBUSY;
		}
	}
	if (nested_busy(t, key, klen, a, now_us, left_ms))
		return -EBUSY;
	/* A snapshot's mend of an array (its taker's hold lives here) passes
	 * every hold of the container: it writes no new data (parity and the
	 * end mark, from the data cells), and the other takers' barriers count
	 * its lease as a writer's. Passing only its own, two snapshots taken at
	 * once kept each other's out. A punch's lease removes data: no pass. */
	mend = a->holder && !a->untorn && !a->sub && klen >= 16 &&
	       hold_of(t, key, a->holder, now_us);
	for (unsigned i = 0; i < LEASE_HOLDS && !a->reader && !mend && !(l && l->token) && klen >= 16;
	     i++) {
		if (t->holds[i].until_us > now_us && !memcmp(t->holds[i].cont, key, 16)) {
			*left_ms = (t->holds[i].until_us - now_us + 999) / 1000;
			return -EBUSY; /* a snapshot is being taken: after it */
		}
	}
	if (!(l && l->token) && t->held >= t->max) {
		sweep(t, now_us);
		if (t->held >= t->max)
			return -EAGAIN;
	}
	if (!l && !(l = entry_new(t, pp, key, klen)))
		return -ENOMEM;
	if (!l->token)
		t->held++;
	l->token = token;
	l->expires_us = now_us + dur_ms * 1000;
	l->session = a->session;
	l->off = a->off;
	l->end = range_end(a->off, a->len);
	l->reader = a->reader;
	l->untorn = a->untorn;
	*torn = (struct lease_torn){.torn = l->torn, .off = l->torn_off, .end = l->torn_end};
	return 0;
}

int lease_hold(struct lease_tab *t, const uint8_t cont[16], uint32_t token, uint64_t until_us,
	       uint64_t now_us)
{
	int fr = -1;

	for (unsigned i = 0; i < LEASE_HOLDS; i++) {
		if (t->holds[i].until_us && t->holds[i].token == token &&
		    !memcmp(t->holds[i].cont, cont, 16)) {
			t->holds[i].until_us = until_us;
			return 0;
		}
		if (fr < 0 && t->holds[i].until_us <= now_us)
			fr = (int)i; /* free, or run out */
	}
	if (!until_us)
		return 0;
	if (fr < 0)
		return -ENOSPC;
	memcpy(t->holds[fr].cont, cont, 16);
	t->holds[fr].token = token;
	t->holds[fr].until_us = until_us;
	return 0;
}

unsigned lease_held_in(struct lease_tab *t, const uint8_t cont[16], uint64_t now_us)
{
	unsigned n = 0;

	for (unsigned i = 0; i < t->nb && t->held; i++)
		for (const struct lease *l = t->b[i]; l; l = l->next)
			n += l->token && !l->reader && l->expires_us > now_us && l->klen >= 16 &&
			     !memcmp(l->key, cont, 16);
	return n;
}

static uint8_t *put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
	return p + 8;
}

unsigned lease_torn_in(struct lease_tab *t, const uint8_t cont[16], uint64_t now_us, uint8_t *buf,
		       size_t cap, size_t *len)
{
	unsigned n = 0;
	size_t at = 0;

	for (unsigned i = 0; i < t->nb && t->n; i++) {
		for (const struct lease *l = t->b[i]; l; l = l->next) {
			bool ran_out = l->token && !l->reader && !l->untorn && l->expires_us <= now_us;
			uint64_t off = l->torn_off, end = l->torn_end;
			size_t need = 2 + (size_t)l->klen - 16 + 16;

			if (l->klen < 16 || memcmp(l->key, cont, 16) != 0 ||
			    (l->token && !l->reader && !ran_out) || !(l->torn || ran_out))
				continue;
			if (ran_out) {
				if (!l->torn || l->off < off)
					off = l->off;
				if (!l->torn || l->end > end)
					end = l->end;
			}
			n++;
			if (at + need > cap)
				continue;
			buf[at] = (uint8_t)(l->klen - 16);
			buf[at + 1] = (uint8_t)((l->klen - 16) >> 8);
			memcpy(buf + at + 2, l->key + 16, l->klen - 16u);
			put_u64(put_u64(buf + at + 2 + l->klen - 16, off), end);
			at += need;
		}
	}
	*len = at;
	return n;
}

int lease_renew(struct lease_tab *t, const void *key, size_t klen, const struct lease_ask *a,
		uint64_t now_us)
{
	struct lease *l;
	uint64_t dur_ms = a->dur_ms > LEASE_MAX_MS ? LEASE_MAX_MS : a->dur_ms;

	if (!a->token || !klen || klen > LEASE_KEY_MAX || !dur_ms)
		return -ENOENT;
	l = *find(t, key, klen);
	if (!l || l->token != a->token || l->expires_us <= now_us)
		return -ENOENT;
	l->expires_us = now_us + dur_ms * 1000;
	return 0;
}

/*
 * A dkey's or an object's punch is done: the marks under it (and keys
 * nobody holds) go, nothing being left to mend. None is held: its lease
 * kept every taker of them out.
 */
static void drop_under(struct lease_tab *t, const void *key, size_t sub)
{
	for (unsigned i = 0; i < t->nb; i++) {
		for (struct lease **pp = &t->b[i]; *pp;) {
			struct lease *l = *pp;

			if (!l->token && l->klen >= sub && memcmp(l->key, key, sub) == 0) {
				*pp = l->next;
				free(l);
				t->n--;
			} else {
				pp = &l->next;
			}
		}
	}
}

int lease_give(struct lease_tab *t, const void *key, size_t klen, const struct lease_ask *a,
	       bool torn)
{
	struct lease **pp, *l;
	bool reader, punch;

	if (!a->token || !klen || klen > LEASE_KEY_MAX)
		return -ENOENT;
	pp = find(t, key, klen);
	l = *pp;
	reader = a->reader || (l && l->token == a->token && l->reader);
	punch = a->untorn || (l && l->token == a->token && l->untorn);
	if (punch && !torn && a->sub && l && l->token == a->token) {
		/* Done whole (a failed one gives it back "torn": it marks
		 * nothing, and leaves the marks under it). */
		*pp = l->next;
		free(l);
		t->n--;
		t->held--;
		drop_under(t, key, a->sub);
		return 0;
	}
	if (reader || punch)
		torn = false; /* a reader wrote nothing; a punch's is not mended */
	if (!l || l->token != a->token) {
		/*
		 * Not this holder's any more (it ran out of time, or its session
		 * closed, and another may hold it now). A torn give-back still
		 * counts: its pieces may have landed after the next holder
		 * mended, so the range is marked, and a holder now has it
		 * marked when it gives the lease back.
		 */
		if (torn && (l || (l = entry_new(t, pp, key, klen)))) {
			torn_add(l, a->off, range_end(a->off, a->len));
			l->late = l->token != 0;
		}
		return -ENOENT;
	}
	if (torn || l->late) {
		mark_torn(t, l);
	} else if (reader && l->torn) {
		l->reader = true; /* it mended nothing: the mark stays as it was */
		mark_torn(t, l);
	} else {
		*pp = l->next;
		free(l);
		t->n--;
		t->held--;
	}
	return 0;
}

unsigned lease_drop_session(struct lease_tab *t, uint32_t session)
{
	unsigned n = 0;

	for (unsigned i = 0; t->b && i < t->nb; i++)
		for (struct lease *l = t->b[i]; l; l = l->next)
			if (l->token && l->session == session) {
				mark_torn(t, l);
				n++;
			}
	return n;
}
