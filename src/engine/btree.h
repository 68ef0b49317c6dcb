/*
 * An in-memory B+tree ordered map: the storage engine's index.
 *
 * The tree orders opaque items by a byte-string key that it reads from each
 * item through the bt_key_fn given to bt_create(). Keys compare with memcmp
 * over their common length; when one is a prefix of the other the shorter
 * sorts first. Keys are unique: inserting an equal key replaces the item.
 *
 * Ownership: items belong to the caller. The tree stores only pointers to
 * them and never frees them (except through the callback of bt_destroy()).
 * An item must stay valid, and its key unchanged, while it is in the tree;
 * once bt_remove() or a replacing bt_insert() has handed it back, the caller
 * may free it at once: the tree keeps its own copies of the keys it needs.
 *
 * Cursors: a struct bt_cur is plain data on the caller's stack. Any
 * bt_insert() or bt_remove() on the tree invalidates every cursor on it (a
 * failed one too); only bt_seek() and bt_first() may then be called with
 * such a cursor, to position it afresh.
 *
 * Threading: none. A tree is used by one thread at a time; lookups from
 * several threads are safe only while nobody modifies the tree.
 *
 * Blocking: no call blocks or does I/O.
 *
 * Keys passed to the calls below may be NULL when their length is 0.
 *
 * Errors: 0 or a negative errno value, listed with each call.
 */
#ifndef LODE_ENGINE_BTREE_H
#define LODE_ENGINE_BTREE_H

#include <stddef.h>
#include <stdint.h>

#include "lode/errno.h"

/*
 * Return the key of item and store its length in *len. Called often (a
 * lookup, insert or remove usually calls it once or twice, splits and merges
 * once per item moved), so it should be cheap. The returned bytes must stay
 * valid and unchanged while the item is in the tree.
 */
typedef const uint8_t *(*bt_key_fn)(const void *item, uint32_t *len);

struct bt;

/* A position in a tree. The fields are private to btree.c. */
struct bt_cur {
	void *leaf;   /* the leaf holding the current item; NULL at the end */
	uint32_t pos; /* the current item's slot in that leaf */
};

/*
 * Create an empty tree whose items' keys key_of returns, and store it in
 * *out. An empty tree holds no nodes (bt_bytes() is 0).
 * Errors: -EFAULT (key_of or out NULL), -ENOMEM.
 */
int bt_create(bt_key_fn key_of, struct bt **out);

/*
 * Free the tree and all its nodes. When free_item is not NULL it is called
 * once for every item still in the tree, in no particular order, after which
 * the tree does not touch the item again. t may be NULL.
 */
void bt_destroy(struct bt *t, void (*free_item)(void *item));

/*
 * Insert item (not NULL), keyed by key_of(item). If an item with an equal
 * key is already in the tree, item takes its place and the previous item is
 * handed back in *old; otherwise *old is set to NULL. old may be NULL only
 * when the caller knows the key is new: if it is not, nothing changes and
 * -EEXIST is returned. On any error the tree is unchanged. Invalidates
 * every cursor on t, even when it fails.
 * Errors: -EINVAL (item NULL), -EEXIST (see above), -ENOMEM.
 */
int bt_insert(struct bt *t, void *item, void **old);

/*
 * Remove the item whose key equals key[0..len) and return it, or return NULL
 * if there is none; the caller owns the returned item. The tree never fails
 * a removal: if it cannot allocate what rebalancing needs it leaves a node
 * less full than usual. Invalidates every cursor on t.
 */
void *bt_remove(struct bt *t, const void *key, uint32_t len);

/* The item whose key equals key[0..len), or NULL if there is none. */
void *bt_lookup(const struct bt *t, const void *key, uint32_t len);

/*
 * Position c on the first item whose key is >= key[0..len) and return that
 * item. If there is none, return NULL and leave c at the end, where
 * bt_next() returns NULL.
 */
void *bt_seek(const struct bt *t, struct bt_cur *c, const void *key, uint32_t len);

/* Position c on the smallest item and return it; NULL (c at the end) if empty. */
void *bt_first(const struct bt *t, struct bt_cur *c);

/*
 * Advance c to the next item in key order and return it; at the end return
 * NULL (and keep returning NULL). c must have been positioned by bt_seek()
 * or bt_first() since the tree was last modified.
 */
void *bt_next(struct bt_cur *c);

/* Number of items in the tree. */
uint64_t bt_count(const struct bt *t);

/*
 * Heap bytes held by the tree's nodes and separator-key copies, as requested
 * from the allocator (its own per-block overhead is not included; the
 * struct bt itself is not counted). 0 for an empty tree.
 */
uint64_t bt_bytes(const struct bt *t);

/*
 * Check the tree's structure: key order within and across nodes, separator
 * bounds, search hints, leaf links, uniform depth, and that bt_count() and
 * bt_bytes() agree with what is there. Walks the whole tree and reads every
 * item's key; for tests and debugging.
 * Errors: -LODE_ECORRUPT (an invariant does not hold).
 */
int bt_check(const struct bt *t);

/*
 * The allocator the tree uses for nodes and keys: malloc() unless a program
 * defines its own bt_malloc(), which overrides this weak definition. Tests do
 * so to make chosen allocations fail; the engine never does. Memory it
 * returns is released with free().
 */
void *bt_malloc(size_t size);

#endif
