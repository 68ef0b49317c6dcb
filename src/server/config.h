/*
 * loded's configuration: a YAML file and command-line flags, flags winning.
 * See `loded --help` (srv_config_usage) for every setting.
 */
#ifndef LODE_SERVER_CONFIG_H
#define LODE_SERVER_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define SRV_TARGETS_MAX 64

struct srv_config {
	char listen[256];       /* "host:port" of the bootstrap socket; default "127.0.0.1:7420" */
	unsigned targets;       /* number of targets, 1..SRV_TARGETS_MAX; default 1 */
	char path[4096];        /* storage directory; target i lives in <path>/tgt<i>; default "./lode-data" */
	bool ram;               /* RAM mode (path should be on tmpfs); default false */
	uint64_t capacity;      /* extent file size per target in bytes; default 0 (engine's 1 GiB) */
	char transport[16];     /* "auto", "tcp", "shm", "rdma"; default "auto" */
	char bulk[8];           /* how large values move: "auto", "rma", "am"; default "auto" */
	uint32_t inline_max;    /* values up to this many bytes travel inside messages; default 8192 */
	unsigned poll_us;       /* busy-poll this long after the last request before sleeping; default 1000 */
	char pidfile[4096];     /* write the pid here once serving; default "" (none) */
	char addrfile[4096];    /* write the listen address here once serving; default "" (none) */
	bool foreground;        /* unused by the daemon itself (make up backgrounds it); default true */
	/* The management service (src/mgmt), hosted by loded. */
	char mgmt_listen[256];  /* its gRPC address; default "" = the listen host, port 0 (any free one) */
	char mgmt_state[4096];  /* its state directory; default "" = <path>/mgmt */
	char admin_cred[4096];  /* first start: the admin's credentials file; default "" = <mgmt_state>/admin.credentials */
	char tls_cert[4096];    /* PEM certificate for the gRPC endpoint; with tls_key: TLS only */
	char tls_key[4096];     /* its PEM private key */
	unsigned cap_lifetime;  /* capability lifetime in seconds; default 600 */
	unsigned key_rotate;    /* rotate the signing key every this many seconds; default 86400, 0: never */
	char mgmt_addrfile[4096]; /* write the management address here once serving; default "" */
	unsigned heartbeat_ms;  /* joined engines heartbeat this often; default 500 */
	unsigned grace_ms;      /* an engine silent this long is marked DOWN; default 3000 */
	/* Joining a system another loded's management service runs (join.c). */
	char join[256];         /* that service's address; "" (default): host the service here */
	char join_cred[4096];   /* credentials file (user:, secret:) of a system administrator or a node user */
	char join_ca[4096];     /* PEM CA the service's TLS certificate is checked with; "": plaintext */
	/* Hosting a replica of a replicated service (src/mgmt README, "Replication"). */
	char mgmt_replicas[1536]; /* "ID=RAFT_IP:PORT@GRPC_HOST:PORT,..." (1, 3 or 5); "": not replicated */
	unsigned mgmt_replica_id; /* which of them this loded hosts */
	unsigned mgmt_election_ms; /* raft's election timeout (heartbeat a tenth); default 1000 */
};

/* One replica of mgmt_replicas. */
#define SRV_REPLICAS_MAX 5
struct srv_replica {
	uint64_t id;
	char raft[64];  /* "A.B.C.D:PORT" */
	char grpc[256]; /* "HOST:PORT" */
};

/*
 * Parse a mgmt_replicas value: comma-separated "ID=RAFT@GRPC", ID 1..2^32-1
 * and unique, RAFT an IPv4 "A.B.C.D:PORT", GRPC "HOST:PORT", both unique,
 * 1, 3 or 5 of them. Returns how many (into out[SRV_REPLICAS_MAX]).
 * Errors: -EINVAL with a message naming the entry.
 */
int srv_replicas_parse(const char *text, struct srv_replica *out, char *msg, size_t msglen);

/* Fill c with the defaults above. */
void srv_config_defaults(struct srv_config *c);

/*
 * Load a YAML file: a mapping of the setting names above ("listen", "targets",
 * "path", "ram", "capacity", "transport", "bulk", "inline_max", "poll_us",
 * "pidfile", "addrfile") to scalars. Sizes accept K, M, G, T suffixes
 * (powers of 1024). Unknown keys, bad values and YAML errors fail with a
 * message naming the file, line and key written to err (errlen bytes).
 * Errors: -ENOENT (no such file), -EINVAL (bad content).
 */
int srv_config_load(struct srv_config *c, const char *file, char *err, size_t errlen);

/*
 * Parse argv: --config FILE is applied first (wherever it appears), then
 * every other flag overrides it: --listen, --targets, --path, --ram,
 * --capacity, --transport, --bulk, --inline-max, --poll-us, --pidfile,
 * --addrfile; -h/--help sets *help. Errors: -EINVAL with a one-line message
 * in err.
 */
int srv_config_parse_args(struct srv_config *c, int argc, char **argv, bool *help, char *err,
			  size_t errlen);

/* Check consistency (ranges, known transport and bulk names). Errors: -EINVAL + message. */
int srv_config_check(const struct srv_config *c, char *err, size_t errlen);

/* Print the --help text: usage, every flag and YAML key with its default, an example file. */
void srv_config_usage(FILE *out);

#endif
