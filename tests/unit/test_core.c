/* Context, status codes, error text per context and thread, memory helpers. */
#include "harness.h"

#include <pthread.h>

static void test_status_strings_cover_every_code(void **state) {
  (void)state;
  assert_string_equal(kvc_status_name(KVC_OK), "OK");
  assert_string_equal(kvc_status_name(KVC_ERR_OUT_OF_SLOTS), "ERR_OUT_OF_SLOTS");
  for (int s = 0; s <= KVC_ERR_IO; s++) {
    assert_string_not_equal(kvc_status_name((kvc_status)s), "UNKNOWN");
    assert_true(strlen(kvc_status_string((kvc_status)s)) > 3);
  }
  assert_string_equal(kvc_status_name((kvc_status)999), "UNKNOWN");
  /* Capacity exhaustion is distinct from host and device OOM. */
  assert_int_not_equal(KVC_ERR_OUT_OF_SLOTS, KVC_ERR_HOST_OOM);
  assert_int_not_equal(KVC_ERR_OUT_OF_SLOTS, KVC_ERR_DEVICE_OOM);
  assert_int_equal(KVC_ERR_INVALID_ARGUMENT, 1); /* pinned values */
  assert_int_equal(KVC_ERR_MISUSE, 9);
}

static void test_version_matches_header(void **state) {
  (void)state;
  assert_int_equal(kvc_version_number(), KVC_VERSION_NUMBER);
  assert_string_equal(kvc_version_string(), KVC_VERSION_STRING);
}

static void test_config_with_wrong_size_or_major_is_rejected(void **state) {
  (void)state;
  kvc_context *c = NULL;
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  cfg.struct_size = 8;
  assert_int_equal(kvc_context_create(&cfg, &c), KVC_ERR_VERSION);
  assert_null(c);
  assert_non_null(strstr(kvc_last_error(NULL), "struct_size"));
  kvc_context_config_default(&cfg);
  cfg.version = 99 * 10000;
  assert_int_equal(kvc_context_create(&cfg, &c), KVC_ERR_VERSION);
  kvc_context_config_default(&cfg);
  cfg.backend = (kvc_backend)7;
  assert_int_equal(kvc_context_create(&cfg, &c), KVC_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvc_context_create(NULL, NULL), KVC_ERR_INVALID_ARGUMENT);
  kvc_context_destroy(NULL); /* no-op */
}

static void test_host_backend_always_available(void **state) {
  (void)state;
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  cfg.backend = KVC_BACKEND_HOST;
  kvc_context *c = NULL;
  KVT_OK(kvc_context_create(&cfg, &c));
  assert_int_equal(kvc_context_backend(c), KVC_BACKEND_HOST);
  assert_int_equal(kvc_context_device(c), -1);
  kvc_device_info info;
  KVT_OK(kvc_context_device_info(c, &info));
  assert_string_equal(info.name, "host");
  kvc_context_destroy(c);
}

static void test_check_mode_from_flag(void **state) {
  (void)state;
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  cfg.backend = KVC_BACKEND_HOST;
  cfg.flags = KVC_CONTEXT_CHECK;
  kvc_context *c = NULL;
  KVT_OK(kvc_context_create(&cfg, &c));
  assert_true(kvc_context_check_mode(c));
  kvc_context_destroy(c);
}

typedef struct thread_arg {
  kvc_context *ctx;
  char seen[256];
} thread_arg;

static void *other_thread(void *p) {
  thread_arg *a = p;
  /* A fresh thread sees no error on the context... */
  snprintf(a->seen, sizeof a->seen, "%s", kvc_last_error(a->ctx));
  /* ...and its own failure does not leak into the main thread. */
  kvc_memcpy_h2d(a->ctx, NULL, "x", 1, NULL);
  return NULL;
}

static void test_error_text_is_per_context_and_per_thread(void **state) {
  (void)state;
  kvc_context *a = kvt_ctx, *b = NULL;
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  cfg.backend = KVC_BACKEND_HOST;
  KVT_OK(kvc_context_create(&cfg, &b));
  assert_int_equal(kvc_memset_d8(a, NULL, 0, 16, NULL), KVC_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvc_last_error(a), "kvc_memset_d8"));
  assert_string_equal(kvc_last_error(b), "");
  const char *before = kvc_last_error(a);
  char copy[256];
  snprintf(copy, sizeof copy, "%s", before);
  thread_arg arg = {a, {0}};
  pthread_t t;
  pthread_create(&t, NULL, other_thread, &arg);
  pthread_join(t, NULL);
  assert_string_equal(arg.seen, "");
  assert_string_equal(kvc_last_error(a), copy);
  kvc_context_destroy(b);
}

/* More contexts than any fixed per-thread table: each keeps its own text, and a pointer
 * returned earlier still shows that context's message (issue 13 item 6). */
static void test_error_text_holds_for_any_number_of_contexts(void **state) {
  (void)state;
  enum { N = 40 };
  kvc_context *c[N];
  const char *earlier[N];
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  cfg.backend = KVC_BACKEND_HOST;
  for (int i = 0; i < N; i++) {
    KVT_OK(kvc_context_create(&cfg, &c[i]));
    /* A distinct size in each message tells the contexts apart. */
    kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
    rc.size = -(1000 + i);
    rc.max_context_len = 8;
    kvc_req_to_token_pool *rp = NULL;
    assert_int_equal(kvc_req_to_token_pool_create(c[i], &rc, &rp), KVC_ERR_INVALID_ARGUMENT);
    earlier[i] = kvc_last_error(c[i]);
  }
  for (int i = 0; i < N; i++) {
    char want[32];
    snprintf(want, sizeof want, "%d", -(1000 + i));
    if (!strstr(kvc_last_error(c[i]), want) || !strstr(earlier[i], want))
      fail_msg("context %d: text \"%s\", earlier pointer \"%s\", want \"%s\"", i, kvc_last_error(c[i]), earlier[i],
               want);
    assert_ptr_equal(kvc_last_error(c[i]), earlier[i]);
  }
  for (int i = 0; i < N; i++) kvc_context_destroy(c[i]);
}

