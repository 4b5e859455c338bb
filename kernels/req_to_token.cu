/*
 * req_to_token.cu — kernels on the request-to-token table.
 *
 *   kvc_get_last_loc_r*_l*    last_loc[i] = table[rows[i], prefix[i]-1] or -1 (one
 *                             entry per index-type pair, and a _one twin of each for
 *                             n == 1)
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

template <bool I64> KVC_DEVICE int64_t kvc_r2t_index(uint64_t base, int64_t i) {
  if (I64) return kvc_ptr<const int64_t *>(base)[i];
  return (int64_t)kvc_ptr<const int32_t *>(base)[i];
}

/* get_last_loc for one index-type pair: the types are template arguments, so both input
 * loads issue before any branch. Plain loads: with the 48-byte parameter block the
 * read-only path measured no faster (bench/NOTES-kernels.md). */
template <bool R64, bool L64> KVC_DEVICE void kvc_last_loc_one(const kvc_p_get_last_loc &p, int64_t i) {
  const int64_t row = kvc_r2t_index<R64>(p.rows, i);
  const int64_t pre = kvc_r2t_index<L64>(p.prefix_lens, i);
  const int64_t at = kvc_last_loc_entry(p.num_rows, p.row_stride, row, pre);
  const int64_t v = at >= 0 ? (int64_t)kvc_ptr<const int32_t *>(p.table)[at] : -1;
  if (L64) kvc_ptr<int64_t *>(p.out)[i] = v;
  else kvc_ptr<int32_t *>(p.out)[i] = (int32_t)v;
}

/* A 32-bit index: the launcher caps n at INT32_MAX, so blockIdx.x * 128 + threadIdx.x
 * stays below 2^32. */
template <bool R64, bool L64> KVC_DEVICE void kvc_last_loc_kernel(const kvc_p_get_last_loc &p) {
  const unsigned i = blockIdx.x * KVC_LAST_LOC_THREADS + threadIdx.x;
  if (i >= (unsigned)p.n) return;
  kvc_last_loc_one<R64, L64>(p, i);
}

/* Batch 1 (a decode of one request) is launched on one thread with i = 0 built in: no
 * block index and no load of n before the first global load. Triton specialises its
 * kernel the same way when num_tokens == 1 (bench/NOTES-kernels.md). */
#define KVC_LAST_LOC_ENTRY(name, R64, L64)                                                                   \
  extern "C" __global__ void __launch_bounds__(KVC_LAST_LOC_THREADS)                                         \
      name(const __grid_constant__ kvc_p_get_last_loc p) {                                                   \
    kvc_last_loc_kernel<R64, L64>(p);                                                                        \
  }                                                                                                          \
  extern "C" __global__ void __launch_bounds__(1) name##_one(const __grid_constant__ kvc_p_get_last_loc p) { \
    kvc_last_loc_one<R64, L64>(p, 0);                                                                        \
  }
KVC_LAST_LOC_ENTRY(kvc_get_last_loc_r32_l32, false, false)
KVC_LAST_LOC_ENTRY(kvc_get_last_loc_r64_l32, true, false)
KVC_LAST_LOC_ENTRY(kvc_get_last_loc_r32_l64, false, true)
KVC_LAST_LOC_ENTRY(kvc_get_last_loc_r64_l64, true, true)

/* Copies n values src[0, n) (int64) to dst[0, n) (int32) with the block's threads, four
 * loads in flight per thread before any store: a plain strided loop waits out one memory
 * round trip per 256 values, which is most of this kernel's time at 512 tokens. */
KVC_DEVICE void kvc_narrow_copy(int32_t *dst, const int64_t *src, int64_t n) {
  enum { U = 4 };
  for (int64_t t0 = threadIdx.x; t0 < n; t0 += U * (int64_t)blockDim.x) {
    int64_t v[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t t = t0 + u * (int64_t)blockDim.x;
      v[u] = t < n ? src[t] : 0;
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t t = t0 + u * (int64_t)blockDim.x;
      if (t < n) dst[t] = (int32_t)v[u];
    }
  }
}

/* One request's write: the row, the prefix vector and the lengths are loaded before the
 * block scan that yields its offset, so their latency overlaps the scan. */
