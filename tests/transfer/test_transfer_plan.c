/*
 * test_transfer_plan.c — transfer layouts and plans on the host: worked coalescing
 * examples (runs broken on either side, unsorted pages, repeated sources, page sizes),
 * MLA / NSA / Mamba geometry, refused mismatches with their messages, bad page lists,
 * the layout byte format (round trip, corruption, versions), failure injection (a
 * failed call changes nothing and leaks nothing) and the tensor-parallel config helper.
 */
#include "transfer_test_util.h"

#include "core/fault.h"
#include "transfer/transfer.h"

/* MHA, 2 layers, 2 heads x 4 bf16 (16-byte rows), page size 4: 64-byte pages; size 64
 * gives 68 rows = 17 pages (ids 0..16). Regions: K l0, K l1, V l0, V l1. */
static kvc_kv_pool *small_mha(int ps, int heads, int layers, kvc_dtype dt) {
  return kvt_xfer_pool(kvt_ctx, kvt_mha_config(KVC_KV_MHA, dt, heads, 4, 0, 64, layers, ps));
}

typedef struct plan_fixture {
  kvc_kv_pool *a, *b;
  kvc_transfer_layout *la, *lb;
} plan_fixture;

static void fixture_open(plan_fixture *f, int ps) {
  f->a = small_mha(ps, 2, 2, KVC_DTYPE_BF16);
  f->b = small_mha(ps, 2, 2, KVC_DTYPE_BF16);
  f->la = kvt_xfer_layout(f->a, kvt_ctx);
  f->lb = kvt_xfer_layout(f->b, kvt_ctx);
}

static void fixture_close(plan_fixture *f) {
  kvc_transfer_layout_destroy(f->la);
  kvc_transfer_layout_destroy(f->lb);
  kvc_kv_pool_destroy(f->a);
  kvc_kv_pool_destroy(f->b);
}

static kvc_transfer_plan *make_plan(plan_fixture *f, const int64_t *s, const int64_t *d, size_t n) {
  kvc_transfer_plan *p = NULL;
  KVT_OK(kvc_transfer_plan_create(kvt_ctx, f->la, f->lb, s, d, n, &p));
  return p;
}

static void expect_copy(const kvc_transfer_plan *p, size_t i, int32_t region_index, uint64_t so, uint64_t dof,
                        uint64_t bytes) {
  kvc_transfer_copy c;
  KVT_OK(kvc_transfer_plan_copy(p, i, &c));
  if (c.region_index != region_index || c.src_offset != so || c.dst_offset != dof || c.bytes != bytes)
    fail_msg("copy %zu: region %d src %llu dst %llu bytes %llu; expected region %d src %llu dst %llu bytes %llu", i,
             c.region_index, (unsigned long long)c.src_offset, (unsigned long long)c.dst_offset,
             (unsigned long long)c.bytes, region_index, (unsigned long long)so, (unsigned long long)dof,
             (unsigned long long)bytes);
}

static void test_layout_of_mha_pool(void **state) {
  (void)state;
  plan_fixture f;
  fixture_open(&f, 4);
  assert_int_equal(kvc_transfer_layout_num_regions(f.la), 4);
  const kvc_region_kind kinds[4] = {KVC_REGION_K, KVC_REGION_K, KVC_REGION_V, KVC_REGION_V};
  for (int32_t i = 0; i < 4; i++) {
    kvc_transfer_region_info r;
    KVT_OK(kvc_transfer_layout_region(f.la, i, &r));
    kvc_buffer_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    KVT_OK(kvc_kv_pool_describe(f.a, i, &d));
    assert_int_equal(r.region, kinds[i]);
    assert_int_equal(r.layer_id, i % 2);
    assert_int_equal(r.page_bytes, 64);
    assert_int_equal(r.pages, 17);
    assert_int_equal(r.device, -1);
    assert_int_equal(r.dtype, KVC_DTYPE_BF16);
    assert_true(r.base == (uint64_t)(uintptr_t)d.data);
  }
  kvc_transfer_region_info r;
  KVT_STATUS(kvc_transfer_layout_region(f.la, 4, &r), KVC_ERR_INVALID_ARGUMENT);
  fixture_close(&f);
}

