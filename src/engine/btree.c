/*
 * The engine's index: an in-memory B+tree of opaque items (see btree.h).
 *
 * Layout. Leaves hold up to BT_FAN item pointers in key order and are linked
 * left to right for cursors. Internal nodes hold up to BT_FAN separator keys
 * and one more child; separators are the tree's own copies (struct bt_key),
 * because items may be freed as soon as they are removed. A key k lies in
 * child i of an internal node when sep[i-1] <= k < sep[i]. Leaf splits pick
 * the shortest separator that works (a prefix of the right half's first key),
 * which keeps separators small.
 *
 * Search hints. The items' keys live in the items, so comparing against one
 * costs a cache miss. To avoid most of them every node keeps, beside each
 * slot, a 16-bit hint: two key bytes starting at the node's `skip`, zero
 * padded. skip is the length of the common prefix of the node's bounds (the
 * nearest separators left and right of it on the path from the root); every
 * key under the node, and every key a search brings to it, shares those
 * bytes, so comparing hints orders keys correctly whenever the hints differ.
 * Only equal hints need a real key comparison, which typically leaves one
 * item dereference per lookup. A skip smaller than the bounds allow is still
 * correct (just less selective), so bounds are recomputed when nodes split,
 * merge or trade slots, and left alone otherwise.
 *
 * Memory. A leaf is 656 bytes for 64 items: 10.25 bytes per item when full.
 * Appending at the very end of the tree (a checkpoint load) splits a full
 * rightmost node so that the left part stays full; other splits halve. A
 * removal that leaves a node under a quarter full merges it with a sibling or
 * evens the two out, so memory comes back after mass deletion; the empty
 * tree holds no nodes.
 *
 * Failure. Every allocation an insert needs is made before the tree is
 * touched, so -ENOMEM leaves it unchanged. Removal needs memory only to even
 * out two leaves (a new separator); without it the leaf just stays small.
 */
#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/btree.h"
#include "lode/errno.h"

#define BT_FAN 64           /* slots per node */
#define BT_MIN (BT_FAN / 4) /* fewer slots than this and a node is rebalanced */
#define BT_DEPTH 32         /* far more levels than 2^64 items need */

struct bt_key {
	uint32_t len;
	uint8_t b[];
};

/* The part leaves and internal nodes share; slot[] holds items or keys. */
struct node {
	uint16_t n;    /* slots in use */
	uint16_t skip; /* key bytes the hints skip (see the top of the file) */
	uint8_t leaf;
	uint16_t hint[BT_FAN];
	void *slot[BT_FAN];
};

struct leaf {
	struct node h;
	struct leaf *next;
};

struct inner {
	struct node h;
	struct node *child[BT_FAN + 1];
};

struct bt {
	bt_key_fn key_of;
	struct node *root; /* NULL when empty */
	uint64_t count;
	uint64_t bytes;
};

/* One level of a root-to-leaf path: the node, the slot taken, its bounds. */
struct step {
	struct node *n;
	unsigned i; /* child index in an internal node, item slot in a leaf */
	const struct bt_key *lo, *hi; /* NULL: unbounded */
};

__attribute__((weak)) void *bt_malloc(size_t size)
{
	return malloc(size);
}

static struct node **kids(struct node *n)
{
	return ((struct inner *)n)->child;
}

static int key_cmp(const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen)
{
	uint32_t m = alen < blen ? alen : blen;
	int c = m ? memcmp(a, b, m) : 0;

	if (c)
		return c;
	return alen < blen ? -1 : alen > blen;
}

static uint32_t mem_lcp(const uint8_t *a, uint32_t alen, const uint8_t *b, uint32_t blen)
{
	uint32_t i = 0;

	while (i < alen && i < blen && a[i] == b[i])
		i++;
	return i;
}

/* The skip for bounds lo and hi; an unbounded side shares nothing. */
static uint16_t bounds_skip(const struct bt_key *lo, const struct bt_key *hi)
{
	uint32_t s = lo && hi ? mem_lcp(lo->b, lo->len, hi->b, hi->len) : 0;

	return s > UINT16_MAX ? UINT16_MAX : (uint16_t)s;
}

