/*
 * test_kv_mla.c — MLA latent rows: kvc_kv_pool_set_mla_kv / get_mla_kv (MLA, MLA_FP4,
 * NSA fp8 656-byte rows, NSA bf16) and the level-1 kvc_set_mla_kv / kvc_get_mla_kv.
 *
 * Every scenario runs on the test's backend and is checked against straightforward
 * references (element conversion through kvc_numeric.h, the NSA tile quantizer written
 * here, and kv_test_util.h's FP4 block quantizer, the one test_kv_mha.c checks MHA FP4
 * rows with, re-derived with libm). On CUDA the same scenario also runs on a host-backend
 * context and the bytes must be identical (differential).
 */
#include "kv_test_util.h"
#include "kvc_numeric.h"

#include <math.h>

typedef struct scen {
  kvc_kv_pool_kind kind;
  kvc_dtype dtype; /* pool dtype / ROWS buffer dtype */
  int R, Q;
  int64_t size;
  int ps;
  kvc_dtype src, out;
  size_t n;
  int loc64;
  int nope_pad, rope_pad; /* extra elements per source row (strides) */
  int level1;             /* 1: kvc_set_mla_kv on a raw buffer (ROWS/FP4 by kind) */
  int misalign;           /* level1: shift source pointers by one element */
  int bad_locs;           /* include out-of-range slots */
  float zero_tile;        /* NSA: make tile 1 of row 0 all zero when != 0 */
} scen;

/* One scenario in a line: row format, pool dtype, R, Q, size, page size, source and
 * output dtypes, n, then the flags by name (at least one). */
#define SCEN(kind_, dtype_, R_, Q_, size_, ps_, src_, out_, n_, ...)                                 \
  {                                                                                                  \
    .kind = KVC_KV_##kind_, .dtype = KVC_DTYPE_##dtype_, .R = R_, .Q = Q_, .size = size_, .ps = ps_, \
    .src = KVC_DTYPE_##src_, .out = KVC_DTYPE_##out_, .n = n_, __VA_ARGS__                           \
  }

typedef struct result {
  uint8_t *kv, *scale, *nope_out, *rope_out;
  size_t kv_bytes, scale_bytes, nope_bytes, rope_bytes;
  int64_t rows, row_bytes, scale_row_bytes;
} result;

typedef struct inputs {
  int64_t *loc;         /* n slots as int64 (uploaded in the scenario's width) */
  uint8_t *nope, *rope; /* source bytes */
  size_t nope_bytes, rope_bytes;
  int64_t nope_stride, rope_stride; /* elements */
} inputs;

static int dt_code(kvc_dtype d) { return (int)d; }

static int64_t rows_of(const scen *s) { return s->size + s->ps; }

static void put_elem(uint8_t *p, kvc_dtype d, float v) { kvc_store_from_f32(p, 0, dt_code(d), v); }
static float get_elem(const uint8_t *p, kvc_dtype d) { return kvc_load_as_f32(p, 0, dt_code(d)); }

static void make_inputs(const scen *s, kvt_rng *rng, inputs *in) {
  const int64_t rows = rows_of(s);
  const size_t es = kvc_dtype_size(s->src);
  in->nope_stride = s->R + s->nope_pad;
  in->rope_stride = s->Q + s->rope_pad;
  in->nope_bytes = (s->n * in->nope_stride + 1) * es;
  in->rope_bytes = (s->n * in->rope_stride + 1) * es + 1;
  in->nope = calloc(1, in->nope_bytes);
  in->rope = calloc(1, in->rope_bytes);
  in->loc = calloc(s->n + 1, sizeof(int64_t));
  /* Distinct slots: a random permutation prefix of [0, rows), some out of range. */
  int64_t *perm = kvt_slot_perm(rng, rows);
  for (size_t i = 0; i < s->n; i++) {
    in->loc[i] = perm[i % (size_t)rows];
    if (s->bad_locs && i % 5 == 3) in->loc[i] = (i % 2) ? -1 - (int64_t)i : rows + (int64_t)i;
  }
  free(perm);
  for (size_t i = 0; i < s->n; i++) {
    for (int e = 0; e < s->R; e++) {
      float v = (kvt_uniform(rng) - 0.5f) * 8.0f * (1 + (int)(i % 3));
      if (s->zero_tile != 0 && i == 0 && e >= 128 && e < 256) v = 0.0f;
      put_elem(in->nope + (i * in->nope_stride + e) * es, s->src, v);
    }
    for (int e = 0; e < s->Q; e++)
      put_elem(in->rope + (i * in->rope_stride + e) * es, s->src, (kvt_uniform(rng) - 0.5f) * 4.0f);
  }
}

