/*
 * Tests for the data-plane wire codec (src/net/proto.c). The wire format is
 * a contract with peers built from other versions, so the test does not
 * trust the encoder: wire_args() and wire_welcome() write messages byte by
 * byte from the layout proto.h documents, and every round trip is checked
 * against them. The same builders write the malformed messages (an empty
 * key, a bad bulk kind, an anchor out of range) that the encoder refuses to
 * produce. Buffers handed to a decoder or an encoder under a length limit
 * are malloc'ed to exactly that length, so that AddressSanitizer catches a
 * read or write one byte past it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/proto.h"

#define K (NET_FLD_CONT | NET_FLD_OID | NET_FLD_DKEY | NET_FLD_AKEY)

/*
 * What each opcode carries, written out again rather than taken from
 * net_op_fields(): a change to proto.c's table changes the wire format and
 * must show up here.
 */
static const struct op_spec {
	uint16_t op;
	const char *name;
	uint32_t fields;
	int has_anchor;
} op_spec[] = {
	{NET_OP_PING, "ping", 0, 0},
	{NET_OP_STATUS, "status", 0, 0},
	{NET_OP_CONT_CREATE, "cont_create", NET_FLD_CONT, 0},
	{NET_OP_CONT_DESTROY, "cont_destroy", NET_FLD_CONT, 0},
	{NET_OP_SNAP_CREATE, "snap_create", NET_FLD_CONT | NET_FLD_EPOCH, 0},
	{NET_OP_SNAP_DESTROY, "snap_destroy", NET_FLD_CONT | NET_FLD_EPOCH, 0},
	{NET_OP_SNAP_LIST, "snap_list", NET_FLD_CONT | NET_FLD_MAX, 0},
	{NET_OP_SV_UPDATE, "sv_update", K | NET_FLD_EPOCH | NET_FLD_LEN | NET_FLD_BULK, 0},
	{NET_OP_SV_FETCH, "sv_fetch", K | NET_FLD_EPOCH | NET_FLD_LEN | NET_FLD_BULK, 0},
	{NET_OP_ARR_UPDATE, "arr_update", K | NET_FLD_EPOCH | NET_FLD_OFF | NET_FLD_LEN | NET_FLD_BULK,
	 0},
	{NET_OP_ARR_FETCH, "arr_fetch", K | NET_FLD_EPOCH | NET_FLD_OFF | NET_FLD_LEN | NET_FLD_BULK,
	 0},
	{NET_OP_ARR_SIZE, "arr_size", K | NET_FLD_EPOCH, 0},
	{NET_OP_OBJ_PUNCH, "obj_punch", NET_FLD_CONT | NET_FLD_OID | NET_FLD_EPOCH, 0},
	{NET_OP_DKEY_PUNCH, "dkey_punch", NET_FLD_CONT | NET_FLD_OID | NET_FLD_DKEY | NET_FLD_EPOCH,
	 0},
	{NET_OP_AKEY_PUNCH, "akey_punch", K | NET_FLD_EPOCH, 0},
	{NET_OP_ARR_PUNCH, "arr_punch", K | NET_FLD_EPOCH | NET_FLD_OFF | NET_FLD_LEN, 0},
	{NET_OP_OBJ_LIST, "obj_list", NET_FLD_CONT | NET_FLD_EPOCH | NET_FLD_ANCHOR | NET_FLD_MAX, 1},
	{NET_OP_DKEY_LIST, "dkey_list",
	 NET_FLD_CONT | NET_FLD_OID | NET_FLD_EPOCH | NET_FLD_ANCHOR | NET_FLD_MAX, 1},
	{NET_OP_AKEY_LIST, "akey_list",
	 NET_FLD_CONT | NET_FLD_OID | NET_FLD_DKEY | NET_FLD_EPOCH | NET_FLD_ANCHOR | NET_FLD_MAX, 1},
	{NET_OP_AGGREGATE, "aggregate", NET_FLD_CONT | NET_FLD_EPOCH, 0},
	{NET_OP_HELLO, "hello", 0, 0},
	{NET_OP_BYE, "bye", 0, 0},
	{NET_OP_LEASE, "lease", K | NET_FLD_EPOCH | NET_FLD_OFF | NET_FLD_LEN | NET_FLD_MAX, 0},
	{NET_OP_DKEY_DROP, "dkey_drop", NET_FLD_CONT | NET_FLD_OID | NET_FLD_DKEY, 0},
	{NET_OP_OBJ_FOLD, "obj_fold", NET_FLD_CONT | NET_FLD_OID, 0},
};
#define NSPEC (sizeof(op_spec) / sizeof(op_spec[0]))

static const uint16_t bad_ops[] = {0, NET_OP_COUNT, 0xffff};

/* Key, anchor and rkey bytes, each one longer than its limit allows. */
static uint8_t dkey_buf[LODE_KEY_MAX + 1];
static uint8_t akey_buf[LODE_KEY_MAX + 1];
static uint8_t anchor_buf[2 + LODE_KEY_MAX + 1];
static uint8_t rkey_buf[NET_RKEY_MAX + 1];

/* A message under construction, written independently of proto.c. */
struct wire {
	uint8_t b[16384];
	size_t n;
};

static void w_le(struct wire *w, uint64_t v, unsigned bytes)
{
	assert_true(w->n + bytes <= sizeof(w->b));
	for (unsigned i = 0; i < bytes; i++)
		w->b[w->n++] = (uint8_t)(v >> (8 * i));
}

static void w_bytes(struct wire *w, const void *p, size_t n)
{
	assert_true(w->n + n <= sizeof(w->b));
	if (n)
		memcpy(w->b + w->n, p, n);
	w->n += n;
}

static void w_anchor(struct wire *w, const struct net_anchor *an)
{
	w_le(w, an->eof, 1);
	w_le(w, an->len, 2);
	w_bytes(w, an->key, an->len);
}

