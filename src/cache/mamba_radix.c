/*
 * mamba_radix.c — the Mamba component of the radix tree (SGLang's unified cache
 * MambaComponent, components/mamba.py): kvc_mamba_radix_cache is a kvc_radix_cache (the
 * FULL component: nodes, keys, full slots, full locks, the full eviction heap, all of
 * radix_tree.c unchanged) plus a Mamba component kept on the same nodes:
 *
 *   rx_node.mamba_slot   the node's recurrent-state slot of the hybrid pool's Mamba pool
 *                        (0 = none): the state after exactly the tokens root..node end
 *   rx_node.mamba_lock   the node's MAMBA lock count (a lock is on the node only)
 *
 * and, here, per state slot: the node that owns it and a doubly linked LRU list (most
 * recent at the head), so Mamba eviction walks from the tail without sorting anything.
 * A split keeps the state on the lower node for free: the lower node keeps its id and
 * the new upper node comes zeroed from node_new. The tree tells this file when a node
 * holding a state is deleted (full eviction, or a Mamba eviction of a whole leaf) through
 * rc->on_delete_state, and the state goes back to the Mamba pool there (host only).
 *
 * Sizes of the component count states (slots), as SGLang's reclaimable_value_len does for
 * Mamba: mamba_cached, and mamba_protected of those whose node is MAMBA-locked. Reset,
 * sizes, the audit and the flow adapter are in mamba_radix_state.c; the object both files
 * share is in mamba_radix_impl.h.
 */
#include "radix.h"
#include "../alloc/alloc.h"
#include "../flow/flow.h"

#include <string.h>

#include "mamba_radix_impl.h"

static kvc_status post(kvc_mamba_radix_cache *c, kvc_status st) {
  if (st == KVC_OK && c->hook_st != KVC_OK) st = c->hook_st, c->hook_st = KVC_OK;
  if (st == KVC_OK && c->rc->check) return kvc_mamba_radix_cache_check(c);
  return st;
}

/* --- The LRU list and state ownership ------------------------------------------------------ */

static void lru_unlink(kvc_mamba_radix_cache *c, int32_t s) {
  const int32_t p = c->prev[s], n = c->next[s];
  if (p) c->next[p] = n;
  else c->head = n;
  if (n) c->prev[n] = p;
  else c->tail = p;
  c->prev[s] = c->next[s] = 0;
}

static void lru_push(kvc_mamba_radix_cache *c, int32_t s) {
  c->prev[s] = 0;
  c->next[s] = c->head;
  if (c->head) c->prev[c->head] = s;
  else c->tail = s;
  c->head = s;
}

/* SGLang reset_node_mru: node id's state becomes the most recently used. */
static void touch(kvc_mamba_radix_cache *c, int32_t id) {
  const int32_t s = c->rc->nodes[id].mamba_slot;
  if (!s || c->head == s) return;
  lru_unlink(c, s);
  lru_push(c, s);
}

static void attach(kvc_mamba_radix_cache *c, int32_t id, int32_t s) {
  rx_node *n = &c->rc->nodes[id];
  n->mamba_slot = s;
  c->owner[s] = id;
  lru_push(c, s);
  c->states++;
  if (n->mamba_lock > 0) c->protected_states++;
}

/* Takes node id's state off the tree (not freed): returns its slot. */
static int32_t detach(kvc_mamba_radix_cache *c, int32_t id) {
  rx_node *n = &c->rc->nodes[id];
  const int32_t s = n->mamba_slot;
  lru_unlink(c, s);
  c->owner[s] = 0;
  c->states--;
  if (n->mamba_lock > 0) c->protected_states--;
  n->mamba_slot = 0;
  return s;
}

/* SGLang _evict_excess_path_states, after a state was attached to `tail`: while the path
 * root..tail holds more than cap states, the shallowest eligible one goes (the node keeps
 * its KV). Not eligible: tail itself, MAMBA-locked nodes, forks and leaves (other than
 * one child). Host only, and it leaves rc->path alone (the callers still read it). */
static bool cap_eligible(const kvc_mamba_radix_cache *c, int32_t x) {
  const kvc_radix_cache *rc = c->rc;
  return rc->nodes[x].mamba_slot && rc->nodes[x].mamba_lock == 0 && rc->hot[x].nchild == 1;
}

static void cap_path(kvc_mamba_radix_cache *c, int32_t tail) {
  kvc_radix_cache *rc = c->rc;
  int64_t held = 0, eligible = 0;
  for (int32_t x = tail; x > 0; x = rc->hot[x].parent) {
    held += rc->nodes[x].mamba_slot != 0;
    eligible += x != tail && cap_eligible(c, x);
  }
  const int64_t k = KVC__MIN(held - c->cap, eligible);
  if (k <= 0) return;
  /* The k shallowest eligible nodes: walking up, the ones past the first eligible - k.
   * Gathered deep first (at most one per state: capbuf has a slot per state), freed
   * shallow first, SGLang's order (the pool's free list and the events see it). */
  int64_t skip = eligible - k, n = 0;
  for (int32_t x = rc->hot[tail].parent; x > 0; x = rc->hot[x].parent) {
    if (!cap_eligible(c, x)) continue;
    if (skip > 0) skip--;
    else c->capbuf[n++] = x;
  }
  while (n-- > 0) {
    const int32_t x = c->capbuf[n];
    int32_t s = detach(c, x);
    if (kvc_mamba_pool_free(c->pool, &s, 1) != KVC_OK) { /* freed behind the cache's back */
      attach(c, x, s);
      return;
    }
    if (rc->events_on) kvc__rx_event_removed_as(rc, x, KVC_RADIX_COMPONENT_MAMBA);
  }
}

