/*
 * Tests for src/auth: capabilities, the keyring, revocation, the targets'
 * verification cache, secrets and AES-256-GCM.
 *
 * The token format is a contract between the management service and every
 * target, so the tests do not trust the encoder: cap_layout() writes the
 * bytes from the layout auth.h draws, and cap_mac() computes the MAC with
 * OpenSSL's one-shot HMAC(), not the library's code. With those the tests
 * also build tokens the signer refuses to produce (another version, a key
 * the ring does not hold) but that carry a correct MAC, so that each check
 * is seen to refuse on its own. Token buffers handed to a verifier are
 * malloc'ed to their exact length, so that AddressSanitizer catches a read
 * past them.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "auth/auth.h"
#include "lode/errno.h"

#define NOW 1700000000000LL /* some unix ms */
#define LIFE 600000LL	    /* ten minutes */

static const uint8_t key_a[AUTH_KEY_SIZE] = "0123456789abcdef0123456789abcde";

struct fix {
	struct auth_keyring kr;
	struct auth_revoked rv;
};

static int fix_setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	assert_int_equal(auth_keyring_init(&f->kr), 0);
	assert_int_equal(auth_revoked_init(&f->rv), 0);
	assert_int_equal(auth_keyring_add(&f->kr, 1, key_a, 0), 1);
	*state = f;
	return 0;
}

static int fix_teardown(void **state)
{
	struct fix *f = *state;

	auth_revoked_fini(&f->rv);
	auth_keyring_fini(&f->kr);
	free(f);
	return 0;
}

static struct auth_cap cap_sample(uint64_t client)
{
	struct auth_cap c = {
		.rights = AUTH_R_READ | AUTH_R_WRITE,
		.expires_ms = NOW + LIFE,
		.issued_ms = NOW,
		.client = client,
		.tenant = 7,
		.user = 42,
	};

	for (int i = 0; i < 16; i++) {
		c.pool.b[i] = (uint8_t)(0xa0 + i);
		c.cont.b[i] = (uint8_t)(0x10 + i);
	}
	return c;
}

static void le_put(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* The first 72 bytes of a token for c, written from auth.h's drawing. */
static void cap_layout(const struct auth_cap *c, uint8_t *p)
{
	p[0] = c->version;
	p[1] = c->flags;
	le_put(p + 2, c->rights, 2);
	le_put(p + 4, c->key_id, 4);
	le_put(p + 8, (uint64_t)c->expires_ms, 8);
	le_put(p + 16, (uint64_t)c->issued_ms, 8);
	le_put(p + 24, c->client, 8);
	le_put(p + 32, c->tenant, 4);
	le_put(p + 36, c->user, 4);
	memcpy(p + 40, c->pool.b, 16);
	memcpy(p + 56, c->cont.b, 16);
}

/* The token's MAC under key, computed apart from the library. */
static void cap_mac(const uint8_t *key, uint8_t *tok)
{
	unsigned len = 0;

	assert_non_null(HMAC(EVP_sha256(), key, AUTH_KEY_SIZE, tok, 72, tok + 72, &len));
	assert_int_equal(len, 32);
}

static uint8_t *tok_dup(const uint8_t *tok, size_t len)
{
	uint8_t *p = malloc(len ? len : 1);

	assert_non_null(p);
	memcpy(p, tok, len);
	return p;
}

static void cap_equal(const struct auth_cap *a, const struct auth_cap *b)
{
	assert_int_equal(a->version, b->version);
	assert_int_equal(a->flags, b->flags);
	assert_int_equal(a->rights, b->rights);
	assert_int_equal(a->key_id, b->key_id);
	assert_int_equal(a->expires_ms, b->expires_ms);
	assert_int_equal(a->issued_ms, b->issued_ms);
	assert_int_equal(a->client, b->client);
	assert_int_equal(a->tenant, b->tenant);
	assert_int_equal(a->user, b->user);
	assert_memory_equal(a->pool.b, b->pool.b, 16);
	assert_memory_equal(a->cont.b, b->cont.b, 16);
}

/* ---- capabilities -------------------------------------------------------- */

static void test_sign_verify(void **state)
{
	struct fix *f = *state;
	struct auth_cap c = cap_sample(0x1122334455667788ull), got;
	uint8_t tok[AUTH_CAP_SIZE], want[AUTH_CAP_SIZE];
	uint8_t *p;

	c.key_id = 99; /* overwritten by the signer */
	c.version = 0;
	assert_int_equal(auth_cap_sign(&f->kr, &c, tok), 0);
	assert_int_equal(c.key_id, 1);
	assert_int_equal(c.version, AUTH_CAP_VERSION);

	/* The bytes are exactly the documented layout and MAC. */
	cap_layout(&c, want);
	cap_mac(key_a, want);
	assert_memory_equal(tok, want, AUTH_CAP_SIZE);

	p = tok_dup(tok, AUTH_CAP_SIZE);
	memset(&got, 0, sizeof(got));
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, p, AUTH_CAP_SIZE, NOW, &got), 0);
	cap_equal(&got, &c);
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, p, AUTH_CAP_SIZE, NOW, NULL), 0);
	memset(&got, 0, sizeof(got));
	assert_int_equal(auth_cap_decode(p, AUTH_CAP_SIZE, &got), 0);
	cap_equal(&got, &c);
	free(p);
}

/* Extreme values survive the trip: all bits of every field. */
static void test_sign_verify_extremes(void **state)
{
	struct fix *f = *state;
	struct auth_cap c, got;
	uint8_t tok[AUTH_CAP_SIZE];

	memset(&c, 0xff, sizeof(c));
	c.flags = 0;
	c.expires_ms = INT64_MAX;
	c.issued_ms = INT64_MIN;
	assert_int_equal(auth_cap_sign(&f->kr, &c, tok), 0);
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, tok, sizeof(tok), NOW, &got), 0);
	cap_equal(&got, &c);
}

