/*
 * kv_mha.c — row writes and reads of a KV pool: kvc_kv_pool_set_kv (SGLang
 * set_kv_buffer / store_cache, quantizing writes fused) and kvc_kv_pool_gather_kv.
 * Generic over kinds: MHA kinds write K and V rows, MLA kinds (and NSA with bf16 rows)
 * the whole latent row from k. Both are one launch of kernels/kv_store.cu:
 *
 *   dense rows (caller)            pool rows (slot loc[i])
 *   k + i*k_stride  --convert-->   K[layer] + loc[i]*k_row_bytes   (+ K_SCALE for FP4)
 *   v + i*v_stride  --convert-->   V[layer] + loc[i]*v_row_bytes   (+ V_SCALE for FP4)
 *
 * The launcher is src/ops/kv_store.c's; this file maps the pool's kind and layer onto it.
 * Each call memoises its kernel in pool->kfunc[KVC__KV_MEMO_SET_KV + src_dtype - 1] or
 * [KVC__KV_MEMO_GATHER + out_dtype - 1] (kv_pool.h).
 */
#include "kv_pool.h"

#include <string.h>

static bool is_value_dtype(kvc_dtype d) { return kvc__is_float_src(d) || kvc__is_fp8(d); }

/* Fills the pool side of `req` for local layer l: K/V (or KV) rows, FP4 scale rows, and
 * the pool's element code. Returns false when the kind has no generic row path. */
static bool pool_side(const kvc_kv_pool *pool, int32_t l, kvc__kv_rows_req *req, int *pool_dt, bool *has_v) {
  const kvc_kv_pool_config *c = &pool->cfg;
  const kvc__kv_buffer *k = NULL, *v = NULL, *ks = NULL, *vs = NULL;
  int64_t k_elems = 0, v_elems = 0;
  switch (c->kind) {
  case KVC_KV_MHA:
    k = kvc__kv_buffer_at(pool, KVC_REGION_K, l);
    v = kvc__kv_buffer_at(pool, KVC_REGION_V, l);
    k_elems = (int64_t)c->head_num * c->head_dim;
    v_elems = (int64_t)c->head_num * c->v_head_dim;
    *pool_dt = (int)c->dtype;
    break;
  case KVC_KV_MHA_FP4:
    k = kvc__kv_buffer_at(pool, KVC_REGION_K, l);
    v = kvc__kv_buffer_at(pool, KVC_REGION_V, l);
    ks = kvc__kv_buffer_at(pool, KVC_REGION_K_SCALE, l);
    vs = kvc__kv_buffer_at(pool, KVC_REGION_V_SCALE, l);
    k_elems = v_elems = (int64_t)c->head_num * c->head_dim;
    *pool_dt = KVC__DT_FP4;
    break;
  case KVC_KV_MLA:
    k = kvc__kv_buffer_at(pool, KVC_REGION_KV, l);
    k_elems = (int64_t)c->kv_lora_rank + c->qk_rope_head_dim;
    *pool_dt = (int)c->dtype;
    break;
  case KVC_KV_MLA_FP4:
    k = kvc__kv_buffer_at(pool, KVC_REGION_KV, l);
    ks = kvc__kv_buffer_at(pool, KVC_REGION_KV_SCALE, l);
    k_elems = (int64_t)c->kv_lora_rank + c->qk_rope_head_dim;
    *pool_dt = KVC__DT_FP4;
    break;
  case KVC_KV_NSA:
    if (c->dtype != KVC_DTYPE_BF16) return false; /* 656-byte fp8 rows: set_mla_kv only */
    k = kvc__kv_buffer_at(pool, KVC_REGION_KV, l);
    k_elems = (int64_t)c->kv_lora_rank + c->qk_rope_head_dim;
    *pool_dt = (int)c->dtype;
    break;
  default: return false;
  }
  req->p.k_pool = KVC__ADDR(k->base);
  req->p.k_pool_stride = k->row_bytes;
  if (v) {
    req->p.v_pool = KVC__ADDR(v->base);
    req->p.v_pool_stride = v->row_bytes;
  }
  if (ks) {
    req->p.k_pool_scale = KVC__ADDR(ks->base);
    req->p.k_scale_stride = ks->row_bytes;
  }
  if (vs) {
    req->p.v_pool_scale = KVC__ADDR(vs->base);
    req->p.v_scale_stride = vs->row_bytes;
  }
  req->p.rows = pool->rows;
  req->k_elems = k_elems;
  req->v_elems = v ? v_elems : 0;
  *has_v = v != NULL;
  return true;
}

