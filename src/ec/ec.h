/*
 * Reed-Solomon erasure coding of stripes (object classes EC_2P1, EC_4P2,
 * EC_8P2), over ISA-L.
 *
 * A stripe is k data cells and p parity cells, all of one length. Cells are
 * numbered 0..k-1 (data) then k..k+p-1 (parity), and every call that takes
 * an array of cells or a bitmask of cells uses that numbering: bit i of a
 * mask is cell i. Any k of the k+p cells give back all the others (the code
 * is MDS: see ec.c for why the matrix guarantees it).
 *
 * The parity bytes are an on-media format: parity row j (cell k+j) is
 * sum over data cells c of data[c] * 1/((k+j) xor c) in GF(2^8) with the
 * polynomial 0x11d (ISA-L's gf_gen_cauchy1_matrix). tests/ec_test.c checks
 * this against its own arithmetic, so that no change of library can move it.
 *
 * Threads: a codec is immutable once ec_codec_create returns, so one codec
 * may serve any number of threads at once without a lock; so may a plan
 * once ec_plan_init returns. Nothing here blocks, does I/O or keeps state
 * between calls. Only ec_codec_create and ec_codec_destroy allocate.
 *
 * Errors follow include/lode/errno.h: 0 or a negative errno. Buffers may be
 * any length >= 1 and need no alignment; a length of 0 is -EINVAL (a zero
 * length stripe is a caller's bug, not a no-op, in every call that codes).
 *
 * The second half of the header is the arithmetic of a byte range of an
 * object laid out in stripes (ec_range_*): which stripes, cells and ranges
 * of cells a read or write touches, and which stripes it covers entirely.
 */
#ifndef LODE_EC_H
#define LODE_EC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EC_K_MAX 16                        /* data cells per stripe, at most */
#define EC_P_MAX 4                         /* parity cells per stripe, at most */
#define EC_CELLS_MAX (EC_K_MAX + EC_P_MAX) /* cells per stripe, at most */

/* ---- the codec ---------------------------------------------------------- */

struct ec_codec;

/*
 * A codec for k data and p parity cells: the generator matrix and ISA-L's
 * expanded encode tables, computed once here. *out is set on success only.
 * Errors: -EINVAL (k outside 1..EC_K_MAX, p outside 1..EC_P_MAX, out NULL),
 * -ENOMEM.
 */
int ec_codec_create(unsigned k, unsigned p, struct ec_codec **out);
/* Free a codec (NULL is fine). No call on it may be running. */
void ec_codec_destroy(struct ec_codec *c);
unsigned ec_codec_k(const struct ec_codec *c);
unsigned ec_codec_p(const struct ec_codec *c);

/*
 * Compute the p parity cells of a full stripe: data[0..k-1] are read,
 * parity[0..p-1] are written, all len bytes. A parity buffer must not
 * overlap any other buffer. Errors: -EINVAL (c, data, parity or one of
 * their buffers NULL, len 0).
 */
int ec_encode(const struct ec_codec *c, uint8_t *const *data, uint8_t *const *parity, size_t len);

/*
 * A decode plan: the tables that rebuild one set of missing cells from one
 * set of present ones. Making one inverts a k x k matrix and expands the
 * tables (about 2 us for 8+2, 0.35 us for 4+2: README.md); running one costs
 * about what encoding does. A caller that sees one erasure pattern again and
 * again (every stripe of a group while one target is down) makes the plan
 * once and keeps it; the struct is plain data, may be copied, lives on the
 * stack if the caller likes, and needs no destroy.
 */
struct ec_plan {
	uint8_t k;                              /* data cells of the codec it was made with */
	uint8_t nout;                           /* cells it rebuilds (0..p) */
	uint8_t src[EC_K_MAX];                  /* the k cells it reads, lowest numbers first */
	uint8_t out[EC_P_MAX];                  /* the cells it writes, lowest numbers first */
	uint32_t present, want;                 /* the pattern it was made for */
	uint8_t tbls[32 * EC_K_MAX * EC_P_MAX]; /* ISA-L's expanded decode tables */
};

/*
 * Make the plan that rebuilds the cells of want from those of present
 * (bitmasks over cells 0..k+p-1). Of the present cells, the k with the
 * lowest numbers are read, so data cells are preferred and all of them
 * being there makes rebuilding parity exactly an encode. want may be 0 (a
 * plan that does nothing). Errors:
 *   -EINVAL  c or plan NULL, a bit at k+p or above in present or want, or a
 *            cell in both
 *   -EIO     fewer than k cells present (more than p lost): the stripe
 *            cannot be rebuilt
 */
int ec_plan_init(const struct ec_codec *c, uint32_t present, uint32_t want, struct ec_plan *plan);

