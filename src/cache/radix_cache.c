/*
 * radix_cache.c — the public calls of kvc_radix_cache: create/destroy, match, insert, the
 * request-level checkpoints the flows call (SGLang cache_finished_req /
 * cache_unfinished_req, i.e. 0.5.23's release_kv_cache and checkpoint_kv_cache), locks,
 * eviction, reset, sizes, and the kvc_prefix_cache adapter.
 *
 * Each call validates everything and reserves every resource before the tree changes;
 * the only step after the first change that can fail is a flow free or row write that
 * the flow itself reports (documented per call).
 */
#include "radix.h"
#include "../flow/flow.h"

#include <stdio.h>
#include <string.h>

static kvc_status live(const kvc_radix_cache *rc, const char *fn) {
  if (!rc || rc->magic != KVC__RADIX_MAGIC)
    return kvc__error(NULL, KVC_ERR_INVALID_ARGUMENT, fn, "not a live radix cache");
  return KVC_OK;
}

/* Check mode (KVC_CHECK=1 or KVC_CONTEXT_CHECK): audit after every mutating call. */
static kvc_status post(kvc_radix_cache *rc, const char *fn, kvc_status st) {
  if (st == KVC_OK && rc->check) return kvc__rx_audit(rc, fn);
  return st;
}

/* --- Freeing slots: through the flow, else the config's hook ------------------------------ */

kvc_status kvc__rx_free_through(void *user, const int64_t *slots, size_t n) {
  rx_free_path *p = user;
  if (p->flow) return kvc_flow_free_slots(p->flow, slots, n);
  if (p->rc->cfg.free_slots) return p->rc->cfg.free_slots(p->rc->cfg.free_user, slots, n);
  return kvc__error(p->rc->ctx, KVC_ERR_UNSUPPORTED, "kvc_radix_cache",
                    "slots to free but no flow and no free_slots hook");
}

bool kvc__rx_can_free(const kvc_radix_cache *rc, const kvc_flow *flow) { return flow || rc->cfg.free_slots; }

/* A bound cache's victims: the allocator's one pass over slots that must be HELD | CACHED
 * (kvc__alloc_free_cached), through the flow when one is given (the caller checked that
 * it runs on the bound allocator), so that its observer hears of the free. */
static kvc_status free_bound(void *user, const int64_t *slots, size_t n) {
  rx_free_path *p = user;
  if (p->flow) return kvc__flow_free_cached(p->flow, "kvc_radix_cache_evict", slots, n);
  return kvc__alloc_free_cached(p->rc->bound, "kvc_radix_cache_evict", slots, n);
}

/* --- Create / destroy ------------------------------------------------------------------------ */

kvc_status kvc_radix_cache_create(kvc_context *ctx, const kvc_radix_cache_config *config, kvc_radix_cache **out) {
  kvc_radix_cache_config cfg = KVC_RADIX_CACHE_CONFIG_INIT;
  KVC__CREATE_CONFIG(ctx, config, out, &cfg, kvc_radix_cache_config);
  KVC_RETURN_IF(cfg.page_size < 1, ctx, KVC_ERR_INVALID_ARGUMENT, "page_size %d < 1", cfg.page_size);
  KVC_RETURN_IF(cfg.num_slots < 1 || cfg.num_slots > ((int64_t)1 << 40), ctx, KVC_ERR_INVALID_ARGUMENT,
                "num_slots %lld outside [1, 2^40]", (long long)cfg.num_slots);
  KVC_RETURN_IF((unsigned)cfg.policy > KVC_RADIX_SLRU, ctx, KVC_ERR_INVALID_ARGUMENT, "unknown policy %d",
                (int)cfg.policy);
  KVC_RETURN_IF(cfg.slru_threshold < 0, ctx, KVC_ERR_INVALID_ARGUMENT, "slru_threshold %d < 0", cfg.slru_threshold);
  if (cfg.slru_threshold == 0) cfg.slru_threshold = 2;
  if (cfg.on_event && !cfg.block_hash) {
    uint64_t probe;
    int32_t tok = 0;
    KVC_RETURN_IF(kvc_radix_block_hash_xxh3(NULL, 0, 0, 0, &tok, 1, &probe) != KVC_OK, ctx, KVC_ERR_UNSUPPORTED,
                  "KV events need a block_hash: this library was built without xxhash.h");
  }
  kvc_radix_cache *rc = kvc__calloc(ctx, 1, sizeof *rc);
  KVC_RETURN_IF(!rc, ctx, KVC_ERR_HOST_OOM, "radix cache");
  rc->magic = KVC__RADIX_MAGIC;
  rc->ctx = ctx;
  rc->cfg = cfg;
  rc->ps = cfg.page_size;
  rc->top_slot = cfg.num_slots + cfg.page_size - 1;
  rc->ps_shift = (cfg.page_size & (cfg.page_size - 1)) ? -1 : __builtin_ctz((unsigned)cfg.page_size);
  rc->events_on = cfg.on_event != NULL;
  rc->check = kvc_context_check_mode(ctx) != 0;
  if (kvc__rx_init(rc) != KVC_OK) {
    kvc__rx_fini(rc);
    kvc__free(ctx, rc);
    return kvc__error(ctx, KVC_ERR_HOST_OOM, __func__, "radix cache tables (num_slots %lld)", (long long)cfg.num_slots);
  }
  *out = rc;
  return KVC_OK;
}

