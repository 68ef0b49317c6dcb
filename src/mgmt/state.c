/*
 * The management state: the model (lode.mgmt.state.v1.State as protobuf-c
 * structs), its file, and the rights policy every handler asks.
 *
 * Persistence is the whole message, rewritten after every change: the state
 * is kilobytes, changes are rare (administration, not I/O), and one atomic
 * rename per change leaves no journal to replay and no half-applied state
 * to repair. The packed bytes of the last good write are kept, so undoing a
 * change whose write failed is unpacking them again.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "lode/errno.h"
#include "mgmt/state.h"
#include "net/proto.h"

#define MS_FILE_MAX (256u << 20) /* a state file beyond this is not ours */

/* Remove element i of a model array of pointers (freeing it) and close the gap. */
#define MS_REMOVE_AT(arr, n, i)                                                                    \
	do {                                                                                       \
		protobuf_c_message_free_unpacked(&(arr)[i]->base, NULL);                           \
		memmove(&(arr)[i], &(arr)[(i) + 1], ((n) - (i) - 1) * sizeof((arr)[0]));           \
		(n)--;                                                                             \
	} while (0)

/* Append elem to a model array; 0 or -ENOMEM (elem is then not taken). */
#define MS_APPEND(arr, n, elem)                                                                    \
	({                                                                                         \
		__typeof__(arr) na_ = realloc((arr), ((n) + 1) * sizeof((arr)[0]));                \
		int rc_ = -ENOMEM;                                                                 \
		if (na_) {                                                                         \
			(arr) = na_;                                                               \
			(arr)[(n)++] = (elem);                                                     \
			rc_ = 0;                                                                   \
		}                                                                                  \
		rc_;                                                                               \
	})

/* ---- the file ------------------------------------------------------------------ */

static char *path_join(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = malloc(n);

	if (p)
		snprintf(p, n, "%s/%s", dir, name);
	return p;
}

/* mkdir -p with mode for what it creates. */
int ms_dir_make(const char *dir, mode_t mode)
{
	char *p = strdup(dir);
	int rc = 0;

	if (!p)
		return -ENOMEM;
	for (char *s = p + 1;; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		char c = *s;

		*s = '\0';
		if (mkdir(p, mode) < 0 && errno != EEXIST) {
			rc = -errno;
			break;
		}
		*s = c;
		if (c == '\0')
			break;
	}
	free(p);
	return rc;
}

static int fd_write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int ms_file_write_atomic(const char *dir, const char *tmp, const char *path, const void *buf,
			 size_t len)
{
	int fd, rc;

	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	/* A temp file left by a crash keeps its mode through O_TRUNC. */
	rc = fchmod(fd, 0600) < 0 ? -errno : 0;
	if (!rc)
		rc = fd_write_all(fd, buf, len);
	if (!rc && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path) < 0)
		rc = -errno;
	if (rc) {
		unlink(tmp);
		return rc;
	}
	/* The rename is durable only once the directory is. */
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	rc = fsync(fd) < 0 ? -errno : 0;
	close(fd);
	return rc;
}

static ms_state *ms_state_new(void)
{
	ms_state *s = malloc(sizeof(*s));

	if (!s)
		return NULL;
	lode__mgmt__state__v1__state__init(s);
	s->version = MS_VERSION;
	s->next_tenant_id = 1;
	s->next_user_id = 1;
	return s;
}

/*
 * Files written before the tenant keys moved to the clients hold a key per
 * tenant in Tenant field 4, now reserved. protobuf-c keeps fields it does
 * not know and packs them again, so they would stay in every later file:
 * drop them here, and the next commit writes the state without them.
 */
