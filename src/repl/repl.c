/*
 * repl.c: one replica of a state-transfer replicated state machine, over
 * C-Raft's libuv back end (raft_uv for the disk, raft_uv_tcp for the
 * network). See repl.h for the API and README.md for the design.
 *
 * How the parts fit. Everything raft and libuv touch belongs to one thread
 * (repl_main), which opens raft, reports back to repl_start, and then runs
 * the loop until repl_stop. Other threads reach it through the proposal
 * queue under r->mu and the uv_async_t r->wake:
 *
 *   repl_propose   copies the bytes behind an entry header into a
 *                  struct repl_prop, queues it, wakes the loop and waits on
 *                  r->done for prop->done or its deadline.
 *   repl_wake_cb   (loop) takes the queue and hands each proposal to
 *                  raft_apply; raft calls repl_applied_cb once the entry
 *                  was applied here, or failed (leadership lost, shutdown).
 *   repl_finish    (loop) settles a proposal: records the result and wakes
 *                  its caller, or frees it if the caller gave up waiting.
 *                  A proposal belongs to the loop from the moment it is
 *                  queued until repl_finish, so the caller never frees one
 *                  raft may still call back about.
 *
 * Who leads is read from raft on the loop thread after every turn of the
 * loop (prepare and check handles, so changes made by timers and by
 * network reads are both seen at once) and copied under r->mu for
 * repl_leader and repl_is_leader; the host's role callback is called from
 * there when it changes.
 *
 * Every entry and every snapshot is framed (repl_encode): an 8-byte magic,
 * the state's length as 8 bytes little-endian, the state, zeros up to a
 * multiple of 8 bytes. raft_uv needs entry lengths that are multiples of 8
 * (C-Raft issue 304: 0.15 writes others but cannot read them back), a
 * zero-length state is then still a non-empty entry, and bytes that are
 * not ours are refused instead of being applied as a state.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <raft.h>
#include <raft/uv.h>
#include <uv.h>

#include "common/clock.h"
#include "lode/errno.h"
#include "repl/repl.h"

#define REPL_DEF_ELECTION_MS 1000
#define REPL_DEF_HEARTBEAT_MS 100
#define REPL_DEF_SNAPSHOT_EVERY 64

#define REPL_MAGIC_LEN 8
#define REPL_HDR_LEN 16 /* magic, then the state's length */
static const unsigned char repl_magic[REPL_MAGIC_LEN] = {'l', 'o', 'd', 'e', 'r', 'p', 'l', '1'};

/* One proposal, from repl_propose to repl_finish (see the top of the file). */
struct repl_prop {
	struct raft_apply req; /* req.data is the proposal */
	struct repl *r;
	struct repl_prop *next; /* in r->queue while queued */
	void *entry;            /* header + state, raft_malloc'ed; raft's once accepted */
	size_t entry_len;
	int rc;                 /* the result, once done */
	bool done;              /* under r->mu */
	bool abandoned;         /* under r->mu: the caller timed out and left */
};

struct repl {
	struct repl_config cfg; /* cfg.dir points at dir */
	char dir[PATH_MAX];
	struct repl_fsm fsm;
	int lock_fd;            /* flock'ed repl.lock in dir */

	/* The loop thread's: raft, libuv and their handles. */
	pthread_t thread;
	uv_loop_t loop;
	uv_async_t wake;
	uv_prepare_t prepare;
	uv_check_t check;
	struct raft_uv_transport transport;
	struct raft_io io;
	struct raft_fsm raft_fsm;
	struct raft raft;
	bool raft_inited;       /* raft_init succeeded: raft_close owns the teardown */
	bool closing;           /* raft_close was called */
	raft_term barrier_term; /* a readiness barrier was asked for in this term */
	raft_term ready_term;   /* ... and applied (repl_ready) */
	bool role_known;        /* role_leader, role_id were reported */
	bool role_leader;
	uint64_t role_id;

	/* Shared, under mu. */
	pthread_mutex_t mu;
	pthread_cond_t done;    /* a proposal finished, or start finished */
	struct repl_prop *queue, **queue_tail;
	bool stopping;
	bool is_leader;
	uint64_t leader_id;
	char leader_addr[REPL_ADDR_MAX];
	bool started;           /* repl_main's open finished, with start_rc */
	int start_rc;
	char start_msg[256];
};