static void attach_capped(kvc_mamba_radix_cache *c, int32_t id, int32_t s) {
  attach(c, id, s);
  if (c->cap > 0) cap_path(c, id);
}

/* rc->on_delete_state: a node with a state is being deleted (its KV freed by the caller). */
static void on_delete(void *user, int32_t id) {
  kvc_mamba_radix_cache *c = user;
  int32_t s = detach(c, id);
  /* Cannot fail for a slot the tree owns, unless it was freed behind the cache's back. */
  kvc_status st = kvc_mamba_pool_free(c->pool, &s, 1);
  if (st != KVC_OK && c->hook_st == KVC_OK) c->hook_st = st;
}

/* --- Create / destroy ------------------------------------------------------------------- */

kvc_status kvc_mamba_radix_cache_create(kvc_context *ctx, const kvc_mamba_radix_cache_config *config,
                                        kvc_mamba_radix_cache **out) {
  kvc_mamba_radix_cache_config cfg = KVC_MAMBA_RADIX_CACHE_CONFIG_INIT;
  KVC__CREATE_CONFIG(ctx, config, out, &cfg, kvc_mamba_radix_cache_config);
  kvc_mamba_pool *pool = kvc_hybrid_req_pool_mamba_pool(cfg.hybrid_req_pool);
  KVC_RETURN_IF(!pool, ctx, KVC_ERR_INVALID_ARGUMENT, "hybrid_req_pool is NULL or not a hybrid request pool");
  const bool track = kvc_hybrid_req_pool_track_mapping(cfg.hybrid_req_pool) != NULL;
  /* SGLang: without the extra buffer only the sequence-end state exists. */
  KVC_RETURN_IF(!track && cfg.radix.page_size > 1, ctx, KVC_ERR_INVALID_ARGUMENT,
                "page_size %d needs the hybrid pool's TRACK buffers (only the sequence-end state exists without them)",
                cfg.radix.page_size);
  KVC_RETURN_IF(cfg.max_states_per_path < 0, ctx, KVC_ERR_INVALID_ARGUMENT, "max_states_per_path %d < 0",
                cfg.max_states_per_path);
  const int32_t size = kvc_mamba_pool_size(pool);
  kvc_mamba_radix_cache *c = kvc__calloc(ctx, 1, sizeof *c);
  KVC_RETURN_IF(!c, ctx, KVC_ERR_HOST_OOM, "Mamba radix cache");
  c->owner = kvc__calloc(ctx, (size_t)size + 1, sizeof *c->owner);
  c->prev = kvc__calloc(ctx, (size_t)size + 1, sizeof *c->prev);
  c->next = kvc__calloc(ctx, (size_t)size + 1, sizeof *c->next);
  c->capbuf = kvc__calloc(ctx, (size_t)size + 1, sizeof *c->capbuf);
  kvc_status st = !c->owner || !c->prev || !c->next || !c->capbuf
                      ? kvc__error(ctx, KVC_ERR_HOST_OOM, __func__, "state tables for %d slots", size)
                      : kvc_radix_cache_create(ctx, &cfg.radix, &c->rc);
  if (st != KVC_OK) {
    kvc__free(ctx, c->owner);
    kvc__free(ctx, c->prev);
    kvc__free(ctx, c->next);
    kvc__free(ctx, c->capbuf);
    kvc__free(ctx, c);
    return st;
  }
  c->magic = KVC__MAMBA_RADIX_MAGIC;
  c->ctx = ctx;
  c->hybrid = cfg.hybrid_req_pool;
  c->pool = pool;
  c->size = size;
  c->track = track;
  c->pp = kvc_hybrid_req_pool_pp(cfg.hybrid_req_pool);
  c->cap = cfg.max_states_per_path;
  c->rc->on_delete_state = on_delete;
  c->rc->comp_user = c;
  *out = c;
  return KVC_OK;
}

void kvc_mamba_radix_cache_destroy(kvc_mamba_radix_cache *c) {
  if (!c || c->magic != KVC__MAMBA_RADIX_MAGIC) return;
  kvc_context *ctx = c->ctx;
  kvc_radix_cache_destroy(c->rc);
  kvc__free(ctx, c->owner);
  kvc__free(ctx, c->prev);
  kvc__free(ctx, c->next);
  kvc__free(ctx, c->capbuf);
  c->magic = 0;
  kvc__free(ctx, c);
}

/* --- Locks --------------------------------------------------------------------------------- */

static void lock(kvc_mamba_radix_cache *c, int32_t id) {
  if (!id) return;
  kvc__rx_lock(c->rc, id);
  rx_node *n = &c->rc->nodes[id];
  if (n->mamba_lock++ == 0 && n->mamba_slot) c->protected_states++;
}

