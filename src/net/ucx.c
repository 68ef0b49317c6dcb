/*
 * UCX setup shared by loded and liblode, and the bootstrap socket.
 *
 * Transports are chosen at run time: one setting names them and this file
 * turns it into UCX's TLS list, so the same code path runs over rdma, shm and
 * tcp. A client reaching a loopback address restricts tcp to the loopback
 * device; otherwise UCX would also offer the host's external interfaces.
 */
#include "net/net.h"

#include <ucs/debug/log_def.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const struct {
	uint32_t bit;
	const char *name;
	const char *tls;
} transports[] = {
	{NET_TP_TCP, "tcp", "tcp"},
	{NET_TP_SHM, "shm", "sysv,posix,cma"},
	{NET_TP_RDMA, "rdma", "rc,ud,dc"},
};

#define NTRANSPORTS (sizeof(transports) / sizeof(transports[0]))

int net_transport_parse(const char *name, uint32_t *bits_out)
{
	if (!name || !bits_out)
		return -EFAULT;
	if (strcmp(name, "auto") == 0) {
		*bits_out = 0;
		return 0;
	}
	for (size_t i = 0; i < NTRANSPORTS; i++) {
		if (strcmp(name, transports[i].name) == 0) {
			*bits_out = transports[i].bit;
			return 0;
		}
	}
	return -EPROTONOSUPPORT;
}

const char *net_transport_name(uint32_t bit)
{
	for (size_t i = 0; i < NTRANSPORTS; i++)
		if (transports[i].bit == bit)
			return transports[i].name;
	return "auto";
}

int net_ucs_errno(ucs_status_t st)
{
	switch (st) {
	case UCS_OK:
		return 0;
	case UCS_ERR_NO_MEMORY:
		return -ENOMEM;
	case UCS_ERR_INVALID_PARAM:
		return -EINVAL;
	case UCS_ERR_UNREACHABLE:
	case UCS_ERR_NO_DEVICE:
	case UCS_ERR_UNSUPPORTED:
		return -EPROTONOSUPPORT;
	case UCS_ERR_TIMED_OUT:
	case UCS_ERR_ENDPOINT_TIMEOUT:
		return -ETIMEDOUT;
	case UCS_ERR_CONNECTION_RESET:
	case UCS_ERR_NOT_CONNECTED:
		return -ECONNRESET;
	case UCS_ERR_CANCELED:
		return -ECANCELED;
	case UCS_ERR_MESSAGE_TRUNCATED:
		return -EMSGSIZE;
	case UCS_ERR_REJECTED:
		return -ECONNREFUSED;
	case UCS_ERR_BUSY:
		return -EBUSY;
	default:
		return -EIO;
	}
}

static int tls_string(uint32_t bits, char *out, size_t cap)
{
	size_t off = 0;

	out[0] = 0;
	for (size_t i = 0; i < NTRANSPORTS; i++) {
		if (!(bits & transports[i].bit))
			continue;
		int n = snprintf(out + off, cap - off, "%s%s", off ? "," : "", transports[i].tls);
		if (n < 0 || (size_t)n >= cap - off)
			return -EINVAL;
		off += (size_t)n;
	}
	return 0;
}

/*
 * Defaults for UCX's transports, set in the environment before any
 * context is read: UCX 1.13 accepts these keys through ucp_config_modify but
 * does not apply them to the transport (an abort below kept its rate with
 * the key set that way). A value the user exported wins.
 *
 * Set once, by the first context made, not from a constructor: the
 * preload library carries this code into every program it is preloaded
 * in, and under ASan a constructor's setenv left llvm-symbolizer (spawned
 * with the same LD_PRELOAD) deadlocked in exit, holding preload_test's
 * output open. setenv only adds variables here, and glibc then copies the
 * environment into a new array, leaving the old one valid for a getenv
 * running at the same time in another thread.
 *
 * - Segments of 256 KiB instead of 8 KiB: 1 MiB reads went from 70% to 100%
 *   of a plain loopback stream, 4 KiB IOPS did not move (decision 0004). It
 *   costs 256 KiB of receive buffer per connection.
 * - No PUT: tcp's rendezvous moves data by PUT and waits for the peer's
 *   acknowledgement; when the peer dies mid-transfer, an acknowledgement
 *   already in the socket can be parsed after the endpoint's failure cleared
 *   its state, and UCX aborts (tcp_ep.c:939; 1 kill in 12 in fault_test).
 *   Without PUT the rendezvous moves in active-message fragments: 0 aborts in
 *   60 kills (decision 0004 has the cost).
 * - Shared-memory receive buffers made 64 at a time, not 512: each worker's
 *   sysv and posix interfaces wrote 512 buffers of 8 KiB (4 MiB) when they
 *   were made, two thirds of the 55 ms a client's connection to 2 targets
 *   took; with 64 it takes 25-33 ms. The pool grows by 64 when more are held,
 *   and Lode's handlers keep no eager message past their return
 *   (src/net/README.md).
 * - Shared-memory transports that report a dead peer, so that endpoints
 *   over shm ask for peer-failure handling as tcp's and rdma's do. UCX
 *   closes at once (UCP_EP_CLOSE_FLAG_FORCE) only such an endpoint, and
 *   keeps any other that its peer connected to until the worker goes: loded
 *   held every departed shm client's endpoint and the 2 SysV segments per
 *   worker it had attached, 4 per `lode` command, until the system's 4096
 *   segments ran out and shmget failed for every program (decision 0004).
 *   The check asks whether the peer process still exists, so a busy peer
 *   is not taken for a dead one.
 */
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

