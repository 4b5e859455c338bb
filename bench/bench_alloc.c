/*
 * bench_alloc.c — host microseconds per scheduler call of the level-2 allocator, next to
 * a naive version of the same step measured in the same run.
 *
 *   decode  : alloc_decode + req_to_token write (one planned launch)  vs  host plan +
 *             4 uploads + the level-1 write_req_to_token launch (SGLang's shape); and the
 *             decode channel's host half (the graph path: the kernel replays inside the
 *             engine's CUDA graph), alone and followed by a plain launch of its kernel
 *   extend  : alloc_extend + write (one launch)  vs  the same allocation + one row-write
 *             launch per request
 *   free    : kvc_allocator_free of a 4096-token request  vs  qsort+unique of the page
 *             ids first (what a sort-based free costs)
 *
 * Every repetition measures the same situation: allocations are rolled back with
 * backup/restore (untimed), frees are re-allocated (untimed). Median and p99 over many
 * repetitions after a warm-up. Usage: kvc_bench_alloc [--quick] [--host] [--csv FILE]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

static kvc_context *ctx;
static int reps = 3000, warm = 300;
static FILE *csv;

#define CHECK(call) KVB_CHECK(ctx, call)
/* A driver call (CUresult, 0 = success) of the GPU-time measurement. */
#define CU_OR_DIE(call)                                                 \
  do {                                                                  \
    if (call) {                                                         \
      fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #call); \
      exit(1);                                                          \
    }                                                                   \
  } while (0)
#define now_us kvb_now_us

static int cmp64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static void report(const char *name, const char *variant, int batch, int ps, double *t, int n) {
  kvb_report(csv, name, variant, batch, ps, t, n);
}

/* The decode benchmarks' setting: bs request rows of 1024 tokens and a paged allocator
 * with room for them; each row holds a prompt of 100-499 tokens, so that about 1 in ps
 * requests opens a page per decode step. The caller prefills the rows (seq) itself. */
typedef struct decode_world {
  kvc_req_to_token_pool *pool;
  kvc_allocator *a;
  int32_t *rows;
  int64_t *pre, *seq;
} decode_world;

static decode_world decode_world_make(int bs, int ps) {
  decode_world w;
  kvc_req_to_token_pool_config pc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  pc.size = bs;
  pc.max_context_len = 1024;
  CHECK(kvc_req_to_token_pool_create(ctx, &pc, &w.pool));
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = KVC_ALLOCATOR_PAGED;
  ac.page_size = ps;
  ac.size = (int64_t)bs * 1024 + 64 * ps;
  CHECK(kvc_allocator_create(ctx, &ac, &w.a));
  w.rows = calloc((size_t)bs, 4);
  w.pre = calloc((size_t)bs, 8);
  w.seq = calloc((size_t)bs, 8);
  CHECK(kvc_req_to_token_pool_alloc(w.pool, (size_t)bs, w.rows));
  for (int i = 0; i < bs; i++) w.seq[i] = 100 + (i * 37) % 400;
  return w;
}

static void decode_world_free(decode_world *w) {
  free(w->rows), free(w->pre), free(w->seq);
  kvc_allocator_destroy(w->a);
  kvc_req_to_token_pool_destroy(w->pool);
}

/* --- decode channel: GPU time of its kernel ---------------------------------------- */

/* GPU microseconds per execution of the channel's kernel, as a graph replay runs it: 64
 * steps are published, then one graph of 64 kernel nodes applies them back to back,
 * between two events. Each execution reads its step from pinned host memory (PCIe round
 * trips) and writes out_cache_loc and the table. CUDA only; prints nothing elsewhere. */