static kvc_status unlockable(const kvc_mamba_radix_cache *c, int32_t id, const char *fn) {
  if (!id) return KVC_OK;
  KVC_RETURN_IF(c->rc->hot[id].lock_ref <= 0 || c->rc->nodes[id].mamba_lock <= 0, c->ctx, KVC_ERR_MISUSE,
                "%s: node %d is not locked (unlocked twice?)", fn, id);
  return KVC_OK;
}

/* After unlockable: cannot fail. */
static void unlock(kvc_mamba_radix_cache *c, int32_t id, const char *fn) {
  if (!id) return;
  rx_node *n = &c->rc->nodes[id];
  if (--n->mamba_lock == 0 && n->mamba_slot) c->protected_states--;
  (void)kvc__rx_unlock(c->rc, id, fn);
}

static kvc_status node_of(const kvc_mamba_radix_cache *c, void *handle, int32_t *id, const char *fn) {
  *id = 0;
  if (!handle) return KVC_OK;
  KVC_RETURN_IF(!kvc__rx_from_handle(c->rc, handle, id), c->ctx, KVC_ERR_INVALID_ARGUMENT,
                "%s: node %p is not a node of this cache (stale, evicted, or from before a reset)", fn, handle);
  return KVC_OK;
}

kvc_status kvc_mamba_radix_cache_lock(kvc_mamba_radix_cache *c, void *node) {
  MAMBA_RADIX_ENTRY(c);
  int32_t id;
  KVC_FORWARD(node_of(c, node, &id, __func__));
  lock(c, id);
  return post(c, KVC_OK);
}

kvc_status kvc_mamba_radix_cache_unlock(kvc_mamba_radix_cache *c, void *node) {
  MAMBA_RADIX_ENTRY(c);
  int32_t id;
  KVC_FORWARD(node_of(c, node, &id, __func__));
  KVC_FORWARD(unlockable(c, id, __func__));
  unlock(c, id, __func__);
  return post(c, KVC_OK);
}

kvc_status kvc_mamba_radix_cache_node_state(const kvc_mamba_radix_cache *c, void *node, int32_t *mamba_slot) {
  MAMBA_RADIX_ENTRY(c);
  KVC_RETURN_IF(!mamba_slot, c->ctx, KVC_ERR_INVALID_ARGUMENT, "mamba_slot is NULL");
  int32_t id;
  KVC_FORWARD(node_of(c, node, &id, __func__));
  *mamba_slot = id ? c->rc->nodes[id].mamba_slot : 0;
  return KVC_OK;
}

/* --- Eviction -------------------------------------------------------------------------------- */

/* A node without a state goes once childless (SGLang's _iteratively_delete_tombstone_leaf
 * after every leaf eviction: no leaf is left without a state). */
static bool stateless(const rx_node *n) { return !n->mamba_slot; }

/* MAMBA eviction: MAMBA-unlocked states from the LRU end until *mamba_done >= need. An
 * unlocked childless node goes whole (and its stateless childless ancestors with it), any
 * other node keeps its KV. */
static kvc_status mamba_evict(kvc_mamba_radix_cache *c, kvc_flow *flow, int64_t need, int64_t *mamba_done,
                              int64_t *full_done) {
  kvc_radix_cache *rc = c->rc;
  for (int32_t s = c->tail; s && *mamba_done < need;) {
    const int32_t x = c->owner[s], before = c->prev[s];
    if (rc->nodes[x].mamba_lock > 0) {
      s = before;
      continue;
    }
    const int32_t len = rc->hot[x].len;
    if (rc->hot[x].nchild == 0 && rc->hot[x].lock_ref == 0) {
      const int32_t parent = rc->hot[x].parent;
      KVC_FORWARD(kvc__rx_free_node(rc, flow, x)); /* the victim stays: its free changed nothing */
      kvc__rx_delete_leaf(rc, x);                  /* the hook frees the state */
      *full_done += len;
      ++*mamba_done;
      KVC_FORWARD(kvc__rx_drop_bare_chain(rc, flow, parent, stateless, full_done));
      s = before; /* no node of the chain has a state: the list is as it was */
      continue;
    } else {
      int32_t slot = detach(c, x);
      kvc_status st = kvc_mamba_pool_free(c->pool, &slot, 1);
      if (st != KVC_OK) { /* freed behind the cache's back: put it back as it was */
        attach(c, x, slot);
        return st;
      }
      if (rc->events_on) kvc__rx_event_removed_as(rc, x, KVC_RADIX_COMPONENT_MAMBA);
    }
    ++*mamba_done;
    s = before; /* unlinking s left its predecessor where it was */
  }
  return KVC_OK;
}

