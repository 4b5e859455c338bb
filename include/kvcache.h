/*
 * kvcache.h — the one public header of kvcache.
 *
 * kvcache manages the KV cache of an LLM inference engine on NVIDIA GPUs: which
 * request owns which token slots, which slots are free, and the device buffers that
 * hold keys and values. It reproduces SGLang's `mem_cache` behaviour (same slots, same
 * order, for the same calls) with host-owned allocation metadata, so no call on the
 * scheduler path reads device memory or synchronizes a stream.
 *
 * Three levels, adopt as much as you want:
 *   3. flows — kvc_flow_*: the per-step calls a scheduler makes, over a prefix cache;
 *   2. pools — kvc_req_to_token_pool, kvc_allocator, KV pools: objects owning buffers;
 *   1. ops   — kvc_get_last_loc, kvc_write_req_to_token, ... on raw device pointers.
 * This header reads top-down in that order: an engine that lets the library run its
 * steps needs parts 1 to 5; one that keeps its own tables needs parts 1, 2 and 6.
 *
 * Contents (search for "PART n" to jump; the Doxygen reference has one page per part):
 *   PART 1  Conventions, version, status codes, basic types
 *           statuses and errors, ownership, streams, graph capture, threads, ABI
 *   PART 2  Context, memory helpers, kernel compilation, object handles
 *   PART 3  Flows: the per-step calls of a scheduler
 *           kvc_req_state, the kvc_prefix_cache interface, kvc_flow_*
 *   PART 4  Prefix caches: chunk cache, streaming sessions, radix cache, SWA radix cache
 *   PART 5  Pools and allocators
 *           request-to-token pool; token and paged allocators; SWA allocator;
 *           decode channel; KV pools (MHA, MLA, NSA, FP4); SWA KV pool; Mamba pool;
 *           hybrid pools; KV transfer between pools
 *   PART 6  Level-1 ops on raw device pointers
 *   PART 7  Diagnostics: check mode, audits, canary mode, compile check
 */

#ifndef KVCACHE_H
#define KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ===================================================================================
 * PART 1 — Conventions, version, status codes, basic types
 * =================================================================================== */

/** @defgroup kvc_conventions Conventions, version, status codes, basic types
 *
 * Conventions that hold for every function below unless its comment says otherwise.
 *
 * Statuses and errors.
 *   - Every function returns a kvc_status. KVC_OK (0) is success. On failure the
 *     objects passed in are exactly as before the call (transactional), output
 *     arguments are untouched, and kvc_last_error(ctx) holds a message naming the
 *     function and the offending argument for the calling thread.
 *   - What a scheduler does with each status: KVC_ERR_OUT_OF_SLOTS — capacity, not a
 *     bug: evict, wait or preempt, then retry (nothing was taken). KVC_ERR_INVALID_ARGUMENT
 *     — the arguments themselves are wrong (NULL, a size or id out of range).
 *     KVC_ERR_MISUSE — the arguments are well-formed but the objects' state forbids the
 *     call (double free, a row not held, a group left open). KVC_ERR_HOST_OOM /
 *     KVC_ERR_DEVICE_OOM — memory, distinct from slot capacity. KVC_ERR_CUDA /
 *     KVC_ERR_NVRTC / KVC_ERR_NO_DEVICE — the driver or the compiler. KVC_ERR_BUSY — the
 *     device is behind (decode channel): retry later. KVC_ERR_INTERNAL — an audit failed
 *     or the library found its own invariant broken. Each call's comment lists the statuses
 *     particular to it; any call may also return the argument errors above.
 *   - Accessors that return a value rather than a status (sizes, pointers, counts) return
 *     0, -1 or NULL for a NULL or destroyed handle, as each says; they never fail
 *     otherwise.
 *
 * Ownership.
 *   - The caller owns every object it creates and destroys it. An object never takes
 *     ownership of another object passed to it: configs and create calls borrow, and the
 *     borrowed object must outlive the borrower. Where an object does own others (the
 *     SWA allocator its two sides, the SWA and hybrid KV pools their KV pools) the comment
 *     says "owned", and they go with it.
 *   - Arrays passed in (slots, lengths, rows) are read during the call only; arrays in a
 *     config (layer ids, shapes) are copied at create. Pointers returned by accessors
 *     (device tables, host mirrors, mappings, owned sub-objects) belong to the object and
 *     stay valid until it is destroyed.
 *   - Slot ids on the host are int64, request rows and Mamba slots int32. Slot 0 (page
 *     0), row 0 and Mamba slot 0 are padding, never handed out, so padded CUDA-graph
 *     batches may write there harmlessly.
 *   - `layer_id` is the model's global layer id in every call that takes one and in
 *     every descriptor that reports one; a pool that owns some layers (start_layer, a
 *     layer-id list) maps it to its own. The one exception: a kvc_kv_pool handed out by a
 *     composite pool (kvc_swa_kv_pool_full/_swa, kvc_hybrid_kv_pool_full) numbers its
 *     layers 0..n-1 in the order of the composite's layer list, so calls on it take, and
 *     descriptors of it report, that position; use the composite's own calls, or its
 *     *_layer() to translate.
 *
 * Memory, streams and graph capture.
 *   - "device pointer" means memory of the context's backend: CUDA device memory on
 *     the CUDA backend, ordinary host memory on the host backend. Host pointers are
 *     plain host memory on both.
 *   - Functions taking a kvc_stream enqueue their device work on that stream (NULL is
 *     the legacy default stream) and never synchronize it unless documented. The host
 *     backend runs the work immediately and ignores the stream.
 *   - A call that takes no kvc_stream does no stream work, with one family of
 *     exceptions: calls that free slots or rewrite a row through a flow (kvc_flow_evict,
 *     kvc_flow_free_slots, kvc_flow_cache_unfinished, the session and radix calls given a
 *     flow) use the stream of the flow call in progress, or of the flow's last call.
 *   - "Graph-capturable" means the call may be made while `stream` is being captured
 *     into a CUDA graph: it launches kernels whose parameters are all device pointers or
 *     values fixed for the life of the graph, allocates nothing and reads nothing back.
 *     A call with a stream is capturable only where its comment or its section says
 *     so. Kernels are compiled by NVRTC at their first use: make each capturable call
 *     once before capturing it (kvc_context_precompile does it for the ops).
 *   - Calls that are host only (they say "host only" or "no device work", or take no
 *     stream and no flow, as every accessor) may be made at any time, a capture in
 *     progress or not: they capture nothing. Create, destroy and every call that
 *     synchronizes must not be made while a stream of the context's device is being
 *     captured.
 *
 * Threads and lifetime.
 *   - Thread rules: nothing is thread-safe unless stated. A context may be used from
 *     several threads at once only with distinct pools/allocators; each pool or
 *     allocator has a single writer. Error text is kept per context per thread.
 *   - destroy(NULL) is a no-op. Destroying an object requires that no GPU work that
 *     uses its buffers is still pending (synchronize your streams first).
 *
 * ABI promise: the same major version is ABI stable; minor versions only add. Status
 * values below 100 and struct field offsets never change. Config structs begin with
 * struct_size and version; fill them with the matching *_INIT macro or *_default().
 * Every call that takes one checks it the same way: KVC_ERR_VERSION unless struct_size
 * lies between the size of the first version and this library's sizeof and the major
 * version matches; KVC_ERR_INVALID_ARGUMENT when a reserved_ word is not zero (later
 * minors add fields there).
 * @{ */

/* --- Export macro ------------------------------------------------------------------ */

#if defined(_WIN32)
#  if defined(KVC_BUILDING_SHARED)
#    define KVC_API __declspec(dllexport)
#  elif defined(KVC_USING_SHARED)
#    define KVC_API __declspec(dllimport)
#  else
#    define KVC_API
#  endif
#elif defined(__GNUC__)
#  define KVC_API __attribute__((visibility("default")))
#else
#  define KVC_API
#endif

/* --- Version ----------------------------------------------------------------------- */

/** The version of this header. Compare KVC_VERSION_NUMBER (MAJOR * 10000 + MINOR * 100 +
 *  PATCH) with kvc_version_number() to detect a header/library mismatch. */
#define KVC_VERSION_MAJOR 0
#define KVC_VERSION_MINOR 1
#define KVC_VERSION_PATCH 0
#define KVC_VERSION_NUMBER (KVC_VERSION_MAJOR * 10000 + KVC_VERSION_MINOR * 100 + KVC_VERSION_PATCH)
#define KVC_VERSION_STRING "0.1.0"

/** kvc_version_number() : the library's KVC_VERSION_NUMBER, to detect a header/library
 *  mismatch at run time. Thread-safe. */
KVC_API unsigned kvc_version_number(void);
/** kvc_version_string() : "MAJOR.MINOR.PATCH" of the library. Static storage. */
KVC_API const char *kvc_version_string(void);

/* --- Status codes ------------------------------------------------------------------ */

/* One list, from which the enum and both string tables are generated.
 * Only values < 100 are stable; experimental values are >= 1000. */
#define KVC_STATUS_MAP(XX)                                                            \
  XX(OK, 0, "success")                                                                \
  XX(ERR_INVALID_ARGUMENT, 1, "invalid argument (see kvc_last_error())")              \
  XX(ERR_OUT_OF_SLOTS, 2, "capacity exhausted: not enough free slots, pages or rows") \
  XX(ERR_HOST_OOM, 3, "host memory allocation failed")                                \
  XX(ERR_DEVICE_OOM, 4, "device memory allocation failed")                            \
  XX(ERR_CUDA, 5, "CUDA driver error (see kvc_last_error() or KVC_LOG=debug)")        \
  XX(ERR_NVRTC, 6, "kernel compilation failed (NVRTC log in kvc_last_error())")       \
  XX(ERR_NO_DEVICE, 7, "no usable CUDA device or driver")                             \
  XX(ERR_UNSUPPORTED, 8, "operation not supported by this object, backend or device") \
  XX(ERR_MISUSE, 9, "API misuse: call not allowed in the object's current state")     \
  XX(ERR_VERSION, 10, "struct version or size not understood by this library")        \
  XX(ERR_INTERNAL, 11, "internal invariant violated (a bug; please report)")          \
  XX(ERR_IO, 12, "file system error (kernel cache)")                                  \
  XX(ERR_BUSY, 13, "the device is too many steps behind the host: retry after it caught up")

/** Status of every call (see "Statuses and errors" above for what each means to a
 *  scheduler). Values < 100 are stable; KVC_STATUS_FORCE_INT_ only pins the size. */
typedef enum kvc_status {
#define KVC_XX_ENUM_(name, value, text) KVC_##name = value,
  KVC_STATUS_MAP(KVC_XX_ENUM_)
#undef KVC_XX_ENUM_
      KVC_STATUS_FORCE_INT_ = 0x7fffffff
} kvc_status;

/** kvc_status_string() : a human sentence for `status`. Static storage; never NULL. */
KVC_API const char *kvc_status_string(kvc_status status);
/** kvc_status_name() : the enum name without prefix ("ERR_OUT_OF_SLOTS"). Never NULL. */
KVC_API const char *kvc_status_name(kvc_status status);

/* --- Basic types ------------------------------------------------------------------- */

/** A CUDA stream (CUstream / cudaStream_t, the same handle). NULL = the legacy default
 *  stream. Ignored by the host backend. */
typedef void *kvc_stream;

/** Where a context's memory and kernels live. The host backend runs the same calls on
 *  plain memory with C twins of the kernels: machines without a GPU, tests, CPU use. */
typedef enum kvc_backend {
  KVC_BACKEND_AUTO = 0, /* CUDA when a device is usable, else host */
  KVC_BACKEND_HOST = 1, /* plain host memory, C reference kernels, synchronous */
  KVC_BACKEND_CUDA = 2  /* libcuda via dlopen, kernels compiled by NVRTC */
} kvc_backend;

/** Element types of buffers and views. fp8 values are stored as bytes but reported with
 *  their real dtype. Values are stable (DLPack mapping is done by the library). */
typedef enum kvc_dtype {
  KVC_DTYPE_INVALID = 0,
  KVC_DTYPE_F32 = 1,
  KVC_DTYPE_F16 = 2,
  KVC_DTYPE_BF16 = 3,
  KVC_DTYPE_FP8_E4M3 = 4,
  KVC_DTYPE_FP8_E5M2 = 5,
  KVC_DTYPE_U8 = 6,
  KVC_DTYPE_I32 = 7,
  KVC_DTYPE_I64 = 8,
  KVC_DTYPE_U64 = 9,
  KVC_DTYPE_FP4_E2M1 = 10 /* two values per byte, low nibble first */
} kvc_dtype;

/** kvc_dtype_size() : bytes per element (1 for FP4_E2M1's storage byte, 0 if invalid). */
KVC_API size_t kvc_dtype_size(kvc_dtype dtype);
/** kvc_dtype_name() : "bf16", "fp8_e4m3", ... Static storage; never NULL. */
KVC_API const char *kvc_dtype_name(kvc_dtype dtype);

/** Width of index vectors (slots, lengths, row ids) passed to ops. Any other value is
 *  KVC_ERR_INVALID_ARGUMENT, whatever n is. */
typedef enum kvc_index_type { KVC_INDEX_I32 = 0, KVC_INDEX_I64 = 1 } kvc_index_type;

/** @} */ /* end of kvc_conventions */

/* ===================================================================================
 * PART 2 — Context, memory helpers, kernel compilation, object handles
 * =================================================================================== */

/** @defgroup kvc_context Context, memory helpers, kernel compilation, object handles
 * @{ */

/* --- Allocator hooks --------------------------------------------------------------- */

/** Host memory hooks (zstd's customMem). Both NULL = malloc/free. Called for every host
 *  allocation the library makes for objects of this context. */
typedef struct kvc_host_allocator {
  void *(*alloc)(void *opaque, size_t bytes);
  void (*free)(void *opaque, void *ptr);
  void *opaque;
} kvc_host_allocator;

/** Device memory hooks, so an engine can serve pool buffers from its own allocator (e.g.
 *  PyTorch's caching allocator). `alloc` returns a device pointer of at least `bytes`
 *  bytes aligned to 256 bytes, or NULL; `stream` is the stream the library will first use
 *  the memory on (may be ignored). Both NULL = cuMemAlloc/cuMemFree. Unused on the host
 *  backend. */
typedef struct kvc_device_allocator {
  void *(*alloc)(void *opaque, size_t bytes, int device, kvc_stream stream);
  void (*free)(void *opaque, void *ptr, int device, kvc_stream stream);
  void *opaque;
} kvc_device_allocator;

/* --- Context ----------------------------------------------------------------------- */

/** The library instance: backend, device, kernel cache, staging buffers, allocators and
 *  per-thread error text. Every object belongs to one context; there are no globals, so
 *  two contexts on two GPUs work side by side. */
typedef struct kvc_context kvc_context;

/** Context flags. */
/* Other bits are refused (KVC_ERR_INVALID_ARGUMENT). */
/* clang-format off */
#define KVC_CONTEXT_CHECK 0x1u /* check mode: verify conservation after every mutating call
                                  (also enabled by env KVC_CHECK=1) */
/* clang-format on */
#define KVC_CONTEXT_NO_DISK_CACHE 0x2u /* keep compiled kernels in memory only */
/* clang-format off */
#define KVC_CONTEXT_CANARY 0x4u /* canary mode (also env KVC_CANARY=1): every flow created
                                   in the context guards the context's most recently created
                                   KV pool as kvc_flow_set_canary() does (a debug mode: it
                                   synchronizes to check); SWA flows are not covered: call
                                   kvc_flow_set_canary_swa() */
/* clang-format on */

/** kvc_context_create()'s arguments. Fill with KVC_CONTEXT_CONFIG_INIT. */
typedef struct kvc_context_config {
  size_t struct_size;    /* sizeof(kvc_context_config) as the caller compiled it */
  uint32_t version;      /* KVC_VERSION_NUMBER as the caller compiled it */
  kvc_backend backend;   /* AUTO by default */
  int device;            /* CUDA device ordinal (default 0) */
  uint32_t flags;        /* KVC_CONTEXT_* */
  const char *cache_dir; /* kernel cache directory; NULL = env KVC_CACHE_DIR, else
                            $XDG_CACHE_HOME/kvcache, else ~/.cache/kvcache. Copied. */
  kvc_host_allocator host_allocator;
  kvc_device_allocator device_allocator;
  uint64_t reserved_[8]; /* must be zero */
} kvc_context_config;

/** The defaults: AUTO backend, device 0, no flags, the default cache directory, malloc and
 *  cuMemAlloc. */
/* clang-format off */
#define KVC_CONTEXT_CONFIG_INIT                                                             \
  { sizeof(kvc_context_config), KVC_VERSION_NUMBER, KVC_BACKEND_AUTO, 0, 0u, NULL,          \
    {NULL, NULL, NULL}, {NULL, NULL, NULL}, {0} }
/* clang-format on */

/** kvc_context_config_default() : fills `config` with KVC_CONTEXT_CONFIG_INIT. */
KVC_API void kvc_context_config_default(kvc_context_config *config);

/** kvc_context_create() : binds the library to a backend and (for CUDA) a device's
 *  primary context, so device pointers are shared with PyTorch in the same process.
 *  `config` may be NULL for all defaults. Reads the KVC_* environment once.
 *  @return KVC_OK and *out, or KVC_ERR_NO_DEVICE when CUDA was requested explicitly and
 *  no driver/device is usable (AUTO falls back to host), KVC_ERR_VERSION for a config
 *  of unknown size/version, KVC_ERR_HOST_OOM, KVC_ERR_CUDA. Thread-safe. Not capturable.
 *  Error text of a failed create is available from kvc_last_error(NULL). */
KVC_API kvc_status kvc_context_create(const kvc_context_config *config, kvc_context **out);

/** kvc_context_destroy() : releases every cached kernel module, the staging buffers and
 *  the primary-context reference. All pools/allocators of the context must already be
 *  destroyed, and the context's streams idle. NULL is a no-op. */
KVC_API void kvc_context_destroy(kvc_context *ctx);

/** kvc_context_backend() : the backend actually in use (HOST or CUDA). */
KVC_API kvc_backend kvc_context_backend(const kvc_context *ctx);

/** kvc_context_device() : CUDA device ordinal (-1 on the host backend). */
KVC_API int kvc_context_device(const kvc_context *ctx);

/** kvc_last_error() : the detailed message of the calling thread's last failure on `ctx`
 *  (function, argument, CUresult name or NVRTC log excerpt), or "" if none. With ctx ==
 *  NULL: the thread's last failure of a call that had no context (e.g. a failed create).
 *  The message begins with the name of the public function the caller called. Each
 *  context keeps one message per thread, for any number of contexts and threads; the
 *  pointer stays valid, showing only this context's messages for this thread, until
 *  `ctx` is destroyed, and its text changes only at this thread's next failing call on
 *  `ctx` (ctx == NULL: thread-local storage, valid for the thread's life). */
KVC_API const char *kvc_last_error(const kvc_context *ctx);

/** Device properties the library uses; filled by kvc_context_device_info(). */
typedef struct kvc_device_info {
  char name[96];
  int compute_major, compute_minor;
  int multiprocessors;
  size_t total_memory;
  size_t l2_bytes;
  int driver_version; /* e.g. 13000 */
  int nvrtc_version;  /* e.g. 13000; 0 if NVRTC not loaded yet */
} kvc_device_info;

/** kvc_context_device_info() : device facts (zeros/“host” on the host backend). */
KVC_API kvc_status kvc_context_device_info(kvc_context *ctx, kvc_device_info *out);

/* --- Memory helpers (usable on both backends) -------------------------------------- */

/** kvc_memory_alloc() : `bytes` of device memory (host memory on the host backend) through
 *  the context's device allocator, 256-byte aligned, contents undefined. The caller owns
 *  it and returns it with kvc_memory_free(). Synchronous; not capturable.
 *  @return KVC_ERR_DEVICE_OOM / KVC_ERR_HOST_OOM on exhaustion. bytes == 0 gives NULL. */
KVC_API kvc_status kvc_memory_alloc(kvc_context *ctx, size_t bytes, void **out);
/** kvc_memory_free() : frees memory from kvc_memory_alloc(). NULL is a no-op. */
KVC_API void kvc_memory_free(kvc_context *ctx, void *ptr);

/** kvc_host_pinned_alloc() : page-locked host memory (plain host memory on the host
 *  backend) for fast asynchronous copies, as the offload calls need. The caller owns it
 *  and frees it with kvc_host_pinned_free(). Synchronous; not capturable.
 *  @return KVC_ERR_HOST_OOM, KVC_ERR_CUDA. */
KVC_API kvc_status kvc_host_pinned_alloc(kvc_context *ctx, size_t bytes, void **out);
/** kvc_host_pinned_free() : frees memory from kvc_host_pinned_alloc(). No copy into or
 *  out of it may be pending. NULL is a no-op. */
KVC_API void kvc_host_pinned_free(kvc_context *ctx, void *ptr);

/** kvc_memcpy_h2d() / kvc_memcpy_d2h() / kvc_memcpy_d2d() : asynchronous copies on
 *  `stream`. A d2h copy into pageable memory completes before returning (driver rule);
 *  otherwise synchronize the stream before reading. Capturable for d2d only. */
KVC_API kvc_status kvc_memcpy_h2d(kvc_context *ctx, void *dst_device, const void *src_host,
                                  size_t bytes, kvc_stream stream);
KVC_API kvc_status kvc_memcpy_d2h(kvc_context *ctx, void *dst_host, const void *src_device,
                                  size_t bytes, kvc_stream stream);
KVC_API kvc_status kvc_memcpy_d2d(kvc_context *ctx, void *dst_device, const void *src_device,
                                  size_t bytes, kvc_stream stream);
/** kvc_memset_d8() : fills `bytes` bytes of device memory with `value`, on `stream`.
 *  Capturable. */
KVC_API kvc_status kvc_memset_d8(kvc_context *ctx, void *dst_device, uint8_t value, size_t bytes,
                                 kvc_stream stream);
/** kvc_stream_synchronize() : waits for all work on `stream`. The only blocking call;
 *  never used by the library itself on the scheduler path. Not capturable (it waits). */
KVC_API kvc_status kvc_stream_synchronize(kvc_context *ctx, kvc_stream stream);

/* --- Kernel compilation ------------------------------------------------------------ */

/** kvc_context_precompile() : compiles (or loads from the disk cache) the level-1 ops'
 *  kernels, whose specialisation does not depend on any pool. Pools and allocators compile
 *  their own variants at first use; call each operation once at engine start to keep
 *  NVRTC off the first scheduler step. No-op on the host backend. Synchronous; not
 *  capturable. @return KVC_ERR_NVRTC / KVC_ERR_NO_DEVICE when NVRTC fails or is missing. */
KVC_API kvc_status kvc_context_precompile(kvc_context *ctx);

/** Kernel-cache statistics (counts since context create). */
typedef struct kvc_kernel_cache_stats {
  uint64_t memory_hits;   /* lookups answered by the in-memory table */
  uint64_t disk_hits;     /* modules loaded from a cubin on disk */
  uint64_t compiles;      /* NVRTC compilations */
  uint64_t disk_rejects;  /* corrupt or mismatched disk entries ignored */
  double compile_seconds; /* wall time spent in NVRTC */
  double load_seconds;    /* wall time spent in cuModuleLoadData */
} kvc_kernel_cache_stats;

/** kvc_context_kernel_cache_stats() : copies the counters above. */
KVC_API kvc_status kvc_context_kernel_cache_stats(kvc_context *ctx, kvc_kernel_cache_stats *out);

/* --- Object handles ----------------------------------------------------------------
 * Every object is opaque and made by its own *_create call; the handles are declared
 * here, once, so that any part may name any object. */

/** A scheduler flow: binds a request pool, an allocator and a prefix cache (PART 3). */
typedef struct kvc_flow kvc_flow;
/** Streaming sessions wrapping another prefix cache (PART 4). */
typedef struct kvc_session_cache kvc_session_cache;
/** The radix prefix cache (PART 4). */
typedef struct kvc_radix_cache kvc_radix_cache;
/** Request rows and the device req_to_token table (PART 5). */
typedef struct kvc_req_to_token_pool kvc_req_to_token_pool;
/** Token (page size 1) or paged slot allocator (PART 5). */
typedef struct kvc_allocator kvc_allocator;
/** Sliding-window (SWA) allocator: a full and an SWA side paired by a mapping (PART 5). */
typedef struct kvc_swa_allocator kvc_swa_allocator;
/** Decode steps published through pinned memory for a captured kernel (PART 5). */
typedef struct kvc_decode_channel kvc_decode_channel;
/** KV storage of MHA, MLA, NSA and FP4 models (PART 5). */
typedef struct kvc_kv_pool kvc_kv_pool;
/** KV storage of a model with full and sliding-window layers (PART 5). */
typedef struct kvc_swa_kv_pool kvc_swa_kv_pool;
/** Mamba (linear-attention) recurrent states (PART 5). */
typedef struct kvc_mamba_pool kvc_mamba_pool;
/** Request rows with a Mamba slot each (PART 5). */
typedef struct kvc_hybrid_req_pool kvc_hybrid_req_pool;
/** KV storage of the full-attention layers of a hybrid model (PART 5). */
typedef struct kvc_hybrid_kv_pool kvc_hybrid_kv_pool;
/** The regions of a pool, as a transfer sees them (PART 5). */
typedef struct kvc_transfer_layout kvc_transfer_layout;
/** The copies that move some pages between two layouts (PART 5). */
typedef struct kvc_transfer_plan kvc_transfer_plan;

/** @} */ /* end of kvc_context */

/* ===================================================================================
 * PART 3 — Flows: the per-step calls of a scheduler
 * =================================================================================== */

/** @defgroup kvc_flows Flows: the per-step calls of a scheduler
 *
 * The per-step calls a scheduler makes (SGLang's common.py). Each costs at most one
 * upload and one or two kernel launches, never a readback or a synchronization. A
 * kvc_flow binds a request pool, an allocator (token/paged, or SWA), for hybrid models a
 * hybrid request pool, and a prefix cache (the built-in chunk cache, streaming sessions,
 * the radix cache, or the engine's own cache through the kvc_prefix_cache callbacks).
 * Per-request state lives in kvc_req_state, a public struct the engine embeds in its
 * request object; flows read and write it. Flows are not graph-capturable.
 * Single writer: one thread drives a flow and the objects it binds.
 * @{ */

#define KVC_REQ_CHUNKED 0x1u           /* chunked prefill in progress (row reused) */
#define KVC_REQ_SKIP_CACHE_INSERT 0x2u /* do not insert into the prefix cache at release */

/** Per-request state (SGLang Req fields the flows use). Zero-initialise, then set
 *  seq_len / prefix_len / prefix_slots before each step. Lengths are tokens. */
typedef struct kvc_req_state {
  int32_t req_row;        /* request-to-token row, 0 = none (SGLang req_pool_idx None) */
  int32_t mamba_slot;     /* Mamba state slot, 0 = none */
  int32_t mamba_track[2]; /* ping-pong track slots (hybrid pool with tracking), 0 = none */
  uint32_t flags;         /* KVC_REQ_* */
  int32_t pad_;
  int64_t seq_len;             /* tokens after the step being allocated */
  int64_t prefix_len;          /* tokens whose KV exists at the start of an extend step */
  const int64_t *prefix_slots; /* host slots of a prefix-cache match to write into the row,
                                  or NULL when the row already holds the prefix */
  int64_t kv_committed_len;    /* tokens whose KV is final (flows set it = allocated) */
  int64_t kv_allocated_len;    /* tokens with KV slots in the row */
  int64_t cache_protected_len; /* page-aligned prefix owned by the prefix cache */
  int64_t swa_evict_floor;     /* SWA: window eviction never frees below this (a PURE SWA
                                  radix cache caches up to it); must not rise past
                                  swa_evicted_seqlen once eviction started */
  int64_t swa_evicted_seqlen;  /* SWA: tokens whose SWA KV is already freed */
  uint64_t session_id;         /* streaming session, 0 = none */
  void *cache_node;            /* prefix-cache handle of the matched node */
  /* Tokens the state in mamba_track[k] covers (SGLang mamba_last/prev_track_seqlen), 0 =
   * none; the engine sets them when it checkpoints (kvc_mamba_radix_cache). */
  int64_t mamba_track_seqlen[2];
  uint64_t reserved_[2];
} kvc_req_state;

/** The prefix-cache interface the flows call (SGLang BasePrefixCache subset). Implement it
 *  for a radix cache; kvc_chunk_cache() returns the built-in no-reuse cache. Callbacks may
 *  call kvc_flow_free_slots / kvc_flow_row_slots on the flow they are given. NULL
 *  callbacks mean: is_chunk_cache 0, supports_mamba 0, evict no-op, sizes 0,
 *  cache_finished_req frees [0, committed), cache_unfinished_req no-op. */
typedef struct kvc_prefix_cache {
  void *self;
  int (*is_chunk_cache)(void *self);
  int (*supports_mamba)(void *self);
  /* Free up to the given numbers of full tokens, SWA tokens and Mamba slots. */
  kvc_status (*evict)(void *self, kvc_flow *flow, int64_t num_tokens, int64_t swa_num_tokens,
                      int64_t mamba_num);
  int64_t (*evictable_size)(void *self);
  int64_t (*protected_size)(void *self);
  /* Tokens whose KV the cache holds (for conservation: free + held + cached = size). */
  int64_t (*cached_size)(void *self);
  /* Take ownership of [0, kv_committed_len) of a finished request (insert or free). May
   * clear req->req_row to keep the whole row (streaming sessions). */
  kvc_status (*cache_finished_req)(void *self, kvc_flow *flow, kvc_req_state *req, int is_insert);
  /* Between chunks of a chunked prefill. */
  kvc_status (*cache_unfinished_req)(void *self, kvc_flow *flow, kvc_req_state *req);
  void (*inc_lock_ref)(void *self, void *node);
  void (*dec_lock_ref)(void *self, void *node);
} kvc_prefix_cache;

/** kvc_flow_create()'s arguments: the objects a flow drives (all borrowed) and the
 *  scheduler settings SGLang reads from server_args. Fill with KVC_FLOW_CONFIG_INIT. */
