/*
 * bench_mla.c — achieved bandwidth of the MLA row writer and the NSA index-K writer,
 * each next to a plain device-to-device copy of the same bytes timed in the same run.
 *
 *   set_mla     kvc_kv_pool_set_mla_kv, DeepSeek dims (R = 512, Q = 64), bf16 -> bf16
 *   set_mla_fp8 the same into an NSA fp8 pool (656-byte quantized rows)
 *   set_index   kvc_nsa_set_index_k (128 key bytes + 1 f32 scale per token), ps = 64
 *
 * Bytes counted = bytes read + bytes written by the op (indices included); the copy
 * moves the op's written bytes (read + write = twice that). Each measurement is many
 * back-to-back launches between two kvc_stream_synchronize calls (host wall clock),
 * inputs rotated over 4 copies, after a warm-up; the median of several repetitions.
 * Usage: kvc_bench_mla [--quick] [--host] [--csv FILE]   (--quick implies small sizes;
 * --host forces the host backend)
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvcache.h"
#include "bench_util.h"

static kvc_context *ctx;
static FILE *csv;
static int reps = 9, quick;

#define CHECK(call) KVB_CHECK(ctx, call)
#define ROT 4

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void *dev(size_t bytes) {
  void *p = NULL;
  CHECK(kvc_memory_alloc(ctx, bytes, &p));
  return p;
}

static void *dev_fill(size_t bytes, unsigned seed) {
  unsigned char *h = malloc(bytes);
  for (size_t i = 0; i < bytes; i++) h[i] = (unsigned char)((i * 2654435761u + seed) >> 13);
  /* keep bf16/f32 payloads finite: clear the top exponent bit of every 16-bit word */
  for (size_t i = 1; i < bytes; i += 2) h[i] &= 0x3f;
  void *d = dev(bytes);
  CHECK(kvc_memcpy_h2d(ctx, d, h, bytes, NULL));
  CHECK(kvc_stream_synchronize(ctx, NULL));
  free(h);
  return d;
}

/* Distinct random slots in [1, rows), as int64. */
static void *dev_locs(size_t n, int64_t rows, unsigned seed) {
  int64_t *perm = malloc((size_t)rows * sizeof *perm);
  for (int64_t i = 0; i < rows; i++) perm[i] = i;
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t i = rows - 1; i > 1; i--) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    int64_t j = 1 + (int64_t)(s % (uint64_t)i), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  void *d = dev(n * 8);
  CHECK(kvc_memcpy_h2d(ctx, d, perm + 1, n * 8, NULL));
  CHECK(kvc_stream_synchronize(ctx, NULL));
  free(perm);
  return d;
}

typedef void (*op_fn)(void *state, int k);

/* Median seconds per launch of `fn` over `launches` back-to-back launches. */
static double time_op(op_fn fn, void *state, int launches) {
  for (int k = 0; k < 3; k++) fn(state, k);
  CHECK(kvc_stream_synchronize(ctx, NULL));
  double t[32];
  for (int r = 0; r < reps; r++) {
    CHECK(kvc_stream_synchronize(ctx, NULL));
    double t0 = kvb_now_s();
    for (int k = 0; k < launches; k++) fn(state, k);
    CHECK(kvc_stream_synchronize(ctx, NULL));
    t[r] = (kvb_now_s() - t0) / launches;
  }
  qsort(t, (size_t)reps, sizeof *t, cmpd);
  return t[reps / 2];
}

typedef struct copy_state {
  void *dst, *src[ROT];
  size_t bytes;
} copy_state;

static void copy_op(void *st, int k) {
  copy_state *c = st;
  CHECK(kvc_memcpy_d2d(ctx, c->dst, c->src[k % ROT], c->bytes, NULL));
}

typedef struct mla_state {
  kvc_kv_pool *pool;
  void *loc[ROT], *nope[ROT], *rope[ROT];
  size_t n;
} mla_state;

static void mla_op(void *st, int k) {
  mla_state *m = st;
  CHECK(kvc_kv_pool_set_mla_kv(m->pool, 0, m->loc[k % ROT], KVC_INDEX_I64, m->n, m->nope[k % ROT], m->rope[k % ROT],
                               KVC_DTYPE_BF16, 0, 0, NULL));
}

typedef struct idx_state {
  kvc_kv_pool *pool;
  void *loc[ROT], *keys[ROT], *scales[ROT];
  size_t n;
} idx_state;

static void idx_op(void *st, int k) {
  idx_state *m = st;
  CHECK(kvc_nsa_set_index_k(m->pool, 0, m->loc[k % ROT], KVC_INDEX_I64, m->n, m->keys[k % ROT], m->scales[k % ROT],
                            NULL));
}

static void report(const char *op, size_t n, double op_s, double op_bytes, double copy_s, double copy_bytes) {
  const double gbs = op_bytes / op_s * 1e-9, cgbs = copy_bytes / copy_s * 1e-9;
  printf("%-12s %8zu %12.2f %10.1f %12.2f %10.1f %8.1f%%\n", op, n, op_s * 1e6, gbs, copy_s * 1e6, cgbs,
         100.0 * copy_s / op_s);
  if (csv)
    fprintf(csv, "%s,%zu,%.4f,%.2f,%.4f,%.2f,%.2f\n", op, n, op_s * 1e6, gbs, copy_s * 1e6, cgbs,
            100.0 * copy_s / op_s);
}