static void repl_msg(char *msg, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void repl_msg(char *msg, size_t cap, const char *fmt, ...)
{
	va_list ap;

	if (msg == NULL || cap == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, cap, fmt, ap);
	va_end(ap);
}

/* Lode's code for a raft error code. */
static int repl_errno(int rv)
{
	switch (rv) {
	case 0:
		return 0;
	case RAFT_NOMEM:
		return -ENOMEM;
	case RAFT_NOTLEADER:
	case RAFT_LEADERSHIPLOST:
		return -LODE_ENOTLEADER;
	case RAFT_SHUTDOWN:
	case RAFT_CANCELED:
		return -ECANCELED;
	case RAFT_CORRUPT:
	case RAFT_MALFORMED:
		return -LODE_ECORRUPT;
	case RAFT_NOSPACE:
		return -ENOSPC;
	case RAFT_TOOBIG:
		return -E2BIG;
	case RAFT_NAMETOOLONG:
		return -ENAMETOOLONG;
	case RAFT_UNAUTHORIZED:
		return -EACCES;
	case RAFT_NOTFOUND:
		return -ENOENT;
	case RAFT_BUSY:
		return -EBUSY;
	case RAFT_INVALID:
	case RAFT_BADID:
	case RAFT_DUPLICATEID:
	case RAFT_DUPLICATEADDRESS:
	case RAFT_BADROLE:
		return -EINVAL;
	default:
		return -EIO;
	}
}

/* ---- configuration ---------------------------------------------------------------- */

/*
 * "A.B.C.D:PORT": an IPv4 address (raft_uv_tcp speaks IPv4 only, and a
 * replica's address is part of its identity, so no names that may resolve
 * differently later) and a port 1..65535; into *sa if not NULL.
 */
static int repl_addr_parse(const char *addr, struct sockaddr_in *sa)
{
	char host[INET_ADDRSTRLEN];
	const char *colon = strchr(addr, ':');
	struct in_addr in;
	size_t hlen;
	char *end;
	long port;

	if (colon == NULL)
		return -EINVAL;
	hlen = (size_t)(colon - addr);
	if (hlen == 0 || hlen >= sizeof(host) || colon[1] < '0' || colon[1] > '9')
		return -EINVAL;
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (errno != 0 || *end != '\0' || port < 1 || port > 65535)
		return -EINVAL;
	memcpy(host, addr, hlen);
	host[hlen] = '\0';
	if (inet_pton(AF_INET, host, &in) != 1)
		return -EINVAL;
	if (sa != NULL) {
		memset(sa, 0, sizeof(*sa));
		sa->sin_family = AF_INET;
		sa->sin_addr = in;
		sa->sin_port = htons((uint16_t)port);
	}
	return 0;
}

/* The index in cfg->peers of id, or -1. */
static int repl_peer_find(const struct repl_config *cfg, uint64_t id)
{
	for (unsigned i = 0; i < cfg->npeers; i++)
		if (cfg->peers[i].id == id)
			return (int)i;
	return -1;
}

static int repl_config_check(const struct repl_config *cfg, const struct repl_fsm *fsm,
			     char *msg, size_t cap)
{
	unsigned election = cfg->election_ms ? cfg->election_ms : REPL_DEF_ELECTION_MS;
	unsigned heartbeat = cfg->heartbeat_ms ? cfg->heartbeat_ms : REPL_DEF_HEARTBEAT_MS;

	if (fsm == NULL || fsm->apply == NULL || fsm->snapshot == NULL || fsm->restore == NULL) {
		repl_msg(msg, cap, "the fsm needs apply, snapshot and restore");
		return -EINVAL;
	}
	if (cfg->dir == NULL || cfg->dir[0] == '\0') {
		repl_msg(msg, cap, "no data directory");
		return -EINVAL;
	}
	if (strlen(cfg->dir) >= PATH_MAX - 32) {
		repl_msg(msg, cap, "data directory path too long");
		return -EINVAL;
	}
	if (cfg->npeers != 1 && cfg->npeers != 3 && cfg->npeers != 5) {
		repl_msg(msg, cap, "%u peers: a group has 1, 3 or 5 voters", cfg->npeers);
		return -EINVAL;
	}
	for (unsigned i = 0; i < cfg->npeers; i++) {
		const struct repl_peer *p = &cfg->peers[i];

		if (p->id == 0) {
			repl_msg(msg, cap, "peer %u has id 0", i);
			return -EINVAL;
		}
		if (memchr(p->addr, '\0', sizeof(p->addr)) == NULL ||
		    repl_addr_parse(p->addr, NULL) != 0) {
			repl_msg(msg, cap, "peer %" PRIu64 ": address \"%.*s\" is not A.B.C.D:PORT", p->id,
				 (int)strnlen(p->addr, sizeof(p->addr)), p->addr);
			return -EINVAL;
		}
		for (unsigned j = 0; j < i; j++) {
			if (cfg->peers[j].id == p->id) {
				repl_msg(msg, cap, "peer id %" PRIu64 " appears twice", p->id);
				return -EINVAL;
			}
			if (strcmp(cfg->peers[j].addr, p->addr) == 0) {
				repl_msg(msg, cap, "address %s appears twice", p->addr);
				return -EINVAL;
			}
		}
	}
	if (cfg->id == 0 || repl_peer_find(cfg, cfg->id) < 0) {
		repl_msg(msg, cap, "this replica's id %" PRIu64 " is not among the peers", cfg->id);
		return -EINVAL;
	}
	if (heartbeat >= election) {
		repl_msg(msg, cap, "heartbeat %u ms must be below the election timeout %u ms",
			 heartbeat, election);
		return -EINVAL;
	}
	return 0;
}

/* mkdir -p dir, mode 0700 for what it creates; an existing one must be a directory. */
static int repl_mkdirs(const char *dir, char *msg, size_t cap)
{
	char path[PATH_MAX];
	struct stat st;

	snprintf(path, sizeof(path), "%s", dir);
	for (char *p = path + 1;; p++) {
		bool last = *p == '\0';

		if (*p != '/' && !last)
			continue;
		*p = '\0';
		if (mkdir(path, 0700) != 0 && errno != EEXIST) {
			int rc = -errno;

			repl_msg(msg, cap, "%s: %s", path, strerror(errno));
			return rc;
		}
		if (last)
			break;
		*p = '/';
	}
	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		repl_msg(msg, cap, "%s: not a directory", dir);
		return -ENOTDIR;
	}
	if (access(dir, W_OK | X_OK) != 0) {
		int rc = -errno;

		repl_msg(msg, cap, "%s: %s", dir, strerror(errno));
		return rc;
	}
	return 0;
}