static uint16_t hint_of(const uint8_t *k, uint32_t len, unsigned skip)
{
	return (uint16_t)((len > skip ? k[skip] << 8 : 0) | (len > skip + 1 ? k[skip + 1] : 0));
}

static const uint8_t *slot_key(const struct bt *t, const struct node *n, unsigned i,
			       uint32_t *len)
{
	const struct bt_key *k;

	if (n->leaf)
		return t->key_of(n->slot[i], len);
	k = n->slot[i];
	*len = k->len;
	return k->b;
}

static void hints_fill(const struct bt *t, struct node *n, unsigned from, unsigned to)
{
	uint32_t len;

	for (unsigned i = from; i < to; i++) {
		const uint8_t *k = slot_key(t, n, i, &len);
		n->hint[i] = hint_of(k, len, n->skip);
	}
}

/* Give n the skip its bounds allow; its hints follow when the skip changes. */
static void node_rebound(const struct bt *t, struct node *n, const struct bt_key *lo,
			 const struct bt_key *hi)
{
	uint16_t s = bounds_skip(lo, hi);

	if (s != n->skip) {
		n->skip = s;
		hints_fill(t, n, 0, n->n);
	}
}

/* Copy cnt slots with their hints; a different skip makes the hints stale. */
static void slots_copy(const struct bt *t, struct node *dst, unsigned di, const struct node *src,
		       unsigned si, unsigned cnt)
{
	memmove(&dst->slot[di], &src->slot[si], cnt * sizeof(dst->slot[0]));
	memmove(&dst->hint[di], &src->hint[si], cnt * sizeof(dst->hint[0]));
	if (dst->skip != src->skip)
		hints_fill(t, dst, di, di + cnt);
}

static void kids_copy(struct node *dst, unsigned di, struct node *src, unsigned si, unsigned cnt)
{
	memmove(&kids(dst)[di], &kids(src)[si], cnt * sizeof(struct node *));
}

static struct node *node_new(struct bt *t, bool leaf)
{
	size_t size = leaf ? sizeof(struct leaf) : sizeof(struct inner);
	struct node *n = bt_malloc(size);

	if (!n)
		return NULL;
	memset(n, 0, size);
	n->leaf = leaf;
	t->bytes += size;
	return n;
}

static void node_free(struct bt *t, struct node *n)
{
	t->bytes -= n->leaf ? sizeof(struct leaf) : sizeof(struct inner);
	free(n);
}

/*
 * The shortest key that is > a and <= b (given a < b): b cut one byte past
 * their common prefix. NULL if out of memory.
 */
static struct bt_key *sep_new(struct bt *t, const uint8_t *a, uint32_t alen, const uint8_t *b,
			      uint32_t blen)
{
	uint32_t len = mem_lcp(a, alen, b, blen) + 1;
	struct bt_key *k;

	assert(len <= blen);
	k = bt_malloc(sizeof(*k) + len);
	if (!k)
		return NULL;
	k->len = len;
	memcpy(k->b, b, len);
	t->bytes += sizeof(*k) + len;
	return k;
}

static void sep_free(struct bt *t, struct bt_key *k)
{
	t->bytes -= sizeof(*k) + k->len;
	free(k);
}

/* The separator between leaf slots i - 1 and i of l. */
static struct bt_key *sep_at(struct bt *t, const struct node *l, unsigned i)
{
	uint32_t alen, blen;
	const uint8_t *a = slot_key(t, l, i - 1, &alen), *b = slot_key(t, l, i, &blen);

	return sep_new(t, a, alen, b, blen);
}

/*
 * The first slot of n whose key is >= k, setting *eq when it is equal. Hints
 * decide most steps; the keys themselves are compared only on a tie, and
 * only past the skip bytes, which both sides share.
 */
static unsigned node_find(const struct bt *t, const struct node *n, const uint8_t *k, uint32_t len,
			  bool *eq)
{
	unsigned s = n->skip, lo = 0, hi = n->n;
	uint16_t h = hint_of(k, len, s);

	*eq = false;
	while (lo < hi) {
		unsigned mid = (lo + hi) / 2;
		int c = (int)n->hint[mid] - (int)h;

		if (c == 0) {
			uint32_t mlen;
			const uint8_t *m = slot_key(t, n, mid, &mlen);

			assert(mlen >= s && len >= s);
			c = key_cmp(m + s, mlen - s, k + s, len - s);
		}
		if (c < 0) {
			lo = mid + 1;
		} else if (c > 0) {
			hi = mid;
		} else {
			*eq = true;
			return mid;
		}
	}
	return lo;
}

