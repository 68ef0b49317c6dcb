/*
 * The poll loop: lode-fuse's default way of serving requests (-o pollers=N).
 *
 * Why not libfuse's thread pool: there, each request is one thread's until
 * its reply, so a read holds a thread across a round trip to loded, and 16
 * reads in flight are 16 threads waiting for replies. On a host with few
 * cores the waiting is what costs: threads that spin for their reply take
 * the cores loded's targets and the readers need (perf showed 80% of the
 * CPU in sched_yield at 16 readers on 2 cores), and threads that sleep pay
 * a wake-up per reply. Here a few threads (pollers) each take requests from
 * /dev/fuse without blocking, start reads and writes without waiting for
 * them (lodefs_aio_read, lodefs_aio_write) and reply when they complete, so
 * one thread keeps many in flight and never sleeps while there is work.
 *
 * Every other request (metadata, sync, close) is handed to a pool of worker
 * threads and served there synchronously, as libfuse's pool would, so that
 * a create that waits for its round trips holds up neither the I/O nor
 * other creates. Workers are started as requests wait for one (up to
 * max_threads) and max_idle_threads of them stay when idle.
 *
 * A poller that has seen nothing for SPIN_US sleeps in poll(2) on /dev/fuse
 * and on an eventfd that says "stop"; one whose I/O has not moved for
 * STALL_US (a stalled server) naps a millisecond at a time between looks.
 * The first poller is the main thread: signals reach it (the others block
 * them), libfuse's handler ends the session, and the main poller wakes the
 * others. An unmount wakes them all (the device reports an error, and a
 * read says ENODEV).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "fuse/lfuse.h"

/*
 * Idle this long with nothing in flight, then sleep. Short, because on a
 * small host a spinning poller takes the core a lone reader or loded's
 * target needs: a single 4 KiB reader made about 25K IOPS with 1 ms of
 * spinning and 35-45K with 50-100 us, where 16 readers (which keep
 * reads in flight, so the poller spins anyway) did not care.
 */
#define SPIN_US 100
#define STALL_US 10000  /* reads in flight but none done this long: nap between looks */
#define REAP_MAX 32

/* A request waiting for a worker: the buffer it was read into. */
struct work {
	struct work *next;
	struct fuse_buf buf;
};

/* The workers of all pollers. */
struct pool {
	struct fuse_session *se;
	pthread_mutex_t mu;
	pthread_cond_t cv;       /* work queued, or stopping */
	pthread_cond_t gone_cv;  /* a worker exited */
	struct work *head, **tail;
	struct work *spare;      /* buffers of served requests, for the next */
	unsigned nspare;
	unsigned queued, workers, idle, max_workers, max_idle;
	bool stop;
};

struct lfuse_poller {
	struct lfuse *lf;
	struct pool *pool;
	lode_eq_t *eq;        /* this poller's reads in flight */
	unsigned inflight;
	int stopfd;           /* the eventfd every poller watches */
	pthread_t thread;
	struct work *w;       /* the buffer the next request is read into */
};

static __thread struct lfuse_poller *self;

static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

lode_eq_t *lfuse_poller_eq(void)
{
	return self ? self->eq : NULL;
}

void lfuse_poller_started(void)
{
	self->inflight++;
}

#define SPARE_MAX 8 /* request buffers (about 1 MiB each) kept for reuse */

/* A served request's buffer, kept for the next one or freed. */
static void spare_put(struct pool *pl, struct work *w)
{
	pthread_mutex_lock(&pl->mu);
	if (pl->nspare < SPARE_MAX) {
		w->next = pl->spare;
		pl->spare = w;
		pl->nspare++;
		w = NULL;
	}
	pthread_mutex_unlock(&pl->mu);
	if (w) {
		free(w->buf.mem);
		free(w);
	}
}

static void *worker_main(void *arg)
{
	struct pool *pl = arg;
	struct work *w;

	pthread_setname_np(pthread_self(), "lfuse-work");
	pthread_mutex_lock(&pl->mu);
	for (;;) {
		while (!pl->head && !pl->stop && pl->idle <= pl->max_idle)
			pthread_cond_wait(&pl->cv, &pl->mu);
		if (!pl->head)
			break; /* stopping, or idle workers enough without us */
		w = pl->head;
		if (!(pl->head = w->next))
			pl->tail = &pl->head;
		pl->queued--;
		pl->idle--;
		pthread_mutex_unlock(&pl->mu);
		fuse_session_process_buf(pl->se, &w->buf);
		spare_put(pl, w);
		pthread_mutex_lock(&pl->mu);
		pl->idle++;
	}
	pl->idle--;
	pl->workers--;
	pthread_cond_broadcast(&pl->gone_cv);
	pthread_mutex_unlock(&pl->mu);
	return NULL;
}