/* flock dir/repl.lock, so that two replicas never share one raft directory. */
static int repl_lock(struct repl *r, char *msg, size_t cap)
{
	char path[PATH_MAX + 16];

	snprintf(path, sizeof(path), "%s/repl.lock", r->dir);
	r->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (r->lock_fd < 0) {
		int rc = -errno;

		repl_msg(msg, cap, "%s: %s", path, strerror(errno));
		return rc;
	}
	if (flock(r->lock_fd, LOCK_EX | LOCK_NB) != 0) {
		int rc = errno == EWOULDBLOCK ? -EBUSY : -errno;

		repl_msg(msg, cap, "%s: another replica has this directory open", r->dir);
		close(r->lock_fd);
		r->lock_fd = -1;
		return rc;
	}
	return 0;
}

/* ---- the state machine, as raft sees it (loop thread) ------------------------------- */

/* Frame a state (see the top of the file) in a raft_malloc'ed buffer. */
static int repl_encode(const void *state, size_t len, struct raft_buffer *out)
{
	size_t n = (REPL_HDR_LEN + len + 7) & ~(size_t)7;
	unsigned char *b = raft_malloc(n);
	uint64_t l = len;

	if (b == NULL)
		return RAFT_NOMEM;
	memcpy(b, repl_magic, REPL_MAGIC_LEN);
	for (int i = 0; i < 8; i++)
		b[REPL_MAGIC_LEN + i] = (unsigned char)(l >> (8 * i));
	if (len > 0)
		memcpy(b + REPL_HDR_LEN, state, len);
	memset(b + REPL_HDR_LEN + len, 0, n - REPL_HDR_LEN - len);
	out->base = b;
	out->len = n;
	return 0;
}

