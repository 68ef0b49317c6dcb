/*
 * The management service's insides, shared by state.c (the model and its
 * persistence), handlers.c (the RPCs) and mgmt.c (starting and stopping),
 * and by the unit test, which drives the handlers without a network.
 *
 * The model is the persisted message itself (proto/lode/mgmt/v1/state.proto,
 * as protobuf-c structs): the state is small, so lookups are linear scans,
 * and keeping one representation means nothing is converted on the way to
 * disk and a failed write is undone by unpacking what is on disk again.
 * Every string, byte field and array in the model is malloc'ed (or
 * protobuf-c's empty string), so protobuf_c_message_free_unpacked frees any
 * part of it.
 */
#ifndef LODE_MGMT_STATE_H
#define LODE_MGMT_STATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "auth/auth.h"
#include "layout/layout.h"
#include "lode/mgmt/v1/state.pb-c.h"
#include "mgmt/mgmt.h"
#include "mgmt/rpc.h"

typedef Lode__Mgmt__State__V1__State ms_state;
typedef Lode__Mgmt__State__V1__Tenant ms_tenant;
typedef Lode__Mgmt__State__V1__User ms_user;
typedef Lode__Mgmt__State__V1__Group ms_group;
typedef Lode__Mgmt__State__V1__AclEntry ms_acl;
typedef Lode__Mgmt__State__V1__Pool ms_pool;
typedef Lode__Mgmt__State__V1__Container ms_cont;
typedef Lode__Mgmt__State__V1__SigningKey ms_key;
typedef Lode__Mgmt__State__V1__Revocation ms_revocation;
typedef Lode__Mgmt__State__V1__Engine ms_engine;

#define MS_VERSION 1
#define MS_NAME_MAX 127 /* longest tenant, user, group, pool or container name */
#define MS_SYSTEM_TENANT "system"
#define MS_ADMIN_USER "admin"
#define MS_DEFAULT_POOL "default"
#define MS_STATE_FILE "state.pb"
#define MS_RIGHTS_ALL (AUTH_R_READ | AUTH_R_WRITE | AUTH_R_ADMIN)

/* ---- the model and its file ------------------------------------------------ */

struct mgmt_state {
	char *dir;
	char *path;	/* dir/state.pb */
	char *tmp_path; /* dir/state.pb.tmp */
	int lock_fd;	/* dir/state.lock, flock'ed: one service per directory */
	ms_state *s;	/* the model */
	uint8_t *saved; /* what state.pb holds (NULL before the first write) */
	size_t saved_len;
	/*
	 * Replicated (mgmt_replica_*): a commit proposes the packed state
	 * through this instead of writing state.pb (the apply path writes it
	 * on every replica); saved is then the last committed state.
	 */
	int (*propose)(void *arg, const void *buf, size_t len);
	void *propose_arg;
};

/*
 * Open the state directory (created 0700 if missing) and load state.pb.
 * Returns 1 when there is no state yet (st->s is then an empty model with
 * version and next ids set, not yet written), 0 when it loaded. Errors:
 * -LODE_ECORRUPT (state.pb does not unpack, or holds impossible values;
 * never replaced by an empty state), -EBUSY (another service holds the
 * directory), -ENOMEM, -errno from the file system; msg says which.
 */
int mgmt_state_open(struct mgmt_state *st, const char *dir, char *msg, size_t msg_cap);

/* Free the model; the file stays. */
void mgmt_state_close(struct mgmt_state *st);

/*
 * Persist the model: pack, write state.pb.tmp (0600), fsync, rename over
 * state.pb, fsync the directory (replicated: propose it instead). On any
 * failure the model is put back to what state.pb holds (so pointers into it
 * are then stale) and -errno is returned: a change is either on disk or
 * gone. Replicated, also -LODE_ENOTLEADER and -ETIMEDOUT (repl_propose's).
 */
int mgmt_state_commit(struct mgmt_state *st);

/* Put the model back to what state.pb holds: for a handler that changed
 * the model and then failed before committing. */
void mgmt_state_rollback(struct mgmt_state *st);

/*
 * Replace path with len bytes atomically: write tmp (created 0600), fsync,
 * rename over path, fsync dir (the directory both are in). tmp is removed
 * on failure. Errors: -errno.
 */
int ms_file_write_atomic(const char *dir, const char *tmp, const char *path, const void *buf,
			 size_t len);

/*
 * A packed State as a load takes it: unpack, drop old tenant keys, check
 * (the checks mgmt_state_open makes). *out is the new model. Errors:
 * -LODE_ECORRUPT (why says what), -ENOMEM.
 */