static void test_tamper_every_byte(void **state)
{
	struct fix *f = *state;
	struct auth_cap c = cap_sample(5), got;
	uint8_t tok[AUTH_CAP_SIZE];
	static const uint8_t flips[] = {0x01, 0x80, 0xff};

	assert_int_equal(auth_cap_sign(&f->kr, &c, tok), 0);
	for (size_t i = 0; i < AUTH_CAP_SIZE; i++) {
		for (size_t j = 0; j < sizeof(flips); j++) {
			uint8_t *p = tok_dup(tok, sizeof(tok));

			p[i] ^= flips[j];
			memset(&got, 0x5a, sizeof(got));
			if (auth_cap_verify(&f->kr, &f->rv, p, sizeof(tok), NOW, &got) !=
			    -LODE_ECAPFORGED)
				fail_msg("byte %zu ^ 0x%02x was not refused as forged", i, flips[j]);
			/* Nothing of a forged token reaches the caller. */
			assert_int_equal(got.user, 0x5a5a5a5a);
			free(p);
		}
	}
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, tok, sizeof(tok), NOW, NULL), 0);
}

static void test_wrong_length(void **state)
{
	struct fix *f = *state;
	struct auth_cap c = cap_sample(5), got;
	uint8_t tok[AUTH_CAP_SIZE + 1];
	static const size_t lens[] = {1, 8, 72, AUTH_CAP_SIZE - 1, AUTH_CAP_SIZE + 1};

	assert_int_equal(auth_cap_sign(&f->kr, &c, tok), 0);
	tok[AUTH_CAP_SIZE] = 0;
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, NULL, 0, NOW, &got), -LODE_ECAPMISSING);
	assert_int_equal(auth_cap_decode(NULL, 0, &got), -LODE_ECAPFORGED);
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		uint8_t *p = tok_dup(tok, lens[i]);

		assert_int_equal(auth_cap_verify(&f->kr, &f->rv, p, lens[i], NOW, &got),
				 -LODE_ECAPFORGED);
		assert_int_equal(auth_cap_decode(p, lens[i], &got), -LODE_ECAPFORGED);
		free(p);
	}
}

/* A token of another version is refused even with a correct MAC. */
static void test_version(void **state)
{
	struct fix *f = *state;
	struct auth_cap c = cap_sample(5), got;
	uint8_t tok[AUTH_CAP_SIZE];
	static const uint8_t versions[] = {0, AUTH_CAP_VERSION + 1, 0xff};

	c.key_id = 1;
	for (size_t i = 0; i < sizeof(versions); i++) {
		c.version = versions[i];
		cap_layout(&c, tok);
		cap_mac(key_a, tok);
		assert_int_equal(auth_cap_verify(&f->kr, &f->rv, tok, sizeof(tok), NOW, &got),
				 -LODE_ECAPFORGED);
		assert_int_equal(auth_cap_decode(tok, sizeof(tok), &got), -LODE_ECAPFORGED);
	}
	/* The same bytes at the right version pass: the version was the reason. */
	c.version = AUTH_CAP_VERSION;
	cap_layout(&c, tok);
	cap_mac(key_a, tok);
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, tok, sizeof(tok), NOW, &got), 0);
}

/* A token naming a key the ring does not hold is refused even if its MAC
 * is right under some key the ring does hold. */
static void test_unknown_key(void **state)
{
	struct fix *f = *state;
	struct auth_cap c = cap_sample(5);
	uint8_t tok[AUTH_CAP_SIZE];
	struct auth_keyring empty;

	c.version = AUTH_CAP_VERSION;
	c.key_id = 2;
	cap_layout(&c, tok);
	cap_mac(key_a, tok);
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, tok, sizeof(tok), NOW, NULL),
			 -LODE_ECAPFORGED);

	assert_int_equal(auth_keyring_init(&empty), 0);
	assert_int_equal(auth_cap_sign(&empty, &c, tok), -ENOKEY);
	c.key_id = 1;
	cap_layout(&c, tok);
	cap_mac(key_a, tok);
	assert_int_equal(auth_cap_verify(&empty, &f->rv, tok, sizeof(tok), NOW, NULL),
			 -LODE_ECAPFORGED);
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, tok, sizeof(tok), NOW, NULL), 0);
	auth_keyring_fini(&empty);
}

static void test_expired(void **state)
{
	struct fix *f = *state;
	struct auth_cap c = cap_sample(5), got;
	uint8_t tok[AUTH_CAP_SIZE];

	assert_int_equal(auth_cap_sign(&f->kr, &c, tok), 0);
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, tok, sizeof(tok), c.expires_ms - 1, NULL),
			 0);
	memset(&got, 0, sizeof(got));
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, tok, sizeof(tok), c.expires_ms, &got),
			 -LODE_ECAPEXPIRED);
	cap_equal(&got, &c); /* genuine claims, for the caller's log */
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, tok, sizeof(tok), INT64_MAX, NULL),
			 -LODE_ECAPEXPIRED);
	/* Forged wins over expired: an expiry is not believed before the MAC. */
	tok[100] ^= 1;
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, tok, sizeof(tok), INT64_MAX, NULL),
			 -LODE_ECAPFORGED);
}

static void test_revoked(void **state)
{
	struct fix *f = *state;
	struct auth_cap before = cap_sample(1), at = cap_sample(2), after = cap_sample(3);
	struct auth_cap other = cap_sample(4), got;
	uint8_t tb[AUTH_CAP_SIZE], ta[AUTH_CAP_SIZE], tf[AUTH_CAP_SIZE], to[AUTH_CAP_SIZE];
	const int64_t t = NOW + 1000;

	before.issued_ms = t - 1;
	at.issued_ms = t;
	after.issued_ms = t + 1;
	other.user = 43;
	other.issued_ms = t - 1;
	assert_int_equal(auth_cap_sign(&f->kr, &before, tb), 0);
	assert_int_equal(auth_cap_sign(&f->kr, &at, ta), 0);
	assert_int_equal(auth_cap_sign(&f->kr, &after, tf), 0);
	assert_int_equal(auth_cap_sign(&f->kr, &other, to), 0);

	assert_int_equal(auth_revoked_set(&f->rv, 42, t), 0);
	memset(&got, 0, sizeof(got));
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, tb, sizeof(tb), NOW, &got),
			 -LODE_ECAPREVOKED);
	cap_equal(&got, &before);
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, ta, sizeof(ta), NOW, NULL),
			 -LODE_ECAPREVOKED);
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, tf, sizeof(tf), NOW, NULL), 0);
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, to, sizeof(to), NOW, NULL), 0);

	/* Lifting it restores the old tokens; lifting twice is harmless. */
	assert_int_equal(auth_revoked_set(&f->rv, 42, 0), 0);
	assert_int_equal(auth_revoked_set(&f->rv, 42, 0), 0);
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, tb, sizeof(tb), NOW, NULL), 0);
	assert_int_equal(auth_revoked_set(&f->rv, 42, -1), -EINVAL);
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, tb, sizeof(tb), NOW, NULL), 0);
}

