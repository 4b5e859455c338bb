/*
 * bench_ab.c — host time of the allocation path in two libkvcache builds, in ONE process,
 * call by call in alternation.
 *
 * Why: on the lent H200 machine the host runs in a fast or a slow state that changes from
 * one minute to the next (the same binary's alloc_decode at batch 1024 measures 12 us in
 * one round and 18 us in the next), so separate processes of two builds, even in rotated
 * order, compare states as much as code. Here both builds are dlopen'ed into one process
 * (RTLD_LOCAL: each keeps its own symbols and context), each gets an identical world, and
 * repetition r times build A then B (B then A on odd r): both see the same state, and the
 * per-case ratio of medians compares code alone.
 *
 * Cases (those issue 14 item 7 and issue 20 name): alloc_extend 16 x 512 and 64 x 256 at
 * page 16 (one planned launch writing the table and a device out), alloc_decode at batch
 * 256 and 1024 (page 16 and 64), the paged free of 4096 slots (page 16), the token free
 * of 4096 slots, the decode channel's host half at 256 and 1024, and kvc_flow_release of one
 * 4096-token request (chunk cache, page 1 and 16), and the SWA allocator's alloc_decode at
 * batch 256, page 16, alone and right after a free of 4 pages inside a deferred-zero scope
 * (the queue an SWA radix cache's calls leave; the step carries it, or launches it
 * first). Only entry points whose signatures are unchanged since 0.1 are used.
 *
 *   usage: kvc_bench_ab LIB_A LIB_B [--reps N] [--host] [--only NAME-PART]
 */
#define _POSIX_C_SOURCE 200809L
#include "kvcache.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct lib {
  const char *path;
  void *dl;
  kvc_context *ctx;
  kvc_status (*context_create)(const kvc_context_config *, kvc_context **);
  void (*context_destroy)(kvc_context *);
  kvc_status (*pool_create)(kvc_context *, const kvc_req_to_token_pool_config *, kvc_req_to_token_pool **);
  void (*pool_destroy)(kvc_req_to_token_pool *);
  kvc_status (*pool_alloc)(kvc_req_to_token_pool *, size_t, int32_t *);
  kvc_status (*pool_free_row)(kvc_req_to_token_pool *, int32_t);
  kvc_status (*alloc_create)(kvc_context *, const kvc_allocator_config *, kvc_allocator **);
  void (*alloc_destroy)(kvc_allocator *);
  kvc_status (*alloc)(kvc_allocator *, int64_t, int64_t *);
  kvc_status (*free_)(kvc_allocator *, const int64_t *, size_t);
  kvc_status (*clear)(kvc_allocator *);
  kvc_status (*backup)(kvc_allocator *, kvc_allocator_state *);
  kvc_status (*restore)(kvc_allocator *, const kvc_allocator_state *);
  kvc_status (*extend)(kvc_allocator *, size_t, const int64_t *, const int64_t *, const int64_t *,
                       kvc_req_to_token_pool *, const int32_t *, const int64_t *const *, int64_t *, int64_t *,
                       kvc_stream);
  kvc_status (*decode)(kvc_allocator *, size_t, const int64_t *, const int64_t *, kvc_req_to_token_pool *,
                       const int32_t *, int64_t *, int64_t *, kvc_stream);
  kvc_status (*mem_alloc)(kvc_context *, size_t, void **);
  void (*mem_free)(kvc_context *, void *);
  kvc_status (*sync)(kvc_context *, kvc_stream);
  kvc_status (*ch_create)(kvc_allocator *, kvc_req_to_token_pool *, size_t, unsigned, int64_t *, kvc_decode_channel **);
  void (*ch_destroy)(kvc_decode_channel *);
  kvc_status (*ch_alloc)(kvc_decode_channel *, size_t, const int64_t *, const int64_t *, const int32_t *, int64_t *);
  kvc_status (*ch_enqueue)(kvc_decode_channel *, kvc_stream);
  kvc_status (*flow_create)(kvc_context *, const kvc_flow_config *, kvc_flow **);
  void (*flow_destroy)(kvc_flow *);
  kvc_status (*flow_extend)(kvc_flow *, kvc_req_state *const *, size_t, int64_t *, kvc_stream);
  kvc_status (*flow_release)(kvc_flow *, kvc_req_state *const *, size_t, int, kvc_stream);
  kvc_status (*swa_create)(kvc_context *, const kvc_swa_allocator_config *, kvc_swa_allocator **);
  void (*swa_destroy)(kvc_swa_allocator *);
  kvc_status (*swa_extend)(kvc_swa_allocator *, size_t, const int64_t *, const int64_t *, const int64_t *,
                           kvc_req_to_token_pool *, const int32_t *, const int64_t *const *, int64_t *, int64_t *,
                           kvc_stream);
  kvc_status (*swa_decode)(kvc_swa_allocator *, size_t, const int64_t *, const int64_t *, kvc_req_to_token_pool *,
                           const int32_t *, int64_t *, int64_t *, kvc_stream);
  kvc_status (*swa_free)(kvc_swa_allocator *, const int64_t *, size_t, kvc_stream);
  kvc_status (*swa_zero_begin)(kvc_swa_allocator *);
  kvc_status (*swa_zero_end)(kvc_swa_allocator *, kvc_stream);
  kvc_status (*swa_clear)(kvc_swa_allocator *, kvc_stream);
} lib;

