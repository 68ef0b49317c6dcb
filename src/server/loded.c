/*
 * loded: the Lode storage daemon.
 *
 * The main thread reads the configuration, starts the target threads
 * (service.c), and then serves the bootstrap socket: a client connects,
 * says hello, and gets the targets' UCX worker addresses, after which it
 * talks to each target directly. SIGTERM or SIGINT stops accepting, lets
 * every target finish what it has in flight, closes the engines and exits 0.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lode/lode.h"
#include "net/net.h"
#include "server/config.h"
#include "server/join.h"
#include "server/rebuild.h"
#include "server/srv.h"
#include "mgmt/mgmt.h"
#include "mgmt/state.h"

#define BOOT_TIMEOUT_MS 2000

static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
	int saved = errno;
	char c = (char)sig;

	if (write(sig_pipe[1], &c, 1) < 0) {
		/* The pipe is full: a stop is already pending. */
	}
	errno = saved;
}

static int listen_on(const char *addr, int *fd_out)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd, one = 1, rc;

	if ((rc = net_addr_parse(addr, LODE_PORT_DEFAULT, &ss, &len)) < 0)
		return rc;
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 128) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	*fd_out = fd;
	return 0;
}

/* Answer one client's hello with the welcome; the socket is closed after. */
static void greet(struct srv *s, int fd)
{
	struct net_welcome w = {0};
	size_t cap = 4096, len;
	uint8_t *out;
	void *hello;
	int rc, one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	rc = net_frame_recv(fd, 64, BOOT_TIMEOUT_MS, &hello, &len);
	if (rc == 0) {
		rc = net_hello_decode(hello, len);
		free(hello);
	}
	if (rc < 0 && rc != -EPROTONOSUPPORT)
		return; /* not a Lode client: nothing sensible to answer */
	w.status = rc;
	w.ntargets = (uint16_t)s->ntargets;
	w.inline_max = s->cfg->inline_max;
	w.transports = s->transports;
	w.bulk = s->bulk;
	w.pid = (uint32_t)getpid();
	gethostname(w.host, sizeof(w.host) - 1);
	w.mgmt_port = s->mgmt_port;
	w.mgmt_tls = s->mgmt_tls;
	for (unsigned i = 0; i < s->ntargets; i++) {
		const void *a;
		size_t al;

		srv_tgt_address(s, i, &a, &al, &w.port[i]);
		w.addr[i] = a;
		w.addr_len[i] = (uint32_t)al;
		cap += 4 + al;
	}
	if (!(out = malloc(cap)))
		return;
	rc = net_welcome_encode(&w, out, cap);
	if (rc > 0)
		net_frame_send(fd, out, (size_t)rc, BOOT_TIMEOUT_MS);
	free(out);
}

/*
 * Each hello is answered on its own thread: a peer that connects and says
 * nothing costs its own timeout, not everyone else's. Past GREETERS_MAX at
 * once, new connections wait in the listen backlog.
 */
#define GREETERS_MAX 64

static atomic_uint greeters;

struct greeting {
	struct srv *s;
	int fd;
};

static void *greet_main(void *arg)
{
	struct greeting *g = arg;

	greet(g->s, g->fd);
	close(g->fd);
	free(g);
	atomic_fetch_sub(&greeters, 1);
	return NULL;
}

static void greet_async(struct srv *s, int fd)
{
	struct greeting *g;
	pthread_attr_t attr;
	pthread_t th;

	if (atomic_fetch_add(&greeters, 1) >= GREETERS_MAX || !(g = malloc(sizeof(*g)))) {
		atomic_fetch_sub(&greeters, 1);
		close(fd);
		return;
	}
	g->s = s;
	g->fd = fd;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&th, &attr, greet_main, g) != 0) {
		atomic_fetch_sub(&greeters, 1);
		close(fd);
		free(g);
	}
	pthread_attr_destroy(&attr);
}

