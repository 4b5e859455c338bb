/* test_kv_move.c — kvc_kv_pool_move and kvc_kv_pool_move_disjoint (last part): one launch over every buffer, simultaneous-copy
 * semantics for overlapping src/tgt (permutation cycles), V wider than K, FP4 scale
 * regions, NSA index pages, bounds, int32/int64, N = 0/1/large. */
#include "kv_test_util.h"

/* Snapshot of every buffer of the pool. */
typedef struct snap {
  int nb;
  uint8_t *buf[64];
  kvc_buffer_desc d[64];
} snap;

static void take_on(kvc_context *ctx, kvc_kv_pool *p, snap *s) {
  s->nb = kvc_kv_pool_num_buffers(p);
  assert_true(s->nb <= 64);
  for (int i = 0; i < s->nb; i++) {
    memset(&s->d[i], 0, sizeof s->d[i]);
    s->d[i].struct_size = sizeof s->d[i];
    KVT_OK(kvc_kv_pool_describe(p, i, &s->d[i]));
    s->buf[i] = malloc((size_t)s->d[i].total_bytes);
    kvt_d2h_on(ctx, s->buf[i], s->d[i].data, (size_t)s->d[i].total_bytes);
  }
}
static void take(kvc_kv_pool *p, snap *s) { take_on(kvt_ctx, p, s); }
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

/* Documented semantics of kv_move.c: one simultaneous copy up to n = 6826 locs, then
 * chunks of 1365 (W = 64) in order. */
static size_t move_chunk(size_t n) { return n * 24 <= 160 * 1024 ? (n ? n : 1) : (96 * 1024) / 72; }

static void run_move(kvc_kv_pool *p, const int64_t *tgt, const int64_t *src, size_t n, kvc_index_type lt, int ps,
                     kvt_rng *r) {
  kvt_fill_pool(p, r);
  snap before, want, got;
  take(p, &before);
  take(p, &want);
  expect_move(&before, &want, tgt, src, n, ps, move_chunk(n));
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
      fail_msg("buffer %d (region %d layer %d) differs after move of n = %zu", b, got.d[b].region, got.d[b].layer_id, n);
  drop(&before); drop(&want); drop(&got);
  free(ht); free(hs);
  kvt_dev_free(dt); kvt_dev_free(ds);
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
  const size_t sizes[2] = {6000, 8192}; /* simultaneous (W = 16), then chunked */
  int64_t *t = malloc(8192 * 8), *s = malloc(8192 * 8);
  for (int k = 0; k < 2; k++) {
    size_t n = sizes[k];
    for (size_t i = 0; i < n; i++) { /* swap of two halves */
      s[i] = (int64_t)i + 1;
      t[i] = (int64_t)((i + n / 2) % n) + 1;
    }
    run_move(p, t, s, n, KVC_INDEX_I32, 1, &r);
  }
  free(t); free(s);
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
  kvc_kv_pool_config c = KVC_KV_POOL_CONFIG_INIT;
  c.kind = KVC_KV_NSA;
  c.dtype = KVC_DTYPE_BF16;
  c.kv_lora_rank = 64;
  c.qk_rope_head_dim = 16;
  c.size = 256;
  c.page_size = 64;
  c.layer_num = 2;
  kvc_kv_pool *p = NULL;
  KVT_OK(kvc_kv_pool_create(kvt_ctx, &c, &p));
  int64_t t[4] = {64, 65, 130, 200}, s[4] = {65, 64, 3, 129};
  run_move(p, t, s, 4, KVC_INDEX_I64, 64, &r);
  kvc_kv_pool_destroy(p);
}


/* Many tiles per CTA (the persistent grid): 16 layers of 512-byte K and 768-byte V rows,
 * a 1024-cycle plus a reversed overlapping range (one simultaneous copy), then n = 8192
 * half swaps (chunked) on 1024-byte rows. */
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
  free(t); free(s);
}

/* --- kvc_kv_pool_move_disjoint ----------------------------------------------------- */

/* Writes a snapshot back into the pool's buffers. */
static void put_on(kvc_context *ctx, const snap *s) {
  for (int b = 0; b < s->nb; b++) kvt_h2d_on(ctx, s->d[b].data, s->buf[b], (size_t)s->d[b].total_bytes);
}

