/*
 * liblode's internals shared by client.c (connections, requests, events) and
 * objects.c (containers, objects, key-value and byte-array calls).
 */
#ifndef LODE_CLIENT_CLIENT_H
#define LODE_CLIENT_CLIENT_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <stdbool.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>
#include <ucp/api/ucp.h>

#include "auth/auth.h"
#include "layout/layout.h"
#include "lode/lode.h"
#include "lode/mgmt/v1/mgmt.pb-c.h"
#include "net/net.h"

/* Targets of one connection, all engines together (each engine's own limit
 * on the wire is NET_TARGETS_MAX), and engines of the pool map it serves. */
#define CONN_TARGETS_MAX 256
/* Management addresses a connection tries: login's, five replicas, two more
 * where the service moved to. */
#define CONN_MGMT_ALTS 8
#define CONN_ENGINES_MAX 64

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
	uint8_t resent;           /* times sent again after -LODE_ESTALEMAP */
	/* Placement (place.c). A placed request goes to a member of the group
	 * that holds (a.oid, dkey_hash) in the current map; it is placed again
	 * when an engine says the map is stale, and a read moves on to the next
	 * member when its engine is lost. */
	bool placed;
	bool write;               /* an update or punch: every live member gets it */
	bool parked;              /* waiting for a newer map (c->parked) */
	bool spread;              /* a write's shadows were made: placed again, it keeps its member */
	bool final;               /* its result stands: no retry, no parking */
	uint8_t cls;              /* the class id placement uses (never 0) */
	uint8_t member;           /* the member of the group this request went to */
	bool spare;               /* a shadow to the rebuild's replacement of member (place.c) */
	bool rebuild;             /* sent with NET_F_REBUILD: its epoch is the one in a */
	bool pinned;              /* goes to member and no other: no shadows, no moving on (EC cells) */
	bool wrap;                /* a read that began past member 0 moves on to it after the last */
	uint64_t dkey_hash;
	/* A write to a replicated group: the request to the first live member
	 * leads, with one shadow per other live member; it completes when they
	 * all have. A member lost (-EHOSTDOWN) is a degraded write, not an
	 * error, while one member holds the data. */
	struct creq *leader;      /* a shadow's leader */
	int nshadow;              /* a leader's shadows not yet done */
	int shadow_rc;            /* the first error of a member that is not lost */
	int lost_rc;              /* -EHOSTDOWN or -LODE_EFENCED: a member lost */
	uint8_t members_ok;       /* members that acknowledged (leader included) */
	bool lost_up;             /* a write left out a member the map has UP (unreachable here) */
	bool fence_behind;        /* a member refused as fenced: its engine may be catching up */
	uint8_t fence_waits;      /* parked for that: it catches up within a heartbeat */
	bool replied;
	bool done;
	int rc;
	int64_t deadline_us;
	struct creq *prev, *next; /* the connection's in-flight list */
	struct creq *rndv_next;
	lode_event_t *ev;         /* completion: an event, */
	struct creq *parent;      /* or a parent, */
	bool waited;              /* or a blocked caller, */
	bool detached;            /* or nobody: freed when done (a lease given back) */
	uint32_t hflags;          /* header flags of its own: NET_F_TORN, NET_F_LEASE_READ */
	int nchild;               /* a parent's children not yet done */
	creq_fn on_done;          /* runs at completion, before the result is passed on */
	void *ctx;                /* on_done's */
	/* Not cleared between uses (creq_new clears what comes before): */
	uint8_t anchor_key[2 + LODE_KEY_MAX];
	/* A placed request's dkey and akey, copied: it may be sent again (a new
	 * map, another member) after its caller's key memory is gone. */
	uint8_t keys[2 * LODE_KEY_MAX];
	uint8_t hdr[NET_HDR_SIZE + AUTH_CAP_SIZE + NET_ARGS_MAX];
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
		unsigned eng;       /* the engine (its slot in engines[]) */
		uint16_t local;     /* the target's index on that engine (the wire's) */
	} w[CONN_TARGETS_MAX];
	int epfd;               /* every worker's event fd */
	unsigned ntargets;      /* global targets: engine after engine */
	ucp_ep_h eps[CONN_TARGETS_MAX];
	uint32_t session[CONN_TARGETS_MAX]; /* each target's name for us (RMA needs one) */
	/*
	 * The engines, in the pool map's slot order (one, of id 0, when the
	 * service sent no map that names the engine we bootstrapped). An engine
	 * that is not connected (DOWN or OUT at connect, or unreachable then)
	 * keeps its slot with no targets; one that failed later is lost.
	 * Engines that join after connect get the next slots; the renewer
	 * connects any the map has UP, DRAIN or NEW and this connection
	 * cannot reach (conn_engines_catch_up), so slots need not be the
	 * map's order any more: look engines up by id.
	 */
	struct conn_engine {
		uint32_t id;
		char addr[256];
		unsigned first, ntgts;  /* its targets: w[first .. first + ntgts) */
		bool connected;
		bool lost;              /* endpoint error or timeout: unreachable */
		pid_t pid;              /* loded's pid when we can watch it (shm), else 0 */
		int64_t alive_check_us;
		bool joining;           /* being connected after connect: not placed on yet */
		int64_t retry_us;       /* a failed late connect is tried again after this */
		int64_t lost_us;        /* when it was lost */
		unsigned tries;         /* late connects failed in a row (the wait doubles) */
		bool tried;             /* conn_engines_fresh has tried it this time */
		bool join_failed;       /* lost again while joining (catch_up_one) */
		int err;                /* its last connect's error (catch_up_one), 0 once one worked */
	} eng[CONN_ENGINES_MAX];
	unsigned nengines;
	struct layout_map *map; /* the placement map (lock held to read or swap) */
	/* While map has DOWN engines (a rebuild runs), the map the rebuild
	 * ends in: map with them OUT. Writes go to the replacements it names
	 * too (place.c). NULL otherwise. */
	struct layout_map *map_next;
	bool moving;            /* the service's map has DRAIN engines or targets (UP in map)
				 * or NEW engines: live members move */
	bool map_local;         /* map is conn_map_local's: the service's is not installed */
	struct creq *parked;    /* refused as stale: placed again with the next map */
	uint32_t transport;   /* NET_TP_* in use */
	bool loopback;        /* the engines are on this host (UCX context made so) */
	bool ready;           /* lode_connect finished: the renewer may connect engines */
	int64_t map_at_us;    /* when a map from the service was last installed (monotonic) */
	bool rma;             /* large values move by RMA (else by AM rendezvous) */
	uint32_t inline_max;
	unsigned timeout_ms;
	char server[256];
	int failed;           /* 0, or the error every new request gets */
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
	/* The control plane (session.c). Calls go to mgmt (read and set
	 * atomically). When its replica is gone, a call that may be repeated
	 * goes to the others in mgmt_alt (the one login used, the replicas
	 * Connect named, then where the service is now: see mgmt_where), and
	 * the first that answers becomes mgmt. Channels stay open until
	 * logout: other threads may be calling on any of them. */
	struct rpc_channel *mgmt;
	struct conn_mgmt_alt {
		char addr[256];
		struct rpc_channel *ch; /* NULL until called */
	} mgmt_alt[CONN_MGMT_ALTS];
	unsigned nmgmt_alt;
	pthread_mutex_t mgmt_lock;  /* mgmt_alt, mgmt_gen; one failover at a time */
	unsigned mgmt_gen;          /* failovers done, under mgmt_lock */
	bool mgmt_welcome;          /* login's address came from loded's welcome */
	char mgmt_file[PATH_MAX];   /* ... or from this credentials file's mgmt line */
	bool cred_given;            /* login's secret came in lode_conn_opts (not kept) */
	bool login_agent;           /* ... or from the node's lode-agent */
	char user[128], tenant[128]; /* who logged in: a login again must be them */
	char pool[128];
	struct lode_uuid pool_uuid;
	uint8_t tok[AUTH_CAP_SIZE]; /* the pool-wide capability */
	int64_t tok_expires_ms;
	struct conn_cap *caps;      /* opened containers' capabilities */
	unsigned ncaps, caps_cap;
	_Atomic int64_t renew_at_ms;
	pthread_mutex_t renew_lock;   /* one renewal at a time */
	pthread_t renewer;            /* renews while the connection is idle */
	bool renewer_running, renewer_stop;
	pthread_mutex_t renewer_lock;
	pthread_cond_t renewer_cond;
	pthread_mutex_t catch_lock; /* one conn_engines_catch_up at a time */
	char mgmt_err[320];         /* the last failed RPC's message */
	/* The pool map's version requests carry (from Connect, then PoolMapGet
	 * when an engine says it is stale); map_want is the newest an engine
	 * named, which the renewer thread fetches. */
	_Atomic uint32_t map_ver;
	_Atomic uint32_t map_want;
	_Atomic int held;       /* conn_req_hold's requests not yet completed */
};

