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
#include "../device/context.h"

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

static void free_scratch(kvc_flow *f) {
  kvc__free(f->ctx, f->rows);
  kvc__free(f->ctx, f->fresh);
  kvc__free(f->ctx, f->prefix_lens);
  kvc__free(f->ctx, f->seq_lens);
  kvc__free(f->ctx, f->last_locs);
  kvc__free(f->ctx, (void *)f->prefix_slots);
  kvc__free(f->ctx, f->mamba_slots);
  kvc__free(f->ctx, f->track_slots);
}

kvc_status kvc__flow_reserve(kvc_flow *f, const char *fn, size_t n) {
  if (n <= f->cap) return KVC_OK;
  size_t cap = f->cap ? f->cap : 64;
  while (cap < n) cap *= 2;
  kvc_flow g = *f;
  g.rows = kvc__calloc(f->ctx, cap, sizeof *g.rows);
  g.fresh = kvc__calloc(f->ctx, cap, 1);
  g.prefix_lens = kvc__calloc(f->ctx, cap, 8);
  g.seq_lens = kvc__calloc(f->ctx, cap, 8);
  g.last_locs = kvc__calloc(f->ctx, cap, 8);
  g.prefix_slots = kvc__calloc(f->ctx, cap, sizeof *g.prefix_slots);
  g.mamba_slots = kvc__calloc(f->ctx, cap, sizeof *g.mamba_slots);
  g.track_slots = kvc__calloc(f->ctx, 2 * cap, sizeof *g.track_slots);
  if (!g.rows || !g.fresh || !g.prefix_lens || !g.seq_lens || !g.last_locs || !g.prefix_slots || !g.mamba_slots ||
      !g.track_slots) {
    free_scratch(&g);
    return kvc__error(f->ctx, KVC_ERR_HOST_OOM, fn, "scratch for %zu requests", n);
  }
  free_scratch(f);
  *f = g;
  f->cap = cap;
  return KVC_OK;
}

kvc_status kvc_flow_create(kvc_context *ctx, const kvc_flow_config *config, kvc_flow **out) {
  KVC_API_ENTRY();
  kvc_flow_config cfg = KVC_FLOW_CONFIG_INIT;
  KVC__CREATE_CONFIG(ctx, config, out, &cfg, kvc_flow_config);
  KVC_RETURN_IF(!cfg.req_pool, ctx, KVC_ERR_INVALID_ARGUMENT, "config.req_pool is NULL");
  KVC_RETURN_IF(!cfg.allocator == !cfg.swa_allocator, ctx, KVC_ERR_INVALID_ARGUMENT,
                "exactly one of config.allocator and config.swa_allocator must be set");
  int32_t aps = cfg.allocator ? kvc_allocator_page_size(cfg.allocator) : kvc_swa_allocator_page_size(cfg.swa_allocator);
  KVC_RETURN_IF(cfg.page_size != aps, ctx, KVC_ERR_INVALID_ARGUMENT,
                "config.page_size %d differs from the allocator's %d", cfg.page_size, aps);
  KVC_RETURN_IF(cfg.sliding_window < 0 || cfg.spec_num_steps < 0 || cfg.spec_topk < 0 || cfg.spec_num_draft_tokens < 0,
                ctx, KVC_ERR_INVALID_ARGUMENT, "negative window or speculative setting");
  KVC_RETURN_IF(cfg.sliding_window > 0 && !cfg.swa_allocator, ctx, KVC_ERR_INVALID_ARGUMENT,
                "sliding_window needs an SWA allocator (config.swa_allocator)");
  KVC_RETURN_IF(cfg.hybrid_req_pool && kvc_hybrid_req_pool_req_pool(cfg.hybrid_req_pool) != cfg.req_pool, ctx,
                KVC_ERR_INVALID_ARGUMENT, "config.req_pool must be the hybrid pool's request pool");
  kvc_flow *f = kvc__calloc(ctx, 1, sizeof *f);
  KVC_RETURN_IF(!f, ctx, KVC_ERR_HOST_OOM, "flow");
  f->magic = KVC__FLOW_MAGIC;
  f->ctx = ctx;
  f->cfg = cfg;
  f->alloc = cfg.allocator;
  f->swa = cfg.swa_allocator;
  f->sa = f->swa ? kvc__slot_allocator_swa(f->swa) : kvc__slot_allocator_plain(f->alloc);
  f->hybrid = cfg.hybrid_req_pool;
  f->mamba = f->hybrid ? kvc_hybrid_req_pool_mamba_pool(f->hybrid) : NULL;
  f->cache = cfg.cache;
  if (!f->cache.self && !f->cache.cache_finished_req && !f->cache.is_chunk_cache) f->cache = kvc_chunk_cache();
  f->width = kvc_req_to_token_pool_max_context_len(cfg.req_pool);
  f->ps = cfg.page_size;
  f->row_slots = kvc__calloc(ctx, (size_t)f->width + 1, sizeof *f->row_slots);
  f->row_seen = kvc__calloc(ctx, (size_t)kvc_req_to_token_pool_size(cfg.req_pool) + 1, sizeof *f->row_seen);
  f->row_cached = kvc__calloc(ctx, (size_t)kvc_req_to_token_pool_size(cfg.req_pool) + 1, 1);
  kvc_status st = f->row_slots && f->row_seen && f->row_cached ? kvc__flow_reserve(f, __func__, 64) : KVC_ERR_HOST_OOM;
  if (st != KVC_OK) {
    kvc_flow_destroy(f);
    return st == KVC_ERR_HOST_OOM ? kvc__error(ctx, st, __func__, "flow scratch") : st;
  }
  kvc_kv_pool *guarded = ctx->core.options.canary ? atomic_load(&ctx->canary_pool) : NULL;
  if (guarded) {
    /* KVC_CANARY / KVC_CONTEXT_CANARY: guard the context's latest KV pool. */
    /* Best effort: a flow without the canary still works, so the failure is only logged. */
    if (kvc_flow_set_canary(f, guarded) != KVC_OK)
      kvc__log(ctx, KVC_LOG_WARN, "canary mode not enabled for this flow: %s", kvc_last_error(ctx));
  }
  *out = f;
  return KVC_OK;
}

