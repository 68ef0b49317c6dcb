/*
 * The pool map in the service: the engines of the system and their states,
 * the host engine's registration, what engines say in their heartbeats,
 * failure detection, and the bookkeeping that ends a rebuild.
 *
 * The map itself is src/layout's (layout_map_*), so the service moves
 * engines between states by exactly the rules every client places with.
 * The model keeps it in layout's wire form (State.map) beside one record
 * per engine (uuid, address, targets) in the same slot order; a change
 * decodes it, changes the copy, and encodes it back before the commit, so
 * a failed write is undone with the rest of the model. Layout bumps the
 * version once per change; the service publishes one version per commit
 * (a check that takes three engines DOWN is one new map), and bumps it too
 * for what layout does not see (an engine's new address), so map_version
 * below is set by hand after the changes: it is a plain field, nothing in
 * the map is derived from it.
 *
 * What an engine says between changes (its last heartbeat, its targets'
 * numbers, its rebuild report) is kept apart in m->live and never
 * persisted: heartbeats come every heartbeat_ms, and an engine repeats all
 * of it in its next one. After a restart silence counts from the restart.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lode/errno.h"
#include "mgmt/state.h"

/* ---- the map in the model ----------------------------------------------------- */

int mgmt_map_load(const struct mgmt *m, struct layout_map **out)
{
	const ms_state *s = m->st.s;
	int rc;

	if (s->map.len == 0)
		return layout_map_create(0, out);
	rc = layout_map_decode(s->map.data, s->map.len, out);
	return rc == -EPROTO ? -LODE_ECORRUPT : rc;
}

static int map_put(ms_state *s, const struct layout_map *map)
{
	size_t n = layout_map_encode_size(map);
	uint8_t *buf = malloc(n);

	if (!buf)
		return -ENOMEM;
	if (layout_map_encode(map, buf, n) < 0) {
		free(buf);
		return -EINVAL;
	}
	free(s->map.data);
	s->map.data = buf;
	s->map.len = n;
	return 0;
}

int mgmt_map_commit(struct mgmt *m, const struct layout_map *map)
{
	int rc = map_put(m->st.s, map);

	if (rc) {
		mgmt_state_rollback(&m->st);
		return rc;
	}
	rc = mgmt_state_commit(&m->st);
	if (rc)
		return rc;
	__atomic_store_n(&m->map_version, (uint32_t)map->version, __ATOMIC_RELEASE);
	return 0;
}

uint32_t mgmt_map_version(mgmt_t *m)
{
	return __atomic_load_n(&m->map_version, __ATOMIC_ACQUIRE);
}

void mgmt_map_publish(struct mgmt *m)
{
	uint32_t v;
	bool moved;

	pthread_mutex_lock(&m->notify_lock);
	v = mgmt_map_version(m);
	moved = v != m->notified;
	m->notified = v;
	if (moved && m->hooks.map_changed)
		m->hooks.map_changed(m->hooks.arg, v);
	pthread_mutex_unlock(&m->notify_lock);
}

/* ---- the host engine ------------------------------------------------------------ */

/* How many targets the host has: the configuration's, else the host's report. */
static unsigned host_targets(struct mgmt *m)
{
	struct mgmt_target_info *ti;
	unsigned n;
	bool live;

	if (m->ntargets)
		return m->ntargets;
	ti = calloc(MGMT_TARGETS_MAX, sizeof(*ti));
	if (!ti)
		return 0;
	n = mgmt_targets_get(m, ti, MGMT_TARGETS_MAX, &live);
	free(ti);
	return n;
}

/*
 * Engine 0 is the host. At the first start (or the first since the map
 * came) it is added UP; later starts bring its address and uuid up to date
 * and put it back UP if a state file says otherwise (the host serves while
 * the service runs). Its target count is fixed like any engine's.
 */
