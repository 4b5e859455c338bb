/*
 * mla.cu — MLA latent-row writer and reader (SGLang set_mla_kv_buffer / the NSA fp8
 * quantizer / the FP4 MLA writer / get_mla_kv_buffer), one launch per call.
 *
 *   kvc_mla_set   (KVC_DIR == 0) rows loc[i] <- [nope[i] | rope[i]]
 *   kvc_mla_get   (KVC_DIR == 1) [nope_out[i] | rope_out[i]] <- rows loc[i]
 *
 * Specialisation (-D): KVC_MODE (KVC_MLA_MODE_*), KVC_SRC / KVC_DST (kvc_dtype codes;
 * set: source -> row dtype, get: row dtype -> output), KVC_R / KVC_Q (part widths),
 * KVC_G (elements per vector access: the host picks the largest of 8/4/2/1 that divides
 * R, Q and every stride and aligns every base address).
 *
 * Work decomposition:
 *   ROWS  one thread per G-element group of a row, flattened over (row, group); R+Q is a
 *         compile-time constant so the divide is a multiply. 16-byte accesses for bf16
 *         G = 8. The group never straddles nope/rope (G divides R).
 *   FP4   one thread per 16-value block of the concatenated row: loads 16 values, writes
 *         8 packed bytes (one 8-byte store) and one scale byte.
 *   NSA   one warp per row: lane l owns nope values [16l, 16l+16) (tile l/8), reduces
 *         amax over its 8-lane tile with shuffles, stores 16 codes (one 16-byte store;
 *         sm_89+: hardware e4m3x2 conversion, two codes per instruction, kvc_nsa_code2);
 *         lanes 0..7 move the 64 rope values (16 bytes each). Rows are 656 = 41 x 16
 *         bytes, so every access is 16-byte aligned.
 * Slots outside [0, num_rows) are skipped by set; get writes zeros for them.
 */
#include "common.cuh"
#include "kvc_mla.h"

#ifndef KVC_DIR
#  define KVC_DIR 0
#endif
#ifndef KVC_MODE
#  define KVC_MODE KVC_MLA_MODE_ROWS
#endif
#ifndef KVC_SRC
#  define KVC_SRC KVC_DT_BF16
#endif
#ifndef KVC_DST
#  define KVC_DST KVC_DT_BF16
#endif
#ifndef KVC_R
#  define KVC_R 512
#endif
#ifndef KVC_Q
#  define KVC_Q 64
#endif
#ifndef KVC_G
#  define KVC_G 8
#endif

static_assert(KVC_G == 1 || KVC_G == 2 || KVC_G == 4 || KVC_G == 8, "KVC_G");
static_assert(KVC_R % KVC_G == 0 && KVC_Q % KVC_G == 0, "G must divide R and Q");

/* --- Vector access of BYTES bytes (1..32) held as 32-bit words ---------------------- */

template <int BYTES> struct kvc_words { uint32_t w[BYTES >= 4 ? BYTES / 4 : 1]; };

template <int BYTES> KVC_DEVICE void kvc_ld(kvc_words<BYTES> &c, const unsigned char *p) {
  if constexpr (BYTES % 16 == 0) {
#pragma unroll
    for (int k = 0; k < BYTES / 16; k++) {
      const uint4 v = reinterpret_cast<const uint4 *>(p)[k];
      c.w[4 * k] = v.x, c.w[4 * k + 1] = v.y, c.w[4 * k + 2] = v.z, c.w[4 * k + 3] = v.w;
    }
  } else if constexpr (BYTES == 8) {
    const uint2 v = *reinterpret_cast<const uint2 *>(p);
    c.w[0] = v.x, c.w[1] = v.y;
  } else if constexpr (BYTES == 4) {
    c.w[0] = *reinterpret_cast<const uint32_t *>(p);
  } else if constexpr (BYTES == 2) {
    c.w[0] = *reinterpret_cast<const uint16_t *>(p);
  } else {
    c.w[0] = *p;
  }
}

