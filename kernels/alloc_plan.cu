/*
 * alloc_plan.cu — the allocator's host-planned steps: the host has already decided every
 * page (it owns the free lists); these kernels expand a compact plan into out_cache_loc
 * and the req_to_token rows in one launch.
 *
 * Extend payload (uint32 words): n descriptors of KVC_PLAN_EXTEND_DESC_WORDS, then the
 * page list (pages_at), then prefix slots to copy into rows (prefix_at), and, when the SWA
 * allocator fuses its full->SWA mapping write in (map != 0), the SWA pages parallel to
 * the page list (swa_pages_at): an SWA slot follows from its page and its request's SWA
 * last_loc (descriptor word 7) exactly as the full slot does.
 * With rows_out, each request's row goes there as int64 too (SGLang's req_pool_indices).
 * Grid: x = request, y = token tile of KVC_PLAN_EXTEND_TOKENS_PER_BLOCK.
 * Decode payload: per request (table offset, slot) when the header's table_len > 0 (a
 * req_to_token table below 2^31 entries), else (row, position, slot), plus the slot's
 * full->SWA mapping value when the SWA allocator fuses its mapping write in
 * (kvc_decode_write, kvc_index.h); one thread per request.
 */
#include "common.cuh"

#ifndef KVC_INLINE_WORDS
#  define KVC_INLINE_WORDS 2
#endif

#ifndef KVC_PAGE_SIZE
#  define KVC_PAGE_SIZE p.h.page_size
#endif

/* The SWA allocator's carried zero runs z = (count, then (idx, len) pairs): group `unit`
 * of `units` groups of 32 threads takes runs unit, unit + units, ...; lane = the thread's
 * place in its group. Entries outside [0, map_len) are skipped. */
KVC_DEVICE void kvc_zero_runs(int64_t *map, int64_t map_len, const uint32_t *z, int64_t unit, int64_t units,
                              unsigned lane) {
  const int64_t runs = z[0];
  for (int64_t it = unit; it < runs; it += units) {
    const int64_t idx = z[1 + 2 * it], len = z[2 + 2 * it];
    for (int64_t j = lane; j < len; j += 32)
      if (idx + j < map_len) map[idx + j] = 0;
  }
}

struct kvc_plan_extend_params {
  kvc_p_plan_extend h;
  uint32_t words[KVC_INLINE_WORDS];
};

