/* Every kernel source compiles through NVRTC for sm_80 and sm_90, on any machine with the
 * toolkit: no GPU, no driver, no context. */
#include "harness.h"
#include "device/device.h"

/* kvc_compile_check has no context to read KVC_NVRTC_LIB from: load NVRTC here first, by
 * that path when it is set (the no-toolkit CI run points it at a missing library), so
 * the tests skip where NVRTC is absent instead of finding one under /usr/local/cuda. */
static void nvrtc_or_skip(void) {
  const char *path = getenv("KVC_NVRTC_LIB");
  if (kvc__nvrtc_load(NULL, path && path[0] ? path : NULL) != KVC_OK) skip();
}

static void compile_for(int sm) {
  nvrtc_or_skip();
  int n = 0;
  kvc_status st = kvc_compile_check(sm, &n);
  if (st == KVC_ERR_NO_DEVICE) skip(); /* NVRTC absent */
  if (st != KVC_OK) fail_msg("sm_%d: %s", sm, kvc_last_error(NULL));
  assert_true(n > 0);
  print_message("sm_%d: %d kernel sources compiled\n", sm, n);
}

static void test_all_kernels_compile_for_sm80(void **state) {
  (void)state;
  compile_for(80);
}
static void test_all_kernels_compile_for_sm90(void **state) {
  (void)state;
  compile_for(90);
}
static void test_bad_arch_is_an_argument_error(void **state) {
  (void)state;
  assert_int_equal(kvc_compile_check(7, NULL), KVC_ERR_INVALID_ARGUMENT);
}

/* A real NVRTC failure (a negative array size via a bad specialisation): KVC_ERR_NVRTC,
 * with NVRTC's own log in the error text, and no image handed out. */
static void test_compile_error_carries_the_nvrtc_log(void **state) {
  (void)state;
  nvrtc_or_skip();
  const char *opts[] = {"-DKVC_INLINE_WORDS=-1"};
  kvc__nvrtc_image img = {NULL, 0, false};
  kvc_status st = kvc__nvrtc_compile(NULL, "alloc_plan.cu", opts, 1, 90, false, &img);
  assert_int_equal(st, KVC_ERR_NVRTC);
  assert_null(img.data);
  const char *msg = kvc_last_error(NULL);
  assert_non_null(strstr(msg, "alloc_plan.cu"));
  assert_non_null(strstr(msg, "): error")); /* the compiler's log line, not only our summary */
  print_message("NVRTC log excerpt: %.160s\n", msg);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_all_kernels_compile_for_sm80),
    cmocka_unit_test(test_all_kernels_compile_for_sm90),
    cmocka_unit_test(test_bad_arch_is_an_argument_error),
    cmocka_unit_test(test_compile_error_carries_the_nvrtc_log),
};
/* Without NVRTC the whole binary reports skipped (CTest: SKIP_RETURN_CODE), never passed. */
int main(int argc, char **argv) {
  const char *path = getenv("KVC_NVRTC_LIB");
  if (kvc__nvrtc_load(NULL, path && path[0] ? path : NULL) != KVC_OK) {
    printf("[  SKIPPED ] kernel_compile: NVRTC not available (%s)\n", kvc_last_error(NULL));
    return KVT_SKIP;
  }
  return kvt_main(argc, argv, "kernel_compile", tests, sizeof(tests) / sizeof(tests[0]));
}