static void free_inputs(inputs *in) {
  free(in->loc);
  free(in->nope);
  free(in->rope);
}

static void free_result(result *r) {
  free(r->kv);
  free(r->scale);
  free(r->nope_out);
  free(r->rope_out);
  memset(r, 0, sizeof *r);
}

static kvc_mla_format format_of(const scen *s) {
  if (s->kind == KVC_KV_MLA_FP4) return KVC_MLA_FP4;
  if (s->kind == KVC_KV_NSA && s->dtype == KVC_DTYPE_FP8_E4M3) return KVC_MLA_NSA_FP8;
  return KVC_MLA_ROWS;
}

/* Runs set then get of scenario `s` on `ctx`; downloads the rows and the outputs. */
static void run_scen(kvc_context *ctx, const scen *s, const inputs *in, result *r) {
  const kvc_mla_format fmt = format_of(s);
  const int T = s->R + s->Q;
  const size_t ses = kvc_dtype_size(s->src), oes = kvc_dtype_size(s->out);
  r->rows = rows_of(s);
  r->row_bytes = fmt == KVC_MLA_FP4 ? T / 2 : fmt == KVC_MLA_NSA_FP8 ? 656 : T * (int64_t)kvc_dtype_size(s->dtype);
  r->scale_row_bytes = fmt == KVC_MLA_FP4 ? T / 16 : 0;
  const int misal = s->level1 && s->misalign;

  /* Inputs. */
  uint8_t *d_nope = kvt_alloc_on(ctx, in->nope_bytes), *d_rope = kvt_alloc_on(ctx, in->rope_bytes);
  kvt_h2d_on(ctx, d_nope, in->nope, in->nope_bytes);
  kvt_h2d_on(ctx, d_rope, in->rope, in->rope_bytes);
  void *d_loc = kvt_alloc_on(ctx, (s->n + 1) * 8);
  if (s->loc64) kvt_h2d_on(ctx, d_loc, in->loc, (s->n + 1) * 8);
  else {
    int32_t *l32 = calloc(s->n + 1, 4);
    for (size_t i = 0; i < s->n; i++) l32[i] = (int32_t)in->loc[i];
    kvt_h2d_on(ctx, d_loc, l32, (s->n + 1) * 4);
    free(l32);
  }
  const kvc_index_type lt = s->loc64 ? KVC_INDEX_I64 : KVC_INDEX_I32;
  const void *nope_src = d_nope + (misal ? ses : 0), *rope_src = d_rope + (misal ? ses : 0);

  /* Outputs, poisoned. */
  r->nope_bytes = s->n * (size_t)s->R * oes;
  r->rope_bytes = s->n * (size_t)s->Q * oes;
  uint8_t *d_no = kvt_alloc_on(ctx, r->nope_bytes + 16), *d_ro = kvt_alloc_on(ctx, r->rope_bytes + 16);
  KVT_OK(kvc_memset_d8(ctx, d_no, 0xA5, r->nope_bytes + 16, NULL));
  KVT_OK(kvc_memset_d8(ctx, d_ro, 0xA5, r->rope_bytes + 16, NULL));

  kvc_kv_pool *pool = NULL;
  void *data = NULL, *scale = NULL;
  if (!s->level1) {
    kvc_kv_pool_config cfg = kvt_latent_config(s->kind, s->dtype, s->R, s->Q, s->size, 2, s->ps);
    cfg.start_layer = 3; /* layer id 4 is then the pool's second layer: ids are translated */
    pool = kvt_pool_on(ctx, cfg);
    KVT_OK(kvc_kv_pool_set_mla_kv(pool, 4, d_loc, lt, s->n, nope_src, rope_src, s->src, in->nope_stride,
                                  in->rope_stride, NULL));
    KVT_OK(kvc_kv_pool_get_mla_kv(pool, 4, d_loc, lt, s->n, d_no, d_ro, s->out, NULL));
    const kvc_buffer_desc d = kvt_buf_on(ctx, pool, KVC_REGION_KV, 4);
    data = d.data;
    assert_int_equal(d.bytes_per_token, r->row_bytes);
    if (fmt == KVC_MLA_FP4) scale = kvt_buf_on(ctx, pool, KVC_REGION_KV_SCALE, 4).data;
  } else {
    data = kvt_alloc_on(ctx, (size_t)(r->rows * r->row_bytes));
    KVT_OK(kvc_memset_d8(ctx, data, 0, (size_t)(r->rows * r->row_bytes), NULL));
    if (fmt == KVC_MLA_FP4) {
      scale = kvt_alloc_on(ctx, (size_t)(r->rows * r->scale_row_bytes));
      KVT_OK(kvc_memset_d8(ctx, scale, 0, (size_t)(r->rows * r->scale_row_bytes), NULL));
    }
    kvc_mla_buffer b = KVC_MLA_BUFFER_INIT;
    b.format = fmt;
    b.data = data;
    b.scale = scale;
    b.num_rows = r->rows;
    b.dtype = s->dtype;
    b.kv_lora_rank = s->R;
    b.qk_rope_head_dim = s->Q;
    KVT_OK(
        kvc_set_mla_kv(ctx, &b, d_loc, lt, s->n, nope_src, rope_src, s->src, in->nope_stride, in->rope_stride, NULL));
    KVT_OK(kvc_get_mla_kv(ctx, &b, d_loc, lt, s->n, d_no, d_ro, s->out, 0, 0, NULL));
  }
  r->kv_bytes = (size_t)(r->rows * r->row_bytes);
  r->kv = malloc(r->kv_bytes);
  kvt_d2h_on(ctx, r->kv, data, r->kv_bytes);
  if (scale) {
    r->scale_bytes = (size_t)(r->rows * r->scale_row_bytes);
    r->scale = malloc(r->scale_bytes);
    kvt_d2h_on(ctx, r->scale, scale, r->scale_bytes);
  }
  r->nope_out = malloc(r->nope_bytes + 16);
  r->rope_out = malloc(r->rope_bytes + 16);
  kvt_d2h_on(ctx, r->nope_out, d_no, r->nope_bytes + 16);
  kvt_d2h_on(ctx, r->rope_out, d_ro, r->rope_bytes + 16);
  /* Nothing written past the outputs. */
  for (int k = 0; k < 16; k++) {
    assert_int_equal(r->nope_out[r->nope_bytes + k], 0xA5);
    assert_int_equal(r->rope_out[r->rope_bytes + k], 0xA5);
  }
  kvc_kv_pool_destroy(pool);
  if (s->level1) {
    kvc_memory_free(ctx, data);
    kvc_memory_free(ctx, scale);
  }
  kvc_memory_free(ctx, d_nope);
  kvc_memory_free(ctx, d_rope);
  kvc_memory_free(ctx, d_loc);
  kvc_memory_free(ctx, d_no);
  kvc_memory_free(ctx, d_ro);
}

