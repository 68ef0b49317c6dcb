/*
 * Where a connection's requests go: the pool map as src/layout sees it, and
 * the placement of each request on a member of the redundancy group that
 * holds its (object, dkey).
 *
 * The connection keeps the map the management service gave it (Connect,
 * then PoolMapGet) as a struct layout_map whose slots are the proto's
 * engines in order, and one struct conn_engine per slot saying where that
 * engine's targets are in the connection's global target table. A request
 * names its member of the group (r->member); this file turns that into a
 * global target, and is asked again whenever the answer may have changed:
 * a newer map (the request was refused as stale and parked), or a member
 * whose engine was lost (a read moves on to the next member).
 *
 * A write to a group of several members goes to every member that is not
 * DOWN and whose engine is reachable: the request itself to the first, a
 * shadow (a copy of its wire content) to each other. Client.c completes the
 * request when the shadows have completed (see creq.leader).
 *
 * While the map has DOWN engines their shards are being rebuilt onto the
 * replacements that the map with those engines OUT names (c->map_next):
 * the engines copy what the survivors hold (src/server/rebuild.c), and a
 * write also goes to the replacement of each DOWN member (a "spare"
 * shadow), so that a replacement misses nothing written after the copy
 * began. When the rebuild ends and the DOWN engines go OUT, the
 * replacements are members like any other.
 */
#include "client/client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t conn_dkey_hash(const void *dkey, size_t len)
{
	/* FNV-1a, finished with splitmix64's mixer: layout mixes the oid in. */
	uint64_t h = 0xcbf29ce484222325ull;
	const uint8_t *p = dkey;

	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ull;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebull;
	h ^= h >> 31;
	return h;
}

int conn_obj_class(const lode_cont_t *ct, struct lode_oid oid, struct layout_class *cls)
{
	unsigned id = lode_oid_class(oid);

	if (id == LAYOUT_CLASS_NONE && ct->cls.id) {
		*cls = ct->cls;
		return 0;
	}
	/* src/cli's name index object: one fixed group, like S1; and S1 for a
	 * container that names no class. */
	if (id == 0xff || id == LAYOUT_CLASS_NONE)
		return layout_class_from_id(1, cls);
	return layout_class_from_id(id, cls);
}

struct creq *creq_new_placed(lode_cont_t *ct, uint16_t op, struct lode_oid oid,
			     const void *dkey, size_t dkey_len, bool write)
{
	struct layout_class cls;
	struct creq *r;

	/* A class the request cannot be placed by is refused at submit; so is
	 * an EC object's id that names a member (layout_oid_member). */
	if (conn_obj_class(ct, oid, &cls) < 0 ||
	    (cls.redun == LAYOUT_R_EC && layout_oid_member_of(oid) >= 0))
		cls.id = 0;
	if (!(r = creq_new(ct->c, op, 0)))
		return NULL;
	r->placed = true;
	r->write = write;
	r->cls = cls.id;
	/* An EC object's lists ask its first parity member, which every array
	 * write reaches (a data member holds only the arrays with bytes in its
	 * cells); single values live whole on every member (ec_io.c). */
	if (cls.id && cls.redun == LAYOUT_R_EC && (op == NET_OP_DKEY_LIST || op == NET_OP_AKEY_LIST)) {
		r->member = (uint8_t)cls.k;
		r->wrap = true; /* with every parity member lost, the data members' */
	}
	r->dkey_hash = conn_dkey_hash(dkey, dkey_len);
	return r;
}

/*
 * c->map_next for the map now installed: a copy with every DOWN and DRAIN
 * engine and target OUT and, unless an engine or target is DOWN, every NEW
 * engine UP, while there are any; else NULL. And c->map itself with DRAIN
 * engines and targets UP, so that data
 * keeps being placed where it is until the drain ends (c->moving says a
 * drain or an integration runs). No c->map_next while the service's map
 * says a target may still hold data of an older layout (reclaimed <
 * settled, docs/decisions/0014): a copy written there now could be lost
 * to its reclaim, or land beneath what it holds. Lock held.
 */
