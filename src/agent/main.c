/*
 * lode-agent: the per-node daemon that vouches for local processes, so that
 * programs on this node need no secret of their own.
 *
 * It holds the node's credential (a `node` user of tenant "system") and a
 * map from local users to Lode users (map.h). A process with no credentials
 * of its own connects to the agent's Unix socket and asks for a pool
 * (agent_client.h has the wire format); the kernel tells the agent which
 * uid asks (SO_PEERCRED, which the peer cannot choose), the map names the
 * Lode user, and the agent calls Connect on the management service as the
 * node user on behalf of that one. The service's reply (a capability bound
 * to a fresh client id, its expiry, the pool) goes back as it is; the
 * process renews it with the service directly, which needs no secret.
 *
 * How the parts fit: main() parses options, reads the credential and the
 * map, and with --daemon forks before anything is connected, like
 * lode-fuse, so the caller's exit status means "serving" (0), "could not
 * start" (1) or "bad arguments" (2). The child bootstraps from loded, proves
 * the node credential (a Connect on its own behalf, which only a node user
 * may make), binds the socket, reports success, and serves: the main thread
 * accepts, a thread per connection (at most --max-clients) answers it, and
 * signals arrive on a signalfd (SIGHUP rereads the map; SIGTERM or SIGINT
 * stop accepting, let the answers in progress finish, remove the socket and
 * exit 0).
 *
 * Every grant and refusal is one line on stderr: the --log file when given,
 * else the terminal (or nothing, once detached without --log).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/map.h"
#include "common/daemon.h"
#include "client/agent_client.h"
#include "client/client.h"
#include "lode/mgmt/v1/mgmt.pb-c.h"
#include "mgmt/rpc.h"

#define EXIT_USAGE 2
#define CRED_DEFAULT "/etc/lode/agent.credentials"
#define CONNECT_METHOD "/lode.mgmt.v1.Mgmt/Connect"
#define MAX_CLIENTS_DEFAULT 64
#define TIMEOUT_DEFAULT_MS 10000
/* A peer that has not sent its whole request by then is dropped. */
#define REQUEST_WAIT_MS 5000

struct options {
	const char *cred;
	const char *map;
	const char *socket;
	const char *addr;
	const char *pidfile;
	const char *logfile;
	bool daemon;
	unsigned max_clients;
	unsigned timeout_ms;
};

/* What every connection's thread shares. */
struct agent {
	lode_conn_t *conn;       /* the node user's management connection */
	struct conn_cred cred;   /* the node's credential (cred.secret is secret) */
	const char *map_path;
	pthread_mutex_t lock;    /* map, active */
	pthread_cond_t idle;
	struct agent_map *map;
	unsigned active, max;
	unsigned timeout_ms;
};

struct client {
	struct agent *a;
	int fd;
};

/* ---- messages --------------------------------------------------------------------- */

__attribute__((format(printf, 1, 2))) static void fail(const char *fmt, ...)
{
	va_list ap;

	fputs("lode-agent: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* One log line, timestamped, written at once so that threads do not mix. */
__attribute__((format(printf, 1, 2))) static void alog(const char *fmt, ...)
{
	char line[1024];
	struct timespec ts;
	struct tm tm;
	size_t n;
	va_list ap;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
	n += (size_t)snprintf(line + n, sizeof(line) - n, ".%03ldZ lode-agent: ",
			      ts.tv_nsec / 1000000);
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	va_end(ap);
	n = strlen(line);
	if (n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, n) < 0) {
		/* nowhere left to say it */
	}
}

static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("lode-agent: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (see lode-agent --help)\n", stderr);
	return EXIT_USAGE;
}

