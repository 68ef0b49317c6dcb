/*
 * Asking lode-agent (src/agent) for a capability, and the wire format both
 * ends of its Unix socket speak.
 *
 * A process with no credentials of its own connects to the agent's socket
 * and sends one frame: a u32 little-endian length, then a serialized
 * lode.mgmt.v1.ConnectRequest in which only `pool` is set. The agent learns
 * who asks from the kernel (SO_PEERCRED), maps the uid to a Lode user, calls
 * Connect on that user's behalf with the node's credential, and answers one
 * frame: a u32 little-endian length, then a status byte (an rpc_status: 0
 * ok) and either the serialized ConnectReply (status 0) or a message (UTF-8,
 * not NUL-terminated). Then it closes the connection.
 */
#ifndef LODE_CLIENT_AGENT_CLIENT_H
#define LODE_CLIENT_AGENT_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "lode/mgmt/v1/mgmt.pb-c.h"

/* The largest request the agent reads; a ConnectRequest with a pool name
 * is under 150 bytes. */
#define AGENT_REQUEST_MAX 4096
/* The largest reply a client reads (a ConnectReply carries the pool map). */
#define AGENT_REPLY_MAX (1 << 20)

/*
 * The path a lode-agent listens on when not told: $LODE_AGENT_SOCKET, else
 * /run/lode/agent.sock for root, else $XDG_RUNTIME_DIR/lode/agent.sock.
 * Errors: -ENOENT (not root and no $XDG_RUNTIME_DIR), -ENAMETOOLONG.
 */
int agent_socket_default(char *out, size_t cap);

/*
 * The agent socket a client should ask, if one exists: $LODE_AGENT_SOCKET
 * when set (and only it), else $XDG_RUNTIME_DIR/lode/agent.sock (an agent
 * of the user's own), else /run/lode/agent.sock (the node's). Errors:
 * -ENOENT (no such socket exists), -ENAMETOOLONG.
 */
int agent_socket_find(char *out, size_t cap);

/*
 * Ask the agent at socket_path for a capability on pool (NULL or "": the
 * service's default pool) for whoever this process is, waiting at most
 * timeout_ms for the whole exchange. On success *rep is the service's
 * ConnectReply, which the caller frees with
 * protobuf_c_message_free_unpacked(&(*rep)->base, NULL). On failure msg
 * (cap bytes) says why, in words. Blocks.
 *
 * Errors: reaching the agent: -ENOENT (no socket there), -ECONNREFUSED (a
 * socket nobody serves: the agent died), -ECONNRESET (it closed without an
 * answer), -ETIMEDOUT, -EPROTO (a reply that does not parse),
 * -ENAMETOOLONG, -EINVAL (a pool name too long), -ENOMEM; the agent's or
 * the service's verdict, as rpc_status_errno gives it: -EACCES (the agent
 * has no Lode user for this uid), -LODE_EAUTH (the node's credential or
 * the mapped user is refused), -ENOENT (no such pool or user), -EINVAL (a
 * request the agent refuses), -EBUSY (the agent serves its most clients
 * already), -EHOSTUNREACH (the agent cannot reach the service: so that
 * -ECONNREFUSED always means the agent itself).
 */
int agent_connect(const char *socket_path, const char *pool, unsigned timeout_ms,
		  Lode__Mgmt__V1__ConnectReply **rep, char *msg, size_t cap);

/* ---- the framing both ends use ------------------------------------------------ */

/* Milliseconds on CLOCK_MONOTONIC: the clock deadlines are on. */
int64_t agent_now_ms(void);

/*
 * Send one frame on the stream socket fd: the length, then (status >= 0)
 * the status byte, then body[0..len). Gives up at deadline_ms (monotonic).
 * Errors: -ETIMEDOUT, -EPIPE / -ECONNRESET (the peer left), -EMSGSIZE.
 */
int agent_frame_send(int fd, int status, const void *body, size_t len, int64_t deadline_ms);

/*
 * Receive one frame of at most max bytes (after the length) into a buffer
 * of its own, *body (free it), *len its length. Errors: -ETIMEDOUT,
 * -EMSGSIZE (longer than max: nothing more is read), -ECONNRESET (the peer
 * closed before a whole frame came), -ENOMEM.
 */
int agent_frame_recv(int fd, size_t max, uint8_t **body, size_t *len, int64_t deadline_ms);

#endif
