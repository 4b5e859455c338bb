/*
 * swa_free.c — the SWA allocator's frees (spec 7.5-7.8): free (both sides), free_swa
 * (the SWA side only: window eviction), free_full (the full side of slots whose peer is
 * gone), their segment forms and the flows' free_evicted. Every call validates first
 * (range, held pages, peers); then the device zero launch goes first (the only step that
 * can fail after validation; inside a deferred-zero scope it is queued instead, see
 * swa_allocator.c), then the host frees, SWA side before the full side.
 *
 * free, free_evicted and free_swa (what eviction's victims go through) first try the
 * one-pass form (free_fast): the same checks in one pass that marks the state bytes, then
 * a release of what it checked without the allocators checking it again. At page size 1,
 * when both free lists take plain appends, that pass writes the ids onto both rings
 * itself and commits at the end (free_direct). A list it does not accept goes to the
 * checked path below, which refuses it as it always has.
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
      else if (a->smark[w]) /* a corrupt mapping: the SWA free would refuse it after the zero */
        st = kvc__error(a->ctx, KVC_ERR_INTERNAL, fn, "slots[%zu] = %lld maps to SWA slot %d, as an earlier slot does",
                        i, (long long)slots[i], w);
      if (st != KVC_OK) break;
      a->smark[w] = 1;
      a->w_buf[w_n++] = w;
      a->pages[p_n++] = slots[i];
    }
    for (int64_t i = 0; i < w_n; i++) a->smark[a->w_buf[i]] = 0;
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

/* Zeroes the planned entries: device (one launch of runs, or queued in a deferred-zero
 * scope), then host. */
static kvc_status zero_entries(kvc_swa_allocator *a, const char *fn, int64_t np, kvc_stream stream) {
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
  KVC_FORWARD(kvc__swa_zero_runs(a, fn, a->words, (size_t)items, stream));
  /* By runs, not pages: with ps 1 a free of n slots was n four-byte memsets. */
  for (int64_t i = 0; i < items; i++) memset(a->map + a->words[2 * i], 0, (size_t)a->words[2 * i + 1] * sizeof *a->map);
  return KVC_OK;
}

/* --- Validate and release in one pass ------------------------------------------------ */

/* Work space of the one-pass free: nf full ids, then nw SWA ids (uint32, the free lists'
 * id type). HOST_OOM: nothing changed. */
static kvc_status ensure_rel(kvc_swa_allocator *a, const char *fn, size_t nf, size_t nw) {
  KVC_RETURN_IF(nf > SIZE_MAX / 2 / sizeof *a->rel || nw > SIZE_MAX / 2 / sizeof *a->rel, a->ctx,
                KVC_ERR_INVALID_ARGUMENT, "%s: %zu slots is too large", fn, nf);
  const size_t need = nf + nw; /* each half below SIZE_MAX / 8: no overflow */
  if (need <= a->rel_cap) return KVC_OK;
  size_t cap = KVC__MAX(need, (size_t)2048);
  if (a->rel_cap <= SIZE_MAX / 2 / sizeof *a->rel) cap = KVC__MAX(cap, 2 * a->rel_cap);
  uint32_t *p = kvc__malloc(a->ctx, cap * sizeof *p);
  if (!p) return kvc__error(a->ctx, KVC_ERR_HOST_OOM, fn, "work space for %zu slots", nf);
  kvc__free(a->ctx, a->rel);
  a->rel = p;
  a->rel_cap = cap;
  return KVC_OK;
}

static void unmark_ids(uint8_t *state, const uint32_t *ids, size_t n) {
  for (size_t i = 0; i < n; i++) state[ids[i]] = KVC__PG_HELD;
}

/* The release half of kvc_allocator_free (kvc__alloc_release) for pages this file
 * validated itself in this call (held, in range, each listed once, no open group): the
 * free list's order and the state bytes come out as that call's would. */
static kvc_status release_checked(kvc_allocator *al, uint32_t *ids, size_t n) {
  return n ? kvc__alloc_release(al, "kvc_allocator_free", ids, (int64_t)n) : KVC_OK;
}

