/*
 * One target of the storage engine: the API of engine.h.
 *
 * State. Every version, punch, container and snapshot is one struct rec in
 * an ordered in-memory index (btree.c), keyed so that one seek finds the
 * newest version <= an epoch (epochs are stored inverted). The index is made
 * durable by the log (wal) and by checkpoints of the whole index (ckpt);
 * values above inline_max live in the extent file (space.c).
 *
 * Updates. An update with extent data writes the data to freshly allocated
 * blocks (never over live data) and, once that write completes, appends its
 * log record to the open group. One group is flushed at a time: the log
 * write + fdatasync and, if the group wrote extents, an fdatasync of the
 * extent file run together. When both finish, the group's records enter the
 * index and their callbacks run. Updates that arrive meanwhile wait for the
 * next group, so many concurrent updates share one flush.
 *
 * Recovery. Each group starts with a MARK record naming the highest
 * sequence number acknowledged before it. At open, records above the last
 * mark belong to a group whose flush may not have finished, so their extent
 * data is read back and checked; a record whose data fails its checksum was
 * never acknowledged and is dropped. Records at or below the mark were
 * acknowledged; if their data fails its checksum later, a read reports
 * -LODE_ECSUM instead of hiding it.
 *
 * Reads. Inline values and RAM-mode extents are served at once from memory;
 * disk-mode extents are read with io_uring into registered buffers and
 * checked chunk by chunk before a byte reaches the caller. Blocks freed
 * while reads are in flight are held back until those reads finish.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include "engine/eng_internal.h"

#define CKPT_MAGIC 0x32504b4345444f4cull /* "LODECKP2": blocks of ckpt.c */
#define ARENA_SIZE (64u << 20)
#define GROUP_MAX (4u << 20) /* log bytes one group may carry */

/* ---- keys ---------------------------------------------------------------- */

/*
 * Longest key: cidx oid dlen dkey alen akey ~epoch ~seq, plus a skip. A skip
 * is SKIP bytes of 0xff: longer than the longest continuation of a prefix
 * (~epoch ~seq, 16 bytes, all 0xff at worst), so it sorts after all of them.
 */
#define SKIP 17
#define KEY_CAP (4 + 16 + 2 + LODE_KEY_MAX + 2 + LODE_KEY_MAX + 16 + SKIP)
#define OBJ_PFX 20u

struct kb {
	uint32_t len;
	uint8_t b[KEY_CAP];
};

static void kb_u16(struct kb *k, uint16_t v)
{
	k->b[k->len++] = (uint8_t)(v >> 8);
	k->b[k->len++] = (uint8_t)v;
}

static void kb_u32(struct kb *k, uint32_t v)
{
	for (int i = 3; i >= 0; i--)
		k->b[k->len++] = (uint8_t)(v >> (8 * i));
}

static void kb_u64(struct kb *k, uint64_t v)
{
	for (int i = 7; i >= 0; i--)
		k->b[k->len++] = (uint8_t)(v >> (8 * i));
}

static void kb_str(struct kb *k, const void *p, uint32_t n)
{
	kb_u16(k, (uint16_t)n);
	memcpy(k->b + k->len, p, n);
	k->len += n;
}

/* A key just past every key that starts with k: the "skip" seek target. */
static void kb_skip(struct kb *k)
{
	memset(k->b + k->len, 0xff, SKIP);
	k->len += SKIP;
}

static uint64_t be64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

static uint16_t be16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static bool has_prefix(const struct rec *r, const struct kb *k)
{
	return r && r->klen >= k->len && memcmp(r->key, k->b, k->len) == 0;
}

/* The epoch of a record whose key has its ~epoch at byte pos. */
static lode_epoch_t rec_epoch_at(const struct rec *r, uint32_t pos)
{
	return ~be64(r->key + pos);
}

/*
 * Does a record read back from the log or a checkpoint follow the key
 * grammar of its type? Recovery refuses a record that does not: its bytes
 * passed their checksum, so only a bug or tampering can have made it, and
 * nothing downstream should have to second-guess the index.
 */
static bool rec_valid(const struct rec *r)
{
	uint32_t n = r->klen, dlen, alen, tail;

	if (r->type == REC_CONT)
		return n == 5 + 16 && be64(r->key) >> 32 == 0 && r->key[4] == 'C' && r->off &&
		       r->off <= UINT32_MAX;
	if (r->type == REC_SNAP)
		return n == 5 + 4 + 8 && be64(r->key) >> 32 == 0 && r->key[4] == 'S';
	if (n < OBJ_PFX + 2 + 8 || (be64(r->key) >> 32) == 0)
		return false; /* object records live in a container (cidx != 0) */
	dlen = be16(r->key + OBJ_PFX);
	if (dlen == 0) /* object punch */
		return r->type == REC_PUNCH && n == OBJ_PFX + 2 + 8;
	if (dlen > LODE_KEY_MAX || n < OBJ_PFX + 2 + dlen + 2 + 8)
		return false;
	alen = be16(r->key + OBJ_PFX + 2 + dlen);
	if (alen == 0) /* dkey punch */
		return r->type == REC_PUNCH && n == OBJ_PFX + 2 + dlen + 2 + 8;
	if (alen > LODE_KEY_MAX)
		return false;
	tail = n - (OBJ_PFX + 2 + dlen + 2 + alen);
	switch (r->type) {
	case REC_SV:
	case REC_PUNCH:
		if (tail != 8)
			return false;
		break;
	case REC_ARR:
	case REC_ARR_PUNCH:
		if (tail != 16 || (r->type == REC_ARR && r->len == 0) ||
		    r->off + (r->type == REC_ARR ? r->len : r->loc) < r->off)
			return false;
		break;
	default:
		return false;
	}
	if (r->type == REC_SV || r->type == REC_ARR)
		return r->len <= LODE_IO_MAX && ((r->flags & REC_F_INLINE) || r->loc % ENG_BLOCK == 0);
	return true;
}

/* ---- the target ---------------------------------------------------------- */

struct cont_ent {
	struct lode_uuid uuid;
	uint32_t cidx;
};

enum io_kind { IO_DATA, IO_READ, IO_EXT_SYNC, IO_WAL_WRITE, IO_WAL_SYNC };

struct io {
	enum io_kind kind;
	void *ctx; /* struct op (IO_DATA) or struct piece (IO_READ) */
};

enum op_kind {
	OP_INSERT, /* a record enters the index when its group is durable */
	OP_DELETE, /* a key leaves the index when its group is durable */
	OP_BULK,   /* records already out of the index are freed when durable */
	OP_FETCH,
};

struct op {
	enum op_kind kind;
	eng_cb_t cb;
	void *arg;
	int rc;
	struct op *next;
	/* updates */
	struct rec *rec;        /* OP_INSERT: the record; OP_DELETE: carries the key */
	struct rec **bulk;      /* OP_BULK */
	size_t nbulk, bulk_cap;
	size_t wal_len;         /* bytes of this op's records in the open group */
	uint64_t seq;           /* sequence number of its last log record */
	void *bounce;           /* data being written */
	struct io io;           /* its write */
	bool has_data;
	/* fetch */
	unsigned reads;         /* pieces still being read */
	uint64_t clock;         /* free clock when the read started */
	struct op *rprev, *rnext;
};

struct piece {
	struct io io;
	struct op *op;
	uint8_t *buf;      /* where the read lands: a bounce buffer, or dst itself */
	uint8_t *dst;
	uint32_t skip;     /* bytes of buf before the caller's first byte */
	uint32_t copy;     /* bytes to give the caller */
	uint32_t check_len;/* bytes covered by the chunk checksums */
	uint32_t nchunk;
	uint32_t ck;       /* the record's checksum chunk */
	bool direct;       /* buf is dst: nothing to copy or free */
	uint32_t crc[];
};

struct held {
	uint64_t loc, nblk, clock;
};

struct eng_target {
	char *path;
	enum eng_mode mode;
	uint32_t inline_max;
	int lock_fd, wal_fd, dir_fd;
	uint64_t wal_size, wal_off;
	uint32_t gen;
	uint64_t seq, acked_seq;
	struct bt *index;
	struct newest newest;   /* akey -> newest record, for latest reads */
	uint64_t rec_bytes;
	uint64_t upper_punches; /* object and dkey punch records: 0 skips their lookups */
	struct space space;
	struct cont_ent *conts;
	unsigned nconts;
	uint32_t next_cidx;
	/* group commit */
	struct wbuf wal;            /* records of the open group, in op order */
	struct op *pend_head, *pend_tail;
	struct op *flush_ops;       /* the group being flushed */
	size_t flush_len;
	unsigned flush_ios;         /* flush requests still running */
	int flush_rc;
	struct wbuf mark;
	bool failed;
	/* io */
	bool have_ring;
	struct io_uring ring;
	unsigned sq_pending, io_inflight;
	struct arena arena;
	bool arena_registered;
	/* RAM mode: extent space handed out by eng_value_reserve(), not yet
	 * taken by an update or given back (a handful: one per write in flight). */
	struct resv {
		uint64_t loc, nblk;
	} *resv;
	unsigned nresv, resv_cap;
	struct io io_ext_sync, io_wal_write, io_wal_sync;
	struct iovec wal_iov[2];
	/* completions and reads */
	struct op *done_head, *done_tail;
	struct op *reads_head, *reads_tail;
	unsigned inflight;
	/* The last number given to an array record's key (an update's or a
	 * punch's, after its epoch): it only grows, so two records of one akey
	 * at one epoch never share a key and the later sorts first; recovery
	 * starts it past every number it finds (recover_put). */
	uint64_t key_seq;
	uint64_t clock;
	struct held *held;
	size_t nheld, held_cap, held_first;
	struct eng_stats st;
};

static void op_done(struct eng_target *t, struct op *o, int rc)
{
	o->rc = rc;
	o->next = NULL;
	if (t->done_tail)
		t->done_tail->next = o;
	else
		t->done_head = o;
	t->done_tail = o;
}

/* ---- index helpers ------------------------------------------------------- */

static void rec_account(struct eng_target *t, struct rec *r, int sign)
{
	/* usable size + the allocator's own header: what the record costs */
	uint64_t n = malloc_usable_size(r) + 8;

	t->rec_bytes = sign > 0 ? t->rec_bytes + n : t->rec_bytes - n;
	/* a punch that is not an akey's is an object or dkey punch */
	if (r->type == REC_PUNCH && newest_pfx_len(r) == 0)
		t->upper_punches = sign > 0 ? t->upper_punches + 1 : t->upper_punches - 1;
}

static void hold_extent(struct eng_target *t, const struct rec *r);

/*
 * Put r into the index; a record it replaces is released, and its blocks
 * held for readers (hold; during recovery there are no readers and no
 * block bitmap yet, so they are simply forgotten).
 */
static int index_put_as(struct eng_target *t, struct rec *r, bool hold)
{
	void *old = NULL;
	int rc = bt_insert(t->index, r, &old);

	if (rc < 0)
		return rc;
	rec_account(t, r, 1);
	if (old) {
		newest_drop(&t->newest, old, r); /* same key: r takes its place */
		rec_account(t, old, -1);
		if (hold)
			hold_extent(t, old);
		free(old);
	} else {
		newest_put(&t->newest, r);
	}
	return 0;
}

static int index_put(struct eng_target *t, struct rec *r)
{
	return index_put_as(t, r, true);
}

static struct rec *index_take(struct eng_target *t, const uint8_t *key, uint32_t klen)
{
	struct rec *r = bt_remove(t->index, key, klen);
	uint32_t plen;

	if (!r)
		return NULL;
	rec_account(t, r, -1);
	plen = newest_pfx_len(r);
	if (plen && newest_get(&t->newest, r->key, plen) == r) {
		struct bt_cur c;
		struct rec *next = bt_seek(t->index, &c, r->key, plen);

		if (next && (next->klen < plen || memcmp(next->key, r->key, plen) != 0 ||
			     newest_pfx_len(next) != plen))
			next = NULL;
		newest_drop(&t->newest, r, next);
	}
	return r;
}

static int cont_find(const struct eng_target *t, const struct lode_uuid *u, uint32_t *cidx)
{
	for (unsigned i = 0; i < t->nconts; i++)
		if (memcmp(&t->conts[i].uuid, u, sizeof(*u)) == 0) {
			*cidx = t->conts[i].cidx;
			return 0;
		}
	return -LODE_ENOCONT;
}

static int cont_add(struct eng_target *t, const struct lode_uuid *u, uint32_t cidx)
{
	struct cont_ent *c = realloc(t->conts, (t->nconts + 1) * sizeof(*c));

	if (!c)
		return -ENOMEM;
	t->conts = c;
	c[t->nconts].uuid = *u;
	c[t->nconts].cidx = cidx;
	t->nconts++;
	if (cidx >= t->next_cidx)
		t->next_cidx = cidx + 1;
	return 0;
}

static void cont_remove(struct eng_target *t, uint32_t cidx)
{
	for (unsigned i = 0; i < t->nconts; i++)
		if (t->conts[i].cidx == cidx) {
			t->conts[i] = t->conts[--t->nconts];
			return;
		}
}

/* ---- freeing extents ----------------------------------------------------- */

/*
 * Blocks of a record leaving the index may still be under a read that began
 * before; they wait here until every read older than them has finished.
 */
static void hold_extent(struct eng_target *t, const struct rec *r)
{
	if (!rec_has_extent(r))
		return;
	if (t->nheld == t->held_cap) {
		size_t cap = t->held_cap ? t->held_cap * 2 : 64;
		struct held *h;

		if (t->held_first) { /* compact before growing */
			memmove(t->held, t->held + t->held_first, (t->nheld - t->held_first) * sizeof(*h));
			t->nheld -= t->held_first;
			t->held_first = 0;
		}
		if (t->nheld == t->held_cap) {
			h = realloc(t->held, cap * sizeof(*h));
			if (!h) {
				/* Leaking blocks until the next open is better
				 * than freeing them under a reader. */
				return;
			}
			t->held = h;
			t->held_cap = cap;
		}
	}
	t->held[t->nheld++] = (struct held){r->loc, blocks_of(r->len), ++t->clock};
}

static void release_held(struct eng_target *t)
{
	uint64_t oldest = t->reads_head ? t->reads_head->clock : UINT64_MAX;

	while (t->held_first < t->nheld && t->held[t->held_first].clock <= oldest) {
		struct held *h = &t->held[t->held_first++];

		space_free(&t->space, h->loc, h->nblk);
	}
	if (t->held_first == t->nheld)
		t->held_first = t->nheld = 0;
}

/* ---- io_uring ------------------------------------------------------------ */

/*
 * Hand what is queued in the submission ring to the kernel. One that fails
 * (-EBUSY, -EAGAIN: the kernel takes nothing for now) or takes only part
 * leaves the rest in the ring, counted in sq_pending, for the next call.
 */