/* An opened container: requests on it carry its capability (session.c). */
struct lode_cont {
	lode_conn_t *c;
	struct lode_uuid uuid;
	/* Inline encryption (crypt.c): the container's data key, unwrapped
	 * with the tenant key at open and zeroed at close, and cipher
	 * contexts keyed with it, kept for reuse. */
	struct layout_class cls; /* the container's class (ContProps.object_class) */
	bool encrypted;
	uint32_t crypt_block; /* bytes sealed together: a power of two, 4 KiB .. 1 MiB */
	uint8_t key[AUTH_AEAD_KEY];
	pthread_mutex_t crypt_lock;
	void *crypt_ctx[2][4]; /* [decrypt, encrypt][i]: EVP_CIPHER_CTX */
	unsigned crypt_nctx[2];
	/* Ciphertext (and block record) buffers from lode_buf_alloc, kept
	 * for reuse until close: registered once, so a request needs no
	 * registration of its own, and over shm the target then copies the
	 * bytes out itself (from memory that is not registered, this side's
	 * progress copies them, on the core that seals). */
	struct crypt_buf {
		void *p;      /* NULL: a free slot */
		size_t cap;
		bool busy;
	} bufs[8];
	unsigned nbufs;
};

/* ---- the control-plane side (session.c) ---- */

