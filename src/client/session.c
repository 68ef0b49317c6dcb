/*
 * The control-plane side of a connection: who we are and what we may do.
 *
 * lode_connect learns the management service's port from loded's welcome,
 * finds credentials (the caller's options, the environment, a credentials
 * file), and calls Connect: the answer is a capability for the pool, which
 * every request that names no container carries. Opening a container asks
 * the service for a capability scoped to it (OpenContainer); requests on
 * the container carry that one. Targets check them all (src/server).
 *
 * Capabilities expire within minutes, so they are renewed once two thirds
 * of their life has passed, by a thread of the connection's own that looks
 * four times a second: an idle client must not find its tokens expired (an
 * expired token cannot be renewed), and the request path stays free of the
 * clock read a check there would cost. Requests go on with the old token
 * meanwhile; it is still valid for a third of its life. A renewal that
 * fails (a revoked user, a service that is down) is retried a second
 * later; the requests themselves then report the target's verdict. A
 * token that expired meanwhile (the service away longer than that third)
 * is replaced by logging in again (conn_relogin), and a container's by
 * opening it again.
 *
 * Containers are named by the management service, which also keeps their
 * owners and properties; this file turns the container calls into its RPCs
 * and the targets' create and destroy.
 */
#include "client/client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "client/agent_client.h"
#include "common/clock.h"
#include "lode/mgmt/v1/mgmt.pb-c.h"
#include "mgmt/rpc.h"

#define M(name) "/lode.mgmt.v1.Mgmt/" name
#define RENEW_RETRY_MS 1000

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* When to renew a token that expires at exp, seen now. */
static int64_t renew_point(int64_t exp, int64_t now)
{
	return exp > now ? exp - (exp - now) / 3 : now;
}

/* ---- credentials ---------------------------------------------------------------- */

/* Trim spaces and a trailing newline in place; returns s. */
static char *trim(char *s)
{
	size_t n;

	while (*s == ' ' || *s == '\t')
		s++;
	n = strlen(s);
	while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
		s[--n] = 0;
	return s;
}

int cred_file_load(const char *path, struct conn_cred *cr)
{
	char line[1024];
	FILE *f = fopen(path, "r");
	int lineno = 0;

	if (!f)
		return -errno;
	setvbuf(f, NULL, _IONBF, 0); /* the secret in no buffer but line, wiped */
	while (fgets(line, sizeof(line), f)) {
		char *k = trim(line), *v = strchr(k, ':');

		lineno++;
		if (!*k || *k == '#')
			continue;
		if (!v) {
			fclose(f);
			explicit_bzero(line, sizeof(line));
			return -EINVAL;
		}
		*v++ = 0;
		v = trim(v);
		k = trim(k);
		if (strcmp(k, "user") == 0)
			snprintf(cr->user, sizeof(cr->user), "%s", v);
		else if (strcmp(k, "secret") == 0)
			snprintf(cr->secret, sizeof(cr->secret), "%s", v);
		else if (strcmp(k, "mgmt") == 0)
			snprintf(cr->mgmt, sizeof(cr->mgmt), "%s", v);
		else if (strcmp(k, "tls_ca") == 0)
			snprintf(cr->tls_ca, sizeof(cr->tls_ca), "%s", v);
		else if (strcmp(k, "pool") == 0)
			snprintf(cr->pool, sizeof(cr->pool), "%s", v);
		else if (strcmp(k, "tenant_key") == 0)
			snprintf(cr->tenant_key, sizeof(cr->tenant_key), "%s", v);
		/* Unknown keys are for newer versions: ignored. */
	}
	fclose(f);
	explicit_bzero(line, sizeof(line));
	return lineno ? 0 : -EINVAL;
}

/* Where the default credentials file is: $XDG_CONFIG_HOME or ~/.config. */
static void cred_default_path(char *out, size_t cap)
{
	const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");

	if (xdg && *xdg)
		snprintf(out, cap, "%s/lode/credentials", xdg);
	else
		snprintf(out, cap, "%s/.config/lode/credentials", home && *home ? home : "/root");
}

/*
 * The credentials to present: the options' user and secret, else
 * $LODE_USER and $LODE_SECRET, else the file $LODE_CREDENTIALS names, else
 * the default file. $LODE_MGMT, $LODE_TLS_CA and $LODE_POOL override the
 * file's other lines. Errors: -LODE_EAUTH (none found: conn_login then asks
 * the node's lode-agent, if its socket exists), -EINVAL (a file that does
 * not parse).
 */
