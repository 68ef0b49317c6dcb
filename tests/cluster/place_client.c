/*
 * place_client: liblode over several engines, one behaviour per command,
 * driven by place_test.sh (which starts the engines and kills or excludes
 * them between and during commands). Every command prints "ok ..." and
 * exits 0, or prints what failed and exits 1.
 *
 *   rw ADDR CONT N        N objects of the container's class (class 0) and N
 *                         of each explicit class S1, S2, SX, RP_2, RP_3: kv
 *                         keys, single values and array ranges over several
 *                         chunks; every byte read back.
 *   spread ADDR CONT N    N small objects, then every engine's targets hold
 *                         records (lode_status through the connection).
 *   stream ADDR CONT SECS write objects of RP_2 for SECS seconds, with no
 *                         error allowed; then read every one back.
 *   verify ADDR CONT N    objects 0..N-1 of stream read back (a new connection).
 *   write ADDR CONT N     objects 0..N-1 of stream written once.
 *   remove ADDR CONT N    kv key k0 of objects 0..N-1 of stream removed (a
 *                         punch); verify then fails until they are written
 *                         again.
 *   opunch ADDR CONT N    the kv objects 0..N-1 of stream punched whole.
 *   shapes ADDR CONT P    60 RP_2 objects whose akeys change shape: phase
 *                         P=1 writes them (akey t a single value, z an
 *                         array of 5000 bytes ending in zeros, y one of
 *                         1000); P=2 changes them (t punched and written
 *                         as an array, z's last 50 bytes punched, y
 *                         extended by 1000 zero bytes); P=3 checks the
 *                         latest view, P=4 (with PLACE_EPOCH between the
 *                         phases) what P=1 wrote, but t, whose kind changed
 *                         (a rebuilt copy carries its latest view only).
 *   With PLACE_GEN=G in the environment, stream, verify and write use the
 *   bytes of generation G (default 0): an overwrite is told from the old.
 *   With PLACE_EPOCH=E, verify reads as of epoch E (a snapshot); with
 *   PLACE_NO_K0=1, it checks that kv key k0 is gone instead of its bytes.
 *   s1dead ADDR CONT N    objects of S1 with one engine dead: each write and
 *                         read returns 0 or -EHOSTDOWN, at least one of each,
 *                         none takes long, and what was written reads back.
 *   late ADDR CONT N FILE connect while engine 2 is not in service (so not
 *                         connected), print "connected", wait for FILE (the
 *                         driver brings engine 2 back meanwhile), then write
 *                         N objects of RP_3 without an error (each has a
 *                         member on engine 2), see engine 2 connected, and
 *                         read them back.
 *   unreached ADDR CONT NEW
 *                         with engine 1 in the map UP but not answering
 *                         (stopped), so never connected: creating
 *                         container NEW and a snapshot of CONT both fail
 *                         with -EHOSTDOWN (they would miss engine 1 for
 *                         good), and the map still has engine 1 UP after.
 *   mklate ADDR CONT N FILE
 *                         connect, print "connected", wait for FILE (the
 *                         driver has an engine join meanwhile), then create
 *                         container CONT, write N objects of RP_2 without
 *                         an error and read them back; then every target
 *                         the connection reaches has the container, and
 *                         "targets T" says how many that is.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/client.h"
#include "layout/layout.h"
#include "lode/lode.h"

#define CHUNK 4096u

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void die(const char *what, int rc)
{
	printf("FAIL %s: %d (%s)\n", what, rc, lode_strerror(rc));
	exit(1);
}

static unsigned gen;                      /* PLACE_GEN */
static lode_epoch_t at = LODE_EPOCH_MAX; /* PLACE_EPOCH */
static bool no_k0;                        /* PLACE_NO_K0 */

/* The bytes of object i, key j: a pattern nobody else writes. */
static void fill(uint8_t *p, size_t n, unsigned cls, unsigned i, unsigned j)
{
	uint64_t x = (uint64_t)cls << 48 ^ (uint64_t)i << 20 ^ j ^ 0x9e3779b97f4a7c15ull ^
		     (uint64_t)gen << 40;

	for (size_t k = 0; k < n; k++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[k] = (uint8_t)x;
	}
}

