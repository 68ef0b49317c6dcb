/*
 * Tests for the engine's B+tree index (src/engine/btree.c): behaviour on an
 * empty tree, replacement, a long random run checked against a sorted
 * reference, bulk loading and mass deletion (memory), cursors at the edges,
 * and allocation failure at every allocation an operation makes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/btree.h"

/* Allocations succeed this many more times, then fail; -1: never fail. */
static long allocs_left = -1;

void *bt_malloc(size_t size)
{
	if (allocs_left == 0)
		return NULL;
	if (allocs_left > 0)
		allocs_left--;
	return malloc(size);
}

struct item {
	uint32_t len;
	uint32_t serial;
	uint8_t key[64];
};

static const uint8_t *item_key(const void *p, uint32_t *len)
{
	const struct item *it = p;

	*len = it->len;
	return it->key;
}

static struct item *item_new(const void *key, uint32_t len, uint32_t serial)
{
	struct item *it = malloc(sizeof(*it));

	assert_non_null(it);
	assert_true(len <= sizeof(it->key));
	it->len = len;
	it->serial = serial;
	memcpy(it->key, key, len);
	return it;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* 0..n-1 in random order. */
static size_t *shuffled(size_t n)
{
	size_t *a = malloc(n * sizeof(*a));

	assert_non_null(a);
	for (size_t i = 0; i < n; i++)
		a[i] = i;
	for (size_t i = n; i > 1; i--) {
		size_t j = rnd() % i, x = a[i - 1];

		a[i - 1] = a[j];
		a[j] = x;
	}
	return a;
}

static struct bt *tree_new(void)
{
	struct bt *t = NULL;

	assert_int_equal(bt_create(item_key, &t), 0);
	assert_non_null(t);
	return t;
}

static int key_cmp(const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);

	if (c)
		return c;
	return alen < blen ? -1 : alen > blen;
}

static int item_cmp_val(const void *a, const void *b)
{
	const struct item *x = a, *y = b;

	return key_cmp(x->key, x->len, y->key, y->len);
}

static void test_empty(void **state)
{
	struct bt *t = tree_new();
	struct bt_cur c;

	assert_int_equal(bt_count(t), 0);
	assert_int_equal(bt_bytes(t), 0);
	assert_null(bt_lookup(t, "a", 1));
	assert_null(bt_lookup(t, "", 0));
	assert_null(bt_remove(t, "a", 1));
	assert_null(bt_first(t, &c));
	assert_null(bt_next(&c));
	assert_null(bt_seek(t, &c, "", 0));
	assert_null(bt_next(&c));
	assert_int_equal(bt_check(t), 0);
	bt_destroy(t, NULL);
	bt_destroy(NULL, NULL);
}

static void test_bad_args(void **state)
{
	struct bt *t = NULL;
	struct item *a = item_new("k", 1, 1), *b = item_new("k", 1, 2);
	void *old = a;

	assert_int_equal(bt_create(NULL, &t), -EFAULT);
	assert_null(t);
	assert_int_equal(bt_create(item_key, NULL), -EFAULT);
	t = tree_new();
	assert_int_equal(bt_insert(t, NULL, &old), -EINVAL);
	assert_null(old);
	assert_int_equal(bt_insert(t, a, NULL), 0);
	/* Without old the caller promised a new key: refuse rather than lose a. */
	assert_int_equal(bt_insert(t, b, NULL), -EEXIST);
	assert_ptr_equal(bt_lookup(t, "k", 1), a);
	assert_int_equal(bt_count(t), 1);
	bt_destroy(t, free);
	free(b);
}

