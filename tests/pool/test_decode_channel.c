/* test_decode_channel.c — kvc_decode_channel: the decode step published on the host and
 * applied by a kernel with fixed parameters (enqueued per step, or captured once into a
 * CUDA graph and replayed). Every step is compared with a twin allocator running
 * kvc_allocator_alloc_decode on the same calls; the device table is audited against the
 * host mirror. */
#include "harness.h"

#include <dlfcn.h>

typedef struct world {
  kvc_allocator *a;
  kvc_req_to_token_pool *rp;
  int64_t *out_dev;
} world;

enum { ROWS = 12, WIDTH = 96, PS = 4, PAGES = 160, BATCH = 8 };

static void make_world(world *w) {
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = KVC_ALLOCATOR_PAGED;
  ac.size = PAGES * PS;
  ac.page_size = PS;
  KVT_OK(kvc_allocator_create(kvt_ctx, &ac, &w->a));
  kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rc.size = ROWS;
  rc.max_context_len = WIDTH;
  KVT_OK(kvc_req_to_token_pool_create(kvt_ctx, &rc, &w->rp));
  w->out_dev = kvt_dev_alloc(BATCH * sizeof(int64_t));
}

static void drop_world(world *w) {
  kvc_allocator_destroy(w->a);
  kvc_req_to_token_pool_destroy(w->rp);
  kvt_dev_free(w->out_dev);
}

/* n requests with prompts of 1..9 tokens (prefill through the plain API). */
static void prefill(world *w, int n, int32_t *rows, int64_t *seq) {
  int64_t pre[BATCH] = {0};
  for (int i = 0; i < n; i++) {
    rows[i] = 0;
    seq[i] = 1 + (i * 5) % 9;
  }
  KVT_OK(kvc_req_to_token_pool_alloc(w->rp, (size_t)n, rows));
  KVT_OK(kvc_allocator_alloc_extend(w->a, (size_t)n, pre, seq, NULL, w->rp, rows, NULL, NULL, NULL, NULL));
}

typedef void (*apply_fn)(void *arg);

/* `steps` decode steps: channel alloc + apply(arg) on `cw`, alloc_decode on the twin `tw`;
 * the same slots must come out. The batch shrinks and grows every 7 steps (padded graph
 * batches). The last step's slots and batch size come back in last / *last_bs. */
static void run_steps(kvc_decode_channel *ch, world *cw, world *tw, int steps, apply_fn apply, void *arg,
                      kvc_stream sync_stream, int64_t *last, size_t *last_bs) {
  int32_t rows_c[BATCH], rows_t[BATCH];
  int64_t seq_c[BATCH], seq_t[BATCH];
  prefill(cw, BATCH, rows_c, seq_c);
  prefill(tw, BATCH, rows_t, seq_t);
  int64_t want[BATCH];
  for (int s = 0; s < steps; s++) {
    const size_t bs = (size_t)(BATCH - (s / 7) % 3);
    for (size_t i = 0; i < bs; i++) seq_c[i]++, seq_t[i]++;
    /* The host may run `depth` steps ahead of the device; past that the alloc is BUSY
     * and changes nothing: wait for the device and retry, as an engine would. */
    kvc_status st = kvc_decode_channel_alloc(ch, bs, seq_c, NULL, rows_c, last);
    if (st == KVC_ERR_BUSY) {
      KVT_OK(kvc_stream_synchronize(kvt_ctx, sync_stream));
      st = kvc_decode_channel_alloc(ch, bs, seq_c, NULL, rows_c, last);
    }
    KVT_OK(st);
    KVT_OK(kvc_allocator_alloc_decode(tw->a, bs, seq_t, NULL, tw->rp, rows_t, want, NULL, NULL));
    for (size_t i = 0; i < bs; i++)
      if (last[i] != want[i])
        fail_msg("step %d request %zu: channel slot %lld, alloc_decode %lld", s, i, (long long)last[i],
                 (long long)want[i]);
    *last_bs = bs;
    apply(arg);
  }
  assert_int_equal(kvc_allocator_available_size(cw->a), kvc_allocator_available_size(tw->a));
}

static void apply_enqueue(void *arg) { KVT_OK(kvc_decode_channel_enqueue(arg, NULL)); }

/* After the last step: the device table equals the host mirror, out_device holds the
 * step's slots then the padding slot 0, and every published step was applied. */
