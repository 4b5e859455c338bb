/*
 * common.cuh — device helpers shared by the kernels: a block-wide inclusive scan used
 * to turn per-request lengths into offsets without SGLang's O(n) serial loop per
 * program. Index rules the host twins share too are in kvc_index.h.
 */
#ifndef KVC_COMMON_CUH
#define KVC_COMMON_CUH

#include "kvc_abi.h"
#include "kvc_index.h" /* kvc_load_index, kvc_decode_write and the other index rules */

#define KVC_DEVICE __device__ __forceinline__

template <typename T> KVC_DEVICE T kvc_ptr(uint64_t a) { return reinterpret_cast<T>(a); }

/* Block-wide inclusive scan of one int64 per thread (blockDim.x <= 1024, a multiple of
 * 32). `warp_sums` is shared scratch of 32 entries. Returns the inclusive prefix; the
 * block total is written to *total. All threads must call it. */
KVC_DEVICE int64_t kvc_block_inclusive_scan(int64_t v, int64_t *warp_sums, int64_t *total) {
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const unsigned nwarps = (blockDim.x + 31u) >> 5;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    int64_t y = __shfl_up_sync(0xffffffffu, v, d);
    if ((int)lane >= d) v += y;
  }
  if (lane == 31) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int64_t w = lane < nwarps ? warp_sums[lane] : 0;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      int64_t y = __shfl_up_sync(0xffffffffu, w, d);
      if ((int)lane >= d) w += y;
    }
    warp_sums[lane] = w;
  }
  __syncthreads();
  if (warp > 0) v += warp_sums[warp - 1];
  *total = warp_sums[nwarps - 1];
  __syncthreads();
  return v;
}

#endif
