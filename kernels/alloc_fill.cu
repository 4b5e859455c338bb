/*
 * alloc_fill.cu — SGLang's paged allocation kernels, on device inputs (level-1 ops).
 *
 * Request i with prefix p, new length s, last_loc l and page size ps gets its new slots
 * in three parts: the rest of the prefix's partial page (l+1, ...), whole new pages, a
 * final partial page; pages come from free_pages[S_i ...] with S_i the exclusive scan of
 * n_j = ceil(s/ps) - ceil(p/ps). Both scans (output offsets and page offsets) are block
 * scans over chunks, so each block costs O(n / blockDim) instead of an O(i) loop.
 * A slot that would need a page past num_free_pages is written as 0 (padding).
 * The layout rules themselves are kvc_index.h's, shared with the host twins.
 */
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(256) kvc_alloc_extend_fill(const __grid_constant__ kvc_p_extend_fill p) {
  __shared__ int64_t warp_sums[32];
  __shared__ int64_t out_off[256], page_off[256];
  const int64_t ps = p.page_size;
  const int64_t *free_pages = kvc_ptr<const int64_t *>(p.free_pages);
  int64_t *out = kvc_ptr<int64_t *>(p.out);
  int64_t run_out = 0, run_pages = 0;
  for (int64_t base = 0; base < p.n; base += blockDim.x) {
    const int64_t i = base + threadIdx.x;
    int64_t e = 0, np = 0;
    if (i < p.n) {
      const int64_t pre = kvc_load_index(p.prefix_lens, i, p.lens_i64);
      const int64_t seq = kvc_load_index(p.seq_lens, i, p.lens_i64);
      if (KVC_EXTEND_GROWS(pre, seq)) {
        e = seq - pre;
        np = KVC_EXTEND_NEW_PAGES(pre, seq, ps);
      }
    }
    int64_t tot_e, tot_p;
    const int64_t inc_e = kvc_block_inclusive_scan(e, warp_sums, &tot_e);
    const int64_t inc_p = kvc_block_inclusive_scan(np, warp_sums, &tot_p);
    out_off[threadIdx.x] = run_out + inc_e - e;
    page_off[threadIdx.x] = run_pages + inc_p - np;
    __syncthreads();
    const int64_t end = base + blockDim.x < p.n ? base + blockDim.x : p.n;
    int64_t first = base + ((int64_t)blockIdx.x - base % gridDim.x + gridDim.x) % gridDim.x;
    for (int64_t r = first; r < end; r += gridDim.x) {
      const int64_t pre = kvc_load_index(p.prefix_lens, r, p.lens_i64);
      const int64_t seq = kvc_load_index(p.seq_lens, r, p.lens_i64);
      if (!KVC_EXTEND_GROWS(pre, seq)) continue;
      const int64_t last = kvc_ptr<const int64_t *>(p.last_loc)[r];
      const int64_t ceil_pre = KVC_EXTEND_CEIL_PRE(pre, ps);
      const int64_t o = out_off[r - base], s0 = page_off[r - base];
      for (int64_t t = threadIdx.x; pre + t < seq; t += blockDim.x) {
        const int64_t pos = pre + t;
        int64_t slot;
        if (KVC_EXTEND_IN_PREFIX_PAGE(pos, ceil_pre)) {
          slot = KVC_SLOT_AFTER(last, t);
        } else {
          const int64_t k = pos - ceil_pre, idx = s0 + k / ps;
          slot = idx < p.num_free_pages ? KVC_PAGE_SLOT(free_pages[idx], k, ps) : 0;
        }
        out[o + t] = slot;
      }
    }
    run_out += tot_e;
    run_pages += tot_p;
    __syncthreads();
  }
}

extern "C" __global__ void __launch_bounds__(256) kvc_alloc_decode_fill(const __grid_constant__ kvc_p_decode_fill p) {
  __shared__ int64_t warp_sums[32];
  const int64_t ps = p.page_size;
  int64_t running = 0;
  /* One block: decode batches are at most a few thousand requests. */
  for (int64_t base = 0; base < p.n; base += blockDim.x) {
    const int64_t i = base + threadIdx.x;
    int64_t seq = 0, np = 0;
    if (i < p.n) {
      seq = kvc_load_index(p.seq_lens, i, p.lens_i64);
      np = KVC_DECODE_NEW_PAGE(seq, ps) ? 1 : 0;
    }
    int64_t total;
    const int64_t incl = kvc_block_inclusive_scan(np, warp_sums, &total);
    if (i < p.n) {
      int64_t slot;
      if (np) {
        const int64_t idx = running + incl - 1;
        slot = idx < p.num_free_pages ? kvc_ptr<const int64_t *>(p.free_pages)[idx] * ps : 0;
      } else {
        slot = KVC_SLOT_AFTER(kvc_load_index(p.last_loc, i, p.last_i64), 0);
      }
      kvc_ptr<int64_t *>(p.out)[i] = slot;
    }
    running += total;
  }
}