typedef struct kvc_flow_config {
  size_t struct_size;
  uint32_t version;
  int32_t page_size;                    /* must equal the allocator's */
  kvc_req_to_token_pool *req_pool;      /* required (hybrid models: the hybrid pool's) */
  kvc_allocator *allocator;             /* the token/paged allocator; NULL with swa_allocator */
  kvc_swa_allocator *swa_allocator;     /* SWA models, instead of allocator: window eviction
                                       (sliding_window > 0) frees SWA pages out of window */
  kvc_hybrid_req_pool *hybrid_req_pool; /* hybrid (Mamba) models: one Mamba slot (and
                                           track slots) per request with its row */
  kvc_prefix_cache cache;               /* copied; zero = kvc_chunk_cache() */
  int32_t sliding_window;               /* SWA window in tokens, 0 = no SWA eviction */
  int32_t swa_drop_page_margin;         /* 1 = SGLang_OPT_SWA_EVICT_DROP_PAGE_MARGIN */
  int32_t spec_num_steps;               /* speculative decoding: steps (0 = off) */
  int32_t spec_topk;                    /* eagle top-k (0 = 1) */
  int32_t spec_num_draft_tokens;        /* max draft tokens (0 = none) */
  int32_t spec_keeps_draft_kv;          /* 1 when the algorithm keeps draft KV */
  uint64_t reserved_[6];
} kvc_flow_config;

/** The defaults: page size 1, no objects (set req_pool and one allocator), the chunk
 *  cache, no sliding window, no speculative decoding. */
/* clang-format off */
#define KVC_FLOW_CONFIG_INIT \
  { sizeof(kvc_flow_config), KVC_VERSION_NUMBER, 1, NULL, NULL, NULL, NULL, {0}, 0, 0, 0, 0, 0, 0, {0} }
/* clang-format on */

/** kvc_flow_create() : binds the objects (not owned: destroy them after the flow), with
 *  KVC_CONTEXT_CANARY canary mode on the context's last KV pool. Host memory only; not
 *  capturable (canary mode fills the pool and synchronizes).
 *  @return KVC_ERR_INVALID_ARGUMENT for a missing req_pool, neither or both allocators, a
 *  page size that is not the allocator's, a sliding window without an SWA allocator, a
 *  hybrid pool over another req_pool or negative settings; KVC_ERR_VERSION,
 *  KVC_ERR_HOST_OOM. */
KVC_API kvc_status kvc_flow_create(kvc_context *ctx, const kvc_flow_config *config, kvc_flow **out);
/** kvc_flow_destroy() : frees the flow's scratch; the bound objects are not touched.
 *  NULL is a no-op. */
KVC_API void kvc_flow_destroy(kvc_flow *flow);

/** kvc_flow_alloc_for_extend() : SGLang alloc_for_extend for n requests: SWA window
 *  eviction (when configured), request rows (kept for requests that hold one), eviction
 *  from the prefix cache, then KV slots and the req_to_token rows (prefix from
 *  prefix_slots + the new slots) in one launch. out_cache_loc (device int64, sum of
 *  seq_len - prefix_len entries) receives the new slots in request order. Sets
 *  kv_allocated_len = kv_committed_len = seq_len on success.
 *  Not capturable.
 *  @return KVC_ERR_OUT_OF_SLOTS (rows taken by this call are given back, nothing else
 *  changed; the message carries the available/evictable figures), argument errors,
 *  KVC_ERR_MISUSE for a request listed twice or a row not held, found before any
 *  eviction (nothing changed). */
KVC_API kvc_status kvc_flow_alloc_for_extend(kvc_flow *flow, kvc_req_state *const *reqs, size_t n,
                                             int64_t *out_cache_loc, kvc_stream stream);

/** kvc_flow_alloc_for_decode() : SGLang alloc_for_decode: token_per_req new tokens per
 *  request (1: the decode kernel; more: the extend path, since SGLang's decode kernel
 *  assumes one), one launch. seq_len is the row length before the step; on success
 *  seq_len, kv_allocated_len and kv_committed_len advance by token_per_req.
 *  Encoder-decoder models: the row holds [encoder tokens | decoder tokens], so count the
 *  encoder tokens in seq_len; the new token's position is then SGLang's encoder_lens +
 *  seq_lens, and last_loc is the slot before it (SGLang reads position seq_lens - 1,
 *  which lies in the encoder part — harmless only because it uses page size 1 there).
 *  Not capturable (with a decode channel the step's own writes go through the channel's
 *  captured kernel).
 *  @return KVC_ERR_MISUSE for a request listed twice or without a held row, checked for
 *  the whole batch before the window eviction (nothing changed); the errors of the
 *  allocator's alloc_decode / alloc_extend. */
KVC_API kvc_status kvc_flow_alloc_for_decode(kvc_flow *flow, kvc_req_state *const *reqs, size_t n,
                                             int32_t token_per_req, int64_t *out_cache_loc,
                                             kvc_stream stream);

/** kvc_flow_set_decode_channel() : routes the flow's decode steps of one token per request
 *  through `channel` (NULL: back to kvc_allocator_alloc_decode): kvc_flow_alloc_for_decode
 *  then publishes each step with kvc_decode_channel_alloc() instead of launching, and the
 *  channel's kernel (captured in the engine's decode graph) writes the channel's out_device
 *  and the table. Everything else the call does is unchanged. The channel must be over the
 *  flow's allocator and req_pool, and must outlive its use here. With a channel,
 *  alloc_for_decode's out_cache_loc must be NULL or the channel's out_device, and it
 *  returns KVC_ERR_BUSY (nothing changed) when the device is `depth` steps behind.
 *  Host only (no stream work; allowed during a capture). The flow does not own the channel.
 *  An SWA flow needs a channel from kvc_decode_channel_create_swa() over its SWA allocator.
 *  @return KVC_ERR_INVALID_ARGUMENT for a channel over other objects. */
KVC_API kvc_status kvc_flow_set_decode_channel(kvc_flow *flow, kvc_decode_channel *channel);

/** kvc_flow_release() : SGLang release_kv_cache for n finished requests, in one free
 *  group: the cache takes [0, committed), the over-allocated tail is freed page-aligned,
 *  the Mamba state goes back when the cache does not manage it, the request row is
 *  returned. is_insert as SGLang (ignored for requests with KVC_REQ_SKIP_CACHE_INSERT).
 *  A request with no row but a Mamba slot only returns the slot (as SGLang does); a
 *  request that holds neither (already released) is skipped.
 *  Device work (SWA / Mamba mapping updates) is enqueued on `stream`.
 *
 *  Failures. Bad input (a NULL entry, a row not held or listed twice, bad lengths, a
 *  row-less Mamba slot not held) is refused before anything is freed. A failure while
 *  releasing (HOST_OOM, CUDA, an error of the cache's callback, a slot the allocator
 *  refuses) stops the batch at the request it hits, and the free group is closed on every
 *  path: the requests before that one are completely released (req_row = 0, mamba_slot
 *  = 0, lengths 0) and the ones after it untouched. The request it hit is untouched too,
 *  unless its release has two fallible steps, the first of which cannot be undone: a
 *  hybrid request returns its Mamba state first (then mamba_slot = 0), and its KV free
 *  after that can still fail over an SWA allocator (or on a slot the allocator refuses);
 *  with a cache other than kvc_chunk_cache(), once cache_finished_req has taken
 *  [0, committed), freeing the tail or the Mamba state can fail: the request then keeps
 *  its row and the rest (kv_allocated_len lowered if the tail went) and the flow
 *  remembers that the cache took it. In canary mode a failed refill is returned after
 *  its request is completely released. In every case the request states, the allocator,
 *  the request pool and the Mamba pool agree (kvc_flow_check with the requests that
 *  still hold a row passes), and kvc_flow_release on the whole batch again, or on the
 *  requests that still hold something, finishes the job: nothing is freed twice and
 *  cache_finished_req is not called again for a request it took (release such a request
 *  again before any other flow call on it). A callback must change nothing when it fails
 *  (the chunk and session caches do). The batch is not all-or-nothing: a cache callback
 *  and a device mapping update cannot be taken back. Not capturable. */
KVC_API kvc_status kvc_flow_release(kvc_flow *flow, kvc_req_state *const *reqs, size_t n,
                                    int is_insert, kvc_stream stream);

/** kvc_flow_cache_unfinished() : between chunks of a chunked prefill (SGLang
 *  maybe_cache_unfinished_req). */
KVC_API kvc_status kvc_flow_cache_unfinished(kvc_flow *flow, kvc_req_state *req);

/** kvc_flow_evict() : SGLang evict_from_tree_cache(n): asks the cache for n tokens when
 *  fewer are available (SWA: for the deficits of each side; nothing for a chunk cache). */
KVC_API kvc_status kvc_flow_evict(kvc_flow *flow, int64_t num_tokens);

/** kvc_flow_free_swa_out_of_window() : SGLang free_swa_out_of_window_slots for one request
 *  whose KV covers pre_len tokens: frees the SWA peers of whole pages below
 *  pre_len - window (- one page margin unless swa_drop_page_margin), never below
 *  max(cache_protected_len, swa_evict_floor rounded up to a page); advances
 *  swa_evicted_seqlen. The flows call it for every request before allocating when a
 *  sliding window is configured. Device work (the mapping entries zeroed) on `stream`;
 *  not capturable.
 *  @return KVC_ERR_UNSUPPORTED without an SWA allocator,
 *  KVC_ERR_INVALID_ARGUMENT for a cache_protected_len that is not page-aligned. */
KVC_API kvc_status kvc_flow_free_swa_out_of_window(kvc_flow *flow, kvc_req_state *req,
                                                   int64_t pre_len, kvc_stream stream);

/** kvc_flow_available() : free tokens of the allocator (SWA: min of both sides);
 *  evictable / protected / cached sizes of the cache (any pointer may be NULL). */
KVC_API kvc_status kvc_flow_available(const kvc_flow *flow, int64_t *available, int64_t *evictable,
                                      int64_t *protected_size, int64_t *cached);

/** kvc_flow_free_slots() : frees host slots through the flow's allocator (for prefix-cache
 *  callbacks; SWA: both sides), on the stream of the flow call in progress. */
KVC_API kvc_status kvc_flow_free_slots(kvc_flow *flow, const int64_t *slots, size_t n);
/** kvc_flow_row_slots() : copies row[start:end) of the request-to-token mirror as int64. */
KVC_API kvc_status kvc_flow_row_slots(const kvc_flow *flow, int32_t row, int64_t start, int64_t end,
                                      int64_t *out);

/** kvc_flow_alloc_len_per_decode() : SGLang get_alloc_len_per_decode (1 without
 *  speculative decoding); kvc_flow_extra_context_len(): the req_to_token row headroom
 *  (SGLang get_req_to_token_extra_context_len). */
KVC_API int64_t kvc_flow_alloc_len_per_decode(const kvc_flow *flow);
KVC_API int64_t kvc_flow_extra_context_len(const kvc_flow *flow);

/** @} */ /* end of kvc_flows */

/* ===================================================================================
 * PART 4 — Prefix caches: chunk cache, streaming sessions, radix cache
 * =================================================================================== */

/** @defgroup kvc_prefix_caches Prefix caches: chunk cache, streaming sessions, radix cache
 * @{ */

/** kvc_chunk_cache() : the built-in prefix cache without reuse (SGLang ChunkCache). */
KVC_API kvc_prefix_cache kvc_chunk_cache(void);

/* --- Streaming sessions (SGLang SessionAwareCache) ----------------------------------- */

/** @defgroup kvc_session_cache Streaming sessions (SGLang SessionAwareCache)
 * @{ */

/** kvc_session_cache_create() : wraps `inner` (copied). Requests with session_id != 0 keep
 *  their KV (row, slots, Mamba slot) between turns instead of going through `inner`.
 *  Host memory only. @return KVC_ERR_HOST_OOM. */
KVC_API kvc_status kvc_session_cache_create(kvc_context *ctx, const kvc_prefix_cache *inner,
                                            kvc_session_cache **out);
/** kvc_session_cache_destroy() : frees the session table without releasing held KV
 *  (release sessions first, or clear the pools). NULL is a no-op. */
KVC_API void kvc_session_cache_destroy(kvc_session_cache *sessions);
/** kvc_session_cache_as_prefix_cache() : the kvc_prefix_cache to give to a flow. */
KVC_API kvc_prefix_cache kvc_session_cache_as_prefix_cache(kvc_session_cache *sessions);
/** kvc_session_cache_match() : SGLang match_prefix for a streaming request: restores the
 *  session's row and lengths into req (idempotent: a retried chunk gets the same state)
 *  and sets prefix_len = min(committed, max(num_tokens - 1, 0)), prefix_slots = NULL (the
 *  row holds them). Returns 1 in *matched when the session held KV, else 0 (use the
 *  inner cache). */
KVC_API kvc_status kvc_session_cache_match(kvc_session_cache *sessions, kvc_req_state *req,
                                           int64_t num_tokens, int *matched);
/** kvc_session_cache_release() : ends a session: frees its slots above
 *  cache_protected_len, its row, and its Mamba slot (SGLang forgets the latter), through
 *  `flow` (its allocator and pools, on the stream of the flow's last call).
 *  @return KVC_ERR_INVALID_ARGUMENT for a session that holds nothing, the errors of the
 *  frees. */
KVC_API kvc_status kvc_session_cache_release(kvc_session_cache *sessions, kvc_flow *flow,
                                             uint64_t session_id);
/** kvc_session_cache_held() : tokens (full; SWA variant subtracts the SWA-evicted part)
 *  and requests held by sessions. Any pointer may be NULL. Time and the cache's memory
 *  are O(sessions alive now), however many were created and ended before. */
KVC_API kvc_status kvc_session_cache_held(const kvc_session_cache *sessions, int64_t page_size,
                                          int64_t *held_tokens, int64_t *held_swa_tokens,
                                          int64_t *held_reqs);
/** kvc_session_cache_reset() : drops every session without freeing (pools being cleared). */
KVC_API void kvc_session_cache_reset(kvc_session_cache *sessions);

/** @} */ /* end of kvc_session_cache */

/* --- Radix prefix cache (SGLang RadixCache) ------------------------------------------ */

/** @defgroup kvc_radix_cache Radix prefix cache (SGLang RadixCache)
 *
 * A radix tree over token ids that keeps the KV slots of finished (and chunked) requests
 * for reuse by later requests sharing a prefix, as SGLang's mem_cache/radix_cache.py does.
 * Everything is on the host: the values are host slot ids, nothing reads or writes the
 * device except through the flow calls it is used from (the match is written into the
 * request row by kvc_flow_alloc_for_extend in its one launch). No call does stream work,
 * so every call is allowed during a CUDA graph capture, with one exception:
 * cache_unfinished_req rewrites a row range with one launch when the request's chunk
 * duplicated tokens another request cached meanwhile. Single writer, like the flows.
 *
 * Keys: int32 token ids plus a 64-bit namespace (the engine's id for SGLang's extra_key /
 * cache_salt; 0 = none). Requests in different namespaces never share a node, not even at
 * the root. With page_size > 1 keys are matched and stored in whole pages (children are
 * indexed by their first page), a request's match key is its tokens minus the last one
 * floored to a page, exactly as SGLang.
 *
 * Ownership: slots given to the tree (insert, cache_finished_req, cache_unfinished_req)
 * belong to it until eviction frees them through kvc_flow_free_slots (or the config's
 * free_slots hook when a call gets no flow). Conservation: free + held by live requests +
 * kvc_radix_cache_sizes' cached == capacity, which kvc_flow_check verifies for a flow using
 * the cache. Node handles (void *, stored in kvc_req_state.cache_node) are generation
 * checked: a handle of another cache, of an evicted node or from before a reset is refused.
 * Every failed call returns a status with a message and changes nothing.
 * @{ */

/** Eviction policies (SGLang evict_policy.py), all over a logical clock. */
typedef enum kvc_radix_policy {
  KVC_RADIX_LRU = 0,      /* oldest last access first (default) */
  KVC_RADIX_LFU = 1,      /* fewest hits, then LRU */
  KVC_RADIX_FIFO = 2,     /* oldest creation first */
  KVC_RADIX_MRU = 3,      /* newest last access first */
  KVC_RADIX_FILO = 4,     /* newest creation first */
  KVC_RADIX_PRIORITY = 5, /* lowest priority, then LRU */
  KVC_RADIX_SLRU = 6      /* probationary (hits < threshold) before protected, then LRU */
} kvc_radix_policy;

/** What the cache needs of a request beyond kvc_req_state (SGLang Req.fill_ids, extra_key,
 *  priority, cache_inserted_len). The engine owns it and keeps it next to its
 *  kvc_req_state; the config's req_of callback finds it. */
typedef struct kvc_radix_req {
  const int32_t *tokens; /* prompt + output tokens so far (SGLang fill_ids), engine-owned */
  int64_t num_tokens;
  int64_t prompt_len; /* prompt tokens: a finished request's prompt is split off so
                            its outputs can be evicted first (priority + 1) */
  uint64_t ns;        /* namespace, 0 = none */
  int32_t priority;   /* SGLang request priority (the priority policy) */
  int32_t reserved_i32_;
  int64_t inserted_len; /* SGLang cache_inserted_len: zero-initialise; the cache updates it */
  int64_t *prefix_buf;  /* optional, >= num_tokens entries: where a match that cannot be
                            returned without a copy is copied (NULL: the cache's scratch,
                            valid until the next call on the cache) */
  uint64_t swa_lock;    /* kvc_swa_radix_cache: the request's SWA lock receipt (0 = none);
                            zero-initialise, the cache sets and clears it */
  int64_t mamba_branching_len; /* kvc_mamba_radix_cache_match_req: SGLang mamba_branching_seqlen,
                                  the full-attention hit floored to pages when it is past the
                                  Mamba hit, else 0 (stop a chunk there and cache it) */
} kvc_radix_req;

/** KV events (SGLang / vLLM BlockStored, BlockRemoved, AllBlocksCleared). */
typedef enum kvc_radix_event_kind {
  KVC_RADIX_BLOCK_STORED = 1,
  KVC_RADIX_BLOCK_REMOVED = 2,
  KVC_RADIX_ALL_BLOCKS_CLEARED = 3
} kvc_radix_event_kind;

/** One KV event. Which fields are set depends on `kind`, as marked; the pointers are
 *  valid only during the callback. */
/** Which component of the blocks an event is about (SGLang's unified cache components). */
typedef enum kvc_radix_component {
  KVC_RADIX_COMPONENT_ALL = 0,  /* the blocks themselves: every component (a plain radix
                                  cache's events, and a node stored or deleted whole) */
  KVC_RADIX_COMPONENT_SWA = 2,  /* REMOVED only: the SWA side of the blocks is gone (an SWA
                                  tombstone), their full-attention KV stays cached */
  KVC_RADIX_COMPONENT_MAMBA = 3 /* REMOVED only: the Mamba state at the end of the blocks is
                                   gone (kvc_mamba_radix_cache), their KV stays cached */
} kvc_radix_component;

typedef struct kvc_radix_event {
  kvc_radix_event_kind kind;
  int32_t block_size;           /* page size */
  int32_t has_parent;           /* STORED: 0 for the first page of a root child */
  int32_t component;            /* kvc_radix_component */
  uint64_t parent_hash;         /* STORED: hash of the previous page */
  uint64_t block_hash;          /* STORED: hash of this page */
  const int32_t *token_ids;     /* STORED: the page's tokens (block_size of them) */
  const uint64_t *block_hashes; /* REMOVED: every page hash of the evicted node */
  size_t num_hashes;
  uint64_t ns; /* namespace of the node */
} kvc_radix_event;

/** Receives each event during the call that causes it; the pointers are valid only then.
 *  Must not call back into the cache. */
typedef void (*kvc_radix_event_fn)(void *user, const kvc_radix_event *event);
/** Block hash of a page: chains from `parent` (has_parent 0: the first page of a root child,
 *  seeded by the namespace ns instead). Returns KVC_OK and *out. */
typedef kvc_status (*kvc_radix_hash_fn)(void *user, uint64_t parent, int has_parent, uint64_t ns,
                                        const int32_t *tokens, int64_t n, uint64_t *out);
/** Finds the kvc_radix_req of a request the flows pass to the cache (NULL: refused). */
typedef kvc_radix_req *(*kvc_radix_req_fn)(void *user, const kvc_req_state *req);
/** Frees slots when a cache call gets no flow (standalone use); NULL = such calls refuse
 *  to free. */
typedef kvc_status (*kvc_radix_free_fn)(void *user, const int64_t *slots, size_t n);

/** kvc_radix_cache_create()'s arguments. Fill with KVC_RADIX_CACHE_CONFIG_INIT, then set
 *  at least num_slots and req_of. */
typedef struct kvc_radix_cache_config {
  size_t struct_size;
  uint32_t version;
  int32_t page_size;       /* >= 1; the flow's */
  kvc_radix_policy policy; /* default LRU */
  int32_t slru_threshold;  /* SLRU protected hit count, 0 = 2 (SGLang's default) */
  int64_t num_slots;       /* the allocator's size (kvc_allocator_size): slot ids are in
                                 [1, num_slots + page_size - 1] (a paged allocator's pages
                                 1 .. num_slots / page_size) */
  kvc_radix_req_fn req_of; /* required for the request-level calls */
  void *req_user;
  kvc_radix_free_fn free_slots; /* optional, see above */
  void *free_user;
  kvc_radix_event_fn on_event; /* optional; NULL = no events, no hashing, no cost */
  void *event_user;
  kvc_radix_hash_fn block_hash; /* optional; NULL = kvc_radix_block_hash_xxh3 */
  void *hash_user;
  uint64_t reserved_[8];
} kvc_radix_cache_config;

/** The defaults: page size 1, LRU, no callbacks, no events. */
/* clang-format off */
#define KVC_RADIX_CACHE_CONFIG_INIT \
  { sizeof(kvc_radix_cache_config), KVC_VERSION_NUMBER, 1, KVC_RADIX_LRU, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, {0} }
/* clang-format on */

/** kvc_radix_cache_create() : an empty tree. Copies the config.
 *  @return KVC_ERR_INVALID_ARGUMENT (page_size < 1, num_slots < 1, unknown policy),
 *  KVC_ERR_VERSION, KVC_ERR_UNSUPPORTED for events without a hash function when the
 *  library was built without xxhash.h, KVC_ERR_HOST_OOM. */
KVC_API kvc_status kvc_radix_cache_create(kvc_context *ctx, const kvc_radix_cache_config *config,
                                          kvc_radix_cache **out);
/** kvc_radix_cache_destroy() : frees the tree's host memory; the cached slots are NOT given
 *  back (reset the allocator, or evict everything first). NULL is a no-op. */
KVC_API void kvc_radix_cache_destroy(kvc_radix_cache *cache);
/** kvc_radix_cache_as_prefix_cache() : the kvc_prefix_cache to give to a flow (or to
 *  kvc_session_cache_create): release calls cache_finished_req, kvc_flow_cache_unfinished
 *  calls cache_unfinished_req, kvc_flow_evict and allocation under pressure evict. */
KVC_API kvc_prefix_cache kvc_radix_cache_as_prefix_cache(kvc_radix_cache *cache);

/** A match: `len` tokens are cached; `slots` their slot ids (len entries), pointing into the
 *  tree when `copied` is 0 (valid while `node` exists: lock it), else into the buffer named
 *  by the call (valid until that buffer is reused). */
typedef struct kvc_radix_match {
  int64_t len;
  const int64_t *slots;
  void *node; /* last matched node (the root when len is 0) */
  int32_t copied;
  int32_t reserved_i32_;
} kvc_radix_match;

/** kvc_radix_cache_match_prefix() : SGLang match_prefix of tokens[0:n) (floored to whole
 *  pages; apply SGLang's len - 1 limit before calling) in namespace ns: splits a node the
 *  match ends inside and stamps the access time of the root and every node entered. No
 *  lock is taken. Copies (when needed) go to the cache's scratch. */
KVC_API kvc_status kvc_radix_cache_match_prefix(kvc_radix_cache *cache, uint64_t ns,
                                                const int32_t *tokens, int64_t n,
                                                kvc_radix_match *out);
/** kvc_radix_cache_match_req() : the scheduler's match + admission for a new request (no
 *  row yet, cache_node NULL): matches the request's tokens with SGLang's limit
 *  (num_tokens - 1, floored to pages), then sets req->prefix_len = cache_protected_len =
 *  the match, req->prefix_slots (NULL for 0; copies go to rreq->prefix_buf when set),
 *  req->cache_node, and locks that node (SGLang inc_lock_ref at admission).
 *  @return KVC_ERR_MISUSE for a request already holding a row or a node. */
KVC_API kvc_status kvc_radix_cache_match_req(kvc_radix_cache *cache, kvc_req_state *req,
                                             kvc_radix_req *rreq);

/** kvc_radix_cache_insert() : SGLang insert of tokens[0:n) -> slots[0:n) (floored to whole
 *  pages) with `priority` (raised to on every node of the key's path; a node split by
 *  the insert passes it to its upper part only): existing values are never overwritten;
 *  the incoming slots of tokens already present that differ from the tree's are freed
 *  (through flow, else the free_slots hook); slots of the unaligned tail are not taken
 *  (the caller keeps them).
 *  *prefix_len (may be NULL) gets the number of tokens already present.
 *  @return KVC_ERR_INVALID_ARGUMENT for a slot outside [1, num_slots + page_size - 1] or,
 *  with page_size > 1, slots of a page that are not one allocator page (a page-aligned
 *  slot and its consecutive ones), KVC_ERR_MISUSE for an incoming new slot the tree
 *  already holds, KVC_ERR_UNSUPPORTED when a duplicate must
 *  be freed and there is neither a flow nor a hook. */
KVC_API kvc_status kvc_radix_cache_insert(kvc_radix_cache *cache, kvc_flow *flow, uint64_t ns,
                                          const int32_t *tokens, const int64_t *slots, int64_t n,
                                          int32_t priority, int64_t *prefix_len);

/** kvc_radix_cache_cache_finished_req() : SGLang cache_finished_req / release_kv_cache's
 *  checkpoint: with is_insert, the committed tokens floored to pages go into the tree
 *  (duplicates freed, the prompt split off with priority + 1), and the unaligned tail
 *  [aligned, committed) is freed; without is_insert (abort) [cache_protected_len,
 *  committed) is freed. Then the request's lock is dropped and cache_node cleared. The row
 *  itself and the over-allocated tail are the flow's (kvc_flow_release). */
KVC_API kvc_status kvc_radix_cache_cache_finished_req(kvc_radix_cache *cache, kvc_flow *flow,
                                                      kvc_req_state *req, int is_insert);
/** kvc_radix_cache_cache_unfinished_req() : SGLang cache_unfinished_req (chunked prefill):
 *  inserts the committed tokens floored to pages, frees the request's duplicates and
 *  writes the tree's slots into the row instead (kvc_req_to_token_pool_write on the
 *  stream of the flow's last call), moves the lock to the new last node, and sets
 *  cache_protected_len, prefix_len = kv_committed_len, prefix_slots = NULL. */
KVC_API kvc_status kvc_radix_cache_cache_unfinished_req(kvc_radix_cache *cache, kvc_flow *flow,
                                                        kvc_req_state *req);

/** kvc_radix_cache_lock() / _unlock() : SGLang inc_lock_ref / dec_lock_ref of a node and its
 *  ancestors (NULL = root: nothing). Moves tokens between evictable and protected.
 *  @return KVC_ERR_INVALID_ARGUMENT for a stale or foreign handle, KVC_ERR_MISUSE for an
 *  unlock below zero. */
KVC_API kvc_status kvc_radix_cache_lock(kvc_radix_cache *cache, void *node);
KVC_API kvc_status kvc_radix_cache_unlock(kvc_radix_cache *cache, void *node);

/** kvc_radix_cache_evict() : SGLang evict(num_tokens): evicts whole unlocked leaves in the
 *  policy's order (parents become candidates as they become leaves) until at least
 *  num_tokens are freed or nothing is evictable; each victim's slots are freed through flow
 *  (else the free_slots hook) in victim order. A bound cache (kvc_radix_cache_bind_allocator)
 *  frees them into its allocator in one pass, through flow when given (which must run on
 *  that allocator), else directly; the hook is not used for evictions then. *evicted (may
 *  be NULL) gets the count. A victim whose free is refused stays cached (its free changed
 *  nothing); the victims before it stay evicted.
 *  @return KVC_ERR_OUT_OF_SLOTS when num_tokens > 0 and nothing is evictable (everything
 *  locked or empty; nothing changed), KVC_ERR_UNSUPPORTED without flow or hook (unbound),
 *  KVC_ERR_MISUSE for a refused free (a slot freed behind the cache's back) or, bound, a
 *  flow over another allocator (nothing changed). */
KVC_API kvc_status kvc_radix_cache_evict(kvc_radix_cache *cache, kvc_flow *flow, int64_t num_tokens,
                                         int64_t *evicted);

/** kvc_radix_cache_reset() : SGLang reset: drops every node WITHOUT freeing slots (the
 *  pools are being cleared), emits AllBlocksCleared. Every old handle becomes stale. */
KVC_API kvc_status kvc_radix_cache_reset(kvc_radix_cache *cache);

/** kvc_radix_cache_bind_allocator() : keeps the cache's "held by the cache" marks in alloc's
 *  own per-slot state instead of in an array of the cache's, so that an eviction reads and
 *  writes one byte per freed slot instead of two (at page 1 the marks were a third of a
 *  large eviction's time). Optional; for a page-1 cache over a TOKEN allocator of exactly
 *  num_slots slots, on the same context, both empty of cached tokens. Unbound is the
 *  default and stays valid for everything.
 *
 *  Once bound: inserts (and the checkpoints) accept only slots that alloc holds (handed out,
 *  not cached, not freed inside an open free group), and mark them; every free of alloc
 *  other than this cache's eviction (kvc_allocator_free, free_segment, free groups,
 *  kvc_allocator_check_free, kvc_flow_free_slots, the flows' releases) refuses a cached
 *  slot with KVC_ERR_MISUSE, changing nothing, so a slot the cache holds can no longer be
 *  freed behind its back; kvc_allocator_clear refuses while the cache holds slots (reset the
 *  cache first) and kvc_allocator_restore_state refuses when a slot handed out since the
 *  backup is cached. Evictions free in one pass over the victims' slots (see
 *  kvc_radix_cache_evict); victims, their order and the allocator's free order are exactly
 *  the unbound cache's. kvc_radix_cache_reset and kvc_radix_cache_destroy clear the marks
 *  (the slots stay handed out, as unbound).
 *
 *  alloc == NULL unbinds an empty cache. Ownership: alloc is not owned; it must outlive the
 *  binding (destroy or unbind the cache first). Host only: no stream, no device work, safe
 *  during graph capture.
 *  @return KVC_ERR_INVALID_ARGUMENT (alloc not a live allocator, another context, page_size
 *  != 1, a PAGED allocator, alloc's size != num_slots), KVC_ERR_MISUSE (the cache holds
 *  tokens, the cache or alloc is bound already). Nothing changes on failure. */
