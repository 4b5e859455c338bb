/*
 * Radix cache (SGLang RadixCache) rules with worked examples, on a standalone cache whose
 * frees are logged: match and insert results, page boundaries, splits, namespaces, locks,
 * every policy's eviction order, bad input changing nothing, KV events, memory.
 */
#include "radix_util.h"

static void test_insert_and_match_page1(void **state) {
  (void)state;
  freelog log = {0};
  kvc_radix_cache *rc = radix_make(1, KVC_RADIX_LRU, &log);
  const int32_t a[] = {1, 2, 3, 4, 5};
  assert_int_equal(radix_put(rc, 0, a, 5, 11, 0), 0);
  assert_int_equal(radix_cached(rc), 5);
  /* A match ending inside the node splits it at the match: [1,2,3] + [4,5]. */
  const int32_t q[] = {1, 2, 3, 9};
  kvc_radix_match m = radix_get(rc, 0, q, 4);
  assert_int_equal(m.len, 3);
  assert_int_equal(m.slots[0], 11);
  assert_int_equal(m.slots[2], 13);
  assert_int_equal(m.copied, 0); /* one segment: no copy */
  assert_int_equal(radix_nodes(rc), 2);
  assert_int_equal(radix_cached(rc), 5);
  /* Insert of a longer key: 5 already present; only the new token is taken, the
   * incoming duplicates are freed, existing values are kept. */
  const int32_t b[] = {1, 2, 3, 4, 5, 6};
  assert_int_equal(radix_put(rc, 0, b, 6, 100, 0), 5);
  assert_int_equal((int)log.n, 5);
  for (int i = 0; i < 5; i++) assert_int_equal(log.slots[i], 100 + i);
  m = radix_get(rc, 0, b, 6);
  assert_int_equal(m.len, 6);
  const int64_t want[] = {11, 12, 13, 14, 15, 105};
  for (int i = 0; i < 6; i++) assert_int_equal(m.slots[i], want[i]);
  assert_int_equal(m.copied, 1); /* two segments */
  /* The caller's own tree slots are not duplicates. */
  int64_t same[] = {11, 12, 13}, prefix;
  KVT_OK(kvc_radix_cache_insert(rc, NULL, 0, b, same, 3, 0, &prefix));
  assert_int_equal(prefix, 3);
  assert_int_equal((int)log.n, 5);
  /* Empty keys match nothing at the root. */
  m = radix_get(rc, 0, b, 0);
  assert_int_equal(m.len, 0);
  assert_non_null(m.node);
  kvc_radix_cache_destroy(rc);
}

static void test_page_boundaries(void **state) {
  (void)state;
  freelog log = {0};
  kvc_radix_cache *rc = radix_make(4, KVC_RADIX_LRU, &log);
  int32_t t[16];
  for (int i = 0; i < 16; i++) t[i] = 100 + i;
  /* 10 tokens store 2 pages; the unaligned tail stays with the caller. */
  assert_int_equal(radix_put(rc, 0, t, 10, 4, 0), 0);
  assert_int_equal(radix_cached(rc), 8);
  assert_int_equal(radix_get(rc, 0, t, 7).len, 4); /* floored to a page */
  assert_int_equal(radix_get(rc, 0, t, 3).len, 0);
  /* Children are indexed by their whole first page: same first token, other page. */
  int32_t u[8] = {100, 101, 102, 999, 1, 2, 3, 4};
  assert_int_equal(radix_put(rc, 0, u, 8, 52, 0), 0);
  assert_int_equal(radix_nodes(rc), 3); /* root's children: [100..103], [100,101,102,999] */
  assert_int_equal(radix_get(rc, 0, u, 8).len, 8);
  /* A mismatch inside a page: the match and the split stop at the page start. */
  int32_t v[8] = {100, 101, 102, 103, 104, 105, 0, 0};
  kvc_radix_match m = radix_get(rc, 0, v, 8);
  assert_int_equal(m.len, 4);
  kvc_radix_cache_destroy(rc);
}

