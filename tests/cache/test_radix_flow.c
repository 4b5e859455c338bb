/*
 * The radix cache behind the flows, as SGLang's scheduler drives it (seeds common.py,
 * session_aware_cache.py): match + admission, alloc_for_extend writing the match into the
 * row, release = cache_finished_req, chunked prefill = cache_unfinished_req, aborts,
 * eviction under allocation pressure, streaming sessions over the radix cache, token /
 * paged / SWA allocators. Conservation (kvc_flow_check with the live requests) after
 * every step; device rows compared with the host mirror.
 */
#include "radix_flow_util.h"

static void ereq_init(ereq *e, int64_t n, int32_t seed, int64_t shared, int32_t shared_seed) {
  memset(e, 0, sizeof *e);
  for (int64_t i = 0; i < n; i++) e->toks[i] = i < shared ? shared_seed * 1000 + (int32_t)i : seed * 1000 + (int32_t)i;
  e->rr.tokens = e->toks;
  e->rr.num_tokens = n;
  e->rr.prompt_len = n;
  e->st.seq_len = n;
}

static void check(fixture *f, kvc_radix_cache *rc, kvc_req_state **live, size_t n) {
  KVT_OK(kvc_flow_check(f->flow, live, n));
  KVT_OK(kvc_radix_cache_check(rc));
}

static void admit_and_extend(fixture *f, kvc_radix_cache *rc, ereq *e) {
  KVT_OK(kvc_radix_cache_match_req(rc, &e->st, &e->rr));
  kvc_req_state *one[] = {&e->st};
  KVT_OK(kvc_flow_alloc_for_extend(f->flow, one, 1, f->out, NULL));
  assert_row_synced(f, e->st.req_row, e->st.seq_len);
}

static void release(fixture *f, ereq *e, int is_insert) {
  kvc_req_state *one[] = {&e->st};
  KVT_OK(kvc_flow_release(f->flow, one, 1, is_insert, NULL));
}

/* A prompt, a few decode steps, release; a second request sharing 64 tokens reuses them. */
static void reuse_at(int32_t ps) {
  const int64_t cap = 1024;
  kvc_radix_cache *rc = make_cache(ps, cap);
  kvc_prefix_cache pc = kvc_radix_cache_as_prefix_cache(rc);
  fixture f;
  fixture_make(&f, 8, 512, cap, ps, &pc);
  ereq a, b;
  ereq_init(&a, 100, 1, 0, 0);
  admit_and_extend(&f, rc, &a);
  assert_int_equal(a.st.prefix_len, 0);
  for (int i = 0; i < 3; i++) {
    kvc_req_state *one[] = {&a.st};
    KVT_OK(kvc_flow_alloc_for_decode(f.flow, one, 1, 1, f.out, NULL));
    a.toks[a.rr.num_tokens] = 5000 + i;
    a.rr.num_tokens++;
  }
  kvc_req_state *live[] = {&a.st};
  check(&f, rc, live, 1);
  int64_t a_slots[128];
  KVT_OK(kvc_flow_row_slots(f.flow, a.st.req_row, 0, 103, a_slots));
  release(&f, &a, 1);
  int64_t cached;
  KVT_OK(kvc_radix_cache_sizes(rc, NULL, NULL, &cached));
  assert_int_equal(cached, 103 / ps * ps); /* the unaligned tail went back */
  check(&f, rc, NULL, 0);
  assert_int_equal(kvc_allocator_available_size(f.alloc) + cached, kvc_allocator_size(f.alloc));
  /* b shares a's first 64 tokens. */
  ereq_init(&b, 120, 2, 64, 1);
  admit_and_extend(&f, rc, &b);
  assert_int_equal(b.st.cache_protected_len, 64);
  const int32_t *row = kvc_req_to_token_pool_row(f.pool, b.st.req_row);
  for (int i = 0; i < 64; i++) assert_int_equal(row[i], a_slots[i]);
  int64_t ev, pr;
  KVT_OK(kvc_radix_cache_sizes(rc, &ev, &pr, &cached));
  assert_int_equal(pr, 64);
  kvc_req_state *liveb[] = {&b.st};
  check(&f, rc, liveb, 1);
  release(&f, &b, 1);
  check(&f, rc, NULL, 0);
  KVT_OK(kvc_radix_cache_sizes(rc, &ev, &pr, &cached));
  assert_int_equal(pr, 0);
  assert_int_equal(cached, 103 / ps * ps + 120 / ps * ps - 64);
  /* Evict everything through the flow: every slot is back. */
  int64_t n;
  KVT_OK(kvc_radix_cache_evict(rc, f.flow, cached, &n));
  assert_int_equal(n, cached);
  assert_int_equal(kvc_allocator_available_size(f.alloc), kvc_allocator_size(f.alloc));
  check(&f, rc, NULL, 0);
  fixture_free(&f);
  kvc_radix_cache_destroy(rc);
}

