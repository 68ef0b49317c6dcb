/*
 * Placement: the pool map, object classes, and where a dkey's shards live.
 *
 * Every client computes the layout of an object itself, from the object id,
 * a dkey hash and the pool map, so no lookup service sits on the data path
 * (DESIGN.md, "Placement and redundancy"). This header is that computation:
 *
 *   pool map   the engines of a pool, in the order they were added, each
 *              with a state and a state per target, and a version that grows
 *              with every change (poolmap.c; wire format at its top).
 *   classes    S1..S128, SX, RP_2, RP_3, EC_2P1, EC_4P2, EC_8P2: how many
 *              groups an object has and how big a group is (class.c).
 *   placement  the engine and target of each member of a group: jump
 *              consistent hashing over the engines as fault domains, then
 *              over the chosen engine's targets; members of one group on
 *              distinct engines (place.c).
 *
 * Pure code over libc: no I/O, no locks, nothing blocks. A map is not
 * locked: any number of threads may read one map (and place with it) at
 * once, but a change needs the caller to hold it exclusively. The usual
 * pattern is that a map, once published at a version, is never changed:
 * a newer map is decoded into a new object and swapped in.
 *
 * Every call returns 0 (or a non-negative count) or a negative errno; the
 * codes each call returns are listed beside it.
 */
#ifndef LODE_LAYOUT_H
#define LODE_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lode/types.h"

/* ---- the pool map --------------------------------------------------------------------- */

#define LAYOUT_ENGINES_MAX 65536u /* engines one map holds, OUT ones included */
#define LAYOUT_TGTS_MAX 1024u     /* targets of one engine */

/*
 * The state of an engine or of one target. The values are on the wire.
 * Whether a state keeps the shards it holds in the layout ("in") is what
 * placement reads; see README.md for the transitions.
 *
 *   UP     in the layout, serving.
 *   DOWN   in the layout, not answering: its shards stay where they are and
 *          are read degraded (from replicas or by EC reconstruction) until
 *          it comes back UP or is declared OUT.
 *   DRAIN  out of the layout but still readable: an operator is removing
 *          it, its shards are being copied to where the layout now puts
 *          them. Goes OUT when that is done.
 *   NEW    added, not yet integrated: no shard is placed on it and it does
 *          not count in the hashing at all (engines only).
 *   OUT    out of the layout: its shards were rebuilt elsewhere. It keeps
 *          its slot, so that the hashing of every other shard is unchanged.
 */
enum layout_state {
	LAYOUT_UP = 1,
	LAYOUT_DOWN = 2,
	LAYOUT_DRAIN = 3,
	LAYOUT_NEW = 4,
	LAYOUT_OUT = 5,
};

/* Whether a state keeps its shards in the layout (UP and DOWN do). */
static inline bool layout_state_in(unsigned s)
{
	return s == LAYOUT_UP || s == LAYOUT_DOWN;
}

/* "UP", "DOWN", ...; "?" for a value that is no state. Static strings. */
const char *layout_state_name(unsigned s);

/*
 * An engine of the map. Read-only for callers: the map's functions keep the
 * derived fields current.
 */
struct layout_engine {
	uint32_t id;       /* unique in the map; names the engine to the rest of Lode */
	uint8_t state;     /* enum layout_state */
	bool in;           /* derived: state in the layout and at least one target in it */
	uint16_t ntgts;    /* targets, 1..LAYOUT_TGTS_MAX; fixed when added */
	uint16_t ntgts_in; /* derived: targets whose state is in the layout */
	uint8_t *tgt;      /* ntgts target states (never NEW) */
};

/*
 * A pool map. engines[] is in slot order, the order engines were added: the
 * hashing ranges over slots, so a slot is never reused or reordered (an
 * engine that leaves goes OUT and keeps its slot). NEW engines are always
 * the last slots; they are integrated (NEW -> UP) in slot order.
 * Read-only for callers.
 */
