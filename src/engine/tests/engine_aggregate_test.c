/*
 * Aggregation of byte arrays: versions only the latest can see are merged
 * into fresh extents, so the shadowed parts of partly overwritten extents
 * are freed; what snapshots see is left exactly as it was; merging twice
 * changes nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/engine.h"
#include "lode/errno.h"

#define MIB (1u << 20)
#define KIB (1u << 10)

struct fix {
	char path[256];
	struct eng_tgt_opts o;
	struct eng_target *t;
	struct lode_uuid cont;
	struct eng_key k;
	uint8_t *a, *b, *got;
};

static int setup(void **state, enum eng_mode mode)
{
	struct fix *f = calloc(1, sizeof(*f));
	const char *tmp = getenv("LODE_TEST_TMP");
	char cmd[600];

	assert_non_null(f);
	snprintf(f->path, sizeof(f->path), "%s/lode-agg-%d-%d", mode == ENG_MODE_RAM ? "/dev/shm" : tmp ? tmp : "/tmp",
		 (int)getpid(), (int)mode);
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s' && rm -rf '%s'", f->path, f->path);
	assert_int_equal(system(cmd), 0);
	f->o.path = f->path;
	f->o.mode = mode;
	assert_int_equal(eng_tgt_open(&f->o, &f->t), 0);
	memcpy(f->cont.b, "agg", 3);
	assert_int_equal(eng_cont_create(f->t, &f->cont), 0);
	f->k = (struct eng_key){.cont = &f->cont, .oid = lode_oid_make(LODE_OT_ARRAY, 0, 0, 7),
				.dkey = "chunk0", .dkey_len = 6, .akey = "data", .akey_len = 4};
	f->a = malloc(MIB);
	f->b = malloc(MIB);
	f->got = malloc(MIB);
	assert_true(f->a && f->b && f->got);
	for (uint32_t i = 0; i < MIB; i++) {
		f->a[i] = (uint8_t)(i * 31 + 7);
		f->b[i] = (uint8_t)(i * 17 + 101);
	}
	*state = f;
	return 0;
}

static int setup_ram(void **state)
{
	return setup(state, ENG_MODE_RAM);
}

static int setup_disk(void **state)
{
	return setup(state, ENG_MODE_DISK);
}

static int teardown(void **state)
{
	struct fix *f = *state;
	char cmd[600];

	if (f->t)
		eng_tgt_close(f->t);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->path);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", f->path);
	free(f->a);
	free(f->b);
	free(f->got);
	free(f);
	return 0;
}

static uint64_t used(struct fix *f)
{
	struct eng_stats st;

	assert_int_equal(eng_tgt_stats(f->t, &st), 0);
	return st.extent_used;
}

static uint64_t records(struct fix *f)
{
	struct eng_stats st;

	assert_int_equal(eng_tgt_stats(f->t, &st), 0);
	return st.records;
}

/* [0, 1M) of A at epoch 1, then B over [4K, 8K) at epoch 2. */
static void write_overlap(struct fix *f)
{
	assert_int_equal(eng_arr_update(f->t, &f->k, 1, 0, f->a, MIB, NULL, NULL), 0);
	assert_int_equal(eng_arr_update(f->t, &f->k, 2, 4 * KIB, f->b + 4 * KIB, 4 * KIB, NULL, NULL), 0);
}

static void check_mixed(struct fix *f, lode_epoch_t e)
{
	memset(f->got, 0xee, MIB);
	assert_int_equal(eng_arr_fetch(f->t, &f->k, e, 0, f->got, MIB, NULL, NULL), 0);
	assert_memory_equal(f->got, f->a, 4 * KIB);
	assert_memory_equal(f->got + 4 * KIB, f->b + 4 * KIB, 4 * KIB);
	assert_memory_equal(f->got + 8 * KIB, f->a + 8 * KIB, MIB - 8 * KIB);
}

