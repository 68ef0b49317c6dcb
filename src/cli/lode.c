/*
 * lode: the command line of Lode.
 *
 * Everything here goes through liblode's public API (lode/lode.h) and
 * nothing else, so the tool doubles as a worked example of that API: one
 * connection (and container) per invocation, blocking calls for metadata,
 * and an event queue that keeps several pieces in flight for bulk data.
 *
 * How the parts fit: main() parses the global options and finds the command
 * in one table (cmds[], where a name may be several words: "cont snap
 * create"); the command's own options and its argument count are checked
 * generically from the table entry (cmd_parse_args); the connection and
 * container the entry asks for are opened by cli_open(); then the entry's
 * function runs. `obj put` and `obj get` share one piece pump (struct pump)
 * and one progress line (struct progress).
 *
 * Object names: the CLI names objects by strings. An object's id is the
 * 128-bit FNV-1a hash of its name with the top 16 bits replaced by the type
 * (byte array for `obj`, KV for `kv`) and class 0 (name_oid). A hash cannot
 * be listed back, so every `obj put` also records name -> size in a per-
 * container index, a KV object at a reserved id (class 0xff, which no name
 * maps to); `obj ls` lists it, and `obj get` and `obj rm` refuse names it
 * does not hold.
 *
 * The control-plane commands (login, pool, tenant, user, group, acl, system,
 * key; cont create and query) are in admin.c: the table below names them
 * with CMD_ADMIN, and admin_main parses their options and runs them.
 *
 * Exit status: 0 on success, 1 on failure (one line on stderr, "lode: WHAT:
 * MESSAGE"), 2 on a usage error.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "admin.h"
#include "bench.h"
#include "lode/lode.h"

#if __has_include("lode/version.h")
#include "lode/version.h"
#endif
#ifndef LODE_VERSION
#define LODE_VERSION "0.3.0"
#endif

#define PIECE_SIZE (8u << 20)     /* bytes per array read or write */
#define PIECES_MAX 4              /* pieces in flight per transfer */
#define PROGRESS_MIN (16u << 20)  /* smaller transfers draw no progress line */
#define KEYS_BUF (64u << 10)      /* room for one lode_kv_list call */
#define EXIT_USAGE 2

/* What one invocation holds: global options, then what cli_open() opened. */
struct cli {
	const char *addr;            /* --addr, or NULL: lode_connect finds it */
	struct lode_conn_opts opts;  /* --transport, --timeout */
	lode_conn_t *conn;
	lode_cont_t *cont;
	bool json;                   /* --json */
	int argc;                    /* the command's positional arguments */
	char **argv;
};

enum {
	CMD_CONN = 1 << 0, /* connects before running */
	CMD_CONT = 1 << 1, /* also opens the container named by argv[0] */
	CMD_JSON = 1 << 2, /* takes --json */
	CMD_RAW = 1 << 3,  /* gets argv as typed, from its own name on */
	CMD_ADMIN = 1 << 4, /* runs in admin.c (admin_main), which parses its options */
};

struct cmd {
	const char *name;    /* one or more words */
	const char *args;    /* synopsis of the positional arguments */
	int min_args;
	int max_args;        /* -1: any number */
	unsigned flags;
	const char *summary; /* one line for `lode --help` */
	const char *details; /* more for `lode help NAME`, or NULL */
	int (*run)(struct cli *cli);
};

/* ---- messages ---------------------------------------------------------- */

/* Report a failed call as the one line "lode: WHAT: MESSAGE"; returns exit 1. */
__attribute__((format(printf, 2, 3))) static int fail(int rc, const char *fmt, ...)
{
	va_list ap;

	fputs("lode: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, ": %s\n", lode_strerror(rc));
	return 1;
}

/* Report a usage error, with the command's synopsis when known; returns 2. */
__attribute__((format(printf, 2, 3))) static int usage_error(const struct cmd *c,
							       const char *fmt, ...)
{
	va_list ap;

	fputs("lode: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (c)
		fprintf(stderr, "\nusage: lode %s%s%s\n", c->name, *c->args ? " " : "", c->args);
	else
		fputs(" (see lode --help)\n", stderr);
	return EXIT_USAGE;
}

/* bytes as "512 B" or "1.5 GiB", into buf */
static const char *fmt_bytes(char *buf, size_t len, double v)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	unsigned u = 0;

	while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", v, units[u]);
	return buf;
}

/* A decimal unsigned number and nothing else. */
static bool parse_u64(const char *s, uint64_t *v)
{
	char *end;

	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	*v = strtoull(s, &end, 10);
	return errno == 0 && *end == 0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- local files -------------------------------------------------------- */

/* Read until len bytes or end of input; *got says how many came. */
static int read_full(int fd, char *buf, size_t len, size_t *got)
{
	size_t n = 0;

	while (n < len) {
		ssize_t r = read(fd, buf + n, len - n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		n += (size_t)r;
	}
	*got = n;
	return 0;
}

static int write_full(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t w = write(fd, buf, len);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		buf += w;
		len -= (size_t)w;
	}
	return 0;
}

/* All of fd (at most max bytes: -E2BIG beyond) into a new buffer. */
static int read_all(int fd, size_t max, char **buf_out, size_t *len_out)
{
	size_t cap = 0, len = 0, got = 0;
	char *buf = NULL;
	int rc;

	do {
		if (len == cap) {
			char *p;

			cap = cap ? cap * 2 : 64 << 10;
			if (!(p = realloc(buf, cap))) {
				free(buf);
				return -ENOMEM;
			}
			buf = p;
		}
		if ((rc = read_full(fd, buf + len, cap - len, &got)) < 0) {
			free(buf);
			return rc;
		}
		len += got;
		if (len > max) {
			free(buf);
			return -E2BIG;
		}
	} while (got);
	*buf_out = buf;
	*len_out = len;
	return 0;
}

/*
 * `obj get FILE` writes into a temporary file beside FILE and renames it at
 * the end, so a failed get leaves nothing behind; a signal that ends the
 * run removes the temporary file too.
 */
static char tmp_path[PATH_MAX];

static void tmp_on_signal(int sig)
{
	if (tmp_path[0])
		unlink(tmp_path);
	signal(sig, SIG_DFL);
	raise(sig);
}

static int tmp_create(const char *file)
{
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
	mode_t mask = umask(0);
	int fd;

	umask(mask);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], tmp_on_signal);
	if ((size_t)snprintf(tmp_path, sizeof(tmp_path), "%s.lode-XXXXXX", file) >= sizeof(tmp_path))
		fd = -ENAMETOOLONG;
	else if ((fd = mkstemp(tmp_path)) < 0)
		fd = -errno;
	if (fd < 0) {
		tmp_path[0] = 0;
		return fd;
	}
	/* mkstemp makes it 0600; give the file what open(2) would have */
	fchmod(fd, 0666 & ~mask);
	return fd;
}