static void ms_state_forget_tenant_keys(ms_state *s)
{
	for (size_t i = 0; i < s->n_tenants; i++) {
		ProtobufCMessage *t = &s->tenants[i]->base;

		for (unsigned j = 0; j < t->n_unknown_fields; j++) {
			OPENSSL_cleanse(t->unknown_fields[j].data, t->unknown_fields[j].len);
			free(t->unknown_fields[j].data);
		}
		free(t->unknown_fields);
		t->unknown_fields = NULL;
		t->n_unknown_fields = 0;
	}
}

/* The engine records and the map they describe agree: the same engines in
 * the same (slot) order with the same target counts. A reason, or NULL. */
static const char *ms_state_check_map(const ms_state *s)
{
	static const uint8_t zero[16];
	struct layout_map *map = NULL;
	const char *why = NULL;

	if (s->map.len == 0)
		return s->n_engines ? "engines without a map" : NULL;
	if (layout_map_decode(s->map.data, s->map.len, &map))
		return "the pool map does not decode";
	if (map->nengines != s->n_engines)
		why = "the pool map and the engines differ";
	for (size_t i = 0; !why && i < s->n_engines; i++) {
		const ms_engine *e = s->engines[i];

		if (e->uuid.len != 16 || memcmp(e->uuid.data, zero, 16) == 0)
			why = "an engine uuid";
		else if (e->id >= s->next_engine_id)
			why = "an engine id";
		else if (map->engines[i].id != e->id || map->engines[i].ntgts != e->ntargets)
			why = "the pool map and the engines differ";
	}
	if (!why && (map->version > UINT32_MAX || s->rebuilt_version > map->version ||
		     s->settled_version > map->version || s->reclaimed_version > s->settled_version))
		why = "the pool map's version";
	layout_map_free(map);
	return why;
}

/* What unpacks but cannot be: a reason, or NULL. */
static const char *ms_state_check(const ms_state *s)
{
	if (s->version != MS_VERSION)
		return "unknown version";
	if (s->next_tenant_id == 0 || s->next_user_id == 0)
		return "next ids are zero";
	for (size_t i = 0; i < s->n_tenants; i++)
		if (s->tenants[i]->id >= s->next_tenant_id)
			return "a tenant's id";
	for (size_t i = 0; i < s->n_users; i++)
		if (s->users[i]->id >= s->next_user_id)
			return "a user id";
	for (size_t i = 0; i < s->n_pools; i++)
		if (s->pools[i]->uuid.len != 16)
			return "a pool uuid";
	for (size_t i = 0; i < s->n_containers; i++)
		if (s->containers[i]->uuid.len != 16)
			return "a container uuid";
	for (size_t i = 0; i < s->n_keys; i++)
		if (s->keys[i]->key.len != AUTH_KEY_SIZE || s->keys[i]->id == 0 ||
		    (i && s->keys[i]->id <= s->keys[i - 1]->id))
			return "a signing key";
	if (s->n_keys > AUTH_KEYS_MAX)
		return "too many signing keys";
	return ms_state_check_map(s);
}

int ms_state_unpack(const void *buf, size_t len, ms_state **out, const char **why)
{
	ms_state *s = lode__mgmt__state__v1__state__unpack(NULL, len, buf);

	*why = NULL;
	if (!s)
		return -LODE_ECORRUPT;
	ms_state_forget_tenant_keys(s);
	*why = ms_state_check(s);
	if (*why) {
		protobuf_c_message_free_unpacked(&s->base, NULL);
		return -LODE_ECORRUPT;
	}
	*out = s;
	return 0;
}

static int file_read(const char *path, uint8_t **out, size_t *len)
{
	struct stat sb;
	uint8_t *buf;
	size_t got = 0;
	int fd, rc = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &sb) < 0) {
		rc = -errno;
		goto out;
	}
	if (sb.st_size > MS_FILE_MAX) {
		rc = -LODE_ECORRUPT;
		goto out;
	}
	buf = malloc((size_t)sb.st_size + 1);
	if (!buf) {
		rc = -ENOMEM;
		goto out;
	}
	while (got < (size_t)sb.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)sb.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -LODE_ECORRUPT; /* shrank under us */
			free(buf);
			goto out;
		}
		got += (size_t)n;
	}
	*out = buf;
	*len = got;
