/*
 * decode_channel_launch.c — launcher of kernels/alloc_channel.cu for the decode channel
 * (src/alloc/decode_channel.c): one block whose threads cover the channel's max_batch.
 */
#include "ops.h"

kvc_status kvc__decode_channel_kernel(kvc_context *ctx, const kvc__kfunc **out) {
  return kvc__kernel_get(ctx, &kvc__k_decode_channel, NULL, out);
}

kvc_status kvc__decode_channel_launch(kvc_context *ctx, const kvc__kfunc *kf, const kvc_p_decode_channel *p,
                                      kvc_stream stream) {
  const unsigned mb = (unsigned)p->max_batch;
  const unsigned threads = mb >= 1024 ? 1024 : (mb + 31) / 32 * 32;
  return kvc__kernel_launch(ctx, kf, kvc__dim(1, 1, 1), kvc__dim(threads, 1, 1), 0, stream, p, sizeof *p);
}
