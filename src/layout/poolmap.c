/*
 * The pool map: engines, their targets, their states, and a version.
 *
 * Placement hashes over the engines' slots (their positions in engines[]),
 * so slots are forever: an engine is appended when added, keeps its slot
 * when it goes OUT, and only a NEW engine (which never held a shard) may be
 * removed. NEW engines are kept at the end and integrated in slot order, so
 * the hashing's range (nbuckets, the slots before the first NEW one) only
 * ever grows at its end, which is the one change jump hashing handles with
 * minimal movement. The derived fields (an engine's `in` and ntgts_in, the
 * map's nbuckets, nin and width) are updated by every change, so placement
 * reads them in O(1).
 *
 * Wire form, little-endian, no padding, canonical (decode then encode gives
 * the same bytes):
 *
 *   offset size
 *   0      4    magic     "LMAP" (0x50414d4c)
 *   4      2    format    1
 *   6      2    flags     0 (reserved; refused if set)
 *   8      8    version
 *   16     4    nengines  <= LAYOUT_ENGINES_MAX
 *   20          nengines engines, in slot order, each:
 *          4      id        unique in the map
 *          1      state     enum layout_state
 *          1      reserved  0
 *          2      ntgts     1..LAYOUT_TGTS_MAX
 *          ntgts  target states, one byte each (enum layout_state, not NEW)
 *   and nothing after the last engine.
 *
 * A map of 64 engines of 8 targets is 20 + 64 * 16 = 1044 bytes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "layout/layout.h"

#define MAP_MAGIC 0x50414d4cu
#define MAP_FORMAT 1
#define MAP_HEAD 20   /* bytes before the first engine */
#define ENGINE_HEAD 8 /* bytes of an engine before its target states */

const char *layout_state_name(unsigned s)
{
	switch (s) {
	case LAYOUT_UP:
		return "UP";
	case LAYOUT_DOWN:
		return "DOWN";
	case LAYOUT_DRAIN:
		return "DRAIN";
	case LAYOUT_NEW:
		return "NEW";
	case LAYOUT_OUT:
		return "OUT";
	}
	return "?";
}

static bool state_valid(unsigned s)
{
	return s >= LAYOUT_UP && s <= LAYOUT_OUT;
}

/*
 * The transitions an engine or a target may make (README.md draws them).
 * NEW -> UP is the engine-only one; its ordering rule is the caller's.
 */
static bool transition_ok(unsigned from, unsigned to)
{
	switch (from) {
	case LAYOUT_NEW:
		return to == LAYOUT_UP;
	case LAYOUT_UP:
		return to == LAYOUT_DOWN || to == LAYOUT_DRAIN || to == LAYOUT_OUT;
	case LAYOUT_DOWN:
	case LAYOUT_DRAIN:
		return to == LAYOUT_UP || to == LAYOUT_OUT;
	case LAYOUT_OUT:
		return to == LAYOUT_UP;
	}
	return false;
}

/* ---- derived fields ---------------------------------------------------------------------- */

/* Recompute e->in from its state and ntgts_in; keep the map's nin in step. */
static void engine_refresh(struct layout_map *m, struct layout_engine *e)
{
	bool in = layout_state_in(e->state) && e->ntgts_in > 0;

	if (in != e->in) {
		if (in)
			m->nin++;
		else
			m->nin--;
		e->in = in;
	}
}

/* Set everything derived from scratch (after a decode). */
static void map_refresh(struct layout_map *m)
{
	m->nbuckets = 0;
	m->nin = 0;
	m->width = 0;
	for (uint32_t s = 0; s < m->nengines; s++) {
		struct layout_engine *e = &m->engines[s];

		e->ntgts_in = 0;
		for (unsigned t = 0; t < e->ntgts; t++)
			e->ntgts_in += layout_state_in(e->tgt[t]);
		e->in = false;
		engine_refresh(m, e);
		if (e->state != LAYOUT_NEW && m->nbuckets == s) {
			m->nbuckets++;
			m->width += e->ntgts;
		}
	}
}

/* ---- building ---------------------------------------------------------------------------- */