static void ring_submit(struct eng_target *t)
{
	io_uring_submit(&t->ring);
	t->sq_pending = io_uring_sq_ready(&t->ring);
}

/* Hand the ring to the kernel and wait for one completion. */
static void ring_wait(struct eng_target *t)
{
	io_uring_submit_and_wait(&t->ring, 1);
	t->sq_pending = io_uring_sq_ready(&t->ring);
}

/* Room for n entries in the submission ring, submitting it if need be. */
static bool sq_room(struct eng_target *t, unsigned n)
{
	if (io_uring_sq_space_left(&t->ring) < n)
		ring_submit(t);
	return io_uring_sq_space_left(&t->ring) >= n;
}

/*
 * n entries of the submission ring into sqe[], all free at once: a full
 * ring is submitted first, never between taking them, so that no entry goes
 * to the kernel before the caller has filled it in. -EBUSY: no room for n.
 */
static int get_sqes(struct eng_target *t, unsigned n, struct io_uring_sqe **sqe)
{
	if (!sq_room(t, n))
		return -EBUSY;
	for (unsigned i = 0; i < n; i++)
		sqe[i] = io_uring_get_sqe(&t->ring);
	t->sq_pending += n;
	return 0;
}

static struct io_uring_sqe *get_sqe(struct eng_target *t)
{
	struct io_uring_sqe *sqe;

	return get_sqes(t, 1, &sqe) < 0 ? NULL : sqe;
}

/*
 * Hand queued requests to the kernel now if they are worth a system call on
 * their own (a large transfer: the device should not wait for the rest of
 * the caller's batch) or if enough have piled up; small ones otherwise wait
 * for eng_progress() to submit them together.
 */
static void io_kick(struct eng_target *t, size_t len)
{
	if (len >= (64u << 10) || t->sq_pending >= 16)
		ring_submit(t);
}

static void *io_buf(struct eng_target *t, size_t len)
{
	void *p = arena_alloc(&t->arena, len);

	if (!p && posix_memalign(&p, ENG_BLOCK, len) != 0)
		p = NULL;
	return p;
}

static void io_buf_free(struct eng_target *t, void *p)
{
	if (!p)
		return;
	if (arena_owns(&t->arena, p))
		arena_free(&t->arena, p);
	else
		free(p);
}

static void prep_rw(struct eng_target *t, struct io_uring_sqe *sqe, bool write, void *buf,
		    size_t len, uint64_t off)
{
	if (t->arena_registered && arena_owns(&t->arena, buf)) {
		if (write)
			io_uring_prep_write_fixed(sqe, t->space.fd, buf, (unsigned)len, off, 0);
		else
			io_uring_prep_read_fixed(sqe, t->space.fd, buf, (unsigned)len, off, 0);
	} else if (write) {
		io_uring_prep_write(sqe, t->space.fd, buf, (unsigned)len, off);
	} else {
		io_uring_prep_read(sqe, t->space.fd, buf, (unsigned)len, off);
	}
}

/* ---- the log and group commit -------------------------------------------- */

static void pend_push(struct eng_target *t, struct op *o)
{
	o->next = NULL;
	if (t->pend_tail)
		t->pend_tail->next = o;
	else
		t->pend_head = o;
	t->pend_tail = o;
}

/* Log the op's record into the open group; it waits there for a flush. */
static int op_log(struct eng_target *t, struct op *o)
{
	size_t before = t->wal.len;
	int rc = 0;

	switch (o->kind) {
	case OP_INSERT:
		rc = wal_put_insert(&t->wal, t->gen, ++t->seq, o->rec);
		break;
	case OP_DELETE:
		rc = wal_put_key(&t->wal, t->gen, ++t->seq, WAL_DELETE, o->rec->key, o->rec->klen);
		break;
	default:
		break; /* OP_BULK logs its own records before it is queued */
	}
	if (rc < 0)
		return rc;
	o->wal_len += t->wal.len - before;
	o->seq = t->seq;
	pend_push(t, o);
	return 0;
}

static int write_full(int fd, const void *buf, size_t len, off_t off)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = pwrite(fd, p, len, off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
		off += n;
	}
	return 0;
}

static int sync_dir(struct eng_target *t)
{
	return t->mode == ENG_MODE_DISK && fsync(t->dir_fd) < 0 ? -errno : 0;
}

/*
 * Write the whole index to ckpt (through ckpt.tmp and a rename, so a crash
 * leaves the old one), then start a new log generation at offset 0. Runs
 * with no flush in flight, so the index holds exactly what was acknowledged.
 */
static int checkpoint(struct eng_target *t)
{
	char tmp[4200], dst[4200];
	struct ckpt_enc *e = calloc(1, sizeof(*e));
	struct bt_cur c;
	struct rec *r;
	uint8_t hdr[64] = {0};
	uint64_t n = 0, magic = htole64(CKPT_MAGIC);
	uint32_t gen = htole32(t->gen + 1), crc;
	uint64_t seq = htole64(t->seq), cnt;
	off_t off = sizeof(hdr);
	int fd, rc = 0;

	snprintf(tmp, sizeof(tmp), "%s/ckpt.tmp", t->path);
	snprintf(dst, sizeof(dst), "%s/ckpt", t->path);
	if (!e)
		return -ENOMEM;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		free(e);
		return -errno;
	}
	for (r = bt_first(t->index, &c); r; r = bt_next(&c)) {
		rc = ckpt_enc_put(e, r);
		if (rc < 0)
			goto out;
		n++;
		if (!e->open && e->b.len >= (1u << 20)) { /* whole blocks only */
			rc = write_full(fd, e->b.p, e->b.len, off);
			if (rc < 0)
				goto out;
			off += (off_t)e->b.len;
			e->b.len = 0;
		}
	}
	ckpt_enc_finish(e);
	rc = write_full(fd, e->b.p, e->b.len, off);
	if (rc < 0)
		goto out;
	cnt = htole64(n);
	memcpy(hdr, &magic, 8);
	memcpy(hdr + 8, &gen, 4);
	memcpy(hdr + 12, &seq, 8);
	memcpy(hdr + 20, &cnt, 8);
	crc = htole32(eng_crc32c(0, hdr, 60));
	memcpy(hdr + 60, &crc, 4);
	rc = write_full(fd, hdr, sizeof(hdr), 0);
	if (rc == 0 && t->mode == ENG_MODE_DISK && fdatasync(fd) < 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, dst) < 0)
		rc = -errno;
	if (rc == 0)
		rc = sync_dir(t);
out:
	close(fd);
	wbuf_free(&e->b);
	free(e);
	if (rc < 0) {
		unlink(tmp);
		return rc;
	}
	t->gen++;
	t->wal_off = 0;
	wal_restamp(&t->wal, t->gen);
	t->st.checkpoints++;
	return 0;
}

static void ack_op(struct eng_target *t, struct op *o, int rc)
{
	size_t i;

	if (rc == 0) {
		switch (o->kind) {
		case OP_INSERT:
			rc = index_put(t, o->rec);
			if (rc == 0) {
				if (o->rec->type == REC_CONT) {
					struct lode_uuid u;

					memcpy(&u, o->rec->key + 5, sizeof(u));
					rc = cont_add(t, &u, (uint32_t)o->rec->off);
				}
				o->rec = NULL;
			}
			break;
		case OP_DELETE: {
			struct rec *old = index_take(t, o->rec->key, o->rec->klen);

			if (old) {
				hold_extent(t, old);
				free(old);
			}
			break;
		}
		case OP_BULK:
			for (i = 0; i < o->nbulk; i++) {
				hold_extent(t, o->bulk[i]);
				free(o->bulk[i]);
			}
			o->nbulk = 0;
			break;
		case OP_FETCH:
			break;
		}
	} else if (o->kind == OP_INSERT && o->rec && rec_has_extent(o->rec)) {
		/* Never acknowledged: its blocks were never reachable. */
		space_free(&t->space, o->rec->loc, blocks_of(o->rec->len));
	} else if (o->kind == OP_BULK) {
		/* The removal may or may not be durable: keep the blocks
		 * allocated (reclaimed at the next open) but drop the records. */
		for (i = 0; i < o->nbulk; i++)
			free(o->bulk[i]);
		o->nbulk = 0;
	}
	if (rc == 0)
		t->st.flushed_updates++;
	op_done(t, o, rc);
}

static void flush_finish(struct eng_target *t)
{
	struct op *o = t->flush_ops, *next;
	int rc = t->flush_rc;

	if (rc < 0) {
		/* What reached the log is unknown: refuse further writes rather
		 * than risk acknowledging on top of a hole. */
		t->failed = true;
	} else {
		t->wal_off += t->mark.len + t->flush_len;
		memmove(t->wal.p, t->wal.p + t->flush_len, t->wal.len - t->flush_len);
		t->wal.len -= t->flush_len;
		t->st.flushes++;
	}
	t->flush_ops = NULL;
	t->flush_len = 0;
	for (; o; o = next) {
		next = o->next;
		if (rc == 0 && o->seq > t->acked_seq)
			t->acked_seq = o->seq;
		ack_op(t, o, rc < 0 ? -EIO : 0);
	}
}

/* Fail every op of the open group with rc (used when the log cannot grow). */
static void fail_pending(struct eng_target *t, int rc)
{
	struct op *o = t->pend_head, *next;

	t->pend_head = t->pend_tail = NULL;
	t->wal.len = 0;
	for (; o; o = next) {
		next = o->next;
		ack_op(t, o, rc);
	}
}

static void start_flush(struct eng_target *t)
{
	struct op *o, *last = NULL;
	size_t len = 0;
	bool data = false;
	int rc;

	if (t->flush_ops || !t->pend_head)
		return;
	/* Take a prefix of the open group that fits one flush. */
	for (o = t->pend_head; o; o = o->next) {
		if (last && len + o->wal_len > GROUP_MAX)
			break;
		len += o->wal_len;
		data |= o->has_data;
		last = o;
	}
	t->mark.len = 0;
	if (wal_put_mark(&t->mark, t->gen, t->seq, t->acked_seq) < 0) {
		fail_pending(t, -ENOMEM);
		return;
	}
	if (t->wal_off + t->mark.len + len > t->wal_size) {
		if (t->mark.len + len > t->wal_size) {
			fail_pending(t, -ENOSPC);
			return;
		}
		rc = checkpoint(t);
		if (rc < 0) {
			fail_pending(t, rc == -ENOSPC || rc == -EDQUOT ? -ENOSPC : -EIO);
			return;
		}
		t->mark.len = 0;
		wal_put_mark(&t->mark, t->gen, t->seq, t->acked_seq);
	}
	/* No room in the ring (the kernel takes nothing for now): the group
	 * stays open and the next eng_progress tries again. */
	if (t->have_ring && !sq_room(t, data ? 3 : 2))
		return;
	t->flush_ops = t->pend_head;
	t->pend_head = last->next;
	if (!t->pend_head)
		t->pend_tail = NULL;
	last->next = NULL;
	t->flush_len = len;
	t->flush_rc = 0;
	t->wal_iov[0] = (struct iovec){t->mark.p, t->mark.len};
	t->wal_iov[1] = (struct iovec){t->wal.p, len};

	if (!t->have_ring) {
		/* RAM mode: the files are in memory; a write is enough. */
		ssize_t n = pwritev(t->wal_fd, t->wal_iov, 2, (off_t)t->wal_off);

		if (n != (ssize_t)(t->mark.len + len))
			t->flush_rc = n < 0 ? -errno : -EIO;
		flush_finish(t);
		return;
	}
	{
		struct io_uring_sqe *sq[3], *w, *s, *e = NULL;

		get_sqes(t, data ? 3 : 2, sq); /* room was made above */
		w = sq[0];
		s = sq[1];
		if (data)
			e = sq[2];
		io_uring_prep_writev(w, t->wal_fd, t->wal_iov, 2, t->wal_off);
		w->flags |= IOSQE_IO_LINK;
		io_uring_sqe_set_data(w, &t->io_wal_write);
		io_uring_prep_fsync(s, t->wal_fd, IORING_FSYNC_DATASYNC);
		io_uring_sqe_set_data(s, &t->io_wal_sync);
		t->flush_ios = 2;
		if (e) {
			io_uring_prep_fsync(e, t->space.fd, IORING_FSYNC_DATASYNC);
			io_uring_sqe_set_data(e, &t->io_ext_sync);
			t->flush_ios++;
		}
		t->io_inflight += t->flush_ios;
	}
}

/* ---- updates ------------------------------------------------------------- */

static int validate_key(const struct eng_target *t, const struct eng_key *k, bool dkey, bool akey,
			uint32_t *cidx)
{
	if (!t || !k || !k->cont)
		return -EFAULT;
	if (dkey) {
		if (!k->dkey)
			return -EFAULT;
		if (k->dkey_len == 0)
			return -LODE_EKEYEMPTY;
		if (k->dkey_len > LODE_KEY_MAX)
			return -ENAMETOOLONG;
	}
	if (akey) {
		if (!k->akey)
			return -EFAULT;
		if (k->akey_len == 0)
			return -LODE_EKEYEMPTY;
		if (k->akey_len > LODE_KEY_MAX)
			return -ENAMETOOLONG;
	}
	return cont_find(t, k->cont, cidx);
}

static void kb_obj(struct kb *k, uint32_t cidx, struct lode_oid oid)
{
	k->len = 0;
	kb_u32(k, cidx);
	kb_u64(k, oid.hi);
	kb_u64(k, oid.lo);
}

/* cidx|oid|dkey|akey: the prefix of every version of one akey. */
static void kb_akey(struct kb *k, uint32_t cidx, const struct eng_key *key)
{
	kb_obj(k, cidx, key->oid);
	kb_str(k, key->dkey, key->dkey_len);
	kb_str(k, key->akey, key->akey_len);
}

static struct rec *rec_from_kb(const struct kb *k, uint8_t type, size_t tail)
{
	struct rec *r = rec_alloc(k->len, tail);

	if (r) {
		r->type = type;
		memcpy(r->key, k->b, k->len);
	}
	return r;
}

static void sync_cb(void *arg, int rc)
{
	int *p = arg;

	*p = rc;
}

static int wait_for(struct eng_target *t, int *slot)
{
	while (*slot == 1) {
		int rc = eng_progress(t);

		if (rc < 0 && *slot == 1)
			return rc;
		if (*slot == 1 && rc == 0 && t->have_ring && t->io_inflight)
			ring_wait(t);
	}
	return *slot;
}

/* Queue an op; blocking callers (cb NULL) wait for it here. */
static int op_queue(struct eng_target *t, struct op *o, eng_cb_t cb, void *arg, bool data_io)
{
	int slot = 1, rc;

	o->cb = cb ? cb : sync_cb;
	o->arg = cb ? arg : &slot;
	t->inflight++;
	if (!data_io) {
		rc = op_log(t, o);
		if (rc < 0) {
			t->inflight--;
			return rc;
		}
	}
	if (cb)
		return 0;
	return wait_for(t, &slot);
}

