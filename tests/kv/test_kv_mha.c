/* test_kv_mha.c — kvc_kv_pool_set_kv / gather_kv and the level-1 kvc_store_kv on both
 * backends: byte-exact copies for every dtype and layout, fp8 and FP4 quantizing writes
 * against independent references, scale by pointer vs by value, bounds, N = 0/1. */
#include "kv_test_util.h"

#define LEN_OF(a) (sizeof(a) / sizeof((a)[0]))

typedef struct layout {
  kvc_dtype dt;
  int H, D, Dv;
} layout;

/* Slots: first, last, a few random, two out-of-range ones (skipped). */
static int64_t *make_slots(kvt_rng *r, int64_t rows, size_t n) {
  int64_t *s = malloc(n * sizeof *s);
  for (size_t i = 0; i < n; i++) s[i] = kvt_range(r, 1, rows - 2);
  /* distinct slots keep the expectation simple */
  for (size_t i = 0; i < n; i++) s[i] = 1 + (int64_t)((uint64_t)(s[i] + (int64_t)i * 7919) % (uint64_t)(rows - 2));
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < i; j++)
      if (s[j] == s[i]) s[i] = -5; /* duplicate -> out of range */
  if (n > 0) s[0] = 0;
  if (n > 1) s[1] = rows - 1;
  if (n > 3) s[2] = rows; /* out of range */
  if (n > 3) s[3] = -1;   /* out of range */
  return s;
}

static void *upload_loc(const int64_t *s, size_t n, kvc_index_type t) {
  size_t b = n * (t == KVC_INDEX_I64 ? 8 : 4);
  void *h = malloc(b ? b : 1);
  for (size_t i = 0; i < n; i++) {
    if (t == KVC_INDEX_I64) ((int64_t *)h)[i] = s[i];
    else ((int32_t *)h)[i] = (int32_t)s[i];
  }
  void *d = kvt_dev_alloc(b ? b : 8);
  if (b) kvt_h2d(d, h, b);
  free(h);
  return d;
}

/* Copy path: the pool rows equal the source bytes; untouched rows keep their poison. */
static void check_copy(const layout *L, size_t n, kvc_index_type lt, int64_t size, uint64_t seed) {
  kvt_rng r = {seed};
  kvc_kv_pool *p = kvt_mha_pool(KVC_KV_MHA, L->dt, L->H, L->D, L->Dv, size, 2, 1);
  const int64_t rows = size + 1;
  kvt_fill_pool(p, &r);
  const size_t es = kvc_dtype_size(L->dt);
  const size_t kb = (size_t)L->H * L->D * es, vb = (size_t)L->H * L->Dv * es;
  const int64_t kstride_el = L->H * L->D + 3; /* padded source rows */
  const size_t ks = (size_t)kstride_el * es;
  uint8_t *k = malloc(n * ks + 1), *v = malloc(n * vb + 1);
  for (size_t i = 0; i < n * ks; i++) k[i] = (uint8_t)kvt_next(&r);
  for (size_t i = 0; i < n * vb; i++) v[i] = (uint8_t)kvt_next(&r);
  int64_t *slots = make_slots(&r, rows, n);
  void *dloc = upload_loc(slots, n, lt);
  void *dk = kvt_dev_alloc(n * ks + 16), *dv = kvt_dev_alloc(n * vb + 16);
  kvt_h2d(dk, k, n * ks);
  kvt_h2d(dv, v, n * vb);
  size_t bytes;
  uint8_t *k0 = kvt_read_buf(p, KVC_REGION_K, 1, &bytes), *v0 = kvt_read_buf(p, KVC_REGION_V, 1, NULL);
  KVT_OK(kvc_kv_pool_set_kv(p, 1, dloc, lt, n, dk, dv, L->dt, kstride_el, 0, NULL, 1.0f, NULL, 1.0f, NULL));
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  uint8_t *k1 = kvt_read_buf(p, KVC_REGION_K, 1, NULL), *v1 = kvt_read_buf(p, KVC_REGION_V, 1, NULL);
  for (size_t i = 0; i < n; i++) {
    if (slots[i] < 0 || slots[i] >= rows) continue;
    memcpy(k0 + slots[i] * kb, k + i * ks, kb);
    memcpy(v0 + slots[i] * vb, v + i * vb, vb);
  }
  assert_memory_equal(k0, k1, (size_t)rows * kb);
  assert_memory_equal(v0, v1, (size_t)rows * vb);
  /* gather back (same dtype = copy) */
  if (n > 0) {
    uint8_t *go = kvt_dev_alloc(n * kb), *gv = kvt_dev_alloc(n * vb);
    KVT_OK(kvc_kv_pool_gather_kv(p, 1, dloc, lt, n, go, gv, L->dt, NULL));
    uint8_t *hk = malloc(n * kb), *hv = malloc(n * vb);
    kvt_d2h(hk, go, n * kb);
    kvt_d2h(hv, gv, n * vb);
    for (size_t i = 0; i < n; i++) {
      if (slots[i] < 0 || slots[i] >= rows) {
        for (size_t j = 0; j < kb; j++) assert_int_equal(hk[i * kb + j], 0);
        continue;
      }
      assert_memory_equal(hk + i * kb, k + i * ks, kb);
      assert_memory_equal(hv + i * vb, v + i * vb, vb);
    }
    free(hk);
    free(hv);
    kvt_dev_free(go);
    kvt_dev_free(gv);
  }
  free(k0);
  free(v0);
  free(k1);
  free(v1);
  free(k);
  free(v);
  free(slots);
  kvt_dev_free(dloc);
  kvt_dev_free(dk);
  kvt_dev_free(dv);
  kvc_kv_pool_destroy(p);
}

