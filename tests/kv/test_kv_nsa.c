/*
 * test_kv_nsa.c — NSA index-K pages: kvc_nsa_set_index_k (SetKAndS), kvc_nsa_get_index_k
 * (GetK/GetS with run-time lengths) and kvc_nsa_get_index_k_batch (GetKAndS with ragged
 * and zero lengths), against a byte-level reference of the page layout (spec 9.7):
 * page p = row p of ps * 132 bytes, key of token t at t * 128, its f32 scale at
 * ps * 128 + 4 * t. On CUDA every case also runs on a host context (differential).
 */
#include "kv_test_util.h"

typedef struct nsa_env {
  kvc_context *ctx;
  kvc_kv_pool *pool;
  int64_t pages, ps, page_bytes;
  uint8_t *buf; /* device base of layer 1's index pages */
} nsa_env;

static void env_open(kvc_context *ctx, nsa_env *e, int64_t size, int32_t ps) {
  e->ctx = ctx;
  e->pool = kvt_pool_on(ctx, kvt_latent_config(KVC_KV_NSA, KVC_DTYPE_FP8_E4M3, 512, 64, size, 2, ps));
  const kvc_buffer_desc d = kvt_buf_on(ctx, e->pool, KVC_REGION_INDEX_K, 1);
  e->buf = d.data;
  e->pages = d.shape[0];
  e->page_bytes = d.bytes_per_page;
  e->ps = ps;
  assert_int_equal(e->page_bytes, ps * 132);
  assert_int_equal(e->pages, (size + ps + 1) / ps);
}

static void *up(kvc_context *ctx, const void *host, size_t bytes) {
  void *d = kvt_alloc_on(ctx, bytes ? bytes : 1);
  if (bytes) kvt_h2d_on(ctx, d, host, bytes);
  return d;
}

/* Scenario: set n tokens, then read one sequence and a batch. Results downloaded. */
typedef struct nsa_case {
  int64_t size;
  int32_t ps;
  size_t n;
  int loc64;
  int64_t *loc;
  uint8_t *keys;   /* n x 128 */
  float *scales;   /* n */
  int64_t seq_len; /* single sequence */
  int32_t *pages1; /* ceil(seq_len/ps) */
  size_t batch;
  int64_t width;
  int32_t *table; /* batch x width */
  int32_t *lens;  /* batch */
  int64_t sum, max_len;
} nsa_case;

typedef struct nsa_out {
  uint8_t *pages;   /* the whole index buffer after the set */
  uint8_t *k1, *s1; /* single: seq_len x 128, seq_len x 4 */
  uint8_t *kb, *sb; /* batch: sum x 128, sum x 4 */
} nsa_out;

