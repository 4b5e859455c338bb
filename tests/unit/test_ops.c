/*
 * Level-1 ops: get_last_loc, write_req_to_token, alloc_extend_fill, alloc_decode_fill.
 * Each is checked against a model written here from the spec's prose, on the backend of
 * the run, across batch sizes 1..1024 and page sizes 1/16/64/128 with fresh random data
 * and poisoned outputs; on CUDA also directly against the host twin.
 */
#include "harness.h"
#include "ops/ops.h"

static const int64_t page_sizes[] = {1, 16, 64, 128, 4};
static const size_t batch_sizes[] = {1, 2, 7, 64, 255, 256, 257, 1024};

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* --- models ------------------------------------------------------------------------ */

/* Spec 6.8, part by part. */
static void model_extend(size_t n, const int64_t *pre, const int64_t *seq, const int64_t *last, const int64_t *F,
                         int64_t nf, int64_t ps, int64_t *out) {
  int64_t o = 0, S = 0;
  for (size_t i = 0; i < n; i++) {
    int64_t p = pre[i], s = seq[i], ceilp = ceil_div(p, ps) * ps, floors = s / ps * ps;
    int64_t ni = ceil_div(s, ps) - ceil_div(p, ps);
    int64_t a = (s < ceilp ? s : ceilp) - p, k = 0;
    for (; k < a; k++) out[o + k] = last[i] + 1 + k;
    if (p + a < s) {
      int64_t b = floors - ceilp;
      for (int64_t j = 0; j < b; j++, k++) {
        int64_t idx = S + j / ps;
        out[o + k] = idx < nf ? F[idx] * ps + j % ps : 0;
      }
      int64_t c = s - floors;
      if (p + a + b < s)
        for (int64_t j = 0; j < c; j++, k++) {
          int64_t idx = S + ni - 1;
          out[o + k] = idx < nf ? F[idx] * ps + j : 0;
        }
    }
    o += s - p;
    S += ni;
  }
}

static void model_decode(size_t n, const int64_t *seq, const int64_t *last, const int64_t *F, int64_t nf, int64_t ps,
                         int64_t *out) {
  int64_t S = 0;
  for (size_t i = 0; i < n; i++) {
    if ((seq[i] - 1) % ps == 0) {
      out[i] = S < nf ? F[S] * ps : 0;
      S++;
    } else {
      out[i] = last[i] + 1;
    }
  }
}

/* --- helpers ----------------------------------------------------------------------- */

static void *upload(const void *host, size_t bytes) {
  void *d = kvt_dev_alloc(bytes ? bytes : 8);
  if (bytes) kvt_h2d(d, host, bytes);
  return d;
}

static void *to_index(const int64_t *v, size_t n, kvc_index_type t) {
  if (t == KVC_INDEX_I64) return upload(v, n * 8);
  int32_t *w = malloc(n * 4 + 4);
  for (size_t i = 0; i < n; i++) w[i] = (int32_t)v[i];
  void *d = upload(w, n * 4);
  free(w);
  return d;
}

/* --- get_last_loc ------------------------------------------------------------------ */

