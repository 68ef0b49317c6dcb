/*
 * The data-plane wire format: what one UCX Active Message between a liblode
 * client and a loded target carries. Pure encoding, no UCX, so that the
 * decoder can be fuzzed on its own (src/net/fuzz).
 *
 * A message is an AM header and AM data. The AM header is
 *
 *   fixed header (NET_HDR_SIZE bytes, little-endian)
 *     u32 magic   NET_MAGIC          u16 version  NET_VERSION
 *     u16 opcode                     u32 flags    NET_F_*
 *     i32 status  (replies)          u64 req_id   echoed in the reply
 *     u32 map_ver pool-map version   u16 cap_len  u16 args_len
 *     u32 target  the target the sender meant   u32 session (NET_OP_HELLO's, or 0)
 *   capability  cap_len bytes (empty until the control plane issues them)
 *   arguments   args_len bytes, the fields the opcode names (net_op_fields)
 *
 * and the AM data is the value: an inline value of an update, the value of a
 * fetch reply, the keys of a list reply. A large value is not in the data at
 * all when the request names an RMA descriptor: the target then reads it from
 * (update) or writes it to (fetch) the client's registered memory itself.
 *
 * Every decoder checks every length against what is left and refuses
 * trailing bytes; a malformed message decodes to a negative code and the
 * server answers it with that code.
 */
#ifndef LODE_NET_PROTO_H
#define LODE_NET_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "lode/errno.h"
#include "lode/types.h"