static void die(const char *what, const lib *l, kvc_status st) {
  fprintf(stderr, "bench_ab: %s failed in %s (status %d)\n", what, l ? l->path : "-", (int)st);
  exit(1);
}

#define CALL(l, expr)                      \
  do {                                     \
    kvc_status st_ = (expr);               \
    if (st_ != KVC_OK) die(#expr, l, st_); \
  } while (0)

static void *sym(lib *l, const char *name) {
  void *p = dlsym(l->dl, name);
  if (!p) {
    fprintf(stderr, "bench_ab: %s: no symbol %s\n", l->path, name);
    exit(1);
  }
  return p;
}

/* Function-pointer assignment from dlsym's void * (POSIX guarantees it round-trips). */
#define BIND(l, field, name) memcpy(&(l)->field, &(void *){sym((l), (name))}, sizeof(void *))

static void lib_open(lib *l, const char *path, int host) {
  memset(l, 0, sizeof *l);
  l->path = path;
  l->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!l->dl) {
    fprintf(stderr, "bench_ab: dlopen %s: %s\n", path, dlerror());
    exit(1);
  }
  BIND(l, context_create, "kvc_context_create");
  BIND(l, context_destroy, "kvc_context_destroy");
  BIND(l, pool_create, "kvc_req_to_token_pool_create");
  BIND(l, pool_destroy, "kvc_req_to_token_pool_destroy");
  BIND(l, pool_alloc, "kvc_req_to_token_pool_alloc");
  BIND(l, pool_free_row, "kvc_req_to_token_pool_free");
  BIND(l, alloc_create, "kvc_allocator_create");
  BIND(l, alloc_destroy, "kvc_allocator_destroy");
  BIND(l, alloc, "kvc_allocator_alloc");
  BIND(l, free_, "kvc_allocator_free");
  BIND(l, clear, "kvc_allocator_clear");
  BIND(l, backup, "kvc_allocator_backup_state");
  BIND(l, restore, "kvc_allocator_restore_state");
  BIND(l, extend, "kvc_allocator_alloc_extend");
  BIND(l, decode, "kvc_allocator_alloc_decode");
  BIND(l, mem_alloc, "kvc_memory_alloc");
  BIND(l, mem_free, "kvc_memory_free");
  BIND(l, sync, "kvc_stream_synchronize");
  BIND(l, ch_create, "kvc_decode_channel_create");
  BIND(l, ch_destroy, "kvc_decode_channel_destroy");
  BIND(l, ch_alloc, "kvc_decode_channel_alloc");
  BIND(l, ch_enqueue, "kvc_decode_channel_enqueue");
  BIND(l, flow_create, "kvc_flow_create");
  BIND(l, flow_destroy, "kvc_flow_destroy");
  BIND(l, flow_extend, "kvc_flow_alloc_for_extend");
  BIND(l, flow_release, "kvc_flow_release");
  BIND(l, swa_create, "kvc_swa_allocator_create");
  BIND(l, swa_destroy, "kvc_swa_allocator_destroy");
  BIND(l, swa_extend, "kvc_swa_allocator_alloc_extend");
  BIND(l, swa_decode, "kvc_swa_allocator_alloc_decode");
  BIND(l, swa_free, "kvc_swa_allocator_free");
  BIND(l, swa_zero_begin, "kvc_swa_allocator_defer_zero_begin");
  BIND(l, swa_zero_end, "kvc_swa_allocator_defer_zero_end");
  BIND(l, swa_clear, "kvc_swa_allocator_clear");
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  cfg.backend = host ? KVC_BACKEND_HOST : KVC_BACKEND_AUTO;
  CALL(l, l->context_create(&cfg, &l->ctx));
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One build's world for a case: a request pool, a paged (or token) allocator, device out. */
typedef struct world {
  kvc_req_to_token_pool *pool;
  kvc_allocator *a;
  int32_t *rows;
  int64_t *pre, *seq, *out, *slots, *cp;
  int64_t *dev_out;
  kvc_decode_channel *ch;
  kvc_flow *flow;
  kvc_swa_allocator *swa;
  int steps;
} world;

enum { EXTEND, DECODE, CHANNEL, FREE_PAGED, FREE_TOKEN, FLOW_RELEASE, SWA_DECODE, SWA_DECODE_QUEUED };

#define SWA_VICTIM 64 /* tokens freed before each SWA_DECODE_QUEUED step: 4 pages of 16 */

typedef struct bench_case {
  const char *name;
  int kind, bs, len, ps;
} bench_case;

static void world_make(lib *l, world *w, const bench_case *c) {
  memset(w, 0, sizeof *w);
  const int bs = c->bs, width = c->kind == EXTEND || c->kind == FLOW_RELEASE ? c->len : 1024;
  kvc_req_to_token_pool_config pc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  pc.size = bs;
  pc.max_context_len = width;
  CALL(l, l->pool_create(l->ctx, &pc, &w->pool));
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  /* page size 1 is the TOKEN kind, as SGLang's TokenToKVPoolAllocator */
  ac.kind = c->kind == FREE_TOKEN || c->ps == 1 ? KVC_ALLOCATOR_TOKEN : KVC_ALLOCATOR_PAGED;
  ac.page_size = c->kind == FREE_TOKEN ? 1 : c->ps;
  ac.size = c->kind == FLOW_RELEASE ? (int64_t)width + 2 * c->ps
            : c->kind >= FREE_PAGED ? 1 << 20
                                    : (int64_t)bs * width * 2 + 64 * c->ps;
  CALL(l, l->alloc_create(l->ctx, &ac, &w->a));
  if (c->kind >= SWA_DECODE) {
    kvc_swa_allocator_config sc = KVC_SWA_ALLOCATOR_CONFIG_INIT;
    sc.size_full = sc.size_swa = (int64_t)bs * width + SWA_VICTIM + 64 * c->ps;
    sc.page_size = c->ps;
    CALL(l, l->swa_create(l->ctx, &sc, &w->swa));
  }
  w->rows = calloc((size_t)bs, 4);
  w->pre = calloc((size_t)bs, 8);
  w->seq = calloc((size_t)bs, 8);
  w->out = calloc((size_t)bs * (size_t)width, 8);
  w->slots = calloc(4096, 8);
  w->cp = calloc(4096, 8);
  if (!w->rows || !w->pre || !w->seq || !w->out || !w->slots || !w->cp) die("calloc", l, KVC_ERR_HOST_OOM);
  CALL(l, l->mem_alloc(l->ctx, (size_t)bs * (size_t)width * 8, (void **)&w->dev_out));
  CALL(l, l->pool_alloc(w->pool, (size_t)bs, w->rows));
  if (c->kind == EXTEND) {
    for (int i = 0; i < bs; i++) w->seq[i] = c->len;
  } else if (c->kind == DECODE || c->kind == CHANNEL) {
    for (int i = 0; i < bs; i++) w->seq[i] = 100 + (i * 37) % 400;
    CALL(l, l->extend(w->a, (size_t)bs, w->pre, w->seq, NULL, w->pool, w->rows, NULL, NULL, NULL, NULL));
    for (int i = 0; i < bs; i++) w->seq[i] += 1;
    if (c->kind == CHANNEL) CALL(l, l->ch_create(w->a, w->pool, (size_t)bs, 64, w->dev_out, &w->ch));
  } else if (c->kind >= SWA_DECODE) {
    w->steps = width; /* the first repetition sets the requests up */
  } else if (c->kind == FLOW_RELEASE) {
    CALL(l, l->pool_free_row(w->pool, w->rows[0])); /* the flow takes the row itself */
    kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
    fc.page_size = c->ps;
    fc.req_pool = w->pool;
    fc.allocator = w->a;
    CALL(l, l->flow_create(l->ctx, &fc, &w->flow));
  } else {
    int64_t junk[8 * 16];
    const int jn = c->kind == FREE_TOKEN ? 8 : 8 * c->ps;
    CALL(l, l->alloc(w->a, jn, junk));
    CALL(l, l->alloc(w->a, 4096, w->slots));
    CALL(l, l->free_(w->a, junk, (size_t)jn));
  }
}

static void world_free(lib *l, world *w) {
  CALL(l, l->sync(l->ctx, NULL));
  if (w->ch) l->ch_destroy(w->ch);
  if (w->flow) l->flow_destroy(w->flow);
  if (w->swa) l->swa_destroy(w->swa);
  l->mem_free(l->ctx, w->dev_out);
  free(w->rows), free(w->pre), free(w->seq), free(w->out), free(w->slots), free(w->cp);
  l->alloc_destroy(w->a);
  l->pool_destroy(w->pool);
}

/* One timed call of the case on one build, its effects undone (untimed). */
static double run_once(lib *l, world *w, const bench_case *c) {
  double t0, t1;
  if (c->kind == EXTEND || c->kind == DECODE) {
    kvc_allocator_state s;
    CALL(l, l->backup(w->a, &s));
    t0 = now_us();
    if (c->kind == EXTEND)
      CALL(l, l->extend(w->a, (size_t)c->bs, w->pre, w->seq, NULL, w->pool, w->rows, NULL, w->out, w->dev_out, NULL));
    else CALL(l, l->decode(w->a, (size_t)c->bs, w->seq, NULL, w->pool, w->rows, w->out, w->dev_out, NULL));
    t1 = now_us();
    CALL(l, l->restore(w->a, &s));
    return t1 - t0;
  }
  if (c->kind == CHANNEL) { /* the host half; the kernel that applies the step, untimed */
    kvc_allocator_state s;
    CALL(l, l->backup(w->a, &s));
    t0 = now_us();
    CALL(l, l->ch_alloc(w->ch, (size_t)c->bs, w->seq, NULL, w->rows, w->out));
    t1 = now_us();
    CALL(l, l->ch_enqueue(w->ch, NULL));
    if (++w->steps % 32 == 0) CALL(l, l->sync(l->ctx, NULL)); /* stay well inside the depth of 64 */
    CALL(l, l->restore(w->a, &s));
    return t1 - t0;
  }
  if (c->kind >= SWA_DECODE) { /* no backup for the SWA allocator: the requests grow a token a step */
    const int width = 1024;
    if (w->steps + 1 >= width) { /* untimed: fresh requests of 100..499 tokens */
      CALL(l, l->swa_clear(w->swa, NULL));
      for (int i = 0; i < c->bs; i++) w->pre[i] = 0, w->seq[i] = 100 + (i * 37) % 400;
      CALL(l, l->swa_extend(w->swa, (size_t)c->bs, w->pre, w->seq, NULL, w->pool, w->rows, NULL, NULL, NULL, NULL));
      CALL(l, l->sync(l->ctx, NULL));
      w->steps = 500;
    }
    for (int i = 0; i < c->bs; i++) w->seq[i]++;
    w->steps++;
    const int64_t vpre = 0, vseq = SWA_VICTIM;
    if (c->kind == SWA_DECODE_QUEUED) { /* untimed: 4 pages out and back, their zero queued */
      CALL(l, l->swa_extend(w->swa, 1, &vpre, &vseq, NULL, NULL, NULL, NULL, w->slots, NULL, NULL));
      CALL(l, l->swa_zero_begin(w->swa));
      CALL(l, l->swa_free(w->swa, w->slots, SWA_VICTIM, NULL));
    }
    t0 = now_us();
    CALL(l, l->swa_decode(w->swa, (size_t)c->bs, w->seq, NULL, w->pool, w->rows, w->out, w->dev_out, NULL));
    t1 = now_us();
    if (c->kind == SWA_DECODE_QUEUED) CALL(l, l->swa_zero_end(w->swa, NULL));
    if (w->steps % 32 == 0) CALL(l, l->sync(l->ctx, NULL));
    return t1 - t0;
  }
  if (c->kind == FLOW_RELEASE) { /* kvc_flow_release of one request (chunk cache); its extend untimed */
    kvc_req_state q, *qp = &q;
    memset(&q, 0, sizeof q);
    q.seq_len = c->len;
    CALL(l, l->flow_extend(w->flow, &qp, 1, w->dev_out, NULL)); /* device memory on CUDA */
    t0 = now_us();
    CALL(l, l->flow_release(w->flow, &qp, 1, 1, NULL));
    t1 = now_us();
    return t1 - t0;
  }
  /* free of 4096 slots, pages listed in descending order (as bench_alloc does) */
  const int ps = c->kind == FREE_TOKEN ? 1 : c->ps, np = 4096 / ps;
  for (int j = 0; j < np; j++) memcpy(w->cp + (size_t)j * ps, w->slots + (size_t)(np - 1 - j) * ps, (size_t)ps * 8);
  t0 = now_us();
  CALL(l, l->free_(w->a, w->cp, 4096));
  t1 = now_us();
  if (c->kind == FREE_TOKEN) CALL(l, l->clear(w->a));
  CALL(l, l->alloc(w->a, 4096, w->slots));
  return t1 - t0;
}

int main(int argc, char **argv) {
  int reps = 2000, host = 0;
  const char *only = NULL;
  const char *paths[2] = {NULL, NULL};
  for (int i = 1, np = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--host")) host = 1;
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (np < 2) paths[np++] = argv[i];
  }
  if (!paths[0] || !paths[1] || reps < 10) {
    fprintf(stderr, "usage: %s LIB_A LIB_B [--reps N>=10] [--host] [--only NAME-PART]\n", argv[0]);
    return 2;
  }
  lib libs[2];
  lib_open(&libs[0], paths[0], host);
  lib_open(&libs[1], paths[1], host);
  static const bench_case cases[] = {
      {"alloc_extend 16 x 512", EXTEND, 16, 512, 16},
      {"alloc_extend 64 x 256", EXTEND, 64, 256, 16},
      {"alloc_extend 16 x 512", EXTEND, 16, 512, 1},
      {"alloc_decode", DECODE, 256, 0, 16},
      {"alloc_decode", DECODE, 1024, 0, 16},
      {"alloc_decode", DECODE, 1024, 0, 64},
      {"channel host half", CHANNEL, 256, 0, 16},
      {"channel host half", CHANNEL, 1024, 0, 16},
      {"channel host half", CHANNEL, 1024, 0, 64},
      {"free 4096 (paged)", FREE_PAGED, 1, 0, 16},
      {"free 4096 (token)", FREE_TOKEN, 1, 0, 1},
      {"flow release 4096", FLOW_RELEASE, 1, 4096, 1},
      {"flow release 4096", FLOW_RELEASE, 1, 4096, 16},
      {"swa alloc_decode", SWA_DECODE, 256, 0, 16},
      {"swa decode, zero queued", SWA_DECODE_QUEUED, 256, 0, 16},
  };
  const int warm = reps / 10;
  double *t[2] = {malloc(sizeof(double) * (size_t)reps), malloc(sizeof(double) * (size_t)reps)};
  if (!t[0] || !t[1]) return 1;
  printf("A = %s\nB = %s\n%d repetitions per case after %d warm-up, A and B alternating (order swapped each "
         "repetition); host us per call\n",
         paths[0], paths[1], reps, warm);
  printf("%-24s %5s %4s %10s %10s %10s %10s %9s %9s\n", "case", "batch", "ps", "A median", "B median", "A min", "B min",
         "B/A med", "B/A min");
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const bench_case *c = &cases[k];
    if (only && !strstr(c->name, only)) continue;
    world w[2];
    world_make(&libs[0], &w[0], c);
    world_make(&libs[1], &w[1], c);
    for (int r = 0; r < reps + warm; r++)
      for (int j = 0; j < 2; j++) {
        const int x = (r & 1) ? 1 - j : j;
        const double us = run_once(&libs[x], &w[x], c);
        if (r >= warm) t[x][r - warm] = us;
      }
    double mn[2];
    for (int x = 0; x < 2; x++) {
      mn[x] = t[x][0];
      for (int i = 1; i < reps; i++)
        if (t[x][i] < mn[x]) mn[x] = t[x][i];
    }
    const double ma = median(t[0], reps), mb = median(t[1], reps);
    printf("%-24s %5d %4d %10.2f %10.2f %10.2f %10.2f %8.1f%% %8.1f%%\n", c->name, c->bs, c->ps, ma, mb, mn[0], mn[1],
           100.0 * (mb / ma - 1), 100.0 * (mn[1] / mn[0] - 1));
    world_free(&libs[0], &w[0]);
    world_free(&libs[1], &w[1]);
  }
  for (int x = 0; x < 2; x++) libs[x].context_destroy(libs[x].ctx);
  free(t[0]);
  free(t[1]);
  return 0;
}
