/*
 * The table from file descriptor to open file description.
 *
 * Every intercepted call starts with a lookup here, mostly for descriptors
 * that are not Lode files at all (sockets, pipes, UCX's own), so the lookup
 * is one or two atomic loads and takes no lock: a two-level array of atomic
 * pointers indexed by fd, whose chunks are allocated on first use and never
 * freed.
 *
 * The hard case is a close racing a read on the same descriptor. The reader
 * loads the pointer, then takes a reference only if the count is not zero,
 * then checks that the slot still holds the same description; descriptions
 * are never given back to malloc (they go to a free list and are reused),
 * so looking at the count of one that was just released is safe, and the
 * check afterwards catches one that was released and reused meanwhile.
 */
#undef _FORTIFY_SOURCE
#include "preload/preload.h"

#include <stdlib.h>
#include <string.h>

#define PL_FD_CHUNK 1024
#define PL_FD_CHUNKS 1024 /* descriptors up to 2^20 are served; others go to FUSE */

typedef _Atomic(struct pl_desc *) pl_slot_t;

static _Atomic(pl_slot_t *) g_chunks[PL_FD_CHUNKS];
static pthread_mutex_t g_chunk_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_free_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pl_desc *g_free;

/* Handles of dead instances, kept reachable for leak checkers. */
static struct pl_handle *g_dead_handles;

static pl_slot_t *fd_slot(int fd, bool create)
{
	if (fd < 0 || fd >= PL_FD_CHUNK * PL_FD_CHUNKS)
		return NULL;
	unsigned c = (unsigned)fd / PL_FD_CHUNK;
	pl_slot_t *chunk = atomic_load_explicit(&g_chunks[c], memory_order_acquire);
	if (!chunk && create) {
		pthread_mutex_lock(&g_chunk_lock);
		chunk = atomic_load(&g_chunks[c]);
		if (!chunk && (chunk = calloc(PL_FD_CHUNK, sizeof(*chunk))))
			atomic_store_explicit(&g_chunks[c], chunk, memory_order_release);
		pthread_mutex_unlock(&g_chunk_lock);
	}
	return chunk ? &chunk[(unsigned)fd % PL_FD_CHUNK] : NULL;
}

struct pl_desc *pl_desc_alloc(void)
{
	pthread_mutex_lock(&g_free_lock);
	struct pl_desc *d = g_free;
	if (d)
		g_free = d->free_next;
	pthread_mutex_unlock(&g_free_lock);
	if (!d && !(d = calloc(1, sizeof(*d))))
		return NULL;
	d->free_next = NULL;
	pthread_mutex_init(&d->lock, NULL);
	atomic_store(&d->h, NULL);
	d->retired = NULL;
	d->mnt = NULL;
	d->ino = 0;
	d->flags = 0;
	d->dev = 0;
	atomic_store(&d->dirty, false);
	atomic_store(&d->kstale, false);
	atomic_store(&d->nfds, 0);
	atomic_store_explicit(&d->refs, 1, memory_order_release);
	return d;
}

void pl_desc_hold(struct pl_desc *d)
{
	atomic_fetch_add(&d->refs, 1);
}

/* Close a handle if its instance is alive; a dead instance's stays leaked. */
static void desc_handle_close(struct pl_desc *d, struct pl_handle *h)
{
	if (h->epoch == pl_mount_epoch(d->mnt)) {
		pl_enter();
		int rc = lodefs_file_close(h->f);
		pl_leave();
		if (rc < 0 && pl_debug_on)
			pl_debug("close of inode %llu: %s", (unsigned long long)d->ino,
				 lode_strerror(rc));
		free(h);
		return;
	}
	pthread_mutex_lock(&g_free_lock);
	h->next = g_dead_handles;
	g_dead_handles = h;
	pthread_mutex_unlock(&g_free_lock);
}

