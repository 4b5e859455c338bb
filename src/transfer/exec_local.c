/*
 * exec_local.c — running a transfer plan inside one process: both pools' addresses
 * are valid here, so the copies go through the device seam (memmove on the host
 * backend — the twin CI runs —, device-to-device copies on one GPU, peer copies between
 * two).
 *
 * A pool keeps each region's layers (and K next to V) equally spaced in one
 * allocation, so one run of pages is the same bytes at a fixed stride in a whole group
 * of regions: one strided copy (cuMemcpy2DAsync / cuMemcpy3DPeerAsync) moves it for
 * all of them. That turns runs x regions driver calls (each costs microseconds of host
 * time; 64 regions x 2000 runs of Llama-3-8B is over 100k) into runs x groups. Regions
 * not evenly spaced on both sides fall back to one copy per region and run.
 */
#include "transfer.h"
#include "../device/device.h"

/* A side of the plan may be run by ctx: made in this process, on ctx's backend and
 * device. */
static kvc_status check_side(const kvc__xfer_side *side, kvc_context *ctx, const char *which, const char *fn) {
  if (side->origin != kvc__transfer_origin())
    return kvc__error(ctx, KVC_ERR_MISUSE, fn,
                      "the %s layout was made in another process: its addresses are not valid here", which);
  if (side->backend != kvc_context_backend(ctx) || side->device != kvc_context_device(ctx))
    return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn,
                      "the %s layout is memory of %s device %d, the context is %s device %d", which,
                      side->backend == KVC_BACKEND_CUDA ? "CUDA" : "host", side->device,
                      kvc_context_backend(ctx) == KVC_BACKEND_CUDA ? "CUDA" : "host", kvc_context_device(ctx));
  return KVC_OK;
}

/* The end of the strided group starting at region `first`: regions with the same page
 * bytes whose bases step by one constant pitch on each side, each pitch at least a
 * region's size (so rows never overlap) and within the driver's pitch limit. */
static int32_t group_end(const kvc_transfer_plan *p, int32_t first, uint64_t max_pitch, uint64_t *src_pitch,
                         uint64_t *dst_pitch) {
  const kvc__xfer_region *a = &p->regions[first];
  int32_t end = first + 1;
  if (end == p->num_regions) return end;
  const kvc__xfer_region *b = &p->regions[end];
  if (b->src_base <= a->src_base || b->dst_base <= a->dst_base) return end;
  const uint64_t sp = b->src_base - a->src_base, dp = b->dst_base - a->dst_base;
  if (sp > max_pitch || dp > max_pitch) return end;
  for (; end < p->num_regions; end++) {
    const kvc__xfer_region *r = &p->regions[end], *prev = &p->regions[end - 1];
    if (r->page_bytes != a->page_bytes || r->src_base != prev->src_base + sp || r->dst_base != prev->dst_base + dp ||
        prev->src_bytes > sp || prev->dst_bytes > dp)
      break;
  }
  *src_pitch = sp;
  *dst_pitch = dp;
  return end;
}

kvc_status kvc_transfer_plan_copy_local(const kvc_transfer_plan *plan, kvc_context *src_ctx, kvc_context *dst_ctx,
                                        kvc_stream stream) {
  KVC_RETURN_IF(!src_ctx || !dst_ctx, src_ctx ? src_ctx : dst_ctx, KVC_ERR_INVALID_ARGUMENT,
                "src_ctx or dst_ctx is NULL");
  KVC_FORWARD(kvc__plan_check(plan, dst_ctx, __func__));
  KVC_RETURN_IF(kvc_context_backend(src_ctx) != kvc_context_backend(dst_ctx), dst_ctx, KVC_ERR_UNSUPPORTED,
                "one context is host, the other CUDA: copy through host memory instead");
  KVC_FORWARD(check_side(&plan->src, src_ctx, "source", __func__));
  KVC_FORWARD(check_side(&plan->dst, dst_ctx, "target", __func__));
  if (plan->num_copies == 0) return KVC_OK;
  KVC_FORWARD(kvc__dev_enable_peer_access(dst_ctx, src_ctx));
  const size_t ms = kvc__dev_max_pitch(src_ctx), md = kvc__dev_max_pitch(dst_ctx);
  const uint64_t max_pitch = ms < md ? ms : md;
  for (int32_t first = 0, end; first < plan->num_regions; first = end) {
    uint64_t sp = 0, dp = 0;
    end = group_end(plan, first, max_pitch, &sp, &dp);
    const kvc__xfer_region *r = &plan->regions[first];
    const size_t height = (size_t)(end - first);
    for (size_t k = 0; k < plan->num_runs; k++) {
      const kvc__xfer_run *run = &plan->runs[k];
      /* In range: every page of the run is below both sides' page counts. */
      void *dst = (void *)(uintptr_t)(r->dst_base + (uint64_t)run->dst_page * r->page_bytes);
      const void *src = (const void *)(uintptr_t)(r->src_base + (uint64_t)run->src_page * r->page_bytes);
      const size_t bytes = (size_t)((uint64_t)run->length * r->page_bytes);
      if (height == 1) KVC_FORWARD(kvc__dev_copy_peer(dst_ctx, dst, src_ctx, src, bytes, stream));
      else
        KVC_FORWARD(kvc__dev_copy_2d_peer(dst_ctx, dst, (size_t)dp, src_ctx, src, (size_t)sp, bytes, height, stream));
    }
  }
  return KVC_OK;
}