/* --- Independent references ---------------------------------------------------------- */

static float src_value(const scen *s, const inputs *in, size_t i, int e) {
  const size_t es = kvc_dtype_size(s->src);
  const size_t off = s->level1 && s->misalign ? es : 0;
  if (e < s->R) return get_elem(in->nope + off + (i * in->nope_stride + e) * es, s->src);
  return get_elem(in->rope + off + (i * in->rope_stride + (e - s->R)) * es, s->src);
}

/* NSA tile quantizer written the obvious way (spec 10.5), zero tile defined as zeros. */
static void ref_nsa_row(const float *y512, const float *rope64, uint8_t row[656]) {
  for (int t = 0; t < 4; t++) {
    float amax = 0;
    for (int k = 0; k < 128; k++) amax = fmaxf(amax, fabsf(y512[128 * t + k]));
    float s = amax / 448.0f;
    float inv = 1.0f / s;
    for (int k = 0; k < 128; k++) {
      float y = y512[128 * t + k];
      float q = y == 0.0f ? y : y * inv;
      if (q > 448.0f) q = 448.0f;
      if (q < -448.0f) q = -448.0f;
      row[128 * t + k] = kvc_f32_to_fp8(q, 1);
    }
    memcpy(row + 512 + 4 * t, &s, 4);
  }
  for (int k = 0; k < 64; k++) {
    uint16_t b = kvc_f32_to_bf16(rope64[k]);
    memcpy(row + 528 + 2 * k, &b, 2);
  }
}