out:
	close(fd);
	return rc;
}

int mgmt_state_open(struct mgmt_state *st, const char *dir, char *msg, size_t msg_cap)
{
	const char *why;
	uint8_t *buf = NULL;
	size_t len = 0;
	int rc;

	memset(st, 0, sizeof(*st));
	st->lock_fd = -1;
	rc = ms_dir_make(dir, 0700);
	if (rc) {
		snprintf(msg, msg_cap, "state directory %s: %s", dir, strerror(-rc));
		return rc;
	}
	st->dir = strdup(dir);
	st->path = path_join(dir, MS_STATE_FILE);
	st->tmp_path = path_join(dir, MS_STATE_FILE ".tmp");
	char *lock_path = path_join(dir, "state.lock");

	if (!st->dir || !st->path || !st->tmp_path || !lock_path) {
		free(lock_path);
		rc = -ENOMEM;
		snprintf(msg, msg_cap, "out of memory");
		goto fail;
	}
	st->lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	free(lock_path);
	if (st->lock_fd < 0) {
		rc = -errno;
		snprintf(msg, msg_cap, "%s/state.lock: %s", dir, strerror(-rc));
		goto fail;
	}
	if (flock(st->lock_fd, LOCK_EX | LOCK_NB) < 0) {
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		snprintf(msg, msg_cap, "state directory %s is in use by another service", dir);
		goto fail;
	}
	unlink(st->tmp_path); /* a write a crash interrupted; state.pb is intact */

	rc = file_read(st->path, &buf, &len);
	if (rc == -ENOENT) {
		st->s = ms_state_new();
		if (!st->s) {
			rc = -ENOMEM;
			snprintf(msg, msg_cap, "out of memory");
			goto fail;
		}
		return 1;
	}
	if (rc) {
		snprintf(msg, msg_cap, "%s: %s", st->path, lode_strerror(rc));
		goto fail;
	}
	rc = ms_state_unpack(buf, len, &st->s, &why);
	if (rc == -LODE_ECORRUPT && !why) {
		snprintf(msg, msg_cap, "%s does not unpack as lode.mgmt.state.v1.State (%zu bytes)",
			 st->path, len);
		goto fail;
	}
	if (rc) {
		snprintf(msg, msg_cap, "%s: impossible state: %s", st->path, why);
		goto fail;
	}
	st->saved = buf;
	st->saved_len = len;
	return 0;

fail:
	free(buf);
	mgmt_state_close(st);
	return rc;
}

void mgmt_state_close(struct mgmt_state *st)
{
	if (st->s)
		protobuf_c_message_free_unpacked(&st->s->base, NULL);
	if (st->lock_fd >= 0)
		close(st->lock_fd);
	free(st->saved);
	free(st->dir);
	free(st->path);
	free(st->tmp_path);
	memset(st, 0, sizeof(*st));
	st->lock_fd = -1;
}

void mgmt_state_rollback(struct mgmt_state *st)
{
	ms_state *old;

	if (st->saved) {
		old = lode__mgmt__state__v1__state__unpack(NULL, st->saved_len, st->saved);
		if (old)
			ms_state_forget_tenant_keys(old);
	} else
		old = ms_state_new();
	if (!old) {
		/* Out of memory: the model keeps the change the file lacks;
		 * the next successful write persists it. */
		fprintf(stderr,
			"mgmt: cannot undo a change that was not persisted: out of memory\n");
		return;
	}
	protobuf_c_message_free_unpacked(&st->s->base, NULL);
	st->s = old;
}

