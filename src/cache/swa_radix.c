/*
 * swa_radix.c — the SWA component of the radix tree (SGLang's unified cache SWAComponent,
 * components/swa.py, and SWARadixCache): kvc_swa_radix_cache is a kvc_radix_cache (the
 * FULL component: nodes, keys, full slots, full locks, the full eviction heap, all of
 * radix_tree.c unchanged) plus per-node SWA state kept on the same nodes:
 *
 *   rx_node.swa_lock   >= 0  live SWA slots, locked that many times
 *                      RX_SWA_TOMB  tombstone: full slots cached, SWA side released
 *   rx_node.swa_uuid         where an SWA lock walk stopped (moved to the upper half by
 *                            a split, so an unlock stops at the same tokens)
 *
 * The tree stores full slot ids only: the SWA side of a slot is its allocator's
 * full->SWA mapping. Making a tombstone releases that side (the allocator's
 * free_window, through the flow); freeing a node's full slots frees whatever SWA side
 * is still mapped (the SWA allocator's free), so a full eviction needs nothing extra.
 *
 * Rules (SGLang): a match ends at the deepest node where the live SWA tokens since the
 * last tombstone on the path reach the window (a path without tombstones is valid
 * anywhere); the part of a new leaf below the request's swa_evicted_seqlen is a
 * tombstone; FULL locks the whole path, SWA only the nodes covering the last window;
 * eviction of SWA runs over live unlocked nodes in LRU order: an inner (or full-locked)
 * node becomes a tombstone, an unlocked leaf is deleted, then its childless unlocked
 * tombstone ancestors.
 *
 * The SWA LRU (SGLang keeps a separate SWA LRU list) is a min-heap of (access, id) with
 * at most one entry per node (in_lru[id] says there is one), kept lazily: every node a
 * call may have created or revived (the nodes on its path) gets an entry if it has none;
 * the tree stamps `access` without telling this file, so a popped entry whose stamp is
 * older than the node's is pushed again with the node's stamp, and one of a node that is
 * gone or a tombstone is dropped. The first entry popped with a current stamp is then the
 * least recently used live node (every other entry's key is at most its node's stamp),
 * so an eviction costs O((victims + stale + SWA-locked entries met) log n), not a sort of
 * every node.
 *
 * Kinds (kvc_swa_radix_kind): HYBRID is all of the above; PURE (one SWA pool, SGLang's
 * PureSWARadixCache) and RING (per-request rings, SWA not gating matches) use the tree
 * and its FULL component only: no tombstones, no SWA locks.
 *
 * This file: create / destroy, the SWA LRU's upkeep, match, inserts with tombstone
 * revival and the request-level checkpoints. SWA locks, eviction, reset / sizes / audit
 * and the kvc_prefix_cache adapter are in swa_radix_evict.c (split for the ~700-line
 * file rule, issue 14); the struct and what both use are in swa_radix_impl.h.
 */
#include "swa_radix_impl.h"

#include <stdlib.h>
#include <string.h>

static const char *kind_name(int32_t k) {
  return k == KVC_SWA_RADIX_PURE ? "PURE" : k == KVC_SWA_RADIX_RING ? "RING" : "HYBRID";
}

/* A flow must drive an SWA allocator of the cache's kind (read from its public queries:
 * pure serves both sides from one allocator, ring mode has no SWA allocator). */
kvc_status kvc__swa_rx_check_flow(const kvc_swa_radix_cache *c, const kvc_flow *flow, const char *fn) {
  if (!flow || !flow->swa) return KVC_OK;
  const kvc_allocator *w = kvc_swa_allocator_swa(flow->swa);
  const int32_t k = !w                                       ? KVC_SWA_RADIX_RING
                    : w == kvc_swa_allocator_full(flow->swa) ? KVC_SWA_RADIX_PURE
                                                             : KVC_SWA_RADIX_HYBRID;
  KVC_RETURN_IF(k != c->kind, c->ctx, KVC_ERR_INVALID_ARGUMENT,
                "%s: the cache's kind is %s but the flow's SWA allocator is %s (config.kind)", fn, kind_name(c->kind),
                kind_name(k));
  return KVC_OK;
}

/* --- SWA LRU ------------------------------------------------------------------------------- */

static bool cand_less(kvc__rx_visit a, kvc__rx_visit b) {
  return a.access != b.access ? a.access < b.access : a.id < b.id;
}

void kvc__swa_rx_lru_push(kvc_swa_radix_cache *c, kvc__rx_visit e) {
  size_t i = c->lru_len++;
  while (i > 0) {
    const size_t p = (i - 1) / 2;
    if (!cand_less(e, c->lru[p])) break;
    c->lru[i] = c->lru[p];
    i = p;
  }
  c->lru[i] = e;
}

kvc__rx_visit kvc__swa_rx_lru_pop(kvc_swa_radix_cache *c) {
  const kvc__rx_visit top = c->lru[0], e = c->lru[--c->lru_len];
  size_t i = 0;
  for (;;) {
    size_t m = 2 * i + 1;
    if (m >= c->lru_len) break;
    if (m + 1 < c->lru_len && cand_less(c->lru[m + 1], c->lru[m])) m++;
    if (!cand_less(c->lru[m], e)) break;
    c->lru[i] = c->lru[m];
    i = m;
  }
  if (c->lru_len) c->lru[i] = e;
  return top;
}

/* Room for node ids below rc->nodes_used + 8 (what one call can create beyond the
 * high-water mark: a match's split, an insert's split, leaf and tombstone split). Before
 * anything changes: afterwards nothing is allocated. */