static void test_context_config_reserved_and_unknown_flags_are_refused(void **state) {
  (void)state;
  kvc_context *c = (kvc_context *)&c; /* must stay untouched */
  kvc_context *const sentinel = c;
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  cfg.backend = KVC_BACKEND_HOST;
  cfg.reserved_[7] = 1;
  assert_int_equal(kvc_context_create(&cfg, &c), KVC_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvc_last_error(NULL), "reserved_[7]"));
  assert_ptr_equal(c, sentinel);
  kvc_context_config_default(&cfg);
  cfg.backend = KVC_BACKEND_HOST;
  cfg.flags = 0x80u;
  assert_int_equal(kvc_context_create(&cfg, &c), KVC_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvc_last_error(NULL), "flags"));
  assert_ptr_equal(c, sentinel);
  /* A caller built against a newer minor with a bigger struct is refused, not misread. */
  kvc_context_config_default(&cfg);
  cfg.struct_size = sizeof cfg + 8;
  assert_int_equal(kvc_context_create(&cfg, &c), KVC_ERR_VERSION);
  assert_ptr_equal(c, sentinel);
}

static void test_memory_roundtrip_on_backend(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  size_t n = 1 << 16;
  uint8_t *src = malloc(n), *dst = malloc(n);
  for (size_t i = 0; i < n; i++) src[i] = (uint8_t)kvt_next(&r);
  void *a = kvt_dev_alloc(n), *b = kvt_dev_alloc(n);
  kvt_poison(b, n);
  kvt_h2d(a, src, n);
  KVT_OK(kvc_memcpy_d2d(kvt_ctx, b, a, n, NULL));
  kvt_d2h(dst, b, n);
  assert_memory_equal(src, dst, n);
  KVT_OK(kvc_memset_d8(kvt_ctx, b, 7, 100, NULL));
  kvt_d2h(dst, b, 200);
  for (int i = 0; i < 100; i++) assert_int_equal(dst[i], 7);
  assert_memory_equal(dst + 100, src + 100, 100);
  void *z = (void *)1;
  KVT_OK(kvc_memory_alloc(kvt_ctx, 0, &z));
  assert_null(z);
  kvt_dev_free(a);
  kvt_dev_free(b);
  kvc_memory_free(kvt_ctx, NULL);
  free(src);
  free(dst);
}

static void test_pinned_memory(void **state) {
  (void)state;
  void *p = NULL;
  KVT_OK(kvc_host_pinned_alloc(kvt_ctx, 4096, &p));
  memset(p, 1, 4096); /* host-accessible on both backends */
  kvc_host_pinned_free(kvt_ctx, p);
}

static void test_cuda_request_without_device_is_no_device(void **state) {
  (void)state;
  if (kvc_context_backend(kvt_ctx) == KVC_BACKEND_CUDA) skip();
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  cfg.backend = KVC_BACKEND_CUDA;
  kvc_context *c = NULL;
  kvc_status st = kvc_context_create(&cfg, &c);
  if (st == KVC_OK) { /* a GPU machine running the host group */
    kvc_context_destroy(c);
    return;
  }
  assert_int_equal(st, KVC_ERR_NO_DEVICE);
  assert_null(c);
  /* Named once, by the function the caller called (issue 13 item 14). */
  const char *msg = kvc_last_error(NULL);
  if (strncmp(msg, "kvc_context_create: ", 20) != 0 || strstr(msg + 20, "kvc_context_create:"))
    fail_msg("message \"%s\"", msg);
}

static void test_device_info_on_cuda(void **state) {
  (void)state;
  kvt_require_cuda();
  kvc_device_info info;
  KVT_OK(kvc_context_device_info(kvt_ctx, &info));
  assert_true(info.compute_major >= 7);
  assert_true(info.multiprocessors > 0);
  assert_true(info.total_memory > 0);
  print_message("device: %s sm_%d%d, %d SMs, driver %d\n", info.name, info.compute_major, info.compute_minor,
                info.multiprocessors, info.driver_version);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_status_strings_cover_every_code),
    cmocka_unit_test(test_version_matches_header),
    cmocka_unit_test(test_config_with_wrong_size_or_major_is_rejected),
    cmocka_unit_test(test_host_backend_always_available),
    cmocka_unit_test(test_check_mode_from_flag),
    cmocka_unit_test(test_error_text_is_per_context_and_per_thread),
    cmocka_unit_test(test_error_text_holds_for_any_number_of_contexts),
    cmocka_unit_test(test_context_config_reserved_and_unknown_flags_are_refused),
    cmocka_unit_test(test_memory_roundtrip_on_backend),
    cmocka_unit_test(test_pinned_memory),
    cmocka_unit_test(test_cuda_request_without_device_is_no_device),
    cmocka_unit_test(test_device_info_on_cuda),
};
KVT_MAIN("core", tests)