/* The zeroed runs of the mapping, built as the plans pass: the open run stays in locals
 * (the state bytes the plans store may alias any memory, so a run kept in the buffer
 * would be reloaded after every slot) and goes to the buffer when the next entry does not
 * extend it. */
typedef struct runs_acc {
  uint32_t *words;
  size_t items;
  uint32_t start, len;
} runs_acc;

static inline void run_add(runs_acc *r, uint32_t start, uint32_t len) {
  if (r->len && r->start + r->len == start) {
    r->len += len;
    return;
  }
  if (r->len) {
    r->words[2 * r->items] = r->start;
    r->words[2 * r->items + 1] = r->len;
    r->items++;
  }
  r->start = start;
  r->len = len;
}

static inline size_t run_close(runs_acc *r) {
  run_add(r, UINT32_MAX, 0); /* no run ends at UINT32_MAX (ids are below 2^31) */
  return r->items;
}

/* One pass over page-1 slots: each in range and exactly HELD (so not free, not recorded
 * by a group, and not seen earlier in this call: the byte is marked as it passes), its
 * peer in range and exactly HELD (marked too: a corrupt mapping naming one SWA slot twice
 * stops here as it did in the SWA side's own free). Returns the slots that passed. */
static size_t plan_p1(kvc_swa_allocator *a, const int64_t *slots, size_t n, bool unmapped_ok, size_t *nw_out,
                      size_t *items_out) {
  uint8_t *const fst = a->full->state, *const sst = a->swa->state;
  const int32_t *const map = a->map;
  uint32_t *const fv = a->rel, *const wv = a->rel + n;
  const uint64_t npf = (uint64_t)kvc__alloc_num_pages(a->full), nps = (uint64_t)kvc__alloc_num_pages(a->swa);
  runs_acc r = {a->words, 0, 0, 0};
  size_t i = 0, nw = 0;
  for (; i < n; i++) {
    const uint64_t x = (uint64_t)slots[i];
    if (x - 1 >= npf || fst[x] != KVC__PG_HELD) break; /* padding, negative, past the end, not held, repeated */
    const int32_t w = map[x];
    if (w > 0) {
      if ((uint64_t)w - 1 >= nps || sst[w] != KVC__PG_HELD) break;
      sst[w] = KVC__PG_HELD | KVC__PG_MARK;
      wv[nw++] = (uint32_t)w;
      run_add(&r, (uint32_t)x, 1);
    } else if (!unmapped_ok) {
      break; /* no peer: the checked path says which call to use */
    }
    fst[x] = KVC__PG_HELD | KVC__PG_MARK;
    fv[i] = (uint32_t)x;
  }
  *nw_out = nw;
  *items_out = run_close(&r);
  return i;
}

/* Whether v[0:n) is x0, x0 + 1, ...: OR of v[j] ^ (x0 + j), zero iff so (uint64, so a
 * negative slot differs). With n a multiple of 4 in two-lane vectors with two accumulators
 * (the GNU C vector extension, as allocator.c's chunk_xor): the scalar loop was one
 * dependent chain of ~6 instructions a slot, a quarter of a page-16 SWA eviction. */
typedef uint64_t swa_u64x2 __attribute__((vector_size(16)));
typedef uint32_t swa_u32x4 __attribute__((vector_size(16)));

static inline uint64_t seq_diff64(const int64_t *v, int64_t n, uint64_t x0) {
  if (n % 4) {
    uint64_t d = 0;
    for (int64_t j = 0; j < n; j++) d |= (uint64_t)v[j] ^ (x0 + (uint64_t)j);
    return d;
  }
  const swa_u64x2 four = {4, 4};
  swa_u64x2 b0 = {x0, x0 + 1}, b1 = {x0 + 2, x0 + 3}, d0 = {0, 0}, d1 = {0, 0};
  for (int64_t j = 0; j < n; j += 4) {
    swa_u64x2 x, y;
    memcpy(&x, v + j, sizeof x); /* the alignment- and aliasing-safe vector load */
    memcpy(&y, v + j + 2, sizeof y);
    d0 |= x ^ b0;
    d1 |= y ^ b1;
    b0 += four;
    b1 += four;
  }
  d0 |= d1;
  return d0[0] | d0[1];
}

