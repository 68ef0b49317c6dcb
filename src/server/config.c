/*
 * loded's configuration: defaults, a YAML file, command-line flags, the
 * consistency check and the --help text.
 *
 * One table of settings (settings[] below) drives the file, the flags, the
 * check and the help, so a setting is declared once and they can never
 * disagree about its name, type or rule. Each entry names its YAML key, its
 * flag, where it lives in struct srv_config, how its text is parsed, and an
 * optional rule (a range, a known name, an address shape).
 *
 * Values are parsed strictly, because a typo in a daemon's configuration
 * should stop it at start rather than surface as odd behaviour later:
 * numbers are plain decimal digits checked against their field's width
 * (sizes may end in K, M, G or T, powers of 1024), so "-1" cannot wrap into
 * a huge size; booleans are true/false, yes/no or 1/0; strings must fit
 * their field. A setting's rule runs as soon as its value is set, so a bad
 * file is reported with its line, and again in srv_config_check for a
 * structure filled in by code.
 *
 * srv_config_load and srv_config_parse_args work on a copy and store it
 * only on success: a failed call leaves the caller's structure as it was.
 */
#include "server/config.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#define SRV_PORT_DEFAULT 7420
#define SRV_INLINE_MAX_LIMIT (1u << 20)

/* Room for a message about one value, before its file:line or flag prefix. */
#define MSG_MAX 512

/* Numbers are stored by their field's width; these are the widths in use. */
_Static_assert(sizeof(unsigned) == sizeof(uint32_t), "unsigned settings are stored as 32 bits");

enum set_kind {
	SET_STR,  /* copied, must fit the field */
	SET_BOOL, /* true/false, yes/no, 1/0 */
	SET_NUM,  /* unsigned decimal, 32 or 64 bits wide */
	SET_SIZE, /* SET_NUM with an optional K/M/G/T suffix */
};

/* A rule for one setting's value: 0, or -EINVAL with a message in msg. */
typedef int (*set_rule_fn)(const struct srv_config *c, char *msg, size_t msglen);

struct setting {
	const char *key;  /* YAML key */
	const char *flag; /* long flag, without "--" */
	const char *arg;  /* the flag's argument as --help shows it */
	enum set_kind kind;
	size_t off;       /* offset of the field in struct srv_config */
	size_t size;      /* size of the field */
	set_rule_fn rule; /* NULL: any value that parses is fine */
	const char *help; /* one line for --help */
};

static int rule_listen(const struct srv_config *c, char *msg, size_t msglen);
static int rule_targets(const struct srv_config *c, char *msg, size_t msglen);
static int rule_path(const struct srv_config *c, char *msg, size_t msglen);
static int rule_transport(const struct srv_config *c, char *msg, size_t msglen);
static int rule_bulk(const struct srv_config *c, char *msg, size_t msglen);
static int rule_inline_max(const struct srv_config *c, char *msg, size_t msglen);
static int rule_tls(const struct srv_config *c, char *msg, size_t msglen);
static int rule_cap_lifetime(const struct srv_config *c, char *msg, size_t msglen);
static int rule_join(const struct srv_config *c, char *msg, size_t msglen);
static int rule_heartbeat(const struct srv_config *c, char *msg, size_t msglen);
static int rule_replicas(const struct srv_config *c, char *msg, size_t msglen);
static int rule_election(const struct srv_config *c, char *msg, size_t msglen);

#define FIELD(name) offsetof(struct srv_config, name), sizeof(((struct srv_config *)0)->name)

