#define _POSIX_C_SOURCE 200809L
/*
 * memory.c — memory, copies and staging, dispatched to the host or CUDA backend, and
 * the public memory helpers built on them.
 */
#include "context.h"

#include <stdlib.h>
#include <string.h>

enum { COPY_H2D, COPY_D2H, COPY_D2D, COPY_MEMSET, COPY_SYNC };

static bool on_cuda(const kvc_context *ctx) { return ctx->backend == KVC_BACKEND_CUDA; }

kvc_status kvc__dev_alloc(kvc_context *ctx, size_t bytes, void **out) {
  kvc__core *core = kvc__core_of(ctx);
  kvc__counter_set(&core->fault.last_device_bytes, bytes > INT64_MAX ? INT64_MAX : (int64_t)bytes);
  if (kvc__fault_hit(&core->fault.device_allocs, &core->fault.device_alloc_fail_at))
    return kvc__error(ctx, KVC_ERR_DEVICE_OOM, __func__, "injected device allocation failure of %zu bytes", bytes);
  if (on_cuda(ctx)) {
    KVC_FORWARD(kvc__cuda_alloc(ctx, bytes, out));
    kvc__counter_add(&core->device_allocs_live, 1);
    return KVC_OK;
  }
  void *p = NULL;
  size_t rounded = (bytes + 255) & ~(size_t)255;
  if (rounded < bytes || posix_memalign(&p, 256, rounded) != 0 || !p)
    return kvc__error(ctx, KVC_ERR_HOST_OOM, __func__, "%zu bytes of host-backend memory", bytes);
  kvc__counter_add(&core->device_allocs_live, 1);
  *out = p;
  return KVC_OK;
}

void kvc__dev_free(kvc_context *ctx, void *p) {
  if (!p) return;
  kvc__counter_add(&kvc__core_of(ctx)->device_allocs_live, -1);
  if (on_cuda(ctx)) kvc__cuda_free(ctx, p);
  else free(p);
}

kvc_status kvc__dev_pinned_alloc(kvc_context *ctx, size_t bytes, void **out) {
  if (on_cuda(ctx)) return kvc__cuda_pinned_alloc(ctx, bytes, out);
  void *p = malloc(bytes ? bytes : 1);
  if (!p) return kvc__error(ctx, KVC_ERR_HOST_OOM, "kvc_host_pinned_alloc", "%zu bytes", bytes);
  *out = p;
  return KVC_OK;
}

void kvc__dev_pinned_free(kvc_context *ctx, void *p) {
  if (!p) return;
  if (on_cuda(ctx)) kvc__cuda_pinned_free(ctx, p);
  else free(p);
}

kvc_status kvc__dev_memset(kvc_context *ctx, void *dst, uint8_t value, size_t bytes, kvc_stream s) {
  if (!bytes) return KVC_OK;
  if (on_cuda(ctx)) return kvc__cuda_copy(ctx, COPY_MEMSET, dst, NULL, bytes, value, s);
  memset(dst, value, bytes);
  return KVC_OK;
}

kvc_status kvc__dev_h2d(kvc_context *ctx, void *dst, const void *src, size_t bytes, kvc_stream s) {
  if (!bytes) return KVC_OK;
  if (on_cuda(ctx)) return kvc__cuda_copy(ctx, COPY_H2D, dst, src, bytes, 0, s);
  memmove(dst, src, bytes);
  return KVC_OK;
}

kvc_status kvc__dev_d2h(kvc_context *ctx, void *dst, const void *src, size_t bytes, kvc_stream s) {
  if (!bytes) return KVC_OK;
  if (on_cuda(ctx)) return kvc__cuda_copy(ctx, COPY_D2H, dst, src, bytes, 0, s);
  memmove(dst, src, bytes);
  return KVC_OK;
}

kvc_status kvc__dev_d2d(kvc_context *ctx, void *dst, const void *src, size_t bytes, kvc_stream s) {
  if (!bytes) return KVC_OK;
  if (on_cuda(ctx)) return kvc__cuda_copy(ctx, COPY_D2D, dst, src, bytes, 0, s);
  memmove(dst, src, bytes);
  return KVC_OK;
}

