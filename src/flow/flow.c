/*
 * flow.c — level 3: the per-step allocation calls of a scheduler (SGLang common.py).
 *
 * A step is decided entirely on the host: request rows from the req pool's FIFO, slots
 * from the allocator's free list, last_loc from the req_to_token mirror or the matched
 * prefix. The device sees one planned launch (out_cache_loc + table rows); nothing is
 * read back. Capacity is checked before anything is taken, so an out-of-memory step
 * leaves every object as it was (SGLang leaves the request rows allocated, spec 15.14).
 *
 *   alloc_for_extend:  validate -> [SWA window eviction] -> capacity check (rows, pages,
 *                      after asking the cache to evict) -> rows -> slots + rows (1 launch)
 *   alloc_for_decode:  validate -> [SWA window eviction] -> evict/check -> slots (1 launch)
 */
#include "flow.h"

#include <stdio.h>
#include <string.h>

/* --- Cache callbacks with defaults -------------------------------------------------- */

static int cache_is_chunk(const kvc_flow *f) {
  return f->cache.is_chunk_cache ? f->cache.is_chunk_cache(f->cache.self) : 0;
}
static int64_t cache_size(int64_t (*fn)(void *), void *self) { return fn ? fn(self) : 0; }

/* --- Handle, scratch ----------------------------------------------------------------- */

kvc_status kvc__flow_check_handle(const kvc_flow *flow, const char *fn) {
  if (!flow) return kvc__error(NULL, KVC_ERR_INVALID_ARGUMENT, fn, "flow is NULL");
  if (flow->magic != KVC__FLOW_MAGIC) return kvc__error(NULL, KVC_ERR_INVALID_ARGUMENT, fn, "not a live flow");
  return KVC_OK;
}

kvc_status kvc__flow_reserve(kvc_flow *f, const char *fn, size_t n) {
  if (n <= f->cap) return KVC_OK;
  size_t cap = f->cap ? f->cap : 64;
  while (cap < n) cap *= 2;
  int32_t *rows = kvc__calloc(f->ctx, cap, sizeof *rows);
  uint8_t *fresh = kvc__calloc(f->ctx, cap, 1);
  int64_t *pl = kvc__calloc(f->ctx, cap, 8), *sl = kvc__calloc(f->ctx, cap, 8), *ll = kvc__calloc(f->ctx, cap, 8);
  const int64_t **ps = kvc__calloc(f->ctx, cap, sizeof *ps);
  if (!rows || !fresh || !pl || !sl || !ll || !ps) {
    kvc__free(f->ctx, rows);
    kvc__free(f->ctx, fresh);
    kvc__free(f->ctx, pl);
    kvc__free(f->ctx, sl);
    kvc__free(f->ctx, ll);
    kvc__free(f->ctx, (void *)ps);
    return kvc__error(f->ctx, KVC_ERR_HOST_OOM, fn, "scratch for %zu requests", n);
  }
  kvc__free(f->ctx, f->rows);
  kvc__free(f->ctx, f->fresh);
  kvc__free(f->ctx, f->prefix_lens);
  kvc__free(f->ctx, f->seq_lens);
  kvc__free(f->ctx, f->last_locs);
  kvc__free(f->ctx, (void *)f->prefix_slots);
  f->rows = rows;
  f->fresh = fresh;
  f->prefix_lens = pl;
  f->seq_lens = sl;
  f->last_locs = ll;
  f->prefix_slots = ps;
  f->cap = cap;
  return KVC_OK;
}

