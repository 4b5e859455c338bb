/*
 * radix.h — internal state of a kvc_radix_cache (SGLang RadixCache), shared by
 * radix_tree.c (the tree: nodes, children, match, insert, split, locks, eviction order),
 * radix_held.c (the held-page bitmap), radix_cache.c (the public calls and the request-level checkpoints), radix_events.c
 * (KV events and block hashes) and radix_chain.c (the SWA and Mamba caches' full eviction).
 *
 * Layout, chosen for the memory bound (<= 16 bytes per cached token + 128 per node):
 *   - nodes live in one array indexed by int32 id (id 0 is the root), with a free list;
 *   - keys (int32 tokens) and values (int64 slots) live in refcounted segments, one per
 *     insert: a split does not copy, the upper and lower node both point into the
 *     segment, and a match whose path lies in one segment run returns its values without
 *     a copy (they never move while a node referencing them exists);
 *   - children are found through one open-addressing table keyed by (parent, namespace,
 *     first page); siblings are also linked so that a node's children can be listed;
 *   - evictable leaves sit in an indexed binary heap ordered by the policy's key, kept up
 *     to date on every change, so eviction never rebuilds anything.
 */
#ifndef KVC_RADIX_H
#define KVC_RADIX_H

#include "../core/core.h"

#define KVC__RADIX_MAGIC 0x6b76632d72616478ull /* "kvc-radx" */
#define RX_NONE (-1)

/* A segment: header, then int64 vals[len], then int32 keys[len]. */
typedef struct rx_seg {
  int64_t refs; /* nodes pointing into it */
  int64_t len;
} rx_seg;

/* Host bytes of a segment of n tokens, with the allocator's per-block overhead (the
 * core's size header and malloc's chunk header, 32 bytes counted). */
static inline int64_t kvc__rx_seg_bytes(int64_t n) { return (int64_t)sizeof(rx_seg) + 12 * n + 32; }

static inline int64_t *rx_seg_vals(rx_seg *s) { return (int64_t *)(s + 1); }
static inline int32_t *rx_seg_keys(rx_seg *s) { return (int32_t *)(rx_seg_vals(s) + s->len); }

/* The fields lock / unlock walk, apart from the rest of the node: 16 bytes, four nodes
 * per cache line, indexed by the same id. A 32-node lock + unlock is a chain of 64
 * dependent loads; a short power-of-two stride keeps each step one load and one shift
 * (the 104-byte node cost an imul per step) and a cold path fewer lines. */
typedef struct rx_hot {
  int32_t parent, lock_ref, len, nchild;
} rx_hot;

typedef struct rx_node {
  int32_t heap_pos;  /* index in the eviction heap, RX_NONE when not an evictable leaf */
  int32_t off;       /* [off, off + len) of the segment */
  int64_t run_first; /* the values are run_first, run_first + 1, ... (one run of slots, as
                         allocators mostly hand them out), or -1: eviction then clears the
                         held bits without reading the (cold) values */
  rx_seg *seg;       /* NULL for the root and for free nodes */
  uint64_t access;   /* logical clock of the last access (SGLang last_access_time) */
  uint64_t creation; /* logical clock at creation (SGLang creation_time) */
  int32_t hit_count, priority;
  int32_t first_child, next_sib, prev_sib;
  uint32_t serial;    /* generation: part of the public handle, new on every reuse */
  uint64_t ns;        /* namespace (extra_key / cache_salt id), inherited from the parent */
  uint64_t child_h;   /* its child-index hash (parent, namespace, first page) */
  uint64_t last_hash; /* block hash of the node's last page (KV events only) */
  /* The SWA component (swa_radix.c; 0 in a full-attention cache): swa_lock is the
   * node's SWA lock count, or RX_SWA_TOMB when its SWA slots are gone while its full
   * ones stay; swa_uuid marks where an SWA lock walk stopped (0 = none). */
  int32_t swa_lock;
  uint32_t swa_uuid;
  /* The Mamba component (mamba_radix.c; 0 in other trees): the node's state slot (0 =
   * none) and MAMBA lock count. node_new zeroes both, so a split's new upper node has
   * neither: the state stays with the lower node, which keeps its id. */
  int32_t mamba_slot, mamba_lock;
} rx_node;

