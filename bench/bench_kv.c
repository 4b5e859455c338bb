/*
 * bench_kv.c — bandwidth of the KV row kernels against a plain device-to-device copy of
 * the same bytes timed in the same run:
 *   set_kv  Llama-3-8B rows (8 heads x 128 bf16 = 2048 B per K and per V row),
 *           N = 1, 256, 8192, 65536; bytes = 2 * N * 2048 read and written
 *   move    32 layers of K and V, N = 64, 1024, 8192; bytes = 64 * N * 2048; disjoint
 *           src / tgt sets ("move") and a cycle over the source set, every target also a
 *           source ("move_overlap"); both take the same staged kernel
 * plus the host microseconds per set_kv call at N = 256 (median, no synchronisation), next
 * to an empty kernel launched through the same path and empty kernels launched straight
 * through cuLaunchKernel with 0 to 32000 parameter bytes (this machine's floor, and what
 * a large parameter block adds to it), on the legacy default stream and on a
 * non-blocking stream (created through libcuda when it loads); and per call when 32 calls
 * are captured in a CUDA graph and replayed (the engine's decode path).
 *
 * Timing: `reps` back-to-back launches between two kvc_stream_synchronize calls,
 * divided by reps (no event API is public); 7 such batches, median. Inputs rotate over
 * several sets (and layers) so L2 (50 MB on H200) does not hold them. GB/s counts bytes
 * read + bytes written. --quick: tiny sizes (host backend CI); --csv FILE writes rows.
 * --move-only skips set_kv (KVC_MOVE_TUNE="W,S[,threads]" then compares move shapes).
 *   usage: kvc_bench_kv [--quick] [--host] [--move-only] [--csv FILE]
 */
#define _POSIX_C_SOURCE 199309L
#include "kvcache.h"
#include "bench_util.h"
#include "ops/ops.h" /* internal: the empty-launch baseline */

#define CHECK(call) KVB_CHECK(ctx, call)

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, kvb_cmp_double);
  return v[n / 2];
}