void kvc_radix_cache_destroy(kvc_radix_cache *rc) {
  if (!rc || rc->magic != KVC__RADIX_MAGIC) return;
  kvc_context *ctx = rc->ctx;
  if (rc->bound) { /* the cached slots stay handed out, as unbound; the marks go */
    kvc__rx_unmark_all(rc);
    kvc__alloc_unbind_cache(rc->bound, rc);
  }
  kvc__rx_fini(rc);
  rc->magic = 0;
  kvc__free(ctx, rc);
}

/* --- Match ---------------------------------------------------------------------------------- */

static kvc_status match(kvc_radix_cache *rc, const char *fn, uint64_t ns, const int32_t *tokens, int64_t n,
                        int64_t *buf, kvc_radix_match *out) {
  KVC_RETURN_IF(n < 0 || (n > 0 && !tokens), rc->ctx, KVC_ERR_INVALID_ARGUMENT, "%s: %lld tokens at %p", fn,
                (long long)n, (const void *)tokens);
  KVC_RETURN_IF(n > INT32_MAX, rc->ctx, KVC_ERR_INVALID_ARGUMENT, "%s: key of %lld tokens", fn, (long long)n);
  n = n / rc->ps * rc->ps;
  memset(out, 0, sizeof *out);
  if (n == 0) { /* SGLang: an empty (aligned) key matches nothing, at the root */
    out->node = kvc__rx_handle(rc, 0);
    return KVC_OK;
  }
  KVC_FORWARD(kvc__rx_reserve(rc, fn, (size_t)n));
  int64_t matched;
  int32_t node;
  size_t depth;
  KVC_FORWARD(kvc__rx_match(rc, ns, tokens, n, &matched, &node, &depth));
  int copied;
  out->len = matched;
  out->slots = kvc__rx_path_values(rc, depth, matched, buf, &copied);
  out->copied = copied;
  out->node = kvc__rx_handle(rc, node);
  return KVC_OK;
}

kvc_status kvc_radix_cache_match_prefix(kvc_radix_cache *rc, uint64_t ns, const int32_t *tokens, int64_t n,
                                        kvc_radix_match *out) {
  KVC_FORWARD(live(rc, __func__));
  KVC_RETURN_IF(!out, rc->ctx, KVC_ERR_INVALID_ARGUMENT, "out is NULL");
  return post(rc, __func__, match(rc, __func__, ns, tokens, n, NULL, out));
}

kvc_radix_req *kvc__rx_req_of(kvc_radix_cache *rc, const kvc_req_state *req, const char *fn, kvc_status *st) {
  kvc_radix_req *r = rc->cfg.req_of ? rc->cfg.req_of(rc->cfg.req_user, req) : NULL;
  *st = KVC_OK;
  if (!r) *st = kvc__error(rc->ctx, KVC_ERR_INVALID_ARGUMENT, fn, "no kvc_radix_req for the request (config.req_of)");
  else if (r->num_tokens < 0 || (r->num_tokens > 0 && !r->tokens))
    *st = kvc__error(rc->ctx, KVC_ERR_INVALID_ARGUMENT, fn, "kvc_radix_req: %lld tokens at %p",
                     (long long)r->num_tokens, (const void *)r->tokens);
  return *st == KVC_OK ? r : NULL;
}

kvc_status kvc_radix_cache_match_req(kvc_radix_cache *rc, kvc_req_state *req, kvc_radix_req *rreq) {
  KVC_FORWARD(live(rc, __func__));
  KVC_RETURN_IF(!req || !rreq, rc->ctx, KVC_ERR_INVALID_ARGUMENT, "req or rreq is NULL");
  KVC_RETURN_IF(req->req_row || req->cache_node, rc->ctx, KVC_ERR_MISUSE,
                "the request already holds a row (%d) or a node: match only new requests", req->req_row);
  KVC_RETURN_IF(rreq->num_tokens < 0 || (rreq->num_tokens > 0 && !rreq->tokens), rc->ctx, KVC_ERR_INVALID_ARGUMENT,
                "rreq: %lld tokens at %p", (long long)rreq->num_tokens, (const void *)rreq->tokens);
  kvc_radix_match m;
  /* SGLang _compute_max_prefix_len: the last token is always recomputed. */
  KVC_FORWARD(match(rc, __func__, rreq->ns, rreq->tokens, KVC__MAX(0, rreq->num_tokens - 1), rreq->prefix_buf, &m));
  int32_t node = 0;
  kvc__rx_from_handle(rc, m.node, &node);
  kvc__rx_lock(rc, node);
  req->prefix_len = req->cache_protected_len = m.len;
  req->prefix_slots = m.len ? m.slots : NULL;
  req->cache_node = node ? m.node : NULL;
  return post(rc, __func__, KVC_OK);
}

