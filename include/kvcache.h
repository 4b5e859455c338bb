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
 *   1. ops   — kvc_get_last_loc, kvc_write_req_to_token, ... on raw device pointers;
 *   2. pools — kvc_req_to_token_pool, kvc_allocator, KV pools: objects owning buffers;
 *   3. flows — the per-step calls a scheduler makes (later headers sections).
 *
 * Conventions that hold for every function below unless its comment says otherwise:
 *   - Every function returns a kvc_status. KVC_OK (0) is success. On failure the
 *     objects passed in are exactly as before the call (transactional), output
 *     arguments are untouched, and kvc_last_error(ctx) holds a message naming the
 *     function and the offending argument for the calling thread.
 *   - "device pointer" means memory of the context's backend: CUDA device memory on
 *     the CUDA backend, ordinary host memory on the host backend. Host pointers are
 *     plain host memory on both.
 *   - Functions taking a kvc_stream enqueue their device work on that stream (NULL is
 *     the legacy default stream) and never synchronize it unless documented. The host
 *     backend runs the work immediately and ignores the stream.
 *   - "Graph-capturable" means the call may be made while `stream` is being captured
 *     into a CUDA graph: it launches kernels whose parameters are all device pointers or
 *     values fixed for the life of the graph, allocates nothing and reads nothing back.
 *   - Thread rules: nothing is thread-safe unless stated. A context may be used from
 *     several threads at once only with distinct pools/allocators; each pool or
 *     allocator has a single writer. Error text is kept per context per thread.
 *   - destroy(NULL) is a no-op. Destroying an object requires that no GPU work that
 *     uses its buffers is still pending (synchronize your streams first).
 *
 * ABI promise: the same major version is ABI stable; minor versions only add. Status
 * values below 100 and struct field offsets never change. Config structs begin with
 * struct_size and version; fill them with the matching *_INIT macro or *_default().
 */
#ifndef KVCACHE_H
#define KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

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
#define KVC_STATUS_MAP(XX)                                                                  \
  XX(OK, 0, "success")                                                                      \
  XX(ERR_INVALID_ARGUMENT, 1, "invalid argument (see kvc_last_error())")                    \
  XX(ERR_OUT_OF_SLOTS, 2, "capacity exhausted: not enough free slots, pages or rows")       \
  XX(ERR_HOST_OOM, 3, "host memory allocation failed")                                      \
  XX(ERR_DEVICE_OOM, 4, "device memory allocation failed")                                  \
  XX(ERR_CUDA, 5, "CUDA driver error (see kvc_last_error() or KVC_LOG=debug)")              \
  XX(ERR_NVRTC, 6, "kernel compilation failed (NVRTC log in kvc_last_error())")             \
  XX(ERR_NO_DEVICE, 7, "no usable CUDA device or driver")                                   \
  XX(ERR_UNSUPPORTED, 8, "operation not supported by this object, backend or device")       \
  XX(ERR_MISUSE, 9, "API misuse: call not allowed in the object's current state")           \
  XX(ERR_VERSION, 10, "struct version or size not understood by this library")              \
  XX(ERR_INTERNAL, 11, "internal invariant violated (a bug; please report)")                \
  XX(ERR_IO, 12, "file system error (kernel cache)")

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

/** Width of index vectors (slots, lengths, row ids) passed to ops. */
typedef enum kvc_index_type { KVC_INDEX_I32 = 0, KVC_INDEX_I64 = 1 } kvc_index_type;

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

typedef struct kvc_context kvc_context;

/** Context flags. */
#define KVC_CONTEXT_CHECK 0x1u /* check mode: verify conservation after every mutating call
                                  (also enabled by env KVC_CHECK=1) */
#define KVC_CONTEXT_NO_DISK_CACHE 0x2u /* keep compiled kernels in memory only */

