/*
 * Malformed input against a real loded: what a buggy or hostile peer can
 * send must be answered with an error (or dropped), never crash the server,
 * and never stop it from serving well-behaved clients.
 *
 * Two layers are attacked. The data plane with a raw UCX client built from
 * lode_net alone (no liblode on the data path, so that nothing on the client
 * side refuses to send what the encoder would never produce): bad headers,
 * bad lengths, bad arguments, requests without or with a forged session,
 * missing, forged and misused capabilities, RMA with forged rkeys, garbage
 * worker addresses in HELLO, oversized lengths, rendezvous-sized data on bad
 * requests, and a thousand seeded random messages. And the bootstrap socket:
 * garbage, truncated and oversized frames, silent peers.
 *
 * Every request carries a capability, a token the management service signs
 * (src/auth/auth.h): cap_len bytes of it follow the fixed header, and the
 * arguments follow it. The raw client gets real tokens in setup through
 * liblode's control plane alone (conn_mgmt_connect, no UCX): a pool-wide one
 * and one for a container the test creates, which is the container its
 * requests name (no token names the root container, so no client reaches
 * it). Like liblode it carries the container's token on requests that name
 * a container and the pool-wide one on the others. Both come from one
 * Connect and so carry one client id, the one a session is bound to.
 *
 * Every request but NET_OP_PING and NET_OP_HELLO works within a session
 * (docs/decisions/0004): HELLO carries our worker's address, the target
 * makes an endpoint of its own back to that worker and answers on it with
 * the session number, which later requests carry in the header.
 *
 * The target checks a request in this order: the header, the arguments, the
 * capability, then the session. So a decode error keeps its own code with
 * or without a token or a session; a request that decodes is refused for
 * its token next (-LODE_ECAPMISSING, -LODE_ECAPFORGED, -LODE_ECAPSCOPE,
 * test_capabilities); and one that decodes and carries a valid token but
 * names no live session is refused with -ENOTCONN, or with -LODE_ECAPSCOPE
 * when the token's client id is not the session's. The tests that aim at a
 * later check (a value's length, an oversized len, an rkey) carry a valid
 * token and open a session first, so that the check they aim at is the one
 * that answers. Replies to a session's requests come over the target's
 * endpoint, not ours, which is why the reply handler is the worker's and
 * the client progresses its worker whenever it waits.
 *
 * Every message whose request id can be read (the server answers with the
 * id found at bytes 16..23 whenever the header has them) must get a reply
 * with a negative status, the exact code where proto.h names one; the
 * exceptions are HELLOs whose endpoint cannot be made or wired up, which
 * the server cannot safely answer. After each batch the server must still
 * be running (hs_running, a WNOHANG wait) and a second, well-behaved
 * liblode client must store and read back data over tcp, and over shm
 * where the server offers it.
 *
 * $LODE_TEST_SEED overrides the seed of the random messages;
 * $LODE_TEST_FILTER runs only the tests whose names match it (cmocka's
 * pattern, e.g. "test_rma").
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "auth/auth.h"
#include "client/client.h"
#include "harness.h"
#include "net/net.h"

#define REPLY_WAIT_MS 3000  /* how long a reply that must come may take */
#define DROP_WAIT_MS 300    /* how long to wait for a reply that may not come */
#define QUEUE_MAX 64
#define MSG_MAX (NET_HDR_SIZE + NET_CAP_MAX + NET_ARGS_MAX + 64)
#define HDR_MAX (NET_HDR_SIZE + AUTH_CAP_SIZE) /* a header and a token, no arguments */
#define RANDOM_MSGS 1000
#define ANY_NEG INT32_MIN   /* expect_status: any negative status will do */

static const struct lode_uuid root_cont = NET_ROOT_CONT_INIT;
static const char cont_label[] = "raw"; /* the container the raw client's requests name */

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* xorshift64*: the test's own generator, so a seed reproduces a run. */
static uint64_t rng_state;

static uint64_t rng(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

static void rng_fill(void *buf, size_t len)
{
	uint8_t *p = buf;

	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)rng();
}

/* ---- the raw UCX client ------------------------------------------------------- */

struct raw_reply {
	uint64_t req_id;
	int32_t status;
	uint16_t opcode;
	uint32_t flags;
	uint64_t val;     /* the reply's val, when its arguments decoded */
	size_t data_len;
	uint8_t data[256];
};

/*
 * One worker and one endpoint to target 0, as liblode would make them, but
 * sending whatever bytes the test hands it. Replies are queued by request
 * id for raw_wait to find.
 */
struct raw {
	ucp_context_h ctx;
	ucp_worker_h worker;
	ucp_ep_h ep;
	void *boot;                 /* the welcome; wl's addresses point into it */
	struct net_welcome wl;
	bool ep_failed;
	bool had_session;           /* the server made an endpoint back to us */
	ucp_mem_h memh;             /* a registered region, unmapped by raw_close */
	void *rkey_buf;
	unsigned bad_replies;       /* replies whose header did not decode */
	unsigned lost_replies;      /* replies dropped because the queue was full */
	struct raw_reply q[QUEUE_MAX];
	unsigned nq;
	uint64_t next_id;
};

static struct hs_server srv;
static struct raw rc_raw;
static unsigned label_seq;

/*
 * Where the raw client's tokens come from: a control-plane-only connection,
 * kept until teardown so that its thread renews them. Its pool-wide token
 * and its token for cont_label carry one client id.
 */
static lode_conn_t *tok_conn;
static struct lode_uuid test_cont; /* cont_label's uuid */

static ucs_status_t raw_on_reply(void *arg, const void *header, size_t header_len, void *data,
				 size_t len, const ucp_am_recv_param_t *param)
{
	struct raw *r = arg;
	struct raw_reply *q;
	struct net_hdr h;
	struct net_reply_args ra;

	if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)
		ucp_am_data_release(r->worker, data);
	if (net_hdr_decode(header, header_len, &h) < 0) {
		r->bad_replies++;
		return UCS_OK;
	}
	if (r->nq == QUEUE_MAX) {
		r->lost_replies++;
		return UCS_OK;
	}
	q = &r->q[r->nq++];
	memset(q, 0, sizeof(*q));
	q->req_id = h.req_id;
	q->status = h.status;
	q->opcode = h.opcode;
	q->flags = h.flags;
	if (net_reply_decode((const uint8_t *)header + NET_HDR_SIZE + h.cap_len, h.args_len,
			     h.status == 0 && net_op_has_anchor(h.opcode), &ra) == 0)
		q->val = ra.val;
	if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
		q->data_len = len;
		memcpy(q->data, data, len < sizeof(q->data) ? len : sizeof(q->data));
	}
	return UCS_OK;
}

static void raw_ep_error(void *arg, ucp_ep_h ep, ucs_status_t st)
{
	struct raw *r = arg;

	r->ep_failed = true;
}

/* The bootstrap exchange, as liblode does it: hello out, welcome back. */
static int boot_fetch(const char *addr, void **msg, struct net_welcome *wl)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	uint8_t hello[NET_HELLO_SIZE];
	size_t len;
	int fd, rc;

	if ((rc = net_addr_parse(addr, LODE_PORT_DEFAULT, &ss, &sl)) < 0)
		return rc;
	if ((fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&ss, sl) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	net_hello_encode(hello);
	rc = net_frame_send(fd, hello, sizeof(hello), 5000);
	if (rc == 0)
		rc = net_frame_recv(fd, NET_BOOT_MAX, 5000, msg, &len);
	close(fd);
	if (rc == 0 && (rc = net_welcome_decode(*msg, len, wl)) < 0) {
		free(*msg);
		*msg = NULL;
	}
	return rc;
}

static void raw_progress(struct raw *r)
{
	while (ucp_worker_progress(r->worker))
		;
}

/* Wait for a UCX request; frees it. */
static int raw_req_wait(struct raw *r, ucs_status_ptr_t sp, unsigned timeout_ms)
{
	uint64_t until = now_ms() + timeout_ms;
	ucs_status_t st;

	if (sp == NULL)
		return 0;
	if (UCS_PTR_IS_ERR(sp))
		return net_ucs_errno(UCS_PTR_STATUS(sp));
	while ((st = ucp_request_check_status(sp)) == UCS_INPROGRESS && now_ms() < until)
		raw_progress(r);
	if (st == UCS_INPROGRESS) {
		ucp_request_cancel(r->worker, sp);
		while (ucp_request_check_status(sp) == UCS_INPROGRESS)
			raw_progress(r);
	}
	ucp_request_free(sp);
	return st == UCS_INPROGRESS ? -ETIMEDOUT : net_ucs_errno(st);
}

static int raw_open(struct raw *r, const char *addr)
{
	ucp_am_handler_param_t hp = {0};
	ucp_ep_params_t ep = {0};
	ucp_request_param_t p = {0};
	int rc;

	memset(r, 0, sizeof(*r));
	r->next_id = 1;
	if ((rc = boot_fetch(addr, &r->boot, &r->wl)) < 0)
		return rc;
	if (r->wl.status < 0 || r->wl.ntargets == 0)
		return -EPROTO;
	if ((rc = net_context_create(NET_TP_TCP, true, &r->ctx)) < 0)
		return rc;
	if ((rc = net_worker_create(r->ctx, &r->worker)) < 0)
		return rc;
	hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
			UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
	hp.id = NET_AM_REPLY;
	hp.cb = raw_on_reply;
	hp.arg = r;
	hp.flags = UCP_AM_FLAG_WHOLE_MSG;
	if ((rc = net_ucs_errno(ucp_worker_set_am_recv_handler(r->worker, &hp))) < 0)
		return rc;
	ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
			UCP_EP_PARAM_FIELD_ERR_HANDLER;
	ep.address = (const ucp_address_t *)r->wl.addr[0];
	ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
	ep.err_handler.cb = raw_ep_error;
	ep.err_handler.arg = r;
	if ((rc = net_ucs_errno(ucp_ep_create(r->worker, &ep, &r->ep))) < 0) {
		r->ep = NULL;
		return rc;
	}
	/* Finish the wire-up before anything else (see conn_settle in liblode). */
	return raw_req_wait(r, ucp_ep_flush_nbx(r->ep, &p), 5000);
}

static void raw_close(struct raw *r)
{
	if (r->ep) {
		ucp_request_param_t p = {0};

		/*
		 * Once the server has its own endpoint to our worker (a session),
		 * UCX 1.13's tcp transport can trip an assertion flushing ours
		 * (tcp_ep.c:93, ctx->buf == NULL), so then close without a flush.
		 */
		if (r->ep_failed || r->had_session) {
			p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
			p.flags = UCP_EP_CLOSE_FLAG_FORCE;
		}
		raw_req_wait(r, ucp_ep_close_nbx(r->ep, &p), 2000);
	}
	if (r->rkey_buf)
		ucp_rkey_buffer_release(r->rkey_buf);
	if (r->worker)
		ucp_worker_destroy(r->worker);
	/* After the worker: the server's RMA may still hold the region until then. */
	if (r->memh)
		ucp_mem_unmap(r->ctx, r->memh);
	if (r->ctx)
		ucp_cleanup(r->ctx);
	free(r->boot);
	memset(r, 0, sizeof(*r));
}

/* Send one AM_REQUEST with these exact header and data bytes; waits until sent. */
static int raw_send_flags(struct raw *r, const void *hdr, size_t hlen, const void *data,
			  size_t dlen, bool reply_flag)
{
	ucp_request_param_t p = {0};

	if (reply_flag) {
		p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
		p.flags = UCP_AM_SEND_FLAG_REPLY;
	}
	return raw_req_wait(r, ucp_am_send_nbx(r->ep, NET_AM_REQUEST, hdr, hlen, data, dlen, &p),
			    REPLY_WAIT_MS);
}

