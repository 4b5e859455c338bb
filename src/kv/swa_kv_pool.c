/*
 * swa_kv_pool.c — SGLang's SWAKVPool (spec 8) by composition: two MHA kvc_kv_pools and
 * a routing table from global layer id to (side, local layer).
 *
 *   route[id] = local index | SWA_BIT, or -1       full pool: layers of full_layer_ids
 *                                                   SWA pool:  layers of swa_layer_ids
 *   scratch (device int64, 2 x cap): translated locs for set_kv / move / offload
 *
 * SWA-side work needs the full->SWA mapping of a registered kvc_swa_allocator: the
 * device copy for translation launches, the host copy for offload masks (no readback).
 */
#include "../alloc/swa.h"

#include <string.h>

#define KVC__SWAKV_MAGIC 0x6b76632d73776b76ull
#define SWA_BIT 0x40000000

struct kvc_swa_kv_pool {
  uint64_t magic;
  kvc_context *ctx;
  kvc_kv_pool *full, *swa;
  int64_t size_full, size_swa;
  int32_t ps;
  int32_t max_id;
  int32_t *route;               /* max_id + 1 */
  int32_t swa_row_k, swa_row_v; /* SWA input row widths in elements (contiguous) */
  int64_t cap;
  int64_t *scratch_dev; /* 2 * cap */
  const int64_t *dmap;
  const int32_t *hmap;
  int64_t map_len;
  unsigned char *pscratch;
  const kvc__kfunc *k_map[KVC__PLAN_INLINE_VARIANTS], *k_gather;
};

#define SKV_ENTRY(p) KVC_CHECK_HANDLE(p, KVC__SWAKV_MAGIC, "pool", "kvc_swa_kv_pool")

void kvc_swa_kv_pool_destroy(kvc_swa_kv_pool *p) {
  if (!p || p->magic != KVC__SWAKV_MAGIC) return;
  kvc_context *ctx = p->ctx;
  kvc_kv_pool_destroy(p->full);
  kvc_kv_pool_destroy(p->swa);
  kvc__dev_free(ctx, p->scratch_dev);
  kvc__free(ctx, p->route);
  kvc__free(ctx, p->pscratch);
  p->magic = KVC__DEAD_MAGIC;
  kvc__free(ctx, p);
}

