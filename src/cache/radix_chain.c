/*
 * radix_chain.c — the full-attention eviction of the component caches (SWA and Mamba):
 * a victim leaf goes, and with it every unlocked childless ancestor that holds nothing of
 * the component (SGLang's _iteratively_delete_tombstone_leaf after each leaf eviction, in
 * both its SWARadixCache and MambaRadixCache: no leaf is left a tombstone, or without a
 * state). One loop for both caches; each passes its "holds nothing" test.
 */
#include "radix.h"

kvc_status kvc__rx_free_node(kvc_radix_cache *rc, kvc_flow *flow, int32_t x) {
  rx_free_path fp = {rc, flow};
  return kvc__rx_free_through(&fp, rx_vals(&rc->nodes[x]), (size_t)rc->hot[x].len);
}

kvc_status kvc__rx_drop_bare_chain(kvc_radix_cache *rc, kvc_flow *flow, int32_t x, rx_bare_fn bare,
                                   int64_t *full_done) {
  while (x > 0 && rc->hot[x].nchild == 0 && rc->hot[x].lock_ref == 0 && bare(&rc->nodes[x])) {
    const int32_t parent = rc->hot[x].parent, len = rc->hot[x].len;
    KVC_FORWARD(kvc__rx_free_node(rc, flow, x));
    kvc__rx_delete_leaf(rc, x);
    *full_done += len;
    x = parent;
  }
  return KVC_OK;
}

kvc_status kvc__rx_evict_full_chains(kvc_radix_cache *rc, kvc_flow *flow, int64_t n, rx_bare_fn bare,
                                     int64_t *full_done) {
  kvc_status st = KVC_OK;
  while (*full_done < n && rc->heap_len > 0 && st == KVC_OK) {
    const int32_t x = rc->heap[0], len = rc->hot[x].len, parent = rc->hot[x].parent;
    st = kvc__rx_free_node(rc, flow, x);
    if (st != KVC_OK) break; /* the victim stays: its free changed nothing */
    *full_done += len;
    kvc__rx_delete_leaf(rc, x); /* a component's delete hook (Mamba) frees what it holds */
    st = kvc__rx_drop_bare_chain(rc, flow, parent, bare, full_done);
  }
  return st;
}
