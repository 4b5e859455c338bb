/*
 * mla.c — level 1: kvc_set_mla_kv / kvc_get_mla_kv on engine-owned buffers, and what
 * the KV pools share with them: kvc__mla_values (the caller's half of a launch's
 * arguments) and kvc__mla_run, the launcher.
 *
 * The kernel (kernels/mla.cu) is specialised on (direction, format, the two dtypes, R,
 * Q, G) where G — elements per vector access — is the largest of 8/4/2/1 that divides
 * R, Q and every stride and keeps every base address aligned to min(G x element, 16)
 * bytes. So the common case (bf16, R = 512, Q = 64, cudaMalloc'd buffers) moves 16 bytes
 * per access, and odd shapes or offsets still work, with narrower accesses.
 */
#include "ops.h"

#include <string.h>

#define ADDR(p) ((uint64_t)(uintptr_t)(p))

static bool value_dtype_ok(kvc_dtype d) { return d >= KVC_DTYPE_F32 && d <= KVC_DTYPE_FP8_E5M2; }

/* Whether `addr` is aligned for G elements of `es` bytes (accesses of at most 16 B). */
static bool aligned_for(uint64_t addr, int g, size_t es) {
  uint64_t a = (uint64_t)g * es;
  if (a > 16) a = 16;
  return addr % a == 0;
}

static int pick_group(const kvc__mla_args *a, int64_t nope_stride, int64_t rope_stride, int64_t row_stride) {
  const size_t vs = kvc_dtype_size(a->v.val_dtype);
  const size_t rs = a->format == KVC_MLA_ROWS ? kvc_dtype_size(a->row_dtype) : 0;
  for (int g = 8; g > 1; g >>= 1) {
    if (a->R % g || a->Q % g) continue;
    if (a->v.nope && (nope_stride % g || !aligned_for(ADDR(a->v.nope), g, vs))) continue;
    if (a->v.rope && a->Q > 0 && (rope_stride % g || !aligned_for(ADDR(a->v.rope), g, vs))) continue;
    if (rs && (row_stride % g || !aligned_for(ADDR(a->data), g, rs))) continue;
    return g;
  }
  return 1;
}

