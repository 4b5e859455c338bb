/*
 * kv_nsa.c — NSA indexer keys of a KV pool (SGLang NSATokenToKVPool's index_k_with_scale
 * buffer): SetKAndS, GetK/GetS with run-time lengths, and GetKAndS for a batch.
 *
 * Per layer, `index_pages` rows of page_bytes = ps * (128 + 4):
 *
 *   page p: [ key 0 | key 1 | ... | key ps-1 ][ scale 0 | ... | scale ps-1 ]
 *             128 B each, token-major          f32 each, at ps * 128 + 4 * t
 *
 * Token slot `loc` lives in page loc / ps at offset loc % ps (the KV pool's page id).
 * This file checks the pool side and the caller's arguments; the launches are the ops'
 * (src/ops/nsa_index.c, kernels/nsa_index.cu).
 */
#include "kv_pool.h"

#define ADDR(p) ((uint64_t)(uintptr_t)(p))

static kvc_status index_buffer(kvc_kv_pool *pool, const char *fn, int32_t layer_id, const kvc__kv_buffer **out) {
  int32_t l;
  KVC_FORWARD(kvc__kv_pool_layer(pool, fn, layer_id, &l));
  if (pool->cfg.kind != KVC_KV_NSA)
    return kvc__error(pool->ctx, KVC_ERR_UNSUPPORTED, fn, "pool kind %d has no index-K pages (NSA only)",
                      (int)pool->cfg.kind);
  *out = kvc__kv_buffer_at(pool, KVC_REGION_INDEX_K, l);
  if (!*out) return kvc__error(pool->ctx, KVC_ERR_INTERNAL, fn, "no index-K region for layer %d", layer_id);
  return KVC_OK;
}

kvc_status kvc_nsa_set_index_k(kvc_kv_pool *pool, int32_t layer_id, const void *loc, kvc_index_type loc_type, size_t n,
                               const uint8_t *index_k, const float *scale, kvc_stream stream) {
  KVC_API_ENTRY();
  const kvc__kv_buffer *b;
  KVC_FORWARD(index_buffer(pool, __func__, layer_id, &b));
  KVC_CHECK_INDEX_TYPE(pool->ctx, loc_type);
  if (n == 0) return KVC_OK;
  KVC_RETURN_IF(!loc || !index_k || !scale, pool->ctx, KVC_ERR_INVALID_ARGUMENT,
                "loc, index_k and scale must be non-NULL for n = %zu", n);
  KVC_RETURN_IF(n > (size_t)INT32_MAX * 32, pool->ctx, KVC_ERR_INVALID_ARGUMENT, "n = %zu too large", n);
  const int64_t ps = pool->cfg.page_size;
  kvc_p_nsa_index_set p = {ADDR(loc),  ADDR(index_k), ADDR(scale), ADDR(b->base),
                           (int64_t)n, b->rows,       ps,          loc_type == KVC_INDEX_I64,
                           0 /* vec: the launcher's */};
  return kvc__nsa_index_set_launch(pool->ctx, &p, b->row_bytes, stream);
}

static kvc_status launch_get(kvc_kv_pool *pool, const kvc__kv_buffer *b, kvc_p_nsa_index_get *p, kvc_stream stream) {
  p->buf = ADDR(b->base);
  p->pages = b->rows;
  p->page_size = pool->cfg.page_size;
  return kvc__nsa_index_get_launch(pool->ctx, p, b->row_bytes, stream);
}

kvc_status kvc_nsa_get_index_k(kvc_kv_pool *pool, int32_t layer_id, int64_t seq_len, const int32_t *page_indices,
                               uint8_t *out_k, uint8_t *out_scale, kvc_stream stream) {
  KVC_API_ENTRY();
  const kvc__kv_buffer *b;
  KVC_FORWARD(index_buffer(pool, __func__, layer_id, &b));
  KVC_RETURN_IF(seq_len < 0 || seq_len > INT32_MAX, pool->ctx, KVC_ERR_INVALID_ARGUMENT,
                "seq_len %lld outside [0, 2^31)", (long long)seq_len);
  if (seq_len == 0 || (!out_k && !out_scale)) return KVC_OK;
  KVC_RETURN_IF(!page_indices, pool->ctx, KVC_ERR_INVALID_ARGUMENT, "page_indices is NULL");
  const int64_t ps = pool->cfg.page_size;
  kvc_p_nsa_index_get p = {ADDR(page_indices),
                           0,
                           ADDR(out_k),
                           ADDR(out_scale),
                           0,
                           1,
                           (seq_len + ps - 1) / ps,
                           seq_len,
                           seq_len,
                           seq_len,
                           0,
                           0,
                           0,
                           0};
  return launch_get(pool, b, &p, stream);
}

kvc_status kvc_nsa_get_index_k_batch(kvc_kv_pool *pool, int32_t layer_id, size_t batch, const int32_t *page_table,
                                     int64_t table_width, const int32_t *seq_lens, int64_t seq_len_sum,
                                     int64_t max_seq_len, uint8_t *out_k, uint8_t *out_scale, kvc_stream stream) {
  KVC_API_ENTRY();
  const kvc__kv_buffer *b;
  KVC_FORWARD(index_buffer(pool, __func__, layer_id, &b));
  KVC_RETURN_IF(table_width < 0 || seq_len_sum < 0 || max_seq_len < 0 || seq_len_sum > INT32_MAX * (int64_t)64,
                pool->ctx, KVC_ERR_INVALID_ARGUMENT, "table_width %lld / seq_len_sum %lld / max_seq_len %lld",
                (long long)table_width, (long long)seq_len_sum, (long long)max_seq_len);
  if (batch == 0 || seq_len_sum == 0 || max_seq_len == 0 || (!out_k && !out_scale)) return KVC_OK;
  KVC_RETURN_IF(!seq_lens || (table_width > 0 && !page_table), pool->ctx, KVC_ERR_INVALID_ARGUMENT,
                "seq_lens and page_table must be non-NULL");
  kvc_p_nsa_index_get p = {ADDR(page_table),
                           ADDR(seq_lens),
                           ADDR(out_k),
                           ADDR(out_scale),
                           0,
                           (int64_t)batch,
                           table_width,
                           0,
                           seq_len_sum,
                           max_seq_len,
                           0,
                           0,
                           0,
                           0};
  return launch_get(pool, b, &p, stream);
}