static kvc_kv_pool *make_pool(kvc_kv_pool_kind kind, kvc_dtype dtype, int64_t size) {
  kvc_kv_pool_config cfg = KVC_KV_POOL_CONFIG_INIT;
  cfg.kind = kind;
  cfg.size = size;
  cfg.page_size = 64;
  cfg.dtype = dtype;
  cfg.layer_num = 1;
  cfg.kv_lora_rank = 512;
  cfg.qk_rope_head_dim = 64;
  kvc_kv_pool *p;
  CHECK(kvc_kv_pool_create(ctx, &cfg, &p));
  return p;
}

static void bench_mla(const char *name, kvc_dtype pool_dtype, size_t n) {
  const int64_t size = (int64_t)(n * 2 + 64) / 64 * 64;
  mla_state m = {make_pool(KVC_KV_NSA, pool_dtype, size), {0}, {0}, {0}, n};
  for (int r = 0; r < ROT; r++) {
    m.loc[r] = dev_locs(n, size + 64, 17u + (unsigned)r);
    m.nope[r] = dev_fill(n * 512 * 2, 3u + (unsigned)r);
    m.rope[r] = dev_fill(n * 64 * 2, 5u + (unsigned)r);
  }
  const size_t row = pool_dtype == KVC_DTYPE_FP8_E4M3 ? 656 : 576 * 2;
  const size_t written = n * row;
  copy_state c = {dev(written), {0}, written};
  for (int r = 0; r < ROT; r++) c.src[r] = m.nope[r]; /* same size or larger than written */
  if (n * 512 * 2 < written)
    for (int r = 0; r < ROT; r++) c.src[r] = dev(written);
  const int launches = quick ? 5 : (n <= 4096 ? 400 : 60);
  const double copy_s = time_op(copy_op, &c, launches);
  const double op_s = time_op(mla_op, &m, launches);
  report(name, n, op_s, (double)(n * 576 * 2 + n * 8 + written), copy_s, 2.0 * (double)written);
  if (n * 512 * 2 < written)
    for (int r = 0; r < ROT; r++) kvc_memory_free(ctx, c.src[r]);
  kvc_memory_free(ctx, c.dst);
  for (int r = 0; r < ROT; r++) {
    kvc_memory_free(ctx, m.loc[r]);
    kvc_memory_free(ctx, m.nope[r]);
    kvc_memory_free(ctx, m.rope[r]);
  }
  kvc_kv_pool_destroy(m.pool);
}

static void bench_index(size_t n) {
  const int64_t size = (int64_t)(n * 2 + 64) / 64 * 64;
  idx_state m = {make_pool(KVC_KV_NSA, KVC_DTYPE_FP8_E4M3, size), {0}, {0}, {0}, n};
  for (int r = 0; r < ROT; r++) {
    m.loc[r] = dev_locs(n, size, 29u + (unsigned)r);
    m.keys[r] = dev_fill(n * 128, 7u + (unsigned)r);
    m.scales[r] = dev_fill(n * 4, 11u + (unsigned)r);
  }
  const size_t written = n * 132;
  copy_state c = {dev(written), {0}, written};
  for (int r = 0; r < ROT; r++) c.src[r] = dev_fill(written, 13u + (unsigned)r);
  const int launches = quick ? 5 : (n <= 4096 ? 400 : 100);
  const double copy_s = time_op(copy_op, &c, launches);
  const double op_s = time_op(idx_op, &m, launches);
  report("set_index", n, op_s, (double)(2 * written + n * 8), copy_s, 2.0 * (double)written);
  kvc_memory_free(ctx, c.dst);
  for (int r = 0; r < ROT; r++) {
    kvc_memory_free(ctx, c.src[r]);
    kvc_memory_free(ctx, m.loc[r]);
    kvc_memory_free(ctx, m.keys[r]);
    kvc_memory_free(ctx, m.scales[r]);
  }
  kvc_kv_pool_destroy(m.pool);
}

int main(int argc, char **argv) {
  int host = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = 1;
    else if (!strcmp(argv[i], "--host")) host = 1;
    else if (!strcmp(argv[i], "--csv") && i + 1 < argc) {
      csv = fopen(argv[++i], "w");
      if (!csv) {
        perror(argv[i]);
        return 1;
      }
      fprintf(csv, "op,n,op_us,op_gbs,copy_us,copy_gbs,pct_of_copy\n");
    } else {
      fprintf(stderr, "usage: %s [--quick] [--host] [--csv FILE]\n", argv[0]);
      return 2;
    }
  }
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  if (host || quick) cfg.backend = KVC_BACKEND_HOST;
  if (kvc_context_create(&cfg, &ctx) != KVC_OK) {
    fprintf(stderr, "context: %s\n", kvc_last_error(NULL));
    return 1;
  }
  if (quick) reps = 3;
  kvc_device_info info;
  memset(&info, 0, sizeof info);
  kvc_context_device_info(ctx, &info);
  printf("kvc_bench_mla on %s (%s backend)\n", kvc_context_backend(ctx) == KVC_BACKEND_CUDA ? info.name : "host",
         kvc_context_backend(ctx) == KVC_BACKEND_CUDA ? "cuda" : "host");
  printf("%-12s %8s %12s %10s %12s %10s %9s\n", "op", "N", "op us", "op GB/s", "copy us", "copy GB/s", "of copy");
  const size_t sizes[2] = {256, quick ? 2048 : 65536};
  for (int s = 0; s < 2; s++) {
    bench_mla("set_mla", KVC_DTYPE_BF16, sizes[s]);
    bench_mla("set_mla_fp8", KVC_DTYPE_FP8_E4M3, sizes[s]);
    bench_index(sizes[s]);
  }
  if (csv) fclose(csv);
  kvc_context_destroy(ctx);
  return 0;
}
