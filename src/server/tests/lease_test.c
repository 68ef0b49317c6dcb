/*
 * Tests for the write-lease table of a target (src/server/lease.c): a lease
 * is granted, refused to another token with the holder's time left, renewed
 * by its own token, given back only by its holder; a lease that expires,
 * whose session closes or that is given back torn leaves the array marked
 * torn for the next holder, with the range its holders wrote, until one
 * gives it back whole, also when a holder that lost its lease gives it
 * back torn late; bad arguments; a full table refuses new leases (torn
 * marks do not count); a snapshot's hold keeps new writers of its
 * container out, but not its own taker's mends; the torn arrays of a
 * container are listed; objects', dkeys' and arrays' leases nest, and a
 * punch's never tears.
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

static struct lease_torn last; /* what the last take was told */

/* Give key back for token, for the range [0, 4096). */
static int give(struct lease_tab *t, const void *key, size_t klen, uint64_t token, bool torn)
{
	struct lease_ask a = {.token = token, .len = 4096};

	return lease_give(t, key, klen, &a, torn);
}

/* The same for the range [off, off + len). */
static int give_range(struct lease_tab *t, const char *key, uint64_t token, uint64_t off,
		      uint64_t len, bool torn)
{
	struct lease_ask a = {.token = token, .off = off, .len = len};

	return lease_give(t, key, strlen(key), &a, torn);
}

/* Take key for token, for the range [0, 4096); *torn as the table says. */
static int take(struct lease_tab *t, const char *key, uint64_t token, uint32_t session,
		uint64_t dur_ms, uint64_t now_us, uint64_t *left, bool *torn)
{
	struct lease_ask a = {.token = token, .session = session, .dur_ms = dur_ms, .len = 4096};
	int rc;

	last = (struct lease_torn){0};
	rc = lease_take(t, key, strlen(key), &a, now_us, left, &last);
	*torn = last.torn;
	return rc;
}

/* The same for the range [off, off + len). */
static int take_range(struct lease_tab *t, const char *key, uint64_t token, uint64_t off,
		      uint64_t len, uint64_t now_us)
{
	struct lease_ask a = {.token = token, .session = 1, .dur_ms = 100, .off = off, .len = len};
	uint64_t left;

	last = (struct lease_torn){0};
	return lease_take(t, key, strlen(key), &a, now_us, &left, &last);
}

static void test_take_give(void **state)
{
	struct lease_tab t;
	uint64_t left = 0;
	bool torn;

	(void)state;
	assert_int_equal(lease_tab_init(&t, 16), 0);
	assert_int_equal(take(&t, "a", 7, 1, 100, 0, &left, &torn), 0);
	assert_false(torn);
	/* Another token waits; it is told how long the holder has left. */
	assert_int_equal(take(&t, "a", 8, 2, 100, 40 * MS, &left, &torn), -EBUSY);
	assert_int_equal(left, 60);
	/* Another key is free. */
	assert_int_equal(take(&t, "b", 8, 2, 100, 40 * MS, &left, &torn), 0);
	/* The holder renews: the lease now ends at 150 ms. */
	assert_int_equal(take(&t, "a", 7, 1, 100, 50 * MS, &left, &torn), 0);
	assert_int_equal(take(&t, "a", 8, 2, 100, 120 * MS, &left, &torn), -EBUSY);
	assert_int_equal(left, 30);
	/* Only the holder gives it back; given back whole, the key is gone. */
	assert_int_equal(give(&t, "a", 1, 8, false), -ENOENT);
	assert_int_equal(give(&t, "a", 1, 7, false), 0);
	assert_int_equal(t.n, 1);
	assert_int_equal(give(&t, "a", 1, 7, false), -ENOENT);
	assert_int_equal(take(&t, "a", 8, 2, 100, 120 * MS, &left, &torn), 0);
	assert_false(torn);
	assert_int_equal(t.n, 2);
	lease_tab_fini(&t);
}

