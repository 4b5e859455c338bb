/*
 * fuzz_flow_hybrid.c — libFuzzer harness for the hybrid (Mamba) flows, host backend: a
 * flow over a kvc_hybrid_req_pool (req_to_token + Mamba pool; no track slots, or track
 * slots with pp 2 or 1, lazy or not), a TOKEN or PAGED allocator and one of four caches
 * (chunk cache, sessions over it, the toy Mamba-managing cache below, sessions over the
 * toy); bytes 0-1 pick the setup. Each step is one op over six request states:
 * alloc_for_extend (fresh, session turn, chunked continuation, Mamba slot taken before
 * the row), alloc_for_decode (1-3 tokens), release (batches with duplicates and released
 * requests), cache_unfinished, evict, session release, flags / committed rollback, junk
 * in a state (kept, or for one call and undone when the call fails). After every call:
 * a known status; req pool, allocator, Mamba pool audits; device mappings == mirrors; a
 * FAILED call changed no pool ("a failed call changes nothing"); and while no state holds
 * junk (`corrupted`, as in fuzz_flow.c) kvc_flow_check plus row / Mamba conservation.
 * At the end everything is released and every page, row and Mamba slot must be free.
 */
#include "fuzz_common.h"

static kvc_context *g_ctx;
static int64_t *g_dout;

#define NREQ 6
#define ROWS 5
#define WIDTH 64
#define KV 160
#define FAIL(...) (fprintf(stderr, __VA_ARGS__), fputc('\n', stderr), abort())

/* A toy Mamba-managing prefix cache (SGLang MambaRadixCache in miniature): no KV reuse,
 * but an inserting finish forks the request's Mamba state into a slot the cache owns and
 * evict(mamba_num) gives such slots back. It drives the flow's supports_mamba paths:
 * Mamba eviction before rows are taken, and release leaving the Mamba state to the cache. */
typedef struct toy {
  kvc_hybrid_req_pool *hp;
  kvc_mamba_pool *mp;
  int32_t slot[64];
  int n;
} toy;
static int toy_supports(void *self) { return (void)self, 1; }
static kvc_status toy_evict(void *self, kvc_flow *f, int64_t n, int64_t swa, int64_t mamba) {
  toy *t = self;
  const int k = mamba < t->n ? (int)mamba : t->n; /* the oldest first */
  kvc_status st = k > 0 ? kvc_mamba_pool_free(t->mp, t->slot, (size_t)k) : KVC_OK;
  if (st == KVC_OK) memmove(t->slot, t->slot + k, (size_t)(t->n -= k) * sizeof t->slot[0]);
  return (void)f, (void)n, (void)swa, st;
}
static kvc_status toy_finished(void *self, kvc_flow *f, kvc_req_state *r, int is_insert) {
  toy *t = self;
  int64_t buf[WIDTH], c = r->kv_committed_len; /* the flow validated 0 <= c <= WIDTH */
  kvc_status st = c > 0 ? kvc_flow_row_slots(f, r->req_row, 0, c, buf) : KVC_OK;
  if (st == KVC_OK && c > 0) st = kvc_flow_free_slots(f, buf, (size_t)c);
  int32_t m = kvc_hybrid_req_pool_mamba_slot(t->hp, r->req_row), kept = 0;
  if (st != KVC_OK || m <= 0) return st;
  if (is_insert && t->n < 64) {
    st = kvc_mamba_pool_fork_from(t->mp, m, &kept, NULL);
    if (st == KVC_ERR_OUT_OF_SLOTS) st = KVC_OK, kept = 0; /* no room: just don't cache */
    if (st != KVC_OK) return st;
  }
  st = kvc_hybrid_req_pool_free_mamba_cache(t->hp, r->req_row, -1, NULL);
  if (st != KVC_OK) return kept ? (kvc_mamba_pool_free(t->mp, &kept, 1), st) : st;
  if (kept) t->slot[t->n++] = kept;
  r->mamba_slot = r->mamba_track[0] = r->mamba_track[1] = 0; /* ownership moved */
  return KVC_OK;
}
static kvc_status toy_unfinished(void *self, kvc_flow *f, kvc_req_state *r) {
  (void)self, (void)f;
  r->prefix_slots = NULL, r->prefix_len = r->kv_committed_len;
  return KVC_OK;
}