/* Walk from the root (which must exist) to k's leaf; returns the leaf's depth. */
static int descend(const struct bt *t, const uint8_t *k, uint32_t len, struct step *path,
		   bool *eq)
{
	const struct bt_key *lo = NULL, *hi = NULL;
	struct node *n = t->root;

	if (!len)
		k = (const uint8_t *)""; /* the empty key may come as NULL */
	for (int d = 0;; d++) {
		unsigned i = node_find(t, n, k, len, eq);

		assert(d < BT_DEPTH);
		if (n->leaf) {
			path[d] = (struct step){n, i, lo, hi};
			return d;
		}
		i += *eq; /* a key equal to a separator lives to its right */
		path[d] = (struct step){n, i, lo, hi};
		if (i > 0)
			lo = n->slot[i - 1];
		if (i < n->n)
			hi = n->slot[i];
		n = kids(n)[i];
		/*
		 * The search will read a few lines scattered over the node; ask for
		 * them all now so that their misses overlap instead of queueing.
		 */
		for (size_t o = 0; o < sizeof(struct leaf); o += 64 /* a cache line */)
			__builtin_prefetch((const char *)n + o);
	}
}

/* Put s (with child c right of it, in an internal node) at slot pos of n, which has room. */
static void node_put(const struct bt *t, struct node *n, unsigned pos, void *s, struct node *c)
{
	uint32_t len;
	const uint8_t *k;

	slots_copy(t, n, pos + 1, n, pos, n->n - pos);
	if (!n->leaf) {
		kids_copy(n, pos + 2, n, pos + 1, n->n - pos);
		kids(n)[pos + 1] = c;
	}
	n->slot[pos] = s;
	n->n++;
	k = slot_key(t, n, pos, &len);
	n->hint[pos] = hint_of(k, len, n->skip);
}

/*
 * Split the full node l into l and the empty node r while adding s (and c)
 * at pos as node_put() would. Of the BT_FAN + 1 slots, l keeps the first m.
 * A leaf's separator is made beforehand by the caller; an internal node's is
 * the middle key, which leaves both halves and is returned here.
 */
static void *node_split(const struct bt *t, struct node *l, struct node *r, unsigned pos,
			unsigned m, void *s, struct node *c)
{
	unsigned keep, from; /* l keeps slots [0, keep); [from, BT_FAN) move to r */
	void *up = NULL;

	if (l->leaf) {
		keep = from = pos < m ? m - 1 : m;
	} else if (pos < m) {
		keep = m - 1;
		from = m;
		up = l->slot[m - 1];
	} else if (pos > m) {
		keep = m;
		from = m + 1;
		up = l->slot[m];
	} else {
		keep = from = m;
		up = s;
	}
	r->skip = l->skip;
	slots_copy(t, r, 0, l, from, BT_FAN - from);
	r->n = BT_FAN - from;
	l->n = keep;
	if (!l->leaf) {
		/* r takes the children right of the slots it got; c leads them when s goes up. */
		unsigned lead = pos == m;

		kids_copy(r, lead, l, from + lead, BT_FAN + 1 - from - lead);
		if (lead)
			kids(r)[0] = c;
	}
	if (pos < m)
		node_put(t, l, pos, s, c);
	else if (pos > m || l->leaf)
		node_put(t, r, pos - from, s, c);
	if (l->leaf) {
		((struct leaf *)r)->next = ((struct leaf *)l)->next;
		((struct leaf *)l)->next = (struct leaf *)r;
	}
	return up;
}

int bt_create(bt_key_fn key_of, struct bt **out)
{
	struct bt *t;

	if (!key_of || !out)
		return -EFAULT;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->key_of = key_of;
	*out = t;
	return 0;
}

