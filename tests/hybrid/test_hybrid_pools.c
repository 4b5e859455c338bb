/* test_hybrid_pools.c — SGLang's HybridReqToTokenPool (spec 3) and HybridLinearKVPool
 * (spec 9.8): slot order, device mappings, rollback on Mamba shortage, free_mamba_cache
 * with keep, lazy track slots, get_mamba_indices, layer translation. */
#include "harness.h"

static kvc_mamba_pool *make_mamba(int32_t size) {
  kvc_mamba_pool_config c = KVC_MAMBA_POOL_CONFIG_INIT;
  kvc_mamba_shape conv = {2, 0, {4, 8, 0}};
  const int32_t ids[2] = {1, 3};
  c.size = size, c.num_layers = 2, c.num_conv = 1, c.conv_shapes = &conv, c.layer_ids = ids;
  c.temporal_shape[0] = 2, c.temporal_shape[1] = 4, c.temporal_shape[2] = 4;
  kvc_mamba_pool *p = NULL;
  KVT_OK(kvc_mamba_pool_create(kvt_ctx, &c, &p));
  return p;
}

static kvc_req_to_token_pool *make_rp(int32_t size) {
  kvc_req_to_token_pool_config c = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  c.size = size, c.max_context_len = 16;
  kvc_req_to_token_pool *p = NULL;
  KVT_OK(kvc_req_to_token_pool_create(kvt_ctx, &c, &p));
  return p;
}

static kvc_hybrid_req_pool *make_hybrid(kvc_req_to_token_pool *rp, kvc_mamba_pool *mp, uint32_t flags, int32_t pp) {
  kvc_hybrid_req_pool_config c = KVC_HYBRID_REQ_POOL_CONFIG_INIT;
  c.req_pool = rp, c.mamba_pool = mp, c.flags = flags, c.pp = pp;
  kvc_hybrid_req_pool *h = NULL;
  KVT_OK(kvc_hybrid_req_pool_create(kvt_ctx, &c, &h));
  return h;
}

/* Device mappings equal the host mirrors. */
static void expect_mappings(const kvc_hybrid_req_pool *h, int32_t size) {
  const int32_t pp = kvc_hybrid_req_pool_pp(h);
  int32_t *m = malloc((size_t)(size + 1) * 4), *t = malloc((size_t)(size + 1) * (size_t)pp * 4);
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  kvt_d2h(m, kvc_hybrid_req_pool_mapping(h), (size_t)(size + 1) * 4);
  for (int32_t r = 0; r <= size; r++) assert_int_equal(m[r], kvc_hybrid_req_pool_mamba_slot(h, r));
  if (kvc_hybrid_req_pool_track_mapping(h)) {
    kvt_d2h(t, kvc_hybrid_req_pool_track_mapping(h), (size_t)(size + 1) * (size_t)pp * 4);
    for (int32_t r = 0; r <= size; r++)
      for (int32_t k = 0; k < pp; k++) assert_int_equal(t[r * pp + k], kvc_hybrid_req_pool_track_slots(h, r)[k]);
  }
  free(m), free(t);
}

