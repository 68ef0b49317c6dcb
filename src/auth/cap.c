/*
 * Capabilities: their wire form, signing and checking, and the table of
 * revoked users the check consults.
 *
 * The wire form is fixed-size and little-endian (auth.h draws it), so that
 * decoding is a handful of loads and a target can compare tokens as byte
 * strings. The MAC is HMAC-SHA256 over the first AUTH_CAP_SIZE - 32 bytes
 * under the key the token names; the key id sits inside the signed bytes,
 * so a token cannot be moved to another key. Checking runs in a fixed order
 * (length, version, key, signature, expiry, revocation) so that nothing
 * about the claims is believed before the signature has verified: a forged
 * token is reported forged whatever expiry or user it names.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "auth/auth.h"
#include "lode/errno.h"

#define CAP_BODY (AUTH_CAP_SIZE - 32) /* the signed bytes; the MAC follows */

_Static_assert(CAP_BODY == 72, "the wire layout in auth.h");

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;

	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void cap_encode_body(const struct auth_cap *c, uint8_t *p)
{
	p[0] = c->version;
	p[1] = c->flags;
	put16(p + 2, c->rights);
	put32(p + 4, c->key_id);
	put64(p + 8, (uint64_t)c->expires_ms);
	put64(p + 16, (uint64_t)c->issued_ms);
	put64(p + 24, c->client);
	put32(p + 32, c->tenant);
	put32(p + 36, c->user);
	memcpy(p + 40, c->pool.b, 16);
	memcpy(p + 56, c->cont.b, 16);
}

int auth_cap_decode(const void *buf, size_t len, struct auth_cap *c)
{
	const uint8_t *p = buf;

	if (len != AUTH_CAP_SIZE || p[0] != AUTH_CAP_VERSION)
		return -LODE_ECAPFORGED;
	c->version = p[0];
	c->flags = p[1];
	c->rights = get16(p + 2);
	c->key_id = get32(p + 4);
	c->expires_ms = (int64_t)get64(p + 8);
	c->issued_ms = (int64_t)get64(p + 16);
	c->client = get64(p + 24);
	c->tenant = get32(p + 32);
	c->user = get32(p + 36);
	memcpy(c->pool.b, p + 40, 16);
	memcpy(c->cont.b, p + 56, 16);
	return 0;
}

/*
 * The HMAC implementation is fetched once: a fetch by name walks OpenSSL's
 * provider tables, which would cost more than the MAC of 72 bytes itself.
 */
static EVP_MAC *cap_mac;
static pthread_once_t cap_mac_once = PTHREAD_ONCE_INIT;

static void cap_mac_fetch(void)
{
	cap_mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
}

static int cap_hmac(const uint8_t key[AUTH_KEY_SIZE], const uint8_t *body, uint8_t mac[32])
{
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
		OSSL_PARAM_construct_end(),
	};
	EVP_MAC_CTX *ctx;
	size_t outl = 0;
	int ok;

	pthread_once(&cap_mac_once, cap_mac_fetch);
	if (!cap_mac)
		return -EIO;
	ctx = EVP_MAC_CTX_new(cap_mac);
	if (!ctx)
		return -EIO;
	ok = EVP_MAC_init(ctx, key, AUTH_KEY_SIZE, params) && EVP_MAC_update(ctx, body, CAP_BODY) &&
	     EVP_MAC_final(ctx, mac, &outl, 32) && outl == 32;
	EVP_MAC_CTX_free(ctx);
	return ok ? 0 : -EIO;
}

/* The signing key: the newest one not retired (keys[] is sorted by id). */
static const struct auth_key *keyring_signer(const struct auth_keyring *kr)
{
	for (unsigned i = kr->nkeys; i-- > 0;)
		if (kr->keys[i].retired_ms == 0)
			return &kr->keys[i];
	return NULL;
}

static const struct auth_key *keyring_find(const struct auth_keyring *kr, uint32_t id)
{
	for (unsigned i = 0; i < kr->nkeys; i++)
		if (kr->keys[i].id == id)
			return &kr->keys[i];
	return NULL;
}