kvc_status kvc__dev_sync(kvc_context *ctx, kvc_stream s) {
  if (on_cuda(ctx)) return kvc__cuda_copy(ctx, COPY_SYNC, NULL, NULL, 0, 0, s);
  return KVC_OK;
}

kvc_status kvc__dev_copy_peer(kvc_context *dst_ctx, void *dst, kvc_context *src_ctx, const void *src, size_t bytes,
                              kvc_stream s) {
  if (dst_ctx->backend != src_ctx->backend)
    return kvc__error(dst_ctx, KVC_ERR_UNSUPPORTED, "kvc__dev_copy_peer", "copy between a host and a CUDA context");
  if (!bytes) return KVC_OK;
  if (!on_cuda(dst_ctx)) {
    memmove(dst, src, bytes);
    return KVC_OK;
  }
  if (dst_ctx->device == src_ctx->device) return kvc__cuda_copy(dst_ctx, COPY_D2D, dst, src, bytes, 0, s);
  return kvc__cuda_copy_peer(dst_ctx, dst, src_ctx, src, bytes, s);
}

kvc_status kvc__dev_copy_2d_peer(kvc_context *dst_ctx, void *dst, size_t dst_pitch, kvc_context *src_ctx,
                                 const void *src, size_t src_pitch, size_t width, size_t height, kvc_stream s) {
  if (dst_ctx->backend != src_ctx->backend)
    return kvc__error(dst_ctx, KVC_ERR_UNSUPPORTED, "kvc__dev_copy_2d_peer", "copy between a host and a CUDA context");
  if (!width || !height) return KVC_OK;
  if (on_cuda(dst_ctx))
    return kvc__cuda_copy_2d_peer(dst_ctx, dst, dst_pitch, src_ctx, src, src_pitch, width, height, s);
  for (size_t i = 0; i < height; i++)
    memmove((unsigned char *)dst + i * dst_pitch, (const unsigned char *)src + i * src_pitch, width);
  return KVC_OK;
}

size_t kvc__dev_max_pitch(kvc_context *ctx) { return on_cuda(ctx) ? kvc__cuda_max_pitch(ctx) : SIZE_MAX; }

kvc_status kvc__dev_enable_peer_access(kvc_context *dst_ctx, kvc_context *src_ctx) {
  if (!on_cuda(dst_ctx) || !on_cuda(src_ctx) || dst_ctx->device == src_ctx->device) return KVC_OK;
  return kvc__cuda_enable_peer_access(dst_ctx, src_ctx);
}

/* --- Staging ----------------------------------------------------------------------- */

kvc_status kvc__host_staging_init(kvc_context *ctx, size_t bytes) {
  ctx->staging.host = malloc(bytes);
  if (!ctx->staging.host) return kvc__error(ctx, KVC_ERR_HOST_OOM, "kvc_context_create", "staging");
  ctx->staging.dev = ctx->staging.mapped = ctx->staging.host;
  ctx->staging.capacity = bytes;
  return KVC_OK;
}

void kvc__host_staging_fini(kvc_context *ctx) {
  free(ctx->staging.host);
  memset(&ctx->staging, 0, sizeof ctx->staging);
}

kvc_status kvc__staging_reserve(kvc_context *ctx, size_t bytes, void **host, void **dev) {
  pthread_mutex_lock(&ctx->staging_lock);
  kvc_status st;
  if (on_cuda(ctx)) {
    st = kvc__cuda_staging_reserve(ctx, bytes, host, dev);
  } else {
    st = KVC_OK;
    if (bytes > ctx->staging.capacity) {
      void *p = realloc(ctx->staging.host, bytes);
      if (!p) st = kvc__error(ctx, KVC_ERR_HOST_OOM, "kvc__staging_reserve", "%zu bytes", bytes);
      else ctx->staging.host = ctx->staging.dev = ctx->staging.mapped = p, ctx->staging.capacity = bytes;
    }
    ctx->staging.reserved_begin = 0;
    *host = *dev = ctx->staging.host;
  }
  if (st != KVC_OK) pthread_mutex_unlock(&ctx->staging_lock);
  return st;
}