#define RX_SWA_TOMB (-1)

/* One entry of the child table. child RX_NONE = empty. */
typedef struct rx_slot {
  uint64_t h;
  int32_t parent, child;
} rx_slot;

struct kvc_radix_cache {
  uint64_t magic;
  kvc_context *ctx;
  kvc_radix_cache_config cfg;
  int64_t ps;
  int32_t ps_shift; /* log2(ps) when ps is a power of two, else -1 */
  int64_t top_slot; /* largest valid slot id: num_slots + ps - 1 (a paged allocator's last page) */
  /* nodes */
  rx_node *nodes;
  rx_hot *hot;                   /* parallel to nodes */
  int32_t nodes_cap, nodes_used; /* used = high-water mark of ids handed out */
  int32_t free_head;             /* free node ids chained through next_sib */
  int32_t live_nodes;            /* root included */
  uint32_t serial_next;
  /* child table (power of two) */
  rx_slot *table;
  size_t table_cap, table_used;
  /* eviction heap of node ids */
  int32_t *heap;
  int32_t heap_len, heap_cap;
  /* sizes (tokens) */
  int64_t evictable, protected_, seg_bytes;
  uint64_t clock;
  /* pages the tree holds: one byte per page id in [0, top_slot / ps] (radix_held.c says
   * why a byte, not a bit); all zero while `bound` */
  uint8_t *held;
  /* The TOKEN allocator whose page states carry the held marks instead
   * (kvc_radix_cache_bind_allocator; page size 1), NULL none: the marks are then one
   * state bit per slot (alloc.h, KVC__PG_CACHED) and an eviction frees its victims
   * through kvc__alloc_free_cached, which clears them. */
  kvc_allocator *bound;
  /* scratch: path node ids, a slot vector, duplicate slots to free */
  int32_t *path;
  size_t path_cap;
  int64_t *vec;
  size_t vec_cap;
  int64_t *dups;
  size_t dups_cap;
  int32_t *tok_scratch;
  size_t tok_cap;
  uint64_t *ev_hashes; /* KV events: page hashes of a removed node */
  size_t ev_cap;
  bool events_on;
  bool check; /* check mode: audit after every mutating call */
  /* SWA component sizes (tokens): cached with live SWA slots, and SWA-locked of those.
   * Kept by insert_leaf / delete_leaf for every tree (one add each), read only by
   * swa_radix.c. */
  int64_t swa_live, swa_protected;
  /* Component hook (mamba_radix.c; NULL otherwise): kvc__rx_delete_leaf calls it for a
   * node that holds a Mamba state, before the node goes. */
  void (*on_delete_state)(void *user, int32_t id);
  void *comp_user;
};

/* --- radix_tree.c ------------------------------------------------------------------- */

kvc_status kvc__rx_init(kvc_radix_cache *rc);
void kvc__rx_fini(kvc_radix_cache *rc);
/** Drops every node (no slot is freed); the root gets a new serial. */
kvc_status kvc__rx_clear(kvc_radix_cache *rc);

static inline int64_t *rx_vals(const rx_node *n) { return rx_seg_vals(n->seg) + n->off; }
static inline int32_t *rx_keys(const rx_node *n) { return rx_seg_keys(n->seg) + n->off; }
/* The page of a slot: a shift for power-of-two page sizes (a division costs ~25 cycles,
 * and duplicate checks take one per slot). */
