/*
 * The ground under the preload: the real libc functions behind the ones it
 * intercepts, the once-per-process decision whether to intercept at all,
 * fork handlers, the exit flush, debug output and counters.
 *
 * The real functions are found with dlsym(RTLD_NEXT) - the next definition
 * after this library in the search order, which is libc's, or a sanitizer
 * runtime's preloaded in front of us that passes on to libc. Resolution
 * happens in a constructor, but the libraries this one depends on (UCX)
 * run their constructors first and may already call open or read, so every
 * wrapper also calls pl_init(), which resolves on first use. Should dlsym
 * itself ever come back into a wrapper on the resolving thread, the calls
 * it could make find raw-syscall stand-ins in the table instead.
 */
#undef _FORTIFY_SOURCE
#include "preload/preload.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- raw-syscall stand-ins, used only while the table is being filled ---- */

static int sys_open(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t mode = va_arg(ap, mode_t);
	va_end(ap);
	return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}

static int sys_openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t mode = va_arg(ap, mode_t);
	va_end(ap);
	return (int)syscall(SYS_openat, dirfd, path, flags, mode);
}

static ssize_t sys_read(int fd, void *buf, size_t len)
{
	return syscall(SYS_read, fd, buf, len);
}

static ssize_t sys_write(int fd, const void *buf, size_t len)
{
	return syscall(SYS_write, fd, buf, len);
}

static off_t sys_lseek(int fd, off_t off, int whence)
{
	return syscall(SYS_lseek, fd, off, whence);
}

static int sys_fstat(int fd, struct stat *st)
{
	return (int)syscall(SYS_fstat, fd, st);
}

static int sys_close(int fd)
{
	return (int)syscall(SYS_close, fd);
}

static void *sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

struct pl_real pl_real = {
	.open = sys_open,
	.openat = sys_openat,
	.read = sys_read,
	.write = sys_write,
	.lseek = sys_lseek,
	.fstat = sys_fstat,
	.close = sys_close,
	.mmap = sys_mmap,
};

__thread int pl_inside __attribute__((tls_model("initial-exec")));
bool pl_debug_on;
bool pl_bypass;
_Atomic bool pl_ucx_used;
static int g_debug_fd = STDERR_FILENO;
struct pl_stat_stripe pl_stats[PL_STAT_STRIPES];
__thread unsigned pl_stat_mine __attribute__((tls_model("initial-exec")));

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Atomic bool g_ready;      /* pl_real is filled and the decision made */
static bool g_enabled;            /* this process intercepts */
static __thread int g_resolving __attribute__((tls_model("initial-exec")));

/* Fill one slot; a symbol libc lacks leaves a stand-in in place, or NULL. */
static void real_resolve(void *slot, const char *name)
{
	void *p = dlsym(RTLD_NEXT, name);
	if (p)
		memcpy(slot, &p, sizeof(p));
}

#define RESOLVE(field, name) real_resolve(&pl_real.field, name)

/* Processes the preload must never route into liblodefs: the daemons, whose
 * own file I/O would otherwise go through the very mount they serve. */
static bool real_is_daemon(void)
{
	const char *n = program_invocation_short_name;
	return n && (strcmp(n, "loded") == 0 || strcmp(n, "lode-fuse") == 0);
}

static bool env_true(const char *name)
{
	const char *v = getenv(name);
	return v && *v && strcmp(v, "0") != 0;
}

static void real_init_once(void)
{
	g_resolving = 1;
	RESOLVE(open, "open");
	RESOLVE(openat, "openat");
	RESOLVE(creat, "creat");
	RESOLVE(read, "read");
	RESOLVE(write, "write");
	RESOLVE(readv, "readv");
	RESOLVE(writev, "writev");
	RESOLVE(pread, "pread");
	RESOLVE(pwrite, "pwrite");
	RESOLVE(preadv, "preadv");
	RESOLVE(pwritev, "pwritev");
	RESOLVE(preadv2, "preadv2");
	RESOLVE(pwritev2, "pwritev2");
	RESOLVE(lseek, "lseek");
	RESOLVE(fstat, "fstat");
	RESOLVE(fxstat, "__fxstat");
	RESOLVE(fstatat, "fstatat");
	RESOLVE(fxstatat, "__fxstatat");
	RESOLVE(statx, "statx");
	RESOLVE(ftruncate, "ftruncate");
	RESOLVE(fsync, "fsync");
	RESOLVE(fdatasync, "fdatasync");
	RESOLVE(close, "close");
	RESOLVE(close_range, "close_range");
	RESOLVE(closefrom, "closefrom");
	RESOLVE(dup, "dup");
	RESOLVE(dup2, "dup2");
	RESOLVE(dup3, "dup3");
	RESOLVE(fcntl, "fcntl");
	RESOLVE(mmap, "mmap");
	RESOLVE(fopen, "fopen");
	RESOLVE(fdopen, "fdopen");

	pl_debug_on = env_true("LODE_PRELOAD_DEBUG");
	if (pl_debug_on) {
		/* A copy of stderr: programs such as coreutils close stderr
		 * before exit, when the summary is printed. */
		int fd = pl_real.fcntl ? pl_real.fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 100) : -1;
		if (fd >= 0)
			g_debug_fd = fd;
	}
	g_enabled = !env_true("LODE_PRELOAD_DISABLE") && !real_is_daemon();
	if (pl_debug_on)
		pl_debug("%s (pid %d): interception %s", program_invocation_short_name,
			 (int)getpid(), g_enabled ? "on" : "off");
	g_resolving = 0;
	atomic_store_explicit(&g_ready, true, memory_order_release);
}