/*
 * The newest record of the akey with prefix pfx whose epoch is <= epoch, or
 * NULL. The newest-version map answers most calls without the tree.
 */
static struct rec *akey_newest(struct eng_target *t, const struct kb *pfx, lode_epoch_t epoch)
{
	struct kb k = *pfx;
	struct bt_cur c;
	struct rec *r = t->newest.failed ? NULL : newest_get(&t->newest, pfx->b, pfx->len);

	if (r && rec_epoch_at(r, pfx->len) <= epoch)
		return r;
	kb_u64(&k, ~epoch);
	r = bt_seek(t->index, &c, k.b, k.len);
	return has_prefix(r, pfx) && r->klen >= pfx->len + 8 ? r : NULL;
}

/* Check that an update of type want may go to this akey. */
static int type_check(struct eng_target *t, const struct kb *pfx, uint8_t want)
{
	struct rec *r = akey_newest(t, pfx, LODE_EPOCH_MAX);

	if (!r || r->type == REC_PUNCH)
		return 0;
	if (want == REC_SV)
		return r->type == REC_SV ? 0 : -LODE_ETYPE;
	return r->type == REC_SV ? -LODE_ETYPE : 0;
}

/*
 * The common path of single-value and array updates: build the record,
 * checksum the data, place it inline or in fresh blocks, and queue it.
 */
/* The reservation buf starts, if it is one; -1 if not. */
static int resv_find(struct eng_target *t, const void *buf)
{
	const uint8_t *p = buf;

	if (!t->space.ram || !t->space.map || p < t->space.map || p >= t->space.map + t->space.cap)
		return -1;
	for (unsigned i = 0; i < t->nresv; i++)
		if (t->space.map + t->resv[i].loc == p)
			return (int)i;
	return -1;
}

/* If buf is a reservation big enough for len, it becomes the value's space. */
static bool resv_take(struct eng_target *t, const void *buf, uint32_t len, uint64_t *loc)
{
	int i = resv_find(t, buf);

	if (i < 0 || blocks_of(len) > t->resv[i].nblk)
		return false;
	*loc = t->resv[i].loc;
	if (blocks_of(len) < t->resv[i].nblk)
		space_free(&t->space, *loc + blocks_of(len) * ENG_BLOCK,
			   t->resv[i].nblk - blocks_of(len));
	t->resv[i] = t->resv[--t->nresv];
	return true;
}

void *eng_value_reserve(struct eng_target *t, uint32_t len)
{
	uint64_t loc, nblk = blocks_of(len);

	if (!t || !t->space.ram || len <= t->inline_max || len > LODE_IO_MAX || t->failed)
		return NULL;
	if (t->nresv == t->resv_cap) {
		unsigned cap = t->resv_cap ? 2 * t->resv_cap : 16;
		struct resv *nr = realloc(t->resv, cap * sizeof(*nr));

		if (!nr)
			return NULL;
		t->resv = nr;
		t->resv_cap = cap;
	}
	if (space_alloc(&t->space, nblk, &loc) < 0)
		return NULL;
	t->resv[t->nresv].loc = loc;
	t->resv[t->nresv].nblk = nblk;
	t->nresv++;
	return t->space.map + loc;
}

bool eng_csum_old_chunks;

static int update(struct eng_target *t, const struct eng_key *key, lode_epoch_t epoch, uint8_t type,
		  uint64_t off, const void *buf, uint32_t len, eng_cb_t cb, void *arg)
{
	struct kb k;
	struct rec *r;
	struct op *o;
	uint32_t ck = eng_csum_old_chunks ? ENG_CSUM_CHUNK_OLD : ENG_CSUM_CHUNK;
	uint32_t cidx, nchunk = csum_nchunks(len, ck);
	bool inl;
	int rc = validate_key(t, key, true, true, &cidx);

	if (rc < 0)
		return rc;
	inl = len <= t->inline_max;
	if (!buf && len)
		return -EFAULT;
	if (epoch == 0 || epoch == LODE_EPOCH_MAX)
		return -EINVAL;
	if (len > LODE_IO_MAX)
		return -E2BIG;
	if (t->failed)
		return -LODE_EBADTGT;
	kb_akey(&k, cidx, key);
	rc = type_check(t, &k, type);
	if (rc < 0)
		return rc;
	kb_u64(&k, ~epoch);
	if (type == REC_ARR)
		kb_u64(&k, ~++t->key_seq); /* unique, newer sorts first */
	r = rec_from_kb(&k, type, inl ? len : (nchunk > 1 ? nchunk * 4u : 0));
	o = calloc(1, sizeof(*o));
	if (!r || !o) {
		free(r);
		free(o);
		return -ENOMEM;
	}
	r->len = len;
	r->off = off;
	r->flags = eng_csum_old_chunks ? 0 : REC_F_CSUM_BLOCK;
	o->kind = OP_INSERT;
	o->rec = r;
	if (inl) {
		r->flags = REC_F_INLINE;
		if (len)
			memcpy(rec_data(r), buf, len);
		r->crc = eng_crc32c(0, buf, len);
		return op_queue(t, o, cb, arg, false);
	}
	for (uint32_t i = 0; i < nchunk; i++) {
		uint32_t cl = len - i * ck < ck ? len - i * ck : ck;
		uint32_t c = eng_crc32c(0, (const uint8_t *)buf + (size_t)i * ck, cl);

		if (nchunk == 1)
			r->crc = c;
		else
			memcpy(rec_data(r) + 4 * (size_t)i, &c, 4);
	}
	if (resv_take(t, buf, len, &r->loc)) {
		/* The value was put in place by the caller: no copy. */
		o->has_data = true;
		return op_queue(t, o, cb, arg, false);
	}
	rc = space_alloc(&t->space, blocks_of(len), &r->loc);
	if (rc < 0) {
		free(r);
		free(o);
		return rc;
	}
	o->has_data = true;
	if (t->space.ram) {
		memcpy(t->space.map + r->loc, buf, len);
		return op_queue(t, o, cb, arg, false);
	}
	{
		size_t blen = blocks_of(len) * ENG_BLOCK;
		struct io_uring_sqe *sqe;
		struct io *io;

		/* A caller's buffer that O_DIRECT can take as it is is written
		 * from directly (the API asks callers to leave it alone until
		 * the callback); anything else goes through a bounce buffer. */
		bool direct = len == blen && ((uintptr_t)buf % ENG_BLOCK) == 0;

		o->bounce = direct ? NULL : io_buf(t, blen);
		if (!direct && !o->bounce) {
			space_free(&t->space, r->loc, blocks_of(len));
			free(r);
			free(o);
			return -ENOMEM;
		}
		if (!direct) {
			memcpy(o->bounce, buf, len);
			memset((uint8_t *)o->bounce + len, 0, blen - len);
		}
		io = &o->io;
		io->kind = IO_DATA;
		io->ctx = o;
		sqe = get_sqe(t);
		if (!sqe) {
			io_buf_free(t, o->bounce);
			space_free(&t->space, r->loc, blocks_of(len));
			free(r);
			free(o);
			return -EBUSY;
		}
		prep_rw(t, sqe, true, direct ? (void *)buf : o->bounce, blen, r->loc);
		io_uring_sqe_set_data(sqe, io);
		t->io_inflight++;
		io_kick(t, blen);
		return op_queue(t, o, cb, arg, true);
	}
}

int eng_sv_update(struct eng_target *t, const struct eng_key *key, lode_epoch_t epoch,
		  const void *buf, uint32_t len, eng_cb_t cb, void *arg)
{
	return update(t, key, epoch, REC_SV, 0, buf, len, cb, arg);
}

int eng_arr_update(struct eng_target *t, const struct eng_key *key, lode_epoch_t epoch,
		   uint64_t off, const void *buf, uint32_t len, eng_cb_t cb, void *arg)
{
	if (len == 0 && t && key && buf)
		return -EINVAL;
	if (off + len < off)
		return -EOVERFLOW;
	return update(t, key, epoch, REC_ARR, off, buf, len, cb, arg);
}

/* Queue a record without data: punches, containers, snapshots. */
static int put_meta(struct eng_target *t, struct kb *k, uint8_t type, uint64_t loc, uint64_t off,
		    eng_cb_t cb, void *arg)
{
	struct rec *r;
	struct op *o;

	if (t->failed)
		return -LODE_EBADTGT;
	r = rec_from_kb(k, type, 0);
	o = calloc(1, sizeof(*o));
	if (!r || !o) {
		free(r);
		free(o);
		return -ENOMEM;
	}
	r->loc = loc;
	r->off = off;
	o->kind = OP_INSERT;
	o->rec = r;
	return op_queue(t, o, cb, arg, false);
}

static int punch(struct eng_target *t, const struct eng_key *key, lode_epoch_t epoch, int level,
		 eng_cb_t cb, void *arg)
{
	struct kb k;
	uint32_t cidx;
	int rc = validate_key(t, key, level >= 1, level >= 2, &cidx);

	if (rc < 0)
		return rc;
	if (epoch == 0 || epoch == LODE_EPOCH_MAX)
		return -EINVAL;
	kb_obj(&k, cidx, key->oid);
	if (level == 0) {
		kb_u16(&k, 0);
	} else {
		kb_str(&k, key->dkey, key->dkey_len);
		if (level == 1)
			kb_u16(&k, 0);
		else
			kb_str(&k, key->akey, key->akey_len);
	}
	kb_u64(&k, ~epoch);
	return put_meta(t, &k, REC_PUNCH, 0, 0, cb, arg);
}

int eng_obj_punch(struct eng_target *t, const struct eng_key *key, lode_epoch_t epoch, eng_cb_t cb,
		  void *arg)
{
	return punch(t, key, epoch, 0, cb, arg);
}

int eng_dkey_punch(struct eng_target *t, const struct eng_key *key, lode_epoch_t epoch,
		   eng_cb_t cb, void *arg)
{
	return punch(t, key, epoch, 1, cb, arg);
}

int eng_akey_punch(struct eng_target *t, const struct eng_key *key, lode_epoch_t epoch,
		   eng_cb_t cb, void *arg)
{
	return punch(t, key, epoch, 2, cb, arg);
}

int eng_arr_punch(struct eng_target *t, const struct eng_key *key, lode_epoch_t epoch,
		  uint64_t off, uint64_t len, eng_cb_t cb, void *arg)
{
	struct kb k;
	uint32_t cidx;
	int rc = validate_key(t, key, true, true, &cidx);

	if (rc < 0)
		return rc;
	if (epoch == 0 || epoch == LODE_EPOCH_MAX || len == 0)
		return -EINVAL;
	if (off + len < off)
		return -EOVERFLOW;
	kb_akey(&k, cidx, key);
	rc = type_check(t, &k, REC_ARR);
	if (rc < 0)
		return rc;
	kb_u64(&k, ~epoch);
	kb_u64(&k, ~++t->key_seq);
	return put_meta(t, &k, REC_ARR_PUNCH, len, off, cb, arg);
}

/* ---- visibility ---------------------------------------------------------- */

/* Newest punch <= epoch among records keyed exactly pfx|~epoch; 0 if none. */
static lode_epoch_t newest_punch(struct eng_target *t, struct kb *pfx, lode_epoch_t epoch)
{
	struct bt_cur c;
	struct rec *r;
	uint32_t plen = pfx->len;

	kb_u64(pfx, ~epoch);
	r = bt_seek(t->index, &c, pfx->b, pfx->len);
	pfx->len = plen;
	if (!has_prefix(r, pfx) || r->klen != plen + 8)
		return 0;
	return rec_epoch_at(r, plen);
}

/*
 * The epoch at or below which object and dkey punches hide versions of this
 * dkey for a read at epoch (0: nothing hidden).
 */
static lode_epoch_t punch_barrier(struct eng_target *t, uint32_t cidx, struct lode_oid oid,
				  const void *dkey, uint32_t dlen, lode_epoch_t epoch)
{
	struct kb k;
	lode_epoch_t b, d;

	if (!t->upper_punches)
		return 0;
	kb_obj(&k, cidx, oid);
	kb_u16(&k, 0);
	b = newest_punch(t, &k, epoch);
	if (!dkey)
		return b;
	kb_obj(&k, cidx, oid);
	kb_str(&k, dkey, dlen);
	kb_u16(&k, 0);
	d = newest_punch(t, &k, epoch);
	return d > b ? d : b;
}

/* ---- fetches --------------------------------------------------------------- */

static bool chunks_ok(const struct rec *r, const uint8_t *data, uint32_t c0, uint32_t c1)
{
	uint32_t ck = rec_csum_chunk(r);

	for (uint32_t i = c0; i < c1; i++) {
		uint32_t start = i * ck;
		uint32_t cl = r->len - start < ck ? r->len - start : ck;

		if (eng_crc32c(0, data + start - (size_t)c0 * ck, cl) != rec_chunk_crc(r, i))
			return false;
	}
	return true;
}

static void reads_link(struct eng_target *t, struct op *o)
{
	o->clock = t->clock;
	o->rnext = NULL;
	o->rprev = t->reads_tail;
	if (t->reads_tail)
		t->reads_tail->rnext = o;
	else
		t->reads_head = o;
	t->reads_tail = o;
}

static void reads_unlink(struct eng_target *t, struct op *o)
{
	if (o->rprev)
		o->rprev->rnext = o->rnext;
	else
		t->reads_head = o->rnext;
	if (o->rnext)
		o->rnext->rprev = o->rprev;
	else
		t->reads_tail = o->rprev;
}

/*
 * Give the caller bytes [xoff, xoff + n) of record r's data at dst, checked
 * against the checksums of every chunk they touch. Inline and RAM-mode data
 * are copied now; disk-mode data is read asynchronously under op o.
 */
