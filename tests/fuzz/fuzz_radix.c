/*
 * fuzz_radix.c — libFuzzer harness: the bytes drive a scheduler over a flow whose prefix
 * cache is a radix cache (token or paged allocator, any policy, at page 1 bound to its
 * allocator or not): new requests matched and admitted, extends, decodes, chunk
 * checkpoints, releases (insert or abort), evictions, locks and unlocks of real, stale
 * and garbage handles, requests whose state the bytes corrupt. Every status must be a
 * known one, and after every step the tree's audit and the flow's conservation check
 * (free + held by live requests + cached == capacity) pass.
 */
#define NREQ 6
#define MAXT 256
#include "fuzz_radix_world.h"

static kvc_context *g_ctx;
static int64_t *g_out;

static void check_all(kvc_flow *flow, kvc_radix_cache *rc, ereq *reqs) {
  kvc_req_state *live[NREQ];
  const size_t n = fz_rx_live(reqs, live);
  FZ_AUDIT(kvc_radix_cache_check(rc));
  FZ_AUDIT(kvc_flow_check(flow, live, n));
}

/* A first chunk ends at `end`, or covers the whole prompt of n tokens. */
static int64_t first_chunk(int64_t n, int64_t end) { return end < n ? end : n; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_host_context(&g_ctx, &g_out, 4096 * sizeof(int64_t));
  fz f = {data, size};
  const int32_t ps = (int32_t[]){1, 2, 4, 16}[fz_u8(&f) & 3];
  const int64_t cap = 1024;
  kvc_req_to_token_pool *pool = fz_rx_req_pool(g_ctx);
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = ps == 1 ? KVC_ALLOCATOR_TOKEN : KVC_ALLOCATOR_PAGED;
  ac.size = cap;
  ac.page_size = ps;
  kvc_allocator *alloc;
  if (kvc_allocator_create(g_ctx, &ac, &alloc) != KVC_OK) abort();
  kvc_radix_cache_config rcfg = KVC_RADIX_CACHE_CONFIG_INIT;
  rcfg.page_size = ps;
  rcfg.num_slots = cap;
  const uint8_t pol = fz_u8(&f);
  rcfg.policy = (kvc_radix_policy)(pol % 7);
  rcfg.req_of = req_of;
  kvc_radix_cache *rc;
  if (kvc_radix_cache_create(g_ctx, &rcfg, &rc) != KVC_OK) abort();
  /* The policy byte's top bit at page 1: the held marks in the allocator's states. */
  if (ps == 1 && (pol & 0x80) && kvc_radix_cache_bind_allocator(rc, alloc) != KVC_OK) abort();
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = ps;
  fc.allocator = alloc;
  kvc_flow *flow = fz_rx_flow(g_ctx, fc, pool, kvc_radix_cache_as_prefix_cache(rc));
  static ereq reqs[NREQ];
  memset(reqs, 0, sizeof reqs);
  void *stale[8] = {0};
  for (int step = 0; f.n > 0 && step < 400; step++) {
    int op;
    ereq *e = fz_rx_step(&f, reqs, &op);
    kvc_req_state *one[] = {&e->st};
    if (getenv("FZ_TRACE")) { /* reproducing a crash: one line per step */
      int64_t ev = 0, pr = 0;
      kvc_radix_cache_sizes(rc, &ev, &pr, NULL);
      fprintf(stderr, "step %d op %d req %d live %d node %p | evictable %lld protected %lld\n", step, op,
              (int)(e - reqs), e->live, e->st.cache_node, (long long)ev, (long long)pr);
    }
    switch (op) {
    case 0:
    case 1: { /* a new request: tokens from a tiny alphabet (prefixes repeat), match + extend */
      if (e->live) break;
      const int64_t n = fz_rx_prompt(&f, e, MAXT, 64);
      e->rr.ns = fz_u8(&f) % 7 == 0;
      kvc_status st = kvc_radix_cache_match_req(rc, &e->st, &e->rr);
      FZ_STATUS(st);
      if (st != KVC_OK) break;
      e->st.seq_len = fz_u8(&f) & 1 ? n : first_chunk(n, e->st.prefix_len + ps * (1 + fz_u8(&f) % 4));
      if (e->st.seq_len < n && e->st.seq_len > e->st.prefix_len) e->st.flags = KVC_REQ_CHUNKED;
      st = kvc_flow_alloc_for_extend(flow, one, 1, g_out, NULL);
      FZ_STATUS(st);
      if (st == KVC_OK) e->live = 1;
      else if (e->st.cache_node) { /* the admission lock of a request that did not fit */
        FZ_STATUS(kvc_radix_cache_unlock(rc, e->st.cache_node));
        e->st.cache_node = NULL;
      }
      break;
    }
    case 2: /* the next chunk of a chunked prefill, after its checkpoint */
      if (!e->live || e->st.seq_len >= e->rr.num_tokens) break;
      FZ_STATUS(kvc_flow_cache_unfinished(flow, &e->st));
      e->st.seq_len = e->rr.num_tokens;
      e->st.flags = 0;
      FZ_STATUS(kvc_flow_alloc_for_extend(flow, one, 1, g_out, NULL));
      break;
    case 3: /* decode one token (its id joins the key) */
      if (!e->live || e->st.seq_len >= MAXT || e->st.seq_len < e->rr.num_tokens) break;
      if (kvc_flow_alloc_for_decode(flow, one, 1, 1, g_out, NULL) == KVC_OK)
        e->toks[e->rr.num_tokens++] = fz_u8(&f) & 3;
      break;
    case 4:
    case 5: { /* release: insert, or abort */
      if (!e->live) break;
      kvc_status st = kvc_flow_release(flow, one, 1, fz_rx_release_inserts(&f, e, stale), NULL);
      FZ_STATUS(st);
      if (st == KVC_OK) e->live = 0;
      break;
    }
    case 6: { /* evict through the flow or directly */
      int64_t n = fz_int(&f, 64);
      if (fz_u8(&f) & 1) FZ_STATUS(kvc_flow_evict(flow, n));
      else FZ_STATUS(kvc_radix_cache_evict(rc, flow, n, NULL));
      break;
    }
    case 7: { /* lock / unlock a stale, live or garbage handle; unlock what was locked */
      void *h = fz_rx_handle(&f, stale);
      if (fz_u8(&f) & 1) {
        kvc_status st = kvc_radix_cache_lock(rc, h);
        FZ_STATUS(st);
        if (st == KVC_OK) FZ_STATUS(kvc_radix_cache_unlock(rc, h));
      } else {
        kvc_status st = kvc_radix_cache_unlock(rc, h); /* below zero: refused, or a real unlock */
        FZ_STATUS(st);
        if (st == KVC_OK && h) FZ_AUDIT(kvc_radix_cache_lock(rc, h)); /* give it back */
      }
      break;
    }
    case 8: { /* bad request state at a checkpoint: refused, nothing changed */
      if (!e->live) break;
      kvc_req_state saved = e->st;
      kvc_radix_req rsaved = e->rr;
      const int what = fz_u8(&f) & 3;
      if (getenv("FZ_TRACE")) fprintf(stderr, "  corrupt %d\n", what);
      switch (what) {
      case 0: e->st.cache_node = (void *)(uintptr_t)(fz_u32(&f) | 1u); break; /* NULL would be valid */
      case 1: e->rr.num_tokens = fz_u8(&f) % 8; break;
      case 2: e->rr.ns ^= 1; break;
      default: /* invalid values only: a wrong but valid one cannot be told from a right one */
        e->st.cache_protected_len = (int64_t[]){-1, e->st.kv_committed_len + ps, ps > 1 ? ps / 2 : -2}[fz_u8(&f) % 3];
        break;
      }
      const int finish = fz_u8(&f) & 1;
      kvc_status st = finish ? kvc_radix_cache_cache_finished_req(rc, flow, &e->st, 1)
                             : kvc_radix_cache_cache_unfinished_req(rc, flow, &e->st);
      FZ_STATUS(st);
      if (getenv("FZ_TRACE")) fprintf(stderr, "  checkpoint (finish %d): %s\n", finish, kvc_status_name(st));
      if (st != KVC_OK) {
        e->st = saved;
        e->rr = rsaved;
        break;
      }
      /* Accepted: a token count that was still valid for this checkpoint (it covers the
       * page-aligned key) read no token beyond the real ones, so the request keeps its
       * real count; left corrupt, a later release would be refused for a state the
       * harness made up, not one the library did. */
      e->rr.num_tokens = rsaved.num_tokens;
      if (finish) {
        /* still valid (say, another namespace for an unlocked request): the tree owns
         * [0, committed) now, so the row goes back without the cache's callback */
        e->st.kv_committed_len = e->st.kv_allocated_len = 0;
        FZ_AUDIT(kvc_flow_release(flow, one, 1, 0, NULL));
        e->live = 0;
      }
      break;
    }
    default: { /* a match without admission (stamps, splits) */
      kvc_radix_match m;
      int32_t t[64];
      int64_t n = fz_u8(&f) % 64;
      for (int64_t i = 0; i < n; i++) t[i] = fz_u8(&f) & 3;
      FZ_STATUS(kvc_radix_cache_match_prefix(rc, fz_u8(&f) & 1, t, n, &m));
      break;
    }
    }
    check_all(flow, rc, reqs);
  }
  /* Finish: every request released, the tree emptied: every slot is free again. */
  for (int i = 0; i < NREQ; i++) {
    kvc_req_state *one[] = {&reqs[i].st};
    if (getenv("FZ_TRACE") && reqs[i].live) {
      int64_t pr = 0;
      kvc_radix_cache_sizes(rc, NULL, &pr, NULL);
      fprintf(stderr,
              "before final release %d: node %p committed %lld protected_len %lld tokens %lld; protected %lld\n", i,
              reqs[i].st.cache_node, (long long)reqs[i].st.kv_committed_len, (long long)reqs[i].st.cache_protected_len,
              (long long)reqs[i].rr.num_tokens, (long long)pr);
    }
    if (reqs[i].live) FZ_AUDIT(kvc_flow_release(flow, one, 1, 1, NULL));
    if (getenv("FZ_TRACE") && reqs[i].live)
      fprintf(stderr, "final release %d: node %p committed %lld protected %lld tokens %lld\n", i, reqs[i].st.cache_node,
              (long long)reqs[i].st.kv_committed_len, (long long)reqs[i].st.cache_protected_len,
              (long long)reqs[i].rr.num_tokens);
    reqs[i].live = 0;
  }
  int64_t cached;
  FZ_AUDIT(kvc_radix_cache_sizes(rc, NULL, NULL, &cached));
  if (cached) FZ_AUDIT(kvc_radix_cache_evict(rc, flow, cached, NULL));
  check_all(flow, rc, reqs);
  if (kvc_allocator_available_size(alloc) != kvc_allocator_size(alloc)) {
    fprintf(stderr, "slots leaked: %lld of %lld free\n", (long long)kvc_allocator_available_size(alloc),
            (long long)kvc_allocator_size(alloc));
    abort();
  }
  kvc_flow_destroy(flow);
  kvc_radix_cache_destroy(rc);
  kvc_allocator_destroy(alloc);
  kvc_req_to_token_pool_destroy(pool);
  return 0;
}