/* What a failed call must leave unchanged. */
typedef struct snap {
  int64_t held_pages, rows, mamba, sess_tokens, sess_reqs;
} snap;

typedef struct world {
  kvc_req_to_token_pool *rp;
  kvc_allocator *a;
  kvc_mamba_pool *mp;
  kvc_hybrid_req_pool *hp;
  kvc_session_cache *sc; /* NULL without sessions */
  kvc_flow *flow;
  toy t;                        /* the toy cache's state (in use or not) */
  int32_t msize, pp, track, ps; /* Mamba slots; pp; track slots on; page size */
  kvc_req_state req[NREQ];
  int lent[NREQ]; /* the request runs a session turn (its row is the session's) */
} world;

/* With sess = 0 (around every call) without the sessions' totals: kvc_session_cache_held
 * walks every session, and what the sessions hold is in the pools' counters anyway. */
static void take(const world *w, snap *s, int sess) {
  kvc_allocator_stats as;
  memset(s, 0, sizeof *s);
  FZ_AUDIT(kvc_allocator_get_stats(w->a, &as));
  s->held_pages = as.held_pages, s->rows = kvc_req_to_token_pool_available(w->rp);
  s->mamba = kvc_mamba_pool_available(w->mp) + w->t.n; /* toy eviction moves slots, only */
  if (w->sc && sess) FZ_AUDIT(kvc_session_cache_held(w->sc, w->ps, &s->sess_tokens, NULL, &s->sess_reqs));
}

static void mark(const world *w, uint8_t *seen, int64_t *n, int32_t s, const char *who) {
  if (s < 1 || s > w->msize || !kvc_mamba_pool_is_held(w->mp, s) || seen[s])
    FAIL("Mamba slot %d of %s is out of range, free or shared", s, who);
  seen[s] = 1, (*n)++;
}

/* Audits; with full = 1 also conservation: held rows map to distinct held Mamba slots,
 * free rows to none, live requests' slots are their rows' mapping, held Mamba slots ==
 * mapped + row-less early slots + the toy's, held rows == live + session - lent. */
