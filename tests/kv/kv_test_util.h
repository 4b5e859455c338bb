/* kv_test_util.h — helpers shared by the KV pool tests: pool creation, whole-buffer
 * read/write through describe(), and reference conversions written independently of
 * kvc_numeric.h (brute force over the code tables). */
#ifndef KV_TEST_UTIL_H
#define KV_TEST_UTIL_H

#include "harness.h"

#include <math.h>

/* Creates a pool on ctx (the test's or a host twin), failing the test with ctx's own last error. */
static inline kvc_kv_pool *kvt_pool_on(kvc_context *ctx, kvc_kv_pool_config c) {
  kvc_kv_pool *p = NULL;
  kvc_status st = kvc_kv_pool_create(ctx, &c, &p);
  if (st != KVC_OK) fail_msg("kvc_kv_pool_create -> %s: %s", kvc_status_name(st), kvc_last_error(ctx));
  return p;
}

/* An MHA-family pool on the test's context. */
static inline kvc_kv_pool *kvt_mha_pool(kvc_kv_pool_kind kind, kvc_dtype dt, int H, int D, int Dv, int64_t size,
                                        int layers, int ps) {
  return kvt_pool_on(kvt_ctx, kvt_mha_config(kind, dt, H, D, Dv, size, layers, ps));
}

/* An NSA pool (bf16 latent rows of R + Q, fp8 index keys in 64-token pages). */
static inline kvc_kv_pool *kvt_nsa_pool(int R, int Q, int64_t size, int layers) {
  return kvt_pool_on(kvt_ctx, kvt_latent_config(KVC_KV_NSA, KVC_DTYPE_BF16, R, Q, size, layers, 64));
}

/* The descriptor of one region of one layer; ctx is the pool's, for the failure message. */
static inline kvc_buffer_desc kvt_buf_on(kvc_context *ctx, kvc_kv_pool *p, kvc_region_kind r, int layer) {
  kvc_buffer_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  kvc_status st = kvc_kv_pool_buffer(p, r, layer, &d);
  if (st != KVC_OK) fail_msg("kvc_kv_pool_buffer -> %s: %s", kvc_status_name(st), kvc_last_error(ctx));
  return d;
}

/* kvt_buf_on for a pool on the test's context. */
static inline kvc_buffer_desc kvt_buf(kvc_kv_pool *p, kvc_region_kind r, int layer) {
  return kvt_buf_on(kvt_ctx, p, r, layer);
}

/* Reads a whole buffer to a malloc'd host copy. */
static inline uint8_t *kvt_read_buf(kvc_kv_pool *p, kvc_region_kind r, int layer, size_t *bytes) {
  kvc_buffer_desc d = kvt_buf(p, r, layer);
  uint8_t *h = malloc((size_t)d.total_bytes);
  kvt_d2h(h, d.data, (size_t)d.total_bytes);
  if (bytes) *bytes = (size_t)d.total_bytes;
  return h;
}

/* Fills every buffer of the pool with random bytes; returns nothing. */
static inline void kvt_fill_pool(kvc_kv_pool *p, kvt_rng *r) {
  int nb = kvc_kv_pool_num_buffers(p);
  for (int i = 0; i < nb; i++) {
    kvc_buffer_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    KVT_OK(kvc_kv_pool_describe(p, i, &d));
    uint8_t *h = malloc((size_t)d.total_bytes);
    for (int64_t j = 0; j < d.total_bytes; j++) h[j] = (uint8_t)kvt_next(r);
    kvt_h2d(d.data, h, (size_t)d.total_bytes);
    free(h);
  }
}

/* Random order of the slots [0, rows) (malloc'd) led by 0 and rows - 1, so every scenario writes both ends. */
static inline int64_t *kvt_slot_perm(kvt_rng *r, int64_t rows) {
  int64_t *perm = malloc((size_t)rows * sizeof *perm);
  for (int64_t i = 0; i < rows; i++) perm[i] = i;
  for (int64_t i = rows - 1; i > 0; i--) {
    int64_t j = kvt_range(r, 0, i), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  for (int64_t i = 0; i < rows; i++)
    if (perm[i] == 0) perm[i] = perm[0], perm[0] = 0;
  for (int64_t i = 1; i < rows; i++)
    if (perm[i] == rows - 1) perm[i] = perm[1], perm[1] = rows - 1;
  return perm;
}

/* --- Independent references ---------------------------------------------------------- */

static inline float ref_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline float ref_f16(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  float v = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(m + 1024), e - 25);
  return (h & 0x8000) ? -v : v;
}
static inline uint16_t ref_to_bf16(float f) { /* finite inputs only */
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}
/* Value of an fp8 code from the format's definition (e4m3fn: bias 7, no inf, 0x7f NaN). */
static inline double ref_fp8_val(int code, int e4m3) {
  int mb = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  int e = (code & 0x7f) >> mb, m = code & ((1 << mb) - 1);
  double v = e == 0 ? ldexp((double)m, 1 - bias - mb) : ldexp((double)(m + (1 << mb)), e - bias - mb);
  return (code & 0x80) ? -v : v;
}
/* Nearest finite fp8 code to x, ties to the even code, saturating (brute force). */
static inline uint8_t ref_fp8(double x, int e4m3) {
  double maxv = e4m3 ? 448.0 : 57344.0;
  if (x > maxv) x = maxv;
  if (x < -maxv) x = -maxv;
  int best = -1;
  double bd = 0;
  for (int c = 0; c < 256; c++) {
    if (e4m3 && (c & 0x7f) == 0x7f) continue;
    if (!e4m3 && ((c & 0x7f) >> 2) == 31) continue;
    if ((c & 0x80) != (signbit(x) ? 0x80 : 0)) continue;
    double d = fabs(ref_fp8_val(c, e4m3) - x);
    if (best < 0 || d < bd || (d == bd && !(c & 1) && (best & 1))) {
      best = c;
      bd = d;
    }
  }
  if (x == 0) return (uint8_t)(signbit(x) ? 0x80 : 0);
  return (uint8_t)best;
}
/* FP4 block: SGLang 10.4.5 written with libm: e = ceil(log2(amax/6)), thresholds. */
static inline void ref_fp4_block(const float *x, uint8_t *bytes8, uint8_t *scale) {
  double amax = 0;
  for (int i = 0; i < 16; i++) amax = fmax(amax, fabs(x[i]));
  if (amax < 1e-12) amax = 1e-12;
  int e = (int)ceil(log2((double)(float)((float)amax / 6.0f)));
  double inv = ldexp(1.0, -e);
  static const double th[7] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0};
  uint8_t code[16];
  for (int i = 0; i < 16; i++) {
    double v = x[i] * inv, a = fabs(v);
    int c = 0;
    for (int t = 0; t < 7; t++) c += a >= th[t];
    code[i] = (uint8_t)(c | (v < 0 ? 8 : 0));
  }
  for (int j = 0; j < 8; j++) bytes8[j] = (uint8_t)(code[2 * j] | (code[2 * j + 1] << 4));
  *scale = (uint8_t)(e + 127);
}

#endif