/* --- Insert ------------------------------------------------------------------------------------ */

/* Row `src->row`'s slots of [start, end) into out, widened. kvc_flow_row_slots does the
 * same through the public entry (its API bookkeeping and checks); a chunked prefill's
 * 2048-token checkpoint reads its row here without them. The checkpoints validated the row
 * (held) and the range (within the committed length, itself within the row width) before
 * this is called. */
static kvc_status row_read(const rx_row_src *src, int64_t start, int64_t end, int64_t *restrict out) {
  const int32_t *restrict m = kvc_req_to_token_pool_row(src->flow->cfg.req_pool, src->row);
  if (!m || start < 0 || end > src->flow->width) return kvc_flow_row_slots(src->flow, src->row, start, end, out);
  if (end > start) kvc__widen_i32(out, m + start, (size_t)(end - start));
  return KVC_OK;
}

/* The whole insert: probe, validate and mark the new slots, allocate the leaf, reserve
 * nodes, free the duplicates, then apply (which cannot fail). keys/vals hold n tokens
 * (page-floored by the caller). With a row source (a checkpoint), vals is ignored: the
 * row's slots of [from, prefix) are read into rc->vec once the walk has found prefix,
 * those of [prefix, n) into the new leaf's segment. The walk is done once: the dry run's path is the one applied. On failure
 * nothing changed. */
kvc_status kvc__rx_insert_with(kvc_radix_cache *rc, kvc_flow *flow, const char *fn, const rx_insert_args *a) {
  const int32_t *keys = a->keys;
  const rx_row_src *src = a->src;
  const int64_t from = a->from, n = a->n;
  KVC_FORWARD(kvc__rx_reserve(rc, fn, (size_t)n));
  size_t nd = 0, pd;
  /* One walk: its path is applied below (nothing changes the tree in between). */
  const int64_t p = *a->prefix = kvc__rx_probe_path(rc, a->ns, keys, n, &pd);
  const int64_t *vals = src ? rc->vec : a->vals;
  if (src && p > from) KVC_FORWARD(row_read(src, from, p, rc->vec + from));
  if (p > from) nd = kvc__rx_path_dups(rc, pd, p, vals, from, rc->dups);
  const int64_t top = rc->top_slot;
  KVC_RETURN_IF(p < from, rc->ctx, KVC_ERR_MISUSE,
                "%s: the request's first %lld tokens (cache_protected_len) are not in the tree, only %lld (was its "
                "node locked?)",
                fn, (long long)from, (long long)p);
  /* A checkpoint's new slots are read from the row straight into the leaf's segment: the
   * detour through rc->vec was one more pass over 8 bytes a slot (a 4096-token request's
   * 32 KB). When that segment cannot be had, the row goes to rc->vec as before, so that a
   * bad slot is still reported before the allocation failure. */
  rx_seg *seg = NULL;
  bool seg_oom = false;
  const int64_t *nv = vals + p; /* the new slots [p, n) */
  if (src && n > p) {
    seg = kvc__rx_seg_keys(rc, keys + p, n - p);
    seg_oom = !seg;
    int64_t *to = seg ? rx_seg_vals(seg) : rc->vec + p;
    kvc_status rs = row_read(src, p, n, to);
    if (rs != KVC_OK) {
      if (seg) kvc__rx_seg_drop(rc, seg);
      return rs;
    }
    nv = to;
  }
  int64_t bad = 0, run = -1;
  kvc_status st = n > p ? kvc__rx_mark(rc, nv, n - p, &bad, &run) : KVC_OK;
  if (st != KVC_OK) {
    if (seg) kvc__rx_seg_drop(rc, seg);
    const int64_t s = nv[bad];
    if (st == KVC_ERR_INVALID_ARGUMENT)
      return kvc__error(rc->ctx, st, fn,
                        "slots from %lld at position %lld: outside [1, %lld], or (page size %lld) not whole "
                        "allocator pages (a page-aligned slot followed by its consecutive slots)",
                        (long long)s, (long long)(p + bad), (long long)top, (long long)rc->ps);
    return kvc__error(rc->ctx, st, fn, "slots from %lld at position %lld: one is already cached (given twice?)",
                      (long long)s, (long long)(p + bad));
  }
  if (nd && (st = kvc__rx_check_free(rc, rc->dups, (int64_t)nd, &bad)) != KVC_OK)
    st = kvc__error(rc->ctx, st, fn, "duplicate slot %lld: outside [1, %lld] or held by the tree elsewhere",
                    (long long)rc->dups[bad], (long long)top);
  if (st == KVC_OK && nd && !kvc__rx_can_free(rc, flow))
    st = kvc__error(rc->ctx, KVC_ERR_UNSUPPORTED, fn, "%zu duplicate slots to free but no flow and no free_slots hook",
                    nd);
  if (st == KVC_OK && n > p && !seg) {
    if (!seg_oom) seg = kvc__rx_seg_new(rc, keys + p, nv, n - p);
    if (!seg) st = kvc__error(rc->ctx, KVC_ERR_HOST_OOM, fn, "segment of %lld tokens", (long long)(n - p));
  }
  if (st == KVC_OK) st = kvc__rx_reserve_nodes(rc, fn, 2 + a->extra);
  if (st == KVC_OK && nd) {
    rx_free_path fp = {rc, flow};
    st = kvc__rx_free_through(&fp, rc->dups, nd); /* SGLang frees row[cache_protected_len:prefix_len) */
  }
  if (st != KVC_OK) {
    kvc__rx_unmark(rc, nv, n - p);
    if (seg) kvc__rx_seg_drop(rc, seg);
    return st;
  }
  const rx_apply_args ap = {a->ns, keys, n, a->priority, a->inserted_len, seg, run, a->node, a->depth};
  kvc__rx_apply_path(rc, &ap, p, pd);
  if (a->ndups) *a->ndups = nd;
  return KVC_OK;
}