/*
 * Queue w for a worker, starting one when every idle worker already has a
 * request waiting for it. False: no worker could start.
 */
static bool pool_queue(struct pool *pl, struct work *w)
{
	bool ok = true;

	w->next = NULL;
	pthread_mutex_lock(&pl->mu);
	if (pl->queued >= pl->idle && pl->workers < pl->max_workers) {
		pthread_t t;
		pthread_attr_t at;

		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &at, worker_main, pl) == 0) {
			pl->workers++;
			pl->idle++;
		} else if (pl->workers == 0) {
			ok = false;
		}
		pthread_attr_destroy(&at);
	}
	if (ok) {
		*pl->tail = w;
		pl->tail = &w->next;
		pl->queued++;
		pthread_cond_signal(&pl->cv);
	}
	pthread_mutex_unlock(&pl->mu);
	return ok;
}

/* A buffer to read the next request into: a spare one, or a new one. */
static struct work *work_get(struct pool *pl)
{
	struct work *w;

	pthread_mutex_lock(&pl->mu);
	if ((w = pl->spare)) {
		pl->spare = w->next;
		pl->nspare--;
	}
	pthread_mutex_unlock(&pl->mu);
	return w ? w : calloc(1, sizeof(*w));
}

/* Stop the workers once the queue is served, and free the spares. */
static void pool_stop(struct pool *pl)
{
	struct work *w;

	pthread_mutex_lock(&pl->mu);
	pl->stop = true;
	pthread_cond_broadcast(&pl->cv);
	while (pl->workers)
		pthread_cond_wait(&pl->gone_cv, &pl->mu);
	while ((w = pl->spare)) {
		pl->spare = w->next;
		free(w->buf.mem);
		free(w);
	}
	pthread_mutex_unlock(&pl->mu);
}

/*
 * Serve the request in p->w: a read or a write here (started, answered
 * when it completes), as the forgets and interrupts that need no answer;
 * anything else on a worker. False when out of memory.
 */
static bool dispatch(struct lfuse_poller *p)
{
	struct work *w = p->w;
	const struct fuse_in_header *h = w->buf.mem;
	bool idle;

	/* Nothing else going on (no I/O in flight here, no worker busy): serve
	 * it here, which spares a worker's wake-up (a single-threaded create
	 * loop ran at 3.6K/s handed off, 6K/s in place). */
	pthread_mutex_lock(&p->pool->mu);
	idle = !p->inflight && p->pool->idle == p->pool->workers && !p->pool->queued;
	pthread_mutex_unlock(&p->pool->mu);
	if (idle || w->buf.size < sizeof(*h) || h->opcode == FUSE_READ ||
	    h->opcode == FUSE_WRITE || h->opcode == FUSE_GETXATTR || h->opcode == FUSE_GETATTR ||
	    h->opcode == FUSE_FORGET || h->opcode == FUSE_BATCH_FORGET ||
	    h->opcode == FUSE_INTERRUPT) {
		fuse_session_process_buf(p->lf->se, &w->buf);
		return true;
	}
	if (!(p->w = work_get(p->pool))) {
		p->w = w;
		fuse_session_process_buf(p->lf->se, &w->buf); /* no memory: serve it here */
		return false;
	}
	if (!pool_queue(p->pool, w)) {
		fuse_session_process_buf(p->lf->se, &w->buf);
		spare_put(p->pool, w);
	}
	return true;
}

void *lfuse_poller_hold(void)
{
	struct work *w = self->w, *next = work_get(self->pool);

	if (!next)
		return NULL;
	self->w = next;
	return w;
}

void lfuse_poller_release(void *hold)
{
	spare_put(self->pool, hold);
}

/* Reply to the reads that have completed; how many there were. */
static unsigned reap(struct lfuse_poller *p)
{
	struct lodefs_aio *done[REAP_MAX];
	int n;

	if (!p->inflight)
		return 0;
	if ((n = lodefs_aio_reap(p->eq, done, REAP_MAX)) <= 0)
		return 0;
	for (int i = 0; i < n; i++)
		lfuse_aio_done(done[i]);
	p->inflight -= (unsigned)n;
	return (unsigned)n;
}