static void help(void)
{
	printf("usage: lode-agent [OPTIONS]\n"
	       "\n"
	       "Vouch for the processes of this node: a process with no Lode credentials of its\n"
	       "own asks the agent's Unix socket for a capability; the kernel says which uid\n"
	       "asks, the map names the Lode user it is, and the agent calls Connect on that\n"
	       "user's behalf with the node's credential (a node user: `lode user create\n"
	       "system/NAME --node`). liblode asks the agent by itself when it finds no\n"
	       "credentials ($LODE_AGENT_SOCKET, else $XDG_RUNTIME_DIR/lode/agent.sock, else\n"
	       "/run/lode/agent.sock).\n"
	       "\n"
	       "Options:\n"
	       "  --cred FILE          the node's credentials file (\"user: system/NAME\",\n"
	       "                       \"secret: ...\", optionally \"mgmt:\", \"tls_ca:\", \"pool:\");\n"
	       "                       default " CRED_DEFAULT "; must not be readable\n"
	       "                       by group or others\n"
	       "  --map FILE           local users to Lode users: lines \"UID_OR_LOGIN: TENANT/USER\",\n"
	       "                       \"*: TENANT/USER\" for everyone else, '#' comments (required;\n"
	       "                       SIGHUP rereads it)\n"
	       "  --socket PATH        where to listen; default $LODE_AGENT_SOCKET, else\n"
	       "                       /run/lode/agent.sock as root, else\n"
	       "                       $XDG_RUNTIME_DIR/lode/agent.sock\n"
	       "  --addr HOST[:PORT]   the loded to bootstrap from; default as liblode's\n"
	       "                       ($LODE_ADDR, $XDG_STATE_HOME/lode/addr or\n"
	       "                       ~/.local/state/lode/addr, 127.0.0.1:7420)\n"
	       "  --daemon             fork and detach once serving (exit 0 means serving)\n"
	       "  --pidfile FILE       write the agent's pid to FILE once serving\n"
	       "  --log FILE           append the agent's log (grants, refusals) to FILE\n"
	       "  --max-clients N      answer at most N clients at once (default %d)\n"
	       "  --timeout MS         per-request timeout towards the service and clients\n"
	       "                       (default %d)\n"
	       "  -h, --help           this text\n"
	       "\n"
	       "Exit status: 0 stopped cleanly (SIGTERM, SIGINT), or with --daemon, serving;\n"
	       "1 could not start (a credential the service refuses, a bad map, a socket in\n"
	       "use); 2 bad arguments.\n",
	       MAX_CLIENTS_DEFAULT, TIMEOUT_DEFAULT_MS);
}

/* ---- options ---------------------------------------------------------------------- */

/* "--name VALUE" or "--name=VALUE" at argv[*i]: 1 taken (*v set), 0 not this one, -1 missing. */
static int long_opt(int argc, char **argv, int *i, const char *name, const char **v)
{
	size_t n = strlen(name);

	if (strncmp(argv[*i], name, n) != 0)
		return 0;
	if (argv[*i][n] == '=') {
		*v = argv[*i] + n + 1;
		return 1;
	}
	if (argv[*i][n])
		return 0;
	if (*i + 1 >= argc)
		return -1;
	*v = argv[++*i];
	return 1;
}

static int num_opt(const char *name, const char *v, unsigned min, unsigned max, unsigned *out)
{
	char *end;
	unsigned long n;

	errno = 0;
	n = strtoul(v, &end, 10);
	if (errno || end == v || *end || *v == '-' || n < min || n > max)
		return usage_error("%s must be a number from %u to %u", name, min, max);
	*out = (unsigned)n;
	return 0;
}