/* The same for mapping entries: e[0:n) is w0, w0 + 1, ... (uint32). */
static inline uint32_t seq_diff32(const int32_t *e, int64_t n, uint32_t w0) {
  if (n % 4) {
    uint32_t d = 0;
    for (int64_t j = 0; j < n; j++) d |= (uint32_t)e[j] ^ (w0 + (uint32_t)j);
    return d;
  }
  const swa_u32x4 four = {4, 4, 4, 4};
  swa_u32x4 b = {w0, w0 + 1, w0 + 2, w0 + 3}, d = {0, 0, 0, 0};
  for (int64_t j = 0; j < n; j += 4) {
    swa_u32x4 x;
    memcpy(&x, e + j, sizeof x);
    d |= x ^ b;
    b += four;
  }
  return d[0] | d[1] | d[2] | d[3];
}

/* The same for page size > 1, per page: the tree's values are runs of whole pages, so
 * each page is looked at once (a page listed again later is released once, as the paged
 * allocator's free does), and every entry of the mapping on it names an SWA page that is
 * released once. *nf_out: the full pages listed. */
static size_t plan_pages(kvc_swa_allocator *a, const int64_t *slots, size_t n, size_t *nf_out, size_t *nw_out,
                         size_t *items_out) {
  uint8_t *const fst = a->full->state, *const sst = a->swa->state;
  const int32_t *const map = a->map;
  uint32_t *const fv = a->rel, *const wv = a->rel + n;
  const int64_t ps = a->ps;
  const uint64_t npf = (uint64_t)kvc__alloc_num_pages(a->full), nps = (uint64_t)kvc__alloc_num_pages(a->swa);
  const uint64_t span = npf * (uint64_t)ps;
  runs_acc r = {a->words, 0, 0, 0};
  size_t i = 0, nf = 0, nw = 0;
  int64_t last = -1;
  for (; i < n; i++) {
    const int64_t x = slots[i];
    if ((uint64_t)x - (uint64_t)ps >= span) break; /* page 0, negative or past the end */
    const int64_t pg = kvc__pg_div(a->full, x);
    if (pg == last) continue;
    last = pg;
    const uint8_t s = fst[pg];
    if (s == (KVC__PG_HELD | KVC__PG_MARK)) continue; /* listed earlier in this call */
    if (s != KVC__PG_HELD) break;
    fst[pg] = KVC__PG_HELD | KVC__PG_MARK;
    fv[nf++] = (uint32_t)pg;
    /* The tree's values list a page's slots in order: when the next ps - 1 slots are the
     * rest of this page (one compare loop proves it), they are skipped, as each of them
     * would be by `pg == last` (in range: they lie on this page). */
    size_t rest = 0;
    if (x == pg * ps && n - i >= (size_t)ps && seq_diff64(slots + i, ps, (uint64_t)x) == 0) rest = (size_t)ps - 1;
    /* The common case: extend and decode map a full page onto one SWA page at the same
     * offsets, which one compare loop without branches proves; the SWA page is then
     * checked once (the loop below would find it ps times). */
    const int32_t *const e = map + pg * ps, w0 = e[0];
    const int64_t wp0 = w0 > 0 ? kvc__pg_div(a->swa, w0) : 0;
    uint32_t off = w0 > 0 ? (uint32_t)(w0 - wp0 * ps) : 1; /* w0 starts its SWA page */
    off |= seq_diff32(e, ps, (uint32_t)w0);
    bool bad = false;
    if (off == 0) {
      const int64_t wp = wp0;
      const uint8_t t = (uint64_t)wp - 1 < nps ? sst[wp] : 0;
      if (t == KVC__PG_HELD) {
        sst[wp] = KVC__PG_HELD | KVC__PG_MARK;
        wv[nw++] = (uint32_t)wp;
      } else if (t != (KVC__PG_HELD | KVC__PG_MARK)) {
        break;
      }
      run_add(&r, (uint32_t)(pg * ps), (uint32_t)ps);
      i += rest;
      continue;
    }
    for (int64_t j = 0; j < ps && !bad; j++) {
      const int32_t w = map[pg * ps + j];
      if (w <= 0) continue;
      const int64_t wp = kvc__pg_div(a->swa, w);
      const uint8_t t = (uint64_t)wp - 1 < nps ? sst[wp] : 0;
      if (t == (KVC__PG_HELD | KVC__PG_MARK)) continue; /* listed already */
      bad = t != KVC__PG_HELD;
      if (bad) break;
      sst[wp] = KVC__PG_HELD | KVC__PG_MARK;
      wv[nw++] = (uint32_t)wp;
    }
    if (bad) break;
    run_add(&r, (uint32_t)(pg * ps), (uint32_t)ps);
    i += rest;
  }
  *nf_out = nf;
  *nw_out = nw;
  *items_out = run_close(&r);
  return i;
}

