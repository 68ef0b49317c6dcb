/*
 * lode-ec-bench: what Reed-Solomon coding costs a client, beside what the
 * same machine does with plain copies in the same run.
 *
 * For each code (k + p) and cell size, on one thread:
 *
 *   encode     ec_encode of a full stripe
 *   rebuild 1  ec_plan_run rebuilding data cell 0 (a kept plan, as a client
 *              reading a degraded group keeps one; making the plan is
 *              timed on its own line)
 *   rebuild p  the same for data cells 0..p-1; and again through
 *              ec_reconstruct, which makes the plan on every call
 *   update     ec_update of one whole data cell (old, new -> p parity cells)
 *   memcpy     the stripe's data copied once: the ceiling of a pass over it
 *   RP_2/RP_3  the data copied to one, then two, other buffers: what a
 *              replicated class pays in the client for its extra copies
 *
 * Throughput is GiB/s of stripe data (k * cell bytes per stripe) for
 * encode, rebuild, memcpy and the RP lines, and GiB/s of changed data (cell
 * bytes) for update. Each figure is the median of --repeat samples with
 * their min-max; a sample repeats the operation for at least --min-ms.
 * Every buffer is written before timing starts, so no page faults are in
 * the numbers; small cells stay in the caches, as they would on a client
 * that codes a stripe right after filling it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ec/ec.h"

#define PROG "lode-ec-bench"
#define MAX_CODES 8
#define MAX_CELLS 8

struct opts {
	unsigned repeat;
	unsigned min_ms;
	unsigned ncodes, ncells;
	unsigned k[MAX_CODES], p[MAX_CODES];
	uint64_t cell[MAX_CELLS];
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: " PROG " [--repeat N] [--min-ms MS] [--codes K+P,...] [--cells SIZE,...]\n"
		"Times src/ec's encode, rebuild and partial update on one thread, beside the\n"
		"same run's memcpy and the copies replication makes.\n"
		"  --repeat N      samples per figure; the median and min-max are shown [5]\n"
		"  --min-ms MS     each sample runs at least this long [40]\n"
		"  --codes LIST    codes to time, K+P with 1<=K<=%d, 1<=P<=%d [2+1,4+2,8+2]\n"
		"  --cells LIST    cell sizes in bytes, K/M/G suffixes meaning KiB/MiB/GiB,\n"
		"                  1 byte to 1 GiB [4K,64K,1M]\n"
		"  -h, --help      this text\n",
		EC_K_MAX, EC_P_MAX);
}

static int bad(const char *fmt, const char *what)
{
	fprintf(stderr, PROG ": ");
	fprintf(stderr, fmt, what);
	fprintf(stderr, " (see --help)\n");
	return 2;
}

/* A whole decimal number in [lo, hi], with an optional K/M/G (binary)
 * suffix when allowed. */
