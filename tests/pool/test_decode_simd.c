/* test_decode_simd.c — the decode step's AVX-512 path (allocator_plan.c, decode_avx512)
 * against its scalar path. Two worlds are built alike (req pool, allocator, prompts), one
 * with the vector path on and one with it off (white-box: kvc_allocator.simd); every call
 * runs on both, and the statuses, messages, slots, mirrors, row flags, page states and
 * free lists must be the same after each. Batches of 1..17, 24, 64 and 100 requests;
 * every error decode_fused tests, at every request of a batch (so at every lane of a
 * step of eight); rows repeated inside a step and across steps; page sizes 1 (TOKEN),
 * 4, 8, 16, 64 and 12 (no vector path); last_loc from the mirror and from last_locs;
 * alloc_decode's two-word payload and the decode channel's three-word one; rows released
 * and prefilled again, so that the free list's front wraps around its buffer.
 * Where the CPU has no AVX-512 (or KVC_SIMD=0) both worlds run the scalar path: the test
 * then says so and still checks that path against itself. */
#include "alloc_test_util.h"

#include "alloc/alloc.h"

#include <stdio.h>
#include <string.h>

enum { ROWS = 112, WIDTH = 160, MAXB = 100 };

typedef struct world {
  kvc_allocator *a;
  kvc_req_to_token_pool *p;
  kvc_decode_channel *ch;
  int64_t *out_dev;
  int32_t rows[ROWS]; /* held rows, in grant order */
  int32_t spare;      /* a row that is not held */
  int64_t seq[ROWS];  /* tokens of rows[i] */
} world;

static uint64_t rng_state;
static uint64_t rnd(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return rng_state >> 33;
}

static int32_t *mrow(const kvc_req_to_token_pool *p, int32_t row) { return kvc__req_pool_mirror_row(p, row); }

static bool vector_on(void) { return kvc__simd_avx512(kvt_ctx); }

static void make_world(world *w, kvc_allocator_kind kind, int32_t ps, bool simd, uint64_t seed) {
  memset(w, 0, sizeof *w);
  w->p = kvt_req_pool(ROWS + 1, WIDTH);
  /* Room for every row at full width plus slack: the free list never runs short. */
  w->a = kvt_allocator(kind, (int64_t)(ROWS + 8) * (WIDTH + ps), ps, 0);
  w->a->simd = simd && vector_on();
  int32_t all[ROWS + 1] = {0}; /* 0: any free row */
  KVT_OK(kvc_req_to_token_pool_alloc(w->p, ROWS + 1, all));
  memcpy(w->rows, all, sizeof w->rows);
  w->spare = all[ROWS];
  KVT_OK(kvc_req_to_token_pool_free(w->p, w->spare));
  rng_state = seed;
  int64_t pre[ROWS] = {0};
  for (int i = 0; i < ROWS; i++) w->seq[i] = 1 + (int64_t)(rnd() % (WIDTH / 2));
  KVT_OK(kvc_allocator_alloc_extend(w->a, ROWS, pre, w->seq, NULL, w->p, w->rows, NULL, NULL, NULL, NULL));
  w->out_dev = kvt_dev_alloc(MAXB * sizeof(int64_t));
  KVT_OK(kvc_decode_channel_create(w->a, w->p, MAXB, 4, w->out_dev, &w->ch));
}

static void drop_world(world *w) {
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  kvc_decode_channel_destroy(w->ch);
  kvc_allocator_destroy(w->a);
  kvc_req_to_token_pool_destroy(w->p);
  kvt_dev_free(w->out_dev);
}

/* Everything a decode call may change. */
static void expect_same(const world *x, const world *y, const char *what) {
  for (int32_t r = 0; r <= ROWS + 1; r++)
    if (memcmp(mrow(x->p, r), mrow(y->p, r), WIDTH * sizeof(int32_t))) fail_msg("%s: mirror row %d differs", what, r);
  if (memcmp(x->p->rowflag, y->p->rowflag, ROWS + 2)) fail_msg("%s: row flags differ", what);
  for (int32_t r = 0; r <= ROWS + 1; r++)
    if (x->p->rowflag[r] & KVC__ROW_MARK) fail_msg("%s: row %d left marked", what, r);
  const kvc_allocator *a = x->a, *b = y->a;
  if (memcmp(a->state, b->state, (size_t)a->num_pages + 1)) fail_msg("%s: page states differ", what);
  assert_int_equal(a->ring.count, b->ring.count);
  for (int64_t k = 0; k < a->ring.count; k++)
    if (kvc__ring_at(&a->ring, k) != kvc__ring_at(&b->ring, k))
      fail_msg("%s: free list entry %lld differs", what, (long long)k);
}