static void test_match_req_limit_and_lock(void **state) {
  (void)state;
  freelog log = {0};
  kvc_radix_cache *rc = radix_make(64, KVC_RADIX_LRU, &log);
  int32_t t[128];
  for (int i = 0; i < 128; i++) t[i] = i + 7;
  radix_put(rc, 0, t, 128, 64, 0);
  /* SGLang: the match key is len - 1, then floored: with page 64 a 64-token prompt
   * matches 0 and a 128-token prompt 64. */
  kvc_radix_req rr = {.tokens = t, .num_tokens = 64};
  kvc_req_state r;
  memset(&r, 0, sizeof r);
  KVT_OK(kvc_radix_cache_match_req(rc, &r, &rr));
  assert_int_equal(r.prefix_len, 0);
  assert_null(r.prefix_slots);
  assert_null(r.cache_node);
  rr.num_tokens = 128;
  KVT_OK(kvc_radix_cache_match_req(rc, &r, &rr));
  assert_int_equal(r.prefix_len, 64);
  assert_int_equal(r.cache_protected_len, 64);
  assert_int_equal(r.prefix_slots[63], 127);
  int64_t ev, pr;
  KVT_OK(kvc_radix_cache_sizes(rc, &ev, &pr, NULL));
  assert_int_equal(pr, 64); /* admission locked the matched node */
  assert_int_equal(ev, 64);
  /* Matching again for a request that holds a node is misuse. */
  KVT_STATUS(kvc_radix_cache_match_req(rc, &r, &rr), KVC_ERR_MISUSE);
  KVT_OK(kvc_radix_cache_unlock(rc, r.cache_node));
  KVT_OK(kvc_radix_cache_sizes(rc, &ev, &pr, NULL));
  assert_int_equal(pr, 0);
  KVT_STATUS(kvc_radix_cache_unlock(rc, r.cache_node), KVC_ERR_MISUSE); /* below zero */
  KVT_OK(kvc_radix_cache_check(rc));
  kvc_radix_cache_destroy(rc);
}

static void test_split_keeps_lock_hits_priority(void **state) {
  (void)state;
  freelog log = {0};
  kvc_radix_cache *rc = radix_make(2, KVC_RADIX_PRIORITY, &log);
  const int32_t a[] = {1, 2, 3, 4, 5, 6, 7, 8};
  radix_put(rc, 0, a, 8, 2, 7);
  kvc_radix_match m = radix_get(rc, 0, a, 8);
  KVT_OK(kvc_radix_cache_lock(rc, m.node));
  int64_t ev, pr;
  const int32_t q[] = {1, 2, 3, 4, 0, 0};
  m = radix_get(rc, 0, q, 6); /* splits the locked node at 4 */
  assert_int_equal(m.len, 4);
  assert_int_equal(radix_nodes(rc), 2);
  KVT_OK(kvc_radix_cache_sizes(rc, &ev, &pr, NULL));
  assert_int_equal(pr, 8); /* a split moves nothing between evictable and protected */
  assert_int_equal(ev, 0);
  char buf[1024];
  size_t need;
  KVT_OK(kvc_radix_cache_dump(rc, buf, sizeof buf, &need));
  assert_non_null(strstr(buf, "len=4 lock=1 hits=1 prio=7"));
  assert_int_equal(need, strlen(buf) + 1);
  /* Unlocking the deeper node unlocks the whole path. */
  const int32_t *full = a;
  m = radix_get(rc, 0, full, 8);
  KVT_OK(kvc_radix_cache_unlock(rc, m.node));
  KVT_OK(kvc_radix_cache_sizes(rc, &ev, &pr, NULL));
  assert_int_equal(ev, 8);
  kvc_radix_cache_destroy(rc);
}

static void test_namespaces_never_share(void **state) {
  (void)state;
  freelog log = {0};
  kvc_radix_cache *rc = radix_make(1, KVC_RADIX_LRU, &log);
  const int32_t a[] = {5, 6, 7, 8};
  radix_put(rc, 1, a, 4, 10, 0);
  assert_int_equal(radix_get(rc, 2, a, 4).len, 0);
  assert_int_equal(radix_get(rc, 0, a, 4).len, 0);
  assert_int_equal(radix_put(rc, 2, a, 4, 20, 0), 0); /* its own root child */
  assert_int_equal(radix_nodes(rc), 2);
  kvc_radix_match m = radix_get(rc, 2, a, 4);
  assert_int_equal(m.slots[0], 20);
  m = radix_get(rc, 1, a, 4);
  assert_int_equal(m.slots[0], 10);
  kvc_radix_cache_destroy(rc);
}