/* The state framed in buf, or RAFT_MALFORMED. */
static int repl_decode(const struct raft_buffer *buf, const void **state, size_t *len)
{
	const unsigned char *b = buf->base;
	uint64_t l = 0;

	if (buf->len < REPL_HDR_LEN || memcmp(b, repl_magic, REPL_MAGIC_LEN) != 0)
		return RAFT_MALFORMED;
	for (int i = 0; i < 8; i++)
		l |= (uint64_t)b[REPL_MAGIC_LEN + i] << (8 * i);
	if (l > buf->len - REPL_HDR_LEN)
		return RAFT_MALFORMED;
	*state = b + REPL_HDR_LEN;
	*len = (size_t)l;
	return 0;
}

static int repl_fsm_apply(struct raft_fsm *rf, const struct raft_buffer *buf, void **result)
{
	struct repl *r = rf->data;
	const void *state;
	size_t len;

	*result = NULL;
	if (repl_decode(buf, &state, &len) != 0)
		return RAFT_MALFORMED;
	return r->fsm.apply(r->fsm.arg, state, len) == 0 ? 0 : RAFT_NOMEM;
}

/* raft frees what this allocates (fsm version 1: no snapshot_finalize). */
static int repl_fsm_snapshot(struct raft_fsm *rf, struct raft_buffer *bufs[], unsigned *n)
{
	struct repl *r = rf->data;
	void *state = NULL;
	size_t len = 0;
	struct raft_buffer *b;
	int rv;

	if (r->fsm.snapshot(r->fsm.arg, &state, &len) != 0)
		return RAFT_NOMEM;
	b = raft_malloc(sizeof(*b));
	rv = b != NULL ? repl_encode(state, len, b) : RAFT_NOMEM;
	free(state);
	if (rv != 0) {
		raft_free(b);
		return rv;
	}
	*bufs = b;
	*n = 1;
	return 0;
}

/* On success the buffer is ours to free; on failure raft frees it. */
static int repl_fsm_restore(struct raft_fsm *rf, struct raft_buffer *buf)
{
	struct repl *r = rf->data;
	const void *state;
	size_t len;

	if (repl_decode(buf, &state, &len) != 0)
		return RAFT_MALFORMED;
	if (r->fsm.restore(r->fsm.arg, state, len) != 0)
		return RAFT_NOMEM;
	raft_free(buf->base);
	return 0;
}

/* ---- leadership (loop thread) ------------------------------------------------------ */

/*
 * A new leader knows every committed entry but may not have applied them
 * all yet (entries of earlier terms commit only with one of its own). A
 * state computed from such a replica would drop committed changes, so a
 * replica counts as leader only once a barrier of its own term has been
 * applied: everything before it is then applied here too.
 */
struct repl_barrier {
	struct raft_barrier req; /* req.data is this */
	struct repl *r;
	raft_term term;
};

static void repl_role_sync(struct repl *r);

static void repl_barrier_cb(struct raft_barrier *req, int status)
{
	struct repl_barrier *b = req->data;
	struct repl *r = b->r;

	if (status == 0 && r->raft.current_term == b->term)
		r->ready_term = b->term;
	else if (r->barrier_term == b->term)
		r->barrier_term = 0; /* failed: the next turn of the loop asks again */
	free(b);
	repl_role_sync(r);
}

static void repl_barrier(struct repl *r)
{
	struct repl_barrier *b = calloc(1, sizeof(*b));

	if (b == NULL)
		return; /* tried again on the next turn */
	b->r = r;
	b->term = r->raft.current_term;
	b->req.data = b;
	if (raft_barrier(&r->raft, &b->req, repl_barrier_cb) != 0) {
		free(b);
		return;
	}
	r->barrier_term = b->term;
}

/* Whether this replica leads and has applied everything before its term. */
static bool repl_ready(struct repl *r)
{
	return raft_state(&r->raft) == RAFT_LEADER && r->ready_term == r->raft.current_term;
}

