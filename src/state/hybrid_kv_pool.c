/*
 * hybrid_kv_pool.c — SGLang's HybridLinearKVPool (spec 9.8): an owned full-attention
 * kvc_kv_pool over only the full-attention layers, a global-id -> pool-layer table, and a
 * borrowed Mamba pool. Every operation forwards with the translated (local) layer id; a
 * Mamba layer id is an error (SGLang raises ValueError).
 */
#include "../alloc/swa.h"

#include <string.h>

#define KVC__HKV_MAGIC 0x6b76632d686b7621ull

struct kvc_hybrid_kv_pool {
  uint64_t magic;
  kvc_context *ctx;
  kvc_kv_pool *full;
  kvc_mamba_pool *mamba;
  int32_t max_id;
  int32_t *route; /* global id -> local layer, or -1 */
  int32_t *ids;   /* local -> global */
};

void kvc_hybrid_kv_pool_destroy(kvc_hybrid_kv_pool *p) {
  if (!p || p->magic != KVC__HKV_MAGIC) return;
  kvc_kv_pool_destroy(p->full);
  kvc__free(p->ctx, p->route);
  kvc__free(p->ctx, p->ids);
  p->magic = KVC__DEAD_MAGIC;
  kvc__free(p->ctx, p);
}

kvc_status kvc_hybrid_kv_pool_create(kvc_context *ctx, const kvc_hybrid_kv_pool_config *config,
                                     kvc_hybrid_kv_pool **out) {
  KVC_API_ENTRY();
  kvc_hybrid_kv_pool_config c = KVC_HYBRID_KV_POOL_CONFIG_INIT;
  KVC__CREATE_CONFIG(ctx, config, out, &c, kvc_hybrid_kv_pool_config);
  KVC_RETURN_IF(c.num_full_layers < 1 || !c.full_layer_ids || !c.kv, ctx, KVC_ERR_INVALID_ARGUMENT,
                "num_full_layers >= 1, full_layer_ids and kv are required");
  KVC_RETURN_IF(c.kv->kind != KVC_KV_MHA && c.kv->kind != KVC_KV_MLA && c.kv->kind != KVC_KV_MHA_FP4 &&
                    c.kv->kind != KVC_KV_MLA_FP4 && c.kv->kind != KVC_KV_MHA_NOOP,
                ctx, KVC_ERR_INVALID_ARGUMENT, "kv kind %d is not an MHA or MLA kind", (int)c.kv->kind);
  int32_t max_id = -1;
  for (int32_t i = 0; i < c.num_full_layers; i++) {
    KVC_RETURN_IF(c.full_layer_ids[i] < 0 || c.full_layer_ids[i] >= (1 << 20), ctx, KVC_ERR_INVALID_ARGUMENT,
                  "full_layer_ids[%d] = %d", i, c.full_layer_ids[i]);
    max_id = KVC__MAX(max_id, c.full_layer_ids[i]);
  }
  kvc_status st = KVC_OK;
  kvc_hybrid_kv_pool *p = kvc__calloc(ctx, 1, sizeof *p);
  KVC_RETURN_IF(!p, ctx, KVC_ERR_HOST_OOM, "pool struct");
  p->magic = KVC__HKV_MAGIC;
  p->ctx = ctx;
  p->mamba = c.mamba_pool;
  p->max_id = max_id;
  p->route = kvc__malloc(ctx, (size_t)(max_id + 1) * 4);
  p->ids = kvc__malloc(ctx, (size_t)c.num_full_layers * 4);
  KVC_FAIL_GOTO(!p->route || !p->ids, ctx, st, KVC_ERR_HOST_OOM, fail, "route table");
  for (int32_t i = 0; i <= max_id; i++) p->route[i] = -1;
  for (int32_t i = 0; i < c.num_full_layers; i++) {
    KVC_FAIL_GOTO(p->route[c.full_layer_ids[i]] != -1, ctx, st, KVC_ERR_INVALID_ARGUMENT, fail,
                  "layer id %d listed twice", c.full_layer_ids[i]);
    p->route[c.full_layer_ids[i]] = i;
    p->ids[i] = c.full_layer_ids[i];
  }
  {
    kvc_kv_pool_config kc = *c.kv;
    kc.layer_num = c.num_full_layers;
    kc.start_layer = 0;
    KVC_CHECK_GOTO(kvc_kv_pool_create(ctx, &kc, &p->full), st, fail);
  }
  *out = p;
  return KVC_OK;
fail:
  kvc_hybrid_kv_pool_destroy(p);
  return st;
}