/* Three leaves A, B, C (4 tokens each) with A: created 1st, accessed last, 1 hit,
 * priority 5; B: created 2nd, never accessed again, 1 hit, priority 1; C: created 3rd,
 * inserted twice (2 hits), priority 3. Evicting one token at a time takes whole leaves. */
static void expect_order(kvc_radix_policy policy, int32_t slru_threshold, const char *want) {
  freelog log = {0};
  kvc_radix_cache_config c = KVC_RADIX_CACHE_CONFIG_INIT;
  c.policy = policy;
  c.slru_threshold = slru_threshold;
  c.num_slots = 1000;
  c.free_slots = freelog_free;
  c.free_user = &log;
  kvc_radix_cache *rc = NULL;
  KVT_OK(kvc_radix_cache_create(kvt_ctx, &c, &rc));
  const int32_t A[] = {1, 1, 1, 1}, B[] = {2, 2, 2, 2}, C[] = {3, 3, 3, 3};
  radix_put(rc, 0, A, 4, 100, 5);
  radix_put(rc, 0, B, 4, 200, 1);
  radix_put(rc, 0, C, 4, 300, 3);
  int64_t same[] = {300, 301, 302, 303};
  KVT_OK(kvc_radix_cache_insert(rc, NULL, 0, C, same, 4, 0, NULL));
  radix_get(rc, 0, A, 4);
  char got[4] = {0};
  for (int i = 0; i < 3; i++) {
    int64_t n = 0;
    KVT_OK(kvc_radix_cache_evict(rc, NULL, 1, &n));
    assert_int_equal(n, 4);
    got[i] = (char)('A' + log.first[i] / 100 - 1);
    KVT_OK(kvc_radix_cache_check(rc));
  }
  if (strcmp(got, want))
    fail_msg("policy %d (threshold %d): evicted %s, expected %s", policy, slru_threshold, got, want);
  KVT_STATUS(kvc_radix_cache_evict(rc, NULL, 1, NULL), KVC_ERR_OUT_OF_SLOTS); /* empty */
  kvc_radix_cache_destroy(rc);
}

static void test_each_policy_eviction_order(void **state) {
  (void)state;
  expect_order(KVC_RADIX_LRU, 0, "BCA");
  expect_order(KVC_RADIX_MRU, 0, "ACB");
  expect_order(KVC_RADIX_FIFO, 0, "ABC");
  expect_order(KVC_RADIX_FILO, 0, "CBA");
  expect_order(KVC_RADIX_LFU, 0, "BAC");
  expect_order(KVC_RADIX_SLRU, 0, "BAC"); /* C is protected (2 hits >= 2) */
  expect_order(KVC_RADIX_SLRU, 3, "BCA"); /* nobody protected: LRU */
  expect_order(KVC_RADIX_PRIORITY, 0, "BCA");
}

static void test_parent_becomes_a_victim_after_its_children(void **state) {
  (void)state;
  freelog log = {0};
  kvc_radix_cache *rc = radix_make(1, KVC_RADIX_LRU, &log);
  const int32_t a[] = {1, 2, 3, 4, 5, 6}, b[] = {9, 9};
  radix_put(rc, 0, a, 4, 100, 0);
  radix_put(rc, 0, b, 2, 200, 0);
  radix_put(rc, 0, a, 6, 300, 0); /* [1..4] gets a child [5, 6]; 300..303 freed */
  assert_int_equal(log.calls, 1);
  assert_int_equal(log.first[0], 300);
  memset(&log, 0, sizeof log);
  int64_t n;
  KVT_OK(kvc_radix_cache_evict(rc, NULL, 5, &n));
  /* b (oldest leaf), then [5, 6] (the only other leaf), then its parent. */
  assert_int_equal(log.calls, 3);
  assert_int_equal(log.first[0], 200);
  assert_int_equal(log.first[1], 304);
  assert_int_equal(log.first[2], 100);
  assert_int_equal(n, 8); /* whole nodes: overshoot */
  assert_int_equal(radix_cached(rc), 0);
  kvc_radix_cache_destroy(rc);
}

