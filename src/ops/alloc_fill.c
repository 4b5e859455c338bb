/*
 * alloc_fill.c — level-1 wrappers of SGLang's paged allocation kernels on device inputs.
 */
#include "ops.h"

#define ADDR(p) ((uint64_t)(uintptr_t)(p))

kvc_status kvc_alloc_extend_fill(kvc_context *ctx, const void *prefix_lens, const void *seq_lens,
                                 kvc_index_type lens_type, const int64_t *last_loc, const int64_t *free_pages,
                                 int64_t num_free_pages, int64_t page_size, int64_t *out, size_t n, kvc_stream stream) {
  KVC_API_ENTRY();
  KVC_RETURN_IF(!ctx, NULL, KVC_ERR_INVALID_ARGUMENT, "ctx is NULL");
  KVC_RETURN_IF(page_size < 1, ctx, KVC_ERR_INVALID_ARGUMENT, "page_size %lld < 1", (long long)page_size);
  KVC_RETURN_IF(num_free_pages < 0, ctx, KVC_ERR_INVALID_ARGUMENT, "num_free_pages %lld < 0",
                (long long)num_free_pages);
  KVC_CHECK_INDEX_TYPE(ctx, lens_type);
  if (n == 0) return KVC_OK;
  KVC_RETURN_IF(!prefix_lens || !seq_lens || !last_loc || !out || (num_free_pages > 0 && !free_pages), ctx,
                KVC_ERR_INVALID_ARGUMENT, "NULL pointer argument for n = %zu", n);
  kvc_p_extend_fill p = {ADDR(prefix_lens), ADDR(seq_lens), ADDR(last_loc), ADDR(free_pages),           ADDR(out),
                         num_free_pages,    page_size,      (int64_t)n,     lens_type == KVC_INDEX_I64, 0};
  const kvc__kfunc *f;
  KVC_FORWARD(kvc__kernel_get(ctx, &kvc__k_extend_fill, NULL, &f));
  size_t blocks = KVC__MIN(n, (size_t)(2 * kvc__num_sms(ctx)));
  return kvc__kernel_launch(ctx, f, kvc__dim((unsigned)blocks, 1, 1), kvc__dim(256, 1, 1), 0, stream, &p, sizeof p);
}

kvc_status kvc_alloc_decode_fill(kvc_context *ctx, const void *seq_lens, kvc_index_type lens_type, const void *last_loc,
                                 kvc_index_type last_loc_type, const int64_t *free_pages, int64_t num_free_pages,
                                 int64_t page_size, int64_t *out, size_t n, kvc_stream stream) {
  KVC_API_ENTRY();
  KVC_RETURN_IF(!ctx, NULL, KVC_ERR_INVALID_ARGUMENT, "ctx is NULL");
  KVC_RETURN_IF(page_size < 1, ctx, KVC_ERR_INVALID_ARGUMENT, "page_size %lld < 1", (long long)page_size);
  KVC_RETURN_IF(num_free_pages < 0, ctx, KVC_ERR_INVALID_ARGUMENT, "num_free_pages %lld < 0",
                (long long)num_free_pages);
  KVC_CHECK_INDEX_TYPE(ctx, lens_type);
  KVC_CHECK_INDEX_TYPE(ctx, last_loc_type);
  if (n == 0) return KVC_OK;
  KVC_RETURN_IF(!seq_lens || !last_loc || !out || (num_free_pages > 0 && !free_pages), ctx, KVC_ERR_INVALID_ARGUMENT,
                "NULL pointer argument for n = %zu", n);
  kvc_p_decode_fill p = {ADDR(seq_lens),
                         ADDR(last_loc),
                         ADDR(free_pages),
                         ADDR(out),
                         num_free_pages,
                         page_size,
                         (int64_t)n,
                         lens_type == KVC_INDEX_I64,
                         last_loc_type == KVC_INDEX_I64};
  const kvc__kfunc *f;
  KVC_FORWARD(kvc__kernel_get(ctx, &kvc__k_decode_fill, NULL, &f));
  return kvc__kernel_launch(ctx, f, kvc__dim(1, 1, 1), kvc__dim(256, 1, 1), 0, stream, &p, sizeof p);
}