static int give(struct eng_target *t, struct op *o, const struct rec *r, uint64_t xoff, uint32_t n,
		uint8_t *dst)
{
	uint32_t ck = rec_csum_chunk(r);
	uint32_t c0 = (uint32_t)(xoff / ck);
	uint32_t c1 = (uint32_t)((xoff + n + ck - 1) / ck);
	const uint8_t *src;

	if (n == 0)
		return 0;
	if (r->flags & REC_F_INLINE) {
		const uint8_t *d = r->key + r->klen;

		if (eng_crc32c(0, d, r->len) != r->crc)
			return -LODE_ECSUM;
		memcpy(dst, d + xoff, n);
		return 0;
	}
	if (t->space.ram) {
		/* Check and copy one chunk at a time, so the copy reads what the
		 * check just brought into the cache. */
		uint64_t pos = xoff, end = xoff + n;

		src = t->space.map + r->loc;
		for (uint32_t i = c0; i < c1; i++) {
			uint64_t cs = (uint64_t)i * ck;
			uint32_t cl = r->len - cs < ck ? (uint32_t)(r->len - cs) : ck;
			uint64_t ce = cs + cl < end ? cs + cl : end;

			if (eng_crc32c(0, src + cs, cl) != rec_chunk_crc(r, i)) {
				memset(dst, 0, pos - xoff); /* take back what was given */
				return -LODE_ECSUM;
			}
			memcpy(dst + (pos - xoff), src + pos, ce - pos);
			pos = ce;
		}
		return 0;
	}
	{
		uint64_t start = (uint64_t)c0 * ck;
		uint64_t end = (uint64_t)c1 * ck < r->len ? (uint64_t)c1 * ck : r->len;
		size_t blen = blocks_of(end - start) * ENG_BLOCK;
		uint32_t nchunk = c1 - c0;
		struct piece *p = malloc(sizeof(*p) + nchunk * 4u);
		struct io *io;
		struct io_uring_sqe *sqe;

		if (!p)
			return -ENOMEM;
		/* Read straight into the caller's buffer when it is exactly the
		 * checked range, block-sized and aligned for O_DIRECT. */
		p->direct = start == xoff && end - start == n && blen == n &&
			    ((uintptr_t)dst % ENG_BLOCK) == 0;
		p->buf = p->direct ? dst : io_buf(t, blen);
		if (!p->buf) {
			free(p);
			return -ENOMEM;
		}
		p->op = o;
		p->dst = dst;
		p->skip = (uint32_t)(xoff - start);
		p->copy = n;
		p->nchunk = nchunk;
		p->ck = ck;
		p->check_len = (uint32_t)(end - start);
		for (uint32_t i = 0; i < nchunk; i++)
			p->crc[i] = rec_chunk_crc(r, c0 + i);
		io = &p->io;
		io->kind = IO_READ;
		io->ctx = p;
		sqe = get_sqe(t);
		if (!sqe) {
			if (!p->direct)
				io_buf_free(t, p->buf);
			free(p);
			return -EBUSY;
		}
		prep_rw(t, sqe, false, p->buf, blen, r->loc + start);
		io_uring_sqe_set_data(sqe, io);
		t->io_inflight++;
		o->reads++;
		io_kick(t, blen);
		return 0;
	}
}

static void piece_done(struct eng_target *t, struct piece *p, int res)
{
	struct op *o = p->op;
	int rc = 0;

	if (res < 0) {
		rc = res;
	} else if ((size_t)res < p->check_len) {
		rc = -EIO;
	} else {
		for (uint32_t i = 0; i < p->nchunk; i++) {
			uint32_t s = i * p->ck;
			uint32_t cl = p->check_len - s < p->ck ? p->check_len - s : p->ck;

			if (eng_crc32c(0, p->buf + s, cl) != p->crc[i]) {
				rc = -LODE_ECSUM;
				break;
			}
		}
	}
	if (rc == 0 && !p->direct)
		memcpy(p->dst, p->buf + p->skip, p->copy);
	else if (rc < 0)
		memset(p->dst, 0, p->copy); /* never hand out unchecked bytes */
	if (rc < 0 && (o->rc == 0 || rc == -LODE_ECSUM))
		o->rc = rc;
	if (!p->direct)
		io_buf_free(t, p->buf);
	free(p);
	if (--o->reads == 0) {
		reads_unlink(t, o);
		op_done(t, o, o->rc);
	}
}

static struct op *fetch_op(eng_cb_t cb, void *arg, int *slot)
{
	struct op *o = calloc(1, sizeof(*o));

	if (o) {
		o->kind = OP_FETCH;
		o->cb = cb ? cb : sync_cb;
		o->arg = cb ? arg : slot;
	}
	return o;
}

/* Finish a fetch whose reads were all issued (or that needed none). */
static int fetch_end(struct eng_target *t, struct op *o, int rc, eng_cb_t cb, int *slot)
{
	if (o->reads) {
		/* Reads in flight: they finish the op. An error found while
		 * issuing is kept for them to report. */
		if (rc < 0 && o->rc == 0)
			o->rc = rc;
		reads_link(t, o);
		t->inflight++;
		if (!cb)
			return wait_for(t, slot);
		return 0;
	}
	if (!cb) {
		free(o);
		return rc;
	}
	/* Async callers always hear back through the callback. */
	t->inflight++;
	op_done(t, o, rc);
	return 0;
}

int eng_sv_fetch(struct eng_target *t, const struct eng_key *key, lode_epoch_t epoch, void *buf,
		 uint32_t cap, uint32_t *len_out, eng_cb_t cb, void *arg)
{
	struct kb k;
	struct rec *r;
	struct op *o;
	uint32_t cidx, plen;
	int slot = 1, rc = validate_key(t, key, true, true, &cidx);

	if (rc < 0)
		return rc;
	if (!len_out || (!buf && cap))
		return -EFAULT;
	if (epoch == 0)
		return -EINVAL;
	kb_akey(&k, cidx, key);
	plen = k.len;
	r = akey_newest(t, &k, epoch);
	if (!r)
		return -ENOENT;
	if (rec_epoch_at(r, plen) <= punch_barrier(t, cidx, key->oid, key->dkey, key->dkey_len, epoch))
		return -ENOENT;
	if (r->type == REC_PUNCH)
		return -ENOENT;
	if (r->type != REC_SV)
		return -LODE_ETYPE;
	*len_out = r->len;
	o = fetch_op(cb, arg, &slot);
	if (!o)
		return -ENOMEM;
	rc = give(t, o, r, 0, r->len < cap ? r->len : cap, buf);
	if (rc == 0 && r->len > cap)
		rc = -EOVERFLOW;
	return fetch_end(t, o, rc, cb, &slot);
}

/* Make room for one more element in a growable array *v of *cap. */
static int array_room(void **v, size_t *cap, size_t n, size_t elem)
{
	if (n == *cap) {
		size_t c = *cap ? *cap * 2 : 16;
		void *p = realloc(*v, c * elem);

		if (!p)
			return -ENOMEM;
		*v = p;
		*cap = c;
	}
	return 0;
}

/* Ranges of [lo, hi) not yet covered by newer extents, newest first. */
struct gaps {
	uint64_t (*v)[2];
	size_t n, cap;
};

static int gaps_add(struct gaps *g, uint64_t lo, uint64_t hi)
{
	if (array_room((void **)&g->v, &g->cap, g->n, sizeof(*g->v)) < 0)
		return -ENOMEM;
	g->v[g->n][0] = lo;
	g->v[g->n][1] = hi;
	g->n++;
	return 0;
}

/*
 * Cover [a, b) with one extent: for every gap it overlaps, call fn on the
 * overlap and cut it out of the gaps.
 */
typedef int (*cover_fn)(void *ctx, const struct rec *r, uint64_t lo, uint64_t hi);

static int gaps_cover(struct gaps *g, const struct rec *r, uint64_t a, uint64_t b, cover_fn fn,
		      void *ctx)
{
	size_t n = g->n;
	int rc = 0;

	for (size_t i = 0; i < n && rc == 0; i++) {
		uint64_t lo = g->v[i][0], hi = g->v[i][1];
		uint64_t x = lo > a ? lo : a, y = hi < b ? hi : b;

		if (x >= y)
			continue;
		rc = fn(ctx, r, x, y);
		/* keep the left part in place, append the right part */
		if (y < hi) {
			if (x > lo) {
				g->v[i][1] = x;
				rc = rc ? rc : gaps_add(g, y, hi);
			} else {
				g->v[i][0] = y;
			}
		} else if (x > lo) {
			g->v[i][1] = x;
		} else {
			g->v[i][0] = g->v[i][1] = 0; /* empty */
		}
	}
	/* drop empties */
	size_t j = 0;

	for (size_t i = 0; i < g->n; i++)
		if (g->v[i][0] < g->v[i][1])
			memcpy(g->v[j++], g->v[i], sizeof(g->v[i]));
	g->n = j;
	return rc;
}

/*
 * Walk the array extents of one akey visible at epoch, newest first, and
 * cover [lo, hi) with them. Returns 1 if the akey has visible data (an
 * extent, not only range punches) anywhere, 0 if not, or a negative code.
 * Once the range is covered the walk goes on only until it finds data.
 */
static int arr_walk(struct eng_target *t, uint32_t cidx, const struct eng_key *key,
		    lode_epoch_t epoch, struct gaps *g, cover_fn fn, void *ctx)
{
	struct kb k;
	struct bt_cur c;
	struct rec *r;
	uint32_t plen;
	lode_epoch_t bar = punch_barrier(t, cidx, key->oid, key->dkey, key->dkey_len, epoch);
	unsigned seen = 0;
	int data = 0, rc;

	kb_akey(&k, cidx, key);
	plen = k.len;
	kb_u64(&k, ~epoch);
	k.len = plen;
	for (r = bt_seek(t->index, &c, k.b, plen + 8); has_prefix(r, &k) && (g->n || !data);
	     r = bt_next(&c)) {
		uint64_t end;

		if (++seen == ENG_WALK_LONG + 1)
			t->st.long_walks++;

		if (r->klen < plen + 8 || rec_epoch_at(r, plen) <= bar)
			break;
		if (r->type == REC_PUNCH)
			break;
		if (r->type == REC_SV)
			return data ? data : -LODE_ETYPE;
		if (r->type == REC_ARR)
			data = 1;
		if (!g->n)
			continue;
		end = r->type == REC_ARR_PUNCH ? r->off + r->loc : r->off + r->len;
		if (end < r->off)
			end = UINT64_MAX;
		rc = gaps_cover(g, r, r->off, end, fn, ctx);
		if (rc < 0)
			return rc;
	}
	return data;
}

struct fetch_ctx {
	struct eng_target *t;
	struct op *o;
	uint64_t base;
	uint8_t *buf;
};

static int fetch_piece(void *ctx, const struct rec *r, uint64_t lo, uint64_t hi)
{
	struct fetch_ctx *f = ctx;
	uint8_t *dst = f->buf + (lo - f->base);

	if (r->type == REC_ARR_PUNCH) {
		memset(dst, 0, hi - lo);
		return 0;
	}
	return give(f->t, f->o, r, lo - r->off, (uint32_t)(hi - lo), dst);
}

int eng_arr_fetch(struct eng_target *t, const struct eng_key *key, lode_epoch_t epoch,
		  uint64_t off, void *buf, uint32_t len, eng_cb_t cb, void *arg)
{
	struct gaps g = {0};
	struct fetch_ctx f;
	struct op *o;
	uint32_t cidx;
	int slot = 1, rc = validate_key(t, key, true, true, &cidx);

	if (rc < 0)
		return rc;
	if (!buf)
		return -EFAULT;
	if (epoch == 0 || len == 0)
		return -EINVAL;
	if (off + len < off)
		return -EOVERFLOW;
	if (len > LODE_IO_MAX)
		return -E2BIG;
	o = fetch_op(cb, arg, &slot);
	if (!o || gaps_add(&g, off, off + len) < 0) {
		free(o);
		free(g.v);
		return -ENOMEM;
	}
	f = (struct fetch_ctx){t, o, off, buf};
	rc = arr_walk(t, cidx, key, epoch, &g, fetch_piece, &f);
	if (rc == 0 && !o->reads) {
		free(g.v);
		free(o);
		return -ENOENT;
	}
	for (size_t i = 0; rc >= 0 && i < g.n; i++)
		memset((uint8_t *)buf + (g.v[i][0] - off), 0, g.v[i][1] - g.v[i][0]);
	free(g.v);
	return fetch_end(t, o, rc < 0 ? rc : 0, cb, &slot);
}

static int size_piece(void *ctx, const struct rec *r, uint64_t lo, uint64_t hi)
{
	uint64_t *max = ctx;

	if (r->type == REC_ARR && hi > *max)
		*max = hi;
	return 0;
}

int eng_arr_size(struct eng_target *t, const struct eng_key *key, lode_epoch_t epoch,
		 uint64_t *size_out)
{
	struct gaps g = {0};
	uint32_t cidx;
	int rc = validate_key(t, key, true, true, &cidx);

	if (rc < 0)
		return rc;
	if (!size_out)
		return -EFAULT;
	*size_out = 0;
	if (gaps_add(&g, 0, UINT64_MAX) < 0)
		return -ENOMEM;
	rc = arr_walk(t, cidx, key, epoch, &g, size_piece, size_out);
	free(g.v);
	return rc < 0 ? rc : 0;
}

/* ---- progress -------------------------------------------------------------- */

static void reap(struct eng_target *t)
{
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;

	io_uring_for_each_cqe(&t->ring, head, cqe) {
		struct io *io = io_uring_cqe_get_data(cqe);
		int res = cqe->res;

		n++;
		t->io_inflight--;
		switch (io->kind) {
		case IO_DATA: {
			struct op *o = io->ctx;
			size_t blen = blocks_of(o->rec->len) * ENG_BLOCK;
			int rc = res < 0 ? res : ((size_t)res == blen ? 0 : -EIO);

			io_buf_free(t, o->bounce);
			o->bounce = NULL;
			if (rc == 0)
				rc = op_log(t, o);
			if (rc < 0)
				ack_op(t, o, rc == -ENOSPC ? -ENOSPC : rc);
			break;
		}
		case IO_READ:
			piece_done(t, io->ctx, res);
			break;
		case IO_WAL_WRITE:
			if (res != (int)(t->mark.len + t->flush_len) && t->flush_rc == 0)
				t->flush_rc = res < 0 ? res : -EIO;
			if (--t->flush_ios == 0)
				flush_finish(t);
			break;
		case IO_WAL_SYNC:
		case IO_EXT_SYNC:
			if (res < 0 && t->flush_rc == 0)
				t->flush_rc = res;
			if (--t->flush_ios == 0)
				flush_finish(t);
			break;
		}
	}
	io_uring_cq_advance(&t->ring, n);
}

int eng_progress(struct eng_target *t)
{
	int n = 0;

	if (!t)
		return -EFAULT;
	if (t->have_ring) {
		if (t->sq_pending)
			ring_submit(t);
		reap(t);
		/* Completions beyond the queue's room wait in the kernel until
		 * asked for (and there is room again): without this, a caller
		 * that only calls eng_progress would never see them. */
		if (io_uring_cq_has_overflow(&t->ring)) {
			io_uring_get_events(&t->ring);
			reap(t);
		}
	}
	start_flush(t);
	if (t->have_ring && t->sq_pending)
		ring_submit(t);
	release_held(t);
	while (t->done_head) {
		struct op *o = t->done_head;

		t->done_head = o->next;
		if (!t->done_head)
			t->done_tail = NULL;
		t->inflight--;
		o->cb(o->arg, o->rc);
		if (o->rec)
			free(o->rec);
		free(o->bulk);
		free(o);
		n++;
	}
	return n;
}

