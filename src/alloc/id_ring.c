/*
 * id_ring.c — the cold half of the id ring (id_ring.h): buffer, reset, bulk copy, audit.
 */
#include "id_ring.h"

#include <string.h>

kvc_status kvc__ring_init(kvc_context *ctx, const char *fn, kvc__ring *r, int64_t capacity) {
  if (capacity < 1 || capacity > ((int64_t)1 << 31))
    return kvc__error(ctx, KVC_ERR_INTERNAL, fn, "ring capacity %lld outside [1, 2^31]", (long long)capacity);
  uint64_t cap = 1;
  while (cap < (uint64_t)capacity) cap <<= 1;
  size_t bytes;
  if (!kvc__mul_size((size_t)cap, sizeof(uint32_t), &bytes))
    return kvc__error(ctx, KVC_ERR_HOST_OOM, fn, "ring of %llu ids", (unsigned long long)cap);
  uint32_t *buf = kvc__malloc(ctx, bytes);
  if (!buf) return kvc__error(ctx, KVC_ERR_HOST_OOM, fn, "ring of %llu ids", (unsigned long long)cap);
  r->buf = buf;
  r->mask = cap - 1;
  r->head = 0;
  r->count = 0;
  return KVC_OK;
}

void kvc__ring_fini(kvc_context *ctx, kvc__ring *r) {
  kvc__free(ctx, r->buf);
  r->buf = NULL;
  r->count = 0;
}

void kvc__ring_fill(kvc__ring *r, int64_t n) {
  for (int64_t i = 0; i < n; i++) r->buf[i] = (uint32_t)(i + 1);
  r->head = 0;
  r->count = n;
}

void kvc__ring_copy(const kvc__ring *r, int64_t from, int64_t n, uint32_t *dst) {
  if (n <= 0) return;
  const uint64_t pos = (r->head + (uint64_t)from) & r->mask;
  /* Up to the end of the buffer, then from its start (a view never wraps: mask is all
   * ones, so the first part is everything). */
  const uint64_t room = r->mask - pos + 1;
  const uint64_t first = room == 0 || room > (uint64_t)n ? (uint64_t)n : room;
  memcpy(dst, r->buf + pos, (size_t)first * sizeof *dst);
  if ((uint64_t)n > first) memcpy(dst + first, r->buf, (size_t)((uint64_t)n - first) * sizeof *dst);
}

kvc_status kvc__ring_audit(const kvc_context *ctx, const char *fn, const kvc__ring *r, const kvc__ring_ids *ids) {
  /* count <= capacity, written so that a view's capacity (2^64) does not overflow. */
  if (r->count < 0 || r->count > (int64_t)ids->max_id || (r->count > 0 && (uint64_t)(r->count - 1) > r->mask))
    return kvc__error(ctx, KVC_ERR_INTERNAL, fn, "check: %s holds %lld entries, room for %llu of %u %ss", ids->list,
                      (long long)r->count, (unsigned long long)r->mask + 1, ids->max_id, ids->noun);
  uint8_t *const state = ids->state;
  const uint8_t free_state = ids->free_state, mark = ids->mark;
  kvc_status st = KVC_OK;
  int64_t i = 0;
  for (; i < r->count; i++) {
    const uint32_t id = kvc__ring_at(r, i);
    if (id < 1 || id > ids->max_id) {
      st = kvc__error(ctx, KVC_ERR_INTERNAL, fn, "check: %s entry %lld = %s %u is out of range [1, %u]", ids->list,
                      (long long)i, ids->noun, id, ids->max_id);
      break;
    }
    if (state[id] != free_state) {
      /* The mark bit is set only by this loop, so a marked free id was seen before. */
      if (state[id] == (uint8_t)(free_state | mark))
        st = kvc__error(ctx, KVC_ERR_INTERNAL, fn, "check: %s entry %lld = %s %u is repeated", ids->list, (long long)i,
                        ids->noun, id);
      else
        st = kvc__error(ctx, KVC_ERR_INTERNAL, fn, "check: %s entry %lld = %s %u is not free (state 0x%x)", ids->list,
                        (long long)i, ids->noun, id, state[id]);
      break;
    }
    state[id] = (uint8_t)(free_state | mark);
  }
  for (int64_t j = 0; j < i; j++) state[kvc__ring_at(r, j)] = free_state;
  return st;
}