static void map_next_update(lode_conn_t *c)
{
	struct layout_map *n = NULL, *m = c->map;
	bool any = false, integrate;
	uint64_t v;

	layout_map_free(c->map_next);
	c->map_next = NULL;
	c->moving = false;
	if (!m || c->map_local)
		return;
	v = m->version;
	if (layout_map_dup(m, &n) < 0)
		n = NULL; /* no rebuild or drain placement: DRAIN still shows UP */
	integrate = layout_map_integrates(m);
	for (uint32_t i = 0; i < m->nengines; i++) {
		const struct layout_engine *e = &m->engines[i];
		uint32_t id = e->id;

		if (e->state == LAYOUT_NEW) {
			/* Integrated in slot order, as the service will; not while a
			 * failure is rebuilt (a move that cannot end must not hold
			 * that rebuild up). */
			if (!integrate)
				continue;
			c->moving = true;
			any |= n && layout_map_engine_set(n, id, LAYOUT_UP) == 0;
			continue;
		}
		if (e->state == LAYOUT_DOWN || e->state == LAYOUT_DRAIN) {
			c->moving |= e->state == LAYOUT_DRAIN;
			any |= n && layout_map_engine_set(n, id, LAYOUT_OUT) == 0;
			if (e->state == LAYOUT_DRAIN)
				layout_map_engine_set(m, id, LAYOUT_UP);
			continue;
		}
		for (uint16_t t = 0; t < e->ntgts; t++) {
			if (e->tgt[t] != LAYOUT_DOWN && e->tgt[t] != LAYOUT_DRAIN)
				continue;
			c->moving |= e->tgt[t] == LAYOUT_DRAIN;
			any |= n && layout_map_target_set(n, id, t, LAYOUT_OUT) == 0;
			if (e->tgt[t] == LAYOUT_DRAIN)
				layout_map_target_set(m, id, t, LAYOUT_UP);
		}
	}
	/* Each change counts a version; these are views of the service's. */
	m->version = v;
	if (n)
		n->version = v;
	if (any && !layout_map_reclaiming(m))
		c->map_next = n;
	else
		layout_map_free(n);
}

/* The global target of member i of g, or -1 when it cannot be reached. */
static int member_target(lode_conn_t *c, const struct layout_group *g, unsigned i)
{
	const struct layout_engine *le = layout_map_engine(c->map, g->shard[i].engine);
	const struct conn_engine *e;

	if (!le || g->shard[i].down)
		return -1;
	/* By id, not by slot: a map without a NEW engine that was removed
	 * has its later engines in lower slots than when we connected. */
	if (!(e = conn_engine_of(c, le->id)))
		return -1; /* an engine that joined after we connected, not named yet */
	if (!e->connected || e->lost || e->joining || g->shard[i].tgt >= e->ntgts)
		return -1;
	return (int)(e->first + g->shard[i].tgt);
}

/* A copy of leader's wire content for another member. Lock held. */
static struct creq *shadow_new(struct creq *leader, unsigned member, unsigned tgt, bool spare)
{
	lode_conn_t *c = leader->c;
	struct creq *s = c->free_reqs;

	if (s)
		c->free_reqs = s->next;
	else if (!(s = malloc(sizeof(*s))))
		return NULL;
	memset(s, 0, offsetof(struct creq, anchor_key));
	s->c = c;
	s->op = leader->op;
	s->tgt = tgt;
	s->a = leader->a; /* its pointers are the leader's, which outlives it */
	s->out = leader->out;
	s->out_len = leader->out_len;
	s->placed = true;
	s->write = true;
	s->cls = leader->cls;
	s->member = (uint8_t)member;
	s->spare = spare;
	s->dkey_hash = leader->dkey_hash;
	s->leader = leader;
	return s;
}

/*
 * The group of (r's object, dkey) in c->map_next, placed at the first need
 * only (a rebuild runs and a member is DOWN): NULL when there is none.
 * *have says whether g2 holds it already.
 */
