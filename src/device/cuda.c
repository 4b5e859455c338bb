/*
 * cuda.c — the CUDA backend of the device seam.
 *
 * libcuda.so.1 is loaded with dlopen at first use (so the library runs its host backend
 * on machines without a driver), cuGetProcAddress resolves every entry point at an
 * explicit CUDA version and types it with the PFN typedefs of cuda_api.h (the project's own
 * declarations, so no toolkit header is needed to build it; cuda_syms.inc).
 * The function table is written once under pthread_once and read-only afterwards.
 *
 * Contexts use the device's primary context, the one PyTorch uses, so device pointers
 * are shared in one process. Each entry point makes it current only when the calling
 * thread has another context current (push/pop), leaving the caller's state unchanged.
 */
#define _GNU_SOURCE
#include "context.h"

#include "cuda_api.h"
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* --- Driver function table --------------------------------------------------------- */

static struct {
  kvc_status status;
  char error[512];
  void *lib;
  int driver_version;
#define KVC_CU_SYM(req, name, ver) PFN_##name##_v##ver name;
#include "cuda_syms.inc"
#undef KVC_CU_SYM
} cu;
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static char cu_path[256];

static void cu_teardown(void) {
  void *lib = cu.lib;
  kvc_status st = cu.status;
  char err[sizeof cu.error];
  memcpy(err, cu.error, sizeof err);
  memset(&cu, 0, sizeof cu);
  cu.status = st;
  memcpy(cu.error, err, sizeof err);
  if (lib) dlclose(lib);
}

static void cu_load_once(void) {
  const char *path = cu_path[0] ? cu_path : "libcuda.so.1";
  cu.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!cu.lib) {
    cu.status = KVC_ERR_NO_DEVICE;
    snprintf(cu.error, sizeof cu.error, "cannot load %s: %s", path, dlerror());
    return;
  }
  PFN_cuGetProcAddress_v12000 get_proc = (PFN_cuGetProcAddress_v12000)dlsym(cu.lib, "cuGetProcAddress_v2");
  if (!get_proc) {
    cu.status = KVC_ERR_NO_DEVICE;
    snprintf(cu.error, sizeof cu.error, "%s has no cuGetProcAddress_v2: driver older than CUDA 12.0", path);
    cu_teardown();
    return;
  }
#define KVC_CU_SYM(req, name, ver)                                                               \
  {                                                                                              \
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;                 \
    CUresult r = get_proc(#name, (void **)&cu.name, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found); \
    if (r != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS) {                             \
      cu.name = NULL;                                                                            \
      if (req) {                                                                                 \
        cu.status = KVC_ERR_NO_DEVICE;                                                           \
        snprintf(cu.error, sizeof cu.error, "driver entry point %s not found", #name);           \
        cu_teardown();                                                                           \
        return;                                                                                  \
      }                                                                                          \
    }                                                                                            \
  }
#include "cuda_syms.inc"
#undef KVC_CU_SYM
  CUresult r = cu.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char *name = NULL;
    cu.cuGetErrorName(r, &name);
    cu.status = KVC_ERR_NO_DEVICE;
    snprintf(cu.error, sizeof cu.error, "cuInit failed: %s", name ? name : "?");
    cu_teardown();
    return;
  }
  cu.cuDriverGetVersion(&cu.driver_version);
  cu.status = KVC_OK;
}

static kvc_status cu_load(const kvc_context *ctx, const char *func) {
  if (!cu_path[0] && ctx && kvc__core_of(ctx)->options.cuda_lib[0])
    snprintf(cu_path, sizeof cu_path, "%s", kvc__core_of(ctx)->options.cuda_lib);
  pthread_once(&cu_once, cu_load_once);
  if (cu.status != KVC_OK) return kvc__error(ctx, cu.status, func, "%s", cu.error);
  return KVC_OK;
}

static kvc_status cu_fail(const kvc_context *ctx, CUresult r, const char *func, const char *what) {
  const char *name = NULL, *text = NULL;
  if (cu.cuGetErrorName) cu.cuGetErrorName(r, &name);
  if (cu.cuGetErrorString) cu.cuGetErrorString(r, &text);
  kvc_status st = r == CUDA_ERROR_OUT_OF_MEMORY ? KVC_ERR_DEVICE_OOM : KVC_ERR_CUDA;
  return kvc__error(ctx, st, func, "%s failed: %s (%s)", what, name ? name : "?", text ? text : "");
}