KVC_API kvc_status kvc_radix_cache_bind_allocator(kvc_radix_cache *cache, kvc_allocator *alloc);

/** kvc_radix_cache_sizes() : evictable, protected (locked) and cached tokens (any pointer
 *  may be NULL); evictable + protected == cached. */
KVC_API kvc_status kvc_radix_cache_sizes(const kvc_radix_cache *cache, int64_t *evictable,
                                         int64_t *protected_size, int64_t *cached);

/** Counters of kvc_radix_cache_stats(). */
typedef struct kvc_radix_stats {
  int64_t nodes;  /* excluding the root */
  int64_t leaves; /* evictable leaves (unlocked, childless) */
  int64_t cached_tokens;
  int64_t bytes; /* host bytes held by the tree (every array at its capacity) */
  int64_t reserved_[4];
} kvc_radix_stats;
/** kvc_radix_cache_stats() : node count and host bytes. */
KVC_API kvc_status kvc_radix_cache_stats(const kvc_radix_cache *cache, kvc_radix_stats *out);

/** kvc_radix_cache_dump() : SGLang pretty_print: one line per node, indented by depth
 *  (length, lock, hits, priority, first tokens), into buf (NUL-terminated, truncated to
 *  cap). *needed (may be NULL) gets the full length + 1. */
KVC_API kvc_status kvc_radix_cache_dump(const kvc_radix_cache *cache, char *buf, size_t cap,
                                        size_t *needed);

/** kvc_radix_block_hash_xxh3() : the default block hash: XXH3-64 of the page's tokens
 *  seeded with the parent hash (or the namespace for a root child's first page).
 *  @return KVC_ERR_UNSUPPORTED when the library was built without xxhash.h. */
KVC_API kvc_status kvc_radix_block_hash_xxh3(void *user, uint64_t parent, int has_parent,
                                             uint64_t ns, const int32_t *tokens, int64_t n,
                                             uint64_t *out);

/** @} */ /* end of kvc_radix_cache */

/* --- SWA radix prefix cache (SGLang unified cache, SWA component) ---------------------- */

/** @defgroup kvc_swa_radix_cache SWA radix prefix cache (SGLang SWAComponent / SWARadixCache)
 *
 * The radix cache for models with sliding-window attention layers, driven through a flow
 * with a kvc_swa_allocator of any kind: its pool mode (the rules below), KVC_SWA_PURE or
 * ring mode (config.kind: see kvc_swa_radix_kind for what caching means there). It is
 * the radix tree above (same keys, namespaces, pages, full slots, full locks, policies
 * for the full eviction, events, handles) with an SWA component on every node: the node's
 * SWA side is live, or the node is a tombstone (its full slots cached, their SWA peers
 * released). The tree stores full slot ids; a slot's SWA peer is the allocator's
 * full->SWA mapping.
 *
 * Rules (SGLang 0.5.23 unified_cache/components/swa.py):
 *   - Match: the result ends at the deepest node of the matched path where the live SWA
 *     tokens since the last tombstone reach sliding_window; a path with no tombstone is
 *     valid at every node. The walk splits as kvc_radix_cache_match_prefix; it stamps
 *     the path from the root down to the valid end with increasing access ticks (the
 *     nodes past it keep theirs; the lower part of a node split at the end is stamped
 *     after its new upper part), so on a path a node is always more recently used than
 *     its parent, as in SGLang's LRU lists: SWA eviction tombstones the nodes nearest the
 *     root first.
 *   - Insert: the part of the new leaf below the request's swa_evicted_seqlen (its SWA
 *     KV already freed by window eviction) becomes a tombstone node; its live part is
 *     capped at one page-aligned window (split: an SWA lock then pins one window; the
 *     leaf stays the more recently used part). The walk stamps the path going down with
 *     increasing ticks, the new leaf last.
 *   - Locks: FULL locks the node and every ancestor; SWA only the nodes covering the last
 *     sliding_window tokens. The SWA part comes back as a receipt (kvc_radix_req.swa_lock
 *     for requests) and can be released early (kvc_swa_radix_cache_unlock_swa).
 *   - Eviction, per component with its own sizes: FULL evicts unlocked leaves in the
 *     policy's order (their SWA side goes with them), each victim's childless unlocked
 *     tombstone ancestors deleted with it and counted (no leaf is left a tombstone);
 *     SWA takes SWA-unlocked live nodes in LRU order (a separate SWA LRU, cost
 *     proportional to the victims): an inner or full-locked node becomes a tombstone
 *     (SWA side released through the allocator's window free), an unlocked leaf is
 *     deleted, and so are its childless unlocked tombstone ancestors.
 * Conservation, per component: full free + held by requests + cached == full capacity;
 * SWA free + held + swa_cached == SWA capacity (kvc_swa_radix_cache_sizes).
 * Chunked prefill and revival: kvc_swa_radix_cache_cache_unfinished_req checkpoints a
 * request between chunks (SGLang checkpoint_kv_cache). An insert of a request's row
 * revives the tombstones it overlaps where the request's own slots are SWA-live (past its
 * swa_evicted_seqlen and its cache_protected_len) and the node is not locked: the node
 * takes the incoming slots and its old full slots are freed (full side only); the other
 * overlapped slots are duplicates, freed as usual (below swa_evicted_seqlen that releases
 * only their full side). kvc_swa_radix_cache_insert revives the same way from its slots
 * (from 0, past its swa_evicted_seqlen).
 * KV events (config.radix.on_event): BlockStored for every new node's blocks, BlockRemoved
 * with component KVC_RADIX_COMPONENT_SWA when blocks become tombstones (evicted, or
 * inserted past the window), BlockRemoved with component ALL when a node is deleted.
 * No call does stream work of its own (the frees are the allocator's, with its stream
 * rules; evict's deferred zero below); single writer; a failed call changes nothing,
 * except a free during eviction that the flow reports (the victims before it stay
 * evicted) and evict's deferred device-mapping zero (see kvc_swa_radix_cache_evict).
 * @{ */

typedef struct kvc_swa_radix_cache kvc_swa_radix_cache;

/** Which kind of kvc_swa_allocator the cache serves (kvc_swa_radix_cache_config.kind).
 *  What caching means with each (SGLang 0.5.23):
 *   - HYBRID: the allocator's pool mode (full and SWA pools): tombstones, window-valid
 *     matches, SWA locks, SWA eviction, all the rules above.
 *   - PURE (KVC_SWA_PURE: every layer SWA, one pool; SGLang PureSWARadixCache, a plain
 *     RadixCache): no tombstones, no window rule, no SWA locks; evict frees
 *     max(num_tokens, swa_num_tokens) tokens of leaves; a finished request caches its
 *     committed tokens capped at swa_evict_floor (when > 0) and never past where window
 *     eviction started freeing its slots, with the prompt split off as the radix cache
 *     does; the full_* and swa_* sizes are the same numbers (one pool); insert refuses a
 *     swa_evicted_seqlen other than 0 (those slots are gone).
 *   - RING (ring_size > 0: per-request SWA rings that die with their row; SGLang's
 *     swa_gates_prefix_match off): the tree caches full-attention KV only. A match is not
 *     gated by SWA (valid at every node), kvc_swa_radix_cache_match_req caps the request's
 *     key at num_tokens - sliding_window so the window is re-prefilled (SGLang's
 *     swa_reprefill_tail_tokens: a reused window would read another request's ring), no
 *     tombstones, no SWA locks, swa_* sizes 0 (no SWA capacity is the tree's), and SWA
 *     eviction frees nothing (KVC_ERR_OUT_OF_SLOTS when only SWA tokens are asked for). */
typedef enum kvc_swa_radix_kind {
  KVC_SWA_RADIX_HYBRID = 0,
  KVC_SWA_RADIX_PURE = 1,
  KVC_SWA_RADIX_RING = 2
} kvc_swa_radix_kind;

/** kvc_swa_radix_cache_create()'s arguments. Fill with KVC_SWA_RADIX_CACHE_CONFIG_INIT. */
typedef struct kvc_swa_radix_cache_config {
  size_t struct_size;
  uint32_t version;
  int32_t sliding_window;           /* tokens, >= 1: the flow's sliding_window */
  kvc_radix_cache_config radix;     /* the tree and its FULL component (num_slots: the
                                   allocator's full size) */
  kvc_radix_free_fn free_swa_slots; /* standalone use (no flow): releases the SWA side of
                                       full slots; NULL = SWA eviction needs a flow */
  void *free_swa_user;
  int32_t kind;   /* kvc_swa_radix_kind, 0 = HYBRID; must match the flow's allocator (calls
                   given a flow over another kind return KVC_ERR_INVALID_ARGUMENT) */
  uint32_t flags; /* KVC_SWA_RADIX_* below; 0 = defaults (was reserved, always 0) */
  kvc_swa_allocator *swa_allocator; /* standalone use (hooks, no flow), may be NULL: the
                                       allocator the hooks free into; each evict call
                                       then defers its device-mapping zeroes to one
                                       launch on swa_stream at its end (see evict) */
  kvc_stream swa_stream;
  uint64_t reserved_[5];
} kvc_swa_radix_cache_config;

/** kvc_swa_radix_cache_config.flags: KVC_SWA_RADIX_EAGER_ZERO makes each HYBRID call that
 *  frees (evict, cache_finished_req, cache_unfinished_req) launch its device-mapping
 *  zeroes at its end (kvc_swa_allocator_defer_zero_end), the behaviour before session 13.
 *  Without it (the default) a call makes no launch of its own: the zeroes stay queued in
 *  the SWA allocator and ride in its next device-mapping write's launch
 *  (kvc_swa_allocator_zero_flush says when, and how to force them). */
#define KVC_SWA_RADIX_EAGER_ZERO 0x1u

/* clang-format off */
#define KVC_SWA_RADIX_CACHE_CONFIG_INIT \
  { sizeof(kvc_swa_radix_cache_config), KVC_VERSION_NUMBER, 0, KVC_RADIX_CACHE_CONFIG_INIT, NULL, NULL, 0, 0, \
    NULL, NULL, {0} }
/* clang-format on */

/** kvc_swa_radix_cache_create() : an empty tree. Copies the config.
 *  @return KVC_ERR_INVALID_ARGUMENT (sliding_window < 1, or what kvc_radix_cache_create
 *  refuses in radix), KVC_ERR_VERSION, KVC_ERR_HOST_OOM. */
KVC_API kvc_status kvc_swa_radix_cache_create(kvc_context *ctx,
                                              const kvc_swa_radix_cache_config *config,
                                              kvc_swa_radix_cache **out);
/** kvc_swa_radix_cache_destroy() : frees the host memory; cached slots are NOT given back.
 *  NULL is a no-op. */
KVC_API void kvc_swa_radix_cache_destroy(kvc_swa_radix_cache *cache);
/** kvc_swa_radix_cache_as_prefix_cache() : the kvc_prefix_cache for a flow with a
 *  kvc_swa_allocator: release calls cache_finished_req (with the request's
 *  swa_evicted_seqlen), kvc_flow_cache_unfinished calls cache_unfinished_req, allocation
 *  under pressure evicts each side's deficit. Its node-only lock callbacks (streaming
 *  sessions) take the FULL lock and (HYBRID) an SWA chain lock (every live node up to the
 *  first tombstone: releasable without a receipt). */
KVC_API kvc_prefix_cache kvc_swa_radix_cache_as_prefix_cache(kvc_swa_radix_cache *cache);

/** kvc_swa_radix_cache_match_prefix() : match of tokens[0:n) (floored to pages) with the
 *  SWA rule above: out->len / slots / node are the valid end's. No lock is taken.
 *  Copies (when needed) go to the cache's scratch. */
KVC_API kvc_status kvc_swa_radix_cache_match_prefix(kvc_swa_radix_cache *cache, uint64_t ns,
                                                    const int32_t *tokens, int64_t n,
                                                    kvc_radix_match *out);
/** kvc_swa_radix_cache_match_req() : kvc_radix_cache_match_req with the SWA rule: also
 *  takes the SWA lock of the last window, its receipt in rreq->swa_lock.
 *  A streaming-session turn (session_id != 0) gets the SWA chain lock instead (see
 *  as_prefix_cache): the session cache releases it through dec_lock_ref.
 *  @return KVC_ERR_MISUSE for a request already holding a row, a node or an SWA lock. */
KVC_API kvc_status kvc_swa_radix_cache_match_req(kvc_swa_radix_cache *cache, kvc_req_state *req,
                                                 kvc_radix_req *rreq);
/** kvc_swa_radix_cache_insert() : kvc_radix_cache_insert (priority 0) whose new leaf's
 *  part below swa_evicted_seqlen (tokens of the key whose SWA side is already released;
 *  0 = none) is a tombstone. Duplicates are freed through flow (else the free_slots hook).
 *  @return as kvc_radix_cache_insert; KVC_ERR_INVALID_ARGUMENT for a negative or
 *  page-misaligned swa_evicted_seqlen. */
KVC_API kvc_status kvc_swa_radix_cache_insert(kvc_swa_radix_cache *cache, kvc_flow *flow,
                                              uint64_t ns, const int32_t *tokens,
                                              const int64_t *slots, int64_t n,
                                              int64_t swa_evicted_seqlen, int64_t *prefix_len);
/** kvc_swa_radix_cache_cache_finished_req() : kvc_radix_cache_cache_finished_req for the
 *  SWA tree: drops the request's FULL and SWA locks (rreq->swa_lock), inserts the
 *  committed tokens floored to pages with req->swa_evicted_seqlen (no prompt split, as
 *  SGLang with an SWA component) or, without is_insert, inserts nothing; frees what the
 *  tree does not take. */
KVC_API kvc_status kvc_swa_radix_cache_cache_finished_req(kvc_swa_radix_cache *cache,
                                                          kvc_flow *flow, kvc_req_state *req,
                                                          int is_insert);

/** kvc_swa_radix_cache_cache_unfinished_req() : kvc_radix_cache_cache_unfinished_req for
 *  the SWA tree (SGLang checkpoint_kv_cache between chunks): inserts the committed tokens
 *  floored to pages (PURE: capped as for a finished request) with req->swa_evicted_seqlen
 *  (tombstones below it, revival above: see the group), re-matches the key, writes the
 *  tree's slots into the row where duplicates were, and moves the request's locks to the
 *  new node: FULL on the path, SWA on its last window (rreq->swa_lock; 0 when that window
 *  is not all live, or for PURE / RING). Sets cache_protected_len, prefix_len.
 *  @return as cache_finished_req; KVC_ERR_MISUSE for a slot of the row over a revivable
 *  tombstone that the tree already holds (nothing changed). */
KVC_API kvc_status kvc_swa_radix_cache_cache_unfinished_req(kvc_swa_radix_cache *cache,
                                                            kvc_flow *flow, kvc_req_state *req);

/** kvc_swa_radix_cache_lock() : FULL lock of node and its ancestors, SWA lock of the last
 *  window; *swa_receipt (required) gets the SWA part's receipt (0 for the root).
 *  @return KVC_ERR_INVALID_ARGUMENT for a stale or foreign handle, KVC_ERR_MISUSE when a
 *  node within the last window is a tombstone (not a valid match end). */
KVC_API kvc_status kvc_swa_radix_cache_lock(kvc_swa_radix_cache *cache, void *node,
                                            uint64_t *swa_receipt);
/** kvc_swa_radix_cache_unlock_swa() : SGLang dec_swa_lock_only: releases the SWA part
 *  early and sets *swa_receipt = 0 (a 0 receipt: nothing to do).
 *  @return KVC_ERR_MISUSE for a receipt that is not this node's, or released twice. */
KVC_API kvc_status kvc_swa_radix_cache_unlock_swa(kvc_swa_radix_cache *cache, void *node,
                                                  uint64_t *swa_receipt);
/** kvc_swa_radix_cache_unlock() : releases the FULL lock and, when swa_receipt is not 0,
 *  the SWA lock it names.
 *  @return KVC_ERR_MISUSE for an unlock below zero or a foreign receipt. */
KVC_API kvc_status kvc_swa_radix_cache_unlock(kvc_swa_radix_cache *cache, void *node,
                                              uint64_t swa_receipt);

/** kvc_swa_radix_cache_evict() : SGLang evict(full, swa): unlocked leaves in the policy's
 *  order until num_tokens full tokens are freed (each also frees its live SWA side), then
 *  SWA eviction (rules above) until swa_num_tokens SWA tokens are freed in all. Frees go
 *  through flow (else the config's hooks), in victim order. *evicted / *swa_evicted (may
 *  be NULL) get the full and SWA tokens freed.
 *  HYBRID: the call is one deferred-zero scope of the SWA allocator (flow's, else
 *  config.swa_allocator when set; kvc_swa_allocator_defer_zero_begin): its victims'
 *  frees are what they were, one by one in victim order, but the device mapping of all
 *  of them is zeroed later: by default in the launch of the allocator's next
 *  device-mapping write (the call itself launches nothing; kvc_swa_allocator_zero_flush),
 *  with KVC_SWA_RADIX_EAGER_ZERO by one launch at the call's end, on the flow's stream
 *  (else config.swa_stream). Not capturable then (the allocator's launches are not).
 *  @return KVC_ERR_OUT_OF_SLOTS when nothing is evictable for any requested component
 *  (nothing changed), KVC_ERR_UNSUPPORTED without a flow or hooks; a free's failure
 *  (the victims before it stay evicted). EAGER_ZERO: the end's launch failing returns its status
 *  (KVC_ERR_CUDA) after the victims were evicted and freed (host state final, sizes and
 *  *evicted as done): the zero stays queued in the allocator and is retried by its next
 *  device-mapping write (kvc_swa_allocator_defer_zero_end's failure rule). */
KVC_API kvc_status kvc_swa_radix_cache_evict(kvc_swa_radix_cache *cache, kvc_flow *flow,
                                             int64_t num_tokens, int64_t swa_num_tokens,
                                             int64_t *evicted, int64_t *swa_evicted);
/** kvc_swa_radix_cache_reset() : drops every node without freeing slots (as
 *  kvc_radix_cache_reset). */
KVC_API kvc_status kvc_swa_radix_cache_reset(kvc_swa_radix_cache *cache);

/** Sizes per component (tokens) from kvc_swa_radix_cache_sizes(). */
typedef struct kvc_swa_radix_sizes {
  int64_t evictable, protected_size, cached;        /* FULL: evictable + protected = cached */
  int64_t swa_evictable, swa_protected, swa_cached; /* SWA: live SWA tokens cached */
  int64_t reserved_[4];
} kvc_swa_radix_sizes;
/** kvc_swa_radix_cache_sizes() : both components' sizes. */
KVC_API kvc_status kvc_swa_radix_cache_sizes(const kvc_swa_radix_cache *cache,
                                             kvc_swa_radix_sizes *out);
/** kvc_swa_radix_cache_stats() : as kvc_radix_cache_stats. */
KVC_API kvc_status kvc_swa_radix_cache_stats(const kvc_swa_radix_cache *cache,
                                             kvc_radix_stats *out);
/** kvc_swa_radix_cache_check() : O(n) audit of both components (SWA sizes, SWA locks
 *  within FULL locks, then kvc_radix_cache_check's).
 *  @return KVC_ERR_INTERNAL with the first violation. */
KVC_API kvc_status kvc_swa_radix_cache_check(const kvc_swa_radix_cache *cache);

/** @} */ /* end of kvc_swa_radix_cache */

/* --- Mamba radix prefix cache (SGLang unified cache, Mamba component) ------------------ */

/** @defgroup kvc_mamba_radix_cache Mamba radix prefix cache (SGLang MambaComponent)
 *
 * The radix cache for hybrid models (linear-attention / Mamba layers next to
 * full-attention layers), driven through a flow with a kvc_hybrid_req_pool. It is the
 * radix tree above (same keys, namespaces, pages, full slots, full locks, policies for the
 * full eviction, events, handles) with a Mamba component: a node holds at most one
 * recurrent-state slot of the hybrid pool's kvc_mamba_pool, the state after exactly the
 * tokens from the root to the node's end.
 *
 * Rules (SGLang 0.5.23 unified_cache/components/mamba.py):
 *   - Split: the state stays with the lower node (the exact prefix it belongs to); the
 *     new upper node has none.
 *   - Match: the result ends at the deepest node of the matched path that has a state (the
 *     walk still splits and stamps as kvc_radix_cache_match_prefix); that state becomes
 *     the most recently used one. kvc_mamba_radix_cache_match_req copies it into the
 *     request's own Mamba slot with ONE launch of the Mamba pool's copy kernel (taking a
 *     slot first, kvc_mamba_pool_fork_from, when the request has none).
 *   - Insert: the donated state goes to the node ending at the key's end (the new leaf,
 *     or an existing node without a state); when that node already has one the donor
 *     keeps its slot (SGLang mamba_exist).
 *   - A finished request donates, without the hybrid pool's TRACK buffers, its running
 *     slot for its committed tokens (page size must be 1, as SGLang asserts); with them,
 *     the newest track slot whose mamba_track_seqlen fits the committed tokens, for that
 *     many tokens (KV past it is freed, SGLang's cache_len). Every other Mamba slot of
 *     the request goes back to the pool.
 *   - Locks: FULL locks the node and every ancestor; MAMBA locks the node only.
 *   - Eviction, per component with its own sizes (Mamba sizes count states): FULL evicts
 *     unlocked leaves in the policy's order, their states with them; MAMBA takes
 *     MAMBA-unlocked states in LRU order (last match, insert or attach): an unlocked
 *     childless node is deleted whole, any other node keeps its KV and loses its state.
 *     A deleted node's unlocked childless ancestors without a state go with it, their KV
 *     counted (SGLang's _iteratively_delete_tombstone_leaf: no leaf is left stateless).
 * Conservation, per component: full free + held by requests + cached == full capacity;
 * Mamba pool available + slots held by requests + mamba_cached == pool size.
 *   - Between chunks (cache_unfinished_req) a copy of the state is inserted; match_req
 *     reports SGLang's mamba_branching_seqlen (on the page grid) in
 *     kvc_radix_req.mamba_branching_len: a chunk that ends there caches a state at the
 *     point where requests branch.
 *   - mamba_max_states_per_path (config.max_states_per_path > 0): when an insert (or a
 *     request's donation or checkpoint) attaches a new state to a node, and the path from
 *     the root to that node then holds more than the cap, states are taken from the
 *     shallowest end of the path until it holds the cap: a node keeps its KV and loses its
 *     state (event component MAMBA). The node just attached to, MAMBA-locked nodes and
 *     forks (nodes with other than one child) are skipped, so the cap is a soft limit.
 * Not done here: host offload (HiCache).
 * KV events (config.radix.on_event): BlockStored for every new node's blocks, BlockRemoved
 * with component KVC_RADIX_COMPONENT_MAMBA when a node loses its state but keeps its KV,
 * BlockRemoved with component ALL when a node is deleted.
 * Stream work: match_req's one copy launch, cache_unfinished_req's one fork launch (and
 * its row write; donate_unfinished_req: a zeroing and a mapping launch instead of the
 * fork) and cache_finished_req's one mapping launch (the hybrid pool's), on the stream
 * given / the flow's; none is capturable. Single
 * writer; a failed call changes nothing, except a free during eviction that the flow
 * reports (the victims before it stay evicted) and a failed mapping launch in
 * cache_finished_req after its insert (the KV stays cached; the request keeps every Mamba
 * slot, so releasing it again finishes the job).
 * @{ */

typedef struct kvc_mamba_radix_cache kvc_mamba_radix_cache;

/** kvc_mamba_radix_cache_create()'s arguments. Fill with KVC_MAMBA_RADIX_CACHE_CONFIG_INIT. */
typedef struct kvc_mamba_radix_cache_config {
  size_t struct_size;
  uint32_t version;
  int32_t max_states_per_path;          /* SGLang mamba_max_states_per_path: > 0 caps the
                                           states on one root-to-node path after each
                                           attach (rules above); 0 = no cap (SGLang -1) */
  kvc_radix_cache_config radix;         /* the tree and its FULL component */
  kvc_hybrid_req_pool *hybrid_req_pool; /* required, borrowed: the flow's; the states are
                                           slots of its kvc_mamba_pool */
  uint64_t reserved_[8];
} kvc_mamba_radix_cache_config;

/* clang-format off */
#define KVC_MAMBA_RADIX_CACHE_CONFIG_INIT \
  { sizeof(kvc_mamba_radix_cache_config), KVC_VERSION_NUMBER, 0, KVC_RADIX_CACHE_CONFIG_INIT, NULL, {0} }
/* clang-format on */

/** kvc_mamba_radix_cache_create() : an empty tree. Copies the config (the hybrid pool is
 *  borrowed and must outlive the cache). Host memory only.
 *  @return KVC_ERR_INVALID_ARGUMENT (no hybrid pool, page_size > 1 without the pool's
 *  TRACK buffers, max_states_per_path < 0, or what kvc_radix_cache_create refuses in
 *  radix), KVC_ERR_VERSION,
 *  KVC_ERR_HOST_OOM. */
KVC_API kvc_status kvc_mamba_radix_cache_create(kvc_context *ctx,
                                                const kvc_mamba_radix_cache_config *config,
                                                kvc_mamba_radix_cache **out);
/** kvc_mamba_radix_cache_destroy() : frees the host memory; cached KV slots and Mamba
 *  states are NOT given back (reset the pools, or evict everything first). NULL is a
 *  no-op. */
KVC_API void kvc_mamba_radix_cache_destroy(kvc_mamba_radix_cache *cache);
/** kvc_mamba_radix_cache_as_prefix_cache() : the kvc_prefix_cache for a flow with the same
 *  hybrid pool: supports_mamba is 1 (release leaves the Mamba state to
 *  cache_finished_req; allocation under pressure asks for Mamba states),
 *  kvc_flow_cache_unfinished calls cache_unfinished_req, evict frees each
 *  component's deficit, the node-only lock callbacks (streaming sessions) take the FULL
 *  path lock and the node's MAMBA lock. */
KVC_API kvc_prefix_cache kvc_mamba_radix_cache_as_prefix_cache(kvc_mamba_radix_cache *cache);

/** kvc_mamba_radix_cache_match_prefix() : match of tokens[0:n) (floored to pages) with the
 *  Mamba rule above: out->len / slots / node are the deepest node with a state (the root
 *  and len 0 when there is none). *mamba_slot (may be NULL) gets that node's state slot
 *  (0 = none), *full_len (may be NULL) the tokens of the full-attention match. No lock is
 *  taken, no stream work. Copies (when needed) go to the cache's scratch. */
KVC_API kvc_status kvc_mamba_radix_cache_match_prefix(kvc_mamba_radix_cache *cache, uint64_t ns,
                                                      const int32_t *tokens, int64_t n,
                                                      kvc_radix_match *out, int32_t *mamba_slot,
                                                      int64_t *full_len);
/** kvc_mamba_radix_cache_match_req() : kvc_radix_cache_match_req with the Mamba rule: locks
 *  the match's node (FULL path, MAMBA node) and, when it has a state, copies the state
 *  into the request's Mamba slot in ONE launch on `stream`: req->mamba_slot if it holds
 *  one (a held slot of the pool, not the tree's), else a new slot (fork: alloc + copy,
 *  still one launch; when the pool is empty one unlocked state is evicted first, through
 *  flow, else the free_slots hook). A request without a match keeps req->mamba_slot as it
 *  was (the flow's row allocation gives it a zeroed slot). Not capturable.
 *  @return KVC_ERR_MISUSE for a request already holding a row or a node, or a mamba_slot
 *  not held / held by the tree; KVC_ERR_OUT_OF_SLOTS when no slot can be had; KVC_ERR_CUDA.
 *  Nothing changed on failure: the copy is launched (into the request's slot, a new slot,
 *  or the slot of the state that the eviction will take) before the walk splits, stamps or
 *  refreshes anything and before that eviction. Should the flow refuse the KV free of a
 *  whole-leaf victim after the launch, that node keeps its KV and loses only its state
 *  (logged as a warning; the match still succeeds). */
KVC_API kvc_status kvc_mamba_radix_cache_match_req(kvc_mamba_radix_cache *cache, kvc_flow *flow,
                                                   kvc_req_state *req, kvc_radix_req *rreq,
                                                   kvc_stream stream);
/** kvc_mamba_radix_cache_insert() : kvc_radix_cache_insert (priority 0) of tokens[0:n) ->
 *  slots[0:n) (floored to pages), then the state mamba_slot (> 0, held in the pool and not
 *  the tree's) for the node ending at the key's end. *mamba_taken (may be NULL) gets 1 when
 *  the tree took the slot, 0 when that node already had a state (the caller keeps the
 *  slot). With n floored to 0 nothing is inserted and the slot is not taken.
 *  @return as kvc_radix_cache_insert; KVC_ERR_MISUSE for a mamba_slot not held or already
 *  the tree's; KVC_ERR_INVALID_ARGUMENT for one outside [1, pool size]. */
KVC_API kvc_status kvc_mamba_radix_cache_insert(kvc_mamba_radix_cache *cache, kvc_flow *flow,
                                                uint64_t ns, const int32_t *tokens,
                                                const int64_t *slots, int64_t n, int32_t mamba_slot,
                                                int64_t *prefix_len, int *mamba_taken);