static kvc_status evict(kvc_mamba_radix_cache *c, kvc_flow *flow, int64_t num, int64_t mamba_num, int64_t *evicted,
                        int64_t *mamba_evicted, const char *fn) {
  kvc_radix_cache *rc = c->rc;
  const bool full_ok = rc->heap_len > 0, mamba_ok = c->states > c->protected_states;
  KVC_RETURN_IF(!(num > 0 && full_ok) && !(mamba_num > 0 && mamba_ok), c->ctx, KVC_ERR_OUT_OF_SLOTS,
                "%s: nothing evictable for %lld tokens / %lld Mamba states (evictable %lld tokens, %lld states)", fn,
                (long long)num, (long long)mamba_num, (long long)rc->evictable,
                (long long)(c->states - c->protected_states));
  KVC_RETURN_IF(!kvc__rx_can_free(rc, flow), c->ctx, KVC_ERR_UNSUPPORTED,
                "%s: no flow and no free_slots hook to free through", fn);
  /* SGLang: full leaves first (each takes its state with it), then states for what is left. */
  int64_t full_done = 0, mamba_done = 0;
  kvc_status st = KVC_OK;
  if (num > 0) {
    const int64_t states0 = c->states;
    st = kvc__rx_evict_full_chains(c->rc, flow, num, stateless, &full_done);
    mamba_done = states0 - c->states;
  }
  if (st == KVC_OK && mamba_done < mamba_num) st = mamba_evict(c, flow, mamba_num, &mamba_done, &full_done);
  if (evicted) *evicted = full_done;
  if (mamba_evicted) *mamba_evicted = mamba_done;
  return st;
}

kvc_status kvc_mamba_radix_cache_evict(kvc_mamba_radix_cache *c, kvc_flow *flow, int64_t num_tokens, int64_t mamba_num,
                                       int64_t *evicted, int64_t *mamba_evicted) {
  MAMBA_RADIX_ENTRY(c);
  KVC_RETURN_IF(num_tokens < 0 || mamba_num < 0, c->ctx, KVC_ERR_INVALID_ARGUMENT,
                "num_tokens %lld / mamba_num %lld < 0", (long long)num_tokens, (long long)mamba_num);
  if (evicted) *evicted = 0;
  if (mamba_evicted) *mamba_evicted = 0;
  if (num_tokens == 0 && mamba_num == 0) return KVC_OK;
  return post(c, evict(c, flow, num_tokens, mamba_num, evicted, mamba_evicted, __func__));
}

/* --- Match ---------------------------------------------------------------------------------- */

static kvc_status match(kvc_mamba_radix_cache *c, const char *fn, uint64_t ns, const int32_t *tokens, int64_t n,
                        int64_t *buf, kvc_radix_match *out, int32_t *state, int64_t *full_len) {
  kvc_radix_cache *rc = c->rc;
  KVC_RETURN_IF(n < 0 || n > INT32_MAX || (n > 0 && !tokens), c->ctx, KVC_ERR_INVALID_ARGUMENT, "%s: %lld tokens at %p",
                fn, (long long)n, (const void *)tokens);
  n = n / rc->ps * rc->ps;
  memset(out, 0, sizeof *out);
  out->node = kvc__rx_handle(rc, 0);
  *state = 0;
  *full_len = 0;
  if (n == 0) return KVC_OK;
  KVC_FORWARD(kvc__rx_reserve(rc, fn, (size_t)n));
  int64_t matched;
  int32_t node;
  size_t depth;
  KVC_FORWARD(kvc__rx_match(rc, ns, tokens, n, &matched, &node, &depth));
  *full_len = matched;
  /* SGLang's validator: the deepest node of the path with a state. */
  size_t d = depth;
  while (d > 0 && !rc->nodes[rc->path[d - 1]].mamba_slot) d--;
  if (d == 0) return KVC_OK;
  int64_t len = 0;
  for (size_t i = 0; i < d; i++) len += rc->hot[rc->path[i]].len;
  const int32_t id = rc->path[d - 1];
  int copied = 0;
  out->len = len;
  out->slots = kvc__rx_path_values(rc, d, len, buf, &copied);
  out->copied = copied;
  out->node = kvc__rx_handle(rc, id);
  *state = rc->nodes[id].mamba_slot;
  touch(c, id); /* SGLang MATCH_END: only the used state is refreshed */
  return KVC_OK;
}

kvc_status kvc_mamba_radix_cache_match_prefix(kvc_mamba_radix_cache *c, uint64_t ns, const int32_t *tokens, int64_t n,
                                              kvc_radix_match *out, int32_t *mamba_slot, int64_t *full_len) {
  MAMBA_RADIX_ENTRY(c);
  KVC_RETURN_IF(!out, c->ctx, KVC_ERR_INVALID_ARGUMENT, "out is NULL");
  int32_t s;
  int64_t fl;
  KVC_FORWARD(match(c, __func__, ns, tokens, n, NULL, out, &s, &fl));
  if (mamba_slot) *mamba_slot = s;
  if (full_len) *full_len = fl;
  return post(c, KVC_OK);
}

/* A slot a caller hands in: a held slot of the pool that the tree does not own. */
static kvc_status check_slot(const kvc_mamba_radix_cache *c, int32_t s, const char *fn, const char *what) {
  KVC_RETURN_IF(s < 1 || s > c->size, c->ctx, KVC_ERR_INVALID_ARGUMENT, "%s: %s %d outside [1, %d]", fn, what, s,
                c->size);
  KVC_RETURN_IF(!kvc_mamba_pool_is_held(c->pool, s), c->ctx, KVC_ERR_MISUSE, "%s: %s %d is not a held Mamba slot", fn,
                what, s);
  KVC_RETURN_IF(c->owner[s], c->ctx, KVC_ERR_MISUSE, "%s: %s %d is the cache's own state (of node %d)", fn, what, s,
                c->owner[s]);
  return KVC_OK;
}

