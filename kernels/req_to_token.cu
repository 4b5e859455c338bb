/*
 * req_to_token.cu — kernels on the request-to-token table.
 *
 *   kvc_get_last_loc          last_loc[i] = table[rows[i], prefix[i]-1] or -1
 *   kvc_write_req_to_token    prefix rows from per-request pointers + extend rows from
 *                             out_cache_loc; offsets by block scans, not a serial loop
 *   kvc_row_write             host-planned slots into one row (payload inline/staged)
 *
 * Every index read from device memory is bounded before use: rows outside
 * [0, num_rows) and positions outside [0, row_stride) are skipped.
 */
#include "common.cuh"

/* Modules built for the other kernels of this file need no inline payload. */
#ifndef KVC_INLINE_WORDS
#  define KVC_INLINE_WORDS 2
#endif

extern "C" __global__ void __launch_bounds__(256) kvc_get_last_loc(const __grid_constant__ kvc_p_get_last_loc p) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.n) return;
  const int64_t row = kvc_load_index(p.rows, i, p.rows_i64);
  const int64_t pre = kvc_load_index(p.prefix_lens, i, p.lens_i64);
  const int64_t v = kvc_last_loc(kvc_ptr<const int32_t *>(p.table), p.num_rows, p.row_stride, row, pre);
  if (p.lens_i64) kvc_ptr<int64_t *>(p.out)[i] = v;
  else kvc_ptr<int32_t *>(p.out)[i] = (int32_t)v;
}

extern "C" __global__ void __launch_bounds__(256)
    kvc_write_req_to_token(const __grid_constant__ kvc_p_write_req_to_token p) {
  __shared__ int64_t warp_sums[32];
  __shared__ int64_t offsets[256];
  int32_t *table = kvc_ptr<int32_t *>(p.table);
  const int64_t *loc = kvc_ptr<const int64_t *>(p.out_cache_loc);
  int64_t running = 0;
  for (int64_t base = 0; base < p.n; base += blockDim.x) {
    const int64_t i = base + threadIdx.x;
    int64_t e = 0;
    if (i < p.n) {
      const int64_t seq = kvc_load_index(p.seq_lens, i, p.lens_i64), pre = kvc_load_index(p.prefix_lens, i, p.lens_i64);
      e = KVC_EXTEND_LEN(pre, seq);
    }
    int64_t total;
    const int64_t incl = kvc_block_inclusive_scan(e, warp_sums, &total);
    offsets[threadIdx.x] = running + incl - e;
    __syncthreads();
    const int64_t end = base + blockDim.x < p.n ? base + blockDim.x : p.n;
    int64_t first = base + ((int64_t)blockIdx.x - base % gridDim.x + gridDim.x) % gridDim.x;
    for (int64_t r = first; r < end; r += gridDim.x) {
      const int64_t row = kvc_load_index(p.rows, r, p.rows_i64);
      if (row < 0 || row >= p.num_rows) continue;
      const int64_t pre = kvc_load_index(p.prefix_lens, r, p.lens_i64);
      const int64_t seq = kvc_load_index(p.seq_lens, r, p.lens_i64);
      int32_t *dst = table + row * p.row_stride;
      const uint64_t src_addr = p.prefix_ptrs ? kvc_ptr<const uint64_t *>(p.prefix_ptrs)[r] : 0;
      if (src_addr && pre > 0) {
        const int64_t *src = kvc_ptr<const int64_t *>(src_addr);
        const int64_t lim = pre < p.row_stride ? pre : p.row_stride;
        for (int64_t t = threadIdx.x; t < lim; t += blockDim.x) dst[t] = (int32_t)src[t];
      }
      const int64_t off = offsets[r - base];
      for (int64_t t = threadIdx.x; pre + t < seq; t += blockDim.x) {
        const int64_t pos = pre + t;
        if (pos >= 0 && pos < p.row_stride) dst[pos] = (int32_t)loc[off + t];
      }
    }
    running += total;
    __syncthreads();
  }
}

struct kvc_row_write_params {
  kvc_p_row_write h;
  uint32_t words[KVC_INLINE_WORDS];
};

extern "C" __global__ void __launch_bounds__(256) kvc_row_write(const __grid_constant__ kvc_row_write_params p) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.h.n) return;
  const uint32_t *words = p.h.staged ? kvc_ptr<const uint32_t *>(p.h.staged) : p.words;
  kvc_ptr<int32_t *>(p.h.table)[p.h.offset + i] = (int32_t)words[i];
}