static int valid_loc(const scen *s, int64_t l) { return l >= 0 && l < rows_of(s); }

/* Expected row bytes for row loc = inputs row i. */
static void expected_row(const scen *s, const inputs *in, size_t i, uint8_t *row, uint8_t *scale_row) {
  const int T = s->R + s->Q;
  const kvc_mla_format fmt = format_of(s);
  if (fmt == KVC_MLA_ROWS) {
    const size_t ds = kvc_dtype_size(s->dtype), ses = kvc_dtype_size(s->src);
    for (int e = 0; e < T; e++) {
      if (s->src == s->dtype) {
        const size_t off = s->level1 && s->misalign ? ses : 0;
        const uint8_t *p = e < s->R ? in->nope + off + (i * in->nope_stride + e) * ses
                                    : in->rope + off + (i * in->rope_stride + (e - s->R)) * ses;
        memcpy(row + e * ds, p, ds);
      } else {
        put_elem(row + e * ds, s->dtype, src_value(s, in, i, e));
      }
    }
  } else if (fmt == KVC_MLA_NSA_FP8) {
    float y[512], r[64];
    for (int e = 0; e < 512; e++) y[e] = src_value(s, in, i, e);
    for (int e = 0; e < 64; e++) r[e] = src_value(s, in, i, 512 + e);
    ref_nsa_row(y, r, row);
  } else {
    for (int b = 0; b < T / 16; b++) {
      float v[16];
      for (int k = 0; k < 16; k++) v[k] = src_value(s, in, i, 16 * b + k);
      ref_fp4_block(v, row + 8 * b, &scale_row[b]);
    }
  }
}

/* Decoded value e of a stored row. */
static float decode_row(const scen *s, const uint8_t *row, const uint8_t *scale_row, int e) {
  const kvc_mla_format fmt = format_of(s);
  if (fmt == KVC_MLA_ROWS) return get_elem(row + e * kvc_dtype_size(s->dtype), s->dtype);
  if (fmt == KVC_MLA_NSA_FP8) {
    if (e >= 512) {
      uint16_t b;
      memcpy(&b, row + 528 + 2 * (e - 512), 2);
      return kvc_bf16_to_f32(b);
    }
    float sc;
    memcpy(&sc, row + 512 + 4 * (e / 128), 4);
    return kvc_fp8_to_f32(row[e], 1) * sc;
  }
  const uint8_t code = (uint8_t)((row[e / 2] >> ((e & 1) * 4)) & 0xf);
  return kvc_fp4_decode(code) * ldexpf(1.0f, (int)scale_row[e / 16] - 127);
}

static void check_scen(const scen *s, const inputs *in, const result *r) {
  const int T = s->R + s->Q;
  uint8_t *want = calloc(1, (size_t)r->row_bytes), *want_sc = calloc(1, (size_t)r->scale_row_bytes + 1);
  uint8_t *written = calloc((size_t)r->rows, 1);
  const size_t oes = kvc_dtype_size(s->out);
  for (size_t i = 0; i < s->n; i++) {
    const int64_t l = in->loc[i];
    if (valid_loc(s, l)) {
      written[l] = 1;
      expected_row(s, in, i, want, want_sc);
      const uint8_t *got = r->kv + l * r->row_bytes;
      if (memcmp(got, want, (size_t)r->row_bytes)) {
        for (int64_t b = 0; b < r->row_bytes; b++)
          if (got[b] != want[b])
            fail_msg("row %zu (slot %lld) byte %lld: got 0x%02x want 0x%02x (seed %llu)", i, (long long)l, (long long)b,
                     got[b], want[b], (unsigned long long)kvt_seed());
      }
      if (r->scale_row_bytes)
        assert_memory_equal(r->scale + l * r->scale_row_bytes, want_sc, (size_t)r->scale_row_bytes);
    }
    /* get: stored value converted to out dtype, zeros for out-of-range slots. */
    for (int e = 0; e < T; e++) {
      uint8_t w[4] = {0};
      if (valid_loc(s, l)) {
        const uint8_t *row = r->kv + l * r->row_bytes;
        const uint8_t *srow = r->scale ? r->scale + l * r->scale_row_bytes : NULL;
        if (format_of(s) == KVC_MLA_ROWS && s->dtype == s->out) memcpy(w, row + e * oes, oes);
        else put_elem(w, s->out, decode_row(s, row, srow, e));
      }
      const uint8_t *g = e < s->R ? r->nope_out + (i * s->R + e) * oes : r->rope_out + (i * s->Q + (e - s->R)) * oes;
      if (memcmp(g, w, oes)) fail_msg("get row %zu elem %d mismatch (seed %llu)", i, e, (unsigned long long)kvt_seed());
    }
  }
  /* Rows not targeted stay zero. */
  for (int64_t l = 0; l < r->rows; l++) {
    if (written[l]) continue;
    for (int64_t b = 0; b < r->row_bytes; b++)
      if (r->kv[l * r->row_bytes + b]) fail_msg("untargeted row %lld modified", (long long)l);
  }
  free(want);
  free(want_sc);
  free(written);
}