static kvc_status lru_reserve(kvc_swa_radix_cache *c, const char *fn) {
  if (!kvc__swa_rx_has_swa(c)) return KVC_OK;
  const size_t need = (size_t)c->rc->nodes_used + 8;
  if (need <= c->lru_cap) return KVC_OK;
  size_t cap = c->lru_cap ? c->lru_cap : 64;
  while (cap < need) cap *= 2;
  kvc__rx_visit *h = kvc__malloc(c->ctx, cap * sizeof *h), *a = kvc__malloc(c->ctx, cap * sizeof *a);
  uint8_t *f = kvc__calloc(c->ctx, cap, 1);
  if (!h || !a || !f) {
    kvc__free(c->ctx, h);
    kvc__free(c->ctx, a);
    kvc__free(c->ctx, f);
    return kvc__error(c->ctx, KVC_ERR_HOST_OOM, fn, "SWA LRU for %zu nodes", cap);
  }
  if (c->lru_len) memcpy(h, c->lru, c->lru_len * sizeof *h);
  if (c->lru_cap) memcpy(f, c->in_lru, c->lru_cap);
  kvc__free(c->ctx, c->lru);
  kvc__free(c->ctx, c->aside);
  kvc__free(c->ctx, c->in_lru);
  c->lru = h;
  c->aside = a;
  c->in_lru = f;
  c->lru_cap = cap;
  return KVC_OK;
}

/* Gives live node x an LRU entry if it has none (x < lru_cap: lru_reserve ran). */
static void lru_note(kvc_swa_radix_cache *c, int32_t x) {
  const rx_node *n = &c->rc->nodes[x];
  if (x <= 0 || c->in_lru[x] || !n->seg || n->swa_lock == RX_SWA_TOMB) return;
  c->in_lru[x] = 1;
  kvc__swa_rx_lru_push(c, (kvc__rx_visit){n->access, x});
}

/* Every node of rc->path[0:depth) (and `extra`, 0 = none): what a call touched. */
static void lru_note_path(kvc_swa_radix_cache *c, size_t depth, int32_t extra) {
  if (!kvc__swa_rx_has_swa(c)) return;
  for (size_t i = 0; i < depth; i++) lru_note(c, c->rc->path[i]);
  if (extra > 0) lru_note(c, extra);
}

/* --- LRU order on a path -------------------------------------------------------------- */
/*
 * SGLang's SWA tree (swa_radix_cache.py: reset_node_and_parents_mru, the insert walk, and
 * 0.5.23's unified core: a new tick per node going down, a match stamping upwards from its
 * valid end with decreasing ticks, a split's lower part stamped after its new upper part)
 * keeps every node more recently used than its parent, so SWA eviction tombstones the
 * nodes nearest the root first and the valid ends deep in a path last. The radix core
 * stamps all the nodes of a call with one tick (RadixCache's rule, where only leaves are
 * victims); the HYBRID tree restamps what a call touched in SGLang's order.
 */

static void stamp(kvc_radix_cache *rc, int32_t x) {
  rc->nodes[x].access = ++rc->clock;
  kvc__rx_heap_fix(rc, x);
}

/* After an insert whose walk started past tick t0: rc->path[0:depth) (the new leaf last)
 * with increasing ticks going down, the lower part of a node the walk split right after
 * its new upper part. */
static void stamp_insert(kvc_swa_radix_cache *c, size_t depth, uint64_t t0) {
  kvc_radix_cache *rc = c->rc;
  if (!kvc__swa_rx_has_swa(c)) return;
  for (size_t i = 0; i < depth; i++) {
    const int32_t x = rc->path[i];
    stamp(rc, x);
    if (i + 1 < depth && rc->nodes[x].creation > t0) /* an upper part split off this call */
      for (int32_t ch = rc->nodes[x].first_child; ch != RX_NONE; ch = rc->nodes[ch].next_sib)
        if (ch != rc->path[i + 1] && rc->nodes[ch].access > t0) stamp(rc, ch);
  }
}

/* Where the match's walk records the nodes it enters as they were (c->aside, free outside
 * an eviction; lru_reserve sized it for every node): NULL for PURE / RING, whose ticks
 * stay the radix core's. */
static kvc__rx_visit *seen_log(kvc_swa_radix_cache *c) { return kvc__swa_rx_has_swa(c) ? c->aside : NULL; }

/* After the walk (rc->path[0:depth), valid end d; c->aside[0:depth) what it entered): the
 * nodes past the valid end keep the ticks they had, the lower part of a node split at the
 * end is stamped after its new upper part, then path[0:d) with increasing ticks going
 * down. */
static void stamp_match(kvc_swa_radix_cache *c, size_t depth, size_t d) {
  kvc_radix_cache *rc = c->rc;
  if (!kvc__swa_rx_has_swa(c)) return;
  for (size_t i = d; i < depth; i++)
    if (c->aside[i].id == rc->path[i]) {
      rc->nodes[rc->path[i]].access = c->aside[i].access;
      kvc__rx_heap_fix(rc, rc->path[i]);
    }
  if (depth && c->aside[depth - 1].id != rc->path[depth - 1]) stamp(rc, (int32_t)c->aside[depth - 1].id);
  for (size_t i = 0; i < d; i++) stamp(rc, rc->path[i]);
}

/* --- Create / destroy ------------------------------------------------------------------- */