/* The tree's held bytes prove only that the tree holds a victim's slots, not that the
 * flow's allocator does: a slot freed behind the tree's back (or a flow over another
 * allocator) must still be refused by the allocator's validated free at eviction. Two
 * leaves at page 1; the second victim has one slot freed directly: evict frees the first
 * victim, stops at the second with the allocator's MISUSE (that victim stays, *evicted is
 * the first's tokens), and a second evict changes nothing. */
static void test_evict_refuses_a_slot_freed_behind_the_tree(void **state) {
  (void)state;
  const int64_t cap = 256;
  kvc_radix_cache *rc = make_cache(1, cap);
  kvc_prefix_cache pc = kvc_radix_cache_as_prefix_cache(rc);
  fixture f;
  fixture_make(&f, 8, 128, cap, 1, &pc);
  ereq a, b;
  ereq_init(&a, 40, 1, 0, 0);
  ereq_init(&b, 40, 2, 0, 0);
  admit_and_extend(&f, rc, &a);
  release(&f, &a, 1);
  admit_and_extend(&f, rc, &b);
  int64_t b_slots[40];
  KVT_OK(kvc_flow_row_slots(f.flow, b.st.req_row, 0, 40, b_slots));
  release(&f, &b, 1);
  KVT_OK(kvc_allocator_free(f.alloc, &b_slots[17], 1)); /* misuse: the tree holds it */
  const int64_t avail = kvc_allocator_available_size(f.alloc);
  assert_int_equal(avail, cap - 80 + 1);
  int64_t n = -1, cached;
  KVT_STATUS(kvc_radix_cache_evict(rc, f.flow, 80, &n), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "slots[17]"));
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "not held"));
  assert_int_equal(n, 40); /* a went, b stays */
  KVT_OK(kvc_radix_cache_sizes(rc, NULL, NULL, &cached));
  assert_int_equal(cached, 40);
  assert_int_equal(kvc_allocator_available_size(f.alloc), avail + 40);
  KVT_OK(kvc_radix_cache_check(rc));
  KVT_OK(kvc_allocator_check(f.alloc));
  KVT_STATUS(kvc_radix_cache_evict(rc, f.flow, 40, &n), KVC_ERR_MISUSE);
  assert_int_equal(n, 0);
  KVT_OK(kvc_radix_cache_sizes(rc, NULL, NULL, &cached));
  assert_int_equal(cached, 40);
  assert_int_equal(kvc_allocator_available_size(f.alloc), avail + 40);
  KVT_OK(kvc_allocator_check(f.alloc));
  fixture_free(&f);
  kvc_radix_cache_destroy(rc);
}

static void test_reuse_token_allocator(void **state) {
  (void)state;
  reuse_at(1);
}
static void test_reuse_paged_allocator(void **state) {
  (void)state;
  reuse_at(16);
}

