/*
 * test_slot_allocator.c — white-box tests of the internal slot-allocator interface
 * (src/alloc/slot_allocator.h): each operation, through the table, hands out exactly
 * what the public entry point does on a twin allocator fed the same calls, and the
 * observer is told of every free and announced allocation with the right side and owner.
 */
#include "harness.h"

#include "alloc/slot_allocator.h"

#define W 256 /* req pool row width */

typedef struct twin {
  kvc_req_to_token_pool *rp[2];
  kvc_allocator *al[2];
  kvc_swa_allocator *swa[2];
  kvc__slot_allocator sa; /* over twin 0; twin 1 is driven through the public API */
  int32_t row[2];
} twin;

static void twin_make(twin *t, bool swa, int32_t ps) {
  memset(t, 0, sizeof *t);
  for (int k = 0; k < 2; k++) {
    kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
    rc.size = 4;
    rc.max_context_len = W;
    KVT_OK(kvc_req_to_token_pool_create(kvt_ctx, &rc, &t->rp[k]));
    KVT_OK(kvc_req_to_token_pool_alloc(t->rp[k], 1, &t->row[k]));
    if (swa) {
      kvc_swa_allocator_config c = KVC_SWA_ALLOCATOR_CONFIG_INIT;
      c.size_full = 512;
      c.size_swa = 256;
      c.page_size = ps;
      KVT_OK(kvc_swa_allocator_create(kvt_ctx, &c, &t->swa[k]));
    } else {
      kvc_allocator_config c = KVC_ALLOCATOR_CONFIG_INIT;
      c.kind = ps == 1 ? KVC_ALLOCATOR_TOKEN : KVC_ALLOCATOR_PAGED;
      c.size = 512;
      c.page_size = ps;
      KVT_OK(kvc_allocator_create(kvt_ctx, &c, &t->al[k]));
    }
  }
  assert_int_equal(t->row[0], t->row[1]);
  t->sa = swa ? kvc__slot_allocator_swa(t->swa[0]) : kvc__slot_allocator_plain(t->al[0]);
}

static void twin_free(twin *t) {
  for (int k = 0; k < 2; k++) {
    kvc_swa_allocator_destroy(t->swa[k]);
    kvc_allocator_destroy(t->al[k]);
    kvc_req_to_token_pool_destroy(t->rp[k]);
  }
}

static int64_t avail(const twin *t, int k) {
  return t->swa[k] ? kvc_swa_allocator_available_size(t->swa[k]) : kvc_allocator_available_size(t->al[k]);
}

/* Extend the row from p to s tokens on both twins; the slots must agree. */
static void extend_both(twin *t, int64_t p, int64_t s, int64_t *slots) {
  int64_t other[W];
  const kvc__extend_args x = {.batch_size = 1,
                              .prefix_lens = &p,
                              .seq_lens = &s,
                              .req_pool = t->rp[0],
                              .req_rows = &t->row[0],
                              .out_host = slots};
  KVT_OK(kvc__slot_extend(&t->sa, &x));
  if (t->swa[1])
    KVT_OK(kvc_swa_allocator_alloc_extend(t->swa[1], 1, &p, &s, NULL, t->rp[1], &t->row[1], NULL, other, NULL, NULL));
  else KVT_OK(kvc_allocator_alloc_extend(t->al[1], 1, &p, &s, NULL, t->rp[1], &t->row[1], NULL, other, NULL, NULL));
  assert_memory_equal(slots, other, (size_t)(s - p) * sizeof *slots);
}

/* One decode step, on twin 0 as plan + commit (the decode channel's path). */
static void decode_both(twin *t, int64_t s, int64_t *slot) {
  int64_t other;
  uint32_t payload[4];
  const kvc__decode_args x = {1, &s, NULL, t->rp[0], &t->row[0], slot, NULL, NULL};
  kvc__decode_plan plan = {payload, 0};
  KVT_OK(t->sa.ops->decode_plan(&t->sa, __func__, &x, &plan));
  KVT_OK(t->sa.ops->decode_commit(&t->sa, __func__, &x, &plan));
  if (t->swa[1])
    KVT_OK(kvc_swa_allocator_alloc_decode(t->swa[1], 1, &s, NULL, t->rp[1], &t->row[1], &other, NULL, NULL));
  else KVT_OK(kvc_allocator_alloc_decode(t->al[1], 1, &s, NULL, t->rp[1], &t->row[1], &other, NULL, NULL));
  assert_int_equal(*slot, other);
  assert_int_equal(payload[2], (uint32_t)*slot);
}