static inline int64_t rx_page(const kvc_radix_cache *rc, int64_t s) {
  return rc->ps_shift >= 0 ? s >> rc->ps_shift : s / rc->ps;
}
/* The held map has one byte per page: the tree holds whole pages. */
static inline bool rx_slot_held(const kvc_radix_cache *rc, int64_t s) { return rc->held[rx_page(rc, s)] != 0; }
static inline size_t rx_held_bytes(const kvc_radix_cache *rc) { return (size_t)(rc->top_slot / rc->ps) + 1; }

/** Marks the pages of slots[0:n) (n a multiple of the page size) held: with page_size > 1
 *  a range at a time along runs of consecutive slots, at page 1 a slot at a time (the
 *  status as the run path would give it). With page_size > 1 every page must be one
 *  allocator page: its first slot page-aligned, the others consecutive. Returns KVC_OK,
 *  or, having marked nothing, the status for the run holding the first bad slot (its
 *  start in *bad): INVALID_ARGUMENT (outside [1, num_slots] or not whole pages) or
 *  MISUSE (already held, or repeated). *run_first (may be NULL) is slots[0] when the n
 *  slots are one run of consecutive ids, else -1 (a node's run_first, found here without
 *  another pass over the values). */
kvc_status kvc__rx_mark(kvc_radix_cache *rc, const int64_t *slots, int64_t n, int64_t *bad, int64_t *run_first);
/** Clears the held marks of the pages of slots[0:n) (all marked). */
void kvc__rx_unmark(kvc_radix_cache *rc, const int64_t *slots, int64_t n);
/** Clears the held marks of every node's slots (a reset or destroy of a bound cache: the
 *  slots stay handed out). */
void kvc__rx_unmark_all(kvc_radix_cache *rc);
/** Clears the held marks of the pages of the slot run [first_slot, last_slot]. */
void kvc__rx_clear_pages(kvc_radix_cache *rc, int64_t first_slot, int64_t last_slot);
/** End of the run of consecutive page ids starting at page k of s (np pages of ps slots;
 *  ps 1: consecutive slots). */
int64_t kvc__rx_run_end(const int64_t *s, int64_t k, int64_t np, int64_t ps);

/** Grows the scratch arrays for keys of up to n tokens. */
kvc_status kvc__rx_reserve(kvc_radix_cache *rc, const char *fn, size_t n);

/** Matches keys[0:n) (already page-floored) in namespace ns: *matched tokens, *node the
 *  last node (0 = root), rc->path[0:*depth) the nodes from the root's child down. Splits
 *  and stamps as SGLang's _match_prefix_helper. Fails (HOST_OOM) only before changing
 *  anything. */
kvc_status kvc__rx_match(kvc_radix_cache *rc, uint64_t ns, const int32_t *keys, int64_t n, int64_t *matched,
                         int32_t *node, size_t *depth);
/** A node the walk entered, as it was before the walk stamped it: its id (where the walk
 *  split a node, the node split, now the lower part) and its access tick. */
typedef struct kvc__rx_visit {
  uint64_t access;
  int64_t id;
} kvc__rx_visit;
/** kvc__rx_match that also fills seen[0:*depth) (room for n / page_size entries): what a
 *  separate walk before the match would have read, without walking the keys twice (the
 *  SWA tree restores the ticks of the nodes past its valid end from it). */
kvc_status kvc__rx_match_seen(kvc_radix_cache *rc, uint64_t ns, const int32_t *keys, int64_t n, int64_t *matched,
                              int32_t *node, size_t *depth, kvc__rx_visit *seen);
/** The values of rc->path[0:depth): a pointer into the tree when they are contiguous,
 *  else copied into buf (or rc->vec when buf is NULL). */
const int64_t *kvc__rx_path_values(kvc_radix_cache *rc, size_t depth, int64_t total, int64_t *buf, int *copied);

/** Nodes a call creates at most: a split and a new leaf. Reserve before mutating. */
kvc_status kvc__rx_reserve_nodes(kvc_radix_cache *rc, const char *fn, int32_t n);

