/*
 * core.h — internal foundation shared by every layer: the context's core part, error
 * recording, check macros, host allocation with accounting, options and logging.
 *
 * Layering: core knows nothing about devices. struct kvc_context (src/device/context.h)
 * begins with a kvc__core, so core functions can take the public kvc_context pointer.
 */
#ifndef KVC_CORE_H
#define KVC_CORE_H

#include "kvcache.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* --- Options (read once per context, from the environment) ------------------------- */

typedef enum kvc__log_level { KVC_LOG_ERROR = 0, KVC_LOG_WARN = 1, KVC_LOG_INFO = 2, KVC_LOG_DEBUG = 3 } kvc__log_level;

typedef struct kvc__options {
  int log_level;            /* KVC_LOG: error|warn|info|debug (default warn) */
  bool check;               /* KVC_CHECK: check mode */
  bool canary;              /* KVC_CANARY: flows guard the context's KV pool with canaries */
  bool dump_kernels;        /* KVC_DUMP_KERNELS: dump numbered source on compile failure */
  bool no_disk_cache;       /* KVC_NO_DISK_CACHE */
  int backend;              /* KVC_BACKEND: auto|host|cuda, -1 = not set */
  int64_t staging_bytes;    /* KVC_STAGING_BYTES (default 8M) */
  bool staging_mapped;      /* KVC_STAGING_MAPPED: read-once payloads read in place (default on) */
  bool simd;                /* KVC_SIMD: vector paths where the CPU has them (default on) */
  int64_t inline_max_words; /* KVC_INLINE_MAX_WORDS: largest payload carried in kernel
                               parameters (default 8000 = 32 KB; smaller goes staged) */
  char cache_dir[512];      /* KVC_CACHE_DIR or derived default */
  char nvrtc_lib[256];      /* KVC_NVRTC_LIB */
  char cuda_lib[256];       /* KVC_CUDA_LIB */
} kvc__options;

/* --- CPU features ------------------------------------------------------------------ */

/* AVX-512 paths (F, BW, CD, DQ, VL) are compiled into x86-64 GCC/Clang builds only;
 * a function holding one is marked KVC__TARGET_AVX512 and runs only where
 * kvc__simd_avx512() says so. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(KVC_NO_AVX512)
#  define KVC__HAVE_AVX512 1
#  define KVC__TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512cd,avx512dq,avx512vl")))
#else
#  define KVC__HAVE_AVX512 0
#  define KVC__TARGET_AVX512
#endif

/** True when this CPU and OS run the AVX-512 paths (cached by the CPU probe). */
bool kvc__cpu_avx512(void);
/** True on an AMD CPU: a vector path measured faster there only is taken there only. */
bool kvc__cpu_amd(void);

/** Fills `o` from the environment (then defaults). Warns on bad values. */
void kvc__options_load(kvc__options *o);
/** Prints every effective option once at info level. */
void kvc__options_print(const kvc__options *o, int level);

/* --- The core part of a context ---------------------------------------------------- */

/* Counters below are shared by every object of a context, and the header lets threads
 * use distinct objects of one context at once: they are atomics. Each is an independent
 * tally (no ordering between them matters), so relaxed order is enough. */
typedef _Atomic int64_t kvc__counter;

static inline int64_t kvc__counter_add(kvc__counter *c, int64_t delta) {
  return atomic_fetch_add_explicit(c, delta, memory_order_relaxed);
}
static inline int64_t kvc__counter_get(const kvc__counter *c) {
  return atomic_load_explicit((kvc__counter *)c, memory_order_relaxed);
}
static inline void kvc__counter_set(kvc__counter *c, int64_t v) { atomic_store_explicit(c, v, memory_order_relaxed); }

typedef struct kvc__fault {
  /* Fault injection (tests): the Nth call of a kind fails; -1 = never. */
  kvc__counter host_alloc_fail_at, device_alloc_fail_at, launch_fail_at, compile_fail_at;
  kvc__counter host_allocs, device_allocs, launches, compiles;
  kvc__counter last_device_bytes; /* size of the last kvc__dev_alloc request (overflow tests) */
} kvc__fault;

