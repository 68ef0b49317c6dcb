/*
 * liblode's connections, requests and events.
 *
 * A connection reaches every engine of the pool map: one UCX worker and
 * endpoint per target of each, numbered engine after engine (the global
 * target index; the wire names the engine's own index). It learns the
 * targets' worker addresses from each loded's bootstrap socket, then every
 * request is one Active Message to the target that owns it and one Active
 * Message back. A request is found again by its id (a slot index
 * and a generation, so a late reply to a request that timed out is dropped).
 *
 * Waiting: callers busy-poll the worker, which is what small I/O needs (a
 * wake-up on the other core costs more than the I/O), and fall back to
 * sleeping on the worker's event fd after a millisecond without progress.
 *
 * Failure: an endpoint error (an engine died) or a request older than the
 * timeout loses that engine: its requests in flight complete with
 * -EHOSTDOWN (a read moves on to another replica, place.c), its endpoints
 * are closed, and later requests placed on it fail at once, until the
 * renewer connects it again once it is back. The last engine too: the
 * connection outlives a restart of its only loded. Nothing waits forever.
 */
#include "client/client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"

#define TIMEOUT_DEFAULT_MS 10000
#define SPIN_US 1000

/*
 * A waiting thread busy-polls its worker for up to SPIN_US before sleeping
 * on the worker's event fd: waking a sleeper costs ~50 us here (more over
 * shm, where the server must signal the armed worker), a spinner sees its
 * reply at once. Spinners yield the core on every idle turn (spin_yield), so
 * a woken thread with work, the server's or ours, runs at once. With that,
 * letting every waiter spin is what measured best on 2 cores: 16 threads
 * reading 4 KiB through liblodefs made 205K IOPS all spinning and 73K with
 * one spinner and the rest sleeping. $LODE_SPIN_THREADS caps the threads of
 * a process that spin at once (0: never spin), for hosts where cores are
 * better left to other work.
 */
static atomic_int g_spinners;
static int g_spin_max = -1;

static int spin_max(void)
{
	int m = __atomic_load_n(&g_spin_max, __ATOMIC_RELAXED);

	if (m < 0) {
		const char *e = getenv("LODE_SPIN_THREADS");

		m = INT32_MAX;
		if (e && *e) {
			char *end;
			long v = strtol(e, &end, 10);

			if (!*end && v >= 0 && v <= 1024)
				m = (int)v;
		}
		__atomic_store_n(&g_spin_max, m, __ATOMIC_RELAXED);
	}
	return m;
}

/* Take a spinning slot; false when spin_max threads already spin. */
static bool spin_take(void)
{
	int n = atomic_load_explicit(&g_spinners, memory_order_relaxed);

	while (n < spin_max())
		if (atomic_compare_exchange_weak(&g_spinners, &n, n + 1))
			return true;
	return false;
}

static void spin_give(bool *spinning)
{
	if (*spinning) {
		atomic_fetch_sub(&g_spinners, 1);
		*spinning = false;
	}
}

struct cbuf {
	uint8_t *base;
	size_t len;
	uint64_t reg;      /* never reused: targets cache the unpacked rkey by it */
	ucp_mem_h memh;
	void *rkey_buf;
	size_t rkey_len;
};

/*
 * An event's private state. The busy states are unlikely bit patterns, so
 * that an event never zeroed is still (almost surely) taken as idle.
 */
enum {
	EV_IDLE = 0,
	EV_INFLIGHT = 0x4c4f4401, /* attached to a call not yet completed */
	EV_DONE = 0x4c4f4402,     /* completed, waiting in its queue to be reported */
};

struct lode_eq {
	pthread_mutex_t lock;
	lode_event_t *head, *tail; /* completed, not yet reported */
	unsigned inflight;          /* attached and not yet reported */
	lode_conn_t **conns;        /* connections that carried this queue's requests */
	unsigned nconns, conns_cap;
};

static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- registered buffers ---------------------------------------------------- */

static struct cbuf *buf_find(lode_conn_t *c, const void *p, size_t len)
{
	const uint8_t *b = p;

	for (unsigned i = 0; i < c->nbufs; i++) {
		struct cbuf *cb = &c->bufs[i];

		if (b >= cb->base && b + len <= cb->base + cb->len && b + len >= b)
			return cb;
	}
	return NULL;
}

bool conn_buf_registered(lode_conn_t *c, const void *buf, size_t len)
{
	return buf_find(c, buf, len) != NULL;
}