static void test_allocation_under_pressure_evicts(void **state) {
  (void)state;
  const int32_t ps = 16;
  kvc_radix_cache *rc = make_cache(ps, 256);
  kvc_prefix_cache pc = kvc_radix_cache_as_prefix_cache(rc);
  fixture f;
  fixture_make(&f, 8, 512, 256, ps, &pc);
  ereq e[3];
  for (int i = 0; i < 3; i++) {
    ereq_init(&e[i], 64, 10 + i, 0, 0);
    admit_and_extend(&f, rc, &e[i]);
    release(&f, &e[i], 1);
  }
  int64_t cached;
  KVT_OK(kvc_radix_cache_sizes(rc, NULL, NULL, &cached));
  assert_int_equal(cached, 192);
  /* SGLang asks the tree for the whole step (100 tokens + a page per request), not the
   * deficit: 116 tokens, i.e. the two oldest requests (LRU). */
  ereq big;
  ereq_init(&big, 100, 20, 0, 0);
  admit_and_extend(&f, rc, &big);
  KVT_OK(kvc_radix_cache_sizes(rc, NULL, NULL, &cached));
  assert_int_equal(cached, 64);
  kvc_radix_match m;
  KVT_OK(kvc_radix_cache_match_prefix(rc, 0, e[2].toks, 64, &m));
  assert_int_equal(m.len, 64); /* the newest survived */
  kvc_req_state *live[] = {&big.st};
  check(&f, rc, live, 1);
  /* Everything locked or in use: a request that cannot fit fails cleanly. */
  ereq huge;
  ereq_init(&huge, 250, 30, 0, 0);
  KVT_OK(kvc_radix_cache_match_req(rc, &huge.st, &huge.rr));
  kvc_req_state *one[] = {&huge.st};
  KVT_STATUS(kvc_flow_alloc_for_extend(f.flow, one, 1, f.out, NULL), KVC_ERR_OUT_OF_SLOTS);
  check(&f, rc, live, 1);
  release(&f, &big, 1);
  check(&f, rc, NULL, 0);
  fixture_free(&f);
  kvc_radix_cache_destroy(rc);
}

static void test_chunked_prefill_and_duplicates(void **state) {
  (void)state;
  const int32_t ps = 16;
  kvc_radix_cache *rc = make_cache(ps, 1024);
  kvc_prefix_cache pc = kvc_radix_cache_as_prefix_cache(rc);
  fixture f;
  fixture_make(&f, 8, 512, 1024, ps, &pc);
  /* c and d have the same 100-token prompt and are prefilled at the same time in chunks
   * of 48 (page-floored chunk ends, as SGLang's scheduler makes them). */
  ereq c, d;
  ereq_init(&c, 100, 1, 100, 7);
  ereq_init(&d, 100, 2, 100, 7);
  ereq *both[] = {&c, &d};
  for (int i = 0; i < 2; i++) {
    KVT_OK(kvc_radix_cache_match_req(rc, &both[i]->st, &both[i]->rr));
    both[i]->st.seq_len = 48;
    both[i]->st.flags = KVC_REQ_CHUNKED;
  }
  kvc_req_state *batch[] = {&c.st, &d.st};
  KVT_OK(kvc_flow_alloc_for_extend(f.flow, batch, 2, f.out, NULL));
  KVT_OK(kvc_flow_cache_unfinished(f.flow, &c.st));
  assert_non_null(c.st.cache_node);
  assert_int_equal(c.st.cache_protected_len, 48);
  assert_int_equal(c.st.prefix_len, 48);
  int64_t avail = kvc_allocator_available_size(f.alloc);
  KVT_OK(kvc_flow_cache_unfinished(f.flow, &d.st)); /* d's 48 slots duplicate c's */
  assert_int_equal(kvc_allocator_available_size(f.alloc), avail + 48);
  const int32_t *rc_row = kvc_req_to_token_pool_row(f.pool, c.st.req_row);
  const int32_t *rd_row = kvc_req_to_token_pool_row(f.pool, d.st.req_row);
  for (int i = 0; i < 48; i++) assert_int_equal(rd_row[i], rc_row[i]);
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  assert_row_synced(&f, d.st.req_row, 48);
  int64_t ev, pr;
  KVT_OK(kvc_radix_cache_sizes(rc, &ev, &pr, NULL));
  assert_int_equal(pr, 48); /* both locked on the chunk's node */
  check(&f, rc, batch, 2);
  /* The second chunk: the rest of the prompt, then release. */
  for (int i = 0; i < 2; i++) {
    both[i]->st.seq_len = 100;
    both[i]->st.flags = 0;
  }
  KVT_OK(kvc_flow_alloc_for_extend(f.flow, batch, 2, f.out, NULL));
  check(&f, rc, batch, 2);
  release(&f, &c, 1);
  release(&f, &d, 1);
  int64_t cached;
  KVT_OK(kvc_radix_cache_sizes(rc, &ev, &pr, &cached));
  assert_int_equal(cached, 96);
  assert_int_equal(pr, 0);
  check(&f, rc, NULL, 0);
  assert_int_equal(kvc_allocator_available_size(f.alloc) + 96, kvc_allocator_size(f.alloc));
  fixture_free(&f);
  kvc_radix_cache_destroy(rc);
}

