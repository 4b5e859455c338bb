/*
 * allocator_cache.c — a bound radix cache's held marks in a TOKEN allocator's page states
 * (KVC__PG_CACHED; alloc.h says why): binding, and the marks an insert sets and a failed
 * insert or a reset clears. The eviction's free of marked slots is kvc__alloc_free_cached
 * (allocator.c, beside the free it shares its one pass with).
 */
#include "alloc.h"

kvc_status kvc__alloc_bind_cache(kvc_allocator *a, const void *owner, const char *fn) {
  if (a->kind != KVC_ALLOCATOR_TOKEN)
    return kvc__error(a->ctx, KVC_ERR_INVALID_ARGUMENT, fn,
                      "only a TOKEN allocator can hold a radix cache's marks (this one is PAGED)");
  if (a->cache_owner) return kvc__error(a->ctx, KVC_ERR_MISUSE, fn, "the allocator is bound to a radix cache already");
  a->cache_owner = owner;
  return KVC_OK;
}

void kvc__alloc_unbind_cache(kvc_allocator *a, const void *owner) {
  if (a->cache_owner == owner) a->cache_owner = NULL;
}

/* Four a step, as the cache's own page-1 mark (radix_held.c, mark_tokens): one branch for
 * the four range tests and one for the four states. Each state is read after the previous
 * slot's store, so a slot repeated inside the step reads the CACHED its first listing
 * wrote; a failing step is put back in reverse order (exactly as it was) and re-run a
 * slot at a time to find where to stop. */
size_t kvc__alloc_cache_mark(kvc_allocator *a, const int64_t *slots, size_t n) {
  uint8_t *const st = a->state;
  const uint64_t np = (uint64_t)a->num_pages;
  const uint8_t to = KVC__PG_HELD | KVC__PG_CACHED;
  size_t k = 0;
  for (; k + 4 <= n; k += 4) {
    const uint64_t s0 = (uint64_t)slots[k], s1 = (uint64_t)slots[k + 1];
    const uint64_t s2 = (uint64_t)slots[k + 2], s3 = (uint64_t)slots[k + 3];
    if (((s0 - 1 >= np) | (s1 - 1 >= np)) | ((s2 - 1 >= np) | (s3 - 1 >= np))) break;
    const unsigned t0 = st[s0];
    st[s0] = to;
    const unsigned t1 = st[s1];
    st[s1] = to;
    const unsigned t2 = st[s2];
    st[s2] = to;
    const unsigned t3 = st[s3];
    st[s3] = to;
    if (((t0 ^ KVC__PG_HELD) | (t1 ^ KVC__PG_HELD)) | ((t2 ^ KVC__PG_HELD) | (t3 ^ KVC__PG_HELD))) {
      st[s3] = (uint8_t)t3;
      st[s2] = (uint8_t)t2;
      st[s1] = (uint8_t)t1;
      st[s0] = (uint8_t)t0;
      break;
    }
  }
  for (; k < n; k++) {
    const uint64_t s = (uint64_t)slots[k];
    if (s - 1 >= np || st[s] != KVC__PG_HELD) break;
    st[s] = to;
  }
  return k;
}

void kvc__alloc_cache_unmark(kvc_allocator *a, const int64_t *slots, size_t n) {
  uint8_t *const st = a->state;
  for (size_t k = 0; k < n; k++) st[slots[k]] = KVC__PG_HELD;
}

bool kvc__alloc_any_cached(const kvc_allocator *a, const uint32_t *ids, int64_t n) {
  if (!a->cache_owner) return false;
  for (int64_t i = 0; i < n; i++)
    if (a->state[ids[i]] & KVC__PG_CACHED) return true;
  return false;
}
