/*
 * swa_slot.c — the slot-allocator interface (slot_allocator.h) over an SWA allocator.
 * The SWA-only behaviour the flows used to branch on lives here: window eviction
 * (free_window), each side's share of the capacity checks, the channel's mapping.
 *
 * What an observer is told of a free (ps = page size):
 *
 *   free (release, caches)      full side: the slots, owner the full allocator
 *                               SWA side:  ps 1: the peer of each slot; ps > 1: a slot of
 *                                          the page of the peer of EVERY slot of the
 *                                          slots' full pages; owner the SWA allocator
 *   free_window (eviction)      full side: nothing (the full slots stay held)
 *                               SWA side:  as above
 *
 * The peers are read from the host mapping before the free (it zeroes their entries);
 * the owner lets the observer skip pages its allocator still holds, whatever the
 * mapping said. Of an allocation it is told the new full slots, then their peers.
 */
#include "slot_allocator.h"
#include "swa.h"

#include <stdio.h>

static kvc_swa_allocator *impl(const kvc__slot_allocator *sa) { return (kvc_swa_allocator *)sa->impl; }

static bool wants(const kvc__slot_allocator *sa, kvc__slot_side side) {
  return sa->obs && (sa->obs->sides & (unsigned)side);
}

static kvc_status grow_peers(kvc_swa_allocator *a, const char *fn, size_t n) {
  if (n <= a->obs_peers_cap) return KVC_OK;
  size_t c = a->obs_peers_cap ? a->obs_peers_cap : 256;
  while (c < n) c *= 2;
  int64_t *p = kvc__malloc(a->ctx, c * sizeof *p);
  if (!p) return kvc__error(a->ctx, KVC_ERR_HOST_OOM, fn, "canary scratch for %zu slots", n);
  kvc__free(a->ctx, a->obs_peers);
  a->obs_peers = p;
  a->obs_peers_cap = c;
  return KVC_OK;
}

/* Before a free of full `slots`: the SWA slots whose pages it will release, into
 * obs_peers (*np of them). Slots the free will refuse are skipped (it then releases
 * nothing). Changes nothing else. */
static kvc_status plan_peers(kvc_swa_allocator *a, const char *fn, const int64_t *slots, size_t n, size_t *np) {
  *np = 0;
  if (n == 0) return KVC_OK;
  const int64_t ps = a->ps;
  const int32_t *map = a->map;
  const int64_t len = a->map_len - 1; /* the last entry is -1 */
  size_t need;
  if (!kvc__mul_size(n, (size_t)ps, &need))
    return kvc__error(a->ctx, KVC_ERR_INVALID_ARGUMENT, fn, "%zu slots overflow the canary scratch", n);
  KVC_FORWARD(grow_peers(a, fn, need));
  size_t k = 0;
  int64_t prev_page = -1;
  for (size_t i = 0; i < n; i++) {
    const int64_t s = slots[i];
    if (s < 0 || s >= len) continue;
    if (ps == 1) { /* the slot's own peer (0 / -1: none, and then the free refuses it) */
      if (map[s] > 0) a->obs_peers[k++] = map[s];
      continue;
    }
    /* ps > 1: the free clears every slot of the page and releases each peer's page. */
    const int64_t pg = s / ps;
    if (pg == prev_page) continue; /* consecutive slots of one page (other repeats: the observer dedups) */
    prev_page = pg;
    int64_t prev_w_page = -1;
    for (int64_t j = 0; j < ps && pg * ps + j < len; j++) {
      const int32_t w = map[pg * ps + j];
      if (w <= 0 || w / ps == prev_w_page) continue;
      prev_w_page = w / ps;
      a->obs_peers[k++] = w;
    }
  }
  *np = k;
  return KVC_OK;
}

/* After a free: the full side (when `full_side`) then the SWA side, first error kept. */
static kvc_status tell(const kvc__slot_allocator *sa, const kvc__free_args *x, size_t np, bool full_side) {
  kvc_swa_allocator *a = impl(sa);
  kvc_status st = KVC_OK;
  if (full_side) st = kvc__slot_tell_freed(sa, KVC__SIDE_FULL, a->full, x->slots, x->n, x->stream);
  KVC_CLEANUP_KEEP_FIRST(kvc__slot_tell_freed(sa, KVC__SIDE_SWA, a->swa, a->obs_peers, np, x->stream), st);
  return st;
}