/* Close the temporary file, then rename it to file (ok) or remove it. */
static int tmp_finish(int fd, const char *file, bool ok)
{
	int rc = close(fd) < 0 ? -errno : 0;

	if (ok && rc == 0 && rename(tmp_path, file) < 0)
		rc = -errno;
	if (!ok || rc)
		unlink(tmp_path);
	tmp_path[0] = 0;
	return rc;
}

/* ---- object names -------------------------------------------------------- */

/*
 * A name's object id: 128-bit FNV-1a of its bytes; lode_oid_make() keeps
 * the low 112 bits and puts the type and class 0 above them.
 */
static struct lode_oid name_oid(unsigned type, const char *name)
{
	const unsigned __int128 prime = ((unsigned __int128)1 << 88) | 0x13b;
	unsigned __int128 h = ((unsigned __int128)0x6c62272e07bb0142ull << 64) | 0x62b821756295c58dull;

	for (const char *p = name; *p; p++) {
		h ^= (uint8_t)*p;
		h *= prime;
	}
	return lode_oid_make(type, 0, (uint64_t)(h >> 64), (uint64_t)h);
}

/* The name index of a container: name -> 8-byte little-endian size. */
static struct lode_oid index_oid(void)
{
	return lode_oid_make(LODE_OT_KV, 0xff, 0, 1);
}

static int index_put(lode_cont_t *cont, const char *name, uint64_t size)
{
	uint8_t v[8];

	for (int i = 0; i < 8; i++)
		v[i] = (uint8_t)(size >> (8 * i));
	return lode_kv_put(cont, index_oid(), name, v, sizeof(v), NULL);
}

/* Errors: -ENOENT (name is not in the index), -EBADMSG (not our record). */
static int index_get(lode_cont_t *cont, const char *name, uint64_t *size)
{
	uint8_t v[8];
	uint32_t len;
	int rc = lode_kv_get(cont, index_oid(), name, v, sizeof(v), &len, NULL);

	if (rc == -EOVERFLOW || (rc == 0 && len != sizeof(v)))
		return -EBADMSG;
	if (rc)
		return rc;
	*size = 0;
	for (int i = 0; i < 8; i++)
		*size |= (uint64_t)v[i] << (8 * i);
	return 0;
}

/* Names and keys given on the command line must be valid keys. */
static int key_check(const char *key)
{
	size_t len = strlen(key);

	return len == 0 ? -LODE_EKEYEMPTY : len > LODE_KEY_MAX ? -ENAMETOOLONG : 0;
}

struct strvec {
	char **v;
	size_t n;
};

static void strvec_free(struct strvec *sv)
{
	for (size_t i = 0; i < sv->n; i++)
		free(sv->v[i]);
	free(sv->v);
}

static int strvec_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * Every key of a KV object, sorted (the library gives them in order per
 * target only, targets one after another).
 */
static int keys_collect(lode_cont_t *cont, struct lode_oid oid, struct strvec *out)
{
	struct lode_anchor anchor;
	uint8_t *buf = malloc(KEYS_BUF);
	size_t cap = 0;
	int rc = buf ? 0 : -ENOMEM;

	memset(&anchor, 0, sizeof(anchor));
	memset(out, 0, sizeof(*out));
	while (rc == 0 && !anchor.eof) {
		const uint8_t *p = buf;
		int n = lode_kv_list(cont, oid, &anchor, buf, KEYS_BUF);

		if (n < 0)
			rc = n;
		for (int i = 0; rc == 0 && i < n; i++) {
			size_t len = (size_t)p[0] | (size_t)p[1] << 8;
			char *key = malloc(len + 1);

			if (out->n == cap) {
				char **v = realloc(out->v, (cap = cap ? cap * 2 : 64) * sizeof(*v));

				if (v)
					out->v = v;
				else
					cap = out->n;
			}
			if (!key || out->n == cap) {
				free(key);
				rc = -ENOMEM;
				break;
			}
			memcpy(key, p + 2, len);
			key[len] = 0;
			out->v[out->n++] = key;
			p += 2 + len;
		}
	}
	free(buf);
	if (rc) {
		strvec_free(out);
		memset(out, 0, sizeof(*out));
		return rc;
	}
	if (out->n) /* qsort's pointer must not be NULL, even for no elements */
		qsort(out->v, out->n, sizeof(*out->v), strvec_cmp);
	return 0;
}

/*
 * The listing calls (containers, snapshots, targets) copy up to max entries
 * and return how many there are: call again with room for all of them
 * until they fit, since the count can grow in between.
 */
static int list_all(struct cli *cli, int (*fn)(struct cli *, void *, unsigned), size_t elem,
		    void **out)
{
	unsigned max = 16;
	void *arr = NULL;

	for (;;) {
		void *p = realloc(arr, max * elem);
		int n;

		if (!p) {
			free(arr);
			return -ENOMEM;
		}
		arr = p;
		if ((n = fn(cli, arr, max)) < 0) {
			free(arr);
			return n;
		}
		if ((unsigned)n <= max) {
			*out = arr;
			return n;
		}
		max = (unsigned)n;
	}
}

static int list_conts(struct cli *cli, void *arr, unsigned max)
{
	return lode_cont_list(cli->conn, arr, max);
}

static int list_snaps(struct cli *cli, void *arr, unsigned max)
{
	return lode_snap_list(cli->cont, arr, max);
}

static int list_targets(struct cli *cli, void *arr, unsigned max)
{
	return lode_status(cli->conn, arr, max);
}

/* ---- progress line ------------------------------------------------------- */

/* A transfer's progress on stderr, only when that is a terminal. */
struct progress {
	uint64_t total; /* 0: unknown (stdin) */
	double start, last;
	bool tty, shown;
};

static void progress_start(struct progress *pg, uint64_t total)
{
	pg->total = total;
	pg->start = pg->last = now_s();
	pg->tty = isatty(STDERR_FILENO);
	pg->shown = false;
}

/* Redraw the line at most ten times a second; final ends it with a newline. */
static void progress_show(struct progress *pg, uint64_t done, bool final)
{
	char d[32], t[32], r[32];
	double now = now_s(), secs = now - pg->start;

	if (!pg->tty || (pg->total > done ? pg->total : done) <= PROGRESS_MIN)
		return;
	if (!final && pg->shown && now - pg->last < 0.1)
		return;
	pg->last = now;
	pg->shown = true;
	fmt_bytes(d, sizeof(d), (double)done);
	fmt_bytes(r, sizeof(r), secs > 0 ? (double)done / secs : 0);
	if (pg->total)
		fprintf(stderr, "\r%s / %s  %3.0f%%  %s/s\033[K", d,
			fmt_bytes(t, sizeof(t), (double)pg->total),
			100.0 * (double)done / (double)pg->total, r);
	else
		fprintf(stderr, "\r%s  %s/s\033[K", d, r);
	if (final)
		fputc('\n', stderr);
}

/* ---- piece pump: a file to a byte array or back ------------------------ */

struct piece {
	lode_event_t ev;
	char *buf;
	bool registered; /* from lode_buf_alloc, else malloc */
	uint64_t off;
	size_t len;
	bool done;
};