struct conn_cred {
	char user[128];
	char secret[AUTH_SECRET_MAX + 1];
	char mgmt[256];
	char mgmt_file[PATH_MAX]; /* the file mgmt came from, or "" ($LODE_MGMT, none) */
	char tls_ca[4096];
	char pool[128];
	char tenant_key[4096]; /* the file holding the tenant key (keys.c), or "" */
};

struct conn_cap {
	struct lode_uuid cont;
	char label[LODE_LABEL_MAX + 1]; /* to open it again when its token expired */
	bool dead;                      /* it could not be: gone, or no longer granted */
	uint8_t tok[AUTH_CAP_SIZE];
	int64_t expires_ms;
	unsigned refs;
};

struct conn_cont_info {
	uint32_t rights;
	uint32_t chunk_size;
	char object_class[LAYOUT_CLASS_NAME_MAX]; /* "" : the default (S1) */
	bool encryption;
	uint32_t crypt_block; /* encryption: bytes per sealed block (0 from an older service: 4 KiB) */
	/* encryption: the data key as its creator wrapped it with the tenant
	 * key (auth_key_wrap); the service never holds the key itself. */
	uint8_t wrapped_key[AUTH_WRAPPED_SIZE];
	size_t wrapped_len;
};

/* Read a credentials file ("key: value" lines). Errors: -errno, -EINVAL. */
int cred_file_load(const char *path, struct conn_cred *cr);

/*
 * Ask the engine c bootstrapped from (c->server) for its welcome again: the
 * management service's port it names now (0: none) and the address it
 * answered at. Blocks up to three of c's timeouts (connect, send, reply).
 * Errors: boot's (-ECONNREFUSED, -ETIMEDOUT, -EPROTO: not a loded, ...).
 */
int conn_mgmt_port_ask(lode_conn_t *c, struct sockaddr_storage *server, uint16_t *port);

/* Find credentials, reach the management service the welcome names and
 * Connect. Errors: as lode_connect's. */
int conn_login(lode_conn_t *c, const struct sockaddr_storage *server, const struct net_welcome *w,
	       const struct lode_conn_opts *o);
void conn_logout(lode_conn_t *c);
/* Stop renewing (first thing when a connection closes). */
void conn_renewer_stop(lode_conn_t *c);
const char *conn_mgmt_error(const lode_conn_t *c);

/*
 * The control plane alone: bootstrap to learn where the management service
 * is, and Connect, with no UCX at all (the CLI's admin commands). Close with
 * lode_disconnect. Errors: as lode_connect's.
 */
int conn_mgmt_connect(const char *addr, const struct lode_conn_opts *opts, lode_conn_t **conn_out);

/*
 * Call a management method (e.g. "/lode.mgmt.v1.Mgmt/PoolCreate") carrying
 * the connection's capability; *reply as rpc_call's. Returns 0 or a Lode
 * code (rpc_status_errno, with NOT_FOUND as not_found); the server's message
 * is then in conn_mgmt_error(c). Blocks.
 */
int conn_mgmt_call(lode_conn_t *c, const char *method, const ProtobufCMessage *req,
		   const ProtobufCMessageDescriptor *reply_desc, ProtobufCMessage **reply,
		   int not_found);