static void test_locked_tree_evicts_nothing(void **state) {
  (void)state;
  freelog log = {0};
  kvc_radix_cache *rc = radix_make(1, KVC_RADIX_LRU, &log);
  const int32_t a[] = {1, 2, 3}, b[] = {1, 2, 7};
  radix_put(rc, 0, a, 3, 10, 0);
  radix_put(rc, 0, b, 3, 20, 0); /* 20, 21 are duplicates of [1, 2]: freed */
  assert_int_equal(log.n, 2);
  memset(&log, 0, sizeof log);
  kvc_radix_match ma = radix_get(rc, 0, a, 3), mb = radix_get(rc, 0, b, 3);
  KVT_OK(kvc_radix_cache_lock(rc, ma.node));
  KVT_OK(kvc_radix_cache_lock(rc, mb.node));
  KVT_STATUS(kvc_radix_cache_evict(rc, NULL, 1, NULL), KVC_ERR_OUT_OF_SLOTS);
  assert_int_equal(log.calls, 0);
  assert_int_equal(radix_cached(rc), 4);
  /* Unlock one branch: only its leaf can go; the shared [1, 2] stays (b locks it). */
  KVT_OK(kvc_radix_cache_unlock(rc, ma.node));
  int64_t n;
  KVT_OK(kvc_radix_cache_evict(rc, NULL, 100, &n));
  assert_int_equal(n, 1);
  assert_int_equal(log.first[0], 12);
  /* The evicted node's handle is stale now. */
  KVT_STATUS(kvc_radix_cache_lock(rc, ma.node), KVC_ERR_INVALID_ARGUMENT);
  KVT_OK(kvc_radix_cache_check(rc));
  kvc_radix_cache_destroy(rc);
}

static void test_handles_are_generation_checked(void **state) {
  (void)state;
  freelog log = {0};
  kvc_radix_cache *rc = radix_make(1, KVC_RADIX_LRU, &log), *other = radix_make(1, KVC_RADIX_LRU, &log);
  const int32_t a[] = {1, 2, 3};
  radix_put(rc, 0, a, 3, 10, 0);
  radix_put(other, 0, a, 3, 10, 0);
  kvc_radix_match m = radix_get(rc, 0, a, 3);
  KVT_STATUS(kvc_radix_cache_lock(other, m.node), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_radix_cache_lock(rc, (void *)(uintptr_t)12345), KVC_ERR_INVALID_ARGUMENT);
  KVT_OK(kvc_radix_cache_reset(rc));
  assert_int_equal(radix_cached(rc), 0);
  assert_int_equal(log.calls, 0); /* reset frees nothing (the pools are being cleared) */
  radix_put(rc, 0, a, 3, 10, 0);  /* same id reused, new generation */
  KVT_STATUS(kvc_radix_cache_lock(rc, m.node), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_radix_cache_lock(NULL, m.node), KVC_ERR_INVALID_ARGUMENT);
  kvc_radix_cache_destroy(rc);
  /* A new cache (often at the same address) refuses the old cache's handles too. */
  m = radix_get(other, 0, a, 3);
  kvc_radix_cache_destroy(other);
  kvc_radix_cache *again = radix_make(1, KVC_RADIX_LRU, &log);
  radix_put(again, 0, a, 3, 10, 0);
  KVT_STATUS(kvc_radix_cache_lock(again, m.node), KVC_ERR_INVALID_ARGUMENT);
  kvc_radix_cache_destroy(again);
  kvc_radix_cache_destroy(NULL);
}

/* At page 1 slots are marked four a step; a bad slot is still reported for the run of
 * consecutive slots that holds it (at the run's first position, the run's ends tested
 * before its marks), with nothing changed. */
