/* C reference of kernels/alloc_fill.cu, alloc_plan.cu and alloc_channel.cu; the slot
 * layout rules are kernels/kvc_index.h's, the kernels' own. */
#include "host_kernels.h"

#include <stdbool.h>
#include <string.h>

void kvc_host_alloc_extend_fill(const void *params) {
  const kvc_p_extend_fill *p = params;
  const int64_t ps = p->page_size;
  const int64_t *free_pages = KVC_HPTR(const int64_t *, p->free_pages);
  int64_t *out = KVC_HPTR(int64_t *, p->out);
  int64_t o = 0, s0 = 0;
  for (int64_t r = 0; r < p->n; r++) {
    int64_t pre = kvc_load_index(p->prefix_lens, r, p->lens_i64);
    int64_t seq = kvc_load_index(p->seq_lens, r, p->lens_i64);
    if (!KVC_EXTEND_GROWS(pre, seq)) continue;
    int64_t last = KVC_HPTR(const int64_t *, p->last_loc)[r];
    int64_t ceil_pre = KVC_EXTEND_CEIL_PRE(pre, ps);
    for (int64_t t = 0; pre + t < seq; t++) {
      int64_t pos = pre + t, slot;
      if (KVC_EXTEND_IN_PREFIX_PAGE(pos, ceil_pre)) {
        slot = KVC_SLOT_AFTER(last, t);
      } else {
        int64_t k = pos - ceil_pre, idx = s0 + k / ps;
        slot = idx < p->num_free_pages ? KVC_PAGE_SLOT(free_pages[idx], k, ps) : 0;
      }
      out[o + t] = slot;
    }
    o += seq - pre;
    s0 += KVC_EXTEND_NEW_PAGES(pre, seq, ps);
  }
}

void kvc_host_alloc_decode_fill(const void *params) {
  const kvc_p_decode_fill *p = params;
  const int64_t ps = p->page_size;
  int64_t used = 0;
  for (int64_t i = 0; i < p->n; i++) {
    int64_t seq = kvc_load_index(p->seq_lens, i, p->lens_i64);
    int64_t slot;
    if (KVC_DECODE_NEW_PAGE(seq, ps)) {
      int64_t idx = used++;
      slot = idx < p->num_free_pages ? KVC_HPTR(const int64_t *, p->free_pages)[idx] * ps : 0;
    } else {
      slot = KVC_SLOT_AFTER(kvc_load_index(p->last_loc, i, p->last_i64), 0);
    }
    KVC_HPTR(int64_t *, p->out)[i] = slot;
  }
}

/* The SWA allocator's carried zero runs z = (count, then (idx, len) pairs), entries
 * outside [0, map_len) skipped: the plan kernels' threads past their requests. */
static void zero_runs(int64_t *map, int64_t map_len, const uint32_t *z) {
  for (int64_t it = 0; it < (int64_t)z[0]; it++) {
    const int64_t lo = z[1 + 2 * it], end = lo + z[2 + 2 * it];
    const int64_t hi = end < map_len ? end : map_len;
    if (lo < hi) memset(map + lo, 0, (size_t)(hi - lo) * sizeof(int64_t));
  }
}