/* The arguments of op as proto.h lays them out, whatever their values. */
static void wire_args(uint32_t f, const struct net_args *a, struct wire *w)
{
	w->n = 0;
	if (f & NET_FLD_CONT)
		w_bytes(w, a->cont.b, 16);
	if (f & NET_FLD_OID) {
		w_le(w, a->oid.hi, 8);
		w_le(w, a->oid.lo, 8);
	}
	if (f & NET_FLD_DKEY) {
		w_le(w, a->dkey_len, 2);
		w_bytes(w, a->dkey, a->dkey_len);
	}
	if (f & NET_FLD_AKEY) {
		w_le(w, a->akey_len, 2);
		w_bytes(w, a->akey, a->akey_len);
	}
	if (f & NET_FLD_EPOCH)
		w_le(w, a->epoch, 8);
	if (f & NET_FLD_OFF)
		w_le(w, a->off, 8);
	if (f & NET_FLD_LEN)
		w_le(w, a->len, 8);
	if (f & NET_FLD_ANCHOR)
		w_anchor(w, &a->anchor);
	if (f & NET_FLD_MAX)
		w_le(w, a->max, 4);
	if (f & NET_FLD_BULK) {
		w_le(w, a->bulk, 1);
		if (a->bulk == NET_BULK_RMA) {
			w_le(w, a->rma_addr, 8);
			w_le(w, a->rma_reg, 8);
			w_le(w, a->rkey_len, 2);
			w_bytes(w, a->rkey, a->rkey_len);
		}
	}
}

/* Every field set, every byte of every number different from the others. */
static void args_fill(struct net_args *a)
{
	memset(a, 0, sizeof(*a));
	for (unsigned i = 0; i < 16; i++)
		a->cont.b[i] = (uint8_t)(0xc0 + i);
	a->oid.hi = 0x0102030405060708ull;
	a->oid.lo = 0x1112131415161718ull;
	a->dkey = dkey_buf;
	a->dkey_len = 7;
	a->akey = akey_buf;
	a->akey_len = 9;
	a->epoch = 0x2122232425262728ull;
	a->off = 0x3132333435363738ull;
	a->len = 0x4142434445464748ull;
	a->max = 0x51525354u;
	a->anchor.eof = 1;
	a->anchor.len = 11;
	a->anchor.key = anchor_buf;
	a->bulk = NET_BULK_RMA;
	a->rma_addr = 0x6162636465666768ull;
	a->rma_reg = 0x7172737475767778ull;
	a->rkey_len = 13;
	a->rkey = rkey_buf;
}

/* p[0..n) lies inside buf[0..len). */
static void assert_inside(const uint8_t *p, size_t n, const uint8_t *buf, size_t len)
{
	assert_non_null(p);
	assert_true(p >= buf && n <= len && (size_t)(p - buf) <= len - n);
}

/*
 * got, decoded from buf[0..len), carries want's value in every field f
 * names and zero in every other; keys, anchor and rkey point into buf.
 */
static void args_check(uint32_t f, const struct net_args *want, const struct net_args *got,
		       const uint8_t *buf, size_t len)
{
	static const uint8_t zero16[16];

	assert_memory_equal(got->cont.b, (f & NET_FLD_CONT) ? want->cont.b : zero16, 16);
	assert_true(got->oid.hi == ((f & NET_FLD_OID) ? want->oid.hi : 0));
	assert_true(got->oid.lo == ((f & NET_FLD_OID) ? want->oid.lo : 0));
	if (f & NET_FLD_DKEY) {
		assert_int_equal(got->dkey_len, want->dkey_len);
		assert_inside(got->dkey, got->dkey_len, buf, len);
		assert_memory_equal(got->dkey, want->dkey, want->dkey_len);
	} else {
		assert_null(got->dkey);
		assert_int_equal(got->dkey_len, 0);
	}
	if (f & NET_FLD_AKEY) {
		assert_int_equal(got->akey_len, want->akey_len);
		assert_inside(got->akey, got->akey_len, buf, len);
		assert_memory_equal(got->akey, want->akey, want->akey_len);
	} else {
		assert_null(got->akey);
		assert_int_equal(got->akey_len, 0);
	}
	assert_true(got->epoch == ((f & NET_FLD_EPOCH) ? want->epoch : 0));
	assert_true(got->off == ((f & NET_FLD_OFF) ? want->off : 0));
	assert_true(got->len == ((f & NET_FLD_LEN) ? want->len : 0));
	assert_int_equal(got->max, (f & NET_FLD_MAX) ? want->max : 0);
	if (f & NET_FLD_ANCHOR) {
		assert_int_equal(got->anchor.eof, want->anchor.eof);
		assert_int_equal(got->anchor.len, want->anchor.len);
		assert_inside(got->anchor.key, got->anchor.len, buf, len);
		if (want->anchor.len)
			assert_memory_equal(got->anchor.key, want->anchor.key, want->anchor.len);
	} else {
		assert_int_equal(got->anchor.eof, 0);
		assert_int_equal(got->anchor.len, 0);
		assert_null(got->anchor.key);
	}
	if ((f & NET_FLD_BULK) && want->bulk == NET_BULK_RMA) {
		assert_int_equal(got->bulk, NET_BULK_RMA);
		assert_true(got->rma_addr == want->rma_addr);
		assert_true(got->rma_reg == want->rma_reg);
		assert_int_equal(got->rkey_len, want->rkey_len);
		assert_inside(got->rkey, got->rkey_len, buf, len);
		assert_memory_equal(got->rkey, want->rkey, want->rkey_len);
	} else {
		assert_int_equal(got->bulk, NET_BULK_NONE);
		assert_true(got->rma_addr == 0);
		assert_true(got->rma_reg == 0);
		assert_int_equal(got->rkey_len, 0);
		assert_null(got->rkey);
	}
}

/* A copy of p[0..n) in a buffer of exactly n bytes (1 when n is 0). */
static uint8_t *exact_copy(const void *p, size_t n)
{
	uint8_t *c = malloc(n ? n : 1);

	assert_non_null(c);
	if (n)
		memcpy(c, p, n);
	return c;
}

/* Encode a with op, check the bytes against the wire builder, decode, compare. */
static void args_round_trip(const struct op_spec *s, const struct net_args *a)
{
	struct wire want;
	uint8_t out[16384], *c;
	struct net_args got;
	int n;

	wire_args(s->fields, a, &want);
	n = net_args_encode(s->op, a, out, sizeof(out));
	assert_int_equal(n, (int)want.n);
	if (n)
		assert_memory_equal(out, want.b, want.n);
	c = exact_copy(out, (size_t)n);
	memset(&got, 0xa5, sizeof(got));
	assert_int_equal(net_args_decode(s->op, c, (size_t)n, &got), 0);
	args_check(s->fields, a, &got, c, (size_t)n);
	free(c);
}

