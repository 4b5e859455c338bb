/* test_kv_offload.c — host offload (one gather kernel into pinned host memory, one
 * scatter back) and DLPack export. */
#include "kv_test_util.h"

#include "../../src/kv/dlpack_abi.h"

#define LEN(a) (sizeof(a) / sizeof((a)[0]))

static void test_copy_to_and_from_host_round_trip(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  kvc_kv_pool *p = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_F16, 3, 40, 8, 300, 3, 1);
  kvt_fill_pool(p, &r);
  const size_t n = 37;
  int64_t slots[37], dst[37];
  for (size_t i = 0; i < n; i++) {
    slots[i] = (int64_t)(i * 7 + 1);
    dst[i] = (int64_t)(i * 5 + 2);
  }
  slots[3] = -1; /* invalid: zero row out, skipped in */
  size_t bytes = 0;
  KVT_OK(kvc_kv_pool_host_copy_bytes(p, n, &bytes));
  assert_int_equal(bytes, 3 * n * (240 + 48));
  void *host = NULL;
  KVT_OK(kvc_host_pinned_alloc(kvt_ctx, bytes, &host));
  memset(host, 0x5a, bytes);
  int64_t *dl = kvt_dev_alloc(n * 8), *dd = kvt_dev_alloc(n * 8);
  kvt_h2d(dl, slots, n * 8);
  kvt_h2d(dd, dst, n * 8);
  KVT_OK(kvc_kv_pool_copy_to_host(p, dl, KVC_INDEX_I64, n, host, NULL));
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  const uint8_t *h = host;
  size_t off = 0;
  for (int reg = 0; reg < 2; reg++)
    for (int l = 0; l < 3; l++) {
      size_t rb = reg ? 48 : 240;
      uint8_t *buf = kvt_read_buf(p, reg ? KVC_REGION_V : KVC_REGION_K, l, NULL);
      for (size_t i = 0; i < n; i++, off += rb) {
        if (slots[i] < 0) {
          for (size_t j = 0; j < rb; j++) assert_int_equal(h[off + j], 0);
        } else {
          assert_memory_equal(h + off, buf + slots[i] * (int64_t)rb, rb);
        }
      }
      free(buf);
    }
  assert_int_equal(off, bytes);
  /* scatter back into other slots */
  KVT_OK(kvc_kv_pool_copy_from_host(p, dd, KVC_INDEX_I64, n, host, NULL));
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  off = 0;
  for (int reg = 0; reg < 2; reg++)
    for (int l = 0; l < 3; l++) {
      size_t rb = reg ? 48 : 240;
      uint8_t *buf = kvt_read_buf(p, reg ? KVC_REGION_V : KVC_REGION_K, l, NULL);
      for (size_t i = 0; i < n; i++, off += rb) assert_memory_equal(buf + dst[i] * (int64_t)rb, h + off, rb);
      free(buf);
    }
  KVT_OK(kvc_kv_pool_copy_to_host(p, dl, KVC_INDEX_I64, 0, host, NULL)); /* n = 0: nothing */
  kvc_host_pinned_free(kvt_ctx, host);
  kvt_dev_free(dl);
  kvt_dev_free(dd);
  kvc_kv_pool_destroy(p);
}

static void test_nsa_offload_includes_index_pages(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  kvc_kv_pool *p = kvt_nsa_pool(32, 16, 256, 2);
  kvt_fill_pool(p, &r);
  const size_t n = 100; /* pages 2 and 3 (slots 128..227) */
  int32_t slots[100];
  for (size_t i = 0; i < n; i++) slots[i] = (int32_t)(128 + i);
  size_t bytes;
  KVT_OK(kvc_kv_pool_host_copy_bytes(p, n, &bytes));
  const size_t pb = 64 * 132;
  assert_int_equal(bytes, 2 * n * 96 + 2 * 2 * pb);
  void *host;
  KVT_OK(kvc_host_pinned_alloc(kvt_ctx, bytes, &host));
  int32_t *dl = kvt_dev_alloc(n * 4);
  kvt_h2d(dl, slots, n * 4);
  KVT_OK(kvc_kv_pool_copy_to_host(p, dl, KVC_INDEX_I32, n, host, NULL));
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  const uint8_t *h = (const uint8_t *)host + 2 * n * 96;
  for (int l = 0; l < 2; l++) {
    uint8_t *buf = kvt_read_buf(p, KVC_REGION_INDEX_K, l, NULL);
    assert_memory_equal(h + (size_t)l * 2 * pb, buf + 2 * pb, 2 * pb);
    free(buf);
  }
  kvc_host_pinned_free(kvt_ctx, host);
  kvt_dev_free(dl);
  kvc_kv_pool_destroy(p);
}

