/*
 * flow_canary.c — debug canary mode of a flow (kvc_flow_set_canary, issue 7 item 2;
 * kvc_flow_set_canary_swa for SWA flows): every row the flow frees is refilled with the
 * canary marker (whole pages, as the paged allocator releases them), and the rows of new
 * slots are checked before a step returns.
 *
 * It is an observer on the flow's slot allocator (slot_allocator.h), registered only
 * while canary mode is on: the allocator tells it which slots of which side each free
 * released and which slots each step handed out, so the flows carry no canary code and
 * nothing here runs when it is off.
 *
 * SWA flows guard both halves of a kvc_swa_kv_pool: full layers are indexed by full
 * slots, SWA layers by SWA slots; which SWA slots a free releases is the SWA allocator's
 * business (swa_slot.c). Only pages the event's owner no longer holds are refilled, so a
 * row that is still handed out is never overwritten.
 */
#include "flow.h"
#include "../kv/kv_pool.h"

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
  f->canary_pages = f->canary_new = NULL;
  f->canary_pages_cap = f->canary_new_cap = 0;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Refills every slot of every page touched by `slots` in `pool`. owner (may be NULL):
 * the allocator of those pages; pages it still holds (or that lie outside it) are left
 * alone. */
static kvc_status fill_pages(kvc_flow *f, kvc_kv_pool *pool, const kvc_allocator *owner, const int64_t *slots, size_t n,
                             kvc_stream stream) {
  const int64_t ps = f->ps;
  /* Unique pages (sorted), then every slot of each page. */
  KVC_FORWARD(grow(f, __func__, &f->canary_pages, &f->canary_pages_cap, n));
  for (size_t i = 0; i < n; i++) f->canary_pages[i] = slots[i] / ps;
  qsort(f->canary_pages, n, sizeof *f->canary_pages, cmp_i64);
  size_t pages = 0;
  for (size_t i = 0; i < n; i++) {
    const int64_t pg = f->canary_pages[i];
    if (pages > 0 && f->canary_pages[pages - 1] == pg) continue;
    if (owner && (pg < 1 || pg > kvc__alloc_num_pages(owner) || kvc__alloc_page_held(owner, pg))) continue;
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

/* --- The observer --------------------------------------------------------------------- */

/* The pool that holds the rows of `side`'s slots. */
static kvc_kv_pool *guarded(const kvc_flow *f, kvc__slot_side side) {
  if (side == KVC__SIDE_SWA) return f->canary_swa_half;
  return f->canary ? f->canary : f->canary_full_half;
}

static kvc_status obs_reserve(void *self, const char *fn, size_t n, int64_t **host) {
  kvc_flow *f = self;
  KVC_FORWARD(grow(f, fn, &f->canary_new, &f->canary_new_cap, n));
  *host = f->canary_new;
  return KVC_OK;
}

static kvc_status obs_freed(void *self, const kvc__slot_event *ev) {
  kvc_flow *f = self;
  return fill_pages(f, guarded(f, ev->side), ev->owner, ev->slots, ev->n, ev->stream);
}

static kvc_status obs_allocated(void *self, const kvc__slot_event *ev) {
  kvc_flow *f = self;
  kvc_status st = kvc_kv_pool_canary_check(guarded(f, ev->side), ev->slots, ev->n, ev->stream);
  if (st == KVC_ERR_INTERNAL && ev->side == KVC__SIDE_SWA)
    kvc__error_append(f->ctx, ev->n == ev->of
                                  ? " [SWA layers: the slot is an SWA slot, the peer of the step's new full "
                                    "slot at that request position; the layer is the SWA pool's local index]"
                                  : " [SWA layers: the slot is an SWA slot; the request position counts only "
                                    "the new full slots that have a peer; the layer is the SWA pool's local "
                                    "index]");
  return st;
}

/* Registers the observer for the sides that have a guarded pool (NULL: unregisters). */
static void observe(kvc_flow *f, bool on) {
  f->canary_obs.self = f;
  f->canary_obs.sides = (guarded(f, KVC__SIDE_FULL) ? (unsigned)KVC__SIDE_FULL : 0u) |
                        (f->canary_swa_half ? (unsigned)KVC__SIDE_SWA : 0u);
  f->canary_obs.reserve = obs_reserve;
  f->canary_obs.allocated = obs_allocated;
  f->canary_obs.freed = obs_freed;
  f->sa.obs = on ? &f->canary_obs : NULL;
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
    observe(f, false);
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
  observe(f, true);
  return KVC_OK;
}

kvc_status kvc_flow_set_canary_swa(kvc_flow *f, kvc_swa_kv_pool *pool) {
  KVC_API_ENTRY();
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  if (!pool) {
    f->canary_swa = NULL;
    f->canary_full_half = f->canary_swa_half = NULL;
    observe(f, false);
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
  KVC_RETURN_IF(aswa == afull || !aswa, f->ctx, KVC_ERR_UNSUPPORTED, "canary mode does not cover %s SWA allocators",
                aswa ? "pure" : "ring-mode");
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
  observe(f, true);
  return KVC_OK;
}