kvc_status kvc_swa_kv_pool_create(kvc_context *ctx, const kvc_swa_kv_pool_config *config, kvc_swa_kv_pool **out) {
  KVC_API_ENTRY();
  kvc_swa_kv_pool_config c = KVC_SWA_KV_POOL_CONFIG_INIT;
  KVC__CREATE_CONFIG(ctx, config, out, &c, kvc_swa_kv_pool_config);
  KVC_RETURN_IF(c.num_full_layers < 0 || c.num_swa_layers < 0 || c.num_full_layers + c.num_swa_layers < 1, ctx,
                KVC_ERR_INVALID_ARGUMENT, "layer counts %d / %d", c.num_full_layers, c.num_swa_layers);
  KVC_RETURN_IF((c.num_full_layers && !c.full_layer_ids) || (c.num_swa_layers && !c.swa_layer_ids), ctx,
                KVC_ERR_INVALID_ARGUMENT, "layer id lists are required");
  int32_t max_id = -1;
  for (int32_t i = 0; i < c.num_full_layers; i++) {
    KVC_RETURN_IF(c.full_layer_ids[i] < 0, ctx, KVC_ERR_INVALID_ARGUMENT, "negative layer id");
    max_id = KVC__MAX(max_id, c.full_layer_ids[i]);
  }
  for (int32_t i = 0; i < c.num_swa_layers; i++) {
    KVC_RETURN_IF(c.swa_layer_ids[i] < 0, ctx, KVC_ERR_INVALID_ARGUMENT, "negative layer id");
    max_id = KVC__MAX(max_id, c.swa_layer_ids[i]);
  }
  KVC_RETURN_IF(max_id >= (1 << 20), ctx, KVC_ERR_INVALID_ARGUMENT, "layer id %d too large", max_id);
  if (!c.swa_head_num) c.swa_head_num = c.head_num;
  if (!c.swa_head_dim) c.swa_head_dim = c.head_dim;
  if (!c.swa_v_head_dim) c.swa_v_head_dim = c.v_head_dim ? c.v_head_dim : c.swa_head_dim;
  if (!c.translate_capacity) c.translate_capacity = 65536;
  KVC_RETURN_IF(c.translate_capacity < 1 || c.translate_capacity > ((int64_t)1 << 28), ctx, KVC_ERR_INVALID_ARGUMENT,
                "translate_capacity %lld", (long long)c.translate_capacity);
  /* The int32 SWA row widths below must not overflow (the owned pools check the rest). */
  KVC_RETURN_IF(c.swa_head_num < 0 || c.swa_head_dim < 0 || c.swa_v_head_dim < 0 ||
                    (int64_t)c.swa_head_num * c.swa_head_dim >= INT32_MAX ||
                    (int64_t)c.swa_head_num * c.swa_v_head_dim >= INT32_MAX,
                ctx, KVC_ERR_INVALID_ARGUMENT, "SWA heads %d x dims %d / %d overflow a row", c.swa_head_num,
                c.swa_head_dim, c.swa_v_head_dim);
  kvc_status st = KVC_OK;
  kvc_swa_kv_pool *p = kvc__calloc(ctx, 1, sizeof *p);
  KVC_RETURN_IF(!p, ctx, KVC_ERR_HOST_OOM, "pool struct");
  p->magic = KVC__SWAKV_MAGIC;
  p->ctx = ctx;
  p->size_full = c.size_full, p->size_swa = c.size_swa, p->ps = c.page_size;
  p->max_id = max_id;
  p->cap = c.translate_capacity;
  p->swa_row_k = c.swa_head_num * c.swa_head_dim;
  p->swa_row_v = c.swa_head_num * c.swa_v_head_dim;
  p->route = kvc__malloc(ctx, (size_t)(max_id + 1) * 4);
  p->pscratch = kvc__malloc(ctx, KVC__PARAM_SCRATCH_BYTES);
  KVC_FAIL_GOTO(!p->route || !p->pscratch, ctx, st, KVC_ERR_HOST_OOM, fail, "route table");
  for (int32_t i = 0; i <= max_id; i++) p->route[i] = -1;
  for (int32_t i = 0; i < c.num_full_layers; i++) {
    KVC_FAIL_GOTO(p->route[c.full_layer_ids[i]] != -1, ctx, st, KVC_ERR_INVALID_ARGUMENT, fail,
                  "layer id %d listed twice", c.full_layer_ids[i]);
    p->route[c.full_layer_ids[i]] = i;
  }
  for (int32_t i = 0; i < c.num_swa_layers; i++) {
    KVC_FAIL_GOTO(p->route[c.swa_layer_ids[i]] != -1, ctx, st, KVC_ERR_INVALID_ARGUMENT, fail,
                  "layer id %d listed twice", c.swa_layer_ids[i]);
    p->route[c.swa_layer_ids[i]] = i | SWA_BIT;
  }
  kvc_kv_pool_config kc = KVC_KV_POOL_CONFIG_INIT;
  kc.kind = KVC_KV_MHA;
  kc.page_size = c.page_size;
  kc.dtype = c.dtype;
  if (c.num_full_layers) {
    kc.size = c.size_full, kc.layer_num = c.num_full_layers;
    kc.head_num = c.head_num, kc.head_dim = c.head_dim, kc.v_head_dim = c.v_head_dim;
    KVC_CHECK_GOTO(kvc_kv_pool_create(ctx, &kc, &p->full), st, fail);
  }
  if (c.num_swa_layers) {
    kc.size = c.size_swa, kc.layer_num = c.num_swa_layers;
    kc.head_num = c.swa_head_num, kc.head_dim = c.swa_head_dim, kc.v_head_dim = c.swa_v_head_dim;
    KVC_CHECK_GOTO(kvc_kv_pool_create(ctx, &kc, &p->swa), st, fail);
  }
  KVC_CHECK_GOTO(kvc__dev_alloc(ctx, (size_t)(2 * p->cap) * 8, (void **)&p->scratch_dev), st, fail);
  *out = p;
  return KVC_OK;
fail:
  kvc_swa_kv_pool_destroy(p);
  return st;
}

kvc_kv_pool *kvc_swa_kv_pool_full(const kvc_swa_kv_pool *p) {
  return p && p->magic == KVC__SWAKV_MAGIC ? p->full : NULL;
}
kvc_kv_pool *kvc_swa_kv_pool_swa(const kvc_swa_kv_pool *p) { return p && p->magic == KVC__SWAKV_MAGIC ? p->swa : NULL; }

