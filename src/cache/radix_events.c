/*
 * radix_events.c — KV events of kvc_radix_cache for external routers (SGLang events.py,
 * vLLM's BlockStored / BlockRemoved / AllBlocksCleared) and the default block hash.
 *
 * A page's hash chains from the previous page's (the parent node's last page for a
 * node's first page; the namespace for the first page of a root child). Each node keeps
 * only its last page's hash: BlockRemoved recomputes the node's page hashes from its
 * parent's, so the events cost no memory per token and nothing at all when off.
 *
 * The default hash is XXH3-64 from the system's xxhash.h (Debian libxxhash-dev), used
 * header-only (XXH_INLINE_ALL), so nothing is linked. Without the header the default
 * reports KVC_ERR_UNSUPPORTED and a caller's hash function still works.
 */
#include "radix.h"

#include <string.h>

#ifdef KVC_HAVE_XXHASH
#  define XXH_INLINE_ALL
#  include <xxhash.h>
#endif

kvc_status kvc_radix_block_hash_xxh3(void *user, uint64_t parent, int has_parent, uint64_t ns, const int32_t *tokens,
                                     int64_t n, uint64_t *out) {
  (void)user;
  if (!out || n < 0 || (n > 0 && !tokens)) return KVC_ERR_INVALID_ARGUMENT;
#ifdef KVC_HAVE_XXHASH
  *out = XXH3_64bits_withSeed(tokens, (size_t)n * sizeof *tokens, has_parent ? parent : ns);
  return KVC_OK;
#else
  (void)parent;
  (void)has_parent;
  (void)ns;
  return KVC_ERR_UNSUPPORTED;
#endif
}

static kvc_status page_hash(kvc_radix_cache *rc, uint64_t parent, int has_parent, uint64_t ns, const int32_t *tok,
                            uint64_t *out) {
  if (rc->cfg.block_hash) return rc->cfg.block_hash(rc->cfg.hash_user, parent, has_parent, ns, tok, rc->ps, out);
  return kvc_radix_block_hash_xxh3(NULL, parent, has_parent, ns, tok, rc->ps, out);
}

/* Hashes of node id's pages into rc->ev_hashes (grown); *n pages. Event emission cannot
 * fail the call that causes it, so a failure is logged and the event skipped. */
static bool node_hashes(kvc_radix_cache *rc, int32_t id, size_t *n) {
  const rx_node *x = &rc->nodes[id];
  const size_t pages = (size_t)(rc->hot[id].len / rc->ps);
  if (pages > rc->ev_cap) {
    uint64_t *h = kvc__malloc(rc->ctx, pages * sizeof *h);
    if (!h) {
      kvc__log(rc->ctx, KVC_LOG_WARN, "radix cache: KV event dropped (host memory for %zu hashes)", pages);
      return false;
    }
    kvc__free(rc->ctx, rc->ev_hashes);
    rc->ev_hashes = h;
    rc->ev_cap = pages;
  }
  const int32_t parent = rc->hot[id].parent;
  const int has_parent = parent != 0;
  uint64_t prev = has_parent ? rc->nodes[parent].last_hash : 0;
  const int32_t *k = rx_keys(x);
  for (size_t p = 0; p < pages; p++) {
    if (page_hash(rc, prev, has_parent || p > 0, x->ns, k + p * (size_t)rc->ps, &rc->ev_hashes[p]) != KVC_OK) {
      kvc__log(rc->ctx, KVC_LOG_WARN, "radix cache: KV event dropped (the block hash failed)");
      return false;
    }
    prev = rc->ev_hashes[p];
  }
  *n = pages;
  return true;
}

void kvc__rx_event_stored(kvc_radix_cache *rc, int32_t id) {
  size_t n;
  if (!node_hashes(rc, id, &n)) return;
  rx_node *x = &rc->nodes[id];
  x->last_hash = rc->ev_hashes[n - 1];
  const int32_t parent = rc->hot[id].parent;
  const uint64_t first_parent = parent != 0 ? rc->nodes[parent].last_hash : 0;
  for (size_t p = 0; p < n; p++) {
    kvc_radix_event e;
    memset(&e, 0, sizeof e);
    e.kind = KVC_RADIX_BLOCK_STORED;
    e.block_size = (int32_t)rc->ps;
    e.has_parent = parent != 0 || p > 0;
    e.parent_hash = p ? rc->ev_hashes[p - 1] : first_parent;
    e.block_hash = rc->ev_hashes[p];
    e.token_ids = rx_keys(x) + p * (size_t)rc->ps;
    e.ns = x->ns;
    rc->cfg.on_event(rc->cfg.event_user, &e);
  }
}

void kvc__rx_event_split(kvc_radix_cache *rc, int32_t upper) {
  size_t n;
  if (node_hashes(rc, upper, &n)) rc->nodes[upper].last_hash = rc->ev_hashes[n - 1];
}

void kvc__rx_event_removed(kvc_radix_cache *rc, int32_t id) { kvc__rx_event_removed_as(rc, id, 0); }

void kvc__rx_event_removed_as(kvc_radix_cache *rc, int32_t id, int32_t component) {
  size_t n;
  if (!node_hashes(rc, id, &n)) return;
  kvc_radix_event e;
  memset(&e, 0, sizeof e);
  e.kind = KVC_RADIX_BLOCK_REMOVED;
  e.component = component;
  e.block_size = (int32_t)rc->ps;
  e.block_hashes = rc->ev_hashes;
  e.num_hashes = n;
  e.ns = rc->nodes[id].ns;
  rc->cfg.on_event(rc->cfg.event_user, &e);
}

void kvc__rx_event_cleared(kvc_radix_cache *rc) {
  kvc_radix_event e;
  memset(&e, 0, sizeof e);
  e.kind = KVC_RADIX_ALL_BLOCKS_CLEARED;
  e.block_size = (int32_t)rc->ps;
  rc->cfg.on_event(rc->cfg.event_user, &e);
}
