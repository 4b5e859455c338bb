/* test_kv_move.c — kvc_kv_pool_move: one launch over every buffer, SGLang's semantics
 * (chunks of 256 / 128 pairs in order, each a simultaneous copy) for overlapping src/tgt
 * (permutation cycles), disjoint sets, V wider than K, FP4 scale
 * regions, NSA index pages, bounds, int32/int64, N = 0/1/large. */
#include "kv_test_util.h"

/* Snapshot of every buffer of the pool. */
typedef struct snap {
  int nb;
  uint8_t *buf[160];
  kvc_buffer_desc d[160];
} snap;

static void take(kvc_kv_pool *p, snap *s) {
  s->nb = kvc_kv_pool_num_buffers(p);
  assert_true(s->nb <= 160);
  for (int i = 0; i < s->nb; i++) {
    memset(&s->d[i], 0, sizeof s->d[i]);
    s->d[i].struct_size = sizeof s->d[i];
    KVT_OK(kvc_kv_pool_describe(p, i, &s->d[i]));
    s->buf[i] = malloc((size_t)s->d[i].total_bytes);
    kvt_d2h(s->buf[i], s->d[i].data, (size_t)s->d[i].total_bytes);
  }
}
static void drop(snap *s) {
  for (int i = 0; i < s->nb; i++) free(s->buf[i]);
}

/* Applies the move to a snapshot: chunks of `chunk` locs in order, each one a
 * simultaneous copy (reads the state left by the previous chunks). chunk >= n: one
 * simultaneous copy. */
static void expect_move(const snap *before, snap *want, const int64_t *tgt, const int64_t *src, size_t n, int ps,
                        size_t chunk) {
  for (int b = 0; b < before->nb; b++) {
    const kvc_buffer_desc *d = &before->d[b];
    memcpy(want->buf[b], before->buf[b], (size_t)d->total_bytes);
    uint8_t *cur = malloc((size_t)d->total_bytes);
    for (size_t c0 = 0; c0 < n; c0 += chunk) {
      const size_t c1 = c0 + chunk < n ? c0 + chunk : n;
      memcpy(cur, want->buf[b], (size_t)d->total_bytes);
      if (d->region == KVC_REGION_INDEX_K) {
        const int64_t pb = d->bytes_per_page, pages = d->shape[0];
        for (size_t i = c0; i < c1; i++) {
          if (src[i] < 0 || tgt[i] < 0 || src[i] >= pages * ps || tgt[i] >= pages * ps) continue;
          int64_t sp = src[i] / ps, so = src[i] % ps, tp = tgt[i] / ps, to = tgt[i] % ps;
          memcpy(want->buf[b] + tp * pb + to * 128, cur + sp * pb + so * 128, 128);
          memcpy(want->buf[b] + tp * pb + ps * 128 + to * 4, cur + sp * pb + ps * 128 + so * 4, 4);
        }
        continue;
      }
      const int64_t rb = d->bytes_per_token, rows = d->shape[0];
      for (size_t i = c0; i < c1; i++) {
        if (src[i] < 0 || tgt[i] < 0 || src[i] >= rows || tgt[i] >= rows) continue;
        memcpy(want->buf[b] + tgt[i] * rb, cur + src[i] * rb, (size_t)rb);
      }
    }
    free(cur);
  }
}

/* SGLang's chunks (kv_move.c): 256 pairs, 128 when the first region's rows are 8192
 * bytes or wider; each a simultaneous copy, in order. */
static size_t move_chunk(int64_t first_row_bytes) { return first_row_bytes >= 8192 ? 128 : 256; }

static void run_move(kvc_kv_pool *p, const int64_t *tgt, const int64_t *src, size_t n, kvc_index_type lt, int ps,
                     kvt_rng *r) {
  kvt_fill_pool(p, r);
  snap before, want, got;
  take(p, &before);
  take(p, &want);
  expect_move(&before, &want, tgt, src, n, ps, move_chunk(before.d[0].bytes_per_token));
  size_t es = lt == KVC_INDEX_I64 ? 8 : 4;
  void *ht = malloc(n * es + 8), *hs = malloc(n * es + 8);
  for (size_t i = 0; i < n; i++) {
    if (es == 8) {
      ((int64_t *)ht)[i] = tgt[i];
      ((int64_t *)hs)[i] = src[i];
    } else {
      ((int32_t *)ht)[i] = (int32_t)tgt[i];
      ((int32_t *)hs)[i] = (int32_t)src[i];
    }
  }
  void *dt = kvt_dev_alloc(n * es + 8), *ds = kvt_dev_alloc(n * es + 8);
  kvt_h2d(dt, ht, n * es);
  kvt_h2d(ds, hs, n * es);
  KVT_OK(kvc_kv_pool_move(p, dt, ds, lt, n, NULL));
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  take(p, &got);
  for (int b = 0; b < got.nb; b++)
    if (memcmp(got.buf[b], want.buf[b], (size_t)got.d[b].total_bytes))
      fail_msg("buffer %d (region %d layer %d) differs after move of n = %zu", b, got.d[b].region, got.d[b].layer_id,
               n);
  drop(&before);
  drop(&want);
  drop(&got);
  free(ht);
  free(hs);
  kvt_dev_free(dt);
  kvt_dev_free(ds);
}

