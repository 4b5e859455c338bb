/*
 * req_to_token.c — level-1 ops on the request-to-token table (SGLang's get_last_loc and
 * write_req_to_token_pool), as thin wrappers: validate what the host can see, pack the
 * parameter struct, launch once.
 */
#include "ops.h"

#include <stddef.h>

#define ADDR(p) ((uint64_t)(uintptr_t)(p))

static kvc_status check_table(const kvc_context *ctx, const char *fn, const int32_t *table, int64_t num_rows,
                              int64_t row_stride) {
  if (!table) return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "req_to_token is NULL");
  if (num_rows <= 0 || row_stride <= 0)
    return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "num_rows %lld / row_stride %lld must be positive",
                      (long long)num_rows, (long long)row_stride);
  /* The kernels index row * row_stride + position in int64, over a table of int32. */
  int64_t entries;
  size_t bytes;
  if (!kvc__mul_i64(num_rows, row_stride, &entries) || !kvc__mul_size((size_t)entries, sizeof *table, &bytes) ||
      bytes > (size_t)PTRDIFF_MAX)
    return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "num_rows %lld x row_stride %lld overflows",
                      (long long)num_rows, (long long)row_stride);
  return KVC_OK;
}

kvc_status kvc_get_last_loc(kvc_context *ctx, const int32_t *req_to_token, int64_t num_rows, int64_t row_stride,
                            const void *rows, kvc_index_type rows_type, const void *prefix_lens,
                            kvc_index_type lens_type, void *out_last_loc, size_t n, kvc_stream stream) {
  KVC_API_ENTRY();
  KVC_RETURN_IF(!ctx, NULL, KVC_ERR_INVALID_ARGUMENT, "ctx is NULL");
  KVC_CHECK_INDEX_TYPE(ctx, rows_type);
  KVC_CHECK_INDEX_TYPE(ctx, lens_type);
  if (n == 0) return KVC_OK;
  KVC_FORWARD(check_table(ctx, __func__, req_to_token, num_rows, row_stride));
  KVC_RETURN_IF(!rows || !prefix_lens || !out_last_loc, ctx, KVC_ERR_INVALID_ARGUMENT,
                "rows, prefix_lens and out_last_loc must be non-NULL for n = %zu", n);
  KVC_RETURN_IF(n > INT32_MAX || num_rows > INT32_MAX || row_stride > INT32_MAX, ctx, KVC_ERR_INVALID_ARGUMENT,
                "n %zu, num_rows %lld or row_stride %lld exceeds the kernel's int32 range", n, (long long)num_rows,
                (long long)row_stride);
  const int32_t flags = (rows_type == KVC_INDEX_I64 ? KVC_LAST_LOC_ROWS_I64 : 0) |
                        (lens_type == KVC_INDEX_I64 ? KVC_LAST_LOC_LENS_I64 : 0);
  kvc_p_get_last_loc p = {ADDR(rows), ADDR(prefix_lens), ADDR(req_to_token),  ADDR(out_last_loc),
                          (int32_t)n, (int32_t)num_rows, (int32_t)row_stride, flags};
  const kvc__kfunc *f;
  const bool one = n == 1;
  KVC_FORWARD(kvc__kernel_get(ctx, &kvc__k_get_last_loc[flags | (one ? KVC_LAST_LOC_ONE : 0)], NULL, &f));
  /* 128-thread blocks, one request per thread: at batch 256 and 1024 they measured 0.04
   * us per kernel faster than 256 on the H200 (more, smaller blocks start sooner), and
   * two requests per thread (Triton's shape) no faster (bench/NOTES-kernels.md). One
   * request runs on one thread of the _one entry, which has i = 0 built in. */
  const unsigned blocks = (unsigned)((n + KVC_LAST_LOC_THREADS - 1) / KVC_LAST_LOC_THREADS);
  return kvc__kernel_launch(ctx, f, kvc__dim(blocks, 1, 1), kvc__dim(one ? 1 : KVC_LAST_LOC_THREADS, 1, 1), 0, stream,
                            &p, sizeof p);
}

kvc_status kvc_write_req_to_token(kvc_context *ctx, int32_t *req_to_token, int64_t num_rows, int64_t row_stride,
                                  const void *rows, kvc_index_type rows_type, const uint64_t *prefix_ptrs,
                                  const void *prefix_lens, const void *seq_lens, kvc_index_type lens_type,
                                  const int64_t *out_cache_loc, size_t n, kvc_stream stream) {
  KVC_API_ENTRY();
  KVC_RETURN_IF(!ctx, NULL, KVC_ERR_INVALID_ARGUMENT, "ctx is NULL");
  KVC_CHECK_INDEX_TYPE(ctx, rows_type);
  KVC_CHECK_INDEX_TYPE(ctx, lens_type);
  if (n == 0) return KVC_OK;
  KVC_FORWARD(check_table(ctx, __func__, req_to_token, num_rows, row_stride));
  KVC_RETURN_IF(!rows || !prefix_lens || !seq_lens || !out_cache_loc, ctx, KVC_ERR_INVALID_ARGUMENT,
                "rows, prefix_lens, seq_lens and out_cache_loc must be non-NULL for n = %zu", n);
  kvc_p_write_req_to_token p = {
      ADDR(req_to_token),        ADDR(rows), ADDR(prefix_ptrs), ADDR(prefix_lens), ADDR(seq_lens),
      ADDR(out_cache_loc),       num_rows,   row_stride,        (int64_t)n,        rows_type == KVC_INDEX_I64,
      lens_type == KVC_INDEX_I64};
  const kvc__kfunc *f;
  KVC_FORWARD(kvc__kernel_get(ctx, &kvc__k_write_req_to_token, NULL, &f));
  /* One block per request up to two waves; each block scans all lengths itself. */
  size_t blocks = KVC__MIN(n, (size_t)(2 * kvc__num_sms(ctx)));
  return kvc__kernel_launch(ctx, f, kvc__dim((unsigned)blocks, 1, 1), kvc__dim(256, 1, 1), 0, stream, &p, sizeof p);
}
