/*
 * test_tp_ranks.c — tensor parallelism: N ranks (N contexts on the test's backend, as N
 * GPUs would each have one) fed the same seeded trace of extend / decode / release calls
 * through flows make bit-identical decisions: the same status for every call, the same
 * out_cache_loc slots, request rows and lengths, the same req_to_token rows (host mirror
 * and device table) and free counts. Their KV pools come from
 * kvc_kv_pool_config_for_tp_rank and hold 1/N of the model's KV bytes each.
 */
#include "transfer_test_util.h"

#include <stdbool.h>

#define RANKS 4
#define MAX_LIVE 24
#define WIDTH 512
#define OUT_CAP (1 << 14)

typedef struct rank {
  kvc_context *ctx;
  kvc_req_to_token_pool *reqs;
  kvc_allocator *alloc;
  kvc_flow *flow;
  kvc_kv_pool *kv;
  int64_t *out; /* device out_cache_loc */
  kvc_req_state live[MAX_LIVE];
} rank;

static void rank_open(rank *r, int ps, const kvc_kv_pool_config *model, int32_t tp_rank) {
  memset(r, 0, sizeof *r);
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  cfg.backend = kvc_context_backend(kvt_ctx);
  KVT_OK(kvc_context_create(&cfg, &r->ctx));
  kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rc.size = MAX_LIVE + 1;
  rc.max_context_len = WIDTH;
  KVT_OK(kvc_req_to_token_pool_create(r->ctx, &rc, &r->reqs));
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = ps == 1 ? KVC_ALLOCATOR_TOKEN : KVC_ALLOCATOR_PAGED;
  ac.size = 2048; /* small enough that some extends are refused */
  ac.page_size = ps;
  KVT_OK(kvc_allocator_create(r->ctx, &ac, &r->alloc));
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = ps;
  fc.req_pool = r->reqs;
  fc.allocator = r->alloc;
  KVT_OK(kvc_flow_create(r->ctx, &fc, &r->flow));
  kvc_kv_pool_config kc;
  KVT_OK(kvc_kv_pool_config_for_tp_rank(model, RANKS, tp_rank, &kc));
  r->kv = kvt_xfer_pool(r->ctx, kc);
  r->out = kvt_alloc_on(r->ctx, OUT_CAP * sizeof(int64_t));
}

static void rank_close(rank *r) {
  kvc_memory_free(r->ctx, r->out);
  kvc_kv_pool_destroy(r->kv);
  kvc_flow_destroy(r->flow);
  kvc_allocator_destroy(r->alloc);
  kvc_req_to_token_pool_destroy(r->reqs);
  kvc_context_destroy(r->ctx);
}

/* Rank k's view equals rank 0's: statuses, out slots, request states, rows, counts. */
static void compare_ranks(rank *ranks, const kvc_status *st, size_t out_n, const int *idx, size_t n, int step) {
  int64_t *want = malloc((out_n + 1) * sizeof *want), *got = malloc((out_n + 1) * sizeof *got);
  if (out_n) kvt_d2h_on(ranks[0].ctx, want, ranks[0].out, out_n * sizeof *want);
  for (int k = 1; k < RANKS; k++) {
    if (st[k] != st[0])
      fail_msg("step %d: rank %d got %s, rank 0 %s", step, k, kvc_status_name(st[k]), kvc_status_name(st[0]));
    if (st[0] == KVC_OK && out_n) {
      kvt_d2h_on(ranks[k].ctx, got, ranks[k].out, out_n * sizeof *got);
      for (size_t i = 0; i < out_n; i++)
        if (got[i] != want[i])
          fail_msg("step %d: rank %d out_cache_loc[%zu] = %lld, rank 0 %lld (seed %llu)", step, k, i, (long long)got[i],
                   (long long)want[i], (unsigned long long)kvt_seed());
    }
    for (size_t i = 0; i < n; i++) {
      const kvc_req_state *a = &ranks[0].live[idx[i]], *b = &ranks[k].live[idx[i]];
      if (a->req_row != b->req_row || a->seq_len != b->seq_len || a->kv_allocated_len != b->kv_allocated_len ||
          a->kv_committed_len != b->kv_committed_len)
        fail_msg("step %d: rank %d request %d state differs", step, k, idx[i]);
    }
    assert_int_equal(kvc_allocator_available_size(ranks[k].alloc), kvc_allocator_available_size(ranks[0].alloc));
    assert_int_equal(kvc_req_to_token_pool_available(ranks[k].reqs), kvc_req_to_token_pool_available(ranks[0].reqs));
  }
  free(want);
  free(got);
}

/* Every row, host mirror and device table, identical across ranks. */
static void compare_tables(rank *ranks, int step) {
  const size_t cells = (size_t)(MAX_LIVE + 1) * WIDTH;
  int32_t *want = malloc(cells * 4), *got = malloc(cells * 4);
  kvt_d2h_on(ranks[0].ctx, want, kvc_req_to_token_pool_table(ranks[0].reqs), cells * 4);
  for (int k = 1; k < RANKS; k++) {
    kvt_d2h_on(ranks[k].ctx, got, kvc_req_to_token_pool_table(ranks[k].reqs), cells * 4);
    if (memcmp(got, want, cells * 4)) fail_msg("step %d: rank %d req_to_token table differs", step, k);
    for (int32_t row = 1; row <= MAX_LIVE; row++)
      if (memcmp(kvc_req_to_token_pool_row(ranks[k].reqs, row), kvc_req_to_token_pool_row(ranks[0].reqs, row),
                 WIDTH * 4))
        fail_msg("step %d: rank %d host row %d differs", step, k, row);
  }
  free(want);
  free(got);
}