static void test_set_kv_copy_every_dtype_and_layout(void **state) {
  (void)state;
  const layout ls[] = {
      {KVC_DTYPE_BF16, 8, 128, 128},   {KVC_DTYPE_F16, 3, 40, 40},    {KVC_DTYPE_F32, 2, 64, 32},
      {KVC_DTYPE_FP8_E4M3, 4, 64, 96}, {KVC_DTYPE_FP8_E5M2, 1, 1, 1}, {KVC_DTYPE_BF16, 1, 3, 5},
  };
  const size_t ns[] = {0, 1, 7, 300};
  uint64_t seed = kvt_seed();
  for (size_t a = 0; a < sizeof ls / sizeof ls[0]; a++)
    for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++)
      check_copy(&ls[a], ns[b], (a + b) % 2 ? KVC_INDEX_I64 : KVC_INDEX_I32, 500, seed + a * 10 + b);
}

/* Quantizing write bf16/f16/f32 -> fp8 against the brute-force reference. */
static void check_quant(kvc_dtype src, kvc_dtype dst, float kscale, float vscale, int by_ptr, uint64_t seed) {
  kvt_rng r = {seed};
  const int H = 2, D = 24, Dv = 16;
  kvc_kv_pool *p = kvt_mha_pool(KVC_KV_MHA, dst, H, D, Dv, 64, 1, 1);
  const size_t n = 20, ke = (size_t)H * D, ve = (size_t)H * Dv, es = kvc_dtype_size(src);
  float *kf = malloc(n * ke * sizeof(float)), *vf = malloc(n * ve * sizeof(float));
  uint8_t *k = malloc(n * ke * es), *v = malloc(n * ve * es);
  for (size_t i = 0; i < n * ke + n * ve; i++) {
    float x = (kvt_uniform(&r) - 0.5f) * (i % 5 == 0 ? 2000.0f : 8.0f); /* some out of range */
    if (i % 17 == 0) x = 0.0f;
    int isk = i < n * ke;
    size_t j = isk ? i : i - n * ke;
    uint8_t *dstb = isk ? k : v;
    float *ff = isk ? kf : vf;
    if (src == KVC_DTYPE_BF16) {
      uint16_t h = ref_to_bf16(x);
      memcpy(dstb + 2 * j, &h, 2);
      ff[j] = ref_bf16(h);
    } else if (src == KVC_DTYPE_F16) {
      uint16_t h = (uint16_t)((kvt_next(&r) & 0x3bff) | ((kvt_next(&r) & 1) << 15)); /* |x| < 1 */
      memcpy(dstb + 2 * j, &h, 2);
      ff[j] = ref_f16(h);
    } else {
      memcpy(dstb + 4 * j, &x, 4);
      ff[j] = x;
    }
  }
  int64_t slots[20];
  for (size_t i = 0; i < n; i++) slots[i] = (int64_t)(3 * i + 1);
  void *dloc = upload_loc(slots, n, KVC_INDEX_I64);
  void *dk = kvt_dev_alloc(n * ke * es), *dv = kvt_dev_alloc(n * ve * es);
  kvt_h2d(dk, k, n * ke * es);
  kvt_h2d(dv, v, n * ve * es);
  float *dks = kvt_dev_alloc(8);
  kvt_h2d(dks, &kscale, 4);
  kvt_h2d(dks + 1, &vscale, 4);
  KVT_OK(kvc_kv_pool_set_kv(p, 0, dloc, KVC_INDEX_I64, n, dk, dv, src, 0, 0, by_ptr ? dks : NULL,
                            by_ptr ? 7.0f : kscale, by_ptr ? dks + 1 : NULL, by_ptr ? 7.0f : vscale, NULL));
  uint8_t *kp = kvt_read_buf(p, KVC_REGION_K, 0, NULL), *vp = kvt_read_buf(p, KVC_REGION_V, 0, NULL);
  const int e4 = dst == KVC_DTYPE_FP8_E4M3;
  for (size_t i = 0; i < n; i++) {
    for (size_t e = 0; e < ke; e++)
      if (kp[slots[i] * ke + e] != ref_fp8((double)(kf[i * ke + e] / kscale), e4))
        fail_msg("K item %zu elem %zu: %02x vs ref %02x (x=%g)", i, e, kp[slots[i] * ke + e],
                 ref_fp8((double)(kf[i * ke + e] / kscale), e4), (double)kf[i * ke + e]);
    for (size_t e = 0; e < ve; e++)
      assert_int_equal(vp[slots[i] * ve + e], ref_fp8((double)(vf[i * ve + e] / vscale), e4));
  }
  /* input unchanged */
  uint8_t *back = malloc(n * ke * es);
  kvt_d2h(back, dk, n * ke * es);
  assert_memory_equal(back, k, n * ke * es);
  free(back);
  free(kp);
  free(vp);
  free(kf);
  free(vf);
  free(k);
  free(v);
  kvt_dev_free(dloc);
  kvt_dev_free(dk);
  kvt_dev_free(dv);
  kvt_dev_free(dks);
  kvc_kv_pool_destroy(p);
}