template <int BYTES> KVC_DEVICE void kvc_st(unsigned char *p, const kvc_words<BYTES> &c) {
  if constexpr (BYTES % 16 == 0) {
#pragma unroll
    for (int k = 0; k < BYTES / 16; k++)
      reinterpret_cast<uint4 *>(p)[k] = make_uint4(c.w[4 * k], c.w[4 * k + 1], c.w[4 * k + 2], c.w[4 * k + 3]);
  } else if constexpr (BYTES == 8) {
    *reinterpret_cast<uint2 *>(p) = make_uint2(c.w[0], c.w[1]);
  } else if constexpr (BYTES == 4) {
    *reinterpret_cast<uint32_t *>(p) = c.w[0];
  } else if constexpr (BYTES == 2) {
    *reinterpret_cast<uint16_t *>(p) = (uint16_t)c.w[0];
  } else {
    *p = (unsigned char)c.w[0];
  }
}

/* Element k (ES bytes wide) of a word vector, zero-extended. */
template <int ES, int BYTES> KVC_DEVICE uint32_t kvc_get(const kvc_words<BYTES> &c, int k) {
  if constexpr (ES == 4) return c.w[k];
  else if constexpr (ES == 2) return (c.w[k >> 1] >> ((k & 1) * 16)) & 0xffffu;
  else return (c.w[k >> 2] >> ((k & 3) * 8)) & 0xffu;
}

/* ORs element k into a zero-initialised word vector. */
template <int ES, int BYTES> KVC_DEVICE void kvc_put(kvc_words<BYTES> &c, int k, uint32_t v) {
  if constexpr (ES == 4) c.w[k] = v;
  else if constexpr (ES == 2) c.w[k >> 1] |= (v & 0xffffu) << ((k & 1) * 16);
  else c.w[k >> 2] |= (v & 0xffu) << ((k & 3) * 8);
}

template <int S, int D> KVC_DEVICE uint32_t kvc_cvt(uint32_t raw) {
  if constexpr (S == D) return raw;
  else return kvc_f32_to_raw(kvc_raw_to_f32(raw, S), D);
}

/* Loads COUNT (a multiple of G) elements of dtype DT as f32, G per access. */
template <int DT, int COUNT> KVC_DEVICE void kvc_load_f32(float *v, const unsigned char *p) {
  constexpr int ES = KVC_DT_BYTES(DT);
#pragma unroll
  for (int c = 0; c < COUNT / KVC_G; c++) {
    kvc_words<KVC_G * ES> a;
    kvc_ld(a, p + c * KVC_G * ES);
#pragma unroll
    for (int k = 0; k < KVC_G; k++) v[c * KVC_G + k] = kvc_raw_to_f32(kvc_get<ES>(a, k), DT);
  }
}

/* Stores COUNT f32 values as dtype DT, G per access. */
template <int DT, int COUNT> KVC_DEVICE void kvc_store_f32(unsigned char *p, const float *v) {
  constexpr int ES = KVC_DT_BYTES(DT);
#pragma unroll
  for (int c = 0; c < COUNT / KVC_G; c++) {
    kvc_words<KVC_G *ES> a = {};
#pragma unroll
    for (int k = 0; k < KVC_G; k++) kvc_put<ES>(a, k, kvc_f32_to_raw(v[c * KVC_G + k], DT));
    kvc_st(p + c * KVC_G * ES, a);
  }
}

/* Stores COUNT zero elements of DT (get: out-of-range slots). */
template <int DT, int COUNT> KVC_DEVICE void kvc_store_zero(unsigned char *p) {
  constexpr int ES = KVC_DT_BYTES(DT);
#pragma unroll
  for (int c = 0; c < COUNT / KVC_G; c++) {
    kvc_words<KVC_G *ES> a = {};
    kvc_st(p + c * KVC_G * ES, a);
  }
}

