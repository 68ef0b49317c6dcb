/*
 * A target thread's cache of verified capabilities.
 *
 * Every data-plane request carries a capability and a target checks it
 * before anything else, so the check must cost next to nothing for a token
 * it has seen: a client sends the same token for minutes. The cache is a
 * direct-mapped table indexed by bytes of the token's MAC (uniform for
 * genuine tokens; forged ones are never stored, so choosing them buys an
 * attacker nothing). A hit demands that all AUTH_CAP_SIZE bytes equal the
 * stored token's, compared in constant time so that timing does not leak a
 * cached token to a caller probing with near copies; the claims come from
 * the stored decode. Expiry is checked on every hit against the caller's
 * clock. Any change to the keyring or the revocation table moves their gen
 * and empties the cache on the next call, which is what makes a
 * revocation effective on the very next request; the gens are read with
 * atomic loads, not under the locks, so a hit touches no shared cache line
 * for writing.
 */
#include <string.h>

#include "auth/auth.h"
#include "lode/errno.h"

_Static_assert((AUTH_CACHE_SLOTS & (AUTH_CACHE_SLOTS - 1)) == 0, "a power of two");
_Static_assert(AUTH_CAP_SIZE % 8 == 0, "compared in 8-byte words");

void auth_cache_init(struct auth_cache *cc)
{
	memset(cc, 0, sizeof(*cc));
}

static void cache_flush(struct auth_cache *cc)
{
	for (unsigned i = 0; i < AUTH_CACHE_SLOTS; i++)
		cc->slot[i].used = false;
}

static unsigned cache_slot(const uint8_t *tok)
{
	uint64_t h;

	memcpy(&h, tok + AUTH_CAP_SIZE - 32, sizeof(h)); /* the MAC's first bytes */
	return (unsigned)(h ^ h >> 32) & (AUTH_CACHE_SLOTS - 1);
}

/* Whether a and b hold the same token, in time independent of where they differ. */
static bool cache_tok_equal(const uint8_t *a, const uint8_t *b)
{
	uint64_t diff = 0;

	for (unsigned i = 0; i < AUTH_CAP_SIZE; i += 8) {
		uint64_t x, y;

		memcpy(&x, a + i, 8);
		memcpy(&y, b + i, 8);
		diff |= x ^ y;
	}
	return diff == 0;
}

int auth_cache_verify(struct auth_cache *cc, struct auth_keyring *kr, struct auth_revoked *rv,
		      const void *buf, size_t len, int64_t now_ms, struct auth_cap *c)
{
	uint64_t kg, rg;
	struct auth_cap cap;
	unsigned i;
	int rc;

	if (len != AUTH_CAP_SIZE)
		return auth_cap_verify(kr, rv, buf, len, now_ms, c); /* refused anyway */
	/*
	 * Read the gens before verifying: a change that lands while a miss
	 * is verified moves them past what is recorded here, so the entry
	 * about to be stored is flushed on the next call.
	 */
	kg = __atomic_load_n(&kr->gen, __ATOMIC_ACQUIRE);
	rg = __atomic_load_n(&rv->gen, __ATOMIC_ACQUIRE);
	if (kg != cc->kr_gen || rg != cc->rv_gen) {
		cache_flush(cc);
		cc->kr_gen = kg;
		cc->rv_gen = rg;
	}
	i = cache_slot(buf);
	if (cc->slot[i].used && cache_tok_equal(cc->slot[i].tok, buf)) {
		if (c)
			*c = cc->slot[i].cap;
		if (cc->slot[i].cap.expires_ms <= now_ms) {
			cc->slot[i].used = false;
			return -LODE_ECAPEXPIRED;
		}
		cc->hits++;
		return 0;
	}
	cc->misses++;
	rc = auth_cap_verify(kr, rv, buf, len, now_ms, &cap);
	if (rc == 0) {
		memcpy(cc->slot[i].tok, buf, AUTH_CAP_SIZE);
		cc->slot[i].cap = cap;
		cc->slot[i].used = true;
	}
	if (c && (rc == 0 || rc == -LODE_ECAPEXPIRED || rc == -LODE_ECAPREVOKED))
		*c = cap;
	return rc;
}