static void run_trace(int ps) {
  kvt_rng rng = {kvt_seed() ^ (uint64_t)ps};
  kvc_kv_pool_config model = kvt_mha_config(KVC_KV_MHA, KVC_DTYPE_BF16, 8, 16, 0, 4096, 2, ps);
  rank ranks[RANKS];
  for (int k = 0; k < RANKS; k++) rank_open(&ranks[k], ps, &model, k);
  /* Per-rank KV bytes are the model's over RANKS. */
  kvc_kv_pool *whole = kvt_xfer_pool(kvt_ctx, model);
  size_t wk, wv, rk, rv;
  KVT_OK(kvc_kv_pool_size_bytes(whole, &wk, &wv));
  KVT_OK(kvc_kv_pool_size_bytes(ranks[0].kv, &rk, &rv));
  assert_int_equal(rk * RANKS, wk);
  assert_int_equal(rv * RANKS, wv);
  kvc_kv_pool_destroy(whole);

  bool in_use[MAX_LIVE] = {false};
  int64_t extended = 0, refused = 0, decoded = 0, released = 0;
  for (int step = 0; step < 60; step++) {
    /* Arrivals: up to 4 new requests of 1..200 tokens, prefilled in one extend. */
    int idx[MAX_LIVE];
    size_t n = 0, out_n = 0;
    const int arrivals = (int)kvt_range(&rng, 0, 4);
    for (int i = 0; i < MAX_LIVE && (int)n < arrivals; i++) {
      if (in_use[i]) continue;
      const int64_t len = kvt_range(&rng, 1, 200);
      for (int k = 0; k < RANKS; k++) {
        memset(&ranks[k].live[i], 0, sizeof ranks[k].live[i]);
        ranks[k].live[i].seq_len = len;
      }
      idx[n++] = i;
      out_n += (size_t)len;
    }
    kvc_status st[RANKS];
    if (n) {
      for (int k = 0; k < RANKS; k++) {
        kvc_req_state *batch[MAX_LIVE];
        for (size_t i = 0; i < n; i++) batch[i] = &ranks[k].live[idx[i]];
        st[k] = kvc_flow_alloc_for_extend(ranks[k].flow, batch, n, ranks[k].out, NULL);
      }
      compare_ranks(ranks, st, out_n, idx, n, step);
      if (st[0] == KVC_OK) {
        for (size_t i = 0; i < n; i++) in_use[idx[i]] = true;
        extended += (int64_t)n;
      } else if (st[0] == KVC_ERR_OUT_OF_SLOTS) {
        refused++;
      } else {
        fail_msg("step %d: extend -> %s: %s", step, kvc_status_name(st[0]), kvc_last_error(ranks[0].ctx));
      }
    }
    /* Decode every live request that has room in its row. */
    n = 0;
    for (int i = 0; i < MAX_LIVE; i++)
      if (in_use[i] && ranks[0].live[i].seq_len < WIDTH) idx[n++] = i;
    if (n) {
      for (int k = 0; k < RANKS; k++) {
        kvc_req_state *batch[MAX_LIVE];
        for (size_t i = 0; i < n; i++) batch[i] = &ranks[k].live[idx[i]];
        st[k] = kvc_flow_alloc_for_decode(ranks[k].flow, batch, n, 1, ranks[k].out, NULL);
      }
      compare_ranks(ranks, st, n, idx, n, step);
      if (st[0] == KVC_OK) decoded += (int64_t)n;
      else if (st[0] == KVC_ERR_OUT_OF_SLOTS) refused++; /* every rank refused: nothing changed */
      else fail_msg("step %d: decode -> %s: %s", step, kvc_status_name(st[0]), kvc_last_error(ranks[0].ctx));
    }
    /* Departures: each live request finishes with probability 1/6. */
    n = 0;
    for (int i = 0; i < MAX_LIVE; i++)
      if (in_use[i] && kvt_range(&rng, 0, 5) == 0) idx[n++] = i;
    if (n) {
      for (int k = 0; k < RANKS; k++) {
        kvc_req_state *batch[MAX_LIVE];
        for (size_t i = 0; i < n; i++) batch[i] = &ranks[k].live[idx[i]];
        st[k] = kvc_flow_release(ranks[k].flow, batch, n, 1, NULL);
      }
      compare_ranks(ranks, st, 0, idx, n, step);
      KVT_OK(st[0]);
      for (size_t i = 0; i < n; i++) in_use[idx[i]] = false;
      released += (int64_t)n;
    }
    compare_tables(ranks, step);
  }
  printf("page %d: %lld requests extended (%lld calls refused: out of slots), %lld decode tokens, %lld released\n", ps,
         (long long)extended, (long long)refused, (long long)decoded, (long long)released);
  assert_true(extended > 20 && decoded > 100 && released > 10); /* the trace did real work */
  for (int k = 0; k < RANKS; k++) rank_close(&ranks[k]);
}

static void test_ranks_agree_page_1(void **state) { (void)state, run_trace(1); }
static void test_ranks_agree_page_16(void **state) { (void)state, run_trace(16); }
static void test_ranks_agree_page_64(void **state) { (void)state, run_trace(64); }

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ranks_agree_page_1),
      cmocka_unit_test(test_ranks_agree_page_16),
      cmocka_unit_test(test_ranks_agree_page_64),
  };
  return kvt_main(argc, argv, "tp_ranks", tests, sizeof tests / sizeof tests[0]);
}
