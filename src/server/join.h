/*
 * Membership of a joined engine (join.c): a loded started with --join logs
 * in to the management service another loded hosts, joins as an engine and
 * heartbeats; the service's keys, revocations and pool map come back with
 * every reply.
 */
#ifndef LODE_SERVER_JOIN_H
#define LODE_SERVER_JOIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct srv;
struct member;

/*
 * Join the service at join ("HOST:PORT"; a replicated service's follower
 * redirects, and the member follows) with the credentials file cred. With
 * local_tables (a loded hosting a replica), s->keys and s->revoked are left
 * as they are (the local replica's) and cred may appear later (the first
 * leader writes it): it is read when the member first logs in.
 * Read the credentials, load or make the engine's uuid, and
 * make the first attempt: credentials or a join the service refuses fail
 * with its message in msg; a service that does not answer yet is retried by
 * the member's thread while the engine stays fenced. On success s->keys and
 * s->revoked point at the member's copies (valid until member_stop).
 * Errors: -errno (the credentials file), -EINVAL, -LODE_ECORRUPT (a damaged
 * engine.uuid), the service's refusal (rpc_status_errno).
 */
int member_start(struct srv *s, const char *join, const char *cred, bool local_tables,
		 struct member **out, char *msg, size_t cap);

/*
 * The "user:" and "secret:" lines of a credentials file (the format make up
 * writes). Errors: -errno (the file), -EINVAL (a line missing); msg says.
 */
int srv_cred_read(const char *path, char *user, size_t ucap, char *secret, size_t scap,
		  char *msg, size_t cap);

/* Stop heartbeating and free. The targets must be stopped first. NULL is fine. */
void member_stop(struct member *m);

/*
 * The engine's identity: 16 random bytes kept as hex in DIR/engine.uuid,
 * made (fsync'ed) on the first start. Errors: -errno, -LODE_ECORRUPT, -EIO.
 */
int srv_engine_uuid(const char *dir, uint8_t uuid[16], char *msg, size_t cap);

#endif
