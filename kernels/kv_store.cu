/*
 * kv_store.cu — KV row scatter (set_kv / store_cache, quantizing writes) and row gather
 * (gather_kv, FP4/fp8 dequantization of gathered rows only), one kernel for both.
 *
 * Work = n items x (KCH + VCH) chunks; chunk r < KCH belongs to the K row, the rest to
 * the V row, so K and V rows of different widths share one launch. Thread t of block b
 * handles chunks b*256*U + j*256 + t (j < U): consecutive threads touch consecutive
 * chunks of the same row (coalesced), and each thread issues its U loads before any
 * store. A chunk is KVC_G elements; its bytes move with KVC_AD (dense side) / KVC_AP
 * (pool side) byte accesses, the widest the host proved aligned.
 *
 * Specialisation (all compile-time):
 *   KVC_GATHER   0: dense -> pool (store), 1: pool -> dense (gather)
 *   KVC_SRC_DT   source element type: 0 raw bytes, 1 f32, 2 f16, 3 bf16, 4 e4m3, 5 e5m2,
 *                10 FP4 (packed e2m1 + scale bytes; pool side only)
 *   KVC_DST_DT   destination element type (same codes); equal to SRC = plain copy
 *   KVC_G        elements per chunk (FP4: 16, one scale block)
 *   KVC_KCH/VCH  chunks per K / V row (VCH = 0: no V, e.g. MLA latent rows)
 *   KVC_AD/AP    access bytes on the dense / pool side
 * A store with conversion divides by the scale (device float when given, else by value);
 * kvc_numeric.h saturates to the finite fp8 range. Slots outside [0, rows) are skipped
 * on a store and give zero rows on a gather.
 */
#include "common.cuh"
#include "kvc_numeric.h"

#ifndef KVC_GATHER
#  define KVC_GATHER 0
#endif
#define KVC_DT_RAW 0
#define KVC_DT_FP4 10

constexpr int kSrc = KVC_SRC_DT, kDst = KVC_DST_DT, kG = KVC_G, kKCH = KVC_KCH, kVCH = KVC_VCH;
constexpr int kCH = kKCH + kVCH;
constexpr bool kGather = KVC_GATHER != 0;

KVC_DEVICE constexpr int chunk_bytes(int dt, int g) {
  return dt == KVC_DT_FP4 ? g / 2 : dt == KVC_DT_F32 ? 4 * g : (dt == KVC_DT_F16 || dt == KVC_DT_BF16) ? 2 * g : g;
}
constexpr int kSB = chunk_bytes(kSrc, kG), kDB = chunk_bytes(kDst, kG);
constexpr int kU = KVC_ROWS_UNROLL(kSB, kDB);
/* access widths of the source and destination sides */
constexpr int kSA = kGather ? KVC_AP : KVC_AD, kDA = kGather ? KVC_AD : KVC_AP;
static_assert(kSB % kSA == 0 && kDB % kDA == 0, "access width must divide the chunk");
static_assert(kSrc != KVC_DT_FP4 || kG == 16, "FP4 chunks are 16-value blocks");
static_assert(kDst != KVC_DT_FP4 || kG == 16, "FP4 chunks are 16-value blocks");

template <int A> struct acc_t;
template <> struct acc_t<16> { typedef uint4 T; };
template <> struct acc_t<8> { typedef uint2 T; };
template <> struct acc_t<4> { typedef uint32_t T; };
template <> struct acc_t<2> { typedef uint16_t T; };
template <> struct acc_t<1> { typedef uint8_t T; };

template <int NB> struct alignas(16) bytes_t { uint8_t b[NB]; };

template <int NB, int A> KVC_DEVICE void load_chunk(bytes_t<NB> &r, const uint8_t *p) {
  typedef typename acc_t<A>::T T;
#pragma unroll
  for (int k = 0; k < NB / A; k++) reinterpret_cast<T *>(r.b)[k] = reinterpret_cast<const T *>(p)[k];
}

template <int NB, int A> KVC_DEVICE void store_chunk(uint8_t *p, const bytes_t<NB> &r) {
  typedef typename acc_t<A>::T T;
#pragma unroll
  for (int k = 0; k < NB / A; k++) reinterpret_cast<T *>(p)[k] = reinterpret_cast<const T *>(r.b)[k];
}

