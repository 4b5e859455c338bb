/* test_allocator.c — SGLang's token and paged allocators: exact slot assignment (spec
 * sections 5, 6, 14), groups, need_sort, backup/restore, and transactional errors. */
#include "alloc_test_util.h"

static void expect_slots(const int64_t *got, const int64_t *want, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (got[i] != want[i]) fail_msg("slot %zu: got %lld, want %lld", i, (long long)got[i], (long long)want[i]);
}

/* Frees the page holding `slot` (one slot is enough: the whole page goes). */
static void free_page_of(kvc_allocator *a, int64_t slot) { KVT_OK(kvc_allocator_free(a, &slot, 1)); }

/* Spec 6.8's allocator: 12 pages of 4, every page held, then pages 5, 9, 3, 7 freed in
 * that order, so the free list is F = [7, 3, 9, 5]. */
static kvc_allocator *spec_example_allocator(void) {
  kvc_allocator *a = kvt_allocator(KVC_ALLOCATOR_PAGED, 48, 4, 0);
  int64_t all[48];
  KVT_OK(kvc_allocator_alloc(a, 48, all)); /* hold every page */
  free_page_of(a, 20);                     /* [5] */
  free_page_of(a, 36);                     /* [9, 5] */
  free_page_of(a, 12);                     /* [3, 9, 5] */
  free_page_of(a, 28);                     /* [7, 3, 9, 5] */
  return a;
}

static void expect_next_alloc(kvc_allocator *a, const int64_t *want, int64_t n) {
  int64_t got[256];
  assert_true(n <= 256);
  KVT_OK(kvc_allocator_alloc(a, n, got));
  expect_slots(got, want, (size_t)n);
}

static void test_create_rejects_bad_config(void **state) {
  (void)state;
  kvc_allocator_config c = KVC_ALLOCATOR_CONFIG_INIT;
  kvc_allocator *a = NULL;
  c.size = 0;
  KVT_STATUS(kvc_allocator_create(kvt_ctx, &c, &a), KVC_ERR_INVALID_ARGUMENT);
  c.size = 16;
  c.page_size = 4; /* TOKEN must be ps 1 */
  KVT_STATUS(kvc_allocator_create(kvt_ctx, &c, &a), KVC_ERR_INVALID_ARGUMENT);
  c.kind = KVC_ALLOCATOR_PAGED;
  c.size = (int64_t)1 << 31;
  KVT_STATUS(kvc_allocator_create(kvt_ctx, &c, &a), KVC_ERR_INVALID_ARGUMENT);
  c.size = 3; /* less than a page */
  KVT_STATUS(kvc_allocator_create(kvt_ctx, &c, &a), KVC_ERR_INVALID_ARGUMENT);
  c.size = 18; /* floor: 4 pages */
  KVT_OK(kvc_allocator_create(kvt_ctx, &c, &a));
  assert_int_equal(kvc_allocator_size(a), 16);
  assert_int_equal(kvc_allocator_available_size(a), 16);
  assert_int_equal(kvc_allocator_page_size(a), 4);
  kvc_allocator_destroy(a);
  kvc_allocator_destroy(NULL);
}

static void test_token_allocator_reuses_fifo(void **state) {
  (void)state;
  kvc_allocator *a = kvt_allocator(KVC_ALLOCATOR_TOKEN, 8, 1, 0);
  expect_next_alloc(a, (int64_t[]){1, 2, 3}, 3);
  KVT_OK(kvc_allocator_free(a, (int64_t[]){2, 1}, 2));
  expect_next_alloc(a, (int64_t[]){4, 5, 6, 7, 8, 2}, 6);
  expect_next_alloc(a, (int64_t[]){1}, 1);
  int64_t x = -7;
  KVT_STATUS(kvc_allocator_alloc(a, 1, &x), KVC_ERR_OUT_OF_SLOTS);
  assert_int_equal(x, -7);
  KVT_OK(kvc_allocator_alloc(a, 0, NULL));
  KVT_OK(kvc_allocator_check(a));
  kvc_allocator_destroy(a);
}

/* A refused TOKEN free must not touch the ring past its tail while a live backup still
 * needs the entries popped since: once the ring has wrapped, those slots are the ones a
 * restore hands out again (fuzz_allocator found the restore then listing held slots). */
static void test_refused_free_keeps_the_backup_image(void **state) {
  (void)state;
  kvc_allocator *a = kvt_allocator(KVC_ALLOCATOR_TOKEN, 8, 1, 0);
  int64_t out[8];
  KVT_OK(kvc_allocator_alloc(a, 8, out));
  KVT_OK(kvc_allocator_free(a, (int64_t[]){1, 2, 3, 4, 5, 6}, 6));
  KVT_OK(kvc_allocator_alloc(a, 4, out));                    /* 1 2 3 4; free: 5 6 */
  KVT_OK(kvc_allocator_free(a, (int64_t[]){1, 2, 3, 4}, 4)); /* wraps: 5 6 1 2 3 4 */
  kvc_allocator_state bk;
  KVT_OK(kvc_allocator_backup_state(a, &bk));
  expect_next_alloc(a, (int64_t[]){5, 6, 1}, 3);
  /* Five held slots validate, then slot 0 is refused. */
  KVT_STATUS(kvc_allocator_free(a, (int64_t[]){5, 6, 1, 7, 8, 0}, 6), KVC_ERR_MISUSE);
  KVT_OK(kvc_allocator_restore_state(a, &bk));
  KVT_OK(kvc_allocator_check(a));
  expect_next_alloc(a, (int64_t[]){5, 6, 1, 2, 3, 4}, 6);
  kvc_allocator_destroy(a);
}

/* A TOKEN free inside a group takes the four-a-step recording pass: a repeat inside a
 * step, a slot already freed in this group, one out of range or not held, at any
 * position, fails with the checked loop's status, index and message, and records nothing
 * (group_pending, the states); the group then releases exactly what was recorded, in call
 * order. */
static void test_token_group_free_four_a_step(void **state) {
  (void)state;
  kvc_allocator *a = kvt_allocator(KVC_ALLOCATOR_TOKEN, 64, 1, 0);
  int64_t out[64];
  kvc_allocator_stats st;
  KVT_OK(kvc_allocator_alloc(a, 64, out));
  KVT_OK(kvc_allocator_free_group_begin(a));
  KVT_OK(kvc_allocator_free(a, (int64_t[]){10, 11, 12, 13, 14, 15, 16, 17}, 8));
  KVT_STATUS(kvc_allocator_free(a, (int64_t[]){20, 21, 22, 23, 24, 12, 26, 27}, 8), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "slots[5]"));
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "already freed in this group"));
  KVT_STATUS(kvc_allocator_free(a, (int64_t[]){20, 21, 20, 23, 24, 25, 26, 27}, 8), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "slots[2]"));
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "listed twice"));
  KVT_STATUS(kvc_allocator_free(a, (int64_t[]){20, 21, 22, 23, 24, 25, 65, 27}, 8), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "slots[6]"));
  KVT_STATUS(kvc_allocator_free(a, (int64_t[]){20, 21, 22, 23, 24, 25, 26, 0, 28}, 9), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "slots[7]"));
  KVT_OK(kvc_allocator_get_stats(a, &st));
  assert_int_equal(st.group_pending, 8); /* the refused frees recorded nothing */
  KVT_OK(kvc_allocator_check(a));
  /* The refused slots are still held: a descending run of nine (two steps and one). */
  KVT_OK(kvc_allocator_free(a, (int64_t[]){28, 27, 26, 25, 24, 23, 22, 21, 20}, 9));
  assert_int_equal(kvc_allocator_available_size(a), 0);
  KVT_OK(kvc_allocator_free_group_end(a));
  KVT_OK(kvc_allocator_check(a));
  expect_next_alloc(a, (int64_t[]){10, 11, 12, 13, 14, 15, 16, 17, 28, 27, 26, 25, 24, 23, 22, 21, 20}, 17);
  kvc_allocator_destroy(a);
  /* need_sort: the group's end sends the recorded slots to the side list (their GFREE bit
   * cleared by that write: the audit checks every state), and the next alloc merges them
   * sorted after what was free before. */
  a = kvt_allocator(KVC_ALLOCATOR_TOKEN, 16, 1, KVC_ALLOCATOR_NEED_SORT);
  KVT_OK(kvc_allocator_alloc(a, 14, out));
  KVT_OK(kvc_allocator_free_group_begin(a));
  KVT_OK(kvc_allocator_free(a, (int64_t[]){9, 3, 7, 1, 12}, 5));
  KVT_STATUS(kvc_allocator_free(a, (int64_t[]){2, 4, 6, 7}, 4), KVC_ERR_MISUSE); /* 7: freed in this group */
  KVT_OK(kvc_allocator_free_group_end(a));
  KVT_OK(kvc_allocator_check(a));
  assert_int_equal(kvc_allocator_available_size(a), 2 + 5);
  expect_next_alloc(a, (int64_t[]){1, 3, 7, 9, 12, 15, 16}, 7);
  KVT_OK(kvc_allocator_check(a));
  kvc_allocator_destroy(a);
}

/* The TOKEN free checks four slots a step: a bad slot anywhere in a step of four (a
 * repeat inside it, one out of range, one not held) is refused with the per-slot loop's
 * status and index and nothing changed, and a free that reaches the ring's wrap point
 * keeps the call order across it. */