#define CU_CALL(ctx, call, label)               \
  do {                                          \
    CUresult r_ = (call);                       \
    if (r_ != CUDA_SUCCESS) {                   \
      st = cu_fail((ctx), r_, __func__, #call); \
      goto label;                               \
    }                                           \
  } while (0)

/* --- Per-context state ------------------------------------------------------------- */

struct kvc__cuda_ctx {
  CUdevice dev;
  CUcontext pctx;
  char name[96];
  int cc_major, cc_minor, sms;
  size_t l2, total_mem;
};

/* Makes the device's primary context current for this call. A thread with no current
 * context simply gets ours (as the CUDA runtime would do); a thread that has another one
 * current gets ours pushed for the call and popped after, leaving its state unchanged.
 * The common cases cost one cuCtxGetCurrent. */
static kvc_status cu_enter(kvc_context *ctx, bool *pushed, const char *func) {
  CUcontext cur = NULL;
  *pushed = false;
  if (cu.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx->cuda->pctx) return KVC_OK;
  if (cur == NULL) {
    CUresult r = cu.cuCtxSetCurrent(ctx->cuda->pctx);
    if (r != CUDA_SUCCESS) return cu_fail(ctx, r, func, "cuCtxSetCurrent");
    return KVC_OK;
  }
  CUresult r = cu.cuCtxPushCurrent(ctx->cuda->pctx);
  if (r != CUDA_SUCCESS) return cu_fail(ctx, r, func, "cuCtxPushCurrent");
  *pushed = true;
  return KVC_OK;
}

static void cu_leave(bool pushed) {
  if (pushed) {
    CUcontext popped;
    cu.cuCtxPopCurrent(&popped);
  }
}

kvc_status kvc__cuda_context_init(kvc_context *ctx, bool explicit_request) {
  kvc_status st = cu_load(ctx, "kvc_context_create");
  if (st != KVC_OK) return st;
  int count = 0;
  CUresult r = cu.cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS || count == 0)
    return kvc__error(ctx, KVC_ERR_NO_DEVICE, "kvc_context_create", "no CUDA device (count %d)", count);
  if (ctx->device < 0 || ctx->device >= count)
    return kvc__error(ctx, explicit_request ? KVC_ERR_INVALID_ARGUMENT : KVC_ERR_NO_DEVICE, "kvc_context_create",
                      "device %d out of range (%d devices)", ctx->device, count);
  kvc__cuda_ctx *c = kvc__calloc(ctx, 1, sizeof *c);
  if (!c) return kvc__error(ctx, KVC_ERR_HOST_OOM, "kvc_context_create", "context state");
  CU_CALL(ctx, cu.cuDeviceGet(&c->dev, ctx->device), fail);
  CU_CALL(ctx, cu.cuDevicePrimaryCtxRetain(&c->pctx, c->dev), fail);
  cu.cuDeviceGetName(c->name, (int)sizeof c->name, c->dev);
  cu.cuDeviceGetAttribute(&c->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, c->dev);
  cu.cuDeviceGetAttribute(&c->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, c->dev);
  cu.cuDeviceGetAttribute(&c->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, c->dev);
  int l2 = 0;
  cu.cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, c->dev);
  c->l2 = (size_t)l2;
  cu.cuDeviceTotalMem(&c->total_mem, c->dev);
  ctx->cuda = c;
  ctx->sm = c->cc_major * 10 + c->cc_minor;
  ctx->num_sms = c->sms > 0 ? c->sms : 1;
  /* Kernel parameters up to 32764 bytes: driver 12.1+, Volta+. */
  ctx->max_param_bytes = (cu.driver_version >= 12010 && c->cc_major >= 7) ? 32764 : 4096;
  return KVC_OK;
fail:
  kvc__free(ctx, c);
  return st;
}