int ms_state_unpack(const void *buf, size_t len, ms_state **out, const char **why);

/* Names: 1..MS_NAME_MAX bytes of [A-Za-z0-9._-]. */
bool ms_name_valid(const char *s);

ms_tenant *ms_tenant_find(const ms_state *s, const char *name);
ms_tenant *ms_tenant_by_id(const ms_state *s, uint32_t id);
ms_user *ms_user_find(const ms_state *s, uint32_t tenant, const char *name);
ms_user *ms_user_by_id(const ms_state *s, uint32_t id);
ms_group *ms_group_find(const ms_state *s, uint32_t tenant, const char *name);
ms_pool *ms_pool_find(const ms_state *s, const char *label);
ms_cont *ms_cont_find(const ms_state *s, const char *pool, const char *label);
ms_pool *ms_pool_by_uuid(const ms_state *s, const uint8_t uuid[16]);
ms_cont *ms_cont_by_uuid(const ms_state *s, const uint8_t uuid[16]);
/* How many containers pool holds. */
unsigned ms_pool_containers(const ms_state *s, const ms_pool *p);
ms_acl *ms_acl_find(const ms_state *s, const char *resource, const char *principal);
ms_revocation *ms_revocation_find(const ms_state *s, uint32_t user);
bool ms_group_has(const ms_group *g, uint32_t user);

/* Add a record (the model's next id where it has one); NULL: no memory.
 * Names are copied; callers validate them first. */
ms_tenant *ms_tenant_add(ms_state *s, const char *name, int64_t now_ms);
ms_user *ms_user_add(ms_state *s, uint32_t tenant, const char *name, const char *secret_hash,
		     int64_t now_ms);
ms_group *ms_group_add(ms_state *s, uint32_t tenant, const char *name);
ms_pool *ms_pool_add(ms_state *s, const char *label, const uint8_t uuid[16], uint64_t size,
		     const uint32_t *targets, size_t ntargets, int64_t now_ms);
ms_cont *ms_cont_add(ms_state *s, const char *pool, const char *label, const uint8_t uuid[16],
		     uint32_t tenant, int64_t now_ms);
/* Set an ACL entry (rights 0 removes it). Errors: -ENOMEM. */
int ms_acl_set(ms_state *s, const char *resource, const char *principal, uint32_t rights);
int ms_revocation_set(ms_state *s, uint32_t user, int64_t before_ms);
int ms_key_add(ms_state *s, uint32_t id, const uint8_t *key, int64_t retired_ms,
	       int64_t created_ms);
int ms_group_member_add(ms_group *g, uint32_t user);
ms_engine *ms_engine_by_id(const ms_state *s, uint32_t id);
ms_engine *ms_engine_by_uuid(const ms_state *s, const uint8_t uuid[16]);
/* Append an engine record (the caller picks the id). NULL: no memory. */
ms_engine *ms_engine_add(ms_state *s, uint32_t id, const uint8_t uuid[16], const char *address,
			 uint32_t ntargets, int64_t now_ms);
void ms_engine_remove(ms_state *s, uint32_t id);
void ms_group_member_remove(ms_group *g, uint32_t user);

/* Remove a record and what hangs off it: a container's ACL entries; a
 * pool's containers and ACL entries; a tenant's users, groups and the ACL
 * entries naming them (its containers must be gone first). Pointers to the
 * removed records are stale afterwards. */
void ms_cont_remove(ms_state *s, ms_cont *c);
void ms_pool_remove(ms_state *s, ms_pool *p);
void ms_tenant_remove(ms_state *s, ms_tenant *t);
/* Drop the keys retired at or before before_ms, and the oldest beyond
 * AUTH_KEYS_MAX (what a keyring can hold). */
void ms_keys_prune(ms_state *s, int64_t before_ms);

/* A fresh random uuid for a pool or container: never zero (a pool-wide
 * capability's container), never the root container's, never one in use.
 * Errors: -EIO (no randomness). */
int ms_uuid_fresh(const ms_state *s, uint8_t uuid[16]);

/* mkdir -p, giving what it creates mode. -errno. */
int ms_dir_make(const char *dir, mode_t mode);

/* Set a string field of a model record (frees the old value). -ENOMEM. */
int ms_str_set(char **field, const char *v);
/* Set a bytes field to a copy of n bytes. -ENOMEM. */
int ms_bytes_set(ProtobufCBinaryData *field, const void *v, size_t n);

