/*
 * The newest-version map: akey -> the newest record of that akey.
 *
 * Most reads ask for the latest version, and most updates check the type of
 * the newest one. In the ordered index both are a descent of the B+tree that
 * touches several nodes and records, about half the cost of a 4 KiB fetch
 * from RAM (docs/performance.md). This map answers them with one hash probe.
 *
 * It is derived state: the index is the truth, every insert and removal of
 * an akey-level record goes through newest_put/newest_drop, and the map is
 * rebuilt record by record during recovery like everything else.
 *
 * Open addressing with linear probing over a power-of-two table of record
 * pointers; the key of a slot is read from its record, so a slot costs 8
 * bytes. Deletion shifts later entries back, leaving no tombstones.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/eng_internal.h"

static uint64_t hash_bytes(const uint8_t *p, uint32_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ n;

	for (; n >= 8; p += 8, n -= 8) {
		uint64_t w;

		memcpy(&w, p, 8);
		h = (h ^ w) * 0xff51afd7ed558ccdull;
		h ^= h >> 32;
	}
	if (n) {
		uint64_t w = 0;

		memcpy(&w, p, n);
		h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
	}
	h ^= h >> 29;
	return h;
}

uint32_t newest_pfx_len(const struct rec *r)
{
	switch (r->type) {
	case REC_SV:
		return r->klen > 8 ? r->klen - 8u : 0;
	case REC_ARR:
	case REC_ARR_PUNCH:
		return r->klen > 16 ? r->klen - 16u : 0;
	case REC_PUNCH: {
		/* only akey punches: object and dkey punches have an empty key field */
		uint32_t dlen, alen;

		if (r->klen < 20 + 2)
			return 0;
		dlen = (uint32_t)(r->key[20] << 8 | r->key[21]);
		if (dlen == 0 || r->klen < 22 + dlen + 2 + 8)
			return 0;
		alen = (uint32_t)(r->key[22 + dlen] << 8 | r->key[23 + dlen]);
		return alen ? r->klen - 8 : 0;
	}
	default:
		return 0;
	}
}

static bool slot_match(const struct rec *r, const uint8_t *pfx, uint32_t len)
{
	return newest_pfx_len(r) == len && memcmp(r->key, pfx, len) == 0;
}

static int grow(struct newest *m)
{
	size_t cap = m->cap ? m->cap * 2 : 1024;
	struct rec **v = calloc(cap, sizeof(*v));

	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < m->cap; i++) {
		struct rec *r = m->v[i];
		size_t j;

		if (!r)
			continue;
		j = hash_bytes(r->key, newest_pfx_len(r)) & (cap - 1);
		while (v[j])
			j = (j + 1) & (cap - 1);
		v[j] = r;
	}
	free(m->v);
	m->v = v;
	m->cap = cap;
	return 0;
}

struct rec *newest_get(const struct newest *m, const uint8_t *pfx, uint32_t len)
{
	size_t j;

	if (!m->cap)
		return NULL;
	for (j = hash_bytes(pfx, len) & (m->cap - 1); m->v[j]; j = (j + 1) & (m->cap - 1))
		if (slot_match(m->v[j], pfx, len))
			return m->v[j];
	return NULL;
}

void newest_put(struct newest *m, struct rec *r)
{
	uint32_t len = newest_pfx_len(r);
	size_t j;

	if (!len || m->failed)
		return;
	if ((m->n + 1) * 4 > m->cap * 3 && grow(m) < 0) {
		/* Without memory the map cannot stay exact: stop using it. */
		m->failed = true;
		return;
	}
	for (j = hash_bytes(r->key, len) & (m->cap - 1); m->v[j]; j = (j + 1) & (m->cap - 1)) {
		if (slot_match(m->v[j], r->key, len)) {
			/* smaller key = newer epoch (stored inverted) */
			if (memcmp(r->key, m->v[j]->key, r->klen < m->v[j]->klen ? r->klen : m->v[j]->klen) <= 0)
				m->v[j] = r;
			return;
		}
	}
	m->v[j] = r;
	m->n++;
}

/*
 * r leaves the index (already removed from it); next is the akey's newest
 * record now, or NULL.
 */
void newest_drop(struct newest *m, const struct rec *r, struct rec *next)
{
	uint32_t len = newest_pfx_len(r);
	size_t j, k;

	if (!len || !m->cap || m->failed)
		return;
	for (j = hash_bytes(r->key, len) & (m->cap - 1); m->v[j]; j = (j + 1) & (m->cap - 1))
		if (m->v[j] == r)
			break;
	if (!m->v[j])
		return; /* r was not the newest */
	if (next) {
		m->v[j] = next;
		return;
	}
	/* backward-shift deletion keeps every probe chain unbroken */
	m->v[j] = NULL;
	m->n--;
	for (k = (j + 1) & (m->cap - 1); m->v[k]; k = (k + 1) & (m->cap - 1)) {
		size_t home = hash_bytes(m->v[k]->key, newest_pfx_len(m->v[k])) & (m->cap - 1);

		/* move v[k] into the hole if its home is not in (j, k] */
		if ((j < k) ? (home <= j || home > k) : (home <= j && home > k)) {
			m->v[j] = m->v[k];
			m->v[k] = NULL;
			j = k;
		}
	}
}

void newest_free(struct newest *m)
{
	free(m->v);
	memset(m, 0, sizeof(*m));
}

size_t newest_bytes(const struct newest *m)
{
	return m->cap * sizeof(*m->v);
}
