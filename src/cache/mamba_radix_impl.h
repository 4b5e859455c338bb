/*
 * mamba_radix_impl.h — the Mamba radix cache's object, shared by mamba_radix.c (the
 * component's rules: states on nodes, locks, eviction, match, insert, checkpoints) and
 * mamba_radix_state.c (reset, sizes, the audit and the kvc_prefix_cache adapter).
 */
#ifndef KVC_MAMBA_RADIX_IMPL_H
#define KVC_MAMBA_RADIX_IMPL_H

#include "radix.h"

#define KVC__MAMBA_RADIX_MAGIC 0x6b76632d6d616d78ull /* "kvc-mamx" */

struct kvc_mamba_radix_cache {
  uint64_t magic;
  kvc_context *ctx;
  kvc_radix_cache *rc; /* the tree and its FULL component */
  kvc_hybrid_req_pool *hybrid;
  kvc_mamba_pool *pool;
  int32_t size; /* Mamba pool slots */
  bool track;   /* the hybrid pool has ping-pong track buffers */
  int32_t pp;
  int32_t cap; /* max_states_per_path, 0 = none */
  /* per slot [0, size]: owning node (0 = not the tree's), LRU links (0 = end) */
  int32_t *owner, *prev, *next;
  int32_t *capbuf;    /* [size + 1]: the nodes max_states_per_path takes states from */
  int32_t head, tail; /* most / least recently used state */
  int64_t states, protected_states;
  kvc_status hook_st; /* a Mamba pool free refused inside the delete hook */
};

#define MAMBA_RADIX_ENTRY(c) KVC_CHECK_HANDLE(c, KVC__MAMBA_RADIX_MAGIC, "cache", "kvc_mamba_radix_cache")

#endif