/* Fills the target rows (every region; NSA index: the slot's 128 key + 4 scale bytes)
 * of a snapshot with 0xA5, so that a row the move forgets to write shows. */
static void poison_targets(snap *s, const int64_t *tgt, size_t n, int ps) {
  for (int b = 0; b < s->nb; b++) {
    const kvc_buffer_desc *d = &s->d[b];
    for (size_t i = 0; i < n; i++) {
      if (d->region == KVC_REGION_INDEX_K) {
        const int64_t pb = d->bytes_per_page;
        if (tgt[i] < 0 || tgt[i] >= d->shape[0] * ps) continue;
        const int64_t tp = tgt[i] / ps, to = tgt[i] % ps;
        memset(s->buf[b] + tp * pb + to * 128, 0xA5, 128);
        memset(s->buf[b] + tp * pb + ps * 128 + to * 4, 0xA5, 4);
      } else if (tgt[i] >= 0 && tgt[i] < d->shape[0]) {
        memset(s->buf[b] + tgt[i] * d->bytes_per_token, 0xA5, (size_t)d->bytes_per_token);
      }
    }
  }
}

static void *up_locs(kvc_context *ctx, const int64_t *v, size_t n, kvc_index_type lt) {
  const size_t es = lt == KVC_INDEX_I64 ? 8 : 4;
  uint8_t *h = malloc(n * es + 8);
  for (size_t i = 0; i < n; i++) {
    if (es == 8) memcpy(h + i * 8, &v[i], 8);
    else {
      const int32_t x = (int32_t)v[i];
      memcpy(h + i * 4, &x, 4);
    }
  }
  void *d = kvt_alloc_on(ctx, n * es + 8);
  kvt_h2d_on(ctx, d, h, n * es);
  free(h);
  return d;
}

/* n src and n tgt slots, all 2n distinct, drawn from [0, rows); every 97th pair gets an
 * out-of-range source or target (-1, rows, rows + 5: skipped). */