static int parse_num(const char *s, uint64_t lo, uint64_t hi, int suffix, uint64_t *out)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	if (suffix && *end) {
		switch (*end++) {
		case 'K':
		case 'k':
			shift = 10;
			break;
		case 'M':
		case 'm':
			shift = 20;
			break;
		case 'G':
		case 'g':
			shift = 30;
			break;
		default:
			return -EINVAL;
		}
	}
	if (*end || (shift && v > (UINT64_MAX >> shift)))
		return -EINVAL;
	v <<= shift;
	if (v < lo || v > hi)
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_codes(char *list, struct opts *o)
{
	o->ncodes = 0;
	for (char *save = NULL, *t = strtok_r(list, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		char *plus = strchr(t, '+');
		uint64_t k, p;

		if (o->ncodes == MAX_CODES)
			return bad("at most 8 codes, got '%s' and more", t);
		if (!plus)
			return bad("code '%s' is not K+P", t);
		*plus = '\0';
		if (parse_num(t, 1, EC_K_MAX, 0, &k) || parse_num(plus + 1, 1, EC_P_MAX, 0, &p)) {
			*plus = '+';
			return bad("code '%s' is not K+P with 1<=K<=16 and 1<=P<=4", t);
		}
		o->k[o->ncodes] = (unsigned)k;
		o->p[o->ncodes++] = (unsigned)p;
	}
	return o->ncodes ? 0 : bad("%s", "--codes needs at least one K+P");
}

static int parse_cells(char *list, struct opts *o)
{
	o->ncells = 0;
	for (char *save = NULL, *t = strtok_r(list, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		if (o->ncells == MAX_CELLS)
			return bad("at most 8 cell sizes, got '%s' and more", t);
		if (parse_num(t, 1, EC_CELL_MAX, 1, &o->cell[o->ncells]))
			return bad("cell size '%s' is not a size from 1 to 1G", t);
		o->ncells++;
	}
	return o->ncells ? 0 : bad("%s", "--cells needs at least one size");
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){.repeat = 5,
			   .min_ms = 40,
			   .ncodes = 3,
			   .ncells = 3,
			   .k = {2, 4, 8},
			   .p = {1, 2, 2},
			   .cell = {4096, 65536, 1 << 20}};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		char *v = i + 1 < argc ? argv[i + 1] : NULL;
		uint64_t n;
		int rc;

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			exit(0);
		}
		if (strcmp(a, "--repeat") && strcmp(a, "--min-ms") && strcmp(a, "--codes") &&
		    strcmp(a, "--cells"))
			return bad("unknown argument '%s'", a);
		if (!v)
			return bad("%s needs a value", a);
		i++;
		if (!strcmp(a, "--repeat")) {
			if (parse_num(v, 1, 1000, 0, &n))
				return bad("--repeat '%s' is not a number from 1 to 1000", v);
			o->repeat = (unsigned)n;
		} else if (!strcmp(a, "--min-ms")) {
			if (parse_num(v, 1, 60000, 0, &n))
				return bad("--min-ms '%s' is not a number from 1 to 60000", v);
			o->min_ms = (unsigned)n;
		} else if ((rc = !strcmp(a, "--codes") ? parse_codes(v, o) : parse_cells(v, o)))
			return rc;
	}
	return 0;
}

/* ---- timing ------------------------------------------------------------- */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The stripe and the buffers every operation works on. */
struct bench {
	struct ec_codec *c;
	unsigned k, p;
	size_t cs;
	uint8_t *cell[EC_CELLS_MAX]; /* the coded stripe */
	uint8_t *work[EC_CELLS_MAX]; /* cells to rebuild into (data cells 0..p-1 used) */
	uint8_t *copy1[EC_K_MAX], *copy2[EC_K_MAX], *newdata;
	struct ec_plan plan1, planp;
	int failed;
};

enum op {
	OP_ENCODE,
	OP_REBUILD1,
	OP_REBUILDP,
	OP_RECON,
	OP_UPDATE,
	OP_MEMCPY,
	OP_RP3,
	OP_PLAN,
	OP_N
};

static void run_op(struct bench *b, enum op op)
{
	uint8_t *cells[EC_CELLS_MAX];
	uint8_t *const *par = b->cell + b->k;
	int rc = 0;

	switch (op) {
	case OP_ENCODE:
		rc = ec_encode(b->c, b->cell, b->cell + b->k, b->cs);
		break;
	case OP_REBUILD1:
	case OP_REBUILDP:
		/* Lost cells are rebuilt into other buffers, so the stripe stays
		 * whole for the next round. */
		memcpy(cells, b->cell, sizeof(cells));
		for (unsigned i = 0; i < b->p; i++)
			cells[i] = b->work[i];
		rc = ec_plan_run(op == OP_REBUILD1 ? &b->plan1 : &b->planp, cells, b->cs);
		break;
	case OP_RECON: /* rebuild p, making the plan each time */
		memcpy(cells, b->cell, sizeof(cells));
		for (unsigned i = 0; i < b->p; i++)
			cells[i] = b->work[i];
		rc = ec_reconstruct(b->c, cells, b->planp.present, b->planp.want, b->cs);
		break;
	case OP_UPDATE:
		/* Alternate new and old contents so the data stays consistent
		 * with the parity, whichever round is last. */
		rc = ec_update(b->c, 0, b->cell[0], b->newdata, par, b->cs);
		{
			uint8_t *t = b->cell[0];

			b->cell[0] = b->newdata;
			b->newdata = t;
		}
		break;
	case OP_MEMCPY:
		for (unsigned i = 0; i < b->k; i++)
			memcpy(b->copy1[i], b->cell[i], b->cs);
		break;
	case OP_RP3:
		for (unsigned i = 0; i < b->k; i++) {
			memcpy(b->copy1[i], b->cell[i], b->cs);
			memcpy(b->copy2[i], b->cell[i], b->cs);
		}
		break;
	case OP_PLAN: {
		struct ec_plan plan;

		rc = ec_plan_init(b->c, ((1u << (b->k + b->p)) - 1) & ~((1u << b->p) - 1),
				  (1u << b->p) - 1, &plan);
		b->failed |= plan.nout != b->p;
		break;
	}
	default:
		break;
	}
	if (rc)
		b->failed = 1;
}