void *lode_buf_alloc(lode_conn_t *c, size_t size)
{
	ucp_mem_map_params_t mp = {0};
	ucp_mem_attr_t attr = {0};
	struct cbuf cb = {0};

	if (!c || size == 0)
		return NULL;
	mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
			UCP_MEM_MAP_PARAM_FIELD_FLAGS;
	mp.address = NULL;
	mp.length = size;
	mp.flags = UCP_MEM_MAP_ALLOCATE;
	pthread_mutex_lock(&c->lock);
	if (c->nbufs == c->bufs_cap) {
		unsigned cap = c->bufs_cap ? 2 * c->bufs_cap : 16;
		struct cbuf *nb = realloc(c->bufs, cap * sizeof(*nb));

		if (!nb)
			goto fail;
		c->bufs = nb;
		c->bufs_cap = cap;
	}
	if (ucp_mem_map(c->ctx, &mp, &cb.memh) != UCS_OK)
		goto fail;
	attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
	if (ucp_mem_query(cb.memh, &attr) != UCS_OK ||
	    ucp_rkey_pack(c->ctx, cb.memh, &cb.rkey_buf, &cb.rkey_len) != UCS_OK) {
		ucp_mem_unmap(c->ctx, cb.memh);
		goto fail;
	}
	cb.base = attr.address;
	cb.len = attr.length;
	cb.reg = ++c->next_reg;
	c->bufs[c->nbufs++] = cb;
	pthread_mutex_unlock(&c->lock);
	return cb.base;
fail:
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

void lode_buf_free(lode_conn_t *c, void *buf)
{
	if (!c || !buf)
		return;
	pthread_mutex_lock(&c->lock);
	for (unsigned i = 0; i < c->nbufs; i++) {
		if (c->bufs[i].base == buf) {
			ucp_rkey_buffer_release(c->bufs[i].rkey_buf);
			ucp_mem_unmap(c->ctx, c->bufs[i].memh);
			c->bufs[i] = c->bufs[--c->nbufs];
			break;
		}
	}
	pthread_mutex_unlock(&c->lock);
}

/* ---- requests ------------------------------------------------------------------ */

static int slot_take(lode_conn_t *c, struct creq *r)
{
	uint32_t s;

	if (c->nfree == 0) {
		uint32_t n = c->nslots ? 2 * c->nslots : 64;
		struct creq **ns = realloc(c->slots, n * sizeof(*ns));
		uint32_t *nf;

		if (!ns)
			return -ENOMEM;
		c->slots = ns;
		nf = realloc(c->free_slots, n * sizeof(*nf));
		if (!nf)
			return -ENOMEM;
		c->free_slots = nf;
		for (uint32_t i = n; i > c->nslots; i--) {
			c->slots[i - 1] = NULL;
			c->free_slots[c->nfree++] = i - 1;
		}
		c->nslots = n;
	}
	s = c->free_slots[--c->nfree];
	c->slots[s] = r;
	r->id = (uint64_t)++c->gen << 32 | s;
	return 0;
}

static void slot_give(lode_conn_t *c, struct creq *r)
{
	uint32_t s = (uint32_t)r->id;

	if (r->id && s < c->nslots && c->slots[s] == r) {
		c->slots[s] = NULL;
		c->free_slots[c->nfree++] = s;
	}
	r->id = 0;
}

struct creq *creq_new(lode_conn_t *c, uint16_t op, unsigned tgt)
{
	struct creq *r;

	pthread_mutex_lock(&c->lock);
	r = c->free_reqs;
	if (r)
		c->free_reqs = r->next;
	pthread_mutex_unlock(&c->lock);
	if (!r && !(r = malloc(sizeof(*r))))
		return NULL;
	memset(r, 0, offsetof(struct creq, anchor_key));
	r->c = c;
	r->op = op;
	r->tgt = tgt;
	return r;
}

/* Called with the lock held. */
static void req_release(struct creq *r)
{
	lode_conn_t *c = r->c;

	if (r->rkey_buf && r->memh)
		ucp_rkey_buffer_release(r->rkey_buf);
	if (r->memh)
		ucp_mem_unmap(c->ctx, r->memh);
	r->memh = NULL;
	r->rkey_buf = NULL;
	slot_give(c, r);
	if (r->orphans) {
		/* UCX may still call sent_cb with r: never reuse it. */
		r->next = c->orphans;
		c->orphans = r;
		return;
	}
	r->next = c->free_reqs;
	c->free_reqs = r;
}

void creq_free(struct creq *r)
{
	lode_conn_t *c = r->c;

	pthread_mutex_lock(&c->lock);
	req_release(r);
	pthread_mutex_unlock(&c->lock);
}

int creq_rma(struct creq *r, void *buf, size_t len)
{
	lode_conn_t *c = r->c;
	struct cbuf *cb;
	size_t rlen;

	pthread_mutex_lock(&c->lock);
	cb = buf_find(c, buf, len);
	if (cb) {
		r->a.rkey = cb->rkey_buf;
		r->a.rkey_len = (uint16_t)cb->rkey_len;
		r->a.rma_reg = cb->reg;
	} else {
		ucp_mem_map_params_t mp = {0};

		mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
		mp.address = buf;
		mp.length = len;
		if (ucp_mem_map(c->ctx, &mp, &r->memh) != UCS_OK) {
			pthread_mutex_unlock(&c->lock);
			return -ENOMEM;
		}
		if (ucp_rkey_pack(c->ctx, r->memh, &r->rkey_buf, &rlen) != UCS_OK ||
		    rlen > NET_RKEY_MAX) {
			if (r->rkey_buf)
				ucp_rkey_buffer_release(r->rkey_buf);
			r->rkey_buf = NULL;
			ucp_mem_unmap(c->ctx, r->memh);
			r->memh = NULL;
			pthread_mutex_unlock(&c->lock);
			return -ENOMEM;
		}
		r->a.rkey = r->rkey_buf;
		r->a.rkey_len = (uint16_t)rlen;
	}
	pthread_mutex_unlock(&c->lock);
	r->a.bulk = NET_BULK_RMA;
	r->a.rma_addr = (uint64_t)(uintptr_t)buf;
	return 0;
}

static void eq_complete(lode_event_t *ev);

/* Take r off the in-flight list, if it is on it. Lock held. */
static void req_unlink(struct creq *r)
{
	lode_conn_t *c = r->c;

	if (!r->prev && c->head != r)
		return;
	if (r->prev)
		r->prev->next = r->next;
	else
		c->head = r->next;
	if (r->next)
		r->next->prev = r->prev;
	else
		c->tail = r->prev;
	r->prev = r->next = NULL;
}

static void req_maybe_finish(struct creq *r);

/* Whether r is a write to a whole group: it leads the shadows of the others. */
static bool group_write(const struct creq *r)
{
	return r->placed && r->write && !r->leader && !r->pinned;
}

/* Count a member's result into its write's leader l. */
static void member_count(struct creq *l, int rc)
{
	if (rc == 0)
		l->members_ok++;
	else if (rc == -EHOSTDOWN || rc == -LODE_EFENCED) {
		if (!l->lost_rc || rc == -LODE_EFENCED)
			l->lost_rc = rc;
		/* An engine put back UP refuses until its heartbeat brings it
		 * the map that says so: no newer map may be coming to wait for. */
		if (rc == -LODE_EFENCED)
			l->fence_behind = true;
	} else if (!l->shadow_rc) {
		l->shadow_rc = rc;
	}
}

/* r's result is final: pass it on. Called with the lock held. */
static void req_finish(struct creq *r)
{
	struct creq *p = r->parent;

	if (r->leader) {
		/* A shadow: count its member in, then see to the leader. */
		struct creq *l = r->leader;

		req_unlink(r);
		r->done = true;
		member_count(l, r->rc);
		req_release(r);
		l->nshadow--;
		req_maybe_finish(l);
		return;
	}
	if (r->on_done)
		r->on_done(r);
	req_unlink(r);
	r->done = true;
	if (p) {
		if (r->rc < 0 && p->rc == 0)
			p->rc = r->rc;
		req_release(r);
		if (--p->nchild == 0 && p->replied)
			req_finish(p);
	} else if (r->ev) {
		lode_event_t *ev = r->ev;

		ev->rc = r->rc;
		req_release(r);
		eq_complete(ev);
	} else if (r->detached) {
		req_release(r);
	}
	/* A waited request is freed by its waiter. */
}

static int req_send(struct creq *r);
static int64_t now_us(void);

/*
 * An engine refused r as placed with an older pool map than its own: r
 * waits on c->parked for the renewer thread to fetch the map (PoolMapGet)
 * and is placed again with it and sent (conn_map_install), since with the
 * new map its data may live elsewhere. A few times at most: an engine whose
 * version keeps running ahead is answered with the error. r->val keeps the
 * version the engine named.
 */
#define RESEND_MAX 4
/* Turns of the renewer (250 ms) a write waits for a fenced engine whose
 * map is behind ours to catch up; then it waits for a newer map. */
#define FENCE_WAITS_MAX 20

static bool req_park(struct creq *r)
{
	lode_conn_t *c = r->c;
	bool fence_wait = false;

	if (r->resent >= RESEND_MAX || c->failed || r->op == 0 || r->final)
		return false;
	if (r->rc != -LODE_ESTALEMAP) {
		/*
		 * A replicated write that some member the map has UP did not
		 * take (unreachable from here, lost, fenced) is not acknowledged
		 * with a copy missing: it waits for a newer map, which marks that
		 * engine DOWN (then the write is degraded, legitimately) or shows
		 * the reason gone, and is placed whole again. The timeout bounds
		 * the wait.
		 */
		if (!group_write(r) || r->shadow_rc || !(r->lost_up || r->lost_rc))
			return false;
		fence_wait = r->fence_behind && !r->lost_up && r->fence_waits < FENCE_WAITS_MAX;
		r->val = atomic_load(&c->map_ver) + (fence_wait ? 0 : 1);
	}
	if (fence_wait)
		r->fence_waits++; /* placed again at the renewer's next turn, with our map */
	else
		r->resent++;
	req_unlink(r);
	r->parked = true;
	r->deadline_us = now_us() + (int64_t)c->timeout_ms * 1000;
	r->next = c->parked;
	c->parked = r;
	conn_map_want(c, (uint32_t)r->val, !fence_wait);
	return true;
}

/* Make r ready to go again: off the list, no reply yet. Lock held. */
static void req_reset(struct creq *r)
{
	req_unlink(r); /* req_send puts it back at the tail */
	r->replied = false;
	r->rc = 0;
	r->val = 0;
	r->in_len = 0;
}

/*
 * A read whose member's engine is lost, fenced or too slow moves on to the
 * next member of its group, transparently. Not while UCX still holds an
 * operation of its first send (orphans): their callbacks could not be told
 * from the new ones'.
 */
static bool req_retry(struct creq *r)
{
	lode_conn_t *c = r->c;
	int rc = r->rc;

	if (!r->placed || r->write || r->pinned || r->final || r->orphans || c->failed ||
	    (rc != -EHOSTDOWN && rc != -LODE_EFENCED && rc != -ETIMEDOUT))
		return false;
	req_reset(r);
	r->member++;
	if ((r->rc = conn_place(c, r, NULL)) < 0 || (r->rc = req_send(r)) < 0) {
		if (r->rc == -EHOSTDOWN || r->rc == -EINVAL)
			r->rc = rc; /* no member left: the first member's verdict */
		r->replied = true;
		return false;
	}
	return true;
}

/*
 * A replicated write's result: an error of any member is the write's,
 * except a lost one (unreachable, or fenced: not serving), which makes a
 * degraded write as long as one member acknowledged it and the map by
 * then says the lost member is DOWN (req_park waited for that). With none,
 * the write fails with a fenced member's error, else -EHOSTDOWN.
 */
static void req_write_result(struct creq *r)
{
	if (r->rc == -LODE_ESTALEMAP)
		member_count(r, r->rc); /* the others were counted before parking was tried */
	if (r->shadow_rc)
		r->rc = r->shadow_rc;
	else
		r->rc = r->members_ok ? 0 : r->lost_rc;
}

static void req_maybe_finish(struct creq *r)
{
	if (!r->replied || r->pending || r->done || r->parked || r->nshadow)
		return;
	if (r->rc == -LODE_EFENCED)
		conn_map_wake(r->c, atomic_load(&r->c->map_ver) + 1); /* its state may have changed */
	if (group_write(r) && r->rc != -LODE_ESTALEMAP)
		member_count(r, r->rc); /* the leader's own answer, before parking looks */
	if (req_park(r) || req_retry(r))
		return;
	if (group_write(r))
		req_write_result(r);
	else if (r->pinned && r->write && r->rc == 0 && (r->shadow_rc || r->lost_rc))
		r->rc = r->shadow_rc ? r->shadow_rc : r->lost_rc; /* its new place missed it */
	req_finish(r);
}

void conn_req_fail(struct creq *r, int rc)
{
	r->parked = false;
	r->replied = true;
	r->final = true;
	r->rc = rc;
	req_maybe_finish(r);
}

int conn_req_resend(struct creq *r)
{
	return req_send(r);
}

int conn_req_send(struct creq *r)
{
	r->ev = NULL;
	r->parent = NULL;
	r->waited = false;
	return req_send(r);
}

static void engine_close(lode_conn_t *c, unsigned e)
{
	for (unsigned i = c->eng[e].first; i < c->eng[e].first + c->eng[e].ntgts; i++) {
		if (c->eps[i])
			net_ep_close_force(c->eps[i]);
		c->eps[i] = NULL;
	}
}

/*
 * Pass on the result of every request in flight on engine e (all engines:
 * e < 0) that has its reply and nothing outstanding. Finishing one can
 * finish another anywhere in the list (a shadow its leader), so the walk
 * starts again from the head after each; a leader still waiting for its
 * shadows is left to them. Lock held.
 */
static void fail_pass(lode_conn_t *c, int e)
{
	struct creq *r = c->head;

	while (r) {
		if ((e < 0 || c->w[r->tgt].eng == (unsigned)e) && r->replied && !r->pending &&
		    !r->nshadow && !r->done && !r->parked) {
			req_maybe_finish(r);
			r = c->head;
		} else {
			r = r->next;
		}
	}
}

/*
 * Drop the reply data waiting to be received for requests on engine e's
 * targets (every engine's with e < 0), failing them with rc: once their engine failed, the
 * requests finish and hand their buffers back, so nothing may be received
 * into them later. Lock held.
 */
static void rndv_drop(lode_conn_t *c, int e, int rc)
{
	struct creq **pp = &c->rndv_head, *r;

	while ((r = *pp)) {
		if (e >= 0 && c->w[r->tgt].eng != (unsigned)e) {
			pp = &r->rndv_next;
			continue;
		}
		*pp = r->rndv_next;
		ucp_am_data_release(c->w[r->tgt].worker, r->rndv);
		r->rndv = NULL;
		r->pending--;
		if (r->rc == 0)
			r->rc = rc;
	}
}

/* Fail everything in flight and close the endpoints (lode_disconnect). Lock held. */
static void conn_fail(lode_conn_t *c, int rc)
{
	struct creq *r, *next;

	if (c->failed)
		return;
	c->failed = rc;
	rndv_drop(c, -1, rc);
	for (r = c->head; r; r = next) {
		next = r->next;
		if (!r->replied) {
			r->replied = true;
			r->rc = rc;
			slot_give(c, r);
		}
	}
	for (unsigned e = 0; e < c->nengines; e++)
		engine_close(c, e);
	/* A send to a peer that stopped reading may never complete, even after
	 * the forced close (shm in UCX 1.13): its request finishes now and is
	 * kept out of reuse until the workers are gone. */
	for (r = c->head; r; r = r->next) {
		r->orphans += r->pending;
		r->pending = 0;
	}
	fail_pass(c, -1);
	while ((r = c->parked)) {
		c->parked = r->next;
		r->next = NULL;
		conn_req_fail(r, rc);
	}
}

/*
 * Engine e stopped answering (an endpoint error, a dead process, a
 * timeout): it is lost. Its requests in flight get -EHOSTDOWN, its
 * endpoints close, and the map is fetched again so that its DOWN state is
 * seen. The last engine is lost the same way: the connection stays, and
 * the renewer connects the engine again once it is back (catch_up_one).
 * Lock held.
 */
static void engine_fail(lode_conn_t *c, unsigned e)
{
	struct creq *r;

	if (c->failed || e >= c->nengines)
		return;
	if (c->eng[e].lost) {
		/* Lost already; being connected again (catch_up_one), this
		 * attempt has failed: it says so when it is done. */
		if (c->eng[e].joining)
			c->eng[e].join_failed = true;
		return;
	}
	c->eng[e].lost = true;
	c->eng[e].lost_us = now_us();
	rndv_drop(c, (int)e, -EHOSTDOWN);
	for (r = c->head; r; r = r->next) {
		if (c->w[r->tgt].eng == e && !r->replied) {
			r->replied = true;
			r->rc = -EHOSTDOWN;
			slot_give(c, r);
		}
	}
	engine_close(c, e);
	for (r = c->head; r; r = r->next) {
		if (c->w[r->tgt].eng != e)
			continue;
		if (r->pending && r->rc == 0)
			r->rc = -EHOSTDOWN; /* its reply data will not come */
		r->orphans += r->pending;
		r->pending = 0;
	}
	fail_pass(c, (int)e); /* retried reads go to other engines */
	conn_map_wake(c, atomic_load(&c->map_ver) + 1);
}

static void sent_cb(void *req, ucs_status_t st, void *arg)
{
	struct creq *r = arg;

	ucp_request_free(req);
	if (r->orphans) {
		r->orphans--;
		return;
	}
	r->pending--;
	if (st != UCS_OK && !r->replied) {
		r->replied = true;
		r->rc = net_ucs_errno(st);
		slot_give(r->c, r);
	}
	req_maybe_finish(r);
}

static void recv_cb(void *req, ucs_status_t st, size_t len, void *arg)
{
	struct creq *r = arg;

	ucp_request_free(req);
	if (r->orphans) {
		r->orphans--;
		return;
	}
	r->pending--;
	if (st != UCS_OK && r->rc == 0)
		r->rc = net_ucs_errno(st);
	req_maybe_finish(r);
}

static ucp_request_param_t req_param(struct creq *r, const void *buf, size_t len)
{
	ucp_request_param_t p = {0};
	struct cbuf *cb = buf ? buf_find(r->c, buf, len) : NULL;

	p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
	p.user_data = r;
	if (cb) {
		p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
		p.memh = cb->memh;
	}
	return p;
}

/* Start receiving rendezvous reply data, outside of UCX callbacks. Lock held. */
static void rndv_run(lode_conn_t *c)
{
	struct creq *r;

	while ((r = c->rndv_head)) {
		ucp_request_param_t p = req_param(r, r->in, r->in_len);
		ucs_status_ptr_t sp;

		c->rndv_head = r->rndv_next;
		p.cb.recv_am = recv_cb;
		sp = ucp_am_recv_data_nbx(c->w[r->tgt].worker, r->rndv, r->in, r->in_len, &p);
		r->rndv = NULL;
		if (UCS_PTR_IS_ERR(sp)) {
			r->pending--;
			if (r->rc == 0)
				r->rc = net_ucs_errno(UCS_PTR_STATUS(sp));
		} else if (sp) {
			continue; /* recv_cb finishes it */
		} else {
			r->pending--;
		}
		req_maybe_finish(r);
	}
}

static ucs_status_t on_reply(void *arg, const void *header, size_t header_len, void *data,
			     size_t len, const ucp_am_recv_param_t *param)
{
	struct conn_worker *cw = arg;
	lode_conn_t *c = cw->c;
	bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
	struct net_reply_args ra;
	struct net_hdr h;
	struct creq *r = NULL;
	uint32_t slot;
	int rc;

	rc = net_hdr_decode(header, header_len, &h);
	if (rc == 0) {
		slot = (uint32_t)h.req_id;
		if (slot < c->nslots && c->slots[slot] && c->slots[slot]->id == h.req_id &&
		    c->slots[slot]->tgt == cw->idx)
			r = c->slots[slot];
	}
	if (!r || r->replied) {
		/* A reply to a request that already failed, or garbage: drop it. */
		if (rndv)
			ucp_am_data_release(cw->worker, data);
		return UCS_OK;
	}
	r->replied = true;
	slot_give(c, r);
	if (!(h.flags & NET_F_REPLY) || h.opcode != r->op) {
		rc = -EPROTO;
	} else {
		rc = net_reply_decode((const uint8_t *)header + NET_HDR_SIZE + h.cap_len, h.args_len,
				      h.status == 0 && net_op_has_anchor(h.opcode), &ra);
	}
	if (rc == 0) {
		r->rc = h.status;
		r->val = ra.val;
		r->anchor = ra.anchor;
		if (ra.anchor.len)
			memcpy(r->anchor_key, ra.anchor.key, ra.anchor.len);
		r->anchor.key = r->anchor_key;
		if (len > r->in_cap) {
			rc = -EPROTO;
		} else if (len && rndv) {
			r->in_len = len;
			r->rndv = data;
			r->pending++;
			r->rndv_next = c->rndv_head;
			c->rndv_head = r;
			return UCS_INPROGRESS;
		} else if (len) {
			memcpy(r->in, data, len);
			r->in_len = len;
		}
	}
	if (rc < 0)
		r->rc = rc;
	if (rndv)
		ucp_am_data_release(cw->worker, data);
	req_maybe_finish(r);
	return UCS_OK;
}

/*
 * Serve what the workers hold before a failure is reported. Over shm and tcp
 * a server's RMA get is emulated: this side's progress copies the caller's
 * buffer out. A server that died may have left such requests queued; once
 * conn_fail has handed a request back, nothing may read its memory, so they
 * run now, while every buffer still belongs to us. Lock held; never from a
 * UCX callback.
 */
static void conn_drain(lode_conn_t *c)
{
	for (int idle = 0, i = 0; idle < 2 && i < 1000; i++) {
		unsigned n = 0;

		for (unsigned t = 0; t < c->ntargets; t++)
			n += ucp_worker_progress(c->w[t].worker);
		idle = n ? 0 : idle + 1;
	}
}

/*
 * Over shm UCX tells that the server died only at its next peer check
 * (UCX_KEEPALIVE_INTERVAL, 20 s by default); the server is on this host,
 * though, so while requests wait we look at its process every 100 ms.
 */
static void check_server(lode_conn_t *c, int64_t now)
{
	for (unsigned e = 0; e < c->nengines && !c->failed; e++) {
		struct conn_engine *ce = &c->eng[e];

		if (!ce->pid || ce->lost || now < ce->alive_check_us)
			continue;
		ce->alive_check_us = now + 100000;
		if (kill(ce->pid, 0) < 0 && errno == ESRCH) {
			conn_drain(c);
			engine_fail(c, e);
		}
	}
}

/*
 * The oldest request past its deadline loses its engine (or, parked, waits
 * no longer for a map).
 */
static void check_timeouts(lode_conn_t *c)
{
	struct creq **pp, *r;
	int64_t now;

	if ((!c->head && !c->parked) || c->failed)
		return;
	now = now_us();
	for (;;) {
		/* A leader with its reply waits on its shadows' deadlines only. */
		for (r = c->head; r && r->replied && !r->pending; r = r->next)
			;
		if (!r || c->failed || r->deadline_us >= now)
			break;
		conn_drain(c);
		engine_fail(c, c->w[r->tgt].eng);
		if (!c->failed && (r->prev || c->head == r) && r->deadline_us < now) {
			/* Still in flight: its engine was lost already, or it is
			 * the last one; it is late on its own. */
			if (!r->replied) {
				r->replied = true;
				r->rc = -ETIMEDOUT;
				slot_give(c, r);
			}
			r->final = true;
			r->orphans += r->pending;
			r->pending = 0;
			req_maybe_finish(r);
		}
	}
	for (pp = &c->parked; (r = *pp) && !c->failed;) {
		if (r->deadline_us < now) {
			int rc = -LODE_ESTALEMAP;

			*pp = r->next;
			r->next = NULL;
			if (group_write(r) && (r->lost_up || r->lost_rc)) {
				/* No map said the missing member is DOWN in time: the
				 * write fails with why that member did not take it. */
				rc = r->lost_rc ? r->lost_rc : -EHOSTDOWN;
				r->shadow_rc = rc;
			}
			conn_req_fail(r, rc);
		} else {
			pp = &r->next;
		}
	}
	if (c->head)
		check_server(c, now);
}

/* Whether pid is a loded we can watch: same pid namespace, our host. */
static pid_t watchable_pid(uint32_t pid)
{
	char path[64], comm[32] = {0};
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%u/comm", pid);
	if (!pid || !(f = fopen(path, "r")))
		return 0;
	if (!fgets(comm, sizeof(comm), f))
		comm[0] = 0;
	fclose(f);
	return strncmp(comm, "loded", 5) == 0 ? (pid_t)pid : 0;
}

/* Progress the worker once. Lock held. Returns whether anything happened. */
static unsigned conn_progress(lode_conn_t *c)
{
	unsigned n = 0;

	for (unsigned i = 0; i < c->ntargets; i++)
		n += ucp_worker_progress(c->w[i].worker);

	if (c->rndv_head) {
		rndv_run(c);
		n++;
	}
	check_timeouts(c);
	return n;
}

/* Sleep up to ms on the worker's event fd (after arming it). Lock held. */
static void conn_sleep(lode_conn_t *c, int ms)
{
	struct epoll_event ev;

	for (unsigned i = 0; i < c->ntargets; i++)
		if (ucp_worker_arm(c->w[i].worker) != UCS_OK)
			return;
	pthread_mutex_unlock(&c->lock);
	epoll_wait(c->epfd, &ev, 1, ms);
	pthread_mutex_lock(&c->lock);
}

static int req_send(struct creq *r)
{
	lode_conn_t *c = r->c;
	struct net_hdr h = {0};
	ucp_request_param_t p;
	ucs_status_ptr_t sp;
	size_t cl;
	int n;

	if (c->failed)
		return -ENOTCONN;
	if (r->tgt >= c->ntargets)
		return -EINVAL;
	if (!c->eps[r->tgt])
		return -EHOSTDOWN; /* its engine is lost */
	if (c->eng[c->w[r->tgt].eng].joining && r->op != NET_OP_PING && r->op != NET_OP_HELLO)
		return -EHOSTDOWN; /* being connected: no session there yet */
	cl = conn_cap_put(c, r->op, &r->a.cont, r->hdr + NET_HDR_SIZE);
	if (r->placed && layout_class_id_ec(r->cls) && r->op != NET_OP_LEASE) {
		/* An EC member's own object on its target (leases stay on the
		 * array's id: one member holds them for all). */
		struct net_args a = r->a;

		a.oid = layout_oid_member(a.oid, r->member);
		n = net_args_encode(r->op, &a, r->hdr + NET_HDR_SIZE + cl, NET_ARGS_MAX);
	} else {
		n = net_args_encode(r->op, &r->a, r->hdr + NET_HDR_SIZE + cl, NET_ARGS_MAX);
	}
	if (n < 0)
		return n;
	if (slot_take(c, r) < 0)
		return -ENOMEM;
	h.magic = NET_MAGIC;
	h.version = NET_VERSION;
	h.opcode = r->op;
	h.req_id = r->id;
	h.cap_len = (uint16_t)cl;
	h.args_len = (uint16_t)n;
	h.target = c->w[r->tgt].local;
	h.session = c->session[r->tgt];
	h.map_ver = atomic_load_explicit(&c->map_ver, memory_order_relaxed);
	if (r->op == NET_OP_HELLO)
		h.flags |= NET_F_PEER_ERR;
	h.flags |= r->hflags;
	if (r->rebuild)
		h.flags |= NET_F_REBUILD;
	net_hdr_encode(&h, r->hdr);
	r->deadline_us = now_us() + (int64_t)c->timeout_ms * (r->op == NET_OP_AGGREGATE ? 30 : 1) * 1000;
	/* On the in-flight list (oldest first) before anything can complete it. */
	r->prev = c->tail;
	r->next = NULL;
	if (c->tail)
		c->tail->next = r;
	else
		c->head = r;
	c->tail = r;
	p = req_param(r, r->out, r->out_len);
	p.cb.send = sent_cb;
	p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
	p.flags = UCP_AM_SEND_FLAG_REPLY;
	sp = ucp_am_send_nbx(c->eps[r->tgt], NET_AM_REQUEST, r->hdr, NET_HDR_SIZE + cl + (size_t)n,
			     r->out, r->out_len, &p);
	if (UCS_PTR_IS_ERR(sp)) {
		r->replied = true;
		r->rc = net_ucs_errno(UCS_PTR_STATUS(sp));
		slot_give(c, r);
		req_maybe_finish(r);
	} else if (sp) {
		r->pending++; /* sent_cb frees sp */
	}
	return 0;
}

static int eq_attach(lode_event_t *ev, lode_conn_t *c);
static void eq_detach(lode_event_t *ev);

/*
 * Let a thread that was woken with work (the server's, another of ours) have
 * the core: without this, spinners on a 2-core machine kept woken threads
 * waiting for a scheduler tick, and 4 KiB reads took milliseconds at the tail.
 * The lock is dropped meanwhile so that other threads can submit.
 */
static void spin_yield(lode_conn_t *c)
{
	pthread_mutex_unlock(&c->lock);
	sched_yield();
	pthread_mutex_lock(&c->lock);
}

/* Block until r is done; the lock is held on entry and exit. */
static void req_wait(struct creq *r)
{
	lode_conn_t *c = r->c;
	int64_t idle_since = now_us();
	bool spinning = spin_take();

	while (!r->done) {
		if (conn_progress(c)) {
			idle_since = now_us();
			continue;
		}
		if (!spinning || now_us() - idle_since > SPIN_US) {
			spin_give(&spinning);
			conn_sleep(c, 1);
			if (!r->done && (spinning = spin_take()))
				idle_since = now_us();
		} else {
			spin_yield(c);
		}
	}
	spin_give(&spinning);
}

int creq_submit(struct creq *r, lode_event_t *ev, struct creq *parent)
{
	lode_conn_t *c = r->c;
	int rc;

	if (ev && (rc = eq_attach(ev, c)) < 0) {
		creq_free(r);
		return rc;
	}
	pthread_mutex_lock(&c->lock);
	r->ev = ev;
	r->parent = parent;
	r->waited = !ev && !parent && !r->detached;
	if (parent)
		parent->nchild++;
	rc = c->failed ? -ENOTCONN : r->placed ? conn_place(c, r, conn_req_send) : 0;
	if (rc == 0)
		rc = req_send(r);
	if (rc < 0 && r->nshadow) {
		/* Its shadows are out: it is a lost member of its write. */
		conn_req_fail(r, rc);
		rc = 0;
	}
	if (rc < 0) {
		if (parent)
			parent->nchild--;
		req_release(r);
		pthread_mutex_unlock(&c->lock);
		if (ev)
			eq_detach(ev);
		return rc;
	}
	if (!r->waited) {
		pthread_mutex_unlock(&c->lock);
		return 0;
	}
	req_wait(r);
	rc = r->rc;
	req_release(r);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

struct creq *conn_req_hold(lode_conn_t *c, lode_event_t *ev, struct creq *parent, int *rc)
{
	struct creq *r = creq_new(c, 0, 0);

	*rc = 0;
	if (!r) {
		*rc = -ENOMEM;
		return NULL;
	}
	if (ev && (*rc = eq_attach(ev, c)) < 0) {
		creq_free(r);
		return NULL;
	}
	pthread_mutex_lock(&c->lock);
	r->ev = ev;
	r->parent = parent;
	if (parent)
		parent->nchild++;
	r->nchild = 1; /* the work done outside */
	r->replied = true;
	pthread_mutex_unlock(&c->lock);
	atomic_fetch_add(&c->held, 1);
	return r;
}

int conn_req_seal_under(struct creq *p, struct creq *parent)
{
	lode_conn_t *c = p->c;

	pthread_mutex_lock(&c->lock);
	p->parent = parent;
	parent->nchild++;
	p->replied = true;
	if (p->nchild == 0)
		req_finish(p);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

void conn_req_drop_locked(struct creq *r)
{
	r->nchild--; /* the work outside is done; what else it waits for ends it */
	atomic_fetch_sub(&r->c->held, 1);
}

void conn_req_complete(struct creq *r, int rc)
{
	lode_conn_t *c = r->c;

	pthread_mutex_lock(&c->lock);
	if (rc < 0 && r->rc == 0)
		r->rc = rc;
	if (--r->nchild == 0)
		req_finish(r);
	pthread_mutex_unlock(&c->lock);
	atomic_fetch_sub(&c->held, 1);
}

int creq_seal(struct creq *p, lode_event_t *ev)
{
	lode_conn_t *c = p->c;
	int rc;

	if (ev && (rc = eq_attach(ev, c)) < 0) {
		/* Children are in flight: wait for them, then report the refusal. */
		ev = NULL;
		p->rc = rc;
	}
	pthread_mutex_lock(&c->lock);
	p->ev = ev;
	p->waited = !ev;
	p->replied = true;
	if (p->nchild == 0) {
		req_finish(p);
		if (!p->waited) {
			pthread_mutex_unlock(&c->lock);
			return 0;
		}
	} else if (!p->waited) {
		pthread_mutex_unlock(&c->lock);
		return 0;
	}
	req_wait(p);
	rc = p->rc;
	req_release(p);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* ---- events and queues ------------------------------------------------------ */

int lode_eq_create(lode_eq_t **eq_out)
{
	lode_eq_t *eq;

	if (!eq_out)
		return -EFAULT;
	if (!(eq = calloc(1, sizeof(*eq))))
		return -ENOMEM;
	pthread_mutex_init(&eq->lock, NULL);
	*eq_out = eq;
	return 0;
}

int lode_eq_destroy(lode_eq_t *eq)
{
	if (!eq)
		return -EFAULT;
	if (eq->inflight)
		return -EBUSY;
	pthread_mutex_destroy(&eq->lock);
	free(eq->conns);
	free(eq);
	return 0;
}

int lode_event_init(lode_event_t *ev, lode_eq_t *eq)
{
	if (!ev || !eq)
		return -EFAULT;
	/* In flight, or completed and not yet reported by lode_eq_poll. */
	if (ev->priv.state == EV_INFLIGHT || ev->priv.state == EV_DONE)
		return -EBUSY;
	memset(&ev->priv, 0, sizeof(ev->priv));
	ev->priv.eq = eq;
	ev->rc = 0;
	return 0;
}

static int eq_attach(lode_event_t *ev, lode_conn_t *c)
{
	lode_eq_t *eq = ev->priv.eq;
	unsigned i;

	if (!eq)
		return -EINVAL;
	if (ev->priv.state == EV_INFLIGHT || ev->priv.state == EV_DONE)
		return -EBUSY;
	pthread_mutex_lock(&eq->lock);
	for (i = 0; i < eq->nconns && eq->conns[i] != c; i++)
		;
	if (i == eq->nconns) {
		if (eq->nconns == eq->conns_cap) {
			unsigned cap = eq->conns_cap ? 2 * eq->conns_cap : 4;
			lode_conn_t **nc = realloc(eq->conns, cap * sizeof(*nc));

			if (!nc) {
				pthread_mutex_unlock(&eq->lock);
				return -ENOMEM;
			}
			eq->conns = nc;
			eq->conns_cap = cap;
		}
		eq->conns[eq->nconns++] = c;
	}
	ev->priv.state = EV_INFLIGHT;
	ev->priv.next = NULL;
	eq->inflight++;
	pthread_mutex_unlock(&eq->lock);
	return 0;
}

/* Undo eq_attach for a call that was refused. */
static void eq_detach(lode_event_t *ev)
{
	lode_eq_t *eq = ev->priv.eq;

	pthread_mutex_lock(&eq->lock);
	ev->priv.state = EV_IDLE;
	eq->inflight--;
	pthread_mutex_unlock(&eq->lock);
}

static void eq_complete(lode_event_t *ev)
{
	lode_eq_t *eq = ev->priv.eq;

	pthread_mutex_lock(&eq->lock);
	ev->priv.state = EV_DONE;
	ev->priv.next = NULL;
	if (eq->tail)
		eq->tail->priv.next = ev;
	else
		eq->head = ev;
	eq->tail = ev;
	pthread_mutex_unlock(&eq->lock);
}

static unsigned eq_take(lode_eq_t *eq, unsigned max, lode_event_t **evs)
{
	unsigned n = 0;

	pthread_mutex_lock(&eq->lock);
	while (n < max && eq->head) {
		lode_event_t *ev = eq->head;

		eq->head = ev->priv.next;
		if (!eq->head)
			eq->tail = NULL;
		ev->priv.state = EV_IDLE;
		ev->priv.next = NULL;
		eq->inflight--;
		evs[n++] = ev;
	}
	pthread_mutex_unlock(&eq->lock);
	return n;
}

int lode_eq_poll(lode_eq_t *eq, unsigned min, unsigned max, int64_t timeout_us,
		 lode_event_t **evs)
{
	int64_t start = now_us(), idle_since = start;
	unsigned got = 0;
	bool spinning;

	if (!eq || (max && !evs))
		return -EFAULT;
	if (min > max)
		return -EINVAL;
	spinning = spin_take();
	for (;;) {
		unsigned progressed = 0, nconns, inflight;

		pthread_mutex_lock(&eq->lock);
		nconns = eq->nconns;
		pthread_mutex_unlock(&eq->lock);
		for (unsigned i = 0; i < nconns; i++) {
			lode_conn_t *c;

			pthread_mutex_lock(&eq->lock);
			c = eq->conns[i];
			pthread_mutex_unlock(&eq->lock);
			pthread_mutex_lock(&c->lock);
			progressed += conn_progress(c);
			pthread_mutex_unlock(&c->lock);
		}
		got += eq_take(eq, max - got, evs + got);
		if (got >= max || got >= min)
			break;
		pthread_mutex_lock(&eq->lock);
		inflight = eq->inflight;
		pthread_mutex_unlock(&eq->lock);
		if (inflight == 0)
			break; /* nothing more can complete */
		if (timeout_us >= 0 && now_us() - start >= timeout_us)
			break;
		if (progressed) {
			idle_since = now_us();
		} else if (!spinning || now_us() - idle_since > SPIN_US) {
			spin_give(&spinning);
			if (nconns == 1) {
				lode_conn_t *c = eq->conns[0];

				pthread_mutex_lock(&c->lock);
				conn_sleep(c, 1);
				pthread_mutex_unlock(&c->lock);
			} else {
				usleep(50);
			}
			if ((spinning = spin_take()))
				idle_since = now_us();
		} else {
			sched_yield();
		}
	}
	spin_give(&spinning);
	return (int)got;
}

unsigned lode_eq_inflight(lode_eq_t *eq)
{
	return eq ? eq->inflight : 0;
}

/* ---- connecting ---------------------------------------------------------------- */

static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t st)
{
	struct conn_worker *cw = arg;

	/* Runs inside ucp_worker_progress, with the connection's lock held.
	 * Whatever UCX calls it, the engine is gone. */
	engine_fail(cw->c, cw->eng);
}

static const char *default_addr(char *buf, size_t cap)
{
	const char *env = getenv("LODE_ADDR"), *file = getenv("LODE_ADDR_FILE");
	char path[4096];
	FILE *f;

	if (env && *env)
		return env;
	if (!file || !*file) {
		/* where scripts/up.sh has loded write it */
		const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");

		if (state && *state)
			snprintf(path, sizeof(path), "%s/lode/addr", state);
		else
			snprintf(path, sizeof(path), "%s/.local/state/lode/addr", home ? home : "/");
		file = path;
	}
	if ((f = fopen(file, "r"))) {
		if (fgets(buf, (int)cap, f)) {
			buf[strcspn(buf, " \r\n")] = 0;
			fclose(f);
			if (*buf)
				return buf;
		} else {
			fclose(f);
		}
	}
	return "127.0.0.1:7420";
}

/* The bootstrap: ask loded for its targets' worker addresses. */
/* connect() that gives up after timeout_ms (a host that does not answer
 * would otherwise hold the caller for the kernel's SYN retries, minutes). */
static int connect_timed(int fd, const struct sockaddr_storage *ss, socklen_t sl,
			 unsigned timeout_ms)
{
	int fl = fcntl(fd, F_GETFL), err = 0;
	socklen_t el = sizeof(err);
	struct pollfd p = {.fd = fd, .events = POLLOUT};
	int rc;

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	if (connect(fd, (const struct sockaddr *)ss, sl) == 0)
		rc = 0;
	else if (errno != EINPROGRESS)
		rc = -errno;
	else if ((rc = poll(&p, 1, (int)timeout_ms)) == 0)
		rc = -ETIMEDOUT;
	else if (rc < 0)
		rc = -errno;
	else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
		rc = -errno;
	else
		rc = -err;
	if (rc == 0 && fcntl(fd, F_SETFL, fl) < 0)
		rc = -errno;
	return rc;
}

static int boot(const char *addr, unsigned timeout_ms, bool *loopback, void **msg,
		struct net_welcome *w, struct sockaddr_storage *server)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	uint8_t hello[NET_HELLO_SIZE];
	size_t len;
	int fd, rc, one = 1;

	if ((rc = net_addr_parse(addr, LODE_PORT_DEFAULT, &ss, &sl)) < 0)
		return rc;
	*loopback = net_addr_is_loopback(&ss);
	*server = ss;
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if ((rc = connect_timed(fd, &ss, sl, timeout_ms)) < 0) {
		close(fd);
		return rc;
	}
	net_hello_encode(hello);
	rc = net_frame_send(fd, hello, sizeof(hello), timeout_ms);
	if (rc == 0)
		rc = net_frame_recv(fd, NET_BOOT_MAX, timeout_ms, msg, &len);
	close(fd);
	if (rc == -ECONNRESET || rc == -EMSGSIZE)
		rc = -EPROTO; /* it closed on our hello, or answered nonsense: not a loded */
	if (rc < 0)
		return rc;
	if ((rc = net_welcome_decode(*msg, len, w)) < 0 || (rc = w->status) < 0 ||
	    w->ntargets == 0) {
		free(*msg);
		*msg = NULL;
		return rc < 0 ? rc : -EPROTO;
	}
	return 0;
}

int conn_mgmt_port_ask(lode_conn_t *c, struct sockaddr_storage *server, uint16_t *port)
{
	struct net_welcome w;
	bool loopback;
	void *msg = NULL;
	int rc = boot(c->server, c->timeout_ms, &loopback, &msg, &w, server);

	if (rc == 0)
		*port = w.mgmt_port;
	free(msg);
	return rc;
}

static int choose_transport(const struct lode_conn_opts *opts, const struct net_welcome *w,
			    uint32_t *tp)
{
	const char *name = opts && opts->transport ? opts->transport : getenv("LODE_TRANSPORT");
	char host[256] = {0};
	uint32_t want;
	int rc;

	if ((rc = net_transport_parse(name && *name ? name : "auto", &want)) < 0)
		return rc;
	if (want) {
		*tp = want;
		return (w->transports & want) ? 0 : -EPROTONOSUPPORT;
	}
	gethostname(host, sizeof(host) - 1);
	if ((w->transports & NET_TP_SHM) && strcmp(host, w->host) == 0)
		*tp = NET_TP_SHM;
	else if ((w->transports & NET_TP_RDMA) && (net_transports_probe() & NET_TP_RDMA))
		*tp = NET_TP_RDMA;
	else
		*tp = NET_TP_TCP;
	return (w->transports & *tp) ? 0 : -EPROTONOSUPPORT;
}

/*
 * One endpoint per target. Over tcp it goes through the target's UCX
 * listener when it has one (loded survives clients that die while
 * connecting only in that flow, decision 0004); otherwise it is made from
 * the target's worker address.
 */
static int conn_eps(lode_conn_t *c, unsigned first, const struct net_welcome *w,
		    const struct sockaddr_storage *server)
{
	for (unsigned i = 0; i < w->ntargets; i++) {
		struct sockaddr_storage ss = *server;
		unsigned g = first + i;
		ucp_ep_params_t ep = {0};
		ucs_status_t st;

		ep.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
		if (c->transport == NET_TP_TCP && w->port[i]) {
			if (ss.ss_family == AF_INET6)
				((struct sockaddr_in6 *)&ss)->sin6_port = htons(w->port[i]);
			else
				((struct sockaddr_in *)&ss)->sin_port = htons(w->port[i]);
			ep.field_mask |= UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
			ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
			ep.sockaddr.addr = (const struct sockaddr *)&ss;
			ep.sockaddr.addrlen = ss.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
								 : sizeof(struct sockaddr_in);
		} else {
			ep.field_mask |= UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
			ep.address = (const ucp_address_t *)w->addr[i];
		}
		/* Peer failure reported on every transport: shm's too, with the
		 * interfaces' error handling net/ucx.c turns on, so that either
		 * side can close its endpoint at once (decision 0004). */
		ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
		ep.err_handler.cb = ep_error;
		ep.err_handler.arg = &c->w[g];
		pthread_mutex_lock(&c->lock);
		st = ucp_ep_create(c->w[g].worker, &ep, &c->eps[g]);
		if (st != UCS_OK)
			c->eps[g] = NULL;
		pthread_mutex_unlock(&c->lock);
		if (st != UCS_OK)
			return net_ucs_errno(st);
	}
	return 0;
}

/*
 * Flush every endpoint: this returns once each endpoint's wire-up finished
 * in both directions. UCX 1.13's loded side aborts if a client dies while
 * its half of the wire-up is still pending, so no connection is handed to
 * the caller before that window has closed.
 */
static int conn_settle(lode_conn_t *c, unsigned first, unsigned n)
{
	ucs_status_ptr_t sps[CONN_TARGETS_MAX] = {0};
	int64_t until = now_us() + (int64_t)c->timeout_ms * 1000;
	int rc = 0;
	bool busy;

	pthread_mutex_lock(&c->lock);
	for (unsigned i = first; i < first + n; i++) {
		ucp_request_param_t p = {0};

		if (!c->eps[i]) {
			rc = -EHOSTDOWN;
			continue;
		}
		sps[i] = ucp_ep_flush_nbx(c->eps[i], &p);
		if (UCS_PTR_IS_ERR(sps[i]))
			rc = net_ucs_errno(UCS_PTR_STATUS(sps[i]));
	}
	do {
		busy = false;
		conn_progress(c);
		for (unsigned i = first; i < first + n; i++) {
			ucs_status_t st;

			if (!sps[i] || UCS_PTR_IS_ERR(sps[i]))
				continue;
			st = ucp_request_check_status(sps[i]);
			if (st == UCS_INPROGRESS) {
				busy = true;
				continue;
			}
			if (st != UCS_OK && rc == 0)
				rc = net_ucs_errno(st);
			ucp_request_free(sps[i]);
			sps[i] = NULL;
		}
	} while (busy && now_us() < until);
	for (unsigned i = first; i < first + n; i++)
		if (sps[i] && !UCS_PTR_IS_ERR(sps[i]))
			ucp_request_free(sps[i]);
	pthread_mutex_unlock(&c->lock);
	return busy ? -ETIMEDOUT : rc;
}

static void session_done(struct creq *r)
{
	if (r->rc == 0)
		r->c->session[r->tgt] = (uint32_t)r->val;
}

/*
 * Give every target our worker's address: it makes an endpoint of its own
 * to us (a session) and answers every request on it, and reaches our memory
 * by RMA through it. See docs/decisions/0004.
 */
static int conn_sessions(lode_conn_t *c, unsigned first, unsigned n)
{
	for (unsigned i = first; i < first + n; i++) {
		ucp_address_t *addr;
		size_t len;
		struct creq *r;
		int rc;

		rc = net_ucs_errno(ucp_worker_get_address(c->w[i].worker, &addr, &len));
		if (rc < 0)
			return rc;
		if (!(r = creq_new(c, NET_OP_HELLO, i))) {
			ucp_worker_release_address(c->w[i].worker, addr);
			return -ENOMEM;
		}
		r->out = addr;
		r->out_len = len;
		r->on_done = session_done;
		rc = creq_submit(r, NULL, NULL);
		ucp_worker_release_address(c->w[i].worker, addr);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static _Thread_local char last_error[320];

const char *lode_last_error(void)
{
	return last_error;
}

/* Keep a failed connection's last word for lode_last_error, then close it. */
static void conn_abandon(lode_conn_t *c)
{
	const char *m = c->mgmt_err, *colon = strstr(m, ": ");

	/* "Connect: user t/bob is revoked": the method is noise to a person. */
	if (colon && !memchr(m, ' ', (size_t)(colon - m)))
		m = colon + 2;
	snprintf(last_error, sizeof(last_error), "%s", m);
	lode_disconnect(c);
}

/* A connection with nothing open yet, named for addr (NULL: the default). */
static lode_conn_t *conn_alloc(const char *addr, const struct lode_conn_opts *opts)
{
	const char *tmo = getenv("LODE_TIMEOUT_MS");
	char abuf[256];
	lode_conn_t *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->renew_lock, NULL);
	pthread_mutex_init(&c->renewer_lock, NULL);
	pthread_mutex_init(&c->catch_lock, NULL);
	pthread_mutex_init(&c->mgmt_lock, NULL);
	clock_cond_init(&c->renewer_cond);
	c->epfd = -1;
	c->timeout_ms = opts && opts->timeout_ms ? opts->timeout_ms
			: tmo && atoi(tmo) > 0 ? (unsigned)atoi(tmo)
					       : TIMEOUT_DEFAULT_MS;
	snprintf(c->server, sizeof(c->server), "%s", addr ? addr : default_addr(abuf, sizeof(abuf)));
	return c;
}

/* Whether the map's address for an engine names the server we bootstrapped. */
static bool addr_same(const char *addr, const struct sockaddr_storage *server)
{
	struct sockaddr_storage ss;
	socklen_t sl;

	if (!addr[0] || net_addr_parse(addr, LODE_PORT_DEFAULT, &ss, &sl) < 0 ||
	    ss.ss_family != server->ss_family)
		return false;
	if (ss.ss_family == AF_INET) {
		const struct sockaddr_in *a = (const void *)&ss, *b = (const void *)server;

		return a->sin_port == b->sin_port &&
		       (a->sin_addr.s_addr == b->sin_addr.s_addr ||
			(a->sin_addr.s_addr == htonl(INADDR_ANY) && net_addr_is_loopback(server)));
	}
	if (ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const void *)&ss, *b = (const void *)server;

		return a->sin6_port == b->sin6_port &&
		       (memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(a->sin6_addr)) == 0 ||
			(IN6_IS_ADDR_UNSPECIFIED(&a->sin6_addr) && net_addr_is_loopback(server)));
	}
	return false;
}

/*
 * Workers for engine e's targets, as the next global targets. A failure
 * here is this host's (memory, descriptors): it fails the connection.
 */
static int engine_workers(lode_conn_t *c, unsigned e, const struct net_welcome *w)
{
	unsigned first = c->ntargets;

	if (first + w->ntargets > CONN_TARGETS_MAX)
		return -E2BIG;
	for (unsigned i = 0; i < w->ntargets; i++) {
		struct conn_worker *cw = &c->w[first + i];
		struct epoll_event ev = {.events = EPOLLIN};
		int rc;

		if (cw->worker) {
			/* Left by a connect of this engine that failed part-way. */
			epoll_ctl(c->epfd, EPOLL_CTL_DEL, cw->efd, NULL);
			ucp_worker_destroy(cw->worker);
			cw->worker = NULL;
		}
		cw->c = c;
		cw->idx = first + i;
		cw->eng = e;
		cw->local = (uint16_t)i;
		if ((rc = net_worker_create(c->ctx, &cw->worker)) < 0)
			return rc;
		if ((rc = net_am_handler_set(cw->worker, NET_AM_REPLY, on_reply, cw)) < 0)
			return rc;
		if ((rc = net_ucs_errno(ucp_worker_get_efd(cw->worker, &cw->efd))) < 0)
			return rc;
		if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, cw->efd, &ev) < 0)
			return -errno;
	}
	pthread_mutex_lock(&c->lock);
	c->eng[e].first = first;
	c->eng[e].ntgts = w->ntargets;
	c->eng[e].connected = true;
	c->ntargets = first + w->ntargets;
	pthread_mutex_unlock(&c->lock);
	if (c->transport == NET_TP_SHM)
		c->eng[e].pid = watchable_pid(w->pid);
	return 0;
}

