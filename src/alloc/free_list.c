/*
 * free_list.c — the allocator's host free list: the id ring (id_ring.h) of page ids plus
 * one state byte per page, and the rules SGLang's free lists follow on top of it.
 *
 *   ring (uint32 page ids, power-of-two capacity >= num_pages)
 *
 *        push_front (PAGED free:                pop_front (every alloc)
 *        released ++ free_pages)                     |
 *              v                                     v
 *      ... [ . . . | p7 p3 p9 p5 ... p42 | . . . ] ...
 *                    ^head               ^head+count  <- push_back (TOKEN free: FIFO)
 *
 *   state[page]:  FREE ----pop----> HELD ---free (need_sort)---> DEFERRED
 *                  ^ ^               |  \                            |
 *                  | +--free/release-+   +-- +GFREE/+GSEG marks      |
 *                  |                          while an open group    |
 *                  +-------------- merge_and_sort_free --------------+
 *                 page 0 is RESERVED forever.
 *
 * Why a state byte: SGLang never validates frees (a double free silently duplicates a
 * page in the list). One byte per page makes every free checkable in O(n) before any
 * mutation, and gives O(num_pages) audits in check mode.
 *
 * Why these orders: they decide which slot each request gets, and must match SGLang
 * exactly (spec 14): pop from the front; TOKEN frees append in call order; PAGED frees
 * prepend their pages in ascending order; need_sort defers, then merges everything into
 * one ascending list.
 */
#include "alloc.h"

#include <string.h>

/* --- Reset / pop / release --------------------------------------------------------- */

void kvc__fl_reset(kvc_allocator *a) {
  kvc__ring_fill(&a->ring, a->num_pages);
  memset(a->state, KVC__PG_FREE, (size_t)a->num_pages + 1);
  a->state[0] = KVC__PG_RESERVED;
  a->deferred_count = 0;
  a->in_group = false;
  a->group_free_n = a->group_seg_n = 0;
}

void kvc__fl_pop(kvc_allocator *a, int64_t n) { kvc__ring_take(&a->ring, n, NULL, a->state, KVC__PG_HELD); }

void kvc__fl_release(kvc_allocator *a, const uint32_t *pages, int64_t n) {
  if (a->need_sort) {
    /* A local, not a->deferred_count, inside the loop: the state stores are bytes, which
     * may alias anything, so the field would be reloaded after every one. */
    uint8_t *const state = a->state;
    uint32_t *const def = a->deferred + a->deferred_count;
    for (int64_t i = 0; i < n; i++) {
      state[pages[i]] = KVC__PG_DEFERRED;
      def[i] = pages[i];
    }
    a->deferred_count += n;
    return;
  }
  /* PAGED: released ++ free_pages, pages[0] at the front. TOKEN: FIFO. */
  if (a->kind == KVC_ALLOCATOR_PAGED) kvc__ring_push_front(&a->ring, pages, n, a->state, KVC__PG_FREE);
  else kvc__ring_push_back(&a->ring, pages, n, a->state, KVC__PG_FREE);
}

/* --- Sorting ------------------------------------------------------------------------ */

/* The lists sorted here are a request's pages (free), a group's, or the free list plus
 * the deferred pages (merge). A request's pages are mostly ascending or descending runs
 * (pops take ascending runs from the front; LIFO reuse reverses them) over a narrow id
 * range, so the cheap cases come first, chosen by O(n) scans:
 *   ascending             nothing to do
 *   strictly descending   reverse, O(n)
 *   n <= 48               insertion sort
 *   narrow id range       byte map over [lo, hi] (a counting sort of distinct ids), O(n + range)
 *   otherwise             LSD radix sort on v - lo, only as many 8-bit passes as the
 *                         range needs (2 up to 65536 ids, where the pool's id width
 *                         could need 3; each pass clears and sums 256 counters, which
 *                         made it most of a 256-page free when it was the only choice) */

static void reverse_u32(uint32_t *v, int64_t n) {
  for (int64_t i = 0, j = n - 1; i < j; i++, j--) {
    uint32_t t = v[i];
    v[i] = v[j];
    v[j] = t;
  }
}

/* v[0:n) distinct ids in [lo, lo + span): mark each in a byte map and read them back in
 * order, skipping 8 empty bytes at a time. The map lives in a->tmp_b (4 * num_pages bytes,
 * >= span rounded up to 8 since span <= num_pages and n > 48; byte stores may alias any
 * object). Emission is branch-free (write v[k], then advance k by the byte), which stays
 * in bounds: k < n until the last id, hi, whose byte ends the scan. */