static void bench_channel_gpu(int bs, int ps) {
  kvb_cuda cu;
  if (kvc_context_backend(ctx) != KVC_BACKEND_CUDA || !kvb_cuda_load(&cu)) return;
  enum { N = 64 };
  decode_world w = decode_world_make(bs, ps);
  kvc_req_to_token_pool *pool = w.pool;
  kvc_allocator *a = w.a;
  int32_t *rows = w.rows;
  int64_t *pre = w.pre, *seq = w.seq;
  int64_t *dev_out;
  CHECK(kvc_memory_alloc(ctx, (size_t)bs * 8, (void **)&dev_out));
  CHECK(kvc_allocator_alloc_extend(a, (size_t)bs, pre, seq, NULL, pool, rows, NULL, NULL, NULL, NULL));
  kvc_decode_channel *ch;
  CHECK(kvc_decode_channel_create(a, pool, (size_t)bs, N, dev_out, &ch));
  CHECK(kvc_stream_synchronize(ctx, NULL));
  void *stream = NULL, *graph = NULL, *exec = NULL, *e0 = NULL, *e1 = NULL;
  CU_OR_DIE(cu.stream_create(&stream, 1) || cu.begin_capture(stream, 1));
  for (int k = 0; k < N; k++) CHECK(kvc_decode_channel_enqueue(ch, stream));
  CU_OR_DIE(cu.end_capture(stream, &graph) || cu.instantiate(&exec, graph, 0));
  CU_OR_DIE(cu.event_create(&e0, 0) || cu.event_create(&e1, 0));
  double us[5];
  for (int rep = 0; rep < 5; rep++) {
    for (int k = 0; k < N; k++) {
      for (int i = 0; i < bs; i++) seq[i]++;
      CHECK(kvc_decode_channel_alloc(ch, (size_t)bs, seq, NULL, rows, NULL));
    }
    float ms = 0;
    CU_OR_DIE(cu.event_record(e0, stream) || cu.graph_launch(exec, stream) || cu.event_record(e1, stream) ||
              cu.event_sync(e1) || cu.elapsed(&ms, e0, e1));
    us[rep] = 1e3 * ms / N;
  }
  CHECK(kvc_decode_channel_check(ch, NULL, NULL));
  qsort(us, 5, sizeof us[0], kvb_cmp_double);
  printf("channel kernel: %.2f us of GPU time per execution at batch %d, ps %d (median of 5 graphs of %d)\n", us[2], bs,
         ps, N);
  if (csv)
    fprintf(csv, "channel_gpu,\"GPU us per kernel execution (graph)\",%d,%d,%.3f,%.3f,5\n", bs, ps, us[2], us[4]);
  CU_OR_DIE(cu.event_destroy(e0) || cu.event_destroy(e1) || cu.exec_destroy(exec) || cu.graph_destroy(graph) ||
            cu.stream_destroy(stream));
  kvc_decode_channel_destroy(ch);
  kvc_memory_free(ctx, dev_out);
  decode_world_free(&w);
}

/* --- decode ------------------------------------------------------------------------- */

static void bench_decode(int bs, int ps) {
  decode_world w = decode_world_make(bs, ps);
  kvc_req_to_token_pool *pool = w.pool;
  kvc_allocator *a = w.a;
  int32_t *rows = w.rows;
  int64_t *pre = w.pre, *seq = w.seq, *out = calloc((size_t)bs, 8);
  int64_t total = 0;
  for (int i = 0; i < bs; i++) total += seq[i];
  int64_t *tmp = malloc((size_t)total * 8), *dev_out, *dev_rows, *dev_pre, *dev_seq, *dev_loc;
  CHECK(kvc_memory_alloc(ctx, (size_t)total * 8, (void **)&dev_out));
  CHECK(kvc_memory_alloc(ctx, (size_t)bs * 8, (void **)&dev_rows));
  CHECK(kvc_memory_alloc(ctx, (size_t)bs * 8, (void **)&dev_pre));
  CHECK(kvc_memory_alloc(ctx, (size_t)bs * 8, (void **)&dev_seq));
  CHECK(kvc_memory_alloc(ctx, (size_t)bs * 8, (void **)&dev_loc));
  CHECK(kvc_allocator_alloc_extend(a, (size_t)bs, pre, seq, NULL, pool, rows, NULL, tmp, NULL, NULL));
  /* step: one new token each; requests whose prompt fills its last page open a page */
  for (int i = 0; i < bs; i++) seq[i] += 1;
  int64_t *rows64 = malloc((size_t)bs * 8);
  int64_t *last = malloc((size_t)bs * 8);
  for (int i = 0; i < bs; i++) {
    rows64[i] = rows[i], pre[i] = seq[i] - 1;
    last[i] = kvc_req_to_token_pool_row(pool, rows[i])[seq[i] - 2];
  }
  double *t = malloc(sizeof(double) * (size_t)(reps + warm));
  /* The decode channel (graph path): the host half alone, and with a plain launch of the
   * kernel an engine would have captured in its graph. depth 64; when the device is that
   * far behind, the bench waits (untimed) instead of measuring a KVC_ERR_BUSY. */
  kvc_decode_channel *ch;
  CHECK(kvc_decode_channel_create(a, pool, (size_t)bs, 64, dev_out, &ch));
  for (int variant = 0; variant < 4; variant++) {
    for (int r = 0; r < reps + warm; r++) {
      kvc_allocator_state s;
      CHECK(kvc_allocator_backup_state(a, &s));
      if (variant >= 2) {
        uint64_t pub, app;
        CHECK(kvc_decode_channel_check(ch, &pub, &app));
        if (pub - app >= 60) CHECK(kvc_stream_synchronize(ctx, NULL));
      }
      double t0 = now_us();
      if (variant == 2) {
        CHECK(kvc_decode_channel_alloc(ch, (size_t)bs, seq, NULL, rows, out));
      } else if (variant == 3) {
        CHECK(kvc_decode_channel_alloc(ch, (size_t)bs, seq, NULL, rows, out));
        CHECK(kvc_decode_channel_enqueue(ch, NULL));
      } else if (variant == 0) {
        CHECK(kvc_allocator_alloc_decode(a, (size_t)bs, seq, NULL, pool, rows, out, dev_out, NULL));
      } else {
        CHECK(kvc_allocator_alloc_decode(a, (size_t)bs, seq, last, NULL, NULL, out, NULL, NULL));
        CHECK(kvc_memcpy_h2d(ctx, dev_rows, rows64, (size_t)bs * 8, NULL));
        CHECK(kvc_memcpy_h2d(ctx, dev_pre, pre, (size_t)bs * 8, NULL));
        CHECK(kvc_memcpy_h2d(ctx, dev_seq, seq, (size_t)bs * 8, NULL));
        CHECK(kvc_memcpy_h2d(ctx, dev_loc, out, (size_t)bs * 8, NULL));
        CHECK(kvc_write_req_to_token(ctx, kvc_req_to_token_pool_table(pool), bs + 1, 1024, dev_rows, KVC_INDEX_I64,
                                     NULL, dev_pre, dev_seq, KVC_INDEX_I64, dev_loc, (size_t)bs, NULL));
      }
      double t1 = now_us();
      if (variant == 2) CHECK(kvc_decode_channel_enqueue(ch, NULL)); /* untimed: the graph's part */
      if (r >= warm) t[r - warm] = t1 - t0;
      CHECK(kvc_allocator_restore_state(a, &s));
    }
    static const char *const names[4] = {"alloc_decode (1 planned launch)", "naive: 4 uploads + r2t launch",
                                         "channel: host half (graph path)", "channel: host half + launch"};
    report("decode", names[variant], bs, ps, t, reps);
  }
  CHECK(kvc_stream_synchronize(ctx, NULL));
  CHECK(kvc_decode_channel_check(ch, NULL, NULL)); /* every execution found its step */
  kvc_decode_channel_destroy(ch);
  kvc_memory_free(ctx, dev_out);
  kvc_memory_free(ctx, dev_rows);
  kvc_memory_free(ctx, dev_pre);
  kvc_memory_free(ctx, dev_seq);
  kvc_memory_free(ctx, dev_loc);
  free(t);
  free(rows64);
  free(last);
  free(tmp);
  free(out);
  decode_world_free(&w);
}

