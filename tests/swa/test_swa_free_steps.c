/* test_swa_free_steps.c — the SWA allocator's page-1 direct free (swa_free.c's
 * pass_direct) with its steps of four slots, against a model: both free lists as FIFO
 * queues and the full->SWA mapping. free, free_swa and free_evicted (and free_full) put
 * their slots and peers at the back in call order; a refused call changes nothing; every
 * alloc hands out the model's ids; host and device mappings and the audits agree. */
#include "../pool/alloc_test_util.h"
#include "alloc/swa.h"

#include <stdlib.h>
#include <string.h>

enum { NF = 120, NS = 100, QN = 1024 }; /* full and SWA side sizes, model queue length */

typedef struct model {
  kvc_swa_allocator *a;
  int64_t q[2][QN]; /* free ids, [0] full, [1] SWA */
  size_t head[2], tail[2];
  int32_t map[NF + 2]; /* the allocator's length: its last entry is -1 (never written) */
} model;

static void push(model *m, int side, int64_t id) { m->q[side][m->tail[side]++ % QN] = id; }
static int64_t pop(model *m, int side) { return m->q[side][m->head[side]++ % QN]; }

static void model_make(model *m) {
  memset(m, 0, sizeof *m);
  kvc_swa_allocator_config c = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  c.size_full = NF, c.size_swa = NS, c.page_size = 1;
  KVT_OK(kvc_swa_allocator_create(kvt_ctx, &c, &m->a));
  m->map[NF + 1] = -1;
  assert_int_equal(kvc_swa_allocator_mapping_length(m->a), NF + 2);
  for (int64_t x = 1; x <= NF; x++) push(m, 0, x);
  for (int64_t w = 1; w <= NS; w++) push(m, 1, w);
}

/* The allocator as the model: free counts, host and device mapping, audit. */
static void expect_model(const model *m) {
  assert_int_equal(kvc_swa_allocator_full_available_size(m->a), (int64_t)(m->tail[0] - m->head[0]));
  assert_int_equal(kvc_swa_allocator_swa_available_size(m->a), (int64_t)(m->tail[1] - m->head[1]));
  assert_memory_equal(kvc_swa_allocator_mapping_host(m->a), m->map, sizeof m->map);
  kvt_expect_swa_mapping_synced(m->a);
  KVT_OK(kvc_swa_allocator_check(m->a));
}

/* k slots, and one more that is freed at once: an alloc leaves both sides' backup images
 * live until a free, and the direct free (the code under test) runs only after one. */
static void alloc_k(model *m, int64_t k, int64_t *out) {
  int64_t got[NF + 1];
  KVT_OK(kvc_swa_allocator_alloc(m->a, k + 1, got, NULL, NULL));
  for (int64_t j = 0; j <= k; j++) {
    assert_int_equal(got[j], pop(m, 0));
    m->map[got[j]] = (int32_t)pop(m, 1);
  }
  KVT_OK(kvc_swa_allocator_free(m->a, got + k, 1, NULL));
  push(m, 1, m->map[got[k]]);
  push(m, 0, got[k]);
  m->map[got[k]] = 0;
  memcpy(out, got, (size_t)k * sizeof *out);
  expect_model(m);
}

enum op { OP_FREE, OP_FREE_SWA, OP_FREE_EVICTED, OP_FREE_FULL };

static kvc_status call(model *m, enum op op, const int64_t *v, size_t n) {
  switch (op) {
  case OP_FREE: return kvc_swa_allocator_free(m->a, v, n, NULL);
  case OP_FREE_SWA: return kvc_swa_allocator_free_swa(m->a, v, n, NULL);
  case OP_FREE_EVICTED: return kvc__swa_allocator_free_evicted(m->a, v, n, NULL);
  default: return kvc_swa_allocator_free_full(m->a, v, n);
  }
}

/* A good call: the allocator and the model both move (SWA peers first in each slot's
 * order, as the free lists take them; full slots in call order). */