typedef struct kvc_context_config {
  size_t struct_size;  /* sizeof(kvc_context_config) as the caller compiled it */
  uint32_t version;    /* KVC_VERSION_NUMBER as the caller compiled it */
  kvc_backend backend; /* AUTO by default */
  int device;          /* CUDA device ordinal (default 0) */
  uint32_t flags;      /* KVC_CONTEXT_* */
  const char *cache_dir; /* kernel cache directory; NULL = env KVC_CACHE_DIR, else
                            $XDG_CACHE_HOME/kvcache, else ~/.cache/kvcache. Copied. */
  kvc_host_allocator host_allocator;
  kvc_device_allocator device_allocator;
  uint64_t reserved_[8]; /* must be zero */
} kvc_context_config;

#define KVC_CONTEXT_CONFIG_INIT                                                             \
  { sizeof(kvc_context_config), KVC_VERSION_NUMBER, KVC_BACKEND_AUTO, 0, 0u, NULL,          \
    {NULL, NULL, NULL}, {NULL, NULL, NULL}, {0} }

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

/** kvc_context_check_mode() : non-zero when check mode is on (flag or KVC_CHECK=1). */
KVC_API int kvc_context_check_mode(const kvc_context *ctx);

/** kvc_last_error() : the detailed message of the calling thread's last failure on `ctx`
 *  (function, argument, CUresult name or NVRTC log excerpt), or "" if none. With ctx ==
 *  NULL: the thread's last failure of a call that had no context (e.g. a failed create).
 *  Valid until the thread's next failing call on that context. */
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
 *  backend) for fast asynchronous copies; free with kvc_host_pinned_free(). */
KVC_API kvc_status kvc_host_pinned_alloc(kvc_context *ctx, size_t bytes, void **out);
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
 *  never used by the library itself on the scheduler path. */
KVC_API kvc_status kvc_stream_synchronize(kvc_context *ctx, kvc_stream stream);

/* --- Kernel compilation ------------------------------------------------------------ */

/** kvc_context_precompile() : compiles (or loads from the disk cache) every kernel the
 *  library may launch with `spec` values not yet known... for the kernels with fixed
 *  specialisation only; pools compile their own variants at create. Use it at engine
 *  start to keep NVRTC off the first scheduler step. No-op on the host backend. */
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

/** kvc_compile_check() : compiles every kernel source of the library through NVRTC for
 *  virtual architecture `sm` (e.g. 80, 90) with representative specialisations, without
 *  a GPU or context (only NVRTC is needed). Used by the kernel-compile test.
 *  @return KVC_ERR_NO_DEVICE if NVRTC cannot be loaded, KVC_ERR_NVRTC with the log in
 *  kvc_last_error(NULL) on a compile error. `compiled` (may be NULL) receives the count. */
KVC_API kvc_status kvc_compile_check(int sm, int *compiled);

/* ===================================================================================
 * Level 1 — ops on raw device pointers (SGLang's kernels of the same names)
 *
 * Every op enqueues exactly one kernel on `stream` (none when n == 0), allocates
 * nothing, reads nothing back, and is graph-capturable. Index arguments are validated on
 * the host only as far as the host can see them (NULL pointers, sizes, strides); device
 * values out of range are not dereferenced: the kernels bound every index they read or
 * write (entries with a row outside [0, num_rows) or a position outside [0, row_stride)
 * are skipped). The host backend runs the C reference of the same kernel.
 * =================================================================================== */

/** kvc_get_last_loc() : last_loc[i] = req_to_token[rows[i], prefix_lens[i] - 1], or -1
 *  when prefix_lens[i] <= 0. The int32 table value is sign-extended to `lens_type`.
 *  @param req_to_token  device int32 table of num_rows x row_stride
 *  @param rows          device vector of n request rows (`rows_type`)
 *  @param prefix_lens   device vector of n lengths (`lens_type`)
 *  @param out_last_loc  device vector of n outputs in `lens_type`
 *  @return KVC_ERR_INVALID_ARGUMENT for NULL pointers with n > 0 or a non-positive
 *  stride. */
