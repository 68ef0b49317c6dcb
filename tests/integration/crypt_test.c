/*
 * Inline encryption: containers whose `encryption` property is set are
 * sealed in the client with AES-256-GCM under a data key that only the
 * client (with its tenant key) can unwrap. A real loded; the stored bytes
 * are looked at through a handle with its key taken away (crypt_cont_fini
 * on an opened container, client/client.h), which reads and writes exactly
 * what a storage node holds.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "client/client.h"
#include "client/cont_props.h"
#include "client/keys.h"
#include "harness.h"
#include "lode/lode.h"
#include "lode/lodefs.h"

static struct hs_server srv;
static lode_conn_t *conn;
static lode_cont_t *enc;   /* "enc", encrypted */
static lode_cont_t *enc64; /* "enc64", encrypted in 64 KiB blocks */
static char key_path[PATH_MAX + 64], other_key[PATH_MAX + 64];
static const struct lode_oid oid = {0x2000000000000001ull, 11};

static void fill(uint8_t *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)((i * 131 + seed * 7 + (i >> 9)) ^ (seed >> 3)) | 1;
}

static bool mem_has(const uint8_t *hay, size_t n, const void *needle, size_t k)
{
	for (size_t i = 0; i + k <= n; i++)
		if (memcmp(hay + i, needle, k) == 0)
			return true;
	return false;
}

