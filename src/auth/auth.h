/*
 * Capabilities, signing keys, secrets and the ciphers of inline encryption.
 *
 * A capability is a token the management service signs and every target
 * checks on every request. Its wire form (AUTH_CAP_SIZE bytes, little-endian):
 *
 *   u8  version  AUTH_CAP_VERSION     u8  flags (0)
 *   u16 rights   AUTH_R_* bits        u32 key_id   the signing key
 *   u64 expires  unix ms              u64 issued   unix ms
 *   u64 client   the session it was issued to (random, per Connect)
 *   u32 tenant   u32 user             (ids in the management state)
 *   16  pool uuid                     16  container uuid (zero: pool-wide)
 *   32  HMAC-SHA256 over everything before it, under key key_id
 *
 * Pure code over OpenSSL: no I/O, no threads of its own, nothing blocks but
 * on the rwlocks below. A keyring and a revocation table are shared by the
 * management service (which changes them) and the targets (which read them),
 * so they take a lock; a target's verification cache is its own and takes
 * none. Their gen fields are written under the lock and read with atomic
 * loads, so a cache can notice a change without taking the lock.
 */
#ifndef LODE_AUTH_H
#define LODE_AUTH_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lode/types.h"

#define AUTH_CAP_VERSION 1
#define AUTH_CAP_SIZE 104
#define AUTH_KEY_SIZE 32
#define AUTH_KEYS_MAX 8 /* keys a ring keeps (the signing one and older ones) */

enum auth_right {
	AUTH_R_READ = 1u << 0,
	AUTH_R_WRITE = 1u << 1,
	AUTH_R_ADMIN = 1u << 2,
};

struct auth_cap {
	uint8_t version;
	uint8_t flags;
	uint16_t rights;
	uint32_t key_id;
	int64_t expires_ms;
	int64_t issued_ms;
	uint64_t client;
	uint32_t tenant;
	uint32_t user;
	struct lode_uuid pool;
	struct lode_uuid cont;
};

/* ---- signing keys ------------------------------------------------------- */

struct auth_key {
	uint32_t id;
	uint8_t key[AUTH_KEY_SIZE];
	int64_t retired_ms; /* 0: may sign; else when it stopped: verifies until pruned */
};

/*
 * The keys that sign and verify capabilities. One signs: the one with the
 * highest id among those not retired. Every key in the ring verifies, so
 * rotating does not stop a client that renews in time; the management
 * service drops retired keys once what they signed has expired
 * (auth_keyring_prune). keys[] is sorted by id, oldest first. Thread-safe.
 */
struct auth_keyring {
	pthread_rwlock_t lock;
	struct auth_key keys[AUTH_KEYS_MAX];
	unsigned nkeys;
	uint64_t gen; /* bumped on every change; caches compare it */
};

/* Errors: those of pthread_rwlock_init. */
int auth_keyring_init(struct auth_keyring *kr);
/* Wipes the keys. */
void auth_keyring_fini(struct auth_keyring *kr);
/*
 * Add a key: one from the persisted state (id > 0, key, retired_ms as
 * exported), or a new random one when key is NULL; id 0 means the next id
 * (the highest so far + 1, starting at 1). A key added with retired_ms 0 and
 * the highest id becomes the signing key. When the ring is full the oldest
 * key is dropped. Returns the key's id (> 0). Errors: -EEXIST (id already
 * in the ring), -ENOSPC (the ring is full of newer keys), -EINVAL
 * (retired_ms < 0, or id >= 2^31), -EOVERFLOW (id 0 and no next id below
 * 2^31), -EIO (no randomness).
 */
int auth_keyring_add(struct auth_keyring *kr, uint32_t id, const uint8_t *key, int64_t retired_ms);
/* Make a new random signing key with the next id; the previous signing key
 * retires at now_ms (and keeps verifying). Returns the new id; errors as
 * auth_keyring_add, and -EINVAL for now_ms <= 0. */
