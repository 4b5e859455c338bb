/* test_id_ring.c — the id ring behind every free list (src/alloc/id_ring.h): FIFO order,
 * wrap-around of the buffer and of the 64-bit head, undo, the audit against the owner's
 * state bytes, and a long random run against a plain deque. White-box: the ring is
 * internal, so this includes its header. */
#include "harness.h"
#include "alloc/id_ring.h"
#include "core/fault.h"

#define FREE_ST 0x0u
#define HELD_ST 0x1u
#define MARK_ST 0x4u

/* Ring order, front first, as an array (the checks compare it with what they expect). */
static void expect_ring(const kvc__ring *r, const uint32_t *want, int64_t n) {
  assert_int_equal(r->count, n);
  for (int64_t i = 0; i < n; i++) assert_int_equal(kvc__ring_at(r, i), want[i]);
  uint32_t got[64];
  assert_true(n <= 64);
  kvc__ring_copy(r, 0, n, got);
  for (int64_t i = 0; i < n; i++) assert_int_equal(got[i], want[i]);
}

static kvc_status audit(const kvc__ring *r, uint8_t *state, uint32_t max_id) {
  const kvc__ring_ids ids = {state, max_id, FREE_ST, MARK_ST, "free list", "id"};
  return kvc__ring_audit(kvt_ctx, "test", r, &ids);
}

static void test_fifo_order(void **st) {
  (void)st;
  kvc__ring r = {0};
  uint8_t state[6] = {0};
  KVT_OK(kvc__ring_init(kvt_ctx, "test", &r, 5));
  assert_int_equal(r.mask, 7); /* rounded up to a power of two */
  kvc__ring_fill(&r, 5);
  expect_ring(&r, (const uint32_t[]){1, 2, 3, 4, 5}, 5);
  KVT_OK(audit(&r, state, 5));

  assert_int_equal(kvc__ring_pop_front(&r, state, HELD_ST), 1);
  uint32_t got[2];
  kvc__ring_take(&r, 2, got, state, HELD_ST);
  assert_int_equal(got[0], 2);
  assert_int_equal(got[1], 3);
  assert_int_equal(state[1], HELD_ST);
  assert_int_equal(state[3], HELD_ST);
  assert_int_equal(state[4], FREE_ST);

  /* Frees go to the back in call order; the oldest free id comes out first. */
  kvc__ring_push_back(&r, (const uint32_t[]){3, 1}, 2, state, FREE_ST);
  expect_ring(&r, (const uint32_t[]){4, 5, 3, 1}, 4);
  assert_int_equal(state[3], FREE_ST);
  /* push_front keeps the order of what it prepends (PAGED frees: released ++ free). */
  kvc__ring_push_front(&r, (const uint32_t[]){2}, 1, state, FREE_ST);
  expect_ring(&r, (const uint32_t[]){2, 4, 5, 3, 1}, 5);
  KVT_OK(audit(&r, state, 5));
  kvc__ring_take(&r, 5, NULL, state, HELD_ST);
  assert_int_equal(r.count, 0);
  KVT_OK(audit(&r, state, 5));
  kvc__ring_fini(kvt_ctx, &r);
  assert_null(r.buf);
}

static void test_wrap_around(void **st) {
  (void)st;
  kvc__ring r = {0};
  uint8_t state[5] = {0};
  KVT_OK(kvc__ring_init(kvt_ctx, "test", &r, 4));
  kvc__ring_fill(&r, 4);
  /* Rotating one id at a time moves the live window around the buffer many times. */
  for (int step = 0; step < 37; step++) {
    const uint32_t id = kvc__ring_pop_front(&r, state, HELD_ST);
    assert_int_equal(id, (uint32_t)(step % 4) + 1);
    kvc__ring_push_back(&r, &id, 1, state, FREE_ST);
    KVT_OK(audit(&r, state, 4));
  }
  /* The window now crosses the end of the buffer: at() and copy() still read it in
   * ring order. */
  assert_int_equal(r.head & r.mask, 1);
  expect_ring(&r, (const uint32_t[]){2, 3, 4, 1}, 4);

  /* head steps back through 0: it is a free-running counter, mod 2^64. */
  kvc__ring_fill(&r, 4);
  kvc__ring_take(&r, 4, NULL, state, HELD_ST);
  r.head = 1;
  kvc__ring_push_front(&r, (const uint32_t[]){3, 1, 4}, 3, state, FREE_ST);
  assert_int_equal(r.head, UINT64_MAX - 1);
  expect_ring(&r, (const uint32_t[]){3, 1, 4}, 3);
  kvc__ring_push_back(&r, (const uint32_t[]){2}, 1, state, FREE_ST);
  expect_ring(&r, (const uint32_t[]){3, 1, 4, 2}, 4);
  KVT_OK(audit(&r, state, 4));
  uint32_t got[4];
  kvc__ring_take(&r, 4, got, state, HELD_ST);
  assert_int_equal(r.head, 2);
  assert_int_equal(got[3], 2);
  kvc__ring_fini(kvt_ctx, &r);
}