kvc_status kvc__mla_run(kvc_context *ctx, const char *fn, const kvc__mla_args *a, kvc_stream stream) {
  KVC_CHECK_INDEX_TYPE(ctx, a->v.loc_type);
  const int64_t R = a->R, Q = a->Q, T = R + Q;
  if (R < 1 || Q < 0)
    return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "kv_lora_rank %d must be >= 1 and qk_rope_head_dim %d >= 0",
                      a->R, a->Q);
  if (!value_dtype_ok(a->v.val_dtype))
    return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn,
                      "%s dtype %s not supported (f32, f16, bf16, fp8_e4m3, fp8_e5m2)", a->v.get ? "out" : "src",
                      kvc_dtype_name(a->v.val_dtype));
  if (a->v.nope_stride < 0 || a->v.rope_stride < 0 || a->row_stride < 0 || a->scale_stride < 0)
    return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "negative stride");
  const int64_t nope_stride = a->v.nope_stride ? a->v.nope_stride : R;
  const int64_t rope_stride = a->v.rope_stride ? a->v.rope_stride : Q;
  if (nope_stride < R || rope_stride < Q)
    return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "nope_stride %lld < %lld or rope_stride %lld < %lld",
                      (long long)nope_stride, (long long)R, (long long)rope_stride, (long long)Q);
  int64_t row_stride = a->row_stride, scale_stride = 0;
  int mode;
  switch (a->format) {
  case KVC_MLA_ROWS:
    mode = KVC_MLA_MODE_ROWS;
    if (!value_dtype_ok(a->row_dtype))
      return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "buffer dtype %s not supported",
                        kvc_dtype_name(a->row_dtype));
    if (!row_stride) row_stride = T;
    if (row_stride < T)
      return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "row_stride %lld < R + Q = %lld", (long long)row_stride,
                        (long long)T);
    break;
  case KVC_MLA_FP4:
    mode = KVC_MLA_MODE_FP4;
    if (T % 16)
      return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "FP4 rows need (R + Q) %% 16 == 0, got %lld", (long long)T);
    if (!row_stride) row_stride = T / 2;
    scale_stride = a->scale_stride ? a->scale_stride : T / 16;
    if (row_stride < T / 2 || row_stride % 8 || scale_stride < T / 16)
      return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn,
                        "FP4 row_stride %lld (>= %lld, multiple of 8) / scale_stride %lld (>= %lld)",
                        (long long)row_stride, (long long)(T / 2), (long long)scale_stride, (long long)(T / 16));
    break;
  case KVC_MLA_NSA_FP8:
    mode = KVC_MLA_MODE_NSA;
    if (R != 512 || Q != 64)
      return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "NSA fp8 rows need R = 512 and Q = 64, got %d and %d", a->R,
                        a->Q);
    if (!row_stride) row_stride = 656;
    if (row_stride < 656 || row_stride % 16)
      return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "NSA row_stride %lld must be >= 656 and a multiple of 16",
                        (long long)row_stride);
    break;
  default: return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "format %d unknown", (int)a->format);
  }
  if (a->num_rows < 0)
    return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "num_rows %lld < 0", (long long)a->num_rows);
  if (a->v.n == 0) return KVC_OK;
  if (a->v.n > (size_t)INT64_MAX / (size_t)(T > 0 ? T : 1))
    return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "n = %zu too large", a->v.n);
  if (!a->v.loc || !a->data || (mode == KVC_MLA_MODE_FP4 && !a->scale))
    return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "loc, data%s must be non-NULL for n = %zu",
                      mode == KVC_MLA_MODE_FP4 ? " and scale" : "", a->v.n);
  if (!a->v.get && (!a->v.nope || (Q > 0 && !a->v.rope)))
    return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "nope%s must be non-NULL for n = %zu",
                      Q > 0 ? " and rope" : "", a->v.n);
  if (a->v.get && !a->v.nope && (!a->v.rope || Q == 0)) return KVC_OK; /* nothing wanted */
  if (mode == KVC_MLA_MODE_FP4 && ADDR(a->data) % 8)
    return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "FP4 data must be 8-byte aligned");
  if (mode == KVC_MLA_MODE_NSA && ADDR(a->data) % 16)
    return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "NSA data must be 16-byte aligned");

  const int g = pick_group(a, nope_stride, rope_stride, row_stride);
  const int val = (int)a->v.val_dtype, row = mode == KVC_MLA_MODE_ROWS ? (int)a->row_dtype : (int)KVC_DTYPE_BF16;
  kvc_p_mla p = {ADDR(a->v.loc),
                 ADDR(a->v.nope),
                 Q > 0 ? ADDR(a->v.rope) : 0,
                 ADDR(a->data),
                 mode == KVC_MLA_MODE_FP4 ? ADDR(a->scale) : 0,
                 (int64_t)a->v.n,
                 a->num_rows,
                 nope_stride,
                 rope_stride,
                 row_stride,
                 scale_stride,
                 a->v.loc_type == KVC_INDEX_I64,
                 mode,
                 a->v.get ? row : val,
                 a->v.get ? val : row,
                 a->R,
                 a->Q,
                 g,
                 0};
  kvc__spec spec = {7,
                    {{"KVC_DIR", a->v.get},
                     {"KVC_MODE", mode},
                     {"KVC_SRC", p.src_dt},
                     {"KVC_DST", p.dst_dt},
                     {"KVC_R", R},
                     {"KVC_Q", Q},
                     {"KVC_G", g}}};
  const kvc__kfunc *f;
  KVC_FORWARD(kvc__kernel_get(ctx, a->v.get ? &kvc__k_mla_get : &kvc__k_mla_set, &spec, &f));

  int64_t blocks;
  if (mode == KVC_MLA_MODE_NSA) {
    blocks = ((int64_t)a->v.n + 7) / 8; /* one warp per row, 8 rows per block */
  } else {
    const int64_t per_row = mode == KVC_MLA_MODE_FP4 ? T / 16 : T / g;
    int64_t units;
    if (a->v.n > (size_t)INT64_MAX || !kvc__mul_i64((int64_t)a->v.n, per_row, &units) || units > INT64_MAX - 255)
      return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "n = %zu too large", a->v.n);
    blocks = (units + 255) / 256; /* grid-stride beyond the cap */
    if (blocks > ((int64_t)1 << 20)) blocks = (int64_t)1 << 20;
  }
  if (blocks > INT32_MAX) return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "n = %zu too large", a->v.n);
  return kvc__kernel_launch(ctx, f, kvc__dim((unsigned)blocks, 1, 1), kvc__dim(256, 1, 1), 0, stream, &p, sizeof p);
}

