/*
 * flow.h — internal state of a kvc_flow, shared by flow.c (the per-step calls),
 * release.c (finished requests), cache_chunk.c and session.c (prefix caches).
 */
#ifndef KVC_FLOW_H
#define KVC_FLOW_H

#include "../core/core.h"

#define KVC__FLOW_MAGIC 0x6b76632d666c6f77ull /* "kvc-flow" */

struct kvc_flow {
  uint64_t magic;
  kvc_context *ctx;
  kvc_flow_config cfg;
  kvc_prefix_cache cache;
  int32_t width; /* req_to_token row width */
  int64_t ps;
  kvc_allocator *alloc;       /* exactly one of alloc / swa */
  kvc_swa_allocator *swa;
  kvc_hybrid_req_pool *hybrid; /* NULL without Mamba */
  kvc_mamba_pool *mamba;
  kvc_stream stream;          /* stream of the flow call in progress (for callbacks) */
  /* Per-call scratch, grown on demand (never on a steady-state step). */
  size_t cap;
  int32_t *rows;
  uint8_t *fresh; /* 1 where this call allocated the row */
  int64_t *prefix_lens, *seq_lens, *last_locs;
  const int64_t **prefix_slots;
  int32_t *mamba_slots, *track_slots; /* hybrid: n and 2n */
  int64_t *row_slots; /* width int64: a mirror row widened for frees */
  int32_t *row_seen;  /* req pool size + 1: index + 1 of a row's request within one call */
  /* req pool size + 1: 1 while the request holding the row is part-released, its cache's
   * cache_finished_req having taken [0, committed) before a later step of its release
   * failed (release.c); the next release continues after the callback. Cleared when the
   * release completes and when alloc_for_extend hands the row out or extends it. */
  uint8_t *row_cached;
  bool releasing;          /* inside kvc_flow_release (kvc_flow_free_slots defers ...) */
  kvc_status release_late; /* ... a canary refill error here, for after its request) */
  /* Decode steps of one token per request go through this channel (graph path) when set. */
  kvc_decode_channel *channel;
  /* Debug canary mode (kvc_flow_set_canary, flow_canary.c); NULL = off, no extra work. */
  kvc_kv_pool *canary;
  int64_t *canary_pages, *canary_new; /* host scratch: rows to refill / new slots to check */
  size_t canary_pages_cap, canary_new_cap;
  /* SWA flows (kvc_flow_set_canary_swa): the guarded pool (NULL = off) and its halves,
   * either NULL when that side has no layers. canary and canary_swa are never both set. */
  kvc_swa_kv_pool *canary_swa;
  kvc_kv_pool *canary_full_half, *canary_swa_half;
  int64_t *canary_peers; /* host scratch: SWA slots (released by a free / new in a step) */
  size_t canary_peers_cap;
};

/* The bound allocator, whichever kind. */
int64_t kvc__flow_avail(const kvc_flow *f);
kvc_status kvc__flow_group_begin(kvc_flow *f);
kvc_status kvc__flow_group_end(kvc_flow *f);
/** Frees a request's Mamba state (row's mapping, or a row-less slot) when the flow binds
 *  a hybrid pool. */
kvc_status kvc__flow_free_mamba(kvc_flow *f, kvc_req_state *r);

/** Grows the per-call arrays to hold n requests. */
kvc_status kvc__flow_reserve(kvc_flow *flow, const char *fn, size_t n);
/** Validates a flow handle. */
kvc_status kvc__flow_check_handle(const kvc_flow *flow, const char *fn);
/** Default cache behaviour when a callback is NULL (the chunk cache's). */
kvc_status kvc__chunk_cache_finished(void *self, kvc_flow *flow, kvc_req_state *req, int is_insert);
kvc_status kvc__chunk_cache_unfinished(void *self, kvc_flow *flow, kvc_req_state *req);

/* flow_canary.c: canary mode hooks (call only when flow->canary or flow->canary_swa is
 * set, except kvc__flow_canary_free). */
/** Refills the rows of every slot of every page touched by freed `slots` (flow->canary). */
kvc_status kvc__flow_canary_fill(kvc_flow *f, const int64_t *slots, size_t n);
/** SWA flows, BEFORE a free of full `slots` (kvc_swa_allocator_free or _free_swa, which
 *  zero the mapping): records in canary_peers the SWA slots whose pages the free will
 *  release; *npeers their count. Changes nothing else; slots the free will refuse are
 *  skipped (it then refills nothing). */
kvc_status kvc__flow_canary_swa_plan(kvc_flow *f, const char *fn, const int64_t *slots, size_t n, size_t *npeers);
/** SWA flows, AFTER that free succeeded: refills the released pages, the full pages of
 *  `slots` in the full half when full_side (kvc_swa_allocator_free; not for free_swa),
 *  and the pages of the planned SWA slots in the SWA half, on `stream`. */
kvc_status kvc__flow_canary_swa_fill(kvc_flow *f, const int64_t *slots, size_t n, size_t npeers, bool full_side,
                                     kvc_stream stream);
/** Host scratch for the new slots of a step (n entries; SWA: their peers too). */
kvc_status kvc__flow_canary_reserve(kvc_flow *f, const char *fn, size_t n);
/** Checks the rows of a step's new (full) slots: flow->canary, or both halves of an SWA
 *  flow's pool (the SWA half at the slots' peers in the host mapping). */
kvc_status kvc__flow_canary_check(kvc_flow *f, const int64_t *slots, size_t n, kvc_stream stream);
/** Frees the canary scratch. */
void kvc__flow_canary_free(kvc_flow *f);

static inline int64_t kvc__ceil_align(int64_t n, int64_t ps) { return (n + ps - 1) / ps * ps; }

#endif
