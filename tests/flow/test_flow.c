/*
 * Level-3 flows: alloc_for_extend / alloc_for_decode / release with the chunk cache and a
 * test prefix cache, on both backends. Device rows are read back and compared with the
 * host mirror; every failure path is checked to change nothing.
 */
#include "flow_util.h"

static kvc_req_state req0(int64_t seq) {
  kvc_req_state r;
  memset(&r, 0, sizeof r);
  r.seq_len = seq;
  return r;
}

/* The slots a fresh paged request of `len` tokens gets from pages P (in order). */
static void expect_fresh(const int64_t *got, int64_t len, const int64_t *pages, int64_t ps) {
  for (int64_t t = 0; t < len; t++)
    if (got[t] != pages[t / ps] * ps + t % ps)
      fail_msg("token %lld: slot %lld, expected %lld", (long long)t, (long long)got[t],
               (long long)(pages[t / ps] * ps + t % ps));
}

static void test_prefill_decode_release_roundtrip(void **state) {
  (void)state;
  fixture f;
  fixture_make(&f, 8, 256, 1024, 4, NULL);
  int64_t avail0 = kvc_allocator_available_size(f.alloc);
  kvc_req_state a = req0(6), b = req0(3);
  kvc_req_state *batch[] = {&a, &b};
  KVT_OK(kvc_flow_alloc_for_extend(f.flow, batch, 2, f.out, NULL));
  /* FIFO rows, pages from the front of [1, 2, ...]: a -> pages 1, 2; b -> page 3. */
  assert_int_equal(a.req_row, 1);
  assert_int_equal(b.req_row, 2);
  int64_t got[9];
  kvt_d2h(got, f.out, sizeof got);
  const int64_t pa[] = {1, 2}, pb[] = {3};
  expect_fresh(got, 6, pa, 4);
  expect_fresh(got + 6, 3, pb, 4);
  assert_int_equal(a.kv_allocated_len, 6);
  assert_int_equal(a.kv_committed_len, 6);
  assert_row_synced(&f, a.req_row, 6);
  /* Decode 3 steps: a continues page 2 (slots 10, 11) then opens page 4; b fills page 3. */
  int64_t want_a[] = {10, 11, 20}, want_b[] = {15, 16, 17};
  for (int step = 0; step < 3; step++) {
    KVT_OK(kvc_flow_alloc_for_decode(f.flow, batch, 2, 1, f.out, NULL));
    int64_t d[2];
    kvt_d2h(d, f.out, sizeof d);
    assert_int_equal(d[0], want_a[step]);
    assert_int_equal(d[1], want_b[step]);
  }
  assert_int_equal(a.seq_len, 9);
  assert_int_equal(b.kv_allocated_len, 6);
  assert_row_synced(&f, a.req_row, 9);
  assert_row_synced(&f, b.req_row, 6);
  kvc_req_state *live[] = {&a, &b};
  KVT_OK(kvc_flow_check(f.flow, live, 2));
  KVT_OK(kvc_flow_release(f.flow, batch, 2, 1, NULL));
  assert_int_equal(a.req_row, 0);
  assert_int_equal(kvc_allocator_available_size(f.alloc), avail0);
  assert_int_equal(kvc_req_to_token_pool_available(f.pool), 8);
  KVT_OK(kvc_flow_check(f.flow, NULL, 0));
  /* Released again: misuse, nothing changes. */
  a.req_row = 1;
  KVT_STATUS(kvc_flow_release(f.flow, batch, 1, 1, NULL), KVC_ERR_MISUSE);
  assert_int_equal(kvc_allocator_available_size(f.alloc), avail0);
  fixture_free(&f);
}

/* A batch that names requests already released (as a retry of the whole batch after a
 * failed release does) releases the others and skips those: nothing is freed twice. */
static void test_release_skips_released_requests(void **state) {
  (void)state;
  fixture f;
  fixture_make(&f, 4, 64, 256, 4, NULL);
  kvc_req_state a = req0(10), b = req0(7);
  kvc_req_state *one[] = {&a}, *both[] = {&a, &b};
  KVT_OK(kvc_flow_alloc_for_extend(f.flow, both, 2, f.out, NULL));
  KVT_OK(kvc_flow_release(f.flow, one, 1, 1, NULL));
  assert_int_equal(kvc_allocator_available_size(f.alloc), 256 - 8);
  KVT_OK(kvc_flow_release(f.flow, both, 2, 1, NULL)); /* a is skipped */
  assert_int_equal(b.req_row, 0);
  assert_int_equal(kvc_allocator_available_size(f.alloc), 256);
  assert_int_equal(kvc_req_to_token_pool_available(f.pool), 4);
  KVT_OK(kvc_flow_release(f.flow, both, 2, 1, NULL)); /* both skipped */
  assert_int_equal(kvc_allocator_available_size(f.alloc), 256);
  KVT_OK(kvc_allocator_check(f.alloc));
  KVT_OK(kvc_flow_check(f.flow, NULL, 0));
  fixture_free(&f);
}

