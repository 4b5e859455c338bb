/*
 * Flows over SWA and hybrid (Mamba) models: window eviction during decode, both sides
 * conserved; Mamba slots taken with the request rows and returned at release; sessions
 * return the Mamba state SGLang forgets; a hybrid flow's decode through a decode channel
 * matches the same flow without one.
 */
#include "harness.h"

static kvc_req_state req0(int64_t seq) {
  kvc_req_state r;
  memset(&r, 0, sizeof r);
  r.seq_len = seq;
  return r;
}

/* A flow and the pools under it: SWA (swa_world_make) or hybrid (hyb_world_make, then
 * hyb_world_flow). Objects a world does not have stay NULL; flow_world_free frees the
 * others. */
typedef struct flow_world {
  kvc_req_to_token_pool *pool;
  kvc_swa_allocator *swa;
  kvc_allocator *alloc;
  kvc_mamba_pool *mp;
  kvc_hybrid_req_pool *hp;
  kvc_flow *flow;
  int64_t *out;
} flow_world;

static void flow_world_free(flow_world *w) {
  if (w->out) kvt_dev_free(w->out);
  kvc_flow_destroy(w->flow);
  kvc_swa_allocator_destroy(w->swa);
  kvc_allocator_destroy(w->alloc);
  kvc_hybrid_req_pool_destroy(w->hp);
  kvc_mamba_pool_destroy(w->mp);
  kvc_req_to_token_pool_destroy(w->pool);
}

static void make_req_pool(flow_world *w, int32_t rows, int32_t width) {
  memset(w, 0, sizeof *w);
  kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rc.size = rows;
  rc.max_context_len = width;
  KVT_OK(kvc_req_to_token_pool_create(kvt_ctx, &rc, &w->pool));
}

/* A 4-row request pool, an SWA allocator (256 full / 64 SWA slots, page ps) and a flow
 * with an 8-token window: the setting of both window-eviction tests. */
static void swa_world_make(flow_world *w, int32_t ps) {
  make_req_pool(w, 4, 256);
  kvc_swa_allocator_config sc = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  sc.size_full = 256;
  sc.size_swa = 64;
  sc.page_size = ps;
  KVT_OK(kvc_swa_allocator_create(kvt_ctx, &sc, &w->swa));
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = ps;
  fc.req_pool = w->pool;
  fc.swa_allocator = w->swa;
  fc.sliding_window = 8;
  KVT_OK(kvc_flow_create(kvt_ctx, &fc, &w->flow));
  w->out = kvt_dev_alloc(1024 * 8);
}

/* Page 4, then page 1: at page size 1 the release frees full slots whose SWA peers the
 * window eviction already released (only their full side goes back). */
static void test_swa_window_eviction_during_decode(void **state) {
  (void)state;
  for (int32_t ps = 4; ps >= 1; ps -= 3) {
    flow_world w;
    swa_world_make(&w, ps);
    const int64_t swa0 = kvc_swa_allocator_swa_available_size(w.swa);
    const int64_t full0 = kvc_swa_allocator_full_available_size(w.swa);
    kvc_req_state a = req0(40);
    kvc_req_state *one[] = {&a};
    KVT_OK(kvc_flow_alloc_for_extend(w.flow, one, 1, w.out, NULL));
    kvt_digest_tables(w.pool, w.swa);
    assert_int_equal(kvc_swa_allocator_swa_available_size(w.swa), swa0 - 40);
    /* Decode 40 more tokens: the SWA side stays bounded by window + margin + a page,
     * while the full side grows with the sequence. */
    int64_t max_swa_used = 0;
    for (int i = 0; i < 40; i++) {
      KVT_OK(kvc_flow_alloc_for_decode(w.flow, one, 1, 1, w.out, NULL));
      kvt_digest_tables(w.pool, w.swa);
      int64_t used = swa0 - kvc_swa_allocator_swa_available_size(w.swa);
      if (i > 2 && used > max_swa_used) max_swa_used = used;
    }
    assert_int_equal(a.seq_len, 80);
    assert_true(a.swa_evicted_seqlen > 0);
    assert_int_equal(a.swa_evicted_seqlen % ps, 0);
    /* evicted = floor_page(pre_len - window - page) at the last decode (pre_len 79). */
    assert_int_equal(a.swa_evicted_seqlen, (79 - 8 - ps) / ps * ps);
    assert_true(max_swa_used <= 8 + ps + 2 * ps);
    assert_int_equal(kvc_swa_allocator_full_available_size(w.swa), full0 - 80);
    /* Mapping of evicted slots is cleared; the recent ones still have peers. */
    const int32_t *map = kvc_swa_allocator_mapping_host(w.swa);
    const int32_t *row = kvc_req_to_token_pool_row(w.pool, a.req_row);
    assert_int_equal(map[row[0]], 0);
    assert_true(map[row[79]] > 0);
    KVT_OK(kvc_swa_allocator_check(w.swa));
    kvc_req_state *live[] = {&a};
    KVT_OK(kvc_flow_check(w.flow, live, 1));
    KVT_OK(kvc_flow_release(w.flow, one, 1, 1, NULL));
    kvt_digest_tables(w.pool, w.swa);
    assert_int_equal(kvc_swa_allocator_swa_available_size(w.swa), swa0);
    assert_int_equal(kvc_swa_allocator_full_available_size(w.swa), full0);
    KVT_OK(kvc_swa_allocator_check(w.swa));
    flow_world_free(&w);
  }
}