/* The connection's pool (its name) and the token's rights and expiry. */
const char *conn_pool(const lode_conn_t *c);

/* Write the token a request carries into out (the lock held); returns its length. */
size_t conn_cap_put(lode_conn_t *c, uint16_t op, const struct lode_uuid *cont, uint8_t *out);

/* Fetch the pool map (PoolMapGet) when an engine named a newer version. No lock held. */
void conn_map_refresh(lode_conn_t *c);

/* Fetch the pool map now and install it, wished for or not. No lock held. */
int conn_map_fetch(lode_conn_t *c);

/* Renew the tokens if their time has come (or now, with force). No lock held. */
void conn_caps_renew(lode_conn_t *c, bool force);

/* OpenContainer: the uuid and a capability for label, kept until release. */
int conn_cont_acquire(lode_conn_t *c, const char *label, struct lode_uuid *uuid,
		      struct conn_cont_info *info);
void conn_cont_release(lode_conn_t *c, const struct lode_uuid *cont);
/* ContDestroy / ContListAll in the connection's pool (ContCreate: cont_props.h). */
int conn_cont_unregister(lode_conn_t *c, const char *label);
int conn_cont_names(lode_conn_t *c, char (*labels)[LODE_LABEL_MAX + 1], unsigned max);

/* ---- inline encryption (keys.c, crypt.c) ---- */

/*
 * The tenant key: from the file $LODE_TENANT_KEY names, else the file a
 * "tenant_key:" line of the credentials file names, else
 * $XDG_CONFIG_HOME/lode/tenant.key (~/.config/lode/tenant.key). The file
 * holds 64 hex digits and a newline and is readable by its owner alone.
 * Errors: -ENOKEY (no key anywhere), -EINVAL (not a key), -EACCES (the
 * file is readable by others, or unreadable), -errno.
 */
int conn_tenant_key(lode_conn_t *c, uint8_t key[AUTH_AEAD_KEY]);

/* Make a container's data key and wrap it with the tenant key. Errors: as
 * conn_tenant_key's, -EIO. */
int conn_data_key_new(lode_conn_t *c, uint8_t wrapped[AUTH_WRAPPED_SIZE]);

/* Key ct with the wrapped data key and its blocks of block bytes (0: 4 KiB;
 * -EPROTO: not a power of two from CRYPT_BLOCK_MIN to CRYPT_BLOCK_MAX;
 * -ENOKEY, -EKEYREJECTED: the tenant key does not unwrap it), and forget it
 * again (contexts freed, key zeroed). */
#define CRYPT_BLOCK_MIN 4096u
#define CRYPT_BLOCK_MAX (1u << 20)

/* Whether b bytes may be a container's crypt block (the service checks the same). */
static inline bool crypt_block_valid(uint64_t b)
{
	return b >= CRYPT_BLOCK_MIN && b <= CRYPT_BLOCK_MAX && (b & (b - 1)) == 0;
}
int crypt_cont_init(lode_cont_t *ct, const uint8_t *wrapped, size_t len, uint32_t block);
void crypt_cont_fini(lode_cont_t *ct);

/*
 * A buffer of at least n bytes (*cap gets its size): registered when one of
 * ct's is free (or can be made), else malloc'd. Back with crypt_buf_put,
 * which never takes the connection's lock (completions call it). NULL:
 * -ENOMEM. Not from a completion (it may register memory).
 */
void *crypt_buf_get(lode_cont_t *ct, size_t n, size_t *cap);
void crypt_buf_put(lode_cont_t *ct, void *buf, size_t cap);

/*
 * A cipher context keyed with ct's key, for sealing (enc 1) or opening (0),
 * borrowed for many crypt_seal/crypt_open calls (one I/O's blocks) and
 * given back. NULL: -ENOMEM.
 */
void *crypt_ctx_get(lode_cont_t *ct, int enc);
void crypt_ctx_put(lode_cont_t *ct, int enc, void *cx);

/*
 * AES-256-GCM with ct's data key: in -> out (may be in), n bytes, aad
 * bound, through cx (from crypt_ctx_get with the same direction) or, with
 * cx NULL, a context borrowed for this call. crypt_open: -LODE_ECSUM on a
 * tag mismatch, out zeroed. Other errors: -ENOMEM, -EIO.
 */
int crypt_seal(lode_cont_t *ct, void *cx, const uint8_t iv[AUTH_AEAD_IV], const void *aad,
	       size_t aad_len, const void *in, size_t n, void *out, uint8_t tag[AUTH_AEAD_TAG]);