static const struct layout_group *next_group(lode_conn_t *c, const struct creq *r,
					     const struct layout_class *cls,
					     struct layout_group *g2, bool *have)
{
	if (!*have && c->map_next &&
	    layout_dkey_place(c->map_next, r->a.oid, cls, r->dkey_hash, g2) == 0)
		*have = true;
	return *have ? g2 : NULL;
}

/*
 * Where g's member i will be once a running rebuild ends, when that is
 * somewhere else: the replacement of a DOWN member, or the new place of a
 * live one that a lower member's replacement pushed (src/layout/place.c).
 * Its global target in *t, 0; -ENOENT when there is none to write to (no
 * rebuild, the member stays, or, for a replica, it lands where another
 * member is now, which holds the same); -EHOSTDOWN when it cannot be
 * reached. g2 is the group in c->map_next (NULL: none). An EC member that
 * lands where another is keeps its cells apart there (layout_oid_member).
 */
static int spare_target(lode_conn_t *c, const struct layout_class *cls,
			const struct layout_group *g, const struct layout_group *g2, unsigned i,
			int *t)
{
	if (!g2 || i >= g2->size || g2->shard[i].down)
		return -ENOENT;
	for (unsigned k = 0; k < g->size; k++)
		if ((cls->redun != LAYOUT_R_EC || k == i) && !g->shard[k].down &&
		    g->shard[k].engine == g2->shard[i].engine &&
		    g->shard[k].tgt == g2->shard[i].tgt)
			return -ENOENT;
	return (*t = member_target(c, g2, i)) < 0 ? -EHOSTDOWN : 0;
}

/*
 * Whether the map the running rebuild, drain or integration ends in may
 * place g's live members elsewhere: a member is DOWN (its replacement can
 * push a live one), or a drain or integration runs (members move off the
 * draining engine, onto the new one).
 */
static bool group_moves(const lode_conn_t *c, const struct layout_group *g)
{
	if (c->moving)
		return true;
	for (unsigned i = 0; i < g->size; i++)
		if (g->shard[i].down)
			return true;
	return false;
}

/*
 * A pinned request: member r->member of g and no other (an EC cell). A
 * write to a DOWN member goes to its replacement while a rebuild runs.
 */
static int place_pinned(lode_conn_t *c, struct creq *r, const struct layout_class *cls,
			const struct layout_group *g, int (*send)(struct creq *))
{
	struct layout_group g2;
	bool have_g2 = false;
	struct creq *s;
	int t, rc;

	if (r->member >= g->size)
		return -EINVAL;
	if (g->shard[r->member].down) {
		if (!r->write)
			return -EHOSTDOWN;
		rc = spare_target(c, cls, g, next_group(c, r, cls, &g2, &have_g2), r->member, &t);
		if (rc == -ENOENT)
			return -EHOSTDOWN; /* no replacement: a degraded write */
		if (rc < 0)
			return -ENOTCONN; /* the replacement would miss it: the write fails */
		r->tgt = (unsigned)t;
		return 0;
	}
	if ((t = member_target(c, g, r->member)) < 0)
		return -EHOSTDOWN;
	r->tgt = (unsigned)t;
	if (!r->write || r->spread || !send || !group_moves(c, g))
		return 0;
	/* A live member a rebuild moves: its new place gets the write too. */
	r->spread = true;
	rc = spare_target(c, cls, g, next_group(c, r, cls, &g2, &have_g2), r->member, &t);
	if (rc == -EHOSTDOWN)
		r->lost_rc = rc; /* its new place would miss it: the piece fails */
	if (rc < 0)
		return 0;
	if (!(s = shadow_new(r, r->member, (unsigned)t, true)))
		return -ENOMEM;
	r->nshadow++;
	if ((rc = send(s)) < 0)
		conn_req_fail(s, rc);
	return 0;
}