kvc_status kvc_swa_radix_cache_create(kvc_context *ctx, const kvc_swa_radix_cache_config *config,
                                      kvc_swa_radix_cache **out) {
  kvc_swa_radix_cache_config cfg = KVC_SWA_RADIX_CACHE_CONFIG_INIT;
  KVC__CREATE_CONFIG(ctx, config, out, &cfg, kvc_swa_radix_cache_config);
  KVC_RETURN_IF(cfg.sliding_window < 1, ctx, KVC_ERR_INVALID_ARGUMENT, "sliding_window %d < 1", cfg.sliding_window);
  KVC_RETURN_IF(cfg.kind < KVC_SWA_RADIX_HYBRID || cfg.kind > KVC_SWA_RADIX_RING, ctx, KVC_ERR_INVALID_ARGUMENT,
                "kind %d is not a kvc_swa_radix_kind", cfg.kind);
  KVC_RETURN_IF(cfg.flags & ~KVC_SWA_RADIX_EAGER_ZERO, ctx, KVC_ERR_INVALID_ARGUMENT, "unknown flags 0x%x",
                (unsigned)cfg.flags);
  kvc_swa_radix_cache *c = kvc__calloc(ctx, 1, sizeof *c);
  KVC_RETURN_IF(!c, ctx, KVC_ERR_HOST_OOM, "SWA radix cache");
  kvc_status st = kvc_radix_cache_create(ctx, &cfg.radix, &c->rc);
  if (st != KVC_OK) {
    kvc__free(ctx, c);
    return st;
  }
  c->magic = KVC__SWA_RADIX_MAGIC;
  c->ctx = ctx;
  c->window = cfg.sliding_window;
  c->kind = cfg.kind;
  c->free_swa = cfg.free_swa_slots;
  c->free_swa_user = cfg.free_swa_user;
  c->zalloc = cfg.swa_allocator;
  c->zstream = cfg.swa_stream;
  c->eager_zero = (cfg.flags & KVC_SWA_RADIX_EAGER_ZERO) != 0;
  *out = c;
  return KVC_OK;
}

void kvc_swa_radix_cache_destroy(kvc_swa_radix_cache *c) {
  if (!c || c->magic != KVC__SWA_RADIX_MAGIC) return;
  kvc_context *ctx = c->ctx;
  kvc_radix_cache_destroy(c->rc);
  kvc__free(ctx, c->lru);
  kvc__free(ctx, c->aside);
  kvc__free(ctx, c->in_lru);
  kvc__free(ctx, c->vals);
  kvc__free(ctx, c->old_full);
  kvc__free(ctx, c->ranges);
  kvc__free(ctx, c->ebuf);
  c->magic = 0;
  kvc__free(ctx, c);
}

/* --- Match ---------------------------------------------------------------------------------- */

/* The deepest of the root and rc->path[0:depth) where a full window of live SWA tokens
 * ends (SGLang's match validator): *len its tokens. */
static size_t valid_depth(const kvc_swa_radix_cache *c, size_t depth, int64_t *len) {
  const kvc_radix_cache *rc = c->rc;
  bool tomb_seen = false;
  int64_t since = 0, cum = 0;
  size_t best = 0;
  *len = 0;
  if (!kvc__swa_rx_has_swa(c)) { /* PURE / RING: SWA does not gate the match */
    for (size_t i = 0; i < depth; i++) cum += rc->hot[rc->path[i]].len;
    *len = cum;
    return depth;
  }
  for (size_t i = 0; i < depth; i++) {
    const int32_t x = rc->path[i];
    cum += rc->hot[x].len;
    if (rc->nodes[x].swa_lock == RX_SWA_TOMB) tomb_seen = true, since = 0;
    else since += rc->hot[x].len;
    if (!tomb_seen || since >= c->window) best = i + 1, *len = cum;
  }
  return best;
}

static kvc_status match(kvc_swa_radix_cache *c, const char *fn, uint64_t ns, const int32_t *tokens, int64_t n,
                        int64_t *buf, kvc_radix_match *out) {
  kvc_radix_cache *rc = c->rc;
  KVC_RETURN_IF(n < 0 || n > INT32_MAX || (n > 0 && !tokens), c->ctx, KVC_ERR_INVALID_ARGUMENT, "%s: %lld tokens at %p",
                fn, (long long)n, (const void *)tokens);
  n = n / rc->ps * rc->ps;
  memset(out, 0, sizeof *out);
  out->node = kvc__rx_handle(rc, 0);
  if (n == 0) return KVC_OK;
  KVC_FORWARD(kvc__rx_reserve(rc, fn, (size_t)n));
  KVC_FORWARD(lru_reserve(c, fn));
  int64_t matched, len;
  int32_t node;
  size_t depth;
  KVC_FORWARD(kvc__rx_match_seen(rc, ns, tokens, n, &matched, &node, &depth, seen_log(c)));
  lru_note_path(c, depth, 0); /* a split upper node is new */
  const size_t d = valid_depth(c, depth, &len);
  stamp_match(c, depth, d);
  int copied = 0;
  out->len = len;
  out->slots = len ? kvc__rx_path_values(rc, d, len, buf, &copied) : NULL;
  out->copied = copied;
  out->node = kvc__rx_handle(rc, d ? rc->path[d - 1] : 0);
  return KVC_OK;
}

kvc_status kvc_swa_radix_cache_match_prefix(kvc_swa_radix_cache *c, uint64_t ns, const int32_t *tokens, int64_t n,
                                            kvc_radix_match *out) {
  SWA_RADIX_ENTRY(c);
  KVC_RETURN_IF(!out, c->ctx, KVC_ERR_INVALID_ARGUMENT, "out is NULL");
  return kvc__swa_rx_post(c, __func__, match(c, __func__, ns, tokens, n, NULL, out));
}

