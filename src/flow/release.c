/*
 * release.c — finished and unfinished requests (SGLang release_kv_cache,
 * maybe_cache_unfinished_req); the built-in chunk cache is src/cache/chunk_cache.c.
 *
 * A batch of finished requests is released inside one allocator free group, so the
 * pages of all of them go back in one sorted-unique release (SGLang's scheduler does the
 * same around its per-request calls). Everything is validated before the first free; a
 * failure after that stops the batch at one request (see "Release" below).
 */
#include "flow.h"

#include <string.h>

/* --- Release ------------------------------------------------------------------------- */
/*
 * What a failure in the middle of a batch leaves (the contract in kvcache.h).
 *
 * Not all-or-nothing, because the batch cannot be taken back once part of it is applied:
 * a prefix cache's cache_finished_req (a radix insert, a session taking the row) is the
 * engine's code and has no undo; a Mamba release and an SWA free each write a device
 * mapping in their own launch and the pools have no "un-free" (the freed ids go to the
 * back of FIFOs that other calls read). Atomicity for the batch would need a two-phase
 * free (plan every launch, then commit) in every pool, and a cache callback that can be
 * rolled back. So the unit is the request, and each request is released as a sequence of
 * steps that are each transactional (one pool call that fails having changed nothing);
 * after each step the request's state is updated to say what it still holds:
 *
 *   chunk cache (built in):  [Mamba] -> KV: [0, committed) ++ tail in ONE free -> row
 *   any other cache:         callback -> tail -> [Mamba] -> row
 *
 * The first failure stops the batch: earlier requests are completely released (req_row
 * and mamba_slot 0, lengths 0), later ones untouched. With the chunk cache the request
 * that failed is untouched as well, because only its first step can fail on a sound
 * state: a plain allocator's free cannot fail once its input is valid, an SWA free
 * launches before it changes anything, and a hybrid request's Mamba launch goes first.
 * Hybrid flows over an SWA allocator have two launches that cannot be made one: the
 * Mamba state may already be back (mamba_slot 0) when the KV free fails. The combined
 * free keeps SGLang's order ([0, committed) then the tail; a token allocator releases a
 * group in call order), which is also why the tail cannot move before a cache's callback.
 * With another cache, a failure after the callback took [0, committed) cannot be undone;
 * the row is then marked in row_cached so that the next release continues after the
 * callback (never calling it twice, never freeing the committed part twice). The row free
 * cannot fail once validated. The free group is closed on every path.
 *
 * A request that holds nothing (req_row 0, no Mamba slot) is skipped, so releasing the
 * whole batch again after a failure finishes it.
 */

kvc_status kvc__flow_free_mamba(kvc_flow *f, kvc_req_state *r) {
  if (!f->hybrid) return KVC_OK;
  if (r->req_row && kvc_hybrid_req_pool_mamba_slot(f->hybrid, r->req_row) > 0) {
    KVC_FORWARD(kvc_hybrid_req_pool_free_mamba_cache(f->hybrid, r->req_row, -1, f->stream));
  } else if (r->mamba_slot > 0) { /* a slot taken before any row (SGLang 12.9 step 1) */
    KVC_FORWARD(kvc_mamba_pool_free(f->mamba, &r->mamba_slot, 1));
  }
  r->mamba_slot = 0;
  r->mamba_track[0] = r->mamba_track[1] = 0;
  return KVC_OK;
}

/* Frees row[a0, a1) ++ row[b0, b1) in ONE allocator call, so both ranges go or neither,
 * leaving out the part window eviction released whole (kvc__flow_row_dead; ranges in
 * ascending order, so the result stays in SGLang's free order). */
static kvc_status free_row_ranges(kvc_flow *f, const kvc_req_state *r, int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  int64_t d0, d1;
  kvc__flow_row_dead(f, r, &d0, &d1);
  const int64_t rg[4][2] = {
      {a0, KVC__MIN(a1, d0)}, {KVC__MAX(a0, d1), a1}, {b0, KVC__MIN(b1, d0)}, {KVC__MAX(b0, d1), b1}};
  size_t k = 0; /* with no dead part (d0 = d1 = 0) the even ranges are empty */
  for (int i = 0; i < 4; i++) {
    const int64_t lo = rg[i][0], hi = rg[i][1];
    if (hi <= lo) continue;
    KVC_FORWARD(kvc_flow_row_slots(f, r->req_row, lo, hi, f->row_slots + k));
    k += (size_t)(hi - lo);
  }
  return kvc_flow_free_slots(f, f->row_slots, k); /* k <= width */
}

/* First slot of the over-allocated tail: the page holding the last committed token goes
 * with [0, committed) (SGLang 12.9 step 6). */