/* Many users revoked in scrambled order: each lookup finds its own entry. */
static void test_revoked_many(void **state)
{
	struct fix *f = *state;
	struct auth_cap c = cap_sample(1);
	uint8_t tok[AUTH_CAP_SIZE];
	const unsigned n = 300;

	for (unsigned i = 0; i < n; i++) {
		uint32_t user = (i * 7919u) % n * 2; /* even users, scrambled */

		assert_int_equal(auth_revoked_set(&f->rv, user, NOW + user), 0);
	}
	assert_int_equal(f->rv.n, n);
	for (uint32_t user = 0; user < 2 * n; user++) {
		int want = user % 2 ? 0 : -LODE_ECAPREVOKED;

		c.user = user;
		c.issued_ms = NOW + user; /* exactly at its revocation time */
		assert_int_equal(auth_cap_sign(&f->kr, &c, tok), 0);
		assert_int_equal(auth_cap_verify(&f->kr, &f->rv, tok, sizeof(tok), NOW, NULL), want);
		c.issued_ms = NOW + user + 1;
		assert_int_equal(auth_cap_sign(&f->kr, &c, tok), 0);
		assert_int_equal(auth_cap_verify(&f->kr, &f->rv, tok, sizeof(tok), NOW, NULL), 0);
	}
	for (uint32_t user = 0; user < 2 * n; user += 4)
		assert_int_equal(auth_revoked_set(&f->rv, user, 0), 0);
	assert_int_equal(f->rv.n, n / 2);
	c.issued_ms = NOW;
	for (uint32_t user = 0; user < 2 * n; user += 2) {
		c.user = user;
		assert_int_equal(auth_cap_sign(&f->kr, &c, tok), 0);
		assert_int_equal(auth_cap_verify(&f->kr, &f->rv, tok, sizeof(tok), NOW, NULL),
				 user % 4 ? -LODE_ECAPREVOKED : 0);
	}
}

/* ---- keyring ------------------------------------------------------------- */

static void test_rotation(void **state)
{
	struct fix *f = *state;
	struct auth_cap c = cap_sample(1), got;
	uint8_t old[AUTH_CAP_SIZE], tok[AUTH_CAP_SIZE], second[AUTH_CAP_SIZE];
	struct auth_key keys[AUTH_KEYS_MAX];
	int64_t now = NOW;

	assert_int_equal(auth_cap_sign(&f->kr, &c, old), 0);
	assert_int_equal(c.key_id, 1);
	assert_int_equal(auth_keyring_rotate(&f->kr, now), 2);
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, old, sizeof(old), now, &got), 0);
	assert_int_equal(got.key_id, 1);
	assert_int_equal(auth_cap_sign(&f->kr, &c, second), 0);
	assert_int_equal(c.key_id, 2);
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, second, sizeof(second), now, NULL), 0);

	assert_int_equal(auth_keyring_export(&f->kr, keys, AUTH_KEYS_MAX), 2);
	assert_int_equal(keys[0].id, 1);
	assert_int_equal(keys[0].retired_ms, now);
	assert_memory_equal(keys[0].key, key_a, AUTH_KEY_SIZE);
	assert_int_equal(keys[1].id, 2);
	assert_int_equal(keys[1].retired_ms, 0);
	assert_memory_not_equal(keys[1].key, key_a, AUTH_KEY_SIZE);

	/* Fill the ring: key 1 is the oldest of a full ring and goes. */
	for (int id = 3; id <= AUTH_KEYS_MAX; id++) {
		assert_int_equal(auth_keyring_rotate(&f->kr, ++now), id);
		assert_int_equal(auth_cap_verify(&f->kr, &f->rv, old, sizeof(old), now, NULL), 0);
	}
	assert_int_equal(auth_keyring_rotate(&f->kr, ++now), AUTH_KEYS_MAX + 1);
	assert_int_equal(f->kr.nkeys, AUTH_KEYS_MAX);
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, old, sizeof(old), now, NULL),
			 -LODE_ECAPFORGED);
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, second, sizeof(second), now, NULL), 0);
	assert_int_equal(auth_cap_sign(&f->kr, &c, tok), 0);
	assert_int_equal(c.key_id, AUTH_KEYS_MAX + 1);

	/* Only the signing key is unretired. */
	assert_int_equal(auth_keyring_export(&f->kr, keys, AUTH_KEYS_MAX), AUTH_KEYS_MAX);
	for (unsigned i = 0; i < AUTH_KEYS_MAX; i++) {
		assert_int_equal(keys[i].id, i + 2);
		if (i + 1 < AUTH_KEYS_MAX)
			assert_true(keys[i].retired_ms > 0);
		else
			assert_int_equal(keys[i].retired_ms, 0);
	}
	assert_int_equal(auth_keyring_rotate(&f->kr, 0), -EINVAL);
}

