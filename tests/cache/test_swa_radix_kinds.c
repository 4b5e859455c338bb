/*
 * The SWA radix cache over each SWA allocator kind, and its SWA LRU, with worked
 * examples:
 *   - PURE (KVC_SWA_PURE, SGLang PureSWARadixCache): window eviction frees the slots
 *     themselves, a finished request caches its committed tokens capped at
 *     swa_evict_floor (and never past where the window freed its row), the next request
 *     matches that prefix, evict takes max(full, SWA) tokens, conservation of the one
 *     pool holds at every step;
 *   - RING (ring_size > 0, SGLang swa_gates_prefix_match off): no tombstones, matches
 *     not gated by SWA, the request's key capped at num_tokens - window, SWA-only
 *     eviction refused, SWA capacity conserved per row;
 *   - a cache whose kind is not the flow's allocator's is refused, nothing changed;
 *   - SWA eviction takes live nodes in LRU order, a node stamped since its entry was made
 *     goes back in the order at its new stamp, SWA-locked nodes are passed over and stay.
 */
#include "../flow/flow_util.h"
#include "core/fault.h"

typedef struct ereq {
  kvc_req_state st;
  kvc_radix_req rr;
  int32_t toks[512];
} ereq;

static kvc_radix_req *req_of(void *user, const kvc_req_state *r) {
  (void)user;
  return &((ereq *)(uintptr_t)r)->rr;
}

static kvc_swa_radix_sizes sizes(const kvc_swa_radix_cache *c) {
  kvc_swa_radix_sizes s;
  KVT_OK(kvc_swa_radix_cache_sizes(c, &s));
  return s;
}

typedef struct rig {
  kvc_req_to_token_pool *pool;
  kvc_swa_allocator *a;
  kvc_swa_radix_cache *c;
  kvc_flow *flow;
  int64_t *out;
  int32_t kind; /* the cache's */
} rig;

/* kind: the allocator's and the cache's (cache_kind may differ: the mismatch test). */
static void rig_make(rig *r, int32_t kind, int32_t cache_kind, int32_t window) {
  kvc_req_to_token_pool_config rcfg = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rcfg.size = 8;
  rcfg.max_context_len = 256;
  KVT_OK(kvc_req_to_token_pool_create(kvt_ctx, &rcfg, &r->pool));
  kvc_swa_allocator_config ac = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  ac.size_full = 256;
  ac.size_swa = kind == KVC_SWA_RADIX_PURE ? 160 : 96;
  if (kind == KVC_SWA_RADIX_PURE) ac.flags = KVC_SWA_PURE;
  if (kind == KVC_SWA_RADIX_RING) ac.ring_size = 16, ac.req_pool = r->pool;
  KVT_OK(kvc_swa_allocator_create(kvt_ctx, &ac, &r->a));
  kvc_swa_radix_cache_config cc = KVC_SWA_RADIX_CACHE_CONFIG_INIT;
  cc.sliding_window = window;
  cc.kind = cache_kind;
  cc.radix.num_slots = kvc_swa_allocator_size_full(r->a);
  cc.radix.req_of = req_of;
  KVT_OK(kvc_swa_radix_cache_create(kvt_ctx, &cc, &r->c));
  r->kind = cache_kind;
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = 1;
  fc.req_pool = r->pool;
  fc.swa_allocator = r->a;
  fc.sliding_window = window;
  fc.cache = kvc_swa_radix_cache_as_prefix_cache(r->c);
  KVT_OK(kvc_flow_create(kvt_ctx, &fc, &r->flow));
  r->out = kvt_dev_alloc(1024 * sizeof(int64_t));
}

static void rig_free(rig *r) {
  kvc_flow_destroy(r->flow);
  kvt_dev_free(r->out);
  kvc_swa_radix_cache_destroy(r->c);
  kvc_swa_allocator_destroy(r->a);
  kvc_req_to_token_pool_destroy(r->pool);
}

