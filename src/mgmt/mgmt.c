/*
 * The management service as a component (mgmt.h): load the state, rebuild
 * the keyring and the revocation table from it, register the host engine
 * in the pool map, serve the method table on an rpc server, rotate the
 * signing key on a timer, check engines' heartbeats on another, and on the
 * very first start create the system tenant, its administrator, the
 * default pool and the administrator's credentials file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "common/clock.h"
#include "lode/errno.h"
#include "mgmt/mgmt.h"
#include "mgmt/state.h"

#define CRED_FILE_MAX (64u << 10)

int64_t mgmt_now_ms(const struct mgmt *m)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + m->clock_skew_ms;
}

int64_t mgmt_live_ms(const struct mgmt *m)
{
	return clock_mono_ms() + m->live_skew_ms;
}

unsigned mgmt_targets_get(struct mgmt *m, struct mgmt_target_info *out, unsigned max, bool *live)
{
	unsigned n = 0;

	*live = false;
	if (m->hooks.targets)
		n = m->hooks.targets(m->hooks.arg, out, max);
	if (n) {
		*live = true;
		return n < max ? n : max;
	}
	n = m->ntargets < max ? m->ntargets : max;
	for (unsigned i = 0; i < n; i++)
		out[i] = (struct mgmt_target_info){.id = i};
	return n;
}

/*
 * The new key is persisted before the keyring sees it, so no capability is
 * ever signed with a key a restart would forget (auth_keyring_rotate would
 * make the key first). Then the keyring gets it, as the signing key (the
 * highest id), and the previous signer retires there as it did in the
 * state; it keeps verifying what it signed until pruned.
 */
int mgmt_key_rotate(struct mgmt *m)
{
	ms_state *s = m->st.s;
	uint32_t id = s->n_keys ? s->keys[s->n_keys - 1]->id + 1 : 1;
	int64_t now = mgmt_now_ms(m);
	uint8_t key[AUTH_KEY_SIZE];
	int rc;

	if (id > (uint32_t)INT32_MAX)
		return -EOVERFLOW;
	if (auth_random(key, sizeof(key)))
		return -EIO;
	for (size_t i = 0; i < s->n_keys; i++)
		if (s->keys[i]->retired_unix_ms == 0)
			s->keys[i]->retired_unix_ms = now;
	rc = ms_key_add(s, id, key, 0, now);
	if (rc) {
		mgmt_state_rollback(&m->st);
		goto out;
	}
	ms_keys_prune(s, now - m->lifetime_ms);
	rc = mgmt_state_commit(&m->st);
	if (rc)
		goto out;
	rc = auth_keyring_add(&m->kr, id, key, 0);
	if (rc < 0) {
		/* Persisted: the next start has it. */
		fprintf(stderr, "mgmt: key %u is saved but the keyring refused it: %s\n", id,
			lode_strerror(rc));
		goto out;
	}
	for (size_t i = 0; i < s->n_keys; i++)
		if (s->keys[i]->id != id && s->keys[i]->retired_unix_ms == now)
			auth_keyring_retire(&m->kr, s->keys[i]->id, now); /* -ENOENT: not in the ring */
	auth_keyring_prune(&m->kr, now - m->lifetime_ms);
	rc = (int)id;
out:
	OPENSSL_cleanse(key, sizeof(key));
	return rc;
}

/* ---- first start ------------------------------------------------------------------ */