template <typename T> KVC_DEVICE const unsigned char *kvc_cb(T a) { return reinterpret_cast<const unsigned char *>(a); }
template <typename T> KVC_DEVICE unsigned char *kvc_b(T a) { return reinterpret_cast<unsigned char *>(a); }

#define KVC_T (KVC_R + KVC_Q)

#if KVC_MODE == KVC_MLA_MODE_ROWS
/* --- ROWS ---------------------------------------------------------------------------- */

#  if KVC_DIR == 0
extern "C" __global__ void __launch_bounds__(256) kvc_mla_set(const __grid_constant__ kvc_p_mla p) {
  constexpr int SS = KVC_DT_BYTES(KVC_SRC), DS = KVC_DT_BYTES(KVC_DST);
  constexpr int64_t GPR = KVC_T / KVC_G;
  const int64_t total = p.n * GPR, step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int64_t i = idx / GPR;
    const int e = (int)(idx - i * GPR) * KVC_G;
    const int64_t loc = kvc_load_index(p.loc, i, p.loc_i64);
    if (loc < 0 || loc >= p.num_rows) continue;
    const unsigned char *src = e < KVC_R ? kvc_cb(p.nope) + (i * p.nope_stride + e) * SS
                                         : kvc_cb(p.rope) + (i * p.rope_stride + (e - KVC_R)) * SS;
    kvc_words<KVC_G * SS> a;
    kvc_ld(a, src);
    kvc_words<KVC_G *DS> b = {};
#    pragma unroll
    for (int k = 0; k < KVC_G; k++) kvc_put<DS>(b, k, kvc_cvt<KVC_SRC, KVC_DST>(kvc_get<SS>(a, k)));
    kvc_st(kvc_b(p.kv) + (loc * p.kv_stride + e) * DS, b);
  }
}
#  else
extern "C" __global__ void __launch_bounds__(256) kvc_mla_get(const __grid_constant__ kvc_p_mla p) {
  constexpr int SS = KVC_DT_BYTES(KVC_SRC), DS = KVC_DT_BYTES(KVC_DST);
  constexpr int64_t GPR = KVC_T / KVC_G;
  const int64_t total = p.n * GPR, step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int64_t i = idx / GPR;
    const int e = (int)(idx - i * GPR) * KVC_G;
    unsigned char *dst = e < KVC_R ? (p.nope ? kvc_b(p.nope) + (i * p.nope_stride + e) * DS : nullptr)
                                   : (p.rope ? kvc_b(p.rope) + (i * p.rope_stride + (e - KVC_R)) * DS : nullptr);
    if (!dst) continue;
    const int64_t loc = kvc_load_index(p.loc, i, p.loc_i64);
    kvc_words<KVC_G *DS> b = {};
    if (loc >= 0 && loc < p.num_rows) {
      kvc_words<KVC_G * SS> a;
      kvc_ld(a, kvc_cb(p.kv) + (loc * p.kv_stride + e) * SS);
#    pragma unroll
      for (int k = 0; k < KVC_G; k++) kvc_put<DS>(b, k, kvc_cvt<KVC_SRC, KVC_DST>(kvc_get<SS>(a, k)));
    }
    kvc_st(dst, b);
  }
}
#  endif

#elif KVC_MODE == KVC_MLA_MODE_FP4
/* --- FP4 ----------------------------------------------------------------------------- */
static_assert(KVC_T % 16 == 0, "FP4 rows need (R + Q) % 16 == 0");

/* Source/destination address of element e (a multiple of G) of row i. */
template <int ES> KVC_DEVICE uint64_t kvc_part_addr(const kvc_p_mla &p, int64_t i, int e) {
  return e < KVC_R ? (p.nope ? p.nope + (uint64_t)((i * p.nope_stride + e) * ES) : 0)
                   : (p.rope ? p.rope + (uint64_t)((i * p.rope_stride + (e - KVC_R)) * ES) : 0);
}

