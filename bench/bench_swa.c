/*
 * bench_swa.c — host microseconds per scheduler call of the SWA allocator and the hybrid
 * req pool, next to a naive version of the same step measured in the same run.
 *
 *   swa_decode : kvc_swa_allocator_alloc_decode, batch 256, page 64 (both sides + the
 *                req_to_token write + ONE mapping launch)  vs  per request: full and SWA
 *                kvc_allocator_alloc_decode (bs 1, each with its own launch) + one
 *                mapping upload per request; and the same step right after a free of
 *                4 pages inside a deferred-zero scope (an SWA radix cache's eviction or
 *                finished request leaves such a queue), which the step carries
 *   swa_extend : kvc_swa_allocator_alloc_extend, batch 256 fresh requests of 1..256
 *                tokens, page 64  vs  the same per request
 *   hybrid     : kvc_hybrid_req_pool_alloc of 64 requests (rows + Mamba slots with the
 *                zeroing launch + ONE mapping launch)  vs  per request: row alloc, Mamba
 *                alloc(1) (one zeroing launch each) and a mapping upload
 * State is restored untimed between repetitions (frees / re-setup). Median and p99.
 * Usage: kvc_bench_swa [--quick] [--host] [--csv FILE]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

static kvc_context *ctx;
static int reps = 2000, warm = 100;
static FILE *csv;

#define CHECK(call) KVB_CHECK(ctx, call)
#define now_us kvb_now_us

static void report(const char *name, const char *variant, int batch, int ps, double *t, int n) {
  kvb_report(csv, name, variant, batch, ps, t, n);
}

#define BS 256
#define PS 64
#define WIDTH 4096

static kvc_req_to_token_pool *make_rp(int32_t n) {
  kvc_req_to_token_pool_config c = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  c.size = n, c.max_context_len = WIDTH;
  kvc_req_to_token_pool *p;
  CHECK(kvc_req_to_token_pool_create(ctx, &c, &p));
  return p;
}

/* --- decode ------------------------------------------------------------------------- */

