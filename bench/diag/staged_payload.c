/* staged_payload.c — host time and round trip of the allocator's launches whose payload
 * is staged or inline, with the staged payload copied to device memory first or read by
 * the kernel in place from pinned memory (KVC_STAGING_MAPPED), and with the inline limit
 * (KVC_INLINE_MAX_WORDS) lowered so that mid-sized payloads go staged too. Not built by
 * CMake:
 *   cc -O2 -Iinclude bench/diag/staged_payload.c -Lbuild -lkvcache -Wl,-rpath,$PWD/build
 *   ./a.out [reps]
 * Each mode is its own context (the options are read at context create), with its own
 * allocator and buffers; the modes take turns call by call, so a change of the host's
 * state hits them alike. Each repetition backs the allocator up, runs the step, and
 * restores it (untimed), so every call hands out the same slots. "host" is the call's
 * own time; "trip" is the call plus kvc_stream_synchronize (the kernel's completion
 * seen from the host), measured on separate repetitions. */
#define _POSIX_C_SOURCE 200809L
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

enum { MODES = 4, MAX_BS = 1024 };
static const char *mode_names[MODES] = {"copy (base)", "mapped", "mapped, inline<=2048", "mapped, inline<=1000"};

typedef struct world {
  kvc_context *ctx;
  kvc_allocator *a;
  kvc_req_to_token_pool *pool;
  int32_t rows[MAX_BS];
  int64_t *out, *dev_out, *dev_rows;
} world;

typedef struct shape {
  const char *name;
  int decode; /* 0: extend of bs x len; 1: decode of bs requests; 2: extend, host only */
  int bs, len, ps;
} shape;

static void world_make(world *w, int mode, const shape *s) {
  memset(w, 0, sizeof *w);
  setenv("KVC_STAGING_MAPPED", mode == 0 ? "0" : "1", 1);
  if (mode == 2) setenv("KVC_INLINE_MAX_WORDS", "2048", 1);
  else if (mode == 3) setenv("KVC_INLINE_MAX_WORDS", "1000", 1);
  else unsetenv("KVC_INLINE_MAX_WORDS");
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  CHECK(kvc_context_create(&cfg, &w->ctx));
  kvc_req_to_token_pool_config pc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  pc.size = (size_t)s->bs + 1;
  pc.max_context_len = s->len + 16;
  CHECK(kvc_req_to_token_pool_create(w->ctx, &pc, &w->pool));
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = s->ps == 1 ? KVC_ALLOCATOR_TOKEN : KVC_ALLOCATOR_PAGED;
  ac.page_size = s->ps;
  ac.size = (int64_t)s->bs * (s->len + 16) * 4;
  CHECK(kvc_allocator_create(w->ctx, &ac, &w->a));
  /* A free list that is not 1, 2, 3, ...: a quarter allocated and freed back. */
  const int64_t q = ac.size / 4 / s->ps * s->ps;
  int64_t *junk = malloc(sizeof(int64_t) * (size_t)q);
  if (s->ps == 1) {
    CHECK(kvc_allocator_alloc(w->a, q, junk));
    CHECK(kvc_allocator_free(w->a, junk, (size_t)q));
  }
  free(junk);
  CHECK(kvc_req_to_token_pool_alloc(w->pool, (size_t)s->bs, w->rows));
  const size_t n = (size_t)s->bs * (size_t)(s->len + 16);
  w->out = malloc(sizeof(int64_t) * n);
  CHECK(kvc_memory_alloc(w->ctx, sizeof(int64_t) * n, (void **)&w->dev_out));
  CHECK(kvc_memory_alloc(w->ctx, sizeof(int64_t) * (size_t)s->bs, (void **)&w->dev_rows));
  if (s->decode == 1) { /* the requests' prompts, untimed */
    int64_t pre[MAX_BS] = {0}, seq[MAX_BS];
    for (int i = 0; i < s->bs; i++) seq[i] = s->len;
    kvc_extend_args x;
    memset(&x, 0, sizeof x);
    x.batch_size = (size_t)s->bs, x.prefix_lens = pre, x.seq_lens = seq, x.req_pool = w->pool;
    x.req_rows = w->rows, x.out_host = w->out;
    CHECK(kvc_allocator_alloc_extend_ex(w->a, &x));
  }
}

static void world_drop(world *w) {
  CHECK(kvc_stream_synchronize(w->ctx, NULL));
  kvc_memory_free(w->ctx, w->dev_out);
  kvc_memory_free(w->ctx, w->dev_rows);
  kvc_allocator_destroy(w->a);
  kvc_req_to_token_pool_destroy(w->pool);
  kvc_context_destroy(w->ctx);
  free(w->out);
}

