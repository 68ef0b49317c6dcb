/*
 * Users' secrets, stored as salted PBKDF2-HMAC-SHA256 hashes, and the
 * random bytes everything in src/auth draws on.
 *
 * The stored text names the algorithm and carries its iteration count and
 * salt ("pbkdf2-sha256$ITER$SALTHEX$HASHHEX"), so the count can be raised
 * later without invalidating stored hashes: a check runs whatever count the
 * text names, and auth_secret_parse lets the caller rehash a weaker one.
 * The parser is strict (one spelling per value, bounded numbers) because
 * the text comes from the persisted state and is fuzzed.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "auth/auth.h"
#include "lode/errno.h"

#define SECRET_PREFIX "pbkdf2-sha256$"
#define SECRET_SALT 16	     /* bytes of salt written */
#define SECRET_SALT_MIN 8    /* and accepted */
#define SECRET_SALT_MAX 32
#define SECRET_DK 32	     /* derived bytes: one SHA-256 block of output */
#define SECRET_ITER_MAX 10000000u /* about 4 s: more is damage, not caution */

int auth_random(void *buf, size_t n)
{
	while (n > 0) {
		int chunk = n > (1u << 30) ? 1 << 30 : (int)n;

		if (RAND_bytes(buf, chunk) != 1)
			return -EIO;
		buf = (uint8_t *)buf + chunk;
		n -= (size_t)chunk;
	}
	return 0;
}

static int secret_derive(const void *secret, size_t len, const uint8_t *salt, size_t salt_len,
			 unsigned iter, uint8_t dk[SECRET_DK])
{
	/* PKCS5_PBKDF2_HMAC wants a non-NULL pointer even for no bytes. */
	static const char none[1];

	if (PKCS5_PBKDF2_HMAC(len ? secret : none, (int)len, salt, (int)salt_len, (int)iter,
			      EVP_sha256(), SECRET_DK, dk) != 1)
		return -EIO;
	return 0;
}

static void hex_put(char *out, const uint8_t *b, size_t n)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 15];
	}
	out[2 * n] = '\0';
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1; /* upper case is another spelling of the same bytes: refused */
}

/* Decode the hex digits of s up to stop (or the end) into out; returns the
 * bytes decoded, or -EINVAL (odd, empty, not hex, more than max). */
static int hex_get(const char *s, char stop, uint8_t *out, size_t max, const char **end)
{
	size_t n = 0;

	for (; *s && *s != stop; s += 2) {
		int hi = hex_digit(s[0]), lo = hi < 0 ? -1 : hex_digit(s[1]);

		if (lo < 0 || n == max)
			return -EINVAL;
		out[n++] = (uint8_t)(hi << 4 | lo);
	}
	*end = s;
	return n ? (int)n : -EINVAL;
}

struct secret_stored {
	unsigned iter;
	uint8_t salt[SECRET_SALT_MAX];
	size_t salt_len;
	uint8_t dk[SECRET_DK];
};

static int secret_parse(const char *s, struct secret_stored *st)
{
	unsigned long iter = 0;
	int n;

	if (!s || strncmp(s, SECRET_PREFIX, strlen(SECRET_PREFIX)) != 0)
		return -EINVAL;
	s += strlen(SECRET_PREFIX);
	if (*s < '1' || *s > '9')
		return -EINVAL; /* no sign, no leading zero, not empty */
	for (; *s >= '0' && *s <= '9'; s++) {
		iter = iter * 10 + (unsigned long)(*s - '0');
		if (iter > SECRET_ITER_MAX)
			return -EINVAL;
	}
	if (*s++ != '$')
		return -EINVAL;
	n = hex_get(s, '$', st->salt, sizeof(st->salt), &s);
	if (n < SECRET_SALT_MIN || *s++ != '$')
		return -EINVAL;
	st->salt_len = (size_t)n;
	n = hex_get(s, '\0', st->dk, sizeof(st->dk), &s);
	if (n != SECRET_DK)
		return -EINVAL;
	st->iter = (unsigned)iter;
	return 0;
}

int auth_secret_parse(const char *stored, unsigned *iter)
{
	struct secret_stored st;
	int rc = secret_parse(stored, &st);

	if (rc == 0 && iter)
		*iter = st.iter;
	return rc;
}

int auth_secret_hash(const void *secret, size_t len, char *out, size_t cap)
{
	uint8_t salt[SECRET_SALT], dk[SECRET_DK];
	char salt_hex[2 * SECRET_SALT + 1], dk_hex[2 * SECRET_DK + 1];
	int n, rc;

	if (len == 0 || len > AUTH_SECRET_MAX)
		return -EINVAL;
	rc = auth_random(salt, sizeof(salt));
	if (rc)
		return rc;
	rc = secret_derive(secret, len, salt, sizeof(salt), AUTH_SECRET_ITER, dk);
	if (rc)
		return rc;
	hex_put(salt_hex, salt, sizeof(salt));
	hex_put(dk_hex, dk, sizeof(dk));
	OPENSSL_cleanse(dk, sizeof(dk));
	n = snprintf(out, cap, SECRET_PREFIX "%u$%s$%s", (unsigned)AUTH_SECRET_ITER, salt_hex,
		     dk_hex);
	OPENSSL_cleanse(dk_hex, sizeof(dk_hex));
	if (n < 0 || (size_t)n >= cap) {
		if (cap)
			out[0] = '\0';
		return -EMSGSIZE;
	}
	return 0;
}

int auth_secret_check(const void *secret, size_t len, const char *stored)
{
	struct secret_stored st;
	uint8_t dk[SECRET_DK];
	int rc = secret_parse(stored, &st);

	if (rc)
		return rc;
	if (len == 0 || len > AUTH_SECRET_MAX)
		return -LODE_EAUTH;
	rc = secret_derive(secret, len, st.salt, st.salt_len, st.iter, dk);
	if (rc == 0 && CRYPTO_memcmp(dk, st.dk, SECRET_DK) != 0)
		rc = -LODE_EAUTH;
	OPENSSL_cleanse(dk, sizeof(dk));
	OPENSSL_cleanse(&st, sizeof(st));
	return rc;
}
