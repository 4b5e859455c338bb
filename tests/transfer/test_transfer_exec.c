#define _POSIX_C_SOURCE 200809L
/*
 * test_transfer_exec.c — running transfer plans between two pools, checked bit for bit
 * against a host model of the plan's pairs, for MHA, MLA, NSA (fp8 rows and index-K
 * pages) and Mamba state pools at page sizes 1, 16 and 64:
 *   - the local path (host backend: memcpy, the twin CI runs; CUDA: same-device copies),
 *     within one context and between two contexts, with the target layout taken from
 *     its serialised bytes as a remote process would;
 *   - CUDA only: the NCCL path with two ranks of a one-process communicator on the one
 *     GPU, one thread per rank (skipped with the reason when NCCL is missing or refuses
 *     two ranks on one device).
 * Page lists are fragmented the way allocators fragment them (random chunks of
 * consecutive pages, shuffled), independently on the two sides, and the run count is
 * checked against a count derived independently: pairs with no predecessor pair.
 */
#include "transfer_test_util.h"

#include <dlfcn.h>
#include <pthread.h>

#include "transfer/nccl_api.h"

/* FAM_MLA1: one layer, so no region shares a strided copy (the per-region path). */
typedef enum pool_family { FAM_MHA, FAM_MLA, FAM_NSA, FAM_MAMBA, FAM_MLA1 } pool_family;

typedef struct side {
  kvc_context *ctx;
  kvc_kv_pool *kv;
  kvc_mamba_pool *mamba;
  kvc_transfer_layout *layout;
} side;

/* A pool of `pages` pages (so two sides may differ in capacity and in layer stride). */
static void side_open(side *s, kvc_context *ctx, pool_family fam, int ps, int64_t pages) {
  memset(s, 0, sizeof *s);
  s->ctx = ctx;
  const int64_t size = pages * (int64_t)ps;
  switch (fam) {
  case FAM_MHA: s->kv = kvt_xfer_pool(ctx, kvt_mha_config(KVC_KV_MHA, KVC_DTYPE_BF16, 2, 8, 0, size, 3, ps)); break;
  case FAM_MLA: s->kv = kvt_xfer_pool(ctx, kvt_latent_config(KVC_KV_MLA, KVC_DTYPE_BF16, 16, 8, size, 2, ps)); break;
  case FAM_NSA:
    s->kv = kvt_xfer_pool(ctx, kvt_latent_config(KVC_KV_NSA, KVC_DTYPE_FP8_E4M3, 512, 64, size, 2, ps));
    break;
  case FAM_MAMBA: s->mamba = kvt_xfer_mamba(ctx, (int32_t)pages + 8, 2, KVC_DTYPE_BF16); break;
  case FAM_MLA1: s->kv = kvt_xfer_pool(ctx, kvt_latent_config(KVC_KV_MLA, KVC_DTYPE_F16, 32, 0, size, 1, ps)); break;
  }
  kvc_status st = s->kv ? kvc_transfer_layout_from_kv_pool(s->kv, &s->layout)
                        : kvc_transfer_layout_from_mamba_pool(s->mamba, &s->layout);
  if (st != KVC_OK) fail_msg("layout: %s", kvc_last_error(ctx));
}

static void side_close(side *s) {
  kvc_transfer_layout_destroy(s->layout);
  kvc_kv_pool_destroy(s->kv);
  kvc_mamba_pool_destroy(s->mamba);
}

static size_t region_bytes(const kvc_transfer_region_info *r) { return (size_t)(r->pages * r->page_bytes); }

/* Every region's whole pages, read back (one malloc'd block per region). */
static uint8_t **side_read(const side *s) {
  const int32_t n = kvc_transfer_layout_num_regions(s->layout);
  uint8_t **out = calloc((size_t)n, sizeof *out);
  for (int32_t i = 0; i < n; i++) {
    kvc_transfer_region_info r;
    KVT_OK(kvc_transfer_layout_region(s->layout, i, &r));
    out[i] = malloc(region_bytes(&r));
    kvt_d2h_on(s->ctx, out[i], (void *)(uintptr_t)r.base, region_bytes(&r));
  }
  return out;
}