int conn_place(lode_conn_t *c, struct creq *r, int (*send)(struct creq *))
{
	struct layout_class cls;
	struct layout_group g, g2;
	bool have_g2 = false;
	int rc, t;

	if (!c->map)
		return -ENOTCONN;
	if (r->cls == 0 || (rc = layout_class_from_id(r->cls, &cls)) < 0)
		return -EINVAL;
	if ((rc = layout_dkey_place(c->map, r->a.oid, &cls, r->dkey_hash, &g)) < 0)
		return rc;
	if (r->pinned)
		return place_pinned(c, r, &cls, &g, send);
	if (r->leader || r->spread) {
		/* A member placed again (a stale map): the same member of the
		 * group in the new map (a spare: of the rebuild's), or lost. */
		if (r->spare) {
			if (spare_target(c, &cls, &g, next_group(c, r, &cls, &g2, &have_g2),
					 r->member, &t) < 0)
				return -EHOSTDOWN;
		} else if (r->member >= g.size || (t = member_target(c, &g, r->member)) < 0) {
			return -EHOSTDOWN;
		}
		r->tgt = (unsigned)t;
		return 0;
	}
	for (;; r->member++) {
		if (r->member >= g.size && r->wrap) {
			r->wrap = false; /* a list that began past member 0 goes on from it */
			r->member = 0;
		}
		if (r->member >= g.size)
			return -EHOSTDOWN;
		if ((t = member_target(c, &g, r->member)) >= 0)
			break;
		if (r->write && !g.shard[r->member].down)
			r->lost_up = true;
	}
	r->tgt = (unsigned)t;
	if (!r->write)
		return 0;
	r->spread = true;
	for (unsigned i = 0; i < g.size; i++) {
		bool spare = false;
		struct creq *s;

		if (i <= r->member && !g.shard[i].down)
			continue; /* the leader, or a member it skipped (counted above) */
		if (g.shard[i].down) {
			/* A DOWN member: its replacement, while a rebuild runs. */
			rc = spare_target(c, &cls, &g, next_group(c, r, &cls, &g2, &have_g2), i, &t);
			if (rc == -ENOENT)
				continue;
			if (rc < 0) {
				r->lost_up = true; /* the map has it UP: wait for one that says */
				continue;
			}
			spare = true;
		} else if ((t = member_target(c, &g, i)) < 0) {
			/* UP but not reachable from here: the write waits for a
			 * map that says so. */
			r->lost_up = true;
			continue;
		}
		if (!(s = shadow_new(r, i, (unsigned)t, spare)))
			return -ENOMEM; /* the shadows sent so far complete on their own */
		r->nshadow++;
		if ((rc = send(s)) < 0)
			conn_req_fail(s, rc);
	}
	/* Live members a rebuild moves (pushed by a replacement): their new
	 * places get the write too. */
	for (unsigned i = 0; i < g.size && group_moves(c, &g); i++) {
		struct creq *s;

		if (g.shard[i].down)
			continue;
		rc = spare_target(c, &cls, &g, next_group(c, r, &cls, &g2, &have_g2), i, &t);
		if (rc == -EHOSTDOWN)
			r->lost_up = true; /* its new place would miss it: wait for a map */
		if (rc < 0)
			continue;
		if (!(s = shadow_new(r, i, (unsigned)t, true)))
			return -ENOMEM;
		r->nshadow++;
		if ((rc = send(s)) < 0)
			conn_req_fail(s, rc);
	}
	return 0;
}

static unsigned map_state(Lode__Mgmt__V1__State s)
{
	switch ((int)s) {
	case LODE__MGMT__V1__STATE__STATE_DOWN:
		return LAYOUT_DOWN;
	case LODE__MGMT__V1__STATE__STATE_DRAIN:
		return LAYOUT_DRAIN;
	case LODE__MGMT__V1__STATE__STATE_NEW:
		return LAYOUT_NEW;
	case 5: /* OUT */
		return LAYOUT_OUT;
	default:
		return LAYOUT_UP;
	}
}

