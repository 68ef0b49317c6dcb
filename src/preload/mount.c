/*
 * Which files are Lode files, and the liblodefs instance that serves them.
 *
 * A Lode FUSE mount (lode-fuse) shows in /proc/self/mountinfo with file
 * system type "fuse.lode"; its device number there is the st_dev of every
 * file under it. So the preload never parses paths: it opens through the
 * kernel, and a regular file whose st_dev belongs to a Lode mount is one of
 * ours. mountinfo is read again at most once a second, and at once when a
 * FUSE file system turns up that was not mounted at the last read (a new
 * mount, or a device number reused by a remount).
 *
 * Each mount gets its own liblodefs instance on first use: lode-fuse
 * answers getxattr("user.lode.mount") on the mount point with "<server
 * address> <container label>". If that fails (no attribute, no server) the
 * mount is passed through to FUSE, which still works, and a new attempt
 * waits PL_RETRY_NS.
 *
 * The identity is kept once read, so that a mount whose server went away
 * and came back can be mounted again even if lode-fuse no longer answers.
 * (liblodefs' connections come back on their own when their engine does,
 * docs/decisions/0016; an instance is given up only on the errors
 * pl_conn_error names.)
 *
 * An instance is given up, never freed, when a call on it finds the server
 * gone (other threads may still be inside it, and leaking one instance per
 * such event is cheap), and in a forked child (its UCX state belongs to
 * the parent; such a child stops intercepting altogether, see real.c). The
 * mount's epoch counts these replacements, so an open file can tell that
 * its handle belongs to a dead instance and reopen by inode in the new one.
 * Mounts, too, are never freed: descriptions keep pointers to them after
 * an unmount.
 */
#undef _FORTIFY_SOURCE
#include "preload/preload.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <ucm/api/ucm.h>
#include <unistd.h>

#define PL_FUSE_MAGIC 0x65735546     /* statfs f_type of every FUSE file system */
#define PL_REREAD_NS 1000000000LL    /* mountinfo is trusted this long */
#define PL_RETRY_NS 5000000000LL     /* after a failed mount */
#define PL_LOST_RETRY_NS 1000000000LL /* after a lost connection */
#define PL_OTHERS_MAX 256

/* A liblodefs instance given up (kept reachable for leak checkers). */
struct pl_dead_fs {
	lodefs_t *fs;
	struct pl_dead_fs *next;
};

struct pl_mount {
	struct pl_mount *next;
	int mnt_id;
	dev_t dev;
	char *dir;              /* the mount point */
	bool present;           /* in mountinfo at the last read; under g_lock */
	pthread_mutex_t lock;   /* everything below */
	lodefs_t *fs;           /* NULL: not mounted (yet, or again) */
	_Atomic unsigned epoch; /* bumped whenever fs is given up */
	int64_t retry_ns;       /* no mount attempt before this */
	struct pl_dead_fs *dead;
	/* "user.lode.mount", kept once read: after a lost server the daemon
	 * may no longer answer, but the instance can still be mounted again */
	char addr[256];
	char cont[LODE_LABEL_MAX + 1];
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* the lists and times below */
static struct pl_mount *g_mounts;
static dev_t g_others[PL_OTHERS_MAX]; /* devices known not to be Lode mounts */
static unsigned g_nothers;
static int64_t g_read_ns;
static bool g_read_once;

/* Undo mountinfo's octal escapes (\040 for a space, ...) in place. */
static void mount_unescape(char *s)
{
	char *o = s;
	while (*s) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 4;
		} else {
			*o++ = *s++;
		}
	}
	*o = '\0';
}

/* The whole of /proc/self/mountinfo, NUL-terminated, or NULL. */
static char *mount_slurp(void)
{
	int fd = pl_real.open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	size_t cap = 16384, len = 0;
	char *buf = malloc(cap);
	while (buf) {
		if (cap - len < 4096) {
			char *nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
			cap *= 2;
		}
		ssize_t n = pl_real.read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			free(buf);
			buf = NULL;
			break;
		}
		if (n == 0) {
			buf[len] = '\0';
			break;
		}
		len += (size_t)n;
	}
	pl_real.close(fd);
	return buf;
}

static void mount_other_add(dev_t dev)
{
	for (unsigned i = 0; i < g_nothers; i++)
		if (g_others[i] == dev)
			return;
	if (g_nothers < PL_OTHERS_MAX)
		g_others[g_nothers++] = dev;
}

