/*
 * A loded that joins a system whose management service another loded hosts
 * (--join HOST:PORT). It logs in with the credentials file --join-cred names
 * (a system administrator, or a node user of tenant "system"), joins as an
 * engine (EngineJoin) and then sends EngineHeartbeat every heartbeat_ms.
 * Every reply carries the service's signing keys, its revocations, its
 * heartbeat and grace, and the pool map when the engine lacks its version:
 * the targets check capabilities with those keys and refuse requests
 * placed with an older map.
 *
 * A loded that hosts a replica of a replicated service (mgmt_replicas) is
 * a member too, of its own service: it calls its local replica, which
 * redirects to the leader (call() follows, and goes back to the local
 * replica when the leader stops answering); its targets keep verifying
 * with the local replica's keyring and revocations (local_tables), and its
 * credentials file may appear only once the first leader wrote it.
 *
 * Fencing. The engine serves data only while the map says it is UP, DRAIN
 * or NEW and it has heard from the service within the grace period. An
 * engine that cannot reach the service may already be DOWN in a newer map
 * that clients read around; serving writes then would split the data, so it
 * refuses them (-LODE_EFENCED) until a heartbeat gets through again.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "auth/auth.h"
#include "common/clock.h"
#include "lode/lode.h"
#include "lode/mgmt/v1/mgmt.pb-c.h"
#include "mgmt/rpc.h"
#include "server/join.h"
#include "server/rebuild.h"
#include "server/srv.h"

#define M(name) "/lode.mgmt.v1.Mgmt/" name
#define RPC_TIMEOUT_MS 2000
#define HEARTBEAT_DEFAULT_MS 500
#define GRACE_DEFAULT_MS 3000

struct member {
	struct srv *s;
	rpc_channel_t *home;  /* the configured address */
	rpc_channel_t *ch;    /* home, or the leader it redirected to */
	char join[256], cred[4096];
	bool local_tables;    /* keys and revocations are the local replica's */
	bool cred_read;
	char user[128];
	char secret[AUTH_SECRET_MAX + 1];
	uint8_t uuid[16];
	uint8_t tok[AUTH_CAP_SIZE];
	int64_t tok_renew_ms; /* log in again from here on (0: no token) */
	uint32_t engine_id;
	bool joined;
	int64_t last_ok_ms;   /* clock_mono_ms of the last reply the service gave (0: never) */
	unsigned heartbeat_ms, grace_ms;
	uint8_t state;        /* this engine's state in the last map (STATE_*) */
	uint32_t taken_ver;   /* that map's version: heartbeats say it, and the
			       * service leaves a map of that version out */
	struct auth_keyring keys;
	struct auth_revoked revoked;
	pthread_t th;
	bool running;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;
	char last_err[256];   /* logged once, not every heartbeat */
};

/* The wall clock: a token's expiry is a date (waits and the fence use clock.h). */
static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int srv_cred_read(const char *path, char *user, size_t ucap, char *secret, size_t scap,
		  char *msg, size_t cap)
{
	char line[600];
	FILE *f = fopen(path, "r");

	if (!f) {
		snprintf(msg, cap, "%s: %s", path, strerror(errno));
		return -errno;
	}
	user[0] = secret[0] = 0;
	while (fgets(line, sizeof(line), f)) {
		char *v = strchr(line, ':');

		if (!v)
			continue;
		*v++ = 0;
		v += strspn(v, " \t");
		v[strcspn(v, "\r\n")] = 0;
		if (strcmp(line, "user") == 0)
			snprintf(user, ucap, "%s", v);
		else if (strcmp(line, "secret") == 0)
			snprintf(secret, scap, "%s", v);
	}
	fclose(f);
	if (!user[0] || !secret[0]) {
		snprintf(msg, cap, "%s: needs a \"user:\" and a \"secret:\" line", path);
		return -EINVAL;
	}
	return 0;
}

