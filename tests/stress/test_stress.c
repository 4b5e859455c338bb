/*
 * test_stress.c — long random operation sequences per allocator kind (TOKEN, PAGED with
 * and without need_sort, SWA pairs) on the host backend, with zero tolerated invariant
 * violations (issue 7 item 6):
 *
 *   - after every op: free + deferred + held == num_pages (O(1) stats), the available size
 *     matches, and every slot handed out was not already held (a shadow bitmap);
 *   - every 4096 ops and at the end: the O(n) audits (kvc_allocator_check,
 *     kvc_swa_allocator_check, kvc_req_to_token_pool_check + audit_device);
 *   - ops: alloc(n), alloc_extend / alloc_decode through a req pool (rows held by live
 *     requests), free of whole requests (some inside free groups), free_segment of tails,
 *     backup/restore, merge, clear, and misuse (double free, padding slot) that must fail.
 *
 * Usage: test_stress [host]; env KVT_STEPS = ops per kind (default 10^5), KVT_SEED.
 * A 10^7 run is recorded in tests/stress/README.md.
 */
#include "harness.h"

#include <stdbool.h>
#include <time.h>

#define NREQ 16
#define WIDTH 256

static uint64_t g_seed;
static long g_tokens, g_oos;
static long g_step;
static const char *g_kind;

#define CHECK(cond, ...)                                                                             \
  do {                                                                                               \
    if (!(cond)) {                                                                                   \
      char m_[256];                                                                                  \
      snprintf(m_, sizeof m_, __VA_ARGS__);                                                          \
      fail_msg("KVT_SEED=%llu %s step %ld: %s (%s)", (unsigned long long)g_seed, g_kind, g_step, m_, \
               kvc_last_error(kvt_ctx));                                                             \
    }                                                                                                \
  } while (0)
#define OKAY(expr)                                               \
  do {                                                           \
    kvc_status s_ = (expr);                                      \
    CHECK(s_ == KVC_OK, "%s -> %s", #expr, kvc_status_name(s_)); \
  } while (0)

typedef struct sreq {
  int32_t row;
  int64_t len; /* tokens in the row */
} sreq;

typedef struct stress {
  kvc_allocator *a;       /* the allocator whose conservation is checked (full side) */
  kvc_swa_allocator *swa; /* SWA kind: the pair */
  kvc_req_to_token_pool *rp;
  int64_t ps, slots;
  uint8_t *held; /* shadow: slot handed out and not freed */
  sreq req[NREQ];
  int64_t tmp[WIDTH * NREQ];
} stress;

static long steps_per_kind(void) {
  const char *e = getenv("KVT_STEPS");
  return e && *e ? strtol(e, NULL, 0) : 100000;
}

static void conserve(stress *s) {
  kvc_allocator_stats st;
  OKAY(kvc_allocator_get_stats(s->a, &st));
  CHECK(st.free_pages + st.deferred_pages + st.held_pages == st.num_pages,
        "free %lld + deferred %lld + held %lld != %lld", (long long)st.free_pages, (long long)st.deferred_pages,
        (long long)st.held_pages, (long long)st.num_pages);
  CHECK(kvc_allocator_available_size(s->a) == (st.free_pages + st.deferred_pages) * s->ps, "available size");
}

static void audit(stress *s) {
  OKAY(kvc_allocator_check(s->a));
  if (s->swa) OKAY(kvc_swa_allocator_check(s->swa));
  OKAY(kvc_req_to_token_pool_check(s->rp));
  OKAY(kvc_req_to_token_pool_audit_device(s->rp, NULL));
}

static void take(stress *s, const int64_t *slots, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    CHECK(slots[i] >= s->ps && slots[i] < s->slots + s->ps, "slot %lld out of range", (long long)slots[i]);
    CHECK(!s->held[slots[i]], "slot %lld handed out twice", (long long)slots[i]);
    s->held[slots[i]] = 1;
  }
}

static kvc_status free_slots(stress *s, const int64_t *slots, size_t n) {
  return s->swa ? kvc_swa_allocator_free(s->swa, slots, n, NULL) : kvc_allocator_free(s->a, slots, n);
}

/* Frees request i wholly (its row's slots) and its row. */
static void release(stress *s, int i) {
  sreq *r = &s->req[i];
  if (!r->row) return;
  const int32_t *m = kvc_req_to_token_pool_row(s->rp, r->row);
  for (int64_t t = 0; t < r->len; t++) s->tmp[t] = m[t], s->held[m[t]] = 0;
  if (r->len) OKAY(free_slots(s, s->tmp, (size_t)r->len));
  OKAY(kvc_req_to_token_pool_free(s->rp, r->row));
  r->row = 0, r->len = 0;
}

