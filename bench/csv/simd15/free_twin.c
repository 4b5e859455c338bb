/* simd15: the TOKEN free with the vector step (KVC_SIMD unset) and without it
 * (KVC_SIMD=0), two contexts of ONE library in one process, call by call alternated
 * (order swapped each repetition), so code layout is the same on both sides.
 * usage: mb2 ORDER N SIZE   ORDER 0 ascending, 1 descending, 2 shuffled ring */
#define _POSIX_C_SOURCE 200809L
#include "kvcache.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}
static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
typedef struct {
  kvc_context *ctx;
  kvc_allocator *a;
  int64_t *s, *c;
} side;
static void make(side *w, int order, int n, int64_t size, int simd) {
  if (!simd) setenv("KVC_SIMD", "0", 1);
  else unsetenv("KVC_SIMD");
  kvc_context_config cc = KVC_CONTEXT_CONFIG_INIT;
  cc.backend = KVC_BACKEND_HOST;
  if (kvc_context_create(&cc, &w->ctx)) exit(1);
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = KVC_ALLOCATOR_TOKEN;
  ac.page_size = 1;
  ac.size = size;
  if (kvc_allocator_create(w->ctx, &ac, &w->a)) exit(2);
  w->s = malloc(8 * (size_t)n);
  w->c = malloc(8 * (size_t)n);
  if (order == 2) {
    int64_t *all = malloc(8 * (size_t)size);
    kvc_allocator_alloc(w->a, size, all);
    srand(1);
    for (int64_t i = size - 1; i > 0; i--) {
      int64_t j = rand() % (i + 1), t = all[i];
      all[i] = all[j];
      all[j] = t;
    }
    kvc_allocator_free(w->a, all, (size_t)size);
    free(all);
  }
}
static double one(side *w, int order, int n) {
  kvc_allocator_alloc(w->a, n, w->s);
  for (int j = 0; j < n; j++) w->c[j] = order == 1 ? w->s[n - 1 - j] : w->s[j];
  double t0 = now();
  kvc_status st = kvc_allocator_free(w->a, w->c, (size_t)n);
  double t1 = now();
  if (st) {
    printf("err %d\n", st);
    exit(3);
  }
  return t1 - t0;
}
int main(int argc, char **argv) {
  int order = atoi(argv[1]), n = atoi(argv[2]);
  int64_t size = atoll(argv[3]);
  side v, s;
  make(&v, order, n, size, 1);
  make(&s, order, n, size, 0);
  enum { R = 5000, W = 500 };
  static double tv[R], ts[R];
  for (int r = 0; r < R + W; r++) {
    double x, y;
    if (r & 1) {
      x = one(&v, order, n);
      y = one(&s, order, n);
    } else {
      y = one(&s, order, n);
      x = one(&v, order, n);
    }
    if (r >= W) tv[r - W] = x, ts[r - W] = y;
  }
  qsort(tv, R, 8, cmpd);
  qsort(ts, R, 8, cmpd);
  printf("order %d n %5d size %8lld: vector median %6.3f min %6.3f | scalar median %6.3f min %6.3f us | v/s med "
         "%+.1f%% min %+.1f%%\n",
         order, n, (long long)size, tv[R / 2] / 1e3, tv[0] / 1e3, ts[R / 2] / 1e3, ts[0] / 1e3,
         100 * (tv[R / 2] / ts[R / 2] - 1), 100 * (tv[0] / ts[0] - 1));
  return 0;
}
