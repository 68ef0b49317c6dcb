/*
 * Where liblode finds the tenant key, and what it does with it.
 *
 * An encrypted container's data is encrypted here, in the client, with a
 * data key of its own; the management service keeps that key only wrapped
 * (AES-256-GCM) under the tenant key, which never leaves the client's side.
 * A storage node therefore never sees a key that opens anything.
 *
 * conn_tenant_key is the one place the tenant key is looked up, so that
 * lode-agent (which will hand tenant keys to the processes of its node)
 * is added here and nowhere else.
 */
#include "client/keys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/client.h"

/* $XDG_CONFIG_HOME/lode/NAME, else ~/.config/lode/NAME. */
static void config_path(const char *name, char *out, size_t cap)
{
	const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");

	if (xdg && *xdg)
		snprintf(out, cap, "%s/lode/%s", xdg, name);
	else
		snprintf(out, cap, "%s/.config/lode/%s", home && *home ? home : "/root", name);
}

void tenant_key_default_path(char *out, size_t cap)
{
	config_path("tenant.key", out, cap);
}

static int hex_val(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

int tenant_key_read(const char *path, uint8_t key[AUTH_AEAD_KEY])
{
	char text[2 * AUTH_AEAD_KEY + 3];
	struct stat sb;
	ssize_t n;
	int fd, rc = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return errno == ENOENT ? -ENOKEY : -errno;
	/* Like ssh with its private keys: a key others may read is not one. */
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || (sb.st_mode & 077)) {
		close(fd);
		return -EACCES;
	}
	n = read(fd, text, sizeof(text));
	close(fd);
	if (n < 0)
		return -EIO;
	while (n > 2 * AUTH_AEAD_KEY && (text[n - 1] == '\n' || text[n - 1] == '\r'))
		n--;
	if (n != 2 * AUTH_AEAD_KEY)
		rc = -EINVAL;
	for (int i = 0; rc == 0 && i < AUTH_AEAD_KEY; i++) {
		int hi = hex_val(text[2 * i]), lo = hex_val(text[2 * i + 1]);

		if (hi < 0 || lo < 0)
			rc = -EINVAL;
		else
			key[i] = (uint8_t)(hi << 4 | lo);
	}
	explicit_bzero(text, sizeof(text));
	if (rc < 0)
		explicit_bzero(key, AUTH_AEAD_KEY);
	return rc;
}

/* Make the directories above path (mode 0700) where missing. */
static int parents_make(const char *path)
{
	char dir[PATH_MAX];

	snprintf(dir, sizeof(dir), "%s", path);
	for (char *p = dir + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(dir, 0700) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	return 0;
}

int tenant_key_create(const char *path, bool force)
{
	static const char hex[] = "0123456789abcdef";
	uint8_t key[AUTH_AEAD_KEY];
	char text[2 * AUTH_AEAD_KEY + 1], tmp[PATH_MAX];
	int fd, rc;

	if (!force && access(path, F_OK) == 0)
		return -EEXIST;
	if ((rc = parents_make(path)) < 0)
		return rc;
	if (auth_random(key, sizeof(key)))
		return -EIO;
	for (int i = 0; i < AUTH_AEAD_KEY; i++) {
		text[2 * i] = hex[key[i] >> 4];
		text[2 * i + 1] = hex[key[i] & 15];
	}
	text[2 * AUTH_AEAD_KEY] = '\n';
	explicit_bzero(key, sizeof(key));
	/* A temporary file renamed into place: a crash never leaves half a key,
	 * and --force replaces the old one whole. */
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		explicit_bzero(text, sizeof(text));
		return -errno;
	}
	rc = write(fd, text, sizeof(text)) == (ssize_t)sizeof(text) && fsync(fd) == 0 ? 0 : -EIO;
	explicit_bzero(text, sizeof(text));
	close(fd);
	if (rc == 0 && !force && link(tmp, path) < 0)
		rc = -errno; /* made meanwhile by someone else: keep theirs */
	else if (rc == 0 && force && rename(tmp, path) < 0)
		rc = -errno;
	unlink(tmp);
	return rc;
}

/* The credentials file's "tenant_key:" line, if any. */
static void cred_tenant_key(char *out, size_t cap)
{
	struct conn_cred *cr = calloc(1, sizeof(*cr));
	const char *f = getenv("LODE_CREDENTIALS");
	char path[PATH_MAX];

	out[0] = 0;
	if (!cr)
		return;
	if (f && *f)
		snprintf(path, sizeof(path), "%s", f);
	else
		config_path("credentials", path, sizeof(path));
	if (cred_file_load(path, cr) == 0)
		snprintf(out, cap, "%s", cr->tenant_key);
	explicit_bzero(cr, sizeof(*cr));
	free(cr);
}

int conn_tenant_key(lode_conn_t *c, uint8_t key[AUTH_AEAD_KEY])
{
	const char *env = getenv("LODE_TENANT_KEY");
	char path[PATH_MAX];

	(void)c; /* lode-agent: the connection will know the agent to ask */
	if (env && *env)
		snprintf(path, sizeof(path), "%s", env);
	else
		cred_tenant_key(path, sizeof(path));
	if (!path[0])
		tenant_key_default_path(path, sizeof(path));
	return tenant_key_read(path, key);
}

int conn_data_key_new(lode_conn_t *c, uint8_t wrapped[AUTH_WRAPPED_SIZE])
{
	uint8_t tkey[AUTH_AEAD_KEY], dkey[AUTH_AEAD_KEY];
	int rc = conn_tenant_key(c, tkey);

	if (rc < 0)
		return rc;
	rc = auth_random(dkey, sizeof(dkey)) ? -EIO : auth_key_wrap(tkey, dkey, wrapped);
	explicit_bzero(tkey, sizeof(tkey));
	explicit_bzero(dkey, sizeof(dkey));
	return rc;
}