/* Converts one chunk. `in_scale` is the FP4 scale byte of a source block. */
KVC_DEVICE void convert_chunk(const bytes_t<kSB> &in, uint8_t in_scale, float div, bytes_t<kDB> &out,
                              uint8_t *out_scale) {
  if constexpr (kSrc == kDst) {
#pragma unroll
    for (int k = 0; k < kSB; k++) out.b[k] = in.b[k];
  } else {
    float f[kG];
    if constexpr (kSrc == KVC_DT_FP4) {
      const float s = kvc_pow2f((int32_t)in_scale - 127);
#pragma unroll
      for (int e = 0; e < kG; e++) f[e] = kvc_fp4_decode((uint8_t)((in.b[e / 2] >> (4 * (e & 1))) & 0xfu)) * s;
    } else {
#pragma unroll
      for (int e = 0; e < kG; e++) f[e] = kvc_load_as_f32(in.b, e, kSrc);
    }
    if constexpr (!kGather) {
#pragma unroll
      for (int e = 0; e < kG; e++) f[e] = __fdiv_rn(f[e], div);
    }
    if constexpr (kDst == KVC_DT_FP4) {
      float amax = 0.0f;
#pragma unroll
      for (int e = 0; e < kG; e++) {
        const float a = f[e] < 0.0f ? -f[e] : f[e];
        amax = a > amax ? a : amax;
      }
      const int32_t ex = kvc_fp4_block_exponent(amax);
      const float inv = kvc_pow2f(-ex);
#pragma unroll
      for (int j = 0; j < kG / 2; j++)
        out.b[j] = (uint8_t)(kvc_fp4_encode(f[2 * j] * inv) | (kvc_fp4_encode(f[2 * j + 1] * inv) << 4));
      *out_scale = (uint8_t)(ex + 127);
    } else {
#pragma unroll
      for (int e = 0; e < kG; e++) kvc_store_from_f32(out.b, e, kDst, f[e]);
    }
  }
}

extern "C" __global__ void __launch_bounds__(KVC_KV_ROWS_BLOCK) kvc_kv_rows(const __grid_constant__ kvc_p_kv_rows p) {
  float kdiv = 1.0f, vdiv = 1.0f;
  if constexpr (!kGather && kSrc != kDst) {
    kdiv = p.k_scale_ptr ? *kvc_ptr<const float *>(p.k_scale_ptr) : p.k_scale;
    vdiv = p.v_scale_ptr ? *kvc_ptr<const float *>(p.v_scale_ptr) : p.v_scale;
  }
  const int64_t total = p.n * kCH;
  const int64_t first = (int64_t)blockIdx.x * (KVC_KV_ROWS_BLOCK * kU) + threadIdx.x;
  bytes_t<kSB> in[kU];
  uint8_t in_scale[kU];
  int64_t item[kU], slot[kU];
  int32_t chunk[kU];
#pragma unroll
  for (int j = 0; j < kU; j++) {
    const int64_t c = first + (int64_t)j * KVC_KV_ROWS_BLOCK;
    item[j] = c / kCH;
    chunk[j] = (int32_t)(c - item[j] * kCH);
    slot[j] = -2; /* -2: no work; -1: invalid slot */
    in_scale[j] = 0;
    if (c >= total) continue;
    int64_t s = kvc_load_index(p.loc, item[j], p.loc_i64);
    slot[j] = (s >= 0 && s < p.rows) ? s : -1;
    const bool is_v = chunk[j] >= kKCH;
    const int32_t r = is_v ? chunk[j] - kKCH : chunk[j];
    if constexpr (kGather) {
      if (slot[j] < 0) continue;
      const uint8_t *src =
          kvc_ptr<const uint8_t *>(is_v ? p.v_pool : p.k_pool) + slot[j] * (is_v ? p.v_pool_stride : p.k_pool_stride);
      load_chunk<kSB, kSA>(in[j], src + (int64_t)r * kSB);
      if constexpr (kSrc == KVC_DT_FP4)
        in_scale[j] = kvc_ptr<const uint8_t *>(
            is_v ? p.v_pool_scale : p.k_pool_scale)[slot[j] * (is_v ? p.v_scale_stride : p.k_scale_stride) + r];
    } else {
      if (slot[j] < 0) continue;
      const uint8_t *src = kvc_ptr<const uint8_t *>(is_v ? p.v_dense : p.k_dense) +
                           item[j] * (is_v ? p.v_dense_stride : p.k_dense_stride);
      load_chunk<kSB, kSA>(in[j], src + (int64_t)r * kSB);
    }
  }
#pragma unroll
  for (int j = 0; j < kU; j++) {
    if (slot[j] == -2) continue;
    const bool is_v = chunk[j] >= kKCH;
    const int32_t r = is_v ? chunk[j] - kKCH : chunk[j];
    bytes_t<kDB> out;
    if constexpr (kGather) {
      uint8_t *dst =
          kvc_ptr<uint8_t *>(is_v ? p.v_dense : p.k_dense) + item[j] * (is_v ? p.v_dense_stride : p.k_dense_stride);
      if (slot[j] < 0) {
#pragma unroll
        for (int k = 0; k < kDB; k++) out.b[k] = 0;
      } else {
        convert_chunk(in[j], in_scale[j], 1.0f, out, nullptr);
      }
      store_chunk<kDB, kDA>(dst + (int64_t)r * kDB, out);
    } else {
      if (slot[j] < 0) continue;
      uint8_t *dst =
          kvc_ptr<uint8_t *>(is_v ? p.v_pool : p.k_pool) + slot[j] * (is_v ? p.v_pool_stride : p.k_pool_stride);
      uint8_t sb = 0;
      convert_chunk(in[j], 0, is_v ? vdiv : kdiv, out, &sb);
      store_chunk<kDB, kDA>(dst + (int64_t)r * kDB, out);
      if constexpr (kDst == KVC_DT_FP4)
        kvc_ptr<uint8_t *>(is_v ? p.v_pool_scale
                                : p.k_pool_scale)[slot[j] * (is_v ? p.v_scale_stride : p.k_scale_stride) + r] = sb;
    }
  }
}
