/*
 * The management service (lode.mgmt.v1.Mgmt, proto/lode/mgmt/v1/mgmt.proto),
 * as a component a process hosts: loded starts it beside its targets.
 *
 * It owns the management state (tenants, users, groups, ACLs, pools,
 * containers, signing keys, revocations, and the pool map: the engines of
 * the system and their states), persisted in a state directory,
 * and serves it over gRPC on a thread of its own. The keyring and the
 * revocation table it exposes are the ones the host's targets verify
 * capabilities with, so a rotation or a revocation takes effect on the data
 * path at once.
 */
#ifndef LODE_MGMT_H
#define LODE_MGMT_H

#include <stdbool.h>
#include <stdint.h>

#include "auth/auth.h"
#include "mgmt/rpc.h"

/* One target's live state, as the host reports it. */
struct mgmt_target_info {
	uint32_t id;
	uint64_t capacity, used; /* bytes */
	uint64_t requests, errors;
	double load;             /* 0..1 */
	bool ram;
};

/*
 * An engine's part of a rebuild, as mgmt.proto's RebuildStatus has it:
 * rebuilding to map_version (0: nothing has run), done when finished_unix_ms
 * is set, running is false and errno_value is 0.
 */
struct mgmt_rebuild_info {
	uint32_t map_version;
	bool running;
	uint64_t objects_done, objects_total;
	uint64_t bytes_done, bytes_total;
	int64_t started_unix_ms, finished_unix_ms;
	int32_t errno_value; /* 0 or a negative Lode error */
	uint32_t reclaimed_version; /* PoolMap.settled_version reclaimed through (0: unknown) */
};

/* What the host tells the service; called on the service's thread. Any may
 * be NULL. */
struct mgmt_hooks {
	void *arg;
	/* Fill up to max entries; return how many targets there are. */
	unsigned (*targets)(void *arg, struct mgmt_target_info *out, unsigned max);
	/*
	 * The pool map's version changed (or, once at start, the version
	 * loaded). Called with no service lock held, never with a version
	 * lower than one it was called with before; it may call
	 * mgmt_map_version but no RPC of this service.
	 */
	void (*map_changed)(void *arg, uint32_t version);
	/*
	 * The host engine's part of the current rebuild (it sends no
	 * heartbeats). NULL, and no EngineHeartbeat for engine 0 either:
	 * the host counts as done, having nothing to rebuild.
	 */
	void (*rebuild)(void *arg, struct mgmt_rebuild_info *out);
};

/*
 * One replica of a replicated service (README.md, "Replication"): its raft
 * id (non-zero), the "A.B.C.D:PORT" its raft transport listens on, and the
 * "HOST:PORT" of its gRPC service, which followers name in redirects.
 */
#define MGMT_REPLICAS_MAX 5
struct mgmt_replica {
	uint64_t id;
	char raft[64];
	char grpc[256];
};

struct mgmt_config {
	const char *listen;       /* gRPC address, "host:port" (port 0: pick one) */
	const char *state_dir;    /* where the state lives (created if missing) */
	const char *engine_addr;  /* this engine's data-plane bootstrap address */
	unsigned ntargets;        /* targets this engine has */
	struct rpc_tls tls;       /* cert and key set: TLS only; all NULL: plaintext */
	unsigned cap_lifetime_s;  /* capability lifetime; 0: 600 */
	unsigned key_rotate_s;    /* rotate the signing key this often; 0: never on its own */
	const char *admin_cred;   /* first start: write the admin's credentials file here (0600) */
	/* The host engine (engine 0 of the pool map): its identity, 16 bytes
	 * (NULL: a random one at first start, kept in the state after). */
	const uint8_t *engine_uuid;
	unsigned heartbeat_ms;    /* how often engines send EngineHeartbeat; 0: 500 */
	unsigned grace_ms;        /* an engine silent this long goes DOWN; 0: 3000 */
	/*
	 * Replication: nreplicas 0 is the single service (no raft). Else the
	 * state goes through src/repl's log among replicas[] (1, 3 or 5), this
	 * process hosting replica_id, with raft's files in <state_dir>/raft;
	 * listen should be this replica's grpc address. There is no host
	 * engine then (engine_uuid is unused): every engine joins.
	 */
	const struct mgmt_replica *replicas;
	unsigned nreplicas;
	uint64_t replica_id;
	unsigned election_ms;     /* raft's election timeout; 0: 1000 (heartbeat a tenth) */
};

typedef struct mgmt mgmt_t;

/*
 * Load (or, on first start, create) the state and start serving. msg gets
 * a reason on failure. Errors: -EADDRINUSE, -EINVAL (bad config, TLS files),
 * -LODE_ECORRUPT (a state file that does not parse), -errno from the file
 * system. Before it returns, hooks->map_changed (if set) is called with the
 * map's version.
 */
int mgmt_start(const struct mgmt_config *cfg, const struct mgmt_hooks *hooks, mgmt_t **out,
	       char *msg, size_t msg_cap);

/* The port the service listens on. */
int mgmt_port(const mgmt_t *m);

/* The keyring and revocation table targets verify with (live for the
 * service's lifetime). */
struct auth_keyring *mgmt_keyring(mgmt_t *m);
struct auth_revoked *mgmt_revoked(mgmt_t *m);

/* The pool map's current version (what was last persisted). Thread-safe,
 * never blocks: for the host's stale-version checks. */
uint32_t mgmt_map_version(mgmt_t *m);

/* Replicated: whether this replica leads now (see repl_is_leader); the
 * single service always does. Thread-safe, never blocks. */
bool mgmt_is_leader(mgmt_t *m);

/* Stop serving and free; the state is already on disk. */
void mgmt_stop(mgmt_t *m);

#endif
