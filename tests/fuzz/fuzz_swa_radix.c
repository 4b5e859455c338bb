/*
 * fuzz_swa_radix.c — libFuzzer harness: the bytes drive a scheduler over a flow with an
 * SWA allocator (page size 1/2/4, window 4..32) whose prefix cache is the SWA radix
 * cache: requests matched and admitted (FULL + SWA locks), extends, decodes (window
 * eviction frees SWA pages behind them), early SWA releases, chunk checkpoints
 * (cache_unfinished_req, reviving tombstones), releases (insert with tombstones and
 * revival, or abort), evictions of either component, locks and unlocks of real, stale
 * and garbage handles and receipts, matches. Every status must be a known one, and after
 * every step both components' audit, the SWA allocator's and the flow's conservation check
 * pass; at the end, with everything released and evicted, every slot of both sides is
 * free. The first byte also picks the allocator kind and the cache's with it: pool mode
 * (HYBRID), KVC_SWA_PURE (PURE, page size 1) or ring mode (RING); requests get a random
 * swa_evict_floor.
 */
#define NREQ 6
#define MAXT 192
#include "fuzz_radix_world.h"

static kvc_context *g_ctx;
static int64_t *g_out;

static void check_all(kvc_flow *flow, kvc_swa_radix_cache *c, kvc_swa_allocator *a, ereq *reqs) {
  kvc_req_state *live[NREQ];
  const size_t n = fz_rx_live(reqs, live);
  FZ_AUDIT(kvc_swa_radix_cache_check(c));
  FZ_AUDIT(kvc_swa_allocator_check(a));
  FZ_AUDIT(kvc_flow_check(flow, live, n));
}