static void test_expiry_tears(void **state)
{
	struct lease_tab t;
	uint64_t left = 0;
	bool torn;

	(void)state;
	assert_int_equal(lease_tab_init(&t, 16), 0);
	assert_int_equal(take(&t, "k", 1, 1, 10, 0, &left, &torn), 0);
	assert_int_equal(take(&t, "k", 2, 2, 10, 9 * MS, &left, &torn), -EBUSY);
	assert_int_equal(left, 1);
	/* Ran out at 10 ms: the next token takes it and is told it is torn; the
	 * old one cannot give it back. */
	assert_int_equal(take(&t, "k", 2, 2, 10, 10 * MS, &left, &torn), 0);
	assert_true(torn);
	assert_int_equal(give(&t, "k", 1, 1, false), -ENOENT);
	/* Still torn while held: renewing says so too. */
	assert_int_equal(take(&t, "k", 2, 2, 10, 11 * MS, &left, &torn), 0);
	assert_true(torn);
	/* Given back whole (the holder mended it): forgotten. */
	assert_int_equal(give(&t, "k", 1, 2, false), 0);
	assert_int_equal(t.n, 0);
	assert_int_equal(take(&t, "k", 3, 3, 10, 12 * MS, &left, &torn), 0);
	assert_false(torn);
	/* Given back torn (could not mend it): the next holder is told. */
	assert_int_equal(give(&t, "k", 1, 3, true), 0);
	assert_int_equal(t.n, 1);
	assert_int_equal(take(&t, "k", 4, 3, 10, 13 * MS, &left, &torn), 0);
	assert_true(torn);
	/* A duration past the cap is cut to it. */
	assert_int_equal(take(&t, "long", 3, 1, UINT64_MAX / 2000, 0, &left, &torn), 0);
	assert_int_equal(take(&t, "long", 4, 1, 10, 1 * MS, &left, &torn), -EBUSY);
	assert_int_equal(left, LEASE_MAX_MS - 1);
	lease_tab_fini(&t);
}

/* A torn mark says where; holders that leave it torn in turn widen it. */
static void test_torn_range(void **state)
{
	struct lease_tab t;

	(void)state;
	assert_int_equal(lease_tab_init(&t, 16), 0);
	assert_int_equal(take_range(&t, "r", 1, 65536, 131072, 0), 0);
	assert_false(last.torn);
	assert_int_equal(give(&t, "r", 1, 1, true), 0);
	assert_int_equal(take_range(&t, "r", 2, 0, 65536, 1 * MS), 0);
	assert_true(last.torn);
	assert_int_equal(last.off, 65536);
	assert_int_equal(last.end, 196608);
	/* This holder runs out of time too: the mark covers both ranges. */
	assert_int_equal(take_range(&t, "r", 3, 1 << 20, 65536, 200 * MS), 0);
	assert_true(last.torn);
	assert_int_equal(last.off, 0);
	assert_int_equal(last.end, 196608);
	assert_int_equal(give(&t, "r", 1, 3, true), 0);
	assert_int_equal(take_range(&t, "r", 4, 0, 1, 201 * MS), 0);
	assert_int_equal(last.off, 0);
	assert_int_equal(last.end, (1 << 20) + 65536);
	/* Mended and given back whole: forgotten. A range to the end of the
	 * address space does not wrap. */
	assert_int_equal(give(&t, "r", 1, 4, false), 0);
	assert_int_equal(take_range(&t, "r", 5, 10, UINT64_MAX, 202 * MS), 0);
	assert_false(last.torn);
	assert_int_equal(give(&t, "r", 1, 5, true), 0);
	assert_int_equal(take_range(&t, "r", 6, 0, 1, 203 * MS), 0);
	assert_int_equal(last.off, 10);
	assert_true(last.end == UINT64_MAX);
	lease_tab_fini(&t);
}

/*
 * A holder that lost its lease (ran out, or its session closed) and then
 * gives it back torn: the range is marked even so, and survives the next
 * holder's whole give-back.
 */