static void disjoint_slots(kvt_rng *r, int64_t rows, size_t n, int64_t *tgt, int64_t *src) {
  int64_t *perm = malloc((size_t)rows * 8);
  for (int64_t i = 0; i < rows; i++) perm[i] = i;
  assert_true((int64_t)(2 * n) <= rows);
  for (size_t i = 0; i < 2 * n; i++) {
    const int64_t j = (int64_t)i + (int64_t)(kvt_next(r) % (uint64_t)(rows - (int64_t)i));
    const int64_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  for (size_t i = 0; i < n; i++) {
    src[i] = perm[i];
    tgt[i] = perm[n + i];
    if (i % 97 == 5) src[i] = -1;
    if (i % 97 == 11) tgt[i] = rows;
    if (i % 97 == 17) src[i] = rows + 5;
  }
  free(perm);
}

/* One disjoint move from the pool's current contents with poisoned targets: the direct
 * move, then (same starting bytes) the staged move, both against the reference. */
static void run_disjoint(kvc_kv_pool *p, const int64_t *tgt, const int64_t *src, size_t n, kvc_index_type lt, int ps) {
  snap before, want, got;
  take(p, &before);
  poison_targets(&before, tgt, n, ps);
  put_on(kvt_ctx, &before);
  take(p, &want);
  expect_move(&before, &want, tgt, src, n, ps, n ? n : 1);
  void *dt = up_locs(kvt_ctx, tgt, n, lt), *ds = up_locs(kvt_ctx, src, n, lt);
  for (int staged = 0; staged < 2; staged++) {
    if (staged) put_on(kvt_ctx, &before);
    if (staged) KVT_OK(kvc_kv_pool_move(p, dt, ds, lt, n, NULL));
    else KVT_OK(kvc_kv_pool_move_disjoint(p, dt, ds, lt, n, NULL));
    KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
    take(p, &got);
    for (int b = 0; b < got.nb; b++)
      if (memcmp(got.buf[b], want.buf[b], (size_t)got.d[b].total_bytes))
        fail_msg("%s move: buffer %d (region %d layer %d) differs, n = %zu, %s locs", staged ? "staged" : "disjoint", b,
                 got.d[b].region, got.d[b].layer_id, n, lt == KVC_INDEX_I64 ? "int64" : "int32");
    drop(&got);
  }
  drop(&before); drop(&want);
  kvt_dev_free(dt); kvt_dev_free(ds);
}

#define DJ_SIZE 20480 /* >= 2 x 10000 slots */

/* The pool kinds of the tests above, with room for 10000 disjoint pairs. */
static kvc_kv_pool *dj_pool_on(kvc_context *ctx, int k, int *ps) {
  kvc_kv_pool_config c = KVC_KV_POOL_CONFIG_INIT;
  c.size = DJ_SIZE;
  c.page_size = 1;
  c.layer_num = 2;
  switch (k) {
  case 0: c.kind = KVC_KV_MHA; c.dtype = KVC_DTYPE_BF16; c.head_num = 2; c.head_dim = 16; c.v_head_dim = 48; c.layer_num = 3; break;
  case 1: c.kind = KVC_KV_MHA; c.dtype = KVC_DTYPE_FP8_E4M3; c.head_num = 1; c.head_dim = 24; c.v_head_dim = 40; break;
  case 2: c.kind = KVC_KV_MHA_FP4; c.dtype = KVC_DTYPE_BF16; c.head_num = 1; c.head_dim = 16; break;
  case 3: c.kind = KVC_KV_MHA; c.dtype = KVC_DTYPE_FP8_E5M2; c.head_num = 1; c.head_dim = 1; c.v_head_dim = 3; break;
  case 4: c.kind = KVC_KV_NSA; c.dtype = KVC_DTYPE_BF16; c.kv_lora_rank = 64; c.qk_rope_head_dim = 16; c.page_size = 64; break;
  default: c.kind = KVC_KV_MHA; c.dtype = KVC_DTYPE_BF16; c.head_num = 2; c.head_dim = 128; c.v_head_dim = 192; break;
  }
  *ps = (int)c.page_size;
  kvc_kv_pool *p = NULL;
  if (kvc_kv_pool_create(ctx, &c, &p) != KVC_OK) fail_msg("pool kind %d: %s", k, kvc_last_error(ctx));
  return p;
}
#define DJ_KINDS 6

static void test_move_disjoint_equals_staged(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  const size_t ns[] = {0, 1, 7, 1000, 10000};
  int64_t *t = malloc(10000 * 8), *s = malloc(10000 * 8);
  for (int k = 0; k < DJ_KINDS; k++) {
    int ps;
    kvc_kv_pool *p = dj_pool_on(kvt_ctx, k, &ps);
    kvt_fill_pool(p, &r);
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
      for (int i64 = 0; i64 < 2; i64++) {
        disjoint_slots(&r, DJ_SIZE, ns[a], t, s);
        run_disjoint(p, t, s, ns[a], i64 ? KVC_INDEX_I64 : KVC_INDEX_I32, ps);
      }
    }
    /* slot 0 and the last slot of the pool */
    int64_t t2[2] = {0, DJ_SIZE + ps - 1}, s2[2] = {DJ_SIZE + ps - 2, 1};
    run_disjoint(p, t2, s2, 2, KVC_INDEX_I64, ps);
    kvc_kv_pool_destroy(p);
  }
  free(t); free(s);
}

/* Guarantee violated (a permutation cycle: every target is also a source): contents of
 * the targets unspecified, but nothing outside the target rows changes and the call
 * succeeds (memory safety, on both backends). */
static void test_move_disjoint_violation_is_contained(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  int ps;
  kvc_kv_pool *p = dj_pool_on(kvt_ctx, 0, &ps);
  kvt_fill_pool(p, &r);
  int64_t t[300], s[300];
  for (int i = 0; i < 300; i++) {
    s[i] = 10 + i;
    t[i] = 10 + (i + 1) % 300;
  }
  snap before, got;
  take(p, &before);
  void *dt = up_locs(kvt_ctx, t, 300, KVC_INDEX_I32), *ds = up_locs(kvt_ctx, s, 300, KVC_INDEX_I32);
  KVT_OK(kvc_kv_pool_move_disjoint(p, dt, ds, KVC_INDEX_I32, 300, NULL));
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  take(p, &got);
  for (int b = 0; b < got.nb; b++) {
    const int64_t rb = got.d[b].bytes_per_token;
    if (memcmp(got.buf[b], before.buf[b], (size_t)(10 * rb)) ||
        memcmp(got.buf[b] + 310 * rb, before.buf[b] + 310 * rb, (size_t)(got.d[b].total_bytes - 310 * rb)))
      fail_msg("buffer %d: bytes outside the target rows changed", b);
  }
  drop(&before); drop(&got);
  kvt_dev_free(dt); kvt_dev_free(ds);
  kvc_kv_pool_destroy(p);
}

