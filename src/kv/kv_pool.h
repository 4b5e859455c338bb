/*
 * kv_pool.h — internal layout of a KV pool, shared by the files that implement its
 * operations (kv_pool.c: create/describe; kv_mha.c: set_kv/gather; kv_mla.c: MLA/NSA
 * latent rows; kv_nsa.c: NSA index keys; kv_move.c, kv_offload.c: whole-pool move and
 * host offload; kv_canary.c: canary rows; kv_dlpack.c: DLPack export) and by the SWA KV
 * pool, canary mode and the transfer layouts, which read a pool's buffers.
 *
 * One device allocation holds every buffer; each (region, layer) buffer is `rows` rows of
 * `row_bytes`, 256-byte aligned:
 *
 *   mem: [K l0][K l1]...[V l0][V l1]...[K_SCALE l0]...[V_SCALE ...][KV ...][KV_SCALE ...][INDEX_K ...]
 *
 * Buffers are stored in region-kind order, layers ascending — the describe() order.
 * INDEX_K buffers have rows = index pages and row_bytes = page_size * (128 + 4).
 */
#ifndef KVC_KV_POOL_H
#define KVC_KV_POOL_H

#include "../ops/ops.h"

#define KVC__KV_POOL_MAGIC 0x6b76632d6b76706full
#define KVC__REGION_KINDS 7

/* The kernel lookups a pool memoises (kvc_kv_pool.kfunc), by the file that owns them, so
 * the common launch of each operation does no hashing. The MLA and NSA launches look
 * their kernels up each time and have none. */
enum {
  KVC__KV_MEMO_SET_KV = 0,                                          /* kv_mha.c: per source dtype 1..5 */
  KVC__KV_MEMO_GATHER = KVC__KV_MEMO_SET_KV + 5,                    /* kv_mha.c: per output dtype 1..5 */
  KVC__KV_MEMO_MOVE = KVC__KV_MEMO_GATHER + 5,                      /* kv_move.c: per tile width, fused */
  KVC__KV_MEMO_OFFLOAD = KVC__KV_MEMO_MOVE + KVC__KV_MOVE_VARIANTS, /* kv_offload.c */
  KVC__KV_MEMO_CANARY_FILL,                                         /* kv_canary.c: the plan variants */
  KVC__KV_MEMO_CANARY_CHECK = KVC__KV_MEMO_CANARY_FILL + KVC__PLAN_INLINE_VARIANTS,
  KVC__KV_MEMO_COUNT = KVC__KV_MEMO_CANARY_CHECK + KVC__PLAN_INLINE_VARIANTS
};

typedef struct kvc__kv_buffer {
  kvc_region_kind region;
  int32_t layer;       /* local layer index */
  unsigned char *base; /* device address */
  int64_t rows;
  int64_t row_bytes;
  kvc_dtype dtype; /* element type reported in descriptors */
  int32_t ndim;
  int64_t shape[4]; /* elements; shape[0] == rows */
} kvc__kv_buffer;

struct kvc_kv_pool {
  uint64_t magic;
  kvc_context *ctx;
  kvc_kv_pool_config cfg; /* normalised copy (v_head_dim, index_head_dim, index_buf_size set) */
  int64_t rows;           /* size + page_size */
  void *mem;
  size_t mem_bytes;
  kvc__kv_buffer *buffers;
  int32_t num_buffers;
  int32_t first[KVC__REGION_KINDS]; /* index of the region's layer-0 buffer, -1 if none */
  /* Row geometry, bytes (0 when the kind has no such region). */
  int64_t k_row_bytes, v_row_bytes, k_scale_row_bytes, v_scale_row_bytes;
  int64_t kv_row_bytes, kv_scale_row_bytes, index_page_bytes, index_pages;
  kvc_dtype store_dtype;                       /* element type of K/V/KV storage (FP4: U8) */
  const kvc__kfunc *kfunc[KVC__KV_MEMO_COUNT]; /* by KVC__KV_MEMO_* */
  unsigned char *scratch;                      /* KVC__PARAM_SCRATCH_BYTES for parameter blocks */
  void *canary_result;                         /* kv_canary.c: device uint64[2], allocated at the first check */
};

/** The buffer of `region` for local layer `layer`, or NULL. */
static inline const kvc__kv_buffer *kvc__kv_buffer_at(const kvc_kv_pool *pool, kvc_region_kind region, int32_t layer) {
  if ((int)region < 0 || (int)region >= KVC__REGION_KINDS || pool->first[region] < 0) return NULL;
  if (layer < 0 || layer >= pool->cfg.layer_num) return NULL;
  return &pool->buffers[pool->first[region] + layer];
}

/** Validates the pool handle and turns a global layer id into a local index. */
kvc_status kvc__kv_pool_layer(const kvc_kv_pool *pool, const char *func, int32_t layer_id, int32_t *local);

/** Validates a pool handle (non-NULL, magic). */
kvc_status kvc__kv_pool_check(const kvc_kv_pool *pool, const char *func);

static inline bool kvc__is_fp8(kvc_dtype d) { return d == KVC_DTYPE_FP8_E4M3 || d == KVC_DTYPE_FP8_E5M2; }
static inline bool kvc__is_float_src(kvc_dtype d) {
  return d == KVC_DTYPE_F32 || d == KVC_DTYPE_F16 || d == KVC_DTYPE_BF16;
}

#endif