/* free + held + cached == capacity on both sides (the flow's audit counts the full side
 * with the window-freed part of a PURE row left out). */
static void conserve(rig *r, kvc_req_state *live, int64_t held_full, int64_t held_swa) {
  kvc_req_state *lv[] = {live};
  KVT_OK(kvc_flow_check(r->flow, lv, live ? 1 : 0));
  const kvc_swa_radix_sizes s = sizes(r->c);
  assert_int_equal(kvc_swa_allocator_full_available_size(r->a) + held_full + s.cached,
                   kvc_swa_allocator_size_full(r->a));
  assert_int_equal(kvc_swa_allocator_swa_available_size(r->a) + held_swa + s.swa_cached,
                   kvc_swa_allocator_size_swa(r->a));
  KVT_OK(kvc_swa_allocator_check(r->a));
  KVT_OK(kvc_swa_radix_cache_check(r->c));
}

/* A request of `prompt` tokens (toks[k] = k below `shared`, its own after; the first
 * `shared` tokens of `like` when given), matched, extended, decoded `decode` steps;
 * returns with it live (committed = seq_len). */
static void run_req_like(rig *r, ereq *e, const ereq *like, int id, int prompt, int shared, int decode, int64_t floor,
                         int64_t want_prefix) {
  memset(e, 0, sizeof *e);
  for (int k = 0; k < 256; k++) e->toks[k] = k < shared ? (like ? like->toks[k] : k) : 1000 * (id + 1) + k;
  e->rr.tokens = e->toks;
  e->rr.num_tokens = prompt;
  e->rr.prompt_len = prompt;
  e->st.seq_len = prompt;
  e->st.swa_evict_floor = floor;
  KVT_OK(kvc_swa_radix_cache_match_req(r->c, &e->st, &e->rr));
  assert_int_equal(e->st.prefix_len, want_prefix);
  if (r->kind != KVC_SWA_RADIX_HYBRID) assert_int_equal(e->rr.swa_lock, 0); /* PURE / RING: no SWA lock */
  kvc_req_state *one[] = {&e->st};
  KVT_OK(kvc_flow_alloc_for_extend(r->flow, one, 1, r->out, NULL));
  for (int step = 0; step < decode; step++) {
    KVT_OK(kvc_flow_alloc_for_decode(r->flow, one, 1, 1, r->out, NULL));
    e->rr.num_tokens++;
  }
  e->st.kv_committed_len = e->st.seq_len;
}

static void run_req(rig *r, ereq *e, int id, int prompt, int shared, int decode, int64_t floor, int64_t want_prefix) {
  run_req_like(r, e, NULL, id, prompt, shared, decode, floor, want_prefix);
}

/* PURE, window 8, page 1. Request 0: 16-token prompt, engine floor 16 (SGLang caches the
 * prefill portion), 24 decoded: window eviction frees [16, 30) (the window plus a page
 * of margin stays), slots gone from the one pool. Its release caches [0, 16) (the
 * floor), frees [30, 40), not the freed [16, 30) again. Request 1 (those 16 tokens + 8
 * of its own) matches 16; request 2 sets no floor: its window eviction starts at what
 * the cache owns (16) and its release caps the key there as well. */
