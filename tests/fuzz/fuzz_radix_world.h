/*
 * fuzz_radix_world.h — the world the radix-cache harnesses share (fuzz_radix.c,
 * fuzz_swa_radix.c, fuzz_mamba_radix.c): NREQ requests,
 * each a kvc_req_state with the kvc_radix_req its cache reads through req_of() and the
 * tokens the bytes write; the req-to-token pool they take rows from; the flow over the
 * harness's allocator and prefix cache; the live set the flow's audit is given.
 *
 * Define NREQ (requests) and MAXT (tokens a request may reach) before including it.
 */
#ifndef KVC_FUZZ_RADIX_WORLD_H
#define KVC_FUZZ_RADIX_WORLD_H

#include "fuzz_common.h"

#if !defined(NREQ) || !defined(MAXT)
#  error "define NREQ and MAXT before including fuzz_radix_world.h"
#endif

typedef struct ereq {
  kvc_req_state st;
  kvc_radix_req rr;
  int32_t toks[MAXT + 8];
  int live;
} ereq;

/* The cache's view of a request: the kvc_req_state is the first member of its ereq. */
static kvc_radix_req *req_of(void *user, const kvc_req_state *r) {
  (void)user;
  return &((ereq *)(uintptr_t)r)->rr;
}

/* The states of the live requests, for kvc_flow_check; returns how many. */
static size_t fz_rx_live(ereq *reqs, kvc_req_state *live[NREQ]) {
  size_t n = 0;
  for (int i = 0; i < NREQ; i++)
    if (reqs[i].live) live[n++] = &reqs[i].st;
  return n;
}

/* A req pool with a row for every request (and two spare), rows of MAXT + 32. */
static kvc_req_to_token_pool *fz_rx_req_pool(kvc_context *ctx) {
  kvc_req_to_token_pool_config qc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  qc.size = NREQ + 2;
  qc.max_context_len = MAXT + 32;
  kvc_req_to_token_pool *pool;
  if (kvc_req_to_token_pool_create(ctx, &qc, &pool) != KVC_OK) abort();
  return pool;
}

/* The flow of `fc` (its allocator, window and page size set by the harness) over `pool`
 * and `cache`. */
static kvc_flow *fz_rx_flow(kvc_context *ctx, kvc_flow_config fc, kvc_req_to_token_pool *pool, kvc_prefix_cache cache) {
  fc.req_pool = pool;
  fc.cache = cache;
  kvc_flow *flow;
  if (kvc_flow_create(ctx, &fc, &flow) != KVC_OK) abort();
  return flow;
}

#endif /* KVC_FUZZ_RADIX_WORLD_H */