static int cred_find(const struct lode_conn_opts *o, struct conn_cred *cr)
{
	const char *u = getenv("LODE_USER"), *s = getenv("LODE_SECRET"), *f = getenv("LODE_CREDENTIALS");
	const char *env;
	char path[PATH_MAX];
	int rc = 0;

	memset(cr, 0, sizeof(*cr));
	if (o && o->user && o->secret) {
		snprintf(cr->user, sizeof(cr->user), "%s", o->user);
		snprintf(cr->secret, sizeof(cr->secret), "%s", o->secret);
	} else if (u && *u && s) {
		snprintf(cr->user, sizeof(cr->user), "%s", u);
		snprintf(cr->secret, sizeof(cr->secret), "%s", s);
	} else {
		if (f && *f)
			snprintf(path, sizeof(path), "%s", f);
		else
			cred_default_path(path, sizeof(path));
		rc = cred_file_load(path, cr);
		if (rc == 0 && cr->mgmt[0])
			snprintf(cr->mgmt_file, sizeof(cr->mgmt_file), "%s", path);
		if (rc == -ENOENT && !(f && *f))
			rc = -LODE_EAUTH;
		else if (rc == -ENOENT)
			rc = -LODE_EAUTH; /* named but missing: nothing to present either */
		if (rc < 0) {
			explicit_bzero(cr->secret, sizeof(cr->secret)); /* a file half read */
			return rc;
		}
	}
	if ((env = getenv("LODE_MGMT")) && *env) {
		snprintf(cr->mgmt, sizeof(cr->mgmt), "%s", env);
		cr->mgmt_file[0] = '\0';
	}
	if ((env = getenv("LODE_TLS_CA")) && *env)
		snprintf(cr->tls_ca, sizeof(cr->tls_ca), "%s", env);
	if (o && o->pool && *o->pool)
		snprintf(cr->pool, sizeof(cr->pool), "%s", o->pool);
	else if ((env = getenv("LODE_POOL")) && *env)
		snprintf(cr->pool, sizeof(cr->pool), "%s", env);
	if (!cr->pool[0])
		snprintf(cr->pool, sizeof(cr->pool), "default");
	return cr->user[0] ? 0 : -LODE_EAUTH;
}

/* ---- RPCs ----------------------------------------------------------------------- */

/* Lode's code for a failed call: mostly rpc_status_errno, with a few
 * translations where the call says more than the status. */
static int call_errno(int st, int not_found)
{
	if (st == RPC_NOT_FOUND)
		return not_found;
	return rpc_status_errno(st);
}

/* Whether an answer says the replica called is gone: it did not answer in
 * time or could not be reached (a redirect or "no leader yet" comes from a
 * live one). */
static bool mgmt_gone(int st, const char *msg)
{
	char addr[256];

	return st == RPC_DEADLINE_EXCEEDED ||
	       (st == RPC_UNAVAILABLE && rpc_redirect_parse(msg, addr, sizeof(addr)) < 0);
}

/* Whether a call may go to another replica after this one failed to answer
 * it: it reads, or what it changes is harmless to do twice (a login, a
 * renewal, a container's capability). */
static bool mgmt_repeatable(const char *method)
{
	static const char *const tails[] = {"ListAll", "Query", "Get"};
	size_t n;

	if (strncmp(method, M(""), strlen(M(""))) != 0)
		return false;
	method += strlen(M(""));
	if (strcmp(method, "RenewCapability") == 0 || strcmp(method, "OpenContainer") == 0 ||
	    strcmp(method, "Connect") == 0)
		return true;
	n = strlen(method);
	for (size_t i = 0; i < sizeof(tails) / sizeof(tails[0]); i++)
		if (n > strlen(tails[i]) && strcmp(method + n - strlen(tails[i]), tails[i]) == 0)
			return true;
	return false;
}

/*
 * A replicated service's follower answers a call it must not serve with
 * UNAVAILABLE naming the leader, or saying there is none yet (src/mgmt
 * README, "Replication"): call the leader on a channel of its own for this
 * call (ch stays as it is: other threads use it), or wait a moment and
 * ask again; so is a leader named that does not answer, for a call that may
 * be done twice. For at least 12 tries and the timeout, then the last
 * answer stands. Only those answers are retried: they say the call was
 * not served at all (or that serving it twice is harmless). *gone:
 * the replica behind ch did not answer (mgmt_gone); not set when it did
 * and the leader it named is what failed.
 */
static int mgmt_try(rpc_channel_t *ch, unsigned timeout_ms, const char *method,
		    const ProtobufCMessage *req, const ProtobufCMessageDescriptor *rd,
		    const uint8_t *cap, ProtobufCMessage **rep, char *msg, size_t msg_cap,
		    bool *gone)
{
	rpc_channel_t *led = NULL;
	char leader[256];
	bool via_led = false;
	int64_t until = clock_mono_ms() + timeout_ms;
	int st;

	for (int try = 0;; try++) {
		int r;

		msg[0] = '\0';
		via_led = led != NULL;
		st = rpc_call(led ? led : ch, method, req, rd, cap, cap ? AUTH_CAP_SIZE : 0,
			      timeout_ms, rep, msg, msg_cap);
		/* An election takes a moment: at least 12 tries, and for up to
		 * the timeout. */
		if (st != RPC_UNAVAILABLE || (try >= 12 && clock_mono_ms() >= until))
			break;
		r = rpc_redirect_parse(msg, leader, sizeof(leader));
		if (r < 0 && via_led && mgmt_repeatable(method)) {
			/* The leader named did not answer: it may have just
			 * died, and the follower not know yet. A call that may be
			 * done twice asks the follower again, which names the
			 * next leader once one is elected. */
			rpc_channel_close(led);
			led = NULL;
			usleep(250000);
			continue;
		}
		/* Anything but a redirect or "no leader yet" may have done the
		 * change (a leader that failed mid-call, or one that could not
		 * commit): calling again could do it twice, so that answer stands. */
		if (r < 0)
			break;
		if (led)
			rpc_channel_close(led);
		led = NULL;
		if (r != 1 || rpc_channel_reopen(ch, leader, &led) < 0)
			usleep(250000); /* no leader yet */
	}
	if (led)
		rpc_channel_close(led);
	*gone = !via_led && mgmt_gone(st, msg);
	return st;
}

static int mgmt_addr(const struct sockaddr_storage *ss, unsigned port, const struct conn_cred *cr,
		     char *out, size_t cap);

