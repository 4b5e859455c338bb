/* test_swa_kv_pool.c — SGLang's SWAKVPool (spec 8): layer routing, set_kv at translated
 * slots (own translation or a precomputed vector), move on both sides, host offload with
 * the SWA mask computed from the host mapping. */
#include "harness.h"

#define HN 2
#define HD 4
#define SHD 8

static const int32_t full_ids[2] = {0, 2}, swa_ids[2] = {1, 3};

static kvc_swa_kv_pool *make_pool(void) {
  kvc_swa_kv_pool_config c = KVC_SWA_KV_POOL_CONFIG_INIT;
  c.dtype = KVC_DTYPE_F32;
  c.size_full = 32, c.size_swa = 16, c.page_size = 2;
  c.num_full_layers = 2, c.num_swa_layers = 2;
  c.full_layer_ids = full_ids, c.swa_layer_ids = swa_ids;
  c.head_num = HN, c.head_dim = HD, c.swa_head_dim = SHD;
  c.translate_capacity = 4; /* set_kv/move of 5 run in 2 chunks */
  kvc_swa_kv_pool *p = NULL;
  KVT_OK(kvc_swa_kv_pool_create(kvt_ctx, &c, &p));
  return p;
}

static kvc_swa_allocator *make_alloc(void) {
  kvc_swa_allocator_config c = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  c.size_full = 32, c.size_swa = 16, c.page_size = 2;
  kvc_swa_allocator *a = NULL;
  KVT_OK(kvc_swa_allocator_create(kvt_ctx, &c, &a));
  return a;
}

/* Reads row `slot` of (pool, region, local layer) into out (floats). */
static void read_row(kvc_kv_pool *pool, kvc_region_kind region, int32_t layer, int64_t slot, float *out) {
  kvc_buffer_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  KVT_OK(kvc_kv_pool_buffer(pool, region, layer, &d));
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  kvt_d2h(out, (const char *)d.data + slot * d.bytes_per_token, (size_t)d.bytes_per_token);
}

static void test_routing(void **state) {
  (void)state;
  kvc_swa_kv_pool *p = make_pool();
  int is_swa;
  int32_t idx;
  KVT_OK(kvc_swa_kv_pool_layer(p, 2, &is_swa, &idx));
  assert_int_equal(is_swa, 0);
  assert_int_equal(idx, 1);
  KVT_OK(kvc_swa_kv_pool_layer(p, 3, &is_swa, &idx));
  assert_int_equal(is_swa, 1);
  assert_int_equal(idx, 1);
  KVT_STATUS(kvc_swa_kv_pool_layer(p, 4, &is_swa, &idx), KVC_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvc_kv_pool_num_buffers(kvc_swa_kv_pool_full(p)), 4);
  kvc_buffer_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  KVT_OK(kvc_kv_pool_buffer(kvc_swa_kv_pool_swa(p), KVC_REGION_K, 0, &d));
  assert_int_equal(d.bytes_per_token, HN * SHD * 4);
  /* SWA layer without an allocator: misuse */
  float k[HN * SHD] = {0};
  int64_t *dl = kvt_dev_alloc(8);
  int64_t one = 1;
  kvt_h2d(dl, &one, 8);
  KVT_STATUS(
      kvc_swa_kv_pool_set_kv(p, 1, dl, NULL, KVC_INDEX_I64, 1, k, k, KVC_DTYPE_F32, 0, 0, NULL, 1.f, NULL, 1.f, NULL),
      KVC_ERR_MISUSE);
  int32_t dup[2] = {0, 0};
  kvc_swa_kv_pool_config c = KVC_SWA_KV_POOL_CONFIG_INIT;
  c.size_full = 8, c.size_swa = 8, c.num_full_layers = 2, c.full_layer_ids = dup, c.head_num = 1, c.head_dim = 1;
  kvc_swa_kv_pool *q = NULL;
  KVT_STATUS(kvc_swa_kv_pool_create(kvt_ctx, &c, &q), KVC_ERR_INVALID_ARGUMENT);
  kvt_dev_free(dl);
  kvc_swa_kv_pool_destroy(p);
}