static void test_abort_inserts_nothing(void **state) {
  (void)state;
  kvc_radix_cache *rc = make_cache(1, 512);
  kvc_prefix_cache pc = kvc_radix_cache_as_prefix_cache(rc);
  fixture f;
  fixture_make(&f, 8, 512, 512, 1, &pc);
  ereq a, b;
  ereq_init(&a, 40, 1, 0, 0);
  admit_and_extend(&f, rc, &a);
  release(&f, &a, 1);
  ereq_init(&b, 60, 2, 40, 1);
  admit_and_extend(&f, rc, &b);
  assert_int_equal(b.st.prefix_len, 40);
  release(&f, &b, 0); /* abort: b's own slots go back, the tree keeps a's */
  int64_t cached, pr;
  KVT_OK(kvc_radix_cache_sizes(rc, NULL, &pr, &cached));
  assert_int_equal(cached, 40);
  assert_int_equal(pr, 0);
  check(&f, rc, NULL, 0);
  /* Bad input to the request-level calls changes nothing. */
  ereq c;
  ereq_init(&c, 30, 3, 0, 0);
  admit_and_extend(&f, rc, &c);
  c.rr.num_tokens = 10; /* KV for 30 tokens but only 10 ids */
  KVT_STATUS(kvc_radix_cache_cache_finished_req(rc, f.flow, &c.st, 1), KVC_ERR_INVALID_ARGUMENT);
  c.rr.num_tokens = 30;
  c.st.cache_node = (void *)(uintptr_t)0xdead00000001ull;
  KVT_STATUS(kvc_radix_cache_cache_finished_req(rc, f.flow, &c.st, 1), KVC_ERR_INVALID_ARGUMENT);
  c.st.cache_node = NULL;
  kvc_req_state *livec[] = {&c.st};
  check(&f, rc, livec, 1);
  release(&f, &c, 1);
  /* Mixed namespaces: a request locked in namespace 0 whose key says namespace 5. */
  ereq d;
  ereq_init(&d, 50, 4, 40, 1);
  admit_and_extend(&f, rc, &d);
  assert_non_null(d.st.cache_node);
  d.rr.ns = 5;
  KVT_STATUS(kvc_radix_cache_cache_finished_req(rc, f.flow, &d.st, 1), KVC_ERR_MISUSE);
  d.rr.ns = 0;
  release(&f, &d, 1);
  check(&f, rc, NULL, 0);
  fixture_free(&f);
  kvc_radix_cache_destroy(rc);
}

