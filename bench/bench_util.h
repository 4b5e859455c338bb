/*
 * bench_util.h — what the benchmarks share: a fail-fast check, a monotonic clock in
 * microseconds, the median/p99 report line (table + quoted CSV), the common command line,
 * and the few CUDA driver entry points a benchmark calls itself (streams, graphs, events).
 */
#ifndef KVC_BENCH_UTIL_H
#define KVC_BENCH_UTIL_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvcache.h"

#define KVB_CHECK(ctx, call)                                                                                          \
  do {                                                                                                                \
    kvc_status st_ = (call);                                                                                          \
    if (st_ != KVC_OK) {                                                                                              \
      fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, kvc_status_name(st_), kvc_last_error(ctx)); \
      exit(1);                                                                                                        \
    }                                                                                                                 \
  } while (0)

static inline double kvb_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static inline double kvb_now_s(void) { return kvb_now_us() * 1e-6; }

static inline int kvb_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Sorts t[0:n) and prints median and p99 as a table row and, with csv, a CSV row
 * (case, "variant", batch, page_size, median_us, p99_us, reps). */
static inline void kvb_report(FILE *csv, const char *name, const char *variant, int batch, int ps, double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, kvb_cmp_double);
  double med = t[n / 2], p99 = t[(int)((double)n * 0.99)];
  printf("%-11s %-40s %6d %5d %10.2f %10.2f\n", name, variant, batch, ps, med, p99);
  if (csv) fprintf(csv, "%s,\"%s\",%d,%d,%.3f,%.3f,%d\n", name, variant, batch, ps, med, p99, n);
}

/* [--quick] [--host] [--csv FILE]: 0, or 2 after printing the usage line. */
static inline int kvb_parse_args(int argc, char **argv, kvc_context_config *cfg, int *quick, const char **csv_path) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) *quick = 1;
    else if (!strcmp(argv[i], "--host")) cfg->backend = KVC_BACKEND_HOST;
    else if (!strcmp(argv[i], "--csv") && i + 1 < argc) *csv_path = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--quick] [--host] [--csv FILE]\n", argv[0]);
      return 2;
    }
  }
  return 0;
}

/* Driver entry points (CUresult is an int; 0 = success), loaded with dlopen as the
 * library does, so the benchmarks need no toolkit either. */
typedef struct kvb_cuda {
  int (*stream_create)(void **stream, unsigned flags);
  int (*begin_capture)(void *stream, int mode);
  int (*end_capture)(void *stream, void **graph);
  int (*instantiate)(void **exec, void *graph, unsigned long long flags);
  int (*graph_launch)(void *exec, void *stream);
  int (*event_create)(void **event, unsigned flags);
  int (*event_record)(void *event, void *stream);
  int (*event_sync)(void *event);
  int (*elapsed)(float *ms, void *start, void *end);
  int (*event_destroy)(void *event);
  int (*stream_destroy)(void *stream);
  int (*graph_destroy)(void *graph);
  int (*exec_destroy)(void *exec);
  int (*module_load_data)(void **module, const void *image);
  int (*module_get_function)(void **function, void *module, const char *name);
  int (*launch_kernel)(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned smem, void *stream, void **params, void **extra);
} kvb_cuda;

/* 1 when every entry point resolved (the context must be a CUDA one to use them). */
static inline int kvb_cuda_load(kvb_cuda *c) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return 0;
  *(void **)&c->stream_create = dlsym(lib, "cuStreamCreate");
  *(void **)&c->begin_capture = dlsym(lib, "cuStreamBeginCapture_v2");
  *(void **)&c->end_capture = dlsym(lib, "cuStreamEndCapture");
  *(void **)&c->instantiate = dlsym(lib, "cuGraphInstantiateWithFlags");
  *(void **)&c->graph_launch = dlsym(lib, "cuGraphLaunch");
  *(void **)&c->event_create = dlsym(lib, "cuEventCreate");
  *(void **)&c->event_record = dlsym(lib, "cuEventRecord");
  *(void **)&c->event_sync = dlsym(lib, "cuEventSynchronize");
  *(void **)&c->elapsed = dlsym(lib, "cuEventElapsedTime");
  *(void **)&c->event_destroy = dlsym(lib, "cuEventDestroy_v2");
  *(void **)&c->stream_destroy = dlsym(lib, "cuStreamDestroy_v2");
  *(void **)&c->graph_destroy = dlsym(lib, "cuGraphDestroy");
  *(void **)&c->exec_destroy = dlsym(lib, "cuGraphExecDestroy");
  *(void **)&c->module_load_data = dlsym(lib, "cuModuleLoadData");
  *(void **)&c->module_get_function = dlsym(lib, "cuModuleGetFunction");
  *(void **)&c->launch_kernel = dlsym(lib, "cuLaunchKernel");
  return c->stream_create && c->begin_capture && c->end_capture && c->instantiate && c->graph_launch &&
         c->event_create && c->event_record && c->event_sync && c->elapsed && c->event_destroy && c->stream_destroy &&
         c->graph_destroy && c->exec_destroy && c->module_load_data && c->module_get_function && c->launch_kernel;
}

#endif
