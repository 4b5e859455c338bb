/*
 * decode_callgrind.c — a harness for instruction and cache-miss counts of the decode step
 * at batch 1024 (issue 20 item 1), host backend. Not built by CMake: run
 *
 *   cc -O2 -Iinclude bench/diag/decode_callgrind.c -Lbuild -lkvcache -o /tmp/dcg
 *   LD_LIBRARY_PATH=build valgrind --tool=callgrind --cache-sim=yes \
 *     --toggle-collect=kvc_allocator_alloc_decode --toggle-collect=kvc_decode_channel_alloc \
 *     /tmp/dcg PS CALLS
 *
 * or, for wall clock, `/tmp/dcg PS CALLS wall [cold]`: median and minimum host us of each
 * call kind; `cold` first sweeps 64 MB through the cache (untimed) before every call, so
 * that the mirror rows, page states and ring slots come from memory, as they may on a
 * host whose caches the engine's other work has refilled between steps.
 *
 * The world is bench_alloc's decode setting (1024 rows of 1024 tokens, prompts of 100-499
 * tokens, one token each): CALLS plain alloc_decode calls (req pool + device out), then
 * CALLS decode channel host halves, each rolled back with backup/restore (untimed), the
 * channel's kernel enqueued after each step (its host twin runs outside the toggles). The
 * host twin of alloc_decode's kernel runs inside the toggle: subtract its inclusive count
 * (callgrind_annotate --inclusive=yes, the twin's entry).
 */
#include "kvcache.h"

#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}
static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static volatile unsigned char sink;
/* Reads (not writes: no write-backs during the timed call) one byte per line. */
static void sweep(unsigned char *buf, size_t n) {
  unsigned char x = 0;
  for (size_t i = 0; i < n; i += 64) x ^= buf[i];
  sink = x;
}
static void report(const char *what, int ps, double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, cmpd);
  printf("%-28s batch 1024 ps %2d  median %7.2f  min %7.2f us\n", what, ps, t[n / 2], t[0]);
}

#define CK(x)                                                               \
  do {                                                                      \
    kvc_status st_ = (x);                                                   \
    if (st_ != KVC_OK) {                                                    \
      fprintf(stderr, "%s:%d: %s: %d\n", __FILE__, __LINE__, #x, (int)st_); \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

int main(int argc, char **argv) {
  const int ps = argc > 1 ? atoi(argv[1]) : 16, calls = argc > 2 ? atoi(argv[2]) : 100, bs = 1024;
  const int wall = argc > 3 && !strcmp(argv[3], "wall"), cold = argc > 4 && !strcmp(argv[4], "cold");
  const size_t sweep_bytes = (size_t)64 << 20;
  unsigned char *buf = cold ? malloc(sweep_bytes) : NULL;
  if (buf) memset(buf, 1, sweep_bytes); /* backed by real pages, not the shared zero page */
  double *t = calloc((size_t)calls, sizeof *t);
  kvc_context_config cc = KVC_CONTEXT_CONFIG_INIT;
  cc.backend = KVC_BACKEND_HOST;
  kvc_context *ctx;
  CK(kvc_context_create(&cc, &ctx));
  kvc_req_to_token_pool_config pc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  pc.size = bs;
  pc.max_context_len = 1024;
  kvc_req_to_token_pool *pool;
  CK(kvc_req_to_token_pool_create(ctx, &pc, &pool));
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = KVC_ALLOCATOR_PAGED;
  ac.page_size = ps;
  ac.size = (int64_t)bs * 1024 + 64 * ps;
  kvc_allocator *a;
  CK(kvc_allocator_create(ctx, &ac, &a));
  int32_t *rows = calloc(bs, 4);
  int64_t *pre = calloc(bs, 8), *seq = calloc(bs, 8), *out = calloc(bs, 8), *dev_out;
  CK(kvc_req_to_token_pool_alloc(pool, bs, rows));
  for (int i = 0; i < bs; i++) seq[i] = 100 + (i * 37) % 400;
  CK(kvc_memory_alloc(ctx, (size_t)bs * 8 * 512, (void **)&dev_out));
  CK(kvc_allocator_alloc_extend(a, bs, pre, seq, NULL, pool, rows, NULL, NULL, NULL, NULL));
  for (int i = 0; i < bs; i++) seq[i] += 1;
  kvc_decode_channel *ch;
  CK(kvc_decode_channel_create(a, pool, bs, 64, dev_out, &ch));
  for (int r = 0; r < calls; r++) {
    kvc_allocator_state s;
    CK(kvc_allocator_backup_state(a, &s));
    if (buf) sweep(buf, sweep_bytes);
    const double t0 = now_us();
    CK(kvc_allocator_alloc_decode(a, bs, seq, NULL, pool, rows, out, dev_out, NULL));
    t[r] = now_us() - t0;
    CK(kvc_allocator_restore_state(a, &s));
  }
  if (wall) report(cold ? "alloc_decode (cold)" : "alloc_decode", ps, t, calls);
  for (int r = 0; r < calls; r++) {
    kvc_allocator_state s;
    CK(kvc_allocator_backup_state(a, &s));
    if (buf) sweep(buf, sweep_bytes);
    const double t0 = now_us();
    CK(kvc_decode_channel_alloc(ch, bs, seq, NULL, rows, out));
    t[r] = now_us() - t0;
    CK(kvc_decode_channel_enqueue(ch, NULL));
    CK(kvc_allocator_restore_state(a, &s));
  }
  if (wall) report(cold ? "channel host half (cold)" : "channel host half", ps, t, calls);
  CK(kvc_stream_synchronize(ctx, NULL));
  CK(kvc_decode_channel_check(ch, NULL, NULL));
  kvc_decode_channel_destroy(ch);
  kvc_memory_free(ctx, dev_out);
  kvc_allocator_destroy(a);
  kvc_req_to_token_pool_destroy(pool);
  kvc_context_destroy(ctx);
  free(rows), free(pre), free(seq), free(out), free(buf), free(t);
  return 0;
}
