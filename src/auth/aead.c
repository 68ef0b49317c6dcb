/*
 * AES-256-GCM for inline encryption: sealing and opening a buffer, and
 * wrapping a container's data key under a key-encryption key.
 *
 * Each call takes its own cipher context, so any thread may call at any
 * time; the cipher implementation itself is fetched once, because a fetch
 * by name walks OpenSSL's provider tables on every call otherwise. A failed
 * open zeroes its output: the plaintext of a buffer whose tag does not
 * verify must never reach a caller that forgot to check the return code.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "auth/auth.h"
#include "lode/errno.h"

/* Bound on one EVP update: OpenSSL counts bytes in an int. */
#define AEAD_CHUNK (1 << 30)

/* Written into the aad of every wrapped key, so that a wrapped key and a
 * sealed data buffer can never be taken for one another. */
static const char aead_wrap_label[] = "lode key wrap v1";

static EVP_CIPHER *aead_gcm;
static pthread_once_t aead_gcm_once = PTHREAD_ONCE_INIT;

static void aead_gcm_fetch(void)
{
	aead_gcm = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
}

/* Feed n bytes through ctx (out NULL: as aad); 0 or -EIO. */
static int aead_update(EVP_CIPHER_CTX *ctx, bool enc, uint8_t *out, const uint8_t *in, size_t n)
{
	while (n > 0) {
		int chunk = n > AEAD_CHUNK ? AEAD_CHUNK : (int)n, outl = 0;
		int ok = enc ? EVP_EncryptUpdate(ctx, out, &outl, in, chunk)
			     : EVP_DecryptUpdate(ctx, out, &outl, in, chunk);

		/* GCM is a stream mode: every byte in comes out at once. */
		if (!ok || (out && outl != chunk))
			return -EIO;
		in += chunk;
		if (out)
			out += chunk;
		n -= (size_t)chunk;
	}
	return 0;
}

/* A context keyed for one seal (enc) or open; NULL with *rc set on failure. */
static EVP_CIPHER_CTX *aead_start(bool enc, const uint8_t *key, const uint8_t *iv, int *rc)
{
	EVP_CIPHER_CTX *ctx;
	int ok;

	pthread_once(&aead_gcm_once, aead_gcm_fetch);
	if (!aead_gcm) {
		*rc = -EIO;
		return NULL;
	}
	ctx = EVP_CIPHER_CTX_new();
	if (!ctx) {
		*rc = -ENOMEM;
		return NULL;
	}
	/* GCM's default iv length is AUTH_AEAD_IV (12 bytes); no ctrl needed. */
	ok = enc ? EVP_EncryptInit_ex(ctx, aead_gcm, NULL, key, iv)
		 : EVP_DecryptInit_ex(ctx, aead_gcm, NULL, key, iv);
	if (!ok) {
		EVP_CIPHER_CTX_free(ctx);
		*rc = -EIO;
		return NULL;
	}
	return ctx;
}

int auth_aead_seal(const uint8_t key[AUTH_AEAD_KEY], const uint8_t iv[AUTH_AEAD_IV],
		   const void *aad, size_t aad_len, const void *in, size_t n, void *out,
		   uint8_t tag[AUTH_AEAD_TAG])
{
	EVP_CIPHER_CTX *ctx;
	uint8_t last[AUTH_AEAD_TAG];
	int rc = 0, outl = 0;

	ctx = aead_start(true, key, iv, &rc);
	if (!ctx)
		return rc;
	rc = aead_update(ctx, true, NULL, aad, aad_len);
	if (rc == 0)
		rc = aead_update(ctx, true, out, in, n);
	if (rc == 0 && (EVP_EncryptFinal_ex(ctx, last, &outl) != 1 || outl != 0 ||
			EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, AUTH_AEAD_TAG, tag) != 1))
		rc = -EIO;
	EVP_CIPHER_CTX_free(ctx);
	return rc;
}

int auth_aead_open(const uint8_t key[AUTH_AEAD_KEY], const uint8_t iv[AUTH_AEAD_IV],
		   const void *aad, size_t aad_len, const void *in, size_t n, void *out,
		   const uint8_t tag[AUTH_AEAD_TAG])
{
	EVP_CIPHER_CTX *ctx;
	uint8_t want[AUTH_AEAD_TAG], last[AUTH_AEAD_TAG];
	int rc = 0, outl = 0;

	ctx = aead_start(false, key, iv, &rc);
	if (!ctx)
		goto fail;
	/* OpenSSL's ctrl takes a non-const tag; hand it a copy. */
	memcpy(want, tag, sizeof(want));
	rc = aead_update(ctx, false, NULL, aad, aad_len);
	if (rc == 0)
		rc = aead_update(ctx, false, out, in, n);
	if (rc == 0 && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, AUTH_AEAD_TAG, want) != 1)
		rc = -EIO;
	if (rc == 0 && EVP_DecryptFinal_ex(ctx, last, &outl) != 1)
		rc = -LODE_ECSUM;
	EVP_CIPHER_CTX_free(ctx);
fail:
	if (rc && n)
		OPENSSL_cleanse(out, n);
	return rc;
}

int auth_key_wrap(const uint8_t kek[AUTH_AEAD_KEY], const uint8_t key[AUTH_AEAD_KEY],
		  uint8_t out[AUTH_WRAPPED_SIZE])
{
	int rc = auth_random(out, AUTH_AEAD_IV);

	if (rc)
		return rc;
	return auth_aead_seal(kek, out, aead_wrap_label, sizeof(aead_wrap_label) - 1, key,
			      AUTH_AEAD_KEY, out + AUTH_AEAD_IV, out + AUTH_AEAD_IV + AUTH_AEAD_KEY);
}

int auth_key_unwrap(const uint8_t kek[AUTH_AEAD_KEY], const void *wrapped, size_t len,
		    uint8_t key[AUTH_AEAD_KEY])
{
	const uint8_t *w = wrapped;

	if (len != AUTH_WRAPPED_SIZE) {
		memset(key, 0, AUTH_AEAD_KEY);
		return -EINVAL;
	}
	return auth_aead_open(kek, w, aead_wrap_label, sizeof(aead_wrap_label) - 1,
			      w + AUTH_AEAD_IV, AUTH_AEAD_KEY, key, w + AUTH_AEAD_IV + AUTH_AEAD_KEY);
}
