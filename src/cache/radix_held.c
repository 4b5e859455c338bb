/*
 * radix_held.c — the held-page bitmap of kvc_radix_cache: which pages the tree owns, so
 * that a slot given twice, or a duplicate that is really the tree's, is refused before
 * anything changes (SGLang would corrupt its allocator silently).
 */
#include "radix.h"
#include "../alloc/alloc.h"

#include <string.h>

/* --- Held slots ---------------------------------------------------------------------------- */

/* One byte per page, not one bit: clearing a bit is a load, an and and a store on a word
 * that neighbouring slots share, and recycled slots at page 1 are lone slots and short
 * runs, so an eviction's ~1,100-2,300 slots were a read-modify-write each, each store the
 * next load's dependency whenever two slots shared a word (~1.5 ns a slot: most of the
 * tree's share of a page-1 eviction). A byte is one plain store. The map costs a byte per
 * page of capacity (1 MB for 10^6 slots at page 1, within the memory bound); runs of
 * consecutive pages are tested and set a range at a time with page_size > 1 (eviction
 * reads only each page's first slot there); at page 1 marks and clears go a slot at a
 * time, four a step (see mark_tokens and kvc__rx_unmark: the run scan cost more than the
 * stores it saved), and only the check of slots to free still looks for runs. */

/* Page size 1, slot i not followed by slot i + 1: a run of one slot, as kvc__rx_run_end
 * would find it, tested without the run scan by kvc__rx_check_free (same status and *bad
 * as the run path). A token allocator hands out recycled slots in free order, so
 * under eviction pressure a request's slots are mostly lone slots and short runs, where the
 * scan's mispredicted run ends cost more than the mark. */
static inline bool lone_slot(int64_t ps, const int64_t *s, int64_t i, int64_t n) {
  return ps == 1 && i + 1 < n && (uint64_t)s[i + 1] - (uint64_t)s[i] != 1;
}

/* Any of pages [a, b] held: eight bytes a test (memcpy is the aliasing-safe load). */
static bool range_any(const uint8_t *h, int64_t a, int64_t b) {
  int64_t i = a;
  for (; i + 8 <= b + 1; i += 8) {
    uint64_t w;
    memcpy(&w, h + i, sizeof w);
    if (w) return true;
  }
  for (; i <= b; i++)
    if (h[i]) return true;
  return false;
}

static void range_set(uint8_t *h, int64_t a, int64_t b, bool on) { memset(h + a, on, (size_t)(b - a + 1)); }

typedef uint64_t rx_u64x2 __attribute__((vector_size(16)));

/* End of the run of consecutive page ids starting at page k of slots (np pages). Page
 * size 1: along a run s[j] is s[k] + (j - k), so blocks of 16 are compared branch-free
 * with the expected ids, two lanes at a time, the expected vector stepped by an add
 * (written as scalars, GCC rebuilt each lane's index with shuffles: most of a mark's
 * time on a 4096-slot run). memcpy is the alignment- and aliasing-safe vector load. */
int64_t kvc__rx_run_end(const int64_t *s, int64_t k, int64_t np, int64_t ps) {
  int64_t j = k + 1;
  if (ps == 1) {
    const uint64_t c = (uint64_t)s[k] - (uint64_t)k;
    const rx_u64x2 two = {2, 2}, four = {4, 4};
    while (j + 16 <= np) {
      rx_u64x2 e0 = {c + (uint64_t)j, c + (uint64_t)j + 1}, e1 = e0 + two, d0 = {0, 0}, d1 = {0, 0};
      for (int i = 0; i < 16; i += 4) {
        rx_u64x2 x, y;
        memcpy(&x, s + j + i, sizeof x);
        memcpy(&y, s + j + i + 2, sizeof y);
        d0 |= x ^ e0;
        d1 |= y ^ e1;
        e0 += four;
        e1 += four;
      }
      d0 |= d1;
      if (d0[0] | d0[1]) break;
      j += 16;
    }
    while (j < np && (uint64_t)s[j] - (uint64_t)j == c) j++;
    return j;
  }
  while (j < np && s[j * ps] == s[(j - 1) * ps] + ps) j++;
  return j;
}

