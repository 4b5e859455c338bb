/*
 * plan.c — transfer plans: checks that two layouts describe the same geometry, then
 * turns page pairs into runs (pages consecutive on both sides) and counts the copies.
 *
 * Why sorting by (dst - src, src): pairs of one run share dst - src and have
 * consecutive src, so after that sort every run is a maximal stretch of consecutive
 * entries, found in one pass, whatever order the requests listed their pages in. No run
 * can be longer, so the copy count is the least for these pairs. Runs are then ordered
 * by source page, the order the copies are issued in (and both NCCL sides agree on).
 */
#include "transfer.h"

#include <stdlib.h>
#include <string.h>

kvc_status kvc__plan_check(const kvc_transfer_plan *p, const kvc_context *ctx, const char *fn) {
  if (!p) return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "plan is NULL");
  if (p->magic != KVC__PLAN_MAGIC) return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "not a live transfer plan");
  return KVC_OK;
}

static const char *kind_name(uint32_t kind) {
  switch (kind) {
  case KVC_KV_MHA: return "MHA";
  case KVC_KV_MHA_NOOP: return "MHA_NOOP";
  case KVC_KV_MHA_FP4: return "MHA_FP4";
  case KVC_KV_MLA: return "MLA";
  case KVC_KV_MLA_FP4: return "MLA_FP4";
  case KVC_KV_NSA: return "NSA";
  case KVC_TRANSFER_KIND_MAMBA: return "MAMBA";
  default: return "?";
  }
}

/* The first difference between the layouts, as a refusal naming it. */
static kvc_status check_compatible(kvc_context *ctx, const kvc_transfer_layout *s, const kvc_transfer_layout *d) {
  const char *fn = "kvc_transfer_plan_create";
  if (s->kind != d->kind)
    return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "layouts differ: pool kind %s (src) vs %s (dst)",
                      kind_name(s->kind), kind_name(d->kind));
  if (s->dtype != d->dtype)
    return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "layouts differ: dtype %s (src) vs %s (dst)",
                      kvc_dtype_name(s->dtype), kvc_dtype_name(d->dtype));
  if (s->page_size != d->page_size)
    return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "layouts differ: page_size %d (src) vs %d (dst)", s->page_size,
                      d->page_size);
  if (s->num_regions != d->num_regions)
    return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn,
                      "layouts differ: %d regions (src) vs %d (dst): a different layer count or region set",
                      s->num_regions, d->num_regions);
  for (int32_t i = 0; i < s->num_regions; i++) {
    const kvc_transfer_region_info *a = &s->regions[i], *b = &d->regions[i];
    if (a->region != b->region || a->layer_id != b->layer_id || a->index != b->index)
      return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn,
                        "layouts differ at region %d: kind %d layer %d index %d (src) vs kind %d layer %d index %d "
                        "(dst): a different layer range or region set",
                        i, (int)a->region, a->layer_id, a->index, (int)b->region, b->layer_id, b->index);
    if (a->dtype != b->dtype)
      return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "layouts differ at region %d (layer %d): dtype %s vs %s", i,
                        a->layer_id, kvc_dtype_name(a->dtype), kvc_dtype_name(b->dtype));
    if (a->page_bytes != b->page_bytes)
      return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn,
                        "layouts differ at region %d (kind %d, layer %d): %lld bytes per page (src) vs %lld (dst): "
                        "different row bytes (heads, head dim, lora rank, tensor-parallel split)",
                        i, (int)a->region, a->layer_id, (long long)a->page_bytes, (long long)b->page_bytes);
  }
  return KVC_OK;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Pairs sorted by (dst - src, src); page ids are in [0, INT64_MAX), so the difference fits. */
static int cmp_pair_by_diff(const void *a, const void *b) {
  const kvc__xfer_run *x = a, *y = b;
  int64_t dx = x->dst_page - x->src_page, dy = y->dst_page - y->src_page;
  if (dx != dy) return (dx > dy) - (dx < dy);
  return (x->src_page > y->src_page) - (x->src_page < y->src_page);
}

static int cmp_run_by_src(const void *a, const void *b) {
  const kvc__xfer_run *x = a, *y = b;
  if (x->src_page != y->src_page) return (x->src_page > y->src_page) - (x->src_page < y->src_page);
  return (x->dst_page > y->dst_page) - (x->dst_page < y->dst_page);
}

