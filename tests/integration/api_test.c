/*
 * The public client API (lode/lode.h) end to end, against a real loded of
 * three targets started by the harness.
 *
 * The whole suite runs once per transport named in $LODE_TEST_TRANSPORTS
 * (default "tcp shm"); the server offers every transport ("auto") and the
 * client asks for the one under test, so a connection that silently used
 * another would show in lode_conn_query. Every test gets a fresh container
 * and checks what it wrote by reading it back, byte for byte; error cases
 * check the exact code the header promises.
 *
 * $LODE_TEST_RAM=0 runs the server on disk instead of in RAM mode.
 */
#include <setjmp.h> /* cmocka.h needs these first */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client/client.h"
#include "harness.h"

#define NTARGETS 3
#define MIB (1u << 20)
#define POLL_TIMEOUT_US (30 * 1000000LL)

/* The server and connection of the group (transport) that runs now. */
static struct hs_server srv;
static const char *tp;
static lode_conn_t *conn;
static struct lode_conn_info info;
static unsigned label_seq;

/* What each test gets from cont_setup: a fresh, opened container. */
struct tctx {
	lode_cont_t *cont;
	char label[64];
};

/* ---- helpers -------------------------------------------------------------- */

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Bytes that differ by seed and by position, so a misplaced chunk shows. */
static void fill(void *buf, size_t len, uint64_t seed)
{
	uint8_t *p = buf;
	uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;

	for (size_t i = 0; i < len; i++) {
		if ((i & 7) == 0) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
		}
		p[i] = (uint8_t)(x >> ((i & 7) * 8));
	}
}

static bool all_zero(const void *buf, size_t len)
{
	const uint8_t *p = buf;

	for (size_t i = 0; i < len; i++)
		if (p[i])
			return false;
	return true;
}

static void *xmalloc(size_t len)
{
	void *p = malloc(len ? len : 1);

	assert_non_null(p);
	return p;
}

static struct lode_key mkkey(const char *dkey, const char *akey)
{
	struct lode_key k = {dkey, (uint32_t)strlen(dkey), akey, akey ? (uint32_t)strlen(akey) : 0};

	return k;
}

static struct lode_oid kv_oid(uint64_t n)
{
	return lode_oid_make(LODE_OT_KV, 0, 0x17, n);
}

static struct lode_oid arr_oid(uint64_t n)
{
	return lode_oid_make(LODE_OT_ARRAY, 0, 0x17, n);
}

static void put_sv(lode_cont_t *c, struct lode_oid o, const char *d, const char *a, const void *buf,
		   uint32_t len)
{
	struct lode_key k = mkkey(d, a);

	assert_int_equal(lode_obj_update(c, o, &k, buf, len, NULL), 0);
}

/* Fetch the single value at (d, a) as of epoch and compare it with want. */
static void expect_sv(lode_cont_t *c, struct lode_oid o, lode_epoch_t e, const char *d,
		      const char *a, const void *want, uint32_t len)
{
	struct lode_key k = mkkey(d, a);
	uint32_t got = 0xdeadbeef;
	uint8_t *buf = xmalloc((size_t)len + 16);

	assert_int_equal(lode_obj_fetch(c, o, e, &k, buf, len + 16, &got, NULL), 0);
	assert_int_equal(got, len);
	if (len)
		assert_memory_equal(buf, want, len);
	free(buf);
}

static void expect_sv_missing(lode_cont_t *c, struct lode_oid o, lode_epoch_t e, const char *d,
			      const char *a)
{
	struct lode_key k = mkkey(d, a);
	uint32_t got;
	uint8_t buf[16];

	assert_int_equal(lode_obj_fetch(c, o, e, &k, buf, sizeof(buf), &got, NULL), -ENOENT);
}

/* Read [off, off+len) of a byte-array akey and compare it with want (NULL: zeros). */
static void expect_ext(lode_cont_t *c, struct lode_oid o, lode_epoch_t e, const char *d,
		       const char *a, uint64_t off, const void *want, uint32_t len)
{
	struct lode_key k = mkkey(d, a);
	uint8_t *buf = xmalloc(len);

	memset(buf, 0xa5, len);
	assert_int_equal(lode_obj_read(c, o, e, &k, off, buf, len, NULL), 0);
	if (want)
		assert_memory_equal(buf, want, len);
	else
		assert_true(all_zero(buf, len));
	free(buf);
}

/* Read [off, off+len) of an array and compare with want (NULL: zeros). */
static void expect_arr(lode_cont_t *c, struct lode_oid o, uint32_t chunk, lode_epoch_t e,
		       uint64_t off, const void *want, size_t len)
{
	uint8_t *buf = xmalloc(len);

	memset(buf, 0xa5, len);
	assert_int_equal(lode_array_read(c, o, chunk, e, off, buf, len, NULL), 0);
	if (want)
		assert_memory_equal(buf, want, len);
	else
		assert_true(all_zero(buf, len));
	free(buf);
}

/* Parse a [u16 LE len][bytes] list of n keys into calls of fn. */
static void unpack_keys(const void *buf, size_t buf_len, int n,
			void (*fn)(const uint8_t *key, size_t len, void *arg), void *arg)
{
	const uint8_t *p = buf, *end = p + buf_len;

	for (int i = 0; i < n; i++) {
		size_t kl;

		assert_true(p + 2 <= end);
		kl = (size_t)p[0] | (size_t)p[1] << 8;
		assert_true(kl >= 1 && kl <= LODE_KEY_MAX);
		assert_true(p + 2 + kl <= end);
		fn(p + 2, kl, arg);
		p += 2 + kl;
	}
}

/* Poll eq until n events were reported; each must be reported once and carry rc 0. */
static void poll_all(lode_eq_t *eq, lode_event_t *evs, unsigned n)
{
	lode_event_t *got[64];
	bool *seen = calloc(n, sizeof(*seen));
	unsigned done = 0;

	assert_non_null(seen);
	while (done < n) {
		int r = lode_eq_poll(eq, 1, 64, POLL_TIMEOUT_US, got);

		assert_true(r > 0); /* 0: nothing completed within 30 s */
		for (int i = 0; i < r; i++) {
			size_t idx = (size_t)(got[i] - evs);

			assert_true(got[i] >= evs && idx < n);
			assert_false(seen[idx]);
			seen[idx] = true;
			if (got[i]->rc != 0)
				fail_msg("event %zu completed with %d (%s)", idx, got[i]->rc,
					 lode_strerror(got[i]->rc));
		}
		done += (unsigned)r;
	}
	free(seen);
	assert_int_equal(lode_eq_inflight(eq), 0);
}

/* ---- group and test setup ------------------------------------------------- */

static int group_setup(void **state)
{
	const char *ram = getenv("LODE_TEST_RAM");
	struct hs_opts o = {
		.transport = "auto",
		.targets = NTARGETS,
		.ram = !(ram && strcmp(ram, "0") == 0),
	};
	int rc;

	if ((rc = hs_start(&srv, &o)) < 0) {
		fprintf(stderr, "api_test: cannot start loded: %s\n", lode_strerror(rc));
		return -1;
	}
	if ((rc = hs_connect(&srv, tp, 0, &conn)) < 0 || (rc = lode_conn_query(conn, &info)) < 0) {
		fprintf(stderr, "api_test: connect over %s: %s\n", tp, lode_strerror(rc));
		hs_dump_log(&srv, 4096);
		return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	int rc;

	if (conn)
		lode_disconnect(conn);
	conn = NULL;
	/* A clean stop is part of the contract: SIGTERM drains and exits 0. */
	rc = hs_stop(&srv);
	if (rc != 0) {
		fprintf(stderr, "api_test: loded exited with %d\n", rc);
		hs_dump_log(&srv, 8192);
	}
	hs_cleanup(&srv);
	return rc == 0 ? 0 : -1;
}

static int cont_setup(void **state)
{
	struct tctx *t = calloc(1, sizeof(*t));
	int rc;

	if (!t)
		return -1;
	snprintf(t->label, sizeof(t->label), "api-%s-%u", tp, ++label_seq);
	if ((rc = lode_cont_create(conn, t->label, NULL)) < 0 ||
	    (rc = lode_cont_open(conn, t->label, &t->cont)) < 0) {
		fprintf(stderr, "api_test: container %s: %s\n", t->label, lode_strerror(rc));
		free(t);
		return -1;
	}
	*state = t;
	return 0;
}

static int cont_teardown(void **state)
{
	struct tctx *t = *state;
	int rc;

	lode_cont_close(t->cont);
	rc = lode_cont_destroy(conn, t->label);
	free(t);
	return rc == 0 ? 0 : -1;
}

/* ---- connection ------------------------------------------------------------ */

static void test_conn_query(void **state)
{
	struct lode_conn_info i2;

	assert_string_equal(info.transport, tp);
	assert_int_equal(info.ntargets, NTARGETS);
	assert_true(info.inline_max > 0);
	assert_true(strcmp(info.bulk, "rma") == 0 || strcmp(info.bulk, "am") == 0);
	assert_string_equal(info.server, hs_addr(&srv));
	assert_int_equal(lode_conn_query(conn, NULL), -EFAULT);
	assert_int_equal(lode_conn_query(NULL, &i2), -EFAULT);
}

static void test_status(void **state)
{
	struct tctx *t = *state;
	struct lode_target_status st[8], one[2];
	char key[32];

	/* Requests on every target: keys spread by dkey. */
	for (int i = 0; i < 32; i++) {
		snprintf(key, sizeof(key), "s%d", i);
		assert_int_equal(lode_kv_put(t->cont, kv_oid(1), key, key, 3, NULL), 0);
	}
	memset(st, 0, sizeof(st));
	assert_int_equal(lode_status(conn, st, 8), NTARGETS);
	for (int i = 0; i < NTARGETS; i++) {
		assert_true(st[i].requests > 0);
		assert_true(st[i].errors <= st[i].requests);
		assert_int_equal(st[i].ram, srv.ram);
	}
	/* max smaller than the count: the count still, and nothing past max written. */
	memset(one, 0x5a, sizeof(one));
	assert_int_equal(lode_status(conn, one, 1), NTARGETS);
	assert_true(one[0].requests > 0);
	for (size_t i = 0; i < sizeof(one[1]); i++)
		assert_int_equal(((uint8_t *)&one[1])[i], 0x5a);
	assert_int_equal(lode_status(NULL, st, 8), -EFAULT);
}

/* A port with a socket bound to it but not listening: connects are refused, and nobody else can take it. */
static void test_connect_refused(void **state)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	struct lode_conn_opts co = {.transport = tp, .timeout_ms = 5000};
	socklen_t sl = sizeof(sa);
	lode_conn_t *c = NULL;
	char addr[32];
	uint64_t t0;
	int fd, rc;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(sa.sin_port));
	t0 = now_ms();
	rc = lode_connect(addr, &co, &c);
	close(fd);
	assert_int_equal(rc, -ECONNREFUSED);
	assert_null(c);
	assert_true(now_ms() - t0 < 2000);

	/* An unknown transport is refused as such. */
	co.transport = "carrier-pigeon";
	assert_int_equal(lode_connect(hs_addr(&srv), &co, &c), -EPROTONOSUPPORT);
	assert_int_equal(lode_connect(hs_addr(&srv), &co, NULL), -EFAULT);
}