static void bytemap_sort(kvc_allocator *a, uint32_t *v, int64_t n, uint32_t lo, uint64_t span) {
  uint8_t *const seen = (uint8_t *)a->tmp_b;
  const uint64_t words = (span + 7) / 8;
  memset(seen, 0, (size_t)words * 8);
  for (int64_t i = 0; i < n; i++) seen[v[i] - lo] = 1;
  int64_t k = 0;
  for (uint64_t w = 0; w < words; w++) {
    uint64_t bits;
    memcpy(&bits, seen + w * 8, sizeof bits);
    if (!bits) continue;
    const uint64_t end = KVC__MIN(w * 8 + 8, span);
    for (uint64_t j = w * 8; j < end; j++) {
      v[k] = lo + (uint32_t)j;
      k += seen[j];
    }
  }
}

static void radix_sort(kvc_allocator *a, uint32_t *v, int64_t n, uint32_t lo, uint64_t span) {
  uint32_t *src = v, *dst = a->tmp_b;
  for (int shift = 0; shift < 32 && ((span - 1) >> shift); shift += 8) {
    uint32_t cnt[256];
    memset(cnt, 0, sizeof cnt);
    for (int64_t i = 0; i < n; i++) cnt[((src[i] - lo) >> shift) & 255u]++;
    uint32_t sum = 0;
    for (int d = 0; d < 256; d++) {
      uint32_t c = cnt[d];
      cnt[d] = sum;
      sum += c;
    }
    for (int64_t i = 0; i < n; i++) dst[cnt[((src[i] - lo) >> shift) & 255u]++] = src[i];
    uint32_t *t = src;
    src = dst;
    dst = t;
  }
  if (src != v) memcpy(v, src, (size_t)n * sizeof *v);
}

void kvc__fl_sort(kvc_allocator *a, uint32_t *v, int64_t n) {
  if (n < 2) return;
  /* Ascending pairs, counted branch-free (vectorised); a 32-bit count suffices as n
   * <= num_pages < 2^31. The id range is only needed, and only scanned, further down. */
  uint32_t ups = 0;
  for (int64_t i = 1; i < n; i++) ups += v[i - 1] < v[i];
  if (ups == (uint64_t)n - 1) return;
  if (ups == 0) { /* distinct ids, no ascending pair: strictly descending */
    reverse_u32(v, n);
    return;
  }
  if (n <= 48) {
    for (int64_t i = 1; i < n; i++) {
      uint32_t x = v[i];
      int64_t j = i;
      while (j > 0 && v[j - 1] > x) v[j] = v[j - 1], j--;
      v[j] = x;
    }
    return;
  }
  uint32_t lo = v[0], hi = v[0];
  for (int64_t i = 1; i < n; i++) {
    lo = v[i] < lo ? v[i] : lo;
    hi = v[i] > hi ? v[i] : hi;
  }
  /* The byte map costs about span / 8 + 8 n (the 8-byte groups holding an id are read
   * byte by byte), radix about passes * (3 n + 512): the map wins up to a range of
   * several times n. */
  const uint64_t span = (uint64_t)(hi - lo) + 1;
  if (span <= 8 * (uint64_t)n + 1024) bytemap_sort(a, v, n, lo, span);
  else radix_sort(a, v, n, lo, span);
}

/* --- Merge -------------------------------------------------------------------------- */

void kvc__fl_merge(kvc_allocator *a) {
  if (a->deferred_count == 0) return;
  kvc__ring *r = &a->ring;
  if (a->backup_live && !a->backup_saved && a->epoch == a->b_epoch) {
    /* No free happened since the backup, so its ring image is still intact behind the
     * entries popped since (pops only move head) and the side list is the backup's. */
    const kvc__ring at_backup = {r->buf, r->mask, a->b_head, a->b_count};
    kvc__ring_copy(&at_backup, 0, a->b_count, a->saved);
    memcpy(a->saved + a->b_count, a->deferred, (size_t)a->deferred_count * sizeof(uint32_t));
    a->backup_saved = true;
  }
  int64_t total = r->count + a->deferred_count;
  if (total * 8 >= a->num_pages) {
    /* Dense: the sorted union is a scan of the state bytes. */
    int64_t k = 0;
    for (int64_t p = 1; p <= a->num_pages; p++) {
      uint8_t s = a->state[p];
      if (s == KVC__PG_FREE || s == KVC__PG_DEFERRED) {
        r->buf[k++] = (uint32_t)p;
        a->state[p] = KVC__PG_FREE;
      }
    }
  } else {
    uint32_t *v = a->tmp_a;
    kvc__ring_copy(r, 0, r->count, v);
    for (int64_t i = 0; i < a->deferred_count; i++) {
      v[r->count + i] = a->deferred[i];
      a->state[a->deferred[i]] = KVC__PG_FREE;
    }
    kvc__fl_sort(a, v, total);
    memcpy(r->buf, v, (size_t)total * sizeof *v);
  }
  r->head = 0;
  r->count = total;
  a->deferred_count = 0;
  a->merges++;
}