static void side_fill(const side *s, kvt_rng *rng) {
  const int32_t n = kvc_transfer_layout_num_regions(s->layout);
  for (int32_t i = 0; i < n; i++) {
    kvc_transfer_region_info r;
    KVT_OK(kvc_transfer_layout_region(s->layout, i, &r));
    uint8_t *h = malloc(region_bytes(&r));
    for (size_t b = 0; b < region_bytes(&r); b++) h[b] = (uint8_t)kvt_next(rng);
    kvt_h2d_on(s->ctx, (void *)(uintptr_t)r.base, h, region_bytes(&r));
    free(h);
  }
}

static void free_blocks(uint8_t **b, int32_t n) {
  for (int32_t i = 0; i < n; i++) free(b[i]);
  free(b);
}

/* Pages 1..pages-1 cut into chunks of 1..5 consecutive pages, chunks shuffled. */
static int64_t *fragmented_pages(kvt_rng *rng, int64_t pages, size_t *count) {
  const size_t n = (size_t)(pages - 1);
  int64_t *starts = malloc(n * sizeof *starts), *lens = malloc(n * sizeof *lens), *out = malloc(n * sizeof *out);
  size_t chunks = 0;
  for (int64_t p = 1; p < pages;) {
    int64_t len = kvt_range(rng, 1, 5);
    if (p + len > pages) len = pages - p;
    starts[chunks] = p, lens[chunks] = len, chunks++;
    p += len;
  }
  for (size_t i = chunks; i > 1; i--) {
    size_t j = (size_t)kvt_range(rng, 0, (int64_t)i - 1);
    int64_t t = starts[i - 1];
    starts[i - 1] = starts[j], starts[j] = t;
    t = lens[i - 1], lens[i - 1] = lens[j], lens[j] = t;
  }
  size_t k = 0;
  for (size_t c = 0; c < chunks; c++)
    for (int64_t q = 0; q < lens[c]; q++) out[k++] = starts[c] + q;
  free(starts);
  free(lens);
  *count = k;
  return out;
}

/* The page ids every region of the layout accepts. */
static int64_t min_pages(const kvc_transfer_layout *l) {
  int64_t pages = INT64_MAX;
  for (int32_t i = 0; i < kvc_transfer_layout_num_regions(l); i++) {
    kvc_transfer_region_info r;
    KVT_OK(kvc_transfer_layout_region(l, i, &r));
    if (r.pages < pages) pages = r.pages;
  }
  return pages;
}

/* Minimal runs, counted without the library's method: pairs whose (src-1, dst-1) pair
 * is absent each start one run. */
static size_t expected_runs(const int64_t *s, const int64_t *d, size_t n) {
  size_t runs = 0;
  for (size_t i = 0; i < n; i++) {
    bool has_pred = false;
    for (size_t j = 0; j < n && !has_pred; j++) has_pred = s[j] == s[i] - 1 && d[j] == d[i] - 1;
    runs += !has_pred;
  }
  return runs;
}

typedef struct scenario {
  pool_family fam;
  int ps;
  int two_contexts;  /* target pool on a second context of the same backend */
  int via_bytes;     /* target layout through serialize/deserialize */
  int bigger_target; /* the target pool holds 1.5x the source's pages (other strides) */
  int nccl;          /* run over NCCL (CUDA only) instead of the local path */
} scenario;

static kvc_status run_over_nccl(const kvc_transfer_plan *plan, side *src, side *dst, const char **skip_reason);