#define NET_MAGIC 0x45444f4cu /* "LODE" read as little-endian */
#define NET_VERSION 7 /* 2: capabilities checked, the welcome names the management port;
			* 3: updates and punches carry an epoch (rebuild's);
			* 4: write leases (NET_OP_LEASE);
			* 5: NET_OP_DKEY_DROP, NET_OP_OBJ_FOLD;
			* 6: NET_F_SNAP_HOLD, snapshot epochs above every clock;
			* 7: NET_F_SNAP_TORN, NET_F_SNAP_HOLD on NET_OP_LEASE (a
			*    snapshot's mend), dkeys' and objects' leases */
#define NET_HDR_SIZE 40
#define NET_CAP_MAX 512       /* longest capability accepted */
#define NET_ARGS_MAX 4096     /* longest argument block accepted */
#define NET_RKEY_MAX 1024     /* longest packed rkey accepted */
#define NET_LEASE_MAX_MS 600000u /* longest lease, or snapshot hold, a target grants */
#define NET_TORN_LIST_MAX 16384 /* most bytes of torn arrays a hold answers (NET_F_SNAP_TORN) */

/*
 * The root container, created on every target by loded: it holds the
 * container directory (labels to uuids) that liblode keeps.
 */
#define NET_ROOT_CONT_INIT {{'l', 'o', 'd', 'e', '.', 'r', 'o', 'o', 't', 0, 0, 0, 0, 0, 0, 1}}

/* UCX Active Message ids. */
#define NET_AM_REQUEST 1 /* client -> target */
#define NET_AM_REPLY 2   /* target -> client */

enum net_op {
	NET_OP_PING = 1,
	NET_OP_STATUS,
	NET_OP_CONT_CREATE,
	NET_OP_CONT_DESTROY,
	NET_OP_SNAP_CREATE,
	NET_OP_SNAP_DESTROY,
	NET_OP_SNAP_LIST,
	NET_OP_SV_UPDATE,
	NET_OP_SV_FETCH,
	NET_OP_ARR_UPDATE,
	NET_OP_ARR_FETCH,
	NET_OP_ARR_SIZE,
	NET_OP_OBJ_PUNCH,
	NET_OP_DKEY_PUNCH,
	NET_OP_AKEY_PUNCH,
	NET_OP_ARR_PUNCH,
	NET_OP_OBJ_LIST,
	NET_OP_DKEY_LIST,
	NET_OP_AKEY_LIST,
	NET_OP_AGGREGATE,
	NET_OP_HELLO,  /* data: the client's worker address; reply val: the session */
	NET_OP_BYE,    /* end the header's session */
	NET_OP_LEASE,  /* the write lease of an EC array (src/server/lease.h): epoch is
			* the holder's token, off and len the members' range its
			* write covers, max the ms asked for (0: give it back);
			* -EBUSY while another holds it, reply val its ms left;
			* granted, reply val 1 if the array is torn, and the data
			* the torn range: u64 off, u64 end */
	NET_OP_DKEY_DROP, /* remove every record of the dkey from the target, as if never
			   * written (the reclaim of a dkey it no longer holds, see
			   * docs/decisions/0014); admin rights; -LODE_EKEYEMPTY if none */
	NET_OP_OBJ_FOLD,  /* fold the object's punches on the target into its dkeys
			   * (eng_obj_fold; the reclaim); admin rights */
	NET_OP_COUNT
};

enum net_flag {
	NET_F_REPLY = 1u << 0,    /* this is a reply */
	NET_F_PEER_ERR = 1u << 1, /* NET_OP_HELLO: the client's endpoints report peer failure
				   * (UCX needs both ends of an endpoint pair to agree) */
	NET_F_REBUILD = 1u << 2,  /* an update or punch of rebuild: at the epoch the
				   * arguments name, beneath what clients write now
				   * (src/server/rebuild.c); needs admin rights */
	NET_F_TORN = 1u << 3,     /* NET_OP_LEASE given back: the holder's write may be
				   * half done, the next holder mends the array */
	NET_F_LEASE_READ = 1u << 4, /* NET_OP_LEASE for a degraded read: read rights do
				     * (a writer's needs write rights) */
	NET_F_LEASE_RENEW = 1u << 5, /* NET_OP_LEASE taken again by its holder: -ENOENT
				      * if it is not still the holder's */
	NET_F_LIST_ALL = 1u << 6,    /* NET_OP_OBJ_LIST, _DKEY_LIST, _AKEY_LIST: every
				      * object or key with a record, punched ones too,
				      * whatever the epoch (the reclaim's walk, a rebuild's
				      * copy of snapshots); needs admin rights */
	NET_F_SNAP_HOLD = 1u << 7,   /* NET_OP_SNAP_CREATE: no snapshot, a barrier before
				      * one: hold writers' EC leases of the container, for
				      * the taker whose token is the epoch's high 32 bits,
				      * for the ms in its low ones (0: let go); the reply's
				      * value is the leases still held, its data the
				      * target's clock. On NET_OP_LEASE of an array: a
				      * snapshot taker's mend (lode_snap_create), which
				      * passes the container's holds while the hold of
				      * the token's high 32 bits lasts */
	NET_F_SNAP_TORN = 1u << 8,   /* with NET_F_SNAP_HOLD: after the clock, u32 the
				      * container's torn EC arrays (lease_torn_in), then
				      * as many of them as fit in NET_TORN_LIST_MAX bytes:
				      * u16 n, n bytes (oid hi, lo as u64s, u16 dkey
				      * length, dkey, u16 akey length, akey), u64 off,
				      * u64 end (the members' torn range) */
	NET_F_LEASE_DKEY = 1u << 9,  /* NET_OP_LEASE of the dkey, not of an array: an EC
				      * dkey punch's, which arrays' leases under it
				      * wait for and which waits for them (the akey is
				      * ignored) */
	NET_F_LEASE_OBJ = 1u << 10,  /* NET_OP_LEASE of the whole object (an EC object
				      * punch's; both keys ignored) */
};

/* Argument fields; an opcode's request carries the ones its mask names, in this order. */
enum net_field {
	NET_FLD_CONT = 1u << 0,   /* 16-byte container uuid */
	NET_FLD_OID = 1u << 1,    /* u64 hi, u64 lo */
	NET_FLD_DKEY = 1u << 2,   /* u16 len (1..LODE_KEY_MAX), bytes */
	NET_FLD_AKEY = 1u << 3,   /* u16 len (1..LODE_KEY_MAX), bytes */
	NET_FLD_EPOCH = 1u << 4,  /* u64 */
	NET_FLD_OFF = 1u << 5,    /* u64 */
	NET_FLD_LEN = 1u << 6,    /* u64 */
	NET_FLD_ANCHOR = 1u << 7, /* u8 eof, u16 len (<= 2 + LODE_KEY_MAX), bytes */
	NET_FLD_MAX = 1u << 8,    /* u32: most items or bytes the reply may carry */
	NET_FLD_BULK = 1u << 9,   /* u8 kind (NET_BULK_*), then for RMA: u64 addr, u64 reg,
				   * u16 rkey len, rkey */
};

enum net_bulk {
	NET_BULK_NONE = 0, /* no value, or the value is the AM data */
	NET_BULK_RMA = 1,  /* the value is at addr in the client's memory under rkey */
	NET_BULK_AM = 2,   /* (welcome only) large values travel as AM data, by rendezvous */
};

struct net_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t opcode;
	uint32_t flags;
	int32_t status;
	uint64_t req_id;
	uint32_t map_ver;
	uint16_t cap_len;
	uint16_t args_len;
	uint32_t target;
	uint32_t session; /* the target's name for the client, from NET_OP_HELLO */
};

struct net_anchor {
	uint8_t eof;
	uint16_t len;
	const uint8_t *key; /* points into the decoded buffer */
};

/* A request's arguments; pointers point into the buffer they came from. */
struct net_args {
	struct lode_uuid cont;
	struct lode_oid oid;
	const uint8_t *dkey;
	uint16_t dkey_len;
	const uint8_t *akey;
	uint16_t akey_len;
	uint64_t epoch;
	uint64_t off;
	uint64_t len;
	uint32_t max;
	struct net_anchor anchor;
	uint8_t bulk;
	uint64_t rma_addr;
	uint64_t rma_reg;  /* the client's id of a long-lived registration (0: this request's own) */
	uint16_t rkey_len;
	const uint8_t *rkey;
};

/*
 * A reply's arguments: val is the opcode's result (a fetched value's full
 * length, an array size, a snapshot epoch, an item count), anchor the cursor
 * of a list reply. The data that follows is the value or the listed items.
 */
struct net_reply_args {
	uint64_t val;
	struct net_anchor anchor;
};

/* The fields an opcode's request carries; 0 for an unknown opcode. */
uint32_t net_op_fields(uint16_t opcode);

/* The opcode's name ("sv_update"), or "unknown". */
const char *net_op_name(uint16_t opcode);

/* Write h into out[0..NET_HDR_SIZE). */
void net_hdr_encode(const struct net_hdr *h, uint8_t *out);

/*
 * Decode and check the fixed header of a message whose AM header is
 * buf[0..len): magic, version, and that cap_len and args_len add up to len.
 * Errors: -EPROTO (too short, bad magic, or lengths that do not add up),
 * -EPROTONOSUPPORT (another version), -EMSGSIZE (capability or arguments
 * over their limits).
 */
int net_hdr_decode(const void *buf, size_t len, struct net_hdr *h);

/*
 * Encode the request arguments the opcode names into out (cap bytes).
 * Returns the number of bytes written. Errors: -EINVAL (unknown opcode),
 * -EMSGSIZE (does not fit), -ENAMETOOLONG / -LODE_EKEYEMPTY (a key's length).
 */
int net_args_encode(uint16_t opcode, const struct net_args *a, uint8_t *out, size_t cap);

/*
 * Decode exactly len bytes of request arguments for opcode. Errors:
 * -EOPNOTSUPP (unknown opcode), -EPROTO (short, trailing bytes, a bad bulk
 * kind or anchor), -LODE_EKEYEMPTY, -ENAMETOOLONG.
 */
int net_args_decode(uint16_t opcode, const void *buf, size_t len, struct net_args *a);

/* Encode / decode a reply's arguments: u64 val, then an anchor when has_anchor. */
int net_reply_encode(const struct net_reply_args *r, int has_anchor, uint8_t *out, size_t cap);
int net_reply_decode(const void *buf, size_t len, int has_anchor, struct net_reply_args *r);

/* Whether the opcode's reply carries an anchor. */
int net_op_has_anchor(uint16_t opcode);

/* A target's state, the data of a NET_OP_STATUS reply (NET_STATUS_SIZE bytes). */
#define NET_STATUS_SIZE 64
struct net_status {
	uint64_t records, extent_used, extent_cap, requests, errors, cpu_ns;
	uint8_t ram, direct_io;
};
void net_status_encode(const struct net_status *s, uint8_t *out);
/* Errors: -EPROTO (len is not NET_STATUS_SIZE). */
int net_status_decode(const void *buf, size_t len, struct net_status *s);


/*
 * The bootstrap exchange, over a plain TCP connection to loded's listen
 * address, before any UCX endpoint exists. Each message is framed as a u32
 * little-endian length and that many bytes.
 *
 *   hello   (client) u32 magic NET_BOOT_MAGIC, u16 version, u16 reserved
 *   welcome (server) u32 magic, u16 version, u16 ntargets, i32 status,
 *           u32 inline_max, u32 transports (NET_TP_* offered), u8 bulk
 *           (NET_BULK_* the server prefers for large values, 0: by transport),
 *           u32 pid, u8 host length + host name, u16 the management
 *           service's gRPC port on the same host, u8 whether it wants TLS,
 *           then per target: u32 length + its UCX worker address, u16 the
 *           port of its UCX listener on the listen address (0: none; tcp
 *           clients connect there, see docs/decisions/0004).
 */
#define NET_BOOT_MAGIC 0x42444f4cu /* "LODB" */
#define NET_HELLO_SIZE 8
#define NET_TARGETS_MAX 64
#define NET_WORKER_ADDR_MAX 65536
#define NET_BOOT_MAX (1u << 22)

enum net_transport_bit {
	NET_TP_TCP = 1u << 0,
	NET_TP_SHM = 1u << 1,
	NET_TP_RDMA = 1u << 2,
};

struct net_welcome {
	int32_t status;
	uint16_t ntargets;
	uint32_t inline_max;
	uint32_t transports;
	uint8_t bulk;
	uint32_t pid;
	char host[256];
	uint16_t mgmt_port;   /* the management service (gRPC) on the host the client dialed */
	uint8_t mgmt_tls;
	const uint8_t *addr[NET_TARGETS_MAX]; /* point into the decoded buffer */
	uint32_t addr_len[NET_TARGETS_MAX];
	uint16_t port[NET_TARGETS_MAX];
};

void net_hello_encode(uint8_t *out);
/* Errors: -EPROTO (wrong size or magic), -EPROTONOSUPPORT (other version). */
int net_hello_decode(const void *buf, size_t len);
/* Returns bytes written. Errors: -EMSGSIZE, -EINVAL (too many targets). */
int net_welcome_encode(const struct net_welcome *w, uint8_t *out, size_t cap);
/* Errors: -EPROTO, -EPROTONOSUPPORT, -EMSGSIZE (a length over its limit). */
int net_welcome_decode(const void *buf, size_t len, struct net_welcome *w);

#endif