static void test_bad_slots_in_steps_of_four(void **state) {
  (void)state;
  freelog log = {0};
  kvc_radix_cache *rc = radix_make(1, KVC_RADIX_LRU, &log);
  const int32_t a[] = {1, 2, 3, 4}, e[] = {5}, b[] = {20, 21, 22, 23, 24, 25, 26, 27};
  radix_put(rc, 0, a, 4, 10, 0);    /* slots 10-13 */
  radix_put(rc, 0, e, 1, 65535, 0); /* the slot below the top one, 65536 */
  char before[512], after[512];
  KVT_OK(kvc_radix_cache_dump(rc, before, sizeof before, NULL));
  int64_t held_mid[] = {40, 41, 42, 43, 9, 10, 11, 50}; /* 10 is cached: the run 9-11 */
  KVT_STATUS(kvc_radix_cache_insert(rc, NULL, 0, b, held_mid, 8, 0, NULL), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "slots from 9 at position 4"));
  int64_t twice_in_step[] = {40, 41, 40, 43, 44, 45, 46, 47};
  KVT_STATUS(kvc_radix_cache_insert(rc, NULL, 0, b, twice_in_step, 8, 0, NULL), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "slots from 40 at position 2"));
  int64_t run_past_top[] = {40, 41, 42, 43, 65534, 65535, 65536, 65537}; /* 65535 cached */
  KVT_STATUS(kvc_radix_cache_insert(rc, NULL, 0, b, run_past_top, 8, 0, NULL), KVC_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "slots from 65534 at position 4"));
  int64_t zero_last[] = {40, 41, 42, 43, 44, 45, 46, 0};
  KVT_STATUS(kvc_radix_cache_insert(rc, NULL, 0, b, zero_last, 8, 0, NULL), KVC_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "slots from 0 at position 7"));
  KVT_OK(kvc_radix_cache_dump(rc, after, sizeof after, NULL));
  assert_string_equal(before, after);
  assert_int_equal(radix_cached(rc), 5);
  assert_int_equal(log.calls, 0);
  KVT_OK(kvc_radix_cache_check(rc));
  int64_t good[] = {40, 41, 42, 43, 44, 45, 46, 47};
  KVT_OK(kvc_radix_cache_insert(rc, NULL, 0, b, good, 8, 0, NULL));
  KVT_OK(kvc_radix_cache_check(rc));
  assert_int_equal(radix_cached(rc), 13);
  kvc_radix_cache_destroy(rc);
}

static void test_bad_slots_change_nothing(void **state) {
  (void)state;
  freelog log = {0};
  kvc_radix_cache *rc = radix_make(1, KVC_RADIX_LRU, &log);
  const int32_t a[] = {1, 2, 3, 4}, b[] = {7, 8, 9};
  radix_put(rc, 0, a, 4, 10, 0);
  char before[512], after[512];
  KVT_OK(kvc_radix_cache_dump(rc, before, sizeof before, NULL));
  int64_t out_of_range[] = {5, 0, 6};
  KVT_STATUS(kvc_radix_cache_insert(rc, NULL, 0, b, out_of_range, 3, 0, NULL), KVC_ERR_INVALID_ARGUMENT);
  int64_t too_big[] = {5, 1 << 17, 6};
  KVT_STATUS(kvc_radix_cache_insert(rc, NULL, 0, b, too_big, 3, 0, NULL), KVC_ERR_INVALID_ARGUMENT);
  int64_t cached_elsewhere[] = {5, 11, 6}; /* slot 11 is the tree's (token 2) */
  KVT_STATUS(kvc_radix_cache_insert(rc, NULL, 0, b, cached_elsewhere, 3, 0, NULL), KVC_ERR_MISUSE);
  int64_t twice[] = {5, 6, 5};
  KVT_STATUS(kvc_radix_cache_insert(rc, NULL, 0, b, twice, 3, 0, NULL), KVC_ERR_MISUSE);
  KVT_OK(kvc_radix_cache_dump(rc, after, sizeof after, NULL));
  assert_string_equal(before, after);
  assert_int_equal(radix_cached(rc), 4);
  assert_int_equal(log.calls, 0);
  KVT_STATUS(kvc_radix_cache_evict(rc, NULL, -1, NULL), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_radix_cache_insert(rc, NULL, 0, NULL, out_of_range, 3, 0, NULL), KVC_ERR_INVALID_ARGUMENT);
  KVT_OK(kvc_radix_cache_check(rc));
  /* Without a flow or hook nothing can be freed: refused before any change. */
  kvc_radix_cache_config c = KVC_RADIX_CACHE_CONFIG_INIT;
  c.num_slots = 100;
  kvc_radix_cache *bare;
  KVT_OK(kvc_radix_cache_create(kvt_ctx, &c, &bare));
  int64_t s1[] = {1, 2, 3, 4}, s2[] = {5, 6, 7, 8};
  KVT_OK(kvc_radix_cache_insert(bare, NULL, 0, a, s1, 4, 0, NULL));
  KVT_STATUS(kvc_radix_cache_insert(bare, NULL, 0, a, s2, 4, 0, NULL), KVC_ERR_UNSUPPORTED);
  KVT_STATUS(kvc_radix_cache_evict(bare, NULL, 1, NULL), KVC_ERR_UNSUPPORTED);
  assert_int_equal(radix_cached(bare), 4);
  kvc_radix_cache_destroy(bare);
  /* Page size 4: a page must be one allocator page (aligned, consecutive slots). */
  kvc_radix_cache *paged = radix_make(4, KVC_RADIX_LRU, &log);
  const int32_t k8[] = {1, 2, 3, 4, 5, 6, 7, 8};
  int64_t unaligned[] = {9, 10, 11, 12, 16, 17, 18, 19}, gap[] = {8, 9, 10, 12, 16, 17, 18, 19};
  int64_t good[] = {8, 9, 10, 11, 40, 41, 42, 43};
  KVT_STATUS(kvc_radix_cache_insert(paged, NULL, 0, k8, unaligned, 8, 0, NULL), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_radix_cache_insert(paged, NULL, 0, k8, gap, 8, 0, NULL), KVC_ERR_INVALID_ARGUMENT);
  assert_int_equal(radix_cached(paged), 0);
  KVT_OK(kvc_radix_cache_insert(paged, NULL, 0, k8, good, 8, 0, NULL));
  const int32_t other[] = {5, 5, 5, 5};
  int64_t reused[] = {40, 41, 42, 43};
  KVT_STATUS(kvc_radix_cache_insert(paged, NULL, 0, other, reused, 4, 0, NULL), KVC_ERR_MISUSE);
  KVT_OK(kvc_radix_cache_check(paged));
  kvc_radix_cache_destroy(paged);
  c.page_size = 0;
  KVT_STATUS(kvc_radix_cache_create(kvt_ctx, &c, &bare), KVC_ERR_INVALID_ARGUMENT);
  c.page_size = 1;
  c.policy = (kvc_radix_policy)42;
  KVT_STATUS(kvc_radix_cache_create(kvt_ctx, &c, &bare), KVC_ERR_INVALID_ARGUMENT);
  kvc_radix_cache_destroy(rc);
}