static void test_partial_overwrite_is_merged(void **state)
{
	struct fix *f = *state;
	uint64_t recs;

	write_overlap(f);
	assert_int_equal(used(f), MIB + 4 * KIB);
	assert_int_equal(eng_aggregate(f->t, &f->cont, LODE_EPOCH_MAX), 0);
	/* one merged 1 MiB extent; the shadowed 4 KiB of the first is gone */
	assert_int_equal(used(f), MIB);
	check_mixed(f, LODE_EPOCH_MAX);
	check_mixed(f, 2);
	/* aggregating again finds nothing to gain */
	recs = records(f);
	assert_int_equal(eng_aggregate(f->t, &f->cont, LODE_EPOCH_MAX), 0);
	assert_int_equal(used(f), MIB);
	assert_int_equal(records(f), recs);
	/* and it all survives a restart */
	assert_int_equal(eng_tgt_close(f->t), 0);
	f->t = NULL;
	assert_int_equal(eng_tgt_open(&f->o, &f->t), 0);
	assert_int_equal(used(f), MIB);
	check_mixed(f, LODE_EPOCH_MAX);
}

/*
 * Whole overwrites: only the newest version shows, so aggregation removes
 * the older ones and copies nothing (no new update is flushed for a merged
 * extent).
 */
static void test_whole_overwrite_is_not_copied(void **state)
{
	struct fix *f = *state;
	struct eng_stats before, after;

	assert_int_equal(eng_arr_update(f->t, &f->k, 1, 0, f->b, MIB, NULL, NULL), 0);
	assert_int_equal(eng_arr_update(f->t, &f->k, 2, 0, f->b, MIB, NULL, NULL), 0);
	assert_int_equal(eng_arr_update(f->t, &f->k, 3, 0, f->a, MIB, NULL, NULL), 0);
	assert_int_equal(used(f), 3 * MIB);
	assert_int_equal(eng_tgt_stats(f->t, &before), 0);
	assert_int_equal(eng_aggregate(f->t, &f->cont, LODE_EPOCH_MAX), 0);
	assert_int_equal(eng_tgt_stats(f->t, &after), 0);
	assert_int_equal(after.extent_used, MIB);
	assert_true(after.flushed_updates - before.flushed_updates <= 1); /* the removal, no merged extent */
	assert_true(after.records < before.records);
	memset(f->got, 0, MIB);
	assert_int_equal(eng_arr_fetch(f->t, &f->k, LODE_EPOCH_MAX, 0, f->got, MIB, NULL, NULL), 0);
	assert_memory_equal(f->got, f->a, MIB);
}

static void test_snapshot_view_is_kept(void **state)
{
	struct fix *f = *state;

	assert_int_equal(eng_arr_update(f->t, &f->k, 1, 0, f->a, MIB, NULL, NULL), 0);
	assert_int_equal(eng_snap_create(f->t, &f->cont, 1), 0);
	assert_int_equal(eng_arr_update(f->t, &f->k, 2, 4 * KIB, f->b + 4 * KIB, 4 * KIB, NULL, NULL), 0);
	assert_int_equal(eng_aggregate(f->t, &f->cont, LODE_EPOCH_MAX), 0);
	/* the snapshot needs all of epoch 1: nothing can go */
	assert_int_equal(used(f), MIB + 4 * KIB);
	memset(f->got, 0, MIB);
	assert_int_equal(eng_arr_fetch(f->t, &f->k, 1, 0, f->got, MIB, NULL, NULL), 0);
	assert_memory_equal(f->got, f->a, MIB);
	check_mixed(f, LODE_EPOCH_MAX);
	/* once the snapshot is gone, the merge happens */
	assert_int_equal(eng_snap_destroy(f->t, &f->cont, 1), 0);
	assert_int_equal(eng_aggregate(f->t, &f->cont, LODE_EPOCH_MAX), 0);
	assert_int_equal(used(f), MIB);
	check_mixed(f, LODE_EPOCH_MAX);
}