static void run(stress *s, kvt_rng *rng, long steps) {
  const bool paged = s->ps > 1;
  for (g_step = 0; g_step < steps; g_step++) {
    const int op = (int)kvt_range(rng, 0, 99);
    const int i = (int)kvt_range(rng, 0, NREQ - 1);
    sreq *r = &s->req[i];
    if (op < 35) { /* extend (new or continuing request) */
      int64_t add = kvt_range(rng, 1, 40);
      if (r->len + add > WIDTH) {
        release(s, i);
        continue;
      }
      if (!r->row) {
        int32_t row = 0;
        OKAY(kvc_req_to_token_pool_alloc(s->rp, 1, &row));
        r->row = row;
      }
      int64_t pre = r->len, seq = r->len + add;
      kvc_status st =
          s->swa ? kvc_swa_allocator_alloc_extend(s->swa, 1, &pre, &seq, NULL, s->rp, &r->row, NULL, s->tmp, NULL, NULL)
                 : kvc_allocator_alloc_extend(s->a, 1, &pre, &seq, NULL, s->rp, &r->row, NULL, s->tmp, NULL, NULL);
      if (st == KVC_ERR_OUT_OF_SLOTS) {
        g_oos++;
        if (!r->len) {
          OKAY(kvc_req_to_token_pool_free(s->rp, r->row));
          r->row = 0;
        }
        release(s, (int)kvt_range(rng, 0, NREQ - 1));
        continue;
      }
      CHECK(st == KVC_OK, "extend -> %s", kvc_status_name(st));
      take(s, s->tmp, add);
      g_tokens += add;
      r->len = seq;
    } else if (op < 60) { /* decode a batch of live requests */
      int32_t rows[NREQ];
      int64_t seqs[NREQ];
      int idx[NREQ];
      size_t n = 0;
      for (int k = 0; k < NREQ; k++)
        if (s->req[k].row && s->req[k].len > 0 && s->req[k].len < WIDTH && kvt_range(rng, 0, 1))
          idx[n] = k, rows[n] = s->req[k].row, seqs[n] = s->req[k].len + 1, n++;
      if (!n) continue;
      kvc_status st = s->swa ? kvc_swa_allocator_alloc_decode(s->swa, n, seqs, NULL, s->rp, rows, s->tmp, NULL, NULL)
                             : kvc_allocator_alloc_decode(s->a, n, seqs, NULL, s->rp, rows, s->tmp, NULL, NULL);
      if (st == KVC_ERR_OUT_OF_SLOTS) {
        release(s, idx[0]);
        continue;
      }
      CHECK(st == KVC_OK, "decode -> %s", kvc_status_name(st));
      take(s, s->tmp, (int64_t)n);
      g_tokens += (long)n;
      for (size_t k = 0; k < n; k++) s->req[idx[k]].len++;
    } else if (op < 75) { /* finish a request, sometimes several in one free group */
      const bool group = kvt_range(rng, 0, 3) == 0;
      if (group) OKAY(s->swa ? kvc_swa_allocator_free_group_begin(s->swa) : kvc_allocator_free_group_begin(s->a));
      release(s, i);
      if (group) {
        release(s, (int)kvt_range(rng, 0, NREQ - 1));
        OKAY(s->swa ? kvc_swa_allocator_free_group_end(s->swa) : kvc_allocator_free_group_end(s->a));
      }
    } else if (op < 83) { /* trim a tail with free_segment (page-aligned start) */
      if (!r->row || r->len < 2 || s->swa) continue;
      int64_t start = kvt_range(rng, 0, r->len - 1) / s->ps * s->ps;
      if (start >= r->len) continue;
      const int32_t *m = kvc_req_to_token_pool_row(s->rp, r->row);
      for (int64_t t = start; t < r->len; t++) s->tmp[t - start] = m[t], s->held[m[t]] = 0;
      OKAY(kvc_allocator_free_segment(s->a, s->tmp, (size_t)(r->len - start), start));
      r->len = start;
    } else if (op < 88) { /* speculative: backup, allocate, restore */
      if (s->swa) continue;
      kvc_allocator_state b;
      OKAY(kvc_allocator_backup_state(s->a, &b));
      int64_t n = kvt_range(rng, 1, 4) * s->ps;
      if (kvc_allocator_alloc(s->a, n, s->tmp) == KVC_OK) take(s, s->tmp, n);
      else n = 0;
      OKAY(kvc_allocator_restore_state(s->a, &b));
      for (int64_t t = 0; t < n; t++) s->held[s->tmp[t]] = 0;
    } else if (op < 91) {
      if (!s->swa) OKAY(kvc_allocator_merge_and_sort_free(s->a));
    } else if (op < 96) { /* misuse must fail and change nothing */
      int64_t bad = kvt_range(rng, 0, 1) ? 0 : s->slots + s->ps + kvt_range(rng, 0, 9);
      CHECK(free_slots(s, &bad, 1) != KVC_OK, "free of slot %lld accepted", (long long)bad);
      if (r->row && r->len) {
        int64_t dup[2];
        dup[0] = dup[1] = kvc_req_to_token_pool_row(s->rp, r->row)[0];
        kvc_status st = free_slots(s, dup, 2);
        if (!paged) CHECK(st == KVC_ERR_MISUSE, "duplicate free -> %s", kvc_status_name(st));
        else if (st == KVC_OK) { /* paged dedups: the request's first page really went back */
          const int32_t *m = kvc_req_to_token_pool_row(s->rp, r->row);
          int64_t keep = 0;
          for (int64_t t = 0; t < r->len; t++)
            if (m[t] / s->ps == dup[0] / s->ps) s->held[m[t]] = 0;
            else s->tmp[keep++] = m[t];
          if (keep) OKAY(free_slots(s, s->tmp, (size_t)keep));
          for (int64_t t = 0; t < keep; t++) s->held[s->tmp[t]] = 0;
          OKAY(kvc_req_to_token_pool_free(s->rp, r->row));
          r->row = 0, r->len = 0;
        }
      }
    } else if (op < 97) { /* everything back */
      for (int k = 0; k < NREQ; k++) release(s, k);
    } else {
      continue;
    }
    conserve(s);
    if ((g_step & 4095) == 0) audit(s);
  }
  for (int k = 0; k < NREQ; k++) release(s, k);
  audit(s);
  kvc_allocator_stats st;
  OKAY(kvc_allocator_get_stats(s->a, &st));
  CHECK(st.held_pages == 0, "%lld pages still held at the end", (long long)st.held_pages);
}