kvc_status kvc_radix_cache_insert(kvc_radix_cache *rc, kvc_flow *flow, uint64_t ns, const int32_t *tokens,
                                  const int64_t *slots, int64_t n, int32_t priority, int64_t *prefix_len) {
  KVC_FORWARD(live(rc, __func__));
  KVC_RETURN_IF(n < 0 || n > INT32_MAX || (n > 0 && (!tokens || !slots)), rc->ctx, KVC_ERR_INVALID_ARGUMENT,
                "%lld tokens / slots at %p / %p", (long long)n, (const void *)tokens, (const void *)slots);
  n = n / rc->ps * rc->ps;
  int64_t prefix = 0;
  int32_t node;
  if (n > 0) {
    const rx_insert_args a = {
        .ns = ns, .keys = tokens, .vals = slots, .n = n, .priority = priority, .prefix = &prefix, .node = &node};
    KVC_FORWARD(kvc__rx_insert_with(rc, flow, __func__, &a));
  }
  if (prefix_len) *prefix_len = prefix;
  return post(rc, __func__, KVC_OK);
}

/* --- Request-level checkpoints ------------------------------------------------------------------ */

/* Validates what both checkpoints read; *old the request's locked node (0 = none). */
kvc_status kvc__rx_req_check(kvc_radix_cache *rc, kvc_flow *flow, const kvc_req_state *req, const char *fn,
                             int32_t *old) {
  KVC_RETURN_IF(!req, rc->ctx, KVC_ERR_INVALID_ARGUMENT, "%s: req is NULL", fn);
  KVC_FORWARD(kvc__flow_check_handle(flow, fn));
  KVC_RETURN_IF(flow->ps != rc->ps, rc->ctx, KVC_ERR_INVALID_ARGUMENT, "%s: flow page size %lld, cache %lld", fn,
                (long long)flow->ps, (long long)rc->ps);
  KVC_RETURN_IF(!kvc_req_to_token_pool_is_held(flow->cfg.req_pool, req->req_row), rc->ctx, KVC_ERR_MISUSE,
                "%s: req_row %d is not a held row", fn, req->req_row);
  const int64_t c = req->kv_committed_len, p = req->cache_protected_len;
  KVC_RETURN_IF(c < 0 || c > flow->width || c > req->kv_allocated_len, rc->ctx, KVC_ERR_INVALID_ARGUMENT,
                "%s: kv_committed_len %lld outside [0, min(row width %d, kv_allocated_len %lld)]", fn, (long long)c,
                flow->width, (long long)req->kv_allocated_len);
  KVC_RETURN_IF(p < 0 || p > c || p % rc->ps, rc->ctx, KVC_ERR_INVALID_ARGUMENT,
                "%s: cache_protected_len %lld not a page-aligned length within [0, committed %lld]", fn, (long long)p,
                (long long)c);
  *old = 0;
  if (req->cache_node)
    KVC_RETURN_IF(!kvc__rx_from_handle(rc, req->cache_node, old), rc->ctx, KVC_ERR_INVALID_ARGUMENT,
                  "%s: cache_node %p is not a node of this cache (stale, evicted, or from before a reset)", fn,
                  req->cache_node);
  return KVC_OK;
}

