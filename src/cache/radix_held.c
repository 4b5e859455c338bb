/*
 * radix_held.c — the held-page bitmap of kvc_radix_cache: which pages the tree owns, so
 * that a slot given twice, or a duplicate that is really the tree's, is refused before
 * anything changes (SGLang would corrupt its allocator silently).
 */
#include "radix.h"

/* --- Held slots ---------------------------------------------------------------------------- */

/* One bit per page, read and written a word at a time along runs of consecutive page ids
 * (pages of one request mostly are): a per-slot read-modify-write chains every store into
 * the next load (~11 us per 4096 slots here), and with page_size > 1 eviction reads only
 * each page's first slot. */

/* Page size 1, slot i not followed by slot i + 1: a run of one slot, as kvc__rx_run_end
 * would find it, tested and set without the run scan and word-mask loop (same bits, same
 * order, same status and *bad as the run path). A token allocator hands out recycled
 * slots in free order, so under eviction pressure a request's slots are mostly lone slots
 * and short runs, where the scan's mispredicted run ends cost more than a bit each. */
static inline bool lone_slot(int64_t ps, const int64_t *s, int64_t i, int64_t n) {
  return ps == 1 && i + 1 < n && (uint64_t)s[i + 1] - (uint64_t)s[i] != 1;
}

static uint64_t word_mask(int64_t w, int64_t a, int64_t b) { /* bits of [a, b] in word w */
  uint64_t m = ~0ull;
  if ((a >> 6) == w) m &= ~0ull << (a & 63);
  if ((b >> 6) == w) m &= ~0ull >> (63 - (b & 63));
  return m;
}

static bool range_any(const uint64_t *h, int64_t a, int64_t b) {
  for (int64_t w = a >> 6; w <= b >> 6; w++)
    if (h[w] & word_mask(w, a, b)) return true;
  return false;
}

static void range_set(uint64_t *h, int64_t a, int64_t b, bool on) {
  for (int64_t w = a >> 6; w <= b >> 6; w++) {
    if (on) h[w] |= word_mask(w, a, b);
    else h[w] &= ~word_mask(w, a, b);
  }
}

/* End of the run of consecutive page ids starting at page k of slots (np pages). Page
 * size 1: s[j] - j is constant along a run, so blocks of 16 are checked branch-free. */
int64_t kvc__rx_run_end(const int64_t *s, int64_t k, int64_t np, int64_t ps) {
  int64_t j = k + 1;
  if (ps == 1) {
    const uint64_t c = (uint64_t)s[k] - (uint64_t)k;
    while (j + 16 <= np) {
      uint64_t diff = 0;
      for (int i = 0; i < 16; i++) diff |= ((uint64_t)s[j + i] - (uint64_t)(j + i)) ^ c;
      if (diff) break;
      j += 16;
    }
    while (j < np && (uint64_t)s[j] - (uint64_t)j == c) j++;
    return j;
  }
  while (j < np && s[j * ps] == s[(j - 1) * ps] + ps) j++;
  return j;
}

kvc_status kvc__rx_mark(kvc_radix_cache *rc, const int64_t *slots, int64_t n, int64_t *bad, int64_t *run_first) {
  /* Runs of consecutive slots: each must start and end on a page boundary of the key and
   * start on a page-aligned slot, which makes every page in it one allocator page. */
  const int64_t ps = rc->ps, top = rc->top_slot;
  int64_t i = 0;
  kvc_status st = KVC_OK;
  while (i < n) {
    if (lone_slot(ps, slots, i, n)) {
      const int64_t a = slots[i];
      if (a < 1 || a > top) {
        st = KVC_ERR_INVALID_ARGUMENT;
        break;
      }
      uint64_t *w = &rc->held[a >> 6];
      const uint64_t bit = 1ull << (a & 63);
      if (*w & bit) {
        st = KVC_ERR_MISUSE;
        break;
      }
      *w |= bit;
      if (run_first) *run_first = -1; /* not the whole key: i + 1 < n */
      i++;
      continue;
    }
    const int64_t j = kvc__rx_run_end(slots, i, n, 1), a = slots[i], b = slots[j - 1];
    if (a < 1 || b > top || (j - i) % ps || a - rx_page(rc, a) * ps) {
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
  const int64_t ps = rc->ps, np = n / ps;
  /* Page size 1: nothing to check, so a bit per slot, and the run path only where 16 slots
   * in a row may be one run (short runs were ~5 ns a slot through the scan: evicting the
   * ~1,100 recycled slots of a chat eviction at capacity 10^4 took 5.2-5.7 us of tree
   * work, 1.4-1.6 us this way). */
  if (ps == 1) {
    uint64_t *h = rc->held;
    for (int64_t k = 0; k < n;) {
      if (k + 16 <= n && (uint64_t)slots[k + 15] - (uint64_t)slots[k] == 15) {
        const int64_t j = kvc__rx_run_end(slots, k, n, 1);
        range_set(h, slots[k], slots[j - 1], false);
        k = j;
      } else {
        h[slots[k] >> 6] &= ~(1ull << (slots[k] & 63));
        k++;
      }
    }
    return;
  }
  for (int64_t k = 0; k < np;) {
    int64_t j = kvc__rx_run_end(slots, k, np, ps);
    range_set(rc->held, rx_page(rc, slots[k * ps]), rx_page(rc, slots[(j - 1) * ps]), false);
    k = j;
  }
}

void kvc__rx_clear_pages(kvc_radix_cache *rc, int64_t first_slot, int64_t last_slot) {
  range_set(rc->held, rx_page(rc, first_slot), rx_page(rc, last_slot), false);
}