static void test_set_kv_fp8_quantizing_write(void **state) {
  (void)state;
  uint64_t s = kvt_seed();
  const kvc_dtype srcs[] = {KVC_DTYPE_BF16, KVC_DTYPE_F16, KVC_DTYPE_F32};
  for (int a = 0; a < 3; a++) {
    check_quant(srcs[a], KVC_DTYPE_FP8_E4M3, 1.0f, 1.0f, 0, s + (uint64_t)a);
    check_quant(srcs[a], KVC_DTYPE_FP8_E4M3, 0.5f, 3.0f, 0, s + 10 + (uint64_t)a);
    check_quant(srcs[a], KVC_DTYPE_FP8_E4M3, 0.5f, 3.0f, 1, s + 10 + (uint64_t)a); /* pointer == value */
    check_quant(srcs[a], KVC_DTYPE_FP8_E5M2, 2.0f, 0.25f, 1, s + 20 + (uint64_t)a);
  }
}

static void test_fp8_reference_hand_values(void **state) {
  (void)state;
  /* hand-checked: 448 max, saturation, half-way ties to even, subnormals */
  assert_int_equal(ref_fp8(448.0, 1), 0x7e);
  assert_int_equal(ref_fp8(1e6, 1), 0x7e);
  assert_int_equal(ref_fp8(-1e6, 1), 0xfe);
  assert_int_equal(ref_fp8(1.0, 1), 0x38);
  assert_int_equal(ref_fp8(1.0625, 1), 0x38);      /* tie between 1.0 (even) and 1.125 */
  assert_int_equal(ref_fp8(1.1875, 1), 0x3a);      /* tie between 1.125 and 1.25 (even) */
  assert_int_equal(ref_fp8(0.001953125, 1), 0x01); /* 2^-9, smallest subnormal */
  assert_int_equal(ref_fp8(57344.0, 0), 0x7b);
  assert_int_equal(ref_fp8(1.0, 0), 0x3c);
}

/* FP4 pool: quantizing write from bf16/f32, K_SCALE/V_SCALE in the same launch; gather
 * dequantizes only the rows asked for. */