static void test_dlpack_export(void **state) {
  (void)state;
  kvc_kv_pool *p = kvt_mha_pool(KVC_KV_MHA_FP4, KVC_DTYPE_BF16, 2, 32, 0, 100, 2, 1);
  void *t = NULL;
  KVT_OK(kvc_kv_pool_export_dlpack(p, KVC_REGION_K, 1, 0, &t));
  kvc_dl_managed_tensor *m = t;
  kvc_buffer_desc d = kvt_buf(p, KVC_REGION_K, 1);
  assert_ptr_equal(m->dl_tensor.data, d.data);
  assert_int_equal(m->dl_tensor.ndim, 3);
  assert_int_equal(m->dl_tensor.dtype.code, KVC_DL_FLOAT4_E2M1FN);
  assert_int_equal(m->dl_tensor.dtype.bits, 4);
  assert_int_equal(m->dl_tensor.shape[0], 101);
  assert_int_equal(m->dl_tensor.shape[2], 32);
  assert_int_equal(m->dl_tensor.strides[1], 32);
  assert_int_equal(m->dl_tensor.device.device_type, kvc_context_device(kvt_ctx) >= 0 ? KVC_DL_CUDA : KVC_DL_CPU);
  m->deleter(m);
  KVT_OK(kvc_kv_pool_export_dlpack(p, KVC_REGION_K_SCALE, 0, 1, &t));
  m = t;
  assert_int_equal(m->dl_tensor.ndim, 2);
  assert_int_equal(m->dl_tensor.dtype.code, KVC_DL_UINT);
  assert_int_equal(m->dl_tensor.shape[1], 4);
  m->deleter(m);
  KVT_STATUS(kvc_kv_pool_export_dlpack(p, KVC_REGION_KV, 0, 0, &t), KVC_ERR_INVALID_ARGUMENT);
  kvc_kv_pool_destroy(p);
  p = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_FP8_E5M2, 2, 8, 4, 10, 1, 0 + 1);
  KVT_OK(kvc_kv_pool_export_dlpack(p, KVC_REGION_V, 0, 0, &t));
  m = t;
  assert_int_equal(m->dl_tensor.dtype.code, KVC_DL_FLOAT8_E5M2);
  assert_int_equal(m->dl_tensor.shape[2], 4);
  m->deleter(m);
  kvc_kv_pool_destroy(p);
}

/* Slots near INT64_MIN / INT64_MAX: copy_to_host gives zero rows, copy_from_host skips
 * them, and only the one valid slot moves. The offset slot x pitch used to be formed
 * before the range check (signed overflow, UB; tests/fuzz/corpus/fuzz_kv_pool/
 * offload-slot-overflow). Plain rows on MHA, whole index pages (by_page) on NSA. */
