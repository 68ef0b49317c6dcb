/*
 * libFuzzer target: every decoder of the data-plane and bootstrap wire
 * formats (src/net/proto.c). Each must accept or refuse any byte string
 * without reading outside it, and refuse only with a code its declaration
 * in proto.h names. Whatever one accepts must encode again, to the very
 * same bytes where the format has one encoding per value (header,
 * arguments, reply), and the encoding must decode to the same fields; an
 * encoder given one byte too few must say -EMSGSIZE without writing past
 * it. Any failure abort()s, so the fuzzer reports it.
 *
 * One input is tried as: a whole message (header, then the arguments of
 * the header's opcode, and the same argument bytes as a reply's arguments
 * with and without an anchor); the arguments of opcode data[0] in
 * data[1..), so that the argument decoder is reached before the fuzzer has
 * learnt to write a valid header; a reply's arguments; a welcome; a hello;
 * a status record.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond))                                                                       \
			abort();                                                                   \
	} while (0)

/* A buffer of exactly n bytes (1 when n is 0), so ASan sees a write past n. */
static uint8_t *exact_alloc(size_t n)
{
	uint8_t *p = malloc(n ? n : 1);

	CHECK(p);
	return p;
}

/* p[0..n) lies inside buf[0..len). */
static void check_inside(const uint8_t *p, size_t n, const uint8_t *buf, size_t len)
{
	CHECK(p && p >= buf && n <= len && (size_t)(p - buf) <= len - n);
}

static int same_bytes(const uint8_t *a, const uint8_t *b, size_t n)
{
	return n == 0 || memcmp(a, b, n) == 0;
}

static int same_anchor(const struct net_anchor *a, const struct net_anchor *b)
{
	return a->eof == b->eof && a->len == b->len && same_bytes(a->key, b->key, a->len);
}

static void check_hdr_same(const struct net_hdr *a, const struct net_hdr *b)
{
	CHECK(a->magic == b->magic && a->version == b->version && a->opcode == b->opcode &&
	      a->flags == b->flags && a->status == b->status && a->req_id == b->req_id &&
	      a->map_ver == b->map_ver && a->cap_len == b->cap_len && a->args_len == b->args_len &&
	      a->target == b->target && a->session == b->session);
}

static void check_args_same(const struct net_args *a, const struct net_args *b)
{
	CHECK(memcmp(a->cont.b, b->cont.b, 16) == 0);
	CHECK(a->oid.hi == b->oid.hi && a->oid.lo == b->oid.lo);
	CHECK(a->dkey_len == b->dkey_len && same_bytes(a->dkey, b->dkey, a->dkey_len));
	CHECK(a->akey_len == b->akey_len && same_bytes(a->akey, b->akey, a->akey_len));
	CHECK(a->epoch == b->epoch && a->off == b->off && a->len == b->len && a->max == b->max);
	CHECK(same_anchor(&a->anchor, &b->anchor));
	CHECK(a->bulk == b->bulk && a->rma_addr == b->rma_addr && a->rma_reg == b->rma_reg && a->rkey_len == b->rkey_len &&
	      same_bytes(a->rkey, b->rkey, a->rkey_len));
}

/* What a decoded request may point at: its own bytes, at lengths within the limits. */
static void check_args_sane(uint16_t op, const struct net_args *a, const uint8_t *buf, size_t len)
{
	uint32_t f = net_op_fields(op);

	if (f & NET_FLD_DKEY) {
		CHECK(a->dkey_len >= 1 && a->dkey_len <= LODE_KEY_MAX);
		check_inside(a->dkey, a->dkey_len, buf, len);
	}
	if (f & NET_FLD_AKEY) {
		CHECK(a->akey_len >= 1 && a->akey_len <= LODE_KEY_MAX);
		check_inside(a->akey, a->akey_len, buf, len);
	}
	if (f & NET_FLD_ANCHOR) {
		CHECK(a->anchor.eof <= 1 && a->anchor.len <= 2 + LODE_KEY_MAX);
		check_inside(a->anchor.key, a->anchor.len, buf, len);
	}
	CHECK(a->bulk == NET_BULK_NONE || a->bulk == NET_BULK_RMA);
	if (a->bulk == NET_BULK_RMA) {
		CHECK(a->rkey_len >= 1 && a->rkey_len <= NET_RKEY_MAX);
		check_inside(a->rkey, a->rkey_len, buf, len);
	}
}