/* Checks the request's key tokens[0:key_len) and reserves scratch for it (its row slots
 * are read by insert(), where they are needed). */
kvc_status kvc__rx_req_key(kvc_radix_cache *rc, const kvc_radix_req *rr, int32_t old, int64_t key_len, const char *fn) {
  KVC_RETURN_IF(rr->num_tokens < key_len, rc->ctx, KVC_ERR_INVALID_ARGUMENT,
                "%s: the request has KV for %lld tokens but only %lld token ids", fn, (long long)key_len,
                (long long)rr->num_tokens);
  KVC_RETURN_IF(old && rc->nodes[old].ns != rr->ns, rc->ctx, KVC_ERR_MISUSE,
                "%s: the request's node is in namespace %llu, its key in %llu (mixed namespaces)", fn,
                (unsigned long long)rc->nodes[old].ns, (unsigned long long)rr->ns);
  if (key_len == 0) return KVC_OK;
  return kvc__rx_reserve(rc, fn, (size_t)key_len);
}

kvc_status kvc__rx_insert_req(kvc_radix_cache *rc, kvc_flow *flow, const char *fn, const kvc_req_state *req,
                              kvc_radix_req *rr, int64_t key_len, int32_t extra, int32_t *node, size_t *ndups,
                              size_t *depth) {
  int64_t prefix;
  const rx_row_src src = {flow, req->req_row};
  const rx_insert_args a = {.ns = rr->ns,
                            .keys = rr->tokens,
                            .src = &src,
                            .from = KVC__MIN(req->cache_protected_len, key_len),
                            .n = key_len,
                            .priority = rr->priority,
                            .inserted_len = rr->inserted_len,
                            .extra = extra,
                            .prefix = &prefix,
                            .node = node,
                            .ndups = ndups,
                            .depth = depth};
  KVC_FORWARD(kvc__rx_insert_with(rc, flow, fn, &a));
  rr->inserted_len = KVC__MAX(rr->inserted_len, key_len);
  return KVC_OK;
}

kvc_status kvc__rx_write_path(kvc_radix_cache *rc, kvc_flow *flow, const kvc_req_state *req, size_t depth, int64_t from,
                              int64_t key_len) {
  int copied;
  const int64_t *v = kvc__rx_path_values(rc, depth, key_len, NULL, &copied);
  return kvc_req_to_token_pool_write(flow->cfg.req_pool, req->req_row, (int32_t)from, v + from,
                                     (size_t)(key_len - from), flow->stream);
}

kvc_status kvc__rx_free_row(kvc_radix_cache *rc, kvc_flow *flow, int32_t row, int64_t from, int64_t to) {
  if (to <= from) return KVC_OK;
  rx_free_path fp = {rc, flow};
  KVC_FORWARD(kvc_flow_row_slots(flow, row, from, to, flow->row_slots));
  return kvc__rx_free_through(&fp, flow->row_slots, (size_t)(to - from));
}

kvc_status kvc_radix_cache_cache_finished_req(kvc_radix_cache *rc, kvc_flow *flow, kvc_req_state *req, int is_insert) {
  KVC_FORWARD(live(rc, __func__));
  int32_t old;
  KVC_FORWARD(kvc__rx_req_check(rc, flow, req, __func__, &old));
  const int64_t committed = req->kv_committed_len;
  if (!is_insert) { /* abort / retract: nothing goes into the tree */
    if (old) KVC_FORWARD(kvc__rx_unlock(rc, old, __func__));
    kvc_status st = kvc__rx_free_row(rc, flow, req->req_row, req->cache_protected_len, committed);
    if (st != KVC_OK) {
      if (old) kvc__rx_lock(rc, old);
      return st;
    }
    req->cache_node = NULL;
    req->cache_protected_len = 0;
    return post(rc, __func__, KVC_OK);
  }
  kvc_status st;
  kvc_radix_req *rr = kvc__rx_req_of(rc, req, __func__, &st);
  KVC_FORWARD(st);
  const int64_t key_len = committed / rc->ps * rc->ps;
  KVC_FORWARD(kvc__rx_req_key(rc, rr, old, key_len, __func__));
  if (old) KVC_FORWARD(kvc__rx_unlock(rc, old, __func__)); /* checked first: fails on a lock below zero */
  if (key_len > 0) {
    int32_t node;
    st = kvc__rx_insert_req(rc, flow, __func__, req, rr, key_len, 1, &node, NULL, NULL);
    if (st != KVC_OK) {
      if (old) kvc__rx_lock(rc, old);
      return st;
    }
    /* SGLang's prompt split: outputs become their own leaf, evicted before the prompt
     * (rr->inserted_len covers key_len now). */
    const int64_t pf = KVC__MIN(rr->prompt_len, rr->num_tokens) / rc->ps * rc->ps;
    if (pf > 0 && pf < key_len) {
      int32_t unused;
      const rx_apply_args ap = {.ns = rr->ns,
                                .keys = rr->tokens,
                                .n = pf,
                                .priority = rr->priority + 1,
                                .inserted_len = rr->inserted_len,
                                .leaf_run = -1,
                                .node = &unused};
      kvc__rx_apply_insert_with(rc, &ap);
    }
  }
  /* The unaligned tail [key_len, committed) is not cached (SGLang free_kv_row). */
  req->cache_node = NULL;
  req->cache_protected_len = 0;
  /* Reported after the insert: the tree holds [0, key_len) already. */
  KVC_FORWARD(kvc__rx_free_row(rc, flow, req->req_row, key_len, committed));
  return post(rc, __func__, KVC_OK);
}