/* Add addr to the addresses tried (unless there, or no room); its index. */
static int mgmt_alt_add(lode_conn_t *c, const char *addr)
{
	for (unsigned i = 0; i < c->nmgmt_alt; i++)
		if (strcmp(c->mgmt_alt[i].addr, addr) == 0)
			return (int)i;
	if (c->nmgmt_alt == CONN_MGMT_ALTS || strlen(addr) >= sizeof(c->mgmt_alt[0].addr))
		return -1;
	snprintf(c->mgmt_alt[c->nmgmt_alt].addr, sizeof(c->mgmt_alt[0].addr), "%s", addr);
	c->mgmt_alt[c->nmgmt_alt].ch = NULL;
	return (int)c->nmgmt_alt++;
}

/*
 * Where the management service is now, looked for the way login found it,
 * added to the addresses tried: the credentials file's mgmt line read
 * again (loded rewrites its admin file at each start), and the port a new
 * welcome names. A service of one loded that had to take another port at
 * its restart (src/server: only when its old one is taken) says so in
 * both. Nothing when login's address was given ($LODE_MGMT).
 */
static void mgmt_look(lode_conn_t *c)
{
	struct sockaddr_storage ss;
	struct conn_cred cr = {0};
	uint16_t port = 0;
	char addr[300];

	if (c->mgmt_file[0]) {
		if (cred_file_load(c->mgmt_file, &cr) == 0 && cr.mgmt[0])
			mgmt_alt_add(c, cr.mgmt);
		explicit_bzero(&cr, sizeof(cr));
	}
	if ((c->mgmt_file[0] || c->mgmt_welcome) && conn_mgmt_port_ask(c, &ss, &port) == 0 &&
	    mgmt_addr(&ss, port, &cr, addr, sizeof(addr)) == 0)
		mgmt_alt_add(c, addr);
}

/*
 * The replica behind ch failed to answer a call that may be repeated: call
 * the other addresses in turn, then where the service is now (mgmt_look),
 * and make the first that answers the connection's channel. The threads
 * take turns (mgmt_lock); one that finds another moved on calls there, and
 * one that finds a failover ended while it waited, without finding the
 * service, gives up with its own answer. Addresses are tried for at most
 * three timeouts. Returns the last status.
 */
static int mgmt_failover(lode_conn_t *c, rpc_channel_t *ch, unsigned gen, const char *method,
			 const ProtobufCMessage *req, const ProtobufCMessageDescriptor *rd,
			 const uint8_t *cap, ProtobufCMessage **rep, int st, char *msg,
			 size_t msg_cap)
{
	int64_t until = clock_mono_ms() + 3 * (int64_t)c->timeout_ms;
	rpc_channel_t *cur;
	bool looked = false, gone;

	pthread_mutex_lock(&c->mgmt_lock);
	cur = __atomic_load_n(&c->mgmt, __ATOMIC_ACQUIRE);
	if (cur != ch) {
		pthread_mutex_unlock(&c->mgmt_lock);
		return mgmt_try(cur, c->timeout_ms, method, req, rd, cap, rep, msg, msg_cap, &gone);
	}
	if (c->mgmt_gen != gen) {
		pthread_mutex_unlock(&c->mgmt_lock);
		return st;
	}
	for (unsigned i = 0; clock_mono_ms() < until; i++) {
		struct conn_mgmt_alt *a;

		if (i == c->nmgmt_alt && !looked) {
			looked = true;
			mgmt_look(c);
		}
		if (i >= c->nmgmt_alt)
			break;
		a = &c->mgmt_alt[i];
		if (a->ch == ch || (!a->ch && rpc_channel_reopen(ch, a->addr, &a->ch) < 0))
			continue;
		st = mgmt_try(a->ch, c->timeout_ms, method, req, rd, cap, rep, msg, msg_cap, &gone);
		if (!gone) {
			__atomic_store_n(&c->mgmt, a->ch, __ATOMIC_RELEASE);
			break;
		}
	}
	c->mgmt_gen++;
	pthread_mutex_unlock(&c->mgmt_lock);
	return st;
}

static int mgmt_call(lode_conn_t *c, const char *method, const ProtobufCMessage *req,
		     const ProtobufCMessageDescriptor *rd, const uint8_t *cap, ProtobufCMessage **rep,
		     int not_found)
{
	rpc_channel_t *ch = __atomic_load_n(&c->mgmt, __ATOMIC_ACQUIRE);
	unsigned gen;
	char msg[256] = "";
	bool gone;
	int st;

	pthread_mutex_lock(&c->mgmt_lock);
	gen = c->mgmt_gen;
	pthread_mutex_unlock(&c->mgmt_lock);
	st = mgmt_try(ch, c->timeout_ms, method, req, rd, cap, rep, msg, sizeof(msg), &gone);
	if (gone && mgmt_repeatable(method)) {
		st = mgmt_failover(c, ch, gen, method, req, rd, cap, rep, st, msg, sizeof(msg));
	} else if (gone && cap) {
		/* A change is not sent twice, but the next call should not find
		 * the same dead replica: look for the service with a read. */
		Lode__Mgmt__V1__Empty e = LODE__MGMT__V1__EMPTY__INIT;
		ProtobufCMessage *map = NULL;
		char m2[256];

		mgmt_failover(c, ch, gen, M("PoolMapGet"), &e.base,
			      &lode__mgmt__v1__pool_map__descriptor, cap, &map, st, m2, sizeof(m2));
		if (map)
			protobuf_c_message_free_unpacked(map, NULL);
	}
	if (st != RPC_OK) {
		snprintf(c->mgmt_err, sizeof(c->mgmt_err), "%s: %s", method + 19, msg);
		return call_errno(st, not_found);
	}
	return 0;
}

