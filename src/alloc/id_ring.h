/*
 * id_ring.h — the one ring of free ids behind every free list of the slot-allocation
 * layer: the req pool's free rows, the token/paged allocator's free pages (free_list.c)
 * and the Mamba pool's free slots.
 *
 *   buf: uint32 ids, power-of-two capacity >= the number of ids
 *
 *        push_front / undo_take               take / pop_front (every alloc)
 *                       v                       v
 *      ... [ . . . . | a  b  c  d ... z | . . . . ] ...
 *                      ^head            ^head + count  <- push_back (FIFO frees)
 *                                                       -> undo_push_back
 *
 * head is a free-running 64-bit counter: entry i (from the front) lives at
 * buf[(head + i) & mask], so stepping head back for a push at the front wraps mod 2^64
 * with no special case, and a plain array is a ring that never wraps (kvc__ring_view).
 *
 * Why one state byte per id beside the ring: each owner keeps one (held, reserved,
 * deferred...), and an id in the ring always has the owner's "free" value there. The
 * mutating operations set the byte in the same loop as they move the id, so that the
 * owner's free path is a single pass (the token allocator's free is the hottest host
 * loop of the library), and the audit checks the ring against the bytes.
 *
 * Why these operations and no others: they are exactly the orders SGLang's lists have —
 * pop from the front; FIFO frees append (req rows, Mamba slots, TOKEN pages); PAGED frees
 * prepend their pages in order (`released ++ free_pages`); a call that fails after taking
 * ids gives them back to the front in their order (undo_take), so the next caller gets
 * the same ids as if the failed call had never run, which a plain free would not do.
 *
 * Nothing here checks its arguments: the owners validate ids (range, state) before any
 * mutation, and count <= capacity holds because every id is in the ring at most once.
 */
#ifndef KVC_ID_RING_H
#define KVC_ID_RING_H

#include "../core/core.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

typedef struct kvc__ring {
  uint32_t *buf;
  uint64_t mask; /* capacity - 1 */
  uint64_t head;
  int64_t count;
} kvc__ring;

/** Allocates room for `capacity` ids (1 <= capacity <= 2^31), the ring empty.
 *  KVC_ERR_HOST_OOM with *r unchanged. */
kvc_status kvc__ring_init(kvc_context *ctx, const char *fn, kvc__ring *r, int64_t capacity);
/** Frees the buffer (a zeroed or failed ring is fine). */
void kvc__ring_fini(kvc_context *ctx, kvc__ring *r);
/** Ids 1..n in ascending order from the front (n <= capacity): every owner's reset. */
void kvc__ring_fill(kvc__ring *r, int64_t n);
/** Copies n entries from front index `from` to dst, in ring order. */
void kvc__ring_copy(const kvc__ring *r, int64_t from, int64_t n, uint32_t *dst);

/** A plain array of n ids seen as a ring (head 0, never wraps), for the audit. */
static inline kvc__ring kvc__ring_view(uint32_t *ids, int64_t n) {
  kvc__ring r = {ids, UINT64_MAX, 0, n};
  return r;
}

static inline uint32_t kvc__ring_at(const kvc__ring *r, int64_t i) { return r->buf[(r->head + (uint64_t)i) & r->mask]; }

/* The loops below copy the ring's fields into locals: the state stores are bytes, which
 * may alias anything, so the compiler would otherwise reload (and for head re-store) the
 * fields after every store, a store-to-load chain that costs more than the work. */

/** Takes the n front entries (n <= count), writing them to out (NULL: the caller read
 *  them already with kvc__ring_at) and setting their state bytes to `to`. */
static inline void kvc__ring_take(kvc__ring *r, int64_t n, uint32_t *out, uint8_t *state, uint8_t to) {
  const uint32_t *const buf = r->buf;
  const uint64_t mask = r->mask, head = r->head;
  for (int64_t i = 0; i < n; i++) {
    const uint32_t id = buf[(head + (uint64_t)i) & mask];
    state[id] = to;
    if (out) out[i] = id;
  }
  r->head = head + (uint64_t)n;
  r->count -= n;
}

/** take() of one id (count >= 1). */
static inline uint32_t kvc__ring_pop_front(kvc__ring *r, uint8_t *state, uint8_t to) {
  const uint32_t id = r->buf[r->head & r->mask];
  r->head++;
  r->count--;
  state[id] = to;
  return id;
}