static void test_token_free_four_a_step(void **state) {
  (void)state;
  kvc_allocator *a = kvt_allocator(KVC_ALLOCATOR_TOKEN, 16, 1, 0);
  int64_t out[16];
  KVT_OK(kvc_allocator_alloc(a, 16, out));
  KVT_STATUS(kvc_allocator_free(a, (int64_t[]){1, 2, 2, 4, 5, 6, 7, 8}, 8), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "slots[2]"));
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "listed twice"));
  KVT_STATUS(kvc_allocator_free(a, (int64_t[]){1, 2, 3, 4, 5, 6, 5, 8}, 8), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "slots[6]"));
  KVT_STATUS(kvc_allocator_free(a, (int64_t[]){1, 2, 3, 4, 5, 17, 7, 8}, 8), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "slots[5]"));
  KVT_STATUS(kvc_allocator_free(a, (int64_t[]){1, 2, 3, 4, 5, 6, 7, 0}, 8), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "slots[7]"));
  assert_int_equal(kvc_allocator_available_size(a), 0);
  KVT_OK(kvc_allocator_check(a));
  /* Ten freed, ten taken back: the ring's tail sits 6 entries before its wrap. */
  KVT_OK(kvc_allocator_free(a, (int64_t[]){10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, 10));
  expect_next_alloc(a, (int64_t[]){10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, 10);
  KVT_STATUS(kvc_allocator_free(a, (int64_t[]){16, 15, 14, 13, 12, 11, 3, 3, 1}, 9), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "slots[7]"));
  KVT_OK(kvc_allocator_check(a));
  KVT_OK(kvc_allocator_free(a, (int64_t[]){16, 15, 14, 13, 12, 11, 3, 2, 1, 9, 8, 7}, 12));
  KVT_OK(kvc_allocator_check(a));
  expect_next_alloc(a, (int64_t[]){16, 15, 14, 13, 12, 11, 3, 2, 1, 9, 8, 7}, 12);
  kvc_allocator_destroy(a);
}

/* The TOKEN free's range test of four slots is one OR against 2^k - 1 >= num_pages, the
 * bytes past num_pages being RESERVED padding: every slot of (num_pages, 2^k - 1] (the
 * padding, its last byte included), 2^k and up, slot 0 and negative ones must still be
 * refused in any position of a step, with the index and message of the per-slot check
 * ("out of range" / "padding page 0"), and nothing changed. Sizes with padding (100: up
 * to 127), without (127) and a power of two (128: padding up to 255). */
static void test_token_free_padding_slots_refused(void **state) {
  (void)state;
  const int64_t sizes[3] = {100, 127, 128};
  for (int z = 0; z < 3; z++) {
    const int64_t np = sizes[z];
    kvc_allocator *a = kvt_allocator(KVC_ALLOCATOR_TOKEN, np, 1, 0);
    int64_t *all = malloc((size_t)np * sizeof *all);
    assert_non_null(all);
    KVT_OK(kvc_allocator_alloc(a, np, all));
    int64_t mask = 1;
    while (mask < np) mask = 2 * mask + 1;
    const int64_t bad[] = {np + 1, mask, mask + 1, 2 * mask + 1, 0, -1, INT64_MIN, INT64_MAX, (int64_t)1 << 32};
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
      if (bad[b] >= 1 && bad[b] <= np) continue; /* mask == np at size 127: no padding */
      for (int pos = 0; pos < 8; pos++) {
        int64_t v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        v[pos] = bad[b];
        KVT_STATUS(kvc_allocator_free(a, v, 8), KVC_ERR_MISUSE);
        char want[32];
        snprintf(want, sizeof want, "slots[%d]", pos);
        assert_non_null(strstr(kvc_last_error(kvt_ctx), want));
        assert_non_null(strstr(kvc_last_error(kvt_ctx), bad[b] == 0 ? "padding page 0" : "out of range"));
        assert_int_equal(kvc_allocator_available_size(a), 0);
      }
    }
    KVT_OK(kvc_allocator_check(a));
    /* The highest slot is still freed by the fast path, and order is kept. */
    KVT_OK(kvc_allocator_free(a, (int64_t[]){np, 1, np - 1, 2, 3, 4, 5, 6}, 8));
    expect_next_alloc(a, (int64_t[]){np, 1, np - 1, 2, 3, 4, 5, 6}, 8);
    free(all);
    kvc_allocator_destroy(a);
  }
}

/* Model test of the TOKEN free's order and refusals: random frees of held slots in
 * random order, some with one bad slot at a random position (a repeat, a free slot, slot
 * 0, a padding slot, a negative one); a good free appends in call order, a refused one
 * changes nothing (the put-back of a failing step of four), which every later alloc
 * checks against a FIFO model of the ring. */
static void test_token_free_order_model(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  const int64_t sizes[4] = {5, 64, 100, 1000};
  for (int z = 0; z < 4; z++) {
    const int64_t np = sizes[z];
    kvc_allocator *a = kvt_allocator(KVC_ALLOCATOR_TOKEN, np, 1, 0);
    int64_t *fifo = malloc((size_t)(4 * np) * sizeof *fifo), *held = malloc((size_t)np * sizeof *held);
    int64_t *v = malloc((size_t)(np + 1) * sizeof *v), *got = malloc((size_t)np * sizeof *got);
    assert_true(fifo && held && v && got);
    int64_t head = 0, tail = 0, nheld = 0; /* model ring: fifo[head, tail) */
    for (int64_t s = 1; s <= np; s++) fifo[tail++] = s;
    for (int it = 0; it < 400; it++) {
      if (tail - head > 0 && (nheld == 0 || kvt_range(&r, 0, 1))) { /* alloc */
        const int64_t k = kvt_range(&r, 1, tail - head);
        KVT_OK(kvc_allocator_alloc(a, k, got));
        for (int64_t j = 0; j < k; j++) {
          assert_int_equal(got[j], fifo[head + j]);
          held[nheld++] = got[j];
        }
        head += k;
        if (head > np) { /* keep the model's window small */
          memmove(fifo, fifo + head, (size_t)(tail - head) * sizeof *fifo);
          tail -= head, head = 0;
        }
        continue;
      }
      for (int64_t j = nheld - 1; j > 0; j--) { /* shuffle the held slots */
        const int64_t q = kvt_range(&r, 0, j), t = held[j];
        held[j] = held[q], held[q] = t;
      }
      const int64_t k = kvt_range(&r, 1, nheld);
      memcpy(v, held, (size_t)k * sizeof *v);
      const int kind = (int)kvt_range(&r, 0, 7); /* 0-4: one bad slot, else none */
      int64_t n = k;
      if (kind <= 4) {
        const int64_t pos = kvt_range(&r, 0, k);
        memmove(v + pos + 1, v + pos, (size_t)(k - pos) * sizeof *v);
        n = k + 1;
        int64_t badslot = 0;
        if (kind == 0) { /* a repeat of one of the k held slots (v[pos] is the gap) */
          const int64_t q = kvt_range(&r, 0, k - 1);
          badslot = v[q < pos ? q : q + 1];
        }
        if (kind == 1) badslot = tail > head ? fifo[head] : 0;  /* a free slot */
        if (kind == 3) badslot = np + kvt_range(&r, 1, np + 1); /* padding or past */
        if (kind == 4) badslot = -kvt_range(&r, 1, 3);
        v[pos] = badslot;
        KVT_STATUS(kvc_allocator_free(a, v, (size_t)n), KVC_ERR_MISUSE);
        KVT_OK(kvc_allocator_check(a));
        assert_int_equal(kvc_allocator_available_size(a), tail - head);
        continue;
      }
      KVT_OK(kvc_allocator_free(a, v, (size_t)n));
      for (int64_t j = 0; j < k; j++) fifo[tail++] = v[j];
      memmove(held, held + k, (size_t)(nheld - k) * sizeof *held);
      nheld -= k;
      KVT_OK(kvc_allocator_check(a));
    }
    free(fifo), free(held), free(v), free(got);
    kvc_allocator_destroy(a);
  }
}

static void test_paged_free_prepends_sorted_unique(void **state) {
  (void)state;
  kvc_allocator *a = kvt_allocator(KVC_ALLOCATOR_PAGED, 40, 4, 0);
  int64_t s[20];
  KVT_OK(kvc_allocator_alloc(a, 20, s)); /* pages 1..5 */
  for (int i = 0; i < 20; i++) assert_int_equal(s[i], 4 + i);
  KVT_OK(kvc_allocator_free(a, (int64_t[]){17, 8, 18, 9}, 4)); /* pages {4, 2} -> [2, 4] */
  KVT_OK(kvc_allocator_free(a, (int64_t[]){5}, 1));            /* page 1 in front */
  assert_int_equal(kvc_allocator_available_size(a), 40 - 8);
  expect_next_alloc(a, (int64_t[]){4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27}, 16);
  KVT_STATUS(kvc_allocator_alloc(a, 6, s), KVC_ERR_INVALID_ARGUMENT); /* SGLang floors */
  kvc_allocator_destroy(a);
}

/* Spec 6.8 worked example: F = [7, 3, 9, 5, ...], ps 4. */
static void test_extend_matches_spec_example(void **state) {
  (void)state;
  kvc_allocator *a = spec_example_allocator();
  kvc_req_to_token_pool *p = kvt_req_pool(4, 16);
  int32_t rows[2] = {0, 0};
  KVT_OK(kvc_req_to_token_pool_alloc(p, 2, rows));
  const int64_t prefix_a[6] = {4, 5, 6, 7, 8, 9};
  const int64_t *prefix_slots[2] = {prefix_a, NULL};
  int64_t pre[2] = {6, 0}, seq[2] = {13, 3}, out[10];
  int64_t *dev = kvt_dev_alloc(sizeof out);
  KVT_OK(kvc_allocator_alloc_extend(a, 2, pre, seq, NULL, p, rows, prefix_slots, out, dev, NULL));
  const int64_t want[10] = {10, 11, 28, 29, 30, 31, 12, 36, 37, 38};
  expect_slots(out, want, 10);
  int64_t back[10];
  kvt_d2h(back, dev, sizeof back);
  expect_slots(back, want, 10);
  int32_t table[5 * 16];
  kvt_d2h(table, kvc_req_to_token_pool_table(p), sizeof table);
  const int32_t row_a[13] = {4, 5, 6, 7, 8, 9, 10, 11, 28, 29, 30, 31, 12}, row_b[3] = {36, 37, 38};
  const int32_t *m_a = kvc_req_to_token_pool_row(p, rows[0]), *m_b = kvc_req_to_token_pool_row(p, rows[1]);
  for (int i = 0; i < 13; i++) {
    assert_int_equal(table[rows[0] * 16 + i], row_a[i]);
    assert_int_equal(m_a[i], row_a[i]);
  }
  for (int i = 0; i < 3; i++) {
    assert_int_equal(table[rows[1] * 16 + i], row_b[i]);
    assert_int_equal(m_b[i], row_b[i]);
  }
  /* Free list is now [5]. */
  expect_next_alloc(a, (int64_t[]){20, 21, 22, 23}, 4);
  kvt_dev_free(dev);
  kvc_req_to_token_pool_destroy(p);
  kvc_allocator_destroy(a);
}

