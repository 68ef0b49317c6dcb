/*
 * The target threads of loded.
 *
 * Each target is one thread that owns one engine target and one UCX worker;
 * a client holds one endpoint per target, so every request reaches the
 * thread that owns its shard and nothing on the I/O path takes a lock.
 *
 * A request lives in a struct srv_op from its Active Message to the
 * completion of its reply:
 *
 *   on_request (UCX callback)  decode header and arguments, copy an eager
 *                              value, queue the op
 *   op_run (the thread's loop) receive a rendezvous value, or GET an RMA
 *                              value from the client; then call the engine
 *   eng_done (engine callback) PUT a fetched value to the client and flush,
 *                              or attach it as the reply's data
 *   op_reply                   send the reply; its completion frees the op
 *
 * UCX callbacks only decode and queue: the thread's loop does the rest, so
 * no UCX call is made from inside ucp_worker_progress().
 *
 * Epochs come from one hybrid clock shared by the process's targets, so an
 * epoch taken for a snapshot on one target orders against updates on all.
 */
#include "server/srv.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include "auth/auth.h"
#include "engine/engine.h"
#include "net/net.h"
#include "server/lease.h"

#define LIST_BYTES_MAX (1u << 20) /* most key bytes one list reply carries */
#define LIST_OIDS_MAX 4096u
#define SNAPS_MAX 65536u
#define SESSIONS_MAX 4096u /* clients with an RMA endpoint, per target */
#define RKEYS_CACHED 32u   /* unpacked rkeys kept per session */
#define LEASES_MAX 65536u  /* write leases held at once, per target */

/*
 * A client's session: the endpoint RMA runs on, and the rkeys of its
 * long-lived registrations (lode_buf_alloc), unpacked once. Unpacking a
 * shared-memory rkey maps the client's segment, and mapping it per request
 * costs more than moving the data (docs/decisions/0004).
 */
struct cm_conn;

struct session {
	struct srv_tgt *t;
	struct cm_conn *cm;  /* the session runs on this accepted endpoint (tcp), not its own */
	ucp_ep_h ep;
	uint32_t id;
	bool peer_err;  /* the endpoint reports the client's death (the client asked: all do now) */
	bool ended;     /* BYE came: no more requests, the endpoint waits for the client to go */
	uint64_t client; /* the capability's client id that opened it: every request must match */
	bool closed;    /* its endpoint is closed; freed when no op holds it */
	unsigned refs;  /* ops bound to it */
	struct {
		uint64_t reg;   /* the client's registration id; 0: free slot */
		ucp_rkey_h rkey;
		unsigned refs;  /* ops using it now */
	} rk[RKEYS_CACHED];
	unsigned rk_next;
};

enum op_stage {
	ST_NEW,      /* decoded, nothing started */
	ST_RECV,     /* a rendezvous value waits to be received */
	ST_VALUE_IN, /* an update's value is in buf: hand it to the engine */
	ST_REPLY,    /* the result is known: send the reply */
};

struct srv_op {
	struct srv_tgt *t;
	struct srv_op *next;
	struct srv_op *bprev, *bnext;  /* the target's ops in flight */
	void *ureq;                  /* an outstanding rendezvous receive, to cancel */
	ucp_ep_h ep;
	struct net_hdr hdr;
	struct net_args a;
	enum op_stage stage;
	int rc;
	void *rndv;                 /* UCX data descriptor while ST_RECV */
	uint8_t *buf;               /* engine buffer: value in or out, list items */
	size_t buf_len;
	const void *data;           /* reply data */
	size_t data_len;
	uint64_t val;               /* reply val */
	uint64_t client;            /* the verified capability's client id */
	uint32_t fetched;           /* eng_sv_fetch's length */
	ucp_rkey_h rkey;
	bool reserved;              /* buf is engine extent space (eng_value_reserve) */
	int rk_slot;                /* rkey is the session's cached one in this slot, or -1 */
	struct session *sess;       /* the client's session: replies and RMA go on its endpoint */
	struct cm_conn *cm;         /* HELLO over an accepted endpoint: the session goes on it */
	bool in_cb;                 /* inside the AM callback: ep (UCX's reply endpoint) is valid */
	uint32_t bye;               /* NET_OP_BYE: the session to end once the reply is sent */
	/* Not cleared between uses: */
	struct eng_anchor anchor;
	uint8_t args[NET_ARGS_MAX]; /* a's pointers point here */
	uint8_t rhdr[NET_HDR_SIZE + 16 + 2 + LODE_KEY_MAX + 4];
};

struct srv_tgt {
	struct srv *s;
	unsigned idx;
	struct eng_target *eng;
	ucp_worker_h worker;
	ucp_address_t *addr;
	size_t addr_len;
	ucp_mem_h arena_memh;
	void *arena;
	size_t arena_len;
	int epfd;
	pthread_t thread;
	bool started;
	struct srv_op *ready, *ready_tail; /* ops for the loop to run */
	struct srv_op *free_ops;
	struct srv_op *busy;               /* ops taken and not yet freed */
	unsigned inflight;
	uint64_t requests, errors;
	bool failed_logged;
	/*
	 * Sessions: endpoints this target made to clients' workers. RMA runs on
	 * these, not on the endpoint a request came in on, because UCX 1.13
	 * cannot do RMA on an endpoint it created for replies.
	 */
	struct session *sessions[SESSIONS_MAX];
	unsigned session_hint;
	ucp_listener_h listener;  /* tcp clients connect here (UCX's connection manager) */
	uint16_t port;
	struct cm_conn *conns;    /* endpoints the listener accepted */
	uint64_t drain_deadline; /* stopping: when to stop waiting for clients */
	bool drain_forced;
	uint64_t agg_check_us;  /* next look at the extent file's fill */
	uint64_t agg_used;      /* extent bytes in use after the last aggregation */
	uint64_t agg_forced_us; /* no aggregation for space before this */
	uint64_t aggregations;
	uint64_t agg_walks;     /* the engine's long_walks at the last aggregation */
	uint64_t agg_walk_us;   /* no aggregation for long reads before this */
	unsigned agg_walk_idle; /* of those, in a row that removed no record (the wait doubles) */
	struct auth_cache caps;  /* capabilities this target verified */
	struct lease_tab leases; /* write leases of EC arrays (lease.h) */
	/* What other threads may read (srv_tgt_info), published by the target's own. */
	struct {
		_Atomic uint64_t used, cap, requests, errors, at_us;
		_Atomic uint32_t load_pm; /* CPU share of the last second, per mille */
		uint64_t cpu_ns, since_us;
	} pub;
};

static const struct lode_uuid root_cont = NET_ROOT_CONT_INIT;

