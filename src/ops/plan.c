/*
 * plan.c — launches whose per-call data is a payload of uint32 words.
 *
 * Small payloads travel inside the kernel's parameter block (no upload: one driver call,
 * ~3-4 us of host time on an H200), in one of four compiled capacities (4, 8, 16, 32 KB) so a
 * 2-request step does not copy 32 KB of parameters (the driver copies the whole block:
 * ~3 us more at 32 KB than at 4 KB). Larger payloads go through the pinned staging ring:
 * one async H2D copy + the launch + an event, or, for kernels that read each word about
 * once (kvc__plan_begin_mapped), the launch + an event, the kernel reading the ring in
 * place over the bus. CUDA graphs would freeze inline
 * parameters, which is why these launches are documented as not capturable.
 */
#include "ops.h"

#include <stddef.h>

#include <string.h>

static const size_t variant_words[KVC__PLAN_INLINE_VARIANTS] = {KVC_INLINE_SMALL, KVC_INLINE_MEDIUM, KVC_INLINE_WIDE,
                                                                KVC_INLINE_LARGE};

static kvc_status plan_begin(kvc_context *ctx, kvc__plan *plan, unsigned char *scratch, size_t header_bytes,
                             size_t words, bool read_once) {
  memset(plan, 0, sizeof *plan);
  plan->scratch = scratch;
  plan->header_bytes = header_bytes;
  plan->words = words;
  size_t max = kvc__max_param_bytes(ctx);
  const size_t inline_max = (size_t)kvc__core_of(ctx)->options.inline_max_words;
  for (int v = 0; v < KVC__PLAN_INLINE_VARIANTS; v++) {
    size_t bytes = header_bytes + 4 * variant_words[v];
    if (words <= variant_words[v] && words <= inline_max && bytes <= max && bytes <= KVC__PARAM_SCRATCH_BYTES) {
      plan->variant = v;
      plan->payload = (uint32_t *)(void *)(scratch + header_bytes);
      return KVC_OK;
    }
  }
  plan->variant = KVC__PLAN_STAGED;
  void *host, *dev;
  size_t payload_bytes;
  KVC_RETURN_IF(!kvc__mul_size(words, 4, &payload_bytes) || payload_bytes > (size_t)PTRDIFF_MAX, ctx,
                KVC_ERR_INVALID_ARGUMENT, "a payload of %zu words is too large", words);
  KVC_FORWARD(kvc__staging_reserve(ctx, payload_bytes, &host, &dev));
  plan->payload = host;
  plan->mapped = read_once && kvc__core_of(ctx)->options.staging_mapped;
  plan->staged_dev = (uint64_t)(uintptr_t)(plan->mapped ? kvc__staging_mapped(ctx) : dev);
  return KVC_OK;
}

kvc_status kvc__plan_begin(kvc_context *ctx, kvc__plan *plan, unsigned char *scratch, size_t header_bytes,
                           size_t words) {
  return plan_begin(ctx, plan, scratch, header_bytes, words, false);
}

kvc_status kvc__plan_begin_mapped(kvc_context *ctx, kvc__plan *plan, unsigned char *scratch, size_t header_bytes,
                                  size_t words) {
  return plan_begin(ctx, plan, scratch, header_bytes, words, true);
}

void kvc__plan_cancel(kvc_context *ctx, kvc__plan *plan) {
  if (plan->variant == KVC__PLAN_STAGED) kvc__staging_cancel(ctx);
  plan->variant = -1;
}

/* The kernel of one inline-capacity variant: `extra` plus KVC_INLINE_WORDS. The only place
 * that turns a variant into a specialisation. */
kvc_status kvc__plan_kernel(kvc_context *ctx, const kvc__kernel_def *def, const kvc__spec *extra, int variant,
                            const kvc__kfunc **out) {
  kvc__spec spec = extra ? *extra : (kvc__spec){0};
  if (spec.count >= 8) return kvc__error(ctx, KVC_ERR_INTERNAL, "kvc__plan_kernel", "spec of %s is full", def->name);
  spec.def[spec.count].name = "KVC_INLINE_WORDS";
  spec.def[spec.count].value = (int64_t)variant_words[variant];
  spec.count++;
  return kvc__kernel_get(ctx, def, &spec, out);
}

kvc_status kvc__plan_prefetch(kvc_context *ctx, const kvc__kernel_def *def, const kvc__spec *extra,
                              const kvc__kfunc **kcache) {
  for (int v = 0; v < KVC__PLAN_INLINE_VARIANTS; v++)
    if (!kcache[v]) KVC_FORWARD(kvc__plan_kernel(ctx, def, extra, v, &kcache[v]));
  return KVC_OK;
}

kvc_status kvc__plan_launch(kvc_context *ctx, kvc__plan *plan, const kvc__kernel_def *def, const kvc__spec *extra,
                            const kvc__kfunc **kcache, kvc__dim3 grid, kvc__dim3 block, kvc_stream stream,
                            const void *header) {
  return kvc__plan_launch_smem(ctx, plan, def, extra, kcache, grid, block, 0, stream, header);
}

kvc_status kvc__plan_launch_smem(kvc_context *ctx, kvc__plan *plan, const kvc__kernel_def *def, const kvc__spec *extra,
                                 const kvc__kfunc **kcache, kvc__dim3 grid, kvc__dim3 block, unsigned smem_bytes,
                                 kvc_stream stream, const void *header) {
  const int v = plan->variant == KVC__PLAN_STAGED ? 0 : plan->variant; /* staged uses the small block */
  kvc_status st = KVC_OK;
  const kvc__kfunc *f = kcache ? kcache[v] : NULL;
  if (!f) {
    KVC_CHECK_GOTO(kvc__plan_kernel(ctx, def, extra, v, &f), st, done);
    if (kcache) kcache[v] = f;
  }
  memcpy(plan->scratch, header, plan->header_bytes);
  if (plan->variant == KVC__PLAN_STAGED && !plan->mapped) KVC_CHECK_GOTO(kvc__staging_upload(ctx, stream), st, done);
  /* The host twin reads the staged payload directly; CUDA copies the whole block. */
  size_t bytes = plan->header_bytes + 4 * variant_words[v];
  st = kvc__kernel_launch(ctx, f, grid, block, smem_bytes, stream, plan->scratch, bytes);
done:
  if (plan->variant == KVC__PLAN_STAGED) KVC_CLEANUP_KEEP_FIRST(kvc__staging_fence(ctx, stream), st);
  plan->variant = -1;
  return st;
}

kvc_status kvc__row_write(kvc_context *ctx, unsigned char *scratch, const kvc__kfunc **kcache, int32_t *table,
                          int64_t offset, const int32_t *slots, size_t n, kvc_stream stream) {
  if (!n) return KVC_OK;
  kvc__plan plan;
  KVC_FORWARD(kvc__plan_begin_mapped(ctx, &plan, scratch, sizeof(kvc_p_row_write), n));
  memcpy(plan.payload, slots, n * 4);
  kvc_p_row_write h = {(uint64_t)(uintptr_t)table, plan.staged_dev, offset, (int32_t)n, 0};
  return kvc__plan_launch(ctx, &plan, &kvc__k_row_write, NULL, kcache, kvc__dim((unsigned)((n + 255) / 256), 1, 1),
                          kvc__dim(256, 1, 1), stream, &h);
}