static int token_take(const ProtobufCBinaryData *b, uint8_t *out)
{
	if (b->len != AUTH_CAP_SIZE)
		return -EPROTO;
	memcpy(out, b->data, AUTH_CAP_SIZE);
	return 0;
}

/* A copy of the pool-wide token, to call with outside the lock. */
static void pool_tok(lode_conn_t *c, uint8_t *out)
{
	pthread_mutex_lock(&c->lock);
	memcpy(out, c->tok, AUTH_CAP_SIZE);
	pthread_mutex_unlock(&c->lock);
}

/* The management address: the credentials' or the environment's, else the
 * host we bootstrapped from with the port its welcome named. */
static int mgmt_addr(const struct sockaddr_storage *ss, unsigned port, const struct conn_cred *cr,
		     char *out, size_t cap)
{
	char ip[INET6_ADDRSTRLEN];

	if (cr->mgmt[0]) {
		snprintf(out, cap, "%s", cr->mgmt);
		return 0;
	}
	if (!port)
		return -EPROTONOSUPPORT;
	if (ss->ss_family == AF_INET6) {
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ss)->sin6_addr, ip, sizeof(ip));
		snprintf(out, cap, "[%s]:%u", ip, port);
	} else {
		inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, ip, sizeof(ip));
		snprintf(out, cap, "%s:%u", ip, port);
	}
	return 0;
}

static void *renewer_main(void *arg)
{
	lode_conn_t *c = arg;
	struct timespec until;

	pthread_setname_np(pthread_self(), "lode-renew");
	pthread_mutex_lock(&c->renewer_lock);
	while (!c->renewer_stop) {
		clock_mono_after(&until, 250);
		pthread_cond_timedwait(&c->renewer_cond, &c->renewer_lock, &until);
		if (c->renewer_stop)
			break;
		pthread_mutex_unlock(&c->renewer_lock);
		if (!conn_expired(c)) { /* nothing left to renew */
			conn_caps_renew(c, false);
			conn_map_refresh(c);
			conn_engines_catch_up(c);
		}
		pthread_mutex_lock(&c->renewer_lock);
	}
	pthread_mutex_unlock(&c->renewer_lock);
	return NULL;
}

/*
 * Who we are: the credentials cred_find gives (*cr), or with none of our
 * own the node's lode-agent, if one runs, which vouches for this process
 * by its uid (src/agent). The agent's answer is the service's own Connect
 * reply (*rep), used as ours would be; renewals then go to the service
 * directly, since renewing needs only the token.
 */
static int login_who(lode_conn_t *c, const struct lode_conn_opts *o, struct conn_cred *cr,
		     Lode__Mgmt__V1__ConnectReply **rep, bool *via_agent)
{
	char agent[PATH_MAX];
	const char *env;
	int rc = cred_find(o, cr);

	*via_agent = rc == -LODE_EAUTH;
	if (rc == -LODE_EAUTH && agent_socket_find(agent, sizeof(agent)) == 0) {
		memset(cr, 0, sizeof(*cr));
		if ((env = getenv("LODE_MGMT")) && *env)
			snprintf(cr->mgmt, sizeof(cr->mgmt), "%s", env);
		if ((env = getenv("LODE_TLS_CA")) && *env)
			snprintf(cr->tls_ca, sizeof(cr->tls_ca), "%s", env);
		env = getenv("LODE_POOL");
		snprintf(cr->pool, sizeof(cr->pool), "%s",
			 o && o->pool && *o->pool ? o->pool : env && *env ? env : "default");
		rc = agent_connect(agent, cr->pool, c->timeout_ms, rep, c->mgmt_err,
				   sizeof(c->mgmt_err));
		/* An agent that is gone leaves us where we were: no credentials
		 * (its words stay in mgmt_err). */
		if (rc == -ECONNREFUSED || rc == -ECONNRESET)
			rc = -LODE_EAUTH;
	}
	return rc;
}

/* Connect as cr, unless the agent answered already (*rep). */
static int login_connect(lode_conn_t *c, const struct conn_cred *cr,
			 Lode__Mgmt__V1__ConnectReply **rep)
{
	Lode__Mgmt__V1__ConnectRequest req = LODE__MGMT__V1__CONNECT_REQUEST__INIT;

	if (*rep)
		return 0;
	req.user = (char *)cr->user;
	req.secret.data = (uint8_t *)cr->secret;
	req.secret.len = strlen(cr->secret);
	req.pool = (char *)cr->pool;
	return mgmt_call(c, M("Connect"), &req.base, &lode__mgmt__v1__connect_reply__descriptor,
			 NULL, (ProtobufCMessage **)rep, -ENOENT);
}

/* Take a Connect reply's pool-wide token. */
static int login_take(lode_conn_t *c, const Lode__Mgmt__V1__ConnectReply *rep)
{
	uint8_t tok[AUTH_CAP_SIZE];
	int rc = token_take(&rep->capability, tok);

	if (rc < 0)
		return rc;
	pthread_mutex_lock(&c->lock);
	memcpy(c->tok, tok, sizeof(tok));
	c->tok_expires_ms = rep->expires_unix_ms;
	pthread_mutex_unlock(&c->lock);
	explicit_bzero(tok, sizeof(tok));
	atomic_store(&c->renew_at_ms, renew_point(rep->expires_unix_ms, now_ms()));
	return 0;
}

