/*
 * What the engine's files share and nothing outside src/engine may use:
 * the index record, the key encoding, the log codec, the space manager.
 *
 *   target.c  the API: validation, visibility, group commit, io_uring
 *   wal.c     the log and checkpoint files: codec, append, replay
 *   space.c   the extent file, its block allocator, registered buffers
 *   btree.c   the ordered in-memory index
 */
#ifndef LODE_ENG_INTERNAL_H
#define LODE_ENG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/btree.h"
#include "engine/engine.h"

#define ENG_BLOCK 4096u            /* extent allocation unit and O_DIRECT alignment */
/*
 * One CRC32C per chunk of an extent: a block (REC_F_CSUM_BLOCK) for records
 * written since, 32 KiB for records written before (docs/decisions/0013).
 */
#define ENG_CSUM_CHUNK ENG_BLOCK
#define ENG_CSUM_CHUNK_OLD (32u << 10)

/*
 * Tests only: updates write records as builds before REC_F_CSUM_BLOCK did
 * (one checksum per ENG_CSUM_CHUNK_OLD), to show such stores still read.
 */
extern bool eng_csum_old_chunks;

/* ---- index records ---------------------------------------------------- */

enum rec_type {
	REC_SV = 1,        /* single value version */
	REC_ARR = 2,       /* byte-array extent */
	REC_PUNCH = 3,     /* object (dkey len 0), dkey (akey len 0) or akey punch */
	REC_ARR_PUNCH = 4, /* byte-array range punch: [off, off + loc) */
	REC_CONT = 5,      /* container: key 0|'C'|uuid, off = container index */
	REC_SNAP = 6,      /* snapshot: key 0|'S'|cidx|epoch */
	REC_TYPE_MAX = 6,
};

#define REC_F_INLINE 0x1     /* data follows the key inside the record */
#define REC_F_CSUM_BLOCK 0x2 /* one checksum per ENG_CSUM_CHUNK, else per ENG_CSUM_CHUNK_OLD */
#define REC_F_ALL (REC_F_INLINE | REC_F_CSUM_BLOCK)

/*
 * One index record. Keys encode the path so that memcmp order is the order
 * the engine scans in (see key_* in target.c):
 *   u32 cidx | oid.hi oid.lo | u16 dlen dkey | u16 alen akey | ~epoch [| ~seq]
 * all big-endian. After the key come the inline data (REC_F_INLINE) or,
 * for extents longer than one checksum chunk, one CRC per chunk.
 */
struct rec {
	uint64_t loc; /* extent file offset; REC_ARR_PUNCH: range length */
	uint64_t off; /* REC_ARR/REC_ARR_PUNCH: array offset; REC_CONT: cidx */
	uint32_t len; /* data length */
	uint32_t crc; /* CRC32C of the data (single chunk) */
	uint8_t type;
	uint8_t flags;
	uint16_t klen;
	uint8_t key[];
};

/* The checksum chunk of a record's extent. */
static inline uint32_t rec_csum_chunk(const struct rec *r)
{
	return (r->flags & REC_F_CSUM_BLOCK) ? ENG_CSUM_CHUNK : ENG_CSUM_CHUNK_OLD;
}

/* Checksums of len bytes in chunks of cs. */
static inline uint32_t csum_nchunks(uint32_t len, uint32_t cs)
{
	return len <= cs ? 1 : (len + cs - 1) / cs;
}

static inline uint32_t rec_nchunks(const struct rec *r)
{
	return csum_nchunks(r->len, rec_csum_chunk(r));
}

/* Bytes that follow the key: inline data or the chunk CRC array. */
static inline size_t rec_tail(const struct rec *r)
{
	if (r->flags & REC_F_INLINE)
		return r->len;
	if ((r->type == REC_SV || r->type == REC_ARR) && rec_nchunks(r) > 1)
		return (size_t)rec_nchunks(r) * 4;
	return 0;
}

static inline uint8_t *rec_data(struct rec *r)
{
	return r->key + r->klen;
}

static inline uint32_t rec_chunk_crc(const struct rec *r, uint32_t i)
{
	uint32_t c;

	if (rec_nchunks(r) == 1)
		return r->crc;
	__builtin_memcpy(&c, r->key + r->klen + 4 * (size_t)i, 4);
	return c;
}

static inline bool rec_has_extent(const struct rec *r)
{
	return (r->type == REC_SV || r->type == REC_ARR) && !(r->flags & REC_F_INLINE) && r->len > 0;
}

struct rec *rec_alloc(uint32_t klen, size_t tail);
const uint8_t *rec_key_of(const void *item, uint32_t *len);

uint32_t eng_crc32c(uint32_t seed, const void *buf, size_t len);

/* ---- the newest-version map (newest.c) ---------------------------------- */

struct newest {
	struct rec **v;
	size_t cap, n;
	bool failed; /* ran out of memory once: no longer exact, not used */
};

/* Length of the akey prefix of an akey-level record (0 for other records). */
uint32_t newest_pfx_len(const struct rec *r);
/* The newest record of the akey with prefix pfx, or NULL (not known). */
struct rec *newest_get(const struct newest *m, const uint8_t *pfx, uint32_t len);
void newest_put(struct newest *m, struct rec *r);
void newest_drop(struct newest *m, const struct rec *r, struct rec *next);
void newest_free(struct newest *m);
size_t newest_bytes(const struct newest *m);

/* ---- log ---------------------------------------------------------------- */