static int map_alloc(uint64_t version, uint32_t cap, struct layout_map **mp)
{
	struct layout_map *m = calloc(1, sizeof(*m));

	if (!m)
		return -ENOMEM;
	m->version = version;
	if (cap) {
		m->engines = calloc(cap, sizeof(*m->engines));
		m->by_id = calloc(cap, sizeof(*m->by_id));
		if (!m->engines || !m->by_id) {
			layout_map_free(m);
			return -ENOMEM;
		}
		m->cap = cap;
	}
	*mp = m;
	return 0;
}

int layout_map_create(uint64_t version, struct layout_map **mp)
{
	if (!mp)
		return -EINVAL;
	return map_alloc(version, 0, mp);
}

void layout_map_free(struct layout_map *m)
{
	if (!m)
		return;
	for (uint32_t s = 0; s < m->nengines; s++)
		free(m->engines[s].tgt);
	free(m->engines);
	free(m->by_id);
	free(m);
}

int layout_map_dup(const struct layout_map *m, struct layout_map **mp)
{
	struct layout_map *d;
	int rc = map_alloc(m->version, m->nengines, &d);

	if (rc)
		return rc;
	for (uint32_t s = 0; s < m->nengines; s++) {
		struct layout_engine *e = &d->engines[s];

		*e = m->engines[s];
		e->tgt = malloc(e->ntgts);
		if (!e->tgt) {
			d->nengines = s;
			layout_map_free(d);
			return -ENOMEM;
		}
		memcpy(e->tgt, m->engines[s].tgt, e->ntgts);
	}
	d->nengines = m->nengines;
	if (m->nengines)
		memcpy(d->by_id, m->by_id, m->nengines * sizeof(*m->by_id));
	d->nbuckets = m->nbuckets;
	d->nin = m->nin;
	d->width = m->width;
	d->settled = m->settled;
	d->reclaimed = m->reclaimed;
	*mp = d;
	return 0;
}