static void bench_decode(void) {
  const int64_t size = (int64_t)BS * WIDTH + PS;
  kvc_swa_allocator_config c = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  c.size_full = size, c.size_swa = size, c.page_size = PS;
  kvc_swa_allocator *a, *q;
  CHECK(kvc_swa_allocator_create(ctx, &c, &a));
  c.size_full += 4 * PS, c.size_swa += 4 * PS; /* room for the queued free's 4 pages */
  CHECK(kvc_swa_allocator_create(ctx, &c, &q));
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = KVC_ALLOCATOR_PAGED, ac.size = size, ac.page_size = PS;
  kvc_allocator *nf, *ns;
  CHECK(kvc_allocator_create(ctx, &ac, &nf));
  CHECK(kvc_allocator_create(ctx, &ac, &ns));
  int64_t *nmap_dev;
  CHECK(kvc_memory_alloc(ctx, (size_t)(size + PS + 1) * 8, (void **)&nmap_dev));
  int64_t *nmap_host = calloc((size_t)(size + PS + 1), 8);
  kvc_req_to_token_pool *rp = make_rp(BS), *rp2 = make_rp(BS), *rpq = make_rp(BS);
  int32_t rows[BS] = {0}, rows2[BS] = {0}, rowsq[BS] = {0};
  CHECK(kvc_req_to_token_pool_alloc(rp, BS, rows));
  CHECK(kvc_req_to_token_pool_alloc(rp2, BS, rows2));
  CHECK(kvc_req_to_token_pool_alloc(rpq, BS, rowsq));
  int64_t victim[4 * PS];
  const int64_t vpre = 0, vseq = 4 * PS;
  int64_t *out_dev;
  CHECK(kvc_memory_alloc(ctx, BS * 8, (void **)&out_dev));
  int64_t seq[BS], pre[BS], outh[BS], last_f[BS], last_w[BS];
  const int total = warm + reps;
  double *t1 = malloc(sizeof(double) * (size_t)total), *t2 = malloc(sizeof(double) * (size_t)total);
  double *t3 = malloc(sizeof(double) * (size_t)total);
  int64_t len = WIDTH; /* forces a setup on the first step */
  for (int it = 0; it < total; it++) {
    if (len + 1 >= WIDTH) { /* untimed re-setup: fresh prompts of 100 tokens */
      CHECK(kvc_swa_allocator_clear(a, NULL));
      CHECK(kvc_swa_allocator_clear(q, NULL));
      CHECK(kvc_allocator_clear(nf));
      CHECK(kvc_allocator_clear(ns));
      memset(nmap_host, 0, (size_t)(size + PS + 1) * 8);
      len = 100;
      for (int i = 0; i < BS; i++) pre[i] = 0, seq[i] = len;
      CHECK(kvc_swa_allocator_alloc_extend(a, BS, pre, seq, NULL, rp, rows, NULL, NULL, NULL, NULL));
      CHECK(kvc_swa_allocator_alloc_extend(q, BS, pre, seq, NULL, rpq, rowsq, NULL, NULL, NULL, NULL));
      CHECK(kvc_allocator_alloc_extend(nf, BS, pre, seq, NULL, rp2, rows2, NULL, NULL, NULL, NULL));
      CHECK(kvc_allocator_alloc_extend(ns, BS, pre, seq, NULL, NULL, NULL, NULL, NULL, NULL, NULL));
      for (int i = 0; i < BS; i++) last_w[i] = last_f[i] = kvc_req_to_token_pool_row(rp2, rows2[i])[len - 1];
      CHECK(kvc_stream_synchronize(ctx, NULL));
    }
    for (int i = 0; i < BS; i++) seq[i] = len + 1;
    double t0 = now_us();
    CHECK(kvc_swa_allocator_alloc_decode(a, BS, seq, NULL, rp, rows, outh, out_dev, NULL));
    double t_1 = now_us();
    for (int i = 0; i < BS; i++) { /* naive: per request, both sides, one upload each */
      int64_t f, w;
      CHECK(kvc_allocator_alloc_decode(nf, 1, &seq[i], &last_f[i], rp2, &rows2[i], &f, out_dev + i, NULL));
      CHECK(kvc_allocator_alloc_decode(ns, 1, &seq[i], &last_w[i], NULL, NULL, &w, NULL, NULL));
      nmap_host[f] = w;
      CHECK(kvc_memcpy_h2d(ctx, nmap_dev + f, &nmap_host[f], 8, NULL));
      last_f[i] = f, last_w[i] = w;
    }
    double t_2 = now_us();
    /* untimed: 4 pages handed out and freed in a scope, their mapping zero queued */
    CHECK(kvc_swa_allocator_alloc_extend(q, 1, &vpre, &vseq, NULL, NULL, NULL, NULL, victim, NULL, NULL));
    CHECK(kvc_swa_allocator_defer_zero_begin(q));
    CHECK(kvc_swa_allocator_free(q, victim, 4 * PS, NULL));
    const double t_3 = now_us();
    CHECK(kvc_swa_allocator_alloc_decode(q, BS, seq, NULL, rpq, rowsq, outh, out_dev, NULL));
    t3[it] = now_us() - t_3;
    CHECK(kvc_swa_allocator_defer_zero_end(q, NULL)); /* launches what the step did not carry */
    t1[it] = t_1 - t0, t2[it] = t_2 - t_1;
    len++;
    if (it % 64 == 0) CHECK(kvc_stream_synchronize(ctx, NULL));
  }
  CHECK(kvc_stream_synchronize(ctx, NULL));
  report("swa_decode", "kvc_swa_allocator_alloc_decode", BS, PS, t1 + warm, reps);
  report("swa_decode", "naive: per-request calls + uploads", BS, PS, t2 + warm, reps);
  report("swa_decode", "after a queued free of 4 pages", BS, PS, t3 + warm, reps);
  free(t1), free(t2), free(t3), free(nmap_host);
  kvc_memory_free(ctx, nmap_dev), kvc_memory_free(ctx, out_dev);
  kvc_allocator_destroy(nf), kvc_allocator_destroy(ns);
  kvc_req_to_token_pool_destroy(rp), kvc_req_to_token_pool_destroy(rp2), kvc_req_to_token_pool_destroy(rpq);
  kvc_swa_allocator_destroy(a), kvc_swa_allocator_destroy(q);
}

/* --- extend ------------------------------------------------------------------------- */

