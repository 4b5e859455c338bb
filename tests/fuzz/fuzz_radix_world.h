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

/* --- The steps the harnesses share -------------------------------------------------------
 * Each reads its bytes in the order the harnesses did before it was shared, so the
 * committed corpora drive the same sequences. static inline: not every harness takes every
 * step (fuzz_radix.c decodes one token at a time), and -Wunused-function would refuse. */

/* The next step: its request and its op (of 10), a byte each. */
static inline ereq *fz_rx_step(fz *f, ereq *reqs, int *op) {
  ereq *e = &reqs[fz_u8(f) % NREQ];
  *op = fz_u8(f) % 10;
  return e;
}

/* Clears *e for a new request and writes its prompt: 1 + a byte % max_n tokens, the first
 * stem_len of them one stem byte & 3, each later one a byte & 3 (a tiny alphabet, so
 * prefixes repeat). Returns the prompt's length. */
static inline int64_t fz_rx_prompt(fz *f, ereq *e, int64_t max_n, int64_t stem_len) {
  memset(e, 0, sizeof *e);
  const int64_t n = 1 + fz_u8(f) % max_n;
  const uint8_t stem = fz_u8(f) & 3;
  for (int64_t i = 0; i < n; i++) e->toks[i] = i < stem_len ? stem : fz_u8(f) & 3;
  e->rr.tokens = e->toks;
  e->rr.num_tokens = e->rr.prompt_len = n;
  return n;
}

/* Decodes up to 1 + a byte % 8 tokens while e is live and short of MAXT; each decoded
 * token's id (a byte & 3) joins the key. */
static inline void fz_rx_decode_few(fz *f, kvc_flow *flow, ereq *e, int64_t *out) {
  kvc_req_state *one[] = {&e->st};
  const int k = 1 + fz_u8(f) % 8;
  for (int i = 0; i < k && e->live && e->st.seq_len < MAXT; i++)
    if (kvc_flow_alloc_for_decode(flow, one, 1, 1, out, NULL) == KVC_OK) e->toks[e->rr.num_tokens++] = fz_u8(f) & 3;
}

/* A release's bytes: 1 in 4 keeps e's node as a stale handle for later locks, then the
 * release inserts (4 in 5) or aborts. Returns kvc_flow_release's insert flag. */
static inline int fz_rx_release_inserts(fz *f, ereq *e, void *stale[8]) {
  if (e->st.cache_node && fz_u8(f) % 4 == 0) stale[fz_u8(f) & 7] = e->st.cache_node;
  return fz_u8(f) % 5 != 0;
}

/* A handle to lock or unlock: a stale, live or NULL one, or (1 in 3) garbage. */
static inline void *fz_rx_handle(fz *f, void *const stale[8]) {
  void *h = stale[fz_u8(f) & 7];
  if (fz_u8(f) % 3 == 0) h = (void *)(uintptr_t)fz_u32(f);
  return h;
}

#endif /* KVC_FUZZ_RADIX_WORLD_H */