/* ---- the rights policy ------------------------------------------------------ */

/* A system administrator: admin in tenant "system". */
bool ms_user_sysadmin(const ms_state *s, const ms_user *u);
/* A tenant administrator of tenant (a system administrator is one of every tenant). */
bool ms_user_tenant_admin(const ms_state *s, const ms_user *u, uint32_t tenant);

/*
 * u's rights on pool p (c NULL) or on its container c: everything for a
 * system administrator, everything on its own tenant's containers for a
 * tenant administrator, else the union of the ACL entries on exactly that
 * resource naming u, a group u is in, or u's tenant (pool entries do not
 * cascade to containers).
 */
unsigned ms_rights(const ms_state *s, const ms_user *u, const ms_pool *p, const ms_cont *c);

/* "POOL" or "POOL/CONT" into buf. */
void ms_resource_name(const ms_pool *p, const ms_cont *c, char *buf, size_t cap);

/* ---- the service ------------------------------------------------------------ */

#define MGMT_HOST_ENGINE 0u /* the engine that hosts the service */

/*
 * What the service knows of an engine between heartbeats. Not persisted:
 * after a restart every engine's silence counts from the restart, and
 * engines send their numbers and rebuild reports again within a heartbeat.
 */
struct mgmt_engine_live {
	uint32_t id;
	int64_t silent_since_ms; /* mgmt_live_ms: the last heartbeat, or the service's start */
	int64_t heartbeat_ms;    /* wall clock (shown): the last heartbeat; 0: none since the start */
	unsigned ntargets;
	struct mgmt_target_info *targets; /* [ntargets]: as its last heartbeat said */
	bool reported;                    /* rebuild holds a report */
	int64_t deaf_ms;                  /* moved by mgmt_live_deaf since its last heartbeat */
	struct mgmt_rebuild_info rebuild;
};

struct mgmt {
	struct mgmt_state st;
	struct auth_keyring kr;
	struct auth_revoked rv;
	bool kr_init, rv_init;
	struct mgmt_hooks hooks;
	char *listen, *engine_addr, *admin_cred;
	unsigned ntargets;
	int64_t lifetime_ms;
	unsigned key_rotate_s;
	int64_t started_ms;      /* mgmt_live_ms: when silences started to count (open, election) */
	int64_t started_unix_ms; /* the same moment by the wall clock, for status */
	int64_t clock_skew_ms; /* added to the wall clock: lets tests expire capabilities */
	int64_t live_skew_ms;  /* added to mgmt_live_ms: lets tests age a heartbeat */
	/* A hash no secret matches: Connect checks an unknown user's secret
	 * against it so that a wrong user costs as much as a wrong secret. */
	char decoy_hash[AUTH_HASH_TEXT];
	/* First start only, until mgmt_start has written the credentials file. */
	bool first_start;
	char admin_secret[2 * 32 + 1];
	/* Handlers (the rpc thread) and the rotation timer take it. */
	pthread_mutex_t lock;
	rpc_server_t *srv;
	int port;
	pthread_t timer;
	bool timer_running, stopping;
	pthread_cond_t timer_cond;
	/* The pool map (engines.c). */
	unsigned heartbeat_ms, grace_ms;
	struct mgmt_engine_live *live; /* [nlive], by engine */
	int64_t deaf_until_ms;         /* the end of the last deaf stretch counted */
	int64_t awake_ms;              /* the last time a call or the timer held m->lock */
	size_t nlive;
	uint32_t map_version;  /* the persisted one; atomic (mgmt_map_version) */
	pthread_t map_timer;
	bool map_timer_running;
	/* Held while map_changed runs, so that calls never go backwards. */
	pthread_mutex_t notify_lock;
	uint32_t notified;     /* the last version map_changed was called with */
	/* Replication (replica.c); repl NULL: the single service. */
	struct repl *repl;
	struct mgmt_replica replicas[MGMT_REPLICAS_MAX];
	unsigned nreplicas;
	uint64_t replica_id;
	unsigned propose_ms;   /* how long a commit waits for the log */
	/* prop_lock guards the proposal in flight (the leader's own state,
	 * which apply then need not unpack) and the last applied bytes. */
	pthread_mutex_t prop_lock;
	const uint8_t *prop_buf;
	size_t prop_len;
	bool prop_applied;
	uint8_t *applied;      /* the last state applied (snapshot's bytes) */
	size_t applied_len;
	bool applied_any;      /* an entry or snapshot was applied since start */
	/* Set by the role callback (the replica's thread), read by the timers. */
	bool leading;          /* atomic */
	int64_t lead_since_ms; /* atomic: when this replica last became leader */
	int64_t live_since_ms; /* the lead_since_ms m->live was last reset for (m->lock) */
};

