/*
 * A radix cache bound to its TOKEN allocator (kvc_radix_cache_bind_allocator): the tree's
 * held marks live in the allocator's page states. Worked examples of what binding accepts
 * and refuses, of every free of the allocator refusing a cached slot, of clear / restore
 * refusing while the cache holds handed-out slots, of reset / destroy giving the marks up,
 * of an eviction refused for a victim whose mark is gone (white-box), and a flow trace run
 * side by side with an unbound twin: the same slots, victims and free order.
 */
#include "radix_flow_util.h"
#include "../pool/alloc_test_util.h"
#include "../../src/alloc/alloc.h"

static int64_t cached_of(const kvc_radix_cache *rc) {
  int64_t c;
  KVT_OK(kvc_radix_cache_sizes(rc, NULL, NULL, &c));
  return c;
}

static void keys(int32_t *t, int64_t n, int32_t seed) {
  for (int64_t i = 0; i < n; i++) t[i] = seed * 1000 + (int32_t)i;
}

static void test_bind_refusals(void **state) {
  (void)state;
  kvc_allocator *tok = kvt_allocator(KVC_ALLOCATOR_TOKEN, 64, 1, 0);
  kvc_allocator *small = kvt_allocator(KVC_ALLOCATOR_TOKEN, 32, 1, 0);
  kvc_allocator *paged = kvt_allocator(KVC_ALLOCATOR_PAGED, 64, 16, 0);
  kvc_radix_cache *rc = make_cache(1, 64), *rc16 = make_cache(16, 64), *other = make_cache(1, 64);
  KVT_STATUS(kvc_radix_cache_bind_allocator(rc16, paged), KVC_ERR_INVALID_ARGUMENT); /* page 16 */
  KVT_STATUS(kvc_radix_cache_bind_allocator(rc, small), KVC_ERR_INVALID_ARGUMENT);   /* 32 slots, not 64 */
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "num_slots"));
  KVT_STATUS(kvc_radix_cache_bind_allocator(rc, (kvc_allocator *)(void *)rc16), KVC_ERR_INVALID_ARGUMENT);
  /* Not empty: one cached token run. */
  int64_t s[4];
  int32_t t[4];
  keys(t, 4, 1);
  KVT_OK(kvc_allocator_alloc(tok, 4, s));
  KVT_OK(kvc_radix_cache_insert(rc, NULL, 0, t, s, 4, 0, NULL));
  KVT_STATUS(kvc_radix_cache_bind_allocator(rc, tok), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "holds 4 tokens"));
  KVT_OK(kvc_radix_cache_reset(rc));
  KVT_OK(kvc_radix_cache_bind_allocator(rc, tok));
  KVT_STATUS(kvc_radix_cache_bind_allocator(rc, tok), KVC_ERR_MISUSE);    /* the cache twice */
  KVT_STATUS(kvc_radix_cache_bind_allocator(other, tok), KVC_ERR_MISUSE); /* the allocator twice */
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "bound to a radix cache already"));
  /* Unbinding needs an empty cache; then the allocator can be bound elsewhere. */
  KVT_OK(kvc_radix_cache_insert(rc, NULL, 0, t, s, 4, 0, NULL));
  KVT_STATUS(kvc_radix_cache_bind_allocator(rc, NULL), KVC_ERR_MISUSE);
  KVT_OK(kvc_radix_cache_reset(rc));
  KVT_OK(kvc_radix_cache_bind_allocator(rc, NULL));
  KVT_OK(kvc_radix_cache_bind_allocator(other, tok));
  KVT_OK(kvc_radix_cache_check(other));
  kvc_radix_cache_destroy(other);
  KVT_OK(kvc_radix_cache_bind_allocator(rc, tok)); /* destroy unbound it */
  kvc_radix_cache_destroy(rc);
  kvc_radix_cache_destroy(rc16);
  KVT_OK(kvc_allocator_free(tok, s, 4));
  KVT_OK(kvc_allocator_check(tok));
  kvc_allocator_destroy(tok);
  kvc_allocator_destroy(small);
  kvc_allocator_destroy(paged);
}