/*
 * Sleep until /dev/fuse has a request, the session ends, we are told to
 * stop, or timeout_ms (-1: no limit) passed.
 */
static void sleep_idle(struct lfuse_poller *p, int timeout_ms)
{
	struct pollfd fds[2] = {
		{.fd = fuse_session_fd(p->lf->se), .events = POLLIN},
		{.fd = p->stopfd, .events = POLLIN},
	};

	poll(fds, 2, timeout_ms); /* EINTR: a signal, looked at by the caller */
}

/* Serve until the session ends; a negative errno when reading failed. */
static int poller_run(struct lfuse_poller *p)
{
	struct fuse_session *se = p->lf->se;
	int64_t idle_since = now_us();
	int rc = 0;

	self = p;
	while (!fuse_session_exited(se)) {
		bool busy = false;
		int n = fuse_session_receive_buf(se, &p->w->buf);

		if (n > 0) {
			dispatch(p);
			busy = true;
		} else if (n == 0) {
			break; /* unmounted: libfuse ended the session */
		} else if (n != -EAGAIN && n != -EINTR) {
			rc = n;
			fuse_session_exit(se);
			break;
		}
		if (reap(p))
			busy = true;
		if (busy) {
			idle_since = now_us();
		} else if (!p->inflight && now_us() - idle_since > SPIN_US) {
			sleep_idle(p, -1);
			idle_since = now_us();
		} else if (p->inflight && now_us() - idle_since > STALL_US) {
			sleep_idle(p, 1); /* a stalled server: look every millisecond */
		} else {
			sched_yield();
		}
	}
	/* Reads still in flight are answered before the poller goes. */
	while (p->inflight) {
		if (!reap(p))
			sched_yield();
	}
	self = NULL;
	return rc;
}

static void *poller_main(void *arg)
{
	struct lfuse_poller *p = arg;

	pthread_setname_np(pthread_self(), "lfuse-poll");
	poller_run(p);
	return NULL;
}

int lfuse_poll_serve(struct lfuse *lf, unsigned npollers, unsigned max_workers,
		     unsigned max_idle)
{
	struct pool pl = {
		.se = lf->se,
		.mu = PTHREAD_MUTEX_INITIALIZER,
		.cv = PTHREAD_COND_INITIALIZER,
		.gone_cv = PTHREAD_COND_INITIALIZER,
		.max_workers = max_workers,
		.max_idle = max_idle,
	};
	struct lfuse_poller *ps = calloc(npollers, sizeof(*ps));
	int fd = fuse_session_fd(lf->se), stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), rc;
	unsigned started = 1;
	sigset_t block, old;
	uint64_t one = 1;

	if (!ps || stopfd < 0) {
		rc = ps ? -errno : -ENOMEM;
		goto out;
	}
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
		rc = -errno;
		goto out;
	}
	pl.tail = &pl.head;
	for (unsigned i = 0; i < npollers; i++) {
		ps[i].lf = lf;
		ps[i].pool = &pl;
		ps[i].stopfd = stopfd;
		if (!(ps[i].w = calloc(1, sizeof(*ps[i].w)))) {
			rc = -ENOMEM;
			goto out;
		}
		if ((rc = lode_eq_create(&ps[i].eq)) < 0)
			goto out;
	}
	/* Signals go to the main thread, the first poller. */
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	for (; started < npollers; started++)
		if (pthread_create(&ps[started].thread, NULL, poller_main, &ps[started]) != 0)
			break;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	rc = poller_run(&ps[0]);
	if (write(stopfd, &one, sizeof(one)) < 0) {
		/* an eventfd counter that is nearly full still wakes its pollers */
	}
	for (unsigned i = 1; i < started; i++)
		pthread_join(ps[i].thread, NULL);
	pool_stop(&pl);
out:
	for (unsigned i = 0; ps && i < npollers; i++) {
		if (ps[i].eq)
			lode_eq_destroy(ps[i].eq);
		if (ps[i].w)
			free(ps[i].w->buf.mem);
		free(ps[i].w);
	}
	free(ps);
	if (stopfd >= 0)
		close(stopfd);
	return rc;
}
