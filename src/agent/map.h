/*
 * lode-agent's map from local users to Lode users.
 *
 * The map file has one entry a line, "KEY: TENANT/USER", where KEY is a
 * numeric uid, a login name, or "*" (everyone not listed otherwise);
 * '#' starts a comment, blank lines are ignored. A uid is looked up by its
 * number first, then by its login name, then "*"; a uid matching none is
 * refused. A key may appear once.
 */
#ifndef LODE_AGENT_MAP_H
#define LODE_AGENT_MAP_H

#include <stddef.h>
#include <sys/types.h>

/* Longest "TENANT/USER": two names of at most 127 bytes and the slash. */
#define AGENT_MAP_USER_MAX 255

struct agent_map;

/*
 * Parse a map from text (len bytes; need not end in a NUL), naming it
 * `name` in messages. On success *out is the map (agent_map_free it).
 * Errors: -EINVAL (a line that does not parse, a bad uid, login or Lode
 * name, a key listed twice: msg, cap bytes, says "NAME:LINE: what"),
 * -ENOMEM.
 */
int agent_map_parse(const char *text, size_t len, const char *name, struct agent_map **out,
		    char *msg, size_t cap);

/* agent_map_parse over the file at path (at most 1 MiB). Errors: as
 * agent_map_parse's, -errno (the file cannot be read), -EFBIG. */
int agent_map_load(const char *path, struct agent_map **out, char *msg, size_t cap);

/*
 * The Lode user ("TENANT/USER") for uid, whose login name is login (NULL
 * when it has none), or NULL when the map has no entry for it. The string
 * lives as long as the map.
 */
const char *agent_map_lookup(const struct agent_map *m, uid_t uid, const char *login);

/* How many entries the map has. */
unsigned agent_map_size(const struct agent_map *m);

void agent_map_free(struct agent_map *m);

#endif