/* --- Audit -------------------------------------------------------------------------- */

kvc_status kvc__fl_audit(const kvc_allocator *a, const char *fn) {
  kvc_context *ctx = a->ctx;
  const kvc__ring *r = &a->ring;
  if (a->state[0] != KVC__PG_RESERVED)
    return kvc__error(ctx, KVC_ERR_INTERNAL, fn, "check: page 0 has state %u", a->state[0]);
  if (r->count < 0 || r->count > a->num_pages || a->deferred_count < 0 || r->count + a->deferred_count > a->num_pages)
    return kvc__error(ctx, KVC_ERR_INTERNAL, fn, "check: counts free %lld deferred %lld of %lld pages",
                      (long long)r->count, (long long)a->deferred_count, (long long)a->num_pages);
  int64_t n_free = 0, n_def = 0, n_gfree = 0, n_gseg = 0;
  for (int64_t p = 1; p <= a->num_pages; p++) {
    uint8_t s = a->state[p];
    if (s & KVC__PG_MARK) return kvc__error(ctx, KVC_ERR_INTERNAL, fn, "check: page %lld left marked", (long long)p);
    if ((s & (KVC__PG_GFREE | KVC__PG_GSEG)) && ((s & KVC__PG_STATE) != KVC__PG_HELD || !a->in_group))
      return kvc__error(ctx, KVC_ERR_INTERNAL, fn, "check: page %lld has a stale group mark", (long long)p);
    if ((s & KVC__PG_CACHED) &&
        ((s & KVC__PG_STATE) != KVC__PG_HELD || (s & (KVC__PG_GFREE | KVC__PG_GSEG)) || !a->cache_owner))
      return kvc__error(ctx, KVC_ERR_INTERNAL, fn, "check: page %lld has a stale radix cache mark", (long long)p);
    n_free += (s & KVC__PG_STATE) == KVC__PG_FREE;
    n_def += (s & KVC__PG_STATE) == KVC__PG_DEFERRED;
    n_gfree += (s & KVC__PG_GFREE) != 0;
    n_gseg += (s & KVC__PG_GSEG) != 0;
    if ((s & KVC__PG_STATE) == KVC__PG_RESERVED)
      return kvc__error(ctx, KVC_ERR_INTERNAL, fn, "check: page %lld reserved", (long long)p);
  }
  if (n_free != r->count || n_def != a->deferred_count)
    return kvc__error(ctx, KVC_ERR_INTERNAL, fn, "check: %lld FREE states vs %lld in the list, %lld DEFERRED vs %lld",
                      (long long)n_free, (long long)r->count, (long long)n_def, (long long)a->deferred_count);
  if (a->kind == KVC_ALLOCATOR_PAGED ? (n_gfree != a->group_free_n || n_gseg != a->group_seg_n)
                                     : (n_gfree != a->group_free_n || n_gseg != 0))
    return kvc__error(ctx, KVC_ERR_INTERNAL, fn, "check: group marks %lld/%lld vs records %lld/%lld",
                      (long long)n_gfree, (long long)n_gseg, (long long)a->group_free_n, (long long)a->group_seg_n);
  /* Every entry FREE and listed once (the ring's audit), so with as many FREE pages as
   * entries the ring holds exactly the FREE pages; the same for the side list. A page in
   * both lists would have two states, so the two audits need not see each other. */
  kvc__ring_ids ids = {a->state, (uint32_t)a->num_pages, KVC__PG_FREE, KVC__PG_MARK, "free list", "page"};
  KVC_FORWARD(kvc__ring_audit(ctx, fn, r, &ids));
  const kvc__ring side = kvc__ring_view(a->deferred, a->deferred_count);
  ids.free_state = KVC__PG_DEFERRED;
  ids.list = "deferred list";
  return kvc__ring_audit(ctx, fn, &side, &ids);
}