kvc_status kvc_radix_cache_cache_unfinished_req(kvc_radix_cache *rc, kvc_flow *flow, kvc_req_state *req) {
  KVC_FORWARD(live(rc, __func__));
  int32_t old;
  KVC_FORWARD(kvc__rx_req_check(rc, flow, req, __func__, &old));
  kvc_status st;
  kvc_radix_req *rr = kvc__rx_req_of(rc, req, __func__, &st);
  KVC_FORWARD(st);
  const int64_t committed = req->kv_committed_len, key_len = committed / rc->ps * rc->ps;
  KVC_FORWARD(kvc__rx_req_key(rc, rr, old, key_len, __func__));
  if (old) { /* a lock below zero is refused before anything changes */
    KVC_FORWARD(kvc__rx_unlock(rc, old, __func__));
    kvc__rx_lock(rc, old);
  }
  int32_t node = 0;
  size_t nd = 0;
  if (key_len > 0) {
    size_t depth;
    KVC_FORWARD(kvc__rx_insert_req(rc, flow, __func__, req, rr, key_len, 1, &node, &nd, &depth));
    /* SGLang re-matches the key (stamping the path) and writes the tree's slots into the
     * row where the request's duplicates were. The insert left exactly that path, ending
     * at key_len on a node boundary (the walk would split nothing), in rc->path: it is
     * stamped as the walk would stamp it, without comparing the keys a second time. */
    kvc__rx_touch_path(rc, depth);
    if (nd) st = kvc__rx_write_path(rc, flow, req, depth, req->cache_protected_len, key_len);
  }
  kvc__rx_lock(rc, node);
  if (old) kvc__rx_unlock(rc, old, __func__);
  req->cache_node = node ? kvc__rx_handle(rc, node) : NULL;
  req->cache_protected_len = key_len;
  req->prefix_len = committed;
  req->prefix_slots = NULL;
  return post(rc, __func__, st);
}

/* --- Locks, eviction, reset, sizes ------------------------------------------------------------- */

static kvc_status node_of(const kvc_radix_cache *rc, void *handle, int32_t *id, const char *fn) {
  *id = 0;
  if (!handle) return KVC_OK;
  KVC_RETURN_IF(!kvc__rx_from_handle(rc, handle, id), rc->ctx, KVC_ERR_INVALID_ARGUMENT,
                "%s: node %p is not a node of this cache (stale, evicted, or from before a reset)", fn, handle);
  return KVC_OK;
}

kvc_status kvc_radix_cache_lock(kvc_radix_cache *rc, void *handle) {
  KVC_FORWARD(live(rc, __func__));
  int32_t id;
  KVC_FORWARD(node_of(rc, handle, &id, __func__));
  kvc__rx_lock(rc, id);
  return post(rc, __func__, KVC_OK);
}

kvc_status kvc_radix_cache_unlock(kvc_radix_cache *rc, void *handle) {
  KVC_FORWARD(live(rc, __func__));
  int32_t id;
  KVC_FORWARD(node_of(rc, handle, &id, __func__));
  KVC_FORWARD(kvc__rx_unlock(rc, id, __func__));
  return post(rc, __func__, KVC_OK);
}