struct kvc_w2t_req {
  int64_t row, pre, seq;
  uint64_t src;
};

KVC_DEVICE kvc_w2t_req kvc_w2t_load(const kvc_p_write_req_to_token &p, int64_t r) {
  kvc_w2t_req q;
  q.row = kvc_load_index(p.rows, r, p.rows_i64);
  q.pre = kvc_load_index(p.prefix_lens, r, p.lens_i64);
  q.seq = kvc_load_index(p.seq_lens, r, p.lens_i64);
  q.src = p.prefix_ptrs ? kvc_ptr<const uint64_t *>(p.prefix_ptrs)[r] : 0;
  return q;
}

KVC_DEVICE int64_t kvc_w2t_len(const kvc_p_write_req_to_token &p, int64_t i) {
  const int64_t seq = kvc_load_index(p.seq_lens, i, p.lens_i64), pre = kvc_load_index(p.prefix_lens, i, p.lens_i64);
  return KVC_EXTEND_LEN(pre, seq);
}

/* Request r's rows, its extend slots starting at out_cache_loc[off]. */
KVC_DEVICE void kvc_w2t_apply(const kvc_p_write_req_to_token &p, const kvc_w2t_req &q, int64_t off) {
  if (q.row < 0 || q.row >= p.num_rows) return;
  int32_t *dst = kvc_ptr<int32_t *>(p.table) + q.row * p.row_stride;
  if (q.src && q.pre > 0)
    kvc_narrow_copy(dst, kvc_ptr<const int64_t *>(q.src), q.pre < p.row_stride ? q.pre : p.row_stride);
  /* Positions [pre, seq) clipped to [0, row_stride); the slot of position pos is
   * out_cache_loc[off + pos - pre]. */
  const int64_t lo = q.pre > 0 ? q.pre : 0, hi = q.seq < p.row_stride ? q.seq : p.row_stride;
  if (hi > lo) kvc_narrow_copy(dst + lo, kvc_ptr<const int64_t *>(p.out_cache_loc) + off + (lo - q.pre), hi - lo);
}

#ifndef KVC_R2T_WARP_FAST
#  define KVC_R2T_WARP_FAST 1
#endif

extern "C" __global__ void __launch_bounds__(256)
    kvc_write_req_to_token(const __grid_constant__ kvc_p_write_req_to_token p) {
  __shared__ int64_t warp_sums[32];
  __shared__ int64_t offsets[256];
#if KVC_R2T_WARP_FAST
  if (p.n <= 32) {
    /* Small batches: every warp sums the lengths before its request itself (one length
     * per lane, a shuffle reduction), so no block scan and no barrier stand between the
     * loads and the copy. */
    const unsigned lane = threadIdx.x & 31u;
    const int64_t e = lane < p.n ? kvc_w2t_len(p, lane) : 0;
    for (int64_t r = blockIdx.x; r < p.n; r += gridDim.x) {
      const kvc_w2t_req q = kvc_w2t_load(p, r);
      int64_t off = lane < r ? e : 0;
#  pragma unroll
      for (int d = 16; d > 0; d >>= 1) off += __shfl_xor_sync(0xffffffffu, off, d);
      kvc_w2t_apply(p, q, off);
    }
    return;
  }
#endif
  int64_t running = 0;
  for (int64_t base = 0; base < p.n; base += blockDim.x) {
    const int64_t i = base + threadIdx.x;
    const int64_t end = base + blockDim.x < p.n ? base + blockDim.x : p.n;
    const int64_t first = base + ((int64_t)blockIdx.x - base % gridDim.x + gridDim.x) % gridDim.x;
    /* Issued before the scan; the loads complete while it runs. */
    kvc_w2t_req q = {};
    if (first < end) q = kvc_w2t_load(p, first);
    const int64_t e = i < p.n ? kvc_w2t_len(p, i) : 0;
    int64_t total;
    const int64_t incl = kvc_block_inclusive_scan(e, warp_sums, &total);
    offsets[threadIdx.x] = running + incl - e;
    __syncthreads();
    for (int64_t r = first; r < end; r += gridDim.x) {
      if (r != first) q = kvc_w2t_load(p, r);
      kvc_w2t_apply(p, q, offsets[r - base]);
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