static void run_case(kvc_context *ctx, const nsa_case *c, nsa_out *o) {
  nsa_env e;
  env_open(ctx, &e, c->size, c->ps);
  void *dloc;
  if (c->loc64) dloc = up(ctx, c->loc, c->n * 8);
  else {
    int32_t *l = malloc(c->n * 4 + 4);
    for (size_t i = 0; i < c->n; i++) l[i] = (int32_t)c->loc[i];
    dloc = up(ctx, l, c->n * 4);
    free(l);
  }
  void *dk = up(ctx, c->keys, c->n * 128), *ds = up(ctx, c->scales, c->n * 4);
  kvc_status st = kvc_nsa_set_index_k(e.pool, 1, dloc, c->loc64 ? KVC_INDEX_I64 : KVC_INDEX_I32, c->n, dk, ds, NULL);
  if (st != KVC_OK) fail_msg("set: %s", kvc_last_error(ctx));
  const size_t total = (size_t)(e.pages * e.page_bytes);
  o->pages = malloc(total);
  kvt_d2h_on(ctx, o->pages, e.buf, total);

  const int64_t np = (c->seq_len + c->ps - 1) / c->ps;
  void *dp1 = up(ctx, c->pages1, (size_t)np * 4);
  uint8_t *k1 = kvt_alloc_on(ctx, (size_t)c->seq_len * 128 + 16), *s1 = kvt_alloc_on(ctx, (size_t)c->seq_len * 4 + 16);
  kvc_memset_d8(ctx, k1, 0xA5, (size_t)c->seq_len * 128 + 16, NULL);
  kvc_memset_d8(ctx, s1, 0xA5, (size_t)c->seq_len * 4 + 16, NULL);
  st = kvc_nsa_get_index_k(e.pool, 1, c->seq_len, dp1, k1, s1, NULL);
  if (st != KVC_OK) fail_msg("get: %s", kvc_last_error(ctx));
  o->k1 = malloc((size_t)c->seq_len * 128 + 16);
  o->s1 = malloc((size_t)c->seq_len * 4 + 16);
  kvt_d2h_on(ctx, o->k1, k1, (size_t)c->seq_len * 128 + 16);
  kvt_d2h_on(ctx, o->s1, s1, (size_t)c->seq_len * 4 + 16);

  void *dt = up(ctx, c->table, c->batch * (size_t)c->width * 4), *dl = up(ctx, c->lens, c->batch * 4);
  uint8_t *kb = kvt_alloc_on(ctx, (size_t)c->sum * 128 + 16), *sb = kvt_alloc_on(ctx, (size_t)c->sum * 4 + 16);
  kvc_memset_d8(ctx, kb, 0xA5, (size_t)c->sum * 128 + 16, NULL);
  kvc_memset_d8(ctx, sb, 0xA5, (size_t)c->sum * 4 + 16, NULL);
  st = kvc_nsa_get_index_k_batch(e.pool, 1, c->batch, dt, c->width, dl, c->sum, c->max_len, kb, sb, NULL);
  if (st != KVC_OK) fail_msg("batch: %s", kvc_last_error(ctx));
  o->kb = malloc((size_t)c->sum * 128 + 16);
  o->sb = malloc((size_t)c->sum * 4 + 16);
  kvt_d2h_on(ctx, o->kb, kb, (size_t)c->sum * 128 + 16);
  kvt_d2h_on(ctx, o->sb, sb, (size_t)c->sum * 4 + 16);

  void *ptrs[] = {dloc, dk, ds, dp1, k1, s1, dt, dl, kb, sb};
  for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++) kvc_memory_free(ctx, ptrs[i]);
  kvc_kv_pool_destroy(e.pool);
}

static void free_out(nsa_out *o) {
  free(o->pages);
  free(o->k1);
  free(o->s1);
  free(o->kb);
  free(o->sb);
}

/* Reference: what token t of page `page` reads as (zeros when the page is invalid). */
static void ref_token(const nsa_case *c, const uint8_t *pages, int64_t npages, int64_t page, int64_t off,
                      uint8_t key[128], uint8_t sc[4]) {
  if (page < 0 || page >= npages) {
    memset(key, 0, 128);
    memset(sc, 0, 4);
    return;
  }
  const uint8_t *pg = pages + page * c->ps * 132;
  memcpy(key, pg + off * 128, 128);
  memcpy(sc, pg + c->ps * 128 + 4 * off, 4);
}

static void check_case(const nsa_case *c, const nsa_out *o) {
  const int64_t npages = (c->size + c->ps + 1) / c->ps, pb = c->ps * 132;
  /* Set: expected page image built by hand. */
  uint8_t *want = calloc((size_t)(npages * pb), 1);
  for (size_t i = 0; i < c->n; i++) {
    const int64_t l = c->loc[i];
    if (l < 0 || l >= npages * c->ps) continue;
    memcpy(want + (l / c->ps) * pb + (l % c->ps) * 128, c->keys + i * 128, 128);
    memcpy(want + (l / c->ps) * pb + c->ps * 128 + 4 * (l % c->ps), &c->scales[i], 4);
  }
  assert_memory_equal(o->pages, want, (size_t)(npages * pb));
  free(want);
  uint8_t key[128], sc[4];
  for (int64_t t = 0; t < c->seq_len; t++) {
    ref_token(c, o->pages, npages, c->pages1[t / c->ps], t % c->ps, key, sc);
    assert_memory_equal(o->k1 + t * 128, key, 128);
    assert_memory_equal(o->s1 + t * 4, sc, 4);
  }
  for (int k = 0; k < 16; k++) assert_int_equal(o->k1[c->seq_len * 128 + k], 0xA5);
  int64_t off = 0;
  for (size_t b = 0; b < c->batch; b++) {
    const int64_t len = c->lens[b] > 0 ? c->lens[b] : 0;
    for (int64_t t = 0; t < len && t < c->max_len && off + t < c->sum; t++) {
      const int64_t col = t / c->ps;
      const int64_t page = col < c->width ? c->table[b * c->width + col] : -1;
      ref_token(c, o->pages, npages, page, t % c->ps, key, sc);
      if (memcmp(o->kb + (off + t) * 128, key, 128))
        fail_msg("batch %zu token %lld key mismatch (seed %llu)", b, (long long)t, (unsigned long long)kvt_seed());
      assert_memory_equal(o->sb + (off + t) * 4, sc, 4);
    }
    off += len;
  }
  for (int k = 0; k < 16; k++) assert_int_equal(o->kb[c->sum * 128 + k], 0xA5);
}