/* Endpoints to engine e's targets, a round trip to each (which proves
 * they work), a flush, and a session on each. */
static int engine_connect(lode_conn_t *c, unsigned e, const struct net_welcome *w,
			  const struct sockaddr_storage *server)
{
	unsigned first = c->eng[e].first, n = c->eng[e].ntgts;
	int rc;

	if ((rc = conn_eps(c, first, w, server)) < 0)
		return rc;
	for (unsigned i = first; i < first + n; i++) {
		struct creq *r = creq_new(c, NET_OP_PING, i);

		if (!r)
			return -ENOMEM;
		if ((rc = creq_submit(r, NULL, NULL)) < 0)
			return rc;
	}
	if ((rc = conn_settle(c, first, n)) < 0)
		return rc;
	return conn_sessions(c, first, n);
}

/*
 * Every other engine of the map that may hold data or serve reads (UP,
 * DRAIN, NEW; DOWN and OUT ones keep their slots unconnected). One that
 * cannot be reached is lost, not a failure of the connection.
 */
static int engines_open_rest(lode_conn_t *c, unsigned boot_slot, bool loopback)
{
	uint8_t states[CONN_ENGINES_MAX];
	unsigned n;

	/* The states as the map had them at connect: the renewer may swap the
	 * map meanwhile (an engine failing below wakes it). */
	pthread_mutex_lock(&c->lock);
	n = c->nengines < c->map->nengines ? c->nengines : c->map->nengines;
	for (unsigned e = 0; e < n; e++)
		states[e] = c->map->engines[e].state;
	pthread_mutex_unlock(&c->lock);
	for (unsigned e = 0; e < n; e++) {
		unsigned st = states[e];
		struct sockaddr_storage ss;
		struct net_welcome w;
		void *msg = NULL;
		bool lo;
		int rc;

		if (e == boot_slot || st == LAYOUT_DOWN || st == LAYOUT_OUT)
			continue;
		rc = boot(c->eng[e].addr, c->timeout_ms, &lo, &msg, &w, &ss);
		if (rc == 0 && (!(w.transports & c->transport) || lo != loopback))
			rc = -EPROTONOSUPPORT;
		if (rc == 0 && (rc = engine_workers(c, e, &w)) < 0) {
			free(msg);
			return rc;
		}
		if (rc == 0)
			rc = engine_connect(c, e, &w, &ss);
		free(msg);
		if (rc < 0 && c->eng[e].connected) {
			pthread_mutex_lock(&c->lock);
			engine_fail(c, e);
			pthread_mutex_unlock(&c->lock);
			if (c->failed)
				return c->failed;
		}
	}
	return 0;
}