/*
 * Everything mgmt_start does short of the network: load (or create, and
 * persist) the state, rebuild the keyring and revocation table from it.
 * The unit test calls the handlers on what it returns.
 */
int mgmt_open(const struct mgmt_config *cfg, const struct mgmt_hooks *hooks, struct mgmt **out,
	      char *msg, size_t msg_cap);
void mgmt_close(struct mgmt *m);

/* The targets as the host reports them, or, before it reports any (loded
 * starts the service before its targets), cfg->ntargets of them with ids
 * 0..n-1 and nothing known (*live false). Returns how many (at most max). */
#define MGMT_TARGETS_MAX 1024
unsigned mgmt_targets_get(struct mgmt *m, struct mgmt_target_info *out, unsigned max, bool *live);

/* The wall clock the service uses (unix ms, plus m->clock_skew_ms). */
int64_t mgmt_now_ms(const struct mgmt *m);
/*
 * The clock engines' silence is counted by, and everything compared with
 * it (m->live, awake_ms, deaf_until_ms, lead_since_ms, started_ms):
 * CLOCK_MONOTONIC in ms, plus m->live_skew_ms. A step of the wall clock (NTP's, an operator's) is
 * no engine's silence: by the wall clock, an hour forward looked like an
 * hour with no heartbeat and every engine went DOWN, and an hour back left
 * a dead engine UP for an hour.
 */
int64_t mgmt_live_ms(const struct mgmt *m);

/* Rotate the signing key: persist the new key, then hand it to the keyring.
 * Returns the new key id or -errno (nothing changed). Caller holds m->lock. */
int mgmt_key_rotate(struct mgmt *m);

/* ---- the pool map (engines.c) ------------------------------------------------ */

/* The model's map, decoded into a new map the caller frees (an empty map at
 * version 0 when there is none yet). Errors: -ENOMEM, -LODE_ECORRUPT. */
int mgmt_map_load(const struct mgmt *m, struct layout_map **out);
/* Put map into the model and persist; on success the new version is what
 * mgmt_map_version says. Errors (the model rolled back): -ENOMEM, -errno. */
int mgmt_map_commit(struct mgmt *m, const struct layout_map *map);
/* Register the host engine (engine 0) or bring its record up to date with
 * the configuration; persists what changed. At open. */
int mgmt_host_register(struct mgmt *m, const uint8_t *uuid, char *msg, size_t msg_cap);
/* The volatile record of engine id, made (silent since now) if missing;
 * NULL: no memory. */
struct mgmt_engine_live *mgmt_live_get(struct mgmt *m, uint32_t id, int64_t now_ms);
void mgmt_live_free(struct mgmt *m);
/*
 * The service heard nothing from from_ms to to_ms: a handler or the map's
 * check held m->lock that long, or the process was not run. That time is
 * the service's silence, not the engines': each engine's silence moves on
 * by it (never past to_ms), as a new leader counts from its election
 * (mgmt_replica_lead). A gap of up to a heartbeat is left to the grace; a
 * stretch already counted is not counted again; and an engine's silence
 * moves by at most one grace between its heartbeats, so that a service
 * busy with slow calls still finds a dead engine within two. Caller holds
 * m->lock.
 */
void mgmt_live_deaf(struct mgmt *m, int64_t from_ms, int64_t to_ms);
/*
 * m->lock just taken, by a call or the map's timer, at now_ms: the time
 * since anyone last held it (more than a heartbeat) is time the whole
 * service was not run (stopped, starved of CPU), so it heard nothing:
 * mgmt_live_deaf. Whichever runs first after such a stretch counts it,
 * before a heartbeat it handles can make it look heard.
 */
void mgmt_live_awake(struct mgmt *m, int64_t now_ms);
/*
 * This replica leads from since_ms: what it heard as a follower is not what
 * the engines sent the leader, so every engine's silence counts from then,
 * and the deafness it was credited with (mgmt_live_deaf, which a follower
 * counts but no heartbeat of its own clears) starts again from none.
 */
void mgmt_live_restart(struct mgmt *m, int64_t since_ms);
/*
 * If this replica was elected (m->lead_since_ms) since m->live was last
 * reset for an election, reset it (mgmt_live_restart) and count the
 * service's start from then. mgmt_live_awake does it first, so that a
 * stall right after the election is counted on the fresh counts.
 */
