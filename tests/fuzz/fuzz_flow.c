/*
 * fuzz_flow.c — libFuzzer harness: the input bytes drive flows (alloc_for_extend /
 * alloc_for_decode / release / cache_unfinished / evict / SWA window eviction) and
 * streaming sessions (match / release) over a pool of request states whose fields the
 * input may also scribble on (negative, huge, stale rows, released twice, ...), on the
 * host backend. Byte 0 picks the setup: page size, plain or SWA allocator, sessions.
 * After every call: a known status, and kvc_flow_check (conservation: free + held by
 * live requests + held by the cache == capacity, whenever no request state was
 * corrupted by the input), the req pool audit and the SWA audit pass.
 */
#include "fuzz_common.h"

static kvc_context *g_ctx;
static int64_t *g_dout;

#define NREQ 6
#define ROWS 5
#define WIDTH 64

/* The audits: req pool (host and device), and with no request state corrupted by the
 * input kvc_flow_check (allocator audit + conservation); else the allocator's own audit
 * and a kvc_flow_check that must merely not crash. */
static void audit(kvc_req_to_token_pool *rp, kvc_allocator *a, kvc_swa_allocator *sa, kvc_flow *flow,
                  kvc_req_state *req, int corrupted) {
  kvc_req_state *live[NREQ];
  for (int i = 0; i < NREQ; i++) live[i] = &req[i];
  FZ_AUDIT(kvc_req_to_token_pool_audit_device(rp, NULL)); /* includes _check */
  if (!corrupted) {
    FZ_AUDIT(kvc_flow_check(flow, live, NREQ));
    return;
  }
  if (sa) FZ_AUDIT(kvc_swa_allocator_check(sa));
  else FZ_AUDIT(kvc_allocator_check(a));
  FZ_STATUS(kvc_flow_check(flow, live, NREQ) == KVC_ERR_INTERNAL ? KVC_OK : KVC_OK); /* no crash */
}

/* The O(1) fingerprint of the pools, taken around every call: free tokens on each side
 * and free rows (what the sessions hold is in the pools; kvc_session_cache_held walks
 * every session, a third of the time when taken per call). */
