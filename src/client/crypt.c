/*
 * AES-256-GCM with an opened container's data key (inline encryption).
 *
 * A byte array is sealed in 4 KiB blocks (objects.c), so one 1 MiB I/O is
 * 256 seals or opens. Making and keying an OpenSSL context costs about as
 * much as sealing 1 KiB, so each container keeps a few contexts keyed with
 * its data key, and an operation only sets a fresh iv on one it borrows.
 * The contexts (which hold the expanded key) are freed, and the key zeroed,
 * when the container closes. An extent I/O borrows one context for all its
 * blocks (crypt_ctx_get), not one per block.
 *
 * Ciphertext buffers come from lode_buf_alloc and are kept until close
 * (crypt_buf_get): registered once, a request needs no registration of its
 * own, and over shm the target copies them out itself (from unregistered
 * memory this side's progress would copy, on the core that seals).
 */
#include "client/client.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

#include <openssl/evp.h>

#define CRYPT_FEED (1 << 30) /* EVP's lengths are ints */
#define CRYPT_BUF_ROUND ((size_t)64 << 10) /* registered buffers' sizes: fewer distinct ones */

int crypt_cont_init(lode_cont_t *ct, const uint8_t *wrapped, size_t len, uint32_t block)
{
	uint8_t tkey[AUTH_AEAD_KEY];
	int rc;

	if (len != AUTH_WRAPPED_SIZE)
		return -EPROTO; /* the service has no key that fits */
	if (block == 0)
		block = CRYPT_BLOCK_MIN; /* containers made before the property existed */
	if (!crypt_block_valid(block))
		return -EPROTO; /* the service checks this at create */
	if ((rc = conn_tenant_key(ct->c, tkey)) < 0)
		return rc;
	rc = auth_key_unwrap(tkey, wrapped, len, ct->key);
	explicit_bzero(tkey, sizeof(tkey));
	if (rc == -LODE_ECSUM)
		return -EKEYREJECTED; /* another tenant's key, or a damaged record */
	if (rc < 0)
		return rc;
	pthread_mutex_init(&ct->crypt_lock, NULL);
	ct->crypt_block = block;
	ct->encrypted = true;
	return 0;
}

void crypt_cont_fini(lode_cont_t *ct)
{
	if (!ct->encrypted)
		return;
	for (int e = 0; e < 2; e++)
		for (unsigned i = 0; i < ct->crypt_nctx[e]; i++)
			EVP_CIPHER_CTX_free(ct->crypt_ctx[e][i]); /* cleanses the key schedule */
	memset(ct->crypt_nctx, 0, sizeof(ct->crypt_nctx));
	for (unsigned i = 0; i < ct->nbufs; i++)
		lode_buf_free(ct->c, ct->bufs[i].p);
	ct->nbufs = 0;
	pthread_mutex_destroy(&ct->crypt_lock);
	explicit_bzero(ct->key, sizeof(ct->key));
	ct->encrypted = false;
}

void *crypt_ctx_get(lode_cont_t *ct, int enc)
{
	EVP_CIPHER_CTX *x = NULL;

	pthread_mutex_lock(&ct->crypt_lock);
	if (ct->crypt_nctx[enc])
		x = ct->crypt_ctx[enc][--ct->crypt_nctx[enc]];
	pthread_mutex_unlock(&ct->crypt_lock);
	if (x)
		return x;
	if (!(x = EVP_CIPHER_CTX_new()))
		return NULL;
	if (EVP_CipherInit_ex(x, EVP_aes_256_gcm(), NULL, ct->key, NULL, enc) != 1) {
		EVP_CIPHER_CTX_free(x);
		return NULL;
	}
	return x;
}

void crypt_ctx_put(lode_cont_t *ct, int enc, void *cx)
{
	EVP_CIPHER_CTX *x = cx;

	pthread_mutex_lock(&ct->crypt_lock);
	if (ct->crypt_nctx[enc] < sizeof(ct->crypt_ctx[enc]) / sizeof(ct->crypt_ctx[enc][0])) {
		ct->crypt_ctx[enc][ct->crypt_nctx[enc]++] = x;
		x = NULL;
	}
	pthread_mutex_unlock(&ct->crypt_lock);
	EVP_CIPHER_CTX_free(x);
}

/* Feed aad, then in -> out, through x (keyed, iv set). */
static int feed(EVP_CIPHER_CTX *x, const void *aad, size_t aad_len, const uint8_t *in, size_t n,
		uint8_t *out)
{
	int outl;

	if (aad_len && EVP_CipherUpdate(x, NULL, &outl, aad, (int)aad_len) != 1)
		return -EIO;
	while (n) {
		int k = n > CRYPT_FEED ? CRYPT_FEED : (int)n;

		if (EVP_CipherUpdate(x, out, &outl, in, k) != 1 || outl != k)
			return -EIO;
		in += k;
		out += k;
		n -= (size_t)k;
	}
	return 0;
}

