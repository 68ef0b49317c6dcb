/*
 * lode-tgt: look after one storage target directly, without a server.
 *
 * For operators and for the quick start until loded serves targets: create
 * a target, check it (opening runs crash recovery), manage containers, move
 * files in and out as byte arrays, and run aggregation. It takes the
 * target's lock, so it refuses a target that a running process holds.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"

#define CHUNK (1u << 20)

static const char usage[] =
	"usage: lode-tgt [options] DIR COMMAND [ARGS]\n"
	"\n"
	"Commands:\n"
	"  init [CONT]             create the target (and container CONT, default \"default\")\n"
	"  status                  recover if needed and print the target's state\n"
	"  cont create|destroy CONT\n"
	"  cont list\n"
	"  put CONT NAME [FILE]    store FILE (or stdin) as object NAME (a byte array)\n"
	"  get CONT NAME [FILE]    write object NAME to FILE (or stdout)\n"
	"  ls CONT                 list objects stored with put\n"
	"  aggregate CONT          drop versions no snapshot can see, free their space\n"
	"\n"
	"Options:\n"
	"  --ram                   the target is RAM-mode (files on tmpfs, no flushes)\n"
	"  --capacity BYTES        extent file capacity when creating (default 1 GiB; K/M/G/T suffixes)\n"
	"  --json                  status as JSON\n"
	"  -h, --help              this text\n"
	"\n"
	"A container is named by up to 16 bytes or by a uuid (8-4-4-4-12 hex).\n";

static int fail(const char *what, int rc)
{
	fprintf(stderr, "lode-tgt: %s: %s\n", what, lode_strerror(rc));
	return 1;
}

static int parse_cont(const char *s, struct lode_uuid *u)
{
	unsigned v[16];

	memset(u, 0, sizeof(*u));
	if (strlen(s) == 36 &&
	    sscanf(s, "%2x%2x%2x%2x-%2x%2x-%2x%2x-%2x%2x-%2x%2x%2x%2x%2x%2x", &v[0], &v[1], &v[2], &v[3],
		   &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &v[11], &v[12], &v[13], &v[14],
		   &v[15]) == 16) {
		for (int i = 0; i < 16; i++)
			u->b[i] = (uint8_t)v[i];
		return 0;
	}
	if (strlen(s) == 0 || strlen(s) > 16)
		return -EINVAL;
	memcpy(u->b, s, strlen(s));
	return 0;
}

static void print_cont(const struct lode_uuid *u)
{
	int printable = u->b[0] != 0, i, end = 16;

	while (end > 0 && u->b[end - 1] == 0)
		end--;
	for (i = 0; i < end; i++)
		printable &= u->b[i] >= 0x20 && u->b[i] < 0x7f;
	if (printable) {
		printf("%.*s\n", end, (const char *)u->b);
		return;
	}
	for (i = 0; i < 16; i++)
		printf("%02x%s", u->b[i], i == 3 || i == 5 || i == 7 || i == 9 ? "-" : "");
	printf("\n");
}

static uint64_t parse_size(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	uint64_t m = 1;

	switch (*end) {
	case 'k': case 'K': m = 1ull << 10; break;
	case 'm': case 'M': m = 1ull << 20; break;
	case 'g': case 'G': m = 1ull << 30; break;
	case 't': case 'T': m = 1ull << 40; break;
	case 0: break;
	default: return 0;
	}
	return v > 0 ? (uint64_t)(v * (double)m) : 0;
}

/* Objects stored by put: a KV object per name; dkey "c<index>" chunks. */
static struct eng_key obj_key(const struct lode_uuid *u, const char *name, char *dkey, uint64_t chunk)
{
	struct eng_key k = {.cont = u, .akey = "data", .akey_len = 4, .dkey = dkey};
	uint64_t h = 1469598103934665603ull;

	for (const char *p = name; *p; p++)
		h = (h ^ (uint8_t)*p) * 1099511628211ull;
	k.oid = lode_oid_make(LODE_OT_ARRAY, 0, 0, h);
	k.dkey_len = (uint32_t)snprintf(dkey, 32, "c%llu", (unsigned long long)chunk);
	return k;
}

static lode_epoch_t now_epoch(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (lode_epoch_t)ts.tv_sec * 1000000000ull + (lode_epoch_t)ts.tv_nsec;
}

static void progress(uint64_t done, uint64_t total, int final)
{
	if (!isatty(2) || total < (64u << 20))
		return;
	fprintf(stderr, "\r%6.1f%%  %llu / %llu MiB", total ? 100.0 * (double)done / (double)total : 100.0,
		(unsigned long long)(done >> 20), (unsigned long long)(total >> 20));
	if (final)
		fprintf(stderr, "\n");
}