void kvc__cuda_context_fini(kvc_context *ctx) {
  if (!ctx->cuda) return;
  cu.cuDevicePrimaryCtxRelease(ctx->cuda->dev);
  kvc__free(ctx, ctx->cuda);
  ctx->cuda = NULL;
}

kvc_status kvc__cuda_device_info(kvc_context *ctx, kvc_device_info *out) {
  kvc__cuda_ctx *c = ctx->cuda;
  snprintf(out->name, sizeof out->name, "%s", c->name);
  out->compute_major = c->cc_major;
  out->compute_minor = c->cc_minor;
  out->multiprocessors = c->sms;
  out->total_memory = c->total_mem;
  out->l2_bytes = c->l2;
  out->driver_version = cu.driver_version;
  return KVC_OK;
}

/* --- Memory and copies ------------------------------------------------------------- */

kvc_status kvc__cuda_alloc(kvc_context *ctx, size_t bytes, void **out) {
  kvc_status st = KVC_OK;
  bool pushed;
  KVC_FORWARD(cu_enter(ctx, &pushed, "kvc__dev_alloc"));
  if (ctx->device_allocator.alloc) {
    void *p = ctx->device_allocator.alloc(ctx->device_allocator.opaque, bytes, ctx->device, NULL);
    if (!p)
      st = kvc__error(ctx, KVC_ERR_DEVICE_OOM, "kvc__dev_alloc", "engine allocator returned NULL for %zu bytes", bytes);
    else *out = p;
  } else {
    CUdeviceptr d = 0;
    CUresult r = cu.cuMemAlloc(&d, bytes);
    if (r != CUDA_SUCCESS) st = cu_fail(ctx, r, "kvc__dev_alloc", "cuMemAlloc");
    else *out = (void *)(uintptr_t)d;
  }
  cu_leave(pushed);
  return st;
}

void kvc__cuda_free(kvc_context *ctx, void *p) {
  bool pushed;
  if (cu_enter(ctx, &pushed, "kvc__dev_free") != KVC_OK) return;
  if (ctx->device_allocator.free) ctx->device_allocator.free(ctx->device_allocator.opaque, p, ctx->device, NULL);
  else cu.cuMemFree((CUdeviceptr)(uintptr_t)p);
  cu_leave(pushed);
}

kvc_status kvc__cuda_pinned_alloc(kvc_context *ctx, size_t bytes, void **out) {
  kvc_status st = KVC_OK;
  bool pushed;
  KVC_FORWARD(cu_enter(ctx, &pushed, "kvc_host_pinned_alloc"));
  CU_CALL(ctx, cu.cuMemAllocHost(out, bytes), done);
done:
  cu_leave(pushed);
  if (st == KVC_ERR_DEVICE_OOM) st = KVC_ERR_HOST_OOM;
  return st;
}

void kvc__cuda_pinned_free(kvc_context *ctx, void *p) {
  bool pushed;
  if (cu_enter(ctx, &pushed, "kvc_host_pinned_free") != KVC_OK) return;
  cu.cuMemFreeHost(p);
  cu_leave(pushed);
}

typedef enum { COPY_H2D, COPY_D2H, COPY_D2D, COPY_MEMSET, COPY_SYNC } copy_kind;

kvc_status kvc__cuda_copy(kvc_context *ctx, int kind, void *dst, const void *src, size_t bytes, uint8_t value,
                          kvc_stream s) {
  kvc_status st = KVC_OK;
  bool pushed;
  KVC_FORWARD(cu_enter(ctx, &pushed, "kvc__dev_copy"));
  CUstream stream = (CUstream)s;
  switch ((copy_kind)kind) {
  case COPY_H2D: CU_CALL(ctx, cu.cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dst, src, bytes, stream), done); break;
  case COPY_D2H: CU_CALL(ctx, cu.cuMemcpyDtoHAsync(dst, (CUdeviceptr)(uintptr_t)src, bytes, stream), done); break;
  case COPY_D2D:
    CU_CALL(ctx, cu.cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, bytes, stream), done);
    break;
  case COPY_MEMSET: CU_CALL(ctx, cu.cuMemsetD8Async((CUdeviceptr)(uintptr_t)dst, value, bytes, stream), done); break;
  case COPY_SYNC: CU_CALL(ctx, cu.cuStreamSynchronize(stream), done); break;
  }