static const struct setting settings[] = {
	{"listen", "listen", "HOST[:PORT]", SET_STR, FIELD(listen), rule_listen,
	 "bootstrap socket; port 7420 if absent, [V6]:PORT for IPv6"},
	{"targets", "targets", "N", SET_NUM, FIELD(targets), rule_targets,
	 "number of storage targets, 1..64"},
	{"path", "path", "DIR", SET_STR, FIELD(path), rule_path,
	 "storage directory; target i lives in DIR/tgt<i>"},
	{"ram", "ram", "[=BOOL]", SET_BOOL, FIELD(ram), NULL,
	 "RAM mode (path on tmpfs); --ram alone is true"},
	{"capacity", "capacity", "SIZE", SET_SIZE, FIELD(capacity), NULL,
	 "extent file size per target; 0: the engine's 1G"},
	{"transport", "transport", "NAME", SET_STR, FIELD(transport), rule_transport,
	 "UCX transport: auto, tcp, shm or rdma"},
	{"bulk", "bulk", "NAME", SET_STR, FIELD(bulk), rule_bulk,
	 "how large values move: auto, rma or am"},
	{"inline_max", "inline-max", "SIZE", SET_SIZE, FIELD(inline_max), rule_inline_max,
	 "values up to SIZE travel in messages; at most 1M"},
	{"poll_us", "poll-us", "USEC", SET_NUM, FIELD(poll_us), NULL,
	 "busy-poll this long after a request before sleeping"},
	{"pidfile", "pidfile", "FILE", SET_STR, FIELD(pidfile), NULL,
	 "write loded's pid here once serving"},
	{"addrfile", "addrfile", "FILE", SET_STR, FIELD(addrfile), NULL,
	 "write the listen address here once serving"},
	{"mgmt_listen", "mgmt-listen", "HOST:PORT", SET_STR, FIELD(mgmt_listen), NULL,
	 "management service (gRPC); default: listen's host, any free port at the first start, the same one after (MGMT_STATE/mgmt.port)"},
	{"mgmt_state", "mgmt-state", "DIR", SET_STR, FIELD(mgmt_state), NULL,
	 "management state directory; default PATH/mgmt"},
	{"admin_cred", "admin-cred", "FILE", SET_STR, FIELD(admin_cred), NULL,
	 "first start writes the admin's credentials here (0600)"},
	{"tls_cert", "tls-cert", "FILE", SET_STR, FIELD(tls_cert), rule_tls,
	 "PEM certificate: the management service speaks TLS only"},
	{"tls_key", "tls-key", "FILE", SET_STR, FIELD(tls_key), rule_tls,
	 "PEM private key of tls_cert"},
	{"cap_lifetime", "cap-lifetime", "SEC", SET_NUM, FIELD(cap_lifetime), rule_cap_lifetime,
	 "capabilities expire after SEC seconds (10..86400)"},
	{"key_rotate", "key-rotate", "SEC", SET_NUM, FIELD(key_rotate), NULL,
	 "rotate the capability signing key every SEC seconds; 0: never"},
	{"mgmt_addrfile", "mgmt-addrfile", "FILE", SET_STR, FIELD(mgmt_addrfile), NULL,
	 "write the management address here once serving"},
	{"heartbeat_ms", "heartbeat-ms", "MS", SET_NUM, FIELD(heartbeat_ms), NULL,
	 "joined engines send a heartbeat every MS (50..10000)"},
	{"grace_ms", "grace-ms", "MS", SET_NUM, FIELD(grace_ms), NULL,
	 "an engine silent for MS is marked DOWN (> 2 heartbeats)"},
	{"join", "join", "HOST:PORT", SET_STR, FIELD(join), NULL,
	 "join the system whose management service is at HOST:PORT"},
	{"join_cred", "join-cred", "FILE", SET_STR, FIELD(join_cred), NULL,
	 "with join: credentials of a system admin or node user"},
	{"join_ca", "join-ca", "FILE", SET_STR, FIELD(join_ca), NULL,
	 "with join: the CA of the service's TLS certificate"},
	{"mgmt_replicas", "mgmt-replicas", "LIST", SET_STR, FIELD(mgmt_replicas), rule_replicas,
	 "replicated service: ID=RAFT_IP:PORT@GRPC_HOST:PORT,... (1, 3 or 5)"},
	{"mgmt_replica_id", "mgmt-replica-id", "ID", SET_NUM, FIELD(mgmt_replica_id), NULL,
	 "with mgmt_replicas: the replica this loded hosts"},
	{"mgmt_election_ms", "mgmt-election-ms", "MS", SET_NUM, FIELD(mgmt_election_ms),
	 rule_election, "with mgmt_replicas: raft election timeout (50..60000)"},
};

#define NSETTINGS (sizeof(settings) / sizeof(settings[0]))

static const char *const transport_names[] = {"auto", "tcp", "shm", "rdma", NULL};
static const char *const bulk_names[] = {"auto", "rma", "am", NULL};

/* ---- messages ------------------------------------------------------------ */

/* vsnprintf into a caller's buffer, which may be NULL or empty. */
__attribute__((format(printf, 3, 0))) static void msg_vset(char *buf, size_t len, const char *fmt,
							    va_list ap)
{
	if (buf && len)
		vsnprintf(buf, len, fmt, ap);
}

__attribute__((format(printf, 3, 4))) static void msg_set(char *buf, size_t len, const char *fmt,
							   ...)
{
	va_list ap;

	va_start(ap, fmt);
	msg_vset(buf, len, fmt, ap);
	va_end(ap);
}

/* ---- parsing one value --------------------------------------------------- */

/*
 * A decimal number no larger than max, with a K/M/G/T suffix (powers of
 * 1024) when suffix is set. No sign, spaces, hex or octal: strtoull would
 * take " -1" as 2^64-1, which is not what anyone writing it means.
 */
static int parse_num(const char *s, bool suffix, uint64_t max, uint64_t *out, char *msg,
		     size_t msglen)
{
	const char *what = suffix ? "a size (digits with an optional K, M, G or T suffix)"
				  : "a whole number";
	const char *p = s;
	uint64_t v = 0;
	unsigned shift = 0;

	if (!*s) {
		msg_set(msg, msglen, "no value given; expected %s", what);
		return -EINVAL;
	}
	if (!isdigit((unsigned char)*p)) {
		msg_set(msg, msglen, "'%s' is not %s", s, what);
		return -EINVAL;
	}
	for (; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');

		if (v > (UINT64_MAX - d) / 10)
			goto too_large;
		v = v * 10 + d;
	}
	if (*p) {
		switch (suffix ? toupper((unsigned char)*p) : 0) {
		case 'K':
			shift = 10;
			break;
		case 'M':
			shift = 20;
			break;
		case 'G':
			shift = 30;
			break;
		case 'T':
			shift = 40;
			break;
		default:
			shift = 0;
			break;
		}
		if (!shift || p[1]) {
			if (suffix)
				msg_set(msg, msglen,
					"'%s' has a bad size suffix; use K, M, G or T (powers of 1024)",
					s);
			else
				msg_set(msg, msglen, "'%s' is not %s", s, what);
			return -EINVAL;
		}
		if (v > (UINT64_MAX >> shift))
			goto too_large;
		v <<= shift;
	}
	if (v > max)
		goto too_large;
	*out = v;
	return 0;

too_large:
	msg_set(msg, msglen, "'%s' is out of range (at most %" PRIu64 ")", s, max);
	return -EINVAL;
}

