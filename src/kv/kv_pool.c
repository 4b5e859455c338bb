/*
 * kv_pool.c — KV pool creation, geometry and descriptors (the operations live in the
 * other kv_*.c files, listed in kv_pool.h with the memory layout).
 *
 * Geometry per kind (rows = size + page_size; NoOp: page_size placeholder rows):
 *   MHA      K (rows, H, D) and V (rows, H, Dv) of dtype
 *   MHA_FP4  K, V (rows, H, D/2) packed e2m1; K_SCALE, V_SCALE (rows, H*D/16) bytes
 *   MLA      KV (rows, 1, R+Q) of dtype
 *   MLA_FP4  KV (rows, 1, (R+Q)/2) packed; KV_SCALE (rows, (R+Q)/16)
 *   NSA      KV (rows, 1, 656) bytes when fp8 (R=512, Q=64), else like MLA; INDEX_K
 *            (pages, ps*(128+4)) bytes with pages = (index_buf_size + ps + 1) / ps
 */
#include "kv_pool.h"
#include "../device/context.h"

#include <string.h>

kvc_status kvc__kv_pool_check(const kvc_kv_pool *pool, const char *func) {
  if (!pool) return kvc__error(NULL, KVC_ERR_INVALID_ARGUMENT, func, "pool is NULL");
  if (pool->magic != KVC__KV_POOL_MAGIC) return kvc__error(NULL, KVC_ERR_INVALID_ARGUMENT, func, "not a live kv pool");
  return KVC_OK;
}

kvc_status kvc__kv_pool_layer(const kvc_kv_pool *pool, const char *func, int32_t layer_id, int32_t *local) {
  KVC_FORWARD(kvc__kv_pool_check(pool, func));
  int64_t l = (int64_t)layer_id - pool->cfg.start_layer;
  if (l < 0 || l >= pool->cfg.layer_num)
    return kvc__error(pool->ctx, KVC_ERR_INVALID_ARGUMENT, func, "layer_id %d outside the pool's layers [%d, %d)",
                      layer_id, pool->cfg.start_layer, pool->cfg.start_layer + pool->cfg.layer_num);
  *local = (int32_t)l;
  return KVC_OK;
}

typedef struct region_spec {
  int64_t rows, row_bytes;
  kvc_dtype dtype;
  int32_t ndim;
  int64_t shape[4];
} region_spec;

#define KVC__DIM_MAX (1 << 20)
#define KVC__KV_MAX_LAYERS 1024