done:
  cu_leave(pushed);
  return st;
}

/* --- Copies between two devices (transfer plans) ---------------------------------- */

kvc_status kvc__cuda_copy_peer(kvc_context *dst_ctx, void *dst, kvc_context *src_ctx, const void *src, size_t bytes,
                               kvc_stream s) {
  if (!cu.cuMemcpyPeerAsync)
    return kvc__error(dst_ctx, KVC_ERR_UNSUPPORTED, "kvc__dev_copy_peer", "driver has no cuMemcpyPeerAsync");
  kvc_status st = KVC_OK;
  bool pushed;
  KVC_FORWARD(cu_enter(dst_ctx, &pushed, "kvc__dev_copy_peer"));
  CU_CALL(dst_ctx,
          cu.cuMemcpyPeerAsync((CUdeviceptr)(uintptr_t)dst, dst_ctx->cuda->pctx, (CUdeviceptr)(uintptr_t)src,
                               src_ctx->cuda->pctx, bytes, (CUstream)s),
          done);
done:
  cu_leave(pushed);
  return st;
}

kvc_status kvc__cuda_enable_peer_access(kvc_context *dst_ctx, kvc_context *src_ctx) {
  if (!cu.cuDeviceCanAccessPeer || !cu.cuCtxEnablePeerAccess) return KVC_OK;
  int can = 0;
  if (cu.cuDeviceCanAccessPeer(&can, dst_ctx->cuda->dev, src_ctx->cuda->dev) != CUDA_SUCCESS || !can) return KVC_OK;
  kvc_status st = KVC_OK;
  bool pushed;
  KVC_FORWARD(cu_enter(dst_ctx, &pushed, "kvc__dev_enable_peer_access"));
  CUresult r = cu.cuCtxEnablePeerAccess(src_ctx->cuda->pctx, 0);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
    st = cu_fail(dst_ctx, r, "kvc__dev_enable_peer_access", "cuCtxEnablePeerAccess");
  cu_leave(pushed);
  return st;
}

/* Many equally spaced rows (one page run across the layers of a pool) as one driver
 * call: per-row copies would cost a few microseconds of host time each. */
kvc_status kvc__cuda_copy_2d_peer(kvc_context *dst_ctx, void *dst, size_t dst_pitch, kvc_context *src_ctx,
                                  const void *src, size_t src_pitch, size_t width, size_t height, kvc_stream s) {
  const bool same = dst_ctx->device == src_ctx->device;
  if (same ? !cu.cuMemcpy2DAsync : !cu.cuMemcpy3DPeerAsync)
    return kvc__error(dst_ctx, KVC_ERR_UNSUPPORTED, "kvc__dev_copy_2d_peer", "driver has no %s",
                      same ? "cuMemcpy2DAsync" : "cuMemcpy3DPeerAsync");
  kvc_status st = KVC_OK;
  bool pushed;
  KVC_FORWARD(cu_enter(dst_ctx, &pushed, "kvc__dev_copy_2d_peer"));
  if (same) {
    CUDA_MEMCPY2D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = (CUdeviceptr)(uintptr_t)src;
    c.dstDevice = (CUdeviceptr)(uintptr_t)dst;
    c.srcPitch = src_pitch;
    c.dstPitch = dst_pitch;
    c.WidthInBytes = width;
    c.Height = height;
    CU_CALL(dst_ctx, cu.cuMemcpy2DAsync(&c, (CUstream)s), done);
  } else {
    CUDA_MEMCPY3D_PEER c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = (CUdeviceptr)(uintptr_t)src;
    c.dstDevice = (CUdeviceptr)(uintptr_t)dst;
    c.srcContext = src_ctx->cuda->pctx;
    c.dstContext = dst_ctx->cuda->pctx;
    c.srcPitch = src_pitch;
    c.dstPitch = dst_pitch;
    c.srcHeight = c.dstHeight = height;
    c.WidthInBytes = width;
    c.Height = height;
    c.Depth = 1;
    CU_CALL(dst_ctx, cu.cuMemcpy3DPeerAsync(&c, (CUstream)s), done);
  }
done:
  cu_leave(pushed);
  return st;
}

