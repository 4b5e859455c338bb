/*
 * swa_map.c — launchers of kernels/swa.cu: the mapping writes (pairs, coalesced runs,
 * zeroed runs) shared by the SWA allocator, the hybrid req pool and the SWA KV pool, the
 * gather through a mapping, and the level-1 op kvc_swa_translate built on it.
 */
#include "ops.h"

#include <string.h>

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

kvc_status kvc__swa_map_write(kvc_context *ctx, const kvc__swa_map_dst *d, const kvc__swa_map_items *items,
                              kvc_stream stream) {
  const size_t zc = items->zero ? items->zero_count : 0;
  KVC_RETURN_IF(zc > INT32_MAX || items->count > INT32_MAX - (int64_t)zc, ctx, KVC_ERR_INVALID_ARGUMENT,
                "%zu zero runs + %lld map items in one call exceed 2^31", zc, (long long)items->count);
  const int64_t count = (int64_t)zc + (items->count > 0 ? items->count : 0);
  if (count <= 0) return KVC_OK;
  const kvc__kfunc **const kcache = d->kcache;
  if (!kcache[0]) KVC_FORWARD(kvc__plan_prefetch(ctx, &kvc__k_swa_map_write, NULL, kcache));
  kvc__plan plan;
  const size_t nwords = items->count > 0 ? items->nwords : 0; /* + 2 zc: below 2^33, no overflow */
  KVC_FORWARD(kvc__plan_begin(ctx, &plan, d->scratch, sizeof(kvc_p_swa_map_write), 2 * zc + nwords));
  if (zc) memcpy(plan.payload, items->zero, zc * 2 * 4);
  if (nwords) memcpy((uint32_t *)plan.payload + 2 * zc, items->words, nwords * 4);
  kvc_p_swa_map_write h;
  memset(&h, 0, sizeof h);
  h.dst = (uint64_t)(uintptr_t)d->dst;
  h.staged = plan.staged_dev;
  h.dst_len = d->len;
  h.mode = items->mode;
  h.count = (int32_t)count;
  h.zero_count = (int32_t)zc;
  h.dst_i64 = d->i64;
  const unsigned blocks = (unsigned)ceil_div(count, 8); /* one warp per item */
  return kvc__plan_launch(ctx, &plan, &kvc__k_swa_map_write, NULL, kcache, kvc__dim(blocks, 1, 1), kvc__dim(256, 1, 1),
                          stream, &h);
}

kvc__swa_map_items kvc__swa_build_pairs(const int64_t *idx, const int64_t *val, size_t n, uint32_t *words) {
  size_t runs = 0;
  for (size_t i = 0; i < n; i++) {
    const int64_t x = idx ? idx[i] : (int64_t)i;
    if (i == 0 || x != (idx ? idx[i - 1] : (int64_t)i - 1) + 1 || val[i] != val[i - 1] + 1) runs++;
  }
  if (3 * runs < 2 * n) {
    size_t r = 0;
    for (size_t i = 0; i < n; i++) {
      const int64_t x = idx ? idx[i] : (int64_t)i;
      if (i == 0 || x != (idx ? idx[i - 1] : (int64_t)i - 1) + 1 || val[i] != val[i - 1] + 1) {
        words[3 * r] = (uint32_t)x;
        words[3 * r + 1] = (uint32_t)val[i];
        words[3 * r + 2] = 0;
        r++;
      }
      words[3 * (r - 1) + 2]++;
    }
    const kvc__swa_map_items it = {words, 3 * runs, (int64_t)runs, KVC_SWA_MAP_RUNS, NULL, 0};
    return it;
  }
  for (size_t i = 0; i < n; i++) {
    words[2 * i] = (uint32_t)(idx ? idx[i] : (int64_t)i);
    words[2 * i + 1] = (uint32_t)val[i];
  }
  const kvc__swa_map_items it = {words, 2 * n, (int64_t)n, KVC_SWA_MAP_PAIRS, NULL, 0};
  return it;
}

kvc_status kvc__swa_gather(kvc_context *ctx, const kvc__kfunc **kf, const kvc__swa_gather_args *g, kvc_stream stream) {
  if (g->n == 0) return KVC_OK;
  if (!*kf) KVC_FORWARD(kvc__kernel_get(ctx, &kvc__k_swa_gather, NULL, kf));
  kvc_p_swa_gather p;
  memset(&p, 0, sizeof p);
  p.map = (uint64_t)(uintptr_t)g->map;
  p.in = (uint64_t)(uintptr_t)g->in;
  p.out = (uint64_t)(uintptr_t)g->out;
  p.n = (int64_t)g->n;
  p.map_len = g->map_len;
  p.oob = g->oob;
  p.map_i64 = g->map_i64;
  p.in_i64 = g->in_i64;
  p.out_i64 = g->out_i64;
  return kvc__kernel_launch(ctx, *kf, kvc__dim((unsigned)ceil_div((int64_t)g->n, 256), 1, 1), kvc__dim(256, 1, 1), 0,
                            stream, &p, sizeof p);
}

kvc_status kvc_swa_translate(kvc_context *ctx, const int64_t *mapping, int64_t mapping_len, const void *loc,
                             kvc_index_type loc_type, void *out, kvc_index_type out_type, size_t n, kvc_stream stream) {
  KVC_API_ENTRY();
  KVC_RETURN_IF(!ctx, NULL, KVC_ERR_INVALID_ARGUMENT, "ctx is NULL");
  KVC_CHECK_INDEX_TYPE(ctx, loc_type);
  KVC_CHECK_INDEX_TYPE(ctx, out_type);
  if (!n) return KVC_OK;
  KVC_RETURN_IF(!mapping || !loc || !out, ctx, KVC_ERR_INVALID_ARGUMENT, "mapping, loc and out must be non-NULL");
  KVC_RETURN_IF(mapping_len < 1, ctx, KVC_ERR_INVALID_ARGUMENT, "mapping_len %lld < 1", (long long)mapping_len);
  const kvc__kfunc *kf = NULL;
  const kvc__swa_gather_args g = kvc__swa_translate_args(mapping, mapping_len, loc, loc_type, out, out_type, n);
  return kvc__swa_gather(ctx, &kf, &g, stream);
}