int conn_login(lode_conn_t *c, const struct sockaddr_storage *server, const struct net_welcome *w,
	       const struct lode_conn_opts *o)
{
	Lode__Mgmt__V1__ConnectReply *rep = NULL;
	struct conn_cred cr;
	struct rpc_tls tls = {0};
	char addr[300];
	int rc;

	if ((rc = login_who(c, o, &cr, &rep, &c->login_agent)) < 0)
		return rc;
	if ((rc = mgmt_addr(server, w->mgmt_port, &cr, addr, sizeof(addr))) < 0)
		goto out;
	tls.ca = cr.tls_ca[0] ? cr.tls_ca : NULL;
	if ((rc = rpc_channel_open(addr, w->mgmt_tls ? &tls : NULL, &c->mgmt)) < 0)
		goto out;
	if (mgmt_alt_add(c, addr) != 0) { /* the list is empty, addr short: never */
		rpc_channel_close(c->mgmt);
		c->mgmt = NULL;
		rc = -ENAMETOOLONG;
		goto out;
	}
	c->mgmt_alt[0].ch = c->mgmt;
	c->mgmt_welcome = !cr.mgmt[0];
	snprintf(c->mgmt_file, sizeof(c->mgmt_file), "%s", cr.mgmt_file);
	snprintf(c->pool, sizeof(c->pool), "%s", cr.pool);
	c->cred_given = o && o->user && o->secret;
	if ((rc = login_connect(c, &cr, &rep)) < 0 || (rc = login_take(c, rep)) < 0)
		goto out;
	if (rep->pool_uuid.len == sizeof(c->pool_uuid.b))
		memcpy(c->pool_uuid.b, rep->pool_uuid.data, sizeof(c->pool_uuid.b));
	snprintf(c->user, sizeof(c->user), "%s", rep->user);
	snprintf(c->tenant, sizeof(c->tenant), "%s", rep->tenant);
	for (size_t i = 0; i < rep->n_mgmt_replicas; i++)
		mgmt_alt_add(c, rep->mgmt_replicas[i]);
	if (rep->map) {
		atomic_store(&c->map_ver, rep->map->version);
		conn_map_take(c, rep->map);
	}
	if (pthread_create(&c->renewer, NULL, renewer_main, c) == 0)
		c->renewer_running = true;
out:
	explicit_bzero(cr.secret, sizeof(cr.secret));
	if (rep)
		protobuf_c_message_free_unpacked(&rep->base, NULL);
	return rc;
}

/*
 * The connection's capability expired while the service was away (longer
 * than a third of its life): log in again the way lode_connect did, as the
 * same user of the same pool. The credentials are found again (the file,
 * the environment, the node's agent); a secret the caller passed in
 * lode_conn_opts is not kept, so such a connection cannot
 * (-LODE_ECAPEXPIRED). The new login has a new client id, which the
 * targets' sessions are bound to: every engine is dropped and connected
 * again with it (conn_engines_drop). The containers' tokens are opened
 * again by conn_caps_renew. Errors: login's; -EACCES for another user or
 * pool than before.
 */
static int conn_relogin(lode_conn_t *c)
{
	struct lode_conn_opts o = {.pool = c->pool};
	Lode__Mgmt__V1__ConnectReply *rep = NULL;
	struct conn_cred cr;
	bool via_agent;
	int rc;

	if (c->cred_given) {
		snprintf(c->mgmt_err, sizeof(c->mgmt_err),
			 "its secret was passed in, and is not kept to log in again");
		return -LODE_ECAPEXPIRED;
	}
	rc = login_who(c, &o, &cr, &rep, &via_agent);
	/* An agent that is not there (yet) is not a refusal: it may come back
	 * with the node, as the service does. */
	if (rc < 0 && c->login_agent && via_agent && !rep)
		rc = rc == -LODE_EAUTH || rc == -ENOENT ? -EAGAIN : rc;
	if (rc == 0)
		rc = login_connect(c, &cr, &rep);
	if (rc == 0 && (strcmp(rep->user, c->user) != 0 || strcmp(rep->tenant, c->tenant) != 0 ||
			rep->pool_uuid.len != sizeof(c->pool_uuid.b) ||
			memcmp(rep->pool_uuid.data, c->pool_uuid.b, sizeof(c->pool_uuid.b)) != 0)) {
		snprintf(c->mgmt_err, sizeof(c->mgmt_err),
			 "logging in again: the credentials now name %s/%s or another pool",
			 rep->tenant, rep->user);
		rc = -EACCES;
	}
	if (rc == 0) {
		/* The new login's client id binds new sessions: the old ones go
		 * first, then the token every new one is made with. */
		conn_engines_drop(c);
		rc = login_take(c, rep);
	}
	if (rc == 0) {
		pthread_mutex_lock(&c->mgmt_lock);
		for (size_t i = 0; i < rep->n_mgmt_replicas; i++)
			mgmt_alt_add(c, rep->mgmt_replicas[i]);
		pthread_mutex_unlock(&c->mgmt_lock);
		/* Every container's token names the old client id: open each
		 * again (conn_caps_renew), whatever its expiry. */
		pthread_mutex_lock(&c->lock);
		for (unsigned i = 0; i < c->ncaps; i++)
			c->caps[i].expires_ms = 1;
		pthread_mutex_unlock(&c->lock);
	}
	explicit_bzero(cr.secret, sizeof(cr.secret));
	if (rep)
		protobuf_c_message_free_unpacked(&rep->base, NULL);
	return rc;
}

/* Whether a login's failure is for good: refused, or nothing to log in with. */
static bool login_refused(int rc)
{
	return rc == -LODE_ECAPEXPIRED || rc == -LODE_EAUTH || rc == -EACCES || rc == -ENOENT ||
	       rc == -EPROTO || rc == -EINVAL;
}

