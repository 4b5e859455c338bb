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
  kvc_radix_free_fn free_swa;
  void *free_swa_user;
  uint32_t uuid_next;
  /* SWA eviction scratch: (access, id) of every candidate */
  struct swa_cand {
    uint64_t access;
    int64_t id;
  } * cand;
  size_t cand_cap;
};

#define SWA_RADIX_ENTRY(c) KVC_CHECK_HANDLE(c, KVC__SWA_RADIX_MAGIC, "cache", "kvc_swa_radix_cache")

static kvc_status post(kvc_swa_radix_cache *c, const char *fn, kvc_status st) {
  if (st == KVC_OK && c->rc->check) return kvc_swa_radix_cache_check(c);
  (void)fn;
  return st;
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
  c->free_swa = cfg.free_swa_slots;
  c->free_swa_user = cfg.free_swa_user;
  *out = c;
  return KVC_OK;
}

void kvc_swa_radix_cache_destroy(kvc_swa_radix_cache *c) {
  if (!c || c->magic != KVC__SWA_RADIX_MAGIC) return;
  kvc_context *ctx = c->ctx;
  kvc_radix_cache_destroy(c->rc);
  kvc__free(ctx, c->cand);
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
  KVC_FORWARD(swa_lockable(c, id, __func__));
  kvc__rx_lock(c->rc, id);
  *swa_receipt = id ? swa_lock(c, id) : 0;
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
  int64_t matched, len;
  int32_t node;
  size_t depth;
  KVC_FORWARD(kvc__rx_match(rc, ns, tokens, n, &matched, &node, &depth));
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
  /* SGLang _compute_max_prefix_len: the last token is always recomputed. */
  KVC_FORWARD(match(c, __func__, rreq->ns, rreq->tokens, KVC__MAX(0, rreq->num_tokens - 1), rreq->prefix_buf, &m));
  int32_t node = 0;
  kvc__rx_from_handle(c->rc, m.node, &node);
  kvc__rx_lock(c->rc, node); /* a valid match end is always SWA-lockable */
  /* A session keeps its first turn's node and releases it through the node-only
   * dec_lock_ref: it gets the chain lock that call can release. */
  rreq->swa_lock = !node ? 0 : req->session_id ? swa_lock_chain(c, node) : swa_lock(c, node);
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
  if (n <= prefix || evicted <= prefix) return;
  const int64_t t = KVC__MIN(evicted, n) - prefix;
  int32_t x = node;
  if (t < rc->hot[node].len) x = kvc__rx_split(rc, node, (int32_t)t);
  rc->nodes[x].swa_lock = RX_SWA_TOMB;
  rc->swa_live -= t;
  /* Stored whole by the insert, its SWA side was never there: said as SWA removed. */
  if (rc->events_on) kvc__rx_event_removed_as(rc, x, KVC_RADIX_COMPONENT_SWA);
}

static kvc_status check_evicted(const kvc_swa_radix_cache *c, int64_t evicted, const char *fn) {
  KVC_RETURN_IF(evicted < 0 || evicted % c->rc->ps, c->ctx, KVC_ERR_INVALID_ARGUMENT,
                "%s: swa_evicted_seqlen %lld is not a page-aligned length", fn, (long long)evicted);
  return KVC_OK;
}