static void run_twins(bool swa, int32_t ps) {
  twin t;
  twin_make(&t, swa, ps);
  int64_t slots[W];
  extend_both(&t, 0, 37, slots);
  for (int64_t s = 38; s < 60; s++) decode_both(&t, s, &slots[s - 1]);
  assert_int_equal(kvc__slot_available(&t.sa), avail(&t, 1));
  /* Capacity and eviction questions agree with the availability. */
  const int64_t pages = kvc__slot_available(&t.sa) / ps;
  assert_true(kvc__slot_fits(&t.sa, pages));
  assert_false(kvc__slot_fits(&t.sa, pages + 1));
  int64_t full, sw;
  assert_false(t.sa.ops->evict_need(&t.sa, 1, &full, &sw));
  assert_true(t.sa.ops->evict_need(&t.sa, kvc__slot_available(&t.sa) + 1, &full, &sw));
  char text[96];
  t.sa.ops->describe(&t.sa, text, sizeof text);
  assert_true(swa ? strstr(text, "swa") != NULL : text[0] == '\0');
  /* A page-aligned tail through free_segment, the rest through free, in one group. */
  kvc_status told = KVC_ERR_INTERNAL;
  KVT_OK(kvc__slot_group_begin(&t.sa));
  const int64_t cut = 32;
  const kvc__free_args seg = {slots + cut, (size_t)(59 - cut), cut, NULL, __func__, &told};
  KVT_OK(t.sa.ops->free_segment(&t.sa, &seg));
  assert_int_equal(told, KVC_OK); /* no observer: nothing to say */
  const kvc__free_args all = {slots, (size_t)cut, 0, NULL, __func__, &told};
  KVT_OK(kvc__slot_free(&t.sa, &all));
  KVT_OK(kvc__slot_group_end(&t.sa));
  if (swa) {
    KVT_OK(kvc_swa_allocator_free_group_begin(t.swa[1]));
    KVT_OK(kvc_swa_allocator_free_segment(t.swa[1], slots + cut, (size_t)(59 - cut), cut, NULL));
    KVT_OK(kvc_swa_allocator_free(t.swa[1], slots, (size_t)cut, NULL));
    KVT_OK(kvc_swa_allocator_free_group_end(t.swa[1]));
    assert_null(t.sa.ops->backup);
  } else {
    KVT_OK(kvc_allocator_free_group_begin(t.al[1]));
    KVT_OK(kvc_allocator_free_segment(t.al[1], slots + cut, (size_t)(59 - cut), cut));
    KVT_OK(kvc_allocator_free(t.al[1], slots, (size_t)cut));
    KVT_OK(kvc_allocator_free_group_end(t.al[1]));
  }
  assert_int_equal(kvc__slot_available(&t.sa), avail(&t, 1));
  KVT_OK(t.sa.ops->check(&t.sa));
  if (!swa) {
    /* Backup, allocate (twin 0 only), restore: as before the allocation. */
    kvc_allocator_state st;
    const int64_t before = kvc__slot_available(&t.sa), p = 0, s = 20;
    KVT_OK(t.sa.ops->backup(&t.sa, &st));
    const kvc__extend_args x = {
        .batch_size = 1, .prefix_lens = &p, .seq_lens = &s, .req_pool = t.rp[0], .req_rows = &t.row[0]};
    KVT_OK(kvc__slot_extend(&t.sa, &x));
    assert_int_equal(kvc__slot_available(&t.sa), before - (20 + ps - 1) / ps * ps);
    KVT_OK(t.sa.ops->restore(&t.sa, &st));
    assert_int_equal(kvc__slot_available(&t.sa), before);
  }
  twin_free(&t);
}

static void test_ops_match_the_public_calls_plain(void **state) {
  (void)state;
  run_twins(false, 1);
  run_twins(false, 4);
}

static void test_ops_match_the_public_calls_swa(void **state) {
  (void)state;
  run_twins(true, 1);
  run_twins(true, 4);
}

/* --- Observer ----------------------------------------------------------------------- */

typedef struct recorder {
  int freed[3], allocated[3]; /* by side */
  int64_t freed_n[3], allocated_n[3];
  const kvc_allocator *owner[3];
  int64_t host[W];
} recorder;

static kvc_status rec_reserve(void *self, const char *fn, size_t n, int64_t **host) {
  (void)fn;
  recorder *r = self;
  assert_true(n <= W);
  *host = r->host;
  return KVC_OK;
}
static kvc_status rec_allocated(void *self, const kvc__slot_event *ev) {
  recorder *r = self;
  r->allocated[ev->side]++;
  r->allocated_n[ev->side] += (int64_t)ev->n;
  return KVC_OK;
}
static kvc_status rec_freed(void *self, const kvc__slot_event *ev) {
  recorder *r = self;
  r->freed[ev->side]++;
  r->freed_n[ev->side] += (int64_t)ev->n;
  r->owner[ev->side] = ev->owner;
  return ev->side == KVC__SIDE_SWA ? KVC_ERR_INTERNAL : KVC_OK; /* a verdict to pass on */
}