extern "C" __global__ void __launch_bounds__(256) kvc_plan_extend(const __grid_constant__ kvc_plan_extend_params p) {
  const uint32_t *w = p.h.staged ? kvc_ptr<const uint32_t *>(p.h.staged) : p.words;
  const int r = blockIdx.x;
  if (r >= p.h.n) {
    /* Blocks past the requests (row y == 0 only) zero the SWA allocator's queued runs,
     * a warp per run: entries disjoint from every new slot's (the host checks). */
    if (blockIdx.y != 0 || !p.h.zero_at) return;
    const int64_t warps = (int64_t)(gridDim.x - (unsigned)p.h.n) * (blockDim.x >> 5);
    kvc_zero_runs(kvc_ptr<int64_t *>(p.h.map), p.h.map_len, w + p.h.zero_at,
                  (int64_t)(r - p.h.n) * (blockDim.x >> 5) + (threadIdx.x >> 5), warps, threadIdx.x & 31u);
    return;
  }
  const int32_t *d = reinterpret_cast<const int32_t *>(w + (size_t)r * KVC_PLAN_EXTEND_DESC_WORDS);
  /* A staged payload may be read in place from pinned host memory (kvc__plan_begin_mapped):
   * the descriptor once per block, not once per warp and word over the bus. */
  __shared__ int32_t desc[KVC_PLAN_EXTEND_DESC_WORDS];
  if (p.h.staged) {
    if (threadIdx.x < KVC_PLAN_EXTEND_DESC_WORDS) desc[threadIdx.x] = d[threadIdx.x];
    __syncthreads();
    d = desc;
  }
  const int32_t row = d[0], pre = d[1], seq = d[2], last = d[3], o = d[4], pb = d[5], psrc = d[6], wlast = d[7];
  const int64_t ps = KVC_PAGE_SIZE;
  const int64_t ceil_pre = KVC_EXTEND_CEIL_PRE(pre, ps);
  const uint32_t *pages = w + p.h.pages_at + pb;
  int64_t *map = p.h.map ? kvc_ptr<int64_t *>(p.h.map) : nullptr;
  const uint32_t *wpages = w + p.h.swa_pages_at + pb;
  int32_t *dst = (p.h.table && row >= 0) ? kvc_ptr<int32_t *>(p.h.table) + (int64_t)row * p.h.row_stride : nullptr;
  int64_t *out = p.h.out ? kvc_ptr<int64_t *>(p.h.out) : nullptr;
  if (p.h.rows_out && blockIdx.y == 0 && threadIdx.x == 0) kvc_ptr<int64_t *>(p.h.rows_out)[r] = row;
  const int64_t t0 = (int64_t)blockIdx.y * KVC_PLAN_EXTEND_TOKENS_PER_BLOCK;
  const int64_t t1 = t0 + KVC_PLAN_EXTEND_TOKENS_PER_BLOCK;
  /* new tokens t: positions pre + t */
  for (int64_t t = t0 + threadIdx.x; t < t1 && pre + t < seq; t += blockDim.x) {
    const int64_t pos = pre + t;
    int64_t slot, wslot;
    if (KVC_EXTEND_IN_PREFIX_PAGE(pos, ceil_pre)) {
      slot = KVC_SLOT_AFTER(last, t);
      wslot = KVC_SLOT_AFTER(wlast, t);
    } else {
      const int64_t k = pos - ceil_pre;
      slot = KVC_PAGE_SLOT((int64_t)pages[k / ps], k, ps);
      wslot = map ? KVC_PAGE_SLOT((int64_t)wpages[k / ps], k, ps) : 0;
    }
    if (out) out[o + t] = slot;
    if (dst) dst[pos] = (int32_t)slot;
    if (map && slot >= 0 && slot < p.h.map_len) map[slot] = wslot;
  }
  /* Carrying queued zeroes (zero_at != 0): the host dropped the new pages from them, so
   * the unused tail of the request's last new page is zeroed here (0 on the host too). */
  if (map && p.h.zero_at && blockIdx.y == 0 && seq > ceil_pre && (seq - ceil_pre) % ps) {
    const int64_t base = (int64_t)pages[(seq - 1 - ceil_pre) / ps] * ps;
    for (int64_t j = (seq - ceil_pre) % ps + threadIdx.x; j < ps; j += blockDim.x)
      if (base + j < p.h.map_len) map[base + j] = 0;
  }
  /* prefix copy: positions t in [0, pre) */
  if (dst && psrc >= 0) {
    const int32_t *src = reinterpret_cast<const int32_t *>(w + p.h.prefix_at + psrc);
    for (int64_t t = t0 + threadIdx.x; t < t1 && t < pre; t += blockDim.x) dst[t] = src[t];
  }
}

struct kvc_plan_decode_params {
  kvc_p_plan_decode h;
  uint32_t words[KVC_INLINE_WORDS];
};

extern "C" __global__ void __launch_bounds__(256) kvc_plan_decode(const __grid_constant__ kvc_plan_decode_params p) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.h.n) {
    /* The threads past the requests zero the SWA allocator's carried runs, 32 a run: the
     * host checked that no new slot lies on a queued page, so nothing here races a pair. */
    if (!p.h.zero_at) return;
    const uint32_t *w = p.h.staged ? kvc_ptr<const uint32_t *>(p.h.staged) : p.words;
    const int64_t k = (int64_t)i - p.h.n, units = ((int64_t)gridDim.x * blockDim.x - p.h.n) >> 5;
    if ((k >> 5) < units)
      kvc_zero_runs(kvc_ptr<int64_t *>(p.h.map), p.h.map_len, w + p.h.zero_at, k >> 5, units, (unsigned)(k & 31));
    return;
  }
  const uint32_t *w = p.h.staged ? kvc_ptr<const uint32_t *>(p.h.staged) : p.words;
  const int stride = KVC_DECODE_ENTRY_WORDS(p.h.map, p.h.table_len);
  kvc_decode_write(w + stride * i, i, kvc_ptr<int64_t *>(p.h.out), kvc_ptr<int32_t *>(p.h.table), p.h.row_stride,
                   p.h.table_len, kvc_ptr<int64_t *>(p.h.map), p.h.map_len);
  /* Carrying queued zeroes: the host dropped this step's new pages from them, so a
   * request that opened a page zeroes the page's other slots (0 on the host too). */
  if (p.h.zero_at) kvc_decode_zero_tail(w + stride * i, w[p.h.zero_at - 1], kvc_ptr<int64_t *>(p.h.map), p.h.map_len);
}