/* Round trip: decoded values close to the source. */
static void check_round_trip(const scen *s, const inputs *in, const result *r) {
  const int T = s->R + s->Q;
  const size_t oes = kvc_dtype_size(s->out);
  for (size_t i = 0; i < s->n; i++) {
    if (!valid_loc(s, in->loc[i])) continue;
    float amax16[64] = {0}, amax128[4] = {0};
    for (int e = 0; e < T; e++) {
      float a = fabsf(src_value(s, in, i, e));
      if (e < 1024) amax16[e / 16 % 64] = fmaxf(amax16[e / 16 % 64], a);
      if (e < 512) amax128[e / 128] = fmaxf(amax128[e / 128], a);
    }
    for (int e = 0; e < T; e++) {
      const float x = src_value(s, in, i, e);
      const uint8_t *g = e < s->R ? r->nope_out + (i * s->R + e) * oes : r->rope_out + (i * s->Q + (e - s->R)) * oes;
      const float y = get_elem(g, s->out);
      float tol = fabsf(x) * 0.0079f + 1e-6f; /* bf16 */
      if (format_of(s) == KVC_MLA_NSA_FP8 && e < 512)
        tol = fabsf(x) * 0.0635f + amax128[e / 128] / 448.0f / 512.0f + 1e-6f;
      if (format_of(s) == KVC_MLA_FP4) tol = amax16[e / 16 % 64] / 3.0f + 1e-6f;
      if (format_of(s) == KVC_MLA_ROWS && kvc_dtype_size(s->dtype) == 1) tol = fabsf(x) / 8 + 0.02f;
      if (fabsf(x - y) > tol)
        fail_msg("round trip row %zu elem %d: %g -> %g (seed %llu)", i, e, x, y, (unsigned long long)kvt_seed());
    }
  }
}

/* Runs on kvt_ctx, checks references; on CUDA also compares with the host twin. */
static void run_and_check(const scen *s, int round_trip) {
  kvt_rng rng = {kvt_seed() ^ (uint64_t)(s->R * 131 + s->Q * 7 + s->kind * 1000 + (int)s->n)};
  inputs in;
  make_inputs(s, &rng, &in);
  result r = {0};
  run_scen(kvt_ctx, s, &in, &r);
  if (s->n <= 4096) check_scen(s, &in, &r);
  if (round_trip && s->n <= 4096) check_round_trip(s, &in, &r);
  if (kvt_host) {
    result h = {0};
    run_scen(kvt_host, s, &in, &h);
    assert_memory_equal(r.kv, h.kv, r.kv_bytes);
    if (r.scale) assert_memory_equal(r.scale, h.scale, r.scale_bytes);
    assert_memory_equal(r.nope_out, h.nope_out, r.nope_bytes);
    assert_memory_equal(r.rope_out, h.rope_out, r.rope_bytes);
    free_result(&h);
  }
  free_result(&r);
  free_inputs(&in);
}

/* --- Tests --------------------------------------------------------------------------- */

#define NCASES(a) (sizeof(a) / sizeof((a)[0]))