static int cmd_put(struct eng_target *t, const struct lode_uuid *u, const char *name, const char *file)
{
	int fd = file ? open(file, O_RDONLY) : 0, rc = 0;
	char *buf = malloc(CHUNK), dkey[32];
	uint64_t chunk = 0, total = 0, size = 0;
	lode_epoch_t e = now_epoch();
	struct eng_key k = obj_key(u, name, dkey, 0);
	struct stat st;

	if (fd < 0 || !buf) {
		free(buf);
		return fail(file ? file : "stdin", fd < 0 ? -errno : -ENOMEM);
	}
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
		size = (uint64_t)st.st_size;
	/* A new put replaces the object: punch what was there. */
	rc = eng_obj_punch(t, &k, e, NULL, NULL);
	for (; rc == 0; chunk++) {
		ssize_t n = 0, r;

		while (n < (ssize_t)CHUNK && (r = read(fd, buf + n, CHUNK - (size_t)n)) > 0)
			n += r;
		if (n <= 0)
			break;
		k = obj_key(u, name, dkey, chunk);
		rc = eng_arr_update(t, &k, e + 1, 0, buf, (uint32_t)n, NULL, NULL);
		total += (uint64_t)n;
		progress(total, size, 0);
	}
	progress(total, size, 1);
	if (rc == 0) {
		/* the length, so get knows where the file ends */
		k = obj_key(u, name, dkey, 0);
		k.dkey = "meta";
		k.dkey_len = 4;
		rc = eng_sv_update(t, &k, e + 1, &total, sizeof(total), NULL, NULL);
	}
	if (file)
		close(fd);
	free(buf);
	return rc ? fail("put", rc) : 0;
}

static int cmd_get(struct eng_target *t, const struct lode_uuid *u, const char *name, const char *file)
{
	char *buf = malloc(CHUNK), dkey[32];
	struct eng_key k = obj_key(u, name, dkey, 0);
	uint64_t total = 0, done = 0;
	uint32_t len;
	int fd, rc;

	k.dkey = "meta";
	k.dkey_len = 4;
	rc = eng_sv_fetch(t, &k, LODE_EPOCH_MAX, &total, sizeof(total), &len, NULL, NULL);
	if (rc < 0) {
		free(buf);
		if (rc == -ENOENT) {
			fprintf(stderr, "lode-tgt: %s: no such object\n", name);
			return 1;
		}
		return fail(name, rc);
	}
	fd = file ? open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644) : 1;
	if (fd < 0 || !buf) {
		free(buf);
		return fail(file ? file : "stdout", fd < 0 ? -errno : -ENOMEM);
	}
	for (uint64_t chunk = 0; done < total; chunk++) {
		uint32_t n = total - done < CHUNK ? (uint32_t)(total - done) : CHUNK;

		k = obj_key(u, name, dkey, chunk);
		rc = eng_arr_fetch(t, &k, LODE_EPOCH_MAX, 0, buf, n, NULL, NULL);
		if (rc < 0)
			break;
		if (write(fd, buf, n) != (ssize_t)n) {
			rc = -errno;
			break;
		}
		done += n;
		progress(done, total, 0);
	}
	progress(done, total, 1);
	if (file)
		close(fd);
	free(buf);
	return rc ? fail("get", rc) : 0;
}