static void test_get_last_loc_matches_model(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed() ^ 1};
  const int64_t rows = 40, W = 100;
  int32_t *table = malloc(rows * W * 4);
  for (int64_t i = 0; i < rows * W; i++) table[i] = (int32_t)kvt_range(&r, -5, 1 << 30);
  int32_t *dtable = upload(table, rows * W * 4);
  for (int t = 0; t < 4; t++) {
    kvc_index_type rt = t & 1 ? KVC_INDEX_I64 : KVC_INDEX_I32, lt = t & 2 ? KVC_INDEX_I64 : KVC_INDEX_I32;
    for (size_t bi = 0; bi < sizeof batch_sizes / sizeof *batch_sizes; bi++) {
      size_t n = batch_sizes[bi];
      int64_t *row = malloc(n * 8), *pre = malloc(n * 8), *want = malloc(n * 8), *got = malloc(n * 8);
      for (size_t i = 0; i < n; i++) {
        row[i] = kvt_range(&r, 0, rows - 1);
        pre[i] = kvt_range(&r, 0, W);
        if (i % 17 == 5) row[i] = rows + 3; /* out of range: -1, never read */
        if (i % 13 == 3) pre[i] = W + 7;
        if (i % 19 == 7) row[i] = -2; /* negative: the unsigned range check must hold */
        if (i % 23 == 11) pre[i] = -4;
        want[i] = (pre[i] > 0 && pre[i] <= W && row[i] >= 0 && row[i] < rows) ? table[row[i] * W + pre[i] - 1] : -1;
      }
      void *drow = to_index(row, n, rt), *dpre = to_index(pre, n, lt);
      size_t osz = lt == KVC_INDEX_I64 ? 8 : 4;
      void *dout = kvt_dev_alloc(n * osz);
      kvt_poison(dout, n * osz);
      KVT_OK(kvc_get_last_loc(kvt_ctx, dtable, rows, W, drow, rt, dpre, lt, dout, n, NULL));
      kvt_d2h(got, dout, n * osz);
      for (size_t i = 0; i < n; i++) {
        int64_t g = lt == KVC_INDEX_I64 ? got[i] : ((int32_t *)got)[i];
        if (g != want[i]) fail_msg("n=%zu i=%zu types=%d: %lld != %lld", n, i, t, (long long)g, (long long)want[i]);
      }
      kvt_dev_free(drow);
      kvt_dev_free(dpre);
      kvt_dev_free(dout);
      free(row);
      free(pre);
      free(want);
      free(got);
    }
  }
  kvt_dev_free(dtable);
  free(table);
}

/* n == 1 takes the one-thread entries: each range case of the batched kernel, for every
 * type pair, one request per call, and nothing written past out[0]. */
static void test_get_last_loc_single_request(void **state) {
  (void)state;
  const int64_t rows = 6, W = 10;
  int32_t table[6 * 10];
  for (int64_t i = 0; i < rows * W; i++) table[i] = (int32_t)(1000 + i);
  int32_t *dtable = upload(table, sizeof table);
  const int64_t cases[][2] = {{2, 4}, {0, 1}, {5, 10}, {6, 3}, {-1, 3}, {3, 0}, {3, 11}, {3, -2}};
  for (int t = 0; t < 4; t++) {
    kvc_index_type rt = t & 1 ? KVC_INDEX_I64 : KVC_INDEX_I32, lt = t & 2 ? KVC_INDEX_I64 : KVC_INDEX_I32;
    const size_t osz = lt == KVC_INDEX_I64 ? 8 : 4;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
      const int64_t row = cases[c][0], pre = cases[c][1];
      const int64_t want = (row >= 0 && row < rows && pre > 0 && pre <= W) ? table[row * W + pre - 1] : -1;
      void *drow = to_index(&cases[c][0], 1, rt), *dpre = to_index(&cases[c][1], 1, lt);
      void *dout = kvt_dev_alloc(2 * osz);
      kvt_poison(dout, 2 * osz);
      KVT_OK(kvc_get_last_loc(kvt_ctx, dtable, rows, W, drow, rt, dpre, lt, dout, 1, NULL));
      unsigned char got[16];
      kvt_d2h(got, dout, 2 * osz);
      int64_t g;
      if (lt == KVC_INDEX_I64) memcpy(&g, got, 8);
      else {
        int32_t g32;
        memcpy(&g32, got, 4);
        g = g32;
      }
      if (g != want)
        fail_msg("types=%d row=%lld pre=%lld: %lld != %lld", t, (long long)row, (long long)pre, (long long)g,
                 (long long)want);
      for (size_t b = osz; b < 2 * osz; b++) assert_int_equal(got[b], 0xA5);
      kvt_dev_free(drow);
      kvt_dev_free(dpre);
      kvt_dev_free(dout);
    }
  }
  kvt_dev_free(dtable);
}