static void test_mla_rows_all_dtypes(void **state) {
  (void)state;
  const kvc_dtype pool_dt[] = {KVC_DTYPE_BF16, KVC_DTYPE_F16, KVC_DTYPE_F32, KVC_DTYPE_FP8_E4M3, KVC_DTYPE_FP8_E5M2};
  const kvc_dtype src_dt[] = {KVC_DTYPE_BF16, KVC_DTYPE_F32, KVC_DTYPE_F16};
  for (size_t a = 0; a < 5; a++)
    for (size_t b = 0; b < 3; b++) {
      const scen s = {.kind = KVC_KV_MLA,
                      .dtype = pool_dt[a],
                      .R = 64,
                      .Q = 16,
                      .size = 40,
                      .ps = 4,
                      .src = src_dt[b],
                      .out = src_dt[b],
                      .n = 24,
                      .loc64 = (int)(a + b) % 2,
                      .bad_locs = 1};
      run_and_check(&s, 1);
    }
}

static void test_mla_rows_non_pow2_and_strides(void **state) {
  (void)state;
  const scen cases[] = {
      SCEN(MLA, BF16, 96, 32, 50, 1, BF16, F32, 30, .loc64 = 1, .nope_pad = 8, .rope_pad = 3, .bad_locs = 1),
      /* odd R and Q */
      SCEN(MLA, F16, 97, 31, 20, 2, F32, BF16, 17, .nope_pad = 1, .bad_locs = 1),
      /* no rope part */
      SCEN(MLA, BF16, 40, 0, 20, 2, BF16, BF16, 9, .loc64 = 1),
  };
  for (size_t i = 0; i < NCASES(cases); i++) run_and_check(&cases[i], 1);
}

static void test_mla_edge_counts(void **state) {
  (void)state;
  for (size_t n = 0; n <= 2; n++) {
    const scen s = SCEN(MLA, BF16, 64, 16, 8, 1, BF16, BF16, n, .loc64 = 1);
    run_and_check(&s, 1);
  }
  /* Large N on CUDA (differential only); moderate on the host. */
  const size_t big = kvt_host ? 65536 : 1500;
  const scen s = SCEN(MLA, BF16, 512, 64, (int64_t)big + 64, 64, BF16, BF16, big, .loc64 = 1, .bad_locs = 1);
  run_and_check(&s, 0);
}

/* The large scenario of a row format, differential only (CUDA against the host twin). */
static void run_big_differential(kvc_kv_pool_kind kind, kvc_dtype dtype) {
  if (!kvt_host) return;
  const scen big = {.kind = kind,
                    .dtype = dtype,
                    .R = 512,
                    .Q = 64,
                    .size = 70000,
                    .ps = 64,
                    .src = KVC_DTYPE_BF16,
                    .out = KVC_DTYPE_BF16,
                    .n = 65536,
                    .loc64 = 1};
  run_and_check(&big, 0);
}

static void test_mla_fp4(void **state) {
  (void)state;
  const scen cases[] = {
      SCEN(MLA_FP4, BF16, 512, 64, 24, 4, BF16, BF16, 12, .loc64 = 1, .bad_locs = 1),
      SCEN(MLA_FP4, F32, 96, 32, 30, 1, F32, F16, 20, .nope_pad = 2, .rope_pad = 4, .bad_locs = 1),
      /* a 16-value block straddles nope and rope */
      SCEN(MLA_FP4, BF16, 88, 8, 30, 1, F16, F32, 20, .bad_locs = 1),
  };
  for (size_t i = 0; i < NCASES(cases); i++) run_and_check(&cases[i], 1);
  run_big_differential(KVC_KV_MLA_FP4, KVC_DTYPE_BF16);
}

static void test_nsa_fp8_rows(void **state) {
  (void)state;
  const scen cases[] = {
      SCEN(NSA, FP8_E4M3, 512, 64, 20, 4, BF16, BF16, 10, .loc64 = 1, .bad_locs = 1, .zero_tile = 1),
      SCEN(NSA, FP8_E4M3, 512, 64, 20, 4, F32, F32, 10, .nope_pad = 4, .rope_pad = 2, .bad_locs = 1),
      /* bf16 rows: the plain ROWS format */
      SCEN(NSA, BF16, 512, 64, 20, 4, BF16, F32, 10, .bad_locs = 1),
  };
  for (size_t i = 0; i < NCASES(cases); i++) run_and_check(&cases[i], 1);
  run_big_differential(KVC_KV_NSA, KVC_DTYPE_FP8_E4M3);
}