/** Counts one call of a fault kind; true when this is the call chosen to fail. */
static inline bool kvc__fault_hit(kvc__counter *calls, const kvc__counter *fail_at) {
  const int64_t n = kvc__counter_add(calls, 1);
  const int64_t at = kvc__counter_get(fail_at);
  return at >= 0 && n == at;
}

typedef struct kvc__error_slot kvc__error_slot;

typedef struct kvc__core {
  uint64_t magic;
  uint64_t id; /* unique per context */
  kvc_host_allocator host_allocator;
  kvc__options options;
  /* accounting */
  kvc__counter host_bytes_live, host_allocs_live;
  /* live kvc__dev_alloc allocations (any backend; src/device/memory.c) */
  kvc__counter device_allocs_live;
  kvc__fault fault; /* test hooks: src/core/fault.h */
  /* Error text, one slot per thread that failed on this context (error.c). */
  pthread_mutex_t error_lock;
  kvc__error_slot *error_slots;
} kvc__core;

#define KVC__CONTEXT_MAGIC 0x6b76632d63747821ull /* "kvc-ctx!" */

static inline kvc__core *kvc__core_of(const kvc_context *ctx) { return (kvc__core *)(void *)ctx; }

/** True when the context's objects may take their AVX-512 paths: KVC_SIMD on (the
 *  default) and kvc__cpu_avx512(). Objects read it once, at create. */
static inline bool kvc__simd_avx512(const kvc_context *ctx) {
  return kvc__core_of(ctx)->options.simd && kvc__cpu_avx512();
}

/** Initialises the core part in place (id, allocator, options, error slots) and
 *  reserves the calling thread's error slot. KVC_ERR_HOST_OOM when that fails (nothing
 *  is then held). */
kvc_status kvc__core_init(kvc__core *core, const kvc_context_config *config);
/** Releases what kvc__core_init and later errors acquired. */
void kvc__core_fini(kvc__core *core);
/* error.c's part of init/fini: the lock and the creating thread's slot. */
kvc_status kvc__error_slots_init(kvc__core *core);
void kvc__error_slots_fini(kvc__core *core);

/* --- Errors ------------------------------------------------------------------------ */

/* The message names the public function the caller called, whichever helper found the
 * problem: each public entry point opens a scope with KVC_API_ENTRY(), and the outermost
 * scope on the thread names every error recorded inside it (a public function that calls
 * another public one keeps its own name). Without a scope, `func` is used. */
typedef struct kvc__api_scope {
  const char *outer; /* the name in force before this scope */
} kvc__api_scope;
kvc__api_scope kvc__api_enter(const char *func);
void kvc__api_leave(const kvc__api_scope *scope);
#if defined(__GNUC__)
#  define KVC_API_ENTRY() \
    const kvc__api_scope kvc_api_scope_ __attribute__((cleanup(kvc__api_leave), unused)) = kvc__api_enter(__func__)
#else
#  define KVC_API_ENTRY() ((void)0) /* errors then name the helper that found them */
#endif

/** Records "func: message" as the calling thread's last error on ctx (ctx may be NULL)
 *  and returns `status`. Allocates only the first time a thread fails on ctx, outside
 *  the context's accounting (the text is lost, not the status, if that fails). */
