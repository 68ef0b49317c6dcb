/*
 * What loded and liblode share about UCX and the bootstrap socket: choosing
 * transports, creating a UCX context for them, mapping UCX status codes to
 * the project's error convention, and the framed TCP exchange that hands a
 * client the targets' worker addresses.
 */
#ifndef LODE_NET_NET_H
#define LODE_NET_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

#include "net/proto.h"

/* "tcp" -> NET_TP_TCP, "shm", "rdma"; "auto" -> 0. Errors: -EPROTONOSUPPORT. */
int net_transport_parse(const char *name, uint32_t *bits_out);

/* The name of one transport bit ("tcp", "shm", "rdma"), or "auto" for 0. */
const char *net_transport_name(uint32_t bit);

/*
 * Create a UCX context for the transports in bits (0: every transport UCX
 * finds). loopback restricts tcp to the loopback device, which is what a
 * client reaching 127.0.0.1 needs. With the RMA and AM features, wakeup,
 * and workers that may live on different threads.
 * Errors: -EPROTONOSUPPORT (none of the transports exists here), -ENOMEM,
 * -EIO.
 */
int net_context_create(uint32_t bits, bool loopback, ucp_context_h *ctx_out);

/* Transports available on this host for a context with these bits (probed). */
uint32_t net_transports_probe(void);

/* A worker for one thread (UCS_THREAD_MODE_SINGLE). Errors as ucp_worker_create. */
int net_worker_create(ucp_context_h ctx, ucp_worker_h *worker_out);

/*
 * Handle Active Message id on worker with cb(arg, ...), whole messages only.
 * Errors as ucp_worker_set_am_recv_handler.
 */
int net_am_handler_set(ucp_worker_h worker, unsigned id, ucp_am_recv_callback_t cb, void *arg);

/*
 * Close ep at once, cancelling what is outstanding on it (those requests
 * complete with an error); nothing waits for the peer. 0, or a negative
 * code when UCX refuses: it does for an endpoint without peer-failure
 * handling, and then keeps that endpoint until its worker goes.
 */
int net_ep_close_force(ucp_ep_h ep);

/* UCX status -> 0 or a negative errno. */
int net_ucs_errno(ucs_status_t st);

/*
 * Parse "host", "host:port" or "[v6]:port" (default_port when absent) into a
 * socket address. Errors: -EINVAL (malformed), -EHOSTUNREACH (no such host).
 */
int net_addr_parse(const char *addr, unsigned default_port, struct sockaddr_storage *ss,
		   socklen_t *len);

/* Whether ss is a loopback address (127/8, ::1). */
bool net_addr_is_loopback(const struct sockaddr_storage *ss);

/*
 * Framed messages on a blocking TCP socket: u32 little-endian length, bytes.
 * Both give up after timeout_ms. net_frame_recv allocates *buf (max bytes at
 * most; free() it). Errors: -ETIMEDOUT, -ECONNRESET (peer closed),
 * -EMSGSIZE (a frame over max), errno values from send/recv.
 */
int net_frame_send(int fd, const void *buf, size_t len, unsigned timeout_ms);
int net_frame_recv(int fd, size_t max, unsigned timeout_ms, void **buf, size_t *len);

#endif
