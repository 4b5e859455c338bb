/*
 * context.h — struct kvc_context: the core part first (so core code can use the public
 * pointer), then the backend binding, the kernel cache and the staging ring.
 */
#ifndef KVC_CONTEXT_H
#define KVC_CONTEXT_H

#include "device.h"

#include <pthread.h>

typedef struct kvc__kcache kvc__kcache;
typedef struct kvc__cuda_ctx kvc__cuda_ctx;

/* A region of the staging ring still in use by queued GPU work. */
typedef struct kvc__staging_fence_rec {
  size_t begin, end; /* ring offsets of the region */
  void *event;       /* CUevent recorded after the consumer */
} kvc__staging_fence_rec;

typedef struct kvc__staging {
  unsigned char *host; /* pinned */
  unsigned char *dev;
  unsigned char *mapped; /* device address of `host` itself (kernels read it over the bus) */
  size_t capacity;
  size_t head;           /* next free offset */
  size_t reserved_begin; /* current reservation */
  size_t reserved_bytes;
  kvc__staging_fence_rec fences[64];
  int fence_first, fence_count;
  uint64_t waits; /* back-pressure waits */
} kvc__staging;

struct kvc_context {
  kvc__core core; /* must stay first */
  kvc_backend backend;
  int device;
  kvc_device_allocator device_allocator;
  pthread_mutex_t lock;         /* kernel cache */
  pthread_mutex_t staging_lock; /* staging ring, held from reserve to fence/cancel */
  kvc__kcache *kcache;
  kvc__cuda_ctx *cuda; /* NULL on the host backend */
  kvc__staging staging;
  size_t max_param_bytes;
  int num_sms;
  int sm; /* compute capability major*10+minor, 0 on host */
  /* Canary mode: the most recently created KV pool (kvc_kv_pool *). Atomic: threads may
   * create and destroy their own pools on one context. */
  _Atomic(void *) canary_pool;
};

/* Backend hooks used by context.c and the kernel cache (cuda.c). */
kvc_status kvc__cuda_context_init(kvc_context *ctx, bool explicit_request);
void kvc__cuda_context_fini(kvc_context *ctx);
kvc_status kvc__cuda_device_info(kvc_context *ctx, kvc_device_info *out);
kvc_status kvc__cuda_module_load(kvc_context *ctx, const void *image, const char *name, void **module, void **function);
void kvc__cuda_module_unload(kvc_context *ctx, void *module);
kvc_status kvc__cuda_staging_init(kvc_context *ctx, size_t bytes);
void kvc__cuda_staging_fini(kvc_context *ctx);

kvc_status kvc__cuda_alloc(kvc_context *ctx, size_t bytes, void **out);
void kvc__cuda_free(kvc_context *ctx, void *p);
kvc_status kvc__cuda_pinned_alloc(kvc_context *ctx, size_t bytes, void **out);
void kvc__cuda_pinned_free(kvc_context *ctx, void *p);
kvc_status kvc__cuda_copy(kvc_context *ctx, int kind, void *dst, const void *src, size_t bytes, uint8_t value,
                          kvc_stream s);
kvc_status kvc__cuda_copy_peer(kvc_context *dst_ctx, void *dst, kvc_context *src_ctx, const void *src, size_t bytes,
                               kvc_stream s);
kvc_status kvc__cuda_enable_peer_access(kvc_context *dst_ctx, kvc_context *src_ctx);
kvc_status kvc__cuda_copy_2d_peer(kvc_context *dst_ctx, void *dst, size_t dst_pitch, kvc_context *src_ctx,
                                  const void *src, size_t src_pitch, size_t width, size_t height, kvc_stream s);
size_t kvc__cuda_max_pitch(kvc_context *ctx);
kvc_status kvc__cuda_launch(kvc_context *ctx, void *function, unsigned *smem_set, kvc__dim3 grid, kvc__dim3 block,
                            unsigned smem, kvc_stream stream, const void *params);
kvc_status kvc__cuda_staging_reserve(kvc_context *ctx, size_t bytes, void **host, void **dev);
kvc_status kvc__cuda_staging_upload(kvc_context *ctx, kvc_stream stream);
kvc_status kvc__cuda_staging_fence(kvc_context *ctx, kvc_stream stream);
kvc_status kvc__host_staging_init(kvc_context *ctx, size_t bytes);
void kvc__host_staging_fini(kvc_context *ctx);

kvc_status kvc__kcache_create(kvc_context *ctx);
void kvc__kcache_destroy(kvc_context *ctx);
kvc_status kvc__kcache_stats(kvc_context *ctx, kvc_kernel_cache_stats *out);

#endif