typedef struct fp {
  int64_t avail, avail_swa, rows;
} fp;
static void take(fp *s, kvc_req_to_token_pool *rp, kvc_allocator *a, kvc_swa_allocator *sa) {
  memset(s, 0, sizeof *s);
  if (sa) s->avail = kvc_swa_allocator_full_available_size(sa), s->avail_swa = kvc_swa_allocator_swa_available_size(sa);
  else s->avail = kvc_allocator_available_size(a);
  s->rows = kvc_req_to_token_pool_available(rp);
  if (s->avail < 0 || s->avail > 160 || s->avail_swa < 0 || s->avail_swa > 96 || s->rows < 0 || s->rows > ROWS) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_host_context(&g_ctx, &g_dout, 8 * NREQ * WIDTH * 8);
  fz f = {data, size};
  const uint8_t geo = fz_u8(&f);
  const int32_t ps = (geo & 1) ? 4 : 1;
  const int use_swa = (geo >> 1) & 1, use_sess = (geo >> 2) & 1;
  /* The req pool, one allocator per (page size, SWA) and the session cache are made once
   * and reset before every input (fuzz_common.h: checked against their fresh state); the
   * flow, whose per-row release state a reset cannot reach, is made per input (cheap). */
  static kvc_req_to_token_pool *rp;
  static kvc_allocator *allocs[2];
  static kvc_swa_allocator *swas[2];
  static fz_alloc_sig alloc_fresh[2];
  static fz_swa_sig swa_fresh[2];
  static kvc_session_cache *sessions;
  const int pk = ps == 4; /* pool index by page size */
  if (!rp) {
    kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
    rc.size = ROWS, rc.max_context_len = WIDTH;
    if (kvc_req_to_token_pool_create(g_ctx, &rc, &rp) != KVC_OK) abort();
    if (kvc_session_cache_create(g_ctx, NULL, &sessions) != KVC_OK) abort();
  }
  fz_req_pool_reset(rp, ROWS, WIDTH);
  kvc_allocator *a = NULL;
  kvc_swa_allocator *sa = NULL;
  if (use_swa) {
    if (!swas[pk]) {
      kvc_swa_allocator_config c = KVC_SWA_ALLOCATOR_CONFIG_INIT;
      c.size_full = 160, c.size_swa = 96, c.page_size = ps;
      if (kvc_swa_allocator_create(g_ctx, &c, &swas[pk]) != KVC_OK) abort();
      fz_swa_sig_take(swas[pk], &swa_fresh[pk]);
    }
    sa = swas[pk];
    fz_swa_reset(sa, &swa_fresh[pk]);
  } else {
    if (!allocs[pk]) {
      kvc_allocator_config c = KVC_ALLOCATOR_CONFIG_INIT;
      c.kind = ps == 1 ? KVC_ALLOCATOR_TOKEN : KVC_ALLOCATOR_PAGED, c.size = 160, c.page_size = ps;
      if (kvc_allocator_create(g_ctx, &c, &allocs[pk]) != KVC_OK) abort();
      fz_alloc_sig_take(allocs[pk], &alloc_fresh[pk]);
    }
    a = allocs[pk];
    fz_alloc_reset(a, &alloc_fresh[pk]);
  }
  kvc_session_cache *sc = NULL;
  kvc_prefix_cache pc;
  memset(&pc, 0, sizeof pc);
  if (use_sess) {
    sc = sessions;
    kvc_session_cache_reset(sc); /* drops every session; the pools were reset above */
    int64_t held = -1, reqs = -1;
    FZ_AUDIT(kvc_session_cache_held(sc, ps, &held, NULL, &reqs));
    if (held || reqs) abort();
    pc = kvc_session_cache_as_prefix_cache(sc);
  }
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = ps, fc.req_pool = rp, fc.allocator = a, fc.swa_allocator = sa, fc.cache = pc;
  fc.sliding_window = use_swa ? 8 + (geo >> 4) : 0;
  kvc_flow *flow = NULL;
  if (kvc_flow_create(g_ctx, &fc, &flow) != KVC_OK) abort();

  kvc_req_state req[NREQ];
  memset(req, 0, sizeof req);
  int corrupted = 0; /* the input wrote into a request state: conservation can't be checked */
  int64_t prefix[WIDTH];

  static int trace = -1;
  if (trace < 0) trace = getenv("FZ_TRACE") != NULL;
  unsigned oks = 0;
  for (int step = 0; step < 200 && f.n; step++) {
    const uint8_t op = fz_u8(&f);
    const int was_corrupted = corrupted;
    fp s0, s1;
    take(&s0, rp, a, sa);
    kvc_req_state *batch[NREQ];
    size_t n = 0;
    if (op & 0x80) { /* a batch of distinct-or-not requests */
      n = fz_u8(&f) % (NREQ + 1);
      for (size_t i = 0; i < n; i++) batch[i] = &req[fz_u8(&f) % NREQ];
    }
    kvc_status st = KVC_OK;
    switch (op & 7) {
    case 0: /* extend: new requests get a fresh length; others continue */
      for (size_t i = 0; i < n; i++) {
        kvc_req_state *r = batch[i];
        r->prefix_len = r->req_row ? r->kv_allocated_len : 0;
        r->seq_len = r->prefix_len < WIDTH ? r->prefix_len + fz_u8(&f) % 24 : r->prefix_len;
        if (use_sess && !r->req_row && (fz_u8(&f) & 1)) {
          /* one session per request slot: two live requests restoring the same session
           * is engine misuse the session cache does not police (see README) */
          r->session_id = 1 + (uint64_t)(r - req);
          int matched;
          st = kvc_session_cache_match(sc, r, r->seq_len, &matched);
          FZ_STATUS(st);
        }
      }
      take(&s0, rp, a, sa); /* the matches above were calls of their own */
      st = kvc_flow_alloc_for_extend(flow, batch, n, g_dout, NULL);
      break;
    case 1:
      for (size_t i = 0; i < n; i++) batch[i]->seq_len = batch[i]->kv_allocated_len;
      st = kvc_flow_alloc_for_decode(flow, batch, n, (int32_t)(1 + fz_u8(&f) % 3), g_dout, NULL);
      break;
    case 2: st = kvc_flow_release(flow, batch, n, fz_u8(&f) & 1, NULL); break;
    case 3: st = kvc_flow_cache_unfinished(flow, &req[fz_u8(&f) % NREQ]); break;
    case 4: st = kvc_flow_evict(flow, fz_int(&f, 64)); break;
    case 5:
      if (use_swa) {
        kvc_req_state *r = &req[fz_u8(&f) % NREQ];
        st = kvc_flow_free_swa_out_of_window(flow, r, fz_int(&f, r->kv_allocated_len), NULL);
      }
      break;
    case 6:
      if (use_sess) st = kvc_session_cache_release(sc, flow, (uint64_t)fz_u8(&f) % (NREQ + 1));
      break;
    case 7: { /* misuse: scribble on a request state, or call with junk */
      kvc_req_state *r = &req[fz_u8(&f) % NREQ];
      switch (fz_u8(&f) % 6) {
      case 0:
        r->req_row = (int32_t)fz_int(&f, ROWS);
        corrupted = 1;
        break;
      case 1:
        r->kv_allocated_len = fz_int(&f, WIDTH);
        corrupted = 1;
        break;
      case 2: r->prefix_len = fz_int(&f, WIDTH), r->seq_len = fz_int(&f, WIDTH); break;
      case 3: /* a prefix of arbitrary slots for a request without a row */
        if (!r->req_row) {
          int64_t p = fz_u8(&f) % 16;
          for (int64_t t = 0; t < p; t++) prefix[t] = fz_int(&f, 160);
          r->prefix_len = p, r->seq_len = p + fz_u8(&f) % 8, r->prefix_slots = prefix;
          kvc_req_state *b[1] = {r};
          st = kvc_flow_alloc_for_extend(flow, b, 1, g_dout, NULL);
          r->prefix_slots = NULL;
          /* The flow trusts prefix slots (the prefix cache owns them); arbitrary ones are
           * not accounted anywhere, so conservation is off from here (a later free of
           * them is still caught by the allocator as a double free / not held). */
          if (st == KVC_OK && p) corrupted = 1;
        }
        break;
      case 4: {
        size_t k = fz_u8(&f) % 4;
        int64_t s[4];
        for (size_t i = 0; i < k; i++) s[i] = fz_int(&f, 160);
        st = kvc_flow_free_slots(flow, s, k);
        if (st == KVC_OK && k) corrupted = 1; /* freed someone's slots */
        break;
      }
      default:
        FZ_STATUS(kvc_flow_alloc_for_extend(NULL, batch, n, g_dout, NULL));
        FZ_STATUS(kvc_flow_alloc_for_extend(flow, NULL, 1, g_dout, NULL));
        FZ_STATUS(kvc_flow_release(flow, NULL, 2, 0, NULL));
        break;
      }
      break;
    }
    }
    FZ_STATUS(st);
    if (trace) {
      fprintf(stderr, "step %d op %u n %zu -> %s %s\n", step, op, n, kvc_status_name(st),
              st ? kvc_last_error(g_ctx) : "");
      for (int i = 0; i < NREQ; i++)
        if (req[i].req_row || req[i].kv_allocated_len)
          fprintf(stderr, "   req%d row %d alloc %lld committed %lld sess %llu\n", i, req[i].req_row,
                  (long long)req[i].kv_allocated_len, (long long)req[i].kv_committed_len,
                  (unsigned long long)req[i].session_id);
    }
    /* After every call the O(1) fingerprint; a refused call (on uncorrupted states)
     * must have left it unchanged. Full audits after every FZ_AUDIT_EVERY-th call that
     * changed state (it returned OK) and at the end: anything a call broke is caught by
     * the next full audit, at the latest the one at the end. */
    take(&s1, rp, a, sa);
    /* (OUT_OF_SLOTS: SGLang evicts the cache and out-of-window SWA slots before it gives
     * up, and keeps the evictions; a batch release is not all-or-nothing (kvcache.h): the
     * requests before the refused one are released. So then things may only be freed.) */
    const int oom_ok = (st == KVC_ERR_OUT_OF_SLOTS || (op & 7) == 2) && s1.avail >= s0.avail &&
                       s1.avail_swa >= s0.avail_swa && s1.rows >= s0.rows;
    if (st != KVC_OK && !was_corrupted && !corrupted && !oom_ok && memcmp(&s0, &s1, sizeof s0)) {
      fprintf(stderr, "step %d: refused call (%s) changed the pools\n", step, kvc_last_error(g_ctx));
      abort();
    }
    if (st == KVC_OK && ++oks % FZ_AUDIT_EVERY == 0) audit(rp, a, sa, flow, req, corrupted);
  }
  audit(rp, a, sa, flow, req, corrupted);
  kvc_flow_destroy(flow);
  return 0; /* the pools live on; the next input resets them */
}