static int write_file(const char *path, const char *text)
{
	char tmp[4200];
	FILE *f;

	if (!path[0])
		return 0;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if (!(f = fopen(tmp, "w")))
		return -errno;
	fprintf(f, "%s\n", text);
	if (fclose(f) != 0 || rename(tmp, path) != 0)
		return -errno;
	return 0;
}

/* ---- the management service ------------------------------------------------ */

static unsigned mgmt_targets(void *arg, struct mgmt_target_info *out, unsigned max)
{
	struct srv *s = arg;

	if (!atomic_load(&s->serving))
		return 0;
	for (unsigned i = 0; i < s->ntargets && i < max; i++) {
		struct srv_tgt_info ti;

		srv_tgt_info(s, i, &ti);
		out[i] = (struct mgmt_target_info){.id = i,
						   .capacity = ti.capacity,
						   .used = ti.used,
						   .requests = ti.requests,
						   .errors = ti.errors,
						   .load = ti.load,
						   .ram = ti.ram};
	}
	return s->ntargets;
}

/* The service's map moved on: the targets refuse requests placed with an
 * older one. A replica-hosting engine hears of versions from its replica and
 * from its heartbeats too: the newer one counts. */
static void mgmt_map_changed(void *arg, uint32_t version)
{
	struct srv *s = arg;
	uint32_t old = atomic_load(&s->map_ver);

	while (version > old && !atomic_compare_exchange_weak(&s->map_ver, &old, version))
		;
}

/*
 * The hosting engine's part of a rebuild (rebuild.c), for the service it
 * hosts; joined engines send theirs with each heartbeat (join.c).
 */
static void mgmt_rebuild(void *arg, struct mgmt_rebuild_info *out)
{
	struct srv *s = arg;

	rebuild_report(atomic_load(&s->rebuild), out);
}

/* The host part of "host:port" or "[v6]:port", as gRPC wants it back. */
static void addr_host(const char *addr, char *out, size_t cap)
{
	const char *end = addr[0] == '[' ? strchr(addr, ']') : strrchr(addr, ':');
	size_t n = end ? (size_t)(end - addr) + (addr[0] == '[') : strlen(addr);

	snprintf(out, cap, "%.*s", (int)n, addr);
}

/* The management service's port at the last start (written by mgmt_host), or 0. */
static unsigned port_remembered(const char *path)
{
	char line[32];
	FILE *f = fopen(path, "r");
	unsigned long v = 0;
	char *end = NULL;

	if (!f)
		return 0;
	if (fgets(line, sizeof(line), f))
		v = strtoul(line, &end, 10);
	fclose(f);
	return end && end != line && (*end == '\n' || !*end) && v > 0 && v < 65536 ? (unsigned)v : 0;
}

/*
 * Start the management service beside the targets: its keyring and
 * revocation table are the ones every target checks capabilities with.
 */
/* Where the service listens and the administrator's credentials file
 * (mgmt_host), for the replica-hosting engine's own join. */
static char svc_listen[300], svc_cred[4300];