static void test_undo(void **st) {
  (void)st;
  kvc__ring r = {0};
  uint8_t state[9] = {0};
  KVT_OK(kvc__ring_init(kvt_ctx, "test", &r, 8));
  kvc__ring_fill(&r, 8);
  kvc__ring_take(&r, 2, NULL, state, HELD_ST); /* someone else holds 1 and 2 */

  /* A call takes three ids, then fails: they go back to the front in their order. */
  uint32_t took[3];
  kvc__ring_take(&r, 3, took, state, HELD_ST);
  kvc__ring_undo_take(&r, took, 3, state, HELD_ST, FREE_ST, 8);
  expect_ring(&r, (const uint32_t[]){3, 4, 5, 6, 7, 8}, 6);
  for (uint32_t id = 3; id <= 8; id++) assert_int_equal(state[id], FREE_ST);
  KVT_OK(audit(&r, state, 8));

  /* Ids no longer held, out of range or the padding id are skipped, never doubled. */
  kvc__ring_take(&r, 2, took, state, HELD_ST); /* 3, 4 */
  state[4] = FREE_ST;                          /* as if 4 had been returned already */
  const uint32_t bad[5] = {0, 3, 4, 9, UINT32_MAX};
  kvc__ring_push_back(&r, (const uint32_t[]){4}, 1, state, FREE_ST);
  kvc__ring_undo_take(&r, bad, 5, state, HELD_ST, FREE_ST, 8);
  expect_ring(&r, (const uint32_t[]){3, 5, 6, 7, 8, 4}, 6);
  KVT_OK(audit(&r, state, 8));

  /* undo_push_back: a failed free's appends leave again, their ids held as before. */
  kvc__ring_push_back(&r, (const uint32_t[]){2, 1}, 2, state, FREE_ST);
  kvc__ring_undo_push_back(&r, 2, state, HELD_ST);
  expect_ring(&r, (const uint32_t[]){3, 5, 6, 7, 8, 4}, 6);
  assert_int_equal(state[1], HELD_ST);
  assert_int_equal(state[2], HELD_ST);
  KVT_OK(audit(&r, state, 8));
  kvc__ring_fini(kvt_ctx, &r);
}

/* Each corruption: the audit reports KVC_ERR_INTERNAL and leaves the state bytes as it
 * found them (no mark left behind). */
static void expect_audit_fails(const kvc__ring *r, uint8_t *state, uint32_t max_id) {
  uint8_t before[16];
  memcpy(before, state, max_id + 1);
  KVT_STATUS(audit(r, state, max_id), KVC_ERR_INTERNAL);
  assert_memory_equal(before, state, max_id + 1);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "check: "));
}

static void test_audit_detects_corruption(void **st) {
  (void)st;
  kvc__ring r = {0};
  uint8_t state[7] = {0};
  KVT_OK(kvc__ring_init(kvt_ctx, "test", &r, 6));
  kvc__ring_fill(&r, 6);
  kvc__ring_take(&r, 2, NULL, state, HELD_ST); /* 3 4 5 6 free, wrapping later */
  KVT_OK(audit(&r, state, 6));

  uint32_t *e = &r.buf[(r.head + 1) & r.mask]; /* the entry holding 4 */
  *e = 5;                                      /* a repeat: 3 5 5 6 */
  expect_audit_fails(&r, state, 6);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "repeated"));
  *e = 1; /* a held id in the list */
  expect_audit_fails(&r, state, 6);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "not free"));
  *e = 0; /* the padding id */
  expect_audit_fails(&r, state, 6);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "out of range"));
  *e = 7;
  expect_audit_fails(&r, state, 6);
  *e = 4;
  KVT_OK(audit(&r, state, 6));

  /* A count beyond what the ids allow, or negative. */
  r.count = 7;
  expect_audit_fails(&r, state, 6);
  r.count = -1;
  expect_audit_fails(&r, state, 6);
  r.count = 4;
  /* A state byte that says free for an id the ring does not list is the owner's count
   * check; a state that says held for a listed id is the ring's. */
  state[6] = HELD_ST;
  expect_audit_fails(&r, state, 6);
  state[6] = FREE_ST;
  KVT_OK(audit(&r, state, 6));

  /* A plain array audits as a ring that never wraps (the allocator's side list). */
  uint32_t side[3] = {1, 2, 1};
  uint8_t dstate[7] = {0, 2, 2, 0, 0, 0, 0};
  kvc__ring v = kvc__ring_view(side, 3);
  const kvc__ring_ids ids = {dstate, 6, 2, MARK_ST, "deferred list", "id"};
  KVT_STATUS(kvc__ring_audit(kvt_ctx, "test", &v, &ids), KVC_ERR_INTERNAL);
  assert_int_equal(dstate[1], 2);
  v.count = 2;
  KVT_OK(kvc__ring_audit(kvt_ctx, "test", &v, &ids));
  uint32_t got[2];
  kvc__ring_copy(&v, 0, 2, got);
  assert_int_equal(got[1], 2);
  kvc__ring_fini(kvt_ctx, &r);
}