/* --- KV events ---------------------------------------------------------------------- */

typedef struct evlog {
  int stored, removed, cleared;
  uint64_t hashes[64];
  uint64_t parents[64];
  int has_parent[64];
  size_t removed_hashes;
} evlog;

static void on_event(void *user, const kvc_radix_event *e) {
  evlog *l = user;
  if (e->kind == KVC_RADIX_BLOCK_STORED) {
    l->hashes[l->stored] = e->block_hash;
    l->parents[l->stored] = e->parent_hash;
    l->has_parent[l->stored] = e->has_parent;
    l->stored++;
  } else if (e->kind == KVC_RADIX_BLOCK_REMOVED) {
    l->removed++;
    l->removed_hashes += e->num_hashes;
  } else {
    l->cleared++;
  }
}

/* A caller hash: the sum of the tokens plus 1000 x the parent (deterministic). */
static kvc_status sum_hash(void *user, uint64_t parent, int has_parent, uint64_t ns, const int32_t *t, int64_t n,
                           uint64_t *out) {
  (void)user;
  uint64_t h = has_parent ? parent * 1000 : ns;
  for (int64_t i = 0; i < n; i++) h += (uint64_t)t[i];
  *out = h;
  return KVC_OK;
}

static void test_kv_events(void **state) {
  (void)state;
  freelog log = {0};
  evlog ev = {0};
  kvc_radix_cache_config c = KVC_RADIX_CACHE_CONFIG_INIT;
  c.page_size = 2;
  c.num_slots = 1000;
  c.free_slots = freelog_free;
  c.free_user = &log;
  c.on_event = on_event;
  c.event_user = &ev;
  c.block_hash = sum_hash;
  kvc_radix_cache *rc;
  KVT_OK(kvc_radix_cache_create(kvt_ctx, &c, &rc));
  const int32_t a[] = {1, 2, 3, 4, 5, 6};
  radix_put(rc, 0, a, 6, 10, 0); /* one node, 3 pages: 3 BlockStored, chained */
  assert_int_equal(ev.stored, 3);
  assert_int_equal(ev.has_parent[0], 0);
  assert_int_equal(ev.hashes[0], 3);
  assert_int_equal(ev.parents[1], 3);
  assert_int_equal(ev.hashes[1], 3007);
  assert_int_equal(ev.hashes[2], 3007011);
  const int32_t b[] = {1, 2, 3, 4, 9, 9};
  radix_put(rc, 0, b, 6, 20, 0); /* splits (no event), one new page chained from page 2 */
  assert_int_equal(ev.stored, 4);
  assert_int_equal(ev.has_parent[3], 1);
  assert_int_equal(ev.parents[3], 3007);
  assert_int_equal(ev.hashes[3], 3007018);
  KVT_OK(kvc_radix_cache_evict(rc, NULL, 100, NULL)); /* 3 nodes: 3 BlockRemoved */
  assert_int_equal(ev.removed, 3);
  assert_int_equal((int)ev.removed_hashes, 4);
  KVT_OK(kvc_radix_cache_reset(rc));
  assert_int_equal(ev.cleared, 1);
  kvc_radix_cache_destroy(rc);
  /* The default hash: XXH3 when the library has xxhash.h, else UNSUPPORTED. */
  uint64_t h1 = 0, h2 = 0;
  kvc_status st = kvc_radix_block_hash_xxh3(NULL, 0, 0, 0, a, 2, &h1);
  c.block_hash = NULL;
  if (st == KVC_OK) {
    KVT_OK(kvc_radix_block_hash_xxh3(NULL, h1, 1, 0, a + 2, 2, &h2));
    assert_true(h1 != h2); /* the parent seeds the chain */
    KVT_OK(kvc_radix_cache_create(kvt_ctx, &c, &rc));
    radix_put(rc, 0, a, 4, 10, 0);
    assert_int_equal(ev.stored, 6);
    assert_int_equal(ev.hashes[4], h1);
    assert_int_equal(ev.hashes[5], h2);
    kvc_radix_cache_destroy(rc);
  } else {
    assert_int_equal(st, KVC_ERR_UNSUPPORTED);
    KVT_STATUS(kvc_radix_cache_create(kvt_ctx, &c, &rc), KVC_ERR_UNSUPPORTED);
  }
}