/* --- Page size 1: validate and release straight onto both free lists -------------- */

/* Whether a side's free of validated slots is a plain append to its ring (kvc__alloc_release
 * of a TOKEN allocator: no open group, no need_sort side list) and ids may be written past
 * its tail before the call commits (no live backup image there). */
static bool direct_ok(const kvc_allocator *al) {
  return al->kind == KVC_ALLOCATOR_TOKEN && !al->need_sort && !al->in_group && !kvc__alloc_ring_image_live(al);
}

/* Where the direct pass wrote: the ids past each ring's tail (uncommitted until the
 * counts move), the zeroed runs in a->words. */
typedef struct p1_direct {
  size_t done, nw, items;
} p1_direct;

#if defined(__GNUC__)
#  define KVC__SWA_ALWAYS_INLINE static inline __attribute__((always_inline))
#else
#  define KVC__SWA_ALWAYS_INLINE static inline
#endif

/* The id slot past a ring's tail, and the ring's end (where the next id wraps to buf). */
static inline uint32_t *ring_tail(const kvc__ring *rg) {
  return rg->buf + ((rg->head + (uint64_t)rg->count) & rg->mask);
}
static inline uint32_t *ring_end(const kvc__ring *rg) { return rg->buf + rg->mask + 1; }

/*
 * One pass over page-1 slots that does the whole free but for the commit: each slot in
 * range and exactly HELD (set FREE as it passes, so a slot listed twice stops at its
 * second look; free_swa leaves the full side alone and a repeat finds its entry zeroed),
 * its peer in range and exactly HELD (set FREE: a mapping naming one SWA slot twice stops
 * too), the peer appended past the SWA ring's tail, the host entry zeroed, the full slot
 * past the full ring's tail, the zeroed entries' runs gathered. These are the checks of
 * plan_p1 and the stores of kvc__fl_release's push_back in one loop: until this pass the
 * ids went to a->rel and each free list's release read them back, and the entries were
 * zeroed by a second loop over the runs. The tails are pointers that wrap at the ring's
 * end (few values, so they stay in registers: with ring indices and masks the loop
 * spilled). The runs come in two builds with the same result: a branch per slot ("does x
 * extend the run?"), or without one (every mapped slot rewrites the current pair, a
 * slot that does not extend it moves to the next pair first; ~10 more instructions a
 * slot). Which pays depends on the runs: the trees' page-1 victims at 10^4 tokens have
 * runs of ~2 entries, where the branch was mispredicted on ~30% of the slots (750 k of
 * a trace's 1.34 M mispredictions, callgrind --branch-sim), and at 10^5-10^6 runs of
 * 16-250, where it is predicted and the extra instructions cost 10-20%. The caller picks
 * by the head of the list (short_runs_ahead). Stops at the first slot that
 * does not pass, with that slot untouched; undo_direct then puts back what the pass
 * changed. Inlined with `full_too` and `short_runs` constant (four loops).
 */