void kvc_host_plan_extend(const void *params) {
  const kvc_p_plan_extend *p = params;
  const uint32_t *w = p->staged ? KVC_HPTR(const uint32_t *, p->staged) : KVC_INLINE_PAYLOAD(p);
  const int64_t ps = p->page_size;
  for (int r = 0; r < p->n; r++) {
    const int32_t *d = (const int32_t *)(const void *)(w + (size_t)r * KVC_PLAN_EXTEND_DESC_WORDS);
    int32_t row = d[0], pre = d[1], seq = d[2], last = d[3], o = d[4], pb = d[5], psrc = d[6], wlast = d[7];
    int64_t ceil_pre = KVC_EXTEND_CEIL_PRE(pre, ps);
    const uint32_t *pages = w + p->pages_at + pb;
    const uint32_t *wpages = w + p->swa_pages_at + pb;
    int64_t *map = p->map ? KVC_HPTR(int64_t *, p->map) : NULL;
    int32_t *dst = (p->table && row >= 0) ? KVC_HPTR(int32_t *, p->table) + (int64_t)row * p->row_stride : NULL;
    int64_t *out = p->out ? KVC_HPTR(int64_t *, p->out) : NULL;
    if (p->rows_out) KVC_HPTR(int64_t *, p->rows_out)[r] = row;
    for (int64_t t = 0; pre + t < seq; t++) {
      int64_t pos = pre + t, slot, wslot = 0;
      if (KVC_EXTEND_IN_PREFIX_PAGE(pos, ceil_pre)) {
        slot = KVC_SLOT_AFTER(last, t);
        wslot = KVC_SLOT_AFTER(wlast, t);
      } else {
        const int64_t k = pos - ceil_pre;
        slot = KVC_PAGE_SLOT((int64_t)pages[k / ps], k, ps);
        if (map) wslot = KVC_PAGE_SLOT((int64_t)wpages[k / ps], k, ps);
      }
      if (out) out[o + t] = slot;
      if (dst) dst[pos] = (int32_t)slot;
      if (map && slot >= 0 && slot < p->map_len) map[slot] = wslot;
    }
    if (map && p->zero_at && seq > ceil_pre && (seq - ceil_pre) % ps) { /* the kernel's tail zeroes */
      const int64_t base = (int64_t)pages[(seq - 1 - ceil_pre) / ps] * ps;
      for (int64_t j = (seq - ceil_pre) % ps; j < ps; j++)
        if (base + j < p->map_len) map[base + j] = 0;
    }
    if (dst && psrc >= 0) {
      const int32_t *src = (const int32_t *)(const void *)(w + p->prefix_at + psrc);
      for (int64_t t = 0; t < pre; t++) dst[t] = src[t];
    }
  }
  /* The SWA allocator's queued zeroes (the kernel's blocks past the requests), last: the
   * kernel gives them no order against the new slots (they must be disjoint), so the twin
   * takes the order in which an overlap the host failed to see would lose new pairs. */
  int64_t *const zmap = p->map ? KVC_HPTR(int64_t *, p->map) : NULL; /* zero runs come with a map only */
  if (zmap && p->zero_at) zero_runs(zmap, p->map_len, w + p->zero_at);
}

void kvc_host_plan_decode(const void *params) {
  const kvc_p_plan_decode *p = params;
  const uint32_t *w = p->staged ? KVC_HPTR(const uint32_t *, p->staged) : KVC_INLINE_PAYLOAD(p);
  const int stride = KVC_DECODE_ENTRY_WORDS(p->map, p->table_len);
  int64_t *out = KVC_HPTR(int64_t *, p->out), *map = KVC_HPTR(int64_t *, p->map);
  int32_t *table = KVC_HPTR(int32_t *, p->table);
  /* One loop per form, so that kvc_decode_write's form test folds away (the kernel's
   * threads test a uniform value): callgrind, batch 1024, 32.0 -> 30.0 instructions a
   * request (the three-word loop: 25.0). */
  if (p->table_len > 0)
    for (int i = 0; i < p->n; i++)
      kvc_decode_write(w + stride * i, i, out, table, p->row_stride, p->table_len, map, p->map_len);
  else
    for (int i = 0; i < p->n; i++) kvc_decode_write(w + stride * i, i, out, table, p->row_stride, 0, map, p->map_len);
  if (!map || !p->zero_at) return;
  for (int i = 0; i < p->n; i++) kvc_decode_zero_tail(w + stride * i, w[p->zero_at - 1], map, p->map_len);
  zero_runs(map, p->map_len, w + p->zero_at); /* last, as the extend twin */
}

void kvc_host_decode_channel_apply(const void *params) {
  const kvc_p_decode_channel *p = params;
  uint32_t *applied = KVC_HPTR(uint32_t *, p->applied);
  uint32_t *host_state = KVC_HPTR(uint32_t *, p->host_state);
  const uint32_t step = *applied + 1;
  const uint32_t *slot =
      KVC_HPTR(const uint32_t *, p->ring) + (size_t)((step - 1) % (uint32_t)p->depth) * (size_t)p->slot_words;
  const bool ok = slot[0] == step && slot[1] <= (uint32_t)p->max_batch;
  const int n = ok ? (int)slot[1] : 0;
  const uint32_t *w = slot + KVC_CHANNEL_HEADER_WORDS;
  int64_t *out = p->out ? KVC_HPTR(int64_t *, p->out) : NULL;
  const int stride = KVC_DECODE_ENTRY_WORDS(p->map, 0); /* the channel's three-word form */
  for (int i = 0; i < n; i++) {
    kvc_decode_write(w + stride * i, i, out, KVC_HPTR(int32_t *, p->table), p->row_stride, 0,
                     KVC_HPTR(int64_t *, p->map), p->map_len);
  }
  if (out)
    for (int i = n; i < p->max_batch; i++) out[i] = 0;
  if (ok) {
    *applied = step;
    host_state[0] = step;
  } else if (host_state[1] == 0) {
    host_state[1] = step;
  }
}