static void test_punched_hole_stays_a_hole(void **state)
{
	struct fix *f = *state;

	assert_int_equal(eng_arr_update(f->t, &f->k, 1, 0, f->a, MIB, NULL, NULL), 0);
	assert_int_equal(eng_arr_punch(f->t, &f->k, 2, 256 * KIB, 256 * KIB, NULL, NULL), 0);
	assert_int_equal(eng_aggregate(f->t, &f->cont, LODE_EPOCH_MAX), 0);
	/* two merged extents around the hole: 768 KiB kept */
	assert_int_equal(used(f), 768 * KIB);
	memset(f->got, 0xee, MIB);
	assert_int_equal(eng_arr_fetch(f->t, &f->k, LODE_EPOCH_MAX, 0, f->got, MIB, NULL, NULL), 0);
	assert_memory_equal(f->got, f->a, 256 * KIB);
	for (uint32_t i = 256 * KIB; i < 512 * KIB; i++)
		assert_int_equal(f->got[i], 0);
	assert_memory_equal(f->got + 512 * KIB, f->a + 512 * KIB, 512 * KIB);
}

static void test_hi_bound_leaves_newer_alone(void **state)
{
	struct fix *f = *state;

	write_overlap(f);
	/* hi = 1: only epoch 1 is history; epoch 2 is newer than the bound */
	assert_int_equal(eng_aggregate(f->t, &f->cont, 1), 0);
	assert_int_equal(used(f), MIB + 4 * KIB);
	check_mixed(f, LODE_EPOCH_MAX);
	memset(f->got, 0, MIB);
	assert_int_equal(eng_arr_fetch(f->t, &f->k, 1, 0, f->got, MIB, NULL, NULL), 0);
	assert_memory_equal(f->got, f->a, MIB);
}

/* Reads of the three dkeys after eng_dkey_drop of chunk0 and a write beneath. */
static void check_dropped(struct fix *f, const struct eng_key *near, const struct eng_key *other)
{
	uint8_t sv[8];
	uint32_t len = 0;
	struct eng_key meta = f->k;

	meta.akey = "meta";
	meta.akey_len = 4;
	assert_int_equal(eng_sv_fetch(f->t, &meta, LODE_EPOCH_MAX, sv, sizeof(sv), &len, NULL, NULL),
			 -ENOENT);
	/* the copy at epoch 1 is what reads see: no old punch or version hides it */
	memset(f->got, 0xee, 64 * KIB);
	assert_int_equal(eng_arr_fetch(f->t, &f->k, LODE_EPOCH_MAX, 0, f->got, 64 * KIB, NULL, NULL),
			 0);
	assert_memory_equal(f->got, f->b, 64 * KIB);
	memset(f->got, 0xee, 8 * KIB);
	assert_int_equal(eng_arr_fetch(f->t, &f->k, LODE_EPOCH_MAX, 64 * KIB, f->got, 8 * KIB, NULL,
				       NULL),
			 0);
	for (unsigned i = 0; i < 8 * KIB; i++)
		assert_int_equal(f->got[i], 0); /* the old 1 MiB version is gone */
	for (int i = 0; i < 2; i++) {
		memset(f->got, 0xee, 64 * KIB);
		assert_int_equal(eng_arr_fetch(f->t, i ? other : near, LODE_EPOCH_MAX, 0, f->got,
					       64 * KIB, NULL, NULL),
				 0);
		assert_memory_equal(f->got, f->a, 64 * KIB);
	}
}

/* Whether the dkey of k is among its object's dkeys listed at epoch (or,
 * akey, k's akey among its dkey's akeys). */
static bool key_listed(struct fix *f, const struct eng_key *k, lode_epoch_t epoch, bool akey)
{
	struct eng_anchor an = ENG_ANCHOR_INIT;
	const void *want = akey ? k->akey : k->dkey;
	uint32_t want_len = akey ? k->akey_len : k->dkey_len;
	uint8_t buf[4096];
	bool found = false;

	while (!an.eof && !found) {
		int n = akey ? eng_akey_list(f->t, k, epoch, &an, buf, sizeof(buf))
			     : eng_dkey_list(f->t, k, epoch, &an, buf, sizeof(buf));
		size_t at = 0;

		assert_true(n >= 0);
		for (int i = 0; i < n; i++) {
			uint16_t len = (uint16_t)(buf[at] | buf[at + 1] << 8);

			found |= len == want_len && memcmp(buf + at + 2, want, len) == 0;
			at += 2 + (size_t)len;
		}
	}
	return found;
}

static bool dkey_listed(struct fix *f, const struct eng_key *k, lode_epoch_t epoch)
{
	return key_listed(f, k, epoch, false);
}