/* The engine's identity: <path>/engine.uuid, made on the first start. */
int srv_engine_uuid(const char *dir, uint8_t uuid[16], char *msg, size_t cap)
{
	char path[4200], hex[40] = "";
	FILE *f;

	snprintf(path, sizeof(path), "%s/engine.uuid", dir);
	if ((f = fopen(path, "r"))) {
		bool ok = fgets(hex, sizeof(hex), f) != NULL;

		fclose(f);
		for (unsigned i = 0; ok && i < 16; i++) {
			unsigned b;

			ok = sscanf(hex + 2 * i, "%2x", &b) == 1;
			uuid[i] = (uint8_t)b;
		}
		if (!ok) {
			snprintf(msg, cap, "%s: not an engine uuid (32 hex digits)", path);
			return -LODE_ECORRUPT;
		}
		return 0;
	}
	if (errno != ENOENT) {
		snprintf(msg, cap, "%s: %s", path, strerror(errno));
		return -errno;
	}
	do {
		if (auth_random(uuid, 16) < 0) {
			snprintf(msg, cap, "no randomness for the engine uuid");
			return -EIO;
		}
	} while (!memcmp(uuid, (uint8_t[16]){0}, 16));
	for (unsigned i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", uuid[i]);
	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		snprintf(msg, cap, "%s: %s", dir, strerror(errno));
		return -errno;
	}
	{
		char tmp[4300];
		int fd;

		snprintf(tmp, sizeof(tmp), "%s.tmp", path);
		fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0 || dprintf(fd, "%s\n", hex) < 0 || fsync(fd) < 0 || close(fd) < 0 ||
		    rename(tmp, path) < 0) {
			snprintf(msg, cap, "%s: %s", path, strerror(errno));
			if (fd >= 0)
				close(fd);
			return -errno;
		}
	}
	return 0;
}

/* ---- what a reply carries --------------------------------------------------- */

/* Make the ring hold exactly the service's keys (ids, key bytes, retirement). */
static void keys_take(struct member *m, Lode__Mgmt__V1__SigningKeyInfo **v, size_t n)
{
	struct auth_key have[AUTH_KEYS_MAX];
	unsigned nh = auth_keyring_export(&m->keys, have, AUTH_KEYS_MAX);
	int64_t prune = 0;

	for (size_t i = 0; i < n; i++) {
		const Lode__Mgmt__V1__SigningKeyInfo *k = v[i];
		bool found = false;

		if (k->key.len != AUTH_KEY_SIZE || k->id == 0)
			continue;
		for (unsigned j = 0; j < nh; j++) {
			if (have[j].id != k->id)
				continue;
			found = true;
			if (k->retired_unix_ms > 0 && have[j].retired_ms != k->retired_unix_ms)
				auth_keyring_retire(&m->keys, k->id, k->retired_unix_ms);
		}
		if (!found)
			auth_keyring_add(&m->keys, k->id, k->key.data, k->retired_unix_ms);
	}
	/* Keys the service dropped are retired ones: prune up to the newest of them. */
	for (unsigned j = 0; j < nh; j++) {
		bool listed = false;

		for (size_t i = 0; i < n && !listed; i++)
			listed = v[i]->id == have[j].id;
		if (!listed && have[j].retired_ms > prune)
			prune = have[j].retired_ms;
	}
	if (prune)
		auth_keyring_prune(&m->keys, prune);
	memset(have, 0, sizeof(have));
}

static void revocations_take(struct member *m, Lode__Mgmt__V1__RevocationInfo **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		auth_revoked_set(&m->revoked, v[i]->user, v[i]->before_unix_ms);
}

/* The map: its version for the targets' checks, this engine's state, the timers. */
static void map_take(struct member *m, const Lode__Mgmt__V1__PoolMap *map)
{
	struct srv *s = m->s;
	uint32_t old = atomic_load(&s->map_ver);

	if (!map)
		return;
	if (map->heartbeat_ms)
		m->heartbeat_ms = map->heartbeat_ms;
	if (map->grace_ms)
		m->grace_ms = map->grace_ms;
	for (size_t i = 0; i < map->n_engines; i++) {
		if (map->engines[i]->id != m->engine_id)
			continue;
		if (m->state != (uint8_t)map->engines[i]->state)
			srv_log("engine %u is %s in pool map version %u", m->engine_id,
				map->engines[i]->state == LODE__MGMT__V1__STATE__STATE_UP      ? "UP"
				: map->engines[i]->state == LODE__MGMT__V1__STATE__STATE_DOWN  ? "DOWN"
				: map->engines[i]->state == LODE__MGMT__V1__STATE__STATE_DRAIN ? "DRAIN"
				: map->engines[i]->state == LODE__MGMT__V1__STATE__STATE_NEW   ? "NEW"
				: map->engines[i]->state == LODE__MGMT__V1__STATE__STATE_OUT   ? "OUT"
											       : "?",
				map->version);
		m->state = (uint8_t)map->engines[i]->state;
	}
	m->taken_ver = map->version;
	/* Never backwards: the service's hook on a hosting engine stores it
	 * too, and an older version would let older maps' writes through
	 * (op_map_check, op_reclaim_clear). */
	while (map->version > old && !atomic_compare_exchange_weak(&s->map_ver, &old, map->version))
		;
}

