/*
 * Rebuild (rebuild.c): this engine's part in re-creating, on the engines
 * the pool map now assigns, the shards that DOWN engines held.
 */
#ifndef LODE_SERVER_REBUILD_H
#define LODE_SERVER_REBUILD_H

#include "mgmt/mgmt.h"

struct srv;
struct rebuild;

/*
 * Start the thread that rebuilds for each new map version that has DOWN
 * engines. It reaches the system through liblode at addr (this engine's
 * listen address) as the user of the credentials file cred, which needs
 * the rights of a system administrator (it reads and writes every
 * container). s->engine_id must be set before it can take part.
 * Errors: -ENOMEM, -EAGAIN (no thread).
 */
int rebuild_start(struct srv *s, const char *addr, const char *cred, struct rebuild **out);

/* Stop the thread (a copy in progress ends at its next step). NULL is fine. */
void rebuild_stop(struct rebuild *rb);

/* Free, once nothing calls rebuild_report any more. NULL is fine. */
void rebuild_free(struct rebuild *rb);

/*
 * This engine's report for the current rebuild, for the service: its map
 * version, running or finished, the counts, the first error. Any thread.
 * NULL rb: nothing to report.
 */
void rebuild_report(struct rebuild *rb, struct mgmt_rebuild_info *out);

#endif