kvc_status kvc_swa_radix_cache_match_req(kvc_swa_radix_cache *c, kvc_req_state *req, kvc_radix_req *rreq) {
  SWA_RADIX_ENTRY(c);
  KVC_RETURN_IF(!req || !rreq, c->ctx, KVC_ERR_INVALID_ARGUMENT, "req or rreq is NULL");
  KVC_RETURN_IF(req->req_row || req->cache_node || rreq->swa_lock, c->ctx, KVC_ERR_MISUSE,
                "the request already holds a row (%d), a node or an SWA lock: match only new requests", req->req_row);
  KVC_RETURN_IF(rreq->num_tokens < 0 || (rreq->num_tokens > 0 && !rreq->tokens), c->ctx, KVC_ERR_INVALID_ARGUMENT,
                "rreq: %lld tokens at %p", (long long)rreq->num_tokens, (const void *)rreq->tokens);
  kvc_radix_match m;
  /* SGLang _compute_max_prefix_len: the last token is always recomputed; with rings, the
   * last window too (swa_reprefill_tail_tokens). */
  const int64_t tail = c->kind == KVC_SWA_RADIX_RING ? c->window : 1;
  KVC_FORWARD(match(c, __func__, rreq->ns, rreq->tokens, KVC__MAX(0, rreq->num_tokens - tail), rreq->prefix_buf, &m));
  int32_t node = 0;
  kvc__rx_from_handle(c->rc, m.node, &node);
  kvc__rx_lock(c->rc, node); /* a valid match end is always SWA-lockable */
  /* A session keeps its first turn's node and releases it through the node-only
   * dec_lock_ref: it gets the chain lock that call can release. */
  rreq->swa_lock = !node || !kvc__swa_rx_has_swa(c) ? 0
                   : req->session_id                ? kvc__swa_rx_lock_chain(c, node)
                                                    : kvc__swa_rx_lock(c, node);
  req->prefix_len = req->cache_protected_len = m.len;
  req->prefix_slots = m.len ? m.slots : NULL;
  req->cache_node = node ? m.node : NULL;
  return kvc__swa_rx_post(c, __func__, KVC_OK);
}

/* --- Insert ------------------------------------------------------------------------------------ */

/* After an insert of keys[0:n) that found `prefix` tokens and hung the rest as leaf
 * `node`: the leaf's part below `evicted` (the request's swa_evicted_seqlen) becomes a
 * tombstone, split off when the leaf goes past it (a node reserved by the insert). */
static void tombstone_leaf(kvc_swa_radix_cache *c, int32_t node, int64_t prefix, int64_t n, int64_t evicted) {
  kvc_radix_cache *rc = c->rc;
  if (!kvc__swa_rx_has_swa(c) || n <= prefix) return;
  if (evicted > prefix) {
    const int64_t t = KVC__MIN(evicted, n) - prefix;
    int32_t x = node;
    if (t < rc->hot[node].len) x = kvc__rx_split(rc, node, (int32_t)t);
    rc->nodes[x].swa_lock = RX_SWA_TOMB;
    rc->swa_live -= t;
    /* Stored whole by the insert, its SWA side was never there: said as SWA removed. */
    if (rc->events_on) kvc__rx_event_removed_as(rc, x, KVC_RADIX_COMPONENT_SWA);
    if (evicted >= n) return;
  }
  /* SGLang _maybe_split_leaf_for_swa_lock: the live part of a new leaf is capped at one
   * page-aligned window, so an SWA lock on it pins one window of SWA slots, not the whole
   * (chunked-prefill-long) leaf; the older live part above it is LRU-older. */
  const int64_t tail = kvc__ceil_align(c->window, rc->ps), len = rc->hot[node].len;
  if (len > tail && rc->nodes[node].swa_lock == 0) {
    const int32_t upper = kvc__rx_split(rc, node, (int32_t)(len - tail));
    /* The split stamped the new upper node; SGLang's _split_node (SWA) stamps the child
     * after it, so the leaf stays the more recently used (the SWA LRU's order). */
    rc->nodes[node].access = ++rc->clock;
    lru_note(c, upper);
  }
}

static kvc_status check_evicted(const kvc_swa_radix_cache *c, int64_t evicted, const char *fn) {
  KVC_RETURN_IF(evicted < 0 || evicted % c->rc->ps, c->ctx, KVC_ERR_INVALID_ARGUMENT,
                "%s: swa_evicted_seqlen %lld is not a page-aligned length", fn, (long long)evicted);
  return KVC_OK;
}

/* --- Request inserts with tombstone revival --------------------------------------------- */
/*
 * SGLang's SWA component revives a tombstone the insert overlaps (update_component_on_
 * insert_overlap / _recover_from_incoming): where the request's own slots are live on the
 * SWA side (at or past its swa_evicted_seqlen, past what it matched) and the tree's node
 * there is an unlocked tombstone, the node takes the incoming slots (whose SWA peers are
 * live) and its old full slots are freed (full only: FreeDeviceKVFullOnly; their SWA side
 * is gone). Everything else of the overlap is a duplicate as in any insert, freed through
 * the flow (below the cursor that free releases only the full side, the SWA side being
 * gone already).
 *
 * Done without touching the tree's insert: the row is copied, and at the revivable
 * positions the tree's own values are put in the copy, so the insert sees no duplicates
 * there; once it succeeded, the nodes at those positions (the one straddling the start
 * split off with a node the insert reserved) get the incoming slots, written over their
 * values in place (each segment position belongs to one node). Every check that can fail
 * runs before the insert; after it only the flow's free of the old slots can report.
 */

static kvc_status vals_reserve(kvc_swa_radix_cache *c, size_t n, const char *fn) {
  if (n <= c->vals_cap) return KVC_OK;
  size_t cap = c->vals_cap ? c->vals_cap : 256, bytes;
  while (cap < n) cap *= 2;
  if (!kvc__mul_size(cap, 4 * sizeof(int64_t), &bytes))
    return kvc__error(c->ctx, KVC_ERR_INVALID_ARGUMENT, fn, "%zu tokens overflow the insert scratch", n);
  int64_t *v = kvc__malloc(c->ctx, cap * sizeof *v), *o = kvc__malloc(c->ctx, cap * sizeof *o),
          *r = kvc__malloc(c->ctx, 2 * cap * sizeof *r);
  if (!v || !o || !r) {
    kvc__free(c->ctx, v);
    kvc__free(c->ctx, o);
    kvc__free(c->ctx, r);
    return kvc__error(c->ctx, KVC_ERR_HOST_OOM, fn, "insert scratch for %zu tokens", n);
  }
  kvc__free(c->ctx, c->vals);
  kvc__free(c->ctx, c->old_full);
  kvc__free(c->ctx, c->ranges);
  c->vals = v;
  c->old_full = o;
  c->ranges = r;
  c->vals_cap = cap;
  return KVC_OK;
}