static void test_get_last_loc_rejects_bad_arguments(void **state) {
  (void)state;
  int32_t dummy = 0;
  KVT_STATUS(kvc_get_last_loc(kvt_ctx, NULL, 1, 1, &dummy, KVC_INDEX_I32, &dummy, KVC_INDEX_I32, &dummy, 1, NULL),
             KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_get_last_loc(kvt_ctx, &dummy, 1, 0, &dummy, KVC_INDEX_I32, &dummy, KVC_INDEX_I32, &dummy, 1, NULL),
             KVC_ERR_INVALID_ARGUMENT);
  /* n == 0 launches nothing and accepts NULL vectors. */
  KVT_OK(kvc_get_last_loc(kvt_ctx, &dummy, 1, 1, NULL, KVC_INDEX_I32, NULL, KVC_INDEX_I32, NULL, 0, NULL));
}

/* --- write_req_to_token ------------------------------------------------------------ */

static void test_write_req_to_token_matches_model(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed() ^ 2};
  for (size_t bi = 0; bi < sizeof batch_sizes / sizeof *batch_sizes; bi++) {
    size_t n = batch_sizes[bi];
    const int64_t rows = (int64_t)n + 3, W = 48;
    int32_t *table = malloc(rows * W * 4), *want = malloc(rows * W * 4);
    memset(table, 0xA5, rows * W * 4);
    memcpy(want, table, rows * W * 4);
    int64_t *row = malloc(n * 8), *pre = malloc(n * 8), *seq = malloc(n * 8);
    uint64_t *ptrs = calloc(n, 8);
    void **dprefix = calloc(n, sizeof(void *));
    int64_t total = 0;
    for (size_t i = 0; i < n; i++) {
      row[i] = (int64_t)i + 1; /* distinct rows */
      pre[i] = kvt_range(&r, 0, 20);
      seq[i] = pre[i] + kvt_range(&r, 0, 28);
      total += seq[i] - pre[i];
    }
    int64_t *loc = malloc((size_t)total * 8 + 8);
    for (int64_t k = 0; k < total; k++) loc[k] = kvt_range(&r, 1, 1 << 30);
    int64_t off = 0;
    for (size_t i = 0; i < n; i++) {
      int32_t *dst = want + row[i] * W;
      if (pre[i] > 0 && i % 3 != 1) { /* some requests have no prefix pointer */
        int64_t *pv = malloc((size_t)pre[i] * 8);
        for (int64_t t = 0; t < pre[i]; t++) pv[t] = kvt_range(&r, 1, 1 << 30), dst[t] = (int32_t)pv[t];
        dprefix[i] = upload(pv, (size_t)pre[i] * 8);
        ptrs[i] = (uint64_t)(uintptr_t)dprefix[i];
        free(pv);
      }
      for (int64_t t = 0; t < seq[i] - pre[i]; t++) dst[pre[i] + t] = (int32_t)loc[off + t];
      off += seq[i] - pre[i];
    }
    int32_t *dtable = upload(table, rows * W * 4);
    void *drow = to_index(row, n, KVC_INDEX_I64), *dpre = to_index(pre, n, KVC_INDEX_I32),
         *dseq = to_index(seq, n, KVC_INDEX_I32);
    void *dptrs = upload(ptrs, n * 8), *dloc = upload(loc, (size_t)total * 8);
    KVT_OK(kvc_write_req_to_token(kvt_ctx, dtable, rows, W, drow, KVC_INDEX_I64, dptrs, dpre, dseq, KVC_INDEX_I32, dloc,
                                  n, NULL));
    kvt_d2h(table, dtable, rows * W * 4);
    for (int64_t k = 0; k < rows * W; k++)
      if (table[k] != want[k]) fail_msg("n=%zu entry %lld: %d != %d", n, (long long)k, table[k], want[k]);
    for (size_t i = 0; i < n; i++) kvt_dev_free(dprefix[i]);
    kvt_dev_free(dtable);
    kvt_dev_free(drow);
    kvt_dev_free(dpre);
    kvt_dev_free(dseq);
    kvt_dev_free(dptrs);
    kvt_dev_free(dloc);
    free(table);
    free(want);
    free(row);
    free(pre);
    free(seq);
    free(ptrs);
    free(dprefix);
    free(loc);
  }
}