/* Decode the wire builder's bytes for op into an exact buffer; return the code. */
static int args_decode_wire(uint16_t op, const struct wire *w)
{
	uint8_t *c = exact_copy(w->b, w->n);
	struct net_args got;
	int rc = net_args_decode(op, c, w->n, &got);

	free(c);
	return rc;
}

static void test_op_table(void **state)
{
	for (size_t i = 0; i < NSPEC; i++) {
		assert_int_equal(op_spec[i].op, i + 1);
		assert_int_equal(net_op_fields(op_spec[i].op), op_spec[i].fields);
		assert_string_equal(net_op_name(op_spec[i].op), op_spec[i].name);
		assert_int_equal(net_op_has_anchor(op_spec[i].op), op_spec[i].has_anchor);
	}
	assert_int_equal(NSPEC, NET_OP_COUNT - 1);
	for (size_t i = 0; i < sizeof(bad_ops) / sizeof(bad_ops[0]); i++) {
		assert_int_equal(net_op_fields(bad_ops[i]), 0);
		assert_string_equal(net_op_name(bad_ops[i]), "unknown");
		assert_int_equal(net_op_has_anchor(bad_ops[i]), 0);
	}
}

static void test_args_round_trip(void **state)
{
	struct net_args a;

	for (size_t i = 0; i < NSPEC; i++) {
		const struct op_spec *s = &op_spec[i];

		args_fill(&a);
		args_round_trip(s, &a);
		/* the other shapes of the variable fields */
		a.bulk = NET_BULK_NONE;
		a.anchor.eof = 0;
		a.anchor.len = 0;
		args_round_trip(s, &a);
		a.anchor.key = NULL; /* a zero-length anchor needs no bytes */
		args_round_trip(s, &a);
		/* every length at its upper limit, then at its lower one */
		args_fill(&a);
		a.dkey_len = LODE_KEY_MAX;
		a.akey_len = LODE_KEY_MAX;
		a.anchor.len = 2 + LODE_KEY_MAX;
		a.rkey_len = NET_RKEY_MAX;
		args_round_trip(s, &a);
		a.dkey_len = 1;
		a.akey_len = 1;
		a.anchor.len = 1;
		a.rkey_len = 1;
		args_round_trip(s, &a);
	}
}

/* One message pinned byte for byte, in case wire_args and proto.c agree on a mistake. */
static void test_args_golden(void **state)
{
	static const uint8_t want[] = {
		/* cont */
		0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd,
		0xce, 0xcf,
		/* oid hi, lo */
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 0x18, 0x17, 0x16, 0x15, 0x14, 0x13,
		0x12, 0x11,
		/* dkey "dk", akey "a" */
		0x02, 0x00, 'd', 'k', 0x01, 0x00, 'a',
		/* epoch */
		0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21,
		/* len */
		0x48, 0x47, 0x46, 0x45, 0x44, 0x43, 0x42, 0x41,
		/* bulk RMA, addr, reg, rkey "rk" */
		0x01, 0x68, 0x67, 0x66, 0x65, 0x64, 0x63, 0x62, 0x61, 0x78, 0x77, 0x76, 0x75, 0x74,
		0x73, 0x72, 0x71, 0x02, 0x00, 'r', 'k'};
	struct net_args a, got;
	uint8_t out[sizeof(want)];

	args_fill(&a);
	a.dkey = (const uint8_t *)"dk";
	a.dkey_len = 2;
	a.akey = (const uint8_t *)"a";
	a.akey_len = 1;
	a.rkey = (const uint8_t *)"rk";
	a.rkey_len = 2;
	assert_int_equal(net_args_encode(NET_OP_SV_FETCH, &a, out, sizeof(out)), sizeof(want));
	assert_memory_equal(out, want, sizeof(want));
	assert_int_equal(net_args_decode(NET_OP_SV_FETCH, want, sizeof(want), &got), 0);
	args_check(net_op_fields(NET_OP_SV_FETCH), &a, &got, want, sizeof(want));
}

/* Every proper prefix of every opcode's arguments is refused, and nothing past it is read. */
static void test_args_truncated(void **state)
{
	struct net_args a, got;
	struct wire w;

	for (size_t i = 0; i < NSPEC; i++) {
		const struct op_spec *s = &op_spec[i];

		for (int shape = 0; shape < 2; shape++) {
			args_fill(&a);
			if (shape)
				a.bulk = NET_BULK_NONE;
			wire_args(s->fields, &a, &w);
			for (size_t l = 0; l < w.n; l++) {
				uint8_t *c = exact_copy(w.b, l);

				assert_int_equal(net_args_decode(s->op, c, l, &got), -EPROTO);
				free(c);
			}
		}
		assert_int_equal(net_args_decode(s->op, NULL, 0, &got), s->fields ? -EPROTO : 0);
		/* a length without a buffer, even for the opcodes that carry nothing */
		assert_int_equal(net_args_decode(s->op, NULL, w.n + 1, &got), -EPROTO);
	}
}

static void test_args_trailing(void **state)
{
	struct net_args a;
	struct wire w;

	for (size_t i = 0; i < NSPEC; i++) {
		args_fill(&a);
		wire_args(op_spec[i].fields, &a, &w);
		w_le(&w, 0, 1);
		assert_int_equal(args_decode_wire(op_spec[i].op, &w), -EPROTO);
		a.bulk = NET_BULK_NONE;
		wire_args(op_spec[i].fields, &a, &w);
		w_le(&w, NET_BULK_NONE, 1);
		assert_int_equal(args_decode_wire(op_spec[i].op, &w), -EPROTO);
	}
}

/* Decoding and encoding a with a bad key both give rc. */
static void args_bad_key(const struct op_spec *s, const struct net_args *a, int rc)
{
	struct wire w;
	uint8_t out[16384];

	wire_args(s->fields, a, &w);
	assert_int_equal(args_decode_wire(s->op, &w), rc);
	assert_int_equal(net_args_encode(s->op, a, out, sizeof(out)), rc);
}

