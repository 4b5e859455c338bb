/* Shared fixtures of the radix cache tests: a standalone cache whose frees are logged. */
#ifndef KVC_RADIX_UTIL_H
#define KVC_RADIX_UTIL_H

#include "harness.h"

/* Every free the cache makes without a flow, in order. */
typedef struct freelog {
  int64_t slots[1 << 14];
  size_t n;
  int64_t first[256]; /* first slot of each call */
  int calls;
} freelog;

static kvc_status freelog_free(void *user, const int64_t *slots, size_t n) {
  freelog *l = user;
  if (l->calls < 256) l->first[l->calls] = n ? slots[0] : -1;
  l->calls++;
  for (size_t i = 0; i < n && l->n < (1 << 14); i++) l->slots[l->n++] = slots[i];
  return KVC_OK;
}

static inline kvc_radix_cache *radix_make(int32_t ps, kvc_radix_policy policy, freelog *log) {
  kvc_radix_cache_config c = KVC_RADIX_CACHE_CONFIG_INIT;
  c.page_size = ps;
  c.policy = policy;
  c.num_slots = 1 << 16;
  c.free_slots = freelog_free;
  c.free_user = log;
  kvc_radix_cache *rc = NULL;
  KVT_OK(kvc_radix_cache_create(kvt_ctx, &c, &rc));
  return rc;
}

/* Inserts tokens[0:n) -> slots base, base + 1, ... */
static inline int64_t radix_put(kvc_radix_cache *rc, uint64_t ns, const int32_t *tokens, int64_t n, int64_t base,
                                int32_t priority) {
  int64_t slots[4096], prefix = -1;
  for (int64_t i = 0; i < n; i++) slots[i] = base + i;
  KVT_OK(kvc_radix_cache_insert(rc, NULL, ns, tokens, slots, n, priority, &prefix));
  KVT_OK(kvc_radix_cache_check(rc));
  return prefix;
}

static inline kvc_radix_match radix_get(kvc_radix_cache *rc, uint64_t ns, const int32_t *tokens, int64_t n) {
  kvc_radix_match m;
  KVT_OK(kvc_radix_cache_match_prefix(rc, ns, tokens, n, &m));
  KVT_OK(kvc_radix_cache_check(rc));
  return m;
}

static inline int64_t radix_cached(const kvc_radix_cache *rc) {
  int64_t c = -1;
  KVT_OK(kvc_radix_cache_sizes(rc, NULL, NULL, &c));
  return c;
}

static inline int64_t radix_nodes(const kvc_radix_cache *rc) {
  kvc_radix_stats s;
  KVT_OK(kvc_radix_cache_stats(rc, &s));
  return s.nodes;
}

#endif