/* Worked example: src 3 4 5 9 10 -> dst 7 8 9 13 14 is two runs, (3->7 x3) (9->13 x2),
 * so 2 copies per region, 8 in all, region-major. */
static void test_runs_consecutive_on_both_sides(void **state) {
  (void)state;
  plan_fixture f;
  fixture_open(&f, 4);
  const int64_t s[] = {3, 4, 5, 9, 10}, d[] = {7, 8, 9, 13, 14};
  kvc_transfer_plan *p = make_plan(&f, s, d, 5);
  assert_int_equal(kvc_transfer_plan_num_runs(p), 2);
  assert_int_equal(kvc_transfer_plan_num_copies(p), 8);
  assert_int_equal(kvc_transfer_plan_total_bytes(p), 5 * 64 * 4);
  for (int32_t r = 0; r < 4; r++) {
    expect_copy(p, (size_t)r * 2 + 0, r, 3 * 64, 7 * 64, 3 * 64);
    expect_copy(p, (size_t)r * 2 + 1, r, 9 * 64, 13 * 64, 2 * 64);
  }
  kvc_transfer_copy c;
  KVT_STATUS(kvc_transfer_plan_copy(p, 8, &c), KVC_ERR_INVALID_ARGUMENT);
  kvc_transfer_plan_destroy(p);
  fixture_close(&f);
}

/* A run ends where either side stops being consecutive. */
static void test_runs_broken_on_either_side(void **state) {
  (void)state;
  plan_fixture f;
  fixture_open(&f, 4);
  /* dst breaks: 1 2 3 -> 5 6 8 */
  const int64_t s1[] = {1, 2, 3}, d1[] = {5, 6, 8};
  kvc_transfer_plan *p = make_plan(&f, s1, d1, 3);
  assert_int_equal(kvc_transfer_plan_num_runs(p), 2);
  expect_copy(p, 0, 0, 1 * 64, 5 * 64, 2 * 64);
  expect_copy(p, 1, 0, 3 * 64, 8 * 64, 1 * 64);
  kvc_transfer_plan_destroy(p);
  /* src breaks: 1 2 4 -> 5 6 7 */
  const int64_t s2[] = {1, 2, 4}, d2[] = {5, 6, 7};
  p = make_plan(&f, s2, d2, 3);
  assert_int_equal(kvc_transfer_plan_num_runs(p), 2);
  expect_copy(p, 0, 0, 1 * 64, 5 * 64, 2 * 64);
  expect_copy(p, 1, 0, 4 * 64, 7 * 64, 1 * 64);
  kvc_transfer_plan_destroy(p);
  /* both consecutive but shifted differently: 1 2 | 3 4 -> 10 11 | 1 2 */
  const int64_t s3[] = {1, 2, 3, 4}, d3[] = {10, 11, 1, 2};
  p = make_plan(&f, s3, d3, 4);
  assert_int_equal(kvc_transfer_plan_num_runs(p), 2);
  expect_copy(p, 0, 0, 1 * 64, 10 * 64, 2 * 64);
  expect_copy(p, 1, 0, 3 * 64, 1 * 64, 2 * 64);
  kvc_transfer_plan_destroy(p);
  fixture_close(&f);
}

/* Pairs listed out of order (two requests given back to front, pages shuffled) still
 * make the fewest runs; a source copied to two targets is two runs. */