/* ---- containers ------------------------------------------------------------ */

static char labels[256][LODE_LABEL_MAX + 1];

static int cont_count(void)
{
	int n = lode_cont_list(conn, labels, 256);

	assert_true(n >= 0 && n <= 256);
	return n;
}

static bool cont_listed(const char *label)
{
	int n = lode_cont_list(conn, labels, 256);

	assert_true(n >= 0 && n <= 256);
	for (int i = 0; i < n; i++)
		if (strcmp(labels[i], label) == 0)
			return true;
	return false;
}

static void test_containers(void **state)
{
	static const char *const bad[] = {"", "has space", "sl/ash", "dollar$", "nul\x01", "ä"};
	char a[64], b[64], longest[LODE_LABEL_MAX + 1], toolong[LODE_LABEL_MAX + 2];
	char (*one)[LODE_LABEL_MAX + 1];
	struct lode_uuid ua, ua2, ub, zero = {{0}};
	lode_cont_t *ca, *cb;
	uint8_t val[100];
	int n, before;

	snprintf(a, sizeof(a), "c-%s.A_1", tp);
	snprintf(b, sizeof(b), "c-%s.B-2", tp);
	before = cont_count();
	assert_true(before >= 0);

	assert_int_equal(lode_cont_create(conn, a, &ua), 0);
	assert_memory_not_equal(&ua, &zero, sizeof(ua));
	assert_int_equal(lode_cont_create(conn, b, &ub), 0);
	assert_memory_not_equal(&ua, &ub, sizeof(ua));
	assert_int_equal(lode_cont_create(conn, a, NULL), -EEXIST);

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (lode_cont_create(conn, bad[i], NULL) != -EINVAL)
			fail_msg("label '%s' was not refused with -EINVAL", bad[i]);
	memset(toolong, 'x', sizeof(toolong) - 1);
	toolong[sizeof(toolong) - 1] = '\0';
	assert_int_equal(lode_cont_create(conn, toolong, NULL), -EINVAL);
	assert_int_equal(lode_cont_create(conn, NULL, NULL), -EFAULT);
	memset(longest, 'y', sizeof(longest) - 1);
	longest[sizeof(longest) - 1] = '\0';
	assert_int_equal(lode_cont_create(conn, longest, NULL), 0);

	/* Listing: every one of them, and the count even when max is smaller. */
	assert_true(cont_listed(a));
	assert_true(cont_listed(b));
	assert_true(cont_listed(longest));
	assert_int_equal(cont_count(), before + 3);
	one = calloc(2, sizeof(*one));
	assert_non_null(one);
	memset(one[1], 0x5a, sizeof(one[1]));
	n = lode_cont_list(conn, one, 1);
	assert_int_equal(n, before + 3);
	assert_true(strlen(one[0]) >= 1 && strlen(one[0]) <= LODE_LABEL_MAX);
	assert_int_equal((uint8_t)one[1][0], 0x5a);
	free(one);

	/* Open: the uuid matches, and data lands in that container only. */
	assert_int_equal(lode_cont_open(conn, "no-such-container", &ca), -LODE_ENOCONT);
	assert_int_equal(lode_cont_open(conn, a, NULL), -EFAULT);
	assert_int_equal(lode_cont_open(conn, a, &ca), 0);
	assert_int_equal(lode_cont_open(conn, b, &cb), 0);
	lode_cont_uuid(ca, &ua2);
	assert_memory_equal(&ua, &ua2, sizeof(ua));
	fill(val, sizeof(val), 1);
	put_sv(ca, kv_oid(1), "d", "a", val, sizeof(val));
	expect_sv(ca, kv_oid(1), LODE_EPOCH_MAX, "d", "a", val, sizeof(val));
	expect_sv_missing(cb, kv_oid(1), LODE_EPOCH_MAX, "d", "a");
	assert_int_equal(lode_cont_close(ca), 0);
	assert_int_equal(lode_cont_close(cb), 0);

	/* Destroy removes it and its data: a new one by the same name is empty. */
	assert_int_equal(lode_cont_destroy(conn, a), 0);
	assert_false(cont_listed(a));
	assert_true(cont_listed(b));
	assert_int_equal(lode_cont_destroy(conn, a), -LODE_ENOCONT);
	assert_int_equal(lode_cont_open(conn, a, &ca), -LODE_ENOCONT);
	assert_int_equal(lode_cont_destroy(conn, "never-was"), -LODE_ENOCONT);
	assert_int_equal(lode_cont_create(conn, a, &ua2), 0);
	assert_memory_not_equal(&ua, &ua2, sizeof(ua));
	assert_int_equal(lode_cont_open(conn, a, &ca), 0);
	expect_sv_missing(ca, kv_oid(1), LODE_EPOCH_MAX, "d", "a");
	assert_int_equal(lode_cont_close(ca), 0);

	assert_int_equal(lode_cont_destroy(conn, a), 0);
	assert_int_equal(lode_cont_destroy(conn, b), 0);
	assert_int_equal(lode_cont_destroy(conn, longest), 0);
	assert_int_equal(cont_count(), before);
}

/* ---- single values ----------------------------------------------------------- */

/*
 * Store a value of len bytes from src and fetch it into dst (both of at
 * least len + 8 bytes), then check the bytes, the length, and that nothing
 * past the value was written.
 */
static void sv_roundtrip(lode_cont_t *c, const char *akey, uint8_t *src, uint8_t *dst,
			 uint32_t len, uint64_t seed)
{
	struct lode_key k = mkkey("sv", akey);
	uint32_t got = 0xdeadbeef;

	fill(src, len, seed);
	memset(dst, 0xa5, (size_t)len + 8);
	assert_int_equal(lode_obj_update(c, kv_oid(1), &k, src, len, NULL), 0);
	assert_int_equal(lode_obj_fetch(c, kv_oid(1), LODE_EPOCH_MAX, &k, dst, len + 8, &got, NULL),
			 0);
	assert_int_equal(got, len);
	if (len)
		assert_memory_equal(dst, src, len);
	for (int i = 0; i < 8; i++)
		assert_int_equal(dst[len + i], 0xa5);
}

static void test_single_values(void **state)
{
	struct tctx *t = *state;
	const uint32_t im = info.inline_max;
	const uint32_t sizes[] = {0, 1, 100, im - 1, im, im + 1, 64 * 1024, MIB, 8 * MIB};
	const size_t cap = 8 * MIB + 64;
	uint8_t *msrc = xmalloc(cap), *mdst = xmalloc(cap);
	uint8_t *rsrc = lode_buf_alloc(conn, cap), *rdst = lode_buf_alloc(conn, cap);
	char akey[32];

	assert_non_null(rsrc);
	assert_non_null(rdst);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint32_t len = sizes[i];

		/* Every mix of registered and plain memory, and an odd address inside a registered buffer. */
		snprintf(akey, sizeof(akey), "mm-%u", len);
		sv_roundtrip(t->cont, akey, msrc, mdst, len, i * 4 + 1);
		snprintf(akey, sizeof(akey), "rr-%u", len);
		sv_roundtrip(t->cont, akey, rsrc, rdst, len, i * 4 + 2);
		snprintf(akey, sizeof(akey), "mr-%u", len);
		sv_roundtrip(t->cont, akey, msrc, rdst + 1, len, i * 4 + 3);
		snprintf(akey, sizeof(akey), "rm-%u", len);
		sv_roundtrip(t->cont, akey, rsrc + 3, mdst, len, i * 4 + 4);
	}
	/* Every value stays as it was written, not as the next buffer held. */
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		fill(msrc, sizes[i], i * 4 + 1);
		snprintf(akey, sizeof(akey), "mm-%u", sizes[i]);
		expect_sv(t->cont, kv_oid(1), LODE_EPOCH_MAX, "sv", akey, msrc, sizes[i]);
	}
	lode_buf_free(conn, rsrc);
	lode_buf_free(conn, rdst);
	free(msrc);
	free(mdst);
}

/* A buffer too small: -EOVERFLOW, the full length, the buffer filled and not one byte more. */
static void test_sv_overflow(void **state)
{
	struct tctx *t = *state;
	const uint32_t lens[] = {100, info.inline_max + 1, MIB};
	const uint32_t caps[] = {0, 1, 10, 4096};
	uint8_t *val = xmalloc(MIB), *buf = xmalloc(4096 + 64);
	uint8_t *rbuf = lode_buf_alloc(conn, 4096 + 64);

	assert_non_null(rbuf);
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		struct lode_key k = mkkey("ov", "a");

		fill(val, lens[i], 50 + i);
		assert_int_equal(lode_obj_update(t->cont, kv_oid(2), &k, val, lens[i], NULL), 0);
		for (size_t j = 0; j < sizeof(caps) / sizeof(caps[0]); j++) {
			uint32_t c = caps[j] < lens[i] ? caps[j] : lens[i] - 1, got = 0;

			for (int reg = 0; reg < 2; reg++) {
				uint8_t *b = reg ? rbuf : buf;

				memset(b, 0xa5, 4096 + 64);
				got = 0;
				assert_int_equal(lode_obj_fetch(t->cont, kv_oid(2), LODE_EPOCH_MAX, &k,
								b, c, &got, NULL),
						 -EOVERFLOW);
				assert_int_equal(got, lens[i]);
				if (c)
					assert_memory_equal(b, val, c);
				for (uint32_t g = c; g < c + 64; g++)
					if (b[g] != 0xa5)
						fail_msg("fetch of %u bytes with cap %u wrote byte %u",
							 lens[i], c, g);
			}
		}
	}
	lode_buf_free(conn, rbuf);
	free(val);
	free(buf);
}