static bool all_zero_tail(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* A second handle on label with no key: it sees what the targets hold. */
static lode_cont_t *open_raw(const char *label)
{
	lode_cont_t *ct = NULL;

	assert_int_equal(lode_cont_open(conn, label, &ct), 0);
	crypt_cont_fini(ct);
	assert_false(ct->encrypted);
	return ct;
}

static int create(const char *label, bool encryption)
{
	struct conn_cont_props p = {.encryption = encryption};

	return conn_cont_create_props(conn, label, &p, NULL);
}

static int create_blocks(const char *label, uint32_t crypt_block)
{
	struct conn_cont_props p = {.encryption = true, .crypt_block = crypt_block};

	return conn_cont_create_props(conn, label, &p, NULL);
}

static int setup(void **state)
{
	struct hs_opts o = {.targets = 2, .ram = true, .transport = "tcp"};

	if (hs_start(&srv, &o) < 0)
		return -1;
	snprintf(key_path, sizeof(key_path), "%s/tenant.key", srv.dir);
	snprintf(other_key, sizeof(other_key), "%s/other.key", srv.dir);
	if (tenant_key_create(key_path, false) < 0 || tenant_key_create(other_key, false) < 0)
		return -1;
	setenv("LODE_TENANT_KEY", key_path, 1);
	if (hs_connect(&srv, "tcp", 10000, &conn) < 0)
		return -1;
	if (create("enc", true) < 0 || create("plain", false) < 0 ||
	    create_blocks("enc64", 64u << 10) < 0)
		return -1;
	if (lode_cont_open(conn, "enc64", &enc64) < 0)
		return -1;
	return lode_cont_open(conn, "enc", &enc);
}

static int teardown(void **state)
{
	lode_cont_close(enc);
	lode_cont_close(enc64);
	lode_disconnect(conn);
	hs_cleanup(&srv);
	return 0;
}

/* ---- keys --------------------------------------------------------------------------- */

static void test_keys(void **state)
{
	char cred[PATH_MAX + 64], bad[PATH_MAX + 64], text[8192];
	const char *saved = getenv("LODE_CREDENTIALS");
	lode_cont_t *ct = NULL;
	uint8_t k[32];
	FILE *f;

	/* lode keygen's rules: never over a key without force, 0600. */
	assert_int_equal(tenant_key_create(key_path, false), -EEXIST);
	assert_int_equal(tenant_key_read(key_path, k), 0);
	{
		struct stat sb;

		assert_int_equal(stat(key_path, &sb), 0);
		assert_int_equal(sb.st_mode & 0777, 0600);
	}
	/* Another tenant's key: the wrapped data key does not open. */
	setenv("LODE_TENANT_KEY", other_key, 1);
	assert_int_equal(lode_cont_open(conn, "enc", &ct), -EKEYREJECTED);
	/* No key at all. */
	snprintf(bad, sizeof(bad), "%s/none.key", srv.dir);
	setenv("LODE_TENANT_KEY", bad, 1);
	assert_int_equal(lode_cont_open(conn, "enc", &ct), -ENOKEY);
	assert_int_equal(create("enc2", true), -ENOKEY); /* and nothing is created */
	assert_int_equal(lode_cont_open(conn, "enc2", &ct), -LODE_ENOCONT);
	/* A key others may read, and one that is not a key. */
	f = fopen(bad, "w");
	fprintf(f, "%064x\n", 7);
	fclose(f);
	chmod(bad, 0644);
	assert_int_equal(lode_cont_open(conn, "enc", &ct), -EACCES);
	f = fopen(bad, "w");
	fprintf(f, "not a key\n");
	fclose(f);
	chmod(bad, 0600);
	assert_int_equal(lode_cont_open(conn, "enc", &ct), -EINVAL);
	/* The credentials file's tenant_key line, when the environment names none. */
	unsetenv("LODE_TENANT_KEY");
	snprintf(cred, sizeof(cred), "%s/cred-with-key", srv.dir);
	f = fopen(saved && *saved ? saved : srv.cred, "r");
	assert_non_null(f);
	text[fread(text, 1, sizeof(text) - 1, f)] = 0;
	fclose(f);
	f = fopen(cred, "w");
	fprintf(f, "%s\ntenant_key: %s\n", text, key_path);
	fclose(f);
	setenv("LODE_CREDENTIALS", cred, 1);
	assert_int_equal(lode_cont_open(conn, "enc", &ct), 0);
	lode_cont_close(ct);
	/* And the default place, under $XDG_CONFIG_HOME. */
	if (saved)
		setenv("LODE_CREDENTIALS", saved, 1);
	else
		unsetenv("LODE_CREDENTIALS");
	{
		char xdg[PATH_MAX + 64], def[PATH_MAX + 64];
		const char *old_xdg = getenv("XDG_CONFIG_HOME");
		char keep[PATH_MAX];

		snprintf(keep, sizeof(keep), "%s", old_xdg ? old_xdg : "");
		snprintf(xdg, sizeof(xdg), "%s/xdg", srv.dir);
		setenv("XDG_CONFIG_HOME", xdg, 1);
		assert_int_equal(lode_cont_open(conn, "enc", &ct), -ENOKEY);
		tenant_key_default_path(def, sizeof(def));
		assert_non_null(strstr(def, "/xdg/lode/tenant.key"));
		assert_int_equal(tenant_key_create(def, false), 0);
		assert_int_equal(lode_cont_open(conn, "enc", &ct), -EKEYREJECTED); /* a new key */
		assert_int_equal(tenant_key_create(def, false), -EEXIST);
		{
			char cmd[PATH_MAX * 2 + 200];

			snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", key_path, def);
			assert_int_equal(system(cmd), 0);
		}
		assert_int_equal(lode_cont_open(conn, "enc", &ct), 0);
		lode_cont_close(ct);
		if (keep[0])
			setenv("XDG_CONFIG_HOME", keep, 1);
		else
			unsetenv("XDG_CONFIG_HOME");
	}
	setenv("LODE_TENANT_KEY", key_path, 1);
}

/* The service holds neither the tenant key nor a container's data key. */
static void test_state_file_has_no_keys(void **state)
{
	char path[PATH_MAX + 64];
	uint8_t tkey[32], *buf;
	struct stat sb;
	FILE *f;

	snprintf(path, sizeof(path), "%s/mgmt/state.pb", srv.data);
	assert_int_equal(stat(path, &sb), 0);
	buf = malloc((size_t)sb.st_size);
	f = fopen(path, "r");
	assert_non_null(f);
	assert_int_equal(fread(buf, 1, (size_t)sb.st_size, f), (size_t)sb.st_size);
	fclose(f);
	assert_true(enc->encrypted);
	assert_false(mem_has(buf, (size_t)sb.st_size, enc->key, sizeof(enc->key)));
	assert_int_equal(tenant_key_read(key_path, tkey), 0);
	assert_false(mem_has(buf, (size_t)sb.st_size, tkey, sizeof(tkey)));
	assert_true(mem_has(buf, (size_t)sb.st_size, "enc", 3));
	free(buf);
}

/* ---- single values ------------------------------------------------------------------ */

static void test_kv(void **state)
{
	static const uint32_t sizes[] = {0, 1, 15, 16, 100, 4095, 4096, 4097, 65536, 1 << 20};
	uint8_t *v = malloc(1 << 20), *got = malloc((1 << 20) + 64);
	lode_eq_t *eq;
	lode_event_t ev = {0}, *done[1];
	uint32_t len = 0;

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char key[32];

		snprintf(key, sizeof(key), "k%zu", i);
		fill(v, sizes[i], (unsigned)i);
		assert_int_equal(lode_kv_put(enc, oid, key, v, sizes[i], NULL), 0);
		memset(got, 0xee, sizes[i] + 64);
		assert_int_equal(lode_kv_get(enc, oid, key, got, sizes[i] + 64, &len, NULL), 0);
		assert_int_equal(len, sizes[i]);
		assert_memory_equal(got, v, sizes[i]);
		/* Too small a buffer: the length, and no unchecked byte. */
		if (sizes[i] > 1) {
			memset(got, 0xee, sizes[i]);
			assert_int_equal(lode_kv_get(enc, oid, key, got, sizes[i] - 1, &len, NULL),
					 -EOVERFLOW);
			assert_int_equal(len, sizes[i]);
			assert_int_equal(got[0], 0);
		}
	}
	assert_int_equal(lode_kv_get(enc, oid, "missing", got, 16, &len, NULL), -ENOENT);
	/* Asynchronous put and get keep the call contract. */
	assert_int_equal(lode_eq_create(&eq), 0);
	fill(v, 5000, 99);
	assert_int_equal(lode_event_init(&ev, eq), 0);
	assert_int_equal(lode_kv_put(enc, oid, "async", v, 5000, &ev), 0);
	assert_int_equal(lode_eq_poll(eq, 1, 1, -1, done), 1);
	assert_int_equal(done[0]->rc, 0);
	assert_int_equal(lode_event_init(&ev, eq), 0);
	memset(got, 0, 5000);
	assert_int_equal(lode_kv_get(enc, oid, "async", got, 8192, &len, &ev), 0);
	assert_int_equal(lode_eq_poll(eq, 1, 1, -1, done), 1);
	assert_int_equal(done[0]->rc, 0);
	assert_int_equal(len, 5000);
	assert_memory_equal(got, v, 5000);
	assert_int_equal(lode_eq_destroy(eq), 0);
	free(v);
	free(got);
}