void srv_log(const char *fmt, ...)
{
	char ts[32];
	struct timespec now;
	struct tm tm;
	va_list ap;

	clock_gettime(CLOCK_REALTIME, &now);
	localtime_r(&now.tv_sec, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%d %H:%M:%S", &tm);
	va_start(ap, fmt);
	flockfile(stderr);
	fprintf(stderr, "%s loded: ", ts);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	funlockfile(stderr);
	va_end(ap);
}

/* ---- the epoch clock ----------------------------------------------------- */

static _Atomic uint64_t hlc_last;

static lode_epoch_t hlc_now(void)
{
	struct timespec ts;
	uint64_t now, last = atomic_load(&hlc_last), next;

	clock_gettime(CLOCK_REALTIME, &ts);
	now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	do {
		next = now > last ? now : last + 1;
	} while (!atomic_compare_exchange_weak(&hlc_last, &last, next));
	return next;
}

/* The clock moved to e at least (a snapshot's epoch, picked above every
 * target's clock, and no further ahead of ours than SNAP_AHEAD_NS):
 * whatever lands here after the snapshot is above it. */
#define SNAP_AHEAD_NS (10ull * 1000 * 1000 * 1000)

static void hlc_observe(lode_epoch_t e)
{
	uint64_t last = atomic_load(&hlc_last);

	while (last < e && !atomic_compare_exchange_weak(&hlc_last, &last, e))
		;
}

/* ---- ops ------------------------------------------------------------------ */

static struct srv_op *op_get(struct srv_tgt *t)
{
	struct srv_op *op = t->free_ops;

	if (op)
		t->free_ops = op->next;
	else if (!(op = malloc(sizeof(*op))))
		return NULL;
	memset(op, 0, offsetof(struct srv_op, anchor));
	op->t = t;
	op->rk_slot = -1;
	op->bnext = t->busy;
	if (t->busy)
		t->busy->bprev = op;
	t->busy = op;
	op->anchor.eof = 0;
	op->anchor.len = 0;
	t->inflight++;
	return op;
}

static void session_free(struct session *ss)
{
	for (unsigned i = 0; i < RKEYS_CACHED; i++)
		if (ss->rk[i].reg)
			ucp_rkey_destroy(ss->rk[i].rkey);
	free(ss);
}

/* Drop op's hold on its session (and cached rkey); a closed session goes with its last op. */
static void op_unbind(struct srv_op *op)
{
	struct session *ss = op->sess;

	if (!ss)
		return;
	if (op->rk_slot >= 0 && ss->rk[op->rk_slot].refs)
		ss->rk[op->rk_slot].refs--;
	op->rk_slot = -1;
	op->rkey = NULL;
	op->sess = NULL;
	if (--ss->refs == 0 && ss->closed)
		session_free(ss);
}

static void op_bind(struct srv_op *op, struct session *ss)
{
	op->sess = ss;
	ss->refs++;
}

/*
 * The rkey for op's RMA: the session's cached one for a long-lived
 * registration, unpacked and cached on first use; else unpacked for this
 * op alone. Errors: -EPROTO (an rkey UCX refuses).
 */
static int op_rkey(struct srv_op *op)
{
	struct session *ss = op->sess;
	uint64_t reg = op->a.rma_reg;
	unsigned i, free_slot = RKEYS_CACHED;

	op->rk_slot = -1;
	if (reg) {
		for (i = 0; i < RKEYS_CACHED; i++) {
			if (ss->rk[i].reg == reg) {
				ss->rk[i].refs++;
				op->rkey = ss->rk[i].rkey;
				op->rk_slot = (int)i;
				return 0;
			}
		}
		/* Replace an idle entry, round robin. */
		for (unsigned n = 0; n < RKEYS_CACHED; n++) {
			i = (ss->rk_next + n) % RKEYS_CACHED;
			if (ss->rk[i].refs == 0) {
				free_slot = i;
				break;
			}
		}
	}
	if (ucp_ep_rkey_unpack(ss->ep, op->a.rkey, &op->rkey) != UCS_OK) {
		op->rkey = NULL;
		return -EPROTO;
	}
	if (free_slot < RKEYS_CACHED) {
		if (ss->rk[free_slot].reg)
			ucp_rkey_destroy(ss->rk[free_slot].rkey);
		ss->rk[free_slot].reg = reg;
		ss->rk[free_slot].rkey = op->rkey;
		ss->rk[free_slot].refs = 1;
		ss->rk_next = (free_slot + 1) % RKEYS_CACHED;
		op->rk_slot = (int)free_slot;
	}
	return 0;
}

static void op_put(struct srv_op *op)
{
	struct srv_tgt *t = op->t;

	if (op->rk_slot < 0 && op->rkey)
		ucp_rkey_destroy(op->rkey);
	op_unbind(op);
	if (op->bprev)
		op->bprev->bnext = op->bnext;
	else
		t->busy = op->bnext;
	if (op->bnext)
		op->bnext->bprev = op->bprev;
	if (op->buf)
		eng_buf_free(t->eng, op->buf);
	op->next = t->free_ops;
	t->free_ops = op;
	t->inflight--;
}

static void op_queue(struct srv_op *op)
{
	struct srv_tgt *t = op->t;

	op->next = NULL;
	if (t->ready_tail)
		t->ready_tail->next = op;
	else
		t->ready = op;
	t->ready_tail = op;
}

static void *op_buf(struct srv_op *op, size_t len)
{
	op->buf = eng_buf_alloc(op->t->eng, len ? len : 1);
	op->buf_len = len;
	return op->buf;
}

/*
 * Where an update's value should land: in RAM mode straight in the extent
 * space the engine reserves for it (the update then copies nothing), else
 * in an I/O buffer.
 */
static bool aggregate_for_space(struct srv_tgt *t);

static void *op_value_buf(struct srv_op *op, size_t len)
{
	struct eng_stats st;

	op->buf = eng_value_reserve(op->t->eng, (uint32_t)len);
	if (!op->buf && eng_tgt_stats(op->t->eng, &st) == 0 && st.extent_cap &&
	    st.extent_used + len > st.extent_cap && aggregate_for_space(op->t))
		op->buf = eng_value_reserve(op->t->eng, (uint32_t)len);
	if (op->buf) {
		op->buf_len = len;
		op->reserved = true;
		return op->buf;
	}
	return op_buf(op, len);
}

/* Whether op's session still has its endpoint (a client can go at any time). */
static bool op_session_alive(struct srv_op *op)
{
	return op->sess && !op->sess->closed;
}

static ucp_request_param_t op_param(struct srv_op *op, void *cb, void *buf)
{
	ucp_request_param_t p = {0};
	struct srv_tgt *t = op->t;

	p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
	p.user_data = op;
	p.cb.send = (ucp_send_nbx_callback_t)cb;
	if (t->arena_memh && buf && (uint8_t *)buf >= (uint8_t *)t->arena &&
	    (uint8_t *)buf < (uint8_t *)t->arena + t->arena_len) {
		p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
		p.memh = t->arena_memh;
	}
	return p;
}

/*
 * Whether a UCX operation goes on in the background: NULL means it finished
 * at once, an error pointer that it failed (op->rc says how); anything else
 * is a request whose callback runs later and frees it (freeing it now would
 * silence the callback).
 */
static bool ucs_started(ucs_status_ptr_t sp, struct srv_op *op)
{
	if (sp == NULL)
		return false;
	if (UCS_PTR_IS_ERR(sp)) {
		op->rc = net_ucs_errno(UCS_PTR_STATUS(sp));
		return false;
	}
	return true;
}

/* ---- replies ---------------------------------------------------------------- */

static void session_close(struct srv_tgt *t, uint32_t sn);
struct cm_conn;
static void cm_unlink_session(struct cm_conn *cc);

/*
 * A BYE: the session takes no more requests. UCX pairs the client's
 * endpoint with ours (over tcp, on one connection), and closing ours would
 * cut the client's too; so an endpoint that reports peer failure stays
 * until the client's side goes (session_error closes it then: over shm at
 * UCX's next peer check, UCX_KEEPALIVE_INTERVAL). A session without
 * peer-failure handling (a raw client's) ends now, but UCX will not
 * force-close its endpoint and keeps it (session_close logs that).
 */
static void session_end(struct srv_tgt *t, uint32_t sn)
{
	struct session *ss = sn && sn <= SESSIONS_MAX ? t->sessions[sn - 1] : NULL;

	if (!ss)
		return;
	if (ss->peer_err)
		ss->ended = true;
	else
		session_close(t, sn);
}

/* The reply is out: free the op; a BYE's session ends now, after its answer. */
static void op_done(struct srv_op *op)
{
	struct srv_tgt *t = op->t;
	uint32_t bye = op->bye;

	op_put(op);
	if (bye)
		session_end(t, bye);
}

static void reply_sent(void *req, ucs_status_t st, void *arg)
{
	ucp_request_free(req);
	op_done(arg);
}

/*
 * Where op's reply goes: its session's endpoint while the session lives;
 * UCX's reply endpoint only while still inside the Active Message callback
 * (UCX may destroy that endpoint as soon as the client goes); else nowhere.
 */
static ucp_ep_h op_reply_ep(struct srv_op *op)
{
	if (op_session_alive(op))
		return op->sess->ep;
	return op->in_cb ? op->ep : NULL;
}

static void op_reply(struct srv_op *op)
{
	struct srv_tgt *t = op->t;
	struct net_reply_args ra = {0};
	struct net_hdr h = {0};
	ucp_request_param_t p;
	int has_anchor = op->rc == 0 && net_op_has_anchor(op->hdr.opcode);
	ucp_ep_h ep;
	int n;

	if (op->rc < 0)
		t->errors++;
	if (!(ep = op_reply_ep(op))) {
		op_done(op); /* the client is gone: nobody to answer */
		return;
	}
	ra.val = op->val;
	ra.anchor.eof = op->anchor.eof;
	ra.anchor.len = op->anchor.len;
	ra.anchor.key = op->anchor.key;
	n = net_reply_encode(&ra, has_anchor, op->rhdr + NET_HDR_SIZE,
			     sizeof(op->rhdr) - NET_HDR_SIZE);
	if (n < 0) {
		op->rc = n;
		n = net_reply_encode(&ra, 0, op->rhdr + NET_HDR_SIZE, sizeof(op->rhdr) - NET_HDR_SIZE);
	}
	h.magic = NET_MAGIC;
	h.version = NET_VERSION;
	h.opcode = op->hdr.opcode;
	h.flags = NET_F_REPLY;
	h.status = op->rc;
	h.req_id = op->hdr.req_id;
	h.args_len = (uint16_t)n;
	h.target = t->idx;
	net_hdr_encode(&h, op->rhdr);
	if (op->rc < 0 && op->rc != -EOVERFLOW) {
		op->data = NULL;
		op->data_len = 0;
	}
	p = op_param(op, reply_sent, (void *)op->data);
	if (!ucs_started(ucp_am_send_nbx(ep, NET_AM_REPLY, op->rhdr, NET_HDR_SIZE + (size_t)n,
					 op->data, op->data_len, &p),
			 op))
		op_done(op);
}

/* ---- engine completions --------------------------------------------------- */

static void rma_put_flushed(void *req, ucs_status_t st, void *arg)
{
	struct srv_op *op = arg;

	if (req)
		ucp_request_free(req);
	if (st != UCS_OK)
		op->rc = net_ucs_errno(st);
	op->data = NULL;
	op->data_len = 0;
	op->stage = ST_REPLY;
	op_queue(op);
}

/*
 * A fetched value goes back either by RMA PUT into the client's buffer
 * (then a flush, so the reply cannot overtake the data) or as the reply's
 * AM data.
 */
static void fetch_out(struct srv_op *op, size_t n)
{
	ucp_request_param_t p;

	op->data = op->buf;
	op->data_len = n;
	if (op->a.bulk != NET_BULK_RMA || n == 0) {
		op_reply(op);
		return;
	}
	if (!op_session_alive(op)) {
		op->rc = -ECONNRESET;
		op_reply(op);
		return;
	}
	p = op_param(op, NULL, op->buf);
	p.op_attr_mask &= ~(uint32_t)(UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA);
	ucs_status_ptr_t sp = ucp_put_nbx(op->sess->ep, op->buf, n, op->a.rma_addr, op->rkey, &p);
	if (UCS_PTR_IS_ERR(sp)) {
		op->rc = net_ucs_errno(UCS_PTR_STATUS(sp));
		op->data = NULL;
		op->data_len = 0;
		op_reply(op);
		return;
	}
	if (sp)
		ucp_request_free(sp);
	p = op_param(op, rma_put_flushed, NULL);
	sp = ucp_ep_flush_nbx(op->sess->ep, &p);
	if (!ucs_started(sp, op))
		rma_put_flushed(NULL, UCS_OK, op);
}

static void eng_done(void *arg, int rc)
{
	struct srv_op *op = arg;

	op->rc = rc;
	switch (op->hdr.opcode) {
	case NET_OP_SV_FETCH:
		op->val = op->fetched;
		if (rc == 0 || rc == -EOVERFLOW) {
			fetch_out(op, op->fetched < op->a.len ? op->fetched : op->a.len);
			return;
		}
		break;
	case NET_OP_ARR_FETCH:
		op->val = op->a.len;
		if (rc == 0) {
			fetch_out(op, op->a.len);
			return;
		}
		break;
	default:
		break;
	}
	op_reply(op);
}

/* ---- dispatch ----------------------------------------------------------------- */

static void status_fill(struct srv_op *op)
{
	struct srv_tgt *t = op->t;
	struct eng_stats es = {0};
	struct net_status ns = {0};
	struct timespec cpu;

	eng_tgt_stats(t->eng, &es);
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
	ns.records = es.records;
	ns.extent_used = es.extent_used;
	ns.extent_cap = es.extent_cap;
	ns.requests = t->requests;
	ns.errors = t->errors;
	ns.cpu_ns = (uint64_t)cpu.tv_sec * 1000000000ull + (uint64_t)cpu.tv_nsec;
	ns.ram = t->s->cfg->ram;
	ns.direct_io = es.direct_io;
	if (!op_buf(op, NET_STATUS_SIZE)) {
		op->rc = -ENOMEM;
		return;
	}
	net_status_encode(&ns, op->buf);
	op->data = op->buf;
	op->data_len = NET_STATUS_SIZE;
}

static void anchor_in(struct srv_op *op)
{
	op->anchor.eof = op->a.anchor.eof;
	op->anchor.len = op->a.anchor.len;
	if (op->a.anchor.len)
		memcpy(op->anchor.key, op->a.anchor.key, op->a.anchor.len);
}

/* Bytes taken by n keys packed as [u16 len][bytes]. */
static size_t packed_len(const uint8_t *p, int n)
{
	size_t off = 0;

	for (int i = 0; i < n; i++)
		off += 2 + ((size_t)p[off] | (size_t)p[off + 1] << 8);
	return off;
}

static void op_list(struct srv_op *op, const struct eng_key *k)
{
	struct srv_tgt *t = op->t;
	lode_epoch_t e = op->a.epoch ? op->a.epoch : LODE_EPOCH_MAX;
	int n;

	if (op->hdr.flags & NET_F_LIST_ALL)
		e = ENG_EPOCH_ANY;
	anchor_in(op);
	if (op->hdr.opcode == NET_OP_OBJ_LIST) {
		unsigned max = op->a.max < LIST_OIDS_MAX ? op->a.max : LIST_OIDS_MAX;
		struct lode_oid *oids;

		if (max == 0 || !op_buf(op, (size_t)max * 16)) {
			op->rc = max ? -ENOMEM : -EINVAL;
			return;
		}
		oids = malloc((size_t)max * sizeof(*oids));
		if (!oids) {
			op->rc = -ENOMEM;
			return;
		}
		n = eng_obj_list(t->eng, k->cont, e, &op->anchor, oids, max);
		for (int i = 0; i < n; i++) {
			for (unsigned b = 0; b < 8; b++) {
				op->buf[16 * i + b] = (uint8_t)(oids[i].hi >> (8 * b));
				op->buf[16 * i + 8 + b] = (uint8_t)(oids[i].lo >> (8 * b));
			}
		}
		free(oids);
		if (n >= 0)
			op->data_len = (size_t)n * 16;
	} else {
		size_t cap = op->a.max < LIST_BYTES_MAX ? op->a.max : LIST_BYTES_MAX;

		if (cap == 0 || !op_buf(op, cap)) {
			op->rc = cap ? -ENOMEM : -EOVERFLOW;
			return;
		}
		n = op->hdr.opcode == NET_OP_DKEY_LIST
			    ? eng_dkey_list(t->eng, k, e, &op->anchor, op->buf, cap)
			    : eng_akey_list(t->eng, k, e, &op->anchor, op->buf, cap);
		if (n >= 0)
			op->data_len = packed_len(op->buf, n);
	}
	if (n < 0) {
		op->rc = n;
		return;
	}
	op->val = (uint64_t)n;
	op->data = op->buf;
}

static void op_snap_list(struct srv_op *op)
{
	unsigned max = op->a.max < SNAPS_MAX ? op->a.max : SNAPS_MAX;
	lode_epoch_t *eps = malloc(((size_t)max + 1) * sizeof(*eps));
	int n;

	if (!eps || !op_buf(op, (size_t)max * 8 + 8)) {
		free(eps);
		op->rc = -ENOMEM;
		return;
	}
	n = eng_snap_list(op->t->eng, &op->a.cont, eps, max);
	if (n < 0) {
		op->rc = n;
	} else {
		unsigned have = (unsigned)n < max ? (unsigned)n : max;

		for (unsigned i = 0; i < have; i++)
			for (unsigned b = 0; b < 8; b++)
				op->buf[8 * i + b] = (uint8_t)(eps[i] >> (8 * b));
		op->val = (uint64_t)n;
		op->data = op->buf;
		op->data_len = (size_t)have * 8;
	}
	free(eps);
}

/*
 * The epoch an update or punch lands at: now, or for rebuild's copies the
 * one they name (op_authorize checked the rights), beneath every version a
 * client writes while the rebuild runs, so a copy never hides one.
 */
static lode_epoch_t op_epoch(const struct srv_op *op)
{
	if ((op->hdr.flags & NET_F_REBUILD) && op->a.epoch && op->a.epoch != LODE_EPOCH_MAX)
		return op->a.epoch;
	return hlc_now();
}

static void op_value_in(struct srv_op *op, const struct eng_key *k)
{
	struct srv_tgt *t = op->t;
	lode_epoch_t e = op_epoch(op);
	int rc;

	for (int tries = 0; tries < 2; tries++) {
		if (op->hdr.opcode == NET_OP_SV_UPDATE)
			rc = eng_sv_update(t->eng, k, e, op->buf, (uint32_t)op->a.len, eng_done, op);
		else
			rc = eng_arr_update(t->eng, k, e, op->a.off, op->buf, (uint32_t)op->a.len,
					    eng_done, op);
		if (rc != -ENOSPC || !aggregate_for_space(t))
			break;
	}
	if (rc < 0) {
		op->rc = rc;
		op_reply(op);
		return;
	}
	if (op->reserved)
		op->buf = NULL; /* the engine took the space */
}

static void rma_got(void *req, ucs_status_t st, void *arg)
{
	struct srv_op *op = arg;

	ucp_request_free(req);
	if (st != UCS_OK)
		op->rc = net_ucs_errno(st);
	op->stage = ST_VALUE_IN;
	op_queue(op);
}

/* ---- sessions ------------------------------------------------------------------ */

static void session_close(struct srv_tgt *t, uint32_t sn)
{
	struct session *ss;

	if (sn == 0 || sn > SESSIONS_MAX || !(ss = t->sessions[sn - 1]))
		return;
	t->sessions[sn - 1] = NULL;
	ss->closed = true;
	/* Held here: a cancel or the close may complete an op's send at once,
	 * and its op_unbind must not free ss under us. */
	ss->refs++;
	lease_drop_session(&t->leases, sn); /* a writer that died gives way */
	/* Values still being received from this client never will be. */
	for (struct srv_op *op = t->busy; op; op = op->bnext)
		if (op->sess == ss && op->ureq)
			ucp_request_cancel(t->worker, op->ureq);
	if (ss->cm) {
		/* The endpoint is the accepted connection's; it closes with that. */
		cm_unlink_session(ss->cm);
	} else {
		/* Forcing cancels what is outstanding on it; those ops then fail. */
		int rc = net_ep_close_force(ss->ep);

		if (rc < 0)
			srv_log("target %u: session %u's endpoint not closed (%s); UCX holds it "
				"until loded stops", t->idx, sn, lode_strerror(rc));
	}
	if (--ss->refs == 0)
		session_free(ss);
}

/* ---- accepted endpoints (tcp) -------------------------------------------------- */

/*
 * A tcp client connects through its target's UCX listener, and loded makes
 * the endpoint from the connection request, with peer-failure handling; the
 * client's session then runs on that endpoint. UCX 1.13 aborts the server
 * when a client dies inside a wire-up started from a worker address, but
 * not in this flow (docs/decisions/0004). Shared memory has no listener and
 * keeps the worker-address flow.
 */
struct cm_conn {
	struct srv_tgt *t;
	ucp_ep_h ep;
	struct session *ss; /* its session, once a HELLO made one */
	struct cm_conn *prev, *next;
};

static void cm_unlink_session(struct cm_conn *cc)
{
	if (cc->ss) {
		cc->ss->cm = NULL;
		cc->ss = NULL;
	}
}

static void cm_close(struct cm_conn *cc)
{
	struct srv_tgt *t = cc->t;
	int rc;

	if (cc->ss) {
		struct session *ss = cc->ss;

		session_close(t, ss->id); /* unlinks cc->ss; leaves the endpoint to us */
		/* ...and, having no endpoint of its own, it must not close ours. */
	}
	for (struct srv_op *op = t->busy; op; op = op->bnext)
		if (op->cm == cc)
			op->cm = NULL;
	if (cc->prev)
		cc->prev->next = cc->next;
	else
		t->conns = cc->next;
	if (cc->next)
		cc->next->prev = cc->prev;
	if ((rc = net_ep_close_force(cc->ep)) < 0)
		srv_log("target %u: a connection's endpoint not closed (%s); UCX holds it until "
			"loded stops", t->idx, lode_strerror(rc));
	free(cc);
}

static void cm_error(void *arg, ucp_ep_h ep, ucs_status_t st)
{
	cm_close(arg);
}

static void cm_accept(ucp_conn_request_h req, void *arg)
{
	struct srv_tgt *t = arg;
	ucp_ep_params_t ep = {0};
	struct cm_conn *cc;

	if (atomic_load(&t->s->stop) || !(cc = calloc(1, sizeof(*cc)))) {
		ucp_listener_reject(t->listener, req);
		return;
	}
	cc->t = t;
	ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
			UCP_EP_PARAM_FIELD_ERR_HANDLER;
	ep.conn_request = req;
	ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
	ep.err_handler.cb = cm_error;
	ep.err_handler.arg = cc;
	if (ucp_ep_create(t->worker, &ep, &cc->ep) != UCS_OK) {
		free(cc);
		return;
	}
	cc->next = t->conns;
	if (t->conns)
		t->conns->prev = cc;
	t->conns = cc;
}

static struct cm_conn *cm_find(struct srv_tgt *t, ucp_ep_h ep)
{
	for (struct cm_conn *cc = t->conns; cc; cc = cc->next)
		if (cc->ep == ep)
			return cc;
	return NULL;
}

/* Listen for tcp clients on the listen address's host, on a port of the kernel's choice. */
static void cm_listen(struct srv_tgt *t)
{
	struct sockaddr_storage ss = t->s->listen_ss;
	ucp_listener_params_t lp = {0};
	ucp_listener_attr_t la = {0};
	socklen_t len = ss.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						  : sizeof(struct sockaddr_in);

	if (!(t->s->transports & NET_TP_TCP) || !ss.ss_family)
		return;
	if (ss.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&ss)->sin6_port = 0;
	else
		((struct sockaddr_in *)&ss)->sin_port = 0;
	lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
	lp.sockaddr.addr = (struct sockaddr *)&ss;
	lp.sockaddr.addrlen = len;
	lp.conn_handler.cb = cm_accept;
	lp.conn_handler.arg = t;
	if (ucp_listener_create(t->worker, &lp, &t->listener) != UCS_OK) {
		srv_log("target %u: no UCX listener; tcp clients use worker addresses", t->idx);
		t->listener = NULL;
		return;
	}
	la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
	if (ucp_listener_query(t->listener, &la) == UCS_OK)
		t->port = ntohs(la.sockaddr.ss_family == AF_INET6
					? ((struct sockaddr_in6 *)&la.sockaddr)->sin6_port
					: ((struct sockaddr_in *)&la.sockaddr)->sin_port);
}

/* A client went away: its session ends; other clients carry on. */
static void session_error(void *arg, ucp_ep_h ep, ucs_status_t st)
{
	struct session *ss = arg;

	if (!ss->closed)
		session_close(ss->t, ss->id);
}

static void session_ready(void *req, ucs_status_t st, void *arg)
{
	struct srv_op *op = arg;

	if (req)
		ucp_request_free(req);
	if (st != UCS_OK) {
		session_close(op->t, (uint32_t)op->val);
		op->rc = net_ucs_errno(st);
	}
	op->stage = ST_REPLY;
	op_queue(op);
}

/*
 * NET_OP_HELLO: make an endpoint to the client's worker and answer with its
 * session number once the endpoint is wired up in both directions (flushed),
 * so that no half-made endpoint outlives a client that dies right after.
 */
static void session_open(struct srv_op *op)
{
	struct srv_tgt *t = op->t;
	ucp_ep_params_t ep = {0};
	ucp_request_param_t p;
	struct session *ss;
	uint32_t i, n;
	ucp_ep_h e;

	for (n = 0, i = t->session_hint; n < SESSIONS_MAX && t->sessions[i]; n++)
		i = (i + 1) % SESSIONS_MAX;
	if (n == SESSIONS_MAX || !(ss = calloc(1, sizeof(*ss)))) {
		op->rc = n == SESSIONS_MAX ? -EMFILE : -ENOMEM;
		op_reply(op);
		return;
	}
	ss->t = t;
	ss->id = i + 1;
	ss->client = op->client;
	if (op->cm) {
		/* Accepted over tcp: the session runs on that endpoint, already wired. */
		if (op->cm->ss)
			session_close(t, op->cm->ss->id); /* a second hello replaces the first */
		ss->cm = op->cm;
		ss->ep = op->cm->ep;
		ss->peer_err = true;
		op->cm->ss = ss;
		t->sessions[i] = ss;
		t->session_hint = (i + 1) % SESSIONS_MAX;
		op->val = i + 1;
		op->hdr.session = i + 1;
		op_bind(op, ss);
		op->stage = ST_REPLY;
		op_queue(op);
		return;
	}
	ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
	ep.address = (const ucp_address_t *)op->buf;
	ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
	if (op->hdr.flags & NET_F_PEER_ERR) {
		/* The client's side detects a dead peer, so ours can too. */
		ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
		ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
		ep.err_handler.cb = session_error;
		ep.err_handler.arg = ss;
		ss->peer_err = true;
	}
	if (ucp_ep_create(t->worker, &ep, &e) != UCS_OK) {
		free(ss);
		op->rc = -EPROTO;
		op_reply(op);
		return;
	}
	ss->ep = e;
	t->sessions[i] = ss;
	t->session_hint = (i + 1) % SESSIONS_MAX;
	op->val = i + 1;
	op->hdr.session = i + 1;
	op_bind(op, ss); /* the answer goes on the new endpoint */
	p = op_param(op, session_ready, NULL);
	if (!ucs_started(ucp_ep_flush_nbx(e, &p), op))
		session_ready(NULL, op->rc ? UCS_ERR_IO_ERROR : UCS_OK, op);
}

static uint64_t now_us(void);

/* Append a u16-length-prefixed key (len 0: an empty one) at p; the byte after it. */
static uint8_t *lease_key_put(uint8_t *p, const void *k, size_t len)
{
	*p++ = (uint8_t)len;
	*p++ = (uint8_t)(len >> 8);
	if (len)
		memcpy(p, k, len);
	return p + len;
}

/*
 * NET_OP_LEASE: take (max ms) or give back (max 0; NET_F_TORN: torn) the
 * write lease of the array the key names, for the token in epoch, the
 * write covering [off, off + len) of the members. The lease's key is the
 * container, the object and both keys. A lease granted answers 1 if the
 * array is torn, with the torn range as data. With NET_F_LEASE_DKEY it is
 * the dkey's lease (its akey empty), with NET_F_LEASE_OBJ the object's
 * (both empty): an EC punch's, which never tears; an array's waits while
 * its dkey's or object's is held, and theirs while any under them is.
 */
static void op_lease(struct srv_op *op)
{
	const struct net_args *a = &op->a;
	uint8_t key[16 + 16 + 2 + LODE_KEY_MAX + 2 + LODE_KEY_MAX], *p = key;
	uint8_t upd[16 + 16 + 2 + LODE_KEY_MAX + 2], upo[16 + 16 + 4];
	bool obj = op->hdr.flags & NET_F_LEASE_OBJ;
	bool dkey = !obj && op->hdr.flags & NET_F_LEASE_DKEY;
	size_t dend;

	_Static_assert(sizeof(key) <= LEASE_KEY_MAX, "a lease key fits");

	memcpy(p, a->cont.b, 16);
	p += 16;
	for (int i = 0; i < 8; i++) {
		p[i] = (uint8_t)(a->oid.hi >> (8 * i));
		p[8 + i] = (uint8_t)(a->oid.lo >> (8 * i));
	}
	p += 16;
	p = lease_key_put(p, a->dkey, obj ? 0 : a->dkey_len);
	dend = (size_t)(p - key);
	p = lease_key_put(p, a->akey, obj || dkey ? 0 : a->akey_len);
	struct lease_ask ask = {.token = a->epoch, .session = op->hdr.session, .dur_ms = a->max,
				.off = a->off, .len = a->len,
				.reader = op->hdr.flags & NET_F_LEASE_READ,
				.untorn = obj || dkey};

	/* A snapshot taker's mend (its hold's token: the high half) passes the
	 * container's holds while that one lasts (lease_take). */
	if (op->hdr.flags & NET_F_SNAP_HOLD)
		ask.holder = (uint32_t)(a->epoch >> 32);

	if (obj)
		ask.sub = 32; /* everything in the object */
	else if (dkey)
		ask.sub = dend; /* the arrays under the dkey */

	if (a->max == 0) {
		op->rc = lease_give(&op->t->leases, key, (size_t)(p - key), &ask,
				    op->hdr.flags & NET_F_TORN);
	} else if (op->hdr.flags & NET_F_LEASE_RENEW) {
		op->rc = lease_renew(&op->t->leases, key, (size_t)(p - key), &ask, now_us());
	} else {
		struct lease_torn torn = {0};

		/* What covers it: the object's key, and an array's dkey's. */
		memcpy(upo, key, 32);
		(void)lease_key_put(lease_key_put(upo + 32, NULL, 0), NULL, 0);
		memcpy(upd, key, dend);
		(void)lease_key_put(upd + dend, NULL, 0);
		if (!obj)
			ask.up[0] = upo, ask.up_len[0] = sizeof(upo);
		if (!obj && !dkey)
			ask.up[1] = upd, ask.up_len[1] = dend + 2;
		op->rc = lease_take(&op->t->leases, key, (size_t)(p - key), &ask, now_us(), &op->val,
				    &torn);
		if (op->rc == 0 && (op->val = torn.torn) && op_buf(op, 16)) {
			for (int i = 0; i < 8; i++) {
				op->buf[i] = (uint8_t)(torn.off >> (8 * i));
				op->buf[8 + i] = (uint8_t)(torn.end >> (8 * i));
			}
			op->data = op->buf;
			op->data_len = 16;
		}
	}
}

/*
 * NET_OP_SNAP_CREATE with NET_F_SNAP_HOLD, a snapshot's barrier (lease.h,
 * lode_snap_create): writers' leases of the container are held back, by
 * the taker whose token is the epoch's high 32 bits, for the ms in its low
 * ones (at most LEASE_MAX_MS; 0: let go). Answers how many are held now,
 * with this engine's clock (8 bytes) as data; with NET_F_SNAP_TORN, the
 * container's torn arrays after it (lease_torn_in), for the taker to mend.
 */
static void op_snap_hold(struct srv_op *op)
{
	uint64_t now = now_us(), ms = op->a.epoch & 0xffffffffu;
	uint32_t token = (uint32_t)(op->a.epoch >> 32);
	lode_epoch_t e = hlc_now();

	if (ms > LEASE_MAX_MS)
		ms = LEASE_MAX_MS;
	op->rc = lease_hold(&op->t->leases, op->a.cont.b, token, ms ? now + ms * 1000 : 0, now);
	if (op->rc == -ENOSPC)
		op->rc = -EAGAIN; /* others' snapshots hold every place: asked again */
	if (op->rc < 0)
		return;
	op->val = lease_held_in(&op->t->leases, op->a.cont.b, now);
	if (!op_buf(op, op->hdr.flags & NET_F_SNAP_TORN ? 12 + NET_TORN_LIST_MAX : 8)) {
		op->rc = -ENOMEM;
		return;
	}
	for (int i = 0; i < 8; i++)
		op->buf[i] = (uint8_t)(e >> (8 * i));
	op->data = op->buf;
	op->data_len = 8;
	if (op->hdr.flags & NET_F_SNAP_TORN) {
		size_t len;
		unsigned n = lease_torn_in(&op->t->leases, op->a.cont.b, now, op->buf + 12,
					   NET_TORN_LIST_MAX, &len);

		for (int i = 0; i < 4; i++)
			op->buf[8 + i] = (uint8_t)(n >> (8 * i));
		op->data_len = 12 + len;
	}
}

/*
 * Whether the reclaim may drop a dkey (DKEY_DROP) or fold an object's
 * punches (OBJ_FOLD) on t now (docs/decisions/0014): the engine's own
 * map is as new as the one the request was placed with, so every write
 * placed with an older map is refused from now on; and no write or punch
 * of that dkey (with fold, of the object) placed with an older map (or
 * none) that passed its map check before is still in flight, waiting for
 * its value (RMA, rendezvous) or for the engine: it would land after the
 * drop, a stray old version. (One placed with the drop's map or a newer
 * one places by the settled layout: not a stray, and not waited for, so
 * steady writes cannot hold a fold off.) Else -EBUSY, and the walk comes
 * back.
 */
static int op_reclaim_clear(const struct srv_op *self)
{
	const struct net_args *a = &self->a;
	bool fold = self->hdr.opcode == NET_OP_OBJ_FOLD;

	if (self->hdr.map_ver > atomic_load_explicit(&self->t->s->map_ver, memory_order_relaxed))
		return -EBUSY;
	for (const struct srv_op *op = self->t->busy; op; op = op->bnext) {
		uint16_t oc = op->hdr.opcode;
		bool write = oc == NET_OP_SV_UPDATE || oc == NET_OP_ARR_UPDATE ||
			     oc == NET_OP_AKEY_PUNCH || oc == NET_OP_ARR_PUNCH ||
			     oc == NET_OP_DKEY_PUNCH || oc == NET_OP_OBJ_PUNCH;

		if (op == self || !write || op->rc < 0 || op->stage == ST_REPLY ||
		    (op->hdr.map_ver && self->hdr.map_ver && op->hdr.map_ver >= self->hdr.map_ver) ||
		    memcmp(&op->a.cont, &a->cont, sizeof(a->cont)) != 0 ||
		    op->a.oid.hi != a->oid.hi || op->a.oid.lo != a->oid.lo)
			continue;
		if (fold || oc == NET_OP_OBJ_PUNCH ||
		    (op->a.dkey_len == a->dkey_len && memcmp(op->a.dkey, a->dkey, a->dkey_len) == 0))
			return -EBUSY;
	}
	return 0;
}

/* Start the op: returns after queuing work or sending the reply. */
static void op_dispatch(struct srv_op *op)
{
	struct srv_tgt *t = op->t;
	struct net_args *a = &op->a;
	struct eng_key k = {&a->cont, a->oid, a->dkey, a->dkey_len, a->akey, a->akey_len};
	lode_epoch_t rd = a->epoch ? a->epoch : LODE_EPOCH_MAX;
	int rc = 0;

	switch (op->hdr.opcode) {
	case NET_OP_PING:
		break;
	case NET_OP_STATUS:
		status_fill(op);
		break;
	case NET_OP_CONT_CREATE:
		op->rc = eng_cont_create(t->eng, &a->cont);
		break;
	case NET_OP_CONT_DESTROY:
		op->rc = eng_cont_destroy(t->eng, &a->cont);
		break;
	case NET_OP_SNAP_CREATE:
		if (op->hdr.flags & NET_F_SNAP_HOLD) {
			op_snap_hold(op);
			break;
		}
		op->val = a->epoch ? a->epoch : hlc_now();
		/* A snapshot's epoch is at most a little past this clock (the
		 * latest any target said, + 1): one far ahead would drag every
		 * container's writes here up with it. */
		if (op->val != LODE_EPOCH_MAX && op->val > hlc_now() + SNAP_AHEAD_NS) {
			op->rc = -EINVAL;
			break;
		}
		if ((op->rc = eng_snap_create(t->eng, &a->cont, op->val)) == 0)
			hlc_observe(op->val);
		break;
	case NET_OP_SNAP_DESTROY:
		op->rc = eng_snap_destroy(t->eng, &a->cont, a->epoch);
		break;
	case NET_OP_SNAP_LIST:
		op_snap_list(op);
		break;
	case NET_OP_SV_UPDATE:
	case NET_OP_ARR_UPDATE:
		if (a->len > LODE_IO_MAX) {
			op->rc = -E2BIG;
			break;
		}
		if (a->bulk == NET_BULK_RMA) {
			ucp_request_param_t p;

			if (!op_session_alive(op)) {
				op->rc = -ECONNRESET;
				break;
			}
			if (!op_value_buf(op, a->len)) {
				op->rc = -ENOMEM;
				break;
			}
			p = op_param(op, rma_got, op->buf);
			if (!ucs_started(ucp_get_nbx(op->sess->ep, op->buf, a->len, a->rma_addr, op->rkey, &p),
					 op)) {
				if (op->rc == 0)
					op_value_in(op, &k);
				else
					break;
			}
			return;
		}
		op_value_in(op, &k);
		return;
	case NET_OP_SV_FETCH:
		if (a->len > LODE_IO_MAX) {
			op->rc = -E2BIG;
			break;
		}
		if (!op_buf(op, a->len)) {
			op->rc = -ENOMEM;
			break;
		}
		rc = eng_sv_fetch(t->eng, &k, rd, op->buf, (uint32_t)a->len, &op->fetched, eng_done, op);
		if (rc == 0)
			return;
		op->rc = rc;
		break;
	case NET_OP_ARR_FETCH:
		if (a->len > LODE_IO_MAX || a->len == 0) {
			op->rc = a->len ? -E2BIG : -EINVAL;
			break;
		}
		if (!op_buf(op, a->len)) {
			op->rc = -ENOMEM;
			break;
		}
		rc = eng_arr_fetch(t->eng, &k, rd, a->off, op->buf, (uint32_t)a->len, eng_done, op);
		if (rc == 0)
			return;
		op->rc = rc;
		break;
	case NET_OP_ARR_SIZE:
		op->rc = eng_arr_size(t->eng, &k, rd, &op->val);
		break;
	case NET_OP_OBJ_PUNCH:
		k.dkey = NULL;
		k.akey = NULL;
		rc = eng_obj_punch(t->eng, &k, op_epoch(op), eng_done, op);
		goto async;
	case NET_OP_DKEY_PUNCH:
		k.akey = NULL;
		rc = eng_dkey_punch(t->eng, &k, op_epoch(op), eng_done, op);
		goto async;
	case NET_OP_AKEY_PUNCH:
		rc = eng_akey_punch(t->eng, &k, op_epoch(op), eng_done, op);
		goto async;
	case NET_OP_ARR_PUNCH:
		rc = eng_arr_punch(t->eng, &k, op_epoch(op), a->off, a->len, eng_done, op);
		goto async;
	case NET_OP_OBJ_LIST:
	case NET_OP_DKEY_LIST:
	case NET_OP_AKEY_LIST:
		op_list(op, &k);
		break;
	case NET_OP_AGGREGATE:
		op->rc = eng_aggregate(t->eng, &a->cont, a->epoch ? a->epoch : LODE_EPOCH_MAX);
		break;
	case NET_OP_HELLO:
		session_open(op);
		return;
	case NET_OP_BYE:
		op->bye = op->hdr.session; /* after the answer: see op_done */
		break;
	case NET_OP_LEASE:
		op_lease(op);
		break;
	case NET_OP_DKEY_DROP:
		k.akey = NULL;
		if ((op->rc = op_reclaim_clear(op)) == 0)
			op->rc = eng_dkey_drop(t->eng, &k);
		break;
	case NET_OP_OBJ_FOLD:
		k.dkey = NULL;
		k.akey = NULL;
		if ((op->rc = op_reclaim_clear(op)) == 0)
			op->rc = eng_obj_fold(t->eng, &k);
		break;
	default:
		op->rc = -EOPNOTSUPP;
		break;
	}
	op_reply(op);
	return;
async:
	if (rc < 0) {
		op->rc = rc;
		op_reply(op);
	}
}

static void rndv_done(void *req, ucs_status_t st, size_t len, void *arg)
{
	struct srv_op *op = arg;

	ucp_request_free(req);
	op->ureq = NULL;
	if (st != UCS_OK)
		op->rc = net_ucs_errno(st);
	op->rndv = NULL;
	op->stage = ST_VALUE_IN;
	op_queue(op);
}

static void op_run(struct srv_op *op)
{
	struct srv_tgt *t = op->t;

	if (op->stage == ST_RECV) {
		ucp_request_param_t p = op_param(op, NULL, op->buf);
		ucs_status_ptr_t sp;

		p.cb.recv_am = rndv_done;
		sp = ucp_am_recv_data_nbx(t->worker, op->rndv, op->buf, op->a.len, &p);
		if (ucs_started(sp, op)) {
			op->ureq = sp;
			return;
		}
		op->rndv = NULL;
		op->stage = ST_VALUE_IN;
	}
	if (op->rc < 0 || op->stage == ST_REPLY) {
		op_reply(op);
	} else if (op->stage == ST_VALUE_IN) {
		struct net_args *a = &op->a;
		struct eng_key k = {&a->cont, a->oid, a->dkey, a->dkey_len, a->akey, a->akey_len};

		op_value_in(op, &k);
	} else {
		op_dispatch(op);
	}
}

/* ---- capabilities -------------------------------------------------------------- */

/* The rights an opcode needs (0: a valid capability is enough). */
static unsigned op_rights(uint16_t opcode)
{
	switch (opcode) {
	case NET_OP_SV_FETCH:
	case NET_OP_ARR_FETCH:
	case NET_OP_ARR_SIZE:
	case NET_OP_OBJ_LIST:
	case NET_OP_DKEY_LIST:
	case NET_OP_AKEY_LIST:
	case NET_OP_SNAP_LIST:
		return AUTH_R_READ;
	case NET_OP_LEASE: /* a degraded read's needs read rights (op_authorize) */
	case NET_OP_SV_UPDATE:
	case NET_OP_ARR_UPDATE:
	case NET_OP_OBJ_PUNCH:
	case NET_OP_DKEY_PUNCH:
	case NET_OP_AKEY_PUNCH:
	case NET_OP_ARR_PUNCH:
	case NET_OP_SNAP_CREATE:
	case NET_OP_SNAP_DESTROY:
	case NET_OP_AGGREGATE:
		return AUTH_R_WRITE;
	case NET_OP_CONT_CREATE:
	case NET_OP_CONT_DESTROY:
	case NET_OP_DKEY_DROP: /* removes history as if it had never been */
	case NET_OP_OBJ_FOLD:
		return AUTH_R_ADMIN;
	default:
		return 0;
	}
}

/*
 * Check the capability a request carries before anything of the request
 * runs: signature, expiry and revocation (through the target's cache, so
 * the HMAC runs once per token), then scope (a request naming a container
 * needs a capability for that container) and rights. The client binding is
 * checked against the session where the request is bound to it.
 */
static int op_authorize(struct srv_op *op, const uint8_t *cap, size_t cap_len)
{
	struct srv_tgt *t = op->t;
	struct srv *s = t->s;
	struct auth_cap c;
	struct timespec now;
	unsigned need;
	int rc;

	if (!s->keys)
		return -LODE_ECAPMISSING;
	/* Expiry is in ms: the coarse clock (a few ms) is close enough and
	 * costs a fraction of the precise one on every request. */
	clock_gettime(CLOCK_REALTIME_COARSE, &now);
	rc = auth_cache_verify(&t->caps, s->keys, s->revoked, cap, cap_len,
			       (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000, &c);
	if (rc < 0)
		return rc;
	if ((net_op_fields(op->hdr.opcode) & NET_FLD_CONT) &&
	    memcmp(&c.cont, &op->a.cont, sizeof(c.cont)) != 0)
		return -LODE_ECAPSCOPE;
	need = op_rights(op->hdr.opcode);
	if (op->hdr.opcode == NET_OP_LEASE && (op->hdr.flags & NET_F_LEASE_READ))
		need = AUTH_R_READ;
	if (op->hdr.flags & NET_F_REBUILD)
		need |= AUTH_R_ADMIN; /* writing beneath others' versions rewrites history */
	if (op->hdr.flags & NET_F_LIST_ALL)
		need |= AUTH_R_ADMIN; /* what punches removed */
	if ((c.rights & need) != need)
		return -LODE_ECAPRIGHTS;
	op->client = c.client;
	return 0;
}

/*
 * The pool map: a fenced engine serves no data (it may be DOWN in a map
 * that clients already read degraded around), and a request placed with an
 * older map than the engine's is refused with the engine's version in the
 * reply, so the client refreshes its map and places it again. Sessions,
 * pings and status work regardless, so a client can still reach an engine
 * to learn why. A request with map version 0 is not checked (a client that
 * has no map: tools, the bootstrap).
 */
static int op_map_check(struct srv_op *op)
{
	struct srv *s = op->t->s;
	uint16_t opc = op->hdr.opcode;
	uint32_t v;

	if (opc == NET_OP_HELLO || opc == NET_OP_BYE || opc == NET_OP_PING || opc == NET_OP_STATUS)
		return 0;
	/* A lease given back goes where it was taken, whatever the map says
	 * now: refused, it would end torn with its session. */
	if (opc == NET_OP_LEASE && op->a.max == 0)
		return 0;
	v = atomic_load_explicit(&s->map_ver, memory_order_relaxed);
	if (atomic_load_explicit(&s->fenced, memory_order_relaxed)) {
		op->val = v;
		return -LODE_EFENCED;
	}
	if (op->hdr.map_ver && op->hdr.map_ver < v) {
		op->val = v;
		return -LODE_ESTALEMAP;
	}
	return 0;
}

/* ---- the Active Message handler ------------------------------------------------ */

static bool op_has_value_in(uint16_t opcode)
{
	return opcode == NET_OP_SV_UPDATE || opcode == NET_OP_ARR_UPDATE;
}

static ucs_status_t on_request(void *arg, const void *header, size_t header_len, void *data,
			       size_t len, const ucp_am_recv_param_t *param)
{
	struct srv_tgt *t = arg;
	bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
	struct srv_op *op;
	const uint8_t *h = header;
	int rc;

	t->requests++;
	op = op_get(t);
	if (!op || !(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
		/* Nothing can be answered: no memory, or a sender that gave no way back. */
		t->errors++;
		if (op)
			op_put(op);
		if (rndv)
			ucp_am_data_release(t->worker, data);
		return UCS_OK;
	}
	op->ep = param->reply_ep;
	op->in_cb = true;
	rc = net_hdr_decode(header, header_len, &op->hdr);
	if (rc < 0) {
		/* Answer with whatever request id and opcode can be read. */
		memset(&op->hdr, 0, sizeof(op->hdr));
		if (header_len >= 24) {
			op->hdr.opcode = (uint16_t)(h[6] | h[7] << 8);
			for (unsigned b = 0; b < 8; b++)
				op->hdr.req_id |= (uint64_t)h[16 + b] << (8 * b);
		}
	} else if (op->hdr.flags & NET_F_REPLY) {
		rc = -EPROTO;
	} else if (op->hdr.target != t->idx) {
		rc = -LODE_EBADTGT;
	} else {
		memcpy(op->args, h + NET_HDR_SIZE + op->hdr.cap_len, op->hdr.args_len);
		rc = net_args_decode(op->hdr.opcode, op->args, op->hdr.args_len, &op->a);
		if (rc == 0)
			rc = op_authorize(op, h + NET_HDR_SIZE, op->hdr.cap_len);
		if (rc == 0)
			rc = op_map_check(op);
	}
	if (rc == 0 && atomic_load(&t->s->stop))
		rc = -ESHUTDOWN;
	if (rc == 0 && op->hdr.opcode != NET_OP_HELLO) {
		/* Everything but a hello works within a session: its endpoint is ours
		 * to keep, where UCX's reply endpoint may vanish with the client. */
		uint32_t sn = op->hdr.session;
		struct session *ss = sn && sn <= SESSIONS_MAX ? t->sessions[sn - 1] : NULL;

		if (ss && !ss->ended && ss->client != op->client)
			rc = -LODE_ECAPSCOPE; /* another client's token on this session */
		else if (ss && !ss->ended)
			op_bind(op, ss);
		else if (op->hdr.opcode != NET_OP_PING)
			rc = -ENOTCONN;
	}
	if (rc == 0 && op->a.bulk == NET_BULK_RMA)
		rc = op_rkey(op);
	if (rc == 0 && op->hdr.opcode == NET_OP_HELLO) {
		/*
		 * UCX asserts (aborting loded) on an address of another format
		 * version rather than refusing it: check its version bits against
		 * our own worker's address. Anything else malformed UCX refuses.
		 */
		/* An address starts with a byte of flags and an 8-byte uuid:
		 * UCX reads those from anything shorter, past our copy. */
		if (len < 9 || len > NET_WORKER_ADDR_MAX || rndv ||
		    (((const uint8_t *)data)[0] & 0x0f) != (((const uint8_t *)t->addr)[0] & 0x0f))
			rc = -EPROTO;
		else if (!op_buf(op, len))
			rc = -ENOMEM;
		else
			memcpy(op->buf, data, len);
		if (rc == 0)
			op->cm = cm_find(t, op->ep);
	} else if (rc == 0 && op_has_value_in(op->hdr.opcode) && op->a.bulk == NET_BULK_NONE) {
		if (len != op->a.len)
			rc = -EPROTO;
		else if (len > LODE_IO_MAX)
			rc = -E2BIG;
		else if (!op_value_buf(op, len))
			rc = -ENOMEM;
		else if (rndv) {
			op->rndv = data;
			op->stage = ST_RECV;
			op->in_cb = false;
			op_queue(op);
			return UCS_INPROGRESS;
		} else if (len) {
			memcpy(op->buf, data, len);
		}
	} else if (rc == 0 && len) {
		rc = -EPROTO; /* data where the opcode takes none */
	}
	if (rndv)
		ucp_am_data_release(t->worker, data);
	op->rc = rc;
	if (rc < 0 || (op->hdr.opcode == NET_OP_PING && !op->sess)) {
		/* Answered now, while UCX's reply endpoint is sure to exist. */
		op_reply(op);
		return UCS_OK;
	}
	op->in_cb = false;
	op_queue(op);
	return UCS_OK;
}

/* ---- the thread --------------------------------------------------------------- */

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/*
 * Background aggregation. Every update writes a new version into new space;
 * old versions go only when aggregated. Without this a target fills up
 * under overwrites however little live data it holds. Once the extent file
 * is half full, and again after each further tenth of growth, the target
 * aggregates every container (blocking its thread for that time).
 */
#define AGG_CHECK_US 20000
#define AGG_START_PCT 50
#define AGG_STEP_PCT 10
/*
 * Reads that walk many versions of one array (files written in small
 * pieces) cost the target more than the bytes: after AGG_WALKS such reads
 * the target aggregates too, at most once per AGG_WALK_GAP_US and at most
 * a tenth of its time (the gap grows to ten times the last aggregation's,
 * and doubles, up to 64 times, after each that removed nothing).
 */
#define AGG_WALKS 64
#define AGG_WALK_GAP_US 1000000
#define AGG_WALK_SHARE 10

static void aggregate_all(struct srv_tgt *t)
{
	struct lode_uuid conts[256];
	struct eng_stats st;
	int n = eng_cont_list(t->eng, conts, 256);

	for (int i = 0; i < n && i < 256; i++)
		eng_aggregate(t->eng, &conts[i], LODE_EPOCH_MAX);
	if (eng_tgt_stats(t->eng, &st) == 0)
		t->agg_used = st.extent_used;
	t->aggregations++;
}

/* Publish the target's numbers for srv_tgt_info; the load over >= 1 s. */
static void publish(struct srv_tgt *t, const struct eng_stats *st, uint64_t now)
{
	atomic_store_explicit(&t->pub.used, st->extent_used, memory_order_relaxed);
	atomic_store_explicit(&t->pub.cap, st->extent_cap, memory_order_relaxed);
	atomic_store_explicit(&t->pub.requests, t->requests, memory_order_relaxed);
	atomic_store_explicit(&t->pub.errors, t->errors, memory_order_relaxed);
	atomic_store_explicit(&t->pub.at_us, now, memory_order_relaxed);
	if (now - t->pub.since_us >= 1000000) {
		struct timespec cpu;
		uint64_t ns;

		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
		ns = (uint64_t)cpu.tv_sec * 1000000000ull + (uint64_t)cpu.tv_nsec;
		if (t->pub.since_us)
			atomic_store_explicit(&t->pub.load_pm,
					      (uint32_t)((ns - t->pub.cpu_ns) / (now - t->pub.since_us)),
					      memory_order_relaxed);
		t->pub.cpu_ns = ns;
		t->pub.since_us = now;
	}
}

void srv_tgt_info(struct srv *s, unsigned i, struct srv_tgt_info *out)
{
	struct srv_tgt *t = i < s->ntargets ? s->tgts[i] : NULL;
	uint64_t at;

	memset(out, 0, sizeof(*out));
	if (!t)
		return;
	at = atomic_load_explicit(&t->pub.at_us, memory_order_relaxed);
	out->used = atomic_load_explicit(&t->pub.used, memory_order_relaxed);
	out->capacity = atomic_load_explicit(&t->pub.cap, memory_order_relaxed);
	out->requests = atomic_load_explicit(&t->pub.requests, memory_order_relaxed);
	out->errors = atomic_load_explicit(&t->pub.errors, memory_order_relaxed);
	/* A target that has slept for two seconds is idle, whatever it last said. */
	out->load = at && now_us() - at < 2000000
			    ? atomic_load_explicit(&t->pub.load_pm, memory_order_relaxed) / 1000.0
			    : 0.0;
	out->ram = s->cfg->ram;
}

static void maybe_aggregate(struct srv_tgt *t, uint64_t now)
{
	struct eng_stats st;

	if (now < t->agg_check_us)
		return;
	t->agg_check_us = now + AGG_CHECK_US;
	if (eng_tgt_stats(t->eng, &st) < 0)
		return;
	publish(t, &st, now);
	if (st.long_walks - t->agg_walks >= AGG_WALKS && now >= t->agg_walk_us) {
		uint64_t took, before = st.records, gap;

		aggregate_all(t);
		took = now_us() - now;
		gap = took * AGG_WALK_SHARE > AGG_WALK_GAP_US ? took * AGG_WALK_SHARE : AGG_WALK_GAP_US;
		if (eng_tgt_stats(t->eng, &st) == 0) {
			t->agg_walks = st.long_walks;
			/* Nothing merged (a snapshot holds the versions): wait longer. */
			t->agg_walk_idle = st.records < before ? 0 : t->agg_walk_idle + 1;
		}
		t->agg_walk_us = now_us() + (gap << (t->agg_walk_idle < 6 ? t->agg_walk_idle : 6));
		return;
	}
	if (st.extent_cap == 0)
		return;
	if (st.extent_used * 100 < st.extent_cap * AGG_START_PCT ||
	    st.extent_used < t->agg_used + st.extent_cap * AGG_STEP_PCT / 100)
		return;
	aggregate_all(t);
}

/*
 * Out of space: writes can outrun the periodic check. Aggregate now, at
 * most once per AGG_CHECK_US, and let the caller try again.
 */
static bool aggregate_for_space(struct srv_tgt *t)
{
	uint64_t now = now_us();

	if (now < t->agg_forced_us)
		return false;
	t->agg_forced_us = now + AGG_CHECK_US;
	aggregate_all(t);
	return true;
}

static unsigned run_ready(struct srv_tgt *t)
{
	unsigned n = 0;

	/* Ops queued while these run wait for the next round. */
	struct srv_op *op = t->ready;

	t->ready = t->ready_tail = NULL;
	while (op) {
		struct srv_op *next = op->next;

		op_run(op);
		op = next;
		n++;
	}
	return n;
}

/*
 * Stopping: whether the target may exit. Requests in flight get DRAIN_US
 * to finish; requests still waiting on a client after that (one that
 * stopped mid-transfer) are cancelled by closing every session, and after
 * a further second anything left is abandoned. The engine's own work is
 * always waited for: it is what makes acknowledged updates durable.
 */
#define DRAIN_US 5000000

static bool drained(struct srv_tgt *t)
{
	uint64_t now = now_us();

	if (!t->drain_deadline)
		t->drain_deadline = now + DRAIN_US;
	if (t->inflight == 0 || (t->drain_forced && now > t->drain_deadline))
		return eng_inflight(t->eng) == 0;
	if (now > t->drain_deadline && !t->drain_forced) {
		srv_log("target %u: %u requests still wait on clients; cancelling them", t->idx,
			t->inflight);
		for (uint32_t i = 0; i < SESSIONS_MAX; i++)
			session_close(t, i + 1);
		t->drain_forced = true;
		t->drain_deadline = now + 1000000;
	}
	return false;
}

/*
 * An idle target busy-polls for poll_us before it sleeps, so that the next
 * request of a burst is seen at once rather than after a ~50 us wake-up.
 * But spinners take cores from threads that have work. So an idle target
 * yields the core on every turn, and only spin_max idle targets spin at once
 * (the others sleep at once). Measured with 2 targets and one client thread
 * on 2 cores, 4 KiB reads at depth 1: 2.1K IOPS with both targets spinning
 * (milliseconds at the tail), 8K with the cap, 123K with the cap and yield.
 *
 * A target left without a spinner's place still spins SPIN_SHORT_US (at
 * most poll_us) before it sleeps: in a steady stream of small requests its
 * next one comes within microseconds, and a sleeping target costs the
 * client a signal (a datagram over shm) and the request a wake-up. 16
 * threads of 4 KiB random reads, 2 RAM targets over shm on 2 cores: fio
 * through the preload library 121-153K IOPS -> 209-225K, `lode bench
 * --api fs` 155-235K -> 192-336K; 1 MiB reads of one thread and the FUSE
 * mount unchanged within their noise (docs/performance.md).
 */
#define SPIN_SHORT_US 50u

static bool spin_take(struct srv *s)
{
	int n = atomic_load_explicit(&s->spinners, memory_order_relaxed);

	while (n < s->spin_max)
		if (atomic_compare_exchange_weak(&s->spinners, &n, n + 1))
			return true;
	return false;
}

static void *tgt_main(void *arg)
{
	struct srv_tgt *t = arg;
	unsigned poll_us = t->s->cfg->poll_us;
	uint64_t last_busy = now_us();
	bool spinning = false;
	char name[16];

	snprintf(name, sizeof(name), "lode-tgt%u", t->idx);
	pthread_setname_np(pthread_self(), name);
	{
		struct eng_stats st;

		if (eng_tgt_stats(t->eng, &st) == 0)
			publish(t, &st, last_busy);
	}
	for (;;) {
		unsigned n = ucp_worker_progress(t->worker);
		int e;

		n += run_ready(t);
		e = eng_progress(t->eng);
		if (e > 0) {
			n += (unsigned)e;
		} else if (e < 0 && !t->failed_logged) {
			srv_log("target %u failed: %s", t->idx, lode_strerror(e));
			t->failed_logged = true;
		}
		if (n) {
			last_busy = now_us();
			maybe_aggregate(t, last_busy);
			continue;
		}
		if (atomic_load(&t->s->stop) && drained(t))
			break;
		if (t->inflight || eng_inflight(t->eng))
			continue;
		if (now_us() - last_busy < poll_us && (spinning || (spinning = spin_take(t->s)))) {
			/* A woken thread with work gets the core at once. */
			sched_yield();
			continue;
		}
		if (!spinning && now_us() - last_busy < (poll_us < SPIN_SHORT_US ? poll_us : SPIN_SHORT_US)) {
			sched_yield();
			continue;
		}
		if (spinning) {
			atomic_fetch_sub(&t->s->spinners, 1);
			spinning = false;
		}
		/* Idle: sleep on the worker's event fd until a message comes. */
		if (ucp_worker_arm(t->worker) == UCS_OK) {
			struct epoll_event ev;

			epoll_wait(t->epfd, &ev, 1, 100);
		}
	}
	if (spinning)
		atomic_fetch_sub(&t->s->spinners, 1);
	return NULL;
}

/* ---- start and stop ------------------------------------------------------------- */

static void tgt_free(struct srv_tgt *t)
{
	struct srv_op *op;

	if (t->listener)
		ucp_listener_destroy(t->listener);
	for (uint32_t i = 0; t->worker && i < SESSIONS_MAX; i++)
		session_close(t, i + 1);
	while (t->conns)
		cm_close(t->conns);
	/* Ops a drain gave up on: cancel their receives, then release them. */
	for (op = t->busy; op; op = op->bnext)
		if (op->ureq)
			ucp_request_cancel(t->worker, op->ureq);
	for (int i = 0; t->worker && i < 16; i++)
		ucp_worker_progress(t->worker);
	t->ready = t->ready_tail = NULL;
	while (t->busy)
		op_put(t->busy);
	if (t->addr)
		ucp_worker_release_address(t->worker, t->addr);
	if (t->arena_memh)
		ucp_mem_unmap(t->s->ctx, t->arena_memh);
	while ((op = t->free_ops)) {
		t->free_ops = op->next;
		free(op);
	}
	if (t->worker)
		ucp_worker_destroy(t->worker);
	if (t->epfd >= 0)
		close(t->epfd);
	if (t->eng) {
		int rc = eng_tgt_close(t->eng);

		if (rc < 0)
			srv_log("target %u: close: %s", t->idx, lode_strerror(rc));
	}
	lease_tab_fini(&t->leases);
	free(t);
}

/* mkdir -p: the storage directory may be several levels deep and new. */
static int mkdir_p(const char *path)
{
	char tmp[4200];
	size_t n = strlen(path);

	if (n >= sizeof(tmp))
		return -ENAMETOOLONG;
	memcpy(tmp, path, n + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static int tgt_open(struct srv *s, unsigned i, struct srv_tgt **out)
{
	const struct srv_config *c = s->cfg;
	struct eng_tgt_opts eo = {0};
	struct srv_tgt *t = calloc(1, sizeof(*t));
	struct epoll_event ev = {.events = EPOLLIN};
	char path[4200];
	int efd, rc;

	if (!t)
		return -ENOMEM;
	t->s = s;
	t->idx = i;
	auth_cache_init(&t->caps);
	t->epfd = -1;
	if ((rc = lease_tab_init(&t->leases, LEASES_MAX)) < 0)
		goto fail;
	snprintf(path, sizeof(path), "%s/tgt%u", c->path, i);
	if ((rc = mkdir_p(c->path)) < 0) {
		srv_log("storage path %s: %s", c->path, lode_strerror(rc));
		goto fail;
	}
	eo.path = path;
	eo.mode = c->ram ? ENG_MODE_RAM : ENG_MODE_DISK;
	eo.capacity = c->capacity;
	if ((rc = eng_tgt_open(&eo, &t->eng)) < 0) {
		srv_log("target %u: open %s: %s", i, path, lode_strerror(rc));
		goto fail;
	}
	rc = eng_cont_create(t->eng, &root_cont);
	if (rc < 0 && rc != -EEXIST)
		goto fail;
	if ((rc = net_worker_create(s->ctx, &t->worker)) < 0)
		goto fail;
	rc = net_ucs_errno(ucp_worker_get_address(t->worker, &t->addr, &t->addr_len));
	if (rc < 0)
		goto fail;
	if ((rc = net_am_handler_set(t->worker, NET_AM_REQUEST, on_request, t)) < 0)
		goto fail;
	/* The engine's I/O buffers are registered with UCX once, here. */
	eng_buf_region(t->eng, &t->arena, &t->arena_len);
	if (t->arena) {
		ucp_mem_map_params_t mp = {0};

		mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
		mp.address = t->arena;
		mp.length = t->arena_len;
		if (ucp_mem_map(s->ctx, &mp, &t->arena_memh) != UCS_OK)
			t->arena_memh = NULL;
	}
	cm_listen(t);
	if ((rc = net_ucs_errno(ucp_worker_get_efd(t->worker, &efd))) < 0)
		goto fail;
	if ((t->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
	    epoll_ctl(t->epfd, EPOLL_CTL_ADD, efd, &ev) < 0) {
		rc = -errno;
		goto fail;
	}
	*out = t;
	return 0;
fail:
	tgt_free(t);
	return rc;
}

int srv_start(struct srv *s)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int rc;

	s->spin_max = ncpu > 1 ? (int)(ncpu / 2) : 1;
	atomic_init(&s->spinners, 0);
	s->ntargets = 0;
	for (unsigned i = 0; i < s->cfg->targets; i++) {
		if ((rc = tgt_open(s, i, &s->tgts[i])) < 0)
			goto fail;
		s->ntargets++;
	}
	for (unsigned i = 0; i < s->ntargets; i++) {
		if ((rc = -pthread_create(&s->tgts[i]->thread, NULL, tgt_main, s->tgts[i])) < 0)
			goto fail;
		s->tgts[i]->started = true;
	}
	return 0;
fail:
	srv_stop(s);
	return rc;
}

void srv_tgt_address(struct srv *s, unsigned i, const void **addr, size_t *len, uint16_t *port)
{
	*addr = s->tgts[i]->addr;
	*len = s->tgts[i]->addr_len;
	*port = s->tgts[i]->port;
}

void srv_stop(struct srv *s)
{
	atomic_store(&s->stop, true);
	for (unsigned i = 0; i < s->ntargets; i++)
		if (s->tgts[i]->started)
			pthread_join(s->tgts[i]->thread, NULL);
	for (unsigned i = 0; i < s->ntargets; i++) {
		tgt_free(s->tgts[i]);
		s->tgts[i] = NULL;
	}
	s->ntargets = 0;
}