static int raw_send(struct raw *r, const void *hdr, size_t hlen, const void *data, size_t dlen)
{
	return raw_send_flags(r, hdr, hlen, data, dlen, true);
}

/* Take the reply to req_id from the queue, waiting up to timeout_ms. */
static int raw_wait(struct raw *r, uint64_t req_id, unsigned timeout_ms, struct raw_reply *out)
{
	uint64_t until = now_ms() + timeout_ms;

	for (;;) {
		raw_progress(r);
		for (unsigned i = 0; i < r->nq; i++) {
			if (r->q[i].req_id != req_id)
				continue;
			if (out)
				*out = r->q[i];
			r->q[i] = r->q[--r->nq];
			return 0;
		}
		if (now_ms() >= until)
			return -ETIMEDOUT;
		usleep(50);
	}
}

/* The request id the server reads from a header it cannot decode (bytes 16..23). */
static bool raw_id_of(const uint8_t *hdr, size_t hlen, uint64_t *id)
{
	if (hlen < 24)
		return false;
	*id = 0;
	for (unsigned b = 0; b < 8; b++)
		*id |= (uint64_t)hdr[16 + b] << (8 * b);
	return true;
}

/* ---- building messages ----------------------------------------------------------- */

static void le_put(uint8_t *p, uint64_t v, unsigned bytes)
{
	for (unsigned i = 0; i < bytes; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Offsets of the header's fields, to corrupt them one at a time. */
enum {
	HO_MAGIC = 0, HO_VERSION = 4, HO_OPCODE = 6, HO_FLAGS = 8, HO_STATUS = 12,
	HO_REQ_ID = 16, HO_MAP_VER = 24, HO_CAP_LEN = 28, HO_ARGS_LEN = 30, HO_TARGET = 32,
	HO_SESSION = 36,
};

/*
 * The token connection c carries on opcode: its token for cont on an opcode
 * that names a container (c must have opened cont), its pool-wide one on
 * the others (liblode's own choice, conn_cap_put). Copied under c's lock,
 * which its renewal thread takes to replace them. Returns AUTH_CAP_SIZE.
 */
static uint16_t cap_copy(lode_conn_t *c, uint16_t opcode, const struct lode_uuid *cont,
			 uint8_t *out)
{
	size_t n;

	pthread_mutex_lock(&c->lock);
	n = conn_cap_put(c, opcode, cont, out);
	pthread_mutex_unlock(&c->lock);
	assert_int_equal(n, AUTH_CAP_SIZE);
	return (uint16_t)n;
}

/* The token a well-behaved client carries on opcode: test_cont's, or the pool-wide one. */
static uint16_t tok_get(uint16_t opcode, uint8_t *out)
{
	return cap_copy(tok_conn, opcode, &test_cont, out);
}

/*
 * A header and the capability cap[0..cap_len) after it, valid unless the
 * caller changes them afterwards; returns NET_HDR_SIZE + cap_len, where the
 * arguments go.
 */
static size_t hdr_put_cap(uint8_t *out, uint16_t opcode, uint64_t req_id, uint16_t args_len,
			  const void *cap, uint16_t cap_len)
{
	struct net_hdr h = {0};

	h.magic = NET_MAGIC;
	h.version = NET_VERSION;
	h.opcode = opcode;
	h.req_id = req_id;
	h.cap_len = cap_len;
	h.args_len = args_len;
	net_hdr_encode(&h, out);
	if (cap_len)
		memcpy(out + NET_HDR_SIZE, cap, cap_len);
	return NET_HDR_SIZE + cap_len;
}

/* hdr_put_cap with the token a well-behaved client carries (tok_get). */
static size_t hdr_put(uint8_t *out, uint16_t opcode, uint64_t req_id, uint16_t args_len)
{
	uint8_t tok[AUTH_CAP_SIZE];

	return hdr_put_cap(out, opcode, req_id, args_len, tok, tok_get(opcode, tok));
}

/* Where the arguments of a message hdr_put(_cap) wrote start: past its capability. */
static size_t args_off(const uint8_t *hdr)
{
	return NET_HDR_SIZE + (size_t)(hdr[HO_CAP_LEN] | hdr[HO_CAP_LEN + 1] << 8);
}

/* Name a session in a header hdr_put wrote (0: none). */
static void hdr_session(uint8_t *hdr, uint32_t sn)
{
	le_put(hdr + HO_SESSION, sn, 4);
}

/* What an sv_update / sv_fetch argument block holds; any field may be wrong. */
struct kv_args {
	const void *dkey;
	uint16_t dkey_len;
	const void *akey;
	uint16_t akey_len;
	bool fetch;       /* sv_fetch: an epoch before len */
	uint64_t len;
	uint8_t bulk;
	uint64_t rma_addr;
	const void *rkey; /* at least rkey_len bytes, even where rkey_len is over the limit */
	uint16_t rkey_len;
	uint64_t rma_reg;
	uint32_t session;  /* the header's session (0: none) */
	const struct lode_uuid *cont; /* the container named; NULL: test_cont */
};

/*
 * The argument block as the real encoder writes it, then bent where the
 * test asks for what the encoder refuses: keys of length 0 or over
 * LODE_KEY_MAX, an unknown bulk kind, an rkey length of 0 or over
 * NET_RKEY_MAX. Only the offsets of the leading fields (container, oid,
 * keys) and of the trailing ones (bulk kind, rkey) are assumed, so the test
 * follows the format where it changes in between.
 */
static size_t kv_args_put(uint8_t *out, const struct kv_args *k)
{
	uint8_t tmp[NET_ARGS_MAX];
	struct net_args a = {0};
	bool rma = k->bulk == NET_BULK_RMA;
	size_t off = 0, rest;
	int n;

	a.cont = k->cont ? *k->cont : test_cont;
	a.oid = lode_oid_make(LODE_OT_KV, 0, 0, 0xbad);
	a.dkey = (const uint8_t *)"D";
	a.dkey_len = 1;
	a.akey = (const uint8_t *)"A";
	a.akey_len = 1;
	a.len = k->len;
	a.bulk = rma ? NET_BULK_RMA : NET_BULK_NONE;
	if (rma) {
		a.rma_addr = k->rma_addr;
		a.rma_reg = k->rma_reg;
		a.rkey = k->rkey ? k->rkey : (const uint8_t *)"R";
		a.rkey_len = k->rkey_len == 0 ? 1 : k->rkey_len > NET_RKEY_MAX ? NET_RKEY_MAX
									      : k->rkey_len;
	}
	n = net_args_encode(k->fetch ? NET_OP_SV_FETCH : NET_OP_SV_UPDATE, &a, tmp, sizeof(tmp));
	assert_true(n > 38);
	/* cont, oid, then the keys the test asked for. */
	memcpy(out, tmp, 32);
	off = 32;
	le_put(out + off, k->dkey_len, 2);
	if (k->dkey && k->dkey_len)
		memcpy(out + off + 2, k->dkey, k->dkey_len);
	off += 2 + (k->dkey ? k->dkey_len : 0);
	le_put(out + off, k->akey_len, 2);
	if (k->akey && k->akey_len)
		memcpy(out + off + 2, k->akey, k->akey_len);
	off += 2 + (k->akey ? k->akey_len : 0);
	rest = (size_t)n - 38; /* what follows the two one-byte keys */
	memcpy(out + off, tmp + 38, rest);
	off += rest;
	if (!rma && k->bulk != NET_BULK_NONE) {
		out[off - 1] = k->bulk; /* the kind is the last byte without RMA */
	} else if (rma && k->rkey_len == 0) {
		off -= 1; /* drop the one rkey byte, say length 0 */
		le_put(out + off - 2, 0, 2);
	} else if (rma && k->rkey_len > NET_RKEY_MAX) {
		le_put(out + off - NET_RKEY_MAX - 2, k->rkey_len, 2);
		memcpy(out + off, (const uint8_t *)k->rkey + NET_RKEY_MAX,
		       k->rkey_len - NET_RKEY_MAX);
		off += k->rkey_len - NET_RKEY_MAX;
	}
	return off;
}

/*
 * A whole sv_update / sv_fetch message carrying the capability
 * cap[0..cap_len): header, capability, arguments; returns its length.
 */
static size_t kv_msg_cap(uint8_t *out, uint64_t req_id, const struct kv_args *k, const void *cap,
			 uint16_t cap_len)
{
	size_t off = hdr_put_cap(out, k->fetch ? NET_OP_SV_FETCH : NET_OP_SV_UPDATE, req_id, 0,
				 cap, cap_len);
	size_t n = kv_args_put(out + off, k);

	le_put(out + HO_ARGS_LEN, n, 2);
	hdr_session(out, k->session);
	return off + n;
}

/* kv_msg_cap with the container's token, as a well-behaved client sends it. */
static size_t kv_msg(uint8_t *out, uint64_t req_id, const struct kv_args *k)
{
	uint8_t tok[AUTH_CAP_SIZE];

	return kv_msg_cap(out, req_id, k, tok, tok_get(NET_OP_SV_UPDATE, tok));
}

/* ---- checks --------------------------------------------------------------------------- */

/*
 * Send one message and wait for its reply; returns the reply's status. The
 * request id is whatever the header carries at bytes 16..23 (the message
 * must be long enough to have one).
 */
static int32_t expect_reply(const char *what, const uint8_t *hdr, size_t hlen, const void *data,
			    size_t dlen)
{
	struct raw *r = &rc_raw;
	struct raw_reply rep;
	uint64_t id = 0;
	int rc;

	assert_true(raw_id_of(hdr, hlen, &id));
	rc = raw_send(r, hdr, hlen, data, dlen);
	if (rc < 0)
		fail_msg("%s: send failed: %s", what, lode_strerror(rc));
	rc = raw_wait(r, id, REPLY_WAIT_MS, &rep);
	if (rc < 0) {
		hs_dump_log(&srv, 4096);
		fail_msg("%s: no reply to request id %" PRIu64 " within %u ms (server %s)", what, id,
			 REPLY_WAIT_MS, hs_running(&srv) ? "running" : "GONE");
	}
	if (!(rep.flags & NET_F_REPLY))
		fail_msg("%s: the reply lacks NET_F_REPLY", what);
	/* The server echoes the opcode at bytes 6..7, whether the header decoded or not. */
	if (rep.opcode != (uint16_t)(hdr[HO_OPCODE] | hdr[HO_OPCODE + 1] << 8))
		fail_msg("%s: the reply's opcode is %u, the request's %u", what, rep.opcode,
			 hdr[HO_OPCODE] | hdr[HO_OPCODE + 1] << 8);
	return rep.status;
}

/* Send one message and check its reply's status: want exactly, or ANY_NEG. */
static void expect_status(const char *what, const uint8_t *hdr, size_t hlen, const void *data,
			  size_t dlen, int32_t want)
{
	int32_t st = expect_reply(what, hdr, hlen, data, dlen);

	if (want == ANY_NEG ? st >= 0 : st != want) {
		hs_dump_log(&srv, 2048);
		fail_msg("%s: status %d (%s), want %s%d (%s)", what, st, lode_strerror(st),
			 want == ANY_NEG ? "any negative, " : "", want == ANY_NEG ? -1 : want,
			 want == ANY_NEG ? "" : lode_strerror(want));
	}
}

/*
 * Send a message whose header cannot be read (shorter than a request id):
 * the server may answer with request id 0 or drop it. Returns 1 if it
 * answered, 0 if not; a reply with a non-negative status fails.
 */
static int expect_refused_or_dropped(const char *what, const uint8_t *hdr, size_t hlen,
				     const void *data, size_t dlen)
{
	struct raw *r = &rc_raw;
	struct raw_reply rep;
	int rc = raw_send(r, hdr, hlen, data, dlen);

	if (rc < 0)
		fail_msg("%s: send failed: %s", what, lode_strerror(rc));
	if (raw_wait(r, 0, DROP_WAIT_MS, &rep) < 0)
		return 0;
	if (rep.status >= 0)
		fail_msg("%s: answered with status %d", what, rep.status);
	return 1;
}

static void expect_alive(const char *after)
{
	if (!hs_running(&srv)) {
		hs_dump_log(&srv, 4096);
		fail_msg("loded is gone after %s (exit status %d)", after, srv.last_status);
	}
	if (rc_raw.ep_failed)
		fail_msg("the raw client's endpoint failed after %s", after);
}

/*
 * A well-behaved liblode client stores and reads back values of the three
 * sizes that take different paths (inline, rendezvous or RMA, large).
 * transport "shm" is skipped when the server does not offer it.
 */
static void client_works(const char *transport)
{
	static const uint32_t sizes[] = {10, 8193, 300 << 10};
	struct lode_oid oid = lode_oid_make(LODE_OT_KV, 0, 0, 42);
	lode_conn_t *c;
	lode_cont_t *ct;
	char label[64];
	uint8_t *val = malloc(300 << 10), *got = malloc(300 << 10);
	int rc;

	assert_non_null(val);
	assert_non_null(got);
	rc = hs_connect(&srv, transport, 5000, &c);
	if (rc == -EPROTONOSUPPORT && strcmp(transport, "tcp") != 0) {
		print_message("  (%s not offered by this server; skipped)\n", transport);
		free(val);
		free(got);
		return;
	}
	if (rc < 0) {
		hs_dump_log(&srv, 4096);
		fail_msg("a new %s client cannot connect: %s", transport, lode_strerror(rc));
	}
	snprintf(label, sizeof(label), "ok-%s-%u", transport, label_seq++);
	assert_int_equal(lode_cont_create(c, label, NULL), 0);
	assert_int_equal(lode_cont_open(c, label, &ct), 0);
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char key[16];
		uint32_t len = 0;

		snprintf(key, sizeof(key), "k%u", i);
		rng_fill(val, sizes[i]);
		assert_int_equal(lode_kv_put(ct, oid, key, val, sizes[i], NULL), 0);
		memset(got, 0, sizes[i]);
		assert_int_equal(lode_kv_get(ct, oid, key, got, 300 << 10, &len, NULL), 0);
		assert_int_equal(len, sizes[i]);
		assert_memory_equal(got, val, sizes[i]);
	}
	assert_int_equal(lode_cont_close(ct), 0);
	assert_int_equal(lode_disconnect(c), 0);
	free(val);
	free(got);
}

static void server_serves(const char *after)
{
	expect_alive(after);
	client_works("tcp");
	client_works("shm");
	expect_alive(after);
}

/* ---- sessions ------------------------------------------------------------------------- */

/*
 * Send one HELLO with these flags, the capability cap[0..cap_len) and this
 * address as its data; returns the request id. Marks the client as having
 * a session, for raw_close.
 */
static uint64_t hello_send_cap(uint32_t flags, const void *addr, size_t alen, const void *cap,
			       uint16_t cap_len)
{
	uint8_t m[NET_HDR_SIZE + NET_CAP_MAX];
	uint64_t id = rc_raw.next_id++;
	size_t n = hdr_put_cap(m, NET_OP_HELLO, id, 0, cap, cap_len);

	le_put(m + HO_FLAGS, flags, 4);
	assert_int_equal(raw_send(&rc_raw, m, n, addr, alen), 0);
	rc_raw.had_session = true;
	return id;
}

/* hello_send_cap with the pool-wide token, which binds the session to its client id. */
static uint64_t hello_send(uint32_t flags, const void *addr, size_t alen)
{
	uint8_t tok[AUTH_CAP_SIZE];

	return hello_send_cap(flags, addr, alen, tok, tok_get(NET_OP_HELLO, tok));
}

/* A session as liblode opens one: HELLO with our worker's address; returns its number. */
static uint32_t session_open(uint32_t flags)
{
	ucp_address_t *addr;
	size_t alen;
	struct raw_reply rep;
	uint64_t id;

	assert_int_equal(ucp_worker_get_address(rc_raw.worker, &addr, &alen), UCS_OK);
	id = hello_send(flags, addr, alen);
	ucp_worker_release_address(rc_raw.worker, addr);
	if (raw_wait(&rc_raw, id, REPLY_WAIT_MS, &rep) < 0) {
		hs_dump_log(&srv, 4096);
		fail_msg("a valid HELLO got no reply within %u ms (server %s)", REPLY_WAIT_MS,
			 hs_running(&srv) ? "running" : "GONE");
	}
	assert_int_equal(rep.status, 0);
	assert_int_equal(rep.opcode, NET_OP_HELLO);
	assert_true(rep.flags & NET_F_REPLY);
	assert_true(rep.val > 0 && rep.val <= UINT32_MAX);
	return (uint32_t)rep.val;
}

/*
 * A ping within session sn must succeed. It is answered from the target's
 * thread over the session's endpoint (a ping without a session is answered
 * from UCX's callback), so the reply shows that the thread is not stuck and
 * that the session still works.
 */
static void session_ping(uint32_t sn, const char *after)
{
	uint8_t m[HDR_MAX];
	char what[160];
	size_t n = hdr_put(m, NET_OP_PING, rc_raw.next_id++, 0);

	hdr_session(m, sn);
	snprintf(what, sizeof(what), "a ping in session %u after %s", sn, after);
	expect_status(what, m, n, NULL, 0, 0);
}

/*
 * Wait up to ms for the reply to a HELLO that may go unanswered; a reply
 * must refuse, with want exactly or (ANY_NEG) with any negative status.
 * Returns whether one came.
 */
static bool hello_refused_or_unanswered(const char *what, uint64_t id, unsigned ms, int32_t want)
{
	struct raw_reply rep;

	if (raw_wait(&rc_raw, id, ms, &rep) < 0)
		return false;
	if (want == ANY_NEG ? rep.status >= 0 : rep.status != want) {
		hs_dump_log(&srv, 4096);
		fail_msg("%s: answered with status %d (%s), val %" PRIu64 "; want no reply or %s",
			 what, rep.status, lode_strerror(rep.status), rep.val,
			 want == ANY_NEG ? "a negative status" : lode_strerror(want));
	}
	return true;
}

/* ---- setup --------------------------------------------------------------------------- */

/* A setup that failed leaves nothing behind: cmocka runs no teardown after it. */
static int setup_failed(const char *what, int rc)
{
	fprintf(stderr, "%s: %s\n", what, lode_strerror(rc));
	hs_dump_log(&srv, 4096);
	raw_close(&rc_raw);
	lode_disconnect(tok_conn);
	tok_conn = NULL;
	hs_cleanup(&srv);
	return -1;
}

/*
 * A fresh loded; cont_label created by a well-behaved liblode client; the
 * raw client's tokens taken from the management service (tok_conn: its
 * pool-wide token, and OpenContainer's for cont_label); the raw client's
 * endpoint to target 0.
 */
static int setup(void **state)
{
	struct hs_opts o = {.targets = 2, .ram = true};
	struct lode_conn_opts co = {0}; /* the admin's credentials, as the harness set them */
	lode_conn_t *c = NULL;
	int rc;

	if (hs_start(&srv, &o) < 0)
		return -1;
	if ((rc = hs_connect(&srv, "tcp", 5000, &c)) == 0)
		rc = lode_cont_create(c, cont_label, NULL);
	lode_disconnect(c);
	if (rc < 0)
		return setup_failed("creating the raw client's container", rc);
	if ((rc = conn_mgmt_connect(hs_addr(&srv), &co, &tok_conn)) < 0 ||
	    (rc = conn_cont_acquire(tok_conn, cont_label, &test_cont, NULL)) < 0)
		return setup_failed("the raw client's tokens", rc);
	if ((rc = raw_open(&rc_raw, hs_addr(&srv))) < 0)
		return setup_failed("raw client", rc);
	return 0;
}

static int teardown(void **state)
{
	int st = -ECHILD;

	if (rc_raw.bad_replies || rc_raw.lost_replies)
		fprintf(stderr, "raw client: %u replies did not decode, %u were dropped\n",
			rc_raw.bad_replies, rc_raw.lost_replies);
	raw_close(&rc_raw);
	lode_disconnect(tok_conn);
	tok_conn = NULL;
	if (hs_running(&srv)) {
		st = hs_stop(&srv);
		if (st != 0) {
			fprintf(stderr, "loded exited with %d on SIGTERM\n", st);
			hs_dump_log(&srv, 4096);
		}
	} else {
		fprintf(stderr, "loded had already exited (status %d)\n", srv.last_status);
		hs_dump_log(&srv, 4096);
	}
	hs_cleanup(&srv);
	/* A server that crashed, or did not stop cleanly, fails the test. */
	return st == 0 ? 0 : -1;
}

/* ---- the tests -------------------------------------------------------------------------- */

/*
 * The raw client itself works: a session opens, and a ping, an update and a
 * fetch within it succeed and bring the value back, so the refusals below
 * are the server's answers to bad input and not a broken client. The same
 * update without a session, or naming one that does not exist, is refused
 * with -ENOTCONN and stores nothing; a ping needs no session. A request
 * sent without a reply endpoint cannot be answered and must simply be
 * dropped.
 */
static void test_raw_client_works(void **state)
{
	static const uint32_t bogus[] = {0, 12345, 0xffffffffu};
	uint8_t m[MSG_MAX];
	struct raw_reply rep;
	struct kv_args k = {.dkey = "d", .dkey_len = 1, .akey = "a", .akey_len = 1, .len = 5};
	uint32_t sn = session_open(NET_F_PEER_ERR);
	uint64_t id;
	size_t n;

	print_message("  session %u\n", sn);
	id = rc_raw.next_id++;
	n = hdr_put(m, NET_OP_PING, id, 0);
	hdr_session(m, sn);
	assert_int_equal(raw_send(&rc_raw, m, n, NULL, 0), 0);
	assert_int_equal(raw_wait(&rc_raw, id, REPLY_WAIT_MS, &rep), 0);
	assert_int_equal(rep.status, 0);
	assert_int_equal(rep.opcode, NET_OP_PING);
	assert_true(rep.flags & NET_F_REPLY);
	/* A ping needs no session. */
	n = hdr_put(m, NET_OP_PING, rc_raw.next_id++, 0);
	expect_status("a ping without a session", m, n, NULL, 0, 0);

	id = rc_raw.next_id++;
	k.session = sn;
	n = kv_msg(m, id, &k);
	assert_int_equal(raw_send(&rc_raw, m, n, "hello", 5), 0);
	assert_int_equal(raw_wait(&rc_raw, id, REPLY_WAIT_MS, &rep), 0);
	assert_int_equal(rep.status, 0);
	assert_int_equal(rep.opcode, NET_OP_SV_UPDATE);

	/*
	 * Well-formed updates of another value without a live session: no
	 * session, one over SESSIONS_MAX, one in range but never opened, all
	 * ones. None may store anything.
	 */
	for (unsigned i = 0; i <= sizeof(bogus) / sizeof(bogus[0]); i++) {
		char what[96];

		k.session = i < sizeof(bogus) / sizeof(bogus[0]) ? bogus[i] : sn + 1;
		snprintf(what, sizeof(what), "a valid sv_update with session %u (not open)",
			 k.session);
		n = kv_msg(m, rc_raw.next_id++, &k);
		expect_status(what, m, n, "WRONG", 5, -ENOTCONN);
	}
	k.session = 0;
	k.fetch = true;
	k.len = 64;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("a valid sv_fetch without a session", m, n, NULL, 0, -ENOTCONN);

	id = rc_raw.next_id++;
	k.session = sn;
	n = kv_msg(m, id, &k);
	assert_int_equal(raw_send(&rc_raw, m, n, NULL, 0), 0);
	assert_int_equal(raw_wait(&rc_raw, id, REPLY_WAIT_MS, &rep), 0);
	assert_int_equal(rep.status, 0);
	assert_int_equal(rep.opcode, NET_OP_SV_FETCH);
	assert_int_equal(rep.val, 5);
	assert_int_equal(rep.data_len, 5);
	assert_memory_equal(rep.data, "hello", 5);

	/* No reply endpoint: nothing to answer on. */
	id = rc_raw.next_id++;
	n = hdr_put(m, NET_OP_PING, id, 0);
	assert_int_equal(raw_send_flags(&rc_raw, m, n, NULL, 0, false), 0);
	assert_int_equal(raw_wait(&rc_raw, id, DROP_WAIT_MS, NULL), -ETIMEDOUT);
	session_ping(sn, "a request without a reply endpoint");
	server_serves("a request without a reply endpoint");
}

/* Headers that are too short, wrong, or inconsistent with the message. */
static void test_bad_headers(void **state)
{
	uint8_t m[MSG_MAX], junk[10];
	unsigned answered = 0;
	size_t n;

	answered += (unsigned)expect_refused_or_dropped("empty AM header", NULL, 0, NULL, 0);
	rng_fill(junk, sizeof(junk));
	answered += (unsigned)expect_refused_or_dropped("10 bytes of garbage", junk, sizeof(junk),
							NULL, 0);
	/* 23 bytes: one short of a request id. */
	hdr_put(m, NET_OP_PING, 7, 0);
	answered += (unsigned)expect_refused_or_dropped("a 23-byte header", m, 23, NULL, 0);
	print_message("  headers without a request id: %u of 3 answered (with id 0), %u dropped\n",
		      answered, 3 - answered);
	expect_alive("headers without a request id");

	/* 24..39 bytes: a request id but no full header. */
	hdr_put(m, NET_OP_PING, rc_raw.next_id++, 0);
	expect_status("a 24-byte header", m, 24, NULL, 0, -EPROTO);
	hdr_put(m, NET_OP_PING, rc_raw.next_id++, 0);
	expect_status("a 39-byte header", m, NET_HDR_SIZE - 1, NULL, 0, -EPROTO);

	n = hdr_put(m, NET_OP_PING, rc_raw.next_id++, 0);
	le_put(m + HO_MAGIC, 0x12345678, 4);
	expect_status("wrong magic", m, n, NULL, 0, -EPROTO);
	n = hdr_put(m, NET_OP_PING, rc_raw.next_id++, 0);
	le_put(m + HO_MAGIC, NET_BOOT_MAGIC, 4);
	expect_status("the bootstrap's magic", m, n, NULL, 0, -EPROTO);
	n = hdr_put(m, NET_OP_PING, rc_raw.next_id++, 0);
	le_put(m + HO_VERSION, NET_VERSION + 1, 2);
	expect_status("version + 1", m, n, NULL, 0, -EPROTONOSUPPORT);
	n = hdr_put(m, NET_OP_PING, rc_raw.next_id++, 0);
	le_put(m + HO_VERSION, 0, 2);
	expect_status("version 0", m, n, NULL, 0, -EPROTONOSUPPORT);

	n = hdr_put(m, 0, rc_raw.next_id++, 0);
	expect_status("opcode 0", m, n, NULL, 0, -EOPNOTSUPP);
	n = hdr_put(m, NET_OP_COUNT, rc_raw.next_id++, 0);
	expect_status("opcode NET_OP_COUNT", m, n, NULL, 0, -EOPNOTSUPP);
	n = hdr_put(m, 999, rc_raw.next_id++, 0);
	expect_status("opcode 999", m, n, NULL, 0, -EOPNOTSUPP);
	n = hdr_put(m, 0xffff, rc_raw.next_id++, 8);
	memset(m + n, 0xab, 8);
	expect_status("opcode 0xffff with arguments", m, n + 8, NULL, 0, -EOPNOTSUPP);

	/* cap_len + args_len must add up to the AM header's length. */
	n = hdr_put(m, NET_OP_PING, rc_raw.next_id++, 10);
	memset(m + n, 0, 5);
	expect_status("args_len 10, 5 bytes follow", m, n + 5, NULL, 0, -EPROTO);
	n = hdr_put(m, NET_OP_PING, rc_raw.next_id++, 0);
	memset(m + n, 0, 8);
	expect_status("args_len 0, 8 bytes follow", m, n + 8, NULL, 0, -EPROTO);
	hdr_put(m, NET_OP_PING, rc_raw.next_id++, 0);
	le_put(m + HO_CAP_LEN, 4, 2);
	expect_status("cap_len 4, nothing follows", m, NET_HDR_SIZE, NULL, 0, -EPROTO);
	n = hdr_put(m, NET_OP_PING, rc_raw.next_id++, 0);
	expect_status("a token one byte short of cap_len", m, n - 1, NULL, 0, -EPROTO);
	n = hdr_put(m, NET_OP_PING, rc_raw.next_id++, 0);
	le_put(m + HO_CAP_LEN, AUTH_CAP_SIZE - 1, 2);
	expect_status("cap_len one short of the token that follows", m, n, NULL, 0, -EPROTO);
	n = hdr_put(m, NET_OP_PING, rc_raw.next_id++, 0xffff);
	le_put(m + HO_CAP_LEN, 0xffff, 2);
	expect_status("cap_len and args_len 0xffff", m, n, NULL, 0, ANY_NEG);
	n = hdr_put(m, NET_OP_PING, rc_raw.next_id++, NET_ARGS_MAX + 1);
	memset(m + n, 0, NET_ARGS_MAX + 1);
	expect_status("args_len NET_ARGS_MAX + 1 (and that many bytes)", m, n + NET_ARGS_MAX + 1,
		      NULL, 0, -EMSGSIZE);
	hdr_put(m, NET_OP_PING, rc_raw.next_id++, 0);
	le_put(m + HO_CAP_LEN, NET_CAP_MAX + 1, 2);
	memset(m + NET_HDR_SIZE, 0, NET_CAP_MAX + 1);
	expect_status("cap_len NET_CAP_MAX + 1 (and that many bytes)",
		      m, NET_HDR_SIZE + NET_CAP_MAX + 1, NULL, 0, -EMSGSIZE);
	/*
	 * The capability is skipped, not read as arguments: a ping whose 16
	 * bytes of capability were read as arguments would be refused with
	 * -EPROTO (a ping takes none); as a capability they are forged. The
	 * token followed by arguments is every container request's case.
	 */
	n = hdr_put_cap(m, NET_OP_PING, rc_raw.next_id++, 0, NULL, 0);
	le_put(m + HO_CAP_LEN, 16, 2);
	memset(m + n, 0x5a, 16);
	expect_status("a ping with a 16-byte capability", m, n + 16, NULL, 0, -LODE_ECAPFORGED);

	/* A request must not claim to be a reply, and must name the target it reached. */
	n = hdr_put(m, NET_OP_PING, rc_raw.next_id++, 0);
	le_put(m + HO_FLAGS, NET_F_REPLY, 4);
	expect_status("a request with NET_F_REPLY", m, n, NULL, 0, -EPROTO);
	n = hdr_put(m, NET_OP_PING, rc_raw.next_id++, 0);
	le_put(m + HO_TARGET, 1, 4);
	expect_status("target 1 on target 0's endpoint", m, n, NULL, 0, -LODE_EBADTGT);
	n = hdr_put(m, NET_OP_PING, rc_raw.next_id++, 0);
	le_put(m + HO_TARGET, 0xffffffffu, 4);
	expect_status("target 0xffffffff", m, n, NULL, 0, -LODE_EBADTGT);
	{
		struct kv_args k = {.dkey = "d", .dkey_len = 1, .akey = "a", .akey_len = 1,
				    .len = 3};

		n = kv_msg(m, rc_raw.next_id++, &k);
		le_put(m + HO_TARGET, 1, 4);
		expect_status("sv_update naming target 1 on target 0", m, n, "abc", 3,
			      -LODE_EBADTGT);
	}
	server_serves("bad headers");
}

/*
 * Argument blocks that do not decode, and values that do not match them,
 * within a live session so that the check each aims at is the one that
 * answers. Decode errors keep their codes without a session too (they come
 * before the capability and the session checks); a request that decodes
 * but whose value or length is wrong is refused for want of a session
 * first.
 */
static void test_bad_arguments(void **state)
{
	uint8_t m[MSG_MAX], full[MSG_MAX], *big;
	uint32_t sn = session_open(NET_F_PEER_ERR);
	struct kv_args k = {.dkey = "dkey", .dkey_len = 4, .akey = "akey", .akey_len = 4,
			    .len = 16, .session = sn};
	char what[96];
	uint8_t keybuf[LODE_KEY_MAX + 1];
	size_t n, full_len;

	/* Every strict prefix of a valid sv_update argument block. */
	full_len = kv_args_put(full, &k);
	for (size_t cut = 0; cut < full_len; cut++) {
		n = hdr_put(m, NET_OP_SV_UPDATE, rc_raw.next_id++, (uint16_t)cut);
		hdr_session(m, sn);
		memcpy(m + n, full, cut);
		snprintf(what, sizeof(what), "sv_update arguments cut to %zu of %zu bytes", cut,
			 full_len);
		expect_status(what, m, n + cut, "0123456789abcdef", 16, -EPROTO);
	}
	n = hdr_put(m, NET_OP_SV_UPDATE, rc_raw.next_id++, (uint16_t)(full_len - 1));
	memcpy(m + n, full, full_len - 1);
	expect_status("sv_update arguments cut by one byte, without a session", m,
		      n + full_len - 1, "0123456789abcdef", 16, -EPROTO);
	/* One byte too many. */
	n = hdr_put(m, NET_OP_SV_UPDATE, rc_raw.next_id++, (uint16_t)(full_len + 1));
	hdr_session(m, sn);
	memcpy(m + n, full, full_len);
	m[n + full_len] = 0;
	expect_status("sv_update arguments with a trailing byte", m, n + full_len + 1,
		      "0123456789abcdef", 16, -EPROTO);

	/* The value (AM data) must be exactly as long as the len field says. */
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("sv_update len 16, 8 bytes of data", m, n, "01234567", 8, -EPROTO);
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("sv_update len 16, no data", m, n, NULL, 0, -EPROTO);
	k.len = 0;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("sv_update len 0, 10 bytes of data", m, n, "0123456789", 10, -EPROTO);
	k.len = 16;
	k.session = 0;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("sv_update len 16, 8 bytes of data, without a session", m, n, "01234567", 8,
		      -ENOTCONN);
	k.session = sn;

	/* Keys. */
	k.dkey_len = 0;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("sv_update with an empty dkey", m, n, "0123456789abcdef", 16,
		      -LODE_EKEYEMPTY);
	k.session = 0;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("sv_update with an empty dkey, without a session", m, n, "0123456789abcdef",
		      16, -LODE_EKEYEMPTY);
	k.session = sn;
	k.dkey_len = 4;
	k.akey_len = 0;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("sv_update with an empty akey", m, n, "0123456789abcdef", 16,
		      -LODE_EKEYEMPTY);
	k.akey_len = 4;
	memset(keybuf, 'x', sizeof(keybuf));
	k.dkey = keybuf;
	k.dkey_len = LODE_KEY_MAX + 1;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("sv_update with a dkey of LODE_KEY_MAX + 1", m, n, "0123456789abcdef", 16,
		      -ENAMETOOLONG);
	k.dkey = "dkey";
	k.dkey_len = 4;
	/* A dkey length that runs past the arguments. */
	n = kv_msg(m, rc_raw.next_id++, &k);
	le_put(m + args_off(m) + 32, 900, 2);
	expect_status("sv_update with a dkey length past the end", m, n, "0123456789abcdef", 16,
		      -EPROTO);

	/* Bulk descriptors. */
	k.bulk = 3;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("sv_update with bulk kind 3", m, n, "0123456789abcdef", 16, -EPROTO);
	k.bulk = NET_BULK_AM;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("sv_update with bulk kind AM (welcome only)", m, n, "0123456789abcdef", 16,
		      -EPROTO);
	k.bulk = NET_BULK_RMA;
	k.rkey_len = 0;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("sv_update RMA with an empty rkey", m, n, NULL, 0, -EPROTO);
	k.rkey = keybuf;
	k.rkey_len = NET_RKEY_MAX + 1;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("sv_update RMA with an rkey over NET_RKEY_MAX", m, n, NULL, 0, -EPROTO);
	k.rkey = NULL;
	k.rkey_len = 0;
	k.bulk = NET_BULK_NONE;

	/* Data where the opcode takes none, small and rendezvous-sized. */
	big = malloc(1 << 20);
	assert_non_null(big);
	rng_fill(big, 1 << 20);
	n = hdr_put(m, NET_OP_PING, rc_raw.next_id++, 0);
	hdr_session(m, sn);
	expect_status("ping with 100 bytes of data", m, n, big, 100, -EPROTO);
	n = hdr_put(m, NET_OP_PING, rc_raw.next_id++, 0);
	hdr_session(m, sn);
	expect_status("ping with 1 MiB of data", m, n, big, 1 << 20, -EPROTO);
	n = hdr_put(m, NET_OP_PING, rc_raw.next_id++, 0);
	expect_status("ping with 1 MiB of data, without a session", m, n, big, 1 << 20, -EPROTO);
	n = hdr_put(m, NET_OP_PING, rc_raw.next_id++, 0);
	le_put(m + HO_MAGIC, 0, 4);
	expect_status("a bad header with 1 MiB of data", m, n, big, 1 << 20, -EPROTO);
	k.len = 1 << 19;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("sv_update len 512 KiB with 1 MiB of data", m, n, big, 1 << 20, -EPROTO);
	k.len = 1 << 20;
	k.session = 0;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("sv_update of 1 MiB without a session", m, n, big, 1 << 20, -ENOTCONN);
	k.session = sn;
	k.dkey_len = 0;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("sv_update with an empty dkey and 1 MiB of data", m, n, big, 1 << 20,
		      -LODE_EKEYEMPTY);
	k.dkey_len = 4;
	n = kv_msg(m, rc_raw.next_id++, &k);
	le_put(m + HO_TARGET, 1, 4);
	expect_status("sv_update on the wrong target with 1 MiB of data", m, n, big, 1 << 20,
		      -LODE_EBADTGT);
	free(big);

	/* Oversized lengths, without sending that much. */
	k.len = (uint64_t)LODE_IO_MAX + 1;
	k.fetch = true;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("sv_fetch len LODE_IO_MAX + 1", m, n, NULL, 0, -E2BIG);
	k.session = 0;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("sv_fetch len LODE_IO_MAX + 1 without a session", m, n, NULL, 0, -ENOTCONN);
	k.session = sn;
	k.len = UINT64_MAX;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("sv_fetch len UINT64_MAX", m, n, NULL, 0, -E2BIG);
	k.fetch = false;
	k.len = (uint64_t)LODE_IO_MAX + 1;
	n = kv_msg(m, rc_raw.next_id++, &k);
	/*
	 * The value that came (16 bytes) is not the len field's either: which
	 * of the two refusals comes first is the server's choice.
	 */
	{
		int32_t st = expect_reply("inline sv_update len LODE_IO_MAX + 1", m, n,
					  "0123456789abcdef", 16);

		if (st != -E2BIG && st != -EPROTO)
			fail_msg("inline sv_update len LODE_IO_MAX + 1: status %d (%s)", st,
				 lode_strerror(st));
	}
	{
		/* arr_fetch of LODE_IO_MAX + 1 bytes. */
		struct net_args a = {0};
		int an;

		a.cont = test_cont;
		a.oid = lode_oid_make(LODE_OT_ARRAY, 0, 0, 0xbad);
		a.dkey = (const uint8_t *)"c";
		a.dkey_len = 1;
		a.akey = (const uint8_t *)"d";
		a.akey_len = 1;
		a.len = (uint64_t)LODE_IO_MAX + 1;
		n = hdr_put(m, NET_OP_ARR_FETCH, rc_raw.next_id++, 0);
		an = net_args_encode(NET_OP_ARR_FETCH, &a, m + n, NET_ARGS_MAX);
		assert_true(an > 0);
		le_put(m + HO_ARGS_LEN, (uint64_t)an, 2);
		hdr_session(m, sn);
		expect_status("arr_fetch len LODE_IO_MAX + 1", m, n + (size_t)an, NULL, 0, -E2BIG);
	}
	session_ping(sn, "bad arguments");
	server_serves("bad arguments");
}

/*
 * A request naming a session that BYE ended must be refused with -ENOTCONN
 * like any other without a live session. Where no reply comes, say whether
 * the server still hears this client at all: whether a ping without a
 * session (answered from UCX's callback) is answered, and whether target
 * 0's request count, read by a liblode client, moved.
 */
static void ended_session_refuses(const char *what, const uint8_t *hdr, size_t hlen)
{
	struct lode_target_status ts[2][NET_TARGETS_MAX];
	struct raw_reply rep;
	uint8_t m[HDR_MAX];
	uint64_t id = 0, pid;
	lode_conn_t *c;
	size_t n;
	bool pinged;

	assert_true(raw_id_of(hdr, hlen, &id));
	assert_int_equal(raw_send(&rc_raw, hdr, hlen, NULL, 0), 0);
	if (raw_wait(&rc_raw, id, REPLY_WAIT_MS, &rep) == 0) {
		if (rep.status != -ENOTCONN)
			fail_msg("%s: status %d (%s), want %d (%s)", what, rep.status,
				 lode_strerror(rep.status), -ENOTCONN, lode_strerror(-ENOTCONN));
		return;
	}
	assert_int_equal(hs_connect(&srv, "tcp", 5000, &c), 0);
	assert_true(lode_status(c, ts[0], NET_TARGETS_MAX) > 0);
	pid = rc_raw.next_id++;
	n = hdr_put(m, NET_OP_PING, pid, 0);
	pinged = raw_send(&rc_raw, m, n, NULL, 0) == 0 &&
		 raw_wait(&rc_raw, pid, REPLY_WAIT_MS, NULL) == 0;
	assert_true(lode_status(c, ts[1], NET_TARGETS_MAX) > 0);
	lode_disconnect(c);
	fail_msg("%s: no reply within %u ms; a ping without a session after it %s; target 0 "
		 "counted %" PRIu64 " request(s) meanwhile (1 is the status request itself); "
		 "our endpoint %s; server %s",
		 what, REPLY_WAIT_MS, pinged ? "was answered" : "got no reply either",
		 ts[1][0].requests - ts[0][0].requests,
		 rc_raw.ep_failed ? "failed" : "reports no error",
		 hs_running(&srv) ? "running" : "GONE");
}

/*
 * RMA requests: without a session or naming one that does not exist (refused
 * with -ENOTCONN before the rkey is looked at), then within a live session
 * and a real registration: values out and back, garbage rkeys, lengths over
 * LODE_IO_MAX with a real rkey (refused before any transfer). Then BYE,
 * answered on the session's endpoint before it closes: the ended session
 * refuses RMA with -ENOTCONN, and a new session works.
 */
static void test_rma(void **state)
{
	static const uint32_t bogus[] = {0, 77, 0xffffffffu};
	uint8_t m[MSG_MAX], rkey_junk[64], want[4096];
	struct kv_args k = {.dkey = "dkey", .dkey_len = 4, .akey = "akey", .akey_len = 4,
			    .len = 4096, .bulk = NET_BULK_RMA, .rma_addr = 0x10000,
			    .rkey = rkey_junk, .rkey_len = sizeof(rkey_junk)};
	ucp_mem_map_params_t mp = {0};
	ucp_mem_h memh;
	void *rkey_buf, *region;
	size_t rkey_len, n;
	uint32_t sn;

	rng_fill(rkey_junk, sizeof(rkey_junk));
	for (unsigned i = 0; i < 2 * sizeof(bogus) / sizeof(bogus[0]); i++) {
		char what[96];

		k.session = bogus[i / 2];
		k.fetch = i & 1;
		n = kv_msg(m, rc_raw.next_id++, &k);
		snprintf(what, sizeof(what), "RMA %s with session %u (not open) and a garbage rkey",
			 k.fetch ? "sv_fetch" : "sv_update", k.session);
		expect_status(what, m, n, NULL, 0, -ENOTCONN);
	}
	k.fetch = false;
	expect_alive("RMA without a session");

	/* A real session and a real registration, as liblode makes them. */
	sn = session_open(NET_F_PEER_ERR); /* our endpoint reports peer failure */
	k.session = sn;
	mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
			UCP_MEM_MAP_PARAM_FIELD_FLAGS;
	mp.length = 4096;
	mp.flags = UCP_MEM_MAP_ALLOCATE;
	assert_int_equal(ucp_mem_map(rc_raw.ctx, &mp, &memh), UCS_OK);
	{
		ucp_mem_attr_t attr = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};

		assert_int_equal(ucp_mem_query(memh, &attr), UCS_OK);
		region = attr.address;
	}
	rc_raw.memh = memh;
	assert_int_equal(ucp_rkey_pack(rc_raw.ctx, memh, &rkey_buf, &rkey_len), UCS_OK);
	rc_raw.rkey_buf = rkey_buf;
	assert_true(rkey_len <= NET_RKEY_MAX);
	k.rma_addr = (uint64_t)(uintptr_t)region;

	/* It works: a value goes out of and comes back into the region by RMA. */
	rng_fill(region, 4096);
	memcpy(want, region, 4096);
	k.rkey = rkey_buf;
	k.rkey_len = (uint16_t)rkey_len;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("a valid RMA sv_update", m, n, NULL, 0, 0);
	memset(region, 0, 4096);
	k.fetch = true;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("a valid RMA sv_fetch", m, n, NULL, 0, 0);
	assert_memory_equal(region, want, 4096);

	/*
	 * Forged rkeys on the live session. UCX may refuse to unpack them
	 * (-EPROTO) or, over tcp whose RMA is emulated by the client's worker,
	 * accept them; the address is the real region so that an accepted one
	 * cannot hurt this process. Any answer will do; there must be one.
	 */
	k.rkey = rkey_junk;
	for (unsigned i = 0; i < 8; i++) {
		char what[96];
		int32_t st;

		k.rkey_len = (uint16_t)(1 + rng() % sizeof(rkey_junk));
		rng_fill(rkey_junk, k.rkey_len);
		k.fetch = i & 1;
		k.rma_reg = (i & 2) ? 1 + i : 0; /* cached registrations too */
		n = kv_msg(m, rc_raw.next_id++, &k);
		snprintf(what, sizeof(what), "RMA %s with session %u, reg %" PRIu64
			 " and a %u-byte garbage rkey",
			 k.fetch ? "sv_fetch" : "sv_update", sn, k.rma_reg, k.rkey_len);
		st = expect_reply(what, m, n, NULL, 0);
		if (st >= 0)
			print_message("  %s: accepted\n", what);
		expect_alive(what);
	}

	/* A real rkey, lengths over the limit. */
	k.rma_reg = 0;
	k.rkey = rkey_buf;
	k.rkey_len = (uint16_t)rkey_len;
	k.len = (uint64_t)LODE_IO_MAX + 1;
	k.fetch = false;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("RMA sv_update len LODE_IO_MAX + 1", m, n, NULL, 0, -E2BIG);
	k.fetch = true;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("RMA sv_fetch len LODE_IO_MAX + 1", m, n, NULL, 0, -E2BIG);
	k.len = UINT64_MAX;
	k.fetch = false;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("RMA sv_update len UINT64_MAX", m, n, NULL, 0, -E2BIG);
	/* An RMA update that also carries AM data. */
	k.len = 16;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("RMA sv_update with AM data too", m, n, "0123456789abcdef", 16, -EPROTO);

	/*
	 * End the session: BYE without one is refused; with it, it is answered
	 * (on the session's endpoint, before that closes) and RMA on the ended
	 * session is then refused. The endpoint the session ran on and the one
	 * requests come in on join the same two workers, so ending one must
	 * leave the other working.
	 */
	n = hdr_put(m, NET_OP_BYE, rc_raw.next_id++, 0);
	expect_status("BYE without a session", m, n, NULL, 0, -ENOTCONN);
	{
		struct raw_reply rep;
		uint64_t id = rc_raw.next_id++;

		n = hdr_put(m, NET_OP_BYE, id, 0);
		hdr_session(m, sn);
		assert_int_equal(raw_send(&rc_raw, m, n, NULL, 0), 0);
		if (raw_wait(&rc_raw, id, REPLY_WAIT_MS, &rep) < 0) {
			/* Is the endpoint dead, or only that reply lost? */
			uint64_t pid = rc_raw.next_id++;

			n = hdr_put(m, NET_OP_PING, pid, 0);
			fail_msg("BYE of session %u got no reply within %u ms; a ping after it %s; "
				 "server %s",
				 sn, REPLY_WAIT_MS,
				 raw_send(&rc_raw, m, n, NULL, 0) == 0 &&
						 raw_wait(&rc_raw, pid, REPLY_WAIT_MS, NULL) == 0
					 ? "was answered"
					 : "got no reply either",
				 hs_running(&srv) ? "running" : "GONE");
		}
		assert_int_equal(rep.status, 0);
		assert_int_equal(rep.opcode, NET_OP_BYE);
		assert_true(rep.flags & NET_F_REPLY);
	}
	k.len = 16;
	k.fetch = false;
	n = kv_msg(m, rc_raw.next_id++, &k);
	ended_session_refuses("RMA sv_update on an ended session", m, n);
	k.fetch = true;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("RMA sv_fetch on an ended session", m, n, NULL, 0, -ENOTCONN);
	n = hdr_put(m, NET_OP_BYE, rc_raw.next_id++, 0);
	hdr_session(m, sn);
	expect_status("BYE of an ended session", m, n, NULL, 0, -ENOTCONN);
	expect_alive("BYE");

	/* A new session on the same worker moves values by RMA again. */
	k.session = session_open(NET_F_PEER_ERR);
	k.len = 4096;
	k.fetch = false;
	rng_fill(region, 4096);
	memcpy(want, region, 4096);
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("RMA sv_update in a second session", m, n, NULL, 0, 0);
	memset(region, 0, 4096);
	k.fetch = true;
	n = kv_msg(m, rc_raw.next_id++, &k);
	expect_status("RMA sv_fetch in a second session", m, n, NULL, 0, 0);
	assert_memory_equal(region, want, 4096);
	server_serves("RMA requests");
}