static void test_sv_missing_and_overwrite(void **state)
{
	struct tctx *t = *state;
	uint8_t *big = xmalloc(MIB), small[10], mid[3000];
	struct lode_key k = mkkey("d", "arr");
	uint8_t x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	uint32_t got;

	expect_sv_missing(t->cont, kv_oid(3), LODE_EPOCH_MAX, "d", "a"); /* no object */
	put_sv(t->cont, kv_oid(3), "d", "a", "x", 1);
	expect_sv_missing(t->cont, kv_oid(3), LODE_EPOCH_MAX, "d", "b");  /* no akey */
	expect_sv_missing(t->cont, kv_oid(3), LODE_EPOCH_MAX, "e", "a");  /* no dkey */
	expect_sv_missing(t->cont, kv_oid(4), LODE_EPOCH_MAX, "d", "a");  /* other object */

	/* Large over small over large: each fetch sees exactly the last. */
	fill(big, MIB, 7);
	fill(small, sizeof(small), 8);
	fill(mid, sizeof(mid), 9);
	put_sv(t->cont, kv_oid(3), "d", "a", big, MIB);
	expect_sv(t->cont, kv_oid(3), LODE_EPOCH_MAX, "d", "a", big, MIB);
	put_sv(t->cont, kv_oid(3), "d", "a", small, sizeof(small));
	expect_sv(t->cont, kv_oid(3), LODE_EPOCH_MAX, "d", "a", small, sizeof(small));
	put_sv(t->cont, kv_oid(3), "d", "a", mid, sizeof(mid));
	expect_sv(t->cont, kv_oid(3), LODE_EPOCH_MAX, "d", "a", mid, sizeof(mid));
	put_sv(t->cont, kv_oid(3), "d", "a", big, 0);
	expect_sv(t->cont, kv_oid(3), LODE_EPOCH_MAX, "d", "a", big, 0);

	/* Single value and byte array do not mix on one akey. */
	assert_int_equal(lode_obj_write(t->cont, kv_oid(3), &k, 0, x, sizeof(x), NULL), 0);
	assert_int_equal(lode_obj_update(t->cont, kv_oid(3), &k, x, sizeof(x), NULL), -LODE_ETYPE);
	assert_int_equal(lode_obj_fetch(t->cont, kv_oid(3), LODE_EPOCH_MAX, &k, small,
					sizeof(small), &got, NULL),
			 -LODE_ETYPE);
	k = mkkey("d", "a");
	assert_int_equal(lode_obj_write(t->cont, kv_oid(3), &k, 0, x, sizeof(x), NULL), -LODE_ETYPE);
	assert_int_equal(lode_obj_read(t->cont, kv_oid(3), LODE_EPOCH_MAX, &k, 0, small, 4, NULL),
			 -LODE_ETYPE);
	free(big);
}

/* Values above LODE_IO_MAX are refused before anything is sent. */
static void test_sv_too_big(void **state)
{
	struct tctx *t = *state;
	struct lode_key k = mkkey("d", "big");
	/* Untouched pages: the library must refuse before it reads them. */
	uint8_t *buf = xmalloc((size_t)LODE_IO_MAX + 1);

	assert_int_equal(lode_obj_update(t->cont, kv_oid(5), &k, buf, LODE_IO_MAX + 1, NULL), -E2BIG);
	assert_int_equal(lode_obj_write(t->cont, kv_oid(5), &k, 0, buf, LODE_IO_MAX + 1, NULL), -E2BIG);
	expect_sv_missing(t->cont, kv_oid(5), LODE_EPOCH_MAX, "d", "big");
	assert_int_equal(lode_obj_read(t->cont, kv_oid(5), LODE_EPOCH_MAX, &k, 0, buf, 8, NULL),
			 -ENOENT);
	free(buf);
}

/* ---- byte extents --------------------------------------------------------- */

static void test_extents(void **state)
{
	struct tctx *t = *state;
	const size_t span = MIB + 4096;
	uint8_t *model = calloc(1, span), *tmp = xmalloc(8 * MIB);
	struct lode_key k = mkkey("ext", "a");
	struct {
		uint64_t off;
		uint32_t len;
	} w[] = {{0, 100}, {4096, 1000}, {MIB + 3, 5}, {50, 100}, {4000, 200}, {1, 1}, {70000, 65536}};
	uint64_t size;
	uint8_t one[8];

	assert_non_null(model);
	/* Nothing written yet: reads fail, the size is 0. */
	assert_int_equal(lode_obj_read(t->cont, kv_oid(6), LODE_EPOCH_MAX, &k, 0, one, 8, NULL),
			 -ENOENT);
	assert_int_equal(lode_obj_size(t->cont, kv_oid(6), LODE_EPOCH_MAX, &k, &size), 0);
	assert_int_equal(size, 0);

	for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
		fill(tmp, w[i].len, 100 + i);
		memcpy(model + w[i].off, tmp, w[i].len);
		assert_int_equal(lode_obj_write(t->cont, kv_oid(6), &k, w[i].off, tmp, w[i].len, NULL),
				 0);
	}
	assert_int_equal(lode_obj_size(t->cont, kv_oid(6), LODE_EPOCH_MAX, &k, &size), 0);
	assert_int_equal(size, MIB + 8);
	/* The whole span, then small unaligned windows, each against the model. */
	expect_ext(t->cont, kv_oid(6), LODE_EPOCH_MAX, "ext", "a", 0, model, (uint32_t)span);
	for (uint64_t off = 0; off < span - 300; off += 77777)
		expect_ext(t->cont, kv_oid(6), LODE_EPOCH_MAX, "ext", "a", off + 3, model + off + 3,
			   257);
	/* Past the end: zeros. */
	expect_ext(t->cont, kv_oid(6), LODE_EPOCH_MAX, "ext", "a", 5 * MIB, NULL, 4096);

	/* A big extent from and into registered memory, at an odd offset. */
	{
		uint8_t *r = lode_buf_alloc(conn, 8 * MIB), *back = lode_buf_alloc(conn, 8 * MIB);
		struct lode_key k2 = mkkey("ext", "big");

		assert_non_null(r);
		assert_non_null(back);
		fill(r, 8 * MIB, 200);
		assert_int_equal(lode_obj_write(t->cont, kv_oid(6), &k2, 12345, r, 8 * MIB, NULL), 0);
		memset(back, 0, 8 * MIB);
		assert_int_equal(lode_obj_read(t->cont, kv_oid(6), LODE_EPOCH_MAX, &k2, 12345, back,
					       8 * MIB, NULL),
				 0);
		assert_memory_equal(back, r, 8 * MIB);
		assert_int_equal(lode_obj_read(t->cont, kv_oid(6), LODE_EPOCH_MAX, &k2, 0, back, 12345,
					       NULL),
				 0);
		assert_true(all_zero(back, 12345));
		assert_int_equal(lode_obj_size(t->cont, kv_oid(6), LODE_EPOCH_MAX, &k2, &size), 0);
		assert_int_equal(size, 12345 + 8 * MIB);
		lode_buf_free(conn, r);
		lode_buf_free(conn, back);
	}

	/* Bad extents. */
	assert_int_equal(lode_obj_write(t->cont, kv_oid(6), &k, 0, tmp, 0, NULL), -EINVAL);
	/* An erasure-coded object's id whose type names a member (16 and up,
	 * lode/types.h): refused, whatever the class could do here. */
	assert_int_equal(lode_obj_update(t->cont, lode_oid_make(0x12, 0xa1, 0x17, 6), &k, tmp, 8,
					 NULL),
			 -EINVAL);
	assert_int_equal(lode_obj_write(t->cont, kv_oid(6), &k, UINT64_MAX - 5, tmp, 10, NULL),
			 -EOVERFLOW);
	expect_ext(t->cont, kv_oid(6), LODE_EPOCH_MAX, "ext", "a", 0, model, (uint32_t)span);
	free(model);
	free(tmp);
}

/* ---- punches -------------------------------------------------------------- */

static void count_key(const uint8_t *key, size_t len, void *arg)
{
	(*(int *)arg)++;
}

static int count_dkeys(lode_cont_t *c, struct lode_oid o, lode_epoch_t e)
{
	struct lode_anchor an = {0};
	uint8_t buf[4096];
	int total = 0, n;

	for (int guard = 0; !an.eof; guard++) {
		assert_true(guard < 10000);
		n = lode_dkey_list(c, o, e, &an, buf, sizeof(buf));
		assert_true(n >= 0);
		unpack_keys(buf, sizeof(buf), n, count_key, &total);
	}
	return total;
}

static void test_punch(void **state)
{
	struct tctx *t = *state;
	struct lode_key k;
	uint8_t v1[50], v2[60], ext[65536];
	char d[16];

	fill(v1, sizeof(v1), 1);
	fill(v2, sizeof(v2), 2);

	/* akey: that value only. */
	put_sv(t->cont, kv_oid(10), "d1", "a1", v1, sizeof(v1));
	put_sv(t->cont, kv_oid(10), "d1", "a2", v2, sizeof(v2));
	k = mkkey("d1", "a1");
	assert_int_equal(lode_akey_punch(t->cont, kv_oid(10), &k, NULL), 0);
	expect_sv_missing(t->cont, kv_oid(10), LODE_EPOCH_MAX, "d1", "a1");
	expect_sv(t->cont, kv_oid(10), LODE_EPOCH_MAX, "d1", "a2", v2, sizeof(v2));
	/* Written again after the punch: visible again. */
	put_sv(t->cont, kv_oid(10), "d1", "a1", v2, sizeof(v2));
	expect_sv(t->cont, kv_oid(10), LODE_EPOCH_MAX, "d1", "a1", v2, sizeof(v2));

	/* dkey: everything under it, nothing under another. */
	put_sv(t->cont, kv_oid(10), "d2", "a1", v1, sizeof(v1));
	k = mkkey("d1", NULL);
	assert_int_equal(lode_dkey_punch(t->cont, kv_oid(10), &k, NULL), 0);
	expect_sv_missing(t->cont, kv_oid(10), LODE_EPOCH_MAX, "d1", "a1");
	expect_sv_missing(t->cont, kv_oid(10), LODE_EPOCH_MAX, "d1", "a2");
	expect_sv(t->cont, kv_oid(10), LODE_EPOCH_MAX, "d2", "a1", v1, sizeof(v1));
	assert_int_equal(count_dkeys(t->cont, kv_oid(10), LODE_EPOCH_MAX), 1);

	/* Object: every dkey on every target; other objects untouched. */
	for (int i = 0; i < 20; i++) {
		snprintf(d, sizeof(d), "od%d", i);
		put_sv(t->cont, kv_oid(11), d, "a", v1, sizeof(v1));
	}
	put_sv(t->cont, kv_oid(12), "keep", "a", v2, sizeof(v2));
	assert_int_equal(count_dkeys(t->cont, kv_oid(11), LODE_EPOCH_MAX), 20);
	assert_int_equal(lode_obj_punch(t->cont, kv_oid(11), NULL), 0);
	for (int i = 0; i < 20; i++) {
		snprintf(d, sizeof(d), "od%d", i);
		expect_sv_missing(t->cont, kv_oid(11), LODE_EPOCH_MAX, d, "a");
	}
	assert_int_equal(count_dkeys(t->cont, kv_oid(11), LODE_EPOCH_MAX), 0);
	expect_sv(t->cont, kv_oid(12), LODE_EPOCH_MAX, "keep", "a", v2, sizeof(v2));
	{
		struct lode_anchor an = {0};
		struct lode_oid oids[16];
		bool saw11 = false, saw12 = false;

		while (!an.eof) {
			int n = lode_obj_list(t->cont, LODE_EPOCH_MAX, &an, oids, 16);

			assert_true(n >= 0);
			for (int i = 0; i < n; i++) {
				saw11 |= oids[i].lo == 11 && oids[i].hi == kv_oid(11).hi;
				saw12 |= oids[i].lo == 12 && oids[i].hi == kv_oid(12).hi;
			}
		}
		assert_false(saw11);
		assert_true(saw12);
	}

	/* Range: zeros inside, bytes outside untouched. */
	k = mkkey("r", "x");
	fill(ext, sizeof(ext), 3);
	assert_int_equal(lode_obj_write(t->cont, kv_oid(13), &k, 0, ext, sizeof(ext), NULL), 0);
	assert_int_equal(lode_range_punch(t->cont, kv_oid(13), &k, 1000, 4000, NULL), 0);
	memset(ext + 1000, 0, 4000);
	expect_ext(t->cont, kv_oid(13), LODE_EPOCH_MAX, "r", "x", 0, ext, sizeof(ext));
	/* A punch across an extent's end and a write into the punched hole. */
	assert_int_equal(lode_range_punch(t->cont, kv_oid(13), &k, 60000, 100000, NULL), 0);
	memset(ext + 60000, 0, sizeof(ext) - 60000);
	fill(v1, sizeof(v1), 4);
	assert_int_equal(lode_obj_write(t->cont, kv_oid(13), &k, 2000, v1, sizeof(v1), NULL), 0);
	memcpy(ext + 2000, v1, sizeof(v1));
	expect_ext(t->cont, kv_oid(13), LODE_EPOCH_MAX, "r", "x", 0, ext, sizeof(ext));

	/* Punching what is not there succeeds and changes nothing. */
	k = mkkey("nothing", "here");
	assert_int_equal(lode_akey_punch(t->cont, kv_oid(14), &k, NULL), 0);
	assert_int_equal(lode_dkey_punch(t->cont, kv_oid(14), &k, NULL), 0);
	assert_int_equal(lode_obj_punch(t->cont, kv_oid(14), NULL), 0);
	expect_sv(t->cont, kv_oid(12), LODE_EPOCH_MAX, "keep", "a", v2, sizeof(v2));
}

