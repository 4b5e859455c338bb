/* alloc_test_util.h — the req_to_token pool and token/paged allocator constructors that the
 * allocator, req_to_token and SWA allocator tests (and tests that make their own context)
 * share. Each fails the test when creation fails, quoting the last error of the context
 * it was created on. */
#ifndef ALLOC_TEST_UTIL_H
#define ALLOC_TEST_UTIL_H

#include "harness.h"

/* A req_to_token pool of `size` rows, each `width` token positions wide, on ctx. */
static inline kvc_req_to_token_pool *kvt_req_pool_on(kvc_context *ctx, int32_t size, int32_t width) {
  kvc_req_to_token_pool_config c = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  c.size = size;
  c.max_context_len = width;
  kvc_req_to_token_pool *p = NULL;
  kvc_status st = kvc_req_to_token_pool_create(ctx, &c, &p);
  if (st != KVC_OK)
    fail_msg("kvc_req_to_token_pool_create(%d x %d) -> %s: %s", size, width, kvc_status_name(st), kvc_last_error(ctx));
  return p;
}

/* kvt_req_pool_on on the test's context. */
static inline kvc_req_to_token_pool *kvt_req_pool(int32_t size, int32_t width) {
  return kvt_req_pool_on(kvt_ctx, size, width);
}

/* A token (ps 1) or paged allocator of `size` slots on ctx; flags are KVC_ALLOCATOR_*. */
static inline kvc_allocator *kvt_allocator_on(kvc_context *ctx, kvc_allocator_kind kind, int64_t size, int32_t ps,
                                              uint32_t flags) {
  kvc_allocator_config c = KVC_ALLOCATOR_CONFIG_INIT;
  c.kind = kind;
  c.size = size;
  c.page_size = ps;
  c.flags = flags;
  kvc_allocator *a = NULL;
  kvc_status st = kvc_allocator_create(ctx, &c, &a);
  if (st != KVC_OK) fail_msg("kvc_allocator_create -> %s: %s", kvc_status_name(st), kvc_last_error(ctx));
  return a;
}

/* kvt_allocator_on on the test's context. */
static inline kvc_allocator *kvt_allocator(kvc_allocator_kind kind, int64_t size, int32_t ps, uint32_t flags) {
  return kvt_allocator_on(kvt_ctx, kind, size, ps, flags);
}

/* The SWA allocator's device full->SWA mapping equals its host one (synchronizes). */
static inline void kvt_expect_swa_mapping_synced(const kvc_swa_allocator *a) {
  const int64_t n = kvc_swa_allocator_mapping_length(a);
  int64_t *d = malloc((size_t)n * 8);
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  kvt_d2h(d, kvc_swa_allocator_mapping_device(a), (size_t)n * 8);
  const int32_t *h = kvc_swa_allocator_mapping_host(a);
  for (int64_t i = 0; i < n; i++)
    if (d[i] != h[i]) fail_msg("device mapping[%lld] = %lld, host %d", (long long)i, (long long)d[i], h[i]);
  free(d);
}

#endif