static kvc_status validate(kvc_context *ctx, kvc_kv_pool_config *c) {
  const char *fn = "kvc_kv_pool_create";
  KVC_RETURN_IF(c->kind < KVC_KV_MHA || c->kind > KVC_KV_NSA, ctx, KVC_ERR_INVALID_ARGUMENT, "kind %d unknown",
                (int)c->kind);
  KVC_RETURN_IF(c->size < 1, ctx, KVC_ERR_INVALID_ARGUMENT, "size %lld < 1", (long long)c->size);
  KVC_RETURN_IF(c->page_size < 1, ctx, KVC_ERR_INVALID_ARGUMENT, "page_size %d < 1", c->page_size);
  KVC_RETURN_IF(c->size >= ((int64_t)1 << 31) - c->page_size, ctx, KVC_ERR_INVALID_ARGUMENT,
                "size %lld + page_size %d must stay below 2^31 (slot ids are int32 in req_to_token)",
                (long long)c->size, c->page_size);
  KVC_RETURN_IF(c->layer_num < 1 || c->start_layer < 0, ctx, KVC_ERR_INVALID_ARGUMENT, "layer_num %d / start_layer %d",
                c->layer_num, c->start_layer);
  int32_t layer_end;
  KVC_RETURN_IF(!kvc__add_i32(c->start_layer, c->layer_num, &layer_end), ctx, KVC_ERR_INVALID_ARGUMENT,
                "start_layer %d + layer_num %d passes INT32_MAX", c->start_layer, c->layer_num);
  /* Bounds every per-layer count below (buffer table, segments) before it is summed. */
  KVC_RETURN_IF(c->layer_num > KVC__KV_MAX_LAYERS, ctx, KVC_ERR_INVALID_ARGUMENT, "layer_num %d > %d", c->layer_num,
                KVC__KV_MAX_LAYERS);
  KVC_RETURN_IF(c->flags != 0, ctx, KVC_ERR_INVALID_ARGUMENT, "flags must be 0");
  bool mha = c->kind <= KVC_KV_MHA_FP4;
  if (mha) {
    /* Each dimension <= 2^20 keeps row bytes (H x D x 8 <= 2^43) exact in int64; the
     * pool bytes (rows x row bytes x layers) are then overflow-checked in size_t. */
    KVC_RETURN_IF(c->head_num < 1 || c->head_dim < 1 || c->v_head_dim < 0 || c->head_num > KVC__DIM_MAX ||
                      c->head_dim > KVC__DIM_MAX || c->v_head_dim > KVC__DIM_MAX,
                  ctx, KVC_ERR_INVALID_ARGUMENT, "head_num %d / head_dim %d / v_head_dim %d outside [1, 2^20]",
                  c->head_num, c->head_dim, c->v_head_dim);
    if (c->v_head_dim == 0) c->v_head_dim = c->head_dim;
  } else {
    KVC_RETURN_IF(c->kv_lora_rank < 1 || c->qk_rope_head_dim < 0 || c->kv_lora_rank > KVC__DIM_MAX ||
                      c->qk_rope_head_dim > KVC__DIM_MAX,
                  ctx, KVC_ERR_INVALID_ARGUMENT, "kv_lora_rank %d / qk_rope_head_dim %d outside [1, 2^20]",
                  c->kv_lora_rank, c->qk_rope_head_dim);
  }
  switch (c->kind) {
  case KVC_KV_MHA:
  case KVC_KV_MHA_NOOP:
  case KVC_KV_MLA:
    KVC_RETURN_IF(!kvc__is_float_src(c->dtype) && !kvc__is_fp8(c->dtype), ctx, KVC_ERR_INVALID_ARGUMENT,
                  "dtype %s not allowed (f32, f16, bf16, fp8_e4m3, fp8_e5m2)", kvc_dtype_name(c->dtype));
    break;
  case KVC_KV_MHA_FP4:
    KVC_RETURN_IF(!kvc__is_float_src(c->dtype), ctx, KVC_ERR_INVALID_ARGUMENT,
                  "FP4 pool dtype %s must be the value type (f32, f16, bf16)", kvc_dtype_name(c->dtype));
    KVC_RETURN_IF(((int64_t)c->head_num * c->head_dim) % 16, ctx, KVC_ERR_INVALID_ARGUMENT,
                  "FP4 needs head_num * head_dim %% 16 == 0");
    KVC_RETURN_IF(c->v_head_dim != c->head_dim, ctx, KVC_ERR_INVALID_ARGUMENT,
                  "FP4 pool needs v_head_dim == head_dim (SGLang sizes V with head_dim)");
    break;
  case KVC_KV_MLA_FP4:
    KVC_RETURN_IF(!kvc__is_float_src(c->dtype), ctx, KVC_ERR_INVALID_ARGUMENT,
                  "FP4 pool dtype %s must be the value type (f32, f16, bf16)", kvc_dtype_name(c->dtype));
    KVC_RETURN_IF((c->kv_lora_rank + c->qk_rope_head_dim) % 16, ctx, KVC_ERR_INVALID_ARGUMENT,
                  "FP4 needs (kv_lora_rank + qk_rope_head_dim) %% 16 == 0");
    break;
  case KVC_KV_NSA:
    KVC_RETURN_IF(c->dtype != KVC_DTYPE_FP8_E4M3 && c->dtype != KVC_DTYPE_BF16, ctx, KVC_ERR_INVALID_ARGUMENT,
                  "NSA dtype %s must be fp8_e4m3 (656-byte rows) or bf16", kvc_dtype_name(c->dtype));
    KVC_RETURN_IF(c->dtype == KVC_DTYPE_FP8_E4M3 && (c->kv_lora_rank != 512 || c->qk_rope_head_dim != 64), ctx,
                  KVC_ERR_INVALID_ARGUMENT, "NSA fp8 rows need kv_lora_rank 512 and qk_rope_head_dim 64");
    if (c->index_head_dim == 0) c->index_head_dim = 128;
    KVC_RETURN_IF(c->index_head_dim != 128, ctx, KVC_ERR_INVALID_ARGUMENT, "index_head_dim %d must be 128",
                  c->index_head_dim);
    if (c->index_buf_size == 0) c->index_buf_size = c->size;
    KVC_RETURN_IF(c->index_buf_size < 0 || c->index_buf_size >= ((int64_t)1 << 31), ctx, KVC_ERR_INVALID_ARGUMENT,
                  "index_buf_size %lld outside [0, 2^31)", (long long)c->index_buf_size);
    break;
  }
  (void)fn;
  return KVC_OK;
}