int mgmt_first_state(struct mgmt *m, char *msg, size_t msg_cap)
{
	ms_state *s = m->st.s;
	int64_t now = mgmt_now_ms(m);
	struct mgmt_target_info *ti = calloc(MGMT_TARGETS_MAX, sizeof(*ti));
	uint32_t *ids = calloc(MGMT_TARGETS_MAX, sizeof(*ids));
	uint8_t raw[32], key[AUTH_KEY_SIZE], uuid[16];
	char hash[AUTH_HASH_TEXT];
	ms_tenant *t;
	ms_user *u;
	unsigned n;
	bool live;
	int rc = -ENOMEM;

	if (!ti || !ids)
		goto out;
	s->created_unix_ms = now;
	/* The secret is its hex text: what the credentials file shows is what
	 * Connect takes. */
	if (auth_random(raw, sizeof(raw)) || auth_random(key, sizeof(key))) {
		rc = -EIO;
		goto out;
	}
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(m->admin_secret + 2 * i, 3, "%02x", raw[i]);
	rc = auth_secret_hash(m->admin_secret, strlen(m->admin_secret), hash, sizeof(hash));
	if (rc)
		goto out;
	rc = -ENOMEM;
	t = ms_tenant_add(s, MS_SYSTEM_TENANT, now);
	if (!t)
		goto out;
	u = ms_user_add(s, t->id, MS_ADMIN_USER, hash, now);
	if (!u)
		goto out;
	u->admin = true;
	n = mgmt_targets_get(m, ti, MGMT_TARGETS_MAX, &live);
	for (unsigned i = 0; i < n; i++)
		ids[i] = ti[i].id;
	if (ms_uuid_fresh(s, uuid)) {
		rc = -EIO;
		goto out;
	}
	if (!ms_pool_add(s, MS_DEFAULT_POOL, uuid, 0, ids, n, now))
		goto out;
	if (ms_key_add(s, 1, key, 0, now))
		goto out;
	/* Replicated, there is no host engine 0: joined engines start at 1. */
	if (m->nreplicas)
		s->next_engine_id = 1;
	rc = mgmt_state_commit(&m->st);
out:
	if (rc)
		snprintf(msg, msg_cap, "creating the first state in %s: %s", m->st.dir,
			 lode_strerror(rc));
	OPENSSL_cleanse(raw, sizeof(raw));
	OPENSSL_cleanse(key, sizeof(key));
	free(ti);
	free(ids);
	return rc;
}

/* ---- open and close (no network) ------------------------------------------------------ */

static char *strdup_or_null(const char *s, bool *oom)
{
	char *d;

	if (!s)
		return NULL;
	d = strdup(s);
	if (!d)
		*oom = true;
	return d;
}

/* The keyring and revocation table from the model. Replicated, a missing
 * signer is not made here: keys come through the log. */
static int live_tables_load(struct mgmt *m, char *msg, size_t msg_cap)
{
	const ms_state *s = m->st.s;
	bool signer = false;
	int rc;

	for (size_t i = 0; i < s->n_keys; i++) {
		rc = auth_keyring_add(&m->kr, s->keys[i]->id, s->keys[i]->key.data,
				      s->keys[i]->retired_unix_ms);
		if (rc < 0) {
			snprintf(msg, msg_cap, "signing key %u: %s", s->keys[i]->id,
				 lode_strerror(rc));
			return rc;
		}
		signer |= s->keys[i]->retired_unix_ms == 0;
	}
	for (size_t i = 0; i < s->n_revocations; i++) {
		rc = auth_revoked_set(&m->rv, s->revocations[i]->user,
				      s->revocations[i]->before_unix_ms);
		if (rc) {
			snprintf(msg, msg_cap, "revocations: %s", lode_strerror(rc));
			return rc;
		}
	}
	if (!signer && !m->nreplicas) {
		rc = mgmt_key_rotate(m);
		if (rc < 0) {
			snprintf(msg, msg_cap, "no signing key, and making one failed: %s",
				 lode_strerror(rc));
			return rc;
		}
	}
	return 0;
}