static struct lode_oid oid_of(unsigned type, unsigned cls, unsigned i)
{
	return lode_oid_make(type, cls, 0x91ace, i);
}

/* Object i of class cls: three kv keys, two single values, an array over
 * three chunks. */
static int obj_write(lode_cont_t *ct, unsigned cls, unsigned i)
{
	uint8_t buf[3 * CHUNK + 100];
	char key[32];
	int rc;

	for (unsigned j = 0; j < 3; j++) {
		snprintf(key, sizeof(key), "k%u", j);
		fill(buf, 64 + j, cls, i, j);
		if ((rc = lode_kv_put(ct, oid_of(LODE_OT_KV, cls, i), key, buf, 64 + j, NULL)) < 0)
			return rc;
	}
	for (unsigned j = 0; j < 2; j++) {
		struct lode_key k = {key, 0, "a", 1};

		k.dkey_len = (uint32_t)snprintf(key, sizeof(key), "d%u", j);
		fill(buf, 3000, cls, i, 10 + j);
		if ((rc = lode_obj_update(ct, oid_of(LODE_OT_KV, cls, 1000000 + i), &k, buf, 3000,
					  NULL)) < 0)
			return rc;
	}
	fill(buf, sizeof(buf), cls, i, 20);
	return lode_array_write(ct, oid_of(LODE_OT_ARRAY, cls, i), CHUNK, 1000, buf, sizeof(buf),
				NULL);
}

/* Read object i back: 0, a negative error, or 1 when bytes differ. */
static int obj_check(lode_cont_t *ct, unsigned cls, unsigned i)
{
	uint8_t want[3 * CHUNK + 100], got[3 * CHUNK + 100];
	char key[32];
	uint32_t len;
	int rc;

	for (unsigned j = 0; j < 3; j++) {
		/* A kv key is a dkey whose value is akey "v" (liblode's kv). */
		struct lode_key k = {key, 0, "v", 1};

		k.dkey_len = (uint32_t)snprintf(key, sizeof(key), "k%u", j);
		fill(want, 64 + j, cls, i, j);
		rc = lode_obj_fetch(ct, oid_of(LODE_OT_KV, cls, i), at, &k, got, sizeof(got), &len,
				    NULL);
		if (j == 0 && no_k0) {
			if (rc != -ENOENT)
				return rc < 0 ? rc : 1;
			continue;
		}
		if (rc < 0)
			return rc;
		if (len != 64 + j || memcmp(got, want, len))
			return 1;
	}
	for (unsigned j = 0; j < 2; j++) {
		struct lode_key k = {key, 0, "a", 1};

		k.dkey_len = (uint32_t)snprintf(key, sizeof(key), "d%u", j);
		fill(want, 3000, cls, i, 10 + j);
		if ((rc = lode_obj_fetch(ct, oid_of(LODE_OT_KV, cls, 1000000 + i), at, &k, got,
					 sizeof(got), &len, NULL)) < 0)
			return rc;
		if (len != 3000 || memcmp(got, want, len))
			return 1;
	}
	fill(want, sizeof(want), cls, i, 20);
	memset(got, 0xee, sizeof(got));
	if ((rc = lode_array_read(ct, oid_of(LODE_OT_ARRAY, cls, i), CHUNK, at, 1000, got,
				  sizeof(got), NULL)) < 0)
		return rc;
	return memcmp(got, want, sizeof(got)) ? 1 : 0;
}

static void open_cont(const char *addr, const char *label, lode_conn_t **c, lode_cont_t **ct)
{
	int rc;

	if ((rc = lode_connect(addr, NULL, c)) < 0)
		die("connect", rc);
	if ((rc = lode_cont_open(*c, label, ct)) < 0)
		die("cont open", rc);
}