static int parse_bool(const char *s, bool *out, char *msg, size_t msglen)
{
	static const char *const yes[] = {"true", "yes", "1"};
	static const char *const no[] = {"false", "no", "0"};

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = true;
			return 0;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = false;
			return 0;
		}
	}
	if (!*s)
		msg_set(msg, msglen, "no value given; expected true/false, yes/no or 1/0");
	else
		msg_set(msg, msglen, "'%s' is not a boolean; use true/false, yes/no or 1/0", s);
	return -EINVAL;
}

/*
 * Parse text into s's field of c, then apply s's rule. On failure the field
 * may have changed; callers work on a copy they throw away.
 */
static int set_value(struct srv_config *c, const struct setting *s, const char *text, char *msg,
		     size_t msglen)
{
	char *field = (char *)c + s->off;
	uint64_t v;
	bool b;
	int rc;

	switch (s->kind) {
	case SET_STR: {
		size_t n = strlen(text);

		if (n >= s->size) {
			msg_set(msg, msglen, "too long (%zu bytes, at most %zu)", n, s->size - 1);
			return -EINVAL;
		}
		memcpy(field, text, n + 1);
		break;
	}
	case SET_BOOL:
		rc = parse_bool(text, &b, msg, msglen);
		if (rc)
			return rc;
		memcpy(field, &b, sizeof(b));
		break;
	case SET_NUM:
	case SET_SIZE:
		rc = parse_num(text, s->kind == SET_SIZE, s->size == 4 ? UINT32_MAX : UINT64_MAX, &v,
			       msg, msglen);
		if (rc)
			return rc;
		if (s->size == 4) {
			uint32_t v32 = (uint32_t)v;

			memcpy(field, &v32, sizeof(v32));
		} else {
			memcpy(field, &v, sizeof(v));
		}
		break;
	}
	return s->rule ? s->rule(c, msg, msglen) : 0;
}

/* The current value of s in c as text, for --help's defaults. */
static void format_value(const struct srv_config *c, const struct setting *s, char *buf,
			 size_t len)
{
	const char *field = (const char *)c + s->off;
	uint64_t v = 0;
	bool b;

	switch (s->kind) {
	case SET_STR:
		snprintf(buf, len, "%s", *field ? field : "none");
		break;
	case SET_BOOL:
		memcpy(&b, field, sizeof(b));
		snprintf(buf, len, "%s", b ? "true" : "false");
		break;
	case SET_NUM:
	case SET_SIZE:
		if (s->size == 4) {
			uint32_t v32;

			memcpy(&v32, field, sizeof(v32));
			v = v32;
		} else {
			memcpy(&v, field, sizeof(v));
		}
		snprintf(buf, len, "%" PRIu64, v);
		break;
	}
}

/* ---- rules --------------------------------------------------------------- */

static bool is_one_of(const char *s, const char *const *names)
{
	for (; *names; names++)
		if (strcmp(s, *names) == 0)
			return true;
	return false;
}

static int rule_choice(const char *val, const char *const *names, char *msg, size_t msglen)
{
	if (is_one_of(val, names))
		return 0;
	if (!msg || !msglen)
		return -EINVAL;
	msg_set(msg, msglen, "'%s' is not one of", val);
	for (; *names; names++) {
		size_t n = strlen(msg);

		if (n + 1 < msglen)
			snprintf(msg + n, msglen - n, " %s%s", *names, names[1] ? "," : "");
	}
	return -EINVAL;
}

static int rule_transport(const struct srv_config *c, char *msg, size_t msglen)
{
	return rule_choice(c->transport, transport_names, msg, msglen);
}

static int rule_bulk(const struct srv_config *c, char *msg, size_t msglen)
{
	return rule_choice(c->bulk, bulk_names, msg, msglen);
}

static int rule_targets(const struct srv_config *c, char *msg, size_t msglen)
{
	if (c->targets >= 1 && c->targets <= SRV_TARGETS_MAX)
		return 0;
	msg_set(msg, msglen, "%u is out of range (1..%u)", c->targets, SRV_TARGETS_MAX);
	return -EINVAL;
}

static int rule_path(const struct srv_config *c, char *msg, size_t msglen)
{
	if (c->path[0])
		return 0;
	msg_set(msg, msglen, "must not be empty");
	return -EINVAL;
}

static int rule_inline_max(const struct srv_config *c, char *msg, size_t msglen)
{
	if (c->inline_max <= SRV_INLINE_MAX_LIMIT)
		return 0;
	msg_set(msg, msglen, "%" PRIu32 " is too large (at most %u, 1M)", c->inline_max,
		SRV_INLINE_MAX_LIMIT);
	return -EINVAL;
}

/* TLS files must be readable now: a daemon that cannot load them later
 * would start without the security it was told to have. */
static int rule_tls(const struct srv_config *c, char *msg, size_t msglen)
{
	const char *files[2] = {c->tls_cert, c->tls_key};

	for (unsigned i = 0; i < 2; i++) {
		if (files[i][0] && access(files[i], R_OK) != 0) {
			msg_set(msg, msglen, "%s: %s", files[i], strerror(errno));
			return -EINVAL;
		}
	}
	return 0;
}

static int rule_cap_lifetime(const struct srv_config *c, char *msg, size_t msglen)
{
	if (c->cap_lifetime >= 10 && c->cap_lifetime <= 86400)
		return 0;
	msg_set(msg, msglen, "%u is out of range (10..86400 seconds)", c->cap_lifetime);
	return -EINVAL;
}