kvc_status kvc_swa_kv_pool_layer(const kvc_swa_kv_pool *p, int32_t layer_id, int *is_swa, int32_t *index) {
  KVC_API_ENTRY();
  SKV_ENTRY(p);
  KVC_RETURN_IF(layer_id < 0 || layer_id > p->max_id || p->route[layer_id] < 0, p->ctx, KVC_ERR_INVALID_ARGUMENT,
                "layer %d is neither a full nor an SWA layer of this pool", layer_id);
  const int32_t r = p->route[layer_id];
  if (is_swa) *is_swa = (r & SWA_BIT) != 0;
  if (index) *index = r & ~SWA_BIT;
  return KVC_OK;
}

kvc_status kvc_swa_kv_pool_register_allocator(kvc_swa_kv_pool *p, const kvc_swa_allocator *a) {
  KVC_API_ENTRY();
  SKV_ENTRY(p);
  const int64_t len = kvc_swa_allocator_mapping_length(a);
  KVC_RETURN_IF(!len, p->ctx, KVC_ERR_INVALID_ARGUMENT, "alloc is not a live kvc_swa_allocator");
  KVC_RETURN_IF(kvc_swa_allocator_page_size(a) != p->ps || len > p->size_full + p->ps + 1, p->ctx,
                KVC_ERR_INVALID_ARGUMENT,
                "allocator geometry (page %d, mapping %lld) does not fit the pool (page %d, %lld tokens)",
                kvc_swa_allocator_page_size(a), (long long)len, p->ps, (long long)p->size_full);
  p->dmap = kvc_swa_allocator_mapping_device(a);
  p->hmap = kvc_swa_allocator_mapping_host(a);
  p->map_len = len;
  return KVC_OK;
}

static size_t src_elem(kvc_dtype d) { return kvc_dtype_size(d); }

/* The gather translating m full-pool locs to SWA slots (int64, -1 where unmapped). */
static kvc__swa_gather_args translate_args(const kvc_swa_kv_pool *p, const void *loc, kvc_index_type loc_type,
                                           int64_t *out, size_t m) {
  return kvc__swa_translate_args(p->dmap, p->map_len, loc, loc_type, out, KVC_INDEX_I64, m);
}

kvc_status kvc_swa_kv_pool_set_kv(kvc_swa_kv_pool *p, int32_t layer_id, const void *loc, const void *swa_loc,
                                  kvc_index_type loc_type, size_t n, const void *k, const void *v, kvc_dtype src_dtype,
                                  int64_t k_stride, int64_t v_stride, const float *k_scale_device, float k_scale,
                                  const float *v_scale_device, float v_scale, kvc_stream stream) {
  KVC_API_ENTRY();
  int is_swa;
  int32_t idx;
  KVC_FORWARD(kvc_swa_kv_pool_layer(p, layer_id, &is_swa, &idx));
  KVC_CHECK_INDEX_TYPE(p->ctx, loc_type);
  if (!is_swa)
    return kvc_kv_pool_set_kv(p->full, idx, loc, loc_type, n, k, v, src_dtype, k_stride, v_stride, k_scale_device,
                              k_scale, v_scale_device, v_scale, stream);
  if (swa_loc || !n)
    return kvc_kv_pool_set_kv(p->swa, idx, swa_loc ? swa_loc : loc, loc_type, n, k, v, src_dtype, k_stride, v_stride,
                              k_scale_device, k_scale, v_scale_device, v_scale, stream);
  KVC_RETURN_IF(!p->dmap, p->ctx, KVC_ERR_MISUSE, "SWA layer %d needs translation but no allocator is registered",
                layer_id);
  KVC_RETURN_IF(!loc || !k || !v, p->ctx, KVC_ERR_INVALID_ARGUMENT, "loc, k and v must be non-NULL");
  const size_t es = src_elem(src_dtype), lw = loc_type == KVC_INDEX_I64 ? 8 : 4;
  KVC_RETURN_IF(!es, p->ctx, KVC_ERR_INVALID_ARGUMENT, "bad src_dtype");
  KVC_RETURN_IF(k_stride < 0 || v_stride < 0, p->ctx, KVC_ERR_INVALID_ARGUMENT, "negative stride");
  /* Chunk offsets below are off x row bytes: the whole span must be representable. */
  size_t kb, vb, k_span, v_span;
  KVC_RETURN_IF(!kvc__mul_size((size_t)(k_stride ? k_stride : p->swa_row_k), es, &kb) ||
                    !kvc__mul_size((size_t)(v_stride ? v_stride : p->swa_row_v), es, &vb) ||
                    !kvc__mul_size(n, kb, &k_span) || !kvc__mul_size(n, vb, &v_span),
                p->ctx, KVC_ERR_INVALID_ARGUMENT, "n = %zu rows of the given strides overflow the address range", n);
  for (size_t off = 0; off < n; off += (size_t)p->cap) {
    const size_t m = KVC__MIN(n - off, (size_t)p->cap);
    const kvc__swa_gather_args g = translate_args(p, (const char *)loc + off * lw, loc_type, p->scratch_dev, m);
    KVC_FORWARD(kvc__swa_gather(p->ctx, &p->k_gather, &g, stream));
    KVC_FORWARD(kvc_kv_pool_set_kv(p->swa, idx, p->scratch_dev, KVC_INDEX_I64, m, (const char *)k + off * kb,
                                   (const char *)v + off * vb, src_dtype, k_stride ? k_stride : p->swa_row_k,
                                   v_stride ? v_stride : p->swa_row_v, k_scale_device, k_scale, v_scale_device, v_scale,
                                   stream));
  }
  return KVC_OK;
}