static void test_pure_caches_below_the_floor(void **state) {
  (void)state;
  rig r;
  rig_make(&r, KVC_SWA_RADIX_PURE, KVC_SWA_RADIX_PURE, 8);
  static ereq e[3];
  run_req(&r, &e[0], 0, 16, 16, 24, 16, 0);
  assert_int_equal(e[0].st.swa_evicted_seqlen, 30); /* the last step's eviction: 39 - 8 - 1 */
  /* held: 40 allocated - 14 the window freed; nothing cached yet */
  conserve(&r, &e[0].st, 26, 26);
  kvc_req_state *one[] = {&e[0].st};
  KVT_OK(kvc_flow_release(r.flow, one, 1, 1, NULL));
  assert_int_equal(sizes(r.c).cached, 16);
  assert_int_equal(sizes(r.c).swa_cached, 16); /* one pool: the same numbers */
  conserve(&r, NULL, 0, 0);

  run_req(&r, &e[1], 1, 24, 16, 8, 24, 16);
  conserve(&r, &e[1].st, 16, 16); /* 32 allocated - 16 the cache's; floor 24: nothing freed */
  one[0] = &e[1].st;
  KVT_OK(kvc_flow_release(r.flow, one, 1, 1, NULL));
  assert_int_equal(sizes(r.c).cached, 24); /* [16, 24) of request 1's prompt joined */
  conserve(&r, NULL, 0, 0);

  run_req(&r, &e[2], 2, 24, 16, 24, 0, 16);
  assert_int_equal(e[2].st.swa_evicted_seqlen, 47 - 9);
  conserve(&r, &e[2].st, 48 - 16 - (38 - 16), 48 - 16 - (38 - 16));
  one[0] = &e[2].st;
  KVT_OK(kvc_flow_release(r.flow, one, 1, 1, NULL));
  assert_int_equal(sizes(r.c).cached, 24); /* capped at 16, where its window began: nothing new */
  conserve(&r, NULL, 0, 0);

  /* evict = max(full, SWA): 0 full + 8 SWA tokens frees an 8-token leaf. */
  int64_t ev = -1, sev = -1;
  KVT_OK(kvc_swa_radix_cache_evict(r.c, r.flow, 0, 8, &ev, &sev));
  assert_int_equal(ev, 8);
  assert_int_equal(sev, 8);
  conserve(&r, NULL, 0, 0);
  /* A PURE insert of slots the window freed is refused. */
  int64_t s[4] = {1, 2, 3, 4};
  kvc_status st = kvc_swa_radix_cache_insert(r.c, r.flow, 0, e[0].toks, s, 4, 2, NULL);
  assert_int_equal(st, KVC_ERR_INVALID_ARGUMENT);
  const kvc_swa_radix_sizes z = sizes(r.c);
  KVT_OK(kvc_swa_radix_cache_evict(r.c, r.flow, z.cached, 0, NULL, NULL));
  assert_int_equal(sizes(r.c).cached, 0);
  conserve(&r, NULL, 0, 0);
  assert_int_equal(kvc_swa_allocator_available_size(r.a), kvc_swa_allocator_size(r.a));
  rig_free(&r);
}

/* RING, window 8. Request 0: 40-token prompt, 8 decoded: window eviction advances its
 * cursor but frees nothing (the ring is the row's) and its release caches all 48 tokens
 * with no tombstone. Request 1 (those 48 + 8 of its own): the key is capped at 56 - 8,
 * so the match is 48 and the last window is prefilled again. SWA capacity is per row;
 * SWA-only eviction frees nothing and says so. */