/* The state match() would end at, found without splitting or stamping anything, so that
 * match_req can launch its copy before it changes the tree: the slot of the deepest
 * wholly matched node with a state (0: none). Reserves the scratch and the split node
 * match() needs, so that match() cannot fail after the launch. */
static kvc_status peek_state(kvc_mamba_radix_cache *c, const char *fn, uint64_t ns, const int32_t *tokens, int64_t n,
                             int32_t *state) {
  kvc_radix_cache *rc = c->rc;
  *state = 0;
  KVC_RETURN_IF(n < 0 || n > INT32_MAX || (n > 0 && !tokens), c->ctx, KVC_ERR_INVALID_ARGUMENT, "%s: %lld tokens at %p",
                fn, (long long)n, (const void *)tokens);
  n = n / rc->ps * rc->ps;
  if (n == 0) return KVC_OK;
  KVC_FORWARD(kvc__rx_reserve(rc, fn, (size_t)n));
  KVC_FORWARD(kvc__rx_reserve_nodes(rc, fn, 1));
  size_t d;
  const int64_t present = kvc__rx_probe_path(rc, ns, tokens, n, &d);
  int64_t covered = 0;
  for (size_t i = 0; i < d; i++) covered += rc->hot[rc->path[i]].len;
  if (d > 0 && covered > present) d--; /* a node matched in part: match() splits it, its state goes below */
  while (d > 0 && !rc->nodes[rc->path[d - 1]].mamba_slot) d--;
  if (d > 0) *state = rc->nodes[rc->path[d - 1]].mamba_slot;
  return KVC_OK;
}

/* The state mamba_evict(c, flow, 1, ...) would take once the match holds `keep`'s node
 * locked: the first MAMBA-unlocked one from the LRU end other than `keep` (the match's
 * touch moves only `keep`, so the order of the others is the same). 0: none. */
static int32_t next_victim(const kvc_mamba_radix_cache *c, int32_t keep) {
  for (int32_t s = c->tail; s; s = c->prev[s])
    if (s != keep && c->rc->nodes[c->owner[s]].mamba_lock == 0) return s;
  return 0;
}

/* mamba_evict of the one state in slot v, but the slot stays handed out: it becomes the
 * request's, as mamba_evict's free and fork's alloc would have made it (the pool had no
 * free slot, so the alloc takes back exactly v). Its row already holds the copy, so
 * this cannot fail: a whole leaf whose KV free the flow refuses keeps its KV and loses
 * only its state (logged), which leaves the tree consistent and the match done. */
static void evict_into(kvc_mamba_radix_cache *c, kvc_flow *flow, int32_t v) {
  kvc_radix_cache *rc = c->rc;
  const int32_t x = c->owner[v];
  if (rc->hot[x].nchild == 0 && rc->hot[x].lock_ref == 0) {
    const kvc_status st = kvc__rx_free_node(rc, flow, x);
    detach(c, x); /* first: the delete hook would give the slot back to the pool */
    if (st == KVC_OK) {
      kvc__rx_delete_leaf(rc, x);
      return;
    }
    kvc__log(c->ctx, KVC_LOG_WARN, "kvc_mamba_radix_cache_match_req: node %d keeps its KV (%s)", x,
             kvc_last_error(c->ctx));
  } else {
    detach(c, x);
  }
  if (rc->events_on) kvc__rx_event_removed_as(rc, x, KVC_RADIX_COMPONENT_MAMBA);
}

