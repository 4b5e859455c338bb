/* Shared fixture of the radix-cache-behind-a-flow tests (test_radix_flow.c,
 * test_radix_bound.c): an engine request carrying the flows' state and the radix cache's,
 * the cache's req_of hook for it, and a cache made over that hook. */
#ifndef KVC_RADIX_FLOW_UTIL_H
#define KVC_RADIX_FLOW_UTIL_H

#include "../flow/flow_util.h"

/* An engine request: the flows' state, then what the radix cache needs. */
typedef struct ereq {
  kvc_req_state st;
  kvc_radix_req rr;
  int32_t toks[1024];
} ereq;

static inline kvc_radix_req *req_of(void *user, const kvc_req_state *r) {
  (void)user;
  return &((ereq *)(uintptr_t)r)->rr; /* st is the first member */
}

static inline kvc_radix_cache *make_cache(int32_t ps, int64_t slots) {
  kvc_radix_cache_config c = KVC_RADIX_CACHE_CONFIG_INIT;
  c.page_size = ps;
  c.num_slots = slots;
  c.req_of = req_of;
  kvc_radix_cache *rc;
  KVT_OK(kvc_radix_cache_create(kvt_ctx, &c, &rc));
  return rc;
}

#endif