static int rule_heartbeat(const struct srv_config *c, char *msg, size_t msglen)
{
	if (c->heartbeat_ms < 50 || c->heartbeat_ms > 10000) {
		msg_set(msg, msglen, "heartbeat_ms %u is out of range (50..10000)", c->heartbeat_ms);
		return -EINVAL;
	}
	if (c->grace_ms <= 2 * c->heartbeat_ms || c->grace_ms > 600000) {
		msg_set(msg, msglen,
			"grace_ms %u must be more than two heartbeats (%u ms) and at most 600000",
			c->grace_ms, 2 * c->heartbeat_ms);
		return -EINVAL;
	}
	return 0;
}

static int rule_join(const struct srv_config *c, char *msg, size_t msglen)
{
	if (!c->join[0] && !c->join_cred[0])
		return 0;
	if (!c->join[0]) {
		msg_set(msg, msglen, "join_cred is only for an engine that joins (set join too)");
		return -EINVAL;
	}
	if (!c->join_cred[0]) {
		msg_set(msg, msglen, "join needs join_cred: the credentials the engine logs in with");
		return -EINVAL;
	}
	if (!strrchr(c->join, ':')) {
		msg_set(msg, msglen, "join: \"%s\" is not HOST:PORT", c->join);
		return -EINVAL;
	}
	return 0;
}

/* "A.B.C.D:PORT", port 1..65535: what raft's transport takes. */
static bool ipv4_port_valid(const char *a)
{
	unsigned b[4], port;
	char tail;

	return sscanf(a, "%3u.%3u.%3u.%3u:%5u%c", &b[0], &b[1], &b[2], &b[3], &port, &tail) == 5 &&
	       b[0] < 256 && b[1] < 256 && b[2] < 256 && b[3] < 256 && port >= 1 &&
	       port <= 65535 && strspn(a, "0123456789.:") == strlen(a);
}

/* "HOST:PORT" (or "[V6]:PORT"), port 1..65535. */
static bool host_port_valid(const char *a)
{
	const char *colon = strrchr(a, ':');
	char *end;
	unsigned long port;

	if (!colon || colon == a || (a[0] == '[' && colon[-1] != ']'))
		return false;
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	return colon[1] && !*end && !errno && port >= 1 && port <= 65535;
}

