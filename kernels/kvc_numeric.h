/*
 * kvc_numeric.h — element conversions shared, bit for bit, by the CUDA kernels and the C
 * reference kernels: the same source is compiled by NVRTC and by the C compiler, so the
 * host backend is an exact oracle for quantizing writes.
 *
 *   bf16 <-> f32 (round to nearest even), f16 <-> f32 (RNE, subnormals, inf/nan),
 *   fp8 e4m3fn / e5m2 <-> f32 (RNE, saturating to the finite range; NaN -> NaN code),
 *   e2m1 (FP4) codes with a power-of-two block scale (SGLang's 16-value blocks).
 *
 * Only integer bit manipulation and IEEE-exact float operations (+, *, / by default
 * rounding) are used, never library functions whose last-ulp behaviour differs.
 */
#ifndef KVC_NUMERIC_H
#define KVC_NUMERIC_H

#include "kvc_abi.h" /* KVC_HD */

KVC_HD uint32_t kvc_f2u(float f) {
  union {
    float f;
    uint32_t u;
  } c;
  c.f = f;
  return c.u;
}

KVC_HD float kvc_u2f(uint32_t u) {
  union {
    float f;
    uint32_t u;
  } c;
  c.u = u;
  return c.f;
}

/* --- bf16 -------------------------------------------------------------------------- */

KVC_HD float kvc_bf16_to_f32(uint16_t h) { return kvc_u2f((uint32_t)h << 16); }

KVC_HD uint16_t kvc_f32_to_bf16(float f) {
  uint32_t u = kvc_f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* --- f16 --------------------------------------------------------------------------- */

KVC_HD float kvc_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1fu) return kvc_u2f(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    /* subnormal: mant * 2^-24, exact in f32 */
    float v = (float)mant * kvc_u2f(0x33800000u); /* 2^-24 */
    return sign ? -v : v;
  }
  return kvc_u2f(sign | ((exp + 112u) << 23) | (mant << 13));
}

KVC_HD uint16_t kvc_f32_to_f16(float f) {
  uint32_t x = kvc_f2u(f);
  uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xffu, mant = x & 0x7fffffu;
  if (exp == 0xffu) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0u));
  int32_t e = (int32_t)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    uint32_t full = mant | 0x800000u, shift = (uint32_t)(14 - e);
    uint32_t m = full >> shift, rem = full & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (m & 1u))) m++;
    return (uint16_t)(sign | m);
  }
  uint32_t m = mant >> 13, rem = mant & 0x1fffu;
  uint32_t h = sign | ((uint32_t)e << 10) | m;
  if (rem > 0x1000u || (rem == 0x1000u && (m & 1u))) h++;
  return (uint16_t)h;
}

/* --- fp8 --------------------------------------------------------------------------- */

#define KVC_FP8_E4M3_MAX 448.0f
#define KVC_FP8_E5M2_MAX 57344.0f

/* Round to nearest even, saturating to +-max; NaN -> 0x7f. e4m3: e4m3fn (no inf). */
KVC_HD uint8_t kvc_f32_to_fp8(float f, int e4m3) {
  if (f != f) return 0x7fu;
  const float maxv = e4m3 ? KVC_FP8_E4M3_MAX : KVC_FP8_E5M2_MAX;
  if (f > maxv) f = maxv;
  if (f < -maxv) f = -maxv;
  uint32_t x = kvc_f2u(f);
  const uint32_t sign = (x >> 24) & 0x80u;
  x &= 0x7fffffffu;
  if (x == 0) return (uint8_t)sign;
  const int32_t mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int32_t exp = (int32_t)(x >> 23);
  const uint32_t mant = x & 0x7fffffu;
  const int32_t e = exp - 127 + bias;
  if (e <= 0) {
    /* subnormal code m: value m * 2^(1 - bias - mbits) */
    const int32_t shift = 151 - bias - mbits - exp;
    if (shift > 31) return (uint8_t)sign;
    const uint64_t full = (uint64_t)(mant | (exp ? 0x800000u : 0u));
    uint64_t m = full >> shift, rem = full & ((1ull << shift) - 1ull), half = 1ull << (shift - 1);
    if (rem > half || (rem == half && (m & 1ull))) m++;
    return (uint8_t)(sign | (uint32_t)m);
  }
  const int32_t drop = 23 - mbits;
  uint32_t m = mant >> drop, rem = mant & ((1u << drop) - 1u), half = 1u << (drop - 1);
  uint32_t code = ((uint32_t)e << mbits) | m;
  if (rem > half || (rem == half && (m & 1u))) code++;
  return (uint8_t)(sign | code);
}