static void test_fp4_write_and_gather(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  const kvc_dtype srcs[] = {KVC_DTYPE_BF16, KVC_DTYPE_F32};
  for (int a = 0; a < 2; a++) {
    const int H = 2, D = 32;
    kvc_kv_pool *p = kvt_mha_pool(KVC_KV_MHA_FP4, KVC_DTYPE_BF16, H, D, 0, 40, 1, 1);
    const size_t n = 9, ne = (size_t)H * D, es = kvc_dtype_size(srcs[a]);
    float *kf = malloc(2 * n * ne * sizeof(float));
    uint8_t *kin = malloc(2 * n * ne * es);
    for (size_t i = 0; i < 2 * n * ne; i++) {
      float x = (kvt_uniform(&r) - 0.5f) * (float)(1 << (i / 16 % 7));
      if (srcs[a] == KVC_DTYPE_BF16) {
        uint16_t h = ref_to_bf16(x);
        memcpy(kin + 2 * i, &h, 2);
        kf[i] = ref_bf16(h);
      } else {
        memcpy(kin + 4 * i, &x, 4);
        kf[i] = x;
      }
    }
    int64_t slots[9] = {0, 40, 5, 6, 7, 20, 33, 2, 41 /* out of range: rows = 41 */};
    void *dloc = upload_loc(slots, n, KVC_INDEX_I64);
    uint8_t *dk = kvt_dev_alloc(2 * n * ne * es);
    kvt_h2d(dk, kin, 2 * n * ne * es);
    KVT_OK(kvc_kv_pool_set_kv(p, 0, dloc, KVC_INDEX_I64, n, dk, dk + n * ne * es, srcs[a], 0, 0, NULL, 1.0f, NULL, 1.0f,
                              NULL));
    uint8_t *kp = kvt_read_buf(p, KVC_REGION_K, 0, NULL), *vp = kvt_read_buf(p, KVC_REGION_V, 0, NULL);
    uint8_t *ksc = kvt_read_buf(p, KVC_REGION_K_SCALE, 0, NULL), *vsc = kvt_read_buf(p, KVC_REGION_V_SCALE, 0, NULL);
    for (size_t i = 0; i < n - 1; i++)
      for (size_t side = 0; side < 2; side++)
        for (size_t b = 0; b < ne / 16; b++) {
          uint8_t want[8], ws;
          ref_fp4_block(kf + side * n * ne + i * ne + b * 16, want, &ws);
          const uint8_t *got = (side ? vp : kp) + slots[i] * (ne / 2) + b * 8;
          assert_memory_equal(got, want, 8);
          assert_int_equal((side ? vsc : ksc)[slots[i] * (ne / 16) + b], ws);
        }
    /* gather to f32: decoded value x scale */
    float *go = kvt_dev_alloc(2 * n * ne * 4);
    KVT_OK(kvc_kv_pool_gather_kv(p, 0, dloc, KVC_INDEX_I64, n, go, go + n * ne, KVC_DTYPE_F32, NULL));
    float *hg = malloc(2 * n * ne * 4);
    kvt_d2h(hg, go, 2 * n * ne * 4);
    static const float mag[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (size_t i = 0; i < n; i++)
      for (size_t e = 0; e < ne; e++) {
        float want = 0;
        if (i < n - 1) {
          uint8_t byte = kp[slots[i] * (ne / 2) + e / 2], c = (uint8_t)((byte >> (4 * (e & 1))) & 15);
          want = ldexpf((c & 8) ? -mag[c & 7] : mag[c & 7], (int)ksc[slots[i] * (ne / 16) + e / 16] - 127);
        }
        assert_true(hg[i * ne + e] == want);
      }
    free(hg);
    free(kp);
    free(vp);
    free(ksc);
    free(vsc);
    free(kf);
    free(kin);
    kvt_dev_free(go);
    kvt_dev_free(dloc);
    kvt_dev_free(dk);
    kvc_kv_pool_destroy(p);
  }
}

static void test_gather_converts_fp8_to_bf16(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  kvc_kv_pool *p = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_FP8_E4M3, 2, 16, 8, 30, 1, 1);
  kvt_fill_pool(p, &r);
  int64_t slots[4] = {1, 30, 0, 99};
  void *dloc = upload_loc(slots, 4, KVC_INDEX_I32);
  uint16_t *go = kvt_dev_alloc(4 * 48 * 2);
  KVT_OK(kvc_kv_pool_gather_kv(p, 0, dloc, KVC_INDEX_I32, 4, go, go + 4 * 32, KVC_DTYPE_BF16, NULL));
  uint16_t h[4 * 48];
  kvt_d2h(h, go, sizeof h);
  uint8_t *kp = kvt_read_buf(p, KVC_REGION_K, 0, NULL), *vp = kvt_read_buf(p, KVC_REGION_V, 0, NULL);
  for (int i = 0; i < 3; i++) {
    for (int e = 0; e < 32; e++) {
      uint8_t c = kp[slots[i] * 32 + e];
      if ((c & 0x7f) == 0x7f) continue; /* NaN */
      assert_int_equal(h[i * 32 + e], ref_to_bf16((float)ref_fp8_val(c, 1)));
    }
    for (int e = 0; e < 16; e++) {
      uint8_t c = vp[slots[i] * 16 + e];
      if ((c & 0x7f) == 0x7f) continue;
      assert_int_equal(h[128 + i * 16 + e], ref_to_bf16((float)ref_fp8_val(c, 1)));
    }
  }
  for (int e = 0; e < 32; e++) assert_int_equal(h[3 * 32 + e], 0);
  free(kp);
  free(vp);
  kvt_dev_free(go);
  kvt_dev_free(dloc);
  kvc_kv_pool_destroy(p);
}