static void test_ring_caches_full_kv_only(void **state) {
  (void)state;
  rig r;
  rig_make(&r, KVC_SWA_RADIX_RING, KVC_SWA_RADIX_RING, 8);
  const int64_t cost = kvc_swa_allocator_size_swa(r.a) / 8; /* per row */
  static ereq e[2];
  run_req(&r, &e[0], 0, 40, 40, 8, 0, 0);
  conserve(&r, &e[0].st, 48, cost);
  kvc_req_state *one[] = {&e[0].st};
  KVT_OK(kvc_flow_release(r.flow, one, 1, 1, NULL));
  assert_int_equal(sizes(r.c).cached, 48);
  assert_int_equal(sizes(r.c).swa_cached, 0);
  conserve(&r, NULL, 0, 0);
  run_req_like(&r, &e[1], &e[0], 1, 56, 48, 0, 0, 48);
  conserve(&r, &e[1].st, 56 - 48, cost);
  /* The same request one token shorter: key 55 - 8 = 47 tokens, the match ends at 47. */
  int32_t key[64];
  memcpy(key, e[1].toks, sizeof key);
  kvc_radix_match m;
  KVT_OK(kvc_swa_radix_cache_match_prefix(r.c, 0, key, 47, &m));
  assert_int_equal(m.len, 47); /* not gated by SWA: any node boundary is a valid end */
  int64_t ev = -1;
  assert_int_equal(kvc_swa_radix_cache_evict(r.c, r.flow, 0, 16, &ev, NULL), KVC_ERR_OUT_OF_SLOTS);
  assert_int_equal(ev, 0);
  one[0] = &e[1].st;
  KVT_OK(kvc_flow_release(r.flow, one, 1, 1, NULL));
  conserve(&r, NULL, 0, 0);
  const kvc_swa_radix_sizes z = sizes(r.c);
  KVT_OK(kvc_swa_radix_cache_evict(r.c, r.flow, z.cached, 16, &ev, NULL));
  assert_int_equal(ev, z.cached);
  conserve(&r, NULL, 0, 0);
  rig_free(&r);
}

/* A HYBRID cache behind a flow over a PURE allocator (and the other pairs): the calls
 * given the flow are refused with INVALID_ARGUMENT and change nothing. */
static void test_kind_mismatch_is_refused(void **state) {
  (void)state;
  static const int32_t pairs[][2] = {{KVC_SWA_RADIX_PURE, KVC_SWA_RADIX_HYBRID},
                                     {KVC_SWA_RADIX_RING, KVC_SWA_RADIX_PURE},
                                     {KVC_SWA_RADIX_HYBRID, KVC_SWA_RADIX_RING}};
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    rig r;
    rig_make(&r, pairs[i][0], pairs[i][1], 8);
    static ereq e;
    run_req(&r, &e, 0, 16, 16, 4, 0, 0);
    const int64_t avail = kvc_swa_allocator_full_available_size(r.a);
    kvc_req_state *one[] = {&e.st};
    assert_int_equal(kvc_flow_release(r.flow, one, 1, 1, NULL), KVC_ERR_INVALID_ARGUMENT);
    assert_int_equal(kvc_swa_allocator_full_available_size(r.a), avail);
    assert_int_equal(sizes(r.c).cached, 0);
    assert_true(e.st.req_row != 0);
    int64_t s[2] = {1, 2};
    assert_int_equal(kvc_swa_radix_cache_insert(r.c, r.flow, 0, e.toks, s, 2, 0, NULL), KVC_ERR_INVALID_ARGUMENT);
    assert_int_equal(kvc_swa_radix_cache_evict(r.c, r.flow, 4, 4, NULL, NULL), KVC_ERR_INVALID_ARGUMENT);
    KVT_OK(kvc_swa_radix_cache_check(r.c));
    /* A bad kind at create. */
    kvc_swa_radix_cache_config cc = KVC_SWA_RADIX_CACHE_CONFIG_INIT;
    cc.sliding_window = 8;
    cc.radix.num_slots = 64;
    cc.kind = 3;
    kvc_swa_radix_cache *bad = (kvc_swa_radix_cache *)&cc;
    assert_int_equal(kvc_swa_radix_cache_create(kvt_ctx, &cc, &bad), KVC_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(bad, (kvc_swa_radix_cache *)&cc);
    /* Released through a cache of the right kind: the flow is sound. */
    kvc_swa_radix_cache_destroy(r.c);
    cc.kind = pairs[i][0];
    cc.radix.num_slots = kvc_swa_allocator_size_full(r.a);
    cc.radix.req_of = req_of;
    KVT_OK(kvc_swa_radix_cache_create(kvt_ctx, &cc, &r.c));
    e.st.cache_node = NULL; /* the old cache's lock went with it */
    e.st.cache_protected_len = 0;
    e.rr.swa_lock = 0;
    e.rr.inserted_len = 0;
    kvc_flow_destroy(r.flow);
    kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
    fc.page_size = 1;
    fc.req_pool = r.pool;
    fc.swa_allocator = r.a;
    fc.sliding_window = 8;
    fc.cache = kvc_swa_radix_cache_as_prefix_cache(r.c);
    KVT_OK(kvc_flow_create(kvt_ctx, &fc, &r.flow));
    KVT_OK(kvc_flow_release(r.flow, one, 1, 1, NULL));
    conserve(&r, NULL, 0, 0);
    rig_free(&r);
  }
}

