/*
 * Unary gRPC over gRPC core, both ends, with protobuf-c messages.
 *
 * The server side runs one thread on one completion queue and calls a
 * handler per method from that thread, one call at a time: the management
 * state is small and every change is persisted before the reply, so a
 * single thread keeps it simple and ordered. The client side makes blocking
 * unary calls on a channel; a channel is thread-safe.
 *
 * Transport security: with tls set, the server uses the certificate and key
 * files (and, with tls->ca, asks clients for certificates signed by it: a
 * client that presents one must present a valid one, but a client without
 * one is still served, since callers authenticate with capabilities) and
 * the client verifies the server against tls->ca; a plaintext client then
 * fails its handshake. Without tls both sides speak plaintext HTTP/2.
 * Messages are limited to RPC_MAX_MESSAGE bytes each way.
 */
#ifndef LODE_MGMT_RPC_H
#define LODE_MGMT_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

/* Binary metadata entry carrying the caller's capability. */
#define RPC_CAP_METADATA "lode-cap-bin"

/* The largest message either end accepts (RESOURCE_EXHAUSTED beyond). */
#define RPC_MAX_MESSAGE (4 << 20)

/* gRPC status codes the handlers use (the values of grpc_status_code). */
enum rpc_status {
	RPC_OK = 0,
	RPC_CANCELLED = 1,
	RPC_UNKNOWN = 2,
	RPC_INVALID_ARGUMENT = 3,
	RPC_DEADLINE_EXCEEDED = 4,
	RPC_NOT_FOUND = 5,
	RPC_ALREADY_EXISTS = 6,
	RPC_PERMISSION_DENIED = 7,
	RPC_RESOURCE_EXHAUSTED = 8,
	RPC_FAILED_PRECONDITION = 9,
	RPC_ABORTED = 10,
	RPC_UNIMPLEMENTED = 12, /* a method the server does not serve */
	RPC_INTERNAL = 13,
	RPC_UNAVAILABLE = 14,
	RPC_UNAUTHENTICATED = 16,
};

struct rpc_tls {
	const char *cert; /* PEM file: this side's certificate (server; client for mutual TLS) */
	const char *key;  /* PEM file: its private key */
	const char *ca;   /* PEM file: the CA that signed the peer (client: the server's) */
};

/* What a handler knows about the call besides its request message. */
struct rpc_call_info {
	const uint8_t *cap; /* the RPC_CAP_METADATA value, or NULL */
	size_t cap_len;
	char peer[128];     /* the peer's address as gRPC reports it */
};

/*
 * A method's handler, called on the server's thread with the unpacked
 * request. On success it returns RPC_OK and sets *reply to a message of its
 * own making, which the server packs, sends and then hands to the method's
 * reply_free. On an error it returns another rpc_status, writes a
 * NUL-terminated message into msg (msg_cap bytes) and leaves *reply NULL.
 */
typedef int (*rpc_handler_fn)(void *arg, const struct rpc_call_info *ci,
			      const ProtobufCMessage *req, ProtobufCMessage **reply, char *msg,
			      size_t msg_cap);

struct rpc_method {
	const char *name; /* full: "/lode.mgmt.v1.Mgmt/Connect" */
	const ProtobufCMessageDescriptor *in;
	rpc_handler_fn fn;
	void (*reply_free)(ProtobufCMessage *reply); /* frees what fn put in *reply */
};

typedef struct rpc_server rpc_server_t;

/*
 * Listen on addr ("host:port"; port 0 picks a free one) and serve methods
 * (an array the server keeps pointing at, with arg passed to every
 * handler) on a thread of its own. *bound_port gets the port. tls may be
 * NULL; otherwise tls->cert and tls->key are required. Errors: -EADDRINUSE, -EINVAL (an address gRPC cannot bind, or TLS
 * files that do not load; msg says which), -ENOMEM.
 */
int rpc_server_start(const char *addr, const struct rpc_tls *tls, const struct rpc_method *methods,
		     unsigned nmethods, void *arg, int *bound_port, rpc_server_t **out, char *msg,
		     size_t msg_cap);

/* Stop accepting, give calls in flight 2 s to finish (then cancel them;
 * a running handler still runs to its end), join the thread, free. */
void rpc_server_stop(rpc_server_t *s);

/* ---- client ----------------------------------------------------------------- */

typedef struct rpc_channel rpc_channel_t;

/* A channel to addr ("host:port"); tls may be NULL (plaintext). With tls,
 * tls->ca NULL trusts the system's roots, and cert and key (both or
 * neither) are presented to a server that asks. Does not connect yet.
 * Errors: -EINVAL (TLS files that do not load), -ENOMEM. */
int rpc_channel_open(const char *addr, const struct rpc_tls *tls, rpc_channel_t **out);
void rpc_channel_close(rpc_channel_t *ch);

/*
 * Call method with req, carrying cap (may be NULL) as RPC_CAP_METADATA, and
 * wait up to timeout_ms. On RPC_OK *reply is the unpacked reply (free it with
 * protobuf_c_message_free_unpacked(*reply, NULL)). Returns an rpc_status
 * (RPC_UNAVAILABLE when the server cannot be reached or the TLS handshake
 * fails, RPC_DEADLINE_EXCEEDED on timeout); msg gets the server's message.
 * Blocks.
 */
int rpc_call(rpc_channel_t *ch, const char *method, const ProtobufCMessage *req,
	     const ProtobufCMessageDescriptor *reply_desc, const void *cap, size_t cap_len,
	     unsigned timeout_ms, ProtobufCMessage **reply, char *msg, size_t msg_cap);

/*
 * A replicated management service (src/mgmt README, "Replication"): a
 * replica that must not serve a call answers UNAVAILABLE with one of these
 * messages, and clients call the leader instead, or wait a moment.
 */
#define RPC_NOT_LEADER "not the leader; leader at " /* followed by HOST:PORT */
#define RPC_NO_LEADER "no leader yet"

/*
 * Whether msg (an UNAVAILABLE call's message) redirects: 1 with the
 * leader's "HOST:PORT" in addr (cap bytes), 0 for RPC_NO_LEADER (try again
 * shortly), -1 for anything else (not a redirect; also an address that does
 * not fit). Does not block.
 */
int rpc_redirect_parse(const char *msg, char *addr, size_t cap);

/* A channel to addr with the TLS settings ch was opened with (to follow a
 * redirect). Errors as rpc_channel_open. */
int rpc_channel_reopen(const rpc_channel_t *ch, const char *addr, rpc_channel_t **out);

/* A negated errno / Lode code for an rpc_status, for callers that speak
 * Lode's convention (-EACCES for PERMISSION_DENIED, -LODE_EAUTH for
 * UNAUTHENTICATED, -ENOENT, -EEXIST, -EINVAL, -ENOTEMPTY for
 * FAILED_PRECONDITION, -ENOSPC, -ETIMEDOUT, -ECONNREFUSED for UNAVAILABLE,
 * -EOPNOTSUPP for UNIMPLEMENTED, 0 for OK, -EIO otherwise). */
int rpc_status_errno(int status);

#endif