static void test_noop_and_errors(void **state) {
  (void)state;
  kvc_kv_pool *p = kvt_mha_pool(KVC_KV_MHA_NOOP, KVC_DTYPE_BF16, 2, 8, 0, 100, 2, 1);
  int64_t one = 1;
  void *dloc = upload_loc(&one, 1, KVC_INDEX_I64);
  void *dk = kvt_dev_alloc(64);
  KVT_STATUS(kvc_kv_pool_set_kv(p, 0, dloc, KVC_INDEX_I64, 1, dk, dk, KVC_DTYPE_BF16, 0, 0, NULL, 1, NULL, 1, NULL),
             KVC_ERR_UNSUPPORTED);
  KVT_OK(kvc_kv_pool_move(p, dloc, dloc, KVC_INDEX_I64, 1, NULL)); /* no-op */
  kvc_kv_pool_destroy(p);
  p = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_BF16, 2, 8, 0, 100, 2, 1);
  KVT_OK(kvc_kv_pool_set_kv(p, 0, NULL, KVC_INDEX_I64, 0, NULL, NULL, KVC_DTYPE_BF16, 0, 0, NULL, 1, NULL, 1, NULL));
  KVT_STATUS(kvc_kv_pool_set_kv(p, 5, dloc, KVC_INDEX_I64, 1, dk, dk, KVC_DTYPE_BF16, 0, 0, NULL, 1, NULL, 1, NULL),
             KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_kv_pool_set_kv(p, 0, dloc, KVC_INDEX_I64, 1, dk, NULL, KVC_DTYPE_BF16, 0, 0, NULL, 1, NULL, 1, NULL),
             KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_kv_pool_set_kv(p, 0, dloc, KVC_INDEX_I64, 1, dk, dk, KVC_DTYPE_U8, 0, 0, NULL, 1, NULL, 1, NULL),
             KVC_ERR_UNSUPPORTED);
  kvc_kv_pool_destroy(p);
  p = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_FP8_E4M3, 2, 8, 0, 100, 2, 1);
  KVT_STATUS(kvc_kv_pool_set_kv(p, 0, dloc, KVC_INDEX_I64, 1, dk, dk, KVC_DTYPE_BF16, 0, 0, NULL, 0.0f, NULL, 1, NULL),
             KVC_ERR_INVALID_ARGUMENT);
  kvc_kv_pool_destroy(p);
  kvt_dev_free(dloc);
  kvt_dev_free(dk);
}

/* Level-1 kvc_store_kv: caller buffers with padded cache rows, K != V widths. */
static void test_store_kv_level1(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  const int64_t rows = 50, kb = 96, vb = 40, cs = 160;
  uint8_t *hc = malloc((size_t)(rows * cs)), *hk = malloc(6 * (size_t)kb), *hv = malloc(6 * (size_t)vb);
  for (int64_t i = 0; i < rows * cs; i++) hc[i] = (uint8_t)kvt_next(&r);
  for (int64_t i = 0; i < 6 * kb; i++) hk[i] = (uint8_t)kvt_next(&r);
  for (int64_t i = 0; i < 6 * vb; i++) hv[i] = (uint8_t)kvt_next(&r);
  uint8_t *kc = kvt_dev_alloc((size_t)(rows * cs)), *vc = kvt_dev_alloc((size_t)(rows * cs));
  kvt_h2d(kc, hc, (size_t)(rows * cs));
  kvt_h2d(vc, hc, (size_t)(rows * cs));
  void *dk = kvt_dev_alloc(6 * (size_t)kb), *dv = kvt_dev_alloc(6 * (size_t)vb);
  kvt_h2d(dk, hk, 6 * (size_t)kb);
  kvt_h2d(dv, hv, 6 * (size_t)vb);
  int64_t slots[6] = {0, 49, 50, -3, 7, 8};
  void *dloc = upload_loc(slots, 6, KVC_INDEX_I32);
  KVT_OK(kvc_store_kv(kvt_ctx, kc, vc, cs, cs, rows, dk, dv, 0, 0, kb, vb, dloc, KVC_INDEX_I32, 6, NULL));
  uint8_t *ok = malloc((size_t)(rows * cs)), *ov = malloc((size_t)(rows * cs));
  kvt_d2h(ok, kc, (size_t)(rows * cs));
  kvt_d2h(ov, vc, (size_t)(rows * cs));
  uint8_t *ek = malloc((size_t)(rows * cs)), *ev = malloc((size_t)(rows * cs));
  memcpy(ek, hc, (size_t)(rows * cs));
  memcpy(ev, hc, (size_t)(rows * cs));
  for (int i = 0; i < 6; i++) {
    if (slots[i] < 0 || slots[i] >= rows) continue;
    memcpy(ek + slots[i] * cs, hk + i * kb, (size_t)kb);
    memcpy(ev + slots[i] * cs, hv + i * vb, (size_t)vb);
  }
  assert_memory_equal(ok, ek, (size_t)(rows * cs));
  assert_memory_equal(ov, ev, (size_t)(rows * cs));
  free(hc);
  free(hk);
  free(hv);
  free(ok);
  free(ov);
  free(ek);
  free(ev);
  kvt_dev_free(kc);
  kvt_dev_free(vc);
  kvt_dev_free(dk);
  kvt_dev_free(dv);
  kvt_dev_free(dloc);
}