/*
 * UCX's messages, on stderr. UCX writes them to stdout unless UCX_LOG_FILE
 * names a file, where they broke `lode --json` output and would mix into
 * the output of any program running the preload library. One write per
 * message, so that threads' lines do not interleave.
 */
static ucs_log_func_rc_t log_to_stderr(const char *file, unsigned line, const char *func,
				       ucs_log_level_t level,
				       const ucs_log_component_config_t *comp,
				       const char *fmt, va_list ap)
{
	const char *base = strrchr(file, '/');
	char msg[512];
	int n;

	(void)func;
	(void)comp;
	n = snprintf(msg, sizeof(msg), "[%d] UCX %s %s:%u ", (int)getpid(),
		     level < UCS_LOG_LEVEL_LAST	    ? ucs_log_level_names[level]
		     : level == UCS_LOG_LEVEL_PRINT ? "PRINT"
						    : "?",
		     base ? base + 1 : file, line);
	size_t len = n > 0 && (size_t)n < sizeof(msg) ? (size_t)n : 0;

	n = vsnprintf(msg + len, sizeof(msg) - len, fmt, ap);
	len += n > 0 ? (size_t)n : 0;
	if (len > sizeof(msg) - 1)
		len = sizeof(msg) - 1; /* cut: the newline takes the terminator's place */
	msg[len++] = '\n';
	(void)!write(STDERR_FILENO, msg, len);
	/* One at UCX_LOG_LEVEL_TRIGGER or worse (fatal, by default) goes on to
	 * UCX's own handler, which prints it again and stops the process. */
	return level <= ucs_global_opts.log_level_trigger ? UCS_LOG_FUNC_RC_CONTINUE
							  : UCS_LOG_FUNC_RC_STOP;
}

static void env_defaults(void)
{
	if (!getenv("UCX_LOG_FILE"))
		ucs_log_push_handler(log_to_stderr);
	if (!getenv("UCX_TCP_TX_SEG_SIZE") && !getenv("UCX_TCP_RX_SEG_SIZE")) {
		setenv("UCX_TCP_TX_SEG_SIZE", "256k", 0);
		setenv("UCX_TCP_RX_SEG_SIZE", "256k", 0);
	}
	setenv("UCX_TCP_PUT_ENABLE", "n", 0);
	setenv("UCX_POSIX_RX_BUFS_GROW", "64", 0);
	setenv("UCX_SYSV_RX_BUFS_GROW", "64", 0);
	setenv("UCX_POSIX_ERROR_HANDLING", "y", 0);
	setenv("UCX_SYSV_ERROR_HANDLING", "y", 0);
}

static int context_create(uint32_t bits, bool loopback, const char *log_level,
			  ucp_context_h *ctx_out)
{
	ucp_params_t params = {0};
	ucp_config_t *config;
	ucs_status_t st;
	char tls[128];
	int rc;

	if ((rc = tls_string(bits, tls, sizeof(tls))) < 0)
		return rc;
	pthread_once(&env_once, env_defaults);
	st = ucp_config_read(NULL, NULL, &config);
	if (st != UCS_OK)
		return net_ucs_errno(st);
	if (bits && ucp_config_modify(config, "TLS", tls) != UCS_OK) {
		ucp_config_release(config);
		return -EINVAL;
	}
	if (loopback && (bits & NET_TP_TCP) && !getenv("UCX_NET_DEVICES"))
		ucp_config_modify(config, "NET_DEVICES", "lo");
	/* Keep the client's and server's warnings off the terminal unless asked. */
	if (!getenv("UCX_LOG_LEVEL"))
		ucp_config_modify(config, "LOG_LEVEL", log_level);

	params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
	params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
	params.mt_workers_shared = 1;
	st = ucp_init(&params, config, ctx_out);
	ucp_config_release(config);
	return net_ucs_errno(st);
}

int net_context_create(uint32_t bits, bool loopback, ucp_context_h *ctx_out)
{
	return context_create(bits, loopback, "error", ctx_out);
}

uint32_t net_transports_probe(void)
{
	uint32_t have = 0;

	for (size_t i = 0; i < NTRANSPORTS; i++) {
		ucp_context_h ctx;
		ucp_worker_h w;

		/* A missing transport is the expected answer here, not an error to print. */
		if (context_create(transports[i].bit, false, "fatal", &ctx) < 0)
			continue;
		/* A context can exist with no usable device; a worker cannot. */
		if (net_worker_create(ctx, &w) == 0) {
			ucp_address_t *addr;
			size_t len;

			if (ucp_worker_get_address(w, &addr, &len) == UCS_OK) {
				have |= transports[i].bit;
				ucp_worker_release_address(w, addr);
			}
			ucp_worker_destroy(w);
		}
		ucp_cleanup(ctx);
	}
	return have;
}

