/*
 * test_transfer_flows.c — prefill/decode disaggregation end to end on one machine: a
 * prefill side and a decode side, each with its own request pool, paged allocator,
 * flow and KV pool (the decode side busier, so its pages differ), allocate the same
 * requests; the prefill pool's KV moves to the decode pool by a plan built from the
 * flows' host slots (kvc_flow_row_slots -> kvc_transfer_pages_from_slots), and every
 * token's K and V rows of every layer must arrive at that token's decode slot.
 * Also: kvc_transfer_pages_from_slots on worked examples and refusals.
 */
#include "transfer_test_util.h"

#include <stdbool.h>

#define PS 16
#define WIDTH 512

typedef struct endpoint {
  kvc_context *ctx;
  kvc_req_to_token_pool *reqs;
  kvc_allocator *alloc;
  kvc_flow *flow;
  kvc_kv_pool *kv;
  kvc_transfer_layout *layout;
  int64_t *out;
} endpoint;

static void endpoint_open(endpoint *e, kvc_context *ctx) {
  memset(e, 0, sizeof *e);
  e->ctx = ctx;
  kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rc.size = 16;
  rc.max_context_len = WIDTH;
  KVT_OK(kvc_req_to_token_pool_create(ctx, &rc, &e->reqs));
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = KVC_ALLOCATOR_PAGED;
  ac.size = 2048;
  ac.page_size = PS;
  KVT_OK(kvc_allocator_create(ctx, &ac, &e->alloc));
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = PS;
  fc.req_pool = e->reqs;
  fc.allocator = e->alloc;
  KVT_OK(kvc_flow_create(ctx, &fc, &e->flow));
  e->kv = kvt_xfer_pool(ctx, kvt_mha_config(KVC_KV_MHA, KVC_DTYPE_BF16, 2, 8, 0, 2048, 2, PS));
  e->layout = kvt_xfer_layout(e->kv, ctx);
  e->out = kvt_alloc_on(ctx, 4096 * sizeof(int64_t));
}

static void endpoint_close(endpoint *e) {
  kvc_memory_free(e->ctx, e->out);
  kvc_transfer_layout_destroy(e->layout);
  kvc_kv_pool_destroy(e->kv);
  kvc_flow_destroy(e->flow);
  kvc_allocator_destroy(e->alloc);
  kvc_req_to_token_pool_destroy(e->reqs);
}

static void extend(endpoint *e, kvc_req_state *reqs, size_t n) {
  kvc_req_state *batch[8];
  for (size_t i = 0; i < n; i++) batch[i] = &reqs[i];
  KVT_OK(kvc_flow_alloc_for_extend(e->flow, batch, n, e->out, NULL));
}

/* The requests' pages on one side, appended in request order. */
static size_t request_pages(endpoint *e, const kvc_req_state *reqs, size_t n, int64_t *pages, int64_t **slots) {
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    slots[i] = malloc((size_t)reqs[i].seq_len * sizeof(int64_t));
    KVT_OK(kvc_flow_row_slots(e->flow, reqs[i].req_row, 0, reqs[i].seq_len, slots[i]));
    size_t got = 0;
    KVT_OK(kvc_transfer_pages_from_slots(slots[i], (size_t)reqs[i].seq_len, PS, pages + total, 256 - total, &got));
    total += got;
  }
  return total;
}