static void test_offload_skips_slots_near_int64_limits(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  kvc_kv_pool *p = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_BF16, 1, 8, 8, 16, 1, 1); /* 16-byte K and V rows */
  kvt_fill_pool(p, &r);
  const int64_t slots[] = {INT64_MIN, INT64_MAX, INT64_MIN + 1, INT64_MAX / 8 + 1, -INT64_MAX / 8 - 1, 3};
  const size_t n = LEN(slots), rb = 16;
  size_t bytes = 0;
  KVT_OK(kvc_kv_pool_host_copy_bytes(p, n, &bytes));
  assert_int_equal(bytes, 2 * n * rb);
  void *host = NULL;
  KVT_OK(kvc_host_pinned_alloc(kvt_ctx, bytes, &host));
  memset(host, 0x5a, bytes);
  int64_t *dl = kvt_dev_alloc(sizeof slots);
  kvt_h2d(dl, slots, sizeof slots);
  KVT_OK(kvc_kv_pool_copy_to_host(p, dl, KVC_INDEX_I64, n, host, NULL));
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  uint8_t *h = host, *before[2];
  for (int reg = 0; reg < 2; reg++) {
    before[reg] = kvt_read_buf(p, reg ? KVC_REGION_V : KVC_REGION_K, 0, NULL);
    for (size_t i = 0; i + 1 < n; i++)
      for (size_t j = 0; j < rb; j++) assert_int_equal(h[(reg * n + i) * rb + j], 0);
    assert_memory_equal(h + (reg * n + n - 1) * rb, before[reg] + 3 * rb, rb);
  }
  /* back in: new bytes for every row; only slot 3's may land */
  for (size_t j = 0; j < bytes; j++) h[j] = (uint8_t)kvt_next(&r);
  KVT_OK(kvc_kv_pool_copy_from_host(p, dl, KVC_INDEX_I64, n, host, NULL));
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  for (int reg = 0; reg < 2; reg++) {
    size_t total = 0;
    uint8_t *now = kvt_read_buf(p, reg ? KVC_REGION_V : KVC_REGION_K, 0, &total);
    memcpy(before[reg] + 3 * rb, h + (reg * n + n - 1) * rb, rb);
    assert_memory_equal(now, before[reg], total);
    free(now);
    free(before[reg]);
  }
  kvc_host_pinned_free(kvt_ctx, host);
  kvt_dev_free(dl);
  kvc_kv_pool_destroy(p);

  /* NSA: the index-K segment is copied by page (loc[0] / 64 x page pitch) */
  p = kvt_nsa_pool(32, 16, 256, 1);
  kvt_fill_pool(p, &r);
  const int64_t far[] = {INT64_MAX, INT64_MIN};
  for (size_t c = 0; c < LEN(far); c++) {
    KVT_OK(kvc_kv_pool_host_copy_bytes(p, 1, &bytes));
    assert_int_equal(bytes, 96 + 64 * 132);
    KVT_OK(kvc_host_pinned_alloc(kvt_ctx, bytes, &host));
    memset(host, 0x5a, bytes);
    dl = kvt_dev_alloc(sizeof far[c]);
    kvt_h2d(dl, &far[c], sizeof far[c]);
    KVT_OK(kvc_kv_pool_copy_to_host(p, dl, KVC_INDEX_I64, 1, host, NULL));
    KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
    h = host;
    for (size_t j = 0; j < bytes; j++) assert_int_equal(h[j], 0);
    memset(host, 0x77, bytes);
    const int nb = kvc_kv_pool_num_buffers(p);
    for (int b = 0; b < nb; b++) {
      kvc_buffer_desc d;
      memset(&d, 0, sizeof d);
      d.struct_size = sizeof d;
      KVT_OK(kvc_kv_pool_describe(p, b, &d));
      uint8_t *was = malloc((size_t)d.total_bytes), *now = malloc((size_t)d.total_bytes);
      kvt_d2h(was, d.data, (size_t)d.total_bytes);
      KVT_OK(kvc_kv_pool_copy_from_host(p, dl, KVC_INDEX_I64, 1, host, NULL));
      KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
      kvt_d2h(now, d.data, (size_t)d.total_bytes);
      assert_memory_equal(now, was, (size_t)d.total_bytes);
      free(was);
      free(now);
    }
    kvc_host_pinned_free(kvt_ctx, host);
    kvt_dev_free(dl);
  }
  kvc_kv_pool_destroy(p);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_copy_to_and_from_host_round_trip),
    cmocka_unit_test(test_nsa_offload_includes_index_pages),
    cmocka_unit_test(test_offload_skips_slots_near_int64_limits),
    cmocka_unit_test(test_dlpack_export),
};

KVT_MAIN("kv_offload", tests)