/** kvc_mamba_radix_cache_cache_finished_req() : kvc_radix_cache_cache_finished_req for the
 *  hybrid tree: drops the request's locks; with is_insert, inserts the tokens its donated
 *  state covers (rules above; no prompt split, as SGLang with a Mamba component) and frees
 *  the KV past them; then gives the request's other Mamba slots back (ONE mapping launch
 *  of the hybrid pool on the flow's stream) and clears req->mamba_slot / mamba_track /
 *  mamba_track_seqlen. Without is_insert (abort) it frees [cache_protected_len,
 *  committed) and every Mamba slot of the request.
 *  @return the errors of kvc_radix_cache_cache_finished_req; KVC_ERR_INVALID_ARGUMENT for
 *  a mamba_track_seqlen that is negative or not page-aligned; KVC_ERR_MISUSE for a flow
 *  over another hybrid pool. */
KVC_API kvc_status kvc_mamba_radix_cache_cache_finished_req(kvc_mamba_radix_cache *cache,
                                                            kvc_flow *flow, kvc_req_state *req,
                                                            int is_insert);

/** kvc_mamba_radix_cache_cache_unfinished_req() : SGLang cache_unfinished_req with a Mamba
 *  component (chunked prefill): a copy of the request's state (the running state without
 *  track buffers, else the newest track checkpoint within the committed tokens) goes into
 *  a new slot (ONE fork launch on the flow's stream; one unlocked state is evicted when the
 *  pool is empty), the tokens it covers are inserted with it (a node that already has a
 *  state keeps it and the copy goes back), the tree's slots are written into the row where
 *  the request's duplicates were, the lock moves to the new node, and cache_protected_len
 *  = those tokens, prefix_len = kv_committed_len. With no state past cache_protected_len
 *  to copy, only prefix_len = kv_committed_len (and prefix_slots = NULL) is set.
 *  @return as cache_finished_req; KVC_ERR_OUT_OF_SLOTS when no slot can be had. */
KVC_API kvc_status kvc_mamba_radix_cache_cache_unfinished_req(kvc_mamba_radix_cache *cache,
                                                              kvc_flow *flow, kvc_req_state *req);

/** kvc_mamba_radix_cache_donate_unfinished_req() : cache_unfinished_req with SGLang
 *  0.5.23's hand-over (donate_mamba_ping_pong_slot) instead of a copy; needs the hybrid
 *  pool's TRACK buffers. The checkpoint's track slot itself (entry k, the newest track
 *  checkpoint within the committed tokens) is inserted with the tokens it covers, and
 *  the request's entry k gets a fresh slot (kvc_mamba_pool_alloc: one zeroing launch,
 *  then the hybrid pool's mapping launch; req->mamba_track[k] is updated; one unlocked
 *  state is evicted first when the pool is empty). When the node already has a state
 *  (SGLang mamba_exist) the donated slot goes back to the pool. No state is copied. The
 *  rest is cache_unfinished_req's (row write, lock move, cache_protected_len,
 *  prefix_len). A failed call changes nothing (a failed insert puts the donated slot
 *  back into entry k with one more launch; should that launch fail too, it is logged and
 *  the request keeps the fresh slot there).
 *  @return as cache_unfinished_req; KVC_ERR_UNSUPPORTED without TRACK buffers. */
KVC_API kvc_status kvc_mamba_radix_cache_donate_unfinished_req(kvc_mamba_radix_cache *cache,
                                                               kvc_flow *flow, kvc_req_state *req);

/** kvc_mamba_radix_cache_lock() / _unlock() : FULL lock of node and its ancestors and
 *  MAMBA lock of the node (NULL = root: nothing).
 *  @return KVC_ERR_INVALID_ARGUMENT for a stale or foreign handle, KVC_ERR_MISUSE for an
 *  unlock below zero. */
KVC_API kvc_status kvc_mamba_radix_cache_lock(kvc_mamba_radix_cache *cache, void *node);
KVC_API kvc_status kvc_mamba_radix_cache_unlock(kvc_mamba_radix_cache *cache, void *node);

/** kvc_mamba_radix_cache_evict() : SGLang evict(EvictParams(num_tokens, mamba_num)):
 *  unlocked leaves in the policy's order until num_tokens full tokens are freed (each
 *  frees its state too), then MAMBA eviction (rules above) until mamba_num states are
 *  freed in all. KV frees go through flow (else the free_slots hook), states back to the
 *  Mamba pool (host only, no stream work). *evicted / *mamba_evicted (may be NULL) get the
 *  full tokens and states freed.
 *  @return KVC_ERR_OUT_OF_SLOTS when nothing is evictable for any requested component
 *  (nothing changed), KVC_ERR_UNSUPPORTED without a flow or hook (when KV must be freed). */
KVC_API kvc_status kvc_mamba_radix_cache_evict(kvc_mamba_radix_cache *cache, kvc_flow *flow,
                                               int64_t num_tokens, int64_t mamba_num,
                                               int64_t *evicted, int64_t *mamba_evicted);
/** kvc_mamba_radix_cache_reset() : drops every node without freeing KV slots or states
 *  (as kvc_radix_cache_reset: the pools are being cleared). */
KVC_API kvc_status kvc_mamba_radix_cache_reset(kvc_mamba_radix_cache *cache);

/** Sizes per component from kvc_mamba_radix_cache_sizes(). */
typedef struct kvc_mamba_radix_sizes {
  int64_t evictable, protected_size, cached;              /* FULL tokens: evictable + protected */
  int64_t mamba_evictable, mamba_protected, mamba_cached; /* MAMBA states (slots) */
  int64_t reserved_[4];
} kvc_mamba_radix_sizes;
/** kvc_mamba_radix_cache_sizes() : both components' sizes. */
KVC_API kvc_status kvc_mamba_radix_cache_sizes(const kvc_mamba_radix_cache *cache,
                                               kvc_mamba_radix_sizes *out);
/** kvc_mamba_radix_cache_node_state() : the state slot of a node (0 = none, also for the
 *  root). @return KVC_ERR_INVALID_ARGUMENT for a stale or foreign handle. */
KVC_API kvc_status kvc_mamba_radix_cache_node_state(const kvc_mamba_radix_cache *cache, void *node,
                                                    int32_t *mamba_slot);
/** kvc_mamba_radix_cache_stats() : as kvc_radix_cache_stats. */
KVC_API kvc_status kvc_mamba_radix_cache_stats(const kvc_mamba_radix_cache *cache,
                                               kvc_radix_stats *out);
/** kvc_mamba_radix_cache_check() : O(n) audit of both components (states held in the pool
 *  and owned once, MAMBA locks within FULL locks, sizes, the LRU list, then
 *  kvc_radix_cache_check's). @return KVC_ERR_INTERNAL with the first violation. */
KVC_API kvc_status kvc_mamba_radix_cache_check(const kvc_mamba_radix_cache *cache);

/** @} */ /* end of kvc_mamba_radix_cache */

/** @} */ /* end of kvc_prefix_caches */

/* ===================================================================================
 * PART 5 — Pools and allocators
 * =================================================================================== */

/** @defgroup kvc_pools Pools and allocators
 *
 * The objects that own slots, rows and device buffers. The host owns all allocation
 * metadata (free lists, page states, a mirror of every req_to_token entry the library
 * wrote). Device state (the req_to_token table, the out_cache_loc vectors) is written
 * from it with one kernel launch per call, its per-step data carried in the kernel's
 * parameters (or one async upload from pinned staging when larger). No allocation call reads device memory or synchronizes.
 * Allocation calls are NOT graph-capturable (each step's data differs); the kernels they
 * feed (attention, set_kv) read only device buffers and are. For decode, the decode
 * channel (kvc_decode_channel_*) is the capturable path: its kernel's parameters never
 * change, the step's data travels through pinned host memory.
 * Single writer per object. Slot 0 (page 0) and row 0 are padding, never handed out.
 * @{ */

/* --- Request-to-token pool (SGLang ReqToTokenPool) ----------------------------------- */

/** @defgroup kvc_req_pool Request-to-token pool (SGLang ReqToTokenPool)
 * @{ */

/** kvc_req_to_token_pool_create()'s arguments. Fill with
 *  KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT, then set both sizes. */
typedef struct kvc_req_to_token_pool_config {
  size_t struct_size;
  uint32_t version;
  int32_t size;            /* usable rows (max concurrent requests), >= 1 */
  int32_t max_context_len; /* row width in token positions, >= 1 */
  uint64_t reserved_[4];
} kvc_req_to_token_pool_config;

/** This header's size and version; both sizes 0 (they must be set). */
/* clang-format off */
#define KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT \
  { sizeof(kvc_req_to_token_pool_config), KVC_VERSION_NUMBER, 0, 0, {0} }
/* clang-format on */

/** kvc_req_to_token_pool_create() : a zero-filled device int32 table of (size + 1) rows x
 *  max_context_len (row 0 is padding) and its host mirror; free rows 1..size (FIFO).
 *  @return KVC_ERR_INVALID_ARGUMENT for sizes < 1 or a table of more than 2^31 entries
 *  ((size + 1) x max_context_len), KVC_ERR_DEVICE_OOM / KVC_ERR_HOST_OOM. Synchronizes
 *  the default stream once (zero fill); not capturable. */
KVC_API kvc_status kvc_req_to_token_pool_create(kvc_context *ctx,
                                                const kvc_req_to_token_pool_config *config,
                                                kvc_req_to_token_pool **out);
/** kvc_req_to_token_pool_destroy() : frees the device table and the host mirror. No GPU
 *  work reading the table may be pending. NULL is a no-op. */
KVC_API void kvc_req_to_token_pool_destroy(kvc_req_to_token_pool *pool);

/** kvc_req_to_token_pool_alloc() : SGLang's ReqToTokenPool.alloc. `rows` is in/out: an
 *  entry > 0 is a row the request already holds (chunked prefill, resumed request) and is
 *  kept; an entry == 0 receives the next free row (front of the FIFO, in request order).
 *  @return KVC_ERR_OUT_OF_SLOTS (nothing changed) when fewer rows are free than entries
 *  are 0; KVC_ERR_MISUSE when a kept entry is not a held row or appears twice. */
KVC_API kvc_status kvc_req_to_token_pool_alloc(kvc_req_to_token_pool *pool, size_t n,
                                               int32_t *rows);
/** kvc_req_to_token_pool_free() : returns `row` to the back of the free list (FIFO). The
 *  table row is not cleared. @return KVC_ERR_MISUSE for row 0, a free row or out of range. */
KVC_API kvc_status kvc_req_to_token_pool_free(kvc_req_to_token_pool *pool, int32_t row);
/** kvc_req_to_token_pool_clear() : every row free again, order 1..size; tables untouched. */
KVC_API kvc_status kvc_req_to_token_pool_clear(kvc_req_to_token_pool *pool);
/** kvc_req_to_token_pool_available() : number of free rows. */
KVC_API int32_t kvc_req_to_token_pool_available(const kvc_req_to_token_pool *pool);
/** kvc_req_to_token_pool_is_held() : 1 if `row` is currently handed out, else 0. */
KVC_API int kvc_req_to_token_pool_is_held(const kvc_req_to_token_pool *pool, int32_t row);
/** kvc_req_to_token_pool_table() : the device table (int32, (size+1) x max_context_len,
 *  row-major), valid for the pool's life. */
KVC_API int32_t *kvc_req_to_token_pool_table(const kvc_req_to_token_pool *pool);
/** kvc_req_to_token_pool_size() / _max_context_len() : usable rows (config.size) and the
 *  row width in token positions; 0 for an invalid handle. */
KVC_API int32_t kvc_req_to_token_pool_size(const kvc_req_to_token_pool *pool);
KVC_API int32_t kvc_req_to_token_pool_max_context_len(const kvc_req_to_token_pool *pool);
/** kvc_req_to_token_pool_row() : the host mirror of `row` (max_context_len entries): what
 *  the library wrote to the device row, readable without a device copy. NULL if out of
 *  range. Valid until the pool is destroyed; entries change with later writes. */
KVC_API const int32_t *kvc_req_to_token_pool_row(const kvc_req_to_token_pool *pool, int32_t row);
/** kvc_req_to_token_pool_write() : row[start : start + n) = slots[0:n) (host int64 slots,
 *  each in [0, 2^31)), in the mirror and on the device (one launch on `stream`).
 *  Not capturable (the slots travel in the launch).
 *  @return KVC_ERR_INVALID_ARGUMENT when the range leaves the row or a slot is out of
 *  range; KVC_ERR_MISUSE when `row` is not held. */
KVC_API kvc_status kvc_req_to_token_pool_write(kvc_req_to_token_pool *pool, int32_t row,
                                               int32_t start, const int64_t *slots, size_t n,
                                               kvc_stream stream);

/** @} */ /* end of kvc_req_pool */

/* --- Token and paged allocators (SGLang TokenToKVPoolAllocator) ---------------------- */

/** @defgroup kvc_allocator Token and paged allocators (SGLang TokenToKVPoolAllocator)
 * @{ */

/** Which SGLang allocator a kvc_allocator reproduces; the kind fixes the free-list order,
 *  which is part of the contract (the same calls hand out the same slots). */
typedef enum kvc_allocator_kind {
  KVC_ALLOCATOR_TOKEN = 0, /* page_size 1, SGLang TokenToKVPoolAllocator: FIFO reuse */
  KVC_ALLOCATOR_PAGED = 1  /* any page size, SGLang PagedTokenToKVPoolAllocator: freed pages
                              go to the front (LIFO), each free sorted-unique */
} kvc_allocator_kind;

/* clang-format off */
#define KVC_ALLOCATOR_NEED_SORT 0x1u /* frees go to a side list; merged and sorted
                                        ascending when an allocation may run short */
/* clang-format on */

/** kvc_allocator_create()'s arguments. Fill with KVC_ALLOCATOR_CONFIG_INIT. */
typedef struct kvc_allocator_config {
  size_t struct_size;
  uint32_t version;
  kvc_allocator_kind kind;
  int64_t size;      /* token slots; pages = size / page_size (floor); slots <= 2^31 - ps */
  int32_t page_size; /* 1 for TOKEN; >= 1 for PAGED */
  uint32_t flags;    /* KVC_ALLOCATOR_* */
  uint64_t reserved_[4];
} kvc_allocator_config;

/** The defaults: TOKEN kind, page size 1, no flags; size 0 (it must be set). */
/* clang-format off */
#define KVC_ALLOCATOR_CONFIG_INIT \
  { sizeof(kvc_allocator_config), KVC_VERSION_NUMBER, KVC_ALLOCATOR_TOKEN, 0, 1, 0u, {0} }
/* clang-format on */

/** kvc_allocator_create() : all pages 1..size/page_size free, in ascending order.
 *  @return KVC_ERR_INVALID_ARGUMENT for a bad kind/size/page size. Host memory only. */
KVC_API kvc_status kvc_allocator_create(kvc_context *ctx, const kvc_allocator_config *config,
                                        kvc_allocator **out);
/** kvc_allocator_destroy() : frees the host metadata (an allocator owns no device
 *  memory). NULL is a no-op. */
KVC_API void kvc_allocator_destroy(kvc_allocator *alloc);

/** kvc_allocator_available_size() : free tokens, counting deferred (need_sort) frees. */
KVC_API int64_t kvc_allocator_available_size(const kvc_allocator *alloc);
/** kvc_allocator_size() : usable tokens = pages x page_size. kvc_allocator_page_size() :
 *  tokens per page (1 for TOKEN). Both 0 for an invalid handle. */
KVC_API int64_t kvc_allocator_size(const kvc_allocator *alloc);
KVC_API int32_t kvc_allocator_page_size(const kvc_allocator *alloc);

/** Counters (pages; tokens = pages x page_size). free + deferred + held == num_pages. */
typedef struct kvc_allocator_stats {
  int64_t num_pages;      /* usable pages (page 0 excluded) */
  int64_t free_pages;     /* in the free list */
  int64_t deferred_pages; /* freed with need_sort, not merged yet */
  int64_t held_pages;     /* handed out (pages freed inside an open group still count) */
  int64_t group_pending;  /* pages freed inside the open free group */
  uint64_t merges;        /* merge_and_sort_free calls that did work */
} kvc_allocator_stats;
/** kvc_allocator_get_stats() : copies the O(1) counters above. Thread rule: as the
 *  allocator (single writer). */
KVC_API kvc_status kvc_allocator_get_stats(const kvc_allocator *alloc, kvc_allocator_stats *out);

/** kvc_allocator_alloc() : n slots (n a multiple of page_size) from the front of the free
 *  list, page-major, written to out_slots (host). n == 0 is a no-op.
 *  @return KVC_ERR_OUT_OF_SLOTS (no slot handed out or freed; one exception, as for
 *  alloc_extend: on a need_sort allocator the merge that SGLang's trigger n > free fires
 *  before finding the shortage is kept, as in SGLang, so the deferred pages are then in
 *  the sorted free list, the merges stat counts it and later calls get SGLang's slots;
 *  the set of free slots and the available size are unchanged),
 *  KVC_ERR_INVALID_ARGUMENT when n is not page-aligned (SGLang silently floors). */
KVC_API kvc_status kvc_allocator_alloc(kvc_allocator *alloc, int64_t n, int64_t *out_slots);

/** kvc_allocator_alloc_extend() : slots for a prefill/extend batch (SGLang alloc_extend;
 *  for the TOKEN kind the same as alloc(sum of extend lengths) split in request order).
 *  For request i: prefix_lens[i] tokens already present, seq_lens[i] after the step.
 *  last_locs[i] = slot of token prefix-1 (or -1 when the prefix is empty); when
 *  last_locs is NULL they are read from prefix_slots[i] or req_pool's host mirror (a
 *  req_pool is required only if some request continues a partial page).
 *  With req_pool (and req_rows, rows held by the requests), the same launch also writes
 *  row[prefix : seq) = the new slots and, where prefix_slots && prefix_slots[i],
 *  row[0 : prefix) = prefix_slots[i][0 : prefix) (host int64, e.g. a radix-cache match);
 *  the host mirror is updated too. out_host (may be NULL) receives the slots,
 *  concatenated in request order; out_device (may be NULL) likewise on the device (int64).
 *  One launch on `stream` when req_pool or out_device is given (none otherwise); not
 *  capturable.
 *  @return KVC_ERR_OUT_OF_SLOTS when not enough pages (no page or row changes; checked
 *  before anything is launched; a need_sort merge that SGLang's trigger fires before the
 *  shortage is kept, as in SGLang, so later calls get SGLang's slots),
 *  KVC_ERR_INVALID_ARGUMENT for seq < prefix, lengths past the row width, or a last_loc
 *  whose in-page offset contradicts its prefix length; KVC_ERR_MISUSE for a row that is
 *  not held or listed twice, or a last_loc in a page that is not held. */
KVC_API kvc_status kvc_allocator_alloc_extend(
    kvc_allocator *alloc, size_t batch_size, const int64_t *prefix_lens, const int64_t *seq_lens,
    const int64_t *last_locs, kvc_req_to_token_pool *req_pool, const int32_t *req_rows,
    const int64_t *const *prefix_slots, int64_t *out_host, int64_t *out_device, kvc_stream stream);

/** kvc_extend_args : the arguments of kvc_allocator_alloc_extend_ex(): those of
 *  kvc_allocator_alloc_extend() (same names, same meaning) plus outputs that the plain
 *  signature has no room for. Zero the whole struct before filling it in: a NULL output is
 *  not written, so code that zeroes it keeps working when fields are added at the end. */
typedef struct kvc_extend_args {
  size_t batch_size;
  const int64_t *prefix_lens;
  const int64_t *seq_lens;
  const int64_t *last_locs;
  kvc_req_to_token_pool *req_pool;
  const int32_t *req_rows;
  const int64_t *const *prefix_slots;
  int64_t *out_host;   /* host int64 [sum of extend lengths], or NULL */
  int64_t *out_device; /* device int64 [sum of extend lengths], or NULL */
  /* device int64 [batch_size], or NULL: rows_device[i] = req_rows[i], written by the
   * same launch (SGLang's req_pool_indices, so the caller needs no host-to-device copy of
   * the rows); requires req_pool. Host backend: host memory, as out_device. */
  int64_t *rows_device;
  kvc_stream stream;
} kvc_extend_args;

/** kvc_allocator_alloc_extend_ex() : kvc_allocator_alloc_extend() with its arguments in
 *  `args` (not retained; every pointer is the caller's and only read or written during the
 *  call or by its launch on args->stream, as there), and rows_device. Same slots, rows,
 *  mirror updates, launch count and capture rule (not capturable).
 *  @return as kvc_allocator_alloc_extend, and KVC_ERR_INVALID_ARGUMENT (nothing changed)
 *  for a NULL alloc or args, or rows_device without req_pool. */
KVC_API kvc_status kvc_allocator_alloc_extend_ex(kvc_allocator *alloc, const kvc_extend_args *args);

/** kvc_allocator_alloc_decode() : one new token per request (SGLang alloc_decode).
 *  seq_lens[i] is the length after the new token; last_locs[i] the slot of token
 *  seq-2 (NULL = from req_pool's mirror). The new slot is last_loc + 1 unless the token
 *  opens a new page ((seq-1) % ps == 0), which takes the next free page in batch order
 *  (also right for ps == 1, where SGLang's page count has a quirk; the TOKEN kind takes
 *  one slot per request from the front).
 *  With req_pool, row[seq-1] = new slot in the same launch. Outputs as alloc_extend.
 *  One launch on `stream` when req_pool or out_device is given; not capturable (use a
 *  decode channel inside a graph).
 *  @return as kvc_allocator_alloc_extend. */
KVC_API kvc_status kvc_allocator_alloc_decode(kvc_allocator *alloc, size_t batch_size,
                                              const int64_t *seq_lens, const int64_t *last_locs,
                                              kvc_req_to_token_pool *req_pool,
                                              const int32_t *req_rows, int64_t *out_host,
                                              int64_t *out_device, kvc_stream stream);

/** kvc_allocator_free() : releases slots (host ids). TOKEN: appended to the back of the
 *  free list in the given order. PAGED: every page touched is released whole, pages
 *  sorted ascending and unique, put at the front. need_sort: to the side list instead.
 *  Inside a free group: recorded, released at kvc_allocator_free_group_end().
 *  @return KVC_ERR_MISUSE (nothing changed) for slot 0 / page 0, a slot out of range, a
 *  slot or page not currently held (double free), or a slot listed twice (TOKEN). */
KVC_API kvc_status kvc_allocator_free(kvc_allocator *alloc, const int64_t *slots, size_t n);

/** kvc_allocator_check_free() : what kvc_allocator_free(alloc, lists[i], counts[i]) for
 *  i = 0 .. num_lists - 1, in that order, would return, without freeing anything: a later
 *  list is checked as if the earlier ones had been freed (TOKEN: a slot in two lists is
 *  refused; PAGED: a page freed by an earlier list is refused, except inside an open free
 *  group, where free() accepts it again). For a caller that frees several lists in turn
 *  and must not be left with the first ones done when a later one is refused (SGLang's
 *  release: committed slots, then the over-allocated tail, two frees because one merged
 *  paged free would order the free list differently): check, then free. An empty list
 *  (counts[i] == 0) may be NULL; num_lists == 0 is KVC_OK.
 *  Changes nothing (it sets and clears transient per-page marks: single writer, as the
 *  allocator). Host only, no stream, no device work.
 *  @return KVC_OK when every free would succeed; else the status and message (lists[i][j]
 *  named) the first refused free would give: KVC_ERR_MISUSE for slot 0 / page 0, a slot
 *  out of range, not held, listed twice, or freed by an earlier list;
 *  KVC_ERR_INVALID_ARGUMENT for NULL lists / counts, or a NULL list with counts[i] > 0. */
KVC_API kvc_status kvc_allocator_check_free(kvc_allocator *alloc, const int64_t *const *lists,
                                            const size_t *counts, size_t num_lists);

/** kvc_allocator_free_segment() : frees slots = row[start_pos : start_pos + n) of one
 *  request (start_pos page-aligned): pages are slots[0], slots[ps], ... (no dedup, no
 *  sort), a trailing partial page released whole. @return as kvc_allocator_free, and
 *  KVC_ERR_INVALID_ARGUMENT for a misaligned start_pos. */
KVC_API kvc_status kvc_allocator_free_segment(kvc_allocator *alloc, const int64_t *slots, size_t n,
                                              int64_t start_pos);

/** kvc_allocator_free_group_begin() / _end() : batch the frees in between into one
 *  release (paged: deduplicated and sorted across the group; segment frees released
 *  after, in call order). Groups do not nest: KVC_ERR_MISUSE. */
KVC_API kvc_status kvc_allocator_free_group_begin(kvc_allocator *alloc);
KVC_API kvc_status kvc_allocator_free_group_end(kvc_allocator *alloc);

/** kvc_allocator_merge_and_sort_free() : folds deferred (need_sort) frees into the free
 *  list and sorts it ascending. Allocation calls do this themselves when they may run
 *  short, with SGLang's triggers. */
KVC_API kvc_status kvc_allocator_merge_and_sort_free(kvc_allocator *alloc);

/** Snapshot for speculative allocation (SGLang backup_state/restore_state). */
typedef struct kvc_allocator_state {
  uint64_t opaque_[4];
} kvc_allocator_state;
/** kvc_allocator_backup_state() : O(1) snapshot. Only one snapshot is live at a time; a
 *  new backup replaces it. */
KVC_API kvc_status kvc_allocator_backup_state(kvc_allocator *alloc, kvc_allocator_state *out);
/** kvc_allocator_restore_state() : returns every slot allocated since the backup.
 *  @return KVC_ERR_MISUSE when a free, clear or group happened since the backup (SGLang
 *  would silently lose those frees) or the snapshot is not the live one. */
KVC_API kvc_status kvc_allocator_restore_state(kvc_allocator *alloc,
                                               const kvc_allocator_state *state);
/** kvc_allocator_clear() : all pages free again in ascending order; groups closed. */
KVC_API kvc_status kvc_allocator_clear(kvc_allocator *alloc);

/** @} */ /* end of kvc_allocator */

/* --- SWA token allocator (SGLang SWATokenToKVPoolAllocator) -------------------------- */

/** @defgroup kvc_swa_allocator SWA token allocator (SGLang SWATokenToKVPoolAllocator)
 *
 * A "full" allocator and an "SWA" allocator (both kvc_allocator objects owned by this
 * one: TOKEN kind when page_size is 1, else PAGED; NEED_SORT passed through), paired by
 * the full->SWA mapping: entry f = SWA slot of full slot f, 0 = no SWA peer, length
 * size_full + page_size + 1, last entry -1 (so a last_loc of -1 translates to -1).
 * The host array is authoritative (int32); the device copy (int64, the same layout, for
 * attention kernels and kvc_swa_translate) is written from it with stream-ordered
 * launches: ONE scatter launch per alloc call for the new pairs, ONE launch per free
 * call zeroing the released entries. Nothing ever reads the device mapping back.
 *
 * Every call is transactional: capacity of BOTH sides and every argument are checked
 * before anything changes (SGLang leaks one side when alloc_decode fails on the other;
 * here KVC_ERR_OUT_OF_SLOTS leaves everything as before). SGLang's invariants are
 * errors: free_swa (ps = 1) of a full slot whose mapping is 0 -> KVC_ERR_MISUSE ("peer
 * mapped"); free_full of a slot whose mapping is non-zero -> KVC_ERR_MISUSE ("peer
 * released"); with ps > 1 free_swa skips unmapped entries, as SGLang does.
 * Same slots in the same order as SGLang for the same calls (the full side is decided
 * before the SWA side, both with the same lengths).
 * Allocation/free calls are NOT graph-capturable; kvc_swa_translate is. Single writer.
 * @{ */

#define KVC_SWA_NEED_SORT 0x1u /* both sub-allocators get KVC_ALLOCATOR_NEED_SORT */
/* clang-format off */
#define KVC_SWA_PURE 0x2u      /* PureSWATokenToKVPoolAllocator : every layer is
                                  SWA; page_size must be 1; ONE token allocator of size_swa
                                  serves both sides; the mapping is the identity
                                  [0, 1, ..., size_swa + ps - 1, -1] and never written;
                                  free/free_swa skip slots <= 0; free_full is a no-op;
                                  alloc_extend/alloc_decode/tail -> KVC_ERR_UNSUPPORTED */
/* clang-format on */

/** kvc_swa_allocator_create()'s arguments. Fill with KVC_SWA_ALLOCATOR_CONFIG_INIT. */
typedef struct kvc_swa_allocator_config {
  size_t struct_size;
  uint32_t version;
  uint32_t flags;                  /* KVC_SWA_* */
  int64_t size_full;               /* full-attention token slots (ignored with KVC_SWA_PURE) */
  int64_t size_swa;                /* SWA token slots (ignored in ring mode) */
  int32_t page_size;               /* >= 1; size + page_size must stay below 2^31 */
  int32_t ring_size;               /* > 0: per-request SWA ring mode: SWA capacity is
                         req rows x ring_cost (ring_cost = ring_size rounded up to pages),
                         no SWA allocation, the mapping is never written. 0 = off */
  kvc_req_to_token_pool *req_pool; /* ring mode: its free rows give the SWA capacity
                                      (borrowed; must outlive the allocator) */
  uint64_t reserved_[4];
} kvc_swa_allocator_config;

/** The defaults: no flags, page size 1, ring mode off; both sizes 0 (set them). */
/* clang-format off */
#define KVC_SWA_ALLOCATOR_CONFIG_INIT \
  { sizeof(kvc_swa_allocator_config), KVC_VERSION_NUMBER, 0u, 0, 0, 1, 0, NULL, {0} }
/* clang-format on */

/** kvc_swa_allocator_create() : the two sub-allocators (all pages free, ascending), the
 *  host mapping (zeros, last -1) and its device copy, written once with a synchronous
 *  upload. @return KVC_ERR_INVALID_ARGUMENT for bad sizes/page size/flags (PURE with
 *  page_size > 1, ring mode without req_pool), KVC_ERR_HOST_OOM, KVC_ERR_DEVICE_OOM.
 *  Not capturable. */
KVC_API kvc_status kvc_swa_allocator_create(kvc_context *ctx,
                                            const kvc_swa_allocator_config *config,
                                            kvc_swa_allocator **out);
/** kvc_swa_allocator_destroy() : frees both sub-allocators and the mappings. No work
 *  reading the device mapping may be pending. NULL is a no-op. */
KVC_API void kvc_swa_allocator_destroy(kvc_swa_allocator *alloc);

/** kvc_swa_allocator_full() / _swa() : the owned sub-allocators, for stats and audits
 *  (never free or allocate through them: the mapping would go stale). _swa() is NULL in
 *  ring mode; with PURE both return the same object. */
