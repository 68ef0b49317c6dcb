/*
 * The signing keys. A ring holds at most AUTH_KEYS_MAX keys sorted by id,
 * oldest first; ids only grow, so "newest" and "highest id" are the same
 * thing and a token's key id names one key forever. Which key signs and
 * how verification finds a key live beside their users in cap.c; this file
 * changes the ring. Every change bumps gen, which the targets' verification
 * caches watch (cache.c).
 */
#include <errno.h>
#include <string.h>

#include <openssl/crypto.h>

#include "auth/auth.h"

int auth_keyring_init(struct auth_keyring *kr)
{
	int rc;

	memset(kr->keys, 0, sizeof(kr->keys));
	kr->nkeys = 0;
	kr->gen = 1;
	rc = pthread_rwlock_init(&kr->lock, NULL);
	return -rc;
}

void auth_keyring_fini(struct auth_keyring *kr)
{
	OPENSSL_cleanse(kr->keys, sizeof(kr->keys));
	kr->nkeys = 0;
	pthread_rwlock_destroy(&kr->lock);
}

static void keyring_changed(struct auth_keyring *kr)
{
	__atomic_store_n(&kr->gen, kr->gen + 1, __ATOMIC_RELEASE);
}

static void keyring_remove(struct auth_keyring *kr, unsigned i)
{
	OPENSSL_cleanse(&kr->keys[i], sizeof(kr->keys[i]));
	memmove(&kr->keys[i], &kr->keys[i + 1], (kr->nkeys - i - 1) * sizeof(kr->keys[0]));
	kr->nkeys--;
	OPENSSL_cleanse(&kr->keys[kr->nkeys], sizeof(kr->keys[0]));
}

/* auth_keyring_add with the write lock held. */
static int keyring_insert(struct auth_keyring *kr, uint32_t id, const uint8_t *key,
			  int64_t retired_ms)
{
	uint32_t max = kr->nkeys ? kr->keys[kr->nkeys - 1].id : 0;
	struct auth_key k = {.retired_ms = retired_ms};
	unsigned i;

	if (id == 0) {
		if (max >= (uint32_t)INT32_MAX)
			return -EOVERFLOW; /* the id must fit the int we return */
		id = max + 1;
	}
	if (id > (uint32_t)INT32_MAX)
		return -EINVAL;
	for (i = 0; i < kr->nkeys && kr->keys[i].id < id; i++)
		;
	if (i < kr->nkeys && kr->keys[i].id == id)
		return -EEXIST;
	if (kr->nkeys == AUTH_KEYS_MAX && i == 0)
		return -ENOSPC; /* older than every key of a full ring */
	k.id = id;
	if (key)
		memcpy(k.key, key, AUTH_KEY_SIZE);
	else if (auth_random(k.key, AUTH_KEY_SIZE))
		return -EIO;
	if (kr->nkeys == AUTH_KEYS_MAX) {
		keyring_remove(kr, 0);
		i--;
	}
	memmove(&kr->keys[i + 1], &kr->keys[i], (kr->nkeys - i) * sizeof(kr->keys[0]));
	kr->keys[i] = k;
	kr->nkeys++;
	OPENSSL_cleanse(&k, sizeof(k));
	keyring_changed(kr);
	return (int)id;
}

int auth_keyring_add(struct auth_keyring *kr, uint32_t id, const uint8_t *key, int64_t retired_ms)
{
	int rc;

	if (retired_ms < 0)
		return -EINVAL;
	pthread_rwlock_wrlock(&kr->lock);
	rc = keyring_insert(kr, id, key, retired_ms);
	pthread_rwlock_unlock(&kr->lock);
	return rc;
}

int auth_keyring_rotate(struct auth_keyring *kr, int64_t now_ms)
{
	int rc;

	if (now_ms <= 0)
		return -EINVAL; /* retired_ms 0 would mean "still signs" */
	pthread_rwlock_wrlock(&kr->lock);
	rc = keyring_insert(kr, 0, NULL, 0);
	if (rc > 0) {
		/* Every other key stops signing; the usual case is one, the
		 * previous signing key. */
		for (unsigned i = 0; i < kr->nkeys; i++)
			if (kr->keys[i].id != (uint32_t)rc && kr->keys[i].retired_ms == 0)
				kr->keys[i].retired_ms = now_ms;
	}
	pthread_rwlock_unlock(&kr->lock);
	return rc;
}

int auth_keyring_retire(struct auth_keyring *kr, uint32_t id, int64_t retired_ms)
{
	int rc = -ENOENT;

	if (retired_ms <= 0)
		return -EINVAL;
	pthread_rwlock_wrlock(&kr->lock);
	for (unsigned i = 0; i < kr->nkeys; i++) {
		if (kr->keys[i].id == id) {
			kr->keys[i].retired_ms = retired_ms;
			keyring_changed(kr);
			rc = 0;
			break;
		}
	}
	pthread_rwlock_unlock(&kr->lock);
	return rc;
}

unsigned auth_keyring_prune(struct auth_keyring *kr, int64_t before_ms)
{
	unsigned dropped = 0;

	pthread_rwlock_wrlock(&kr->lock);
	for (unsigned i = 0; i < kr->nkeys;) {
		int64_t r = kr->keys[i].retired_ms;

		if (r != 0 && r <= before_ms) {
			keyring_remove(kr, i);
			dropped++;
		} else {
			i++;
		}
	}
	if (dropped)
		keyring_changed(kr);
	pthread_rwlock_unlock(&kr->lock);
	return dropped;
}

unsigned auth_keyring_export(struct auth_keyring *kr, struct auth_key *out, unsigned max)
{
	unsigned n;

	pthread_rwlock_rdlock(&kr->lock);
	n = kr->nkeys < max ? kr->nkeys : max;
	memcpy(out, kr->keys, n * sizeof(out[0]));
	pthread_rwlock_unlock(&kr->lock);
	return n;
}