/* What the targets hold is iv || ciphertext || tag, and changing it or moving it fails. */
static void test_kv_stored_and_tampered(void **state)
{
	static const char secret[] = "attack at dawn, attack at dawn, attack at dawn";
	lode_cont_t *raw = open_raw("enc");
	uint8_t stored[256], got[256];
	uint32_t len = 0, slen = 0;

	assert_int_equal(lode_kv_put(enc, oid, "s", secret, sizeof(secret), NULL), 0);
	assert_int_equal(lode_kv_get(raw, oid, "s", stored, sizeof(stored), &slen, NULL), 0);
	assert_int_equal(slen, sizeof(secret) + 28);
	assert_false(mem_has(stored, slen, "attack", 6));
	/* Moved to another key: bound to where it lived. */
	assert_int_equal(lode_kv_put(raw, oid, "moved", stored, slen, NULL), 0);
	memset(got, 0x55, sizeof(got));
	assert_int_equal(lode_kv_get(enc, oid, "moved", got, sizeof(got), &len, NULL),
			 -LODE_ECSUM);
	assert_int_equal(got[0], 0);
	/* One bit flipped. */
	stored[20] ^= 4;
	assert_int_equal(lode_kv_put(raw, oid, "s", stored, slen, NULL), 0);
	memset(got, 0x55, sizeof(got));
	assert_int_equal(lode_kv_get(enc, oid, "s", got, sizeof(got), &len, NULL), -LODE_ECSUM);
	assert_true(got[0] == 0 && got[sizeof(got) - 1] == 0);
	/* Too short to be sealed at all. */
	assert_int_equal(lode_kv_put(raw, oid, "s", stored, 10, NULL), 0);
	assert_int_equal(lode_kv_get(enc, oid, "s", got, sizeof(got), &len, NULL), -LODE_ECSUM);
	lode_cont_close(raw);
}