KVC__SWA_ALWAYS_INLINE p1_direct pass_direct(kvc_swa_allocator *a, const int64_t *slots, size_t n, bool unmapped_ok,
                                             bool full_too, bool short_runs) {
  uint8_t *const fst = a->full->state, *const sst = a->swa->state;
  int32_t *const map = a->map;
  uint32_t *const wp = a->words;
  uint32_t *fo = full_too ? ring_tail(&a->full->ring) : NULL, *so = ring_tail(&a->swa->ring);
  uint32_t *const fe = full_too ? ring_end(&a->full->ring) : NULL, *const se = ring_end(&a->swa->ring);
  /* state[0] is RESERVED, so "x in [1, num_pages]" is "x <= num_pages" and HELD. */
  const uint64_t npf = (uint64_t)kvc__alloc_num_pages(a->full), nps = (uint64_t)kvc__alloc_num_pages(a->swa);
  size_t i = 0, nw = 0, it = short_runs ? SIZE_MAX : 0; /* it: the current run's pair */
  uint32_t rs = 0, re = 0; /* the open run [rs, re) of zeroed entries; re 0: none (slots are >= 1) */
  /* In segments that end where a ring wraps (a slot appends at most one id to each
   * ring), so that the loop has no wrap test: two compares and moves a slot a side, 10 M
   * of the 149 M instructions of the pressure trace's page-1 SWA evictions at 10^4. */
  while (i < n) {
    size_t lim = KVC__MIN(n, i + (size_t)(se - so));
    if (full_too) lim = KVC__MIN(lim, i + (size_t)(fe - fo));
    uint32_t *const so0 = so;
    for (; i < lim; i++) {
      const uint64_t x = (uint64_t)slots[i];
      if (x > npf || fst[x] != KVC__PG_HELD) goto stop; /* padding, negative, past the end, not held, repeated */
      const int32_t w = map[x];
      if (w > 0) {
        if ((uint64_t)w > nps || sst[w] != KVC__PG_HELD) goto stop;
        sst[w] = KVC__PG_FREE;
        *so++ = (uint32_t)w;
        map[x] = 0;
        if (short_runs) { /* the current pair rewritten, a new one when x does not extend it */
          const bool next = (uint32_t)x != re;
          it += next;
          rs ^= (rs ^ (uint32_t)x) & (0u - (uint32_t)next); /* x when next, without a branch */
          re = (uint32_t)x + 1;
          wp[2 * it] = rs;
          wp[2 * it + 1] = re - rs;
        } else {
          if ((uint32_t)x != re) {
            if (re) {
              wp[2 * it] = rs;
              wp[2 * it + 1] = re - rs;
            }
            it += re != 0;
            rs = (uint32_t)x;
          }
          re = (uint32_t)x + 1;
        }
      } else if (!unmapped_ok) {
        goto stop; /* no peer (or, in free_swa, listed again): the checked path says which */
      }
      if (full_too) {
        fst[x] = KVC__PG_FREE;
        *fo++ = (uint32_t)x;
      }
    }
    nw += (size_t)(so - so0);
    if (so == se) so = a->swa->ring.buf;
    if (full_too && fo == fe) fo = a->full->ring.buf;
    continue;
  stop:
    nw += (size_t)(so - so0);
    break;
  }
  if (!short_runs && re) {
    wp[2 * it] = rs;
    wp[2 * it + 1] = re - rs;
  }
  return (p1_direct){i, nw, re ? it + 1 : 0};
}

/* Puts back what pass_direct changed for its first r->done slots: every byte it set FREE
 * was exactly HELD, and the k-th zeroed entry in run order (the pass's order) held the
 * k-th SWA id it appended. The rings' counts never moved, so the ids past their tails are
 * junk that the next append overwrites. */
