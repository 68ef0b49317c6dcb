/*
 * libFuzzer target: the pool map's decoder and placement (src/layout).
 *
 * The input goes to layout_map_decode as it is. It must be refused with
 * -EPROTO, or give a map that is consistent (derived fields as recomputed
 * here from the states, ids unique, NEW engines last), that encodes back to
 * exactly the input, and on which placement of a few keys of several
 * classes either gives a group of distinct engines in the layout or
 * -ENOSPC, and -ENOSPC only when too few engines are in the layout.
 *
 * The same bytes are then read as a program of map changes (add, delete,
 * set an engine's or a target's state) run on an empty map: every call
 * must return 0 or one of the codes layout.h lists for it, the derived
 * fields must stay consistent after every step, and the map at the end
 * must survive encode, decode, encode byte for byte. That reaches states
 * of the map the decoder alone rarely sees. Finally that map's wire form,
 * damaged in a few bytes the input chooses, goes to the decoder: near
 * misses of valid maps. Any failure abort()s.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "layout/layout.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond))                                                                       \
			abort();                                                                   \
	} while (0)

/* The derived fields, recomputed the slow way. */
static void check_map(const struct layout_map *m)
{
	uint32_t nbuckets = 0, nin = 0, width = 0;
	bool new_seen = false;

	CHECK(m->nengines <= LAYOUT_ENGINES_MAX && m->nengines <= m->cap);
	for (uint32_t s = 0; s < m->nengines; s++) {
		const struct layout_engine *e = &m->engines[s];
		unsigned tin = 0;

		CHECK(e->state >= LAYOUT_UP && e->state <= LAYOUT_OUT);
		CHECK(e->ntgts >= 1 && e->ntgts <= LAYOUT_TGTS_MAX);
		for (unsigned t = 0; t < e->ntgts; t++) {
			CHECK(e->tgt[t] >= LAYOUT_UP && e->tgt[t] <= LAYOUT_OUT &&
			      e->tgt[t] != LAYOUT_NEW);
			tin += layout_state_in(e->tgt[t]);
		}
		CHECK(e->ntgts_in == tin);
		CHECK(e->in == (layout_state_in(e->state) && tin > 0));
		nin += e->in;
		if (e->state == LAYOUT_NEW)
			new_seen = true;
		CHECK(!new_seen || e->state == LAYOUT_NEW);
		if (!new_seen) {
			nbuckets++;
			width += e->ntgts;
		}
		CHECK(layout_map_engine(m, e->id) == e);
		if (s)
			CHECK(m->engines[m->by_id[s - 1]].id < m->engines[m->by_id[s]].id);
	}
	CHECK(m->nbuckets == nbuckets && m->nin == nin && m->width == width);
}

/* Encode, decode, encode: the same bytes; expect (if given) them too. */
static void check_roundtrip(const struct layout_map *m, const uint8_t *expect, size_t len)
{
	size_t n = layout_map_encode_size(m);
	uint8_t *a = malloc(n), *b = malloc(n);
	struct layout_map *d;

	CHECK(a && b);
	CHECK(layout_map_encode(m, a, n) == (int)n);
	if (n)
		CHECK(layout_map_encode(m, b, n - 1) == -ENOBUFS);
	if (expect)
		CHECK(len == n && memcmp(a, expect, n) == 0);
	CHECK(layout_map_decode(a, n, &d) == 0);
	check_map(d);
	CHECK(d->version == m->version && d->nengines == m->nengines);
	CHECK(layout_map_encode(d, b, n) == (int)n);
	CHECK(memcmp(a, b, n) == 0);
	layout_map_free(d);
	free(a);
	free(b);
}

static void check_place(const struct layout_map *m, uint64_t seed)
{
	static const char *const names[] = {"S1", "S3", "SX", "RP_2", "RP_3", "EC_4P2", "EC_8P2"};

	for (size_t ci = 0; ci < sizeof(names) / sizeof(names[0]); ci++) {
		struct layout_class c;

		CHECK(layout_class_parse(names[ci], &c) == 0);
		for (uint64_t k = 0; k < 4; k++) {
			struct lode_oid oid = lode_oid_make(LODE_OT_KV, c.id, seed + k, seed * 31 + k);
			struct layout_group g;
			int rc = layout_dkey_place(m, oid, NULL, seed ^ (k << 40), &g);

			if (c.groups == 0 && m->width == 0) {
				CHECK(rc == -ENOSPC);
				continue;
			}
			if (m->nin < c.group_size) {
				CHECK(rc == -ENOSPC);
				continue;
			}
			CHECK(rc == 0 && g.size == c.group_size);
			CHECK(g.group < (c.groups ? c.groups : m->width));
			for (unsigned i = 0; i < g.size; i++) {
				const struct layout_engine *e = layout_map_engine(m, g.shard[i].engine);

				CHECK(e && e->in && g.shard[i].tgt < e->ntgts);
				CHECK(layout_state_in(e->tgt[g.shard[i].tgt]));
				for (unsigned j = 0; j < i; j++)
					CHECK(g.shard[j].engine != g.shard[i].engine);
			}
		}
	}
}