KVC_API const kvc_allocator *kvc_swa_allocator_full(const kvc_swa_allocator *alloc);
KVC_API const kvc_allocator *kvc_swa_allocator_swa(const kvc_swa_allocator *alloc);

/** Sizes (tokens). available = min(full, swa) (ring: full); full_available; swa_available
 *  (ring: free req rows x ring_cost); size = min(size_full, size_swa). -1 for a bad handle. */
KVC_API int64_t kvc_swa_allocator_available_size(const kvc_swa_allocator *alloc);
KVC_API int64_t kvc_swa_allocator_full_available_size(const kvc_swa_allocator *alloc);
KVC_API int64_t kvc_swa_allocator_swa_available_size(const kvc_swa_allocator *alloc);
KVC_API int64_t kvc_swa_allocator_size(const kvc_swa_allocator *alloc);
KVC_API int64_t kvc_swa_allocator_size_full(const kvc_swa_allocator *alloc);
KVC_API int64_t kvc_swa_allocator_size_swa(const kvc_swa_allocator *alloc);
KVC_API int32_t kvc_swa_allocator_page_size(const kvc_swa_allocator *alloc);
/** kvc_swa_allocator_new_pages_available() : 1 when num_full_pages fit the full side and
 *  (ring mode or) num_swa_pages fit the SWA side, else 0. */
KVC_API int kvc_swa_allocator_new_pages_available(const kvc_swa_allocator *alloc,
                                                  int64_t num_full_pages, int64_t num_swa_pages);

/** kvc_swa_allocator_mapping_device() : the device full->SWA mapping (int64, length
 *  kvc_swa_allocator_mapping_length()), valid for the allocator's life: pass it to
 *  attention kernels, kvc_swa_translate or kvc_swa_kv_pool_register_allocator. */
KVC_API const int64_t *kvc_swa_allocator_mapping_device(const kvc_swa_allocator *alloc);
/** kvc_swa_allocator_mapping_host() : the authoritative host mapping (int32, same length);
 *  read-only, changes with every alloc/free. */
KVC_API const int32_t *kvc_swa_allocator_mapping_host(const kvc_swa_allocator *alloc);
KVC_API int64_t kvc_swa_allocator_mapping_length(const kvc_swa_allocator *alloc);

/** kvc_swa_allocator_translate_host() : out[i] = mapping[full[i]] from the host mapping
 *  (-1 -> -1; PURE: identity). No device work. @return KVC_ERR_INVALID_ARGUMENT for an
 *  entry outside [-1, size_full + page_size] (out untouched). */
KVC_API kvc_status kvc_swa_allocator_translate_host(const kvc_swa_allocator *alloc,
                                                    const int64_t *full, size_t n, int64_t *out);

/** kvc_swa_allocator_translate() : kvc_swa_translate through the allocator's mapping.
 *  Graph-capturable, as kvc_swa_translate. */
KVC_API kvc_status kvc_swa_allocator_translate(const kvc_swa_allocator *alloc, const void *loc,
                                               kvc_index_type loc_type, void *out,
                                               kvc_index_type out_type, size_t n,
                                               kvc_stream stream);

/** kvc_swa_allocator_alloc() : SGLang alloc(n), page_size 1 only: n full slots (FIFO
 *  front) and n SWA slots, mapping[f[i]] = w[i] (one launch). out_host (may be NULL):
 *  the full slots; out_device (int64, may be NULL): the same on the device.
 *  Not capturable.
 *  @return KVC_ERR_OUT_OF_SLOTS when either side is short (nothing changed),
 *  KVC_ERR_UNSUPPORTED for page_size > 1. */
KVC_API kvc_status kvc_swa_allocator_alloc(kvc_swa_allocator *alloc, int64_t n, int64_t *out_host,
                                           int64_t *out_device, kvc_stream stream);

/** kvc_swa_allocator_alloc_extend() : SGLang alloc_extend: arguments as
 *  kvc_allocator_alloc_extend. The SWA side is allocated first, on the host, with the
 *  same lengths and last_loc = mapping[full last_loc]; then the full side's one launch
 *  on `stream` writes out_cache_loc, the req_to_token rows and the full->SWA mapping of
 *  every new slot. Ring mode: full side only. Not capturable (per-call data in the
 *  launch), like kvc_allocator_alloc_extend.
 *  @return KVC_ERR_OUT_OF_SLOTS (both sides checked first; nothing changed),
 *  KVC_ERR_MISUSE when a request continues a partial page whose last slot has no SWA
 *  peer (SGLang would write into SWA padding page 0), and the errors of
 *  kvc_allocator_alloc_extend. Any full-side failure (including the launch) rolls the
 *  SWA side back; nothing is changed. */
KVC_API kvc_status kvc_swa_allocator_alloc_extend(
    kvc_swa_allocator *alloc, size_t batch_size, const int64_t *prefix_lens,
    const int64_t *seq_lens, const int64_t *last_locs, kvc_req_to_token_pool *req_pool,
    const int32_t *req_rows, const int64_t *const *prefix_slots, int64_t *out_host,
    int64_t *out_device, kvc_stream stream);
/** kvc_swa_allocator_alloc_extend_ex() : kvc_swa_allocator_alloc_extend() with its
 *  arguments in `args` (kvc_extend_args, as kvc_allocator_alloc_extend_ex; not retained),
 *  and rows_device: rows_device[i] = req_rows[i] (int64, SGLang's req_pool_indices),
 *  written by the full side's one launch on args->stream together with out_cache_loc,
 *  the rows and the mapping (ring mode: the full side's launch), so the caller needs no
 *  copy of the rows to the device. Same slots, rows, mapping and launch count as
 *  kvc_swa_allocator_alloc_extend; stream-ordered, never synchronizes, not capturable
 *  (per-call data in the launch).
 *  @return as kvc_swa_allocator_alloc_extend (nothing changed on any failure), and
 *  KVC_ERR_INVALID_ARGUMENT for a NULL alloc or args, or rows_device without req_pool
 *  (checked before either side allocates). */
KVC_API kvc_status kvc_swa_allocator_alloc_extend_ex(kvc_swa_allocator *alloc,
                                                     const kvc_extend_args *args);
/** kvc_swa_allocator_alloc_decode() : SGLang alloc_decode, both sides or none (see
 *  kvc_allocator_alloc_decode for the arguments). One launch on `stream` writes
 *  out_cache_loc, the req_to_token entries and the full->SWA mapping of the new slots.
 *  Not capturable (kvc_decode_channel_create_swa gives a capturable path).
 *  @return as alloc_extend. */
KVC_API kvc_status kvc_swa_allocator_alloc_decode(kvc_swa_allocator *alloc, size_t batch_size,
                                                  const int64_t *seq_lens, const int64_t *last_locs,
                                                  kvc_req_to_token_pool *req_pool,
                                                  const int32_t *req_rows, int64_t *out_host,
                                                  int64_t *out_device, kvc_stream stream);

/** kvc_swa_allocator_alloc_extend_swa_tail() : SGLang alloc_extend_swa_tail (bs 1, spec
 *  7.5): full slots for the whole extend, SWA slots only for the last swa_tail_len
 *  tokens, allocated as a fresh sequence (prefix 0, last_loc -1: offsets start at 0 of a
 *  new page, so they need not mirror the full offsets); mapping[f[e - tail:]] = w, the
 *  other new full slots stay 0. One launch on `stream`; not capturable.
 *  @return KVC_ERR_INVALID_ARGUMENT unless 0 <= swa_tail_len
 *  <= seq_len - prefix_len; otherwise as alloc_extend. */
KVC_API kvc_status kvc_swa_allocator_alloc_extend_swa_tail(
    kvc_swa_allocator *alloc, int64_t prefix_len, int64_t seq_len, int64_t last_loc,
    int64_t swa_tail_len, kvc_req_to_token_pool *req_pool, int32_t req_row,
    const int64_t *prefix_slots, int64_t *out_host, int64_t *out_device, kvc_stream stream);

/** kvc_swa_allocator_free() : free_swa then free_full of the same slots (SGLang order:
 *  the SWA half reads the mapping). Validated as a whole first. n == 0: no-op.
 *  The mapping entries are zeroed with one launch on `stream`; not capturable.
 *  @return KVC_ERR_MISUSE for slot 0, out-of-range or not-held slots, and the invariant
 *  violations above; nothing changed. */
KVC_API kvc_status kvc_swa_allocator_free(kvc_swa_allocator *alloc, const int64_t *slots, size_t n,
                                          kvc_stream stream);
/** kvc_swa_allocator_free_swa() : releases the SWA peers of full slots (window eviction)
 *  and zeroes their mapping entries (host + one device launch). ps = 1: every slot must
 *  have a peer ("peer mapped"). ps > 1: every slot of every page touched is cleared and
 *  its peer released; unmapped entries are skipped. Inside a free group the SWA frees are
 *  recorded and released (sorted-unique) at kvc_swa_allocator_free_group_end(). Not
 *  capturable. */
KVC_API kvc_status kvc_swa_allocator_free_swa(kvc_swa_allocator *alloc, const int64_t *slots,
                                              size_t n, kvc_stream stream);
/** kvc_swa_allocator_free_full() : releases full slots whose SWA peers were already
 *  released (mapping 0; else KVC_ERR_MISUSE "peer released"). No device work. PURE: no-op. */
KVC_API kvc_status kvc_swa_allocator_free_full(kvc_swa_allocator *alloc, const int64_t *slots,
                                               size_t n);
/** kvc_swa_allocator_free_segment() : free_swa(slots) then the full side's
 *  kvc_allocator_free_segment(slots, start_pos). PURE: = free. Not capturable. */
KVC_API kvc_status kvc_swa_allocator_free_segment(kvc_swa_allocator *alloc, const int64_t *slots,
                                                  size_t n, int64_t start_pos, kvc_stream stream);
/** kvc_swa_allocator_free_full_segment() : "peer released" guard, then the full side's
 *  free_segment. No device work. PURE: no-op. */
KVC_API kvc_status kvc_swa_allocator_free_full_segment(kvc_swa_allocator *alloc,
                                                       const int64_t *slots, size_t n,
                                                       int64_t start_pos);
/** kvc_swa_allocator_free_group_begin() / _end() : SGLang's free groups over both sides,
 *  so a batch's frees are released together. Begin opens a group on both sides; end
 *  releases the group's SWA frees first, then ends the full side's group. Host only.
 *  @return KVC_ERR_MISUSE for a nested begin or an end without begin. */
KVC_API kvc_status kvc_swa_allocator_free_group_begin(kvc_swa_allocator *alloc);
KVC_API kvc_status kvc_swa_allocator_free_group_end(kvc_swa_allocator *alloc);
/** kvc_swa_allocator_defer_zero_begin() / _end() : one device launch for the mapping
 *  zeroes of many frees. Between begin and end, every free of this allocator (free,
 *  free_swa, free_segment and the flows' frees) does exactly what it does outside, in the
 *  same order and with the same validation (slots released to both free lists, host
 *  mapping zeroed at once), except that its device-mapping zero is queued instead of
 *  launched; the outermost end launches the queue as ONE launch on `stream` (the frees'
 *  own streams are not used for it). Scopes nest (a counter); an inner end does nothing
 *  else. Unlike a free group, nothing is reordered or held back on the host: only the
 *  device mirror of freed slots' entries lags until end (nothing may read those: no live
 *  row holds a freed slot). Any other device-mapping write (alloc, alloc_extend(_ex),
 *  alloc_extend_swa_tail, alloc_decode, the decode channel's step) and translate first
 *  launch what is queued, on their own stream, so a queued zero never overwrites a pair
 *  written after it. kvc_swa_allocator_clear drops the queue (its memset covers it).
 *  The SWA radix cache opens a scope around each evict, cache_finished_req and
 *  cache_unfinished_req call and, by default, closes it without launching: the queue then
 *  waits for the next device-mapping write, which carries it in its own launch
 *  (kvc_swa_allocator_zero_flush; the write's failure changes nothing of that write and
 *  keeps the queue).
 *  Ownership: the queue is the allocator's (host memory, freed by destroy; an open scope
 *  at destroy is no error). Ring and PURE allocators never queue (their frees write no
 *  mapping). Single writer, like every call of the allocator. Graph capture: end launches
 *  with per-call data, so it is not capturable (as the frees are not); begin is host only.
 *  Failure rule: queueing cannot fail (when its host queue cannot grow, that free
 *  launches its zero at once, after the queued ones, as outside a scope; a failure of
 *  that launch refuses the free, changing nothing, as always). End's launch is the only
 *  step that can fail after frees were done: it returns the launch's status
 *  (KVC_ERR_CUDA) with kvc_last_error() saying the frees are done and the zero stays
 *  queued; the scope is closed, the host state is final and correct, and the next
 *  device-mapping write (or a later outermost end) retries the queue first; that call
 *  fails, changing nothing, if the retry fails too.
 *  kvc_swa_allocator_zero_pending() : the queued runs (0 when the device mapping is
 *  current; -1 for a dead handle).
 *  @return begin: KVC_ERR_MISUSE at 2^32 - 1 nested scopes; end: KVC_ERR_MISUSE without
 *  an open scope (nothing changed), the launch's status as above. */
KVC_API kvc_status kvc_swa_allocator_defer_zero_begin(kvc_swa_allocator *alloc);
KVC_API kvc_status kvc_swa_allocator_defer_zero_end(kvc_swa_allocator *alloc, kvc_stream stream);
KVC_API int64_t kvc_swa_allocator_zero_pending(const kvc_swa_allocator *alloc);
/** kvc_swa_allocator_zero_flush() : launches the queued device-mapping zeroes now, as ONE
 *  launch on `stream` (none when nothing is queued), inside or outside a scope.
 *  Why it exists: the SWA radix cache closes its scopes without launching (unless
 *  KVC_SWA_RADIX_EAGER_ZERO), so after its evict / cache_finished_req /
 *  cache_unfinished_req the device mapping may still hold the old nonzero entries of
 *  freed full slots until the allocator's next device-mapping write. That write carries
 *  the queue in its own launch (alloc, alloc_extend(_ex) at page size > 1,
 *  alloc_extend_swa_tail, alloc_decode: the zero runs and the new pairs are applied by
 *  the same kernel; they never overlap: alloc_extend and alloc_decode drop their new
 *  pages from the runs and write those pages whole, and alloc launches the queue alone
 *  first when a new slot lies on a queued page), or launches it first (alloc_extend at
 *  page size 1, the decode channel's step, translate; and alloc_decode when its batch
 *  exceeds the full side's free list, where the step merges it). Nothing the library
 *  runs reads a freed slot's entry; call this before reading the device mapping of freed
 *  slots yourself (a debugger, a copy of the whole mapping, SGLang's
 *  full_to_swa_index_mapping tensor). Stream: the queue lands in `stream`'s order; host
 *  only otherwise. Graph capture: not capturable (per-call data, as the frees).
 *  @return KVC_ERR_CUDA when the launch fails: nothing changed, the queue is kept (the
 *  host mapping is already final) and retried by the next write or flush. */
KVC_API kvc_status kvc_swa_allocator_zero_flush(kvc_swa_allocator *alloc, kvc_stream stream);
/** kvc_swa_allocator_clear() : both sides free again (ascending), groups closed, mapping
 *  zeroed except its last -1 (host, and one device memset on `stream`). Not capturable. */
KVC_API kvc_status kvc_swa_allocator_clear(kvc_swa_allocator *alloc, kvc_stream stream);

/** @} */ /* end of kvc_swa_allocator */

/* --- Decode channel: the decode step's device writes inside a CUDA graph ------------- */

/** @defgroup kvc_decode_channel Decode channel: the decode step's device writes inside a CUDA graph
 *
 * kvc_allocator_alloc_decode() enqueues one kernel per step whose parameters change every
 * step: it cannot be captured, and the launch is most of its host time (3-4 us on an H200
 * host). A decode channel splits the step in two:
 *   - host half, kvc_decode_channel_alloc(): the same validation, slots and host state as
 *     alloc_decode, then the step's (row, position, slot) triples are written into a ring
 *     of pinned host memory. No driver call at all.
 *   - device half, kvc_decode_channel_enqueue(): one kernel with fixed parameters, meant
 *     to be captured once into the engine's decode CUDA graph. Each execution applies the
 *     oldest published step it has not applied: out_device[0, n) = the new slots,
 *     out_device[n, max_batch) = 0 (the padding slot, for padded graph batches), and
 *     req_to_token[row][seq - 1] = slot. It reads the step from pinned memory over
 *     PCIe: measured 5.7 / 7.0 us of GPU time per replay at batch 256 / 1024 on an H200
 *     (bench/RESULTS.md), and no host time.
 * Protocol, per decode step: one kvc_decode_channel_alloc(), then one execution of the
 * kernel (graph replay, or kvc_decode_channel_enqueue() outside graphs) on the stream
 * before anything there reads out_device or the new table entries, and before any other
 * library call enqueues writes to the same req_to_token rows. The host may run up to
 * `depth` steps ahead of the device. An execution that finds no published step (kernel
 * run before the alloc) writes 0 into all of out_device, so that step's KV goes to the
 * padding page, not into live slots, and the next alloc/check reports KVC_ERR_MISUSE.
 * Other allocator calls (extend, free, ...) mix freely with channel steps: the host state
 * is one. PAGED and TOKEN allocators here; SWA allocators through
 * kvc_decode_channel_create_swa(). Single writer, as the allocator.
 * @{ */

/** kvc_decode_channel_create() : a channel for `alloc` writing rows of `req_pool` (may be
 *  NULL: no table writes) and `out_device` (int64 [max_batch] device array, may be NULL;
 *  not both NULL). `depth` (2..4096, rounded up to a power of two) steps may be
 *  published ahead of the device. Allocates about depth * (3 * max_batch + 4) * 4 bytes
 *  of pinned host memory and 256 bytes of device memory, resolves the kernel (compiling it on
 *  first use) and synchronizes the default stream once. The channel does not own alloc,
 *  req_pool or out_device; they must outlive it. Not capturable.
 *  @return KVC_ERR_INVALID_ARGUMENT for bad handles or sizes (max_batch in [1, 2^20]),
 *  KVC_ERR_HOST_OOM / KVC_ERR_DEVICE_OOM, KVC_ERR_NVRTC, KVC_ERR_CUDA. */
KVC_API kvc_status kvc_decode_channel_create(kvc_allocator *alloc, kvc_req_to_token_pool *req_pool,
                                             size_t max_batch, unsigned depth, int64_t *out_device,
                                             kvc_decode_channel **out);
/** kvc_decode_channel_destroy() : frees the channel. The caller must make sure no
 *  execution of its kernel is pending (synchronize the stream) and that no graph holding
 *  it is launched again. NULL is a no-op. */
KVC_API void kvc_decode_channel_destroy(kvc_decode_channel *channel);
/** kvc_decode_channel_enqueue() : enqueues one execution of the channel's kernel on
 *  `stream` (one CTA). Graph-capturable: capture it once, replay it every step; its
 *  parameters never change. Host backend: applies the step now.
 *  @return KVC_ERR_INVALID_ARGUMENT for a bad handle, KVC_ERR_CUDA. */
KVC_API kvc_status kvc_decode_channel_enqueue(kvc_decode_channel *channel, kvc_stream stream);
/** kvc_decode_channel_alloc() : kvc_allocator_alloc_decode() with the device writes
 *  published for the channel's next kernel execution instead of launched (arguments,
 *  slots and host state exactly as alloc_decode with the channel's req_pool and
 *  out_device; out_host may be NULL). Host memory only: no driver call, no sync.
 *  batch_size 0 publishes an empty step (the execution zeroes out_device).
 *  @return as alloc_decode (nothing changed on error, nothing published), plus
 *  KVC_ERR_INVALID_ARGUMENT for batch_size > max_batch, KVC_ERR_BUSY when the device
 *  has not yet applied the step published `depth` steps ago (retry later; nothing
 *  changed), KVC_ERR_MISUSE when an execution found its step unpublished. Not a stream
 *  operation: calling it during a capture is allowed and captures nothing. */
KVC_API kvc_status kvc_decode_channel_alloc(kvc_decode_channel *channel, size_t batch_size,
                                            const int64_t *seq_lens, const int64_t *last_locs,
                                            const int32_t *req_rows, int64_t *out_host);
/** kvc_decode_channel_check() : steps published by the host and applied by the device so
 *  far (either pointer may be NULL). Reads host memory only; never waits; allowed during a
 *  capture.
 *  @return KVC_ERR_MISUSE naming the step when an execution found its step unpublished. */
KVC_API kvc_status kvc_decode_channel_check(const kvc_decode_channel *channel, uint64_t *published,
                                            uint64_t *applied);

/** kvc_decode_channel_create_swa() : a decode channel (kvc_decode_channel_create()) over
 *  an SWA allocator: kvc_decode_channel_alloc() does kvc_swa_allocator_alloc_decode's host
 *  work (both sides or none, the host mapping) and publishes the step, and each execution
 *  of the channel's kernel writes out_cache_loc, the req_to_token entries and the
 *  full->SWA mapping of the new slots. Ring mode: as a plain channel over the full side.
 *  Pure-SWA allocators have no alloc_decode. Not capturable (enqueue is).
 *  @return KVC_ERR_INVALID_ARGUMENT for a pure-SWA or dead allocator and as
 *  kvc_decode_channel_create otherwise. */
KVC_API kvc_status kvc_decode_channel_create_swa(kvc_swa_allocator *alloc,
                                                 kvc_req_to_token_pool *req_pool, size_t max_batch,
                                                 unsigned depth, int64_t *out_device,
                                                 kvc_decode_channel **out);

/** @} */ /* end of kvc_decode_channel */

/* --- KV pools: MHA, MLA, NSA, FP4 (SGLang *TokenToKVPool) ---------------------------- */

/** @defgroup kvc_kv_pool KV pools: MHA, MLA, NSA, FP4 (SGLang *TokenToKVPool)
 *
 * One device allocation per pool (through the context's device allocator), carved into
 * per-layer regions, zero-filled at create. Row r of every region belongs to token slot
 * r; buffers have size + page_size rows (page 0 is padding). Layer ids are global:
 * layer_id - start_layer indexes the pool's layers (pipeline stages own a range).
 * Writes (set_kv, set_mla_kv, set_index_k, move) are one kernel launch each, read only
 * device pointers and values and are graph-capturable. Single writer per pool; readers
 * may use the buffers concurrently on their own streams.
 * @{ */

/** The storage layout of a kvc_kv_pool (which SGLang pool it reproduces). */
typedef enum kvc_kv_pool_kind {
  KVC_KV_MHA = 0,      /* K and V per layer (SGLang MHATokenToKVPool) */
  KVC_KV_MHA_NOOP = 1, /* capacity accounting only, placeholder buffers (NoOpMHA...) */
  KVC_KV_MHA_FP4 = 2,  /* packed e2m1 K/V + one scale byte per 16 values (MHA...FP4) */
  KVC_KV_MLA = 3,      /* one latent row per slot: kv_lora_rank + qk_rope_head_dim */
  KVC_KV_MLA_FP4 = 4,  /* MLA rows packed e2m1 + scale bytes */
  KVC_KV_NSA = 5       /* MLA (fp8: 656-byte rows) + per-layer index-K pages */
} kvc_kv_pool_kind;

/** kvc_kv_pool_create()'s arguments: the pool's geometry, fixed for its life. Fill with
 *  KVC_KV_POOL_CONFIG_INIT; the fields a kind does not use must stay 0. */
typedef struct kvc_kv_pool_config {
  size_t struct_size;
  uint32_t version;
  kvc_kv_pool_kind kind;
  int64_t size;             /* token slots (>= 1); buffers hold size + page_size rows */
  int32_t page_size;        /* >= 1 (NSA: 64) */
  kvc_dtype dtype;          /* element type seen by attention: F32/F16/BF16/FP8_E4M3/FP8_E5M2;
                            FP4 kinds: the dtype of written/read values (BF16/F16/F32);
                            NSA: FP8_E4M3 selects the 656-byte quantized rows */
  int32_t layer_num;        /* layers owned by this pool, in [1, 1024]; start_layer +
                            layer_num must not pass INT32_MAX */
  int32_t start_layer;      /* global id of the first owned layer (default 0) */
  int32_t head_num;         /* MHA kinds */
  int32_t head_dim;         /* MHA kinds */
  int32_t v_head_dim;       /* MHA: 0 = head_dim */
  int32_t kv_lora_rank;     /* MLA kinds (e.g. 512) */
  int32_t qk_rope_head_dim; /* MLA kinds (e.g. 64) */
  int32_t index_head_dim;   /* NSA: must be 128 (0 = 128) */
  int64_t index_buf_size;   /* NSA: tokens of index-K storage (0 = size) */
  uint32_t flags;           /* reserved, 0 */
  int32_t pad_;
  uint64_t reserved_[8];
} kvc_kv_pool_config;

/** The defaults: MHA, page size 1, BF16, start layer 0; sizes and dims 0 (set them). */
/* clang-format off */
#define KVC_KV_POOL_CONFIG_INIT \
  { sizeof(kvc_kv_pool_config), KVC_VERSION_NUMBER, KVC_KV_MHA, 0, 1, KVC_DTYPE_BF16, 0, 0, \
    0, 0, 0, 0, 0, 0, 0, 0u, 0, {0} }
/* clang-format on */

/** kvc_kv_pool_create() : allocates and zero-fills every buffer (one device allocation),
 *  then synchronizes once. Kernels are compiled (NVRTC, cached in memory and on disk) at
 *  their first use for the pool's row sizes; call each operation once at start-up to keep
 *  compilation off the first scheduler step.
 *  @return KVC_ERR_INVALID_ARGUMENT for inconsistent geometry (sizes, dims, dtype not
 *  allowed for the kind, a head/latent dimension over 2^20, sizes whose byte counts
 *  overflow), KVC_ERR_DEVICE_OOM,
 *  KVC_ERR_NVRTC. Not capturable. */
KVC_API kvc_status kvc_kv_pool_create(kvc_context *ctx, const kvc_kv_pool_config *config,
                                      kvc_kv_pool **out);
/** kvc_kv_pool_destroy() : frees the pool's device allocation. No GPU work using its
 *  buffers may be pending, and no DLPack tensor exported from it may still be used.
 *  NULL is a no-op. */
KVC_API void kvc_kv_pool_destroy(kvc_kv_pool *pool);
/** kvc_kv_pool_clear() : zero-fills every buffer on `stream` (capacity unchanged).
 *  One memset on `stream`, never synchronizes; not capturable. */
KVC_API kvc_status kvc_kv_pool_clear(kvc_kv_pool *pool, kvc_stream stream);

/** kvc_kv_pool_size_bytes() : bytes of K-side and V-side storage (MLA/NSA: all in k,
 *  index pages included; NoOp: 0, 0), as SGLang's get_kv_size_bytes. */
KVC_API kvc_status kvc_kv_pool_size_bytes(const kvc_kv_pool *pool, size_t *k_bytes,
                                          size_t *v_bytes);

/** kvc_kv_pool_config_for_tp_rank() : the KV pool config of rank tp_rank of tp_size
 *  tensor-parallel ranks, from the model's whole config `model`: MHA kinds shard KV
 *  heads, head_num / tp_size per rank (SGLang get_num_kv_heads: when tp_size is a
 *  multiple of head_num each rank keeps one replicated head); MLA and NSA latent rows are
 *  replicated (every rank holds the whole row). Everything else is copied. Every rank
 *  gets the same config, so N contexts fed the same calls make the same allocation
 *  decisions. Pure function of its arguments.
 *  @return KVC_ERR_INVALID_ARGUMENT for NULL, tp_size < 1, tp_rank outside
 *  [0, tp_size), a config whose struct_size is not understood, or MHA heads that neither
 *  divide nor are divided by tp_size (e.g. 8 heads over 3 ranks). *out written only on
 *  success. */
KVC_API kvc_status kvc_kv_pool_config_for_tp_rank(const kvc_kv_pool_config *model, int32_t tp_size,
                                                  int32_t tp_rank, kvc_kv_pool_config *out);

/** kvc_kv_pool_set_kv() : SGLang set_kv_buffer. For i < n:
 *  K[layer][loc[i]] = k[i], V[layer][loc[i]] = v[i] (MLA kinds: the whole row from k; v
 *  ignored). Source rows are `src_dtype` with row strides k_stride / v_stride in elements
 *  (0 = contiguous). If src_dtype equals the pool dtype the bytes are copied; if the pool
 *  is fp8 and the source bf16/f16/f32, values are divided by the scale (k_scale_device,
 *  a device float, when non-NULL, else k_scale; 1.0 = none), clamped to the finite fp8
 *  range and rounded to nearest even — fused in the same launch, inputs never modified.
 *  FP4 pools quantize (e2m1 + per-16 scale bytes). One launch for K and V together.
 *  Slots outside [0, size + page_size) are skipped (never written). n == 0: no launch.
 *  Graph-capturable once compiled (the scales are fixed values or a device float).
 *  @return KVC_ERR_UNSUPPORTED on a NoOp pool or a source/pool dtype pair with no
 *  conversion, KVC_ERR_INVALID_ARGUMENT for a layer outside the pool or NULL pointers. */
KVC_API kvc_status kvc_kv_pool_set_kv(kvc_kv_pool *pool, int32_t layer_id, const void *loc,
                                      kvc_index_type loc_type, size_t n, const void *k,
                                      const void *v, kvc_dtype src_dtype, int64_t k_stride,
                                      int64_t v_stride, const float *k_scale_device, float k_scale,
                                      const float *v_scale_device, float v_scale,
                                      kvc_stream stream);

/** kvc_kv_pool_move() : SGLang move_kv_cache: for every layer and every region of the
 *  pool (K, V, scales, latent rows, index keys), row tgt[i] = row src[i], for all i < n,
 *  in ONE launch, with SGLang's semantics: pairs are taken in chunks of 256 (128 when
 *  the pool's first region has rows of 8192 bytes or more), in order; within a chunk all
 *  sources are read before any target is written (overlapping src/tgt sets of up to a
 *  chunk behave as one simultaneous copy; duplicate targets: one unspecified winner), and
 *  a later chunk sees the earlier chunks' writes (SGLang launches once per chunk). V rows
 *  wider than K rows are copied in full. Out-of-range slots are skipped. Capturable.
 *  A NoOp pool moves nothing but checks its arguments as any pool does.
 *  @return KVC_ERR_INVALID_ARGUMENT for NULL tgt_loc / src_loc with n > 0 or an unknown
 *  loc_type; KVC_ERR_HOST_OOM on the host backend when its one-chunk scratch cannot be
 *  allocated (nothing moved). */