/* A pure-SWA allocator is one token allocator serving both sides with the identity
 * mapping: the flows' extend and decode are that allocator's (SGLang allocates with
 * alloc(n) at page size 1 and writes the row: the same slots in the same order). */
static kvc_status swa_extend(const kvc__slot_allocator *sa, const kvc__extend_args *x) {
  if (impl(sa)->pure) return kvc_allocator_alloc_extend_ex(impl(sa)->full, x);
  return kvc_swa_allocator_alloc_extend(impl(sa), x->batch_size, x->prefix_lens, x->seq_lens, x->last_locs, x->req_pool,
                                        x->req_rows, x->prefix_slots, x->out_host, x->out_device, x->stream);
}

static kvc_status swa_decode(const kvc__slot_allocator *sa, const kvc__decode_args *x) {
  if (impl(sa)->pure)
    return kvc_allocator_alloc_decode(impl(sa)->full, x->bs, x->seq_lens, x->last_locs, x->req_pool, x->rows,
                                      x->out_host, x->out_device, x->stream);
  return kvc_swa_allocator_alloc_decode(impl(sa), x->bs, x->seq_lens, x->last_locs, x->req_pool, x->rows, x->out_host,
                                        x->out_device, x->stream);
}

static kvc_status swa_decode_plan(const kvc__slot_allocator *sa, const char *fn, const kvc__decode_args *x,
                                  kvc__decode_plan *p) {
  return kvc__swa_decode_plan(impl(sa), fn, x, p);
}

static kvc_status swa_decode_commit(const kvc__slot_allocator *sa, const char *fn, const kvc__decode_args *x,
                                    kvc__decode_plan *p) {
  return kvc__swa_decode_commit(impl(sa), fn, x, p);
}

static kvc_status swa_free(const kvc__slot_allocator *sa, const kvc__free_args *x) {
  kvc_swa_allocator *a = impl(sa);
  size_t np = 0;
  if (wants(sa, KVC__SIDE_SWA)) KVC_FORWARD(plan_peers(a, x->fn, x->slots, x->n, &np));
  KVC_FORWARD(kvc__swa_allocator_free_evicted(a, x->slots, x->n, x->stream));
  *x->told = sa->obs ? tell(sa, x, np, true) : KVC_OK;
  return KVC_OK;
}

static kvc_status swa_free_segment(const kvc__slot_allocator *sa, const kvc__free_args *x) {
  kvc_swa_allocator *a = impl(sa);
  size_t np = 0;
  if (wants(sa, KVC__SIDE_SWA)) KVC_FORWARD(plan_peers(a, x->fn, x->slots, x->n, &np));
  KVC_FORWARD(kvc_swa_allocator_free_segment(a, x->slots, x->n, x->start_pos, x->stream));
  *x->told = sa->obs ? tell(sa, x, np, true) : KVC_OK;
  return KVC_OK;
}

static kvc_status swa_free_window(const kvc__slot_allocator *sa, const kvc__free_args *x) {
  kvc_swa_allocator *a = impl(sa);
  size_t np = 0;
  if (wants(sa, KVC__SIDE_SWA)) KVC_FORWARD(plan_peers(a, x->fn, x->slots, x->n, &np));
  KVC_FORWARD(kvc_swa_allocator_free_swa(a, x->slots, x->n, x->stream));
  *x->told = sa->obs ? tell(sa, x, np, false) : KVC_OK;
  return KVC_OK;
}

static kvc_status swa_group_begin(const kvc__slot_allocator *sa) {
  return kvc_swa_allocator_free_group_begin(impl(sa));
}
static kvc_status swa_group_end(const kvc__slot_allocator *sa) { return kvc_swa_allocator_free_group_end(impl(sa)); }

static int64_t swa_available(const kvc__slot_allocator *sa) { return kvc_swa_allocator_available_size(impl(sa)); }

