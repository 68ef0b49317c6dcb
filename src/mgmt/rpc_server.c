/*
 * The server half of rpc.h: unary gRPC methods served by one thread over
 * gRPC core.
 *
 * Every registered method has a slot that keeps one call requested from
 * gRPC (grpc_server_request_registered_call, with the request message read
 * before the call is handed over), and one more slot takes calls to methods
 * nobody registered, which get UNIMPLEMENTED. The thread waits on one
 * completion queue. When a slot's call arrives, the slot asks for the next
 * one at once, then the call is served (unless its deadline passed while it
 * waited: DEADLINE_EXCEEDED): unpack, handler, pack, and one batch
 * that sends the reply and the status and waits for the client to close.
 * That batch completes later, on the same queue, and only then is the call
 * released. So a client that never closes its side holds only its own call,
 * never the method; the handlers still run one at a time, in order.
 *
 * Tags are pointers to the slots (a new call), to the call records (a
 * finished batch) and to the server's shutdown marker; the first member of
 * each says which it is.
 */
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "mgmt/rpc_internal.h"

/* How long rpc_server_stop lets calls in flight finish before cancelling them. */
#define STOP_GRACE_MS 2000

enum tag_kind {
	TAG_NEW_CALL = 1, /* a struct srv_slot: its requested call arrived (or failed) */
	TAG_CALL_DONE,    /* a struct srv_call: its reply batch completed */
	TAG_SHUTDOWN,     /* the server's shutdown finished */
};

struct srv_call;

struct srv_slot {
	enum tag_kind kind; /* TAG_NEW_CALL; first, as the tag points here */
	struct rpc_server *s;
	const struct rpc_method *m; /* NULL: the slot for unregistered methods */
	void *handle;               /* from grpc_server_register_method */
	struct srv_call *next;      /* where the requested call lands; NULL: none requested */
};

struct srv_call {
	enum tag_kind kind; /* TAG_CALL_DONE; first, as the tag points here */
	struct srv_slot *slot;
	grpc_call *call;
	gpr_timespec deadline;
	grpc_metadata_array md;
	grpc_call_details details;  /* the method's name, for unregistered ones */
	grpc_byte_buffer *payload;  /* the request, as gRPC read it */
	grpc_byte_buffer *reply;    /* owned until the batch completes */
	int cancelled;
};

struct rpc_server {
	grpc_server *server;
	grpc_completion_queue *cq;
	const struct rpc_method *methods;
	unsigned nmethods;
	void *arg;
	struct srv_slot *slots; /* nmethods + 1 */
	enum tag_kind shutdown_tag;
	atomic_bool stopping;
	pthread_t thread;
	bool thread_started;
};

static void call_release(struct srv_call *c)
{
	if (c->call)
		grpc_call_unref(c->call);
	grpc_metadata_array_destroy(&c->md);
	grpc_call_details_destroy(&c->details);
	if (c->payload)
		grpc_byte_buffer_destroy(c->payload);
	if (c->reply)
		grpc_byte_buffer_destroy(c->reply);
	memset(c, 0, sizeof(*c));
}

/* Ask gRPC for the slot's next call, into c (reused) or a new record. */
static bool slot_request(struct srv_slot *sl, struct srv_call *c)
{
	struct rpc_server *s = sl->s;
	grpc_call_error e;

	if (!c && !(c = calloc(1, sizeof(*c))))
		return false;
	c->kind = TAG_CALL_DONE;
	c->slot = sl;
	grpc_metadata_array_init(&c->md);
	grpc_call_details_init(&c->details);
	if (sl->m)
		e = grpc_server_request_registered_call(s->server, sl->handle, &c->call,
							&c->deadline, &c->md, &c->payload, s->cq,
							s->cq, sl);
	else
		e = grpc_server_request_call(s->server, &c->call, &c->details, &c->md, s->cq,
					     s->cq, sl);
	if (e != GRPC_CALL_OK) {
		call_release(c);
		free(c);
		return false;
	}
	sl->next = c;
	return true;
}

/* The call's reply batch completed (or never started): release it, and
 * let its record take the slot's next call if the slot had none. */