int crypt_open(lode_cont_t *ct, void *cx, const uint8_t iv[AUTH_AEAD_IV], const void *aad,
	       size_t aad_len, const void *in, size_t n, void *out,
	       const uint8_t tag[AUTH_AEAD_TAG]);

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

/*
 * A request that stands for work done outside the connection (ec_io.c's
 * workers): it completes ev, or counts in parent, when conn_req_complete
 * says so, with that result. NULL with *rc set (-ENOMEM, eq_attach's
 * errors): nothing was attached. lode_disconnect waits for every one held.
 */
struct creq *conn_req_hold(lode_conn_t *c, lode_event_t *ev, struct creq *parent, int *rc);
/* A parent request whose children are all submitted, made a child of
 * parent (a held one) without waiting: it completes into parent. */
int conn_req_seal_under(struct creq *p, struct creq *parent);
/* From an on_done (lock held): a held request's outside work needs no
 * conn_req_complete after all; it ends with the children it has. */
void conn_req_drop_locked(struct creq *r);
void conn_req_complete(struct creq *r, int rc);

/* Whether buf lies in memory from lode_buf_alloc (then RMA needs no registration). */
bool conn_buf_registered(lode_conn_t *c, const void *buf, size_t len);

/* ---- placement (place.c) ---- */

/* The global target a read of (oid, dkey) in ct goes to now (its first live
 * member), or a negative error as conn_place's. */
int conn_target_of(lode_cont_t *ct, struct lode_oid oid, const void *dkey, size_t len);

/* The hash of a dkey that placement takes: the one function for it. */
uint64_t conn_dkey_hash(const void *dkey, size_t len);

/*
 * A request on the data (oid, dkey) in ct: placed at submit by the map and
 * ct's class (the oid's class byte, or ct's for 0). write: an update or a
 * punch, which goes to every live member. NULL: -ENOMEM.
 */
struct creq *creq_new_placed(lode_cont_t *ct, uint16_t op, struct lode_oid oid,
			     const void *dkey, size_t dkey_len, bool write);

/*
 * The class an object places by: its own, ct's for class 0, S1 for the
 * CLI's name index (0xff). Errors: -EINVAL (no class).
 */
int conn_obj_class(const lode_cont_t *ct, struct lode_oid oid, struct layout_class *cls);

/*
 * Place r (lock held): set r->tgt to the global target of its member (a
 * read: the first live one from r->member on) and, for a write, hand the
 * other live members to shadows sent by send. Errors: -EHOSTDOWN (no live
 * member), -ENOSPC (the map has too few engines), -EINVAL, -ENOMEM.
 */
int conn_place(lode_conn_t *c, struct creq *r, int (*send)(struct creq *));

/*
 * The pool map's proto as a layout map, slots in the proto's order. The
 * caller frees it. Errors: -EPROTO (a map layout refuses), -ENOMEM.
 */
int conn_map_decode(const Lode__Mgmt__V1__PoolMap *pm, struct layout_map **out);

/* A map of the engines the connection has (one, id 0, all targets UP):
 * when the service gave none. Errors: -ENOMEM. */
int conn_map_local(lode_conn_t *c, struct layout_map **out);

/* Swap in a newer map and place the parked requests again (session.c calls
 * it from the renewer thread). Takes the lock; m is the connection's then. */
void conn_map_install(lode_conn_t *c, struct layout_map *m);

/* Take the map of Connect's reply: c->map, and c->eng[] named after its
 * engines (nothing when it does not decode or is too large). */
void conn_map_take(lode_conn_t *c, const Lode__Mgmt__V1__PoolMap *pm);

/* Name in c->eng[] the engines of a fetched map that joined since connect,
 * and new addresses of engines not connected (restarted elsewhere). */
void conn_engines_note(lode_conn_t *c, const Lode__Mgmt__V1__PoolMap *pm);

/*
 * Connect one engine that the installed map has UP, DRAIN or NEW and this
 * connection cannot reach: joined or reintegrated since connect, or lost
 * and back. Writes parked for want of it are placed again. The renewer
 * thread calls it every turn; an engine that fails is tried again after a
 * second. Returns 1 if one was connected, 0 if none was due, or an error.
 */
int conn_engines_catch_up(lode_conn_t *c);