/* CUDA kernel == host twin (kvc_host_kv_move_direct), byte for byte, on every pool kind. */
static void test_move_disjoint_device_matches_twin(void **state) {
  (void)state;
  if (!kvt_host) return; /* differential: needs a CUDA context beside the host twin */
  kvt_rng r = {kvt_seed()};
  const size_t ns[] = {1, 7, 1000, 10000};
  int64_t *t = malloc(10000 * 8), *s = malloc(10000 * 8);
  for (int k = 0; k < DJ_KINDS; k++) {
    int ps;
    kvc_kv_pool *pd = dj_pool_on(kvt_ctx, k, &ps), *ph = dj_pool_on(kvt_host, k, &ps);
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
      const kvc_index_type lt = a & 1 ? KVC_INDEX_I64 : KVC_INDEX_I32;
      kvt_fill_pool(pd, &r);
      snap init, gd, gh;
      take(pd, &init);
      take_on(kvt_host, ph, &gh);
      for (int b = 0; b < init.nb; b++) assert_int_equal(init.d[b].total_bytes, gh.d[b].total_bytes);
      drop(&gh);
      snap hs = init;
      for (int b = 0; b < init.nb; b++) {
        memset(&hs.d[b], 0, sizeof hs.d[b]);
        hs.d[b].struct_size = sizeof hs.d[b];
        KVT_OK(kvc_kv_pool_describe(ph, b, &hs.d[b]));
      }
      put_on(kvt_host, &hs);
      disjoint_slots(&r, DJ_SIZE, ns[a], t, s);
      void *dtd = up_locs(kvt_ctx, t, ns[a], lt), *dsd = up_locs(kvt_ctx, s, ns[a], lt);
      void *dth = up_locs(kvt_host, t, ns[a], lt), *dsh = up_locs(kvt_host, s, ns[a], lt);
      KVT_OK(kvc_kv_pool_move_disjoint(pd, dtd, dsd, lt, ns[a], NULL));
      KVT_OK(kvc_kv_pool_move_disjoint(ph, dth, dsh, lt, ns[a], NULL));
      KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
      KVT_OK(kvc_stream_synchronize(kvt_host, NULL));
      take(pd, &gd);
      take_on(kvt_host, ph, &gh);
      for (int b = 0; b < gd.nb; b++)
        if (memcmp(gd.buf[b], gh.buf[b], (size_t)gd.d[b].total_bytes))
          fail_msg("pool kind %d, n = %zu: buffer %d differs between the device and the host twin", k, ns[a], b);
      drop(&init); drop(&gd); drop(&gh);
      kvc_memory_free(kvt_ctx, dtd); kvc_memory_free(kvt_ctx, dsd);
      kvc_memory_free(kvt_host, dth); kvc_memory_free(kvt_host, dsh);
    }
    kvc_kv_pool_destroy(pd);
    kvc_kv_pool_destroy(ph);
  }
  free(t); free(s);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_move_permutation_cycle_is_simultaneous),
    cmocka_unit_test(test_move_large_n_swaps),
    cmocka_unit_test(test_move_fp4_and_odd_rows),
    cmocka_unit_test(test_move_nsa_index_pages),
    cmocka_unit_test(test_move_pipelined_many_tiles),
    cmocka_unit_test(test_move_disjoint_equals_staged),
    cmocka_unit_test(test_move_disjoint_violation_is_contained),
    cmocka_unit_test(test_move_disjoint_device_matches_twin),
};

KVT_MAIN("kv_move", tests)