int mgmt_open(const struct mgmt_config *cfg, const struct mgmt_hooks *hooks, struct mgmt **out,
	      char *msg, size_t msg_cap)
{
	struct mgmt *m;
	uint8_t decoy[32];
	bool oom = false;
	int rc;

	if (msg_cap)
		msg[0] = '\0';
	if (!cfg || !cfg->state_dir || !cfg->state_dir[0] || !out) {
		snprintf(msg, msg_cap, "the configuration needs a state directory");
		return -EINVAL;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->st.lock_fd = -1;
	if (hooks)
		m->hooks = *hooks;
	m->listen = strdup_or_null(cfg->listen, &oom);
	m->engine_addr = strdup_or_null(cfg->engine_addr, &oom);
	m->admin_cred = strdup_or_null(cfg->admin_cred, &oom);
	m->ntargets = cfg->ntargets;
	m->lifetime_ms = (int64_t)(cfg->cap_lifetime_s ? cfg->cap_lifetime_s : 600) * 1000;
	m->key_rotate_s = cfg->key_rotate_s;
	m->heartbeat_ms = cfg->heartbeat_ms ? cfg->heartbeat_ms : 500;
	m->grace_ms = cfg->grace_ms ? cfg->grace_ms : 3000;
	/* Replicated: mgmt_replica_start starts the replica itself. */
	m->nreplicas = cfg->nreplicas;
	if (oom) {
		rc = -ENOMEM;
		goto fail_early;
	}
	rc = -pthread_mutex_init(&m->lock, NULL);
	if (rc)
		goto fail_early;
	rc = -pthread_mutex_init(&m->notify_lock, NULL);
	if (rc) {
		pthread_mutex_destroy(&m->lock);
		goto fail_early;
	}
	rc = -clock_cond_init(&m->timer_cond); /* its waits run on CLOCK_MONOTONIC */
	if (rc) {
		pthread_mutex_destroy(&m->notify_lock);
		pthread_mutex_destroy(&m->lock);
		goto fail_early;
	}
	rc = -pthread_mutex_init(&m->prop_lock, NULL);
	if (rc) {
		pthread_cond_destroy(&m->timer_cond);
		pthread_mutex_destroy(&m->notify_lock);
		pthread_mutex_destroy(&m->lock);
		goto fail_early;
	}
	rc = auth_keyring_init(&m->kr);
	m->kr_init = rc == 0;
	if (!rc) {
		rc = auth_revoked_init(&m->rv);
		m->rv_init = rc == 0;
	}
	if (!rc)
		rc = auth_random(decoy, sizeof(decoy)) ? -EIO : 0;
	if (!rc)
		rc = auth_secret_hash(decoy, sizeof(decoy), m->decoy_hash, sizeof(m->decoy_hash));
	if (rc) {
		snprintf(msg, msg_cap, "setting up: %s", lode_strerror(rc));
		goto fail;
	}

	rc = mgmt_state_open(&m->st, cfg->state_dir, msg, msg_cap);
	if (rc < 0)
		goto fail;
	if (rc == 1 || m->nreplicas) {
		if (!m->admin_cred || !m->admin_cred[0]) {
			snprintf(msg, msg_cap,
				 "first start: the configuration needs admin_cred, where the "
				 "administrator's credentials go");
			rc = -EINVAL;
			goto fail;
		}
	}
	/* Replicated, the first leader makes the first state (replica.c). */
	if (rc == 1 && !m->nreplicas) {
		m->first_start = true;
		rc = mgmt_first_state(m, msg, msg_cap);
		if (rc)
			goto fail;
	}
	rc = live_tables_load(m, msg, msg_cap);
	if (rc)
		goto fail;
	/* Replicated, there is no host engine: every engine joins. */
	rc = m->nreplicas ? 0 : mgmt_host_register(m, cfg->engine_uuid, msg, msg_cap);
	if (rc)
		goto fail;
	/* Every engine's silence counts from now, not from before a restart. */
	m->started_ms = mgmt_live_ms(m);
	m->started_unix_ms = mgmt_now_ms(m);
	for (size_t i = 0; i < m->st.s->n_engines; i++)
		if (!mgmt_live_get(m, m->st.s->engines[i]->id, m->started_ms)) {
			rc = -ENOMEM;
			snprintf(msg, msg_cap, "out of memory");
			goto fail;
		}
	mgmt_map_publish(m);
	*out = m;
	return 0;

fail:
	mgmt_close(m);
	return rc;
fail_early:
	free(m->listen);
	free(m->engine_addr);
	free(m->admin_cred);
	free(m);
	return rc;
}

void mgmt_close(struct mgmt *m)
{
	if (!m)
		return;
	mgmt_state_close(&m->st);
	mgmt_live_free(m);
	if (m->kr_init)
		auth_keyring_fini(&m->kr);
	if (m->rv_init)
		auth_revoked_fini(&m->rv);
	pthread_cond_destroy(&m->timer_cond);
	pthread_mutex_destroy(&m->prop_lock);
	pthread_mutex_destroy(&m->notify_lock);
	pthread_mutex_destroy(&m->lock);
	if (m->applied)
		OPENSSL_cleanse(m->applied, m->applied_len);
	free(m->applied);
	OPENSSL_cleanse(m->admin_secret, sizeof(m->admin_secret));
	free(m->listen);
	free(m->engine_addr);
	free(m->admin_cred);
	free(m);
}

/* ---- the credentials file ---------------------------------------------------------------- */

/* "HOST:PORT" a client on this machine can use: a wildcard listen address
 * (all interfaces) becomes the loopback one. */
static void mgmt_address(const char *listen, int port, char *out, size_t cap)
{
	const char *end = listen[0] == '[' ? strchr(listen, ']') : strrchr(listen, ':');
	size_t n = end ? (size_t)(end - listen) + (listen[0] == '[') : strlen(listen);
	char host[256];

	snprintf(host, sizeof(host), "%.*s", (int)n, listen);
	if (!host[0] || strcmp(host, "0.0.0.0") == 0 || strcmp(host, "[::]") == 0 ||
	    strcmp(host, "::") == 0)
		snprintf(host, sizeof(host), "127.0.0.1");
	snprintf(out, cap, "%s:%d", host, port);
}

static int cred_write(const char *path, const char *text)
{
	size_t n = strlen(path);
	char *dir = malloc(n + 2), *tmp = malloc(n + 5), *slash;
	int rc = -ENOMEM;

	if (!dir || !tmp)
		goto out;
	snprintf(dir, n + 2, "%s", path);
	slash = strrchr(dir, '/');
	if (!slash)
		snprintf(dir, n + 2, ".");
	else if (slash == dir)
		slash[1] = '\0';
	else
		*slash = '\0';
	snprintf(tmp, n + 5, "%s.tmp", path);
	rc = ms_dir_make(dir, 0700);
	if (!rc)
		rc = ms_file_write_atomic(dir, tmp, path, text, strlen(text));
out:
	free(dir);
	free(tmp);
	return rc;
}

int mgmt_cred_create(struct mgmt *m, const char *addr)
{
	char text[1024];

	snprintf(text, sizeof(text),
		 "# Lode: the system administrator's credentials, written by the management\n"
		 "# service at its first start. Keep this file private (mode 0600).\n"
		 "user: %s\n"
		 "secret: %s\n"
		 "mgmt: %s\n",
		 MS_ADMIN_USER, m->admin_secret, addr);
	int rc = cred_write(m->admin_cred, text);

	OPENSSL_cleanse(text, sizeof(text));
	return rc;
}

/*
 * A later start: the secret stays as it is (the state has only its hash),
 * but with port 0 the port changes every start, so a "mgmt:" line still in
 * the file is brought up to date. A file that is gone stays gone.
 */
static void cred_update(struct mgmt *m, const char *addr)
{
	char *text = NULL, *out = NULL, *line, *save = NULL;
	size_t cap, len = 0;
	bool changed = false;
	ssize_t n;
	int fd;

	if (!m->admin_cred || !m->admin_cred[0])
		return;
	fd = open(m->admin_cred, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	text = calloc(1, CRED_FILE_MAX + 1);
	cap = CRED_FILE_MAX + 512;
	out = calloc(1, cap);
	if (!text || !out)
		goto done;
	while (len < CRED_FILE_MAX && (n = read(fd, text + len, CRED_FILE_MAX - len)) > 0)
		len += (size_t)n;
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		const char *v = line + strspn(line, " \t");
		size_t o = strlen(out);

		if (strncmp(v, "mgmt:", 5) == 0) {
			v += 5;
			v += strspn(v, " \t");
			if (strcmp(v, addr) != 0)
				changed = true;
			snprintf(out + o, cap - o, "mgmt: %s\n", addr);
		} else {
			snprintf(out + o, cap - o, "%s\n", line);
		}
	}
	if (changed && cred_write(m->admin_cred, out) < 0)
		fprintf(stderr, "mgmt: cannot update the address in %s\n", m->admin_cred);
done:
	close(fd);
	if (text)
		OPENSSL_cleanse(text, CRED_FILE_MAX + 1);
	if (out)
		OPENSSL_cleanse(out, cap);
	free(text);
	free(out);
}

/* ---- the rotation timer ---------------------------------------------------------------------- */

/* Rotate when the signing key is key_rotate_s old; counting from the key's
 * creation, so restarts do not put rotation off. */
static void *timer_main(void *arg)
{
	struct mgmt *m = arg;

	pthread_mutex_lock(&m->lock);
	while (!m->stopping) {
		const ms_state *s = m->st.s;
		int64_t born = s->n_keys ? s->keys[s->n_keys - 1]->created_unix_ms : 0;

		int64_t left = born + (int64_t)m->key_rotate_s * 1000 - mgmt_now_ms(m);
		struct timespec ts;

		/* Replicated, only a leader with a state rotates; look again in a second. */
		if (m->repl && (!mgmt_is_leader(m) || !s->n_tenants)) {
			clock_mono_after(&ts, 1000);
			pthread_cond_timedwait(&m->timer_cond, &m->lock, &ts);
			continue;
		}
		/* The key's age is by the wall clock (the keys' dates are); a
		 * step of it is seen within a minute. */
		if (left > 0) {
			clock_mono_after(&ts, left < 60000 ? left : 60000);
			pthread_cond_timedwait(&m->timer_cond, &m->lock, &ts);
			continue;
		}
		int id = mgmt_key_rotate(m);

		if (id < 0) {
			fprintf(stderr,
				"mgmt: rotating the signing key: %s (retrying in a minute)\n",
				lode_strerror(id));
			clock_mono_after(&ts, 60000);
			pthread_cond_timedwait(&m->timer_cond, &m->lock, &ts);
		}
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

/* ---- the heartbeat timer ------------------------------------------------------------------- */

/* Every heartbeat_ms / 2: engines silent past grace_ms go DOWN (or, NEW,
 * away), and a rebuild every engine has finished is completed. The hook
 * hears of a new version with the service's lock released. */
static void *map_timer_main(void *arg)
{
	struct mgmt *m = arg;
	unsigned period = m->heartbeat_ms / 2 ? m->heartbeat_ms / 2 : 1;

	pthread_mutex_lock(&m->lock);
	while (!m->stopping) {
		struct timespec ts;
		int rc;

		clock_mono_after(&ts, period);
		/* Letting go of the lock: a long check just done counts. */
		mgmt_live_awake(m, mgmt_live_ms(m));
		pthread_cond_timedwait(&m->timer_cond, &m->lock, &ts);
		if (m->stopping)
			break;
		/* Woken late: the process was not run (stopped, starved), so
		 * the handlers heard nothing either; unless they did, since
		 * (this wait ends only once it has the lock again, which
		 * short calls may have held in turn): the time since anyone
		 * last held the lock. A call that got it first after such a
		 * stretch counted it already. */
		mgmt_live_awake(m, mgmt_live_ms(m));
		if (!mgmt_replica_lead(m))
			continue; /* a follower: the leader checks */
		rc = mgmt_map_check(m, mgmt_live_ms(m));
		if (rc < 0)
			fprintf(stderr, "mgmt: checking the pool map: %s\n", lode_strerror(rc));
		if (rc > 0) {
			mgmt_live_awake(m, mgmt_live_ms(m));
			pthread_mutex_unlock(&m->lock);
			mgmt_map_publish(m);
			pthread_mutex_lock(&m->lock);
			/* Calls could take the lock (and hear) while it was let
			 * go: that time is not the service's deafness. */
			m->awake_ms = mgmt_live_ms(m);
		}
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

/* ---- start and stop ------------------------------------------------------------------------ */

static void timers_stop(struct mgmt *m)
{
	pthread_mutex_lock(&m->lock);
	m->stopping = true;
	pthread_cond_broadcast(&m->timer_cond);
	pthread_mutex_unlock(&m->lock);
	if (m->timer_running)
		pthread_join(m->timer, NULL);
	if (m->map_timer_running)
		pthread_join(m->map_timer, NULL);
	m->timer_running = m->map_timer_running = false;
}

int mgmt_start(const struct mgmt_config *cfg, const struct mgmt_hooks *hooks, mgmt_t **out,
	       char *msg, size_t msg_cap)
{
	const struct rpc_tls *tls = NULL;
	char addr[300];
	mgmt_t *m;
	int rc;

	if (msg_cap)
		msg[0] = '\0';
	if (!cfg || !cfg->listen || !cfg->listen[0] || !out) {
		snprintf(msg, msg_cap, "the configuration needs a listen address");
		return -EINVAL;
	}
	if (!cfg->tls.cert != !cfg->tls.key) {
		snprintf(msg, msg_cap, "TLS needs both a certificate and a key");
		return -EINVAL;
	}
	if (cfg->tls.cert)
		tls = &cfg->tls;
	if (cfg->nreplicas && (!cfg->admin_cred || !cfg->admin_cred[0])) {
		snprintf(msg, msg_cap, "a replicated service needs admin_cred");
		return -EINVAL;
	}
	rc = mgmt_open(cfg, hooks, &m, msg, msg_cap);
	if (rc)
		return rc;
	if (cfg->nreplicas) {
		rc = mgmt_replica_start(m, cfg, msg, msg_cap);
		if (rc)
			goto fail;
	}
	rc = rpc_server_start(cfg->listen, tls, mgmt_methods, mgmt_nmethods, m, &m->port, &m->srv,
			      msg, msg_cap);
	if (rc)
		goto fail;
	mgmt_address(cfg->listen, m->port, addr, sizeof(addr));
	if (m->first_start) {
		rc = mgmt_cred_create(m, addr);
		if (rc) {
			snprintf(msg, msg_cap, "writing the credentials file %s: %s", m->admin_cred,
				 lode_strerror(rc));
			goto fail;
		}
		OPENSSL_cleanse(m->admin_secret, sizeof(m->admin_secret));
		m->first_start = false;
	} else if (!m->repl) {
		cred_update(m, addr);
	}
	if (m->key_rotate_s) {
		rc = -pthread_create(&m->timer, NULL, timer_main, m);
		if (rc) {
			snprintf(msg, msg_cap, "starting the rotation timer: %s",
				 lode_strerror(rc));
			goto fail;
		}
		m->timer_running = true;
	}
	rc = -pthread_create(&m->map_timer, NULL, map_timer_main, m);
	if (rc) {
		snprintf(msg, msg_cap, "starting the heartbeat timer: %s", lode_strerror(rc));
		goto fail;
	}
	m->map_timer_running = true;
	*out = m;
	return 0;

fail:
	timers_stop(m);
	if (m->srv)
		rpc_server_stop(m->srv);
	mgmt_replica_stop(m);
	/* A first start whose credentials never got out would leave an
	 * administrator nobody can log in as: forget it, so that the next
	 * start is a first start again. */
	if (m->first_start && unlink(m->st.path) == 0) {
		int fd = open(m->st.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		if (fd >= 0) {
			fsync(fd);
			close(fd);
		}
	}
	mgmt_close(m);
	return rc;
}

int mgmt_port(const mgmt_t *m)
{
	return m->port;
}

struct auth_keyring *mgmt_keyring(mgmt_t *m)
{
	return &m->kr;
}

struct auth_revoked *mgmt_revoked(mgmt_t *m)
{
	return &m->rv;
}

void mgmt_stop(mgmt_t *m)
{
	if (!m)
		return;
	timers_stop(m);
	if (m->srv)
		rpc_server_stop(m->srv);
	mgmt_replica_stop(m);
	mgmt_close(m);
}
