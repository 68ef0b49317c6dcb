/*
 * The Reed-Solomon codec: encode, rebuild, and parity updates by delta,
 * all as GF(2^8) dot products run by ISA-L.
 *
 * The matrix. A stripe's k+p cells are G * d, where d is the k data cells
 * and G is (k+p) x k: the identity on top (the data cells are stored as
 * they are) and a Cauchy matrix below, C[j][c] = 1 / ((k+j) xor c). Cells
 * are lost and found again by picking any k rows of G, inverting that
 * k x k matrix, and multiplying. That works only if every k x k submatrix
 * of G is invertible, and with a Cauchy lower half it always is: such a
 * submatrix is, after permuting rows, some rows of I over some rows of C,
 * and its determinant is that of the square block of C on the columns the
 * identity rows miss. Every square block of a Cauchy matrix is itself a
 * Cauchy matrix (distinct x's, distinct y's, no x equal to a y since rows
 * start at k and columns end at k-1), and a Cauchy matrix is nonsingular.
 * ISA-L's other generator, gf_gen_rs_matrix, stacks powers of 2; its own
 * documentation says some pairs of (k, m) give singular submatrices. The
 * pairs Lode supports happen to be among those it lists as safe, but
 * "proved for every size" beats "checked for these sizes", so this file
 * uses gf_gen_cauchy1_matrix. tests/ec_test.c still inverts every k x k
 * submatrix for every 1 <= k <= 16, 1 <= p <= 4.
 *
 * ISA-L's entry points take int lengths; every call here takes a size_t,
 * so lengths are cut into EC_CHUNK pieces (a GiB; the chunked test build
 * makes it small and odd to run those paths). Each chunk is a whole call,
 * so the result does not depend on where the cuts fall.
 */
#include "ec/ec.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <isa-l/erasure_code.h>

#ifndef EC_CHUNK
#define EC_CHUNK ((size_t)1 << 30)
#endif
/* ec_update's pieces: the parity range of one piece stays in L1/L2
 * between its two passes (see ec_update). 4 to 16 KiB measured alike. */
#ifndef EC_UPDATE_CHUNK
#define EC_UPDATE_CHUNK 8192
#endif
_Static_assert(EC_UPDATE_CHUNK <= EC_CHUNK, "ec_update hands mul_add one chunk at most");

struct ec_codec {
	unsigned k, p;
	uint8_t gen[EC_CELLS_MAX * EC_K_MAX];   /* G, (k+p) x k, row-major */
	uint8_t tbls[32 * EC_K_MAX * EC_P_MAX]; /* ISA-L's tables for G's lower p rows */
};

/*
 * ISA-L picks each function's SIMD version on its first call and stores the
 * choice in a global pointer. Two threads making that first call at once
 * race on the pointer (harmlessly, both store the same value, but a race
 * all the same), so the first codec made resolves every entry point used
 * here before any codec exists to be shared.
 */
static pthread_once_t isal_once = PTHREAD_ONCE_INIT;

static void isal_resolve(void)
{
	uint8_t a[1] = {1}, t[32], in[64] = {0}, out[64];
	uint8_t *src[1] = {in}, *dst[1] = {out};

	ec_init_tables(1, 1, a, t);
	ec_encode_data(sizeof(in), 1, 1, t, src, dst);
	ec_encode_data_update(sizeof(in), 1, 1, 0, t, in, dst);
}

int ec_codec_create(unsigned k, unsigned p, struct ec_codec **out)
{
	struct ec_codec *c;

	if (!out || k < 1 || k > EC_K_MAX || p < 1 || p > EC_P_MAX)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_once(&isal_once, isal_resolve);
	c->k = k;
	c->p = p;
	gf_gen_cauchy1_matrix(c->gen, (int)(k + p), (int)k);
	ec_init_tables((int)k, (int)p, c->gen + k * k, c->tbls);
	*out = c;
	return 0;
}

void ec_codec_destroy(struct ec_codec *c)
{
	free(c);
}

unsigned ec_codec_k(const struct ec_codec *c)
{
	return c->k;
}

unsigned ec_codec_p(const struct ec_codec *c)
{
	return c->p;
}