static void test_unsorted_pairs_and_repeated_source(void **state) {
  (void)state;
  plan_fixture f;
  fixture_open(&f, 4);
  const int64_t s[] = {5, 3, 4, 12, 11}, d[] = {12, 10, 11, 2, 1};
  kvc_transfer_plan *p = make_plan(&f, s, d, 5);
  assert_int_equal(kvc_transfer_plan_num_runs(p), 2);
  expect_copy(p, 0, 0, 3 * 64, 10 * 64, 3 * 64);
  expect_copy(p, 1, 0, 11 * 64, 1 * 64, 2 * 64);
  kvc_transfer_plan_destroy(p);
  const int64_t s2[] = {2, 2}, d2[] = {4, 9};
  p = make_plan(&f, s2, d2, 2);
  assert_int_equal(kvc_transfer_plan_num_runs(p), 2);
  expect_copy(p, 0, 0, 2 * 64, 4 * 64, 64);
  expect_copy(p, 1, 0, 2 * 64, 9 * 64, 64);
  kvc_transfer_plan_destroy(p);
  fixture_close(&f);
}

/* Page size 1: pages are token slots (16-byte rows); page size 64: 1024-byte pages. */
static void test_page_sizes(void **state) {
  (void)state;
  plan_fixture f;
  fixture_open(&f, 1);
  kvc_transfer_region_info r;
  KVT_OK(kvc_transfer_layout_region(f.la, 0, &r));
  assert_int_equal(r.page_bytes, 16);
  assert_int_equal(r.pages, 65);
  int64_t s[10], d[10];
  for (int i = 0; i < 10; i++) s[i] = 10 + i, d[i] = 30 + i;
  kvc_transfer_plan *p = make_plan(&f, s, d, 10);
  assert_int_equal(kvc_transfer_plan_num_copies(p), 4);
  expect_copy(p, 3, 3, 10 * 16, 30 * 16, 10 * 16);
  kvc_transfer_plan_destroy(p);
  fixture_close(&f);

  fixture_open(&f, 64);
  KVT_OK(kvc_transfer_layout_region(f.la, 0, &r));
  assert_int_equal(r.page_bytes, 1024);
  assert_int_equal(r.pages, 2); /* 64 + 64 rows */
  const int64_t s64[] = {1}, d64[] = {1};
  p = make_plan(&f, s64, d64, 1);
  expect_copy(p, 0, 0, 1024, 1024, 1024);
  kvc_transfer_plan_destroy(p);
  fixture_close(&f);
}

/* MLA: one latent region per layer. NSA: latent rows and index-K pages, whose page is
 * one row of ps x 132 bytes (pages counted from index_buf_size). */
static void test_latent_layouts(void **state) {
  (void)state;
  kvc_kv_pool *mla = kvt_xfer_pool(kvt_ctx, kvt_latent_config(KVC_KV_MLA, KVC_DTYPE_BF16, 16, 8, 64, 3, 16));
  kvc_transfer_layout *l = kvt_xfer_layout(mla, kvt_ctx);
  assert_int_equal(kvc_transfer_layout_num_regions(l), 3);
  kvc_transfer_region_info r;
  KVT_OK(kvc_transfer_layout_region(l, 2, &r));
  assert_int_equal(r.region, KVC_REGION_KV);
  assert_int_equal(r.layer_id, 2);
  assert_int_equal(r.page_bytes, 16 * 24 * 2);
  assert_int_equal(r.pages, 5);
  kvc_transfer_layout_destroy(l);
  kvc_kv_pool_destroy(mla);

  kvc_kv_pool *nsa = kvt_xfer_pool(kvt_ctx, kvt_latent_config(KVC_KV_NSA, KVC_DTYPE_FP8_E4M3, 512, 64, 64, 2, 16));
  l = kvt_xfer_layout(nsa, kvt_ctx);
  assert_int_equal(kvc_transfer_layout_num_regions(l), 4);
  KVT_OK(kvc_transfer_layout_region(l, 0, &r));
  assert_int_equal(r.region, KVC_REGION_KV);
  assert_int_equal(r.page_bytes, 656 * 16);
  KVT_OK(kvc_transfer_layout_region(l, 3, &r));
  assert_int_equal(r.region, KVC_REGION_INDEX_K);
  assert_int_equal(r.layer_id, 1);
  assert_int_equal(r.page_bytes, 16 * 132);
  assert_int_equal(r.pages, (64 + 16 + 1) / 16);
  kvc_transfer_layout_destroy(l);
  kvc_kv_pool_destroy(nsa);
}