static void call_done(struct rpc_server *s, struct srv_call *c)
{
	struct srv_slot *sl = c->slot;

	call_release(c);
	if (!sl->next && !atomic_load(&s->stopping)) {
		slot_request(sl, c);
		return;
	}
	free(c);
}

static void call_info_fill(struct srv_call *c, struct rpc_call_info *ci)
{
	char *peer = grpc_call_get_peer(c->call);

	memset(ci, 0, sizeof(*ci));
	for (size_t i = 0; i < c->md.count; i++) {
		if (grpc_slice_str_cmp(c->md.metadata[i].key, RPC_CAP_METADATA) == 0) {
			ci->cap = GRPC_SLICE_START_PTR(c->md.metadata[i].value);
			ci->cap_len = GRPC_SLICE_LENGTH(c->md.metadata[i].value);
			break;
		}
	}
	snprintf(ci->peer, sizeof(ci->peer), "%s", peer ? peer : "");
	gpr_free(peer);
}

/* Run the method's handler on the request; returns the status and leaves
 * the packed reply in c->reply (OK only). */
static int call_handle(struct rpc_server *s, struct srv_call *c, char *msg, size_t msg_cap)
{
	const struct rpc_method *m = c->slot->m;
	ProtobufCMessage *req, *reply = NULL;
	struct rpc_call_info ci;
	int st;

	if (!m) {
		rpc_msg_set(msg, msg_cap, "unknown method %.*s",
			    (int)GRPC_SLICE_LENGTH(c->details.method),
			    (const char *)GRPC_SLICE_START_PTR(c->details.method));
		return RPC_UNIMPLEMENTED;
	}
	/* The caller gave up while the call waited behind others: serving it
	 * would only lengthen the wait of those behind it. */
	if (gpr_time_cmp(c->deadline, gpr_now(c->deadline.clock_type)) < 0) {
		rpc_msg_set(msg, msg_cap, "%s: the caller's deadline passed before it was served",
			    m->name);
		return RPC_DEADLINE_EXCEEDED;
	}
	req = rpc_msg_unpack(m->in, c->payload);
	if (!req) {
		rpc_msg_set(msg, msg_cap, "malformed request");
		return RPC_INVALID_ARGUMENT;
	}
	call_info_fill(c, &ci);
	st = m->fn(s->arg, &ci, req, &reply, msg, msg_cap);
	protobuf_c_message_free_unpacked(req, NULL);
	msg[msg_cap - 1] = '\0';

	if (st == RPC_OK && !reply) {
		rpc_msg_set(msg, msg_cap, "%s: the handler gave no reply", m->name);
		return RPC_INTERNAL;
	}
	if (st != RPC_OK) {
		if (reply)
			m->reply_free(reply);
		/* Only gRPC's codes go on the wire. */
		return st > 0 && st <= RPC_UNAUTHENTICATED ? st : RPC_UNKNOWN;
	}
	c->reply = rpc_msg_pack(reply);
	m->reply_free(reply);
	if (!c->reply) {
		rpc_msg_set(msg, msg_cap, "out of memory packing the reply");
		return RPC_RESOURCE_EXHAUSTED;
	}
	return RPC_OK;
}

static void call_serve(struct rpc_server *s, struct srv_call *c)
{
	char msg[512] = "";
	int st = call_handle(s, c, msg, sizeof(msg));
	grpc_slice details = grpc_slice_from_copied_string(msg);
	grpc_op ops[4];
	size_t n = 0;
	grpc_call_error e;

	memset(ops, 0, sizeof(ops));
	ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
	if (st == RPC_OK) {
		ops[n].op = GRPC_OP_SEND_MESSAGE;
		ops[n++].data.send_message.send_message = c->reply;
	}
	ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
	ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
	ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
	ops[n].data.send_status_from_server.status = (grpc_status_code)st;
	ops[n++].data.send_status_from_server.status_details = &details;
	e = grpc_call_start_batch(c->call, ops, n, c, NULL);
	grpc_slice_unref(details);
	if (e != GRPC_CALL_OK)
		call_done(s, c);
}