/* Every other way to free, clear or insert a cached slot is refused, nothing changed. */
static void test_bound_marks_and_refusals(void **state) {
  (void)state;
  kvc_allocator *a = kvt_allocator(KVC_ALLOCATOR_TOKEN, 64, 1, 0);
  kvc_radix_cache *rc = make_cache(1, 64);
  KVT_OK(kvc_radix_cache_bind_allocator(rc, a));
  int64_t s[8];
  int32_t t[8], u[8];
  keys(t, 8, 1);
  keys(u, 8, 2);
  KVT_OK(kvc_allocator_alloc(a, 8, s));
  KVT_OK(kvc_radix_cache_insert(rc, NULL, 0, t, s, 8, 0, NULL));
  assert_int_equal(cached_of(rc), 8);
  assert_int_equal(a->state[s[3]], KVC__PG_HELD | KVC__PG_CACHED);
  const int64_t avail = kvc_allocator_available_size(a);
  KVT_STATUS(kvc_allocator_free(a, &s[3], 1), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "held by the radix cache bound to this allocator"));
  KVT_STATUS(kvc_allocator_free_segment(a, &s[1], 2, 0), KVC_ERR_MISUSE);
  const int64_t *lists[] = {&s[5]};
  const size_t counts[] = {1};
  KVT_STATUS(kvc_allocator_check_free(a, lists, counts, 1), KVC_ERR_MISUSE);
  KVT_OK(kvc_allocator_free_group_begin(a));
  KVT_STATUS(kvc_allocator_free(a, &s[2], 1), KVC_ERR_MISUSE);
  KVT_OK(kvc_allocator_free_group_end(a));
  KVT_STATUS(kvc_allocator_clear(a), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "reset that cache first"));
  assert_int_equal(kvc_allocator_available_size(a), avail);
  assert_int_equal(a->state[s[2]], KVC__PG_HELD | KVC__PG_CACHED);
  KVT_OK(kvc_allocator_check(a));
  /* Inserts: a slot the allocator does not hold, one cached under another key, a repeat
   * inside the key, one out of range: refused, nothing marked. */
  int64_t v[8];
  KVT_OK(kvc_allocator_alloc(a, 8, v));
  int64_t bad[8];
  memcpy(bad, v, sizeof bad);
  bad[5] = 60; /* FREE in the allocator (the ring hands out 17.. first) */
  assert_int_equal(a->state[60], KVC__PG_FREE);
  KVT_STATUS(kvc_radix_cache_insert(rc, NULL, 0, u, bad, 8, 0, NULL), KVC_ERR_MISUSE);
  bad[5] = s[0];
  KVT_STATUS(kvc_radix_cache_insert(rc, NULL, 0, u, bad, 8, 0, NULL), KVC_ERR_MISUSE);
  bad[5] = v[1];
  KVT_STATUS(kvc_radix_cache_insert(rc, NULL, 0, u, bad, 8, 0, NULL), KVC_ERR_MISUSE);
  bad[5] = 65;
  KVT_STATUS(kvc_radix_cache_insert(rc, NULL, 0, u, bad, 8, 0, NULL), KVC_ERR_INVALID_ARGUMENT);
  for (int i = 0; i < 8; i++) assert_int_equal(a->state[v[i]], KVC__PG_HELD);
  assert_int_equal(cached_of(rc), 8);
  KVT_OK(kvc_radix_cache_check(rc));
  KVT_OK(kvc_radix_cache_insert(rc, NULL, 0, u, v, 8, 0, NULL));
  /* Evict one leaf (LRU: t's) with no flow: straight into the allocator. */
  int64_t n;
  KVT_OK(kvc_radix_cache_evict(rc, NULL, 1, &n));
  assert_int_equal(n, 8);
  for (int i = 0; i < 8; i++) assert_int_equal(a->state[s[i]], KVC__PG_FREE);
  assert_int_equal(kvc_allocator_available_size(a), avail);    /* 8 handed out to u since, 8 back */
  KVT_STATUS(kvc_allocator_free(a, &s[3], 1), KVC_ERR_MISUSE); /* now a double free */
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "not held"));
  KVT_OK(kvc_radix_cache_check(rc));
  /* Reset gives the marks up: the slots are plain handed-out slots again. */
  KVT_OK(kvc_radix_cache_reset(rc));
  assert_int_equal(a->state[v[0]], KVC__PG_HELD);
  KVT_OK(kvc_allocator_free(a, v, 8));
  KVT_OK(kvc_allocator_clear(a));
  /* Destroy too. */
  KVT_OK(kvc_allocator_alloc(a, 8, v));
  KVT_OK(kvc_radix_cache_insert(rc, NULL, 0, u, v, 8, 0, NULL));
  kvc_radix_cache_destroy(rc);
  assert_null(a->cache_owner);
  KVT_OK(kvc_allocator_free(a, v, 8));
  KVT_OK(kvc_allocator_check(a));
  kvc_allocator_destroy(a);
}