/*
 * HELLO whose data is not a worker address: the server must not hand it to
 * UCX where UCX would abort. Addresses shorter than 2 bytes, or whose UCX
 * format-version bits (the low 4 of byte 0) are not the server's own, are
 * refused with -EPROTO. Garbage with the right version bits reaches UCX,
 * which refuses it: the server answers -EPROTO or, when it can no longer
 * answer safely (UCX's reply endpoint is gone once the request left the
 * callback), not at all. Either way it keeps serving: the session opened
 * first answers a ping after each, which also means the target's thread
 * has dealt with the HELLO by then.
 */
static void test_hello_garbage(void **state)
{
	static const size_t lens[] = {2, 8, 64, 300, 4096};
	const uint8_t ver = rc_raw.wl.addr[0][0] & 0x0f; /* the server's version bits */
	uint8_t m[HDR_MAX], junk[4096];
	uint64_t quiet[sizeof(lens) / sizeof(lens[0])];
	unsigned nquiet = 0, answered = 0;
	ucp_address_t *addr;
	size_t alen, n;
	uint32_t sn = session_open(NET_F_PEER_ERR);
	char what[96];

	n = hdr_put(m, NET_OP_HELLO, rc_raw.next_id++, 0);
	expect_status("HELLO without an address", m, n, NULL, 0, -EPROTO);
	junk[0] = ver;
	n = hdr_put(m, NET_OP_HELLO, rc_raw.next_id++, 0);
	expect_status("HELLO with a 1-byte address of the right version", m, n, junk, 1, -EPROTO);
	for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		rng_fill(junk, lens[i]);
		junk[0] = (uint8_t)((junk[0] & 0xf0) | (ver ^ (1 + rng() % 15)));
		n = hdr_put(m, NET_OP_HELLO, rc_raw.next_id++, 0);
		snprintf(what, sizeof(what), "HELLO with %zu bytes of garbage of another version",
			 lens[i]);
		expect_status(what, m, n, junk, lens[i], -EPROTO);
		expect_alive(what);
	}
	/* Our own address of another version, otherwise intact. */
	assert_int_equal(ucp_worker_get_address(rc_raw.worker, &addr, &alen), UCS_OK);
	assert_true(alen >= 2 && alen <= sizeof(junk));
	memcpy(junk, addr, alen);
	ucp_worker_release_address(rc_raw.worker, addr);
	junk[0] ^= 0x01;
	n = hdr_put(m, NET_OP_HELLO, rc_raw.next_id++, 0);
	expect_status("HELLO with our address, version bits changed", m, n, junk, alen, -EPROTO);
	session_ping(sn, "HELLOs of another version");

	/* The right version bits, garbage after them. */
	for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		uint64_t id;

		rng_fill(junk, lens[i]);
		junk[0] = (uint8_t)((junk[0] & 0xf0) | ver);
		snprintf(what, sizeof(what), "HELLO with %zu bytes of garbage of the right version",
			 lens[i]);
		id = hello_send(0, junk, lens[i]);
		session_ping(sn, what);
		if (hello_refused_or_unanswered(what, id, DROP_WAIT_MS, -EPROTO))
			answered++;
		else
			quiet[nquiet++] = id;
		expect_alive(what);
	}
	print_message("  garbage HELLOs of the right version: %u refused, %u unanswered\n",
		      answered, nquiet);
	server_serves("HELLO with garbage addresses");
	session_ping(sn, "HELLO with garbage addresses");
	/* A reply that came late must still refuse. */
	for (unsigned i = 0; i < nquiet; i++)
		hello_refused_or_unanswered("a late reply to a garbage HELLO", quiet[i], 0, -EPROTO);
}

