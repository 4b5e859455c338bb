/*
 * bench_startup.c — what the first scheduler step would pay for kernels: cold start
 * (NVRTC compiles every fixed-spec kernel into an empty cache directory), warm start
 * (a new context loads the cubins from the disk cache) and hot lookups (in-memory table).
 *
 *   kvc_bench_startup [--csv FILE]
 */
#define _POSIX_C_SOURCE 200809L
#include "kvcache.h"
#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int run(const char *dir, const char *label, FILE *csv) {
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  cfg.cache_dir = dir;
  kvc_context *ctx;
  double t0 = kvb_now_s();
  if (kvc_context_create(&cfg, &ctx) != KVC_OK) {
    fprintf(stderr, "context: %s\n", kvc_last_error(NULL));
    return 1;
  }
  double t1 = kvb_now_s();
  if (kvc_context_precompile(ctx) != KVC_OK) {
    fprintf(stderr, "precompile: %s\n", kvc_last_error(ctx));
    return 1;
  }
  double t2 = kvb_now_s();
  /* hot: the same lookups again */
  if (kvc_context_precompile(ctx) != KVC_OK) return 1;
  double t3 = kvb_now_s();
  kvc_kernel_cache_stats st;
  kvc_context_kernel_cache_stats(ctx, &st);
  kvc_device_info info;
  kvc_context_device_info(ctx, &info);
  printf("%-6s backend=%s  context %.1f ms  kernels %.1f ms (compiles %llu, disk hits %llu, "
         "compile %.1f ms, load %.1f ms)  hot lookups %.1f us\n",
         label, info.name, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (unsigned long long)st.compiles,
         (unsigned long long)st.disk_hits, st.compile_seconds * 1e3, st.load_seconds * 1e3, (t3 - t2) * 1e6);
  if (csv)
    fprintf(csv, "%s,%s,%.3f,%.3f,%llu,%llu,%.3f\n", label, info.name, (t1 - t0) * 1e3, (t2 - t1) * 1e3,
            (unsigned long long)st.compiles, (unsigned long long)st.disk_hits, (t3 - t2) * 1e6);
  kvc_context_destroy(ctx);
  return 0;
}

int main(int argc, char **argv) {
  FILE *csv = NULL;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--csv") && i + 1 < argc) csv = fopen(argv[++i], "w");
  if (csv) fprintf(csv, "phase,device,context_ms,kernels_ms,compiles,disk_hits,hot_us\n");
  char dir[] = "/tmp/kvc-startup-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  int rc = run(dir, "cold", csv) || run(dir, "warm", csv);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) rc = 1;
  if (csv) fclose(csv);
  return rc;
}