struct layout_map {
	uint64_t version;
	uint32_t nengines;
	uint32_t cap;
	struct layout_engine *engines; /* [nengines], slot order */
	uint32_t *by_id;               /* [nengines] slots sorted by engine id */
	uint32_t nbuckets;             /* derived: slots before the first NEW engine */
	uint32_t nin;                  /* derived: engines whose `in` is set */
	uint32_t width;                /* derived: targets of the first nbuckets engines (SX) */
	/* Carried for the client, not used by placement nor encoded: the
	 * service's PoolMap.settled_version and reclaimed_version. */
	uint32_t settled, reclaimed;
};

/*
 * A new, empty map at version. Errors: -EINVAL (mp NULL), -ENOMEM.
 * The caller frees it with layout_map_free.
 */
int layout_map_create(uint64_t version, struct layout_map **mp);
/* Free a map and its engines. NULL is fine. */
void layout_map_free(struct layout_map *m);
/* A copy of m, same version. Errors: -ENOMEM. */
int layout_map_dup(const struct layout_map *m, struct layout_map **mp);

/*
 * Every change below bumps the version by one, so one version names one
 * content; a change that changes nothing (a state set to what it is) returns
 * 0 and leaves the version alone.
 */

/*
 * Add engine id with ntgts targets, all UP, into the next slot. state is
 * LAYOUT_NEW (an engine joining a running pool: it holds nothing until
 * layout_map_engine_set(UP)) or LAYOUT_UP (building a pool's first map: it
 * is integrated at once). Errors: -EEXIST (id in the map), -EINVAL (ntgts
 * 0 or above LAYOUT_TGTS_MAX, another state), -EBUSY (UP while a NEW engine
 * waits: it would take a slot after the NEW one), -E2BIG (the map holds
 * LAYOUT_ENGINES_MAX engines), -ENOMEM.
 */
int layout_map_engine_add(struct layout_map *m, uint32_t id, unsigned ntgts, unsigned state);
/*
 * Remove engine id, which must be NEW (it never held a shard). Errors:
 * -ENOENT, -EPERM (not NEW: an engine that held shards keeps its slot, OUT).
 */
int layout_map_engine_del(struct layout_map *m, uint32_t id);
/*
 * Move engine id to state. Allowed: NEW -> UP (only the first NEW engine in
 * slot order), UP -> DOWN|DRAIN|OUT, DOWN -> UP|OUT, DRAIN -> UP|OUT,
 * OUT -> UP. Errors: -ENOENT, -EINVAL (not a state), -EPERM (a transition
 * not in that list), -EBUSY (NEW -> UP of an engine added after another NEW
 * one).
 */
int layout_map_engine_set(struct layout_map *m, uint32_t id, unsigned state);
/*
 * Move target tgt of engine id to state: the engine transitions but NEW,
 * which no target has. Errors: -ENOENT (no such engine), -ERANGE (tgt >=
 * ntgts), -EINVAL (not a state, or NEW), -EPERM (not an allowed transition).
 */
int layout_map_target_set(struct layout_map *m, uint32_t id, unsigned tgt, unsigned state);

/* The engine with this id, or NULL. O(log n). The pointer is into the map:
 * good until the map next changes or is freed. */
const struct layout_engine *layout_map_engine(const struct layout_map *m, uint32_t id);
/* How many engines are in state s (0 for a value that is no state). */
unsigned layout_map_count(const struct layout_map *m, unsigned s);
/* Whether an engine, or a target of an engine in the layout, is DOWN. */
bool layout_map_down(const struct layout_map *m);
/* Whether the move m starts integrates its NEW engines: not while a
 * failure is rebuilt (a move that cannot end must not hold that rebuild
 * up). The clients' next map and the service's settle both ask it. */
bool layout_map_integrates(const struct layout_map *m);
/* Whether a target may still hold data of an older layout (reclaimed <
 * settled, docs/decisions/0014): nothing moves until it is reclaimed. */
bool layout_map_reclaiming(const struct layout_map *m);

/* Bytes layout_map_encode writes for m. */
size_t layout_map_encode_size(const struct layout_map *m);
/*
 * Write m's wire form (poolmap.c draws it) into buf. Returns the bytes
 * written, or -ENOBUFS when cap is smaller than layout_map_encode_size(m)
 * (nothing written). The encoding is canonical: decoding it and encoding
 * again gives the same bytes.
 */
