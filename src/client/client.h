/*
 * liblode's internals shared by client.c (connections, requests, events) and
 * objects.c (containers, objects, key-value and byte-array calls).
 */
#ifndef LODE_CLIENT_CLIENT_H
#define LODE_CLIENT_CLIENT_H

#include <pthread.h>
#include <sys/types.h>
#include <stdbool.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

#include "lode/lode.h"
#include "net/net.h"

struct creq;
typedef void (*creq_fn)(struct creq *r);

/*
 * One request on the wire (or, with op 0, a parent that completes when all
 * its children have). It completes when its reply arrived (or it failed) and
 * no UCX operation of it is outstanding.
 */
struct creq {
	struct lode_conn *c;
	uint64_t id;
	uint16_t op;
	unsigned tgt;
	struct net_args a;
	const void *out;          /* AM data to send: an inline value */
	size_t out_len;
	void *in;                 /* where reply data lands (at most in_cap bytes) */
	size_t in_cap;
	size_t in_len;            /* bytes of reply data received */
	uint64_t val;             /* the reply's val */
	struct net_anchor anchor; /* the reply's anchor; key copied to anchor_key */
	ucp_mem_h memh;           /* registration made for this request alone */
	void *rkey_buf;           /* packed rkey of memh */
	void *rndv;               /* reply data descriptor waiting to be received */
	int pending;              /* UCX operations outstanding */
	int orphans;              /* sends UCX still holds after the connection failed */
	bool replied;
	bool done;
	int rc;
	int64_t deadline_us;
	struct creq *prev, *next; /* the connection's in-flight list */
	struct creq *rndv_next;
	lode_event_t *ev;         /* completion: an event, */
	struct creq *parent;      /* or a parent, */
	bool waited;              /* or a blocked caller */
	int nchild;               /* a parent's children not yet done */
	creq_fn on_done;          /* runs at completion, before the result is passed on */
	void *ctx;                /* on_done's */
	/* Not cleared between uses (creq_new clears what comes before): */
	uint8_t anchor_key[2 + LODE_KEY_MAX];
	uint8_t hdr[NET_HDR_SIZE + NET_ARGS_MAX];
};

struct cbuf; /* a registered buffer (lode_buf_alloc) */

struct lode_conn {
	pthread_mutex_t lock;
	ucp_context_h ctx;
	/* One worker per target: a worker reaching two workers of one loded
	 * over tcp can leave a wire-up message stuck (UCX 1.13), and loded then
	 * aborts when the client goes away. See docs/decisions/0004. */
	struct conn_worker {
		lode_conn_t *c;
		unsigned idx;
		ucp_worker_h worker;
		int efd;
	} w[NET_TARGETS_MAX];
	int epfd;               /* every worker's event fd */
	unsigned ntargets;
	ucp_ep_h eps[NET_TARGETS_MAX];
	uint32_t session[NET_TARGETS_MAX]; /* each target's name for us (RMA needs one) */
	uint32_t transport;   /* NET_TP_* in use */
	bool rma;             /* large values move by RMA (else by AM rendezvous) */
	uint32_t inline_max;
	unsigned timeout_ms;
	char server[256];
	int failed;           /* 0, or the error every new request gets */
	pid_t server_pid;     /* loded's pid when we can watch it (shm), else 0 */
	int64_t alive_check_us;
	struct creq **slots;  /* request id -> request */
	uint32_t nslots;
	uint32_t *free_slots;
	uint32_t nfree;
	uint32_t gen;
	struct creq *head, *tail;   /* in flight, oldest first */
	struct creq *rndv_head;     /* replies whose data waits to be received */
	struct creq *free_reqs;
	struct creq *orphans;       /* released while UCX holds a send: freed after the workers */
	struct cbuf *bufs;
	unsigned nbufs, bufs_cap;
	uint64_t next_reg;
};

/* A new request for target tgt (parent requests: op 0). NULL: -ENOMEM. */
struct creq *creq_new(lode_conn_t *c, uint16_t op, unsigned tgt);

/*
 * Make buf[0..len) the request's RMA region: registered memory is used as it
 * is, other memory is registered for this request alone.
 */
int creq_rma(struct creq *r, void *buf, size_t len);

/*
 * Send r. Exactly one of ev, parent may be set; with neither, block until r
 * completes, free it and return its result. With ev or parent, returns 0 or
 * a negative code (then nothing was sent and r is freed).
 */
int creq_submit(struct creq *r, lode_event_t *ev, struct creq *parent);

/* A parent's children are all submitted: it completes when they have. */
int creq_seal(struct creq *parent, lode_event_t *ev);

/* Free a request that was never submitted. */
void creq_free(struct creq *r);

/* Whether buf lies in memory from lode_buf_alloc (then RMA needs no registration). */
bool conn_buf_registered(lode_conn_t *c, const void *buf, size_t len);

/* The target that owns (oid, dkey). */
unsigned conn_target_of(const lode_conn_t *c, struct lode_oid oid, const void *dkey, size_t len);

#endif