static void test_move_permutation_cycle_is_simultaneous(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  kvc_kv_pool *p = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_BF16, 2, 16, 48, 200, 3, 1); /* V wider than K */
  /* cycle 1 -> 2 -> 3 -> ... -> 50 -> 1, plus shifted overlapping ranges */
  int64_t t[60], s[60];
  for (int i = 0; i < 50; i++) {
    s[i] = 1 + i;
    t[i] = 1 + (i + 1) % 50;
  }
  for (int i = 50; i < 60; i++) {
    s[i] = 100 + i;
    t[i] = 101 + i;
  }
  run_move(p, t, s, 60, KVC_INDEX_I64, 1, &r);
  run_move(p, t, s, 60, KVC_INDEX_I32, 1, &r);
  run_move(p, t, s, 1, KVC_INDEX_I32, 1, &r);
  run_move(p, t, s, 0, KVC_INDEX_I32, 1, &r);
  /* out of range slots are skipped; slot 0 and the last slot move */
  int64_t t2[4] = {0, 200, 201, -1}, s2[4] = {200, 0, 5, 6};
  run_move(p, t2, s2, 4, KVC_INDEX_I64, 1, &r);
  kvc_kv_pool_destroy(p);
}

static void test_move_large_n_swaps(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  kvc_kv_pool *p = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_FP8_E4M3, 1, 24, 40, 9000, 2, 1);
  const size_t sizes[2] = {6000, 8192}; /* 24 and 32 chunks, each seeing the earlier ones */
  int64_t *t = malloc(8192 * 8), *s = malloc(8192 * 8);
  for (int k = 0; k < 2; k++) {
    size_t n = sizes[k];
    for (size_t i = 0; i < n; i++) { /* swap of two halves */
      s[i] = (int64_t)i + 1;
      t[i] = (int64_t)((i + n / 2) % n) + 1;
    }
    run_move(p, t, s, n, KVC_INDEX_I32, 1, &r);
  }
  free(t);
  free(s);
  kvc_kv_pool_destroy(p);
}

static void test_move_fp4_and_odd_rows(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  kvc_kv_pool *p = kvt_mha_pool(KVC_KV_MHA_FP4, KVC_DTYPE_BF16, 1, 16, 0, 64, 2, 1); /* 8 B rows + 1 B scales */
  int64_t t[5] = {1, 2, 3, 4, 64}, s[5] = {2, 3, 1, 60, 4};
  run_move(p, t, s, 5, KVC_INDEX_I64, 1, &r);
  kvc_kv_pool_destroy(p);
  p = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_FP8_E5M2, 1, 1, 3, 64, 2, 1); /* 1-byte K, 3-byte V */
  run_move(p, t, s, 5, KVC_INDEX_I32, 1, &r);
  kvc_kv_pool_destroy(p);
}

static void test_move_nsa_index_pages(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  kvc_kv_pool *p = kvt_nsa_pool(64, 16, 256, 2);
  int64_t t[4] = {64, 65, 130, 200}, s[4] = {65, 64, 3, 129};
  run_move(p, t, s, 4, KVC_INDEX_I64, 64, &r);
  kvc_kv_pool_destroy(p);
}

/* Many tiles per CTA: 16 layers of 512-byte K and 768-byte V rows, a 1024-cycle plus a
 * reversed overlapping range (4 chunks, each seeing the earlier ones' writes), then
 * n = 8192 half swaps on 1024-byte rows. */