unsigned eng_inflight(const struct eng_target *t)
{
	return t ? t->inflight : 0;
}

/* Wait until every queued op has completed. */
static int drain(struct eng_target *t)
{
	while (t->inflight) {
		int rc = eng_progress(t);

		if (rc < 0)
			return rc;
		if (t->inflight && rc == 0 && t->have_ring && t->io_inflight)
			ring_wait(t);
	}
	return 0;
}

/* ---- containers and snapshots ---------------------------------------------- */

static void kb_cont(struct kb *k, const struct lode_uuid *u)
{
	k->len = 0;
	kb_u32(k, 0);
	k->b[k->len++] = 'C';
	memcpy(k->b + k->len, u, sizeof(*u));
	k->len += sizeof(*u);
}

static void kb_snap(struct kb *k, uint32_t cidx)
{
	k->len = 0;
	kb_u32(k, 0);
	k->b[k->len++] = 'S';
	kb_u32(k, cidx);
}

int eng_cont_create(struct eng_target *t, const struct lode_uuid *cont)
{
	struct kb k;
	uint32_t cidx;

	if (!t || !cont)
		return -EFAULT;
	if (cont_find(t, cont, &cidx) == 0)
		return -EEXIST;
	kb_cont(&k, cont);
	return put_meta(t, &k, REC_CONT, 0, t->next_cidx++, NULL, NULL);
}

/*
 * Take every record under the key prefix out of the index into a bulk op,
 * logging the prefix deletion; the records are freed once it is durable.
 */
static int bulk_take_prefix(struct eng_target *t, struct op *o, const struct kb *pfx)
{
	struct bt_cur c;
	struct rec *r;

	for (;;) {
		r = bt_seek(t->index, &c, pfx->b, pfx->len);
		if (!has_prefix(r, pfx))
			break;
		if (array_room((void **)&o->bulk, &o->bulk_cap, o->nbulk, sizeof(*o->bulk)) < 0)
			return -ENOMEM;
		o->bulk[o->nbulk++] = index_take(t, r->key, r->klen);
	}
	return wal_put_key(&t->wal, t->gen, ++t->seq, WAL_DELPFX, pfx->b, (uint16_t)pfx->len);
}

/*
 * A removal that failed half way (out of memory): what was taken is logged
 * or not, so the target must not acknowledge more on top of it. Returns rc.
 */
static int bulk_abandon(struct eng_target *t, struct op *o, int rc)
{
	t->failed = true;
	for (size_t i = 0; i < o->nbulk; i++)
		free(o->bulk[i]);
	free(o->bulk);
	free(o);
	return rc;
}

static int bulk_run(struct eng_target *t, struct op *o, size_t wal_before)
{
	int slot = 1;

	o->kind = OP_BULK;
	o->cb = sync_cb;
	o->arg = &slot;
	o->wal_len = t->wal.len - wal_before;
	o->seq = t->seq;
	t->inflight++;
	pend_push(t, o);
	return wait_for(t, &slot);
}

int eng_cont_destroy(struct eng_target *t, const struct lode_uuid *cont)
{
	struct kb k;
	struct op *o;
	uint32_t cidx;
	size_t before;
	int rc;

	if (!t || !cont)
		return -EFAULT;
	rc = cont_find(t, cont, &cidx);
	if (rc < 0)
		return rc;
	if (t->failed)
		return -LODE_EBADTGT;
	rc = drain(t);
	if (rc < 0)
		return rc;
	o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	before = t->wal.len;
	k.len = 0;
	kb_u32(&k, cidx);
	rc = bulk_take_prefix(t, o, &k);
	kb_snap(&k, cidx);
	rc = rc ? rc : bulk_take_prefix(t, o, &k);
	kb_cont(&k, cont);
	rc = rc ? rc : bulk_take_prefix(t, o, &k);
	cont_remove(t, cidx);
	if (rc < 0)
		return bulk_abandon(t, o, rc);
	return bulk_run(t, o, before);
}

/* Before a removal of records: the key checked (with a dkey or not), and
 * nothing in flight. */
static int removal_begin(struct eng_target *t, const struct eng_key *key, bool dkey,
			 uint32_t *cidx)
{
	int rc = validate_key(t, key, dkey, false, cidx);

	if (rc < 0)
		return rc;
	if (t->failed)
		return -LODE_EBADTGT;
	return drain(t);
}

/* Every record under pfx removed, logged, durable when it returns. */
static int prefix_remove(struct eng_target *t, const struct kb *pfx)
{
	struct op *o = calloc(1, sizeof(*o));
	size_t before = t->wal.len;
	int rc;

	if (!o)
		return -ENOMEM;
	if ((rc = bulk_take_prefix(t, o, pfx)) < 0)
		return bulk_abandon(t, o, rc);
	return bulk_run(t, o, before);
}

int eng_dkey_drop(struct eng_target *t, const struct eng_key *key)
{
	struct kb k;
	uint32_t cidx;
	int rc = removal_begin(t, key, true, &cidx);

	if (rc < 0)
		return rc;
	kb_obj(&k, cidx, key->oid);
	kb_str(&k, key->dkey, key->dkey_len);
	return prefix_remove(t, &k);
}

static uint32_t field_len(const struct rec *r, uint32_t pos);

int eng_obj_fold(struct eng_target *t, const struct eng_key *key)
{
	struct kb p, d, k;
	struct bt_cur c;
	struct rec *r;
	lode_epoch_t *ep = NULL;
	uint8_t *dk = NULL; /* dkey prefixes, each [u16 length][bytes] */
	size_t ne = 0, dlen = 0, dcap = 0;
	uint32_t cidx;
	int rc = removal_begin(t, key, false, &cidx);

	if (rc < 0)
		return rc;
	/* The object's punches: records obj|u16 0|~epoch. */
	kb_obj(&p, cidx, key->oid);
	kb_u16(&p, 0);
	for (r = bt_seek(t->index, &c, p.b, p.len); has_prefix(r, &p); r = bt_next(&c)) {
		lode_epoch_t *n;

		if (r->klen != p.len + 8)
			continue;
		if (!(n = realloc(ep, (ne + 1) * sizeof(*ep)))) {
			free(ep);
			return -ENOMEM;
		}
		ep = n;
		ep[ne++] = rec_epoch_at(r, p.len);
	}
	if (ne == 0)
		return 0;
	/* Every dkey it holds, first: the inserts below move the tree. */
	kb_obj(&k, cidx, key->oid);
	d = k;
	kb_u16(&d, 1);
	for (r = bt_seek(t->index, &c, d.b, d.len); has_prefix(r, &k);) {
		size_t n;

		d.len = OBJ_PFX + 2 + field_len(r, OBJ_PFX);
		memcpy(d.b, r->key, d.len);
		n = d.len - OBJ_PFX;
		if (dlen + n > dcap) {
			uint8_t *b = realloc(dk, 2 * dcap + n + 256);

			if (!b) {
				rc = -ENOMEM;
				goto out;
			}
			dk = b;
			dcap = 2 * dcap + n + 256;
		}
		memcpy(dk + dlen, d.b + OBJ_PFX, n);
		dlen += n;
		kb_skip(&d);
		r = bt_seek(t->index, &c, d.b, d.len);
	}
	/* Each a dkey punch at each of the object's epochs, durable... */
	for (size_t at = 0; at < dlen && rc == 0;) {
		size_t n = 2 + ((size_t)dk[at] << 8 | dk[at + 1]);

		for (size_t e = 0; e < ne && rc == 0; e++) {
			k.len = OBJ_PFX;
			memcpy(k.b + OBJ_PFX, dk + at, n);
			k.len += n;
			kb_u16(&k, 0);
			kb_u64(&k, ~ep[e]);
			rc = put_meta(t, &k, REC_PUNCH, 0, 0, NULL, NULL);
		}
		at += n;
	}
	if (rc < 0)
		goto out;
	/* ...before the object's punches go. */
	rc = prefix_remove(t, &p);
out:
	free(ep);
	free(dk);
	return rc;
}

int eng_cont_list(struct eng_target *t, struct lode_uuid *conts, unsigned max)
{
	if (!t || (!conts && max))
		return -EFAULT;
	for (unsigned i = 0; i < t->nconts && i < max; i++)
		conts[i] = t->conts[i].uuid;
	return (int)t->nconts;
}

int eng_snap_create(struct eng_target *t, const struct lode_uuid *cont, lode_epoch_t epoch)
{
	struct kb k;
	uint32_t cidx;
	int rc;

	if (!t || !cont)
		return -EFAULT;
	rc = cont_find(t, cont, &cidx);
	if (rc < 0)
		return rc;
	if (epoch == 0 || epoch == LODE_EPOCH_MAX)
		return -EINVAL;
	kb_snap(&k, cidx);
	kb_u64(&k, epoch);
	if (bt_lookup(t->index, k.b, k.len))
		return -EEXIST;
	return put_meta(t, &k, REC_SNAP, 0, 0, NULL, NULL);
}

int eng_snap_destroy(struct eng_target *t, const struct lode_uuid *cont, lode_epoch_t epoch)
{
	struct kb k;
	struct op *o;
	uint32_t cidx;
	int rc;

	if (!t || !cont)
		return -EFAULT;
	rc = cont_find(t, cont, &cidx);
	if (rc < 0)
		return rc;
	kb_snap(&k, cidx);
	kb_u64(&k, epoch);
	if (!bt_lookup(t->index, k.b, k.len))
		return -LODE_ENOSNAP;
	if (t->failed)
		return -LODE_EBADTGT;
	o = calloc(1, sizeof(*o));
	if (!o || !(o->rec = rec_from_kb(&k, REC_SNAP, 0))) {
		free(o);
		return -ENOMEM;
	}
	o->kind = OP_DELETE;
	return op_queue(t, o, NULL, NULL, false);
}

int eng_snap_list(struct eng_target *t, const struct lode_uuid *cont, lode_epoch_t *epochs,
		  unsigned max)
{
	struct kb k;
	struct bt_cur c;
	struct rec *r;
	uint32_t cidx;
	int rc, n = 0;

	if (!t || !cont || (!epochs && max))
		return -EFAULT;
	rc = cont_find(t, cont, &cidx);
	if (rc < 0)
		return rc;
	kb_snap(&k, cidx);
	for (r = bt_seek(t->index, &c, k.b, k.len); has_prefix(r, &k); r = bt_next(&c)) {
		if ((unsigned)n < max)
			epochs[n] = be64(r->key + k.len);
		n++;
	}
	return n;
}

/* ---- enumeration ------------------------------------------------------------ */

/*
 * Does the akey whose records start at r (prefix apfx) hold something
 * visible at epoch, given punches above it hide versions <= bar?
 */
static bool akey_visible(struct eng_target *t, const struct kb *apfx, lode_epoch_t epoch,
			 lode_epoch_t bar)
{
	struct kb k = *apfx;
	struct bt_cur c;
	struct rec *r;

	kb_u64(&k, ~epoch);
	for (r = bt_seek(t->index, &c, k.b, k.len); has_prefix(r, apfx); r = bt_next(&c)) {
		if (r->klen < apfx->len + 8 || rec_epoch_at(r, apfx->len) <= bar)
			return false;
		if (r->type == REC_PUNCH)
			return false;
		if (r->type == REC_SV || r->type == REC_ARR)
			return true;
	}
	return false;
}

/* Length of the dkey (pos at its u16 length) of a record, or 0 for object-level records. */
static uint32_t field_len(const struct rec *r, uint32_t pos)
{
	return r->klen >= pos + 2 ? be16(r->key + pos) : 0;
}

/* Is any akey under the dkey prefix dpfx (cidx|oid|dkey) visible? */
static bool dkey_visible(struct eng_target *t, uint32_t cidx, struct lode_oid oid,
			 const struct kb *dpfx, lode_epoch_t epoch)
{
	uint32_t dlen = be16(dpfx->b + OBJ_PFX);
	lode_epoch_t bar;
	struct kb k = *dpfx;
	struct bt_cur c;
	struct rec *r;

	if (epoch == ENG_EPOCH_ANY)
		return true; /* listed because a record has this prefix */
	bar = punch_barrier(t, cidx, oid, dpfx->b + OBJ_PFX + 2, dlen, epoch);
	kb_u16(&k, 1); /* skip the dkey punch records (akey length 0) */
	for (r = bt_seek(t->index, &c, k.b, k.len); has_prefix(r, dpfx);) {
		struct kb a;
		uint32_t alen = field_len(r, dpfx->len);

		a.len = dpfx->len + 2 + alen;
		memcpy(a.b, r->key, a.len);
		if (akey_visible(t, &a, epoch, bar))
			return true;
		kb_skip(&a);
		r = bt_seek(t->index, &c, a.b, a.len);
	}
	return false;
}

static bool obj_visible(struct eng_target *t, uint32_t cidx, struct lode_oid oid,
			lode_epoch_t epoch)
{
	struct kb k, d;
	struct bt_cur c;
	struct rec *r;

	kb_obj(&k, cidx, oid);
	if (epoch == ENG_EPOCH_ANY) {
		/* Any record: an object that holds only its punches too. */
		r = bt_seek(t->index, &c, k.b, k.len);
		return has_prefix(r, &k);
	}
	d = k;
	kb_u16(&d, 1);
	for (r = bt_seek(t->index, &c, d.b, d.len); has_prefix(r, &k);) {
		d.len = OBJ_PFX + 2 + field_len(r, OBJ_PFX);
		memcpy(d.b, r->key, d.len);
		if (dkey_visible(t, cidx, oid, &d, epoch))
			return true;
		kb_skip(&d);
		r = bt_seek(t->index, &c, d.b, d.len);
	}
	return false;
}

/*
 * An anchor holds the last entry done, without the prefix the call rebuilds
 * from its arguments: an object id, or a dkey or akey with its length. The
 * walk resumes just past every record of that entry.
 */
static struct rec *anchor_seek(struct eng_target *t, struct bt_cur *c, const struct kb *pfx,
			       const struct eng_anchor *a, bool skip_level)
{
	struct kb k = *pfx;

	if (a->len == 0 || a->len > sizeof(a->key)) {
		if (skip_level)
			kb_u16(&k, 1); /* skip records of the level itself (punches) */
		return bt_seek(t->index, c, k.b, k.len);
	}
	memcpy(k.b + k.len, a->key, a->len);
	k.len += a->len;
	kb_skip(&k);
	return bt_seek(t->index, c, k.b, k.len);
}

static void anchor_set(struct eng_anchor *a, const struct kb *pfx, const struct kb *entry)
{
	a->len = (uint16_t)(entry->len - pfx->len);
	memcpy(a->key, entry->b + pfx->len, a->len);
}

