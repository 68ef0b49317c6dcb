/*
 * lode-auth-bench: what checking a capability costs a target.
 *
 * A target checks the capability of every request (src/server/service.c,
 * op_authorize): it reads the clock, looks the token up in its cache of
 * verified tokens, and compares the container and the rights. A token it has
 * not seen yet costs a full HMAC-SHA256 verification once. This program
 * times both on this machine, on the code the targets run (src/auth), and
 * prints one JSON object:
 *
 *   {"hit_ns": ..., "miss_ns": ..., "check_ns": ..., "hmac_ns": ...}
 *
 * hit_ns    auth_cache_verify of a token in the cache
 * check_ns  what op_authorize does per request on a hit: the clock, the
 *           cache, the container and rights comparison
 * miss_ns   auth_cache_verify of a token not yet cached (cache flushed)
 * hmac_ns   auth_cap_verify alone
 *
 * bench/auth/run.sh sets these beside the 4 KiB random-read IOPS of the
 * same run to say what share of a target's time the checks take.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "auth/auth.h"

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Keep the compiler from dropping work whose result nobody reads. */
static volatile uint64_t sink;

int main(int argc, char **argv)
{
	static struct auth_cache cache;
	struct auth_keyring kr;
	struct auth_revoked rv;
	struct auth_cap c = {0}, got;
	uint8_t tok[AUTH_CAP_SIZE];
	unsigned n = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 2000000;
	unsigned nmiss = n / 100 ? n / 100 : 1;
	uint64_t t0, hit, check, miss, hmac;

	if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
		printf("Usage: lode-auth-bench [ITERATIONS]\n"
		       "Times a target's capability check (cache hit, miss, HMAC) and prints JSON.\n");
		return 0;
	}
	if (n == 0 || auth_keyring_init(&kr) < 0 || auth_revoked_init(&rv) < 0 ||
	    auth_keyring_add(&kr, 0, NULL, 0) < 0) {
		fprintf(stderr, "lode-auth-bench: setup failed\n");
		return 1;
	}
	c.rights = AUTH_R_READ | AUTH_R_WRITE;
	c.expires_ms = wall_ms() + 3600 * 1000;
	c.issued_ms = wall_ms();
	c.client = 42;
	memset(c.cont.b, 7, sizeof(c.cont.b));
	if (auth_cap_sign(&kr, &c, tok) < 0) {
		fprintf(stderr, "lode-auth-bench: cannot sign\n");
		return 1;
	}
	auth_cache_init(&cache);

	t0 = now_ns();
	for (unsigned i = 0; i < n; i++)
		sink += (uint64_t)auth_cache_verify(&cache, &kr, &rv, tok, sizeof(tok), c.issued_ms,
						    &got);
	hit = now_ns() - t0;

	/* op_authorize's work on a hit. */
	t0 = now_ns();
	for (unsigned i = 0; i < n; i++) {
		struct timespec now;
		int rc;

		clock_gettime(CLOCK_REALTIME_COARSE, &now);
		rc = auth_cache_verify(&cache, &kr, &rv, tok, sizeof(tok),
				       (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000, &got);
		sink += (uint64_t)rc + (memcmp(&got.cont, &c.cont, sizeof(c.cont)) != 0) +
			((got.rights & AUTH_R_READ) != AUTH_R_READ);
	}
	check = now_ns() - t0;

	t0 = now_ns();
	for (unsigned i = 0; i < nmiss; i++) {
		auth_cache_init(&cache);
		sink += (uint64_t)auth_cache_verify(&cache, &kr, &rv, tok, sizeof(tok), c.issued_ms,
						    &got);
	}
	miss = now_ns() - t0;

	t0 = now_ns();
	for (unsigned i = 0; i < nmiss; i++)
		sink += (uint64_t)auth_cap_verify(&kr, &rv, tok, sizeof(tok), c.issued_ms, &got);
	hmac = now_ns() - t0;

	printf("{\"iterations\":%u,\"hit_ns\":%.1f,\"check_ns\":%.1f,\"miss_ns\":%.1f,"
	       "\"hmac_ns\":%.1f}\n",
	       n, (double)hit / n, (double)check / n, (double)miss / nmiss, (double)hmac / nmiss);
	auth_revoked_fini(&rv);
	auth_keyring_fini(&kr);
	return 0;
}
