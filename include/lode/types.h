/*
 * Identifiers shared by every layer of Lode: container uuids, object ids,
 * epochs, and the limits on keys and values.
 */
#ifndef LODE_TYPES_H
#define LODE_TYPES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A container's id. */
struct lode_uuid {
	uint8_t b[16];
};

/*
 * A 128-bit object id. The top 8 bits of hi carry the object type, the next
 * 8 bits the object class; the remaining 112 bits are the caller's. The
 * types here are below 16, and an erasure-coded object's id (its class the
 * id's or its container's) with a type of 16 or more is refused (-EINVAL),
 * since its targets keep each member's part under the id with the member
 * in those top 4 bits. Other classes take any type.
 */
struct lode_oid {
	uint64_t hi;
	uint64_t lo;
};

enum lode_otype {
	LODE_OT_KV = 1,    /* key-value: dkeys and akeys named by the caller */
	LODE_OT_ARRAY = 2, /* byte array chunked over dkeys */
	LODE_OT_FS = 3,    /* used by the POSIX layer */
};

#define LODE_OID_TYPE_SHIFT 56
#define LODE_OID_CLASS_SHIFT 48
#define LODE_OID_USER_MASK ((1ULL << LODE_OID_CLASS_SHIFT) - 1)

static inline struct lode_oid lode_oid_make(unsigned type, unsigned oclass, uint64_t hi_user,
					    uint64_t lo)
{
	struct lode_oid o;

	o.hi = ((uint64_t)(type & 0xff) << LODE_OID_TYPE_SHIFT) |
	       ((uint64_t)(oclass & 0xff) << LODE_OID_CLASS_SHIFT) | (hi_user & LODE_OID_USER_MASK);
	o.lo = lo;
	return o;
}

static inline unsigned lode_oid_type(struct lode_oid o)
{
	return (unsigned)(o.hi >> LODE_OID_TYPE_SHIFT);
}

static inline unsigned lode_oid_class(struct lode_oid o)
{
	return (unsigned)(o.hi >> LODE_OID_CLASS_SHIFT) & 0xff;
}

/* An epoch orders versions; a read at epoch E sees the newest version <= E. */
typedef uint64_t lode_epoch_t;
#define LODE_EPOCH_MAX UINT64_MAX /* "the latest": fetch, enumerate, aggregate */

#define LODE_KEY_MAX 1024u            /* longest dkey or akey, in bytes */
#define LODE_IO_MAX (64u << 20)       /* largest single value or extent update */

#ifdef __cplusplus
}
#endif
#endif