KVC_HD float kvc_fp8_to_f32(uint8_t c, int e4m3) {
  const uint32_t sign = (uint32_t)(c & 0x80u) << 24;
  const int32_t mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const uint32_t e = (c & 0x7fu) >> mbits, m = c & ((1u << mbits) - 1u);
  if (e4m3 && e == 15u && m == 7u) return kvc_u2f(0x7fc00000u);
  if (!e4m3 && e == 31u) return kvc_u2f(sign | 0x7f800000u | (m ? 0x400000u : 0u));
  if (e == 0) {
    /* m * 2^(1 - bias - mbits): e4m3 2^-9, e5m2 2^-16 */
    float v = (float)m * kvc_u2f((uint32_t)(127 + 1 - bias - mbits) << 23);
    return sign ? -v : v;
  }
  return kvc_u2f(sign | ((e - (uint32_t)bias + 127u) << 23) | (m << (23 - mbits)));
}

/* --- FP4 e2m1 with a per-16-value power-of-two scale (SGLang's block format) ------- */

/* Exponent e with 2^e >= amax / 6 (amax floored at 1e-12): e = ceil(log2(amax / 6)),
 * computed exactly from the bits of amax / 6. Scale byte = e + 127. */
KVC_HD int32_t kvc_fp4_block_exponent(float amax) {
  if (!(amax >= 1e-12f)) amax = 1e-12f; /* also maps NaN to the floor */
  if (amax > 3.0e38f) amax = 3.0e38f;
  const uint32_t q = kvc_f2u(amax / 6.0f);
  const int32_t E = (int32_t)((q >> 23) & 0xffu) - 127;
  return E + ((q & 0x7fffffu) ? 1 : 0);
}

/* 2^e as a float, e in [-126, 127]. */
KVC_HD float kvc_pow2f(int32_t e) { return kvc_u2f((uint32_t)(e + 127) << 23); }

/* Nibble of value v already divided by the block scale: sign bit 8 when v < 0, plus the
 * number of thresholds {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5} that |v| reaches. */
KVC_HD uint8_t kvc_fp4_encode(float v) {
  const float a = v < 0 ? -v : v;
  uint8_t code =
      (uint8_t)((a >= 0.25f) + (a >= 0.75f) + (a >= 1.25f) + (a >= 1.75f) + (a >= 2.5f) + (a >= 3.5f) + (a >= 5.0f));
  return (uint8_t)(code | (v < 0 ? 8u : 0u));
}

KVC_HD float kvc_fp4_decode(uint8_t code) {
  const uint32_t m = code & 7u;
  /* magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6} */
  const float mag = m < 4u ? 0.5f * (float)m : (float)(m < 6u ? m - 2u : 2u * m - 8u);
  return (code & 8u) ? -mag : mag;
}

/* --- Generic element load/store by dtype code (kvc_dtype values) ------------------- */

#define KVC_DT_F32 1
#define KVC_DT_F16 2
#define KVC_DT_BF16 3
#define KVC_DT_FP8_E4M3 4
#define KVC_DT_FP8_E5M2 5

KVC_HD float kvc_load_as_f32(const void *base, int64_t i, int dtype) {
  switch (dtype) {
  case KVC_DT_F32: return ((const float *)base)[i];
  case KVC_DT_F16: return kvc_f16_to_f32(((const uint16_t *)base)[i]);
  case KVC_DT_BF16: return kvc_bf16_to_f32(((const uint16_t *)base)[i]);
  case KVC_DT_FP8_E4M3: return kvc_fp8_to_f32(((const uint8_t *)base)[i], 1);
  default: return kvc_fp8_to_f32(((const uint8_t *)base)[i], 0);
  }
}

KVC_HD void kvc_store_from_f32(void *base, int64_t i, int dtype, float v) {
  switch (dtype) {
  case KVC_DT_F32: ((float *)base)[i] = v; break;
  case KVC_DT_F16: ((uint16_t *)base)[i] = kvc_f32_to_f16(v); break;
  case KVC_DT_BF16: ((uint16_t *)base)[i] = kvc_f32_to_bf16(v); break;
  case KVC_DT_FP8_E4M3: ((uint8_t *)base)[i] = kvc_f32_to_fp8(v, 1); break;
  default: ((uint8_t *)base)[i] = kvc_f32_to_fp8(v, 0); break;
  }
}

#endif /* KVC_NUMERIC_H */