int layout_map_encode(const struct layout_map *m, void *buf, size_t cap);
/*
 * Parse a map from len bytes of buf (buf may be NULL when len is 0) into a
 * new map the caller frees. Every count is checked against the bytes left
 * before anything is allocated or read, and every value against what the
 * map functions above would let through (states, limits, unique ids, NEW
 * engines last), so a map that decodes is one they could have built.
 * Errors: -EPROTO (anything malformed: short, long, bad magic or format,
 * a bad value), -ENOMEM.
 */
int layout_map_decode(const void *buf, size_t len, struct layout_map **mp);

/* ---- object classes ------------------------------------------------------------------- */

/*
 * A class's numeric id: 8 bits, carried in an object id's high word at
 * LODE_OID_CLASS_SHIFT (lode_oid_make's oclass). The values are stored in
 * every object id, so they never change:
 *
 *   0x00        no class: the object takes its container's class
 *   0x01-0x80   S1..S128 (the id is n)
 *   0x81        SX
 *   0x92, 0x93  RP_2, RP_3 (the low nibble is the number of copies)
 *   0xa1-0xa3   EC_2P1, EC_4P2, EC_8P2
 *   0xff        reserved (src/cli's name index object)
 *   the rest    reserved, refused
 */
#define LAYOUT_CLASS_NONE 0x00
#define LAYOUT_CLASS_S_MAX 128 /* S1..S128 */
#define LAYOUT_CLASS_SX 0x81
#define LAYOUT_CLASS_RP_2 0x92
#define LAYOUT_CLASS_RP_3 0x93
#define LAYOUT_CLASS_EC_2P1 0xa1
#define LAYOUT_CLASS_EC_4P2 0xa2
#define LAYOUT_CLASS_EC_8P2 0xa3
#define LAYOUT_CLASS_NAME_MAX 8 /* longest name ("EC_8P2", "S128") and its NUL */

/* Whether class id is erasure-coded. */
static inline bool layout_class_id_ec(unsigned id)
{
	return id == LAYOUT_CLASS_EC_2P1 || id == LAYOUT_CLASS_EC_4P2 || id == LAYOUT_CLASS_EC_8P2;
}

enum layout_redun {
	LAYOUT_R_NONE = 0,    /* one copy */
	LAYOUT_R_REPLICA = 1, /* group_size full copies */
	LAYOUT_R_EC = 2,      /* k data cells and p parity cells (Reed-Solomon) */
};

/*
 * What a class means. group_size = k + p always: a replica class has k = 1
 * and p = copies - 1, a class without redundancy k = 1 and p = 0. A group
 * survives the loss of `tolerance` (= p) of its engines.
 */
struct layout_class {
	uint8_t id;          /* the numeric id above */
	uint8_t redun;       /* enum layout_redun */
	uint16_t k, p;
	uint32_t groups;     /* groups per object; 0: one per target of the pool (SX) */
	uint32_t group_size; /* members per group: shards on distinct engines */
	uint32_t tolerance;  /* engine failures a group survives */
};

/*
 * The member of an erasure-coded object as its targets store it: member m
 * of a group keeps its cells (and its copies of single values) as an
 * object of its own, whose id carries m + 1 in its top 4 bits, the high
 * half of the type byte, which no type uses (lode/types.h). So two members
 * that meet on one target while a layout changes (docs/decisions/0017)
 * never share a key. Placement, leases and whatever a caller sees use the
 * id without them.
 */
#define LAYOUT_OID_MEMBER_SHIFT 60

static inline struct lode_oid layout_oid_member(struct lode_oid oid, unsigned m)
{
	oid.hi = (oid.hi & ~(0xfULL << LAYOUT_OID_MEMBER_SHIFT)) |
		 (uint64_t)(m + 1) << LAYOUT_OID_MEMBER_SHIFT;
	return oid;
}

/* The member an id names (layout_oid_member), or -1 for a caller's id. */
static inline int layout_oid_member_of(struct lode_oid oid)
{
	return (int)(oid.hi >> LAYOUT_OID_MEMBER_SHIFT) - 1;
}

