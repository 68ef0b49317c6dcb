/*
 * Running out of space on the file system under a disk-mode target: the
 * target sits on a 32 MiB tmpfs with a nominal capacity of 1 GiB, so the
 * file system fills long before the extent file does. Updates must then
 * fail with -ENOSPC (not crash, not -EIO, not a failed target), everything
 * acknowledged before must stay readable, and once space is freed (a filler
 * file made at the start is deleted) updates succeed again, and all of it
 * survives close and open.
 *
 * Mounting needs root (CAP_SYS_ADMIN); without it the test is skipped.
 */
#include "test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#define VAL (64u << 10)
#define MAX_VALUES 4096

struct fs {
	char *dir;
	bool mounted;
	char *path;
	struct eng_tgt_opts opts;
	struct eng_target *tgt;
	struct lode_uuid cont;
	unsigned nacked; /* values v0..v(nacked-1) were acknowledged */
};

static int fs_setup(void **state)
{
	struct fs *s = calloc(1, sizeof(*s));

	assert_non_null(s);
	s->dir = tu_tmpdir(ENG_MODE_DISK, "enospc");
	*state = s;
	if (geteuid() == 0 && mount("tmpfs", s->dir, "tmpfs", 0, "size=32m") == 0)
		s->mounted = true;
	else
		print_message("cannot mount a tmpfs on %s (%s): skipping\n", s->dir,
			      strerror(errno));
	return 0;
}

static int fs_teardown(void **state)
{
	struct fs *s = *state;

	if (s->tgt)
		eng_tgt_close(s->tgt);
	if (s->mounted && umount2(s->dir, 0) != 0 && umount2(s->dir, MNT_DETACH) != 0)
		fprintf(stderr, "umount %s: %s\n", s->dir, strerror(errno));
	rmdir(s->dir);
	free(s->path);
	free(s->dir);
	free(s);
	return 0;
}

/* A file of len bytes of real data (tmpfs allocates on write). */
static void make_filler(const char *path, size_t len)
{
	static uint8_t buf[1 << 16];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	assert_true(fd >= 0);
	memset(buf, 0x77, sizeof(buf));
	for (size_t done = 0; done < len; done += sizeof(buf))
		assert_int_equal(write(fd, buf, sizeof(buf)), (ssize_t)sizeof(buf));
	assert_int_equal(fsync(fd), 0);
	close(fd);
}

static struct eng_key value_key(struct fs *s, unsigned i, char *akey)
{
	snprintf(akey, 16, "v%u", i);
	return tu_key(&s->cont, tu_oid(i % 7), "dkey", akey);
}

static int put(struct fs *s, unsigned i, bool async)
{
	uint8_t *b = malloc(VAL);
	char akey[16];
	struct eng_key k = value_key(s, i, akey);
	int rc;

	assert_non_null(b);
	tu_pat_fill(b, VAL, i + 1, 0);
	rc = async ? tu_sv_update_wait(s->tgt, &k, 10 + i, b, VAL)
		   : eng_sv_update(s->tgt, &k, 10 + i, b, VAL, NULL, NULL);
	free(b);
	return rc;
}

static void check_all(struct fs *s, const char *when)
{
	uint8_t *b = malloc(VAL);
	char akey[16];

	assert_non_null(b);
	for (unsigned i = 0; i < s->nacked; i++) {
		struct eng_key k = value_key(s, i, akey);
		uint32_t got = 0;
		int rc = eng_sv_fetch(s->tgt, &k, LODE_EPOCH_MAX, b, VAL, &got, NULL, NULL);

		if (rc != 0 || got != VAL || tu_pat_check(b, VAL, i + 1, 0) >= 0)
			fail_msg("%s: acknowledged value %u reads back rc %d (%s) len %u%s", when, i,
				 rc, lode_strerror(rc), got,
				 rc == 0 && got == VAL ? ", wrong bytes" : "");
	}
	free(b);
}

static void test_enospc(void **state)
{
	struct fs *s = *state;
	char *filler;
	int rc = 0;

	if (!s->mounted)
		skip();
	filler = tu_path_join(s->dir, "filler");
	make_filler(filler, 8u << 20);
	s->path = tu_path_join(s->dir, "tgt");
	s->opts.path = s->path;
	s->opts.mode = ENG_MODE_DISK;
	s->opts.capacity = 1ull << 30; /* far above the 32 MiB of the file system */
	s->opts.wal_size = 4u << 20;
	rc = eng_tgt_open(&s->opts, &s->tgt);
	if (rc != 0)
		fail_msg("open on a 32 MiB file system with capacity 1 GiB: %d (%s)", rc,
			 lode_strerror(rc));
	s->cont = tu_uuid(1);
	assert_int_equal(eng_cont_create(s->tgt, &s->cont), 0);

	/* fill the file system */
	for (s->nacked = 0; s->nacked < MAX_VALUES; s->nacked++) {
		rc = put(s, s->nacked, s->nacked % 2);
		if (rc != 0)
			break;
	}
	print_message("%u values of %u KiB acknowledged before: %d (%s)\n", s->nacked, VAL >> 10,
		      rc, lode_strerror(rc));
	if (rc != -ENOSPC)
		fail_msg("filling the file system: update %u returned %d (%s), expected -ENOSPC",
			 s->nacked, rc, lode_strerror(rc));
	assert_true(s->nacked > 100); /* 32 MiB less the filler and the log */
	check_all(s, "after the first -ENOSPC");

	/* it keeps refusing cleanly, blocking and asynchronous, single value and array */
	for (unsigned i = 0; i < 6; i++) {
		rc = put(s, s->nacked + 1 + i, i % 2);
		if (rc != -ENOSPC)
			fail_msg("update %u while full: %d (%s), expected -ENOSPC", i, rc,
				 lode_strerror(rc));
	}
	{
		uint8_t *b = calloc(1, VAL);
		struct eng_key k = tu_key(&s->cont, tu_oid(100), "dkey", "arr");

		assert_non_null(b);
		rc = tu_arr_update_wait(s->tgt, &k, 100000, 0, b, VAL);
		free(b);
		if (rc != -ENOSPC)
			fail_msg("array update while full: %d (%s), expected -ENOSPC", rc,
				 lode_strerror(rc));
	}
	check_all(s, "while full");

	/* free space: updates succeed again */
	assert_int_equal(unlink(filler), 0);
	for (unsigned i = 0; i < 16; i++) {
		rc = put(s, s->nacked, i % 2);
		if (rc != 0)
			fail_msg("update %u after freeing 8 MiB: %d (%s), expected success", i, rc,
				 lode_strerror(rc));
		s->nacked++;
	}
	check_all(s, "after freeing space");

	/* everything survives close and open */
	assert_int_equal(eng_tgt_close(s->tgt), 0);
	s->tgt = NULL;
	rc = eng_tgt_open(&s->opts, &s->tgt);
	if (rc != 0)
		fail_msg("reopen after -ENOSPC: %d (%s)", rc, lode_strerror(rc));
	check_all(s, "after reopening");
	assert_int_equal(put(s, s->nacked, false), 0);
	s->nacked++;
	check_all(s, "after reopening and writing");
	free(filler);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_enospc, fs_setup, fs_teardown),
	};

	tu_main_init();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
