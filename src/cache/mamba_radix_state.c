/*
 * mamba_radix_state.c — the Mamba radix cache's whole-cache calls: reset, the per-component
 * sizes and stats, the audit (kvc_mamba_radix_cache_check: every state owned by exactly one
 * node, the LRU list complete, the counts right) and the kvc_prefix_cache adapter the
 * flows call it through. Split from mamba_radix.c, which holds the component's rules, to
 * keep each file to one job.
 */
#include "mamba_radix_impl.h"
#include "../alloc/alloc.h"
#include "../flow/flow.h"

#include <string.h>

/* --- Reset, sizes, audit ------------------------------------------------------------------- */

kvc_status kvc_mamba_radix_cache_reset(kvc_mamba_radix_cache *c) {
  MAMBA_RADIX_ENTRY(c);
  KVC_FORWARD(kvc_radix_cache_reset(c->rc));
  const size_t n = (size_t)c->size + 1;
  memset(c->owner, 0, n * sizeof *c->owner);
  memset(c->prev, 0, n * sizeof *c->prev);
  memset(c->next, 0, n * sizeof *c->next);
  c->head = c->tail = 0;
  c->states = c->protected_states = 0;
  return KVC_OK;
}

kvc_status kvc_mamba_radix_cache_sizes(const kvc_mamba_radix_cache *c, kvc_mamba_radix_sizes *out) {
  MAMBA_RADIX_ENTRY(c);
  KVC_RETURN_IF(!out, c->ctx, KVC_ERR_INVALID_ARGUMENT, "out is NULL");
  const kvc_radix_cache *rc = c->rc;
  memset(out, 0, sizeof *out);
  out->evictable = rc->evictable;
  out->protected_size = rc->protected_;
  out->cached = rc->evictable + rc->protected_;
  out->mamba_evictable = c->states - c->protected_states;
  out->mamba_protected = c->protected_states;
  out->mamba_cached = c->states;
  return KVC_OK;
}

kvc_status kvc_mamba_radix_cache_stats(const kvc_mamba_radix_cache *c, kvc_radix_stats *out) {
  MAMBA_RADIX_ENTRY(c);
  KVC_FORWARD(kvc_radix_cache_stats(c->rc, out));
  /* The component's tables, at their capacity. */
  out->bytes += (int64_t)(3 * ((size_t)c->size + 1) * sizeof(int32_t));
  return KVC_OK;
}

kvc_status kvc_mamba_radix_cache_check(const kvc_mamba_radix_cache *c) {
  MAMBA_RADIX_ENTRY(c);
  const kvc_radix_cache *rc = c->rc;
  const char *fn = __func__;
  int64_t st = 0, pr = 0;
  for (int32_t i = 1; i < rc->nodes_used; i++) {
    const rx_node *n = &rc->nodes[i];
    if (!n->seg) continue;
    if (n->mamba_lock < 0 || n->mamba_lock > rc->hot[i].lock_ref)
      return kvc__error(c->ctx, KVC_ERR_INTERNAL, fn, "node %d: MAMBA lock %d, FULL lock %d", i, n->mamba_lock,
                        rc->hot[i].lock_ref);
    const int32_t s = n->mamba_slot;
    if (!s) continue;
    if (s < 1 || s > c->size || c->owner[s] != i || !kvc_mamba_pool_is_held(c->pool, s))
      return kvc__error(c->ctx, KVC_ERR_INTERNAL, fn, "node %d: state %d not owned once / not held", i, s);
    st++;
    pr += n->mamba_lock > 0;
  }
  if (rc->nodes[0].mamba_slot || rc->nodes[0].mamba_lock)
    return kvc__error(c->ctx, KVC_ERR_INTERNAL, fn, "the root holds Mamba state");
  if (st != c->states || pr != c->protected_states)
    return kvc__error(c->ctx, KVC_ERR_INTERNAL, fn, "Mamba sizes: states %lld/%lld, protected %lld/%lld", (long long)st,
                      (long long)c->states, (long long)pr, (long long)c->protected_states);
  int64_t k = 0, owned = 0;
  for (int32_t s = c->head, p = 0; s; p = s, s = c->next[s]) {
    if (++k > c->states || c->prev[s] != p || !c->owner[s] || rc->nodes[c->owner[s]].mamba_slot != s ||
        (!c->next[s] && c->tail != s))
      return kvc__error(c->ctx, KVC_ERR_INTERNAL, fn, "Mamba LRU list broken at state %d", s);
  }
  for (int32_t s = 1; s <= c->size; s++) owned += c->owner[s] != 0;
  if (k != c->states || owned != c->states || (!k && (c->head || c->tail)))
    return kvc__error(c->ctx, KVC_ERR_INTERNAL, fn, "Mamba LRU list holds %lld of %lld states (%lld owned)",
                      (long long)k, (long long)c->states, (long long)owned);
  return kvc__rx_audit(rc, fn);
}

/* --- kvc_prefix_cache adapter -------------------------------------------------------------- */

static kvc_status pc_evict(void *self, kvc_flow *flow, int64_t n, int64_t swa_n, int64_t mamba_n) {
  (void)swa_n;
  /* Under pressure the flow asks for what it lacks: what nothing can give is its call. */
  kvc_status st = kvc_mamba_radix_cache_evict(self, flow, n, mamba_n, NULL, NULL);
  return st == KVC_ERR_OUT_OF_SLOTS ? KVC_OK : st;
}
static int64_t pc_evictable(void *self) { return ((kvc_mamba_radix_cache *)self)->rc->evictable; }
static int64_t pc_protected(void *self) { return ((kvc_mamba_radix_cache *)self)->rc->protected_; }
static int64_t pc_cached(void *self) {
  const kvc_radix_cache *rc = ((kvc_mamba_radix_cache *)self)->rc;
  return rc->evictable + rc->protected_;
}
static kvc_status pc_finished(void *self, kvc_flow *flow, kvc_req_state *req, int is_insert) {
  return kvc_mamba_radix_cache_cache_finished_req(self, flow, req, is_insert);
}
static kvc_status pc_unfinished(void *self, kvc_flow *flow, kvc_req_state *req) {
  return kvc_mamba_radix_cache_cache_unfinished_req(self, flow, req);
}
static void pc_inc(void *self, void *node) {
  kvc_mamba_radix_cache *c = self;
  if (kvc_mamba_radix_cache_lock(c, node) != KVC_OK) kvc__log(c->ctx, KVC_LOG_WARN, "%s", kvc_last_error(c->ctx));
}
static void pc_dec(void *self, void *node) {
  kvc_mamba_radix_cache *c = self;
  if (kvc_mamba_radix_cache_unlock(c, node) != KVC_OK) kvc__log(c->ctx, KVC_LOG_WARN, "%s", kvc_last_error(c->ctx));
}

kvc_prefix_cache kvc_mamba_radix_cache_as_prefix_cache(kvc_mamba_radix_cache *c) {
  kvc_prefix_cache p;
  memset(&p, 0, sizeof p);
  p.self = c;
  p.is_chunk_cache = kvc__rx_pc_false;
  p.supports_mamba = kvc__rx_pc_true;
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
