/*
 * harness.h — what every test file shares: the backend-parameterised runner, device
 * buffer helpers, a seeded RNG and the KV pool configs the KV and transfer tests build.
 *
 * Each test executable is registered twice with CTest: NAME_host runs its tests on the
 * host backend; NAME_cuda runs the same bodies on the CUDA backend, or exits 77 (CTest:
 * skipped, never passed) when no GPU is usable.
 */
#ifndef KVC_TEST_HARNESS_H
#define KVC_TEST_HARNESS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvcache.h"

#define KVT_SKIP 77

/* The context of the running group (one per executable run). */
extern kvc_context *kvt_ctx;
/* A second, host-backend context for differential tests (NULL when kvt_ctx is host). */
extern kvc_context *kvt_host;
/* "host" or "cuda". */
extern const char *kvt_backend_name;

/* Runs `tests` as group "<suite>/<backend>". argv[1] = host | cuda (default host).
 * host_only / cuda_only tests call kvt_require_cuda() / kvt_require_host(). */
int kvt_main(int argc, char **argv, const char *suite, const struct CMUnitTest *tests, size_t n);
/* Built with HOST_ONLY (tests/CMakeLists.txt defines KVT_HOST_ONLY): asked for the CUDA
 * backend, the binary skips (exit 77) instead of running host-only assumptions there. */
int kvt_main_host_only(int argc, char **argv, const char *suite, const struct CMUnitTest *tests, size_t n);
#ifdef KVT_HOST_ONLY
#  define kvt_main kvt_main_host_only
#endif
#define KVT_MAIN(suite, tests) \
  int main(int argc, char **argv) { return kvt_main(argc, argv, suite, tests, sizeof(tests) / sizeof((tests)[0])); }

/* Skips the current test unless the backend is CUDA (differential tests). */
void kvt_require_cuda(void);

#define KVT_OK(expr)                                                                                           \
  do {                                                                                                         \
    kvc_status kvt_st_ = (expr);                                                                               \
    if (kvt_st_ != KVC_OK) fail_msg("%s -> %s: %s", #expr, kvc_status_name(kvt_st_), kvc_last_error(kvt_ctx)); \
  } while (0)

#define KVT_STATUS(expr, want)                                                                       \
  do {                                                                                               \
    kvc_status kvt_st_ = (expr);                                                                     \
    if (kvt_st_ != (want))                                                                           \
      fail_msg("%s -> %s, expected %s (%s)", #expr, kvc_status_name(kvt_st_), kvc_status_name(want), \
               kvc_last_error(kvt_ctx));                                                             \
  } while (0)

/* Device buffers of the running backend (fail the test on error). */
void *kvt_dev_alloc(size_t bytes);
void kvt_dev_free(void *p);
void kvt_h2d(void *dst, const void *src, size_t bytes);
void kvt_d2h(void *dst, const void *src, size_t bytes);
void kvt_poison(void *dev, size_t bytes); /* fills with 0xA5 */
/* Same, on an explicit context. */
void *kvt_alloc_on(kvc_context *ctx, size_t bytes);
void kvt_h2d_on(kvc_context *ctx, void *dst, const void *src, size_t bytes);
void kvt_d2h_on(kvc_context *ctx, void *dst, const void *src, size_t bytes);

/* Seeded RNG: seed from KVT_SEED or the clock, printed once per run. */
uint64_t kvt_seed(void);
typedef struct kvt_rng {
  uint64_t s;
} kvt_rng;
static inline uint64_t kvt_next(kvt_rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
/* Uniform in [lo, hi]. */
static inline int64_t kvt_range(kvt_rng *r, int64_t lo, int64_t hi) {
  return lo + (int64_t)(kvt_next(r) % (uint64_t)(hi - lo + 1));
}
static inline float kvt_uniform(kvt_rng *r) { return (float)(kvt_next(r) >> 40) / (float)(1 << 24); }

/* Output digest (scripts/test_digest.sh): with KVT_DIGEST=1, the model-based tests fold
 * every slot, row and mapping the library hands them into one running 64-bit hash that
 * kvt_main prints at exit ("[ DIGEST   ] suite 0x..."), so a refactor can prove that a
 * fixed seed and step count still produce bit-identical outputs. Off: one branch. */
extern int kvt_digest_on;
void kvt_digest_fold(const void *p, size_t bytes);
static inline void kvt_digest(const void *p, size_t bytes) {
  if (kvt_digest_on) kvt_digest_fold(p, bytes);
}
static inline void kvt_digest_i64(int64_t v) { kvt_digest(&v, sizeof v); }
/* Folds every row of `pool`'s host mirror and, when `swa` is not NULL, its host full->SWA
 * mapping and both sides' availability (the flow tests' state after a step). */
void kvt_digest_tables(const kvc_req_to_token_pool *pool, const kvc_swa_allocator *swa);

/* --- Pool configs ---------------------------------------------------------------- */

/* The config of an MHA-family pool: H heads of D (K) and Dv (V) values per token. */
static inline kvc_kv_pool_config kvt_mha_config(kvc_kv_pool_kind kind, kvc_dtype dt, int H, int D, int Dv, int64_t size,
                                                int layers, int ps) {
  kvc_kv_pool_config c = KVC_KV_POOL_CONFIG_INIT;
  c.kind = kind;
  c.dtype = dt;
  c.head_num = H;
  c.head_dim = D;
  c.v_head_dim = Dv;
  c.size = size;
  c.layer_num = layers;
  c.page_size = ps;
  return c;
}

/* The config of a latent-row pool (MLA, MLA_FP4 or NSA): R + Q values per token. */
static inline kvc_kv_pool_config kvt_latent_config(kvc_kv_pool_kind kind, kvc_dtype dt, int R, int Q, int64_t size,
                                                   int layers, int ps) {
  kvc_kv_pool_config c = KVC_KV_POOL_CONFIG_INIT;
  c.kind = kind;
  c.dtype = dt;
  c.kv_lora_rank = R;
  c.qk_rope_head_dim = Q;
  c.size = size;
  c.layer_num = layers;
  c.page_size = ps;
  return c;
}

#endif
