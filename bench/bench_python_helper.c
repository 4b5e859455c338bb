/* Timing helper for bench/bench_python.py: times one library call in C, on the objects
 * the Python benchmark created, so the binding's host time and the C call's host time
 * come from the same process, the same objects and the same clock (CLOCK_MONOTONIC,
 * which time.perf_counter_ns reads on Linux). Each function returns the call's status
 * and writes the nanoseconds spent inside the call to *ns. Built as a small shared
 * library (kvc_pybench) next to the benchmarks; linked to the public libkvcache only. */
#define _POSIX_C_SOURCE 199309L
#include <time.h>

#include "kvcache.h"

#if defined(__GNUC__)
#  define KVCB_EXPORT __attribute__((visibility("default")))
#else
#  define KVCB_EXPORT
#endif

KVCB_EXPORT int kvcb_flow_decode(kvc_flow *flow, kvc_req_state *const *reqs, size_t n, int32_t token_per_req,
                                 int64_t *out, int64_t *ns);
KVCB_EXPORT int kvcb_flow_extend(kvc_flow *flow, kvc_req_state *const *reqs, size_t n, int64_t *out, int64_t *ns);
KVCB_EXPORT int kvcb_flow_release(kvc_flow *flow, kvc_req_state *const *reqs, size_t n, int is_insert, int64_t *ns);
KVCB_EXPORT int kvcb_alloc_decode(kvc_allocator *alloc, size_t n, const int64_t *seq_lens, const int64_t *last_locs,
                                  int64_t *out_host, int64_t *ns);

static int64_t kvcb_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

KVCB_EXPORT int kvcb_flow_decode(kvc_flow *flow, kvc_req_state *const *reqs, size_t n, int32_t token_per_req,
                                 int64_t *out, int64_t *ns) {
  int64_t t0 = kvcb_now_ns();
  kvc_status st = kvc_flow_alloc_for_decode(flow, reqs, n, token_per_req, out, NULL);
  *ns = kvcb_now_ns() - t0;
  return (int)st;
}

KVCB_EXPORT int kvcb_flow_extend(kvc_flow *flow, kvc_req_state *const *reqs, size_t n, int64_t *out, int64_t *ns) {
  int64_t t0 = kvcb_now_ns();
  kvc_status st = kvc_flow_alloc_for_extend(flow, reqs, n, out, NULL);
  *ns = kvcb_now_ns() - t0;
  return (int)st;
}

KVCB_EXPORT int kvcb_flow_release(kvc_flow *flow, kvc_req_state *const *reqs, size_t n, int is_insert, int64_t *ns) {
  int64_t t0 = kvcb_now_ns();
  kvc_status st = kvc_flow_release(flow, reqs, n, is_insert, NULL);
  *ns = kvcb_now_ns() - t0;
  return (int)st;
}

KVCB_EXPORT int kvcb_alloc_decode(kvc_allocator *alloc, size_t n, const int64_t *seq_lens, const int64_t *last_locs,
                                  int64_t *out_host, int64_t *ns) {
  int64_t t0 = kvcb_now_ns();
  kvc_status st = kvc_allocator_alloc_decode(alloc, n, seq_lens, last_locs, NULL, NULL, out_host, NULL, NULL);
  *ns = kvcb_now_ns() - t0;
  return (int)st;
}