int mgmt_host_register(struct mgmt *m, const uint8_t *uuid, char *msg, size_t msg_cap)
{
	static const uint8_t zero[16];
	ms_state *s = m->st.s;
	ms_engine *e = ms_engine_by_id(s, MGMT_HOST_ENGINE);
	const char *addr = m->engine_addr ? m->engine_addr : "";
	unsigned n = host_targets(m);
	struct layout_map *map = NULL;
	const struct layout_engine *le;
	uint8_t fresh[16];
	bool changed = false;
	uint64_t v0;
	int rc;

	if (uuid && memcmp(uuid, zero, 16) == 0) {
		snprintf(msg, msg_cap, "the engine uuid is all zero");
		return -EINVAL;
	}
	if (n == 0 || n > LAYOUT_TGTS_MAX) {
		snprintf(msg, msg_cap, "the host engine needs 1 to %u targets (ntargets), not %u",
			 LAYOUT_TGTS_MAX, n);
		return -EINVAL;
	}
	rc = mgmt_map_load(m, &map);
	if (rc) {
		snprintf(msg, msg_cap, "the pool map: %s", lode_strerror(rc));
		return rc;
	}
	v0 = map->version;
	if (!e) {
		if (!uuid) {
			do {
				if (auth_random(fresh, sizeof(fresh))) {
					rc = -EIO;
					goto out;
				}
			} while (memcmp(fresh, zero, 16) == 0);
			uuid = fresh;
		}
		rc = layout_map_engine_add(map, MGMT_HOST_ENGINE, n, LAYOUT_UP);
		if (rc)
			goto out;
		if (!ms_engine_add(s, MGMT_HOST_ENGINE, uuid, addr, n, mgmt_now_ms(m))) {
			rc = -ENOMEM;
			goto out;
		}
		if (s->next_engine_id == 0)
			s->next_engine_id = 1;
		changed = true;
	} else {
		if (e->ntargets != n) {
			snprintf(msg, msg_cap,
				 "the host engine has %u targets in the pool map, the "
				 "configuration %u: an engine's targets are fixed",
				 e->ntargets, n);
			rc = -EINVAL;
			goto out;
		}
		if (uuid && memcmp(e->uuid.data, uuid, 16) != 0) {
			if (ms_bytes_set(&e->uuid, uuid, 16)) {
				rc = -ENOMEM;
				goto out;
			}
			changed = true;
		}
		if (strcmp(e->address, addr) != 0) {
			if (ms_str_set(&e->address, addr)) {
				rc = -ENOMEM;
				goto out;
			}
			changed = true;
		}
		le = layout_map_engine(map, MGMT_HOST_ENGINE);
		if (le && le->state != LAYOUT_UP) {
			rc = layout_map_engine_set(map, MGMT_HOST_ENGINE, LAYOUT_UP);
			if (rc)
				goto out;
			changed = true;
		}
	}
	if (changed) {
		map->version = v0 + 1;
		rc = mgmt_map_commit(m, map);
	}
out:
	if (rc) {
		mgmt_state_rollback(&m->st);
		if (!msg[0])
			snprintf(msg, msg_cap, "registering the host engine: %s",
				 lode_strerror(rc));
	}
	if (!rc)
		__atomic_store_n(&m->map_version, (uint32_t)map->version, __ATOMIC_RELEASE);
	layout_map_free(map);
	return rc;
}

/* ---- what engines say ---------------------------------------------------------- */

struct mgmt_engine_live *mgmt_live_get(struct mgmt *m, uint32_t id, int64_t now_ms)
{
	struct mgmt_engine_live *l;

	for (size_t i = 0; i < m->nlive; i++)
		if (m->live[i].id == id)
			return &m->live[i];
	l = realloc(m->live, (m->nlive + 1) * sizeof(*l));
	if (!l)
		return NULL;
	m->live = l;
	l = &m->live[m->nlive++];
	memset(l, 0, sizeof(*l));
	l->id = id;
	l->silent_since_ms = now_ms;
	return l;
}

