/*
 * kv_move.c — kvc_kv_pool_move (SGLang move_kv_cache) in ONE launch over every buffer of
 * the pool, and the segment description shared with kv_offload.c.
 *
 * Semantics (SGLang's, spec 9.2 move_kv_cache; identical on both backends): locs are
 * moved in chunks of cap = 256 pairs (128 when the pool's first region has rows of 8192
 * bytes or more: SGLang's 512-byte tiles), in order; each chunk is one simultaneous copy
 * (every source of the chunk read before any of its targets is written, per buffer and
 * byte range), and a later chunk sees the writes of the earlier ones. SGLang launches
 * one kernel per chunk; here one launch does all of them.
 *
 * Implementation (kernels/kv_move.cu): tiles of W bytes of a row per (segment, layer);
 * each CTA owns the same number of tiles and, chunk by chunk, stages the chunk's source
 * bytes of a tile in shared memory before writing its targets (S-deep pipeline over the
 * CTA's tiles). Shared memory = chunk * (S * W + 8) (tile buffers + staged slots): with
 * at most 256 pairs per chunk, W = 256 with S = 1 takes 66 KB, so three CTAs share a
 * multiprocessor and one CTA's reads overlap another's writes. KVC_MOVE_TUNE=
 * "W,S[,threads]" overrides the shape (benchmarks only; read once per process).
 *
 * pool->kfunc[10..13] and [28..29] memoise the six W variants (S is a kernel parameter,
 * so it needs no variant).
 */
#include "kv_segments.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MEMO_MOVE 10      /* W = 16, 32, 64, 128 */
#define MEMO_MOVE_WIDE 28 /* W = 256, 512 */

/* KVC_MOVE_TUNE="W,S[,threads[,one]]" (benchmarks): forced tile width / depth / CTA size;
 * one = 1: one tile per CTA (a partial second wave) instead of equal tile counts. */
static void move_tune(int *w, int *s, int *t, int *one) {
  static volatile int done, tw, ts, tt, t1;
  if (!done) {
    const char *e = getenv("KVC_MOVE_TUNE");
    int a = 0, b = 0, c = 0, d = 0;
    if (e && sscanf(e, "%d,%d,%d,%d", &a, &b, &c, &d) >= 2 && (a == 16 || a == 32 || a == 64 || a == 128 || a == 256 || a == 512) && b >= 1 && b <= 4) {
      tw = a;
      ts = b;
      tt = (c == 256 || c == 512) ? c : 0;
      t1 = d == 1;
    }
    done = 1;
  }
  *w = tw, *s = ts, *t = tt, *one = t1;
}

/* Dynamic shared memory a block may use / a multiprocessor holds, by compute capability
 * (host backend: unbounded, one CTA). */
