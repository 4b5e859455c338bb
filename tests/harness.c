/* harness.c — see harness.h. */
#define _POSIX_C_SOURCE 200809L
#include "harness.h"

#include <time.h>

kvc_context *kvt_ctx;
kvc_context *kvt_host;
const char *kvt_backend_name = "host";
static uint64_t seed_value;
static int seed_set;
int kvt_digest_on; /* set by kvt_main from KVT_DIGEST */
static uint64_t digest_value = 0xcbf29ce484222325ull;

/* FNV-1a: byte order fixed, so equal outputs give equal digests on every run. */
void kvt_digest_fold(const void *p, size_t bytes) {
  const unsigned char *b = p;
  uint64_t h = digest_value;
  for (size_t i = 0; i < bytes; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  digest_value = h;
}

uint64_t kvt_seed(void) {
  if (!seed_set) {
    const char *env = getenv("KVT_SEED");
    if (env && *env) seed_value = strtoull(env, NULL, 0);
    else {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      seed_value = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
    }
    seed_set = 1;
    printf("[ SEED     ] KVT_SEED=%llu\n", (unsigned long long)seed_value);
  }
  return seed_value;
}

void kvt_require_cuda(void) {
  if (kvc_context_backend(kvt_ctx) != KVC_BACKEND_CUDA) skip();
}

void *kvt_alloc_on(kvc_context *ctx, size_t bytes) {
  void *p = NULL;
  kvc_status st = kvc_memory_alloc(ctx, bytes, &p);
  if (st != KVC_OK) fail_msg("kvc_memory_alloc(%zu): %s", bytes, kvc_last_error(ctx));
  return p;
}
void kvt_h2d_on(kvc_context *ctx, void *dst, const void *src, size_t bytes) {
  kvc_status st = kvc_memcpy_h2d(ctx, dst, src, bytes, NULL);
  if (st == KVC_OK) st = kvc_stream_synchronize(ctx, NULL);
  if (st != KVC_OK) fail_msg("h2d: %s", kvc_last_error(ctx));
}
void kvt_d2h_on(kvc_context *ctx, void *dst, const void *src, size_t bytes) {
  kvc_status st = kvc_stream_synchronize(ctx, NULL);
  if (st == KVC_OK) st = kvc_memcpy_d2h(ctx, dst, src, bytes, NULL);
  if (st == KVC_OK) st = kvc_stream_synchronize(ctx, NULL);
  if (st != KVC_OK) fail_msg("d2h: %s", kvc_last_error(ctx));
}
void *kvt_dev_alloc(size_t bytes) { return kvt_alloc_on(kvt_ctx, bytes); }
void kvt_dev_free(void *p) { kvc_memory_free(kvt_ctx, p); }
void kvt_h2d(void *dst, const void *src, size_t bytes) { kvt_h2d_on(kvt_ctx, dst, src, bytes); }
void kvt_d2h(void *dst, const void *src, size_t bytes) { kvt_d2h_on(kvt_ctx, dst, src, bytes); }
void kvt_poison(void *dev, size_t bytes) {
  kvc_status st = kvc_memset_d8(kvt_ctx, dev, 0xA5, bytes, NULL);
  if (st != KVC_OK) fail_msg("poison: %s", kvc_last_error(kvt_ctx));
}

void kvt_digest_tables(const kvc_req_to_token_pool *pool, const kvc_swa_allocator *swa) {
  if (!kvt_digest_on) return;
  const int32_t rows = kvc_req_to_token_pool_size(pool), width = kvc_req_to_token_pool_max_context_len(pool);
  for (int32_t r = 1; r <= rows; r++)
    kvt_digest_fold(kvc_req_to_token_pool_row(pool, r), sizeof(int32_t) * (size_t)width);
  if (!swa) return;
  kvt_digest_fold(kvc_swa_allocator_mapping_host(swa), sizeof(int32_t) * (size_t)kvc_swa_allocator_mapping_length(swa));
  kvt_digest_i64(kvc_swa_allocator_full_available_size(swa));
  kvt_digest_i64(kvc_swa_allocator_swa_available_size(swa));
}

int kvt_main_host_only(int argc, char **argv, const char *suite, const struct CMUnitTest *tests, size_t n) {
  const char *env = getenv("KVC_BACKEND");
  const char *backend = argc > 1 ? argv[1] : (env && !strcmp(env, "cuda") ? "cuda" : "host");
  if (!strcmp(backend, "cuda")) {
    printf("[  SKIPPED ] %s/cuda: %zu tests skipped: a host-only test binary\n", suite, n);
    return KVT_SKIP;
  }
  return kvt_main(argc, argv, suite, tests, n);
}

int kvt_main(int argc, char **argv, const char *suite, const struct CMUnitTest *tests, size_t n) {
  /* No argument: KVC_BACKEND decides (the GPU scripts run binaries bare with
   * KVC_BACKEND=cuda), else host. */
  const char *env = getenv("KVC_BACKEND");
  const char *backend = argc > 1 ? argv[1] : (env && !strcmp(env, "cuda") ? "cuda" : "host");
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  if (!strcmp(backend, "cuda")) {
    cfg.backend = KVC_BACKEND_CUDA;
    kvt_backend_name = "cuda";
  } else if (!strcmp(backend, "host")) {
    cfg.backend = KVC_BACKEND_HOST;
  } else {
    fprintf(stderr, "usage: %s [host|cuda]\n", argv[0]);
    return 2;
  }
  kvc_status st = kvc_context_create(&cfg, &kvt_ctx);
  if (st == KVC_ERR_NO_DEVICE) {
    printf("[  SKIPPED ] %s/cuda: %zu tests skipped: no usable CUDA device (%s)\n", suite, n, kvc_last_error(NULL));
    return KVT_SKIP;
  }
  if (st != KVC_OK) {
    fprintf(stderr, "context: %s\n", kvc_last_error(NULL));
    return 1;
  }
  if (kvc_context_backend(kvt_ctx) == KVC_BACKEND_CUDA) {
    kvc_context_config hcfg = KVC_CONTEXT_CONFIG_INIT;
    hcfg.backend = KVC_BACKEND_HOST;
    if (kvc_context_create(&hcfg, &kvt_host) != KVC_OK) return 1;
  }
  kvt_seed();
  const char *dg = getenv("KVT_DIGEST");
  kvt_digest_on = dg && !strcmp(dg, "1");
  char group[256];
  snprintf(group, sizeof group, "%s/%s", suite, kvt_backend_name);
  int failed = _cmocka_run_group_tests(group, tests, n, NULL, NULL);
  if (kvt_digest_on) printf("[ DIGEST   ] %s 0x%016llx\n", group, (unsigned long long)digest_value);
  kvc_context_destroy(kvt_host);
  kvc_context_destroy(kvt_ctx);
  return failed ? 1 : 0;
}
