/*
 * tp.c — per-rank KV pool configs for tensor parallelism.
 *
 * Tensor-parallel ranks run one cache each and must make the same allocation decisions:
 * the allocators are deterministic functions of their calls, so identical configs (the
 * capacity in tokens is not split, only the bytes of a row) are all it takes. What
 * differs from the whole model is the MHA row: each rank stores its share of the KV
 * heads. MLA/NSA latent rows are not split by tensor parallelism (SGLang replicates the
 * latent cache on every rank).
 */
#include "../core/core.h"

kvc_status kvc_kv_pool_config_for_tp_rank(const kvc_kv_pool_config *model, int32_t tp_size, int32_t tp_rank,
                                          kvc_kv_pool_config *out) {
  KVC_RETURN_IF(!model || !out, NULL, KVC_ERR_INVALID_ARGUMENT, "model or out is NULL");
  KVC_RETURN_IF(model->struct_size != sizeof *model, NULL, KVC_ERR_INVALID_ARGUMENT,
                "model->struct_size %zu, expected %zu (fill it with KVC_KV_POOL_CONFIG_INIT)", model->struct_size,
                sizeof *model);
  KVC_RETURN_IF(tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size, NULL, KVC_ERR_INVALID_ARGUMENT,
                "tp_rank %d of tp_size %d", tp_rank, tp_size);
  kvc_kv_pool_config c = *model;
  if (c.kind == KVC_KV_MHA || c.kind == KVC_KV_MHA_NOOP || c.kind == KVC_KV_MHA_FP4) {
    KVC_RETURN_IF(c.head_num < 1, NULL, KVC_ERR_INVALID_ARGUMENT, "head_num %d < 1", c.head_num);
    if (c.head_num % tp_size == 0) {
      c.head_num /= tp_size;
    } else if (tp_size % c.head_num == 0) {
      c.head_num = 1; /* more ranks than KV heads: each head replicated on tp/heads ranks */
    } else {
      return kvc__error(NULL, KVC_ERR_INVALID_ARGUMENT, __func__,
                        "%d KV heads cannot be split over %d ranks (neither divides the other)", model->head_num,
                        tp_size);
    }
  }
  *out = c;
  return KVC_OK;
}
