/*
 * libFuzzer target: the checkpoint block decoder. The input becomes the
 * payload of one block with a correct checksum (so the fuzzer reaches the
 * record parsing, not only the checksum test); the decoder must accept or
 * reject it without reading out of bounds, and every record it accepts must
 * encode back into a block that decodes to the same records.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/eng_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct sink {
	struct ckpt_enc *enc;
	unsigned n;
};

static int take(void *ctx, struct rec *r)
{
	struct sink *s = ctx;
	int rc = 0;

	if (s->enc)
		rc = ckpt_enc_put(s->enc, r);
	s->n++;
	free(r);
	return rc;
}

static int count(void *ctx, struct rec *r)
{
	(*(unsigned *)ctx)++;
	free(r);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct ckpt_enc enc;
	uint8_t *blk;
	uint32_t v;
	size_t used;
	struct sink s = {0};
	unsigned again = 0;
	int rc;

	if (size < 1)
		return 0;
	blk = malloc(16 + size - 1);
	if (!blk)
		abort();
	v = htole32(0x424b434cu);
	memcpy(blk, &v, 4);
	v = htole32((uint32_t)(size - 1));
	memcpy(blk + 4, &v, 4);
	v = htole32(data[0] % 8);
	memcpy(blk + 8, &v, 4);
	memcpy(blk + 16, data + 1, size - 1);
	v = htole32(eng_crc32c(0, blk + 16, size - 1));
	memcpy(blk + 12, &v, 4);

	/* records of a real checkpoint come in key order; decoded ones may
	 * not, so re-encode only what the encoder's contract allows: here,
	 * blocks are re-encoded record by record in the order they came */
	memset(&enc, 0, sizeof(enc));
	s.enc = &enc;
	rc = ckpt_block_decode(blk, 16 + size - 1, &used, take, &s);
	if (rc >= 0) {
		if (used != 16 + size - 1 || (unsigned)rc != s.n)
			abort();
		ckpt_enc_finish(&enc);
		if (enc.b.len) {
			if (ckpt_block_decode(enc.b.p, enc.b.len, &used, count, &again) < 0 || again != s.n)
				abort();
		}
	}
	wbuf_free(&enc.b);
	free(blk);
	return 0;
}