/* Page ids in range on both sides, and no target listed twice (sorted copy). */
static kvc_status check_pages(kvc_context *ctx, const kvc_transfer_layout *s, const kvc_transfer_layout *d,
                              const int64_t *src_pages, const int64_t *dst_pages, size_t n, int64_t *scratch) {
  const char *fn = "kvc_transfer_plan_create";
  for (size_t i = 0; i < n; i++) {
    if (src_pages[i] < 0 || src_pages[i] >= s->min_pages)
      return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "src_pages[%zu] = %lld outside [0, %lld)", i,
                        (long long)src_pages[i], (long long)s->min_pages);
    if (dst_pages[i] < 0 || dst_pages[i] >= d->min_pages)
      return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "dst_pages[%zu] = %lld outside [0, %lld)", i,
                        (long long)dst_pages[i], (long long)d->min_pages);
  }
  if (n == 0) return KVC_OK; /* an empty plan: the arrays may be NULL */
  memcpy(scratch, dst_pages, n * sizeof *scratch);
  qsort(scratch, n, sizeof *scratch, cmp_i64);
  for (size_t i = 1; i < n; i++)
    if (scratch[i] == scratch[i - 1])
      return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "target page %lld listed twice (two sources for one page)",
                        (long long)scratch[i]);
  return KVC_OK;
}

/* Merges sorted pairs into runs in place; returns the run count. */
static size_t merge_runs(kvc__xfer_run *pairs, size_t n) {
  size_t runs = 0;
  for (size_t i = 0; i < n; i++) {
    kvc__xfer_run *last = runs ? &pairs[runs - 1] : NULL;
    if (last && pairs[i].src_page == last->src_page + last->length &&
        pairs[i].dst_page == last->dst_page + last->length) {
      last->length++;
    } else {
      pairs[runs++] = pairs[i];
    }
  }
  return runs;
}

/* Copy count and bytes, overflow-checked: runs x regions copies; per region, the pairs'
 * pages x page_bytes (<= the region's own size, but the sum over regions is not). */
static kvc_status count_copies(kvc_context *ctx, kvc_transfer_plan *p, size_t n_pairs) {
  size_t copies;
  uint64_t total = 0;
  KVC_RETURN_IF(!kvc__mul_size(p->num_runs, (size_t)p->num_regions, &copies), ctx, KVC_ERR_INVALID_ARGUMENT,
                "%zu runs x %d regions overflows", p->num_runs, p->num_regions);
  for (int32_t r = 0; r < p->num_regions; r++) {
    uint64_t bytes;
    KVC_RETURN_IF(__builtin_mul_overflow((uint64_t)n_pairs, p->regions[r].page_bytes, &bytes) ||
                      __builtin_add_overflow(total, bytes, &total),
                  ctx, KVC_ERR_INVALID_ARGUMENT, "total bytes of %zu pages over %d regions overflow", n_pairs,
                  p->num_regions);
  }
  p->num_copies = copies;
  p->total_bytes = total;
  return KVC_OK;
}

static void plan_free(kvc_transfer_plan *p) {
  kvc_context *ctx = p->ctx;
  p->magic = 0;
  kvc__free(ctx, p->regions);
  kvc__free(ctx, p->runs);
  kvc__free(ctx, p);
}