static void test_move_pipelined_many_tiles(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  kvc_kv_pool *p = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_BF16, 2, 128, 192, 2100, 16, 1);
  int64_t *t = malloc(8192 * 8), *s = malloc(8192 * 8);
  for (int i = 0; i < 1024; i++) { /* cycle over 1..1024, every target also a source */
    s[i] = 1 + i;
    t[i] = 1 + (i + 7) % 1024;
  }
  run_move(p, t, s, 1024, KVC_INDEX_I32, 1, &r);
  for (int i = 0; i < 1024; i++) { /* reverse of 1000..2023 onto 1500..2523 (partly out of range) */
    s[i] = 1000 + i;
    t[i] = 1500 + (1023 - i);
  }
  run_move(p, t, s, 1024, KVC_INDEX_I64, 1, &r);
  kvc_kv_pool_destroy(p);
  p = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_BF16, 4, 128, 128, 8200, 8, 1);
  for (int i = 0; i < 8192; i++) {
    s[i] = i + 1;
    t[i] = (i + 4096) % 8192 + 1;
  }
  run_move(p, t, s, 8192, KVC_INDEX_I64, 1, &r);
  kvc_kv_pool_destroy(p);
  free(t);
  free(s);
}

/* Two to three tiles per CTA at N < 8 chunks, where the launcher takes the fused variant:
 * 64 layers of 2048-byte K rows (16-byte accesses) and 2040-byte V rows (8-byte), 1024
 * tiles of 256 bytes against at most 3 x 132 resident CTAs on an H200 (fewer SMs: more
 * tiles each). A CTA's next tile is read while its current one is written, within a chunk
 * and from the last tile of chunk c to the first of chunk c + 1; K and V tiles alternate
 * along a CTA, so the access widths differ between neighbours (the barrier path). The
 * pairs: a cycle over 1..520 (3 chunks, each reading what the previous ones wrote), then
 * a reversed overlapping range, then a swap of two 300-slot halves (two chunks, the
 * second undoing what it can of the first). CUDA only: the host twin has no tiles, and
 * this pool is 280 MB. */
static void test_move_fused_across_chunks(void **state) {
  (void)state;
  kvt_require_cuda();
  kvt_rng r = {kvt_seed()};
  kvc_kv_pool *p = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_BF16, 1, 1024, 1020, 1100, 64, 1);
  int64_t t[600], s[600];
  for (int i = 0; i < 520; i++) {
    s[i] = 1 + i;
    t[i] = 1 + (i + 13) % 520;
  }
  run_move(p, t, s, 520, KVC_INDEX_I32, 1, &r);
  for (int i = 0; i < 520; i++) {
    s[i] = 300 + i;
    t[i] = 560 + (519 - i);
  }
  run_move(p, t, s, 520, KVC_INDEX_I64, 1, &r);
  for (int i = 0; i < 600; i++) {
    s[i] = 1 + i;
    t[i] = 1 + (i + 300) % 600;
  }
  run_move(p, t, s, 600, KVC_INDEX_I64, 1, &r);
  kvc_kv_pool_destroy(p);
}

/* n pairs of 2n distinct slots from [1, rows) (rows: the pool's row count), with every
 * 97th pair out of range on one side and every 89th pair a self copy (tgt == src): no
 * target is another pair's source and no target repeats, so the result is defined. */
static void disjoint_pairs(kvt_rng *r, int64_t rows, size_t n, int64_t *tgt, int64_t *src) {
  int64_t *perm = malloc((size_t)rows * 8);
  for (int64_t i = 0; i < rows; i++) perm[i] = i;
  assert_true((int64_t)(2 * n) < rows);
  for (size_t i = 0; i < 2 * n; i++) { /* partial Fisher-Yates over [1, rows) */
    const int64_t j = 1 + (int64_t)i + (int64_t)(kvt_next(r) % (uint64_t)(rows - 1 - (int64_t)i));
    const int64_t t = perm[1 + i];
    perm[1 + i] = perm[j];
    perm[j] = t;
  }
  for (size_t i = 0; i < n; i++) {
    src[i] = perm[1 + i];
    tgt[i] = perm[1 + n + i];
    if (i % 97 == 5) src[i] = -1;
    if (i % 97 == 11) tgt[i] = rows + 3;
    if (i % 89 == 7) tgt[i] = src[i];
  }
  free(perm);
}

