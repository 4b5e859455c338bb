/* Every kernel source compiles through NVRTC for sm_80 and sm_90, on any machine with the
 * toolkit: no GPU, no driver, no context. */
#include "harness.h"
#include "device/device.h"

static void compile_for(int sm) {
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
  if (kvc__nvrtc_load(NULL, NULL) != KVC_OK) skip();
  const char *opts[] = {"-DKVC_INLINE_WORDS=-1"};
  void *image = NULL;
  size_t bytes = 0;
  bool ptx = false;
  kvc_status st = kvc__nvrtc_compile(NULL, "alloc_plan.cu", opts, 1, 90, false, &image, &bytes, &ptx);
  assert_int_equal(st, KVC_ERR_NVRTC);
  assert_null(image);
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
KVT_MAIN("kernel_compile", tests)
