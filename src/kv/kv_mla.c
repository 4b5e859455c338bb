/*
 * kv_mla.c — MLA / MLA-FP4 / NSA latent rows of a KV pool: kvc_kv_pool_set_mla_kv and
 * kvc_kv_pool_get_mla_kv, thin adapters from the pool's geometry (kv_pool.c) onto what
 * the level-1 ops use too: kvc__mla_values and the launcher kvc__mla_run
 * (src/ops/mla.c, kernels/mla.cu).
 *
 *   kind       region(s)               format
 *   MLA        KV (rows, R+Q) dtype     ROWS, dtype
 *   MLA_FP4    KV (rows, (R+Q)/2)       FP4 (packed e2m1) + KV_SCALE (rows, (R+Q)/16)
 *   NSA fp8    KV (rows, 656) bytes     NSA_FP8 (512 codes | 4 f32 scales | 64 bf16)
 *   NSA bf16   KV (rows, R+Q) bf16      ROWS, bf16
 */
#include "kv_pool.h"

static kvc_status pool_args(kvc_kv_pool *pool, const char *fn, int32_t layer_id, kvc__mla_args *a) {
  int32_t l;
  KVC_FORWARD(kvc__kv_pool_layer(pool, fn, layer_id, &l));
  const kvc_kv_pool_config *c = &pool->cfg;
  switch (c->kind) {
  case KVC_KV_MLA: a->format = KVC_MLA_ROWS; break;
  case KVC_KV_MLA_FP4: a->format = KVC_MLA_FP4; break;
  case KVC_KV_NSA: a->format = c->dtype == KVC_DTYPE_FP8_E4M3 ? KVC_MLA_NSA_FP8 : KVC_MLA_ROWS; break;
  default:
    return kvc__error(pool->ctx, KVC_ERR_UNSUPPORTED, fn, "pool kind %d has no MLA rows (use kvc_kv_pool_set_kv)",
                      (int)c->kind);
  }
  const kvc__kv_buffer *kv = kvc__kv_buffer_at(pool, KVC_REGION_KV, l);
  const kvc__kv_buffer *sc = kvc__kv_buffer_at(pool, KVC_REGION_KV_SCALE, l);
  if (!kv || (a->format == KVC_MLA_FP4 && !sc))
    return kvc__error(pool->ctx, KVC_ERR_INTERNAL, fn, "pool has no KV region for layer %d", layer_id);
  a->data = kv->base;
  a->scale = sc ? sc->base : NULL;
  a->num_rows = kv->rows;
  a->row_stride = 0;
  a->scale_stride = 0;
  a->row_dtype = c->dtype;
  a->R = c->kv_lora_rank;
  a->Q = c->qk_rope_head_dim;
  return KVC_OK;
}

kvc_status kvc_kv_pool_set_mla_kv(kvc_kv_pool *pool, int32_t layer_id, const void *loc, kvc_index_type loc_type,
                                  size_t n, const void *nope, const void *rope, kvc_dtype src_dtype,
                                  int64_t nope_stride, int64_t rope_stride, kvc_stream stream) {
  KVC_API_ENTRY();
  kvc__mla_args a = {0};
  KVC_FORWARD(pool_args(pool, __func__, layer_id, &a));
  const kvc__mla_values v = {.get = 0,
                             .loc = loc,
                             .loc_type = loc_type,
                             .n = n,
                             .nope = nope,
                             .rope = rope,
                             .val_dtype = src_dtype,
                             .nope_stride = nope_stride,
                             .rope_stride = rope_stride};
  a.v = v;
  return kvc__mla_run(pool->ctx, __func__, &a, stream);
}

kvc_status kvc_kv_pool_get_mla_kv(kvc_kv_pool *pool, int32_t layer_id, const void *loc, kvc_index_type loc_type,
                                  size_t n, void *nope_out, void *rope_out, kvc_dtype out_dtype, kvc_stream stream) {
  KVC_API_ENTRY();
  kvc__mla_args a = {0};
  KVC_FORWARD(pool_args(pool, __func__, layer_id, &a));
  /* Outputs are dense: the pool's get takes no strides (0 = dense). */
  const kvc__mla_values v = {
      .get = 1, .loc = loc, .loc_type = loc_type, .n = n, .nope = nope_out, .rope = rope_out, .val_dtype = out_dtype};
  a.v = v;
  return kvc__mla_run(pool->ctx, __func__, &a, stream);
}