void kvc_flow_destroy(kvc_flow *f) {
  if (!f || f->magic != KVC__FLOW_MAGIC) return;
  kvc_context *ctx = f->ctx;
  free_scratch(f);
  kvc__free(ctx, f->row_slots);
  kvc__free(ctx, f->row_seen);
  kvc__free(ctx, f->row_cached);
  kvc__flow_canary_free(f);
  f->magic = 0;
  kvc__free(ctx, f);
}

/* --- The bound allocator ---------------------------------------------------------------- */

/* out_host: the new slots on the host too (canary mode only; else NULL). */
static kvc_status alloc_extend(kvc_flow *f, size_t n, const int64_t *pre, const int64_t *seq, const int64_t *last,
                               const int32_t *rows, const int64_t *const *prefix_slots, int64_t *out_host, int64_t *out,
                               kvc_stream stream) {
  const kvc__extend_args x = {.batch_size = n,
                              .prefix_lens = pre,
                              .seq_lens = seq,
                              .last_locs = last,
                              .req_pool = f->cfg.req_pool,
                              .req_rows = rows,
                              .prefix_slots = prefix_slots,
                              .out_host = out_host,
                              .out_device = out,
                              .stream = stream};
  return kvc__slot_extend(&f->sa, &x);
}
static kvc_status alloc_decode(kvc_flow *f, size_t n, const int64_t *seq, const int32_t *rows, int64_t *out_host,
                               int64_t *out, kvc_stream stream) {
  if (f->channel) return kvc_decode_channel_alloc(f->channel, n, seq, NULL, rows, out_host);
  const kvc__decode_args x = {n, seq, NULL, f->cfg.req_pool, rows, out_host, out, stream};
  return kvc__slot_decode(&f->sa, &x);
}

/* --- Small shared helpers ------------------------------------------------------------ */

kvc_status kvc_flow_row_slots(const kvc_flow *f, int32_t row, int64_t start, int64_t end, int64_t *out) {
  KVC_API_ENTRY();
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  KVC_RETURN_IF(start < 0 || end < start || end > f->width || (end > start && !out), f->ctx, KVC_ERR_INVALID_ARGUMENT,
                "range [%lld, %lld) outside the row width %d", (long long)start, (long long)end, f->width);
  const int32_t *m = kvc_req_to_token_pool_row(f->cfg.req_pool, row);
  KVC_RETURN_IF(!m, f->ctx, KVC_ERR_INVALID_ARGUMENT, "row %d out of range", row);
  if (end > start) kvc__widen_i32(out, m + start, (size_t)(end - start));
  return KVC_OK;
}