/* A batch the allocator would refuse (a request listed twice, a row not held) is refused
 * before the window eviction: no SWA slot freed, no mapping zeroed, swa_evicted_seqlen
 * unchanged (issue 13 item 7). Extend too, for a request with a row listed twice. */
static void test_swa_refused_batch_evicts_nothing(void **state) {
  (void)state;
  flow_world w;
  swa_world_make(&w, 4);
  kvc_req_state a = req0(40), b = req0(24);
  kvc_req_state *both[] = {&a, &b};
  KVT_OK(kvc_flow_alloc_for_extend(w.flow, both, 2, w.out, NULL));
  kvt_digest_tables(w.pool, w.swa);
  const int64_t swa_free = kvc_swa_allocator_swa_available_size(w.swa);
  const int64_t full_free = kvc_swa_allocator_full_available_size(w.swa);
  const int32_t *row = kvc_req_to_token_pool_row(w.pool, a.req_row);
  const int32_t *map = kvc_swa_allocator_mapping_host(w.swa);
  const int32_t peer0 = map[row[0]];
  assert_true(peer0 > 0);
  kvc_req_state *twice[] = {&a, &b, &a};
  KVT_STATUS(kvc_flow_alloc_for_decode(w.flow, twice, 3, 1, w.out, NULL), KVC_ERR_MISUSE);
  kvt_digest_tables(w.pool, w.swa);
  assert_int_equal(a.swa_evicted_seqlen, 0);
  assert_int_equal(kvc_swa_allocator_swa_available_size(w.swa), swa_free);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "share row"));
  kvc_req_state stale = a;
  stale.req_row = 4; /* a row nobody holds */
  kvc_req_state *bad_row[] = {&a, &stale};
  KVT_STATUS(kvc_flow_alloc_for_decode(w.flow, bad_row, 2, 1, w.out, NULL), KVC_ERR_MISUSE);
  kvt_digest_tables(w.pool, w.swa);
  /* Extend of a request with a row (a chunked prefill continuing) listed twice. */
  a.prefix_len = a.seq_len;
  a.seq_len += 8;
  kvc_req_state *twice_extend[] = {&a, &a};
  KVT_STATUS(kvc_flow_alloc_for_extend(w.flow, twice_extend, 2, w.out, NULL), KVC_ERR_MISUSE);
  kvt_digest_tables(w.pool, w.swa);
  a.seq_len = a.prefix_len;
  a.prefix_len = 0;
  assert_int_equal(a.swa_evicted_seqlen, 0);
  assert_int_equal(b.swa_evicted_seqlen, 0);
  assert_int_equal(map[row[0]], peer0);
  assert_int_equal(kvc_swa_allocator_swa_available_size(w.swa), swa_free);
  assert_int_equal(kvc_swa_allocator_full_available_size(w.swa), full_free);
  assert_int_equal(a.seq_len, 40);
  kvc_req_state *live[] = {&a, &b};
  KVT_OK(kvc_flow_check(w.flow, live, 2));
  /* The same batch without the repeat goes through and evicts. */
  KVT_OK(kvc_flow_alloc_for_decode(w.flow, both, 2, 1, w.out, NULL));
  kvt_digest_tables(w.pool, w.swa);
  assert_true(a.swa_evicted_seqlen > 0);
  KVT_OK(kvc_flow_release(w.flow, both, 2, 1, NULL));
  kvt_digest_tables(w.pool, w.swa);
  KVT_OK(kvc_swa_allocator_check(w.swa));
  flow_world_free(&w);
}