static void test_late_torn(void **state)
{
	struct lease_tab t;

	(void)state;
	assert_int_equal(lease_tab_init(&t, 16), 0);
	assert_int_equal(take_range(&t, "l", 1, 0, 65536, 0), 0);
	/* Token 1 ran out at 100 ms; token 2 has it, told torn [0, 64 KiB). */
	assert_int_equal(take_range(&t, "l", 2, 131072, 65536, 150 * MS), 0);
	assert_true(last.torn);
	assert_int_equal(last.end, 65536);
	/* Token 1's write failed after all: its torn give-back comes late. */
	assert_int_equal(give_range(&t, "l", 1, 0, 65536, true), -ENOENT);
	/* Token 2 mended [0, 64 KiB) and gives back whole: the late mark stays. */
	assert_int_equal(give_range(&t, "l", 2, 131072, 65536, false), 0);
	assert_int_equal(take_range(&t, "l", 3, 0, 1, 160 * MS), 0);
	assert_true(last.torn);
	assert_int_equal(last.off, 0);
	assert_int_equal(last.end, 196608);
	assert_int_equal(give_range(&t, "l", 3, 0, 1, false), 0);
	assert_int_equal(t.n, 0);
	assert_int_equal(t.held, 0);
	/* A late torn give-back for a key nobody holds marks it too. */
	assert_int_equal(give_range(&t, "m", 9, 4096, 4096, true), -ENOENT);
	assert_int_equal(take_range(&t, "m", 10, 0, 1, 170 * MS), 0);
	assert_true(last.torn);
	assert_int_equal(last.off, 4096);
	assert_int_equal(last.end, 8192);
	/* A whole give-back of a lease not held changes nothing. */
	assert_int_equal(give_range(&t, "z", 11, 0, 1, false), -ENOENT);
	assert_int_equal(t.n, 1);
	lease_tab_fini(&t);
}

/* A degraded read's lease: it neither tears an array nor mends one. */
static void test_reader(void **state)
{
	struct lease_tab t;
	struct lease_ask rd = {.token = 5, .session = 2, .dur_ms = 100, .off = 0, .len = 65536,
			       .reader = true};
	uint64_t left;

	(void)state;
	assert_int_equal(lease_tab_init(&t, 16), 0);
	/* A reader whose session closes leaves nothing torn. */
	assert_int_equal(lease_take(&t, "r", 1, &rd, 0, &left, &last), 0);
	assert_int_equal(lease_drop_session(&t, 2), 1);
	assert_int_equal(take_range(&t, "r", 6, 0, 1, 1 * MS), 0);
	assert_false(last.torn);
	/* A torn array: a reader is told, gives it back (its torn flag is not
	 * its to give), and the mark stays for a writer. */
	assert_int_equal(give_range(&t, "r", 6, 0, 1, true), 0);
	rd.token = 7;
	assert_int_equal(lease_take(&t, "r", 1, &rd, 2 * MS, &left, &last), 0);
	assert_true(last.torn);
	assert_int_equal(lease_give(&t, "r", 1, &rd, false), 0);
	assert_int_equal(take_range(&t, "r", 8, 0, 1, 3 * MS), 0);
	assert_true(last.torn);
	assert_int_equal(last.end, 1);
	assert_int_equal(give_range(&t, "r", 8, 0, 1, false), 0);
	/* Untorn, a reader's torn give-back is taken as whole. */
	rd.token = 9;
	assert_int_equal(lease_take(&t, "r", 1, &rd, 4 * MS, &left, &last), 0);
	assert_false(last.torn);
	assert_int_equal(lease_give(&t, "r", 1, &rd, true), 0);
	assert_int_equal(t.n, 0);
	assert_int_equal(t.held, 0);
	lease_tab_fini(&t);
}

/*
 * A snapshot's hold (lease_hold): writers' takes of the held container's
 * keys are refused with the hold's time left, readers' and the holder's
 * own are not, other containers' neither; lease_held_in counts the
 * container's writers' leases held now; one taker letting go leaves
 * another's hold; a hold runs out; a full table of holds is -ENOSPC.
 */