/* Where id is, or would go, in by_id. */
static uint32_t by_id_pos(const struct layout_map *m, uint32_t id)
{
	uint32_t lo = 0, hi = m->nengines;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (m->engines[m->by_id[mid]].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static struct layout_engine *engine_find(const struct layout_map *m, uint32_t id)
{
	uint32_t pos = by_id_pos(m, id);

	if (pos < m->nengines && m->engines[m->by_id[pos]].id == id)
		return &m->engines[m->by_id[pos]];
	return NULL;
}

const struct layout_engine *layout_map_engine(const struct layout_map *m, uint32_t id)
{
	return engine_find(m, id);
}

unsigned layout_map_count(const struct layout_map *m, unsigned s)
{
	unsigned n = 0;

	for (uint32_t i = 0; i < m->nengines; i++)
		n += m->engines[i].state == s;
	return n;
}

bool layout_map_integrates(const struct layout_map *m)
{
	return !layout_map_down(m);
}

bool layout_map_reclaiming(const struct layout_map *m)
{
	return m->reclaimed < m->settled;
}

bool layout_map_down(const struct layout_map *m)
{
	for (uint32_t i = 0; i < m->nengines; i++) {
		const struct layout_engine *e = &m->engines[i];

		if (e->state == LAYOUT_DOWN)
			return true;
		for (uint16_t t = 0; layout_state_in(e->state) && t < e->ntgts; t++)
			if (e->tgt[t] == LAYOUT_DOWN)
				return true;
	}
	return false;
}

int layout_map_engine_add(struct layout_map *m, uint32_t id, unsigned ntgts, unsigned state)
{
	struct layout_engine *e;
	uint32_t pos;

	if (ntgts == 0 || ntgts > LAYOUT_TGTS_MAX || (state != LAYOUT_UP && state != LAYOUT_NEW))
		return -EINVAL;
	pos = by_id_pos(m, id);
	if (pos < m->nengines && m->engines[m->by_id[pos]].id == id)
		return -EEXIST;
	if (state == LAYOUT_UP && m->nbuckets < m->nengines)
		return -EBUSY;
	if (m->nengines == LAYOUT_ENGINES_MAX)
		return -E2BIG;
	if (m->nengines == m->cap) {
		uint32_t cap = m->cap ? m->cap * 2 : 8;
		struct layout_engine *ev;
		uint32_t *bv;

		if (cap > LAYOUT_ENGINES_MAX)
			cap = LAYOUT_ENGINES_MAX;
		ev = realloc(m->engines, cap * sizeof(*ev));
		if (!ev)
			return -ENOMEM;
		m->engines = ev;
		bv = realloc(m->by_id, cap * sizeof(*bv));
		if (!bv)
			return -ENOMEM;
		m->by_id = bv;
		m->cap = cap;
	}
	e = &m->engines[m->nengines];
	e->tgt = malloc(ntgts);
	if (!e->tgt)
		return -ENOMEM;
	memset(e->tgt, LAYOUT_UP, ntgts);
	e->id = id;
	e->state = (uint8_t)state;
	e->ntgts = (uint16_t)ntgts;
	e->ntgts_in = (uint16_t)ntgts;
	e->in = false;
	memmove(&m->by_id[pos + 1], &m->by_id[pos], (m->nengines - pos) * sizeof(*m->by_id));
	m->by_id[pos] = m->nengines;
	m->nengines++;
	engine_refresh(m, e);
	if (state == LAYOUT_UP) {
		m->nbuckets++;
		m->width += ntgts;
	}
	m->version++;
	return 0;
}

int layout_map_engine_del(struct layout_map *m, uint32_t id)
{
	uint32_t pos = by_id_pos(m, id), slot;

	if (pos >= m->nengines || m->engines[m->by_id[pos]].id != id)
		return -ENOENT;
	slot = m->by_id[pos];
	if (m->engines[slot].state != LAYOUT_NEW)
		return -EPERM;
	/* NEW engines are the last slots and hold nothing: closing the gap among
	 * them moves no shard. */
	free(m->engines[slot].tgt);
	memmove(&m->engines[slot], &m->engines[slot + 1],
		(m->nengines - slot - 1) * sizeof(*m->engines));
	memmove(&m->by_id[pos], &m->by_id[pos + 1], (m->nengines - pos - 1) * sizeof(*m->by_id));
	m->nengines--;
	for (uint32_t i = 0; i < m->nengines; i++)
		if (m->by_id[i] > slot)
			m->by_id[i]--;
	m->version++;
	return 0;
}

int layout_map_engine_set(struct layout_map *m, uint32_t id, unsigned state)
{
	struct layout_engine *e = engine_find(m, id);

	if (!e)
		return -ENOENT;
	if (!state_valid(state))
		return -EINVAL;
	if (state == e->state)
		return 0;
	if (!transition_ok(e->state, state))
		return -EPERM;
	if (e->state == LAYOUT_NEW) {
		if ((uint32_t)(e - m->engines) != m->nbuckets)
			return -EBUSY;
		m->nbuckets++;
		m->width += e->ntgts;
	}
	e->state = (uint8_t)state;
	engine_refresh(m, e);
	m->version++;
	return 0;
}

int layout_map_target_set(struct layout_map *m, uint32_t id, unsigned tgt, unsigned state)
{
	struct layout_engine *e = engine_find(m, id);

	if (!e)
		return -ENOENT;
	if (tgt >= e->ntgts)
		return -ERANGE;
	if (!state_valid(state) || state == LAYOUT_NEW)
		return -EINVAL;
	if (state == e->tgt[tgt])
		return 0;
	if (!transition_ok(e->tgt[tgt], state))
		return -EPERM;
	e->ntgts_in += (int)layout_state_in(state) - (int)layout_state_in(e->tgt[tgt]);
	e->tgt[tgt] = (uint8_t)state;
	engine_refresh(m, e);
	m->version++;
	return 0;
}

/* ---- wire form --------------------------------------------------------------------------- */

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)v);
	put16(p + 2, (uint16_t)(v >> 16));
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
	return get16(p) | (uint32_t)get16(p + 2) << 16;
}

static uint64_t get64(const uint8_t *p)
{
	return get32(p) | (uint64_t)get32(p + 4) << 32;
}

size_t layout_map_encode_size(const struct layout_map *m)
{
	size_t n = MAP_HEAD;

	for (uint32_t s = 0; s < m->nengines; s++)
		n += ENGINE_HEAD + m->engines[s].ntgts;
	return n;
}