static double step(world *w, const shape *s, int sync) {
  int64_t pre[MAX_BS] = {0}, seq[MAX_BS];
  kvc_allocator_state st;
  CHECK(kvc_allocator_backup_state(w->a, &st));
  double t0, t;
  if (s->decode == 1) {
    for (int i = 0; i < s->bs; i++) seq[i] = s->len + 1;
    t0 = kvb_now_us();
    CHECK(kvc_allocator_alloc_decode(w->a, (size_t)s->bs, seq, NULL, w->pool, w->rows, w->out, w->dev_out, NULL));
  } else {
    for (int i = 0; i < s->bs; i++) seq[i] = s->len;
    kvc_extend_args x;
    memset(&x, 0, sizeof x);
    x.batch_size = (size_t)s->bs, x.prefix_lens = pre, x.seq_lens = seq, x.req_pool = w->pool;
    x.req_rows = w->rows, x.out_host = w->out, x.out_device = w->dev_out, x.rows_device = w->dev_rows;
    if (s->decode == 2) /* no req pool, no device output: no launch, the host's part alone */
      x.req_pool = NULL, x.req_rows = NULL, x.out_device = NULL, x.rows_device = NULL;
    t0 = kvb_now_us();
    CHECK(kvc_allocator_alloc_extend_ex(w->a, &x));
  }
  if (sync) CHECK(kvc_stream_synchronize(w->ctx, NULL));
  t = kvb_now_us() - t0;
  if (!sync) CHECK(kvc_stream_synchronize(w->ctx, NULL)); /* untimed: no queue build-up */
  CHECK(kvc_allocator_restore_state(w->a, &st));
  return t;
}

/* Checks that every mode wrote the same device slots as the base (mode 0). */
static void compare_out(world *ws, const shape *s) {
  if (s->decode == 2) return; /* nothing on the device */
  const size_t n = s->decode ? (size_t)s->bs : (size_t)s->bs * (size_t)s->len;
  int64_t *ref = malloc(sizeof(int64_t) * n), *got = malloc(sizeof(int64_t) * n);
  for (int m = 0; m < MODES; m++) {
    (void)step(&ws[m], s, 1);
    CHECK(kvc_memcpy_d2h(ws[m].ctx, m ? got : ref, ws[m].dev_out, sizeof(int64_t) * n, NULL));
    CHECK(kvc_stream_synchronize(ws[m].ctx, NULL));
    if (m && memcmp(ref, got, sizeof(int64_t) * n)) {
      fprintf(stderr, "%s: mode '%s' wrote different slots than the base\n", s->name, mode_names[m]);
      exit(1);
    }
  }
  free(ref);
  free(got);
}

int main(int argc, char **argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 1000;
  /* clang-format off */
  static const shape shapes[] = {
      {"extend 16 x 512, ps 1 (8320 words)", 0, 16, 512, 1},
      {"extend 16 x 512, ps 1, no launch", 2, 16, 512, 1},
      {"extend 32 x 512, ps 1 (16640 words)", 0, 32, 512, 1},
      {"extend 16 x 256, ps 1 (4224 words)", 0, 16, 256, 1},
      {"extend 16 x 512, ps 16 (640 words)", 0, 16, 512, 16},
      {"extend 16 x 512, ps 16, no launch", 2, 16, 512, 16},
      {"extend 64 x 256, ps 16 (1536 words)", 0, 64, 256, 16},
      {"decode 1024, ps 16 (2048 words)", 1, 1024, 100, 16},
      {"decode 512, ps 1 (1024 words)", 1, 512, 100, 1},
  };
  /* clang-format on */
  double *t = malloc(sizeof(double) * (size_t)reps * MODES * 2);
  printf("%d repetitions per mode and measure, modes in turns; median (p10) us\n", reps);
  printf("%-38s %-22s %16s %16s\n", "shape", "mode", "host", "trip");
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
    const shape *s = &shapes[k];
    world ws[MODES];
    for (int m = 0; m < MODES; m++) world_make(&ws[m], m, s);
    compare_out(ws, s);
    for (int r = 0; r < 50; r++)
      for (int m = 0; m < MODES; m++) (void)step(&ws[m], s, r & 1);
    for (int r = 0; r < reps; r++)
      for (int j = 0; j < MODES; j++) {
        const int m = (r & 1) ? MODES - 1 - j : j; /* order swapped each repetition */
        t[((size_t)m * 2 + 0) * (size_t)reps + (size_t)r] = step(&ws[m], s, 0);
        t[((size_t)m * 2 + 1) * (size_t)reps + (size_t)r] = step(&ws[m], s, 1);
      }
    for (int m = 0; m < MODES; m++) {
      double *h = t + ((size_t)m * 2 + 0) * (size_t)reps, *g = t + ((size_t)m * 2 + 1) * (size_t)reps;
      qsort(h, (size_t)reps, sizeof *h, kvb_cmp_double);
      qsort(g, (size_t)reps, sizeof *g, kvb_cmp_double);
      printf("%-38s %-22s %8.2f (%5.2f) %8.2f (%5.2f)\n", m ? "" : s->name, mode_names[m], h[reps / 2], h[reps / 10],
             g[reps / 2], g[reps / 10]);
    }
    for (int m = 0; m < MODES; m++) world_drop(&ws[m]);
  }
  free(t);
  return 0;
}
