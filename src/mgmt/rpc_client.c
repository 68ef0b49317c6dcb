/*
 * The client half of rpc.h: blocking unary calls over gRPC core.
 *
 * A channel wraps one grpc_channel (thread-safe; it connects on the first
 * call and reconnects on its own). Each call gets a completion queue of its
 * own, made for pluck, and runs as one batch: metadata (with the
 * capability), the request, the half-close, and everything the server
 * sends back. The calling thread waits on that queue, so any number of
 * threads can call on one channel at once.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "lode/errno.h"
#include "mgmt/rpc_internal.h"

struct rpc_channel {
	grpc_channel *ch;
	/* What it was opened with, for rpc_channel_reopen. */
	bool tls;
	char *ca, *cert, *key;
};

static char *dup_or_null(const char *s, bool *oom)
{
	char *d;

	if (!s)
		return NULL;
	d = strdup(s);
	*oom |= !d;
	return d;
}

int rpc_channel_open(const char *addr, const struct rpc_tls *tls, rpc_channel_t **out)
{
	struct rpc_pem pem = { 0 };
	grpc_channel_credentials *creds;
	struct rpc_channel *c;
	grpc_channel_args ca;
	grpc_arg args[3];
	char msg[256];
	int rc;

	*out = NULL;
	if (!addr)
		return -EINVAL;
	if (tls && (rc = rpc_pem_load(tls, false, &pem, msg, sizeof(msg)))) {
		rpc_pem_free(&pem);
		return rc;
	}
	c = calloc(1, sizeof(*c));
	if (c && tls) {
		bool oom = false;

		c->tls = true;
		c->ca = dup_or_null(tls->ca, &oom);
		c->cert = dup_or_null(tls->cert, &oom);
		c->key = dup_or_null(tls->key, &oom);
		if (oom) {
			free(c->ca);
			free(c->cert);
			free(c->key);
			free(c);
			c = NULL;
		}
	}
	if (!c) {
		rpc_pem_free(&pem);
		return -ENOMEM;
	}
	grpc_init();
	if (tls) {
		grpc_ssl_pem_key_cert_pair pair = { .private_key = pem.key, .cert_chain = pem.cert };

		creds = grpc_ssl_credentials_create(pem.ca, pem.cert ? &pair : NULL, NULL, NULL);
	} else {
		creds = grpc_insecure_credentials_create();
	}
	rpc_args_fill(&ca, args, false);
	c->ch = grpc_channel_create(addr, creds, &ca);
	grpc_channel_credentials_release(creds);
	rpc_pem_free(&pem);
	if (!c->ch) {
		free(c->ca);
		free(c->cert);
		free(c->key);
		free(c);
		grpc_shutdown();
		return -ENOMEM;
	}
	*out = c;
	return 0;
}

void rpc_channel_close(rpc_channel_t *c)
{
	if (!c)
		return;
	grpc_channel_destroy(c->ch);
	free(c->ca);
	free(c->cert);
	free(c->key);
	free(c);
	grpc_shutdown();
}

int rpc_channel_reopen(const rpc_channel_t *ch, const char *addr, rpc_channel_t **out)
{
	struct rpc_tls tls = {.ca = ch->ca, .cert = ch->cert, .key = ch->key};

	return rpc_channel_open(addr, ch->tls ? &tls : NULL, out);
}

int rpc_redirect_parse(const char *msg, char *addr, size_t cap)
{
	static const char lead[] = RPC_NOT_LEADER;
	size_t n;

	if (strcmp(msg, RPC_NO_LEADER) == 0)
		return 0;
	if (strncmp(msg, lead, sizeof(lead) - 1) != 0)
		return -1;
	msg += sizeof(lead) - 1;
	n = strcspn(msg, " \t\r\n");
	if (n == 0 || n >= cap || !memchr(msg, ':', n))
		return -1;
	memcpy(addr, msg, n);
	addr[n] = '\0';
	return 1;
}

static void cq_destroy(grpc_completion_queue *cq)
{
	grpc_completion_queue_shutdown(cq);
	while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
	       GRPC_QUEUE_SHUTDOWN)
		;
	grpc_completion_queue_destroy(cq);
}