/* --- Revival and chunked checkpoints (HYBRID) --------------------------------------- */

/* Window 4, page 1. A: 16-token prompt + 16 decoded: window eviction leaves [0, 26) a
 * tombstone when A is cached, [26, 32) live. B: A's first 20 tokens as its prompt: its
 * match is 0 (a tombstone with nothing live after it is no valid end), it prefills all
 * 20 with its own slots, all SWA-live. B's release revives [0, 20) from B's slots (the
 * node split at 20 by the insert) and frees A's old full slots there, full side only:
 * SWA cached grows by 20, full cached stays, and C (those 20 + 4 of its own) matches 20
 * tokens: B's slots. */
static void test_insert_revives_tombstones(void **state) {
  (void)state;
  rig r;
  rig_make(&r, KVC_SWA_RADIX_HYBRID, KVC_SWA_RADIX_HYBRID, 4);
  static ereq e[3];
  run_req(&r, &e[0], 0, 16, 16, 16, 0, 0);
  assert_int_equal(e[0].st.swa_evicted_seqlen, 26);
  kvc_req_state *one[] = {&e[0].st};
  KVT_OK(kvc_flow_release(r.flow, one, 1, 1, NULL));
  assert_int_equal(sizes(r.c).cached, 32);
  assert_int_equal(sizes(r.c).swa_cached, 6);
  run_req_like(&r, &e[1], &e[0], 1, 20, 20, 0, 0, 0);
  int64_t bslots[20];
  KVT_OK(kvc_flow_row_slots(r.flow, e[1].st.req_row, 0, 20, bslots));
  const int64_t full0 = kvc_swa_allocator_full_available_size(r.a);
  one[0] = &e[1].st;
  KVT_OK(kvc_flow_release(r.flow, one, 1, 1, NULL));
  assert_int_equal(sizes(r.c).cached, 32);
  assert_int_equal(sizes(r.c).swa_cached, 26);
  /* B's 20 slots stayed (the tree's now); A's 20 old full slots came back instead. */
  assert_int_equal(kvc_swa_allocator_full_available_size(r.a), full0 + 20);
  conserve(&r, NULL, 0, 0);
  kvc_radix_match m;
  KVT_OK(kvc_swa_radix_cache_match_prefix(r.c, 0, e[1].toks, 20, &m));
  assert_int_equal(m.len, 20);
  for (int i = 0; i < 20; i++) assert_int_equal(m.slots[i], bslots[i]);
  run_req_like(&r, &e[2], &e[1], 2, 24, 20, 0, 0, 20);
  conserve(&r, &e[2].st, 4, 4);
  one[0] = &e[2].st;
  KVT_OK(kvc_flow_release(r.flow, one, 1, 1, NULL));
  conserve(&r, NULL, 0, 0);
  const kvc_swa_radix_sizes z = sizes(r.c);
  KVT_OK(kvc_swa_radix_cache_evict(r.c, r.flow, z.cached, z.swa_cached, NULL, NULL));
  assert_int_equal(sizes(r.c).cached, 0);
  conserve(&r, NULL, 0, 0);
  rig_free(&r);
}

