/*
 * util.c — core init, logging, hashing and the clock.
 */
#define _POSIX_C_SOURCE 200809L
#include "core.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static atomic_uint_fast64_t next_context_id = 1;

kvc_status kvc__core_init(kvc__core *core, const kvc_context_config *config) {
  memset(core, 0, sizeof *core);
  core->magic = KVC__CONTEXT_MAGIC;
  core->id = atomic_fetch_add(&next_context_id, 1);
  if (config) core->host_allocator = config->host_allocator;
  kvc__options_load(&core->options);
  if (config && (config->flags & KVC_CONTEXT_CHECK)) core->options.check = true;
  if (config && (config->flags & KVC_CONTEXT_CANARY)) core->options.canary = true;
  if (config && (config->flags & KVC_CONTEXT_NO_DISK_CACHE)) core->options.no_disk_cache = true;
  if (config && config->cache_dir) {
    size_t n = strlen(config->cache_dir);
    if (n < sizeof core->options.cache_dir) memcpy(core->options.cache_dir, config->cache_dir, n + 1);
  }
  kvc__counter_set(&core->fault.host_alloc_fail_at, -1);
  kvc__counter_set(&core->fault.device_alloc_fail_at, -1);
  kvc__counter_set(&core->fault.launch_fail_at, -1);
  kvc__counter_set(&core->fault.compile_fail_at, -1);
  return kvc__error_slots_init(core);
}

void kvc__core_fini(kvc__core *core) { kvc__error_slots_fini(core); }

void kvc__log(const kvc_context *ctx, int level, const char *fmt, ...) {
  int threshold = ctx ? kvc__core_of(ctx)->options.log_level : KVC_LOG_WARN;
  if (level > threshold) return;
  static const char *names[] = {"error", "warning", "info", "debug"};
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "kvcache: %s: ", names[level < 0 ? 0 : level > 3 ? 3 : level]);
  /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): va_start is above (see error.c) */
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

uint64_t kvc__hash(uint64_t seed, const void *data, size_t bytes) {
  const unsigned char *p = data;
  uint64_t h = seed;
  for (size_t i = 0; i < bytes; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

double kvc__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --- Versioned structs ------------------------------------------------------------- */

typedef struct versioned_head {
  size_t struct_size;
  uint32_t version;
} versioned_head;

kvc_status kvc__config_copy(const kvc_context *ctx, const char *what, void *dst, size_t dst_bytes, const void *src,
                            size_t fixed_bytes) {
  versioned_head head;
  memcpy(&head, src, sizeof head);
  if (head.struct_size < fixed_bytes || head.struct_size > dst_bytes)
    return kvc__error(ctx, KVC_ERR_VERSION, __func__,
                      "%s->struct_size %zu not understood (expected %zu; use the *_INIT macro)", what, head.struct_size,
                      dst_bytes);
  if (head.version / 10000 != KVC_VERSION_MAJOR)
    return kvc__error(ctx, KVC_ERR_VERSION, __func__, "%s->version %u is from another major version (library %u)", what,
                      head.version, KVC_VERSION_NUMBER);
  /* reserved_ words are where later minors add fields: a non-zero one is a field this
   * library does not know, so honouring the call would silently ignore it. */
  const unsigned char *bytes = src;
  for (size_t at = fixed_bytes; at + sizeof(uint64_t) <= head.struct_size; at += sizeof(uint64_t)) {
    uint64_t word;
    memcpy(&word, bytes + at, sizeof word);
    if (word != 0)
      return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, __func__, "%s->reserved_[%zu] must be zero", what,
                        (at - fixed_bytes) / sizeof(uint64_t));
  }
  memcpy(dst, src, head.struct_size);
  return KVC_OK;
}