/* One event from the queue; returns true for the end of the server's shutdown. */
static bool srv_event(struct rpc_server *s, grpc_event ev)
{
	switch (*(enum tag_kind *)ev.tag) {
	case TAG_NEW_CALL: {
		struct srv_slot *sl = ev.tag;
		struct srv_call *c = sl->next;

		sl->next = NULL;
		if (!ev.success) {
			/* The server is shutting down: no call came. */
			call_release(c);
			free(c);
			return false;
		}
		/* Keep the method open while this call is served. If this fails
		 * (no memory), the slot asks again when a call of it completes. */
		if (!atomic_load(&s->stopping))
			slot_request(sl, NULL);
		call_serve(s, c);
		return false;
	}
	case TAG_CALL_DONE:
		call_done(s, ev.tag);
		return false;
	case TAG_SHUTDOWN:
		return true;
	}
	return false;
}

static void *srv_main(void *arg)
{
	struct rpc_server *s = arg;

	for (;;) {
		grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME),
							   NULL);

		if (ev.type != GRPC_OP_COMPLETE || srv_event(s, ev))
			break;
	}
	return NULL;
}

/* Free everything; the server's shutdown is over, or it never started. */
static void srv_free(struct rpc_server *s)
{
	if (s->server)
		grpc_server_destroy(s->server);
	if (s->cq) {
		grpc_completion_queue_shutdown(s->cq);
		for (;;) {
			grpc_event ev = grpc_completion_queue_next(
				s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);

			if (ev.type == GRPC_QUEUE_SHUTDOWN)
				break;
			if (ev.type == GRPC_OP_COMPLETE)
				srv_event(s, ev);
		}
		grpc_completion_queue_destroy(s->cq);
	}
	free(s->slots);
	free(s);
	grpc_shutdown();
}

/* Shut down a started server and free it. */
static void srv_stop(struct rpc_server *s)
{
	atomic_store(&s->stopping, true);
	grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
	if (s->thread_started) {
		struct timespec t;

		clock_gettime(CLOCK_REALTIME, &t);
		t.tv_sec += STOP_GRACE_MS / 1000;
		t.tv_nsec += (long)(STOP_GRACE_MS % 1000) * 1000000;
		if (t.tv_nsec >= 1000000000) {
			t.tv_sec++;
			t.tv_nsec -= 1000000000;
		}
		if (pthread_timedjoin_np(s->thread, NULL, &t) != 0) {
			/* A call that will not finish (a peer that never closes
			 * its side): cancel it; the handler running, if any, still
			 * runs to its end. */
			grpc_server_cancel_all_calls(s->server);
			pthread_join(s->thread, NULL);
		}
	} else {
		grpc_server_cancel_all_calls(s->server);
		srv_main(s);
	}
	srv_free(s);
}

/*
 * gRPC says only "0" when it cannot bind. Try binding the address here to
 * tell an address in use from one that is not valid.
 */
static int srv_bind_error(const char *addr, bool tls, char *msg, size_t msg_cap)
{
	struct addrinfo hints = { .ai_flags = AI_PASSIVE | AI_NUMERICSERV,
				  .ai_socktype = SOCK_STREAM };
	struct addrinfo *res = NULL;
	const char *colon = strrchr(addr, ':');
	char host[256];
	bool in_use = false;
	size_t hl;

	if (!colon || (hl = (size_t)(colon - addr)) >= sizeof(host))
		goto invalid;
	memcpy(host, addr, hl);
	host[hl] = '\0';
	if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
		memmove(host, host + 1, hl - 2);
		host[hl - 2] = '\0';
	}
	if (getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &res) != 0)
		goto invalid;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		int one = 1;

		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno == EADDRINUSE)
			in_use = true;
		close(fd);
	}
	freeaddrinfo(res);
	if (in_use) {
		rpc_msg_set(msg, msg_cap, "cannot listen on %s: address in use", addr);
		return -EADDRINUSE;
	}
invalid:
	rpc_msg_set(msg, msg_cap, "cannot listen on %s%s", addr,
		    tls ? " (a bad address, or TLS files gRPC cannot use)" : " (a bad address)");
	return -EINVAL;
}

/* gRPC takes a port past 65535 modulo 65536: refuse it before. */
static bool srv_port_valid(const char *addr)
{
	const char *colon = strrchr(addr, ':');
	const char *p = colon ? colon + 1 : "";
	unsigned long port = 0;

	if (!*p || strspn(p, "0123456789") != strlen(p))
		return true; /* not a number: gRPC's to judge */
	for (; *p && port <= 65535; p++)
		port = port * 10 + (unsigned long)(*p - '0');
	return port <= 65535;
}