/* Window 4. A chunked prefill of 40 tokens in chunks of 24 and 16: the checkpoint after
 * the first chunk caches [0, 24), locks its node (FULL path, SWA last window) and makes
 * the row's [0, 24) the tree's; a second request with the same 24 tokens checkpointed
 * meanwhile finds them cached, its duplicates freed and its row rewritten with the
 * tree's slots; both finish and release. */
static void test_chunked_checkpoint(void **state) {
  (void)state;
  rig r;
  rig_make(&r, KVC_SWA_RADIX_HYBRID, KVC_SWA_RADIX_HYBRID, 4);
  static ereq e[2];
  kvc_req_state *both[2];
  for (int i = 0; i < 2; i++) {
    memset(&e[i], 0, sizeof e[i]);
    for (int k = 0; k < 64; k++) e[i].toks[k] = k;
    e[i].rr.tokens = e[i].toks;
    e[i].rr.num_tokens = 24;
    e[i].rr.prompt_len = 40;
    e[i].st.seq_len = 24;
    e[i].st.flags = KVC_REQ_CHUNKED;
    KVT_OK(kvc_swa_radix_cache_match_req(r.c, &e[i].st, &e[i].rr));
    both[i] = &e[i].st;
  }
  KVT_OK(kvc_flow_alloc_for_extend(r.flow, both, 2, r.out, NULL));
  for (int i = 0; i < 2; i++) e[i].st.kv_committed_len = 24;
  KVT_OK(kvc_flow_cache_unfinished(r.flow, &e[0].st));
  assert_int_equal(e[0].st.cache_protected_len, 24);
  assert_int_equal(e[0].st.prefix_len, 24);
  assert_non_null(e[0].st.cache_node);
  assert_true(e[0].rr.swa_lock != 0);
  assert_int_equal(sizes(r.c).cached, 24);
  assert_int_equal(sizes(r.c).protected_size, 24);
  assert_int_equal(sizes(r.c).swa_protected, 4); /* the last window only */
  const int64_t avail = kvc_swa_allocator_full_available_size(r.a);
  KVT_OK(kvc_flow_cache_unfinished(r.flow, &e[1].st)); /* its 24 slots duplicate e[0]'s */
  assert_int_equal(kvc_swa_allocator_full_available_size(r.a), avail + 24);
  const int32_t *r0 = kvc_req_to_token_pool_row(r.pool, e[0].st.req_row);
  const int32_t *r1 = kvc_req_to_token_pool_row(r.pool, e[1].st.req_row);
  for (int i = 0; i < 24; i++) assert_int_equal(r1[i], r0[i]);
  kvc_req_state *lv[] = {&e[0].st, &e[1].st};
  KVT_OK(kvc_flow_check(r.flow, lv, 2));
  KVT_OK(kvc_swa_radix_cache_check(r.c));
  for (int i = 0; i < 2; i++) {
    e[i].rr.num_tokens = 40;
    e[i].st.seq_len = 40;
    e[i].st.flags = 0;
  }
  KVT_OK(kvc_flow_alloc_for_extend(r.flow, both, 2, r.out, NULL));
  for (int i = 0; i < 2; i++) e[i].st.kv_committed_len = 40;
  KVT_OK(kvc_flow_check(r.flow, lv, 2));
  KVT_OK(kvc_flow_release(r.flow, both, 2, 1, NULL));
  conserve(&r, NULL, 0, 0);
  assert_int_equal(sizes(r.c).cached, 40);
  assert_int_equal(sizes(r.c).protected_size, 0);
  assert_int_equal(sizes(r.c).swa_protected, 0);
  rig_free(&r);
}

/* Host allocation failures (the Nth, N = 0, 1, ... until the call succeeds): a release
 * whose insert revives tombstones (its scratch, the LRU's growth) fails with HOST_OOM
 * having changed nothing, and succeeds when retried; an SWA eviction whose batch buffer
 * cannot grow still evicts (each victim's SWA side freed on its own) and stays sound. */
