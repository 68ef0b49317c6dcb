/*
 * Tests for the write-lease table of a target (src/server/lease.c): a lease
 * is granted, refused to another token with the holder's time left, renewed
 * by its own token, given back only by its holder, taken over once it
 * expired, dropped with its session; bad arguments; a full table refuses
 * until leases expire; many keys in one table keep apart.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "server/lease.h"

#define MS 1000ull /* µs */

static void test_take_give(void **state)
{
	struct lease_tab t;
	uint64_t left = 0;

	(void)state;
	assert_int_equal(lease_tab_init(&t, 16), 0);
	assert_int_equal(lease_take(&t, "a", 1, 7, 1, 100, 0, &left), 0);
	/* Another token waits; it is told how long the holder has left. */
	assert_int_equal(lease_take(&t, "a", 1, 8, 2, 100, 40 * MS, &left), -EBUSY);
	assert_int_equal(left, 60);
	/* Another key is free. */
	assert_int_equal(lease_take(&t, "b", 1, 8, 2, 100, 40 * MS, &left), 0);
	/* The holder renews: the lease now ends at 150 ms. */
	assert_int_equal(lease_take(&t, "a", 1, 7, 1, 100, 50 * MS, &left), 0);
	assert_int_equal(lease_take(&t, "a", 1, 8, 2, 100, 120 * MS, &left), -EBUSY);
	assert_int_equal(left, 30);
	/* Only the holder gives it back. */
	assert_int_equal(lease_give(&t, "a", 1, 8), -ENOENT);
	assert_int_equal(lease_give(&t, "a", 1, 7), 0);
	assert_int_equal(lease_give(&t, "a", 1, 7), -ENOENT);
	assert_int_equal(lease_take(&t, "a", 1, 8, 2, 100, 120 * MS, &left), 0);
	assert_int_equal(t.n, 2);
	lease_tab_fini(&t);
}

static void test_expiry(void **state)
{
	struct lease_tab t;
	uint64_t left = 0;

	(void)state;
	assert_int_equal(lease_tab_init(&t, 16), 0);
	assert_int_equal(lease_take(&t, "k", 1, 1, 1, 10, 0, &left), 0);
	assert_int_equal(lease_take(&t, "k", 1, 2, 2, 10, 9 * MS, &left), -EBUSY);
	assert_int_equal(left, 1);
	/* Expired at 10 ms: the next token takes it, the old one cannot give it back. */
	assert_int_equal(lease_take(&t, "k", 1, 2, 2, 10, 10 * MS, &left), 0);
	assert_int_equal(lease_give(&t, "k", 1, 1), -ENOENT);
	assert_int_equal(t.n, 1);
	/* A duration past the cap is cut to it. */
	assert_int_equal(lease_take(&t, "long", 4, 3, 1, UINT64_MAX / 2000, 0, &left), 0);
	assert_int_equal(lease_take(&t, "long", 4, 4, 1, 10, 1 * MS, &left), -EBUSY);
	assert_int_equal(left, LEASE_MAX_MS - 1);
	lease_tab_fini(&t);
}

static void test_session(void **state)
{
	struct lease_tab t;
	uint64_t left = 0;
	char key[16];

	(void)state;
	assert_int_equal(lease_tab_init(&t, 64), 0);
	for (int i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "key-%d", i);
		assert_int_equal(lease_take(&t, key, strlen(key), 100 + i, 1 + i % 2, 1000, 0, &left),
				 0);
	}
	assert_int_equal(lease_drop_session(&t, 2), 20);
	assert_int_equal(t.n, 20);
	for (int i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "key-%d", i);
		/* Session 2's (odd i) are free; session 1's still held. */
		assert_int_equal(lease_take(&t, key, strlen(key), 999, 3, 1000, 1, &left),
				 i % 2 ? 0 : -EBUSY);
	}
	assert_int_equal(lease_drop_session(&t, 7), 0);
	lease_tab_fini(&t);
}

static void test_bad_and_full(void **state)
{
	struct lease_tab t;
	uint64_t left = 0;
	static uint8_t big[LEASE_KEY_MAX + 1];

	(void)state;
	assert_int_equal(lease_tab_init(&t, 2), 0);
	assert_int_equal(lease_take(&t, "a", 1, 0, 1, 10, 0, &left), -EINVAL);
	assert_int_equal(lease_take(&t, "a", 0, 1, 1, 10, 0, &left), -EINVAL);
	assert_int_equal(lease_take(&t, "a", 1, 1, 1, 0, 0, &left), -EINVAL);
	assert_int_equal(lease_take(&t, big, sizeof(big), 1, 1, 10, 0, &left), -EINVAL);
	assert_int_equal(lease_give(&t, big, sizeof(big), 1), -ENOENT);
	assert_int_equal(lease_take(&t, "a", 1, 1, 1, 10, 0, &left), 0);
	assert_int_equal(lease_take(&t, "b", 1, 1, 1, 20, 0, &left), 0);
	/* Full while both live; once "a" expired, the sweep makes room. */
	assert_int_equal(lease_take(&t, "c", 1, 1, 1, 10, 5 * MS, &left), -EAGAIN);
	assert_int_equal(lease_take(&t, "c", 1, 1, 1, 10, 10 * MS, &left), 0);
	assert_int_equal(t.n, 2);
	assert_int_equal(lease_take(&t, "b", 1, 2, 1, 10, 10 * MS, &left), -EBUSY);
	lease_tab_fini(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_take_give),
		cmocka_unit_test(test_expiry),
		cmocka_unit_test(test_session),
		cmocka_unit_test(test_bad_and_full),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