kvc_status kvc_flow_free_slots(kvc_flow *f, const int64_t *slots, size_t n) {
  KVC_API_ENTRY();
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  if (!n) return KVC_OK;
  kvc_status st = KVC_OK; /* the observer's (canary mode's refill) verdict */
  const kvc__free_args x = {slots, n, 0, f->stream, __func__, &st};
  KVC_FORWARD(kvc__slot_free(&f->sa, &x));
  /* The slots are freed whatever the observer says. Within a release (a cache callback's
   * free included) the step that freed them must count as done, or a retry would free
   * them again: the refill's error is reported once the request is released. */
  if (st != KVC_OK && f->releasing) {
    if (f->release_late == KVC_OK) f->release_late = st;
    return KVC_OK;
  }
  return st;
}

kvc_status kvc__flow_free_cached(kvc_flow *f, const char *fn, const int64_t *slots, size_t n) {
  if (!n) return KVC_OK;
  KVC_FORWARD(kvc__alloc_free_cached(f->alloc, fn, slots, n));
  const kvc_status st = kvc__slot_tell_freed(&f->sa, KVC__SIDE_FULL, NULL, slots, n, f->stream);
  if (st != KVC_OK && f->releasing) { /* as kvc_flow_free_slots */
    if (f->release_late == KVC_OK) f->release_late = st;
    return KVC_OK;
  }
  return st;
}

kvc_status kvc_flow_available(const kvc_flow *f, int64_t *available, int64_t *evictable, int64_t *protected_size,
                              int64_t *cached) {
  KVC_API_ENTRY();
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  if (available) *available = kvc__slot_available(&f->sa);
  if (evictable) *evictable = cache_size(f->cache.evictable_size, f->cache.self);
  if (protected_size) *protected_size = cache_size(f->cache.protected_size, f->cache.self);
  if (cached) *cached = cache_size(f->cache.cached_size, f->cache.self);
  return KVC_OK;
}

kvc_status kvc_flow_evict(kvc_flow *f, int64_t num_tokens) {
  KVC_API_ENTRY();
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  KVC_RETURN_IF(num_tokens < 0, f->ctx, KVC_ERR_INVALID_ARGUMENT, "num_tokens %lld < 0", (long long)num_tokens);
  if (cache_is_chunk(f) || !f->cache.evict) return KVC_OK;
  int64_t full, swa;
  if (f->sa.ops->evict_need(&f->sa, num_tokens, &full, &swa)) return f->cache.evict(f->cache.self, f, full, swa, 0);
  return KVC_OK;
}

static kvc_status out_of_memory(kvc_flow *f, const char *fn, const char *what, int64_t tokens) {
  int64_t avail = 0, evictable = 0, prot = 0;
  kvc_flow_available(f, &avail, &evictable, &prot, NULL);
  char extra[96];
  f->sa.ops->describe(&f->sa, extra, sizeof extra);
  return kvc__error(f->ctx, KVC_ERR_OUT_OF_SLOTS, fn,
                    "%s out of memory. Try to lower your batch size. Try to allocate %lld tokens. "
                    "available_size=%lld%s, evictable_size=%lld, protected_size=%lld",
                    what, (long long)tokens, (long long)avail, extra, (long long)evictable, (long long)prot);
}

/* Pages a request needs to grow from p to s tokens (SGLang get_num_new_pages). */
static int64_t new_pages(int64_t p, int64_t s, int64_t ps) { return (s + ps - 1) / ps - (p + ps - 1) / ps; }

/* Every row of a batch is held and listed once. The allocators check this too, but only
 * after the window and cache evictions have changed state: a batch refused there would
 * already have freed SWA slots. row_seen is left clear. Row 0 is skipped unless
 * `row_required` (decode: every request has one). */
static kvc_status check_batch_rows(kvc_flow *f, const char *fn, kvc_req_state *const *reqs, size_t n,
                                   bool row_required) {
  kvc_status st = KVC_OK;
  size_t i = 0;
  for (; i < n; i++) {
    const int32_t row = reqs[i]->req_row;
    if (row == 0 && !row_required) continue;
    if (!kvc_req_to_token_pool_is_held(f->cfg.req_pool, row)) {
      st = kvc__error(f->ctx, KVC_ERR_MISUSE, fn, "reqs[%zu]: req_row %d is not a held row", i, row);
      break;
    }
    if (f->row_seen[row]) {
      st = kvc__error(f->ctx, KVC_ERR_MISUSE, fn, "reqs[%d] and reqs[%zu] share row %d (a request listed twice?)",
                      f->row_seen[row] - 1, i, row);
      break;
    }
    f->row_seen[row] = (int32_t)i + 1;
  }
  for (size_t j = 0; j < i; j++)
    if (reqs[j]->req_row > 0) f->row_seen[reqs[j]->req_row] = 0;
  return st;
}

