/*
 * kv_move.c — kvc_kv_pool_move (SGLang move_kv_cache) in ONE launch over every buffer of
 * the pool, and the segment description shared with kv_offload.c.
 *
 * Semantics (SGLang's, spec 9.2 move_kv_cache; identical on both backends): locs are
 * moved in chunks of cap = 256 pairs (128 when the pool's first region has rows of 8192
 * bytes or more: SGLang's 512-byte tiles), in order; each chunk is one simultaneous copy
 * (every source of the chunk read before any of its targets is written, per buffer and
 * byte range), and a later chunk sees the writes of the earlier ones. SGLang launches
 * one kernel per chunk; here one launch does all of them: this file fixes the segments
 * and the chunk, the launcher (src/ops/kv_segments.c, kernels/kv_move.cu) the tiling.
 *
 * pool->kfunc[KVC__KV_MEMO_MOVE ...] memoises the launcher's tile-width variants.
 */
#include "kv_segments.h"

#include <string.h>

int kvc__kv_pool_segments(const kvc_kv_pool *pool, const char *fn, bool by_page, kvc_kv_seg *segs) {
  int ns = 0;
  const int32_t L = pool->cfg.layer_num;
  for (int r = 0; r < KVC__REGION_KINDS; r++) {
    if (pool->first[r] < 0) continue;
    const kvc__kv_buffer *b0 = &pool->buffers[pool->first[r]];
    const int64_t pitch = L > 1 ? (int64_t)(b0[1].base - b0[0].base) : 0;
    for (int32_t l = 1; l < L; l++) {
      if ((int64_t)(b0[l].base - b0[0].base) != pitch * l) {
        kvc__error(pool->ctx, KVC_ERR_INTERNAL, fn, "region %d buffers are not equally spaced", r);
        return -1;
      }
    }
    kvc_kv_seg s;
    memset(&s, 0, sizeof s);
    s.base = KVC__ADDR(b0->base);
    s.layer_pitch = pitch;
    s.layers = L;
    if (r == KVC_REGION_INDEX_K) {
      const int64_t ps = pool->cfg.page_size, kb = pool->cfg.index_head_dim;
      s.page_size = (int32_t)ps;
      s.page_pitch = b0->row_bytes;
      if (by_page) {
        s.by_page = 1;
        s.row_bytes = b0->row_bytes;
        s.limit = b0->rows; /* pages */
        segs[ns++] = s;
      } else {
        s.limit = b0->rows * ps; /* token slots covered by the pages */
        s.row_bytes = s.slot_pitch = kb;
        s.page_off = 0;
        segs[ns++] = s;
        s.row_bytes = s.slot_pitch = 4;
        s.page_off = ps * kb;
        segs[ns++] = s;
      }
    } else {
      s.row_bytes = s.slot_pitch = b0->row_bytes;
      s.limit = b0->rows;
      segs[ns++] = s;
    }
  }
  for (int i = 0; i < ns; i++) {
    uint64_t v[6] = {segs[i].base,
                     (uint64_t)segs[i].layer_pitch,
                     (uint64_t)segs[i].row_bytes,
                     (uint64_t)segs[i].slot_pitch,
                     (uint64_t)segs[i].page_pitch,
                     (uint64_t)segs[i].page_off};
    segs[i].vec = kvc__align16(v, 6);
  }
  return ns;
}

kvc_status kvc_kv_pool_move(kvc_kv_pool *pool, const void *tgt_loc, const void *src_loc, kvc_index_type loc_type,
                            size_t n, kvc_stream stream) {
  KVC_API_ENTRY();
  KVC_FORWARD(kvc__kv_pool_check(pool, __func__));
  kvc_context *ctx = pool->ctx;
  KVC_CHECK_INDEX_TYPE(ctx, loc_type);
  if (n == 0) return KVC_OK;
  KVC_RETURN_IF(!tgt_loc || !src_loc, ctx, KVC_ERR_INVALID_ARGUMENT, "tgt_loc and src_loc must be non-NULL for n = %zu",
                n);
  KVC_RETURN_IF(n > (size_t)INT32_MAX, ctx, KVC_ERR_INVALID_ARGUMENT, "n = %zu too large", n);
  /* NoOp: SGLang's move is a no-op, but the arguments are checked as for any pool. */
  if (pool->cfg.kind == KVC_KV_MHA_NOOP) return KVC_OK;

  kvc_p_kv_move p;
  memset(&p, 0, sizeof p);
  const int ns = kvc__kv_pool_segments(pool, __func__, false, p.seg);
  if (ns < 0) return KVC_ERR_INTERNAL;
  /* Semantics: SGLang's chunk cap (see the top of this file). */
  const int64_t nn = (int64_t)n;
  const int64_t cap = p.seg[0].row_bytes >= 8192 ? 128 : 256;
  p.tgt = KVC__ADDR(tgt_loc);
  p.src = KVC__ADDR(src_loc);
  p.n = nn;
  p.loc_i64 = loc_type == KVC_INDEX_I64;
  p.nseg = ns;
  p.chunk = (int32_t)KVC__MIN(nn, cap);
  return kvc__kv_move_launch(ctx, __func__, &p, &pool->kfunc[KVC__KV_MEMO_MOVE], stream);
}