#define CATCH_UP_BOOT_MS 2000

/* Whether addr (an engine's, from the map) names the server c dialled. */
static bool server_named(const lode_conn_t *c, const char *addr)
{
	struct sockaddr_storage ss;
	socklen_t sl;

	return strcmp(addr, c->server) != 0 &&
	       net_addr_parse(c->server, LODE_PORT_DEFAULT, &ss, &sl) == 0 && addr_same(addr, &ss);
}

/* An engine of the installed map to connect now, or -1; with fresh, only
 * one never connected, whether its next try is due or not (conn_engines_fresh).
 * Lock held. */
static int catch_up_pick(const lode_conn_t *c, int64_t now, bool fresh)
{
	if (!c->ready || c->failed || !c->map)
		return -1;
	if (c->map_local) /* one engine, no service map: engine 0 when lost */
		return !fresh && c->eng[0].lost && c->eng[0].retry_us <= now ? 0 : -1;
	for (unsigned e = 0; e < c->nengines; e++) {
		const struct conn_engine *ce = &c->eng[e];
		const struct layout_engine *le = layout_map_engine(c->map, ce->id);

		if (!le || ce->joining || (ce->connected && (fresh || !ce->lost)) ||
		    (!fresh && ce->retry_us > now) || !ce->addr[0] || (fresh && ce->tried))
			continue;
		/* Lost: only once a map fetched since still has it (not DOWN). */
		if (ce->lost && c->map_at_us <= ce->lost_us)
			continue;
		if (le->state == LAYOUT_UP || le->state == LAYOUT_DRAIN || le->state == LAYOUT_NEW)
			return (int)e;
	}
	return -1;
}