/*
 * Connect every engine of the installed map that this connection never
 * connected, each tried once, whether its next try is due or not. Before
 * an operation that must reach every engine, a container's or a
 * snapshot's creation, which an engine that joined since this connection
 * last fetched the map would otherwise miss for good
 * (docs/decisions/0014): conn_map_fetch first. Returns 0 when every
 * engine the map has UP, DRAIN or NEW is connected; else the creation
 * must not go on without it: -EHOSTDOWN (it did not answer, or it is
 * lost), -EPROTONOSUPPORT (it does not offer this connection's transport,
 * or it is not on this host when the connection is loopback), -E2BIG (more
 * engines or targets than a connection holds), or the connection's own
 * failure. No lock held.
 */
int conn_engines_fresh(lode_conn_t *c);

/* Ask the renewer thread to fetch the map: now, or at its next turn
 * (within 250 ms). Version want, or any when want is our own. Lock may be held. */
void conn_map_want(lode_conn_t *c, uint32_t want, bool now);

/* Ask the renewer thread to fetch the map now (lock may be held). */
void conn_map_wake(lode_conn_t *c, uint32_t want);

/* Whether global target t's engine is connected and not lost (broadcasts
 * and enumeration skip the others), and the first such target (0 if none). */
bool conn_target_live(lode_conn_t *c, unsigned t);
/* The connection's own capability expired unrenewed (the service was away
 * longer than a third of its life) and it cannot log in again (why: the
 * login's error): nothing can be asked any more, so the connection fails
 * (in flight: -LODE_ECAPEXPIRED; later: -ENOTCONN). */
void conn_expire(lode_conn_t *c, int why);
/* Every engine lost at once (engine_fail): the renewer connects each again,
 * with new sessions, once a map has it (after a login again, whose new
 * client id the old sessions are not bound to). */
void conn_engines_drop(lode_conn_t *c);
/* Whether conn_expire failed the connection. */
bool conn_expired(lode_conn_t *c);
/* Whether a call that reaches every target (a broadcast, a listing, a
 * container's creation) may go on past target t: 0 it is live, 1 it may be
 * skipped (its engine is DOWN or OUT: what it held is served elsewhere),
 * -EHOSTDOWN it may not (lost or being connected while the map has its
 * engine UP, DRAIN or NEW: what it holds would be missed). */
int conn_target_reach(lode_conn_t *c, unsigned t);

/* Whether global target t's engine is NEW in the installed map (being
 * integrated: its walk may not have made every container yet). Lock held. */
bool conn_target_new(const lode_conn_t *c, unsigned t);
unsigned conn_target_first(lode_conn_t *c);

/* ---- erasure-coded byte arrays (ec_io.c) ---- */

/* Bytes of one cell of a stripe: member c holds cell c of every stripe. */
#define EC_IO_CELL (64u << 10)

/* A request on (oid, k) in ct, placed at submit (objects.c's, for ec_io.c);
 * and a value going out or coming in, inline or by RMA. */
struct creq *conn_key_req(lode_cont_t *ct, uint16_t op, struct lode_oid oid,
			  const struct lode_key *k);
int conn_value_out(struct creq *r, const void *buf, size_t len);
int conn_value_in(struct creq *r, void *buf, size_t cap);

/*
 * Run an EC call of the ones below for a caller who gave an event or a
 * parent: queued to a worker thread of the process, which completes ev or
 * counts in parent. The key is copied; buf must live until completion, as
 * the API says. op: NET_OP_ARR_UPDATE, _FETCH, _PUNCH, NET_OP_AKEY_PUNCH,
 * NET_OP_DKEY_PUNCH or NET_OP_OBJ_PUNCH (k: any key).
 * Returns 0 or an error (then nothing was queued).
 */
int conn_ec_async(lode_cont_t *ct, const struct layout_class *cls, uint16_t op,
		  struct lode_oid oid, lode_epoch_t epoch, const struct lode_key *k, uint64_t off,
		  void *buf, uint64_t len, bool holes, lode_event_t *ev, struct creq *parent);

/*
 * The byte array at k of an object of EC class cls, as lode_obj_write,
 * lode_obj_read (holes: nothing there reads as zeros, not -ENOENT),
 * lode_range_punch and lode_obj_size take it; synchronous. Beyond theirs,
 * errors: -EIO (more than p members lost), -EHOSTDOWN (a member did not
 * take a write and no map said it is DOWN within the timeout).
 */
int conn_ec_write(lode_cont_t *ct, const struct layout_class *cls, struct lode_oid oid,
		  const struct lode_key *k, uint64_t off, const void *buf, uint32_t len);