static void test_hold(void **state)
{
	static const uint8_t c1[16] = "container-one..", c2[16] = "container-two..";
	char k1[20], k1b[20], k2[20];
	struct lease_tab t;
	struct lease_ask rd = {.token = 50, .session = 3, .dur_ms = 100, .len = 1, .reader = true};
	struct lease_ask w = {.token = 60, .session = 3, .dur_ms = 100, .len = 1};
	uint64_t left = 0;

	(void)state;
	memcpy(k1, c1, 16), memcpy(k1 + 16, "arr1", 4);
	memcpy(k1b, c1, 16), memcpy(k1b + 16, "arr2", 4);
	memcpy(k2, c2, 16), memcpy(k2 + 16, "arr1", 4);
	assert_int_equal(lease_tab_init(&t, 16), 0);
	assert_int_equal(lease_take(&t, k1, 20, &w, 0, &left, &last), 0); /* held before */
	assert_int_equal(lease_held_in(&t, c1, 1 * MS), 1);
	assert_int_equal(lease_hold(&t, c1, 7, 10 * MS, 1 * MS), 0);
	/* A new writer of c1 waits, told the hold's time left; its holder may
	 * take its own again; a reader may; c2's writers may. */
	w.token = 61;
	assert_int_equal(lease_take(&t, k1b, 20, &w, 2 * MS, &left, &last), -EBUSY);
	assert_int_equal(left, 8);
	w.token = 60;
	assert_int_equal(lease_take(&t, k1, 20, &w, 2 * MS, &left, &last), 0);
	assert_int_equal(lease_take(&t, k1b, 20, &rd, 2 * MS, &left, &last), 0);
	w.token = 62;
	assert_int_equal(lease_take(&t, k2, 20, &w, 2 * MS, &left, &last), 0);
	/* Readers do not count; the held writer does until it gives back. */
	assert_int_equal(lease_held_in(&t, c1, 3 * MS), 1);
	w.token = 60;
	assert_int_equal(lease_give(&t, k1, 20, &w, false), 0);
	assert_int_equal(lease_held_in(&t, c1, 3 * MS), 0);
	/* A second taker's hold; the first lets go: still held. */
	assert_int_equal(lease_hold(&t, c1, 8, 10 * MS, 3 * MS), 0);
	assert_int_equal(lease_hold(&t, c1, 7, 0, 3 * MS), 0);
	w.token = 63;
	assert_int_equal(lease_take(&t, k1, 20, &w, 4 * MS, &left, &last), -EBUSY);
	/* The second's runs out. */
	assert_int_equal(lease_take(&t, k1, 20, &w, 11 * MS, &left, &last), 0);
	/* LEASE_HOLDS holds at once, then -ENOSPC; a run-out one's place is free. */
	for (uint32_t i = 0; i < LEASE_HOLDS; i++)
		assert_int_equal(lease_hold(&t, c2, 100 + i, 20 * MS, 12 * MS), 0);
	assert_int_equal(lease_hold(&t, c1, 9, 20 * MS, 12 * MS), -ENOSPC);
	assert_int_equal(lease_hold(&t, c1, 9, 30 * MS, 21 * MS), 0);
	lease_tab_fini(&t);
}

/* One entry of lease_torn_in's list at p: its key after the container, and its range. */
static const uint8_t *torn_entry(const uint8_t *p, const char *key, uint64_t off, uint64_t end)
{
	size_t n = (size_t)p[0] | (size_t)p[1] << 8;
	uint64_t o = 0, e = 0;

	assert_int_equal(n, strlen(key));
	assert_memory_equal(p + 2, key, n);
	for (int i = 7; i >= 0; i--) {
		o = o << 8 | p[2 + n + i];
		e = e << 8 | p[2 + n + 8 + i];
	}
	assert_int_equal(o, off);
	assert_int_equal(e, end);
	return p + 2 + n + 16;
}

/*
 * The torn arrays of a container: marks, a degraded reader's hold of a
 * mark, and writers that ran out count; a writer still holding, another
 * container's marks, and arrays given back whole do not; a list that does
 * not fit is cut short but counted in full.
 */