/*
 * Fetch the map and install it (place.c), which places the requests parked
 * as stale again.
 */
int conn_map_fetch(lode_conn_t *c)
{
	Lode__Mgmt__V1__Empty req = LODE__MGMT__V1__EMPTY__INIT;
	Lode__Mgmt__V1__PoolMap *map = NULL;
	struct layout_map *m = NULL;
	uint8_t tok[AUTH_CAP_SIZE];
	int rc;

	pool_tok(c, tok);
	rc = mgmt_call(c, M("PoolMapGet"), &req.base, &lode__mgmt__v1__pool_map__descriptor, tok,
		       (ProtobufCMessage **)&map, -ENOENT);
	explicit_bzero(tok, sizeof(tok));
	if (rc < 0)
		return rc;
	if (!c->map_local && conn_map_decode(map, &m) < 0)
		m = NULL;
	if (m)
		conn_engines_note(c, map);
	if (c->map_local && map->version > atomic_load(&c->map_ver))
		atomic_store(&c->map_ver, map->version);
	protobuf_c_message_free_unpacked(&map->base, NULL);
	conn_map_install(c, m);
	return 0;
}

/* A fetch that fails leaves the requests parked and the wish for a map
 * standing, for the next turn of the renewer (250 ms). */
void conn_map_refresh(lode_conn_t *c)
{
	uint32_t want = atomic_exchange(&c->map_want, 0), cur = 0;

	if (want != 0 && conn_map_fetch(c) < 0)
		atomic_compare_exchange_strong(&c->map_want, &cur, want);
}

void conn_renewer_stop(lode_conn_t *c)
{
	if (c->renewer_running) {
		pthread_mutex_lock(&c->renewer_lock);
		c->renewer_stop = true;
		pthread_cond_signal(&c->renewer_cond);
		pthread_mutex_unlock(&c->renewer_lock);
		pthread_join(c->renewer, NULL);
		c->renewer_running = false;
	}
}

void conn_logout(lode_conn_t *c)
{
	conn_renewer_stop(c);
	for (unsigned i = 0; i < c->nmgmt_alt; i++)
		if (c->mgmt_alt[i].ch)
			rpc_channel_close(c->mgmt_alt[i].ch);
	memset(c->mgmt_alt, 0, sizeof(c->mgmt_alt));
	c->nmgmt_alt = 0;
	c->mgmt = NULL;
	free(c->caps);
	c->caps = NULL;
	c->ncaps = 0;
	explicit_bzero(c->tok, sizeof(c->tok));
}

const char *conn_mgmt_error(const lode_conn_t *c)
{
	return c->mgmt_err;
}

const char *conn_pool(const lode_conn_t *c)
{
	return c->pool;
}

int conn_mgmt_call(lode_conn_t *c, const char *method, const ProtobufCMessage *req,
		   const ProtobufCMessageDescriptor *reply_desc, ProtobufCMessage **reply,
		   int not_found)
{
	uint8_t tok[AUTH_CAP_SIZE];

	conn_caps_renew(c, false);
	pool_tok(c, tok);
	return mgmt_call(c, method, req, reply_desc, tok, reply, not_found);
}

/* ---- tokens on requests --------------------------------------------------------- */

static struct conn_cap *cap_find(lode_conn_t *c, const struct lode_uuid *cont)
{
	for (unsigned i = 0; i < c->ncaps; i++)
		if (memcmp(&c->caps[i].cont, cont, sizeof(*cont)) == 0)
			return &c->caps[i];
	return NULL;
}

size_t conn_cap_put(lode_conn_t *c, uint16_t op, const struct lode_uuid *cont, uint8_t *out)
{
	const uint8_t *tok = c->tok;

	if (net_op_fields(op) & NET_FLD_CONT) {
		struct conn_cap *cc = cap_find(c, cont);

		if (!cc)
			return 0; /* not opened here: the target says so (-LODE_ECAPMISSING) */
		tok = cc->tok;
	}
	memcpy(out, tok, AUTH_CAP_SIZE);
	return AUTH_CAP_SIZE;
}

/* Renew one token; fills tok and *exp. */
static int renew_one(lode_conn_t *c, const uint8_t *old, uint8_t *tok, int64_t *exp)
{
	Lode__Mgmt__V1__RenewRequest req = LODE__MGMT__V1__RENEW_REQUEST__INIT;
	Lode__Mgmt__V1__RenewReply *rep = NULL;
	int rc;

	req.capability.data = (uint8_t *)old;
	req.capability.len = AUTH_CAP_SIZE;
	rc = mgmt_call(c, M("RenewCapability"), &req.base, &lode__mgmt__v1__renew_reply__descriptor,
		       old, (ProtobufCMessage **)&rep, -ENOENT);
	if (rc < 0)
		return rc;
	rc = token_take(&rep->capability, tok);
	*exp = rep->expires_unix_ms;
	protobuf_c_message_free_unpacked(&rep->base, NULL);
	return rc;
}

static int cont_open(lode_conn_t *c, const char *label, const uint8_t *ctok,
		     Lode__Mgmt__V1__OpenContainerReply **rep);

/* Give container cont the token tok until exp; renew it by next. Lock held. */
static void cap_tok_set(lode_conn_t *c, const struct lode_uuid *cont, const uint8_t *tok,
			int64_t exp, int64_t now, int64_t *next)
{
	struct conn_cap *cc = cap_find(c, cont);

	if (!cc)
		return; /* closed meanwhile */
	memcpy(cc->tok, tok, AUTH_CAP_SIZE);
	cc->expires_ms = exp;
	if (renew_point(exp, now) < *next)
		*next = renew_point(exp, now);
}