static void test_keyring_add(void **state)
{
	struct fix *f = *state;
	struct auth_keyring kr;
	struct auth_cap c = cap_sample(1);
	uint8_t tok[AUTH_CAP_SIZE], want[AUTH_CAP_SIZE];
	const uint8_t key_b[AUTH_KEY_SIZE] = "the second key, thirty-two byte";
	struct auth_key keys[AUTH_KEYS_MAX];
	uint64_t gen;

	assert_int_equal(auth_keyring_init(&kr), 0);
	assert_int_equal(auth_keyring_add(&kr, 0, NULL, 0), 1); /* ids start at 1 */
	assert_int_equal(auth_keyring_add(&kr, 0, NULL, 0), 2);
	assert_int_equal(auth_keyring_add(&kr, 2, key_b, 0), -EEXIST);
	assert_int_equal(auth_keyring_add(&kr, 9, key_b, -1), -EINVAL);
	assert_int_equal(auth_keyring_add(&kr, 0x80000000u, key_b, 0), -EINVAL);
	assert_int_equal(auth_keyring_add(&kr, 5, key_b, 0), 5);
	assert_int_equal(auth_keyring_add(&kr, 0, NULL, 0), 6);

	/* A retired key with the highest id verifies but does not sign. */
	gen = __atomic_load_n(&kr.gen, __ATOMIC_ACQUIRE);
	assert_int_equal(auth_keyring_add(&kr, 10, key_a, NOW), 10);
	assert_true(__atomic_load_n(&kr.gen, __ATOMIC_ACQUIRE) != gen);
	assert_int_equal(auth_cap_sign(&kr, &c, tok), 0);
	assert_int_equal(c.key_id, 6);
	c.key_id = 10;
	c.version = AUTH_CAP_VERSION;
	cap_layout(&c, want);
	cap_mac(key_a, want);
	assert_int_equal(auth_cap_verify(&kr, &f->rv, want, sizeof(want), NOW, NULL), 0);

	/* Export and add back in order: the same ring, the same signer. */
	{
		struct auth_keyring back;
		unsigned n = auth_keyring_export(&kr, keys, AUTH_KEYS_MAX);

		assert_int_equal(n, 5);
		assert_int_equal(auth_keyring_export(&kr, keys, 2), 2);
		assert_int_equal(keys[1].id, 2);
		n = auth_keyring_export(&kr, keys, AUTH_KEYS_MAX);
		assert_int_equal(auth_keyring_init(&back), 0);
		for (unsigned i = 0; i < n; i++)
			assert_int_equal(auth_keyring_add(&back, keys[i].id, keys[i].key,
							  keys[i].retired_ms),
					 (int)keys[i].id);
		assert_int_equal(auth_cap_verify(&back, &f->rv, tok, sizeof(tok), NOW, NULL), 0);
		assert_int_equal(auth_cap_sign(&back, &c, want), 0);
		assert_int_equal(c.key_id, 6);
		assert_memory_equal(want, tok, sizeof(tok));
		auth_keyring_fini(&back);
	}

	/* A full ring refuses a key older than all it holds. */
	for (int id = 11; id <= 13; id++)
		assert_int_equal(auth_keyring_add(&kr, (uint32_t)id, NULL, 0), id);
	assert_int_equal(kr.nkeys, AUTH_KEYS_MAX);
	assert_int_equal(auth_keyring_add(&kr, 1, key_b, 0), -EEXIST);
	assert_int_equal(auth_keyring_add(&kr, 0, NULL, 0), 14);
	assert_int_equal(auth_keyring_export(&kr, keys, AUTH_KEYS_MAX), AUTH_KEYS_MAX);
	assert_int_equal(keys[0].id, 2); /* 1 went */
	assert_int_equal(auth_keyring_add(&kr, 1, key_b, 0), -ENOSPC);
	auth_keyring_fini(&kr);
}

static void test_keyring_prune(void **state)
{
	struct fix *f = *state;
	struct auth_cap c = cap_sample(1);
	uint8_t t1[AUTH_CAP_SIZE], t2[AUTH_CAP_SIZE], t3[AUTH_CAP_SIZE];
	struct auth_key keys[AUTH_KEYS_MAX];
	uint64_t gen;

	assert_int_equal(auth_cap_sign(&f->kr, &c, t1), 0);
	assert_int_equal(auth_keyring_rotate(&f->kr, NOW + 10), 2);
	assert_int_equal(auth_cap_sign(&f->kr, &c, t2), 0);
	assert_int_equal(auth_keyring_rotate(&f->kr, NOW + 20), 3);
	assert_int_equal(auth_cap_sign(&f->kr, &c, t3), 0);

	gen = f->kr.gen;
	assert_int_equal(auth_keyring_prune(&f->kr, NOW + 9), 0);
	assert_int_equal(f->kr.gen, gen); /* nothing changed, caches keep */
	assert_int_equal(auth_keyring_prune(&f->kr, NOW + 10), 1);
	assert_true(f->kr.gen != gen);
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, t1, sizeof(t1), NOW, NULL),
			 -LODE_ECAPFORGED);
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, t2, sizeof(t2), NOW, NULL), 0);
	/* The signing key stays whatever the time. */
	assert_int_equal(auth_keyring_prune(&f->kr, INT64_MAX), 1);
	assert_int_equal(auth_keyring_export(&f->kr, keys, AUTH_KEYS_MAX), 1);
	assert_int_equal(keys[0].id, 3);
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, t2, sizeof(t2), NOW, NULL),
			 -LODE_ECAPFORGED);
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, t3, sizeof(t3), NOW, NULL), 0);
	/* Ids keep growing after a prune. */
	assert_int_equal(auth_keyring_rotate(&f->kr, NOW + 30), 4);
}

/* Persist first, then add, then retire the old signer: what the management
 * service does instead of auth_keyring_rotate. */
static void test_keyring_retire(void **state)
{
	struct fix *f = *state;
	struct auth_cap c = cap_sample(1);
	uint8_t t1[AUTH_CAP_SIZE];
	const uint8_t key_b[AUTH_KEY_SIZE] = "the second key, thirty-two byte";

	assert_int_equal(auth_cap_sign(&f->kr, &c, t1), 0);
	assert_int_equal(auth_keyring_add(&f->kr, 2, key_b, 0), 2);
	assert_int_equal(auth_keyring_retire(&f->kr, 1, NOW), 0);
	assert_int_equal(auth_keyring_retire(&f->kr, 7, NOW), -ENOENT);
	assert_int_equal(auth_keyring_retire(&f->kr, 1, 0), -EINVAL);
	assert_int_equal(auth_cap_sign(&f->kr, &c, t1), 0);
	assert_int_equal(c.key_id, 2);
	assert_int_equal(auth_keyring_prune(&f->kr, NOW), 1);
	/* Retiring the only signer leaves nothing to sign with. */
	assert_int_equal(auth_keyring_retire(&f->kr, 2, NOW), 0);
	assert_int_equal(auth_cap_sign(&f->kr, &c, t1), -ENOKEY);
	assert_int_equal(auth_cap_verify(&f->kr, &f->rv, t1, sizeof(t1), NOW, NULL), 0);
}

/* ---- the verification cache ---------------------------------------------- */

static struct auth_cache *cache_new(void)
{
	struct auth_cache *cc = malloc(sizeof(*cc));