enum wal_op {
	WAL_INSERT = 1,  /* insert or replace one record */
	WAL_DELETE = 2,  /* remove the record with this key */
	WAL_DELPFX = 3,  /* remove every record whose key starts with this */
	WAL_MARK = 4,    /* every record with seq <= this was acknowledged */
};

#define WAL_HDR 24u /* u32 crc, u32 len, u32 gen, u8 op, 3 pad, u64 seq */

/* A decoded log record; pointers point into the buffer it was decoded from. */
struct wal_view {
	uint32_t len; /* bytes consumed, header included */
	uint32_t gen;
	uint8_t op;
	uint64_t seq;
	/* WAL_INSERT */
	uint8_t type, flags;
	uint32_t dlen, crc;
	uint64_t loc, off;
	/* WAL_INSERT, WAL_DELETE, WAL_DELPFX: key; WAL_INSERT: tail */
	const uint8_t *key;
	uint16_t klen;
	const uint8_t *tail;
	size_t tail_len;
	/* WAL_MARK */
	uint64_t mark;
};

/*
 * Decode one record at buf[0..avail). Returns 0 and fills v, or a negative
 * code: -EAGAIN (zeros or a short buffer: the end of the log) or
 * -LODE_ECORRUPT (a checksum or field is wrong). Never reads past avail.
 */
int wal_decode(const uint8_t *buf, size_t avail, struct wal_view *v);

/* Encoders append to a growable buffer; they return 0 or -ENOMEM. */
struct wbuf {
	uint8_t *p;
	size_t len, cap;
};
int wal_put_insert(struct wbuf *b, uint32_t gen, uint64_t seq, const struct rec *r);
int wal_put_key(struct wbuf *b, uint32_t gen, uint64_t seq, uint8_t op, const uint8_t *key,
		uint16_t klen);
int wal_put_mark(struct wbuf *b, uint32_t gen, uint64_t seq, uint64_t mark);
/* Rewrite the generation of every record in b (after a checkpoint). */
void wal_restamp(struct wbuf *b, uint32_t gen);
void wbuf_free(struct wbuf *b);

/* Append n bytes to b. 0 or -ENOMEM. */
int wbuf_put(struct wbuf *b, const void *p, size_t n);

/* ---- checkpoints (ckpt.c) --------------------------------------------- */

#define CKPT_KEY_MAX (2 * LODE_KEY_MAX + 64)

struct ckpt_enc {
	struct wbuf b;       /* encoded blocks; may be written out when !open */
	uint8_t prev[CKPT_KEY_MAX];
	uint32_t prev_len, nrec;
	size_t blk;          /* offset of the open block's header in b */
	bool open;
};

/* Add r (records must come in key order). 0 or -ENOMEM. */
int ckpt_enc_put(struct ckpt_enc *e, const struct rec *r);
/* Close the last block. */
void ckpt_enc_finish(struct ckpt_enc *e);

/* Receives each decoded record and owns it from then on, even on error. */
typedef int (*ckpt_rec_fn)(void *ctx, struct rec *r);
/*
 * Decode one block at buf[0..avail): calls fn for each record, sets *used to
 * the block's size. Returns the number of records, -LODE_ECORRUPT (bad
 * magic, checksum or field), -ENOMEM, or what fn returned. Never reads past
 * avail.
 */
int ckpt_block_decode(const uint8_t *buf, size_t avail, size_t *used, ckpt_rec_fn fn, void *ctx);

/* Build a record from a decoded WAL_INSERT. NULL on -ENOMEM. */
struct rec *wal_view_rec(const struct wal_view *v);

/* ---- space -------------------------------------------------------------- */

struct space {
	int fd;
	bool direct;      /* fd has O_DIRECT */
	bool ram;         /* map holds the file */
	uint8_t *map;     /* RAM mode: MAP_SHARED over [0, cap) */
	uint64_t cap;     /* capacity in bytes (multiple of ENG_BLOCK) */
	uint64_t size;    /* bytes fallocated so far */
	uint64_t *bits;   /* one bit per block, set = allocated */
	uint64_t nblocks, used, hint;
};

int space_open(struct space *s, const char *dir, bool ram, uint64_t cap);
void space_close(struct space *s);
/* Allocate nblk contiguous blocks; returns 0 and *loc, or -ENOSPC / errno of fallocate. */
int space_alloc(struct space *s, uint64_t nblk, uint64_t *loc);
void space_free(struct space *s, uint64_t loc, uint64_t nblk);
/* Mark blocks used while rebuilding from the index at open. -LODE_ECORRUPT on overlap. */
int space_mark(struct space *s, uint64_t loc, uint64_t nblk);

/* A buddy allocator over one region registered with io_uring. */
struct arena {
	uint8_t *base;
	size_t size;
	uint32_t *free_heads; /* per order: head block index + 1, 0 = empty */
	uint32_t *next;       /* per block: next free block + 1 at that order */
	uint8_t *order;       /* per block: order | 0x80 when free */
	unsigned max_order;
};
int arena_init(struct arena *a, size_t size);
void arena_fini(struct arena *a);
void *arena_alloc(struct arena *a, size_t size);
bool arena_owns(const struct arena *a, const void *p);
void arena_free(struct arena *a, void *p);

static inline uint64_t blocks_of(uint64_t len)
{
	return (len + ENG_BLOCK - 1) / ENG_BLOCK;
}

#endif
