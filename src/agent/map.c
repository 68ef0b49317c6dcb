/*
 * lode-agent's map from local users to Lode users (map.h has the format).
 *
 * The map is small (one line per local account at most) and read far more
 * often than it changes, so it is a plain array searched from the front:
 * a lookup is a few string compares. Everything a line says is checked
 * when the map is read, so that a typo stops the agent at start (or keeps
 * the old map on a reload) rather than refusing someone later.
 */
#include "agent/map.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAP_FILE_MAX (1 << 20)
#define NAME_MAX_LEN 127  /* a Lode name (proto/lode/mgmt/v1/mgmt.proto) */
#define LOGIN_MAX_LEN 32  /* useradd's limit */

struct map_entry {
	enum { KEY_UID, KEY_LOGIN, KEY_ANY } kind;
	uid_t uid;
	char login[LOGIN_MAX_LEN + 1];
	char user[AGENT_MAP_USER_MAX + 1];
	unsigned line;
};

struct agent_map {
	struct map_entry *e;
	unsigned n, cap;
};

/* Letters, digits, '.', '-' and '_': what the service accepts in a name. */
static bool lode_name_ok(const char *s, size_t len)
{
	if (len == 0 || len > NAME_MAX_LEN)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == '-' || s[i] == '_'))
			return false;
	return true;
}

/* A login as useradd allows it: [A-Za-z_][A-Za-z0-9._-]*, an optional final '$'. */
static bool login_ok(const char *s, size_t len)
{
	if (len == 0 || len > LOGIN_MAX_LEN || (s[0] >= '0' && s[0] <= '9') || s[0] == '-' ||
	    s[0] == '.')
		return false;
	for (size_t i = 0; i < len; i++) {
		if (s[i] == '$' && i == len - 1)
			break;
		if (!lode_name_ok(s + i, 1))
			return false;
	}
	return true;
}

static bool all_digits(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return len > 0;
}

/* s[0..*len) without the spaces and tabs at either end. */
static const char *strip(const char *s, size_t *len)
{
	while (*len && (*s == ' ' || *s == '\t')) {
		s++;
		(*len)--;
	}
	while (*len && (s[*len - 1] == ' ' || s[*len - 1] == '\t' || s[*len - 1] == '\r'))
		(*len)--;
	return s;
}

static bool same_key(const struct map_entry *a, const struct map_entry *b)
{
	if (a->kind != b->kind)
		return false;
	return a->kind == KEY_ANY || (a->kind == KEY_UID && a->uid == b->uid) ||
	       (a->kind == KEY_LOGIN && strcmp(a->login, b->login) == 0);
}

/* One line's entry into *e. Returns NULL or what is wrong with it. */
static const char *line_parse(const char *s, size_t len, struct map_entry *e)
{
	const char *colon = memchr(s, ':', len), *k, *v, *slash;
	size_t klen, vlen;

	if (!colon)
		return "expected \"UID_OR_LOGIN: TENANT/USER\"";
	klen = (size_t)(colon - s);
	vlen = len - klen - 1;
	k = strip(s, &klen);
	v = strip(colon + 1, &vlen);
	if (klen == 1 && k[0] == '*') {
		e->kind = KEY_ANY;
	} else if (all_digits(k, klen)) {
		unsigned long long uid = 0;

		for (size_t i = 0; i < klen && uid <= 0xffffffffull; i++)
			uid = uid * 10 + (unsigned)(k[i] - '0');
		/* (uid_t)-1 means "no uid" to the kernel: nobody has it */
		if (uid >= 0xffffffffull)
			return "uid out of range";
		e->kind = KEY_UID;
		e->uid = (uid_t)uid;
	} else if (login_ok(k, klen)) {
		e->kind = KEY_LOGIN;
		memcpy(e->login, k, klen);
		e->login[klen] = 0;
	} else {
		return "the key is not a uid, a login name or '*'";
	}
	slash = memchr(v, '/', vlen);
	if (!slash)
		return "the Lode user must be TENANT/USER";
	if (!lode_name_ok(v, (size_t)(slash - v)) ||
	    !lode_name_ok(slash + 1, vlen - (size_t)(slash - v) - 1))
		return "TENANT and USER are 1..127 letters, digits, '.', '-' or '_'";
	memcpy(e->user, v, vlen);
	e->user[vlen] = 0;
	return NULL;
}

