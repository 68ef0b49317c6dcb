/*
 * lode-place-bench: how evenly placement spreads shards, how many move when
 * the map changes, and what a placement costs.
 *
 * It builds a map of E engines with T targets each, all UP, and places one
 * dkey of each of N objects of one class (random object ids carrying the
 * class, random dkey hashes; a group of G members is G shards). It prints:
 *
 *   spread     shards per target: min, max (relative to the mean) and the
 *              standard deviation relative to the mean
 *   out        the share of shards whose engine or target changes when one
 *              engine (the middle slot's) goes OUT, against the ideal 1/E,
 *              and how many of them moved though their engine stayed in
 *              the layout (the placement promises none)
 *   grow       the share that moves when a NEW engine with T targets is
 *              integrated (NEW -> UP), against the ideal 1/(E + 1)
 *   cost       ns per layout_dkey_place call on this machine (the best of
 *              five passes over the N objects)
 *
 * All from one seed, so two runs print the same counts.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "layout/layout.h"
#include "lode/errno.h"

static const char usage[] =
	"usage: lode-place-bench [options]\n"
	"\n"
	"Places one dkey of each of N objects on a map of E engines x T targets (all UP)\n"
	"and prints the per-target spread, the share of shards that move when one\n"
	"engine goes OUT and when one engine is added, and the cost of a placement.\n"
	"\n"
	"Options:\n"
	"  -e, --engines E   engines in the map, 1..65535 (default 8)\n"
	"  -t, --targets T   targets per engine, 1..1024 (default 4)\n"
	"  -c, --class NAME  object class: S1..S128, SX, RP_2, RP_3, EC_2P1, EC_4P2,\n"
	"                    EC_8P2 (default S1)\n"
	"  -n, --objects N   objects, 1..100000000 (default 1000000)\n"
	"      --json        one JSON object instead of text\n"
	"  -h, --help        this text\n";

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "lode-place-bench: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n(lode-place-bench --help for usage)\n");
	return 2;
}

/* A whole decimal number in [lo, hi], nothing else. */
static int parse_num(const char *s, unsigned long lo, unsigned long hi, unsigned long *v)
{
	char *end;

	if (!s[0] || s[0] < '0' || s[0] > '9')
		return -EINVAL;
	errno = 0;
	*v = strtoul(s, &end, 10);
	if (errno || *end || *v < lo || *v > hi)
		return -EINVAL;
	return 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = (*s += 0x9e3779b97f4a7c15ull);

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static int fail(const char *what, int rc)
{
	fprintf(stderr, "lode-place-bench: %s: %s\n", what, lode_strerror(rc));
	return 1;
}

/* Shards of the objects that sit elsewhere in b than in a; *stray counts
 * those among them whose engine in a is still in b's layout. */
static int moved(const struct layout_map *a, const struct layout_map *b,
		 const struct lode_oid *oid, const uint64_t *dkey, unsigned long n, uint64_t *nmoved,
		 uint64_t *stray)
{
	struct layout_group ga, gb;

	*nmoved = *stray = 0;
	for (unsigned long i = 0; i < n; i++) {
		int rc = layout_dkey_place(a, oid[i], NULL, dkey[i], &ga) ?:
			 layout_dkey_place(b, oid[i], NULL, dkey[i], &gb);

		if (rc)
			return rc;
		for (unsigned j = 0; j < ga.size; j++) {
			const struct layout_engine *e;

			if (ga.group == gb.group && ga.shard[j].engine == gb.shard[j].engine &&
			    ga.shard[j].tgt == gb.shard[j].tgt)
				continue;
			(*nmoved)++;
			e = layout_map_engine(b, ga.shard[j].engine);
			if (ga.group == gb.group && e && e->in && layout_state_in(e->tgt[ga.shard[j].tgt]))
				(*stray)++;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"engines", required_argument, NULL, 'e'}, {"targets", required_argument, NULL, 't'},
		{"class", required_argument, NULL, 'c'},   {"objects", required_argument, NULL, 'n'},
		{"json", no_argument, NULL, 'j'},          {"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	unsigned long ne = 8, nt = 4, n = 1000000;
	const char *cname = "S1";
	bool json = false;
	struct layout_class cls;
	struct layout_map *m, *out_map, *grow_map;
	struct lode_oid *oid;
	uint64_t *dkey, *count, seed = 0x6c6f6465, shards = 0, out_moved, out_stray, grow_moved,
			       grow_stray, best = UINT64_MAX;
	uint32_t out_id;
	double mean, var = 0, ns;
	uint64_t cmin = UINT64_MAX, cmax = 0;
	int c, rc;

	while ((c = getopt_long(argc, argv, "e:t:c:n:h", opts, NULL)) != -1) {
		switch (c) {
		case 'e':
			if (parse_num(optarg, 1, LAYOUT_ENGINES_MAX - 1, &ne))
				return usage_error("--engines \"%s\": a number from 1 to 65535", optarg);
			break;
		case 't':
			if (parse_num(optarg, 1, LAYOUT_TGTS_MAX, &nt))
				return usage_error("--targets \"%s\": a number from 1 to 1024", optarg);
			break;
		case 'c':
			cname = optarg;
			break;
		case 'n':
			if (parse_num(optarg, 1, 100000000, &n))
				return usage_error("--objects \"%s\": a number from 1 to 100000000",
						   optarg);
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		default:
			fprintf(stderr, "(lode-place-bench --help for usage)\n");
			return 2;
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument \"%s\"", argv[optind]);
	if (layout_class_parse(cname, &cls))
		return usage_error("--class \"%s\": one of S1..S128, SX, RP_2, RP_3, EC_2P1, "
				   "EC_4P2, EC_8P2",
				   cname);
	/* One engine goes OUT below: the group must still fit. */
	if (cls.group_size + 1 > ne) {
		fprintf(stderr,
			"lode-place-bench: --class %s has groups of %u: it needs --engines %u or more "
			"(one goes OUT)\n",
			cname, cls.group_size, cls.group_size + 1);
		return 2;
	}

	rc = layout_map_create(1, &m);
	for (unsigned long e = 0; !rc && e < ne; e++)
		rc = layout_map_engine_add(m, (uint32_t)e + 1, (unsigned)nt, LAYOUT_UP);
	if (rc)
		return fail("building the map", rc);
	out_id = (uint32_t)(ne / 2) + 1;
	rc = layout_map_dup(m, &out_map) ?: layout_map_engine_set(out_map, out_id, LAYOUT_OUT);
	if (rc)
		return fail("taking an engine out", rc);
	rc = layout_map_dup(m, &grow_map) ?:
	     layout_map_engine_add(grow_map, (uint32_t)ne + 1, (unsigned)nt, LAYOUT_NEW) ?:
	     layout_map_engine_set(grow_map, (uint32_t)ne + 1, LAYOUT_UP);
	if (rc)
		return fail("adding an engine", rc);

	oid = malloc(n * sizeof(*oid));
	dkey = malloc(n * sizeof(*dkey));
	count = calloc(m->width, sizeof(*count));
	if (!oid || !dkey || !count)
		return fail("allocating", -ENOMEM);
	for (unsigned long i = 0; i < n; i++) {
		uint64_t hi = rng_next(&seed);

		oid[i] = lode_oid_make(LODE_OT_KV, cls.id, hi, rng_next(&seed));
		dkey[i] = rng_next(&seed);
	}

	/* Spread: shards per target (slot s, target t at s * nt + t). */
	for (unsigned long i = 0; i < n; i++) {
		struct layout_group g;

		rc = layout_dkey_place(m, oid[i], NULL, dkey[i], &g);
		if (rc)
			return fail("placing", rc);
		for (unsigned j = 0; j < g.size; j++)
			count[(g.shard[j].engine - 1) * nt + g.shard[j].tgt]++;
		shards += g.size;
	}
	mean = (double)shards / (double)m->width;
	for (uint32_t t = 0; t < m->width; t++) {
		cmin = count[t] < cmin ? count[t] : cmin;
		cmax = count[t] > cmax ? count[t] : cmax;
		var += ((double)count[t] - mean) * ((double)count[t] - mean);
	}
	var /= m->width;

	rc = moved(m, out_map, oid, dkey, n, &out_moved, &out_stray) ?:
	     moved(m, grow_map, oid, dkey, n, &grow_moved, &grow_stray);
	if (rc)
		return fail("placing", rc);

	/* Cost: the best of five passes, so another process's burst is not
	 * charged to placement. */
	for (int pass = 0; pass < 5; pass++) {
		uint64_t sum = 0, t0 = now_ns(), dt;
		struct layout_group g;

		for (unsigned long i = 0; i < n; i++) {
			layout_dkey_place(m, oid[i], NULL, dkey[i], &g);
			sum += g.shard[0].engine + g.shard[0].tgt;
		}
		dt = now_ns() - t0;
		if (sum == 0)
			fprintf(stderr, "(no shard placed)\n"); /* keeps the loop */
		best = dt < best ? dt : best;
	}
	ns = (double)best / (double)n;

	if (json) {
		printf("{\"engines\": %lu, \"targets\": %lu, \"class\": \"%s\", \"objects\": %lu, "
		       "\"shards\": %" PRIu64 ", \"min\": %" PRIu64 ", \"max\": %" PRIu64
		       ", \"min_rel\": %.5f, \"max_rel\": %.5f, \"stddev_rel\": %.5f, "
		       "\"out_moved\": %.5f, \"out_ideal\": %.5f, \"out_stray\": %" PRIu64
		       ", \"grow_moved\": %.5f, \"grow_ideal\": %.5f, \"ns_per_place\": %.1f}\n",
		       ne, nt, cname, n, shards, cmin, cmax, (double)cmin / mean - 1,
		       (double)cmax / mean - 1, sqrt(var) / mean, (double)out_moved / (double)shards,
		       1.0 / (double)ne, out_stray, (double)grow_moved / (double)shards,
		       1.0 / (double)(ne + 1), ns);
	} else {
		printf("map: %lu engines x %lu targets, class %s (%u groups of %u), %lu objects, "
		       "one dkey each: %" PRIu64 " shards\n",
		       ne, nt, cname, cls.groups ? cls.groups : m->width, cls.group_size, n, shards);
		printf("spread: %.1f shards per target on average, min %" PRIu64 " (%+.2f%%), max %" PRIu64
		       " (%+.2f%%), stddev %.2f%% of the mean\n",
		       mean, cmin, 100 * ((double)cmin / mean - 1), cmax,
		       100 * ((double)cmax / mean - 1), 100 * sqrt(var) / mean);
		printf("out: engine %u OUT moves %.3f%% of shards (ideal 1/%lu = %.3f%%); "
		       "moved though their engine stayed in: %" PRIu64 "\n",
		       out_id, 100.0 * (double)out_moved / (double)shards, ne, 100.0 / (double)ne,
		       out_stray);
		printf("grow: engine %lu integrated (NEW -> UP) moves %.3f%% of shards (ideal 1/%lu = "
		       "%.3f%%)\n",
		       ne + 1, 100.0 * (double)grow_moved / (double)shards, ne + 1,
		       100.0 / (double)(ne + 1));
		printf("cost: %.1f ns per layout_dkey_place (best of 5 passes of %lu)\n", ns, n);
	}
	free(oid);
	free(dkey);
	free(count);
	layout_map_free(m);
	layout_map_free(out_map);
	layout_map_free(grow_map);
	return 0;
}
