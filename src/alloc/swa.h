/*
 * swa.h — the SWA allocator's internal layout and the helpers its files share
 * (swa_allocator.c: create, queries, alloc(n), groups, audit; swa_batch.c: alloc_extend,
 * alloc_decode and its plan/commit halves; swa_free.c: the frees; swa_slot.c: the
 * slot-allocator interface). The mapping kernels' launchers are level-1 ops (ops.h).
 *
 *   host map (int32, authoritative)       device map (int64, for attention kernels)
 *   [ 0 | w1 | w2 | 0 | ... | w_f | -1 ]   same layout, written by ONE launch per call:
 *     index = full slot, value = SWA slot    alloc: (f, w) pairs or coalesced runs
 *     0 = no peer, last entry = -1           free:  zeroed runs of whole pages
 */
#ifndef KVC_SWA_INTERNAL_H
#define KVC_SWA_INTERNAL_H

#include "alloc.h"

#define KVC__SWA_MAGIC 0x6b76632d73776121ull /* "kvc-swa!" */

struct kvc_swa_allocator {
  uint64_t magic;
  kvc_context *ctx;
  int32_t ps;
  bool pure, ring, in_group;
  int64_t size_full, size_swa, ring_cost;
  kvc_allocator *full, *swa; /* pure: swa == full; ring: swa == NULL */
  kvc_req_to_token_pool *req_pool;
  int64_t map_len;
  int32_t *map;  /* host, map_len */
  int64_t *dmap; /* device, map_len */
  /* work space */
  size_t cap_tok;
  int64_t *f_buf, *w_buf;
  uint32_t *words;
  size_t cap_bs;
  int64_t *lastw;
  uint8_t *fmark, *smark; /* per page of each side: dedup within one call */
  int64_t *pages;         /* touched full pages (num full pages) */
  uint32_t *rel;          /* the one-pass free's full then SWA ids (swa_free.c) */
  size_t rel_cap;
  unsigned char *scratch;
  const kvc__kfunc *k_map[KVC__PLAN_INLINE_VARIANTS], *k_gather;
  /* SWA slots an observer is told of (released by a free, or the peers of new slots);
   * grown only while one listens (swa_slot.c). */
  int64_t *obs_peers;
  size_t obs_peers_cap;
  /* Device-map zeroes not launched yet: the frees of an open deferred-zero scope
   * (kvc_swa_allocator_defer_zero_begin; `defer` its depth) queue their zeroed runs here
   * for one launch at the scope's end; a failed launch leaves them queued for the next
   * device-map write (swa_allocator.c: the rule). (start, len) pairs, pz_items runs. */
  uint32_t defer;
  uint32_t *pz;
  size_t pz_items, pz_cap;
  /* Per full page: 1 while a queued run covers it. The next map write checks its new
   * slots' pages against it (only while the queue is non-empty) to carry the queue in
   * its own launch: no overlap, so no order is needed between a zero and a new pair. */
  uint8_t *pz_page;
};

#define SWA_ENTRY(a) KVC_CHECK_HANDLE(a, KVC__SWA_MAGIC, "alloc", "kvc_swa_allocator")

static inline int64_t kvc__swa_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Whether the SWA side is an allocator of its own (a->swa non-NULL and != a->full): the
 * invariant of create, stated once (pure: swa == full; ring: swa == NULL). */
static inline bool kvc__swa_has_side(const kvc_swa_allocator *a) { return !a->pure && !a->ring; }

static inline int64_t kvc__swa_full_free(const kvc_swa_allocator *a) {
  return kvc_allocator_available_size(a->full) / a->ps;
}
static inline int64_t kvc__swa_swa_free(const kvc_swa_allocator *a) {
  return a->ring ? INT64_MAX : kvc_allocator_available_size(a->swa) / a->ps;
}

/* Check-mode epilogue. */
static inline kvc_status kvc__swa_finish(kvc_swa_allocator *a, kvc_status st) {
  if (st == KVC_OK && kvc_context_check_mode(a->ctx)) st = kvc_swa_allocator_check(a);
  return st;
}

