/*
 * context.c — kvc_context: backend selection, lifetime, device facts.
 *
 * AUTO picks CUDA when the driver loads and a device exists, otherwise the host backend;
 * an explicit CUDA request fails with KVC_ERR_NO_DEVICE instead. KVC_BACKEND in the
 * environment overrides AUTO only (an explicit config choice wins).
 */
#include "context.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kvc_context_config_default(kvc_context_config *config) {
  if (!config) return;
  kvc_context_config init = KVC_CONTEXT_CONFIG_INIT;
  *config = init;
}

#define KNOWN_CONTEXT_FLAGS (KVC_CONTEXT_CHECK | KVC_CONTEXT_NO_DISK_CACHE | KVC_CONTEXT_CANARY)

kvc_status kvc_context_create(const kvc_context_config *config, kvc_context **out) {
  KVC_API_ENTRY();
  KVC_RETURN_IF(!out, NULL, KVC_ERR_INVALID_ARGUMENT, "out is NULL");
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  if (config) {
    KVC_FORWARD(KVC__CONFIG_COPY(NULL, "config", &cfg, config, kvc_context_config));
    KVC_RETURN_IF(cfg.backend < KVC_BACKEND_AUTO || cfg.backend > KVC_BACKEND_CUDA, NULL, KVC_ERR_INVALID_ARGUMENT,
                  "config.backend %d unknown", (int)cfg.backend);
    KVC_RETURN_IF(cfg.flags & ~KNOWN_CONTEXT_FLAGS, NULL, KVC_ERR_INVALID_ARGUMENT,
                  "config.flags 0x%x has unknown bits 0x%x", cfg.flags, cfg.flags & ~KNOWN_CONTEXT_FLAGS);
    KVC_RETURN_IF((cfg.host_allocator.alloc == NULL) != (cfg.host_allocator.free == NULL), NULL,
                  KVC_ERR_INVALID_ARGUMENT, "host_allocator needs both alloc and free");
    KVC_RETURN_IF((cfg.device_allocator.alloc == NULL) != (cfg.device_allocator.free == NULL), NULL,
                  KVC_ERR_INVALID_ARGUMENT, "device_allocator needs both alloc and free");
  }
  kvc_context *ctx;
  if (cfg.host_allocator.alloc) ctx = cfg.host_allocator.alloc(cfg.host_allocator.opaque, sizeof *ctx);
  else ctx = malloc(sizeof *ctx);
  KVC_RETURN_IF(!ctx, NULL, KVC_ERR_HOST_OOM, "context of %zu bytes", sizeof *ctx);
  memset(ctx, 0, sizeof *ctx);
  if (kvc__core_init(&ctx->core, &cfg) != KVC_OK) {
    if (cfg.host_allocator.free) cfg.host_allocator.free(cfg.host_allocator.opaque, ctx);
    else free(ctx);
    return kvc__error(NULL, KVC_ERR_HOST_OOM, __func__, "error text slot");
  }
  ctx->device = cfg.device;
  ctx->device_allocator = cfg.device_allocator;
  ctx->max_param_bytes = (size_t)1 << 30;
  ctx->num_sms = 1;
  pthread_mutex_init(&ctx->lock, NULL);
  pthread_mutex_init(&ctx->staging_lock, NULL);
  kvc__options_print(&ctx->core.options, ctx->core.options.log_level);

  kvc_backend want = cfg.backend;
  if (want == KVC_BACKEND_AUTO && ctx->core.options.backend > 0) want = (kvc_backend)ctx->core.options.backend;
  kvc_status st = KVC_OK;
  if (want != KVC_BACKEND_HOST) {
    st = kvc__cuda_context_init(ctx, want == KVC_BACKEND_CUDA);
    if (st == KVC_OK) ctx->backend = KVC_BACKEND_CUDA;
    else if (want == KVC_BACKEND_CUDA) goto fail;
    else kvc__log(ctx, KVC_LOG_INFO, "no CUDA (%s); using the host backend", kvc_last_error(ctx));
  }
  if (ctx->backend != KVC_BACKEND_CUDA) ctx->backend = KVC_BACKEND_HOST;
  KVC_CHECK_GOTO(kvc__kcache_create(ctx), st, fail);
  size_t staging = (size_t)ctx->core.options.staging_bytes;
  if (staging < 4096) staging = 4096;
  if (ctx->backend == KVC_BACKEND_CUDA) KVC_CHECK_GOTO(kvc__cuda_staging_init(ctx, staging), st, fail);
  else KVC_CHECK_GOTO(kvc__host_staging_init(ctx, staging), st, fail);
  *out = ctx;
  return KVC_OK;
fail:
  /* The context dies here: its text moves, unchanged, to the context-less slot. */
  kvc__error_to_null(ctx, st);
  kvc__kcache_destroy(ctx);
  kvc__cuda_context_fini(ctx);
  pthread_mutex_destroy(&ctx->lock);
  pthread_mutex_destroy(&ctx->staging_lock);
  kvc__core_fini(&ctx->core);
  if (cfg.host_allocator.free) cfg.host_allocator.free(cfg.host_allocator.opaque, ctx);
  else free(ctx);
  return st;
}

