/*
 * loded's service: the target threads that answer data-plane requests.
 * loded.c owns the process (configuration, signals, the bootstrap socket);
 * service.c owns the targets, each one thread with its own engine target and
 * UCX worker.
 */
#ifndef LODE_SERVER_SRV_H
#define LODE_SERVER_SRV_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <ucp/api/ucp.h>

#include "server/config.h"

struct srv_tgt;
struct auth_keyring;
struct auth_revoked;

struct srv {
	const struct srv_config *cfg;
	ucp_context_h ctx;
	uint32_t transports;  /* NET_TP_* offered */
	uint8_t bulk;         /* NET_BULK_* preferred, 0: by transport */
	struct sockaddr_storage listen_ss; /* the listen address (targets' UCX listeners use its host) */
	unsigned ntargets;
	struct srv_tgt *tgts[SRV_TARGETS_MAX];
	atomic_bool stop;     /* drain and exit */
	atomic_int spinners;  /* idle targets busy-polling now (see tgt_main) */
	int spin_max;         /* at most this many: half the online CPUs, at least 1 */
	/* What capabilities are verified with: the management service's (NULL:
	 * every request is refused with -LODE_ECAPMISSING). */
	struct auth_keyring *keys;
	struct auth_revoked *revoked;
	uint16_t mgmt_port;   /* the management service's, for the welcome */
	bool mgmt_tls;
	atomic_bool serving;  /* srv_start has returned: the targets may be asked about */
	/* The pool map as this engine knows it: from the hosted service's hook,
	 * or from the heartbeats of a joined engine (join.c). */
	_Atomic uint32_t map_ver; /* 0: no map yet (nothing is refused as stale) */
	atomic_bool fenced;       /* refuse data requests (-LODE_EFENCED): this engine is DOWN
				   * or OUT in the map, or a joined engine that has not heard
				   * from the service within the grace period */
	_Atomic int64_t engine_id; /* this engine's id in the map; -1 until known */
	/* Its part in rebuilds (rebuild.c): NULL until started; freed only after
	 * the heartbeats and the hosted service, which read it, have stopped. */
	struct rebuild *_Atomic rebuild;
};

/*
 * Open every target (recovering each engine), create their workers and
 * start their threads. Errors: from eng_tgt_open and UCX; nothing is left
 * running on failure.
 */
int srv_start(struct srv *s);

/*
 * Worker address of target i, and the port of its UCX listener (0: none),
 * for the welcome message (owned by the service).
 */
void srv_tgt_address(struct srv *s, unsigned i, const void **addr, size_t *len, uint16_t *port);

/* A target's numbers as another thread may read them (published every 20 ms
 * while the target works). */
struct srv_tgt_info {
	uint64_t capacity, used, requests, errors;
	double load; /* CPU share of its thread over the last second, 0..1 */
	bool ram;
};
void srv_tgt_info(struct srv *s, unsigned i, struct srv_tgt_info *out);

/* Set stop, let every target finish what it has in flight, close everything. */
void srv_stop(struct srv *s);

/* Log a line to stderr with a timestamp. */
void srv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
