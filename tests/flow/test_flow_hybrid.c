/*
 * Flows over SWA and hybrid (Mamba) models: window eviction during decode, both sides
 * conserved; Mamba slots taken with the request rows and returned at release; sessions
 * return the Mamba state SGLang forgets.
 */
#include "harness.h"

static kvc_req_state req0(int64_t seq) {
  kvc_req_state r;
  memset(&r, 0, sizeof r);
  r.seq_len = seq;
  return r;
}

/* A 4-row request pool, an SWA allocator (256 full / 64 SWA slots, page 4) and a flow
 * with an 8-token window: the setting of both window-eviction tests. */
typedef struct swa_world {
  kvc_req_to_token_pool *pool;
  kvc_swa_allocator *swa;
  kvc_flow *flow;
  int64_t *out;
} swa_world;

static void swa_world_make(swa_world *w) {
  kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rc.size = 4;
  rc.max_context_len = 256;
  KVT_OK(kvc_req_to_token_pool_create(kvt_ctx, &rc, &w->pool));
  kvc_swa_allocator_config sc = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  sc.size_full = 256;
  sc.size_swa = 64;
  sc.page_size = 4;
  KVT_OK(kvc_swa_allocator_create(kvt_ctx, &sc, &w->swa));
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = 4;
  fc.req_pool = w->pool;
  fc.swa_allocator = w->swa;
  fc.sliding_window = 8;
  KVT_OK(kvc_flow_create(kvt_ctx, &fc, &w->flow));
  w->out = kvt_dev_alloc(1024 * 8);
}

static void swa_world_free(swa_world *w) {
  kvt_dev_free(w->out);
  kvc_flow_destroy(w->flow);
  kvc_swa_allocator_destroy(w->swa);
  kvc_req_to_token_pool_destroy(w->pool);
}

static void test_swa_window_eviction_during_decode(void **state) {
  (void)state;
  swa_world w;
  swa_world_make(&w);
  kvc_req_to_token_pool *pool = w.pool;
  kvc_swa_allocator *swa = w.swa;
  kvc_flow *flow = w.flow;
  int64_t *out = w.out;
  const int64_t swa0 = kvc_swa_allocator_swa_available_size(swa), full0 = kvc_swa_allocator_full_available_size(swa);
  kvc_req_state a = req0(40);
  kvc_req_state *one[] = {&a};
  KVT_OK(kvc_flow_alloc_for_extend(flow, one, 1, out, NULL));
  assert_int_equal(kvc_swa_allocator_swa_available_size(swa), swa0 - 40);
  /* Decode 40 more tokens: the SWA side stays bounded by window + margin + a page,
   * while the full side grows with the sequence. */
  int64_t max_swa_used = 0;
  for (int i = 0; i < 40; i++) {
    KVT_OK(kvc_flow_alloc_for_decode(flow, one, 1, 1, out, NULL));
    int64_t used = swa0 - kvc_swa_allocator_swa_available_size(swa);
    if (i > 2 && used > max_swa_used) max_swa_used = used;
  }
  assert_int_equal(a.seq_len, 80);
  assert_true(a.swa_evicted_seqlen > 0);
  assert_int_equal(a.swa_evicted_seqlen % 4, 0);
  /* evicted = floor_page(pre_len - window - page) at the last decode (pre_len 79). */
  assert_int_equal(a.swa_evicted_seqlen, (79 - 8 - 4) / 4 * 4);
  assert_true(max_swa_used <= 8 + 4 + 2 * 4);
  assert_int_equal(kvc_swa_allocator_full_available_size(swa), full0 - 80);
  /* Mapping of evicted slots is cleared; the recent ones still have peers. */
  const int32_t *map = kvc_swa_allocator_mapping_host(swa);
  const int32_t *row = kvc_req_to_token_pool_row(pool, a.req_row);
  assert_int_equal(map[row[0]], 0);
  assert_true(map[row[79]] > 0);
  KVT_OK(kvc_swa_allocator_check(swa));
  kvc_req_state *live[] = {&a};
  KVT_OK(kvc_flow_check(flow, live, 1));
  KVT_OK(kvc_flow_release(flow, one, 1, 1, NULL));
  assert_int_equal(kvc_swa_allocator_swa_available_size(swa), swa0);
  assert_int_equal(kvc_swa_allocator_full_available_size(swa), full0);
  KVT_OK(kvc_swa_allocator_check(swa));
  swa_world_free(&w);
}

/* The same window eviction with decode steps published through an SWA decode channel and
 * applied by its kernel: same states and host mapping, and the device mapping (written by
 * the eviction's launches and the channel's kernel, in stream order) equals the host's. */
