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
 */
#include "radix.h"
#include "../flow/flow.h"

#include <stdlib.h>
#include <string.h>

#define KVC__SWA_RADIX_MAGIC 0x6b76632d73776178ull /* "kvc-swax" */

struct kvc_swa_radix_cache {
  uint64_t magic;
  kvc_context *ctx;
  kvc_radix_cache *rc; /* the tree and its FULL component */
  int64_t window;
  int32_t kind; /* kvc_swa_radix_kind */
  kvc_radix_free_fn free_swa;
  void *free_swa_user;
  uint32_t uuid_next;
  /* The SWA LRU: a min-heap of (access, id), in_lru per node id, and scratch for the
   * SWA-locked entries an eviction sets aside; all sized for cap node ids. */
  struct swa_cand {
    uint64_t access;
    int64_t id;
  } * lru, *aside;
  size_t lru_len, lru_cap;
  uint8_t *in_lru;
  /* A request's row as an insert's values (revival substitutes the tree's), and the old
   * full slots of revived tombstones: both key-length scratch. */
  int64_t *vals, *old_full, *ranges; /* ranges: 2 x vals_cap (revived [lo, hi) pairs) */
  size_t vals_cap;
  /* SWA eviction: the SWA sides of consecutive tombstoned victims, released in one free */
  int64_t *ebuf;
  size_t ebuf_len, ebuf_cap;
};

#define SWA_RADIX_ENTRY(c) KVC_CHECK_HANDLE(c, KVC__SWA_RADIX_MAGIC, "cache", "kvc_swa_radix_cache")

static kvc_status post(kvc_swa_radix_cache *c, const char *fn, kvc_status st) {
  if (st == KVC_OK && c->rc->check) return kvc_swa_radix_cache_check(c);
  (void)fn;
  return st;
}

/* Whether the cache has an SWA component on its nodes (tombstones, SWA locks). */
static bool has_swa(const kvc_swa_radix_cache *c) { return c->kind == KVC_SWA_RADIX_HYBRID; }

static const char *kind_name(int32_t k) {
  return k == KVC_SWA_RADIX_PURE ? "PURE" : k == KVC_SWA_RADIX_RING ? "RING" : "HYBRID";
}

/* A flow must drive an SWA allocator of the cache's kind (read from its public queries:
 * pure serves both sides from one allocator, ring mode has no SWA allocator). */
