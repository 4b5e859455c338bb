/*
 * swa.cu — index maps of the SWA and hybrid pools.
 *
 *   kvc_swa_map_write  host-planned writes into an int32/int64 map: the full->SWA mapping
 *                      (pairs after an alloc, zeroed runs after a free) and the hybrid
 *                      req->mamba / ping-pong mappings. Payload inline or staged.
 *   kvc_swa_gather     out[i] = map[in[i]] (translate full->SWA locs, get_mamba_indices);
 *                      entries outside [0, map_len) give `oob`. Graph-capturable.
 *
 * Payload items (uint32 words): PAIRS (idx, val) -> map[idx] = (int32)val;
 * RUNS (idx, val, len) -> map[idx + j] = val + j; ZERO (idx, len) -> map[idx + j] = 0.
 * zero_count leading ZERO items may precede the mode's items (the SWA allocator's queued
 * zeroes merged into its next write: disjoint entries, so no order is needed).
 * One warp per item; indices outside [0, dst_len) are skipped.
 */
#include "common.cuh"

#ifndef KVC_INLINE_WORDS
#  define KVC_INLINE_WORDS 2
#endif

struct kvc_swa_map_write_params {
  kvc_p_swa_map_write h;
  uint32_t words[KVC_INLINE_WORDS];
};

extern "C" __global__ void __launch_bounds__(256)
    kvc_swa_map_write(const __grid_constant__ kvc_swa_map_write_params p) {
  const int64_t item = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const unsigned lane = threadIdx.x & 31u;
  if (item >= p.h.count) return;
  const uint32_t *w = p.h.staged ? kvc_ptr<const uint32_t *>(p.h.staged) : p.words;
  int64_t idx, val, len, step;
  /* The mode's items follow the zero_count leading zeroes (2 words each). */
  const int64_t k = item - p.h.zero_count;
  const uint32_t *v = w + 2 * (int64_t)p.h.zero_count;
  if (k < 0) { /* a queued zero: disjoint from the mode's items (the host checks) */
    idx = w[2 * item];
    val = 0;
    len = w[2 * item + 1];
    step = 0;
  } else if (p.h.mode == KVC_SWA_MAP_PAIRS) {
    idx = v[2 * k];
    val = (int64_t)(int32_t)v[2 * k + 1];
    len = 1;
    step = 0;
  } else if (p.h.mode == KVC_SWA_MAP_RUNS) {
    idx = v[3 * k];
    val = (int64_t)(int32_t)v[3 * k + 1];
    len = v[3 * k + 2];
    step = 1;
  } else {
    idx = v[2 * k];
    val = 0;
    len = v[2 * k + 1];
    step = 0;
  }
  for (int64_t j = lane; j < len; j += 32) {
    const int64_t d = idx + j;
    if (d < 0 || d >= p.h.dst_len) continue;
    const int64_t v = val + step * j;
    if (p.h.dst_i64) kvc_ptr<int64_t *>(p.h.dst)[d] = v;
    else kvc_ptr<int32_t *>(p.h.dst)[d] = (int32_t)v;
  }
}

extern "C" __global__ void __launch_bounds__(256) kvc_swa_gather(const __grid_constant__ kvc_p_swa_gather p) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.n) return;
  const int64_t x = kvc_load_index(p.in, i, p.in_i64);
  const int64_t v = kvc_map_lookup(p.map, p.map_i64, p.map_len, x, p.oob);
  if (p.out_i64) kvc_ptr<int64_t *>(p.out)[i] = v;
  else kvc_ptr<int32_t *>(p.out)[i] = (int32_t)v;
}