int auth_keyring_rotate(struct auth_keyring *kr, int64_t now_ms);
/* Mark key id retired at retired_ms (> 0): it stops signing and keeps
 * verifying until pruned. For a caller that persists a new key before
 * adding it and so cannot use auth_keyring_rotate. Errors: -ENOENT,
 * -EINVAL (retired_ms <= 0). */
int auth_keyring_retire(struct auth_keyring *kr, uint32_t id, int64_t retired_ms);
/* Drop the keys retired at or before before_ms (the signing key never is):
 * call with now - the longest capability lifetime. Returns how many went. */
unsigned auth_keyring_prune(struct auth_keyring *kr, int64_t before_ms);
/* Copy out up to max keys, oldest first (for persisting: adding them back in
 * this order restores the ring); returns how many were copied. */
unsigned auth_keyring_export(struct auth_keyring *kr, struct auth_key *out, unsigned max);

/* ---- capabilities ------------------------------------------------------- */

/* Sign c with the ring's signing key (sets c->key_id and c->version) into
 * out[AUTH_CAP_SIZE]. The other fields go out as they are (flags is
 * reserved: leave it 0). Errors: -ENOKEY (no signing key), -EIO (OpenSSL). */
int auth_cap_sign(struct auth_keyring *kr, struct auth_cap *c, uint8_t *out);

/* Parse the fields without checking the signature. Errors: -LODE_ECAPFORGED
 * (wrong length, 0 included, or version). For tools and the fuzzer. */
int auth_cap_decode(const void *buf, size_t len, struct auth_cap *c);

/*
 * Users whose capabilities issued before a time no longer count. Shared like
 * the keyring, thread-safe.
 */
struct auth_revoked {
	pthread_rwlock_t lock;
	struct {
		uint32_t user;
		int64_t before_ms;
	} *v;
	unsigned n, cap;
	uint64_t gen;
};
int auth_revoked_init(struct auth_revoked *r);
void auth_revoked_fini(struct auth_revoked *r);
/* Refuse user's capabilities issued at or before before_ms (0 lifts it).
 * Errors: -EINVAL (before_ms < 0), -ENOMEM. */
int auth_revoked_set(struct auth_revoked *r, uint32_t user, int64_t before_ms);

/*
 * Check a token: its length and version, its signature under a key the ring
 * still holds, its expiry against now_ms, and revocation, in that order.
 * Fills c (may be NULL) on success, and on -LODE_ECAPEXPIRED and
 * -LODE_ECAPREVOKED (the claims are genuine, only no longer good); leaves it
 * alone otherwise. buf may be NULL when len is 0.
 * Errors, each distinct:
 *   -LODE_ECAPMISSING  len == 0
 *   -LODE_ECAPFORGED   wrong length or version, unknown key, bad signature
 *   -LODE_ECAPEXPIRED  expires_ms <= now_ms
 *   -LODE_ECAPREVOKED  its user was revoked at or after it was issued
 *   -EIO               OpenSSL failed (out of memory)
 */
int auth_cap_verify(struct auth_keyring *kr, struct auth_revoked *rv, const void *buf, size_t len,
		    int64_t now_ms, struct auth_cap *c);

/*
 * A target's cache of tokens it verified, so the HMAC runs once per token
 * and not per request. Not thread-safe: one per target thread. Direct
 * mapped, a slot chosen by bytes of the token's MAC; a hit needs all
 * AUTH_CAP_SIZE bytes equal to the cached token's. Entries die with the
 * token's expiry, and all at once when the keyring or the revocation table
 * changes (their gen moved). Only successes are cached.
 */
#define AUTH_CACHE_SLOTS 256
struct auth_cache {
	struct {
		uint8_t tok[AUTH_CAP_SIZE];
		struct auth_cap cap;
		bool used;
	} slot[AUTH_CACHE_SLOTS];
	uint64_t kr_gen, rv_gen;
	uint64_t hits, misses;
};
void auth_cache_init(struct auth_cache *cc);
/* auth_cap_verify through the cache; same errors, same filling of c. A hit
 * costs two atomic loads, a 104-byte compare and a copy: no lock, no
 * allocation, no HMAC. */
