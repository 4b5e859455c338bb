/*
 * canary.cu — debug canary rows of a KV pool (kvc_kv_pool_canary_fill / _check).
 *
 *   kvc_canary_fill    every byte of row slot[i] of every listed buffer = KVC_CANARY_BYTE
 *   kvc_canary_check   counts bytes of those rows that differ from the marker and records
 *                      the lowest violating unit (slot index i, then buffer)
 *
 * Units u = i * nbuf + b are walked grid-stride, one block per unit, threads over the
 * row's bytes (16-byte accesses when row_bytes % 16 == 0, else bytes).
 */
#include "common.cuh"

#ifndef KVC_INLINE_WORDS
#  define KVC_INLINE_WORDS 2
#endif

struct kvc_canary_params {
  kvc_p_canary h;
  uint32_t words[KVC_INLINE_WORDS];
};

#define KVC_CANARY_WORD (0x01010101u * (uint32_t)KVC_CANARY_BYTE)

extern "C" __global__ void __launch_bounds__(256) kvc_canary_fill(const __grid_constant__ kvc_canary_params p) {
  const uint32_t *words = p.h.staged ? kvc_ptr<const uint32_t *>(p.h.staged) : p.words;
  const int64_t units = p.h.n * (int64_t)p.h.nbuf;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t i = u / p.h.nbuf;
    const kvc_canary_buf &b = p.h.buf[u % p.h.nbuf];
    const int64_t slot = (int64_t)(int32_t)words[i];
    if (slot < 0 || slot >= b.rows) continue;
    unsigned char *row = kvc_ptr<unsigned char *>(b.base) + slot * b.row_bytes;
    if (b.row_bytes % 16 == 0) {
      const uint4 m = make_uint4(KVC_CANARY_WORD, KVC_CANARY_WORD, KVC_CANARY_WORD, KVC_CANARY_WORD);
      for (int64_t t = threadIdx.x; t < b.row_bytes / 16; t += blockDim.x) reinterpret_cast<uint4 *>(row)[t] = m;
    } else {
      for (int64_t t = threadIdx.x; t < b.row_bytes; t += blockDim.x) row[t] = (unsigned char)KVC_CANARY_BYTE;
    }
  }
}

KVC_DEVICE int kvc_canary_diff32(uint32_t w) {
  int c = 0;
#pragma unroll
  for (int k = 0; k < 4; k++) c += ((w >> (8 * k)) & 0xffu) != (uint32_t)KVC_CANARY_BYTE;
  return c;
}

extern "C" __global__ void __launch_bounds__(256) kvc_canary_check(const __grid_constant__ kvc_canary_params p) {
  const uint32_t *words = p.h.staged ? kvc_ptr<const uint32_t *>(p.h.staged) : p.words;
  unsigned long long *result = kvc_ptr<unsigned long long *>(p.h.result);
  const int64_t units = p.h.n * (int64_t)p.h.nbuf;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t i = u / p.h.nbuf;
    const kvc_canary_buf &b = p.h.buf[u % p.h.nbuf];
    const int64_t slot = (int64_t)(int32_t)words[i];
    if (slot < 0 || slot >= b.rows) continue;
    const unsigned char *row = kvc_ptr<const unsigned char *>(b.base) + slot * b.row_bytes;
    long long bad = 0;
    if (b.row_bytes % 16 == 0) {
      for (int64_t t = threadIdx.x; t < b.row_bytes / 16; t += blockDim.x) {
        const uint4 v = reinterpret_cast<const uint4 *>(row)[t];
        bad += kvc_canary_diff32(v.x) + kvc_canary_diff32(v.y) + kvc_canary_diff32(v.z) + kvc_canary_diff32(v.w);
      }
    } else {
      for (int64_t t = threadIdx.x; t < b.row_bytes; t += blockDim.x) bad += row[t] != (unsigned char)KVC_CANARY_BYTE;
    }
    if (bad) {
      atomicAdd(&result[0], (unsigned long long)bad);
      atomicMax(&result[1], ~0ull - (unsigned long long)u);
    }
  }
}