int conn_map_decode(const Lode__Mgmt__V1__PoolMap *pm, struct layout_map **out)
{
	struct layout_map *m;
	int rc;

	if ((rc = layout_map_create(0, &m)) < 0)
		return rc;
	/* Every engine enters UP (NEW ones NEW), then takes its state: the
	 * transitions from UP are the ones layout allows from the start. */
	for (size_t i = 0; i < pm->n_engines && rc == 0; i++) {
		const Lode__Mgmt__V1__Engine *e = pm->engines[i];
		unsigned st = map_state(e->state);

		rc = layout_map_engine_add(m, e->id, e->n_targets,
					   st == LAYOUT_NEW ? LAYOUT_NEW : LAYOUT_UP);
		for (size_t t = 0; t < e->n_targets && rc == 0; t++) {
			unsigned ts = map_state(e->targets[t]->state);

			if (ts != LAYOUT_UP && ts != LAYOUT_NEW && e->targets[t]->id < e->n_targets)
				rc = layout_map_target_set(m, e->id, e->targets[t]->id, ts);
		}
		if (rc == 0 && st != LAYOUT_UP && st != LAYOUT_NEW)
			rc = layout_map_engine_set(m, e->id, st);
	}
	if (rc < 0) {
		layout_map_free(m);
		return rc == -ENOMEM ? rc : -EPROTO;
	}
	m->version = pm->version;
	m->settled = pm->settled_version;
	m->reclaimed = pm->reclaimed_version;
	*out = m;
	return 0;
}

int conn_map_local(lode_conn_t *c, struct layout_map **out)
{
	struct layout_map *m;
	int rc;

	if ((rc = layout_map_create(0, &m)) < 0)
		return rc;
	if ((rc = layout_map_engine_add(m, 0, c->eng[0].ntgts, LAYOUT_UP)) < 0) {
		layout_map_free(m);
		return rc;
	}
	m->version = 0;
	*out = m;
	return 0;
}

void conn_map_take(lode_conn_t *c, const Lode__Mgmt__V1__PoolMap *pm)
{
	struct layout_map *m;

	if (pm->n_engines == 0 || pm->n_engines > CONN_ENGINES_MAX || conn_map_decode(pm, &m) < 0)
		return;
	pthread_mutex_lock(&c->lock);
	layout_map_free(c->map);
	c->map = m;
	map_next_update(c);
	c->nengines = (unsigned)pm->n_engines;
	for (size_t i = 0; i < pm->n_engines; i++) {
		c->eng[i].id = pm->engines[i]->id;
		snprintf(c->eng[i].addr, sizeof(c->eng[i].addr), "%s",
			 pm->engines[i]->address ? pm->engines[i]->address : "");
	}
	pthread_mutex_unlock(&c->lock);
}

void conn_engines_note(lode_conn_t *c, const Lode__Mgmt__V1__PoolMap *pm)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	pthread_mutex_lock(&c->lock);
	/* The fetch that brought pm: a lost engine it still has UP may be back. */
	c->map_at_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
	/* While lode_connect runs, its own thread names and connects engines. */
	for (size_t i = 0; c->ready && !c->map_local && i < pm->n_engines; i++) {
		const char *addr = pm->engines[i]->address ? pm->engines[i]->address : "";
		struct conn_engine *e = conn_engine_of(c, pm->engines[i]->id);

		if (!e) {
			if (c->nengines == CONN_ENGINES_MAX)
				break;
			e = &c->eng[c->nengines++];
			memset(e, 0, sizeof(*e));
			e->id = pm->engines[i]->id;
		} else if ((e->connected && !e->lost) || e->joining) {
			continue;
		}
		snprintf(e->addr, sizeof(e->addr), "%s", addr);
	}
	pthread_mutex_unlock(&c->lock);
}

void conn_map_want(lode_conn_t *c, uint32_t want, bool now)
{
	uint32_t cur = atomic_load(&c->map_want);

	while (want > cur && !atomic_compare_exchange_weak(&c->map_want, &cur, want))
		;
	if (!now)
		return;
	pthread_mutex_lock(&c->renewer_lock);
	pthread_cond_signal(&c->renewer_cond);
	pthread_mutex_unlock(&c->renewer_lock);
}

void conn_map_wake(lode_conn_t *c, uint32_t want)
{
	conn_map_want(c, want, true);
}