static void run_and_check(nsa_case *c) {
  nsa_out o = {0};
  run_case(kvt_ctx, c, &o);
  check_case(c, &o);
  if (kvt_host) {
    nsa_out h = {0};
    run_case(kvt_host, c, &h);
    const int64_t npages = (c->size + c->ps + 1) / c->ps;
    assert_memory_equal(o.pages, h.pages, (size_t)(npages * c->ps * 132));
    assert_memory_equal(o.k1, h.k1, (size_t)c->seq_len * 128 + 16);
    assert_memory_equal(o.s1, h.s1, (size_t)c->seq_len * 4 + 16);
    assert_memory_equal(o.kb, h.kb, (size_t)c->sum * 128 + 16);
    assert_memory_equal(o.sb, h.sb, (size_t)c->sum * 4 + 16);
    free_out(&h);
  }
  free_out(&o);
}

/* Builds a random case: distinct slots (plus out-of-range ones), a sequence over random
 * pages (some invalid), a ragged batch with zero-length entries. */
static void make_case(nsa_case *c, kvt_rng *r, int64_t size, int32_t ps, size_t n, int loc64, size_t batch,
                      int64_t seq_len) {
  memset(c, 0, sizeof *c);
  c->size = size;
  c->ps = ps;
  c->n = n;
  c->loc64 = loc64;
  const int64_t npages = (size + ps + 1) / ps, slots = npages * ps;
  c->loc = malloc((n + 1) * 8);
  c->keys = malloc(n * 128 + 1);
  c->scales = malloc(n * 4 + 4);
  int64_t *perm = kvt_slot_perm(r, slots);
  for (size_t i = 0; i < n; i++) {
    c->loc[i] = perm[i % (size_t)slots];
    if (i % 7 == 5) c->loc[i] = (i & 1) ? -3 : slots + (int64_t)i;
    for (int k = 0; k < 128; k++) c->keys[i * 128 + k] = (uint8_t)kvt_next(r);
    c->scales[i] = kvt_uniform(r) + 0.001f * (float)i;
  }
  free(perm);
  c->seq_len = seq_len;
  const int64_t np = (seq_len + ps - 1) / ps;
  c->pages1 = malloc((size_t)np * 4 + 4);
  for (int64_t p = 0; p < np; p++) c->pages1[p] = (int32_t)kvt_range(r, -1, npages);
  c->batch = batch;
  c->width = 1;
  c->lens = malloc(batch * 4 + 4);
  c->max_len = 0;
  for (size_t b = 0; b < batch; b++) {
    int64_t len = (b % 4 == 1) ? 0 : kvt_range(r, 1, 3 * ps + 5);
    if (b % 9 == 8) len = -2; /* treated as 0 */
    c->lens[b] = (int32_t)len;
    if (len > c->max_len) c->max_len = len;
    if ((len + ps - 1) / ps > c->width) c->width = (len + ps - 1) / ps;
    if (len > 0) c->sum += len;
  }
  c->width += 1; /* an unused column */
  c->table = malloc(batch * (size_t)c->width * 4 + 4);
  for (size_t k = 0; k < batch * (size_t)c->width; k++) c->table[k] = (int32_t)kvt_range(r, -1, npages);
}

static void free_case(nsa_case *c) {
  free(c->loc);
  free(c->keys);
  free(c->scales);
  free(c->pages1);
  free(c->table);
  free(c->lens);
}

static void test_index_k_ps64(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed() ^ 64};
  nsa_case c;
  make_case(&c, &r, 64 * 6, 64, 200, 1, 13, 150);
  run_and_check(&c);
  free_case(&c);
  make_case(&c, &r, 64 * 6, 64, 200, 0, 1, 1); /* int32 loc, one-token sequence */
  run_and_check(&c);
  free_case(&c);
}