/* ---- byte arrays -------------------------------------------------------------------- */

#define ASIZE (640u << 10)
#define CHUNK (64u << 10)

static void check_array(lode_cont_t *ct, struct lode_oid o, const uint8_t *model,
			uint64_t model_size)
{
	uint8_t *got = malloc(ASIZE + 8192);
	uint64_t size = 0;

	assert_int_equal(lode_array_read(ct, o, CHUNK, LODE_EPOCH_MAX, 0, got, ASIZE + 8192, NULL),
			 0);
	assert_memory_equal(got, model, ASIZE);
	assert_true(all_zero_tail(got + ASIZE, 8192));
	assert_int_equal(lode_array_size(ct, o, CHUNK, LODE_EPOCH_MAX, &size), 0);
	assert_int_equal(size, model_size);
	/* Unaligned pieces, across blocks and chunks. */
	for (unsigned i = 0; i < 40; i++) {
		uint64_t off = ((uint64_t)i * 40503u) % ASIZE;
		size_t n = 1 + ((size_t)i * 7919u) % 9000;

		if (off + n > ASIZE)
			n = ASIZE - off;
		memset(got, 0xaa, n);
		assert_int_equal(lode_array_read(ct, o, CHUNK, LODE_EPOCH_MAX, off, got, n, NULL), 0);
		assert_memory_equal(got, model + off, n);
	}
	free(got);
}

/* *state: the container (enc, or enc64 with blocks larger than most writes here). */
static void test_array(void **state)
{
	lode_cont_t *ct = *(lode_cont_t **)*state;
	struct lode_oid o = {0x2000000000000002ull, 1};
	uint8_t *model = calloc(1, ASIZE), *buf = malloc(ASIZE);
	uint64_t size = 0;
	struct {
		uint64_t off;
		uint32_t len;
	} w[] = {
		{100, 10},           /* inside one block, not at its start */
		{4096, 4096},        /* one whole block */
		{8000, 300},         /* across a block boundary */
		{0, 50},             /* the first block again, before what it holds */
		{CHUNK - 5000, 12000}, /* across a chunk */
		{3 * CHUNK + 1, 1},  /* alone after a hole */
		{200000, 70000},     /* long, unaligned at both ends */
		{8192, 16384},       /* aligned, over earlier data */
		{ASIZE - 777, 777},  /* the end */
	};

	for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
		fill(buf, w[i].len, (unsigned)i + 1);
		memcpy(model + w[i].off, buf, w[i].len);
		assert_int_equal(
			lode_array_write(ct, o, CHUNK, w[i].off, buf, w[i].len, NULL), 0);
	}
	check_array(ct, o, model, ASIZE);
	/* Holes read as zeros: a chunk never written, and a block inside one. */
	assert_int_equal(lode_array_read(ct, o, CHUNK, LODE_EPOCH_MAX, 2 * CHUNK + 8192, buf, 4096,
					 NULL),
			 0);
	assert_true(all_zero_tail(buf, 4096));
	/* Truncate to the middle of a block, and grow again. */
	assert_int_equal(lode_array_truncate(ct, o, CHUNK, 210001), 0);
	memset(model + 210001, 0, ASIZE - 210001);
	check_array(ct, o, model, 210001);
	assert_int_equal(lode_array_truncate(ct, o, CHUNK, 300000), 0);
	check_array(ct, o, model, 300000);
	fill(buf, 5000, 77);
	assert_int_equal(lode_array_write(ct, o, CHUNK, 209000, buf, 5000, NULL), 0);
	memcpy(model + 209000, buf, 5000);
	check_array(ct, o, model, 300000);
	/* Extents directly: sizes stay exact, not rounded to blocks. */
	{
		struct lode_key k = {"x", 1, "e", 1};

		fill(buf, 10, 5);
		assert_int_equal(lode_obj_write(ct, o, &k, 5000, buf, 10, NULL), 0);
		assert_int_equal(lode_obj_size(ct, o, LODE_EPOCH_MAX, &k, &size), 0);
		assert_int_equal(size, 5010);
		memset(buf + 100, 0xaa, 20);
		assert_int_equal(lode_obj_read(ct, o, LODE_EPOCH_MAX, &k, 4995, buf + 100, 20, NULL),
				 0);
		assert_true(all_zero_tail(buf + 100, 5));
		assert_memory_equal(buf + 105, buf, 10);
		/* A range punch inside a block, then at its end. */
		assert_int_equal(lode_range_punch(ct, o, &k, 5002, 3, NULL), 0);
		assert_int_equal(lode_obj_read(ct, o, LODE_EPOCH_MAX, &k, 5000, buf + 100, 10, NULL),
				 0);
		assert_memory_equal(buf + 100, buf, 2);
		assert_true(all_zero_tail(buf + 102, 3));
		assert_memory_equal(buf + 105, buf + 5, 5);
		assert_int_equal(lode_range_punch(ct, o, &k, 5006, 100, NULL), 0);
		assert_int_equal(lode_obj_size(ct, o, LODE_EPOCH_MAX, &k, &size), 0);
		assert_int_equal(size, 5006);
		/* Nothing was ever written: -ENOENT, as unencrypted. */
		k.akey = "none";
		k.akey_len = 4;
		assert_int_equal(lode_obj_read(ct, o, LODE_EPOCH_MAX, &k, 0, buf, 10, NULL), -ENOENT);
	}
	free(model);
	free(buf);
}