	assert_non_null(cc);
	memset(cc, 0xa5, sizeof(*cc)); /* init must not rely on zeroed memory */
	auth_cache_init(cc);
	return cc;
}

static void test_cache_hits(void **state)
{
	struct fix *f = *state;
	struct auth_cache *cc = cache_new();
	struct auth_cap c = cap_sample(1), got;
	uint8_t tok[AUTH_CAP_SIZE];

	assert_int_equal(auth_cap_sign(&f->kr, &c, tok), 0);
	for (int i = 0; i < 10; i++) {
		memset(&got, 0, sizeof(got));
		assert_int_equal(auth_cache_verify(cc, &f->kr, &f->rv, tok, sizeof(tok), NOW, &got),
				 0);
		cap_equal(&got, &c);
	}
	assert_int_equal(cc->misses, 1);
	assert_int_equal(cc->hits, 9);

	/* A hit still checks expiry, and the expired entry goes. */
	memset(&got, 0, sizeof(got));
	assert_int_equal(
		auth_cache_verify(cc, &f->kr, &f->rv, tok, sizeof(tok), c.expires_ms, &got),
		-LODE_ECAPEXPIRED);
	cap_equal(&got, &c);
	assert_int_equal(cc->hits, 9);
	assert_int_equal(auth_cache_verify(cc, &f->kr, &f->rv, tok, sizeof(tok), NOW, NULL), 0);
	assert_int_equal(cc->misses, 2);

	/* Bad lengths give verify's errors. */
	assert_int_equal(auth_cache_verify(cc, &f->kr, &f->rv, NULL, 0, NOW, NULL),
			 -LODE_ECAPMISSING);
	assert_int_equal(auth_cache_verify(cc, &f->kr, &f->rv, tok, sizeof(tok) - 1, NOW, NULL),
			 -LODE_ECAPFORGED);
	free(cc);
}

static void test_cache_flush(void **state)
{
	struct fix *f = *state;
	struct auth_cache *cc = cache_new();
	struct auth_cap c = cap_sample(1);
	uint8_t tok[AUTH_CAP_SIZE];

	assert_int_equal(auth_cap_sign(&f->kr, &c, tok), 0);
	assert_int_equal(auth_cache_verify(cc, &f->kr, &f->rv, tok, sizeof(tok), NOW, NULL), 0);
	assert_int_equal(auth_cache_verify(cc, &f->kr, &f->rv, tok, sizeof(tok), NOW, NULL), 0);
	assert_int_equal(cc->hits, 1);

	/* Revoking another user flushes too, but the token still passes. */
	assert_int_equal(auth_revoked_set(&f->rv, 1000, NOW), 0);
	assert_int_equal(auth_cache_verify(cc, &f->kr, &f->rv, tok, sizeof(tok), NOW, NULL), 0);
	assert_int_equal(cc->hits, 1);
	assert_int_equal(cc->misses, 2);

	/* Revoking its user refuses it on the very next call. */
	assert_int_equal(auth_revoked_set(&f->rv, c.user, NOW), 0);
	assert_int_equal(auth_cache_verify(cc, &f->kr, &f->rv, tok, sizeof(tok), NOW, NULL),
			 -LODE_ECAPREVOKED);
	assert_int_equal(auth_revoked_set(&f->rv, c.user, 0), 0);
	assert_int_equal(auth_cache_verify(cc, &f->kr, &f->rv, tok, sizeof(tok), NOW, NULL), 0);
	assert_int_equal(auth_cache_verify(cc, &f->kr, &f->rv, tok, sizeof(tok), NOW, NULL), 0);
	assert_int_equal(cc->hits, 2);

	/* Dropping its key refuses it on the very next call. */
	assert_int_equal(auth_keyring_rotate(&f->kr, NOW), 2);
	assert_int_equal(auth_cache_verify(cc, &f->kr, &f->rv, tok, sizeof(tok), NOW, NULL), 0);
	assert_int_equal(auth_keyring_prune(&f->kr, NOW), 1);
	assert_int_equal(auth_cache_verify(cc, &f->kr, &f->rv, tok, sizeof(tok), NOW, NULL),
			 -LODE_ECAPFORGED);
	free(cc);
}

/*
 * Two genuine tokens that land in one slot, and near copies of a cached
 * token (which land in its slot unless the flipped byte is one the slot is
 * chosen by): the cache answers each with its own claims or refusal.
 */
static void test_cache_collision(void **state)
{
	struct fix *f = *state;
	struct auth_cache *cc = cache_new();
	struct auth_cap a = cap_sample(1), b, got;
	uint8_t ta[AUTH_CAP_SIZE], tb[AUTH_CAP_SIZE];
	uint64_t misses;
	unsigned tries;

	assert_int_equal(auth_cap_sign(&f->kr, &a, ta), 0);
	/* Find b in a's slot: caching b evicts a, so a misses again. */
	for (tries = 0; tries < 100000; tries++) {
		b = cap_sample(1000 + tries);
		assert_int_equal(auth_cap_sign(&f->kr, &b, tb), 0);
		assert_int_equal(auth_cache_verify(cc, &f->kr, &f->rv, ta, sizeof(ta), NOW, NULL), 0);
		assert_int_equal(auth_cache_verify(cc, &f->kr, &f->rv, tb, sizeof(tb), NOW, NULL), 0);
		misses = cc->misses;
		assert_int_equal(auth_cache_verify(cc, &f->kr, &f->rv, ta, sizeof(ta), NOW, NULL), 0);
		if (cc->misses != misses)
			break;
	}
	assert_true(tries < 100000);
	for (int i = 0; i < 4; i++) {
		const uint8_t *t = i % 2 ? ta : tb; /* b, a, b, a: each evicts the other */
		const struct auth_cap *want = i % 2 ? &a : &b;

		memset(&got, 0, sizeof(got));
		assert_int_equal(auth_cache_verify(cc, &f->kr, &f->rv, t, AUTH_CAP_SIZE, NOW, &got),
				 0);
		cap_equal(&got, want);
	}

	/* a is cached now; none of its near copies passes for it. */
	for (size_t i = 0; i < AUTH_CAP_SIZE; i++) {
		uint8_t *p = tok_dup(ta, sizeof(ta));

		p[i] ^= 0x01;
		assert_int_equal(auth_cache_verify(cc, &f->kr, &f->rv, p, sizeof(ta), NOW, &got),
				 -LODE_ECAPFORGED);
		free(p);
	}
	misses = cc->misses;
	assert_int_equal(auth_cache_verify(cc, &f->kr, &f->rv, ta, sizeof(ta), NOW, NULL), 0);
	assert_int_equal(cc->misses, misses); /* and the near copies did not evict it */
	free(cc);
}

