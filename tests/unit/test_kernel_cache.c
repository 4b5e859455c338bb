/*
 * The compiled-kernel cache: cold start compiles and writes cubins, a new context loads
 * them from disk without compiling, corrupt or truncated entries are ignored and rebuilt,
 * and the rebuilt kernels still run. CUDA only (the host backend compiles nothing).
 */
#define _POSIX_C_SOURCE 200809L
#include "harness.h"

#include <dirent.h>
#include <unistd.h>

static kvc_context *make(const char *dir) {
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  cfg.backend = KVC_BACKEND_CUDA;
  cfg.cache_dir = dir;
  kvc_context *c = NULL;
  KVT_OK(kvc_context_create(&cfg, &c));
  return c;
}

static int corrupt_all(const char *dir, int truncate_instead) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d))) {
    if (!strstr(e->d_name, ".cubin")) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *fp = fopen(path, "r+b");
    if (!fp) continue;
    if (truncate_instead) {
      fclose(fp);
      if (truncate(path, 20) == 0) n++;
      continue;
    }
    fseek(fp, 200, SEEK_SET);
    unsigned char junk[64];
    memset(junk, 0x5a, sizeof junk);
    fwrite(junk, 1, sizeof junk, fp);
    fclose(fp);
    n++;
  }
  closedir(d);
  return n;
}

/* Runs one kernel to prove the loaded module works. */
static void run_op(kvc_context *c) {
  int64_t host_pre[2] = {0, 5}, host_seq[2] = {3, 7}, host_last[2] = {-1, 12}, host_free[2] = {9, 4};
  int64_t *pre = kvt_alloc_on(c, 16), *seq = kvt_alloc_on(c, 16), *last = kvt_alloc_on(c, 16),
          *fp = kvt_alloc_on(c, 16), *out = kvt_alloc_on(c, 64);
  kvt_h2d_on(c, pre, host_pre, 16);
  kvt_h2d_on(c, seq, host_seq, 16);
  kvt_h2d_on(c, last, host_last, 16);
  kvt_h2d_on(c, fp, host_free, 16);
  KVT_OK(kvc_alloc_extend_fill(c, pre, seq, KVC_INDEX_I64, last, fp, 2, 4, out, 2, NULL));
  int64_t got[5];
  kvt_d2h_on(c, got, out, sizeof got);
  /* ps 4: request 0 -> page 9 (36, 37, 38); request 1 continues slot 12 -> 13, 14 (p 5 -> 7 stays in page 3). */
  const int64_t want[5] = {36, 37, 38, 13, 14};
  assert_memory_equal(got, want, sizeof want);
  kvc_memory_free(c, pre);
  kvc_memory_free(c, seq);
  kvc_memory_free(c, last);
  kvc_memory_free(c, fp);
  kvc_memory_free(c, out);
}

static void test_cold_warm_and_corrupt_cache(void **state) {
  (void)state;
  kvt_require_cuda();
  char dir[] = "/tmp/kvc-cachetest-XXXXXX";
  assert_non_null(mkdtemp(dir));
  kvc_kernel_cache_stats st;

  kvc_context *c = make(dir);
  KVT_OK(kvc_context_precompile(c));
  run_op(c);
  KVT_OK(kvc_context_kernel_cache_stats(c, &st));
  assert_true(st.compiles > 0);
  kvc_context_destroy(c);

  c = make(dir); /* warm: from disk */
  KVT_OK(kvc_context_precompile(c));
  KVT_OK(kvc_context_kernel_cache_stats(c, &st));
  assert_int_equal(st.compiles, 0);
  assert_true(st.disk_hits > 0);
  run_op(c);
  kvc_context_destroy(c);

  for (int mode = 0; mode < 2; mode++) {
    assert_true(corrupt_all(dir, mode) > 0);
    c = make(dir);
    KVT_OK(kvc_context_precompile(c));
    KVT_OK(kvc_context_kernel_cache_stats(c, &st));
    assert_true(st.disk_rejects > 0);
    assert_true(st.compiles > 0);
    run_op(c);
    kvc_context_destroy(c);
  }
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_cold_warm_and_corrupt_cache),
};
KVT_MAIN("kernel_cache", tests)