kvc_status kvc_transfer_plan_create(kvc_context *ctx, const kvc_transfer_layout *src, const kvc_transfer_layout *dst,
                                    const int64_t *src_pages, const int64_t *dst_pages, size_t n_pages,
                                    kvc_transfer_plan **out) {
  KVC_RETURN_IF(!ctx, NULL, KVC_ERR_INVALID_ARGUMENT, "ctx is NULL");
  KVC_FORWARD(kvc__layout_check(src, ctx, __func__));
  KVC_FORWARD(kvc__layout_check(dst, ctx, __func__));
  KVC_ARG_NOT_NULL(ctx, out);
  KVC_RETURN_IF(n_pages && (!src_pages || !dst_pages), ctx, KVC_ERR_INVALID_ARGUMENT,
                "src_pages or dst_pages is NULL for %zu pages", n_pages);
  KVC_RETURN_IF(n_pages > SIZE_MAX / sizeof(kvc__xfer_run), ctx, KVC_ERR_INVALID_ARGUMENT, "%zu pages", n_pages);
  KVC_FORWARD(check_compatible(ctx, src, dst));

  kvc_status st = KVC_OK;
  kvc__xfer_run *pairs = NULL;
  kvc_transfer_plan *p = kvc__calloc(ctx, 1, sizeof *p);
  KVC_RETURN_IF(!p, ctx, KVC_ERR_HOST_OOM, "plan");
  p->magic = KVC__PLAN_MAGIC;
  p->ctx = ctx;
  p->src = src->side;
  p->dst = dst->side;
  p->num_regions = src->num_regions;
  p->regions = kvc__calloc(ctx, (size_t)src->num_regions, sizeof *p->regions);
  /* One allocation serves as the target-page sort scratch, then as the pairs/runs. */
  pairs = kvc__calloc(ctx, n_pages ? n_pages : 1, sizeof *pairs);
  KVC_FAIL_GOTO(!p->regions || !pairs, ctx, st, KVC_ERR_HOST_OOM, fail, "plan of %zu pages", n_pages);
  KVC_CHECK_GOTO(check_pages(ctx, src, dst, src_pages, dst_pages, n_pages, (int64_t *)(void *)pairs), st, fail);

  for (int32_t r = 0; r < src->num_regions; r++) {
    const kvc_transfer_region_info *a = &src->regions[r], *b = &dst->regions[r];
    /* pages x page_bytes was checked to fit when each layout was made. */
    p->regions[r] = (kvc__xfer_region){a->base,
                                       b->base,
                                       (uint64_t)(a->pages * a->page_bytes),
                                       (uint64_t)(b->pages * b->page_bytes),
                                       (uint64_t)a->page_bytes,
                                       a->region,
                                       a->layer_id,
                                       a->index};
  }
  for (size_t i = 0; i < n_pages; i++) pairs[i] = (kvc__xfer_run){src_pages[i], dst_pages[i], 1};
  qsort(pairs, n_pages, sizeof *pairs, cmp_pair_by_diff);
  p->num_runs = merge_runs(pairs, n_pages);
  qsort(pairs, p->num_runs, sizeof *pairs, cmp_run_by_src);
  p->runs = pairs;
  pairs = NULL;
  KVC_CHECK_GOTO(count_copies(ctx, p, n_pages), st, fail);
  *out = p;
  return KVC_OK;
fail:
  kvc__free(ctx, pairs);
  plan_free(p);
  return st;
}

void kvc_transfer_plan_destroy(kvc_transfer_plan *plan) {
  if (plan && plan->magic == KVC__PLAN_MAGIC) plan_free(plan);
}

size_t kvc_transfer_plan_num_copies(const kvc_transfer_plan *plan) {
  return plan && plan->magic == KVC__PLAN_MAGIC ? plan->num_copies : 0;
}

size_t kvc_transfer_plan_num_runs(const kvc_transfer_plan *plan) {
  return plan && plan->magic == KVC__PLAN_MAGIC ? plan->num_runs : 0;
}

uint64_t kvc_transfer_plan_total_bytes(const kvc_transfer_plan *plan) {
  return plan && plan->magic == KVC__PLAN_MAGIC ? plan->total_bytes : 0;
}

kvc_status kvc_transfer_plan_copy(const kvc_transfer_plan *plan, size_t index, kvc_transfer_copy *out) {
  KVC_FORWARD(kvc__plan_check(plan, NULL, __func__));
  KVC_ARG_NOT_NULL(plan->ctx, out);
  KVC_RETURN_IF(index >= plan->num_copies, plan->ctx, KVC_ERR_INVALID_ARGUMENT, "index %zu outside [0, %zu)", index,
                plan->num_copies);
  const kvc__xfer_region *r;
  uint64_t so, dof, bytes;
  kvc__plan_copy_at(plan, index, &r, &so, &dof, &bytes);
  memset(out, 0, sizeof *out);
  out->region_index = (int32_t)(index / plan->num_runs);
  out->region = r->region;
  out->layer_id = r->layer_id;
  out->index = r->index;
  out->src_offset = so;
  out->dst_offset = dof;
  out->bytes = bytes;
  return KVC_OK;
}