/* ---- snapshots ----------------------------------------------------------- */

static void test_snapshots(void **state)
{
	struct tctx *t = *state;
	uint8_t *old_big = xmalloc(MIB), *new_big = xmalloc(MIB);
	uint8_t old_s[40], new_s[70], old_e[5000], new_e[300];
	struct lode_key ke = mkkey("s", "ext");
	lode_epoch_t e1, e2, list[8];
	uint64_t size;

	fill(old_big, MIB, 1);
	fill(new_big, MIB, 2);
	fill(old_s, sizeof(old_s), 3);
	fill(new_s, sizeof(new_s), 4);
	fill(old_e, sizeof(old_e), 5);
	fill(new_e, sizeof(new_e), 6);
	put_sv(t->cont, kv_oid(20), "s", "small", old_s, sizeof(old_s));
	put_sv(t->cont, kv_oid(20), "s", "big", old_big, MIB);
	put_sv(t->cont, kv_oid(20), "s", "gone", old_s, sizeof(old_s));
	assert_int_equal(lode_obj_write(t->cont, kv_oid(20), &ke, 0, old_e, sizeof(old_e), NULL), 0);
	assert_int_equal(lode_snap_list(t->cont, list, 8), 0);

	assert_int_equal(lode_snap_create(t->cont, &e1), 0);
	assert_true(e1 != LODE_EPOCH_MAX);

	put_sv(t->cont, kv_oid(20), "s", "small", new_s, sizeof(new_s));
	put_sv(t->cont, kv_oid(20), "s", "big", new_big, MIB);
	put_sv(t->cont, kv_oid(20), "s", "late", new_s, sizeof(new_s));
	assert_int_equal(lode_obj_write(t->cont, kv_oid(20), &ke, 4900, new_e, sizeof(new_e), NULL), 0);
	ke = mkkey("s", "gone");
	assert_int_equal(lode_akey_punch(t->cont, kv_oid(20), &ke, NULL), 0);
	ke = mkkey("s", "ext");

	/* At the snapshot: the old bytes; at the latest: the new. */
	expect_sv(t->cont, kv_oid(20), e1, "s", "small", old_s, sizeof(old_s));
	expect_sv(t->cont, kv_oid(20), e1, "s", "big", old_big, MIB);
	expect_sv(t->cont, kv_oid(20), e1, "s", "gone", old_s, sizeof(old_s));
	expect_sv_missing(t->cont, kv_oid(20), e1, "s", "late");
	expect_ext(t->cont, kv_oid(20), e1, "s", "ext", 0, old_e, sizeof(old_e));
	assert_int_equal(lode_obj_size(t->cont, kv_oid(20), e1, &ke, &size), 0);
	assert_int_equal(size, sizeof(old_e));
	expect_sv(t->cont, kv_oid(20), LODE_EPOCH_MAX, "s", "small", new_s, sizeof(new_s));
	expect_sv(t->cont, kv_oid(20), LODE_EPOCH_MAX, "s", "big", new_big, MIB);
	expect_sv_missing(t->cont, kv_oid(20), LODE_EPOCH_MAX, "s", "gone");
	expect_sv(t->cont, kv_oid(20), LODE_EPOCH_MAX, "s", "late", new_s, sizeof(new_s));
	expect_ext(t->cont, kv_oid(20), LODE_EPOCH_MAX, "s", "ext", 4900, new_e, sizeof(new_e));
	expect_ext(t->cont, kv_oid(20), LODE_EPOCH_MAX, "s", "ext", 0, old_e, 4900);
	assert_int_equal(lode_obj_size(t->cont, kv_oid(20), LODE_EPOCH_MAX, &ke, &size), 0);
	assert_int_equal(size, 5200);

	assert_int_equal(lode_snap_create(t->cont, &e2), 0);
	assert_true(e2 > e1);
	memset(list, 0, sizeof(list));
	assert_int_equal(lode_snap_list(t->cont, list, 8), 2);
	assert_true(list[0] == e1 && list[1] == e2);
	assert_int_equal(lode_snap_list(t->cont, list, 1), 2);
	assert_true(list[0] == e1);

	/* Aggregation must keep what a snapshot sees. */
	put_sv(t->cont, kv_oid(20), "s", "small", old_s, 10);
	assert_int_equal(lode_cont_aggregate(t->cont), 0);
	expect_sv(t->cont, kv_oid(20), e1, "s", "small", old_s, sizeof(old_s));
	expect_sv(t->cont, kv_oid(20), e1, "s", "big", old_big, MIB);
	expect_sv(t->cont, kv_oid(20), e2, "s", "small", new_s, sizeof(new_s));
	expect_sv(t->cont, kv_oid(20), LODE_EPOCH_MAX, "s", "small", old_s, 10);
	expect_ext(t->cont, kv_oid(20), e1, "s", "ext", 0, old_e, sizeof(old_e));

	assert_int_equal(lode_snap_destroy(t->cont, e1), 0);
	assert_int_equal(lode_snap_list(t->cont, list, 8), 1);
	assert_true(list[0] == e2);
	assert_int_equal(lode_snap_destroy(t->cont, e1), -LODE_ENOSNAP);
	assert_int_equal(lode_snap_destroy(t->cont, e2 + 12345), -LODE_ENOSNAP);
	assert_int_equal(lode_cont_aggregate(t->cont), 0);
	expect_sv(t->cont, kv_oid(20), e2, "s", "big", new_big, MIB);
	expect_sv(t->cont, kv_oid(20), LODE_EPOCH_MAX, "s", "big", new_big, MIB);
	expect_sv(t->cont, kv_oid(20), LODE_EPOCH_MAX, "s", "small", old_s, 10);
	assert_int_equal(lode_snap_destroy(t->cont, e2), 0);
	assert_int_equal(lode_snap_list(t->cont, list, 8), 0);
	free(old_big);
	free(new_big);
}

/* ---- enumeration ---------------------------------------------------------- */

#define NOBJ 500
#define NDKEY 2000
#define NAKEY 300

/* Key i: a prefix, the index, then a tail whose length varies with i. */
static size_t enum_key(char *out, unsigned i)
{
	int n = sprintf(out, "k%05u-", i);

	memset(out + n, 'a' + (char)(i % 26), i % 61);
	return (size_t)n + i % 61;
}

struct keyset {
	unsigned n;
	uint8_t *seen;
	unsigned dups, strays;
};

static void keyset_add(const uint8_t *key, size_t len, void *arg)
{
	struct keyset *ks = arg;
	char want[128];
	unsigned i;

	if (len < 7 || sscanf((const char *)key, "k%05u-", &i) != 1 || i >= ks->n ||
	    enum_key(want, i) != len || memcmp(want, key, len) != 0) {
		ks->strays++;
		return;
	}
	if (ks->seen[i]++)
		ks->dups++;
}

static void keyset_check(struct keyset *ks)
{
	unsigned missing = 0;

	for (unsigned i = 0; i < ks->n; i++)
		missing += !ks->seen[i];
	if (missing || ks->dups || ks->strays)
		fail_msg("enumeration: %u missing, %u duplicates, %u strays of %u keys", missing,
			 ks->dups, ks->strays, ks->n);
	free(ks->seen);
}

static void test_enum_objects(void **state)
{
	struct tctx *t = *state;
	const unsigned maxes[] = {1, 7, 64, 1000};
	struct lode_oid *oids = calloc(1000, sizeof(*oids));
	lode_epoch_t snap;

	assert_non_null(oids);
	for (unsigned i = 0; i < NOBJ; i++) {
		char d[16];

		snprintf(d, sizeof(d), "d%u", i % 7);
		put_sv(t->cont, kv_oid(1000 + i), d, "a", &i, sizeof(i));
	}
	assert_int_equal(lode_snap_create(t->cont, &snap), 0);
	/* Objects made after the snapshot are not listed at it. */
	put_sv(t->cont, kv_oid(5000), "d", "a", "x", 1);

	for (size_t m = 0; m < sizeof(maxes) / sizeof(maxes[0]); m++) {
		for (int at_snap = 0; at_snap < 2; at_snap++) {
			struct lode_anchor an = {0};
			uint8_t *seen = calloc(NOBJ + 1, 1);
			unsigned total = 0, calls = 0;

			assert_non_null(seen);
			while (!an.eof) {
				int n = lode_obj_list(t->cont, at_snap ? snap : LODE_EPOCH_MAX, &an,
						      oids, maxes[m]);

				if (n < 0 || (unsigned)n > maxes[m])
					fail_msg("lode_obj_list(max %u), call %u: %d (%s)", maxes[m],
						 calls, n, n < 0 ? lode_strerror(n) : "more than max");
				assert_true(++calls < 10000);
				for (int i = 0; i < n; i++) {
					uint64_t idx = oids[i].lo == 5000 ? NOBJ : oids[i].lo - 1000;

					assert_true(oids[i].hi == kv_oid(0).hi);
					assert_true(idx <= NOBJ);
					assert_int_equal(seen[idx]++, 0);
					total++;
				}
			}
			assert_int_equal(total, at_snap ? NOBJ : NOBJ + 1);
			assert_int_equal(seen[NOBJ], at_snap ? 0 : 1);
			free(seen);
		}
	}
	/* An anchor at its end stays there. */
	{
		struct lode_anchor an = {0};

		while (!an.eof)
			assert_true(lode_obj_list(t->cont, LODE_EPOCH_MAX, &an, oids, 1000) >= 0);
		assert_int_equal(lode_obj_list(t->cont, LODE_EPOCH_MAX, &an, oids, 1000), 0);
	}
	assert_int_equal(lode_snap_destroy(t->cont, snap), 0);
	free(oids);
}

