/*
 * fault.h — test-only fault injection and leak accounting (STYLE habit 15).
 *
 * Not part of the public API: white-box tests (tests/reliability/) include it through the
 * kvcache_internal library. Each kind has a call counter in the context's kvc__core; the
 * call whose 0-based index equals `fail_at` fails as the real resource would:
 *
 *   KVC__FAULT_HOST_ALLOC    kvc__malloc / kvc__calloc return NULL   -> KVC_ERR_HOST_OOM
 *   KVC__FAULT_DEVICE_ALLOC  kvc__dev_alloc fails                    -> KVC_ERR_DEVICE_OOM
 *   KVC__FAULT_LAUNCH        kvc__kernel_launch fails (before work)  -> KVC_ERR_CUDA
 *   KVC__FAULT_COMPILE       kvc__nvrtc_compile fails (CUDA backend) -> KVC_ERR_NVRTC
 *
 * Setting a kind resets that kind's counter, so "fail the Nth call from now" is
 * kvc__fault_set(ctx, kind, N). The counters are atomics (threads may share a context);
 * arming a kind while other threads run makes which of their calls fails a race.
 */
#ifndef KVC_FAULT_H
#define KVC_FAULT_H

#include "core.h"

typedef enum kvc__fault_kind {
  KVC__FAULT_HOST_ALLOC = 0,
  KVC__FAULT_DEVICE_ALLOC = 1,
  KVC__FAULT_LAUNCH = 2,
  KVC__FAULT_COMPILE = 3
} kvc__fault_kind;

/** Fails the call of `kind` with index fail_at (0 = the next one) counted from now;
 *  fail_at < 0 disarms the kind. */
static inline void kvc__fault_set(kvc_context *ctx, kvc__fault_kind kind, int64_t fail_at) {
  kvc__fault *f = &kvc__core_of(ctx)->fault;
  const int64_t at = fail_at < 0 ? -1 : fail_at;
  switch (kind) {
  case KVC__FAULT_HOST_ALLOC: kvc__counter_set(&f->host_allocs, 0), kvc__counter_set(&f->host_alloc_fail_at, at); break;
  case KVC__FAULT_DEVICE_ALLOC:
    kvc__counter_set(&f->device_allocs, 0), kvc__counter_set(&f->device_alloc_fail_at, at);
    break;
  case KVC__FAULT_LAUNCH: kvc__counter_set(&f->launches, 0), kvc__counter_set(&f->launch_fail_at, at); break;
  case KVC__FAULT_COMPILE: kvc__counter_set(&f->compiles, 0), kvc__counter_set(&f->compile_fail_at, at); break;
  }
}

/** Disarms every kind. */
static inline void kvc__fault_reset(kvc_context *ctx) {
  for (int k = 0; k <= KVC__FAULT_COMPILE; k++) kvc__fault_set(ctx, (kvc__fault_kind)k, -1);
}

/** Calls of `kind` made since it was last set (how far a loop must go). */
static inline int64_t kvc__fault_calls(const kvc_context *ctx, kvc__fault_kind kind) {
  const kvc__fault *f = &kvc__core_of(ctx)->fault;
  switch (kind) {
  case KVC__FAULT_HOST_ALLOC: return kvc__counter_get(&f->host_allocs);
  case KVC__FAULT_DEVICE_ALLOC: return kvc__counter_get(&f->device_allocs);
  case KVC__FAULT_LAUNCH: return kvc__counter_get(&f->launches);
  case KVC__FAULT_COMPILE: return kvc__counter_get(&f->compiles);
  }
  return 0;
}

/** Live allocations for leak checks: host (kvc__malloc/kvc__calloc) and device
 *  (kvc__dev_alloc, any backend; a count only: the device seam does not know the size
 *  of what it frees). */
typedef struct kvc__live {
  int64_t host_allocs, host_bytes, device_allocs;
} kvc__live;

static inline kvc__live kvc__fault_live(const kvc_context *ctx) {
  const kvc__core *c = kvc__core_of(ctx);
  kvc__live l = {kvc__counter_get(&c->host_allocs_live), kvc__counter_get(&c->host_bytes_live),
                 kvc__counter_get(&c->device_allocs_live)};
  return l;
}

#endif /* KVC_FAULT_H */