/* A slot handed out since a backup and cached since: restore would make it free under the
 * cache. */
static void test_bound_restore_refused(void **state) {
  (void)state;
  kvc_allocator *a = kvt_allocator(KVC_ALLOCATOR_TOKEN, 64, 1, 0);
  kvc_radix_cache *rc = make_cache(1, 64);
  KVT_OK(kvc_radix_cache_bind_allocator(rc, a));
  kvc_allocator_state b;
  KVT_OK(kvc_allocator_backup_state(a, &b));
  int64_t s[4];
  int32_t t[4];
  keys(t, 4, 3);
  KVT_OK(kvc_allocator_alloc(a, 4, s));
  KVT_OK(kvc_radix_cache_insert(rc, NULL, 0, t, s, 4, 0, NULL));
  KVT_STATUS(kvc_allocator_restore_state(a, &b), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "bound radix cache"));
  assert_int_equal(kvc_allocator_available_size(a), 60);
  KVT_OK(kvc_radix_cache_reset(rc));
  KVT_OK(kvc_allocator_restore_state(a, &b));
  assert_int_equal(kvc_allocator_available_size(a), 64);
  KVT_OK(kvc_allocator_check(a));
  kvc_radix_cache_destroy(rc);
  kvc_allocator_destroy(a);
}

/* White-box: the mark of one slot of the second victim is lost (as a stray write would
 * lose it). The eviction frees the first victim, refuses the second with MISUSE and leaves
 * it exactly as it was; once the mark is back it goes. */
static void test_bound_eviction_refuses_an_unmarked_victim(void **state) {
  (void)state;
  kvc_allocator *a = kvt_allocator(KVC_ALLOCATOR_TOKEN, 64, 1, 0);
  kvc_radix_cache *rc = make_cache(1, 64);
  KVT_OK(kvc_radix_cache_bind_allocator(rc, a));
  int64_t s[16];
  int32_t t[8], u[8];
  keys(t, 8, 4);
  keys(u, 8, 5);
  KVT_OK(kvc_allocator_alloc(a, 16, s));
  KVT_OK(kvc_radix_cache_insert(rc, NULL, 0, t, s, 8, 0, NULL));
  KVT_OK(kvc_radix_cache_insert(rc, NULL, 0, u, s + 8, 8, 0, NULL));
  a->state[s[13]] = KVC__PG_HELD;
  int64_t n = -1;
  KVT_STATUS(kvc_radix_cache_evict(rc, NULL, 16, &n), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "not held by both"));
  assert_int_equal(n, 8);
  assert_int_equal(cached_of(rc), 8);
  for (int i = 8; i < 16; i++) assert_int_equal(a->state[s[i]], i == 13 ? KVC__PG_HELD : KVC__PG_HELD | KVC__PG_CACHED);
  assert_int_equal(kvc_allocator_available_size(a), 48 + 8);
  a->state[s[13]] = KVC__PG_HELD | KVC__PG_CACHED;
  KVT_OK(kvc_radix_cache_check(rc));
  /* Inside an open free group the victims are recorded, then released at its end. */
  KVT_OK(kvc_allocator_free_group_begin(a));
  KVT_OK(kvc_radix_cache_evict(rc, NULL, 8, &n));
  assert_int_equal(kvc_allocator_available_size(a), 56);
  assert_int_equal(a->state[s[8]], KVC__PG_HELD | KVC__PG_GFREE);
  KVT_OK(kvc_allocator_free_group_end(a));
  assert_int_equal(kvc_allocator_available_size(a), 64);
  KVT_OK(kvc_allocator_check(a));
  KVT_OK(kvc_radix_cache_check(rc));
  kvc_radix_cache_destroy(rc);
  kvc_allocator_destroy(a);
}

/* A trace through two flows, one cache bound and one not: conversations that extend their
 * previous turn, allocation under pressure evicting. After every request both hand out
 * the same slots and hold the same sizes; eviction through the other fixture's flow (over
 * another allocator) is refused. */