kvc_status kvc_mamba_radix_cache_match_req(kvc_mamba_radix_cache *c, kvc_flow *flow, kvc_req_state *req,
                                           kvc_radix_req *rreq, kvc_stream stream) {
  MAMBA_RADIX_ENTRY(c);
  const char *fn = __func__;
  KVC_RETURN_IF(!req || !rreq, c->ctx, KVC_ERR_INVALID_ARGUMENT, "req or rreq is NULL");
  KVC_RETURN_IF(req->req_row || req->cache_node, c->ctx, KVC_ERR_MISUSE,
                "the request already holds a row (%d) or a node: match only new requests", req->req_row);
  KVC_RETURN_IF(rreq->num_tokens < 0 || (rreq->num_tokens > 0 && !rreq->tokens), c->ctx, KVC_ERR_INVALID_ARGUMENT,
                "rreq: %lld tokens at %p", (long long)rreq->num_tokens, (const void *)rreq->tokens);
  KVC_RETURN_IF(req->mamba_slot < 0, c->ctx, KVC_ERR_INVALID_ARGUMENT, "mamba_slot %d < 0", req->mamba_slot);
  if (req->mamba_slot) KVC_FORWARD(check_slot(c, req->mamba_slot, fn, "mamba_slot"));
  /* SGLang _compute_max_prefix_len: the last token is always recomputed. */
  const int64_t want = KVC__MAX(0, rreq->num_tokens - 1);
  /* The copy launch goes first, before the walk splits, stamps and touches anything and
   * before any eviction: a failed launch (or no slot to be had) then changes nothing. */
  int32_t src, dst = req->mamba_slot, victim = 0;
  KVC_FORWARD(peek_state(c, fn, rreq->ns, rreq->tokens, want, &src));
  if (src && dst) {
    KVC_FORWARD(kvc_mamba_pool_copy_from(c->pool, &src, &dst, 1, stream));
  } else if (src) {
    kvc_status st = kvc_mamba_pool_fork_from(c->pool, src, &dst, stream);
    if (st == KVC_ERR_OUT_OF_SLOTS) { /* SGLang: evict one state, then alloc again */
      victim = kvc__rx_can_free(c->rc, flow) ? next_victim(c, src) : 0;
      KVC_RETURN_IF(!victim, c->ctx, KVC_ERR_OUT_OF_SLOTS, "%s: no free Mamba slot and no evictable state", fn);
      dst = victim;
      st = kvc_mamba_pool_copy_from(c->pool, &src, &dst, 1, stream);
    }
    KVC_FORWARD(st);
  }
  /* Commit: cannot fail (peek_state reserved what match() needs). */
  kvc_radix_match m;
  int32_t got;
  int64_t full;
  KVC_FORWARD(match(c, fn, rreq->ns, rreq->tokens, want, rreq->prefix_buf, &m, &got, &full));
  if (got != src)
    return kvc__error(c->ctx, KVC_ERR_INTERNAL, fn, "the match's state %d is not the peeked %d", got, src);
  int32_t node = 0;
  kvc__rx_from_handle(c->rc, m.node, &node);
  lock(c, node);
  if (victim) evict_into(c, flow, victim);
  req->mamba_slot = dst;
  req->prefix_len = req->cache_protected_len = m.len;
  req->prefix_slots = m.len ? m.slots : NULL;
  req->cache_node = node ? m.node : NULL;
  /* SGLang mamba_branching_seqlen, on the page grid. */
  const int64_t branch = full / c->rc->ps * c->rc->ps;
  rreq->mamba_branching_len = branch > m.len ? branch : 0;
  return post(c, KVC_OK);
}

/* --- Insert ------------------------------------------------------------------------------------ */

kvc_status kvc_mamba_radix_cache_insert(kvc_mamba_radix_cache *c, kvc_flow *flow, uint64_t ns, const int32_t *tokens,
                                        const int64_t *slots, int64_t n, int32_t mamba_slot, int64_t *prefix_len,
                                        int *mamba_taken) {
  MAMBA_RADIX_ENTRY(c);
  kvc_radix_cache *rc = c->rc;
  KVC_RETURN_IF(n < 0 || n > INT32_MAX || (n > 0 && (!tokens || !slots)), c->ctx, KVC_ERR_INVALID_ARGUMENT,
                "%lld tokens / slots at %p / %p", (long long)n, (const void *)tokens, (const void *)slots);
  KVC_FORWARD(check_slot(c, mamba_slot, __func__, "mamba_slot"));
  n = n / rc->ps * rc->ps;
  int64_t prefix = 0;
  int taken = 0;
  if (n > 0) {
    int32_t node;
    const rx_insert_args a = {.ns = ns, .keys = tokens, .vals = slots, .n = n, .prefix = &prefix, .node = &node};
    KVC_FORWARD(kvc__rx_insert_with(rc, flow, __func__, &a));
    if (!rc->nodes[node].mamba_slot) attach_capped(c, node, mamba_slot), taken = 1;
    else touch(c, node); /* SGLang mamba_exist: the existing state is refreshed */
  }
  if (prefix_len) *prefix_len = prefix;
  if (mamba_taken) *mamba_taken = taken;
  return post(c, KVC_OK);
}

/* --- Request-level checkpoint --------------------------------------------------------------- */

/* What both checkpoints check first: the request (*old its locked node, 0 = none), that
 * the flow binds the cache's hybrid pool, and the request's key (*rr). */
static kvc_status req_begin(kvc_mamba_radix_cache *c, kvc_flow *flow, const kvc_req_state *req, const char *fn,
                            int32_t *old, kvc_radix_req **rr) {
  KVC_FORWARD(kvc__rx_req_check(c->rc, flow, req, fn, old));
  KVC_RETURN_IF(flow->hybrid != c->hybrid, c->ctx, KVC_ERR_MISUSE, "%s: the flow binds another hybrid pool", fn);
  kvc_status st;
  *rr = kvc__rx_req_of(c->rc, req, fn, &st);
  return st;
}

/* The state a finished request donates for its committed tokens (floored to pages, `limit`):
 * *kept as kvc__hybrid_req_pool_donate names it (-1 = none), *slot and *len its tokens. */