kvc_status kvc_flow_create(kvc_context *ctx, const kvc_flow_config *config, kvc_flow **out) {
  KVC_RETURN_IF(!ctx, NULL, KVC_ERR_INVALID_ARGUMENT, "ctx is NULL");
  KVC_RETURN_IF(!config || !out, ctx, KVC_ERR_INVALID_ARGUMENT, "config or out is NULL");
  KVC_RETURN_IF(config->struct_size < offsetof(kvc_flow_config, reserved_) || config->struct_size > sizeof(kvc_flow_config),
                ctx, KVC_ERR_VERSION, "config.struct_size %zu not understood", config->struct_size);
  kvc_flow_config cfg = KVC_FLOW_CONFIG_INIT;
  memcpy(&cfg, config, config->struct_size);
  KVC_RETURN_IF(!cfg.req_pool, ctx, KVC_ERR_INVALID_ARGUMENT, "config.req_pool is NULL");
  KVC_RETURN_IF(cfg.swa_allocator || cfg.hybrid_req_pool, ctx, KVC_ERR_UNSUPPORTED,
                "SWA and hybrid pools are bound through kvc_flow_create only once their pools exist");
  KVC_RETURN_IF(!cfg.allocator, ctx, KVC_ERR_INVALID_ARGUMENT, "config.allocator is NULL");
  KVC_RETURN_IF(cfg.page_size != kvc_allocator_page_size(cfg.allocator), ctx, KVC_ERR_INVALID_ARGUMENT,
                "config.page_size %d differs from the allocator's %d", cfg.page_size,
                kvc_allocator_page_size(cfg.allocator));
  KVC_RETURN_IF(cfg.sliding_window < 0 || cfg.spec_num_steps < 0 || cfg.spec_topk < 0 || cfg.spec_num_draft_tokens < 0,
                ctx, KVC_ERR_INVALID_ARGUMENT, "negative window or speculative setting");
  KVC_RETURN_IF(cfg.sliding_window > 0, ctx, KVC_ERR_INVALID_ARGUMENT,
                "sliding_window needs an SWA allocator (config.swa_allocator)");
  kvc_flow *f = kvc__calloc(ctx, 1, sizeof *f);
  KVC_RETURN_IF(!f, ctx, KVC_ERR_HOST_OOM, "flow");
  f->magic = KVC__FLOW_MAGIC;
  f->ctx = ctx;
  f->cfg = cfg;
  f->cache = cfg.cache;
  if (!f->cache.self && !f->cache.cache_finished_req && !f->cache.is_chunk_cache) f->cache = kvc_chunk_cache();
  f->width = kvc_req_to_token_pool_max_context_len(cfg.req_pool);
  f->ps = cfg.page_size;
  f->row_slots = kvc__calloc(ctx, (size_t)f->width + 1, sizeof *f->row_slots);
  kvc_status st = f->row_slots ? kvc__flow_reserve(f, __func__, 64) : KVC_ERR_HOST_OOM;
  if (st != KVC_OK) {
    kvc_flow_destroy(f);
    return st == KVC_ERR_HOST_OOM ? kvc__error(ctx, st, __func__, "flow scratch") : st;
  }
  *out = f;
  return KVC_OK;
}

void kvc_flow_destroy(kvc_flow *f) {
  if (!f || f->magic != KVC__FLOW_MAGIC) return;
  kvc_context *ctx = f->ctx;
  kvc__free(ctx, f->rows);
  kvc__free(ctx, f->fresh);
  kvc__free(ctx, f->prefix_lens);
  kvc__free(ctx, f->seq_lens);
  kvc__free(ctx, f->last_locs);
  kvc__free(ctx, (void *)f->prefix_slots);
  kvc__free(ctx, f->row_slots);
  f->magic = 0;
  kvc__free(ctx, f);
}

/* --- Small shared helpers ------------------------------------------------------------ */

kvc_status kvc_flow_row_slots(const kvc_flow *f, int32_t row, int64_t start, int64_t end, int64_t *out) {
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  KVC_RETURN_IF(start < 0 || end < start || end > f->width || (end > start && !out), f->ctx,
                KVC_ERR_INVALID_ARGUMENT, "range [%lld, %lld) outside the row width %d",
                (long long)start, (long long)end, f->width);
  const int32_t *m = kvc_req_to_token_pool_row(f->cfg.req_pool, row);
  KVC_RETURN_IF(!m, f->ctx, KVC_ERR_INVALID_ARGUMENT, "row %d out of range", row);
  for (int64_t i = start; i < end; i++) out[i - start] = m[i];
  return KVC_OK;
}