int srv_replicas_parse(const char *text, struct srv_replica *out, char *msg, size_t msglen)
{
	char buf[sizeof(((struct srv_config *)0)->mgmt_replicas)], *save = NULL, *e;
	unsigned n = 0;

	if (strlen(text) >= sizeof(buf)) {
		msg_set(msg, msglen, "too long");
		return -EINVAL;
	}
	snprintf(buf, sizeof(buf), "%s", text);
	for (e = strtok_r(buf, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
		char *eq, *at, *end;
		unsigned long long id;

		e += strspn(e, " \t");
		e[strcspn(e, " \t")] = '\0';
		eq = strchr(e, '=');
		at = eq ? strchr(eq, '@') : NULL;
		if (!eq || !at) {
			msg_set(msg, msglen, "\"%s\" is not ID=RAFT_IP:PORT@GRPC_HOST:PORT", e);
			return -EINVAL;
		}
		*eq = *at = '\0';
		errno = 0;
		id = strtoull(e, &end, 10);
		if (!e[0] || *end || errno || id == 0 || id > UINT32_MAX) {
			msg_set(msg, msglen, "replica id \"%s\" is not a number 1..4294967295", e);
			return -EINVAL;
		}
		if (!ipv4_port_valid(eq + 1) || strlen(eq + 1) >= sizeof(out->raft)) {
			msg_set(msg, msglen, "replica %llu: raft address \"%s\" is not A.B.C.D:PORT",
				id, eq + 1);
			return -EINVAL;
		}
		if (!host_port_valid(at + 1) || strlen(at + 1) >= sizeof(out->grpc)) {
			msg_set(msg, msglen, "replica %llu: gRPC address \"%s\" is not HOST:PORT", id,
				at + 1);
			return -EINVAL;
		}
		if (n == SRV_REPLICAS_MAX) {
			msg_set(msg, msglen, "more than %d replicas", SRV_REPLICAS_MAX);
			return -EINVAL;
		}
		for (unsigned i = 0; i < n; i++) {
			if (out[i].id == id || strcmp(out[i].raft, eq + 1) == 0 ||
			    strcmp(out[i].grpc, at + 1) == 0) {
				msg_set(msg, msglen, "replica %llu repeats replica %llu's %s", id,
					(unsigned long long)out[i].id,
					out[i].id == id ? "id" : strcmp(out[i].raft, eq + 1) == 0
								? "raft address"
								: "gRPC address");
				return -EINVAL;
			}
		}
		out[n].id = id;
		snprintf(out[n].raft, sizeof(out[n].raft), "%s", eq + 1);
		snprintf(out[n].grpc, sizeof(out[n].grpc), "%s", at + 1);
		n++;
	}
	if (n != 1 && n != 3 && n != 5) {
		msg_set(msg, msglen, "%u replicas: a group has 1, 3 or 5", n);
		return -EINVAL;
	}
	return (int)n;
}

static int rule_replicas(const struct srv_config *c, char *msg, size_t msglen)
{
	struct srv_replica r[SRV_REPLICAS_MAX];

	if (!c->mgmt_replicas[0])
		return 0;
	return srv_replicas_parse(c->mgmt_replicas, r, msg, msglen) < 0 ? -EINVAL : 0;
}

static int rule_election(const struct srv_config *c, char *msg, size_t msglen)
{
	if (c->mgmt_election_ms >= 50 && c->mgmt_election_ms <= 60000)
		return 0;
	msg_set(msg, msglen, "%u is out of range (50..60000 ms)", c->mgmt_election_ms);
	return -EINVAL;
}

/* The replica settings together: an id among the replicas, no join beside them. */
static int rule_replica_id(const struct srv_config *c, char *msg, size_t msglen)
{
	struct srv_replica r[SRV_REPLICAS_MAX];
	int n;

	if (!c->mgmt_replicas[0]) {
		if (!c->mgmt_replica_id)
			return 0;
		msg_set(msg, msglen, "mgmt_replica_id is only for a replica (set mgmt_replicas too)");
		return -EINVAL;
	}
	if (c->join[0]) {
		msg_set(msg, msglen, "mgmt_replicas and join exclude each other: a replica's loded "
				     "joins its own service");
		return -EINVAL;
	}
	n = srv_replicas_parse(c->mgmt_replicas, r, msg, msglen);
	if (n < 0)
		return -EINVAL;
	for (int i = 0; i < n; i++)
		if (r[i].id == c->mgmt_replica_id)
			return 0;
	msg_set(msg, msglen, "mgmt_replica_id %u is not one of mgmt_replicas' ids",
		c->mgmt_replica_id);
	return -EINVAL;
}

/*
 * The shapes net_addr_parse accepts, minus a bare IPv6 address: in
 * "fe80::1:7420" nobody can tell whether 7420 is a port, so IPv6 must be
 * bracketed. Only the shape is checked; resolving the host is loded's job
 * at start, where the error can say what the resolver said.
 */
static int rule_listen(const struct srv_config *c, char *msg, size_t msglen)
{
	const char *s = c->listen, *host = s, *port = NULL, *p;
	size_t hostlen;
	bool v6 = s[0] == '[';
	uint64_t v;

	if (v6) {
		const char *end = strchr(s, ']');

		if (!end || (end[1] && end[1] != ':')) {
			msg_set(msg, msglen, "'%s' is not [ADDR] or [ADDR]:PORT", s);
			return -EINVAL;
		}
		host = s + 1;
		hostlen = (size_t)(end - host);
		if (end[1] == ':')
			port = end + 2;
	} else {
		const char *colon = strchr(s, ':');

		if (colon && strchr(colon + 1, ':')) {
			msg_set(msg, msglen, "'%s': an IPv6 address needs brackets, as [ADDR]:PORT",
				s);
			return -EINVAL;
		}
		hostlen = colon ? (size_t)(colon - s) : strlen(s);
		if (colon)
			port = colon + 1;
	}
	if (hostlen == 0) {
		msg_set(msg, msglen, "'%s' has no host; use HOST, HOST:PORT or [V6]:PORT", s);
		return -EINVAL;
	}
	for (p = host; p < host + hostlen; p++) {
		unsigned char ch = (unsigned char)*p;
		bool ok = isalnum(ch) || ch == '-' || ch == '.' || ch == '_' ||
			  (v6 && (ch == ':' || ch == '%'));

		if (!ok) {
			msg_set(msg, msglen, "'%s': the host has a bad character '%c'", s,
				isprint(ch) ? ch : '?');
			return -EINVAL;
		}
	}
	if (v6 && !memchr(host, ':', hostlen)) {
		msg_set(msg, msglen, "'%s': brackets are for IPv6 addresses only", s);
		return -EINVAL;
	}
	if (port && parse_num(port, false, 65535, &v, NULL, 0) != 0) {
		msg_set(msg, msglen, "'%s': the port must be a number 0..65535", s);
		return -EINVAL;
	}
	return 0;
}

/* ---- defaults and check -------------------------------------------------- */

void srv_config_defaults(struct srv_config *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->listen, sizeof(c->listen), "127.0.0.1:%u", SRV_PORT_DEFAULT);
	c->targets = 1;
	snprintf(c->path, sizeof(c->path), "./lode-data");
	c->ram = false;
	c->capacity = 0;
	snprintf(c->transport, sizeof(c->transport), "auto");
	snprintf(c->bulk, sizeof(c->bulk), "auto");
	c->inline_max = 8192;
	c->poll_us = 1000;
	c->foreground = true;
	c->cap_lifetime = 600;
	c->key_rotate = 86400;
	c->heartbeat_ms = 500;
	c->grace_ms = 3000;
	c->mgmt_election_ms = 1000;
}

int srv_config_check(const struct srv_config *c, char *err, size_t errlen)
{
	char msg[MSG_MAX];

	if (!c) {
		msg_set(err, errlen, "no configuration given");
		return -EINVAL;
	}
	for (size_t i = 0; i < NSETTINGS; i++) {
		const struct setting *s = &settings[i];

		/* A string field filled in by code might lack its terminator. */
		if (s->kind == SET_STR && !memchr((const char *)c + s->off, 0, s->size)) {
			msg_set(err, errlen, "%s: not NUL-terminated", s->key);
			return -EINVAL;
		}
		if (s->rule && s->rule(c, msg, sizeof(msg)) != 0) {
			msg_set(err, errlen, "%s: %s", s->key, msg);
			return -EINVAL;
		}
	}
	if (!c->tls_cert[0] != !c->tls_key[0]) {
		msg_set(err, errlen, "tls_cert and tls_key go together: set both or neither");
		return -EINVAL;
	}
	/* Settings that depend on each other, checked once all are read. */
	if (rule_heartbeat(c, err, errlen) != 0 || rule_join(c, err, errlen) != 0 ||
	    rule_replica_id(c, err, errlen) != 0)
		return -EINVAL;
	return 0;
}