static void test_array_async(void **state)
{
	lode_cont_t *ct = *(lode_cont_t **)*state;
	struct lode_oid o = {0x2000000000000003ull, 1};
	uint8_t *a = lode_buf_alloc(conn, 4 << 20), *b = lode_buf_alloc(conn, 4 << 20);
	lode_event_t ev[4] = {{0}}, *done[4];
	lode_eq_t *eq;
	int n = 0;

	assert_int_equal(lode_eq_create(&eq), 0);
	fill(a, 4 << 20, 3);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(lode_event_init(&ev[i], eq), 0);
		assert_int_equal(lode_array_write(ct, o, 0, (uint64_t)i << 20, a + ((size_t)i << 20),
						  1 << 20, &ev[i]),
				 0);
	}
	while (n < 4) {
		int got = lode_eq_poll(eq, 1, 4, -1, done);

		for (int i = 0; i < got; i++)
			assert_int_equal(done[i]->rc, 0);
		n += got;
	}
	for (int i = 0, m = 0; i < 4; i++) {
		assert_int_equal(lode_event_init(&ev[i], eq), 0);
		assert_int_equal(lode_array_read(ct, o, 0, LODE_EPOCH_MAX, (uint64_t)i << 20,
						 b + ((size_t)i << 20), 1 << 20, &ev[i]),
				 0);
		(void)m;
	}
	for (n = 0; n < 4;) {
		int got = lode_eq_poll(eq, 1, 4, -1, done);

		for (int i = 0; i < got; i++)
			assert_int_equal(done[i]->rc, 0);
		n += got;
	}
	assert_memory_equal(a, b, 4 << 20);
	assert_int_equal(lode_eq_destroy(eq), 0);
	lode_buf_free(conn, a);
	lode_buf_free(conn, b);
}

