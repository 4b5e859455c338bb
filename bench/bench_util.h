/*
 * bench_util.h — what the host-time benchmarks share: a fail-fast check, a monotonic
 * clock in microseconds and the median/p99 report line (table + quoted CSV).
 */
#ifndef KVC_BENCH_UTIL_H
#define KVC_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kvcache.h"

#define KVB_CHECK(ctx, call)                                                                \
  do {                                                                                      \
    kvc_status st_ = (call);                                                                \
    if (st_ != KVC_OK) {                                                                    \
      fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, kvc_status_name(st_), \
              kvc_last_error(ctx));                                                         \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

static inline double kvb_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

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

#endif
