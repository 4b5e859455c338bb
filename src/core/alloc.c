/*
 * alloc.c — host allocation through the context's allocator, with a small header that
 * remembers the size so live bytes can be accounted (kvc_stats, leak checks in tests).
 *
 *   [ size_t bytes | pad to 16 ][ user memory ... ]
 */
#include "core.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KVC__HDR 16u

void *kvc__raw_alloc(kvc__core *core, size_t bytes) {
  if (core && core->host_allocator.alloc) return core->host_allocator.alloc(core->host_allocator.opaque, bytes);
  return malloc(bytes);
}

void kvc__raw_free(kvc__core *core, void *p) {
  if (core && core->host_allocator.free) core->host_allocator.free(core->host_allocator.opaque, p);
  else free(p);
}

void *kvc__malloc(const kvc_context *ctx, size_t bytes) {
  kvc__core *core = ctx ? kvc__core_of(ctx) : NULL;
  if (core) {
    if (kvc__fault_hit(&core->fault.host_allocs, &core->fault.host_alloc_fail_at)) return NULL;
  }
  size_t total;
  /* No object may exceed PTRDIFF_MAX (glibc refuses too): fail before the allocator. */
  if (!kvc__add_size(bytes ? bytes : 1, KVC__HDR, &total) || total > (size_t)PTRDIFF_MAX) return NULL;
  int saved = errno;
  unsigned char *p = kvc__raw_alloc(core, total);
  errno = saved;
  if (!p) return NULL;
  memcpy(p, &bytes, sizeof bytes);
  if (core) {
    kvc__counter_add(&core->host_bytes_live, (int64_t)bytes);
    kvc__counter_add(&core->host_allocs_live, 1);
  }
  return p + KVC__HDR;
}

void *kvc__calloc(const kvc_context *ctx, size_t count, size_t size) {
  size_t bytes;
  if (!kvc__mul_size(count, size, &bytes)) return NULL;
  kvc__core *core = ctx ? kvc__core_of(ctx) : NULL;
  if (core && core->host_allocator.alloc) {
    void *p = kvc__malloc(ctx, bytes);
    if (p) memset(p, 0, bytes);
    return p;
  }
  /* Plain calloc keeps large zeroed mirrors lazily mapped (no RSS until written). */
  if (core) {
    if (kvc__fault_hit(&core->fault.host_allocs, &core->fault.host_alloc_fail_at)) return NULL;
  }
  size_t total;
  if (!kvc__add_size(bytes ? bytes : 1, KVC__HDR, &total) || total > (size_t)PTRDIFF_MAX) return NULL;
  int saved = errno;
  unsigned char *p = calloc(1, total);
  errno = saved;
  if (!p) return NULL;
  memcpy(p, &bytes, sizeof bytes);
  if (core) {
    kvc__counter_add(&core->host_bytes_live, (int64_t)bytes);
    kvc__counter_add(&core->host_allocs_live, 1);
  }
  return p + KVC__HDR;
}

void kvc__free(const kvc_context *ctx, void *ptr) {
  if (!ptr) return;
  kvc__core *core = ctx ? kvc__core_of(ctx) : NULL;
  unsigned char *p = (unsigned char *)ptr - KVC__HDR;
  size_t bytes;
  memcpy(&bytes, p, sizeof bytes);
  if (core) {
    kvc__counter_add(&core->host_bytes_live, -(int64_t)bytes);
    kvc__counter_add(&core->host_allocs_live, -1);
  }
  int saved = errno;
  kvc__raw_free(core, p);
  errno = saved;
}