/* 0, EXIT_USAGE, or -1 after --help. */
static int options_parse(int argc, char **argv, struct options *o)
{
	static const struct {
		const char *name;
		size_t off;
	} files[] = {
		{"--cred", offsetof(struct options, cred)},
		{"--map", offsetof(struct options, map)},
		{"--socket", offsetof(struct options, socket)},
		{"--addr", offsetof(struct options, addr)},
		{"--pidfile", offsetof(struct options, pidfile)},
		{"--log", offsetof(struct options, logfile)},
	};
	const char *v;
	int rc;

	o->cred = CRED_DEFAULT;
	o->max_clients = MAX_CLIENTS_DEFAULT;
	o->timeout_ms = TIMEOUT_DEFAULT_MS;
	for (int i = 1; i < argc; i++) {
		bool taken = false;

		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			help();
			return -1;
		}
		if (strcmp(argv[i], "--daemon") == 0) {
			o->daemon = true;
			continue;
		}
		for (size_t k = 0; k < sizeof(files) / sizeof(files[0]) && !taken; k++) {
			if ((rc = long_opt(argc, argv, &i, files[k].name, &v)) < 0)
				return usage_error("%s needs a value", files[k].name);
			if (rc == 0)
				continue;
			if (!*v)
				return usage_error("%s is empty", files[k].name);
			*(const char **)((char *)o + files[k].off) = v;
			taken = true;
		}
		if (taken)
			continue;
		if ((rc = long_opt(argc, argv, &i, "--max-clients", &v)) != 0) {
			if (rc < 0 || num_opt("--max-clients", v, 1, 4096, &o->max_clients))
				return rc < 0 ? usage_error("--max-clients needs a number") : EXIT_USAGE;
		} else if ((rc = long_opt(argc, argv, &i, "--timeout", &v)) != 0) {
			if (rc < 0 || num_opt("--timeout", v, 100, 3600000, &o->timeout_ms))
				return rc < 0 ? usage_error("--timeout needs a number") : EXIT_USAGE;
		} else if (argv[i][0] == '-') {
			return usage_error("unknown option %s", argv[i]);
		} else {
			return usage_error("unexpected argument %s", argv[i]);
		}
	}
	if (!o->map)
		return usage_error("no --map FILE: the agent must know whom each uid is");
	return 0;
}

/* ---- the node's credential -------------------------------------------------------- */

/* Read the credential; refuse one that others may read. 0 or 1 (said why). */
static int cred_read(const char *path, struct conn_cred *cr)
{
	struct stat st;
	int rc;

	memset(cr, 0, sizeof(*cr));
	if (stat(path, &st) < 0) {
		fail("node credential %s: %s", path, strerror(errno));
		return 1;
	}
	/* As ssh does with private keys: a secret others can read is no longer
	 * the node's alone, and every tenant mapped here would be exposed. */
	if (st.st_mode & 077) {
		fail("node credential %s: readable or writable by group or others (mode %04o): "
		     "chmod 600 it",
		     path, (unsigned)(st.st_mode & 07777));
		return 1;
	}
	if ((rc = cred_file_load(path, cr)) < 0) {
		fail("node credential %s: %s", path,
		     rc == -EINVAL ? "not \"key: value\" lines" : strerror(-rc));
		return 1;
	}
	if (!cr->user[0] || !cr->secret[0]) {
		fail("node credential %s: needs a \"user:\" and a \"secret:\" line", path);
		explicit_bzero(cr, sizeof(*cr));
		return 1;
	}
	return 0;
}

/*
 * Bootstrap, Connect as the node user, then prove that it is a node user:
 * a Connect on its own behalf, which the service allows only to node users.
 * 0 or 1 (said why).
 */