/* Mamba: a page is a state slot; conv then temporal per layer, with their dtypes. */
static void test_mamba_layout(void **state) {
  (void)state;
  kvc_mamba_pool *m = kvt_xfer_mamba(kvt_ctx, 10, 2, KVC_DTYPE_BF16);
  kvc_transfer_layout *l = NULL;
  KVT_OK(kvc_transfer_layout_from_mamba_pool(m, &l));
  assert_int_equal(kvc_transfer_layout_num_regions(l), 4);
  kvc_transfer_region_info r;
  KVT_OK(kvc_transfer_layout_region(l, 1, &r));
  assert_int_equal(r.region, KVC_REGION_MAMBA_CONV);
  assert_int_equal(r.page_bytes, 4 * 3 * 2);
  assert_int_equal(r.pages, 11);
  KVT_OK(kvc_transfer_layout_region(l, 2, &r));
  assert_int_equal(r.region, KVC_REGION_MAMBA_TEMPORAL);
  assert_int_equal(r.dtype, KVC_DTYPE_F32);
  assert_int_equal(r.page_bytes, 2 * 4 * 3 * 4);
  kvc_transfer_layout_destroy(l);
  kvc_transfer_layout *bad = (kvc_transfer_layout *)(void *)1;
  KVT_STATUS(kvc_transfer_layout_from_mamba_pool(NULL, &bad), KVC_ERR_INVALID_ARGUMENT);
  assert_true(bad == (kvc_transfer_layout *)(void *)1);
  kvc_mamba_pool_destroy(m);
}

/* Each mismatch is refused with INVALID_ARGUMENT and a message naming it. */
static void expect_refused(kvc_kv_pool *a, kvc_kv_pool *b, const char *needle) {
  kvc_transfer_layout *la = kvt_xfer_layout(a, kvt_ctx), *lb = kvt_xfer_layout(b, kvt_ctx);
  const int64_t s[] = {1}, d[] = {1};
  kvc_transfer_plan *p = (kvc_transfer_plan *)(void *)1;
  KVT_STATUS(kvc_transfer_plan_create(kvt_ctx, la, lb, s, d, 1, &p), KVC_ERR_INVALID_ARGUMENT);
  assert_true(p == (kvc_transfer_plan *)(void *)1);
  if (!strstr(kvc_last_error(kvt_ctx), needle))
    fail_msg("message \"%s\" does not name \"%s\"", kvc_last_error(kvt_ctx), needle);
  kvc_transfer_layout_destroy(la);
  kvc_transfer_layout_destroy(lb);
  kvc_kv_pool_destroy(a);
  kvc_kv_pool_destroy(b);
}

static void test_mismatched_layouts_refused(void **state) {
  (void)state;
  expect_refused(small_mha(4, 2, 2, KVC_DTYPE_BF16), small_mha(4, 2, 2, KVC_DTYPE_F16), "dtype");
  expect_refused(small_mha(4, 2, 2, KVC_DTYPE_BF16), small_mha(8, 2, 2, KVC_DTYPE_BF16), "page_size");
  expect_refused(small_mha(4, 2, 2, KVC_DTYPE_BF16), small_mha(4, 2, 3, KVC_DTYPE_BF16), "layer count");
  expect_refused(small_mha(4, 2, 2, KVC_DTYPE_BF16), small_mha(4, 4, 2, KVC_DTYPE_BF16), "bytes per page");
  expect_refused(small_mha(4, 2, 2, KVC_DTYPE_BF16),
                 kvt_xfer_pool(kvt_ctx, kvt_latent_config(KVC_KV_MLA, KVC_DTYPE_BF16, 16, 8, 64, 2, 4)), "pool kind");
  kvc_kv_pool_config shifted = kvt_mha_config(KVC_KV_MHA, KVC_DTYPE_BF16, 2, 4, 0, 64, 2, 4);
  shifted.start_layer = 2; /* another pipeline stage */
  expect_refused(small_mha(4, 2, 2, KVC_DTYPE_BF16), kvt_xfer_pool(kvt_ctx, shifted), "layer range");
}