/* --- Request rows (+ Mamba slots): SGLang alloc_req_slots ----------------------------- */

static kvc_status alloc_rows(kvc_flow *f, kvc_req_state *const *reqs, size_t n, kvc_stream stream) {
  for (size_t i = 0; i < n; i++) {
    f->rows[i] = reqs[i]->req_row;
    f->fresh[i] = reqs[i]->req_row == 0;
  }
  if (!f->hybrid) return kvc_req_to_token_pool_alloc(f->cfg.req_pool, n, f->rows);
  /* SGLang: with a Mamba-managing cache, evict Mamba states for factor x n slots. */
  int supports = f->cache.supports_mamba ? f->cache.supports_mamba(f->cache.self) : 0;
  int64_t factor = supports ? (kvc_hybrid_req_pool_pp(f->hybrid) == 1 ? 2 : 3) : 1;
  int64_t need = (int64_t)n * factor, avail = kvc_mamba_pool_available(f->mamba);
  if (avail < need && supports && f->cache.evict) KVC_FORWARD(f->cache.evict(f->cache.self, f, 0, 0, need - avail));
  /* The hybrid pool reads and writes pp_slots with a stride of pp (1 or 2): packing them
   * with a stride of 2 gave request i request i/2's entries when pp == 1 (found by
   * tests/fuzz/fuzz_flow_hybrid: track slots shared or leaked). */
  const size_t pp = (size_t)kvc_hybrid_req_pool_pp(f->hybrid);
  for (size_t i = 0; i < n; i++) {
    f->mamba_slots[i] = reqs[i]->mamba_slot;
    for (size_t k = 0; k < pp; k++) f->track_slots[pp * i + k] = reqs[i]->mamba_track[k];
  }
  return kvc_hybrid_req_pool_alloc(f->hybrid, n, f->rows, f->mamba_slots, f->track_slots, stream);
}

/* Gives back rows (and Mamba state) this call took, after a later step failed. */
static void rollback_rows(kvc_flow *f, size_t n, kvc_stream stream) {
  /* Hybrid: the mapping entries and Mamba slots of the alloc go back exactly (undo log).
   * Should the mapping launch fail too, fall back to plain frees (the pools stay
   * consistent; only later Mamba slot ids differ). */
  if (f->hybrid && kvc__hybrid_req_pool_unalloc(f->hybrid, stream) != KVC_OK)
    for (size_t i = n; i-- > 0;)
      if (f->fresh[i]) kvc_hybrid_req_pool_free_mamba_cache(f->hybrid, f->rows[i], -1, stream);
  size_t taken = 0;
  for (size_t i = 0; i < n; i++)
    if (f->fresh[i]) f->rows[taken++] = f->rows[i];
  /* Rows go back to the front of the FIFO in grant order: the pool is as before. */
  kvc__req_pool_unalloc(f->cfg.req_pool, f->rows, taken);
}

/* --- alloc_for_extend ---------------------------------------------------------------- */