/* Whether the engine may serve data now. */
static void fence_update(struct member *m, int64_t now)
{
	bool in_map = m->state == LODE__MGMT__V1__STATE__STATE_UP ||
		      m->state == LODE__MGMT__V1__STATE__STATE_DRAIN ||
		      m->state == LODE__MGMT__V1__STATE__STATE_NEW;
	bool heard = m->last_ok_ms && now - m->last_ok_ms <= (int64_t)m->grace_ms;
	bool fenced = !(m->joined && in_map && heard);

	if (atomic_exchange(&m->s->fenced, fenced) != fenced)
		srv_log("engine %u %s", m->engine_id,
			fenced ? (in_map ? "lost the management service: not serving data"
					 : "is out of the pool map: not serving data")
			       : "serving data");
}

/* ---- the calls ------------------------------------------------------------------ */

static void log_once(struct member *m, const char *what, const char *msg)
{
	char line[256];

	snprintf(line, sizeof(line), "%s: %s", what, msg);
	if (strcmp(line, m->last_err) != 0) {
		srv_log("%s", line);
		snprintf(m->last_err, sizeof(m->last_err), "%s", line);
	}
}

/* Call on m->ch, home again if not already there. */
static void go_home(struct member *m)
{
	if (m->ch != m->home)
		rpc_channel_close(m->ch);
	m->ch = m->home;
}

/*
 * One call, following a replicated service's redirects (a few hops): a
 * follower names the leader; a leader that no longer answers sends us back
 * to the configured address, which knows the new one.
 */
static int call(struct member *m, const char *method, const ProtobufCMessage *req,
		const ProtobufCMessageDescriptor *rd, bool with_cap, ProtobufCMessage **rep)
{
	char msg[256] = "", leader[256];
	int st = RPC_UNAVAILABLE;

	for (int hop = 0; hop < 4; hop++) {
		rpc_channel_t *next;
		int r;

		msg[0] = '\0';
		st = rpc_call(m->ch, method, req, rd, with_cap ? m->tok : NULL,
			      with_cap ? AUTH_CAP_SIZE : 0, RPC_TIMEOUT_MS, rep, msg, sizeof(msg));
		if (st != RPC_UNAVAILABLE)
			break;
		r = rpc_redirect_parse(msg, leader, sizeof(leader));
		if (r == 1 && rpc_channel_reopen(m->home, leader, &next) == 0) {
			go_home(m);
			m->ch = next;
			continue;
		}
		if (r == -1 && m->ch != m->home) {
			go_home(m);
			continue;
		}
		break; /* no leader yet, or home does not answer: the next turn retries */
	}
	if (st != RPC_OK) {
		log_once(m, method + 19, msg[0] ? msg : "failed");
		return st;
	}
	return RPC_OK;
}

static int login(struct member *m)
{
	Lode__Mgmt__V1__ConnectRequest req = LODE__MGMT__V1__CONNECT_REQUEST__INIT;
	Lode__Mgmt__V1__ConnectReply *rep = NULL;
	char msg[256];
	int st;

	/* A replica's credentials appear once the first leader wrote them. */
	if (!m->cred_read) {
		if (srv_cred_read(m->cred, m->user, sizeof(m->user), m->secret, sizeof(m->secret), msg,
			      sizeof(msg)) < 0) {
			log_once(m, "credentials", msg);
			return RPC_UNAVAILABLE;
		}
		m->cred_read = true;
	}
	req.user = m->user;
	req.secret.data = (uint8_t *)m->secret;
	req.secret.len = strlen(m->secret);
	req.pool = (char *)"";
	st = call(m, M("Connect"), &req.base, &lode__mgmt__v1__connect_reply__descriptor, false,
		  (ProtobufCMessage **)&rep);
	if (st != RPC_OK)
		return st;
	if (rep->capability.len == AUTH_CAP_SIZE) {
		int64_t now = now_ms();

		memcpy(m->tok, rep->capability.data, AUTH_CAP_SIZE);
		/* Log in again at two thirds of the token's life. */
		m->tok_renew_ms = now + (rep->expires_unix_ms - now) * 2 / 3;
	} else {
		st = RPC_INTERNAL;
	}
	protobuf_c_message_free_unpacked(&rep->base, NULL);
	return st;
}

/* What every EngineJoin and EngineHeartbeat reply carries: the service's
 * keys and revocations (unless this engine checks with its own replica's)
 * and the map. */
static void reply_take(struct member *m, Lode__Mgmt__V1__SigningKeyInfo **keys, size_t nkeys,
		       Lode__Mgmt__V1__RevocationInfo **revs, size_t nrevs,
		       const Lode__Mgmt__V1__PoolMap *map)
{
	if (!m->local_tables) {
		keys_take(m, keys, nkeys);
		revocations_take(m, revs, nrevs);
	}
	map_take(m, map);
}