void mgmt_live_deaf(struct mgmt *m, int64_t from_ms, int64_t to_ms)
{
	int64_t gap;

	if (from_ms < m->deaf_until_ms)
		from_ms = m->deaf_until_ms; /* counted already */
	gap = to_ms - from_ms;
	if (gap <= (int64_t)m->heartbeat_ms)
		return;
	m->deaf_until_ms = to_ms;
	for (size_t i = 0; i < m->nlive; i++) {
		struct mgmt_engine_live *l = &m->live[i];
		int64_t room = (int64_t)m->grace_ms - l->deaf_ms, d = gap < room ? gap : room;

		if (d <= 0)
			continue;
		l->deaf_ms += d;
		l->silent_since_ms = l->silent_since_ms + d < to_ms ? l->silent_since_ms + d : to_ms;
	}
}

void mgmt_live_restart(struct mgmt *m, int64_t since_ms)
{
	for (size_t i = 0; i < m->nlive; i++) {
		struct mgmt_engine_live *l = &m->live[i];

		if (l->silent_since_ms < since_ms)
			l->silent_since_ms = since_ms;
		l->deaf_ms = 0;
	}
}

void mgmt_live_elected(struct mgmt *m)
{
	int64_t since = __atomic_load_n(&m->lead_since_ms, __ATOMIC_ACQUIRE);

	if (since == m->live_since_ms)
		return;
	m->live_since_ms = since;
	m->started_ms = since;
	m->started_unix_ms = mgmt_now_ms(m) - (mgmt_live_ms(m) - since);
	mgmt_live_restart(m, since);
}

void mgmt_live_awake(struct mgmt *m, int64_t now_ms)
{
	/* An election first: a stall since it is counted on the fresh counts. */
	mgmt_live_elected(m);
	if (m->awake_ms)
		mgmt_live_deaf(m, m->awake_ms, now_ms);
	if (now_ms > m->awake_ms)
		m->awake_ms = now_ms;
}

static void live_drop(struct mgmt *m, uint32_t id)
{
	for (size_t i = 0; i < m->nlive; i++)
		if (m->live[i].id == id) {
			free(m->live[i].targets);
			m->live[i] = m->live[--m->nlive];
			return;
		}
}

int mgmt_engine_retire(struct mgmt *m, uint32_t id)
{
	ms_engine *e = ms_engine_by_id(m->st.s, id);
	uint8_t uuid[16];

	if (!e)
		return -ENOENT;
	/* A uuid no engine has: random, and not any other record's. */
	do {
		if (auth_random(uuid, sizeof(uuid)))
			return -EIO;
	} while (ms_engine_by_uuid(m->st.s, uuid));
	/* Its address is the new record's from now on: no client may take
	 * this one for it. */
	if (ms_bytes_set(&e->uuid, uuid, sizeof(uuid)) || ms_str_set(&e->address, ""))
		return -ENOMEM;
	live_drop(m, id);
	return 0;
}

void mgmt_live_free(struct mgmt *m)
{
	for (size_t i = 0; i < m->nlive; i++)
		free(m->live[i].targets);
	free(m->live);
	m->live = NULL;
	m->nlive = 0;
}

/* ---- rebuild -------------------------------------------------------------------------- */

bool mgmt_rebuild_due(const struct layout_map *map)
{
	return layout_map_count(map, LAYOUT_DOWN) || layout_map_count(map, LAYOUT_DRAIN) ||
	       layout_map_count(map, LAYOUT_NEW);
}

enum report { REPORT_NONE, REPORT_GIVEN, REPORT_NOTHING_TO_DO };

/* Engine id's last rebuild report. The host reports through hooks->rebuild,
 * else through its own heartbeats if it sends any; a host that does neither
 * has nothing to rebuild. */
static enum report report_get(struct mgmt *m, uint32_t id, struct mgmt_rebuild_info *out)
{
	const struct mgmt_engine_live *l = NULL;

	memset(out, 0, sizeof(*out));
	if (id == MGMT_HOST_ENGINE && m->hooks.rebuild) {
		m->hooks.rebuild(m->hooks.arg, out);
		return REPORT_GIVEN;
	}
	for (size_t i = 0; i < m->nlive && !l; i++)
		if (m->live[i].id == id)
			l = &m->live[i];
	if (l && l->reported) {
		*out = l->rebuild;
		return REPORT_GIVEN;
	}
	return id == MGMT_HOST_ENGINE ? REPORT_NOTHING_TO_DO : REPORT_NONE;
}