int rpc_call(rpc_channel_t *ch, const char *method, const ProtobufCMessage *req,
	     const ProtobufCMessageDescriptor *reply_desc, const void *cap, size_t cap_len,
	     unsigned timeout_ms, ProtobufCMessage **reply, char *msg, size_t msg_cap)
{
	grpc_completion_queue *cq;
	grpc_metadata_array init_md, trail_md;
	grpc_byte_buffer *send, *recv = NULL;
	grpc_status_code status = GRPC_STATUS_INTERNAL;
	grpc_slice details = grpc_empty_slice();
	grpc_slice mslice;
	const char *err = NULL;
	gpr_timespec deadline;
	grpc_metadata md;
	grpc_call *call;
	grpc_op ops[6];
	grpc_call_error e;
	int st;

	*reply = NULL;
	rpc_msg_set(msg, msg_cap, "%s", "");
	send = rpc_msg_pack(req);
	if (!send) {
		rpc_msg_set(msg, msg_cap, "out of memory");
		return RPC_RESOURCE_EXHAUSTED;
	}
	cq = grpc_completion_queue_create_for_pluck(NULL);
	mslice = grpc_slice_from_copied_string(method);
	deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
				gpr_time_from_millis((int64_t)timeout_ms, GPR_TIMESPAN));
	call = grpc_channel_create_call(ch->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, mslice, NULL,
					deadline, NULL);
	grpc_slice_unref(mslice);

	memset(&md, 0, sizeof(md));
	md.key = grpc_slice_from_static_string(RPC_CAP_METADATA);
	md.value = cap ? grpc_slice_from_copied_buffer(cap, cap_len) : grpc_empty_slice();
	grpc_metadata_array_init(&init_md);
	grpc_metadata_array_init(&trail_md);

	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
	ops[0].data.send_initial_metadata.count = cap ? 1 : 0;
	ops[0].data.send_initial_metadata.metadata = &md;
	ops[1].op = GRPC_OP_SEND_MESSAGE;
	ops[1].data.send_message.send_message = send;
	ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
	ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
	ops[3].data.recv_initial_metadata.recv_initial_metadata = &init_md;
	ops[4].op = GRPC_OP_RECV_MESSAGE;
	ops[4].data.recv_message.recv_message = &recv;
	ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	ops[5].data.recv_status_on_client.trailing_metadata = &trail_md;
	ops[5].data.recv_status_on_client.status = &status;
	ops[5].data.recv_status_on_client.status_details = &details;
	ops[5].data.recv_status_on_client.error_string = &err;

	e = grpc_call_start_batch(call, ops, 6, call, NULL);
	if (e == GRPC_CALL_OK) {
		/* The call's deadline bounds the wait. */
		grpc_completion_queue_pluck(cq, call, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
		st = (int)status;
		if (GRPC_SLICE_LENGTH(details))
			rpc_msg_set(msg, msg_cap, "%.*s", (int)GRPC_SLICE_LENGTH(details),
				    (const char *)GRPC_SLICE_START_PTR(details));
		else if (st != RPC_OK)
			rpc_msg_set(msg, msg_cap, "%s", err ? err : "no message");
		if (st == RPC_OK && !(*reply = rpc_msg_unpack(reply_desc, recv))) {
			rpc_msg_set(msg, msg_cap, "malformed reply");
			st = RPC_INTERNAL;
		}
	} else {
		rpc_msg_set(msg, msg_cap, "grpc_call_start_batch: %s", grpc_call_error_to_string(e));
		st = RPC_INTERNAL;
	}

	grpc_call_unref(call);
	cq_destroy(cq);
	gpr_free((void *)err);
	grpc_slice_unref(details);
	grpc_slice_unref(md.value);
	grpc_metadata_array_destroy(&init_md);
	grpc_metadata_array_destroy(&trail_md);
	grpc_byte_buffer_destroy(send);
	if (recv)
		grpc_byte_buffer_destroy(recv);
	return st;
}

int rpc_status_errno(int status)
{
	switch (status) {
	case RPC_OK:
		return 0;
	case RPC_INVALID_ARGUMENT:
		return -EINVAL;
	case RPC_DEADLINE_EXCEEDED:
		return -ETIMEDOUT;
	case RPC_NOT_FOUND:
		return -ENOENT;
	case RPC_ALREADY_EXISTS:
		return -EEXIST;
	case RPC_PERMISSION_DENIED:
		return -EACCES;
	case RPC_RESOURCE_EXHAUSTED:
		return -ENOSPC;
	case RPC_FAILED_PRECONDITION:
		return -ENOTEMPTY;
	case RPC_UNIMPLEMENTED:
		return -EOPNOTSUPP;
	case RPC_UNAVAILABLE:
		return -ECONNREFUSED;
	case RPC_UNAUTHENTICATED:
		return -LODE_EAUTH;
	default:
		return -EIO;
	}
}