/* Whether path node x (an unlocked tombstone) can take incoming slots. */
static bool revivable(const kvc_radix_cache *rc, int32_t x) {
  return rc->nodes[x].swa_lock == RX_SWA_TOMB && rc->hot[x].lock_ref == 0;
}

/* What an insert with revival is given. */
typedef struct ins_src {
  const int64_t *vals; /* the slots, or NULL: row `row` of the flow's mirror */
  int32_t row;
  uint64_t ns;
  const int32_t *keys;
  int64_t evicted, from, n; /* swa_evicted_seqlen, first position not the tree's, tokens */
  int32_t priority;
  int64_t inserted_len;
} ins_src;

static kvc_status src_slots(const ins_src *in, kvc_flow *flow, int64_t a, int64_t b, int64_t *out) {
  if (in->vals) {
    memcpy(out, in->vals + a, (size_t)(b - a) * sizeof *out);
    return KVC_OK;
  }
  return kvc_flow_row_slots(flow, in->row, a, b, out);
}

/* kvc__rx_insert_with of in's keys with vals, or (vals NULL) the slots of in's row; 3
 * extra nodes for revival. */
static kvc_status insert_vals(kvc_radix_cache *rc, kvc_flow *flow, const ins_src *in, const int64_t *vals,
                              const char *fn, int64_t *prefix, int32_t *node, size_t *nd, size_t *depth) {
  const rx_row_src src = {flow, in->row};
  const rx_insert_args a = {.ns = in->ns,
                            .keys = in->keys,
                            .vals = vals,
                            .src = vals ? NULL : &src,
                            .from = in->from,
                            .n = in->n,
                            .priority = in->priority,
                            .inserted_len = in->inserted_len,
                            .extra = 3,
                            .prefix = prefix,
                            .node = node,
                            .ndups = nd,
                            .depth = depth};
  return kvc__rx_insert_with(rc, flow, fn, &a);
}

/* kvc__rx_insert_with of in's slots with the revival above (HYBRID only). A node is revived
 * whole from lo0 = max(evicted, from) on, and only when none of its incoming slots is the
 * tree's own (a re-insert of cached values revives nothing). *revived gets the tokens
 * revived; *applied says whether the insert happened (a failure with it false changed
 * nothing; with it true, the flow refused the free of the old slots, which stay out of
 * the tree). */
static kvc_status insert_rev(kvc_swa_radix_cache *c, kvc_flow *flow, const ins_src *in, const char *fn, int64_t *prefix,
                             int32_t *node, size_t *nd, size_t *depth, int64_t *revived, bool *applied) {
  kvc_radix_cache *rc = c->rc;
  const int64_t n = in->n;
  *revived = 0;
  *applied = false;
  KVC_FORWARD(kvc__rx_reserve(rc, fn, (size_t)n));
  const int64_t lo0 = KVC__MAX(in->evicted, in->from);
  /* Only a tree with a tombstone somewhere needs the extra walk; only a revivable node on
   * the path needs the copy. */
  const bool tombs = rc->evictable + rc->protected_ > rc->swa_live;
  size_t pd = 0;
  int64_t p = 0;
  bool any = false;
  if (kvc__swa_rx_has_swa(c) && lo0 < n && tombs) {
    p = kvc__rx_probe_path(rc, in->ns, in->keys, n, &pd);
    int64_t s0 = 0;
    for (size_t i = 0; i < pd && s0 < p && !any; i++) {
      const int32_t x = rc->path[i];
      const int64_t e = s0 + rc->hot[x].len;
      any = revivable(rc, x) && KVC__MIN(e, p) > KVC__MAX(s0, lo0);
      s0 = e;
    }
  }
  if (!any) {
    KVC_FORWARD(insert_vals(rc, flow, in, in->vals, fn, prefix, node, nd, depth));
    *applied = true;
    return KVC_OK;
  }
  KVC_FORWARD(vals_reserve(c, (size_t)n, fn));
  KVC_FORWARD(src_slots(in, flow, 0, n, c->vals));
  /* Chosen ranges [lo, hi) in c->ranges (ascending); their incoming slots in old_full. */
  int64_t n_rev = 0, nr = 0;
  {
    int64_t s0 = 0;
    for (size_t i = 0; i < pd && s0 < p; i++) {
      const int32_t x = rc->path[i];
      const int64_t e = s0 + rc->hot[x].len, lo = KVC__MAX(s0, lo0), hi = KVC__MIN(e, p);
      bool ok = revivable(rc, x) && hi > lo;
      const int64_t *tv = rx_vals(&rc->nodes[x]);
      for (int64_t k = lo; ok && k < hi; k++) ok = c->vals[k] != tv[k - s0];
      if (ok) {
        c->ranges[2 * nr] = lo, c->ranges[2 * nr + 1] = hi, nr++;
        for (int64_t k = lo; k < hi; k++) {
          c->old_full[n_rev++] = c->vals[k];
          c->vals[k] = tv[k - s0];
        }
      }
      s0 = e;
    }
    int64_t bad;
    KVC_RETURN_IF(n_rev && kvc__rx_check_free(rc, c->old_full, n_rev, &bad) != KVC_OK, c->ctx, KVC_ERR_MISUSE,
                  "%s: the slot %lld over an SWA tombstone is outside [1, %lld] or already cached", fn,
                  (long long)(n_rev ? c->old_full[bad] : 0), (long long)rc->top_slot);
  }
  KVC_FORWARD(insert_vals(rc, flow, in, c->vals, fn, prefix, node, nd, depth));
  *applied = true;
  if (!n_rev) return KVC_OK;
  /* Revive the chosen ranges along the insert's path (node boundaries at *prefix now; the
   * one straddling lo0 is split there, with a node the insert reserved). */
  int64_t s0 = 0, n_old = 0, j = 0;
  for (size_t i = 0; i < *depth && s0 < *prefix && j < nr; i++) {
    const int32_t x = rc->path[i];
    const int64_t e = s0 + rc->hot[x].len, a = KVC__MAX(s0, lo0);
    if (a == c->ranges[2 * j] && e == c->ranges[2 * j + 1] && revivable(rc, x)) {
      j++;
      if (s0 < lo0) kvc__rx_split(rc, x, (int32_t)(lo0 - s0)); /* x keeps [lo0, e) */
      const int64_t len = e - a;
      rx_node *nx = &rc->nodes[x];
      int64_t *tv = rx_vals(nx), run = -1, bad;
      KVC_FORWARD(src_slots(in, flow, a, e, c->vals + a)); /* the incoming slots again */
      kvc__rx_unmark(rc, tv, len);
      if (kvc__rx_mark(rc, c->vals + a, len, &bad, &run) != KVC_OK) { /* checked: cannot happen */
        kvc__rx_mark(rc, tv, len, &bad, NULL);
        for (int64_t k = 0; k < len; k++) c->old_full[n_old++] = c->vals[a + k]; /* freed as duplicates */
        *nd += (size_t)len;
      } else {
        for (int64_t k = 0; k < len; k++) c->old_full[n_old++] = tv[k], tv[k] = c->vals[a + k];
        nx->run_first = run;
        nx->swa_lock = 0;
        nx->swa_uuid = 0;
        rc->swa_live += len;
        *revived += len;
        lru_note(c, x);
        if (rc->events_on) kvc__rx_event_stored(rc, x);
      }
    }
    s0 = e;
  }
  rx_free_path fp = {rc, flow};
  return n_old ? kvc__rx_free_through(&fp, c->old_full, (size_t)n_old) : KVC_OK;
}