static int cmd_status(struct eng_target *t, const char *dir, int json)
{
	struct eng_stats st;
	struct lode_uuid conts[64];
	int n = eng_cont_list(t, conts, 64);

	eng_tgt_stats(t, &st);
	if (json) {
		printf("{\"path\":\"%s\",\"containers\":%d,\"records\":%llu,\"index_bytes\":%llu,"
		       "\"extent_used\":%llu,\"extent_capacity\":%llu,\"wal_used\":%llu,\"direct_io\":%s}\n",
		       dir, n, (unsigned long long)st.records, (unsigned long long)st.index_bytes,
		       (unsigned long long)st.extent_used, (unsigned long long)st.extent_cap,
		       (unsigned long long)st.wal_used, st.direct_io ? "true" : "false");
		return 0;
	}
	printf("target      %s\n", dir);
	printf("containers  %d\n", n);
	printf("records     %llu (index %.1f MiB in memory)\n", (unsigned long long)st.records,
	       (double)st.index_bytes / (1 << 20));
	printf("extents     %.1f MiB used of %.1f MiB\n", (double)st.extent_used / (1 << 20),
	       (double)st.extent_cap / (1 << 20));
	printf("log         %.1f MiB since the last checkpoint\n", (double)st.wal_used / (1 << 20));
	printf("extent I/O  %s\n", st.direct_io ? (st.registered_bufs ? "O_DIRECT via io_uring, registered buffers"
								  : "O_DIRECT via io_uring")
					   : "buffered (RAM mode, or the file system refuses O_DIRECT)");
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"ram", no_argument, NULL, 'r'}, {"capacity", required_argument, NULL, 'c'},
		{"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'}, {0}};
	struct eng_tgt_opts o = {0};
	struct eng_target *t;
	struct lode_uuid u;
	const char *cmd;
	int c, json = 0, rc, ret = 0;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'r': o.mode = ENG_MODE_RAM; break;
		case 'c':
			o.capacity = parse_size(optarg);
			if (!o.capacity) {
				fprintf(stderr, "lode-tgt: bad --capacity '%s'\n", optarg);
				return 2;
			}
			break;
		case 'j': json = 1; break;
		case 'h': fputs(usage, stdout); return 0;
		default: fputs(usage, stderr); return 2;
		}
	}
	if (argc - optind < 2) {
		fputs(usage, stderr);
		return 2;
	}
	o.path = argv[optind];
	cmd = argv[optind + 1];
	argv += optind + 2;
	argc -= optind + 2;
	if (strcmp(cmd, "init") && strcmp(cmd, "status") && strcmp(cmd, "cont") && strcmp(cmd, "put") &&
	    strcmp(cmd, "get") && strcmp(cmd, "ls") && strcmp(cmd, "aggregate")) {
		fprintf(stderr, "lode-tgt: unknown command '%s' (try --help)\n", cmd);
		return 2;
	}
	if (strcmp(cmd, "init") != 0) {
		struct stat st;
		char p[4096];

		snprintf(p, sizeof(p), "%s/wal", o.path);
		if (stat(p, &st) < 0) {
			fprintf(stderr, "lode-tgt: %s is not a target (run: lode-tgt %s init)\n", o.path, o.path);
			return 1;
		}
	}
	rc = eng_tgt_open(&o, &t);
	if (rc < 0)
		return fail(o.path, rc);
	if (!strcmp(cmd, "init")) {
		if (parse_cont(argc > 0 ? argv[0] : "default", &u) < 0) {
			ret = fail("container name", -EINVAL);
		} else {
			rc = eng_cont_create(t, &u);
			if (rc < 0 && rc != -EEXIST)
				ret = fail("container", rc);
		}
	} else if (!strcmp(cmd, "status")) {
		ret = cmd_status(t, o.path, json);
	} else if (!strcmp(cmd, "cont") && argc >= 1 && !strcmp(argv[0], "list")) {
		struct lode_uuid conts[256];
		int n = eng_cont_list(t, conts, 256);

		for (int i = 0; i < n && i < 256; i++)
			print_cont(&conts[i]);
	} else if (argc < (strcmp(cmd, "cont") && strcmp(cmd, "put") && strcmp(cmd, "get") ? 1 : 2)) {
		fprintf(stderr, "lode-tgt: %s: missing arguments (try --help)\n", cmd);
		ret = 2;
	} else if (parse_cont(!strcmp(cmd, "cont") ? argv[1] : argv[0], &u) < 0) {
		ret = fail("container name", -EINVAL);
	} else if (!strcmp(cmd, "cont") && !strcmp(argv[0], "create")) {
		rc = eng_cont_create(t, &u);
		ret = rc ? fail("cont create", rc) : 0;
	} else if (!strcmp(cmd, "cont") && !strcmp(argv[0], "destroy")) {
		rc = eng_cont_destroy(t, &u);
		ret = rc ? fail("cont destroy", rc) : 0;
	} else if (!strcmp(cmd, "cont")) {
		fprintf(stderr, "lode-tgt: cont: unknown action '%s'\n", argv[0]);
		ret = 2;
	} else if (!strcmp(cmd, "put")) {
		ret = cmd_put(t, &u, argv[1], argc > 2 && strcmp(argv[2], "-") ? argv[2] : NULL);
	} else if (!strcmp(cmd, "get")) {
		ret = cmd_get(t, &u, argv[1], argc > 2 && strcmp(argv[2], "-") ? argv[2] : NULL);
	} else if (!strcmp(cmd, "ls")) {
		struct eng_anchor a = ENG_ANCHOR_INIT;
		struct lode_oid oids[256];

		while (!a.eof && (rc = eng_obj_list(t, &u, LODE_EPOCH_MAX, &a, oids, 256)) >= 0)
			for (int i = 0; i < rc; i++)
				printf("%016llx.%016llx\n", (unsigned long long)oids[i].hi,
				       (unsigned long long)oids[i].lo);
		ret = rc < 0 ? fail("ls", rc) : 0;
	} else if (!strcmp(cmd, "aggregate")) {
		rc = eng_aggregate(t, &u, LODE_EPOCH_MAX);
		ret = rc ? fail("aggregate", rc) : 0;
	}
	rc = eng_tgt_close(t);
	if (rc < 0 && !ret)
		ret = fail("close", rc);
	return ret;
}
