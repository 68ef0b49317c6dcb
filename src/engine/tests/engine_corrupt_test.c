/*
 * Damaged extent data must be caught by the checksums: a fetch of a value
 * or array range whose stored bytes were altered returns -LODE_ECSUM and
 * withholds the bytes (errno.h: "the bytes are withheld"), while every
 * other value still reads back.
 *
 * The test writes values larger than inline_max with unique patterns, finds
 * each pattern in the target's `extents` file, flips one byte there (with
 * the target closed, and with it open), and fetches.
 */
#include "test_util.h"

#include "engine/eng_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct tu_fix *fixture(void **state)
{
	return *state;
}

/*
 * The offset in file path where needle (n bytes) occurs; fails unless it
 * occurs exactly once. Reads only the data regions of a sparse file.
 */
static off_t find_in_file(const char *path, const void *needle, size_t n)
{
	enum { CHUNK = 4 << 20 };
	int fd = open(path, O_RDONLY);
	uint8_t *buf = malloc(CHUNK + n);
	off_t found = -1, size, data = 0;
	unsigned hits = 0;

	if (fd < 0)
		fail_msg("open %s: %s", path, strerror(errno));
	assert_non_null(buf);
	size = lseek(fd, 0, SEEK_END);
	while (data < size) {
		off_t hole;

		data = lseek(fd, data, SEEK_DATA);
		if (data < 0)
			break;
		hole = lseek(fd, data, SEEK_HOLE);
		if (hole < 0)
			hole = size;
		for (off_t pos = data; pos < hole; pos += CHUNK) {
			size_t want = (size_t)(hole - pos < CHUNK ? hole - pos : CHUNK);
			ssize_t got = pread(fd, buf, want + n - 1, pos);

			if (got <= 0)
				break;
			for (uint8_t *p = buf; (p = memmem(p, (size_t)got - (size_t)(p - buf), needle, n));
			     p++) {
				if (p - buf >= (ptrdiff_t)want)
					break; /* in the overlap: found from the next chunk */
				found = pos + (p - buf);
				hits++;
			}
		}
		data = hole;
	}
	close(fd);
	free(buf);
	if (hits != 1)
		fail_msg("a value's pattern occurs %u times in %s, expected once (values over "
			 "inline_max are stored in the extent file as written)",
			 hits, path);
	return found;
}

/* Flip the bits of one byte of path at off, durably. */
static void flip_byte(const char *path, off_t off)
{
	int fd = open(path, O_RDWR);
	uint8_t b;

	if (fd < 0)
		fail_msg("open %s: %s", path, strerror(errno));
	assert_int_equal(pread(fd, &b, 1, off), 1);
	b ^= 0x5a;
	assert_int_equal(pwrite(fd, &b, 1, off), 1);
	assert_int_equal(fsync(fd), 0);
	close(fd);
}

/* Where value bytes [pos, pos+64) of a pattern start in the extent file. */
static off_t locate(struct tu_fix *f, uint64_t seed, uint64_t pat_pos)
{
	uint8_t needle[64];
	char *ext = tu_path_join(f->path, "extents");
	off_t off;

	tu_pat_fill(needle, sizeof(needle), seed, pat_pos);
	off = find_in_file(ext, needle, sizeof(needle));
	free(ext);
	return off;
}

static void corrupt(struct tu_fix *f, off_t off)
{
	char *ext = tu_path_join(f->path, "extents");

	flip_byte(ext, off);
	free(ext);
}

/*
 * After -LODE_ECSUM, buf must not hold the damaged bytes around value
 * offset bad as if they were the data: compare with what the file holds.
 */
static void check_withheld(const uint8_t *buf, uint32_t len, uint32_t bad, uint64_t seed,
			   uint64_t pat_base)
{
	uint32_t lo = bad > 32 ? bad - 32 : 0, hi = bad + 32 < len ? bad + 32 : len;
	uint8_t want[64];

	/* the damaged content: the pattern with the one flipped byte */
	tu_pat_fill(want, hi - lo, seed, pat_base + lo);
	want[bad - lo] ^= 0x5a;
	if (memcmp(buf + lo, want, hi - lo) == 0)
		fail_msg("after -LODE_ECSUM the buffer holds the damaged bytes as if valid");
}

static void sv_put(struct tu_fix *f, const struct eng_key *k, lode_epoch_t e, uint32_t len,
		   uint64_t seed)
{
	uint8_t *b = malloc(len);

	assert_non_null(b);
	tu_pat_fill(b, len, seed, 0);
	assert_int_equal(eng_sv_update(f->tgt, k, e, b, len, NULL, NULL), 0);
	free(b);
}