static void undo_direct(kvc_swa_allocator *a, const int64_t *slots, const p1_direct *r, bool full_too) {
  uint8_t *const fst = a->full->state, *const sst = a->swa->state;
  const kvc__ring *const sr = &a->swa->ring;
  const uint64_t stl = sr->head + (uint64_t)sr->count;
  if (full_too)
    for (size_t i = 0; i < r->done; i++) fst[slots[i]] = KVC__PG_HELD;
  size_t k = 0;
  for (size_t it = 0; it < r->items; it++)
    for (uint32_t j = 0; j < a->words[2 * it + 1]; j++)
      a->map[a->words[2 * it] + j] = (int32_t)sr->buf[(stl + k++) & sr->mask];
  for (k = 0; k < r->nw; k++) sst[sr->buf[(stl + k) & sr->mask]] = KVC__PG_HELD;
}

/* Whether the runs of slots[0:n) look short (below 4 entries on average over the first
 * 32): pass_direct's choice of loop (either gives the same runs). A free's slots are one
 * victim's or one request's, so their head is a fair sample. */
static bool short_runs_ahead(const int64_t *slots, size_t n) {
  const size_t k = KVC__MIN(n, (size_t)32);
  size_t breaks = 1;
  /* Unsigned: the slots are not validated yet (INT64_MAX + 1 would overflow). */
  for (size_t i = 1; i < k; i++) breaks += (uint64_t)slots[i] != (uint64_t)slots[i - 1] + 1;
  return 4 * breaks > k;
}

/* free / free_evicted / free_swa of n > 0 page-1 slots when both sides' releases are
 * plain appends (direct_ok): pass_direct, then the
 * device zero launch or its queueing (the only step that can fail: undo_direct, nothing
 * changed), then the commit: the rings' counts and epochs as kvc__alloc_release moves
 * them, SWA side first. The same ids in the same order on each free list as the release
 * of a->rel below, the same states. *taken false (nothing changed) when a slot does not
 * pass: the checked path then refuses it. */
static kvc_status free_direct(kvc_swa_allocator *a, const char *fn, const int64_t *slots, size_t n, bool unmapped_ok,
                              bool full_too, kvc_stream stream, bool *taken) {
  KVC_FORWARD(kvc__swa_ensure_tok(a, fn, n)); /* the runs: 2 words per slot at most */
  p1_direct r;
  if (short_runs_ahead(slots, n))
    r = full_too ? pass_direct(a, slots, n, unmapped_ok, true, true)
                 : pass_direct(a, slots, n, unmapped_ok, false, true);
  else
    r = full_too ? pass_direct(a, slots, n, unmapped_ok, true, false)
                 : pass_direct(a, slots, n, unmapped_ok, false, false);
  if (r.done < n) {
    undo_direct(a, slots, &r, full_too);
    return KVC_OK; /* refused: the checked path says why */
  }
  *taken = true;
  kvc_status st = kvc__swa_zero_runs(a, fn, a->words, r.items, stream);
  if (st != KVC_OK) {
    undo_direct(a, slots, &r, full_too);
    return st;
  }
  if (r.nw) {
    a->swa->epoch++;
    a->swa->ring.count += (int64_t)r.nw;
    st = kvc__alloc_finish(a->swa, "kvc_allocator_free", KVC_OK);
  }
  if (!full_too) return kvc__swa_finish(a, st);
  if (st != KVC_OK) { /* a failed SWA-side audit (check mode) stops before the full side, as it always has */
    for (size_t i = 0; i < n; i++) a->full->state[slots[i]] = KVC__PG_HELD;
    return st;
  }
  a->full->epoch++;
  a->full->ring.count += (int64_t)n;
  return kvc__swa_finish(a, kvc__alloc_finish(a->full, "kvc_allocator_free", KVC_OK));
}