static void test_args_bad_keys(void **state)
{
	struct net_args a;
	unsigned tested = 0;

	/* 10 opcodes carry a dkey, 8 of them an akey too */
	for (size_t i = 0; i < NSPEC; i++) {
		const struct op_spec *s = &op_spec[i];

		if (s->fields & NET_FLD_DKEY) {
			args_fill(&a);
			a.dkey_len = 0;
			args_bad_key(s, &a, -LODE_EKEYEMPTY);
			a.dkey_len = LODE_KEY_MAX + 1;
			args_bad_key(s, &a, -ENAMETOOLONG);
			tested++;
		}
		if (s->fields & NET_FLD_AKEY) {
			args_fill(&a);
			a.akey_len = 0;
			args_bad_key(s, &a, -LODE_EKEYEMPTY);
			a.akey_len = LODE_KEY_MAX + 1;
			args_bad_key(s, &a, -ENAMETOOLONG);
			tested++;
		}
	}
	assert_int_equal(tested, 11 + 8);
}

/* A key length over the limit is refused even when the bytes it names are not there. */
static void test_args_key_len_alone(void **state)
{
	struct wire w = {.n = 0};
	uint8_t cont[16] = {0};

	w_bytes(&w, cont, 16);
	w_le(&w, 1, 8);
	w_le(&w, 2, 8);
	w_le(&w, 0xffff, 2);
	assert_int_equal(args_decode_wire(NET_OP_DKEY_PUNCH, &w), -ENAMETOOLONG);
	w.n -= 2;
	w_le(&w, 0, 2);
	assert_int_equal(args_decode_wire(NET_OP_DKEY_PUNCH, &w), -LODE_EKEYEMPTY);
}

static void test_args_unknown_op(void **state)
{
	struct net_args a, got;
	struct wire w;
	uint8_t out[256];

	args_fill(&a);
	wire_args(net_op_fields(NET_OP_SV_UPDATE), &a, &w);
	for (size_t i = 0; i < sizeof(bad_ops) / sizeof(bad_ops[0]); i++) {
		assert_int_equal(args_decode_wire(bad_ops[i], &w), -EOPNOTSUPP);
		assert_int_equal(net_args_decode(bad_ops[i], NULL, 0, &got), -EOPNOTSUPP);
		assert_int_equal(net_args_encode(bad_ops[i], &a, out, sizeof(out)), -EINVAL);
	}
}

static void test_args_bad_bulk(void **state)
{
	static const uint8_t kinds[] = {2, 0x7f, 0xff};
	struct net_args a;
	struct wire w;
	uint8_t out[16384];
	unsigned tested = 0;

	for (size_t i = 0; i < NSPEC; i++) {
		const struct op_spec *s = &op_spec[i];

		if (!(s->fields & NET_FLD_BULK))
			continue;
		tested++;
		for (size_t k = 0; k < sizeof(kinds); k++) {
			args_fill(&a);
			a.bulk = kinds[k];
			wire_args(s->fields, &a, &w);
			assert_int_equal(args_decode_wire(s->op, &w), -EPROTO);
			/* with the RMA fields behind it, as a confused peer might send */
			w_le(&w, a.rma_addr, 8);
			w_le(&w, a.rma_reg, 8);
			w_le(&w, a.rkey_len, 2);
			w_bytes(&w, a.rkey, a.rkey_len);
			assert_int_equal(args_decode_wire(s->op, &w), -EPROTO);
			assert_int_equal(net_args_encode(s->op, &a, out, sizeof(out)), -EINVAL);
		}

		args_fill(&a);
		a.rkey_len = 0;
		wire_args(s->fields, &a, &w);
		assert_int_equal(args_decode_wire(s->op, &w), -EPROTO);
		assert_int_equal(net_args_encode(s->op, &a, out, sizeof(out)), -EINVAL);

		a.rkey_len = NET_RKEY_MAX + 1;
		wire_args(s->fields, &a, &w);
		assert_int_equal(args_decode_wire(s->op, &w), -EPROTO);
		assert_int_equal(net_args_encode(s->op, &a, out, sizeof(out)), -EMSGSIZE);

		/* the largest rkey length with nothing behind it */
		wire_args(s->fields & ~NET_FLD_BULK, &a, &w);
		w_le(&w, NET_BULK_RMA, 1);
		w_le(&w, a.rma_addr, 8);
		w_le(&w, a.rma_reg, 8);
		w_le(&w, 0xffff, 2);
		assert_int_equal(args_decode_wire(s->op, &w), -EPROTO);
	}
	assert_int_equal(tested, 4);
}

static void test_args_bad_anchor(void **state)
{
	struct net_args a;
	struct wire w;
	uint8_t out[16384];
	unsigned tested = 0;

	for (size_t i = 0; i < NSPEC; i++) {
		const struct op_spec *s = &op_spec[i];

		if (!(s->fields & NET_FLD_ANCHOR))
			continue;
		tested++;
		args_fill(&a);
		a.anchor.eof = 2;
		wire_args(s->fields, &a, &w);
		assert_int_equal(args_decode_wire(s->op, &w), -EPROTO);
		assert_int_equal(net_args_encode(s->op, &a, out, sizeof(out)), -EINVAL);
		a.anchor.eof = 0xff;
		wire_args(s->fields, &a, &w);
		assert_int_equal(args_decode_wire(s->op, &w), -EPROTO);

		args_fill(&a);
		a.anchor.len = 2 + LODE_KEY_MAX + 1;
		wire_args(s->fields, &a, &w);
		assert_int_equal(args_decode_wire(s->op, &w), -EPROTO);
		assert_int_equal(net_args_encode(s->op, &a, out, sizeof(out)), -EINVAL);
	}
	assert_int_equal(tested, 3);
}

/* An encoder short of room says so and writes nothing past what it was given. */
static void test_args_encode_small(void **state)
{
	struct net_args a;
	uint8_t full[16384];

	for (size_t i = 0; i < NSPEC; i++) {
		const struct op_spec *s = &op_spec[i];
		int n;

		args_fill(&a);
		n = net_args_encode(s->op, &a, full, sizeof(full));
		assert_true(n >= 0);
		for (int cap = 0; cap < n; cap++) {
			uint8_t *c = malloc(cap ? (size_t)cap : 1);

			assert_non_null(c);
			assert_int_equal(net_args_encode(s->op, &a, c, (size_t)cap), -EMSGSIZE);
			free(c);
		}
		assert_int_equal(net_args_encode(s->op, &a, NULL, 0), n ? -EMSGSIZE : 0);
	}
}