/* The same example with explicit last_locs and no req pool (out_host only). */
static void test_extend_without_pool(void **state) {
  (void)state;
  kvc_allocator *a = spec_example_allocator();
  int64_t pre[2] = {6, 0}, seq[2] = {13, 3}, last[2] = {9, -1}, out[10];
  KVT_STATUS(kvc_allocator_alloc_extend(a, 2, pre, seq, NULL, NULL, NULL, NULL, out, NULL, NULL),
             KVC_ERR_INVALID_ARGUMENT);
  KVT_OK(kvc_allocator_alloc_extend(a, 2, pre, seq, last, NULL, NULL, NULL, out, NULL, NULL));
  expect_slots(out, (int64_t[]){10, 11, 28, 29, 30, 31, 12, 36, 37, 38}, 10);
  kvc_allocator_destroy(a);
}

/* kvc_allocator_alloc_extend_ex: the spec example again, with the rows written as int64
 * by the same launch; rows_device without a req_pool is refused before anything moves. */
static void test_extend_ex_writes_rows(void **state) {
  (void)state;
  kvc_allocator *a = spec_example_allocator();
  kvc_req_to_token_pool *p = kvt_req_pool(4, 16);
  int32_t rows[2] = {0, 0}, spare = 0;
  KVT_OK(kvc_req_to_token_pool_alloc(p, 1, &spare)); /* rows[] are then not 0, 1 */
  KVT_OK(kvc_req_to_token_pool_alloc(p, 2, rows));
  const int64_t prefix_a[6] = {4, 5, 6, 7, 8, 9};
  const int64_t *prefix_slots[2] = {prefix_a, NULL};
  int64_t pre[2] = {6, 0}, seq[2] = {13, 3}, out[10];
  int64_t *dev = kvt_dev_alloc(sizeof out), *rows_dev = kvt_dev_alloc(2 * sizeof(int64_t));
  kvc_extend_args x;
  memset(&x, 0, sizeof x);
  x.batch_size = 2;
  x.prefix_lens = pre;
  x.seq_lens = seq;
  x.prefix_slots = prefix_slots;
  x.out_host = out;
  x.out_device = dev;
  x.rows_device = rows_dev;
  KVT_STATUS(kvc_allocator_alloc_extend_ex(a, NULL), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_allocator_alloc_extend_ex(a, &x), KVC_ERR_INVALID_ARGUMENT); /* no req_pool */
  x.req_pool = p;
  x.req_rows = rows;
  KVT_OK(kvc_allocator_alloc_extend_ex(a, &x));
  const int64_t want[10] = {10, 11, 28, 29, 30, 31, 12, 36, 37, 38};
  expect_slots(out, want, 10);
  int64_t back[10], rows_back[2];
  kvt_d2h(back, dev, sizeof back);
  expect_slots(back, want, 10);
  kvt_d2h(rows_back, rows_dev, sizeof rows_back);
  assert_int_equal(rows_back[0], rows[0]);
  assert_int_equal(rows_back[1], rows[1]);
  const int32_t *m_a = kvc_req_to_token_pool_row(p, rows[0]);
  for (int i = 0; i < 6; i++) assert_int_equal(m_a[i], prefix_a[i]);
  x.batch_size = 0; /* an empty batch writes nothing */
  rows_back[0] = -7;
  kvt_h2d(rows_dev, rows_back, sizeof rows_back);
  KVT_OK(kvc_allocator_alloc_extend_ex(a, &x));
  kvt_d2h(rows_back, rows_dev, sizeof rows_back);
  assert_int_equal(rows_back[0], -7);
  expect_next_alloc(a, (int64_t[]){20, 21, 22, 23}, 4);
  kvt_dev_free(rows_dev);
  kvt_dev_free(dev);
  kvc_req_to_token_pool_destroy(p);
  kvc_allocator_destroy(a);
}

/* Spec 6.9: ps 4, F = [7, 3, ...], new lengths [13, 7, 5], last_locs [x, 25, y]. */
static void test_decode_matches_spec_example(void **state) {
  (void)state;
  kvc_allocator *a = kvt_allocator(KVC_ALLOCATOR_PAGED, 40, 4, 0);
  int64_t all[40];
  KVT_OK(kvc_allocator_alloc(a, 40, all));
  free_page_of(a, 12);
  free_page_of(a, 28);
  int64_t seq[3] = {13, 7, 5}, last[3] = {0, 25, 0}, out[3];
  int64_t *dev = kvt_dev_alloc(sizeof out);
  KVT_OK(kvc_allocator_alloc_decode(a, 3, seq, last, NULL, NULL, out, dev, NULL));
  expect_slots(out, (int64_t[]){28, 26, 12}, 3);
  int64_t back[3];
  kvt_d2h(back, dev, sizeof back);
  expect_slots(back, (int64_t[]){28, 26, 12}, 3);
  assert_int_equal(kvc_allocator_available_size(a), 0);
  kvt_dev_free(dev);
  kvc_allocator_destroy(a);
}

/* Page boundaries: prefix ending mid-page, extend ending exactly on a boundary, extend
 * staying inside the prefix's page, zero-length extend, decode opening a new page. */