static int64_t tail_start(const kvc_flow *f, int64_t committed) {
  return f->ps > 1 ? kvc__ceil_align(committed, f->ps) : committed;
}

static kvc_status release_one(kvc_flow *f, kvc_req_state *r, int is_insert) {
  kvc_prefix_cache *c = &f->cache;
  if (r->req_row == 0) /* Mamba state taken early (SGLang 12.9 step 1), or released */
    return r->mamba_slot > 0 ? kvc__flow_free_mamba(f, r) : KVC_OK;
  const int32_t row = r->req_row;
  const bool mamba = f->hybrid && !(c->supports_mamba && c->supports_mamba(c->self));
  if (!c->cache_finished_req || c->cache_finished_req == kvc__chunk_cache_finished) {
    /* The chunk cache frees [0, committed): together with the tail, one free. */
    const int64_t committed = r->kv_committed_len;
    if (mamba) KVC_FORWARD(kvc__flow_free_mamba(f, r));
    KVC_FORWARD(free_row_ranges(f, r, 0, committed, tail_start(f, committed), r->kv_allocated_len));
  } else {
    /* The callback may keep the row and the Mamba state (sessions), so it goes first and
     * the Mamba state after it; the tail follows it in SGLang's free order. */
    if (!f->row_cached[row]) {
      const int insert = is_insert && !(r->flags & KVC_REQ_SKIP_CACHE_INSERT);
      KVC_FORWARD(c->cache_finished_req(c->self, f, r, insert));
      if (r->req_row == 0) return KVC_OK; /* a streaming session kept the row */
      f->row_cached[row] = 1;             /* [0, committed) is the cache's now */
    }
    const int64_t start = tail_start(f, r->kv_committed_len);
    if (start < r->kv_allocated_len) {
      KVC_FORWARD(free_row_ranges(f, r, 0, 0, start, r->kv_allocated_len));
      r->kv_allocated_len = start;
    }
    if (mamba) KVC_FORWARD(kvc__flow_free_mamba(f, r));
    f->row_cached[row] = 0;
  }
  KVC_FORWARD(kvc_req_to_token_pool_free(f->cfg.req_pool, row)); /* validated: held */
  r->req_row = 0;
  r->kv_committed_len = r->kv_allocated_len = 0;
  return KVC_OK;
}

/* Validates a release batch before anything is freed. Rows are marked in row_seen to
 * find a row listed twice in O(n); *marked counts the entries to unmark. */
static kvc_status validate_release(kvc_flow *f, kvc_req_state *const *reqs, size_t n, size_t *marked) {
  const char *fn = "kvc_flow_release";
  for (size_t i = 0; i < n; i++) {
    const kvc_req_state *r = reqs[i];
    if (!r) return kvc__error(f->ctx, KVC_ERR_INVALID_ARGUMENT, fn, "reqs[%zu] is NULL", i);
    if (r->req_row == 0) {
      /* Holding nothing: released (skipped). A row-less Mamba slot must be held. */
      if (r->mamba_slot > 0 && f->mamba && !kvc_mamba_pool_is_held(f->mamba, r->mamba_slot))
        return kvc__error(f->ctx, KVC_ERR_MISUSE, fn, "reqs[%zu]: mamba_slot %d is not held (released twice?)", i,
                          r->mamba_slot);
      continue;
    }
    if (!kvc_req_to_token_pool_is_held(f->cfg.req_pool, r->req_row))
      return kvc__error(f->ctx, KVC_ERR_MISUSE, fn, "reqs[%zu]: req_row %d is not a held row (released twice?)", i,
                        r->req_row);
    if (r->kv_committed_len < 0 || r->kv_allocated_len < r->kv_committed_len || r->kv_allocated_len > f->width)
      return kvc__error(f->ctx, KVC_ERR_INVALID_ARGUMENT, fn, "reqs[%zu]: committed %lld / allocated %lld invalid", i,
                        (long long)r->kv_committed_len, (long long)r->kv_allocated_len);
    if (f->row_seen[r->req_row])
      return kvc__error(f->ctx, KVC_ERR_MISUSE, fn, "reqs[%d] and reqs[%zu] share row %d", f->row_seen[r->req_row] - 1,
                        i, r->req_row);
    f->row_seen[r->req_row] = (int32_t)i + 1;
    *marked = i + 1;
  }
  return KVC_OK;
}

