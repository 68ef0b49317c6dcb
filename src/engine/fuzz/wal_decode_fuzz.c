/*
 * libFuzzer target: the log/checkpoint record decoder must reject or accept
 * any byte string without reading out of bounds, and what it accepts must
 * re-encode to the same bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/eng_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t off = 0;

	while (off < size) {
		struct wal_view v;
		struct wbuf b = {0};
		struct rec *r;

		if (wal_decode(data + off, size - off, &v) < 0)
			break;
		if (v.len < WAL_HDR || v.len > size - off)
			abort();
		if (v.op == WAL_INSERT) {
			r = wal_view_rec(&v);
			if (!r)
				abort();
			if (rec_tail(r) != v.tail_len)
				abort();
			/* accepted records round-trip */
			if (wal_put_insert(&b, v.gen, v.seq, r) < 0)
				abort();
			if (b.len != v.len || memcmp(b.p + 4, data + off + 4, 20) != 0)
				abort();
			free(r);
		}
		wbuf_free(&b);
		off += v.len;
	}
	return 0;
}