/* Fills specs[region] for the kind; returns false if the region is absent. */
static void geometry(kvc_kv_pool *p, region_spec specs[KVC__REGION_KINDS]) {
  const kvc_kv_pool_config *c = &p->cfg;
  memset(specs, 0, sizeof(region_spec) * KVC__REGION_KINDS);
  const int64_t rows = c->kind == KVC_KV_MHA_NOOP ? c->page_size : p->rows;
  const int64_t isz = (int64_t)kvc_dtype_size(c->dtype);
  const int64_t H = c->head_num, D = c->head_dim, Dv = c->v_head_dim;
  const int64_t T = (int64_t)c->kv_lora_rank + c->qk_rope_head_dim;
  switch (c->kind) {
  case KVC_KV_MHA:
  case KVC_KV_MHA_NOOP:
    specs[KVC_REGION_K] = (region_spec){rows, H * D * isz, c->dtype, 3, {rows, H, D, 0}};
    specs[KVC_REGION_V] = (region_spec){rows, H * Dv * isz, c->dtype, 3, {rows, H, Dv, 0}};
    p->store_dtype = c->dtype;
    break;
  case KVC_KV_MHA_FP4:
    specs[KVC_REGION_K] = (region_spec){rows, H * D / 2, KVC_DTYPE_FP4_E2M1, 3, {rows, H, D / 2, 0}};
    specs[KVC_REGION_V] = (region_spec){rows, H * D / 2, KVC_DTYPE_FP4_E2M1, 3, {rows, H, D / 2, 0}};
    specs[KVC_REGION_K_SCALE] = (region_spec){rows, H * D / 16, KVC_DTYPE_U8, 2, {rows, H * D / 16, 0, 0}};
    specs[KVC_REGION_V_SCALE] = (region_spec){rows, H * D / 16, KVC_DTYPE_U8, 2, {rows, H * D / 16, 0, 0}};
    p->store_dtype = KVC_DTYPE_U8;
    break;
  case KVC_KV_MLA:
    specs[KVC_REGION_KV] = (region_spec){rows, T * isz, c->dtype, 3, {rows, 1, T, 0}};
    p->store_dtype = c->dtype;
    break;
  case KVC_KV_MLA_FP4:
    specs[KVC_REGION_KV] = (region_spec){rows, T / 2, KVC_DTYPE_FP4_E2M1, 3, {rows, 1, T / 2, 0}};
    specs[KVC_REGION_KV_SCALE] = (region_spec){rows, T / 16, KVC_DTYPE_U8, 2, {rows, T / 16, 0, 0}};
    p->store_dtype = KVC_DTYPE_U8;
    break;
  case KVC_KV_NSA: {
    if (c->dtype == KVC_DTYPE_FP8_E4M3) {
      specs[KVC_REGION_KV] = (region_spec){rows, 656, KVC_DTYPE_U8, 3, {rows, 1, 656, 0}};
      p->store_dtype = KVC_DTYPE_U8;
    } else {
      specs[KVC_REGION_KV] = (region_spec){rows, T * isz, c->dtype, 3, {rows, 1, T, 0}};
      p->store_dtype = c->dtype;
    }
    const int64_t pages = (c->index_buf_size + c->page_size + 1) / c->page_size;
    const int64_t page_bytes = (int64_t)c->page_size * (c->index_head_dim + 4);
    specs[KVC_REGION_INDEX_K] = (region_spec){pages, page_bytes, KVC_DTYPE_U8, 2, {pages, page_bytes, 0, 0}};
    p->index_pages = pages;
    p->index_page_bytes = page_bytes;
    break;
  }
  }
  p->k_row_bytes = specs[KVC_REGION_K].row_bytes;
  p->v_row_bytes = specs[KVC_REGION_V].row_bytes;
  p->k_scale_row_bytes = specs[KVC_REGION_K_SCALE].row_bytes;
  p->v_scale_row_bytes = specs[KVC_REGION_V_SCALE].row_bytes;
  p->kv_row_bytes = specs[KVC_REGION_KV].row_bytes;
  p->kv_scale_row_bytes = specs[KVC_REGION_KV_SCALE].row_bytes;
}