/* The caller's id of a member's (layout_oid_member). */
static inline struct lode_oid layout_oid_plain(struct lode_oid oid)
{
	oid.hi &= ~(0xfULL << LAYOUT_OID_MEMBER_SHIFT);
	return oid;
}

/*
 * A class from its name: exactly one of "S1".."S128" (no sign, no leading
 * zero), "SX", "RP_2", "RP_3", "EC_2P1", "EC_4P2", "EC_8P2"; case matters.
 * Errors: -EINVAL (any other string, NULL included).
 */
int layout_class_parse(const char *name, struct layout_class *c);
/* A class from its numeric id. Errors: -EINVAL (0, reserved or unknown). */
int layout_class_from_id(unsigned id, struct layout_class *c);
/*
 * The class an object id carries. Errors: -ENOENT (class 0: the caller uses
 * its container's class), -EINVAL (an id that names no class).
 */
int layout_class_from_oid(struct lode_oid oid, struct layout_class *c);
/*
 * The name of class id into buf (NUL-terminated). Returns its length, or
 * -EINVAL (no such class), -ENOBUFS (cap too small; LAYOUT_CLASS_NAME_MAX
 * always suffices).
 */
int layout_class_name(unsigned id, char *buf, size_t cap);

/* ---- placement ------------------------------------------------------------------------ */

#define LAYOUT_GROUP_MAX 16 /* largest group size a class may have */

/* Where one member of a group lives. */
struct layout_shard {
	uint32_t engine; /* engine id */
	uint16_t tgt;    /* target index within that engine */
	bool down;       /* the engine or the target is DOWN: read degraded, do not expect it */
	uint8_t zero;    /* 0, so that layouts compare with memcmp */
};

/* The layout of one redundancy group: member i is shard[i]. */
struct layout_group {
	uint32_t group; /* which of the object's groups */
	uint32_t size;  /* members: the class's group_size */
	struct layout_shard shard[LAYOUT_GROUP_MAX];
};

/*
 * Jump consistent hashing (Lamping and Veach): a bucket in [0, n) for key,
 * such that going from n to n + 1 buckets moves a key only into the new
 * bucket, and each key with probability 1/(n + 1). n must be > 0 (0 gives
 * 0). Deterministic on every architecture (integer arithmetic only).
 */
uint32_t layout_jump(uint64_t key, uint32_t n);

/*
 * In the calls below, cls is the class to place by, or NULL for the one the
 * object id carries (-ENOENT if it carries none: pass the container's).
 */

/*
 * How many groups the object has in map m: the class's count, or for SX
 * m->width (the targets of every integrated engine, OUT ones included, so
 * that an engine leaving does not re-deal dkeys among groups). Errors:
 * -ENOENT, -EINVAL (bad class), -ENOSPC (SX on a map with no integrated
 * engine).
 */
int layout_obj_groups(const struct layout_map *m, struct lode_oid oid,
		      const struct layout_class *cls);
/*
 * The group a dkey falls in: a jump hash of dkey_hash (mixed with the
 * object id) over the object's groups, so that when SX's count grows only
 * about the new groups' share of dkeys changes group. Returns the group,
 * or the errors of layout_obj_groups.
 */
int layout_dkey_group(const struct layout_map *m, struct lode_oid oid,
		      const struct layout_class *cls, uint64_t dkey_hash);
/*
 * The engine and target of every member of group `group` of the object.
 * Depends on nothing but the object id, the group, the class and the map.
 * Members are on distinct engines, each in the layout (UP or DOWN, with at
 * least one target UP or DOWN), on a target in the layout. Errors:
 * -ENOENT, -EINVAL (bad class or group >= layout_obj_groups), -ENOSPC
 * (fewer engines in the layout than the group size; out untouched).
 * O(group size x log(engines)); no allocation.
 */
int layout_group_place(const struct layout_map *m, struct lode_oid oid,
		       const struct layout_class *cls, uint32_t group, struct layout_group *out);
/* layout_dkey_group, then layout_group_place: the shards of dkey_hash. */
int layout_dkey_place(const struct layout_map *m, struct lode_oid oid,
		      const struct layout_class *cls, uint64_t dkey_hash, struct layout_group *out);

#endif