static int service_join(struct agent *a, const struct options *o)
{
	Lode__Mgmt__V1__ConnectRequest req = LODE__MGMT__V1__CONNECT_REQUEST__INIT;
	Lode__Mgmt__V1__ConnectReply *rep = NULL;
	struct lode_conn_opts co = {0};
	const char *where = o->addr ? o->addr : "the local loded";
	char msg[320];
	int rc, st;

	/* The file's other lines, unless the environment says otherwise (as
	 * liblode lets the environment override a credentials file). */
	if (a->cred.mgmt[0])
		setenv("LODE_MGMT", a->cred.mgmt, 0);
	if (a->cred.tls_ca[0])
		setenv("LODE_TLS_CA", a->cred.tls_ca, 0);
	co.user = a->cred.user;
	co.secret = a->cred.secret;
	co.pool = a->cred.pool[0] ? a->cred.pool : NULL;
	co.timeout_ms = o->timeout_ms;
	if ((rc = conn_mgmt_connect(o->addr, &co, &a->conn)) < 0) {
		a->conn = NULL;
		if (rc == -LODE_EAUTH)
			fail("the management service at %s refuses the node credential of %s in %s: "
			     "%s",
			     where, a->cred.user, o->cred, lode_strerror(rc));
		else
			fail("connect to %s as %s: %s", where, a->cred.user, lode_strerror(rc));
		return 1;
	}
	req.user = a->cred.user;
	req.secret.data = (uint8_t *)a->cred.secret;
	req.secret.len = strlen(a->cred.secret);
	req.pool = co.pool ? (char *)co.pool : "";
	req.on_behalf_of = a->cred.user;
	st = rpc_call(a->conn->mgmt, CONNECT_METHOD, &req.base,
		      &lode__mgmt__v1__connect_reply__descriptor, NULL, 0, o->timeout_ms,
		      (ProtobufCMessage **)&rep, msg, sizeof(msg));
	if (st != RPC_OK) {
		if (st == RPC_PERMISSION_DENIED)
			fail("%s is not a node user (`lode user create system/NAME --node` makes "
			     "one): %s",
			     a->cred.user, msg);
		else
			fail("Connect on behalf of %s at %s: %s", a->cred.user, a->conn->server, msg);
		return 1;
	}
	protobuf_c_message_free_unpacked(&rep->base, NULL);
	return 0;
}

/* ---- answering one process -------------------------------------------------------- */

__attribute__((format(printf, 4, 5))) static void answer_error(int fd, int64_t deadline, int st,
							       const char *fmt, ...)
{
	char m[512];
	int n;
	va_list ap;

	va_start(ap, fmt);
	n = vsnprintf(m, sizeof(m), fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof(m))
		n = sizeof(m) - 1;
	agent_frame_send(fd, st, m, (size_t)n, deadline);
}

/* The login name of uid into out (empty when it has none). */
static void login_of(uid_t uid, char *out, size_t cap)
{
	struct passwd pw, *res = NULL;
	char buf[4096];

	out[0] = 0;
	if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) == 0 && res)
		snprintf(out, cap, "%s", res->pw_name);
}