static void smem_limits(kvc_context *ctx, int64_t *block, int64_t *sm) {
  kvc_device_info di;
  if (kvc_context_backend(ctx) != KVC_BACKEND_CUDA || kvc_context_device_info(ctx, &di) != KVC_OK) {
    *block = *sm = INT64_MAX / 4;
    return;
  }
  const int cc = di.compute_major * 10 + di.compute_minor;
  if (cc >= 90) *block = 227 * 1024, *sm = 228 * 1024; /* Hopper, Blackwell */
  else if (cc == 80 || cc == 87) *block = 163 * 1024, *sm = 164 * 1024;
  else *block = 99 * 1024, *sm = 100 * 1024;
}

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
  KVC_API_ENTRY();
  KVC_FORWARD(kvc__kv_pool_check(pool, __func__));
  kvc_context *ctx = pool->ctx;
  KVC_CHECK_INDEX_TYPE(ctx, loc_type);
  if (n == 0) return KVC_OK;
  KVC_RETURN_IF(!tgt_loc || !src_loc, ctx, KVC_ERR_INVALID_ARGUMENT, "tgt_loc and src_loc must be non-NULL for n = %zu", n);
  KVC_RETURN_IF(n > (size_t)INT32_MAX, ctx, KVC_ERR_INVALID_ARGUMENT, "n = %zu too large", n);
  /* NoOp: SGLang's move is a no-op, but the arguments are checked as for any pool. */
  if (pool->cfg.kind == KVC_KV_MHA_NOOP) return KVC_OK;

  kvc_p_kv_move p;
  memset(&p, 0, sizeof p);
  const int ns = kvc__kv_pool_segments(pool, __func__, false, p.seg);
  if (ns < 0) return KVC_ERR_INTERNAL;
  int64_t widest = 16;
  for (int i = 0; i < ns; i++) widest = KVC__MAX(widest, p.seg[i].row_bytes);
  int64_t wcap = 16;
  while (wcap < widest && wcap < 512) wcap *= 2;

  /* Semantics: SGLang's chunk cap (see the top of this file). */
  const int64_t nn = (int64_t)n;
  const int64_t cap = p.seg[0].row_bytes >= 8192 ? 128 : 256;
  const int64_t chunk = KVC__MIN(nn, cap);
  const int64_t cnt = chunk;

  /* Shape: (W, S) from the device's shared memory; cnt * (S * W + 8) bytes. */
  int64_t blk_max, sm_max;
  smem_limits(ctx, &blk_max, &sm_max);
  /* Measured on the H200 (bench/NOTES-kernels.md, bench/RESULTS.md run 6): the tile
   * width dominates — 256-byte tiles keep both 128-byte lines of a 256-byte DRAM segment
   * in one access burst (+5-10 points over 128), 512-byte tiles leave one CTA per
   * multiprocessor (worse) — and deeper pipelines did not pay, so: W = 256 (or the
   * widest row, rounded up) with S = 1. */
  int64_t w = 0, stages = 1;
  for (int64_t c = KVC__MIN(256, wcap); c >= 16 && !w; c /= 2)
    if (cnt * (c + 8) <= blk_max) w = c;
  if (!w) w = 16; /* the launch reports the shared-memory limit */
  int tw, ts, tt, one_tile;
  move_tune(&tw, &ts, &tt, &one_tile);
  if (tw && tw <= KVC__MAX(16, wcap) && cnt * (ts * tw + 8) <= blk_max) w = tw, stages = ts;

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

  const int memo_i = w == 16 ? 0 : w == 32 ? 1 : w == 64 ? 2 : w == 128 ? 3 : w == 256 ? 4 : 5;
  const kvc__kfunc **memo = &pool->kfunc[memo_i < 4 ? MEMO_MOVE + memo_i : MEMO_MOVE_WIDE + memo_i - 4];
  if (!*memo) {
    kvc__spec spec = {1, {{"KVC_W", w}}};
    KVC_FORWARD(kvc__kernel_get(ctx, &kvc__k_kv_move, &spec, memo));
  }
  /* The host twin buffers one chunk of rows (sources are all read before any target is
   * written); allocating it here makes a failure HOST_OOM with nothing moved. */
  void *host_scratch = NULL;
  if (kvc_context_backend(ctx) == KVC_BACKEND_HOST) {
    size_t scratch_bytes;
    KVC_RETURN_IF(!kvc__mul_size((size_t)chunk, (size_t)widest, &scratch_bytes), ctx, KVC_ERR_INVALID_ARGUMENT,
                  "move scratch of %lld x %lld bytes overflows", (long long)chunk, (long long)widest);
    host_scratch = kvc__malloc(ctx, scratch_bytes);
    KVC_RETURN_IF(!host_scratch, ctx, KVC_ERR_HOST_OOM, "move scratch of %zu bytes", scratch_bytes);
    p.host_scratch = KVC__ADDR(host_scratch);
  }
  /* Persistent grid: as many CTAs as fit. */
  const int64_t smem = cnt * (stages * w + 8);
  p.stages = (int32_t)stages;
  const int64_t per_sm = KVC__MAX(1, sm_max / (smem + 1024));
  const int threads = tt ? tt : per_sm >= 4 ? 256 : 512;
  const int64_t resident = (int64_t)kvc__num_sms(ctx) * KVC__MIN(per_sm, 2048 / threads);
  /* Equal tile counts per CTA: k tiles each on ceil(ctas / k) CTAs, k the fewest that
   * fits the resident CTAs (a persistent grid with some CTAs owning one tile more would
   * leave most of the GPU idle at the end). */
  const int64_t per_cta = one_tile ? 1 : (ctas + resident - 1) / KVC__MAX(1, resident);
  const int64_t grid = KVC__MAX(1, (ctas + per_cta - 1) / KVC__MAX(1, per_cta));
  const kvc_status st = kvc__kernel_launch(ctx, *memo, kvc__dim((unsigned)grid, 1, 1), kvc__dim((unsigned)threads, 1, 1),
                                           (unsigned)smem, stream, &p, sizeof p);
  kvc__free(ctx, host_scratch); /* the host backend ran the twin synchronously */
  return st;
}