/*
 * Targets verify through their caches while the management thread rotates
 * and revokes. Rotation keeps old tokens good; once the revocation returns,
 * every reader's next call refuses.
 */
struct reader {
	struct fix *f;
	const uint8_t *tok;
	int stop;     /* set by the main thread */
	int revoked;  /* set by the main thread after the revocation returned */
	int bad;      /* an answer that should not have come */
	int refused;  /* saw REVOKED after revoked was set */
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	struct auth_cache *cc = cache_new();

	while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
		int was = __atomic_load_n(&r->revoked, __ATOMIC_ACQUIRE);
		int rc = auth_cache_verify(cc, &r->f->kr, &r->f->rv, r->tok, AUTH_CAP_SIZE, NOW,
					   NULL);

		if (was && rc == -LODE_ECAPREVOKED)
			r->refused = 1;
		else if (was || (rc != 0 && rc != -LODE_ECAPREVOKED))
			r->bad = 1;
	}
	free(cc);
	return NULL;
}

static void test_cache_threads(void **state)
{
	struct fix *f = *state;
	struct auth_cap c = cap_sample(1);
	uint8_t tok[AUTH_CAP_SIZE];
	struct reader r[3];
	pthread_t th[3];

	assert_int_equal(auth_cap_sign(&f->kr, &c, tok), 0);
	for (int i = 0; i < 3; i++) {
		r[i] = (struct reader){.f = f, .tok = tok};
		assert_int_equal(pthread_create(&th[i], NULL, reader_main, &r[i]), 0);
	}
	for (int i = 0; i < 3; i++)
		assert_true(auth_keyring_rotate(&f->kr, NOW + i + 1) > 0);
	assert_int_equal(auth_revoked_set(&f->rv, c.user, NOW), 0);
	for (int i = 0; i < 3; i++)
		__atomic_store_n(&r[i].revoked, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 3; i++)
		while (!__atomic_load_n(&r[i].refused, __ATOMIC_ACQUIRE) &&
		       !__atomic_load_n(&r[i].bad, __ATOMIC_ACQUIRE))
			;
	for (int i = 0; i < 3; i++) {
		__atomic_store_n(&r[i].stop, 1, __ATOMIC_RELEASE);
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(r[i].bad, 0);
		assert_int_equal(r[i].refused, 1);
	}
}

/* ---- secrets ------------------------------------------------------------- */

static void test_secret(void **state)
{
	char h1[AUTH_HASH_TEXT], h2[AUTH_HASH_TEXT];
	unsigned iter = 0;

	assert_int_equal(auth_secret_hash("hunter2", 7, h1, sizeof(h1)), 0);
	assert_int_equal(strncmp(h1, "pbkdf2-sha256$", 14), 0);
	assert_int_equal(auth_secret_parse(h1, &iter), 0);
	assert_int_equal(iter, AUTH_SECRET_ITER);
	assert_int_equal(auth_secret_check("hunter2", 7, h1), 0);
	assert_int_equal(auth_secret_check("hunter3", 7, h1), -LODE_EAUTH);
	assert_int_equal(auth_secret_check("hunter2", 6, h1), -LODE_EAUTH);
	assert_int_equal(auth_secret_check("hunter2x", 8, h1), -LODE_EAUTH);

	/* A fresh salt each time: two hashes of one secret differ, both check. */
	assert_int_equal(auth_secret_hash("hunter2", 7, h2, sizeof(h2)), 0);
	assert_string_not_equal(h1, h2);
	assert_int_equal(auth_secret_check("hunter2", 7, h2), 0);

	/* Binary secrets: a NUL inside counts. */
	assert_int_equal(auth_secret_hash("a\0b", 3, h2, sizeof(h2)), 0);
	assert_int_equal(auth_secret_check("a\0b", 3, h2), 0);
	assert_int_equal(auth_secret_check("a\0c", 3, h2), -LODE_EAUTH);
	assert_int_equal(auth_secret_check("a", 1, h2), -LODE_EAUTH);
}

static void test_secret_bad_input(void **state)
{
	char h[AUTH_HASH_TEXT], big[AUTH_SECRET_MAX + 1];

	assert_int_equal(auth_secret_hash("", 0, h, sizeof(h)), -EINVAL);
	assert_int_equal(auth_secret_hash(NULL, 0, h, sizeof(h)), -EINVAL);
	memset(big, 'x', sizeof(big));
	assert_int_equal(auth_secret_hash(big, sizeof(big), h, sizeof(h)), -EINVAL);
	assert_int_equal(auth_secret_hash(big, AUTH_SECRET_MAX, h, sizeof(h)), 0);
	assert_int_equal(auth_secret_check(big, AUTH_SECRET_MAX, h), 0);
	assert_int_equal(auth_secret_check(big, sizeof(big), h), -LODE_EAUTH);
	assert_int_equal(auth_secret_check("", 0, h), -LODE_EAUTH);
	assert_int_equal(auth_secret_check(NULL, 0, h), -LODE_EAUTH);

	/* The whole text must fit: one byte short is refused, never cut. */
	assert_int_equal(auth_secret_hash("s", 1, h, sizeof(h)), 0);
	{
		size_t need = strlen(h) + 1;
		char *small = malloc(need - 1);

		assert_non_null(small);
		assert_int_equal(auth_secret_hash("s", 1, small, need - 1), -EMSGSIZE);
		assert_int_equal(small[0], '\0');
		free(small);
		assert_int_equal(auth_secret_hash("s", 1, h, need), 0);
	}
}

/* A stored text written by hand, with its own iteration count and salt
 * length: the check runs what the text says, not the defaults. */
