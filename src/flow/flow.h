/*
 * flow.h — internal state of a kvc_flow, shared by flow.c (the per-step calls),
 * flow_window.c (SWA window eviction), release.c (finished requests), flow_canary.c
 * (canary mode) and the prefix caches (src/cache: chunk_cache.c, session.c,
 * radix_cache.c, swa_radix.c). The flows reach their allocator only through `sa`.
 */
#ifndef KVC_FLOW_H
#define KVC_FLOW_H

#include "../alloc/slot_allocator.h"

#define KVC__FLOW_MAGIC 0x6b76632d666c6f77ull /* "kvc-flow" */

struct kvc_flow {
  uint64_t magic;
  kvc_context *ctx;
  kvc_flow_config cfg;
  kvc_prefix_cache cache;
  int32_t width; /* req_to_token row width */
  int64_t ps;
  kvc_allocator *alloc; /* exactly one of alloc / swa (what the config named) */
  kvc_swa_allocator *swa;
  kvc__slot_allocator sa;      /* the interface over it; sa.obs is the canary when on */
  kvc_hybrid_req_pool *hybrid; /* NULL without Mamba */
  kvc_mamba_pool *mamba;
  kvc_stream stream; /* stream of the flow call in progress (for callbacks) */
  /* Per-call scratch, grown on demand (never on a steady-state step). */
  size_t cap;
  int32_t *rows;
  uint8_t *fresh; /* 1 where this call allocated the row */
  int64_t *prefix_lens, *seq_lens, *last_locs;
  const int64_t **prefix_slots;
  int32_t *mamba_slots, *track_slots; /* hybrid: n and 2n */
  int64_t *row_slots;                 /* width int64: a mirror row widened for frees */
  int32_t *row_seen;                  /* req pool size + 1: index + 1 of a row's request within one call */
  /* req pool size + 1: 1 while the request holding the row is part-released, its cache's
   * cache_finished_req having taken [0, committed) before a later step of its release
   * failed (release.c); the next release continues after the callback. Cleared when the
   * release completes and when alloc_for_extend hands the row out or extends it. */
  uint8_t *row_cached;
  bool releasing;          /* inside kvc_flow_release (kvc_flow_free_slots defers ...) */
  kvc_status release_late; /* ... a canary refill error here, for after its request) */
  /* Decode steps of one token per request go through this channel (graph path) when set. */
  kvc_decode_channel *channel;
  /* Debug canary mode (kvc_flow_set_canary, flow_canary.c): an observer on sa while on;
   * NULL = off, no extra work. */
  kvc_kv_pool *canary;
  int64_t *canary_pages, *canary_new; /* host scratch: rows to refill / new slots to check */
  size_t canary_pages_cap, canary_new_cap;
  /* SWA flows (kvc_flow_set_canary_swa): the guarded pool (NULL = off) and its halves,
   * either NULL when that side has no layers. canary and canary_swa are never both set. */
  kvc_swa_kv_pool *canary_swa;
  kvc_kv_pool *canary_full_half, *canary_swa_half;
  kvc__slot_observer canary_obs;
};

/** Window eviction for every request of a batch that already holds KV (flow_window.c);
 *  a no-op without a window. */
/** Releases the SWA side of held full slots[0:n) through the allocator's free_window (a
 *  prefix cache making SWA tombstones); UNSUPPORTED without an SWA allocator. */
kvc_status kvc__flow_free_window(kvc_flow *f, const int64_t *slots, size_t n);
kvc_status kvc__flow_evict_windows(kvc_flow *f, kvc_req_state *const *reqs, size_t n, bool decode, kvc_stream stream);
/** Frees a request's Mamba state (row's mapping, or a row-less slot) when the flow binds
 *  a hybrid pool. */
kvc_status kvc__flow_free_mamba(kvc_flow *f, kvc_req_state *r);

/** kvc_flow_free_slots for a bound radix cache's victims (kvc__alloc_free_cached: each slot
 *  HELD | CACHED in the flow's allocator, which the caller checked is the cache's): the
 *  observer hears of them and a late refill error is deferred inside a release, as for
 *  any free. */
kvc_status kvc__flow_free_cached(kvc_flow *f, const char *fn, const int64_t *slots, size_t n);
/** Grows the per-call arrays to hold n requests. */
kvc_status kvc__flow_reserve(kvc_flow *flow, const char *fn, size_t n);
/** Validates a flow handle. */
kvc_status kvc__flow_check_handle(const kvc_flow *flow, const char *fn);
/** Default cache behaviour when a callback is NULL: the chunk cache's (src/cache/chunk_cache.c). */
kvc_status kvc__chunk_cache_finished(void *self, kvc_flow *flow, kvc_req_state *req, int is_insert);
kvc_status kvc__chunk_cache_unfinished(void *self, kvc_flow *flow, kvc_req_state *req);

/** Frees the canary scratch (flow_canary.c). */
void kvc__flow_canary_free(kvc_flow *f);

static inline int64_t kvc__ceil_align(int64_t n, int64_t ps) { return (n + ps - 1) / ps * ps; }

/** Where window eviction starts in a request's row (flow_window.c): past what the cache
 *  owns and the engine's floor. */
static inline int64_t kvc__flow_window_lo(const kvc_flow *f, const kvc_req_state *r) {
  int64_t lo = KVC__MAX(r->cache_protected_len, r->swa_evict_floor);
  if (f->ps > 1 && lo > r->cache_protected_len) lo = kvc__ceil_align(lo, f->ps);
  return lo;
}

/** The part [*lo, *hi) of a request's row whose slots window eviction released entirely
 *  (an allocator whose free_window frees the slots themselves, a pure-SWA pool): neither
 *  the request's nor anybody's to free again. Empty (*lo == *hi) otherwise. Window
 *  eviction runs from kvc__flow_window_lo to swa_evicted_seqlen in one contiguous range,
 *  because what the cache owns never grows past where it started (the pure-SWA caches
 *  cap their keys there) and the engine's floor must not rise past swa_evicted_seqlen. */
static inline void kvc__flow_row_dead(const kvc_flow *f, const kvc_req_state *r, int64_t *lo, int64_t *hi) {
  *lo = *hi = 0;
  if (!f->sa.ops->window_frees_slots || !f->sa.ops->window_frees_slots(&f->sa)) return;
  const int64_t a = kvc__flow_window_lo(f, r), b = KVC__MIN(r->swa_evicted_seqlen, r->kv_allocated_len);
  if (b > a) *lo = a, *hi = b;
}

#endif