/*
 * eng_dkey_drop: every version and punch of one dkey goes, records and
 * space, while dkeys beside it (one whose name extends it) stay; a write
 * at an epoch below the dropped ones (a rebuild copy) is then what reads
 * see, and so after a restart.
 */
static void test_dkey_drop(void **state)
{
	struct fix *f = *state;
	struct eng_key near = f->k, other = f->k, meta = f->k;
	uint64_t r0, u0;

	near.dkey = "chunk0x";
	near.dkey_len = 7;
	other.dkey = "chunk1";
	other.dkey_len = 6;
	meta.akey = "meta";
	meta.akey_len = 4;
	write_overlap(f);
	assert_int_equal(eng_sv_update(f->t, &meta, 5, "old", 3, NULL, NULL), 0);
	assert_int_equal(eng_dkey_punch(f->t, &f->k, 30, NULL, NULL), 0);
	assert_int_equal(eng_arr_update(f->t, &near, 3, 0, f->a, 64 * KIB, NULL, NULL), 0);
	assert_int_equal(eng_arr_update(f->t, &other, 3, 0, f->a, 64 * KIB, NULL, NULL), 0);
	/* Punched, it is not listed, but for the reclaim's walk (ENG_EPOCH_ANY),
	 * which must find its punch to remove it. */
	assert_false(dkey_listed(f, &f->k, LODE_EPOCH_MAX));
	assert_true(dkey_listed(f, &f->k, ENG_EPOCH_ANY));
	assert_false(key_listed(f, &meta, LODE_EPOCH_MAX, true));
	assert_true(key_listed(f, &meta, ENG_EPOCH_ANY, true));
	assert_true(dkey_listed(f, &other, LODE_EPOCH_MAX));
	r0 = records(f);
	u0 = used(f);
	assert_int_equal(eng_dkey_drop(f->t, &f->k), 0);
	assert_false(dkey_listed(f, &f->k, ENG_EPOCH_ANY));
	assert_true(dkey_listed(f, &near, ENG_EPOCH_ANY));
	assert_true(records(f) <= r0 - 4); /* two extents, a value, a punch */
	assert_true(used(f) <= u0 - MIB);
	assert_int_equal(eng_arr_fetch(f->t, &f->k, 2, 0, f->got, 4 * KIB, NULL, NULL), -ENOENT);
	assert_int_equal(eng_arr_fetch(f->t, &f->k, LODE_EPOCH_MAX, 0, f->got, 4 * KIB, NULL, NULL),
			 -ENOENT);
	assert_int_equal(eng_arr_update(f->t, &f->k, 1, 0, f->b, 64 * KIB, NULL, NULL), 0);
	check_dropped(f, &near, &other);
	assert_int_equal(eng_tgt_close(f->t), 0);
	f->t = NULL;
	assert_int_equal(eng_tgt_open(&f->o, &f->t), 0);
	check_dropped(f, &near, &other);
	/* a dkey with nothing here, and bad keys */
	assert_int_equal(eng_dkey_drop(f->t, &other), 0);
	assert_int_equal(eng_dkey_drop(f->t, &other), 0);
	other.dkey_len = 0;
	assert_int_equal(eng_dkey_drop(f->t, &other), -LODE_EKEYEMPTY);
}

/* Value of dkey d (akey "v") at epoch into buf: its length, or an error. */
static int sv_at(struct fix *f, const char *d, lode_epoch_t epoch, char *buf)
{
	struct eng_key k = f->k;
	uint32_t len = 0;
	int rc;

	k.dkey = d;
	k.dkey_len = (uint32_t)strlen(d);
	k.akey = "v";
	k.akey_len = 1;
	rc = eng_sv_fetch(f->t, &k, epoch, buf, 16, &len, NULL, NULL);
	return rc < 0 ? rc : (int)len;
}

static void sv_put(struct fix *f, const char *d, lode_epoch_t epoch, const char *v)
{
	struct eng_key k = f->k;

	k.dkey = d;
	k.dkey_len = (uint32_t)strlen(d);
	k.akey = "v";
	k.akey_len = 1;
	assert_int_equal(eng_sv_update(f->t, &k, epoch, v, (uint32_t)strlen(v), NULL, NULL), 0);
}