void pl_desc_put(struct pl_desc *d)
{
	if (atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) != 1)
		return;
	struct pl_handle *h = atomic_exchange(&d->h, NULL);
	if (h)
		desc_handle_close(d, h);
	while ((h = d->retired)) {
		d->retired = h->next;
		desc_handle_close(d, h);
	}
	pthread_mutex_destroy(&d->lock);
	pthread_mutex_lock(&g_free_lock);
	d->free_next = g_free;
	g_free = d;
	pthread_mutex_unlock(&g_free_lock);
}

struct pl_desc *pl_fd_get(int fd)
{
	pl_slot_t *slot = fd_slot(fd, false);
	if (!slot)
		return NULL;
	for (;;) {
		struct pl_desc *d = atomic_load_explicit(slot, memory_order_acquire);
		if (!d)
			return NULL;
		unsigned r = atomic_load_explicit(&d->refs, memory_order_relaxed);
		while (r != 0 && !atomic_compare_exchange_weak_explicit(
					 &d->refs, &r, r + 1, memory_order_acquire, memory_order_relaxed))
			;
		if (r == 0)
			continue; /* released under us: the slot has changed by now */
		if (atomic_load_explicit(slot, memory_order_acquire) == d)
			return d;
		pl_desc_put(d);
	}
}

struct pl_desc *pl_fd_peek(int fd)
{
	pl_slot_t *slot = fd_slot(fd, false);
	return slot ? atomic_load_explicit(slot, memory_order_acquire) : NULL;
}

bool pl_fd_install(int fd, struct pl_desc *d)
{
	pl_slot_t *slot = fd_slot(fd, true);
	if (!slot)
		return false;
	pl_desc_hold(d);
	atomic_fetch_add(&d->nfds, 1);
	struct pl_desc *old = atomic_exchange_explicit(slot, d, memory_order_acq_rel);
	if (old) {
		/* fd was closed behind our back (a raw syscall, say) and reused. */
		atomic_fetch_sub(&old->nfds, 1);
		pl_desc_put(old);
	}
	return true;
}

struct pl_desc *pl_fd_remove(int fd, bool *last)
{
	pl_slot_t *slot = fd_slot(fd, false);
	*last = false;
	if (!slot || !atomic_load_explicit(slot, memory_order_relaxed))
		return NULL;
	struct pl_desc *d = atomic_exchange_explicit(slot, NULL, memory_order_acq_rel);
	if (d)
		*last = atomic_fetch_sub(&d->nfds, 1) == 1;
	return d;
}

void pl_fd_foreach(void (*fn)(int fd, struct pl_desc *d, void *arg), void *arg)
{
	for (unsigned c = 0; c < PL_FD_CHUNKS; c++) {
		pl_slot_t *chunk = atomic_load_explicit(&g_chunks[c], memory_order_acquire);
		if (!chunk)
			continue;
		for (unsigned i = 0; i < PL_FD_CHUNK; i++) {
			struct pl_desc *d = atomic_load_explicit(&chunk[i], memory_order_acquire);
			if (d)
				fn((int)(c * PL_FD_CHUNK + i), d, arg);
		}
	}
}

void pl_fd_fork_prepare(void)
{
	pthread_mutex_lock(&g_chunk_lock);
	pthread_mutex_lock(&g_free_lock);
}

void pl_fd_fork_parent(void)
{
	pthread_mutex_unlock(&g_free_lock);
	pthread_mutex_unlock(&g_chunk_lock);
}

/* A description's lock may have been held by a parent thread that the
 * child does not have: make each one anew (the child has one thread). */
static void fd_child_relock(int fd, struct pl_desc *d, void *arg)
{
	pthread_mutex_init(&d->lock, NULL);
}

void pl_fd_fork_child(void)
{
	pthread_mutex_unlock(&g_free_lock);
	pthread_mutex_unlock(&g_chunk_lock);
	pl_fd_foreach(fd_child_relock, NULL);
}