#  if KVC_DIR == 0
extern "C" __global__ void __launch_bounds__(256) kvc_mla_set(const __grid_constant__ kvc_p_mla p) {
  constexpr int SS = KVC_DT_BYTES(KVC_SRC);
  constexpr int64_t NB = KVC_T / 16;
  const int64_t total = p.n * NB, step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int64_t i = idx / NB;
    const int b = (int)(idx - i * NB);
    const int64_t loc = kvc_load_index(p.loc, i, p.loc_i64);
    if (loc < 0 || loc >= p.num_rows) continue;
    float v[16];
#    pragma unroll
    for (int c = 0; c < 16 / KVC_G; c++)
      kvc_load_f32<KVC_SRC, KVC_G>(v + c * KVC_G, kvc_cb(kvc_part_addr<SS>(p, i, 16 * b + c * KVC_G)));
    kvc_words<8> packed;
    uint8_t bytes[8];
    const uint8_t sb = kvc_fp4_quant16(v, bytes);
    packed.w[0] = bytes[0] | (uint32_t)bytes[1] << 8 | (uint32_t)bytes[2] << 16 | (uint32_t)bytes[3] << 24;
    packed.w[1] = bytes[4] | (uint32_t)bytes[5] << 8 | (uint32_t)bytes[6] << 16 | (uint32_t)bytes[7] << 24;
    kvc_st(kvc_b(p.kv) + loc * p.kv_stride + 8 * b, packed);
    kvc_b(p.kv_scale)[loc * p.scale_stride + b] = sb;
  }
}
#  else
extern "C" __global__ void __launch_bounds__(256) kvc_mla_get(const __grid_constant__ kvc_p_mla p) {
  constexpr int DS = KVC_DT_BYTES(KVC_DST);
  constexpr int64_t NB = KVC_T / 16;
  const int64_t total = p.n * NB, step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int64_t i = idx / NB;
    const int b = (int)(idx - i * NB);
    const int64_t loc = kvc_load_index(p.loc, i, p.loc_i64);
    float v[16];
    if (loc >= 0 && loc < p.num_rows) {
      kvc_words<8> packed;
      kvc_ld(packed, kvc_cb(p.kv) + loc * p.kv_stride + 8 * b);
      const float s = kvc_fp4_scale_value(kvc_cb(p.kv_scale)[loc * p.scale_stride + b]);
#    pragma unroll
      for (int k = 0; k < 16; k++) v[k] = kvc_fp4_decode((uint8_t)((packed.w[k >> 3] >> ((k & 7) * 4)) & 0xfu)) * s;
    } else {
#    pragma unroll
      for (int k = 0; k < 16; k++) v[k] = 0.0f;
    }
#    pragma unroll
    for (int c = 0; c < 16 / KVC_G; c++) {
      const uint64_t a = kvc_part_addr<DS>(p, i, 16 * b + c * KVC_G);
      if (a) kvc_store_f32<KVC_DST, KVC_G>(kvc_b(a), v + c * KVC_G);
    }
  }
}
#  endif

#elif KVC_MODE == KVC_MLA_MODE_NSA
/* --- NSA 656-byte fp8 rows ------------------------------------------------------------ */
static_assert(KVC_R == KVC_NSA_NOPE && KVC_Q == KVC_NSA_ROPE, "NSA fp8 rows need R = 512, Q = 64");