/*
 * Up to PIECES_MAX pieces in flight on one event queue. Pieces start in
 * offset order and retire in that order from a ring (oldest at head), so a
 * get writes its output sequentially (stdout may be a pipe) whatever order
 * the reads complete in.
 */
struct pump {
	lode_conn_t *conn;
	lode_cont_t *cont;
	struct lode_oid oid;
	bool put;         /* fd -> array; else array -> fd */
	int fd;
	uint64_t end;     /* get: bytes to read */
	uint64_t next;    /* offset of the next piece to start */
	bool eof;         /* put: fd has no more */
	uint64_t done;    /* bytes finished, in order */
	size_t buf_size;
	lode_eq_t *eq;
	struct piece pieces[PIECES_MAX];
	unsigned head, count;
	int rc;           /* the first error */
	bool local_err;   /* rc came from fd, not from Lode */
	bool stuck;       /* polling failed: buffers may still be the library's */
};

static void pump_fail(struct pump *pm, int rc, bool local)
{
	if (pm->rc == 0) {
		pm->rc = rc;
		pm->local_err = local;
	}
}

static bool pump_more(const struct pump *pm)
{
	return pm->rc == 0 && pm->count < PIECES_MAX && (pm->put ? !pm->eof : pm->next < pm->end);
}

/* Fill (put) or size (get) the piece after the newest and send it. */
static void pump_start(struct pump *pm)
{
	struct piece *p = &pm->pieces[(pm->head + pm->count) % PIECES_MAX];
	size_t len = 0;
	int rc;

	if (!p->buf) {
		/* registered memory lets shm and rdma skip a registration per request */
		p->buf = lode_buf_alloc(pm->conn, pm->buf_size);
		p->registered = p->buf != NULL;
		if (!p->buf && !(p->buf = malloc(pm->buf_size))) {
			pump_fail(pm, -ENOMEM, false);
			return;
		}
	}
	if (pm->put) {
		if ((rc = read_full(pm->fd, p->buf, pm->buf_size, &len)) < 0) {
			pump_fail(pm, rc, true);
			return;
		}
		pm->eof = len < pm->buf_size;
		if (len == 0)
			return;
	} else {
		len = pm->end - pm->next < pm->buf_size ? (size_t)(pm->end - pm->next) : pm->buf_size;
	}
	p->off = pm->next;
	p->len = len;
	p->done = false;
	rc = lode_event_init(&p->ev, pm->eq);
	p->ev.user = p;
	if (rc == 0 && pm->put)
		rc = lode_array_write(pm->cont, pm->oid, 0, p->off, p->buf, len, &p->ev);
	else if (rc == 0)
		rc = lode_array_read(pm->cont, pm->oid, 0, LODE_EPOCH_MAX, p->off, p->buf, len,
				     &p->ev);
	if (rc < 0) {
		pump_fail(pm, rc, false);
		return;
	}
	pm->next += len;
	pm->count++;
}

/* Collect completions: at least min, waiting up to timeout_us. */
static void pump_poll(struct pump *pm, unsigned min, int64_t timeout_us)
{
	lode_event_t *evs[PIECES_MAX];
	int n = lode_eq_poll(pm->eq, min, PIECES_MAX, timeout_us, evs);

	if (n < 0) {
		pump_fail(pm, n, false);
		pm->stuck = true;
		return;
	}
	for (int i = 0; i < n; i++) {
		((struct piece *)evs[i]->user)->done = true;
		if (evs[i]->rc < 0)
			pump_fail(pm, evs[i]->rc, false);
	}
}

/* Retire the completed pieces at the head; a get writes them out. */
static void pump_retire(struct pump *pm)
{
	while (pm->count && pm->pieces[pm->head].done) {
		struct piece *p = &pm->pieces[pm->head];
		int rc;

		if (!pm->put && pm->rc == 0 && (rc = write_full(pm->fd, p->buf, p->len)) < 0)
			pump_fail(pm, rc, true);
		if (pm->rc == 0)
			pm->done += p->len;
		pm->head = (pm->head + 1) % PIECES_MAX;
		pm->count--;
	}
}

/*
 * Move a whole file: put reads fd to its end into the array from offset 0;
 * get reads [0, size) of the array into fd. size is the put's expected size
 * (0: unknown) or the get's exact one. Returns the bytes moved in *done;
 * *local tells whether an error came from fd.
 */
static int pump_run(struct cli *cli, struct lode_oid oid, bool put, int fd, uint64_t size,
		    uint64_t *done, bool *local)
{
	struct pump pm = {.conn = cli->conn, .cont = cli->cont, .oid = oid, .put = put, .fd = fd,
			  .end = size, .buf_size = PIECE_SIZE};
	struct progress pg;

	/* no 8 MiB buffers for a small object */
	if (size && size < PIECE_SIZE)
		pm.buf_size = (size_t)size;
	if ((pm.rc = lode_eq_create(&pm.eq)) < 0) {
		*local = false;
		return pm.rc;
	}
	progress_start(&pg, size);
	for (;;) {
		while (pump_more(&pm)) {
			pump_start(&pm);
			/* drive what was just sent while the next piece is read */
			pump_poll(&pm, 0, 0);
		}
		pump_retire(&pm);
		progress_show(&pg, pm.done, false);
		if (pm.stuck || (pm.count == 0 && !pump_more(&pm)))
			break;
		/* the head is still in flight: wait for something to finish */
		if (pm.count)
			pump_poll(&pm, 1, -1);
	}
	progress_show(&pg, pm.done, true);
	if (!pm.stuck) {
		for (int i = 0; i < PIECES_MAX; i++) {
			if (pm.pieces[i].registered)
				lode_buf_free(cli->conn, pm.pieces[i].buf);
			else
				free(pm.pieces[i].buf);
		}
		lode_eq_destroy(pm.eq);
	}
	*done = pm.done;
	*local = pm.local_err;
	return pm.rc;
}

/* ---- commands ------------------------------------------------------------ */

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", *s);
		else
			putchar(*s);
	}
	putchar('"');
}