/* A container's token that expired: open the container again by its label
 * (the same one: another by that name now is -LODE_ENOCONT). */
static int cap_reopen(lode_conn_t *c, const char *label, const struct lode_uuid *cont,
		      uint8_t *tok, int64_t *exp)
{
	Lode__Mgmt__V1__OpenContainerReply *rep = NULL;
	uint8_t ctok[AUTH_CAP_SIZE];
	int rc;

	pool_tok(c, ctok);
	rc = cont_open(c, label, ctok, &rep);
	explicit_bzero(ctok, sizeof(ctok));
	if (rc < 0)
		return rc;
	if (!rep->info || rep->info->uuid.len != sizeof(cont->b))
		rc = -EPROTO;
	else if (memcmp(rep->info->uuid.data, cont->b, sizeof(cont->b)) != 0)
		rc = -LODE_ENOCONT;
	else if ((rc = token_take(&rep->capability, tok)) == 0)
		*exp = rep->expires_unix_ms;
	protobuf_c_message_free_unpacked(&rep->base, NULL);
	return rc;
}

void conn_caps_renew(lode_conn_t *c, bool force)
{
	uint8_t old[AUTH_CAP_SIZE], tok[AUTH_CAP_SIZE];
	int64_t now = now_ms(), exp, next;
	int rc;

	if (!__atomic_load_n(&c->mgmt, __ATOMIC_ACQUIRE) ||
	    (!force && now < atomic_load(&c->renew_at_ms)))
		return;
	if (pthread_mutex_trylock(&c->renew_lock) != 0)
		return; /* another thread renews; the old tokens are still good */
	pool_tok(c, old);
	if ((rc = renew_one(c, old, tok, &exp)) == 0) {
		pthread_mutex_lock(&c->lock);
		memcpy(c->tok, tok, sizeof(tok));
		c->tok_expires_ms = exp;
		next = renew_point(exp, now);
		pthread_mutex_unlock(&c->lock);
	} else {
		pthread_mutex_lock(&c->lock);
		exp = c->tok_expires_ms;
		pthread_mutex_unlock(&c->lock);
		/* An expired token cannot be renewed, nor a map fetched with it
		 * (the service refuses it, or our clock says so while the
		 * service is away): log in again. While that cannot be done now
		 * (the service or the agent away) it is tried every second; if
		 * it cannot be done at all (credentials passed in or gone, a
		 * user revoked), the connection could never serve again: say
		 * so, rather than leave its calls failing for ever. */
		if (rc == -LODE_EAUTH || (exp > 0 && now >= exp))
			rc = conn_relogin(c);
		else
			rc = -EAGAIN;
		if (rc < 0) {
			if (login_refused(rc))
				conn_expire(c, rc);
			atomic_store(&c->renew_at_ms, now + RENEW_RETRY_MS);
			explicit_bzero(old, sizeof(old));
			explicit_bzero(tok, sizeof(tok));
			pthread_mutex_unlock(&c->renew_lock);
			return;
		}
		pthread_mutex_lock(&c->lock);
		next = renew_point(c->tok_expires_ms, now);
		pthread_mutex_unlock(&c->lock);
	}
	/* Container tokens: one at a time, the list may change between them.
	 * One that expired is opened again (after a login again, every one);
	 * one whose container is gone or no longer granted is left to fail
	 * on its own handle. */
	for (unsigned i = 0;; i++) {
		struct lode_uuid cont;
		char label[LODE_LABEL_MAX + 1];
		int64_t cexp;
		bool expired;

		pthread_mutex_lock(&c->lock);
		while (i < c->ncaps && c->caps[i].dead)
			i++;
		if (i >= c->ncaps) {
			pthread_mutex_unlock(&c->lock);
			break;
		}
		cont = c->caps[i].cont;
		snprintf(label, sizeof(label), "%s", c->caps[i].label);
		memcpy(old, c->caps[i].tok, sizeof(old));
		expired = c->caps[i].expires_ms > 0 && now >= c->caps[i].expires_ms;
		pthread_mutex_unlock(&c->lock);
		rc = expired ? cap_reopen(c, label, &cont, tok, &cexp)
			     : renew_one(c, old, tok, &cexp);
		pthread_mutex_lock(&c->lock);
		if (rc == 0) {
			cap_tok_set(c, &cont, tok, cexp, now, &next);
		} else if (expired && login_refused(rc == -LODE_ENOCONT ? -ENOENT : rc)) {
			struct conn_cap *cc = cap_find(c, &cont);

			if (cc)
				cc->dead = true;
		} else {
			next = now + RENEW_RETRY_MS;
		}
		pthread_mutex_unlock(&c->lock);
		if (rc == -ETIMEDOUT || rc == -ECONNREFUSED)
			break; /* the service is gone: the rest in a second */
	}
	explicit_bzero(old, sizeof(old));
	explicit_bzero(tok, sizeof(tok));
	atomic_store(&c->renew_at_ms, next);
	pthread_mutex_unlock(&c->renew_lock);
}

/* ---- containers ----------------------------------------------------------------- */