static void expect_applied(kvc_decode_channel *ch, world *w, const int64_t *last, size_t bs, uint64_t steps,
                           kvc_stream stream) {
  KVT_OK(kvc_stream_synchronize(kvt_ctx, stream));
  uint64_t pub = 0, app = 0;
  KVT_OK(kvc_decode_channel_check(ch, &pub, &app));
  assert_int_equal(pub, steps);
  assert_int_equal(app, steps);
  KVT_OK(kvc_req_to_token_pool_audit_device(w->rp, stream));
  int64_t out[BATCH];
  kvt_d2h(out, w->out_dev, sizeof out);
  for (size_t i = 0; i < BATCH; i++) {
    const int64_t want = i < bs ? last[i] : 0;
    if (out[i] != want) fail_msg("out_device[%zu] = %lld, want %lld", i, (long long)out[i], (long long)want);
  }
}

static void test_channel_matches_alloc_decode(void **state) {
  (void)state;
  world cw, tw;
  make_world(&cw);
  make_world(&tw);
  kvc_decode_channel *ch = NULL;
  KVT_OK(kvc_decode_channel_create(cw.a, cw.rp, BATCH, 3, cw.out_dev, &ch)); /* depth 4 */
  int64_t last[BATCH];
  size_t bs = 0;
  run_steps(ch, &cw, &tw, 40, apply_enqueue, ch, NULL, last, &bs);
  expect_applied(ch, &cw, last, bs, 40, NULL);
  kvc_decode_channel_destroy(ch);
  drop_world(&cw);
  drop_world(&tw);
}

static void test_channel_errors_change_nothing(void **state) {
  (void)state;
  world w;
  make_world(&w);
  kvc_decode_channel *ch = NULL;
  KVT_STATUS(kvc_decode_channel_create(NULL, w.rp, BATCH, 4, w.out_dev, &ch), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_decode_channel_create(w.a, NULL, BATCH, 4, NULL, &ch), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_decode_channel_create(w.a, w.rp, 0, 4, w.out_dev, &ch), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_decode_channel_create(w.a, w.rp, BATCH, 1, w.out_dev, &ch), KVC_ERR_INVALID_ARGUMENT);
  assert_null(ch);
  KVT_OK(kvc_decode_channel_create(w.a, w.rp, BATCH, 2, w.out_dev, &ch));
  int32_t rows[BATCH];
  int64_t seq[BATCH];
  prefill(&w, 4, rows, seq);
  const int64_t avail = kvc_allocator_available_size(w.a);
  for (int i = 0; i < 4; i++) seq[i]++;
  /* batch over max_batch; a row that is not held; a seq_len past the row */
  KVT_STATUS(kvc_decode_channel_alloc(ch, BATCH + 1, seq, NULL, rows, NULL), KVC_ERR_INVALID_ARGUMENT);
  int32_t bad_rows[4] = {rows[0], rows[1], rows[2], ROWS};
  KVT_STATUS(kvc_decode_channel_alloc(ch, 4, seq, NULL, bad_rows, NULL), KVC_ERR_MISUSE);
  int64_t bad_seq[4] = {seq[0], seq[1], seq[2], WIDTH + 1};
  KVT_STATUS(kvc_decode_channel_alloc(ch, 4, bad_seq, NULL, rows, NULL), KVC_ERR_INVALID_ARGUMENT);
  uint64_t pub = 9;
  KVT_OK(kvc_decode_channel_check(ch, &pub, NULL));
  assert_int_equal(pub, 0);
  assert_int_equal(kvc_allocator_available_size(w.a), avail);
  /* depth 2 published, none applied: the third is BUSY and changes nothing */
  KVT_OK(kvc_decode_channel_alloc(ch, 4, seq, NULL, rows, NULL));
  for (int i = 0; i < 4; i++) seq[i]++;
  KVT_OK(kvc_decode_channel_alloc(ch, 4, seq, NULL, rows, NULL));
  const int64_t avail2 = kvc_allocator_available_size(w.a);
  for (int i = 0; i < 4; i++) seq[i]++;
  KVT_STATUS(kvc_decode_channel_alloc(ch, 4, seq, NULL, rows, NULL), KVC_ERR_BUSY);
  assert_int_equal(kvc_allocator_available_size(w.a), avail2);
  KVT_OK(kvc_decode_channel_enqueue(ch, NULL));
  KVT_OK(kvc_decode_channel_enqueue(ch, NULL));
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  KVT_OK(kvc_decode_channel_alloc(ch, 4, seq, NULL, rows, NULL)); /* room again */
  KVT_OK(kvc_decode_channel_enqueue(ch, NULL));
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  KVT_OK(kvc_req_to_token_pool_audit_device(w.rp, NULL));
  /* an execution with nothing published: out_device -> padding slot, MISUSE reported */
  KVT_OK(kvc_decode_channel_enqueue(ch, NULL));
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  int64_t out[BATCH];
  kvt_d2h(out, w.out_dev, sizeof out);
  for (int i = 0; i < BATCH; i++) assert_int_equal(out[i], 0);
  KVT_STATUS(kvc_decode_channel_check(ch, NULL, NULL), KVC_ERR_MISUSE);
  for (int i = 0; i < 4; i++) seq[i]++;
  KVT_STATUS(kvc_decode_channel_alloc(ch, 4, seq, NULL, rows, NULL), KVC_ERR_MISUSE);
  KVT_STATUS(kvc_decode_channel_enqueue(NULL, NULL), KVC_ERR_INVALID_ARGUMENT);
  kvc_decode_channel_destroy(ch);
  kvc_decode_channel_destroy(NULL);
  drop_world(&w);
}

