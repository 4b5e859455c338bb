#define _POSIX_C_SOURCE 200809L
/*
 * layout.c — transfer layouts made from pools: the regions of a KV or Mamba pool as
 * (base, bytes per page, pages), read through the pools' public descriptors, and the
 * per-process origin tag that tells local addresses from another process's.
 */
#include "transfer.h"
#include "../kv/kv_pool.h"
#include "../alloc/alloc.h"

#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t origin_tag;
static pthread_once_t origin_once = PTHREAD_ONCE_INIT;

/* Distinct per process with overwhelming probability: pid, wall-clock nanoseconds and an
 * ASLR-randomised address, hashed. Never 0, so a zeroed field never matches. */
static void origin_init(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t parts[4] = {(uint64_t)getpid(), (uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec, (uint64_t)(uintptr_t)&origin_tag};
  origin_tag = kvc__hash(KVC__HASH_SEED, parts, sizeof parts);
  if (origin_tag == 0) origin_tag = 1;
}

uint64_t kvc__transfer_origin(void) {
  pthread_once(&origin_once, origin_init);
  return origin_tag;
}

kvc_transfer_layout *kvc__layout_new(kvc_context *ctx, int32_t n) {
  kvc_transfer_layout *l = kvc__calloc(ctx, 1, sizeof *l);
  if (!l) return NULL;
  l->regions = kvc__calloc(ctx, (size_t)(n > 0 ? n : 1), sizeof *l->regions);
  if (!l->regions) {
    kvc__free(ctx, l);
    return NULL;
  }
  l->magic = KVC__LAYOUT_MAGIC;
  l->ctx = ctx;
  l->num_regions = n;
  return l;
}

kvc_status kvc__layout_finish(kvc_transfer_layout *l, const char *fn) {
  KVC_RETURN_IF(l->num_regions < 1 || l->num_regions > KVC__LAYOUT_MAX_REGIONS, l->ctx, KVC_ERR_INVALID_ARGUMENT,
                "%d regions outside [1, %d]", l->num_regions, KVC__LAYOUT_MAX_REGIONS);
  KVC_RETURN_IF(l->page_size < 1, l->ctx, KVC_ERR_INVALID_ARGUMENT, "page_size %d < 1", l->page_size);
  KVC_RETURN_IF(kvc_dtype_size(l->dtype) == 0, l->ctx, KVC_ERR_INVALID_ARGUMENT, "dtype %d invalid", (int)l->dtype);
  KVC_RETURN_IF(l->kind > KVC_KV_NSA && l->kind != KVC_TRANSFER_KIND_MAMBA, l->ctx, KVC_ERR_INVALID_ARGUMENT,
                "pool kind %u unknown", l->kind);
  int64_t min_pages = INT64_MAX;
  for (int32_t i = 0; i < l->num_regions; i++) {
    const kvc_transfer_region_info *r = &l->regions[i];
    int64_t total;
    KVC_RETURN_IF(r->page_bytes < 1 || r->pages < 1 || __builtin_mul_overflow(r->page_bytes, r->pages, &total) ||
                      r->base > UINT64_MAX - (uint64_t)total,
                  l->ctx, KVC_ERR_INVALID_ARGUMENT,
                  "%s: region %d has %lld pages of %lld bytes (each >= 1, product and end address in range)", fn, i,
                  (long long)r->pages, (long long)r->page_bytes);
    KVC_RETURN_IF((int)r->region < KVC_REGION_K || (int)r->region > KVC_REGION_MAMBA_INTERMEDIATE_CONV, l->ctx,
                  KVC_ERR_INVALID_ARGUMENT, "%s: region %d has unknown kind %d", fn, i, (int)r->region);
    KVC_RETURN_IF(kvc_dtype_size(r->dtype) == 0, l->ctx, KVC_ERR_INVALID_ARGUMENT, "%s: region %d has dtype %d", fn, i,
                  (int)r->dtype);
    if (r->pages < min_pages) min_pages = r->pages;
  }
  l->min_pages = min_pages;
  return KVC_OK;
}

kvc_status kvc__layout_check(const kvc_transfer_layout *l, const kvc_context *ctx, const char *fn) {
  if (!l) return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "layout is NULL");
  if (l->magic != KVC__LAYOUT_MAGIC) return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "not a live transfer layout");
  return KVC_OK;
}

static void layout_free(kvc_transfer_layout *l) {
  kvc_context *ctx = l->ctx;
  l->magic = 0;
  kvc__free(ctx, l->regions);
  kvc__free(ctx, l);
}

void kvc_transfer_layout_destroy(kvc_transfer_layout *layout) {
  if (layout && layout->magic == KVC__LAYOUT_MAGIC) layout_free(layout);
}