int eng_obj_list(struct eng_target *t, const struct lode_uuid *cont, lode_epoch_t epoch,
		 struct eng_anchor *anchor, struct lode_oid *oids, unsigned max)
{
	struct kb pfx, k;
	struct bt_cur c;
	struct rec *r;
	uint32_t cidx;
	unsigned n = 0;
	int rc;

	if (!t || !cont || !anchor || !oids)
		return -EFAULT;
	rc = cont_find(t, cont, &cidx);
	if (rc < 0)
		return rc;
	if (anchor->eof)
		return 0;
	pfx.len = 0;
	kb_u32(&pfx, cidx);
	r = anchor_seek(t, &c, &pfx, anchor, false);
	while (has_prefix(r, &pfx)) {
		struct lode_oid oid = {be64(r->key + 4), be64(r->key + 12)};

		if (obj_visible(t, cidx, oid, epoch)) {
			if (n == max)
				return (int)n; /* the anchor stays before this one */
			oids[n++] = oid;
		}
		/* Everything up to here is done, listed or not. */
		k.len = OBJ_PFX;
		memcpy(k.b, r->key, OBJ_PFX);
		anchor_set(anchor, &pfx, &k);
		kb_skip(&k);
		r = bt_seek(t->index, &c, k.b, k.len);
	}
	anchor->eof = 1;
	return (int)n;
}

/* Pack one key into the caller's buffer: [u16 LE length][bytes]. */
static bool pack_key(uint8_t *buf, size_t buf_len, size_t *used, const uint8_t *key, uint16_t len)
{
	if (*used + 2 + len > buf_len)
		return false;
	buf[*used] = (uint8_t)len;
	buf[*used + 1] = (uint8_t)(len >> 8);
	memcpy(buf + *used + 2, key, len);
	*used += 2u + len;
	return true;
}

/*
 * The one walk behind dkey and akey listing: entries are the level's keys
 * under pfx; visible(ctx, entry prefix) says which to list.
 */
typedef bool (*vis_fn)(struct eng_target *t, void *ctx, const struct kb *entry);

static int key_list(struct eng_target *t, const struct kb *pfx, struct eng_anchor *anchor,
		    uint8_t *buf, size_t buf_len, vis_fn vis, void *ctx)
{
	struct bt_cur c;
	struct rec *r;
	size_t used = 0;
	int n = 0;

	if (anchor->eof)
		return 0;
	r = anchor_seek(t, &c, pfx, anchor, true);
	while (has_prefix(r, pfx)) {
		struct kb e;
		uint32_t flen = field_len(r, pfx->len);

		e.len = pfx->len + 2 + flen;
		memcpy(e.b, r->key, e.len);
		if (vis(t, ctx, &e)) {
			if (!pack_key(buf, buf_len, &used, e.b + pfx->len + 2, (uint16_t)flen))
				return n ? n : -EOVERFLOW; /* the anchor stays before this one */
			n++;
		}
		anchor_set(anchor, pfx, &e);
		kb_skip(&e);
		r = bt_seek(t->index, &c, e.b, e.len);
	}
	anchor->eof = 1;
	return n;
}

struct vis_ctx {
	uint32_t cidx;
	struct lode_oid oid;
	lode_epoch_t epoch, bar;
};

static bool vis_dkey(struct eng_target *t, void *ctx, const struct kb *e)
{
	struct vis_ctx *v = ctx;

	return dkey_visible(t, v->cidx, v->oid, e, v->epoch);
}

static bool vis_akey(struct eng_target *t, void *ctx, const struct kb *e)
{
	struct vis_ctx *v = ctx;

	if (v->epoch == ENG_EPOCH_ANY)
		return true; /* listed because a record has this prefix */
	return akey_visible(t, e, v->epoch, v->bar);
}

int eng_dkey_list(struct eng_target *t, const struct eng_key *key, lode_epoch_t epoch,
		  struct eng_anchor *anchor, void *buf, size_t buf_len)
{
	struct vis_ctx v;
	struct kb pfx;
	int rc = validate_key(t, key, false, false, &v.cidx);

	if (rc < 0)
		return rc;
	if (!anchor || !buf)
		return -EFAULT;
	v.oid = key->oid;
	v.epoch = epoch;
	kb_obj(&pfx, v.cidx, key->oid);
	return key_list(t, &pfx, anchor, buf, buf_len, vis_dkey, &v);
}

int eng_akey_list(struct eng_target *t, const struct eng_key *key, lode_epoch_t epoch,
		  struct eng_anchor *anchor, void *buf, size_t buf_len)
{
	struct vis_ctx v;
	struct kb pfx;
	int rc = validate_key(t, key, true, false, &v.cidx);

	if (rc < 0)
		return rc;
	if (!anchor || !buf)
		return -EFAULT;
	v.oid = key->oid;
	v.epoch = epoch;
	v.bar = punch_barrier(t, v.cidx, key->oid, key->dkey, key->dkey_len, epoch);
	kb_obj(&pfx, v.cidx, key->oid);
	kb_str(&pfx, key->dkey, key->dkey_len);
	return key_list(t, &pfx, anchor, buf, buf_len, vis_akey, &v);
}

/* ---- aggregation ------------------------------------------------------------ */

static int mark_needed(void *ctx, const struct rec *r, uint64_t lo, uint64_t hi)
{
	*(bool *)ctx = true;
	return 0;
}

/*
 * Decide which versions of one akey (v[0..n), newest first, epoch at byte
 * plen of the key) stay: a version stays if some reader (a snapshot, hi, or
 * the latest) sees any byte of it, or if it is newer than hi; a punch stays
 * only while it hides an older version that stays.
 */
static int agg_akey(struct rec **v, size_t n, uint32_t plen, const lode_epoch_t *rd, unsigned nr,
		    lode_epoch_t hi, const lode_epoch_t *up, size_t nup, bool *keep)
{
	bool *need = calloc(n ? n : 1, sizeof(bool));
	struct gaps g = {0};
	bool older_data = false;
	int rc = 0;

	if (!need)
		return -ENOMEM;
	for (unsigned ri = 0; ri < nr && rc == 0; ri++) {
		lode_epoch_t r = rd[ri], bar = 0;

		for (size_t j = 0; j < nup; j++)
			if (up[j] <= r && up[j] > bar)
				bar = up[j];
		g.n = 0;
		rc = gaps_add(&g, 0, UINT64_MAX);
		for (size_t i = 0; i < n && rc == 0 && g.n; i++) {
			lode_epoch_t e = rec_epoch_at(v[i], plen);
			uint64_t a = 0, b = UINT64_MAX;

			if (e > r)
				continue;
			if (e <= bar)
				break;
			if (v[i]->type == REC_ARR || v[i]->type == REC_ARR_PUNCH) {
				a = v[i]->off;
				b = a + (v[i]->type == REC_ARR ? v[i]->len : v[i]->loc);
				if (b < a)
					b = UINT64_MAX;
			}
			rc = gaps_cover(&g, v[i], a, b, mark_needed, &need[i]);
		}
	}
	for (size_t i = n; i-- > 0;) {
		bool data = v[i]->type == REC_SV || v[i]->type == REC_ARR;

		if (rec_epoch_at(v[i], plen) > hi)
			keep[i] = true;
		else if (data)
			keep[i] = need[i];
		else
			keep[i] = need[i] && older_data;
		if (data && keep[i])
			older_data = true;
	}
	free(need);
	free(g.v);
	return rc;
}

/*
 * Merging, the first pass of aggregation. For each byte array, the versions
 * newer than the newest snapshot (and <= hi) are seen by no reader but hi
 * and the latest, so their combined view at hi can be written as fresh
 * extents at the newest of their epochs: every reader sees the same bytes,
 * and the second pass then finds the originals fully shadowed and frees them,
 * partly shadowed ones included. Runs only where it reduces the number of
 * extents or the bytes they hold; a version that fails its checksum is left
 * alone rather than copied.
 */
#define MERGE_MAX (1u << 20) /* longest extent merging writes */

struct merge {
	struct eng_target *t;
	const struct lode_uuid *cont;
	lode_epoch_t smax;  /* newest snapshot, 0 if none */
	void **bufs;        /* data of queued merged extents, freed after drain */
	size_t nbufs;
	int rc;             /* first hard error */
	bool stop;          /* out of space: merge nothing more */
};

struct frag {
	const struct rec *r;
	uint64_t lo, hi;
};

struct frags {
	struct frag *v;
	size_t n, cap;
};

/* Distinct records among the fragments (fragments of one record are adjacent in f until sorted). */
static size_t frags_records(const struct frags *f)
{
	size_t n = 0;

	for (size_t i = 0; i < f->n; i++) {
		size_t j;

		for (j = 0; j < i && f->v[j].r != f->v[i].r; j++)
			;
		n += j == i;
	}
	return n;
}

/* Whether every record that shows in f shows all of its bytes. */
static bool frags_all_whole(const struct frags *f)
{
	for (size_t i = 0; i < f->n; i++) {
		const struct rec *r = f->v[i].r;
		uint64_t seen = 0;

		if (r->type != REC_ARR)
			return false;
		for (size_t j = 0; j < f->n; j++)
			if (f->v[j].r == r)
				seen += f->v[j].hi - f->v[j].lo;
		if (seen != r->len)
			return false;
	}
	return true;
}

static int frag_add(void *ctx, const struct rec *r, uint64_t lo, uint64_t hi)
{
	struct frags *f = ctx;

	if (r->type != REC_ARR)
		return 0; /* a range punch stays a hole */
	if (array_room((void **)&f->v, &f->cap, f->n, sizeof(*f->v)) < 0)
		return -ENOMEM;
	f->v[f->n].r = r;
	f->v[f->n].lo = lo;
	f->v[f->n].hi = hi;
	f->n++;
	return 0;
}