/* A request that did not get its row gives back the admission locks. */
static void drop_admission(kvc_swa_radix_cache *c, ereq *e) {
  if (e->st.cache_node) FZ_AUDIT(kvc_swa_radix_cache_unlock(c, e->st.cache_node, e->rr.swa_lock));
  e->st.cache_node = NULL;
  e->rr.swa_lock = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_host_context(&g_ctx, &g_out, 4096 * sizeof(int64_t));
  fz f = {data, size};
  const uint8_t b0 = fz_u8(&f);
  const int32_t kind = (b0 >> 2) % 3;
  const int32_t ps = kind == KVC_SWA_RADIX_PURE ? 1 : (int32_t[]){1, 2, 4, 1}[b0 & 3];
  const int32_t window = 4 + fz_u8(&f) % 29;
  kvc_req_to_token_pool *pool = fz_rx_req_pool(g_ctx);
  kvc_swa_allocator_config ac = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  ac.size_full = 768;
  ac.size_swa = 256;
  ac.page_size = ps;
  if (kind == KVC_SWA_RADIX_PURE) ac.flags = KVC_SWA_PURE, ac.size_swa = 512;
  if (kind == KVC_SWA_RADIX_RING) ac.ring_size = 8 + window, ac.req_pool = pool;
  kvc_swa_allocator *a;
  if (kvc_swa_allocator_create(g_ctx, &ac, &a) != KVC_OK) abort();
  kvc_swa_radix_cache_config cc = KVC_SWA_RADIX_CACHE_CONFIG_INIT;
  cc.sliding_window = window;
  cc.radix.page_size = ps;
  cc.radix.num_slots = kvc_swa_allocator_size_full(a);
  cc.radix.policy = (kvc_radix_policy)(fz_u8(&f) % 7);
  cc.radix.req_of = req_of;
  cc.kind = kind;
  kvc_swa_radix_cache *c;
  if (kvc_swa_radix_cache_create(g_ctx, &cc, &c) != KVC_OK) abort();
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = ps;
  fc.swa_allocator = a;
  fc.sliding_window = window;
  kvc_flow *flow = fz_rx_flow(g_ctx, fc, pool, kvc_swa_radix_cache_as_prefix_cache(c));
  static ereq reqs[NREQ];
  memset(reqs, 0, sizeof reqs);
  void *stale[8] = {0};
  for (int step = 0; f.n > 0 && step < 400; step++) {
    int op;
    ereq *e = fz_rx_step(&f, reqs, &op);
    kvc_req_state *one[] = {&e->st};
    if (getenv("FZ_TRACE")) fprintf(stderr, "step %d op %d req %d live %d\n", step, op, (int)(e - reqs), e->live);
    switch (op) {
    case 0:
    case 1: { /* a new request: a tiny alphabet, so prefixes repeat; match + extend */
      if (e->live) break;
      const int64_t n = fz_rx_prompt(&f, e, MAXT / 2, 48);
      e->st.swa_evict_floor = fz_u8(&f) % 4 ? 0 : fz_u8(&f) % (n + 1);
      kvc_status st = kvc_swa_radix_cache_match_req(c, &e->st, &e->rr);
      FZ_STATUS(st);
      if (st != KVC_OK) break;
      e->st.seq_len = n;
      st = kvc_flow_alloc_for_extend(flow, one, 1, g_out, NULL);
      FZ_STATUS(st);
      if (st == KVC_OK) e->live = 1;
      else drop_admission(c, e);
      break;
    }
    case 2: /* early SWA release of the admission lock, or a chunk checkpoint */
      if (!e->live) break;
      if (fz_u8(&f) & 1) {
        FZ_STATUS(kvc_flow_cache_unfinished(flow, &e->st));
        break;
      }
      if (!e->st.cache_node) break;
      FZ_STATUS(kvc_swa_radix_cache_unlock_swa(c, e->st.cache_node, &e->rr.swa_lock));
      break;
    case 3: /* decode a few tokens (their ids join the key) */ fz_rx_decode_few(&f, flow, e, g_out); break;
    case 4:
    case 5: { /* release: insert, or abort */
      if (!e->live) break;
      kvc_status st = kvc_flow_release(flow, one, 1, fz_rx_release_inserts(&f, e, stale), NULL);
      FZ_STATUS(st);
      if (st == KVC_OK) e->live = 0;
      break;
    }
    case 6: { /* evict either component, through the flow's callback or directly */
      const int64_t n = fz_int(&f, 64), swa_n = fz_int(&f, 64);
      if (fz_u8(&f) & 1) FZ_STATUS(kvc_flow_evict(flow, n));
      else FZ_STATUS(kvc_swa_radix_cache_evict(c, flow, n, swa_n, NULL, NULL));
      break;
    }
    case 7: { /* lock / unlock a stale, live or garbage handle with a garbage receipt */
      void *h = fz_rx_handle(&f, stale);
      if (fz_u8(&f) & 1) {
        uint64_t r = 0;
        kvc_status st = kvc_swa_radix_cache_lock(c, h, &r);
        FZ_STATUS(st);
        if (st == KVC_OK) FZ_AUDIT(kvc_swa_radix_cache_unlock(c, h, r));
      } else {
        /* A malformed receipt (refused whatever the handle), or any receipt on a garbage
         * handle: a well-formed one on a live node could release a request's real lock. */
        const uint64_t bad = ((uint64_t)(fz_u32(&f) | 1u) << 2) | 3u;
        FZ_STATUS(kvc_swa_radix_cache_unlock(c, h, bad));
        FZ_STATUS(kvc_swa_radix_cache_unlock(c, (void *)(uintptr_t)(fz_u32(&f) | 1u), fz_u32(&f) | 1u));
      }
      break;
    }
    default: { /* a match without admission (stamps, splits) */
      kvc_radix_match m;
      int32_t t[64];
      const int64_t n = fz_u8(&f) % 64;
      for (int64_t i = 0; i < n; i++) t[i] = fz_u8(&f) & 3;
      FZ_STATUS(kvc_swa_radix_cache_match_prefix(c, 0, t, n, &m));
      break;
    }
    }
    check_all(flow, c, a, reqs);
  }
  for (int i = 0; i < NREQ; i++) {
    kvc_req_state *one[] = {&reqs[i].st};
    if (reqs[i].live) FZ_AUDIT(kvc_flow_release(flow, one, 1, 1, NULL));
    reqs[i].live = 0;
  }
  kvc_swa_radix_sizes s;
  FZ_AUDIT(kvc_swa_radix_cache_sizes(c, &s));
  if (s.cached || s.swa_cached) FZ_AUDIT(kvc_swa_radix_cache_evict(c, flow, s.cached, s.swa_cached, NULL, NULL));
  check_all(flow, c, a, reqs);
  if (kvc_swa_allocator_full_available_size(a) != kvc_swa_allocator_size_full(a) ||
      kvc_swa_allocator_swa_available_size(a) != kvc_swa_allocator_size_swa(a)) {
    fprintf(stderr, "slots leaked: full %lld of %lld, SWA %lld of %lld free\n",
            (long long)kvc_swa_allocator_full_available_size(a), (long long)kvc_swa_allocator_size_full(a),
            (long long)kvc_swa_allocator_swa_available_size(a), (long long)kvc_swa_allocator_size_swa(a));
    abort();
  }
  kvc_flow_destroy(flow);
  kvc_swa_radix_cache_destroy(c);
  kvc_swa_allocator_destroy(a);
  kvc_req_to_token_pool_destroy(pool);
  return 0;
}