static void arr_put(struct tu_fix *f, const struct eng_key *k, lode_epoch_t e, uint64_t off,
		    uint32_t len, uint64_t seed)
{
	uint8_t *b = malloc(len);

	assert_non_null(b);
	tu_pat_fill(b, len, seed, off);
	assert_int_equal(eng_arr_update(f->tgt, k, e, off, b, len, NULL, NULL), 0);
	free(b);
}

static void sv_ok(struct tu_fix *f, const struct eng_key *k, lode_epoch_t e, uint32_t len,
		  uint64_t seed)
{
	uint8_t *b = malloc(len);
	uint32_t got = 0;

	assert_non_null(b);
	assert_int_equal(eng_sv_fetch(f->tgt, k, e, b, len, &got, NULL, NULL), 0);
	assert_int_equal(got, len);
	assert_int_equal(tu_pat_check(b, len, seed, 0), -1);
	free(b);
}

/* Memory aligned to 4 KiB, where the engine may read straight from the device. */
static void *aligned(size_t len)
{
	void *p = NULL;

	assert_int_equal(posix_memalign(&p, 4096, (len + 4095) / 4096 * 4096), 0);
	return p;
}

/*
 * Fetch a damaged single value every way: blocking into plain memory,
 * asynchronously into plain memory, into a registered buffer and into
 * page-aligned memory.
 */
static void sv_expect_csum(struct tu_fix *f, const struct eng_key *k, lode_epoch_t e,
			   uint32_t len, uint32_t bad, uint64_t seed)
{
	uint8_t *plain = malloc(len + 64);
	uint8_t *reg = eng_buf_alloc(f->tgt, len + 64);
	uint8_t *al = aligned(len + 64);
	uint32_t got;
	int rc;

	assert_non_null(plain);
	assert_non_null(reg);
	for (int way = 0; way < 4; way++) {
		uint8_t *b = way == 2 ? reg : way == 3 ? al : plain;

		memset(b, 0xee, len + 64);
		if (way == 0)
			rc = eng_sv_fetch(f->tgt, k, e, b, len + 64, &got, NULL, NULL);
		else
			rc = tu_sv_fetch_wait(f->tgt, k, e, b, len + 64, &got);
		if (rc != -LODE_ECSUM)
			fail_msg("fetch %d of a damaged value (byte %u of %u flipped): got %d (%s), "
				 "expected -LODE_ECSUM",
				 way, bad, len, rc, lode_strerror(rc));
		check_withheld(b, len, bad, seed, 0);
	}
	eng_buf_free(f->tgt, reg);
	free(plain);
	free(al);
}

/* Fetch [off, off+len) of a damaged array, whose flipped byte is at array offset bad. */
static void arr_expect_csum(struct tu_fix *f, const struct eng_key *k, uint64_t off, uint32_t len,
			    uint64_t bad, uint64_t seed)
{
	uint8_t *plain = malloc(len);
	uint8_t *reg = eng_buf_alloc(f->tgt, len);
	uint8_t *al = aligned(len);
	int rc;

	assert_non_null(plain);
	assert_non_null(reg);
	for (int way = 0; way < 4; way++) {
		uint8_t *b = way == 2 ? reg : way == 3 ? al : plain;

		memset(b, 0xee, len);
		if (way == 0)
			rc = eng_arr_fetch(f->tgt, k, LODE_EPOCH_MAX, off, b, len, NULL, NULL);
		else
			rc = tu_arr_fetch_wait(f->tgt, k, LODE_EPOCH_MAX, off, b, len);
		if (rc != -LODE_ECSUM)
			fail_msg("array fetch %d of [%llu, +%u) over a damaged byte at %llu: got %d "
				 "(%s), expected -LODE_ECSUM",
				 way, (unsigned long long)off, len, (unsigned long long)bad, rc,
				 lode_strerror(rc));
		check_withheld(b, len, (uint32_t)(bad - off), seed, off);
	}
	eng_buf_free(f->tgt, reg);
	free(plain);
	free(al);
}

/* A range that misses the damage reads correctly or, if checked per extent, -LODE_ECSUM. */
static void arr_ok_or_csum(struct tu_fix *f, const struct eng_key *k, uint64_t off, uint32_t len,
			   uint64_t seed)
{
	uint8_t *b = malloc(len);
	int rc;

	assert_non_null(b);
	rc = eng_arr_fetch(f->tgt, k, LODE_EPOCH_MAX, off, b, len, NULL, NULL);
	if (rc == 0)
		assert_int_equal(tu_pat_check(b, len, seed, off), -1);
	else
		assert_int_equal(rc, -LODE_ECSUM);
	free(b);
}