static kvc_status check_flow(const kvc_swa_radix_cache *c, const kvc_flow *flow, const char *fn) {
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

static bool cand_less(struct swa_cand a, struct swa_cand b) {
  return a.access != b.access ? a.access < b.access : a.id < b.id;
}

static void lru_push(kvc_swa_radix_cache *c, struct swa_cand e) {
  size_t i = c->lru_len++;
  while (i > 0) {
    const size_t p = (i - 1) / 2;
    if (!cand_less(e, c->lru[p])) break;
    c->lru[i] = c->lru[p];
    i = p;
  }
  c->lru[i] = e;
}

static struct swa_cand lru_pop(kvc_swa_radix_cache *c) {
  const struct swa_cand top = c->lru[0], e = c->lru[--c->lru_len];
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
  if (!has_swa(c)) return KVC_OK;
  const size_t need = (size_t)c->rc->nodes_used + 8;
  if (need <= c->lru_cap) return KVC_OK;
  size_t cap = c->lru_cap ? c->lru_cap : 64;
  while (cap < need) cap *= 2;
  struct swa_cand *h = kvc__malloc(c->ctx, cap * sizeof *h), *a = kvc__malloc(c->ctx, cap * sizeof *a);
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
  lru_push(c, (struct swa_cand){n->access, x});
}

/* Every node of rc->path[0:depth) (and `extra`, 0 = none): what a call touched. */
static void lru_note_path(kvc_swa_radix_cache *c, size_t depth, int32_t extra) {
  if (!has_swa(c)) return;
  for (size_t i = 0; i < depth; i++) lru_note(c, c->rc->path[i]);
  if (extra > 0) lru_note(c, extra);
}

/* --- Create / destroy ------------------------------------------------------------------- */

kvc_status kvc_swa_radix_cache_create(kvc_context *ctx, const kvc_swa_radix_cache_config *config,
                                      kvc_swa_radix_cache **out) {
  KVC_RETURN_IF(!ctx, NULL, KVC_ERR_INVALID_ARGUMENT, "ctx is NULL");
  KVC_RETURN_IF(!config || !out, ctx, KVC_ERR_INVALID_ARGUMENT, "config or out is NULL");
  KVC_RETURN_IF(config->struct_size < offsetof(kvc_swa_radix_cache_config, reserved_) ||
                    config->struct_size > sizeof(kvc_swa_radix_cache_config),
                ctx, KVC_ERR_VERSION, "config.struct_size %zu not understood", config->struct_size);
  kvc_swa_radix_cache_config cfg = KVC_SWA_RADIX_CACHE_CONFIG_INIT;
  memcpy(&cfg, config, config->struct_size);
  KVC_RETURN_IF(cfg.sliding_window < 1, ctx, KVC_ERR_INVALID_ARGUMENT, "sliding_window %d < 1", cfg.sliding_window);
  KVC_RETURN_IF(cfg.kind < KVC_SWA_RADIX_HYBRID || cfg.kind > KVC_SWA_RADIX_RING, ctx, KVC_ERR_INVALID_ARGUMENT,
                "kind %d is not a kvc_swa_radix_kind", cfg.kind);
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

/* --- SWA locks ----------------------------------------------------------------------------- */

/* A receipt: 0 = no SWA lock held; RCPT_CHAIN = a chain lock (below); else
 * (uuid << 2) | 1, uuid 0 meaning the walk reached the root before a window was covered.
 *
 * A chain lock covers every node from the locked one up to the first tombstone (or the
 * root). It needs no uuid, so the node-only lock callbacks (sessions) can release it: the
 * range is the same at release time, because tombstone boundaries are node boundaries
 * that splits keep, a locked node is never tombstoned, and a tombstone with a locked
 * descendant is never deleted. For a valid match end it covers at least the window. */
#define RCPT_CHAIN 3u
static uint64_t receipt_of(uint32_t uuid) { return ((uint64_t)uuid << 2) | 1u; }

static uint64_t swa_lock_chain(kvc_swa_radix_cache *c, int32_t id) {
  kvc_radix_cache *rc = c->rc;
  for (int32_t x = id; x > 0 && rc->nodes[x].swa_lock != RX_SWA_TOMB; x = rc->hot[x].parent)
    if (rc->nodes[x].swa_lock++ == 0) rc->swa_protected += rc->hot[x].len;
  return RCPT_CHAIN;
}

/* Whether node id can take an SWA lock: every node covering its last window is live. */
static kvc_status swa_lockable(const kvc_swa_radix_cache *c, int32_t id, const char *fn) {
  const kvc_radix_cache *rc = c->rc;
  int64_t covered = 0;
  for (int32_t x = id; x > 0 && covered < c->window; x = rc->hot[x].parent) {
    KVC_RETURN_IF(rc->nodes[x].swa_lock == RX_SWA_TOMB, c->ctx, KVC_ERR_MISUSE,
                  "%s: node %d within the last %lld tokens is an SWA tombstone (not a valid match end)", fn, x,
                  (long long)c->window);
    covered += rc->hot[x].len;
  }
  return KVC_OK;
}

/* SGLang inc_lock_ref's SWA half: locks the nodes covering the last window, marks the
 * node where the window is covered. Call after swa_lockable. */
static uint64_t swa_lock(kvc_swa_radix_cache *c, int32_t id) {
  kvc_radix_cache *rc = c->rc;
  int64_t covered = 0;
  for (int32_t x = id; x > 0; x = rc->hot[x].parent) {
    rx_node *n = &rc->nodes[x];
    if (n->swa_lock++ == 0) rc->swa_protected += rc->hot[x].len;
    covered += rc->hot[x].len;
    if (covered >= c->window) {
      if (!n->swa_uuid) {
        if (++c->uuid_next == 0) c->uuid_next = 1;
        n->swa_uuid = c->uuid_next;
      }
      return receipt_of(n->swa_uuid);
    }
  }
  return receipt_of(0);
}

/* Whether the SWA lock of `receipt` on id can be released; nothing changes. */
static kvc_status swa_unlockable(const kvc_swa_radix_cache *c, int32_t id, uint64_t receipt, const char *fn) {
  const kvc_radix_cache *rc = c->rc;
  KVC_RETURN_IF(!(receipt & 1u) || receipt >> 34, c->ctx, KVC_ERR_INVALID_ARGUMENT, "%s: SWA lock receipt %llu", fn,
                (unsigned long long)receipt);
  if (receipt == RCPT_CHAIN) {
    for (int32_t x = id; x > 0 && rc->nodes[x].swa_lock != RX_SWA_TOMB; x = rc->hot[x].parent)
      KVC_RETURN_IF(rc->nodes[x].swa_lock == 0, c->ctx, KVC_ERR_MISUSE, "%s: node %d is not SWA-locked", fn, x);
    return KVC_OK;
  }
  KVC_RETURN_IF(receipt & 2u, c->ctx, KVC_ERR_INVALID_ARGUMENT, "%s: SWA lock receipt %llu", fn,
                (unsigned long long)receipt);
  const uint32_t uuid = (uint32_t)(receipt >> 2);
  for (int32_t x = id; x > 0; x = rc->hot[x].parent) {
    KVC_RETURN_IF(rc->nodes[x].swa_lock <= 0, c->ctx, KVC_ERR_MISUSE,
                  "%s: node %d is not SWA-locked (released twice, or the receipt of another node?)", fn, x);
    if (uuid && rc->nodes[x].swa_uuid == uuid) return KVC_OK;
  }
  KVC_RETURN_IF(uuid, c->ctx, KVC_ERR_MISUSE, "%s: SWA lock receipt %llu does not belong to this node's path", fn,
                (unsigned long long)receipt);
  return KVC_OK;
}

static void swa_unlock(kvc_swa_radix_cache *c, int32_t id, uint64_t receipt) {
  kvc_radix_cache *rc = c->rc;
  if (receipt == RCPT_CHAIN) {
    for (int32_t x = id; x > 0 && rc->nodes[x].swa_lock != RX_SWA_TOMB; x = rc->hot[x].parent)
      if (--rc->nodes[x].swa_lock == 0) rc->swa_protected -= rc->hot[x].len;
    return;
  }
  const uint32_t uuid = (uint32_t)(receipt >> 2);
  for (int32_t x = id; x > 0; x = rc->hot[x].parent) {
    rx_node *n = &rc->nodes[x];
    if (--n->swa_lock == 0) rc->swa_protected -= rc->hot[x].len;
    if (uuid && n->swa_uuid == uuid) return;
  }
}

static kvc_status node_of(const kvc_swa_radix_cache *c, void *handle, int32_t *id, const char *fn) {
  *id = 0;
  if (!handle) return KVC_OK;
  KVC_RETURN_IF(!kvc__rx_from_handle(c->rc, handle, id), c->ctx, KVC_ERR_INVALID_ARGUMENT,
                "%s: node %p is not a node of this cache (stale, evicted, or from before a reset)", fn, handle);
  return KVC_OK;
}

kvc_status kvc_swa_radix_cache_lock(kvc_swa_radix_cache *c, void *node, uint64_t *swa_receipt) {
  SWA_RADIX_ENTRY(c);
  KVC_RETURN_IF(!swa_receipt, c->ctx, KVC_ERR_INVALID_ARGUMENT, "swa_receipt is NULL");
  int32_t id;
  KVC_FORWARD(node_of(c, node, &id, __func__));
  if (has_swa(c)) KVC_FORWARD(swa_lockable(c, id, __func__));
  kvc__rx_lock(c->rc, id);
  *swa_receipt = id && has_swa(c) ? swa_lock(c, id) : 0;
  return post(c, __func__, KVC_OK);
}

kvc_status kvc_swa_radix_cache_unlock_swa(kvc_swa_radix_cache *c, void *node, uint64_t *swa_receipt) {
  SWA_RADIX_ENTRY(c);
  KVC_RETURN_IF(!swa_receipt, c->ctx, KVC_ERR_INVALID_ARGUMENT, "swa_receipt is NULL");
  int32_t id;
  KVC_FORWARD(node_of(c, node, &id, __func__));
  if (!id || !*swa_receipt) return KVC_OK; /* nothing held: released already */
  KVC_FORWARD(swa_unlockable(c, id, *swa_receipt, __func__));
  swa_unlock(c, id, *swa_receipt);
  *swa_receipt = 0;
  return post(c, __func__, KVC_OK);
}

kvc_status kvc_swa_radix_cache_unlock(kvc_swa_radix_cache *c, void *node, uint64_t swa_receipt) {
  SWA_RADIX_ENTRY(c);
  int32_t id;
  KVC_FORWARD(node_of(c, node, &id, __func__));
  if (!id) return KVC_OK;
  KVC_RETURN_IF(c->rc->hot[id].lock_ref <= 0, c->ctx, KVC_ERR_MISUSE, "%s: node %d is not locked", __func__, id);
  if (swa_receipt) KVC_FORWARD(swa_unlockable(c, id, swa_receipt, __func__));
  if (swa_receipt) swa_unlock(c, id, swa_receipt);
  KVC_FORWARD(kvc__rx_unlock(c->rc, id, __func__)); /* checked above: cannot fail */
  return post(c, __func__, KVC_OK);
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
  if (!has_swa(c)) { /* PURE / RING: SWA does not gate the match */
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
  KVC_FORWARD(kvc__rx_match(rc, ns, tokens, n, &matched, &node, &depth));
  lru_note_path(c, depth, 0); /* a split upper node is new */
  const size_t d = valid_depth(c, depth, &len);
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
  return post(c, __func__, match(c, __func__, ns, tokens, n, NULL, out));
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
  rreq->swa_lock = !node || !has_swa(c) ? 0 : req->session_id ? swa_lock_chain(c, node) : swa_lock(c, node);
  req->prefix_len = req->cache_protected_len = m.len;
  req->prefix_slots = m.len ? m.slots : NULL;
  req->cache_node = node ? m.node : NULL;
  return post(c, __func__, KVC_OK);
}

/* --- Insert ------------------------------------------------------------------------------------ */

/* After an insert of keys[0:n) that found `prefix` tokens and hung the rest as leaf
 * `node`: the leaf's part below `evicted` (the request's swa_evicted_seqlen) becomes a
 * tombstone, split off when the leaf goes past it (a node reserved by the insert). */
static void tombstone_leaf(kvc_swa_radix_cache *c, int32_t node, int64_t prefix, int64_t n, int64_t evicted) {
  kvc_radix_cache *rc = c->rc;
  if (!has_swa(c) || n <= prefix) return;
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

/* kvc__rx_insert of in's slots with the revival above (HYBRID only). A node is revived
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
  if (has_swa(c) && lo0 < n && tombs) {
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
    const rx_row_src src = {flow, in->row};
    KVC_FORWARD(kvc__rx_insert(rc, flow, fn, in->ns, in->keys, in->vals, in->vals ? NULL : &src, in->from, n,
                               in->priority, in->inserted_len, 3, prefix, node, nd, depth));
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
  KVC_FORWARD(kvc__rx_insert(rc, flow, fn, in->ns, in->keys, c->vals, NULL, in->from, n, in->priority, in->inserted_len,
                             3, prefix, node, nd, depth));
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
  KVC_FORWARD(check_flow(c, flow, __func__));
  n = n / rc->ps * rc->ps;
  int64_t prefix = 0;
  int32_t node;
  if (n > 0) {
    KVC_FORWARD(lru_reserve(c, __func__));
    size_t depth, nd = 0;
    int64_t revived;
    bool applied;
    const ins_src in = {slots, 0, ns, tokens, swa_evicted_seqlen, 0, n, 0, 0};
    kvc_status st = insert_rev(c, flow, &in, __func__, &prefix, &node, &nd, &depth, &revived, &applied);
    if (!applied) return st;
    tombstone_leaf(c, node, prefix, n, swa_evicted_seqlen);
    lru_note_path(c, depth, node);
    KVC_FORWARD(st); /* the old slots of revived tombstones: the free was refused */
  }
  if (prefix_len) *prefix_len = prefix;
  return post(c, __func__, KVC_OK);
}

/* --- Request-level checkpoint --------------------------------------------------------------- */

/* Drops the request's locks (both checked before anything changes). */
static kvc_status req_unlock(kvc_swa_radix_cache *c, int32_t old, const kvc_radix_req *rr, const char *fn) {
  if (!old) return KVC_OK;
  KVC_RETURN_IF(c->rc->hot[old].lock_ref <= 0, c->ctx, KVC_ERR_MISUSE, "%s: the request's node is not locked", fn);
  if (rr->swa_lock) KVC_FORWARD(swa_unlockable(c, old, rr->swa_lock, fn));
  if (rr->swa_lock) swa_unlock(c, old, rr->swa_lock);
  return kvc__rx_unlock(c->rc, old, fn);
}

/* The undo of req_unlock: the same nodes as the receipt names (up to its uuid, which a
 * walk by window coverage may no longer stop at once splits moved it up). */
static void req_relock(kvc_swa_radix_cache *c, int32_t old, const kvc_radix_req *rr) {
  if (!old) return;
  kvc_radix_cache *rc = c->rc;
  kvc__rx_lock(rc, old);
  if (rr->swa_lock == RCPT_CHAIN) {
    swa_lock_chain(c, old);
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

kvc_status kvc_swa_radix_cache_cache_finished_req(kvc_swa_radix_cache *c, kvc_flow *flow, kvc_req_state *req,
                                                  int is_insert) {
  SWA_RADIX_ENTRY(c);
  kvc_radix_cache *rc = c->rc;
  int32_t old;
  KVC_FORWARD(kvc__rx_req_check(rc, flow, req, __func__, &old));
  KVC_FORWARD(check_flow(c, flow, __func__));
  kvc_status st;
  kvc_radix_req *rr = kvc__rx_req_of(rc, req, __func__, &st);
  KVC_FORWARD(st);
  const int64_t committed = req->kv_committed_len;
  const int64_t key_len = is_insert ? req_key_len(c, flow, req) : 0;
  if (is_insert) {
    KVC_FORWARD(kvc__rx_req_key(rc, rr, old, key_len, __func__));
    KVC_FORWARD(check_evicted(c, req->swa_evicted_seqlen, __func__));
    KVC_FORWARD(lru_reserve(c, __func__));
  }
  KVC_FORWARD(req_unlock(c, old, rr, __func__));
  int64_t keep = req->cache_protected_len; /* abort: the tree keeps only what it had */
  if (key_len > 0) {
    int64_t prefix, revived;
    int32_t node;
    size_t depth, nd;
    bool applied;
    st = insert_req(c, flow, req, rr, KVC__MIN(req->cache_protected_len, key_len), key_len, __func__, &prefix, &node,
                    &nd, &depth, &revived, &applied);
    if (!applied) {
      req_relock(c, old, rr);
      return st;
    }
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
      kvc__rx_apply_insert(rc, rr->ns, rr->tokens, pf, rr->priority + 1, KVC__MAX(rr->inserted_len, key_len), NULL, -1,
                           &unused, NULL);
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
  return post(c, __func__, KVC_OK);
}

kvc_status kvc_swa_radix_cache_cache_unfinished_req(kvc_swa_radix_cache *c, kvc_flow *flow, kvc_req_state *req) {
  SWA_RADIX_ENTRY(c);
  kvc_radix_cache *rc = c->rc;
  const char *fn = __func__;
  int32_t old;
  KVC_FORWARD(kvc__rx_req_check(rc, flow, req, fn, &old));
  KVC_FORWARD(check_flow(c, flow, fn));
  kvc_status st;
  kvc_radix_req *rr = kvc__rx_req_of(rc, req, fn, &st);
  KVC_FORWARD(st);
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
    st = insert_req(c, flow, req, rr, from, key_len, fn, &prefix, &node, &nd, &depth, &revived, &applied);
    if (!applied) return st;
    tombstone_leaf(c, node, prefix, key_len, req->swa_evicted_seqlen);
    lru_note_path(c, depth, node);
    rr->inserted_len = KVC__MAX(rr->inserted_len, key_len);
    /* SGLang re-matches the key (stamping it) and writes the tree's slots into the row
     * where the request's duplicates were; the scratch for key_len is reserved, so the
     * walk cannot fail, and it ends at key_len (just inserted). */
    kvc__rx_match(rc, rr->ns, rr->tokens, key_len, &matched, &node, &depth);
    lru_note_path(c, depth, 0);
    if (st == KVC_OK && nd) {
      int copied;
      const int64_t *v = kvc__rx_path_values(rc, depth, key_len, NULL, &copied);
      st = kvc_req_to_token_pool_write(flow->cfg.req_pool, req->req_row, (int32_t)from, v + from,
                                       (size_t)(key_len - from), flow->stream);
    }
  }
  /* The new locks, then the old ones released (a shared path never drops to zero). */
  const uint64_t old_receipt = rr->swa_lock;
  kvc__rx_lock(rc, node);
  rr->swa_lock = 0;
  if (node && has_swa(c) && swa_lockable(c, node, fn) == KVC_OK)
    rr->swa_lock = req->session_id ? swa_lock_chain(c, node) : swa_lock(c, node);
  kvc_radix_req prev = *rr;
  prev.swa_lock = old_receipt;
  KVC_CLEANUP_KEEP_FIRST(req_unlock(c, old, &prev, fn), st); /* validated above */
  req->cache_node = node ? kvc__rx_handle(rc, node) : NULL;
  req->cache_protected_len = key_len;
  req->prefix_len = committed;
  req->prefix_slots = NULL;
  return post(c, fn, st);
}

/* --- Eviction -------------------------------------------------------------------------------- */

static kvc_status free_swa_side(kvc_swa_radix_cache *c, kvc_flow *flow, const int64_t *slots, size_t n) {
  if (flow) return kvc__flow_free_window(flow, slots, n);
  return c->free_swa(c->free_swa_user, slots, n);
}

static kvc_status free_full(kvc_swa_radix_cache *c, kvc_flow *flow, int32_t x) {
  rx_free_path fp = {c->rc, flow};
  return kvc__rx_free_through(&fp, rx_vals(&c->rc->nodes[x]), (size_t)c->rc->hot[x].len);
}

/* Deletes unlocked childless tombstones from x upward (SGLang's tombstone-chain cleanup). */
static kvc_status drop_tomb_chain(kvc_swa_radix_cache *c, kvc_flow *flow, int32_t x, int64_t *full_done) {
  kvc_radix_cache *rc = c->rc;
  while (x > 0 && rc->nodes[x].swa_lock == RX_SWA_TOMB && rc->hot[x].nchild == 0 && rc->hot[x].lock_ref == 0) {
    const int32_t parent = rc->hot[x].parent, len = rc->hot[x].len;
    KVC_FORWARD(free_full(c, flow, x));
    kvc__rx_delete_leaf(rc, x);
    *full_done += len;
    x = parent;
  }
  return KVC_OK;
}

/* Releases the SWA sides gathered in ebuf (one free through the flow or the hook). */
static kvc_status ebuf_flush(kvc_swa_radix_cache *c, kvc_flow *flow) {
  if (!c->ebuf_len) return KVC_OK;
  const size_t n = c->ebuf_len;
  c->ebuf_len = 0;
  return free_swa_side(c, flow, c->ebuf, n);
}

/* Gathers the SWA side of victim x into ebuf; false when ebuf cannot grow (the caller
 * then releases it on its own, after what is gathered). */
static bool ebuf_add(kvc_swa_radix_cache *c, const int64_t *v, size_t n) {
  if (c->ebuf_len + n > c->ebuf_cap) {
    size_t cap = c->ebuf_cap ? c->ebuf_cap : 1024;
    while (cap < c->ebuf_len + n) {
      if (cap > SIZE_MAX / 2 / sizeof *c->ebuf) return false;
      cap *= 2;
    }
    int64_t *p = kvc__malloc(c->ctx, cap * sizeof *p);
    if (!p) return false;
    if (c->ebuf_len) memcpy(p, c->ebuf, c->ebuf_len * sizeof *p);
    kvc__free(c->ctx, c->ebuf);
    c->ebuf = p;
    c->ebuf_cap = cap;
  }
  memcpy(c->ebuf + c->ebuf_len, v, n * sizeof *v);
  c->ebuf_len += n;
  return true;
}

/* SWA eviction in LRU order (the heap above) until `need` SWA tokens are freed in all.
 * The SWA sides of consecutive tombstoned victims go back in one free, in victim order
 * (a deleted leaf's full free comes after the ones gathered before it). */
static kvc_status swa_evict(kvc_swa_radix_cache *c, kvc_flow *flow, int64_t need, int64_t *swa_done,
                            int64_t *full_done) {
  kvc_radix_cache *rc = c->rc;
  kvc_status st = KVC_OK;
  size_t aside = 0;
  while (*swa_done < need && c->lru_len && st == KVC_OK) {
    const struct swa_cand e = lru_pop(c);
    const int32_t x = (int32_t)e.id;
    rx_node *n = &rc->nodes[x];
    if (!n->seg || n->swa_lock == RX_SWA_TOMB) { /* gone, or a tombstone: no entry now */
      c->in_lru[x] = 0;
      continue;
    }
    if (e.access != n->access) { /* stamped since: back with its stamp */
      lru_push(c, (struct swa_cand){n->access, x});
      continue;
    }
    if (n->swa_lock > 0) { /* not a candidate now: back after this call */
      c->aside[aside++] = e;
      continue;
    }
    c->in_lru[x] = 0;
    const int32_t len = rc->hot[x].len, parent = rc->hot[x].parent;
    if (rc->hot[x].nchild == 0 && rc->hot[x].lock_ref == 0) { /* a leaf goes whole */
      st = ebuf_flush(c, flow);
      if (st == KVC_OK) st = free_full(c, flow, x);
      if (st != KVC_OK) {
        c->in_lru[x] = 1; /* nothing changed for x */
        lru_push(c, e);
        break;
      }
      kvc__rx_delete_leaf(rc, x);
      *full_done += len;
      *swa_done += len;
      st = drop_tomb_chain(c, flow, parent, full_done);
    } else {
      if (!ebuf_add(c, rx_vals(n), (size_t)len)) {
        st = ebuf_flush(c, flow);
        if (st == KVC_OK) st = free_swa_side(c, flow, rx_vals(n), (size_t)len);
      }
      if (st != KVC_OK) {
        c->in_lru[x] = 1; /* nothing changed for x */
        lru_push(c, e);
        break;
      }
      n->swa_lock = RX_SWA_TOMB;
      n->swa_uuid = 0;
      rc->swa_live -= len;
      if (rc->events_on) kvc__rx_event_removed_as(rc, x, KVC_RADIX_COMPONENT_SWA);
      *swa_done += len;
    }
  }
  KVC_CLEANUP_KEEP_FIRST(ebuf_flush(c, flow), st);
  for (size_t i = 0; i < aside; i++) lru_push(c, c->aside[i]);
  return st;
}

kvc_status kvc_swa_radix_cache_evict(kvc_swa_radix_cache *c, kvc_flow *flow, int64_t num_tokens, int64_t swa_num_tokens,
                                     int64_t *evicted, int64_t *swa_evicted) {
  SWA_RADIX_ENTRY(c);
  kvc_radix_cache *rc = c->rc;
  KVC_RETURN_IF(num_tokens < 0 || swa_num_tokens < 0, c->ctx, KVC_ERR_INVALID_ARGUMENT,
                "num_tokens %lld / swa_num_tokens %lld < 0", (long long)num_tokens, (long long)swa_num_tokens);
  if (evicted) *evicted = 0;
  if (swa_evicted) *swa_evicted = 0;
  if (num_tokens == 0 && swa_num_tokens == 0) return KVC_OK;
  KVC_FORWARD(check_flow(c, flow, __func__));
  if (c->kind == KVC_SWA_RADIX_PURE) { /* SGLang PureSWARadixCache.evict: one pool */
    int64_t done = 0;
    KVC_FORWARD(kvc_radix_cache_evict(rc, flow, KVC__MAX(num_tokens, swa_num_tokens), &done));
    if (evicted) *evicted = done;
    if (swa_evicted) *swa_evicted = done;
    return post(c, __func__, KVC_OK);
  }
  if (c->kind == KVC_SWA_RADIX_RING) { /* the rings are the rows': nothing of the tree frees them */
    KVC_RETURN_IF(num_tokens == 0, c->ctx, KVC_ERR_OUT_OF_SLOTS,
                  "%lld SWA tokens asked of a RING cache: per-request rings hold no cached SWA KV",
                  (long long)swa_num_tokens);
    swa_num_tokens = 0;
  }
  const bool full_ok = rc->heap_len > 0, swa_ok = rc->swa_live > rc->swa_protected;
  KVC_RETURN_IF(!(num_tokens > 0 && full_ok) && !(swa_num_tokens > 0 && swa_ok), c->ctx, KVC_ERR_OUT_OF_SLOTS,
                "nothing evictable for %lld full / %lld SWA tokens (evictable %lld full, %lld SWA)",
                (long long)num_tokens, (long long)swa_num_tokens, (long long)rc->evictable,
                (long long)(rc->swa_live - rc->swa_protected));
  KVC_RETURN_IF(!kvc__rx_can_free(rc, flow) || (!flow && swa_num_tokens > 0 && !c->free_swa), c->ctx,
                KVC_ERR_UNSUPPORTED, "no flow and no free_slots / free_swa_slots hook to free through");
  /* SGLang: full leaves first (each frees its SWA side too), then SWA for what is left. */
  int64_t full_done = 0, swa_done = 0;
  kvc_status st = KVC_OK;
  if (num_tokens > 0) {
    rx_free_path fp = {rc, flow};
    const int64_t live0 = rc->swa_live;
    st = kvc__rx_evict(rc, num_tokens, kvc__rx_free_through, &fp, &full_done);
    swa_done = live0 - rc->swa_live;
  }
  if (st == KVC_OK && swa_done < swa_num_tokens) st = swa_evict(c, flow, swa_num_tokens, &swa_done, &full_done);
  if (evicted) *evicted = full_done;
  if (swa_evicted) *swa_evicted = c->kind == KVC_SWA_RADIX_RING ? 0 : swa_done;
  return post(c, __func__, st);
}

/* --- Reset, sizes, audit ------------------------------------------------------------------- */

kvc_status kvc_swa_radix_cache_reset(kvc_swa_radix_cache *c) {
  SWA_RADIX_ENTRY(c);
  KVC_FORWARD(kvc_radix_cache_reset(c->rc));
  c->lru_len = 0;
  if (c->lru_cap) memset(c->in_lru, 0, c->lru_cap);
  return KVC_OK;
}

kvc_status kvc_swa_radix_cache_sizes(const kvc_swa_radix_cache *c, kvc_swa_radix_sizes *out) {
  SWA_RADIX_ENTRY(c);
  KVC_RETURN_IF(!out, c->ctx, KVC_ERR_INVALID_ARGUMENT, "out is NULL");
  const kvc_radix_cache *rc = c->rc;
  memset(out, 0, sizeof *out);
  out->evictable = rc->evictable;
  out->protected_size = rc->protected_;
  out->cached = rc->evictable + rc->protected_;
  if (c->kind == KVC_SWA_RADIX_RING) return KVC_OK; /* the rings are the rows' */
  /* PURE: one pool, so the same numbers (no tombstone or SWA lock ever makes them differ) */
  out->swa_evictable = rc->swa_live - rc->swa_protected;
  out->swa_protected = rc->swa_protected;
  out->swa_cached = rc->swa_live;
  if (c->kind == KVC_SWA_RADIX_PURE) out->swa_evictable = rc->evictable, out->swa_protected = rc->protected_;
  return KVC_OK;
}

kvc_status kvc_swa_radix_cache_check(const kvc_swa_radix_cache *c) {
  SWA_RADIX_ENTRY(c);
  const kvc_radix_cache *rc = c->rc;
  const char *fn = __func__;
  int64_t lv = 0, pr = 0;
  for (int32_t i = 1; i < rc->nodes_used; i++) {
    const rx_node *n = &rc->nodes[i];
    if (!n->seg) continue;
    if (n->swa_lock < RX_SWA_TOMB || n->swa_lock > rc->hot[i].lock_ref)
      return kvc__error(c->ctx, KVC_ERR_INTERNAL, fn, "node %d: SWA lock %d, full lock %d", i, n->swa_lock,
                        rc->hot[i].lock_ref);
    if (n->swa_lock != RX_SWA_TOMB) lv += rc->hot[i].len;
    if (n->swa_lock > 0) pr += rc->hot[i].len;
  }
  if (lv != rc->swa_live || pr != rc->swa_protected)
    return kvc__error(c->ctx, KVC_ERR_INTERNAL, fn, "SWA sizes: live %lld/%lld, protected %lld/%lld", (long long)lv,
                      (long long)rc->swa_live, (long long)pr, (long long)rc->swa_protected);
  return kvc__rx_audit(rc, fn);
}

kvc_status kvc_swa_radix_cache_stats(const kvc_swa_radix_cache *c, kvc_radix_stats *out) {
  SWA_RADIX_ENTRY(c);
  return kvc_radix_cache_stats(c->rc, out);
}

/* --- kvc_prefix_cache adapter -------------------------------------------------------------- */

static int pc_zero(void *self) {
  (void)self;
  return 0;
}
static kvc_status pc_evict(void *self, kvc_flow *flow, int64_t n, int64_t swa_n, int64_t mamba_n) {
  (void)mamba_n;
  kvc_swa_radix_cache *c = self;
  /* Under pressure the flow asks for what it lacks: what nothing can give is its call. */
  kvc_status st = kvc_swa_radix_cache_evict(c, flow, n, swa_n, NULL, NULL);
  return st == KVC_ERR_OUT_OF_SLOTS ? KVC_OK : st;
}
static int64_t pc_evictable(void *self) { return ((kvc_swa_radix_cache *)self)->rc->evictable; }
static int64_t pc_protected(void *self) { return ((kvc_swa_radix_cache *)self)->rc->protected_; }
static int64_t pc_cached(void *self) {
  const kvc_radix_cache *rc = ((kvc_swa_radix_cache *)self)->rc;
  return rc->evictable + rc->protected_;
}
static kvc_status pc_finished(void *self, kvc_flow *flow, kvc_req_state *req, int is_insert) {
  return kvc_swa_radix_cache_cache_finished_req(self, flow, req, is_insert);
}
static kvc_status pc_unfinished(void *self, kvc_flow *flow, kvc_req_state *req) {
  return kvc_swa_radix_cache_cache_unfinished_req(self, flow, req);
}
/* Node-only locks (sessions): FULL on the path, a chain lock on SWA. */
static void pc_inc(void *self, void *node) {
  kvc_swa_radix_cache *c = self;
  int32_t id;
  if (node_of(c, node, &id, "kvc_prefix_cache.inc_lock_ref") != KVC_OK) {
    kvc__log(c->ctx, KVC_LOG_WARN, "%s", kvc_last_error(c->ctx));
    return;
  }
  if (!id) return;
  kvc__rx_lock(c->rc, id);
  if (has_swa(c)) swa_lock_chain(c, id);
}
static void pc_dec(void *self, void *node) {
  kvc_swa_radix_cache *c = self;
  if (kvc_swa_radix_cache_unlock(c, node, has_swa(c) ? RCPT_CHAIN : 0) != KVC_OK)
    kvc__log(c->ctx, KVC_LOG_WARN, "%s", kvc_last_error(c->ctx));
}

kvc_prefix_cache kvc_swa_radix_cache_as_prefix_cache(kvc_swa_radix_cache *c) {
  kvc_prefix_cache p;
  memset(&p, 0, sizeof p);
  p.self = c;
  p.is_chunk_cache = pc_zero;
  p.supports_mamba = pc_zero;
  p.evict = pc_evict;
  p.evictable_size = pc_evictable;
  p.protected_size = pc_protected;
  p.cached_size = pc_cached;
  p.cache_finished_req = pc_finished;
  p.cache_unfinished_req = pc_unfinished;
  p.inc_lock_ref = pc_inc;
  p.dec_lock_ref = pc_dec;
  return p;
}