static void good(model *m, enum op op, const int64_t *v, size_t n) {
  KVT_OK(call(m, op, v, n));
  for (size_t i = 0; i < n; i++) {
    if (op != OP_FREE_FULL && m->map[v[i]] > 0) push(m, 1, m->map[v[i]]);
    if (op != OP_FREE_FULL) m->map[v[i]] = 0;
    if (op != OP_FREE_SWA) push(m, 0, v[i]);
  }
  expect_model(m);
}

/* A refused call: not OK, and nothing changed. */
static void refused(model *m, enum op op, const int64_t *v, size_t n) {
  const kvc_status st = call(m, op, v, n);
  if (st == KVC_OK) fail_msg("op %d of %zu slots was taken", (int)op, n);
  expect_model(m);
}

static int64_t free_slot(const kvc_allocator *al) {
  for (int64_t x = 1; x <= kvc__alloc_num_pages(al); x++)
    if (al->state[x] == KVC__PG_FREE) return x;
  fail_msg("no free slot");
  return 0;
}

static void shuffle(kvt_rng *r, int64_t *v, int64_t n) {
  for (int64_t j = n - 1; j > 0; j--) {
    const int64_t q = kvt_range(r, 0, j), x = v[j];
    v[j] = v[q], v[q] = x;
  }
}

/* Every bad slot kind at every position of frees of 1..21 slots (every lane of up to
 * five steps of four, and the tails), for free, free_swa and free_evicted: a slot out of
 * range or in the state padding (NF + 1 .. 127), slot 0, negative, a free slot, a repeat
 * (of the slot before, of its step's first, of any before), a slot whose peer is gone
 * (refused by free and free_swa), and a corrupt mapping entry (a peer past the end, in
 * the SWA side's padding, negative, free, or another listed slot's). Each call is refused
 * and changes nothing; the good frees after them keep the model's order. The rings'
 * tails move each round, so steps meet the wraps. */
static void test_every_bad_slot_at_every_lane(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  model m;
  model_make(&m);
  const int64_t nh = NS - 2; /* held; slots of both sides stay free */
  int64_t held[NF], v[24];
  alloc_k(&m, nh, held);
  for (int64_t n = 1; n <= 21; n++) {
    const int64_t shift = kvt_range(&r, 0, 7);
    if (shift) { /* the tails move */
      good(&m, OP_FREE, held + nh - shift, (size_t)shift);
      alloc_k(&m, shift, held + nh - shift);
    }
    if (n % 2) shuffle(&r, held, nh); /* short runs; else the runs the allocs left */
    int32_t *const map = m.a->map;
    for (int round = 0; round < 4; round++) {
      /* round 3: free_evicted of slots whose peers are all gone (steps of unmapped slots) */
      const enum op op = round == 3 ? OP_FREE_EVICTED : (enum op)round;
      if (round == 3) good(&m, OP_FREE_SWA, held, (size_t)n);
      for (int64_t pos = 0; pos < n; pos++) {
        const int64_t bad[] = {NF + 1, 127, 128, 0, -1, INT64_MIN, INT64_MAX, (int64_t)1 << 32, free_slot(m.a->full)};
        const int nbad = (int)(sizeof bad / sizeof bad[0]);
        for (int b = 0; b < (round == 3 ? nbad + 3 : nbad + 10); b++) {
          memcpy(v, held, (size_t)n * sizeof *v);
          int32_t keep = 0;
          if (b < nbad) {
            v[pos] = bad[b];
          } else if (b < nbad + 3) { /* a repeat */
            if (!pos) continue;
            const int64_t q = b == nbad ? pos - 1 : b == nbad + 1 ? (pos / 4) * 4 : kvt_range(&r, 0, pos - 1);
            if (q >= pos) continue;
            v[pos] = v[q];
          } else { /* a corrupt peer, put back before the model looks */
            const int32_t peers[7] = {
                NS + 1, 127, -3, (int32_t)free_slot(m.a->swa), 128, 1000, pos ? map[v[kvt_range(&r, 0, pos - 1)]] : 0};
            const int k = b - nbad - 3;
            if (k == 6 && !pos) continue;
            if (k == 2 && op == OP_FREE_EVICTED) continue; /* a negative entry reads as no peer there */
            keep = map[v[pos]];
            map[v[pos]] = peers[k];
          }
          const kvc_status st = call(&m, op, v, (size_t)n);
          if (keep) map[v[pos]] = keep;
          if (st == KVC_OK)
            fail_msg("op %d, n %lld, bad kind %d at %lld: taken", (int)op, (long long)n, b, (long long)pos);
          expect_model(&m);
        }
        if (round < 2) { /* a slot whose peer is gone */
          good(&m, OP_FREE_SWA, held + pos, 1);
          refused(&m, op, held, (size_t)n);
          good(&m, OP_FREE_FULL, held + pos, 1);
          alloc_k(&m, 1, held + pos);
        }
      }
      if (round == 3) {
        good(&m, OP_FREE_FULL, held, (size_t)n);
        alloc_k(&m, n, held);
      }
    }
    /* Good frees: one of each call; free_evicted with the first slots' peers gone. */
    const enum op op = (enum op)(n % 3);
    if (op == OP_FREE_EVICTED) good(&m, OP_FREE_SWA, held, (size_t)(n / 2));
    good(&m, op, held, (size_t)n);
    if (op == OP_FREE_SWA) good(&m, OP_FREE_FULL, held, (size_t)n);
    alloc_k(&m, n, held);
  }
  kvc_swa_allocator_destroy(m.a);
}