static void node_destroy(struct node *n, void (*free_item)(void *item))
{
	for (unsigned i = 0; i < n->n; i++) {
		if (!n->leaf)
			free(n->slot[i]);
		else if (free_item)
			free_item(n->slot[i]);
	}
	if (!n->leaf)
		for (unsigned i = 0; i <= n->n; i++)
			node_destroy(kids(n)[i], free_item);
	free(n);
}

void bt_destroy(struct bt *t, void (*free_item)(void *item))
{
	if (!t)
		return;
	if (t->root)
		node_destroy(t->root, free_item);
	free(t);
}

/* Key j of leaf l as it will be once k is put at pos. */
static const uint8_t *key_after_put(const struct bt *t, const struct node *l, unsigned j,
				    unsigned pos, const uint8_t *k, uint32_t klen, uint32_t *len)
{
	if (j == pos) {
		*len = klen;
		return k;
	}
	return slot_key(t, l, j - (j > pos), len);
}

/* Where a full node at path[d] splits when given a slot at pos. */
static unsigned split_point(const struct step *st, unsigned pos)
{
	/* Appending at the right edge of the tree: keep the left part full. */
	if (pos == BT_FAN && !st->hi)
		return st->n->leaf ? BT_FAN : BT_FAN - 1;
	return BT_FAN / 2;
}

int bt_insert(struct bt *t, void *item, void **old)
{
	struct step path[BT_DEPTH];
	struct node *fresh[BT_DEPTH + 1], *l, *r = NULL;
	struct bt_key *sep = NULL;
	const uint8_t *k;
	uint32_t len;
	unsigned pos, nfresh, i;
	void *up;
	bool eq;
	int depth, d;

	if (old)
		*old = NULL;
	if (!item)
		return -EINVAL;
	if (!t->root && !(t->root = node_new(t, true)))
		return -ENOMEM;
	k = t->key_of(item, &len);
	depth = descend(t, k, len, path, &eq);
	l = path[depth].n;
	pos = path[depth].i;
	if (eq) {
		if (!old)
			return -EEXIST;
		*old = l->slot[pos];
		l->slot[pos] = item;
		return 0;
	}

	/* Levels depth..d+1 split; d < 0 means the root does too. */
	for (d = depth; d >= 0 && path[d].n->n == BT_FAN; d--)
		;
	nfresh = (unsigned)(depth - d) + (d < 0);
	if (depth > d) {
		unsigned m = split_point(&path[depth], pos);
		uint32_t alen, blen;
		const uint8_t *a = key_after_put(t, l, m - 1, pos, k, len, &alen);
		const uint8_t *b = key_after_put(t, l, m, pos, k, len, &blen);

		sep = sep_new(t, a, alen, b, blen);
		if (!sep)
			return -ENOMEM;
	}
	for (i = 0; i < nfresh; i++) {
		fresh[i] = node_new(t, i == 0 && depth > d);
		if (!fresh[i]) {
			while (i--)
				node_free(t, fresh[i]);
			sep_free(t, sep); /* a split was needed, so it starts at the leaf */
			return -ENOMEM;
		}
	}
	t->count++;

	/* Split upwards, each level handing the next a separator and a right node. */
	up = item;
	for (d = depth, i = 0; d >= 0; d--, i++) {
		struct step *st = &path[d];
		unsigned m = split_point(st, st->i);

		if (st->n->n < BT_FAN) {
			node_put(t, st->n, st->i, up, r);
			return 0;
		}
		if (st->n->leaf)
			node_split(t, st->n, fresh[i], st->i, m, up, NULL);
		else
			sep = node_split(t, st->n, fresh[i], st->i, m, up, r);
		r = fresh[i];
		node_rebound(t, st->n, st->lo, sep);
		node_rebound(t, r, sep, st->hi);
		up = sep;
	}
	kids(fresh[i])[0] = t->root;
	node_put(t, fresh[i], 0, up, r);
	t->root = fresh[i];
	return 0;
}

/*
 * Move the first k units (items, or children) of r to the end of l. In
 * internal nodes the parent's separator sep comes down in front of them and
 * r's key before its new first child is returned, to go up in its place.
 */