static void test_observer_hears_frees_and_allocations(void **state) {
  (void)state;
  for (int swa = 0; swa < 2; swa++) {
    twin t;
    twin_make(&t, swa, 1);
    recorder r;
    memset(&r, 0, sizeof r);
    const kvc__slot_observer obs = {&r, KVC__SIDE_FULL | KVC__SIDE_SWA, rec_reserve, rec_allocated, rec_freed};
    t.sa.obs = &obs;
    int64_t *host;
    KVT_OK(kvc__slot_observe_reserve(&t.sa, __func__, 10, &host));
    assert_ptr_equal(host, r.host);
    const int64_t p = 0, s = 10;
    const kvc__extend_args x = {.batch_size = 1,
                                .prefix_lens = &p,
                                .seq_lens = &s,
                                .req_pool = t.rp[0],
                                .req_rows = &t.row[0],
                                .out_host = host};
    KVT_OK(kvc__slot_extend(&t.sa, &x));
    KVT_OK(kvc__slot_announce(&t.sa, host, 10, NULL));
    assert_int_equal(r.allocated[KVC__SIDE_FULL], 1);
    assert_int_equal(r.allocated_n[KVC__SIDE_FULL], 10);
    assert_int_equal(r.allocated_n[KVC__SIDE_SWA], swa ? 10 : 0);
    int64_t slots[10];
    memcpy(slots, host, sizeof slots);
    kvc_status told = KVC_OK;
    if (swa) { /* window eviction: the SWA side only */
      const kvc__free_args w = {slots, 4, 0, NULL, __func__, &told};
      KVT_OK(t.sa.ops->free_window(&t.sa, &w));
      assert_int_equal(told, KVC_ERR_INTERNAL);
      assert_int_equal(r.freed[KVC__SIDE_FULL], 0);
      assert_int_equal(r.freed_n[KVC__SIDE_SWA], 4);
      assert_ptr_equal(r.owner[KVC__SIDE_SWA], kvc_swa_allocator_swa(t.swa[0]));
    } else {
      assert_null(t.sa.ops->free_window);
    }
    const kvc__free_args all = {slots, 10, 0, NULL, __func__, &told};
    told = KVC_OK;
    KVT_OK(kvc__slot_free(&t.sa, &all)); /* the free is done whatever the observer says */
    assert_int_equal(r.freed_n[KVC__SIDE_FULL], 10);
    assert_int_equal(r.freed_n[KVC__SIDE_SWA], swa ? 4 + 6 : 0); /* the evicted 4 had no peer left */
    assert_int_equal(told, swa ? KVC_ERR_INTERNAL : KVC_OK);
    KVT_OK(t.sa.ops->check(&t.sa));
    twin_free(&t);
  }
}

/* The two-word decode form's boundary: tables below the limit get their entry count,
 * the rest (and nonsense sizes, and products that overflow) the three-word form. */
static void test_decode_table_len_boundary(void **state) {
  (void)state;
  const int64_t lim = KVC__DECODE_TWO_WORD_LIMIT;
  assert_int_equal(lim, (int64_t)INT32_MAX + 1);
  assert_int_equal(kvc__decode_table_len(1, INT32_MAX, lim), INT32_MAX);               /* 2^31 - 1 */
  assert_int_equal(kvc__decode_table_len((int64_t)1 << 16, (int64_t)1 << 15, lim), 0); /* 2^31 */
  assert_int_equal(kvc__decode_table_len(((int64_t)1 << 16) + 1, ((int64_t)1 << 15) - 1, lim),
                   (((int64_t)1 << 16) + 1) * (((int64_t)1 << 15) - 1));
  assert_int_equal(kvc__decode_table_len(INT64_MAX, 2, lim), 0); /* the product overflows */
  assert_int_equal(kvc__decode_table_len(0, 16, lim), 0);
  assert_int_equal(kvc__decode_table_len(-4, 16, lim), 0);
  assert_int_equal(kvc__decode_table_len(4, 16, 65), 64); /* a lower limit moves the boundary */
  assert_int_equal(kvc__decode_table_len(4, 16, 64), 0);
  assert_int_equal(kvc__decode_table_len(4, 16, INT64_MAX), 64); /* never above 2^31 */
  assert_int_equal(kvc__decode_table_len(1, (int64_t)1 << 31, INT64_MAX), 0);
  assert_int_equal(kvc__req_pool_table_len(NULL), 0);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_ops_match_the_public_calls_plain),
    cmocka_unit_test(test_ops_match_the_public_calls_swa),
    cmocka_unit_test(test_observer_hears_frees_and_allocations),
    cmocka_unit_test(test_decode_table_len_boundary),
};
KVT_MAIN("slot_allocator", tests)
