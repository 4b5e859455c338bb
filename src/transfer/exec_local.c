/*
 * exec_local.c — running a transfer plan inside one process: both pools' addresses are
 * valid here, so each plan copy is one copy through the device seam (memmove on the
 * host backend — the twin CI runs —, a device-to-device copy on one GPU, a peer copy
 * between two).
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
  for (size_t i = 0; i < plan->num_copies; i++) {
    const kvc__xfer_region *r;
    uint64_t so, dof, bytes;
    kvc__plan_copy_at(plan, i, &r, &so, &dof, &bytes);
    void *dst = (void *)(uintptr_t)(r->dst_base + dof);
    const void *src = (const void *)(uintptr_t)(r->src_base + so);
    KVC_FORWARD(kvc__dev_copy_peer(dst_ctx, dst, src_ctx, src, (size_t)bytes, stream));
  }
  return KVC_OK;
}
