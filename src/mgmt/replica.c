/*
 * The management service replicated with Raft (src/repl): 1, 3 or 5
 * replicas, each a loded, by state transfer.
 *
 * Only the leader runs handlers that change the state, and the timers
 * (rotation, failure detection). A commit there packs the whole model and
 * proposes it (mgmt_state_commit -> replica_propose); repl_propose returns
 * once the entry was committed and applied here. Every replica applies
 * every committed state in log order (mgmt_replica_apply): it writes
 * state.pb, so a restart and a reader of the directory have it, and
 * replaces its model, keyring, revocations and map version.
 *
 * The leader's own entry is not unpacked again: its model already is that
 * state, and the handler that proposed it holds m->lock while it waits, so
 * the apply (on the replica's thread) must not take the lock for it. The
 * proposal in flight is kept under prop_lock; apply recognises it by its
 * bytes. A state that is not this replica's own (a follower, or a leader
 * that lost its leadership while proposing) does take m->lock. In the
 * second case the proposer holds it until repl_propose gives up (propose_ms),
 * so a deposed leader's apply waits that long once; nothing deadlocks.
 *
 * The snapshot is the last applied bytes (kept here), never the model, so
 * it needs no m->lock either.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "lode/errno.h"
#include "mgmt/state.h"
#include "repl/repl.h"

#define PROPOSE_MIN_MS 2000

/* A commit on the leader: through the log. */
static int replica_propose(void *arg, const void *buf, size_t len)
{
	struct mgmt *m = arg;
	bool applied;
	int rc;

	pthread_mutex_lock(&m->prop_lock);
	m->prop_buf = buf;
	m->prop_len = len;
	m->prop_applied = false;
	pthread_mutex_unlock(&m->prop_lock);
	rc = repl_propose(m->repl, buf, len, m->propose_ms);
	pthread_mutex_lock(&m->prop_lock);
	applied = m->prop_applied;
	m->prop_buf = NULL;
	m->prop_len = 0;
	pthread_mutex_unlock(&m->prop_lock);
	/* Applied here means committed, whatever the wait said. */
	return applied ? 0 : rc ? rc : -EIO;
}

/* Make the keyring hold the model's keys (ids, bytes, retirement) and the
 * revocation table its revocations. Keys the model dropped are retired
 * ones: pruned up to the newest of them. */
static void tables_sync(struct mgmt *m)
{
	const ms_state *s = m->st.s;
	struct auth_key have[AUTH_KEYS_MAX];
	unsigned nh = auth_keyring_export(&m->kr, have, AUTH_KEYS_MAX);
	int64_t prune = 0;

	for (size_t i = 0; i < s->n_keys; i++) {
		const ms_key *k = s->keys[i];
		bool found = false;

		for (unsigned j = 0; j < nh; j++) {
			if (have[j].id != k->id)
				continue;
			found = true;
			if (k->retired_unix_ms > 0 && have[j].retired_ms != k->retired_unix_ms)
				auth_keyring_retire(&m->kr, k->id, k->retired_unix_ms);
		}
		if (!found)
			auth_keyring_add(&m->kr, k->id, k->key.data, k->retired_unix_ms);
	}
	for (unsigned j = 0; j < nh; j++) {
		bool listed = false;

		for (size_t i = 0; i < s->n_keys && !listed; i++)
			listed = s->keys[i]->id == have[j].id;
		if (!listed && have[j].retired_ms > prune)
			prune = have[j].retired_ms;
	}
	if (prune)
		auth_keyring_prune(&m->kr, prune);
	OPENSSL_cleanse(have, sizeof(have));
	for (size_t i = 0; i < s->n_revocations; i++)
		auth_revoked_set(&m->rv, s->revocations[i]->user, s->revocations[i]->before_unix_ms);
}