static struct net_hdr hdr_fill(uint16_t cap_len, uint16_t args_len)
{
	struct net_hdr h = {
		.magic = NET_MAGIC,
		.version = NET_VERSION,
		.opcode = NET_OP_ARR_FETCH,
		.flags = NET_F_REPLY | 0x80000000u,
		.status = -LODE_EKEYEMPTY,
		.req_id = 0x0102030405060708ull,
		.map_ver = 0x11121314u,
		.cap_len = cap_len,
		.args_len = args_len,
		.target = 0x21222324u,
		.session = 0,
	};

	return h;
}

static void hdr_assert_equal(const struct net_hdr *a, const struct net_hdr *b)
{
	assert_int_equal(a->magic, b->magic);
	assert_int_equal(a->version, b->version);
	assert_int_equal(a->opcode, b->opcode);
	assert_int_equal(a->flags, b->flags);
	assert_int_equal(a->status, b->status);
	assert_true(a->req_id == b->req_id);
	assert_int_equal(a->map_ver, b->map_ver);
	assert_int_equal(a->cap_len, b->cap_len);
	assert_int_equal(a->args_len, b->args_len);
	assert_int_equal(a->target, b->target);
	assert_int_equal(a->session, b->session);
}

/* Decode a header h encoded at the front of a message of exactly len bytes. */
static int hdr_decode_len(const struct net_hdr *h, size_t len, struct net_hdr *out)
{
	uint8_t *m = calloc(1, len < NET_HDR_SIZE ? NET_HDR_SIZE : len);
	uint8_t *c;
	int rc;

	assert_non_null(m);
	net_hdr_encode(h, m);
	c = exact_copy(m, len);
	rc = net_hdr_decode(c, len, out);
	free(c);
	free(m);
	return rc;
}

static void test_hdr_round_trip(void **state)
{
	static const uint8_t want[NET_HDR_SIZE] = {
		'L', 'O', 'D', 'E', 0x07, 0x00, 0x0b, 0x00, 0x01, 0x00, 0x00, 0x80,
		0xe6, 0xff, 0xff, 0xff,
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 0x14, 0x13, 0x12, 0x11,
		0x03, 0x00, 0x05, 0x00, 0x24, 0x23, 0x22, 0x21, 0x00, 0x00, 0x00, 0x00};
	struct net_hdr h = hdr_fill(3, 5), got;
	uint8_t out[NET_HDR_SIZE];

	h.status = -26;
	net_hdr_encode(&h, out);
	assert_memory_equal(out, want, NET_HDR_SIZE);
	assert_int_equal(hdr_decode_len(&h, NET_HDR_SIZE + 3 + 5, &got), 0);
	hdr_assert_equal(&got, &h);

	/* the lengths at their limits, a status at each end, a reserved word */
	h = hdr_fill(NET_CAP_MAX, NET_ARGS_MAX);
	h.status = INT32_MIN;
	h.session = 0xdeadbeef;
	h.req_id = UINT64_MAX;
	assert_int_equal(hdr_decode_len(&h, NET_HDR_SIZE + NET_CAP_MAX + NET_ARGS_MAX, &got), 0);
	hdr_assert_equal(&got, &h);
	h = hdr_fill(0, 0);
	h.status = INT32_MAX;
	assert_int_equal(hdr_decode_len(&h, NET_HDR_SIZE, &got), 0);
	hdr_assert_equal(&got, &h);
}

static void test_hdr_bad(void **state)
{
	struct net_hdr h, got;

	/* shorter than the fixed header, at every length */
	h = hdr_fill(0, 0);
	for (size_t l = 0; l < NET_HDR_SIZE; l++)
		assert_int_equal(hdr_decode_len(&h, l, &got), -EPROTO);
	assert_int_equal(net_hdr_decode(NULL, 0, &got), -EPROTO);
	assert_int_equal(net_hdr_decode(NULL, NET_HDR_SIZE, &got), -EPROTO);

	/* lengths that do not add up */
	h = hdr_fill(3, 5);
	assert_int_equal(hdr_decode_len(&h, NET_HDR_SIZE + 7, &got), -EPROTO);
	assert_int_equal(hdr_decode_len(&h, NET_HDR_SIZE + 9, &got), -EPROTO);
	assert_int_equal(hdr_decode_len(&h, NET_HDR_SIZE, &got), -EPROTO);
	h = hdr_fill(0, 0);
	assert_int_equal(hdr_decode_len(&h, NET_HDR_SIZE + 1, &got), -EPROTO);

	h = hdr_fill(0, 0);
	h.magic = NET_MAGIC ^ 1;
	assert_int_equal(hdr_decode_len(&h, NET_HDR_SIZE, &got), -EPROTO);
	h.magic = NET_BOOT_MAGIC;
	assert_int_equal(hdr_decode_len(&h, NET_HDR_SIZE, &got), -EPROTO);
	h.version = NET_VERSION - 1; /* a bad magic is reported before a bad version */
	assert_int_equal(hdr_decode_len(&h, NET_HDR_SIZE, &got), -EPROTO);

	h = hdr_fill(0, 0);
	h.version = NET_VERSION + 1;
	assert_int_equal(hdr_decode_len(&h, NET_HDR_SIZE, &got), -EPROTONOSUPPORT);
	h.version = 0;
	assert_int_equal(hdr_decode_len(&h, NET_HDR_SIZE, &got), -EPROTONOSUPPORT);
	h.version = 0xffff;
	assert_int_equal(hdr_decode_len(&h, NET_HDR_SIZE, &got), -EPROTONOSUPPORT);

	h = hdr_fill(NET_CAP_MAX + 1, 0);
	assert_int_equal(hdr_decode_len(&h, NET_HDR_SIZE + NET_CAP_MAX + 1, &got), -EMSGSIZE);
	assert_int_equal(hdr_decode_len(&h, NET_HDR_SIZE, &got), -EMSGSIZE);
	h = hdr_fill(0, NET_ARGS_MAX + 1);
	assert_int_equal(hdr_decode_len(&h, NET_HDR_SIZE + NET_ARGS_MAX + 1, &got), -EMSGSIZE);
	h = hdr_fill(0xffff, 0xffff);
	assert_int_equal(hdr_decode_len(&h, NET_HDR_SIZE + 0x1fffe, &got), -EMSGSIZE);
}