static void test_enum_dkeys(void **state)
{
	struct tctx *t = *state;
	struct keyset ks = {.n = NDKEY, .seen = calloc(NDKEY, 1)};
	struct lode_anchor an = {0};
	uint8_t buf[256];
	char key[128];
	unsigned calls = 0;

	assert_non_null(ks.seen);
	for (unsigned i = 0; i < NDKEY; i++) {
		struct lode_key k = {key, (uint32_t)enum_key(key, i), "a", 1};

		assert_int_equal(lode_obj_update(t->cont, kv_oid(30), &k, &i, sizeof(i), NULL), 0);
	}
	/* 256 bytes hold a handful of keys: many calls, each resuming at its anchor. */
	while (!an.eof) {
		int n = lode_dkey_list(t->cont, kv_oid(30), LODE_EPOCH_MAX, &an, buf, sizeof(buf));

		assert_true(n >= 0);
		assert_true(++calls < 20000);
		unpack_keys(buf, sizeof(buf), n, keyset_add, &ks);
	}
	assert_true(calls > NDKEY / 10);
	keyset_check(&ks);

	/* A buffer that cannot hold one key. */
	memset(&an, 0, sizeof(an));
	assert_int_equal(lode_dkey_list(t->cont, kv_oid(30), LODE_EPOCH_MAX, &an, buf, 2),
			 -EOVERFLOW);
	{
		static char longkey[LODE_KEY_MAX];
		struct lode_key k = {longkey, LODE_KEY_MAX, "a", 1};

		memset(longkey, 'L', sizeof(longkey));
		assert_int_equal(lode_obj_update(t->cont, kv_oid(31), &k, "v", 1, NULL), 0);
		memset(&an, 0, sizeof(an));
		assert_int_equal(lode_dkey_list(t->cont, kv_oid(31), LODE_EPOCH_MAX, &an, buf,
						sizeof(buf)),
				 -EOVERFLOW);
	}
	/* No object: nothing, at once. */
	memset(&an, 0, sizeof(an));
	assert_int_equal(count_dkeys(t->cont, kv_oid(32), LODE_EPOCH_MAX), 0);
}

static void test_enum_akeys(void **state)
{
	struct tctx *t = *state;
	struct keyset ks = {.n = NAKEY, .seen = calloc(NAKEY, 1)};
	struct lode_anchor an = {0};
	struct lode_key dk = mkkey("the-dkey", NULL);
	uint8_t buf[200];
	char key[128];
	unsigned calls = 0;

	assert_non_null(ks.seen);
	for (unsigned i = 0; i < NAKEY; i++) {
		struct lode_key k = {"the-dkey", 8, key, (uint32_t)enum_key(key, i)};

		if (i % 2)
			assert_int_equal(lode_obj_update(t->cont, kv_oid(33), &k, &i, sizeof(i), NULL),
					 0);
		else
			assert_int_equal(lode_obj_write(t->cont, kv_oid(33), &k, i, &i, sizeof(i), NULL),
					 0);
	}
	put_sv(t->cont, kv_oid(33), "other-dkey", "not-this", "x", 1);
	while (!an.eof) {
		int n = lode_akey_list(t->cont, kv_oid(33), &dk, LODE_EPOCH_MAX, &an, buf, sizeof(buf));

		assert_true(n >= 0);
		assert_true(++calls < 20000);
		unpack_keys(buf, sizeof(buf), n, keyset_add, &ks);
	}
	assert_true(calls > NAKEY / 10);
	keyset_check(&ks);
	memset(&an, 0, sizeof(an));
	assert_int_equal(lode_akey_list(t->cont, kv_oid(33), NULL, LODE_EPOCH_MAX, &an, buf,
					sizeof(buf)),
			 -EFAULT);
}

/* ---- key-value ------------------------------------------------------------- */

#define NKV 200

static void kv_val(char *out, size_t cap, unsigned i, unsigned gen)
{
	snprintf(out, cap, "value-%u-gen-%u-%0*u", i, gen, (int)(i % 40), 0);
}

static void test_kv(void **state)
{
	struct tctx *t = *state;
	struct keyset ks = {.n = NKV, .seen = calloc(NKV, 1)};
	struct lode_anchor an = {0};
	char key[128], want[128], got[128];
	uint8_t buf[300];
	uint32_t len;

	assert_non_null(ks.seen);
	for (unsigned gen = 0; gen < 2; gen++) {
		for (unsigned i = 0; i < NKV; i++) {
			key[enum_key(key, i)] = '\0';
			kv_val(want, sizeof(want), i, gen);
			assert_int_equal(lode_kv_put(t->cont, kv_oid(40), key, want,
						     (uint32_t)strlen(want), NULL),
					 0);
		}
	}
	for (unsigned i = 0; i < NKV; i++) {
		key[enum_key(key, i)] = '\0';
		kv_val(want, sizeof(want), i, 1);
		len = 0;
		assert_int_equal(lode_kv_get(t->cont, kv_oid(40), key, got, sizeof(got), &len, NULL), 0);
		assert_int_equal(len, strlen(want));
		assert_memory_equal(got, want, len);
	}
	/* Too small: -EOVERFLOW with the length. */
	key[enum_key(key, 7)] = '\0';
	kv_val(want, sizeof(want), 7, 1);
	assert_int_equal(lode_kv_get(t->cont, kv_oid(40), key, got, 3, &len, NULL), -EOVERFLOW);
	assert_int_equal(len, strlen(want));
	assert_memory_equal(got, want, 3);

	/* Remove the even keys; removing again, or a key never there, succeeds. */
	for (unsigned i = 0; i < NKV; i += 2) {
		key[enum_key(key, i)] = '\0';
		assert_int_equal(lode_kv_remove(t->cont, kv_oid(40), key, NULL), 0);
	}
	key[enum_key(key, 0)] = '\0';
	assert_int_equal(lode_kv_remove(t->cont, kv_oid(40), key, NULL), 0);
	assert_int_equal(lode_kv_remove(t->cont, kv_oid(40), "never-there", NULL), 0);
	for (unsigned i = 0; i < NKV; i++) {
		int rc;

		key[enum_key(key, i)] = '\0';
		rc = lode_kv_get(t->cont, kv_oid(40), key, got, sizeof(got), &len, NULL);
		assert_int_equal(rc, i % 2 ? 0 : -ENOENT);
	}
	while (!an.eof) {
		int n = lode_kv_list(t->cont, kv_oid(40), &an, buf, sizeof(buf));

		assert_true(n >= 0);
		unpack_keys(buf, sizeof(buf), n, keyset_add, &ks);
	}
	/* Exactly the odd keys are left. */
	for (unsigned i = 0; i < NKV; i++) {
		if (i % 2 == 0 && ks.seen[i])
			fail_msg("removed key %u is listed", i);
		ks.seen[i] = i % 2 == 0 ? 1 : ks.seen[i];
	}
	keyset_check(&ks);

	/* A removed key can be put again. */
	key[enum_key(key, 0)] = '\0';
	assert_int_equal(lode_kv_put(t->cont, kv_oid(40), key, "back", 4, NULL), 0);
	assert_int_equal(lode_kv_get(t->cont, kv_oid(40), key, got, sizeof(got), &len, NULL), 0);
	assert_int_equal(len, 4);
	assert_memory_equal(got, "back", 4);
	assert_int_equal(lode_kv_get(t->cont, kv_oid(41), key, got, sizeof(got), &len, NULL),
			 -ENOENT);
}

/* ---- arrays ---------------------------------------------------------------- */

static void array_case(lode_cont_t *c, struct lode_oid o, uint32_t chunk)
{
	const uint32_t cs = chunk ? chunk : LODE_CHUNK_DEFAULT;
	const size_t span = 4 * (size_t)cs + 3 * MIB;
	uint8_t *model = calloc(1, span), *tmp = xmalloc(span);
	struct {
		uint64_t off;
		size_t len;
	} w[] = {
		{12345, 3 * (size_t)cs + 777}, /* several chunks, unaligned both ends */
		{cs - 3, 6},                   /* across one boundary */
		{0, 1},
		{2 * (size_t)cs, cs},          /* exactly one chunk */
		{2 * (size_t)cs - 1, 2},
	};
	const uint64_t far = 10ULL << 30; /* 10 GiB: a sparse chunk far out */
	uint64_t size, end = 0;
	uint8_t tail[100];

	assert_non_null(model);
	assert_int_equal(lode_array_size(c, o, chunk, LODE_EPOCH_MAX, &size), 0);
	assert_int_equal(size, 0);
	expect_arr(c, o, chunk, LODE_EPOCH_MAX, 0, NULL, 1000); /* nothing yet: zeros */

	for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
		fill(tmp, w[i].len, 300 + i);
		memcpy(model + w[i].off, tmp, w[i].len);
		assert_int_equal(lode_array_write(c, o, chunk, w[i].off, tmp, w[i].len, NULL), 0);
		if (w[i].off + w[i].len > end)
			end = w[i].off + w[i].len;
	}
	assert_int_equal(lode_array_size(c, o, chunk, LODE_EPOCH_MAX, &size), 0);
	assert_int_equal(size, end);
	expect_arr(c, o, chunk, LODE_EPOCH_MAX, 0, model, span);
	for (uint64_t off = 1; off + 5000 < span; off += cs / 3 + 17)
		expect_arr(c, o, chunk, LODE_EPOCH_MAX, off, model + off, 5000);

	/* Sparse far out: the size follows, the hole between reads zeros. */
	fill(tail, sizeof(tail), 9);
	assert_int_equal(lode_array_write(c, o, chunk, far - 50, tail, sizeof(tail), NULL), 0);
	assert_int_equal(lode_array_size(c, o, chunk, LODE_EPOCH_MAX, &size), 0);
	assert_int_equal(size, far + 50);
	expect_arr(c, o, chunk, LODE_EPOCH_MAX, far - 50, tail, sizeof(tail));
	expect_arr(c, o, chunk, LODE_EPOCH_MAX, far / 2, NULL, 100000);
	expect_arr(c, o, chunk, LODE_EPOCH_MAX, far - 1000, NULL, 950);
	expect_arr(c, o, chunk, LODE_EPOCH_MAX, far + 50, NULL, 1000);

	/* Truncate down, mid-chunk: bytes past the cut read zeros, before it stay. */
	assert_int_equal(lode_array_truncate(c, o, chunk, cs + 1000), 0);
	assert_int_equal(lode_array_size(c, o, chunk, LODE_EPOCH_MAX, &size), 0);
	assert_int_equal(size, cs + 1000);
	memset(model + cs + 1000, 0, span - cs - 1000);
	expect_arr(c, o, chunk, LODE_EPOCH_MAX, 0, model, span);
	expect_arr(c, o, chunk, LODE_EPOCH_MAX, far - 50, NULL, sizeof(tail));

	/* Truncate up: the size grows, the new bytes are zeros. */
	assert_int_equal(lode_array_truncate(c, o, chunk, 3 * (uint64_t)cs + 5), 0);
	assert_int_equal(lode_array_size(c, o, chunk, LODE_EPOCH_MAX, &size), 0);
	assert_int_equal(size, 3 * (uint64_t)cs + 5);
	expect_arr(c, o, chunk, LODE_EPOCH_MAX, 0, model, span);

	/* Writing past a grown size moves it on; writing inside does not. */
	fill(tmp, 10, 11);
	assert_int_equal(lode_array_write(c, o, chunk, 4 * (uint64_t)cs, tmp, 10, NULL), 0);
	memcpy(model + 4 * (size_t)cs, tmp, 10);
	assert_int_equal(lode_array_write(c, o, chunk, 5, tmp, 10, NULL), 0);
	memcpy(model + 5, tmp, 10);
	assert_int_equal(lode_array_size(c, o, chunk, LODE_EPOCH_MAX, &size), 0);
	assert_int_equal(size, 4 * (uint64_t)cs + 10);
	expect_arr(c, o, chunk, LODE_EPOCH_MAX, 0, model, span);

	/* Truncate to nothing. */
	assert_int_equal(lode_array_truncate(c, o, chunk, 0), 0);
	assert_int_equal(lode_array_size(c, o, chunk, LODE_EPOCH_MAX, &size), 0);
	assert_int_equal(size, 0);
	expect_arr(c, o, chunk, LODE_EPOCH_MAX, 0, NULL, span);
	free(model);
	free(tmp);
}