static int join(struct member *m)
{
	Lode__Mgmt__V1__EngineJoinRequest req = LODE__MGMT__V1__ENGINE_JOIN_REQUEST__INIT;
	Lode__Mgmt__V1__EngineJoinReply *rep = NULL;
	int st;

	req.uuid.data = m->uuid;
	req.uuid.len = sizeof(m->uuid);
	req.address = (char *)m->s->cfg->listen;
	req.ntargets = m->s->cfg->targets;
	st = call(m, M("EngineJoin"), &req.base, &lode__mgmt__v1__engine_join_reply__descriptor, true,
		  (ProtobufCMessage **)&rep);
	if (st != RPC_OK)
		return st;
	if (!m->joined || m->engine_id != rep->engine_id)
		srv_log("joined the system as engine %u", rep->engine_id);
	m->engine_id = rep->engine_id;
	atomic_store(&m->s->engine_id, (int64_t)rep->engine_id);
	m->joined = true;
	reply_take(m, rep->keys, rep->n_keys, rep->revocations, rep->n_revocations, rep->map);
	protobuf_c_message_free_unpacked(&rep->base, NULL);
	return RPC_OK;
}

static int heartbeat(struct member *m)
{
	Lode__Mgmt__V1__HeartbeatRequest req = LODE__MGMT__V1__HEARTBEAT_REQUEST__INIT;
	Lode__Mgmt__V1__RebuildStatus rs = LODE__MGMT__V1__REBUILD_STATUS__INIT;
	Lode__Mgmt__V1__HeartbeatReply *rep = NULL;
	Lode__Mgmt__V1__Target tv[SRV_TARGETS_MAX], *tp[SRV_TARGETS_MAX];
	struct srv *s = m->s;
	int st;

	req.engine_id = m->engine_id;
	req.uuid.data = m->uuid;
	req.uuid.len = sizeof(m->uuid);
	req.map_version = m->taken_ver;
	for (unsigned i = 0; i < s->ntargets; i++) {
		struct srv_tgt_info ti;

		srv_tgt_info(s, i, &ti);
		lode__mgmt__v1__target__init(&tv[i]);
		tv[i].id = i;
		tv[i].state = LODE__MGMT__V1__STATE__STATE_UP;
		tv[i].capacity = ti.capacity;
		tv[i].used = ti.used;
		tv[i].requests = ti.requests;
		tv[i].errors = ti.errors;
		tv[i].load = ti.load;
		tv[i].ram = ti.ram;
		tp[i] = &tv[i];
	}
	req.targets = tp;
	req.n_targets = s->ntargets;
	if (atomic_load(&s->rebuild)) {
		struct mgmt_rebuild_info ri;

		rebuild_report(atomic_load(&s->rebuild), &ri);
		rs.map_version = ri.map_version;
		rs.running = ri.running;
		rs.objects_done = ri.objects_done;
		rs.objects_total = ri.objects_total;
		rs.bytes_done = ri.bytes_done;
		rs.bytes_total = ri.bytes_total;
		rs.started_unix_ms = ri.started_unix_ms;
		rs.finished_unix_ms = ri.finished_unix_ms;
		rs.errno_value = ri.errno_value;
		rs.reclaimed_version = ri.reclaimed_version;
		req.rebuild = &rs;
	}
	st = call(m, M("EngineHeartbeat"), &req.base, &lode__mgmt__v1__heartbeat_reply__descriptor,
		  true, (ProtobufCMessage **)&rep);
	if (st != RPC_OK)
		return st;
	reply_take(m, rep->keys, rep->n_keys, rep->revocations, rep->n_revocations, rep->map);
	if (rep->heartbeat_ms)
		m->heartbeat_ms = rep->heartbeat_ms;
	if (rep->grace_ms)
		m->grace_ms = rep->grace_ms;
	protobuf_c_message_free_unpacked(&rep->base, NULL);
	return RPC_OK;
}

/*
 * One turn: log in when the token is old, join when not joined (or the
 * service forgot us), else heartbeat. Returns the last call's status.
 */
