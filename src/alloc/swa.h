/*
 * swa.h — internal helpers shared by the SWA and hybrid pool files: the two kernels of
 * kernels/swa.cu and their launch wrappers.
 */
#ifndef KVC_SWA_INTERNAL_H
#define KVC_SWA_INTERNAL_H

#include "alloc.h"

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

/** kvc_swa_allocator_alloc_decode's host half for the decode channel (everything but the
 *  launch): the full side's plan goes into payload, 4 words per request (row, position,
 *  slot, the slot's SWA peer; 3 words in ring mode, which has no mapping), and the host
 *  mapping is updated. A failure returned changes nothing. On KVC_OK the step is the
 *  allocator's state and must be published; *audit is the check-mode audit's verdict
 *  on it, to report after publishing (so device and host never part). */
kvc_status kvc__swa_decode_publish(kvc_swa_allocator *a, const char *fn, size_t bs, const int64_t *seq_lens,
                                   const int64_t *last_locs, kvc_req_to_token_pool *rp, const int32_t *rows,
                                   uint32_t *payload, int64_t *out_host, kvc_status *audit);
/** kvc_swa_allocator_free for the flows: full slots of which some, with page size 1, have
 *  no SWA peer any more because window eviction released it (mapping 0); those release
 *  only their full side, in the same single transactional call (SGLang's caches split the
 *  row at swa_evicted_seqlen into free_full and free instead: two calls). Everything else,
 *  errors included, as kvc_swa_allocator_free. */
kvc_status kvc__swa_allocator_free_evicted(kvc_swa_allocator *a, const int64_t *slots, size_t n, kvc_stream stream);
/** What a decode channel over `a` needs: its full allocator and its device mapping (NULL
 *  in ring mode) with the entries the kernel may write. false: not a live SWA allocator
 *  with alloc_decode (pure mode has none). */
bool kvc__swa_channel_info(const kvc_swa_allocator *a, kvc_allocator **full, int64_t **dmap, int64_t *map_len);

#endif