/* The device mapping as a map-write target (its last entry, -1, is never written). */
static inline kvc__swa_map_dst kvc__swa_dmap_dst(kvc_swa_allocator *a) {
  const kvc__swa_map_dst d = {a->scratch, a->k_map, a->dmap, a->map_len - 1, 1};
  return d;
}

/* The queued device-map zeroes (a->pz) as one launch on `stream`; emptied when it
 * succeeds, kept when it fails (the host map is already zeroed: only the device mirror
 * lags). Every other write or read of the device map calls kvc__swa_zero_settle first,
 * so a zero never lands on an entry written after it. */
kvc_status kvc__swa_zero_flush(kvc_swa_allocator *a, const char *fn, kvc_stream stream);
static inline kvc_status kvc__swa_zero_settle(kvc_swa_allocator *a, const char *fn, kvc_stream stream) {
  return a->pz_items ? kvc__swa_zero_flush(a, fn, stream) : KVC_OK;
}
/* After a launch that carried the queue (merged or alone): its pages' marks cleared, the
 * queue emptied. */
void kvc__swa_zero_done(kvc_swa_allocator *a);
/* Whether a new slot of this write (full slots f[0:n)) lies on a page of the queue: the
 * queue cannot ride in that write's launch then (a zero and a pair of one entry would
 * race), so the caller settles it first. False when nothing is queued. */
bool kvc__swa_zero_overlaps(const kvc_swa_allocator *a, const int64_t *f, size_t n);
/* Closes a deferred-zero scope without launching (the SWA radix cache's default): the
 * queue waits for the allocator's next device-map write, which carries it in its own
 * launch, or for kvc_swa_allocator_zero_flush. */
void kvc__swa_defer_zero_leave(kvc_swa_allocator *a);
/* Zeroes the device map's runs runs[0:2 items): queued when a deferred-zero scope is open
 * (and the queue can grow), else launched now on `stream` after any queued ones. The
 * only step of a free that can fail after its validation (a launch only: nothing
 * changed then). */
kvc_status kvc__swa_zero_runs(kvc_swa_allocator *a, const char *fn, const uint32_t *runs, size_t items,
                              kvc_stream stream);

/* Work space for n tokens / n requests (HOST_OOM, nothing changed). */
kvc_status kvc__swa_ensure_tok(kvc_swa_allocator *a, const char *fn, size_t n);
kvc_status kvc__swa_ensure_bs(kvc_swa_allocator *a, const char *fn, size_t n);
/* Writes the new pairs mapping[f[i]] = w[i] to the device (one launch), then the host. */
kvc_status kvc__swa_map_set(kvc_swa_allocator *a, const int64_t *f, const int64_t *w, size_t n, kvc_stream stream);
/* Out device vector: out_device[i] = f[i] (one launch). */
kvc_status kvc__swa_write_out(kvc_swa_allocator *a, int64_t *out_device, const int64_t *f, size_t n, kvc_stream stream);

/** kvc_swa_allocator_alloc_decode in two halves for the decode channel (swa_batch.c):
 *  plan validates, takes the SWA side and plans the full side into payload, 4 words per
 *  request (row, position, slot, the slot's SWA peer; 3 in ring mode, which has no
 *  mapping), changing nothing on failure; commit makes the full side's plan state, sets
 *  the host mapping and returns the check-mode audit's verdict. */
kvc_status kvc__swa_decode_plan(kvc_swa_allocator *a, const char *fn, const kvc__decode_args *x, kvc__decode_plan *p);
kvc_status kvc__swa_decode_commit(kvc_swa_allocator *a, const char *fn, const kvc__decode_args *x,
                                  const kvc__decode_plan *p);

/** kvc_swa_allocator_free for the flows (swa_free.c): full slots of which some, with page
 *  size 1, have no SWA peer any more because window eviction released it (mapping 0);
 *  those release only their full side, in the same single transactional call (SGLang's
 *  caches split the row at swa_evicted_seqlen into free_full and free instead: two
 *  calls). Everything else, errors included, as kvc_swa_allocator_free. */
kvc_status kvc__swa_allocator_free_evicted(kvc_swa_allocator *a, const int64_t *slots, size_t n, kvc_stream stream);

#endif
