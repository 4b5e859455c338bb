/*
 * kv_store.c — the KV row kernel's launcher (shared by the pools' set_kv / gather_kv)
 * and the level-1 op kvc_store_kv (SGLang store_cache on caller-owned buffers).
 *
 * Variant selection, all from host-visible facts:
 *   G   elements per chunk: FP4 16 (one scale block); else the largest power of two with
 *       G * max(src, dst element bytes) <= 16 dividing both row lengths.
 *   AD  dense-side access bytes: the chunk's bytes, lowered to what the caller's
 *       pointers and strides are aligned to (16/8/4/2/1).
 *   AP  pool-side access bytes: same from the pool's bases (256-aligned) and row bytes.
 */
#include "ops.h"

#include <string.h>

static int elem_bytes(int dt) {
  return dt == KVC_DTYPE_F32 ? 4 : (dt == KVC_DTYPE_F16 || dt == KVC_DTYPE_BF16) ? 2 : 1;
}
static int chunk_bytes(int dt, int g) { return dt == KVC__DT_FP4 ? g / 2 : g * elem_bytes(dt); }

kvc_status kvc__kv_rows_launch(kvc_context *ctx, const char *fn, kvc__kv_rows_req *req, const kvc__kfunc **memo,
                               kvc_stream stream) {
  kvc_p_kv_rows *p = &req->p;
  /* The kernel forms i x dense stride and slot x pool stride in int64: both spans must fit
   * (n arrives as a size_t cast to int64, so a huge one is negative here). */
  int64_t dense_span, pool_span;
  if (p->n < 0 || !kvc__mul_i64(p->n, KVC__MAX(p->k_dense_stride, p->v_dense_stride), &dense_span) ||
      !kvc__mul_i64(p->rows, KVC__MAX(p->k_pool_stride, p->v_pool_stride), &pool_span))
    return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "%lld rows of the given strides overflow the address range",
                      (long long)p->n);
  const bool fp4 = req->src_dt == KVC__DT_FP4 || req->dst_dt == KVC__DT_FP4;
  int g;
  if (fp4) {
    g = 16;
    if (req->k_elems % 16 || req->v_elems % 16)
      return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "FP4 rows must hold a multiple of 16 values");
  } else {
    const int wide = KVC__MAX(elem_bytes(req->src_dt), elem_bytes(req->dst_dt));
    g = 16 / wide;
    while (g > 1 && (req->k_elems % g || req->v_elems % g)) g /= 2;
  }
  const int kch = (int)(req->k_elems / g), vch = (int)(req->v_elems / g);
  const int dense_dt = req->gather ? req->dst_dt : req->src_dt, pool_dt = req->gather ? req->src_dt : req->dst_dt;
  const int dense_cb = chunk_bytes(dense_dt, g), pool_cb = chunk_bytes(pool_dt, g);
  const bool has_v = vch > 0;
  uint64_t dv[4] = {p->k_dense, (uint64_t)p->k_dense_stride, has_v ? p->v_dense : 0,
                    has_v ? (uint64_t)p->v_dense_stride : 0};
  uint64_t pv[4] = {p->k_pool, (uint64_t)p->k_pool_stride, has_v ? p->v_pool : 0,
                    has_v ? (uint64_t)p->v_pool_stride : 0};
  const int ad = KVC__MIN(dense_cb, kvc__align16(dv, 4));
  const int ap = KVC__MIN(pool_cb, kvc__align16(pv, 4));
  const bool full = ad == KVC__MIN(dense_cb, 16);

  const kvc__kfunc *f = full && memo ? *memo : NULL;
  if (!f) {
    kvc__spec spec = {8,
                      {{"KVC_GATHER", req->gather},
                       {"KVC_SRC_DT", req->src_dt},
                       {"KVC_DST_DT", req->dst_dt},
                       {"KVC_G", g},
                       {"KVC_KCH", kch},
                       {"KVC_VCH", vch},
                       {"KVC_AD", ad},
                       {"KVC_AP", ap}}};
    KVC_FORWARD(kvc__kernel_get(ctx, &kvc__k_kv_rows, &spec, &f));
    if (full && memo) *memo = f;
  }
  const int64_t unroll = KVC_ROWS_UNROLL(chunk_bytes(req->src_dt, g), chunk_bytes(req->dst_dt, g));
  const int64_t per_block = KVC_KV_ROWS_BLOCK * unroll;
  int64_t units = 0;
  KVC_RETURN_IF(!kvc__mul_i64(p->n, (int64_t)kch + vch, &units) || units > INT64_MAX - per_block, ctx,
                KVC_ERR_INVALID_ARGUMENT, "n = %lld rows is too large for one launch", (long long)p->n);
  const int64_t blocks = (units + per_block - 1) / per_block;
  KVC_RETURN_IF(blocks > 0x7fffffff, ctx, KVC_ERR_INVALID_ARGUMENT, "n = %lld rows is too large for one launch",
                (long long)p->n);
  return kvc__kernel_launch(ctx, f, kvc__dim((unsigned)blocks, 1, 1), kvc__dim(KVC_KV_ROWS_BLOCK, 1, 1), 0, stream, p,
                            sizeof *p);
}