static int mgmt_host(struct srv_config *c, struct srv *s, mgmt_t **out)
{
	static char listen[300], state[4200], cred[4300];
	char port_file[4220] = ""; /* where the port is kept, when loded picks it */
	unsigned old_port = 0;
	static struct mgmt_replica reps[MGMT_REPLICAS_MAX];
	struct srv_replica sr[SRV_REPLICAS_MAX];
	struct mgmt_config mc = {0};
	struct mgmt_hooks hooks = {.arg = s, .targets = mgmt_targets,
				   .map_changed = mgmt_map_changed,
				   .rebuild = mgmt_rebuild};
	uint8_t uuid[16];
	char host[260], msg[512] = "", text[300];
	int rc;

	if (c->mgmt_state[0])
		snprintf(state, sizeof(state), "%s", c->mgmt_state);
	else
		snprintf(state, sizeof(state), "%s/mgmt", c->path);
	if (c->mgmt_replicas[0]) {
		/* A replica listens where the others' redirects send clients. */
		int n = srv_replicas_parse(c->mgmt_replicas, sr, msg, sizeof(msg));

		for (int i = 0; i < n; i++) {
			reps[i].id = sr[i].id;
			snprintf(reps[i].raft, sizeof(reps[i].raft), "%s", sr[i].raft);
			snprintf(reps[i].grpc, sizeof(reps[i].grpc), "%s", sr[i].grpc);
			if (sr[i].id == c->mgmt_replica_id)
				snprintf(listen, sizeof(listen), "%s", sr[i].grpc);
		}
		mc.replicas = reps;
		mc.nreplicas = n > 0 ? (unsigned)n : 0;
		mc.replica_id = c->mgmt_replica_id;
		mc.election_ms = c->mgmt_election_ms;
	} else if (c->mgmt_listen[0]) {
		snprintf(listen, sizeof(listen), "%s", c->mgmt_listen);
	} else {
		/* Any free port the first time, then the same one at every start,
		 * so that clients connected before a restart find the service again
		 * where they left it (src/client/README.md). */
		snprintf(port_file, sizeof(port_file), "%s/mgmt.port", state);
		addr_host(c->listen, host, sizeof(host));
		old_port = port_remembered(port_file);
		snprintf(listen, sizeof(listen), "%s:%u", host, old_port);
	}
	if (c->admin_cred[0])
		snprintf(cred, sizeof(cred), "%s", c->admin_cred);
	else
		snprintf(cred, sizeof(cred), "%s/admin.credentials", state);
	if (mkdir(c->path, 0755) < 0 && errno != EEXIST) {
		fprintf(stderr, "loded: %s: %s\n", c->path, strerror(errno));
		return -errno;
	}
	mc.listen = listen;
	mc.state_dir = state;
	mc.engine_addr = c->listen;
	mc.ntargets = c->targets;
	mc.tls.cert = c->tls_cert[0] ? c->tls_cert : NULL;
	mc.tls.key = c->tls_key[0] ? c->tls_key : NULL;
	mc.cap_lifetime_s = c->cap_lifetime;
	mc.key_rotate_s = c->key_rotate;
	mc.admin_cred = cred;
	mc.heartbeat_ms = c->heartbeat_ms;
	mc.grace_ms = c->grace_ms;
	if ((rc = srv_engine_uuid(c->path, uuid, msg, sizeof(msg))) < 0) {
		fprintf(stderr, "loded: %s\n", msg);
		return rc;
	}
	mc.engine_uuid = uuid;
	rc = mgmt_start(&mc, &hooks, out, msg, sizeof(msg));
	if (rc == -EADDRINUSE && old_port) {
		srv_log("management service: port %u, its port before, is not free (%s): "
			"it takes any free port (clients connected before find it again)",
			old_port, msg[0] ? msg : lode_strerror(rc));
		snprintf(listen, sizeof(listen), "%s:0", host);
		rc = mgmt_start(&mc, &hooks, out, msg, sizeof(msg));
	}
	if (rc < 0) {
		fprintf(stderr, "loded: management service on %s: %s\n", listen,
			msg[0] ? msg : lode_strerror(rc));
		return rc;
	}
	if (port_file[0] && (unsigned)mgmt_port(*out) != old_port) {
		snprintf(text, sizeof(text), "%d", mgmt_port(*out));
		if (write_file(port_file, text) < 0)
			srv_log("cannot write %s: %s", port_file, strerror(errno));
	}
	snprintf(svc_listen, sizeof(svc_listen), "%s", listen);
	snprintf(svc_cred, sizeof(svc_cred), "%s", cred);
	s->keys = mgmt_keyring(*out);
	s->revoked = mgmt_revoked(*out);
	s->mgmt_port = (uint16_t)mgmt_port(*out);
	s->mgmt_tls = mc.tls.cert != NULL;
	addr_host(listen, host, sizeof(host));
	snprintf(text, sizeof(text), "%s:%d", host, mgmt_port(*out));
	srv_log("management service%s on %s (%s), state in %s",
		mc.nreplicas ? " replica" : "", text, s->mgmt_tls ? "TLS" : "plaintext", state);
	if (write_file(c->mgmt_addrfile, text) < 0)
		srv_log("cannot write %s: %s", c->mgmt_addrfile, strerror(errno));
	return 0;
}