static void test_swa_window_eviction_through_a_channel(void **state) {
  (void)state;
  swa_world w;
  swa_world_make(&w);
  kvc_req_to_token_pool *pool = w.pool;
  kvc_swa_allocator *swa = w.swa;
  kvc_flow *flow = w.flow;
  int64_t *out = w.out;
  kvc_decode_channel *ch;
  KVT_OK(kvc_decode_channel_create_swa(swa, pool, 4, 64, out, &ch)); /* 40 steps never BUSY */
  KVT_OK(kvc_flow_set_decode_channel(flow, ch));
  const int64_t swa0 = kvc_swa_allocator_swa_available_size(swa), full0 = kvc_swa_allocator_full_available_size(swa);
  kvc_req_state a = req0(40);
  kvc_req_state *one[] = {&a};
  KVT_OK(kvc_flow_alloc_for_extend(flow, one, 1, out, NULL));
  /* an out_cache_loc the channel does not write: refused before the window eviction */
  const int64_t swa_used = kvc_swa_allocator_swa_available_size(swa);
  KVT_STATUS(kvc_flow_alloc_for_decode(flow, one, 1, 1, out + 8, NULL), KVC_ERR_INVALID_ARGUMENT);
  assert_int_equal(a.swa_evicted_seqlen, 0);
  assert_int_equal(kvc_swa_allocator_swa_available_size(swa), swa_used);
  assert_int_equal(a.seq_len, 40);
  for (int i = 0; i < 40; i++) {
    KVT_OK(kvc_flow_alloc_for_decode(flow, one, 1, 1, NULL, NULL));
    KVT_OK(kvc_decode_channel_enqueue(ch, NULL));
  }
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  assert_int_equal(a.seq_len, 80);
  assert_int_equal(a.swa_evicted_seqlen, (79 - 8 - 4) / 4 * 4);
  assert_int_equal(kvc_swa_allocator_full_available_size(swa), full0 - 80);
  const int32_t *map = kvc_swa_allocator_mapping_host(swa);
  const int32_t *row = kvc_req_to_token_pool_row(pool, a.req_row);
  assert_int_equal(map[row[0]], 0);
  assert_true(map[row[79]] > 0);
  const int64_t n = kvc_swa_allocator_mapping_length(swa);
  int64_t *d = malloc((size_t)n * 8);
  kvt_d2h(d, kvc_swa_allocator_mapping_device(swa), (size_t)n * 8);
  for (int64_t i = 0; i < n; i++)
    if (d[i] != map[i]) fail_msg("device mapping[%lld] = %lld, host %d", (long long)i, (long long)d[i], map[i]);
  free(d);
  KVT_OK(kvc_req_to_token_pool_audit_device(pool, NULL));
  KVT_OK(kvc_swa_allocator_check(swa));
  KVT_OK(kvc_flow_release(flow, one, 1, 1, NULL));
  assert_int_equal(kvc_swa_allocator_swa_available_size(swa), swa0);
  assert_int_equal(kvc_swa_allocator_full_available_size(swa), full0);
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  kvc_decode_channel_destroy(ch);
  swa_world_free(&w);
}

static kvc_mamba_pool *make_mamba(int32_t size) {
  kvc_mamba_pool_config c = KVC_MAMBA_POOL_CONFIG_INIT;
  kvc_mamba_shape conv = {2, 0, {8, 4, 0}};
  c.size = size;
  c.num_layers = 2;
  c.num_conv = 1;
  c.conv_shapes = &conv;
  c.temporal_shape[0] = 2;
  c.temporal_shape[1] = 4;
  c.temporal_shape[2] = 4;
  kvc_mamba_pool *mp;
  KVT_OK(kvc_mamba_pool_create(kvt_ctx, &c, &mp));
  return mp;
}