static void test_bad_page_lists_refused(void **state) {
  (void)state;
  plan_fixture f;
  fixture_open(&f, 4);
  kvc_transfer_plan *p = (kvc_transfer_plan *)(void *)1;
  const int64_t ok[] = {1, 2}, out_of_range[] = {1, 17}, negative[] = {-1, 2}, twice[] = {5, 5};
  KVT_STATUS(kvc_transfer_plan_create(kvt_ctx, f.la, f.lb, out_of_range, ok, 2, &p), KVC_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "src_pages[1] = 17"));
  KVT_STATUS(kvc_transfer_plan_create(kvt_ctx, f.la, f.lb, ok, negative, 2, &p), KVC_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "dst_pages[0] = -1"));
  KVT_STATUS(kvc_transfer_plan_create(kvt_ctx, f.la, f.lb, ok, twice, 2, &p), KVC_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "listed twice"));
  KVT_STATUS(kvc_transfer_plan_create(kvt_ctx, f.la, f.lb, NULL, ok, 2, &p), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_transfer_plan_create(kvt_ctx, f.la, NULL, ok, ok, 2, &p), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_transfer_plan_create(kvt_ctx, f.la, (kvc_transfer_layout *)(void *)f.a, ok, ok, 2, &p),
             KVC_ERR_INVALID_ARGUMENT);
  assert_true(p == (kvc_transfer_plan *)(void *)1);
  /* An empty plan is valid and copies nothing. */
  KVT_OK(kvc_transfer_plan_create(kvt_ctx, f.la, f.lb, NULL, NULL, 0, &p));
  assert_int_equal(kvc_transfer_plan_num_copies(p), 0);
  assert_int_equal(kvc_transfer_plan_total_bytes(p), 0);
  KVT_OK(kvc_transfer_plan_copy_local(p, kvt_ctx, kvt_ctx, NULL));
  kvc_transfer_plan_destroy(p);
  kvc_transfer_plan_destroy(NULL);
  kvc_transfer_layout_destroy(NULL);
  assert_int_equal(kvc_transfer_plan_num_copies(NULL), 0);
  fixture_close(&f);
}

/* Serialised layouts: byte-exact round trip; truncation, corruption and unknown
 * versions refused; a plan against a deserialised layout equals the direct one. */
