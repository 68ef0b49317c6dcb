/*
 * Creating a container with properties (object class, chunk size, checksum,
 * encryption): lode_cont_create's path with the properties handed to the
 * management service, which records them and gives them to everyone who
 * opens the container. liblode-internal; the CLI's `lode cont create
 * --class/--chunk-size/--checksum/--encrypt` uses it.
 */
#ifndef LODE_CLIENT_CONT_PROPS_H
#define LODE_CLIENT_CONT_PROPS_H

#include <stdbool.h>
#include <stdint.h>

#include "lode/lode.h"

struct conn_cont_props {
	const char *object_class; /* "S1", "SX", ...; NULL or "": the default (S1) */
	uint32_t chunk_size;      /* bytes; 0: the default (1 MiB) */
	const char *checksum;     /* "crc32c" or "none"; NULL or "": crc32c */
	bool encryption;          /* client-side AES-256-GCM */
	uint32_t crypt_block;     /* encryption: bytes per sealed block; 0: 4 KiB */
};

/*
 * Register label with props in the connection's pool (ContCreate), then
 * create the container on every target with the capability the service
 * grants its owner; *uuid_out (may be NULL) gets its uuid. The service's
 * message for a refused ContCreate is then in conn_mgmt_error(c). Blocks.
 * Errors: -EEXIST, -EINVAL (a bad label or property), -EACCES (no WRITE on
 * the pool), -ENOENT (no such pool), -LODE_EAUTH, and the targets' errors;
 * with encryption, conn_tenant_key's (-ENOKEY: no tenant key).
 */
int conn_cont_create_props(lode_conn_t *c, const char *label, const struct conn_cont_props *props,
			   struct lode_uuid *uuid_out);

#endif