static size_t min_size(size_t a, size_t b)
{
	return a < b ? a : b;
}

static bool all_set(uint8_t *const *v, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (!v[i])
			return false;
	return true;
}

/* out[j] = sum over i of coef(j, i) * in[i], for the tables of a nout x nin
 * matrix; len bytes each, in EC_CHUNK calls. */
static void dot(const uint8_t *tbls, unsigned nin, unsigned nout, uint8_t *const *in,
		uint8_t *const *out, size_t len)
{
	uint8_t *src[EC_K_MAX], *dst[EC_P_MAX];
	size_t n;

	for (size_t done = 0; done < len; done += n) {
		n = min_size(len - done, EC_CHUNK);
		for (unsigned i = 0; i < nin; i++)
			src[i] = in[i] + done;
		for (unsigned j = 0; j < nout; j++)
			dst[j] = out[j] + done;
		/* ISA-L does not write its tables; its prototypes just lack const. */
		ec_encode_data((int)n, (int)nin, (int)nout, (unsigned char *)tbls, src, dst);
	}
}

int ec_encode(const struct ec_codec *c, uint8_t *const *data, uint8_t *const *parity, size_t len)
{
	if (!c || !data || !parity || len == 0 || !all_set(data, c->k) || !all_set(parity, c->p))
		return -EINVAL;
	dot(c->tbls, c->k, c->p, data, parity, len);
	return 0;
}

/* ---- rebuilding --------------------------------------------------------- */

int ec_plan_init(const struct ec_codec *c, uint32_t present, uint32_t want, struct ec_plan *plan)
{
	uint8_t b[EC_K_MAX * EC_K_MAX], inv[EC_K_MAX * EC_K_MAX], d[EC_P_MAX * EC_K_MAX];
	unsigned k, m, n;
	uint32_t all;

	if (!c || !plan)
		return -EINVAL;
	k = c->k;
	m = c->k + c->p;
	all = (1u << m) - 1;
	if ((present & ~all) || (want & ~all) || (present & want))
		return -EINVAL;
	if ((unsigned)__builtin_popcount(present) < k)
		return -EIO;

	memset(plan, 0, sizeof(*plan));
	plan->k = (uint8_t)k;
	plan->present = present;
	plan->want = want;
	n = 0;
	for (unsigned i = 0; i < m && n < k; i++)
		if (present & (1u << i))
			plan->src[n++] = (uint8_t)i;
	for (unsigned i = 0; i < m; i++)
		if (want & (1u << i))
			plan->out[plan->nout++] = (uint8_t)i;
	if (plan->nout == 0)
		return 0;

	/* The present cells are B * data, B being their rows of G; so data is
	 * B^-1 * present, and a lost cell w is G[w] * B^-1 * present. For a
	 * data cell G[w] is a unit row and that is row w of B^-1. */
	for (unsigned r = 0; r < k; r++)
		memcpy(b + r * k, c->gen + plan->src[r] * k, k);
	if (gf_invert_matrix(b, inv, (int)k) != 0)
		return -EIO; /* never, for a Cauchy G (see the top of the file) */
	for (unsigned j = 0; j < plan->nout; j++) {
		unsigned w = plan->out[j];

		if (w < k) {
			memcpy(d + j * k, inv + w * k, k);
			continue;
		}
		for (unsigned col = 0; col < k; col++) {
			uint8_t s = 0;

			for (unsigned t = 0; t < k; t++)
				s ^= gf_mul(c->gen[w * k + t], inv[t * k + col]);
			d[j * k + col] = s;
		}
	}
	ec_init_tables((int)k, plan->nout, d, plan->tbls);
	return 0;
}

int ec_plan_run(const struct ec_plan *plan, uint8_t *const *cells, size_t len)
{
	uint8_t *in[EC_K_MAX], *out[EC_P_MAX];

	if (!plan || !cells || len == 0)
		return -EINVAL;
	for (unsigned i = 0; i < plan->k; i++)
		if (!(in[i] = cells[plan->src[i]]))
			return -EINVAL;
	for (unsigned j = 0; j < plan->nout; j++)
		if (!(out[j] = cells[plan->out[j]]))
			return -EINVAL;
	if (plan->nout)
		dot(plan->tbls, plan->k, plan->nout, in, out, len);
	return 0;
}