static void bench_extend(void) {
  const int64_t size = (int64_t)BS * 512 + PS;
  kvc_swa_allocator_config c = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  c.size_full = size, c.size_swa = size, c.page_size = PS;
  kvc_swa_allocator *a;
  CHECK(kvc_swa_allocator_create(ctx, &c, &a));
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = KVC_ALLOCATOR_PAGED, ac.size = size, ac.page_size = PS;
  kvc_allocator *nf, *ns;
  CHECK(kvc_allocator_create(ctx, &ac, &nf));
  CHECK(kvc_allocator_create(ctx, &ac, &ns));
  int64_t *nmap_dev, *out_dev;
  CHECK(kvc_memory_alloc(ctx, (size_t)(size + PS + 1) * 8, (void **)&nmap_dev));
  CHECK(kvc_memory_alloc(ctx, (size_t)BS * 256 * 8, (void **)&out_dev));
  int64_t *nmap_host = calloc((size_t)(size + PS + 1), 8);
  kvc_req_to_token_pool *rp = make_rp(BS), *rp2 = make_rp(BS);
  int32_t rows[BS] = {0}, rows2[BS] = {0};
  CHECK(kvc_req_to_token_pool_alloc(rp, BS, rows));
  CHECK(kvc_req_to_token_pool_alloc(rp2, BS, rows2));
  int64_t pre[BS], seq[BS];
  int64_t *outh = malloc((size_t)BS * 256 * 8), *fw = malloc(256 * 8), *ww = malloc(256 * 8);
  uint64_t rng = 12345;
  int64_t tokens = 0;
  for (int i = 0; i < BS; i++) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    pre[i] = 0, seq[i] = 1 + (int64_t)((rng >> 33) % 256);
    tokens += seq[i];
  }
  const int total = warm + reps;
  double *t1 = malloc(sizeof(double) * (size_t)total), *t2 = malloc(sizeof(double) * (size_t)total);
  for (int it = 0; it < total; it++) {
    double t0 = now_us();
    CHECK(kvc_swa_allocator_alloc_extend(a, BS, pre, seq, NULL, rp, rows, NULL, outh, out_dev, NULL));
    double t_1 = now_us();
    int64_t o = 0;
    for (int i = 0; i < BS; i++) {
      CHECK(kvc_allocator_alloc_extend(nf, 1, &pre[i], &seq[i], NULL, rp2, &rows2[i], NULL, fw, out_dev + o, NULL));
      CHECK(kvc_allocator_alloc_extend(ns, 1, &pre[i], &seq[i], NULL, NULL, NULL, NULL, ww, NULL, NULL));
      for (int64_t j = 0; j < seq[i]; j++) nmap_host[fw[j]] = ww[j];
      /* pages are contiguous runs: one upload per page */
      for (int64_t j = 0; j < seq[i]; j += PS) {
        const int64_t e = seq[i] - j < PS ? seq[i] - j : PS;
        CHECK(kvc_memcpy_h2d(ctx, nmap_dev + fw[j], &nmap_host[fw[j]], (size_t)e * 8, NULL));
      }
      o += seq[i];
    }
    double t_2 = now_us();
    t1[it] = t_1 - t0, t2[it] = t_2 - t_1;
    CHECK(kvc_stream_synchronize(ctx, NULL));
    CHECK(kvc_swa_allocator_free(a, outh, (size_t)tokens, NULL)); /* untimed */
    CHECK(kvc_swa_allocator_clear(a, NULL));
    CHECK(kvc_allocator_clear(nf));
    CHECK(kvc_allocator_clear(ns));
  }
  CHECK(kvc_stream_synchronize(ctx, NULL));
  report("swa_extend", "kvc_swa_allocator_alloc_extend", BS, PS, t1 + warm, reps);
  report("swa_extend", "naive: per-request calls + page uploads", BS, PS, t2 + warm, reps);
  free(t1), free(t2), free(nmap_host), free(outh), free(fw), free(ww);
  kvc_memory_free(ctx, nmap_dev), kvc_memory_free(ctx, out_dev);
  kvc_allocator_destroy(nf), kvc_allocator_destroy(ns);
  kvc_req_to_token_pool_destroy(rp), kvc_req_to_token_pool_destroy(rp2);
  kvc_swa_allocator_destroy(a);
}

/* --- hybrid req pool ---------------------------------------------------------------- */

#define HB 64