/* --- extend ------------------------------------------------------------------------- */

static void bench_extend(int bs, int len, int ps) {
  kvc_req_to_token_pool_config pc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  pc.size = bs;
  pc.max_context_len = len;
  kvc_req_to_token_pool *pool;
  CHECK(kvc_req_to_token_pool_create(ctx, &pc, &pool));
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = KVC_ALLOCATOR_PAGED;
  ac.page_size = ps;
  ac.size = (int64_t)bs * len * 2;
  kvc_allocator *a;
  CHECK(kvc_allocator_create(ctx, &ac, &a));
  int32_t *rows = calloc((size_t)bs, 4);
  int64_t *pre = calloc((size_t)bs, 8), *seq = calloc((size_t)bs, 8), *out = calloc((size_t)bs * (size_t)len, 8);
  int64_t *dev_out;
  CHECK(kvc_memory_alloc(ctx, (size_t)bs * (size_t)len * 8, (void **)&dev_out));
  CHECK(kvc_req_to_token_pool_alloc(pool, (size_t)bs, rows));
  for (int i = 0; i < bs; i++) seq[i] = len;
  double *t = malloc(sizeof(double) * (size_t)(reps + warm));
  for (int variant = 0; variant < 2; variant++) {
    for (int r = 0; r < reps + warm; r++) {
      kvc_allocator_state s;
      CHECK(kvc_allocator_backup_state(a, &s));
      double t0 = now_us();
      if (variant == 0) {
        CHECK(kvc_allocator_alloc_extend(a, (size_t)bs, pre, seq, NULL, pool, rows, NULL, out, dev_out, NULL));
      } else {
        CHECK(kvc_allocator_alloc_extend(a, (size_t)bs, pre, seq, NULL, NULL, NULL, NULL, out, NULL, NULL));
        for (int i = 0; i < bs; i++)
          CHECK(kvc_req_to_token_pool_write(pool, rows[i], 0, out + (size_t)i * (size_t)len, (size_t)len, NULL));
      }
      double t1 = now_us();
      if (r >= warm) t[r - warm] = t1 - t0;
      CHECK(kvc_allocator_restore_state(a, &s));
    }
    char name[32];
    snprintf(name, sizeof name, "extend%d", len);
    report(name, variant ? "naive: one row launch per request" : "alloc_extend (1 planned launch)", bs, ps, t, reps);
  }
  CHECK(kvc_stream_synchronize(ctx, NULL));
  kvc_memory_free(ctx, dev_out);
  free(t);
  free(rows);
  free(pre);
  free(seq);
  free(out);
  kvc_allocator_destroy(a);
  kvc_req_to_token_pool_destroy(pool);
}

