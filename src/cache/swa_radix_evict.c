/*
 * swa_radix_evict.c — the kvc_swa_radix_cache calls that hold and release cached SWA
 * slots: SWA locks (what eviction must skip) and the public lock / unlock, eviction
 * (full leaves first, then SWA in LRU order: tombstones, deleted leaves and their
 * tombstone chains), reset, sizes, the audit, stats, and the kvc_prefix_cache adapter.
 * Split off swa_radix.c for the ~700-line file rule (issue 14), with no behaviour change;
 * the shared state is in swa_radix_impl.h, and the design (SWA state on radix nodes,
 * the rules SGLang sets, the lazy LRU heap) is described at the top of swa_radix.c.
 */
#include "swa_radix_impl.h"

#include <string.h>

/* --- SWA locks ----------------------------------------------------------------------------- */

/* The receipt encoding (RCPT_CHAIN and the chain lock): swa_radix_impl.h. */
static uint64_t receipt_of(uint32_t uuid) { return ((uint64_t)uuid << 2) | 1u; }

uint64_t kvc__swa_rx_lock_chain(kvc_swa_radix_cache *c, int32_t id) {
  kvc_radix_cache *rc = c->rc;
  for (int32_t x = id; x > 0 && rc->nodes[x].swa_lock != RX_SWA_TOMB; x = rc->hot[x].parent)
    if (rc->nodes[x].swa_lock++ == 0) rc->swa_protected += rc->hot[x].len;
  return RCPT_CHAIN;
}

