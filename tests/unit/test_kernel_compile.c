/* Every kernel source compiles through NVRTC for sm_80 and sm_90, on any machine with the
 * toolkit: no GPU, no driver, no context. */
#include "harness.h"

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

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_all_kernels_compile_for_sm80),
    cmocka_unit_test(test_all_kernels_compile_for_sm90),
    cmocka_unit_test(test_bad_arch_is_an_argument_error),
};
KVT_MAIN("kernel_compile", tests)
