/*
 * kv_canary.c — debug canary rows (issue 7 item 2): freed KV rows hold the marker byte
 * KVC_CANARY_BYTE; a check before the rows are handed out again finds writes made after
 * the free. Both calls are one planned launch (slot ids as int32 payload words, the
 * buffer table in the header); the check then synchronizes and reads a 16-byte result.
 * pool->kfunc[KVC__KV_MEMO_CANARY_FILL / _CHECK ...] memoise the plan variants.
 */
#include "kv_pool.h"

#include <string.h>

/* Buffer table of the header; returns the buffer count (0: nothing to do) and maps
 * table entries back to pool buffers in idx[]. */
static kvc_status canary_table(kvc_kv_pool *pool, const char *fn, kvc_p_canary *h, int32_t *idx) {
  int32_t nb = 0;
  if (pool->cfg.kind == KVC_KV_MHA_NOOP) return KVC_OK;
  for (int32_t i = 0; i < pool->num_buffers; i++) {
    const kvc__kv_buffer *b = &pool->buffers[i];
    if (b->region == KVC_REGION_INDEX_K) continue;
    if (nb >= KVC_CANARY_MAX_BUFS)
      return kvc__error(pool->ctx, KVC_ERR_UNSUPPORTED, fn, "the pool has more than %d buffers (canary table capacity)",
                        KVC_CANARY_MAX_BUFS);
    h->buf[nb].base = (uint64_t)(uintptr_t)b->base;
    h->buf[nb].row_bytes = b->row_bytes;
    h->buf[nb].rows = b->rows;
    idx[nb++] = i;
  }
  h->nbuf = nb;
  return KVC_OK;
}

static kvc_status canary_launch(kvc_kv_pool *pool, const char *fn, const int64_t *slots, size_t n, bool check,
                                int32_t *idx, int32_t *nbuf, kvc_stream stream) {
  *nbuf = 0;
  KVC_FORWARD(kvc__kv_pool_check(pool, fn));
  kvc_context *ctx = pool->ctx;
  if (n == 0) return KVC_OK;
  if (!slots) return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "slots is NULL");
  for (size_t i = 0; i < n; i++)
    if (slots[i] < 0 || slots[i] >= pool->rows)
      return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "slots[%zu] = %lld outside [0, %lld)", i,
                        (long long)slots[i], (long long)pool->rows);
  kvc_p_canary h;
  memset(&h, 0, sizeof h);
  KVC_FORWARD(canary_table(pool, fn, &h, idx));
  if (h.nbuf == 0) return KVC_OK;
  if (check) {
    if (!pool->canary_result) KVC_FORWARD(kvc__dev_alloc(ctx, 2 * sizeof(uint64_t), &pool->canary_result));
    KVC_FORWARD(kvc__dev_memset(ctx, pool->canary_result, 0, 2 * sizeof(uint64_t), stream));
    h.result = (uint64_t)(uintptr_t)pool->canary_result;
  }
  h.n = (int64_t)n;
  kvc__plan plan;
  KVC_FORWARD(kvc__plan_begin(ctx, &plan, pool->scratch, sizeof h, n));
  for (size_t i = 0; i < n; i++) plan.payload[i] = (uint32_t)(int32_t)slots[i];
  h.staged = plan.staged_dev;
  int64_t units = (int64_t)n * h.nbuf, grid = (int64_t)kvc__num_sms(ctx) * 8;
  if (grid > units) grid = units;
  *nbuf = h.nbuf;
  const kvc__kfunc **memo = &pool->kfunc[check ? KVC__KV_MEMO_CANARY_CHECK : KVC__KV_MEMO_CANARY_FILL];
  return kvc__plan_launch(ctx, &plan, check ? &kvc__k_canary_check : &kvc__k_canary_fill, NULL, memo,
                          kvc__dim((unsigned)grid, 1, 1), kvc__dim(256, 1, 1), stream, &h);
}

kvc_status kvc_kv_pool_canary_fill(kvc_kv_pool *pool, const int64_t *slots, size_t n, kvc_stream stream) {
  KVC_API_ENTRY();
  int32_t idx[KVC_CANARY_MAX_BUFS], nbuf;
  return canary_launch(pool, __func__, slots, n, false, idx, &nbuf, stream);
}

kvc_status kvc_kv_pool_canary_check(kvc_kv_pool *pool, const int64_t *slots, size_t n, kvc_stream stream) {
  KVC_API_ENTRY();
  int32_t idx[KVC_CANARY_MAX_BUFS], nbuf;
  KVC_FORWARD(canary_launch(pool, __func__, slots, n, true, idx, &nbuf, stream));
  if (nbuf == 0) return KVC_OK;
  kvc_context *ctx = pool->ctx;
  uint64_t res[2];
  KVC_FORWARD(kvc__dev_d2h(ctx, res, pool->canary_result, sizeof res, stream));
  KVC_FORWARD(kvc__dev_sync(ctx, stream));
  if (res[0] == 0) return KVC_OK;
  const uint64_t u = ~0ull - res[1];
  const size_t i = (size_t)(u / (uint64_t)nbuf);
  KVC_RETURN_IF(i >= n, ctx, KVC_ERR_INTERNAL, "canary result unit %llu out of range", (unsigned long long)u);
  const kvc__kv_buffer *b = &pool->buffers[idx[u % (uint64_t)nbuf]];
  /* The first differing byte of that row, read back (debug path, already synchronized). */
  int64_t first = -1;
  unsigned char chunk[4096];
  const unsigned char *row = b->base + slots[i] * b->row_bytes;
  for (int64_t off = 0; off < b->row_bytes && first < 0; off += (int64_t)sizeof chunk) {
    size_t len = (size_t)KVC__MIN((int64_t)sizeof chunk, b->row_bytes - off);
    KVC_FORWARD(kvc__dev_d2h(ctx, chunk, row + off, len, stream));
    KVC_FORWARD(kvc__dev_sync(ctx, stream));
    for (size_t k = 0; k < len; k++)
      if (chunk[k] != (unsigned char)KVC_CANARY_BYTE) {
        first = off + (int64_t)k;
        break;
      }
  }
  return kvc__error(ctx, KVC_ERR_INTERNAL, "kvc_kv_pool_canary_check",
                    "slot %lld (request position %zu) layer %d region %d byte %lld was written after it was freed "
                    "(%lld bytes differ)",
                    (long long)slots[i], i, pool->cfg.start_layer + b->layer, (int)b->region, (long long)first,
                    (long long)res[0]);
}