int agent_map_parse(const char *text, size_t len, const char *name, struct agent_map **out,
		    char *msg, size_t cap)
{
	struct agent_map *m = calloc(1, sizeof(*m));
	const char *p = text, *end = text + len;
	unsigned line = 0;

	*out = NULL;
	if (!m)
		return -ENOMEM;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p)), *hash, *why;
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		struct map_entry e = {0};

		line++;
		if ((hash = memchr(p, '#', n)))
			n = (size_t)(hash - p);
		if (memchr(p, 0, n)) {
			snprintf(msg, cap, "%s:%u: a NUL byte", name, line);
			goto bad;
		}
		e.line = line;
		{
			size_t sl = n;
			const char *s = strip(p, &sl);

			p = nl ? nl + 1 : end;
			if (sl == 0)
				continue;
			if ((why = line_parse(s, sl, &e))) {
				snprintf(msg, cap, "%s:%u: %s", name, line, why);
				goto bad;
			}
		}
		for (unsigned i = 0; i < m->n; i++) {
			if (same_key(&m->e[i], &e)) {
				snprintf(msg, cap, "%s:%u: the same key as line %u", name, line,
					 m->e[i].line);
				goto bad;
			}
		}
		if (m->n == m->cap) {
			unsigned ncap = m->cap ? 2 * m->cap : 8;
			struct map_entry *ne = realloc(m->e, ncap * sizeof(*ne));

			if (!ne) {
				agent_map_free(m);
				return -ENOMEM;
			}
			m->e = ne;
			m->cap = ncap;
		}
		m->e[m->n++] = e;
	}
	*out = m;
	return 0;
bad:
	agent_map_free(m);
	return -EINVAL;
}

int agent_map_load(const char *path, struct agent_map **out, char *msg, size_t cap)
{
	FILE *f = fopen(path, "r");
	char *text;
	size_t n;
	int rc;

	*out = NULL;
	if (!f) {
		rc = -errno;
		snprintf(msg, cap, "%s: %s", path, strerror(-rc));
		return rc;
	}
	if (!(text = malloc(MAP_FILE_MAX + 1))) {
		fclose(f);
		return -ENOMEM;
	}
	n = fread(text, 1, MAP_FILE_MAX + 1, f);
	if (ferror(f)) {
		rc = -EIO;
		snprintf(msg, cap, "%s: read error", path);
	} else if (n > MAP_FILE_MAX) {
		rc = -EFBIG;
		snprintf(msg, cap, "%s: larger than %d bytes", path, MAP_FILE_MAX);
	} else {
		rc = agent_map_parse(text, n, path, out, msg, cap);
	}
	fclose(f);
	free(text);
	return rc;
}

const char *agent_map_lookup(const struct agent_map *m, uid_t uid, const char *login)
{
	const char *any = NULL;

	for (unsigned i = 0; i < m->n; i++)
		if (m->e[i].kind == KEY_UID && m->e[i].uid == uid)
			return m->e[i].user;
	for (unsigned i = 0; i < m->n; i++) {
		if (m->e[i].kind == KEY_LOGIN && login && strcmp(m->e[i].login, login) == 0)
			return m->e[i].user;
		if (m->e[i].kind == KEY_ANY)
			any = m->e[i].user;
	}
	return any;
}

unsigned agent_map_size(const struct agent_map *m)
{
	return m->n;
}

void agent_map_free(struct agent_map *m)
{
	if (!m)
		return;
	free(m->e);
	free(m);
}