void mgmt_live_elected(struct mgmt *m);
/* Reintegration of an OUT engine (docs/decisions/0014): its record keeps
 * its slot, OUT, under a uuid no engine has and no address, so that the
 * engine's next heartbeat is refused and it joins again as a new engine
 * (NEW, a new id, integrated by moves). The caller commits. -ENOENT,
 * -ENOMEM, -EIO. */
int mgmt_engine_retire(struct mgmt *m, uint32_t id);
/* Whether map has an engine DOWN, DRAIN or NEW: a rebuild to its version is due. */
bool mgmt_rebuild_due(const struct layout_map *map);
/* Complete the rebuild to map's version if one is due and every UP and
 * DRAIN engine reports it done: DOWN and DRAIN engines go OUT, NEW ones UP
 * (in slot order), and the model records the version as rebuilt and the
 * next one as settled. Before that, record the settled version as
 * reclaimed once every UP, DRAIN and NEW engine reports so. *changed is set
 * when either happened; the caller bumps the version and commits. -errno. */
int mgmt_rebuild_settle(struct mgmt *m, struct layout_map *map, bool *changed);
/*
 * PoolQuery's rebuild: the engines' reports for the version due, or for the
 * last one completed, summed; *pending = UP and DRAIN engines not done.
 */
void mgmt_rebuild_sum(struct mgmt *m, const struct layout_map *map, struct mgmt_rebuild_info *out,
		      uint32_t *pending);
/*
 * One check of the map at now_ms: engines silent past grace_ms go DOWN (NEW
 * ones are removed), and a rebuild every UP and DRAIN engine has finished
 * is completed (DOWN and DRAIN engines OUT, NEW ones UP). One commit for
 * the whole check. Returns 1 when the map changed, 0 when not, or -errno
 * (nothing changed). Caller holds m->lock.
 */
int mgmt_map_check(struct mgmt *m, int64_t now_ms);
/* mgmt_map_check under the lock, then mgmt_map_publish: what the timer
 * does every heartbeat_ms / 2; tests call it to drive time. */
int mgmt_tick(struct mgmt *m, int64_t now_ms);
/* Call hooks->map_changed if the version moved since the last call. Caller
 * holds no service lock. */
void mgmt_map_publish(struct mgmt *m);

/* ---- replication (replica.c) -------------------------------------------------- */

/*
 * Start the replica (cfg->replicas) after mgmt_open: raft's files in
 * <state_dir>/raft, commits proposed through the log. Errors: repl_start's.
 */
int mgmt_replica_start(struct mgmt *m, const struct mgmt_config *cfg, char *msg, size_t msg_cap);
void mgmt_replica_stop(struct mgmt *m);
/*
 * Apply a committed state (the fsm's apply and restore): write state.pb,
 * and unless it is the state this leader just proposed (its model already),
 * unpack and check it as a load does, replace the model, bring the keyring,
 * the revocation table and the map version up to date and tell the host.
 * Takes m->lock (caller must not hold it). Errors: -LODE_ECORRUPT (nothing
 * changed), -ENOMEM.
 */
int mgmt_replica_apply(struct mgmt *m, const void *buf, size_t len);
/* The last applied state's bytes, malloc'ed (the fsm's snapshot). -ENOMEM. */
int mgmt_replica_snapshot(struct mgmt *m, void **buf, size_t *len);
/* Whether this process may serve a call that needs the current state; if
 * not, msg gets the redirect (RPC_NOT_LEADER HOST:PORT, or RPC_NO_LEADER). */
bool mgmt_replica_serves(struct mgmt *m, char *msg, size_t msg_cap);
/* Leader duties before each timer check (caller holds m->lock): false on a
 * follower. On a new leadership, every engine's silence counts from it; on
 * a group that never committed a state, the first state is made. */
bool mgmt_replica_lead(struct mgmt *m);

/* The first state (mgmt.c): system tenant, admin, default pool, key 1. */
int mgmt_first_state(struct mgmt *m, char *msg, size_t msg_cap);
/* Write the administrator's credentials file naming addr (mgmt.c). */
int mgmt_cred_create(struct mgmt *m, const char *addr);

/* The method table rpc_server_start serves (handlers.c). */
extern const struct rpc_method mgmt_methods[];
extern const unsigned mgmt_nmethods;
/* The entry for a method's short name ("Connect"), or NULL. */
const struct rpc_method *mgmt_method_find(const char *name);

#endif