static int cmd_rw(lode_conn_t *c, lode_cont_t *ct, unsigned n)
{
	static const char *const names[] = {"S1", "S2", "SX", "RP_2", "RP_3"};
	unsigned classes[6] = {0};
	int rc;

	for (unsigned k = 0; k < 5; k++) {
		struct layout_class lc;

		layout_class_parse(names[k], &lc);
		classes[k + 1] = lc.id;
	}
	for (unsigned k = 0; k < 6; k++)
		for (unsigned i = 0; i < n; i++)
			if ((rc = obj_write(ct, classes[k], i)) < 0)
				die(k ? names[k - 1] : "class 0: write", rc);
	for (unsigned k = 0; k < 6; k++) {
		for (unsigned i = 0; i < n; i++) {
			if ((rc = obj_check(ct, classes[k], i)) != 0) {
				printf("FAIL class %s object %u reads back: %d\n",
				       k ? names[k - 1] : "0", i, rc);
				return 1;
			}
		}
	}
	printf("ok   %u objects of each class read back byte for byte (%u engines)\n", n,
	       c->nengines);
	return 0;
}

static int cmd_spread(lode_conn_t *c, lode_cont_t *ct, unsigned n)
{
	struct lode_target_status st[CONN_TARGETS_MAX];
	int rc, nt;

	for (unsigned i = 0; i < n; i++) {
		char v[8] = "v";

		if ((rc = lode_kv_put(ct, oid_of(LODE_OT_KV, 1, 500000 + i), "k", v, 1, NULL)) < 0)
			die("spread write", rc);
	}
	if ((nt = lode_status(c, st, CONN_TARGETS_MAX)) < 0)
		die("status", nt);
	if (c->nengines < 3) {
		printf("FAIL the connection has %u engines, expected 3\n", c->nengines);
		return 1;
	}
	for (unsigned e = 0; e < c->nengines; e++) {
		for (unsigned t = c->eng[e].first; t < c->eng[e].first + c->eng[e].ntgts; t++) {
			if (st[t].records == 0) {
				printf("FAIL engine %u target %u holds no record after %u objects\n",
				       c->eng[e].id, t - c->eng[e].first, n);
				return 1;
			}
		}
	}
	printf("ok   %u S1 objects reach every target of all %u engines (%d targets)\n", n,
	       c->nengines, nt);
	return 0;
}

static int cmd_verify(lode_cont_t *ct, unsigned cls, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		int rc = obj_check(ct, cls, i);

		if (rc != 0) {
			printf("FAIL object %u of %u reads back: %d (%s)\n", i, n, rc,
			       rc < 0 ? lode_strerror(rc) : "bytes differ");
			return 1;
		}
	}
	printf("ok   all %u acknowledged objects read back\n", n);
	return 0;
}

static int cmd_stream(lode_cont_t *ct, unsigned secs)
{
	int64_t end = now_ms() + secs * 1000;
	unsigned n = 0;
	int rc;

	while (now_ms() < end) {
		if ((rc = obj_write(ct, LAYOUT_CLASS_RP_2, n)) < 0) {
			printf("FAIL stream write %u: %d (%s)\n", n, rc, lode_strerror(rc));
			return 1;
		}
		n++;
	}
	printf("ok   %u RP_2 objects written without an error\n", n);
	printf("count %u\n", n);
	fflush(stdout);
	return cmd_verify(ct, LAYOUT_CLASS_RP_2, n);
}

static int cmd_write(lode_cont_t *ct, unsigned n)
{
	int rc;

	for (unsigned i = 0; i < n; i++)
		if ((rc = obj_write(ct, LAYOUT_CLASS_RP_2, i)) < 0) {
			printf("FAIL write %u: %d (%s)\n", i, rc, lode_strerror(rc));
			return 1;
		}
	printf("ok   %u RP_2 objects written (generation %u)\n", n, gen);
	return 0;
}

static int cmd_remove(lode_cont_t *ct, unsigned n, bool whole)
{
	int rc;

	for (unsigned i = 0; i < n; i++) {
		struct lode_oid oid = oid_of(LODE_OT_KV, LAYOUT_CLASS_RP_2, i);

		rc = whole ? lode_obj_punch(ct, oid, NULL) : lode_kv_remove(ct, oid, "k0", NULL);
		if (rc < 0) {
			printf("FAIL remove %u: %d (%s)\n", i, rc, lode_strerror(rc));
			return 1;
		}
	}
	printf("ok   %s of %u RP_2 objects removed\n", whole ? "the kv objects" : "k0", n);
	return 0;
}

