/*
 * kv_segments.c — launchers of the whole-pool kernels that walk a pool described as
 * segments (kvc_kv_seg, kernels/kvc_abi.h): the move (kernels/kv_move.cu) and the host
 * offload (kernels/kv_offload.cu). The pool files (src/kv/kv_move.c, kv_offload.c) turn
 * a pool's layout into segments and fix the call's semantics (the move's chunk); the
 * shape of the launch is chosen here.
 *
 * Move shape (kernels/kv_move.cu): tiles of W bytes of a row per (segment, layer); each
 * CTA owns the same number of tiles and, chunk by chunk, stages the chunk's source bytes
 * of a tile in shared memory before writing its targets (S-deep pipeline over the CTA's
 * tiles). Shared memory = chunk * (S * W + 8) (tile buffers + staged slots): with at most
 * 256 pairs per chunk, W = 256 with S = 1 takes 66 KB, so three CTAs share a
 * multiprocessor and one CTA's reads overlap another's writes. KVC_MOVE_TUNE=
 * "W,S[,threads]" overrides the shape (benchmarks only; read once per process).
 */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>

/* KVC_MOVE_TUNE="W,S[,threads[,one]]" (benchmarks): forced tile width / depth / CTA size;
 * one = 1: one tile per CTA (a partial second wave) instead of equal tile counts. */
static void move_tune(int *w, int *s, int *t, int *one) {
  static volatile int done, tw, ts, tt, t1;
  if (!done) {
    const char *e = getenv("KVC_MOVE_TUNE");
    int a = 0, b = 0, c = 0, d = 0;
    if (e && sscanf(e, "%d,%d,%d,%d", &a, &b, &c, &d) >= 2 &&
        (a == 16 || a == 32 || a == 64 || a == 128 || a == 256 || a == 512) && b >= 1 && b <= 4) {
      tw = a;
      ts = b;
      tt = (c == 256 || c == 512) ? c : 0;
      t1 = d == 1;
    }
    done = 1;
  }
  *w = tw, *s = ts, *t = tt, *one = t1;
}

kvc_status kvc__kv_move_launch(kvc_context *ctx, const char *fn, kvc_p_kv_move *p,
                               const kvc__kfunc *memo[KVC__KV_MOVE_VARIANTS], kvc_stream stream) {
  const int ns = p->nseg;
  int64_t widest = 16;
  for (int i = 0; i < ns; i++) widest = KVC__MAX(widest, p->seg[i].row_bytes);
  int64_t wcap = 16;
  while (wcap < widest && wcap < 512) wcap *= 2;
  const int64_t chunk = p->chunk, cnt = chunk;

  /* Shape: (W, S) from the device's shared memory; cnt * (S * W + 8) bytes. */
  int64_t blk_max, sm_max;
  kvc__smem_limits(ctx, &blk_max, &sm_max);
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
    p->seg[i].tiles = (int32_t)((p->seg[i].row_bytes + w - 1) / w);
    p->cta_first[i] = (int32_t)ctas;
    ctas += (int64_t)p->seg[i].layers * p->seg[i].tiles;
  }
  p->cta_first[ns] = (int32_t)ctas;
  if (ctas > INT32_MAX) return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "pool too large for one move launch");

  /* The fused store-and-load (S = 1 only) paid where few chunks run, N = 1024 81.8 ->
   * 83.0% of a copy, and lost at N = 8192 even as a branch in the same kernel (run 15):
   * the same split as the CTA size below, and its own compiled variant. */
  const int fuse = stages == 1 && p->n <= 8 * chunk;
  /* memo[] holds one kernel per tile width, 16 .. 512, plain then fused (S is a kernel
   * parameter, so it needs no variant). */
  const int memo_i = (w == 16    ? 0
                      : w == 32  ? 1
                      : w == 64  ? 2
                      : w == 128 ? 3
                      : w == 256 ? 4
                                 : 5) +
                     (fuse ? KVC__KV_MOVE_WIDTHS : 0);
  const kvc__kfunc **f = &memo[memo_i];
  if (!*f) {
    kvc__spec spec = {2, {{"KVC_W", w}, {"KVC_MOVE_FUSE", fuse}}};
    KVC_FORWARD(kvc__kernel_get(ctx, &kvc__k_kv_move, &spec, f));
  }
  /* The host twin buffers one chunk of rows (sources are all read before any target is
   * written); taking it before the launch makes a failure HOST_OOM with nothing moved. */
  void *host_scratch;
  KVC_FORWARD(kvc__kernel_twin_scratch(ctx, fn, "move scratch", (size_t)chunk, (size_t)widest, &host_scratch));
  p->host_scratch = KVC__ADDR(host_scratch);
  /* Persistent grid: as many CTAs as fit. */
  const int64_t smem = cnt * (stages * w + 8);
  p->stages = (int32_t)stages;
  const int64_t per_sm = KVC__MAX(1, sm_max / (smem + 1024));
  /* 512 threads keep more bytes in flight per CTA where few chunks run (N = 1024: 81%
   * of a copy against 80% with 256); with many chunks 256 threads do better (N = 8192:
   * 88.0-88.2% against 87.0-87.3%; run 13 in bench/RESULTS.md, three rounds each). The
   * threshold sits between the two measured sizes. */
  const int threads = tt ? tt : (per_sm >= 4 || p->n > 8 * chunk) ? 256 : 512;
  const int64_t resident = (int64_t)kvc__num_sms(ctx) * KVC__MIN(per_sm, 2048 / threads);
  /* Equal tile counts per CTA: k tiles each on ceil(ctas / k) CTAs, k the fewest that
   * fits the resident CTAs (a persistent grid with some CTAs owning one tile more would
   * leave most of the GPU idle at the end). */
  const int64_t per_cta = one_tile ? 1 : (ctas + resident - 1) / KVC__MAX(1, resident);
  const int64_t grid = KVC__MAX(1, (ctas + per_cta - 1) / KVC__MAX(1, per_cta));
  const kvc_status st = kvc__kernel_launch(ctx, *f, kvc__dim((unsigned)grid, 1, 1), kvc__dim((unsigned)threads, 1, 1),
                                           (unsigned)smem, stream, p, sizeof *p);
  kvc__free(ctx, host_scratch); /* the host backend ran the twin synchronously */
  p->host_scratch = 0;
  return st;
}

kvc_status kvc__kv_offload_launch(kvc_context *ctx, const kvc_p_kv_offload *p, const kvc__kfunc **memo,
                                  kvc_stream stream) {
  if (!*memo) KVC_FORWARD(kvc__kernel_get(ctx, &kvc__k_kv_offload, NULL, memo));
  /* One warp per row of a layer of a segment. */
  const int64_t warps_per_block = 8;
  int64_t blocks = (p->total_rows + warps_per_block - 1) / warps_per_block;
  blocks = KVC__MIN(blocks, (int64_t)kvc__num_sms(ctx) * 16);
  return kvc__kernel_launch(ctx, *memo, kvc__dim((unsigned)blocks, 1, 1), kvc__dim(256, 1, 1), 0, stream, p, sizeof *p);
}