int conn_ec_read(lode_cont_t *ct, const struct layout_class *cls, struct lode_oid oid,
		 lode_epoch_t epoch, const struct lode_key *k, uint64_t off, void *buf,
		 uint32_t len, bool holes);
int conn_ec_punch(lode_cont_t *ct, const struct layout_class *cls, struct lode_oid oid,
		  const struct lode_key *k, uint64_t off, uint64_t len);
int conn_ec_size(lode_cont_t *ct, const struct layout_class *cls, struct lode_oid oid,
		 lode_epoch_t epoch, const struct lode_key *k, uint64_t *size_out);

/*
 * A request's own answer, apart from its parent's result: on_done =
 * conn_answer_done with ctx the answer gets the request's rc, value and
 * bytes received, and leaves the request's rc 0 (a lease's, a snapshot
 * barrier's).
 */
struct conn_answer {
	int rc;
	uint64_t val;
	size_t in_len;
};
void conn_answer_done(struct creq *r);

/*
 * An EC array's end mark (ec_io.c, docs/decisions/0018): a byte array on
 * every parity member, under the same dkey and the akey CONN_EC_MARK + the
 * array's akey, with one byte at the last array byte of each write, so
 * that the mark's size is the array's size, which the data members cannot
 * say once one of them is lost. conn_ec_mark_key: k's mark key into buf (LODE_KEY_MAX bytes);
 * false for an akey too long to have one (such an array has no mark).
 * conn_ec_is_mark: whether an akey is a mark's (lode_akey_list hides them).
 */
#define CONN_EC_MARK "\0end"
#define CONN_EC_MARK_LEN 4u
bool conn_ec_mark_key(const struct lode_key *k, uint8_t *buf, struct lode_key *out);
bool conn_ec_is_mark(const void *akey, size_t len);

/* Array byte + 1 of the end of data member c's local size n (n > 0; k = nk). */
uint64_t conn_ec_end(unsigned nk, unsigned c, uint64_t n);

/*
 * lode_akey_punch of an EC object: the akey punched on every member under
 * the array's write lease, so that no partial write in another process
 * writes parity of the cells it removes. A torn array is not mended first:
 * nothing of it is left to mend, and the lease goes back whole.
 */
int conn_ec_akey_punch(lode_cont_t *ct, const struct layout_class *cls, struct lode_oid oid,
		       const struct lode_key *k);

/*
 * lode_dkey_punch (k) or lode_obj_punch (k NULL) of an EC object: the
 * punch under the dkey's or the object's lease (NET_F_LEASE_DKEY, _OBJ),
 * so that no writer or degraded reader of an array under it works on
 * stripes it has removed on some members only, and a snapshot's barrier
 * waits for it. Its lease never tears: a punch that fails partway is not
 * mended (punch again). The object's needs its dkeys in one group.
 */
int conn_ec_key_punch(lode_cont_t *ct, const struct layout_class *cls, struct lode_oid oid,
		      const struct lode_key *k);

/*
 * Mend the EC array at k, listed torn over the members' range [off, end)
 * (a writer died or failed mid-write, lease.h): take its lease, with the
 * snapshot hold holder's pass (its token), make the parity of that range
 * (and of any other the lease's member says is torn) the code of its data
 * again, and give the lease back (torn again if that failed). A snapshot
 * does this to every torn array of its container while it holds writers
 * back (lode_snap_create). 0, or -EIO (a data member is lost: the parity
 * cannot be trusted), -EBUSY (held all along), or a request's error.
 */
int conn_ec_mend(lode_cont_t *ct, const struct layout_class *cls, struct lode_oid oid,
		 const struct lode_key *k, uint64_t off, uint64_t end, uint32_t holder);

/* ---- one target, for rebuild (objects.c; src/server/rebuild.c calls it) ---- */

/*
 * What a request to one target carries and gets back (struct conn_tgt_io):
 * epoch a fetch reads at, or (with rebuild) the epoch an update or punch
 * lands at; off and len as the opcode takes them; out, an update's value;
 * in and cap, where a fetch's value or a list's items land; an, a list's
 * cursor (its tgt is not used). val gets the reply's value (a fetched
 * value's full length, an array's size, a list's count), in_len the bytes
 * received. hflags: header flags (NET_F_LIST_ALL for a list).
 * NET_OP_SNAP_LIST: max epochs into in (cap bytes), val their number.
 * NET_OP_LEASE:
 * epoch is the token, max the ms (0: give back), hflags NET_F_TORN,
 * _LEASE_READ, _LEASE_RENEW; in and cap where the torn range lands.
 */