/* Akey a of shapes object i; its expected size and bytes in phase ph
 * (1: as written first, 2: as changed). */
static int shape_check(lode_cont_t *ct, unsigned i, const char *a, unsigned ph)
{
	struct lode_oid oid = oid_of(LODE_OT_KV, LAYOUT_CLASS_RP_2, 2000000 + i);
	struct lode_key k = {"s", 1, a, 1};
	uint8_t want[5000] = {0}, got[5000];
	uint64_t size, n = a[0] == 't' ? 3000 : a[0] == 'z' ? (ph == 1 ? 5000 : 4950)
								: (ph == 1 ? 1000 : 2000);
	int rc;

	if (a[0] == 't') {
		fill(want, 3000, 0, i, 31);
	} else {
		fill(want, a[0] == 'z' ? 4900 : 1000, 0, i, a[0] == 'z' ? 32 : 33);
	}
	if ((rc = lode_obj_size(ct, oid, at, &k, &size)) < 0)
		return rc;
	if (size != n) {
		printf("FAIL shapes object %u akey %s: size %llu, expected %llu\n", i, a,
		       (unsigned long long)size, (unsigned long long)n);
		return 1;
	}
	if ((rc = lode_obj_read(ct, oid, at, &k, 0, got, (uint32_t)n, NULL)) < 0)
		return rc;
	if (memcmp(got, want, n)) {
		printf("FAIL shapes object %u akey %s: bytes differ\n", i, a);
		return 1;
	}
	return 0;
}

static int cmd_shapes(lode_cont_t *ct, unsigned ph)
{
	uint8_t buf[5000];
	int rc = 0;

	for (unsigned i = 0; i < 60 && rc == 0; i++) {
		struct lode_oid oid = oid_of(LODE_OT_KV, LAYOUT_CLASS_RP_2, 2000000 + i);
		struct lode_key t = {"s", 1, "t", 1}, z = {"s", 1, "z", 1}, y = {"s", 1, "y", 1};

		if (ph == 1) {
			fill(buf, 100, 0, i, 30);
			rc = lode_obj_update(ct, oid, &t, buf, 100, NULL);
			fill(buf, 4900, 0, i, 32);
			memset(buf + 4900, 0, 100);
			rc = rc ? rc : lode_obj_write(ct, oid, &z, 0, buf, 5000, NULL);
			fill(buf, 1000, 0, i, 33);
			rc = rc ? rc : lode_obj_write(ct, oid, &y, 0, buf, 1000, NULL);
		} else if (ph == 2) {
			rc = lode_akey_punch(ct, oid, &t, NULL);
			fill(buf, 3000, 0, i, 31);
			rc = rc ? rc : lode_obj_write(ct, oid, &t, 0, buf, 3000, NULL);
			rc = rc ? rc : lode_range_punch(ct, oid, &z, 4950, 50, NULL);
			memset(buf, 0, 1000);
			rc = rc ? rc : lode_obj_write(ct, oid, &y, 1000, buf, 1000, NULL);
		} else {
			if (ph == 3)
				rc = shape_check(ct, i, "t", 2);
			rc = rc ? rc : shape_check(ct, i, "z", ph == 3 ? 2 : 1);
			rc = rc ? rc : shape_check(ct, i, "y", ph == 3 ? 2 : 1);
		}
	}
	if (rc < 0)
		printf("FAIL shapes phase %u: %d (%s)\n", ph, rc, lode_strerror(rc));
	if (rc == 0)
		printf("ok   shapes phase %u on 60 objects\n", ph);
	return rc ? 1 : 0;
}