static void test_page_boundaries(void **state) {
  (void)state;
  kvc_allocator *a = kvt_allocator(KVC_ALLOCATOR_PAGED, 80, 4, 0);
  kvc_req_to_token_pool *p = kvt_req_pool(4, 32);
  int32_t rows[3] = {0, 0, 0};
  KVT_OK(kvc_req_to_token_pool_alloc(p, 3, rows));
  int64_t out[16];
  int64_t pre1[3] = {0, 0, 0}, seq1[3] = {8, 5, 0};
  KVT_OK(kvc_allocator_alloc_extend(a, 3, pre1, seq1, NULL, p, rows, NULL, out, NULL, NULL));
  expect_slots(out, (int64_t[]){4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, 13);
  int64_t pre2[3] = {8, 5, 0}, seq2[3] = {10, 8, 0};
  KVT_OK(kvc_allocator_alloc_extend(a, 3, pre2, seq2, NULL, p, rows, NULL, out, NULL, NULL));
  expect_slots(out, (int64_t[]){20, 21, 17, 18, 19}, 5);
  int64_t seq3[2] = {11, 9};
  KVT_OK(kvc_allocator_alloc_decode(a, 2, seq3, NULL, p, rows, out, NULL, NULL));
  expect_slots(out, (int64_t[]){22, 24}, 2);
  int64_t seq4[2] = {12, 10};
  int64_t *dev = kvt_dev_alloc(2 * sizeof(int64_t));
  KVT_OK(kvc_allocator_alloc_decode(a, 2, seq4, NULL, p, rows, out, dev, NULL));
  expect_slots(out, (int64_t[]){23, 25}, 2);
  const int32_t want0[12] = {4, 5, 6, 7, 8, 9, 10, 11, 20, 21, 22, 23};
  const int32_t want1[10] = {12, 13, 14, 15, 16, 17, 18, 19, 24, 25};
  int32_t table[5 * 32];
  kvt_d2h(table, kvc_req_to_token_pool_table(p), sizeof table);
  const int32_t *m0 = kvc_req_to_token_pool_row(p, rows[0]), *m1 = kvc_req_to_token_pool_row(p, rows[1]);
  for (int i = 0; i < 12; i++) {
    assert_int_equal(m0[i], want0[i]);
    assert_int_equal(table[rows[0] * 32 + i], want0[i]);
  }
  for (int i = 0; i < 10; i++) {
    assert_int_equal(m1[i], want1[i]);
    assert_int_equal(table[rows[1] * 32 + i], want1[i]);
  }
  /* The row's pages as a segment: pages 3, 4 (full), 6 (partial) -> prepended in order. */
  int64_t seg[10];
  for (int i = 0; i < 10; i++) seg[i] = m1[i];
  KVT_OK(kvc_allocator_free_segment(a, seg, 10, 0));
  expect_next_alloc(a, (int64_t[]){12, 13, 14, 15, 16, 17, 18, 19, 24, 25, 26, 27, 28, 29, 30, 31}, 16);
  kvt_dev_free(dev);
  kvc_req_to_token_pool_destroy(p);
  kvc_allocator_destroy(a);
}

/* TOKEN kind alloc_extend / alloc_decode = alloc(sum) in request order. */
static void test_token_kind_extend_and_decode(void **state) {
  (void)state;
  kvc_allocator *a = kvt_allocator(KVC_ALLOCATOR_TOKEN, 64, 1, 0);
  kvc_req_to_token_pool *p = kvt_req_pool(4, 16);
  int32_t rows[2] = {0, 0};
  KVT_OK(kvc_req_to_token_pool_alloc(p, 2, rows));
  int64_t tmp[3];
  KVT_OK(kvc_allocator_alloc(a, 3, tmp));
  KVT_OK(kvc_allocator_free(a, (int64_t[]){3, 1}, 2)); /* free: [4..64, 3, 1] */
  int64_t pre[2] = {2, 0}, seq[2] = {4, 3}, out[8];
  const int64_t prefix0[2] = {2, 5};
  const int64_t *ps[2] = {prefix0, NULL};
  KVT_OK(kvc_allocator_alloc_extend(a, 2, pre, seq, NULL, p, rows, ps, out, NULL, NULL));
  expect_slots(out, (int64_t[]){4, 5, 6, 7, 8}, 5);
  int64_t seq2[2] = {5, 4};
  KVT_OK(kvc_allocator_alloc_decode(a, 2, seq2, NULL, p, rows, out, NULL, NULL));
  expect_slots(out, (int64_t[]){9, 10}, 2);
  const int32_t *m0 = kvc_req_to_token_pool_row(p, rows[0]);
  const int32_t w0[5] = {2, 5, 4, 5, 9};
  for (int i = 0; i < 5; i++) assert_int_equal(m0[i], w0[i]);
  kvc_req_to_token_pool_destroy(p);
  kvc_allocator_destroy(a);
}

static void test_need_sort_merge_triggers(void **state) {
  (void)state;
  /* Early alloc_extend trigger: 2//2 + 1 + 1 = 3 > len(free) = 2 merges although one
   * page would do. */
  kvc_allocator *a = kvt_allocator(KVC_ALLOCATOR_PAGED, 20, 2, KVC_ALLOCATOR_NEED_SORT);
  int64_t s[16], out[4];
  KVT_OK(kvc_allocator_alloc(a, 16, s)); /* pages 1..8, free [9, 10] */
  free_page_of(a, 10);                   /* deferred [5] */
  free_page_of(a, 6);                    /* deferred [5, 3] */
  kvc_allocator_stats st;
  KVT_OK(kvc_allocator_get_stats(a, &st));
  assert_int_equal(st.deferred_pages, 2);
  assert_int_equal(st.free_pages, 2);
  assert_int_equal(kvc_allocator_available_size(a), 8);
  int64_t pre[1] = {0}, seq[1] = {2}, last[1] = {-1};
  KVT_OK(kvc_allocator_alloc_extend(a, 1, pre, seq, last, NULL, NULL, NULL, out, NULL, NULL));
  expect_slots(out, (int64_t[]){6, 7}, 2); /* page 3, not 9 */
  KVT_OK(kvc_allocator_get_stats(a, &st));
  assert_int_equal(st.merges, 1);
  assert_int_equal(st.deferred_pages, 0);
  /* free [5, 9, 10]; decode trigger bs > len(free) only. */
  free_page_of(a, 2); /* deferred [1] */
  int64_t dseq[2] = {1, 1}, dlast[2] = {-1, -1};
  KVT_OK(kvc_allocator_alloc_decode(a, 2, dseq, dlast, NULL, NULL, out, NULL, NULL));
  expect_slots(out, (int64_t[]){10, 18}, 2); /* no merge: 2 <= 3 */
  int64_t dseq3[3] = {1, 1, 1}, dlast3[3] = {-1, -1, -1};
  /* free [10->gone]: free list [20/2=10], deferred [1]: 3 > 1 merges -> [1, 10] -> 2 pages only */
  KVT_STATUS(kvc_allocator_alloc_decode(a, 3, dseq3, dlast3, NULL, NULL, out, NULL, NULL), KVC_ERR_OUT_OF_SLOTS);
  KVT_OK(kvc_allocator_get_stats(a, &st));
  assert_int_equal(st.merges, 2); /* the merge SGLang does before failing is kept */
  assert_int_equal(st.free_pages, 2);
  expect_next_alloc(a, (int64_t[]){2, 3, 20, 21}, 4);
  kvc_allocator_destroy(a);

  /* alloc(n) trigger for the TOKEN kind: n > len(free). */
  a = kvt_allocator(KVC_ALLOCATOR_TOKEN, 6, 1, KVC_ALLOCATOR_NEED_SORT);
  KVT_OK(kvc_allocator_alloc(a, 4, s));
  KVT_OK(kvc_allocator_free(a, (int64_t[]){4, 2}, 2)); /* deferred, free [5, 6] */
  expect_next_alloc(a, (int64_t[]){5}, 1);             /* no merge */
  expect_next_alloc(a, (int64_t[]){2, 4}, 2);          /* 2 > 1: merge -> [2, 4, 6] */
  KVT_OK(kvc_allocator_free(a, (int64_t[]){1}, 1));
  KVT_OK(kvc_allocator_merge_and_sort_free(a));
  expect_next_alloc(a, (int64_t[]){1, 6}, 2);
  kvc_allocator_destroy(a);

  /* A refused alloc(n) changes only what the header says (issue 13 item 8): its merge is
   * kept, as SGLang's, the free set and available size are the same, the next call gets
   * SGLang's (sorted) slots. */
  a = kvt_allocator(KVC_ALLOCATOR_PAGED, 12, 2, KVC_ALLOCATOR_NEED_SORT);
  KVT_OK(kvc_allocator_alloc(a, 10, s));                     /* pages 1..5, free [6] */
  KVT_OK(kvc_allocator_free(a, (int64_t[]){8, 9, 2, 3}, 4)); /* deferred [4, 1] */
  kvc_allocator_stats before, after;
  KVT_OK(kvc_allocator_get_stats(a, &before));
  assert_int_equal(before.deferred_pages, 2);
  int64_t big[8];
  for (int i = 0; i < 8; i++) big[i] = -7;
  KVT_STATUS(kvc_allocator_alloc(a, 8, big), KVC_ERR_OUT_OF_SLOTS); /* 4 pages > 3 */
  for (int i = 0; i < 8; i++) assert_int_equal(big[i], -7);
  KVT_OK(kvc_allocator_get_stats(a, &after));
  assert_int_equal(after.merges, before.merges + 1);
  assert_int_equal(after.deferred_pages, 0);
  assert_int_equal(after.free_pages, before.free_pages + before.deferred_pages);
  assert_int_equal(kvc_allocator_available_size(a), 6);
  expect_next_alloc(a, (int64_t[]){2, 3, 8, 9, 12, 13}, 6); /* pages 1, 4, 6 sorted */
  KVT_OK(kvc_allocator_check(a));
  kvc_allocator_destroy(a);
}

static void test_free_groups_paged(void **state) {
  (void)state;
  kvc_allocator *a = kvt_allocator(KVC_ALLOCATOR_PAGED, 20, 2, 0);
  int64_t s[20];
  KVT_OK(kvc_allocator_alloc(a, 20, s));
  KVT_STATUS(kvc_allocator_free_group_end(a), KVC_ERR_MISUSE);
  KVT_OK(kvc_allocator_free_group_begin(a));
  KVT_STATUS(kvc_allocator_free_group_begin(a), KVC_ERR_MISUSE);
  KVT_OK(kvc_allocator_free(a, (int64_t[]){2, 3, 8}, 3));                               /* pages 1, 4 */
  KVT_OK(kvc_allocator_free(a, (int64_t[]){9, 6}, 2));                                  /* pages 4 (dedup), 3 */
  KVT_OK(kvc_allocator_free_segment(a, (int64_t[]){14, 15, 10, 11}, 4, 0));             /* reps 7, 5 */
  KVT_STATUS(kvc_allocator_free_segment(a, (int64_t[]){10, 11}, 2, 0), KVC_ERR_MISUSE); /* page 5 again */
  KVT_STATUS(kvc_allocator_free_segment(a, (int64_t[]){2}, 1, 0), KVC_ERR_MISUSE);      /* page 1 by free */
  KVT_STATUS(kvc_allocator_free(a, (int64_t[]){16, 14}, 2), KVC_ERR_MISUSE);            /* page 7 by segment */
  kvc_allocator_stats st;
  KVT_OK(kvc_allocator_get_stats(a, &st));
  assert_int_equal(st.group_pending, 5);
  assert_int_equal(st.held_pages, 10);
  assert_int_equal(st.free_pages, 0);
  KVT_OK(kvc_allocator_free_group_end(a));
  /* free_pages = [7, 5] ++ [1, 3, 4] */
  expect_next_alloc(a, (int64_t[]){14, 15, 10, 11, 2, 3, 6, 7, 8, 9}, 10);
  KVT_OK(kvc_allocator_check(a));
  /* empty group */
  KVT_OK(kvc_allocator_free_group_begin(a));
  KVT_OK(kvc_allocator_free_group_end(a));
  kvc_allocator_destroy(a);
}

static void test_free_groups_token(void **state) {
  (void)state;
  kvc_allocator *a = kvt_allocator(KVC_ALLOCATOR_TOKEN, 8, 1, 0);
  int64_t s[8];
  KVT_OK(kvc_allocator_alloc(a, 8, s));
  KVT_OK(kvc_allocator_free_group_begin(a));
  KVT_OK(kvc_allocator_free(a, (int64_t[]){5, 2}, 2));
  KVT_OK(kvc_allocator_free_segment(a, (int64_t[]){7}, 1, 3));
  KVT_STATUS(kvc_allocator_free(a, (int64_t[]){2}, 1), KVC_ERR_MISUSE);
  KVT_STATUS(kvc_allocator_free(a, (int64_t[]){3, 3}, 2), KVC_ERR_MISUSE);
  KVT_OK(kvc_allocator_free(a, (int64_t[]){1}, 1));
  assert_int_equal(kvc_allocator_available_size(a), 0);
  KVT_OK(kvc_allocator_free_group_end(a));
  expect_next_alloc(a, (int64_t[]){5, 2, 7, 1}, 4);
  kvc_allocator_destroy(a);
}

static void test_free_segment_strides(void **state) {
  (void)state;
  kvc_allocator *a = kvt_allocator(KVC_ALLOCATOR_PAGED, 40, 4, 0);
  int64_t s[40];
  KVT_OK(kvc_allocator_alloc(a, 40, s));
  /* A row [page 9 | page 2 | 2 slots of page 6] */
  int64_t seg[10] = {36, 37, 38, 39, 8, 9, 10, 11, 24, 25};
  KVT_STATUS(kvc_allocator_free_segment(a, seg, 10, 2), KVC_ERR_INVALID_ARGUMENT);
  int64_t bad[5] = {36, 37, 8, 39, 8};
  KVT_STATUS(kvc_allocator_free_segment(a, bad, 5, 0), KVC_ERR_MISUSE);
  KVT_OK(kvc_allocator_free_segment(a, seg, 10, 4));
  expect_next_alloc(a, (int64_t[]){36, 37, 38, 39, 8, 9, 10, 11, 24, 25, 26, 27}, 12);
  kvc_allocator_destroy(a);
}

static void test_backup_restore(void **state) {
  (void)state;
  kvc_allocator *a = kvt_allocator(KVC_ALLOCATOR_PAGED, 32, 4, 0);
  int64_t s[32], t[32];
  KVT_OK(kvc_allocator_alloc(a, 8, s));
  kvc_allocator_state b;
  KVT_OK(kvc_allocator_backup_state(a, &b));
  KVT_OK(kvc_allocator_alloc(a, 12, s));
  KVT_OK(kvc_allocator_restore_state(a, &b));
  KVT_OK(kvc_allocator_alloc(a, 12, t));
  expect_slots(t, s, 12);
  KVT_OK(kvc_allocator_restore_state(a, &b)); /* still live */
  free_page_of(a, 4);
  KVT_STATUS(kvc_allocator_restore_state(a, &b), KVC_ERR_MISUSE);
  kvc_allocator_state b2;
  KVT_OK(kvc_allocator_backup_state(a, &b2));
  KVT_STATUS(kvc_allocator_restore_state(a, &b), KVC_ERR_MISUSE); /* replaced */
  KVT_OK(kvc_allocator_free_group_begin(a));
  KVT_STATUS(kvc_allocator_restore_state(a, &b2), KVC_ERR_MISUSE);
  KVT_OK(kvc_allocator_free_group_end(a));
  kvc_allocator_destroy(a);

  /* Restore across a need_sort merge gives back the exact pre-backup lists. */
  a = kvt_allocator(KVC_ALLOCATOR_PAGED, 32, 4, KVC_ALLOCATOR_NEED_SORT);
  KVT_OK(kvc_allocator_alloc(a, 24, s)); /* pages 1..6, free [7, 8] */
  free_page_of(a, 20);                   /* deferred [5] */
  free_page_of(a, 8);                    /* deferred [5, 2] */
  KVT_OK(kvc_allocator_backup_state(a, &b));
  expect_next_alloc(a, (int64_t[]){28, 29, 30, 31}, 4);               /* page 7, no merge */
  expect_next_alloc(a, (int64_t[]){8, 9, 10, 11, 20, 21, 22, 23}, 8); /* merge: [2, 5, 8] */
  KVT_OK(kvc_allocator_restore_state(a, &b));
  kvc_allocator_stats st;
  KVT_OK(kvc_allocator_get_stats(a, &st));
  assert_int_equal(st.free_pages, 2);
  assert_int_equal(st.deferred_pages, 2);
  KVT_OK(kvc_allocator_check(a));
  expect_next_alloc(a, (int64_t[]){28, 29, 30, 31}, 4);
  expect_next_alloc(a, (int64_t[]){8, 9, 10, 11, 20, 21, 22, 23}, 8);
  KVT_OK(kvc_allocator_clear(a));
  KVT_STATUS(kvc_allocator_restore_state(a, &b), KVC_ERR_MISUSE);
  expect_next_alloc(a, (int64_t[]){4, 5, 6, 7}, 4);
  kvc_allocator_destroy(a);
}

/* Two allocators built the same way; misuse on one must leave it identical to the other. */
static void assert_same(kvc_allocator *x, kvc_allocator *y) {
  kvc_allocator_stats sx, sy;
  KVT_OK(kvc_allocator_get_stats(x, &sx));
  KVT_OK(kvc_allocator_get_stats(y, &sy));
  assert_memory_equal(&sx, &sy, sizeof sx);
  KVT_OK(kvc_allocator_check(x));
}

static void run_misuse(kvc_allocator_kind kind, int32_t ps) {
  const int64_t size = 16 * ps;
  kvc_allocator *x = kvt_allocator(kind, size, ps, 0), *y = kvt_allocator(kind, size, ps, 0);
  kvc_req_to_token_pool *p = kvt_req_pool(4, 64);
  int32_t rows[2] = {0, 0};
  KVT_OK(kvc_req_to_token_pool_alloc(p, 2, rows));
  int64_t pre[2] = {0, 0}, seq[2] = {3 * ps + 1, 2}, out[128];
  KVT_OK(kvc_allocator_alloc_extend(x, 2, pre, seq, NULL, p, rows, NULL, out, NULL, NULL));
  KVT_OK(kvc_allocator_alloc_extend(y, 2, pre, seq, NULL, NULL, NULL, NULL, out, NULL, NULL));
  KVT_OK(kvc_allocator_free(x, &out[0], 1));
  KVT_OK(kvc_allocator_free(y, &out[0], 1));
  const int64_t freed = out[0], held = out[ps];
  assert_same(x, y);
  KVT_STATUS(kvc_allocator_free(x, (int64_t[]){0}, 1), KVC_ERR_MISUSE);
  KVT_STATUS(kvc_allocator_free(x, (int64_t[]){ps - 1}, 1), KVC_ERR_MISUSE);
  KVT_STATUS(kvc_allocator_free(x, (int64_t[]){size + ps}, 1), KVC_ERR_MISUSE);
  KVT_STATUS(kvc_allocator_free(x, (int64_t[]){-3}, 1), KVC_ERR_MISUSE);
  KVT_STATUS(kvc_allocator_free(x, (int64_t[]){held, freed}, 2), KVC_ERR_MISUSE);
  KVT_STATUS(kvc_allocator_free(x, (int64_t[]){held, 0}, 2), KVC_ERR_MISUSE);
  if (kind == KVC_ALLOCATOR_TOKEN) {
    /* The one-pass TOKEN free sees the repeat as FREE; the message must still say why. */
    KVT_STATUS(kvc_allocator_free(x, (int64_t[]){held, held}, 2), KVC_ERR_MISUSE);
    assert_non_null(strstr(kvc_last_error(kvt_ctx), "listed twice"));
    KVT_STATUS(kvc_allocator_free(x, (int64_t[]){held, freed}, 2), KVC_ERR_MISUSE);
    assert_non_null(strstr(kvc_last_error(kvt_ctx), "slots[1]"));
  }
  KVT_STATUS(kvc_allocator_free(x, NULL, 1), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_allocator_free_segment(x, (int64_t[]){held, freed}, 2, 0), KVC_ERR_MISUSE);
  if (ps > 1) {
    KVT_STATUS(kvc_allocator_free_segment(x, (int64_t[]){held}, 1, 1), KVC_ERR_INVALID_ARGUMENT);
    KVT_STATUS(kvc_allocator_alloc(x, ps + 1, out), KVC_ERR_INVALID_ARGUMENT);
  }
  KVT_STATUS(kvc_allocator_alloc(x, -1, out), KVC_ERR_INVALID_ARGUMENT);
  assert_same(x, y);
  /* Batch calls: every request validated before anything moves. */
  int64_t p2[2] = {0, 5}, s2[2] = {4, 3};
  KVT_STATUS(kvc_allocator_alloc_extend(x, 2, p2, s2, NULL, p, rows, NULL, out, NULL, NULL), KVC_ERR_INVALID_ARGUMENT);
  int64_t s3[2] = {4, 65};
  KVT_STATUS(kvc_allocator_alloc_extend(x, 2, pre, s3, NULL, p, rows, NULL, out, NULL, NULL), KVC_ERR_INVALID_ARGUMENT);
  int32_t dup[2] = {rows[0], rows[0]}, unheld[2] = {rows[0], 3};
  KVT_STATUS(kvc_allocator_alloc_extend(x, 2, pre, seq, NULL, p, dup, NULL, out, NULL, NULL), KVC_ERR_MISUSE);
  KVT_STATUS(kvc_allocator_alloc_extend(x, 2, pre, seq, NULL, p, unheld, NULL, out, NULL, NULL), KVC_ERR_MISUSE);
  const int64_t bad_prefix[1] = {-2};
  const int64_t *pslots[2] = {bad_prefix, NULL};
  int64_t p4[2] = {1, 0};
  KVT_STATUS(kvc_allocator_alloc_extend(x, 2, p4, seq, NULL, p, rows, pslots, out, NULL, NULL),
             KVC_ERR_INVALID_ARGUMENT);
  int64_t ds[2] = {0, 1};
  KVT_STATUS(kvc_allocator_alloc_decode(x, 2, ds, NULL, p, rows, out, NULL, NULL), KVC_ERR_INVALID_ARGUMENT);
  /* Decode failures at the second request, after the fused pass wrote the first one's
   * mirror entry: the entry is put back and the message is the checked code's. */
  int32_t mirror_was[2][64];
  for (int j = 0; j < 2; j++) memcpy(mirror_was[j], kvc_req_to_token_pool_row(p, rows[j]), sizeof mirror_was[j]);
  int64_t dnext[2] = {seq[0] + 1, seq[1] + 1}, dwide[2] = {seq[0] + 1, 65};
  int32_t ddup[2] = {rows[0], rows[0]};
  KVT_STATUS(kvc_allocator_alloc_decode(x, 2, dnext, NULL, p, ddup, out, NULL, NULL), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "req_rows[1]"));
  KVT_STATUS(kvc_allocator_alloc_decode(x, 2, dwide, NULL, p, rows, out, NULL, NULL), KVC_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "request 1"));
  for (int j = 0; j < 2; j++)
    assert_memory_equal(mirror_was[j], kvc_req_to_token_pool_row(p, rows[j]), sizeof mirror_was[j]);
  if (kind == KVC_ALLOCATOR_PAGED && ps > 2) {
    /* last_loc checks: wrong in-page offset, in a free page */
    int64_t lp[1] = {2}, ls[1] = {3}, wrong_off[1] = {held + 2}, in_free[1] = {freed + 1};
    KVT_STATUS(kvc_allocator_alloc_extend(x, 1, lp, ls, wrong_off, NULL, NULL, NULL, out, NULL, NULL),
               KVC_ERR_INVALID_ARGUMENT);
    KVT_STATUS(kvc_allocator_alloc_extend(x, 1, lp, ls, in_free, NULL, NULL, NULL, out, NULL, NULL), KVC_ERR_MISUSE);
    int64_t dl[1] = {held + 2}, dseq[1] = {3};
    KVT_STATUS(kvc_allocator_alloc_decode(x, 1, dseq, dl, NULL, NULL, out, NULL, NULL), KVC_ERR_INVALID_ARGUMENT);
  }
  KVT_STATUS(kvc_allocator_free_group_end(x), KVC_ERR_MISUSE);
  kvc_allocator_state bogus = {{1, 2, 3, 4}};
  KVT_STATUS(kvc_allocator_restore_state(x, &bogus), KVC_ERR_MISUSE);
  assert_same(x, y);
  /* Rows were not consumed or left marked either. */
  KVT_OK(kvc_allocator_alloc_extend(x, 2, pre, seq, NULL, p, rows, NULL, out, NULL, NULL));
  int64_t out2[128];
  KVT_OK(kvc_allocator_alloc_extend(y, 2, pre, seq, NULL, NULL, NULL, NULL, out2, NULL, NULL));
  expect_slots(out, out2, (size_t)(seq[0] + seq[1]));
  int64_t rest = kvc_allocator_available_size(x);
  assert_int_equal(rest, kvc_allocator_available_size(y));
  int64_t *all_x = malloc(sizeof(int64_t) * (size_t)rest), *all_y = malloc(sizeof(int64_t) * (size_t)rest);
  KVT_OK(kvc_allocator_alloc(x, rest, all_x));
  KVT_OK(kvc_allocator_alloc(y, rest, all_y));
  expect_slots(all_x, all_y, (size_t)rest);
  free(all_x);
  free(all_y);
  kvc_req_to_token_pool_destroy(p);
  kvc_allocator_destroy(x);
  kvc_allocator_destroy(y);
}