static int catch_up_one(lode_conn_t *c, bool fresh)
{
	struct sockaddr_storage ss;
	struct net_welcome w;
	char addr[256];
	void *msg = NULL;
	bool lo, had;
	int e, rc;

	pthread_mutex_lock(&c->lock);
	if ((e = catch_up_pick(c, now_us(), fresh)) < 0) {
		pthread_mutex_unlock(&c->lock);
		return 0;
	}
	c->eng[e].tried = fresh;
	c->eng[e].joining = true;
	c->eng[e].join_failed = false;
	had = c->eng[e].connected; /* lost and back: its workers are there */
	memcpy(addr, c->eng[e].addr, sizeof(addr));
	if (had) /* a restarted loded numbers its sessions afresh */
		for (unsigned t = c->eng[e].first; t < c->eng[e].first + c->eng[e].ntgts; t++)
			c->session[t] = 0;
	pthread_mutex_unlock(&c->lock);
	/* The map may name the engine we dialled by a wildcard address
	 * (0.0.0.0:P): dial it as we did, or it would not count as on this
	 * host (loopback) and be refused below. (Out of the lock: names may
	 * be looked up.) */
	if (server_named(c, addr))
		snprintf(addr, sizeof(addr), "%s", c->server);

	/* A short bootstrap: the renewer renews tokens and fetches maps too. */
	rc = boot(addr, c->timeout_ms < CATCH_UP_BOOT_MS ? c->timeout_ms : CATCH_UP_BOOT_MS, &lo,
		  &msg, &w, &ss);
	if (rc == 0 && (!(w.transports & c->transport) || lo != c->loopback))
		rc = -EPROTONOSUPPORT;
	if (rc == 0 && had && w.ntargets != c->eng[e].ntgts)
		rc = -EPROTO; /* an engine's targets are fixed */
	if (rc == 0 && !had)
		rc = engine_workers(c, (unsigned)e, &w);
	if (rc == 0)
		rc = engine_connect(c, (unsigned)e, &w, &ss);
	free(msg);
	pthread_mutex_lock(&c->lock);
	/* An endpoint error meanwhile closed what was just made, or (an engine
	 * lost before) was noted in join_failed. */
	for (unsigned t = c->eng[e].first; rc == 0 && t < c->eng[e].first + c->eng[e].ntgts; t++)
		if (!c->eps[t])
			rc = -ECONNRESET;
	if (rc == 0 && c->eng[e].join_failed)
		rc = -ECONNRESET;
	c->eng[e].err = rc;
	if (rc == 0) {
		c->eng[e].lost = false;
		c->eng[e].retry_us = 0;
		c->eng[e].tries = 0;
		if (c->transport == NET_TP_SHM)
			c->eng[e].pid = watchable_pid(w.pid);
	} else {
		if (c->eng[e].connected) {
			engine_close(c, (unsigned)e);
			/* Lost since the loss that made us try (lost_us stays:
			 * a map fetched since that still lets it be tried), or
			 * a first connect that failed after making its workers:
			 * lost now, and tried again once a map says it is still
			 * there (asked for here: nothing else may ask). */
			if (!c->eng[e].lost) {
				c->eng[e].lost_us = now_us();
				conn_map_wake(c, atomic_load(&c->map_ver) + 1);
			}
			c->eng[e].lost = true;
		}
		/* 1 s, 2 s, 4 s ... 32 s between tries */
		c->eng[e].retry_us = now_us() + (1000000ll << c->eng[e].tries);
		if (c->eng[e].tries < 5)
			c->eng[e].tries++;
	}
	c->eng[e].joining = false;
	/* Writes that waited for a map to say why a member was missing: the
	 * member may be this engine, reachable now. */
	for (struct creq *r = c->parked; rc == 0 && r; r = r->next)
		if ((r->lost_up || r->lost_rc) && r->val > atomic_load(&c->map_ver))
			r->val = atomic_load(&c->map_ver);
	pthread_mutex_unlock(&c->lock);
	if (rc == 0)
		conn_map_install(c, NULL);
	return rc < 0 ? rc : 1;
}