#  if KVC_DIR == 0
extern "C" __global__ void __launch_bounds__(256) kvc_mla_set(const __grid_constant__ kvc_p_mla p) {
  constexpr int SS = KVC_DT_BYTES(KVC_SRC);
  const unsigned lane = threadIdx.x & 31u;
  const int64_t i = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (i >= p.n) return; /* warp-uniform */
  /* All loads first (the source rows do not depend on loc), so the index and data
   * latencies overlap instead of adding up. */
  constexpr int RS = KVC_DT_BYTES(KVC_SRC);
  kvc_words<KVC_G * RS> ra[8 / KVC_G]; /* rope values of lanes 0..7 */
  if (lane < 8) {
    const unsigned char *src = kvc_cb(p.rope) + (i * p.rope_stride + 8 * lane) * RS;
#    pragma unroll
    for (int c = 0; c < 8 / KVC_G; c++) kvc_ld(ra[c], src + c * KVC_G * RS);
  }
  float y[16];
  kvc_load_f32<KVC_SRC, 16>(y, kvc_cb(p.nope) + (i * p.nope_stride + 16 * lane) * SS);
  const int64_t loc = kvc_load_index(p.loc, i, p.loc_i64);
  if (loc < 0 || loc >= p.num_rows) return;
  unsigned char *row = kvc_b(p.kv) + loc * p.kv_stride;
  float amax = 0.0f;
#    pragma unroll
  for (int k = 0; k < 16; k++) amax = kvc_amax_step(amax, y[k]);
#    pragma unroll
  for (int d = 1; d < 8; d <<= 1) amax = kvc_amax_step(amax, __shfl_xor_sync(0xffffffffu, amax, d));
  const float s = kvc_nsa_scale(amax), inv = kvc_nsa_inv(s);
  kvc_words<16> q;
#    pragma unroll
  for (int k = 0; k < 4; k++)
    q.w[k] = kvc_nsa_code2(y[4 * k], y[4 * k + 1], inv) | kvc_nsa_code2(y[4 * k + 2], y[4 * k + 3], inv) << 16;
  kvc_st(row + 16 * lane, q);
  if ((lane & 7u) == 0) reinterpret_cast<float *>(row + KVC_NSA_SCALE_AT)[lane >> 3] = s;

  if (lane < 8) {
    kvc_words<16> r = {};
#    pragma unroll
    for (int c = 0; c < 8 / KVC_G; c++) {
#    pragma unroll
      for (int k = 0; k < KVC_G; k++)
        kvc_put<2>(r, c * KVC_G + k, kvc_cvt<KVC_SRC, KVC_DT_BF16>(kvc_get<RS>(ra[c], k)));
    }
    kvc_st(row + KVC_NSA_ROPE_AT + 16 * lane, r);
  }
}
#  else
extern "C" __global__ void __launch_bounds__(256) kvc_mla_get(const __grid_constant__ kvc_p_mla p) {
  constexpr int DS = KVC_DT_BYTES(KVC_DST);
  const unsigned lane = threadIdx.x & 31u;
  const int64_t i = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (i >= p.n) return;
  const int64_t loc = kvc_load_index(p.loc, i, p.loc_i64);
  const bool ok = loc >= 0 && loc < p.num_rows;
  const unsigned char *row = kvc_cb(p.kv) + (ok ? loc : 0) * p.kv_stride;
  if (p.nope) {
    float v[16];
    if (ok) {
      kvc_words<16> q;
      kvc_ld(q, row + 16 * lane);
      const float s = reinterpret_cast<const float *>(row + KVC_NSA_SCALE_AT)[lane >> 3];
#    pragma unroll
      for (int k = 0; k < 16; k++) v[k] = kvc_nsa_decode((uint8_t)kvc_get<1>(q, k), s);
    } else {
#    pragma unroll
      for (int k = 0; k < 16; k++) v[k] = 0.0f;
    }
    kvc_store_f32<KVC_DST, 16>(kvc_b(p.nope) + (i * p.nope_stride + 16 * lane) * DS, v);
  }
  if (p.rope && lane < 8) {
    float v[8];
    if (ok) {
      kvc_words<16> r;
      kvc_ld(r, row + KVC_NSA_ROPE_AT + 16 * lane);
#    pragma unroll
      for (int k = 0; k < 8; k++) v[k] = kvc_bf16_to_f32((uint16_t)kvc_get<2>(r, k));
    } else {
#    pragma unroll
      for (int k = 0; k < 8; k++) v[k] = 0.0f;
    }
    kvc_store_f32<KVC_DST, 8>(kvc_b(p.rope) + (i * p.rope_stride + 8 * lane) * DS, v);
  }
}
#  endif

#else
#  error "unknown KVC_MODE"
#endif