int crypt_seal(lode_cont_t *ct, void *cx, const uint8_t iv[AUTH_AEAD_IV], const void *aad,
	       size_t aad_len, const void *in, size_t n, void *out, uint8_t tag[AUTH_AEAD_TAG])
{
	EVP_CIPHER_CTX *x = cx ? cx : crypt_ctx_get(ct, 1);
	uint8_t last[16];
	int outl = 0, rc;

	if (!x)
		return -ENOMEM;
	rc = EVP_CipherInit_ex(x, NULL, NULL, NULL, iv, 1) == 1 ? 0 : -EIO;
	if (rc == 0)
		rc = feed(x, aad, aad_len, in, n, out);
	if (rc == 0 && (EVP_CipherFinal_ex(x, last, &outl) != 1 || outl != 0 ||
			EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_GCM_GET_TAG, AUTH_AEAD_TAG, tag) != 1))
		rc = -EIO;
	if (!cx)
		crypt_ctx_put(ct, 1, x);
	return rc;
}

int crypt_open(lode_cont_t *ct, void *cx, const uint8_t iv[AUTH_AEAD_IV], const void *aad,
	       size_t aad_len, const void *in, size_t n, void *out,
	       const uint8_t tag[AUTH_AEAD_TAG])
{
	EVP_CIPHER_CTX *x = cx ? cx : crypt_ctx_get(ct, 0);
	uint8_t last[16], want[AUTH_AEAD_TAG];
	int outl = 0, rc;

	if (!x)
		return -ENOMEM;
	memcpy(want, tag, sizeof(want));
	rc = EVP_CipherInit_ex(x, NULL, NULL, NULL, iv, 0) == 1 ? 0 : -EIO;
	if (rc == 0)
		rc = feed(x, aad, aad_len, in, n, out);
	if (rc == 0 && EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_GCM_SET_TAG, AUTH_AEAD_TAG, want) != 1)
		rc = -EIO;
	if (rc == 0 && EVP_CipherFinal_ex(x, last, &outl) != 1)
		rc = -LODE_ECSUM;
	if (!cx)
		crypt_ctx_put(ct, 0, x);
	if (rc < 0 && n)
		memset(out, 0, n); /* never hand out bytes that did not authenticate */
	return rc;
}

/*
 * A free registered buffer that fits (the smallest), else a slot to register
 * one in (a free one too small is replaced), else malloc: all of ct's
 * registered buffers are in flight.
 */
void *crypt_buf_get(lode_cont_t *ct, size_t n, size_t *cap)
{
	const unsigned max = sizeof(ct->bufs) / sizeof(ct->bufs[0]);
	struct crypt_buf *fit = NULL, *spare = NULL;
	void *old, *p;
	size_t size;

	pthread_mutex_lock(&ct->crypt_lock);
	for (unsigned i = 0; i < ct->nbufs; i++) {
		struct crypt_buf *b = &ct->bufs[i];

		if (b->busy)
			continue;
		if (b->cap >= n && (!fit || b->cap < fit->cap))
			fit = b;
		else if (b->cap < n)
			spare = b;
	}
	if (fit) {
		fit->busy = true;
		*cap = fit->cap;
		pthread_mutex_unlock(&ct->crypt_lock);
		return fit->p;
	}
	if (!spare && ct->nbufs < max) {
		spare = &ct->bufs[ct->nbufs++];
		*spare = (struct crypt_buf){0};
	}
	if (spare)
		spare->busy = true; /* ours while it is (re)registered */
	pthread_mutex_unlock(&ct->crypt_lock);
	if (!spare) {
		*cap = n;
		return malloc(n);
	}
	/* lode_buf_alloc and lode_buf_free take the connection's lock: never
	 * here from a completion (crypt_buf_get is called by submitters). */
	old = spare->p;
	lode_buf_free(ct->c, old);
	size = (n + CRYPT_BUF_ROUND - 1) & ~(CRYPT_BUF_ROUND - 1);
	p = lode_buf_alloc(ct->c, size);
	pthread_mutex_lock(&ct->crypt_lock);
	spare->p = p;
	spare->cap = p ? size : 0;
	spare->busy = p != NULL;
	pthread_mutex_unlock(&ct->crypt_lock);
	if (p) {
		*cap = size;
		return p;
	}
	*cap = n;
	return malloc(n);
}

/* Registered buffers go back to the pool (never freed here: completions
 * call this with the connection's lock held), malloc'd ones are freed. */
void crypt_buf_put(lode_cont_t *ct, void *buf, size_t cap)
{
	(void)cap;
	if (!buf)
		return;
	pthread_mutex_lock(&ct->crypt_lock);
	for (unsigned i = 0; i < ct->nbufs; i++) {
		if (ct->bufs[i].p == buf) {
			ct->bufs[i].busy = false;
			pthread_mutex_unlock(&ct->crypt_lock);
			return;
		}
	}
	pthread_mutex_unlock(&ct->crypt_lock);
	free(buf);
}
