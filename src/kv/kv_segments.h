/*
 * kv_segments.h — a KV pool described as segments (kvc_kv_seg, kernels/kvc_abi.h) for
 * the whole-pool kernels: move (kv_move.c) and host offload (kv_offload.c).
 *
 * One segment per region kind across all layers (buffers of one region are equally
 * spaced in the pool's allocation, see kv_pool.h). NSA INDEX_K pages become two
 * segments for move (the 128 key bytes and the 4 scale bytes of a token slot within its
 * page) and one page-row segment for offload.
 */
#ifndef KVC_KV_SEGMENTS_H
#define KVC_KV_SEGMENTS_H

#include "kv_pool.h"

/** Fills segs (KVC_MAX_SEGS) and returns their count, or -1 (error recorded) if the
 *  pool's layout is not a set of equally spaced buffers. by_page selects the offload
 *  form of INDEX_K. */
int kvc__kv_pool_segments(const kvc_kv_pool *pool, const char *fn, bool by_page, kvc_kv_seg *segs);

#endif