static void test_array_64k(void **state)
{
	array_case(((struct tctx *)*state)->cont, arr_oid(50), 64 * 1024);
}

static void test_array_default(void **state)
{
	array_case(((struct tctx *)*state)->cont, arr_oid(51), 0);
}

/* The array chunks spread over the targets: every target holds records. */
static void test_array_spread(void **state)
{
	struct tctx *t = *state;
	struct lode_target_status before[NTARGETS], after[NTARGETS];
	uint8_t *buf = xmalloc(16 * 64 * 1024);

	fill(buf, 16 * 64 * 1024, 77);
	assert_int_equal(lode_status(conn, before, NTARGETS), NTARGETS);
	assert_int_equal(lode_array_write(t->cont, arr_oid(52), 64 * 1024, 0, buf, 16 * 64 * 1024,
					  NULL),
			 0);
	assert_int_equal(lode_status(conn, after, NTARGETS), NTARGETS);
	for (int i = 0; i < NTARGETS; i++)
		assert_true(after[i].requests > before[i].requests);
	expect_arr(t->cont, arr_oid(52), 64 * 1024, LODE_EPOCH_MAX, 0, buf, 16 * 64 * 1024);
	free(buf);
}

/* ---- asynchronous calls ---------------------------------------------------- */

#define NEV 64

static void test_async(void **state)
{
	struct tctx *t = *state;
	static lode_event_t ev[NEV];
	static uint32_t lens[NEV];
	static uint8_t *src[NEV], *dst[NEV];
	static struct lode_key keys[NEV];
	static char dk[NEV][16];
	lode_eq_t *eq;
	lode_event_t *none[1];

	assert_int_equal(lode_eq_create(&eq), 0);
	assert_int_equal(lode_eq_poll(eq, 0, 1, 0, none), 0);
	for (int i = 0; i < NEV; i++) {
		/* Sizes from a few bytes to 256 KiB: inline, bulk, both kinds of value. */
		uint32_t len = (uint32_t)(1u << (i % 19)) + (uint32_t)i;

		lens[i] = len;
		src[i] = xmalloc(len);
		dst[i] = xmalloc(len + 8);
		fill(src[i], len, 1000 + (uint64_t)i);
		snprintf(dk[i], sizeof(dk[i]), "ad%d", i);
		keys[i] = mkkey(dk[i], i % 3 == 2 ? "ext" : "sv");
	}

	/* 64 writes in flight at once. */
	for (int i = 0; i < NEV; i++) {
		assert_int_equal(lode_event_init(&ev[i], eq), 0);
		ev[i].user = &keys[i];
		switch (i % 3) {
		case 0:
			assert_int_equal(lode_obj_update(t->cont, kv_oid(60), &keys[i], src[i], lens[i],
							 &ev[i]),
					 0);
			break;
		case 1:
			assert_int_equal(lode_kv_put(t->cont, kv_oid(61), dk[i], src[i], lens[i],
						     &ev[i]),
					 0);
			break;
		default:
			assert_int_equal(lode_obj_write(t->cont, kv_oid(60), &keys[i], 7, src[i],
							lens[i], &ev[i]),
					 0);
		}
	}
	assert_int_equal(lode_eq_inflight(eq), NEV);
	/* The queue cannot go while they are in flight. */
	assert_int_equal(lode_eq_destroy(eq), -EBUSY);
	poll_all(eq, ev, NEV);
	for (int i = 0; i < NEV; i++)
		assert_ptr_equal(ev[i].user, &keys[i]);

	/* 64 reads in flight at once, each into its own buffer. */
	for (int i = 0; i < NEV; i++) {
		uint32_t *lp = &lens[i];

		assert_int_equal(lode_event_init(&ev[i], eq), 0);
		memset(dst[i], 0xa5, lens[i] + 8);
		switch (i % 3) {
		case 0:
			*lp = 0;
			assert_int_equal(lode_obj_fetch(t->cont, kv_oid(60), LODE_EPOCH_MAX, &keys[i],
							dst[i], (uint32_t)(1u << (i % 19)) + (uint32_t)i + 8,
							lp, &ev[i]),
					 0);
			break;
		case 1:
			*lp = 0;
			assert_int_equal(lode_kv_get(t->cont, kv_oid(61), dk[i], dst[i],
						     (uint32_t)(1u << (i % 19)) + (uint32_t)i + 8, lp,
						     &ev[i]),
					 0);
			break;
		default:
			assert_int_equal(lode_obj_read(t->cont, kv_oid(60), LODE_EPOCH_MAX, &keys[i], 7,
						       dst[i], lens[i], &ev[i]),
					 0);
		}
	}
	assert_int_equal(lode_eq_destroy(eq), -EBUSY);
	poll_all(eq, ev, NEV);
	for (int i = 0; i < NEV; i++) {
		uint32_t want = (uint32_t)(1u << (i % 19)) + (uint32_t)i;

		assert_int_equal(lens[i], want);
		assert_memory_equal(dst[i], src[i], want);
		if (i % 3 != 2)
			for (int g = 0; g < 8; g++)
				assert_int_equal(dst[i][want + g], 0xa5);
		free(src[i]);
		free(dst[i]);
	}
	assert_int_equal(lode_eq_poll(eq, 0, 1, 0, none), 0);
	assert_int_equal(lode_eq_destroy(eq), 0);
}

/* An asynchronous call refused up front returns the error and leaves the event free. */
static void test_async_refused(void **state)
{
	struct tctx *t = *state;
	struct lode_key k = {"d", 0, "a", 1};
	lode_event_t ev, *got[1];
	lode_eq_t *eq;
	uint32_t len;
	uint8_t buf[8];

	memset(&ev, 0, sizeof(ev));
	assert_int_equal(lode_eq_create(&eq), 0);
	assert_int_equal(lode_event_init(&ev, eq), 0);
	assert_int_equal(lode_obj_update(t->cont, kv_oid(62), &k, "x", 1, &ev), -LODE_EKEYEMPTY);
	assert_int_equal(lode_eq_inflight(eq), 0);
	assert_int_equal(lode_eq_poll(eq, 0, 1, 0, got), 0);
	/* The same event, now for a good call. */
	k.dkey_len = 1;
	assert_int_equal(lode_event_init(&ev, eq), 0);
	assert_int_equal(lode_obj_update(t->cont, kv_oid(62), &k, "x", 1, &ev), 0);
	assert_int_equal(lode_eq_poll(eq, 1, 1, POLL_TIMEOUT_US, got), 1);
	assert_ptr_equal(got[0], &ev);
	assert_int_equal(ev.rc, 0);
	/* A fetch of a missing value: accepted, then completes with -ENOENT. */
	k.akey = "missing";
	k.akey_len = 7;
	assert_int_equal(lode_event_init(&ev, eq), 0);
	assert_int_equal(lode_obj_fetch(t->cont, kv_oid(62), LODE_EPOCH_MAX, &k, buf, sizeof(buf),
					&len, &ev),
			 0);
	assert_int_equal(lode_eq_poll(eq, 1, 1, POLL_TIMEOUT_US, got), 1);
	assert_int_equal(ev.rc, -ENOENT);
	assert_int_equal(lode_eq_destroy(eq), 0);
}

/*
 * An event that completed but was not yet reported still belongs to the
 * queue (lode_eq_inflight counts it): initialising it again must be refused,
 * or the queue's list of completed events is cut.
 */
static void test_event_reinit_unreported(void **state)
{
	struct tctx *t = *state;
	struct lode_target_status st[NTARGETS];
	struct lode_key k = mkkey("d", "a");
	lode_event_t ev, *got[2];
	lode_eq_t *eq;

	memset(&ev, 0, sizeof(ev));
	assert_int_equal(lode_eq_create(&eq), 0);
	assert_int_equal(lode_event_init(&ev, eq), 0);
	assert_int_equal(lode_obj_update(t->cont, kv_oid(63), &k, "x", 1, &ev), 0);
	/* A blocking call to every target drives the connection, so the update's reply arrives. */
	usleep(20000);
	assert_int_equal(lode_status(conn, st, NTARGETS), NTARGETS);
	assert_int_equal(lode_eq_inflight(eq), 1);
	assert_int_equal(lode_event_init(&ev, eq), -EBUSY);
	assert_int_equal(lode_eq_poll(eq, 1, 2, POLL_TIMEOUT_US, got), 1);
	assert_ptr_equal(got[0], &ev);
	assert_int_equal(ev.rc, 0);
	assert_int_equal(lode_eq_poll(eq, 0, 2, 0, got), 0);
	assert_int_equal(lode_eq_destroy(eq), 0);
}

/* ---- threads --------------------------------------------------------------- */

#define NTHREADS 4
#define PER_THREAD 150