void conn_map_install(lode_conn_t *c, struct layout_map *m)
{
	struct creq *r, *keep = NULL;
	uint32_t want = 0;

	pthread_mutex_lock(&c->lock);
	if (m && !c->map_local && (!c->map || m->version >= c->map->version)) {
		layout_map_free(c->map);
		c->map = m;
		m = NULL;
		map_next_update(c);
	}
	if (c->map && !c->map_local && c->map->version > atomic_load(&c->map_ver))
		atomic_store(&c->map_ver, (uint32_t)c->map->version);
	/* Placed again with the map we now hold, unless an engine named a
	 * newer one still: those wait for the next fetch. */
	while ((r = c->parked)) {
		int rc = 0;

		c->parked = r->next;
		r->next = NULL;
		if (c->map_local && (uint32_t)r->val > atomic_load(&c->map_ver))
			atomic_store(&c->map_ver, (uint32_t)r->val); /* nothing to place by */
		if ((uint32_t)r->val > atomic_load(&c->map_ver)) {
			r->next = keep;
			keep = r;
			if ((uint32_t)r->val > want)
				want = (uint32_t)r->val;
			continue;
		}
		r->parked = false;
		r->replied = false;
		r->rc = 0;
		r->val = 0;
		r->in_len = 0;
		if (r->placed && r->write && !r->leader && !r->pinned) {
			/* A write is placed whole again: every member of its group in
			 * the new map gets it (a member may have moved to another
			 * engine); acknowledgements of the old members do not count. */
			r->spread = false;
			r->member = 0;
			r->members_ok = 0;
			r->lost_rc = 0;
			r->lost_up = false;
			r->fence_behind = false;
		}
		if (r->placed)
			rc = conn_place(c, r, conn_req_send);
		if (rc == 0)
			rc = conn_req_resend(r);
		if (rc < 0)
			conn_req_fail(r, rc);
	}
	c->parked = keep;
	pthread_mutex_unlock(&c->lock);
	layout_map_free(m);
	if (want)
		conn_map_wake(c, want);
}

int conn_target_of(lode_cont_t *ct, struct lode_oid oid, const void *dkey, size_t len)
{
	struct creq *r = creq_new_placed(ct, NET_OP_SV_FETCH, oid, dkey, len, false);
	int rc;

	if (!r)
		return -ENOMEM;
	r->a.oid = oid;
	pthread_mutex_lock(&ct->c->lock);
	rc = conn_place(ct->c, r, NULL);
	pthread_mutex_unlock(&ct->c->lock);
	if (rc == 0)
		rc = (int)r->tgt;
	creq_free(r);
	return rc;
}

/* ---- for rebuild (src/server/rebuild.c) --------------------------------------------- */

uint32_t conn_map_version(lode_conn_t *c)
{
	uint32_t v;

	pthread_mutex_lock(&c->lock);
	v = c->map && !c->map_local ? (uint32_t)c->map->version : 0;
	pthread_mutex_unlock(&c->lock);
	return v;
}

struct conn_engine *conn_engine_of(lode_conn_t *c, uint32_t id)
{
	for (unsigned k = 0; k < c->nengines; k++)
		if (c->eng[k].id == id)
			return &c->eng[k];
	return NULL;
}