static bool report_done(enum report r, const struct mgmt_rebuild_info *ri, uint32_t version)
{
	return r == REPORT_NOTHING_TO_DO ||
	       (r == REPORT_GIVEN && ri->map_version == version && !ri->running &&
		ri->finished_unix_ms > 0 && ri->errno_value == 0);
}

/* Engines that take part in a rebuild: those that hold shards and answer. */
static bool rebuild_member(const struct layout_engine *e)
{
	return e->state == LAYOUT_UP || e->state == LAYOUT_DRAIN;
}

void mgmt_rebuild_sum(struct mgmt *m, const struct layout_map *map, struct mgmt_rebuild_info *out,
		      uint32_t *pending)
{
	bool due = mgmt_rebuild_due(map);
	uint32_t v = due ? (uint32_t)map->version : m->st.s->rebuilt_version;
	struct mgmt_rebuild_info ri;

	memset(out, 0, sizeof(*out));
	*pending = 0;
	out->map_version = v;
	if (v == 0)
		return;
	for (uint32_t i = 0; i < map->nengines; i++) {
		const struct layout_engine *e = &map->engines[i];
		enum report r = report_get(m, e->id, &ri);

		if (due && rebuild_member(e) && !report_done(r, &ri, v))
			(*pending)++;
		if (r != REPORT_GIVEN || ri.map_version != v)
			continue;
		out->running |= ri.running;
		out->objects_done += ri.objects_done;
		out->objects_total += ri.objects_total;
		out->bytes_done += ri.bytes_done;
		out->bytes_total += ri.bytes_total;
		if (ri.started_unix_ms > 0 &&
		    (out->started_unix_ms == 0 || ri.started_unix_ms < out->started_unix_ms))
			out->started_unix_ms = ri.started_unix_ms;
		if (ri.finished_unix_ms > out->finished_unix_ms)
			out->finished_unix_ms = ri.finished_unix_ms;
		if (!out->errno_value)
			out->errno_value = ri.errno_value;
	}
	if (out->running || *pending)
		out->finished_unix_ms = 0;
}

/*
 * The reclaim (docs/decisions/0014): once every engine that holds shards or
 * is to be integrated has removed what the settled layout no longer places
 * on it, moves onto its targets may start (the map says so:
 * reclaimed_version).
 */
static void reclaim_advance(struct mgmt *m, const struct layout_map *map, bool *changed)
{
	ms_state *s = m->st.s;
	uint32_t settled = s->settled_version;
	struct mgmt_rebuild_info ri;

	if (s->reclaimed_version >= settled)
		return;
	for (uint32_t i = 0; i < map->nengines; i++) {
		enum report r;

		if (!rebuild_member(&map->engines[i]) && map->engines[i].state != LAYOUT_NEW)
			continue; /* a NEW one reclaims what a past life left, makes the containers */
		r = report_get(m, map->engines[i].id, &ri);
		if (r == REPORT_NONE || (r == REPORT_GIVEN && ri.reclaimed_version < settled))
			return;
	}
	s->reclaimed_version = settled;
	*changed = true;
}

int mgmt_rebuild_settle(struct mgmt *m, struct layout_map *map, bool *changed)
{
	uint32_t v = (uint32_t)map->version;
	struct mgmt_rebuild_info ri;
	bool integrate;
	int rc;

	reclaim_advance(m, map, changed);
	/* Nothing moved before every target was ready (engines say so by not
	 * reporting a rebuild done meanwhile); this says it again. */
	if (!mgmt_rebuild_due(map) || m->st.s->reclaimed_version < m->st.s->settled_version)
		return 0;
	for (uint32_t i = 0; i < map->nengines; i++)
		if (rebuild_member(&map->engines[i]) &&
		    !report_done(report_get(m, map->engines[i].id, &ri), &ri, v))
			return 0;
	/* Their shards live elsewhere now; the NEW ones hold theirs, unless
	 * the move was a failure's rebuild, which integrates nothing (clients
	 * compute map_next the same way, src/client/place.c). NEW engines are
	 * the last slots, and integrate in slot order. */
	integrate = layout_map_integrates(map);
	for (uint32_t i = 0; i < map->nengines; i++) {
		uint8_t st = map->engines[i].state;

		if (st == LAYOUT_DOWN || st == LAYOUT_DRAIN) {
			rc = layout_map_engine_set(map, map->engines[i].id, LAYOUT_OUT);
			if (rc)
				return rc;
		}
	}
	for (uint32_t i = 0; i < map->nengines && integrate; i++) {
		if (map->engines[i].state != LAYOUT_NEW)
			continue;
		rc = layout_map_engine_set(map, map->engines[i].id, LAYOUT_UP);
		if (rc)
			return rc;
	}
	m->st.s->rebuilt_version = v;
	/* The map committed next (v + 1) has the new layout; what the old one
	 * placed elsewhere is reclaimed before anything moves again. */
	m->st.s->settled_version = v + 1;
	*changed = true;
	return 0;
}