kvc_status kvc_radix_cache_evict(kvc_radix_cache *rc, kvc_flow *flow, int64_t num_tokens, int64_t *evicted) {
  KVC_FORWARD(live(rc, __func__));
  KVC_RETURN_IF(num_tokens < 0, rc->ctx, KVC_ERR_INVALID_ARGUMENT, "num_tokens %lld < 0", (long long)num_tokens);
  if (evicted) *evicted = 0;
  if (num_tokens == 0) return KVC_OK;
  KVC_RETURN_IF(rc->heap_len == 0, rc->ctx, KVC_ERR_OUT_OF_SLOTS,
                "nothing evictable for %lld tokens (evictable_size=0, protected_size=%lld)", (long long)num_tokens,
                (long long)rc->protected_);
  KVC_RETURN_IF(!rc->bound && !kvc__rx_can_free(rc, flow), rc->ctx, KVC_ERR_UNSUPPORTED,
                "no flow and no free_slots hook to free through");
  if (rc->bound && flow) {
    KVC_FORWARD(kvc__flow_check_handle(flow, __func__));
    KVC_RETURN_IF(flow->alloc != rc->bound, rc->ctx, KVC_ERR_MISUSE,
                  "the flow's allocator is not the one this cache is bound to");
  }
  rx_free_path fp = {rc, flow};
  int64_t done;
  kvc_status st = kvc__rx_evict(rc, num_tokens, rc->bound ? free_bound : kvc__rx_free_through, &fp, &done);
  if (evicted) *evicted = done;
  return post(rc, __func__, st);
}

kvc_status kvc_radix_cache_bind_allocator(kvc_radix_cache *rc, kvc_allocator *alloc) {
  KVC_FORWARD(live(rc, __func__));
  const int64_t cached = rc->evictable + rc->protected_;
  if (!alloc) {
    KVC_RETURN_IF(cached, rc->ctx, KVC_ERR_MISUSE, "unbinding a cache that holds %lld tokens (reset it first)",
                  (long long)cached);
    if (rc->bound) kvc__alloc_unbind_cache(rc->bound, rc);
    rc->bound = NULL;
    return KVC_OK;
  }
  KVC_RETURN_IF(alloc->magic != KVC__ALLOCATOR_MAGIC, rc->ctx, KVC_ERR_INVALID_ARGUMENT, "not a live kvc_allocator");
  KVC_RETURN_IF(alloc->ctx != rc->ctx, rc->ctx, KVC_ERR_INVALID_ARGUMENT, "the allocator belongs to another context");
  KVC_RETURN_IF(rc->ps != 1, rc->ctx, KVC_ERR_INVALID_ARGUMENT, "page_size %lld: only a page-1 cache can be bound",
                (long long)rc->ps);
  KVC_RETURN_IF(alloc->num_pages != rc->cfg.num_slots, rc->ctx, KVC_ERR_INVALID_ARGUMENT,
                "the allocator has %lld slots, the cache num_slots %lld", (long long)alloc->num_pages,
                (long long)rc->cfg.num_slots);
  KVC_RETURN_IF(rc->bound, rc->ctx, KVC_ERR_MISUSE, "the cache is bound to an allocator already");
  KVC_RETURN_IF(cached, rc->ctx, KVC_ERR_MISUSE, "binding a cache that holds %lld tokens (reset it first)",
                (long long)cached);
  KVC_FORWARD(kvc__alloc_bind_cache(alloc, rc, __func__));
  rc->bound = alloc;
  return post(rc, __func__, KVC_OK);
}

kvc_status kvc_radix_cache_reset(kvc_radix_cache *rc) {
  KVC_FORWARD(live(rc, __func__));
  kvc__rx_clear(rc);
  if (rc->events_on) kvc__rx_event_cleared(rc);
  return post(rc, __func__, KVC_OK);
}

kvc_status kvc_radix_cache_sizes(const kvc_radix_cache *rc, int64_t *evictable, int64_t *protected_size,
                                 int64_t *cached) {
  KVC_FORWARD(live(rc, __func__));
  if (evictable) *evictable = rc->evictable;
  if (protected_size) *protected_size = rc->protected_;
  if (cached) *cached = rc->evictable + rc->protected_;
  return KVC_OK;
}

kvc_status kvc_radix_cache_stats(const kvc_radix_cache *rc, kvc_radix_stats *out) {
  KVC_FORWARD(live(rc, __func__));
  KVC_RETURN_IF(!out, rc->ctx, KVC_ERR_INVALID_ARGUMENT, "out is NULL");
  memset(out, 0, sizeof *out);
  out->nodes = rc->live_nodes - 1;
  out->leaves = rc->heap_len;
  out->cached_tokens = rc->evictable + rc->protected_;
  out->bytes = (int64_t)kvc__rx_bytes(rc);
  return KVC_OK;
}

kvc_status kvc_radix_cache_check(const kvc_radix_cache *rc) {
  KVC_FORWARD(live(rc, __func__));
  return kvc__rx_audit(rc, __func__);
}