static int frag_cmp(const void *a, const void *b)
{
	const struct frag *x = a, *y = b;

	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Copy array bytes [lo, hi) of r to dst, checked against r's checksums. */
static int extent_copy(struct eng_target *t, const struct rec *r, uint64_t lo, uint64_t hi,
		       uint8_t *dst)
{
	uint64_t xoff = lo - r->off, n = hi - lo;
	uint32_t ck = rec_csum_chunk(r);
	uint32_t c0 = (uint32_t)(xoff / ck);
	uint32_t c1 = (uint32_t)((xoff + n + ck - 1) / ck);
	uint64_t start = (uint64_t)c0 * ck;
	uint64_t end = (uint64_t)c1 * ck < r->len ? (uint64_t)c1 * ck : r->len;
	size_t blen = blocks_of(end - start) * ENG_BLOCK;
	uint8_t *buf;
	int rc = 0;

	if ((r->flags & REC_F_INLINE) || t->space.ram) {
		const uint8_t *d = (r->flags & REC_F_INLINE) ? r->key + r->klen : t->space.map + r->loc;

		if ((r->flags & REC_F_INLINE) ? eng_crc32c(0, d, r->len) != r->crc
					       : !chunks_ok(r, d + start, c0, c1))
			return -LODE_ECSUM;
		memcpy(dst, d + xoff, n);
		return 0;
	}
	if (posix_memalign((void **)&buf, ENG_BLOCK, blen) != 0)
		return -ENOMEM;
	if (pread(t->space.fd, buf, blen, (off_t)(r->loc + start)) != (ssize_t)blen)
		rc = -EIO;
	else if (!chunks_ok(r, buf, c0, c1))
		rc = -LODE_ECSUM;
	else
		memcpy(dst, buf + (xoff - start), n);
	free(buf);
	return rc;
}

static void merge_cb(void *arg, int rc)
{
	struct merge *m = arg;

	if (rc < 0 && rc != -ENOSPC && m->rc == 0)
		m->rc = rc;
}

/* Write one merged extent covering [lo, hi) of the view in f. */
static int merge_write(struct merge *m, const struct rec *any, uint32_t plen, lode_epoch_t e,
		       const struct frags *f, size_t from, uint64_t lo, uint64_t hi)
{
	struct eng_key k = {.cont = m->cont};
	uint32_t dlen = be16(any->key + OBJ_PFX);
	void **bufs = realloc(m->bufs, (m->nbufs + 1) * sizeof(*bufs));
	uint8_t *buf;
	int rc = 0;

	if (!bufs)
		return -ENOMEM;
	m->bufs = bufs;
	if (posix_memalign((void **)&buf, ENG_BLOCK, blocks_of(hi - lo) * ENG_BLOCK) != 0)
		return -ENOMEM;
	m->bufs[m->nbufs++] = buf;
	for (size_t i = from; i < f->n && f->v[i].lo < hi && rc == 0; i++) {
		uint64_t a = f->v[i].lo > lo ? f->v[i].lo : lo, b = f->v[i].hi < hi ? f->v[i].hi : hi;

		if (a < b)
			rc = extent_copy(m->t, f->v[i].r, a, b, buf + (a - lo));
	}
	if (rc < 0)
		return rc;
	k.oid.hi = be64(any->key + 4);
	k.oid.lo = be64(any->key + 12);
	k.dkey = any->key + OBJ_PFX + 2;
	k.dkey_len = dlen;
	k.akey = any->key + OBJ_PFX + 2 + dlen + 2;
	k.akey_len = plen - (OBJ_PFX + 2 + dlen + 2);
	return update(m->t, &k, e, REC_ARR, lo, buf, (uint32_t)(hi - lo), merge_cb, m);
}

static int merge_akey(struct merge *m, struct rec **v, size_t n, uint32_t plen, lode_epoch_t hi,
		      const lode_epoch_t *up, size_t nup)
{
	struct frags f = {0};
	struct gaps g = {0};
	lode_epoch_t bar = 0, emax = 0;
	uint64_t bytes = 0, visible = 0;
	size_t nm = 0, made = 0;
	int rc;

	if (m->stop || n < 2 || v[0]->type == REC_SV)
		return 0;
	for (size_t j = 0; j < nup; j++)
		if (up[j] <= hi && up[j] > bar)
			bar = up[j];
	rc = gaps_add(&g, 0, UINT64_MAX);
	for (size_t i = 0; i < n && rc == 0; i++) {
		lode_epoch_t e = rec_epoch_at(v[i], plen);

		if (e > hi)
			continue;
		if (e <= m->smax || e <= bar || v[i]->type == REC_PUNCH || v[i]->type == REC_SV)
			break;
		if (v[i]->type == REC_ARR) {
			nm++;
			bytes += v[i]->len;
			if (e > emax)
				emax = e;
		}
		if (g.n)
			rc = gaps_cover(&g, v[i], v[i]->off,
					v[i]->off + (v[i]->type == REC_ARR ? v[i]->len : v[i]->loc) < v[i]->off
						? UINT64_MAX
						: v[i]->off + (v[i]->type == REC_ARR ? v[i]->len : v[i]->loc),
					frag_add, &f);
	}
	free(g.v);
	if (rc < 0 || nm == 0) {
		free(f.v);
		return rc;
	}
	if (f.n > 1)
		qsort(f.v, f.n, sizeof(*f.v), frag_cmp);
	for (size_t i = 0, j; i < f.n; i = j) {
		for (j = i + 1; j < f.n && f.v[j].lo == f.v[j - 1].hi; j++)
			;
		made += (size_t)((f.v[j - 1].hi - f.v[i].lo + MERGE_MAX - 1) / MERGE_MAX);
		for (size_t x = i; x < j; x++)
			visible += f.v[x].hi - f.v[x].lo;
	}
	/* Worth it only if it leaves fewer extents or frees shadowed bytes. */
	if (made >= nm && visible == bytes) {
		free(f.v);
		return 0; /* nothing to gain */
	}
	/*
	 * Versions wholly shadowed go in the removing pass without any copy;
	 * merging pays only for versions partly shadowed (their visible part
	 * must move so the rest can be freed), or to leave fewer extents. When
	 * every version that shows is shown whole and no fewer extents would
	 * result, skip it (a block overwritten whole again and again).
	 */
	if (made >= frags_records(&f) && frags_all_whole(&f)) {
		free(f.v);
		return 0;
	}
	for (size_t i = 0; i < f.n && rc == 0;) {
		size_t j = i + 1;
		uint64_t lo = f.v[i].lo, end;

		while (j < f.n && f.v[j].lo == f.v[j - 1].hi)
			j++;
		end = f.v[j - 1].hi;
		for (uint64_t p = lo; p < end && rc == 0; p += MERGE_MAX) {
			uint64_t q = end - p < MERGE_MAX ? end : p + MERGE_MAX;

			rc = merge_write(m, v[0], plen, emax, &f, i, p, q);
		}
		i = j;
	}
	free(f.v);
	if (rc == -ENOSPC || rc == -LODE_ECSUM) {
		/* Optional work: without space, or with a damaged version,
		 * leave this akey as it is and let aggregation go on. */
		m->stop = rc == -ENOSPC;
		return 0;
	}
	return rc;
}

/* The records of one object, with what aggregation decided for each. */
struct agg_obj {
	struct rec **v;
	bool *keep;
	size_t n, cap;
	struct merge *m; /* set in the merging pass */
};

static int agg_collect(struct eng_target *t, struct agg_obj *a, struct rec *r, const struct kb *opfx,
		       struct bt_cur *c)
{
	a->n = 0;
	for (; has_prefix(r, opfx); r = bt_next(c)) {
		if (a->n == a->cap) {
			size_t cap = a->cap ? a->cap * 2 : 256;
			struct rec **v = realloc(a->v, cap * sizeof(*v));
			bool *k = v ? realloc(a->keep, cap * sizeof(*k)) : NULL;

			if (v)
				a->v = v;
			if (!k)
				return -ENOMEM;
			a->keep = k;
			a->cap = cap;
		}
		a->keep[a->n] = true;
		a->v[a->n++] = r;
	}
	return 0;
}

/* Do a and b share their first n key bytes? */
static bool same_pfx(const struct rec *a, const struct rec *b, uint32_t n)
{
	return a->klen >= n && b->klen >= n && memcmp(a->key, b->key, n) == 0;
}

/* Decide for one object; a->keep[i] false means remove. */
static int agg_decide(struct agg_obj *a, const lode_epoch_t *rd, unsigned nr, lode_epoch_t hi)
{
	lode_epoch_t up[2048];
	size_t nobj = 0, i = 0, nup;
	lode_epoch_t obj_min = UINT64_MAX;
	int rc;

	/* object punches come first (dkey length 0) */
	while (i < a->n && a->v[i]->klen >= OBJ_PFX + 2 && be16(a->v[i]->key + OBJ_PFX) == 0) {
		if (nobj < sizeof(up) / sizeof(up[0]))
			up[nobj++] = rec_epoch_at(a->v[i], OBJ_PFX + 2);
		i++;
	}
	size_t obj_punch_end = i;

	while (i < a->n) {
		if (a->v[i]->klen < OBJ_PFX + 2 + 1 + 2 + 8) { /* not an object's record */
			i++;
			continue;
		}
		uint32_t dlen = be16(a->v[i]->key + OBJ_PFX);
		uint32_t apos = OBJ_PFX + 2 + dlen;
		size_t dstart = i, dpunch_end;
		lode_epoch_t dkey_min = UINT64_MAX;

		nup = nobj;
		while (i < a->n && a->v[i]->klen >= apos + 2 + 8 && same_pfx(a->v[i], a->v[dstart], apos) &&
		       be16(a->v[i]->key + apos) == 0) {
			if (nup < sizeof(up) / sizeof(up[0]))
				up[nup++] = rec_epoch_at(a->v[i], apos + 2);
			i++;
		}
		dpunch_end = i;
		while (i < a->n && a->v[i]->klen >= apos + 2 && same_pfx(a->v[i], a->v[dstart], apos)) {
			uint32_t plen = apos + 2 + be16(a->v[i]->key + apos);
			size_t s = i;

			while (i < a->n && a->v[i]->klen >= plen + 8 && same_pfx(a->v[i], a->v[s], plen))
				i++;
			rc = a->m ? merge_akey(a->m, a->v + s, i - s, plen, hi, up, nup)
				  : agg_akey(a->v + s, i - s, plen, rd, nr, hi, up, nup, a->keep + s);
			if (rc < 0)
				return rc;
			for (size_t j = s; j < i; j++) {
				lode_epoch_t e = rec_epoch_at(a->v[j], plen);

				if (a->keep[j] && (a->v[j]->type == REC_SV || a->v[j]->type == REC_ARR) &&
				    e < dkey_min)
					dkey_min = e;
			}
			if (i == s) /* malformed key: keep it and move on */
				i++;
		}
		/* a dkey punch stays while it hides a version that stays */
		for (size_t j = dstart; j < dpunch_end; j++) {
			lode_epoch_t p = rec_epoch_at(a->v[j], apos + 2);

			a->keep[j] = p > hi || dkey_min <= p;
		}
		if (dkey_min < obj_min)
			obj_min = dkey_min;
	}
	for (size_t j = 0; j < obj_punch_end; j++) {
		lode_epoch_t p = rec_epoch_at(a->v[j], OBJ_PFX + 2);

		a->keep[j] = p > hi || obj_min <= p;
	}
	return 0;
}

/* One pass of aggregation over a container's objects. */
struct agg_pass {
	struct eng_target *t;
	struct agg_obj *a;
	const lode_epoch_t *rd; /* readers (the removal pass) */
	unsigned nr;
	lode_epoch_t hi;
	struct op *bulk;        /* the removal pass: where removed records go */
};

/*
 * Collect each object's records, decide, and in the removal pass take out
 * (and log the deletion of) what goes. The cursor seeks afresh after each
 * object: the removal pass changes the index, and the merging pass only
 * queues writes, which reach the index at drain().
 */
static int agg_walk(struct agg_pass *p, uint32_t cidx)
{
	struct eng_target *t = p->t;
	struct agg_obj *a = p->a;
	struct kb pfx, opfx;
	struct bt_cur c;
	struct rec *r;
	int rc = 0;

	pfx.len = 0;
	kb_u32(&pfx, cidx);
	r = bt_seek(t->index, &c, pfx.b, pfx.len);
	while (rc == 0 && has_prefix(r, &pfx)) {
		opfx.len = OBJ_PFX;
		memcpy(opfx.b, r->key, OBJ_PFX);
		rc = agg_collect(t, a, r, &opfx, &c);
		if (rc == 0)
			rc = agg_decide(a, p->rd, p->nr, p->hi);
		for (size_t i = 0; rc == 0 && p->bulk && i < a->n; i++) {
			struct op *o = p->bulk;

			if (a->keep[i])
				continue;
			rc = array_room((void **)&o->bulk, &o->bulk_cap, o->nbulk, sizeof(*o->bulk));
			if (rc == 0)
				rc = wal_put_key(&t->wal, t->gen, ++t->seq, WAL_DELETE, a->v[i]->key,
						 a->v[i]->klen);
			if (rc == 0)
				o->bulk[o->nbulk++] = index_take(t, a->v[i]->key, a->v[i]->klen);
		}
		kb_skip(&opfx);
		r = bt_seek(t->index, &c, opfx.b, opfx.len);
	}
	return rc;
}

/* The merging pass over every object of the container; waits for its writes. */
static int agg_merge(struct eng_target *t, const struct lode_uuid *cont, uint32_t cidx,
		     struct agg_obj *a, const lode_epoch_t *snaps, unsigned nsnap, lode_epoch_t hi)
{
	struct merge m = {.t = t, .cont = cont};
	struct agg_pass p = {.t = t, .a = a, .hi = hi};
	int rc, drc;

	for (unsigned i = 0; i < nsnap; i++)
		if (snaps[i] > m.smax)
			m.smax = snaps[i];
	a->m = &m;
	rc = agg_walk(&p, cidx);
	a->m = NULL;
	drc = drain(t);
	for (size_t i = 0; i < m.nbufs; i++)
		free(m.bufs[i]);
	free(m.bufs);
	return rc < 0 ? rc : drc < 0 ? drc : m.rc;
}

int eng_aggregate(struct eng_target *t, const struct lode_uuid *cont, lode_epoch_t hi)
{
	struct agg_obj a = {0};
	lode_epoch_t *rd = NULL;
	struct op *o;
	uint32_t cidx;
	size_t before;
	int nsnap, rc;

	if (!t || !cont)
		return -EFAULT;
	rc = cont_find(t, cont, &cidx);
	if (rc < 0)
		return rc;
	if (t->failed)
		return -LODE_EBADTGT;
	if (hi == 0)
		return -EINVAL;
	rc = drain(t);
	if (rc < 0)
		return rc;
	nsnap = eng_snap_list(t, cont, NULL, 0);
	rd = malloc((size_t)(nsnap + 2) * sizeof(*rd));
	o = calloc(1, sizeof(*o));
	if (!rd || !o) {
		free(rd);
		free(o);
		return -ENOMEM;
	}
	eng_snap_list(t, cont, rd, (unsigned)nsnap);
	rd[nsnap] = hi;
	rd[nsnap + 1] = LODE_EPOCH_MAX;
	rc = agg_merge(t, cont, cidx, &a, rd, (unsigned)nsnap, hi);
	if (rc < 0) {
		free(a.v);
		free(a.keep);
		free(rd);
		free(o);
		return rc;
	}
	before = t->wal.len;
	{
		struct agg_pass p = {.t = t, .a = &a, .rd = rd, .nr = (unsigned)nsnap + 2, .hi = hi,
				     .bulk = o};

		rc = agg_walk(&p, cidx);
	}
	free(a.v);
	free(a.keep);
	free(rd);
	if (rc < 0) {
		/* Records already taken out are logged as deleted in the open
		 * group; finish that group so the log and the index agree. */
		bulk_run(t, o, before);
		return rc;
	}
	if (o->nbulk == 0) {
		free(o->bulk);
		free(o);
		return 0;
	}
	return bulk_run(t, o, before);
}

/* ---- open, replay, close ------------------------------------------------------ */

static int path_in(const struct eng_target *t, char *buf, size_t len, const char *name)
{
	return (size_t)snprintf(buf, len, "%s/%s", t->path, name) >= len ? -ENAMETOOLONG : 0;
}

/* Insert during recovery; takes r, also on failure. */
static int recover_put(struct eng_target *t, struct rec *r)
{
	int rc;

	if ((r->type == REC_ARR || r->type == REC_ARR_PUNCH) && r->klen >= 8) {
		/* Stored inverted after the epoch, as the epoch is. */
		uint64_t n = rec_epoch_at(r, r->klen - 8);

		/* A number near the top (only a forged record has one) is not
		 * followed: the counter must not wrap. */
		if (n > t->key_seq && n < UINT64_MAX / 2)
			t->key_seq = n;
	}
	rc = index_put_as(t, r, false);

	if (rc < 0)
		free(r);
	return rc;
}

static void recover_drop_prefix(struct eng_target *t, const uint8_t *p, uint16_t len)
{
	struct bt_cur c;
	struct rec *r;

	for (;;) {
		r = bt_seek(t->index, &c, p, len);
		if (!r || r->klen < len || memcmp(r->key, p, len) != 0)
			return;
		free(index_take(t, r->key, r->klen));
	}
}

static int map_file(const char *path, uint8_t **map, size_t *len)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	*map = NULL;
	*len = 0;
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	if (fstat(fd, &st) < 0) {
		close(fd);
		return -errno;
	}
	*len = (size_t)st.st_size;
	if (*len) {
		*map = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
		if (*map == MAP_FAILED) {
			*map = NULL;
			close(fd);
			return -errno;
		}
	}
	close(fd);
	return 0;
}

static int ckpt_load_one(void *ctx, struct rec *r)
{
	if (!rec_valid(r)) {
		free(r);
		return -LODE_ECORRUPT;
	}
	return recover_put(ctx, r);
}

static int load_ckpt(struct eng_target *t, uint32_t *gen)
{
	char path[4200];
	uint8_t *m;
	size_t len, off = 64;
	uint64_t magic, seq, cnt, n = 0;
	uint32_t crc;
	int rc = path_in(t, path, sizeof(path), "ckpt");

	*gen = 1;
	if (rc == 0)
		rc = map_file(path, &m, &len);
	if (rc < 0 || !m)
		return rc;
	if (len < 64)
		goto corrupt;
	memcpy(&magic, m, 8);
	memcpy(gen, m + 8, 4);
	memcpy(&seq, m + 12, 8);
	memcpy(&cnt, m + 20, 8);
	memcpy(&crc, m + 60, 4);
	if (le64toh(magic) != CKPT_MAGIC || le32toh(crc) != eng_crc32c(0, m, 60))
		goto corrupt;
	*gen = le32toh(*gen);
	t->seq = le64toh(seq);
	while (off < len && n < le64toh(cnt)) {
		size_t used;

		rc = ckpt_block_decode(m + off, len - off, &used, ckpt_load_one, t);
		if (rc < 0)
			goto out;
		n += (uint64_t)rc;
		off += used;
	}
	rc = 0;
	if (n != le64toh(cnt))
		goto corrupt;
	goto out;
corrupt:
	rc = -LODE_ECORRUPT;
out:
	munmap(m, len);
	return rc;
}

/* Does the extent data of r on media match its checksums? */
static bool extent_intact(struct eng_target *t, const struct rec *r)
{
	size_t blen = blocks_of(r->len) * ENG_BLOCK;
	uint8_t *buf;
	bool ok;

	if (r->loc % ENG_BLOCK || r->loc + blen > t->space.size || r->loc + blen < r->loc)
		return false;
	if (t->space.ram)
		return chunks_ok(r, t->space.map + r->loc, 0, rec_nchunks(r));
	if (posix_memalign((void **)&buf, ENG_BLOCK, blen) != 0)
		return false;
	ok = pread(t->space.fd, buf, blen, (off_t)r->loc) == (ssize_t)blen &&
	     chunks_ok(r, buf, 0, rec_nchunks(r));
	free(buf);
	return ok;
}