static void test_hybrid_mamba_slots_follow_requests(void **state) {
  (void)state;
  kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rc.size = 4;
  rc.max_context_len = 128;
  kvc_req_to_token_pool *pool;
  KVT_OK(kvc_req_to_token_pool_create(kvt_ctx, &rc, &pool));
  kvc_mamba_pool *mp = make_mamba(3);
  kvc_hybrid_req_pool_config hc = KVC_HYBRID_REQ_POOL_CONFIG_INIT;
  hc.req_pool = pool;
  hc.mamba_pool = mp;
  kvc_hybrid_req_pool *hp;
  KVT_OK(kvc_hybrid_req_pool_create(kvt_ctx, &hc, &hp));
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = KVC_ALLOCATOR_PAGED;
  ac.size = 512;
  ac.page_size = 16;
  kvc_allocator *alloc;
  KVT_OK(kvc_allocator_create(kvt_ctx, &ac, &alloc));
  kvc_session_cache *sc;
  KVT_OK(kvc_session_cache_create(kvt_ctx, NULL, &sc));
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = 16;
  fc.req_pool = pool;
  fc.allocator = alloc;
  fc.hybrid_req_pool = hp;
  fc.cache = kvc_session_cache_as_prefix_cache(sc);
  kvc_flow *flow;
  KVT_OK(kvc_flow_create(kvt_ctx, &fc, &flow));
  int64_t *out = kvt_dev_alloc(1024 * 8);
  kvc_req_state a = req0(20), b = req0(30), c = req0(10), d = req0(10);
  b.session_id = 5;
  kvc_req_state *ab[] = {&a, &b};
  KVT_OK(kvc_flow_alloc_for_extend(flow, ab, 2, out, NULL));
  assert_int_equal(a.mamba_slot, 1); /* FIFO, with the rows */
  assert_int_equal(b.mamba_slot, 2);
  assert_int_equal(kvc_hybrid_req_pool_mamba_slot(hp, a.req_row), 1);
  /* Two more requests need 2 Mamba slots; only 1 is free: nothing changes. */
  kvc_req_state *cd[] = {&c, &d};
  int32_t rows_before = kvc_req_to_token_pool_available(pool);
  KVT_STATUS(kvc_flow_alloc_for_extend(flow, cd, 2, out, NULL), KVC_ERR_OUT_OF_SLOTS);
  assert_int_equal(kvc_req_to_token_pool_available(pool), rows_before);
  assert_int_equal(kvc_mamba_pool_available(mp), 1);
  assert_int_equal(kvc_allocator_available_size(alloc), 512 - 32 - 32);
  KVT_OK(kvc_flow_release(flow, ab, 2, 1, NULL));
  /* a's Mamba slot came back; b's session keeps its slot with its row. */
  assert_int_equal(kvc_mamba_pool_available(mp), 2);
  assert_int_equal(b.mamba_slot, 0);
  KVT_OK(kvc_session_cache_release(sc, flow, 5)); /* also returns the Mamba state */
  assert_int_equal(kvc_mamba_pool_available(mp), 3);
  assert_int_equal(kvc_allocator_available_size(alloc), 512);
  assert_int_equal(kvc_req_to_token_pool_available(pool), 4);
  KVT_OK(kvc_flow_check(flow, NULL, 0));
  kvt_dev_free(out);
  kvc_flow_destroy(flow);
  kvc_session_cache_destroy(sc);
  kvc_allocator_destroy(alloc);
  kvc_hybrid_req_pool_destroy(hp);
  kvc_mamba_pool_destroy(mp);
  kvc_req_to_token_pool_destroy(pool);
}

/* Regression (tests/fuzz/fuzz_flow_hybrid): a row mapping one Mamba slot twice (running
 * slot and a track entry, from caller-provided slots) made free_mamba_cache fail in
 * kvc_mamba_pool_free after it had already written the device mapping, leaving the
 * device mapping different from the host mirror. Now MISUSE before any change. */
static void test_hybrid_free_mamba_cache_slot_mapped_twice(void **state) {
  (void)state;
  kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rc.size = 2;
  rc.max_context_len = 16;
  kvc_req_to_token_pool *pool;
  KVT_OK(kvc_req_to_token_pool_create(kvt_ctx, &rc, &pool));
  kvc_mamba_pool *mp = make_mamba(4);
  kvc_hybrid_req_pool_config hc = KVC_HYBRID_REQ_POOL_CONFIG_INIT;
  hc.flags = KVC_HYBRID_TRACK;
  hc.req_pool = pool;
  hc.mamba_pool = mp;
  kvc_hybrid_req_pool *hp;
  KVT_OK(kvc_hybrid_req_pool_create(kvt_ctx, &hc, &hp));
  int32_t x, row = 0;
  KVT_OK(kvc_mamba_pool_alloc(mp, 1, &x, NULL));
  int32_t ms = x, pp[2] = {x, -1};
  KVT_OK(kvc_hybrid_req_pool_alloc(hp, 1, &row, &ms, pp, NULL));
  KVT_STATUS(kvc_hybrid_req_pool_free_mamba_cache(hp, row, -1, NULL), KVC_ERR_MISUSE);
  int32_t dev[3];
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  kvt_d2h(dev, kvc_hybrid_req_pool_mapping(hp), sizeof dev);
  assert_int_equal(dev[row], x); /* device still equals the mirror */
  assert_int_equal(kvc_hybrid_req_pool_mamba_slot(hp, row), x);
  assert_int_equal(kvc_mamba_pool_available(mp), 3);
  KVT_OK(kvc_mamba_pool_check(mp));
  KVT_OK(kvc_hybrid_req_pool_set_track_slot(hp, row, 0, -1, NULL));
  KVT_OK(kvc_hybrid_req_pool_free_mamba_cache(hp, row, -1, NULL));
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  kvt_d2h(dev, kvc_hybrid_req_pool_mapping(hp), sizeof dev);
  assert_int_equal(dev[row], 0);
  assert_int_equal(kvc_mamba_pool_available(mp), 4);
  KVT_OK(kvc_req_to_token_pool_free(pool, row));
  kvc_hybrid_req_pool_destroy(hp);
  kvc_mamba_pool_destroy(mp);
  kvc_req_to_token_pool_destroy(pool);
}