static void reply_round_trip(const struct net_reply_args *r, int has_anchor)
{
	struct wire want = {.n = 0};
	struct net_reply_args got;
	uint8_t out[4096], *c;
	int n;

	w_le(&want, r->val, 8);
	if (has_anchor)
		w_anchor(&want, &r->anchor);
	n = net_reply_encode(r, has_anchor, out, sizeof(out));
	assert_int_equal(n, (int)want.n);
	assert_memory_equal(out, want.b, want.n);
	c = exact_copy(out, (size_t)n);
	memset(&got, 0xa5, sizeof(got));
	assert_int_equal(net_reply_decode(c, (size_t)n, has_anchor, &got), 0);
	assert_true(got.val == r->val);
	if (has_anchor) {
		assert_int_equal(got.anchor.eof, r->anchor.eof);
		assert_int_equal(got.anchor.len, r->anchor.len);
		assert_inside(got.anchor.key, got.anchor.len, c, (size_t)n);
		if (r->anchor.len)
			assert_memory_equal(got.anchor.key, r->anchor.key, r->anchor.len);
	} else {
		assert_int_equal(got.anchor.eof, 0);
		assert_int_equal(got.anchor.len, 0);
		assert_null(got.anchor.key);
	}

	/* every proper prefix, a trailing byte, and too little room to encode */
	for (size_t l = 0; l < (size_t)n; l++) {
		uint8_t *p = exact_copy(out, l);

		assert_int_equal(net_reply_decode(p, l, has_anchor, &got), -EPROTO);
		assert_int_equal(net_reply_encode(r, has_anchor, p, l), -EMSGSIZE);
		free(p);
	}
	free(c);
	out[n] = 0;
	c = exact_copy(out, (size_t)n + 1);
	assert_int_equal(net_reply_decode(c, (size_t)n + 1, has_anchor, &got), -EPROTO);
	free(c);
}

static void test_reply(void **state)
{
	struct net_reply_args r = {
		.val = 0x0102030405060708ull,
		.anchor = {.eof = 1, .len = 5, .key = anchor_buf},
	};
	static const uint8_t want[] = {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
				       0x01, 0x05, 0x00};
	struct net_reply_args got;
	struct wire w;
	uint8_t out[64];

	reply_round_trip(&r, 0);
	reply_round_trip(&r, 1);
	assert_int_equal(net_reply_encode(&r, 1, out, sizeof(out)), sizeof(want) + 5);
	assert_memory_equal(out, want, sizeof(want));
	r.anchor.eof = 0;
	r.anchor.len = 0;
	reply_round_trip(&r, 1);
	r.anchor.len = 2 + LODE_KEY_MAX;
	r.val = UINT64_MAX;
	reply_round_trip(&r, 1);
	assert_int_equal(net_reply_decode(NULL, 0, 0, &got), -EPROTO);
	assert_int_equal(net_reply_decode(NULL, 0, 1, &got), -EPROTO);
	assert_int_equal(net_reply_decode(NULL, 8, 0, &got), -EPROTO);
	assert_int_equal(net_reply_decode(NULL, 11, 1, &got), -EPROTO);

	/* anchors out of range, on the wire and handed to the encoder */
	r.anchor.len = 2 + LODE_KEY_MAX + 1;
	w.n = 0;
	w_le(&w, r.val, 8);
	w_anchor(&w, &r.anchor);
	{
		uint8_t *c = exact_copy(w.b, w.n);

		assert_int_equal(net_reply_decode(c, w.n, 1, &got), -EPROTO);
		free(c);
	}
	assert_int_equal(net_reply_encode(&r, 1, w.b, sizeof(w.b)), -EINVAL);
	r.anchor.len = 3;
	r.anchor.eof = 2;
	w.n = 0;
	w_le(&w, r.val, 8);
	w_anchor(&w, &r.anchor);
	{
		uint8_t *c = exact_copy(w.b, w.n);

		assert_int_equal(net_reply_decode(c, w.n, 1, &got), -EPROTO);
		free(c);
	}
	assert_int_equal(net_reply_encode(&r, 1, w.b, sizeof(w.b)), -EINVAL);
	/* without an anchor, the anchor's values do not matter */
	assert_int_equal(net_reply_encode(&r, 0, out, sizeof(out)), 8);
}

static void test_status(void **state)
{
	struct net_status s = {
		.records = 0x0102030405060708ull,
		.extent_used = 0x1112131415161718ull,
		.extent_cap = 0x2122232425262728ull,
		.requests = 0x3132333435363738ull,
		.errors = 0x4142434445464748ull,
		.cpu_ns = UINT64_MAX,
		.ram = 1,
		.direct_io = 0xfe,
	};
	static const uint8_t zero[NET_STATUS_SIZE - 50];
	struct net_status got;
	uint8_t out[NET_STATUS_SIZE + 1], *c;

	memset(out, 0xa5, sizeof(out));
	net_status_encode(&s, out);
	assert_int_equal(out[NET_STATUS_SIZE], 0xa5);
	assert_int_equal(out[0], 0x08);
	assert_int_equal(out[15], 0x11);
	assert_int_equal(out[48], 1);
	assert_int_equal(out[49], 0xfe);
	assert_memory_equal(out + 50, zero, sizeof(zero));
	c = exact_copy(out, NET_STATUS_SIZE);
	assert_int_equal(net_status_decode(c, NET_STATUS_SIZE, &got), 0);
	assert_true(got.records == s.records && got.extent_used == s.extent_used &&
		    got.extent_cap == s.extent_cap && got.requests == s.requests &&
		    got.errors == s.errors && got.cpu_ns == s.cpu_ns);
	assert_int_equal(got.ram, s.ram);
	assert_int_equal(got.direct_io, s.direct_io);
	for (size_t l = 0; l < NET_STATUS_SIZE; l++)
		assert_int_equal(net_status_decode(c, l, &got), -EPROTO);
	free(c);
	assert_int_equal(net_status_decode(out, NET_STATUS_SIZE + 1, &got), -EPROTO);
	assert_int_equal(net_status_decode(NULL, NET_STATUS_SIZE, &got), -EPROTO);
}