static void test_alloc_order_and_mappings(void **state) {
  (void)state;
  kvc_req_to_token_pool *rp = make_rp(4);
  kvc_mamba_pool *mp = make_mamba(8);
  kvc_hybrid_req_pool *h = make_hybrid(rp, mp, KVC_HYBRID_TRACK, 2);
  int32_t rows[2] = {0, 0}, ms[2] = {0, 0}, pp[4] = {0, 0, 0, 0};
  KVT_OK(kvc_hybrid_req_pool_alloc(h, 2, rows, ms, pp, NULL));
  assert_int_equal(rows[0], 1);
  assert_int_equal(rows[1], 2);
  const int32_t want_ms[2] = {1, 4}, want_pp[4] = {2, 3, 5, 6}; /* spec 14 example */
  assert_memory_equal(ms, want_ms, sizeof ms);
  assert_memory_equal(pp, want_pp, sizeof pp);
  expect_mappings(h, 4);
  /* gather */
  const int64_t q[3] = {2, 1, 99};
  int64_t *dq = kvt_dev_alloc(sizeof q);
  int32_t *dr = kvt_dev_alloc(3 * 4);
  kvt_h2d(dq, q, sizeof q);
  KVT_OK(kvc_hybrid_req_pool_get_mamba_indices(h, dq, KVC_INDEX_I64, dr, 3, NULL));
  int32_t r[3];
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  kvt_d2h(r, dr, sizeof r);
  assert_int_equal(r[0], 4);
  assert_int_equal(r[1], 1);
  assert_int_equal(r[2], 0);
  /* shortage: 2 free Mamba slots, a new request needs 3: rows untouched */
  int32_t row3 = 0, ms3 = 0, pp3[2] = {0, 0};
  const int32_t rows_before = kvc_req_to_token_pool_available(rp);
  KVT_STATUS(kvc_hybrid_req_pool_alloc(h, 1, &row3, &ms3, pp3, NULL), KVC_ERR_OUT_OF_SLOTS);
  assert_int_equal(row3, 0);
  assert_int_equal(kvc_req_to_token_pool_available(rp), rows_before);
  assert_int_equal(kvc_mamba_pool_available(mp), 2);
  /* re-alloc of held requests keeps everything */
  KVT_OK(kvc_hybrid_req_pool_alloc(h, 2, rows, ms, pp, NULL));
  assert_memory_equal(ms, want_ms, sizeof ms);
  assert_int_equal(kvc_mamba_pool_available(mp), 2);
  /* free with keep = 0: running slot and track entry 1 go, entry 0 stays */
  KVT_OK(kvc_hybrid_req_pool_free_mamba_cache(h, rows[0], 0, NULL));
  assert_int_equal(kvc_mamba_pool_available(mp), 4);
  assert_int_equal(kvc_hybrid_req_pool_mamba_slot(h, rows[0]), 0);
  assert_int_equal(kvc_hybrid_req_pool_track_slots(h, rows[0])[0], 2);
  assert_int_equal(kvc_mamba_pool_is_held(mp, 2), 1);
  KVT_STATUS(kvc_hybrid_req_pool_free_mamba_cache(h, rows[0], -1, NULL), KVC_ERR_MISUSE);
  KVT_OK(kvc_hybrid_req_pool_free_mamba_cache(h, rows[1], -1, NULL));
  assert_int_equal(kvc_mamba_pool_available(mp), 7);
  expect_mappings(h, 4);
  KVT_OK(kvc_hybrid_req_pool_clear(h, NULL));
  assert_int_equal(kvc_mamba_pool_available(mp), 8);
  assert_int_equal(kvc_req_to_token_pool_available(rp), 4);
  expect_mappings(h, 4);
  kvt_dev_free(dq), kvt_dev_free(dr);
  kvc_hybrid_req_pool_destroy(h);
  kvc_mamba_pool_destroy(mp);
  kvc_req_to_token_pool_destroy(rp);
}

static void test_lazy_and_pp1(void **state) {
  (void)state;
  kvc_req_to_token_pool *rp = make_rp(4);
  kvc_mamba_pool *mp = make_mamba(8);
  kvc_hybrid_req_pool *h = make_hybrid(rp, mp, KVC_HYBRID_TRACK | KVC_HYBRID_LAZY, 2);
  int32_t row = 0, m = 0, pp[2] = {0, 0};
  KVT_OK(kvc_hybrid_req_pool_alloc(h, 1, &row, &m, pp, NULL));
  assert_int_equal(m, 1);
  assert_int_equal(pp[0], 2);
  assert_int_equal(pp[1], -1);
  int32_t extra = 0;
  KVT_OK(kvc_mamba_pool_alloc(mp, 1, &extra, NULL));
  KVT_OK(kvc_hybrid_req_pool_set_track_slot(h, row, 1, extra, NULL));
  assert_int_equal(kvc_hybrid_req_pool_track_slots(h, row)[1], extra);
  expect_mappings(h, 4);
  KVT_OK(kvc_hybrid_req_pool_free_mamba_cache(h, row, 1, NULL)); /* keeps entry 1 */
  assert_int_equal(kvc_mamba_pool_available(mp), 8 - 1);
  kvc_hybrid_req_pool_destroy(h);
  KVT_OK(kvc_mamba_pool_clear(mp));
  KVT_OK(kvc_req_to_token_pool_clear(rp));
  h = make_hybrid(rp, mp, 0, 1);
  int32_t rows[3] = {0, 0, 0}, ms[3] = {0, 0, 0};
  KVT_OK(kvc_hybrid_req_pool_alloc(h, 3, rows, ms, NULL, NULL));
  assert_int_equal(ms[2], 3);
  KVT_STATUS(kvc_hybrid_req_pool_free_mamba_cache(h, rows[0], 0, NULL), KVC_ERR_INVALID_ARGUMENT);
  KVT_OK(kvc_hybrid_req_pool_free_mamba_cache(h, rows[0], -1, NULL));
  expect_mappings(h, 4);
  kvc_hybrid_req_pool_destroy(h);
  kvc_mamba_pool_destroy(mp);
  kvc_req_to_token_pool_destroy(rp);
}