kvc_status kvc_swa_kv_pool_move(kvc_swa_kv_pool *p, const void *tgt, const void *src, kvc_index_type loc_type, size_t n,
                                kvc_stream stream) {
  KVC_API_ENTRY();
  SKV_ENTRY(p);
  KVC_CHECK_INDEX_TYPE(p->ctx, loc_type);
  if (!n) return KVC_OK;
  KVC_RETURN_IF(!tgt || !src, p->ctx, KVC_ERR_INVALID_ARGUMENT, "tgt_loc and src_loc must be non-NULL");
  /* Before the full side moves anything: a refused SWA half must leave both unchanged. */
  KVC_RETURN_IF(p->swa && !p->dmap, p->ctx, KVC_ERR_MISUSE, "the SWA side needs a registered allocator");
  if (p->full) KVC_FORWARD(kvc_kv_pool_move(p->full, tgt, src, loc_type, n, stream));
  if (!p->swa) return KVC_OK;
  const size_t lw = loc_type == KVC_INDEX_I64 ? 8 : 4;
  for (size_t off = 0; off < n; off += (size_t)p->cap) {
    const size_t m = KVC__MIN(n - off, (size_t)p->cap);
    const kvc__swa_gather_args gt = translate_args(p, (const char *)tgt + off * lw, loc_type, p->scratch_dev, m);
    const kvc__swa_gather_args gs =
        translate_args(p, (const char *)src + off * lw, loc_type, p->scratch_dev + p->cap, m);
    KVC_FORWARD(kvc__swa_gather(p->ctx, &p->k_gather, &gt, stream));
    KVC_FORWARD(kvc__swa_gather(p->ctx, &p->k_gather, &gs, stream));
    KVC_FORWARD(kvc_kv_pool_move(p->swa, p->scratch_dev, p->scratch_dev + p->cap, KVC_INDEX_I64, m, stream));
  }
  return KVC_OK;
}

kvc_status kvc_swa_kv_pool_host_copy_bytes(const kvc_swa_kv_pool *p, size_t n, size_t *full_bytes, size_t *swa_bytes) {
  KVC_API_ENTRY();
  SKV_ENTRY(p);
  size_t f = 0, s = 0;
  if (p->full) KVC_FORWARD(kvc_kv_pool_host_copy_bytes(p->full, n, &f));
  if (p->swa) KVC_FORWARD(kvc_kv_pool_host_copy_bytes(p->swa, n, &s));
  if (full_bytes) *full_bytes = f;
  if (swa_bytes) *swa_bytes = s;
  return KVC_OK;
}

/* Uploads, in one launch, scratch[0:n) = loc and scratch[cap:cap+n) = SWA peers (or -1
 * where mask says no), computing mask from the host mapping (and `saved` when loading). */