/* Copy who leads into the shared fields, and tell the host if it changed. */
static void repl_role_sync(struct repl *r)
{
	raft_id id = 0;
	const char *addr = NULL;
	bool leader;

	if (r->closing)
		return;
	if (raft_state(&r->raft) == RAFT_LEADER && r->barrier_term != r->raft.current_term)
		repl_barrier(r);
	leader = repl_ready(r);
	raft_leader(&r->raft, &id, &addr);
	if (raft_state(&r->raft) == RAFT_LEADER && !leader)
		id = 0; /* not yet: no one to send clients to */
	if (r->role_known && leader == r->role_leader && id == r->role_id)
		return;
	pthread_mutex_lock(&r->mu);
	r->is_leader = leader;
	r->leader_id = id;
	snprintf(r->leader_addr, sizeof(r->leader_addr), "%s", id != 0 && addr ? addr : "");
	pthread_mutex_unlock(&r->mu);
	r->role_known = true;
	r->role_leader = leader;
	r->role_id = id;
	if (r->fsm.role != NULL)
		r->fsm.role(r->fsm.arg, leader, id);
}

static void repl_prepare_cb(uv_prepare_t *h)
{
	repl_role_sync(h->data);
}

static void repl_check_cb(uv_check_t *h)
{
	repl_role_sync(h->data);
}

/* ---- proposals ----------------------------------------------------------------------- */

static void repl_prop_free(struct repl_prop *p)
{
	raft_free(p->entry);
	free(p);
}

/* Settle p with rc (loop thread; see the top of the file). */
static void repl_finish(struct repl_prop *p, int rc)
{
	struct repl *r = p->r;
	bool abandoned;

	pthread_mutex_lock(&r->mu);
	abandoned = p->abandoned;
	if (!abandoned) {
		p->rc = rc;
		p->done = true;
		pthread_cond_broadcast(&r->done);
	}
	pthread_mutex_unlock(&r->mu);
	if (abandoned)
		repl_prop_free(p);
}

static void repl_applied_cb(struct raft_apply *req, int status, void *result)
{
	struct repl_prop *p = req->data;

	if (p->r->closing) { /* raft_close fails what is pending */
		repl_finish(p, status == 0 ? 0 : -ECANCELED);
		return;
	}
	/* A lost leadership: let repl_leader tell the new state before the caller asks. */
	repl_role_sync(p->r);
	repl_finish(p, repl_errno(status));
}

static void repl_submit(struct repl *r, struct repl_prop *p)
{
	struct raft_buffer buf = {.base = p->entry, .len = p->entry_len};
	int rv;

	if (!repl_ready(r)) {
		repl_finish(p, -LODE_ENOTLEADER);
		return;
	}
	p->req.data = p;
	rv = raft_apply(&r->raft, &p->req, &buf, 1, repl_applied_cb);
	if (rv != 0) {
		repl_role_sync(r);
		repl_finish(p, repl_errno(rv));
		return;
	}
	p->entry = NULL; /* raft's now */
}

static void repl_raft_closed_cb(struct raft *raft)
{
	struct repl *r = raft->data;

	raft_uv_close(&r->io);
	raft_uv_tcp_close(&r->transport);
	uv_close((uv_handle_t *)&r->wake, NULL);
	uv_close((uv_handle_t *)&r->prepare, NULL);
	uv_close((uv_handle_t *)&r->check, NULL);
}

/* Close raft (its pending requests fail with RAFT_SHUTDOWN) and our handles. */
static void repl_close(struct repl *r)
{
	if (r->closing)
		return;
	r->closing = true;
	raft_close(&r->raft, repl_raft_closed_cb);
}

static void repl_wake_cb(uv_async_t *h)
{
	struct repl *r = h->data;
	struct repl_prop *p, *next;
	bool stopping;

	pthread_mutex_lock(&r->mu);
	p = r->queue;
	r->queue = NULL;
	r->queue_tail = &r->queue;
	stopping = r->stopping;
	pthread_mutex_unlock(&r->mu);

	for (; p != NULL; p = next) {
		bool abandoned;

		next = p->next;
		if (stopping) {
			repl_finish(p, -ECANCELED);
			continue;
		}
		/*
		 * A caller that gave up before its state reached raft: drop the
		 * state rather than let it land after states proposed since.
		 */
		pthread_mutex_lock(&r->mu);
		abandoned = p->abandoned;
		pthread_mutex_unlock(&r->mu);
		if (abandoned)
			repl_prop_free(p);
		else
			repl_submit(r, p);
	}
	if (stopping)
		repl_close(r);
}