/*
 * Join the system the management service at cfg->join runs, instead of
 * hosting one: keys, revocations and the map come from its heartbeats. The
 * welcome names the service's port, so clients of this engine reach it on
 * the same host (a multi-host system gives clients the service's address in
 * their credentials).
 */
static int member_host(struct srv *s, struct member **out)
{
	const char *port = strrchr(s->cfg->join, ':');
	char msg[512] = "";
	int rc;

	if ((rc = member_start(s, s->cfg->join, s->cfg->join_cred, false, out, msg, sizeof(msg))) <
	    0) {
		fprintf(stderr, "loded: %s\n", msg[0] ? msg : lode_strerror(rc));
		return rc;
	}
	s->mgmt_port = port ? (uint16_t)atoi(port + 1) : 0;
	s->mgmt_tls = s->cfg->join_ca[0] != 0;
	srv_log("member of the system whose management service is %s", s->cfg->join);
	return 0;
}

/*
 * A replica-hosting loded is an engine of its own service like any other:
 * it joins through its local replica (which redirects to the leader) with
 * join_cred, else the administrator's credentials the first leader writes,
 * while its targets verify with the local replica's (replicated) keyring.
 */
static int replica_member(struct srv *s, struct member **out)
{
	const struct srv_config *c = s->cfg;
	char join[300], jcred[4300], msg[512] = "";
	int rc;

	snprintf(join, sizeof(join), "%s", svc_listen);
	if (c->join_cred[0])
		snprintf(jcred, sizeof(jcred), "%s", c->join_cred);
	else
		snprintf(jcred, sizeof(jcred), "%s", svc_cred);
	if ((rc = member_start(s, join, jcred, true, out, msg, sizeof(msg))) < 0) {
		fprintf(stderr, "loded: joining the replicated service: %s\n",
			msg[0] ? msg : lode_strerror(rc));
		return rc;
	}
	srv_log("engine of the replicated service, joining through %s", join);
	return 0;
}

static int transports_of(const struct srv_config *c, uint32_t *bits)
{
	uint32_t want;
	int rc = net_transport_parse(c->transport, &want);

	if (rc < 0)
		return rc;
	*bits = net_transports_probe();
	if (want)
		*bits &= want;
	return *bits ? 0 : -EPROTONOSUPPORT;
}