static bool swa_fits(const kvc__slot_allocator *sa, int64_t pages) {
  return kvc_swa_allocator_new_pages_available(impl(sa), pages, pages) != 0;
}

static bool swa_evict_need(const kvc__slot_allocator *sa, int64_t tokens, int64_t *full, int64_t *swa) {
  const int64_t f = kvc_swa_allocator_full_available_size(impl(sa));
  const int64_t w = kvc_swa_allocator_swa_available_size(impl(sa));
  *full = KVC__MAX(0, tokens - f); /* each side's deficit (SGLang's SWA composite) */
  *swa = KVC__MAX(0, tokens - w);
  return f < tokens || w < tokens;
}

/* Window eviction of a pure-SWA pool frees the slots themselves (there is no full side
 * to keep): the flows must not free that part of a row again. */
static bool swa_window_frees_slots(const kvc__slot_allocator *sa) { return impl(sa)->pure; }

static void swa_describe(const kvc__slot_allocator *sa, char *buf, size_t cap) {
  snprintf(buf, cap, " (full %lld, swa %lld)", (long long)kvc_swa_allocator_full_available_size(impl(sa)),
           (long long)kvc_swa_allocator_swa_available_size(impl(sa)));
}

static kvc_status swa_check(const kvc__slot_allocator *sa) { return kvc_swa_allocator_check(impl(sa)); }
static const kvc_allocator *swa_full(const kvc__slot_allocator *sa) { return impl(sa)->full; }

static kvc_status swa_observe_reserve(const kvc__slot_allocator *sa, const char *fn, size_t n) {
  /* The peers of the new slots, gathered after the allocation (which must not be
   * followed by a failure of this kind). */
  return grow_peers(impl(sa), fn, n);
}

static kvc_status swa_announce(const kvc__slot_allocator *sa, const int64_t *slots, size_t n, kvc_stream stream) {
  kvc_swa_allocator *a = impl(sa);
  if (wants(sa, KVC__SIDE_FULL)) {
    const kvc__slot_event ev = {KVC__SIDE_FULL, a->full, slots, n, 0, stream};
    KVC_FORWARD(sa->obs->allocated(sa->obs->self, &ev));
  }
  if (!wants(sa, KVC__SIDE_SWA)) return KVC_OK;
  /* Every new slot of alloc_extend / alloc_decode has a peer in the host mapping (0 / -1
   * would mean none); obs_peers holds n (swa_observe_reserve). */
  const int64_t len = a->map_len - 1;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const int32_t w = slots[i] >= 0 && slots[i] < len ? a->map[slots[i]] : 0;
    if (w > 0) a->obs_peers[k++] = w;
  }
  const kvc__slot_event ev = {KVC__SIDE_SWA, a->swa, a->obs_peers, k, n, stream};
  return sa->obs->allocated(sa->obs->self, &ev);
}

static kvc_allocator *swa_channel(const kvc__slot_allocator *sa, int64_t **map, int64_t *map_len) {
  kvc_swa_allocator *a = impl(sa);
  if (a->pure) return NULL; /* no alloc_decode */
  *map = a->ring ? NULL : a->dmap;
  *map_len = a->ring ? 0 : a->map_len - 1;
  return a->full;
}

static const kvc__slot_ops swa_ops = {
    .extend = swa_extend,
    .decode = swa_decode,
    .decode_plan = swa_decode_plan,
    .decode_commit = swa_decode_commit,
    .free = swa_free,
    .free_segment = swa_free_segment,
    .free_window = swa_free_window,
    .group_begin = swa_group_begin,
    .group_end = swa_group_end,
    .backup = NULL, /* the mapping has no O(1) snapshot */
    .restore = NULL,
    .available = swa_available,
    .fits = swa_fits,
    .evict_need = swa_evict_need,
    .window_frees_slots = swa_window_frees_slots,
    .describe = swa_describe,
    .check = swa_check,
    .full = swa_full,
    .observe_reserve = swa_observe_reserve,
    .announce = swa_announce,
    .channel = swa_channel,
};

kvc__slot_allocator kvc__slot_allocator_swa(kvc_swa_allocator *a) {
  kvc__slot_allocator sa = {&swa_ops, a, NULL};
  return sa;
}