/* kvc_allocator_check_free: the verdict of the frees in turn, and nothing changed either
 * way (the free list hands out exactly what it would have; the audit passes). */
static void check_free_case(kvc_allocator_kind kind, int32_t ps, uint32_t flags) {
  const int64_t size = 16 * ps;
  kvc_allocator *a = kvt_allocator(kind, size, ps, flags), *b = kvt_allocator(kind, size, ps, flags);
  int64_t held[256], tmp[256];
  assert_true(size <= 256);
  KVT_OK(kvc_allocator_alloc(a, size - 2 * ps, held));
  KVT_OK(kvc_allocator_alloc(b, size - 2 * ps, tmp));
  /* Lists: the first page's slots, then the second page's; a repeat of the first. */
  const int64_t *l_ok[2] = {held, held + ps};
  const size_t n_page[2] = {(size_t)ps, (size_t)ps};
  KVT_OK(kvc_allocator_check_free(a, l_ok, n_page, 2));
  const int64_t *l_rep[2] = {held, held};
  KVT_STATUS(kvc_allocator_check_free(a, l_rep, n_page, 2), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "earlier list"));
  /* Second list not held (the free part of the allocator), first fine. */
  const int64_t not_held = size - ps + 1;
  const int64_t *l_bad[2] = {held, &not_held};
  const size_t n_bad[2] = {(size_t)ps, 1};
  KVT_STATUS(kvc_allocator_check_free(a, l_bad, n_bad, 2), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "lists[1][0]"));
  const int64_t zero = 0, *l_zero[1] = {&zero};
  const size_t one = 1;
  KVT_STATUS(kvc_allocator_check_free(a, l_zero, &one, 1), KVC_ERR_MISUSE);
  const int64_t *l_null[2] = {held, NULL};
  const size_t n_null[2] = {1, 1}, n_empty[2] = {1, 0};
  KVT_STATUS(kvc_allocator_check_free(a, l_null, n_null, 2), KVC_ERR_INVALID_ARGUMENT);
  KVT_OK(kvc_allocator_check_free(a, l_null, n_empty, 2));
  KVT_OK(kvc_allocator_check_free(a, NULL, NULL, 0));
  KVT_STATUS(kvc_allocator_check_free(a, NULL, n_page, 2), KVC_ERR_INVALID_ARGUMENT);
  if (kind == KVC_ALLOCATOR_TOKEN) { /* a slot twice in one list is refused */
    const int64_t dup[2] = {held[3], held[3]}, *l_dup[1] = {dup};
    const size_t two = 2;
    KVT_STATUS(kvc_allocator_check_free(a, l_dup, &two, 1), KVC_ERR_MISUSE);
    KVT_STATUS(kvc_allocator_free(a, dup, 2), KVC_ERR_MISUSE); /* as free() says */
  } else { /* PAGED: several slots of one page in one list are one page */
    const int64_t same[2] = {held[0], held[1]}, *l_same[1] = {same};
    const size_t two = 2;
    KVT_OK(kvc_allocator_check_free(a, l_same, &two, 1));
    /* Inside a group free() accepts a page again: so does the check. */
    KVT_OK(kvc_allocator_free_group_begin(a));
    KVT_OK(kvc_allocator_check_free(a, l_rep, n_page, 2));
    KVT_OK(kvc_allocator_free_group_end(a));
  }
  KVT_OK(kvc_allocator_check(a));
  /* Nothing changed: a and b (never checked) agree on every slot from here on. */
  KVT_OK(kvc_allocator_free(a, held, (size_t)ps));
  KVT_OK(kvc_allocator_free(b, held, (size_t)ps));
  int64_t ra[256], rb[256];
  const int64_t rest = kvc_allocator_available_size(a);
  assert_int_equal(rest, kvc_allocator_available_size(b));
  KVT_OK(kvc_allocator_alloc(a, rest, ra));
  KVT_OK(kvc_allocator_alloc(b, rest, rb));
  expect_slots(ra, rb, (size_t)rest);
  kvc_allocator_destroy(a);
  kvc_allocator_destroy(b);
}