/*
 * m's wire form damaged by the input's last bytes, read as (offset, xor)
 * pairs: near misses of a valid map, which raw inputs seldom are. Each is
 * refused with -EPROTO or decodes to a map that encodes back to it.
 */
static void damage(const struct layout_map *m, const uint8_t *p, size_t size)
{
	size_t n = layout_map_encode_size(m), npairs = size / 4 < 4 ? size / 4 : 4;
	uint8_t *a = malloc(n), *b = malloc(n);
	struct layout_map *d;
	int rc;

	CHECK(a && b && layout_map_encode(m, a, n) == (int)n);
	for (size_t i = 0; i < npairs; i++) {
		const uint8_t *q = p + size - 2 * (i + 1);

		a[(q[0] | (size_t)i << 8) % n] ^= q[1];
	}
	rc = layout_map_decode(a, n, &d);
	if (rc == 0) {
		check_map(d);
		CHECK(layout_map_encode(d, b, n) == (int)n && memcmp(a, b, n) == 0);
		check_place(d, n);
		layout_map_free(d);
	} else {
		CHECK(rc == -EPROTO);
	}
	free(a);
	free(b);
}

static bool rc_in(int rc, const int *ok, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (rc == ok[i])
			return true;
	return false;
}

#define RC_IN(rc, ...)                                                                             \
	rc_in(rc, (const int[]){__VA_ARGS__}, sizeof((const int[]){__VA_ARGS__}) / sizeof(int))

/* The input as a program of map changes, 4 bytes a step. */
static void run_program(const uint8_t *p, size_t size)
{
	struct layout_map *m;

	CHECK(layout_map_create(size, &m) == 0);
	for (size_t i = 0; i + 4 <= size && i < 4 * 512; i += 4) {
		uint32_t id = p[i + 1] % 24; /* few ids, so that they collide */
		unsigned arg = p[i + 2], st = p[i + 3] % 7;
		uint64_t v = m->version;
		int rc;

		switch (p[i] % 5) {
		case 0:
		case 1:
			rc = layout_map_engine_add(m, id, arg % 9, p[i] % 5 ? LAYOUT_NEW : st);
			CHECK(RC_IN(rc, 0, -EEXIST, -EINVAL, -EBUSY));
			break;
		case 2:
			rc = layout_map_engine_del(m, id);
			CHECK(RC_IN(rc, 0, -ENOENT, -EPERM));
			break;
		case 3:
			rc = layout_map_engine_set(m, id, st);
			CHECK(RC_IN(rc, 0, -ENOENT, -EINVAL, -EPERM, -EBUSY));
			break;
		default:
			rc = layout_map_target_set(m, id, arg % 10, st);
			CHECK(RC_IN(rc, 0, -ENOENT, -ERANGE, -EINVAL, -EPERM));
			break;
		}
		CHECK(m->version == v || (rc == 0 && m->version == v + 1));
		check_map(m);
	}
	check_roundtrip(m, NULL, 0);
	check_place(m, size);
	damage(m, p, size);
	layout_map_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct layout_map *m = NULL;
	int rc = layout_map_decode(size ? data : NULL, size, &m);

	if (rc == 0) {
		struct layout_map *d;

		check_map(m);
		check_roundtrip(m, data, size);
		check_place(m, size);
		/* A change to a decoded map: still consistent, still round trips. */
		CHECK(layout_map_dup(m, &d) == 0);
		if (d->nengines) {
			rc = layout_map_engine_set(d, d->engines[0].id, LAYOUT_OUT);
			CHECK(rc == 0 || rc == -EPERM);
			check_map(d);
			check_roundtrip(d, NULL, 0);
			check_place(d, size + 1);
		}
		layout_map_free(d);
		layout_map_free(m);
	} else {
		CHECK(rc == -EPROTO && m == NULL);
	}
	run_program(data, size);
	return 0;
}