/* The same window eviction with decode steps published through an SWA decode channel and
 * applied by its kernel: same states and host mapping, and the device mapping (written by
 * the eviction's launches and the channel's kernel, in stream order) equals the host's. */
static void test_swa_window_eviction_through_a_channel(void **state) {
  (void)state;
  flow_world w;
  swa_world_make(&w, 4);
  kvc_decode_channel *ch;
  KVT_OK(kvc_decode_channel_create_swa(w.swa, w.pool, 4, 64, w.out, &ch)); /* 40 steps never BUSY */
  KVT_OK(kvc_flow_set_decode_channel(w.flow, ch));
  const int64_t swa0 = kvc_swa_allocator_swa_available_size(w.swa);
  const int64_t full0 = kvc_swa_allocator_full_available_size(w.swa);
  kvc_req_state a = req0(40);
  kvc_req_state *one[] = {&a};
  KVT_OK(kvc_flow_alloc_for_extend(w.flow, one, 1, w.out, NULL));
  kvt_digest_tables(w.pool, w.swa);
  /* an out_cache_loc the channel does not write: refused before the window eviction */
  const int64_t swa_used = kvc_swa_allocator_swa_available_size(w.swa);
  KVT_STATUS(kvc_flow_alloc_for_decode(w.flow, one, 1, 1, w.out + 8, NULL), KVC_ERR_INVALID_ARGUMENT);
  kvt_digest_tables(w.pool, w.swa);
  assert_int_equal(a.swa_evicted_seqlen, 0);
  assert_int_equal(kvc_swa_allocator_swa_available_size(w.swa), swa_used);
  assert_int_equal(a.seq_len, 40);
  for (int i = 0; i < 40; i++) {
    KVT_OK(kvc_flow_alloc_for_decode(w.flow, one, 1, 1, NULL, NULL));
    kvt_digest_tables(w.pool, w.swa);
    KVT_OK(kvc_decode_channel_enqueue(ch, NULL));
  }
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  assert_int_equal(a.seq_len, 80);
  assert_int_equal(a.swa_evicted_seqlen, (79 - 8 - 4) / 4 * 4);
  assert_int_equal(kvc_swa_allocator_full_available_size(w.swa), full0 - 80);
  const int32_t *map = kvc_swa_allocator_mapping_host(w.swa);
  const int32_t *row = kvc_req_to_token_pool_row(w.pool, a.req_row);
  assert_int_equal(map[row[0]], 0);
  assert_true(map[row[79]] > 0);
  const int64_t n = kvc_swa_allocator_mapping_length(w.swa);
  int64_t *d = malloc((size_t)n * 8);
  kvt_d2h(d, kvc_swa_allocator_mapping_device(w.swa), (size_t)n * 8);
  for (int64_t i = 0; i < n; i++)
    if (d[i] != map[i]) fail_msg("device mapping[%lld] = %lld, host %d", (long long)i, (long long)d[i], map[i]);
  free(d);
  KVT_OK(kvc_req_to_token_pool_audit_device(w.pool, NULL));
  KVT_OK(kvc_swa_allocator_check(w.swa));
  KVT_OK(kvc_flow_release(w.flow, one, 1, 1, NULL));
  kvt_digest_tables(w.pool, w.swa);
  assert_int_equal(kvc_swa_allocator_swa_available_size(w.swa), swa0);
  assert_int_equal(kvc_swa_allocator_full_available_size(w.swa), full0);
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  kvc_decode_channel_destroy(ch);
  flow_world_free(&w);
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

/* A hybrid (Mamba) model's pools: a request pool, a Mamba pool and the hybrid pool over
 * both; flags: KVC_HYBRID_*, pp 0 = the pool's default. */
static void hyb_world_make(flow_world *w, int32_t rows, int32_t width, int32_t mamba_size, uint32_t flags, int32_t pp) {
  make_req_pool(w, rows, width);
  w->mp = make_mamba(mamba_size);
  kvc_hybrid_req_pool_config hc = KVC_HYBRID_REQ_POOL_CONFIG_INIT;
  hc.flags = flags;
  hc.pp = pp;
  hc.req_pool = w->pool;
  hc.mamba_pool = w->mp;
  KVT_OK(kvc_hybrid_req_pool_create(kvt_ctx, &hc, &w->hp));
}

/* Adds to a hybrid world an allocator of `tokens` slots (paged when ps > 1) and a flow
 * with `cache` (NULL: the chunk cache). */
static void hyb_world_flow(flow_world *w, int64_t tokens, int32_t ps, const kvc_prefix_cache *cache) {
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = ps > 1 ? KVC_ALLOCATOR_PAGED : KVC_ALLOCATOR_TOKEN;
  ac.size = tokens;
  ac.page_size = ps;
  KVT_OK(kvc_allocator_create(kvt_ctx, &ac, &w->alloc));
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = ps;
  fc.req_pool = w->pool;
  fc.allocator = w->alloc;
  fc.hybrid_req_pool = w->hp;
  if (cache) fc.cache = *cache;
  KVT_OK(kvc_flow_create(kvt_ctx, &fc, &w->flow));
  w->out = kvt_dev_alloc(1024 * 8);
}

static void test_hybrid_mamba_slots_follow_requests(void **state) {
  (void)state;
  flow_world w;
  hyb_world_make(&w, 4, 128, 3, 0, 0);
  kvc_session_cache *sc;
  KVT_OK(kvc_session_cache_create(kvt_ctx, NULL, &sc));
  const kvc_prefix_cache cache = kvc_session_cache_as_prefix_cache(sc);
  hyb_world_flow(&w, 512, 16, &cache);
  kvc_req_state a = req0(20), b = req0(30), c = req0(10), d = req0(10);
  b.session_id = 5;
  kvc_req_state *ab[] = {&a, &b};
  KVT_OK(kvc_flow_alloc_for_extend(w.flow, ab, 2, w.out, NULL));
  kvt_digest_tables(w.pool, w.swa);
  assert_int_equal(a.mamba_slot, 1); /* FIFO, with the rows */
  assert_int_equal(b.mamba_slot, 2);
  assert_int_equal(kvc_hybrid_req_pool_mamba_slot(w.hp, a.req_row), 1);
  /* Two more requests need 2 Mamba slots; only 1 is free: nothing changes. */
  kvc_req_state *cd[] = {&c, &d};
  int32_t rows_before = kvc_req_to_token_pool_available(w.pool);
  KVT_STATUS(kvc_flow_alloc_for_extend(w.flow, cd, 2, w.out, NULL), KVC_ERR_OUT_OF_SLOTS);
  kvt_digest_tables(w.pool, w.swa);
  assert_int_equal(kvc_req_to_token_pool_available(w.pool), rows_before);
  assert_int_equal(kvc_mamba_pool_available(w.mp), 1);
  assert_int_equal(kvc_allocator_available_size(w.alloc), 512 - 32 - 32);
  KVT_OK(kvc_flow_release(w.flow, ab, 2, 1, NULL));
  kvt_digest_tables(w.pool, w.swa);
  /* a's Mamba slot came back; b's session keeps its slot with its row. */
  assert_int_equal(kvc_mamba_pool_available(w.mp), 2);
  assert_int_equal(b.mamba_slot, 0);
  KVT_OK(kvc_session_cache_release(sc, w.flow, 5)); /* also returns the Mamba state */
  assert_int_equal(kvc_mamba_pool_available(w.mp), 3);
  assert_int_equal(kvc_allocator_available_size(w.alloc), 512);
  assert_int_equal(kvc_req_to_token_pool_available(w.pool), 4);
  KVT_OK(kvc_flow_check(w.flow, NULL, 0));
  flow_world_free(&w);
  kvc_session_cache_destroy(sc);
}

/* Regression (tests/fuzz/fuzz_flow_hybrid): a row mapping one Mamba slot twice (running
 * slot and a track entry, from caller-provided slots) made free_mamba_cache fail in
 * kvc_mamba_pool_free after it had already written the device mapping, leaving the
 * device mapping different from the host mirror. Now MISUSE before any change. */
static void test_hybrid_free_mamba_cache_slot_mapped_twice(void **state) {
  (void)state;
  flow_world w;
  hyb_world_make(&w, 2, 16, 4, KVC_HYBRID_TRACK, 0);
  int32_t x, row = 0;
  KVT_OK(kvc_mamba_pool_alloc(w.mp, 1, &x, NULL));
  int32_t ms = x, pp[2] = {x, -1};
  KVT_OK(kvc_hybrid_req_pool_alloc(w.hp, 1, &row, &ms, pp, NULL));
  KVT_STATUS(kvc_hybrid_req_pool_free_mamba_cache(w.hp, row, -1, NULL), KVC_ERR_MISUSE);
  int32_t dev[3];
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  kvt_d2h(dev, kvc_hybrid_req_pool_mapping(w.hp), sizeof dev);
  assert_int_equal(dev[row], x); /* device still equals the mirror */
  assert_int_equal(kvc_hybrid_req_pool_mamba_slot(w.hp, row), x);
  assert_int_equal(kvc_mamba_pool_available(w.mp), 3);
  KVT_OK(kvc_mamba_pool_check(w.mp));
  KVT_OK(kvc_hybrid_req_pool_set_track_slot(w.hp, row, 0, -1, NULL));
  KVT_OK(kvc_hybrid_req_pool_free_mamba_cache(w.hp, row, -1, NULL));
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  kvt_d2h(dev, kvc_hybrid_req_pool_mapping(w.hp), sizeof dev);
  assert_int_equal(dev[row], 0);
  assert_int_equal(kvc_mamba_pool_available(w.mp), 4);
  KVT_OK(kvc_req_to_token_pool_free(w.pool, row));
  flow_world_free(&w);
}

/* Regression (tests/fuzz/fuzz_flow_hybrid): with track slots and pp == 1 the flow packed
 * the requests' track slots with a stride of 2 while the hybrid pool reads them with a
 * stride of pp, so in a batch [fresh B, continuing A] A was read as having no track slot:
 * it got a new one (its old one leaked) and B's state did not match its row. */
static void test_hybrid_flow_track_pp1_batch(void **state) {
  (void)state;
  flow_world w;
  hyb_world_make(&w, 4, 64, 6, KVC_HYBRID_TRACK, 1);
  hyb_world_flow(&w, 128, 1, NULL);
  kvc_req_state a = req0(8), b = req0(5);
  kvc_req_state *one[] = {&a}, *ba[] = {&b, &a};
  KVT_OK(kvc_flow_alloc_for_extend(w.flow, one, 1, w.out, NULL));
  kvt_digest_tables(w.pool, w.swa);
  assert_int_equal(a.mamba_slot, 1);
  assert_int_equal(a.mamba_track[0], 2);
  a.prefix_len = 8; /* chunked prefill: A continues, B starts */
  a.seq_len = 12;
  KVT_OK(kvc_flow_alloc_for_extend(w.flow, ba, 2, w.out, NULL));
  kvt_digest_tables(w.pool, w.swa);
  assert_int_equal(a.mamba_track[0], 2); /* kept */
  assert_int_equal(kvc_hybrid_req_pool_track_slots(w.hp, a.req_row)[0], 2);
  assert_int_equal(b.mamba_slot, kvc_hybrid_req_pool_mamba_slot(w.hp, b.req_row));
  assert_int_equal(b.mamba_track[0], kvc_hybrid_req_pool_track_slots(w.hp, b.req_row)[0]);
  assert_int_equal(kvc_mamba_pool_available(w.mp), 2);
  kvc_req_state *live[] = {&a, &b};
  KVT_OK(kvc_flow_check(w.flow, live, 2));
  KVT_OK(kvc_flow_release(w.flow, ba, 2, 1, NULL));
  kvt_digest_tables(w.pool, w.swa);
  assert_int_equal(kvc_mamba_pool_available(w.mp), 6); /* nothing leaked */
  assert_int_equal(kvc_allocator_available_size(w.alloc), 128);
  assert_int_equal(kvc_req_to_token_pool_available(w.pool), 4);
  KVT_OK(kvc_mamba_pool_check(w.mp));
  flow_world_free(&w);
}

/* The device table rows [0, len) of two worlds' request rows are equal. */
static void assert_rows_equal(const flow_world *x, int32_t xrow, const flow_world *y, int32_t yrow, int64_t len,
                              int step) {
  const size_t width = (size_t)kvc_req_to_token_pool_max_context_len(x->pool);
  int32_t *dx = malloc(width * 4), *dy = malloc(width * 4);
  kvt_d2h(dx, kvc_req_to_token_pool_table(x->pool) + (size_t)xrow * width, width * 4);
  kvt_d2h(dy, kvc_req_to_token_pool_table(y->pool) + (size_t)yrow * width, width * 4);
  const int32_t *mx = kvc_req_to_token_pool_row(x->pool, xrow);
  for (int64_t i = 0; i < len; i++)
    if (dx[i] != dy[i] || dx[i] != mx[i])
      fail_msg("step %d pos %lld: row %d has %d (mirror %d), without channel %d", step, (long long)i, xrow, dx[i],
               mx[i], dy[i]);
  free(dx);
  free(dy);
}

/* A hybrid flow's decode steps through a decode channel (the channel's kernel enqueued
 * after each step, as an engine's graph replay would) give the same out_cache_loc, rows,
 * Mamba slots and states as the same flow without a channel. Decode never touches the
 * Mamba side, so the channel needs only the flow's token allocator and request pool
 * (the hybrid pool's). */
static void test_hybrid_decode_through_a_channel(void **state) {
  (void)state;
  enum { N = 3, STEPS = 12 };
  flow_world c, p; /* channel, plain */
  hyb_world_make(&c, 8, 128, 16, KVC_HYBRID_TRACK, 0);
  hyb_world_make(&p, 8, 128, 16, KVC_HYBRID_TRACK, 0);
  hyb_world_flow(&c, 512, 4, NULL);
  hyb_world_flow(&p, 512, 4, NULL);
  kvc_decode_channel *ch = NULL;
  KVT_OK(kvc_decode_channel_create(c.alloc, c.pool, N, 2, c.out, &ch));
  KVT_OK(kvc_flow_set_decode_channel(c.flow, ch));
  kvc_req_state a[N] = {req0(6), req0(3), req0(9)}, b[N] = {req0(6), req0(3), req0(9)};
  kvc_req_state *ca[] = {&a[0], &a[1], &a[2]}, *pa[] = {&b[0], &b[1], &b[2]};
  KVT_OK(kvc_flow_alloc_for_extend(c.flow, ca, N, c.out, NULL));
  kvt_digest_tables(c.pool, c.swa);
  KVT_OK(kvc_flow_alloc_for_extend(p.flow, pa, N, p.out, NULL));
  kvt_digest_tables(p.pool, p.swa);
  for (int step = 0; step < STEPS; step++) {
    KVT_OK(kvc_flow_alloc_for_decode(c.flow, ca, N, 1, NULL, NULL));
    kvt_digest_tables(c.pool, c.swa);
    KVT_OK(kvc_decode_channel_enqueue(ch, NULL));
    KVT_OK(kvc_flow_alloc_for_decode(p.flow, pa, N, 1, p.out, NULL));
    kvt_digest_tables(p.pool, p.swa);
    KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
    int64_t got[N], want[N];
    kvt_d2h(got, c.out, sizeof got);
    kvt_d2h(want, p.out, sizeof want);
    for (int i = 0; i < N; i++) {
      if (got[i] != want[i])
        fail_msg("step %d request %d: slot %lld, without channel %lld", step, i, (long long)got[i], (long long)want[i]);
      assert_int_equal(a[i].req_row, b[i].req_row);
      assert_int_equal(a[i].seq_len, b[i].seq_len);
      assert_int_equal(a[i].kv_allocated_len, b[i].kv_allocated_len);
      assert_int_equal(a[i].mamba_slot, b[i].mamba_slot);
      assert_int_equal(kvc_hybrid_req_pool_mamba_slot(c.hp, a[i].req_row), a[i].mamba_slot);
      assert_rows_equal(&c, a[i].req_row, &p, b[i].req_row, a[i].seq_len, step);
    }
  }
  uint64_t published, applied;
  KVT_OK(kvc_decode_channel_check(ch, &published, &applied));
  assert_int_equal(published, STEPS);
  assert_int_equal(applied, STEPS);
  KVT_OK(kvc_req_to_token_pool_audit_device(c.pool, NULL));
  KVT_OK(kvc_flow_check(c.flow, ca, N));
  KVT_OK(kvc_flow_release(c.flow, ca, N, 1, NULL));
  kvt_digest_tables(c.pool, c.swa);
  KVT_OK(kvc_flow_release(p.flow, pa, N, 1, NULL));
  kvt_digest_tables(p.pool, p.swa);
  assert_int_equal(kvc_allocator_available_size(c.alloc), 512);
  assert_int_equal(kvc_mamba_pool_available(c.mp), 16);
  assert_int_equal(kvc_req_to_token_pool_available(c.pool), 8);
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  kvc_decode_channel_destroy(ch);
  flow_world_free(&c);
  flow_world_free(&p);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_swa_window_eviction_during_decode),
    cmocka_unit_test(test_swa_window_eviction_through_a_channel),
    cmocka_unit_test(test_swa_refused_batch_evicts_nothing),
    cmocka_unit_test(test_hybrid_mamba_slots_follow_requests),
    cmocka_unit_test(test_hybrid_free_mamba_cache_slot_mapped_twice),
    cmocka_unit_test(test_hybrid_flow_track_pp1_batch),
    cmocka_unit_test(test_hybrid_decode_through_a_channel),
};
KVT_MAIN("flow_hybrid", tests)
