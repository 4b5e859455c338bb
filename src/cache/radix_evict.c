/*
 * radix_evict.c — what the radix tree may evict and in which order: the eviction heap
 * over unlocked leaves (keyed by the configured policy), the lock references that take a
 * path out of it, and the evict loop (SGLang radix_cache.py's inc/dec_lock_ref, evict and
 * _update_leaf_status). The tree's structure lives in radix_tree.c.
 *
 * The heap has room for every node (kvc__rx_reserve_nodes), so nothing here can fail
 * except a caller's free hook.
 */
#include "radix.h"

/* --- Eviction order ------------------------------------------------------------------ */

/* The policy's key (compared lexicographically, smallest evicted first). Logical-clock
 * stamps are unique per call and per created node, so SGLang's heap never meets a tie
 * between two leaves; the id only makes the order total. */
static void policy_key(const kvc_radix_cache *rc, const rx_node *n, int64_t k[2]) {
  const int64_t acc = (int64_t)n->access, cre = (int64_t)n->creation;
  switch (rc->cfg.policy) {
  case KVC_RADIX_LFU: k[0] = n->hit_count, k[1] = acc; break;
  case KVC_RADIX_FIFO: k[0] = cre, k[1] = 0; break;
  case KVC_RADIX_MRU: k[0] = -acc, k[1] = 0; break;
  case KVC_RADIX_FILO: k[0] = -cre, k[1] = 0; break;
  case KVC_RADIX_PRIORITY: k[0] = n->priority, k[1] = acc; break;
  case KVC_RADIX_SLRU: k[0] = n->hit_count >= rc->cfg.slru_threshold, k[1] = acc; break;
  default: k[0] = acc, k[1] = 0; break;
  }
}

static bool before(const kvc_radix_cache *rc, int32_t a, int32_t b) {
  int64_t ka[2], kb[2];
  policy_key(rc, &rc->nodes[a], ka);
  policy_key(rc, &rc->nodes[b], kb);
  if (ka[0] != kb[0]) return ka[0] < kb[0];
  if (ka[1] != kb[1]) return ka[1] < kb[1];
  return a < b;
}

static void heap_set(kvc_radix_cache *rc, int32_t i, int32_t id) {
  rc->heap[i] = id;
  rc->nodes[id].heap_pos = i;
}

static void sift_up(kvc_radix_cache *rc, int32_t i) {
  int32_t id = rc->heap[i];
  while (i > 0) {
    int32_t p = (i - 1) / 2;
    if (!before(rc, id, rc->heap[p])) break;
    heap_set(rc, i, rc->heap[p]);
    i = p;
  }
  heap_set(rc, i, id);
}

static void sift_down(kvc_radix_cache *rc, int32_t i) {
  int32_t id = rc->heap[i];
  for (;;) {
    int32_t l = 2 * i + 1, m = i;
    int32_t best = id;
    if (l < rc->heap_len && before(rc, rc->heap[l], best)) m = l, best = rc->heap[l];
    if (l + 1 < rc->heap_len && before(rc, rc->heap[l + 1], best)) m = l + 1, best = rc->heap[l + 1];
    if (m == i) break;
    heap_set(rc, i, best);
    i = m;
  }
  heap_set(rc, i, id);
}

void kvc__rx_heap_sift(kvc_radix_cache *rc, int32_t id) {
  sift_up(rc, rc->nodes[id].heap_pos);
  sift_down(rc, rc->nodes[id].heap_pos);
}

void kvc__rx_heap_remove(kvc_radix_cache *rc, int32_t id) {
  int32_t i = rc->nodes[id].heap_pos;
  rc->nodes[id].heap_pos = RX_NONE;
  int32_t last = rc->heap[--rc->heap_len];
  if (i == rc->heap_len) return;
  heap_set(rc, i, last);
  sift_up(rc, i);
  sift_down(rc, rc->nodes[last].heap_pos);
}

/* SGLang _update_leaf_status: an evictable leaf is unlocked and childless. The heap has
 * room for every node (kvc__rx_reserve_nodes), so the push cannot fail. */
void kvc__rx_leaf_update(kvc_radix_cache *rc, int32_t id) {
  if (id == 0) return;
  const rx_hot *h = &rc->hot[id];
  rx_node *n = &rc->nodes[id];
  bool leaf = h->lock_ref == 0 && h->nchild == 0;
  if (leaf && n->heap_pos == RX_NONE) {
    heap_set(rc, rc->heap_len++, id);
    sift_up(rc, rc->heap_len - 1);
  } else if (!leaf && n->heap_pos != RX_NONE) {
    kvc__rx_heap_remove(rc, id);
  }
}

kvc_status kvc__rx_heap_audit(const kvc_radix_cache *rc, const char *fn) {
  for (int32_t i = 1; i < rc->heap_len; i++)
    if (before(rc, rc->heap[i], rc->heap[(i - 1) / 2]))
      return kvc__error(rc->ctx, KVC_ERR_INTERNAL, fn, "eviction heap order at %d", i);
  return KVC_OK;
}

/* --- Locks ----------------------------------------------------------------------------------- */

/* Only hot[] is read on the way up; a node's cold half is touched when it is a leaf that
 * leaves or rejoins the eviction heap (an unlocked childless node is always in it). The
 * size change is summed in a local: stores to rc inside the loop would be reloaded after
 * every store through hot[] (they may alias as far as the compiler knows). */
void kvc__rx_lock(kvc_radix_cache *rc, int32_t id) {
  rx_hot *hot = rc->hot;
  int64_t moved = 0;
  for (int32_t x = id; x > 0; x = hot[x].parent) {
    rx_hot *h = &hot[x];
    if (h->lock_ref++ == 0) {
      moved += h->len;
      if (h->nchild == 0 && rc->nodes[x].heap_pos != RX_NONE) kvc__rx_heap_remove(rc, x);
    }
  }
  rc->evictable -= moved;
  rc->protected_ += moved;
}

kvc_status kvc__rx_unlock(kvc_radix_cache *rc, int32_t id, const char *fn) {
  rx_hot *hot = rc->hot;
  /* Locks run from a node to the root, so no node is locked less than a descendant:
   * when this one is locked, its whole path is. */
  if (id > 0 && hot[id].lock_ref <= 0)
    return kvc__error(rc->ctx, KVC_ERR_MISUSE, fn, "lock of node %d released below zero (unlocked twice?)", id);
  int64_t moved = 0;
  for (int32_t x = id; x > 0; x = hot[x].parent) {
    rx_hot *h = &hot[x];
    if (--h->lock_ref == 0) {
      moved += h->len;
      if (h->nchild == 0) kvc__rx_leaf_update(rc, x);
    }
  }
  rc->evictable += moved;
  rc->protected_ -= moved;
  return KVC_OK;
}

/* --- Eviction -------------------------------------------------------------------------------- */

kvc_status kvc__rx_evict(kvc_radix_cache *rc, int64_t n, rx_free_fn free_fn, void *user, int64_t *evicted) {
  int64_t done = 0;
  kvc_status st = KVC_OK;
  while (done < n && rc->heap_len > 0) {
    int32_t x = rc->heap[0];
    const int32_t len = rc->hot[x].len;
    st = free_fn(user, rx_vals(&rc->nodes[x]), (size_t)len);
    if (st != KVC_OK) break; /* the victim stays: its free changed nothing */
    done += len;
    kvc__rx_delete_leaf(rc, x);
  }
  *evicted = done;
  return st;
}
