/*
 * libFuzzer target: capabilities and stored secrets from arbitrary bytes
 * (src/auth/cap.c, cache.c, secret.c).
 *
 * The input is tried as a token against a ring holding one known key:
 * decode, verify and the cache must agree with one another and refuse
 * only with the codes auth.h names; nothing can verify unless its MAC is
 * the one the key gives. When the input holds a token's worth of bytes and
 * those decode, their claims are signed again: the token that comes out
 * must carry the same bytes but for the key id and the MAC, decode to the
 * same claims, and verify (or be refused as expired only when the claims
 * say so). Finally the input, as a NUL-terminated string, goes to the
 * stored-secret parser, which must accept only what it can describe.
 * Any failure abort()s, so the fuzzer reports it.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "auth/auth.h"
#include "lode/errno.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond))                                                                       \
			abort();                                                                   \
	} while (0)

#define NOW 1700000000000LL
#define KEY_ID 3

static struct auth_keyring kr;
static struct auth_revoked rv;
static struct auth_cache *cc;

static void fuzz_init(void)
{
	static const uint8_t key[AUTH_KEY_SIZE] = "a key the fuzzer knows, 32 byte";
	static int done;

	if (done)
		return;
	CHECK(auth_keyring_init(&kr) == 0);
	CHECK(auth_keyring_add(&kr, KEY_ID, key, 0) == KEY_ID);
	CHECK(auth_revoked_init(&rv) == 0);
	CHECK(auth_revoked_set(&rv, 1, NOW) == 0); /* user 1: revoked up to NOW */
	cc = malloc(sizeof(*cc));
	CHECK(cc);
	auth_cache_init(cc);
	done = 1;
}

static int same_claims(const struct auth_cap *a, const struct auth_cap *b)
{
	return a->version == b->version && a->flags == b->flags && a->rights == b->rights &&
	       a->key_id == b->key_id && a->expires_ms == b->expires_ms &&
	       a->issued_ms == b->issued_ms && a->client == b->client && a->tenant == b->tenant &&
	       a->user == b->user && memcmp(a->pool.b, b->pool.b, 16) == 0 &&
	       memcmp(a->cont.b, b->cont.b, 16) == 0;
}

/* What verify must say of a genuine token with claims c. */
static int expected(const struct auth_cap *c)
{
	if (c->expires_ms <= NOW)
		return -LODE_ECAPEXPIRED;
	if (c->user == 1 && c->issued_ms <= NOW)
		return -LODE_ECAPREVOKED;
	return 0;
}

static void fuzz_token(const uint8_t *data, size_t size)
{
	struct auth_cap d, v, w;
	int rd, rv1, rv2;

	rd = auth_cap_decode(size ? data : NULL, size, &d);
	CHECK(rd == 0 || rd == -LODE_ECAPFORGED);
	CHECK(rd != 0 || size == AUTH_CAP_SIZE);
	rv1 = auth_cap_verify(&kr, &rv, size ? data : NULL, size, NOW, &v);
	if (size == 0)
		CHECK(rv1 == -LODE_ECAPMISSING);
	else if (rd)
		CHECK(rv1 == -LODE_ECAPFORGED);
	else if (rv1 == -LODE_ECAPFORGED)
		; /* the usual fate of fuzzed bytes */
	else {
		/* It verified (or is genuine but stale): the key is ours, the
		 * claims are the decoded ones, the verdict follows them. */
		CHECK(d.key_id == KEY_ID);
		CHECK(same_claims(&d, &v));
		CHECK(rv1 == expected(&d));
	}
	/* The cache says what verify says, twice (the second may be a hit). */
	for (int i = 0; i < 2; i++) {
		rv2 = auth_cache_verify(cc, &kr, &rv, size ? data : NULL, size, NOW, &w);
		CHECK(rv2 == rv1);
		if (rv2 == 0)
			CHECK(same_claims(&w, &v));
	}
}

static void fuzz_resign(const uint8_t *data)
{
	uint8_t tok[AUTH_CAP_SIZE], want[AUTH_CAP_SIZE];
	struct auth_cap c, d, v;
	int rc;

	if (auth_cap_decode(data, AUTH_CAP_SIZE, &c) != 0)
		return;
	CHECK(auth_cap_sign(&kr, &c, tok) == 0);
	CHECK(c.key_id == KEY_ID && c.version == AUTH_CAP_VERSION);
	/* The same bytes but for the key id and the MAC. */
	memcpy(want, data, AUTH_CAP_SIZE - 32);
	want[4] = KEY_ID;
	want[5] = want[6] = want[7] = 0;
	CHECK(memcmp(tok, want, AUTH_CAP_SIZE - 32) == 0);
	CHECK(auth_cap_decode(tok, sizeof(tok), &d) == 0);
	CHECK(same_claims(&c, &d));
	rc = auth_cap_verify(&kr, &rv, tok, sizeof(tok), NOW, &v);
	CHECK(rc == expected(&c));
	CHECK(same_claims(&c, &v));
	CHECK(auth_cache_verify(cc, &kr, &rv, tok, sizeof(tok), NOW, &v) == rc);
	/* Any one bit of it flipped is forged. */
	tok[data[0] % AUTH_CAP_SIZE] ^= (uint8_t)(1u << (data[1] % 8));
	CHECK(auth_cap_verify(&kr, &rv, tok, sizeof(tok), NOW, NULL) == -LODE_ECAPFORGED);
	CHECK(auth_cache_verify(cc, &kr, &rv, tok, sizeof(tok), NOW, NULL) == -LODE_ECAPFORGED);
}

static void fuzz_secret(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	unsigned iter = 0;
	int rc;

	CHECK(s);
	memcpy(s, data, size);
	s[size] = '\0';
	rc = auth_secret_parse(s, &iter);
	CHECK(rc == 0 || rc == -EINVAL);
	if (rc == 0)
		CHECK(iter >= 1 && iter <= 10000000u && strncmp(s, "pbkdf2-sha256$", 14) == 0);
	free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_init();
	fuzz_token(data, size);
	if (size >= AUTH_CAP_SIZE)
		fuzz_resign(data);
	fuzz_secret(data, size);
	return 0;
}