int repl_propose(repl_t *r, const void *buf, size_t len, unsigned timeout_ms)
{
	struct repl_prop *p;
	struct raft_buffer entry;
	struct timespec deadline;
	int rc = 0;

	if (timeout_ms == 0)
		return -EINVAL;
	if (len > REPL_STATE_MAX)
		return -E2BIG;
	if (pthread_equal(pthread_self(), r->thread))
		return -EDEADLK;
	p = calloc(1, sizeof(*p));
	if (p == NULL)
		return -ENOMEM;
	p->r = r;
	if (repl_encode(buf, len, &entry) != 0) {
		free(p);
		return -ENOMEM;
	}
	p->entry = entry.base;
	p->entry_len = entry.len;

	clock_mono_after(&deadline, timeout_ms);

	pthread_mutex_lock(&r->mu);
	if (r->stopping) {
		pthread_mutex_unlock(&r->mu);
		repl_prop_free(p);
		return -ECANCELED;
	}
	*r->queue_tail = p;
	r->queue_tail = &p->next;
	uv_async_send(&r->wake);
	while (!p->done && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&r->done, &r->mu, &deadline);
	if (!p->done) {
		/* The loop owns p and frees it when raft is done with it. */
		p->abandoned = true;
		pthread_mutex_unlock(&r->mu);
		return -ETIMEDOUT;
	}
	pthread_mutex_unlock(&r->mu);
	rc = p->rc;
	repl_prop_free(p);
	return rc;
}

int repl_leader(repl_t *r, uint64_t *id, char *addr, size_t cap)
{
	int rc = 0;

	pthread_mutex_lock(&r->mu);
	if (r->leader_id == 0) {
		rc = -ENOENT;
	} else {
		if (id != NULL)
			*id = r->leader_id;
		if (addr != NULL && (size_t)snprintf(addr, cap, "%s", r->leader_addr) >= cap)
			rc = -ERANGE;
	}
	pthread_mutex_unlock(&r->mu);
	return rc;
}

bool repl_is_leader(repl_t *r)
{
	bool leader;

	pthread_mutex_lock(&r->mu);
	leader = r->is_leader;
	pthread_mutex_unlock(&r->mu);
	return leader;
}

/* ---- start and stop ------------------------------------------------------------------ */

/*
 * After a restart raft runs the configuration it stored, whatever cfg says:
 * refuse to run if the two differ, since a replica started with the wrong
 * directory or the wrong id would otherwise act on someone else's log.
 */
static int repl_config_match(struct repl *r, char *msg, size_t cap)
{
	const struct raft_configuration *c = &r->raft.configuration;
	bool same = c->n == r->cfg.npeers;

	for (unsigned i = 0; same && i < c->n; i++) {
		int k = repl_peer_find(&r->cfg, c->servers[i].id);

		same = k >= 0 && c->servers[i].role == RAFT_VOTER &&
		       strcmp(c->servers[i].address, r->cfg.peers[k].addr) == 0;
	}
	if (!same) {
		repl_msg(msg, cap, "%s holds another group's configuration (%u servers) than the "
			 "one given", r->dir, c->n);
		return -EINVAL;
	}
	return 0;
}

/* Why raft_start failed to listen: -EADDRINUSE if the address is taken. */
static int repl_bind_probe(const char *addr)
{
	struct sockaddr_in sa;
	int fd, rc = 0;

	if (repl_addr_parse(addr, &sa) != 0)
		return -EINVAL;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
		rc = -errno;
	close(fd);
	return rc;
}

/*
 * The loop thread's half of repl_start: raft's I/O, raft itself, bootstrap on
 * a pristine directory, start. On failure everything opened is closed again
 * and the loop run until it is (only raft_close may free what raft_init took).
 */