static bool mount_is_other(dev_t dev)
{
	for (unsigned i = 0; i < g_nothers; i++)
		if (g_others[i] == dev)
			return true;
	return false;
}

/* One mountinfo line: a Lode mount is added (or marked present again). */
static void mount_parse_line(char *line)
{
	/* id parent major:minor root mountpoint options [optional...] - fstype source super */
	char *f[6], *save = NULL, *tok;
	int n = 0;
	while (n < 6 && (tok = strtok_r(n ? NULL : line, " ", &save)))
		f[n++] = tok;
	if (n < 6)
		return;
	while ((tok = strtok_r(NULL, " ", &save)) && strcmp(tok, "-") != 0)
		;
	char *fstype = tok ? strtok_r(NULL, " ", &save) : NULL;
	unsigned maj, min;
	if (!fstype || sscanf(f[2], "%u:%u", &maj, &min) != 2)
		return;
	dev_t dev = makedev(maj, min);
	if (strcmp(fstype, "fuse.lode") != 0) {
		mount_other_add(dev);
		return;
	}
	int id = atoi(f[0]);
	for (struct pl_mount *m = g_mounts; m; m = m->next) {
		if (m->mnt_id == id && m->dev == dev) {
			m->present = true;
			return;
		}
	}
	struct pl_mount *m = calloc(1, sizeof(*m));
	if (!m)
		return;
	mount_unescape(f[4]);
	if (!(m->dir = strdup(f[4]))) {
		free(m);
		return;
	}
	m->mnt_id = id;
	m->dev = dev;
	m->present = true;
	pthread_mutex_init(&m->lock, NULL);
	m->next = g_mounts;
	g_mounts = m;
	if (pl_debug_on)
		pl_debug("found Lode mount %s (dev %u:%u)", m->dir, maj, min);
}

/* Read mountinfo again. Called with g_lock held. */
static void mount_reread(void)
{
	char *buf = mount_slurp();
	g_read_ns = pl_now_ns();
	g_read_once = true;
	if (!buf)
		return;
	for (struct pl_mount *m = g_mounts; m; m = m->next)
		m->present = false;
	g_nothers = 0;
	char *save = NULL;
	for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		mount_parse_line(line);
	free(buf);
}

static struct pl_mount *mount_lookup(dev_t dev)
{
	for (struct pl_mount *m = g_mounts; m; m = m->next)
		if (m->present && m->dev == dev)
			return m;
	return NULL;
}

struct pl_mount *pl_mount_find(dev_t dev, int fd)
{
	/* FUSE file systems always get anonymous devices (major 0). */
	if (major(dev) != 0)
		return NULL;
	pl_enter();
	pthread_mutex_lock(&g_lock);
	if (!g_read_once || pl_now_ns() - g_read_ns > PL_REREAD_NS)
		mount_reread();
	struct pl_mount *m = mount_lookup(dev);
	bool unknown = !m && !mount_is_other(dev);
	pthread_mutex_unlock(&g_lock);
	if (unknown) {
		/* Mounted since the last read? Only a FUSE file system can be ours. */
		struct statfs sf;
		bool fuse = fstatfs(fd, &sf) == 0 && sf.f_type == PL_FUSE_MAGIC;
		pthread_mutex_lock(&g_lock);
		if (fuse)
			mount_reread();
		if (!(m = mount_lookup(dev)))
			mount_other_add(dev);
		pthread_mutex_unlock(&g_lock);
	}
	pl_leave();
	return m;
}

/*
 * m->addr and m->cont from "<address> <container>", as lode-fuse answers
 * on the mount point. Called with m->lock held.
 */
static int mount_identity(struct pl_mount *m)
{
	char buf[512];
	if (m->addr[0])
		return 0;
	ssize_t n = getxattr(m->dir, "user.lode.mount", buf, sizeof(buf) - 1);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	char *sp = strchr(buf, ' ');
	if (!sp)
		return -EINVAL;
	*sp = '\0';
	char *c = sp + 1;
	c[strcspn(c, " \n")] = '\0';
	if (!*buf || !*c || strlen(buf) >= sizeof(m->addr) || strlen(c) >= sizeof(m->cont))
		return -EINVAL;
	strcpy(m->cont, c);
	strcpy(m->addr, buf);
	return 0;
}

