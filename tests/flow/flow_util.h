/* Shared fixtures of the flow tests: a req pool + allocator + flow on the test backend. */
#ifndef KVC_FLOW_UTIL_H
#define KVC_FLOW_UTIL_H

#include "harness.h"

typedef struct fixture {
  kvc_req_to_token_pool *pool;
  kvc_allocator *alloc;
  kvc_flow *flow;
  int64_t *out; /* device out_cache_loc, 1 << 14 entries */
  int32_t ps, width, rows;
} fixture;

static inline void fixture_make(fixture *f, int32_t rows, int32_t width, int64_t tokens, int32_t ps,
                                const kvc_prefix_cache *cache) {
  memset(f, 0, sizeof *f);
  kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rc.size = rows;
  rc.max_context_len = width;
  KVT_OK(kvc_req_to_token_pool_create(kvt_ctx, &rc, &f->pool));
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = ps == 1 ? KVC_ALLOCATOR_TOKEN : KVC_ALLOCATOR_PAGED;
  ac.size = tokens;
  ac.page_size = ps;
  KVT_OK(kvc_allocator_create(kvt_ctx, &ac, &f->alloc));
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = ps;
  fc.req_pool = f->pool;
  fc.allocator = f->alloc;
  if (cache) fc.cache = *cache;
  KVT_OK(kvc_flow_create(kvt_ctx, &fc, &f->flow));
  f->out = kvt_dev_alloc((1 << 14) * sizeof(int64_t));
  f->ps = ps;
  f->width = width;
  f->rows = rows;
}

static inline void fixture_free(fixture *f) {
  kvc_flow_destroy(f->flow);
  kvc_allocator_destroy(f->alloc);
  kvc_req_to_token_pool_destroy(f->pool);
  kvt_dev_free(f->out);
}

/* The device row equals the host mirror on [0, len). */
static inline void assert_row_synced(fixture *f, int32_t row, int64_t len) {
  int32_t *dev = malloc((size_t)f->width * 4);
  kvt_d2h(dev, kvc_req_to_token_pool_table(f->pool) + (size_t)row * (size_t)f->width, (size_t)f->width * 4);
  const int32_t *m = kvc_req_to_token_pool_row(f->pool, row);
  for (int64_t i = 0; i < len; i++)
    if (dev[i] != m[i]) fail_msg("row %d pos %lld: device %d, mirror %d", row, (long long)i, dev[i], m[i]);
  free(dev);
}

#endif