static void test_torn_in(void **state)
{
	static const uint8_t c1[16] = "container-one..", c2[16] = "container-two..";
	char k[5][20];
	struct lease_tab t;
	struct lease_ask w = {.token = 1, .session = 3, .dur_ms = 100, .off = 4096, .len = 8192};
	struct lease_ask rd = {.token = 9, .session = 3, .dur_ms = 100, .len = 1, .reader = true};
	uint8_t buf[256];
	const uint8_t *p;
	uint64_t left = 0;
	size_t len = 1;

	(void)state;
	for (int i = 0; i < 5; i++) {
		memcpy(k[i], i == 4 ? c2 : c1, 16);
		memcpy(k[i] + 16, "arr", 3);
		k[i][19] = (char)('0' + i);
	}
	assert_int_equal(lease_tab_init(&t, 16), 0);
	assert_int_equal(lease_torn_in(&t, c1, 0, buf, sizeof(buf), &len), 0);
	assert_int_equal(len, 0);
	/* arr0: torn (given back so), then held by a degraded reader. */
	assert_int_equal(lease_take(&t, k[0], 20, &w, 0, &left, &last), 0);
	assert_int_equal(lease_give(&t, k[0], 20, &w, true), 0);
	assert_int_equal(lease_take(&t, k[0], 20, &rd, 1 * MS, &left, &last), 0);
	/* arr1: a writer holding it now. arr2: one that will run out. */
	w.token = 2;
	assert_int_equal(lease_take(&t, k[1], 20, &w, 1 * MS, &left, &last), 0);
	w.token = 3, w.off = 0, w.len = 65536, w.dur_ms = 5;
	assert_int_equal(lease_take(&t, k[2], 20, &w, 1 * MS, &left, &last), 0);
	/* arr3: given back whole. c2's arr4: torn, another container's. */
	w.token = 4, w.dur_ms = 100;
	assert_int_equal(lease_take(&t, k[3], 20, &w, 1 * MS, &left, &last), 0);
	assert_int_equal(lease_give(&t, k[3], 20, &w, false), 0);
	w.token = 5;
	assert_int_equal(lease_take(&t, k[4], 20, &w, 1 * MS, &left, &last), 0);
	assert_int_equal(lease_give(&t, k[4], 20, &w, true), 0);

	/* At 2 ms arr2's writer still holds it: only arr0. */
	assert_int_equal(lease_torn_in(&t, c1, 2 * MS, buf, sizeof(buf), &len), 1);
	p = torn_entry(buf, "arr0", 4096, 12288);
	assert_int_equal((size_t)(p - buf), len);
	/* At 10 ms it ran out: arr2 too, with its holder's range. */
	assert_int_equal(lease_torn_in(&t, c1, 10 * MS, buf, sizeof(buf), &len), 2);
	p = buf;
	if (p[5] == '0') {
		p = torn_entry(p, "arr0", 4096, 12288);
		p = torn_entry(p, "arr2", 0, 65536);
	} else {
		p = torn_entry(p, "arr2", 0, 65536);
		p = torn_entry(p, "arr0", 4096, 12288);
	}
	assert_int_equal((size_t)(p - buf), len);
	/* Room for one entry (22 bytes): both counted, one listed. */
	assert_int_equal(lease_torn_in(&t, c1, 10 * MS, buf, 30, &len), 2);
	assert_int_equal(len, 22);
	/* Mended: arr0's reader gone, a writer takes it and gives it back whole. */
	assert_int_equal(lease_give(&t, k[0], 20, &rd, false), 0);
	w.token = 6;
	assert_int_equal(lease_take(&t, k[0], 20, &w, 11 * MS, &left, &last), 0);
	assert_true(last.torn);
	assert_int_equal(lease_give(&t, k[0], 20, &w, false), 0);
	assert_int_equal(lease_torn_in(&t, c1, 12 * MS, buf, sizeof(buf), &len), 1);
	p = torn_entry(buf, "arr2", 0, 65536);
	assert_int_equal((size_t)(p - buf), len);
	assert_int_equal(lease_torn_in(&t, c2, 12 * MS, buf, sizeof(buf), &len), 1);
	p = torn_entry(buf, "arr4", 0, 65536);
	assert_int_equal((size_t)(p - buf), len);
	/* A writer that runs out on a marked array: the union of both ranges. */
	w.token = 7, w.off = 1 << 20, w.len = 4096, w.dur_ms = 1;
	assert_int_equal(lease_take(&t, k[4], 20, &w, 20 * MS, &left, &last), 0);
	assert_true(last.torn);
	assert_int_equal(lease_torn_in(&t, c2, 30 * MS, buf, sizeof(buf), &len), 1);
	p = torn_entry(buf, "arr4", 0, (1 << 20) + 4096);
	assert_int_equal((size_t)(p - buf), len);
	lease_tab_fini(&t);
}

/*
 * Nesting, with keys shaped as service.c's: an object's lease (sub: every
 * key of the object), a dkey's (up: the object's; sub: its arrays) and an
 * array's (up: its dkey's and its object's) each wait while another holds
 * one that covers it or one it covers; other dkeys and objects are not
 * held up. A punch's lease (untorn) marks nothing torn, whether it runs
 * out, its session closes or it is given back torn.
 */