/* ---- failure detection ----------------------------------------------------------------- */

int mgmt_map_check(struct mgmt *m, int64_t now_ms)
{
	struct layout_map *map = NULL;
	uint32_t *gone = NULL;
	size_t ngone = 0;
	bool changed = false;
	uint64_t v0;
	int rc;

	rc = mgmt_map_load(m, &map);
	if (rc)
		return rc;
	v0 = map->version;
	gone = calloc(map->nengines ? map->nengines : 1, sizeof(*gone));
	if (!gone) {
		rc = -ENOMEM;
		goto out;
	}
	/* Backwards: removing a NEW engine moves the slots after it. */
	for (uint32_t i = map->nengines; i-- > 0;) {
		uint32_t id = map->engines[i].id;
		uint8_t st = map->engines[i].state;
		struct mgmt_engine_live *l;

		if (id == MGMT_HOST_ENGINE || (st != LAYOUT_UP && st != LAYOUT_DRAIN &&
					       st != LAYOUT_NEW))
			continue;
		l = mgmt_live_get(m, id, m->started_ms);
		if (!l) {
			rc = -ENOMEM;
			goto out;
		}
		if (now_ms - l->silent_since_ms <= (int64_t)m->grace_ms)
			continue;
		if (st == LAYOUT_NEW) {
			/* It never held a shard: forget it. Joining again
			 * makes it a new engine. */
			rc = layout_map_engine_del(map, id);
			if (!rc) {
				ms_engine_remove(m->st.s, id);
				gone[ngone++] = id;
			}
		} else if (st == LAYOUT_DRAIN) {
			/* A draining engine that died: its shards must now be
			 * rebuilt from redundancy, as a DOWN engine's are.
			 * Layout has no DRAIN -> DOWN (a DRAIN engine's shards
			 * are placed elsewhere already), so it goes by UP; one
			 * commit, so the UP in between is never published. */
			rc = layout_map_engine_set(map, id, LAYOUT_UP);
			if (!rc)
				rc = layout_map_engine_set(map, id, LAYOUT_DOWN);
		} else {
			rc = layout_map_engine_set(map, id, LAYOUT_DOWN);
		}
		if (rc)
			goto out;
		changed = true;
	}
	/* A rebuild ends only on a map it was for: after a change, the
	 * reports are for the old version. */
	if (!changed)
		rc = mgmt_rebuild_settle(m, map, &changed);
	if (rc || !changed)
		goto out;
	map->version = v0 + 1;
	rc = mgmt_map_commit(m, map);
	if (rc)
		goto fail;
	for (size_t i = 0; i < ngone; i++)
		live_drop(m, gone[i]);
	free(gone);
	layout_map_free(map);
	return 1;
out:
	if (rc)
		mgmt_state_rollback(&m->st);
fail:
	free(gone);
	layout_map_free(map);
	return rc;
}

int mgmt_tick(struct mgmt *m, int64_t now_ms)
{
	int rc;

	pthread_mutex_lock(&m->lock);
	rc = mgmt_map_check(m, now_ms);
	pthread_mutex_unlock(&m->lock);
	mgmt_map_publish(m);
	return rc;
}