static void test_hello(void **state)
{
	static const uint8_t want[NET_HELLO_SIZE] = {'L', 'O', 'D', 'B', 0x07, 0x00, 0x00, 0x00};
	uint8_t out[NET_HELLO_SIZE + 1], *c;

	net_hello_encode(out);
	assert_memory_equal(out, want, NET_HELLO_SIZE);
	c = exact_copy(out, NET_HELLO_SIZE);
	assert_int_equal(net_hello_decode(c, NET_HELLO_SIZE), 0);
	for (size_t l = 0; l < NET_HELLO_SIZE; l++)
		assert_int_equal(net_hello_decode(c, l), -EPROTO);
	free(c);
	out[NET_HELLO_SIZE] = 0;
	assert_int_equal(net_hello_decode(out, NET_HELLO_SIZE + 1), -EPROTO);
	assert_int_equal(net_hello_decode(NULL, NET_HELLO_SIZE), -EPROTO);
	out[0] = 'l';
	assert_int_equal(net_hello_decode(out, NET_HELLO_SIZE), -EPROTO);
	memcpy(out, "LODE", 4); /* the data-plane magic is not the bootstrap one */
	assert_int_equal(net_hello_decode(out, NET_HELLO_SIZE), -EPROTO);
	net_hello_encode(out);
	out[4] = NET_VERSION + 1;
	assert_int_equal(net_hello_decode(out, NET_HELLO_SIZE), -EPROTONOSUPPORT);
}

/* Address bytes for the welcome tests: target i's address is addr_pool + i. */
static uint8_t addr_pool[NET_WORKER_ADDR_MAX + NET_TARGETS_MAX + 1];

static void welcome_fill(struct net_welcome *w, uint16_t ntargets, const char *host)
{
	memset(w, 0, sizeof(*w));
	w->status = -LODE_EKEYEMPTY;
	w->ntargets = ntargets;
	w->inline_max = 0x01020304u;
	w->transports = NET_TP_TCP | NET_TP_SHM | NET_TP_RDMA;
	w->bulk = NET_BULK_RMA;
	w->pid = 0x11121314u;
	w->mgmt_port = 0x2122;
	w->mgmt_tls = 1;
	/* The host may be longer than the field on purpose: it is cut to fit. */
	{
		size_t n = strlen(host);

		if (n > sizeof(w->host) - 1)
			n = sizeof(w->host) - 1;
		memcpy(w->host, host, n);
		w->host[n] = 0;
	}
	for (unsigned i = 0; i < NET_TARGETS_MAX; i++) {
		w->addr[i] = addr_pool + i;
		w->addr_len[i] = 1 + (i * 37) % 300;
		w->port[i] = (uint16_t)(20000 + i * 11);
	}
}

/* The welcome as proto.h lays it out, with ntargets written as given. */
static void wire_welcome(const struct net_welcome *wl, uint16_t ntargets, struct wire *w)
{
	size_t hl = strlen(wl->host);

	w->n = 0;
	w_le(w, NET_BOOT_MAGIC, 4);
	w_le(w, NET_VERSION, 2);
	w_le(w, ntargets, 2);
	w_le(w, (uint32_t)wl->status, 4);
	w_le(w, wl->inline_max, 4);
	w_le(w, wl->transports, 4);
	w_le(w, wl->bulk, 1);
	w_le(w, wl->pid, 4);
	w_le(w, hl, 1);
	w_bytes(w, wl->host, hl);
	w_le(w, wl->mgmt_port, 2);
	w_le(w, wl->mgmt_tls, 1);
	for (unsigned i = 0; i < ntargets && i < NET_TARGETS_MAX; i++) {
		w_le(w, wl->addr_len[i], 4);
		/* an over-long address is refused on its length; no bytes need follow */
		if (wl->addr_len[i] <= NET_WORKER_ADDR_MAX) {
			w_bytes(w, wl->addr[i], wl->addr_len[i]);
			w_le(w, wl->port[i], 2);
		}
	}
}

static int welcome_decode_wire(const struct wire *w)
{
	uint8_t *c = exact_copy(w->b, w->n);
	struct net_welcome got;
	int rc = net_welcome_decode(c, w->n, &got);

	free(c);
	return rc;
}

static void welcome_round_trip(const struct net_welcome *w)
{
	struct wire *want = malloc(sizeof(*want));
	struct net_welcome got;
	size_t cap = 128 + (size_t)NET_TARGETS_MAX * (4 + NET_WORKER_ADDR_MAX);
	uint8_t *out = malloc(cap), *c;
	int n;

	assert_non_null(want);
	assert_non_null(out);
	n = net_welcome_encode(w, out, cap);
	assert_true(n > 0);
	c = exact_copy(out, (size_t)n);
	free(out);
	memset(&got, 0xa5, sizeof(got));
	assert_int_equal(net_welcome_decode(c, (size_t)n, &got), 0);
	assert_int_equal(got.status, w->status);
	assert_int_equal(got.ntargets, w->ntargets);
	assert_int_equal(got.inline_max, w->inline_max);
	assert_int_equal(got.transports, w->transports);
	assert_int_equal(got.bulk, w->bulk);
	assert_int_equal(got.pid, w->pid);
	assert_string_equal(got.host, w->host);
	assert_int_equal(got.mgmt_port, w->mgmt_port);
	assert_int_equal(got.mgmt_tls, w->mgmt_tls);
	for (unsigned i = 0; i < w->ntargets; i++) {
		assert_int_equal(got.addr_len[i], w->addr_len[i]);
		assert_inside(got.addr[i], got.addr_len[i], c, (size_t)n);
		assert_memory_equal(got.addr[i], w->addr[i], w->addr_len[i]);
		assert_int_equal(got.port[i], w->port[i]);
	}
	for (unsigned i = w->ntargets; i < NET_TARGETS_MAX; i++) {
		assert_null(got.addr[i]);
		assert_int_equal(got.addr_len[i], 0);
	}
	/* the bytes are the documented layout when they fit the wire builder */
	if ((size_t)n <= sizeof(want->b)) {
		wire_welcome(w, w->ntargets, want);
		assert_int_equal(n, (int)want->n);
		assert_memory_equal(c, want->b, want->n);
	}
	free(c);
	free(want);
}

