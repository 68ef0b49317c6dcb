/*
 * The control-plane commands of `lode`: logging in, pools, containers'
 * properties, tenants, users, groups, ACLs, system status, the engines of
 * the pool map and their states, key rotation.
 *
 * Unlike lode.c, which is a client of liblode's public API alone, these
 * commands talk to the management service itself (lode.mgmt.v1.Mgmt,
 * proto/lode/mgmt/v1/mgmt.proto) through liblode's internal control-plane
 * connection (src/client/client.h): conn_mgmt_connect bootstraps from loded
 * to learn where the service is and calls Connect, with no data plane at
 * all; conn_mgmt_call then makes one call carrying the capability Connect
 * returned. Most commands are one call and a printer for its reply.
 *
 * How the parts fit: lode.c's table names each command (its synopsis,
 * argument counts, help) with the flag CMD_ADMIN and calls admin_main,
 * which finds the command here (verbs[]: its options and function), parses
 * the options, connects when the verb asks for it and runs it.
 *
 * Output: tables for people; `--json` (where the verb takes it) prints the
 * service's reply message as JSON by walking its protobuf-c descriptor, so
 * the field names are mgmt.proto's. Failures are one line, "lode: WHAT:
 * MESSAGE" with the service's message, and exit 1; usage errors exit 2.
 *
 * Credentials: `lode login` checks a user's secret by connecting and writes
 * them to the file liblode reads by default ($XDG_CONFIG_HOME/lode/
 * credentials, else ~/.config/lode/credentials; mode 0600, replaced
 * atomically); `lode logout` removes it. Secrets are never taken from the
 * command line (they would show in ps and the shell's history): from a
 * file, stdin, the terminal with echo off, or generated here.
 */
#include "admin.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "auth/auth.h"
#include "client/client.h"
#include "client/cont_props.h"
#include "client/keys.h"
#include "lode/mgmt/v1/mgmt.pb-c.h"

#define M(name) "/lode.mgmt.v1.Mgmt/" name
#define EXIT_FAIL 1
#define EXIT_USAGE 2
#define OPTS_MAX 8
#define GEN_SECRET_BYTES 32 /* a generated secret: this many random bytes, as hex */

struct admin;

/* A command as this file runs it; lode.c's table has its help. */
struct verb {
	const char *name;
	/* Its options, space-separated: "size=" takes a value (--size SIZE or
	 * --size=SIZE), "force" is a flag. */
	const char *opts;
	unsigned flags;
	int (*run)(struct admin *a);
};

enum {
	V_MGMT = 1 << 0, /* connects to the management service before running */
};

/* One invocation. */
struct admin {
	const struct admin_cmd *cmd;
	const struct verb *verb;
	const char *addr;
	struct lode_conn_opts opts;
	const char *opt[OPTS_MAX]; /* by position in verb->opts: the value, "" for a
				    * flag given, NULL when absent */
	bool json;
	int argc;                  /* positional arguments */
	char **argv;
	lode_conn_t *c;            /* V_MGMT's connection */
};

/* ---- messages ------------------------------------------------------------ */

static void vreport(const char *msg, const char *fmt, va_list ap)
{
	fputs("lode: ", stderr);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, ": %s\n", msg);
}

/* "lode: WHAT: MESSAGE" for a local failure or one liblode reports; exit 1. */
__attribute__((format(printf, 2, 3))) static int fail(int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport(lode_strerror(rc), fmt, ap);
	va_end(ap);
	return EXIT_FAIL;
}

/*
 * A refused management call: "lode: WHAT: the service's message". liblode
 * keeps it as "Method: message"; the method is noise to a person, who named
 * the command. A refusal for want of rights says so first, since the
 * service's message says what was needed. A call that failed before the
 * service said anything (it is unreachable) has liblode's message instead.
 */
__attribute__((format(printf, 3, 4))) static int call_fail(struct admin *a, int rc,
							     const char *fmt, ...)
{
	const char *m = a->c ? conn_mgmt_error(a->c) : "", *p = strstr(m, ": ");
	char msg[400];
	va_list ap;

	m = p ? p + 2 : m;
	if (!*m)
		m = lode_strerror(rc);
	snprintf(msg, sizeof(msg), "%s%s", rc == -EACCES && m != lode_strerror(rc) ?
		 "permission denied: " : "", m);
	va_start(ap, fmt);
	vreport(msg, fmt, ap);
	va_end(ap);
	return EXIT_FAIL;
}

/* A usage error, with the command's synopsis; exit 2. */
__attribute__((format(printf, 2, 3))) static int usage(const struct admin *a, const char *fmt,
							 ...)
{
	va_list ap;

	fprintf(stderr, "lode: %s: ", a->cmd->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nusage: lode %s%s%s\n", a->cmd->name, *a->cmd->args ? " " : "",
		a->cmd->args);
	return EXIT_USAGE;
}

/* ---- options --------------------------------------------------------------- */

/* The index of option name in spec, and whether it takes a value; -1: none. */
static int opt_index(const char *spec, const char *name, size_t len, bool *takes_value)
{
	int idx = 0;

	while (*spec) {
		size_t n = strcspn(spec, " =");
		bool val = spec[n] == '=';

		if (n == len && strncmp(spec, name, len) == 0) {
			*takes_value = val;
			return idx;
		}
		spec += n + val;
		spec += *spec == ' ';
		idx++;
	}
	return -1;
}

/* The value of option name ("" for a flag given), or NULL when absent. */
static const char *opt(const struct admin *a, const char *name)
{
	bool val;
	int i = opt_index(a->verb->opts, name, strlen(name), &val);

	return i >= 0 && i < OPTS_MAX ? a->opt[i] : NULL;
}

/*
 * Options and positionals, in any order ("--" ends the options). Returns 0,
 * ADMIN_HELP, or EXIT_USAGE with the message printed.
 */
static int args_parse(struct admin *a, int argc, char **argv)
{
	bool opts = true;

	a->argc = 0;
	a->argv = argv;
	for (int i = 0; i < argc; i++) {
		const char *s = argv[i], *eq;
		bool takes;
		int idx;

		if (!opts || s[0] != '-' || !s[1]) {
			a->argv[a->argc++] = argv[i];
			continue;
		}
		if (!strcmp(s, "--")) {
			opts = false;
			continue;
		}
		if (!strcmp(s, "-h") || !strcmp(s, "--help"))
			return ADMIN_HELP;
		if (!strcmp(s, "--json") && strstr(a->verb->opts, "json")) {
			a->json = true;
			continue;
		}
		eq = strchr(s, '=');
		idx = s[1] == '-' ? opt_index(a->verb->opts, s + 2,
					      eq ? (size_t)(eq - s - 2) : strlen(s + 2), &takes)
				  : -1;
		if (idx < 0 || idx >= OPTS_MAX)
			return usage(a, "unknown option %s", s);
		if (takes && eq) {
			a->opt[idx] = eq + 1;
		} else if (takes) {
			if (i + 1 >= argc)
				return usage(a, "%s needs a value", s);
			a->opt[idx] = argv[++i];
		} else if (eq) {
			return usage(a, "%.*s takes no value", (int)(eq - s), s);
		} else {
			a->opt[idx] = "";
		}
	}
	if (a->argc < a->cmd->min_args)
		return usage(a, "missing arguments");
	if (a->cmd->max_args >= 0 && a->argc > a->cmd->max_args)
		return usage(a, "too many arguments");
	return 0;
}

/* A size: a whole number with an optional K, M, G or T (powers of 1024),
 * optionally followed by "iB" or "B": "10G", "64KiB", "4096". */
static int size_parse(const char *s, uint64_t *out)
{
	static const char units[] = "KMGT";
	uint64_t v = 0, mul = 1;
	const char *u;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	for (; *s >= '0' && *s <= '9'; s++) {
		if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	if (*s && (u = strchr(units, *s & ~0x20))) {
		mul = 1ull << (10 * (u - units + 1));
		s++;
		if (*s == 'i')
			s++;
	}
	if (*s == 'B' || *s == 'b')
		s++;
	if (*s)
		return -EINVAL;
	if (v > UINT64_MAX / mul)
		return -ERANGE;
	*out = v * mul;
	return 0;
}

/* "0,1,3": target indexes into a new array; *n gets their number. */
static int targets_parse(const char *s, uint32_t **out, size_t *n)
{
	size_t cap = 1;
	uint32_t *v;

	for (const char *p = s; *p; p++)
		cap += *p == ',';
	if (!(v = calloc(cap, sizeof(*v))))
		return -ENOMEM;
	*n = 0;
	for (;;) {
		char *end;
		unsigned long x;

		if (*s < '0' || *s > '9')
			break;
		errno = 0;
		x = strtoul(s, &end, 10);
		if (errno || x > UINT32_MAX)
			break;
		v[(*n)++] = (uint32_t)x;
		if (*end == 0) {
			*out = v;
			return 0;
		}
		if (*end != ',')
			break;
		s = end + 1;
	}
	free(v);
	return -EINVAL;
}

/* RIGHTS: "none", or some of r, w, a, each at most once. */
static int rights_parse(const char *s, uint32_t *out)
{
	uint32_t r = 0;

	if (!strcmp(s, "none")) {
		*out = 0;
		return 0;
	}
	if (!*s)
		return -EINVAL;
	for (; *s; s++) {
		uint32_t bit = *s == 'r' ? AUTH_R_READ : *s == 'w' ? AUTH_R_WRITE
						       : *s == 'a' ? AUTH_R_ADMIN : 0;

		if (!bit || (r & bit))
			return -EINVAL;
		r |= bit;
	}
	*out = r;
	return 0;
}

/* ---- formatting ------------------------------------------------------------ */

static const char *fmt_rights(char *buf, size_t cap, uint32_t r)
{
	if (!(r & (AUTH_R_READ | AUTH_R_WRITE | AUTH_R_ADMIN)))
		snprintf(buf, cap, "none");
	else
		snprintf(buf, cap, "%s%s%s", r & AUTH_R_READ ? "r" : "", r & AUTH_R_WRITE ? "w" : "",
			 r & AUTH_R_ADMIN ? "a" : "");
	return buf;
}

/* bytes as "512 B" or "1.5 GiB" */
static const char *fmt_size(char *buf, size_t cap, uint64_t bytes)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	double v = (double)bytes;
	unsigned u = 0;

	while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024;
		u++;
	}
	snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", v, units[u]);
	return buf;
}