/* Damage three stored extents while the target is closed. */
static void test_flip_closed(void **state)
{
	struct tu_fix *f = fixture(state);
	struct eng_key ka = tu_key(&f->cont, tu_oid(1), "d", "a");   /* one chunk */
	struct eng_key kb = tu_key(&f->cont, tu_oid(1), "d", "b");   /* several chunks */
	struct eng_key kc = tu_key(&f->cont, tu_oid(1), "d", "c");   /* inline */
	struct eng_key kd = tu_key(&f->cont, tu_oid(2), "d", "arr"); /* array extent */
	struct eng_key ke = tu_key(&f->cont, tu_oid(2), "e", "e");   /* untouched */
	const uint64_t sa = 0xa11ce, sb = 0xb0b, sc = 0xc0c, sd = 0xd0d, se = 0xe0e;

	sv_put(f, &ka, 10, 20000, sa);
	sv_put(f, &kb, 10, 100000, sb);
	sv_put(f, &kc, 10, 40, sc);
	arr_put(f, &kd, 10, 5000, 70000, sd);
	sv_put(f, &ke, 10, 9000, se);
	tu_fix_close(f);

	off_t pa = locate(f, sa, 0), pb = locate(f, sb, 0), pd = locate(f, sd, 5000);
	corrupt(f, pa + 12345);
	corrupt(f, pb + 70000);
	corrupt(f, pd + 50000);
	tu_fix_open(f);

	sv_expect_csum(f, &ka, LODE_EPOCH_MAX, 20000, 12345, sa);
	sv_expect_csum(f, &kb, 10, 100000, 70000, sb);
	arr_expect_csum(f, &kd, 5000 + 49000, 2000, 5000 + 50000, sd);
	arr_expect_csum(f, &kd, 0, 100000, 5000 + 50000, sd);
	arr_expect_csum(f, &kd, 5000 + 50000, 1, 5000 + 50000, sd);
	arr_ok_or_csum(f, &kd, 5000, 1000, sd);
	arr_ok_or_csum(f, &kd, 5000 + 69000, 1000, sd);
	/* everything else reads fine */
	sv_ok(f, &kc, LODE_EPOCH_MAX, 40, sc);
	sv_ok(f, &ke, LODE_EPOCH_MAX, 9000, se);

	/* a newer version reads fine; the damaged one still fails */
	sv_put(f, &ka, 20, 20000, sa + 1);
	sv_ok(f, &ka, LODE_EPOCH_MAX, 20000, sa + 1);
	sv_expect_csum(f, &ka, 15, 20000, 12345, sa);
	tu_fix_reopen(f);
	sv_ok(f, &ka, 20, 20000, sa + 1);
	sv_expect_csum(f, &ka, 10, 20000, 12345, sa);
	sv_ok(f, &ke, LODE_EPOCH_MAX, 9000, se);
}

/* Damage stored extents while the target is open and has them indexed. */
static void test_flip_open(void **state)
{
	struct tu_fix *f = fixture(state);
	struct eng_key kf = tu_key(&f->cont, tu_oid(3), "d", "f");
	struct eng_key kg = tu_key(&f->cont, tu_oid(3), "d", "arr");
	struct eng_key kh = tu_key(&f->cont, tu_oid(3), "d", "h");
	const uint64_t sf = 0xf00f, sg = 0x9009, sh = 0x4004;

	sv_put(f, &kf, 10, 16384, sf);
	arr_put(f, &kg, 10, 0, 8192, sg);
	sv_put(f, &kh, 10, 4096, sh);
	sv_ok(f, &kf, LODE_EPOCH_MAX, 16384, sf); /* read once before the damage */

	off_t pf = locate(f, sf, 0), pg = locate(f, sg, 0);
	corrupt(f, pf + 100);
	corrupt(f, pg + 8000);

	sv_expect_csum(f, &kf, LODE_EPOCH_MAX, 16384, 100, sf);
	arr_expect_csum(f, &kg, 7000, 1192, 8000, sg);
	arr_expect_csum(f, &kg, 0, 8192, 8000, sg);
	arr_expect_csum(f, &kg, 4096, 4096, 8000, sg);
	sv_ok(f, &kh, LODE_EPOCH_MAX, 4096, sh);
}

/*
 * Checksum chunks: records now carry one checksum per 4 KiB block, so a read
 * of a block next to a damaged one still succeeds; records written as
 * earlier builds did (one per 32 KiB, no REC_F_CSUM_BLOCK) still read, with
 * their own geometry, before and after a restart.
 */
