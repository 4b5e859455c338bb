/* test_kv_canary.c — debug canary rows (kvc_kv_pool_canary_fill / _check) and the flow's
 * canary mode (kvc_flow_set_canary) on both backends: a write to a freed slot is found
 * when the slot is handed out again, with the slot and layer named. */
#include "kv_test_util.h"
#include "../flow/flow_util.h"
#include "../pool/alloc_test_util.h"

/* Writes one row of bytes `byte` into K and V of `layer` at `slot`. */
static void stray_write(kvc_kv_pool *p, int layer, int64_t slot, size_t row_bytes) {
  int64_t *loc = kvt_dev_alloc(sizeof(int64_t));
  kvt_h2d(loc, &slot, sizeof slot);
  uint8_t *h = malloc(row_bytes);
  memset(h, 0x11, row_bytes);
  void *k = kvt_dev_alloc(row_bytes), *v = kvt_dev_alloc(row_bytes);
  kvt_h2d(k, h, row_bytes);
  kvt_h2d(v, h, row_bytes);
  KVT_OK(kvc_kv_pool_set_kv(p, layer, loc, KVC_INDEX_I64, 1, k, v, KVC_DTYPE_BF16, 0, 0, NULL, 1.0f, NULL, 1.0f, NULL));
  free(h);
  kvt_dev_free(k);
  kvt_dev_free(v);
  kvt_dev_free(loc);
}

static void check_layout(int H, int D) {
  kvc_kv_pool *p = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_BF16, H, D, D, 64, 3, 4);
  const size_t row = (size_t)H * (size_t)D * 2;
  int64_t slots[] = {4, 9, 5, 67};
  KVT_OK(kvc_kv_pool_canary_fill(p, slots, 4, NULL));
  KVT_OK(kvc_kv_pool_canary_check(p, slots, 4, NULL));
  /* Every byte of the filled rows holds the marker; an unfilled row does not. */
  uint8_t *k1 = kvt_read_buf(p, KVC_REGION_V, 2, NULL);
  for (size_t b = 0; b < row; b++) assert_int_equal(k1[9 * row + b], 0xCB);
  assert_int_equal(k1[10 * row], 0);
  free(k1);
  int64_t other[] = {10};
  KVT_STATUS(kvc_kv_pool_canary_check(p, other, 1, NULL), KVC_ERR_INTERNAL);
  /* A write into a filled slot is named: slot, request position, layer. */
  stray_write(p, 1, 5, row);
  KVT_STATUS(kvc_kv_pool_canary_check(p, slots, 4, NULL), KVC_ERR_INTERNAL);
  char want[256];
  snprintf(want, sizeof want,
           "kvc_kv_pool_canary_check: slot 5 (request position 2) layer 1 region 0 byte 0 was written after it was "
           "freed (%zu bytes differ)",
           2 * row);
  assert_string_equal(kvc_last_error(kvt_ctx), want);
  /* Refill heals it; out-of-range slots are argument errors. */
  KVT_OK(kvc_kv_pool_canary_fill(p, slots, 4, NULL));
  KVT_OK(kvc_kv_pool_canary_check(p, slots, 4, NULL));
  int64_t bad[] = {3, 68};
  KVT_STATUS(kvc_kv_pool_canary_fill(p, bad, 2, NULL), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_kv_pool_canary_check(p, bad, 2, NULL), KVC_ERR_INVALID_ARGUMENT);
  bad[1] = -1;
  KVT_STATUS(kvc_kv_pool_canary_check(p, bad, 2, NULL), KVC_ERR_INVALID_ARGUMENT);
  KVT_OK(kvc_kv_pool_canary_check(p, NULL, 0, NULL));
  kvc_kv_pool_destroy(p);
}

static void test_fill_check_16_byte_rows(void **state) {
  (void)state;
  check_layout(2, 8); /* 32-byte rows: 16-byte accesses */
}

static void test_fill_check_byte_rows(void **state) {
  (void)state;
  check_layout(1, 3); /* 6-byte rows: byte accesses */
}

static void test_many_slots_staged(void **state) {
  (void)state;
  kvc_kv_pool *p = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_BF16, 1, 8, 8, 4096, 2, 1);
  int64_t *slots = malloc(4000 * sizeof *slots);
  for (int i = 0; i < 4000; i++) slots[i] = i + 1;
  KVT_OK(kvc_kv_pool_canary_fill(p, slots, 4000, NULL));
  KVT_OK(kvc_kv_pool_canary_check(p, slots, 4000, NULL));
  stray_write(p, 0, 3999, 16);
  KVT_STATUS(kvc_kv_pool_canary_check(p, slots, 4000, NULL), KVC_ERR_INTERNAL);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "slot 3999 (request position 3998) layer 0 region 0"));
  free(slots);
  kvc_kv_pool_destroy(p);
}

static kvc_req_state req0(int64_t seq) {
  kvc_req_state r;
  memset(&r, 0, sizeof r);
  r.seq_len = seq;
  return r;
}