int mgmt_state_commit(struct mgmt_state *st)
{
	size_t len = protobuf_c_message_get_packed_size(&st->s->base);
	uint8_t *buf = malloc(len ? len : 1);
	int rc;

	if (!buf) {
		mgmt_state_rollback(st);
		return -ENOMEM;
	}
	protobuf_c_message_pack(&st->s->base, buf);
	if (st->propose)
		rc = st->propose(st->propose_arg, buf, len);
	else
		rc = ms_file_write_atomic(st->dir, st->tmp_path, st->path, buf, len);
	if (rc) {
		free(buf);
		mgmt_state_rollback(st);
		return rc;
	}
	free(st->saved);
	st->saved = buf;
	st->saved_len = len;
	return 0;
}

/* ---- records ------------------------------------------------------------------- */

bool ms_name_valid(const char *s)
{
	size_t n = 0;

	for (; s[n]; n++) {
		char c = s[n];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '-' || c == '_'))
			return false;
	}
	return n >= 1 && n <= MS_NAME_MAX;
}

int ms_str_set(char **field, const char *v)
{
	char *d = strdup(v);

	if (!d)
		return -ENOMEM;
	if (*field && *field != protobuf_c_empty_string)
		free(*field);
	*field = d;
	return 0;
}

int ms_bytes_set(ProtobufCBinaryData *field, const void *v, size_t n)
{
	uint8_t *d = malloc(n ? n : 1);

	if (!d)
		return -ENOMEM;
	memcpy(d, v, n);
	free(field->data);
	field->data = d;
	field->len = n;
	return 0;
}

ms_tenant *ms_tenant_find(const ms_state *s, const char *name)
{
	for (size_t i = 0; i < s->n_tenants; i++)
		if (strcmp(s->tenants[i]->name, name) == 0)
			return s->tenants[i];
	return NULL;
}

ms_tenant *ms_tenant_by_id(const ms_state *s, uint32_t id)
{
	for (size_t i = 0; i < s->n_tenants; i++)
		if (s->tenants[i]->id == id)
			return s->tenants[i];
	return NULL;
}

ms_user *ms_user_find(const ms_state *s, uint32_t tenant, const char *name)
{
	for (size_t i = 0; i < s->n_users; i++)
		if (s->users[i]->tenant == tenant && strcmp(s->users[i]->name, name) == 0)
			return s->users[i];
	return NULL;
}

ms_user *ms_user_by_id(const ms_state *s, uint32_t id)
{
	for (size_t i = 0; i < s->n_users; i++)
		if (s->users[i]->id == id)
			return s->users[i];
	return NULL;
}

ms_group *ms_group_find(const ms_state *s, uint32_t tenant, const char *name)
{
	for (size_t i = 0; i < s->n_groups; i++)
		if (s->groups[i]->tenant == tenant && strcmp(s->groups[i]->name, name) == 0)
			return s->groups[i];
	return NULL;
}

ms_pool *ms_pool_find(const ms_state *s, const char *label)
{
	for (size_t i = 0; i < s->n_pools; i++)
		if (strcmp(s->pools[i]->label, label) == 0)
			return s->pools[i];
	return NULL;
}

ms_cont *ms_cont_find(const ms_state *s, const char *pool, const char *label)
{
	for (size_t i = 0; i < s->n_containers; i++)
		if (strcmp(s->containers[i]->pool, pool) == 0 &&
		    strcmp(s->containers[i]->label, label) == 0)
			return s->containers[i];
	return NULL;
}

ms_pool *ms_pool_by_uuid(const ms_state *s, const uint8_t uuid[16])
{
	for (size_t i = 0; i < s->n_pools; i++)
		if (memcmp(s->pools[i]->uuid.data, uuid, 16) == 0)
			return s->pools[i];
	return NULL;
}

ms_cont *ms_cont_by_uuid(const ms_state *s, const uint8_t uuid[16])
{
	for (size_t i = 0; i < s->n_containers; i++)
		if (memcmp(s->containers[i]->uuid.data, uuid, 16) == 0)
			return s->containers[i];
	return NULL;
}