/* The ciphertext on the targets is not the data, and damage to it is an error, not bytes. */
static void test_array_stored_and_tampered(void **state)
{
	struct lode_oid o = {0x2000000000000004ull, 1};
	static const char text[] = "the quick brown fox jumps over the lazy dog. ";
	uint8_t *plain = malloc(3 * 4096), *stored = malloc(3 * 4096), *got = malloc(3 * 4096);
	lode_cont_t *raw = open_raw("enc");
	uint8_t dkey[8] = {0};
	struct lode_key k = {dkey, 8, "d", 1};

	for (size_t i = 0; i < 3 * 4096; i++)
		plain[i] = (uint8_t)text[i % (sizeof(text) - 1)];
	assert_int_equal(lode_array_write(enc, o, 0, 0, plain, 3 * 4096, NULL), 0);
	assert_int_equal(lode_array_read(raw, o, 0, LODE_EPOCH_MAX, 0, stored, 3 * 4096, NULL), 0);
	assert_false(mem_has(stored, 3 * 4096, "quick brown", 11));
	/* One byte of block 1 changed on the "storage node". */
	stored[4096 + 17] ^= 0x80;
	assert_int_equal(lode_obj_write(raw, o, &k, 4096 + 17, stored + 4096 + 17, 1, NULL), 0);
	memset(got, 0x55, 3 * 4096);
	assert_int_equal(lode_array_read(enc, o, 0, LODE_EPOCH_MAX, 0, got, 3 * 4096, NULL),
			 -LODE_ECSUM);
	assert_true(all_zero_tail(got, 3 * 4096));
	/* Blocks 0 and 2 are intact and still read. */
	assert_int_equal(lode_array_read(enc, o, 0, LODE_EPOCH_MAX, 0, got, 4096, NULL), 0);
	assert_memory_equal(got, plain, 4096);
	assert_int_equal(lode_array_read(enc, o, 0, LODE_EPOCH_MAX, 8192 + 5, got, 100, NULL), 0);
	assert_memory_equal(got, plain + 8192 + 5, 100);
	/* Block 2's ciphertext put in block 0's place: bound to its index. */
	assert_int_equal(lode_obj_write(raw, o, &k, 0, stored + 8192, 4096, NULL), 0);
	assert_int_equal(lode_array_read(enc, o, 0, LODE_EPOCH_MAX, 0, got, 10, NULL), -LODE_ECSUM);
	/* A write over the damaged block replaces it whole. */
	assert_int_equal(lode_array_write(enc, o, 0, 4096, plain + 4096, 4096, NULL), 0);
	assert_int_equal(lode_array_read(enc, o, 0, LODE_EPOCH_MAX, 4096, got, 4096, NULL), 0);
	assert_memory_equal(got, plain + 4096, 4096);
	/* But a partial write over a damaged block fails rather than sealing garbage. */
	assert_int_equal(lode_array_write(enc, o, 0, 10, "x", 1, NULL), -LODE_ECSUM);
	lode_cont_close(raw);
	free(plain);
	free(stored);
	free(got);
}

/*
 * 64 KiB blocks: the records say so, damage inside one block fails only
 * that block, and a small write into a block reads, opens and reseals the
 * whole block around it.
 */