/*
 * Replay the log over the checkpoint. Records of generation gen come first;
 * a later (higher) generation may follow where an earlier open started one;
 * anything else, a torn record, or zeros is the end.
 */
static int replay(struct eng_target *t, uint32_t gen, uint32_t *max_gen)
{
	char path[4200];
	uint8_t *m;
	size_t len, off = 0, end;
	uint64_t mark = 0;
	uint32_t g = gen;
	int rc = path_in(t, path, sizeof(path), "wal");

	*max_gen = gen;
	if (rc == 0)
		rc = map_file(path, &m, &len);
	if (rc < 0 || !m)
		return rc;
	/* pass 1: where the log ends and the highest acknowledged seq */
	while (off < len) {
		struct wal_view v;

		if (wal_decode(m + off, len - off, &v) < 0 || v.gen < g)
			break;
		g = v.gen;
		if (v.op == WAL_MARK && v.mark > mark)
			mark = v.mark;
		off += v.len;
	}
	end = off;
	*max_gen = g;
	/* pass 2: apply */
	for (off = 0; off < end;) {
		struct wal_view v;
		struct rec *r;

		wal_decode(m + off, end - off, &v);
		off += v.len;
		if (v.seq > t->seq)
			t->seq = v.seq;
		switch (v.op) {
		case WAL_INSERT:
			r = wal_view_rec(&v);
			if (!r) {
				rc = -ENOMEM;
				goto out;
			}
			if (!rec_valid(r)) {
				free(r);
				rc = -LODE_ECORRUPT;
				goto out;
			}
			/* Above the mark, the group may not have finished its
			 * flush: keep the record only if its data is whole. */
			if (v.seq > mark && rec_has_extent(r) && !extent_intact(t, r)) {
				free(r);
				break;
			}
			rc = recover_put(t, r);
			if (rc < 0)
				goto out;
			break;
		case WAL_DELETE:
			free(index_take(t, v.key, v.klen));
			break;
		case WAL_DELPFX:
			recover_drop_prefix(t, v.key, v.klen);
			break;
		default:
			break;
		}
	}
	t->wal_off = end;
	t->acked_seq = t->seq;
out:
	munmap(m, len);
	return rc;
}

/* The highest log generation ever used lives in genhw, so a new one is new. */
static int gen_bump(struct eng_target *t, uint32_t seen)
{
	char path[4200];
	uint32_t buf[2] = {0, 0}, hw = 0;
	int fd, rc = path_in(t, path, sizeof(path), "genhw");

	if (rc < 0)
		return rc;
	bool created = access(path, F_OK) != 0;

	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (pread(fd, buf, sizeof(buf), 0) == sizeof(buf) && buf[1] == eng_crc32c(0, buf, 4))
		hw = buf[0];
	t->gen = (hw > seen ? hw : seen) + 1;
	buf[0] = t->gen;
	buf[1] = eng_crc32c(0, buf, 4);
	rc = write_full(fd, buf, sizeof(buf), 0);
	if (rc == 0 && t->mode == ENG_MODE_DISK && fdatasync(fd) < 0)
		rc = -errno;
	close(fd);
	if (rc == 0 && created)
		rc = sync_dir(t); /* the generation rule needs the file to survive */
	return rc;
}

static uint64_t default_wal_size(const char *dir)
{
	struct statvfs vfs;
	uint64_t sz = 64ull << 20;

	if (statvfs(dir, &vfs) == 0) {
		uint64_t free_b = (uint64_t)vfs.f_bavail * vfs.f_frsize / 8;

		if (free_b < sz)
			sz = free_b;
	}
	if (sz < (4ull << 20))
		sz = 4ull << 20;
	return sz / ENG_BLOCK * ENG_BLOCK;
}

/*
 * The log file is allocated whole when created, zero-filled on disk so that
 * later writes overwrite allocated blocks and fdatasync flushes data only.
 */
static int wal_open(struct eng_target *t, uint64_t want)
{
	char path[4200];
	struct stat st;
	int rc = path_in(t, path, sizeof(path), "wal");

	if (rc < 0)
		return rc;
	t->wal_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (t->wal_fd < 0)
		return -errno;
	if (fstat(t->wal_fd, &st) < 0)
		return -errno;
	if (st.st_size >= (off_t)(1u << 20)) {
		t->wal_size = (uint64_t)st.st_size;
		return 0;
	}
	/* Smaller than any log we make: its creation never finished, so no
	 * record was ever written to it. Start it over. */
	if (ftruncate(t->wal_fd, 0) < 0)
		return -errno;
	t->wal_size = want ? want / ENG_BLOCK * ENG_BLOCK : default_wal_size(t->path);
	if (t->wal_size < (1u << 20))
		t->wal_size = 1u << 20;
	if (t->mode == ENG_MODE_RAM) {
		if (fallocate(t->wal_fd, 0, 0, (off_t)t->wal_size) < 0)
			rc = -errno;
	} else {
		void *z = calloc(1, 1u << 20);

		if (!z)
			return -ENOMEM;
		for (uint64_t off = 0; rc == 0 && off < t->wal_size; off += 1u << 20)
			rc = write_full(t->wal_fd, z, t->wal_size - off < (1u << 20) ? t->wal_size - off : 1u << 20,
					(off_t)off);
		free(z);
		if (rc == 0 && fdatasync(t->wal_fd) < 0)
			rc = -errno;
	}
	if (rc < 0) {
		/* leave no half-made log behind: the next open tries again */
		if (ftruncate(t->wal_fd, 0) < 0)
			rc = rc ? rc : -errno;
		return rc == -EDQUOT ? -ENOSPC : rc;
	}
	return sync_dir(t);
}

/* Rebuild what is derived from the index: block bitmap, containers. */
static int rebuild(struct eng_target *t)
{
	struct bt_cur c;
	struct rec *r;
	struct kb k;
	int rc;

	for (r = bt_first(t->index, &c); r; r = bt_next(&c))
		if (rec_has_extent(r) && (rc = space_mark(&t->space, r->loc, blocks_of(r->len))) < 0)
			return rc;
	k.len = 0;
	kb_u32(&k, 0);
	k.b[k.len++] = 'C';
	for (r = bt_seek(t->index, &c, k.b, k.len); has_prefix(r, &k); r = bt_next(&c)) {
		struct lode_uuid u;

		if (r->klen != 5 + sizeof(u) || r->off == 0 || r->off > UINT32_MAX)
			return -LODE_ECORRUPT;
		memcpy(&u, r->key + 5, sizeof(u));
		if ((rc = cont_add(t, &u, (uint32_t)r->off)) < 0)
			return rc;
	}
	return 0;
}

static int ring_setup(struct eng_target *t, unsigned qd)
{
	struct iovec iov;
	/* A group commit takes 3 entries at once (get_sqes). */
	int rc = io_uring_queue_init(qd == 0 ? 256 : qd < 4 ? 4 : qd, &t->ring, 0);

	if (rc < 0)
		return rc;
	t->have_ring = true;
	if (arena_init(&t->arena, ARENA_SIZE) == 0) {
		iov.iov_base = t->arena.base;
		iov.iov_len = t->arena.size;
		/* Registration can fail under a low memlock limit; the buffers
		 * then work unregistered. */
		t->arena_registered = io_uring_register_buffers(&t->ring, &iov, 1) == 0;
	}
	t->io_ext_sync.kind = IO_EXT_SYNC;
	t->io_wal_write.kind = IO_WAL_WRITE;
	t->io_wal_sync.kind = IO_WAL_SYNC;
	return 0;
}

static void tgt_free(struct eng_target *t)
{
	if (t->have_ring)
		io_uring_queue_exit(&t->ring);
	arena_fini(&t->arena);
	free(t->resv);
	newest_free(&t->newest);
	if (t->index)
		bt_destroy(t->index, free);
	space_close(&t->space);
	if (t->wal_fd >= 0)
		close(t->wal_fd);
	if (t->dir_fd >= 0)
		close(t->dir_fd);
	if (t->lock_fd >= 0)
		close(t->lock_fd);
	wbuf_free(&t->wal);
	wbuf_free(&t->mark);
	free(t->conts);
	free(t->held);
	free(t->path);
	free(t);
}

/*
 * The target's format, in the file `format` ("2\n"): 2 since records may
 * carry REC_F_CSUM_BLOCK (docs/decisions/0013); no file, an earlier one.
 * A newer format than this build knows is refused before anything is read,
 * so that a build never replays a log it cannot decode; an older one is
 * marked current, since this build writes the new records from now on.
 */
#define ENG_FORMAT 2

static int format_check(struct eng_target *t)
{
	char path[4200], tmp[4200], text[16] = {0};
	unsigned long v = 1;
	int fd, rc;

	if ((rc = path_in(t, path, sizeof(path), "format")) < 0 ||
	    (rc = path_in(t, tmp, sizeof(tmp), "format.tmp")) < 0)
		return rc;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
		ssize_t n = read(fd, text, sizeof(text) - 1);
		char *end;

		close(fd);
		v = n > 0 ? strtoul(text, &end, 10) : 0;
		if (n <= 0 || end == text || (*end && *end != '\n') || v == 0)
			return -LODE_ECORRUPT;
		if (v > ENG_FORMAT)
			return -EPROTONOSUPPORT;
		if (v == ENG_FORMAT)
			return 0;
	} else if (errno != ENOENT) {
		return -errno;
	}
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0)
		return -errno;
	snprintf(text, sizeof(text), "%d\n", ENG_FORMAT);
	rc = write(fd, text, strlen(text)) == (ssize_t)strlen(text) && fsync(fd) == 0 ? 0 : -EIO;
	close(fd);
	if (rc == 0 && (rename(tmp, path) < 0 || fsync(t->dir_fd) < 0))
		rc = -errno;
	return rc;
}

int eng_tgt_open(const struct eng_tgt_opts *opts, struct eng_target **out)
{
	struct eng_target *t;
	char path[4200];
	uint32_t gen, max_gen;
	int rc;

	if (!opts || !opts->path || !out)
		return -EFAULT;
	if (opts->mode != ENG_MODE_DISK && opts->mode != ENG_MODE_RAM)
		return -EINVAL;
	if (mkdir(opts->path, 0700) < 0 && errno != EEXIST)
		return -errno;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->lock_fd = t->wal_fd = t->dir_fd = -1;
	t->space.fd = -1;
	t->next_cidx = 1; /* 0 is the keyspace of containers and snapshots */
	t->mode = opts->mode;
	t->inline_max = opts->inline_max ? opts->inline_max : 64;
	t->path = strdup(opts->path);
	rc = t->path ? 0 : -ENOMEM;
	if (rc == 0)
		rc = path_in(t, path, sizeof(path), "lock");
	if (rc < 0)
		goto fail;
	/* One process per target: a second open would corrupt the log. */
	t->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (t->lock_fd < 0 || flock(t->lock_fd, LOCK_EX | LOCK_NB) < 0) {
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		goto fail;
	}
	t->dir_fd = open(opts->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (t->dir_fd < 0) {
		rc = -errno;
		goto fail;
	}
	rc = format_check(t);
	if (rc == 0)
		rc = bt_create(rec_key_of, &t->index);
	if (rc == 0)
		rc = space_open(&t->space, opts->path, opts->mode == ENG_MODE_RAM,
				opts->capacity ? opts->capacity : 1ull << 30);
	if (rc == 0)
		rc = load_ckpt(t, &gen);
	if (rc == 0)
		rc = wal_open(t, opts->wal_size);
	if (rc == 0)
		rc = replay(t, gen, &max_gen);
	if (rc == 0)
		rc = rebuild(t);
	if (rc == 0)
		rc = gen_bump(t, max_gen);
	if (rc == 0 && opts->mode == ENG_MODE_DISK)
		rc = ring_setup(t, opts->queue_depth);
	/* RAM mode has no ring, but a server still wants reusable I/O buffers:
	 * fresh large allocations would fault in every page of every request. */
	if (rc == 0 && opts->mode == ENG_MODE_RAM && arena_init(&t->arena, ARENA_SIZE) != 0)
		t->arena.base = NULL;
	if (rc < 0)
		goto fail;
	*out = t;
	return 0;
fail:
	tgt_free(t);
	return rc;
}

int eng_tgt_close(struct eng_target *t)
{
	int rc;

	if (!t)
		return -EFAULT;
	rc = drain(t);
	/* A last mark records that everything logged was acknowledged. */
	if (rc == 0 && !t->failed && t->acked_seq) {
		struct wbuf m = {0};

		if (wal_put_mark(&m, t->gen, t->seq, t->acked_seq) == 0 &&
		    t->wal_off + m.len <= t->wal_size) {
			rc = write_full(t->wal_fd, m.p, m.len, (off_t)t->wal_off);
			if (rc == 0 && t->mode == ENG_MODE_DISK && fdatasync(t->wal_fd) < 0)
				rc = -errno;
		}
		wbuf_free(&m);
	}
	tgt_free(t);
	return rc;
}

int eng_tgt_stats(struct eng_target *t, struct eng_stats *st)
{
	if (!t || !st)
		return -EFAULT;
	*st = t->st;
	st->records = bt_count(t->index);
	st->index_bytes = bt_bytes(t->index) + t->rec_bytes + newest_bytes(&t->newest);
	st->extent_used = t->space.used * ENG_BLOCK;
	st->extent_cap = t->space.cap;
	st->direct_io = t->space.direct;
	st->registered_bufs = t->arena_registered;
	st->wal_used = t->wal_off;
	return 0;
}

void *eng_buf_alloc(struct eng_target *t, size_t size)
{
	void *p;

	if (!t || size == 0)
		return NULL;
	size = blocks_of(size) * ENG_BLOCK;
	p = t->arena.base ? arena_alloc(&t->arena, size) : NULL;
	if (!p && posix_memalign(&p, ENG_BLOCK, size) != 0)
		return NULL;
	return p;
}

void eng_buf_free(struct eng_target *t, void *buf)
{
	int i;

	if (!t || !buf)
		return;
	if ((i = resv_find(t, buf)) >= 0) {
		space_free(&t->space, t->resv[i].loc, t->resv[i].nblk);
		t->resv[i] = t->resv[--t->nresv];
		return;
	}
	io_buf_free(t, buf);
}

void eng_buf_region(struct eng_target *t, void **base, size_t *len)
{
	bool have = t && t->arena.base;

	*base = have ? t->arena.base : NULL;
	*len = have ? t->arena.size : 0;
}