/* --- Level 1 ------------------------------------------------------------------------ */

static kvc_status buffer_args(kvc_context *ctx, const char *fn, const kvc_mla_buffer *buf, kvc__mla_args *a) {
  if (!buf) return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "buf is NULL");
  kvc_mla_buffer copy;
  memset(&copy, 0, sizeof copy);
  KVC_FORWARD(KVC__CONFIG_COPY(ctx, "buf", &copy, buf, kvc_mla_buffer));
  buf = &copy;
  a->format = buf->format;
  a->data = buf->data;
  a->scale = buf->scale;
  a->num_rows = buf->num_rows;
  a->row_stride = buf->row_stride;
  a->scale_stride = buf->scale_stride;
  a->row_dtype = buf->dtype;
  a->R = buf->kv_lora_rank;
  a->Q = buf->qk_rope_head_dim;
  return KVC_OK;
}

/* Both level-1 calls in one place; `fn` is the public name, for the error messages. */
static kvc_status level1_run(kvc_context *ctx, const char *fn, const kvc_mla_buffer *buf, const kvc__mla_values *v,
                             kvc_stream stream) {
  if (!ctx) return kvc__error(NULL, KVC_ERR_INVALID_ARGUMENT, fn, "ctx is NULL");
  kvc__mla_args a = {0};
  KVC_FORWARD(buffer_args(ctx, fn, buf, &a));
  a.v = *v;
  return kvc__mla_run(ctx, fn, &a, stream);
}

kvc_status kvc_set_mla_kv(kvc_context *ctx, const kvc_mla_buffer *buf, const void *loc, kvc_index_type loc_type,
                          size_t n, const void *nope, const void *rope, kvc_dtype src_dtype, int64_t nope_stride,
                          int64_t rope_stride, kvc_stream stream) {
  KVC_API_ENTRY();
  const kvc__mla_values v = {.get = 0,
                             .loc = loc,
                             .loc_type = loc_type,
                             .n = n,
                             .nope = nope,
                             .rope = rope,
                             .val_dtype = src_dtype,
                             .nope_stride = nope_stride,
                             .rope_stride = rope_stride};
  return level1_run(ctx, __func__, buf, &v, stream);
}

kvc_status kvc_get_mla_kv(kvc_context *ctx, const kvc_mla_buffer *buf, const void *loc, kvc_index_type loc_type,
                          size_t n, void *nope_out, void *rope_out, kvc_dtype out_dtype, int64_t nope_stride,
                          int64_t rope_stride, kvc_stream stream) {
  KVC_API_ENTRY();
  const kvc__mla_values v = {.get = 1,
                             .loc = loc,
                             .loc_type = loc_type,
                             .n = n,
                             .nope = nope_out,
                             .rope = rope_out,
                             .val_dtype = out_dtype,
                             .nope_stride = nope_stride,
                             .rope_stride = rope_stride};
  return level1_run(ctx, __func__, buf, &v, stream);
}