/* CUDA only: a pool over 2^31 bytes per buffer; 64-bit offsets at the last slot. */
static void test_large_pool_64bit_offsets(void **state) {
  (void)state;
  kvt_require_cuda();
  const int64_t size = 1100000; /* rows * 2048 B = 2.25 GB per buffer */
  kvc_kv_pool *p = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_BF16, 8, 128, 0, size, 1, 1);
  const int64_t rows = size + 1;
  uint8_t row[2 * 2048];
  for (int i = 0; i < 2 * 2048; i++) row[i] = (uint8_t)(i * 7 + 1);
  uint8_t *dk = kvt_dev_alloc(sizeof row);
  kvt_h2d(dk, row, sizeof row);
  int64_t slots[2] = {rows - 1, rows - 2};
  void *dloc = upload_loc(slots, 2, KVC_INDEX_I64);
  KVT_OK(kvc_kv_pool_set_kv(p, 0, dloc, KVC_INDEX_I64, 1, dk, dk + 2048, KVC_DTYPE_BF16, 0, 0, NULL, 1, NULL, 1, NULL));
  KVT_OK(kvc_kv_pool_move(p, (uint8_t *)dloc + 8, dloc, KVC_INDEX_I64, 1, NULL)); /* last -> last - 1 */
  kvc_buffer_desc k = kvt_buf(p, KVC_REGION_K, 0), v = kvt_buf(p, KVC_REGION_V, 0);
  uint8_t got[2048];
  for (int64_t s = rows - 2; s < rows; s++) {
    kvt_d2h(got, (uint8_t *)k.data + s * 2048, 2048);
    assert_memory_equal(got, row, 2048);
    kvt_d2h(got, (uint8_t *)v.data + s * 2048, 2048);
    assert_memory_equal(got, row + 2048, 2048);
  }
  kvt_dev_free(dk);
  kvt_dev_free(dloc);
  kvc_kv_pool_destroy(p);
}

