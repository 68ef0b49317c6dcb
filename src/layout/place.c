/*
 * Placement: from an object id, a group (or a dkey hash) and the pool map,
 * the engine and target of every member of the group.
 *
 * Two rounds, both jump consistent hashing over the map's slots
 * [0, nbuckets) (every integrated engine, OUT ones included) with a
 * redraw on a new seed whenever a draw is refused:
 *
 *   1. Home engines. Member i draws from a sequence seeded by (object,
 *      group, i, attempt), refusing only a slot an earlier member took.
 *      Engine states play no part, so a member's home depends on the
 *      number of slots alone and never moves while the slots stay.
 *   2. Replacements. A member whose home is not in the layout (OUT, DRAIN,
 *      an engine without a target in it) draws again from a second
 *      sequence, refusing slots not in the layout and slots any member
 *      already holds: every member at home, then the replacements made so
 *      far, in member order.
 *
 * So when an engine leaves the layout, a member at home elsewhere keeps its
 * engine, and the members that were on it go to engines drawn uniformly
 * from the rest: about 1/N of the shards move, spread over the whole pool,
 * which is what rebuild wants. A member living on a replacement can be
 * pushed once more when a later failure's replacement of a lower member
 * draws its engine (rare: a second-order effect, measured in the tests);
 * no history-free rule avoids that for every sequence of failures (see
 * README.md). DOWN engines count as in the layout: going DOWN moves nothing.
 *
 * Then the target: a jump hash of (object, group, engine id, attempt) over
 * the engine's targets, redrawn while it lands on a target not in the
 * layout, so a target leaving moves only its own shards, and within the
 * engine.
 *
 * A sequence that keeps being refused (a small pool where most slots are
 * taken or out) ends after ATTEMPTS draws in a scan from the last draw to
 * the next acceptable slot, so every call ends, deterministically.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "layout/layout.h"

#define ATTEMPTS 32
#define GOLDEN 0x9e3779b97f4a7c15ull /* 2^64 / golden ratio: an odd step for seeds */

/* The finaliser of splitmix64: a bijection that spreads every input bit. */
static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

/*
 * The walk of jump consistent hashing: a key sits in bucket b and, as the
 * number of buckets grows, jumps to bucket j > b with j drawn so that the
 * key is in any of the first n buckets with probability 1/n; the answer is
 * the last bucket below n it visits. If r is uniform in (0, 1], the next
 * bucket is floor((b + 1) / r): the key survives the growth to each
 * n <= j with probability (b + 1) / n, as it must. Here r = u / 2^31 with u
 * in [1, 2^31] drawn from splitmix64 seeded by the key, and the division is
 * in integers: (b + 1) * 2^31 / u, exact on every machine. b < 2^32, so the
 * product fits. About ln(n) + 1 steps.
 */
uint32_t layout_jump(uint64_t key, uint32_t n)
{
	uint64_t b = 0, j = 0, s = key;

	if (n <= 1)
		return 0; /* the walk would stop after its first step */
	while (j < n) {
		b = j;
		s += GOLDEN;
		j = ((b + 1) << 31) / ((mix64(s) >> 33) + 1);
	}
	return (uint32_t)b;
}

/* The class to place by: cls, or the one the object id names. */
static int class_get(struct lode_oid oid, const struct layout_class *cls, struct layout_class *buf,
		     const struct layout_class **c)
{
	if (!cls) {
		int rc = layout_class_from_oid(oid, buf);

		if (rc)
			return rc;
		cls = buf;
	}
	if (cls->group_size == 0 || cls->group_size > LAYOUT_GROUP_MAX || cls->groups > INT_MAX)
		return -EINVAL;
	*c = cls;
	return 0;
}

static int groups_of(const struct layout_map *m, const struct layout_class *c)
{
	if (c->groups)
		return (int)c->groups;
	return m->width ? (int)m->width : -ENOSPC;
}

static uint64_t obj_key(struct lode_oid oid)
{
	return mix64(oid.hi ^ mix64(oid.lo));
}

int layout_obj_groups(const struct layout_map *m, struct lode_oid oid,
		      const struct layout_class *cls)
{
	struct layout_class buf;
	const struct layout_class *c;
	int rc = class_get(oid, cls, &buf, &c);

	return rc ? rc : groups_of(m, c);
}

static int dkey_group(const struct layout_map *m, uint64_t okey, const struct layout_class *c,
		      uint64_t dkey_hash)
{
	int n = groups_of(m, c);

	if (n < 0)
		return n;
	/* Mixed with the object, so that a caller's weak dkey hash (a chunk
	 * number) still spreads, and two objects do not stripe in lockstep. */
	return (int)layout_jump(mix64(dkey_hash ^ okey), (uint32_t)n);
}

int layout_dkey_group(const struct layout_map *m, struct lode_oid oid,
		      const struct layout_class *cls, uint64_t dkey_hash)
{
	struct layout_class buf;
	const struct layout_class *c;
	int rc = class_get(oid, cls, &buf, &c);

	return rc ? rc : dkey_group(m, obj_key(oid), c, dkey_hash);
}

/* Draw `attempt` of member i's sequence: a slot in [0, n). */
static uint32_t slot_draw(uint64_t gkey, unsigned i, unsigned attempt, uint32_t n)
{
	return layout_jump(mix64(gkey ^ mix64((uint64_t)i << 32 | attempt)), n);
}

static bool slot_held(const uint32_t *slot, const bool *held, unsigned g, uint32_t s)
{
	for (unsigned j = 0; j < g; j++)
		if (held[j] && slot[j] == s)
			return true;
	return false;
}