void pl_init(void)
{
	if (atomic_load_explicit(&g_ready, memory_order_acquire) || g_resolving)
		return;
	int saved = errno;
	pthread_once(&g_once, real_init_once);
	errno = saved;
}

bool pl_active(void)
{
	if (pl_inside)
		return false;
	pl_init();
	return g_enabled && !pl_bypass && atomic_load_explicit(&g_ready, memory_order_acquire);
}

void pl_debug(const char *fmt, ...)
{
	char line[512];
	int saved = errno;
	int n = snprintf(line, sizeof(line), "lode-preload[%d]: ", (int)getpid());
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	size_t len = (size_t)n + (size_t)m;
	if (len > sizeof(line) - 2)
		len = sizeof(line) - 2;
	line[len++] = '\n';
	pl_real.write(g_debug_fd, line, len);
	errno = saved;
}

int64_t pl_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

unsigned pl_stat_pick(void)
{
	static _Atomic unsigned next;

	pl_stat_mine = atomic_fetch_add_explicit(&next, 1, memory_order_relaxed) % PL_STAT_STRIPES + 1;
	return pl_stat_mine;
}

uint64_t pl_stat_get(enum pl_stat s)
{
	uint64_t sum = 0;

	for (unsigned i = 0; i < PL_STAT_STRIPES; i++)
		sum += atomic_load_explicit(&pl_stats[i].n[s], memory_order_relaxed);
	return sum;
}

__attribute__((visibility("default"))) void lode_preload_stats(struct lode_preload_stats *out)
{
	out->opens = pl_stat_get(PL_ST_OPENS);
	out->opens_passed = pl_stat_get(PL_ST_OPENS_PASSED);
	out->reads = pl_stat_get(PL_ST_READS);
	out->writes = pl_stat_get(PL_ST_WRITES);
	out->bytes_read = pl_stat_get(PL_ST_BYTES_READ);
	out->bytes_written = pl_stat_get(PL_ST_BYTES_WRITTEN);
	out->mounts = pl_stat_get(PL_ST_MOUNTS);
	out->reopens = pl_stat_get(PL_ST_REOPENS);
	out->errors = pl_stat_get(PL_ST_ERRORS);
}

/*
 * Fork. Our own locks are taken before and released after in both
 * processes, so the child never inherits one held by a thread it does not
 * have.
 *
 * A child whose parent had started UCX cannot use UCX at all: UCX 1.13
 * keeps one process-wide async thread, which the child does not have, and
 * its epoll set, which the child shares with the parent - a connection
 * made in the child would never complete and would feed the parent's
 * thread events for descriptors it does not own. So such a child serves
 * Lode files through FUSE (pl_bypass), inherited descriptors included: the
 * offsets are the kernel's anyway, and the kernel is made to see what the
 * parent wrote through liblodefs (flushed before fork, attributes fetched
 * again in the child). Until exec, which starts the preload afresh. A
 * child of a parent that never touched UCX is a fresh process and mounts
 * its own instance as usual.
 */
static void real_fork_prepare(void)
{
	if (atomic_load(&pl_ucx_used) && !pl_bypass)
		pl_posix_fork_prepare();
	pl_mount_fork_prepare();
	pl_fd_fork_prepare();
}

static void real_fork_parent(void)
{
	pl_fd_fork_parent();
	pl_mount_fork_parent();
}

static void real_fork_child(void)
{
	pl_fd_fork_child();
	pl_mount_fork_child();
	if (atomic_load(&pl_ucx_used) && !pl_bypass) {
		pl_bypass = true;
		pl_posix_fork_child();
		if (pl_debug_on)
			pl_debug("forked from a process using UCX: Lode files go through FUSE here");
	}
}

__attribute__((constructor)) static void real_start(void)
{
	pl_init();
	if (g_enabled)
		pthread_atfork(real_fork_prepare, real_fork_parent, real_fork_child);
}

/*
 * At exit, before the libraries under us (UCX) are torn down: stdio
 * streams over Lode files are flushed and every written file's size made
 * durable, since a program need not close its files before it exits.
 */
__attribute__((destructor)) static void real_stop(void)
{
	if (!g_enabled || pl_inside)
		return;
	if (!pl_bypass)
		pl_posix_exit();
	if (pl_debug_on) {
		struct lode_preload_stats s;
		lode_preload_stats(&s);
		pl_debug("stats opens=%llu opens_passed=%llu reads=%llu writes=%llu "
			 "bytes_read=%llu bytes_written=%llu mounts=%llu reopens=%llu errors=%llu",
			 (unsigned long long)s.opens, (unsigned long long)s.opens_passed,
			 (unsigned long long)s.reads, (unsigned long long)s.writes,
			 (unsigned long long)s.bytes_read, (unsigned long long)s.bytes_written,
			 (unsigned long long)s.mounts, (unsigned long long)s.reopens,
			 (unsigned long long)s.errors);
	}
}