KVC_API kvc_status kvc_kv_pool_move(kvc_kv_pool *pool, const void *tgt_loc, const void *src_loc,
                                    kvc_index_type loc_type, size_t n, kvc_stream stream);

/** kvc_kv_pool_gather_kv() : reads rows loc[i] of one layer into dense k_out / v_out
 *  (n rows each) converted to out_dtype; FP4 pools dequantize only these rows (never a
 *  whole layer). MLA kinds: the whole latent row into k_out (v_out may be NULL and is
 *  never written). MHA kinds: a NULL v_out reads K only.
 *  One launch on `stream`; graph-capturable once compiled.
 *  @return KVC_ERR_INVALID_ARGUMENT for NULL loc or k_out with n > 0. */
KVC_API kvc_status kvc_kv_pool_gather_kv(kvc_kv_pool *pool, int32_t layer_id, const void *loc,
                                         kvc_index_type loc_type, size_t n, void *k_out,
                                         void *v_out, kvc_dtype out_dtype, kvc_stream stream);

/** kvc_kv_pool_set_mla_kv() : MLA/NSA: row loc[i] = [nope[i] (kv_lora_rank) | rope[i]
 *  (qk_rope_head_dim)], converted from src_dtype (NSA fp8: quantized per 128 values
 *  into the 656-byte layout; an all-zero tile stores scale 0 and zero codes). Strides in
 *  elements (0 = contiguous). One launch. Graph-capturable once compiled. @return as
 *  kvc_set_mla_kv, plus KVC_ERR_INVALID_ARGUMENT for a layer outside the pool,
 *  KVC_ERR_UNSUPPORTED for a pool without MLA rows. */
KVC_API kvc_status kvc_kv_pool_set_mla_kv(kvc_kv_pool *pool, int32_t layer_id, const void *loc,
                                          kvc_index_type loc_type, size_t n, const void *nope,
                                          const void *rope, kvc_dtype src_dtype,
                                          int64_t nope_stride, int64_t rope_stride,
                                          kvc_stream stream);

/** kvc_kv_pool_get_mla_kv() : MLA/NSA: rows loc[i] split into nope_out (n x kv_lora_rank)
 *  and rope_out (n x qk_rope_head_dim), converted to out_dtype (NSA fp8 rows are
 *  dequantized). No power-of-two restriction. One launch; graph-capturable once compiled.
 *  @return as kvc_kv_pool_set_mla_kv. */
KVC_API kvc_status kvc_kv_pool_get_mla_kv(kvc_kv_pool *pool, int32_t layer_id, const void *loc,
                                          kvc_index_type loc_type, size_t n, void *nope_out,
                                          void *rope_out, kvc_dtype out_dtype, kvc_stream stream);

/** kvc_nsa_set_index_k() : NSA SetKAndS: for i < n, the 128 fp8 key bytes of row i of
 *  index_k (row stride 128 bytes) and scale[i] (float) go to token loc[i] of the layer's
 *  index pages (page loc/ps, keys then scales within a page). loc is int64 or int32. One
 *  launch on `stream`; graph-capturable. @return KVC_ERR_UNSUPPORTED for a pool that is
 *  not NSA, KVC_ERR_INVALID_ARGUMENT for a layer outside it or NULL pointers with n > 0. */
KVC_API kvc_status kvc_nsa_set_index_k(kvc_kv_pool *pool, int32_t layer_id, const void *loc,
                                       kvc_index_type loc_type, size_t n, const uint8_t *index_k,
                                       const float *scale, kvc_stream stream);
/** kvc_nsa_get_index_k() : GetK/GetS for one sequence of seq_len tokens whose pages are
 *  page_indices[ceil(seq_len/ps)] (device int32): out_k (seq_len x 128 bytes) and/or
 *  out_scale (seq_len x 4 bytes), either may be NULL. Lengths are run-time values: no
 *  recompilation per length. One launch on `stream`; capturable, with seq_len frozen in
 *  the graph (it travels in the launch). @return as kvc_nsa_set_index_k, and for seq_len
 *  outside [0, 2^31). */
KVC_API kvc_status kvc_nsa_get_index_k(kvc_kv_pool *pool, int32_t layer_id, int64_t seq_len,
                                       const int32_t *page_indices, uint8_t *out_k,
                                       uint8_t *out_scale, kvc_stream stream);
/** kvc_nsa_get_index_k_batch() : GetKAndS for a batch: page table (batch x table_width,
 *  device int32, row-major), seq_lens (device int32), outputs packed by sequence
 *  (seq_len_sum rows). max_seq_len bounds the grid. One launch on `stream`; capturable
 *  with batch, seq_len_sum and max_seq_len frozen in the graph. @return as
 *  kvc_nsa_get_index_k. */
KVC_API kvc_status kvc_nsa_get_index_k_batch(kvc_kv_pool *pool, int32_t layer_id, size_t batch,
                                             const int32_t *page_table, int64_t table_width,
                                             const int32_t *seq_lens, int64_t seq_len_sum,
                                             int64_t max_seq_len, uint8_t *out_k,
                                             uint8_t *out_scale, kvc_stream stream);

/* --- Descriptors, DLPack, transfer registration ------------------------------------ */

/** Which buffer of a pool a descriptor, a DLPack export or a transfer region names. */
typedef enum kvc_region_kind {
  KVC_REGION_K = 0,                       /* MHA keys (FP4: packed data) */
  KVC_REGION_V = 1,                       /* MHA values */
  KVC_REGION_K_SCALE = 2,                 /* FP4 scale bytes of K */
  KVC_REGION_V_SCALE = 3,                 /* FP4 scale bytes of V */
  KVC_REGION_KV = 4,                      /* MLA/NSA latent rows (FP4: packed data) */
  KVC_REGION_KV_SCALE = 5,                /* MLA FP4 scale bytes */
  KVC_REGION_INDEX_K = 6,                 /* NSA index-K pages */
  KVC_REGION_MAMBA_CONV = 7,              /* Mamba conv state tensor (kvc_mamba_pool) */
  KVC_REGION_MAMBA_TEMPORAL = 8,          /* Mamba temporal (SSM) state tensor */
  KVC_REGION_MAMBA_INTERMEDIATE_SSM = 9,  /* speculative per-draft-token SSM states */
  KVC_REGION_MAMBA_INTERMEDIATE_CONV = 10 /* speculative per-draft-token conv windows */
} kvc_region_kind;

/** One buffer of a pool: a region of one layer. Shapes/strides in elements of dtype. */
typedef struct kvc_buffer_desc {
  size_t struct_size;
  uint32_t version;
  kvc_region_kind region;
  int32_t layer_id; /* global layer id */
  kvc_dtype dtype;  /* real element type (fp8 reported as fp8; FP4 packed as FP4_E2M1) */
  int32_t ndim;
  int32_t device; /* CUDA ordinal, -1 for host memory */
  void *data;
  int64_t shape[4];
  int64_t strides[4];
  int64_t bytes_per_token; /* bytes of one row (slot) */
  int64_t bytes_per_page;  /* bytes_per_token x page_size (index-K: one page row) */
  int64_t total_bytes;
  uint64_t reserved_[4];
} kvc_buffer_desc;

/** kvc_kv_pool_num_buffers() : how many (region, layer) buffers the pool has. */
KVC_API int32_t kvc_kv_pool_num_buffers(const kvc_kv_pool *pool);
/** kvc_kv_pool_describe() : buffer `index` (0 .. num_buffers-1; order: for each region
 *  kind in enum order, layers ascending). `out->struct_size` must be set by the caller. */
KVC_API kvc_status kvc_kv_pool_describe(const kvc_kv_pool *pool, int32_t index,
                                        kvc_buffer_desc *out);
/** kvc_kv_pool_buffer() : the buffer of `region` for global `layer_id`.
 *  @return KVC_ERR_INVALID_ARGUMENT if the pool has no such buffer. */
KVC_API kvc_status kvc_kv_pool_buffer(const kvc_kv_pool *pool, kvc_region_kind region,
                                      int32_t layer_id, kvc_buffer_desc *out);

/** kvc_kv_pool_export_dlpack() : a DLPack DLManagedTensor (returned as void *, layout of
 *  dlpack.h v0.8) viewing the buffer without a copy. The caller owns the returned tensor
 *  and must call its deleter (which frees only the wrapper); the memory stays owned by the
 *  pool, so the tensor must not outlive it. fp8 and fp4 buffers export with DLPack's
 *  float8/float4 type codes (dlpack >= 1.1), or as uint8 when `as_bytes` is non-zero. */
KVC_API kvc_status kvc_kv_pool_export_dlpack(const kvc_kv_pool *pool, kvc_region_kind region,
                                             int32_t layer_id, int as_bytes, void **out_tensor);

/* --- DLPack capsules for language bindings (the Python package) ---------------------
 * Plain-C end-of-life functions for DLPack tensors a binding hands out in PyCapsules,
 * so that no interpreter callback runs on a consumer's error path. The library does not
 * link to Python. */

/** A binding-owned tensor's manager_ctx for the relay deleters: `inner` (may be NULL)
 *  is released with inner_deleter(inner), then `done` is set to 1 for the binding to
 *  poll. */
typedef struct kvc_dlpack_relay {
  void *inner;
  void (*inner_deleter)(void *inner);
  volatile int32_t done;
  int32_t pad_;
} kvc_dlpack_relay;

/** kvc_dlpack_capsule_destructor() : a PyCapsule destructor for capsules named
 *  "dltensor" (DLManagedTensor) or "dltensor_versioned" (DLManagedTensorVersioned):
 *  calls the tensor's deleter when the capsule dies unconsumed; a consumed capsule
 *  ("used_..." name) is left alone. Uses PyCapsule_IsValid / PyCapsule_GetPointer of
 *  the running interpreter (found with dlsym; none: does nothing) and no other Python
 *  API, so it is safe while an exception is pending. Call with the GIL held. */
KVC_API void kvc_dlpack_capsule_destructor(void *capsule);
/** kvc_dlpack_relay_deleter() / _versioned() : the deleter of a DLManagedTensor /
 *  DLManagedTensorVersioned whose manager_ctx is a kvc_dlpack_relay (see above). */
KVC_API void kvc_dlpack_relay_deleter(void *managed);
KVC_API void kvc_dlpack_relay_deleter_versioned(void *managed);

/** SGLang get_contiguous_buf_infos entry: one registered memory range. */
typedef struct kvc_contiguous_info {
  void *base;
  size_t bytes;
  size_t bytes_per_page;
} kvc_contiguous_info;
/** kvc_kv_pool_contiguous_infos() : transfer-registration view: MHA: K layers then V
 *  layers (then FP4 scales); MLA: one per layer; NSA: KV layers then index-K layers.
 *  Writes at most `cap` entries, the total count to *count. */
KVC_API kvc_status kvc_kv_pool_contiguous_infos(const kvc_kv_pool *pool, kvc_contiguous_info *out,
                                                size_t cap, size_t *count);

/* --- Host offload ------------------------------------------------------------------ */

/** kvc_kv_pool_host_copy_bytes() : bytes kvc_kv_pool_copy_to_host needs for n slots
 *  (all layers, all regions; NSA index pages for the pages the slots cover).
 *  @return KVC_ERR_INVALID_ARGUMENT (and *bytes untouched) when the count does not fit
 *  in size_t. */
KVC_API kvc_status kvc_kv_pool_host_copy_bytes(const kvc_kv_pool *pool, size_t n, size_t *bytes);
/** kvc_kv_pool_copy_to_host() : gathers rows loc[i] (device index vector) of every layer
 *  and region into `host` (pinned memory from kvc_host_pinned_alloc on the CUDA backend),
 *  in ONE kernel launch on `stream` that writes host memory directly; no device-wide
 *  synchronize. The data is valid once the stream reaches that point. Layout: for each
 *  buffer in describe() order, n rows. NSA index pages: requires page-aligned,
 *  page-contiguous runs of loc (as SGLang), copies the covered pages. Capturable: every
 *  launch parameter is a pointer or n, frozen at capture. @return KVC_ERR_UNSUPPORTED for
 *  a NoOp pool, KVC_ERR_INVALID_ARGUMENT for NULL loc or host with n > 0. */
KVC_API kvc_status kvc_kv_pool_copy_to_host(kvc_kv_pool *pool, const void *loc,
                                            kvc_index_type loc_type, size_t n, void *host,
                                            kvc_stream stream);
/** kvc_kv_pool_copy_from_host() : the inverse scatter, one launch.
 *  `host` must stay unchanged until the stream passes the launch. Capturable as
 *  kvc_kv_pool_copy_to_host; same errors. */
KVC_API kvc_status kvc_kv_pool_copy_from_host(kvc_kv_pool *pool, const void *loc,
                                              kvc_index_type loc_type, size_t n, const void *host,
                                              kvc_stream stream);

/** @} */ /* end of kvc_kv_pool */

/* --- SWA KV pool (SGLang SWAKVPool) -------------------------------------------------- */

/** @defgroup kvc_swa_kv_pool SWA KV pool (SGLang SWAKVPool)
 *
 * Two MHA kvc_kv_pools owned by this object: the full pool (size_full tokens, one layer
 * per full layer) and the SWA pool (size_swa tokens, one layer per SWA layer, with its
 * own head_num/head_dim/v_head_dim). Layers are addressed by GLOBAL id and routed by the
 * lists in the config. SWA-side operations need the full->SWA mapping: register the SWA
 * allocator once (kvc_swa_kv_pool_register_allocator). Translation scratch (device int64,
 * translate_capacity entries) is owned by the pool so set_kv/move never allocate.
 * Single writer.
 * @{ */

/** kvc_swa_kv_pool_create()'s arguments. Fill with KVC_SWA_KV_POOL_CONFIG_INIT. */
typedef struct kvc_swa_kv_pool_config {
  size_t struct_size;
  uint32_t version;
  kvc_dtype dtype;
  int64_t size_full; /* tokens of the full pool */
  int64_t size_swa;  /* tokens of the SWA pool */
  int32_t page_size;
  int32_t num_full_layers, num_swa_layers;            /* each >= 0, sum >= 1 */
  int32_t head_num, head_dim, v_head_dim;             /* full layers (v_head_dim 0 = head_dim) */
  int32_t swa_head_num, swa_head_dim, swa_v_head_dim; /* SWA layers; 0 = the full value */
  int32_t pad_;
  const int32_t *full_layer_ids; /* num_full_layers distinct global ids (copied) */
  const int32_t *swa_layer_ids;  /* num_swa_layers distinct global ids (copied) */
  int64_t translate_capacity;    /* tokens translated per launch (0 = 65536) */
  uint64_t reserved_[4];
} kvc_swa_kv_pool_config;

/** The defaults: BF16, page size 1, SWA dims = full dims, 65536 tokens per translate;
 *  sizes, layer counts and lists unset. */
/* clang-format off */
#define KVC_SWA_KV_POOL_CONFIG_INIT \
  { sizeof(kvc_swa_kv_pool_config), KVC_VERSION_NUMBER, KVC_DTYPE_BF16, 0, 0, 1, 0, 0, 0, 0, 0, \
    0, 0, 0, 0, NULL, NULL, 0, {0} }
/* clang-format on */

/** kvc_swa_kv_pool_create() : both pools (zero-filled) and the translation scratch.
 *  @return KVC_ERR_INVALID_ARGUMENT for bad geometry or a layer id listed twice (in
 *  either list), and the errors of kvc_kv_pool_create. Not capturable. */
KVC_API kvc_status kvc_swa_kv_pool_create(kvc_context *ctx, const kvc_swa_kv_pool_config *config,
                                          kvc_swa_kv_pool **out);
/** kvc_swa_kv_pool_destroy() : destroys both owned MHA pools and the scratch; no pending
 *  GPU work may use them. NULL is a no-op. */
KVC_API void kvc_swa_kv_pool_destroy(kvc_swa_kv_pool *pool);
/** kvc_swa_kv_pool_full() / _swa() : the owned pools (NULL when the side has no layers):
 *  use kvc_kv_pool_describe / contiguous_infos / export_dlpack on them for descriptors
 *  (SGLang: contiguous infos = the full pool's, state infos = the SWA pool's). Their
 *  layer ids are LOCAL (0-based) — use kvc_swa_kv_pool_layer() to route. */
KVC_API kvc_kv_pool *kvc_swa_kv_pool_full(const kvc_swa_kv_pool *pool);
KVC_API kvc_kv_pool *kvc_swa_kv_pool_swa(const kvc_swa_kv_pool *pool);
/** kvc_swa_kv_pool_layer() : global layer id -> (*is_swa, *index in that pool).
 *  @return KVC_ERR_INVALID_ARGUMENT for an unknown layer. */
KVC_API kvc_status kvc_swa_kv_pool_layer(const kvc_swa_kv_pool *pool, int32_t layer_id, int *is_swa,
                                         int32_t *index);
/** kvc_swa_kv_pool_register_allocator() : SGLang register_mapping: the pool keeps a
 *  reference to the allocator's device and host mappings (borrowed; the allocator must
 *  outlive its use here). @return KVC_ERR_INVALID_ARGUMENT when its sizes or page size
 *  do not match the pool. */
KVC_API kvc_status kvc_swa_kv_pool_register_allocator(kvc_swa_kv_pool *pool,
                                                      const kvc_swa_allocator *alloc);

/** kvc_swa_kv_pool_set_kv() : set_kv_buffer for a global layer (arguments as
 *  kvc_kv_pool_set_kv; `loc` holds FULL slots). Full layer: written at loc. SWA layer:
 *  written at swa_loc when non-NULL (a device vector the caller translated once per
 *  batch, same type as loc), else at mapping[loc] computed by one extra
 *  translate launch into the pool's scratch (chunks of translate_capacity). Entries
 *  that translate to -1 are skipped; to 0 land in the padding row (SGLang).
 *  Capturable (device pointers and fixed values only). @return KVC_ERR_MISUSE when an
 *  SWA layer needs translation and no allocator is registered. */
KVC_API kvc_status kvc_swa_kv_pool_set_kv(kvc_swa_kv_pool *pool, int32_t layer_id, const void *loc,
                                          const void *swa_loc, kvc_index_type loc_type, size_t n,
                                          const void *k, const void *v, kvc_dtype src_dtype,
                                          int64_t k_stride, int64_t v_stride,
                                          const float *k_scale_device, float k_scale,
                                          const float *v_scale_device, float v_scale,
                                          kvc_stream stream);
/** kvc_swa_kv_pool_move() : SGLang move_kv_cache: the full pool moves tgt <- src (full
 *  slots), then both vectors are translated (two small launches) and the SWA pool moves the
 *  translated rows (-1 skipped). Chunks of translate_capacity pairs are moved one after
 *  the other, each with kvc_kv_pool_move()'s semantics (SGLang's chunks of 256 / 128
 *  pairs, each a simultaneous copy). Capturable.
 *  @return KVC_ERR_INVALID_ARGUMENT for NULL tgt_loc / src_loc with n > 0,
 *  KVC_ERR_MISUSE when the pool has SWA layers and no registered allocator. */
KVC_API kvc_status kvc_swa_kv_pool_move(kvc_swa_kv_pool *pool, const void *tgt_loc,
                                        const void *src_loc, kvc_index_type loc_type, size_t n,
                                        kvc_stream stream);
/** kvc_swa_kv_pool_host_copy_bytes() : bytes of the full part and of the SWA part of an
 *  n-slot offload (the SWA part holds n rows, masked-out rows zero-filled).
 *  @return KVC_ERR_INVALID_ARGUMENT (outputs untouched) when a count overflows size_t. */
KVC_API kvc_status kvc_swa_kv_pool_host_copy_bytes(const kvc_swa_kv_pool *pool, size_t n,
                                                   size_t *full_bytes, size_t *swa_bytes);
/** kvc_swa_kv_pool_copy_to_host() : SGLang get_cpu_copy without syncs: full rows of the
 *  host slots loc[0:n) into host_full; swa_mask[i] = (mapping[loc[i]] > 0), computed from
 *  the HOST mapping; the SWA rows of the masked entries into host_swa (row i; others
 *  zero-filled). The slot vectors travel in one small launch into the pool's scratch
 *  (n <= translate_capacity), then one gather launch per pool; pinned host buffers on
 *  CUDA; valid once `stream` reaches that point. Not capturable.
 *  @return KVC_ERR_INVALID_ARGUMENT for NULL buffers, n > translate_capacity or a slot
 *  out of range; KVC_ERR_MISUSE when the pool has SWA layers and no registered
 *  allocator; KVC_ERR_HOST_OOM. */
KVC_API kvc_status kvc_swa_kv_pool_copy_to_host(kvc_swa_kv_pool *pool, const int64_t *loc, size_t n,
                                                void *host_full, void *host_swa, uint8_t *swa_mask,
                                                kvc_stream stream);
/** kvc_swa_kv_pool_copy_from_host() : SGLang load_cpu_copy at new slots loc[0:n): full
 *  rows always; SWA row i only where saved_mask[i] and the new slot has an SWA peer now
 *  (host mapping). Not capturable. @return as kvc_swa_kv_pool_copy_to_host. */
KVC_API kvc_status kvc_swa_kv_pool_copy_from_host(kvc_swa_kv_pool *pool, const int64_t *loc,
                                                  size_t n, const void *host_full,
                                                  const void *host_swa, const uint8_t *saved_mask,
                                                  kvc_stream stream);

/** @} */ /* end of kvc_swa_kv_pool */

/* --- Mamba state pool (SGLang MambaPool) --------------------------------------------- */

/** @defgroup kvc_mamba_pool Mamba state pool (SGLang MambaPool)
 *
 * One device allocation, zero-filled at create, carved into whole tensors in SGLang's
 * field order (each 256-byte aligned, row-major, contiguous):
 *   conv[i]               (L, size + 1, *conv_shape[i])        conv_dtype
 *   temporal              (L, size + 1, t0, t1, t2)            temporal_dtype
 *   intermediate_ssm      (L, spec + 1, D, t0, t1, t2)         temporal_dtype  } only when
 *   intermediate_conv[i]  (L, spec + 1, D, c_i[0], c_i[1])     conv_dtype      } D > 0
 * L = num_layers, spec = spec_state_size, D = num_draft_tokens. Slot 0 is padding and is
 * never handed out. "State tensors" are conv[*] and temporal: the ones zeroed on alloc,
 * copied by copy_from, offloaded and listed in the transfer infos; the speculative
 * (intermediate) tensors are zeroed only at create, as in SGLang.
 *
 * Slot bookkeeping is on the host: a FIFO free list (initially 1..size; alloc takes from
 * the front, free appends at the back — SGLang's order), so ids are decided
 * without touching the device. Slot lists passed in are host int32 arrays; the ids
 * travel to the device inside the kernel's parameters (or one staged upload when long),
 * so each state-changing call is ONE launch over all state tensors and layers. Those
 * launches are not graph-capturable (their parameters change each call). Single writer
 * per pool; the tensors may be read concurrently by the model on any stream (ordering is
 * the caller's business: the library's launches go on the stream you pass).
 * @{ */

#define KVC_MAMBA_MAX_CONV 4 /* conv state shapes per pool */

/** A conv state shape: ndim (1..3) sizes, per slot (the L and slot dims excluded). */
typedef struct kvc_mamba_shape {
  int32_t ndim;
  int32_t pad_;
  int64_t dims[3];
} kvc_mamba_shape;

/** Pool flags. */
/* clang-format off */
#define KVC_MAMBA_POOL_NO_ZERO_ON_ALLOC 0x1u /* alloc/group_begin do not zero the new slots
                                                (newer SGLang: the engine zeroes them later
                                                with kvc_mamba_pool_clear_slots) */
/* clang-format on */

/** kvc_mamba_pool_create()'s arguments. Fill with KVC_MAMBA_POOL_CONFIG_INIT or
 *  kvc_mamba_pool_config_default(). */
typedef struct kvc_mamba_pool_config {
  size_t struct_size;
  uint32_t version;
  int32_t size;             /* state slots (>= 1, < 2^31 - 1); tensors hold size + 1 rows */
  int32_t num_layers;       /* L: Mamba layers (>= 1) */
  int32_t num_conv;         /* conv state shapes, 1..KVC_MAMBA_MAX_CONV */
  const int32_t *layer_ids; /* L distinct global layer ids (>= 0), the Mamba layers in pool
                               order; NULL = 0..L-1. Copied at create. */
  const kvc_mamba_shape *conv_shapes; /* num_conv shapes. Copied at create. */
  kvc_dtype conv_dtype;               /* F32 / F16 / BF16 (any valid dtype is stored as bytes) */
  kvc_dtype temporal_dtype;           /* SSM state dtype */
  int64_t temporal_shape[3];          /* heads, head_dim, state_size (each >= 1) */
  int32_t spec_state_size;            /* intermediate rows = spec_state_size + 1 (>= 0) */
  int32_t num_draft_tokens;           /* D: 0 = no speculative buffers; > 0 needs every conv shape
                                to have ndim >= 2 (only c[0], c[1] are used, as SGLang) */
  uint32_t flags;                     /* KVC_MAMBA_POOL_* */
  int32_t pad_;
  uint64_t reserved_[4]; /* must be zero */
} kvc_mamba_pool_config;

/** The defaults: BF16 conv and F32 temporal states, layers 0..L-1, no speculative
 *  buffers, zero on alloc; sizes and shapes unset. */
/* clang-format off */
#define KVC_MAMBA_POOL_CONFIG_INIT                                                         \
  { sizeof(kvc_mamba_pool_config), KVC_VERSION_NUMBER, 0, 0, 0, NULL, NULL,                 \
    KVC_DTYPE_BF16, KVC_DTYPE_F32, {0, 0, 0}, 0, 0, 0u, 0, {0} }
/* clang-format on */

/** kvc_mamba_pool_config_default() : fills `config` with KVC_MAMBA_POOL_CONFIG_INIT. */
KVC_API void kvc_mamba_pool_config_default(kvc_mamba_pool_config *config);

/** kvc_mamba_pool_create() : allocates every tensor in one device allocation (through the
 *  context's device allocator), zero-fills it, resolves (NVRTC-compiles on first use,
 *  cached) the pool's kernels, then synchronizes the default stream once. Free list
 *  1..size. The layer-id and shape arrays are copied; the caller keeps its own.
 *  @return KVC_ERR_INVALID_ARGUMENT for bad sizes, shapes, dtypes, duplicate or negative
 *  layer ids, byte counts that overflow; KVC_ERR_VERSION for an unknown struct_size or
 *  major version; KVC_ERR_DEVICE_OOM / KVC_ERR_HOST_OOM; KVC_ERR_NVRTC. *out is written
 *  only on success. Not capturable. */
KVC_API kvc_status kvc_mamba_pool_create(kvc_context *ctx, const kvc_mamba_pool_config *config,
                                         kvc_mamba_pool **out);
/** kvc_mamba_pool_destroy() : frees the device allocation and host metadata. No work on
 *  the pool's tensors may be pending. NULL is a no-op. */
KVC_API void kvc_mamba_pool_destroy(kvc_mamba_pool *pool);

/** kvc_mamba_pool_size() : usable slots (config.size); 0 for an invalid handle. */
KVC_API int32_t kvc_mamba_pool_size(const kvc_mamba_pool *pool);
/** kvc_mamba_pool_available() : free slots in the free list (SGLang available_size; ids
 *  reserved by an open alloc group are not counted). 0 for an invalid handle. */
KVC_API int32_t kvc_mamba_pool_available(const kvc_mamba_pool *pool);
/** kvc_mamba_pool_is_held() : 1 if `slot` is handed out, else 0 (also for bad input). */
KVC_API int kvc_mamba_pool_is_held(const kvc_mamba_pool *pool, int32_t slot);

/** kvc_mamba_pool_alloc() : SGLang MambaPool.alloc(n): the first n free ids, front of
 *  the FIFO, written to out_slots (host, n entries), and their rows zeroed in every state
 *  tensor and layer with ONE launch on `stream` (none with NO_ZERO_ON_ALLOC). Inside an
 *  alloc group, n == 1 hands out the next reserved id instead (already zeroed by
 *  group_begin; no launch); n > 1 bypasses the reservation, as SGLang. n == 0: no-op.
 *  @return KVC_ERR_OUT_OF_SLOTS when fewer than n ids are free (nothing changed; SGLang
 *  returns None); KVC_ERR_CUDA when the launch fails (nothing changed). Not capturable. */
KVC_API kvc_status kvc_mamba_pool_alloc(kvc_mamba_pool *pool, size_t n, int32_t *out_slots,
                                        kvc_stream stream);
/** kvc_mamba_pool_free() : appends slots[0:n) (host) at the back of the free list, in
 *  order. State is not cleared. n == 0: no-op. No device work.
 *  @return KVC_ERR_MISUSE (nothing changed) for slot 0, an id outside [1, size], an id not
 *  currently handed out (double free, or reserved by an open group) or listed twice. */
KVC_API kvc_status kvc_mamba_pool_free(kvc_mamba_pool *pool, const int32_t *slots, size_t n);
/** kvc_mamba_pool_alloc_group_begin() : newer SGLang MambaSlotAllocator group: reserves
 *  the first k free ids (when k are available; otherwise reserves nothing and later
 *  allocs take the normal path) and zeroes them in one launch on `stream`, so a batch's
 *  alloc(1) calls cost no launch each. Not capturable.
 *  @return KVC_ERR_MISUSE if a group is open. */
KVC_API kvc_status kvc_mamba_pool_alloc_group_begin(kvc_mamba_pool *pool, size_t k,
                                                    kvc_stream stream);
/** kvc_mamba_pool_alloc_group_end() : returns the reserved ids not handed out to the back
 *  of the free list, in order, and closes the group. @return KVC_ERR_MISUSE if none open. */
KVC_API kvc_status kvc_mamba_pool_alloc_group_end(kvc_mamba_pool *pool);
/** kvc_mamba_pool_clear() : every slot free again in order 1..size, any group closed.
 *  Tensor contents untouched (SGLang clear). No device work. */