/* unix ms as local time; "-" for none */
static const char *fmt_time(char *buf, size_t cap, int64_t ms)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;

	if (ms <= 0 || !localtime_r(&t, &tm) || !strftime(buf, cap, "%Y-%m-%d %H:%M:%S %Z", &tm))
		snprintf(buf, cap, "-");
	return buf;
}

static const char *fmt_uuid(char *buf, size_t cap, const ProtobufCBinaryData *u)
{
	const uint8_t *b = u->data;

	if (u->len != 16) {
		snprintf(buf, cap, "-");
		return buf;
	}
	snprintf(buf, cap,
		 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
		 b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
		 b[15]);
	return buf;
}

static const char *state_name(Lode__Mgmt__V1__State s)
{
	switch (s) {
	case LODE__MGMT__V1__STATE__STATE_UP:
		return "UP";
	case LODE__MGMT__V1__STATE__STATE_DOWN:
		return "DOWN";
	case LODE__MGMT__V1__STATE__STATE_DRAIN:
		return "DRAIN";
	case LODE__MGMT__V1__STATE__STATE_NEW:
		return "NEW";
	case LODE__MGMT__V1__STATE__STATE_OUT:
		return "OUT";
	default:
		return "UNKNOWN";
	}
}

/* TENANT/NAME into buf */
static const char *fmt_qualified(char *buf, size_t cap, const char *tenant, const char *name)
{
	if (tenant && *tenant)
		snprintf(buf, cap, "%s/%s", tenant, name);
	else
		snprintf(buf, cap, "%s", name);
	return buf;
}

/* ---- JSON ------------------------------------------------------------------ */

static void json_str(const char *s)
{
	putchar('"');
	for (; s && *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", *s);
		else
			putchar(*s);
	}
	putchar('"');
}

static size_t json_elem_size(ProtobufCType t)
{
	switch (t) {
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
	case PROTOBUF_C_TYPE_DOUBLE:
		return 8;
	case PROTOBUF_C_TYPE_BOOL:
		return sizeof(protobuf_c_boolean);
	case PROTOBUF_C_TYPE_STRING:
	case PROTOBUF_C_TYPE_MESSAGE:
		return sizeof(void *);
	case PROTOBUF_C_TYPE_BYTES:
		return sizeof(ProtobufCBinaryData);
	default:
		return 4; /* 32-bit integers, enums, float */
	}
}

static void json_msg(const ProtobufCMessage *m);

static void json_value(const ProtobufCFieldDescriptor *f, const void *p)
{
	switch (f->type) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
		printf("%" PRId32, *(const int32_t *)p);
		break;
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
		printf("%" PRIu32, *(const uint32_t *)p);
		break;
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
		printf("%" PRId64, *(const int64_t *)p);
		break;
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
		printf("%" PRIu64, *(const uint64_t *)p);
		break;
	case PROTOBUF_C_TYPE_FLOAT:
		printf("%.6g", (double)*(const float *)p);
		break;
	case PROTOBUF_C_TYPE_DOUBLE:
		printf("%.6g", *(const double *)p);
		break;
	case PROTOBUF_C_TYPE_BOOL:
		fputs(*(const protobuf_c_boolean *)p ? "true" : "false", stdout);
		break;
	case PROTOBUF_C_TYPE_ENUM: {
		const ProtobufCEnumValue *v =
			protobuf_c_enum_descriptor_get_value(f->descriptor, *(const int *)p);

		if (v)
			json_str(v->name);
		else
			printf("%d", *(const int *)p);
		break;
	}
	case PROTOBUF_C_TYPE_STRING:
		json_str(*(char *const *)p);
		break;
	case PROTOBUF_C_TYPE_BYTES: {
		const ProtobufCBinaryData *b = p;

		putchar('"');
		for (size_t i = 0; i < b->len; i++)
			printf("%02x", b->data[i]);
		putchar('"');
		break;
	}
	case PROTOBUF_C_TYPE_MESSAGE:
		if (*(ProtobufCMessage *const *)p)
			json_msg(*(ProtobufCMessage *const *)p);
		else
			fputs("null", stdout);
		break;
	}
}

/* Every field of m, named as in the .proto; bytes as hex, enums by name. */
static void json_msg(const ProtobufCMessage *m)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;
	const char *base = (const char *)m;

	putchar('{');
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];

		if (i)
			putchar(',');
		json_str(f->name);
		putchar(':');
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t n = *(const size_t *)(base + f->quantifier_offset);
			const char *arr = *(char *const *)(base + f->offset);

			putchar('[');
			for (size_t k = 0; k < n; k++) {
				if (k)
					putchar(',');
				json_value(f, arr + k * json_elem_size(f->type));
			}
			putchar(']');
		} else {
			json_value(f, base + f->offset);
		}
	}
	putchar('}');
}

static void json_print(const ProtobufCMessage *m)
{
	json_msg(m);
	putchar('\n');
}

/* ---- secrets and the credentials file ----------------------------------- */

/* The file `lode login` writes and liblode reads when told nothing else. */
static int cred_path(char *out, size_t cap)
{
	const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
	int n;

	if (!(xdg && *xdg) && !(home && *home)) {
		struct passwd *pw = getpwuid(getuid());

		home = pw ? pw->pw_dir : NULL;
		if (!home)
			return -ENOENT;
	}
	if (xdg && *xdg)
		n = snprintf(out, cap, "%s/lode/credentials", xdg);
	else
		n = snprintf(out, cap, "%s/.config/lode/credentials", home);
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/*
 * The credentials liblode presents when given none (its order: $LODE_USER
 * with $LODE_SECRET, the file $LODE_CREDENTIALS names, the default file),
 * and where they came from. Errors: -LODE_EAUTH (none), -EINVAL (a file
 * that does not parse).
 */
static int cred_current(struct conn_cred *cr, char *from, size_t cap)
{
	const char *u = getenv("LODE_USER"), *s = getenv("LODE_SECRET");
	const char *f = getenv("LODE_CREDENTIALS");
	int rc;

	memset(cr, 0, sizeof(*cr));
	if (u && *u && s) {
		snprintf(cr->user, sizeof(cr->user), "%s", u);
		snprintf(cr->secret, sizeof(cr->secret), "%s", s);
		snprintf(from, cap, "$LODE_USER and $LODE_SECRET");
		return 0;
	}
	if (f && *f)
		snprintf(from, cap, "%s", f);
	else if ((rc = cred_path(from, cap)) < 0)
		return -LODE_EAUTH;
	rc = cred_file_load(from, cr);
	return rc == -ENOENT ? -LODE_EAUTH : rc;
}

/*
 * A secret as it will sit in the credentials file: one line, no surrounding
 * blanks (the file's parser trims them). One trailing newline is the
 * writer's, not the secret's, and is dropped. Errors: -EINVAL (empty, or
 * unstorable), -E2BIG (over AUTH_SECRET_MAX bytes).
 */
static int secret_clean(char *s, size_t *len)
{
	size_t n = *len;

	if (n && s[n - 1] == '\n')
		n--;
	if (n && s[n - 1] == '\r')
		n--;
	s[n] = 0;
	if (n == 0 || strlen(s) != n || strchr(s, '\n') || strchr(s, '\r'))
		return -EINVAL;
	if (s[0] == ' ' || s[0] == '\t' || s[n - 1] == ' ' || s[n - 1] == '\t')
		return -EINVAL;
	if (n > AUTH_SECRET_MAX)
		return -E2BIG;
	*len = n;
	return 0;
}

/* Read fd to its end into buf[cap] (NUL-terminated); -E2BIG if it does not fit. */
static int fd_read_secret(int fd, char *buf, size_t cap, size_t *len)
{
	size_t n = 0;

	for (;;) {
		ssize_t r = read(fd, buf + n, cap - 1 - n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		n += (size_t)r;
		if (n == cap - 1)
			return -E2BIG;
	}
	buf[n] = 0;
	*len = n;
	return 0;
}

/* The terminal's settings while echo is off, to put back on a signal. */
static struct termios tty_saved;
static volatile sig_atomic_t tty_echo_off;

static void tty_on_signal(int sig)
{
	if (tty_echo_off)
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &tty_saved);
	signal(sig, SIG_DFL);
	raise(sig);
}

/*
 * Ask for a line on the terminal (stdin), echo off for a secret. Errors:
 * -ENOTTY (stdin is not a terminal: scripts say where the secret is),
 * -ENODATA (end of input), -E2BIG.
 */
static int tty_ask(const char *prompt, bool hide, char *buf, size_t cap, size_t *len)
{
	/* Not SIGTSTP: the shell puts the terminal back for a stopped job. */
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
	struct termios t;
	int rc = 0;

	if (!isatty(STDIN_FILENO))
		return -ENOTTY;
	fputs(prompt, stderr);
	fflush(stderr);
	if (hide && tcgetattr(STDIN_FILENO, &tty_saved) == 0) {
		for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
			signal(sigs[i], tty_on_signal);
		t = tty_saved;
		t.c_lflag &= ~(tcflag_t)ECHO;
		tty_echo_off = tcsetattr(STDIN_FILENO, TCSAFLUSH, &t) == 0;
	}
	if (!fgets(buf, (int)cap, stdin))
		rc = -ENODATA;
	else if (!strchr(buf, '\n') && strlen(buf) == cap - 1)
		rc = -E2BIG;
	if (tty_echo_off) {
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &tty_saved);
		tty_echo_off = 0;
		fputc('\n', stderr); /* the newline typed was not echoed */
	}
	if (hide)
		for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
			signal(sigs[i], SIG_DFL);
	*len = rc ? 0 : strlen(buf);
	return rc;
}