kvc_kv_pool *kvc_hybrid_kv_pool_full(const kvc_hybrid_kv_pool *p) {
  return p && p->magic == KVC__HKV_MAGIC ? p->full : NULL;
}
kvc_mamba_pool *kvc_hybrid_kv_pool_mamba(const kvc_hybrid_kv_pool *p) {
  return p && p->magic == KVC__HKV_MAGIC ? p->mamba : NULL;
}

kvc_status kvc_hybrid_kv_pool_layer(const kvc_hybrid_kv_pool *p, int32_t layer_id, int32_t *index) {
  KVC_API_ENTRY();
  KVC_RETURN_IF(!p || p->magic != KVC__HKV_MAGIC, NULL, KVC_ERR_INVALID_ARGUMENT,
                "pool is NULL or not a live kvc_hybrid_kv_pool");
  KVC_RETURN_IF(layer_id < 0 || layer_id > p->max_id || p->route[layer_id] < 0, p->ctx, KVC_ERR_INVALID_ARGUMENT,
                "layer %d is not a full-attention layer", layer_id);
  if (index) *index = p->route[layer_id];
  return KVC_OK;
}

kvc_status kvc_hybrid_kv_pool_set_kv(kvc_hybrid_kv_pool *p, int32_t layer_id, const void *loc, kvc_index_type loc_type,
                                     size_t n, const void *k, const void *v, kvc_dtype src_dtype, int64_t k_stride,
                                     int64_t v_stride, const float *k_scale_device, float k_scale,
                                     const float *v_scale_device, float v_scale, kvc_stream stream) {
  KVC_API_ENTRY();
  int32_t i;
  KVC_FORWARD(kvc_hybrid_kv_pool_layer(p, layer_id, &i));
  return kvc_kv_pool_set_kv(p->full, i, loc, loc_type, n, k, v, src_dtype, k_stride, v_stride, k_scale_device, k_scale,
                            v_scale_device, v_scale, stream);
}

kvc_status kvc_hybrid_kv_pool_set_mla_kv(kvc_hybrid_kv_pool *p, int32_t layer_id, const void *loc,
                                         kvc_index_type loc_type, size_t n, const void *nope, const void *rope,
                                         kvc_dtype src_dtype, int64_t nope_stride, int64_t rope_stride,
                                         kvc_stream stream) {
  KVC_API_ENTRY();
  int32_t i;
  KVC_FORWARD(kvc_hybrid_kv_pool_layer(p, layer_id, &i));
  return kvc_kv_pool_set_mla_kv(p->full, i, loc, loc_type, n, nope, rope, src_dtype, nope_stride, rope_stride, stream);
}

kvc_status kvc_hybrid_kv_pool_gather_kv(kvc_hybrid_kv_pool *p, int32_t layer_id, const void *loc,
                                        kvc_index_type loc_type, size_t n, void *k_out, void *v_out,
                                        kvc_dtype out_dtype, kvc_stream stream) {
  KVC_API_ENTRY();
  int32_t i;
  KVC_FORWARD(kvc_hybrid_kv_pool_layer(p, layer_id, &i));
  return kvc_kv_pool_gather_kv(p->full, i, loc, loc_type, n, k_out, v_out, out_dtype, stream);
}

kvc_status kvc_hybrid_kv_pool_get_mla_kv(kvc_hybrid_kv_pool *p, int32_t layer_id, const void *loc,
                                         kvc_index_type loc_type, size_t n, void *nope_out, void *rope_out,
                                         kvc_dtype out_dtype, kvc_stream stream) {
  KVC_API_ENTRY();
  int32_t i;
  KVC_FORWARD(kvc_hybrid_kv_pool_layer(p, layer_id, &i));
  return kvc_kv_pool_get_mla_kv(p->full, i, loc, loc_type, n, nope_out, rope_out, out_dtype, stream);
}

kvc_status kvc_hybrid_kv_pool_buffer(const kvc_hybrid_kv_pool *p, kvc_region_kind region, int32_t layer_id,
                                     kvc_buffer_desc *out) {
  KVC_API_ENTRY();
  int32_t i;
  KVC_FORWARD(kvc_hybrid_kv_pool_layer(p, layer_id, &i));
  KVC_FORWARD(kvc_kv_pool_buffer(p->full, region, i, out));
  out->layer_id = layer_id;
  return KVC_OK;
}

kvc_status kvc_hybrid_kv_pool_move(kvc_hybrid_kv_pool *p, const void *tgt, const void *src, kvc_index_type loc_type,
                                   size_t n, kvc_stream stream) {
  KVC_API_ENTRY();
  KVC_RETURN_IF(!p || p->magic != KVC__HKV_MAGIC, NULL, KVC_ERR_INVALID_ARGUMENT,
                "pool is NULL or not a live kvc_hybrid_kv_pool");
  return kvc_kv_pool_move(p->full, tgt, src, loc_type, n, stream);
}