static kvc_status pick_donor(const kvc_mamba_radix_cache *c, const kvc_req_state *req, int64_t limit, int32_t *kept,
                             int32_t *slot, int64_t *len, const char *fn) {
  *kept = -1, *slot = 0, *len = 0;
  const int32_t row = req->req_row, running = kvc_hybrid_req_pool_mamba_slot(c->hybrid, row);
  if (running <= 0) return KVC_OK; /* no Mamba state: nothing can be cached */
  if (!c->track) {                 /* the running state is the sequence-end state (page 1) */
    if (limit > 0) *kept = 0, *slot = running, *len = limit;
  } else {
    /* SGLang _select_finished_checkpoint: the newest checkpoint that fits the key. */
    const int32_t *ts = kvc_hybrid_req_pool_track_slots(c->hybrid, row);
    for (int32_t k = 0; k < c->pp; k++) {
      const int64_t l = req->mamba_track_seqlen[k];
      KVC_RETURN_IF(l < 0 || l % c->rc->ps, c->ctx, KVC_ERR_INVALID_ARGUMENT,
                    "%s: mamba_track_seqlen[%d] %lld is not a page-aligned length", fn, k, (long long)l);
      if (ts[k] > 0 && l > *len && l <= limit) *kept = 1 + k, *slot = ts[k], *len = l;
    }
  }
  if (*slot)
    KVC_RETURN_IF(c->owner[*slot], c->ctx, KVC_ERR_MISUSE, "%s: the request's Mamba slot %d is node %d's state", fn,
                  *slot, c->owner[*slot]);
  return KVC_OK;
}

static void clear_mamba(kvc_req_state *req) {
  req->mamba_slot = 0;
  req->mamba_track[0] = req->mamba_track[1] = 0;
  req->mamba_track_seqlen[0] = req->mamba_track_seqlen[1] = 0;
}

kvc_status kvc_mamba_radix_cache_cache_finished_req(kvc_mamba_radix_cache *c, kvc_flow *flow, kvc_req_state *req,
                                                    int is_insert) {
  MAMBA_RADIX_ENTRY(c);
  const char *fn = __func__;
  kvc_radix_cache *rc = c->rc;
  int32_t old;
  kvc_radix_req *rr;
  KVC_FORWARD(req_begin(c, flow, req, fn, &old, &rr));
  kvc_status st = KVC_OK;
  const int32_t row = req->req_row;
  const bool has_mamba = kvc_hybrid_req_pool_mamba_slot(c->hybrid, row) > 0;
  const int64_t committed = req->kv_committed_len;
  KVC_FORWARD(unlockable(c, old, fn));
  if (!is_insert) {
    /* Abort: the Mamba slots first (one launch; on failure nothing changed), then the KV as
     * the radix cache does. A retry after a KV failure finds the Mamba side released. */
    if (has_mamba) KVC_FORWARD(kvc__hybrid_req_pool_donate(c->hybrid, row, -1, flow->stream));
    clear_mamba(req);
    unlock(c, old, fn);
    st = kvc__rx_free_row(rc, flow, row, req->cache_protected_len, committed);
    if (st != KVC_OK) {
      lock(c, old);
      return st;
    }
    req->cache_node = NULL;
    req->cache_protected_len = 0;
    return post(c, KVC_OK);
  }
  int32_t kept, donor;
  int64_t key_len;
  KVC_FORWARD(pick_donor(c, req, committed / rc->ps * rc->ps, &kept, &donor, &key_len, fn));
  KVC_FORWARD(kvc__rx_req_key(rc, rr, old, key_len, fn));
  unlock(c, old, fn);
  int64_t keep = req->cache_protected_len; /* the tree keeps at least what it had */
  int32_t node = 0;
  bool take = false;
  if (key_len > 0) {
    st = kvc__rx_insert_req(rc, flow, fn, req, rr, key_len, 0, &node, NULL, NULL);
    if (st != KVC_OK) {
      lock(c, old);
      return st;
    }
    keep = KVC__MAX(keep, key_len);
    take = !rc->nodes[node].mamba_slot;
    if (!take) touch(c, node); /* SGLang mamba_exist */
  }
  if (has_mamba) {
    st = kvc__hybrid_req_pool_donate(c->hybrid, row, take ? kept : -1, flow->stream);
    if (st != KVC_OK) {
      /* The KV of [0, key_len) is the tree's now: the request holds it like a chunked
       * request between chunks (locked at its node, cache_protected_len), with every
       * Mamba slot still its own, so a second release finishes without freeing twice. */
      if (key_len > 0) {
        lock(c, node);
        req->cache_node = kvc__rx_handle(rc, node);
        req->cache_protected_len = keep;
      } else {
        lock(c, old);
      }
      return st;
    }
  }
  if (take) attach_capped(c, node, donor);
  clear_mamba(req);
  req->cache_node = NULL;
  req->cache_protected_len = 0;
  /* The unaligned tail and the KV past the donated state are freed. */
  KVC_FORWARD(kvc__rx_free_row(rc, flow, row, keep, committed));
  return post(c, KVC_OK);
}

/* The state slot a chunk checkpoint inserts for src (track entry kept - 1 with donate):
 * *copy a fork of src (one launch), or with donate a fresh slot for the request's track
 * entry (one zeroing launch, then the mapping launch of set_track_slot) and *copy = src
 * itself. One unlocked state is evicted when the pool is empty (SGLang's
 * _alloc_mamba_slot). Undone by unslot() when the insert fails. */