static int cmd_status(struct cli *cli)
{
	struct lode_conn_info info;
	struct lode_target_status *st;
	char used[32], cap[32];
	void *arr;
	int rc, n;

	if ((rc = lode_conn_query(cli->conn, &info)) < 0)
		return fail(rc, "status");
	if ((n = list_all(cli, list_targets, sizeof(*st), &arr)) < 0)
		return fail(n, "status");
	st = arr;
	if (cli->json) {
		printf("{\"server\":");
		json_str(info.server);
		printf(",\"transport\":");
		json_str(info.transport);
		printf(",\"bulk\":");
		json_str(info.bulk);
		printf(",\"inline_max\":%" PRIu32 ",\"map_version\":%" PRIu32 ",\"targets\":[",
		       info.inline_max, info.map_version);
		for (int i = 0; i < n; i++)
			printf("%s{\"records\":%" PRIu64 ",\"extent_used\":%" PRIu64
			       ",\"extent_cap\":%" PRIu64 ",\"requests\":%" PRIu64
			       ",\"errors\":%" PRIu64 ",\"cpu_ns\":%" PRIu64
			       ",\"ram\":%s,\"direct_io\":%s}",
			       i ? "," : "", st[i].records, st[i].extent_used, st[i].extent_cap,
			       st[i].requests, st[i].errors, st[i].cpu_ns, st[i].ram ? "true" : "false",
			       st[i].direct_io ? "true" : "false");
		printf("]}\n");
	} else {
		printf("server      %s\ntransport   %s\nbulk        %s\ninline max  %" PRIu32
		       " B\npool map    version %" PRIu32 "\ntargets     %d\n\n",
		       info.server, info.transport, info.bulk, info.inline_max, info.map_version, n);
		printf("%6s %12s %23s %12s %8s  %s\n", "target", "records", "extent used / capacity",
		       "requests", "errors", "media");
		for (int i = 0; i < n; i++)
			printf("%6d %12" PRIu64 " %10s / %10s %12" PRIu64 " %8" PRIu64 "  %s\n", i,
			       st[i].records, fmt_bytes(used, sizeof(used), (double)st[i].extent_used),
			       fmt_bytes(cap, sizeof(cap), (double)st[i].extent_cap), st[i].requests,
			       st[i].errors,
			       st[i].ram ? "RAM" : st[i].direct_io ? "disk (O_DIRECT)" : "disk");
	}
	free(st);
	return 0;
}

static int cmd_cont_destroy(struct cli *cli)
{
	int rc = lode_cont_destroy(cli->conn, cli->argv[0]);

	return rc ? fail(rc, "container %s", cli->argv[0]) : 0;
}

static int label_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

static int cmd_cont_list(struct cli *cli)
{
	char(*labels)[LODE_LABEL_MAX + 1];
	void *arr;
	int n = list_all(cli, list_conts, sizeof(*labels), &arr);

	if (n < 0)
		return fail(n, "container list");
	labels = arr;
	qsort(labels, (size_t)n, sizeof(*labels), label_cmp);
	for (int i = 0; i < n; i++)
		printf("%s\n", labels[i]);
	free(labels);
	return 0;
}

static int cmd_snap_create(struct cli *cli)
{
	lode_epoch_t e;
	int rc = lode_snap_create(cli->cont, &e);

	if (rc == -EHOSTDOWN)
		return fail(rc, "snapshot of %s: not taken: an engine the pool map has serving "
				"does not answer, or one holding the container is lost (try again once "
				"it answers, or once the map has it DOWN)",
			    cli->argv[0]);
	if (rc)
		return fail(rc, "snapshot of %s", cli->argv[0]);
	printf("%" PRIu64 "\n", e);
	return 0;
}

static int cmd_snap_list(struct cli *cli)
{
	lode_epoch_t *e;
	void *arr;
	int n = list_all(cli, list_snaps, sizeof(*e), &arr);

	if (n < 0)
		return fail(n, "snapshots of %s", cli->argv[0]);
	e = arr;
	for (int i = 0; i < n; i++)
		printf("%" PRIu64 "\n", e[i]);
	free(e);
	return 0;
}

static int cmd_snap_destroy(struct cli *cli)
{
	uint64_t e;
	int rc;

	if (!parse_u64(cli->argv[1], &e))
		return usage_error(NULL, "cont snap destroy: EPOCH is a number, not '%s'",
				   cli->argv[1]);
	rc = lode_snap_destroy(cli->cont, e);
	return rc ? fail(rc, "snapshot %" PRIu64 " of %s", e, cli->argv[0]) : 0;
}

static int cmd_cont_aggregate(struct cli *cli)
{
	int rc = lode_cont_aggregate(cli->cont);

	return rc ? fail(rc, "aggregate %s", cli->argv[0]) : 0;
}

/* The FILE argument of obj put/get: NULL for stdin/stdout. */
static const char *file_arg(const struct cli *cli)
{
	return cli->argc > 2 && strcmp(cli->argv[2], "-") ? cli->argv[2] : NULL;
}

static int cmd_obj_put(struct cli *cli)
{
	const char *name = cli->argv[1], *file = file_arg(cli);
	struct lode_oid oid = name_oid(LODE_OT_ARRAY, name);
	uint64_t size = 0, done = 0, old;
	struct stat st;
	bool local = false, existed;
	int fd, rc;

	if ((rc = key_check(name)) < 0)
		return fail(rc, "object name");
	if ((fd = file ? open(file, O_RDONLY) : STDIN_FILENO) < 0)
		return fail(-errno, "%s", file);
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
		size = (uint64_t)st.st_size;
	/* Only a name the index surely lacks is new (an error reading it is not). */
	existed = index_get(cli->cont, name, &old) != -ENOENT;
	rc = pump_run(cli, oid, true, fd, size, &done, &local);
	if (file)
		close(fd);
	if (rc) {
		int ex = local ? fail(rc, "%s", file ? file : "stdin") : fail(rc, "object %s", name);

		/* A new name: what was written goes, so its space comes back
		 * (an unindexed object could not be removed by name). */
		if (!existed) {
			int prc = lode_obj_punch(cli->cont, oid, NULL);

			if (prc < 0)
				fprintf(stderr,
					"lode: removing what was written of object %s: %s (its space "
					"stays used until the object is put again)\n",
					name, lode_strerror(prc));
		} else {
			fprintf(stderr, "lode: object %s may now hold part of the new data: put it again\n",
				name);
		}
		return ex;
	}
	/* a re-put of a shorter file leaves no tail of the old one */
	if ((rc = lode_array_truncate(cli->cont, oid, 0, done)) < 0 ||
	    (rc = index_put(cli->cont, name, done)) < 0)
		return fail(rc, "object %s", name);
	return 0;
}

static int cmd_obj_get(struct cli *cli)
{
	const char *name = cli->argv[1], *file = file_arg(cli);
	struct lode_oid oid = name_oid(LODE_OT_ARRAY, name);
	uint64_t size, done;
	bool local;
	int fd, rc;

	if ((rc = index_get(cli->cont, name, &size)) < 0 ||
	    (rc = lode_array_size(cli->cont, oid, 0, LODE_EPOCH_MAX, &size)) < 0)
		return fail(rc, "object %s", name);
	if ((fd = file ? tmp_create(file) : STDOUT_FILENO) < 0)
		return fail(fd, "%s", file);
	rc = pump_run(cli, oid, false, fd, size, &done, &local);
	if (file) {
		int frc = tmp_finish(fd, file, rc == 0);

		if (rc == 0 && frc < 0) {
			rc = frc;
			local = true;
		}
	}
	if (rc)
		return local ? fail(rc, "%s", file ? file : "stdout") : fail(rc, "object %s", name);
	return 0;
}