kvc_status kvc_kv_pool_create(kvc_context *ctx, const kvc_kv_pool_config *config, kvc_kv_pool **out) {
  KVC_API_ENTRY();
  kvc_kv_pool_config cfg = KVC_KV_POOL_CONFIG_INIT;
  KVC__CREATE_CONFIG(ctx, config, out, &cfg, kvc_kv_pool_config);
  KVC_FORWARD(validate(ctx, &cfg));

  kvc_status st = KVC_OK;
  kvc_kv_pool *p = kvc__calloc(ctx, 1, sizeof *p);
  KVC_RETURN_IF(!p, ctx, KVC_ERR_HOST_OOM, "pool struct");
  p->magic = KVC__KV_POOL_MAGIC;
  p->ctx = ctx;
  p->cfg = cfg;
  p->rows = cfg.size + cfg.page_size;
  region_spec specs[KVC__REGION_KINDS];
  geometry(p, specs);

  int32_t nbuf = 0;
  for (int r = 0; r < KVC__REGION_KINDS; r++) nbuf += specs[r].rows ? cfg.layer_num : 0;
  p->buffers = kvc__calloc(ctx, (size_t)nbuf, sizeof *p->buffers);
  p->scratch = kvc__malloc(ctx, KVC__PARAM_SCRATCH_BYTES);
  KVC_FAIL_GOTO(!p->buffers || !p->scratch, ctx, st, KVC_ERR_HOST_OOM, fail, "buffer table");

  /* Lay out every buffer, 256-byte aligned, with overflow checks. */
  size_t offset = 0;
  size_t offsets[KVC__REGION_KINDS * KVC__KV_MAX_LAYERS]; /* nbuf fits: layer_num was bounded */
  int32_t b = 0;
  for (int r = 0; r < KVC__REGION_KINDS; r++) {
    p->first[r] = -1;
    if (!specs[r].rows) continue;
    p->first[r] = b;
    for (int32_t l = 0; l < cfg.layer_num; l++, b++) {
      size_t bytes;
      KVC_FAIL_GOTO(!kvc__mul_size((size_t)specs[r].rows, (size_t)specs[r].row_bytes, &bytes) ||
                        !kvc__add_size(offset, bytes, &offsets[b]) || offsets[b] > SIZE_MAX - 512,
                    ctx, st, KVC_ERR_INVALID_ARGUMENT, fail, "pool bytes overflow");
      offsets[b] = offset;
      offset = (offset + bytes + 255) & ~(size_t)255;
      kvc__kv_buffer *kb = &p->buffers[b];
      kb->region = (kvc_region_kind)r;
      kb->layer = l;
      kb->rows = specs[r].rows;
      kb->row_bytes = specs[r].row_bytes;
      kb->dtype = specs[r].dtype;
      kb->ndim = specs[r].ndim;
      memcpy(kb->shape, specs[r].shape, sizeof kb->shape);
    }
  }
  p->num_buffers = nbuf;
  p->mem_bytes = offset;
  KVC_CHECK_GOTO(kvc__dev_alloc(ctx, offset, &p->mem), st, fail);
  for (int32_t i = 0; i < nbuf; i++) p->buffers[i].base = (unsigned char *)p->mem + offsets[i];
  KVC_CHECK_GOTO(kvc__dev_memset(ctx, p->mem, 0, offset, NULL), st, fail);
  KVC_CHECK_GOTO(kvc__dev_sync(ctx, NULL), st, fail);
  if (ctx->core.options.canary) atomic_store(&ctx->canary_pool, p); /* flows created later guard it */
  *out = p;
  return KVC_OK;
fail:
  kvc__dev_free(ctx, p->mem);
  kvc__free(ctx, p->buffers);
  kvc__free(ctx, p->scratch);
  kvc__free(ctx, p);
  return st;
}

