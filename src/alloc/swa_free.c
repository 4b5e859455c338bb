/*
 * swa_free.c — the SWA allocator's frees (spec 7.5-7.8): free (both sides), free_swa
 * (the SWA side only: window eviction), free_full (the full side of slots whose peer is
 * gone), their segment forms and the flows' free_evicted. Every call validates first
 * (range, held pages through kvc__alloc_page_held, peers); then the device zero launch
 * goes first (the only step that can fail after validation), then the host frees, SWA
 * side before the full side.
 */
#include "swa.h"

#include <string.h>

/* The common case of ps 1 in one pass without marks: slots in ascending order (a tree
 * node's values, one allocation's run) cannot repeat, so only range and held need a
 * look. False: not ascending, or something is wrong (the exact loop below then finds the
 * first bad index and says what it is). Each slot's upper bound is checked before its
 * state is read: ascending so far says nothing of the slots after it (fuzz_flow found a
 * read past the state array with a list that rose past the end and fell back). */
static bool ascending_held(const kvc_swa_allocator *a, const int64_t *slots, size_t n) {
  const int64_t end = kvc__alloc_num_pages(a->full) + 1;
  if (slots[0] < 1 || slots[n - 1] >= end) return false;
  const uint8_t *state = a->full->state;
  unsigned bad = 0;
  for (size_t i = 0; i < n; i++) {
    const int64_t x = slots[i];
    if ((i && x <= slots[i - 1]) || x >= end) return false;
    const uint8_t st = state[x]; /* in [1, end): above slots[0] >= 1, below end */
    bad |= (unsigned)((st & (KVC__PG_STATE | KVC__PG_GFREE | KVC__PG_GSEG)) != KVC__PG_HELD);
  }
  return !bad;
}

/* Validates full slots: range and held (ps == 1: no duplicates). Eviction frees the
 * tree's values, runs of whole pages, so with ps > 1 a slot on the page just checked
 * needs only its range check: the first failing index (and message) stays the same. */
static kvc_status check_full_slots(kvc_swa_allocator *a, const char *fn, const int64_t *slots, size_t n) {
  const int64_t ps = a->ps, end = (kvc__alloc_num_pages(a->full) + 1) * ps;
  if (ps == 1 && n && ascending_held(a, slots, n)) return KVC_OK;
  if (ps == 1) { /* its own loop: the page is the slot, and every slot needs its mark */
    const uint8_t *state = a->full->state;
    size_t marked = 0;
    for (; marked < n; marked++) {
      const int64_t x = slots[marked];
      if (x < 1 || x >= end || (state[x] & (KVC__PG_STATE | KVC__PG_GFREE | KVC__PG_GSEG)) != KVC__PG_HELD ||
          a->fmark[x])
        break;
      a->fmark[x] = 1;
    }
    for (size_t i = 0; i < marked; i++) a->fmark[slots[i]] = 0;
    if (marked == n) return KVC_OK;
    /* The first bad slot: what is wrong with it, as the general loop below says it. */
    const size_t i = marked;
    const int64_t x = slots[i];
    if (x < 1 || x >= end)
      return kvc__error(a->ctx, KVC_ERR_MISUSE, fn, "slots[%zu] = %lld is the padding page or out of range", i,
                        (long long)x);
    if (!kvc__alloc_page_held(a->full, x))
      return kvc__error(a->ctx, KVC_ERR_MISUSE, fn, "slots[%zu] = %lld is not held (double free?)", i, (long long)x);
    return kvc__error(a->ctx, KVC_ERR_MISUSE, fn, "slots[%zu] = %lld is listed twice", i, (long long)x);
  }
  kvc_status st = KVC_OK;
  int64_t last = -1;
  for (size_t i = 0; i < n; i++) {
    const int64_t x = slots[i];
    if (x < ps || x >= end) {
      st = kvc__error(a->ctx, KVC_ERR_MISUSE, fn, "slots[%zu] = %lld is the padding page or out of range", i,
                      (long long)x);
      break;
    }
    const int64_t pg = kvc__pg_div(a->full, x);
    if (pg == last) continue;
    if (!kvc__alloc_page_held(a->full, pg)) {
      st = kvc__error(a->ctx, KVC_ERR_MISUSE, fn, "slots[%zu] = %lld is not held (double free?)", i, (long long)x);
      break;
    }
    last = pg;
  }
  return st;
}

/* Plans the SWA half of a free of validated full slots: a->w_buf[0:*nw) the SWA slots to
 * release (call order for ps 1), a->pages[0:*np) the distinct full pages (ps > 1) or
 * slots (ps 1) whose entries are zeroed. Fails (nothing changed) on a peer that is not
 * held, and with ps 1 on a missing peer unless `unmapped_ok` (the flows' release after
 * window eviction: those slots release only their full side). */