static uint64_t rng = 0x1234567;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* n distinct slots in [1, limit] (partial Fisher-Yates over a host permutation). */
static int64_t *distinct_slots(int64_t n, int64_t limit) {
  int64_t *perm = malloc((size_t)limit * sizeof *perm);
  for (int64_t i = 0; i < limit; i++) perm[i] = i + 1;
  for (int64_t i = 0; i < n; i++) {
    int64_t j = i + (int64_t)(next() % (uint64_t)(limit - i));
    int64_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  return perm;
}

static kvc_context *ctx;
static FILE *csv;

#define BATCHES 7
#define SETS 4

typedef struct op_ctx {
  kvc_kv_pool *pool;
  int layers;
  void *k[SETS], *v[SETS], *loc[SETS], *loc2[SETS], *loc3[SETS];
  void *csrc[SETS], *cdst[SETS];
  size_t n, copy_bytes;
  int kind; /* 0 set_kv, 1 move, 2 copy, 3 move with overlapping sets */
  kvc_stream stream;
} op_ctx;

/* The floor on this machine: an empty kernel (the decode plan kernel with no requests and
 * a 2-word payload: 56-64 bytes of parameters, one warp that returns) launched through the
 * same path as every library kernel, kvc__kernel_launch -> cuLaunchKernel. */
static void empty_launch(kvc_stream stream) {
  static const kvc__kfunc *empty;
  if (!empty) {
    const kvc__spec spec = {1, {{"KVC_INLINE_WORDS", 2}}};
    CHECK(kvc__kernel_get(ctx, &kvc__k_plan_decode, &spec, &empty));
  }
  struct {
    kvc_p_plan_decode h;
    uint32_t words[2];
  } blk;
  memset(&blk, 0, sizeof blk);
  CHECK(kvc__kernel_launch(ctx, empty, kvc__dim(1, 1, 1), kvc__dim(32, 1, 1), 0, stream, &blk, sizeof blk));
}

/* The driver's own floor: empty kernels (JIT-compiled PTX) launched straight through
 * cuLaunchKernel, none of the library's code on the path; kvb_p0 takes no parameters,
 * kvb_pN one parameter block of N bytes (the planned allocation kernels carry their
 * per-step data this way, up to 32 KB). */
static const int raw_param_bytes[] = {0, 256, 1024, 2048, 4096, 8192, 16384, 32000};
#define RAW_KERNELS (int)(sizeof raw_param_bytes / sizeof raw_param_bytes[0])
static int raw_kernel; /* which one raw_launch() launches */

static void raw_launch(kvc_stream stream) {
  static kvb_cuda cu;
  static void *fn[RAW_KERNELS];
  static uint64_t params[32000 / 8];
  if (!fn[0]) {
    static char ptx[4096];
    int at = snprintf(ptx, sizeof ptx,
                      ".version 8.1\n.target sm_70\n.address_size 64\n"
                      ".visible .entry kvb_p0()\n{\n  ret;\n}\n");
    for (int k = 1; k < RAW_KERNELS; k++)
      at += snprintf(ptx + at, sizeof ptx - (size_t)at,
                     ".visible .entry kvb_p%d(.param .align 8 .b8 p[%d])\n{\n  ret;\n}\n", raw_param_bytes[k],
                     raw_param_bytes[k]);
    void *mod = NULL;
    if (!kvb_cuda_load(&cu) || cu.module_load_data(&mod, ptx)) {
      fprintf(stderr, "raw launch: driver entry points or the PTX module failed\n");
      exit(1);
    }
    for (int k = 0; k < RAW_KERNELS; k++) {
      char name[32];
      snprintf(name, sizeof name, "kvb_p%d", raw_param_bytes[k]);
      if (cu.module_get_function(&fn[k], mod, name)) {
        fprintf(stderr, "raw launch: no %s\n", name);
        exit(1);
      }
    }
  }
  void *args[1] = {params};
  if (cu.launch_kernel(fn[raw_kernel], 1, 1, 1, 32, 1, 1, 0, stream, raw_kernel ? args : NULL, NULL)) {
    fprintf(stderr, "raw launch: cuLaunchKernel failed (%d parameter bytes)\n", raw_param_bytes[raw_kernel]);
    exit(1);
  }
}

/* A CU_STREAM_NON_BLOCKING stream from libcuda (engines launch on their own streams), or
 * NULL on the host backend / without the driver. Never destroyed (process lifetime). */
static kvc_stream nonblocking_stream(void) {
  kvb_cuda cu;
  if (kvc_context_backend(ctx) != KVC_BACKEND_CUDA || !kvb_cuda_load(&cu)) return NULL;
  void *stream = NULL;
  if (cu.stream_create(&stream, 1u /* CU_STREAM_NON_BLOCKING */) != 0) return NULL;
  return stream;
}

static void run_op(op_ctx *o, int i) {
  const int s = i % SETS;
  if (o->kind == 0)
    CHECK(kvc_kv_pool_set_kv(o->pool, i % o->layers, o->loc[s], KVC_INDEX_I64, o->n, o->k[s], o->v[s], KVC_DTYPE_BF16,
                             0, 0, NULL, 1.0f, NULL, 1.0f, o->stream));
  else if (o->kind == 1) CHECK(kvc_kv_pool_move(o->pool, o->loc2[s], o->loc[s], KVC_INDEX_I64, o->n, NULL));
  else if (o->kind == 3) CHECK(kvc_kv_pool_move(o->pool, o->loc3[s], o->loc[s], KVC_INDEX_I64, o->n, NULL));
  else if (o->kind == 4) empty_launch(o->stream);
  else if (o->kind == 5) raw_launch(o->stream);
  else CHECK(kvc_memcpy_d2d(ctx, o->cdst[s], o->csrc[s], o->copy_bytes, NULL));
}

/* Median host seconds per call of `calls` back-to-back calls, in microseconds. */
static double host_us_per_call(op_ctx *o, int calls) {
  double t[BATCHES];
  run_op(o, 0); /* resolves the kernel */
  for (int b = 0; b < BATCHES; b++) {
    CHECK(kvc_stream_synchronize(ctx, o->stream));
    double t0 = kvb_now_s();
    for (int i = 0; i < calls; i++) run_op(o, i);
    t[b] = (kvb_now_s() - t0) / calls;
  }
  CHECK(kvc_stream_synchronize(ctx, o->stream));
  return median(t, BATCHES) * 1e6;
}

/* Host microseconds per set_kv call when an engine captures them in its forward graph:
 * GRAPH_CALLS calls (one per layer of a 32-layer forward, over the pool's layers and the
 * input sets) captured once on `stream`, the graph replayed back to back (median over
 * batches of 20 replays, no synchronisation inside the timing), divided by GRAPH_CALLS. */
#define GRAPH_CALLS 32
static double graph_us_per_set_kv(op_ctx *o, const kvb_cuda *cu, kvc_stream stream) {
  void *graph = NULL, *exec = NULL;
  o->stream = stream;
  o->kind = 0;
  run_op(o, 0); /* resolves the kernel outside the capture */
  CHECK(kvc_stream_synchronize(ctx, stream));
  if (cu->begin_capture(stream, 2 /* relaxed */)) return -1;
  for (int i = 0; i < GRAPH_CALLS; i++) run_op(o, i);
  if (cu->end_capture(stream, &graph) || cu->instantiate(&exec, graph, 0)) return -1;
  double t[BATCHES];
  for (int b = 0; b < BATCHES; b++) {
    CHECK(kvc_stream_synchronize(ctx, stream));
    const double t0 = kvb_now_s();
    for (int r = 0; r < 20; r++)
      if (cu->graph_launch(exec, stream)) return -1;
    t[b] = (kvb_now_s() - t0) / (20.0 * GRAPH_CALLS);
  }
  CHECK(kvc_stream_synchronize(ctx, stream));
  if (cu->exec_destroy(exec) || cu->graph_destroy(graph)) return -1;
  return median(t, BATCHES) * 1e6;
}

/* Median seconds per call. */
static double time_op(op_ctx *o, int reps) {
  double t[BATCHES];
  for (int i = 0; i < 3; i++) run_op(o, i); /* warm-up (compiles) */
  CHECK(kvc_stream_synchronize(ctx, NULL));
  for (int b = 0; b < BATCHES; b++) {
    double t0 = kvb_now_s();
    for (int i = 0; i < reps; i++) run_op(o, i);
    CHECK(kvc_stream_synchronize(ctx, NULL));
    t[b] = (kvb_now_s() - t0) / reps;
  }
  return median(t, BATCHES);
}

static void report(const char *op, size_t n, double bytes, double t_op, double t_copy) {
  double gbs = bytes / t_op * 1e-9, cgbs = bytes / t_copy * 1e-9;
  printf("%-12s %8zu %12.0f %10.2f %10.1f %10.1f %8.1f%%\n", op, n, bytes, t_op * 1e6, gbs, cgbs, 100.0 * gbs / cgbs);
  if (csv) fprintf(csv, "%s,%zu,%.0f,%.3f,%.2f,%.2f,%.2f\n", op, n, bytes, t_op * 1e6, gbs, cgbs, 100.0 * gbs / cgbs);
}

static void *dev_upload(const void *h, size_t bytes) {
  void *d;
  CHECK(kvc_memory_alloc(ctx, bytes, &d));
  CHECK(kvc_memcpy_h2d(ctx, d, h, bytes, NULL));
  CHECK(kvc_stream_synchronize(ctx, NULL));
  return d;
}

/* The pool both sections time: BF16, 8 heads of 128 (2048-byte rows), `size` slots. */
static kvc_kv_pool *bf16_pool_create(int64_t size, int layers) {
  kvc_kv_pool_config c = KVC_KV_POOL_CONFIG_INIT;
  c.dtype = KVC_DTYPE_BF16;
  c.head_num = 8;
  c.head_dim = 128;
  c.size = size;
  c.layer_num = layers;
  kvc_kv_pool *pool;
  CHECK(kvc_kv_pool_create(ctx, &c, &pool));
  return pool;
}

/* An operation of n slots over `pool`: every buffer, kind and stream zero; the section
 * fills in its input sets. */
static void op_ctx_init(op_ctx *o, kvc_kv_pool *pool, int layers, size_t n) {
  memset(o, 0, sizeof *o);
  o->pool = pool;
  o->layers = layers;
  o->n = n;
}

int main(int argc, char **argv) {
  int quick = 0, host = 0, move_only = 0;
  const char *csv_path = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = 1;
    else if (!strcmp(argv[i], "--host")) host = 1;
    else if (!strcmp(argv[i], "--move-only")) move_only = 1;
    else if (!strcmp(argv[i], "--csv") && i + 1 < argc) csv_path = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--quick] [--host] [--move-only] [--csv FILE]\n", argv[0]);
      return 2;
    }
  }
  kvc_context_config cc = KVC_CONTEXT_CONFIG_INIT;
  if (host) cc.backend = KVC_BACKEND_HOST;
  CHECK(kvc_context_create(&cc, &ctx));
  const int cuda = kvc_context_backend(ctx) == KVC_BACKEND_CUDA;
  if (!cuda) quick = 1;
  if (csv_path) {
    csv = fopen(csv_path, "w");
    if (!csv) return 1;
    fprintf(csv, "op,n,bytes,us,gbps,copy_gbps,pct_of_copy\n");
  }
  printf("backend %s%s\n", cuda ? "cuda" : "host", quick ? " (quick)" : "");
  printf("%-12s %8s %12s %10s %10s %10s %9s\n", "op", "N", "bytes(R+W)", "us/call", "GB/s", "copyGB/s", "of copy");

  const int64_t row = 2048; /* 8 x 128 bf16 */
  /* --- set_kv --------------------------------------------------------------------- */
  if (!move_only) {
    const size_t ns_full[] = {1, 256, 8192, 65536}, ns_quick[] = {1, 256};
    const size_t *ns = quick ? ns_quick : ns_full;
    const int nn = quick ? 2 : 4;
    const int64_t size = quick ? 1024 : 262144;
    const int layers = quick ? 1 : 4;
    kvc_kv_pool *pool = bf16_pool_create(size, layers);
    for (int a = 0; a < nn; a++) {
      op_ctx o;
      op_ctx_init(&o, pool, layers, ns[a]);
      o.copy_bytes = 2 * o.n * (size_t)row;
      uint8_t *junk = calloc(1, o.n * (size_t)row);
      for (int s = 0; s < SETS; s++) {
        int64_t *sl = distinct_slots((int64_t)o.n, size);
        o.loc[s] = dev_upload(sl, o.n * 8);
        free(sl);
        o.k[s] = dev_upload(junk, o.n * (size_t)row);
        o.v[s] = dev_upload(junk, o.n * (size_t)row);
        CHECK(kvc_memory_alloc(ctx, o.copy_bytes, &o.csrc[s]));
        CHECK(kvc_memory_alloc(ctx, o.copy_bytes, &o.cdst[s]));
      }
      free(junk);
      const int reps = quick ? 20 : (o.n >= 8192 ? 50 : 500);
      o.kind = 0;
      double t_op = time_op(&o, reps);
      o.kind = 2;
      double t_copy = time_op(&o, reps);
      report("set_kv", o.n, 2.0 * (double)o.copy_bytes, t_op, t_copy);
      if (o.n == 256) {
        /* host cost per call: launches only, no synchronisation inside the timing */
        kvc_stream streams[2] = {NULL, nonblocking_stream()};
        for (int k = 0; k < 2; k++) {
          if (k == 1 && !streams[1]) break;
          const char *sname = k ? "non-blocking stream" : "default stream";
          o.stream = streams[k];
          o.kind = 0;
          const double us = host_us_per_call(&o, quick ? 50 : 200);
          printf("set_kv host time per call at N=256 (%s): %.2f us\n", sname, us);
          if (csv) fprintf(csv, "set_kv_host_us%s,256,0,%.3f,0,0,0\n", k ? "_nonblocking" : "", us);
          o.kind = 4;
          const double floor_us = host_us_per_call(&o, quick ? 50 : 200);
          printf("empty kernel launch (%zu-byte parameters) host time per call (%s): %.2f us\n",
                 sizeof(kvc_p_plan_decode) + 8, sname, floor_us);
          if (csv) fprintf(csv, "empty_launch_host_us%s,1,0,%.3f,0,0,0\n", k ? "_nonblocking" : "", floor_us);
          if (!cuda) continue;
          o.kind = 5;
          for (raw_kernel = 0; raw_kernel < (k ? RAW_KERNELS : 1); raw_kernel++) {
            const double raw_us = host_us_per_call(&o, quick ? 50 : 200);
            printf("empty kernel, %d parameter bytes, straight cuLaunchKernel (%s): %.2f us\n",
                   raw_param_bytes[raw_kernel], sname, raw_us);
            if (csv)
              fprintf(csv, "raw_launch_host_us%s,1,%d,%.3f,0,0,0\n", k ? "_nonblocking" : "",
                      raw_param_bytes[raw_kernel], raw_us);
          }
          raw_kernel = 0;
        }
        kvb_cuda cu;
        if (streams[1] && kvb_cuda_load(&cu)) {
          const double g_us = graph_us_per_set_kv(&o, &cu, streams[1]);
          if (g_us < 0) {
            fprintf(stderr, "set_kv graph capture or replay failed\n");
            return 1;
          }
          printf("set_kv host time per call at N=256, captured in a graph of %d and replayed: %.3f us\n", GRAPH_CALLS,
                 g_us);
          if (csv) fprintf(csv, "set_kv_graph_host_us,256,0,%.3f,0,0,0\n", g_us);
        }
        o.stream = NULL;
      }
      for (int s = 0; s < SETS; s++) {
        kvc_memory_free(ctx, o.loc[s]);
        kvc_memory_free(ctx, o.k[s]);
        kvc_memory_free(ctx, o.v[s]);
        kvc_memory_free(ctx, o.csrc[s]);
        kvc_memory_free(ctx, o.cdst[s]);
      }
    }
    kvc_kv_pool_destroy(pool);
  }
  /* --- move ----------------------------------------------------------------------- */
  {
    const size_t ns_full[] = {64, 1024, 8192}, ns_quick[] = {64};
    const size_t *ns = quick ? ns_quick : ns_full;
    const int nn = quick ? 1 : 3;
    const int layers = quick ? 2 : 32;
    const int64_t size = quick ? 512 : 32768;
    kvc_kv_pool *pool = bf16_pool_create(size, layers);
    for (int a = 0; a < nn; a++) {
      op_ctx o;
      op_ctx_init(&o, pool, layers, ns[a]);
      o.copy_bytes = (size_t)(2 * layers) * o.n * (size_t)row;
      for (int s = 0; s < SETS; s++) {
        int64_t *sl = distinct_slots(2 * (int64_t)o.n, size); /* disjoint src / tgt */
        o.loc[s] = dev_upload(sl, o.n * 8);
        o.loc2[s] = dev_upload(sl + o.n, o.n * 8);
        int64_t first = sl[0];
        memmove(sl, sl + 1, (o.n - 1) * 8); /* tgt[i] = src[i + 1], the last -> src[0] */
        sl[o.n - 1] = first;
        o.loc3[s] = dev_upload(sl, o.n * 8);
        free(sl);
        CHECK(kvc_memory_alloc(ctx, o.copy_bytes, &o.csrc[s]));
        CHECK(kvc_memory_alloc(ctx, o.copy_bytes, &o.cdst[s]));
      }
      const int reps = quick ? 5 : (o.n >= 8192 ? 10 : 50);
      o.kind = 1;
      double t_op = time_op(&o, reps);
      o.kind = 2;
      double t_copy = time_op(&o, reps);
      report("move", o.n, 2.0 * (double)o.copy_bytes, t_op, t_copy);
      o.kind = 3;
      double t_ov = time_op(&o, reps);
      report("move_overlap", o.n, 2.0 * (double)o.copy_bytes, t_ov, t_copy);
      for (int s = 0; s < SETS; s++) {
        kvc_memory_free(ctx, o.loc[s]);
        kvc_memory_free(ctx, o.loc2[s]);
        kvc_memory_free(ctx, o.loc3[s]);
        kvc_memory_free(ctx, o.csrc[s]);
        kvc_memory_free(ctx, o.cdst[s]);
      }
    }
    kvc_kv_pool_destroy(pool);
  }
  if (csv) fclose(csv);
  kvc_context_destroy(ctx);
  return 0;
}
