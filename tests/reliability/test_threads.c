/* Threads on one context (issue 13 item 5): the header lets several threads use one
 * context at once with distinct pools and allocators. Four threads each build their own
 * req pool, allocator, KV pool and flow-free level-2 traffic on the shared context, fail
 * calls on purpose (error text per thread), look kernels up (shared kernel cache) and
 * allocate host/device memory (shared accounting). Run under ThreadSanitizer by
 * scripts/test_tsan.sh; without it, the exact live counts at the end still catch lost
 * updates of the context's counters. Steps: env KVT_STEPS (default 2000). */
#include "harness.h"

#include <pthread.h>

#include "core/fault.h"

#define THREADS 4

typedef struct worker {
  int id;
  int steps;
  kvc_status failed_with; /* first unexpected status, KVC_OK if none */
  char failure[256];
} worker;

#define WORKER_CHECK(w, expr, want)                                                                                \
  do {                                                                                                             \
    kvc_status st_ = (expr);                                                                                       \
    if (st_ != (want) && (w)->failed_with == KVC_OK) {                                                             \
      (w)->failed_with = st_ == KVC_OK ? KVC_ERR_INTERNAL : st_;                                                   \
      snprintf((w)->failure, sizeof(w)->failure, "thread %d: %s -> %s (%s)", (w)->id, #expr, kvc_status_name(st_), \
               kvc_last_error(kvt_ctx));                                                                           \
    }                                                                                                              \
  } while (0)

static void *work(void *arg) {
  worker *w = arg;
  kvc_context *ctx = kvt_ctx;
  kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rc.size = 8;
  rc.max_context_len = 64;
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = KVC_ALLOCATOR_PAGED;
  ac.size = 256;
  ac.page_size = 4;
  kvc_kv_pool_config kc = KVC_KV_POOL_CONFIG_INIT;
  kc.kind = KVC_KV_MHA;
  kc.dtype = KVC_DTYPE_BF16;
  kc.head_num = 1;
  kc.head_dim = 8 * (w->id + 1); /* distinct kernel variants per thread, and shared ones */
  kc.size = 256;
  kc.layer_num = 2;
  kc.page_size = 4;
  kvc_req_to_token_pool *rp = NULL;
  kvc_allocator *a = NULL;
  kvc_kv_pool *kv = NULL;
  int64_t *loc_dev = NULL;
  WORKER_CHECK(w, kvc_req_to_token_pool_create(ctx, &rc, &rp), KVC_OK);
  WORKER_CHECK(w, kvc_allocator_create(ctx, &ac, &a), KVC_OK);
  WORKER_CHECK(w, kvc_kv_pool_create(ctx, &kc, &kv), KVC_OK);
  WORKER_CHECK(w, kvc_memory_alloc(ctx, 8 * sizeof(int64_t), (void **)&loc_dev), KVC_OK);
  if (w->failed_with != KVC_OK) goto done;
  for (int step = 0; step < w->steps && w->failed_with == KVC_OK; step++) {
    int32_t row = 0;
    int64_t slots[8];
    WORKER_CHECK(w, kvc_req_to_token_pool_alloc(rp, 1, &row), KVC_OK);
    WORKER_CHECK(w, kvc_allocator_alloc(a, 8, slots), KVC_OK);
    WORKER_CHECK(w, kvc_req_to_token_pool_write(rp, row, 0, slots, 8, NULL), KVC_OK);
    WORKER_CHECK(w, kvc_memcpy_h2d(ctx, loc_dev, slots, sizeof slots, NULL), KVC_OK);
    WORKER_CHECK(w, kvc_kv_pool_move(kv, loc_dev, loc_dev + 4, KVC_INDEX_I64, 4, NULL), KVC_OK);
    /* A failure per step, with this thread's own text. */
    WORKER_CHECK(w, kvc_req_to_token_pool_write(rp, row, 60 + w->id, slots, 8, NULL), KVC_ERR_INVALID_ARGUMENT);
    char want[32];
    snprintf(want, sizeof want, "[%d, %d + 8)", 60 + w->id, 60 + w->id);
    if (!strstr(kvc_last_error(ctx), want) && w->failed_with == KVC_OK) {
      w->failed_with = KVC_ERR_INTERNAL;
      snprintf(w->failure, sizeof w->failure, "thread %d: error text \"%s\" lacks \"%s\"", w->id, kvc_last_error(ctx),
               want);
    }
    WORKER_CHECK(w, kvc_allocator_free(a, slots, 8), KVC_OK);
    WORKER_CHECK(w, kvc_req_to_token_pool_free(rp, row), KVC_OK);
    kvc_kernel_cache_stats ks;
    WORKER_CHECK(w, kvc_context_kernel_cache_stats(ctx, &ks), KVC_OK);
  }
  WORKER_CHECK(w, kvc_stream_synchronize(ctx, NULL), KVC_OK);
  WORKER_CHECK(w, kvc_allocator_check(a), KVC_OK);
done:
  kvc_memory_free(ctx, loc_dev);
  kvc_kv_pool_destroy(kv);
  kvc_allocator_destroy(a);
  kvc_req_to_token_pool_destroy(rp);
  return NULL;
}

static int steps_from_env(void) {
  const char *e = getenv("KVT_STEPS");
  long v = e && *e ? strtol(e, NULL, 10) : 2000;
  return v < 1 ? 1 : v > 1000000 ? 1000000 : (int)v;
}

static void run_workers(int steps) {
  worker w[THREADS];
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker){i, steps, KVC_OK, {0}};
    assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < THREADS; i++)
    if (w[i].failed_with != KVC_OK) fail_msg("%s", w[i].failure);
}

static void test_four_threads_share_one_context(void **state) {
  (void)state;
  run_workers(1); /* compiles / caches every kernel variant, which stays allocated */
  const kvc__live before = kvc__fault_live(kvt_ctx);
  run_workers(steps_from_env());
  /* Every allocation the threads made was freed: the shared tallies are exact. */
  const kvc__live after = kvc__fault_live(kvt_ctx);
  assert_int_equal(after.host_allocs, before.host_allocs);
  assert_int_equal(after.host_bytes, before.host_bytes);
  assert_int_equal(after.device_allocs, before.device_allocs);
}

/* The main thread's text on the context is its own after the workers failed on it. */
static void test_error_text_stays_per_thread_under_load(void **state) {
  (void)state;
  KVT_STATUS(kvc_memset_d8(kvt_ctx, NULL, 0, 77, NULL), KVC_ERR_INVALID_ARGUMENT);
  char mine[256];
  snprintf(mine, sizeof mine, "%s", kvc_last_error(kvt_ctx));
  run_workers(50);
  assert_string_equal(kvc_last_error(kvt_ctx), mine);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_four_threads_share_one_context),
    cmocka_unit_test(test_error_text_stays_per_thread_under_load),
};

KVT_MAIN("threads", tests)