unsigned ms_pool_containers(const ms_state *s, const ms_pool *p)
{
	unsigned n = 0;

	for (size_t i = 0; i < s->n_containers; i++)
		n += strcmp(s->containers[i]->pool, p->label) == 0;
	return n;
}

int ms_uuid_fresh(const ms_state *s, uint8_t uuid[16])
{
	static const struct lode_uuid root = NET_ROOT_CONT_INIT;
	static const uint8_t zero[16];

	for (;;) {
		if (auth_random(uuid, 16))
			return -EIO;
		if (memcmp(uuid, zero, 16) && memcmp(uuid, root.b, 16) &&
		    !ms_pool_by_uuid(s, uuid) && !ms_cont_by_uuid(s, uuid))
			return 0;
	}
}

ms_acl *ms_acl_find(const ms_state *s, const char *resource, const char *principal)
{
	for (size_t i = 0; i < s->n_acl; i++)
		if (strcmp(s->acl[i]->resource, resource) == 0 &&
		    strcmp(s->acl[i]->principal, principal) == 0)
			return s->acl[i];
	return NULL;
}

ms_revocation *ms_revocation_find(const ms_state *s, uint32_t user)
{
	for (size_t i = 0; i < s->n_revocations; i++)
		if (s->revocations[i]->user == user)
			return s->revocations[i];
	return NULL;
}

bool ms_group_has(const ms_group *g, uint32_t user)
{
	for (size_t i = 0; i < g->n_members; i++)
		if (g->members[i] == user)
			return true;
	return false;
}

ms_tenant *ms_tenant_add(ms_state *s, const char *name, int64_t now_ms)
{
	ms_tenant *t = malloc(sizeof(*t));

	if (!t)
		return NULL;
	lode__mgmt__state__v1__tenant__init(t);
	t->id = s->next_tenant_id;
	t->created_unix_ms = now_ms;
	if (ms_str_set(&t->name, name) || MS_APPEND(s->tenants, s->n_tenants, t)) {
		protobuf_c_message_free_unpacked(&t->base, NULL);
		return NULL;
	}
	s->next_tenant_id++;
	return t;
}

ms_user *ms_user_add(ms_state *s, uint32_t tenant, const char *name, const char *secret_hash,
		     int64_t now_ms)
{
	ms_user *u = malloc(sizeof(*u));

	if (!u)
		return NULL;
	lode__mgmt__state__v1__user__init(u);
	u->id = s->next_user_id;
	u->tenant = tenant;
	u->created_unix_ms = now_ms;
	if (ms_str_set(&u->name, name) || ms_str_set(&u->secret_hash, secret_hash) ||
	    MS_APPEND(s->users, s->n_users, u)) {
		protobuf_c_message_free_unpacked(&u->base, NULL);
		return NULL;
	}
	s->next_user_id++;
	return u;
}

ms_group *ms_group_add(ms_state *s, uint32_t tenant, const char *name)
{
	ms_group *g = malloc(sizeof(*g));

	if (!g)
		return NULL;
	lode__mgmt__state__v1__group__init(g);
	g->tenant = tenant;
	if (ms_str_set(&g->name, name) || MS_APPEND(s->groups, s->n_groups, g)) {
		protobuf_c_message_free_unpacked(&g->base, NULL);
		return NULL;
	}
	return g;
}

int ms_group_member_add(ms_group *g, uint32_t user)
{
	if (ms_group_has(g, user))
		return 0;
	return MS_APPEND(g->members, g->n_members, user);
}

void ms_group_member_remove(ms_group *g, uint32_t user)
{
	for (size_t i = 0; i < g->n_members; i++)
		if (g->members[i] == user) {
			memmove(&g->members[i], &g->members[i + 1],
				(g->n_members - i - 1) * sizeof(g->members[0]));
			g->n_members--;
			return;
		}
}