/*
 * HELLO whose NET_F_PEER_ERR flag does not match the client's endpoint:
 * here the client's endpoint reports peer failure but the flag says it
 * does not (an old client, a buggy one, or a hostile one). UCX refuses to
 * pair such endpoints and the session's wire-up fails, after the request
 * left UCX's callback: the server cannot safely answer, so no reply (or a
 * refusal) is right; a session is not. It must stay up and serve others.
 */
static void test_hello_flag_mismatch(void **state)
{
	const char *what = "HELLO without NET_F_PEER_ERR from a peer-failure endpoint";
	ucp_address_t *addr;
	size_t alen;
	uint64_t id;
	bool answered;

	assert_int_equal(ucp_worker_get_address(rc_raw.worker, &addr, &alen), UCS_OK);
	id = hello_send(0, addr, alen);
	ucp_worker_release_address(rc_raw.worker, addr);
	answered = hello_refused_or_unanswered(what, id, REPLY_WAIT_MS / 3, ANY_NEG);
	print_message("  %s: %s\n", what, answered ? "refused" : "unanswered");
	server_serves(what);
	/* A reply that came late must still refuse. */
	if (!answered)
		hello_refused_or_unanswered(what, id, 0, ANY_NEG);
}

/*
 * RANDOM_MSGS seeded random messages of four kinds: random bytes with a
 * wrong magic; a valid header with an opcode that does not exist; a valid
 * header of a real opcode (not HELLO or BYE, tested above) with its valid
 * token and random arguments; a valid sv_update with bytes flipped. The
 * last two name a live session, and most of the random arguments of an
 * opcode that names a container name ours, so that what decodes reaches
 * the engine rather than the capability or session checks; most flips miss
 * the token for the same reason (test_capabilities forges tokens). The first
 * two must be refused; the last two may by chance be valid, so any answer
 * will do, but there must be one.
 */