/* Hand-computed NSA row: tile 0 = [448, -224, 1, 0, ...], tile 1 all zeros, tiles 2-3 = 1. */
static void test_nsa_hand_computed_and_zero_tile(void **state) {
  (void)state;
  kvc_kv_pool *pool = kvt_pool_on(kvt_ctx, kvt_latent_config(KVC_KV_NSA, KVC_DTYPE_FP8_E4M3, 512, 64, 64, 1, 64));
  uint16_t nope[512] = {0}, rope[64];
  nope[0] = kvc_f32_to_bf16(448.0f);
  nope[1] = kvc_f32_to_bf16(-224.0f);
  nope[2] = kvc_f32_to_bf16(1.0f);
  for (int e = 256; e < 512; e++) nope[e] = kvc_f32_to_bf16(1.0f);
  for (int e = 0; e < 64; e++) rope[e] = (uint16_t)(0x3f80 + e);
  int64_t loc = 5;
  void *dn = kvt_dev_alloc(sizeof nope), *dr = kvt_dev_alloc(sizeof rope), *dl = kvt_dev_alloc(8);
  kvt_h2d(dn, nope, sizeof nope);
  kvt_h2d(dr, rope, sizeof rope);
  kvt_h2d(dl, &loc, 8);
  KVT_OK(kvc_kv_pool_set_mla_kv(pool, 0, dl, KVC_INDEX_I64, 1, dn, dr, KVC_DTYPE_BF16, 0, 0, NULL));
  const kvc_buffer_desc d = kvt_buf(pool, KVC_REGION_KV, 0);
  uint8_t row[656];
  kvt_d2h(row, (uint8_t *)d.data + 5 * 656, 656);
  /* tile 0: s = 1, codes 448 -> 0x7e, -224 -> 0xf6, 1 -> 0x38, 0 -> 0x00 */
  assert_int_equal(row[0], 0x7e);
  assert_int_equal(row[1], 0xf6);
  assert_int_equal(row[2], 0x38);
  for (int k = 3; k < 128; k++) assert_int_equal(row[k], 0);
  float sc[4];
  memcpy(sc, row + 512, 16);
  assert_true(sc[0] == 1.0f);
  /* tile 1 all zero: scale 0, codes 0 */
  assert_true(sc[1] == 0.0f && !signbit(sc[1]));
  for (int k = 128; k < 256; k++) assert_int_equal(row[k], 0);
  /* tiles 2, 3 all ones: s = 1/448, codes = fp8(448) = 0x7e */
  assert_true(sc[2] == 1.0f / 448.0f && sc[3] == 1.0f / 448.0f);
  for (int k = 256; k < 512; k++) assert_int_equal(row[k], 0x7e);
  assert_memory_equal(row + 528, rope, 128);
  /* decode: the zero tile reads as zeros, tile 0 exactly. */
  float out[512], rout[64];
  void *dno = kvt_dev_alloc(sizeof out), *dro = kvt_dev_alloc(sizeof rout);
  kvt_poison(dno, sizeof out);
  KVT_OK(kvc_kv_pool_get_mla_kv(pool, 0, dl, KVC_INDEX_I64, 1, dno, dro, KVC_DTYPE_F32, NULL));
  kvt_d2h(out, dno, sizeof out);
  kvt_d2h(rout, dro, sizeof rout);
  assert_true(out[0] == 448.0f && out[1] == -224.0f && out[2] == 1.0f);
  for (int k = 128; k < 256; k++) assert_true(out[k] == 0.0f);
  for (int k = 256; k < 512; k++) assert_true(fabsf(out[k] - 1.0f) < 1e-6f);
  for (int k = 0; k < 64; k++) assert_true(rout[k] == kvc_bf16_to_f32(rope[k]));
  kvt_dev_free(dn);
  kvt_dev_free(dr);
  kvt_dev_free(dl);
  kvt_dev_free(dno);
  kvt_dev_free(dro);
  kvc_kv_pool_destroy(pool);
}

