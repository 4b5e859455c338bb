/*
 * swa.h — internal helpers shared by the SWA and hybrid pool files: the two kernels of
 * kernels/swa.cu and their launch wrappers.
 */
#ifndef KVC_SWA_INTERNAL_H
#define KVC_SWA_INTERNAL_H

#include "pool.h"

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

/** One launch of kvc_swa_gather. */
kvc_status kvc__swa_gather(kvc_context *ctx, const kvc__kfunc **kf, const void *map, int map_i64, int64_t map_len,
                           const void *in, int in_i64, void *out, int out_i64, int64_t oob, size_t n,
                           kvc_stream stream);

#endif