static void test_nest(void **state)
{
	/* object "O", dkeys "d" and "e", array "a": "O|d|a" stands for
	 * cont, oid, u16 + dkey, u16 + akey, written out below. */
	static const char obj[] = "O\0\0\0\0", dk[] = "O\1\0d\0\0", dk2[] = "O\1\0e\0\0",
			  arr[] = "O\1\0d\1\0a", arr2[] = "O\1\0e\1\0a", other[] = "P\1\0d\1\0a";
	struct lease_tab t;
	struct lease_ask ao = {.token = 1, .session = 1, .dur_ms = 100, .len = 1, .untorn = true,
			       .sub = 1};
	struct lease_ask ad = {.token = 2, .session = 2, .dur_ms = 100, .len = 1, .untorn = true,
			       .up = {obj}, .up_len = {5}, .sub = 4};
	struct lease_ask aa = {.token = 3, .session = 3, .dur_ms = 100, .len = 1,
			       .up = {obj, dk}, .up_len = {5, 6}};
	struct lease_ask a2 = {.token = 4, .session = 4, .dur_ms = 100, .len = 1,
			       .up = {obj, dk2}, .up_len = {5, 6}};
	struct lease_ask ax = {.token = 5, .session = 5, .dur_ms = 100, .len = 1};
	uint64_t left = 0;

	(void)state;
	assert_int_equal(lease_tab_init(&t, 16), 0);
	/* The dkey's punch holds: its array waits, told the time left; an
	 * array of another dkey, and another object, do not; nor does the
	 * object's punch get in. */
	assert_int_equal(lease_take(&t, dk, 6, &ad, 0, &left, &last), 0);
	assert_int_equal(lease_take(&t, arr, 7, &aa, 10 * MS, &left, &last), -EBUSY);
	assert_int_equal(left, 90);
	assert_int_equal(lease_take(&t, arr2, 7, &a2, 10 * MS, &left, &last), 0);
	assert_int_equal(lease_take(&t, other, 7, &ax, 10 * MS, &left, &last), 0);
	assert_int_equal(lease_take(&t, obj, 5, &ao, 10 * MS, &left, &last), -EBUSY);
	/* The dkey's punch given back (failed): nothing marked; the array's
	 * writer gets in, untold. */
	assert_int_equal(lease_give(&t, dk, 6, &ad, true), 0);
	assert_int_equal(lease_take(&t, arr, 7, &aa, 11 * MS, &left, &last), 0);
	assert_false(last.torn);
	/* Now the array's writer holds: the dkey's punch waits, and the
	 * object's (for it and for arr2's). */
	ad.token = 6;
	assert_int_equal(lease_take(&t, dk, 6, &ad, 12 * MS, &left, &last), -EBUSY);
	assert_int_equal(lease_take(&t, obj, 5, &ao, 12 * MS, &left, &last), -EBUSY);
	assert_int_equal(lease_give(&t, arr, 7, &aa, false), 0);
	assert_int_equal(lease_take(&t, obj, 5, &ao, 12 * MS, &left, &last), -EBUSY); /* arr2 */
	assert_int_equal(lease_give(&t, arr2, 7, &a2, false), 0);
	/* Only another object's array is held: the object's punch gets in,
	 * and every key under it waits. */
	assert_int_equal(lease_take(&t, obj, 5, &ao, 13 * MS, &left, &last), 0);
	assert_int_equal(lease_take(&t, dk, 6, &ad, 14 * MS, &left, &last), -EBUSY);
	assert_int_equal(lease_take(&t, arr, 7, &aa, 14 * MS, &left, &last), -EBUSY);
	/* It runs out (a punch that died): nothing torn, nothing held up. */
	assert_int_equal(lease_take(&t, arr, 7, &aa, 200 * MS, &left, &last), 0);
	assert_false(last.torn);
	assert_int_equal(lease_give(&t, arr, 7, &aa, false), 0);
	/* Its session closes while it holds it again: nothing torn either. */
	ao.token = 7;
	assert_int_equal(lease_take(&t, obj, 5, &ao, 300 * MS, &left, &last), 0);
	assert_int_equal(lease_drop_session(&t, 1), 1);
	assert_int_equal(lease_take(&t, obj, 5, &ao, 301 * MS, &left, &last), 0);
	assert_false(last.torn);
	assert_int_equal(lease_give(&t, obj, 5, &ao, false), 0);
	/* Arrays torn under a dkey: its punch failing ("torn") leaves their
	 * marks; done whole, it drops them (and only those under it). */
	assert_int_equal(lease_take(&t, arr, 7, &aa, 400 * MS, &left, &last), 0);
	assert_int_equal(lease_give(&t, arr, 7, &aa, true), 0);
	assert_int_equal(lease_take(&t, arr2, 7, &a2, 400 * MS, &left, &last), 0);
	assert_int_equal(lease_give(&t, arr2, 7, &a2, true), 0);
	assert_int_equal(lease_take(&t, dk, 6, &ad, 401 * MS, &left, &last), 0);
	assert_int_equal(lease_give(&t, dk, 6, &ad, true), 0);
	assert_int_equal(lease_take(&t, dk, 6, &ad, 402 * MS, &left, &last), 0);
	assert_int_equal(lease_give(&t, dk, 6, &ad, false), 0);
	assert_int_equal(lease_take(&t, arr, 7, &aa, 403 * MS, &left, &last), 0);
	assert_false(last.torn);
	assert_int_equal(lease_take(&t, arr2, 7, &a2, 403 * MS, &left, &last), 0);
	assert_true(last.torn);
	lease_tab_fini(&t);
}