ms_engine *ms_engine_by_id(const ms_state *s, uint32_t id)
{
	for (size_t i = 0; i < s->n_engines; i++)
		if (s->engines[i]->id == id)
			return s->engines[i];
	return NULL;
}

ms_engine *ms_engine_by_uuid(const ms_state *s, const uint8_t uuid[16])
{
	for (size_t i = 0; i < s->n_engines; i++)
		if (s->engines[i]->uuid.len == 16 &&
		    memcmp(s->engines[i]->uuid.data, uuid, 16) == 0)
			return s->engines[i];
	return NULL;
}

ms_engine *ms_engine_add(ms_state *s, uint32_t id, const uint8_t uuid[16], const char *address,
			 uint32_t ntargets, int64_t now_ms)
{
	ms_engine *e = malloc(sizeof(*e));

	if (!e)
		return NULL;
	lode__mgmt__state__v1__engine__init(e);
	e->id = id;
	e->ntargets = ntargets;
	e->joined_unix_ms = now_ms;
	if (ms_bytes_set(&e->uuid, uuid, 16) || ms_str_set(&e->address, address) ||
	    MS_APPEND(s->engines, s->n_engines, e)) {
		protobuf_c_message_free_unpacked(&e->base, NULL);
		return NULL;
	}
	return e;
}

void ms_engine_remove(ms_state *s, uint32_t id)
{
	for (size_t i = 0; i < s->n_engines; i++)
		if (s->engines[i]->id == id) {
			MS_REMOVE_AT(s->engines, s->n_engines, i);
			return;
		}
}

ms_pool *ms_pool_add(ms_state *s, const char *label, const uint8_t uuid[16], uint64_t size,
		     const uint32_t *targets, size_t ntargets, int64_t now_ms)
{
	ms_pool *p = malloc(sizeof(*p));

	if (!p)
		return NULL;
	lode__mgmt__state__v1__pool__init(p);
	p->size = size;
	p->created_unix_ms = now_ms;
	p->targets = malloc((ntargets ? ntargets : 1) * sizeof(p->targets[0]));
	if (!p->targets || ms_str_set(&p->label, label) || ms_bytes_set(&p->uuid, uuid, 16) ||
	    MS_APPEND(s->pools, s->n_pools, p)) {
		protobuf_c_message_free_unpacked(&p->base, NULL);
		return NULL;
	}
	memcpy(p->targets, targets, ntargets * sizeof(p->targets[0]));
	p->n_targets = ntargets;
	return p;
}

ms_cont *ms_cont_add(ms_state *s, const char *pool, const char *label, const uint8_t uuid[16],
		     uint32_t tenant, int64_t now_ms)
{
	ms_cont *c = malloc(sizeof(*c));

	if (!c)
		return NULL;
	lode__mgmt__state__v1__container__init(c);
	c->tenant = tenant;
	c->created_unix_ms = now_ms;
	if (ms_str_set(&c->pool, pool) || ms_str_set(&c->label, label) ||
	    ms_bytes_set(&c->uuid, uuid, 16) || MS_APPEND(s->containers, s->n_containers, c)) {
		protobuf_c_message_free_unpacked(&c->base, NULL);
		return NULL;
	}
	return c;
}

int ms_acl_set(ms_state *s, const char *resource, const char *principal, uint32_t rights)
{
	ms_acl *e = ms_acl_find(s, resource, principal);

	if (e && rights) {
		e->rights = rights;
		return 0;
	}
	if (e) {
		for (size_t i = 0; i < s->n_acl; i++)
			if (s->acl[i] == e) {
				MS_REMOVE_AT(s->acl, s->n_acl, i);
				break;
			}
		return 0;
	}
	if (!rights)
		return 0;
	e = malloc(sizeof(*e));
	if (!e)
		return -ENOMEM;
	lode__mgmt__state__v1__acl_entry__init(e);
	e->rights = rights;
	if (ms_str_set(&e->resource, resource) || ms_str_set(&e->principal, principal) ||
	    MS_APPEND(s->acl, s->n_acl, e)) {
		protobuf_c_message_free_unpacked(&e->base, NULL);
		return -ENOMEM;
	}
	return 0;
}