/* ---- the YAML file ------------------------------------------------------- */

struct yload {
	yaml_parser_t parser;
	const char *file;
	char *err;
	size_t errlen;
	unsigned long seen[NSETTINGS]; /* line each setting was set on, 0: not yet */
};

/* Lines as editors count them; libyaml counts from 0. */
static unsigned long mark_line(const yaml_mark_t *m)
{
	return (unsigned long)m->line + 1;
}

/* Turn libyaml's parser error into ours. */
static int yaml_fail(struct yload *ld)
{
	yaml_parser_t *p = &ld->parser;

	switch (p->error) {
	case YAML_MEMORY_ERROR:
		msg_set(ld->err, ld->errlen, "%s: out of memory reading YAML", ld->file);
		return -ENOMEM;
	case YAML_READER_ERROR:
		msg_set(ld->err, ld->errlen, "%s: byte %zu: bad YAML input: %s", ld->file,
			p->problem_offset, p->problem ? p->problem : "unreadable");
		return -EINVAL;
	default:
		if (p->context)
			msg_set(ld->err, ld->errlen, "%s:%lu: bad YAML: %s (%s on line %lu)",
				ld->file, mark_line(&p->problem_mark),
				p->problem ? p->problem : "syntax error", p->context,
				mark_line(&p->context_mark));
		else
			msg_set(ld->err, ld->errlen, "%s:%lu: bad YAML: %s", ld->file,
				mark_line(&p->problem_mark),
				p->problem ? p->problem : "syntax error");
		return -EINVAL;
	}
}

static int yaml_next(struct yload *ld, yaml_event_t *ev)
{
	if (!yaml_parser_parse(&ld->parser, ev))
		return yaml_fail(ld);
	return 0;
}

/* A plain scalar YAML reads as null ("key:" or "key: ~"): an empty value. */
static bool scalar_is_null(const yaml_event_t *ev)
{
	const char *v = (const char *)ev->data.scalar.value;

	if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") ||
	       !strcmp(v, "NULL");
}

static const struct setting *setting_by_key(const char *key, size_t len)
{
	for (size_t i = 0; i < NSETTINGS; i++)
		if (strlen(settings[i].key) == len && memcmp(settings[i].key, key, len) == 0)
			return &settings[i];
	return NULL;
}

static int unknown_key(struct yload *ld, const char *key, size_t len, unsigned long line)
{
	char hint[256] = "";
	char alt[64];

	/* "inline-max" is the flag's spelling; the file's is "inline_max". */
	if (len < sizeof(alt)) {
		for (size_t i = 0; i < len; i++)
			alt[i] = key[i] == '-' ? '_' : key[i];
		if (setting_by_key(alt, len))
			snprintf(hint, sizeof(hint), " (did you mean '%.*s'?)", (int)len, alt);
	}
	if (!hint[0]) {
		size_t n = (size_t)snprintf(hint, sizeof(hint), " (known keys:");

		for (size_t i = 0; i < NSETTINGS && n < sizeof(hint); i++)
			n += (size_t)snprintf(hint + n, sizeof(hint) - n, " %s%s", settings[i].key,
					      i + 1 < NSETTINGS ? "," : ")");
	}
	msg_set(ld->err, ld->errlen, "%s:%lu: unknown key '%.*s%s'%s", ld->file, line,
		len > 64 ? 64 : (int)len, key, len > 64 ? "..." : "", hint);
	return -EINVAL;
}

/* One "key: value" pair: the key's event is k, the value's is read here. */
static int yaml_pair(struct yload *ld, struct srv_config *c, const yaml_event_t *k)
{
	const char *key = (const char *)k->data.scalar.value;
	size_t keylen = k->data.scalar.length;
	unsigned long line = mark_line(&k->start_mark);
	const struct setting *s = setting_by_key(key, keylen);
	char msg[MSG_MAX];
	yaml_event_t v;
	size_t idx;
	int rc;

	if (!s)
		return unknown_key(ld, key, keylen, line);
	idx = (size_t)(s - settings);
	if (ld->seen[idx]) {
		msg_set(ld->err, ld->errlen, "%s:%lu: %s: set twice (first on line %lu)", ld->file,
			line, s->key, ld->seen[idx]);
		return -EINVAL;
	}
	ld->seen[idx] = line;

	rc = yaml_next(ld, &v);
	if (rc)
		return rc;
	line = mark_line(&v.start_mark);
	if (v.type == YAML_ALIAS_EVENT) {
		msg_set(ld->err, ld->errlen, "%s:%lu: %s: aliases (*name) are not supported",
			ld->file, line, s->key);
		rc = -EINVAL;
	} else if (v.type != YAML_SCALAR_EVENT) {
		msg_set(ld->err, ld->errlen, "%s:%lu: %s: expected a single value, not a %s",
			ld->file, line, s->key,
			v.type == YAML_SEQUENCE_START_EVENT ? "list" : "mapping");
		rc = -EINVAL;
	} else if (strlen((const char *)v.data.scalar.value) != v.data.scalar.length) {
		msg_set(ld->err, ld->errlen, "%s:%lu: %s: the value contains a NUL byte", ld->file,
			line, s->key);
		rc = -EINVAL;
	} else {
		const char *text = scalar_is_null(&v) ? "" : (const char *)v.data.scalar.value;

		rc = set_value(c, s, text, msg, sizeof(msg));
		if (rc)
			msg_set(ld->err, ld->errlen, "%s:%lu: %s: %s", ld->file, line, s->key,
				msg);
	}
	yaml_event_delete(&v);
	return rc;
}