int conn_engine_targets(lode_conn_t *c, uint32_t id, unsigned *first, unsigned *n)
{
	const struct conn_engine *e;
	int rc = -ENOENT;

	pthread_mutex_lock(&c->lock);
	e = conn_engine_of(c, id);
	if (e && e->connected && !e->lost && !e->joining) {
		*first = e->first;
		*n = e->ntgts;
		rc = 0;
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int conn_rebuild_due(lode_conn_t *c, uint32_t self, double *share)
{
	const struct layout_map *m;
	bool down = false, up = false, due;
	unsigned ndown = 0, nup = 0;
	int rc = 0;

	pthread_mutex_lock(&c->lock);
	if (!(m = c->map) || c->map_local) {
		pthread_mutex_unlock(&c->lock);
		return 0;
	}
	/* c->map has DRAIN engines and targets UP: c->map_next says what moves. */
	due = c->moving || layout_map_down(m);
	for (uint32_t i = 0; i < m->nengines; i++) {
		const struct layout_engine *e = &m->engines[i];
		const struct layout_engine *n = c->map_next ? &c->map_next->engines[i] : NULL;

		down |= n && n->state != e->state;
		ndown += n && n->state != e->state;
		nup += e->state == LAYOUT_UP;
		for (uint16_t t = 0; t < e->ntgts; t++)
			down |= n && n->tgt[t] != e->tgt[t];
		if (e->id == self)
			up = e->state == LAYOUT_UP;
	}
	/* No c->map_next until every target is reclaimed (map_next_update):
	 * the moves wait for a newer map. */
	if (due && layout_map_reclaiming(m))
		rc = -EAGAIN;
	pthread_mutex_unlock(&c->lock);
	if (rc < 0)
		return rc;
	/* Of what an engine holds, about this much moves. */
	*share = nup ? (double)(ndown ? ndown : 1) / nup : 0;
	return down && up ? 1 : 0;
}

int conn_reclaim_due(lode_conn_t *c, uint32_t *settled)
{
	int due = 0;

	pthread_mutex_lock(&c->lock);
	*settled = 0;
	if (c->map && !c->map_local) {
		*settled = c->map->settled;
		due = layout_map_reclaiming(c->map);
	}
	pthread_mutex_unlock(&c->lock);
	return due;
}

int conn_dkey_member(lode_conn_t *c, const struct layout_class *cls, struct lode_oid oid,
		     uint64_t dkey_hash, uint32_t self, uint16_t local_tgt)
{
	int m = cls->redun == LAYOUT_R_EC ? layout_oid_member_of(oid) : -1;
	struct lode_oid po = m >= 0 ? layout_oid_plain(oid) : oid;
	struct layout_group g;
	int rc = -ENOENT;

	pthread_mutex_lock(&c->lock);
	if (c->map && !c->map_local && !layout_map_reclaiming(c->map))
		rc = -EAGAIN; /* moves may have begun: a walk now could drop their copies */
	else if (c->map && !c->map_local &&
		 (rc = layout_dkey_place(c->map, po, cls, dkey_hash, &g)) == 0)
		for (unsigned i = 0; i < g.size && rc == 0; i++)
			rc = (m < 0 || (unsigned)m == i) && g.shard[i].engine == self &&
			     g.shard[i].tgt == local_tgt;
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int conn_rebuild_group(lode_conn_t *c, const struct layout_class *cls, struct lode_oid oid,
		       uint64_t dkey_hash, uint32_t self, uint16_t local_tgt,
		       struct conn_rebuild_group *out)
{
	struct layout_group g, g2;
	int rc;

	pthread_mutex_lock(&c->lock);
	if (!c->map || !c->map_next) {
		pthread_mutex_unlock(&c->lock);
		return 0;
	}
	if ((rc = layout_dkey_place(c->map, oid, cls, dkey_hash, &g)) < 0 ||
	    (rc = layout_dkey_place(c->map_next, oid, cls, dkey_hash, &g2)) < 0) {
		pthread_mutex_unlock(&c->lock);
		return rc;
	}
	out->me = out->first = -1;
	for (unsigned i = 0; i < g.size && rc == 0; i++) {
		out->tgt[i] = out->dst[i] = -1;
		if (!g.shard[i].down) {
			out->tgt[i] = member_target(c, &g, i);
			if (out->first < 0)
				out->first = (int)i;
			if (g.shard[i].engine == self && g.shard[i].tgt == local_tgt)
				out->me = (int)i;
		}
		if ((rc = spare_target(c, cls, &g, &g2, i, &out->dst[i])) == -ENOENT) {
			rc = 0; /* stays, or no replacement (too few engines left) */
			out->dst[i] = -1;
		}
	}
	pthread_mutex_unlock(&c->lock);
	return rc < 0 ? rc : (int)g.size;
}