static void run_scenario(const scenario *sc) {
  kvt_rng rng = {kvt_seed() ^ ((uint64_t)sc->fam << 8) ^ (uint64_t)sc->ps};
  kvc_context *other = NULL;
  if (sc->two_contexts) {
    kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
    cfg.backend = kvc_context_backend(kvt_ctx);
    KVT_OK(kvc_context_create(&cfg, &other));
  }
  const int ps = sc->fam == FAM_MAMBA ? 1 : sc->ps;
  side src, dst;
  side_open(&src, kvt_ctx, sc->fam, ps, 32);
  side_open(&dst, other ? other : kvt_ctx, sc->fam, ps, sc->bigger_target ? 48 : 32);
  side_fill(&src, &rng);
  side_fill(&dst, &rng);
  const int32_t nreg = kvc_transfer_layout_num_regions(src.layout);

  size_t ns = 0, nd = 0;
  int64_t *sp = fragmented_pages(&rng, min_pages(src.layout), &ns);
  int64_t *dp = fragmented_pages(&rng, min_pages(dst.layout), &nd);
  const size_t n = (ns < nd ? ns : nd) * 3 / 4; /* leave some target pages untouched */

  kvc_transfer_layout *dst_layout = dst.layout, *remote = NULL;
  if (sc->via_bytes) {
    size_t bytes = 0;
    KVT_OK(kvc_transfer_layout_serialize(dst.layout, NULL, 0, &bytes));
    void *buf = malloc(bytes);
    KVT_OK(kvc_transfer_layout_serialize(dst.layout, buf, bytes, &bytes));
    KVT_OK(kvc_transfer_layout_deserialize(kvt_ctx, buf, bytes, &remote));
    free(buf);
    dst_layout = remote;
  }
  kvc_transfer_plan *plan = NULL;
  KVT_OK(kvc_transfer_plan_create(kvt_ctx, src.layout, dst_layout, sp, dp, n, &plan));
  assert_int_equal(kvc_transfer_plan_num_runs(plan), expected_runs(sp, dp, n));
  assert_int_equal(kvc_transfer_plan_num_copies(plan), kvc_transfer_plan_num_runs(plan) * (size_t)nreg);

  uint8_t **src_before = side_read(&src), **want = side_read(&dst);
  for (size_t i = 0; i < n; i++)
    for (int32_t g = 0; g < nreg; g++) {
      kvc_transfer_region_info r;
      KVT_OK(kvc_transfer_layout_region(src.layout, g, &r));
      memcpy(want[g] + dp[i] * r.page_bytes, src_before[g] + sp[i] * r.page_bytes, (size_t)r.page_bytes);
    }

  const char *skip_reason = NULL;
  if (sc->nccl) {
    KVT_OK(run_over_nccl(plan, &src, &dst, &skip_reason));
  } else {
    KVT_OK(kvc_transfer_plan_copy_local(plan, src.ctx, dst.ctx, NULL));
    KVT_OK(kvc_stream_synchronize(dst.ctx, NULL));
  }
  if (!skip_reason) {
    uint8_t **got = side_read(&dst), **src_after = side_read(&src);
    for (int32_t g = 0; g < nreg; g++) {
      kvc_transfer_region_info r, rd;
      KVT_OK(kvc_transfer_layout_region(src.layout, g, &r));
      KVT_OK(kvc_transfer_layout_region(dst.layout, g, &rd));
      for (int64_t p = 0; p < rd.pages; p++) {
        if (memcmp(got[g] + p * r.page_bytes, want[g] + p * r.page_bytes, (size_t)r.page_bytes))
          fail_msg("family %d ps %d region %d page %lld differs after transfer (seed %llu)", sc->fam, ps, g,
                   (long long)p, (unsigned long long)kvt_seed());
      }
      assert_memory_equal(src_after[g], src_before[g], region_bytes(&r));
    }
    free_blocks(got, nreg);
    free_blocks(src_after, nreg);
  }
  free_blocks(src_before, nreg);
  free_blocks(want, nreg);
  kvc_transfer_plan_destroy(plan);
  kvc_transfer_layout_destroy(remote);
  free(sp);
  free(dp);
  side_close(&src);
  side_close(&dst);
  kvc_context_destroy(other);
  if (skip_reason) {
    printf("[  SKIPPED ] NCCL path: %s\n", skip_reason);
    skip();
  }
}

static void run_all_page_sizes(pool_family fam, int two_contexts, int via_bytes, int nccl) {
  const int sizes[] = {1, 16, 64};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    scenario sc = {fam, sizes[i], two_contexts, via_bytes, (int)(i % 2), nccl};
    run_scenario(&sc);
    if (fam == FAM_MAMBA) break; /* one slot per page: page size does not apply */
  }
}