/* The settings mapping, after its MAPPING-START event. */
static int yaml_mapping(struct yload *ld, struct srv_config *c)
{
	for (;;) {
		yaml_event_t k;
		int rc = yaml_next(ld, &k);

		if (rc)
			return rc;
		if (k.type == YAML_MAPPING_END_EVENT) {
			yaml_event_delete(&k);
			return 0;
		}
		if (k.type == YAML_SCALAR_EVENT) {
			rc = yaml_pair(ld, c, &k);
		} else {
			msg_set(ld->err, ld->errlen, "%s:%lu: keys must be plain names", ld->file,
				mark_line(&k.start_mark));
			rc = -EINVAL;
		}
		yaml_event_delete(&k);
		if (rc)
			return rc;
	}
}

/*
 * The whole stream: nothing at all (a file of comments), an empty
 * document, or one document holding one mapping.
 */
static int yaml_stream(struct yload *ld, struct srv_config *c)
{
	yaml_event_t ev;
	int rc;

	rc = yaml_next(ld, &ev); /* STREAM-START */
	if (rc)
		return rc;
	yaml_event_delete(&ev);
	rc = yaml_next(ld, &ev);
	if (rc)
		return rc;
	if (ev.type == YAML_STREAM_END_EVENT) {
		yaml_event_delete(&ev);
		return 0;
	}
	yaml_event_delete(&ev); /* DOCUMENT-START */

	rc = yaml_next(ld, &ev);
	if (rc)
		return rc;
	if (ev.type == YAML_MAPPING_START_EVENT) {
		yaml_event_delete(&ev);
		rc = yaml_mapping(ld, c);
	} else if (ev.type == YAML_SCALAR_EVENT && scalar_is_null(&ev)) {
		yaml_event_delete(&ev);
	} else {
		msg_set(ld->err, ld->errlen,
			"%s:%lu: expected a mapping of settings (key: value lines)", ld->file,
			mark_line(&ev.start_mark));
		yaml_event_delete(&ev);
		rc = -EINVAL;
	}
	if (rc)
		return rc;

	rc = yaml_next(ld, &ev); /* DOCUMENT-END */
	if (rc)
		return rc;
	yaml_event_delete(&ev);
	rc = yaml_next(ld, &ev);
	if (rc)
		return rc;
	if (ev.type != YAML_STREAM_END_EVENT) {
		msg_set(ld->err, ld->errlen, "%s:%lu: only one YAML document is allowed", ld->file,
			mark_line(&ev.start_mark));
		rc = -EINVAL;
	}
	yaml_event_delete(&ev);
	return rc;
}

int srv_config_load(struct srv_config *c, const char *file, char *err, size_t errlen)
{
	struct yload *ld;
	struct srv_config tmp;
	struct stat st;
	FILE *f;
	int rc;

	if (!c || !file) {
		msg_set(err, errlen, "no configuration or file given");
		return -EINVAL;
	}
	f = fopen(file, "r");
	if (!f) {
		rc = -errno;
		msg_set(err, errlen, "%s: %s", file, strerror(-rc));
		return rc;
	}
	/* fopen opens a directory; reading it would fail with a vaguer message. */
	if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
		fclose(f);
		msg_set(err, errlen, "%s: %s", file, strerror(EISDIR));
		return -EISDIR;
	}
	ld = calloc(1, sizeof(*ld));
	if (!ld || !yaml_parser_initialize(&ld->parser)) {
		free(ld);
		fclose(f);
		msg_set(err, errlen, "%s: out of memory", file);
		return -ENOMEM;
	}
	ld->file = file;
	ld->err = err;
	ld->errlen = errlen;
	yaml_parser_set_input_file(&ld->parser, f);

	tmp = *c;
	rc = yaml_stream(ld, &tmp);
	if (rc == 0)
		*c = tmp;

	yaml_parser_delete(&ld->parser);
	free(ld);
	fclose(f);
	return rc;
}

/* ---- flags --------------------------------------------------------------- */

/* getopt_long values: single characters stay below 256. */
enum {
	OPT_CONFIG = 256,
	OPT_HELP,
	OPT_SETTING, /* + index into settings[] */
};

/* A flag seen on the command line, applied after the file. */
struct flag_val {
	const struct setting *s;
	const char *arg; /* NULL: a boolean flag without "=VALUE" */
};

static const char *opt_name(int val)
{
	if (val == OPT_CONFIG)
		return "config";
	if (val == OPT_HELP)
		return "help";
	if (val >= OPT_SETTING && (size_t)(val - OPT_SETTING) < NSETTINGS)
		return settings[val - OPT_SETTING].flag;
	return "?";
}

/*
 * Reading the flags first and applying them after the file is what lets
 * --config sit anywhere: the file is the base, every flag lands on top.
 * getopt_long keeps its state in globals (optind, opterr), so this is not
 * for concurrent use; like any GNU getopt it may reorder argv's pointers.
 */