static void test_large_blocks_stored_and_tampered(void **state)
{
	const uint32_t B = 64u << 10;
	struct lode_oid o = {0x2000000000000005ull, 1};
	uint8_t *plain = malloc(3 * B), *stored = malloc(3 * B), *got = malloc(3 * B);
	lode_cont_t *raw = open_raw("enc64");
	uint8_t dkey[8] = {0}, rec[32], rkey[8] = {0, 'g', 'c', 'm', 'd'};
	struct lode_key k = {dkey, 8, "d", 1}, rk = {dkey, 8, rkey, 5};
	uint32_t len = 0;

	assert_int_equal(enc64->crypt_block, B);
	assert_int_equal(enc->crypt_block, 4096);
	fill(plain, 3 * B, 21);
	assert_int_equal(lode_array_write(enc64, o, 0, 0, plain, 3 * B, NULL), 0);
	/* One record per 64 KiB block: block 1's says 65536 bytes. */
	assert_int_equal(lode_obj_read(raw, o, LODE_EPOCH_MAX, &rk, 32, rec, 32, NULL), 0);
	len = (uint32_t)rec[28] | (uint32_t)rec[29] << 8 | (uint32_t)rec[30] << 16 |
	      (uint32_t)rec[31] << 24;
	assert_int_equal(len, B);
	assert_int_equal(lode_obj_read(raw, o, LODE_EPOCH_MAX, &rk, 3 * 32, rec, 32, NULL), 0);
	assert_true(all_zero_tail(rec, 32)); /* no block 3 */
	/* A 100-byte write in the middle of block 1 reseals all of it. */
	fill(got, 100, 99);
	memcpy(plain + B + 5000, got, 100);
	assert_int_equal(lode_array_write(enc64, o, 0, B + 5000, got, 100, NULL), 0);
	assert_int_equal(lode_array_read(enc64, o, 0, LODE_EPOCH_MAX, 0, got, 3 * B, NULL), 0);
	assert_memory_equal(got, plain, 3 * B);
	assert_int_equal(lode_array_read(raw, o, 0, LODE_EPOCH_MAX, 0, stored, 3 * B, NULL), 0);
	/* One byte of block 1 changed on the "storage node": all of block 1 fails. */
	stored[B + 60000] ^= 1;
	assert_int_equal(lode_obj_write(raw, o, &k, B + 60000, stored + B + 60000, 1, NULL), 0);
	memset(got, 0x55, 3 * B);
	assert_int_equal(lode_array_read(enc64, o, 0, LODE_EPOCH_MAX, B + 10, got, 10, NULL),
			 -LODE_ECSUM);
	assert_true(all_zero_tail(got, 10));
	assert_int_equal(lode_array_read(enc64, o, 0, LODE_EPOCH_MAX, 0, got, 3 * B, NULL),
			 -LODE_ECSUM);
	/* Blocks 0 and 2 still read. */
	assert_int_equal(lode_array_read(enc64, o, 0, LODE_EPOCH_MAX, B - 100, got, 100, NULL), 0);
	assert_memory_equal(got, plain + B - 100, 100);
	assert_int_equal(lode_array_read(enc64, o, 0, LODE_EPOCH_MAX, 2 * B, got, B, NULL), 0);
	assert_memory_equal(got, plain + 2 * B, B);
	lode_cont_close(raw);
	free(plain);
	free(stored);
	free(got);
}

/* The block size is checked where it is set; containers report theirs. */
static void test_crypt_block_property(void **state)
{
	struct conn_cont_props p = {.encryption = true};
	const uint32_t bad[] = {1, 2048, 4095, 4097, 3u << 12, 2u << 20};
	lode_cont_t *ct = NULL;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		p.crypt_block = bad[i];
		assert_int_equal(conn_cont_create_props(conn, "badblock", &p, NULL), -EINVAL);
	}
	/* Without encryption there is nothing to block. */
	p.encryption = false;
	p.crypt_block = 65536;
	assert_int_equal(conn_cont_create_props(conn, "badblock", &p, NULL), -EINVAL);
	assert_int_equal(lode_cont_open(conn, "badblock", &ct), -LODE_ENOCONT);
	/* The largest works end to end. */
	assert_int_equal(create_blocks("enc1m", 1u << 20), 0);
	assert_int_equal(lode_cont_open(conn, "enc1m", &ct), 0);
	assert_int_equal(ct->crypt_block, 1u << 20);
	{
		uint8_t *a = malloc(3u << 20), *b = malloc(3u << 20);
		struct lode_oid o = {0x2000000000000006ull, 1};

		fill(a, 3u << 20, 5);
		assert_int_equal(lode_array_write(ct, o, 0, 12345, a, (3u << 20) - 20000, NULL), 0);
		assert_int_equal(lode_array_read(ct, o, 0, LODE_EPOCH_MAX, 12345, b,
						 (3u << 20) - 20000, NULL), 0);
		assert_memory_equal(a, b, (3u << 20) - 20000);
		free(a);
		free(b);
	}
	lode_cont_close(ct);
}

/* ---- liblodefs, and containers without encryption ------------------------------------- */