kvc_status kvc_kv_pool_set_kv(kvc_kv_pool *pool, int32_t layer_id, const void *loc, kvc_index_type loc_type, size_t n,
                              const void *k, const void *v, kvc_dtype src_dtype, int64_t k_stride, int64_t v_stride,
                              const float *k_scale_device, float k_scale, const float *v_scale_device, float v_scale,
                              kvc_stream stream) {
  KVC_API_ENTRY();
  int32_t l;
  KVC_FORWARD(kvc__kv_pool_layer(pool, __func__, layer_id, &l));
  kvc_context *ctx = pool->ctx;
  KVC_RETURN_IF(pool->cfg.kind == KVC_KV_MHA_NOOP, ctx, KVC_ERR_UNSUPPORTED,
                "a NoOp pool has no KV storage (SGLang NoOpMHATokenToKVPool.set_kv_buffer raises)");
  KVC_RETURN_IF(pool->cfg.kind == KVC_KV_NSA && pool->cfg.dtype != KVC_DTYPE_BF16, ctx, KVC_ERR_UNSUPPORTED,
                "NSA fp8 rows are written with kvc_kv_pool_set_mla_kv (quantized 656-byte layout)");
  KVC_RETURN_IF(!is_value_dtype(src_dtype), ctx, KVC_ERR_UNSUPPORTED,
                "src_dtype %s: sources must be f32, f16, bf16, fp8_e4m3 or fp8_e5m2", kvc_dtype_name(src_dtype));
  KVC_CHECK_INDEX_TYPE(ctx, loc_type);
  KVC_RETURN_IF(k_stride < 0 || v_stride < 0, ctx, KVC_ERR_INVALID_ARGUMENT, "negative stride");
  if (n == 0) return KVC_OK;

  kvc__kv_rows_req req;
  memset(&req, 0, sizeof req);
  int pool_dt = 0;
  bool has_v = false;
  KVC_RETURN_IF(!pool_side(pool, l, &req, &pool_dt, &has_v), ctx, KVC_ERR_UNSUPPORTED, "pool kind %d has no row path",
                (int)pool->cfg.kind);
  KVC_RETURN_IF(!loc || !k || (has_v && !v), ctx, KVC_ERR_INVALID_ARGUMENT, "loc, k%s must be non-NULL for n = %zu",
                has_v ? " and v" : "", n);
  const bool convert = (int)src_dtype != pool_dt;
  if (convert) {
    KVC_RETURN_IF(!k_scale_device && !(k_scale != 0.0f && k_scale == k_scale), ctx, KVC_ERR_INVALID_ARGUMENT,
                  "k_scale %g must be a non-zero number (1.0 = no scaling)", (double)k_scale);
    KVC_RETURN_IF(has_v && !v_scale_device && !(v_scale != 0.0f && v_scale == v_scale), ctx, KVC_ERR_INVALID_ARGUMENT,
                  "v_scale %g must be a non-zero number (1.0 = no scaling)", (double)v_scale);
  }
  const int64_t esz = (int64_t)kvc_dtype_size(src_dtype);
  if (convert) {
    req.src_dt = (int)src_dtype;
    req.dst_dt = pool_dt;
  } else {
    /* same dtype: a byte copy of the rows */
    req.src_dt = req.dst_dt = KVC__DT_RAW;
    req.k_elems *= esz;
    req.v_elems *= esz;
  }
  const int64_t k_row_src = (convert ? req.k_elems * esz : req.k_elems);
  const int64_t v_row_src = (convert ? req.v_elems * esz : req.v_elems);
  req.p.k_dense = KVC__ADDR(k);
  req.p.v_dense = has_v ? KVC__ADDR(v) : 0;
  KVC_RETURN_IF(!kvc__mul_i64(k_stride, esz, &req.p.k_dense_stride) ||
                    !kvc__mul_i64(v_stride, esz, &req.p.v_dense_stride),
                ctx, KVC_ERR_INVALID_ARGUMENT, "k_stride %lld / v_stride %lld overflow in bytes", (long long)k_stride,
                (long long)v_stride);
  if (!k_stride) req.p.k_dense_stride = k_row_src;
  if (!v_stride) req.p.v_dense_stride = v_row_src;
  KVC_RETURN_IF(req.p.k_dense_stride < k_row_src || (has_v && req.p.v_dense_stride < v_row_src), ctx,
                KVC_ERR_INVALID_ARGUMENT, "k_stride %lld / v_stride %lld smaller than a row", (long long)k_stride,
                (long long)v_stride);
  req.p.loc = KVC__ADDR(loc);
  req.p.n = (int64_t)n;
  req.p.loc_i64 = loc_type == KVC_INDEX_I64;
  req.p.k_scale_ptr = KVC__ADDR(k_scale_device);
  req.p.v_scale_ptr = KVC__ADDR(v_scale_device);
  req.p.k_scale = k_scale;
  req.p.v_scale = v_scale;
  return kvc__kv_rows_launch(ctx, __func__, &req, &pool->kfunc[KVC__KV_MEMO_SET_KV + (int)src_dtype - 1], stream);
}