/* --- Memory ---------------------------------------------------------------------------- */

static void test_memory_bound(void **state) {
  (void)state;
  /* 2 x 10^5 cached tokens at page 1 in branching requests: bytes per token and node. */
  kvc_radix_cache_config c = KVC_RADIX_CACHE_CONFIG_INIT;
  c.num_slots = 1 << 18;
  kvc_radix_cache *rc;
  KVT_OK(kvc_radix_cache_create(kvt_ctx, &c, &rc));
  kvt_rng rng = {kvt_seed()};
  int32_t toks[1024];
  int64_t slots[1024], next = 1, cached = 0;
  while (cached < 200000) {
    int64_t n = kvt_range(&rng, 64, 1024);
    for (int64_t i = 0; i < n; i++) toks[i] = (int32_t)(i < 32 ? kvt_range(&rng, 0, 3) : kvt_range(&rng, 0, 1 << 20));
    kvc_radix_match m;
    KVT_OK(kvc_radix_cache_match_prefix(rc, 0, toks, n, &m));
    for (int64_t i = 0; i < n; i++) slots[i] = i < m.len ? m.slots[i] : next++;
    int64_t p;
    KVT_OK(kvc_radix_cache_insert(rc, NULL, 0, toks, slots, n, 0, &p));
    assert_int_equal(p, m.len);
    cached += n - p;
  }
  kvc_radix_stats s;
  KVT_OK(kvc_radix_cache_stats(rc, &s));
  assert_int_equal(s.cached_tokens, cached);
  if (s.bytes > 16 * s.cached_tokens + 128 * s.nodes)
    fail_msg("%lld bytes for %lld tokens in %lld nodes", (long long)s.bytes, (long long)s.cached_tokens,
             (long long)s.nodes);
  KVT_OK(kvc_radix_cache_check(rc));
  kvc_radix_cache_destroy(rc);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_insert_and_match_page1),
    cmocka_unit_test(test_page_boundaries),
    cmocka_unit_test(test_match_req_limit_and_lock),
    cmocka_unit_test(test_split_keeps_lock_hits_priority),
    cmocka_unit_test(test_namespaces_never_share),
    cmocka_unit_test(test_each_policy_eviction_order),
    cmocka_unit_test(test_parent_becomes_a_victim_after_its_children),
    cmocka_unit_test(test_locked_tree_evicts_nothing),
    cmocka_unit_test(test_handles_are_generation_checked),
    cmocka_unit_test(test_bad_slots_in_steps_of_four),
    cmocka_unit_test(test_bad_slots_change_nothing),
    cmocka_unit_test(test_kv_events),
    cmocka_unit_test(test_memory_bound),
};
KVT_MAIN("radix", tests)