int mgmt_replica_apply(struct mgmt *m, const void *buf, size_t len)
{
	struct layout_map *map = NULL;
	ms_state *s = NULL;
	const char *why = NULL;
	uint8_t *copy = malloc(len ? len : 1);
	bool own;
	int rc;

	if (!copy)
		return -ENOMEM;
	memcpy(copy, buf, len);
	pthread_mutex_lock(&m->prop_lock);
	own = m->prop_buf && m->prop_len == len && memcmp(m->prop_buf, buf, len) == 0;
	pthread_mutex_unlock(&m->prop_lock);
	if (!own) {
		rc = ms_state_unpack(buf, len, &s, &why);
		if (rc) {
			fprintf(stderr, "mgmt: a committed state %s: %s; not applied\n",
				why ? "is impossible" : "does not unpack", why ? why : "");
			free(copy);
			return rc;
		}
	}
	rc = ms_file_write_atomic(m->st.dir, m->st.tmp_path, m->st.path, buf, len);
	if (rc)
		fprintf(stderr, "mgmt: writing %s: %s (the log still has the state)\n", m->st.path,
			lode_strerror(rc));
	pthread_mutex_lock(&m->prop_lock);
	free(m->applied);
	m->applied = copy;
	m->applied_len = len;
	m->applied_any = true;
	if (own)
		m->prop_applied = true;
	pthread_mutex_unlock(&m->prop_lock);
	if (own)
		return 0; /* the proposer's model is this state; it finishes the commit */

	pthread_mutex_lock(&m->lock);
	protobuf_c_message_free_unpacked(&m->st.s->base, NULL);
	m->st.s = s;
	free(m->st.saved);
	m->st.saved = malloc(len ? len : 1);
	m->st.saved_len = m->st.saved ? len : 0;
	if (m->st.saved)
		memcpy(m->st.saved, buf, len);
	tables_sync(m);
	if (mgmt_map_load(m, &map) == 0) {
		__atomic_store_n(&m->map_version, (uint32_t)map->version, __ATOMIC_RELEASE);
		layout_map_free(map);
	}
	pthread_mutex_unlock(&m->lock);
	mgmt_map_publish(m);
	return 0;
}

int mgmt_replica_snapshot(struct mgmt *m, void **buf, size_t *len)
{
	int rc = 0;

	pthread_mutex_lock(&m->prop_lock);
	*buf = malloc(m->applied_len ? m->applied_len : 1);
	if (*buf) {
		memcpy(*buf, m->applied ? m->applied : (const uint8_t *)"", m->applied_len);
		*len = m->applied_len;
	} else {
		rc = -ENOMEM;
	}
	pthread_mutex_unlock(&m->prop_lock);
	return rc;
}

/* ---- the fsm ------------------------------------------------------------------------- */

static int fsm_apply(void *arg, const void *buf, size_t len)
{
	return mgmt_replica_apply(arg, buf, len);
}

static int fsm_snapshot(void *arg, void **buf, size_t *len)
{
	return mgmt_replica_snapshot(arg, buf, len);
}

/* Only atomics: a deposed leader's handler may hold m->lock in repl_propose. */
static void fsm_role(void *arg, bool is_leader, uint64_t leader_id)
{
	struct mgmt *m = arg;

	(void)leader_id;
	if (is_leader && !__atomic_load_n(&m->leading, __ATOMIC_ACQUIRE))
		__atomic_store_n(&m->lead_since_ms, mgmt_live_ms(m), __ATOMIC_RELEASE);
	__atomic_store_n(&m->leading, is_leader, __ATOMIC_RELEASE);
	fprintf(stderr, "mgmt: replica %s (leader %llu)\n", is_leader ? "leads" : "follows",
		(unsigned long long)leader_id);
}

/* ---- who serves ------------------------------------------------------------------------ */

bool mgmt_is_leader(mgmt_t *m)
{
	return !m->repl || repl_is_leader(m->repl);
}