static void test_check_free_matches_free_in_turn(void **state) {
  (void)state;
  check_free_case(KVC_ALLOCATOR_TOKEN, 1, 0);
  check_free_case(KVC_ALLOCATOR_TOKEN, 1, KVC_ALLOCATOR_NEED_SORT);
  check_free_case(KVC_ALLOCATOR_PAGED, 1, 0);
  check_free_case(KVC_ALLOCATOR_PAGED, 4, 0);
  check_free_case(KVC_ALLOCATOR_PAGED, 16, KVC_ALLOCATOR_NEED_SORT);
}

static void test_misuse_changes_nothing(void **state) {
  (void)state;
  run_misuse(KVC_ALLOCATOR_TOKEN, 1);
  run_misuse(KVC_ALLOCATOR_PAGED, 1);
  run_misuse(KVC_ALLOCATOR_PAGED, 4);
  run_misuse(KVC_ALLOCATOR_PAGED, 16);
}

static void test_out_of_slots_changes_nothing(void **state) {
  (void)state;
  kvc_allocator *a = kvt_allocator(KVC_ALLOCATOR_PAGED, 16, 4, 0);
  kvc_req_to_token_pool *p = kvt_req_pool(2, 32);
  int32_t rows[2] = {0, 0};
  KVT_OK(kvc_req_to_token_pool_alloc(p, 2, rows));
  int64_t pre[2] = {0, 0}, seq[2] = {5, 2}, out[32];
  KVT_OK(kvc_allocator_alloc_extend(a, 2, pre, seq, NULL, p, rows, NULL, out, NULL, NULL)); /* 3 pages */
  int32_t before[3 * 32], after[3 * 32], mirror[32];
  kvt_d2h(before, kvc_req_to_token_pool_table(p), sizeof before);
  memcpy(mirror, kvc_req_to_token_pool_row(p, rows[0]), sizeof mirror);
  kvc_allocator_stats s0, s1;
  KVT_OK(kvc_allocator_get_stats(a, &s0));
  int64_t pre2[2] = {5, 2}, seq2[2] = {13, 3}; /* needs 2 pages, 1 left */
  for (int i = 0; i < 32; i++) out[i] = -9;
  KVT_STATUS(kvc_allocator_alloc_extend(a, 2, pre2, seq2, NULL, p, rows, NULL, out, NULL, NULL), KVC_ERR_OUT_OF_SLOTS);
  int64_t dseq[2] = {6, 3};
  KVT_OK(kvc_allocator_alloc_decode(a, 2, dseq, NULL, p, rows, out, NULL, NULL)); /* no page needed */
  int64_t dseq2[2] = {7, 5};
  int64_t *dev = kvt_dev_alloc(2 * sizeof(int64_t));
  KVT_OK(kvc_allocator_alloc_decode(a, 2, dseq2, NULL, p, rows, out, dev, NULL)); /* 1 page (the last) */
  kvt_d2h(before, kvc_req_to_token_pool_table(p), sizeof before);
  KVT_OK(kvc_allocator_get_stats(a, &s0));
  memcpy(mirror, kvc_req_to_token_pool_row(p, rows[1]), sizeof mirror);
  int64_t dseq3[2] = {9, 6}; /* 9: (9-1)%4 == 0 needs a page; none left */
  for (int i = 0; i < 32; i++) out[i] = -9;
  KVT_STATUS(kvc_allocator_alloc_decode(a, 2, dseq3, NULL, p, rows, out, dev, NULL), KVC_ERR_OUT_OF_SLOTS);
  assert_int_equal(out[0], -9);
  kvt_d2h(after, kvc_req_to_token_pool_table(p), sizeof after);
  assert_memory_equal(before, after, sizeof before);
  assert_memory_equal(mirror, kvc_req_to_token_pool_row(p, rows[1]), sizeof mirror);
  KVT_OK(kvc_allocator_get_stats(a, &s1));
  assert_memory_equal(&s0, &s1, sizeof s0);
  kvt_dev_free(dev);
  kvc_req_to_token_pool_destroy(p);
  kvc_allocator_destroy(a);
}

