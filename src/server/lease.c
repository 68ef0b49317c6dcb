/*
 * Write leases of one target (lease.h): a chained hash table of keys, each
 * with its holder's token, session and expiry. Expired leases go when a
 * lookup passes them, or in a sweep when the table is full.
 */
#include "server/lease.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define LEASE_BUCKETS 1024u

struct lease {
	struct lease *next;
	uint64_t token;
	uint64_t expires_us;
	uint32_t session;
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
	t->n = 0;
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

/* Unlink and free *pp's lease; *pp then names the next. */
static void unlink_at(struct lease_tab *t, struct lease **pp)
{
	struct lease *l = *pp;

	*pp = l->next;
	free(l);
	t->n--;
}

static void sweep(struct lease_tab *t, uint64_t now_us)
{
	for (unsigned i = 0; i < t->nb; i++) {
		struct lease **pp = &t->b[i];

		while (*pp) {
			if ((*pp)->expires_us <= now_us)
				unlink_at(t, pp);
			else
				pp = &(*pp)->next;
		}
	}
}

int lease_take(struct lease_tab *t, const void *key, size_t klen, uint64_t token, uint32_t session,
	       uint64_t dur_ms, uint64_t now_us, uint64_t *left_ms)
{
	struct lease **pp, *l;

	if (!token || !klen || klen > LEASE_KEY_MAX || !dur_ms)
		return -EINVAL;
	if (dur_ms > LEASE_MAX_MS)
		dur_ms = LEASE_MAX_MS;
	pp = &t->b[bucket_of(t, key, klen)];
	while ((l = *pp)) {
		if (l->expires_us <= now_us) {
			unlink_at(t, pp);
			continue;
		}
		if (key_is(l, key, klen)) {
			if (l->token != token) {
				*left_ms = (l->expires_us - now_us + 999) / 1000;
				return -EBUSY;
			}
			l->expires_us = now_us + dur_ms * 1000;
			l->session = session;
			return 0;
		}
		pp = &l->next;
	}
	if (t->n >= t->max) {
		sweep(t, now_us);
		if (t->n >= t->max)
			return -EAGAIN;
	}
	if (!(l = malloc(sizeof(*l) + klen)))
		return -ENOMEM;
	*l = (struct lease){.token = token, .expires_us = now_us + dur_ms * 1000,
			    .session = session, .klen = (uint16_t)klen};
	memcpy(l->key, key, klen);
	l->next = *pp;
	*pp = l;
	t->n++;
	return 0;
}

int lease_give(struct lease_tab *t, const void *key, size_t klen, uint64_t token)
{
	if (!klen || klen > LEASE_KEY_MAX)
		return -ENOENT;
	for (struct lease **pp = &t->b[bucket_of(t, key, klen)]; *pp; pp = &(*pp)->next) {
		if (key_is(*pp, key, klen)) {
			if ((*pp)->token != token)
				return -ENOENT;
			unlink_at(t, pp);
			return 0;
		}
	}
	return -ENOENT;
}

unsigned lease_drop_session(struct lease_tab *t, uint32_t session)
{
	unsigned n = 0;

	for (unsigned i = 0; t->b && i < t->nb; i++) {
		struct lease **pp = &t->b[i];

		while (*pp) {
			if ((*pp)->session == session) {
				unlink_at(t, pp);
				n++;
			} else {
				pp = &(*pp)->next;
			}
		}
	}
	return n;
}
