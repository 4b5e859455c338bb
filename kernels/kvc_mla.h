/*
 * kvc_mla.h — the per-element and per-block arithmetic of the MLA / NSA row kernels,
 * shared bit for bit by kernels/mla.cu (NVRTC) and src/device/host_kernels/mla.c (C).
 *
 * Only exact operations are used (bit manipulation, one IEEE multiply or divide per
 * value, never a fused multiply-add), so the C twin reproduces the CUDA bytes exactly.
 *
 * NSA fp8 tile quantizer (SGLang quantize_k_cache, spec 10.5), 128 values per tile:
 *   amax = max |y|;  s = amax / 448;  inv = 1 / s;  q = fp8_e4m3(y * inv) (saturating RNE)
 * Defined where SGLang is not: a value y == 0 encodes as y itself (code 0x00 / 0x80), so
 * an all-zero tile stores scale 0 and zero codes (SGLang: 0 * inf = NaN, then an
 * unspecified clamp), and a tile whose scale underflows (1/s = inf) still encodes its
 * zeros as zeros. Dequantization is fp8_to_f32(q) * s, so the zero tile decodes to zeros.
 * NaN inputs do not raise amax (comparisons are false) and encode as the NaN code 0x7f.
 *
 * FP4 block (spec 10.4.5), 16 consecutive values of the concatenated [nope | rope] row:
 *   e = ceil(log2(max(amax, 1e-12) / 6)); scale byte = e + 127; code = e2m1(x * 2^-e);
 *   byte j = code[2j] | code[2j+1] << 4.  Decode: e2m1(code) * 2^(byte - 127)
 *   (byte 0 decodes as scale 0, so a never-written, zero-filled row reads as zeros).
 */
#ifndef KVC_MLA_H
#define KVC_MLA_H

#include "kvc_numeric.h"

#define KVC_NSA_TILE 128
#define KVC_NSA_NOPE 512
#define KVC_NSA_ROPE 64
#define KVC_NSA_ROW_BYTES 656
#define KVC_NSA_SCALE_AT 512 /* byte offset of the 4 fp32 scales */
#define KVC_NSA_ROPE_AT 528  /* byte offset of the 64 bf16 rope values */
#define KVC_NSA_INDEX_DIM 128

/* Element bytes of a kvc_dtype code (1..5). */
#define KVC_DT_BYTES(dt) ((dt) == KVC_DT_F32 ? 4 : ((dt) == KVC_DT_F16 || (dt) == KVC_DT_BF16) ? 2 : 1)

/* Raw element bits (zero-extended) of dtype dt -> f32. */
KVC_HD float kvc_raw_to_f32(uint32_t raw, int dt) {
  switch (dt) {
  case KVC_DT_F32: return kvc_u2f(raw);
  case KVC_DT_F16: return kvc_f16_to_f32((uint16_t)raw);
  case KVC_DT_BF16: return kvc_bf16_to_f32((uint16_t)raw);
  case KVC_DT_FP8_E4M3: return kvc_fp8_to_f32((uint8_t)raw, 1);
  default: return kvc_fp8_to_f32((uint8_t)raw, 0);
  }
}

/* f32 -> raw element bits of dtype dt (RNE; fp8 saturating). */
KVC_HD uint32_t kvc_f32_to_raw(float v, int dt) {
  switch (dt) {
  case KVC_DT_F32: return kvc_f2u(v);
  case KVC_DT_F16: return kvc_f32_to_f16(v);
  case KVC_DT_BF16: return kvc_f32_to_bf16(v);
  case KVC_DT_FP8_E4M3: return kvc_f32_to_fp8(v, 1);
  default: return kvc_f32_to_fp8(v, 0);
  }
}

/* Element conversion between dtypes; identical dtypes copy the bits (NaN payloads kept). */
KVC_HD uint32_t kvc_convert_raw(uint32_t raw, int from, int to) {
  return from == to ? raw : kvc_f32_to_raw(kvc_raw_to_f32(raw, from), to);
}

KVC_HD float kvc_absf_exact(float v) { return kvc_u2f(kvc_f2u(v) & 0x7fffffffu); }

/* One step of a max |y| reduction; NaN never wins. Order-independent. */
KVC_HD float kvc_amax_step(float m, float y) {
  const float a = kvc_absf_exact(y);
  return a > m ? a : m;
}

/* NSA: the tile scale from its amax, and one code. */
KVC_HD float kvc_nsa_scale(float amax) { return amax / KVC_FP8_E4M3_MAX; }
KVC_HD float kvc_nsa_inv(float s) { return 1.0f / s; }
KVC_HD uint8_t kvc_nsa_code(float y, float inv) { return kvc_f32_to_fp8(y == 0.0f ? y : y * inv, 1); }
KVC_HD float kvc_nsa_decode(uint8_t code, float s) { return kvc_fp8_to_f32(code, 1) * s; }

/* Two codes packed as (code(y1) << 8) | code(y0), bit-identical to kvc_nsa_code. On
 * sm_89+ the device uses the hardware conversion cvt.rn.satfinite.e4m3x2.f32 (RNE, then
 * saturation to +-448: the same as the software clamp-then-RNE because 448 is e4m3fn's
 * largest finite value and everything above it rounds to 448 or to 480 and saturates
 * back to 448; NaN of either sign gives 0x7f like the software path). Checked over all
 * 2^32 f32 inputs on an H200 (0 mismatches, bench/NOTES-kernels.md) and per row against
 * the C twin by tests/kv/test_kv_nsa.c. */
KVC_HD uint32_t kvc_nsa_code2(float y0, float y1, float inv) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  const float a0 = y0 == 0.0f ? y0 : y0 * inv, a1 = y1 == 0.0f ? y1 : y1 * inv;
  unsigned short h;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h) : "f"(a1), "f"(a0));
  return h;
#else
  return (uint32_t)kvc_nsa_code(y0, inv) | (uint32_t)kvc_nsa_code(y1, inv) << 8;
#endif
}

/* FP4: quantizes 16 values; writes 8 packed bytes, returns the scale byte. */
KVC_HD uint8_t kvc_fp4_quant16(const float v[16], uint8_t packed[8]) {
  float amax = 0.0f;
  for (int k = 0; k < 16; k++) amax = kvc_amax_step(amax, v[k]);
  const int32_t e = kvc_fp4_block_exponent(amax);
  const float inv = kvc_pow2f(-e);
  for (int j = 0; j < 8; j++)
    packed[j] = (uint8_t)(kvc_fp4_encode(v[2 * j] * inv) | (kvc_fp4_encode(v[2 * j + 1] * inv) << 4));
  return (uint8_t)(e + 127);
}

/* FP4: value of a scale byte (byte 0 -> 0.0f). */
KVC_HD float kvc_fp4_scale_value(uint8_t b) { return kvc_u2f((uint32_t)b << 23); }

#endif /* KVC_MLA_H */