/* --- SWA allocators: the channel also writes the full->SWA mapping ------------------- */

static kvc_swa_allocator *make_swa(void) {
  kvc_swa_allocator_config c = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  c.size_full = PAGES * PS;
  c.size_swa = PAGES * PS / 2;
  c.page_size = PS;
  kvc_swa_allocator *a = NULL;
  KVT_OK(kvc_swa_allocator_create(kvt_ctx, &c, &a));
  return a;
}

/* The device mapping equals the host one. */
static void expect_swa_mapping(const kvc_swa_allocator *a) {
  const int64_t n = kvc_swa_allocator_mapping_length(a);
  int64_t *d = malloc((size_t)n * 8);
  kvt_d2h(d, kvc_swa_allocator_mapping_device(a), (size_t)n * 8);
  const int32_t *h = kvc_swa_allocator_mapping_host(a);
  for (int64_t i = 0; i < n; i++)
    if (d[i] != h[i]) fail_msg("device mapping[%lld] = %lld, host %d", (long long)i, (long long)d[i], h[i]);
  free(d);
}

static void test_swa_channel_matches_swa_alloc_decode(void **state) {
  (void)state;
  kvc_swa_allocator *ca = make_swa(), *ta = make_swa();
  kvc_req_to_token_pool *crp, *trp;
  kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rc.size = ROWS;
  rc.max_context_len = WIDTH;
  KVT_OK(kvc_req_to_token_pool_create(kvt_ctx, &rc, &crp));
  KVT_OK(kvc_req_to_token_pool_create(kvt_ctx, &rc, &trp));
  int64_t *out_dev = kvt_dev_alloc(BATCH * sizeof(int64_t));
  kvc_decode_channel *ch = NULL;
  kvc_allocator *plain = NULL;
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = KVC_ALLOCATOR_PAGED, ac.size = 64, ac.page_size = PS;
  KVT_OK(kvc_allocator_create(kvt_ctx, &ac, &plain));
  KVT_STATUS(kvc_decode_channel_create_swa((kvc_swa_allocator *)(void *)plain, crp, BATCH, 4, out_dev, &ch),
             KVC_ERR_INVALID_ARGUMENT); /* not an SWA allocator */
  KVT_OK(kvc_decode_channel_create_swa(ca, crp, BATCH, 4, out_dev, &ch));
  int32_t rc_rows[BATCH] = {0}, rt_rows[BATCH] = {0};
  int64_t pre[BATCH] = {0}, sc[BATCH], st[BATCH], got[BATCH], want[BATCH];
  for (int i = 0; i < BATCH; i++) sc[i] = st[i] = 1 + (i * 5) % 9;
  KVT_OK(kvc_req_to_token_pool_alloc(crp, BATCH, rc_rows));
  KVT_OK(kvc_req_to_token_pool_alloc(trp, BATCH, rt_rows));
  KVT_OK(kvc_swa_allocator_alloc_extend(ca, BATCH, pre, sc, NULL, crp, rc_rows, NULL, NULL, NULL, NULL));
  KVT_OK(kvc_swa_allocator_alloc_extend(ta, BATCH, pre, st, NULL, trp, rt_rows, NULL, NULL, NULL, NULL));
  for (int step = 0; step < 30; step++) {
    const size_t bs = (size_t)(BATCH - (step / 7) % 3);
    for (size_t i = 0; i < bs; i++) sc[i]++, st[i]++;
    KVT_OK(kvc_decode_channel_alloc(ch, bs, sc, NULL, rc_rows, got));
    KVT_OK(kvc_swa_allocator_alloc_decode(ta, bs, st, NULL, trp, rt_rows, want, NULL, NULL));
    for (size_t i = 0; i < bs; i++)
      if (got[i] != want[i])
        fail_msg("step %d request %zu: slot %lld, alloc_decode %lld", step, i, (long long)got[i], (long long)want[i]);
    KVT_OK(kvc_decode_channel_enqueue(ch, NULL));
    KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
    if (step % 10 == 9) {
      expect_swa_mapping(ca);
      KVT_OK(kvc_req_to_token_pool_audit_device(crp, NULL));
    }
  }
  const int32_t *hc = kvc_swa_allocator_mapping_host(ca), *ht = kvc_swa_allocator_mapping_host(ta);
  for (int64_t i = 0; i < kvc_swa_allocator_mapping_length(ca); i++)
    if (hc[i] != ht[i]) fail_msg("host mapping[%lld]: channel %d, alloc_decode %d", (long long)i, hc[i], ht[i]);
  KVT_OK(kvc_swa_allocator_check(ca));
  kvc_decode_channel_destroy(ch);
  kvc_allocator_destroy(plain);
  kvc_swa_allocator_destroy(ca);
  kvc_swa_allocator_destroy(ta);
  kvc_req_to_token_pool_destroy(crp);
  kvc_req_to_token_pool_destroy(trp);
  kvt_dev_free(out_dev);
}