int ec_reconstruct(const struct ec_codec *c, uint8_t *const *cells, uint32_t present, uint32_t want,
		   size_t len)
{
	struct ec_plan plan;
	int rc;

	/* Refuse bad buffers before paying for the inversion. */
	if (!cells || len == 0)
		return -EINVAL;
	rc = ec_plan_init(c, present, want, &plan);
	if (rc < 0)
		return rc;
	return ec_plan_run(&plan, cells, len);
}

/* ---- partial-stripe updates --------------------------------------------- */

void ec_delta(void *delta, const void *old_data, const void *new_data, size_t len)
{
	uint8_t *d = delta;
	const uint8_t *a = old_data, *b = new_data;
	size_t i = 0;

	/* Words through memcpy: no alignment needed, and compilers turn each
	 * into one load; delta may alias old_data or new_data. */
	for (; i + 8 <= len; i += 8) {
		uint64_t x, y;

		memcpy(&x, a + i, 8);
		memcpy(&y, b + i, 8);
		x ^= y;
		memcpy(d + i, &x, 8);
	}
	for (; i < len; i++)
		d[i] = a[i] ^ b[i];
}

/* parity[j][off..off+n) ^= C[j][cell] * from[0..n), for the parity cells
 * given (NULL: skipped); n <= EC_CHUNK. */
static void mul_add(const struct ec_codec *c, unsigned cell, const uint8_t *from,
		    uint8_t *const *parity, size_t off, size_t n)
{
	uint8_t *dst[EC_P_MAX];
	unsigned char *src = (unsigned char *)from; /* read only; ISA-L lacks const */

	if (all_set(parity, c->p)) {
		for (unsigned j = 0; j < c->p; j++)
			dst[j] = parity[j] + off;
		ec_encode_data_update((int)n, (int)c->k, (int)c->p, (int)cell,
				      (unsigned char *)c->tbls, src, dst);
		return;
	}
	/* Row j's tables start 32 * k bytes after row j-1's. */
	for (unsigned j = 0; j < c->p; j++) {
		if (!parity[j])
			continue;
		dst[0] = parity[j] + off;
		ec_encode_data_update((int)n, (int)c->k, 1, (int)cell,
				      (unsigned char *)c->tbls + 32 * c->k * j, src, dst);
	}
}

int ec_update_delta(const struct ec_codec *c, unsigned cell, const void *delta,
		    uint8_t *const *parity, size_t len)
{
	size_t n;

	if (!c || !delta || !parity || cell >= c->k || len == 0)
		return -EINVAL;
	for (size_t done = 0; done < len; done += n) {
		n = min_size(len - done, EC_CHUNK);
		mul_add(c, cell, (const uint8_t *)delta + done, parity, done, n);
	}
	return 0;
}

/*
 * Multiplying by a constant in GF(2^8) distributes over xor, so
 * C * (old xor new) = C * old xor C * new: adding C * old and then C * new
 * to the parity adds C * delta without forming the delta. That is two
 * passes of ISA-L's multiply-accumulate (AVX-512 where the CPU has it)
 * instead of one xor loop (what a portable build of this file gets is SSE2)
 * plus one pass, and it measured two to three times faster here at every
 * cell size (README.md). Going piece by piece keeps each parity range in
 * cache between its two passes.
 */
int ec_update(const struct ec_codec *c, unsigned cell, const void *old_data, const void *new_data,
	      uint8_t *const *parity, size_t len)
{
	const uint8_t *o = old_data, *nw = new_data;
	size_t n;

	if (!c || !old_data || !new_data || !parity || cell >= c->k || len == 0 ||
	    !all_set(parity, c->p))
		return -EINVAL;
	for (size_t done = 0; done < len; done += n) {
		n = min_size(len - done, EC_UPDATE_CHUNK);
		mul_add(c, cell, o + done, parity, done, n);
		mul_add(c, cell, nw + done, parity, done, n);
	}
	return 0;
}
