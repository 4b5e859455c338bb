/*
 * bench_mamba.c — Mamba state pool bandwidth: zero-on-alloc (clear_slots) and fork
 * (copy_from, disjoint and overlapping) over every state tensor and layer in one launch,
 * next to a plain device-to-device copy of the same bytes timed in the same run.
 *
 * Shape (Qwen3-Next-like): conv (L=36, slots, 8192, 4) bf16, temporal (L, slots, 32,
 * 128, 128) f32; 64 and 256 slots per call. GB/s counts bytes written (zero) or read +
 * written (copy). Timing: warm-up, then R back-to-back calls between two stream
 * synchronizations, median of 7 runs (wall clock; each call moves >= 150 MB, so launch
 * overhead is noise). usage: kvc_bench_mamba [--quick] [--csv FILE]
 *   --quick  host backend, tiny shape (a smoke run for CI machines)
 */
#define _POSIX_C_SOURCE 200809L
#include "kvcache.h"
#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call) KVB_CHECK(ctx, call)

typedef enum { OP_ZERO, OP_COPY, OP_COPY_OVERLAP, OP_D2D } op_kind;
static const char *op_name[] = {"zero", "fork_copy", "copy_overlap", "d2d_same_bytes"};

static kvc_context *ctx;
static kvc_mamba_pool *pool;
static int32_t *src_ids, *dst_ids;
static void *d2d_a, *d2d_b;
static size_t d2d_bytes;

static void run_op(op_kind op, size_t n) {
  switch (op) {
  case OP_ZERO: CHECK(kvc_mamba_pool_clear_slots(pool, dst_ids, n, NULL)); break;
  case OP_COPY: CHECK(kvc_mamba_pool_copy_from(pool, src_ids, dst_ids, n, NULL)); break;
  case OP_COPY_OVERLAP: CHECK(kvc_mamba_pool_copy_from(pool, src_ids + 1, src_ids, n, NULL)); break;
  case OP_D2D: CHECK(kvc_memcpy_d2d(ctx, d2d_b, d2d_a, d2d_bytes, NULL)); break;
  }
}

static double time_op(op_kind op, size_t n, int reps) {
  run_op(op, n);
  CHECK(kvc_stream_synchronize(ctx, NULL));
  double t[7];
  for (int k = 0; k < 7; k++) {
    double t0 = kvb_now_s();
    for (int r = 0; r < reps; r++) run_op(op, n);
    CHECK(kvc_stream_synchronize(ctx, NULL));
    t[k] = (kvb_now_s() - t0) / reps;
  }
  qsort(t, 7, sizeof t[0], kvb_cmp_double);
  return t[3];
}

int main(int argc, char **argv) {
  int quick = 0;
  const char *csv = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = 1;
    else if (!strcmp(argv[i], "--csv") && i + 1 < argc) csv = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--quick] [--csv FILE]\n", argv[0]);
      return 2;
    }
  }
  kvc_context_config cc = KVC_CONTEXT_CONFIG_INIT;
  cc.backend = quick ? KVC_BACKEND_HOST : KVC_BACKEND_CUDA;
  if (kvc_context_create(&cc, &ctx) != KVC_OK) {
    fprintf(stderr, "context: %s (use --quick without a GPU)\n", kvc_last_error(NULL));
    return 1;
  }
  FILE *out = csv ? fopen(csv, "w") : NULL;
  if (csv && !out) {
    perror(csv);
    return 1;
  }
  if (out) fprintf(out, "backend,slots_per_call,op,bytes,seconds,gbps,pct_of_d2d\n");
  const int32_t L = quick ? 2 : 36;
  const int64_t conv_dim = quick ? 64 : 8192, heads = quick ? 2 : 32, hd = quick ? 16 : 128;
  const size_t counts[2] = {64, 256};
  printf("%-8s %-6s %-16s %12s %10s %9s %8s\n", "backend", "slots", "op", "bytes", "us", "GB/s", "%d2d");
  for (int ci = 0; ci < 2; ci++) {
    const size_t n = counts[ci];
    kvc_mamba_shape conv = {2, 0, {conv_dim, 4, 0}};
    kvc_mamba_pool_config c = KVC_MAMBA_POOL_CONFIG_INIT;
    c.size = (int32_t)(2 * n + 2);
    c.num_layers = L;
    c.num_conv = 1;
    c.conv_shapes = &conv;
    c.conv_dtype = KVC_DTYPE_BF16;
    c.temporal_dtype = KVC_DTYPE_F32;
    c.temporal_shape[0] = heads;
    c.temporal_shape[1] = hd;
    c.temporal_shape[2] = hd;
    CHECK(kvc_mamba_pool_create(ctx, &c, &pool));
    src_ids = malloc(sizeof(int32_t) * (n + 1));
    dst_ids = malloc(sizeof(int32_t) * n);
    for (size_t i = 0; i <= n; i++) src_ids[i] = (int32_t)(1 + i);
    for (size_t i = 0; i < n; i++) dst_ids[i] = (int32_t)(n + 2 + i);
    size_t per_slot = 0;
    CHECK(kvc_mamba_pool_host_copy_bytes(pool, 1, &per_slot));
    const size_t bytes = per_slot * n; /* one copy of the rows touched */
    d2d_bytes = bytes;
    CHECK(kvc_memory_alloc(ctx, bytes, &d2d_a));
    CHECK(kvc_memory_alloc(ctx, bytes, &d2d_b));
    CHECK(kvc_memset_d8(ctx, d2d_a, 1, bytes, NULL));
    const int reps = quick ? 2 : 10;
    const double t_d2d = time_op(OP_D2D, n, reps);
    const double d2d_gbps = 2.0 * (double)bytes / t_d2d / 1e9;
    const op_kind ops[4] = {OP_D2D, OP_ZERO, OP_COPY, OP_COPY_OVERLAP};
    for (int k = 0; k < 4; k++) {
      const double t = ops[k] == OP_D2D ? t_d2d : time_op(ops[k], n, reps);
      const double moved = (ops[k] == OP_ZERO ? 1.0 : 2.0) * (double)bytes;
      const double gbps = moved / t / 1e9;
      printf("%-8s %-6zu %-16s %12zu %10.1f %9.1f %7.1f%%\n", quick ? "host" : "cuda", n, op_name[ops[k]], bytes,
             t * 1e6, gbps, 100.0 * gbps / d2d_gbps);
      if (out)
        fprintf(out, "%s,%zu,%s,%zu,%.9f,%.3f,%.2f\n", quick ? "host" : "cuda", n, op_name[ops[k]], bytes, t, gbps,
                100.0 * gbps / d2d_gbps);
    }
    kvc_memory_free(ctx, d2d_a);
    kvc_memory_free(ctx, d2d_b);
    free(src_ids);
    free(dst_ids);
    kvc_mamba_pool_destroy(pool);
  }
  if (out) fclose(out);
  kvc_context_destroy(ctx);
  return 0;
}