static kvc_status plan_swa_free(kvc_swa_allocator *a, const char *fn, const int64_t *slots, size_t n, bool unmapped_ok,
                                int64_t *nw, int64_t *np) {
  const int64_t ps = a->ps;
  int64_t w_n = 0, p_n = 0;
  kvc_status st = KVC_OK;
  if (ps == 1) {
    for (size_t i = 0; i < n && st == KVC_OK; i++) {
      const int32_t w = a->map[slots[i]];
      if (w <= 0 && unmapped_ok) continue; /* its entry is 0 already */
      if (w <= 0)
        st = kvc__error(a->ctx, KVC_ERR_MISUSE, fn,
                        "peer mapped: slots[%zu] = %lld has no SWA peer (already SWA-freed; use free_full)", i,
                        (long long)slots[i]);
      else if (!kvc__alloc_page_held(a->swa, w))
        st = kvc__error(a->ctx, KVC_ERR_INTERNAL, fn, "slots[%zu] = %lld maps to SWA slot %d, which is not held", i,
                        (long long)slots[i], w);
      a->w_buf[w_n++] = w;
      a->pages[p_n++] = slots[i];
    }
  } else {
    int64_t last = -1; /* runs of one page (the tree's values) skip the mark */
    for (size_t i = 0; i < n && st == KVC_OK; i++) {
      const int64_t pg = kvc__pg_div(a->full, slots[i]);
      if (pg == last || a->fmark[pg]) continue;
      last = pg;
      a->fmark[pg] = 1;
      a->pages[p_n++] = pg;
      for (int64_t j = 0; j < ps; j++) {
        const int64_t fs = pg * ps + j;
        const int32_t w = a->map[fs];
        if (w <= 0) continue;
        const int64_t wp = kvc__pg_div(a->swa, w);
        if (a->smark[wp]) continue; /* listed, so checked held already */
        if (!kvc__alloc_page_held(a->swa, wp)) {
          st = kvc__error(a->ctx, KVC_ERR_INTERNAL, fn, "full slot %lld maps to SWA slot %d, which is not held",
                          (long long)fs, w);
          break;
        }
        a->smark[wp] = 1;
        a->w_buf[w_n++] = w;
      }
    }
    for (int64_t i = 0; i < p_n; i++) a->fmark[a->pages[i]] = 0;
    for (int64_t i = 0; i < w_n; i++) a->smark[kvc__pg_div(a->swa, a->w_buf[i])] = 0;
  }
  *nw = w_n;
  *np = p_n;
  return st;
}

/* Zeroes the planned entries: device (one launch of runs), then host. */
static kvc_status zero_entries(kvc_swa_allocator *a, int64_t np, kvc_stream stream) {
  const int64_t ps = a->ps;
  /* Runs of consecutive pages (ps > 1) or slots (ps 1), in plan order. */
  int64_t items = 0;
  for (int64_t i = 0; i < np; i++) {
    const int64_t start = a->pages[i] * ps;
    if (items && (int64_t)a->words[2 * (items - 1)] + (int64_t)a->words[2 * (items - 1) + 1] == start) {
      a->words[2 * (items - 1) + 1] += (uint32_t)ps;
      continue;
    }
    a->words[2 * items] = (uint32_t)start;
    a->words[2 * items + 1] = (uint32_t)ps;
    items++;
  }
  const kvc__swa_map_dst d = kvc__swa_dmap_dst(a);
  const kvc__swa_map_items zero = {a->words, (size_t)(2 * items), items, KVC_SWA_MAP_ZERO};
  KVC_FORWARD(kvc__swa_map_write(a->ctx, &d, &zero, stream));
  /* By runs, not pages: with ps 1 a free of n slots was n four-byte memsets. */
  for (int64_t i = 0; i < items; i++) memset(a->map + a->words[2 * i], 0, (size_t)a->words[2 * i + 1] * sizeof *a->map);
  return KVC_OK;
}

/* free_swa of validated slots (not pure, not ring). */
static kvc_status do_free_swa(kvc_swa_allocator *a, const char *fn, const int64_t *slots, size_t n, bool unmapped_ok,
                              kvc_stream stream) {
  int64_t nw, np;
  size_t tokens;
  KVC_RETURN_IF(!kvc__mul_size(n, (size_t)a->ps, &tokens), a->ctx, KVC_ERR_INVALID_ARGUMENT,
                "%zu slots x page_size %d overflows", n, a->ps);
  KVC_FORWARD(kvc__swa_ensure_tok(a, fn, tokens));
  KVC_FORWARD(plan_swa_free(a, fn, slots, n, unmapped_ok, &nw, &np));
  KVC_FORWARD(zero_entries(a, np, stream));
  /* Cannot fail: every peer was checked held and listed once. */
  return kvc_allocator_free(a->swa, a->w_buf, (size_t)nw);
}