kvc_status(kvc__error)(const kvc_context *ctx, kvc_status status, const char *func, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
#if defined(__GNUC__)
/* Calls go through this macro so that their result is visibly `status` itself (evaluated
 * once): the static analyzer does not look into error.c, so it would otherwise assume
 * that `return kvc__error(...)` may return KVC_OK, i.e. that a failed check falls through
 * to callers with its out-parameters unset. */
#  define kvc__error(ctx, status, ...)                     \
    __extension__({                                        \
      const kvc_status kvc_err_st_ = (status);             \
      (void)(kvc__error)((ctx), kvc_err_st_, __VA_ARGS__); \
      kvc_err_st_;                                         \
    })
#endif
kvc_status kvc__verror(const kvc_context *ctx, kvc_status status, const char *func, const char *fmt, va_list ap);
/** Appends text to the thread's last error on ctx (for NVRTC logs). */
void kvc__error_append(const kvc_context *ctx, const char *text);
/** Copies the thread's last error on ctx, as is, to the context-less slot (a create that
 *  fails reports there: its context is about to die). Returns `status`. */
kvc_status kvc__error_to_null(const kvc_context *ctx, kvc_status status);

/* --- Check macros ------------------------------------------------------------------ */

/* Before any resource is held: return directly. */
#define KVC_RETURN_IF(cond, ctx, status, ...)                            \
  do {                                                                   \
    if (cond) return kvc__error((ctx), (status), __func__, __VA_ARGS__); \
  } while (0)

/** The handle check of every entry point: `h` must be a live object of its type (its
 *  `magic` field equals `magic_value`; destroy overwrites it), else the function returns
 *  KVC_ERR_INVALID_ARGUMENT with "<arg> is NULL or not a live <type>". The context is not
 *  known yet (it lives in the handle), so the text goes to the calling thread's
 *  context-free slot. */
#define KVC_CHECK_HANDLE(h, magic_value, arg, type)                                                    \
  do {                                                                                                 \
    if (!(h) || (h)->magic != (magic_value))                                                           \
      return kvc__error(NULL, KVC_ERR_INVALID_ARGUMENT, __func__, arg " is NULL or not a live " type); \
  } while (0)

#define KVC_FORWARD(expr)                  \
  do {                                     \
    kvc_status kvc_st_ = (expr);           \
    if (kvc_st_ != KVC_OK) return kvc_st_; \
  } while (0)

/* After the first acquisition: only these, with one cleanup label. */
#define KVC_CHECK_GOTO(expr, st, label) \
  do {                                  \
    (st) = (expr);                      \
    if ((st) != KVC_OK) goto label;     \
  } while (0)

#define KVC_FAIL_GOTO(cond, ctx, st, status, label, ...)         \
  do {                                                           \
    if (cond) {                                                  \
      (st) = kvc__error((ctx), (status), __func__, __VA_ARGS__); \
      goto label;                                                \
    }                                                            \
  } while (0)

/* Keep the first failure while cleaning up. */
#define KVC_CLEANUP_KEEP_FIRST(expr, st) \
  do {                                   \
    kvc_status kvc_st2_ = (expr);        \
    if ((st) == KVC_OK) (st) = kvc_st2_; \
  } while (0)

/* A kvc_index_type argument: anything but I32 / I64 is refused (never read as int32). */
#define KVC_CHECK_INDEX_TYPE(ctx, t)                                                         \
  KVC_RETURN_IF((t) != KVC_INDEX_I32 && (t) != KVC_INDEX_I64, ctx, KVC_ERR_INVALID_ARGUMENT, \
                #t " %d is not KVC_INDEX_I32 or KVC_INDEX_I64", (int)(t))

#define KVC_ARG_NOT_NULL(ctx, p) KVC_RETURN_IF((p) == NULL, ctx, KVC_ERR_INVALID_ARGUMENT, #p " is NULL")

/* --- Host memory ------------------------------------------------------------------- */

/** Allocation through the context's host allocator, counted in the core. Errno kept.
 *  Returns NULL on failure (also under fault injection). bytes == 0 allocates 1 byte. */
void *kvc__malloc(const kvc_context *ctx, size_t bytes);
void *kvc__calloc(const kvc_context *ctx, size_t count, size_t size);
void kvc__free(const kvc_context *ctx, void *ptr);
/** The context's host allocator (or malloc) without accounting or fault injection: for
 *  the library's own bookkeeping that outlives any one call (error slots). */
void *kvc__raw_alloc(kvc__core *core, size_t bytes);
void kvc__raw_free(kvc__core *core, void *p);

/* --- Checked arithmetic -------------------------------------------------------------
 * Sizes and counts from callers are hostile: every a + b and a * b on them goes through
 * these (true = fits, *out written), never a check after the fact. */

static inline bool kvc__mul_size(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool kvc__add_size(size_t a, size_t b, size_t *out) { return !__builtin_add_overflow(a, b, out); }
static inline bool kvc__mul_i64(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool kvc__add_i64(int64_t a, int64_t b, int64_t *out) { return !__builtin_add_overflow(a, b, out); }
static inline bool kvc__add_i32(int32_t a, int32_t b, int32_t *out) { return !__builtin_add_overflow(a, b, out); }
/** True when [start, start + n) lies inside [0, limit), computed without wrapping. */
static inline bool kvc__range_fits(uint64_t start, uint64_t n, uint64_t limit) {
  return start <= limit && n <= limit - start;
}

/* --- Widening --------------------------------------------------------------------- */

/* out[0:n) = in[0:n) as int64 (request rows of the int32 host mirror as slot lists). Eight
 * at a time through vector types: GCC -O2 (its very-cheap cost model) leaves a plain loop
 * with a tail scalar, about 0.5 ns a slot; this halves it (4096 slots, host: 2.3 -> 1.2 us).
 * The two do not overlap (restrict). */
typedef int32_t kvc__i32x8 __attribute__((vector_size(32)));
typedef int64_t kvc__i64x8 __attribute__((vector_size(64)));
static inline void kvc__widen_i32(int64_t *restrict out, const int32_t *restrict in, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    kvc__i32x8 v;
    memcpy(&v, in + i, sizeof v);
    const kvc__i64x8 w = __builtin_convertvector(v, kvc__i64x8);
    memcpy(out + i, &w, sizeof w);
  }
  for (; i < n; i++) out[i] = in[i];
}

/* --- Versioned structs ------------------------------------------------------------- */

/** Copies a caller's versioned struct (beginning with size_t struct_size, uint32_t
 *  version, ending with uint64_t reserved_[]) over `dst`, which holds the defaults.
 *  KVC_ERR_VERSION unless fixed_bytes (offsetof reserved_) <= struct_size <= dst_bytes
 *  and the major version matches; KVC_ERR_INVALID_ARGUMENT when a reserved_ word the
 *  caller passed is not zero. `what` names the argument ("config"). dst is unchanged on
 *  failure. Every create's config goes through this one function. */
kvc_status kvc__config_copy(const kvc_context *ctx, const char *what, void *dst, size_t dst_bytes, const void *src,
                            size_t fixed_bytes);
#define KVC__CONFIG_COPY(ctx, what, dst, src, type) \
  kvc__config_copy((ctx), (what), (dst), sizeof(type), (src), offsetof(type, reserved_))

/** The prologue of every create that takes a versioned config: ctx, config and out must
 *  be non-NULL (KVC_ERR_INVALID_ARGUMENT naming the first that is not), then the caller's
 *  config is copied over *c, which holds the defaults (the type's *_CONFIG_INIT).
 *  Returns from the create on failure; the messages name it. */
#define KVC__CREATE_CONFIG(ctx, config, out, c, type)                     \
  do {                                                                    \
    KVC_RETURN_IF(!(ctx), NULL, KVC_ERR_INVALID_ARGUMENT, "ctx is NULL"); \
    KVC_ARG_NOT_NULL(ctx, config);                                        \
    KVC_ARG_NOT_NULL(ctx, out);                                           \
    KVC_FORWARD(KVC__CONFIG_COPY(ctx, "config", c, config, type));        \
  } while (0)

/* --- Logging ----------------------------------------------------------------------- */

void kvc__log(const kvc_context *ctx, int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* --- Misc -------------------------------------------------------------------------- */

/** 64-bit FNV-1a, chainable (seed = previous hash, or KVC__HASH_SEED). */
#define KVC__HASH_SEED 0xcbf29ce484222325ull
uint64_t kvc__hash(uint64_t seed, const void *data, size_t bytes);

/** Monotonic seconds. */
double kvc__now(void);

#define KVC__MIN(a, b) ((a) < (b) ? (a) : (b))
#define KVC__MAX(a, b) ((a) > (b) ? (a) : (b))
#define KVC__ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif /* KVC_CORE_H */
