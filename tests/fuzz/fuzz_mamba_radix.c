/*
 * fuzz_mamba_radix.c — libFuzzer harness: the bytes drive a scheduler over a hybrid flow
 * (a kvc_hybrid_req_pool without track buffers at page size 1, or with them, pp 1 or 2,
 * at page size 1/2/4; 4-15 Mamba slots) whose prefix cache is the Mamba radix cache,
 * optionally under streaming sessions: requests matched and admitted (FULL path + MAMBA
 * node locks, the matched state copied into a forked slot, evicting a state when the
 * pool is empty), extends, decodes, track checkpoints (mamba_track_seqlen, sometimes
 * overshooting or misaligned), releases (insert or abort), evictions of either component
 * through the flow or directly, locks and unlocks of stale, live and garbage handles,
 * checkpoints between chunks (cache_unfinished_req), matches. Every status must be a known one, and after every step the cache's audit, the
 * flow's conservation check and the Mamba pool's conservation (available + held by live
 * requests + cached states == size) pass; at the end, with everything released and
 * evicted, every KV slot and every Mamba slot is free.
 */
#define NREQ 6
#define MAXT 160
#include "fuzz_radix_world.h"

static kvc_context *g_ctx;
static int64_t *g_out;

static void check_all(kvc_flow *flow, kvc_mamba_radix_cache *c, kvc_hybrid_req_pool *hp, kvc_mamba_pool *mp,
                      ereq *reqs) {
  kvc_req_state *live[NREQ];
  const size_t n = fz_rx_live(reqs, live);
  int64_t held = 0;
  for (int i = 0; i < NREQ; i++) {
    const kvc_req_state *r = &reqs[i].st;
    if (r->req_row > 0 && kvc_hybrid_req_pool_mamba_slot(hp, r->req_row) > 0) {
      held++;
      const int32_t *t = kvc_hybrid_req_pool_track_slots(hp, r->req_row);
      for (int k = 0; t && k < kvc_hybrid_req_pool_pp(hp); k++) held += t[k] > 0;
    } else if (r->req_row == 0 && r->mamba_slot > 0) {
      held++; /* a session's parked state counts below through the sessions' rows */
    }
  }
  FZ_AUDIT(kvc_mamba_radix_cache_check(c));
  FZ_AUDIT(kvc_flow_check(flow, live, n));
  FZ_AUDIT(kvc_mamba_pool_check(mp));
  kvc_mamba_radix_sizes s;
  FZ_AUDIT(kvc_mamba_radix_cache_sizes(c, &s));
  if (kvc_mamba_pool_available(mp) + held + s.mamba_cached > kvc_mamba_pool_size(mp)) {
    fprintf(stderr, "Mamba slots: %d available + %lld held + %lld cached > %d\n", kvc_mamba_pool_available(mp),
            (long long)held, (long long)s.mamba_cached, kvc_mamba_pool_size(mp));
    abort();
  }
}

