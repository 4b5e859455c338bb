/*
 * nsa_index.c — launchers of the NSA indexer-key kernels (kernels/nsa_index.cu) on a
 * buffer of index pages given by address: the KV pool (src/kv/kv_nsa.c) validates its
 * arguments and fills the parameter struct; these pick the access width and the grid.
 *
 * The kernels are compiled once: lengths, page size and table width are kernel
 * parameters, never specialisation constants, so no call here hashes a spec twice.
 */
#include "ops.h"

/* Widest access (16, 4 or 1 bytes) every address of the form base + k * 16 allows. */
static int32_t access_width(uint64_t bits) {
  if (bits % 16 == 0) return 16;
  if (bits % 4 == 0) return 4;
  return 1;
}

kvc_status kvc__nsa_index_set_launch(kvc_context *ctx, kvc_p_nsa_index_set *p, int64_t page_bytes, kvc_stream stream) {
  p->vec = access_width(p->index_k | p->buf | (uint64_t)page_bytes);
  const kvc__kfunc *f;
  KVC_FORWARD(kvc__kernel_get(ctx, &kvc__k_nsa_index_set, NULL, &f));
  const int64_t blocks = (p->n * 8 + 255) / 256; /* eight lanes per token */
  return kvc__kernel_launch(ctx, f, kvc__dim((unsigned)blocks, 1, 1), kvc__dim(256, 1, 1), 0, stream, p, sizeof *p);
}

kvc_status kvc__nsa_index_get_launch(kvc_context *ctx, kvc_p_nsa_index_get *p, int64_t page_bytes, kvc_stream stream) {
  uint64_t bits = p->out_k | p->buf | (uint64_t)page_bytes;
  if (p->out_s && p->out_s % 4) bits |= 1;
  p->vec = access_width(bits);
  const kvc__kfunc *f;
  KVC_FORWARD(kvc__kernel_get(ctx, &kvc__k_nsa_index_get, NULL, &f));
  /* Every block scans all lengths, so keep the grid near one wave. */
  int64_t blocks = (p->seq_len_sum * 8 + 255) / 256;
  const int64_t cap = 4 * (int64_t)kvc__num_sms(ctx);
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  return kvc__kernel_launch(ctx, f, kvc__dim((unsigned)blocks, 1, 1), kvc__dim(256, 1, 1), 0, stream, p, sizeof *p);
}