/* One region from a buffer descriptor: whole pages only (the last partial page of a
 * buffer, if any, is never a valid page id). */
static void region_from_desc(kvc_transfer_region_info *r, const kvc_buffer_desc *d, int32_t index) {
  r->region = d->region;
  r->layer_id = d->layer_id;
  r->index = index;
  r->device = d->device;
  r->dtype = d->dtype;
  r->base = (uint64_t)(uintptr_t)d->data;
  r->page_bytes = d->bytes_per_page;
  r->pages = d->bytes_per_page > 0 ? d->total_bytes / d->bytes_per_page : 0;
}

static kvc_status finish_local(kvc_transfer_layout *l, kvc_transfer_layout **out, const char *fn) {
  l->side.backend = kvc_context_backend(l->ctx);
  l->side.device = kvc_context_device(l->ctx);
  l->side.origin = kvc__transfer_origin();
  kvc_status st = kvc__layout_finish(l, fn);
  if (st != KVC_OK) {
    layout_free(l);
    return st;
  }
  *out = l;
  return KVC_OK;
}

kvc_status kvc_transfer_layout_from_kv_pool(const kvc_kv_pool *pool, kvc_transfer_layout **out) {
  KVC_FORWARD(kvc__kv_pool_check(pool, __func__));
  kvc_context *ctx = pool->ctx;
  KVC_ARG_NOT_NULL(ctx, out);
  KVC_RETURN_IF(pool->cfg.kind == KVC_KV_MHA_NOOP, ctx, KVC_ERR_UNSUPPORTED,
                "a NoOp pool has no KV storage to transfer");
  const int32_t n = kvc_kv_pool_num_buffers(pool);
  kvc_transfer_layout *l = kvc__layout_new(ctx, n);
  KVC_RETURN_IF(!l, ctx, KVC_ERR_HOST_OOM, "layout of %d regions", n);
  l->kind = (uint32_t)pool->cfg.kind;
  l->dtype = pool->cfg.dtype;
  l->page_size = pool->cfg.page_size;
  for (int32_t i = 0; i < n; i++) {
    kvc_buffer_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    kvc_status st = kvc_kv_pool_describe(pool, i, &d);
    if (st != KVC_OK) {
      layout_free(l);
      return st;
    }
    region_from_desc(&l->regions[i], &d, 0);
  }
  return finish_local(l, out, __func__);
}

kvc_status kvc_transfer_layout_from_mamba_pool(const kvc_mamba_pool *pool, kvc_transfer_layout **out) {
  const int32_t n = kvc_mamba_pool_num_buffers(pool);
  KVC_RETURN_IF(n < 1 || !out, NULL, KVC_ERR_INVALID_ARGUMENT, "pool is not a live Mamba pool, or out is NULL");
  const int32_t layers = kvc_mamba_pool_num_layers(pool);
  kvc_buffer_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  KVC_FORWARD(kvc_mamba_pool_describe(pool, 0, &d));
  kvc_context *ctx = kvc__mamba_pool_context(pool);
  kvc_transfer_layout *l = kvc__layout_new(ctx, n);
  KVC_RETURN_IF(!l, ctx, KVC_ERR_HOST_OOM, "layout of %d regions", n);
  l->kind = KVC_TRANSFER_KIND_MAMBA;
  l->dtype = d.dtype;
  l->page_size = 1;
  for (int32_t i = 0; i < n; i++) {
    kvc_status st = kvc_mamba_pool_describe(pool, i, &d);
    if (st != KVC_OK) {
      layout_free(l);
      return st;
    }
    /* Buffers run conv[0] layers, conv[1] layers, ..., temporal layers. */
    region_from_desc(&l->regions[i], &d, d.region == KVC_REGION_MAMBA_CONV ? i / layers : 0);
  }
  return finish_local(l, out, __func__);
}

int32_t kvc_transfer_layout_num_regions(const kvc_transfer_layout *layout) {
  return layout && layout->magic == KVC__LAYOUT_MAGIC ? layout->num_regions : 0;
}

kvc_status kvc_transfer_layout_region(const kvc_transfer_layout *layout, int32_t index, kvc_transfer_region_info *out) {
  KVC_FORWARD(kvc__layout_check(layout, NULL, __func__));
  KVC_ARG_NOT_NULL(layout->ctx, out);
  KVC_RETURN_IF(index < 0 || index >= layout->num_regions, layout->ctx, KVC_ERR_INVALID_ARGUMENT,
                "index %d outside [0, %d)", index, layout->num_regions);
  *out = layout->regions[index];
  return KVC_OK;
}