static void test_mha_local(void **state) { (void)state, run_all_page_sizes(FAM_MHA, 0, 0, 0); }
static void test_mla_local(void **state) { (void)state, run_all_page_sizes(FAM_MLA, 0, 0, 0); }
static void test_nsa_local(void **state) { (void)state, run_all_page_sizes(FAM_NSA, 0, 0, 0); }
static void test_mamba_local(void **state) { (void)state, run_all_page_sizes(FAM_MAMBA, 0, 0, 0); }
static void test_one_layer_local(void **state) { (void)state, run_all_page_sizes(FAM_MLA1, 1, 0, 0); }
static void test_mha_two_contexts_remote_layout(void **state) { (void)state, run_all_page_sizes(FAM_MHA, 1, 1, 0); }
static void test_nsa_two_contexts_remote_layout(void **state) { (void)state, run_all_page_sizes(FAM_NSA, 1, 1, 0); }
static void test_mamba_two_contexts(void **state) { (void)state, run_all_page_sizes(FAM_MAMBA, 1, 0, 0); }

/* A context of the other backend, or a pool of another context, is refused before
 * anything is copied. */
static void test_wrong_context_refused(void **state) {
  (void)state;
  kvt_rng rng = {kvt_seed()};
  side a, b;
  side_open(&a, kvt_ctx, FAM_MHA, 16, 32);
  side_open(&b, kvt_ctx, FAM_MHA, 16, 32);
  side_fill(&a, &rng);
  side_fill(&b, &rng);
  uint8_t **before = side_read(&b);
  const int64_t s[] = {1, 2}, d[] = {3, 4};
  kvc_transfer_plan *plan = NULL;
  KVT_OK(kvc_transfer_plan_create(kvt_ctx, a.layout, b.layout, s, d, 2, &plan));
  if (kvt_host) {
    KVT_STATUS(kvc_transfer_plan_copy_local(plan, kvt_ctx, kvt_host, NULL), KVC_ERR_UNSUPPORTED);
  } else {
    /* Host backend: a NULL context, and NCCL, are refused. */
    KVT_STATUS(kvc_transfer_plan_copy_local(plan, kvt_ctx, NULL, NULL), KVC_ERR_INVALID_ARGUMENT);
    KVT_STATUS(kvc_transfer_plan_recv(plan, kvt_ctx, (void *)plan, 0, NULL), KVC_ERR_UNSUPPORTED);
  }
  uint8_t **after = side_read(&b);
  const int32_t nreg = kvc_transfer_layout_num_regions(b.layout);
  for (int32_t g = 0; g < nreg; g++) {
    kvc_transfer_region_info r;
    KVT_OK(kvc_transfer_layout_region(b.layout, g, &r));
    assert_memory_equal(after[g], before[g], region_bytes(&r));
  }
  free_blocks(before, nreg);
  free_blocks(after, nreg);
  kvc_transfer_plan_destroy(plan);
  side_close(&a);
  side_close(&b);
}

/* --- NCCL: two ranks of one communicator, one thread each, on the one device -------- */

typedef struct rank_job {
  const kvc__nccl_api *nccl;
  kvc__nccl_unique_id id;
  int rank;
  const kvc_transfer_plan *plan;
  side *me;
  kvc__nccl_result init_result;
  kvc_status status;
  char error[512];
} rank_job;

typedef int (*stream_create_fn)(void **stream, unsigned flags);
typedef int (*stream_destroy_fn)(void *stream);
static stream_create_fn stream_create;
static stream_destroy_fn stream_destroy;

static void *rank_main(void *arg) {
  rank_job *j = arg;
  void *comm = NULL, *stream = NULL;
  j->status = KVC_OK;
  /* Any library call makes the context's primary context current on this thread, which
   * is the device NCCL (through the CUDA runtime) binds the rank to. */
  kvc_device_info info;
  j->status = kvc_context_device_info(j->me->ctx, &info);
  if (j->status == KVC_OK) j->status = kvc_stream_synchronize(j->me->ctx, NULL);
  if (j->status != KVC_OK) goto out;
  j->init_result = j->nccl->comm_init_rank(&comm, 2, j->id, j->rank);
  if (j->init_result != KVC__NCCL_SUCCESS) {
    const char *last = j->nccl->get_last_error ? j->nccl->get_last_error(NULL) : "";
    snprintf(j->error, sizeof j->error, "ncclCommInitRank(rank %d of 2 on one device): %s %s", j->rank,
             j->nccl->get_error_string(j->init_result), last ? last : "");
    goto out;
  }
  if (stream_create(&stream, 1 /* CU_STREAM_NON_BLOCKING */) != 0) {
    j->status = KVC_ERR_CUDA;
    snprintf(j->error, sizeof j->error, "cuStreamCreate failed");
    goto out;
  }
  j->status = j->rank == 0 ? kvc_transfer_plan_send(j->plan, j->me->ctx, comm, 1, stream)
                           : kvc_transfer_plan_recv(j->plan, j->me->ctx, comm, 0, stream);
  if (j->status == KVC_OK) j->status = kvc_stream_synchronize(j->me->ctx, stream);
  if (j->status != KVC_OK) snprintf(j->error, sizeof j->error, "%s", kvc_last_error(j->me->ctx));
out:
  if (stream) stream_destroy(stream);
  if (comm) j->nccl->comm_destroy(comm);
  return NULL;
}