static void *shift_left(const struct bt *t, struct node *l, struct node *r, void *sep, unsigned k)
{
	void *up = NULL;

	if (l->leaf) {
		slots_copy(t, l, l->n, r, 0, k);
		l->n += k;
		slots_copy(t, r, 0, r, k, r->n - k);
		r->n -= k;
		return NULL;
	}
	l->slot[l->n] = sep;
	hints_fill(t, l, l->n, l->n + 1);
	slots_copy(t, l, l->n + 1, r, 0, k - 1);
	kids_copy(l, l->n + 1, r, 0, k);
	l->n += k;
	if (k <= r->n) { /* otherwise r is being merged away */
		up = r->slot[k - 1];
		slots_copy(t, r, 0, r, k, r->n - k);
		kids_copy(r, 0, r, k, r->n + 1 - k);
		r->n -= k;
	}
	return up;
}

/* The mirror of shift_left(): move the last k units of l to the front of r. */
static void *shift_right(const struct bt *t, struct node *l, struct node *r, void *sep, unsigned k)
{
	void *up = NULL;

	slots_copy(t, r, k, r, 0, r->n);
	if (l->leaf) {
		slots_copy(t, r, 0, l, l->n - k, k);
	} else {
		kids_copy(r, k, r, 0, r->n + 1);
		r->slot[k - 1] = sep;
		hints_fill(t, r, k - 1, k);
		slots_copy(t, r, 0, l, l->n + 1 - k, k - 1);
		kids_copy(r, 0, l, l->n + 1 - k, k);
		up = l->slot[l->n - k];
	}
	l->n -= k;
	r->n += k;
	return up;
}

/*
 * path[d] is underfull: merge it with a sibling, or even the two out when
 * they would not fit in one node. Returns false when it could do neither
 * (out of memory for a leaf separator), which leaves the tree as it was.
 */
static bool rebalance(struct bt *t, const struct step *path, int d)
{
	const struct step *up = &path[d - 1];
	struct node *p = up->n;
	unsigned s = up->i > 0 ? up->i - 1 : 0; /* separator between the pair */
	struct node *l = kids(p)[s], *r = kids(p)[s + 1];
	const struct bt_key *lo = s > 0 ? p->slot[s - 1] : up->lo;
	const struct bt_key *hi = s + 1 < p->n ? p->slot[s + 1] : up->hi;
	unsigned ul = l->n + !l->leaf, ur = r->n + !r->leaf, half = (ul + ur) / 2;
	struct bt_key *sep = NULL;

	assert(p->n > 0);
	if (ul + ur <= BT_FAN + !l->leaf) {
		shift_left(t, l, r, p->slot[s], ur);
		if (l->leaf) {
			((struct leaf *)l)->next = ((struct leaf *)r)->next;
			sep_free(t, p->slot[s]);
		}
		node_free(t, r);
		slots_copy(t, p, s, p, s + 1, p->n - s - 1);
		kids_copy(p, s + 1, p, s + 2, p->n - s - 1);
		p->n--;
		node_rebound(t, l, lo, hi);
		return true;
	}
	if (l->leaf) {
		/* A leaf boundary needs a new separator: get it before moving anything. */
		sep = ul < half ? sep_at(t, r, half - ul) : sep_at(t, l, half);
		if (!sep)
			return false;
		sep_free(t, p->slot[s]);
		if (ul < half)
			shift_left(t, l, r, NULL, half - ul);
		else
			shift_right(t, l, r, NULL, ul - half);
	} else if (ul < half) {
		sep = shift_left(t, l, r, p->slot[s], half - ul);
	} else {
		sep = shift_right(t, l, r, p->slot[s], ul - half);
	}
	p->slot[s] = sep;
	p->hint[s] = hint_of(sep->b, sep->len, p->skip);
	node_rebound(t, l, lo, sep);
	node_rebound(t, r, sep, hi);
	return true;
}

void *bt_remove(struct bt *t, const void *key, uint32_t len)
{
	struct step path[BT_DEPTH];
	struct node *n;
	void *item;
	bool eq;
	int d;

	if (!t->root)
		return NULL;
	d = descend(t, key, len, path, &eq);
	if (!eq)
		return NULL;
	n = path[d].n;
	item = n->slot[path[d].i];
	slots_copy(t, n, path[d].i, n, path[d].i + 1, n->n - path[d].i - 1);
	n->n--;
	t->count--;
	for (; d > 0 && path[d].n->n < BT_MIN; d--)
		if (!rebalance(t, path, d))
			break;
	n = t->root;
	if (!n->leaf && n->n == 0) {
		t->root = kids(n)[0];
		node_free(t, n);
	} else if (n->leaf && n->n == 0) {
		t->root = NULL;
		node_free(t, n);
	}
	return item;
}