static void fuzz_args(uint16_t op, const uint8_t *buf, size_t len)
{
	struct net_args a, again;
	uint8_t *out;
	int rc = net_args_decode(op, buf, len, &a);

	if (rc < 0) {
		CHECK(rc == -EOPNOTSUPP || rc == -EPROTO || rc == -LODE_EKEYEMPTY ||
		      rc == -ENAMETOOLONG);
		return;
	}
	CHECK(rc == 0);
	check_args_sane(op, &a, buf, len);

	out = exact_alloc(len);
	CHECK(net_args_encode(op, &a, out, len) == (int)len);
	CHECK(same_bytes(out, buf, len));
	CHECK(net_args_decode(op, out, len, &again) == 0);
	check_args_same(&a, &again);
	if (len)
		CHECK(net_args_encode(op, &a, out, len - 1) == -EMSGSIZE);
	free(out);
}

static void fuzz_reply(const uint8_t *buf, size_t len)
{
	for (int has_anchor = 0; has_anchor < 2; has_anchor++) {
		struct net_reply_args r, again;
		uint8_t *out;
		int rc = net_reply_decode(buf, len, has_anchor, &r);

		if (rc < 0) {
			CHECK(rc == -EPROTO);
			continue;
		}
		CHECK(rc == 0);
		if (has_anchor) {
			CHECK(r.anchor.eof <= 1 && r.anchor.len <= 2 + LODE_KEY_MAX);
			check_inside(r.anchor.key, r.anchor.len, buf, len);
		}
		out = exact_alloc(len);
		CHECK(net_reply_encode(&r, has_anchor, out, len) == (int)len);
		CHECK(same_bytes(out, buf, len));
		CHECK(net_reply_decode(out, len, has_anchor, &again) == 0);
		CHECK(r.val == again.val && same_anchor(&r.anchor, &again.anchor));
		CHECK(net_reply_encode(&r, has_anchor, out, len - 1) == -EMSGSIZE);
		free(out);
	}
}

/* The input as one message: header, capability, arguments. */
static void fuzz_message(const uint8_t *data, size_t size)
{
	struct net_hdr h, again;
	uint8_t *copy;
	const uint8_t *args;
	int rc = net_hdr_decode(data, size, &h);

	if (rc < 0) {
		CHECK(rc == -EPROTO || rc == -EPROTONOSUPPORT || rc == -EMSGSIZE);
		return;
	}
	CHECK(rc == 0);
	CHECK(size == (size_t)NET_HDR_SIZE + h.cap_len + h.args_len);
	CHECK(h.cap_len <= NET_CAP_MAX && h.args_len <= NET_ARGS_MAX);

	copy = exact_alloc(size);
	memcpy(copy, data, size);
	net_hdr_encode(&h, copy);
	CHECK(same_bytes(copy, data, NET_HDR_SIZE));
	CHECK(net_hdr_decode(copy, size, &again) == 0);
	check_hdr_same(&h, &again);
	free(copy);

	args = data + NET_HDR_SIZE + h.cap_len;
	fuzz_args(h.opcode, args, h.args_len);
	fuzz_reply(args, h.args_len);
}

static void check_welcome_same(const struct net_welcome *a, const struct net_welcome *b)
{
	CHECK(a->status == b->status && a->ntargets == b->ntargets &&
	      a->inline_max == b->inline_max && a->transports == b->transports &&
	      a->bulk == b->bulk && a->pid == b->pid && strcmp(a->host, b->host) == 0);
	for (unsigned i = 0; i < a->ntargets; i++)
		CHECK(a->addr_len[i] == b->addr_len[i] && a->port[i] == b->port[i] &&
		      same_bytes(a->addr[i], b->addr[i], a->addr_len[i]));
}