static void test_sessions_over_radix(void **state) {
  (void)state;
  const int32_t ps = 1;
  kvc_radix_cache *rc = make_cache(ps, 1024);
  kvc_prefix_cache inner = kvc_radix_cache_as_prefix_cache(rc);
  kvc_session_cache *sc;
  KVT_OK(kvc_session_cache_create(kvt_ctx, &inner, &sc));
  kvc_prefix_cache pc = kvc_session_cache_as_prefix_cache(sc);
  fixture f;
  fixture_make(&f, 8, 512, 1024, ps, &pc);
  ereq x, t1, t2;
  ereq_init(&x, 32, 1, 0, 0); /* a plain request caches a system prompt */
  admit_and_extend(&f, rc, &x);
  release(&f, &x, 1);
  ereq_init(&t1, 50, 2, 32, 1); /* turn 1 of session 9 starts from the radix match */
  t1.st.session_id = 9;
  int matched;
  KVT_OK(kvc_session_cache_match(sc, &t1.st, 50, &matched));
  assert_int_equal(matched, 0);
  admit_and_extend(&f, rc, &t1);
  assert_int_equal(t1.st.prefix_len, 32);
  release(&f, &t1, 1); /* the session keeps the row and the radix lock */
  int64_t pr;
  KVT_OK(kvc_radix_cache_sizes(rc, NULL, &pr, NULL));
  assert_int_equal(pr, 32);
  check(&f, rc, NULL, 0);
  ereq_init(&t2, 80, 3, 0, 0); /* turn 2: continues the session's row */
  t2.st.session_id = 9;
  KVT_OK(kvc_session_cache_match(sc, &t2.st, 80, &matched));
  assert_int_equal(matched, 1);
  assert_int_equal(t2.st.prefix_len, 50);
  t2.st.seq_len = 80;
  kvc_req_state *one[] = {&t2.st};
  KVT_OK(kvc_flow_alloc_for_extend(f.flow, one, 1, f.out, NULL));
  check(&f, rc, one, 1);
  release(&f, &t2, 1);
  check(&f, rc, NULL, 0);
  KVT_OK(kvc_session_cache_release(sc, f.flow, 9)); /* frees the session, unlocks */
  KVT_OK(kvc_radix_cache_sizes(rc, NULL, &pr, NULL));
  assert_int_equal(pr, 0);
  check(&f, rc, NULL, 0);
  assert_int_equal(kvc_allocator_available_size(f.alloc) + 32, kvc_allocator_size(f.alloc));
  fixture_free(&f);
  kvc_session_cache_destroy(sc);
  kvc_radix_cache_destroy(rc);
}

static void test_swa_allocator_flow(void **state) {
  (void)state;
  const int32_t ps = 4;
  kvc_req_to_token_pool_config rcfg = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rcfg.size = 8;
  rcfg.max_context_len = 256;
  kvc_req_to_token_pool *pool;
  KVT_OK(kvc_req_to_token_pool_create(kvt_ctx, &rcfg, &pool));
  kvc_swa_allocator_config sc = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  sc.size_full = 256;
  sc.size_swa = 128;
  sc.page_size = ps;
  kvc_swa_allocator *swa;
  KVT_OK(kvc_swa_allocator_create(kvt_ctx, &sc, &swa));
  kvc_radix_cache *rc = make_cache(ps, 256);
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = ps;
  fc.req_pool = pool;
  fc.swa_allocator = swa;
  fc.cache = kvc_radix_cache_as_prefix_cache(rc);
  fixture f;
  memset(&f, 0, sizeof f);
  f.pool = pool;
  f.width = 256;
  f.ps = ps;
  KVT_OK(kvc_flow_create(kvt_ctx, &fc, &f.flow));
  f.out = kvt_dev_alloc(1024 * sizeof(int64_t));
  ereq a[4];
  for (int i = 0; i < 4; i++) { /* 4 x 40 tokens > the 128 SWA slots: eviction frees both sides */
    ereq_init(&a[i], 40, 1 + i, 0, 0);
    admit_and_extend(&f, rc, &a[i]);
    release(&f, &a[i], 1);
    check(&f, rc, NULL, 0);
    KVT_OK(kvc_swa_allocator_check(swa));
  }
  int64_t cached;
  KVT_OK(kvc_radix_cache_sizes(rc, NULL, NULL, &cached));
  assert_true(cached < 160);
  KVT_OK(kvc_radix_cache_evict(rc, f.flow, cached, NULL));
  assert_int_equal(kvc_swa_allocator_full_available_size(swa), kvc_swa_allocator_size_full(swa));
  assert_int_equal(kvc_swa_allocator_swa_available_size(swa), kvc_swa_allocator_size_swa(swa));
  kvc_flow_destroy(f.flow);
  kvt_dev_free(f.out);
  kvc_radix_cache_destroy(rc);
  kvc_swa_allocator_destroy(swa);
  kvc_req_to_token_pool_destroy(pool);
}

