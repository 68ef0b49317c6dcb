/*
 * Tenant key files (keys.c): what `lode keygen` and `make up` use to make
 * one, and what liblode reads. liblode-internal; conn_tenant_key
 * (client.h) is where a connection finds its key.
 */
#ifndef LODE_CLIENT_KEYS_H
#define LODE_CLIENT_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* $XDG_CONFIG_HOME/lode/tenant.key, else ~/.config/lode/tenant.key. */
void tenant_key_default_path(char *out, size_t cap);

/*
 * Write a new random tenant key to path (64 hex digits and a newline, mode
 * 0600, its directories made 0700 where missing). Errors: -EEXIST (a file
 * is there and force is false), -EIO, -errno.
 */
int tenant_key_create(const char *path, bool force);

/* Read the key in path. Errors: -ENOKEY (no file), -EACCES (others may
 * read it, or not a regular file), -EINVAL (not 64 hex digits), -errno. */
int tenant_key_read(const char *path, uint8_t key[32]);

#endif