/* Whether node id can take an SWA lock: every node covering its last window is live. */
kvc_status kvc__swa_rx_lockable(const kvc_swa_radix_cache *c, int32_t id, const char *fn) {
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
uint64_t kvc__swa_rx_lock(kvc_swa_radix_cache *c, int32_t id) {
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
kvc_status kvc__swa_rx_unlockable(const kvc_swa_radix_cache *c, int32_t id, uint64_t receipt, const char *fn) {
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

void kvc__swa_rx_unlock(kvc_swa_radix_cache *c, int32_t id, uint64_t receipt) {
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
  if (kvc__swa_rx_has_swa(c)) KVC_FORWARD(kvc__swa_rx_lockable(c, id, __func__));
  kvc__rx_lock(c->rc, id);
  *swa_receipt = id && kvc__swa_rx_has_swa(c) ? kvc__swa_rx_lock(c, id) : 0;
  return kvc__swa_rx_post(c, __func__, KVC_OK);
}

kvc_status kvc_swa_radix_cache_unlock_swa(kvc_swa_radix_cache *c, void *node, uint64_t *swa_receipt) {
  SWA_RADIX_ENTRY(c);
  KVC_RETURN_IF(!swa_receipt, c->ctx, KVC_ERR_INVALID_ARGUMENT, "swa_receipt is NULL");
  int32_t id;
  KVC_FORWARD(node_of(c, node, &id, __func__));
  if (!id || !*swa_receipt) return KVC_OK; /* nothing held: released already */
  KVC_FORWARD(kvc__swa_rx_unlockable(c, id, *swa_receipt, __func__));
  kvc__swa_rx_unlock(c, id, *swa_receipt);
  *swa_receipt = 0;
  return kvc__swa_rx_post(c, __func__, KVC_OK);
}

kvc_status kvc_swa_radix_cache_unlock(kvc_swa_radix_cache *c, void *node, uint64_t swa_receipt) {
  SWA_RADIX_ENTRY(c);
  int32_t id;
  KVC_FORWARD(node_of(c, node, &id, __func__));
  if (!id) return KVC_OK;
  KVC_RETURN_IF(c->rc->hot[id].lock_ref <= 0, c->ctx, KVC_ERR_MISUSE, "%s: node %d is not locked", __func__, id);
  if (swa_receipt) KVC_FORWARD(kvc__swa_rx_unlockable(c, id, swa_receipt, __func__));
  if (swa_receipt) kvc__swa_rx_unlock(c, id, swa_receipt);
  KVC_FORWARD(kvc__rx_unlock(c->rc, id, __func__)); /* checked above: cannot fail */
  return kvc__swa_rx_post(c, __func__, KVC_OK);
}

/* --- Eviction -------------------------------------------------------------------------------- */

static kvc_status free_swa_side(kvc_swa_radix_cache *c, kvc_flow *flow, const int64_t *slots, size_t n) {
  if (flow) return kvc__flow_free_window(flow, slots, n);
  return c->free_swa(c->free_swa_user, slots, n);
}

/* A tombstone goes once childless (SGLang's tombstone-chain cleanup after every leaf
 * eviction: no leaf is left a tombstone, and a later SWA eviction finds those nodes gone,
 * not inner). */
static bool tombstone(const rx_node *n) { return n->swa_lock == RX_SWA_TOMB; }

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
    const kvc__rx_visit e = kvc__swa_rx_lru_pop(c);
    const int32_t x = (int32_t)e.id;
    rx_node *n = &rc->nodes[x];
    if (!n->seg || n->swa_lock == RX_SWA_TOMB) { /* gone, or a tombstone: no entry now */
      c->in_lru[x] = 0;
      continue;
    }
    if (e.access != n->access) { /* stamped since: back with its stamp */
      kvc__swa_rx_lru_push(c, (kvc__rx_visit){n->access, x});
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
      if (st == KVC_OK) st = kvc__rx_free_node(rc, flow, x);
      if (st != KVC_OK) {
        c->in_lru[x] = 1; /* nothing changed for x */
        kvc__swa_rx_lru_push(c, e);
        break;
      }
      kvc__rx_delete_leaf(rc, x);
      *full_done += len;
      *swa_done += len;
      st = kvc__rx_drop_bare_chain(rc, flow, parent, tombstone, full_done);
    } else {
      if (!ebuf_add(c, rx_vals(n), (size_t)len)) {
        st = ebuf_flush(c, flow);
        if (st == KVC_OK) st = free_swa_side(c, flow, rx_vals(n), (size_t)len);
      }
      if (st != KVC_OK) {
        c->in_lru[x] = 1; /* nothing changed for x */
        kvc__swa_rx_lru_push(c, e);
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
  for (size_t i = 0; i < aside; i++) kvc__swa_rx_lru_push(c, c->aside[i]);
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
  KVC_FORWARD(kvc__swa_rx_check_flow(c, flow, __func__));
  if (c->kind == KVC_SWA_RADIX_PURE) { /* SGLang PureSWARadixCache.evict: one pool */
    int64_t done = 0;
    KVC_FORWARD(kvc_radix_cache_evict(rc, flow, KVC__MAX(num_tokens, swa_num_tokens), &done));
    if (evicted) *evicted = done;
    if (swa_evicted) *swa_evicted = done;
    return kvc__swa_rx_post(c, __func__, KVC_OK);
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
  /* SGLang: full leaves first (each frees its SWA side too), then SWA for what is left.
   * Every victim is a free of its own (its order and checks are the allocator's); one
   * deferred-zero scope around them all makes their device-mapping zeroes one launch,
   * where a launch per victim cost more host time on a GPU than the rest of the call. */
  int64_t full_done = 0, swa_done = 0;
  kvc_swa_allocator *const za = kvc__swa_rx_zero_open(c, flow);
  kvc_status st = KVC_OK;
  if (num_tokens > 0) {
    const int64_t live0 = rc->swa_live;
    st = kvc__rx_evict_full_chains(c->rc, flow, num_tokens, tombstone, &full_done);
    swa_done = live0 - rc->swa_live;
  }
  if (st == KVC_OK && swa_done < swa_num_tokens) st = swa_evict(c, flow, swa_num_tokens, &swa_done, &full_done);
  st = kvc__swa_rx_zero_close(c, flow, za, st); /* after the frees: they stay done if it fails */
  if (evicted) *evicted = full_done;
  if (swa_evicted) *swa_evicted = c->kind == KVC_SWA_RADIX_RING ? 0 : swa_done;
  return kvc__swa_rx_post(c, __func__, st);
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
  if (kvc__swa_rx_has_swa(c)) kvc__swa_rx_lock_chain(c, id);
}
static void pc_dec(void *self, void *node) {
  kvc_swa_radix_cache *c = self;
  if (kvc_swa_radix_cache_unlock(c, node, kvc__swa_rx_has_swa(c) ? RCPT_CHAIN : 0) != KVC_OK)
    kvc__log(c->ctx, KVC_LOG_WARN, "%s", kvc_last_error(c->ctx));
}

kvc_prefix_cache kvc_swa_radix_cache_as_prefix_cache(kvc_swa_radix_cache *c) {
  kvc_prefix_cache p;
  memset(&p, 0, sizeof p);
  p.self = c;
  p.is_chunk_cache = kvc__rx_pc_false;
  p.supports_mamba = kvc__rx_pc_false;
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