void kvc_context_destroy(kvc_context *ctx) {
  if (!ctx || ctx->core.magic != KVC__CONTEXT_MAGIC) return;
  kvc_host_allocator ha = ctx->core.host_allocator;
  if (ctx->backend == KVC_BACKEND_CUDA) kvc__cuda_staging_fini(ctx);
  else kvc__host_staging_fini(ctx);
  kvc__kcache_destroy(ctx);
  kvc__cuda_context_fini(ctx);
  pthread_mutex_destroy(&ctx->lock);
  pthread_mutex_destroy(&ctx->staging_lock);
  kvc__core_fini(&ctx->core);
  ctx->core.magic = 0;
  if (ha.free) ha.free(ha.opaque, ctx);
  else free(ctx);
}

kvc_backend kvc_context_backend(const kvc_context *ctx) { return ctx ? ctx->backend : KVC_BACKEND_HOST; }
int kvc_context_device(const kvc_context *ctx) { return ctx && ctx->backend == KVC_BACKEND_CUDA ? ctx->device : -1; }
int kvc_context_check_mode(const kvc_context *ctx) { return ctx ? ctx->core.options.check : 0; }

kvc_status kvc_context_device_info(kvc_context *ctx, kvc_device_info *out) {
  KVC_API_ENTRY();
  KVC_RETURN_IF(!ctx || !out, ctx, KVC_ERR_INVALID_ARGUMENT, "ctx or out is NULL");
  memset(out, 0, sizeof *out);
  out->nvrtc_version = kvc__nvrtc_version();
  if (ctx->backend != KVC_BACKEND_CUDA) {
    snprintf(out->name, sizeof out->name, "host");
    out->multiprocessors = 1;
    return KVC_OK;
  }
  return kvc__cuda_device_info(ctx, out);
}

kvc_status kvc_context_kernel_cache_stats(kvc_context *ctx, kvc_kernel_cache_stats *out) {
  KVC_API_ENTRY();
  KVC_RETURN_IF(!ctx || !out, ctx, KVC_ERR_INVALID_ARGUMENT, "ctx or out is NULL");
  return kvc__kcache_stats(ctx, out);
}

size_t kvc__max_param_bytes(const kvc_context *ctx) { return ctx->max_param_bytes; }
int kvc__num_sms(const kvc_context *ctx) { return ctx->num_sms; }

void kvc__smem_limits(kvc_context *ctx, int64_t *per_block, int64_t *per_sm) {
  kvc_device_info di;
  if (ctx->backend != KVC_BACKEND_CUDA || kvc_context_device_info(ctx, &di) != KVC_OK) {
    *per_block = *per_sm = INT64_MAX / 4;
    return;
  }
  const int cc = di.compute_major * 10 + di.compute_minor;
  if (cc >= 90) *per_block = 227 * 1024, *per_sm = 228 * 1024; /* Hopper, Blackwell */
  else if (cc == 80 || cc == 87) *per_block = 163 * 1024, *per_sm = 164 * 1024;
  else *per_block = 99 * 1024, *per_sm = 100 * 1024;
}