int auth_cap_sign(struct auth_keyring *kr, struct auth_cap *c, uint8_t *out)
{
	uint8_t key[AUTH_KEY_SIZE];
	const struct auth_key *k;
	int rc;

	/* Copy the key out so the HMAC runs without holding the lock. */
	pthread_rwlock_rdlock(&kr->lock);
	k = keyring_signer(kr);
	if (k) {
		memcpy(key, k->key, sizeof(key));
		c->key_id = k->id;
	}
	pthread_rwlock_unlock(&kr->lock);
	if (!k)
		return -ENOKEY;
	c->version = AUTH_CAP_VERSION;
	cap_encode_body(c, out);
	rc = cap_hmac(key, out, out + CAP_BODY);
	OPENSSL_cleanse(key, sizeof(key));
	return rc;
}

/* ---- revocation ---------------------------------------------------------- */

/*
 * A sorted array: revocations are rare and few (one per revoked user, until
 * the management service lifts them), lookups are per verification miss.
 */

int auth_revoked_init(struct auth_revoked *r)
{
	int rc = pthread_rwlock_init(&r->lock, NULL);

	if (rc)
		return -rc;
	r->v = NULL;
	r->n = r->cap = 0;
	r->gen = 1;
	return 0;
}

void auth_revoked_fini(struct auth_revoked *r)
{
	free(r->v);
	r->v = NULL;
	r->n = r->cap = 0;
	pthread_rwlock_destroy(&r->lock);
}

/* The index of user in r->v, or where it would go (the first entry above). */
static unsigned revoked_index(const struct auth_revoked *r, uint32_t user)
{
	unsigned lo = 0, hi = r->n;

	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;

		if (r->v[mid].user < user)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int auth_revoked_set(struct auth_revoked *r, uint32_t user, int64_t before_ms)
{
	unsigned i;
	int rc = 0;

	if (before_ms < 0)
		return -EINVAL;
	pthread_rwlock_wrlock(&r->lock);
	i = revoked_index(r, user);
	if (i < r->n && r->v[i].user == user) {
		if (before_ms)
			r->v[i].before_ms = before_ms;
		else
			memmove(&r->v[i], &r->v[i + 1], (r->n-- - i - 1) * sizeof(r->v[0]));
	} else if (before_ms) {
		if (r->n == r->cap) {
			unsigned ncap = r->cap ? r->cap * 2 : 16;
			void *nv = realloc(r->v, ncap * sizeof(r->v[0]));

			if (!nv) {
				rc = -ENOMEM;
				goto out;
			}
			r->v = nv;
			r->cap = ncap;
		}
		memmove(&r->v[i + 1], &r->v[i], (r->n - i) * sizeof(r->v[0]));
		r->v[i].user = user;
		r->v[i].before_ms = before_ms;
		r->n++;
	} else {
		goto out; /* lifting what is not there changes nothing */
	}
	__atomic_store_n(&r->gen, r->gen + 1, __ATOMIC_RELEASE);
out:
	pthread_rwlock_unlock(&r->lock);
	return rc;
}

static bool revoked_refuses(struct auth_revoked *r, const struct auth_cap *c)
{
	bool refused = false;
	unsigned i;

	pthread_rwlock_rdlock(&r->lock);
	i = revoked_index(r, c->user);
	if (i < r->n && r->v[i].user == c->user)
		refused = r->v[i].before_ms >= c->issued_ms;
	pthread_rwlock_unlock(&r->lock);
	return refused;
}

/* ---- verification -------------------------------------------------------- */

int auth_cap_verify(struct auth_keyring *kr, struct auth_revoked *rv, const void *buf, size_t len,
		    int64_t now_ms, struct auth_cap *c)
{
	uint8_t key[AUTH_KEY_SIZE], mac[32];
	const struct auth_key *k;
	struct auth_cap cap;
	int rc;

	if (len == 0)
		return -LODE_ECAPMISSING;
	rc = auth_cap_decode(buf, len, &cap);
	if (rc)
		return rc;
	pthread_rwlock_rdlock(&kr->lock);
	k = keyring_find(kr, cap.key_id);
	if (k)
		memcpy(key, k->key, sizeof(key));
	pthread_rwlock_unlock(&kr->lock);
	if (!k)
		return -LODE_ECAPFORGED;
	rc = cap_hmac(key, buf, mac);
	OPENSSL_cleanse(key, sizeof(key));
	if (rc)
		return rc;
	if (CRYPTO_memcmp(mac, (const uint8_t *)buf + CAP_BODY, sizeof(mac)) != 0)
		return -LODE_ECAPFORGED;
	if (cap.expires_ms <= now_ms)
		rc = -LODE_ECAPEXPIRED;
	else if (revoked_refuses(rv, &cap))
		rc = -LODE_ECAPREVOKED;
	if (c)
		*c = cap;
	return rc;
}