int net_worker_create(ucp_context_h ctx, ucp_worker_h *worker_out)
{
	ucp_worker_params_t wp = {0};

	wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
	wp.thread_mode = UCS_THREAD_MODE_SINGLE;
	return net_ucs_errno(ucp_worker_create(ctx, &wp, worker_out));
}

int net_am_handler_set(ucp_worker_h worker, unsigned id, ucp_am_recv_callback_t cb, void *arg)
{
	ucp_am_handler_param_t hp = {0};

	hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
			UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
	hp.id = id;
	hp.cb = cb;
	hp.arg = arg;
	hp.flags = UCP_AM_FLAG_WHOLE_MSG;
	return net_ucs_errno(ucp_worker_set_am_recv_handler(worker, &hp));
}

int net_ep_close_force(ucp_ep_h ep)
{
	ucp_request_param_t p = {0};
	ucs_status_ptr_t sp;

	p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
	p.flags = UCP_EP_CLOSE_FLAG_FORCE;
	sp = ucp_ep_close_nbx(ep, &p);
	if (UCS_PTR_IS_ERR(sp))
		return net_ucs_errno(UCS_PTR_STATUS(sp));
	if (sp)
		ucp_request_free(sp);
	return 0;
}

int net_addr_parse(const char *addr, unsigned default_port, struct sockaddr_storage *ss,
		   socklen_t *len)
{
	char host[256], port[16];
	const char *colon;
	struct addrinfo hints = {0}, *res = NULL;
	size_t hl;

	if (!addr || !*addr)
		return -EINVAL;
	snprintf(port, sizeof(port), "%u", default_port);
	if (addr[0] == '[') {
		const char *end = strchr(addr, ']');

		if (!end || (end[1] && end[1] != ':'))
			return -EINVAL;
		hl = (size_t)(end - addr - 1);
		if (end[1] == ':')
			snprintf(port, sizeof(port), "%s", end + 2);
		addr++;
	} else if ((colon = strchr(addr, ':')) && colon == strrchr(addr, ':')) {
		/* One colon: host:port. More than one is a bare IPv6 address. */
		hl = (size_t)(colon - addr);
		if (strlen(colon + 1) >= sizeof(port))
			return -EINVAL;
		snprintf(port, sizeof(port), "%s", colon + 1);
	} else {
		hl = strlen(addr);
	}
	if (hl == 0 || hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, addr, hl);
	host[hl] = 0;
	for (const char *p = port; *p; p++)
		if (*p < '0' || *p > '9')
			return -EINVAL;
	if (!*port || atol(port) > 65535)
		return -EINVAL;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_family = AF_UNSPEC;
	if (getaddrinfo(host, port, &hints, &res) != 0 || !res)
		return -EHOSTUNREACH;
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

bool net_addr_is_loopback(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;

		return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	}
	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;

		return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
	}
	return false;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Move exactly len bytes in one direction before the deadline. */
static int xfer(int fd, void *buf, size_t len, bool out, int64_t deadline)
{
	uint8_t *p = buf;

	while (len) {
		struct pollfd pfd = {fd, out ? POLLOUT : POLLIN, 0};
		int64_t left = deadline - now_ms();
		ssize_t n;

		if (left <= 0)
			return -ETIMEDOUT;
		n = poll(&pfd, 1, (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ETIMEDOUT;
		n = out ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ECONNRESET;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int net_frame_send(int fd, const void *buf, size_t len, unsigned timeout_ms)
{
	int64_t deadline = now_ms() + timeout_ms;
	uint8_t hdr[4] = {(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16),
			  (uint8_t)(len >> 24)};
	int rc;

	if (len > UINT32_MAX)
		return -EMSGSIZE;
	if ((rc = xfer(fd, hdr, 4, true, deadline)) < 0)
		return rc;
	return xfer(fd, (void *)buf, len, true, deadline);
}

int net_frame_recv(int fd, size_t max, unsigned timeout_ms, void **buf, size_t *len)
{
	int64_t deadline = now_ms() + timeout_ms;
	uint8_t hdr[4];
	uint32_t n;
	void *p;
	int rc;

	*buf = NULL;
	if ((rc = xfer(fd, hdr, 4, false, deadline)) < 0)
		return rc;
	n = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 |
	    (uint32_t)hdr[3] << 24;
	if (n > max)
		return -EMSGSIZE;
	if (!(p = malloc(n ? n : 1)))
		return -ENOMEM;
	if ((rc = xfer(fd, p, n, false, deadline)) < 0) {
		free(p);
		return rc;
	}
	*buf = p;
	*len = n;
	return 0;
}
