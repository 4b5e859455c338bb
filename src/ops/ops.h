/*
 * ops.h — level 1: every kernel definition and every kernel launcher. Nothing above
 * src/ops launches a kernel by itself: the pools, allocators and flows fill a parameter
 * struct (kernels/kvc_abi.h) or pass raw device pointers, and call a launcher here. The
 * launchers choose the variant, the grid and the memoised kernel, and go through the
 * device seam, which runs the CUDA kernel or its host twin; nothing here knows which.
 * This header includes no pool header: ops sit below the pools.
 *
 *   req_to_token.c  alloc_fill.c   level-1 table and allocation ops (kvcache.h)
 *   plan.c                         planned launches: header + uint32 payload, inline or staged
 *   kv_store.c                     the KV row kernel (pools' set/gather, kvc_store_kv)
 *   mla.c  nsa_index.c             MLA latent rows (pools and level 1), NSA index-K pages
 *   kv_segments.c                  whole-pool move and host offload
 *   swa_map.c                      SWA mapping writes and gathers, kvc_swa_translate
 *   decode_channel_launch.c        the decode channel's fixed-parameter kernel
 *   kernels.c                      the kernel table; compile_check.c, abi_check.c
 */
#ifndef KVC_OPS_H
#define KVC_OPS_H

#include "../device/device.h"
#include "kvc_abi.h"

/* The kernel table (kernels.c). */
extern const kvc__kernel_def kvc__k_get_last_loc[8]; /* by index-type pair, then n == 1 */
extern const kvc__kernel_def kvc__k_write_req_to_token;
extern const kvc__kernel_def kvc__k_row_write;
extern const kvc__kernel_def kvc__k_extend_fill;
extern const kvc__kernel_def kvc__k_decode_fill;
extern const kvc__kernel_def kvc__k_plan_extend;
extern const kvc__kernel_def kvc__k_plan_decode;
extern const kvc__kernel_def kvc__k_decode_channel;
extern const kvc__kernel_def kvc__k_kv_rows;
extern const kvc__kernel_def kvc__k_kv_move;
extern const kvc__kernel_def kvc__k_kv_offload;
extern const kvc__kernel_def kvc__k_mla_set;
extern const kvc__kernel_def kvc__k_mla_get;
extern const kvc__kernel_def kvc__k_nsa_index_set;
extern const kvc__kernel_def kvc__k_nsa_index_get;
extern const kvc__kernel_def kvc__k_mamba_rows;
extern const kvc__kernel_def kvc__k_mamba_copy_staged;
extern const kvc__kernel_def kvc__k_swa_map_write;
extern const kvc__kernel_def kvc__k_swa_gather;
extern const kvc__kernel_def kvc__k_canary_fill;
extern const kvc__kernel_def kvc__k_canary_check;
/* All of them, in the order above. */
extern const kvc__kernel_def *const kvc__kernel_table[];
extern const size_t kvc__kernel_table_len;

#define KVC__ADDR(p) ((uint64_t)(uintptr_t)(p))

/* --- Planned launches: a header struct followed by a uint32 payload ----------------- */

/* Scratch an object owns for building inline parameter blocks (one per writer). */
#define KVC__PARAM_SCRATCH_BYTES 32768
/* Plan variants: 0..3 inline (KVC_INLINE_SMALL / _MEDIUM / _WIDE / _LARGE words), then
 * staged. A kernel cache (kcache) for plan launches has KVC__PLAN_INLINE_VARIANTS entries. */
#define KVC__PLAN_INLINE_VARIANTS 4
#define KVC__PLAN_STAGED KVC__PLAN_INLINE_VARIANTS

typedef struct kvc__plan {
  unsigned char *scratch; /* object-owned, KVC__PARAM_SCRATCH_BYTES, 8-aligned */
  size_t header_bytes;
  size_t words;
  int variant;         /* 0 small, 1 medium, 2 wide, 3 large inline; KVC__PLAN_STAGED */
  uint32_t *payload;   /* where the caller writes the payload */
  uint64_t staged_dev; /* device address of the payload when staged, else 0 */
  bool mapped;         /* staged and read in place from pinned memory: no upload */
} kvc__plan;