/** Slots to free must be in range and not the tree's: KVC_OK, or the status for the
 *  first bad one (index in *bad). Runs of consecutive ids are checked a word at a time. */
kvc_status kvc__rx_check_free(const kvc_radix_cache *rc, const int64_t *slots, int64_t n, int64_t *bad);
/** A new segment holding keys/vals[0:n) (refs 1). NULL on HOST_OOM. */
rx_seg *kvc__rx_seg_new(kvc_radix_cache *rc, const int32_t *keys, const int64_t *vals, int64_t n);
/** A new segment holding keys[0:n), its values left for the caller to write. NULL on
 *  HOST_OOM. */
rx_seg *kvc__rx_seg_keys(kvc_radix_cache *rc, const int32_t *keys, int64_t n);
/** Frees a segment no node points to (an insert that failed after allocating it). */
void kvc__rx_seg_drop(kvc_radix_cache *rc, rx_seg *s);
/** The dry run of an insert's walk, over keys only: returns the tokens of keys[0:n) already present and
 *  leaves the nodes holding them in rc->path[0:*depth) (the last one possibly covered in
 *  part). Changes nothing. */
int64_t kvc__rx_probe_path(kvc_radix_cache *rc, uint64_t ns, const int32_t *keys, int64_t n, size_t *depth);
/** The slots of vals[from:prefix) that differ from the tree's along that path, into dups;
 *  returns their count (the caller frees them: SGLang never overwrites a cached value). */
size_t kvc__rx_path_dups(const kvc_radix_cache *rc, size_t depth, int64_t prefix, const int64_t *vals, int64_t from,
                         int64_t *dups);
/** What an insert's apply writes: keys[0:n) of namespace ns with their priority, the
 *  request's inserted_len (hits count only past it) and the new leaf, leaf_seg (the tokens
 *  past the present prefix; NULL when there are none) whose run_first is leaf_run (from
 *  kvc__rx_mark). *node gets the last node; the path's nodes are left in rc->path[0:*depth)
 *  (depth may be NULL). */
typedef struct rx_apply_args {
  uint64_t ns;
  const int32_t *keys;
  int64_t n;
  int32_t priority;
  int64_t inserted_len;
  rx_seg *leaf_seg;
  int64_t leaf_run;
  int32_t *node;
  size_t *depth;
} rx_apply_args;
/** SGLang _insert_helper, after kvc__rx_reserve_nodes(rc, 2): stamps and raises the
 *  priority of the path, splits, counts hits past inserted_len, and hangs the leaf.
 *  Cannot fail. */
void kvc__rx_apply_insert_with(kvc_radix_cache *rc, const rx_apply_args *a);
/** kvc__rx_apply_insert_with along the path kvc__rx_probe_path left in rc->path[0:probed)
 *  (prefix tokens present; the tree unchanged since), without walking the keys again. */
void kvc__rx_apply_path(kvc_radix_cache *rc, const rx_apply_args *a, int64_t prefix, size_t probed);
/** SGLang's re-match after an insert of the same key: stamps the root and rc->path[0:depth)
 *  (the insert's path, ending on a node boundary, so the walk would split nothing) with
 *  one new tick, without walking the keys again. */
void kvc__rx_touch_path(kvc_radix_cache *rc, size_t depth);

/** Handle <-> node id (generation-checked). */
void *kvc__rx_handle(const kvc_radix_cache *rc, int32_t id);
bool kvc__rx_from_handle(const kvc_radix_cache *rc, const void *h, int32_t *id);

/** SGLang _split_node at p tokens of node c (a reserved node): returns the new upper node. */
int32_t kvc__rx_split(kvc_radix_cache *rc, int32_t c, int32_t p);
/** Deletes unlocked childless node id (its slots already freed): events, held bits (a
 *  bound cache's free cleared them already), sizes, and the parent's leaf status. */
void kvc__rx_delete_leaf(kvc_radix_cache *rc, int32_t id);