static void test_layout_bytes(void **state) {
  (void)state;
  plan_fixture f;
  fixture_open(&f, 4);
  size_t n = 0;
  KVT_OK(kvc_transfer_layout_serialize(f.lb, NULL, 0, &n));
  assert_int_equal(n, 64 + 4 * 48);
  unsigned char *buf = malloc(n), *again = malloc(n);
  KVT_STATUS(kvc_transfer_layout_serialize(f.lb, buf, n - 1, &n), KVC_ERR_INVALID_ARGUMENT);
  KVT_OK(kvc_transfer_layout_serialize(f.lb, buf, n, &n));
  kvc_transfer_layout *remote = NULL;
  KVT_OK(kvc_transfer_layout_deserialize(kvt_ctx, buf, n, &remote));
  for (int32_t i = 0; i < 4; i++) {
    kvc_transfer_region_info x, y;
    KVT_OK(kvc_transfer_layout_region(f.lb, i, &x));
    KVT_OK(kvc_transfer_layout_region(remote, i, &y));
    assert_memory_equal(&x, &y, sizeof x);
  }
  KVT_OK(kvc_transfer_layout_serialize(remote, again, n, &n));
  assert_memory_equal(buf, again, n);
  const int64_t s[] = {3, 4, 9}, d[] = {1, 2, 3};
  kvc_transfer_plan *direct = make_plan(&f, s, d, 3), *via = NULL;
  KVT_OK(kvc_transfer_plan_create(kvt_ctx, f.la, remote, s, d, 3, &via));
  assert_int_equal(kvc_transfer_plan_num_copies(direct), kvc_transfer_plan_num_copies(via));
  for (size_t i = 0; i < kvc_transfer_plan_num_copies(direct); i++) {
    kvc_transfer_copy x, y;
    KVT_OK(kvc_transfer_plan_copy(direct, i, &x));
    KVT_OK(kvc_transfer_plan_copy(via, i, &y));
    assert_memory_equal(&x, &y, sizeof x);
  }
  kvc_transfer_plan_destroy(direct);
  kvc_transfer_plan_destroy(via);
  kvc_transfer_layout_destroy(remote);

  kvc_transfer_layout *out = (kvc_transfer_layout *)(void *)1;
  KVT_STATUS(kvc_transfer_layout_deserialize(kvt_ctx, buf, n - 1, &out), KVC_ERR_INVALID_ARGUMENT);
  for (size_t i = 0; i < n; i += 7) { /* any flipped byte is caught */
    memcpy(again, buf, n);
    again[i] ^= 0x10;
    kvc_status st = kvc_transfer_layout_deserialize(kvt_ctx, again, n, &out);
    if (st == KVC_OK) fail_msg("corrupted byte %zu accepted", i);
  }
  memcpy(again, buf, n);
  again[8] = 2; /* format 2 */
  KVT_STATUS(kvc_transfer_layout_deserialize(kvt_ctx, again, n, &out), KVC_ERR_VERSION);
  assert_true(out == (kvc_transfer_layout *)(void *)1);
  free(buf);
  free(again);
  fixture_close(&f);
}

/* A layout from another process (origin rewritten, checksum recomputed as the format
 * says) can be planned against, but this process may not run its side. */
static void test_foreign_side_not_executed(void **state) {
  (void)state;
  plan_fixture f;
  fixture_open(&f, 4);
  size_t n = 0;
  KVT_OK(kvc_transfer_layout_serialize(f.lb, NULL, 0, &n));
  unsigned char *buf = malloc(n);
  KVT_OK(kvc_transfer_layout_serialize(f.lb, buf, n, &n));
  buf[40] ^= 0xff; /* origin */
  memset(buf + 56, 0, 8);
  uint64_t h = kvc__hash(KVC__HASH_SEED, buf, n);
  for (int i = 0; i < 8; i++) buf[56 + i] = (unsigned char)(h >> (8 * i));
  kvc_transfer_layout *remote = NULL;
  KVT_OK(kvc_transfer_layout_deserialize(kvt_ctx, buf, n, &remote));
  const int64_t s[] = {1}, d[] = {2};
  kvc_transfer_plan *p = NULL;
  KVT_OK(kvc_transfer_plan_create(kvt_ctx, f.la, remote, s, d, 1, &p));
  KVT_STATUS(kvc_transfer_plan_copy_local(p, kvt_ctx, kvt_ctx, NULL), KVC_ERR_MISUSE);
  /* NCCL is refused before it is even looked for on the host backend. */
  KVT_STATUS(kvc_transfer_plan_send(p, kvt_ctx, (void *)buf, 1, NULL), KVC_ERR_UNSUPPORTED);
  kvc_transfer_plan_destroy(p);
  kvc_transfer_layout_destroy(remote);
  free(buf);
  fixture_close(&f);
}

/* Every host allocation of layout and plan creation fails in turn: the call returns
 * HOST_OOM, writes nothing to *out and leaks nothing, until it succeeds. */