static void test_index_k_small_pages(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed() ^ 7};
  const int32_t pss[] = {1, 2, 16};
  for (size_t k = 0; k < 3; k++) {
    nsa_case c;
    make_case(&c, &r, 48, pss[k], 30, (int)(k & 1), 9, 20);
    run_and_check(&c);
    free_case(&c);
  }
}

static void test_index_k_truncation_and_empty(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed() ^ 99};
  nsa_case c;
  make_case(&c, &r, 128, 64, 10, 1, 6, 64);
  c.max_len = 40; /* tokens past max_seq_len are not written */
  run_and_check(&c);
  c.sum = c.sum / 2; /* outputs bounded by seq_len_sum */
  run_and_check(&c);
  free_case(&c);
  /* n = 0, seq_len = 0, batch = 0: no launch, success. */
  nsa_env e;
  env_open(kvt_ctx, &e, 64, 64);
  KVT_OK(kvc_nsa_set_index_k(e.pool, 1, NULL, KVC_INDEX_I64, 0, NULL, NULL, NULL));
  KVT_OK(kvc_nsa_get_index_k(e.pool, 1, 0, NULL, NULL, NULL, NULL));
  KVT_OK(kvc_nsa_get_index_k_batch(e.pool, 1, 0, NULL, 0, NULL, 0, 0, NULL, NULL, NULL));
  KVT_STATUS(kvc_nsa_get_index_k(e.pool, 7, 4, NULL, NULL, NULL, NULL), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_nsa_get_index_k(e.pool, 1, -1, NULL, NULL, NULL, NULL), KVC_ERR_INVALID_ARGUMENT);
  kvc_kv_pool_destroy(e.pool);
}

static void test_index_k_large_batch(void **state) {
  (void)state;
  /* More sequences than one scan chunk (2048) and long sequences: CUDA only (the host
   * twin is the oracle); a smaller copy on the host. */
  kvt_rng r = {kvt_seed() ^ 4242};
  nsa_case c;
  if (kvt_host) make_case(&c, &r, 64 * 2048, 64, 65536, 1, 5000, 64 * 300);
  else make_case(&c, &r, 64 * 64, 64, 2000, 1, 300, 64 * 10);
  run_and_check(&c);
  free_case(&c);
}

static void test_index_k_wrong_pool(void **state) {
  (void)state;
  kvc_kv_pool *p = kvt_pool_on(kvt_ctx, kvt_latent_config(KVC_KV_MLA, KVC_DTYPE_BF16, 16, 16, 16, 1, 1));
  KVT_STATUS(kvc_nsa_get_index_k(p, 0, 1, NULL, NULL, NULL, NULL), KVC_ERR_UNSUPPORTED);
  kvc_kv_pool_destroy(p);
}

/* --- NSA fp8 latent rows: device quantizer == host twin, bit for bit ----------------- */

/* Writes rows 1..n of a one-layer NSA fp8 pool on ctx from nope/rope (host arrays of
 * src_dt) and returns the whole KV buffer (malloc'd, *bytes set). */
static uint8_t *nsa_rows_on(kvc_context *ctx, kvc_dtype src_dt, const void *nope, const void *rope, int64_t n,
                            size_t *bytes) {
  kvc_kv_pool *pool = kvt_pool_on(ctx, kvt_latent_config(KVC_KV_NSA, KVC_DTYPE_FP8_E4M3, 512, 64, n + 8, 1, 64));
  const size_t es = kvc_dtype_size(src_dt);
  int64_t *loc = malloc((size_t)n * 8);
  for (int64_t i = 0; i < n; i++) loc[i] = i + 1;
  void *dl = up(ctx, loc, (size_t)n * 8), *dn = up(ctx, nope, (size_t)n * 512 * es),
       *dr = up(ctx, rope, (size_t)n * 64 * es);
  if (kvc_kv_pool_set_mla_kv(pool, 0, dl, KVC_INDEX_I64, (size_t)n, dn, dr, src_dt, 0, 0, NULL) != KVC_OK)
    fail_msg("set_mla_kv: %s", kvc_last_error(ctx));
  KVT_OK(kvc_stream_synchronize(ctx, NULL));
  const kvc_buffer_desc d = kvt_buf_on(ctx, pool, KVC_REGION_KV, 0);
  assert_int_equal(d.bytes_per_token, 656);
  uint8_t *out = malloc((size_t)d.total_bytes);
  kvt_d2h_on(ctx, out, d.data, (size_t)d.total_bytes);
  *bytes = (size_t)d.total_bytes;
  kvc_memory_free(ctx, dl);
  kvc_memory_free(ctx, dn);
  kvc_memory_free(ctx, dr);
  kvc_kv_pool_destroy(pool);
  free(loc);
  return out;
}