static int cmd_s1dead(lode_cont_t *ct, unsigned n)
{
	unsigned ok = 0, down = 0;
	int64_t worst = 0;

	for (unsigned i = 0; i < n; i++) {
		int64_t t0 = now_ms();
		int rc = obj_write(ct, 1, 700000 + i);

		if (rc == 0 && (rc = obj_check(ct, 1, 700000 + i)) > 0) {
			printf("FAIL S1 object %u, written, reads back wrong\n", i);
			return 1;
		}
		if (now_ms() - t0 > worst)
			worst = now_ms() - t0;
		if (rc == 0)
			ok++;
		else if (rc == -EHOSTDOWN)
			down++;
		else
			die("S1 with an engine dead", rc);
	}
	if (!ok || !down || worst > 1000) {
		printf("FAIL S1 with an engine dead: %u ok, %u -EHOSTDOWN, slowest %lld ms\n", ok,
		       down, (long long)worst);
		return 1;
	}
	printf("ok   S1 with an engine dead: %u served, %u -EHOSTDOWN, slowest %lld ms\n", ok,
	       down, (long long)worst);
	return 0;
}

/* FILE's appearance, for up to a minute: 0, or 1 when it did not appear. */
static int file_wait(const char *file)
{
	for (int64_t end = now_ms() + 60000; access(file, F_OK) != 0; usleep(50000))
		if (now_ms() > end) {
			printf("FAIL %s did not appear\n", file);
			return 1;
		}
	return 0;
}

static int cmd_late(lode_conn_t *c, lode_cont_t *ct, unsigned n, const char *file)
{
	unsigned first, ntgts;
	int rc;

	if ((rc = conn_engine_targets(c, 2, &first, &ntgts)) != -ENOENT) {
		printf("FAIL engine 2 is reachable before it is back: %d\n", rc);
		return 1;
	}
	printf("connected\n");
	fflush(stdout);
	if (file_wait(file))
		return 1;
	for (unsigned i = 0; i < n; i++)
		if ((rc = obj_write(ct, LAYOUT_CLASS_RP_3, i)) < 0) {
			printf("FAIL RP_3 write %u after engine 2 came back: %d (%s)\n", i, rc,
			       lode_strerror(rc));
			return 1;
		}
	if ((rc = conn_engine_targets(c, 2, &first, &ntgts)) < 0) {
		printf("FAIL engine 2 is not connected after the writes: %d (%s)\n", rc,
		       lode_strerror(rc));
		return 1;
	}
	printf("ok   engine 2 (back after connect) connected with %u targets; %u RP_3 objects "
	       "written\n",
	       ntgts, n);
	return cmd_verify(ct, LAYOUT_CLASS_RP_3, n);
}

/* Whether the connection's map has engine id UP. */
static bool engine_up(lode_conn_t *c, uint32_t id)
{
	const struct layout_engine *le;
	bool up;

	pthread_mutex_lock(&c->lock);
	le = c->map ? layout_map_engine(c->map, id) : NULL;
	up = le && le->state == LAYOUT_UP;
	pthread_mutex_unlock(&c->lock);
	return up;
}

static int cmd_unreached(lode_conn_t *c, lode_cont_t *ct, const char *label)
{
	unsigned first, ntgts;
	lode_epoch_t ep;
	int rc, bad = 0;

	if ((rc = conn_engine_targets(c, 1, &first, &ntgts)) != -ENOENT) {
		printf("FAIL engine 1 is connected (%d): it should not answer\n", rc);
		return 1;
	}
	if ((rc = lode_cont_create(c, label, NULL)) != -EHOSTDOWN) {
		printf("FAIL container %s made without engine 1: %d (%s), expected -EHOSTDOWN\n",
		       label, rc, lode_strerror(rc));
		bad = 1;
	}
	if ((rc = lode_snap_create(ct, &ep)) != -EHOSTDOWN) {
		printf("FAIL a snapshot taken without engine 1: %d (%s), expected -EHOSTDOWN\n", rc,
		       lode_strerror(rc));
		bad = 1;
	}
	if (!engine_up(c, 1)) {
		printf("FAIL engine 1 is no longer UP in the map: the refusals prove nothing\n");
		bad = 1;
	}
	if (bad)
		return 1;
	printf("ok   engine 1 UP and not answering: container %s and a snapshot refused with "
	       "-EHOSTDOWN\n",
	       label);
	return 0;
}