static int cmd_obj_ls(struct cli *cli)
{
	struct strvec names;
	uint64_t size = 0;
	int rc = keys_collect(cli->cont, index_oid(), &names);

	if (rc)
		return fail(rc, "objects of %s", cli->argv[0]);
	for (size_t i = 0; i < names.n; i++) {
		/* removed since it was listed: not worth a failure */
		if ((rc = index_get(cli->cont, names.v[i], &size)) == -ENOENT)
			continue;
		if (rc < 0) {
			fail(rc, "object %s", names.v[i]);
			strvec_free(&names);
			return 1;
		}
		printf("%12" PRIu64 "  %s\n", size, names.v[i]);
	}
	strvec_free(&names);
	return 0;
}

static int cmd_obj_rm(struct cli *cli)
{
	const char *name = cli->argv[1];
	uint64_t size;
	int rc;

	/* punch before unindexing, so a failure leaves a name that rm can retry */
	if ((rc = index_get(cli->cont, name, &size)) < 0 ||
	    (rc = lode_obj_punch(cli->cont, name_oid(LODE_OT_ARRAY, name), NULL)) < 0 ||
	    (rc = lode_kv_remove(cli->cont, index_oid(), name, NULL)) < 0)
		return fail(rc, "object %s", name);
	return 0;
}

static int cmd_kv_put(struct cli *cli)
{
	const char *key = cli->argv[2], *val = cli->argv[3];
	size_t len = strlen(val);
	char *buf = NULL;
	int rc;

	if (!strcmp(val, "-")) {
		if ((rc = read_all(STDIN_FILENO, LODE_IO_MAX, &buf, &len)) < 0)
			return fail(rc, "stdin");
		val = buf;
	} else if (len > LODE_IO_MAX) {
		return fail(-E2BIG, "value");
	}
	rc = lode_kv_put(cli->cont, name_oid(LODE_OT_KV, cli->argv[1]), key, val, (uint32_t)len,
			 NULL);
	free(buf);
	return rc ? fail(rc, "key %s of %s", key, cli->argv[1]) : 0;
}

static int cmd_kv_get(struct cli *cli)
{
	struct lode_oid oid = name_oid(LODE_OT_KV, cli->argv[1]);
	const char *key = cli->argv[2];
	uint32_t cap = 4096, len;
	char *buf = NULL;
	int rc;

	/* a value longer than the buffer reports its length: grow and ask again */
	do {
		char *p = realloc(buf, cap ? cap : 1);

		if (!p) {
			rc = -ENOMEM;
			break;
		}
		buf = p;
		rc = lode_kv_get(cli->cont, oid, key, buf, cap, &len, NULL);
		cap = len;
	} while (rc == -EOVERFLOW);
	if (rc == 0 && (rc = write_full(STDOUT_FILENO, buf, len)) < 0) {
		free(buf);
		return fail(rc, "stdout");
	}
	free(buf);
	return rc ? fail(rc, "key %s of %s", key, cli->argv[1]) : 0;
}

static int cmd_kv_ls(struct cli *cli)
{
	struct strvec keys;
	int rc = keys_collect(cli->cont, name_oid(LODE_OT_KV, cli->argv[1]), &keys);

	if (rc)
		return fail(rc, "keys of %s", cli->argv[1]);
	for (size_t i = 0; i < keys.n; i++)
		printf("%s\n", keys.v[i]);
	strvec_free(&keys);
	return 0;
}

static int cmd_kv_rm(struct cli *cli)
{
	struct lode_oid oid = name_oid(LODE_OT_KV, cli->argv[1]);
	const char *key = cli->argv[2];
	uint32_t len;
	char probe;
	int rc;

	/* the library removes a missing key quietly; a typo deserves an error */
	rc = lode_kv_get(cli->cont, oid, key, &probe, 1, &len, NULL);
	if (rc == 0 || rc == -EOVERFLOW)
		rc = lode_kv_remove(cli->cont, oid, key, NULL);
	return rc ? fail(rc, "key %s of %s", key, cli->argv[1]) : 0;
}

/* Global options reach bench's own connections through the environment. */
static int cmd_bench(struct cli *cli)
{
	char ms[16];

	if (cli->addr)
		setenv("LODE_ADDR", cli->addr, 1);
	if (cli->opts.transport)
		setenv("LODE_TRANSPORT", cli->opts.transport, 1);
	if (cli->opts.timeout_ms) {
		snprintf(ms, sizeof(ms), "%u", cli->opts.timeout_ms);
		setenv("LODE_TIMEOUT_MS", ms, 1);
	}
	return lode_bench_main(cli->argc, cli->argv);
}

static int cmd_help(struct cli *cli);