int main(int argc, char **argv)
{
	static struct srv_config cfg;
	static struct srv s;
	mgmt_t *mgmt = NULL;
	struct member *member = NULL;
	struct sigaction sa = {0};
	char err[512], text[64];
	bool help = false, loopback;
	int lfd = -1, rc;

	srv_config_defaults(&cfg);
	if (srv_config_parse_args(&cfg, argc, argv, &help, err, sizeof(err)) < 0 ||
	    (!help && srv_config_check(&cfg, err, sizeof(err)) < 0)) {
		fprintf(stderr, "loded: %s\n", err);
		fprintf(stderr, "Try 'loded --help'.\n");
		return 2;
	}
	if (help) {
		srv_config_usage(stdout);
		return 0;
	}
	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return 1;
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	s.cfg = &cfg;
	atomic_init(&s.engine_id, -1); /* learnt when hosting or joining */
	if ((rc = transports_of(&cfg, &s.transports)) < 0) {
		fprintf(stderr, "loded: transport %s is not available on this host\n", cfg.transport);
		return 1;
	}
	s.bulk = strcmp(cfg.bulk, "rma") == 0 ? NET_BULK_RMA
		 : strcmp(cfg.bulk, "am") == 0 ? NET_BULK_AM
					       : 0;
	/* Listening on loopback means clients are on this host: tcp then runs over lo too. */
	{
		struct sockaddr_storage ss;
		socklen_t sl;

		loopback = net_addr_parse(cfg.listen, LODE_PORT_DEFAULT, &ss, &sl) == 0 &&
			   net_addr_is_loopback(&ss);
		s.listen_ss = ss;
	}
	if ((rc = net_context_create(s.transports, loopback, &s.ctx)) < 0) {
		fprintf(stderr, "loded: UCX: %s\n", lode_strerror(rc));
		return 1;
	}
	if ((rc = listen_on(cfg.listen, &lfd)) < 0) {
		fprintf(stderr, "loded: listen on %s: %s\n", cfg.listen, lode_strerror(rc));
		ucp_cleanup(s.ctx);
		return 1;
	}
	if (cfg.join[0] ? (rc = member_host(&s, &member)) < 0 : (rc = mgmt_host(&cfg, &s, &mgmt)) < 0) {
		close(lfd);
		ucp_cleanup(s.ctx);
		return 1;
	}
	if (cfg.mgmt_replicas[0] && replica_member(&s, &member) < 0) {
		mgmt_stop(mgmt);
		close(lfd);
		ucp_cleanup(s.ctx);
		return 1;
	}
	if (!cfg.join[0] && !cfg.mgmt_replicas[0])
		atomic_store(&s.engine_id, (int64_t)MGMT_HOST_ENGINE); /* it joins itself otherwise */
	if ((rc = srv_start(&s)) < 0) {
		fprintf(stderr, "loded: start: %s\n", lode_strerror(rc));
		member_stop(member);
		mgmt_stop(mgmt);
		close(lfd);
		ucp_cleanup(s.ctx);
		return 1;
	}
	atomic_store(&s.serving, true);
	{
		struct rebuild *rb = NULL;

		/* Copies need a system administrator's rights: the joining
		 * engine's credentials, or the administrator's file. */
		if (rebuild_start(&s, cfg.listen, cfg.join_cred[0] ? cfg.join_cred : svc_cred, &rb) == 0)
			atomic_store(&s.rebuild, rb);
		else
			srv_log("rebuild: no thread: this engine will not rebuild");
	}
	srv_log("serving %u target(s) from %s (%s) on %s, transports:%s%s%s", s.ntargets,
		cfg.path, cfg.ram ? "RAM" : "disk", cfg.listen,
		s.transports & NET_TP_TCP ? " tcp" : "", s.transports & NET_TP_SHM ? " shm" : "",
		s.transports & NET_TP_RDMA ? " rdma" : "");
	snprintf(text, sizeof(text), "%d", (int)getpid());
	if (write_file(cfg.pidfile, text) < 0 || write_file(cfg.addrfile, cfg.listen) < 0)
		srv_log("cannot write the pid or address file: %s", strerror(errno));

	for (;;) {
		struct pollfd pfd[2] = {{lfd, POLLIN, 0}, {sig_pipe[0], POLLIN, 0}};
		int fd;

		if (poll(pfd, 2, -1) < 0 && errno != EINTR)
			break;
		if (pfd[1].revents)
			break;
		if (!(pfd[0].revents & POLLIN))
			continue;
		/* At the greeters' limit, leave connections waiting in the backlog. */
		while (atomic_load(&greeters) >= GREETERS_MAX)
			usleep(1000);
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		greet_async(&s, fd);
	}
	srv_log("stopping: draining in-flight requests");
	close(lfd);
	/* Greeters read the targets' addresses: let them finish (each is bounded). */
	while (atomic_load(&greeters))
		usleep(10000);
	rebuild_stop(atomic_load(&s.rebuild)); /* its copies use the targets */
	srv_stop(&s);
	member_stop(member);
	mgmt_stop(mgmt);
	rebuild_free(atomic_load(&s.rebuild));
	ucp_cleanup(s.ctx);
	if (cfg.pidfile[0])
		unlink(cfg.pidfile);
	srv_log("stopped");
	return 0;
}