/*
 * eng_obj_fold: the object's punch becomes a punch of each dkey here, so
 * reads of them are unchanged, but a dkey written later beneath the punch
 * (a rebuild's copy at a low epoch) is no longer hidden by it; and so
 * after a restart. An object holding only its punch is listed at
 * ENG_EPOCH_ANY.
 */
static void test_obj_fold(void **state)
{
	struct fix *f = *state;
	struct eng_anchor an = ENG_ANCHOR_INIT;
	struct lode_oid oids[4];
	struct eng_key only = f->k;
	char buf[16];

	sv_put(f, "a", 5, "a5");
	sv_put(f, "b", 6, "b6");
	assert_int_equal(eng_obj_punch(f->t, &f->k, 20, NULL, NULL), 0);
	sv_put(f, "b", 25, "b25");
	/* Beneath the object punch: hidden. */
	sv_put(f, "c", 3, "c3");
	assert_int_equal(sv_at(f, "c", LODE_EPOCH_MAX, buf), -ENOENT);
	assert_int_equal(eng_obj_fold(f->t, &f->k), 0);
	for (int pass = 0; pass < 2; pass++) {
		assert_int_equal(sv_at(f, "a", LODE_EPOCH_MAX, buf), -ENOENT);
		assert_int_equal(sv_at(f, "a", 10, buf), 2);
		assert_memory_equal(buf, "a5", 2);
		assert_int_equal(sv_at(f, "b", LODE_EPOCH_MAX, buf), 3);
		assert_memory_equal(buf, "b25", 3);
		assert_int_equal(sv_at(f, "b", 21, buf), -ENOENT);
		/* c held here too: folded like the others (still hidden). */
		assert_int_equal(sv_at(f, "c", LODE_EPOCH_MAX, buf), -ENOENT);
		/* A dkey written beneath after the fold: seen. */
		if (pass == 0)
			sv_put(f, "d", 2, "d2");
		assert_int_equal(sv_at(f, "d", LODE_EPOCH_MAX, buf), 2);
		assert_memory_equal(buf, "d2", 2);
		assert_int_equal(eng_tgt_close(f->t), 0);
		f->t = NULL;
		assert_int_equal(eng_tgt_open(&f->o, &f->t), 0);
	}
	assert_int_equal(eng_obj_fold(f->t, &f->k), 0); /* nothing left to fold */
	/* An object with only its punch: listed for the reclaim's walk. */
	only.oid.lo ^= 0x55;
	assert_int_equal(eng_obj_punch(f->t, &only, 30, NULL, NULL), 0);
	assert_int_equal(eng_obj_list(f->t, &f->cont, ENG_EPOCH_ANY, &an, oids, 4), 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_obj_fold, setup_ram, teardown),
		cmocka_unit_test_setup_teardown(test_obj_fold, setup_disk, teardown),
		cmocka_unit_test_setup_teardown(test_partial_overwrite_is_merged, setup_ram, teardown),
		cmocka_unit_test_setup_teardown(test_partial_overwrite_is_merged, setup_disk, teardown),
		cmocka_unit_test_setup_teardown(test_whole_overwrite_is_not_copied, setup_ram, teardown),
		cmocka_unit_test_setup_teardown(test_whole_overwrite_is_not_copied, setup_disk, teardown),
		cmocka_unit_test_setup_teardown(test_snapshot_view_is_kept, setup_ram, teardown),
		cmocka_unit_test_setup_teardown(test_snapshot_view_is_kept, setup_disk, teardown),
		cmocka_unit_test_setup_teardown(test_punched_hole_stays_a_hole, setup_ram, teardown),
		cmocka_unit_test_setup_teardown(test_punched_hole_stays_a_hole, setup_disk, teardown),
		cmocka_unit_test_setup_teardown(test_hi_bound_leaves_newer_alone, setup_ram, teardown),
		cmocka_unit_test_setup_teardown(test_hi_bound_leaves_newer_alone, setup_disk, teardown),
		cmocka_unit_test_setup_teardown(test_dkey_drop, setup_ram, teardown),
		cmocka_unit_test_setup_teardown(test_dkey_drop, setup_disk, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