/* kvc__rx_mark at page size 1, a slot at a time, four a step: a chunked prefill's 2048
 * recycled slots are mostly short runs, and finding each run's end first (the run path
 * below) was two thirds of a page-1 cache_unfinished_req (callgrind, chat trace at 10^5:
 * 40.8 M instructions in the run scan, 20.4 M in the mark, 2378 calls). Each byte is
 * tested after the previous slot's store, so a slot repeated inside a step of four is
 * found; a failing step is put back in reverse order (exactly as it was) and re-run a
 * slot at a time. Same result as the run path: a failure is reported for the run (of
 * consecutive ids) holding the bad slot, found only then: INVALID_ARGUMENT when that run
 * leaves [1, top] (the run path tests its ends before its marks), else MISUSE, *bad its
 * first slot, nothing marked; *run_first is slots[0] only when all n are one run. */
/* slots[0] when the n > 0 slots are one run of consecutive ids, else -1. */
static int64_t one_run(const int64_t *slots, int64_t n) {
  return (uint64_t)slots[n - 1] - (uint64_t)slots[0] == (uint64_t)(n - 1) && kvc__rx_run_end(slots, 0, n, 1) == n
             ? slots[0]
             : -1;
}

/* The page-1 marks' failure at slot k (nothing marked any more): *bad the first slot of the
 * run of consecutive ids holding slot k; INVALID_ARGUMENT when that run leaves [1, top]
 * (the run path tests its ends before its marks), else MISUSE. */
static kvc_status run_failure(const kvc_radix_cache *rc, const int64_t *slots, int64_t n, int64_t k, int64_t *bad) {
  int64_t r0 = k, r1 = k + 1;
  while (r0 > 0 && (uint64_t)slots[r0] - (uint64_t)slots[r0 - 1] == 1) r0--;
  while (r1 < n && (uint64_t)slots[r1] - (uint64_t)slots[r1 - 1] == 1) r1++;
  *bad = r0;
  return slots[r0] < 1 || slots[r1 - 1] > rc->top_slot ? KVC_ERR_INVALID_ARGUMENT : KVC_ERR_MISUSE;
}

static kvc_status mark_tokens(kvc_radix_cache *rc, const int64_t *slots, int64_t n, int64_t *bad, int64_t *run_first) {
  uint8_t *const h = rc->held;
  const uint64_t top = (uint64_t)rc->top_slot;
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    const uint64_t a = (uint64_t)slots[k], b = (uint64_t)slots[k + 1];
    const uint64_t c = (uint64_t)slots[k + 2], d = (uint64_t)slots[k + 3];
    if (((a - 1 >= top) | (b - 1 >= top)) | ((c - 1 >= top) | (d - 1 >= top))) break; /* outside [1, top] */
    const unsigned x = h[a];
    h[a] = 1;
    const unsigned y = h[b];
    h[b] = 1;
    const unsigned z = h[c];
    h[c] = 1;
    const unsigned w = h[d];
    h[d] = 1;
    if ((x | y) | (z | w)) {
      h[d] = (uint8_t)w;
      h[c] = (uint8_t)z;
      h[b] = (uint8_t)y;
      h[a] = (uint8_t)x;
      break;
    }
  }
  for (; k < n; k++) {
    const uint64_t a = (uint64_t)slots[k];
    if (a - 1 >= top || h[a]) break;
    h[a] = 1;
  }
  if (k == n) {
    if (run_first) *run_first = one_run(slots, n);
    return KVC_OK;
  }
  kvc__rx_unmark(rc, slots, k);
  return run_failure(rc, slots, n, k, bad);
}

/* kvc__rx_mark of a bound cache (page size 1): the marks are the allocator's CACHED bits
 * (alloc.h), so each slot must be exactly HELD there (handed out, not cached yet, not freed
 * inside an open group), which also refuses a slot the allocator does not hold. Failures
 * as mark_tokens reports them, nothing marked. */
static kvc_status mark_bound(kvc_radix_cache *rc, const int64_t *slots, int64_t n, int64_t *bad, int64_t *run_first) {
  const size_t k = kvc__alloc_cache_mark(rc->bound, slots, (size_t)n);
  if (k == (size_t)n) {
    if (run_first) *run_first = one_run(slots, n);
    return KVC_OK;
  }
  kvc__alloc_cache_unmark(rc->bound, slots, k);
  return run_failure(rc, slots, n, (int64_t)k, bad);
}