void kvc_kv_pool_destroy(kvc_kv_pool *pool) {
  if (!pool || pool->magic != KVC__KV_POOL_MAGIC) return;
  kvc_context *ctx = pool->ctx;
  void *expected = pool;
  atomic_compare_exchange_strong(&ctx->canary_pool, &expected, NULL);
  kvc__dev_free(ctx, pool->mem);
  kvc__dev_free(ctx, pool->canary_result);
  kvc__free(ctx, pool->buffers);
  kvc__free(ctx, pool->scratch);
  pool->magic = 0;
  kvc__free(ctx, pool);
}

kvc_status kvc_kv_pool_clear(kvc_kv_pool *pool, kvc_stream stream) {
  KVC_API_ENTRY();
  KVC_FORWARD(kvc__kv_pool_check(pool, __func__));
  return kvc__dev_memset(pool->ctx, pool->mem, 0, pool->mem_bytes, stream);
}

kvc_status kvc_kv_pool_size_bytes(const kvc_kv_pool *pool, size_t *k_bytes, size_t *v_bytes) {
  KVC_API_ENTRY();
  KVC_FORWARD(kvc__kv_pool_check(pool, __func__));
  KVC_RETURN_IF(!k_bytes || !v_bytes, pool->ctx, KVC_ERR_INVALID_ARGUMENT, "k_bytes or v_bytes is NULL");
  size_t k = 0, v = 0;
  if (pool->cfg.kind != KVC_KV_MHA_NOOP) {
    for (int32_t i = 0; i < pool->num_buffers; i++) {
      const kvc__kv_buffer *b = &pool->buffers[i];
      size_t bytes = (size_t)b->rows * (size_t)b->row_bytes;
      if (b->region == KVC_REGION_V || b->region == KVC_REGION_V_SCALE) v += bytes;
      else k += bytes;
    }
  }
  *k_bytes = k;
  *v_bytes = v;
  return KVC_OK;
}

int32_t kvc_kv_pool_num_buffers(const kvc_kv_pool *pool) {
  return pool && pool->magic == KVC__KV_POOL_MAGIC ? pool->num_buffers : 0;
}