void *bt_lookup(const struct bt *t, const void *key, uint32_t len)
{
	struct step path[BT_DEPTH];
	bool eq;
	int d;

	if (!t->root)
		return NULL;
	d = descend(t, key, len, path, &eq);
	return eq ? path[d].n->slot[path[d].i] : NULL;
}

/* Settle c on its slot, or on the next leaf's first when past the end of its leaf. */
static void *cur_settle(struct bt_cur *c)
{
	struct leaf *l = c->leaf;

	while (l && c->pos >= l->h.n) {
		l = l->next;
		c->pos = 0;
	}
	c->leaf = l;
	return l ? l->h.slot[c->pos] : NULL;
}

void *bt_seek(const struct bt *t, struct bt_cur *c, const void *key, uint32_t len)
{
	struct step path[BT_DEPTH];
	bool eq;
	int d;

	c->leaf = NULL;
	c->pos = 0;
	if (!t->root)
		return NULL;
	d = descend(t, key, len, path, &eq);
	c->leaf = path[d].n;
	c->pos = path[d].i;
	return cur_settle(c);
}

void *bt_first(const struct bt *t, struct bt_cur *c)
{
	struct node *n = t->root;

	while (n && !n->leaf)
		n = kids(n)[0];
	c->leaf = n;
	c->pos = 0;
	return cur_settle(c);
}

void *bt_next(struct bt_cur *c)
{
	if (!c->leaf)
		return NULL;
	c->pos++;
	return cur_settle(c);
}

uint64_t bt_count(const struct bt *t)
{
	return t->count;
}

uint64_t bt_bytes(const struct bt *t)
{
	return t->bytes;
}

/* What bt_check() gathers while it walks. */
struct check {
	const struct bt *t;
	int leaf_depth;
	uint64_t items, bytes;
	const struct leaf *next; /* the leaf the previous leaf links to */
};

static bool check_node(struct check *ck, const struct node *n, int d, const struct bt_key *lo,
		       const struct bt_key *hi)
{
	const uint8_t *k, *prev = NULL;
	uint32_t len, plen = 0;

	if (n->n > BT_FAN || n->skip > bounds_skip(lo, hi) || d >= BT_DEPTH)
		return false;
	if (n != ck->t->root && n->n == 0)
		return false;
	for (unsigned i = 0; i < n->n; i++) {
		k = slot_key(ck->t, n, i, &len);
		if (n->hint[i] != hint_of(k, len, n->skip))
			return false;
		if ((prev && key_cmp(prev, plen, k, len) >= 0) ||
		    (lo && key_cmp(lo->b, lo->len, k, len) > 0) ||
		    (hi && key_cmp(k, len, hi->b, hi->len) >= 0))
			return false;
		prev = k;
		plen = len;
		if (!n->leaf)
			ck->bytes += sizeof(struct bt_key) + len;
	}
	if (n->leaf) {
		if (ck->leaf_depth < 0)
			ck->leaf_depth = d;
		else if (d != ck->leaf_depth || ck->next != (const struct leaf *)n)
			return false;
		ck->next = ((struct leaf *)n)->next;
		ck->items += n->n;
		ck->bytes += sizeof(struct leaf);
		return true;
	}
	ck->bytes += sizeof(struct inner);
	for (unsigned i = 0; i <= n->n; i++)
		if (!check_node(ck, kids((struct node *)n)[i], d + 1, i ? n->slot[i - 1] : lo,
				i < n->n ? n->slot[i] : hi))
			return false;
	return true;
}

int bt_check(const struct bt *t)
{
	struct check ck = {t, -1, 0, 0, NULL};

	if (t->root && !check_node(&ck, t->root, 0, NULL, NULL))
		return -LODE_ECORRUPT;
	if (ck.next || ck.items != t->count || ck.bytes != t->bytes)
		return -LODE_ECORRUPT;
	return 0;
}