kvc_status kvc_flow_alloc_for_extend(kvc_flow *f, kvc_req_state *const *reqs, size_t n, int64_t *out_cache_loc,
                                     kvc_stream stream) {
  KVC_API_ENTRY();
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  if (n == 0) return KVC_OK;
  KVC_RETURN_IF(!reqs, f->ctx, KVC_ERR_INVALID_ARGUMENT, "reqs is NULL");
  KVC_FORWARD(kvc__flow_reserve(f, __func__, n));
  f->stream = stream;
  /* A request without a row listed twice would get two rows and slots, one set leaked
   * (found by tests/fuzz/fuzz_flow). Mark fresh requests with req_row -1 for one O(n)
   * pass, then restore. */
  {
    size_t i = 0;
    kvc_status dup = KVC_OK;
    for (; i < n && reqs[i]; i++) {
      if (reqs[i]->req_row == -1) {
        dup = kvc__error(f->ctx, KVC_ERR_MISUSE, __func__, "reqs[%zu] is listed twice (or has req_row -1)", i);
        break;
      }
      if (reqs[i]->req_row == 0) reqs[i]->req_row = -1;
    }
    for (size_t j = 0; j < i; j++)
      if (reqs[j]->req_row == -1) reqs[j]->req_row = 0;
    KVC_FORWARD(dup);
  }
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
  KVC_FORWARD(check_batch_rows(f, __func__, reqs, n, false));
  /* SGLang: window eviction first, then evict for extend_num_tokens (+ a page per
   * request when paged). */
  KVC_FORWARD(kvc__flow_evict_windows(f, reqs, n, false, stream));
  KVC_FORWARD(kvc_flow_evict(f, ps == 1 ? extend_tokens : extend_tokens + (int64_t)n * ps));
  if (need_rows > kvc_req_to_token_pool_available(pool))
    return kvc__error(f->ctx, KVC_ERR_OUT_OF_SLOTS, __func__,
                      "alloc_req_slots runs out of memory. Please set a smaller number for max running "
                      "requests. available_size=%d, num_reqs=%zu, new rows=%d",
                      kvc_req_to_token_pool_available(pool), n, need_rows);
  /* Capacity before anything is taken (the allocators would fail cleanly too, but the
   * rows are taken first). */
  if (!kvc__slot_fits(&f->sa, pages)) return out_of_memory(f, __func__, "Prefill", extend_tokens);
  /* An observer (canary mode) hears of the new slots: their host copy goes here. */
  int64_t *told = NULL;
  KVC_FORWARD(kvc__slot_observe_reserve(&f->sa, __func__, (size_t)extend_tokens, &told));
  KVC_FORWARD(alloc_rows(f, reqs, n, stream));
  /* last_loc: from the matched prefix, else from the row (chunked / resumed). */
  for (size_t i = 0; i < n; i++) {
    const kvc_req_state *r = reqs[i];
    int64_t p = r->prefix_len;
    if (p == 0) f->last_locs[i] = -1;
    else if (r->prefix_slots) f->last_locs[i] = r->prefix_slots[p - 1];
    else f->last_locs[i] = kvc_req_to_token_pool_row(pool, f->rows[i])[p - 1];
  }
  kvc_status st = alloc_extend(f, n, f->prefix_lens, f->seq_lens, f->last_locs, f->rows, f->prefix_slots, told,
                               out_cache_loc, stream);
  if (st != KVC_OK) {
    /* Give back what this call took (SGLang leaves the rows allocated, spec 15.14). */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", kvc_last_error(f->ctx));
    rollback_rows(f, n, stream);
    if (st == KVC_ERR_OUT_OF_SLOTS) return out_of_memory(f, __func__, "Prefill", extend_tokens);
    return kvc__error(f->ctx, st, __func__, "%s", msg);
  }
  for (size_t i = 0; i < n; i++) {
    kvc_req_state *r = reqs[i];
    r->req_row = f->rows[i];
    f->row_cached[r->req_row] = 0; /* a live request's row (a mark left by a row freed elsewhere) */
    if (f->hybrid) {               /* track slots packed with a stride of pp (alloc_rows) */
      const size_t pp = (size_t)kvc_hybrid_req_pool_pp(f->hybrid);
      r->mamba_slot = f->mamba_slots[i];
      r->mamba_track[0] = f->track_slots[pp * i];
      r->mamba_track[1] = pp == 2 ? f->track_slots[pp * i + 1] : 0;
    }
    r->kv_allocated_len = r->kv_committed_len = r->seq_len;
    r->prefix_slots = NULL; /* the row holds the prefix now */
  }
  return kvc__slot_announce(&f->sa, told, (size_t)extend_tokens, stream);
}

/* --- alloc_for_decode ---------------------------------------------------------------- */