static void bench_hybrid(void) {
  kvc_mamba_pool_config mc = KVC_MAMBA_POOL_CONFIG_INIT;
  kvc_mamba_shape conv = {2, 0, {4, 64, 0}};
  mc.size = 4 * HB, mc.num_layers = 8, mc.num_conv = 1, mc.conv_shapes = &conv;
  mc.temporal_shape[0] = 8, mc.temporal_shape[1] = 32, mc.temporal_shape[2] = 16;
  kvc_mamba_pool *mp, *mp2;
  CHECK(kvc_mamba_pool_create(ctx, &mc, &mp));
  CHECK(kvc_mamba_pool_create(ctx, &mc, &mp2));
  kvc_req_to_token_pool *rp = make_rp(HB), *rp2 = make_rp(HB);
  kvc_hybrid_req_pool_config hc = KVC_HYBRID_REQ_POOL_CONFIG_INIT;
  hc.req_pool = rp, hc.mamba_pool = mp, hc.flags = KVC_HYBRID_TRACK, hc.pp = 2;
  kvc_hybrid_req_pool *h;
  CHECK(kvc_hybrid_req_pool_create(ctx, &hc, &h));
  int32_t *nmap_dev;
  CHECK(kvc_memory_alloc(ctx, (size_t)(HB + 1) * 3 * 4, (void **)&nmap_dev));
  int32_t nmap_host[(HB + 1) * 3];
  const int total = warm + reps;
  double *t1 = malloc(sizeof(double) * (size_t)total), *t2 = malloc(sizeof(double) * (size_t)total);
  for (int it = 0; it < total; it++) {
    int32_t rows[HB] = {0}, ms[HB] = {0}, pp[2 * HB] = {0};
    double t0 = now_us();
    CHECK(kvc_hybrid_req_pool_alloc(h, HB, rows, ms, pp, NULL));
    double t_1 = now_us();
    for (int i = 0; i < HB; i++) {
      int32_t r = 0, s[3];
      CHECK(kvc_req_to_token_pool_alloc(rp2, 1, &r));
      for (int k = 0; k < 3; k++) CHECK(kvc_mamba_pool_alloc(mp2, 1, &s[k], NULL));
      nmap_host[r] = s[0], nmap_host[HB + 1 + 2 * r] = s[1], nmap_host[HB + 2 + 2 * r] = s[2];
      CHECK(kvc_memcpy_h2d(ctx, nmap_dev + r, &nmap_host[r], 4, NULL));
      CHECK(kvc_memcpy_h2d(ctx, nmap_dev + HB + 1 + 2 * r, &nmap_host[HB + 1 + 2 * r], 8, NULL));
    }
    double t_2 = now_us();
    t1[it] = t_1 - t0, t2[it] = t_2 - t_1;
    CHECK(kvc_stream_synchronize(ctx, NULL));
    CHECK(kvc_hybrid_req_pool_clear(h, NULL)); /* untimed */
    CHECK(kvc_req_to_token_pool_clear(rp2));
    CHECK(kvc_mamba_pool_clear(mp2));
  }
  CHECK(kvc_stream_synchronize(ctx, NULL));
  report("hybrid", "kvc_hybrid_req_pool_alloc (pp 2)", HB, 0, t1 + warm, reps);
  report("hybrid", "naive: per-request alloc + zero + uploads", HB, 0, t2 + warm, reps);
  free(t1), free(t2);
  kvc_memory_free(ctx, nmap_dev);
  kvc_hybrid_req_pool_destroy(h);
  kvc_mamba_pool_destroy(mp), kvc_mamba_pool_destroy(mp2);
  kvc_req_to_token_pool_destroy(rp), kvc_req_to_token_pool_destroy(rp2);
}

int main(int argc, char **argv) {
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  const char *csv_path = NULL;
  int quick = 0;
  if (kvb_parse_args(argc, argv, &cfg, &quick, &csv_path)) return 2;
  if (quick) reps = 100, warm = 10;
  CHECK(kvc_context_create(&cfg, &ctx));
  if (csv_path && !(csv = fopen(csv_path, "w"))) {
    perror(csv_path);
    return 1;
  }
  if (csv) fprintf(csv, "case,variant,batch,page_size,median_us,p99_us,reps\n");
  printf("backend: %s\n%-11s %-40s %6s %5s %10s %10s\n", kvc_context_backend(ctx) == KVC_BACKEND_CUDA ? "cuda" : "host",
         "case", "variant", "batch", "ps", "median_us", "p99_us");
  bench_decode();
  bench_extend();
  bench_hybrid();
  if (csv) fclose(csv);
  kvc_context_destroy(ctx);
  return 0;
}