static void test_prefill_to_decode_through_flows(void **state) {
  (void)state;
  kvt_rng rng = {kvt_seed()};
  kvc_context *other = NULL;
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  cfg.backend = kvc_context_backend(kvt_ctx);
  KVT_OK(kvc_context_create(&cfg, &other));
  endpoint pre, dec;
  endpoint_open(&pre, kvt_ctx);
  endpoint_open(&dec, other);
  /* The decode side already serves requests, some finished: its free pages differ. */
  kvc_req_state busy[4];
  memset(busy, 0, sizeof busy);
  for (int i = 0; i < 4; i++) busy[i].seq_len = kvt_range(&rng, 1, 100);
  extend(&dec, busy, 4);
  kvc_req_state *done[2] = {&busy[1], &busy[3]};
  KVT_OK(kvc_flow_release(dec.flow, done, 2, 1, NULL));

  const int64_t lens[3] = {37, 16, kvt_range(&rng, 50, 200)};
  kvc_req_state a[3], b[3];
  memset(a, 0, sizeof a);
  memset(b, 0, sizeof b);
  for (int i = 0; i < 3; i++) a[i].seq_len = b[i].seq_len = lens[i];
  extend(&pre, a, 3);
  extend(&dec, b, 3);

  /* The prefill pool holds computed KV: random bytes in every region. */
  const int32_t nreg = kvc_transfer_layout_num_regions(pre.layout);
  uint8_t *src_host[8] = {0}, *dst_host[8] = {0};
  for (int32_t g = 0; g < nreg; g++) {
    kvc_transfer_region_info r;
    KVT_OK(kvc_transfer_layout_region(pre.layout, g, &r));
    const size_t bytes = (size_t)(r.pages * r.page_bytes);
    src_host[g] = malloc(bytes);
    for (size_t k = 0; k < bytes; k++) src_host[g][k] = (uint8_t)kvt_next(&rng);
    kvt_h2d_on(pre.ctx, (void *)(uintptr_t)r.base, src_host[g], bytes);
  }
  int64_t sp[256], dp[256], *sslots[3], *dslots[3];
  const size_t ns = request_pages(&pre, a, 3, sp, sslots), nd = request_pages(&dec, b, 3, dp, dslots);
  assert_int_equal(ns, nd);
  bool moved = false; /* the decode pages are not the prefill pages: the mapping matters */
  for (size_t k = 0; k < ns; k++) moved |= sp[k] != dp[k];
  assert_true(moved);
  kvc_transfer_plan *plan = NULL;
  KVT_OK(kvc_transfer_plan_create(kvt_ctx, pre.layout, dec.layout, sp, dp, ns, &plan));
  KVT_OK(kvc_transfer_plan_copy_local(plan, pre.ctx, dec.ctx, NULL));
  KVT_OK(kvc_stream_synchronize(dec.ctx, NULL));

  for (int32_t g = 0; g < nreg; g++) {
    kvc_transfer_region_info r;
    KVT_OK(kvc_transfer_layout_region(dec.layout, g, &r));
    dst_host[g] = malloc((size_t)(r.pages * r.page_bytes));
    kvt_d2h_on(dec.ctx, dst_host[g], (void *)(uintptr_t)r.base, (size_t)(r.pages * r.page_bytes));
    const size_t row = (size_t)r.page_bytes / PS;
    for (int i = 0; i < 3; i++)
      for (int64_t t = 0; t < lens[i]; t++)
        if (memcmp(dst_host[g] + (size_t)dslots[i][t] * row, src_host[g] + (size_t)sslots[i][t] * row, row))
          fail_msg("region %d request %d token %lld: decode slot %lld != prefill slot %lld (seed %llu)", g, i,
                   (long long)t, (long long)dslots[i][t], (long long)sslots[i][t], (unsigned long long)kvt_seed());
  }
  for (int32_t g = 0; g < nreg; g++) free(src_host[g]), free(dst_host[g]);
  for (int i = 0; i < 3; i++) free(sslots[i]), free(dslots[i]);
  kvc_transfer_plan_destroy(plan);
  endpoint_close(&pre);
  endpoint_close(&dec);
  kvc_context_destroy(other);
}

static void test_pages_from_slots(void **state) {
  (void)state;
  int64_t pages[4] = {-7, -7, -7, -7};
  size_t n = 99;
  const int64_t two_pages[] = {8, 9, 10, 11, 20, 21}; /* page 2 whole, page 5 partly */
  KVT_OK(kvc_transfer_pages_from_slots(two_pages, 6, 4, pages, 4, &n));
  assert_int_equal(n, 2);
  assert_int_equal(pages[0], 2);
  assert_int_equal(pages[1], 5);
  const int64_t tokens[] = {7, 3, 12};
  KVT_OK(kvc_transfer_pages_from_slots(tokens, 3, 1, pages, 4, &n));
  assert_int_equal(n, 3);
  assert_int_equal(pages[1], 3);
  int64_t untouched[4] = {-7, -7, -7, -7};
  memcpy(pages, untouched, sizeof pages);
  n = 99;
  const int64_t off_page[] = {8, 9, 11}, misaligned[] = {9, 10}, negative[] = {-4, -3};
  KVT_STATUS(kvc_transfer_pages_from_slots(off_page, 3, 4, pages, 4, &n), KVC_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvc_last_error(NULL), "slots[2] = 11"));
  KVT_STATUS(kvc_transfer_pages_from_slots(misaligned, 2, 4, pages, 4, &n), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_transfer_pages_from_slots(negative, 2, 4, pages, 4, &n), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_transfer_pages_from_slots(two_pages, 6, 4, pages, 1, &n), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_transfer_pages_from_slots(two_pages, 6, 0, pages, 4, &n), KVC_ERR_INVALID_ARGUMENT);
  assert_memory_equal(pages, untouched, sizeof pages);
  assert_int_equal(n, 99);
  KVT_OK(kvc_transfer_pages_from_slots(NULL, 0, 4, NULL, 0, &n));
  assert_int_equal(n, 0);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_prefill_to_decode_through_flows),
      cmocka_unit_test(test_pages_from_slots),
  };
  return kvt_main(argc, argv, "transfer_flows", tests, sizeof tests / sizeof tests[0]);
}