/** Appends ids[0:n) in order (FIFO frees), their state bytes set to `to`. ids must not
 *  point into the ring's own buffer (they are copied with memcpy). */
static inline void kvc__ring_push_back(kvc__ring *r, const uint32_t *ids, int64_t n, uint8_t *state, uint8_t to) {
  uint32_t *const buf = r->buf;
  const uint64_t mask = r->mask, tail = r->head + (uint64_t)r->count;
  if (n >= 16) {
    /* The states in one pass, the ids in (at most two) copies up to and past the wrap:
     * the fused loop was ~9 instructions an id, the index masked for every store. */
    for (int64_t i = 0; i < n; i++) state[ids[i]] = to;
    const uint64_t at = tail & mask, room = mask + 1 - at;
    const size_t first = (uint64_t)n < room ? (size_t)n : (size_t)room;
    memcpy(buf + at, ids, first * sizeof *buf);
    memcpy(buf, ids + first, ((size_t)n - first) * sizeof *buf);
  } else {
    for (int64_t i = 0; i < n; i++) {
      state[ids[i]] = to;
      buf[(tail + (uint64_t)i) & mask] = ids[i];
    }
  }
  r->count += n;
}

/** Prepends ids[0:n) keeping their order, ids[0] at the front (`ids ++ ring`). */
static inline void kvc__ring_push_front(kvc__ring *r, const uint32_t *ids, int64_t n, uint8_t *state, uint8_t to) {
  uint32_t *const buf = r->buf;
  const uint64_t mask = r->mask, head = r->head - (uint64_t)n;
  for (int64_t i = 0; i < n; i++) {
    state[ids[i]] = to;
    buf[(head + (uint64_t)i) & mask] = ids[i];
  }
  r->head = head;
  r->count += n;
}

/** Undoes the takes of a call that failed later: ids[0:n) are what it took, in the order
 *  it took them. Each id in [1, max_id] whose state is still `held` goes back to the
 *  front (the others are skipped: the owner never un-grants a free id), so that the
 *  ring's order is as before the call. */
static inline void kvc__ring_undo_take(kvc__ring *r, const uint32_t *ids, int64_t n, uint8_t *state, uint8_t held,
                                       uint8_t to, uint32_t max_id) {
  uint32_t *const buf = r->buf;
  const uint64_t mask = r->mask;
  uint64_t head = r->head;
  int64_t back = 0;
  for (int64_t i = n; i-- > 0;) {
    const uint32_t id = ids[i];
    if (id < 1 || id > max_id || state[id] != held) continue;
    state[id] = to;
    buf[--head & mask] = id;
    back++;
  }
  r->head = head;
  r->count += back;
}

/** Undoes the last n push_back()s (n <= count, nothing taken from the back since): the
 *  n newest entries leave the ring, their state bytes set to `to`. */
static inline void kvc__ring_undo_push_back(kvc__ring *r, int64_t n, uint8_t *state, uint8_t to) {
  const uint32_t *const buf = r->buf;
  const uint64_t mask = r->mask, tail = r->head + (uint64_t)r->count;
  for (int64_t i = 1; i <= n; i++) state[buf[(tail - (uint64_t)i) & mask]] = to;
  r->count -= n;
}

/** What an audit compares a ring with: the owner's state bytes. */
typedef struct kvc__ring_ids {
  uint8_t *state;     /* max_id + 1 bytes, one per id */
  uint32_t max_id;    /* valid ids are 1..max_id (0 is every owner's padding id) */
  uint8_t free_state; /* the state byte of every id in the ring */
  uint8_t mark;       /* a state bit that no id carries between calls */
  const char *list;   /* words for the message: "free list", "row" */
  const char *noun;
} kvc__ring_ids;

/** O(count) audit: count in [0, min(capacity, max_id)], every entry an id in
 *  [1, max_id] whose state byte is `free_state`, no id twice. Repeats are found by
 *  setting `mark` on each entry's byte (cleared again before returning), so the audit
 *  needs no memory and cannot fail for want of it; it writes the state bytes, though,
 *  so it counts as a write under the owners' single-writer rule. Counting the
 *  free-state ids against `count` is the owner's part (it walks its states anyway).
 *  KVC_ERR_INTERNAL with a message naming `fn` when violated. */
kvc_status kvc__ring_audit(const kvc_context *ctx, const char *fn, const kvc__ring *r, const kvc__ring_ids *ids);

#endif /* KVC_ID_RING_H */
