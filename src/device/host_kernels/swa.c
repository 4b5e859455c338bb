/*
 * swa.c — C reference of kernels/swa.cu (map writes and index gathers).
 */
#include "host_kernels.h"

#include <string.h>

/* Per item the kernel's skip of entries outside [0, dst_len) is one clamp of its range, so
 * that a zeroed run (a free's, and a deferred scope's many) is one memset: the host
 * backend stands in for device work that costs a GPU's host nothing, and a per-entry
 * loop with two bounds checks was a fifth of an SWA eviction's instructions. */
/* The zero mode (every SWA free's runs, a deferred scope's many) in a loop of its own:
 * the mode and the destination's width are tested once per launch, not per item (a
 * page-1 SWA eviction's runs are ~2 entries each, so the per-item tests were most of
 * the twin). Each run is one memset (GCC makes one of a short loop anyway). */
static inline void zero_runs(void *dst, size_t es, const uint32_t *w, int64_t count, int64_t dst_len) {
  unsigned char *const d = dst;
  for (int64_t item = 0; item < count; item++) {
    const int64_t lo = w[2 * item], end = lo + w[2 * item + 1];
    const int64_t hi = end < dst_len ? end : dst_len;
    if (lo < hi) memset(d + (size_t)lo * es, 0, (size_t)(hi - lo) * es);
  }
}

static void map_items(const kvc_p_swa_map_write *p, const uint32_t *w, int64_t count);

void kvc_host_swa_map_write(const void *params) {
  const kvc_p_swa_map_write *p = params;
  const uint32_t *w0 = p->staged ? KVC_HPTR(const uint32_t *, p->staged) : KVC_INLINE_PAYLOAD(p);
  /* The mode's items, then the leading queued zeroes: the kernel gives them no order (they
   * must be disjoint), so the twin takes the order in which an overlap the host failed to
   * see would lose the new pairs, and the tests comparing both mappings would fail. */
  const int64_t zc = p->zero_count, count = p->count - zc;
  const uint32_t *const w = w0 + 2 * zc;
  if (p->mode != KVC_SWA_MAP_PAIRS && p->mode != KVC_SWA_MAP_RUNS) {
    /* A constant element size at each call: the inlined copies multiply by 8 or 4. */
    if (p->dst_i64) zero_runs(KVC_HPTR(void *, p->dst), 8, w, count, p->dst_len);
    else zero_runs(KVC_HPTR(void *, p->dst), 4, w, count, p->dst_len);
  } else {
    map_items(p, w, count);
  }
  if (zc) {
    if (p->dst_i64) zero_runs(KVC_HPTR(void *, p->dst), 8, w0, zc, p->dst_len);
    else zero_runs(KVC_HPTR(void *, p->dst), 4, w0, zc, p->dst_len);
  }
}

/* PAIRS / RUNS items (the per-item loop of kvc_host_swa_map_write). */
static void map_items(const kvc_p_swa_map_write *p, const uint32_t *w, int64_t count) {
  for (int64_t item = 0; item < count; item++) {
    int64_t idx, val, len, step;
    if (p->mode == KVC_SWA_MAP_PAIRS) {
      idx = w[2 * item], val = (int64_t)(int32_t)w[2 * item + 1], len = 1, step = 0;
    } else if (p->mode == KVC_SWA_MAP_RUNS) {
      idx = w[3 * item], val = (int64_t)(int32_t)w[3 * item + 1], len = w[3 * item + 2], step = 1;
    } else {
      idx = w[2 * item], val = 0, len = w[2 * item + 1], step = 0;
    }
    /* idx and len are uint32 values: idx >= 0 and idx + len cannot overflow */
    const int64_t lo = idx, hi = idx + len < p->dst_len ? idx + len : p->dst_len;
    if (lo >= hi) continue;
    if (p->dst_i64) {
      int64_t *const d = KVC_HPTR(int64_t *, p->dst);
      if (val == 0 && step == 0) memset(d + lo, 0, (size_t)(hi - lo) * sizeof *d);
      else
        for (int64_t x = lo; x < hi; x++) d[x] = val + step * (x - idx);
    } else {
      int32_t *const d = KVC_HPTR(int32_t *, p->dst);
      if (val == 0 && step == 0) memset(d + lo, 0, (size_t)(hi - lo) * sizeof *d);
      else
        for (int64_t x = lo; x < hi; x++) d[x] = (int32_t)(val + step * (x - idx));
    }
  }
}

void kvc_host_swa_gather(const void *params) {
  const kvc_p_swa_gather *p = params;
  for (int64_t i = 0; i < p->n; i++) {
    const int64_t x = kvc_load_index(p->in, i, p->in_i64);
    const int64_t v = kvc_map_lookup(p->map, p->map_i64, p->map_len, x, p->oob);
    if (p->out_i64) KVC_HPTR(int64_t *, p->out)[i] = v;
    else KVC_HPTR(int32_t *, p->out)[i] = (int32_t)v;
  }
}