/* --- CUDA graphs: the kernel captured once, replayed every step ------------------------ */

typedef struct cuda_api {
  int (*stream_create)(void **, unsigned);
  int (*begin_capture)(void *, int);
  int (*end_capture)(void *, void **);
  int (*instantiate)(void **, void *, unsigned long long);
  int (*graph_launch)(void *, void *);
  int (*exec_destroy)(void *);
  int (*graph_destroy)(void *);
  int (*stream_destroy)(void *);
} cuda_api;

static int load_cuda(cuda_api *c) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return 0;
  *(void **)&c->stream_create = dlsym(h, "cuStreamCreate");
  *(void **)&c->begin_capture = dlsym(h, "cuStreamBeginCapture_v2");
  *(void **)&c->end_capture = dlsym(h, "cuStreamEndCapture");
  *(void **)&c->instantiate = dlsym(h, "cuGraphInstantiateWithFlags");
  *(void **)&c->graph_launch = dlsym(h, "cuGraphLaunch");
  *(void **)&c->exec_destroy = dlsym(h, "cuGraphExecDestroy");
  *(void **)&c->graph_destroy = dlsym(h, "cuGraphDestroy");
  *(void **)&c->stream_destroy = dlsym(h, "cuStreamDestroy_v2");
  return c->stream_create && c->begin_capture && c->end_capture && c->instantiate && c->graph_launch &&
         c->exec_destroy && c->graph_destroy && c->stream_destroy;
}

typedef struct replay {
  cuda_api *cu;
  void *exec, *stream;
} replay;

static void apply_graph(void *arg) {
  replay *r = arg;
  assert_int_equal(r->cu->graph_launch(r->exec, r->stream), 0);
}

static void test_channel_in_cuda_graph(void **state) {
  (void)state;
  kvt_require_cuda();
  cuda_api cu;
  if (!load_cuda(&cu)) fail_msg("libcuda graph entry points not found");
  world cw, tw;
  make_world(&cw);
  make_world(&tw);
  kvc_decode_channel *ch = NULL;
  KVT_OK(kvc_decode_channel_create(cw.a, cw.rp, BATCH, 64, cw.out_dev, &ch));
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL)); /* also makes the context current here */
  replay r = {&cu, NULL, NULL};
  assert_int_equal(cu.stream_create(&r.stream, 0), 0); /* blocking: ordered after the NULL stream */
  void *graph = NULL;
  assert_int_equal(cu.begin_capture(r.stream, 1 /* thread-local */), 0);
  KVT_OK(kvc_decode_channel_enqueue(ch, r.stream));
  assert_int_equal(cu.end_capture(r.stream, &graph), 0);
  assert_int_equal(cu.instantiate(&r.exec, graph, 0), 0);
  /* 60 steps with depth 64: the host never waits for the device */
  int64_t last[BATCH];
  size_t bs = 0;
  run_steps(ch, &cw, &tw, 60, apply_graph, &r, r.stream, last, &bs);
  expect_applied(ch, &cw, last, bs, 60, r.stream);
  cu.exec_destroy(r.exec);
  cu.graph_destroy(graph);
  cu.stream_destroy(r.stream);
  kvc_decode_channel_destroy(ch);
  drop_world(&cw);
  drop_world(&tw);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_channel_matches_alloc_decode),
    cmocka_unit_test(test_channel_errors_change_nothing),
    cmocka_unit_test(test_swa_channel_matches_swa_alloc_decode),
    cmocka_unit_test(test_channel_in_cuda_graph),
};

KVT_MAIN("decode_channel", tests)