/* Every tile of three rows in four starts with the anchor 448 (scale 1, so the codes are
 * the plain e4m3 conversion of the inputs); the fourth row's tiles get a random anchor
 * (random scale). bf16: the inputs run through all 65536 patterns twice; f32: 2^22
 * patterns with random sign, mantissa and exponent up to 2^8 (|y| <= 448 so the anchor
 * stays the max), subnormals and 1/64 NaN. */
static void test_nsa_fp8_device_matches_twin(void **state) {
  (void)state;
  if (!kvt_host) return; /* differential: needs a CUDA context beside the host twin */
  kvt_rng r = {kvt_seed()};
  for (int f32 = 0; f32 < 2; f32++) {
    const int64_t vals = f32 ? (int64_t)1 << 22 : (int64_t)2 << 16;
    const int64_t n = (vals + 507) / 508;
    const kvc_dtype dt = f32 ? KVC_DTYPE_F32 : KVC_DTYPE_BF16;
    const size_t es = f32 ? 4 : 2;
    uint8_t *nope = malloc((size_t)n * 512 * es), *rope = malloc((size_t)n * 64 * es);
    int64_t v = 0;
    for (int64_t i = 0; i < n; i++) {
      for (int e = 0; e < 576; e++) {
        uint32_t bits;
        if (e % 128 == 0 && e < 512) {
          const float a = (i & 3) == 3 ? kvt_uniform(&r) * 1000.0f + 1e-3f : 448.0f;
          memcpy(&bits, &a, 4);
        } else if (f32) {
          const uint64_t x = kvt_next(&r);
          if ((x & 63) == 0) bits = 0x7f800001u | (uint32_t)(x >> 8 & 0x807fffffu); /* NaN of either sign */
          else bits = (uint32_t)(x >> 32 & 0x807fffffu) | (uint32_t)((x >> 8) % 136) << 23;
          if ((bits & 0x7fffffffu) > 0x43e00000u && (bits & 0x7fffffffu) < 0x7f800000u)
            bits -= 1u << 23; /* 448..512 -> 224..256 */
          if (e < 512) v++;
        } else {
          bits = (uint32_t)(e < 512 ? v++ : (int64_t)kvt_next(&r)) << 16;
          if ((bits & 0x7fffffffu) > 0x43e00000u && (bits & 0x7fffffffu) <= 0x7f800000u)
            bits &= 0x807fffffu; /* keep |y| <= 448 */
        }
        uint8_t *dst =
            e < 512 ? nope + ((size_t)i * 512 + (size_t)e) * es : rope + ((size_t)i * 64 + (size_t)(e - 512)) * es;
        if (f32) memcpy(dst, &bits, 4);
        else {
          const uint16_t h = (uint16_t)(bits >> 16);
          memcpy(dst, &h, 2);
        }
      }
    }
    size_t bd, bh;
    uint8_t *gd = nsa_rows_on(kvt_ctx, dt, nope, rope, n, &bd);
    uint8_t *gh = nsa_rows_on(kvt_host, dt, nope, rope, n, &bh);
    assert_int_equal(bd, bh);
    for (size_t k = 0; k < bd; k++)
      if (gd[k] != gh[k])
        fail_msg("%s source: byte %zu of row %zu differs: device 0x%02x, host twin 0x%02x", f32 ? "f32" : "bf16",
                 k % 656, k / 656, gd[k], gh[k]);
    free(gd);
    free(gh);
    free(nope);
    free(rope);
  }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_index_k_ps64),
    cmocka_unit_test(test_index_k_small_pages),
    cmocka_unit_test(test_index_k_truncation_and_empty),
    cmocka_unit_test(test_index_k_large_batch),
    cmocka_unit_test(test_index_k_wrong_pool),
    cmocka_unit_test(test_nsa_fp8_device_matches_twin),
};

KVT_MAIN("kv_nsa", tests)