static void test_set_kv_move_offload(void **state) {
  (void)state;
  kvc_swa_kv_pool *p = make_pool();
  kvc_swa_allocator *a = make_alloc();
  KVT_OK(kvc_swa_kv_pool_register_allocator(p, a));
  /* 5 tokens: full slots 2..6, SWA peers 2..6 */
  const int64_t pre = 0, seq = 5;
  int64_t f[5];
  int64_t *df = kvt_dev_alloc(5 * 8);
  KVT_OK(kvc_swa_allocator_alloc_extend(a, 1, &pre, &seq, NULL, NULL, NULL, NULL, f, df, NULL));
  /* make full and SWA slot numbers differ: take 2 more full pages first in a 2nd request */
  float ks[5][HN * SHD], vs[5][HN * SHD], kf[5][HN * HD];
  for (int i = 0; i < 5; i++) {
    for (int j = 0; j < HN * SHD; j++) ks[i][j] = (float)(100 * i + j), vs[i][j] = (float)(-100 * i - j);
    for (int j = 0; j < HN * HD; j++) kf[i][j] = (float)(1000 + 10 * i + j);
  }
  float *dks = kvt_dev_alloc(sizeof ks), *dvs = kvt_dev_alloc(sizeof vs), *dkf = kvt_dev_alloc(sizeof kf);
  kvt_h2d(dks, ks, sizeof ks), kvt_h2d(dvs, vs, sizeof vs), kvt_h2d(dkf, kf, sizeof kf);
  KVT_OK(kvc_swa_kv_pool_set_kv(p, 3, df, NULL, KVC_INDEX_I64, 5, dks, dvs, KVC_DTYPE_F32, 0, 0, NULL, 1.f, NULL, 1.f,
                                NULL));
  KVT_OK(kvc_swa_kv_pool_set_kv(p, 2, df, NULL, KVC_INDEX_I64, 5, dkf, dkf, KVC_DTYPE_F32, 0, 0, NULL, 1.f, NULL, 1.f,
                                NULL));
  const int32_t *map = kvc_swa_allocator_mapping_host(a);
  float row[HN * SHD];
  for (int i = 0; i < 5; i++) {
    read_row(kvc_swa_kv_pool_swa(p), KVC_REGION_K, 1, map[f[i]], row);
    assert_memory_equal(row, ks[i], sizeof ks[i]);
    read_row(kvc_swa_kv_pool_swa(p), KVC_REGION_V, 1, map[f[i]], row);
    assert_memory_equal(row, vs[i], sizeof vs[i]);
    read_row(kvc_swa_kv_pool_full(p), KVC_REGION_K, 1, f[i], row);
    assert_memory_equal(row, kf[i], sizeof kf[i]);
  }
  /* precomputed swa_loc (int32) on layer 1 */
  int32_t *dsw = kvt_dev_alloc(5 * 4);
  KVT_OK(kvc_swa_allocator_translate(a, df, KVC_INDEX_I64, dsw, KVC_INDEX_I32, 5, NULL));
  KVT_OK(kvc_swa_kv_pool_set_kv(p, 1, NULL, dsw, KVC_INDEX_I32, 5, dks, dvs, KVC_DTYPE_F32, 0, 0, NULL, 1.f, NULL, 1.f,
                                NULL));
  read_row(kvc_swa_kv_pool_swa(p), KVC_REGION_K, 0, map[f[4]], row);
  assert_memory_equal(row, ks[4], sizeof ks[4]);
  /* move f[0..1] -> a fresh allocation g[0..1] (both sides) */
  const int64_t seq2 = 2;
  int64_t g[2];
  int64_t *dg = kvt_dev_alloc(2 * 8);
  KVT_OK(kvc_swa_allocator_alloc_extend(a, 1, &pre, &seq2, NULL, NULL, NULL, NULL, g, dg, NULL));
  KVT_OK(kvc_swa_kv_pool_move(p, dg, df, KVC_INDEX_I64, 2, NULL));
  for (int i = 0; i < 2; i++) {
    read_row(kvc_swa_kv_pool_swa(p), KVC_REGION_K, 1, map[g[i]], row);
    assert_memory_equal(row, ks[i], sizeof ks[i]);
    read_row(kvc_swa_kv_pool_full(p), KVC_REGION_K, 1, g[i], row);
    assert_memory_equal(row, kf[i], sizeof kf[i]);
  }
  /* offload after the first page is SWA-evicted: mask 0,0,1,1,1 */
  KVT_OK(kvc_swa_allocator_free_swa(a, f, 2, NULL));
  size_t fb, sb;
  KVT_OK(kvc_swa_kv_pool_host_copy_bytes(p, 4, &fb, &sb));
  assert_int_equal(sb, 4 * 2 * 2 * HN * SHD * 4); /* 2 layers, K + V */
  void *hf, *hs;
  KVT_OK(kvc_host_pinned_alloc(kvt_ctx, fb, &hf));
  KVT_OK(kvc_host_pinned_alloc(kvt_ctx, sb, &hs));
  uint8_t mask[4];
  KVT_OK(kvc_swa_kv_pool_copy_to_host(p, f + 1, 4, hf, hs, mask, NULL));
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  const uint8_t want_mask[4] = {0, 1, 1, 1};
  assert_memory_equal(mask, want_mask, 4);
  /* describe() order: K layer 0, K layer 1, V ...: layer 1 K rows start after 4 rows */
  const float *hk1 = (const float *)hs + 4 * HN * SHD;
  for (int j = 0; j < HN * SHD; j++) assert_true(hk1[j] == 0.f); /* masked out: zero-filled */
  assert_memory_equal(hk1 + 2 * HN * SHD, ks[3], sizeof ks[3]);
  /* load back into g (2 slots): saved mask 0,1 -> only row 1 lands on the SWA side */
  float before[HN * SHD];
  read_row(kvc_swa_kv_pool_swa(p), KVC_REGION_K, 1, map[g[0]], before);
  uint8_t saved[2] = {0, 1};
  void *hs2;
  size_t sb2;
  KVT_OK(kvc_swa_kv_pool_host_copy_bytes(p, 2, NULL, &sb2));
  KVT_OK(kvc_host_pinned_alloc(kvt_ctx, sb2, &hs2));
  memset(hs2, 0x11, sb2);
  KVT_OK(kvc_swa_kv_pool_copy_from_host(p, g, 2, hf, hs2, saved, NULL));
  read_row(kvc_swa_kv_pool_swa(p), KVC_REGION_K, 1, map[g[0]], row);
  assert_memory_equal(row, before, sizeof row);
  read_row(kvc_swa_kv_pool_swa(p), KVC_REGION_K, 1, map[g[1]], row);
  assert_memory_not_equal(row, before, sizeof row);
  KVT_STATUS(kvc_swa_kv_pool_copy_to_host(p, f, 5, hf, hs, mask, NULL), KVC_ERR_INVALID_ARGUMENT); /* > capacity */
  kvc_host_pinned_free(kvt_ctx, hf), kvc_host_pinned_free(kvt_ctx, hs), kvc_host_pinned_free(kvt_ctx, hs2);
  kvt_dev_free(df), kvt_dev_free(dg), kvt_dev_free(dsw), kvt_dev_free(dks), kvt_dev_free(dvs), kvt_dev_free(dkf);
  kvc_swa_allocator_destroy(a);
  kvc_swa_kv_pool_destroy(p);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_routing),
    cmocka_unit_test(test_set_kv_move_offload),
};
KVT_MAIN("swa_kv_pool", tests)