static void test_lodefs(void **state)
{
	static const struct lodefs_cred root = {0, 0, 0, NULL};
	size_t n = (3 << 20) + 12345;
	uint8_t *a = malloc(n), *b = malloc(n);
	lodefs_file_t *f = NULL;
	lodefs_t *fs = NULL;
	lode_cont_t *raw;
	struct stat st;

	fill(a, n, 41);
	assert_int_equal(lodefs_mount(hs_addr(&srv), "enc", NULL, &fs), 0);
	assert_int_equal(lodefs_create(fs, &root, LODEFS_ROOT_INO, "file", O_RDWR, 0644, &st, &f),
			 0);
	assert_int_equal(lodefs_file_write(f, a, 1000, 0, NULL), 1000);
	assert_int_equal(lodefs_file_write(f, a + 1000, n - 1000, 1000, NULL), (ssize_t)(n - 1000));
	memset(b, 0, n);
	assert_int_equal(lodefs_file_read(f, b, n, 0), (ssize_t)n);
	assert_memory_equal(a, b, n);
	assert_int_equal(lodefs_file_truncate(f, 5000), 0);
	assert_int_equal(lodefs_file_truncate(f, 9000), 0);
	assert_int_equal(lodefs_file_read(f, b, n, 0), 9000);
	assert_memory_equal(a, b, 5000);
	assert_true(all_zero_tail(b + 5000, 4000));
	assert_int_equal(lodefs_file_close(f), 0);
	assert_int_equal(lodefs_umount(fs), 0);
	/* Mounted again: the same file. */
	assert_int_equal(lodefs_mount(hs_addr(&srv), "enc", NULL, &fs), 0);
	assert_int_equal(lodefs_path_open(fs, &root, "/file", O_RDONLY, 0, &f), 0);
	assert_int_equal(lodefs_file_read(f, b, n, 0), 9000);
	assert_memory_equal(a, b, 5000);
	assert_int_equal(lodefs_file_close(f), 0);
	assert_int_equal(lodefs_umount(fs), 0);
	/* Without the key the file system does not mount. */
	{
		char none[PATH_MAX + 64];

		snprintf(none, sizeof(none), "%s/none.key", srv.dir);
		unlink(none);
		setenv("LODE_TENANT_KEY", none, 1);
		assert_int_equal(lodefs_mount(hs_addr(&srv), "enc", NULL, &fs), -ENOKEY);
		setenv("LODE_TENANT_KEY", key_path, 1);
	}
	raw = open_raw("enc");
	lode_cont_close(raw);
	free(a);
	free(b);
}

static void test_plain_container(void **state)
{
	static const char v[] = "plain text stays plain";
	lode_cont_t *ct = NULL;
	uint8_t got[64];
	uint32_t len = 0;

	assert_int_equal(lode_cont_open(conn, "plain", &ct), 0);
	assert_false(ct->encrypted);
	assert_int_equal(lode_kv_put(ct, oid, "p", v, sizeof(v), NULL), 0);
	assert_int_equal(lode_kv_get(ct, oid, "p", got, sizeof(got), &len, NULL), 0);
	assert_int_equal(len, sizeof(v));
	assert_memory_equal(got, v, sizeof(v));
	assert_int_equal(lode_array_write(ct, oid, 0, 10, v, sizeof(v), NULL), 0);
	assert_int_equal(lode_array_read(ct, oid, 0, LODE_EPOCH_MAX, 10, got, sizeof(v), NULL), 0);
	assert_memory_equal(got, v, sizeof(v));
	lode_cont_close(ct);
	/* Without any tenant key too. */
	setenv("LODE_TENANT_KEY", "/nonexistent/key", 1);
	assert_int_equal(lode_cont_open(conn, "plain", &ct), 0);
	lode_cont_close(ct);
	setenv("LODE_TENANT_KEY", key_path, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_keys),
		cmocka_unit_test(test_state_file_has_no_keys),
		cmocka_unit_test(test_kv),
		cmocka_unit_test(test_kv_stored_and_tampered),
		cmocka_unit_test_prestate(test_array, &enc),
		cmocka_unit_test_prestate(test_array, &enc64),
		cmocka_unit_test_prestate(test_array_async, &enc),
		cmocka_unit_test_prestate(test_array_async, &enc64),
		cmocka_unit_test(test_array_stored_and_tampered),
		cmocka_unit_test(test_large_blocks_stored_and_tampered),
		cmocka_unit_test(test_crypt_block_property),
		cmocka_unit_test(test_lodefs),
		cmocka_unit_test(test_plain_container),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