kvc_status kvc_flow_release(kvc_flow *f, kvc_req_state *const *reqs, size_t n, int is_insert, kvc_stream stream) {
  KVC_API_ENTRY();
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  if (n == 0) return KVC_OK;
  KVC_RETURN_IF(!reqs, f->ctx, KVC_ERR_INVALID_ARGUMENT, "reqs is NULL");
  KVC_RETURN_IF(n > (size_t)INT32_MAX, f->ctx, KVC_ERR_INVALID_ARGUMENT, "n = %zu too large", n);
  size_t marked = 0;
  kvc_status vst = validate_release(f, reqs, n, &marked);
  for (size_t i = 0; i < marked; i++) /* reqs[0, marked) passed the NULL check */
    if (reqs[i]->req_row > 0) f->row_seen[reqs[i]->req_row] = 0;
  if (vst != KVC_OK) return vst;
  f->stream = stream;
  KVC_FORWARD(kvc__slot_group_begin(&f->sa));
  /* A canary refill that fails after its free (kvc_flow_free_slots) is reported once the
   * request it belongs to is completely released. */
  f->releasing = true;
  f->release_late = KVC_OK;
  kvc_status st = KVC_OK;
  for (size_t i = 0; i < n && st == KVC_OK; i++) {
    st = release_one(f, reqs[i], is_insert);
    if (st == KVC_OK) st = f->release_late;
  }
  f->releasing = false;
  KVC_CLEANUP_KEEP_FIRST(kvc__slot_group_end(&f->sa), st);
  return st;
}

kvc_status kvc_flow_cache_unfinished(kvc_flow *f, kvc_req_state *req) {
  KVC_API_ENTRY();
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  KVC_RETURN_IF(!req, f->ctx, KVC_ERR_INVALID_ARGUMENT, "req is NULL");
  KVC_RETURN_IF(!kvc_req_to_token_pool_is_held(f->cfg.req_pool, req->req_row), f->ctx, KVC_ERR_MISUSE,
                "req_row %d is not a held row", req->req_row);
  if (req->flags & KVC_REQ_SKIP_CACHE_INSERT) return KVC_OK;
  if (f->cache.cache_unfinished_req) return f->cache.cache_unfinished_req(f->cache.self, f, req);
  return kvc__chunk_cache_unfinished(NULL, f, req);
}

/* --- Audit --------------------------------------------------------------------------- */

kvc_status kvc_flow_check(const kvc_flow *f, kvc_req_state *const *live, size_t n_live) {
  KVC_API_ENTRY();
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  KVC_FORWARD(f->sa.ops->check(&f->sa));
  const kvc_allocator *full = f->sa.ops->full(&f->sa);
  if (f->mamba) KVC_FORWARD(kvc_mamba_pool_check(f->mamba));
  kvc_allocator_stats s;
  KVC_FORWARD(kvc_allocator_get_stats(full, &s));
  /* Full-side pages: every live request's allocated tokens, plus the cache's. */
  int64_t held = 0;
  for (size_t i = 0; i < n_live; i++) {
    if (!live[i] || !live[i]->req_row) continue;
    KVC_RETURN_IF(live[i]->kv_allocated_len < 0 || live[i]->kv_allocated_len > f->width, f->ctx,
                  KVC_ERR_INVALID_ARGUMENT, "live[%zu]: kv_allocated_len %lld outside [0, %d]", i,
                  (long long)live[i]->kv_allocated_len, f->width);
    /* A request whose release stopped after its cache took [0, committed) holds only
     * the pages past that (release_one). */
    const int32_t row = live[i]->req_row;
    const bool cached = row > 0 && row <= kvc_req_to_token_pool_size(f->cfg.req_pool) && f->row_cached[row];
    /* [0, cache_protected_len) of a live row is the prefix cache's (a radix match). */
    const int64_t from =
        cached ? tail_start(f, live[i]->kv_committed_len) : KVC__MAX(0, live[i]->cache_protected_len) / f->ps * f->ps;
    held += KVC__MAX(0, kvc__ceil_align(live[i]->kv_allocated_len, f->ps) - from) / f->ps;
    int64_t d0, d1; /* what window eviction released whole is nobody's */
    kvc__flow_row_dead(f, live[i], &d0, &d1);
    d0 = KVC__MAX(d0, from);
    if (d1 > d0) held -= (d1 - d0) / f->ps;
  }
  int64_t cached = f->cache.cached_size ? f->cache.cached_size(f->cache.self) : 0;
  held += (cached + f->ps - 1) / f->ps;
  if (held != s.held_pages)
    return kvc__error(f->ctx, KVC_ERR_INTERNAL, __func__,
                      "conservation: allocator holds %lld pages, live requests + cache account for %lld "
                      "(free %lld, deferred %lld, total %lld)",
                      (long long)s.held_pages, (long long)held, (long long)s.free_pages, (long long)s.deferred_pages,
                      (long long)s.num_pages);
  return KVC_OK;
}