/* One decode call on both worlds (mode: bit 0 the channel, bit 1 last_locs given), the
 * same arguments for both. */
static kvc_status decode_both(world *x, world *y, int mode, size_t bs, const int64_t *seq, const int64_t *last,
                              const int32_t *rows, const char *what) {
  int64_t out_x[MAXB], out_y[MAXB];
  kvc_status st[2];
  char msg[2][512];
  world *w[2] = {x, y};
  int64_t *out[2] = {out_x, out_y};
  for (int j = 0; j < 2; j++) {
    const int64_t *l = (mode & 2) ? last : NULL;
    st[j] = (mode & 1) ? kvc_decode_channel_alloc(w[j]->ch, bs, seq, l, rows, out[j])
                       : kvc_allocator_alloc_decode(w[j]->a, bs, seq, l, w[j]->p, rows, out[j], w[j]->out_dev, NULL);
    snprintf(msg[j], sizeof msg[j], "%s", st[j] == KVC_OK ? "" : kvc_last_error(kvt_ctx));
    /* Synchronized: on a GPU the channel must not run ahead of its kernel (BUSY). */
    if (st[j] == KVC_OK && (mode & 1)) KVT_OK(kvc_decode_channel_enqueue(w[j]->ch, NULL));
    KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  }
  if (st[0] != st[1])
    fail_msg("%s: vector %s, scalar %s (%s)", what, kvc_status_name(st[0]), kvc_status_name(st[1]), msg[1]);
  if (strcmp(msg[0], msg[1])) fail_msg("%s: messages differ:\n  %s\n  %s", what, msg[0], msg[1]);
  if (st[0] == KVC_OK)
    for (size_t i = 0; i < bs; i++)
      if (out_x[i] != out_y[i])
        fail_msg("%s: request %zu slot %lld vs %lld", what, i, (long long)out_x[i], (long long)out_y[i]);
  expect_same(x, y, what);
  return st[0];
}

/* The batch: bs distinct held rows in a random order, each at its next position. */
static void pick(const world *w, size_t bs, size_t *idx, int32_t *rows, int64_t *seq, int64_t *last) {
  size_t perm[ROWS];
  for (size_t i = 0; i < ROWS; i++) perm[i] = i;
  for (size_t i = 0; i < bs; i++) {
    const size_t j = i + (size_t)(rnd() % (ROWS - i));
    const size_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
    idx[i] = perm[i];
    rows[i] = w->rows[perm[i]];
    seq[i] = w->seq[perm[i]] + 1;
    last[i] = mrow(w->p, rows[i])[seq[i] - 2];
  }
}

/* A row back to a fresh prompt: its slots freed, then prefilled again (the free list's
 * front moves; PAGED frees go to its front, TOKEN ones to its back). */
static void recycle(world *w, size_t r, int64_t len) {
  int64_t slots[WIDTH];
  const int32_t *m = mrow(w->p, w->rows[r]);
  for (int64_t t = 0; t < w->seq[r]; t++) slots[t] = m[t];
  KVT_OK(kvc_allocator_free(w->a, slots, (size_t)w->seq[r]));
  int64_t pre = 0;
  w->seq[r] = len;
  KVT_OK(kvc_allocator_alloc_extend(w->a, 1, &pre, &w->seq[r], NULL, w->p, &w->rows[r], NULL, NULL, NULL, NULL));
}

static const size_t sizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 24, 64, 100};