static void test_random_messages(void **state)
{
	uint8_t m[MSG_MAX], data[512];
	unsigned refused = 0, accepted = 0, dropped = 0, notconn = 0, nocap = 0, kinds[4] = {0};
	const char *env = getenv("LODE_TEST_SEED");
	uint64_t seed = env && *env ? strtoull(env, NULL, 0) : 0x10de5eedull;
	uint32_t sn = session_open(NET_F_PEER_ERR);

	print_message("  seed %#" PRIx64 " (LODE_TEST_SEED to change)\n", seed);
	rng_state = seed ? seed : 1;
	for (unsigned i = 0; i < RANDOM_MSGS; i++) {
		unsigned kind = (unsigned)(rng() % 4);
		size_t n = 0, dlen = (rng() % 3 == 0) ? (size_t)(rng() % sizeof(data)) : 0;
		bool must_refuse = kind < 2;
		struct raw_reply rep;
		uint64_t id;

		kinds[kind]++;
		rng_fill(data, dlen);
		switch (kind) {
		case 0:
			n = (size_t)(rng() % 200);
			rng_fill(m, n);
			if (n >= 4 && m[0] == (uint8_t)NET_MAGIC)
				m[0] ^= 0xff;
			break;
		case 1: {
			uint16_t op = (uint16_t)(NET_OP_COUNT + rng() % (0x10000 - NET_OP_COUNT));
			uint16_t al = (uint16_t)(rng() % 64);

			if (rng() % 8 == 0)
				op = 0;
			n = hdr_put(m, op, rc_raw.next_id++, al);
			rng_fill(m + n, al);
			n += al;
			break;
		}
		case 2: {
			uint16_t op = (uint16_t)(1 + rng() % (NET_OP_COUNT - 1));
			uint16_t al = (uint16_t)(rng() % 128);

			if (op == NET_OP_HELLO || op == NET_OP_BYE)
				op = NET_OP_PING;
			n = hdr_put(m, op, rc_raw.next_id++, al);
			hdr_session(m, sn);
			rng_fill(m + n, al);
			/* The container comes first where the opcode names one. */
			if ((net_op_fields(op) & NET_FLD_CONT) && al >= sizeof(test_cont) &&
			    rng() % 4 != 0)
				memcpy(m + n, &test_cont, sizeof(test_cont));
			n += al;
			break;
		}
		default: {
			struct kv_args k = {.dkey = "dk", .dkey_len = 2, .akey = "ak",
						    .akey_len = 2};
			unsigned flips = 1 + (unsigned)(rng() % 4);

			k.len = dlen;
			k.session = sn;
			n = kv_msg(m, rc_raw.next_id++, &k);
			for (unsigned f = 0; f < flips; f++) {
				/* In the header or arguments, or (one in four) anywhere. */
				size_t at = (size_t)(rng() % (n - AUTH_CAP_SIZE));

				if (at >= NET_HDR_SIZE)
					at += AUTH_CAP_SIZE;
				if (rng() % 4 == 0)
					at = (size_t)(rng() % n);
				m[at] ^= (uint8_t)(1u << (rng() % 8));
			}
			break;
		}
		}
		if (raw_send(&rc_raw, m, n, data, dlen) < 0)
			fail_msg("random message %u (kind %u, %zu bytes): send failed", i, kind, n);
		if (!raw_id_of(m, n, &id)) {
			/* No request id: an answer, if any, comes with id 0. */
			if (raw_wait(&rc_raw, 0, DROP_WAIT_MS / 10, &rep) == 0) {
				if (rep.status >= 0)
					fail_msg("random message %u (%zu bytes) answered with %d", i,
						 n, rep.status);
				refused++;
			} else {
				dropped++;
			}
			continue;
		}
		if (raw_wait(&rc_raw, id, REPLY_WAIT_MS, &rep) < 0) {
			hs_dump_log(&srv, 4096);
			fail_msg("random message %u (kind %u, %zu bytes, id %#" PRIx64
				 "): no reply; server %s",
				 i, kind, n, id, hs_running(&srv) ? "running" : "GONE");
		}
		if (rep.status < 0) {
			refused++;
			notconn += rep.status == -ENOTCONN;
			nocap += rep.status <= -LODE_ECAPMISSING && rep.status >= -LODE_ECAPRIGHTS;
		} else if (must_refuse) {
			fail_msg("random message %u (kind %u) accepted with status %d", i, kind,
				 rep.status);
		} else {
			accepted++;
		}
		if (i % 100 == 99)
			expect_alive("random messages");
	}
	print_message("  kinds %u/%u/%u/%u: %u refused (%u for their token, %u for want of a "
		      "session), %u accepted (valid by chance), %u without an id dropped\n",
		      kinds[0], kinds[1], kinds[2], kinds[3], refused, nocap, notconn, accepted,
		      dropped);
	assert_int_equal(rc_raw.bad_replies, 0);
	session_ping(sn, "random messages");
	server_serves("random messages");
}