static void test_host_oom_changes_nothing(void **state) {
  (void)state;
  rig r;
  rig_make(&r, KVC_SWA_RADIX_HYBRID, KVC_SWA_RADIX_HYBRID, 4);
  static ereq e[2];
  run_req(&r, &e[0], 0, 16, 16, 16, 0, 0);
  kvc_req_state *one[] = {&e[0].st};
  KVT_OK(kvc_flow_release(r.flow, one, 1, 1, NULL));
  run_req_like(&r, &e[1], &e[0], 1, 20, 20, 0, 0, 0);
  one[0] = &e[1].st;
  int failures = 0;
  for (int64_t n = 0;; n++) {
    const kvc_swa_radix_sizes z0 = sizes(r.c);
    const int64_t f0 = kvc_swa_allocator_full_available_size(r.a), w0 = kvc_swa_allocator_swa_available_size(r.a);
    kvc__fault_set(kvt_ctx, KVC__FAULT_HOST_ALLOC, n);
    const kvc_status st = kvc_flow_release(r.flow, one, 1, 1, NULL);
    kvc__fault_set(kvt_ctx, KVC__FAULT_HOST_ALLOC, -1);
    if (st == KVC_OK) break;
    assert_int_equal(st, KVC_ERR_HOST_OOM);
    failures++;
    const kvc_swa_radix_sizes z1 = sizes(r.c);
    assert_int_equal(z1.cached, z0.cached);
    assert_int_equal(z1.swa_cached, z0.swa_cached);
    assert_int_equal(z1.protected_size, z0.protected_size);
    assert_int_equal(kvc_swa_allocator_full_available_size(r.a), f0);
    assert_int_equal(kvc_swa_allocator_swa_available_size(r.a), w0);
    assert_true(e[1].st.req_row != 0);
    kvc_req_state *lv[] = {&e[1].st};
    KVT_OK(kvc_flow_check(r.flow, lv, 1));
    KVT_OK(kvc_swa_radix_cache_check(r.c));
  }
  assert_true(failures > 0); /* the revival's scratch was allocated in the call */
  assert_int_equal(sizes(r.c).swa_cached, 26);
  conserve(&r, NULL, 0, 0);
  /* SWA eviction with the batch buffer's allocation failing: still evicts, stays sound. */
  for (int64_t n = 0; n < 3; n++) {
    kvc__fault_set(kvt_ctx, KVC__FAULT_HOST_ALLOC, n);
    int64_t sev = -1;
    const kvc_status st = kvc_swa_radix_cache_evict(r.c, r.flow, 0, 4, NULL, &sev);
    kvc__fault_set(kvt_ctx, KVC__FAULT_HOST_ALLOC, -1);
    assert_true(st == KVC_OK || st == KVC_ERR_OUT_OF_SLOTS);
    conserve(&r, NULL, 0, 0);
  }
  const kvc_swa_radix_sizes z = sizes(r.c);
  KVT_OK(kvc_swa_radix_cache_evict(r.c, r.flow, z.cached, z.swa_cached, NULL, NULL));
  conserve(&r, NULL, 0, 0);
  assert_int_equal(sizes(r.c).cached, 0);
  rig_free(&r);
}

/* --- The SWA LRU -------------------------------------------------------------------- */

typedef struct swalog {
  int64_t full[256], swa[256];
  size_t nfull, nswa;
} swalog;
static kvc_status log_full(void *user, const int64_t *s, size_t n) {
  swalog *l = user;
  for (size_t i = 0; i < n && l->nfull < 256; i++) l->full[l->nfull++] = s[i];
  return KVC_OK;
}
static kvc_status log_swa(void *user, const int64_t *s, size_t n) {
  swalog *l = user;
  for (size_t i = 0; i < n && l->nswa < 256; i++) l->swa[l->nswa++] = s[i];
  return KVC_OK;
}