static void test_secret_known(void **state)
{
	static const uint8_t salt[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	uint8_t dk[32];
	char text[AUTH_HASH_TEXT];
	int n;

	assert_int_equal(PKCS5_PBKDF2_HMAC("pw", 2, salt, sizeof(salt), 1000, EVP_sha256(), 32, dk),
			 1);
	n = snprintf(text, sizeof(text), "pbkdf2-sha256$1000$0102030405060708$");
	for (int i = 0; i < 32; i++)
		n += snprintf(text + n, sizeof(text) - (size_t)n, "%02x", dk[i]);
	assert_int_equal(auth_secret_check("pw", 2, text), 0);
	assert_int_equal(auth_secret_check("pW", 2, text), -LODE_EAUTH);
}

static void test_secret_malformed(void **state)
{
	static const char *const bad[] = {
		"",
		"pbkdf2-sha256$",
		"pbkdf2-sha1$1000$0102030405060708$"
		"0000000000000000000000000000000000000000000000000000000000000000",
		"PBKDF2-SHA256$1000$0102030405060708$"
		"0000000000000000000000000000000000000000000000000000000000000000",
		/* iterations: zero, leading zero, sign, too many, missing */
		"pbkdf2-sha256$0$0102030405060708$"
		"0000000000000000000000000000000000000000000000000000000000000000",
		"pbkdf2-sha256$01000$0102030405060708$"
		"0000000000000000000000000000000000000000000000000000000000000000",
		"pbkdf2-sha256$-1000$0102030405060708$"
		"0000000000000000000000000000000000000000000000000000000000000000",
		"pbkdf2-sha256$10000001$0102030405060708$"
		"0000000000000000000000000000000000000000000000000000000000000000",
		"pbkdf2-sha256$99999999999999999999999$0102030405060708$"
		"0000000000000000000000000000000000000000000000000000000000000000",
		"pbkdf2-sha256$$0102030405060708$"
		"0000000000000000000000000000000000000000000000000000000000000000",
		/* salt: too short, odd, upper case, not hex, empty, too long */
		"pbkdf2-sha256$1000$01020304050607$"
		"0000000000000000000000000000000000000000000000000000000000000000",
		"pbkdf2-sha256$1000$010203040506070$"
		"0000000000000000000000000000000000000000000000000000000000000000",
		"pbkdf2-sha256$1000$0102030405060A08$"
		"0000000000000000000000000000000000000000000000000000000000000000",
		"pbkdf2-sha256$1000$01020304050607zz$"
		"0000000000000000000000000000000000000000000000000000000000000000",
		"pbkdf2-sha256$1000$$"
		"0000000000000000000000000000000000000000000000000000000000000000",
		"pbkdf2-sha256$1000$"
		"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20$"
		"0000000000000000000000000000000000000000000000000000000000000000",
		/* hash: short, long, trailing byte, missing, separator missing */
		"pbkdf2-sha256$1000$0102030405060708$"
		"00000000000000000000000000000000000000000000000000000000000000",
		"pbkdf2-sha256$1000$0102030405060708$"
		"000000000000000000000000000000000000000000000000000000000000000000",
		"pbkdf2-sha256$1000$0102030405060708$"
		"0000000000000000000000000000000000000000000000000000000000000000$",
		"pbkdf2-sha256$1000$0102030405060708$",
		"pbkdf2-sha256$1000$0102030405060708",
		"pbkdf2-sha256$1000 $0102030405060708$"
		"0000000000000000000000000000000000000000000000000000000000000000",
	};
	static const char good[] = "pbkdf2-sha256$1000$0102030405060708$"
				   "0000000000000000000000000000000000000000000000000000000000000000";
	unsigned iter = 0;

	/* The template parses: each bad one differs from it in one way. */
	assert_int_equal(auth_secret_parse(good, &iter), 0);
	assert_int_equal(iter, 1000);
	assert_int_equal(auth_secret_check("x", 1, good), -LODE_EAUTH);
	assert_int_equal(auth_secret_parse(NULL, NULL), -EINVAL);
	assert_int_equal(auth_secret_check("x", 1, NULL), -EINVAL);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (auth_secret_parse(bad[i], NULL) != -EINVAL)
			fail_msg("parsed: %s", bad[i]);
		assert_int_equal(auth_secret_check("x", 1, bad[i]), -EINVAL);
	}
}

/* ---- AES-256-GCM --------------------------------------------------------- */

/* The GCM specification's test cases 13 and 14 (zero key, zero iv). */
static void test_aead_known(void **state)
{
	static const uint8_t ct14[16] = {0xce, 0xa7, 0x40, 0x3d, 0x4d, 0x60, 0x6b, 0x6e,
					 0x07, 0x4e, 0xc5, 0xd3, 0xba, 0xf3, 0x9d, 0x18};
	static const uint8_t tag14[16] = {0xd0, 0xd1, 0xc8, 0xa7, 0x99, 0x99, 0x6b, 0xf0,
					  0x26, 0x5b, 0x98, 0xb5, 0xd4, 0x8a, 0xb9, 0x19};
	static const uint8_t tag13[16] = {0x53, 0x0f, 0x8a, 0xfb, 0xc7, 0x45, 0x36, 0xb9,
					  0xa9, 0x63, 0xb4, 0xf1, 0xc4, 0xcb, 0x73, 0x8b};
	uint8_t key[AUTH_AEAD_KEY] = {0}, iv[AUTH_AEAD_IV] = {0}, pt[16] = {0}, ct[16], tag[16];

	assert_int_equal(auth_aead_seal(key, iv, NULL, 0, NULL, 0, NULL, tag), 0);
	assert_memory_equal(tag, tag13, 16);
	assert_int_equal(auth_aead_open(key, iv, NULL, 0, NULL, 0, NULL, tag), 0);
	assert_int_equal(auth_aead_seal(key, iv, NULL, 0, pt, 16, ct, tag), 0);
	assert_memory_equal(ct, ct14, 16);
	assert_memory_equal(tag, tag14, 16);
}