size_t kvc__cuda_max_pitch(kvc_context *ctx) {
  int pitch = 0;
  if (cu.cuDeviceGetAttribute(&pitch, CU_DEVICE_ATTRIBUTE_MAX_PITCH, ctx->cuda->dev) != CUDA_SUCCESS || pitch < 0)
    return 0;
  return (size_t)pitch;
}

/* --- Modules and launches ---------------------------------------------------------- */

kvc_status kvc__cuda_module_load(kvc_context *ctx, const void *image, const char *name, void **module,
                                 void **function) {
  kvc_status st = KVC_OK;
  bool pushed;
  KVC_FORWARD(cu_enter(ctx, &pushed, "kvc__kernel_get"));
  CUmodule m = NULL;
  CUfunction f = NULL;
  CU_CALL(ctx, cu.cuModuleLoadData(&m, image), done);
  CUresult r = cu.cuModuleGetFunction(&f, m, name);
  if (r != CUDA_SUCCESS) {
    st = cu_fail(ctx, r, "kvc__kernel_get", name);
    cu.cuModuleUnload(m);
    goto done;
  }
  *module = m;
  *function = f;
done:
  cu_leave(pushed);
  return st;
}

void kvc__cuda_module_unload(kvc_context *ctx, void *module) {
  bool pushed;
  if (cu_enter(ctx, &pushed, "kvc_context_destroy") != KVC_OK) return;
  cu.cuModuleUnload((CUmodule)module);
  cu_leave(pushed);
}

kvc_status kvc__cuda_launch(kvc_context *ctx, void *function, unsigned *smem_set, kvc__dim3 grid, kvc__dim3 block,
                            unsigned smem, kvc_stream stream, const void *params) {
  kvc_status st = KVC_OK;
  bool pushed;
  KVC_FORWARD(cu_enter(ctx, &pushed, "kvc__kernel_launch"));
  CUfunction f = (CUfunction)function;
  if (smem > 48 * 1024 && smem > *smem_set) {
    CU_CALL(ctx, cu.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem), done);
    *smem_set = smem;
  }
  void *args[1] = {(void *)params};
  CU_CALL(ctx,
          cu.cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem, (CUstream)stream, args, NULL),
          done);
done:
  cu_leave(pushed);
  return st;
}

/* --- Staging ring ------------------------------------------------------------------ */

kvc_status kvc__cuda_staging_init(kvc_context *ctx, size_t bytes) {
  kvc__staging *sg = &ctx->staging;
  kvc_status st = KVC_OK;
  bool pushed;
  KVC_FORWARD(cu_enter(ctx, &pushed, "kvc__staging"));
  void *host = NULL;
  CUdeviceptr dev = 0;
  CUdeviceptr mapped = 0;
  CU_CALL(ctx, cu.cuMemAllocHost(&host, bytes), fail);
  CU_CALL(ctx, cu.cuMemHostGetDevicePointer(&mapped, host, 0), fail);
  CU_CALL(ctx, cu.cuMemAlloc(&dev, bytes), fail);
  for (int i = 0; i < (int)KVC__ARRAY_LEN(sg->fences); i++) {
    if (sg->fences[i].event) continue;
    CUevent e;
    CU_CALL(ctx, cu.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), fail);
    sg->fences[i].event = e;
  }
  sg->host = host;
  sg->dev = (unsigned char *)(uintptr_t)dev;
  sg->mapped = (unsigned char *)(uintptr_t)mapped;
  sg->capacity = bytes;
  sg->head = 0;
  sg->fence_first = sg->fence_count = 0;
  cu_leave(pushed);
  return KVC_OK;
fail:
  if (host) cu.cuMemFreeHost(host);
  if (dev) cu.cuMemFree(dev);
  cu_leave(pushed);
  return st;
}

void kvc__cuda_staging_fini(kvc_context *ctx) {
  kvc__staging *sg = &ctx->staging;
  bool pushed;
  if (cu_enter(ctx, &pushed, "kvc_context_destroy") != KVC_OK) return;
  for (int i = 0; i < (int)KVC__ARRAY_LEN(sg->fences); i++)
    if (sg->fences[i].event) cu.cuEventDestroy((CUevent)sg->fences[i].event);
  if (sg->host) cu.cuMemFreeHost(sg->host);
  if (sg->dev) cu.cuMemFree((CUdeviceptr)(uintptr_t)sg->dev);
  memset(sg, 0, sizeof *sg);
  cu_leave(pushed);
}