static void test_prompt_split_outputs_go_first(void **state) {
  (void)state;
  kvc_radix_cache *rc = make_cache(1, 512);
  kvc_prefix_cache pc = kvc_radix_cache_as_prefix_cache(rc);
  fixture f;
  fixture_make(&f, 8, 512, 512, 1, &pc);
  ereq a;
  ereq_init(&a, 32, 1, 0, 0); /* a 32-token prompt, then 8 decoded tokens */
  admit_and_extend(&f, rc, &a);
  for (int i = 0; i < 8; i++) {
    kvc_req_state *one[] = {&a.st};
    KVT_OK(kvc_flow_alloc_for_decode(f.flow, one, 1, 1, f.out, NULL));
    a.toks[a.rr.num_tokens++] = 9000 + i;
  }
  int64_t slots[40];
  KVT_OK(kvc_flow_row_slots(f.flow, a.st.req_row, 0, 40, slots));
  release(&f, &a, 1);
  /* SGLang inserts the prompt again with priority + 1: the outputs are their own leaf. */
  kvc_radix_stats st;
  KVT_OK(kvc_radix_cache_stats(rc, &st));
  assert_int_equal(st.nodes, 2);
  char dump[512];
  KVT_OK(kvc_radix_cache_dump(rc, dump, sizeof dump, NULL));
  assert_non_null(strstr(dump, "len=32 lock=0 hits=1 prio=1"));
  if (!strstr(dump, "len=8 lock=0 hits=1 prio=0")) fail_msg("%s", dump);
  int64_t avail = kvc_allocator_available_size(f.alloc), n;
  KVT_OK(kvc_radix_cache_evict(rc, f.flow, 1, &n));
  assert_int_equal(n, 8); /* the outputs' leaf first */
  assert_int_equal(kvc_allocator_available_size(f.alloc), avail + 8);
  kvc_radix_match m;
  KVT_OK(kvc_radix_cache_match_prefix(rc, 0, a.toks, 40, &m));
  assert_int_equal(m.len, 32);
  assert_int_equal(m.slots[31], slots[31]);
  check(&f, rc, NULL, 0);
  fixture_free(&f);
  kvc_radix_cache_destroy(rc);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_reuse_token_allocator),
    cmocka_unit_test(test_evict_refuses_a_slot_freed_behind_the_tree),
    cmocka_unit_test(test_reuse_paged_allocator),
    cmocka_unit_test(test_allocation_under_pressure_evicts),
    cmocka_unit_test(test_chunked_prefill_and_duplicates),
    cmocka_unit_test(test_abort_inserts_nothing),
    cmocka_unit_test(test_sessions_over_radix),
    cmocka_unit_test(test_swa_allocator_flow),
    cmocka_unit_test(test_prompt_split_outputs_go_first),
};
KVT_MAIN("radix_flow", tests)