kvc_status kvc_flow_free_slots(kvc_flow *f, const int64_t *slots, size_t n) {
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  if (!n) return KVC_OK;
  return kvc_allocator_free(f->cfg.allocator, slots, n);
}

kvc_status kvc_flow_available(const kvc_flow *f, int64_t *available, int64_t *evictable, int64_t *protected_size,
                              int64_t *cached) {
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  if (available) *available = kvc_allocator_available_size(f->cfg.allocator);
  if (evictable) *evictable = cache_size(f->cache.evictable_size, f->cache.self);
  if (protected_size) *protected_size = cache_size(f->cache.protected_size, f->cache.self);
  if (cached) *cached = cache_size(f->cache.cached_size, f->cache.self);
  return KVC_OK;
}

kvc_status kvc_flow_evict(kvc_flow *f, int64_t num_tokens) {
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  KVC_RETURN_IF(num_tokens < 0, f->ctx, KVC_ERR_INVALID_ARGUMENT, "num_tokens %lld < 0", (long long)num_tokens);
  if (cache_is_chunk(f) || !f->cache.evict) return KVC_OK;
  /* SGLang asks for n (not the deficit) with a single pool. */
  if (kvc_allocator_available_size(f->cfg.allocator) < num_tokens)
    return f->cache.evict(f->cache.self, f, num_tokens, 0, 0);
  return KVC_OK;
}

static kvc_status out_of_memory(kvc_flow *f, const char *fn, const char *what, int64_t tokens) {
  int64_t avail = 0, evictable = 0, prot = 0;
  kvc_flow_available(f, &avail, &evictable, &prot, NULL);
  return kvc__error(f->ctx, KVC_ERR_OUT_OF_SLOTS, fn,
                    "%s out of memory. Try to lower your batch size. Try to allocate %lld tokens. "
                    "available_size=%lld, evictable_size=%lld, protected_size=%lld",
                    what, (long long)tokens, (long long)avail, (long long)evictable, (long long)prot);
}

/* Pages a request needs to grow from p to s tokens (SGLang get_num_new_pages). */
static int64_t new_pages(int64_t p, int64_t s, int64_t ps) { return (s + ps - 1) / ps - (p + ps - 1) / ps; }

/* --- alloc_for_extend ---------------------------------------------------------------- */