static void client_serve(struct agent *a, int fd)
{
	Lode__Mgmt__V1__ConnectRequest *req = NULL, creq = LODE__MGMT__V1__CONNECT_REQUEST__INIT;
	Lode__Mgmt__V1__ConnectReply *rep = NULL;
	struct ucred uc;
	socklen_t ul = sizeof(uc);
	char login[64], user[AGENT_MAP_USER_MAX + 1], msg[320];
	const char *mapped;
	uint8_t *in = NULL, *out = NULL;
	size_t n;
	int64_t deadline = agent_now_ms() + REQUEST_WAIT_MS;
	int rc, st;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &ul) < 0) {
		alog("refused: no peer credentials: %s", strerror(errno));
		return;
	}
	login_of(uc.uid, login, sizeof(login));
	rc = agent_frame_recv(fd, AGENT_REQUEST_MAX, &in, &n, deadline);
	if (rc == -EMSGSIZE) {
		alog("refused uid %u (%s) pid %d: a request over %d bytes", uc.uid, login, uc.pid,
		     AGENT_REQUEST_MAX);
		answer_error(fd, agent_now_ms() + 1000, RPC_INVALID_ARGUMENT,
			     "a request over %d bytes", AGENT_REQUEST_MAX);
		return;
	}
	if (rc < 0) {
		alog("dropped uid %u (%s) pid %d: %s", uc.uid, login, uc.pid,
		     rc == -ETIMEDOUT ? "no whole request in time" : "it left before asking");
		return;
	}
	deadline = agent_now_ms() + a->timeout_ms;
	if (!(req = lode__mgmt__v1__connect_request__unpack(NULL, n, in))) {
		alog("refused uid %u (%s) pid %d: a request that is not a ConnectRequest", uc.uid,
		     login, uc.pid);
		answer_error(fd, deadline, RPC_INVALID_ARGUMENT, "the request is not a ConnectRequest");
		goto out;
	}
	if (req->user[0] || req->secret.len || req->on_behalf_of[0]) {
		alog("refused uid %u (%s) pid %d: a request naming a user or a secret", uc.uid, login,
		     uc.pid);
		answer_error(fd, deadline, RPC_INVALID_ARGUMENT,
			     "only the pool may be set: the agent says who you are");
		goto out;
	}
	pthread_mutex_lock(&a->lock);
	mapped = agent_map_lookup(a->map, uc.uid, login[0] ? login : NULL);
	snprintf(user, sizeof(user), "%s", mapped ? mapped : "");
	pthread_mutex_unlock(&a->lock);
	if (!user[0]) {
		alog("refused uid %u (%s) pid %d: no Lode user for it in %s", uc.uid, login, uc.pid,
		     a->map_path);
		answer_error(fd, deadline, RPC_PERMISSION_DENIED,
			     "uid %u%s%s%s has no Lode user on this node (the agent's map)", uc.uid,
			     login[0] ? " (" : "", login, login[0] ? ")" : "");
		goto out;
	}
	creq.user = a->cred.user;
	creq.secret.data = (uint8_t *)a->cred.secret;
	creq.secret.len = strlen(a->cred.secret);
	creq.pool = req->pool;
	creq.on_behalf_of = user;
	st = rpc_call(a->conn->mgmt, CONNECT_METHOD, &creq.base,
		      &lode__mgmt__v1__connect_reply__descriptor, NULL, 0, a->timeout_ms,
		      (ProtobufCMessage **)&rep, msg, sizeof(msg));
	if (st != RPC_OK) {
		alog("refused uid %u (%s) pid %d as %s on pool %s: the service says: %s", uc.uid,
		     login, uc.pid, user, req->pool[0] ? req->pool : "default", msg);
		answer_error(fd, deadline, st, "Connect as %s: %s", user, msg);
		goto out;
	}
	n = protobuf_c_message_get_packed_size(&rep->base);
	if (!(out = malloc(n ? n : 1))) {
		answer_error(fd, deadline, RPC_INTERNAL, "out of memory");
		goto out;
	}
	protobuf_c_message_pack(&rep->base, out);
	rc = agent_frame_send(fd, RPC_OK, out, n, deadline);
	alog("granted uid %u (%s) pid %d as %s/%s on pool %s%s%s", uc.uid, login, uc.pid,
	     rep->tenant, rep->user, req->pool[0] ? req->pool : "default",
	     rc < 0 ? ", but the answer was not delivered: " : "", rc < 0 ? strerror(-rc) : "");
out:
	if (out)
		explicit_bzero(out, n);
	free(out);
	if (rep)
		protobuf_c_message_free_unpacked(&rep->base, NULL);
	if (req)
		lode__mgmt__v1__connect_request__free_unpacked(req, NULL);
	free(in);
}

static void *client_main(void *arg)
{
	struct client *cl = arg;
	struct agent *a = cl->a;

	client_serve(a, cl->fd);
	close(cl->fd);
	free(cl);
	pthread_mutex_lock(&a->lock);
	if (--a->active == 0)
		pthread_cond_broadcast(&a->idle);
	pthread_mutex_unlock(&a->lock);
	return NULL;
}

