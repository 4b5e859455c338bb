/*
 * flow_canary.c — debug canary mode of a flow (kvc_flow_set_canary, issue 7 item 2;
 * kvc_flow_set_canary_swa for SWA flows): every row the flow frees is refilled with the
 * canary marker (whole pages, as the paged allocator releases them), and the rows of new
 * slots are checked before a step returns. Nothing here runs unless flow->canary or
 * flow->canary_swa is set.
 *
 * SWA flows guard both halves of a kvc_swa_kv_pool: full layers are indexed by full slots,
 * SWA layers by SWA slots (the allocator's full->SWA mapping). What each free releases,
 * and so what is refilled (swa_allocator.c; ps = page size):
 *
 *   kvc_swa_allocator_free (release, caches)   full half: every page touched by the slots
 *                                              SWA half:  ps 1: the peer of each slot;
 *                                                         ps > 1: the page of the peer of
 *                                                         EVERY slot of those full pages
 *   kvc_swa_allocator_free_swa (window)        full half: nothing (the full slots stay held)
 *                                              SWA half:  as above
 *
 * The peers are read from the host mapping before the free (it zeroes their entries),
 * and after it only pages the sub-allocator no longer holds are refilled, so a row that
 * is still handed out is never overwritten whatever the mapping says.
 */
#include "flow.h"
#include "../kv/kv_pool.h"
#include "../alloc/alloc.h"

#include <stdlib.h>

static kvc_status grow(kvc_flow *f, const char *fn, int64_t **buf, size_t *cap, size_t n) {
  if (n <= *cap) return KVC_OK;
  size_t c = *cap ? *cap : 256;
  while (c < n) c *= 2;
  int64_t *p = kvc__malloc(f->ctx, c * sizeof *p);
  if (!p) return kvc__error(f->ctx, KVC_ERR_HOST_OOM, fn, "canary scratch for %zu slots", n);
  kvc__free(f->ctx, *buf);
  *buf = p;
  *cap = c;
  return KVC_OK;
}

void kvc__flow_canary_free(kvc_flow *f) {
  kvc__free(f->ctx, f->canary_pages);
  kvc__free(f->ctx, f->canary_new);
  kvc__free(f->ctx, f->canary_peers);
  f->canary_pages = f->canary_new = f->canary_peers = NULL;
  f->canary_pages_cap = f->canary_new_cap = f->canary_peers_cap = 0;
}

