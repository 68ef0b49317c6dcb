/*
 * libFuzzer target: opening a target replays its log, so a damaged log is
 * input too. Each run writes the fuzzer's bytes as the log of a fresh
 * RAM-mode target (framed as valid records where the input asks for it, so
 * the fuzzer reaches replay's logic and not only the checksum test) and
 * opens it: open must succeed or fail with an error, never crash or leak.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/eng_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];
static const char *const files[] = {"wal", "extents", "ckpt", "ckpt.tmp", "genhw", "lock"};

static void remove_files(void)
{
	char path[128];

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		unlink(path);
	}
}

/* libFuzzer ends with exit(): leave nothing on tmpfs behind. */
static void cleanup(void)
{
	remove_files();
	rmdir(dir);
}

static void put_file(const char *name, const void *p, size_t n)
{
	char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f)
		abort();
	if (n && fwrite(p, 1, n, f) != n)
		abort();
	fclose(f);
}

/*
 * Turn the input into log records: each chunk is [u8 op][u8 len][len bytes
 * of payload]; a record with a correct checksum and generation 1 is built
 * around each payload, so replay sees well-formed frames with hostile
 * contents.
 */
static void frame(const uint8_t *d, size_t n, struct wbuf *out)
{
	uint64_t seq = 0;
	struct rec *c = rec_alloc(21, 0);

	/* container 1, so the records below have somewhere to live */
	if (!c)
		abort();
	c->type = REC_CONT;
	c->off = 1;
	c->key[4] = 'C';
	c->key[5] = 0x42;
	wal_put_insert(out, 1, ++seq, c);
	free(c);

	while (n >= 2) {
		uint8_t op = d[0] % 5, len = d[1];
		const uint8_t *p = d + 2;

		if ((size_t)len + 2 > n)
			len = (uint8_t)(n - 2);
		if (op == WAL_INSERT && len >= 28 + 2) {
			struct wal_view v = {0};
			uint8_t buf[512] = {0}, kb[64];
			size_t tl;
			struct rec *r;

			v.type = (uint8_t)(p[0] % (REC_TYPE_MAX + 1));
			v.flags = p[1] & REC_F_INLINE;
			memcpy(&v.dlen, p + 4, 4);
			v.dlen %= 200000;
			memcpy(&v.crc, p + 8, 4);
			memcpy(&v.loc, p + 12, 8);
			memcpy(&v.off, p + 20, 8);
			v.klen = (uint16_t)(len - 28);
			v.key = p + 28;
			/* Most of the time, a key that follows the engine's grammar,
			 * so replay's logic is reached and not only its checks. */
			if (p[2] % 4 != 0) {
				uint8_t dl = (uint8_t)(1 + p[3] % 3), al = (uint8_t)(1 + p[3] / 3 % 3);
				size_t o = 0;

				memset(kb, 0, sizeof(kb));
				kb[3] = 1; /* container index 1 */
				kb[4 + 15] = p[28] % 4; /* a few object ids */
				o = 20;
				kb[o++] = 0;
				kb[o++] = dl;
				memset(kb + o, 'a' + p[28] / 4 % 3, dl);
				o += dl;
				kb[o++] = 0;
				kb[o++] = al;
				memset(kb + o, 'x' + p[28] / 16 % 3, al);
				o += al;
				for (int i = 0; i < 8; i++)
					kb[o++] = (uint8_t)~(p[29 % len] % 8); /* ~epoch, small epochs */
				v.type = (uint8_t)(REC_SV + p[0] % 4);
				if (v.type == REC_ARR || v.type == REC_ARR_PUNCH) {
					for (int i = 0; i < 8; i++)
						kb[o++] = (uint8_t)~(seq >> (56 - 8 * i));
					v.off %= 1u << 20;
					v.loc %= 1u << 16;
				}
				if (v.type == REC_SV || v.type == REC_ARR) {
					v.flags = REC_F_INLINE;
					v.dlen = 1 + v.dlen % 64;
				}
				v.key = kb;
				v.klen = (uint16_t)o;
			}
			{
				struct rec probe = {.len = v.dlen, .type = v.type, .flags = v.flags};

				tl = rec_tail(&probe);
			}
			if (tl > sizeof(buf))
				tl = 0, v.flags = 0, v.dlen = 1;
			v.tail = buf;
			v.tail_len = tl;
			if (v.type && v.klen) {
				r = wal_view_rec(&v);
				if (r) {
					wal_put_insert(out, 1, ++seq, r);
					free(r);
				}
			}
		} else if ((op == WAL_DELETE || op == WAL_DELPFX) && len > 0) {
			wal_put_key(out, 1, ++seq, op, p, len);
		} else if (op == WAL_MARK && len >= 8) {
			uint64_t m;

			memcpy(&m, p, 8);
			wal_put_mark(out, 1, ++seq, m);
		} else {
			/* raw bytes: torn or garbage records */
			uint8_t *q = realloc(out->p, out->len + len + 1);

			if (!q)
				abort();
			out->p = q;
			memcpy(out->p + out->len, p, len);
			out->len += len;
			out->cap = out->len;
		}
		d += 2 + (size_t)len;
		n -= 2 + (size_t)len;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct eng_tgt_opts o = {.mode = ENG_MODE_RAM, .capacity = 1 << 20};
	struct wbuf w = {0};
	struct eng_target *t;

	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/dev/shm/lode-replay-fuzz-%d", (int)getpid());
		mkdir(dir, 0700);
		atexit(cleanup);
	}
	remove_files();
	frame(data, size, &w);
	/* a log file of at least 1 MiB is taken as it is */
	{
		size_t n = w.len < (1u << 20) ? (1u << 20) : w.len;
		uint8_t *p = calloc(1, n);

		if (!p)
			abort();
		if (w.len)
			memcpy(p, w.p, w.len);
		put_file("wal", p, n);
		free(p);
	}
	wbuf_free(&w);
	o.path = dir;
	if (eng_tgt_open(&o, &t) == 0) {
		struct eng_stats st;

		eng_tgt_stats(t, &st);
		if (st.extent_used > st.extent_cap)
			abort();
		eng_tgt_close(t);
	}
	return 0;
}
