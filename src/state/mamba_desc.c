/*
 * mamba_desc.c — what the Mamba pool tells an engine about its memory: layer indices,
 * tensor and per-layer buffer descriptors (pointer, shape, strides, dtype), contiguous
 * regions and sizes. Read-only; nothing here launches.
 */
#include "mamba.h"

#include <string.h>

/* --- Layers and descriptors -------------------------------------------------------- */

kvc_status kvc_mamba_pool_layer_index(const kvc_mamba_pool *pool, int32_t layer_id, int32_t *index) {
  KVC_API_ENTRY();
  KVC__MAMBA_ENTRY(pool);
  KVC_RETURN_IF(!index, pool->ctx, KVC_ERR_INVALID_ARGUMENT, "index is NULL");
  for (int32_t l = 0; l < pool->L; l++)
    if (pool->layer_ids[l] == layer_id) {
      *index = l;
      return KVC_OK;
    }
  return kvc__error(pool->ctx, KVC_ERR_INVALID_ARGUMENT, __func__, "layer %d is not a Mamba layer of this pool",
                    layer_id);
}

int32_t kvc_mamba_pool_num_layers(const kvc_mamba_pool *pool) { return kvc__mamba_live(pool) ? pool->L : 0; }
int32_t kvc_mamba_pool_layer_id(const kvc_mamba_pool *pool, int32_t index) {
  return kvc__mamba_live(pool) && index >= 0 && index < pool->L ? pool->layer_ids[index] : -1;
}
int32_t kvc_mamba_pool_num_tensors(const kvc_mamba_pool *pool) { return kvc__mamba_live(pool) ? pool->ntensors : 0; }
int32_t kvc_mamba_pool_num_buffers(const kvc_mamba_pool *pool) {
  return kvc__mamba_live(pool) ? pool->nstate * pool->L : 0;
}

kvc_status kvc_mamba_pool_describe_tensor(const kvc_mamba_pool *pool, int32_t index, kvc_mamba_tensor_desc *out) {
  KVC_API_ENTRY();
  KVC__MAMBA_ENTRY(pool);
  KVC_RETURN_IF(!out, pool->ctx, KVC_ERR_INVALID_ARGUMENT, "out is NULL");
  KVC_RETURN_IF(out->struct_size < offsetof(kvc_mamba_tensor_desc, reserved_) || out->struct_size > sizeof *out,
                pool->ctx, KVC_ERR_VERSION, "out->struct_size %zu not understood", out->struct_size);
  KVC_RETURN_IF(index < 0 || index >= pool->ntensors, pool->ctx, KVC_ERR_INVALID_ARGUMENT, "index %d outside [0, %d)",
                index, pool->ntensors);
  const mamba_tensor *t = &pool->t[index];
  kvc_mamba_tensor_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = out->struct_size;
  d.version = KVC_VERSION_NUMBER;
  d.region = t->region;
  d.index = t->index;
  d.dtype = t->dtype;
  d.ndim = t->ndim;
  d.device = kvc_context_device(pool->ctx);
  d.data = t->base;
  int64_t stride = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    d.shape[i] = t->shape[i];
    d.strides[i] = stride;
    stride *= t->shape[i];
  }
  d.bytes_per_layer = t->layer_pitch;
  d.bytes_per_slot = t->row_bytes;
  d.total_bytes = t->layer_pitch * pool->L;
  d.sliceable_dim = t->shape[2];
  memcpy(out, &d, out->struct_size);
  return KVC_OK;
}

static kvc_status fill_buffer(const kvc_mamba_pool *pool, const char *fn, const mamba_tensor *t, int32_t l,
                              kvc_buffer_desc *out) {
  KVC_RETURN_IF(!out, pool->ctx, KVC_ERR_INVALID_ARGUMENT, "out is NULL");
  KVC_RETURN_IF(out->struct_size < offsetof(kvc_buffer_desc, reserved_) || out->struct_size > sizeof *out, pool->ctx,
                KVC_ERR_VERSION, "out->struct_size %zu not understood", out->struct_size);
  (void)fn;
  kvc_buffer_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = out->struct_size;
  d.version = KVC_VERSION_NUMBER;
  d.region = t->region;
  d.layer_id = pool->layer_ids[l];
  d.dtype = t->dtype;
  d.ndim = t->ndim - 1;
  d.device = kvc_context_device(pool->ctx);
  d.data = t->base + (size_t)l * (size_t)t->layer_pitch;
  int64_t stride = 1;
  for (int i = t->ndim - 1; i >= 1; i--) {
    d.shape[i - 1] = t->shape[i];
    d.strides[i - 1] = stride;
    stride *= t->shape[i];
  }
  d.bytes_per_token = t->row_bytes;
  d.bytes_per_page = t->row_bytes;
  d.total_bytes = t->layer_pitch;
  memcpy(out, &d, out->struct_size);
  return KVC_OK;
}