static void test_move_disjoint_sets(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  int64_t *t = malloc(8192 * 8), *s = malloc(8192 * 8);
  /* V rows wider than K rows, 4 layers */
  kvc_kv_pool *p = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_BF16, 2, 128, 192, 4200, 4, 1);
  const size_t sizes[5] = {1, 2, 64, 1000, 2048};
  for (int k = 0; k < 5; k++) {
    disjoint_pairs(&r, 4201, sizes[k], t, s);
    run_move(p, t, s, sizes[k], k % 2 ? KVC_INDEX_I32 : KVC_INDEX_I64, 1, &r);
    if (sizes[k] < 2) continue;
    /* the same sets with one overlap (the last target is the first source): staged */
    t[sizes[k] - 1] = s[0] >= 0 ? s[0] : s[1];
    run_move(p, t, s, sizes[k], KVC_INDEX_I64, 1, &r);
  }
  kvc_kv_pool_destroy(p);
  /* n = 8192 on 256-byte rows */
  p = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_BF16, 1, 128, 0, 16500, 1, 1);
  disjoint_pairs(&r, 16501, 8192, t, s);
  run_move(p, t, s, 8192, KVC_INDEX_I64, 1, &r);
  t[4000] = s[6000];
  run_move(p, t, s, 8192, KVC_INDEX_I32, 1, &r);
  kvc_kv_pool_destroy(p);
  /* FP4 (8-byte rows + 1-byte scale planes) and NSA (index-K keys and scales per slot) */
  p = kvt_mha_pool(KVC_KV_MHA_FP4, KVC_DTYPE_BF16, 1, 16, 0, 300, 2, 1);
  disjoint_pairs(&r, 301, 100, t, s);
  run_move(p, t, s, 100, KVC_INDEX_I32, 1, &r);
  kvc_kv_pool_destroy(p);
  p = kvt_nsa_pool(64, 16, 512, 2);
  disjoint_pairs(&r, 512 + 64, 200, t, s); /* rows: size + one padding page */
  run_move(p, t, s, 200, KVC_INDEX_I64, 64, &r);
  kvc_kv_pool_destroy(p);
  free(t);
  free(s);
}

/* Edges of the device's disjointness verdict (kernels/kv_move.cu, direct path): a
 * repeated target in a later chunk (defined: the later chunk wins, so it must be staged),
 * a slot of 2^31 and more (skipped everywhere), and n beyond the set's 8192 (staged). */
static void test_move_direct_verdict_edges(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  int64_t *t = malloc(9000 * 8), *s = malloc(9000 * 8);
  kvc_kv_pool *p = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_BF16, 8, 128, 0, 3000, 4, 1); /* 2 KB rows */
  disjoint_pairs(&r, 3001, 600, t, s);
  run_move(p, t, s, 600, KVC_INDEX_I64, 1, &r);
  t[500] = t[10]; /* chunks 0 and 1 write the same row */
  run_move(p, t, s, 600, KVC_INDEX_I64, 1, &r);
  disjoint_pairs(&r, 3001, 600, t, s);
  s[3] = INT64_C(1) << 31;
  t[4] = (INT64_C(1) << 31) + 7;
  t[5] = s[3]; /* same value as another pair's (invalid) source: nothing is read from it */
  run_move(p, t, s, 600, KVC_INDEX_I64, 1, &r);
  kvc_kv_pool_destroy(p);
  p = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_BF16, 1, 8, 0, 18100, 2, 1); /* 16-byte rows */
  disjoint_pairs(&r, 18101, 9000, t, s);
  run_move(p, t, s, 9000, KVC_INDEX_I32, 1, &r);
  kvc_kv_pool_destroy(p);
  free(t);
  free(s);
}

/* Rows of 8192 bytes (32 heads x 128 bf16): SGLang's cap drops to 128 pairs per chunk.
 * A 300-cycle then shows where the chunks end: pair 128 reads the row pair 127 wrote. */
static void test_move_chunks_of_128_for_wide_rows(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  kvc_kv_pool *p = kvt_mha_pool(KVC_KV_MHA, KVC_DTYPE_BF16, 32, 128, 0, 400, 1, 1);
  int64_t t[300], s[300];
  for (int i = 0; i < 300; i++) {
    s[i] = 1 + i;
    t[i] = 1 + (i + 1) % 300;
  }
  run_move(p, t, s, 300, KVC_INDEX_I32, 1, &r);
  kvc_kv_pool_destroy(p);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_move_chunks_of_128_for_wide_rows),
    cmocka_unit_test(test_move_disjoint_sets),
    cmocka_unit_test(test_move_direct_verdict_edges),
    cmocka_unit_test(test_move_permutation_cycle_is_simultaneous),
    cmocka_unit_test(test_move_large_n_swaps),
    cmocka_unit_test(test_move_fp4_and_odd_rows),
    cmocka_unit_test(test_move_nsa_index_pages),
    cmocka_unit_test(test_move_pipelined_many_tiles),
    cmocka_unit_test(test_move_fused_across_chunks),
};

KVT_MAIN("kv_move", tests)
