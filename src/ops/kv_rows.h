/*
 * kv_rows.h — internal helpers shared by the KV row operations: the level-1 kvc_store_kv
 * (src/ops/kv_store.c) and the pool operations (src/kv/kv_mha.c, kv_move.c,
 * kv_offload.c). Owned by the KV-rows/move/offload code; the MLA code has its own.
 */
#ifndef KVC_KV_ROWS_H
#define KVC_KV_ROWS_H

#include "ops.h"

extern const kvc__kernel_def kvc__k_kv_rows;
extern const kvc__kernel_def kvc__k_kv_move;
extern const kvc__kernel_def kvc__k_kv_offload;

/* Element codes of kv_store.cu: 0 raw bytes, kvc_dtype 1..5, 10 packed FP4. */
#define KVC__DT_RAW 0
#define KVC__DT_FP4 10

/* A row-kernel request: `p` holds addresses/strides (bytes); the rest picks the variant. */
typedef struct kvc__kv_rows_req {
  kvc_p_kv_rows p;
  int gather;
  int src_dt, dst_dt;        /* element codes */
  int64_t k_elems, v_elems;  /* elements per K / V row (raw: bytes); v_elems 0 = no V */
} kvc__kv_rows_req;

/** Launches kvc_kv_rows for `req` (n = req->p.n > 0). `memo` (may be NULL) caches the
 *  kernel of the variant whose dense side is fully aligned — the variant a pool uses on
 *  every call — so the common path does no hashing. */
kvc_status kvc__kv_rows_launch(kvc_context *ctx, const char *fn, kvc__kv_rows_req *req, const kvc__kfunc **memo,
                               kvc_stream stream);

/** Largest power of two <= 16 dividing every non-zero value (16 when all are zero). */
static inline int kvc__align16(const uint64_t *v, int count) {
  uint64_t acc = 16;
  for (int i = 0; i < count; i++) acc |= v[i];
  return (int)(acc & (~acc + 1));
}

#define KVC__ADDR(p) ((uint64_t)(uintptr_t)(p))

#endif