void *kvc__staging_mapped(const kvc_context *ctx) { return ctx->staging.mapped + ctx->staging.reserved_begin; }

kvc_status kvc__staging_upload(kvc_context *ctx, kvc_stream stream) {
  return on_cuda(ctx) ? kvc__cuda_staging_upload(ctx, stream) : KVC_OK;
}

kvc_status kvc__staging_fence(kvc_context *ctx, kvc_stream stream) {
  kvc_status st = on_cuda(ctx) ? kvc__cuda_staging_fence(ctx, stream) : KVC_OK;
  pthread_mutex_unlock(&ctx->staging_lock);
  return st;
}

void kvc__staging_cancel(kvc_context *ctx) {
  ctx->staging.reserved_bytes = 0;
  pthread_mutex_unlock(&ctx->staging_lock);
}

/* --- Public helpers ---------------------------------------------------------------- */

kvc_status kvc_memory_alloc(kvc_context *ctx, size_t bytes, void **out) {
  KVC_API_ENTRY();
  KVC_RETURN_IF(!ctx || !out, ctx, KVC_ERR_INVALID_ARGUMENT, "ctx or out is NULL");
  if (!bytes) {
    *out = NULL;
    return KVC_OK;
  }
  return kvc__dev_alloc(ctx, bytes, out);
}

void kvc_memory_free(kvc_context *ctx, void *ptr) {
  if (ctx && ptr) kvc__dev_free(ctx, ptr);
}

kvc_status kvc_host_pinned_alloc(kvc_context *ctx, size_t bytes, void **out) {
  KVC_API_ENTRY();
  KVC_RETURN_IF(!ctx || !out, ctx, KVC_ERR_INVALID_ARGUMENT, "ctx or out is NULL");
  return kvc__dev_pinned_alloc(ctx, bytes, out);
}

void kvc_host_pinned_free(kvc_context *ctx, void *ptr) {
  if (ctx && ptr) kvc__dev_pinned_free(ctx, ptr);
}

#define COPY_ARGS_CHECK()                                             \
  KVC_RETURN_IF(!ctx, NULL, KVC_ERR_INVALID_ARGUMENT, "ctx is NULL"); \
  KVC_RETURN_IF(bytes && (!dst || !src), ctx, KVC_ERR_INVALID_ARGUMENT, "NULL pointer for %zu bytes", bytes)

kvc_status kvc_memcpy_h2d(kvc_context *ctx, void *dst, const void *src, size_t bytes, kvc_stream stream) {
  KVC_API_ENTRY();
  COPY_ARGS_CHECK();
  return kvc__dev_h2d(ctx, dst, src, bytes, stream);
}
kvc_status kvc_memcpy_d2h(kvc_context *ctx, void *dst, const void *src, size_t bytes, kvc_stream stream) {
  KVC_API_ENTRY();
  COPY_ARGS_CHECK();
  return kvc__dev_d2h(ctx, dst, src, bytes, stream);
}
kvc_status kvc_memcpy_d2d(kvc_context *ctx, void *dst, const void *src, size_t bytes, kvc_stream stream) {
  KVC_API_ENTRY();
  COPY_ARGS_CHECK();
  return kvc__dev_d2d(ctx, dst, src, bytes, stream);
}
kvc_status kvc_memset_d8(kvc_context *ctx, void *dst, uint8_t value, size_t bytes, kvc_stream stream) {
  KVC_API_ENTRY();
  KVC_RETURN_IF(!ctx, NULL, KVC_ERR_INVALID_ARGUMENT, "ctx is NULL");
  KVC_RETURN_IF(bytes && !dst, ctx, KVC_ERR_INVALID_ARGUMENT, "dst is NULL");
  return kvc__dev_memset(ctx, dst, value, bytes, stream);
}
kvc_status kvc_stream_synchronize(kvc_context *ctx, kvc_stream stream) {
  KVC_API_ENTRY();
  KVC_RETURN_IF(!ctx, NULL, KVC_ERR_INVALID_ARGUMENT, "ctx is NULL");
  return kvc__dev_sync(ctx, stream);
}