/*
 * free / free_evicted (`full_too`) or free_swa of n > 0 slots (not pure, not ring) in one
 * validating pass. Until issue 17's last pass each eviction victim was checked by
 * check_full_slots (range, held, a duplicate mark), planned (peer read, peer held, marks
 * set and cleared), its runs built, and then checked again by the SWA side's and the full
 * side's kvc_allocator_free: five passes over the slots, three of them validating. Here
 * plan_p1 / plan_pages read each slot (page) once and mark the state bytes as they go,
 * which is the duplicate check too. Nothing is trusted: every slot and every peer is
 * checked by this allocator in this call, the same checks as before. Then the device zero
 * launch, or in a deferred-zero scope its queueing (the only step that can fail: the
 * marks are undone and nothing changed), the host map, and the two free lists through
 * release_checked (SWA side first, as before).
 *
 * *taken is false, with nothing changed, when some slot does not pass: the caller then
 * runs the checked path, which refuses it with the same status and message as always.
 * An open group keeps the checked path (its records are the allocator's).
 */
static kvc_status free_fast(kvc_swa_allocator *a, const char *fn, const int64_t *slots, size_t n, bool unmapped_ok,
                            bool full_too, kvc_stream stream, bool *taken) {
  *taken = false;
  if (a->full->in_group || a->swa->in_group) return KVC_OK;
  if (a->ps == 1 && direct_ok(a->swa) && (!full_too || direct_ok(a->full)))
    return free_direct(a, fn, slots, n, unmapped_ok, full_too, stream, taken);
  /* SWA ids: at most one per slot with ps 1; with ps > 1 one per mapped entry of the
   * listed pages, and distinct, so at most the SWA side's pages. */
  size_t nw_cap = n;
  if (a->ps > 1 && !kvc__mul_size(n, (size_t)a->ps, &nw_cap)) nw_cap = SIZE_MAX;
  nw_cap = KVC__MIN(nw_cap, (size_t)kvc__alloc_num_pages(a->swa));
  KVC_FORWARD(kvc__swa_ensure_tok(a, fn, n)); /* the runs: 2 words per slot at most */
  KVC_FORWARD(ensure_rel(a, fn, n, nw_cap));
  size_t nf = n, nw = 0, items = 0, done;
  if (a->ps == 1) done = plan_p1(a, slots, n, unmapped_ok, &nw, &items);
  else done = plan_pages(a, slots, n, &nf, &nw, &items);
  uint8_t *const fst = a->full->state, *const sst = a->swa->state;
  uint32_t *const fv = a->rel, *const wv = a->rel + n;
  if (done < n) {
    unmark_ids(fst, fv, a->ps == 1 ? done : nf);
    unmark_ids(sst, wv, nw);
    return KVC_OK;
  }
  *taken = true;
  /* Launched now, or queued for the end of an open deferred-zero scope (swa_allocator.c). */
  kvc_status st = kvc__swa_zero_runs(a, fn, a->words, items, stream);
  if (st != KVC_OK) {
    unmark_ids(fst, fv, nf);
    unmark_ids(sst, wv, nw);
    return st;
  }
  /* By runs; short ones (page-1 victims are mostly runs of one slot) without a memset call. */
  int32_t *const map = a->map;
  const uint32_t *const runs = a->words;
  for (size_t k = 0; k < items; k++) {
    const uint32_t at = runs[2 * k], len = runs[2 * k + 1];
    if (len <= 8) {
      for (uint32_t j = 0; j < len; j++) map[at + j] = 0;
    } else {
      memset(map + at, 0, (size_t)len * sizeof *map);
    }
  }
  st = release_checked(a->swa, wv, nw);
  /* A failed SWA-side audit (check mode) stops before the full side, as it always has. */
  if (full_too && st == KVC_OK) st = release_checked(a->full, fv, nf);
  else unmark_ids(fst, fv, nf);
  return kvc__swa_finish(a, st);
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
  KVC_FORWARD(zero_entries(a, fn, np, stream));
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
  if (!a->ring) {
    bool taken;
    const kvc_status st = free_fast(a, __func__, slots, n, false, false, stream, &taken);
    if (taken || st != KVC_OK) return st;
  }
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
  if (!a->ring) {
    bool taken;
    const kvc_status st = free_fast(a, fn, slots, n, unmapped_ok, true, stream, &taken);
    if (taken || st != KVC_OK) return st;
  }
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