static void test_insert_lookup_replace(void **state)
{
	static const char *keys[] = {"b", "a", "abc", "ab", "", "ab\0", "\xff", "abd"};
	static const uint32_t lens[] = {1, 1, 3, 2, 0, 3, 1, 3};
	static const size_t order[] = {4, 1, 3, 5, 2, 7, 0, 6};
	const size_t n = sizeof(keys) / sizeof(keys[0]);
	struct item *items[8], *repl;
	struct bt *t = tree_new();
	struct bt_cur c;
	void *old = &old, *it;
	size_t i;

	for (i = 0; i < n; i++) {
		items[i] = item_new(keys[i], lens[i], (uint32_t)i);
		assert_int_equal(bt_insert(t, items[i], &old), 0);
		assert_null(old);
		assert_int_equal(bt_count(t), i + 1);
	}
	for (i = 0; i < n; i++)
		assert_ptr_equal(bt_lookup(t, keys[i], lens[i]), items[i]);
	assert_ptr_equal(bt_lookup(t, NULL, 0), items[4]);
	assert_ptr_equal(bt_seek(t, &c, NULL, 0), items[4]);
	assert_null(bt_lookup(t, "abcd", 4));
	assert_null(bt_lookup(t, "ab\0\0", 4));
	assert_null(bt_lookup(t, "c", 1));

	repl = item_new("ab", 2, 100);
	assert_int_equal(bt_insert(t, repl, &old), 0);
	assert_ptr_equal(old, items[3]);
	free(old);
	items[3] = repl;
	assert_int_equal(bt_count(t), n);
	assert_ptr_equal(bt_lookup(t, "ab", 2), repl);

	/* "" a ab ab\0 abc abd b \xff: a prefix sorts before its extensions. */
	it = bt_first(t, &c);
	for (i = 0; i < n; i++, it = bt_next(&c))
		assert_ptr_equal(it, items[order[i]]);
	assert_null(it);
	assert_int_equal(bt_check(t), 0);
	bt_destroy(t, free);
}

/*
 * The random run's reference: every key the run may use, sorted and unique,
 * with the item the tree should hold for it (NULL: absent).
 */
struct ref {
	struct item *keys; /* sorted candidate keys */
	struct item **held;
	size_t n, present;
};

/* Random keys of 1..64 bytes drawn so that many share long prefixes or are prefixes of others. */
static void ref_init(struct ref *r, size_t want)
{
	static const uint8_t alphabet[] = {0x00, 0x01, 'a', 'b', 0x7f, 0xfe, 0xff};
	uint8_t stems[32][40];
	uint32_t stem_len[32];
	size_t i, j;

	for (i = 0; i < 32; i++) {
		stem_len[i] = (uint32_t)(rnd() % 40);
		for (j = 0; j < stem_len[i]; j++)
			stems[i][j] = i < 16 ? (uint8_t)rnd() : alphabet[rnd() % sizeof(alphabet)];
	}
	r->keys = calloc(want, sizeof(*r->keys));
	assert_non_null(r->keys);
	for (i = 0; i < want; i++) {
		struct item *k = &r->keys[i];
		unsigned s = rnd() % 32;

		if (i > 0 && rnd() % 4 == 0) {
			/* A prefix of an earlier key, or an earlier key plus one byte. */
			*k = r->keys[rnd() % i];
			if (k->len > 1 && rnd() % 2)
				k->len = 1 + (uint32_t)(rnd() % (k->len - 1));
			else if (k->len < 64)
				k->key[k->len++] = alphabet[rnd() % sizeof(alphabet)];
			continue;
		}
		memcpy(k->key, stems[s], stem_len[s]);
		k->len = stem_len[s] + 1 + (uint32_t)(rnd() % (64 - stem_len[s]));
		for (j = stem_len[s]; j < k->len; j++)
			k->key[j] = rnd() % 2 ? alphabet[rnd() % sizeof(alphabet)] : (uint8_t)rnd();
	}
	qsort(r->keys, want, sizeof(*r->keys), item_cmp_val);
	for (i = j = 0; i < want; i++)
		if (j == 0 || item_cmp_val(&r->keys[j - 1], &r->keys[i]) != 0)
			r->keys[j++] = r->keys[i];
	r->n = j;
	r->held = calloc(r->n, sizeof(*r->held));
	assert_non_null(r->held);
	r->present = 0;
}

