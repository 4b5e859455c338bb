/*
 * swa_radix_impl.h — internal state of a kvc_swa_radix_cache, shared by its two files:
 * swa_radix.c (create / destroy, the SWA LRU's upkeep, match, inserts with tombstone
 * revival, the request-level checkpoints) and swa_radix_evict.c (SWA locks, eviction,
 * reset / sizes / audit / stats, the kvc_prefix_cache adapter). The cache was one file
 * until it outgrew the ~700-line rule (issue 14); what the two halves both need — the
 * struct, the lock receipt encoding and the functions declared below — lives here, so
 * the split changes no behaviour. The design (SWA state on radix nodes, tombstones, the
 * lazy LRU heap) is described at the top of swa_radix.c.
 */
#ifndef KVC_SWA_RADIX_IMPL_H
#define KVC_SWA_RADIX_IMPL_H

#include "radix.h"
#include "../flow/flow.h"
#include "../alloc/swa.h" /* kvc__swa_defer_zero_leave */

#define KVC__SWA_RADIX_MAGIC 0x6b76632d73776178ull /* "kvc-swax" */

struct kvc_swa_radix_cache {
  uint64_t magic;
  kvc_context *ctx;
  kvc_radix_cache *rc; /* the tree and its FULL component */
  int64_t window;
  int32_t kind; /* kvc_swa_radix_kind */
  kvc_radix_free_fn free_swa;
  void *free_swa_user;
  kvc_swa_allocator *zalloc; /* config.swa_allocator: the hooks' allocator, for evict's scope */
  kvc_stream zstream;
  bool eager_zero; /* KVC_SWA_RADIX_EAGER_ZERO: each call's scope end launches its zeroes */
  uint32_t uuid_next;
  /* The SWA LRU: a min-heap of (access, id), in_lru per node id, and scratch for the
   * SWA-locked entries an eviction sets aside; all sized for cap node ids. */
  kvc__rx_visit *lru, *aside;
  size_t lru_len, lru_cap;
  uint8_t *in_lru;
  /* A request's row as an insert's values (revival substitutes the tree's), and the old
   * full slots of revived tombstones: both key-length scratch. */
  int64_t *vals, *old_full, *ranges; /* ranges: 2 x vals_cap (revived [lo, hi) pairs) */
  size_t vals_cap;
  /* SWA eviction: the SWA sides of consecutive tombstoned victims, released in one free */
  int64_t *ebuf;
  size_t ebuf_len, ebuf_cap;
};

#define SWA_RADIX_ENTRY(c) KVC_CHECK_HANDLE(c, KVC__SWA_RADIX_MAGIC, "cache", "kvc_swa_radix_cache")

/* A receipt: 0 = no SWA lock held; RCPT_CHAIN = a chain lock (below); else
 * (uuid << 2) | 1, uuid 0 meaning the walk reached the root before a window was covered.
 *
 * A chain lock covers every node from the locked one up to the first tombstone (or the
 * root). It needs no uuid, so the node-only lock callbacks (sessions) can release it: the
 * range is the same at release time, because tombstone boundaries are node boundaries
 * that splits keep, a locked node is never tombstoned, and a tombstone with a locked
 * descendant is never deleted. For a valid match end it covers at least the window. */
#define RCPT_CHAIN 3u

/* Every public call's exit: with the tree's check flag set, a successful call audits. */
static inline kvc_status kvc__swa_rx_post(kvc_swa_radix_cache *c, const char *fn, kvc_status st) {
  if (st == KVC_OK && c->rc->check) return kvc_swa_radix_cache_check(c);
  (void)fn;
  return st;
}

/* Whether the cache has an SWA component on its nodes (tombstones, SWA locks). */
static inline bool kvc__swa_rx_has_swa(const kvc_swa_radix_cache *c) { return c->kind == KVC_SWA_RADIX_HYBRID; }

/* A deferred-zero scope of the SWA allocator the call frees into (the flow's, else the
 * config's; none for PURE / RING, whose frees write no mapping): a call freeing several
 * times opens one so that the device mapping of all its frees is zeroed by one launch
 * (kvc_swa_allocator_defer_zero_begin). NULL: no scope (no allocator known). */
static inline kvc_swa_allocator *kvc__swa_rx_zero_open(const kvc_swa_radix_cache *c, const kvc_flow *flow) {
  kvc_swa_allocator *a = flow ? flow->swa : c->zalloc;
  if (!a || !kvc__swa_rx_has_swa(c)) return NULL;
  return kvc_swa_allocator_defer_zero_begin(a) == KVC_OK ? a : NULL; /* MISUSE only nested 2^32 deep */
}

/* Its end. By default no launch: the queue stays with the allocator, whose next
 * device-map write carries it in its own launch (a call of the cache makes no launch of
 * its own; nothing reads a freed slot's device entry meanwhile). EAGER_ZERO: the one
 * launch, on the flow's stream (else the config's); a failure comes after the call's frees
 * and is reported as the call's status if it had none (the allocator keeps the zero
 * queued; see kvc_swa_allocator_defer_zero_end). */
static inline kvc_status kvc__swa_rx_zero_close(const kvc_swa_radix_cache *c, const kvc_flow *flow,
                                                kvc_swa_allocator *a, kvc_status st) {
  if (!a) return st;
  if (!c->eager_zero) {
    kvc__swa_defer_zero_leave(a);
    return st;
  }
  KVC_CLEANUP_KEEP_FIRST(kvc_swa_allocator_defer_zero_end(a, flow ? flow->stream : c->zstream), st);
  return st;
}

/* swa_radix.c: the flow's SWA allocator must be of the cache's kind; the SWA LRU heap
 * (eviction pops and pushes back, the request path notes nodes). */
kvc_status kvc__swa_rx_check_flow(const kvc_swa_radix_cache *c, const kvc_flow *flow, const char *fn);
void kvc__swa_rx_lru_push(kvc_swa_radix_cache *c, kvc__rx_visit e);
kvc__rx_visit kvc__swa_rx_lru_pop(kvc_swa_radix_cache *c);

/* swa_radix_evict.c: the SWA half of a lock (the nodes covering the last window, or a
 * chain lock) and its release; the *able checks change nothing and run first. */
uint64_t kvc__swa_rx_lock_chain(kvc_swa_radix_cache *c, int32_t id);
kvc_status kvc__swa_rx_lockable(const kvc_swa_radix_cache *c, int32_t id, const char *fn);
uint64_t kvc__swa_rx_lock(kvc_swa_radix_cache *c, int32_t id);
kvc_status kvc__swa_rx_unlockable(const kvc_swa_radix_cache *c, int32_t id, uint64_t receipt, const char *fn);
void kvc__swa_rx_unlock(kvc_swa_radix_cache *c, int32_t id, uint64_t receipt);

#endif
