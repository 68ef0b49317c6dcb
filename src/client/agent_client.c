/*
 * The client's side of lode-agent: where its socket is, one request and one
 * reply over it (agent_client.h has the wire format), and the framing the
 * agent itself uses too.
 *
 * A process that found no credentials of its own asks the agent; what the
 * agent hands back is the service's ConnectReply, made for the Lode user the
 * node maps this process's uid to, and the connection uses it as if it had
 * called Connect itself (session.c). Everything here is bounded by one
 * deadline, so a stuck or dead agent costs at most the caller's timeout.
 */
#include "client/agent_client.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "mgmt/rpc.h"

#define AGENT_SOCKET_ROOT "/run/lode/agent.sock"

int64_t agent_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- where the socket is ----------------------------------------------------------- */

/* $XDG_RUNTIME_DIR/lode/agent.sock. Errors: -ENOENT (no such variable), -ENAMETOOLONG. */
static int socket_user(char *out, size_t cap)
{
	const char *run = getenv("XDG_RUNTIME_DIR");

	if (!run || !*run)
		return -ENOENT;
	return (size_t)snprintf(out, cap, "%s/lode/agent.sock", run) < cap ? 0 : -ENAMETOOLONG;
}

static int socket_set(char *out, size_t cap, const char *path)
{
	return (size_t)snprintf(out, cap, "%s", path) < cap ? 0 : -ENAMETOOLONG;
}

int agent_socket_default(char *out, size_t cap)
{
	const char *env = getenv("LODE_AGENT_SOCKET");

	if (env && *env)
		return socket_set(out, cap, env);
	if (geteuid() == 0)
		return socket_set(out, cap, AGENT_SOCKET_ROOT);
	return socket_user(out, cap);
}

static bool is_socket(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

int agent_socket_find(char *out, size_t cap)
{
	const char *env = getenv("LODE_AGENT_SOCKET");
	int rc;

	if (env && *env) {
		if ((rc = socket_set(out, cap, env)) < 0)
			return rc;
		return is_socket(out) ? 0 : -ENOENT;
	}
	if (socket_user(out, cap) == 0 && is_socket(out))
		return 0;
	if ((rc = socket_set(out, cap, AGENT_SOCKET_ROOT)) < 0)
		return rc;
	return is_socket(out) ? 0 : -ENOENT;
}

/* ---- framing ------------------------------------------------------------------------ */

/* Wait until fd is ready for events or deadline_ms passes. Errors: -ETIMEDOUT, -errno. */
static int wait_fd(int fd, short events, int64_t deadline_ms)
{
	struct pollfd p = {.fd = fd, .events = events};

	for (;;) {
		int64_t left = deadline_ms - agent_now_ms();
		int n;

		if (left <= 0)
			return -ETIMEDOUT;
		n = poll(&p, 1, left > 60000 ? 60000 : (int)left);
		if (n > 0)
			return 0; /* ready, or an error the next call reports */
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

static int write_all(int fd, const uint8_t *b, size_t n, int64_t deadline_ms)
{
	while (n) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		int rc;

		if (w > 0) {
			b += w;
			n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		if ((rc = wait_fd(fd, POLLOUT, deadline_ms)) < 0)
			return rc;
	}
	return 0;
}

static int read_all(int fd, uint8_t *b, size_t n, int64_t deadline_ms)
{
	while (n) {
		ssize_t r = recv(fd, b, n, MSG_DONTWAIT);
		int rc;

		if (r > 0) {
			b += r;
			n -= (size_t)r;
			continue;
		}
		if (r == 0)
			return -ECONNRESET; /* closed before the whole frame came */
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		if ((rc = wait_fd(fd, POLLIN, deadline_ms)) < 0)
			return rc;
	}
	return 0;
}

int agent_frame_send(int fd, int status, const void *body, size_t len, int64_t deadline_ms)
{
	size_t hdr = status >= 0 ? 5 : 4, total = len + hdr - 4;
	uint8_t *buf;
	int rc;

	if (total > UINT32_MAX)
		return -EMSGSIZE;
	if (!(buf = malloc(len + hdr)))
		return -ENOMEM;
	buf[0] = (uint8_t)total;
	buf[1] = (uint8_t)(total >> 8);
	buf[2] = (uint8_t)(total >> 16);
	buf[3] = (uint8_t)(total >> 24);
	if (status >= 0)
		buf[4] = (uint8_t)status;
	if (len)
		memcpy(buf + hdr, body, len);
	rc = write_all(fd, buf, len + hdr, deadline_ms);
	free(buf);
	return rc;
}

int agent_frame_recv(int fd, size_t max, uint8_t **body, size_t *len, int64_t deadline_ms)
{
	uint8_t h[4];
	uint32_t n;
	int rc;

	*body = NULL;
	*len = 0;
	if ((rc = read_all(fd, h, sizeof(h), deadline_ms)) < 0)
		return rc;
	n = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
	if (n > max)
		return -EMSGSIZE;
	if (!(*body = malloc(n ? n : 1)))
		return -ENOMEM;
	if ((rc = read_all(fd, *body, n, deadline_ms)) < 0) {
		free(*body);
		*body = NULL;
		return rc;
	}
	*len = n;
	return 0;
}

/* ---- asking ------------------------------------------------------------------------- */

/* A connected stream socket to path, or a negative code (msg says what). */
static int dial(const char *path, int64_t deadline_ms, char *msg, size_t cap)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd, rc;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(msg, cap, "lode-agent socket path %s is too long", path);
		return -ENAMETOOLONG;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0) {
		rc = -errno;
		snprintf(msg, cap, "socket: %s", strerror(-rc));
		return rc;
	}
	/* A Unix socket's connect does not wait: EAGAIN means the backlog is
	 * full (an agent busy with others), so try again until the deadline. */
	while (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN || agent_now_ms() >= deadline_ms) {
			rc = errno == EAGAIN ? -ETIMEDOUT : -errno;
			goto fail;
		}
		usleep(10000);
	}
	return fd;
fail:
	close(fd);
	if (rc == -ECONNREFUSED)
		snprintf(msg, cap, "lode-agent at %s is not running (nothing serves its socket)",
			 path);
	else if (rc == -ETIMEDOUT)
		snprintf(msg, cap, "lode-agent at %s did not accept in time", path);
	else
		snprintf(msg, cap, "lode-agent at %s: %s", path, strerror(-rc));
	return rc;
}