/** Chooses inline (small/large) or staged for `words` payload words after a header of
 *  `header_bytes` (a multiple of 8) and returns where to write the payload. When staged,
 *  the context's staging lock is held until kvc__plan_launch or kvc__plan_cancel. */
kvc_status kvc__plan_begin(kvc_context *ctx, kvc__plan *plan, unsigned char *scratch, size_t header_bytes,
                           size_t words);
/** kvc__plan_begin for a kernel that reads each payload word about once (a few threads of
 *  one warp at most): a staged payload is then read by the kernel in place, from the
 *  pinned ring over the bus, instead of being copied to device memory first, which saves
 *  the copy's driver call (KVC_STAGING_MAPPED=0 keeps the copy). */
kvc_status kvc__plan_begin_mapped(kvc_context *ctx, kvc__plan *plan, unsigned char *scratch, size_t header_bytes,
                                  size_t words);
/** Copies `header` (its `staged` field already set from plan->staged_dev) in front of the
 *  payload and launches `def` with the variant's spec (plus extra defines), then fences
 *  the staging region. `kcache` (3 entries per extra-spec value, may be NULL) memoises
 *  the kernel lookups. */
kvc_status kvc__plan_launch(kvc_context *ctx, kvc__plan *plan, const kvc__kernel_def *def, const kvc__spec *extra,
                            const kvc__kfunc **kcache, kvc__dim3 grid, kvc__dim3 block, kvc_stream stream,
                            const void *header);
/** kvc__plan_launch with `smem_bytes` of dynamic shared memory. */
kvc_status kvc__plan_launch_smem(kvc_context *ctx, kvc__plan *plan, const kvc__kernel_def *def, const kvc__spec *extra,
                                 const kvc__kfunc **kcache, kvc__dim3 grid, kvc__dim3 block, unsigned smem_bytes,
                                 kvc_stream stream, const void *header);
void kvc__plan_cancel(kvc_context *ctx, kvc__plan *plan);

/** The kernel of inline variant `variant` (0 small .. 3 large; staged plans use 0) for `def`
 *  with `extra` defines. */
kvc_status kvc__plan_kernel(kvc_context *ctx, const kvc__kernel_def *def, const kvc__spec *extra, int variant,
                            const kvc__kfunc **out);
/** Resolves every inline variant into kcache[0..3] (entries already set are kept), so a
 *  hot path never hashes or compiles. */
kvc_status kvc__plan_prefetch(kvc_context *ctx, const kvc__kernel_def *def, const kvc__spec *extra,
                              const kvc__kfunc **kcache);

/* --- KV rows (kv_store.c, kernels/kv_store.cu) -------------------------------------- */

/* Element codes of kv_store.cu: 0 raw bytes, kvc_dtype 1..5, 10 packed FP4. */
#define KVC__DT_RAW 0
#define KVC__DT_FP4 10

/* A row-kernel request: `p` holds addresses/strides (bytes); the rest picks the variant. */
typedef struct kvc__kv_rows_req {
  kvc_p_kv_rows p;
  int gather;
  int src_dt, dst_dt;       /* element codes */
  int64_t k_elems, v_elems; /* elements per K / V row (raw: bytes); v_elems 0 = no V */
} kvc__kv_rows_req;

/** Launches kvc_kv_rows for `req` (n = req->p.n > 0): the level-1 kvc_store_kv and the
 *  pools' set_kv / gather_kv. `memo` (may be NULL) caches the kernel of the variant whose
 *  dense side is fully aligned — the variant a pool uses on every call — so the common
 *  path does no hashing. */
kvc_status kvc__kv_rows_launch(kvc_context *ctx, const char *fn, kvc__kv_rows_req *req, const kvc__kfunc **memo,
                               kvc_stream stream);

/** Largest power of two <= 16 dividing every non-zero value (16 when all are zero). */
static inline int kvc__align16(const uint64_t *v, int count) {
  uint64_t acc = 16;
  for (int i = 0; i < count; i++) acc |= v[i];
  return (int)(acc & (~acc + 1));
}