/* --- alloc fills ------------------------------------------------------------------- */

static void run_extend(size_t n, const int64_t *pre, const int64_t *seq, const int64_t *last, const int64_t *F,
                       int64_t nf, int64_t ps, int64_t *got) {
  int64_t total = 0;
  for (size_t i = 0; i < n; i++) total += seq[i] - pre[i];
  void *dpre = to_index(pre, n, KVC_INDEX_I64), *dseq = to_index(seq, n, KVC_INDEX_I64);
  void *dlast = upload(last, n * 8), *dF = upload(F, (size_t)nf * 8), *dout = kvt_dev_alloc((size_t)total * 8 + 8);
  kvt_poison(dout, (size_t)total * 8);
  KVT_OK(kvc_alloc_extend_fill(kvt_ctx, dpre, dseq, KVC_INDEX_I64, dlast, dF, nf, ps, dout, n, NULL));
  kvt_d2h(got, dout, (size_t)total * 8);
  kvt_dev_free(dpre);
  kvt_dev_free(dseq);
  kvt_dev_free(dlast);
  kvt_dev_free(dF);
  kvt_dev_free(dout);
}

static void test_extend_fill_spec_example(void **state) {
  (void)state;
  /* Spec 6.8 worked example, page size 4. */
  const int64_t pre[] = {6, 0}, seq[] = {13, 3}, last[] = {9, -1}, F[] = {7, 3, 9, 5};
  const int64_t want[] = {10, 11, 28, 29, 30, 31, 12, 36, 37, 38};
  int64_t got[10];
  run_extend(2, pre, seq, last, F, 4, 4, got);
  assert_memory_equal(got, want, sizeof want);
}

static void test_extend_fill_matches_model(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed() ^ 3};
  for (size_t pi = 0; pi < sizeof page_sizes / sizeof *page_sizes; pi++) {
    int64_t ps = page_sizes[pi];
    for (size_t bi = 0; bi < sizeof batch_sizes / sizeof *batch_sizes; bi++) {
      size_t n = batch_sizes[bi];
      int64_t *pre = malloc(n * 8), *seq = malloc(n * 8), *last = malloc(n * 8);
      int64_t total = 0, pages = 0;
      for (size_t i = 0; i < n; i++) {
        pre[i] = kvt_range(&r, 0, 3 * ps);
        if (i % 5 == 0) pre[i] = pre[i] / ps * ps; /* page-aligned prefixes */
        seq[i] = pre[i] + kvt_range(&r, 0, 2 * ps + 3);
        /* last_loc at in-page offset (pre-1) % ps, in some page */
        last[i] = pre[i] ? kvt_range(&r, 1, 1000) * ps + (pre[i] - 1) % ps : -1;
        total += seq[i] - pre[i];
        pages += ceil_div(seq[i], ps) - ceil_div(pre[i], ps);
      }
      int64_t nf = pages - (n % 3 == 0 ? 1 : 0); /* sometimes one page short: tail slots 0 */
      if (nf < 0) nf = 0;
      int64_t *F = malloc((size_t)(nf + 1) * 8);
      for (int64_t j = 0; j < nf; j++) F[j] = kvt_range(&r, 1, 1 << 20);
      int64_t *want = malloc((size_t)total * 8 + 8), *got = malloc((size_t)total * 8 + 8);
      model_extend(n, pre, seq, last, F, nf, ps, want);
      run_extend(n, pre, seq, last, F, nf, ps, got);
      for (int64_t k = 0; k < total; k++)
        if (got[k] != want[k])
          fail_msg("ps=%lld n=%zu k=%lld: %lld != %lld", (long long)ps, n, (long long)k, (long long)got[k],
                   (long long)want[k]);
      free(pre);
      free(seq);
      free(last);
      free(F);
      free(want);
      free(got);
    }
  }
}