/* A request that did not get its row gives back the admission lock and its forked slot. */
static void drop_admission(kvc_mamba_radix_cache *c, kvc_mamba_pool *mp, ereq *e) {
  if (e->st.cache_node) FZ_AUDIT(kvc_mamba_radix_cache_unlock(c, e->st.cache_node));
  if (e->st.mamba_slot > 0) FZ_AUDIT(kvc_mamba_pool_free(mp, &e->st.mamba_slot, 1));
  e->st.cache_node = NULL;
  e->st.mamba_slot = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_host_context(&g_ctx, &g_out, 4096 * sizeof(int64_t));
  fz f = {data, size};
  const uint8_t mode = fz_u8(&f);
  const int track = mode & 1, pp = (mode & 2) ? 1 : 2, sessions = (mode & 4) != 0;
  const int32_t ps = track ? (int32_t[]){1, 2, 4, 1}[(mode >> 3) & 3] : 1;
  const int32_t msize = 4 + fz_u8(&f) % 12;
  kvc_req_to_token_pool *pool = fz_rx_req_pool(g_ctx);
  kvc_mamba_pool_config mc = KVC_MAMBA_POOL_CONFIG_INIT;
  kvc_mamba_shape conv = {1, 0, {4, 0, 0}};
  mc.size = msize;
  mc.num_layers = 1;
  mc.num_conv = 1;
  mc.conv_shapes = &conv;
  mc.temporal_shape[0] = mc.temporal_shape[1] = mc.temporal_shape[2] = 2;
  kvc_mamba_pool *mp;
  if (kvc_mamba_pool_create(g_ctx, &mc, &mp) != KVC_OK) abort();
  kvc_hybrid_req_pool_config hc = KVC_HYBRID_REQ_POOL_CONFIG_INIT;
  hc.flags = track ? KVC_HYBRID_TRACK : 0;
  hc.pp = pp;
  hc.req_pool = pool;
  hc.mamba_pool = mp;
  kvc_hybrid_req_pool *hp;
  if (kvc_hybrid_req_pool_create(g_ctx, &hc, &hp) != KVC_OK) abort();
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = ps > 1 ? KVC_ALLOCATOR_PAGED : KVC_ALLOCATOR_TOKEN;
  ac.size = 768;
  ac.page_size = ps;
  kvc_allocator *a;
  if (kvc_allocator_create(g_ctx, &ac, &a) != KVC_OK) abort();
  kvc_mamba_radix_cache_config cc = KVC_MAMBA_RADIX_CACHE_CONFIG_INIT;
  cc.radix.page_size = ps;
  cc.radix.num_slots = kvc_allocator_size(a);
  const uint8_t pb = fz_u8(&f); /* one byte for both, so the corpus keeps its layout */
  cc.radix.policy = (kvc_radix_policy)(pb % 7);
  cc.max_states_per_path = (pb / 7) % 4; /* 0: no cap; else 1-3 states per path */
  cc.radix.req_of = req_of;
  cc.hybrid_req_pool = hp;
  kvc_mamba_radix_cache *c;
  if (kvc_mamba_radix_cache_create(g_ctx, &cc, &c) != KVC_OK) abort();
  const kvc_prefix_cache inner = kvc_mamba_radix_cache_as_prefix_cache(c);
  kvc_session_cache *sc = NULL;
  if (sessions && kvc_session_cache_create(g_ctx, &inner, &sc) != KVC_OK) abort();
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = ps;
  fc.allocator = a;
  fc.hybrid_req_pool = hp;
  kvc_flow *flow = fz_rx_flow(g_ctx, fc, pool, sessions ? kvc_session_cache_as_prefix_cache(sc) : inner);
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
      const int64_t n = fz_rx_prompt(&f, e, MAXT / 2, 32);
      kvc_status st = kvc_mamba_radix_cache_match_req(c, flow, &e->st, &e->rr, NULL);
      FZ_STATUS(st);
      if (st != KVC_OK) break;
      e->st.seq_len = n;
      st = kvc_flow_alloc_for_extend(flow, one, 1, g_out, NULL);
      FZ_STATUS(st);
      if (st == KVC_OK) e->live = 1;
      else drop_admission(c, mp, e);
      break;
    }
    case 2: { /* a track checkpoint: page-aligned, overshooting, or misaligned */
      if (!e->live || !track) break;
      const int k = fz_u8(&f) % pp;
      const int64_t v = fz_u8(&f) % 8 == 0 ? fz_int(&f, 200) : (e->st.seq_len + ps) / ps * ps - ps * (fz_u8(&f) % 3);
      e->st.mamba_track_seqlen[k] = v;
      break;
    }
    case 3: /* decode a few tokens (their ids join the key) */ fz_rx_decode_few(&f, flow, e, g_out); break;
    case 4:
    case 5: { /* release: insert, or abort; a session request sometimes */
      if (!e->live) break;
      if (sessions && fz_u8(&f) % 3 == 0) e->st.session_id = 1 + (uint64_t)(e - reqs);
      kvc_status st = kvc_flow_release(flow, one, 1, fz_rx_release_inserts(&f, e, stale), NULL);
      FZ_STATUS(st);
      if (st == KVC_OK) {
        e->live = 0;
        if (e->st.session_id) FZ_STATUS(kvc_session_cache_release(sc, flow, e->st.session_id));
      }
      break;
    }
    case 6: { /* evict either component, through the flow's callback or directly */
      const int64_t n = fz_int(&f, 64), mn = fz_int(&f, 8);
      if (fz_u8(&f) & 1) FZ_STATUS(kvc_flow_evict(flow, n));
      else FZ_STATUS(kvc_mamba_radix_cache_evict(c, flow, n, mn, NULL, NULL));
      break;
    }
    case 7: { /* lock + unlock a stale, live or garbage handle; unlock a garbage one */
      void *h = fz_rx_handle(&f, stale);
      kvc_status st = kvc_mamba_radix_cache_lock(c, h);
      FZ_STATUS(st);
      if (st == KVC_OK) FZ_AUDIT(kvc_mamba_radix_cache_unlock(c, h));
      FZ_STATUS(kvc_mamba_radix_cache_unlock(c, (void *)(uintptr_t)(fz_u32(&f) | 1u)));
      break;
    }
    case 8: /* a checkpoint between chunks: a copy of the state is inserted */
      if (!e->live || fz_u8(&f) & 1) goto match;
      e->rr.num_tokens = e->st.kv_committed_len;
      FZ_STATUS(kvc_flow_cache_unfinished(flow, &e->st));
      break;
    default:
    match : { /* a match without admission (stamps, splits, refreshes a state) */
      kvc_radix_match m;
      int32_t t[64], s;
      int64_t full;
      const int64_t n = fz_u8(&f) % 64;
      for (int64_t i = 0; i < n; i++) t[i] = fz_u8(&f) & 3;
      FZ_STATUS(kvc_mamba_radix_cache_match_prefix(c, 0, t, n, &m, &s, &full));
      break;
    }
    }
    check_all(flow, c, hp, mp, reqs);
  }
  for (int i = 0; i < NREQ; i++) {
    kvc_req_state *one[] = {&reqs[i].st};
    reqs[i].st.session_id = 0;
    reqs[i].st.mamba_track_seqlen[0] = reqs[i].st.mamba_track_seqlen[1] = 0; /* garbage ones are refused */
    if (reqs[i].live) FZ_AUDIT(kvc_flow_release(flow, one, 1, 1, NULL));
    reqs[i].live = 0;
  }
  kvc_mamba_radix_sizes s;
  FZ_AUDIT(kvc_mamba_radix_cache_sizes(c, &s));
  if (s.cached || s.mamba_cached) FZ_AUDIT(kvc_mamba_radix_cache_evict(c, flow, s.cached, s.mamba_cached, NULL, NULL));
  check_all(flow, c, hp, mp, reqs);
  if (kvc_allocator_available_size(a) != kvc_allocator_size(a) || kvc_mamba_pool_available(mp) != msize) {
    fprintf(stderr, "slots leaked: KV %lld of %lld, Mamba %d of %d free\n", (long long)kvc_allocator_available_size(a),
            (long long)kvc_allocator_size(a), kvc_mamba_pool_available(mp), msize);
    abort();
  }
  kvc_flow_destroy(flow);
  kvc_session_cache_destroy(sc);
  kvc_mamba_radix_cache_destroy(c);
  kvc_allocator_destroy(a);
  kvc_hybrid_req_pool_destroy(hp);
  kvc_mamba_pool_destroy(mp);
  kvc_req_to_token_pool_destroy(pool);
  return 0;
}