int srv_config_parse_args(struct srv_config *c, int argc, char **argv, bool *help, char *err,
			  size_t errlen)
{
	struct option opts[NSETTINGS + 3];
	struct flag_val *vals = NULL;
	struct srv_config tmp;
	const char *config = NULL;
	char msg[MSG_MAX];
	size_t nvals = 0, i;
	int saved_opterr = opterr, ch, rc = 0;
	bool saw_help = false;

	if (help)
		*help = false;
	if (!c || argc < 1 || !argv) {
		msg_set(err, errlen, "no configuration or arguments given");
		return -EINVAL;
	}
	opts[0] = (struct option){"config", required_argument, NULL, OPT_CONFIG};
	opts[1] = (struct option){"help", no_argument, NULL, OPT_HELP};
	for (i = 0; i < NSETTINGS; i++)
		opts[i + 2] = (struct option){settings[i].flag,
					      settings[i].kind == SET_BOOL ? optional_argument
									   : required_argument,
					      NULL, OPT_SETTING + (int)i};
	opts[NSETTINGS + 2] = (struct option){NULL, 0, NULL, 0};

	vals = calloc((size_t)argc, sizeof(*vals));
	if (!vals) {
		msg_set(err, errlen, "out of memory");
		return -ENOMEM;
	}

	/* Messages go to err, not to stderr; optind 0 restarts glibc's scan. */
	opterr = 0;
	optind = 0;
	while (rc == 0 && (ch = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h':
		case OPT_HELP:
			saw_help = true;
			break;
		case OPT_CONFIG:
			if (config) {
				msg_set(err, errlen, "--config given twice ('%s' and '%s')", config,
					optarg);
				rc = -EINVAL;
			}
			config = optarg;
			break;
		case ':':
			msg_set(err, errlen, "--%s needs a value", opt_name(optopt));
			rc = -EINVAL;
			break;
		case '?':
			if (optopt >= 256)
				msg_set(err, errlen, "--%s takes no value", opt_name(optopt));
			else if (optopt > 0)
				msg_set(err, errlen, "unknown option '-%c' (see --help)", optopt);
			else
				msg_set(err, errlen, "unknown option '%s' (see --help)",
					argv[optind - 1]);
			rc = -EINVAL;
			break;
		default:
			assert(ch >= OPT_SETTING && (size_t)(ch - OPT_SETTING) < NSETTINGS);
			vals[nvals].s = &settings[ch - OPT_SETTING];
			vals[nvals].arg = optarg;
			nvals++;
			break;
		}
	}
	opterr = saved_opterr;
	if (rc == 0 && optind < argc) {
		msg_set(err, errlen,
			"unexpected argument '%s' (loded takes only options; booleans as --ram=no)",
			argv[optind]);
		rc = -EINVAL;
	}
	if (rc == 0 && saw_help) {
		/* Help needs neither the file nor valid values. */
		if (help)
			*help = true;
		goto out;
	}
	if (rc)
		goto out;

	tmp = *c;
	if (config) {
		rc = srv_config_load(&tmp, config, err, errlen);
		if (rc)
			goto out;
	}
	for (i = 0; i < nvals; i++) {
		const struct setting *s = vals[i].s;

		rc = set_value(&tmp, s, vals[i].arg ? vals[i].arg : "true", msg, sizeof(msg));
		if (rc) {
			msg_set(err, errlen, "--%s: %s", s->flag, msg);
			goto out;
		}
	}
	*c = tmp;
out:
	free(vals);
	return rc;
}

/* ---- --help -------------------------------------------------------------- */

void srv_config_usage(FILE *out)
{
	struct srv_config d;
	char flag[64], dflt[64];

	srv_config_defaults(&d);
	fputs("Usage: loded [--config FILE] [options]\n"
	      "\n"
	      "loded serves Lode storage targets over UCX: it opens N targets, target i in\n"
	      "DIR/tgt<i>, and answers clients that find them through the bootstrap address.\n"
	      "Settings come from a YAML file and from flags. --config FILE is read first,\n"
	      "wherever it appears; every other flag then overrides the file.\n"
	      "\n"
	      "Options (flag, YAML key, meaning, default):\n",
	      out);
	fprintf(out, "  %-24s %-11s %s\n", "--config FILE", "-",
		"read settings from this YAML file first");
	for (size_t i = 0; i < NSETTINGS; i++) {
		const struct setting *s = &settings[i];

		snprintf(flag, sizeof(flag), "--%s%s%s", s->flag, s->kind == SET_BOOL ? "" : " ",
			 s->arg);
		format_value(&d, s, dflt, sizeof(dflt));
		fprintf(out, "  %-24s %-11s %s (default: %s)\n", flag, s->key, s->help, dflt);
	}
	fprintf(out, "  %-24s %-11s %s\n", "-h, --help", "-", "print this help and exit");
	fputs("\n"
	      "Both --flag VALUE and --flag=VALUE work. SIZE is a number of bytes with an\n"
	      "optional K, M, G or T suffix (powers of 1024); BOOL is true/false, yes/no or\n"
	      "1/0. Unknown keys and bad values stop loded with the file, line and key.\n"
	      "\n"
	      "Signals:\n"
	      "  SIGTERM, SIGINT  stop taking new requests, drain those in flight, and exit\n"
	      "\n"
	      "Example configuration file (loded --config loded.yaml):\n"
	      "  # loded.yaml\n"
	      "  listen: 0.0.0.0:7420\n"
	      "  targets: 4\n"
	      "  path: /var/lib/lode\n"
	      "  ram: false\n"
	      "  capacity: 64G\n"
	      "  transport: auto\n"
	      "  bulk: auto\n"
	      "  inline_max: 8K\n"
	      "  poll_us: 1000\n"
	      "  pidfile: /run/lode/loded.pid\n"
	      "  addrfile: \"\"\n",
	      out);
}