/* Retires the oldest fence, waiting for it if its work is still queued. */
static kvc_status staging_retire_oldest(kvc_context *ctx) {
  kvc__staging *sg = &ctx->staging;
  CUevent e = (CUevent)sg->fences[sg->fence_first].event;
  CUresult r = cu.cuEventQuery(e);
  if (r == CUDA_ERROR_NOT_READY) {
    sg->waits++;
    r = cu.cuEventSynchronize(e);
  }
  if (r != CUDA_SUCCESS) return cu_fail(ctx, r, "kvc__staging_reserve", "cuEventSynchronize");
  sg->fence_first = (sg->fence_first + 1) % (int)KVC__ARRAY_LEN(sg->fences);
  sg->fence_count--;
  return KVC_OK;
}

static bool staging_overlaps_inflight(const kvc__staging *sg, size_t begin, size_t end) {
  for (int k = 0; k < sg->fence_count; k++) {
    const kvc__staging_fence_rec *f = &sg->fences[(sg->fence_first + k) % (int)KVC__ARRAY_LEN(sg->fences)];
    if (f->begin < end && begin < f->end) return true;
  }
  return false;
}

kvc_status kvc__cuda_staging_reserve(kvc_context *ctx, size_t bytes, void **host, void **dev) {
  kvc__staging *sg = &ctx->staging;
  if (bytes > SIZE_MAX - 255) return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, __func__, "%zu staging bytes", bytes);
  bytes = (bytes + 255) & ~(size_t)255;
  if (bytes > sg->capacity) {
    /* Grow: drain everything in flight, then reallocate. Rare (first huge batch). */
    while (sg->fence_count) KVC_FORWARD(staging_retire_oldest(ctx));
    size_t cap = sg->capacity * 2 > bytes ? sg->capacity * 2 : bytes;
    kvc__cuda_staging_fini(ctx);
    KVC_FORWARD(kvc__cuda_staging_init(ctx, cap));
  }
  size_t begin = sg->head;
  if (begin + bytes > sg->capacity) begin = 0; /* wrap; the tail gap is simply skipped */
  /* Regions are retired oldest first, the order the GPU finishes them in. */
  while (sg->fence_count && staging_overlaps_inflight(sg, begin, begin + bytes))
    KVC_FORWARD(staging_retire_oldest(ctx));
  if (sg->fence_count == (int)KVC__ARRAY_LEN(sg->fences)) KVC_FORWARD(staging_retire_oldest(ctx));
  sg->reserved_begin = begin;
  sg->reserved_bytes = bytes;
  sg->head = begin + bytes;
  *host = sg->host + begin;
  *dev = sg->dev + begin;
  return KVC_OK;
}

kvc_status kvc__cuda_staging_upload(kvc_context *ctx, kvc_stream stream) {
  kvc__staging *sg = &ctx->staging;
  return kvc__cuda_copy(ctx, COPY_H2D, sg->dev + sg->reserved_begin, sg->host + sg->reserved_begin, sg->reserved_bytes,
                        0, stream);
}

kvc_status kvc__cuda_staging_fence(kvc_context *ctx, kvc_stream stream) {
  kvc__staging *sg = &ctx->staging;
  kvc_status st = KVC_OK;
  bool pushed;
  KVC_FORWARD(cu_enter(ctx, &pushed, "kvc__staging_fence"));
  int slot = (sg->fence_first + sg->fence_count) % (int)KVC__ARRAY_LEN(sg->fences);
  CU_CALL(ctx, cu.cuEventRecord((CUevent)sg->fences[slot].event, (CUstream)stream), done);
  sg->fences[slot].begin = sg->reserved_begin;
  sg->fences[slot].end = sg->reserved_begin + sg->reserved_bytes;
  sg->fence_count++;
done:
  cu_leave(pushed);
  sg->reserved_bytes = 0;
  return st;
}