/* Hand fd to a thread of its own, or say we are busy. */
static void client_start(struct agent *a, int fd)
{
	struct client *cl;
	pthread_attr_t at;
	pthread_t t;
	bool full;

	pthread_mutex_lock(&a->lock);
	full = a->active >= a->max;
	if (!full)
		a->active++;
	pthread_mutex_unlock(&a->lock);
	if (full) {
		alog("refused a client: %u answers in progress already", a->max);
		answer_error(fd, agent_now_ms() + 100, RPC_RESOURCE_EXHAUSTED,
			     "the agent is busy (%u clients at once): try again", a->max);
		close(fd);
		return;
	}
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if ((cl = malloc(sizeof(*cl)))) {
		cl->a = a;
		cl->fd = fd;
	}
	if (!cl || pthread_create(&t, &at, client_main, cl) != 0) {
		alog("refused a client: no thread for it");
		free(cl);
		close(fd);
		pthread_mutex_lock(&a->lock);
		if (--a->active == 0)
			pthread_cond_broadcast(&a->idle);
		pthread_mutex_unlock(&a->lock);
	}
	pthread_attr_destroy(&at);
}

/* ---- the socket ------------------------------------------------------------------- */

/*
 * Listen on path, mode 0666 (anyone may ask; the kernel says who asks).
 * A socket file nobody serves (an agent that died) is replaced; one that
 * answers is left alone. Returns the listening fd, or -1 (said why).
 */
static int socket_listen(const char *path, ino_t *ino)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char dir[PATH_MAX], *slash;
	struct stat st;
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		fail("socket path %s: longer than %zu bytes", path, sizeof(sa.sun_path) - 1);
		return -1;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	snprintf(dir, sizeof(dir), "%s", path);
	if ((slash = strrchr(dir, '/')) && slash != dir) {
		*slash = 0;
		if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
			fail("socket directory %s: %s", dir, strerror(errno));
			return -1;
		}
	}
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) {
		fail("socket: %s", strerror(errno));
		return -1;
	}
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			fail("%s exists and is not a socket", path);
			goto fail;
		}
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			fail("another lode-agent serves %s", path);
			goto fail;
		}
		if (errno != ECONNREFUSED) {
			fail("%s: %s", path, strerror(errno));
			goto fail;
		}
		unlink(path); /* stale: its agent is gone */
		close(fd);
		if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) {
			fail("socket: %s", strerror(errno));
			return -1;
		}
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		fail("bind %s: %s", path, strerror(errno));
		goto fail;
	}
	if (chmod(path, 0666) < 0 || listen(fd, 128) < 0 || stat(path, &st) < 0) {
		fail("%s: %s", path, strerror(errno));
		unlink(path);
		goto fail;
	}
	*ino = st.st_ino;
	return fd;
fail:
	close(fd);
	return -1;
}

/* Remove the socket file if it is still the one we made. */
static void socket_remove(const char *path, ino_t ino)
{
	struct stat st;

	if (lstat(path, &st) == 0 && st.st_ino == ino)
		unlink(path);
}

/* ---- serving ---------------------------------------------------------------------- */

static void map_reload(struct agent *a)
{
	struct agent_map *m, *old;
	char msg[512];

	if (agent_map_load(a->map_path, &m, msg, sizeof(msg)) < 0) {
		alog("SIGHUP: kept the old map: %s", msg);
		return;
	}
	pthread_mutex_lock(&a->lock);
	old = a->map;
	a->map = m;
	pthread_mutex_unlock(&a->lock);
	agent_map_free(old);
	alog("SIGHUP: reread %s (%u entries)", a->map_path, agent_map_size(m));
}

/* Accept until SIGTERM or SIGINT; returns the signal. */
static int serve(struct agent *a, int lfd, int sfd)
{
	struct pollfd p[2] = {{.fd = lfd, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};

	for (;;) {
		struct signalfd_siginfo si;
		int fd;

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			alog("poll: %s", strerror(errno));
			return 0;
		}
		if (p[1].revents & POLLIN) {
			if (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
				if (si.ssi_signo == SIGHUP)
					map_reload(a);
				else
					return (int)si.ssi_signo;
			}
		}
		if (!(p[0].revents & POLLIN))
			continue;
		if ((fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) < 0) {
			if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
				alog("accept: %s", strerror(errno));
			if (errno == EMFILE || errno == ENFILE)
				usleep(100000); /* let answers in progress give fds back */
			continue;
		}
		client_start(a, fd);
	}
}