KVC_API kvc_status kvc_mamba_pool_clear(kvc_mamba_pool *pool);

/** kvc_mamba_pool_clear_slots() : zeroes rows slots[0:n) (host ids in [0, size]; held or
 *  not) of every state tensor and layer in ONE launch on `stream` (newer SGLang
 *  clear_slots). Speculative tensors untouched. n == 0: no launch. Not capturable.
 *  @return KVC_ERR_INVALID_ARGUMENT for an id out of range (nothing launched). */
KVC_API kvc_status kvc_mamba_pool_clear_slots(kvc_mamba_pool *pool, const int32_t *slots, size_t n,
                                              kvc_stream stream);
/** kvc_mamba_pool_copy_from() : SGLang copy_from: for every state tensor and layer,
 *  row dst[i] = row src[i] (host ids in [0, size]), in ONE launch on `stream`. Overlapping
 *  sets behave as one simultaneous copy (every source read before any target written,
 *  e.g. a swap works): the host sees the overlap and then launches a variant in which
 *  each CTA owns a (tensor, layer, byte tile) and stages all n source tiles in shared
 *  memory before writing; disjoint sets use a plain parallel copy. Pairs with
 *  src == dst are skipped. Speculative tensors untouched. Not capturable.
 *  @return KVC_ERR_INVALID_ARGUMENT for ids out of range or a dst listed twice;
 *  KVC_ERR_UNSUPPORTED for overlapping sets of more than 2048 pairs. */
KVC_API kvc_status kvc_mamba_pool_copy_from(kvc_mamba_pool *pool, const int32_t *src,
                                            const int32_t *dst, size_t n, kvc_stream stream);
/** kvc_mamba_pool_fork_from() : SGLang fork_from: *out_slot = alloc(1), then copy_from(
 *  src, *out_slot) — one launch in all (the copy overwrites every row the zeroing would
 *  have written, so the zero launch is elided; the result is the same).
 *  Not capturable.
 *  @return KVC_ERR_OUT_OF_SLOTS (nothing changed; SGLang None), KVC_ERR_INVALID_ARGUMENT
 *  for src outside [0, size]. */
KVC_API kvc_status kvc_mamba_pool_fork_from(kvc_mamba_pool *pool, int32_t src, int32_t *out_slot,
                                            kvc_stream stream);

/** kvc_mamba_pool_layer_index() : global layer id -> index into the pool's layers
 *  (position in config.layer_ids). @return KVC_ERR_INVALID_ARGUMENT for a layer that is
 *  not a Mamba layer of this pool (SGLang raises ValueError). */
KVC_API kvc_status kvc_mamba_pool_layer_index(const kvc_mamba_pool *pool, int32_t layer_id,
                                              int32_t *index);
/** kvc_mamba_pool_num_layers() / kvc_mamba_pool_layer_id() : L, and the global id of
 *  layer index `index` (-1 if out of range). */
KVC_API int32_t kvc_mamba_pool_num_layers(const kvc_mamba_pool *pool);
KVC_API int32_t kvc_mamba_pool_layer_id(const kvc_mamba_pool *pool, int32_t index);

/* Descriptors. A Mamba pool is described two ways: whole tensors (all layers, with the
 * speculative ones) for a binding that wraps them, and per-layer kvc_buffer_desc views of
 * the state tensors (regions KVC_REGION_MAMBA_CONV / _TEMPORAL) as SGLang's layer cache
 * and transfer registration see them. */

/** A whole Mamba tensor (all layers; up to 6 dims). Shapes/strides in elements. */
typedef struct kvc_mamba_tensor_desc {
  size_t struct_size; /* set by the caller */
  uint32_t version;
  kvc_region_kind region; /* KVC_REGION_MAMBA_* */
  int32_t index;          /* conv / intermediate-conv list position (0 otherwise) */
  kvc_dtype dtype;
  int32_t ndim;
  int32_t device; /* CUDA ordinal, -1 for host memory */
  void *data;
  int64_t shape[6];   /* (L, rows, ...) */
  int64_t strides[6]; /* contiguous row-major */
  int64_t bytes_per_layer;
  int64_t bytes_per_slot; /* one row of one layer */
  int64_t total_bytes;
  int64_t sliceable_dim; /* shape[2]: the TP-sliced dimension (SGLang state dim) */
  uint64_t reserved_[4];
} kvc_mamba_tensor_desc;

/** kvc_mamba_pool_num_tensors() : tensors in SGLang field order: num_conv conv, then
 *  temporal, then (with D > 0) intermediate_ssm and num_conv intermediate conv windows. */
KVC_API int32_t kvc_mamba_pool_num_tensors(const kvc_mamba_pool *pool);
/** kvc_mamba_pool_describe_tensor() : tensor `index` in the order above. `out->
 *  struct_size` must be set by the caller. */
KVC_API kvc_status kvc_mamba_pool_describe_tensor(const kvc_mamba_pool *pool, int32_t index,
                                                  kvc_mamba_tensor_desc *out);

/** kvc_mamba_pool_num_buffers() : per-layer buffers of the STATE tensors:
 *  (num_conv + 1) x L (SGLang mamba2_layer_cache views; intermediates excluded). */
KVC_API int32_t kvc_mamba_pool_num_buffers(const kvc_mamba_pool *pool);
/** kvc_mamba_pool_describe() : buffer `index`; order: conv[0] layers ascending, conv[1]
 *  ..., temporal — the order of the contiguous infos. Shape (size + 1, *state shape),
 *  ndim <= 4; bytes_per_token = bytes_per_page = bytes of one slot. */
KVC_API kvc_status kvc_mamba_pool_describe(const kvc_mamba_pool *pool, int32_t index,
                                           kvc_buffer_desc *out);
/** kvc_mamba_pool_buffer() : the buffer of `region` (MAMBA_CONV with conv_index, or
 *  MAMBA_TEMPORAL) at global `layer_id`. @return KVC_ERR_INVALID_ARGUMENT otherwise. */
KVC_API kvc_status kvc_mamba_pool_buffer(const kvc_mamba_pool *pool, kvc_region_kind region,
                                         int32_t conv_index, int32_t layer_id,
                                         kvc_buffer_desc *out);
/** kvc_mamba_pool_contiguous_infos() : SGLang get_contiguous_buf_infos: per state tensor
 *  (conv in order, then temporal; intermediates skipped), per layer: (layer base, bytes of
 *  the layer, bytes of one slot as bytes_per_page). At most `cap` written; the total
 *  ((num_conv + 1) x L) to *count. */
KVC_API kvc_status kvc_mamba_pool_contiguous_infos(const kvc_mamba_pool *pool,
                                                   kvc_contiguous_info *out, size_t cap,
                                                   size_t *count);
/** kvc_mamba_pool_state_dims() : SGLang get_state_dim_per_tensor: for each entry of the
 *  contiguous infos, the size of dimension 2 of its tensor (conv: c[0]; temporal: t0).
 *  Unlike SGLang, speculative tensors are NOT included, so the list always matches the
 *  contiguous infos one to one (SGLang's longer list does not line up with its own
 *  contiguous infos). Same cap/count rules. */
KVC_API kvc_status kvc_mamba_pool_state_dims(const kvc_mamba_pool *pool, int64_t *out, size_t cap,
                                             size_t *count);
/** kvc_mamba_pool_memory_bytes() : bytes of the state tensors and of the speculative
 *  tensors (either pointer may be NULL). */
KVC_API kvc_status kvc_mamba_pool_memory_bytes(const kvc_mamba_pool *pool, size_t *state_bytes,
                                               size_t *speculative_bytes);

/** kvc_mamba_pool_host_copy_bytes() : bytes the host buffer of an n-slot offload needs:
 *  n x (sum over state tensors of L x bytes per slot). */
KVC_API kvc_status kvc_mamba_pool_host_copy_bytes(const kvc_mamba_pool *pool, size_t n,
                                                  size_t *bytes);
/** kvc_mamba_pool_copy_to_host() : SGLang get_cpu_copy without its syncs: gathers rows
 *  slots[0:n) (host ids in [0, size]) of every state tensor and layer into `host` in ONE
 *  launch on `stream` that writes the host memory directly (CUDA: `host` must be pinned,
 *  from kvc_host_pinned_alloc or registered; it is accessed through unified addressing).
 *  Valid once the stream reaches that point. Layout: for each state tensor (contiguous
 *  infos order), for each layer, n rows of bytes_per_slot. Not capturable.
 *  @return KVC_ERR_INVALID_ARGUMENT for NULL host or ids out of range. */
KVC_API kvc_status kvc_mamba_pool_copy_to_host(kvc_mamba_pool *pool, const int32_t *slots, size_t n,
                                               void *host, kvc_stream stream);
/** kvc_mamba_pool_copy_from_host() : the inverse scatter (SGLang load_cpu_copy), one
 *  launch. `host` must stay unchanged until the stream passes the launch. Duplicate ids:
 *  one unspecified row wins. Not capturable. */
KVC_API kvc_status kvc_mamba_pool_copy_from_host(kvc_mamba_pool *pool, const int32_t *slots,
                                                 size_t n, const void *host, kvc_stream stream);

/** @} */ /* end of kvc_mamba_pool */

/* --- Hybrid pools (SGLang HybridReqToTokenPool, HybridLinearKVPool) ------------------ */

/** @defgroup kvc_hybrid Hybrid pools (SGLang HybridReqToTokenPool, HybridLinearKVPool)
 * @{ */

/* --- Hybrid req-to-token pool (SGLang HybridReqToTokenPool) ------------------------ *
 *
 * Composes a kvc_req_to_token_pool and a kvc_mamba_pool, both created by the caller and
 * borrowed (they must outlive this object; do not free rows/slots behind its back while
 * it tracks them). Per-request state stays with the caller as plain values (row, mamba
 * slot, ping-pong slots), passed in arrays like kvc_req_to_token_pool_alloc. This object
 * owns the device req->mamba mapping (int32, size + 1) and, with track buffers, the
 * ping-pong mapping (int32, (size + 1) x pp), plus their host mirrors; each call writes
 * the changed rows with ONE launch from the mirrors. Not capturable; single writer. */

#define KVC_HYBRID_TRACK 0x1u /* enable_mamba_extra_buffer: ping-pong track buffers */
#define KVC_HYBRID_LAZY 0x2u  /* lazy mode: 1 track slot at alloc, other entries -1 */

/** kvc_hybrid_req_pool_create()'s arguments. Fill with KVC_HYBRID_REQ_POOL_CONFIG_INIT. */
typedef struct kvc_hybrid_req_pool_config {
  size_t struct_size;
  uint32_t version;
  uint32_t flags; /* KVC_HYBRID_* */
  int32_t pp;     /* track width: 2 (overlap schedule) or 1 (0 = 2) */
  int32_t pad_;
  kvc_req_to_token_pool *req_pool; /* borrowed */
  kvc_mamba_pool *mamba_pool;      /* borrowed */
  uint64_t reserved_[4];
} kvc_hybrid_req_pool_config;

/** The defaults: no flags, pp 2; both pools unset. */
/* clang-format off */
#define KVC_HYBRID_REQ_POOL_CONFIG_INIT \
  { sizeof(kvc_hybrid_req_pool_config), KVC_VERSION_NUMBER, 0u, 0, 0, NULL, NULL, {0} }
/* clang-format on */

/** kvc_hybrid_req_pool_create() : zero-filled device mappings (synchronous upload).
 *  @return KVC_ERR_INVALID_ARGUMENT for NULL pools, pp not 1/2, LAZY without TRACK. */
KVC_API kvc_status kvc_hybrid_req_pool_create(kvc_context *ctx,
                                              const kvc_hybrid_req_pool_config *config,
                                              kvc_hybrid_req_pool **out);
/** kvc_hybrid_req_pool_destroy() : frees the mappings (the borrowed pools stay). NULL is
 *  a no-op. */
KVC_API void kvc_hybrid_req_pool_destroy(kvc_hybrid_req_pool *pool);
/** kvc_hybrid_req_pool_pp() : track slots per request (1 or 2); 0 for an invalid handle. */
KVC_API int32_t kvc_hybrid_req_pool_pp(const kvc_hybrid_req_pool *pool);

/** kvc_hybrid_req_pool_alloc() : SGLang alloc(reqs). rows[n], mamba_slots[n] and (with
 *  TRACK) pp_slots[n * pp] are in/out: rows as kvc_req_to_token_pool_alloc; a mamba slot
 *  <= 0 receives a new one (a slot > 0 must be held in the Mamba pool and is kept); a
 *  request whose pp_slots row is all <= 0 gets pp new track slots (LAZY: 1, the rest -1);
 *  order per request: running slot then its track slots (SGLang's order). The Mamba slots are
 *  zeroed by the Mamba pool (one launch) unless it has NO_ZERO_ON_ALLOC; then ONE launch
 *  writes the mapping rows of all n requests. pp_slots may be NULL without TRACK.
 *  Not capturable.
 *  @return KVC_ERR_OUT_OF_SLOTS when rows or Mamba slots run short — the rows taken are
 *  rolled back and nothing changes (SGLang asserts); errors of the composed pools. */
KVC_API kvc_status kvc_hybrid_req_pool_alloc(kvc_hybrid_req_pool *pool, size_t n, int32_t *rows,
                                             int32_t *mamba_slots, int32_t *pp_slots,
                                             kvc_stream stream);
/** kvc_hybrid_req_pool_free_mamba_cache() : SGLang free_mamba_cache(req, keep): frees the
 *  row's Mamba slot and its track slots from the HOST mirror (no readback): keep = -1
 *  frees all, else keep must be 0/1 (< pp); pp 2 frees entry 1 - keep, pp 1 frees
 *  nothing; -1 entries (lazy) are skipped. The freed entries are cleared in the mirrors
 *  and on the device (one launch). The req row itself is freed with
 *  kvc_req_to_token_pool_free. Not capturable.
 *  @return KVC_ERR_MISUSE when the row has no Mamba slot. */
KVC_API kvc_status kvc_hybrid_req_pool_free_mamba_cache(kvc_hybrid_req_pool *pool, int32_t row,
                                                        int32_t keep, kvc_stream stream);
/** kvc_hybrid_req_pool_set_track_slot() : newer SGLang set_mamba_ping_pong_slot: entry
 *  `index` of row's track vector = slot (-1 = none; a slot > 0 must be held in the Mamba
 *  pool); one launch. Not capturable. @return KVC_ERR_UNSUPPORTED without track buffers,
 *  KVC_ERR_INVALID_ARGUMENT for a row or index out of range, KVC_ERR_MISUSE for slot 0,
 *  below -1 or not held. */
KVC_API kvc_status kvc_hybrid_req_pool_set_track_slot(kvc_hybrid_req_pool *pool, int32_t row,
                                                      int32_t index, int32_t slot,
                                                      kvc_stream stream);
/** kvc_hybrid_req_pool_mamba_slot() / _track_slots() : host mirror reads (0 / -1 = none). */
KVC_API int32_t kvc_hybrid_req_pool_mamba_slot(const kvc_hybrid_req_pool *pool, int32_t row);
KVC_API const int32_t *kvc_hybrid_req_pool_track_slots(const kvc_hybrid_req_pool *pool,
                                                       int32_t row);
/** kvc_hybrid_req_pool_mapping() / _track_mapping() : the device mappings (int32; the
 *  track one (size + 1) x pp row-major, NULL without TRACK). */
KVC_API const int32_t *kvc_hybrid_req_pool_mapping(const kvc_hybrid_req_pool *pool);
KVC_API const int32_t *kvc_hybrid_req_pool_track_mapping(const kvc_hybrid_req_pool *pool);
/** kvc_hybrid_req_pool_get_mamba_indices() : out[i] = mapping[rows[i]] (device gather;
 *  rows outside [0, size] give 0). One launch, graph-capturable. */
KVC_API kvc_status kvc_hybrid_req_pool_get_mamba_indices(const kvc_hybrid_req_pool *pool,
                                                         const void *rows, kvc_index_type rows_type,
                                                         int32_t *out, size_t n, kvc_stream stream);
/** kvc_hybrid_req_pool_req_pool() / _mamba_pool() : the borrowed pools (NULL for a bad
 *  handle). */
KVC_API kvc_req_to_token_pool *kvc_hybrid_req_pool_req_pool(const kvc_hybrid_req_pool *pool);
KVC_API kvc_mamba_pool *kvc_hybrid_req_pool_mamba_pool(const kvc_hybrid_req_pool *pool);
/** kvc_hybrid_req_pool_clear() : clears the req pool and the Mamba pool and zeroes both
 *  mappings (host; one device memset each). Not capturable. */
KVC_API kvc_status kvc_hybrid_req_pool_clear(kvc_hybrid_req_pool *pool, kvc_stream stream);

/* --- Hybrid linear KV pool (SGLang HybridLinearKVPool) --------------------------- *
 * A full-attention kvc_kv_pool (MHA, MLA, their FP4 kinds or NoOp; owned) over the
 * full-attention layers
 * only, next to a borrowed Mamba pool. Global layer ids are translated to pool layers;
 * a non-full layer -> KVC_ERR_INVALID_ARGUMENT (SGLang ValueError). */

/** kvc_hybrid_kv_pool_create()'s arguments. Fill with KVC_HYBRID_KV_POOL_CONFIG_INIT. */
typedef struct kvc_hybrid_kv_pool_config {
  size_t struct_size;
  uint32_t version;
  int32_t num_full_layers;
  const int32_t *full_layer_ids; /* distinct global ids (copied) */
  const kvc_kv_pool_config *kv;  /* geometry of the full pool; layer_num/start_layer are
                                     overridden (num_full_layers, 0) */
  kvc_mamba_pool *mamba_pool;    /* borrowed, may be NULL */
  uint64_t reserved_[4];
} kvc_hybrid_kv_pool_config;

/** This header's size and version; layers, geometry and Mamba pool unset. */
/* clang-format off */
#define KVC_HYBRID_KV_POOL_CONFIG_INIT \
  { sizeof(kvc_hybrid_kv_pool_config), KVC_VERSION_NUMBER, 0, NULL, NULL, NULL, {0} }
/* clang-format on */

/** kvc_hybrid_kv_pool_create() : creates the owned full-attention pool from config.kv
 *  (layer_num = num_full_layers, start_layer 0, so the pool's layer i is
 *  full_layer_ids[i]) and the global-id routing table; borrows mamba_pool (it must
 *  outlive this object). Allocates and zero-fills device memory as kvc_kv_pool_create
 *  and synchronizes once; not capturable. *out is written only on success.
 *  @return KVC_ERR_INVALID_ARGUMENT for no layers, a NULL list or geometry, a kind other
 *  than MHA / MLA / their FP4 kinds / NoOp, a layer id outside [0, 2^20) or listed twice;
 *  KVC_ERR_VERSION; the errors of kvc_kv_pool_create. */
KVC_API kvc_status kvc_hybrid_kv_pool_create(kvc_context *ctx,
                                             const kvc_hybrid_kv_pool_config *config,
                                             kvc_hybrid_kv_pool **out);
/** kvc_hybrid_kv_pool_destroy() : destroys the owned full-attention pool. NULL is a
 *  no-op. */
KVC_API void kvc_hybrid_kv_pool_destroy(kvc_hybrid_kv_pool *pool);
/** kvc_hybrid_kv_pool_full() / _mamba() : the full pool (LOCAL layer ids) and the Mamba
 *  pool; descriptors: kvc_kv_pool_describe/contiguous_infos on the first (SGLang
 *  contiguous infos), kvc_mamba_pool_contiguous_infos on the second (state infos). */
KVC_API kvc_kv_pool *kvc_hybrid_kv_pool_full(const kvc_hybrid_kv_pool *pool);
KVC_API kvc_mamba_pool *kvc_hybrid_kv_pool_mamba(const kvc_hybrid_kv_pool *pool);
/** kvc_hybrid_kv_pool_layer() : global id -> full-pool layer (KVC_ERR_INVALID_ARGUMENT). */
KVC_API kvc_status kvc_hybrid_kv_pool_layer(const kvc_hybrid_kv_pool *pool, int32_t layer_id,
                                            int32_t *index);
/** Forwarders with translated layer ids: same contracts as the kvc_kv_pool_* calls.
 *  Plus KVC_ERR_INVALID_ARGUMENT for a layer that is not a full-attention layer of this
 *  pool. */
KVC_API kvc_status kvc_hybrid_kv_pool_set_kv(kvc_hybrid_kv_pool *pool, int32_t layer_id,
                                             const void *loc, kvc_index_type loc_type, size_t n,
                                             const void *k, const void *v, kvc_dtype src_dtype,
                                             int64_t k_stride, int64_t v_stride,
                                             const float *k_scale_device, float k_scale,
                                             const float *v_scale_device, float v_scale,
                                             kvc_stream stream);
KVC_API kvc_status kvc_hybrid_kv_pool_set_mla_kv(kvc_hybrid_kv_pool *pool, int32_t layer_id,
                                                 const void *loc, kvc_index_type loc_type, size_t n,
                                                 const void *nope, const void *rope,
                                                 kvc_dtype src_dtype, int64_t nope_stride,
                                                 int64_t rope_stride, kvc_stream stream);
KVC_API kvc_status kvc_hybrid_kv_pool_gather_kv(kvc_hybrid_kv_pool *pool, int32_t layer_id,
                                                const void *loc, kvc_index_type loc_type, size_t n,
                                                void *k_out, void *v_out, kvc_dtype out_dtype,
                                                kvc_stream stream);
KVC_API kvc_status kvc_hybrid_kv_pool_get_mla_kv(kvc_hybrid_kv_pool *pool, int32_t layer_id,
                                                 const void *loc, kvc_index_type loc_type, size_t n,
                                                 void *nope_out, void *rope_out,
                                                 kvc_dtype out_dtype, kvc_stream stream);
/** kvc_hybrid_kv_pool_buffer() : kvc_kv_pool_buffer at a global full-attention layer
 *  (the descriptor's layer_id is the global id). */
KVC_API kvc_status kvc_hybrid_kv_pool_buffer(const kvc_hybrid_kv_pool *pool, kvc_region_kind region,
                                             int32_t layer_id, kvc_buffer_desc *out);
/** kvc_hybrid_kv_pool_move() : move_kv_cache -> the full pool.
 *  Same contract as kvc_kv_pool_move (capturable). */
KVC_API kvc_status kvc_hybrid_kv_pool_move(kvc_hybrid_kv_pool *pool, const void *tgt_loc,
                                           const void *src_loc, kvc_index_type loc_type, size_t n,
                                           kvc_stream stream);

/** @} */ /* end of kvc_hybrid */

/* --- KV transfer between pools (prefill/decode disaggregation) ----------------------- */

/** @defgroup kvc_transfer KV transfer between pools (prefill/decode disaggregation)
 *
 * A transfer moves the pages of some requests from a source pool to a target pool: a
 * pool of this process (same or another GPU) or of another process, reached over NCCL.
 *
 *   1. Describe each side as a kvc_transfer_layout: the pool's regions (K and V per
 *      layer, MLA latent rows, NSA index-K pages, Mamba states, ...) with their base
 *      addresses, bytes per page and page counts, plus kind, dtype and page size. A
 *      layout is made from a pool, or from the bytes kvc_transfer_layout_serialize()
 *      wrote in another process, so a prefill process can plan against a decode pool it
 *      cannot see.
 *   2. kvc_transfer_plan_create() pairs source page i with target page i (the
 *      concatenated page lists of the requests, as the allocators own them on the host),
 *      refuses layouts that differ (kind, dtype, page size, layers, bytes per row) and
 *      coalesces pages that are consecutive on BOTH sides into one copy per region.
 *      Pure host work: no device read, no launch.
 *   3. Run it: kvc_transfer_plan_copy_local() when both pools live in this process
 *      (device copies, peer copies between GPUs; memcpy on the host backend, the twin CI
 *      runs), or kvc_transfer_plan_send() in the source process and
 *      kvc_transfer_plan_recv() in the target process: grouped ncclSend/ncclRecv on the
 *      caller's communicator. NCCL is loaded at first use with dlopen (libnccl.so.2, or
 *      the path in KVC_NCCL_LIB, read once per process), so the library links and runs
 *      without it.
 *
 * Both processes build the same plan (same two layouts, same page lists): NCCL matches
 * sends to receives by order and size. Addresses are dereferenced only by the process
 * that made the layout from its pool; a layout remembers its process, and executing the
 * side of a plan whose layout came from another process is refused (KVC_ERR_MISUSE).
 * Layouts and plans are immutable after create: any number of threads may read or
 * execute them concurrently. A plan holds copies of what it needs (the layouts may be
 * destroyed after create) and no reference to the pools: it must not be executed after
 * either pool was destroyed.
 * @{ */

/** Pool family recorded in a layout: a kvc_kv_pool_kind value, or this for Mamba. */
#define KVC_TRANSFER_KIND_MAMBA 100

/** kvc_transfer_layout_from_kv_pool() : the layout of every buffer of `pool`, in
 *  kvc_kv_pool_describe() order. MHA/MLA regions count pages of page_size rows (the
 *  last page must be whole: buffers hold size + page_size rows, so ids 0 ..
 *  (size + page_size) / page_size - 1); NSA index-K regions count their own pages (one
 *  row of page_size x 132 bytes each). Host metadata only. The layout is owned by the
 *  caller (kvc_transfer_layout_destroy) and must not outlive the pool's context.
 *  @return KVC_ERR_INVALID_ARGUMENT (NULL, not a live pool), KVC_ERR_UNSUPPORTED for a
 *  NoOp pool (no storage), KVC_ERR_HOST_OOM. Not capturable (no device work at all). */
KVC_API kvc_status kvc_transfer_layout_from_kv_pool(const kvc_kv_pool *pool,
                                                    kvc_transfer_layout **out);
/** kvc_transfer_layout_from_mamba_pool() : the layout of the Mamba pool's STATE buffers
 *  (conv tensors then temporal, per layer: kvc_mamba_pool_describe() order; speculative
 *  tensors are not transferred). A "page" is one state slot (ids 0 .. size), so plans
 *  over Mamba layouts take slot ids as pages and page size 1. Same rules as above. */
KVC_API kvc_status kvc_transfer_layout_from_mamba_pool(const kvc_mamba_pool *pool,
                                                       kvc_transfer_layout **out);
/** kvc_transfer_layout_destroy() : frees the layout. NULL is a no-op. */
KVC_API void kvc_transfer_layout_destroy(kvc_transfer_layout *layout);

/** kvc_transfer_layout_serialize() : writes the layout as a self-checking byte string
 *  (little-endian fixed-width fields, a format version and a checksum; 48 bytes per
 *  region plus 64) into buf[0:cap) for another process. *bytes receives the size always,
 *  so cap = 0 with buf = NULL asks for it. @return KVC_ERR_INVALID_ARGUMENT when
 *  cap < *bytes (nothing written). */
KVC_API kvc_status kvc_transfer_layout_serialize(const kvc_transfer_layout *layout, void *buf,
                                                 size_t cap, size_t *bytes);
/** kvc_transfer_layout_deserialize() : a layout from buf[0:bytes) written by
 *  kvc_transfer_layout_serialize() (any process, any host of the same endianness or
 *  not). Allocation and errors go through `ctx`; the result is owned by the caller.
 *  @return KVC_ERR_INVALID_ARGUMENT for a truncated or corrupted string (bad magic,
 *  checksum, counts, sizes whose products overflow), KVC_ERR_VERSION for an unknown
 *  format version, KVC_ERR_HOST_OOM. *out written only on success. */
KVC_API kvc_status kvc_transfer_layout_deserialize(kvc_context *ctx, const void *buf, size_t bytes,
                                                   kvc_transfer_layout **out);

/** One region of a layout. */
typedef struct kvc_transfer_region_info {
  kvc_region_kind region;
  int32_t layer_id; /* global layer id */
  int32_t index;    /* Mamba conv tensor index (0 otherwise) */
  int32_t device;   /* CUDA ordinal of the memory, -1 for host memory */
  kvc_dtype dtype;  /* element type of the region (kvc_buffer_desc.dtype) */
  int32_t pad_;
  uint64_t base;      /* address in the owning process */
  int64_t page_bytes; /* bytes of one page (index-K: one page row; Mamba: one slot) */
  int64_t pages;      /* whole pages in the region */
} kvc_transfer_region_info;

/** kvc_transfer_layout_num_regions() : regions of the layout (0 for NULL). */
KVC_API int32_t kvc_transfer_layout_num_regions(const kvc_transfer_layout *layout);
/** kvc_transfer_layout_region() : region `index` (0 .. num_regions-1).
 *  @return KVC_ERR_INVALID_ARGUMENT for NULL or an index out of range. */
KVC_API kvc_status kvc_transfer_layout_region(const kvc_transfer_layout *layout, int32_t index,
                                              kvc_transfer_region_info *out);

/** kvc_transfer_plan_create() : plans moving page src_pages[i] of `src` to page
 *  dst_pages[i] of `dst` in every region, i < n_pages (host arrays, read during the call
 *  only). Pairs are grouped into runs — pages consecutive on both sides — and sorted by
 *  source page; the plan's copies are, for each region in layout order, one copy per run:
 *  (region, run.src_page x page_bytes, run.dst_page x page_bytes, run.length x
 *  page_bytes). That is the fewest copies for these pairs: a copy covers one run. A source
 *  page may be listed twice (copied to two targets); a target page may not. n_pages == 0
 *  gives an empty plan (no copies). Allocation and errors go through `ctx`.
 *  @return KVC_ERR_INVALID_ARGUMENT naming the difference when the layouts differ in
 *  pool kind, dtype, page size, region count (layer count), a region's kind / layer /
 *  index / dtype, or its bytes per page (row bytes: head count, head dim, lora rank); for a page
 *  id outside [0, pages) of its side, a target page listed twice, NULL arrays with
 *  n_pages > 0, sizes that overflow; KVC_ERR_HOST_OOM. *out is written only on success;
 *  nothing else changes. Host only, O(n log n). */
KVC_API kvc_status kvc_transfer_plan_create(kvc_context *ctx, const kvc_transfer_layout *src,
                                            const kvc_transfer_layout *dst,
                                            const int64_t *src_pages, const int64_t *dst_pages,
                                            size_t n_pages, kvc_transfer_plan **out);