static int repl_open(struct repl *r, char *msg, size_t cap)
{
	const struct repl_peer *self = &r->cfg.peers[repl_peer_find(&r->cfg, r->cfg.id)];
	struct raft_configuration conf;
	unsigned every;
	int rv, rc;

	rc = uv_loop_init(&r->loop);
	if (rc != 0) {
		repl_msg(msg, cap, "uv_loop_init: %s", uv_strerror(rc));
		return rc;
	}
	r->wake.data = r->prepare.data = r->check.data = r;
	uv_async_init(&r->loop, &r->wake, repl_wake_cb);
	uv_prepare_init(&r->loop, &r->prepare);
	uv_check_init(&r->loop, &r->check);

	rv = raft_uv_tcp_init(&r->transport, &r->loop);
	if (rv != 0) {
		repl_msg(msg, cap, "raft_uv_tcp_init: %s", raft_strerror(rv));
		goto fail_handles;
	}
	rv = raft_uv_init(&r->io, &r->loop, r->dir, &r->transport);
	if (rv != 0) {
		repl_msg(msg, cap, "%s: %s", r->dir, r->io.errmsg);
		raft_uv_tcp_close(&r->transport);
		goto fail_handles;
	}
	raft_uv_set_connect_retry_delay(&r->io, r->cfg.election_ms / 2);
	r->raft_fsm.version = 1;
	r->raft_fsm.data = r;
	r->raft_fsm.apply = repl_fsm_apply;
	r->raft_fsm.snapshot = repl_fsm_snapshot;
	r->raft_fsm.restore = repl_fsm_restore;
	rv = raft_init(&r->raft, &r->io, &r->raft_fsm, self->id, self->addr);
	if (rv != 0) {
		repl_msg(msg, cap, "raft_init: %s", raft_errmsg(&r->raft));
		raft_uv_close(&r->io);
		raft_uv_tcp_close(&r->transport);
		goto fail_handles;
	}
	r->raft_inited = true;
	r->raft.data = r;
	raft_set_election_timeout(&r->raft, r->cfg.election_ms);
	raft_set_heartbeat_timeout(&r->raft, r->cfg.heartbeat_ms);
	every = r->cfg.snapshot_every;
	raft_set_snapshot_threshold(&r->raft, every);
	raft_set_snapshot_trailing(&r->raft, every);
	/*
	 * raft resends a snapshot only after this long without an answer, and
	 * a follower busy writing a snapshot of its own drops the one sent
	 * (seen under load: a restarted replica waited out the 30 s default).
	 * States are small, so a resend is cheap.
	 */
	raft_set_install_snapshot_timeout(&r->raft, 2 * r->cfg.election_ms);
	/* A replica back from a partition must not depose a leader that is fine. */
	raft_set_pre_vote(&r->raft, true);

	raft_configuration_init(&conf);
	for (unsigned i = 0; i < r->cfg.npeers && rv == 0; i++)
		rv = raft_configuration_add(&conf, r->cfg.peers[i].id, r->cfg.peers[i].addr,
					    RAFT_VOTER);
	if (rv == 0)
		rv = raft_bootstrap(&r->raft, &conf);
	raft_configuration_close(&conf);
	if (rv != 0 && rv != RAFT_CANTBOOTSTRAP) { /* CANTBOOTSTRAP: not the first start */
		repl_msg(msg, cap, "%s: bootstrap: %s", r->dir, raft_errmsg(&r->raft));
		rc = repl_errno(rv);
		goto fail_raft;
	}
	rv = raft_start(&r->raft);
	if (rv != 0) {
		rc = repl_errno(rv);
		if (repl_bind_probe(self->addr) == -EADDRINUSE)
			rc = -EADDRINUSE;
		repl_msg(msg, cap, "%s (%s): start: %s", self->addr, r->dir, raft_errmsg(&r->raft));
		goto fail_raft;
	}
	rc = repl_config_match(r, msg, cap);
	if (rc != 0)
		goto fail_raft;
	uv_prepare_start(&r->prepare, repl_prepare_cb);
	uv_check_start(&r->check, repl_check_cb);
	repl_role_sync(r);
	return 0;

fail_raft:
	repl_close(r);
	uv_run(&r->loop, UV_RUN_DEFAULT);
	uv_loop_close(&r->loop);
	return rc;
fail_handles:
	rc = repl_errno(rv);
	uv_close((uv_handle_t *)&r->wake, NULL);
	uv_close((uv_handle_t *)&r->prepare, NULL);
	uv_close((uv_handle_t *)&r->check, NULL);
	uv_run(&r->loop, UV_RUN_DEFAULT);
	uv_loop_close(&r->loop);
	return rc;
}