/* Valid steps of every size and mode, rows recycled now and then. */
static void run_valid(kvc_allocator_kind kind, int32_t ps) {
  world x, y;
  make_world(&x, kind, ps, true, 7 + (uint64_t)ps);
  make_world(&y, kind, ps, false, 7 + (uint64_t)ps);
  rng_state = 99;
  char what[96];
  for (int step = 0; step < 240; step++) {
    const size_t bs = sizes[(size_t)step % KVC__ARRAY_LEN(sizes)];
    const int mode = (step / (int)KVC__ARRAY_LEN(sizes)) % 4;
    size_t idx[MAXB];
    int32_t rows[MAXB];
    int64_t seq[MAXB], last[MAXB];
    pick(&x, bs, idx, rows, seq, last);
    snprintf(what, sizeof what, "ps %d step %d bs %zu mode %d", ps, step, bs, mode);
    KVT_OK(decode_both(&x, &y, mode, bs, seq, last, rows, what));
    for (size_t i = 0; i < bs; i++) x.seq[idx[i]] = y.seq[idx[i]] = seq[i];
    for (size_t i = 0; i < ROWS; i++)
      if (x.seq[i] >= WIDTH - 1 || rnd() % 64 == 0) {
        const int64_t len = 1 + (int64_t)(rnd() % (WIDTH / 2));
        recycle(&x, i, len);
        recycle(&y, i, len);
        expect_same(&x, &y, "recycle");
      }
  }
  drop_world(&x);
  drop_world(&y);
}

static void test_decode_simd_matches_scalar(void **state) {
  (void)state;
  print_message("      decode vector path: %s\n",
                vector_on() ? "on (AVX-512)" : "off (no AVX-512 or KVC_SIMD=0): scalar only");
  run_valid(KVC_ALLOCATOR_TOKEN, 1);
  run_valid(KVC_ALLOCATOR_PAGED, 4);
  run_valid(KVC_ALLOCATOR_PAGED, 8);
  run_valid(KVC_ALLOCATOR_PAGED, 16);
  run_valid(KVC_ALLOCATOR_PAGED, 64);
  run_valid(KVC_ALLOCATOR_PAGED, 12);
}

enum {
  E_SEQ0,
  E_SEQ_WIDE,
  E_ROW0,
  E_ROW_HIGH,
  E_ROW_NEG,
  E_ROW_FREE,
  E_DUP_PREV,
  E_DUP_STEP,
  E_LAST_OFF,
  E_LAST_PAGE0,
  E_LAST_PAST,
  E_MIRROR_OFF,
  E_PAGE_GFREE,
  E_PAGE_GSEG,
  E_PAGE_FREE,
  E_KINDS
};

/* Makes request `at` of the batch fail (or, for a last_loc error at a request that opens
 * a page, pass) by error `e`; white-box changes go to both worlds and are put back. */
static void run_error(world *x, world *y, int mode, size_t bs, size_t at, int e) {
  size_t idx[MAXB];
  int32_t rows[MAXB];
  int64_t seq[MAXB], last[MAXB];
  pick(x, bs, idx, rows, seq, last);
  const int32_t row = rows[at];
  const int64_t page = last[at] / x->a->ps;
  int32_t *mx = mrow(x->p, row) + seq[at] - 2;
  int32_t *my = mrow(y->p, row) + seq[at] - 2;
  uint8_t saved = 0;
  switch (e) {
  case E_SEQ0: seq[at] = 0; break;
  case E_SEQ_WIDE: seq[at] = WIDTH + 1; break;
  case E_ROW0: rows[at] = 0; break;
  case E_ROW_HIGH: rows[at] = ROWS + 2; break;
  case E_ROW_NEG: rows[at] = -5; break;
  case E_ROW_FREE: rows[at] = x->spare; break;
  case E_DUP_PREV: rows[at] = rows[at ? at - 1 : bs - 1]; break; /* in the step unless at % 8 == 0 */
  case E_DUP_STEP: rows[at] = rows[(at + 8) % bs]; break;        /* a step apart where bs > 8 */
  case E_LAST_OFF: last[at] += 1; break;
  case E_LAST_PAGE0: last[at] = 1; break;
  case E_LAST_PAST: last[at] = (x->a->num_pages + 1) * x->a->ps + seq[at] % x->a->ps; break;
  case E_MIRROR_OFF: *mx += 1, *my += 1; break;
  case E_PAGE_GFREE:
  case E_PAGE_GSEG:
  case E_PAGE_FREE:
    saved = x->a->state[page];
    x->a->state[page] = y->a->state[page] = e == E_PAGE_FREE
                                                ? (uint8_t)KVC__PG_FREE
                                                : (uint8_t)(saved | (e == E_PAGE_GFREE ? KVC__PG_GFREE : KVC__PG_GSEG));
    break;
  default: break;
  }
  char what[128];
  snprintf(what, sizeof what, "ps %d mode %d bs %zu error %d at request %zu", x->a->ps, mode, bs, e, at);
  const kvc_status st = decode_both(x, y, mode, bs, seq, last, rows, what);
  if (e == E_MIRROR_OFF) *mx -= 1, *my -= 1;
  if (e >= E_PAGE_GFREE) x->a->state[page] = y->a->state[page] = saved;
  /* Errors a request always reports (the last_loc ones only when it continues a page
   * and reads that last_loc); a duplicate of itself (bs 1) is no duplicate. */
  const bool cont = (seq[at] - 1) % x->a->ps != 0;
  const bool reads = e == E_MIRROR_OFF ? !(mode & 2) : e >= E_PAGE_GFREE ? true : (mode & 2) != 0;
  const size_t twin = e == E_DUP_PREV ? (at ? at - 1 : bs - 1) : (at + 8) % bs;
  const bool must_fail = e <= E_ROW_FREE || (e <= E_DUP_STEP && twin != at) || (e >= E_LAST_OFF && cont && reads);
  if (must_fail && st == KVC_OK) fail_msg("%s: succeeded", what);
  if (st == KVC_OK)
    for (size_t i = 0; i < bs; i++) {
      for (size_t j = 0; j < ROWS; j++)
        if (x->rows[j] == rows[i]) x->seq[j] = y->seq[j] = seq[i];
    }
}