/* --- MLA latent rows (mla.c, kernels/mla.cu) ---------------------------------------- */

/** A validated-on-use description of one MLA launch (either direction), shared by the
 *  level-1 ops (kvc_set_mla_kv, kvc_get_mla_kv) and the KV pools (set_mla_kv / get_mla_kv). */
/* What every MLA entry point takes from its caller unchanged: the direction, the slots,
 * the value buffers and their strides. One struct for the level-1 ops and the pools, so
 * they cannot drift apart in what reaches the kernel. */
typedef struct kvc__mla_values {
  int get; /* 0: set (values -> rows), 1: get (rows -> values) */
  const void *loc;
  kvc_index_type loc_type;
  size_t n;
  const void *nope, *rope;          /* set: sources; get: outputs, written by the kernel
                                       (either may be NULL) */
  kvc_dtype val_dtype;              /* dtype of nope/rope */
  int64_t nope_stride, rope_stride; /* elements of val_dtype; 0 = dense */
} kvc__mla_values;

typedef struct kvc__mla_args {
  kvc_mla_format format;
  void *data, *scale; /* rows; FP4 scale rows */
  int64_t num_rows;
  int64_t row_stride;   /* 0 = dense; ROWS: elements of row_dtype; FP4/NSA: bytes */
  int64_t scale_stride; /* FP4, bytes; 0 = dense */
  kvc_dtype row_dtype;  /* ROWS only */
  int32_t R, Q;
  kvc__mla_values v; /* the caller's */
} kvc__mla_args;

/** Validates `a` (errors name `fn`) and launches one kernel on `stream` (none for n == 0). */
kvc_status kvc__mla_run(kvc_context *ctx, const char *fn, const kvc__mla_args *a, kvc_stream stream);

/* --- NSA index-K pages (nsa_index.c, kernels/nsa_index.cu) -------------------------- */

/** Launches kvc_nsa_index_set for `p` (n > 0; every field but `vec` set; pages of
 *  `page_bytes`): picks the widest key access every address allows. */
kvc_status kvc__nsa_index_set_launch(kvc_context *ctx, kvc_p_nsa_index_set *p, int64_t page_bytes, kvc_stream stream);
/** Launches kvc_nsa_index_get for `p` (every field but `vec` set), likewise. */
kvc_status kvc__nsa_index_get_launch(kvc_context *ctx, kvc_p_nsa_index_get *p, int64_t page_bytes, kvc_stream stream);

/* --- Whole-pool segment kernels (kv_segments.c) ------------------------------------- */

/* Tile widths of kernels/kv_move.cu (16, 32, ..., 512), each compiled plain and with the
 * fused store-and-load (KVC_MOVE_FUSE): one memoised kernel per pair. */
#define KVC__KV_MOVE_WIDTHS 6
#define KVC__KV_MOVE_VARIANTS (2 * KVC__KV_MOVE_WIDTHS)

/** Launches kvc_kv_move for `p` (segments, nseg, tgt, src, n, loc_i64 and the chunk set):
 *  picks the tile width and pipeline depth from the device's shared memory, sets the
 *  tiles, CTA ranges and stages, and runs the persistent grid. `memo` caches one kernel
 *  per (tile width, fused or not). Errors name `fn`. */
kvc_status kvc__kv_move_launch(kvc_context *ctx, const char *fn, kvc_p_kv_move *p,
                               const kvc__kfunc *memo[KVC__KV_MOVE_VARIANTS], kvc_stream stream);
/** Launches kvc_kv_offload for a fully built `p`; `*memo` caches the kernel. */
kvc_status kvc__kv_offload_launch(kvc_context *ctx, const kvc_p_kv_offload *p, const kvc__kfunc **memo,
                                  kvc_stream stream);

/** Writes n host slots (int32) into table[offset ...] with one launch: the row write used
 *  by kvc_req_to_token_pool_write. */
kvc_status kvc__row_write(kvc_context *ctx, unsigned char *scratch, const kvc__kfunc **kcache, int32_t *table,
                          int64_t offset, const int32_t *slots, size_t n, kvc_stream stream);