static void run_decode(size_t n, const int64_t *seq, const int64_t *last, kvc_index_type lt, const int64_t *F,
                       int64_t nf, int64_t ps, int64_t *got) {
  void *dseq = to_index(seq, n, KVC_INDEX_I64), *dlast = to_index(last, n, lt);
  void *dF = upload(F, (size_t)nf * 8), *dout = kvt_dev_alloc(n * 8);
  kvt_poison(dout, n * 8);
  KVT_OK(kvc_alloc_decode_fill(kvt_ctx, dseq, KVC_INDEX_I64, dlast, lt, dF, nf, ps, dout, n, NULL));
  kvt_d2h(got, dout, n * 8);
  kvt_dev_free(dseq);
  kvt_dev_free(dlast);
  kvt_dev_free(dF);
  kvt_dev_free(dout);
}

static void test_decode_fill_spec_example(void **state) {
  (void)state;
  /* Spec 6.9: ps 4, F = [7, 3], new lengths [13, 7, 5], last_locs [x, 25, y]. */
  const int64_t seq[] = {13, 7, 5}, last[] = {999, 25, 999}, F[] = {7, 3}, want[] = {28, 26, 12};
  int64_t got[3];
  run_decode(3, seq, last, KVC_INDEX_I32, F, 2, 4, got);
  assert_memory_equal(got, want, sizeof want);
}

static void test_decode_fill_matches_model(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed() ^ 4};
  for (size_t pi = 0; pi < sizeof page_sizes / sizeof *page_sizes; pi++) {
    int64_t ps = page_sizes[pi];
    for (size_t bi = 0; bi < sizeof batch_sizes / sizeof *batch_sizes; bi++) {
      size_t n = batch_sizes[bi];
      int64_t *seq = malloc(n * 8), *last = malloc(n * 8), *want = malloc(n * 8), *got = malloc(n * 8);
      int64_t pages = 0;
      for (size_t i = 0; i < n; i++) {
        seq[i] = kvt_range(&r, 1, 4 * ps + 2);
        last[i] = kvt_range(&r, 1, 1 << 20) * ps + (seq[i] - 2 + ps) % ps;
        pages += (seq[i] - 1) % ps == 0;
      }
      int64_t nf = pages > 0 && n % 2 ? pages - 1 : pages;
      int64_t *F = malloc((size_t)(nf + 1) * 8);
      for (int64_t j = 0; j < nf; j++) F[j] = kvt_range(&r, 1, 1 << 20);
      for (int lt = 0; lt < 2; lt++) {
        kvc_index_type t = lt ? KVC_INDEX_I64 : KVC_INDEX_I32;
        model_decode(n, seq, last, F, nf, ps, want);
        run_decode(n, seq, last, t, F, nf, ps, got);
        for (size_t i = 0; i < n; i++)
          if (got[i] != want[i])
            fail_msg("ps=%lld n=%zu i=%zu: %lld != %lld", (long long)ps, n, i, (long long)got[i], (long long)want[i]);
      }
      free(seq);
      free(last);
      free(want);
      free(got);
      free(F);
    }
  }
}

/* --- plan_decode's two payload forms ------------------------------------------------ */

/* One kvc_plan_decode launch on the run's backend (inline or, under
 * KVC_INLINE_MAX_WORDS=0, staged) of n entries in the form table_len selects, against
 * the model: out[i] = slot, the table entry the entry names written unless its index is
 * out of bounds (two-word: offset >= table_len; three-word: row < 0). */