/*
 * The secret a command was given: --secret-file FILE, --secret-stdin, or
 * (when prompt is set and stdin is a terminal) typed with echo off; with
 * none of them, *given is false. buf has AUTH_SECRET_MAX + 3 bytes. On
 * failure the message is printed and the exit status returned.
 */
static int secret_get(struct admin *a, const char *prompt, char *buf, size_t cap, bool *given)
{
	const char *file = opt(a, "secret-file");
	bool from_stdin = opt(a, "secret-stdin") != NULL;
	size_t len = 0;
	int rc, fd;

	*given = true;
	if (file && from_stdin)
		return usage(a, "--secret-file and --secret-stdin exclude each other");
	if (file) {
		if ((fd = open(file, O_RDONLY | O_CLOEXEC)) < 0)
			return fail(-errno, "%s", file);
		rc = fd_read_secret(fd, buf, cap, &len);
		close(fd);
		if (rc < 0)
			return fail(rc, "secret from %s", file);
	} else if (from_stdin) {
		if ((rc = fd_read_secret(STDIN_FILENO, buf, cap, &len)) < 0)
			return fail(rc, "secret from stdin");
	} else if (prompt) {
		rc = tty_ask(prompt, true, buf, cap, &len);
		if (rc == -ENOTTY)
			return usage(a, "stdin is not a terminal, so there is no one to ask for the "
					"secret: give --secret-file FILE or --secret-stdin");
		if (rc < 0)
			return fail(rc, "secret");
	} else {
		*given = false;
		return 0;
	}
	if ((rc = secret_clean(buf, &len)) < 0)
		return fail(rc, "secret: %s",
			    rc == -E2BIG ? "too long" : "empty, several lines, or blanks around it");
	return 0;
}

/* A new secret: GEN_SECRET_BYTES random bytes as hex, into buf. */
static int secret_generate(char *buf, size_t cap)
{
	uint8_t r[GEN_SECRET_BYTES];

	if (cap < 2 * sizeof(r) + 1)
		return -EMSGSIZE;
	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		return -EIO;
	for (size_t i = 0; i < sizeof(r); i++)
		snprintf(buf + 2 * i, 3, "%02x", r[i]);
	explicit_bzero(r, sizeof(r));
	return 0;
}