/*
 * A snapshot taker's mend (holder: its hold's token) passes every hold of
 * the container while its own lasts; a token that names no live hold of
 * this container is no pass, and a punch's lease gets none.
 */
static void test_holder(void **state)
{
	static const uint8_t c1[16] = "container-one..", c2[16] = "container-two..";
	char k1[20];
	struct lease_tab t;
	struct lease_ask w = {.token = 7ull << 32 | 1, .session = 3, .dur_ms = 100, .len = 1};
	uint64_t left = 0;

	(void)state;
	memcpy(k1, c1, 16), memcpy(k1 + 16, "arr1", 4);
	assert_int_equal(lease_tab_init(&t, 16), 0);
	assert_int_equal(lease_hold(&t, c1, 7, 10 * MS, 0), 0);
	/* Its token's high half names the hold, but without the pass it waits. */
	assert_int_equal(lease_take(&t, k1, 20, &w, 1 * MS, &left, &last), -EBUSY);
	w.holder = 7;
	assert_int_equal(lease_take(&t, k1, 20, &w, 1 * MS, &left, &last), 0);
	assert_int_equal(lease_give(&t, k1, 20, &w, false), 0);
	/* A second taker's hold: the first's mend passes it too, and the
	 * second's barrier counts the mend as a writer. */
	assert_int_equal(lease_hold(&t, c1, 8, 10 * MS, 2 * MS), 0);
	assert_int_equal(lease_take(&t, k1, 20, &w, 3 * MS, &left, &last), 0);
	assert_int_equal(lease_held_in(&t, c1, 3 * MS), 1);
	assert_int_equal(lease_give(&t, k1, 20, &w, false), 0);
	/* A pass naming no hold of this container, or one let go, is none. */
	w.holder = 9;
	assert_int_equal(lease_take(&t, k1, 20, &w, 4 * MS, &left, &last), -EBUSY);
	assert_int_equal(lease_hold(&t, c1, 7, 0, 4 * MS), 0);
	w.holder = 7;
	assert_int_equal(lease_take(&t, k1, 20, &w, 4 * MS, &left, &last), -EBUSY);
	/* Another container's hold is no pass here. */
	assert_int_equal(lease_hold(&t, c2, 7, 10 * MS, 4 * MS), 0);
	assert_int_equal(lease_take(&t, k1, 20, &w, 5 * MS, &left, &last), -EBUSY);
	/* A live hold's token passes an array's mend, never a punch's lease. */
	w.holder = 8;
	w.untorn = true;
	assert_int_equal(lease_take(&t, k1, 20, &w, 5 * MS, &left, &last), -EBUSY);
	w.untorn = false;
	assert_int_equal(lease_take(&t, k1, 20, &w, 5 * MS, &left, &last), 0);
	lease_tab_fini(&t);
}

