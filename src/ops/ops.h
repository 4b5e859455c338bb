/*
 * ops.h — level 1: the kernel definitions and the launch helpers the pools build on.
 */
#ifndef KVC_OPS_H
#define KVC_OPS_H

#include "../device/device.h"
#include "kvc_abi.h"

extern const kvc__kernel_def kvc__k_get_last_loc;
extern const kvc__kernel_def kvc__k_write_req_to_token;
extern const kvc__kernel_def kvc__k_row_write;
extern const kvc__kernel_def kvc__k_extend_fill;
extern const kvc__kernel_def kvc__k_decode_fill;
extern const kvc__kernel_def kvc__k_plan_extend;
extern const kvc__kernel_def kvc__k_plan_decode;
extern const kvc__kernel_def kvc__k_decode_channel;

/* --- Planned launches: a header struct followed by a uint32 payload ----------------- */

/* Scratch an object owns for building inline parameter blocks (one per writer). */
#define KVC__PARAM_SCRATCH_BYTES 32768
/* Plan variants: 0..2 inline (KVC_INLINE_SMALL / _MEDIUM / _LARGE words), 3 staged. A
 * kernel cache (kcache) for plan launches has KVC__PLAN_INLINE_VARIANTS entries. */
#define KVC__PLAN_INLINE_VARIANTS 3
#define KVC__PLAN_STAGED 3

typedef struct kvc__plan {
  unsigned char *scratch; /* object-owned, KVC__PARAM_SCRATCH_BYTES, 8-aligned */
  size_t header_bytes;
  size_t words;
  int variant;          /* 0 small, 1 medium, 2 large inline; KVC__PLAN_STAGED */
  uint32_t *payload;    /* where the caller writes the payload */
  uint64_t staged_dev;  /* device address of the payload when staged, else 0 */
} kvc__plan;

/** Chooses inline (small/large) or staged for `words` payload words after a header of
 *  `header_bytes` (a multiple of 8) and returns where to write the payload. When staged,
 *  the context's staging lock is held until kvc__plan_launch or kvc__plan_cancel. */
kvc_status kvc__plan_begin(kvc_context *ctx, kvc__plan *plan, unsigned char *scratch,
                           size_t header_bytes, size_t words);
/** Copies `header` (its `staged` field already set from plan->staged_dev) in front of the
 *  payload and launches `def` with the variant's spec (plus extra defines), then fences
 *  the staging region. `kcache` (3 entries per extra-spec value, may be NULL) memoises
 *  the kernel lookups. */
kvc_status kvc__plan_launch(kvc_context *ctx, kvc__plan *plan, const kvc__kernel_def *def,
                            const kvc__spec *extra, const kvc__kfunc **kcache, kvc__dim3 grid,
                            kvc__dim3 block, kvc_stream stream, const void *header);
/** kvc__plan_launch with `smem_bytes` of dynamic shared memory. */
kvc_status kvc__plan_launch_smem(kvc_context *ctx, kvc__plan *plan, const kvc__kernel_def *def,
                                 const kvc__spec *extra, const kvc__kfunc **kcache, kvc__dim3 grid,
                                 kvc__dim3 block, unsigned smem_bytes, kvc_stream stream, const void *header);
void kvc__plan_cancel(kvc_context *ctx, kvc__plan *plan);

/** The kernel of inline variant `variant` (0 small, 1 medium, 2 large; staged plans use 0) for `def`
 *  with `extra` defines. */
kvc_status kvc__plan_kernel(kvc_context *ctx, const kvc__kernel_def *def, const kvc__spec *extra, int variant,
                            const kvc__kfunc **out);
/** Resolves every inline variant into kcache[0..2] (entries already set are kept), so a
 *  hot path never hashes or compiles. */
kvc_status kvc__plan_prefetch(kvc_context *ctx, const kvc__kernel_def *def, const kvc__spec *extra,
                              const kvc__kfunc **kcache);

/** Writes n host slots (int32) into table[offset ...] with one launch: the row write used
 *  by kvc_req_to_token_pool_write. */
kvc_status kvc__row_write(kvc_context *ctx, unsigned char *scratch, const kvc__kfunc **kcache,
                          int32_t *table, int64_t offset, const int32_t *slots, size_t n,
                          kvc_stream stream);

static inline kvc__dim3 kvc__dim(unsigned x, unsigned y, unsigned z) {
  kvc__dim3 d = {x, y, z};
  return d;
}

/* --- Slot-allocation launchers (swa_map.c, decode_channel_launch.c) ------------------ */

extern const kvc__kernel_def kvc__k_swa_map_write;
extern const kvc__kernel_def kvc__k_swa_gather;

/** One planned launch of kvc_swa_map_write: `count` items of `mode` (KVC_SWA_MAP_*),
 *  `nwords` payload words, into dst (int32 or int64, dst_len entries). kcache: 3 entries
 *  owned by the caller's object. count == 0: no launch. */
kvc_status kvc__swa_map_write(kvc_context *ctx, unsigned char *scratch, const kvc__kfunc **kcache, void *dst,
                              int dst_i64, int64_t dst_len, int mode, int64_t count, const uint32_t *words,
                              size_t nwords, kvc_stream stream);

/** Builds the payload for dst[idx[i]] = val[i] (i < n) in `words` (capacity >= 3n words),
 *  choosing coalesced RUNS when smaller than PAIRS. Returns the item count; *mode and
 *  *nwords are set. idx == NULL means idx[i] = i. */
int64_t kvc__swa_build_pairs(const int64_t *idx, const int64_t *val, size_t n, uint32_t *words, int *mode,
                             size_t *nwords);

/** One launch of kvc_swa_gather: out[i] = map[in[i]] (oob outside [0, map_len)). */
kvc_status kvc__swa_gather(kvc_context *ctx, const kvc__kfunc **kf, const void *map, int map_i64, int64_t map_len,
                           const void *in, int in_i64, void *out, int out_i64, int64_t oob, size_t n,
                           kvc_stream stream);

/** The decode channel's kernel, resolved at create (enqueue may run during stream
 *  capture, where compiling or loading a module is not allowed). */
kvc_status kvc__decode_channel_kernel(kvc_context *ctx, const kvc__kfunc **out);
/** One launch of the decode channel's kernel with its fixed parameters. */
kvc_status kvc__decode_channel_launch(kvc_context *ctx, const kvc__kfunc *kf, const kvc_p_decode_channel *p,
                                      kvc_stream stream);

#endif