static void *repl_main(void *arg)
{
	struct repl *r = arg;
	char msg[sizeof(r->start_msg)] = "";
	sigset_t pipe;
	int rc;

	/*
	 * A write to a peer that died raises SIGPIPE on this thread, which
	 * would end a host that did not ignore it. Blocked here, the write
	 * fails with EPIPE instead and raft reconnects; the host's own
	 * disposition is left alone.
	 */
	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe, NULL);
	rc = repl_open(r, msg, sizeof(msg));

	pthread_mutex_lock(&r->mu);
	r->started = true;
	r->start_rc = rc;
	memcpy(r->start_msg, msg, sizeof(msg));
	pthread_cond_broadcast(&r->done);
	pthread_mutex_unlock(&r->mu);
	if (rc != 0)
		return NULL;

	uv_run(&r->loop, UV_RUN_DEFAULT);
	rc = uv_loop_close(&r->loop);
	if (rc != 0)
		fprintf(stderr, "repl: %s: the loop still had handles at stop: %s\n", r->dir,
			uv_strerror(rc));
	return NULL;
}

static void repl_free(struct repl *r)
{
	if (r->lock_fd >= 0)
		close(r->lock_fd);
	pthread_cond_destroy(&r->done);
	pthread_mutex_destroy(&r->mu);
	free(r);
}

int repl_start(const struct repl_config *cfg, const struct repl_fsm *fsm, repl_t **out,
	       char *msg, size_t cap)
{
	struct repl *r;
	int rc;

	repl_msg(msg, cap, "%s", "");
	rc = repl_config_check(cfg, fsm, msg, cap);
	if (rc != 0)
		return rc;
	rc = repl_mkdirs(cfg->dir, msg, cap);
	if (rc != 0)
		return rc;
	r = calloc(1, sizeof(*r));
	if (r == NULL)
		return -ENOMEM;
	r->cfg = *cfg;
	snprintf(r->dir, sizeof(r->dir), "%s", cfg->dir);
	r->cfg.dir = r->dir;
	if (r->cfg.election_ms == 0)
		r->cfg.election_ms = REPL_DEF_ELECTION_MS;
	if (r->cfg.heartbeat_ms == 0)
		r->cfg.heartbeat_ms = REPL_DEF_HEARTBEAT_MS;
	if (r->cfg.snapshot_every == 0)
		r->cfg.snapshot_every = REPL_DEF_SNAPSHOT_EVERY;
	r->fsm = *fsm;
	r->lock_fd = -1;
	r->queue_tail = &r->queue;
	pthread_mutex_init(&r->mu, NULL);
	clock_cond_init(&r->done);

	rc = repl_lock(r, msg, cap);
	if (rc != 0)
		goto fail;
	rc = -pthread_create(&r->thread, NULL, repl_main, r);
	if (rc != 0) {
		repl_msg(msg, cap, "pthread_create: %s", strerror(-rc));
		goto fail;
	}
	pthread_mutex_lock(&r->mu);
	while (!r->started)
		pthread_cond_wait(&r->done, &r->mu);
	rc = r->start_rc;
	pthread_mutex_unlock(&r->mu);
	if (rc != 0) {
		repl_msg(msg, cap, "%s", r->start_msg);
		pthread_join(r->thread, NULL);
		goto fail;
	}
	*out = r;
	return 0;
fail:
	repl_free(r);
	return rc;
}

void repl_stop(repl_t *r)
{
	if (r == NULL)
		return;
	pthread_mutex_lock(&r->mu);
	r->stopping = true;
	pthread_mutex_unlock(&r->mu);
	uv_async_send(&r->wake);
	pthread_join(r->thread, NULL);
	repl_free(r);
}