/* insert_rev of a request's row[0:n) (from = its cache_protected_len, clipped to n). */
static kvc_status insert_req(kvc_swa_radix_cache *c, kvc_flow *flow, const kvc_req_state *req, const kvc_radix_req *rr,
                             int64_t from, int64_t n, const char *fn, int64_t *prefix, int32_t *node, size_t *nd,
                             size_t *depth, int64_t *revived, bool *applied) {
  const ins_src in = {NULL, req->req_row, rr->ns,          rr->tokens, req->swa_evicted_seqlen, from,
                      n,    rr->priority, rr->inserted_len};
  return insert_rev(c, flow, &in, fn, prefix, node, nd, depth, revived, applied);
}

kvc_status kvc_swa_radix_cache_insert(kvc_swa_radix_cache *c, kvc_flow *flow, uint64_t ns, const int32_t *tokens,
                                      const int64_t *slots, int64_t n, int64_t swa_evicted_seqlen,
                                      int64_t *prefix_len) {
  SWA_RADIX_ENTRY(c);
  kvc_radix_cache *rc = c->rc;
  KVC_RETURN_IF(n < 0 || n > INT32_MAX || (n > 0 && (!tokens || !slots)), c->ctx, KVC_ERR_INVALID_ARGUMENT,
                "%lld tokens / slots at %p / %p", (long long)n, (const void *)tokens, (const void *)slots);
  KVC_FORWARD(check_evicted(c, swa_evicted_seqlen, __func__));
  KVC_RETURN_IF(c->kind == KVC_SWA_RADIX_PURE && swa_evicted_seqlen, c->ctx, KVC_ERR_INVALID_ARGUMENT,
                "%s: swa_evicted_seqlen %lld with a PURE cache: those slots are freed, insert only live ones", __func__,
                (long long)swa_evicted_seqlen);
  KVC_FORWARD(kvc__swa_rx_check_flow(c, flow, __func__));
  n = n / rc->ps * rc->ps;
  int64_t prefix = 0;
  int32_t node;
  if (n > 0) {
    KVC_FORWARD(lru_reserve(c, __func__));
    size_t depth, nd = 0;
    int64_t revived;
    bool applied;
    const ins_src in = {slots, 0, ns, tokens, swa_evicted_seqlen, 0, n, 0, 0};
    const uint64_t t0 = rc->clock;
    kvc_status st = insert_rev(c, flow, &in, __func__, &prefix, &node, &nd, &depth, &revived, &applied);
    if (!applied) return st;
    stamp_insert(c, depth, t0);
    tombstone_leaf(c, node, prefix, n, swa_evicted_seqlen);
    lru_note_path(c, depth, node);
    KVC_FORWARD(st); /* the old slots of revived tombstones: the free was refused */
  }
  if (prefix_len) *prefix_len = prefix;
  return kvc__swa_rx_post(c, __func__, KVC_OK);
}

/* --- Request-level checkpoint --------------------------------------------------------------- */

/* Drops the request's locks (both checked before anything changes). */
static kvc_status req_unlock(kvc_swa_radix_cache *c, int32_t old, const kvc_radix_req *rr, const char *fn) {
  if (!old) return KVC_OK;
  KVC_RETURN_IF(c->rc->hot[old].lock_ref <= 0, c->ctx, KVC_ERR_MISUSE, "%s: the request's node is not locked", fn);
  if (rr->swa_lock) KVC_FORWARD(kvc__swa_rx_unlockable(c, old, rr->swa_lock, fn));
  if (rr->swa_lock) kvc__swa_rx_unlock(c, old, rr->swa_lock);
  return kvc__rx_unlock(c->rc, old, fn);
}