static void test_extend_out_of_memory_changes_nothing(void **state) {
  (void)state;
  fixture f;
  fixture_make(&f, 4, 512, 64, 16, NULL);   /* 4 pages */
  kvc_req_state a = req0(40), b = req0(40); /* 3 pages each */
  kvc_req_state *one[] = {&a}, *two[] = {&b};
  KVT_OK(kvc_flow_alloc_for_extend(f.flow, one, 1, f.out, NULL));
  int32_t rows_before = kvc_req_to_token_pool_available(f.pool);
  int64_t avail_before = kvc_allocator_available_size(f.alloc);
  KVT_STATUS(kvc_flow_alloc_for_extend(f.flow, two, 1, f.out, NULL), KVC_ERR_OUT_OF_SLOTS);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "available_size="));
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "Prefill out of memory"));
  assert_int_equal(b.req_row, 0);
  assert_int_equal(kvc_req_to_token_pool_available(f.pool), rows_before);
  assert_int_equal(kvc_allocator_available_size(f.alloc), avail_before);
  /* The next request still gets the row SGLang would give (the FIFO is untouched). */
  kvc_req_state c = req0(10);
  kvc_req_state *three[] = {&c};
  KVT_OK(kvc_flow_alloc_for_extend(f.flow, three, 1, f.out, NULL));
  assert_int_equal(c.req_row, 2);
  /* Decode out of memory: a needs a new page at seq 48 -> fill until exhausted. */
  kvc_req_state *both[] = {&a, &c};
  kvc_status st = KVC_OK;
  int steps = 0;
  while ((st = kvc_flow_alloc_for_decode(f.flow, both, 2, 1, f.out, NULL)) == KVC_OK) steps++;
  assert_int_equal(st, KVC_ERR_OUT_OF_SLOTS);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "Decode out of memory"));
  kvc_req_state *live[] = {&a, &c};
  KVT_OK(kvc_flow_check(f.flow, live, 2));
  KVT_OK(kvc_flow_release(f.flow, both, 2, 1, NULL));
  assert_int_equal(kvc_allocator_available_size(f.alloc), 64);
  fixture_free(&f);
}

static void test_request_rows_exhausted(void **state) {
  (void)state;
  fixture f;
  fixture_make(&f, 2, 64, 1024, 1, NULL);
  kvc_req_state a = req0(5), b = req0(5), c = req0(5);
  kvc_req_state *all[] = {&a, &b, &c};
  KVT_STATUS(kvc_flow_alloc_for_extend(f.flow, all, 3, f.out, NULL), KVC_ERR_OUT_OF_SLOTS);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "alloc_req_slots"));
  assert_int_equal(kvc_req_to_token_pool_available(f.pool), 2);
  assert_int_equal(kvc_allocator_available_size(f.alloc), 1024);
  KVT_OK(kvc_flow_alloc_for_extend(f.flow, all, 2, f.out, NULL));
  KVT_OK(kvc_flow_release(f.flow, all, 2, 1, NULL));
  fixture_free(&f);
}

static void test_chunked_prefill_continues_the_row(void **state) {
  (void)state;
  for (int32_t ps = 1; ps <= 16; ps *= 16) {
    fixture f;
    fixture_make(&f, 4, 512, 2048, ps, NULL);
    kvc_req_state a = req0(100);
    a.flags = KVC_REQ_CHUNKED;
    kvc_req_state *one[] = {&a};
    KVT_OK(kvc_flow_alloc_for_extend(f.flow, one, 1, f.out, NULL));
    int32_t row = a.req_row;
    KVT_OK(kvc_flow_cache_unfinished(f.flow, &a));
    assert_int_equal(a.prefix_len, 100);
    a.seq_len = 180; /* second chunk */
    KVT_OK(kvc_flow_alloc_for_extend(f.flow, one, 1, f.out, NULL));
    assert_int_equal(a.req_row, row);
    const int32_t *m = kvc_req_to_token_pool_row(f.pool, row);
    /* Within a page, a request's slots are consecutive: position 100 continues 99. */
    if (ps > 1) assert_int_equal(m[100], m[99] + 1);
    int64_t got[80];
    kvt_d2h(got, f.out, sizeof got);
    for (int i = 0; i < 80; i++) assert_int_equal(got[i], m[100 + i]);
    assert_row_synced(&f, row, 180);
    a.flags = 0;
    KVT_OK(kvc_flow_release(f.flow, one, 1, 1, NULL));
    assert_int_equal(kvc_allocator_available_size(f.alloc), 2048);
    fixture_free(&f);
  }
}

