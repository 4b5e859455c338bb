/*
 * common.cuh — device helpers shared by the kernels: index loads of either width and a
 * block-wide exclusive scan used to turn per-request lengths into offsets without
 * SGLang's O(n) serial loop per program.
 */
#ifndef KVC_COMMON_CUH
#define KVC_COMMON_CUH

#include "kvc_abi.h"

#define KVC_DEVICE __device__ __forceinline__

template <typename T> KVC_DEVICE T kvc_ptr(uint64_t a) { return reinterpret_cast<T>(a); }

/* Loads element i of an int32 or int64 vector as int64. */
KVC_DEVICE int64_t kvc_load_index(uint64_t base, int64_t i, int is64) {
  return is64 ? reinterpret_cast<const int64_t *>(base)[i]
              : (int64_t) reinterpret_cast<const int32_t *>(base)[i];
}

/* Request i's writes of one decode step from its payload entry e = (row, position, slot
 * [, mapped value]): out_cache_loc, the req_to_token table and, when map is given, the
 * full->SWA mapping (entries outside [0, map_len) skipped). Shared by the planned decode
 * (alloc_plan.cu) and the decode channel (alloc_channel.cu) so both write alike. */
KVC_DEVICE void kvc_decode_write(const uint32_t *e, int i, int64_t *out, int32_t *table, int64_t row_stride,
                                 int64_t *map, int64_t map_len) {
  const int32_t row = (int32_t)e[0], pos = (int32_t)e[1], slot = (int32_t)e[2];
  if (out) out[i] = slot;
  if (table && row >= 0) table[(int64_t)row * row_stride + pos] = slot;
  if (map && slot >= 0 && slot < map_len) map[slot] = (int32_t)e[3];
}

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