/* Round 1: member i's home, refusing the homes of members before it. */
static uint32_t home_draw(const struct layout_map *m, uint64_t gkey, unsigned i, uint32_t *slot,
			  bool *held)
{
	uint32_t s = 0;

	for (unsigned a = 0; a < ATTEMPTS; a++) {
		s = slot_draw(gkey, i, a, m->nbuckets);
		if (!slot_held(slot, held, i, s))
			return s;
	}
	do
		s = s + 1 == m->nbuckets ? 0 : s + 1;
	while (slot_held(slot, held, i, s));
	return s;
}

/* Round 2: a replacement in the layout that no member holds. */
static uint32_t spare_draw(const struct layout_map *m, uint64_t gkey, unsigned i, unsigned g,
			   uint32_t *slot, bool *held)
{
	uint32_t s = 0;

	for (unsigned a = ATTEMPTS; a < 2 * ATTEMPTS; a++) {
		s = slot_draw(gkey, i, a, m->nbuckets);
		if (m->engines[s].in && !slot_held(slot, held, g, s))
			return s;
	}
	do
		s = s + 1 == m->nbuckets ? 0 : s + 1;
	while (!m->engines[s].in || slot_held(slot, held, g, s));
	return s;
}

/*
 * The target of member `member` of group `group` on engine e: one in the
 * layout (e->in holds). The draw is the object's, not the group's (okey0
 * is group 0's key), and group g takes the g-th target after it: the
 * groups of one object that land on one engine take distinct targets
 * while there are targets enough, so a striped object on a single engine
 * uses every target rather than the targets its groups happen to draw
 * (drawn per group, half the objects of SX on one engine of two targets
 * lived on one of them). Member i takes the i-th after that: when a move
 * puts a member on the engine another member of its group is leaving (an
 * engine integrated pushes the members after it back onto the engines
 * they were refused), the two are on distinct targets while the move runs
 * (engines of two targets or more), so an EC cell never lands on the
 * target that holds another cell of its stripe (docs/decisions/0014).
 */
static uint16_t tgt_draw(const struct layout_engine *e, uint64_t okey0, uint32_t group,
			 unsigned member)
{
	uint64_t k = mix64(okey0 ^ mix64(0x7467740000000000ull | e->id));
	uint32_t t = 0, step = (uint32_t)((group + (uint64_t)member) % e->ntgts);

	for (unsigned a = 0; a < ATTEMPTS; a++) {
		t = layout_jump(mix64(k + GOLDEN * a), e->ntgts) + step;
		t = t >= e->ntgts ? t - e->ntgts : t;
		if (layout_state_in(e->tgt[t]))
			return (uint16_t)t;
	}
	do
		t = t + 1 == e->ntgts ? 0 : t + 1;
	while (!layout_state_in(e->tgt[t]));
	return (uint16_t)t;
}

static int group_place(const struct layout_map *m, uint64_t okey, const struct layout_class *c,
		       uint32_t group, struct layout_group *out)
{
	unsigned g = c->group_size;
	uint32_t slot[LAYOUT_GROUP_MAX];
	bool held[LAYOUT_GROUP_MAX];
	uint64_t gkey;
	int n = groups_of(m, c);

	if (n < 0)
		return n;
	if (group >= (uint32_t)n)
		return -EINVAL;
	/* Every engine in the layout is integrated (NEW ones are not in it), so
	 * this also gives nbuckets >= g, which round 1 needs. */
	if (m->nin < g)
		return -ENOSPC;
	gkey = mix64(okey + GOLDEN * ((uint64_t)group + 1));

	for (unsigned i = 0; i < g; i++) {
		slot[i] = home_draw(m, gkey, i, slot, held);
		held[i] = true;
	}
	for (unsigned i = 0; i < g; i++)
		held[i] = m->engines[slot[i]].in;
	for (unsigned i = 0; i < g; i++) {
		if (held[i])
			continue;
		slot[i] = spare_draw(m, gkey, i, g, slot, held);
		held[i] = true;
	}

	out->group = group;
	out->size = g;
	for (unsigned i = 0; i < g; i++) {
		const struct layout_engine *e = &m->engines[slot[i]];
		uint16_t t = tgt_draw(e, mix64(okey + GOLDEN), group, i);

		out->shard[i].engine = e->id;
		out->shard[i].tgt = t;
		out->shard[i].down = e->state == LAYOUT_DOWN || e->tgt[t] == LAYOUT_DOWN;
		out->shard[i].zero = 0;
	}
	memset(&out->shard[g], 0, (LAYOUT_GROUP_MAX - g) * sizeof(out->shard[0]));
	return 0;
}

int layout_group_place(const struct layout_map *m, struct lode_oid oid,
		       const struct layout_class *cls, uint32_t group, struct layout_group *out)
{
	struct layout_class buf;
	const struct layout_class *c;
	int rc = class_get(oid, cls, &buf, &c);

	return rc ? rc : group_place(m, obj_key(oid), c, group, out);
}

int layout_dkey_place(const struct layout_map *m, struct lode_oid oid,
		      const struct layout_class *cls, uint64_t dkey_hash, struct layout_group *out)
{
	struct layout_class buf;
	const struct layout_class *c;
	uint64_t okey = obj_key(oid);
	int rc = class_get(oid, cls, &buf, &c), group;

	if (rc)
		return rc;
	group = dkey_group(m, okey, c, dkey_hash);
	if (group < 0)
		return group;
	return group_place(m, okey, c, (uint32_t)group, out);
}