int layout_map_encode(const struct layout_map *m, void *buf, size_t cap)
{
	size_t need = layout_map_encode_size(m);
	uint8_t *p = buf;

	if (cap < need)
		return -ENOBUFS;
	put32(p, MAP_MAGIC);
	put16(p + 4, MAP_FORMAT);
	put16(p + 6, 0);
	put64(p + 8, m->version);
	put32(p + 16, m->nengines);
	p += MAP_HEAD;
	for (uint32_t s = 0; s < m->nengines; s++) {
		const struct layout_engine *e = &m->engines[s];

		put32(p, e->id);
		p[4] = e->state;
		p[5] = 0;
		put16(p + 6, e->ntgts);
		memcpy(p + ENGINE_HEAD, e->tgt, e->ntgts);
		p += ENGINE_HEAD + e->ntgts;
	}
	return (int)need;
}

static int cmp_slot_id(const void *a, const void *b, void *arg)
{
	const struct layout_map *m = arg;
	uint32_t x = m->engines[*(const uint32_t *)a].id, y = m->engines[*(const uint32_t *)b].id;

	return x < y ? -1 : x > y;
}

/*
 * Check the wire form of one engine at p (left bytes remain from there) and
 * fill e; new_seen says a NEW engine came before it. Returns the bytes it
 * took, -EPROTO or -ENOMEM.
 */
static long engine_decode(const uint8_t *p, size_t left, bool new_seen, struct layout_engine *e)
{
	unsigned ntgts;

	if (left < ENGINE_HEAD)
		return -EPROTO;
	e->id = get32(p);
	e->state = p[4];
	ntgts = get16(p + 6);
	if (!state_valid(e->state) || p[5] != 0 || ntgts == 0 || ntgts > LAYOUT_TGTS_MAX)
		return -EPROTO;
	/* NEW engines only at the end: anything after one must be NEW too. */
	if (new_seen && e->state != LAYOUT_NEW)
		return -EPROTO;
	if (left - ENGINE_HEAD < ntgts)
		return -EPROTO;
	for (unsigned t = 0; t < ntgts; t++) {
		uint8_t ts = p[ENGINE_HEAD + t];

		if (!state_valid(ts) || ts == LAYOUT_NEW)
			return -EPROTO;
	}
	e->ntgts = (uint16_t)ntgts;
	e->tgt = malloc(ntgts);
	if (!e->tgt)
		return -ENOMEM;
	memcpy(e->tgt, p + ENGINE_HEAD, ntgts);
	return ENGINE_HEAD + ntgts;
}

int layout_map_decode(const void *buf, size_t len, struct layout_map **mp)
{
	const uint8_t *p = buf;
	struct layout_map *m;
	uint32_t n;
	size_t off;
	bool new_seen = false;
	int rc;

	if (len < MAP_HEAD || get32(p) != MAP_MAGIC || get16(p + 4) != MAP_FORMAT ||
	    get16(p + 6) != 0)
		return -EPROTO;
	n = get32(p + 16);
	/* Every engine takes at least ENGINE_HEAD + 1 bytes: a count the input
	 * cannot hold is refused before anything is allocated for it. */
	if (n > LAYOUT_ENGINES_MAX || n > (len - MAP_HEAD) / (ENGINE_HEAD + 1))
		return -EPROTO;
	rc = map_alloc(get64(p + 8), n, &m);
	if (rc)
		return rc;
	off = MAP_HEAD;
	for (uint32_t s = 0; s < n; s++) {
		long used = engine_decode(p + off, len - off, new_seen, &m->engines[s]);

		if (used < 0) {
			layout_map_free(m);
			return (int)used;
		}
		m->nengines = s + 1;
		m->by_id[s] = s;
		new_seen |= m->engines[s].state == LAYOUT_NEW;
		off += (size_t)used;
	}
	if (off != len)
		goto bad;
	if (n > 1)
		qsort_r(m->by_id, n, sizeof(*m->by_id), cmp_slot_id, m);
	for (uint32_t i = 1; i < n; i++)
		if (m->engines[m->by_id[i - 1]].id == m->engines[m->by_id[i]].id)
			goto bad;
	map_refresh(m);
	*mp = m;
	return 0;
bad:
	layout_map_free(m);
	return -EPROTO;
}
