/* transfer_test_util.h — pools and layouts shared by the transfer tests. */
#ifndef KVC_TRANSFER_TEST_UTIL_H
#define KVC_TRANSFER_TEST_UTIL_H

#include "harness.h"

static inline kvc_kv_pool *kvt_xfer_pool(kvc_context *ctx, kvc_kv_pool_config c) {
  kvc_kv_pool *p = NULL;
  kvc_status st = kvc_kv_pool_create(ctx, &c, &p);
  if (st != KVC_OK) fail_msg("kvc_kv_pool_create -> %s: %s", kvc_status_name(st), kvc_last_error(ctx));
  return p;
}

/* A small Mamba pool: L layers, one conv state (4 x 3 bf16), temporal 2 x 4 x 3 f32. */
static inline kvc_mamba_pool *kvt_xfer_mamba(kvc_context *ctx, int32_t size, int32_t layers, kvc_dtype conv) {
  kvc_mamba_shape shape = {2, 0, {4, 3, 0}};
  kvc_mamba_pool_config c = KVC_MAMBA_POOL_CONFIG_INIT;
  c.size = size;
  c.num_layers = layers;
  c.num_conv = 1;
  c.conv_shapes = &shape;
  c.conv_dtype = conv;
  c.temporal_dtype = KVC_DTYPE_F32;
  c.temporal_shape[0] = 2;
  c.temporal_shape[1] = 4;
  c.temporal_shape[2] = 3;
  kvc_mamba_pool *p = NULL;
  kvc_status st = kvc_mamba_pool_create(ctx, &c, &p);
  if (st != KVC_OK) fail_msg("kvc_mamba_pool_create -> %s: %s", kvc_status_name(st), kvc_last_error(ctx));
  return p;
}

static inline kvc_transfer_layout *kvt_xfer_layout(kvc_kv_pool *pool, kvc_context *ctx) {
  kvc_transfer_layout *l = NULL;
  kvc_status st = kvc_transfer_layout_from_kv_pool(pool, &l);
  if (st != KVC_OK) fail_msg("layout_from_kv_pool -> %s: %s", kvc_status_name(st), kvc_last_error(ctx));
  return l;
}

#endif