int ms_revocation_set(ms_state *s, uint32_t user, int64_t before_ms)
{
	ms_revocation *r = ms_revocation_find(s, user);

	if (r && before_ms) {
		r->before_unix_ms = before_ms;
		return 0;
	}
	if (r) {
		for (size_t i = 0; i < s->n_revocations; i++)
			if (s->revocations[i] == r) {
				MS_REMOVE_AT(s->revocations, s->n_revocations, i);
				break;
			}
		return 0;
	}
	if (!before_ms)
		return 0;
	r = malloc(sizeof(*r));
	if (!r)
		return -ENOMEM;
	lode__mgmt__state__v1__revocation__init(r);
	r->user = user;
	r->before_unix_ms = before_ms;
	if (MS_APPEND(s->revocations, s->n_revocations, r)) {
		free(r);
		return -ENOMEM;
	}
	return 0;
}

int ms_key_add(ms_state *s, uint32_t id, const uint8_t *key, int64_t retired_ms, int64_t created_ms)
{
	ms_key *k = malloc(sizeof(*k));

	if (!k)
		return -ENOMEM;
	lode__mgmt__state__v1__signing_key__init(k);
	k->id = id;
	k->retired_unix_ms = retired_ms;
	k->created_unix_ms = created_ms;
	if (ms_bytes_set(&k->key, key, AUTH_KEY_SIZE) || MS_APPEND(s->keys, s->n_keys, k)) {
		protobuf_c_message_free_unpacked(&k->base, NULL);
		return -ENOMEM;
	}
	return 0;
}

void ms_keys_prune(ms_state *s, int64_t before_ms)
{
	for (size_t i = 0; i < s->n_keys;) {
		if (s->keys[i]->retired_unix_ms != 0 && s->keys[i]->retired_unix_ms <= before_ms)
			MS_REMOVE_AT(s->keys, s->n_keys, i);
		else
			i++;
	}
	while (s->n_keys > AUTH_KEYS_MAX)
		MS_REMOVE_AT(s->keys, s->n_keys, 0);
}

/* Remove the ACL entries on resource, and with prefix set, on everything under it. */
static void ms_acl_remove_resource(ms_state *s, const char *resource, bool below)
{
	size_t n = strlen(resource);

	for (size_t i = 0; i < s->n_acl;) {
		const char *r = s->acl[i]->resource;

		if (strcmp(r, resource) == 0 ||
		    (below && strncmp(r, resource, n) == 0 && r[n] == '/'))
			MS_REMOVE_AT(s->acl, s->n_acl, i);
		else
			i++;
	}
}

void ms_cont_remove(ms_state *s, ms_cont *c)
{
	char res[2 * MS_NAME_MAX + 2];

	snprintf(res, sizeof(res), "%s/%s", c->pool, c->label);
	ms_acl_remove_resource(s, res, false);
	for (size_t i = 0; i < s->n_containers; i++)
		if (s->containers[i] == c) {
			MS_REMOVE_AT(s->containers, s->n_containers, i);
			return;
		}
}

void ms_pool_remove(ms_state *s, ms_pool *p)
{
	for (size_t i = 0; i < s->n_containers;) {
		if (strcmp(s->containers[i]->pool, p->label) == 0)
			ms_cont_remove(s, s->containers[i]);
		else
			i++;
	}
	ms_acl_remove_resource(s, p->label, true);
	for (size_t i = 0; i < s->n_pools; i++)
		if (s->pools[i] == p) {
			MS_REMOVE_AT(s->pools, s->n_pools, i);
			return;
		}
}