int main(int argc, char **argv)
{
	struct options o = {0};
	struct agent a = {0};
	char sock[PATH_MAX], pidabs[PATH_MAX], msg[512];
	sigset_t sigs;
	int ready = -1, logfd = -1, lfd = -1, sfd = -1, code, sig, rc;
	bool pid_written = false;
	ino_t ino = 0;

	if ((rc = options_parse(argc, argv, &o)) != 0)
		return rc < 0 ? 0 : rc;
	if (o.socket) {
		snprintf(sock, sizeof(sock), "%s", o.socket);
	} else if ((rc = agent_socket_default(sock, sizeof(sock))) < 0) {
		return usage_error("no --socket PATH, and no $XDG_RUNTIME_DIR to put one in");
	}
	pthread_mutex_init(&a.lock, NULL);
	pthread_cond_init(&a.idle, NULL);
	a.max = o.max_clients;
	a.timeout_ms = o.timeout_ms;
	a.map_path = o.map;
	/* Read both files before forking, so that their mistakes reach the caller. */
	if (cred_read(o.cred, &a.cred))
		return 1;
	if (agent_map_load(o.map, &a.map, msg, sizeof(msg)) < 0) {
		fail("map: %s", msg);
		explicit_bzero(&a.cred, sizeof(a.cred));
		return 1;
	}
	/* Before anything is connected: gRPC and its threads do not survive a fork. */
	if (o.daemon && (ready = daemon_fork("lode-agent", "serving")) < 0) {
		fail("fork: %s", strerror(-ready));
		explicit_bzero(&a.cred, sizeof(a.cred));
		return 1;
	}

	code = 1;
	/* Every thread made from here on inherits this mask: signals come
	 * only through the signalfd. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	if ((sfd = signalfd(-1, &sigs, SFD_CLOEXEC)) < 0) {
		fail("signalfd: %s", strerror(errno));
		goto out;
	}
	if (o.logfile &&
	    (logfd = open(o.logfile, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640)) < 0) {
		fail("log %s: %s", o.logfile, strerror(errno));
		goto out;
	}
	if (service_join(&a, &o))
		goto out;
	if ((lfd = socket_listen(sock, &ino)) < 0)
		goto out;
	if (o.pidfile && daemon_pidfile(&o.pidfile, pidabs, sizeof(pidabs), msg, sizeof(msg)) < 0) {
		fail("%s", msg);
		goto out;
	}
	pid_written = o.pidfile != NULL;

	/* Serving: the caller may go. */
	daemon_stdio(logfd, o.daemon);
	logfd = -1;
	alog("serving %s for %s (node user %s, %u map entries), pid %ld", sock, a.conn->server,
	     a.cred.user, agent_map_size(a.map), (long)getpid());
	daemon_ready(&ready, 0);
	code = 0;
	sig = serve(&a, lfd, sfd);
	close(lfd);
	lfd = -1;
	socket_remove(sock, ino);
	alog("%s%s: stopped accepting; finishing %u answers in progress", sig ? "signal " : "",
	     sig ? strsignal(sig) : "error", a.active);
	/* Each answer ends within REQUEST_WAIT_MS plus the timeout. */
	pthread_mutex_lock(&a.lock);
	while (a.active)
		pthread_cond_wait(&a.idle, &a.lock);
	pthread_mutex_unlock(&a.lock);
	alog("stopped");
	if (!sig)
		code = 1;
out:
	if (lfd >= 0) {
		close(lfd);
		socket_remove(sock, ino);
	}
	if (pid_written)
		unlink(o.pidfile);
	if (logfd >= 0)
		close(logfd);
	if (sfd >= 0)
		close(sfd);
	lode_disconnect(a.conn);
	agent_map_free(a.map);
	explicit_bzero(&a.cred, sizeof(a.cred));
	daemon_ready(&ready, code);
	pthread_mutex_destroy(&a.lock);
	pthread_cond_destroy(&a.idle);
	return code;
}