kvc_status kvc_flow_alloc_for_extend(kvc_flow *f, kvc_req_state *const *reqs, size_t n, int64_t *out_cache_loc,
                                     kvc_stream stream) {
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  if (n == 0) return KVC_OK;
  KVC_RETURN_IF(!reqs, f->ctx, KVC_ERR_INVALID_ARGUMENT, "reqs is NULL");
  KVC_FORWARD(kvc__flow_reserve(f, __func__, n));
  kvc_req_to_token_pool *pool = f->cfg.req_pool;
  const int64_t ps = f->ps;
  int64_t extend_tokens = 0, pages = 0;
  int32_t need_rows = 0;
  for (size_t i = 0; i < n; i++) {
    const kvc_req_state *r = reqs[i];
    KVC_RETURN_IF(!r, f->ctx, KVC_ERR_INVALID_ARGUMENT, "reqs[%zu] is NULL", i);
    KVC_RETURN_IF(r->prefix_len < 0 || r->seq_len < r->prefix_len || r->seq_len > f->width, f->ctx,
                  KVC_ERR_INVALID_ARGUMENT, "reqs[%zu]: prefix_len %lld / seq_len %lld invalid (row width %d)", i,
                  (long long)r->prefix_len, (long long)r->seq_len, f->width);
    if (r->req_row) {
      KVC_RETURN_IF(!kvc_req_to_token_pool_is_held(pool, r->req_row), f->ctx, KVC_ERR_MISUSE,
                    "reqs[%zu]: req_row %d is not a held row", i, r->req_row);
      /* Rewinding over allocated slots would orphan them (their row entries get
       * overwritten): the engine must release or trim them first. */
      KVC_RETURN_IF(r->prefix_len < r->kv_allocated_len, f->ctx, KVC_ERR_MISUSE,
                    "reqs[%zu]: prefix_len %lld is below kv_allocated_len %lld of its row (rewind)", i,
                    (long long)r->prefix_len, (long long)r->kv_allocated_len);
    } else {
      need_rows++;
      /* A fresh row holds nothing: the prefix must come from prefix_slots. */
      KVC_RETURN_IF(r->prefix_len > 0 && !r->prefix_slots, f->ctx, KVC_ERR_INVALID_ARGUMENT,
                    "reqs[%zu]: prefix_len %lld without prefix_slots for a request with no row", i,
                    (long long)r->prefix_len);
    }
    extend_tokens += r->seq_len - r->prefix_len;
    pages += new_pages(r->prefix_len, r->seq_len, ps);
    f->prefix_lens[i] = r->prefix_len;
    f->seq_lens[i] = r->seq_len;
    f->prefix_slots[i] = r->prefix_slots;
  }
  /* SGLang: evict for extend_num_tokens (+ one page per request when paged). */
  KVC_FORWARD(kvc_flow_evict(f, ps == 1 ? extend_tokens : extend_tokens + (int64_t)n * ps));
  if (need_rows > kvc_req_to_token_pool_available(pool))
    return kvc__error(f->ctx, KVC_ERR_OUT_OF_SLOTS, __func__,
                      "alloc_req_slots runs out of memory. Please set a smaller number for max running "
                      "requests. available_size=%d, num_reqs=%zu, new rows=%d",
                      kvc_req_to_token_pool_available(pool), n, need_rows);
  if (pages * ps > kvc_allocator_available_size(f->cfg.allocator)) return out_of_memory(f, __func__, "Prefill", extend_tokens);

  /* Rows: kept for requests that hold one, next FIFO rows for the others. */
  for (size_t i = 0; i < n; i++) {
    f->rows[i] = reqs[i]->req_row;
    f->fresh[i] = reqs[i]->req_row == 0;
  }
  KVC_FORWARD(kvc_req_to_token_pool_alloc(pool, n, f->rows));
  /* last_loc: from the matched prefix, else from the row (chunked / resumed). */
  for (size_t i = 0; i < n; i++) {
    const kvc_req_state *r = reqs[i];
    int64_t p = r->prefix_len;
    if (p == 0) f->last_locs[i] = -1;
    else if (r->prefix_slots) f->last_locs[i] = r->prefix_slots[p - 1];
    else f->last_locs[i] = kvc_req_to_token_pool_row(pool, f->rows[i])[p - 1];
  }
  kvc_status st = kvc_allocator_alloc_extend(f->cfg.allocator, n, f->prefix_lens, f->seq_lens, f->last_locs, pool,
                                             f->rows, f->prefix_slots, NULL, out_cache_loc, stream);
  if (st != KVC_OK) {
    /* Give back the rows this call took (SGLang leaves them allocated). */
    for (size_t i = n; i-- > 0;)
      if (f->fresh[i]) kvc_req_to_token_pool_free(pool, f->rows[i]);
    return st == KVC_ERR_OUT_OF_SLOTS ? out_of_memory(f, __func__, "Prefill", extend_tokens) : st;
  }
  for (size_t i = 0; i < n; i++) {
    kvc_req_state *r = reqs[i];
    r->req_row = f->rows[i];
    r->kv_allocated_len = r->kv_committed_len = r->seq_len;
    r->prefix_slots = NULL; /* the row holds the prefix now */
  }
  return KVC_OK;
}

/* --- alloc_for_decode ---------------------------------------------------------------- */