/* Pure: free the slots > 0 (SGLang filters). */
static kvc_status pure_free(kvc_swa_allocator *a, const char *fn, const int64_t *slots, size_t n) {
  KVC_FORWARD(kvc__swa_ensure_tok(a, fn, n));
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (slots[i] > 0) a->f_buf[m++] = slots[i];
  return kvc__swa_finish(a, kvc_allocator_free(a->full, a->f_buf, m));
}

kvc_status kvc_swa_allocator_free_swa(kvc_swa_allocator *a, const int64_t *slots, size_t n, kvc_stream stream) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  if (!n) return KVC_OK;
  KVC_ARG_NOT_NULL(a->ctx, slots);
  if (a->pure) return pure_free(a, __func__, slots, n);
  KVC_FORWARD(check_full_slots(a, __func__, slots, n));
  if (a->ring) return KVC_OK; /* the mapping is never written in ring mode */
  return kvc__swa_finish(a, do_free_swa(a, __func__, slots, n, false, stream));
}

static kvc_status check_released(kvc_swa_allocator *a, const char *fn, const int64_t *slots, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (a->map[slots[i]] != 0)
      return kvc__error(a->ctx, KVC_ERR_MISUSE, fn,
                        "peer released: slots[%zu] = %lld still maps to SWA slot %d (use free, or free_swa first)", i,
                        (long long)slots[i], a->map[slots[i]]);
  return KVC_OK;
}

kvc_status kvc_swa_allocator_free_full(kvc_swa_allocator *a, const int64_t *slots, size_t n) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  if (!n || a->pure) return KVC_OK;
  KVC_ARG_NOT_NULL(a->ctx, slots);
  KVC_FORWARD(check_full_slots(a, __func__, slots, n));
  KVC_FORWARD(check_released(a, __func__, slots, n));
  return kvc__swa_finish(a, kvc_allocator_free(a->full, slots, n));
}

/* Both sides of n > 0 slots of a live allocator; `unmapped_ok`: see free_evicted (swa.h). */
static kvc_status free_both(kvc_swa_allocator *a, const int64_t *slots, size_t n, bool unmapped_ok, kvc_stream stream) {
  const char *fn = "kvc_swa_allocator_free";
  if (a->pure) return pure_free(a, fn, slots, n);
  KVC_FORWARD(check_full_slots(a, fn, slots, n));
  if (!a->ring) KVC_FORWARD(do_free_swa(a, fn, slots, n, unmapped_ok, stream));
  return kvc__swa_finish(a, kvc_allocator_free(a->full, slots, n));
}

kvc_status kvc_swa_allocator_free(kvc_swa_allocator *a, const int64_t *slots, size_t n, kvc_stream stream) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  if (!n) return KVC_OK;
  KVC_ARG_NOT_NULL(a->ctx, slots);
  return free_both(a, slots, n, false, stream);
}

kvc_status kvc__swa_allocator_free_evicted(kvc_swa_allocator *a, const int64_t *slots, size_t n, kvc_stream stream) {
  SWA_ENTRY(a);
  if (!n) return KVC_OK;
  KVC_ARG_NOT_NULL(a->ctx, slots);
  return free_both(a, slots, n, true, stream);
}

kvc_status kvc_swa_allocator_free_segment(kvc_swa_allocator *a, const int64_t *slots, size_t n, int64_t start_pos,
                                          kvc_stream stream) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  if (!n) return KVC_OK;
  KVC_ARG_NOT_NULL(a->ctx, slots);
  if (a->pure) return pure_free(a, __func__, slots, n);
  KVC_RETURN_IF(start_pos < 0 || start_pos % a->ps != 0, a->ctx, KVC_ERR_INVALID_ARGUMENT,
                "start_pos %lld is not page-aligned", (long long)start_pos);
  KVC_FORWARD(check_full_slots(a, __func__, slots, n));
  if (!a->ring) KVC_FORWARD(do_free_swa(a, __func__, slots, n, false, stream));
  return kvc__swa_finish(a, kvc_allocator_free_segment(a->full, slots, n, start_pos));
}

kvc_status kvc_swa_allocator_free_full_segment(kvc_swa_allocator *a, const int64_t *slots, size_t n,
                                               int64_t start_pos) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  if (!n || a->pure) return KVC_OK;
  KVC_ARG_NOT_NULL(a->ctx, slots);
  KVC_FORWARD(check_full_slots(a, __func__, slots, n));
  KVC_FORWARD(check_released(a, __func__, slots, n));
  return kvc__swa_finish(a, kvc_allocator_free_segment(a->full, slots, n, start_pos));
}