static void run_req(fixture *f, kvc_radix_cache *rc, ereq *e, int64_t n) {
  e->rr.num_tokens = n;
  e->rr.prompt_len = n;
  e->st.seq_len = n;
  KVT_OK(kvc_radix_cache_match_req(rc, &e->st, &e->rr));
  kvc_req_state *one[] = {&e->st};
  KVT_OK(kvc_flow_alloc_for_extend(f->flow, one, 1, f->out, NULL));
  KVT_OK(kvc_flow_release(f->flow, one, 1, 1, NULL));
}

static void test_bound_flow_matches_unbound(void **state) {
  (void)state;
  const int64_t cap = 1024;
  kvc_radix_cache *rb = make_cache(1, cap), *ru = make_cache(1, cap);
  kvc_prefix_cache pb = kvc_radix_cache_as_prefix_cache(rb), pu = kvc_radix_cache_as_prefix_cache(ru);
  fixture fb, fu;
  fixture_make(&fb, 4, 512, cap, 1, &pb);
  fixture_make(&fu, 4, 512, cap, 1, &pu);
  KVT_OK(kvc_radix_cache_bind_allocator(rb, fb.alloc));
  static int32_t conv[6][512];
  int64_t len[6] = {0};
  uint64_t rng = 12345;
  for (int c = 0; c < 6; c++)
    for (int i = 0; i < 512; i++) conv[c][i] = c * 100000 + i;
  ereq eb, eu;
  int64_t sb[512], su[512];
  for (int r = 0; r < 400; r++) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    const int c = (int)((rng >> 33) % 6);
    len[c] += 20 + (int64_t)((rng >> 40) % 90);
    if (len[c] > 500) len[c] = 20 + (int64_t)((rng >> 20) % 60), conv[c][0] += 7; /* a new conversation */
    memset(&eb, 0, sizeof eb);
    memset(&eu, 0, sizeof eu);
    memcpy(eb.toks, conv[c], (size_t)len[c] * sizeof(int32_t));
    memcpy(eu.toks, conv[c], (size_t)len[c] * sizeof(int32_t));
    eb.rr.tokens = eb.toks;
    eu.rr.tokens = eu.toks;
    run_req(&fb, rb, &eb, len[c]);
    run_req(&fu, ru, &eu, len[c]);
    assert_int_equal(eb.st.prefix_len, eu.st.prefix_len);
    KVT_OK(kvc_flow_row_slots(fb.flow, eb.st.req_row, 0, len[c], sb));
    KVT_OK(kvc_flow_row_slots(fu.flow, eu.st.req_row, 0, len[c], su));
    assert_memory_equal(sb, su, (size_t)len[c] * sizeof(int64_t));
    assert_int_equal(cached_of(rb), cached_of(ru));
    assert_int_equal(kvc_allocator_available_size(fb.alloc), kvc_allocator_available_size(fu.alloc));
    KVT_OK(kvc_radix_cache_check(rb));
    KVT_OK(kvc_flow_check(fb.flow, NULL, 0));
  }
  int64_t n;
  KVT_STATUS(kvc_radix_cache_evict(rb, fu.flow, 8, &n), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "not the one this cache is bound to"));
  KVT_OK(kvc_radix_cache_evict(rb, fb.flow, cached_of(rb), &n));
  KVT_OK(kvc_radix_cache_evict(ru, fu.flow, cached_of(ru), &n));
  int64_t ab[1024], au[1024];
  KVT_OK(kvc_allocator_alloc(fb.alloc, cap, ab)); /* the whole ring, in its order */
  KVT_OK(kvc_allocator_alloc(fu.alloc, cap, au));
  assert_memory_equal(ab, au, sizeof ab);
  KVT_OK(kvc_allocator_free(fb.alloc, ab, cap));
  KVT_OK(kvc_allocator_free(fu.alloc, au, cap));
  kvc_radix_cache_destroy(rb); /* before the allocator it is bound to */
  kvc_radix_cache_destroy(ru);
  fixture_free(&fb);
  fixture_free(&fu);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_bind_refusals),
    cmocka_unit_test(test_bound_marks_and_refusals),
    cmocka_unit_test(test_bound_restore_refused),
    cmocka_unit_test(test_bound_eviction_refuses_an_unmarked_victim),
    cmocka_unit_test(test_bound_flow_matches_unbound),
};
KVT_MAIN("radix_bound", tests)