struct worker {
	pthread_t th;
	unsigned id;
	lode_cont_t *cont; /* NULL: open its own connection and container */
	const char *label;
	int err;           /* first failure, 0 if none */
	char what[160];
};

static void worker_fail(struct worker *w, int rc, const char *what, unsigned i)
{
	if (!w->err) {
		w->err = rc ? rc : -EIO;
		snprintf(w->what, sizeof(w->what), "thread %u, %s #%u: %s", w->id, what, i,
			 lode_strerror(rc));
	}
}

/* Key and value of item i of thread id; cmocka's asserts must not run off the main thread. */
static void worker_kv(unsigned id, unsigned i, char *key, char *val)
{
	sprintf(key, "t%u-k%u", id, i);
	sprintf(val, "thread %u item %u %0*u", id, i, (int)(i % 100), 7);
}

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	lode_conn_t *c = NULL;
	lode_cont_t *cont = w->cont;
	char key[32], val[160], got[200];
	uint32_t len;
	int rc;

	if (!cont) {
		if ((rc = hs_connect(&srv, tp, 0, &c)) < 0) {
			worker_fail(w, rc, "connect", 0);
			return NULL;
		}
		if ((rc = lode_cont_open(c, w->label, &cont)) < 0) {
			worker_fail(w, rc, "open", 0);
			lode_disconnect(c);
			return NULL;
		}
	}
	for (unsigned i = 0; i < PER_THREAD; i++) {
		worker_kv(w->id, i, key, val);
		if ((rc = lode_kv_put(cont, kv_oid(70), key, val, (uint32_t)strlen(val), NULL)) < 0)
			worker_fail(w, rc, "put", i);
		/* Read back this one and an earlier one, racing the other threads' puts. */
		for (unsigned j = i; j + 3 >= i; j -= 3) {
			worker_kv(w->id, j, key, val);
			len = 0;
			rc = lode_kv_get(cont, kv_oid(70), key, got, sizeof(got), &len, NULL);
			if (rc < 0)
				worker_fail(w, rc, "get", j);
			else if (len != strlen(val) || memcmp(got, val, len) != 0)
				worker_fail(w, 0, "get returned other bytes", j);
			if (j < 3)
				break;
		}
	}
	if (c) {
		lode_cont_close(cont);
		lode_disconnect(c);
	}
	return NULL;
}

static void run_workers(struct tctx *t, bool shared)
{
	struct worker w[NTHREADS];
	char key[32], val[160], got[200];
	uint32_t len;

	memset(w, 0, sizeof(w));
	for (unsigned i = 0; i < NTHREADS; i++) {
		w[i].id = i + (shared ? 0 : NTHREADS);
		w[i].cont = shared ? t->cont : NULL;
		w[i].label = t->label;
		assert_int_equal(pthread_create(&w[i].th, NULL, worker_run, &w[i]), 0);
	}
	for (unsigned i = 0; i < NTHREADS; i++)
		pthread_join(w[i].th, NULL);
	for (unsigned i = 0; i < NTHREADS; i++)
		if (w[i].err)
			fail_msg("%s", w[i].what);
	/* Everything every thread wrote, read from the main thread after an aggregation. */
	assert_int_equal(lode_cont_aggregate(t->cont), 0);
	for (unsigned i = 0; i < NTHREADS; i++) {
		for (unsigned j = 0; j < PER_THREAD; j++) {
			worker_kv(w[i].id, j, key, val);
			assert_int_equal(lode_kv_get(t->cont, kv_oid(70), key, got, sizeof(got), &len,
						     NULL),
					 0);
			assert_int_equal(len, strlen(val));
			assert_memory_equal(got, val, len);
		}
	}
}

static void test_threads_shared(void **state)
{
	run_workers(*state, true);
}

static void test_threads_own(void **state)
{
	run_workers(*state, false);
}

/* Aggregation after many overwrites: the latest stays readable, every key of it. */
static void test_aggregate(void **state)
{
	struct tctx *t = *state;
	uint8_t v[4096];
	char d[16];

	for (int gen = 0; gen < 5; gen++) {
		for (int i = 0; i < 30; i++) {
			snprintf(d, sizeof(d), "g%d", i);
			fill(v, sizeof(v), (uint64_t)(gen * 100 + i));
			put_sv(t->cont, kv_oid(80), d, "a", v, (uint32_t)sizeof(v) - (uint32_t)gen);
		}
	}
	assert_int_equal(lode_cont_aggregate(t->cont), 0);
	for (int i = 0; i < 30; i++) {
		snprintf(d, sizeof(d), "g%d", i);
		fill(v, sizeof(v), (uint64_t)(4 * 100 + i));
		expect_sv(t->cont, kv_oid(80), LODE_EPOCH_MAX, d, "a", v, (uint32_t)sizeof(v) - 4);
	}
	assert_int_equal(lode_cont_aggregate(t->cont), 0);
	assert_int_equal(lode_cont_aggregate(NULL), -EFAULT);
}

/* Index records over every target (lode_status). */
static uint64_t records_all(void)
{
	struct lode_target_status st[16];
	uint64_t n = 0;
	int nt = lode_status(conn, st, 16);

	assert_true(nt > 0 && nt <= 16);
	for (int i = 0; i < nt; i++)
		n += st[i].records;
	return n;
}

/*
 * An array written in 4 KiB pieces has a version per piece, and a read
 * walks the versions newer than the one it needs: reads that walk many
 * make the target aggregate on its own (src/server/service.c, AGG_WALKS),
 * without the space pressure that otherwise starts it. The records go and
 * every byte still reads back.
 */
static void test_fragmented_reads(void **state)
{
	struct tctx *t = *state;
	enum { PIECE = 4096, NPIECES = 256 };
	const uint32_t chunk = PIECE * NPIECES;
	uint8_t *want = malloc(chunk), got[PIECE];
	uint64_t before, after = 0, x = 12345;

	assert_non_null(want);
	fill(want, chunk, 77);
	for (unsigned i = 0; i < NPIECES; i++)
		assert_int_equal(lode_array_write(t->cont, arr_oid(95), chunk, (uint64_t)i * PIECE,
						  want + (size_t)i * PIECE, PIECE, NULL),
				 0);
	before = records_all();
	assert_true(before >= NPIECES);
	for (int round = 0; round < 100 && (after = records_all()) > before - NPIECES / 2; round++) {
		for (int i = 0; i < 40; i++) {
			unsigned p;

			x = x * 6364136223846793005ull + 1442695040888963407ull;
			p = (unsigned)(x >> 33) % NPIECES;
			assert_int_equal(lode_array_read(t->cont, arr_oid(95), chunk, LODE_EPOCH_MAX,
							 (uint64_t)p * PIECE, got, PIECE, NULL),
					 0);
			assert_memory_equal(got, want + (size_t)p * PIECE, PIECE);
		}
		usleep(50000);
	}
	if (after > before - NPIECES / 2)
		fail_msg("records %" PRIu64 " before 4000 fragmented reads, %" PRIu64
			 " after: no aggregation",
			 before, after);
	uint8_t *all = malloc(chunk);

	assert_non_null(all);
	assert_int_equal(
		lode_array_read(t->cont, arr_oid(95), chunk, LODE_EPOCH_MAX, 0, all, chunk, NULL), 0);
	assert_memory_equal(all, want, chunk);
	free(all);
	free(want);
}

/* ---- bad keys and pointers ------------------------------------------------- */