static void run_plan_decode_form(kvt_rng *r, size_t n, int32_t rows, int32_t width, bool two) {
  const size_t entries = (size_t)rows * (size_t)width, words = (two ? 2 : 3) * n;
  int32_t *table = malloc(entries * 4), *want = malloc(entries * 4);
  int64_t *out = malloc(n * 8), *want_out = malloc(n * 8);
  uint32_t *payload = malloc(words * 4);
  for (size_t j = 0; j < entries; j++) table[j] = want[j] = -7;
  for (size_t i = 0; i < n; i++) {
    /* distinct rows (rows >= n), so no two threads write one entry */
    const int32_t row = (int32_t)i, pos = (int32_t)kvt_range(r, 0, width - 1);
    const int32_t slot = (int32_t)kvt_range(r, 1, 1 << 30);
    const int64_t kind = kvt_range(r, 0, 7); /* 0, 1: an index the kernel must skip */
    want_out[i] = slot;
    if (two) {
      const uint32_t off = (uint32_t)row * (uint32_t)width + (uint32_t)pos;
      payload[2 * i] = kind == 0 ? (uint32_t)entries : kind == 1 ? UINT32_MAX : off;
      payload[2 * i + 1] = (uint32_t)slot;
      if (kind > 1) want[off] = slot;
    } else {
      payload[3 * i] = kind < 2 ? UINT32_MAX : (uint32_t)row; /* row -1 */
      payload[3 * i + 1] = (uint32_t)pos;
      payload[3 * i + 2] = (uint32_t)slot;
      if (kind > 1) want[(size_t)row * (size_t)width + (size_t)pos] = slot;
    }
  }
  void *dt = upload(table, entries * 4), *dout = kvt_dev_alloc(n * 8);
  kvt_poison(dout, n * 8);
  unsigned char *scratch = aligned_alloc(8, KVC__PARAM_SCRATCH_BYTES);
  const kvc__kfunc *kc[KVC__PLAN_INLINE_VARIANTS] = {0};
  kvc__plan plan;
  KVT_OK(kvc__plan_begin(kvt_ctx, &plan, scratch, sizeof(kvc_p_plan_decode), words));
  memcpy(plan.payload, payload, words * 4);
  kvc_p_plan_decode h;
  memset(&h, 0, sizeof h);
  h.table = (uint64_t)(uintptr_t)dt;
  h.out = (uint64_t)(uintptr_t)dout;
  h.staged = plan.staged_dev;
  h.row_stride = width;
  h.n = (int32_t)n;
  h.table_len = two ? (int32_t)entries : 0;
  KVT_OK(kvc__plan_launch(kvt_ctx, &plan, &kvc__k_plan_decode, NULL, kc, kvc__dim((unsigned)((n + 255) / 256), 1, 1),
                          kvc__dim(256, 1, 1), NULL, &h));
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  kvt_d2h(table, dt, entries * 4);
  kvt_d2h(out, dout, n * 8);
  assert_memory_equal(table, want, entries * 4);
  assert_memory_equal(out, want_out, n * 8);
  kvt_dev_free(dt);
  kvt_dev_free(dout);
  free(scratch);
  free(table);
  free(want);
  free(out);
  free(want_out);
  free(payload);
}

static void test_plan_decode_both_payload_forms(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed() ^ 11};
  for (size_t b = 0; b < sizeof batch_sizes / sizeof *batch_sizes; b++) {
    const size_t n = batch_sizes[b];
    const int32_t rows = (int32_t)n + 3, width = (int32_t)kvt_range(&r, 1, 40);
    run_plan_decode_form(&r, n, rows, width, true);
    run_plan_decode_form(&r, n, rows, width, false);
  }
}

/* --- CUDA against the host twin, directly ------------------------------------------- */