static kvc_status run_over_nccl(const kvc_transfer_plan *plan, side *src, side *dst, const char **skip_reason) {
  static char reason[1200];
  kvc_status st;
  const kvc__nccl_api *nccl = kvc__nccl_load(kvt_ctx, &st);
  if (!nccl) {
    snprintf(reason, sizeof reason, "NCCL not available: %s", kvc_last_error(kvt_ctx));
    *skip_reason = reason;
    return KVC_OK;
  }
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  assert_non_null(cuda);
  *(void **)&stream_create = dlsym(cuda, "cuStreamCreate");
  *(void **)&stream_destroy = dlsym(cuda, "cuStreamDestroy_v2");
  assert_true(stream_create && stream_destroy);
  rank_job jobs[2];
  memset(jobs, 0, sizeof jobs);
  kvc__nccl_result r = nccl->get_unique_id(&jobs[0].id);
  if (r != KVC__NCCL_SUCCESS) fail_msg("ncclGetUniqueId: %s", nccl->get_error_string(r));
  jobs[1].id = jobs[0].id;
  pthread_t threads[2];
  for (int k = 0; k < 2; k++) {
    jobs[k].nccl = nccl;
    jobs[k].rank = k;
    jobs[k].plan = plan;
    jobs[k].me = k == 0 ? src : dst;
    assert_int_equal(pthread_create(&threads[k], NULL, rank_main, &jobs[k]), 0);
  }
  for (int k = 0; k < 2; k++) pthread_join(threads[k], NULL);
  dlclose(cuda);
  if (jobs[0].init_result != KVC__NCCL_SUCCESS || jobs[1].init_result != KVC__NCCL_SUCCESS) {
    /* NCCL refuses two ranks on one GPU in many versions ("Duplicate GPU detected"). */
    snprintf(reason, sizeof reason, "NCCL refused the one-device communicator: %s | %s", jobs[0].error, jobs[1].error);
    *skip_reason = reason;
    return KVC_OK;
  }
  for (int k = 0; k < 2; k++)
    if (jobs[k].status != KVC_OK) fail_msg("rank %d: %s: %s", k, kvc_status_name(jobs[k].status), jobs[k].error);
  return KVC_OK;
}

static void test_mha_nccl(void **state) {
  (void)state;
  kvt_require_cuda();
  run_all_page_sizes(FAM_MHA, 0, 0, 1);
}
static void test_mla_nccl(void **state) {
  (void)state;
  kvt_require_cuda();
  run_all_page_sizes(FAM_MLA, 0, 0, 1);
}
static void test_nsa_nccl(void **state) {
  (void)state;
  kvt_require_cuda();
  run_all_page_sizes(FAM_NSA, 0, 0, 1);
}
static void test_mamba_nccl(void **state) {
  (void)state;
  kvt_require_cuda();
  run_all_page_sizes(FAM_MAMBA, 0, 0, 1);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mha_local),
      cmocka_unit_test(test_mla_local),
      cmocka_unit_test(test_nsa_local),
      cmocka_unit_test(test_mamba_local),
      cmocka_unit_test(test_one_layer_local),
      cmocka_unit_test(test_mha_two_contexts_remote_layout),
      cmocka_unit_test(test_nsa_two_contexts_remote_layout),
      cmocka_unit_test(test_mamba_two_contexts),
      cmocka_unit_test(test_wrong_context_refused),
      cmocka_unit_test(test_mha_nccl),
      cmocka_unit_test(test_mla_nccl),
      cmocka_unit_test(test_nsa_nccl),
      cmocka_unit_test(test_mamba_nccl),
  };
  return kvt_main(argc, argv, "transfer_exec", tests, sizeof tests / sizeof tests[0]);
}
