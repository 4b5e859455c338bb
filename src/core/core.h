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

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* --- Options (read once per context, from the environment) ------------------------- */

typedef enum kvc__log_level {
  KVC_LOG_ERROR = 0,
  KVC_LOG_WARN = 1,
  KVC_LOG_INFO = 2,
  KVC_LOG_DEBUG = 3
} kvc__log_level;

typedef struct kvc__options {
  int log_level;          /* KVC_LOG: error|warn|info|debug (default warn) */
  bool check;             /* KVC_CHECK: check mode */
  bool canary;            /* KVC_CANARY: flows guard the context's KV pool with canaries */
  bool dump_kernels;      /* KVC_DUMP_KERNELS: dump numbered source on compile failure */
  bool no_disk_cache;     /* KVC_NO_DISK_CACHE */
  int backend;            /* KVC_BACKEND: auto|host|cuda, -1 = not set */
  int64_t staging_bytes;  /* KVC_STAGING_BYTES (default 8M) */
  int64_t inline_max_words; /* KVC_INLINE_MAX_WORDS: largest payload carried in kernel
                               parameters (default 8000 = 32 KB; smaller goes staged) */
  char cache_dir[512];    /* KVC_CACHE_DIR or derived default */
  char nvrtc_lib[256];    /* KVC_NVRTC_LIB */
  char cuda_lib[256];     /* KVC_CUDA_LIB */
} kvc__options;

/** Fills `o` from the environment (then defaults). Warns on bad values. */
void kvc__options_load(kvc__options *o);
/** Prints every effective option once at info level. */
void kvc__options_print(const kvc__options *o, int level);

/* --- The core part of a context ---------------------------------------------------- */

typedef struct kvc__fault {
  /* Fault injection (tests): the Nth call of a kind fails; -1 = never. */
  int64_t host_alloc_fail_at, device_alloc_fail_at, launch_fail_at, compile_fail_at;
  int64_t host_allocs, device_allocs, launches, compiles;
  uint64_t last_device_bytes; /* size of the last kvc__dev_alloc request (overflow tests) */
} kvc__fault;

typedef struct kvc__core {
  uint64_t magic;
  uint64_t id; /* unique per context for the thread-local error slots */
  kvc_host_allocator host_allocator;
  kvc__options options;
  /* accounting */
  int64_t host_bytes_live, host_allocs_live;
  /* live kvc__dev_alloc allocations (any backend; src/device/memory.c) */
  int64_t device_allocs_live;
  kvc__fault fault; /* test hooks: src/core/fault.h */
} kvc__core;

#define KVC__CONTEXT_MAGIC 0x6b76632d63747821ull /* "kvc-ctx!" */

static inline kvc__core *kvc__core_of(const kvc_context *ctx) { return (kvc__core *)(void *)ctx; }

/** Initialises the core part (id, allocator, options). */
void kvc__core_init(kvc__core *core, const kvc_context_config *config);

/* --- Errors ------------------------------------------------------------------------ */

/** Records "func: message" as the calling thread's last error on ctx (ctx may be NULL)
 *  and returns `status`. Never allocates. */
kvc_status (kvc__error)(const kvc_context *ctx, kvc_status status, const char *func, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
#if defined(__GNUC__)
/* Calls go through this macro so that their result is visibly `status` itself (evaluated
 * once): the static analyzer does not look into error.c, so it would otherwise assume
 * that `return kvc__error(...)` may return KVC_OK, i.e. that a failed check falls through
 * to callers with its out-parameters unset. */
#define kvc__error(ctx, status, ...)                                                        \
  __extension__({                                                                           \
    const kvc_status kvc_err_st_ = (status);                                                \
    (void)(kvc__error)((ctx), kvc_err_st_, __VA_ARGS__);                                    \
    kvc_err_st_;                                                                            \
  })
#endif
kvc_status kvc__verror(const kvc_context *ctx, kvc_status status, const char *func,
                       const char *fmt, va_list ap);
/** Appends text to the thread's last error on ctx (for NVRTC logs). */
void kvc__error_append(const kvc_context *ctx, const char *text);

/* --- Check macros ------------------------------------------------------------------ */

/* Before any resource is held: return directly. */
#define KVC_RETURN_IF(cond, ctx, status, ...)                                               \
  do {                                                                                      \
    if (cond) return kvc__error((ctx), (status), __func__, __VA_ARGS__);                   \
  } while (0)

#define KVC_FORWARD(expr)                                                                   \
  do {                                                                                      \
    kvc_status kvc_st_ = (expr);                                                            \
    if (kvc_st_ != KVC_OK) return kvc_st_;                                                  \
  } while (0)

/* After the first acquisition: only these, with one cleanup label. */
#define KVC_CHECK_GOTO(expr, st, label)                                                     \
  do {                                                                                      \
    (st) = (expr);                                                                          \
    if ((st) != KVC_OK) goto label;                                                         \
  } while (0)

#define KVC_FAIL_GOTO(cond, ctx, st, status, label, ...)                                    \
  do {                                                                                      \
    if (cond) {                                                                             \
      (st) = kvc__error((ctx), (status), __func__, __VA_ARGS__);                           \
      goto label;                                                                           \
    }                                                                                       \
  } while (0)

/* Keep the first failure while cleaning up. */
#define KVC_CLEANUP_KEEP_FIRST(expr, st)                                                    \
  do {                                                                                      \
    kvc_status kvc_st2_ = (expr);                                                           \
    if ((st) == KVC_OK) (st) = kvc_st2_;                                                    \
  } while (0)

#define KVC_ARG_NOT_NULL(ctx, p) KVC_RETURN_IF((p) == NULL, ctx, KVC_ERR_INVALID_ARGUMENT, #p " is NULL")

/* --- Host memory ------------------------------------------------------------------- */

/** Allocation through the context's host allocator, counted in the core. Errno kept.
 *  Returns NULL on failure (also under fault injection). bytes == 0 allocates 1 byte. */
void *kvc__malloc(const kvc_context *ctx, size_t bytes);
void *kvc__calloc(const kvc_context *ctx, size_t count, size_t size);
void kvc__free(const kvc_context *ctx, void *ptr);

/** Overflow-checked size arithmetic: returns false on overflow. */
static inline bool kvc__mul_size(size_t a, size_t b, size_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}
static inline bool kvc__add_size(size_t a, size_t b, size_t *out) {
  return !__builtin_add_overflow(a, b, out);
}

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