static void test_aead(void **state)
{
	uint8_t key[AUTH_AEAD_KEY], iv[AUTH_AEAD_IV], aad[20], tag[AUTH_AEAD_TAG], t2[16];
	const size_t n = 1000;
	uint8_t *pt = malloc(n), *ct = malloc(n), *out = malloc(n);
	static const uint8_t zero[1000];

	assert_non_null(pt);
	assert_non_null(ct);
	assert_non_null(out);
	assert_int_equal(auth_random(key, sizeof(key)), 0);
	assert_int_equal(auth_random(iv, sizeof(iv)), 0);
	assert_int_equal(auth_random(aad, sizeof(aad)), 0);
	for (size_t i = 0; i < n; i++)
		pt[i] = (uint8_t)i;

	assert_int_equal(auth_aead_seal(key, iv, aad, sizeof(aad), pt, n, ct, tag), 0);
	assert_memory_not_equal(ct, pt, n);
	assert_int_equal(auth_aead_open(key, iv, aad, sizeof(aad), ct, n, out, tag), 0);
	assert_memory_equal(out, pt, n);

	/* In place, both ways, gives the same bytes. */
	memcpy(out, pt, n);
	assert_int_equal(auth_aead_seal(key, iv, aad, sizeof(aad), out, n, out, t2), 0);
	assert_memory_equal(out, ct, n);
	assert_memory_equal(t2, tag, 16);
	assert_int_equal(auth_aead_open(key, iv, aad, sizeof(aad), out, n, out, t2), 0);
	assert_memory_equal(out, pt, n);

	/* Tampered ciphertext, tag, aad, iv, or the wrong key: refused, out zeroed. */
	for (int what = 0; what < 5; what++) {
		uint8_t k2[AUTH_AEAD_KEY], iv2[AUTH_AEAD_IV], aad2[20], tag2[16];

		memcpy(k2, key, sizeof(k2));
		memcpy(iv2, iv, sizeof(iv2));
		memcpy(aad2, aad, sizeof(aad2));
		memcpy(tag2, tag, sizeof(tag2));
		memcpy(out, ct, n);
		switch (what) {
		case 0: out[n / 2] ^= 0x04; break;
		case 1: tag2[15] ^= 0x80; break;
		case 2: aad2[0] ^= 0x01; break;
		case 3: iv2[11] ^= 0x01; break;
		case 4: k2[31] ^= 0x01; break;
		}
		assert_int_equal(auth_aead_open(k2, iv2, aad2, sizeof(aad2), out, n, out, tag2),
				 -LODE_ECSUM);
		assert_memory_equal(out, zero, n);
	}
	/* Aad of another length, none at all: refused. */
	memset(out, 0x77, n);
	assert_int_equal(auth_aead_open(key, iv, aad, sizeof(aad) - 1, ct, n, out, tag),
			 -LODE_ECSUM);
	assert_memory_equal(out, zero, n);
	assert_int_equal(auth_aead_open(key, iv, NULL, 0, ct, n, out, tag), -LODE_ECSUM);
	/* A truncated ciphertext: refused. */
	assert_int_equal(auth_aead_open(key, iv, aad, sizeof(aad), ct, n - 1, out, tag),
			 -LODE_ECSUM);
	free(pt);
	free(ct);
	free(out);
}

static void test_key_wrap(void **state)
{
	uint8_t kek[AUTH_AEAD_KEY], other[AUTH_AEAD_KEY], key[AUTH_AEAD_KEY], got[AUTH_AEAD_KEY];
	uint8_t w[AUTH_WRAPPED_SIZE], w2[AUTH_WRAPPED_SIZE];
	static const uint8_t zero[AUTH_AEAD_KEY];

	assert_int_equal(auth_random(kek, sizeof(kek)), 0);
	assert_int_equal(auth_random(other, sizeof(other)), 0);
	assert_int_equal(auth_random(key, sizeof(key)), 0);
	assert_int_equal(auth_key_wrap(kek, key, w), 0);
	assert_memory_not_equal(w + AUTH_AEAD_IV, key, AUTH_AEAD_KEY);
	assert_int_equal(auth_key_unwrap(kek, w, sizeof(w), got), 0);
	assert_memory_equal(got, key, sizeof(key));

	/* A random iv: wrapping twice gives other bytes, both unwrap. */
	assert_int_equal(auth_key_wrap(kek, key, w2), 0);
	assert_memory_not_equal(w, w2, sizeof(w));
	assert_int_equal(auth_key_unwrap(kek, w2, sizeof(w2), got), 0);
	assert_memory_equal(got, key, sizeof(key));

	memset(got, 0x55, sizeof(got));
	assert_int_equal(auth_key_unwrap(other, w, sizeof(w), got), -LODE_ECSUM);
	assert_memory_equal(got, zero, sizeof(got));
	for (size_t i = 0; i < sizeof(w); i++) {
		memcpy(w2, w, sizeof(w));
		w2[i] ^= 0x01;
		memset(got, 0x55, sizeof(got));
		assert_int_equal(auth_key_unwrap(kek, w2, sizeof(w2), got), -LODE_ECSUM);
		assert_memory_equal(got, zero, sizeof(got));
	}
	assert_int_equal(auth_key_unwrap(kek, w, sizeof(w) - 1, got), -EINVAL);
	assert_int_equal(auth_key_unwrap(kek, w, 0, got), -EINVAL);

	/* A wrapped key is not a sealed buffer: opening it without the label fails. */
	assert_int_equal(auth_aead_open(kek, w, NULL, 0, w + AUTH_AEAD_IV, AUTH_AEAD_KEY, got,
					w + AUTH_AEAD_IV + AUTH_AEAD_KEY),
			 -LODE_ECSUM);
}

static void test_random(void **state)
{
	uint8_t a[32], b[32];

	assert_int_equal(auth_random(a, sizeof(a)), 0);
	assert_int_equal(auth_random(b, sizeof(b)), 0);
	assert_memory_not_equal(a, b, sizeof(a));
	assert_int_equal(auth_random(NULL, 0), 0);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fix_setup, fix_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_sign_verify),
		T(test_sign_verify_extremes),
		T(test_tamper_every_byte),
		T(test_wrong_length),
		T(test_version),
		T(test_unknown_key),
		T(test_expired),
		T(test_revoked),
		T(test_revoked_many),
		T(test_rotation),
		T(test_keyring_add),
		T(test_keyring_prune),
		T(test_keyring_retire),
		T(test_cache_hits),
		T(test_cache_flush),
		T(test_cache_collision),
		T(test_cache_threads),
		cmocka_unit_test(test_secret),
		cmocka_unit_test(test_secret_bad_input),
		cmocka_unit_test(test_secret_known),
		cmocka_unit_test(test_secret_malformed),
		cmocka_unit_test(test_aead_known),
		cmocka_unit_test(test_aead),
		cmocka_unit_test(test_key_wrap),
		cmocka_unit_test(test_random),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