/* Register tok for cont (a second open of one container shares the entry). Lock held. */
static int cap_add(lode_conn_t *c, const struct lode_uuid *cont, const char *label,
		   const uint8_t *tok, int64_t exp)
{
	struct conn_cap *cc = cap_find(c, cont);

	if (!cc) {
		if (c->ncaps == c->caps_cap) {
			unsigned n = c->caps_cap ? c->caps_cap * 2 : 8;
			struct conn_cap *v = realloc(c->caps, n * sizeof(*v));

			if (!v)
				return -ENOMEM;
			c->caps = v;
			c->caps_cap = n;
		}
		cc = &c->caps[c->ncaps++];
		memset(cc, 0, sizeof(*cc));
		cc->cont = *cont;
		snprintf(cc->label, sizeof(cc->label), "%s", label);
	}
	memcpy(cc->tok, tok, AUTH_CAP_SIZE);
	cc->expires_ms = exp;
	cc->dead = false;
	cc->refs++;
	if (renew_point(exp, now_ms()) < atomic_load(&c->renew_at_ms))
		atomic_store(&c->renew_at_ms, renew_point(exp, now_ms()));
	return 0;
}

void conn_cont_release(lode_conn_t *c, const struct lode_uuid *cont)
{
	struct conn_cap *cc;

	pthread_mutex_lock(&c->lock);
	if ((cc = cap_find(c, cont)) && --cc->refs == 0) {
		explicit_bzero(cc->tok, sizeof(cc->tok));
		*cc = c->caps[--c->ncaps];
	}
	pthread_mutex_unlock(&c->lock);
}

/* OpenContainer label with the pool-wide token ctok. */
static int cont_open(lode_conn_t *c, const char *label, const uint8_t *ctok,
		     Lode__Mgmt__V1__OpenContainerReply **rep)
{
	Lode__Mgmt__V1__ContRef req = LODE__MGMT__V1__CONT_REF__INIT;

	req.pool = c->pool;
	req.label = (char *)label;
	return mgmt_call(c, M("OpenContainer"), &req.base,
			 &lode__mgmt__v1__open_container_reply__descriptor, ctok,
			 (ProtobufCMessage **)rep, -LODE_ENOCONT);
}

int conn_cont_acquire(lode_conn_t *c, const char *label, struct lode_uuid *uuid,
		      struct conn_cont_info *info)
{
	Lode__Mgmt__V1__OpenContainerReply *rep = NULL;
	uint8_t tok[AUTH_CAP_SIZE], ctok[AUTH_CAP_SIZE];
	int rc;

	conn_caps_renew(c, false);
	pool_tok(c, ctok);
	if ((rc = cont_open(c, label, ctok, &rep)) < 0)
		return rc;
	if (!rep->info || rep->info->uuid.len != sizeof(uuid->b))
		rc = -EPROTO;
	if (rc == 0)
		rc = token_take(&rep->capability, tok);
	if (rc == 0) {
		memcpy(uuid->b, rep->info->uuid.data, sizeof(uuid->b));
		if (info) {
			memset(info, 0, sizeof(*info));
			info->rights = rep->rights;
			if (rep->info->props) {
				info->chunk_size = rep->info->props->chunk_size;
				info->encryption = rep->info->props->encryption;
				info->crypt_block = rep->info->props->crypt_block;
				if (rep->info->props->object_class)
					snprintf(info->object_class, sizeof(info->object_class),
						 "%s", rep->info->props->object_class);
			}
			/* Opaque here: crypt_cont_init checks its length. */
			if (rep->info->wrapped_key.len <= sizeof(info->wrapped_key)) {
				if (rep->info->wrapped_key.len)
					memcpy(info->wrapped_key, rep->info->wrapped_key.data,
					       rep->info->wrapped_key.len);
				info->wrapped_len = rep->info->wrapped_key.len;
			} else {
				info->wrapped_len = SIZE_MAX; /* never a wrapped key */
			}
		}
		pthread_mutex_lock(&c->lock);
		rc = cap_add(c, uuid, label, tok, rep->expires_unix_ms);
		pthread_mutex_unlock(&c->lock);
	}
	protobuf_c_message_free_unpacked(&rep->base, NULL);
	return rc;
}

int conn_cont_unregister(lode_conn_t *c, const char *label)
{
	Lode__Mgmt__V1__ContRef req = LODE__MGMT__V1__CONT_REF__INIT;
	ProtobufCMessage *rep = NULL;
	uint8_t ctok[AUTH_CAP_SIZE];
	int rc;

	pool_tok(c, ctok);
	req.pool = c->pool;
	req.label = (char *)label;
	rc = mgmt_call(c, M("ContDestroy"), &req.base, &lode__mgmt__v1__cont_info__descriptor, ctok,
		       &rep, -LODE_ENOCONT);
	if (rep)
		protobuf_c_message_free_unpacked(rep, NULL);
	return rc;
}

int conn_cont_names(lode_conn_t *c, char (*labels)[LODE_LABEL_MAX + 1], unsigned max)
{
	Lode__Mgmt__V1__PoolRef req = LODE__MGMT__V1__POOL_REF__INIT;
	Lode__Mgmt__V1__ContList *rep = NULL;
	uint8_t ctok[AUTH_CAP_SIZE];
	int rc;

	conn_caps_renew(c, false);
	pool_tok(c, ctok);
	req.label = c->pool;
	rc = mgmt_call(c, M("ContListAll"), &req.base, &lode__mgmt__v1__cont_list__descriptor, ctok,
		       (ProtobufCMessage **)&rep, -ENOENT);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < rep->n_containers && i < max; i++)
		snprintf(labels[i], LODE_LABEL_MAX + 1, "%s", rep->containers[i]->label);
	rc = (int)rep->n_containers;
	protobuf_c_message_free_unpacked(&rep->base, NULL);
	return rc;
}