/* The undo of req_unlock: the same nodes as the receipt names (up to its uuid, which a
 * walk by window coverage may no longer stop at once splits moved it up). */
static void req_relock(kvc_swa_radix_cache *c, int32_t old, const kvc_radix_req *rr) {
  if (!old) return;
  kvc_radix_cache *rc = c->rc;
  kvc__rx_lock(rc, old);
  if (rr->swa_lock == RCPT_CHAIN) {
    kvc__swa_rx_lock_chain(c, old);
  } else if (rr->swa_lock) {
    const uint32_t uuid = (uint32_t)(rr->swa_lock >> 2);
    for (int32_t x = old; x > 0; x = rc->hot[x].parent) {
      if (rc->nodes[x].swa_lock++ == 0) rc->swa_protected += rc->hot[x].len;
      if (uuid && rc->nodes[x].swa_uuid == uuid) break;
    }
  }
}

/* Frees the request's row[from, to) but the part window eviction released whole (PURE:
 * kvc__flow_row_dead), in ONE free. */
static kvc_status free_row(kvc_radix_cache *rc, kvc_flow *flow, const kvc_req_state *req, int64_t from, int64_t to) {
  if (to <= from) return KVC_OK;
  int64_t d0, d1;
  kvc__flow_row_dead(flow, req, &d0, &d1);
  const int64_t a1 = d1 > d0 ? KVC__MIN(to, KVC__MAX(from, d0)) : to, b0 = d1 > d0 ? KVC__MAX(from, d1) : to;
  size_t k = 0;
  if (a1 > from) KVC_FORWARD(kvc_flow_row_slots(flow, req->req_row, from, a1, flow->row_slots));
  k = a1 > from ? (size_t)(a1 - from) : 0;
  if (to > b0) KVC_FORWARD(kvc_flow_row_slots(flow, req->req_row, b0, to, flow->row_slots + k));
  k += to > b0 ? (size_t)(to - b0) : 0;
  rx_free_path fp = {rc, flow};
  return k ? kvc__rx_free_through(&fp, flow->row_slots, k) : KVC_OK;
}

/* What both checkpoints check first: the request (*old its locked node, 0 = none), the
 * flow's SWA allocator kind, and the request's key (*rr). */
static kvc_status req_begin(kvc_swa_radix_cache *c, kvc_flow *flow, const kvc_req_state *req, const char *fn,
                            int32_t *old, kvc_radix_req **rr) {
  KVC_FORWARD(kvc__rx_req_check(c->rc, flow, req, fn, old));
  KVC_FORWARD(kvc__swa_rx_check_flow(c, flow, fn));
  kvc_status st;
  *rr = kvc__rx_req_of(c->rc, req, fn, &st);
  return st;
}

/* The key a finished or chunked request may cache: its committed tokens floored to pages;
 * PURE: capped at swa_evict_floor (SGLang's key_limit, ceil-aligned) when set, and never
 * past where window eviction started freeing the row's slots, but never below
 * cache_protected_len (which is the tree's already). */
static int64_t req_key_len(const kvc_swa_radix_cache *c, const kvc_flow *flow, const kvc_req_state *req) {
  const int64_t ps = c->rc->ps, k0 = req->kv_committed_len / ps * ps;
  if (c->kind != KVC_SWA_RADIX_PURE) return k0;
  int64_t k = k0;
  if (req->swa_evict_floor > 0) k = KVC__MIN(k, kvc__ceil_align(req->swa_evict_floor, ps));
  int64_t d0, d1;
  kvc__flow_row_dead(flow, req, &d0, &d1);
  if (d1 > d0) k = KVC__MIN(k, d0 / ps * ps);
  /* Never below what the tree owns already (a checkpoint would shrink it). */
  return KVC__MAX(k, KVC__MIN(req->cache_protected_len, k0));
}

static kvc_status finished_req(kvc_swa_radix_cache *c, kvc_flow *flow, kvc_req_state *req, int is_insert) {
  kvc_radix_cache *rc = c->rc;
  int32_t old;
  kvc_radix_req *rr;
  const char *const fn = "kvc_swa_radix_cache_cache_finished_req";
  KVC_FORWARD(req_begin(c, flow, req, fn, &old, &rr));
  kvc_status st = KVC_OK;
  const int64_t committed = req->kv_committed_len;
  const int64_t key_len = is_insert ? req_key_len(c, flow, req) : 0;
  if (is_insert) {
    KVC_FORWARD(kvc__rx_req_key(rc, rr, old, key_len, fn));
    KVC_FORWARD(check_evicted(c, req->swa_evicted_seqlen, fn));
    KVC_FORWARD(lru_reserve(c, fn));
  }
  KVC_FORWARD(req_unlock(c, old, rr, fn));
  int64_t keep = req->cache_protected_len; /* abort: the tree keeps only what it had */
  if (key_len > 0) {
    int64_t prefix, revived;
    int32_t node;
    size_t depth, nd;
    bool applied;
    const uint64_t t0 = rc->clock;
    st = insert_req(c, flow, req, rr, KVC__MIN(req->cache_protected_len, key_len), key_len, fn, &prefix, &node, &nd,
                    &depth, &revived, &applied);
    if (!applied) {
      req_relock(c, old, rr);
      return st;
    }
    stamp_insert(c, depth, t0);
    tombstone_leaf(c, node, prefix, key_len, req->swa_evicted_seqlen);
    lru_note_path(c, depth, node);
    if (st != KVC_OK) { /* the flow refused the revived tombstones' old slots: reported late */
      req->cache_node = NULL;
      req->cache_protected_len = 0;
      rr->swa_lock = 0;
      return st;
    }
    /* SGLang splits no prompt off in a tree with an SWA component; PURE is its plain
     * RadixCache, which does (outputs evicted before the prompt). */
    const int64_t pf = KVC__MIN(rr->prompt_len, rr->num_tokens) / rc->ps * rc->ps;
    if (c->kind == KVC_SWA_RADIX_PURE && pf > 0 && pf < key_len) {
      int32_t unused;
      const rx_apply_args a = {.ns = rr->ns,
                               .keys = rr->tokens,
                               .n = pf,
                               .priority = rr->priority + 1,
                               .inserted_len = KVC__MAX(rr->inserted_len, key_len),
                               .leaf_run = -1,
                               .node = &unused};
      kvc__rx_apply_insert_with(rc, &a);
    }
    rr->inserted_len = KVC__MAX(rr->inserted_len, key_len);
    /* [0, cache_protected_len) is the tree's whatever the key (PURE may cap it lower). */
    keep = KVC__MAX(key_len, req->cache_protected_len);
  }
  /* The unaligned tail (insert) or everything past the tree's part (abort) is freed, but
   * what window eviction already released whole (PURE). */
  st = free_row(rc, flow, req, KVC__MAX(keep, 0), committed);
  req->cache_node = NULL;
  req->cache_protected_len = 0;
  rr->swa_lock = 0;
  KVC_FORWARD(st);
  return kvc__swa_rx_post(c, fn, KVC_OK);
}