static void flow_use_after_free(int stray) {
  fixture f;
  fixture_make(&f, 8, 256, 64, 4, NULL);
  kvc_kv_pool *p = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_BF16, 2, 8, 8, 64, 2, 4);
  KVT_OK(kvc_flow_set_canary(f.flow, p));
  kvc_req_state a = req0(6);
  kvc_req_state *one[] = {&a};
  KVT_OK(kvc_flow_alloc_for_extend(f.flow, one, 1, f.out, NULL));
  int64_t a_slots[6];
  KVT_OK(kvc_flow_row_slots(f.flow, a.req_row, 0, 6, a_slots));
  /* A writes its KV, decodes one token, finishes. */
  for (int i = 0; i < 6; i++) stray_write(p, 0, a_slots[i], 32);
  a.seq_len = 6;
  KVT_OK(kvc_flow_alloc_for_decode(f.flow, one, 1, 1, f.out, NULL));
  KVT_OK(kvc_flow_release(f.flow, one, 1, 1, NULL));
  if (stray) stray_write(p, 1, a_slots[2], 32); /* use after free */
  /* B takes every free token, so it gets A's pages. */
  kvc_req_state b = req0(kvc_allocator_available_size(f.alloc));
  kvc_req_state *two[] = {&b};
  if (stray) {
    KVT_STATUS(kvc_flow_alloc_for_extend(f.flow, two, 1, f.out, NULL), KVC_ERR_INTERNAL);
    char want[96];
    snprintf(want, sizeof want, "slot %lld (request position ", (long long)a_slots[2]);
    assert_non_null(strstr(kvc_last_error(kvt_ctx), want));
    assert_non_null(strstr(kvc_last_error(kvt_ctx), ") layer 1 region 0 byte 0 was written after it was freed"));
  } else {
    KVT_OK(kvc_flow_alloc_for_extend(f.flow, two, 1, f.out, NULL));
  }
  KVT_OK(kvc_flow_release(f.flow, two, 1, 1, NULL));
  KVT_OK(kvc_flow_check(f.flow, NULL, 0));
  KVT_OK(kvc_flow_set_canary(f.flow, NULL));
  fixture_free(&f);
  kvc_kv_pool_destroy(p);
}

static void test_flow_detects_use_after_free(void **state) {
  (void)state;
  flow_use_after_free(1);
}

static void test_flow_clean_reuse_passes(void **state) {
  (void)state;
  flow_use_after_free(0);
}

static void test_flow_canary_argument_errors(void **state) {
  (void)state;
  fixture f;
  fixture_make(&f, 4, 64, 64, 4, NULL);
  kvc_kv_pool *small = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_BF16, 1, 8, 8, 32, 1, 4);
  kvc_kv_pool *ps2 = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_BF16, 1, 8, 8, 64, 1, 2);
  KVT_STATUS(kvc_flow_set_canary(f.flow, small), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_flow_set_canary(f.flow, ps2), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_flow_set_canary(NULL, small), KVC_ERR_INVALID_ARGUMENT);
  kvc_kv_pool_destroy(small);
  kvc_kv_pool_destroy(ps2);
  fixture_free(&f);
}

/* KVC_CONTEXT_CANARY (or env KVC_CANARY=1): a flow created after the pool guards it without
 * an explicit kvc_flow_set_canary — the pool's rows hold the marker from then on. */
static void test_context_canary_flag_enables_flows(void **state) {
  (void)state;
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  cfg.backend = kvc_context_backend(kvt_ctx);
  cfg.flags = KVC_CONTEXT_CANARY;
  kvc_context *c = NULL;
  KVT_OK(kvc_context_create(&cfg, &c));
  kvc_req_to_token_pool *rp = kvt_req_pool_on(c, 4, 64);
  kvc_allocator *al = kvt_allocator_on(c, KVC_ALLOCATOR_PAGED, 64, 4, 0);
  kvc_kv_pool *p = kvt_pool_on(c, kvt_mha_config(KVC_KV_MHA, KVC_DTYPE_BF16, 2, 8, 8, 64, 2, 4));
  const int64_t slots[] = {4, 5, 6, 7, 40};
  /* Before any flow exists the pool is zero-filled: the check fails. */
  assert_int_equal(kvc_kv_pool_canary_check(p, slots, 5, NULL), KVC_ERR_INTERNAL);
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = 4;
  fc.req_pool = rp;
  fc.allocator = al;
  kvc_flow *fl = NULL;
  KVT_OK(kvc_flow_create(c, &fc, &fl));
  if (kvc_kv_pool_canary_check(p, slots, 5, NULL) != KVC_OK)
    fail_msg("the flow did not fill the pool: %s", kvc_last_error(c));
  kvc_flow_destroy(fl);
  kvc_kv_pool_destroy(p);
  kvc_allocator_destroy(al);
  kvc_req_to_token_pool_destroy(rp);
  kvc_context_destroy(c);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_fill_check_16_byte_rows),
    cmocka_unit_test(test_fill_check_byte_rows),
    cmocka_unit_test(test_many_slots_staged),
    cmocka_unit_test(test_flow_detects_use_after_free),
    cmocka_unit_test(test_flow_clean_reuse_passes),
    cmocka_unit_test(test_flow_canary_argument_errors),
    cmocka_unit_test(test_context_canary_flag_enables_flows),
};

KVT_MAIN("kv_canary", tests)