/* mkdir -p for the directories above path's last component, made 0700. */
static int dirs_make(const char *path)
{
	char p[PATH_MAX];

	if (snprintf(p, sizeof(p), "%s", path) >= (int)sizeof(p))
		return -ENAMETOOLONG;
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = 0;
		if (mkdir(p, 0700) < 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	return 0;
}

/*
 * Replace path with text, atomically: a temporary file beside it (0600
 * from the start, so the secret is never readable by others), fsync,
 * rename over path, fsync the directory. Errors: -errno; nothing is left
 * behind on failure.
 */
static int file_write_atomic(const char *path, const char *text)
{
	char tmp[PATH_MAX], dir[PATH_MAX], *slash;
	FILE *f;
	int fd, rc = 0, dfd;

	if ((rc = dirs_make(path)) < 0)
		return rc;
	if (snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	if ((fd = mkostemp(tmp, O_CLOEXEC)) < 0)
		return -errno;
	if (fchmod(fd, 0600) < 0 || !(f = fdopen(fd, "w"))) {
		rc = -errno;
		close(fd);
		unlink(tmp);
		return rc;
	}
	if (fputs(text, f) == EOF || fflush(f) == EOF || fsync(fileno(f)) < 0)
		rc = -errno;
	if (fclose(f) == EOF && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc < 0) {
		unlink(tmp);
		return rc;
	}
	snprintf(dir, sizeof(dir), "%s", path);
	if ((slash = strrchr(dir, '/')) == dir)
		slash[1] = 0; /* a file in / */
	else if (slash)
		*slash = 0;
	if ((dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		fsync(dfd);
		close(dfd);
	}
	return 0;
}

/* ---- calls ------------------------------------------------------------------ */

/* One management call; on failure report it as "lode: WHAT: message". */
__attribute__((format(printf, 7, 8))) static int call(struct admin *a, const char *method,
							const ProtobufCMessage *req,
							const ProtobufCMessageDescriptor *rd,
							void *reply, int not_found, const char *fmt,
							...)
{
	char what[512];
	va_list ap;
	int rc = conn_mgmt_call(a->c, method, req, rd, (ProtobufCMessage **)reply, not_found);

	if (rc == 0)
		return 0;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return call_fail(a, rc, "%s", what);
}

static void reply_free(void *m)
{
	if (m)
		protobuf_c_message_free_unpacked(m, NULL);
}

/* Where a connection goes, for messages. */
static const char *addr_name(const struct admin *a)
{
	const char *env = getenv("LODE_ADDR");

	return a->addr ? a->addr : env && *env ? env : "the local loded";
}

/* ---- login, logout, whoami ------------------------------------------------- */

/*
 * Who the connection is: Connect's reply carries the user's and the
 * tenant's names, which the token does not (it has their ids), so ask the
 * service again with the same credentials.
 */
static int session_ask(struct admin *a, const char *user, const char *secret,
		       Lode__Mgmt__V1__ConnectReply **rep, const char *what)
{
	Lode__Mgmt__V1__ConnectRequest req = LODE__MGMT__V1__CONNECT_REQUEST__INIT;

	req.user = (char *)user;
	req.secret.data = (uint8_t *)secret;
	req.secret.len = strlen(secret);
	req.pool = (char *)conn_pool(a->c);
	return call(a, M("Connect"), &req.base, &lode__mgmt__v1__connect_reply__descriptor, rep,
		    -ENOENT, "%s as %s", what, user);
}

static int cmd_login(struct admin *a)
{
	char secret[AUTH_SECRET_MAX + 3], name[256], path[PATH_MAX], ca[PATH_MAX];
	char text[AUTH_SECRET_MAX + 2 * PATH_MAX + 1024];
	const char *user = opt(a, "user"), *mgmt = opt(a, "mgmt"), *pool = opt(a, "pool");
	const char *tls_ca = opt(a, "tls-ca"), *env;
	Lode__Mgmt__V1__ConnectReply *rep = NULL;
	struct lode_conn_opts o = a->opts;
	size_t len;
	bool given;
	int rc;

	if ((rc = cred_path(path, sizeof(path))) < 0)
		return fail(rc, "login: where to keep the credentials ($HOME is not set)");
	if (!user && (env = getenv("LODE_USER")) && *env)
		user = env;
	if (!user) {
		rc = tty_ask("user: ", false, name, sizeof(name), &len);
		if (rc == -ENOTTY)
			return usage(a, "no user: give --user NAME");
		if (rc < 0)
			return fail(rc, "user");
		name[strcspn(name, "\r\n")] = 0;
		if (!name[0])
			return usage(a, "no user: give --user NAME");
		user = name;
	}
	if ((rc = secret_get(a, "secret: ", secret, sizeof(secret), &given)))
		return rc;
	if (tls_ca) {
		if (!realpath(tls_ca, ca))
			return fail(-errno, "%s", tls_ca);
		tls_ca = ca;
		setenv("LODE_TLS_CA", ca, 1);
	}
	if (mgmt)
		setenv("LODE_MGMT", mgmt, 1);
	o.user = user;
	o.secret = secret;
	o.pool = pool;
	if ((rc = conn_mgmt_connect(a->addr, &o, &a->c)) < 0) {
		a->c = NULL;
		explicit_bzero(secret, sizeof(secret));
		return fail(rc, "login as %s%s%s%s", user, lode_last_error()[0] ? " (" : "",
			    lode_last_error(), lode_last_error()[0] ? ")" : "");
	}
	if ((rc = session_ask(a, user, secret, &rep, "login"))) {
		explicit_bzero(secret, sizeof(secret));
		return rc;
	}
	/* the name as the service spells it, tenant included: unambiguous */
	fmt_qualified(name, sizeof(name), rep->tenant, rep->user);
	snprintf(text, sizeof(text),
		 "# Written by `lode login`; `lode logout` removes it.\n"
		 "user: %s\nsecret: %s\n%s%s%s%s%s%s%s%s%s",
		 name, secret, mgmt ? "mgmt: " : "", mgmt ? mgmt : "", mgmt ? "\n" : "",
		 pool ? "pool: " : "", pool ? pool : "", pool ? "\n" : "", tls_ca ? "tls_ca: " : "",
		 tls_ca ? tls_ca : "", tls_ca ? "\n" : "");
	explicit_bzero(secret, sizeof(secret));
	rc = file_write_atomic(path, text);
	explicit_bzero(text, sizeof(text));
	if (rc < 0) {
		reply_free(rep);
		return fail(rc, "%s", path);
	}
	printf("Logged in as %s (tenant %s) on pool %s.\nCredentials saved in %s.\n", name,
	       rep->tenant, conn_pool(a->c), path);
	/* liblode looks at the environment first: say so when it would win */
	if ((env = getenv("LODE_USER")) && *env && getenv("LODE_SECRET"))
		fprintf(stderr, "lode: note: $LODE_USER and $LODE_SECRET are set, and commands use "
				"them before %s\n",
			path);
	else if ((env = getenv("LODE_CREDENTIALS")) && *env && strcmp(env, path))
		fprintf(stderr, "lode: note: $LODE_CREDENTIALS is set, and commands use %s before %s\n",
			env, path);
	reply_free(rep);
	return 0;
}

static int cmd_logout(struct admin *a)
{
	char path[PATH_MAX];
	int rc;

	if ((rc = cred_path(path, sizeof(path))) < 0)
		return fail(rc, "logout");
	rc = unlink(path) < 0 ? -errno : 0;
	if (rc < 0 && rc != -ENOENT)
		return fail(rc, "%s", path);
	if (rc == -ENOENT)
		printf("Not logged in (no %s).\n", path);
	else
		printf("Logged out: removed %s.\n", path);
	return 0;
}

static int cmd_whoami(struct admin *a)
{
	char from[PATH_MAX], buf[256], when[64], rights[8];
	Lode__Mgmt__V1__ConnectReply *rep = NULL;
	struct conn_cred cr;
	struct auth_cap cap;
	int rc;

	if ((rc = cred_current(&cr, from, sizeof(from))) == -LODE_EAUTH) {
		fprintf(stderr, "lode: whoami: not logged in: no $LODE_USER and $LODE_SECRET, and no "
				"%s%s\n",
			from, getenv("LODE_CREDENTIALS") ? "" : " (lode login writes it)");
		return EXIT_FAIL;
	}
	if (rc < 0)
		return fail(rc, "whoami: %s", from);
	if ((rc = conn_mgmt_connect(a->addr, &a->opts, &a->c)) < 0) {
		a->c = NULL;
		explicit_bzero(&cr, sizeof(cr));
		return fail(rc, "whoami: %s at %s", cr.user, addr_name(a));
	}
	rc = session_ask(a, cr.user, cr.secret, &rep, "whoami");
	explicit_bzero(cr.secret, sizeof(cr.secret));
	if (rc)
		return rc;
	if ((rc = auth_cap_decode(rep->capability.data, rep->capability.len, &cap)) < 0) {
		reply_free(rep);
		return fail(rc, "whoami: the capability");
	}
	fmt_qualified(buf, sizeof(buf), rep->tenant, rep->user);
	fmt_rights(rights, sizeof(rights), cap.rights);
	if (a->json) {
		printf("{\"user\":");
		json_str(buf);
		printf(",\"tenant\":");
		json_str(rep->tenant);
		printf(",\"pool\":");
		json_str(conn_pool(a->c));
		printf(",\"rights\":");
		json_str(rights);
		printf(",\"expires_unix_ms\":%" PRId64 ",\"signing_key_id\":%" PRIu32
		       ",\"credentials\":",
		       cap.expires_ms, cap.key_id);
		json_str(from);
		printf("}\n");
	} else {
		printf("user         %s\ntenant       %s\npool         %s\nrights       %s\n"
		       "expires      %s (capability, renewed while in use)\nsigning key  %" PRIu32
		       "\ncredentials  %s\n",
		       buf, rep->tenant, conn_pool(a->c), rights,
		       fmt_time(when, sizeof(when), cap.expires_ms), cap.key_id, from);
	}
	reply_free(rep);
	return 0;
}

/* ---- pools ------------------------------------------------------------------ */

static void pool_print(const Lode__Mgmt__V1__PoolInfo *p)
{
	char u[40], sz[32], used[32], when[64];

	printf("pool        %s\nuuid        %s\nsize        %s\nused        %s\ncontainers  %" PRIu32
	       "\ncreated     %s\ntargets     ",
	       p->label, fmt_uuid(u, sizeof(u), &p->uuid),
	       p->size ? fmt_size(sz, sizeof(sz), p->size) : "no limit",
	       fmt_size(used, sizeof(used), p->used), p->containers,
	       fmt_time(when, sizeof(when), p->created_unix_ms));
	for (size_t i = 0; i < p->n_targets; i++)
		printf("%s%" PRIu32, i ? "," : "", p->targets[i]);
	printf("\n");
}

static int cmd_pool_create(struct admin *a)
{
	Lode__Mgmt__V1__PoolCreateRequest req = LODE__MGMT__V1__POOL_CREATE_REQUEST__INIT;
	Lode__Mgmt__V1__PoolInfo *rep = NULL;
	const char *size = opt(a, "size"), *targets = opt(a, "targets");
	uint32_t *tgts = NULL;
	int rc;

	req.label = a->argv[0];
	if (size && size_parse(size, &req.size) < 0)
		return usage(a, "--size needs a size like 10G, not '%s'", size);
	if (targets && targets_parse(targets, &tgts, &req.n_targets) < 0)
		return usage(a, "--targets needs target indexes like 0,1,2, not '%s'", targets);
	req.targets = tgts;
	rc = call(a, M("PoolCreate"), &req.base, &lode__mgmt__v1__pool_info__descriptor, &rep,
		  -ENOENT, "pool %s", req.label);
	free(tgts);
	if (rc)
		return rc;
	pool_print(rep);
	reply_free(rep);
	return 0;
}

static int cmd_pool_list(struct admin *a)
{
	Lode__Mgmt__V1__Empty req = LODE__MGMT__V1__EMPTY__INIT;
	Lode__Mgmt__V1__PoolList *rep = NULL;
	int rc, w = 4;

	if ((rc = call(a, M("PoolListAll"), &req.base, &lode__mgmt__v1__pool_list__descriptor, &rep,
		       -ENOENT, "pool list")))
		return rc;
	if (a->json) {
		json_print(&rep->base);
		reply_free(rep);
		return 0;
	}
	for (size_t i = 0; i < rep->n_pools; i++)
		w = (int)strlen(rep->pools[i]->label) > w ? (int)strlen(rep->pools[i]->label) : w;
	printf("%-*s  %10s  %10s  %10s  %7s  %s\n", w, "pool", "size", "used", "containers",
	       "targets", "uuid");
	for (size_t i = 0; i < rep->n_pools; i++) {
		const Lode__Mgmt__V1__PoolInfo *p = rep->pools[i];
		char u[40], sz[32], used[32];

		printf("%-*s  %10s  %10s  %10" PRIu32 "  %7zu  %s\n", w, p->label,
		       p->size ? fmt_size(sz, sizeof(sz), p->size) : "no limit",
		       fmt_size(used, sizeof(used), p->used), p->containers, p->n_targets,
		       fmt_uuid(u, sizeof(u), &p->uuid));
	}
	reply_free(rep);
	return 0;
}

/* ---- the pool map and rebuild --------------------------------------------------- */

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* a duration in ms as "850ms", "12s", "3m05s", "2h10m" */
static const char *fmt_duration(char *buf, size_t cap, int64_t ms)
{
	int64_t s = ms / 1000;

	if (ms < 1000)
		snprintf(buf, cap, "%" PRId64 "ms", ms < 0 ? 0 : ms);
	else if (s < 60)
		snprintf(buf, cap, "%" PRId64 "s", s);
	else if (s < 3600)
		snprintf(buf, cap, "%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
	else
		snprintf(buf, cap, "%" PRId64 "h%02" PRId64 "m", s / 3600, s / 60 % 60);
	return buf;
}

/* Does the map have an engine a rebuild is due for (DOWN, DRAIN, NEW)? */
static bool rebuild_due(const Lode__Mgmt__V1__PoolMap *map)
{
	for (size_t i = 0; map && i < map->n_engines; i++) {
		Lode__Mgmt__V1__State st = map->engines[i]->state;

		if (st == LODE__MGMT__V1__STATE__STATE_DOWN ||
		    st == LODE__MGMT__V1__STATE__STATE_DRAIN ||
		    st == LODE__MGMT__V1__STATE__STATE_NEW)
			return true;
	}
	return false;
}

/* "2/2 UP" or "1/2 UP": an engine's targets in the layout */
static const char *fmt_targets(char *buf, size_t cap, const Lode__Mgmt__V1__Engine *e)
{
	size_t up = 0;

	for (size_t t = 0; t < e->n_targets; t++)
		up += e->targets[t]->state == LODE__MGMT__V1__STATE__STATE_UP;
	snprintf(buf, cap, "%zu/%zu UP", up, e->n_targets);
	return buf;
}

/* How long ago the engine's last heartbeat was: "host" for the engine that
 * hosts the service (it sends none), "-" for none since the service started. */
static const char *fmt_heartbeat(char *buf, size_t cap, const Lode__Mgmt__V1__Engine *e,
				 int64_t now)
{
	char d[32];

	if (e->id == 0)
		snprintf(buf, cap, "host");
	else if (e->heartbeat_unix_ms <= 0)
		snprintf(buf, cap, "-");
	else
		snprintf(buf, cap, "%s ago",
			 fmt_duration(d, sizeof(d), now - e->heartbeat_unix_ms));
	return buf;
}

static void engines_print(const Lode__Mgmt__V1__PoolMap *map, const char *indent)
{
	int64_t now = now_ms();
	int w = 7;

	for (size_t i = 0; i < map->n_engines; i++)
		if ((int)strlen(map->engines[i]->address) > w)
			w = (int)strlen(map->engines[i]->address);
	printf("%s%4s  %-*s  %-5s  %-9s  %s\n", indent, "id", w, "address", "state", "targets",
	       "heartbeat");
	for (size_t i = 0; i < map->n_engines; i++) {
		const Lode__Mgmt__V1__Engine *e = map->engines[i];
		char t[32], h[48];

		/* "-": a slot kept for an engine reintegrated under a new id. */
		printf("%s%4" PRIu32 "  %-*s  %-5s  %-9s  %s\n", indent, e->id, w,
		       e->address[0] ? e->address : "-", state_name(e->state),
		       fmt_targets(t, sizeof(t), e),
		       fmt_heartbeat(h, sizeof(h), e, now));
	}
}

/*
 * The rebuild line(s): while one is due or running, a bar of its progress
 * (bytes when the engines count them, else objects) and an estimate of the
 * time left from the rate so far; else the last one that completed.
 */
static void rebuild_print(const Lode__Mgmt__V1__RebuildStatus *r,
			  const Lode__Mgmt__V1__PoolMap *map)
{
	enum { BAR = 30 };
	char bar[BAR + 1], a[32], b[32], when[64], left[32];
	double frac = 0, done = 0, total = 0;
	int64_t now = now_ms(), elapsed;
	bool bytes = r->bytes_total > 0;

	if (!rebuild_due(map) && !r->running) {
		if (r->map_version == 0)
			printf("rebuild     none has run\n");
		else
			printf("rebuild     to version %" PRIu32 " done%s%s\n", r->map_version,
			       r->finished_unix_ms ? " at " : "",
			       r->finished_unix_ms
				       ? fmt_time(when, sizeof(when), r->finished_unix_ms)
				       : "");
		return;
	}
	done = bytes ? (double)r->bytes_done : (double)r->objects_done;
	total = bytes ? (double)r->bytes_total : (double)r->objects_total;
	if (total > 0)
		frac = done >= total ? 1.0 : done / total;
	for (int i = 0; i < BAR; i++)
		bar[i] = i < (int)(frac * BAR + 0.5) ? '#' : '-';
	bar[BAR] = '\0';
	printf("rebuild     to version %" PRIu32 "%s: [%s] %5.1f%%\n", r->map_version,
	       r->running ? ", running" : "", bar, 100.0 * frac);
	if (bytes)
		printf("            %s of %s", fmt_size(a, sizeof(a), r->bytes_done),
		       fmt_size(b, sizeof(b), r->bytes_total));
	else
		printf("            %" PRIu64 " of %" PRIu64 " objects", r->objects_done,
		       r->objects_total);
	printf(", %" PRIu32 " engine%s pending", r->engines_pending,
	       r->engines_pending == 1 ? "" : "s");
	elapsed = r->started_unix_ms > 0 ? now - r->started_unix_ms : 0;
	if (elapsed > 0 && done > 0 && total > done)
		printf(", about %s left",
		       fmt_duration(left, sizeof(left),
				    (int64_t)((total - done) * (double)elapsed / done)));
	else if (r->started_unix_ms <= 0)
		printf(", not started");
	printf("\n");
	if (r->errno_value)
		printf("            error: %s\n", lode_strerror(r->errno_value));
}

static void pool_query_print(const Lode__Mgmt__V1__PoolInfo *p)
{
	pool_print(p);
	if (!p->map)
		return;
	printf("pool map    version %" PRIu32 ", %zu engine%s\n", p->map->version,
	       p->map->n_engines, p->map->n_engines == 1 ? "" : "s");
	engines_print(p->map, "  ");
	if (p->rebuild)
		rebuild_print(p->rebuild, p->map);
}

static volatile sig_atomic_t watch_stop;

static void watch_on_signal(int sig)
{
	(void)sig;
	watch_stop = 1;
}

/* `pool query`, and with --watch the same every second (the screen cleared
 * first on a terminal) until no rebuild is due, or Ctrl-C. */
static int cmd_pool_query(struct admin *a)
{
	Lode__Mgmt__V1__PoolRef req = LODE__MGMT__V1__POOL_REF__INIT;
	bool watch = opt(a, "watch") != NULL, tty = isatty(STDOUT_FILENO);
	struct sigaction sa = {.sa_handler = watch_on_signal}, old_int;
	int rc = 0;

	if (watch && a->json)
		return usage(a, "--watch and --json do not go together");
	req.label = a->argv[0];
	if (watch)
		sigaction(SIGINT, &sa, &old_int);
	for (;;) {
		Lode__Mgmt__V1__PoolInfo *rep = NULL;
		bool due;

		if ((rc = call(a, M("PoolQuery"), &req.base, &lode__mgmt__v1__pool_info__descriptor,
			       &rep, -ENOENT, "pool %s", req.label)))
			break;
		due = rebuild_due(rep->map) || (rep->rebuild && rep->rebuild->running);
		if (watch && tty)
			printf("\033[H\033[2J");
		if (a->json)
			json_print(&rep->base);
		else
			pool_query_print(rep);
		fflush(stdout);
		reply_free(rep);
		if (!watch || !due || watch_stop)
			break;
		for (int i = 0; i < 10 && !watch_stop; i++)
			usleep(100 * 1000);
		if (watch_stop)
			break;
		if (!tty)
			printf("\n");
	}
	if (watch)
		sigaction(SIGINT, &old_int, NULL);
	return rc;
}

static int cmd_pool_destroy(struct admin *a)
{
	Lode__Mgmt__V1__PoolDestroyRequest req = LODE__MGMT__V1__POOL_DESTROY_REQUEST__INIT;
	Lode__Mgmt__V1__Empty *rep = NULL;
	int rc;

	req.label = a->argv[0];
	req.force = opt(a, "force") != NULL;
	if ((rc = call(a, M("PoolDestroy"), &req.base, &lode__mgmt__v1__empty__descriptor, &rep,
		       -ENOENT, "pool %s", req.label)))
		return rc;
	reply_free(rep);
	printf("Destroyed pool %s.\n", req.label);
	return 0;
}

/* ---- containers --------------------------------------------------------------- */

static void cont_print(const Lode__Mgmt__V1__ContInfo *c)
{
	const Lode__Mgmt__V1__ContProps *p = c->props;
	char u[40], when[64], cs[32];

	printf("container   %s\npool        %s\nuuid        %s\nowner       tenant %s\ncreated     %s\n",
	       c->label, c->pool, fmt_uuid(u, sizeof(u), &c->uuid), c->tenant,
	       fmt_time(when, sizeof(when), c->created_unix_ms));
	if (!p)
		return;
	printf("class       %s\nchunk size  %s\nchecksum    %s\nencryption  %s\n",
	       *p->object_class ? p->object_class : "SX (default)",
	       p->chunk_size ? fmt_size(cs, sizeof(cs), p->chunk_size) : "1.0 MiB (default)",
	       *p->checksum ? p->checksum : "crc32c (default)",
	       p->encryption ? "AES-256-GCM, in the client" : "off");
	if (p->encryption)
		printf("crypt block %s\n",
		       fmt_size(cs, sizeof(cs), p->crypt_block ? p->crypt_block : 4096));
}

/*
 * `cont create`: with no property given, lode_cont_create as always; with
 * any, the properties go to the service (cont_props.c). Both need the data
 * plane, to make the container on the targets.
 */
/*
 * A class whose groups need more engines than the pool has in its layout:
 * say so now, not at the first write (-ENOSPC).
 */
static void class_room_note(lode_conn_t *c, const char *name)
{
	struct layout_class lc;
	unsigned in = 0;

	if (!name || layout_class_parse(name, &lc) < 0 || lc.group_size < 2)
		return;
	pthread_mutex_lock(&c->lock);
	for (uint32_t i = 0; c->map && i < c->map->nengines; i++)
		in += layout_state_in(c->map->engines[i].state);
	pthread_mutex_unlock(&c->lock);
	if (in < lc.group_size)
		fprintf(stderr,
			"note: %s puts each group on %u engines and the pool has %u: writes fail "
			"with \"No space left on device\" until %u more join\n",
			name, lc.group_size, in, lc.group_size - in);
}

static int cmd_cont_create(struct admin *a)
{
	const char *label = a->argv[0], *chunk = opt(a, "chunk-size"), *cb = opt(a, "crypt-block");
	struct conn_cont_props p = {.object_class = opt(a, "class"),
				    .checksum = opt(a, "checksum"),
				    .encryption = opt(a, "encrypt") != NULL};
	uint64_t cs = 0, cbs = 0;
	int rc;

	if (chunk && (size_parse(chunk, &cs) < 0 || cs == 0 || cs > UINT32_MAX))
		return usage(a, "--chunk-size needs a size like 64K, not '%s'", chunk);
	if (cb && !p.encryption)
		return usage(a, "--crypt-block needs --encrypt");
	if (cb && (size_parse(cb, &cbs) < 0 || !crypt_block_valid(cbs)))
		return usage(a, "--crypt-block is a power of two from 4K to 1M, not '%s'", cb);
	if (p.checksum && strcmp(p.checksum, "crc32c") && strcmp(p.checksum, "none"))
		return usage(a, "--checksum is crc32c or none, not '%s'", p.checksum);
	if (p.object_class && !*p.object_class)
		return usage(a, "--class needs an object class like S1");
	p.chunk_size = (uint32_t)cs;
	p.crypt_block = (uint32_t)cbs;
	if ((rc = lode_connect(a->addr, &a->opts, &a->c)) < 0) {
		a->c = NULL;
		return fail(rc, "connect to %s", addr_name(a));
	}
	if (!p.object_class && !chunk && !p.checksum && !p.encryption)
		rc = lode_cont_create(a->c, label, NULL);
	else
		rc = conn_cont_create_props(a->c, label, &p, NULL);
	/* a refusal by the service has its message; the targets' errors do not */
	if (rc == -EHOSTDOWN)
		return fail(rc, "container %s: not made: an engine the pool map has serving does "
				"not answer (try again once it does, or once the map has it DOWN)",
			    label);
	if (rc)
		return call_fail(a, rc, "container %s", label);
	class_room_note(a->c, p.object_class);
	return 0;
}

static int cmd_cont_query(struct admin *a)
{
	Lode__Mgmt__V1__ContRef req = LODE__MGMT__V1__CONT_REF__INIT;
	Lode__Mgmt__V1__ContInfo *rep = NULL;
	int rc;

	req.pool = (char *)conn_pool(a->c);
	req.label = a->argv[0];
	if ((rc = call(a, M("ContQuery"), &req.base, &lode__mgmt__v1__cont_info__descriptor, &rep,
		       -LODE_ENOCONT, "container %s", req.label)))
		return rc;
	/* the wrapped data key is for lode-agent, not for people */
	rep->wrapped_key.len = 0;
	if (a->json)
		json_print(&rep->base);
	else
		cont_print(rep);
	reply_free(rep);
	return 0;
}

/* ---- tenants ------------------------------------------------------------------ */

static int cmd_tenant_create(struct admin *a)
{
	Lode__Mgmt__V1__NameRef req = LODE__MGMT__V1__NAME_REF__INIT;
	Lode__Mgmt__V1__Tenant *rep = NULL;
	int rc;

	req.name = a->argv[0];
	if ((rc = call(a, M("TenantCreate"), &req.base, &lode__mgmt__v1__tenant__descriptor, &rep,
		       -ENOENT, "tenant %s", req.name)))
		return rc;
	printf("Created tenant %s.\n", rep->name);
	reply_free(rep);
	return 0;
}

static int cmd_tenant_list(struct admin *a)
{
	Lode__Mgmt__V1__Empty req = LODE__MGMT__V1__EMPTY__INIT;
	Lode__Mgmt__V1__TenantList *rep = NULL;
	int rc, w = 6;

	if ((rc = call(a, M("TenantListAll"), &req.base, &lode__mgmt__v1__tenant_list__descriptor,
		       &rep, -ENOENT, "tenant list")))
		return rc;
	if (a->json) {
		json_print(&rep->base);
		reply_free(rep);
		return 0;
	}
	for (size_t i = 0; i < rep->n_tenants; i++)
		w = (int)strlen(rep->tenants[i]->name) > w ? (int)strlen(rep->tenants[i]->name) : w;
	printf("%-*s  %s\n", w, "tenant", "created");
	for (size_t i = 0; i < rep->n_tenants; i++) {
		char when[64];

		printf("%-*s  %s\n", w, rep->tenants[i]->name,
		       fmt_time(when, sizeof(when), rep->tenants[i]->created_unix_ms));
	}
	reply_free(rep);
	return 0;
}

static int cmd_tenant_destroy(struct admin *a)
{
	Lode__Mgmt__V1__NameRef req = LODE__MGMT__V1__NAME_REF__INIT;
	Lode__Mgmt__V1__Empty *rep = NULL;
	int rc;

	req.name = a->argv[0];
	if ((rc = call(a, M("TenantDestroy"), &req.base, &lode__mgmt__v1__empty__descriptor, &rep,
		       -ENOENT, "tenant %s", req.name)))
		return rc;
	reply_free(rep);
	printf("Destroyed tenant %s.\n", req.name);
	return 0;
}

/* ---- users and groups ------------------------------------------------------------ */

/* "TENANT/NAME" into its parts (tenant "" when there is no slash: the
 * caller's own). buf holds the copy the parts point into. */
static void name_split(const char *arg, char *buf, size_t cap, char **tenant, char **name)
{
	char *slash;

	snprintf(buf, cap, "%s", arg);
	if ((slash = strchr(buf, '/'))) {
		*slash = 0;
		*tenant = buf;
		*name = slash + 1;
	} else {
		*tenant = buf + strlen(buf); /* "" */
		*name = buf;
	}
}

static void user_line(const Lode__Mgmt__V1__User *u, int w)
{
	char q[256];

	printf("%-*s  %-5s  %-4s  %-7s  ", w, fmt_qualified(q, sizeof(q), u->tenant, u->name),
	       u->admin ? "yes" : "no", u->node ? "yes" : "no", u->revoked ? "yes" : "no");
	for (size_t i = 0; i < u->n_groups; i++)
		printf("%s%s", i ? "," : "", u->groups[i]);
	printf("%s\n", u->n_groups ? "" : "-");
}

static void user_header(int w)
{
	printf("%-*s  %-5s  %-4s  %-7s  %s\n", w, "user", "admin", "node", "revoked", "groups");
}

static int user_width(const Lode__Mgmt__V1__User *u)
{
	int n = (int)(strlen(u->tenant) + 1 + strlen(u->name));

	return n > 4 ? n : 4;
}

static void user_print(const Lode__Mgmt__V1__User *u)
{
	user_header(user_width(u));
	user_line(u, user_width(u));
}

static int cmd_user_create(struct admin *a)
{
	Lode__Mgmt__V1__UserCreateRequest req = LODE__MGMT__V1__USER_CREATE_REQUEST__INIT;
	Lode__Mgmt__V1__User *rep = NULL;
	char secret[AUTH_SECRET_MAX + 3], buf[256];
	bool given;
	int rc;

	name_split(a->argv[0], buf, sizeof(buf), &req.tenant, &req.name);
	req.admin = opt(a, "admin") != NULL;
	req.node = opt(a, "node") != NULL;
	if ((rc = secret_get(a, NULL, secret, sizeof(secret), &given)))
		return rc;
	if (!given && (rc = secret_generate(secret, sizeof(secret))) < 0)
		return fail(rc, "a new secret");
	req.secret.data = (uint8_t *)secret;
	req.secret.len = strlen(secret);
	rc = call(a, M("UserCreate"), &req.base, &lode__mgmt__v1__user__descriptor, &rep, -ENOENT,
		  "user %s", a->argv[0]);
	if (rc == 0) {
		user_print(rep);
		if (!given)
			printf("secret: %s\n(generated; shown only this once: give it to the user, "
			       "who runs `lode login --user %s`)\n",
			       secret, a->argv[0]);
	}
	explicit_bzero(secret, sizeof(secret));
	reply_free(rep);
	return rc;
}

static int cmd_user_list(struct admin *a)
{
	Lode__Mgmt__V1__NameRef req = LODE__MGMT__V1__NAME_REF__INIT;
	Lode__Mgmt__V1__UserList *rep = NULL;
	int rc, w = 4;

	req.name = a->argc ? a->argv[0] : "";
	if ((rc = call(a, M("UserListAll"), &req.base, &lode__mgmt__v1__user_list__descriptor, &rep,
		       -ENOENT, "users of %s", *req.name ? req.name : "your tenant")))
		return rc;
	if (a->json) {
		json_print(&rep->base);
		reply_free(rep);
		return 0;
	}
	for (size_t i = 0; i < rep->n_users; i++)
		w = user_width(rep->users[i]) > w ? user_width(rep->users[i]) : w;
	user_header(w);
	for (size_t i = 0; i < rep->n_users; i++)
		user_line(rep->users[i], w);
	reply_free(rep);
	return 0;
}

/* revoke and restore: the same call shape, the user's new state printed */
static int user_state(struct admin *a, const char *method)
{
	Lode__Mgmt__V1__NameRef req = LODE__MGMT__V1__NAME_REF__INIT;
	Lode__Mgmt__V1__User *rep = NULL;
	int rc;

	req.name = a->argv[0];
	if ((rc = call(a, method, &req.base, &lode__mgmt__v1__user__descriptor, &rep, -ENOENT,
		       "user %s", req.name)))
		return rc;
	user_print(rep);
	reply_free(rep);
	return 0;
}

static int cmd_user_revoke(struct admin *a)
{
	return user_state(a, M("UserRevoke"));
}

static int cmd_user_restore(struct admin *a)
{
	return user_state(a, M("UserRestore"));
}

static int cmd_user_passwd(struct admin *a)
{
	Lode__Mgmt__V1__UserSecretRequest req = LODE__MGMT__V1__USER_SECRET_REQUEST__INIT;
	Lode__Mgmt__V1__Empty *rep = NULL;
	char secret[AUTH_SECRET_MAX + 3];
	bool given;
	int rc;

	if ((rc = secret_get(a, NULL, secret, sizeof(secret), &given)))
		return rc;
	if (!given && (rc = secret_generate(secret, sizeof(secret))) < 0)
		return fail(rc, "a new secret");
	req.name = a->argv[0];
	req.secret.data = (uint8_t *)secret;
	req.secret.len = strlen(secret);
	rc = call(a, M("UserSetSecret"), &req.base, &lode__mgmt__v1__empty__descriptor, &rep,
		  -ENOENT, "user %s", req.name);
	if (rc == 0) {
		printf("Set a new secret for %s.\n", req.name);
		if (!given)
			printf("secret: %s\n(generated; shown only this once)\n", secret);
	}
	explicit_bzero(secret, sizeof(secret));
	reply_free(rep);
	return rc;
}

static void group_line(const Lode__Mgmt__V1__Group *g, int w)
{
	char q[256];

	printf("%-*s  ", w, fmt_qualified(q, sizeof(q), g->tenant, g->name));
	for (size_t i = 0; i < g->n_members; i++)
		printf("%s%s", i ? "," : "", g->members[i]);
	printf("%s\n", g->n_members ? "" : "-");
}

static void group_print(const Lode__Mgmt__V1__Group *g)
{
	int w = (int)(strlen(g->tenant) + 1 + strlen(g->name));

	w = w > 5 ? w : 5;
	printf("%-*s  %s\n", w, "group", "members");
	group_line(g, w);
}

static int cmd_group_create(struct admin *a)
{
	Lode__Mgmt__V1__GroupCreateRequest req = LODE__MGMT__V1__GROUP_CREATE_REQUEST__INIT;
	Lode__Mgmt__V1__Group *rep = NULL;
	char buf[256];
	int rc;

	name_split(a->argv[0], buf, sizeof(buf), &req.tenant, &req.name);
	if ((rc = call(a, M("GroupCreate"), &req.base, &lode__mgmt__v1__group__descriptor, &rep,
		       -ENOENT, "group %s", a->argv[0])))
		return rc;
	group_print(rep);
	reply_free(rep);
	return 0;
}

/* add and remove: the same call shape, the group's members printed */
static int group_membership(struct admin *a, const char *method)
{
	Lode__Mgmt__V1__GroupMemberRequest req = LODE__MGMT__V1__GROUP_MEMBER_REQUEST__INIT;
	Lode__Mgmt__V1__Group *rep = NULL;
	int rc;

	req.group = a->argv[0];
	req.user = a->argv[1];
	if ((rc = call(a, method, &req.base, &lode__mgmt__v1__group__descriptor, &rep, -ENOENT,
		       "group %s, user %s", req.group, req.user)))
		return rc;
	group_print(rep);
	reply_free(rep);
	return 0;
}

static int cmd_group_add(struct admin *a)
{
	return group_membership(a, M("GroupAddUser"));
}

static int cmd_group_remove(struct admin *a)
{
	return group_membership(a, M("GroupRemoveUser"));
}

static int cmd_group_list(struct admin *a)
{
	Lode__Mgmt__V1__NameRef req = LODE__MGMT__V1__NAME_REF__INIT;
	Lode__Mgmt__V1__GroupList *rep = NULL;
	int rc, w = 5;

	req.name = a->argc ? a->argv[0] : "";
	if ((rc = call(a, M("GroupListAll"), &req.base, &lode__mgmt__v1__group_list__descriptor,
		       &rep, -ENOENT, "groups of %s", *req.name ? req.name : "your tenant")))
		return rc;
	if (a->json) {
		json_print(&rep->base);
		reply_free(rep);
		return 0;
	}
	for (size_t i = 0; i < rep->n_groups; i++) {
		int n = (int)(strlen(rep->groups[i]->tenant) + 1 + strlen(rep->groups[i]->name));

		w = n > w ? n : w;
	}
	printf("%-*s  %s\n", w, "group", "members");
	for (size_t i = 0; i < rep->n_groups; i++)
		group_line(rep->groups[i], w);
	reply_free(rep);
	return 0;
}

/* ---- ACLs ------------------------------------------------------------------------ */

static int cmd_acl_set(struct admin *a)
{
	Lode__Mgmt__V1__AclEntry req = LODE__MGMT__V1__ACL_ENTRY__INIT;
	Lode__Mgmt__V1__AclEntry *rep = NULL;
	const char *pr = a->argv[1];
	char r[8];
	int rc;

	if (rights_parse(a->argv[2], &req.rights) < 0)
		return usage(a, "RIGHTS is some of r, w, a (read, write, admin) or none, not '%s'",
			     a->argv[2]);
	if (!(strncmp(pr, "user:", 5) == 0 && pr[5]) && !(strncmp(pr, "group:", 6) == 0 && pr[6]) &&
	    !(strncmp(pr, "tenant:", 7) == 0 && pr[7]))
		return usage(a, "PRINCIPAL is user:NAME, group:NAME or tenant:NAME, not '%s'", pr);
	req.resource = a->argv[0];
	req.principal = (char *)pr;
	if ((rc = call(a, M("AclSet"), &req.base, &lode__mgmt__v1__acl_entry__descriptor, &rep,
		       -ENOENT, "acl on %s", req.resource)))
		return rc;
	if (rep->rights)
		printf("%s  %s  %s\n", rep->resource, rep->principal,
		       fmt_rights(r, sizeof(r), rep->rights));
	else
		printf("Removed %s's entry on %s.\n", req.principal, req.resource);
	reply_free(rep);
	return 0;
}

static int cmd_acl_get(struct admin *a)
{
	Lode__Mgmt__V1__NameRef req = LODE__MGMT__V1__NAME_REF__INIT;
	Lode__Mgmt__V1__AclList *rep = NULL;
	int rc, w = 9;

	req.name = a->argv[0];
	if ((rc = call(a, M("AclGet"), &req.base, &lode__mgmt__v1__acl_list__descriptor, &rep,
		       -ENOENT, "acl on %s", req.name)))
		return rc;
	if (a->json) {
		json_print(&rep->base);
		reply_free(rep);
		return 0;
	}
	for (size_t i = 0; i < rep->n_entries; i++)
		w = (int)strlen(rep->entries[i]->principal) > w ? (int)strlen(rep->entries[i]->principal)
								 : w;
	printf("%-*s  %s\n", w, "principal", "rights");
	for (size_t i = 0; i < rep->n_entries; i++) {
		char r[8];

		printf("%-*s  %s\n", w, rep->entries[i]->principal,
		       fmt_rights(r, sizeof(r), rep->entries[i]->rights));
	}
	reply_free(rep);
	return 0;
}

/* ---- system --------------------------------------------------------------------- */

static int cmd_system_status(struct admin *a)
{
	Lode__Mgmt__V1__Empty req = LODE__MGMT__V1__EMPTY__INIT;
	Lode__Mgmt__V1__SystemStatus *rep = NULL;
	char cap[32], used[32], when[64];
	const Lode__Mgmt__V1__PoolMap *map;
	int rc;

	if ((rc = call(a, M("SystemQuery"), &req.base, &lode__mgmt__v1__system_status__descriptor,
		       &rep, -ENOENT, "system status")))
		return rc;
	if (a->json) {
		json_print(&rep->base);
		reply_free(rep);
		return 0;
	}
	map = rep->map;
	printf("version      %s\nstarted      %s\nsigning key  %" PRIu32 "\ncapacity     %s\n"
	       "used         %s\npools        %" PRIu32 "\ncontainers   %" PRIu32 "\n",
	       rep->version, fmt_time(when, sizeof(when), rep->started_unix_ms), rep->signing_key_id,
	       fmt_size(cap, sizeof(cap), rep->capacity), fmt_size(used, sizeof(used), rep->used),
	       rep->pools, rep->containers);
	if (!map) {
		reply_free(rep);
		return 0;
	}
	printf("pool map     version %" PRIu32 ", %zu engine%s\n", map->version, map->n_engines,
	       map->n_engines == 1 ? "" : "s");
	for (size_t e = 0; e < map->n_engines; e++) {
		const Lode__Mgmt__V1__Engine *en = map->engines[e];

		printf("\nengine %" PRIu32 ": %s, %s\n", en->id, en->address, state_name(en->state));
		printf("  %6s  %-7s %10s %10s %6s %12s %8s  %s\n", "target", "state", "capacity",
		       "used", "load", "requests", "errors", "media");
		for (size_t t = 0; t < en->n_targets; t++) {
			const Lode__Mgmt__V1__Target *tg = en->targets[t];

			printf("  %6" PRIu32 "  %-7s %10s %10s %5.1f%% %12" PRIu64 " %8" PRIu64
			       "  %s\n",
			       tg->id, state_name(tg->state), fmt_size(cap, sizeof(cap), tg->capacity),
			       fmt_size(used, sizeof(used), tg->used), 100.0 * tg->load, tg->requests,
			       tg->errors, tg->ram ? "RAM" : "disk");
		}
	}
	reply_free(rep);
	return 0;
}

static int cmd_system_engines(struct admin *a)
{
	Lode__Mgmt__V1__Empty req = LODE__MGMT__V1__EMPTY__INIT;
	Lode__Mgmt__V1__PoolMap *rep = NULL;
	int rc;

	if ((rc = call(a, M("PoolMapGet"), &req.base, &lode__mgmt__v1__pool_map__descriptor, &rep,
		       -ENOENT, "system engines")))
		return rc;
	if (a->json) {
		json_print(&rep->base);
	} else {
		printf("pool map version %" PRIu32 ", heartbeat every %" PRIu32
		       " ms, DOWN after %" PRIu32 " ms of silence\n",
		       rep->version, rep->heartbeat_ms, rep->grace_ms);
		engines_print(rep, "");
	}
	reply_free(rep);
	return 0;
}

/* exclude, drain, reintegrate: EngineSetState with what each means. */
static int engine_state_set(struct admin *a, Lode__Mgmt__V1__State to, const char *what)
{
	Lode__Mgmt__V1__EngineStateRequest req = LODE__MGMT__V1__ENGINE_STATE_REQUEST__INIT;
	Lode__Mgmt__V1__Engine *rep = NULL;
	const char *arg = a->argv[0];
	char *end;
	unsigned long id;
	int rc;

	errno = 0;
	id = strtoul(arg, &end, 10);
	if (!*arg || *end || arg[0] == '-' || arg[0] == '+' || errno || id > UINT32_MAX)
		return usage(a, "ID is an engine's id, a number like 1 (lode system engines lists "
				"them), not '%s'",
			     arg);
	req.engine_id = (uint32_t)id;
	req.state = to;
	if ((rc = call(a, M("EngineSetState"), &req.base, &lode__mgmt__v1__engine__descriptor,
		       &rep, -ENOENT, "%s engine %lu", what, id)))
		return rc;
	if (to == LODE__MGMT__V1__STATE__STATE_UP && rep->state == LODE__MGMT__V1__STATE__STATE_OUT)
		printf("engine %" PRIu32 " was OUT: it joins again as a new engine (a new id, "
		       "NEW), is emptied, and is filled with what the layout places on it; "
		       "`lode system engines` and `lode pool query` show it\n",
		       rep->id);
	else
		printf("engine %" PRIu32 " (%s) is %s\n", rep->id, rep->address,
		       state_name(rep->state));
	reply_free(rep);
	return 0;
}

static int cmd_system_exclude(struct admin *a)
{
	return engine_state_set(a, LODE__MGMT__V1__STATE__STATE_DOWN, "exclude");
}

static int cmd_system_drain(struct admin *a)
{
	return engine_state_set(a, LODE__MGMT__V1__STATE__STATE_DRAIN, "drain");
}

static int cmd_system_reintegrate(struct admin *a)
{
	return engine_state_set(a, LODE__MGMT__V1__STATE__STATE_UP, "reintegrate");
}

static int cmd_key_rotate(struct admin *a)
{
	Lode__Mgmt__V1__Empty req = LODE__MGMT__V1__EMPTY__INIT;
	Lode__Mgmt__V1__RotateKeyReply *rep = NULL;
	int rc;

	if ((rc = call(a, M("RotateKey"), &req.base, &lode__mgmt__v1__rotate_key_reply__descriptor,
		       &rep, -ENOENT, "key rotate")))
		return rc;
	printf("Signing key %" PRIu32 " signs from now on; the older keys verify what they "
	       "signed until it expires.\n",
	       rep->key_id);
	reply_free(rep);
	return 0;
}

/*
 * `keygen`: the tenant key that wraps encrypted containers' data keys. It
 * stays on this side (keys.c): the service only ever sees keys wrapped by it.
 */
static int cmd_keygen(struct admin *a)
{
	char path[4096];
	int rc;

	tenant_key_default_path(path, sizeof(path));
	rc = tenant_key_create(path, opt(a, "force") != NULL);
	if (rc == -EEXIST) {
		fprintf(stderr, "lode: %s exists; --force replaces it (containers encrypted "
				"under the old key then no longer open)\n",
			path);
		return 1;
	}
	if (rc < 0)
		return fail(rc, "write %s", path);
	printf("%s\n", path);
	return 0;
}

/* ---- the table ------------------------------------------------------------------- */

static const struct verb verbs[] = {
	{"login", "user= secret-file= secret-stdin mgmt= pool= tls-ca=", 0, cmd_login},
	{"logout", "", 0, cmd_logout},
	{"whoami", "json", 0, cmd_whoami},
	{"pool create", "size= targets=", V_MGMT, cmd_pool_create},
	{"pool list", "json", V_MGMT, cmd_pool_list},
	{"pool query", "json watch", V_MGMT, cmd_pool_query},
	{"pool destroy", "force", V_MGMT, cmd_pool_destroy},
	{"cont create", "class= chunk-size= checksum= encrypt crypt-block=", 0, cmd_cont_create},
	{"cont query", "json", V_MGMT, cmd_cont_query},
	{"keygen", "force", 0, cmd_keygen},
	{"tenant create", "", V_MGMT, cmd_tenant_create},
	{"tenant list", "json", V_MGMT, cmd_tenant_list},
	{"tenant destroy", "", V_MGMT, cmd_tenant_destroy},
	{"user create", "admin node secret-file= secret-stdin", V_MGMT, cmd_user_create},
	{"user list", "json", V_MGMT, cmd_user_list},
	{"user revoke", "", V_MGMT, cmd_user_revoke},
	{"user restore", "", V_MGMT, cmd_user_restore},
	{"user passwd", "secret-file= secret-stdin", V_MGMT, cmd_user_passwd},
	{"group create", "", V_MGMT, cmd_group_create},
	{"group add", "", V_MGMT, cmd_group_add},
	{"group remove", "", V_MGMT, cmd_group_remove},
	{"group list", "json", V_MGMT, cmd_group_list},
	{"acl set", "", V_MGMT, cmd_acl_set},
	{"acl get", "json", V_MGMT, cmd_acl_get},
	{"system status", "json", V_MGMT, cmd_system_status},
	{"system engines", "json", V_MGMT, cmd_system_engines},
	{"system exclude", "", V_MGMT, cmd_system_exclude},
	{"system drain", "", V_MGMT, cmd_system_drain},
	{"system reintegrate", "", V_MGMT, cmd_system_reintegrate},
	{"key rotate", "", V_MGMT, cmd_key_rotate},
};

int admin_main(const struct admin_cmd *cmd, const char *addr, const struct lode_conn_opts *opts,
	       int argc, char **argv)
{
	struct admin a = {.cmd = cmd, .addr = addr};
	int rc;

	if (opts)
		a.opts = *opts;
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]) && !a.verb; i++)
		if (!strcmp(verbs[i].name, cmd->name))
			a.verb = &verbs[i];
	if (!a.verb)
		return fail(-ENOSYS, "%s", cmd->name); /* lode.c names a command this file lacks */
	if ((rc = args_parse(&a, argc, argv)) != 0)
		return rc;
	if (a.verb->flags & V_MGMT) {
		if ((rc = conn_mgmt_connect(a.addr, &a.opts, &a.c)) < 0)
			return fail(rc, "connect to %s%s%s%s", addr_name(&a),
				    lode_last_error()[0] ? " (" : "", lode_last_error(),
				    lode_last_error()[0] ? ")" : "");
	}
	rc = a.verb->run(&a);
	if (a.c)
		lode_disconnect(a.c);
	return rc;
}