kvc_status kvc_flow_alloc_for_decode(kvc_flow *f, kvc_req_state *const *reqs, size_t n, int32_t token_per_req,
                                     int64_t *out_cache_loc, kvc_stream stream) {
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  if (n == 0) return KVC_OK;
  KVC_RETURN_IF(!reqs, f->ctx, KVC_ERR_INVALID_ARGUMENT, "reqs is NULL");
  KVC_RETURN_IF(token_per_req < 1, f->ctx, KVC_ERR_INVALID_ARGUMENT, "token_per_req %d < 1", token_per_req);
  KVC_FORWARD(kvc__flow_reserve(f, __func__, n));
  kvc_req_to_token_pool *pool = f->cfg.req_pool;
  const int64_t ps = f->ps;
  for (size_t i = 0; i < n; i++) {
    const kvc_req_state *r = reqs[i];
    KVC_RETURN_IF(!r, f->ctx, KVC_ERR_INVALID_ARGUMENT, "reqs[%zu] is NULL", i);
    KVC_RETURN_IF(r->seq_len < 1 || r->seq_len + token_per_req > f->width, f->ctx, KVC_ERR_INVALID_ARGUMENT,
                  "reqs[%zu]: seq_len %lld (+%d) outside the row width %d", i, (long long)r->seq_len, token_per_req,
                  f->width);
    f->rows[i] = r->req_row;
    f->prefix_lens[i] = r->seq_len;
    f->seq_lens[i] = r->seq_len + token_per_req;
  }
  /* The allocator validates rows and last_locs (from the mirror) and fails without
   * changing anything, so no separate capacity check is needed here. */
  KVC_FORWARD(kvc_flow_evict(f, ps == 1 ? (int64_t)n * token_per_req : (int64_t)n * ps));
  kvc_status st;
  if (token_per_req == 1) {
    st = kvc_allocator_alloc_decode(f->cfg.allocator, n, f->seq_lens, NULL, pool, f->rows, NULL, out_cache_loc,
                                    stream);
  } else {
    st = kvc_allocator_alloc_extend(f->cfg.allocator, n, f->prefix_lens, f->seq_lens, NULL, pool, f->rows, NULL,
                                    NULL, out_cache_loc, stream);
  }
  if (st == KVC_ERR_OUT_OF_SLOTS) return out_of_memory(f, __func__, "Decode", (int64_t)n * token_per_req);
  KVC_FORWARD(st);
  for (size_t i = 0; i < n; i++) {
    kvc_req_state *r = reqs[i];
    r->seq_len += token_per_req;
    r->kv_allocated_len = r->kv_committed_len = r->seq_len;
  }
  return KVC_OK;
}

/* --- Speculative-decoding reservations (SGLang 12.10) -------------------------------- */

int64_t kvc_flow_alloc_len_per_decode(const kvc_flow *f) {
  if (!f || f->magic != KVC__FLOW_MAGIC || f->cfg.spec_num_steps == 0) return 1;
  int64_t steps = f->cfg.spec_num_steps ? f->cfg.spec_num_steps : 1;
  int64_t topk = f->cfg.spec_topk ? f->cfg.spec_topk : 1;
  int64_t T = f->cfg.spec_num_draft_tokens, ps = f->ps;
  int64_t v = (ps == 1 || topk == 1 || !f->cfg.spec_keeps_draft_kv) ? steps * topk
                                                                      : (ps - 1 + steps + ps - 1) / ps * ps * topk;
  return v > T ? v : T;
}

int64_t kvc_flow_extra_context_len(const kvc_flow *f) {
  if (!f || f->magic != KVC__FLOW_MAGIC) return 4;
  int64_t extra = 4 + f->cfg.spec_num_draft_tokens;
  if (f->cfg.spec_num_steps && f->ps > 1 && f->cfg.spec_topk > 1) {
    int64_t reserve = 2 * kvc_flow_alloc_len_per_decode(f);
    if (reserve > extra) extra = reserve;
  }
  return extra;
}