static void test_multi_token_decode(void **state) {
  (void)state;
  fixture f;
  fixture_make(&f, 4, 256, 1024, 8, NULL);
  kvc_req_state a = req0(7), e = req0(4);
  kvc_req_state *both[] = {&a, &e};
  KVT_OK(kvc_flow_alloc_for_extend(f.flow, both, 2, f.out, NULL));
  kvc_req_state *one[] = {&a};
  KVT_OK(kvc_flow_alloc_for_decode(f.flow, one, 1, 3, f.out, NULL)); /* positions 7, 8, 9 */
  assert_int_equal(a.seq_len, 10);
  assert_int_equal(a.kv_allocated_len, 10);
  const int32_t *m = kvc_req_to_token_pool_row(f.pool, a.req_row);
  int64_t got[3];
  kvt_d2h(got, f.out, sizeof got);
  assert_int_equal(got[0], m[6] + 1); /* finishes page 1 (slots 8..15) */
  assert_int_equal(got[0], m[7]);
  assert_int_equal(got[1], m[8]);
  assert_int_equal(got[2], m[9]);
  assert_int_equal(m[8] % 8, 0); /* opens a page */
  assert_row_synced(&f, a.req_row, 10);
  KVT_OK(kvc_flow_release(f.flow, both, 2, 1, NULL));
  assert_int_equal(kvc_allocator_available_size(f.alloc), 1024);
  fixture_free(&f);
}

/* --- A prefix cache owning shared slots (as a radix cache would) --------------------- */

typedef struct toy_cache {
  int64_t slots[64];
  int64_t n;         /* cached prefix, owned by the cache */
  int64_t evictions; /* evict calls */
} toy_cache;

static kvc_status toy_finished(void *self, kvc_flow *flow, kvc_req_state *req, int is_insert) {
  (void)self;
  (void)is_insert;
  /* The cache keeps [0, cache_protected_len); the request's own part is freed. */
  int64_t from = req->cache_protected_len, to = req->kv_committed_len;
  if (to <= from) return KVC_OK;
  int64_t buf[512];
  kvc_status st = kvc_flow_row_slots(flow, req->req_row, from, to, buf);
  return st != KVC_OK ? st : kvc_flow_free_slots(flow, buf, (size_t)(to - from));
}
static kvc_status toy_evict(void *self, kvc_flow *flow, int64_t n, int64_t swa, int64_t mamba) {
  (void)flow;
  (void)n;
  (void)swa;
  (void)mamba;
  ((toy_cache *)self)->evictions++;
  return KVC_OK;
}
static int64_t toy_cached(void *self) { return ((toy_cache *)self)->n; }

static void test_prefix_slots_from_a_cache_match(void **state) {
  (void)state;
  toy_cache toy = {{0}, 0, 0};
  kvc_prefix_cache c;
  memset(&c, 0, sizeof c);
  c.self = &toy;
  c.cache_finished_req = toy_finished;
  c.evict = toy_evict;
  c.cached_size = toy_cached;
  fixture f;
  fixture_make(&f, 4, 256, 256, 16, &c);
  /* The cache holds 32 slots (2 pages) from an earlier request. */
  KVT_OK(kvc_allocator_alloc(f.alloc, 32, toy.slots));
  toy.n = 32;
  kvc_req_state a = req0(40);
  a.prefix_len = 32;
  a.prefix_slots = toy.slots;
  a.cache_protected_len = 32;
  kvc_req_state *one[] = {&a};
  KVT_OK(kvc_flow_alloc_for_extend(f.flow, one, 1, f.out, NULL));
  const int32_t *m = kvc_req_to_token_pool_row(f.pool, a.req_row);
  for (int i = 0; i < 32; i++) assert_int_equal(m[i], toy.slots[i]);
  assert_row_synced(&f, a.req_row, 40);
  assert_null(a.prefix_slots);
  kvc_req_state *live[] = {&a};
  /* live: 3 pages of a's row, of which [0, cache_protected_len) = 2 are the cache's. */
  KVT_OK(kvc_flow_check(f.flow, live, 1));
  /* A request larger than free space triggers an evict call (not a chunk cache). */
  kvc_req_state b = req0(250);
  kvc_req_state *two[] = {&b};
  KVT_STATUS(kvc_flow_alloc_for_extend(f.flow, two, 1, f.out, NULL), KVC_ERR_OUT_OF_SLOTS);
  assert_int_equal(toy.evictions, 1);
  KVT_OK(kvc_flow_release(f.flow, one, 1, 1, NULL));
  assert_int_equal(kvc_allocator_available_size(f.alloc), 256 - 32);
  fixture_free(&f);
}