/* ---- capabilities ------------------------------------------------------------------ */

/*
 * The value test_capabilities stores and then attacks: oid and akey are
 * kv_args_put's, the dkey one that liblode places on target 0, the raw
 * client's, so that a raw request for it and liblode's reach one record.
 */
static struct {
	struct lode_oid oid;
	char dkey[16];
	uint8_t val[48];
} probe;

static struct lode_key probe_key(void)
{
	return (struct lode_key){probe.dkey, (uint32_t)strlen(probe.dkey), "A", 1};
}

/* A well-behaved client stores the probe's value. */
static void probe_store(void)
{
	struct lode_key key;
	lode_conn_t *c;
	lode_cont_t *ct;

	assert_int_equal(hs_connect(&srv, "tcp", 5000, &c), 0);
	assert_int_equal(lode_cont_open(c, cont_label, &ct), 0);
	probe.oid = lode_oid_make(LODE_OT_KV, 0, 0, 0xbad);
	for (unsigned i = 0;; i++) {
		snprintf(probe.dkey, sizeof(probe.dkey), "cap-%u", i);
		if (conn_target_of(ct, probe.oid, probe.dkey, strlen(probe.dkey)) == 0)
			break;
	}
	rng_fill(probe.val, sizeof(probe.val));
	key = probe_key();
	assert_int_equal(lode_obj_update(ct, probe.oid, &key, probe.val, sizeof(probe.val), NULL),
			 0);
	lode_cont_close(ct);
	lode_disconnect(c);
}

