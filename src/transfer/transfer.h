/*
 * transfer.h — internal state of transfer layouts and plans (src/transfer/), shared by
 * the files that build them (layout.c, layout_codec.c, plan.c) and run them
 * (exec_local.c, nccl.c).
 *
 * A layout is a list of regions, each a base address plus `pages` pages of `page_bytes`;
 * a plan is a list of runs (src page, dst page, length) applied to every region. Copies
 * are never materialised: copy i is region i / runs, run i % runs, which keeps a plan's
 * memory at O(runs) however many layers the pools have.
 */
#ifndef KVC_TRANSFER_H
#define KVC_TRANSFER_H

#include "../core/core.h"

#define KVC__LAYOUT_MAGIC 0x6b76632d786c6179ull /* "kvc-xlay" */
#define KVC__PLAN_MAGIC 0x6b76632d78706c6eull   /* "kvc-xpln" */
/* Region count bound: 4 regions x 2^14 layers covers any model; keeps n x 48 bytes of a
 * serialised layout and every per-region array far from overflow. */
#define KVC__LAYOUT_MAX_REGIONS (1 << 16)

/* Where a layout's addresses are valid: the backend and device of its memory and the
 * process that made it from a pool (KVC__ORIGIN of that process). */
typedef struct kvc__xfer_side {
  kvc_backend backend;
  int32_t device;
  uint64_t origin;
} kvc__xfer_side;

struct kvc_transfer_layout {
  uint64_t magic;
  kvc_context *ctx; /* allocations and errors */
  uint32_t kind;    /* kvc_kv_pool_kind or KVC_TRANSFER_KIND_MAMBA */
  kvc_dtype dtype;
  int32_t page_size;
  kvc__xfer_side side;
  int64_t min_pages; /* pages of the smallest region: the page ids every region accepts */
  int32_t num_regions;
  kvc_transfer_region_info *regions;
};

typedef struct kvc__xfer_run {
  int64_t src_page, dst_page, length;
} kvc__xfer_run;

/* What a plan keeps of one region: both bases and the shared geometry. */
typedef struct kvc__xfer_region {
  uint64_t src_base, dst_base;
  uint64_t src_bytes, dst_bytes; /* whole pages of each side's region */
  uint64_t page_bytes;
  kvc_region_kind region;
  int32_t layer_id, index;
} kvc__xfer_region;

struct kvc_transfer_plan {
  uint64_t magic;
  kvc_context *ctx;
  kvc__xfer_side src, dst;
  int32_t num_regions;
  kvc__xfer_region *regions;
  size_t num_runs;
  kvc__xfer_run *runs;
  size_t num_copies;    /* num_runs x num_regions, checked */
  uint64_t total_bytes; /* checked */
};

/** This process's origin tag: random per process, written once (pthread_once). */
uint64_t kvc__transfer_origin(void);

/** Allocates a layout with n regions (uninitialised) on ctx, or NULL. */
kvc_transfer_layout *kvc__layout_new(kvc_context *ctx, int32_t n);

/** Checks the per-region numbers (page_bytes, pages >= 1, their product fits in int64),
 *  computes min_pages and validates the header fields. Used by every constructor. */
kvc_status kvc__layout_finish(kvc_transfer_layout *l, const char *fn);

/** Validates a layout handle. */
kvc_status kvc__layout_check(const kvc_transfer_layout *l, const kvc_context *ctx, const char *fn);
/** Validates a plan handle. */
kvc_status kvc__plan_check(const kvc_transfer_plan *p, const kvc_context *ctx, const char *fn);

/** Copy i of the plan (i < num_copies). */
static inline void kvc__plan_copy_at(const kvc_transfer_plan *p, size_t i, const kvc__xfer_region **r,
                                     uint64_t *src_off, uint64_t *dst_off, uint64_t *bytes) {
  const kvc__xfer_region *reg = &p->regions[i / p->num_runs];
  const kvc__xfer_run *run = &p->runs[i % p->num_runs];
  /* Products are in range: pages x page_bytes of each region was checked to fit. */
  *r = reg;
  *src_off = (uint64_t)run->src_page * reg->page_bytes;
  *dst_off = (uint64_t)run->dst_page * reg->page_bytes;
  *bytes = (uint64_t)run->length * reg->page_bytes;
}

#endif