/* Regression (tests/fuzz/fuzz_flow_hybrid): with track slots and pp == 1 the flow packed
 * the requests' track slots with a stride of 2 while the hybrid pool reads them with a
 * stride of pp, so in a batch [fresh B, continuing A] A was read as having no track slot:
 * it got a new one (its old one leaked) and B's state did not match its row. */
static void test_hybrid_flow_track_pp1_batch(void **state) {
  (void)state;
  kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rc.size = 4;
  rc.max_context_len = 64;
  kvc_req_to_token_pool *pool;
  KVT_OK(kvc_req_to_token_pool_create(kvt_ctx, &rc, &pool));
  kvc_mamba_pool *mp = make_mamba(6);
  kvc_hybrid_req_pool_config hc = KVC_HYBRID_REQ_POOL_CONFIG_INIT;
  hc.flags = KVC_HYBRID_TRACK;
  hc.pp = 1;
  hc.req_pool = pool;
  hc.mamba_pool = mp;
  kvc_hybrid_req_pool *hp;
  KVT_OK(kvc_hybrid_req_pool_create(kvt_ctx, &hc, &hp));
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.size = 128;
  kvc_allocator *alloc;
  KVT_OK(kvc_allocator_create(kvt_ctx, &ac, &alloc));
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.req_pool = pool;
  fc.allocator = alloc;
  fc.hybrid_req_pool = hp;
  kvc_flow *flow;
  KVT_OK(kvc_flow_create(kvt_ctx, &fc, &flow));
  int64_t *out = kvt_dev_alloc(128 * 8);
  kvc_req_state a = req0(8), b = req0(5);
  kvc_req_state *one[] = {&a}, *ba[] = {&b, &a};
  KVT_OK(kvc_flow_alloc_for_extend(flow, one, 1, out, NULL));
  assert_int_equal(a.mamba_slot, 1);
  assert_int_equal(a.mamba_track[0], 2);
  a.prefix_len = 8; /* chunked prefill: A continues, B starts */
  a.seq_len = 12;
  KVT_OK(kvc_flow_alloc_for_extend(flow, ba, 2, out, NULL));
  assert_int_equal(a.mamba_track[0], 2); /* kept */
  assert_int_equal(kvc_hybrid_req_pool_track_slots(hp, a.req_row)[0], 2);
  assert_int_equal(b.mamba_slot, kvc_hybrid_req_pool_mamba_slot(hp, b.req_row));
  assert_int_equal(b.mamba_track[0], kvc_hybrid_req_pool_track_slots(hp, b.req_row)[0]);
  assert_int_equal(kvc_mamba_pool_available(mp), 2);
  kvc_req_state *live[] = {&a, &b};
  KVT_OK(kvc_flow_check(flow, live, 2));
  KVT_OK(kvc_flow_release(flow, ba, 2, 1, NULL));
  assert_int_equal(kvc_mamba_pool_available(mp), 6); /* nothing leaked */
  assert_int_equal(kvc_allocator_available_size(alloc), 128);
  assert_int_equal(kvc_req_to_token_pool_available(pool), 4);
  KVT_OK(kvc_mamba_pool_check(mp));
  kvt_dev_free(out);
  kvc_flow_destroy(flow);
  kvc_allocator_destroy(alloc);
  kvc_hybrid_req_pool_destroy(hp);
  kvc_mamba_pool_destroy(mp);
  kvc_req_to_token_pool_destroy(pool);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_swa_window_eviction_during_decode),
    cmocka_unit_test(test_swa_window_eviction_through_a_channel),
    cmocka_unit_test(test_hybrid_mamba_slots_follow_requests),
    cmocka_unit_test(test_hybrid_free_mamba_cache_slot_mapped_twice),
    cmocka_unit_test(test_hybrid_flow_track_pp1_batch),
};
KVT_MAIN("flow_hybrid", tests)