static const struct cmd cmds[] = {
	{"status", "", 0, 0, CMD_CONN | CMD_JSON,
	 "the server, its transport, and every target's state", NULL, cmd_status},
	{"login", "[OPTIONS]", 0, 0, CMD_ADMIN, "check a user's secret and save the credentials",
	 "Connects as the user to check the secret, then writes the credentials to\n"
	 "$XDG_CONFIG_HOME/lode/credentials (else ~/.config/lode/credentials; mode\n"
	 "0600), where later commands find them. Nothing is written if it fails.\n\n"
	 "  --user NAME         who (TENANT/NAME; default: $LODE_USER, else asked)\n"
	 "  --secret-file FILE  read the secret from FILE\n"
	 "  --secret-stdin      read the secret from stdin\n"
	 "                      (neither: asked on the terminal, echo off)\n"
	 "  --mgmt HOST:PORT    the management service, when not where loded says\n"
	 "  --pool NAME         the pool to work in (default: default)\n"
	 "  --tls-ca FILE       the CA of the management service's TLS certificate",
	 NULL},
	{"logout", "", 0, 0, CMD_ADMIN, "remove the credentials lode login saved", NULL, NULL},
	{"whoami", "", 0, 0, CMD_ADMIN | CMD_JSON,
	 "who the credentials make you, with what rights",
	 "Credentials are looked for in this order: $LODE_USER and $LODE_SECRET, the\n"
	 "file $LODE_CREDENTIALS names, the file lode login writes.",
	 NULL},
	{"pool create", "NAME [OPTIONS]", 1, 1, CMD_ADMIN, "create a pool",
	 "Needs a system administrator.\n\n"
	 "  --size SIZE     its size, like 100G (K, M, G, T: powers of 1024);\n"
	 "                  default: no limit beyond the targets'\n"
	 "  --targets LIST  the targets it spans, like 0,1,2 (default: all)",
	 NULL},
	{"pool list", "", 0, 0, CMD_ADMIN | CMD_JSON, "list the pools", NULL, NULL},
	{"pool query", "NAME [--watch]", 1, 1, CMD_ADMIN | CMD_JSON,
	 "a pool's size, use, targets, uuid, pool map and rebuild",
	 "Shows the pool map (its version and every engine's state) and the rebuild:\n"
	 "while one is due (an engine DOWN, DRAIN or NEW) or running, its progress\n"
	 "and an estimate of the time left from the rate so far.\n\n"
	 "  --watch  show it again every second until no rebuild is due (or Ctrl-C)",
	 NULL},
	{"pool destroy", "NAME [--force]", 1, 1, CMD_ADMIN, "destroy a pool",
	 "--force destroys it even when it holds containers, and them with it.", NULL},
	{"cont create", "LABEL [OPTIONS]", 1, 1, CMD_ADMIN, "create a container",
	 "LABEL: 1 to 127 letters, digits, '.', '-' or '_'. The container is made in\n"
	 "the connection's pool ($LODE_POOL, else the credentials' pool, else\n"
	 "default) and belongs to your tenant.\n\n"
	 "  --class CLASS      default object class: S1..S128, SX, RP_2, RP_3, EC_2P1,\n"
	 "                     EC_4P2 or EC_8P2 (default: SX; EC needs k+p engines)\n"
	 "  --chunk-size SIZE  byte-array chunk size, like 64K (default: 1M)\n"
	 "  --checksum KIND    crc32c (default) or none\n"
	 "  --encrypt          encrypt data in the client (AES-256-GCM) with a data\n"
	 "                     key wrapped by your tenant key (lode keygen)\n"
	 "  --crypt-block SIZE with --encrypt: bytes sealed together, a power of two\n"
	 "                     from 4K (default) to 1M. Larger blocks encrypt large I/O\n"
	 "                     faster; each small read or write moves a whole block",
	 NULL},
	{"keygen", "[--force]", 0, 0, CMD_ADMIN, "make the tenant key for encrypted containers",
	 "Writes 32 random bytes as 64 hex digits to $XDG_CONFIG_HOME/lode/tenant.key\n"
	 "(~/.config/lode/tenant.key), mode 0600. Encrypted containers' data keys are\n"
	 "wrapped by it; it never leaves this machine. Without --force an existing key\n"
	 "is kept: containers made under it open only with it.",
	 NULL},
	{"cont query", "LABEL", 1, 1, CMD_ADMIN | CMD_JSON,
	 "a container's owner, uuid and properties", NULL, NULL},
	{"cont list", "", 0, 0, CMD_CONN, "list containers, one label per line", NULL, cmd_cont_list},
	{"cont destroy", "LABEL", 1, 1, CMD_CONN, "destroy a container and everything in it", NULL,
	 cmd_cont_destroy},
	{"cont snap create", "LABEL", 1, 1, CMD_CONT, "take a snapshot and print its epoch", NULL,
	 cmd_snap_create},
	{"cont snap list", "LABEL", 1, 1, CMD_CONT, "list snapshot epochs, oldest first", NULL,
	 cmd_snap_list},
	{"cont snap destroy", "LABEL EPOCH", 2, 2, CMD_CONT, "destroy the snapshot at EPOCH", NULL,
	 cmd_snap_destroy},
	{"cont aggregate", "LABEL", 1, 1, CMD_CONT, "free the versions that no snapshot can see",
	 NULL, cmd_cont_aggregate},
	{"obj put", "CONT NAME [FILE|-]", 2, 3, CMD_CONT,
	 "store FILE (default: stdin) as byte-array object NAME",
	 "Replaces any object of that NAME, to its exact length, and records NAME\n"
	 "in the container's name index for `obj ls`. Several 8 MiB pieces are in\n"
	 "flight at once; on a terminal, transfers over 16 MiB show progress.",
	 cmd_obj_put},
	{"obj get", "CONT NAME [FILE|-]", 2, 3, CMD_CONT,
	 "write object NAME to FILE (default: stdout)",
	 "FILE is written under a temporary name and renamed when complete, so a\n"
	 "failed get leaves no partial FILE. Fails with ENOENT for a NAME that\n"
	 "`obj put` did not store.",
	 cmd_obj_get},
	{"obj ls", "CONT", 1, 1, CMD_CONT, "list objects stored by obj put: size in bytes, name",
	 NULL, cmd_obj_ls},
	{"obj rm", "CONT NAME", 2, 2, CMD_CONT, "remove object NAME", NULL, cmd_obj_rm},
	{"kv put", "CONT OBJ KEY VALUE|-", 4, 4, CMD_CONT,
	 "set KEY of KV object OBJ to VALUE (-: read it from stdin)",
	 "A value from stdin is taken byte for byte, up to 64 MiB.", cmd_kv_put},
	{"kv get", "CONT OBJ KEY", 3, 3, CMD_CONT, "write KEY's value to stdout, exact bytes", NULL,
	 cmd_kv_get},
	{"kv ls", "CONT OBJ", 2, 2, CMD_CONT, "list the keys of OBJ, one per line", NULL, cmd_kv_ls},
	{"kv rm", "CONT OBJ KEY", 3, 3, CMD_CONT, "remove KEY from OBJ (ENOENT if it is absent)",
	 NULL, cmd_kv_rm},
	{"tenant create", "NAME", 1, 1, CMD_ADMIN, "create a tenant",
	 "Needs a system administrator.", NULL},
	{"tenant list", "", 0, 0, CMD_ADMIN | CMD_JSON, "list the tenants", NULL, NULL},
	{"tenant destroy", "NAME", 1, 1, CMD_ADMIN, "destroy a tenant with its users and groups",
	 "Needs a system administrator. Its containers must be destroyed first.", NULL},
	{"user create", "TENANT/NAME [OPTIONS]", 1, 1, CMD_ADMIN, "create a user",
	 "  --admin             an administrator: of everything in tenant system,\n"
	 "                      else of its tenant (users, groups, ACLs, containers)\n"
	 "  --node              a node principal (lode-agent): connects on behalf of\n"
	 "                      users\n"
	 "  --secret-file FILE  the secret is in FILE\n"
	 "  --secret-stdin      the secret comes on stdin\n\n"
	 "With neither, a secret is generated and printed, this once. Needs the\n"
	 "tenant's administrator (a node user: a system administrator).",
	 NULL},
	{"user list", "[TENANT]", 0, 1, CMD_ADMIN | CMD_JSON, "a tenant's users (default: yours)",
	 NULL, NULL},
	{"user revoke", "TENANT/NAME", 1, 1, CMD_ADMIN,
	 "cut a user off, and its capabilities, at once", NULL, NULL},
	{"user restore", "TENANT/NAME", 1, 1, CMD_ADMIN, "let a revoked user connect again", NULL,
	 NULL},
	{"user passwd", "TENANT/NAME [OPTIONS]", 1, 1, CMD_ADMIN, "set a user's secret",
	 "  --secret-file FILE  the secret is in FILE\n"
	 "  --secret-stdin      the secret comes on stdin\n\n"
	 "With neither, a secret is generated and printed, this once. Users may\n"
	 "set their own; a tenant's administrator, its users'.",
	 NULL},
	{"group create", "TENANT/NAME", 1, 1, CMD_ADMIN, "create a group", NULL, NULL},
	{"group add", "GROUP USER", 2, 2, CMD_ADMIN, "add USER to GROUP", NULL, NULL},
	{"group remove", "GROUP USER", 2, 2, CMD_ADMIN, "remove USER from GROUP", NULL, NULL},
	{"group list", "[TENANT]", 0, 1, CMD_ADMIN | CMD_JSON,
	 "a tenant's groups and members (default: yours)", NULL, NULL},
	{"acl set", "RESOURCE PRINCIPAL RIGHTS", 3, 3, CMD_ADMIN,
	 "give PRINCIPAL exactly RIGHTS on RESOURCE",
	 "RESOURCE   a pool (POOL) or a container (POOL/CONTAINER)\n"
	 "PRINCIPAL  user:TENANT/NAME, group:TENANT/NAME or tenant:NAME\n"
	 "RIGHTS     some of r (read), w (write), a (admin); none removes the entry\n\n"
	 "A user's rights are the union of the entries naming it, its groups and its\n"
	 "tenant. Entries on a pool do not extend to the containers in it. Setting\n"
	 "one needs admin rights on RESOURCE.",
	 NULL},
	{"acl get", "RESOURCE", 1, 1, CMD_ADMIN | CMD_JSON, "list the ACL entries on RESOURCE",
	 NULL, NULL},
	{"system status", "", 0, 0, CMD_ADMIN | CMD_JSON,
	 "engines, targets, load, pools, signing key", NULL, NULL},
	{"system engines", "", 0, 0, CMD_ADMIN | CMD_JSON,
	 "the engines of the pool map: state, targets, last heartbeat",
	 "Engine 0 hosts the management service and sends no heartbeats (\"host\").\n"
	 "States: UP serving; DOWN silent or excluded (its data read degraded until\n"
	 "rebuilt elsewhere, then OUT); DRAIN leaving by plan; NEW joined, waiting to\n"
	 "be integrated; OUT no longer in the layout.",
	 NULL},
	{"system exclude", "ID", 1, 1, CMD_ADMIN, "take engine ID out as if it had died (DOWN)",
	 "Needs a system administrator. The engine must be UP; its data is rebuilt\n"
	 "elsewhere, then it is OUT. Engine 0 (the host of the service) cannot go.",
	 NULL},
	{"system drain", "ID", 1, 1, CMD_ADMIN, "move engine ID's data away, then remove it",
	 "Needs a system administrator. The engine must be UP; it keeps serving while\n"
	 "its data is copied away, then it is OUT. Engine 0 cannot be drained.",
	 NULL},
	{"system reintegrate", "ID", 1, 1, CMD_ADMIN, "bring engine ID back",
	 "Needs a system administrator. The engine must be DOWN or OUT.\n"
	 "OUT (its data was rebuilt elsewhere): it joins again as a new engine, NEW,\n"
	 "with a new id; its targets are emptied and filled with what the layout\n"
	 "places on them, while it serves, and it goes UP (docs/decisions/0014).\n"
	 "DOWN (its rebuild has not ended): it serves again at once with what it held\n"
	 "when it left, which lacks what was written meanwhile; only bring back that\n"
	 "way an engine that missed no writes, or wait until it is OUT.",
	 NULL},
	{"key rotate", "", 0, 0, CMD_ADMIN,
	 "sign capabilities with a new key from now on",
	 "Needs a system administrator. Capabilities signed by the older keys stay\n"
	 "valid until they expire; clients renew theirs on their own.",
	 NULL},
	{"bench", "[ARGS]", 0, -1, CMD_RAW, "measure throughput and latency (lode bench --help)",
	 NULL, cmd_bench},
	{"help", "[COMMAND]", 0, -1, CMD_RAW, "this list, or one command's help", NULL, cmd_help},
};
static const size_t ncmds = sizeof(cmds) / sizeof(cmds[0]);

