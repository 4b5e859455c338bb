/*
 * device.h — the device seam: the only interface through which upper layers touch
 * memory, copies and kernels, the same for both backends. Each function here branches
 * once on the context's backend: the host backend uses plain memory, runs every copy
 * synchronously and runs a kernel as its C twin (host_kernels/, found by the kernel's
 * entry name); the CUDA backend goes to cuda.c (libcuda loaded with dlopen) and runs the
 * NVRTC-compiled kernel (nvrtc.c, kcache.c). memory.c holds the memory, copy and staging
 * entry points, kcache.c the kernel lookup and launch, context.c the context itself.
 * Nothing above src/device/ includes cuda.h or knows which backend runs.
 *
 * Conventions: every function returns kvc_status and records an error on failure;
 * pointers "dev" are backend memory; no function here synchronizes a stream except
 * kvc__dev_sync and the documented staging back-pressure.
 */
#ifndef KVC_DEVICE_H
#define KVC_DEVICE_H

#include "../core/core.h"

/* --- Memory ------------------------------------------------------------------------ */

/** bytes > 0; *out 256-byte aligned. Goes through the context's device allocator. */
kvc_status kvc__dev_alloc(kvc_context *ctx, size_t bytes, void **out);
/** p may be NULL. */
void kvc__dev_free(kvc_context *ctx, void *p);
kvc_status kvc__dev_pinned_alloc(kvc_context *ctx, size_t bytes, void **out);
void kvc__dev_pinned_free(kvc_context *ctx, void *p);
kvc_status kvc__dev_memset(kvc_context *ctx, void *dst, uint8_t value, size_t bytes, kvc_stream s);
kvc_status kvc__dev_h2d(kvc_context *ctx, void *dst, const void *src, size_t bytes, kvc_stream s);
kvc_status kvc__dev_d2h(kvc_context *ctx, void *dst, const void *src, size_t bytes, kvc_stream s);
kvc_status kvc__dev_d2d(kvc_context *ctx, void *dst, const void *src, size_t bytes, kvc_stream s);
kvc_status kvc__dev_sync(kvc_context *ctx, kvc_stream s);
/** Copies bytes (> 0) from src (memory of src_ctx) to dst (memory of dst_ctx) on
 *  stream s, a stream of dst_ctx's device. Both contexts must have the same backend.
 *  Host: memmove. CUDA, same device: a device-to-device copy; different devices: a peer
 *  copy (cuMemcpyPeerAsync); call kvc__dev_enable_peer_access once first so it goes
 *  over the direct link. KVC_ERR_UNSUPPORTED for mixed backends. */
kvc_status kvc__dev_copy_peer(kvc_context *dst_ctx, void *dst, kvc_context *src_ctx, const void *src, size_t bytes,
                              kvc_stream s);
/** Lets dst_ctx's device access src_ctx's memory directly when the devices allow it
 *  (cuDeviceCanAccessPeer); a no-op on the host backend, for one device, when peer access
 *  is impossible (copies are then staged by the driver) or already enabled. */
kvc_status kvc__dev_enable_peer_access(kvc_context *dst_ctx, kvc_context *src_ctx);
/** Strided form of kvc__dev_copy_peer: `height` rows of `width` bytes, row i from
 *  src + i * src_pitch to dst + i * dst_pitch, as ONE copy (cuMemcpy2DAsync on one
 *  device, cuMemcpy3DPeerAsync between two; a memmove per row on the host). Pitches
 *  >= width and <= kvc__dev_max_pitch of both contexts; width, height > 0. */
kvc_status kvc__dev_copy_2d_peer(kvc_context *dst_ctx, void *dst, size_t dst_pitch, kvc_context *src_ctx,
                                 const void *src, size_t src_pitch, size_t width, size_t height, kvc_stream s);
/** The largest pitch kvc__dev_copy_2d_peer accepts on ctx's device
 *  (CU_DEVICE_ATTRIBUTE_MAX_PITCH; 0 if unknown; SIZE_MAX on the host backend). */
size_t kvc__dev_max_pitch(kvc_context *ctx);

/* --- Kernels ----------------------------------------------------------------------- */

/** A kernel of kernels/<file>, by its extern "C" entry name. The host backend runs the
 *  C twin registered under the same name (host_kernels/twins.c), so a launcher never
 *  names a backend. */
typedef struct kvc__kernel_def {
  const char *name;
  const char *file;
} kvc__kernel_def;

/** Compile-time specialisation: -D<name>=<value> pairs (at most 8), in a fixed order.
 *  Names must be strings of static storage (the kernel cache keeps the pointers). */
typedef struct kvc__spec {
  int count;
  struct {
    const char *name;
    int64_t value;
  } def[8];
} kvc__spec;

/** A resolved kernel: compiled and loaded for this context (or the host twin). Owned by
 *  the context's kernel cache; valid for the context's life. */
typedef struct kvc__kfunc kvc__kfunc;

typedef struct kvc__dim3 {
  unsigned x, y, z;
} kvc__dim3;