static kvc_status slot_for_checkpoint(kvc_mamba_radix_cache *c, kvc_flow *flow, const kvc_req_state *req, bool donate,
                                      int32_t kept, int32_t src, int32_t *copy, int32_t *fresh) {
  *copy = *fresh = 0;
  kvc_status st = donate ? kvc_mamba_pool_alloc(c->pool, 1, fresh, flow->stream)
                         : kvc_mamba_pool_fork_from(c->pool, src, copy, flow->stream);
  if (st == KVC_ERR_OUT_OF_SLOTS && c->states > c->protected_states) {
    int64_t got = 0, full_done = 0; /* the request's node is locked: its path stays */
    st = mamba_evict(c, flow, 1, &got, &full_done);
    if (st == KVC_OK)
      st = donate ? kvc_mamba_pool_alloc(c->pool, 1, fresh, flow->stream)
                  : kvc_mamba_pool_fork_from(c->pool, src, copy, flow->stream);
  }
  KVC_FORWARD(st);
  if (!donate) return KVC_OK;
  st = kvc_hybrid_req_pool_set_track_slot(c->hybrid, req->req_row, kept - 1, *fresh, flow->stream);
  if (st != KVC_OK) {
    kvc__mamba_pool_unalloc(c->pool, fresh, 1);
    return st;
  }
  *copy = src;
  return KVC_OK;
}

static void unslot(kvc_mamba_radix_cache *c, kvc_flow *flow, const kvc_req_state *req, bool donate, int32_t kept,
                   int32_t copy, int32_t fresh) {
  if (!donate) {
    kvc__mamba_pool_unalloc(c->pool, &copy, 1); /* back to the front: the pool as before */
    return;
  }
  /* The track entry back to the donated slot (one more launch; its failure is logged:
   * the insert's error is the one returned). */
  if (kvc_hybrid_req_pool_set_track_slot(c->hybrid, req->req_row, kept - 1, copy, flow->stream) != KVC_OK)
    kvc__log(c->ctx, KVC_LOG_WARN, "kvc_mamba_radix_cache_donate_unfinished_req: track entry %d not restored (%s)",
             kept - 1, kvc_last_error(c->ctx));
  else kvc__mamba_pool_unalloc(c->pool, &fresh, 1);
}

static kvc_status unfinished(kvc_mamba_radix_cache *c, kvc_flow *flow, kvc_req_state *req, bool donate,
                             const char *fn) {
  kvc_radix_cache *rc = c->rc;
  int32_t old;
  kvc_radix_req *rr;
  KVC_RETURN_IF(donate && !c->track, c->ctx, KVC_ERR_UNSUPPORTED, "%s: the hybrid pool has no track buffers", fn);
  KVC_FORWARD(req_begin(c, flow, req, fn, &old, &rr));
  kvc_status st = KVC_OK;
  const int64_t committed = req->kv_committed_len;
  int32_t kept, src;
  int64_t key_len;
  KVC_FORWARD(pick_donor(c, req, committed / rc->ps * rc->ps, &kept, &src, &key_len, fn));
  if (!src || key_len <= req->cache_protected_len) { /* nothing new to cache: the row holds the KV */
    req->prefix_len = committed;
    req->prefix_slots = NULL;
    return KVC_OK;
  }
  KVC_FORWARD(kvc__rx_req_key(rc, rr, old, key_len, fn));
  KVC_FORWARD(unlockable(c, old, fn));
  /* The tree's state: SGLang alloc + copy_from (a fork), or with donate the track slot
   * itself (donate_mamba_ping_pong_slot: the request's entry gets a fresh slot). */
  int32_t copy, fresh;
  KVC_FORWARD(slot_for_checkpoint(c, flow, req, donate, kept, src, &copy, &fresh));
  int32_t node;
  size_t nd = 0, depth;
  st = kvc__rx_insert_req(rc, flow, fn, req, rr, key_len, 0, &node, &nd, &depth);
  if (st != KVC_OK) {
    unslot(c, flow, req, donate, kept, copy, fresh);
    return st;
  }
  if (donate) req->mamba_track[kept - 1] = fresh;
  kvc__rx_touch_path(rc, depth); /* SGLang re-matches the key */
  if (!rc->nodes[node].mamba_slot) {
    attach_capped(c, node, copy);
  } else {
    touch(c, node); /* SGLang mamba_exist: the copy (or the donated slot) is freed */
    (void)kvc_mamba_pool_free(c->pool, &copy, 1);
  }
  /* The tree's slots go into the row where the request's duplicates were. */
  if (nd) st = kvc__rx_write_path(rc, flow, req, depth, req->cache_protected_len, key_len);
  lock(c, node);
  unlock(c, old, fn);
  req->cache_node = kvc__rx_handle(rc, node);
  req->cache_protected_len = key_len;
  req->prefix_len = committed;
  req->prefix_slots = NULL;
  return post(c, st);
}

kvc_status kvc_mamba_radix_cache_cache_unfinished_req(kvc_mamba_radix_cache *c, kvc_flow *flow, kvc_req_state *req) {
  MAMBA_RADIX_ENTRY(c);
  return unfinished(c, flow, req, false, __func__);
}

kvc_status kvc_mamba_radix_cache_donate_unfinished_req(kvc_mamba_radix_cache *c, kvc_flow *flow, kvc_req_state *req) {
  MAMBA_RADIX_ENTRY(c);
  return unfinished(c, flow, req, true, __func__);
}