/* ---- finding commands, help ------------------------------------------- */

/* How many leading words of name equal args[0..n) in order. */
static int words_matched(const char *name, int n, char *const *args)
{
	int k = 0;

	while (k < n && *name) {
		size_t len = strcspn(name, " ");

		if (strlen(args[k]) != len || strncmp(name, args[k], len))
			break;
		k++;
		name += len + (name[len] == ' ');
	}
	return k;
}

static int words_count(const char *name)
{
	int k = 1;

	for (; *name; name++)
		k += *name == ' ';
	return k;
}

/* The command named by the leading words of args; *nwords gets their number. */
static const struct cmd *cmd_find(int n, char *const *args, int *nwords)
{
	for (size_t i = 0; i < ncmds; i++) {
		int w = words_count(cmds[i].name);

		if (words_matched(cmds[i].name, n, args) == w) {
			*nwords = w;
			return &cmds[i];
		}
	}
	return NULL;
}

/* How many leading words of args start some command's name ("cont snap"). */
static int group_words(int n, char *const *args)
{
	int best = 0;

	for (size_t i = 0; i < ncmds; i++) {
		int k = words_matched(cmds[i].name, n, args);

		best = k > best ? k : best;
	}
	return best;
}

/* One line per command whose name starts with args[0..n) (all for n 0). */
static void print_cmds(FILE *out, int n, char *const *args)
{
	int width = 0;

	for (size_t i = 0; i < ncmds; i++) {
		int w = (int)(strlen(cmds[i].name) + 1 + strlen(cmds[i].args));

		width = w > width ? w : width;
	}
	for (size_t i = 0; i < ncmds; i++) {
		char syn[128];

		if (words_matched(cmds[i].name, n, args) < n)
			continue;
		snprintf(syn, sizeof(syn), "%s %s", cmds[i].name, cmds[i].args);
		fprintf(out, "  %-*s  %s\n", width, syn, cmds[i].summary);
	}
}

static void print_usage(FILE *out)
{
	fputs("usage: lode [--addr HOST:PORT] [--transport auto|tcp|shm|rdma] [--timeout MS]\n"
	      "            COMMAND [ARGS]\n\nCommands:\n",
	      out);
	print_cmds(out, 0, NULL);
	fputs("\nGlobal options:\n"
	      "  --addr HOST:PORT   the loded to use (default: $LODE_ADDR, $LODE_ADDR_FILE,\n"
	      "                     the address `make up` wrote, else 127.0.0.1:7420)\n"
	      "  --transport NAME   auto, tcp, shm or rdma (default: $LODE_TRANSPORT, else auto)\n"
	      "  --timeout MS       per-request timeout (default: $LODE_TIMEOUT_MS, else 10000)\n"
	      "  -h, --help         this text; `lode help COMMAND` or COMMAND --help for one\n"
	      "  --version          print the version\n"
	      "\nCredentials: $LODE_USER and $LODE_SECRET, else the file $LODE_CREDENTIALS\n"
	      "names, else the one `lode login` writes ($XDG_CONFIG_HOME/lode/credentials,\n"
	      "else ~/.config/lode/credentials). $LODE_POOL picks the pool to work in.\n"
	      "\nObject names: `obj` and `kv` name objects by strings. The object id is\n"
	      "the 128-bit FNV-1a hash of the name, its top 16 bits replaced by the type\n"
	      "(byte array for obj, KV for kv) and object class 0. `obj put` also records\n"
	      "each name and size in a KV object at the reserved id (KV, class 0xff,\n"
	      "0, 1), which `obj ls` lists.\n"
	      "\nExit status: 0 success, 1 failure (one line on stderr), 2 usage error.\n",
	      out);
}