kvc_status kvc_swa_radix_cache_insert(kvc_swa_radix_cache *c, kvc_flow *flow, uint64_t ns, const int32_t *tokens,
                                      const int64_t *slots, int64_t n, int64_t swa_evicted_seqlen,
                                      int64_t *prefix_len) {
  SWA_RADIX_ENTRY(c);
  kvc_radix_cache *rc = c->rc;
  KVC_RETURN_IF(n < 0 || n > INT32_MAX || (n > 0 && (!tokens || !slots)), c->ctx, KVC_ERR_INVALID_ARGUMENT,
                "%lld tokens / slots at %p / %p", (long long)n, (const void *)tokens, (const void *)slots);
  KVC_FORWARD(check_evicted(c, swa_evicted_seqlen, __func__));
  n = n / rc->ps * rc->ps;
  int64_t prefix = 0;
  int32_t node;
  if (n > 0) {
    KVC_FORWARD(kvc__rx_insert(rc, flow, __func__, ns, tokens, slots, NULL, 0, n, 0, 0, 1, &prefix, &node, NULL, NULL));
    tombstone_leaf(c, node, prefix, n, swa_evicted_seqlen);
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

/* The undo of req_unlock (the tree unchanged since: the walk stops where it stopped). */
static void req_relock(kvc_swa_radix_cache *c, int32_t old, const kvc_radix_req *rr) {
  if (!old) return;
  kvc__rx_lock(c->rc, old);
  if (rr->swa_lock == RCPT_CHAIN) swa_lock_chain(c, old);
  else if (rr->swa_lock) swa_lock(c, old);
}

static kvc_status free_row(kvc_radix_cache *rc, kvc_flow *flow, int32_t row, int64_t from, int64_t to) {
  if (to <= from) return KVC_OK;
  rx_free_path fp = {rc, flow};
  KVC_FORWARD(kvc_flow_row_slots(flow, row, from, to, flow->row_slots));
  return kvc__rx_free_through(&fp, flow->row_slots, (size_t)(to - from));
}

kvc_status kvc_swa_radix_cache_cache_finished_req(kvc_swa_radix_cache *c, kvc_flow *flow, kvc_req_state *req,
                                                  int is_insert) {
  SWA_RADIX_ENTRY(c);
  kvc_radix_cache *rc = c->rc;
  int32_t old;
  KVC_FORWARD(kvc__rx_req_check(rc, flow, req, __func__, &old));
  kvc_status st;
  kvc_radix_req *rr = kvc__rx_req_of(rc, req, __func__, &st);
  KVC_FORWARD(st);
  const int64_t committed = req->kv_committed_len;
  const int64_t key_len = is_insert ? committed / rc->ps * rc->ps : 0;
  if (is_insert) {
    KVC_FORWARD(kvc__rx_req_key(rc, rr, old, key_len, __func__));
    KVC_FORWARD(check_evicted(c, req->swa_evicted_seqlen, __func__));
  }
  KVC_FORWARD(req_unlock(c, old, rr, __func__));
  int64_t keep = req->cache_protected_len; /* abort: the tree keeps only what it had */
  if (key_len > 0) {
    /* SGLang splits no prompt off in a tree with an SWA component. */
    const rx_row_src src = {flow, req->req_row};
    int64_t prefix;
    int32_t node;
    st = kvc__rx_insert(rc, flow, __func__, rr->ns, rr->tokens, NULL, &src, KVC__MIN(req->cache_protected_len, key_len),
                        key_len, rr->priority, rr->inserted_len, 1, &prefix, &node, NULL, NULL);
    if (st != KVC_OK) {
      req_relock(c, old, rr);
      return st;
    }
    tombstone_leaf(c, node, prefix, key_len, req->swa_evicted_seqlen);
    rr->inserted_len = KVC__MAX(rr->inserted_len, key_len);
    keep = key_len;
  }
  req->cache_node = NULL;
  req->cache_protected_len = 0;
  rr->swa_lock = 0;
  /* The unaligned tail (insert) or everything past the tree's part (abort) is freed. */
  KVC_FORWARD(free_row(rc, flow, req->req_row, keep, committed));
  return post(c, __func__, KVC_OK);
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

static int cand_cmp(const void *a, const void *b) {
  const struct swa_cand *x = a, *y = b;
  if (x->access != y->access) return x->access < y->access ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

/* Candidates of SWA eviction (live, SWA-unlocked nodes) in LRU order into c->cand. */
static kvc_status swa_candidates(kvc_swa_radix_cache *c, size_t *count, const char *fn) {
  kvc_radix_cache *rc = c->rc;
  size_t k = 0;
  for (int32_t i = 1; i < rc->nodes_used; i++) k += rc->nodes[i].seg && rc->nodes[i].swa_lock == 0;
  if (k > c->cand_cap) {
    void *p = kvc__malloc(c->ctx, k * sizeof *c->cand);
    KVC_RETURN_IF(!p, c->ctx, KVC_ERR_HOST_OOM, "%s: %zu eviction candidates", fn, k);
    kvc__free(c->ctx, c->cand);
    c->cand = p;
    c->cand_cap = k;
  }
  k = 0;
  for (int32_t i = 1; i < rc->nodes_used; i++)
    if (rc->nodes[i].seg && rc->nodes[i].swa_lock == 0) c->cand[k++] = (struct swa_cand){rc->nodes[i].access, i};
  if (k) qsort(c->cand, k, sizeof *c->cand, cand_cmp);
  *count = k;
  return KVC_OK;
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

static kvc_status swa_evict(kvc_swa_radix_cache *c, kvc_flow *flow, int64_t need, int64_t *swa_done, int64_t *full_done,
                            const char *fn) {
  kvc_radix_cache *rc = c->rc;
  size_t k;
  KVC_FORWARD(swa_candidates(c, &k, fn));
  for (size_t i = 0; i < k && *swa_done < need; i++) {
    const int32_t x = (int32_t)c->cand[i].id;
    /* No node is created during eviction, so a deleted candidate's id stays free. */
    if (!rc->nodes[x].seg || rc->nodes[x].swa_lock != 0) continue;
    const int32_t len = rc->hot[x].len, parent = rc->hot[x].parent;
    if (rc->hot[x].nchild == 0 && rc->hot[x].lock_ref == 0) { /* a leaf goes whole */
      KVC_FORWARD(free_full(c, flow, x));
      kvc__rx_delete_leaf(rc, x);
      *full_done += len;
      *swa_done += len;
      KVC_FORWARD(drop_tomb_chain(c, flow, parent, full_done));
    } else {
      KVC_FORWARD(free_swa_side(c, flow, rx_vals(&rc->nodes[x]), (size_t)len));
      rc->nodes[x].swa_lock = RX_SWA_TOMB;
      rc->nodes[x].swa_uuid = 0;
      rc->swa_live -= len;
      if (rc->events_on) kvc__rx_event_removed_as(rc, x, KVC_RADIX_COMPONENT_SWA);
      *swa_done += len;
    }
  }
  return KVC_OK;
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
  if (st == KVC_OK && swa_done < swa_num_tokens)
    st = swa_evict(c, flow, swa_num_tokens, &swa_done, &full_done, __func__);
  if (evicted) *evicted = full_done;
  if (swa_evicted) *swa_evicted = swa_done;
  return post(c, __func__, st);
}

/* --- Reset, sizes, audit ------------------------------------------------------------------- */

kvc_status kvc_swa_radix_cache_reset(kvc_swa_radix_cache *c) {
  SWA_RADIX_ENTRY(c);
  return kvc_radix_cache_reset(c->rc);
}

kvc_status kvc_swa_radix_cache_sizes(const kvc_swa_radix_cache *c, kvc_swa_radix_sizes *out) {
  SWA_RADIX_ENTRY(c);
  KVC_RETURN_IF(!out, c->ctx, KVC_ERR_INVALID_ARGUMENT, "out is NULL");
  const kvc_radix_cache *rc = c->rc;
  memset(out, 0, sizeof *out);
  out->evictable = rc->evictable;
  out->protected_size = rc->protected_;
  out->cached = rc->evictable + rc->protected_;
  out->swa_evictable = rc->swa_live - rc->swa_protected;
  out->swa_protected = rc->swa_protected;
  out->swa_cached = rc->swa_live;
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
  swa_lock_chain(c, id);
}
static void pc_dec(void *self, void *node) {
  kvc_swa_radix_cache *c = self;
  if (kvc_swa_radix_cache_unlock(c, node, RCPT_CHAIN) != KVC_OK)
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
  p.inc_lock_ref = pc_inc;
  p.dec_lock_ref = pc_dec;
  return p;
}