kvc_status kvc_store_kv(kvc_context *ctx, void *k_cache, void *v_cache, int64_t k_cache_stride, int64_t v_cache_stride,
                        int64_t num_rows, const void *k, const void *v, int64_t k_stride, int64_t v_stride,
                        int64_t k_row_bytes, int64_t v_row_bytes, const void *loc, kvc_index_type loc_type, size_t n,
                        kvc_stream stream) {
  KVC_API_ENTRY();
  KVC_RETURN_IF(!ctx, NULL, KVC_ERR_INVALID_ARGUMENT, "ctx is NULL");
  KVC_CHECK_INDEX_TYPE(ctx, loc_type);
  if (n == 0) return KVC_OK;
  KVC_RETURN_IF(!k_cache || !k || !loc, ctx, KVC_ERR_INVALID_ARGUMENT,
                "k_cache, k and loc must be non-NULL for n = %zu", n);
  KVC_RETURN_IF(k_row_bytes <= 0 || v_row_bytes < 0 || num_rows <= 0, ctx, KVC_ERR_INVALID_ARGUMENT,
                "k_row_bytes %lld / v_row_bytes %lld / num_rows %lld", (long long)k_row_bytes, (long long)v_row_bytes,
                (long long)num_rows);
  KVC_RETURN_IF(v_row_bytes > 0 && (!v_cache || !v), ctx, KVC_ERR_INVALID_ARGUMENT,
                "v_cache and v must be non-NULL when v_row_bytes > 0");
  if (k_stride == 0) k_stride = k_row_bytes;
  if (v_stride == 0) v_stride = v_row_bytes;
  if (k_cache_stride == 0) k_cache_stride = k_row_bytes;
  if (v_cache_stride == 0) v_cache_stride = v_row_bytes;
  KVC_RETURN_IF(k_stride < k_row_bytes || v_stride < v_row_bytes || k_cache_stride < k_row_bytes ||
                    v_cache_stride < v_row_bytes,
                ctx, KVC_ERR_INVALID_ARGUMENT, "a row stride is smaller than its row bytes");
  kvc__kv_rows_req req;
  memset(&req, 0, sizeof req);
  req.p.k_dense = KVC__ADDR(k);
  req.p.v_dense = KVC__ADDR(v);
  req.p.k_pool = KVC__ADDR(k_cache);
  req.p.v_pool = KVC__ADDR(v_cache);
  req.p.loc = KVC__ADDR(loc);
  req.p.n = (int64_t)n;
  req.p.rows = num_rows;
  req.p.k_dense_stride = k_stride;
  req.p.v_dense_stride = v_stride;
  req.p.k_pool_stride = k_cache_stride;
  req.p.v_pool_stride = v_cache_stride;
  req.p.k_scale = req.p.v_scale = 1.0f;
  req.p.loc_i64 = loc_type == KVC_INDEX_I64;
  req.src_dt = req.dst_dt = KVC__DT_RAW;
  req.k_elems = k_row_bytes;
  req.v_elems = v_row_bytes;
  return kvc__kv_rows_launch(ctx, __func__, &req, NULL, stream);
}