/* Planned launches at every payload size (src/ops/plan.c): decode payloads of 3 words per
 * request land in each parameter-block capacity in turn (n = 300: 900 words, the 4 KB
 * block; 600: the 8 KB block; 1000 and 1333: the 16 KB block, the second at 3999 of its
 * 4000 words; 1334 and 2000: the 32 KB block; 3000: 9000 words, staged), and every
 * extend here is staged. Device out_cache_loc and table rows must equal the host's. */
static void large_batch(int n) {
  kvc_allocator *a = kvt_allocator(KVC_ALLOCATOR_TOKEN, 400000, 1, 0);
  kvc_req_to_token_pool *p = kvt_req_pool(n, 64);
  int32_t *rows = calloc((size_t)n, sizeof *rows);
  KVT_OK(kvc_req_to_token_pool_alloc(p, (size_t)n, rows));
  int64_t *pre = calloc((size_t)n, 8), *seq = calloc((size_t)n, 8), *out = calloc((size_t)n * 64, 8);
  int64_t *back = calloc((size_t)n * 64, 8);
  for (int i = 0; i < n; i++) seq[i] = 1 + i % 40;
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += seq[i];
  int64_t *dev = kvt_dev_alloc((size_t)total * 8), *rows_dev = kvt_dev_alloc((size_t)n * 8);
  kvc_extend_args x;
  memset(&x, 0, sizeof x);
  x.batch_size = (size_t)n;
  x.prefix_lens = pre;
  x.seq_lens = seq;
  x.req_pool = p;
  x.req_rows = rows;
  x.out_host = out;
  x.out_device = dev;
  x.rows_device = rows_dev;
  KVT_OK(kvc_allocator_alloc_extend_ex(a, &x));
  for (int64_t i = 0; i < total; i++) assert_int_equal(out[i], 1 + i);
  kvt_d2h(back, rows_dev, (size_t)n * 8);
  for (int i = 0; i < n; i++) assert_int_equal(back[i], rows[i]);
  kvt_dev_free(rows_dev);
  kvt_d2h(back, dev, (size_t)total * 8);
  expect_slots(back, out, (size_t)total);
  int32_t *table = calloc((size_t)(n + 1) * 64, 4);
  for (int i = 0; i < n; i++) seq[i]++;
  KVT_OK(kvc_allocator_alloc_decode(a, (size_t)n, seq, NULL, p, rows, out, dev, NULL));
  for (int i = 0; i < n; i++) assert_int_equal(out[i], total + 1 + i);
  kvt_d2h(table, kvc_req_to_token_pool_table(p), (size_t)(n + 1) * 64 * 4);
  for (int i = 0; i < n; i++) {
    const int32_t *m = kvc_req_to_token_pool_row(p, rows[i]);
    for (int j = 0; j < 64; j++) assert_int_equal(table[rows[i] * 64 + j], m[j]);
    assert_int_equal(m[seq[i] - 1], total + 1 + i);
  }
  free(table);
  kvt_dev_free(dev);
  free(back);
  free(out);
  free(seq);
  free(pre);
  free(rows);
  kvc_req_to_token_pool_destroy(p);
  kvc_allocator_destroy(a);
}

static void test_large_batches_every_payload_size(void **state) {
  (void)state;
  const int sizes[] = {300, 600, 1000, 1333, 1334, 2000, 3000};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) large_batch(sizes[k]);
}

/* --- Free orders ------------------------------------------------------------------- */

/* A PAGED free sorts the distinct pages of its slots ascending and puts them in front of
 * the free list (SGLang: torch.unique, then released ++ free_pages), whatever the order of
 * the row: ascending, descending, runs of both, shuffled, pages repeated, whole pages or
 * single slots, rows not aligned to pages. Checked against a sorted-unique reference for
 * plain frees, free groups (several frees, one sort at the end) and need_sort merges, over
 * page sets narrow and wide enough to take every sort path (reverse, insertion, byte map,
 * radix) and page sizes taking the vector fast path (16, 64), its generic version (2, 8)
 * or the slow loop (1, 3). */

static int cmp_u32(const void *x, const void *y) {
  uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
  return (a > b) - (a < b);
}

static int64_t min_i64(int64_t x, int64_t y) { return x < y ? x : y; }

/* n distinct pages of [1, num_pages], in one of the orders above; a narrow set spans about
 * 2n ids, a wide one the whole pool. */
static void pick_pages(kvt_rng *r, uint32_t *pg, int n, int64_t num_pages, int order) {
  const int narrow = kvt_range(r, 0, 1) == 0;
  const int64_t lo = narrow ? kvt_range(r, 1, num_pages - 2 * n) : 1, hi = narrow ? lo + 2 * n - 1 : num_pages;
  for (int i = 0; i < n;) { /* rejection sampling: n is small against the range */
    uint32_t p = (uint32_t)kvt_range(r, lo, hi);
    int dup = 0;
    for (int j = 0; j < i && !dup; j++) dup = pg[j] == p;
    if (!dup) pg[i++] = p;
  }
  qsort(pg, (size_t)n, sizeof *pg, cmp_u32);
  if (order == 1) { /* descending */
    for (int i = 0, j = n - 1; i < j; i++, j--) {
      uint32_t t = pg[i];
      pg[i] = pg[j];
      pg[j] = t;
    }
  } else if (order == 2) { /* runs of random lengths, every other one reversed */
    for (int i = 0, run = 0; i < n; run++) {
      int len = (int)min_i64(kvt_range(r, 1, 40), n - i);
      if (run % 2)
        for (int a = i, b = i + len - 1; a < b; a++, b--) {
          uint32_t t = pg[a];
          pg[a] = pg[b];
          pg[b] = t;
        }
      i += len;
    }
  } else if (order == 3) { /* shuffled */
    for (int i = n - 1; i > 0; i--) {
      int j = (int)kvt_range(r, 0, i);
      uint32_t t = pg[i];
      pg[i] = pg[j];
      pg[j] = t;
    }
  }
}

/* The slots of pages pg[0:n) as a row: whole pages (or single slots, or a row shifted off
 * the page grid by dropping the first slots), some pages listed again later. */
static int64_t make_row(kvt_rng *r, const uint32_t *pg, int n, int32_t ps, int64_t *row) {
  const int shape = (int)kvt_range(r, 0, 2); /* 0 whole pages, 1 a slot per page, 2 off the grid */
  int64_t m = 0;
  for (int i = 0; i < n; i++) {
    const int64_t base = (int64_t)pg[i] * ps;
    if (shape == 1) {
      row[m++] = base + kvt_range(r, 0, ps - 1);
    } else {
      for (int32_t q = (shape == 2 && i == 0) ? ps / 2 : 0; q < ps; q++) row[m++] = base + q;
    }
    if (kvt_range(r, 0, 7) == 0) { /* a repeat of an earlier page, whole or one slot */
      const int64_t again = (int64_t)pg[kvt_range(r, 0, i)] * ps;
      if (kvt_range(r, 0, 1))
        for (int32_t q = 0; q < ps; q++) row[m++] = again + q;
      else row[m++] = again + ps - 1;
    }
  }
  return m;
}

/* The next alloc returns exactly the pages want[0:n) (ascending, distinct), slot by slot. */
static void expect_pages_front(kvc_allocator *a, const uint32_t *want, int n, int32_t ps, int64_t *buf) {
  KVT_OK(kvc_allocator_alloc(a, (int64_t)n * ps, buf));
  for (int i = 0; i < n; i++)
    for (int32_t q = 0; q < ps; q++)
      if (buf[(int64_t)i * ps + q] != (int64_t)want[i] * ps + q)
        fail_msg("ps %d: slot %lld = %lld, want page %u (seed %llu)", ps, (long long)i * ps + q,
                 (long long)buf[(int64_t)i * ps + q], want[i], (unsigned long long)kvt_seed());
  KVT_OK(kvc_allocator_check(a));
  assert_int_equal(kvc_allocator_available_size(a), 0);
}

static void run_free_orders(int32_t ps, uint32_t flags, int group) {
  const int64_t num_pages = 2500, max_pages = 300;
  kvt_rng r = {kvt_seed() ^ ((uint64_t)ps << 32) ^ flags ^ (group ? 0x5eedull : 0)};
  kvc_allocator *a = kvt_allocator(KVC_ALLOCATOR_PAGED, num_pages * ps, ps, flags);
  int64_t *buf = malloc(sizeof(int64_t) * (size_t)(num_pages * ps));
  int64_t *row = malloc(sizeof(int64_t) * (size_t)(2 * max_pages * ps));
  uint32_t *pg = malloc(sizeof(uint32_t) * (size_t)max_pages), *want = malloc(sizeof(uint32_t) * (size_t)max_pages);
  assert_non_null(buf);
  assert_non_null(row);
  assert_non_null(pg);
  assert_non_null(want);
  KVT_OK(kvc_allocator_alloc(a, num_pages * ps, buf)); /* all held: the list starts empty */
  for (int t = 0; t < 48; t++) {
    const int n = (int)((t / 4) % 3 == 0 ? kvt_range(&r, 1, 48) : kvt_range(&r, 49, max_pages));
    pick_pages(&r, pg, n, num_pages, t % 4);
    memcpy(want, pg, sizeof(uint32_t) * (size_t)n);
    qsort(want, (size_t)n, sizeof *want, cmp_u32);
    const int64_t m = make_row(&r, pg, n, ps, row);
    if (!group && !flags && t % 8 == 1) {
      /* A page in the middle of the row is already free: MISUSE and nothing changes
       * (no page freed, none left marked: the audit and the free below would see it). */
      uint32_t stray = 1;
      while (bsearch(&stray, want, (size_t)n, sizeof *want, cmp_u32)) stray++;
      const int64_t one = (int64_t)stray * ps;
      KVT_OK(kvc_allocator_free(a, &one, 1));
      int64_t *bad = malloc(sizeof(int64_t) * (size_t)(m + ps));
      assert_non_null(bad);
      const int64_t cut = m / 2 - (m / 2) % ps;
      memcpy(bad, row, sizeof(int64_t) * (size_t)cut);
      for (int32_t q = 0; q < ps; q++) bad[cut + q] = one + q;
      memcpy(bad + cut + ps, row + cut, sizeof(int64_t) * (size_t)(m - cut));
      KVT_STATUS(kvc_allocator_free(a, bad, (size_t)(m + ps)), KVC_ERR_MISUSE);
      free(bad);
      KVT_OK(kvc_allocator_check(a));
      assert_int_equal(kvc_allocator_available_size(a), ps);
      expect_pages_front(a, &stray, 1, ps, buf);
    }
    if (group) {
      /* Three frees in one group, the last repeating some of the first: one sort of the
       * union at the end. */
      KVT_OK(kvc_allocator_free_group_begin(a));
      const int64_t c1 = kvt_range(&r, 0, m), c2 = kvt_range(&r, c1, m);
      KVT_OK(kvc_allocator_free(a, row, (size_t)c1));
      KVT_OK(kvc_allocator_free(a, row + c1, (size_t)(c2 - c1)));
      KVT_OK(kvc_allocator_free(a, row + c2, (size_t)(m - c2)));
      KVT_OK(kvc_allocator_free(a, row, (size_t)min_i64(c1, 3 * ps)));
      KVT_OK(kvc_allocator_free_group_end(a));
    } else {
      KVT_OK(kvc_allocator_free(a, row, (size_t)m));
    }
    expect_pages_front(a, want, n, ps, buf); /* need_sort: this alloc merges first */
  }
  free(want);
  free(pg);
  free(row);
  free(buf);
  kvc_allocator_destroy(a);
}