kvc_status kvc_mamba_pool_describe(const kvc_mamba_pool *pool, int32_t index, kvc_buffer_desc *out) {
  KVC_API_ENTRY();
  KVC__MAMBA_ENTRY(pool);
  KVC_RETURN_IF(index < 0 || index >= pool->nstate * pool->L, pool->ctx, KVC_ERR_INVALID_ARGUMENT,
                "index %d outside [0, %d)", index, pool->nstate * pool->L);
  return fill_buffer(pool, __func__, &pool->t[index / pool->L], index % pool->L, out);
}

kvc_status kvc_mamba_pool_buffer(const kvc_mamba_pool *pool, kvc_region_kind region, int32_t conv_index,
                                 int32_t layer_id, kvc_buffer_desc *out) {
  KVC_API_ENTRY();
  KVC__MAMBA_ENTRY(pool);
  int32_t l = 0;
  KVC_FORWARD(kvc_mamba_pool_layer_index(pool, layer_id, &l));
  int32_t ti;
  if (region == KVC_REGION_MAMBA_CONV) {
    KVC_RETURN_IF(conv_index < 0 || conv_index >= pool->num_conv, pool->ctx, KVC_ERR_INVALID_ARGUMENT,
                  "conv_index %d outside [0, %d)", conv_index, pool->num_conv);
    ti = conv_index;
  } else if (region == KVC_REGION_MAMBA_TEMPORAL) {
    ti = pool->num_conv;
  } else {
    return kvc__error(pool->ctx, KVC_ERR_INVALID_ARGUMENT, __func__,
                      "region %d has no per-layer state buffer (MAMBA_CONV or MAMBA_TEMPORAL)", (int)region);
  }
  return fill_buffer(pool, __func__, &pool->t[ti], l, out);
}

kvc_status kvc_mamba_pool_contiguous_infos(const kvc_mamba_pool *pool, kvc_contiguous_info *out, size_t cap,
                                           size_t *count) {
  KVC_API_ENTRY();
  KVC__MAMBA_ENTRY(pool);
  KVC_RETURN_IF(!count || (cap && !out), pool->ctx, KVC_ERR_INVALID_ARGUMENT, "count or out is NULL");
  size_t n = 0;
  for (int s = 0; s < pool->nstate; s++)
    for (int32_t l = 0; l < pool->L; l++, n++)
      if (n < cap) {
        out[n].base = pool->t[s].base + (size_t)l * (size_t)pool->t[s].layer_pitch;
        out[n].bytes = (size_t)pool->t[s].layer_pitch;
        out[n].bytes_per_page = (size_t)pool->t[s].row_bytes;
      }
  *count = n;
  return KVC_OK;
}

kvc_status kvc_mamba_pool_state_dims(const kvc_mamba_pool *pool, int64_t *out, size_t cap, size_t *count) {
  KVC_API_ENTRY();
  KVC__MAMBA_ENTRY(pool);
  KVC_RETURN_IF(!count || (cap && !out), pool->ctx, KVC_ERR_INVALID_ARGUMENT, "count or out is NULL");
  size_t n = 0;
  for (int s = 0; s < pool->nstate; s++)
    for (int32_t l = 0; l < pool->L; l++, n++)
      if (n < cap) out[n] = pool->t[s].shape[2];
  *count = n;
  return KVC_OK;
}

kvc_status kvc_mamba_pool_memory_bytes(const kvc_mamba_pool *pool, size_t *state_bytes, size_t *speculative_bytes) {
  KVC_API_ENTRY();
  KVC__MAMBA_ENTRY(pool);
  size_t a = 0, b = 0;
  for (int i = 0; i < pool->ntensors; i++) {
    size_t bytes = (size_t)pool->t[i].layer_pitch * (size_t)pool->L;
    if (i < pool->nstate) a += bytes;
    else b += bytes;
  }
  if (state_bytes) *state_bytes = a;
  if (speculative_bytes) *speculative_bytes = b;
  return KVC_OK;
}