/** kvc_transfer_plan_destroy() : frees the plan. No execution of it may be pending on
 *  the host (device work already enqueued does not reference the plan). NULL: no-op. */
KVC_API void kvc_transfer_plan_destroy(kvc_transfer_plan *plan);

/** One copy of a plan: `bytes` from offset src_offset of the source region to offset
 *  dst_offset of the target region (offsets from the region bases). */
typedef struct kvc_transfer_copy {
  int32_t region_index; /* index into both layouts' regions */
  kvc_region_kind region;
  int32_t layer_id;
  int32_t index; /* Mamba conv tensor index */
  uint64_t src_offset;
  uint64_t dst_offset;
  uint64_t bytes;
} kvc_transfer_copy;

/** kvc_transfer_plan_num_copies() : copies of the plan (runs x regions); 0 for NULL. */
KVC_API size_t kvc_transfer_plan_num_copies(const kvc_transfer_plan *plan);
/** kvc_transfer_plan_num_runs() : runs of consecutive page pairs (copies per region). */
KVC_API size_t kvc_transfer_plan_num_runs(const kvc_transfer_plan *plan);
/** kvc_transfer_plan_total_bytes() : bytes all copies move (computed at create, where
 *  its overflow is checked). 0 for NULL. */
KVC_API uint64_t kvc_transfer_plan_total_bytes(const kvc_transfer_plan *plan);
/** kvc_transfer_plan_copy() : copy `index` (0 .. num_copies-1) in execution order:
 *  region-major, runs by ascending source page within a region.
 *  @return KVC_ERR_INVALID_ARGUMENT for NULL or an index out of range. */
KVC_API kvc_status kvc_transfer_plan_copy(const kvc_transfer_plan *plan, size_t index,
                                          kvc_transfer_copy *out);

/** kvc_transfer_plan_copy_local() : runs the plan inside this process: the source pool
 *  belongs to src_ctx, the target pool to dst_ctx (the same context for two pools of one
 *  context). Host backend (both contexts): memcpy now. CUDA, same device:
 *  device-to-device copies on `stream` (a stream of dst_ctx's device); different
 *  devices: peer copies (after enabling peer access from dst to src when the devices
 *  allow it; otherwise the driver stages them). Regions evenly spaced on both sides (a
 *  pool's layers are) share one strided copy per run (cuMemcpy2DAsync,
 *  cuMemcpy3DPeerAsync), so the driver calls are runs x region groups. Never
 *  synchronizes; the target pages are valid once `stream` passes the copies, and the
 *  source pages must not be rewritten before that. Capturable when both pools are on one
 *  device (memcpy nodes; no allocation, no read-back).
 *  @return KVC_ERR_INVALID_ARGUMENT (NULL, a context whose device or backend is not the
 *  one its layout was made on), KVC_ERR_UNSUPPORTED (one context host, one CUDA),
 *  KVC_ERR_MISUSE (a side made from another process's layout), checked before any copy
 *  is enqueued (then nothing changed); KVC_ERR_CUDA when the driver refuses a copy:
 *  copies enqueued before it still run, so the target pages are unspecified (the source
 *  is never written). Overlapping source and target pages of one pool: unspecified. */
KVC_API kvc_status kvc_transfer_plan_copy_local(const kvc_transfer_plan *plan, kvc_context *src_ctx,
                                                kvc_context *dst_ctx, kvc_stream stream);

/** kvc_transfer_plan_send() : the source side of the plan over NCCL: between
 *  ncclGroupStart and ncclGroupEnd, one ncclSend (ncclInt8, `bytes` elements) per plan
 *  copy, in plan order, from the source pool to rank `peer` of `nccl_comm` (an ncclComm_t
 *  the caller created and owns, whose device is ctx's), on `stream`. The peer must call
 *  kvc_transfer_plan_recv() with an identical plan. Never synchronizes the stream; the
 *  source pages must not be rewritten before the stream passes the transfer. Returns
 *  once NCCL accepted the group (with a blocking communicator, when it is enqueued; a
 *  non-blocking one may report ncclInProgress, taken as success: poll
 *  ncclCommGetAsyncError). An empty plan makes no NCCL call. Capturable when NCCL
 *  supports capturing its point-to-point operations on `stream` (NCCL >= 2.9).
 *  @return KVC_ERR_INVALID_ARGUMENT (NULL plan/ctx/comm, the source layout's device is
 *  not ctx's, peer < 0), KVC_ERR_UNSUPPORTED (host backend; NCCL cannot be loaded: see
 *  kvc_last_error), KVC_ERR_MISUSE (the source layout came from another process),
 *  KVC_ERR_CUDA when NCCL fails (its error string in kvc_last_error; what it already
 *  queued may run). */
KVC_API kvc_status kvc_transfer_plan_send(const kvc_transfer_plan *plan, kvc_context *ctx,
                                          void *nccl_comm, int peer, kvc_stream stream);
/** kvc_transfer_plan_recv() : the target side: one ncclRecv per plan copy into the
 *  target pool, from rank `peer`, grouped, on `stream`. Same rules as _send with the
 *  target layout in place of the source one; target pages are valid once the stream
 *  passes the group. */
KVC_API kvc_status kvc_transfer_plan_recv(const kvc_transfer_plan *plan, kvc_context *ctx,
                                          void *nccl_comm, int peer, kvc_stream stream);

/** kvc_transfer_pages_from_slots() : the page ids of one request's KV, from its token
 *  slots (host int64, e.g. kvc_flow_row_slots(flow, row, 0, len, slots)): a paged
 *  allocator keeps token i at offset i % page_size of its page, so page k is
 *  slots[k * page_size] / page_size; ceil(n_tokens / page_size) ids go to out_pages
 *  (capacity cap), their count to *n_pages. Page size 1: the slots themselves. Append
 *  the requests' lists on each side to build a plan. Pure host function.
 *  @return KVC_ERR_INVALID_ARGUMENT (nothing written) for NULL arrays, page_size < 1,
 *  cap too small, or a slot that is not where that layout puts it (negative, a page
 *  not starting at offset 0, a token off its page; the message names it). */
KVC_API kvc_status kvc_transfer_pages_from_slots(const int64_t *slots, size_t n_tokens,
                                                 int32_t page_size, int64_t *out_pages, size_t cap,
                                                 size_t *n_pages);

/** kvc_transfer_nccl_version() : loads NCCL if not yet loaded (once per process) and
 *  writes its version code (e.g. 22105 for 2.21.5) to *version.
 *  @return KVC_ERR_UNSUPPORTED when libnccl.so.2 (or KVC_NCCL_LIB) cannot be loaded or
 *  lacks an entry point (the reason in kvc_last_error(ctx); ctx may be NULL). */
KVC_API kvc_status kvc_transfer_nccl_version(kvc_context *ctx, int *version);

/** @} */ /* end of kvc_transfer */

/** @} */ /* end of kvc_pools */

/* ===================================================================================
 * PART 6 — Level-1 ops on raw device pointers
 * =================================================================================== */

/** @defgroup kvc_ops Level-1 ops on raw device pointers
 *
 * Every op enqueues exactly one kernel on `stream` (none when n == 0), allocates
 * nothing, reads nothing back, and is graph-capturable. Index arguments are validated on
 * the host only as far as the host can see them (NULL pointers, sizes, strides); device
 * values out of range are not dereferenced: the kernels bound every index they read or
 * write (entries with a row outside [0, num_rows) or a position outside [0, row_stride)
 * are skipped). The host backend runs the C reference of the same kernel.
 * @{ */

/** kvc_get_last_loc() : last_loc[i] = req_to_token[rows[i], prefix_lens[i] - 1], or -1
 *  when prefix_lens[i] <= 0. The int32 table value is sign-extended to `lens_type`.
 *  @param req_to_token  device int32 table of num_rows x row_stride
 *  @param rows          device vector of n request rows (`rows_type`)
 *  @param prefix_lens   device vector of n lengths (`lens_type`)
 *  @param out_last_loc  device vector of n outputs in `lens_type`
 *  @return KVC_ERR_INVALID_ARGUMENT for NULL pointers with n > 0, a non-positive
 *  stride, or n, num_rows or row_stride above INT32_MAX (the kernel indexes in int32:
 *  SGLang's tables are far below it). */
KVC_API kvc_status kvc_get_last_loc(kvc_context *ctx, const int32_t *req_to_token, int64_t num_rows,
                                    int64_t row_stride, const void *rows, kvc_index_type rows_type,
                                    const void *prefix_lens, kvc_index_type lens_type,
                                    void *out_last_loc, size_t n, kvc_stream stream);

/** kvc_write_req_to_token() : for each request i (row r = rows[i], p = prefix_lens[i],
 *  s = seq_lens[i]): req_to_token[r, 0:p) = prefix_ptrs[i][0:p) (int64 slots narrowed to
 *  int32; skipped when p == 0 or prefix_ptrs[i] == 0) and req_to_token[r, p:s) =
 *  out_cache_loc[O_i : O_i + s - p) with O_i = sum_{j<i}(s_j - p_j). One launch; the
 *  offsets come from a block-parallel prefix sum, not SGLang's O(n^2) loop.
 *  @param prefix_ptrs  device vector of n device addresses of int64 prefix-slot vectors
 *                      (may be NULL: no prefix copy at all)
 *  @param out_cache_loc device int64 vector of sum(s - p) slots */
KVC_API kvc_status kvc_write_req_to_token(kvc_context *ctx, int32_t *req_to_token, int64_t num_rows,
                                          int64_t row_stride, const void *rows,
                                          kvc_index_type rows_type, const uint64_t *prefix_ptrs,
                                          const void *prefix_lens, const void *seq_lens,
                                          kvc_index_type lens_type, const int64_t *out_cache_loc,
                                          size_t n, kvc_stream stream);

/** kvc_alloc_extend_fill() : SGLang's alloc_extend kernel. For each request i with prefix
 *  p, new length s and last_loc l (slot of token p-1, or -1), writes its s - p new slots
 *  to out[O_i ...] in three parts: the rest of the prefix's partial page (l+1, l+2, ...),
 *  whole new pages free_pages[S_i ...], and a final partial page free_pages[S_i+n_i-1],
 *  where n_i = ceil(s/ps) - ceil(p/ps), S_i = sum_{j<i} n_j, O_i = sum_{j<i} (s_j - p_j).
 *  The kernel never reads free_pages past num_free_pages: a slot that would need a page
 *  beyond it is written as 0 (the padding slot). Check capacity on the host first (the
 *  allocator objects do). Does not pop the pages: that is the caller's bookkeeping.
 *  @param free_pages device int64 page ids, front first
 *  @param out        device int64 vector of sum(s - p) slots */
KVC_API kvc_status kvc_alloc_extend_fill(kvc_context *ctx, const void *prefix_lens,
                                         const void *seq_lens, kvc_index_type lens_type,
                                         const int64_t *last_loc, const int64_t *free_pages,
                                         int64_t num_free_pages, int64_t page_size, int64_t *out,
                                         size_t n, kvc_stream stream);

/** kvc_alloc_decode_fill() : SGLang's alloc_decode kernel: one new token per request with
 *  new length s: out[i] = last_loc[i] + 1 if (s - 1) % ps != 0, else
 *  free_pages[S_i] * ps with S_i = number of j < i that open a new page. Same bound rule
 *  as kvc_alloc_extend_fill. `last_loc` is int32 or int64 (`last_loc_type`). */
KVC_API kvc_status kvc_alloc_decode_fill(kvc_context *ctx, const void *seq_lens,
                                         kvc_index_type lens_type, const void *last_loc,
                                         kvc_index_type last_loc_type, const int64_t *free_pages,
                                         int64_t num_free_pages, int64_t page_size, int64_t *out,
                                         size_t n, kvc_stream stream);

/** kvc_store_kv() : SGLang store_cache on buffers the engine owns: for i < n with
 *  s = loc[i] in [0, num_rows): the k_row_bytes bytes at k + i*k_stride are copied to
 *  k_cache + s*k_cache_stride, and the v_row_bytes bytes at v + i*v_stride to
 *  v_cache + s*v_cache_stride, in ONE launch for K and V together (K and V widths may
 *  differ). A plain byte copy — the same kernel as kvc_kv_pool_set_kv's copy path —
 *  with 16-byte accesses when every pointer, stride and row length allows (8/4/2/1
 *  otherwise). Slots outside [0, num_rows) (negative included) are skipped, never
 *  written (SGLang asserts on the device instead). Duplicate slots: one row wins.
 *  @param k_cache_stride, v_cache_stride  row strides of the caches in BYTES (0 = row bytes)
 *  @param k_stride, v_stride              row strides of the inputs in BYTES (0 = row bytes)
 *  @param v_row_bytes  0 = store K only (v_cache and v may then be NULL)
 *  @param loc          device vector of n slots (`loc_type`)
 *  @return KVC_ERR_INVALID_ARGUMENT for NULL pointers with n > 0, row bytes <= 0,
 *  num_rows <= 0 or a stride smaller than its row. n == 0: no launch. Enqueues on
 *  `stream`, never synchronizes, graph-capturable; inputs are never modified. */
KVC_API kvc_status kvc_store_kv(kvc_context *ctx, void *k_cache, void *v_cache,
                                int64_t k_cache_stride, int64_t v_cache_stride, int64_t num_rows,
                                const void *k, const void *v, int64_t k_stride, int64_t v_stride,
                                int64_t k_row_bytes, int64_t v_row_bytes, const void *loc,
                                kvc_index_type loc_type, size_t n, kvc_stream stream);

/** How an MLA latent-row buffer stores a token's row (SGLang MLATokenToKVPool and its
 *  FP4 / NSA variants). R = kv_lora_rank, Q = qk_rope_head_dim. */
typedef enum kvc_mla_format {
  KVC_MLA_ROWS = 0,   /* one row of R + Q elements of `dtype`: [nope | rope] */
  KVC_MLA_FP4 = 1,    /* (R+Q)/2 bytes of packed e2m1 (low nibble first) in `data` plus
                         (R+Q)/16 scale bytes in `scale`; one power-of-two scale per 16
                         consecutive values of the concatenated row (byte = exponent + 127) */
  KVC_MLA_NSA_FP8 = 2 /* DeepSeek NSA 656-byte rows (R = 512, Q = 64): bytes [0, 512) nope
                         as fp8 e4m3 quantized per 128-value tile, [512, 528) the 4 tile
                         scales (f32), [528, 656) rope as 64 bf16 */
} kvc_mla_format;

/** An engine-owned MLA buffer of one layer, for kvc_set_mla_kv / kvc_get_mla_kv. Fill
 *  with KVC_MLA_BUFFER_INIT, then set the fields. */
typedef struct kvc_mla_buffer {
  size_t struct_size; /* sizeof(kvc_mla_buffer) as the caller compiled it */
  uint32_t version;   /* KVC_VERSION_NUMBER */
  kvc_mla_format format;
  void *data;               /* device rows (ROWS: elements of dtype; FP4/NSA: bytes) */
  void *scale;              /* FP4: device scale rows; otherwise unused */
  int64_t num_rows;         /* rows of the buffer: slots outside [0, num_rows) are skipped */
  int64_t row_stride;       /* distance between rows of `data`, in its elements (ROWS: of
                             dtype; FP4/NSA: bytes). 0 = dense (R+Q, (R+Q)/2, 656) */
  int64_t scale_stride;     /* FP4: bytes between scale rows; 0 = dense ((R+Q)/16) */
  kvc_dtype dtype;          /* ROWS: element type (f32, f16, bf16, fp8_e4m3, fp8_e5m2);
                             FP4 / NSA: ignored */
  int32_t kv_lora_rank;     /* R >= 1 */
  int32_t qk_rope_head_dim; /* Q >= 0 */
  int32_t pad_;
  uint64_t reserved_[4]; /* must be zero */
} kvc_mla_buffer;

/** The defaults: ROWS format, BF16, dense strides; pointers, rows and dims unset. */
/* clang-format off */
#define KVC_MLA_BUFFER_INIT \
  { sizeof(kvc_mla_buffer), KVC_VERSION_NUMBER, KVC_MLA_ROWS, NULL, NULL, 0, 0, 0, KVC_DTYPE_BF16, 0, 0, 0, {0} }
/* clang-format on */

/** kvc_set_mla_kv() : SGLang set_mla_kv_buffer (and the NSA fp8 quantizer, and the FP4
 *  MLA writer) on an engine's own buffer: for i < n with s = loc[i] in [0, num_rows),
 *  row s = [nope[i] (R values) | rope[i] (Q values)] converted from src_dtype:
 *    ROWS:    element-wise conversion to buf->dtype (round to nearest even; fp8 targets
 *             saturate to the finite range, no scale; equal dtypes copy the bits).
 *    FP4:     each 16-value block of the concatenated row: e = ceil(log2(amax / 6))
 *             (amax floored at 1e-12), scale byte e + 127, codes = nearest e2m1 of
 *             x * 2^-e (ties up), as SGLang's FP4 MLA writer.
 *    NSA_FP8: per 128-value nope tile s = max|y| / 448, codes = fp8_e4m3(y * (1/s))
 *             (saturating RNE), as SGLang's quantize_k_cache; rope converted to bf16.
 *             Defined where SGLang is not: an all-zero tile stores scale 0 and zero
 *             codes (decodes to zeros); zeros in a tile whose 1/s overflows stay zero.
 *  Slots outside [0, num_rows) are skipped (never written); duplicate slots: one
 *  unspecified winner per row. No DCP (decode-context-parallel) sharding.
 *  @param loc          device vector of n slots, int32 or int64 (`loc_type`)
 *  @param nope         device n x R values of src_dtype, row stride nope_stride elements
 *                      (0 = R)
 *  @param rope         device n x Q values of src_dtype, row stride rope_stride elements
 *                      (0 = Q); may be NULL when Q == 0
 *  @param src_dtype    f32, f16, bf16, fp8_e4m3 or fp8_e5m2 (bits as stored)
 *  Accesses are 16 bytes wide when R, Q, the strides and the base addresses allow it, and
 *  narrower otherwise (any element-aligned address works). FP4 needs `data` 8-byte
 *  aligned with row_stride % 8 == 0; NSA needs `data` 16-byte aligned with row_stride %
 *  16 == 0 (KVC_ERR_INVALID_ARGUMENT otherwise).
 *  One launch on `stream` (none when n == 0), never synchronizes; compiles the kernel for
 *  (format, dtypes, R, Q, access width) on first use (NVRTC, cached), graph-capturable
 *  once compiled. Inputs are never modified.
 *  @return KVC_ERR_INVALID_ARGUMENT for NULL pointers with n > 0, bad dims or strides, an
 *  unknown format or dtype, NSA with R != 512 / Q != 64, FP4 with (R+Q) % 16 != 0;
 *  KVC_ERR_VERSION for an unknown struct size; KVC_ERR_NVRTC / KVC_ERR_CUDA. */
KVC_API kvc_status kvc_set_mla_kv(kvc_context *ctx, const kvc_mla_buffer *buf, const void *loc,
                                  kvc_index_type loc_type, size_t n, const void *nope,
                                  const void *rope, kvc_dtype src_dtype, int64_t nope_stride,
                                  int64_t rope_stride, kvc_stream stream);

/** kvc_get_mla_kv() : SGLang get_mla_kv_buffer without its power-of-two restriction and
 *  with the quantized formats: for i < n, nope_out[i] = the first R values and
 *  rope_out[i] = the last Q values of row loc[i], converted to out_dtype (FP4 and NSA
 *  rows are dequantized: e2m1 x 2^(byte-127), fp8 code x tile scale, rope bf16; ROWS of
 *  an equal dtype are copied bit for bit). Rows whose slot is outside [0, num_rows) read
 *  as zeros. Either output may be NULL (that part is neither read nor written). Strides
 *  as in kvc_set_mla_kv, in elements of out_dtype (0 = dense). out_dtype: f32, f16,
 *  bf16, fp8_e4m3, fp8_e5m2. One launch, never synchronizes, graph-capturable once
 *  compiled; same return values as kvc_set_mla_kv. */
KVC_API kvc_status kvc_get_mla_kv(kvc_context *ctx, const kvc_mla_buffer *buf, const void *loc,
                                  kvc_index_type loc_type, size_t n, void *nope_out, void *rope_out,
                                  kvc_dtype out_dtype, int64_t nope_stride, int64_t rope_stride,
                                  kvc_stream stream);

/** kvc_swa_translate() : level-1 op (SGLang translate_loc_from_full_to_swa): out[i] =
 *  mapping[loc[i]] for loc[i] in [0, mapping_len); -1 (and any other out-of-range loc)
 *  gives -1. `loc` and `out` are device vectors of int32 or int64; out may alias loc
 *  when both types match. ONE launch on `stream` (none when n == 0), graph-capturable. */
KVC_API kvc_status kvc_swa_translate(kvc_context *ctx, const int64_t *mapping, int64_t mapping_len,
                                     const void *loc, kvc_index_type loc_type, void *out,
                                     kvc_index_type out_type, size_t n, kvc_stream stream);

/** @} */ /* end of kvc_ops */

/* ===================================================================================
 * PART 7 — Diagnostics: check mode, audits, canary mode, compile check
 * =================================================================================== */

/** @defgroup kvc_diagnostics Diagnostics: check mode, audits, canary mode, compile check
 * @{ */

/** kvc_context_check_mode() : non-zero when check mode is on (flag or KVC_CHECK=1). */
KVC_API int kvc_context_check_mode(const kvc_context *ctx);

/** kvc_req_to_token_pool_check() : full O(size) audit of the host metadata: every free
 *  list entry a distinct free row in [1, size], held + free == size, row 0 never free or
 *  held. Also run after every mutating call in check mode. Reads no device memory.
 *  @return KVC_ERR_INTERNAL with a description when violated. */
KVC_API kvc_status kvc_req_to_token_pool_check(const kvc_req_to_token_pool *pool);
/** kvc_req_to_token_pool_audit_device() : kvc_req_to_token_pool_check, then copies the
 *  device table back (row by row through host memory) and compares every held row with
 *  the host mirror. SYNCHRONIZES `stream` (waits for queued writes first): a debugging
 *  and test call, never for the scheduler path. Not capturable.
 *  @return KVC_ERR_INTERNAL naming the
 *  first row and position that differ, KVC_ERR_HOST_OOM, KVC_ERR_CUDA. */
KVC_API kvc_status kvc_req_to_token_pool_audit_device(const kvc_req_to_token_pool *pool,
                                                      kvc_stream stream);

/** kvc_allocator_check() : full O(pages) audit of the host metadata (free list entries
 *  unique and free, counts conserved, page 0 never free). Also run after every mutating
 *  call in check mode. @return KVC_ERR_INTERNAL with a description when violated. */
KVC_API kvc_status kvc_allocator_check(const kvc_allocator *alloc);

/** kvc_swa_allocator_check() : O(size) audit: both sub-allocators, every non-zero mapping
 *  entry pairs a held full slot with a held SWA slot used by no other entry, the last
 *  entry is -1. Run after every mutating call in check mode. @return KVC_ERR_INTERNAL. */
KVC_API kvc_status kvc_swa_allocator_check(const kvc_swa_allocator *alloc);

/** kvc_mamba_pool_check() : O(size) audit of the host metadata (free list entries unique,
 *  in range and not held; free + held + reserved == size; slot 0 never free). Also run
 *  after every mutating call in check mode. @return KVC_ERR_INTERNAL when violated. */
KVC_API kvc_status kvc_mamba_pool_check(const kvc_mamba_pool *pool);

/** kvc_flow_check() : audit: allocator metadata consistent and, with a cache that reports
 *  cached_size, free + held == size where held counts every live request's allocated
 *  pages plus the cache's. Returns KVC_ERR_INTERNAL with the figures when violated. */
KVC_API kvc_status kvc_flow_check(const kvc_flow *flow, kvc_req_state *const *live, size_t n_live);

/** kvc_radix_cache_check() : O(n) audit of the tree (sizes, eviction heap, child index,
 *  held-slot bits). Also run after every mutating call in check mode.
 *  @return KVC_ERR_INTERNAL with a description when violated. */
KVC_API kvc_status kvc_radix_cache_check(const kvc_radix_cache *cache);

/* --- Debug canaries (use-after-free detection) ---------------------------------------- */

/** kvc_kv_pool_canary_fill() : DEBUG. Writes the marker byte 0xCB into every byte of row
 *  slots[i] (host int64 slot ids, i < n) of every buffer of the pool (all regions, all
 *  layers; NSA index-K pages are skipped; NoOp pools have no rows: no-op) in ONE launch
 *  on `stream`. Capacity: at most 256 buffers (else KVC_ERR_UNSUPPORTED).
 *  @return KVC_ERR_INVALID_ARGUMENT for a slot outside [0, size + page_size) or NULL
 *  slots with n > 0. n == 0: no launch. Not capturable (slots travel as launch data). */
KVC_API kvc_status kvc_kv_pool_canary_fill(kvc_kv_pool *pool, const int64_t *slots, size_t n,
                                           kvc_stream stream);
/** kvc_kv_pool_canary_check() : DEBUG. ONE launch that checks every byte of rows slots[i]
 *  (same buffers as canary_fill) still holds the marker; the first violation (lowest i,
 *  then buffer in describe() order) and the count of differing bytes land in a small
 *  pool-owned device buffer, then the call SYNCHRONIZES `stream` and reads it back (debug
 *  mode only: this is the one pool call that synchronizes). One check at a time per pool.
 *  Not capturable.
 *  @return KVC_ERR_INTERNAL "kvc_kv_pool_canary_check: slot S (request position i) layer
 *  L region R byte B was written after it was freed (N bytes differ)" (L global layer id,
 *  R a kvc_region_kind, B the first differing byte of that row), KVC_OK when intact, and
 *  the argument errors of kvc_kv_pool_canary_fill. */
KVC_API kvc_status kvc_kv_pool_canary_check(kvc_kv_pool *pool, const int64_t *slots, size_t n,
                                            kvc_stream stream);

/** kvc_flow_set_canary() : DEBUG canary mode (use-after-free detection) with `pool`, the
 *  KV pool whose slots the flow's allocator hands out (same page size; pool->size >= the
 *  allocator's size). Non-NULL: fills EVERY row of the pool with the canary marker now
 *  (kvc_kv_pool_canary_fill semantics, then waits for the fill) — call it before any
 *  request holds KV, since live KV would be overwritten. From then on every free the flow
 *  makes (release, chunk cache, sessions: everything through kvc_flow_free_slots) refills
 *  the rows of every slot of every page the freed slots touch, and alloc_for_extend /
 *  alloc_for_decode check the rows of the new slots before returning, returning the
 *  check's KVC_ERR_INTERNAL (the slot and layer written after free; the slots stay
 *  allocated to the requests). Each check synchronizes `stream`: debug only. NULL turns
 *  canary mode off. @return KVC_ERR_UNSUPPORTED for a flow with an SWA allocator (use
 *  kvc_flow_set_canary_swa), KVC_ERR_INVALID_ARGUMENT for a mismatched pool, the errors
 *  of the fill. */
KVC_API kvc_status kvc_flow_set_canary(kvc_flow *flow, kvc_kv_pool *pool);

/** kvc_flow_set_canary_swa() : DEBUG canary mode (use-after-free detection) of a flow over
 *  a kvc_swa_allocator, with `pool`, the kvc_swa_kv_pool whose rows it hands out: full
 *  layers at full slots (the pool's full half, kvc_swa_kv_pool_full), SWA layers at SWA
 *  slots (the SWA half, at mapping[full slot]). Each half must have the allocator's page
 *  size and at least its side's size (size_full / size_swa); a pool without full or
 *  without SWA layers guards the side it has. Non-NULL: fills EVERY row of both halves
 *  with the canary marker now and waits for the fill, so call it before any request
 *  holds KV (live KV would be overwritten). From then on, after each free the flow makes,
 *  exactly the pages the allocator released are refilled, computed from the host mapping
 *  read before the free: kvc_flow_free_slots (release, chunk cache, sessions, callbacks)
 *  refills every full page its slots touch in the full half, and the SWA pages of the
 *  peers of those slots in the SWA half (page_size > 1: of every slot of those full
 *  pages, as kvc_swa_allocator_free releases them); window eviction
 *  (kvc_flow_free_swa_out_of_window, also inside the alloc calls) refills only the SWA
 *  pages it released (the full slots stay held). A page the allocator still holds is
 *  never refilled. alloc_for_extend / alloc_for_decode (decode channel included) check
 *  the new full slots in the full half, then their new SWA peers in the SWA half, and
 *  return the check's KVC_ERR_INTERNAL (the slot, full or SWA, and the half's local
 *  layer; the slots stay allocated to the requests). A refill that fails after its free
 *  is reported as in kvc_flow_set_canary (within kvc_flow_release, once the request is
 *  released; a window eviction is recorded in swa_evicted_seqlen first). Each check
 *  synchronizes `stream` (two per step): debug only. The pool is borrowed: it must
 *  outlive canary mode (NULL turns it off; kvc_flow_destroy ends it). Not capturable
 *  (the fill synchronizes; the checks read back). Not covered by KVC_CONTEXT_CANARY.
 *  @return KVC_ERR_UNSUPPORTED for a flow without an SWA allocator (use
 *  kvc_flow_set_canary) and for pure-SWA or ring-mode allocators (the flows do not
 *  allocate SWA slots there), KVC_ERR_INVALID_ARGUMENT for a pool that is not live or a
 *  half that does not match, the errors of the fill. A failed call leaves canary mode as
 *  it was. */
KVC_API kvc_status kvc_flow_set_canary_swa(kvc_flow *flow, kvc_swa_kv_pool *pool);

/** kvc_compile_check() : compiles every kernel source of the library through NVRTC for
 *  virtual architecture `sm` (e.g. 80, 90) with representative specialisations, without
 *  a GPU or context (only NVRTC is needed). Used by the kernel-compile test.
 *  @return KVC_ERR_NO_DEVICE if NVRTC cannot be loaded, KVC_ERR_NVRTC with the log in
 *  kvc_last_error(NULL) on a compile error. `compiled` (may be NULL) receives the count. */
KVC_API kvc_status kvc_compile_check(int sm, int *compiled);

/** @} */ /* end of kvc_diagnostics */

#ifdef __cplusplus
}
#endif
#endif /* KVCACHE_H */