/*
 * Run a plan over one stripe: cells has k+p entries; the plan reads
 * cells[plan->src[i]] and writes cells[plan->out[j]], len bytes each. Other
 * entries are not touched and may be NULL. A written cell must not overlap
 * any other. Errors: -EINVAL (plan or cells NULL, a cell the plan reads or
 * writes NULL, len 0); nothing is written then.
 */
int ec_plan_run(const struct ec_plan *plan, uint8_t *const *cells, size_t len);

/*
 * ec_plan_init then ec_plan_run, for a caller with no plan to keep. Errors:
 * those of both; on any error no cell is written.
 */
int ec_reconstruct(const struct ec_codec *c, uint8_t *const *cells, uint32_t present, uint32_t want,
		   size_t len);

/*
 * Partial-stripe write. A write that changes bytes [o, o+len) of data cell
 * `cell` changes the same range of every parity cell, by coefficient x
 * (old xor new); so the parity can follow a partial write without reading
 * the rest of the stripe. See README.md for when this costs less than
 * reading the stripe and encoding again.
 *
 * ec_update: old_data and new_data are the range's bytes before and after
 * the write; parity[j] points at the same range of parity cell j (that is,
 * at parity cell j + o) and is updated in place. old_data may equal
 * new_data; a parity range must not overlap anything else. Errors: -EINVAL
 * (c, old_data, new_data, parity or one of parity[0..p-1] NULL, cell >= k,
 * len 0).
 */
int ec_update(const struct ec_codec *c, unsigned cell, const void *old_data, const void *new_data,
	      uint8_t *const *parity, size_t len);

/*
 * The same from the delta (old xor new, see ec_delta), for the parity cells
 * that are at hand: parity[j] == NULL skips parity cell j. This is what a
 * target holding one parity cell runs with a delta the data cell's target
 * sent it. Errors: -EINVAL (c, delta or parity NULL, cell >= k, len 0).
 */
int ec_update_delta(const struct ec_codec *c, unsigned cell, const void *delta,
		    uint8_t *const *parity, size_t len);

/* delta = old xor new, len bytes (any, 0 included). delta may be old or new. */
void ec_delta(void *delta, const void *old_data, const void *new_data, size_t len);

/* ---- stripes of an object ----------------------------------------------- */

/*
 * An object is laid out in stripes of k data cells of cell_size bytes:
 * object byte x sits in stripe x / (k * cell_size), data cell
 * (x / cell_size) % k, at offset x % cell_size of that cell. cell_size need
 * not be a power of two (Reed-Solomon does not care, and the arithmetic
 * divides); EC_CELL_MAX bounds it so that a stripe, k * cell_size, stays
 * far from 2^64 and a cell's length fits every call above.
 */
#define EC_CELL_MAX (1ull << 30)

/* The part of a byte range that falls in one stripe. */
struct ec_span {
	uint64_t stripe;  /* index of the stripe */
	uint64_t obj_off; /* object offset of the span's first byte */
	uint64_t buf_off; /* the same from the start of the range (in the caller's buffer) */
	uint64_t len;     /* bytes of the range in this stripe, >= 1 */
	unsigned first_cell, last_cell; /* data cells it touches: first_cell..last_cell */
	/* Per data cell c: the range [cell_off[c], cell_off[c] + cell_len[c]) of
	 * the cell that the span covers, and where those bytes are in the
	 * caller's buffer. cell_len[c] is 0 for cells outside first..last. */
	uint64_t cell_off[EC_K_MAX], cell_len[EC_K_MAX], cell_buf[EC_K_MAX];
	/* The smallest single range of each parity cell holding every byte a
	 * write of this span changes: [first_off, last_end) of the one cell when
	 * the span is in one cell, the whole cell otherwise. */
	uint64_t parity_off, parity_len;
	bool full; /* the span is the whole stripe: encode instead of updating */
};

/* An iterator over the stripes of a range. Plain data; no destroy. */
struct ec_range {
	unsigned k;
	uint64_t cell_size;
	uint64_t start, pos, end; /* the range, and where the next span starts */
};

/*
 * Start iterating over [off, off + len) of an object of k data cells of
 * cell_size bytes a stripe. len 0 is a range that touches nothing.
 * Errors: -EINVAL (r NULL, k outside 1..EC_K_MAX, cell_size outside
 * 1..EC_CELL_MAX), -EOVERFLOW (off + len above 2^64 - 1).
 */
int ec_range_init(struct ec_range *r, unsigned k, uint64_t cell_size, uint64_t off, uint64_t len);

/* Fill *s with the next stripe's span and return true; false when the range
 * is done (s untouched). Spans come in increasing stripe order. */
bool ec_range_next(struct ec_range *r, struct ec_span *s);

#endif
