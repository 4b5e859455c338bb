/* extend_token.c — alloc_extend of 16 x 512 tokens on the TOKEN allocator (page 1), as
 * kvcache.sglang's alloc_for_extend calls it (req_pool, out_host, out_device, rows_device),
 * for callgrind and wall-clock medians (issue 18 item 3). Stand-alone, not built by CMake:
 *   cc -O2 -Iinclude bench/diag/extend_token.c -Lbuild -lkvcache -Wl,-rpath,$PWD/build
 *   ./a.out [reps]        (valgrind --tool=callgrind ./a.out 50 for the profile)
 * Each repetition backs the allocator up, extends, and restores it (the bench_alloc
 * method), so every call hands out the same 8192 slots. Prints the median host time. */
#include "kvcache.h"

#include "../bench_util.h" /* kvb_now_us, kvb_cmp_double */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(x)                                                                         \
  do {                                                                                   \
    kvc_status st_ = (x);                                                                \
    if (st_ != KVC_OK) {                                                                 \
      fprintf(stderr, "%s:%d %s -> %s\n", __FILE__, __LINE__, #x, kvc_status_name(st_)); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

int main(int argc, char **argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 2000, bs = 16, len = 512;
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  kvc_context *ctx;
  CHECK(kvc_context_create(&cfg, &ctx));
  kvc_req_to_token_pool_config pc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  pc.size = bs;
  pc.max_context_len = len;
  kvc_req_to_token_pool *pool;
  CHECK(kvc_req_to_token_pool_create(ctx, &pc, &pool));
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = KVC_ALLOCATOR_TOKEN;
  ac.page_size = 1;
  ac.size = (int64_t)bs * len * 4;
  kvc_allocator *a;
  CHECK(kvc_allocator_create(ctx, &ac, &a));
  /* A free list that is not 1, 2, 3, ...: a quarter allocated and freed back (FIFO). */
  int64_t *junk = malloc(sizeof(int64_t) * (size_t)(ac.size / 4));
  CHECK(kvc_allocator_alloc(a, ac.size / 4, junk));
  CHECK(kvc_allocator_free(a, junk, (size_t)(ac.size / 4)));
  int32_t rows[16] = {0};
  int64_t pre[16] = {0}, seq[16];
  for (int i = 0; i < bs; i++) seq[i] = len;
  CHECK(kvc_req_to_token_pool_alloc(pool, (size_t)bs, rows));
  int64_t *out = malloc(sizeof(int64_t) * (size_t)(bs * len)), *dev_out, *dev_rows;
  CHECK(kvc_memory_alloc(ctx, sizeof(int64_t) * (size_t)(bs * len), (void **)&dev_out));
  CHECK(kvc_memory_alloc(ctx, sizeof(int64_t) * (size_t)bs, (void **)&dev_rows));
  kvc_extend_args x;
  memset(&x, 0, sizeof x);
  x.batch_size = (size_t)bs, x.prefix_lens = pre, x.seq_lens = seq, x.req_pool = pool, x.req_rows = rows;
  x.out_host = out, x.out_device = dev_out, x.rows_device = dev_rows;
  double *t = malloc(sizeof(double) * (size_t)reps);
  uint64_t sum = 0;
  for (int r = 0; r < reps; r++) {
    kvc_allocator_state s;
    CHECK(kvc_allocator_backup_state(a, &s));
    const double t0 = kvb_now_us();
    CHECK(kvc_allocator_alloc_extend_ex(a, &x));
    t[r] = kvb_now_us() - t0;
    sum += (uint64_t)out[r % (bs * len)];
    CHECK(kvc_allocator_restore_state(a, &s));
  }
  CHECK(kvc_stream_synchronize(ctx, NULL));
  qsort(t, (size_t)reps, sizeof *t, kvb_cmp_double);
  printf("alloc_extend_ex 16 x 512 TOKEN: median %.2f us, p10 %.2f, p90 %.2f (%d reps; backend %s; check %llu)\n",
         t[reps / 2], t[reps / 10], t[reps * 9 / 10], reps,
         kvc_context_backend(ctx) == KVC_BACKEND_CUDA ? "cuda" : "host", (unsigned long long)sum);
  kvc_memory_free(ctx, dev_out);
  kvc_memory_free(ctx, dev_rows);
  kvc_allocator_destroy(a);
  kvc_req_to_token_pool_destroy(pool);
  kvc_context_destroy(ctx);
  free(junk);
  free(out);
  free(t);
  return 0;
}