KVC_API kvc_status kvc_get_last_loc(kvc_context *ctx, const int32_t *req_to_token,
                                    int64_t num_rows, int64_t row_stride, const void *rows,
                                    kvc_index_type rows_type, const void *prefix_lens,
                                    kvc_index_type lens_type, void *out_last_loc, size_t n,
                                    kvc_stream stream);

/** kvc_write_req_to_token() : for each request i (row r = rows[i], p = prefix_lens[i],
 *  s = seq_lens[i]): req_to_token[r, 0:p) = prefix_ptrs[i][0:p) (int64 slots narrowed to
 *  int32; skipped when p == 0 or prefix_ptrs[i] == 0) and req_to_token[r, p:s) =
 *  out_cache_loc[O_i : O_i + s - p) with O_i = sum_{j<i}(s_j - p_j). One launch; the
 *  offsets come from a block-parallel prefix sum, not SGLang's O(n^2) loop.
 *  @param prefix_ptrs  device vector of n device addresses of int64 prefix-slot vectors
 *                      (may be NULL: no prefix copy at all)
 *  @param out_cache_loc device int64 vector of sum(s - p) slots */
KVC_API kvc_status kvc_write_req_to_token(kvc_context *ctx, int32_t *req_to_token,
                                          int64_t num_rows, int64_t row_stride, const void *rows,
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


/* ===================================================================================
 * Level 2 — request-to-token pool and token/paged allocators
 *
 * The host owns all allocation metadata (free lists, page states, a mirror of every
 * req_to_token entry the library wrote). Device state (the req_to_token table, the
 * out_cache_loc vectors) is written from it with one kernel launch per call, its
 * per-step data carried in the kernel's parameters (or one async upload from pinned
 * staging when larger). Nothing reads device memory; nothing synchronizes.
 * Allocation calls are NOT graph-capturable (each step's data differs); the kernels they
 * feed (attention, set_kv) read only device buffers and are.
 * Single writer per object. Slot 0 (page 0) and row 0 are padding, never handed out.
 * =================================================================================== */

typedef struct kvc_req_to_token_pool kvc_req_to_token_pool;

typedef struct kvc_req_to_token_pool_config {
  size_t struct_size;
  uint32_t version;
  int32_t size;            /* usable rows (max concurrent requests), >= 1 */
  int32_t max_context_len; /* row width in token positions, >= 1 */
  uint64_t reserved_[4];
} kvc_req_to_token_pool_config;

#define KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT \
  { sizeof(kvc_req_to_token_pool_config), KVC_VERSION_NUMBER, 0, 0, {0} }

/** kvc_req_to_token_pool_create() : a zero-filled device int32 table of (size + 1) rows x
 *  max_context_len (row 0 is padding) and its host mirror; free rows 1..size (FIFO).
 *  @return KVC_ERR_INVALID_ARGUMENT for sizes < 1 or a table over 2^31 entries per row
 *  set, KVC_ERR_DEVICE_OOM / KVC_ERR_HOST_OOM. Synchronizes the default stream once
 *  (zero fill). */
KVC_API kvc_status kvc_req_to_token_pool_create(kvc_context *ctx,
                                                const kvc_req_to_token_pool_config *config,
                                                kvc_req_to_token_pool **out);
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
KVC_API int32_t kvc_req_to_token_pool_size(const kvc_req_to_token_pool *pool);
KVC_API int32_t kvc_req_to_token_pool_max_context_len(const kvc_req_to_token_pool *pool);
/** kvc_req_to_token_pool_row() : the host mirror of `row` (max_context_len entries): what
 *  the library wrote to the device row, readable without a device copy. NULL if out of
 *  range. Valid until the pool is destroyed; entries change with later writes. */
KVC_API const int32_t *kvc_req_to_token_pool_row(const kvc_req_to_token_pool *pool, int32_t row);
/** kvc_req_to_token_pool_write() : row[start : start + n) = slots[0:n) (host int64 slots,
 *  each in [0, 2^31)), in the mirror and on the device (one launch on `stream`).
 *  @return KVC_ERR_INVALID_ARGUMENT when the range leaves the row or a slot is out of
 *  range; KVC_ERR_MISUSE when `row` is not held. */
KVC_API kvc_status kvc_req_to_token_pool_write(kvc_req_to_token_pool *pool, int32_t row,
                                               int32_t start, const int64_t *slots, size_t n,
                                               kvc_stream stream);

typedef struct kvc_allocator kvc_allocator;

typedef enum kvc_allocator_kind {
  KVC_ALLOCATOR_TOKEN = 0, /* page_size 1, SGLang TokenToKVPoolAllocator: FIFO reuse */
  KVC_ALLOCATOR_PAGED = 1  /* any page size, SGLang PagedTokenToKVPoolAllocator: freed pages
                              go to the front (LIFO), each free sorted-unique */
} kvc_allocator_kind;

#define KVC_ALLOCATOR_NEED_SORT 0x1u /* frees go to a side list; merged and sorted
                                        ascending when an allocation may run short */

typedef struct kvc_allocator_config {
  size_t struct_size;
  uint32_t version;
  kvc_allocator_kind kind;
  int64_t size;      /* token slots; pages = size / page_size (floor); slots <= 2^31 - ps */
  int32_t page_size; /* 1 for TOKEN; >= 1 for PAGED */
  uint32_t flags;    /* KVC_ALLOCATOR_* */
  uint64_t reserved_[4];
} kvc_allocator_config;

#define KVC_ALLOCATOR_CONFIG_INIT \
  { sizeof(kvc_allocator_config), KVC_VERSION_NUMBER, KVC_ALLOCATOR_TOKEN, 0, 1, 0u, {0} }

/** kvc_allocator_create() : all pages 1..size/page_size free, in ascending order.
 *  @return KVC_ERR_INVALID_ARGUMENT for a bad kind/size/page size. Host memory only. */
KVC_API kvc_status kvc_allocator_create(kvc_context *ctx, const kvc_allocator_config *config,
                                        kvc_allocator **out);
KVC_API void kvc_allocator_destroy(kvc_allocator *alloc);

/** kvc_allocator_available_size() : free tokens, counting deferred (need_sort) frees. */
KVC_API int64_t kvc_allocator_available_size(const kvc_allocator *alloc);
/** kvc_allocator_size() : usable tokens = pages x page_size. */
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
KVC_API kvc_status kvc_allocator_get_stats(const kvc_allocator *alloc, kvc_allocator_stats *out);

/** kvc_allocator_alloc() : n slots (n a multiple of page_size) from the front of the free
 *  list, page-major, written to out_slots (host). n == 0 is a no-op.
 *  @return KVC_ERR_OUT_OF_SLOTS (nothing changed), KVC_ERR_INVALID_ARGUMENT when n is not
 *  page-aligned (SGLang silently floors). */
KVC_API kvc_status kvc_allocator_alloc(kvc_allocator *alloc, int64_t n, int64_t *out_slots);

/** kvc_allocator_alloc_extend() : slots for a prefill/extend batch (SGLang alloc_extend;
 *  for the TOKEN kind the same as alloc(sum of extend lengths) split in request order).
 *  For request i: prefix_lens[i] tokens already present, seq_lens[i] after the step.
 *  last_locs[i] = slot of token prefix-1 (or -1 when the prefix is empty); when
 *  last_locs is NULL they are read from req_pool's host mirror (req_pool required).
 *  With req_pool (and req_rows, rows held by the requests), the same launch also writes
 *  row[prefix : seq) = the new slots and, where prefix_slots && prefix_slots[i],
 *  row[0 : prefix) = prefix_slots[i][0 : prefix) (host int64, e.g. a radix-cache match);
 *  the host mirror is updated too. out_host (may be NULL) receives the slots,
 *  concatenated in request order; out_device (may be NULL) likewise on the device (int64).
 *  @return KVC_ERR_OUT_OF_SLOTS when not enough pages (nothing changed; checked before
 *  anything is launched), KVC_ERR_INVALID_ARGUMENT for seq < prefix, lengths past the
 *  row width, or a last_loc whose in-page offset contradicts its prefix length. */
KVC_API kvc_status kvc_allocator_alloc_extend(kvc_allocator *alloc, size_t batch_size,
                                              const int64_t *prefix_lens, const int64_t *seq_lens,
                                              const int64_t *last_locs,
                                              kvc_req_to_token_pool *req_pool,
                                              const int32_t *req_rows,
                                              const int64_t *const *prefix_slots,
                                              int64_t *out_host, int64_t *out_device,
                                              kvc_stream stream);

/** kvc_allocator_alloc_decode() : one new token per request (SGLang alloc_decode).
 *  seq_lens[i] is the length after the new token; last_locs[i] the slot of token
 *  seq-2 (NULL = from req_pool's mirror). The new slot is last_loc + 1 unless the token
 *  opens a new page ((seq-1) % ps == 0), which takes the next free page in batch order.
 *  With req_pool, row[seq-1] = new slot in the same launch. Outputs as alloc_extend.
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

/** kvc_allocator_free_segment() : frees slots = row[start_pos : start_pos + n) of one
 *  request (start_pos page-aligned): pages are slots[0], slots[ps], ... (no dedup, no
 *  sort), a trailing partial page released whole. @return as kvc_allocator_free, and
 *  KVC_ERR_INVALID_ARGUMENT for a misaligned start_pos. */
KVC_API kvc_status kvc_allocator_free_segment(kvc_allocator *alloc, const int64_t *slots,
                                              size_t n, int64_t start_pos);

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

/** kvc_allocator_check() : full O(pages) audit of the host metadata (free list entries
 *  unique and free, counts conserved, page 0 never free). Also run after every mutating
 *  call in check mode. @return KVC_ERR_INTERNAL with a description when violated. */
KVC_API kvc_status kvc_allocator_check(const kvc_allocator *alloc);


/* ===================================================================================
 * Level 2 — KV pools: device buffers for keys and values
 *
 * One device allocation per pool (through the context's device allocator), carved into
 * per-layer regions, zero-filled at create. Row r of every region belongs to token slot
 * r; buffers have size + page_size rows (page 0 is padding). Layer ids are global:
 * layer_id - start_layer indexes the pool's layers (pipeline stages own a range).
 * Writes (set_kv, set_mla_kv, set_index_k, move) are one kernel launch each, read only
 * device pointers and values and are graph-capturable. Single writer per pool; readers
 * may use the buffers concurrently on their own streams.
 * =================================================================================== */

typedef struct kvc_kv_pool kvc_kv_pool;

typedef enum kvc_kv_pool_kind {
  KVC_KV_MHA = 0,      /* K and V per layer (SGLang MHATokenToKVPool) */
  KVC_KV_MHA_NOOP = 1, /* capacity accounting only, placeholder buffers (NoOpMHA...) */
  KVC_KV_MHA_FP4 = 2,  /* packed e2m1 K/V + one scale byte per 16 values (MHA...FP4) */
  KVC_KV_MLA = 3,      /* one latent row per slot: kv_lora_rank + qk_rope_head_dim */
  KVC_KV_MLA_FP4 = 4,  /* MLA rows packed e2m1 + scale bytes */
  KVC_KV_NSA = 5       /* MLA (fp8: 656-byte rows) + per-layer index-K pages */
} kvc_kv_pool_kind;

typedef struct kvc_kv_pool_config {
  size_t struct_size;
  uint32_t version;
  kvc_kv_pool_kind kind;
  int64_t size;          /* token slots (>= 1); buffers hold size + page_size rows */
  int32_t page_size;     /* >= 1 (NSA: 64) */
  kvc_dtype dtype;       /* element type seen by attention: F32/F16/BF16/FP8_E4M3/FP8_E5M2;
                            FP4 kinds: the dtype of written/read values (BF16/F16/F32);
                            NSA: FP8_E4M3 selects the 656-byte quantized rows */
  int32_t layer_num;     /* layers owned by this pool (>= 1) */
  int32_t start_layer;   /* global id of the first owned layer (default 0) */
  int32_t head_num;      /* MHA kinds */
  int32_t head_dim;      /* MHA kinds */
  int32_t v_head_dim;    /* MHA: 0 = head_dim */
  int32_t kv_lora_rank;  /* MLA kinds (e.g. 512) */
  int32_t qk_rope_head_dim; /* MLA kinds (e.g. 64) */
  int32_t index_head_dim;   /* NSA: must be 128 (0 = 128) */
  int64_t index_buf_size;   /* NSA: tokens of index-K storage (0 = size) */
  uint32_t flags;           /* reserved, 0 */
  int32_t pad_;
  uint64_t reserved_[8];
} kvc_kv_pool_config;

#define KVC_KV_POOL_CONFIG_INIT \
  { sizeof(kvc_kv_pool_config), KVC_VERSION_NUMBER, KVC_KV_MHA, 0, 1, KVC_DTYPE_BF16, 0, 0, \
    0, 0, 0, 0, 0, 0, 0, 0u, 0, {0} }

/** kvc_kv_pool_create() : allocates and zero-fills every buffer (one device allocation),
 *  compiles the pool's kernels for its row sizes (NVRTC, cached), then synchronizes once.
 *  @return KVC_ERR_INVALID_ARGUMENT for inconsistent geometry (sizes, dims, dtype not
 *  allowed for the kind, sizes whose byte counts overflow), KVC_ERR_DEVICE_OOM,
 *  KVC_ERR_NVRTC. Not capturable. */
KVC_API kvc_status kvc_kv_pool_create(kvc_context *ctx, const kvc_kv_pool_config *config,
                                      kvc_kv_pool **out);
KVC_API void kvc_kv_pool_destroy(kvc_kv_pool *pool);
/** kvc_kv_pool_clear() : zero-fills every buffer on `stream` (capacity unchanged). */
KVC_API kvc_status kvc_kv_pool_clear(kvc_kv_pool *pool, kvc_stream stream);

/** kvc_kv_pool_size_bytes() : bytes of K-side and V-side storage (MLA/NSA: all in k,
 *  index pages included; NoOp: 0, 0), as SGLang's get_kv_size_bytes. */
KVC_API kvc_status kvc_kv_pool_size_bytes(const kvc_kv_pool *pool, size_t *k_bytes, size_t *v_bytes);

/** kvc_kv_pool_set_kv() : SGLang set_kv_buffer. For i < n:
 *  K[layer][loc[i]] = k[i], V[layer][loc[i]] = v[i] (MLA kinds: the whole row from k; v
 *  ignored). Source rows are `src_dtype` with row strides k_stride / v_stride in elements
 *  (0 = contiguous). If src_dtype equals the pool dtype the bytes are copied; if the pool
 *  is fp8 and the source bf16/f16/f32, values are divided by the scale (k_scale_device,
 *  a device float, when non-NULL, else k_scale; 1.0 = none), clamped to the finite fp8
 *  range and rounded to nearest even — fused in the same launch, inputs never modified.
 *  FP4 pools quantize (e2m1 + per-16 scale bytes). One launch for K and V together.
 *  Slots outside [0, size + page_size) are skipped (never written). n == 0: no launch.
 *  @return KVC_ERR_UNSUPPORTED on a NoOp pool or a src/pool dtype pair with no
 *  conversion, KVC_ERR_INVALID_ARGUMENT for a layer outside the pool or NULL pointers. */
KVC_API kvc_status kvc_kv_pool_set_kv(kvc_kv_pool *pool, int32_t layer_id, const void *loc,
                                      kvc_index_type loc_type, size_t n, const void *k,
                                      const void *v, kvc_dtype src_dtype, int64_t k_stride,
                                      int64_t v_stride, const float *k_scale_device,
                                      float k_scale, const float *v_scale_device, float v_scale,
                                      kvc_stream stream);

/** kvc_kv_pool_move() : SGLang move_kv_cache: for every layer and every region of the
 *  pool (K, V, scales, latent rows, index keys), row tgt[i] = row src[i], for all i < n,
 *  in ONE launch. All sources are read before any target of the same (buffer, byte tile)
 *  is written, so overlapping src/tgt sets behave as one simultaneous copy (duplicate
 *  targets: one unspecified winner). V rows wider than K rows are copied in full.
 *  Out-of-range slots are skipped. Capturable. */
KVC_API kvc_status kvc_kv_pool_move(kvc_kv_pool *pool, const void *tgt_loc, const void *src_loc,
                                    kvc_index_type loc_type, size_t n, kvc_stream stream);

/** kvc_kv_pool_gather_kv() : reads rows loc[i] of one layer into dense k_out / v_out
 *  (n rows each) converted to out_dtype; FP4 pools dequantize only these rows (never a
 *  whole layer). MLA kinds: the whole latent row into k_out (v_out may be NULL). */
KVC_API kvc_status kvc_kv_pool_gather_kv(kvc_kv_pool *pool, int32_t layer_id, const void *loc,
                                         kvc_index_type loc_type, size_t n, void *k_out,
                                         void *v_out, kvc_dtype out_dtype, kvc_stream stream);

/** kvc_kv_pool_set_mla_kv() : MLA/NSA: row loc[i] = [nope[i] (kv_lora_rank) | rope[i]
 *  (qk_rope_head_dim)], converted from src_dtype (NSA fp8: quantized per 128 values
 *  into the 656-byte layout; an all-zero tile stores scale 0 and zero codes). Strides in
 *  elements (0 = contiguous). One launch. */
KVC_API kvc_status kvc_kv_pool_set_mla_kv(kvc_kv_pool *pool, int32_t layer_id, const void *loc,
                                          kvc_index_type loc_type, size_t n, const void *nope,
                                          const void *rope, kvc_dtype src_dtype,
                                          int64_t nope_stride, int64_t rope_stride,
                                          kvc_stream stream);

/** kvc_kv_pool_get_mla_kv() : MLA/NSA: rows loc[i] split into nope_out (n x kv_lora_rank)
 *  and rope_out (n x qk_rope_head_dim), converted to out_dtype (NSA fp8 rows are
 *  dequantized). No power-of-two restriction. */
KVC_API kvc_status kvc_kv_pool_get_mla_kv(kvc_kv_pool *pool, int32_t layer_id, const void *loc,
                                          kvc_index_type loc_type, size_t n, void *nope_out,
                                          void *rope_out, kvc_dtype out_dtype, kvc_stream stream);

/** kvc_nsa_set_index_k() : NSA SetKAndS: for i < n, the 128 fp8 key bytes of row i of
 *  index_k (row stride 128 bytes) and scale[i] (float) go to token loc[i] of the layer's
 *  index pages (page loc/ps, keys then scales within a page). loc is int64 or int32. */
KVC_API kvc_status kvc_nsa_set_index_k(kvc_kv_pool *pool, int32_t layer_id, const void *loc,
                                       kvc_index_type loc_type, size_t n, const uint8_t *index_k,
                                       const float *scale, kvc_stream stream);
/** kvc_nsa_get_index_k() : GetK/GetS for one sequence of seq_len tokens whose pages are
 *  page_indices[ceil(seq_len/ps)] (device int32): out_k (seq_len x 128 bytes) and/or
 *  out_scale (seq_len x 4 bytes), either may be NULL. Lengths are run-time values: no
 *  recompilation per length. */
KVC_API kvc_status kvc_nsa_get_index_k(kvc_kv_pool *pool, int32_t layer_id, int64_t seq_len,
                                       const int32_t *page_indices, uint8_t *out_k,
                                       uint8_t *out_scale, kvc_stream stream);
/** kvc_nsa_get_index_k_batch() : GetKAndS for a batch: page table (batch x table_width,
 *  device int32, row-major), seq_lens (device int32), outputs packed by sequence
 *  (seq_len_sum rows). max_seq_len bounds the grid. */
KVC_API kvc_status kvc_nsa_get_index_k_batch(kvc_kv_pool *pool, int32_t layer_id, size_t batch,
                                             const int32_t *page_table, int64_t table_width,
                                             const int32_t *seq_lens, int64_t seq_len_sum,
                                             int64_t max_seq_len, uint8_t *out_k,
                                             uint8_t *out_scale, kvc_stream stream);

/* --- Descriptors, DLPack, transfer registration ------------------------------------ */

typedef enum kvc_region_kind {
  KVC_REGION_K = 0,        /* MHA keys (FP4: packed data) */
  KVC_REGION_V = 1,        /* MHA values */
  KVC_REGION_K_SCALE = 2,  /* FP4 scale bytes of K */
  KVC_REGION_V_SCALE = 3,  /* FP4 scale bytes of V */
  KVC_REGION_KV = 4,       /* MLA/NSA latent rows (FP4: packed data) */
  KVC_REGION_KV_SCALE = 5, /* MLA FP4 scale bytes */
  KVC_REGION_INDEX_K = 6   /* NSA index-K pages */
} kvc_region_kind;

/** One buffer of a pool: a region of one layer. Shapes/strides in elements of dtype. */
typedef struct kvc_buffer_desc {
  size_t struct_size;
  uint32_t version;
  kvc_region_kind region;
  int32_t layer_id; /* global layer id */
  kvc_dtype dtype;  /* real element type (fp8 reported as fp8; FP4 packed as FP4_E2M1) */
  int32_t ndim;
  int32_t device;   /* CUDA ordinal, -1 for host memory */
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
KVC_API kvc_status kvc_kv_pool_describe(const kvc_kv_pool *pool, int32_t index, kvc_buffer_desc *out);
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
 *  (all layers, all regions; NSA index pages for the pages the slots cover). */
KVC_API kvc_status kvc_kv_pool_host_copy_bytes(const kvc_kv_pool *pool, size_t n, size_t *bytes);
/** kvc_kv_pool_copy_to_host() : gathers rows loc[i] (device index vector) of every layer
 *  and region into `host` (pinned memory from kvc_host_pinned_alloc on the CUDA backend),
 *  in ONE kernel launch on `stream` that writes host memory directly; no device-wide
 *  synchronize. The data is valid once the stream reaches that point. Layout: for each
 *  buffer in describe() order, n rows. NSA index pages: requires page-aligned,
 *  page-contiguous runs of loc (as SGLang), copies the covered pages. */
KVC_API kvc_status kvc_kv_pool_copy_to_host(kvc_kv_pool *pool, const void *loc,
                                            kvc_index_type loc_type, size_t n, void *host,
                                            kvc_stream stream);
/** kvc_kv_pool_copy_from_host() : the inverse scatter, one launch. */
KVC_API kvc_status kvc_kv_pool_copy_from_host(kvc_kv_pool *pool, const void *loc,
                                              kvc_index_type loc_type, size_t n,
                                              const void *host, kvc_stream stream);


/* ===================================================================================
 * Level 2 — hybrid models: Mamba state pool
 * =================================================================================== */

/* @@KVC_HYBRID@@ */

#ifdef __cplusplus
}
#endif
#endif /* KVCACHE_H */
