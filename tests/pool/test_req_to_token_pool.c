/* test_req_to_token_pool.c — SGLang ReqToTokenPool: FIFO rows, kept rows, checked frees,
 * row writes on the device and in the host mirror. */
#include "alloc_test_util.h"

static void test_create_rejects_bad_config(void **state) {
  (void)state;
  kvc_req_to_token_pool_config c = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  kvc_req_to_token_pool *p = NULL;
  c.size = 0;
  c.max_context_len = 4;
  KVT_STATUS(kvc_req_to_token_pool_create(kvt_ctx, &c, &p), KVC_ERR_INVALID_ARGUMENT);
  c.size = 4;
  c.max_context_len = 0;
  KVT_STATUS(kvc_req_to_token_pool_create(kvt_ctx, &c, &p), KVC_ERR_INVALID_ARGUMENT);
  c.max_context_len = 4;
  c.struct_size = 4;
  KVT_STATUS(kvc_req_to_token_pool_create(kvt_ctx, &c, &p), KVC_ERR_VERSION);
  assert_null(p);
  kvc_req_to_token_pool_destroy(NULL);
}

static void test_table_is_zeroed_and_rows_fifo(void **state) {
  (void)state;
  kvc_req_to_token_pool *p = kvt_req_pool(4, 8);
  int32_t table[5 * 8];
  memset(table, 0x5a, sizeof table);
  kvt_d2h(table, kvc_req_to_token_pool_table(p), sizeof table);
  for (int i = 0; i < 40; i++) assert_int_equal(table[i], 0);
  assert_int_equal(kvc_req_to_token_pool_available(p), 4);

  int32_t rows[3] = {0, 0, 0};
  KVT_OK(kvc_req_to_token_pool_alloc(p, 3, rows));
  assert_int_equal(rows[0], 1);
  assert_int_equal(rows[1], 2);
  assert_int_equal(rows[2], 3);
  KVT_OK(kvc_req_to_token_pool_free(p, 2));
  KVT_OK(kvc_req_to_token_pool_free(p, 1));
  /* FIFO: row 4 was free before 2 and 1. */
  int32_t more[3] = {0, 3, 0};
  KVT_OK(kvc_req_to_token_pool_alloc(p, 3, more));
  assert_int_equal(more[0], 4);
  assert_int_equal(more[1], 3); /* kept */
  assert_int_equal(more[2], 2);
  int32_t last = 0;
  KVT_OK(kvc_req_to_token_pool_alloc(p, 1, &last));
  assert_int_equal(last, 1);
  assert_int_equal(kvc_req_to_token_pool_available(p), 0);
  assert_true(kvc_req_to_token_pool_is_held(p, 1));
  KVT_OK(kvc_req_to_token_pool_clear(p));
  assert_int_equal(kvc_req_to_token_pool_available(p), 4);
  assert_false(kvc_req_to_token_pool_is_held(p, 1));
  int32_t again = 0;
  KVT_OK(kvc_req_to_token_pool_alloc(p, 1, &again));
  assert_int_equal(again, 1);
  kvc_req_to_token_pool_destroy(p);
}

static void test_alloc_errors_change_nothing(void **state) {
  (void)state;
  kvc_req_to_token_pool *p = kvt_req_pool(3, 4);
  int32_t r[2] = {0, 0};
  KVT_OK(kvc_req_to_token_pool_alloc(p, 2, r));
  int32_t dup[3] = {1, 0, 1};
  KVT_STATUS(kvc_req_to_token_pool_alloc(p, 3, dup), KVC_ERR_MISUSE);
  assert_int_equal(dup[1], 0);
  int32_t notheld[2] = {0, 3};
  KVT_STATUS(kvc_req_to_token_pool_alloc(p, 2, notheld), KVC_ERR_MISUSE);
  int32_t neg[1] = {-1};
  KVT_STATUS(kvc_req_to_token_pool_alloc(p, 1, neg), KVC_ERR_MISUSE);
  int32_t two[2] = {0, 0};
  KVT_STATUS(kvc_req_to_token_pool_alloc(p, 2, two), KVC_ERR_OUT_OF_SLOTS);
  assert_int_equal(two[0], 0);
  assert_int_equal(kvc_req_to_token_pool_available(p), 1);
  /* A kept row after a failed call is still keepable: marks were cleared. */
  int32_t keep[2] = {1, 2};
  KVT_OK(kvc_req_to_token_pool_alloc(p, 2, keep));
  KVT_STATUS(kvc_req_to_token_pool_free(p, 0), KVC_ERR_MISUSE);
  KVT_STATUS(kvc_req_to_token_pool_free(p, 4), KVC_ERR_MISUSE);
  KVT_STATUS(kvc_req_to_token_pool_free(p, 3), KVC_ERR_MISUSE);
  KVT_OK(kvc_req_to_token_pool_free(p, 1));
  KVT_STATUS(kvc_req_to_token_pool_free(p, 1), KVC_ERR_MISUSE);
  KVT_OK(kvc_req_to_token_pool_alloc(p, 0, NULL));
  assert_int_equal(kvc_req_to_token_pool_available(p), 2);
  kvc_req_to_token_pool_destroy(p);
}

static void test_write_updates_device_and_mirror(void **state) {
  (void)state;
  const int32_t width = 9000; /* > the large inline capacity: exercises the staged path */
  kvc_req_to_token_pool *p = kvt_req_pool(2, width);
  int32_t rows[2] = {0, 0};
  KVT_OK(kvc_req_to_token_pool_alloc(p, 2, rows));
  int64_t *slots = malloc(sizeof(int64_t) * (size_t)width);
  for (int32_t i = 0; i < width; i++) slots[i] = 1000 + i;
  KVT_OK(kvc_req_to_token_pool_write(p, 2, 3, slots, 5, NULL));
  KVT_OK(kvc_req_to_token_pool_write(p, 1, 0, slots, (size_t)width, NULL));
  KVT_STATUS(kvc_req_to_token_pool_write(p, 2, width - 2, slots, 5, NULL), KVC_ERR_INVALID_ARGUMENT);
  slots[1] = -5;
  KVT_STATUS(kvc_req_to_token_pool_write(p, 2, 0, slots, 3, NULL), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_req_to_token_pool_write(p, 0, 0, slots, 1, NULL), KVC_ERR_MISUSE);
  int32_t *table = malloc(sizeof(int32_t) * 3 * (size_t)width);
  kvt_d2h(table, kvc_req_to_token_pool_table(p), sizeof(int32_t) * 3 * (size_t)width);
  const int32_t *m1 = kvc_req_to_token_pool_row(p, 1), *m2 = kvc_req_to_token_pool_row(p, 2);
  for (int32_t i = 0; i < width; i++) {
    assert_int_equal(table[width + i], 1000 + i);
    assert_int_equal(m1[i], 1000 + i);
    int32_t want2 = (i >= 3 && i < 8) ? 1000 + (i - 3) : 0;
    assert_int_equal(table[2 * width + i], want2);
    assert_int_equal(m2[i], want2);
  }
  assert_null(kvc_req_to_token_pool_row(p, 3));
  free(table);
  free(slots);
  kvc_req_to_token_pool_destroy(p);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_create_rejects_bad_config),
    cmocka_unit_test(test_table_is_zeroed_and_rows_fifo),
    cmocka_unit_test(test_alloc_errors_change_nothing),
    cmocka_unit_test(test_write_updates_device_and_mirror),
};
KVT_MAIN("req_to_token_pool", tests)
