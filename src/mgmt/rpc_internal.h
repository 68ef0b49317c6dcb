/*
 * What rpc_server.c and rpc_client.c share: loading TLS files, converting
 * protobuf-c messages to and from gRPC byte buffers, and the channel
 * arguments both ends set. Private to lode_rpc.
 */
#ifndef LODE_MGMT_RPC_INTERNAL_H
#define LODE_MGMT_RPC_INTERNAL_H

#include <grpc/grpc.h>

#include "mgmt/rpc.h"

/* The PEM texts of a struct rpc_tls, NUL-terminated; NULL where not given. */
struct rpc_pem {
	char *cert, *key, *ca;
};

/*
 * Read and check the files tls names: cert must hold a certificate, key a
 * private key that matches it, ca at least one certificate. need_pair: cert
 * and key are required (the server); otherwise both or neither. gRPC itself
 * would only find out at bind or handshake time and say little, so the
 * check happens here, with a message naming the file. Errors: -EINVAL (msg
 * says why), -ENOMEM. Free with rpc_pem_free, also after an error.
 */
int rpc_pem_load(const struct rpc_tls *tls, bool need_pair, struct rpc_pem *out, char *msg,
		 size_t msg_cap);
void rpc_pem_free(struct rpc_pem *p);

/* Pack m into a new byte buffer (NULL on allocation failure). */
grpc_byte_buffer *rpc_msg_pack(const ProtobufCMessage *m);

/* Unpack bb as a message of type desc; NULL if bb is NULL or does not parse. */
ProtobufCMessage *rpc_msg_unpack(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb);

/* Channel arguments both ends use (the message size limit; the server also
 * refuses SO_REUSEPORT, so a second server on a busy port fails to bind
 * instead of sharing it; a client waits at most RPC_RECONNECT_MAX_MS
 * between attempts to reach a server that went away). args must have room
 * for 3 entries. */
#define RPC_RECONNECT_MAX_MS 2000
void rpc_args_fill(grpc_channel_args *ca, grpc_arg *args, bool server);

/* Format a message into dst (cap bytes, NUL-terminated; cap may be 0). */
void rpc_msg_set(char *dst, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