static void test_arguments_are_validated(void **state) {
  (void)state;
  fixture f;
  fixture_make(&f, 4, 64, 256, 4, NULL);
  kvc_req_state a = req0(65); /* past the row width */
  kvc_req_state *one[] = {&a};
  KVT_STATUS(kvc_flow_alloc_for_extend(f.flow, one, 1, f.out, NULL), KVC_ERR_INVALID_ARGUMENT);
  a = req0(10);
  a.prefix_len = 4; /* a prefix with neither row nor slots */
  KVT_STATUS(kvc_flow_alloc_for_extend(f.flow, one, 1, f.out, NULL), KVC_ERR_INVALID_ARGUMENT);
  a = req0(10);
  a.req_row = 3; /* not held */
  KVT_STATUS(kvc_flow_alloc_for_extend(f.flow, one, 1, f.out, NULL), KVC_ERR_MISUSE);
  KVT_STATUS(kvc_flow_alloc_for_decode(f.flow, one, 1, 1, f.out, NULL), KVC_ERR_MISUSE);
  KVT_STATUS(kvc_flow_alloc_for_decode(f.flow, one, 1, 0, f.out, NULL), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_flow_alloc_for_extend(NULL, one, 1, f.out, NULL), KVC_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvc_allocator_available_size(f.alloc), 256);
  assert_int_equal(kvc_req_to_token_pool_available(f.pool), 4);
  /* The same request twice in one release: misuse, nothing freed; then a clean release. */
  a = req0(10);
  KVT_OK(kvc_flow_alloc_for_extend(f.flow, one, 1, f.out, NULL));
  kvc_req_state *twice[] = {&a, &a};
  KVT_STATUS(kvc_flow_release(f.flow, twice, 2, 1, NULL), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "share row"));
  assert_int_equal(kvc_allocator_available_size(f.alloc), 256 - 12);
  KVT_OK(kvc_flow_release(f.flow, one, 1, 1, NULL));
  assert_int_equal(kvc_allocator_available_size(f.alloc), 256);
  assert_int_equal(kvc_req_to_token_pool_available(f.pool), 4);
  kvc_flow_config bad = KVC_FLOW_CONFIG_INIT;
  bad.req_pool = f.pool;
  bad.allocator = f.alloc;
  bad.page_size = 8; /* differs from the allocator's */
  kvc_flow *g = NULL;
  KVT_STATUS(kvc_flow_create(kvt_ctx, &bad, &g), KVC_ERR_INVALID_ARGUMENT);
  assert_null(g);
  fixture_free(&f);
}

static void test_speculative_reservations(void **state) {
  (void)state;
  fixture f;
  fixture_make(&f, 2, 64, 256, 16, NULL);
  assert_int_equal(kvc_flow_alloc_len_per_decode(f.flow), 1);
  assert_int_equal(kvc_flow_extra_context_len(f.flow), 4);
  kvc_flow_config c = KVC_FLOW_CONFIG_INIT;
  c.req_pool = f.pool;
  c.allocator = f.alloc;
  c.page_size = 16;
  c.spec_num_steps = 3;
  c.spec_topk = 4;
  c.spec_num_draft_tokens = 8;
  c.spec_keeps_draft_kv = 1;
  kvc_flow *g;
  KVT_OK(kvc_flow_create(kvt_ctx, &c, &g));
  /* ceil((16 - 1 + 3) / 16) * 16 * 4 = 128 > 8 */
  assert_int_equal(kvc_flow_alloc_len_per_decode(g), 128);
  assert_int_equal(kvc_flow_extra_context_len(g), 256);
  kvc_flow_destroy(g);
  fixture_free(&f);
}

/* A flow with a decode channel gives the same slots, rows and states as one without;
 * the channel's kernel (enqueued here, replayed in a graph by an engine) writes
 * out_cache_loc and the table. */