/* An sv_update (or fetch) of the probe's value within session sn, with valid arguments. */
static struct kv_args probe_args(uint32_t sn)
{
	return (struct kv_args){.dkey = probe.dkey, .dkey_len = (uint16_t)strlen(probe.dkey),
				.akey = "A", .akey_len = 1, .len = sizeof(probe.val),
				.session = sn};
}

/*
 * Nothing changed after what: the probe's value reads back intact through a
 * well-behaved liblode client, session sn answers a ping, and the server
 * serves.
 */
static void nothing_changed(const char *what, uint32_t sn)
{
	struct lode_key key = probe_key();
	uint8_t got[sizeof(probe.val) + 16];
	uint32_t len = 0;
	lode_conn_t *c;
	lode_cont_t *ct;
	int rc;

	assert_int_equal(hs_connect(&srv, "tcp", 5000, &c), 0);
	assert_int_equal(lode_cont_open(c, cont_label, &ct), 0);
	rc = lode_obj_fetch(ct, probe.oid, LODE_EPOCH_MAX, &key, got, sizeof(got), &len, NULL);
	lode_cont_close(ct);
	lode_disconnect(c);
	if (rc < 0)
		fail_msg("after %s: the stored value does not read back: %s", what,
			 lode_strerror(rc));
	if (len != sizeof(probe.val) || memcmp(got, probe.val, len) != 0)
		fail_msg("after %s: the stored value changed (%u bytes, stored %zu)", what, len,
			 sizeof(probe.val));
	session_ping(sn, what);
	server_serves(what);
}

/*
 * An sv_update of the probe's value to other bytes, then an sv_fetch of
 * it, as k says (its session, keys, container) and carrying
 * cap[0..cap_len): both must be refused with want, the fetch without any of
 * the value, and nothing may change (nothing_changed in session sn).
 */
static void kv_refused(const char *what, const struct kv_args *k, uint32_t sn, const void *cap,
		       uint16_t cap_len, int32_t want)
{
	struct kv_args kf = *k;
	uint8_t m[MSG_MAX], other[sizeof(probe.val)];
	struct raw_reply rep;
	char fwhat[160];
	uint64_t id;
	size_t n;

	memset(other, 'X', sizeof(other));
	assert_int_equal(k->len, sizeof(other));
	n = kv_msg_cap(m, rc_raw.next_id++, k, cap, cap_len);
	expect_status(what, m, n, other, sizeof(other), want);

	snprintf(fwhat, sizeof(fwhat), "%s (sv_fetch)", what);
	kf.fetch = true;
	id = rc_raw.next_id++;
	n = kv_msg_cap(m, id, &kf, cap, cap_len);
	assert_int_equal(raw_send(&rc_raw, m, n, NULL, 0), 0);
	if (raw_wait(&rc_raw, id, REPLY_WAIT_MS, &rep) < 0)
		fail_msg("%s: no reply within %u ms (server %s)", fwhat, REPLY_WAIT_MS,
			 hs_running(&srv) ? "running" : "GONE");
	if (rep.status != want)
		fail_msg("%s: status %d (%s), want %d (%s)", fwhat, rep.status,
			 lode_strerror(rep.status), want, lode_strerror(want));
	if (rep.val != 0 || rep.data_len != 0)
		fail_msg("%s: refused, but the reply says val %" PRIu64 " and carries %zu bytes",
			 fwhat, rep.val, rep.data_len);
	nothing_changed(what, sn);
}

/*
 * Capabilities on the data plane. Within a live session, requests for a
 * value stored before carry no token, a forged one (a byte changed in each
 * part of it, random bytes, one byte short or over), one for the pool, for
 * another container or from another client (another Connect), or name the
 * root container. Each is refused with its own code, fetches nothing and
 * changes nothing: the value reads back intact through liblode, the session
 * still answers and the server serves. So does a HELLO without a token or
 * with a forged one. And the order of the checks: header and argument
 * errors answer before a missing token, a missing token before a missing
 * session.
 */