static void test_init_fails_cleanly(void **st) {
  (void)st;
  kvc__ring r = {0};
  KVT_STATUS(kvc__ring_init(kvt_ctx, "test", &r, 0), KVC_ERR_INTERNAL);
  KVT_STATUS(kvc__ring_init(kvt_ctx, "test", &r, ((int64_t)1 << 31) + 1), KVC_ERR_INTERNAL);
  const kvc__live before = kvc__fault_live(kvt_ctx);
  kvc__fault_set(kvt_ctx, KVC__FAULT_HOST_ALLOC, 0);
  KVT_STATUS(kvc__ring_init(kvt_ctx, "test", &r, 3), KVC_ERR_HOST_OOM);
  kvc__fault_reset(kvt_ctx);
  assert_null(r.buf);
  assert_int_equal(kvc__fault_live(kvt_ctx).host_allocs, before.host_allocs);
  kvc__ring_fini(kvt_ctx, &r); /* a failed ring is fine to finish */
  KVT_OK(kvc__ring_init(kvt_ctx, "test", &r, 1));
  assert_int_equal(r.mask, 0);
  kvc__ring_fini(kvt_ctx, &r);
  assert_int_equal(kvc__fault_live(kvt_ctx).host_allocs, before.host_allocs);
}

/* Random pops, FIFO and front pushes, undos against a deque in a plain array. */
static void test_random_against_deque(void **st) {
  (void)st;
  enum { N = 37, OPS = 20000 };
  kvt_rng rng = {kvt_seed()};
  kvc__ring r = {0};
  uint8_t state[N + 1] = {0};
  uint32_t model[3 * N], held[N];
  int64_t m_lo = N, m_n = N, n_held = 0; /* model[m_lo, m_lo + m_n) front first */
  KVT_OK(kvc__ring_init(kvt_ctx, "test", &r, N));
  kvc__ring_fill(&r, N);
  for (int i = 0; i < N; i++) model[N + i] = (uint32_t)i + 1;
  for (int op = 0; op < OPS; op++) {
    /* Recentre the model so that both ends have room. */
    memmove(model + N, model + m_lo, (size_t)m_n * sizeof *model);
    m_lo = N;
    const int kind = (int)kvt_range(&rng, 0, 4);
    if (kind <= 1 && m_n > 0) { /* take k, maybe undo */
      const int64_t k = kvt_range(&rng, 1, m_n);
      uint32_t took[N];
      kvc__ring_take(&r, k, took, state, HELD_ST);
      for (int64_t i = 0; i < k; i++) assert_int_equal(took[i], model[m_lo + i]);
      if (kind == 1) {
        kvc__ring_undo_take(&r, took, k, state, HELD_ST, FREE_ST, N);
      } else {
        memcpy(held + n_held, took, (size_t)k * sizeof *took);
        n_held += k;
        m_lo += k, m_n -= k;
      }
    } else if (kind <= 3 && n_held > 0) { /* free k held ids to the back or the front */
      const int64_t k = kvt_range(&rng, 1, n_held);
      const uint32_t *ids = held + n_held - k;
      if (kind == 2) {
        kvc__ring_push_back(&r, ids, k, state, FREE_ST);
        memcpy(model + m_lo + m_n, ids, (size_t)k * sizeof *ids);
      } else {
        kvc__ring_push_front(&r, ids, k, state, FREE_ST);
        m_lo -= k;
        memcpy(model + m_lo, ids, (size_t)k * sizeof *ids);
      }
      m_n += k;
      n_held -= k;
    } else if (kind == 4 && n_held > 0) { /* a free that is undone */
      const int64_t k = kvt_range(&rng, 1, n_held);
      kvc__ring_push_back(&r, held + n_held - k, k, state, FREE_ST);
      kvc__ring_undo_push_back(&r, k, state, HELD_ST);
    }
    assert_int_equal(r.count, m_n);
    for (int64_t i = 0; i < m_n; i++) assert_int_equal(kvc__ring_at(&r, i), model[m_lo + i]);
    for (int64_t i = 0; i < n_held; i++) assert_int_equal(state[held[i]], HELD_ST);
    if (op % 64 == 0) KVT_OK(audit(&r, state, N));
  }
  kvc__ring_fini(kvt_ctx, &r);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_fifo_order),
    cmocka_unit_test(test_wrap_around),
    cmocka_unit_test(test_undo),
    cmocka_unit_test(test_audit_detects_corruption),
    cmocka_unit_test(test_init_fails_cleanly),
    cmocka_unit_test(test_random_against_deque),
};
KVT_MAIN("id_ring", tests)