kvc_status kvc_radix_cache_dump(const kvc_radix_cache *rc, char *buf, size_t cap, size_t *needed) {
  KVC_FORWARD(live(rc, __func__));
  KVC_RETURN_IF(cap && !buf, rc->ctx, KVC_ERR_INVALID_ARGUMENT, "buf is NULL with cap %zu", cap);
  size_t at = 0;
  char line[256];
  if (cap) buf[0] = '\0';
  /* Depth-first without a stack: first child, else next sibling, else climb. */
  int32_t x = rc->nodes[0].first_child, depth = 1;
  int w = snprintf(line, sizeof line, "root evictable=%lld protected=%lld\n", (long long)rc->evictable,
                   (long long)rc->protected_);
  for (;;) {
    if (w > 0) {
      size_t len = (size_t)w < sizeof line ? (size_t)w : sizeof line - 1;
      if (at + len < cap) memcpy(buf + at, line, len + 1);
      else if (at < cap) buf[at] = '\0';
      at += len;
    }
    if (x == RX_NONE) break;
    const rx_node *n = &rc->nodes[x];
    const int32_t *k = rx_keys(n);
    w = snprintf(line, sizeof line, "%*s[%d] len=%d lock=%d hits=%d prio=%d ns=%llu tokens=%d,%d%s\n", 2 * depth, "", x,
                 rc->hot[x].len, rc->hot[x].lock_ref, n->hit_count, n->priority, (unsigned long long)n->ns, k[0],
                 rc->hot[x].len > 1 ? k[1] : k[0], rc->hot[x].len > 2 ? ",..." : "");
    if (n->first_child != RX_NONE) {
      x = n->first_child;
      depth++;
      continue;
    }
    while (x != RX_NONE && rc->nodes[x].next_sib == RX_NONE) {
      x = rc->hot[x].parent;
      depth--;
      if (x == 0) x = RX_NONE;
    }
    if (x != RX_NONE) x = rc->nodes[x].next_sib;
  }
  if (needed) *needed = at + 1;
  return KVC_OK;
}

/* --- The kvc_prefix_cache adapter ----------------------------------------------------------------- */

int kvc__rx_pc_false(void *self) {
  (void)self;
  return 0;
}
int kvc__rx_pc_true(void *self) {
  (void)self;
  return 1;
}
static kvc_status pc_evict(void *self, kvc_flow *flow, int64_t n, int64_t swa_n, int64_t mamba_n) {
  kvc_radix_cache *rc = self;
  (void)mamba_n;
  /* PureSWARadixCache evicts max(num, swa_num); nothing evictable is not an error here:
   * the flow's capacity check reports what is missing. */
  int64_t want = KVC__MAX(n, swa_n);
  if (want <= 0 || rc->heap_len == 0) return KVC_OK;
  return kvc_radix_cache_evict(rc, flow, want, NULL);
}
static int64_t pc_evictable(void *self) { return ((kvc_radix_cache *)self)->evictable; }
static int64_t pc_protected(void *self) { return ((kvc_radix_cache *)self)->protected_; }
static int64_t pc_cached(void *self) {
  kvc_radix_cache *rc = self;
  return rc->evictable + rc->protected_;
}
static kvc_status pc_finished(void *self, kvc_flow *flow, kvc_req_state *req, int is_insert) {
  return kvc_radix_cache_cache_finished_req(self, flow, req, is_insert);
}
static kvc_status pc_unfinished(void *self, kvc_flow *flow, kvc_req_state *req) {
  return kvc_radix_cache_cache_unfinished_req(self, flow, req);
}
/* The interface's lock calls return nothing: a refused handle is logged. */
static void pc_inc(void *self, void *node) {
  kvc_radix_cache *rc = self;
  if (kvc_radix_cache_lock(rc, node) != KVC_OK) kvc__log(rc->ctx, KVC_LOG_WARN, "%s", kvc_last_error(rc->ctx));
}
static void pc_dec(void *self, void *node) {
  kvc_radix_cache *rc = self;
  if (kvc_radix_cache_unlock(rc, node) != KVC_OK) kvc__log(rc->ctx, KVC_LOG_WARN, "%s", kvc_last_error(rc->ctx));
}

kvc_prefix_cache kvc_radix_cache_as_prefix_cache(kvc_radix_cache *rc) {
  kvc_prefix_cache c;
  memset(&c, 0, sizeof c);
  c.self = rc;
  c.is_chunk_cache = kvc__rx_pc_false;
  c.supports_mamba = kvc__rx_pc_false;
  c.evict = pc_evict;
  c.evictable_size = pc_evictable;
  c.protected_size = pc_protected;
  c.cached_size = pc_cached;
  c.cache_finished_req = pc_finished;
  c.cache_unfinished_req = pc_unfinished;
  c.inc_lock_ref = pc_inc;
  c.dec_lock_ref = pc_dec;
  return c;
}