static void test_failure_injection(void **state) {
  (void)state;
  plan_fixture f;
  fixture_open(&f, 4);
  const int64_t s[] = {3, 4, 5, 9}, d[] = {7, 8, 9, 1};
  for (int64_t at = 0;; at++) {
    kvc__live before = kvc__fault_live(kvt_ctx);
    kvc__fault_set(kvt_ctx, KVC__FAULT_HOST_ALLOC, at);
    kvc_transfer_plan *p = (kvc_transfer_plan *)(void *)1;
    kvc_status st = kvc_transfer_plan_create(kvt_ctx, f.la, f.lb, s, d, 4, &p);
    kvc__fault_reset(kvt_ctx);
    if (st == KVC_OK) {
      assert_int_equal(kvc_transfer_plan_num_runs(p), 2);
      kvc_transfer_plan_destroy(p);
      assert_true(at > 0);
      break;
    }
    assert_int_equal(st, KVC_ERR_HOST_OOM);
    assert_true(p == (kvc_transfer_plan *)(void *)1);
    kvc__live after = kvc__fault_live(kvt_ctx);
    assert_int_equal(after.host_allocs, before.host_allocs);
    assert_int_equal(after.host_bytes, before.host_bytes);
  }
  for (int64_t at = 0;; at++) {
    kvc__live before = kvc__fault_live(kvt_ctx);
    kvc__fault_set(kvt_ctx, KVC__FAULT_HOST_ALLOC, at);
    kvc_transfer_layout *l = (kvc_transfer_layout *)(void *)1;
    kvc_status st = kvc_transfer_layout_from_kv_pool(f.a, &l);
    kvc__fault_reset(kvt_ctx);
    if (st == KVC_OK) {
      kvc_transfer_layout_destroy(l);
      break;
    }
    assert_int_equal(st, KVC_ERR_HOST_OOM);
    assert_true(l == (kvc_transfer_layout *)(void *)1);
    assert_int_equal(kvc__fault_live(kvt_ctx).host_allocs, before.host_allocs);
  }
  fixture_close(&f);
}

static void test_tp_rank_configs(void **state) {
  (void)state;
  kvc_kv_pool_config model = kvt_mha_config(KVC_KV_MHA, KVC_DTYPE_BF16, 8, 128, 0, 1 << 16, 32, 16), out;
  KVT_OK(kvc_kv_pool_config_for_tp_rank(&model, 2, 1, &out));
  assert_int_equal(out.head_num, 4);
  assert_int_equal(out.head_dim, 128);
  assert_int_equal(out.size, 1 << 16);
  KVT_OK(kvc_kv_pool_config_for_tp_rank(&model, 8, 7, &out));
  assert_int_equal(out.head_num, 1);
  KVT_OK(kvc_kv_pool_config_for_tp_rank(&model, 16, 3, &out)); /* replicated heads */
  assert_int_equal(out.head_num, 1);
  memset(&out, 0x77, sizeof out);
  kvc_kv_pool_config untouched = out;
  KVT_STATUS(kvc_kv_pool_config_for_tp_rank(&model, 3, 0, &out), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_kv_pool_config_for_tp_rank(&model, 2, 2, &out), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_kv_pool_config_for_tp_rank(&model, 0, 0, &out), KVC_ERR_INVALID_ARGUMENT);
  assert_memory_equal(&out, &untouched, sizeof out);
  kvc_kv_pool_config mla = kvt_latent_config(KVC_KV_MLA, KVC_DTYPE_BF16, 512, 64, 1024, 4, 1);
  KVT_OK(kvc_kv_pool_config_for_tp_rank(&mla, 8, 5, &out));
  assert_memory_equal(&out, &mla, sizeof out);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layout_of_mha_pool),
      cmocka_unit_test(test_runs_consecutive_on_both_sides),
      cmocka_unit_test(test_runs_broken_on_either_side),
      cmocka_unit_test(test_unsorted_pairs_and_repeated_source),
      cmocka_unit_test(test_page_sizes),
      cmocka_unit_test(test_latent_layouts),
      cmocka_unit_test(test_mamba_layout),
      cmocka_unit_test(test_mismatched_layouts_refused),
      cmocka_unit_test(test_bad_page_lists_refused),
      cmocka_unit_test(test_layout_bytes),
      cmocka_unit_test(test_foreign_side_not_executed),
      cmocka_unit_test(test_failure_injection),
      cmocka_unit_test(test_tp_rank_configs),
  };
  return kvt_main(argc, argv, "transfer_plan", tests, sizeof tests / sizeof tests[0]);
}