int conn_engines_catch_up(lode_conn_t *c)
{
	int rc;

	/* The renewer and conn_engines_fresh: engine_workers takes the next
	 * free target slots, which two at once would both take. The renewer
	 * does not wait (it renews tokens and fetches maps too). */
	if (pthread_mutex_trylock(&c->catch_lock) != 0)
		return 0;
	rc = catch_up_one(c, false);
	pthread_mutex_unlock(&c->catch_lock);
	return rc;
}

int conn_engines_fresh(lode_conn_t *c)
{
	int rc = 0;

	/* A lost engine that is back had what was made before it left; the
	 * renewer connects it. */
	pthread_mutex_lock(&c->catch_lock);
	pthread_mutex_lock(&c->lock);
	for (unsigned e = 0; e < c->nengines; e++)
		c->eng[e].tried = false;
	pthread_mutex_unlock(&c->lock);
	while (catch_up_one(c, true) != 0)
		;
	/* Every engine the map has serving must be connected now: one that
	 * never answered us would miss what is being made, and nothing
	 * makes it there later (it is not new, and not lost). */
	pthread_mutex_lock(&c->lock);
	rc = c->failed;
	for (uint32_t s = 0; c->map && rc == 0 && s < c->map->nengines; s++) {
		const struct layout_engine *le = &c->map->engines[s];
		const struct conn_engine *ce = conn_engine_of(c, le->id);

		if (le->state != LAYOUT_UP && le->state != LAYOUT_DRAIN && le->state != LAYOUT_NEW)
			continue;
		/* No slot: more engines than a connection holds. A connect that
		 * can never work says so; any other failure may pass. */
		if (!ce)
			rc = c->nengines == CONN_ENGINES_MAX ? -E2BIG : -EHOSTDOWN;
		else if (!ce->connected || ce->lost)
			rc = ce->err == -EPROTONOSUPPORT || ce->err == -E2BIG ? ce->err : -EHOSTDOWN;
	}
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_unlock(&c->catch_lock);
	return rc;
}