kvc_status kvc__flow_canary_reserve(kvc_flow *f, const char *fn, size_t n) {
  KVC_FORWARD(grow(f, fn, &f->canary_new, &f->canary_new_cap, n));
  /* SWA: the peers of the new slots, gathered after the allocation (which must not be
   * followed by a failure of this kind). */
  if (f->canary_swa) KVC_FORWARD(grow(f, fn, &f->canary_peers, &f->canary_peers_cap, n));
  return KVC_OK;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* A page the allocator has handed out and not taken back (also not recorded by an open
 * free group): its rows may hold live KV. */
static bool page_live(const kvc_allocator *a, int64_t page) {
  if (page < 1 || page > a->num_pages) return false;
  const uint8_t s = a->state[page];
  return (s & KVC__PG_STATE) == KVC__PG_HELD && !(s & (KVC__PG_GFREE | KVC__PG_GSEG));
}

/* Refills every slot of every page touched by `slots` in `pool`. owner (may be NULL):
 * the allocator of those pages; pages it still holds (or that lie outside it) are left
 * alone. */
static kvc_status fill_pages(kvc_flow *f, kvc_kv_pool *pool, const kvc_allocator *owner, const int64_t *slots,
                             size_t n, kvc_stream stream) {
  const int64_t ps = f->ps;
  /* Unique pages (sorted), then every slot of each page. */
  KVC_FORWARD(grow(f, __func__, &f->canary_pages, &f->canary_pages_cap, n));
  for (size_t i = 0; i < n; i++) f->canary_pages[i] = slots[i] / ps;
  qsort(f->canary_pages, n, sizeof *f->canary_pages, cmp_i64);
  size_t pages = 0;
  for (size_t i = 0; i < n; i++) {
    const int64_t pg = f->canary_pages[i];
    if (pages > 0 && f->canary_pages[pages - 1] == pg) continue;
    if (owner && (pg < 1 || pg > owner->num_pages || page_live(owner, pg))) continue;
    f->canary_pages[pages++] = pg;
  }
  if (ps > 1) {
    KVC_FORWARD(grow(f, __func__, &f->canary_pages, &f->canary_pages_cap, pages * (size_t)ps));
    for (size_t k = pages; k-- > 0;) { /* expand in place, from the back */
      const int64_t page = f->canary_pages[k];
      for (int64_t j = ps - 1; j >= 0; j--) f->canary_pages[k * (size_t)ps + (size_t)j] = page * ps + j;
    }
  }
  return kvc_kv_pool_canary_fill(pool, f->canary_pages, pages * (size_t)ps, stream);
}

kvc_status kvc__flow_canary_fill(kvc_flow *f, const int64_t *slots, size_t n) {
  return fill_pages(f, f->canary, NULL, slots, n, f->stream);
}

/* --- SWA flows ---------------------------------------------------------------------- */

kvc_status kvc__flow_canary_swa_plan(kvc_flow *f, const char *fn, const int64_t *slots, size_t n, size_t *npeers) {
  *npeers = 0;
  if (!f->canary_swa_half || n == 0) return KVC_OK;
  const int64_t ps = f->ps;
  const int32_t *map = kvc_swa_allocator_mapping_host(f->swa);
  const int64_t len = kvc_swa_allocator_mapping_length(f->swa) - 1; /* the last entry is -1 */
  size_t need;
  if (!kvc__mul_size(n, (size_t)ps, &need))
    return kvc__error(f->ctx, KVC_ERR_INVALID_ARGUMENT, fn, "%zu slots overflow the canary scratch", n);
  KVC_FORWARD(grow(f, fn, &f->canary_peers, &f->canary_peers_cap, need));
  size_t k = 0;
  int64_t prev_page = -1;
  for (size_t i = 0; i < n; i++) {
    const int64_t s = slots[i];
    if (s < 0 || s >= len) continue; /* refused by the free, which then releases nothing */
    if (ps == 1) { /* the slot's own peer (0 / -1: none, and then the free refuses it) */
      if (map[s] > 0) f->canary_peers[k++] = map[s];
      continue;
    }
    /* ps > 1: the free clears every slot of the page and releases each peer's page. */
    const int64_t pg = s / ps;
    if (pg == prev_page) continue; /* consecutive slots of one page (other repeats: fill_pages dedups) */
    prev_page = pg;
    int64_t prev_w_page = -1;
    for (int64_t j = 0; j < ps && pg * ps + j < len; j++) {
      const int32_t w = map[pg * ps + j];
      if (w <= 0 || w / ps == prev_w_page) continue;
      prev_w_page = w / ps;
      f->canary_peers[k++] = w;
    }
  }
  *npeers = k;
  return KVC_OK;
}

kvc_status kvc__flow_canary_swa_fill(kvc_flow *f, const int64_t *slots, size_t n, size_t npeers, bool full_side,
                                     kvc_stream stream) {
  kvc_status st = KVC_OK;
  if (full_side && f->canary_full_half)
    st = fill_pages(f, f->canary_full_half, kvc_swa_allocator_full(f->swa), slots, n, stream);
  if (f->canary_swa_half)
    KVC_CLEANUP_KEEP_FIRST(fill_pages(f, f->canary_swa_half, kvc_swa_allocator_swa(f->swa), f->canary_peers, npeers,
                                      stream),
                           st);
  return st;
}

kvc_status kvc__flow_canary_check(kvc_flow *f, const int64_t *slots, size_t n, kvc_stream stream) {
  if (f->canary) return kvc_kv_pool_canary_check(f->canary, slots, n, stream);
  if (f->canary_full_half) KVC_FORWARD(kvc_kv_pool_canary_check(f->canary_full_half, slots, n, stream));
  if (!f->canary_swa_half) return KVC_OK;
  /* The new slots' peers, written by the allocation into the host mapping (every new
   * slot of alloc_extend / alloc_decode has one; 0 / -1 would mean none). Reserved
   * with canary_new (kvc__flow_canary_reserve). */
  const int32_t *map = kvc_swa_allocator_mapping_host(f->swa);
  const int64_t len = kvc_swa_allocator_mapping_length(f->swa) - 1;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const int32_t w = slots[i] >= 0 && slots[i] < len ? map[slots[i]] : 0;
    if (w > 0) f->canary_peers[k++] = w;
  }
  kvc_status st = kvc_kv_pool_canary_check(f->canary_swa_half, f->canary_peers, k, stream);
  if (st == KVC_ERR_INTERNAL)
    kvc__error_append(f->ctx, k == n ? " [SWA layers: the slot is an SWA slot, the peer of the step's new full slot "
                                       "at that request position; the layer is the SWA pool's local index]"
                                     : " [SWA layers: the slot is an SWA slot; the request position counts only the "
                                       "new full slots that have a peer; the layer is the SWA pool's local index]");
  return st;
}

/* --- Enabling --------------------------------------------------------------------------- */

/* Whether `pool` can guard slots [0, size + page) of an allocator of page size f->ps;
 * what names the pool in the message. */