struct conn_tgt_io {
	lode_epoch_t epoch;
	uint64_t off, len;
	const void *out;
	void *in;
	size_t cap;
	struct lode_anchor *an;
	bool rebuild;
	uint32_t max;
	uint32_t hflags;
	uint64_t val;
	size_t in_len;
};

/*
 * Send op on (oid, k) to global target tgt of ct's connection, not placed,
 * and wait for its reply. k may be NULL (object lists) and k->akey NULL
 * (dkey punches and lists). Errors: the target's, -EHOSTDOWN (its engine
 * is lost), -EINVAL (no such target), -ENOMEM.
 */
int conn_tgt_io(lode_cont_t *ct, unsigned tgt, uint16_t op, struct lode_oid oid,
		const struct lode_key *k, struct conn_tgt_io *io);

/* The version of the map c places with now (0: none from the service). */
uint32_t conn_map_version(lode_conn_t *c);

/* Engine id's entry in c->eng, or NULL when the connection has none.
 * Lock held. */
struct conn_engine *conn_engine_of(lode_conn_t *c, uint32_t id);

/*
 * Best effort: op with args a to every live target of c that only[] has
 * (every live target when only is NULL), all at once, their results
 * ignored. For undoing what a failed call made. No lock held.
 */
void conn_targets_undo(lode_conn_t *c, uint16_t op, const struct net_args *a, const bool *only);

/* Global targets [*first, *first + *n) of engine id, connected and not
 * lost. Errors: -ENOENT. */
int conn_engine_targets(lode_conn_t *c, uint32_t id, unsigned *first, unsigned *n);

/*
 * Whether engine self has a rebuild to take part in under c's map: 1 (a
 * DOWN or DRAIN engine or target, or a NEW engine to integrate, and self
 * is UP or DRAIN), 0 (nothing to do), -EAGAIN (there is, but the map says
 * a target may still hold data of an older layout: it waits for a map
 * that says every one is reclaimed). *share gets a rough share of an
 * engine's data that is to be copied (moving engines / UP ones), for an
 * estimate of the work.
 */
int conn_rebuild_due(lode_conn_t *c, uint32_t self, double *share);

/*
 * The reclaim (docs/decisions/0014) under c's map: *settled gets the map's
 * settled version. 1 when engine self has yet to remove what that layout
 * does not place on it (the map's reclaimed version is below it), else 0.
 */
int conn_reclaim_due(lode_conn_t *c, uint32_t *settled);

/*
 * Whether (engine self, its target local_tgt) is a member, DOWN or not, of
 * the group of (oid, dkey_hash) of class cls under c->map: 1 or 0; for an
 * EC member's own id (layout_oid_member), whether it is that member. -ENOENT
 * when c has no map; -EAGAIN when the map says every target is reclaimed
 * (moves may have begun, so a reclaim must stop); placement's errors.
 */
int conn_dkey_member(lode_conn_t *c, const struct layout_class *cls, struct lode_oid oid,
		     uint64_t dkey_hash, uint32_t self, uint16_t local_tgt);

/*
 * What a rebuild or drain does with the group of a dkey (of oid, class cls,
 * hash dkey_hash), as engine self's target local_tgt sees it: each
 * member's global target now in tgt[] (-1: DOWN or unreachable), the place
 * each DOWN or moving member goes to in dst[] (-1: it stays, or has no
 * replacement), which member is this target (me) and which is the first
 * not DOWN (first; -1: none). An EC member may go where another member is
 * now: each keeps its own object there (layout_oid_member). Returns the
 * group's size; 0 when no rebuild or drain runs; -EHOSTDOWN (a new place
 * cannot be reached), -ENOSPC, -EINVAL. oid is the caller's id.
 */
struct conn_rebuild_group {
	int me, first;
	int tgt[LAYOUT_GROUP_MAX], dst[LAYOUT_GROUP_MAX];
};

int conn_rebuild_group(lode_conn_t *c, const struct layout_class *cls, struct lode_oid oid,
		       uint64_t dkey_hash, uint32_t self, uint16_t local_tgt,
		       struct conn_rebuild_group *out);

/* Send a new request with no completion of its own, a shadow (lock held). */
int conn_req_send(struct creq *r);
/* Send a parked request again, as it is (lock held). */
int conn_req_resend(struct creq *r);
/* Finish r with rc now (lock held). */
void conn_req_fail(struct creq *r, int rc);

#endif