static void test_welcome_round_trip(void **state)
{
	struct net_welcome w;
	char longhost[300];

	welcome_fill(&w, 0, "");
	welcome_round_trip(&w);
	welcome_fill(&w, 1, "n1");
	w.status = 0;
	w.bulk = NET_BULK_NONE;
	welcome_round_trip(&w);
	welcome_fill(&w, 3, "node-17.example.org");
	welcome_round_trip(&w);
	w.addr_len[1] = 1;
	w.addr_len[2] = NET_WORKER_ADDR_MAX;
	welcome_round_trip(&w);
	/* the longest host name the format holds; a longer one is cut to it */
	memset(longhost, 'h', sizeof(longhost));
	longhost[255] = '\0';
	welcome_fill(&w, NET_TARGETS_MAX, longhost);
	welcome_round_trip(&w);
	memset(w.host, 'h', sizeof(w.host)); /* not NUL-terminated */
	w.ntargets = 1;
	{
		uint8_t out[8192];
		struct net_welcome got;
		int n = net_welcome_encode(&w, out, sizeof(out));

		assert_true(n > 0);
		assert_int_equal(net_welcome_decode(out, (size_t)n, &got), 0);
		assert_string_equal(got.host, longhost);
	}
}

static void test_welcome_bad(void **state)
{
	struct net_welcome w, got;
	struct wire w3, w1;
	uint8_t out[4096];
	int n;

	welcome_fill(&w, 3, "node-17");
	wire_welcome(&w, 3, &w3);

	/* every proper prefix and a trailing byte */
	for (size_t l = 0; l < w3.n; l++) {
		uint8_t *c = exact_copy(w3.b, l);

		assert_int_equal(net_welcome_decode(c, l, &got), -EPROTO);
		free(c);
	}
	w3.b[w3.n] = 0;
	w3.n++;
	assert_int_equal(welcome_decode_wire(&w3), -EPROTO);
	w3.n--;
	assert_int_equal(net_welcome_decode(NULL, 0, &got), -EPROTO);
	assert_int_equal(net_welcome_decode(NULL, w3.n, &got), -EPROTO);

	/* magic, version */
	w3.b[3] ^= 0x80;
	assert_int_equal(welcome_decode_wire(&w3), -EPROTO);
	w3.b[3] ^= 0x80;
	w3.b[4] = NET_VERSION + 1;
	assert_int_equal(welcome_decode_wire(&w3), -EPROTONOSUPPORT);
	w3.b[4] = NET_VERSION;
	assert_int_equal(welcome_decode_wire(&w3), 0);

	/* too many targets */
	wire_welcome(&w, NET_TARGETS_MAX + 1, &w1);
	assert_int_equal(welcome_decode_wire(&w1), -EMSGSIZE);
	wire_welcome(&w, 0xffff, &w1);
	assert_int_equal(welcome_decode_wire(&w1), -EMSGSIZE);
	w.ntargets = NET_TARGETS_MAX + 1;
	assert_int_equal(net_welcome_encode(&w, out, sizeof(out)), -EINVAL);

	/* an empty address, and one over the limit */
	welcome_fill(&w, 3, "node-17");
	w.addr_len[1] = 0;
	wire_welcome(&w, 3, &w1);
	assert_int_equal(welcome_decode_wire(&w1), -EMSGSIZE);
	assert_int_equal(net_welcome_encode(&w, out, sizeof(out)), -EINVAL);
	w.addr_len[1] = NET_WORKER_ADDR_MAX + 1;
	wire_welcome(&w, 3, &w1);
	assert_int_equal(welcome_decode_wire(&w1), -EMSGSIZE);
	assert_int_equal(net_welcome_encode(&w, out, sizeof(out)), -EMSGSIZE);
	w.addr_len[1] = UINT32_MAX;
	wire_welcome(&w, 3, &w1);
	assert_int_equal(welcome_decode_wire(&w1), -EMSGSIZE);

	/* too little room to encode, at every length */
	welcome_fill(&w, 3, "node-17");
	n = net_welcome_encode(&w, out, sizeof(out));
	assert_int_equal(n, (int)w3.n);
	for (int cap = 0; cap < n; cap++) {
		uint8_t *c = malloc(cap ? (size_t)cap : 1);

		assert_non_null(c);
		assert_int_equal(net_welcome_encode(&w, c, (size_t)cap), -EMSGSIZE);
		free(c);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_op_table),
		cmocka_unit_test(test_args_round_trip),
		cmocka_unit_test(test_args_golden),
		cmocka_unit_test(test_args_truncated),
		cmocka_unit_test(test_args_trailing),
		cmocka_unit_test(test_args_bad_keys),
		cmocka_unit_test(test_args_key_len_alone),
		cmocka_unit_test(test_args_unknown_op),
		cmocka_unit_test(test_args_bad_bulk),
		cmocka_unit_test(test_args_bad_anchor),
		cmocka_unit_test(test_args_encode_small),
		cmocka_unit_test(test_hdr_round_trip),
		cmocka_unit_test(test_hdr_bad),
		cmocka_unit_test(test_reply),
		cmocka_unit_test(test_status),
		cmocka_unit_test(test_hello),
		cmocka_unit_test(test_welcome_round_trip),
		cmocka_unit_test(test_welcome_bad),
	};

	for (size_t i = 0; i < sizeof(dkey_buf); i++) {
		dkey_buf[i] = (uint8_t)('a' + i % 26);
		akey_buf[i] = (uint8_t)('A' + i % 26);
	}
	for (size_t i = 0; i < sizeof(anchor_buf); i++)
		anchor_buf[i] = (uint8_t)(i * 7 + 1);
	for (size_t i = 0; i < sizeof(rkey_buf); i++)
		rkey_buf[i] = (uint8_t)(i * 13 + 5);
	for (size_t i = 0; i < sizeof(addr_pool); i++)
		addr_pool[i] = (uint8_t)(i * 31 + 3);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