static void test_level1_ops(void **state) {
  (void)state;
  const scen cases[] = {
      /* misaligned sources: narrow accesses */
      SCEN(MLA, BF16, 96, 32, 30, 2, BF16, BF16, 20, .level1 = 1, .misalign = 1, .bad_locs = 1),
      SCEN(MLA, FP8_E4M3, 96, 32, 30, 2, F16, F32, 20, .loc64 = 1, .nope_pad = 4, .level1 = 1, .bad_locs = 1),
      SCEN(MLA_FP4, BF16, 96, 32, 30, 2, BF16, BF16, 20, .loc64 = 1, .level1 = 1, .bad_locs = 1),
      SCEN(NSA, FP8_E4M3, 512, 64, 10, 2, BF16, BF16, 6, .level1 = 1, .misalign = 1, .bad_locs = 1),
  };
  for (size_t i = 0; i < NCASES(cases); i++) run_and_check(&cases[i], 1);
}

static void test_argument_errors(void **state) {
  (void)state;
  kvc_kv_pool *mha = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_BF16, 1, 8, 8, 16, 1, 1);
  int64_t dummy[4] = {0};
  KVT_STATUS(kvc_kv_pool_set_mla_kv(mha, 0, dummy, KVC_INDEX_I64, 1, dummy, dummy, KVC_DTYPE_BF16, 0, 0, NULL),
             KVC_ERR_UNSUPPORTED);
  kvc_kv_pool_destroy(mha);
  kvc_mla_buffer b = KVC_MLA_BUFFER_INIT;
  b.data = dummy;
  b.num_rows = 4;
  b.kv_lora_rank = 16;
  b.qk_rope_head_dim = 8;
  KVT_OK(kvc_set_mla_kv(kvt_ctx, &b, NULL, KVC_INDEX_I64, 0, NULL, NULL, KVC_DTYPE_BF16, 0, 0, NULL)); /* n = 0 */
  KVT_STATUS(kvc_set_mla_kv(kvt_ctx, &b, dummy, KVC_INDEX_I64, 1, dummy, NULL, KVC_DTYPE_BF16, 0, 0, NULL),
             KVC_ERR_INVALID_ARGUMENT); /* rope NULL with Q > 0 */
  KVT_STATUS(kvc_set_mla_kv(kvt_ctx, &b, dummy, KVC_INDEX_I64, 1, dummy, dummy, KVC_DTYPE_U8, 0, 0, NULL),
             KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_set_mla_kv(kvt_ctx, &b, dummy, KVC_INDEX_I64, 1, dummy, dummy, KVC_DTYPE_BF16, 3, 0, NULL),
             KVC_ERR_INVALID_ARGUMENT); /* nope_stride < R */
  b.format = KVC_MLA_NSA_FP8;
  KVT_STATUS(kvc_set_mla_kv(kvt_ctx, &b, dummy, KVC_INDEX_I64, 1, dummy, dummy, KVC_DTYPE_BF16, 0, 0, NULL),
             KVC_ERR_INVALID_ARGUMENT); /* NSA needs 512 + 64 */
  b.format = KVC_MLA_FP4;
  b.qk_rope_head_dim = 4;
  KVT_STATUS(kvc_set_mla_kv(kvt_ctx, &b, dummy, KVC_INDEX_I64, 1, dummy, dummy, KVC_DTYPE_BF16, 0, 0, NULL),
             KVC_ERR_INVALID_ARGUMENT); /* (R + Q) % 16 */
  b.struct_size = 8;
  KVT_STATUS(kvc_get_mla_kv(kvt_ctx, &b, dummy, KVC_INDEX_I64, 1, dummy, dummy, KVC_DTYPE_BF16, 0, 0, NULL),
             KVC_ERR_VERSION);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_mla_rows_all_dtypes), cmocka_unit_test(test_mla_rows_non_pow2_and_strides),
    cmocka_unit_test(test_mla_edge_counts),     cmocka_unit_test(test_mla_fp4),
    cmocka_unit_test(test_nsa_fp8_rows),        cmocka_unit_test(test_nsa_hand_computed_and_zero_tile),
    cmocka_unit_test(test_level1_ops),          cmocka_unit_test(test_argument_errors),
};

KVT_MAIN("kv_mla", tests)