/* Does an ACL principal ("user:T/N", "group:T/N", "tenant:T") name tenant t? */
static bool principal_of_tenant(const char *pr, const char *t)
{
	const char *name = strchr(pr, ':');
	size_t n = strlen(t);

	if (!name)
		return false;
	name++;
	if (strncmp(pr, "tenant:", 7) == 0)
		return strcmp(name, t) == 0;
	return strncmp(name, t, n) == 0 && name[n] == '/';
}

void ms_tenant_remove(ms_state *s, ms_tenant *t)
{
	for (size_t i = 0; i < s->n_users;) {
		if (s->users[i]->tenant == t->id)
			MS_REMOVE_AT(s->users, s->n_users, i);
		else
			i++;
	}
	for (size_t i = 0; i < s->n_groups;) {
		if (s->groups[i]->tenant == t->id)
			MS_REMOVE_AT(s->groups, s->n_groups, i);
		else
			i++;
	}
	for (size_t i = 0; i < s->n_acl;) {
		if (principal_of_tenant(s->acl[i]->principal, t->name))
			MS_REMOVE_AT(s->acl, s->n_acl, i);
		else
			i++;
	}
	for (size_t i = 0; i < s->n_tenants; i++)
		if (s->tenants[i] == t) {
			MS_REMOVE_AT(s->tenants, s->n_tenants, i);
			return;
		}
}

/* ---- rights ---------------------------------------------------------------------- */

bool ms_user_sysadmin(const ms_state *s, const ms_user *u)
{
	const ms_tenant *t;

	if (!u->admin)
		return false;
	t = ms_tenant_by_id(s, u->tenant);
	return t && strcmp(t->name, MS_SYSTEM_TENANT) == 0;
}

bool ms_user_tenant_admin(const ms_state *s, const ms_user *u, uint32_t tenant)
{
	return u->admin && (u->tenant == tenant || ms_user_sysadmin(s, u));
}

void ms_resource_name(const ms_pool *p, const ms_cont *c, char *buf, size_t cap)
{
	if (c)
		snprintf(buf, cap, "%s/%s", p->label, c->label);
	else
		snprintf(buf, cap, "%s", p->label);
}

/* Does ACL principal pr name u (u's tenant is t)? */
static bool principal_matches(const ms_state *s, const char *pr, const ms_user *u,
			      const ms_tenant *t)
{
	size_t tn = strlen(t->name);
	const char *q;

	if (strncmp(pr, "tenant:", 7) == 0)
		return strcmp(pr + 7, t->name) == 0;
	if (strncmp(pr, "user:", 5) == 0)
		q = pr + 5;
	else if (strncmp(pr, "group:", 6) == 0)
		q = pr + 6;
	else
		return false;
	/* Users and groups are qualified with their tenant: "T/NAME". */
	if (strncmp(q, t->name, tn) != 0 || q[tn] != '/')
		return false;
	q += tn + 1;
	if (pr[0] == 'u')
		return strcmp(q, u->name) == 0;
	const ms_group *g = ms_group_find(s, t->id, q);

	return g && ms_group_has(g, u->id);
}

unsigned ms_rights(const ms_state *s, const ms_user *u, const ms_pool *p, const ms_cont *c)
{
	char res[2 * MS_NAME_MAX + 2];
	const ms_tenant *t;
	unsigned rights = 0;

	if (ms_user_sysadmin(s, u))
		return MS_RIGHTS_ALL;
	if (c && u->admin && c->tenant == u->tenant)
		return MS_RIGHTS_ALL;
	t = ms_tenant_by_id(s, u->tenant);
	if (!t)
		return 0;
	ms_resource_name(p, c, res, sizeof(res));
	for (size_t i = 0; i < s->n_acl; i++)
		if (strcmp(s->acl[i]->resource, res) == 0 &&
		    principal_matches(s, s->acl[i]->principal, u, t))
			rights |= s->acl[i]->rights;
	return rights & MS_RIGHTS_ALL;
}