/** Looks up (compiling or loading from disk on first use) the kernel for `spec`.
 *  Thread-safe. May take ~100 ms the first time (NVRTC); microseconds after. */
kvc_status kvc__kernel_get(kvc_context *ctx, const kvc__kernel_def *def, const kvc__spec *spec, const kvc__kfunc **out);

/** Launches `f` with one by-value parameter struct (the kernel's only argument).
 *  params_bytes <= kvc__max_param_bytes(ctx). Host backend: runs the twin now, on the
 *  same parameter block (and, for twins that need them, `f`'s specialisation values,
 *  which the CUDA kernel has as compile-time constants). */
kvc_status kvc__kernel_launch(kvc_context *ctx, const kvc__kfunc *f, kvc__dim3 grid, kvc__dim3 block,
                              unsigned smem_bytes, kvc_stream stream, const void *params, size_t params_bytes);

/** Memory a kernel's host twin needs beyond its parameter block for one launch (the move
 *  twin buffers a chunk of rows where the kernel has shared memory): on the host backend
 *  `count` x `size` bytes from kvc__malloc, which the caller frees with kvc__free after
 *  the launch; on CUDA *out = NULL and nothing is allocated. Taken before the launch, so
 *  running out is KVC_ERR_HOST_OOM ("<what> of N bytes", naming `fn`) with nothing done. */
kvc_status kvc__kernel_twin_scratch(kvc_context *ctx, const char *fn, const char *what, size_t count, size_t size,
                                    void **out);

/** Largest kernel parameter struct the driver accepts (32764 on CUDA >= 12.1, else 4096;
 *  unbounded on the host backend). */
size_t kvc__max_param_bytes(const kvc_context *ctx);

/** Number of multiprocessors (1 on the host backend): sizes persistent grids. */
int kvc__num_sms(const kvc_context *ctx);

/** Dynamic shared memory one block may use and one multiprocessor holds, in bytes, by
 *  compute capability (unbounded, INT64_MAX / 4, on the host backend, where a twin runs
 *  the whole grid as one). */
void kvc__smem_limits(kvc_context *ctx, int64_t *per_block, int64_t *per_sm);

/* --- Staging of per-call payloads too large for kernel parameters ------------------ */

/** Reserves `bytes` (rounded to 256) of pinned host memory mirrored by device memory.
 *  The caller fills *host, then calls kvc__staging_upload (async H2D on `stream`), then
 *  launches the kernel that reads *dev, then kvc__staging_fence on the same stream: the
 *  region is reused only after that point completes. Back-pressure (a wait) happens only
 *  when the ring is full of in-flight work. Host backend: *dev == *host. Reservations are serialised by the
 *  context's staging lock (separate from the kernel-cache lock, so kernel lookups may
 *  happen while a reservation is held); pairs must not nest on one thread. */
kvc_status kvc__staging_reserve(kvc_context *ctx, size_t bytes, void **host, void **dev);
/** The device address of the current reservation's pinned host bytes themselves: a
 *  kernel that reads its payload about once reads it there, over the bus, and the
 *  caller skips kvc__staging_upload (one driver call less; the fence is still needed).
 *  Valid from kvc__staging_reserve to the fence. Host backend: the host address. */
void *kvc__staging_mapped(const kvc_context *ctx);
kvc_status kvc__staging_upload(kvc_context *ctx, kvc_stream stream);
kvc_status kvc__staging_fence(kvc_context *ctx, kvc_stream stream);
/** Gives up a reservation before anything was queued on it (error paths). */
void kvc__staging_cancel(kvc_context *ctx);

/* --- Embedded kernel sources (generated at build time) ----------------------------- */

typedef struct kvc__embedded_file {
  const char *name;
  const char *text;
} kvc__embedded_file;
extern const kvc__embedded_file kvc__embedded_files[];
extern const size_t kvc__embedded_count;
const char *kvc__embedded_find(const char *name);

/* --- NVRTC (usable without a context) ---------------------------------------------- */

/** Loads NVRTC once (reusing one already in the process, then libnvrtc.so.13/.12/.so,
 *  or KVC_NVRTC_LIB). KVC_ERR_NO_DEVICE when not found. */
kvc_status kvc__nvrtc_load(const kvc_context *ctx_for_errors, const char *override_path);
int kvc__nvrtc_version(void);

/* What kvc__nvrtc_compile hands back: a cubin, or PTX when is_ptx; malloc'd (free()). */
typedef struct kvc__nvrtc_image {
  void *data;
  size_t bytes;
  bool is_ptx;
} kvc__nvrtc_image;

/** Compiles kernels/<file> (all headers of kernels/ available) with `options` for `sm`
 *  into *out (written only on success). */
kvc_status kvc__nvrtc_compile(const kvc_context *ctx, const char *file, const char *const *options, int num_options,
                              int sm, bool dump_on_error, kvc__nvrtc_image *out);

/** Formats spec as -D options into buf; returns the number of options (pointers into buf). */
int kvc__spec_options(const kvc__spec *spec, char *buf, size_t cap, const char **opts, int max_opts);

#endif /* KVC_DEVICE_H */
