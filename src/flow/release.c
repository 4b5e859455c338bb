/*
 * release.c — finished and unfinished requests (SGLang release_kv_cache,
 * maybe_cache_unfinished_req) and the built-in chunk cache.
 *
 * A batch of finished requests is released inside one allocator free group, so the
 * pages of all of them go back in one sorted-unique release (SGLang's scheduler does the
 * same around its per-request calls). Everything is validated before the first free.
 */
#include "flow.h"

#include <string.h>

/* --- The chunk cache (no prefix reuse) ---------------------------------------------- */

static int chunk_is_chunk(void *self) {
  (void)self;
  return 1;
}

kvc_status kvc__chunk_cache_finished(void *self, kvc_flow *flow, kvc_req_state *req, int is_insert) {
  (void)self;
  (void)is_insert;
  /* SGLang ChunkCache: the committed KV is simply freed. */
  int64_t committed = req->kv_committed_len;
  if (committed <= 0) return KVC_OK;
  KVC_FORWARD(kvc_flow_row_slots(flow, req->req_row, 0, committed, flow->row_slots));
  return kvc_flow_free_slots(flow, flow->row_slots, (size_t)committed);
}

kvc_status kvc__chunk_cache_unfinished(void *self, kvc_flow *flow, kvc_req_state *req) {
  (void)self;
  (void)flow;
  /* The next chunk's prefix is the row itself. */
  req->prefix_slots = NULL;
  req->prefix_len = req->kv_committed_len;
  return KVC_OK;
}

kvc_prefix_cache kvc_chunk_cache(void) {
  kvc_prefix_cache c;
  memset(&c, 0, sizeof c);
  c.is_chunk_cache = chunk_is_chunk;
  c.cache_finished_req = kvc__chunk_cache_finished;
  c.cache_unfinished_req = kvc__chunk_cache_unfinished;
  return c;
}

/* --- Release ------------------------------------------------------------------------- */

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

static kvc_status release_one(kvc_flow *f, kvc_req_state *r, int is_insert) {
  kvc_prefix_cache *c = &f->cache;
  if (r->req_row == 0) return kvc__flow_free_mamba(f, r); /* Mamba state taken early */
  int insert = is_insert && !(r->flags & KVC_REQ_SKIP_CACHE_INSERT);
  int supports = c->supports_mamba ? c->supports_mamba(c->self) : 0;
  /* The Mamba release writes the device mapping (a launch that can fail): with the
   * built-in finisher (which never keeps the row) do it first, so a failure leaves this
   * request wholly unreleased instead of its KV freed but its row held (a retry would
   * then double-free). Caches that may keep the row (sessions) need the old order. */
  const bool chunk = !c->cache_finished_req || c->cache_finished_req == kvc__chunk_cache_finished;
  if (!supports && chunk) KVC_FORWARD(kvc__flow_free_mamba(f, r));
  if (c->cache_finished_req) KVC_FORWARD(c->cache_finished_req(c->self, f, r, insert));
  else KVC_FORWARD(kvc__chunk_cache_finished(NULL, f, r, insert));
  if (r->req_row == 0) return KVC_OK; /* a streaming session kept the row */
  /* The over-allocated tail; its first partial page went with [0, committed). */
  int64_t start = r->kv_committed_len, end = r->kv_allocated_len;
  if (f->ps > 1) start = kvc__ceil_align(start, f->ps);
  if (start < end) {
    KVC_FORWARD(kvc_flow_row_slots(f, r->req_row, start, end, f->row_slots));
    KVC_FORWARD(kvc_flow_free_slots(f, f->row_slots, (size_t)(end - start)));
  }
  if (!supports && !chunk) KVC_FORWARD(kvc__flow_free_mamba(f, r));
  KVC_FORWARD(kvc_req_to_token_pool_free(f->cfg.req_pool, r->req_row));
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
      if (r->mamba_slot <= 0)
        return kvc__error(f->ctx, KVC_ERR_MISUSE, fn, "reqs[%zu] holds neither a row nor a Mamba slot (released twice?)", i);
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
  KVC_FORWARD(kvc__flow_group_begin(f));
  kvc_status st = KVC_OK;
  for (size_t i = 0; i < n && st == KVC_OK; i++) st = release_one(f, reqs[i], is_insert);
  KVC_CLEANUP_KEEP_FIRST(kvc__flow_group_end(f), st);
  return st;
}

kvc_status kvc_flow_cache_unfinished(kvc_flow *f, kvc_req_state *req) {
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
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  const kvc_allocator *full = f->alloc;
  if (f->swa) {
    KVC_FORWARD(kvc_swa_allocator_check(f->swa));
    full = kvc_swa_allocator_full(f->swa);
  } else {
    KVC_FORWARD(kvc_allocator_check(f->alloc));
  }
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
    held += (live[i]->kv_allocated_len + f->ps - 1) / f->ps;
  }
  int64_t cached = f->cache.cached_size ? f->cache.cached_size(f->cache.self) : 0;
  held += (cached + f->ps - 1) / f->ps;
  if (held != s.held_pages)
    return kvc__error(f->ctx, KVC_ERR_INTERNAL, __func__,
                      "conservation: allocator holds %lld pages, live requests + cache account for %lld "
                      "(free %lld, deferred %lld, total %lld)",
                      (long long)s.held_pages, (long long)held, (long long)s.free_pages,
                      (long long)s.deferred_pages, (long long)s.num_pages);
  return KVC_OK;
}
