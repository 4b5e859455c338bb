/*
 * mla.h — the MLA row writer/reader shared by the level-1 ops (kvc_set_mla_kv,
 * kvc_get_mla_kv) and the KV pools (kvc_kv_pool_set_mla_kv / get_mla_kv), and the NSA
 * index-K launchers used by src/kv/kv_nsa.c.
 */
#ifndef KVC_OPS_MLA_H
#define KVC_OPS_MLA_H

#include "ops.h"

extern const kvc__kernel_def kvc__k_mla_set;
extern const kvc__kernel_def kvc__k_mla_get;
extern const kvc__kernel_def kvc__k_nsa_index_set;
extern const kvc__kernel_def kvc__k_nsa_index_get;

/** A validated-on-use description of one MLA launch (either direction). */
typedef struct kvc__mla_args {
  int get;                  /* 0: set (values -> rows), 1: get (rows -> values) */
  kvc_mla_format format;
  void *data, *scale;       /* rows; FP4 scale rows */
  int64_t num_rows;
  int64_t row_stride;       /* 0 = dense; ROWS: elements of row_dtype; FP4/NSA: bytes */
  int64_t scale_stride;     /* FP4, bytes; 0 = dense */
  kvc_dtype row_dtype;      /* ROWS only */
  int32_t R, Q;
  const void *loc;
  kvc_index_type loc_type;
  size_t n;
  void *nope, *rope;        /* set: sources; get: outputs (either may be NULL) */
  kvc_dtype val_dtype;      /* dtype of nope/rope */
  int64_t nope_stride, rope_stride; /* elements of val_dtype; 0 = dense */
} kvc__mla_args;

/** Fills the fields of `a` that every MLA entry point takes from its caller unchanged (the
 *  direction, the slots, the value buffers and their strides), so the level-1 ops and the
 *  pools cannot drift apart in what reaches the kernel. `nope`/`rope` are const because a
 *  set only reads them; a get (get = 1) writes through them. */
void kvc__mla_args_values(kvc__mla_args *a, int get, const void *loc, kvc_index_type loc_type, size_t n,
                          const void *nope, const void *rope, kvc_dtype val_dtype, int64_t nope_stride,
                          int64_t rope_stride);

/** Validates `a` (errors name `fn`) and launches one kernel on `stream` (none for n == 0). */
kvc_status kvc__mla_run(kvc_context *ctx, const char *fn, const kvc__mla_args *a, kvc_stream stream);

#endif