static void test_chunk_geometry(void **state)
{
	struct tu_fix *f = fixture(state);
	struct eng_key kold = tu_key(&f->cont, tu_oid(4), "d", "old");
	struct eng_key knew = tu_key(&f->cont, tu_oid(4), "d", "new");
	struct eng_key ksv = tu_key(&f->cont, tu_oid(4), "d", "sv");
	const uint64_t so = 0x01d, sn = 0x4e3, ss = 0x55;

	eng_csum_old_chunks = true;
	arr_put(f, &kold, 10, 5000, 70000, so);
	sv_put(f, &ksv, 10, 100000, ss);
	eng_csum_old_chunks = false;
	arr_put(f, &knew, 10, 5000, 70000, sn);
	tu_fix_reopen(f);
	{
		uint8_t *all = malloc(70000);

		assert_non_null(all);
		assert_int_equal(eng_arr_fetch(f->tgt, &kold, LODE_EPOCH_MAX, 5000, all, 70000, NULL,
					       NULL),
				 0);
		assert_int_equal(tu_pat_check(all, 70000, so, 5000), -1);
		free(all);
	}
	sv_ok(f, &ksv, LODE_EPOCH_MAX, 100000, ss);

	/* Extent byte 50000 lies in old chunk [32768, 65536) and new block [49152, 53248). */
	off_t po = locate(f, so, 5000), pn = locate(f, sn, 5000);
	corrupt(f, po + 50000);
	corrupt(f, pn + 50000);
	arr_expect_csum(f, &kold, 5000 + 49900, 200, 5000 + 50000, so);
	arr_expect_csum(f, &knew, 5000 + 49900, 200, 5000 + 50000, sn);
	arr_expect_csum(f, &kold, 5000 + 50000, 1, 5000 + 50000, so);
	arr_expect_csum(f, &knew, 5000 + 50000, 1, 5000 + 50000, sn);

	uint8_t *b = malloc(4096);

	assert_non_null(b);
	/* The old record's damaged chunk covers blocks the new one checks apart. */
	assert_int_equal(eng_arr_fetch(f->tgt, &kold, LODE_EPOCH_MAX, 5000 + 40000, b, 1000, NULL,
				       NULL),
			 -LODE_ECSUM);
	assert_int_equal(eng_arr_fetch(f->tgt, &knew, LODE_EPOCH_MAX, 5000 + 40000, b, 1000, NULL,
				       NULL),
			 0);
	assert_int_equal(tu_pat_check(b, 1000, sn, 5000 + 40000), -1);
	assert_int_equal(eng_arr_fetch(f->tgt, &knew, LODE_EPOCH_MAX, 5000 + 53248, b, 4096, NULL,
				       NULL),
			 0);
	assert_int_equal(tu_pat_check(b, 4096, sn, 5000 + 53248), -1);
	assert_int_equal(eng_arr_fetch(f->tgt, &kold, LODE_EPOCH_MAX, 5000, b, 4096, NULL, NULL),
			 0);
	assert_int_equal(tu_pat_check(b, 4096, so, 5000), -1);
	free(b);
}

/* The target's `format` file: a newer format than the build's is refused
 * before anything is read, damage is reported, and a target without the
 * file (written by an earlier build) opens and gets it. */
static void test_format_file(void **state)
{
	struct tu_fix *f = fixture(state);
	char *fmt = tu_path_join(f->path, "format");
	struct eng_key k = tu_key(&f->cont, tu_oid(5), "d", "v");
	struct eng_target *t = NULL;
	char text[16] = {0};
	FILE *fp;

	sv_put(f, &k, 10, 9000, 0x5f);
	tu_fix_close(f);
	assert_non_null(fp = fopen(fmt, "r"));
	assert_non_null(fgets(text, sizeof(text), fp));
	fclose(fp);
	assert_string_equal(text, "2\n");

	assert_non_null(fp = fopen(fmt, "w"));
	fputs("3\n", fp);
	fclose(fp);
	assert_int_equal(eng_tgt_open(&f->opts, &t), -EPROTONOSUPPORT);
	assert_null(t);
	assert_non_null(fp = fopen(fmt, "w"));
	fputs("two\n", fp);
	fclose(fp);
	assert_int_equal(eng_tgt_open(&f->opts, &t), -LODE_ECORRUPT);

	assert_int_equal(unlink(fmt), 0);
	tu_fix_open(f);
	sv_ok(f, &k, LODE_EPOCH_MAX, 9000, 0x5f);
	assert_int_equal(access(fmt, F_OK), 0);
	free(fmt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TU_BOTH_MODES(test_flip_closed),
		TU_BOTH_MODES(test_flip_open),
		TU_BOTH_MODES(test_chunk_geometry),
		TU_BOTH_MODES(test_format_file),
	};

	tu_main_init();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