/* Window 4. Leaves X = [1..4] (slots 1..4), Y = [5..8] (5..8), Z = [9..12] (9..12), each
 * FULL-locked with its SWA lock released early, so SWA eviction tombstones them (a
 * full-locked leaf is not deleted). X is matched again after Z was made. SWA eviction of
 * 4 tokens at a time then takes Y (least recently used), Z, and X last; with Y SWA-locked
 * instead, the first goes to Z and Y stays live. */
static void test_swa_eviction_in_lru_order(void **state) {
  (void)state;
  for (int locked = 0; locked < 2; locked++) {
    swalog log = {{0}, {0}, 0, 0};
    kvc_swa_radix_cache_config cc = KVC_SWA_RADIX_CACHE_CONFIG_INIT;
    cc.sliding_window = 4;
    cc.radix.num_slots = 64;
    cc.radix.free_slots = log_full;
    cc.radix.free_user = &log;
    cc.free_swa_slots = log_swa;
    cc.free_swa_user = &log;
    kvc_swa_radix_cache *c;
    KVT_OK(kvc_swa_radix_cache_create(kvt_ctx, &cc, &c));
    const int32_t t[3][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11, 12}};
    void *node[3];
    uint64_t rcpt[3];
    for (int i = 0; i < 3; i++) {
      const int64_t s[4] = {4 * i + 1, 4 * i + 2, 4 * i + 3, 4 * i + 4};
      KVT_OK(kvc_swa_radix_cache_insert(c, NULL, 0, t[i], s, 4, 0, NULL));
      kvc_radix_match m;
      KVT_OK(kvc_swa_radix_cache_match_prefix(c, 0, t[i], 4, &m));
      node[i] = m.node;
      KVT_OK(kvc_swa_radix_cache_lock(c, node[i], &rcpt[i]));
      if (!(locked && i == 1)) KVT_OK(kvc_swa_radix_cache_unlock_swa(c, node[i], &rcpt[i]));
    }
    kvc_radix_match m;
    KVT_OK(kvc_swa_radix_cache_match_prefix(c, 0, t[0], 4, &m)); /* X is the most recent now */
    const int64_t order[2][3] = {{5, 9, 1}, {9, 1, -1}};
    for (int k = 0; k < 3; k++) {
      log.nswa = 0;
      int64_t sev = -1;
      kvc_status st = kvc_swa_radix_cache_evict(c, NULL, 0, 4, NULL, &sev);
      if (order[locked][k] < 0) {
        assert_int_equal(st, KVC_ERR_OUT_OF_SLOTS); /* only the SWA-locked Y is live */
        break;
      }
      KVT_OK(st);
      assert_int_equal(sev, 4);
      assert_int_equal(log.nswa, 4);
      assert_int_equal(log.swa[0], order[locked][k]);
      KVT_OK(kvc_swa_radix_cache_check(c));
    }
    assert_int_equal(log.nfull, 0); /* every leaf is FULL-locked: tombstones, no frees */
    assert_int_equal(sizes(c).swa_cached, locked ? 4 : 0);
    for (int i = 0; i < 3; i++) KVT_OK(kvc_swa_radix_cache_unlock(c, node[i], rcpt[i]));
    KVT_OK(kvc_swa_radix_cache_evict(c, NULL, 12, 0, NULL, NULL));
    assert_int_equal(sizes(c).cached, 0);
    KVT_OK(kvc_swa_radix_cache_check(c));
    kvc_swa_radix_cache_destroy(c);
  }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_pure_caches_below_the_floor), cmocka_unit_test(test_ring_caches_full_kv_only),
    cmocka_unit_test(test_kind_mismatch_is_refused),    cmocka_unit_test(test_swa_eviction_in_lru_order),
    cmocka_unit_test(test_insert_revives_tombstones),   cmocka_unit_test(test_chunked_checkpoint),
    cmocka_unit_test(test_host_oom_changes_nothing),
};
KVT_MAIN("swa_radix_kinds", tests)