int agent_connect(const char *socket_path, const char *pool, unsigned timeout_ms,
		  Lode__Mgmt__V1__ConnectReply **rep, char *msg, size_t cap)
{
	Lode__Mgmt__V1__ConnectRequest req = LODE__MGMT__V1__CONNECT_REQUEST__INIT;
	int64_t deadline = agent_now_ms() + (timeout_ms ? timeout_ms : 10000);
	uint8_t buf[AGENT_REQUEST_MAX], *in = NULL;
	size_t len, n;
	int fd, rc;

	*rep = NULL;
	if (cap)
		msg[0] = 0;
	req.pool = (char *)(pool ? pool : "");
	if ((len = protobuf_c_message_get_packed_size(&req.base)) > sizeof(buf)) {
		snprintf(msg, cap, "pool name of %zu bytes is too long", strlen(req.pool));
		return -EINVAL;
	}
	protobuf_c_message_pack(&req.base, buf);
	if ((fd = dial(socket_path, deadline, msg, cap)) < 0)
		return fd;
	rc = agent_frame_send(fd, -1, buf, len, deadline);
	if (rc == 0)
		rc = agent_frame_recv(fd, AGENT_REPLY_MAX, &in, &n, deadline);
	close(fd);
	if (rc < 0) {
		if (rc == -ETIMEDOUT)
			snprintf(msg, cap, "lode-agent at %s did not answer within %u ms", socket_path,
				 timeout_ms);
		else if (rc == -ECONNRESET || rc == -EPIPE)
			snprintf(msg, cap, "lode-agent at %s closed the connection without an answer",
				 socket_path);
		else
			snprintf(msg, cap, "lode-agent at %s: %s", socket_path, strerror(-rc));
		return rc == -EPIPE ? -ECONNRESET : rc;
	}
	if (n == 0) {
		rc = -EPROTO;
		snprintf(msg, cap, "lode-agent at %s sent an empty reply", socket_path);
	} else if (in[0] != RPC_OK) {
		/* the agent's (or the service's) verdict, in its own words */
		int len_msg = (int)(n - 1 > 1000 ? 1000 : n - 1);

		if (in[0] == RPC_UNAVAILABLE)
			rc = -EHOSTUNREACH;
		else if (in[0] == RPC_RESOURCE_EXHAUSTED)
			rc = -EBUSY;
		else
			rc = rpc_status_errno(in[0]);
		if (rc == 0)
			rc = -EPROTO;
		snprintf(msg, cap, "lode-agent: %.*s", len_msg, (const char *)in + 1);
	} else if (!(*rep = lode__mgmt__v1__connect_reply__unpack(NULL, n - 1, in + 1))) {
		rc = -EPROTO;
		snprintf(msg, cap, "lode-agent at %s sent a reply that does not parse", socket_path);
	}
	free(in);
	return rc;
}
