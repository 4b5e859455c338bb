/*
 * kv_move.c — kvc_kv_pool_move (SGLang move_kv_cache) in ONE launch over every buffer of
 * the pool, and the segment description shared with kv_offload.c.
 *
 * Grid: one CTA per (segment, layer, byte tile of W bytes); CTA b finds its segment in
 * cta_first[] (prefix sums of layers * tiles). Each CTA stages the tile bytes of up to
 * `chunk` source rows in shared memory before writing any target row:
 *
 * (shared memory = chunk * (W + 8): the tile bytes plus the chunk's staged slots)
 *   n * (W + 8) <= 96 KB for W in {128, 64, 32}  -> that W, chunk = n (2+ CTAs per SM)
 *   else n * 24 <= 160 KB                        -> W = 16, chunk = n (1 CTA per SM)
 *   else                                         -> W = 64, chunk = 1365 (sequential chunks)
 *
 * so up to n = 6826 the move is one simultaneous copy in every (buffer, byte), which
 * SGLang only achieves for n <= 128/256 (beyond that it launches chunk after chunk). The
 * choice depends only on n, so both backends have the same semantics. W never exceeds
 * the widest row rounded up to a power of two (tiny rows waste no threads).
 *
 * pool->kfunc[10..13] memoise the four W variants.
 */
#include "kv_segments.h"

#include <string.h>

#define MEMO_MOVE 10
#define SMEM_SOFT (96 * 1024)
#define SMEM_MAX (160 * 1024)

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
    uint64_t v[6] = {segs[i].base, (uint64_t)segs[i].layer_pitch, (uint64_t)segs[i].row_bytes,
                     (uint64_t)segs[i].slot_pitch, (uint64_t)segs[i].page_pitch, (uint64_t)segs[i].page_off};
    segs[i].vec = kvc__align16(v, 6);
  }
  return ns;
}

kvc_status kvc_kv_pool_move(kvc_kv_pool *pool, const void *tgt_loc, const void *src_loc, kvc_index_type loc_type,
                            size_t n, kvc_stream stream) {
  KVC_FORWARD(kvc__kv_pool_check(pool, __func__));
  kvc_context *ctx = pool->ctx;
  KVC_RETURN_IF(loc_type != KVC_INDEX_I32 && loc_type != KVC_INDEX_I64, ctx, KVC_ERR_INVALID_ARGUMENT, "loc_type %d", (int)loc_type);
  if (n == 0 || pool->cfg.kind == KVC_KV_MHA_NOOP) return KVC_OK; /* NoOp: SGLang's move is a no-op */
  KVC_RETURN_IF(!tgt_loc || !src_loc, ctx, KVC_ERR_INVALID_ARGUMENT, "tgt_loc and src_loc must be non-NULL for n = %zu", n);
  KVC_RETURN_IF(n > (size_t)INT32_MAX, ctx, KVC_ERR_INVALID_ARGUMENT, "n = %zu too large", n);

  kvc_p_kv_move p;
  memset(&p, 0, sizeof p);
  const int ns = kvc__kv_pool_segments(pool, __func__, false, p.seg);
  if (ns < 0) return KVC_ERR_INTERNAL;
  int64_t widest = 16;
  for (int i = 0; i < ns; i++) widest = KVC__MAX(widest, p.seg[i].row_bytes);
  int64_t wcap = 16;
  while (wcap < widest && wcap < 128) wcap *= 2;

  /* shared memory per loc: W tile bytes + 8 bytes of staged slots */
  const int64_t nn = (int64_t)n;
  int64_t w = 0, chunk = nn;
  for (int64_t c = KVC__MIN(128, wcap); c >= 32; c /= 2)
    if (nn * (c + 8) <= SMEM_SOFT) {
      w = c;
      break;
    }
  if (!w && nn * (16 + 8) <= SMEM_MAX) w = 16;
  if (!w) {
    w = KVC__MIN(64, wcap);
    chunk = SMEM_SOFT / (w + 8);
  }

  int64_t ctas = 0;
  for (int i = 0; i < ns; i++) {
    p.seg[i].tiles = (int32_t)((p.seg[i].row_bytes + w - 1) / w);
    p.cta_first[i] = (int32_t)ctas;
    ctas += (int64_t)p.seg[i].layers * p.seg[i].tiles;
  }
  p.cta_first[ns] = (int32_t)ctas;
  KVC_RETURN_IF(ctas > INT32_MAX, ctx, KVC_ERR_INVALID_ARGUMENT, "pool too large for one move launch");
  p.tgt = KVC__ADDR(tgt_loc);
  p.src = KVC__ADDR(src_loc);
  p.n = nn;
  p.loc_i64 = loc_type == KVC_INDEX_I64;
  p.nseg = ns;
  p.chunk = (int32_t)chunk;

  int wi = w == 16 ? 0 : w == 32 ? 1 : w == 64 ? 2 : 3;
  const kvc__kfunc **memo = &pool->kfunc[MEMO_MOVE + wi];
  if (!*memo) {
    kvc__spec spec = {1, {{"KVC_W", w}}};
    KVC_FORWARD(kvc__kernel_get(ctx, &kvc__k_kv_move, &spec, memo));
  }
  const unsigned smem = (unsigned)(chunk * (w + 8));
  return kvc__kernel_launch(ctx, *memo, kvc__dim((unsigned)ctas, 1, 1), kvc__dim(256, 1, 1), smem, stream, &p, sizeof p);
}