static void test_capabilities(void **state)
{
	static const struct {
		unsigned at;
		const char *part;
	} flips[] = {
		{0, "version"}, {2, "rights"}, {8, "expiry"}, {24, "client id"},
		{36, "user"}, {56, "container"}, {72, "signature's first"}, {103, "signature's last"},
	};
	uint32_t sn = session_open(NET_F_PEER_ERR);
	struct kv_args k;
	uint8_t tok[AUTH_CAP_SIZE + 1], pool_tok[AUTH_CAP_SIZE], bad[AUTH_CAP_SIZE + 1];
	uint8_t m[MSG_MAX];
	struct lode_uuid other;
	struct raw_reply rep;
	ucp_address_t *addr;
	lode_conn_t *c;
	char what[128];
	uint64_t id;
	size_t n, alen;

	probe_store();
	k = probe_args(sn);
	cap_copy(tok_conn, NET_OP_SV_UPDATE, &test_cont, tok);
	cap_copy(tok_conn, NET_OP_PING, &test_cont, pool_tok);
	assert_memory_not_equal(tok, pool_tok, AUTH_CAP_SIZE);

	/* The control: with the container's token the raw client reads the value. */
	k.fetch = true;
	id = rc_raw.next_id++;
	n = kv_msg(m, id, &k);
	assert_int_equal(raw_send(&rc_raw, m, n, NULL, 0), 0);
	assert_int_equal(raw_wait(&rc_raw, id, REPLY_WAIT_MS, &rep), 0);
	assert_int_equal(rep.status, 0);
	assert_int_equal(rep.val, sizeof(probe.val));
	assert_int_equal(rep.data_len, sizeof(probe.val));
	assert_memory_equal(rep.data, probe.val, sizeof(probe.val));
	k.fetch = false;

	kv_refused("a request without a token", &k, sn, NULL, 0, -LODE_ECAPMISSING);

	/* Forged: a byte changed in each part, so that no part goes unsigned. */
	for (unsigned i = 0; i < sizeof(flips) / sizeof(flips[0]); i++) {
		memcpy(bad, tok, AUTH_CAP_SIZE);
		bad[flips[i].at] ^= 0x01;
		snprintf(what, sizeof(what), "a token with its %s byte (%u) changed", flips[i].part,
			 flips[i].at);
		kv_refused(what, &k, sn, bad, AUTH_CAP_SIZE, -LODE_ECAPFORGED);
	}
	kv_refused("a token one byte short", &k, sn, tok, AUTH_CAP_SIZE - 1, -LODE_ECAPFORGED);
	tok[AUTH_CAP_SIZE] = 0;
	kv_refused("a token with a byte more", &k, sn, tok, AUTH_CAP_SIZE + 1, -LODE_ECAPFORGED);
	rng_fill(bad, AUTH_CAP_SIZE);
	kv_refused("104 random bytes", &k, sn, bad, AUTH_CAP_SIZE, -LODE_ECAPFORGED);
	/* Past the version and key checks, so that the signature is what refuses it. */
	memcpy(bad, tok, 8);
	kv_refused("random claims under a real token's version and key id", &k, sn, bad,
		   AUTH_CAP_SIZE, -LODE_ECAPFORGED);

	/* Genuine tokens, for something else than this request. */
	kv_refused("the pool-wide token on a container's value", &k, sn, pool_tok, AUTH_CAP_SIZE,
		   -LODE_ECAPSCOPE);
	assert_int_equal(hs_connect(&srv, "tcp", 5000, &c), 0);
	assert_int_equal(lode_cont_create(c, "raw-other", NULL), 0);
	lode_disconnect(c);
	assert_int_equal(conn_cont_acquire(tok_conn, "raw-other", &other, NULL), 0);
	cap_copy(tok_conn, NET_OP_SV_UPDATE, &other, bad);
	kv_refused("another container's token", &k, sn, bad, AUTH_CAP_SIZE, -LODE_ECAPSCOPE);
	conn_cont_release(tok_conn, &other);
	{
		struct kv_args kr = k;

		/* No token names the root container: not the container's, not the pool's. */
		kr.cont = &root_cont;
		kv_refused("the root container with the container's token", &kr, sn, tok,
			   AUTH_CAP_SIZE, -LODE_ECAPSCOPE);
		kv_refused("the root container with the pool-wide token", &kr, sn, pool_tok,
			   AUTH_CAP_SIZE, -LODE_ECAPSCOPE);
	}

	/* Another client's tokens: genuine and for this container, but not this session's. */
	{
		struct lode_conn_opts co = {0};
		struct lode_uuid same;

		assert_int_equal(conn_mgmt_connect(hs_addr(&srv), &co, &c), 0);
		assert_int_equal(conn_cont_acquire(c, cont_label, &same, NULL), 0);
		assert_memory_equal(&same, &test_cont, sizeof(same));
		cap_copy(c, NET_OP_SV_UPDATE, &test_cont, bad);
		lode_disconnect(c);
	}
	kv_refused("another client's token for this container, on this session", &k, sn, bad,
		   AUTH_CAP_SIZE, -LODE_ECAPSCOPE);
	/* The same token without a session: it verifies, only the session is missing. */
	k.session = 0;
	kv_refused("another client's token for this container, without a session", &k, sn, bad,
		   AUTH_CAP_SIZE, -ENOTCONN);

	/*
	 * The order: header and argument errors before the capability, the
	 * capability before the session.
	 */
	kv_refused("a request without a token or a session", &k, sn, NULL, 0, -LODE_ECAPMISSING);
	k.session = sn;
	k.dkey_len = 0;
	kv_refused("an empty dkey without a token", &k, sn, NULL, 0, -LODE_EKEYEMPTY);
	k.dkey_len = (uint16_t)strlen(probe.dkey);
	n = kv_msg_cap(m, rc_raw.next_id++, &k, NULL, 0);
	le_put(m + HO_TARGET, 1, 4);
	expect_status("a request for target 1 on target 0's endpoint, without a token", m, n,
		      "0123456789", 10, -LODE_EBADTGT);
	n = hdr_put_cap(m, NET_OP_PING, rc_raw.next_id++, 0, NULL, 0);
	expect_status("a ping without a session or a token", m, n, NULL, 0, -LODE_ECAPMISSING);
	n = hdr_put_cap(m, NET_OP_PING, rc_raw.next_id++, 0, NULL, 0);
	hdr_session(m, sn);
	expect_status("a ping in the session without a token", m, n, NULL, 0, -LODE_ECAPMISSING);

	/* HELLO: a session needs a genuine token too. */
	assert_int_equal(ucp_worker_get_address(rc_raw.worker, &addr, &alen), UCS_OK);
	id = hello_send_cap(NET_F_PEER_ERR, addr, alen, NULL, 0);
	assert_int_equal(raw_wait(&rc_raw, id, REPLY_WAIT_MS, &rep), 0);
	assert_int_equal(rep.status, -LODE_ECAPMISSING);
	memcpy(bad, pool_tok, AUTH_CAP_SIZE);
	bad[AUTH_CAP_SIZE - 1] ^= 0x80;
	id = hello_send_cap(NET_F_PEER_ERR, addr, alen, bad, AUTH_CAP_SIZE);
	assert_int_equal(raw_wait(&rc_raw, id, REPLY_WAIT_MS, &rep), 0);
	assert_int_equal(rep.status, -LODE_ECAPFORGED);
	ucp_worker_release_address(rc_raw.worker, addr);
	nothing_changed("HELLOs without a genuine token", sn);

	/* And after it all, the session's own token still reads the value. */
	k.fetch = true;
	id = rc_raw.next_id++;
	n = kv_msg(m, id, &k);
	assert_int_equal(raw_send(&rc_raw, m, n, NULL, 0), 0);
	assert_int_equal(raw_wait(&rc_raw, id, REPLY_WAIT_MS, &rep), 0);
	assert_int_equal(rep.status, 0);
	assert_int_equal(rep.data_len, sizeof(probe.val));
	assert_memory_equal(rep.data, probe.val, sizeof(probe.val));
}

/* ---- the bootstrap socket ----------------------------------------------------------------- */

static int boot_connect(void)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	int fd;

	assert_int_equal(net_addr_parse(hs_addr(&srv), LODE_PORT_DEFAULT, &ss, &sl), 0);
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&ss, sl), 0);
	return fd;
}

static void send_all(int fd, const void *buf, size_t len)
{
	assert_int_equal(send(fd, buf, len, MSG_NOSIGNAL), (ssize_t)len);
}

/* Wait up to ms for the server to close the socket; returns the bytes it sent before. */
static ssize_t until_closed(int fd, unsigned ms, const char *what)
{
	uint64_t until = now_ms() + ms;
	uint8_t buf[4096];
	ssize_t total = 0;

	for (;;) {
		struct pollfd p = {fd, POLLIN, 0};
		int64_t left = (int64_t)(until - now_ms());
		ssize_t n;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			fail_msg("%s: the server kept the socket open over %u ms", what, ms);
		n = recv(fd, buf, sizeof(buf), 0);
		if (n <= 0)
			return total;
		total += n;
	}
}

/* One bootstrap exchange that must end with the server closing, unanswered. */
static void boot_refused(const char *what, const void *bytes, size_t len, bool half_close)
{
	int fd = boot_connect();
	ssize_t got;

	if (len)
		send_all(fd, bytes, len);
	if (half_close)
		shutdown(fd, SHUT_WR);
	got = until_closed(fd, 5000, what);
	if (got != 0)
		fail_msg("%s: the server answered %zd bytes", what, got);
	close(fd);
	expect_alive(what);
}

static void test_bootstrap_garbage(void **state)
{
	uint8_t buf[256], hello[NET_HELLO_SIZE];
	void *msg;
	size_t len;
	struct net_welcome wl;
	int fd;

	rng_fill(buf + 4, sizeof(buf) - 4);
	le_put(buf, 0x7fffff00, 4);
	boot_refused("garbage", buf, sizeof(buf), true);
	le_put(buf, 8, 4);
	boot_refused("a frame of 8 with 4 bytes, then close", buf, 8, true);
	boot_refused("a frame of 8 with 4 bytes, left open", buf, 8, false);
	boot_refused("two bytes of a length prefix, then close", buf, 2, true);
	le_put(buf, 0xffffffffu, 4);
	boot_refused("length prefix 0xffffffff", buf, 4, false);
	le_put(buf, NET_BOOT_MAX + 1, 4);
	boot_refused("length prefix NET_BOOT_MAX + 1", buf, 4, false);
	le_put(buf, 0, 4);
	boot_refused("an empty frame", buf, 4, false);
	boot_refused("nothing, then close", NULL, 0, true);
	boot_refused("nothing, left open", NULL, 0, false);
	net_hello_encode(buf + 4);
	le_put(buf, NET_HELLO_SIZE + 4, 4);
	boot_refused("a hello with 4 trailing bytes", buf, 4 + NET_HELLO_SIZE + 4, false);
	net_hello_encode(buf + 4);
	le_put(buf + 4, 0xdeadbeef, 4);
	le_put(buf, NET_HELLO_SIZE, 4);
	boot_refused("a hello with the wrong magic", buf, 4 + NET_HELLO_SIZE, false);
	net_hello_encode(buf + 4);
	le_put(buf + 4, NET_MAGIC, 4);
	boot_refused("a hello with the data plane's magic", buf, 4 + NET_HELLO_SIZE, false);

	/* Another version is answered, with a welcome saying so. */
	net_hello_encode(hello);
	le_put(hello + 4, NET_VERSION + 1, 2);
	fd = boot_connect();
	assert_int_equal(net_frame_send(fd, hello, sizeof(hello), 3000), 0);
	assert_int_equal(net_frame_recv(fd, NET_BOOT_MAX, 3000, &msg, &len), 0);
	assert_int_equal(net_welcome_decode(msg, len, &wl), 0);
	assert_int_equal(wl.status, -EPROTONOSUPPORT);
	free(msg);
	close(fd);

	/* Many connections that come and go at once. */
	for (unsigned i = 0; i < 200; i++)
		close(boot_connect());
	expect_alive("200 connections closed at once");

	/*
	 * A silent peer holds the bootstrap socket until the server's timeout;
	 * a real client behind it must still get through.
	 */
	{
		lode_conn_t *c;
		uint64_t t0;
		int silent = boot_connect();

		t0 = now_ms();
		assert_int_equal(hs_connect(&srv, "tcp", 8000, &c), 0);
		print_message("  a connect behind a silent bootstrap peer took %" PRIu64 " ms\n",
			      now_ms() - t0);
		lode_disconnect(c);
		close(silent);
	}
	server_serves("bootstrap garbage");
}

/*
 * Several silent peers at once: the bootstrap must not make a real client
 * wait for each of them in turn (a handful of idle TCP connections would
 * otherwise lock every client out).
 */
static void test_bootstrap_silent_peers(void **state)
{
	enum { SILENT = 4 };
	int fds[SILENT];
	lode_conn_t *c;
	uint64_t t0;
	int rc;

	for (unsigned i = 0; i < SILENT; i++)
		fds[i] = boot_connect();
	t0 = now_ms();
	rc = hs_connect(&srv, "tcp", 5000, &c);
	print_message("  a connect behind %u silent bootstrap peers: %s after %" PRIu64 " ms\n",
		      SILENT, lode_strerror(rc), now_ms() - t0);
	for (unsigned i = 0; i < SILENT; i++)
		close(fds[i]);
	if (rc == 0)
		lode_disconnect(c);
	assert_int_equal(rc, 0);
	server_serves("silent bootstrap peers");
}

/*
 * The tests draw from one generator in this order (test_random_messages
 * reseeds it): new tests go after test_random_messages, so that the garbage
 * test_hello_garbage sends stays what it was. UCX 1.13 takes some short
 * garbage of the right version for an address (it reads past it), and the
 * server then makes a session of it, which that test refuses to accept.
 */
int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_raw_client_works, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_headers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_arguments, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rma, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hello_garbage, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hello_flag_mismatch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_random_messages, setup, teardown),
		cmocka_unit_test_setup_teardown(test_capabilities, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bootstrap_garbage, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bootstrap_silent_peers, setup, teardown),
	};

	const char *only = getenv("LODE_TEST_FILTER");

	if (only && *only)
		cmocka_set_test_filter(only);
	rng_state = 0x5eed;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