static void check(const world *w, int full) {
  FZ_AUDIT(kvc_req_to_token_pool_audit_device(w->rp, NULL)); /* includes _check */
  if (!full) FZ_AUDIT(kvc_allocator_check(w->a));            /* else kvc_flow_check below does it */
  FZ_AUDIT(kvc_mamba_pool_check(w->mp));
  const int32_t *dm = kvc_hybrid_req_pool_mapping(w->hp), *dt = kvc_hybrid_req_pool_track_mapping(w->hp);
  for (int32_t row = 0; row <= ROWS; row++) { /* host backend: device memory is host memory */
    const int32_t *tr = kvc_hybrid_req_pool_track_slots(w->hp, row);
    if (dm[row] != kvc_hybrid_req_pool_mamba_slot(w->hp, row)) FAIL("row %d: device mapping differs", row);
    for (int k = 0; w->track && k < w->pp; k++)
      if (dt[row * w->pp + k] != tr[k]) FAIL("row %d: device track mapping differs", row);
  }
  if (!full) return;
  kvc_req_state *live[NREQ];
  for (int i = 0; i < NREQ; i++) live[i] = (kvc_req_state *)&w->req[i];
  FZ_AUDIT(kvc_flow_check(w->flow, live, NREQ));
  uint8_t seen[64] = {0};
  int64_t mapped = 0, live_rows = 0, lent = 0, sess_rows = 0;
  for (int32_t row = 1; row <= ROWS; row++) {
    const int32_t m = kvc_hybrid_req_pool_mamba_slot(w->hp, row), *tr = kvc_hybrid_req_pool_track_slots(w->hp, row);
    if (!kvc_req_to_token_pool_is_held(w->rp, row)) {
      if (m != 0 || (w->track && (tr[0] > 0 || tr[w->pp - 1] > 0))) FAIL("free row %d still maps Mamba state", row);
      continue;
    }
    mark(w, seen, &mapped, m, "a held row"); /* every row of a hybrid flow has a slot */
    for (int k = 0; w->track && k < w->pp; k++)
      if (tr[k] > 0) mark(w, seen, &mapped, tr[k], "a track entry");
  }
  for (int i = 0; i < NREQ; i++) {
    const kvc_req_state *r = &w->req[i];
    if (!r->req_row && r->mamba_slot > 0) mark(w, seen, &mapped, r->mamba_slot, "a row-less request");
    if (!r->req_row) continue;
    live_rows++, lent += w->lent[i];
    for (int j = 0; j < i; j++)
      if (w->req[j].req_row == r->req_row) FAIL("req%d and req%d share row %d", j, i, r->req_row);
    if (!kvc_req_to_token_pool_is_held(w->rp, r->req_row) ||
        r->mamba_slot != kvc_hybrid_req_pool_mamba_slot(w->hp, r->req_row))
      FAIL("req%d: row %d / Mamba slot %d differ from the pool", i, r->req_row, r->mamba_slot);
    const int32_t *tr = kvc_hybrid_req_pool_track_slots(w->hp, r->req_row);
    for (int k = 0; w->track && k < w->pp; k++)
      if (r->mamba_track[k] != tr[k]) FAIL("req%d: track[%d] = %d, its row maps %d", i, k, r->mamba_track[k], tr[k]);
  }
  for (int i = 0; i < w->t.n; i++) mark(w, seen, &mapped, w->t.slot[i], "the toy cache");
  const int64_t held_m = w->msize - kvc_mamba_pool_available(w->mp),
                held_r = ROWS - kvc_req_to_token_pool_available(w->rp);
  if (held_m != mapped) FAIL("Mamba conservation: %lld held, %lld accounted for", (long long)held_m, (long long)mapped);
  if (w->sc) FZ_AUDIT(kvc_session_cache_held(w->sc, w->ps, NULL, NULL, &sess_rows));
  if (held_r != live_rows + sess_rows - lent)
    FAIL("row conservation: %lld held, %lld live + %lld session - %lld lent", (long long)held_r, (long long)live_rows,
         (long long)sess_rows, (long long)lent);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_host_context(&g_ctx, &g_dout, 8 * NREQ * WIDTH * 8);
  fz f = {data, size};
  const uint8_t geo = fz_u8(&f), geo2 = fz_u8(&f);
  static world w;
  memset(&w, 0, sizeof w);
  w.ps = (geo & 1) ? 4 : 1;
  const int hmode = (geo >> 1) & 3, use_sess = (geo >> 3) & 1, use_toy = (geo >> 4) & 1;
  w.msize = 3 + (geo >> 6) * 4; /* 3..15: Mamba slots, often scarcer than rows x (1 + pp) */
  kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rc.size = ROWS, rc.max_context_len = WIDTH;
  kvc_mamba_shape conv = {2, 0, {8, 4, 0}};
  kvc_mamba_pool_config mc = KVC_MAMBA_POOL_CONFIG_INIT; /* as tests/flow/test_flow_hybrid.c */
  mc.size = w.msize, mc.num_layers = 2, mc.num_conv = 1, mc.conv_shapes = &conv;
  mc.temporal_shape[0] = 2, mc.temporal_shape[1] = 4, mc.temporal_shape[2] = 4;
  mc.flags = (geo >> 5) & 1 ? KVC_MAMBA_POOL_NO_ZERO_ON_ALLOC : 0;
  kvc_hybrid_req_pool_config hc = KVC_HYBRID_REQ_POOL_CONFIG_INIT;
  hc.flags = hmode == 0 ? 0 : hmode == 3 ? KVC_HYBRID_TRACK | KVC_HYBRID_LAZY : KVC_HYBRID_TRACK;
  hc.pp = hmode == 2 || (hmode == 3 && (geo2 & 1)) ? 1 : 2;
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = w.ps == 1 ? KVC_ALLOCATOR_TOKEN : KVC_ALLOCATOR_PAGED, ac.size = KV, ac.page_size = w.ps;
  if (kvc_req_to_token_pool_create(g_ctx, &rc, &w.rp) || kvc_mamba_pool_create(g_ctx, &mc, &w.mp) ||
      (hc.req_pool = w.rp, hc.mamba_pool = w.mp, kvc_hybrid_req_pool_create(g_ctx, &hc, &w.hp)) ||
      kvc_allocator_create(g_ctx, &ac, &w.a))
    abort();
  w.track = hmode != 0, w.pp = kvc_hybrid_req_pool_pp(w.hp), w.t.hp = w.hp, w.t.mp = w.mp;
  kvc_prefix_cache tc, pc;
  memset(&tc, 0, sizeof tc), memset(&pc, 0, sizeof pc); /* pc zero = the chunk cache */
  tc.self = &w.t, tc.supports_mamba = toy_supports, tc.evict = toy_evict;
  tc.cache_finished_req = toy_finished, tc.cache_unfinished_req = toy_unfinished;
  if (use_toy) pc = tc;
  if (use_sess && kvc_session_cache_create(g_ctx, use_toy ? &tc : NULL, &w.sc)) abort();
  if (use_sess) pc = kvc_session_cache_as_prefix_cache(w.sc);
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = w.ps, fc.req_pool = w.rp, fc.allocator = w.a, fc.hybrid_req_pool = w.hp, fc.cache = pc;
  if (kvc_flow_create(g_ctx, &fc, &w.flow) != KVC_OK) abort();
  kvc_req_state *const req = w.req;
  kvc_req_state saved[NREQ];
  int corrupted = 0; /* a live state holds junk: conservation can't be checked */
  static int trace = -1;
  if (trace < 0) trace = getenv("FZ_TRACE") != NULL;
  unsigned oks = 0;
  for (int step = 0; step < 200 && f.n; step++) {
    const uint8_t op = fz_u8(&f);
    const int was_corrupted = corrupted;
    kvc_req_state *batch[NREQ];
    size_t n = (op & 0x80) ? fz_u8(&f) % (NREQ + 1) : 1;
    for (size_t i = 0; i < n; i++) batch[i] = &req[fz_u8(&f) % NREQ]; /* duplicates too */
    kvc_req_state *r = &req[fz_u8(&f) % NREQ];
    kvc_status st = KVC_OK;
    int called = 0, kind = 0, atomic = 1;
    snap s0, s1;
#define CALL(expr) (take(&w, &s0, 0), called = 1, st = (expr))
    switch (op & 7) {
    case 0: /* extend: fresh requests (maybe a session turn / an early Mamba slot), or continue */
      for (size_t i = 0; i < n; i++) {
        kvc_req_state *q = batch[i];
        const int idx = (int)(q - req);
        const uint8_t b = fz_u8(&f);
        int matched = 0;
        if (!q->req_row) {
          q->prefix_slots = NULL, q->prefix_len = 0;
          /* One session per request slot; a session-bound request is always matched first
           * (finishing an unmatched turn of a live session is engine misuse), and never
           * holds an early Mamba slot (the match would overwrite it). */
          if (use_sess) q->session_id = (b & 1) && q->mamba_slot <= 0 ? 1 + (uint64_t)idx : 0;
          if (q->session_id) /* num_tokens below the committed length: a rewind, MISUSE */
            FZ_STATUS(kvc_session_cache_match(w.sc, q, (b & 2) ? WIDTH : fz_u8(&f) % WIDTH, &matched));
          w.lent[idx] |= matched;
          int32_t m; /* SGLang 12.9: the Mamba slot taken before the row */
          if ((b & 4) && q->mamba_slot <= 0 && kvc_mamba_pool_alloc(w.mp, 1, &m, NULL) == KVC_OK) q->mamba_slot = m;
        }
        if (q->req_row && !matched) q->prefix_len = q->kv_allocated_len; /* chunked continuation */
        q->seq_len = q->prefix_len < WIDTH ? q->prefix_len + fz_u8(&f) % 24 : q->prefix_len;
      }
      CALL(kvc_flow_alloc_for_extend(w.flow, batch, n, g_dout, NULL));
      break;
    case 1: /* decode, token_per_req 1 (the decode kernel) or 2-3 (the extend path) */
      for (size_t i = 0; i < n; i++) batch[i]->seq_len = batch[i]->kv_allocated_len;
      CALL(kvc_flow_alloc_for_decode(w.flow, batch, n, (int32_t)(1 + fz_u8(&f) % 3), g_dout, NULL));
      break;
    case 2:
      CALL(kvc_flow_release(w.flow, batch, n, fz_u8(&f) & 1, NULL));
      for (size_t i = 0; st == KVC_OK && i < n; i++) w.lent[batch[i] - req] = 0;
      break;
    case 3: CALL(kvc_flow_cache_unfinished(w.flow, r)); break;
    case 4: CALL(kvc_flow_evict(w.flow, fz_int(&f, 64))); break;
    case 5:
      if (w.sc) CALL(kvc_session_cache_release(w.sc, w.flow, (uint64_t)fz_u8(&f) % (NREQ + 1)));
      break;
    case 6: { /* legit engine writes: flags, and committed rolled back (speculative decoding) */
      const uint8_t b = fz_u8(&f);
      r->flags = b & (KVC_REQ_CHUNKED | KVC_REQ_SKIP_CACHE_INSERT);
      if ((b & 4) && r->kv_allocated_len >= 0 && r->kv_allocated_len <= WIDTH)
        r->kv_committed_len = fz_u8(&f) % (r->kv_allocated_len + 1);
      break;
    }
    default: { /* junk in one state; kept, or for one call and undone if the call fails */
      int32_t v;
      kind = fz_u8(&f);
      memcpy(saved, req, sizeof saved);
      /* atomic: the junk is of a kind the flows validate before changing anything (a row
       * or Mamba slot not held, a length out of range), so a failed call must still
       * change nothing; plausible junk (another request's row, a wrong in-range length)
       * can fail half-way through a batch and is only required to give a known status. */
      switch (kind % 6) {
      case 0: v = r->req_row = (int32_t)fz_int(&f, ROWS), atomic = v && !kvc_req_to_token_pool_is_held(w.rp, v); break;
      case 1:
        v = r->mamba_slot = (int32_t)fz_int(&f, w.msize), atomic = v > 0 && !kvc_mamba_pool_is_held(w.mp, v);
        break;
      case 2:
        v = r->mamba_track[kind >> 7] = (int32_t)fz_int(&f, w.msize),
        atomic = v > 0 && !kvc_mamba_pool_is_held(w.mp, v);
        break;
      case 3:
        r->kv_allocated_len = fz_int(&f, WIDTH), atomic = r->kv_allocated_len < 0 || r->kv_allocated_len > WIDTH;
        break;
      case 4: r->kv_committed_len = fz_int(&f, WIDTH); break; /* validated, or legit in [0, allocated] */
      default: /* NULL handles / arguments; the row argument of free_mamba_cache is junk */
        FZ_STATUS(kvc_flow_alloc_for_extend(w.flow, NULL, 1, g_dout, NULL));
        FZ_STATUS(kvc_flow_release(w.flow, NULL, 2, 0, NULL));
        CALL(kvc_hybrid_req_pool_free_mamba_cache(w.hp, (int32_t)fz_int(&f, ROWS), (int32_t)fz_int(&f, 1), NULL));
        if (st == KVC_OK) corrupted = 1; /* freed some row's state behind the flow */
        break;
      }
      if (kind % 6 == 5) break;
      if (kind & 8) {
        kvc_req_state *one[1] = {r};
        switch ((kind >> 4) & 3) {
        case 0: /* a fresh one leaves its session: a new turn would be matched first */
          if (!r->req_row) r->session_id = 0;
          r->prefix_len = r->req_row ? r->kv_allocated_len : 0;
          r->seq_len = r->prefix_len >= 0 && r->prefix_len < WIDTH ? r->prefix_len + 4 : r->prefix_len;
          CALL(kvc_flow_alloc_for_extend(w.flow, one, 1, g_dout, NULL));
          break;
        case 1:
          r->seq_len = r->kv_allocated_len, CALL(kvc_flow_alloc_for_decode(w.flow, one, 1, 1, g_dout, NULL));
          break;
        case 2: batch[0] = r, CALL(kvc_flow_release(w.flow, batch, n ? n : 1, 1, NULL)); break;
        default: CALL(kvc_flow_cache_unfinished(w.flow, r)); break;
        }
        if (st != KVC_OK) memcpy(req, saved, sizeof saved); /* nothing changed: undo the junk */
      }
      if (!(kind & 8) || st == KVC_OK || !atomic) /* kept, accepted, or a half-done batch */
        corrupted |= kind % 6 != 4 || r->kv_committed_len < 0 || r->kv_committed_len > r->kv_allocated_len;
      break;
    }
    }
    FZ_STATUS(st);
    for (int i = -1; trace && i < NREQ; i++) /* FZ_TRACE=1 <harness> <input> */
      i < 0 ? fprintf(stderr, "step %d op %u kind %d n %zu -> %s %s\n", step, op, kind, n, kvc_status_name(st),
                      st ? kvc_last_error(g_ctx) : "")
            : fprintf(stderr, "  req%d row %d mamba %d track %d %d alloc %lld committed %lld sess %d lent %d\n", i,
                      req[i].req_row, req[i].mamba_slot, req[i].mamba_track[0], req[i].mamba_track[1],
                      (long long)req[i].kv_allocated_len, (long long)req[i].kv_committed_len, (int)req[i].session_id,
                      w.lent[i]);
    if (called && st != KVC_OK && atomic && !was_corrupted && (take(&w, &s1, 0), memcmp(&s0, &s1, sizeof s0)))
      FAIL("failed call (%s) changed pools: held pages %lld->%lld free rows %lld->%lld free Mamba %lld->%lld",
           kvc_last_error(g_ctx), (long long)s0.held_pages, (long long)s1.held_pages, (long long)s0.rows,
           (long long)s1.rows, (long long)s0.mamba, (long long)s1.mamba);
    /* Full audits after every FZ_AUDIT_EVERY-th call that changed state; a failed call
     * is checked above (its pools' counters unchanged) and by the next full audit, at
     * the latest the one after the loop. */
    if (st == KVC_OK && ++oks % FZ_AUDIT_EVERY == 0) check(&w, !corrupted);
  }
  check(&w, !corrupted);
  /* Release everything still live; then every page, row and Mamba slot must be free. */
  for (int i = 0; i < NREQ; i++) {
    kvc_req_state *one[1] = {&req[i]};
    kvc_status st = req[i].req_row || req[i].mamba_slot > 0 ? kvc_flow_release(w.flow, one, 1, i & 1, NULL) : KVC_OK;
    FZ_STATUS(st);
    if (!corrupted && st != KVC_OK) FAIL("final release of req%d: %s", i, kvc_last_error(g_ctx));
  }
  for (uint64_t id = 1; w.sc && id <= NREQ; id++) {
    kvc_status st = kvc_session_cache_release(w.sc, w.flow, id); /* INVALID_ARGUMENT: no such session */
    FZ_STATUS(st);
    if (!corrupted && st != KVC_OK && st != KVC_ERR_INVALID_ARGUMENT)
      FAIL("session %d: %s", (int)id, kvc_last_error(g_ctx));
  }
  if (!corrupted) {
    FZ_AUDIT(toy_evict(&w.t, w.flow, 0, 0, w.t.n));
    for (int i = 0; i < NREQ; i++)
      if (req[i].req_row || req[i].mamba_slot > 0) FAIL("req%d still holds a row or a Mamba slot", i);
    snap e;
    check(&w, 1), take(&w, &e, 1); /* free rows map nothing; then the totals */
    if (e.held_pages || e.rows != ROWS || e.mamba != w.msize || e.sess_reqs)
      FAIL("leak at the end: %lld pages, %lld rows, %lld Mamba slots held", (long long)e.held_pages,
           (long long)(ROWS - e.rows), (long long)(w.msize - e.mamba));
  }
  kvc_flow_destroy(w.flow), kvc_session_cache_destroy(w.sc), kvc_allocator_destroy(w.a);
  kvc_hybrid_req_pool_destroy(w.hp), kvc_mamba_pool_destroy(w.mp), kvc_req_to_token_pool_destroy(w.rp);
  return 0;
}