kvc_status kvc_flow_alloc_for_decode(kvc_flow *f, kvc_req_state *const *reqs, size_t n, int32_t token_per_req,
                                     int64_t *out_cache_loc, kvc_stream stream) {
  KVC_API_ENTRY();
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  if (n == 0) return KVC_OK;
  KVC_RETURN_IF(!reqs, f->ctx, KVC_ERR_INVALID_ARGUMENT, "reqs is NULL");
  KVC_RETURN_IF(token_per_req < 1, f->ctx, KVC_ERR_INVALID_ARGUMENT, "token_per_req %d < 1", token_per_req);
  KVC_FORWARD(kvc__flow_reserve(f, __func__, n));
  f->stream = stream;
  const int64_t ps = f->ps;
  for (size_t i = 0; i < n; i++) {
    const kvc_req_state *r = reqs[i];
    KVC_RETURN_IF(!r, f->ctx, KVC_ERR_INVALID_ARGUMENT, "reqs[%zu] is NULL", i);
    KVC_RETURN_IF(r->seq_len < 1 || r->seq_len > (int64_t)f->width - token_per_req, f->ctx, KVC_ERR_INVALID_ARGUMENT,
                  "reqs[%zu]: seq_len %lld (+%d) outside the row width %d", i, (long long)r->seq_len, token_per_req,
                  f->width);
    f->rows[i] = r->req_row;
    f->prefix_lens[i] = r->seq_len;
    f->seq_lens[i] = r->seq_len + token_per_req;
  }
  /* A channel that cannot take the step, or an out_cache_loc it does not write, fails
   * the step before anything (window or cache eviction) happens. */
  if (f->channel && token_per_req == 1) {
    KVC_RETURN_IF(out_cache_loc && out_cache_loc != kvc__decode_channel_out(f->channel), f->ctx,
                  KVC_ERR_INVALID_ARGUMENT,
                  "out_cache_loc must be NULL or the decode channel's out_device (the channel's kernel writes it)");
    KVC_FORWARD(kvc__decode_channel_ready(f->channel, __func__));
  }
  KVC_FORWARD(check_batch_rows(f, __func__, reqs, n, true));
  KVC_FORWARD(kvc__flow_evict_windows(f, reqs, n, true, stream));
  /* The allocators validate rows and last_locs (from the mirror) and fail without
   * changing anything, so no separate capacity check is needed here. */
  KVC_FORWARD(kvc_flow_evict(f, ps == 1 ? (int64_t)n * token_per_req : (int64_t)n * ps));
  int64_t *told = NULL;
  KVC_FORWARD(kvc__slot_observe_reserve(&f->sa, __func__, n * (size_t)token_per_req, &told));
  kvc_status st;
  if (token_per_req == 1) st = alloc_decode(f, n, f->seq_lens, f->rows, told, out_cache_loc, stream);
  else st = alloc_extend(f, n, f->prefix_lens, f->seq_lens, NULL, f->rows, NULL, told, out_cache_loc, stream);
  if (st == KVC_ERR_OUT_OF_SLOTS) return out_of_memory(f, __func__, "Decode", (int64_t)n * token_per_req);
  KVC_FORWARD(st);
  for (size_t i = 0; i < n; i++) {
    kvc_req_state *r = reqs[i];
    r->seq_len += token_per_req;
    r->kv_allocated_len = r->kv_committed_len = r->seq_len;
  }
  return kvc__slot_announce(&f->sa, told, n * (size_t)token_per_req, stream);
}

/* --- Speculative-decoding reservations (SGLang 12.10) -------------------------------- */

int64_t kvc_flow_alloc_len_per_decode(const kvc_flow *f) {
  if (!f || f->magic != KVC__FLOW_MAGIC || f->cfg.spec_num_steps == 0) return 1;
  int64_t steps = f->cfg.spec_num_steps ? f->cfg.spec_num_steps : 1;
  int64_t topk = f->cfg.spec_topk ? f->cfg.spec_topk : 1;
  int64_t T = f->cfg.spec_num_draft_tokens, ps = f->ps;
  int64_t v =
      (ps == 1 || topk == 1 || !f->cfg.spec_keeps_draft_kv) ? steps * topk : (ps - 1 + steps + ps - 1) / ps * ps * topk;
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

/* --- Decode channel ------------------------------------------------------------------ */

kvc_status kvc_flow_set_decode_channel(kvc_flow *f, kvc_decode_channel *channel) {
  KVC_API_ENTRY();
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  if (!channel) {
    f->channel = NULL;
    return KVC_OK;
  }
  KVC_RETURN_IF(!kvc__decode_channel_binds(channel, &f->sa, f->cfg.req_pool), f->ctx, KVC_ERR_INVALID_ARGUMENT,
                "the channel is not a live kvc_decode_channel over this flow's allocator and req_pool");
  f->channel = channel;
  return KVC_OK;
}