/* A renewal succeeds only while the lease is still the holder's. */
static void test_renew(void **state)
{
	struct lease_tab t;
	struct lease_ask a = {.token = 1, .session = 1, .dur_ms = 100, .len = 4096};

	(void)state;
	assert_int_equal(lease_tab_init(&t, 16), 0);
	assert_int_equal(lease_renew(&t, "w", 1, &a, 0), -ENOENT); /* never taken */
	assert_int_equal(take_range(&t, "w", 1, 0, 4096, 0), 0);
	assert_int_equal(lease_renew(&t, "w", 1, &a, 50 * MS), 0); /* now ends at 150 ms */
	assert_int_equal(take_range(&t, "w", 2, 0, 1, 120 * MS), -EBUSY);
	/* Ran out: renewing fails, though nobody took it meanwhile. */
	assert_int_equal(lease_renew(&t, "w", 1, &a, 150 * MS), -ENOENT);
	/* Taken by another and given back whole: gone, and not ours again. */
	assert_int_equal(take_range(&t, "w", 2, 0, 1, 160 * MS), 0);
	assert_true(last.torn);
	assert_int_equal(give_range(&t, "w", 2, 0, 1, false), 0);
	assert_int_equal(lease_renew(&t, "w", 1, &a, 170 * MS), -ENOENT);
	assert_int_equal(t.n, 0);
	lease_tab_fini(&t);
}

static void test_session(void **state)
{
	struct lease_tab t;
	uint64_t left = 0;
	bool torn;
	char key[16];

	(void)state;
	assert_int_equal(lease_tab_init(&t, 64), 0);
	for (int i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "key-%d", i);
		assert_int_equal(take(&t, key, 100 + i, 1 + i % 2, 1000, 0, &left, &torn), 0);
	}
	assert_int_equal(lease_drop_session(&t, 2), 20);
	assert_int_equal(t.n, 40); /* marked, not forgotten */
	assert_int_equal(lease_drop_session(&t, 2), 0);
	for (int i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "key-%d", i);
		/* Session 2's (odd i) are free and torn; session 1's still held. */
		assert_int_equal(take(&t, key, 999, 3, 1000, 1, &left, &torn), i % 2 ? 0 : -EBUSY);
		assert_int_equal(torn, i % 2 == 1);
	}
	assert_int_equal(lease_drop_session(&t, 7), 0);
	lease_tab_fini(&t);
}

static void test_bad_and_full(void **state)
{
	struct lease_tab t;
	uint64_t left = 0;
	bool torn = false;
	static uint8_t big[LEASE_KEY_MAX + 1];

	(void)state;
	assert_int_equal(lease_tab_init(&t, 2), 0);
	assert_int_equal(take(&t, "a", 0, 1, 10, 0, &left, &torn), -EINVAL);
	assert_int_equal(lease_take(&t, "a", 0, &(struct lease_ask){.token = 1, .dur_ms = 10}, 0,
				    &left, &last),
			 -EINVAL);
	assert_int_equal(take(&t, "a", 1, 1, 0, 0, &left, &torn), -EINVAL);
	assert_int_equal(lease_take(&t, big, sizeof(big), &(struct lease_ask){.token = 1, .dur_ms = 10},
				    0, &left, &last),
			 -EINVAL);
	assert_int_equal(give(&t, big, sizeof(big), 1, false), -ENOENT);
	assert_int_equal(give(&t, "a", 1, 0, false), -ENOENT);
	assert_int_equal(take(&t, "a", 1, 1, 10, 0, &left, &torn), 0);
	assert_int_equal(take(&t, "b", 1, 1, 20, 0, &left, &torn), 0);
	/* Full: two held. Once "a" ran out (a torn mark, which does not
	 * count), a third key can be held; then the table is full again. */
	assert_int_equal(take(&t, "c", 1, 1, 10, 5 * MS, &left, &torn), -EAGAIN);
	assert_int_equal(take(&t, "c", 1, 1, 10, 10 * MS, &left, &torn), 0);
	assert_int_equal(t.n, 3);
	assert_int_equal(t.held, 2);
	assert_int_equal(take(&t, "a", 2, 1, 10, 11 * MS, &left, &torn), -EAGAIN);
	assert_int_equal(give(&t, "b", 1, 1, false), 0);
	assert_int_equal(take(&t, "a", 2, 1, 10, 12 * MS, &left, &torn), 0);
	assert_true(torn);
	assert_int_equal(t.held, 2);
	assert_int_equal(t.n, 2);
	lease_tab_fini(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_take_give),
		cmocka_unit_test(test_expiry_tears),
		cmocka_unit_test(test_torn_range),
		cmocka_unit_test(test_late_torn),
		cmocka_unit_test(test_reader),
		cmocka_unit_test(test_hold),
		cmocka_unit_test(test_torn_in),
		cmocka_unit_test(test_nest),
		cmocka_unit_test(test_holder),
		cmocka_unit_test(test_renew),
		cmocka_unit_test(test_session),
		cmocka_unit_test(test_bad_and_full),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