/* Two frees (the insert's duplicates and revived tombstones' old slots, then the row's
 * tail) in one deferred-zero scope: one device-mapping launch where there were two. */
kvc_status kvc_swa_radix_cache_cache_finished_req(kvc_swa_radix_cache *c, kvc_flow *flow, kvc_req_state *req,
                                                  int is_insert) {
  SWA_RADIX_ENTRY(c);
  kvc_swa_allocator *const za = kvc__swa_rx_zero_open(c, flow);
  return kvc__swa_rx_zero_close(c, flow, za, finished_req(c, flow, req, is_insert));
}

static kvc_status unfinished_req(kvc_swa_radix_cache *c, kvc_flow *flow, kvc_req_state *req) {
  kvc_radix_cache *rc = c->rc;
  const char *fn = "kvc_swa_radix_cache_cache_unfinished_req";
  int32_t old;
  kvc_radix_req *rr;
  KVC_FORWARD(req_begin(c, flow, req, fn, &old, &rr));
  kvc_status st = KVC_OK;
  const int64_t committed = req->kv_committed_len, key_len = req_key_len(c, flow, req);
  KVC_FORWARD(kvc__rx_req_key(rc, rr, old, key_len, fn));
  KVC_FORWARD(check_evicted(c, req->swa_evicted_seqlen, fn));
  KVC_FORWARD(lru_reserve(c, fn));
  KVC_FORWARD(req_unlock(c, old, rr, fn)); /* refuses a lock below zero, changing nothing ... */
  req_relock(c, old, rr);                  /* ... and is undone: the old locks go last */
  const int64_t from = KVC__MIN(req->cache_protected_len, key_len);
  int32_t node = 0;
  if (key_len > 0) {
    int64_t prefix, revived, matched;
    size_t depth, nd = 0;
    bool applied;
    const uint64_t t0 = rc->clock;
    st = insert_req(c, flow, req, rr, from, key_len, fn, &prefix, &node, &nd, &depth, &revived, &applied);
    if (!applied) return st;
    stamp_insert(c, depth, t0);
    tombstone_leaf(c, node, prefix, key_len, req->swa_evicted_seqlen);
    lru_note_path(c, depth, node);
    rr->inserted_len = KVC__MAX(rr->inserted_len, key_len);
    /* SGLang re-matches the key (stamping it) and writes the tree's slots into the row
     * where the request's duplicates were; the scratch for key_len is reserved, so the
     * walk cannot fail, and it ends at key_len (just inserted). */
    size_t vd;
    int64_t vlen;
    kvc__rx_match_seen(rc, rr->ns, rr->tokens, key_len, &matched, &node, &depth, seen_log(c));
    lru_note_path(c, depth, 0);
    vd = valid_depth(c, depth, &vlen);
    stamp_match(c, depth, vd);
    if (st == KVC_OK && nd) st = kvc__rx_write_path(rc, flow, req, depth, from, key_len);
  }
  /* The new locks, then the old ones released (a shared path never drops to zero). */
  const uint64_t old_receipt = rr->swa_lock;
  kvc__rx_lock(rc, node);
  rr->swa_lock = 0;
  if (node && kvc__swa_rx_has_swa(c) && kvc__swa_rx_lockable(c, node, fn) == KVC_OK)
    rr->swa_lock = req->session_id ? kvc__swa_rx_lock_chain(c, node) : kvc__swa_rx_lock(c, node);
  kvc_radix_req prev = *rr;
  prev.swa_lock = old_receipt;
  KVC_CLEANUP_KEEP_FIRST(req_unlock(c, old, &prev, fn), st); /* validated above */
  req->cache_node = node ? kvc__rx_handle(rc, node) : NULL;
  req->cache_protected_len = key_len;
  req->prefix_len = committed;
  req->prefix_slots = NULL;
  return kvc__swa_rx_post(c, fn, st);
}

/* Its frees (the duplicates and revived tombstones' old slots) in one deferred-zero scope,
 * as cache_finished_req. */
kvc_status kvc_swa_radix_cache_cache_unfinished_req(kvc_swa_radix_cache *c, kvc_flow *flow, kvc_req_state *req) {
  SWA_RADIX_ENTRY(c);
  kvc_swa_allocator *const za = kvc__swa_rx_zero_open(c, flow);
  return kvc__swa_rx_zero_close(c, flow, za, unfinished_req(c, flow, req));
}
