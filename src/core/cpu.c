/*
 * cpu.c — which vector paths this process may take. The library is built for the
 * baseline of its target (x86-64: SSE2), so a wider path is compiled per function
 * (KVC__TARGET_AVX512) and chosen at run time: the CPU and the OS must support it
 * (GCC's and Clang's __builtin_cpu_supports read CPUID and XCR0; under valgrind,
 * which does not emulate AVX-512, CPUID reports it absent), and KVC_SIMD must not
 * turn it off for the context.
 */
#include "core.h"

bool kvc__cpu_avx512(void) {
#if KVC__HAVE_AVX512
  /* Thread-safe: libgcc's feature word is filled once by a constructor; the call
   * below only reads it (and fills it first if this runs before constructors). */
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

bool kvc__cpu_amd(void) {
#if KVC__HAVE_AVX512
  __builtin_cpu_init();
  return __builtin_cpu_is("amd");
#else
  return false;
#endif
}