/* CUDA only: differential against the host twin on fresh random inputs, poisoned outputs. */
static void test_differential_set_kv_vs_host(void **state) {
  (void)state;
  kvt_require_cuda();
  kvt_rng r = {kvt_seed()};
  const kvc_dtype pool_dt[] = {KVC_DTYPE_FP8_E4M3, KVC_DTYPE_FP8_E5M2, KVC_DTYPE_F16, KVC_DTYPE_BF16};
  const kvc_dtype src_dt[] = {KVC_DTYPE_F32, KVC_DTYPE_BF16, KVC_DTYPE_F32, KVC_DTYPE_F16};
  for (int a = 0; a < 4; a++) {
    kvc_kv_pool_config c = KVC_KV_POOL_CONFIG_INIT;
    c.dtype = pool_dt[a];
    c.head_num = 3;
    c.head_dim = 40;
    c.v_head_dim = 24;
    c.size = 2000;
    c.layer_num = 1;
    kvc_kv_pool *pd = NULL, *ph = NULL;
    KVT_OK(kvc_kv_pool_create(kvt_ctx, &c, &pd));
    KVT_OK(kvc_kv_pool_create(kvt_host, &c, &ph));
    const size_t n = 1500, ke = 120, ve = 72, es = kvc_dtype_size(src_dt[a]);
    uint8_t *k = malloc(n * (ke + ve) * es);
    for (size_t i = 0; i < n * (ke + ve); i++) {
      float x = (kvt_uniform(&r) - 0.5f) * 1000.0f;
      if (es == 4) memcpy(k + 4 * i, &x, 4);
      else {
        uint16_t h = (uint16_t)kvt_next(&r);
        if ((h & 0x7c00) == 0x7c00) h &= 0xbfff; /* keep finite-ish */
        memcpy(k + 2 * i, &h, 2);
      }
    }
    int32_t *slots = malloc(n * 4);
    for (size_t i = 0; i < n; i++) slots[i] = (int32_t)kvt_range(&r, -3, 2003);
    void *dk = kvt_dev_alloc(n * (ke + ve) * es), *dl = kvt_dev_alloc(n * 4);
    kvt_h2d(dk, k, n * (ke + ve) * es);
    kvt_h2d(dl, slots, n * 4);
    kvc_buffer_desc kd = kvt_buf(pd, KVC_REGION_K, 0), vd = kvt_buf(pd, KVC_REGION_V, 0);
    kvt_poison(kd.data, (size_t)kd.total_bytes);
    kvt_poison(vd.data, (size_t)vd.total_bytes);
    kvc_buffer_desc kh, vh;
    memset(&kh, 0, sizeof kh);
    kh.struct_size = vh.struct_size = sizeof kh;
    KVT_OK(kvc_kv_pool_buffer(ph, KVC_REGION_K, 0, &kh));
    KVT_OK(kvc_kv_pool_buffer(ph, KVC_REGION_V, 0, &vh));
    memset(kh.data, 0xA5, (size_t)kh.total_bytes);
    memset(vh.data, 0xA5, (size_t)vh.total_bytes);
    /* unique slots so the winner of duplicates does not matter */
    uint8_t *seen = calloc(2100, 1);
    for (size_t i = 0; i < n; i++) {
      if (slots[i] < 0 || slots[i] >= 2100) continue;
      if (seen[slots[i]]) slots[i] = -7;
      else seen[slots[i]] = 1;
    }
    free(seen);
    kvt_h2d(dl, slots, n * 4);
    const float ks = 1.7f, vs = 0.3f;
    KVT_OK(kvc_kv_pool_set_kv(pd, 0, dl, KVC_INDEX_I32, n, dk, (uint8_t *)dk + n * ke * es, src_dt[a], 0, 0, NULL, ks,
                              NULL, vs, NULL));
    KVT_OK(kvc_kv_pool_set_kv(ph, 0, slots, KVC_INDEX_I32, n, k, k + n * ke * es, src_dt[a], 0, 0, NULL, ks, NULL, vs,
                              NULL));
    uint8_t *got = malloc((size_t)kd.total_bytes);
    kvt_d2h(got, kd.data, (size_t)kd.total_bytes);
    assert_memory_equal(got, kh.data, (size_t)kd.total_bytes);
    free(got);
    got = malloc((size_t)vd.total_bytes);
    kvt_d2h(got, vd.data, (size_t)vd.total_bytes);
    assert_memory_equal(got, vh.data, (size_t)vd.total_bytes);
    free(got);
    free(k);
    free(slots);
    kvt_dev_free(dk);
    kvt_dev_free(dl);
    kvc_kv_pool_destroy(pd);
    kvc_kv_pool_destroy(ph);
  }
}

/* Pools with no V region (MLA, MLA FP4, NSA bf16) and K-only reads of an MHA pool: a
 * NULL v / v_out is ignored (never written, no address formed from it), a given one is
 * never written either, and a NULL k / k_out is refused with nothing changed. The host
 * twin used to form NULL + i x stride for the absent side (UB;
 * tests/fuzz/corpus/fuzz_kv_pool/kv-rows-*). */