static inline kvc__dim3 kvc__dim(unsigned x, unsigned y, unsigned z) {
  kvc__dim3 d = {x, y, z};
  return d;
}

/* --- Slot-allocation launchers (swa_map.c, decode_channel_launch.c) ------------------ */

extern const kvc__kernel_def kvc__k_swa_map_write;
extern const kvc__kernel_def kvc__k_swa_gather;

/* Where kvc__swa_map_write writes: a device mapping or index vector (int32 or int64,
 * len entries) and the writing object's launch memory (scratch and memoised kernels). */
typedef struct kvc__swa_map_dst {
  unsigned char *scratch;    /* the writer's KVC__PARAM_SCRATCH_BYTES */
  const kvc__kfunc **kcache; /* 3 entries owned by the writer */
  void *dst;
  int64_t len;
  int i64;
} kvc__swa_map_dst;

/* One write's payload: `count` items of `mode` (KVC_SWA_MAP_*) in `nwords` words, after
 * zero_count ZERO runs (idx, len) at `zero` (the SWA allocator's queued zeroes merged into
 * this launch; they must not overlap the items' entries: no order holds between them). */
typedef struct kvc__swa_map_items {
  const uint32_t *words;
  size_t nwords;
  int64_t count;
  int mode;
  const uint32_t *zero;
  size_t zero_count;
} kvc__swa_map_items;

/** One planned launch of kvc_swa_map_write applying `items` to `d`. count == 0: no
 *  launch. */
kvc_status kvc__swa_map_write(kvc_context *ctx, const kvc__swa_map_dst *d, const kvc__swa_map_items *items,
                              kvc_stream stream);

/** Builds the payload for dst[idx[i]] = val[i] (i < n) in `words` (capacity >= 3n words),
 *  choosing coalesced RUNS when smaller than PAIRS, and returns it as items over `words`.
 *  idx == NULL means idx[i] = i. */
kvc__swa_map_items kvc__swa_build_pairs(const int64_t *idx, const int64_t *val, size_t n, uint32_t *words);

/* One gather out[i] = map[in[i]], i < n; an in[i] outside [0, map_len) gives oob. Each
 * vector is int32 or, where its *_i64 is set, int64. */
typedef struct kvc__swa_gather_args {
  const void *map;
  int64_t map_len;
  const void *in;
  void *out;
  size_t n;
  int64_t oob;
  int map_i64, in_i64, out_i64;
} kvc__swa_gather_args;

/** The gather of kvc_swa_translate: n locs (int32 or int64) through an int64 full->SWA
 *  mapping of map_len entries into out (int32 or int64), -1 where a loc is outside it. */
static inline kvc__swa_gather_args kvc__swa_translate_args(const int64_t *map, int64_t map_len, const void *loc,
                                                           kvc_index_type loc_type, void *out, kvc_index_type out_type,
                                                           size_t n) {
  const kvc__swa_gather_args g = {.map = map,
                                  .map_len = map_len,
                                  .in = loc,
                                  .out = out,
                                  .n = n,
                                  .oob = -1,
                                  .map_i64 = 1,
                                  .in_i64 = loc_type == KVC_INDEX_I64,
                                  .out_i64 = out_type == KVC_INDEX_I64};
  return g;
}

/** One launch of kvc_swa_gather for `g` (n == 0: none); `*kf` memoises the kernel. */
kvc_status kvc__swa_gather(kvc_context *ctx, const kvc__kfunc **kf, const kvc__swa_gather_args *g, kvc_stream stream);

/** The decode channel's kernel, resolved at create (enqueue may run during stream
 *  capture, where compiling or loading a module is not allowed). */
kvc_status kvc__decode_channel_kernel(kvc_context *ctx, const kvc__kfunc **out);
/** One launch of the decode channel's kernel with its fixed parameters. */
kvc_status kvc__decode_channel_launch(kvc_context *ctx, const kvc__kfunc *kf, const kvc_p_decode_channel *p,
                                      kvc_stream stream);

#endif