static void test_cuda_extend_fill_equals_host_twin(void **state) {
  (void)state;
  kvt_require_cuda();
  kvt_rng r = {kvt_seed() ^ 5};
  for (int rep = 0; rep < 8; rep++) {
    size_t n = (size_t)kvt_range(&r, 1, 1024);
    int64_t ps = page_sizes[rep % 4];
    int64_t *pre = malloc(n * 8), *seq = malloc(n * 8), *last = malloc(n * 8);
    int64_t total = 0, pages = 0;
    for (size_t i = 0; i < n; i++) {
      pre[i] = kvt_range(&r, 0, 4 * ps);
      seq[i] = pre[i] + kvt_range(&r, 0, 300);
      last[i] = pre[i] ? kvt_range(&r, 1, 1000) * ps + (pre[i] - 1) % ps : -1;
      total += seq[i] - pre[i];
      pages += ceil_div(seq[i], ps) - ceil_div(pre[i], ps);
    }
    int64_t *F = malloc((size_t)(pages + 1) * 8);
    for (int64_t j = 0; j < pages; j++) F[j] = kvt_range(&r, 1, 1 << 20);
    int64_t *a = malloc((size_t)total * 8 + 8), *b = malloc((size_t)total * 8 + 8);
    run_extend(n, pre, seq, last, F, pages, ps, a);
    /* host twin */
    kvc_context *h = kvt_host;
    void *hp = kvt_alloc_on(h, n * 8), *hs = kvt_alloc_on(h, n * 8), *hl = kvt_alloc_on(h, n * 8),
         *hf = kvt_alloc_on(h, (size_t)pages * 8 + 8), *ho = kvt_alloc_on(h, (size_t)total * 8 + 8);
    memcpy(hp, pre, n * 8);
    memcpy(hs, seq, n * 8);
    memcpy(hl, last, n * 8);
    memcpy(hf, F, (size_t)pages * 8);
    KVT_OK(kvc_alloc_extend_fill(h, hp, hs, KVC_INDEX_I64, hl, hf, pages, ps, ho, n, NULL));
    memcpy(b, ho, (size_t)total * 8);
    assert_memory_equal(a, b, (size_t)total * 8);
    kvc_memory_free(h, hp);
    kvc_memory_free(h, hs);
    kvc_memory_free(h, hl);
    kvc_memory_free(h, hf);
    kvc_memory_free(h, ho);
    free(pre);
    free(seq);
    free(last);
    free(F);
    free(a);
    free(b);
  }
}

/* The host backend runs a kernel as the C twin registered under its entry name: every
 * kernel of the table must have one (a kernel without one would fail at lookup). */
static void test_every_kernel_has_a_host_twin(void **state) {
  (void)state;
  assert_true(kvc__kernel_table_len > 0);
  kvc_context *h = kvt_host ? kvt_host : kvt_ctx;
  for (size_t i = 0; i < kvc__kernel_table_len; i++) {
    const kvc__kernel_def *def = kvc__kernel_table[i];
    const kvc__kfunc *f = NULL;
    kvc_status st = kvc__kernel_get(h, def, NULL, &f);
    if (st != KVC_OK) fail_msg("%s: %s", def->name, kvc_last_error(h));
    assert_non_null(f);
  }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_every_kernel_has_a_host_twin),     cmocka_unit_test(test_get_last_loc_matches_model),
    cmocka_unit_test(test_get_last_loc_single_request),      cmocka_unit_test(test_get_last_loc_rejects_bad_arguments),
    cmocka_unit_test(test_write_req_to_token_matches_model), cmocka_unit_test(test_extend_fill_spec_example),
    cmocka_unit_test(test_extend_fill_matches_model),        cmocka_unit_test(test_decode_fill_spec_example),
    cmocka_unit_test(test_decode_fill_matches_model),        cmocka_unit_test(test_cuda_extend_fill_equals_host_twin),
    cmocka_unit_test(test_plan_decode_both_payload_forms),
};
KVT_MAIN("ops", tests)