/* Random frees against the model, the rings wrapping many times: lengths up to 80 (twenty
 * steps), in the order of allocation (long runs of consecutive slots) or shuffled (short
 * runs), inside a deferred-zero scope or not, free_evicted with some peers gone (runs of
 * unmapped slots: their own steps), and one bad slot in a quarter of them. */
static void test_random_frees_match_the_model(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  model m;
  model_make(&m);
  int64_t held[NF], v[81];
  int64_t nheld = 0;
  for (int it = 0; it < 4000; it++) {
    const int64_t room = (int64_t)(m.tail[1] - m.head[1]);
    if (room > 1 && (nheld < 16 || kvt_range(&r, 0, 2) == 0)) {
      const int64_t k = kvt_range(&r, 1, room - 1 < 80 ? room - 1 : 80);
      alloc_k(&m, k, held + nheld);
      nheld += k;
      continue;
    }
    if (kvt_range(&r, 0, 1)) shuffle(&r, held, nheld);
    const int64_t k = kvt_range(&r, 1, nheld < 80 ? nheld : 80);
    memcpy(v, held, (size_t)k * sizeof *v);
    const enum op op = (enum op)kvt_range(&r, OP_FREE, OP_FREE_EVICTED);
    if (kvt_range(&r, 0, 3) == 0) {
      const int64_t pos = kvt_range(&r, 0, k - 1);
      v[pos] = pos && kvt_range(&r, 0, 1) ? v[kvt_range(&r, 0, pos - 1)] : kvt_range(&r, 0, 1) ? 0 : NF + 1;
      refused(&m, op, v, (size_t)k);
      continue;
    }
    if (op == OP_FREE_EVICTED && kvt_range(&r, 0, 1)) { /* some peers gone first */
      const int64_t pos = kvt_range(&r, 0, k - 1);
      good(&m, OP_FREE_SWA, v + pos, (size_t)kvt_range(&r, 1, k - pos));
    }
    const bool scope = kvt_range(&r, 0, 1);
    if (scope) KVT_OK(kvc_swa_allocator_defer_zero_begin(m.a));
    KVT_OK(call(&m, op, v, (size_t)k));
    if (scope) KVT_OK(kvc_swa_allocator_defer_zero_end(m.a, NULL));
    for (int64_t i = 0; i < k; i++) {
      if (m.map[v[i]] > 0) push(&m, 1, m.map[v[i]]);
      m.map[v[i]] = 0;
      if (op != OP_FREE_SWA) push(&m, 0, v[i]);
    }
    expect_model(&m);
    if (op == OP_FREE_SWA) good(&m, OP_FREE_FULL, v, (size_t)k);
    memmove(held, held + k, (size_t)(nheld - k) * sizeof *held);
    nheld -= k;
  }
  kvc_swa_allocator_destroy(m.a);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_every_bad_slot_at_every_lane),
    cmocka_unit_test(test_random_frees_match_the_model),
};
KVT_MAIN("swa_free_steps", tests)