/* Keep a given-up instance reachable. Called with m->lock held. */
static void mount_bury(struct pl_mount *m)
{
	struct pl_dead_fs *d = malloc(sizeof(*d));
	if (d) {
		d->fs = m->fs;
		d->next = m->dead;
		m->dead = d;
	}
	m->fs = NULL;
	atomic_fetch_add(&m->epoch, 1);
}

/*
 * UCX's memory hooks (UCM, "bistro" mode) overwrite the first mmap in the
 * process - the preload's own - with a jump to UCX, so the preload's mmap
 * work has to come from UCX's mmap event once UCX is up. Nothing in here
 * may allocate (see ucm_event_callback_t).
 */
static void mount_mmap_event(ucm_event_type_t type, ucm_event_t *ev, void *arg)
{
	if (ev->mmap.fd >= 0 && !(ev->mmap.flags & MAP_ANONYMOUS))
		pl_mmap_prepare(ev->mmap.fd);
}

static void mount_hook_once(void)
{
	/* NO_INSTALL: ride on UCX's hooks where it has them, install none. */
	ucs_status_t st = ucm_set_event_handler(UCM_EVENT_MMAP | UCM_EVENT_FLAG_NO_INSTALL, -1000,
						mount_mmap_event, NULL);
	if (st != UCS_OK && pl_debug_on)
		pl_debug("no UCX mmap event (status %d): the preload's own mmap serves", (int)st);
}

lodefs_t *pl_mount_fs(struct pl_mount *m, unsigned *epoch_out)
{
	static pthread_once_t hook_once = PTHREAD_ONCE_INIT;
	pl_enter();
	pthread_mutex_lock(&m->lock);
	lodefs_t *fs = m->fs;
	if (!fs && pl_now_ns() >= m->retry_ns) {
		int rc = mount_identity(m);
		if (rc == 0) {
			atomic_store(&pl_ucx_used, true);
			rc = lodefs_mount(m->addr, m->cont, NULL, &fs);
		}
		if (rc < 0) {
			fs = NULL;
			m->retry_ns = pl_now_ns() + PL_RETRY_NS;
			if (pl_debug_on)
				pl_debug("mount %s: %s; its files go through FUSE", m->dir,
					 lode_strerror(rc));
		} else {
			m->fs = fs;
			pthread_once(&hook_once, mount_hook_once);
			pl_stat_add(PL_ST_MOUNTS, 1);
			if (pl_debug_on)
				pl_debug("mounted %s: container %s at %s", m->dir, m->cont, m->addr);
		}
	}
	*epoch_out = atomic_load(&m->epoch);
	pthread_mutex_unlock(&m->lock);
	pl_leave();
	return fs;
}

unsigned pl_mount_epoch(const struct pl_mount *m)
{
	return atomic_load_explicit(&m->epoch, memory_order_acquire);
}

bool pl_conn_error(int rc)
{
	return rc == -ENOTCONN || rc == -ECONNRESET || rc == -ETIMEDOUT || rc == -EPROTO ||
	       rc == -ECONNREFUSED || rc == -EHOSTUNREACH;
}

void pl_mount_lost(struct pl_mount *m, unsigned epoch, int rc)
{
	pthread_mutex_lock(&m->lock);
	if (m->fs && atomic_load(&m->epoch) == epoch) {
		if (pl_debug_on)
			pl_debug("lost the server of %s: %s", m->dir, lode_strerror(rc));
		mount_bury(m);
		m->retry_ns = pl_now_ns() + PL_LOST_RETRY_NS;
	}
	pthread_mutex_unlock(&m->lock);
}

void pl_mount_fork_prepare(void)
{
	pthread_mutex_lock(&g_lock);
}

void pl_mount_fork_parent(void)
{
	pthread_mutex_unlock(&g_lock);
}

/*
 * In the child every instance is dead: bury it, so that nothing reaches it
 * (real.c then turns interception off in a child of a UCX user). A
 * mount's lock may have been held by a parent thread in the middle of
 * mounting; that thread does not exist here, so the lock is made anew (the
 * child has one thread, nothing can race).
 */
void pl_mount_fork_child(void)
{
	pthread_mutex_unlock(&g_lock);
	for (struct pl_mount *m = g_mounts; m; m = m->next) {
		pthread_mutex_init(&m->lock, NULL);
		if (m->fs)
			mount_bury(m);
		else
			atomic_fetch_add(&m->epoch, 1);
		m->retry_ns = 0;
	}
}