/* Operations per second over at least min_ms. */
static double sample(struct bench *b, enum op op, unsigned min_ms)
{
	double t0 = now_s(), t, budget = min_ms / 1000.0;
	uint64_t n = 0;

	do {
		run_op(b, op);
		n++;
		t = now_s() - t0;
	} while (t < budget);
	return (double)n / t;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

struct stat3 {
	double med, min, max;
};

/* Samples taken round-robin over the operations, so that a burst of noise
 * from the machine's other tenants hits all of them, not one. */
static void measure(struct bench *b, const struct opts *o, struct stat3 out[OP_N])
{
	double *v = calloc((size_t)OP_N * o->repeat, sizeof(*v));

	if (!v) {
		fprintf(stderr, PROG ": out of memory\n");
		exit(1);
	}
	for (int op = 0; op < OP_N; op++)
		sample(b, (enum op)op, o->min_ms / 4 + 1); /* warm caches, fault pages */
	for (unsigned r = 0; r < o->repeat; r++)
		for (int op = 0; op < OP_N; op++)
			v[op * o->repeat + r] = sample(b, (enum op)op, o->min_ms);
	for (int op = 0; op < OP_N; op++) {
		double *s = v + op * o->repeat;

		qsort(s, o->repeat, sizeof(*s), cmp_double);
		out[op].min = s[0];
		out[op].max = s[o->repeat - 1];
		out[op].med = o->repeat % 2 ? s[o->repeat / 2]
					    : (s[o->repeat / 2 - 1] + s[o->repeat / 2]) / 2;
	}
	free(v);
}

/* ---- setup and report ---------------------------------------------------- */

static uint8_t *buf(size_t len)
{
	/* 64-byte aligned and rounded up, as a client's I/O buffers would be. */
	uint8_t *p = aligned_alloc(64, (len + 63) & ~(size_t)63);

	if (!p) {
		fprintf(stderr, PROG ": cannot allocate %zu bytes\n", len);
		exit(1);
	}
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(i * 2654435761u >> 13);
	return p;
}

static void bench_init(struct bench *b, unsigned k, unsigned p, size_t cs)
{
	int rc;

	memset(b, 0, sizeof(*b));
	b->k = k;
	b->p = p;
	b->cs = cs;
	if ((rc = ec_codec_create(k, p, &b->c)) < 0) {
		fprintf(stderr, PROG ": ec_codec_create(%u, %u): %s\n", k, p, strerror(-rc));
		exit(1);
	}
	for (unsigned i = 0; i < k + p; i++)
		b->cell[i] = buf(cs);
	for (unsigned i = 0; i < p; i++)
		b->work[i] = buf(cs);
	for (unsigned i = 0; i < k; i++) {
		b->cell[i][0] ^= (uint8_t)i; /* cells differ */
		b->copy1[i] = buf(cs);
		b->copy2[i] = buf(cs);
	}
	b->newdata = buf(cs);
	if (ec_encode(b->c, b->cell, b->cell + k, cs) < 0 ||
	    ec_plan_init(b->c, ((1u << (k + p)) - 1) & ~1u, 1u, &b->plan1) < 0 ||
	    ec_plan_init(b->c, ((1u << (k + p)) - 1) & ~((1u << p) - 1), (1u << p) - 1, &b->planp) <
		0) {
		fprintf(stderr, PROG ": setting up %u+%u failed\n", k, p);
		exit(1);
	}
}

/* After the timing: the stripe must still decode to itself. */
static int bench_check(struct bench *b)
{
	uint8_t *cells[EC_CELLS_MAX];

	memcpy(cells, b->cell, sizeof(cells));
	for (unsigned i = 0; i < b->p; i++)
		cells[i] = b->work[i];
	if (b->failed || ec_plan_run(&b->planp, cells, b->cs) < 0)
		return -1;
	for (unsigned i = 0; i < b->p; i++)
		if (memcmp(b->work[i], b->cell[i], b->cs))
			return -1;
	return 0;
}

static void bench_fini(struct bench *b)
{
	for (unsigned i = 0; i < b->k + b->p; i++)
		free(b->cell[i]);
	for (unsigned i = 0; i < b->p; i++)
		free(b->work[i]);
	for (unsigned i = 0; i < b->k; i++) {
		free(b->copy1[i]);
		free(b->copy2[i]);
	}
	free(b->newdata);
	ec_codec_destroy(b->c);
}

static void size_text(uint64_t n, char *out, size_t cap)
{
	if (n >= (1 << 20) && n % (1 << 20) == 0)
		snprintf(out, cap, "%" PRIu64 " MiB", n >> 20);
	else if (n >= 1024 && n % 1024 == 0)
		snprintf(out, cap, "%" PRIu64 " KiB", n >> 10);
	else
		snprintf(out, cap, "%" PRIu64 " B", n);
}

/* One line: a rate (ops/s times bytes per op) in GiB/s, median and range. */
static void line(const char *what, struct stat3 s, double bytes, double ceiling)
{
	const double g = 1024.0 * 1024 * 1024;

	printf("  %-22s %7.2f GiB/s  (%.2f-%.2f)", what, s.med * bytes / g, s.min * bytes / g,
	       s.max * bytes / g);
	if (ceiling > 0)
		printf("  %.2fx memcpy", s.med * bytes / ceiling);
	printf("\n");
}

int main(int argc, char **argv)
{
	struct opts o;
	int rc = parse_args(argc, argv, &o);

	if (rc)
		return rc;
	printf("%s: one thread; median of %u samples of >= %u ms (min-max); GiB/s of\n"
	       "stripe data, of changed data for update\n",
	       PROG, o.repeat, o.min_ms);
	for (unsigned ci = 0; ci < o.ncodes; ci++)
		for (unsigned zi = 0; zi < o.ncells; zi++) {
			struct bench b;
			struct stat3 st[OP_N];
			unsigned k = o.k[ci], p = o.p[ci];
			size_t cs = (size_t)o.cell[zi];
			double data = (double)k * (double)cs, ceil_bps;
			char cell_txt[32], stripe_txt[32], what[32];

			bench_init(&b, k, p, cs);
			measure(&b, &o, st);
			if (bench_check(&b) < 0) {
				fprintf(stderr,
					PROG ": %u+%u: a coding call failed or the "
					     "stripe no longer decodes\n",
					k, p);
				return 1;
			}
			ceil_bps = st[OP_MEMCPY].med * data;
			size_text(cs, cell_txt, sizeof(cell_txt));
			size_text((uint64_t)k * cs, stripe_txt, sizeof(stripe_txt));
			printf("EC %u+%u, cell %s (stripe data %s)\n", k, p, cell_txt, stripe_txt);
			line("encode", st[OP_ENCODE], data, ceil_bps);
			line("rebuild 1 data cell", st[OP_REBUILD1], data, ceil_bps);
			snprintf(what, sizeof(what), "rebuild p=%u data cells", p);
			line(what, st[OP_REBUILDP], data, ceil_bps);
			line("  same, plan each time", st[OP_RECON], data, ceil_bps);
			line("update 1 whole cell", st[OP_UPDATE], (double)cs, ceil_bps);
			line("memcpy (ceiling)", st[OP_MEMCPY], data, 0);
			printf("  RP_2/RP_3 cost         1 copy %.2f GiB/s, 2 copies %.2f GiB/s "
			       "(EC encode: %.2f)\n",
			       st[OP_MEMCPY].med * data / (1 << 30),
			       st[OP_RP3].med * data / (1 << 30),
			       st[OP_ENCODE].med * data / (1 << 30));
			printf("  plan (%u lost)          %.2f us (%.2f-%.2f)\n", p,
			       1e6 / st[OP_PLAN].med, 1e6 / st[OP_PLAN].max, 1e6 / st[OP_PLAN].min);
			fflush(stdout);
			bench_fini(&b);
		}
	return 0;
}