kvc_status kvc__rx_mark(kvc_radix_cache *rc, const int64_t *slots, int64_t n, int64_t *bad, int64_t *run_first) {
  if (rc->bound && n > 0) return mark_bound(rc, slots, n, bad, run_first);
  if (rc->ps == 1 && n > 0) return mark_tokens(rc, slots, n, bad, run_first);
  /* Runs of consecutive slots: each must start and end on a page boundary of the key and
   * start on a page-aligned slot, which makes every page in it one allocator page. */
  const int64_t ps = rc->ps, top = rc->top_slot;
  int64_t i = 0;
  kvc_status st = KVC_OK;
  while (i < n) {
    const int64_t j = kvc__rx_run_end(slots, i, n, 1), a = slots[i], b = slots[j - 1];
    if (a < 1 || b > top || rx_page(rc, j - i) * ps != j - i || a - rx_page(rc, a) * ps) {
      st = KVC_ERR_INVALID_ARGUMENT;
      break;
    }
    if (range_any(rc->held, rx_page(rc, a), rx_page(rc, b))) {
      st = KVC_ERR_MISUSE;
      break;
    }
    range_set(rc->held, rx_page(rc, a), rx_page(rc, b), true);
    if (run_first) *run_first = i == 0 && j == n ? a : -1;
    i = j;
  }
  if (st != KVC_OK) {
    kvc__rx_unmark(rc, slots, i);
    *bad = i; /* the first slot of the offending run */
  }
  return st;
}

kvc_status kvc__rx_check_free(const kvc_radix_cache *rc, const int64_t *slots, int64_t n, int64_t *bad) {
  const int64_t top = rc->top_slot;
  if (rc->bound) {
    for (int64_t i = 0; i < n; i++) {
      const int64_t s = slots[i];
      if (s < 1 || s > top || kvc__alloc_slot_cached(rc->bound, s)) {
        *bad = i;
        return s < 1 || s > top ? KVC_ERR_INVALID_ARGUMENT : KVC_ERR_MISUSE;
      }
    }
    return KVC_OK;
  }
  for (int64_t i = 0; i < n;) {
    if (lone_slot(1, slots, i, n)) { /* a run of one slot (the run path's checks, for one bit) */
      const int64_t s = slots[i];
      if (s < 1 || s > top || rx_slot_held(rc, s)) {
        *bad = i;
        return s < 1 || s > top ? KVC_ERR_INVALID_ARGUMENT : KVC_ERR_MISUSE;
      }
      i++;
      continue;
    }
    const int64_t j = kvc__rx_run_end(slots, i, n, 1), a = slots[i], b = slots[j - 1];
    if (a < 1 || b > top || range_any(rc->held, rx_page(rc, a), rx_page(rc, b))) {
      for (*bad = i; *bad < j; ++*bad) {
        const int64_t s = slots[*bad];
        if (s < 1 || s > top) return KVC_ERR_INVALID_ARGUMENT;
        if (rx_slot_held(rc, s)) return KVC_ERR_MISUSE;
      }
    }
    i = j;
  }
  return KVC_OK;
}

void kvc__rx_unmark(kvc_radix_cache *rc, const int64_t *slots, int64_t n) {
  if (rc->bound) {
    kvc__alloc_cache_unmark(rc->bound, slots, (size_t)n);
    return;
  }
  const int64_t ps = rc->ps, np = n / ps;
  /* Page size 1: nothing to check, so a plain store per slot, four a step. No run
   * detection: the slots are loaded either way, and testing 16 of them for a run, then
   * scanning its end and clearing a range, cost more instructions than the stores it
   * saved (callgrind, the evictions of the pressure trace at page 1 and 10^5: 22.6 M
   * instructions with the run path, 9.8 M this way). */
  if (ps == 1) {
    uint8_t *const h = rc->held;
    int64_t k = 0;
    for (; k + 4 <= n; k += 4) {
      const int64_t a = slots[k], b = slots[k + 1], c = slots[k + 2], d = slots[k + 3];
      h[a] = 0, h[b] = 0, h[c] = 0, h[d] = 0;
    }
    for (; k < n; k++) h[slots[k]] = 0;
    return;
  }
  for (int64_t k = 0; k < np;) {
    int64_t j = kvc__rx_run_end(slots, k, np, ps);
    range_set(rc->held, rx_page(rc, slots[k * ps]), rx_page(rc, slots[(j - 1) * ps]), false);
    k = j;
  }
}

void kvc__rx_unmark_all(kvc_radix_cache *rc) {
  for (int32_t i = 1; i < rc->nodes_used; i++) {
    const rx_node *n = &rc->nodes[i];
    if (n->seg) kvc__rx_unmark(rc, rx_vals(n), rc->hot[i].len);
  }
}

void kvc__rx_clear_pages(kvc_radix_cache *rc, int64_t first_slot, int64_t last_slot) {
  range_set(rc->held, rx_page(rc, first_slot), rx_page(rc, last_slot), false);
}