/* Where the welcome's host length byte sits: after magic..pid. */
#define WELCOME_HL_OFF (4 + 2 + 2 + 4 + 4 + 4 + 1 + 4)

static void fuzz_welcome(const uint8_t *data, size_t size)
{
	struct net_welcome *w = malloc(2 * sizeof(*w)), *again = w + 1;
	size_t hl, want;
	uint8_t *out;
	int rc;

	CHECK(w);
	rc = net_welcome_decode(data, size, w);
	if (rc < 0) {
		CHECK(rc == -EPROTO || rc == -EPROTONOSUPPORT || rc == -EMSGSIZE);
		free(w);
		return;
	}
	CHECK(rc == 0 && size > WELCOME_HL_OFF);
	CHECK(memchr(w->host, '\0', sizeof(w->host)) != NULL);
	CHECK(w->ntargets <= NET_TARGETS_MAX);
	for (unsigned i = 0; i < w->ntargets; i++) {
		CHECK(w->addr_len[i] >= 1 && w->addr_len[i] <= NET_WORKER_ADDR_MAX);
		check_inside(w->addr[i], w->addr_len[i], data, size);
	}

	/*
	 * A host name with a NUL in it comes back cut at the NUL; that is the
	 * only way the encoding may differ from the input.
	 */
	hl = data[WELCOME_HL_OFF];
	CHECK(strlen(w->host) <= hl);
	want = size - (hl - strlen(w->host));
	out = exact_alloc(want);
	CHECK(net_welcome_encode(w, out, want) == (int)want);
	if (want == size)
		CHECK(same_bytes(out, data, size));
	CHECK(net_welcome_decode(out, want, again) == 0);
	check_welcome_same(w, again);
	CHECK(net_welcome_encode(w, out, want - 1) == -EMSGSIZE);
	free(out);
	free(w);
}

static void fuzz_hello(const uint8_t *data, size_t size)
{
	uint8_t out[NET_HELLO_SIZE];
	int rc = net_hello_decode(data, size);

	if (rc < 0) {
		CHECK(rc == -EPROTO || rc == -EPROTONOSUPPORT);
		return;
	}
	CHECK(rc == 0 && size == NET_HELLO_SIZE);
	net_hello_encode(out);
	CHECK(same_bytes(out, data, 6)); /* all but the reserved u16 */
	CHECK(net_hello_decode(out, sizeof(out)) == 0);
}

static void fuzz_status(const uint8_t *data, size_t size)
{
	struct net_status s, again;
	uint8_t out[NET_STATUS_SIZE];
	int rc = net_status_decode(data, size, &s);

	if (rc < 0) {
		CHECK(rc == -EPROTO);
		return;
	}
	CHECK(rc == 0 && size == NET_STATUS_SIZE);
	net_status_encode(&s, out);
	CHECK(same_bytes(out, data, 50)); /* all but the reserved tail */
	CHECK(net_status_decode(out, sizeof(out), &again) == 0);
	CHECK(s.records == again.records && s.extent_used == again.extent_used &&
	      s.extent_cap == again.extent_cap && s.requests == again.requests &&
	      s.errors == again.errors && s.cpu_ns == again.cpu_ns && s.ram == again.ram &&
	      s.direct_io == again.direct_io);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_message(data, size);
	if (size) {
		/* 0..NET_OP_COUNT, so unknown opcodes at both ends are tried too */
		uint16_t op = data[0] == 0xff ? 0xffff : (uint16_t)(data[0] % (NET_OP_COUNT + 1));

		fuzz_args(op, data + 1, size - 1);
	}
	fuzz_reply(data, size);
	fuzz_welcome(data, size);
	fuzz_hello(data, size);
	fuzz_status(data, size);
	return 0;
}