int auth_cache_verify(struct auth_cache *cc, struct auth_keyring *kr, struct auth_revoked *rv,
		      const void *buf, size_t len, int64_t now_ms, struct auth_cap *c);

/* ---- secrets ------------------------------------------------------------ */

#define AUTH_SECRET_MAX 256
/* PBKDF2 iterations of a new hash: about 10 ms here. Costly enough to slow a
 * guesser who stole the state; cheap enough that Connect stays fast. */
#define AUTH_SECRET_ITER 30000
/*
 * Hash a secret with a fresh random salt (PBKDF2-HMAC-SHA256) into out (a
 * NUL-terminated string of at most AUTH_HASH_TEXT bytes, this included):
 * "pbkdf2-sha256$ITERATIONS$SALTHEX$HASHHEX". Takes about 10 ms on purpose.
 * Errors: -EINVAL (empty secret, or longer than AUTH_SECRET_MAX),
 * -EMSGSIZE (cap too small), -EIO (OpenSSL).
 */
#define AUTH_HASH_TEXT 128
int auth_secret_hash(const void *secret, size_t len, char *out, size_t cap);
/* 0 when secret matches the stored hash, -LODE_EAUTH when not (an empty or
 * over-long secret never matches), -EINVAL for a hash that does not parse.
 * Constant time in the secret's content. */
int auth_secret_check(const void *secret, size_t len, const char *stored);
/* Parse a stored hash without running it: 0 and its iteration count (iter
 * may be NULL), so a caller can rehash a weaker one at the next login, or
 * -EINVAL. */
int auth_secret_parse(const char *stored, unsigned *iter);

/* Fill buf with n random bytes (OpenSSL's generator). Errors: -EIO. */
int auth_random(void *buf, size_t n);

/* ---- inline encryption (AES-256-GCM) ------------------------------------ */

#define AUTH_AEAD_KEY 32
#define AUTH_AEAD_IV 12
#define AUTH_AEAD_TAG 16

/*
 * Encrypt n bytes of in into out (may be in) with key, iv and additional
 * authenticated data aad; writes the tag. Decrypt checks the tag:
 * -LODE_ECSUM when it does not match (tampered or wrong key), with out
 * zeroed. in and out may be NULL when n is 0, aad when aad_len is 0.
 * Thread-safe; each call uses its own cipher context. Other errors: -ENOMEM,
 * -EIO (OpenSSL).
 */
int auth_aead_seal(const uint8_t key[AUTH_AEAD_KEY], const uint8_t iv[AUTH_AEAD_IV],
		   const void *aad, size_t aad_len, const void *in, size_t n, void *out,
		   uint8_t tag[AUTH_AEAD_TAG]);
int auth_aead_open(const uint8_t key[AUTH_AEAD_KEY], const uint8_t iv[AUTH_AEAD_IV],
		   const void *aad, size_t aad_len, const void *in, size_t n, void *out,
		   const uint8_t tag[AUTH_AEAD_TAG]);

/* Wrap a data key under a key-encryption key (AES-256-GCM, random iv, a
 * fixed label as aad so a wrapped key is never taken for data):
 * out is AUTH_WRAPPED_SIZE bytes (iv, ciphertext, tag). */
#define AUTH_WRAPPED_SIZE (AUTH_AEAD_IV + AUTH_AEAD_KEY + AUTH_AEAD_TAG)
int auth_key_wrap(const uint8_t kek[AUTH_AEAD_KEY], const uint8_t key[AUTH_AEAD_KEY],
		  uint8_t out[AUTH_WRAPPED_SIZE]);
/* Errors: -LODE_ECSUM (wrong kek or damaged; key zeroed), -EINVAL (length). */
int auth_key_unwrap(const uint8_t kek[AUTH_AEAD_KEY], const void *wrapped, size_t len,
		    uint8_t key[AUTH_AEAD_KEY]);

#endif