kvc_status kvc_kv_pool_gather_kv(kvc_kv_pool *pool, int32_t layer_id, const void *loc, kvc_index_type loc_type,
                                 size_t n, void *k_out, void *v_out, kvc_dtype out_dtype, kvc_stream stream) {
  KVC_API_ENTRY();
  int32_t l;
  KVC_FORWARD(kvc__kv_pool_layer(pool, __func__, layer_id, &l));
  kvc_context *ctx = pool->ctx;
  KVC_RETURN_IF(pool->cfg.kind == KVC_KV_MHA_NOOP, ctx, KVC_ERR_UNSUPPORTED, "a NoOp pool has no KV storage");
  KVC_RETURN_IF(pool->cfg.kind == KVC_KV_NSA && pool->cfg.dtype != KVC_DTYPE_BF16, ctx, KVC_ERR_UNSUPPORTED,
                "NSA fp8 rows are read with kvc_kv_pool_get_mla_kv (dequantizes the 656-byte layout)");
  KVC_RETURN_IF(!is_value_dtype(out_dtype), ctx, KVC_ERR_UNSUPPORTED,
                "out_dtype %s: outputs are f32, f16, bf16, fp8_e4m3 or fp8_e5m2", kvc_dtype_name(out_dtype));
  KVC_CHECK_INDEX_TYPE(ctx, loc_type);
  if (n == 0) return KVC_OK;
  kvc__kv_rows_req req;
  memset(&req, 0, sizeof req);
  int pool_dt = 0;
  bool has_v = false;
  KVC_RETURN_IF(!pool_side(pool, l, &req, &pool_dt, &has_v), ctx, KVC_ERR_UNSUPPORTED, "pool kind %d has no row path",
                (int)pool->cfg.kind);
  KVC_RETURN_IF(!loc || !k_out, ctx, KVC_ERR_INVALID_ARGUMENT, "loc and k_out must be non-NULL for n = %zu", n);
  if (!v_out) req.v_elems = 0; /* K only */
  const int64_t esz = (int64_t)kvc_dtype_size(out_dtype);
  req.gather = 1;
  if ((int)out_dtype == pool_dt) {
    req.src_dt = req.dst_dt = KVC__DT_RAW;
    req.k_elems *= esz;
    req.v_elems *= esz;
    req.p.k_dense_stride = req.k_elems;
    req.p.v_dense_stride = req.v_elems;
  } else {
    req.src_dt = pool_dt;
    req.dst_dt = (int)out_dtype;
    req.p.k_dense_stride = req.k_elems * esz;
    req.p.v_dense_stride = req.v_elems * esz;
  }
  req.p.k_dense = KVC__ADDR(k_out);
  req.p.v_dense = KVC__ADDR(v_out);
  req.p.loc = KVC__ADDR(loc);
  req.p.n = (int64_t)n;
  req.p.loc_i64 = loc_type == KVC_INDEX_I64;
  /* the memo holds the K+V variant; a K-only read of an MHA pool looks its kernel up */
  const kvc__kfunc **memo = has_v && !v_out ? NULL : &pool->kfunc[KVC__KV_MEMO_GATHER + (int)out_dtype - 1];
  return kvc__kv_rows_launch(ctx, __func__, &req, memo, stream);
}