static void test_decode_through_a_channel(void **state) {
  (void)state;
  fixture c, p; /* channel, plain */
  fixture_make(&c, 8, 256, 1024, 4, NULL);
  fixture_make(&p, 8, 256, 1024, 4, NULL);
  kvc_decode_channel *ch = NULL, *other = NULL;
  KVT_OK(kvc_decode_channel_create(c.alloc, c.pool, 4, 2, c.out, &ch));
  KVT_OK(kvc_decode_channel_create(p.alloc, p.pool, 4, 2, p.out, &other));
  KVT_STATUS(kvc_flow_set_decode_channel(c.flow, other), KVC_ERR_INVALID_ARGUMENT); /* another allocator's */
  KVT_OK(kvc_flow_set_decode_channel(c.flow, ch));
  kvc_req_state a[3] = {req0(6), req0(3), req0(9)}, b[3] = {req0(6), req0(3), req0(9)};
  kvc_req_state *ca[] = {&a[0], &a[1], &a[2]}, *pa[] = {&b[0], &b[1], &b[2]};
  KVT_OK(kvc_flow_alloc_for_extend(c.flow, ca, 3, c.out, NULL));
  KVT_OK(kvc_flow_alloc_for_extend(p.flow, pa, 3, p.out, NULL));
  KVT_STATUS(kvc_flow_alloc_for_decode(c.flow, ca, 3, 1, c.out + 8, NULL), KVC_ERR_INVALID_ARGUMENT);
  for (int step = 0; step < 9; step++) {
    KVT_OK(kvc_flow_alloc_for_decode(c.flow, ca, 3, 1, NULL, NULL));
    KVT_OK(kvc_decode_channel_enqueue(ch, NULL));
    KVT_OK(kvc_flow_alloc_for_decode(p.flow, pa, 3, 1, p.out, NULL));
    int64_t got[3], want[3];
    kvt_d2h(got, c.out, sizeof got);
    kvt_d2h(want, p.out, sizeof want);
    for (int i = 0; i < 3; i++) {
      if (got[i] != want[i])
        fail_msg("step %d request %d: slot %lld, without channel %lld", step, i, (long long)got[i], (long long)want[i]);
      assert_int_equal(a[i].seq_len, b[i].seq_len);
      assert_int_equal(a[i].kv_allocated_len, b[i].kv_allocated_len);
    }
  }
  for (int i = 0; i < 3; i++) assert_row_synced(&c, a[i].req_row, a[i].seq_len);
  /* depth 2 published without the kernel: BUSY before anything changes */
  KVT_OK(kvc_flow_alloc_for_decode(c.flow, ca, 3, 1, NULL, NULL));
  KVT_OK(kvc_flow_alloc_for_decode(c.flow, ca, 3, 1, NULL, NULL));
  const int64_t avail = kvc_allocator_available_size(c.alloc), seq0 = a[0].seq_len;
  KVT_STATUS(kvc_flow_alloc_for_decode(c.flow, ca, 3, 1, NULL, NULL), KVC_ERR_BUSY);
  assert_int_equal(kvc_allocator_available_size(c.alloc), avail);
  assert_int_equal(a[0].seq_len, seq0);
  KVT_OK(kvc_decode_channel_enqueue(ch, NULL));
  KVT_OK(kvc_decode_channel_enqueue(ch, NULL));
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  for (int i = 0; i < 3; i++) assert_row_synced(&c, a[i].req_row, a[i].seq_len);
  /* back to plain decode; release and conservation as usual */
  KVT_OK(kvc_flow_set_decode_channel(c.flow, NULL));
  KVT_OK(kvc_flow_alloc_for_decode(c.flow, ca, 3, 1, c.out, NULL));
  KVT_OK(kvc_flow_check(c.flow, ca, 3));
  KVT_OK(kvc_flow_release(c.flow, ca, 3, 1, NULL));
  KVT_OK(kvc_flow_release(p.flow, pa, 3, 1, NULL));
  assert_int_equal(kvc_allocator_available_size(c.alloc), kvc_allocator_size(c.alloc));
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  kvc_decode_channel_destroy(ch);
  kvc_decode_channel_destroy(other);
  fixture_free(&c);
  fixture_free(&p);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_decode_through_a_channel),
    cmocka_unit_test(test_prefill_decode_release_roundtrip),
    cmocka_unit_test(test_release_skips_released_requests),
    cmocka_unit_test(test_extend_out_of_memory_changes_nothing),
    cmocka_unit_test(test_request_rows_exhausted),
    cmocka_unit_test(test_chunked_prefill_continues_the_row),
    cmocka_unit_test(test_multi_token_decode),
    cmocka_unit_test(test_prefix_slots_from_a_cache_match),
    cmocka_unit_test(test_arguments_are_validated),
    cmocka_unit_test(test_speculative_reservations),
};
KVT_MAIN("flow", tests)