static void fill_desc(const kvc_kv_pool *pool, const kvc__kv_buffer *b, kvc_buffer_desc *out) {
  size_t caller_size = out->struct_size;
  kvc_buffer_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.version = KVC_VERSION_NUMBER;
  d.region = b->region;
  d.layer_id = pool->cfg.start_layer + b->layer;
  d.dtype = b->dtype;
  d.ndim = b->ndim;
  d.device = kvc_context_device(pool->ctx);
  d.data = b->base;
  memcpy(d.shape, b->shape, sizeof d.shape);
  int64_t stride = 1;
  for (int i = b->ndim - 1; i >= 0; i--) {
    d.strides[i] = stride;
    stride *= b->shape[i];
  }
  d.bytes_per_token = b->region == KVC_REGION_INDEX_K ? (int64_t)pool->cfg.index_head_dim + 4 : b->row_bytes;
  d.bytes_per_page = b->region == KVC_REGION_INDEX_K ? b->row_bytes : b->row_bytes * pool->cfg.page_size;
  d.total_bytes = b->rows * b->row_bytes;
  memcpy(out, &d, caller_size < sizeof d ? caller_size : sizeof d);
  out->struct_size = caller_size;
}

kvc_status kvc_kv_pool_describe(const kvc_kv_pool *pool, int32_t index, kvc_buffer_desc *out) {
  KVC_API_ENTRY();
  KVC_FORWARD(kvc__kv_pool_check(pool, __func__));
  KVC_RETURN_IF(!out, pool->ctx, KVC_ERR_INVALID_ARGUMENT, "out is NULL");
  KVC_RETURN_IF(out->struct_size < offsetof(kvc_buffer_desc, reserved_) || out->struct_size > sizeof *out, pool->ctx,
                KVC_ERR_VERSION, "out->struct_size %zu not understood", out->struct_size);
  KVC_RETURN_IF(index < 0 || index >= pool->num_buffers, pool->ctx, KVC_ERR_INVALID_ARGUMENT,
                "index %d outside [0, %d)", index, pool->num_buffers);
  fill_desc(pool, &pool->buffers[index], out);
  return KVC_OK;
}

kvc_status kvc_kv_pool_buffer(const kvc_kv_pool *pool, kvc_region_kind region, int32_t layer_id, kvc_buffer_desc *out) {
  KVC_API_ENTRY();
  int32_t l = 0;
  KVC_FORWARD(kvc__kv_pool_layer(pool, __func__, layer_id, &l));
  KVC_RETURN_IF(!out, pool->ctx, KVC_ERR_INVALID_ARGUMENT, "out is NULL");
  KVC_RETURN_IF(out->struct_size < offsetof(kvc_buffer_desc, reserved_) || out->struct_size > sizeof *out, pool->ctx,
                KVC_ERR_VERSION, "out->struct_size %zu not understood", out->struct_size);
  const kvc__kv_buffer *b = kvc__kv_buffer_at(pool, region, l);
  KVC_RETURN_IF(!b, pool->ctx, KVC_ERR_INVALID_ARGUMENT, "pool kind %d has no region %d", (int)pool->cfg.kind,
                (int)region);
  fill_desc(pool, b, out);
  return KVC_OK;
}

kvc_status kvc_kv_pool_contiguous_infos(const kvc_kv_pool *pool, kvc_contiguous_info *out, size_t cap, size_t *count) {
  KVC_API_ENTRY();
  KVC_FORWARD(kvc__kv_pool_check(pool, __func__));
  KVC_RETURN_IF(!count || (cap && !out), pool->ctx, KVC_ERR_INVALID_ARGUMENT, "count or out is NULL");
  size_t n = 0;
  for (int32_t i = 0; i < pool->num_buffers; i++) {
    const kvc__kv_buffer *b = &pool->buffers[i];
    if (n < cap) {
      out[n].base = b->base;
      out[n].bytes = (size_t)b->rows * (size_t)b->row_bytes;
      out[n].bytes_per_page =
          (size_t)(b->region == KVC_REGION_INDEX_K ? b->row_bytes : b->row_bytes * pool->cfg.page_size);
    }
    n++;
  }
  *count = n;
  return KVC_OK;
}