static void print_cmd_help(FILE *out, const struct cmd *c)
{
	fprintf(out, "usage: lode %s%s%s\n\n%s\n", c->name, *c->args ? " " : "", c->args,
		c->summary);
	if (c->details)
		fprintf(out, "\n%s\n", c->details);
	if (c->flags & CMD_JSON)
		fputs("\n  --json    print JSON instead of text\n", out);
}

/* `lode help [WORDS...]`: everything, one command, or a group of them. */
static int cmd_help(struct cli *cli)
{
	int n = cli->argc - 1, nwords, k;
	char **args = cli->argv + 1;
	const struct cmd *c;

	if (n == 0 || !strcmp(args[0], "--help") || !strcmp(args[0], "-h")) {
		print_usage(stdout);
		return 0;
	}
	if ((c = cmd_find(n, args, &nwords)) && nwords == n) {
		if (c->run == cmd_bench) {
			char *argv[] = {"bench", "--help", NULL};

			return lode_bench_main(2, argv);
		}
		print_cmd_help(stdout, c);
		return 0;
	}
	if ((k = group_words(n, args)) < n)
		return usage_error(NULL, "help: no command '%s'", args[k]);
	print_cmds(stdout, n, args);
	return 0;
}

/*
 * The command's options and positional arguments, checked against its
 * table entry. Positionals are packed into cli->argv. Returns 0, 1 for
 * --help, or EXIT_USAGE (with the message printed).
 */
static int cmd_parse_args(struct cli *cli, const struct cmd *c, int argc, char **argv)
{
	bool opts = true;

	cli->argc = 0;
	cli->argv = argv;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];

		if (!opts || a[0] != '-' || !a[1]) {
			cli->argv[cli->argc++] = argv[i];
		} else if (!strcmp(a, "--")) {
			opts = false;
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			return 1;
		} else if (!strcmp(a, "--json") && (c->flags & CMD_JSON)) {
			cli->json = true;
		} else {
			return usage_error(c, "%s: unknown option %s", c->name, a);
		}
	}
	if (cli->argc < c->min_args)
		return usage_error(c, "%s: missing arguments", c->name);
	if (c->max_args >= 0 && cli->argc > c->max_args)
		return usage_error(c, "%s: too many arguments", c->name);
	return 0;
}

/* Open what the command needs; on failure report it and return exit 1. */
static int cli_open(struct cli *cli, const struct cmd *c)
{
	const char *where = cli->addr ? cli->addr : getenv("LODE_ADDR");
	int rc;

	if (!(c->flags & (CMD_CONN | CMD_CONT)))
		return 0;
	if ((rc = lode_connect(cli->addr, &cli->opts, &cli->conn)) < 0) {
		const char *why = lode_last_error();

		cli->conn = NULL;
		return fail(rc, "connect to %s%s%s%s", where ? where : "the local loded",
			    why[0] ? " (" : "", why, why[0] ? ")" : "");
	}
	if ((c->flags & CMD_CONT) && (rc = lode_cont_open(cli->conn, cli->argv[0], &cli->cont)) < 0) {
		cli->cont = NULL;
		return fail(rc, "container %s", cli->argv[0]);
	}
	return 0;
}

static void cli_close(struct cli *cli)
{
	if (cli->cont)
		lode_cont_close(cli->cont);
	if (cli->conn)
		lode_disconnect(cli->conn);
}

/*
 * A global option with a value, as "--name VALUE" or "--name=VALUE".
 * Returns 1 (matched; *i moves past it), 0 (another option) or -1 (no value).
 */
static int global_opt(int argc, char **argv, int *i, const char *name, const char **val)
{
	size_t len = strlen(name);

	if (strncmp(argv[*i], name, len))
		return 0;
	if (argv[*i][len] == '=') {
		*val = argv[*i] + len + 1;
		return 1;
	}
	if (argv[*i][len])
		return 0;
	if (*i + 1 >= argc)
		return -1;
	*val = argv[++*i];
	return 1;
}

int main(int argc, char **argv)
{
	struct cli cli = {0};
	const struct cmd *c;
	int i, nwords, rc;

	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		const char *a = argv[i], *v;
		uint64_t ms;

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			print_usage(stdout);
			return 0;
		} else if (!strcmp(a, "--version")) {
			printf("lode %s\n", LODE_VERSION);
			return 0;
		} else if ((rc = global_opt(argc, argv, &i, "--addr", &v)) != 0) {
			if (rc < 0 || !*v)
				return usage_error(NULL, "--addr needs HOST:PORT");
			cli.addr = v;
		} else if ((rc = global_opt(argc, argv, &i, "--transport", &v)) != 0) {
			if (rc < 0 || (strcmp(v, "auto") && strcmp(v, "tcp") && strcmp(v, "shm") &&
				       strcmp(v, "rdma")))
				return usage_error(NULL, "--transport needs auto, tcp, shm or rdma");
			cli.opts.transport = v;
		} else if ((rc = global_opt(argc, argv, &i, "--timeout", &v)) != 0) {
			if (rc < 0 || !parse_u64(v, &ms) || ms == 0 || ms > UINT32_MAX)
				return usage_error(NULL, "--timeout needs milliseconds, 1 or more");
			cli.opts.timeout_ms = (unsigned)ms;
		} else {
			return usage_error(NULL, "unknown option %s", a);
		}
	}
	if (i == argc) {
		print_usage(stderr);
		return EXIT_USAGE;
	}
	if (!(c = cmd_find(argc - i, argv + i, &nwords))) {
		int k = group_words(argc - i, argv + i);

		if (k == 0)
			return usage_error(NULL, "unknown command '%s'", argv[i]);
		if (i + k < argc && (!strcmp(argv[i + k], "--help") || !strcmp(argv[i + k], "-h"))) {
			print_cmds(stdout, k, argv + i);
			return 0;
		}
		if (i + k < argc)
			fprintf(stderr, "lode: unknown command '%s' after '%s'\n", argv[i + k],
				argv[i + k - 1]);
		else
			fprintf(stderr, "lode: '%s' needs a subcommand\n", argv[i + k - 1]);
		print_cmds(stderr, k, argv + i);
		return EXIT_USAGE;
	}
	if (c->flags & CMD_ADMIN) {
		struct admin_cmd ac = {c->name, c->args, c->min_args, c->max_args};

		rc = admin_main(&ac, cli.addr, &cli.opts, argc - i - nwords, argv + i + nwords);
		if (rc == ADMIN_HELP) {
			print_cmd_help(stdout, c);
			rc = 0;
		}
		return rc;
	}
	if (c->flags & CMD_RAW) {
		cli.argc = argc - i;
		cli.argv = argv + i;
		return c->run(&cli);
	}
	if ((rc = cmd_parse_args(&cli, c, argc - i - nwords, argv + i + nwords)) != 0) {
		if (rc != 1)
			return rc;
		print_cmd_help(stdout, c);
		return 0;
	}
	if ((rc = cli_open(&cli, c)) == 0)
		rc = c->run(&cli);
	cli_close(&cli);
	return rc;
}