/* --- free --------------------------------------------------------------------------- */

static void bench_free(kvc_allocator_kind kind, int ps) {
  const int n = 4096;
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = kind;
  ac.page_size = ps;
  ac.size = 1 << 20;
  kvc_allocator *a;
  CHECK(kvc_allocator_create(ctx, &ac, &a));
  int64_t *slots = malloc((size_t)n * 8), *cp = malloc((size_t)n * 8), *pg = malloc((size_t)n * 8);
  int64_t *junk = malloc((size_t)n * 8);
  /* Other requests' pages behind it in the free list; the request's own row lists its
   * pages in descending order (LIFO reuse makes rows non-ascending), so the free must
   * really sort. */
  CHECK(kvc_allocator_alloc(a, 8 * ps, junk));
  CHECK(kvc_allocator_alloc(a, n, slots));
  CHECK(kvc_allocator_free(a, junk, (size_t)(8 * ps)));
  const int np = n / ps;
  double *t = malloc(sizeof(double) * (size_t)(reps + warm));
  for (int variant = 0; variant < 2; variant++) {
    for (int r = 0; r < reps + warm; r++) {
      for (int j = 0; j < np; j++) memcpy(cp + (size_t)j * ps, slots + (size_t)(np - 1 - j) * ps, (size_t)ps * 8);
      double t0 = now_us();
      if (variant == 0) {
        CHECK(kvc_allocator_free(a, cp, (size_t)n));
      } else {
        for (int i = 0; i < n; i++) pg[i] = cp[i] / ps;
        qsort(pg, (size_t)n, 8, cmp64);
        int k = 0;
        for (int i = 0; i < n; i++)
          if (i == 0 || pg[i] != pg[k - 1]) pg[k++] = pg[i];
        for (int i = 0; i < k; i++) pg[i] *= ps;
        CHECK(kvc_allocator_free(a, pg, (size_t)k));
      }
      double t1 = now_us();
      if (r >= warm) t[r - warm] = t1 - t0;
      /* Same situation again: the freed pages are at the front (PAGED) and come back. */
      if (kind == KVC_ALLOCATOR_TOKEN) {
        CHECK(kvc_allocator_clear(a));
        CHECK(kvc_allocator_alloc(a, n, slots));
      } else {
        CHECK(kvc_allocator_alloc(a, n, slots));
      }
    }
    report("free4096",
           variant ? "naive: qsort+unique, then free"
                   : (kind == KVC_ALLOCATOR_TOKEN ? "free (token, FIFO)" : "free (paged, checked)"),
           1, ps, t, reps);
  }
  free(t);
  free(slots);
  free(cp);
  free(pg);
  free(junk);
  kvc_allocator_destroy(a);
}

int main(int argc, char **argv) {
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  const char *csv_path = NULL;
  int quick = 0;
  if (kvb_parse_args(argc, argv, &cfg, &quick, &csv_path)) return 2;
  if (quick) reps = 200, warm = 20;
  CHECK(kvc_context_create(&cfg, &ctx));
  if (csv_path && !(csv = fopen(csv_path, "w"))) {
    perror(csv_path);
    return 1;
  }
  if (csv) fprintf(csv, "case,variant,batch,page_size,median_us,p99_us,reps\n");
  printf("backend %s, %d repetitions after %d warm-up (host microseconds per call)\n",
         kvc_context_backend(ctx) == KVC_BACKEND_CUDA ? "cuda" : "host", reps, warm);
  printf("%-8s %-34s %6s %5s %10s %10s\n", "case", "variant", "batch", "ps", "median_us", "p99_us");
  const int batches[4] = {1, 64, 256, 1024}, pss[2] = {16, 64};
  for (int p = 0; p < 2; p++)
    for (int b = 0; b < 4; b++) bench_decode(batches[b], pss[p]);
  bench_channel_gpu(256, 16);
  bench_channel_gpu(1024, 16);
  bench_extend(16, 512, 16);
  bench_extend(64, 256, 16);
  bench_free(KVC_ALLOCATOR_PAGED, 16);
  bench_free(KVC_ALLOCATOR_PAGED, 64);
  bench_free(KVC_ALLOCATOR_TOKEN, 1);
  if (csv) fclose(csv);
  kvc_context_destroy(ctx);
  return 0;
}