/* Index of the first candidate key >= key. */
static size_t ref_lower(const struct ref *r, const uint8_t *key, uint32_t len)
{
	size_t lo = 0, hi = r->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (key_cmp(r->keys[mid].key, r->keys[mid].len, key, len) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The reference's item at or after index i, or NULL; *i moves to it. */
static struct item *ref_from(const struct ref *r, size_t *i)
{
	while (*i < r->n && !r->held[*i])
		(*i)++;
	return *i < r->n ? r->held[*i] : NULL;
}

static void ref_verify_all(const struct ref *r, struct bt *t)
{
	struct bt_cur c;
	void *it = bt_first(t, &c);
	size_t i = 0;

	assert_int_equal(bt_check(t), 0);
	assert_int_equal(bt_count(t), r->present);
	for (;; i++) {
		struct item *want = ref_from(r, &i);

		assert_ptr_equal(it, want);
		if (!want)
			break;
		it = bt_next(&c);
	}
	assert_null(bt_next(&c));
}

/* Seek to a random key (a candidate, or a fresh one) and compare a few steps. */
static void ref_verify_seek(const struct ref *r, struct bt *t)
{
	struct item probe;
	struct bt_cur c;
	size_t i;
	void *it;

	if (rnd() % 2) {
		probe = r->keys[rnd() % r->n];
		if (rnd() % 2 && probe.len > 1)
			probe.len--;
	} else {
		probe.len = (uint32_t)(rnd() % 65);
		for (i = 0; i < probe.len; i++)
			probe.key[i] = (uint8_t)rnd();
	}
	i = ref_lower(r, probe.key, probe.len);
	it = bt_seek(t, &c, probe.key, probe.len);
	for (int step = 0; step < 8; step++, i++) {
		struct item *want = ref_from(r, &i);

		assert_ptr_equal(it, want);
		if (!want) {
			assert_null(c.leaf);
			break;
		}
		it = bt_next(&c);
	}
}

static void test_random_vs_reference(void **state)
{
	struct bt *t = tree_new();
	struct ref r;
	uint32_t serial = 0;
	size_t i, *order;

	ref_init(&r, 60000);
	for (int op = 0; op < 200000; op++) {
		/* Alternate growing and shrinking phases so that nodes split and merge at every level. */
		unsigned grow = (op / 25000) % 2 == 0 ? 60 : 15, dice = rnd() % 100;
		size_t k = rnd() % r.n;
		struct item *key = &r.keys[k];

		if (dice < grow) {
			struct item *it = item_new(key->key, key->len, ++serial);
			void *old = it;

			assert_int_equal(bt_insert(t, it, &old), 0);
			assert_ptr_equal(old, r.held[k]);
			r.present += !old;
			free(old);
			r.held[k] = it;
		} else if (dice < 75) {
			void *got = bt_remove(t, key->key, key->len);

			assert_ptr_equal(got, r.held[k]);
			r.present -= !!got;
			free(got);
			r.held[k] = NULL;
		} else if (dice < 90) {
			assert_ptr_equal(bt_lookup(t, key->key, key->len), r.held[k]);
		} else {
			ref_verify_seek(&r, t);
		}
		if (op % 10000 == 9999)
			ref_verify_all(&r, t);
	}
	ref_verify_all(&r, t);

	/* Empty it in random order: every node must go. */
	order = shuffled(r.n);
	for (i = 0; i < r.n; i++) {
		size_t k = order[i];

		if (r.held[k]) {
			assert_ptr_equal(bt_remove(t, r.keys[k].key, r.keys[k].len), r.held[k]);
			free(r.held[k]);
			r.held[k] = NULL;
			r.present--;
		}
	}
	ref_verify_all(&r, t);
	assert_int_equal(bt_bytes(t), 0);
	bt_destroy(t, free);
	free(order);
	free(r.held);
	free(r.keys);
}

/* Engine-like keys: a shared 8-byte prefix, then a big-endian number. */
static void num_key(struct item *it, uint64_t v)
{
	memcpy(it->key, "lode\0\0\0\1", 8);
	for (int b = 0; b < 8; b++)
		it->key[8 + b] = (uint8_t)(v >> (56 - 8 * b));
	it->len = 16;
}

/* A tree of n items with keys num_key(0..n-1), inserted in the given order (NULL: ascending). */
static struct bt *num_tree(struct item *items, size_t n, const size_t *order)
{
	struct bt *t = tree_new();

	for (size_t i = 0; i < n; i++) {
		size_t v = order ? order[i] : i;
		void *old = &old;

		num_key(&items[v], v);
		assert_int_equal(bt_insert(t, &items[v], &old), 0);
		assert_null(old);
	}
	assert_int_equal(bt_count(t), n);
	assert_int_equal(bt_check(t), 0);
	return t;
}

static void test_sequential_bulk_load(void **state)
{
	const size_t n = 1000000;
	struct item *items = calloc(n, sizeof(*items));
	struct item probe;
	struct bt_cur c;
	struct bt *t;
	size_t i;
	void *it;

	assert_non_null(items);
	t = num_tree(items, n, NULL);
	/* Appends keep the left node full: the tree is about as small as it can be. */
	assert_true((double)bt_bytes(t) / (double)n < 16.0);
	print_message("sequential load: %.2f bytes per item\n", (double)bt_bytes(t) / (double)n);

	for (i = 0; i < n; i += 9973) {
		num_key(&probe, i);
		assert_ptr_equal(bt_lookup(t, probe.key, probe.len), &items[i]);
	}
	for (i = 0, it = bt_first(t, &c); it; i++, it = bt_next(&c))
		assert_ptr_equal(it, &items[i]);
	assert_int_equal(i, n);

	/* Deleting from the front in order merges the leftmost nodes over and over. */
	for (i = 0; i < n; i++) {
		num_key(&probe, i);
		assert_ptr_equal(bt_remove(t, probe.key, probe.len), &items[i]);
		if (i == n / 2)
			assert_int_equal(bt_check(t), 0);
	}
	assert_int_equal(bt_count(t), 0);
	assert_int_equal(bt_bytes(t), 0);
	assert_null(bt_first(t, &c));
	bt_destroy(t, NULL);
	free(items);
}

static void test_mass_deletion(void **state)
{
	const size_t n = 200000, keep = n / 100;
	struct item *items = calloc(n, sizeof(*items));
	size_t *order = shuffled(n), i;
	struct item probe;
	struct bt *t;

	assert_non_null(items);
	t = num_tree(items, n, order);
	for (i = 0; i < n - keep; i++) {
		num_key(&probe, order[i]);
		assert_ptr_equal(bt_remove(t, probe.key, probe.len), &items[order[i]]);
		assert_null(bt_remove(t, probe.key, probe.len));
	}
	assert_int_equal(bt_check(t), 0);
	assert_int_equal(bt_count(t), keep);
	/* Nodes stay at least a quarter full: well under 100 bytes per survivor. */
	assert_true(bt_bytes(t) < keep * 100);
	for (i = n - keep; i < n; i++) {
		num_key(&probe, order[i]);
		assert_ptr_equal(bt_lookup(t, probe.key, probe.len), &items[order[i]]);
		assert_ptr_equal(bt_remove(t, probe.key, probe.len), &items[order[i]]);
	}
	assert_int_equal(bt_count(t), 0);
	assert_int_equal(bt_bytes(t), 0);
	assert_int_equal(bt_check(t), 0);

	/* The emptied tree is as good as new. */
	num_key(&items[0], 0);
	assert_int_equal(bt_insert(t, &items[0], NULL), 0);
	assert_ptr_equal(bt_lookup(t, items[0].key, items[0].len), &items[0]);
	bt_destroy(t, NULL);
	free(order);
	free(items);
}

static void test_seek_edges(void **state)
{
	const size_t n = 5000;
	struct item *items = calloc(n, sizeof(*items));
	struct item probe;
	struct bt_cur c;
	struct bt *t;

	assert_non_null(items);
	t = num_tree(items, n, NULL);

	/* Past the last key: NULL, and the cursor stays at the end. */
	num_key(&probe, n);
	assert_null(bt_seek(t, &c, probe.key, probe.len));
	assert_null(bt_next(&c));
	assert_null(bt_next(&c));
	assert_null(bt_seek(t, &c, "\xff", 1));
	assert_null(bt_next(&c));
	/* A longer key than the last sorts after it. */
	num_key(&probe, n - 1);
	probe.key[probe.len++] = 0;
	assert_null(bt_seek(t, &c, probe.key, probe.len));

	/* Exactly the last key, then the end. */
	num_key(&probe, n - 1);
	assert_ptr_equal(bt_seek(t, &c, probe.key, probe.len), &items[n - 1]);
	assert_null(bt_next(&c));

	/* Before the first key, and a prefix of every key. */
	assert_ptr_equal(bt_seek(t, &c, "", 0), &items[0]);
	assert_ptr_equal(bt_seek(t, &c, "lode", 4), &items[0]);
	assert_ptr_equal(bt_next(&c), &items[1]);

	/* Between two keys: a prefix extended with a byte lands on the next key. */
	num_key(&probe, 2999);
	probe.key[probe.len++] = 0;
	assert_ptr_equal(bt_seek(t, &c, probe.key, probe.len), &items[3000]);
	assert_ptr_equal(bt_next(&c), &items[3001]);
	bt_destroy(t, NULL);
	free(items);
}

static size_t items_freed;

static void item_free(void *it)
{
	items_freed++;
	free(it);
}

static void test_destroy_frees_items(void **state)
{
	struct bt *t = tree_new();
	size_t *order = shuffled(3000);

	for (size_t i = 0; i < 3000; i++) {
		struct item probe;

		num_key(&probe, order[i]);
		assert_int_equal(bt_insert(t, item_new(probe.key, probe.len, 0), NULL), 0);
	}
	items_freed = 0;
	bt_destroy(t, item_free);
	assert_int_equal(items_freed, 3000);
	free(order);
}

/*
 * Fail each allocation an insert makes in turn: every failure returns -ENOMEM
 * with the tree as it was. Removals that cannot allocate still remove.
 */
static void test_out_of_memory(void **state)
{
	const size_t n = 20000;
	struct item *items = calloc(n, sizeof(*items));
	size_t *order = shuffled(n), i;
	unsigned failures = 0;
	struct item probe;
	struct bt *t = tree_new();

	assert_non_null(items);
	for (i = 0; i < n; i++) {
		size_t v = order[i];
		uint64_t bytes = bt_bytes(t);
		int rc;

		num_key(&items[v], v);
		for (long ok = 0;; ok++) {
			allocs_left = ok;
			rc = bt_insert(t, &items[v], NULL);
			allocs_left = -1;
			if (rc == 0)
				break;
			assert_int_equal(rc, -ENOMEM);
			assert_int_equal(bt_count(t), i);
			assert_int_equal(bt_bytes(t), bytes);
			assert_null(bt_lookup(t, items[v].key, items[v].len));
			failures++;
		}
		if (i % 2500 == 0)
			assert_int_equal(bt_check(t), 0);
	}
	assert_true(failures > n / 64); /* splits did happen, and were refused */
	assert_int_equal(bt_check(t), 0);

	/* No memory at all: removals still succeed and the tree stays valid. */
	allocs_left = 0;
	for (i = 0; i < n / 2; i++) {
		num_key(&probe, order[i]);
		assert_ptr_equal(bt_remove(t, probe.key, probe.len), &items[order[i]]);
	}
	allocs_left = -1;
	assert_int_equal(bt_check(t), 0);
	assert_int_equal(bt_count(t), n - n / 2);
	for (i = n / 2; i < n; i++) {
		num_key(&probe, order[i]);
		assert_ptr_equal(bt_remove(t, probe.key, probe.len), &items[order[i]]);
	}
	assert_int_equal(bt_bytes(t), 0);

	/* An empty tree needs a first node: that can fail too. */
	allocs_left = 0;
	assert_int_equal(bt_insert(t, &items[0], NULL), -ENOMEM);
	allocs_left = -1;
	assert_int_equal(bt_count(t), 0);
	assert_int_equal(bt_bytes(t), 0);
	bt_destroy(t, NULL);
	free(order);
	free(items);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_bad_args),
		cmocka_unit_test(test_insert_lookup_replace),
		cmocka_unit_test(test_random_vs_reference),
		cmocka_unit_test(test_sequential_bulk_load),
		cmocka_unit_test(test_mass_deletion),
		cmocka_unit_test(test_seek_edges),
		cmocka_unit_test(test_destroy_frees_items),
		cmocka_unit_test(test_out_of_memory),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