static void test_key_errors(void **state)
{
	struct tctx *t = *state;
	static char k1024[LODE_KEY_MAX + 1], k1025[LODE_KEY_MAX + 2];
	struct lode_oid o = kv_oid(90);
	struct lode_anchor an = {0};
	struct lode_key k;
	uint8_t buf[64];
	uint32_t len;
	uint64_t size;
	struct {
		struct lode_key k;
		int rc;
	} bad[] = {
		{{"d", 0, "a", 1}, -LODE_EKEYEMPTY},
		{{"d", 1, "a", 0}, -LODE_EKEYEMPTY},
		{{k1025, LODE_KEY_MAX + 1, "a", 1}, -ENAMETOOLONG},
		{{"d", 1, k1025, LODE_KEY_MAX + 1}, -ENAMETOOLONG},
		{{NULL, 1, "a", 1}, -EFAULT},
		{{"d", 1, NULL, 1}, -EFAULT},
	};

	memset(k1024, 'k', LODE_KEY_MAX);
	memset(k1025, 'K', LODE_KEY_MAX + 1);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct lode_key *b = &bad[i].k;
		int rc = bad[i].rc;

		assert_int_equal(lode_obj_update(t->cont, o, b, "v", 1, NULL), rc);
		assert_int_equal(lode_obj_fetch(t->cont, o, LODE_EPOCH_MAX, b, buf, sizeof(buf), &len,
						NULL),
				 rc);
		assert_int_equal(lode_obj_write(t->cont, o, b, 0, "v", 1, NULL), rc);
		assert_int_equal(lode_obj_read(t->cont, o, LODE_EPOCH_MAX, b, 0, buf, 1, NULL), rc);
		assert_int_equal(lode_obj_size(t->cont, o, LODE_EPOCH_MAX, b, &size), rc);
		assert_int_equal(lode_akey_punch(t->cont, o, b, NULL), rc);
		assert_int_equal(lode_range_punch(t->cont, o, b, 0, 1, NULL), rc);
		/* The dkey calls look at the dkey only. */
		if (b->dkey_len != 1 || !b->dkey) {
			assert_int_equal(lode_dkey_punch(t->cont, o, b, NULL), rc);
			memset(&an, 0, sizeof(an));
			assert_int_equal(lode_akey_list(t->cont, o, b, LODE_EPOCH_MAX, &an, buf,
							sizeof(buf)),
					 rc);
		}
	}
	/* 1024 bytes is the limit, and it works for both keys. */
	k = (struct lode_key){k1024, LODE_KEY_MAX, k1024, LODE_KEY_MAX};
	assert_int_equal(lode_obj_update(t->cont, o, &k, "long", 4, NULL), 0);
	len = 0;
	assert_int_equal(lode_obj_fetch(t->cont, o, LODE_EPOCH_MAX, &k, buf, sizeof(buf), &len, NULL),
			 0);
	assert_int_equal(len, 4);
	assert_memory_equal(buf, "long", 4);
	/* Nothing of the refused calls was stored. */
	assert_int_equal(count_dkeys(t->cont, o, LODE_EPOCH_MAX), 1);

	/* kv: the key is a string. */
	k1025[LODE_KEY_MAX + 1] = '\0';
	k1024[LODE_KEY_MAX] = '\0';
	assert_int_equal(lode_kv_put(t->cont, o, "", "v", 1, NULL), -LODE_EKEYEMPTY);
	assert_int_equal(lode_kv_put(t->cont, o, k1025, "v", 1, NULL), -ENAMETOOLONG);
	assert_int_equal(lode_kv_put(t->cont, o, NULL, "v", 1, NULL), -EFAULT);
	assert_int_equal(lode_kv_get(t->cont, o, "", buf, sizeof(buf), &len, NULL), -LODE_EKEYEMPTY);
	assert_int_equal(lode_kv_get(t->cont, o, k1025, buf, sizeof(buf), &len, NULL), -ENAMETOOLONG);
	assert_int_equal(lode_kv_remove(t->cont, o, "", NULL), -LODE_EKEYEMPTY);
	assert_int_equal(lode_kv_remove(t->cont, o, k1025, NULL), -ENAMETOOLONG);
	assert_int_equal(lode_kv_put(t->cont, o, k1024, "v", 1, NULL), 0);

	/* NULL where a pointer is required. */
	k = mkkey("d", "a");
	assert_int_equal(lode_obj_update(NULL, o, &k, "v", 1, NULL), -EFAULT);
	assert_int_equal(lode_obj_update(t->cont, o, NULL, "v", 1, NULL), -EFAULT);
	assert_int_equal(lode_obj_update(t->cont, o, &k, NULL, 1, NULL), -EFAULT);
	assert_int_equal(lode_obj_fetch(t->cont, o, LODE_EPOCH_MAX, &k, NULL, 8, &len, NULL), -EFAULT);
	assert_int_equal(lode_obj_fetch(t->cont, o, LODE_EPOCH_MAX, &k, buf, 8, NULL, NULL), -EFAULT);
	assert_int_equal(lode_obj_write(t->cont, o, &k, 0, NULL, 1, NULL), -EFAULT);
	assert_int_equal(lode_obj_read(t->cont, o, LODE_EPOCH_MAX, &k, 0, NULL, 1, NULL), -EFAULT);
	assert_int_equal(lode_obj_size(t->cont, o, LODE_EPOCH_MAX, &k, NULL), -EFAULT);
	assert_int_equal(lode_dkey_punch(t->cont, o, NULL, NULL), -EFAULT);
	assert_int_equal(lode_akey_punch(t->cont, o, NULL, NULL), -EFAULT);
	assert_int_equal(lode_range_punch(t->cont, o, NULL, 0, 1, NULL), -EFAULT);
	assert_int_equal(lode_obj_punch(NULL, o, NULL), -EFAULT);
	assert_int_equal(lode_obj_list(t->cont, LODE_EPOCH_MAX, NULL, NULL, 4), -EFAULT);
	assert_int_equal(lode_dkey_list(t->cont, o, LODE_EPOCH_MAX, NULL, buf, sizeof(buf)), -EFAULT);
	assert_int_equal(lode_dkey_list(t->cont, o, LODE_EPOCH_MAX, &an, NULL, sizeof(buf)), -EFAULT);
	assert_int_equal(lode_kv_get(t->cont, o, "d", NULL, 8, &len, NULL), -EFAULT);
	assert_int_equal(lode_kv_get(t->cont, o, "d", buf, 8, NULL, NULL), -EFAULT);
	assert_int_equal(lode_kv_list(t->cont, o, NULL, buf, sizeof(buf)), -EFAULT);
	assert_int_equal(lode_array_write(t->cont, arr_oid(91), 0, 0, NULL, 1, NULL), -EFAULT);
	assert_int_equal(lode_array_read(t->cont, arr_oid(91), 0, LODE_EPOCH_MAX, 0, NULL, 1, NULL),
			 -EFAULT);
	assert_int_equal(lode_array_size(t->cont, arr_oid(91), 0, LODE_EPOCH_MAX, NULL), -EFAULT);
	assert_int_equal(lode_snap_create(t->cont, NULL), -EFAULT);
	assert_int_equal(lode_snap_list(t->cont, NULL, 4), -EFAULT);
	assert_int_equal(lode_cont_list(NULL, NULL, 0), -EFAULT);
	assert_int_equal(lode_cont_destroy(conn, NULL), -EFAULT);
	assert_int_equal(lode_eq_create(NULL), -EFAULT);
	assert_int_equal(lode_eq_destroy(NULL), -EFAULT);
	assert_int_equal(lode_event_init(NULL, NULL), -EFAULT);
}

/*
 * The reclaim's drop of a dkey (NET_OP_DKEY_DROP, docs/decisions/0014)
 * waits for writes of that dkey in flight on the target that were placed
 * with an older map than the drop: a 32 MiB write, whose value the target
 * fetches from us, is sent placed with no map (version 0, which the
 * target does not check: older than any), and a drop of its dkey right
 * behind it on every target; the one the write is on answers -EBUSY while
 * the value is on its way. A drop that comes before the write, or after
 * it landed, goes through: the drops are sent again and again, on a
 * connection of their own, until one is refused or the write is done (in
 * a release build the write took up to a few milliseconds to reach its
 * target, and one round of drops sent at once on the write's connection
 * missed it in most runs), and the whole tried up to 20 times. Once the
 * write is done, the drop goes through and the dkey is gone.
 */
static void test_drop_waits_for_writes(void **state)
{
	struct tctx *t = *state;
	const uint32_t len = 32 * MIB;
	struct lode_oid oid = lode_oid_make(LODE_OT_ARRAY, 0, 7, 1);
	struct lode_key k = mkkey("inflight", "a");
	struct lode_key dk = {k.dkey, k.dkey_len, NULL, 0};
	uint8_t *buf = xmalloc(len), small[16];
	lode_event_t ev, *done[1];
	lode_eq_t *eq;
	unsigned busy = 0, dropped = 0;
	lode_conn_t *c2;
	lode_cont_t *ct2;
	int n;

	fill(buf, len, 77);
	assert_int_equal(lode_eq_create(&eq), 0);
	/* The drops go on a connection of their own: on the write's, they
	 * would queue behind its value. */
	assert_int_equal(hs_connect(&srv, tp, 0, &c2), 0);
	assert_int_equal(lode_cont_open(c2, t->label, &ct2), 0);
	for (int attempt = 0; attempt < 20 && busy == 0; attempt++) {
		uint32_t v = atomic_load(&conn->map_ver);

		assert_int_equal(lode_event_init(&ev, eq), 0);
		atomic_store(&conn->map_ver, 0);
		assert_int_equal(lode_obj_write(t->cont, oid, &k, 0, buf, len, &ev), 0);
		atomic_store(&conn->map_ver, v);
		/* Drops on every target, again and again until one is refused or
		 * the write is done: the write may take milliseconds to leave
		 * this process (a drop that comes first finds nothing). */
		do {
			for (unsigned tg = 0; tg < conn->ntargets && !busy; tg++) {
				struct conn_tgt_io io = {.epoch = LODE_EPOCH_MAX};
				int rc = conn_tgt_io(ct2, tg, NET_OP_DKEY_DROP, oid, &dk, &io);

				if (rc == -EBUSY)
					busy++;
				else if (rc != 0 && rc != -ENOENT && rc != -LODE_EKEYEMPTY)
					fail_msg("drop on target %u: %d (%s)", tg, rc,
						 lode_strerror(rc));
			}
			n = lode_eq_poll(eq, 0, 1, 0, done);
		} while (n == 0 && !busy);
		if (n == 0)
			n = lode_eq_poll(eq, 1, 1, POLL_TIMEOUT_US, done);
		assert_int_equal(n, 1);
		assert_int_equal(done[0]->rc, 0);
	}
	assert_true(busy > 0);
	/* Written, and now nothing in flight: the drop goes through. */
	assert_int_equal(lode_obj_read(t->cont, oid, LODE_EPOCH_MAX, &k, len - 16, small,
				       sizeof(small), NULL), 0);
	assert_memory_equal(small, buf + len - 16, sizeof(small));
	for (unsigned tg = 0; tg < conn->ntargets; tg++) {
		struct conn_tgt_io io = {.epoch = LODE_EPOCH_MAX};
		int rc = conn_tgt_io(t->cont, tg, NET_OP_DKEY_DROP, oid, &dk, &io);

		assert_true(rc == 0 || rc == -ENOENT || rc == -LODE_EKEYEMPTY);
		dropped += rc == 0;
	}
	assert_true(dropped > 0);
	assert_int_equal(lode_obj_read(t->cont, oid, LODE_EPOCH_MAX, &k, 0, small, sizeof(small),
				       NULL), -ENOENT);
	lode_cont_close(ct2);
	lode_disconnect(c2);
	lode_eq_destroy(eq);
	free(buf);
}

/* ---- the suite, per transport ---------------------------------------------- */

/*
 * A snapshot epoch far ahead of a target's clock is refused (taking it
 * would drag every container's writes on that engine up with it), and
 * leaves no snapshot.
 */
static void test_snap_epoch_ahead(void **state)
{
	struct tctx *t = *state;
	struct timespec now;
	lode_epoch_t list[4];
	struct conn_tgt_io io;

	clock_gettime(CLOCK_REALTIME, &now);
	io = (struct conn_tgt_io){.epoch = (uint64_t)now.tv_sec * 1000000000ull +
					   (uint64_t)now.tv_nsec + 3600ull * 1000000000ull};
	assert_int_equal(conn_tgt_io(t->cont, 0, NET_OP_SNAP_CREATE, (struct lode_oid){0, 0}, NULL,
				     &io),
			 -EINVAL);
	assert_int_equal(lode_snap_list(t->cont, list, 4), 0);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, cont_setup, cont_teardown)

static const struct CMUnitTest tests[] = {
	cmocka_unit_test(test_conn_query),
	cmocka_unit_test(test_connect_refused),
	T(test_status),
	cmocka_unit_test(test_containers),
	T(test_single_values),
	T(test_sv_overflow),
	T(test_sv_missing_and_overwrite),
	T(test_sv_too_big),
	T(test_extents),
	T(test_punch),
	T(test_snapshots),
	T(test_enum_objects),
	T(test_enum_dkeys),
	T(test_enum_akeys),
	T(test_kv),
	T(test_array_64k),
	T(test_array_default),
	T(test_array_spread),
	T(test_async),
	T(test_async_refused),
	T(test_event_reinit_unreported),
	T(test_threads_shared),
	T(test_threads_own),
	T(test_aggregate),
	T(test_fragmented_reads),
	T(test_key_errors),
	T(test_drop_waits_for_writes),
	T(test_snap_epoch_ahead),
};

int main(void)
{
	const char *env = getenv("LODE_TEST_TRANSPORTS");
	char list[256], *save = NULL, name[64];
	int failed = 0;

	snprintf(list, sizeof(list), "%s", env && env[0] ? env : "tcp shm");
	for (char *w = strtok_r(list, " ,", &save); w; w = strtok_r(NULL, " ,", &save)) {
		tp = w;
		snprintf(name, sizeof(name), "api over %s", tp);
		failed += _cmocka_run_group_tests(name, tests, sizeof(tests) / sizeof(tests[0]),
						  group_setup, group_teardown);
	}
	return failed ? 1 : 0;
}