static void run_errors(int32_t ps) {
  world x, y;
  make_world(&x, ps == 1 ? KVC_ALLOCATOR_TOKEN : KVC_ALLOCATOR_PAGED, ps, true, 31 + (uint64_t)ps);
  make_world(&y, ps == 1 ? KVC_ALLOCATOR_TOKEN : KVC_ALLOCATOR_PAGED, ps, false, 31 + (uint64_t)ps);
  rng_state = 5;
  /* A page made FREE or group-recorded for one call would fail check mode's audit after a
   * call that succeeds (a request that opens a page does not read it). */
  const int kinds = kvc_context_check_mode(kvt_ctx) ? E_PAGE_GFREE : E_KINDS;
  static const size_t bss[] = {1, 7, 8, 9, 16, 17, 24};
  for (size_t b = 0; b < KVC__ARRAY_LEN(bss); b++)
    for (int mode = 0; mode < 4; mode++)
      for (int e = 0; e < kinds; e++)
        for (size_t at = 0; at < bss[b]; at++) {
          run_error(&x, &y, mode, bss[b], at, e);
          for (size_t i = 0; i < ROWS; i++)
            if (x.seq[i] >= WIDTH - 1) {
              recycle(&x, i, 1 + (int64_t)(rnd() % 8));
              recycle(&y, i, x.seq[i]);
            }
        }
  drop_world(&x);
  drop_world(&y);
}

static void test_decode_simd_errors_at_every_lane(void **state) {
  (void)state;
  run_errors(1);
  run_errors(4);
  run_errors(16);
  run_errors(64);
}

/* The test can fail: a world whose vector path gives a different slot is caught. */
static void test_decode_simd_compare_catches_a_difference(void **state) {
  (void)state;
  world x, y;
  make_world(&x, KVC_ALLOCATOR_PAGED, 16, true, 3);
  make_world(&y, KVC_ALLOCATOR_PAGED, 16, false, 3);
  int32_t *m = mrow(x.p, x.rows[0]);
  m[WIDTH - 1] ^= 1;
  bool differs = false;
  for (int32_t r = 0; r <= ROWS + 1 && !differs; r++)
    differs = memcmp(mrow(x.p, r), mrow(y.p, r), WIDTH * sizeof(int32_t)) != 0;
  assert_true(differs);
  m[WIDTH - 1] ^= 1;
  expect_same(&x, &y, "restored");
  drop_world(&x);
  drop_world(&y);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_decode_simd_compare_catches_a_difference),
    cmocka_unit_test(test_decode_simd_matches_scalar),
    cmocka_unit_test(test_decode_simd_errors_at_every_lane),
};
KVT_MAIN("decode_simd", tests)