static kvc_status stage_locs(kvc_swa_kv_pool *p, const char *fn, const int64_t *loc, size_t n, const uint8_t *saved,
                             uint8_t *mask, kvc_stream stream) {
  KVC_RETURN_IF(n > (size_t)p->cap, p->ctx, KVC_ERR_INVALID_ARGUMENT, "%zu slots exceed translate_capacity %lld", n,
                (long long)p->cap);
  KVC_RETURN_IF(p->swa && !p->hmap, p->ctx, KVC_ERR_MISUSE, "the SWA side needs a registered allocator");
  const int64_t limit = p->hmap ? p->map_len - 1 : p->size_full + p->ps;
  for (size_t i = 0; i < n; i++)
    if (loc[i] < 0 || loc[i] >= limit)
      return kvc__error(p->ctx, KVC_ERR_INVALID_ARGUMENT, fn, "loc[%zu] = %lld out of range", i, (long long)loc[i]);
  int64_t *idx = kvc__malloc(p->ctx, 2 * n * 8), *val = kvc__malloc(p->ctx, 2 * n * 8);
  uint32_t *words = kvc__malloc(p->ctx, (6 * n + 16) * 4);
  kvc_status st = KVC_OK;
  KVC_FAIL_GOTO(!idx || !val || !words, p->ctx, st, KVC_ERR_HOST_OOM, done, "staging %zu slots", n);
  for (size_t i = 0; i < n; i++) {
    idx[i] = (int64_t)i, val[i] = loc[i];
    const int32_t w = p->hmap ? p->hmap[loc[i]] : 0;
    const bool on = w > 0 && (!saved || saved[i]);
    if (mask) mask[i] = w > 0;
    idx[n + i] = p->cap + (int64_t)i, val[n + i] = on ? w : -1;
  }
  const kvc__swa_map_dst d = {p->pscratch, p->k_map, p->scratch_dev, 2 * p->cap, 1};
  const kvc__swa_map_items items = kvc__swa_build_pairs(idx, val, 2 * n, words);
  st = kvc__swa_map_write(p->ctx, &d, &items, stream);
done:
  kvc__free(p->ctx, idx), kvc__free(p->ctx, val), kvc__free(p->ctx, words);
  return st;
}

kvc_status kvc_swa_kv_pool_copy_to_host(kvc_swa_kv_pool *p, const int64_t *loc, size_t n, void *host_full,
                                        void *host_swa, uint8_t *swa_mask, kvc_stream stream) {
  KVC_API_ENTRY();
  SKV_ENTRY(p);
  if (!n) return KVC_OK;
  KVC_RETURN_IF(!loc || (p->full && !host_full) || (p->swa && (!host_swa || !swa_mask)), p->ctx,
                KVC_ERR_INVALID_ARGUMENT, "loc, host buffers and swa_mask must be non-NULL");
  uint8_t *mask = swa_mask;
  KVC_FORWARD(stage_locs(p, __func__, loc, n, NULL, mask, stream));
  if (p->full) KVC_FORWARD(kvc_kv_pool_copy_to_host(p->full, p->scratch_dev, KVC_INDEX_I64, n, host_full, stream));
  if (p->swa)
    KVC_FORWARD(kvc_kv_pool_copy_to_host(p->swa, p->scratch_dev + p->cap, KVC_INDEX_I64, n, host_swa, stream));
  return KVC_OK;
}

kvc_status kvc_swa_kv_pool_copy_from_host(kvc_swa_kv_pool *p, const int64_t *loc, size_t n, const void *host_full,
                                          const void *host_swa, const uint8_t *saved_mask, kvc_stream stream) {
  KVC_API_ENTRY();
  SKV_ENTRY(p);
  if (!n) return KVC_OK;
  KVC_RETURN_IF(!loc || (p->full && !host_full) || (p->swa && (!host_swa || !saved_mask)), p->ctx,
                KVC_ERR_INVALID_ARGUMENT, "loc, host buffers and saved_mask must be non-NULL");
  KVC_FORWARD(stage_locs(p, __func__, loc, n, saved_mask, NULL, stream));
  if (p->full) KVC_FORWARD(kvc_kv_pool_copy_from_host(p->full, p->scratch_dev, KVC_INDEX_I64, n, host_full, stream));
  if (p->swa)
    KVC_FORWARD(kvc_kv_pool_copy_from_host(p->swa, p->scratch_dev + p->cap, KVC_INDEX_I64, n, host_swa, stream));
  return KVC_OK;
}