static grpc_server_credentials *srv_creds(const struct rpc_pem *pem)
{
	grpc_ssl_pem_key_cert_pair pair = { .private_key = pem->key, .cert_chain = pem->cert };

	/* With a CA, ask clients for a certificate and refuse bad ones, but
	 * serve clients that have none: callers prove who they are with a
	 * secret or a capability, and TLS here is about the channel. */
	return grpc_ssl_server_credentials_create_ex(
		pem->ca, &pair, 1,
		pem->ca ? GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY
			: GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
		NULL);
}

int rpc_server_start(const char *addr, const struct rpc_tls *tls, const struct rpc_method *methods,
		     unsigned nmethods, void *arg, int *bound_port, rpc_server_t **out, char *msg,
		     size_t msg_cap)
{
	struct rpc_pem pem = { 0 };
	grpc_server_credentials *creds;
	struct rpc_server *s;
	grpc_channel_args ca;
	grpc_arg args[3];
	int rc, port;

	*out = NULL;
	rpc_msg_set(msg, msg_cap, "%s", "");
	if (!addr || (nmethods && !methods)) {
		rpc_msg_set(msg, msg_cap, "no address or no methods");
		return -EINVAL;
	}
	if (!srv_port_valid(addr)) {
		rpc_msg_set(msg, msg_cap, "cannot listen on %s: port out of range", addr);
		return -EINVAL;
	}
	if (tls && (rc = rpc_pem_load(tls, true, &pem, msg, msg_cap))) {
		rpc_pem_free(&pem);
		return rc;
	}
	s = calloc(1, sizeof(*s));
	if (!s || !(s->slots = calloc(nmethods + 1, sizeof(*s->slots)))) {
		free(s);
		rpc_pem_free(&pem);
		return -ENOMEM;
	}
	s->methods = methods;
	s->nmethods = nmethods;
	s->arg = arg;
	s->shutdown_tag = TAG_SHUTDOWN;
	atomic_init(&s->stopping, false);

	grpc_init();
	rpc_args_fill(&ca, args, true);
	s->server = grpc_server_create(&ca, NULL);
	s->cq = grpc_completion_queue_create_for_next(NULL);
	grpc_server_register_completion_queue(s->server, s->cq, NULL);
	for (unsigned i = 0; i <= nmethods; i++) {
		struct srv_slot *sl = &s->slots[i];

		sl->kind = TAG_NEW_CALL;
		sl->s = s;
		if (i == nmethods)
			break;
		sl->m = &methods[i];
		if (!sl->m->name || !sl->m->in || !sl->m->fn || !sl->m->reply_free ||
		    !(sl->handle = grpc_server_register_method(
			      s->server, sl->m->name, NULL,
			      GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0))) {
			rpc_msg_set(msg, msg_cap, "method %u (%s): incomplete or registered twice",
				    i, sl->m->name ? sl->m->name : "no name");
			rpc_pem_free(&pem);
			srv_free(s);
			return -EINVAL;
		}
	}

	creds = tls ? srv_creds(&pem) : grpc_insecure_server_credentials_create();
	port = grpc_server_add_http2_port(s->server, addr, creds);
	grpc_server_credentials_release(creds);
	rpc_pem_free(&pem);
	if (port <= 0) {
		rc = srv_bind_error(addr, tls != NULL, msg, msg_cap);
		srv_free(s);
		return rc;
	}

	grpc_server_start(s->server);
	for (unsigned i = 0; i <= nmethods; i++) {
		if (!slot_request(&s->slots[i], NULL)) {
			srv_stop(s);
			return -ENOMEM;
		}
	}
	if ((rc = pthread_create(&s->thread, NULL, srv_main, s)) != 0) {
		rpc_msg_set(msg, msg_cap, "cannot start the server thread: %s", strerror(rc));
		srv_stop(s);
		return -rc;
	}
	s->thread_started = true;
	if (bound_port)
		*bound_port = port;
	*out = s;
	return 0;
}

void rpc_server_stop(rpc_server_t *s)
{
	if (s)
		srv_stop(s);
}
