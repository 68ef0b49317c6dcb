/*
 * lode-fuse's invalidation thread: tells the kernel to drop what it caches
 * of an inode (attributes and pages) or of a name, on behalf of request
 * handlers that may not do it themselves.
 *
 * Why a thread: a handler runs while the kernel may hold locks on the very
 * inode it would invalidate (setxattr holds the inode lock; invalidating
 * pages locks them), so notifying from the handler can deadlock. The
 * handler queues the inode and replies; this thread, which serves no
 * requests, sends the notification once the reply has freed the kernel.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fuse/lfuse.h"

struct inval_item {
	struct inval_item *next;
	uint64_t ino;
	char name[]; /* empty: the inode only */
};

struct lfuse_inval {
	struct fuse_session *se;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct inval_item *head, *tail;
	bool stop;
};

static void inval_send(struct fuse_session *se, const struct inval_item *it)
{
	/* -ENOENT: the kernel holds nothing of it, which is fine */
	fuse_lowlevel_notify_inval_inode(se, it->ino, 0, 0);
	if (it->name[0])
		fuse_lowlevel_notify_inval_entry(se, it->ino, it->name, strlen(it->name));
}

static void *inval_main(void *arg)
{
	struct lfuse_inval *q = arg;

	pthread_mutex_lock(&q->lock);
	for (;;) {
		struct inval_item *it = q->head;

		if (q->stop)
			break;
		if (!it) {
			pthread_cond_wait(&q->cond, &q->lock);
			continue;
		}
		q->head = it->next;
		if (!q->head)
			q->tail = NULL;
		pthread_mutex_unlock(&q->lock);
		inval_send(q->se, it);
		free(it);
		pthread_mutex_lock(&q->lock);
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

int lfuse_inval_start(struct fuse_session *se, struct lfuse_inval **out)
{
	struct lfuse_inval *q = calloc(1, sizeof(*q));
	int rc;

	if (!q)
		return -ENOMEM;
	q->se = se;
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->cond, NULL);
	if ((rc = pthread_create(&q->thread, NULL, inval_main, q)) != 0) {
		pthread_cond_destroy(&q->cond);
		pthread_mutex_destroy(&q->lock);
		free(q);
		return -rc;
	}
	*out = q;
	return 0;
}

int lfuse_inval_post(struct lfuse_inval *q, uint64_t ino, const char *name)
{
	size_t len = name ? strlen(name) : 0;
	struct inval_item *it = malloc(sizeof(*it) + len + 1);

	if (!it)
		return -ENOMEM;
	it->next = NULL;
	it->ino = ino;
	memcpy(it->name, name ? name : "", len + 1);
	pthread_mutex_lock(&q->lock);
	if (q->tail)
		q->tail->next = it;
	else
		q->head = it;
	q->tail = it;
	pthread_cond_signal(&q->cond);
	pthread_mutex_unlock(&q->lock);
	return 0;
}

void lfuse_inval_stop(struct lfuse_inval *q)
{
	if (!q)
		return;
	pthread_mutex_lock(&q->lock);
	q->stop = true;
	pthread_cond_signal(&q->cond);
	pthread_mutex_unlock(&q->lock);
	pthread_join(q->thread, NULL);
	while (q->head) {
		struct inval_item *it = q->head;

		q->head = it->next;
		free(it);
	}
	pthread_cond_destroy(&q->cond);
	pthread_mutex_destroy(&q->lock);
	free(q);
}