int lode_connect(const char *addr, const struct lode_conn_opts *opts, lode_conn_t **conn_out)
{
	struct sockaddr_storage server;
	struct net_welcome w;
	const char *bulk = getenv("LODE_BULK");
	lode_conn_t *c;
	unsigned boot_slot = 0;
	bool loopback, found = false;
	void *msg = NULL;
	int rc;

	last_error[0] = 0;
	if (!conn_out)
		return -EFAULT;
	if (!(c = conn_alloc(addr, opts)))
		return -ENOMEM;
	addr = c->server;
	if ((rc = boot(addr, c->timeout_ms, &loopback, &msg, &w, &server)) < 0)
		goto fail;
	c->inline_max = w.inline_max;
	if ((rc = choose_transport(opts, &w, &c->transport)) < 0)
		goto fail;
	if ((rc = conn_login(c, &server, &w, opts)) < 0)
		goto fail;
	/* The engine we bootstrapped, in the map the service gave; without
	 * one, it is the only engine (and placement is over its targets). */
	for (unsigned e = 0; c->map && e < c->nengines; e++) {
		if (!addr_same(c->eng[e].addr, &server))
			continue;
		if (found) {
			/* Two engines answer to the address we dialed (wildcard
			 * listen addresses): we cannot tell which one we reached. */
			snprintf(c->mgmt_err, sizeof(c->mgmt_err),
				 "engines %u and %u of the pool map both have the address %.160s",
				 c->eng[boot_slot].id, c->eng[e].id, c->server);
			rc = -EPROTO;
			goto fail;
		}
		boot_slot = e, found = true;
	}
	if (!found && c->map && c->nengines > 1) {
		/* Placing over the one engine we reached would put data where
		 * the other clients, placing over the whole map, never look. */
		snprintf(c->mgmt_err, sizeof(c->mgmt_err),
			 "%.160s is none of the %u engines of the pool map (engines must listen on "
			 "an address clients dial)",
			 c->server, c->nengines);
		rc = -EPROTO;
		goto fail;
	}
	if (!found) {
		pthread_mutex_lock(&c->lock);
		layout_map_free(c->map);
		layout_map_free(c->map_next);
		c->map = NULL;
		c->map_next = NULL;
		c->map_local = true;
		memset(c->eng, 0, sizeof(c->eng));
		snprintf(c->eng[0].addr, sizeof(c->eng[0].addr), "%s", c->server);
		c->nengines = 1;
		pthread_mutex_unlock(&c->lock);
	}
	if (bulk && strcmp(bulk, "rma") == 0)
		c->rma = true;
	else if (bulk && strcmp(bulk, "am") == 0)
		c->rma = false;
	else if (w.bulk == NET_BULK_RMA || w.bulk == NET_BULK_AM)
		c->rma = w.bulk == NET_BULK_RMA;
	else
		c->rma = c->transport != NET_TP_TCP; /* see docs/decisions/0004 */
	c->loopback = loopback;
	if ((rc = net_context_create(c->transport, loopback, &c->ctx)) < 0)
		goto fail;
	if ((c->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
		rc = -errno;
		goto fail;
	}
	if ((rc = engine_workers(c, boot_slot, &w)) < 0)
		goto fail;
	if ((rc = engine_connect(c, boot_slot, &w, &server)) < 0)
		goto fail;
	free(msg);
	msg = NULL;
	if (!found) {
		struct layout_map *m;

		if ((rc = conn_map_local(c, &m)) < 0)
			goto fail;
		pthread_mutex_lock(&c->lock);
		c->map = m;
		pthread_mutex_unlock(&c->lock);
	} else if ((rc = engines_open_rest(c, boot_slot, loopback)) < 0) {
		goto fail;
	}
	pthread_mutex_lock(&c->lock);
	c->ready = true; /* the renewer may connect engines from now on */
	pthread_mutex_unlock(&c->lock);
	*conn_out = c;
	return 0;
fail:
	free(msg);
	conn_abandon(c);
	return rc;
}

int conn_mgmt_connect(const char *addr, const struct lode_conn_opts *opts, lode_conn_t **conn_out)
{
	struct sockaddr_storage server;
	struct net_welcome w;
	lode_conn_t *c;
	bool loopback;
	void *msg = NULL;
	int rc;

	last_error[0] = 0;
	if (!conn_out)
		return -EFAULT;
	if (!(c = conn_alloc(addr, opts)))
		return -ENOMEM;
	c->failed = -ENOTCONN; /* no data plane: every request is refused */
	rc = boot(c->server, c->timeout_ms, &loopback, &msg, &w, &server);
	if (rc == 0)
		rc = conn_login(c, &server, &w, opts);
	free(msg);
	if (rc < 0) {
		conn_abandon(c);
		return rc;
	}
	*conn_out = c;
	return 0;
}

int lode_disconnect(lode_conn_t *c)
{
	struct creq *r;

	if (!c)
		return 0;
	/* Work held outside the connection (ec_io.c's workers) ends first. */
	while (atomic_load(&c->held) > 0)
		usleep(1000);
	conn_renewer_stop(c);
	/* End our sessions, so targets drop their endpoints to us now. */
	for (unsigned i = 0; i < c->ntargets && !c->failed; i++) {
		struct creq *bye;

		if (c->session[i] && c->eps[i] && (bye = creq_new(c, NET_OP_BYE, i)))
			creq_submit(bye, NULL, NULL);
		c->session[i] = 0;
	}
	pthread_mutex_lock(&c->lock);
	if (c->w[0].worker) {
		/* Cancel what is in flight; close the endpoints politely otherwise.
		 * A failed connection has no endpoints left, and its workers are
		 * not progressed again: a late request from the server would read
		 * buffers the caller has taken back. */
		if (c->head || c->parked) {
			conn_drain(c);
			conn_fail(c, -ECANCELED);
		} else if (!c->failed) {
			/* A flushing close tells the server the endpoint is gone, so it
			 * never sends to a worker that no longer exists. */
			ucs_status_ptr_t sps[CONN_TARGETS_MAX] = {0};
			int64_t until = now_us() + 1000000;
			bool busy;

			for (unsigned i = 0; i < c->ntargets; i++) {
				ucp_request_param_t p = {0};

				if (!c->eps[i])
					continue;
				sps[i] = ucp_ep_close_nbx(c->eps[i], &p);
				c->eps[i] = NULL;
			}
			do {
				busy = false;
				conn_progress(c);
				for (unsigned i = 0; i < c->ntargets; i++) {
					if (!sps[i] || UCS_PTR_IS_ERR(sps[i]))
						continue;
					if (ucp_request_check_status(sps[i]) != UCS_INPROGRESS) {
						ucp_request_free(sps[i]);
						sps[i] = NULL;
					} else {
						busy = true;
					}
				}
			} while (busy && now_us() < until);
			for (unsigned i = 0; i < c->ntargets; i++)
				if (sps[i] && !UCS_PTR_IS_ERR(sps[i]))
					ucp_request_free(sps[i]);
		}
		for (int i = 0; i < 100 && c->head; i++)
			conn_progress(c);
	}
	for (unsigned i = 0; i < c->nbufs; i++) {
		ucp_rkey_buffer_release(c->bufs[i].rkey_buf);
		ucp_mem_unmap(c->ctx, c->bufs[i].memh);
	}
	while ((r = c->free_reqs)) {
		c->free_reqs = r->next;
		free(r);
	}
	for (unsigned i = 0; i < CONN_TARGETS_MAX; i++)
		if (c->w[i].worker)
			ucp_worker_destroy(c->w[i].worker);
	while ((r = c->orphans)) {
		c->orphans = r->next;
		free(r);
	}
	if (c->epfd >= 0)
		close(c->epfd);
	if (c->ctx)
		ucp_cleanup(c->ctx);
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_destroy(&c->lock);
	conn_logout(c);
	pthread_mutex_destroy(&c->renew_lock);
	pthread_mutex_destroy(&c->renewer_lock);
	pthread_mutex_destroy(&c->catch_lock);
	pthread_mutex_destroy(&c->mgmt_lock);
	pthread_cond_destroy(&c->renewer_cond);
	layout_map_free(c->map);
	layout_map_free(c->map_next);
	free(c->bufs);
	free(c->slots);
	free(c->free_slots);
	free(c);
	return 0;
}

int lode_conn_query(lode_conn_t *c, struct lode_conn_info *info)
{
	if (!c || !info)
		return -EFAULT;
	memset(info, 0, sizeof(*info));
	snprintf(info->transport, sizeof(info->transport), "%s", net_transport_name(c->transport));
	snprintf(info->bulk, sizeof(info->bulk), "%s", c->rma ? "rma" : "am");
	info->ntargets = c->ntargets;
	info->inline_max = c->inline_max;
	snprintf(info->server, sizeof(info->server), "%s", c->server);
	info->map_version = atomic_load(&c->map_ver);
	return c->failed ? -ENOTCONN : 0;
}

bool conn_target_live(lode_conn_t *c, unsigned t)
{
	bool live;

	pthread_mutex_lock(&c->lock);
	live = t < c->ntargets && c->eps[t] && !c->eng[c->w[t].eng].lost &&
	       !c->eng[c->w[t].eng].joining;
	pthread_mutex_unlock(&c->lock);
	return live;
}

void conn_expire(lode_conn_t *c, int why)
{
	char said[160];

	pthread_mutex_lock(&c->lock);
	if (!c->failed) {
		snprintf(said, sizeof(said), "%.*s", (int)sizeof(said) - 1, c->mgmt_err);
		snprintf(c->mgmt_err, sizeof(c->mgmt_err),
			 "the connection's capability expired and it cannot log in again "
			 "(%s%s%s): connect again",
			 lode_strerror(why), said[0] ? ": " : "", said);
	}
	conn_drain(c);
	conn_fail(c, -LODE_ECAPEXPIRED);
	pthread_mutex_unlock(&c->lock);
}

void conn_engines_drop(lode_conn_t *c)
{
	pthread_mutex_lock(&c->lock);
	conn_drain(c);
	for (unsigned e = 0; e < c->nengines; e++) {
		if (!c->eng[e].connected)
			continue; /* never reached: conn_engines_fresh's, as before */
		engine_fail(c, e);
		c->eng[e].tries = 0; /* at once, not after the pause of failed tries */
		c->eng[e].retry_us = 0;
	}
	pthread_mutex_unlock(&c->lock);
}

bool conn_expired(lode_conn_t *c)
{
	bool expired;

	pthread_mutex_lock(&c->lock);
	expired = c->failed == -LODE_ECAPEXPIRED;
	pthread_mutex_unlock(&c->lock);
	return expired;
}

int conn_target_reach(lode_conn_t *c, unsigned t)
{
	const struct conn_engine *ce;
	const struct layout_engine *le;
	int rc = 0;

	pthread_mutex_lock(&c->lock);
	ce = t < c->ntargets ? &c->eng[c->w[t].eng] : NULL;
	if (!ce) {
		rc = 1;
	} else if (!c->eps[t] || ce->lost || ce->joining) {
		/* Skipped: an engine being connected for the first time (as
		 * before it joined; conn_engines_fresh's callers go again), or
		 * one the map no longer has serving. */
		rc = 1;
		le = c->map && ce->lost ? layout_map_engine(c->map, ce->id) : NULL;
		if (le && (le->state == LAYOUT_UP || le->state == LAYOUT_DRAIN ||
			   le->state == LAYOUT_NEW)) {
			rc = -EHOSTDOWN;
			/* A map that says DOWN ends the refusals: ask for one. */
			conn_map_wake(c, atomic_load(&c->map_ver) + 1);
		}
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

bool conn_target_new(const lode_conn_t *c, unsigned t)
{
	const struct layout_engine *le;

	if (t >= c->ntargets || !c->map)
		return false;
	le = layout_map_engine(c->map, c->eng[c->w[t].eng].id);
	return le && le->state == LAYOUT_NEW;
}

unsigned conn_target_first(lode_conn_t *c)
{
	for (unsigned t = 0; t < c->ntargets; t++)
		if (conn_target_live(c, t))
			return t;
	return 0;
}