static void run_kind(const char *name, kvc_allocator_kind kind, int32_t ps, uint32_t flags, int swa) {
  g_kind = name;
  g_seed = kvt_seed();
  kvt_rng rng = {g_seed ^ (uint64_t)(ps * 131 + (int)flags * 7 + swa)};
  stress s;
  memset(&s, 0, sizeof s);
  s.ps = ps;
  kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rc.size = NREQ, rc.max_context_len = WIDTH;
  OKAY(kvc_req_to_token_pool_create(kvt_ctx, &rc, &s.rp));
  if (swa) {
    kvc_swa_allocator_config c = KVC_SWA_ALLOCATOR_CONFIG_INIT;
    c.size_full = 1024, c.size_swa = 1024, c.page_size = ps, c.flags = flags;
    OKAY(kvc_swa_allocator_create(kvt_ctx, &c, &s.swa));
    s.a = (kvc_allocator *)kvc_swa_allocator_full(s.swa);
    s.slots = 1024;
  } else {
    kvc_allocator_config c = KVC_ALLOCATOR_CONFIG_INIT;
    c.kind = kind, c.size = 1024, c.page_size = ps, c.flags = flags;
    OKAY(kvc_allocator_create(kvt_ctx, &c, &s.a));
    s.slots = 1024 / ps * ps;
  }
  s.held = calloc((size_t)(s.slots + 2 * ps), 1);
  const long steps = steps_per_kind();
  const double t0 = (double)clock() / CLOCKS_PER_SEC;
  g_tokens = g_oos = 0;
  run(&s, &rng, steps);
  printf("  %-22s %ld ops, %ld tokens allocated, %ld out-of-slots, %.2f s\n", name, steps, g_tokens, g_oos,
         (double)clock() / CLOCKS_PER_SEC - t0);
  free(s.held);
  if (s.swa) kvc_swa_allocator_destroy(s.swa);
  else kvc_allocator_destroy(s.a);
  kvc_req_to_token_pool_destroy(s.rp);
}

static void test_token_kind(void **state) {
  (void)state;
  run_kind("token", KVC_ALLOCATOR_TOKEN, 1, 0, 0);
}
static void test_paged_kind(void **state) {
  (void)state;
  run_kind("paged(16)", KVC_ALLOCATOR_PAGED, 16, 0, 0);
  run_kind("paged(4, need_sort)", KVC_ALLOCATOR_PAGED, 4, KVC_ALLOCATOR_NEED_SORT, 0);
}
static void test_swa_kind(void **state) {
  (void)state;
  run_kind("swa(1)", KVC_ALLOCATOR_TOKEN, 1, 0, 1);
  run_kind("swa(8)", KVC_ALLOCATOR_PAGED, 8, 0, 1);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_token_kind),
    cmocka_unit_test(test_paged_kind),
    cmocka_unit_test(test_swa_kind),
};

KVT_MAIN("stress", tests)
