/* The project's own CUDA driver / NVRTC declarations (src/device/cuda_api.h) match the
 * toolkit's: built only where the toolkit headers are found. Everything is checked at
 * compile time by expanding cuda_api.h's lists against cuda.h / cudaTypedefs.h / nvrtc.h:
 * each type is the same type, each enumerator has the same value, each enum type is
 * int-sized, and each PFN_<name>_v<version> (and each NVRTC prototype) is the same
 * function type as the one written in cuda_api.h. The test binary only reports the
 * counts; if a declaration drifted it does not compile. */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <nvrtc.h>

#define KVC_CUDA_API_LISTS_ONLY
#include "device/cuda_api.h"

#include "harness.h"

#define SAME_TYPE(a, b) __builtin_types_compatible_p(a, b)

/* Types. */
#define CHECK_TYPE(name, definition) _Static_assert(SAME_TYPE(name, definition), "type " #name);
KVC_CUDA_TYPES(CHECK_TYPE)

/* Enumerators and enum sizes (cuda_api.h defines every enum as a C enum: int-sized). */
#define CHECK_VALUE(name, value) _Static_assert((long long)(name) == (value), "value of " #name);
#define CHECK_ENUM(type, tag, values)                            \
  _Static_assert(sizeof(type) == sizeof(int), "size of " #type); \
  values(CHECK_VALUE)
KVC_CUDA_ENUMS(CHECK_ENUM)

/* Copy descriptors: a mirror built from our field list has the toolkit struct's size, and
 * every field sits at the toolkit's offset with the toolkit's type. */
#include <stddef.h>
#define MIRROR_MEMBER(type, name) type name;
struct mirror_memcpy2d {
  KVC_CUDA_MEMCPY2D_FIELDS(MIRROR_MEMBER)
};
struct mirror_memcpy3d_peer {
  KVC_CUDA_MEMCPY3D_PEER_FIELDS(MIRROR_MEMBER)
};
#define CHECK_FIELD(mirror, real, type, name)                             \
  _Static_assert(offsetof(struct mirror, name) == offsetof(real, name) && \
                     SAME_TYPE(__typeof__(((real *)0)->name), type),      \
                 #real "." #name);
#define CHECK_2D(type, name) CHECK_FIELD(mirror_memcpy2d, CUDA_MEMCPY2D, type, name)
#define CHECK_3D(type, name) CHECK_FIELD(mirror_memcpy3d_peer, CUDA_MEMCPY3D_PEER, type, name)
KVC_CUDA_MEMCPY2D_FIELDS(CHECK_2D)
KVC_CUDA_MEMCPY3D_PEER_FIELDS(CHECK_3D)
_Static_assert(sizeof(struct mirror_memcpy2d) == sizeof(CUDA_MEMCPY2D), "sizeof CUDA_MEMCPY2D");
_Static_assert(sizeof(struct mirror_memcpy3d_peer) == sizeof(CUDA_MEMCPY3D_PEER), "sizeof CUDA_MEMCPY3D_PEER");

/* Driver entry points: the toolkit's PFN type against the signature written here, with
 * the toolkit's own parameter types. */
#define CHECK_PFN(name, version, params) \
  _Static_assert(SAME_TYPE(PFN_##name##_v##version, CUresult(CUDAAPI *) params), "PFN_" #name "_v" #version);
KVC_CUDA_DRIVER_FNS(CHECK_PFN)

/* NVRTC: the toolkit's prototype against ours. */
#define CHECK_NVRTC(ret, name, params) _Static_assert(SAME_TYPE(__typeof__(name) *, ret(*) params), #name);
KVC_NVRTC_FNS(CHECK_NVRTC)

#define COUNT1(...) +1
#define COUNT_ENUM(type, tag, values) +0 values(COUNT1)

static void test_declarations_match_the_toolkit(void **state) {
  (void)state;
  const int types = 0 KVC_CUDA_TYPES(COUNT1), enums = 0 KVC_CUDA_ENUMS(COUNT1);
  const int values = 0 KVC_CUDA_ENUMS(COUNT_ENUM), fns = 0 KVC_CUDA_DRIVER_FNS(COUNT1);
  const int nvrtc = 0 KVC_NVRTC_FNS(COUNT1);
  assert_true(types > 0 && enums > 0 && values > 0 && fns > 0 && nvrtc > 0);
  print_message("cuda_api.h == toolkit (CUDA_VERSION %d): %d types, %d enums / %d values, "
                "%d driver entry points, %d NVRTC entry points\n",
                CUDA_VERSION, types, enums, values, fns, nvrtc);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_declarations_match_the_toolkit),
};
KVT_MAIN("cuda_api", tests)