static void test_free_orders_sorted_unique(void **state) {
  (void)state;
  const int32_t sizes[] = {1, 2, 3, 8, 16, 64};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    run_free_orders(sizes[i], 0, 0);
    run_free_orders(sizes[i], 0, 1);
    run_free_orders(sizes[i], KVC_ALLOCATOR_NEED_SORT, 0);
  }
}

/* A decode batch whose new slots run past the end of the ring's buffer: the fused pass
 * reads them from a copy, and must hand out what alloc(n) would. */
static void test_decode_across_ring_wrap(void **state) {
  (void)state;
  kvc_allocator *x = kvt_allocator(KVC_ALLOCATOR_TOKEN, 16, 1, 0), *y = kvt_allocator(KVC_ALLOCATOR_TOKEN, 16, 1, 0);
  kvc_req_to_token_pool *p = kvt_req_pool(8, 64);
  int32_t rows[6] = {0};
  KVT_OK(kvc_req_to_token_pool_alloc(p, 6, rows));
  int64_t held[12], seq[6] = {1, 1, 1, 1, 1, 1}, out_x[6], out_y[6];
  kvc_allocator *both[2] = {x, y};
  for (int j = 0; j < 2; j++) { /* capacity 16: the front is then buf[12] (13..16), then 1..12 */
    KVT_OK(kvc_allocator_alloc(both[j], 12, held));
    KVT_OK(kvc_allocator_free(both[j], held, 12));
  }
  KVT_OK(kvc_allocator_alloc_decode(x, 6, seq, NULL, p, rows, out_x, NULL, NULL));
  KVT_OK(kvc_allocator_alloc(y, 6, out_y));
  expect_slots(out_x, out_y, 6);
  assert_int_equal(out_x[3], 16);
  assert_int_equal(out_x[4], 1);
  for (int i = 0; i < 6; i++) assert_int_equal(kvc_req_to_token_pool_row(p, rows[i])[0], out_x[i]);
  KVT_OK(kvc_allocator_check(x));
  kvc_req_to_token_pool_destroy(p);
  kvc_allocator_destroy(x);
  kvc_allocator_destroy(y);
}

/* The fused decode pass's last_loc checks inside a batch, at page 16 and 64 (its
 * constant-shift copies) and 8 (the generic one), from the mirror and from last_locs: a
 * continuing request whose last_loc is in a freed page, at the wrong in-page offset,
 * below the first page or past the last fails the call at that request, after earlier
 * requests were applied; the call must then leave mirror rows, row marks and the free
 * list as they were (the same slots come out of the next decode as out of a twin). */
static void run_decode_bad_last(int ps) {
  const int64_t pages = 16;
  kvc_allocator *x = kvt_allocator(KVC_ALLOCATOR_PAGED, pages * ps, ps, 0);
  kvc_allocator *y = kvt_allocator(KVC_ALLOCATOR_PAGED, pages * ps, ps, 0);
  kvc_req_to_token_pool *p = kvt_req_pool(4, 4 * ps);
  int32_t rows[4] = {0};
  KVT_OK(kvc_req_to_token_pool_alloc(p, 4, rows));
  /* New tokens at positions 3 (continues), ps (opens a page), ps + 2, 5 (continue). */
  int64_t pre[4] = {0, 0, 0, 0}, seq[4] = {3, ps, ps + 2, 5}, out_x[256], out_y[256];
  KVT_OK(kvc_allocator_alloc_extend(x, 4, pre, seq, NULL, p, rows, NULL, out_x, NULL, NULL));
  KVT_OK(kvc_allocator_alloc_extend(y, 4, pre, seq, NULL, NULL, NULL, NULL, out_y, NULL, NULL));
  expect_slots(out_x, out_y, (size_t)(seq[0] + seq[1] + seq[2] + seq[3]));
  int64_t dseq[4], last[4];
  for (int i = 0; i < 4; i++) {
    dseq[i] = seq[i] + 1;
    last[i] = kvc_req_to_token_pool_row(p, rows[i])[seq[i] - 1];
  }
  int32_t was[4][256]; /* 4 ps entries per row, ps <= 64 */
  for (int i = 0; i < 4; i++) memcpy(was[i], kvc_req_to_token_pool_row(p, rows[i]), sizeof(int32_t) * 4 * (size_t)ps);

  /* last_locs given: wrong offset, page 0, past the last page, far out of range. */
  const int64_t bad[4] = {last[2] + 1, 1, (pages + 1) * ps, (int64_t)1 << 40};
  const kvc_status want[4] = {KVC_ERR_INVALID_ARGUMENT, KVC_ERR_INVALID_ARGUMENT, KVC_ERR_INVALID_ARGUMENT,
                              KVC_ERR_INVALID_ARGUMENT};
  for (int c = 0; c < 4; c++) {
    int64_t l[4] = {last[0], last[1], bad[c], last[3]};
    KVT_STATUS(kvc_allocator_alloc_decode(x, 4, dseq, l, NULL, NULL, out_x, NULL, NULL), want[c]);
    assert_non_null(strstr(kvc_last_error(kvt_ctx), "request 2"));
    KVT_STATUS(kvc_allocator_alloc_decode(x, 4, dseq, l, p, rows, out_x, NULL, NULL), want[c]);
    assert_same(x, y);
  }
  /* From the mirror: request 3's pages freed while its row still names them. */
  KVT_OK(kvc_allocator_free(x, &out_x[seq[0] + seq[1] + seq[2]], seq[3]));
  KVT_OK(kvc_allocator_free(y, &out_y[seq[0] + seq[1] + seq[2]], seq[3]));
  KVT_STATUS(kvc_allocator_alloc_decode(x, 4, dseq, NULL, p, rows, out_x, NULL, NULL), KVC_ERR_MISUSE);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "request 3"));
  assert_same(x, y);
  for (int i = 0; i < 4; i++)
    assert_memory_equal(was[i], kvc_req_to_token_pool_row(p, rows[i]), sizeof(int32_t) * 4 * (size_t)ps);
  /* Nothing left marked or taken: the first three decode as on the twin. */
  KVT_OK(kvc_allocator_alloc_decode(x, 3, dseq, NULL, p, rows, out_x, NULL, NULL));
  KVT_OK(kvc_allocator_alloc_decode(y, 3, dseq, last, NULL, NULL, out_y, NULL, NULL));
  expect_slots(out_x, out_y, 3);
  for (int i = 0; i < 3; i++) assert_int_equal(kvc_req_to_token_pool_row(p, rows[i])[seq[i]], out_x[i]);
  assert_same(x, y);
  kvc_req_to_token_pool_destroy(p);
  kvc_allocator_destroy(x);
  kvc_allocator_destroy(y);
}

static void test_decode_bad_last_loc_changes_nothing(void **state) {
  (void)state;
  run_decode_bad_last(8);
  run_decode_bad_last(16);
  run_decode_bad_last(64);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_create_rejects_bad_config),
    cmocka_unit_test(test_token_allocator_reuses_fifo),
    cmocka_unit_test(test_refused_free_keeps_the_backup_image),
    cmocka_unit_test(test_token_free_four_a_step),
    cmocka_unit_test(test_token_free_padding_slots_refused),
    cmocka_unit_test(test_token_free_order_model),
    cmocka_unit_test(test_paged_free_prepends_sorted_unique),
    cmocka_unit_test(test_extend_matches_spec_example),
    cmocka_unit_test(test_extend_without_pool),
    cmocka_unit_test(test_extend_ex_writes_rows),
    cmocka_unit_test(test_decode_matches_spec_example),
    cmocka_unit_test(test_page_boundaries),
    cmocka_unit_test(test_token_kind_extend_and_decode),
    cmocka_unit_test(test_need_sort_merge_triggers),
    cmocka_unit_test(test_free_groups_paged),
    cmocka_unit_test(test_free_groups_token),
    cmocka_unit_test(test_token_group_free_four_a_step),
    cmocka_unit_test(test_free_segment_strides),
    cmocka_unit_test(test_backup_restore),
    cmocka_unit_test(test_misuse_changes_nothing),
    cmocka_unit_test(test_check_free_matches_free_in_turn),
    cmocka_unit_test(test_out_of_slots_changes_nothing),
    cmocka_unit_test(test_large_batches_every_payload_size),
    cmocka_unit_test(test_free_orders_sorted_unique),
    cmocka_unit_test(test_decode_across_ring_wrap),
    cmocka_unit_test(test_decode_bad_last_loc_changes_nothing),
};
KVT_MAIN("allocator", tests)