/** O(n) audit: sizes, heap, table, held bits. */
kvc_status kvc__rx_audit(const kvc_radix_cache *rc, const char *fn);
/** Approximate host bytes (capacity of every array + segments). */
size_t kvc__rx_bytes(const kvc_radix_cache *rc);

/* --- radix_evict.c ------------------------------------------------------------------ */

/** Restores heap order around heap member id after its policy key changed. */
void kvc__rx_heap_sift(kvc_radix_cache *rc, int32_t id);
/** Inline so that the walks pay no call for the inner nodes on their path, which are
 *  never in the heap (only unlocked leaves are). */
static inline void kvc__rx_heap_fix(kvc_radix_cache *rc, int32_t id) {
  if (rc->nodes[id].heap_pos != RX_NONE) kvc__rx_heap_sift(rc, id);
}
void kvc__rx_heap_remove(kvc_radix_cache *rc, int32_t id);
/** SGLang _update_leaf_status: puts id in the heap or takes it out as it is or stops
 *  being an unlocked childless node (the root never is). */
void kvc__rx_leaf_update(kvc_radix_cache *rc, int32_t id);
/** The heap-order part of kvc__rx_audit. */
kvc_status kvc__rx_heap_audit(const kvc_radix_cache *rc, const char *fn);

/** inc/dec lock from id to the root (root excluded). dec fails (nothing changed) when a
 *  node on the path is unlocked. */
void kvc__rx_lock(kvc_radix_cache *rc, int32_t id);
kvc_status kvc__rx_unlock(kvc_radix_cache *rc, int32_t id, const char *fn);

/** Evicts leaves in policy order until >= n tokens; frees their slots with free_fn. */
typedef kvc_status (*rx_free_fn)(void *user, const int64_t *slots, size_t n);
kvc_status kvc__rx_evict(kvc_radix_cache *rc, int64_t n, rx_free_fn free_fn, void *user, int64_t *evicted);

/* --- radix_cache.c (shared with the SWA and Mamba caches) ----------------------------- */

/* Frees slots through the flow, else the config's hook. */
typedef struct rx_free_path {
  kvc_radix_cache *rc;
  kvc_flow *flow;
} rx_free_path;
kvc_status kvc__rx_free_through(void *user, const int64_t *slots, size_t n);
bool kvc__rx_can_free(const kvc_radix_cache *rc, const kvc_flow *flow);

/* Where a checkpoint's values come from: row `row` of the flow's request-to-token mirror
 * (rx_insert_args.src is NULL instead when the caller passes the values). */
typedef struct rx_row_src {
  const kvc_flow *flow;
  int32_t row;
} rx_row_src;
/** An insert's inputs: keys[0:n) of namespace ns, their slots from vals or (a checkpoint)
 *  from src, the first `from` already the tree's, priority and the request's inserted_len;
 *  extra: nodes the caller needs reserved after it (a prompt split, SWA revival). Outputs:
 *  *prefix the tokens found present, *node the last node, *ndups the duplicates freed and
 *  *depth the path's length in rc->path (ndups and depth may be NULL). */
typedef struct rx_insert_args {
  uint64_t ns;
  const int32_t *keys;
  const int64_t *vals;
  const rx_row_src *src;
  int64_t from;
  int64_t n;
  int32_t priority;
  int64_t inserted_len;
  int32_t extra;
  int64_t *prefix;
  int32_t *node;
  size_t *ndups;
  size_t *depth;
} rx_insert_args;
/** The whole insert (validate, reserve 2 + extra nodes, free duplicates, apply); on
 *  failure nothing changed. See radix_cache.c. */
kvc_status kvc__rx_insert_with(kvc_radix_cache *rc, kvc_flow *flow, const char *fn, const rx_insert_args *a);
/** kvc__rx_insert_with of a request's key rr->tokens[0:key_len) (key_len > 0) with the
 *  slots of its row, [0, cache_protected_len) the tree's already (SGLang frees the
 *  duplicates from there): what the full-attention and Mamba checkpoints insert. On
 *  success rr->inserted_len covers key_len. ndups and depth may be NULL. */