static void test_hybrid_kv_pool(void **state) {
  (void)state;
  kvc_mamba_pool *mp = make_mamba(4);
  kvc_kv_pool_config kc = KVC_KV_POOL_CONFIG_INIT;
  kc.size = 16, kc.page_size = 1, kc.dtype = KVC_DTYPE_F32, kc.head_num = 1, kc.head_dim = 4;
  const int32_t full[2] = {0, 2};
  kvc_hybrid_kv_pool_config c = KVC_HYBRID_KV_POOL_CONFIG_INIT;
  c.num_full_layers = 2, c.full_layer_ids = full, c.kv = &kc, c.mamba_pool = mp;
  kvc_hybrid_kv_pool *p = NULL;
  KVT_OK(kvc_hybrid_kv_pool_create(kvt_ctx, &c, &p));
  assert_ptr_equal(kvc_hybrid_kv_pool_mamba(p), mp);
  int32_t idx;
  KVT_OK(kvc_hybrid_kv_pool_layer(p, 2, &idx));
  assert_int_equal(idx, 1);
  KVT_STATUS(kvc_hybrid_kv_pool_layer(p, 1, &idx), KVC_ERR_INVALID_ARGUMENT);
  const float k[4] = {1, 2, 3, 4}, v[4] = {5, 6, 7, 8};
  float *dk = kvt_dev_alloc(16), *dv = kvt_dev_alloc(16);
  int64_t *dl = kvt_dev_alloc(8);
  const int64_t slot = 5;
  kvt_h2d(dk, k, 16), kvt_h2d(dv, v, 16), kvt_h2d(dl, &slot, 8);
  KVT_OK(
      kvc_hybrid_kv_pool_set_kv(p, 2, dl, KVC_INDEX_I64, 1, dk, dv, KVC_DTYPE_F32, 0, 0, NULL, 1.f, NULL, 1.f, NULL));
  KVT_STATUS(
      kvc_hybrid_kv_pool_set_kv(p, 3, dl, KVC_INDEX_I64, 1, dk, dv, KVC_DTYPE_F32, 0, 0, NULL, 1.f, NULL, 1.f, NULL),
      KVC_ERR_INVALID_ARGUMENT);
  kvc_buffer_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  KVT_OK(kvc_hybrid_kv_pool_buffer(p, KVC_REGION_V, 2, &d));
  assert_int_equal(d.layer_id, 2);
  float got[4];
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  kvt_d2h(got, (const char *)d.data + 5 * d.bytes_per_token, 16);
  assert_memory_equal(got, v, 16);
  float *ok = kvt_dev_alloc(16), *ov = kvt_dev_alloc(16);
  KVT_OK(kvc_hybrid_kv_pool_gather_kv(p, 2, dl, KVC_INDEX_I64, 1, ok, ov, KVC_DTYPE_F32, NULL));
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  kvt_d2h(got, ok, 16);
  assert_memory_equal(got, k, 16);
  kvt_dev_free(dk), kvt_dev_free(dv), kvt_dev_free(dl), kvt_dev_free(ok), kvt_dev_free(ov);
  kvc_hybrid_kv_pool_destroy(p);
  kvc_mamba_pool_destroy(mp);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_alloc_order_and_mappings),
    cmocka_unit_test(test_lazy_and_pp1),
    cmocka_unit_test(test_hybrid_kv_pool),
};
KVT_MAIN("hybrid_pools", tests)
