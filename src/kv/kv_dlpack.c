/*
 * kv_dlpack.c — zero-copy DLPack export of one pool buffer.
 *
 * The returned DLManagedTensor lives in one heap block together with its shape and
 * strides; its deleter frees only that block (the memory stays the pool's). The block
 * comes from malloc, not the context allocator, because the consumer (e.g. PyTorch)
 * may call the deleter after the context is gone.
 *
 * dtypes: f32/f16/bf16 as float/bfloat; fp8 as DLPack's float8 codes; packed FP4 data
 * (two e2m1 values per byte, low nibble first) as float4_e2m1fn with bits 4 and the
 * last dimension counted in VALUES (twice the bytes), which is how DLPack >= 1.1 lays
 * out sub-byte types; scale bytes and index pages as uint8. With as_bytes every buffer
 * is uint8 with shape (rows, row_bytes), for consumers without float8/float4 support.
 */
#include "dlpack_abi.h"
#include "kv_pool.h"

#include <stdlib.h>
#include <string.h>

typedef struct dl_block {
  kvc_dl_managed_tensor t;
  int64_t shape[4];
  int64_t strides[4];
} dl_block;

static void dl_delete(kvc_dl_managed_tensor *self) { free(self); }

static kvc_dl_dtype dl_dtype(kvc_dtype d) {
  switch (d) {
  case KVC_DTYPE_F32: return (kvc_dl_dtype){KVC_DL_FLOAT, 32, 1};
  case KVC_DTYPE_F16: return (kvc_dl_dtype){KVC_DL_FLOAT, 16, 1};
  case KVC_DTYPE_BF16: return (kvc_dl_dtype){KVC_DL_BFLOAT, 16, 1};
  case KVC_DTYPE_FP8_E4M3: return (kvc_dl_dtype){KVC_DL_FLOAT8_E4M3FN, 8, 1};
  case KVC_DTYPE_FP8_E5M2: return (kvc_dl_dtype){KVC_DL_FLOAT8_E5M2, 8, 1};
  case KVC_DTYPE_FP4_E2M1: return (kvc_dl_dtype){KVC_DL_FLOAT4_E2M1FN, 4, 1};
  case KVC_DTYPE_I32: return (kvc_dl_dtype){KVC_DL_INT, 32, 1};
  case KVC_DTYPE_I64: return (kvc_dl_dtype){KVC_DL_INT, 64, 1};
  case KVC_DTYPE_U64: return (kvc_dl_dtype){KVC_DL_UINT, 64, 1};
  default: return (kvc_dl_dtype){KVC_DL_UINT, 8, 1};
  }
}

kvc_status kvc_kv_pool_export_dlpack(const kvc_kv_pool *pool, kvc_region_kind region, int32_t layer_id, int as_bytes,
                                     void **out_tensor) {
  KVC_API_ENTRY();
  int32_t l;
  KVC_FORWARD(kvc__kv_pool_layer(pool, __func__, layer_id, &l));
  KVC_RETURN_IF(!out_tensor, pool->ctx, KVC_ERR_INVALID_ARGUMENT, "out_tensor is NULL");
  const kvc__kv_buffer *b = kvc__kv_buffer_at(pool, region, l);
  KVC_RETURN_IF(!b, pool->ctx, KVC_ERR_INVALID_ARGUMENT, "pool kind %d has no region %d", (int)pool->cfg.kind,
                (int)region);
  dl_block *blk = calloc(1, sizeof *blk);
  KVC_RETURN_IF(!blk, pool->ctx, KVC_ERR_HOST_OOM, "DLPack wrapper");
  int32_t ndim;
  if (as_bytes) {
    ndim = 2;
    blk->shape[0] = b->rows;
    blk->shape[1] = b->row_bytes;
    blk->t.dl_tensor.dtype = (kvc_dl_dtype){KVC_DL_UINT, 8, 1};
  } else {
    ndim = b->ndim;
    memcpy(blk->shape, b->shape, sizeof blk->shape);
    if (b->dtype == KVC_DTYPE_FP4_E2M1) blk->shape[ndim - 1] *= 2; /* values, not bytes */
    blk->t.dl_tensor.dtype = dl_dtype(b->dtype);
  }
  int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    blk->strides[i] = stride;
    stride *= blk->shape[i];
  }
  const int dev = kvc_context_device(pool->ctx);
  blk->t.dl_tensor.data = b->base;
  blk->t.dl_tensor.device = dev >= 0 ? (kvc_dl_device){KVC_DL_CUDA, dev} : (kvc_dl_device){KVC_DL_CPU, 0};
  blk->t.dl_tensor.ndim = ndim;
  blk->t.dl_tensor.shape = blk->shape;
  blk->t.dl_tensor.strides = blk->strides;
  blk->t.dl_tensor.byte_offset = 0;
  blk->t.manager_ctx = NULL;
  blk->t.deleter = dl_delete;
  *out_tensor = &blk->t;
  return KVC_OK;
}