static void test_rows_without_a_v_side(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  const kvc_kv_pool_config cfgs[] = {
      kvt_latent_config(KVC_KV_MLA, KVC_DTYPE_BF16, 32, 16, 64, 1, 1),
      kvt_latent_config(KVC_KV_MLA_FP4, KVC_DTYPE_BF16, 32, 16, 64, 1, 1),
      kvt_latent_config(KVC_KV_NSA, KVC_DTYPE_BF16, 32, 16, 256, 1, 64),
      kvt_mha_config(KVC_KV_MHA, KVC_DTYPE_BF16, 2, 24, 8, 64, 1, 1),
  };
  const size_t row = 48 * 2, n = 3; /* 48 bf16 values per row (MHA: 2 x 24 in K) */
  const int64_t slots[3] = {1, 7, 60};
  for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
    const int mha = cfgs[c].kind == KVC_KV_MHA, fp4 = cfgs[c].kind == KVC_KV_MLA_FP4;
    kvc_kv_pool *p = kvt_pool_on(kvt_ctx, cfgs[c]);
    kvt_fill_pool(p, &r);
    const kvc_region_kind reg = mha ? KVC_REGION_K : KVC_REGION_KV;
    uint16_t src[3 * 48];
    for (size_t i = 0; i < LEN_OF(src); i++) src[i] = (uint16_t)(0x3c00 + kvt_range(&r, 0, 255)); /* finite bf16 */
    void *dloc = upload_loc(slots, n, KVC_INDEX_I64);
    uint8_t *dk = kvt_dev_alloc(n * row), *dv = kvt_dev_alloc(n * row), *dout = kvt_dev_alloc(n * row);
    uint8_t *dvout = kvt_dev_alloc(n * row), out[3 * 96], out2[3 * 96], vout[3 * 96], sentinel[3 * 96];
    kvt_h2d(dk, src, sizeof src);
    memset(sentinel, 0xee, sizeof sentinel);
    /* NULL k / k_out: refused, the pool unchanged */
    size_t bytes;
    uint8_t *was = kvt_read_buf(p, reg, 0, &bytes);
    KVT_STATUS(kvc_kv_pool_set_kv(p, 0, dloc, KVC_INDEX_I64, n, NULL, dv, KVC_DTYPE_BF16, 0, 0, NULL, 1, NULL, 1, NULL),
               KVC_ERR_INVALID_ARGUMENT);
    KVT_STATUS(kvc_kv_pool_gather_kv(p, 0, dloc, KVC_INDEX_I64, n, NULL, dvout, KVC_DTYPE_BF16, NULL),
               KVC_ERR_INVALID_ARGUMENT);
    uint8_t *now = kvt_read_buf(p, reg, 0, NULL);
    assert_memory_equal(now, was, bytes);
    free(now);
    free(was);
    if (!mha) { /* latent rows come from k alone: a NULL v is fine */
      KVT_OK(kvc_kv_pool_set_kv(p, 0, dloc, KVC_INDEX_I64, n, dk, NULL, KVC_DTYPE_BF16, 0, 0, NULL, 1, NULL, 1, NULL));
      /* with a v_stride too (it has no rows to apply to) */
      KVT_OK(kvc_kv_pool_set_kv(p, 0, dloc, KVC_INDEX_I64, n, dk, NULL, KVC_DTYPE_BF16, 0, 48, NULL, 1, NULL, 1, NULL));
    }
    KVT_OK(kvc_kv_pool_gather_kv(p, 0, dloc, KVC_INDEX_I64, n, dout, NULL, KVC_DTYPE_BF16, NULL));
    KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
    kvt_d2h(out, dout, sizeof out);
    if (!mha && !fp4) assert_memory_equal(out, src, sizeof out); /* bf16 rows: exact */
    if (mha) {                                                   /* K only: the pool's own K rows */
      uint8_t *k0 = kvt_read_buf(p, KVC_REGION_K, 0, NULL);
      for (size_t i = 0; i < n; i++) assert_memory_equal(out + i * row, k0 + slots[i] * (int64_t)row, row);
      free(k0);
    }
    /* a given v / v_out on a kind without V: ignored and never written */
    if (!mha) {
      kvt_h2d(dv, sentinel, sizeof sentinel);
      KVT_OK(kvc_kv_pool_set_kv(p, 0, dloc, KVC_INDEX_I64, n, dk, dv, KVC_DTYPE_BF16, 0, 0, NULL, 1, NULL, 1, NULL));
      kvt_h2d(dvout, sentinel, sizeof sentinel);
      KVT_OK(kvc_kv_pool_gather_kv(p, 0, dloc, KVC_INDEX_I64, n, dout, dvout, KVC_DTYPE_BF16, NULL));
      KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
      kvt_d2h(out2, dout, sizeof out2);
      kvt_d2h(vout, dvout, sizeof vout);
      assert_memory_equal(out2, out, sizeof out);
      assert_memory_equal(vout, sentinel, sizeof vout);
    }
    kvt_dev_free(dloc);
    kvt_dev_free(dk);
    kvt_dev_free(dv);
    kvt_dev_free(dout);
    kvt_dev_free(dvout);
    kvc_kv_pool_destroy(p);
  }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_set_kv_copy_every_dtype_and_layout),
    cmocka_unit_test(test_fp8_reference_hand_values),
    cmocka_unit_test(test_set_kv_fp8_quantizing_write),
    cmocka_unit_test(test_fp4_write_and_gather),
    cmocka_unit_test(test_gather_converts_fp8_to_bf16),
    cmocka_unit_test(test_noop_and_errors),
    cmocka_unit_test(test_rows_without_a_v_side),
    cmocka_unit_test(test_store_kv_level1),
    cmocka_unit_test(test_large_pool_64bit_offsets),
    cmocka_unit_test(test_differential_set_kv_vs_host),
};

KVT_MAIN("kv_mha", tests)