static kvc_status pool_fits(kvc_flow *f, const char *fn, const kvc_kv_pool *pool, int64_t size, const char *what,
                            const char *side) {
  if (pool->cfg.page_size != f->ps || pool->cfg.size < size)
    return kvc__error(f->ctx, KVC_ERR_INVALID_ARGUMENT, fn,
                      "%s (size %lld, page_size %d) does not match the allocator%s (size %lld, page_size %lld)", what,
                      (long long)pool->cfg.size, pool->cfg.page_size, side, (long long)size, (long long)f->ps);
  int32_t nbuf = 0;
  for (int32_t i = 0; i < pool->num_buffers; i++) nbuf += pool->buffers[i].region != KVC_REGION_INDEX_K;
  if (nbuf > KVC_CANARY_MAX_BUFS)
    return kvc__error(f->ctx, KVC_ERR_UNSUPPORTED, fn, "the %s has %d buffers (canary limit %d)", what, nbuf,
                      KVC_CANARY_MAX_BUFS);
  return KVC_OK;
}

/* Every row of every canary buffer (the same set canary_fill covers); not waited for. */
static kvc_status fill_all(kvc_flow *f, const kvc_kv_pool *pool) {
  if (pool->cfg.kind == KVC_KV_MHA_NOOP) return KVC_OK;
  for (int32_t i = 0; i < pool->num_buffers; i++) {
    const kvc__kv_buffer *b = &pool->buffers[i];
    if (b->region == KVC_REGION_INDEX_K) continue;
    KVC_FORWARD(kvc__dev_memset(f->ctx, b->base, KVC_CANARY_BYTE, (size_t)b->rows * (size_t)b->row_bytes, NULL));
  }
  return KVC_OK;
}

kvc_status kvc_flow_set_canary(kvc_flow *f, kvc_kv_pool *pool) {
  KVC_API_ENTRY();
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  if (!pool) {
    f->canary = NULL;
    return KVC_OK;
  }
  KVC_FORWARD(kvc__kv_pool_check(pool, __func__));
  KVC_RETURN_IF(f->swa, f->ctx, KVC_ERR_UNSUPPORTED,
                "the flow has an SWA allocator: use kvc_flow_set_canary_swa with its kvc_swa_kv_pool");
  KVC_FORWARD(pool_fits(f, __func__, pool, kvc_allocator_size(f->alloc), "pool", ""));
  if (pool->cfg.kind != KVC_KV_MHA_NOOP) {
    KVC_FORWARD(fill_all(f, pool));
    KVC_FORWARD(kvc__dev_sync(f->ctx, NULL));
  }
  f->canary = pool;
  return KVC_OK;
}

kvc_status kvc_flow_set_canary_swa(kvc_flow *f, kvc_swa_kv_pool *pool) {
  KVC_API_ENTRY();
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  if (!pool) {
    f->canary_swa = NULL;
    f->canary_full_half = f->canary_swa_half = NULL;
    return KVC_OK;
  }
  kvc_kv_pool *full = kvc_swa_kv_pool_full(pool), *swa = kvc_swa_kv_pool_swa(pool);
  KVC_RETURN_IF(!full && !swa, f->ctx, KVC_ERR_INVALID_ARGUMENT, "pool is not a live kvc_swa_kv_pool");
  if (full) KVC_FORWARD(kvc__kv_pool_check(full, __func__));
  if (swa) KVC_FORWARD(kvc__kv_pool_check(swa, __func__));
  KVC_RETURN_IF(!f->swa, f->ctx, KVC_ERR_UNSUPPORTED,
                "the flow has no SWA allocator: use kvc_flow_set_canary with its kvc_kv_pool");
  const kvc_allocator *afull = kvc_swa_allocator_full(f->swa), *aswa = kvc_swa_allocator_swa(f->swa);
  /* Pure: the flows cannot allocate (no alloc_extend / alloc_decode). Ring: the allocator
   * neither hands out nor frees SWA slots and never writes the mapping. */
  KVC_RETURN_IF(aswa == afull || !aswa, f->ctx, KVC_ERR_UNSUPPORTED,
                "canary mode does not cover %s SWA allocators", aswa ? "pure" : "ring-mode");
  if (full)
    KVC_FORWARD(pool_fits(f, __func__, full, kvc_swa_allocator_size_full(f->swa), "full-layer pool", "'s full side"));
  if (swa)
    KVC_FORWARD(pool_fits(f, __func__, swa, kvc_swa_allocator_size_swa(f->swa), "SWA-layer pool", "'s SWA side"));
  if (full) KVC_FORWARD(fill_all(f, full));
  if (swa) KVC_FORWARD(fill_all(f, swa));
  KVC_FORWARD(kvc__dev_sync(f->ctx, NULL));
  f->canary_swa = pool;
  f->canary_full_half = full;
  f->canary_swa_half = swa;
  return KVC_OK;
}