bool mgmt_replica_serves(struct mgmt *m, char *msg, size_t msg_cap)
{
	uint64_t id;

	if (mgmt_is_leader(m))
		return true;
	if (repl_leader(m->repl, &id, NULL, 0) == 0) {
		for (unsigned i = 0; i < m->nreplicas; i++) {
			if (m->replicas[i].id != id)
				continue;
			/* Itself, elected but still applying what came before
			 * its term: nobody serves yet. */
			if (id == m->replica_id)
				break;
			snprintf(msg, msg_cap, RPC_NOT_LEADER "%s", m->replicas[i].grpc);
			return false;
		}
	}
	snprintf(msg, msg_cap, RPC_NO_LEADER);
	return false;
}

bool mgmt_replica_lead(struct mgmt *m)
{
	bool any;
	char msg[256] = "";

	if (!m->repl)
		return true;
	if (!repl_is_leader(m->repl))
		return false;
	mgmt_live_elected(m); /* done by the awake before this, as a rule */
	pthread_mutex_lock(&m->prop_lock);
	any = m->applied_any;
	pthread_mutex_unlock(&m->prop_lock);
	if (any)
		return true;
	/*
	 * Nothing was ever committed: this leader makes the first state (or,
	 * holding one from state.pb, proposes that), then the credentials.
	 */
	if (m->st.s->n_tenants) {
		int rc = mgmt_state_commit(&m->st);

		if (rc)
			fprintf(stderr, "mgmt: proposing the state from %s: %s\n", m->st.path,
				lode_strerror(rc));
		else
			tables_sync(m);
		return rc == 0;
	}
	if (mgmt_first_state(m, msg, sizeof(msg)) != 0) {
		fprintf(stderr, "mgmt: %s\n", msg);
		return false;
	}
	tables_sync(m); /* its own entry was not unpacked: the keyring needs key 1 */
	if (mgmt_cred_create(m, m->listen) != 0)
		fprintf(stderr, "mgmt: writing the credentials file %s failed\n", m->admin_cred);
	OPENSSL_cleanse(m->admin_secret, sizeof(m->admin_secret));
	return true;
}

/* ---- start and stop ------------------------------------------------------------------------ */

int mgmt_replica_start(struct mgmt *m, const struct mgmt_config *cfg, char *msg, size_t msg_cap)
{
	struct repl_config rc_cfg = {0};
	struct repl_fsm fsm = {.arg = m,
			       .apply = fsm_apply,
			       .snapshot = fsm_snapshot,
			       .restore = fsm_apply,
			       .role = fsm_role};
	char dir[4200];
	int rc;

	if (cfg->nreplicas > MGMT_REPLICAS_MAX || cfg->nreplicas > REPL_PEERS_MAX) {
		snprintf(msg, msg_cap, "at most %d replicas", MGMT_REPLICAS_MAX);
		return -EINVAL;
	}
	snprintf(dir, sizeof(dir), "%s/raft", m->st.dir);
	rc_cfg.id = cfg->replica_id;
	rc_cfg.dir = dir;
	rc_cfg.npeers = cfg->nreplicas;
	for (unsigned i = 0; i < cfg->nreplicas; i++) {
		m->replicas[i] = cfg->replicas[i];
		rc_cfg.peers[i].id = cfg->replicas[i].id;
		snprintf(rc_cfg.peers[i].addr, sizeof(rc_cfg.peers[i].addr), "%s",
			 cfg->replicas[i].raft);
	}
	m->nreplicas = cfg->nreplicas;
	m->replica_id = cfg->replica_id;
	rc_cfg.election_ms = cfg->election_ms ? cfg->election_ms : 1000;
	rc_cfg.heartbeat_ms = rc_cfg.election_ms / 10 ? rc_cfg.election_ms / 10 : 1;
	m->propose_ms = 2 * rc_cfg.election_ms > PROPOSE_MIN_MS ? 2 * rc_cfg.election_ms
								: PROPOSE_MIN_MS;
	m->st.propose = replica_propose;
	m->st.propose_arg = m;
	rc = repl_start(&rc_cfg, &fsm, &m->repl, msg, msg_cap);
	if (rc) {
		m->st.propose = NULL;
		m->repl = NULL;
	}
	return rc;
}

void mgmt_replica_stop(struct mgmt *m)
{
	repl_stop(m->repl);
	m->repl = NULL;
}