kvc_status kvc__rx_insert_req(kvc_radix_cache *rc, kvc_flow *flow, const char *fn, const kvc_req_state *req,
                              kvc_radix_req *rr, int64_t key_len, int32_t extra, int32_t *node, size_t *ndups,
                              size_t *depth);
/** A checkpoint's write-back after its insert freed duplicates: the values of the path
 *  rc->path[0:depth) (key_len tokens) from `from` on go into the request's row where the
 *  request's own slots were (SGLang's re-match and req_to_token write). */
kvc_status kvc__rx_write_path(kvc_radix_cache *rc, kvc_flow *flow, const kvc_req_state *req, size_t depth, int64_t from,
                              int64_t key_len);
/** Frees row[from, to) of the flow's request-to-token mirror through the flow (nothing
 *  when to <= from). */
kvc_status kvc__rx_free_row(kvc_radix_cache *rc, kvc_flow *flow, int32_t row, int64_t from, int64_t to);
/** What both checkpoints validate of a request; *old its locked node (0 = none). */
kvc_status kvc__rx_req_check(kvc_radix_cache *rc, kvc_flow *flow, const kvc_req_state *req, const char *fn,
                             int32_t *old);
/** Checks the key of a request and reserves scratch for key_len tokens. */
kvc_status kvc__rx_req_key(kvc_radix_cache *rc, const kvc_radix_req *rr, int32_t old, int64_t key_len, const char *fn);
/** The request's kvc_radix_req (config.req_of), NULL with *st set when there is none. */
kvc_radix_req *kvc__rx_req_of(kvc_radix_cache *rc, const kvc_req_state *req, const char *fn, kvc_status *st);

/** Constant callbacks of the kvc_prefix_cache adapters (is_chunk_cache, supports_mamba). */
int kvc__rx_pc_false(void *self);
int kvc__rx_pc_true(void *self);

/* --- radix_chain.c (the SWA and Mamba caches' full eviction) ---------------------------- */

/** Frees node x's slots through the flow, else the config's hook (nothing else changes). */
kvc_status kvc__rx_free_node(kvc_radix_cache *rc, kvc_flow *flow, int32_t x);
/** A component's test of a node: true when it holds nothing of the component (an SWA
 *  tombstone, a node without a Mamba state), so that it goes once it is childless. */
typedef bool (*rx_bare_fn)(const rx_node *n);
/** Deletes the unlocked childless bare nodes from x upward, their slots freed and their
 *  tokens added to *full_done; stops at the first free that fails (that node stays). */
kvc_status kvc__rx_drop_bare_chain(kvc_radix_cache *rc, kvc_flow *flow, int32_t x, rx_bare_fn bare, int64_t *full_done);
/** Evicts unlocked leaves in the policy's order (the radix heap) until *full_done >= n,
 *  each with its bare childless ancestors (kvc__rx_drop_bare_chain). */
kvc_status kvc__rx_evict_full_chains(kvc_radix_cache *rc, kvc_flow *flow, int64_t n, rx_bare_fn bare,
                                     int64_t *full_done);

/* --- radix_events.c ----------------------------------------------------------------- */

/** BlockStored per page of a new node (computes its last_hash). */
void kvc__rx_event_stored(kvc_radix_cache *rc, int32_t id);
/** last_hash of a node created by a split (no event). */
void kvc__rx_event_split(kvc_radix_cache *rc, int32_t upper);
/** BlockRemoved for a node about to be deleted. */
void kvc__rx_event_removed(kvc_radix_cache *rc, int32_t id);
/** BlockRemoved of one component (kvc_radix_component) of node id's blocks. */
void kvc__rx_event_removed_as(kvc_radix_cache *rc, int32_t id, int32_t component);
void kvc__rx_event_cleared(kvc_radix_cache *rc);

#endif
