/*
 * flow_canary.c — debug canary mode of a flow (kvc_flow_set_canary, issue 7 item 2):
 * every row the flow frees is refilled with the canary marker (whole pages, as the paged
 * allocator releases them), and the rows of new slots are checked before a step returns.
 * Nothing here runs unless flow->canary is set.
 */
#include "flow.h"
#include "../pool/kv_pool.h"

#include <stdlib.h>
#include <string.h>

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

kvc_status kvc__flow_canary_reserve(kvc_flow *f, const char *fn, size_t n) {
  return grow(f, fn, &f->canary_new, &f->canary_new_cap, n);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

kvc_status kvc__flow_canary_fill(kvc_flow *f, const int64_t *slots, size_t n) {
  const int64_t ps = f->ps;
  /* Unique pages (sorted), then every slot of each page. */
  KVC_FORWARD(grow(f, __func__, &f->canary_pages, &f->canary_pages_cap, n));
  for (size_t i = 0; i < n; i++) f->canary_pages[i] = slots[i] / ps;
  qsort(f->canary_pages, n, sizeof *f->canary_pages, cmp_i64);
  size_t pages = 0;
  for (size_t i = 0; i < n; i++)
    if (pages == 0 || f->canary_pages[pages - 1] != f->canary_pages[i]) f->canary_pages[pages++] = f->canary_pages[i];
  if (ps > 1) {
    KVC_FORWARD(grow(f, __func__, &f->canary_pages, &f->canary_pages_cap, pages * (size_t)ps));
    for (size_t k = pages; k-- > 0;) { /* expand in place, from the back */
      const int64_t page = f->canary_pages[k];
      for (int64_t j = ps - 1; j >= 0; j--) f->canary_pages[k * (size_t)ps + (size_t)j] = page * ps + j;
    }
  }
  return kvc_kv_pool_canary_fill(f->canary, f->canary_pages, pages * (size_t)ps, f->stream);
}

kvc_status kvc_flow_set_canary(kvc_flow *f, kvc_kv_pool *pool) {
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  if (!pool) {
    f->canary = NULL;
    return KVC_OK;
  }
  KVC_FORWARD(kvc__kv_pool_check(pool, __func__));
  KVC_RETURN_IF(f->swa, f->ctx, KVC_ERR_UNSUPPORTED, "canary mode does not cover SWA allocators");
  KVC_RETURN_IF(pool->cfg.page_size != f->ps || pool->cfg.size < kvc_allocator_size(f->alloc), f->ctx,
                KVC_ERR_INVALID_ARGUMENT,
                "pool (size %lld, page_size %d) does not match the allocator (size %lld, page_size %lld)",
                (long long)pool->cfg.size, pool->cfg.page_size, (long long)kvc_allocator_size(f->alloc),
                (long long)f->ps);
  int32_t nbuf = 0;
  for (int32_t i = 0; i < pool->num_buffers; i++) nbuf += pool->buffers[i].region != KVC_REGION_INDEX_K;
  KVC_RETURN_IF(nbuf > KVC_CANARY_MAX_BUFS, f->ctx, KVC_ERR_UNSUPPORTED, "the pool has %d buffers (canary limit %d)",
                nbuf, KVC_CANARY_MAX_BUFS);
  /* Every row of every canary buffer (the same set canary_fill covers). */
  if (pool->cfg.kind != KVC_KV_MHA_NOOP) {
    for (int32_t i = 0; i < pool->num_buffers; i++) {
      const kvc__kv_buffer *b = &pool->buffers[i];
      if (b->region == KVC_REGION_INDEX_K) continue;
      KVC_FORWARD(kvc__dev_memset(f->ctx, b->base, KVC_CANARY_BYTE, (size_t)b->rows * (size_t)b->row_bytes, NULL));
    }
    KVC_FORWARD(kvc__dev_sync(f->ctx, NULL));
  }
  f->canary = pool;
  return KVC_OK;
}