static int turn(struct member *m)
{
	int64_t now = now_ms();
	int st;

	if (!m->tok_renew_ms || now >= m->tok_renew_ms) {
		if ((st = login(m)) != RPC_OK)
			return st;
	}
	st = m->joined ? heartbeat(m) : join(m);
	if (st == RPC_NOT_FOUND && m->joined) {
		srv_log("the service does not know engine %u: joining again", m->engine_id);
		m->joined = false;
		st = join(m);
	}
	if (st == RPC_UNAUTHENTICATED)
		m->tok_renew_ms = 0; /* expired or revoked: log in again next turn */
	if (st == RPC_OK) {
		m->last_ok_ms = clock_mono_ms();
		m->last_err[0] = 0;
	}
	return st;
}

static void *member_main(void *arg)
{
	struct member *m = arg;

	pthread_setname_np(pthread_self(), "loded-member");
	pthread_mutex_lock(&m->lock);
	while (!m->stop) {
		struct timespec until;
		int64_t ms;

		pthread_mutex_unlock(&m->lock);
		turn(m);
		fence_update(m, clock_mono_ms());
		pthread_mutex_lock(&m->lock);
		ms = m->last_ok_ms ? m->heartbeat_ms : 250; /* not joined yet: try sooner */
		clock_mono_after(&until, ms);
		if (!m->stop)
			pthread_cond_timedwait(&m->cond, &m->lock, &until);
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

int member_start(struct srv *s, const char *join, const char *cred, bool local_tables,
		 struct member **out, char *msg, size_t cap)
{
	const struct srv_config *c = s->cfg;
	struct rpc_tls tls = {.ca = c->join_ca[0] ? c->join_ca : NULL};
	struct member *m = calloc(1, sizeof(*m));
	int rc, st;

	if (!m) {
		snprintf(msg, cap, "out of memory");
		return -ENOMEM;
	}
	m->s = s;
	m->local_tables = local_tables;
	snprintf(m->join, sizeof(m->join), "%s", join);
	snprintf(m->cred, sizeof(m->cred), "%s", cred);
	m->heartbeat_ms = HEARTBEAT_DEFAULT_MS;
	m->grace_ms = GRACE_DEFAULT_MS;
	pthread_mutex_init(&m->lock, NULL);
	clock_cond_init(&m->cond);
	auth_keyring_init(&m->keys);
	auth_revoked_init(&m->revoked);
	atomic_store(&s->fenced, true);
	if (!local_tables && (rc = srv_cred_read(cred, m->user, sizeof(m->user), m->secret,
					     sizeof(m->secret), msg, cap)) < 0)
		goto fail;
	m->cred_read = !local_tables;
	if ((rc = srv_engine_uuid(c->path, m->uuid, msg, cap)) < 0)
		goto fail;
	if ((rc = rpc_channel_open(join, c->join_ca[0] ? &tls : NULL, &m->home)) < 0) {
		snprintf(msg, cap, "the management service at %s: %s", join, lode_strerror(rc));
		goto fail;
	}
	m->ch = m->home;
	/*
	 * The first turn runs here: credentials the service refuses, or a
	 * join it refuses, end the start with the service's words. A service
	 * that does not answer yet is waited for by the thread (fenced).
	 */
	st = turn(m);
	if (st != RPC_OK && st != RPC_UNAVAILABLE && st != RPC_DEADLINE_EXCEEDED) {
		snprintf(msg, cap, "joining %s: %s", join, m->last_err);
		rc = rpc_status_errno(st);
		goto fail;
	}
	if (st != RPC_OK)
		srv_log("the management service at %s does not answer yet; retrying", join);
	fence_update(m, clock_mono_ms());
	if (!local_tables) {
		s->keys = &m->keys;
		s->revoked = &m->revoked;
	}
	if (pthread_create(&m->th, NULL, member_main, m) != 0) {
		snprintf(msg, cap, "cannot start the heartbeat thread");
		rc = -EAGAIN;
		goto fail;
	}
	m->running = true;
	*out = m;
	return 0;
fail:
	if (!local_tables) {
		s->keys = NULL;
		s->revoked = NULL;
	}
	member_stop(m);
	return rc < 0 ? rc : -EINVAL;
}

void member_stop(struct member *m)
{
	if (!m)
		return;
	if (m->running) {
		pthread_mutex_lock(&m->lock);
		m->stop = true;
		pthread_cond_signal(&m->cond);
		pthread_mutex_unlock(&m->lock);
		pthread_join(m->th, NULL);
	}
	if (m->ch && m->ch != m->home)
		rpc_channel_close(m->ch);
	if (m->home)
		rpc_channel_close(m->home);
	auth_keyring_fini(&m->keys);
	auth_revoked_fini(&m->revoked);
	pthread_mutex_destroy(&m->lock);
	pthread_cond_destroy(&m->cond);
	memset(m->secret, 0, sizeof(m->secret));
	memset(m->tok, 0, sizeof(m->tok));
	free(m);
}