static int cmd_mklate(const char *addr, const char *label, unsigned n, const char *file)
{
	lode_conn_t *c;
	lode_cont_t *ct;
	int rc;

	if ((rc = lode_connect(addr, NULL, &c)) < 0)
		die("connect", rc);
	printf("connected\n");
	fflush(stdout);
	if (file_wait(file))
		return 1;
	if ((rc = lode_cont_create(c, label, NULL)) < 0)
		die("cont create after the wait", rc);
	if ((rc = lode_cont_open(c, label, &ct)) < 0)
		die("cont open", rc);
	if ((rc = cmd_write(ct, n)) == 0)
		rc = cmd_verify(ct, LAYOUT_CLASS_RP_2, n);
	for (unsigned t = 0; rc == 0 && t < c->ntargets; t++) {
		uint8_t raw[64 * 8];
		struct conn_tgt_io io = {.epoch = LODE_EPOCH_MAX, .in = raw, .cap = sizeof(raw),
					 .max = 64};
		int trc;

		if (!conn_target_live(c, t)) {
			printf("FAIL target %u is not reachable\n", t);
			rc = 1;
		} else if ((trc = conn_tgt_io(ct, t, NET_OP_SNAP_LIST, (struct lode_oid){0, 0}, NULL,
					      &io)) < 0) {
			printf("FAIL target %u: the container's snapshots: %d (%s)\n", t, trc,
			       lode_strerror(trc));
			rc = 1;
		}
	}
	if (rc == 0)
		printf("ok   every target has the container\ntargets %u\n", c->ntargets);
	lode_cont_close(ct);
	lode_disconnect(c);
	return rc;
}

int main(int argc, char **argv)
{
	lode_conn_t *c;
	lode_cont_t *ct;
	unsigned n;
	int rc;

	if (argc != 5 && !(argc == 6 && (strcmp(argv[1], "late") == 0 ||
					 strcmp(argv[1], "mklate") == 0))) {
		fprintf(stderr, "usage: place_client rw|spread|stream|verify|write|remove|opunch|shapes|s1dead "
				"ADDR CONT N\n"
				"       place_client unreached ADDR CONT NEW\n"
				"       place_client late|mklate ADDR CONT N FILE\n");
		return 2;
	}
	n = (unsigned)strtoul(argv[4], NULL, 10);
	if (getenv("PLACE_GEN"))
		gen = (unsigned)strtoul(getenv("PLACE_GEN"), NULL, 10);
	if (getenv("PLACE_EPOCH"))
		at = strtoull(getenv("PLACE_EPOCH"), NULL, 10);
	no_k0 = getenv("PLACE_NO_K0") && strcmp(getenv("PLACE_NO_K0"), "1") == 0;
	if (strcmp(argv[1], "mklate") == 0)
		return cmd_mklate(argv[2], argv[3], n, argv[5]);
	open_cont(argv[2], argv[3], &c, &ct);
	if (strcmp(argv[1], "rw") == 0)
		rc = cmd_rw(c, ct, n);
	else if (strcmp(argv[1], "spread") == 0)
		rc = cmd_spread(c, ct, n);
	else if (strcmp(argv[1], "stream") == 0)
		rc = cmd_stream(ct, n);
	else if (strcmp(argv[1], "verify") == 0)
		rc = cmd_verify(ct, LAYOUT_CLASS_RP_2, n);
	else if (strcmp(argv[1], "write") == 0)
		rc = cmd_write(ct, n);
	else if (strcmp(argv[1], "remove") == 0)
		rc = cmd_remove(ct, n, false);
	else if (strcmp(argv[1], "opunch") == 0)
		rc = cmd_remove(ct, n, true);
	else if (strcmp(argv[1], "shapes") == 0)
		rc = cmd_shapes(ct, n);
	else if (strcmp(argv[1], "s1dead") == 0)
		rc = cmd_s1dead(ct, n);
	else if (strcmp(argv[1], "late") == 0)
		rc = cmd_late(c, ct, n, argv[5]);
	else if (strcmp(argv[1], "unreached") == 0)
		rc = cmd_unreached(c, ct, argv[4]);
	else
		rc = 2;
	lode_cont_close(ct);
	lode_disconnect(c);
	return rc;
}
