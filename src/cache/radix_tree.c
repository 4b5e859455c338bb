/*
 * radix_tree.c — the radix tree of kvc_radix_cache: the node store, the child index,
 * match, split, insert and leaf deletion (SGLang radix_cache.py's TreeNode,
 * _match_prefix_helper, _split_node, _insert_helper). The eviction heap, locks and the
 * evict loop are in radix_evict.c.
 *
 * Every fallible step (growing an array, allocating a segment) happens before the tree
 * changes, so the mutating walks below cannot fail half way: callers reserve first.
 */
#include "radix.h"
#include "../alloc/alloc.h"

#include <string.h>

/* A walk's stamp: LRU-like policies order the heap by it, so a leaf passed moves there. */
static void touch(kvc_radix_cache *rc, int32_t id, uint64_t t) {
  rc->nodes[id].access = t;
  kvc__rx_heap_fix(rc, id);
}

/* --- Child index ----------------------------------------------------------------------- */

/* Four independent multiply chains over the page, joined at the end: with one chain a
 * page-64 lookup waited on 64 dependent multiplies, for every node of a long match.
 * Every token still counts: siblings often share their first tokens (a chat template). */
static uint64_t child_hash(int32_t parent, uint64_t ns, const int32_t *k, int64_t ps) {
  const uint64_t m = 0x100000001b3ull;
  uint64_t h = ((uint64_t)(uint32_t)parent + 1) * 0x9e3779b97f4a7c15ull ^ ns * 0xc2b2ae3d27d4eb4full;
  uint64_t l1 = 0x27d4eb2f165667c5ull, l2 = 0x165667b19e3779f9ull, l3 = 0x85ebca77c2b2ae63ull;
  int64_t i = 0;
  for (; i + 4 <= ps; i += 4) {
    h = (h ^ (uint32_t)k[i]) * m;
    l1 = (l1 ^ (uint32_t)k[i + 1]) * m;
    l2 = (l2 ^ (uint32_t)k[i + 2]) * m;
    l3 = (l3 ^ (uint32_t)k[i + 3]) * m;
  }
  for (; i < ps; i++) h = (h ^ (uint32_t)k[i]) * m;
  h ^= (l1 << 16 | l1 >> 48) ^ (l2 << 32 | l2 >> 32) ^ (l3 << 48 | l3 >> 16);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 29);
}

static int32_t lookup_h(const kvc_radix_cache *rc, int32_t parent, uint64_t ns, const int32_t *k, uint64_t h) {
  const size_t mask = rc->table_cap - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const rx_slot *s = &rc->table[i];
    if (s->child == RX_NONE) return RX_NONE;
    if (s->h == h && s->parent == parent) {
      __builtin_prefetch(&rc->hot[s->child]); /* read next, with the node: two misses at once */
      const rx_node *c = &rc->nodes[s->child];
      if (c->ns == ns && memcmp(rx_keys(c), k, (size_t)rc->ps * sizeof *k) == 0) return s->child;
    }
  }
}

static int32_t lookup(const kvc_radix_cache *rc, int32_t parent, uint64_t ns, const int32_t *k) {
  return lookup_h(rc, parent, ns, k, child_hash(parent, ns, k, rc->ps));
}

static void table_put(kvc_radix_cache *rc, uint64_t h, int32_t parent, int32_t child) {
  const size_t mask = rc->table_cap - 1;
  size_t i = h & mask;
  while (rc->table[i].child != RX_NONE) i = (i + 1) & mask;
  rc->table[i] = (rx_slot){h, parent, child};
  rc->table_used++;
}

static size_t table_find(const kvc_radix_cache *rc, int32_t child) {
  const uint64_t h = rc->nodes[child].child_h; /* not rehashed: its keys are cold memory */
  const size_t mask = rc->table_cap - 1;
  size_t i = h & mask;
  while (rc->table[i].child != child) i = (i + 1) & mask; /* present by construction */
  return i;
}

/* Linear-probing delete with backward shift (no tombstones). */
static void table_del(kvc_radix_cache *rc, int32_t child) {
  const size_t mask = rc->table_cap - 1;
  size_t i = table_find(rc, child);
  for (size_t j = (i + 1) & mask;; j = (j + 1) & mask) {
    if (rc->table[j].child == RX_NONE) break;
    size_t home = rc->table[j].h & mask;
    /* j's entry may move to i when i lies cyclically in [home, j). */
    if (((j - home) & mask) >= ((j - i) & mask)) {
      rc->table[i] = rc->table[j];
      i = j;
    }
  }
  rc->table[i].child = RX_NONE;
  rc->table_used--;
}

static kvc_status table_grow(kvc_radix_cache *rc, size_t cap, const char *fn) {
  rx_slot *t = kvc__malloc(rc->ctx, cap * sizeof *t);
  if (!t) return kvc__error(rc->ctx, KVC_ERR_HOST_OOM, fn, "child index of %zu entries", cap);
  for (size_t i = 0; i < cap; i++) t[i].child = RX_NONE;
  rx_slot *old = rc->table;
  size_t old_cap = rc->table_cap;
  rc->table = t;
  rc->table_cap = cap;
  rc->table_used = 0;
  for (size_t i = 0; i < old_cap; i++)
    if (old[i].child != RX_NONE) table_put(rc, old[i].h, old[i].parent, old[i].child);
  kvc__free(rc->ctx, old);
  return KVC_OK;
}

/* --- Nodes ----------------------------------------------------------------------------- */

kvc_status kvc__rx_reserve_nodes(kvc_radix_cache *rc, const char *fn, int32_t k) {
  int32_t free_n = 0;
  for (int32_t f = rc->free_head; f != RX_NONE && free_n < k; f = rc->nodes[f].next_sib) free_n++;
  if (free_n < k && rc->nodes_used + (k - free_n) > rc->nodes_cap) {
    KVC_RETURN_IF(rc->nodes_cap > INT32_MAX / 2, rc->ctx, KVC_ERR_OUT_OF_SLOTS, "more than 2^30 radix nodes");
    int32_t cap = rc->nodes_cap * 2;
    rx_node *n = kvc__malloc(rc->ctx, (size_t)cap * sizeof *n);
    rx_hot *hot = kvc__malloc(rc->ctx, (size_t)cap * sizeof *hot);
    int32_t *heap = kvc__malloc(rc->ctx, (size_t)cap * sizeof *heap);
    if (!n || !hot || !heap) {
      kvc__free(rc->ctx, n);
      kvc__free(rc->ctx, hot);
      kvc__free(rc->ctx, heap);
      return kvc__error(rc->ctx, KVC_ERR_HOST_OOM, fn, "%d radix nodes", cap);
    }
    memcpy(n, rc->nodes, (size_t)rc->nodes_used * sizeof *n);
    memcpy(hot, rc->hot, (size_t)rc->nodes_used * sizeof *hot);
    memcpy(heap, rc->heap, (size_t)rc->heap_len * sizeof *heap);
    kvc__free(rc->ctx, rc->nodes);
    kvc__free(rc->ctx, rc->hot);
    kvc__free(rc->ctx, rc->heap);
    rc->nodes = n;
    rc->hot = hot;
    rc->heap = heap;
    rc->nodes_cap = rc->heap_cap = cap;
  }
  if ((rc->table_used + (size_t)k) * 2 > rc->table_cap) KVC_FORWARD(table_grow(rc, rc->table_cap * 2, fn));
  return KVC_OK;
}

static int32_t node_new(kvc_radix_cache *rc) {
  int32_t id = rc->free_head;
  if (id != RX_NONE) rc->free_head = rc->nodes[id].next_sib;
  else id = rc->nodes_used++;
  rx_node *n = &rc->nodes[id];
  memset(n, 0, sizeof *n);
  rc->hot[id] = (rx_hot){RX_NONE, 0, 0, 0};
  n->first_child = n->next_sib = n->prev_sib = n->heap_pos = RX_NONE;
  n->run_first = -1;
  if (++rc->serial_next == 0) rc->serial_next = 1;
  n->serial = rc->serial_next;
  rc->live_nodes++;
  return id;
}

static void node_release(kvc_radix_cache *rc, int32_t id) {
  rx_node *n = &rc->nodes[id];
  n->seg = NULL;
  n->serial = 0;
  n->next_sib = rc->free_head;
  rc->free_head = id;
  rc->live_nodes--;
}

static void sib_link(kvc_radix_cache *rc, int32_t parent, int32_t id) {
  rx_node *p = &rc->nodes[parent], *n = &rc->nodes[id];
  rc->hot[id].parent = parent;
  n->prev_sib = RX_NONE;
  n->next_sib = p->first_child;
  if (p->first_child != RX_NONE) rc->nodes[p->first_child].prev_sib = id;
  p->first_child = id;
  rc->hot[parent].nchild++;
}

static void sib_unlink(kvc_radix_cache *rc, int32_t id) {
  rx_node *n = &rc->nodes[id];
  const int32_t parent = rc->hot[id].parent;
  rx_node *p = &rc->nodes[parent];
  if (n->prev_sib != RX_NONE) rc->nodes[n->prev_sib].next_sib = n->next_sib;
  else p->first_child = n->next_sib;
  if (n->next_sib != RX_NONE) rc->nodes[n->next_sib].prev_sib = n->prev_sib;
  rc->hot[parent].nchild--;
}

void *kvc__rx_handle(const kvc_radix_cache *rc, int32_t id) {
  uint64_t h = ((uint64_t)rc->nodes[id].serial << 32) | (uint32_t)(id + 1);
  return (void *)(uintptr_t)h;
}

bool kvc__rx_from_handle(const kvc_radix_cache *rc, const void *handle, int32_t *id) {
  uint64_t h = (uint64_t)(uintptr_t)handle;
  int64_t i = (int64_t)(h & 0xffffffffu) - 1;
  uint32_t serial = (uint32_t)(h >> 32);
  if (i < 0 || i >= rc->nodes_used) return false;
  const rx_node *n = &rc->nodes[i];
  if (n->serial == 0 || n->serial != serial || (i != 0 && !n->seg)) return false;
  *id = (int32_t)i;
  return true;
}

_Static_assert(sizeof(void *) >= 8, "radix node handles need 64-bit pointers");

/* --- Init / clear ------------------------------------------------------------------------ */

static void root_make(kvc_radix_cache *rc) {
  rc->nodes_used = 0;
  rc->free_head = RX_NONE;
  rc->live_nodes = 0;
  int32_t r = node_new(rc);
  rx_node *root = &rc->nodes[r];
  rc->hot[r].lock_ref = 1; /* SGLang: the root is never evictable */
  root->priority = INT32_MIN;
  root->access = root->creation = ++rc->clock;
}

kvc_status kvc__rx_init(kvc_radix_cache *rc) {
  rc->nodes_cap = rc->heap_cap = 64;
  rc->table_cap = 128;
  rc->nodes = kvc__malloc(rc->ctx, (size_t)rc->nodes_cap * sizeof *rc->nodes);
  rc->hot = kvc__malloc(rc->ctx, (size_t)rc->nodes_cap * sizeof *rc->hot);
  rc->heap = kvc__malloc(rc->ctx, (size_t)rc->heap_cap * sizeof *rc->heap);
  rc->table = kvc__malloc(rc->ctx, rc->table_cap * sizeof *rc->table);
  rc->held = kvc__calloc(rc->ctx, rx_held_bytes(rc), 1);
  if (!rc->nodes || !rc->hot || !rc->heap || !rc->table || !rc->held) return KVC_ERR_HOST_OOM;
  for (size_t i = 0; i < rc->table_cap; i++) rc->table[i].child = RX_NONE;
  /* Serials start at a per-cache value so that one cache's handles fail in another, even
   * one created later at the same address (the clock differs). */
  const double now = kvc__now();
  const uintptr_t addr = (uintptr_t)rc;
  rc->serial_next = (uint32_t)kvc__hash(kvc__hash(KVC__HASH_SEED, &addr, sizeof addr), &now, sizeof now);
  root_make(rc);
  return KVC_OK;
}

static void seg_unref(kvc_radix_cache *rc, rx_seg *s) {
  if (--s->refs > 0) return;
  rc->seg_bytes -= kvc__rx_seg_bytes(s->len);
  kvc__free(rc->ctx, s);
}

static void free_segments(kvc_radix_cache *rc) {
  for (int32_t i = 1; i < rc->nodes_used; i++)
    if (rc->nodes[i].seg) seg_unref(rc, rc->nodes[i].seg);
}

void kvc__rx_fini(kvc_radix_cache *rc) {
  if (rc->nodes) free_segments(rc);
  kvc__free(rc->ctx, rc->nodes);
  kvc__free(rc->ctx, rc->hot);
  kvc__free(rc->ctx, rc->heap);
  kvc__free(rc->ctx, rc->table);
  kvc__free(rc->ctx, rc->held);
  kvc__free(rc->ctx, rc->path);
  kvc__free(rc->ctx, rc->vec);
  kvc__free(rc->ctx, rc->dups);
  kvc__free(rc->ctx, rc->tok_scratch);
  kvc__free(rc->ctx, rc->ev_hashes);
}

kvc_status kvc__rx_clear(kvc_radix_cache *rc) {
  if (rc->bound) kvc__rx_unmark_all(rc); /* the slots stay handed out, as unbound */
  free_segments(rc);
  for (size_t i = 0; i < rc->table_cap; i++) rc->table[i].child = RX_NONE;
  rc->table_used = 0;
  rc->heap_len = 0;
  rc->evictable = rc->protected_ = 0;
  rc->swa_live = rc->swa_protected = 0;
  memset(rc->held, 0, rx_held_bytes(rc));
  /* Old serials must not come back: they continue from serial_next. */
  for (int32_t i = 0; i < rc->nodes_used; i++) rc->nodes[i].serial = 0;
  root_make(rc);
  return KVC_OK;
}

kvc_status kvc__rx_reserve(kvc_radix_cache *rc, const char *fn, size_t n) {
  if (n + 1 > rc->path_cap) {
    int32_t *p = kvc__malloc(rc->ctx, (n + 1) * sizeof *p);
    KVC_RETURN_IF(!p, rc->ctx, KVC_ERR_HOST_OOM, "%s: path scratch of %zu", fn, n + 1);
    kvc__free(rc->ctx, rc->path);
    rc->path = p;
    rc->path_cap = n + 1;
  }
  if (n > rc->vec_cap) {
    int64_t *v = kvc__malloc(rc->ctx, n * sizeof *v), *d = kvc__malloc(rc->ctx, n * sizeof *d);
    int32_t *t = kvc__malloc(rc->ctx, n * sizeof *t);
    if (!v || !d || !t) {
      kvc__free(rc->ctx, v);
      kvc__free(rc->ctx, d);
      kvc__free(rc->ctx, t);
      return kvc__error(rc->ctx, KVC_ERR_HOST_OOM, fn, "scratch for %zu tokens", n);
    }
    kvc__free(rc->ctx, rc->vec);
    kvc__free(rc->ctx, rc->dups);
    kvc__free(rc->ctx, rc->tok_scratch);
    rc->vec = v;
    rc->dups = d;
    rc->tok_scratch = t;
    rc->vec_cap = rc->dups_cap = rc->tok_cap = n;
  }
  return KVC_OK;
}

/* --- Match and split ----------------------------------------------------------------------- */

/* Common prefix of a and b (n tokens at most), floored to whole pages. */
static int64_t common_pages(const int32_t *a, const int32_t *b, int64_t n, int64_t ps) {
  /* Mostly the whole node matches: one memcmp (a call per 16 tokens cost ~3 us per 8k). */
  if (memcmp(a, b, (size_t)n * sizeof *a) == 0) return n / ps * ps;
  int64_t i = 0;
  while (i + 256 <= n && memcmp(a + i, b + i, 256 * sizeof *a) == 0) i += 256;
  while (i + 16 <= n && memcmp(a + i, b + i, 16 * sizeof *a) == 0) i += 16;
  while (i < n && a[i] == b[i]) i++;
  return i / ps * ps;
}

/* Asks for the first lines of [p, p + bytes) ahead of their use. A match over a long
 * history reads keys and copies values from 20-35 segments that are cold by then, and
 * the hardware streams a segment only after its first misses: those are issued here,
 * together, and a node's values while its keys are compared. Only the head (512 bytes):
 * the stream prefetcher takes over from there, and on a warm tree a prefetch of every
 * line cost more than it saved (the 8-node match of 3584 tokens got slower). */
static void prefetch(const void *p, int64_t bytes) {
  const char *c = p, *end = c + KVC__MIN(bytes, 512);
  for (; c < end; c += 64) __builtin_prefetch(c, 0, 3);
}

/* A walk that has reached node c, whose keys it compares next, will look up c's child at
 * the tokens after c if all of c matches: its child-table slot is fetched now, so that miss
 * overlaps the compare of c's keys instead of following it. */
static uint64_t prefetch_next(const kvc_radix_cache *rc, int32_t c, uint64_t ns, const int32_t *after) {
  const uint64_t h = child_hash(c, ns, after, rc->ps);
  __builtin_prefetch(&rc->table[h & (rc->table_cap - 1)]);
  return h; /* the next lookup's hash */
}

/* SGLang _split_node: a new upper node takes child's first p tokens (the same segment,
 * no copy), its lock, hit count and priority; its access and creation times are a new
 * tick. Needs one reserved node and table entry. */
int32_t kvc__rx_split(kvc_radix_cache *rc, int32_t c, int32_t p) {
  int32_t u = node_new(rc);
  rx_node *C = &rc->nodes[c], *U = &rc->nodes[u];
  rx_hot *CH = &rc->hot[c], *UH = &rc->hot[u];
  U->seg = C->seg;
  U->seg->refs++;
  U->off = C->off;
  U->run_first = C->run_first;
  if (C->run_first >= 0) C->run_first += p;
  UH->len = p;
  U->ns = C->ns;
  UH->lock_ref = CH->lock_ref;
  U->hit_count = C->hit_count;
  U->priority = C->priority;
  U->access = U->creation = ++rc->clock;
  /* Both halves keep C's SWA state; an SWA lock that stopped at C stops at U now, the
   * node its walk up from below reaches last. */
  U->swa_lock = C->swa_lock;
  U->swa_uuid = C->swa_uuid;
  C->swa_uuid = 0;
  /* U takes C's place among the parent's children and in the index (same first page). */
  rc->table[table_find(rc, c)].child = u;
  UH->parent = CH->parent;
  U->prev_sib = C->prev_sib;
  U->next_sib = C->next_sib;
  if (U->prev_sib != RX_NONE) rc->nodes[U->prev_sib].next_sib = u;
  else rc->nodes[UH->parent].first_child = u;
  if (U->next_sib != RX_NONE) rc->nodes[U->next_sib].prev_sib = u;
  C->off += p;
  CH->len -= p;
  CH->parent = u;
  C->prev_sib = C->next_sib = RX_NONE;
  U->first_child = c;
  UH->nchild = 1;
  U->child_h = C->child_h; /* U's entry is C's old one (same first page) */
  C->child_h = child_hash(u, C->ns, rx_keys(C), rc->ps);
  table_put(rc, C->child_h, u, c);
  if (rc->events_on) kvc__rx_event_split(rc, u);
  return u;
}

/* Whether path node b continues a's values in the same segment (no copy across them). */
static bool adjacent(const kvc_radix_cache *rc, int32_t a, int32_t b) {
  const rx_node *A = &rc->nodes[a], *B = &rc->nodes[b];
  return B->seg == A->seg && B->off == A->off + rc->hot[a].len;
}

/* Inlined into both entries, so the plain match carries no test of `seen`. */
static inline __attribute__((always_inline)) kvc_status match_walk(kvc_radix_cache *rc, uint64_t ns,
                                                                   const int32_t *keys, int64_t n, int64_t *matched,
                                                                   int32_t *node, size_t *depth, kvc__rx_visit *seen) {
  KVC_FORWARD(kvc__rx_reserve_nodes(rc, "kvc_radix_cache_match_prefix", 1));
  const int64_t ps = rc->ps;
  const uint64_t t = ++rc->clock;
  rc->nodes[0].access = t;
  int32_t cur = 0;
  int64_t pos = 0;
  size_t d = 0;
  bool copy = false;                                    /* the values will be copied: fetch them ahead */
  uint64_t h = n > 0 ? child_hash(0, ns, keys, ps) : 0; /* n is whole pages */
  while (pos < n) {
    int32_t c = lookup_h(rc, cur, ns, keys + pos, h);
    if (c == RX_NONE) break;
    if (seen) seen[d] = (kvc__rx_visit){rc->nodes[c].access, c};
    touch(rc, c, t);
    const rx_node *C = &rc->nodes[c];
    const int64_t span = KVC__MIN((int64_t)rc->hot[c].len, n - pos);
    if (d > 0 && !copy && !adjacent(rc, rc->path[d - 1], c)) {
      copy = true;
      for (size_t i = 0; i < d; i++) prefetch(rx_vals(&rc->nodes[rc->path[i]]), (int64_t)rc->hot[rc->path[i]].len * 8);
    }
    if (copy) prefetch(rx_vals(C), span * 8);
    prefetch(rx_keys(C), span * 4);
    if (span == rc->hot[c].len && pos + span < n) h = prefetch_next(rc, c, ns, keys + pos + span);
    int64_t pl = common_pages(rx_keys(C), keys + pos, span, ps);
    if (pl < rc->hot[c].len) {
      cur = kvc__rx_split(rc, c, (int32_t)pl);
      rc->path[d++] = cur;
      pos += pl;
      break;
    }
    rc->path[d++] = c;
    pos += pl;
    cur = c;
  }
  *matched = pos;
  *node = cur;
  *depth = d;
  return KVC_OK;
}

kvc_status kvc__rx_match(kvc_radix_cache *rc, uint64_t ns, const int32_t *keys, int64_t n, int64_t *matched,
                         int32_t *node, size_t *depth) {
  return match_walk(rc, ns, keys, n, matched, node, depth, NULL);
}

kvc_status kvc__rx_match_seen(kvc_radix_cache *rc, uint64_t ns, const int32_t *keys, int64_t n, int64_t *matched,
                              int32_t *node, size_t *depth, kvc__rx_visit *seen) {
  return match_walk(rc, ns, keys, n, matched, node, depth, seen);
}

const int64_t *kvc__rx_path_values(kvc_radix_cache *rc, size_t depth, int64_t total, int64_t *buf, int *copied) {
  *copied = 0;
  if (depth == 0) return NULL;
  /* Without a copy when the path is one run of one segment (a split leaf, one insert). */
  bool run = true;
  for (size_t i = 1; i < depth && run; i++) run = adjacent(rc, rc->path[i - 1], rc->path[i]);
  if (run) return rx_vals(&rc->nodes[rc->path[0]]);
  int64_t *out = buf ? buf : rc->vec;
  int64_t at = 0;
  for (size_t i = 0; i < depth; i++) {
    const int32_t x = rc->path[i];
    memcpy(out + at, rx_vals(&rc->nodes[x]), (size_t)rc->hot[x].len * sizeof *out);
    at += rc->hot[x].len;
  }
  (void)total;
  *copied = 1;
  return out;
}

void kvc__rx_touch_path(kvc_radix_cache *rc, size_t depth) {
  const uint64_t t = ++rc->clock;
  rc->nodes[0].access = t;
  for (size_t i = 0; i < depth; i++) touch(rc, rc->path[i], t);
}

/* --- Insert ---------------------------------------------------------------------------------- */

int64_t kvc__rx_probe_path(kvc_radix_cache *rc, uint64_t ns, const int32_t *keys, int64_t n, size_t *depth) {
  const int64_t ps = rc->ps;
  int32_t cur = 0;
  int64_t pos = 0;
  size_t d = 0;
  uint64_t h = n > 0 ? child_hash(0, ns, keys, ps) : 0; /* n is whole pages */
  while (pos < n) {
    int32_t c = lookup_h(rc, cur, ns, keys + pos, h);
    if (c == RX_NONE) break;
    const int64_t len = rc->hot[c].len;
    if (pos + len < n) h = prefetch_next(rc, c, ns, keys + pos + len);
    int64_t pl = common_pages(rx_keys(&rc->nodes[c]), keys + pos, KVC__MIN(len, n - pos), ps);
    if (pl == 0) break;
    rc->path[d++] = c;
    pos += pl;
    if (pl < len) break;
    cur = c;
  }
  *depth = d;
  return pos;
}

size_t kvc__rx_path_dups(const kvc_radix_cache *rc, size_t depth, int64_t prefix, const int64_t *vals, int64_t from,
                         int64_t *dups) {
  size_t nd = 0;
  int64_t pos = 0;
  for (size_t k = 0; k < depth && pos < prefix; k++) {
    const int32_t c = rc->path[k];
    const int64_t end = KVC__MIN(pos + rc->hot[c].len, prefix);
    const int64_t *tv = rx_vals(&rc->nodes[c]) - pos; /* indexed by key position */
    for (int64_t i = KVC__MAX(pos, from); i < end; i++)
      if (vals[i] != tv[i]) dups[nd++] = vals[i];
    pos = end;
  }
  return nd;
}

/* One node of an insert's path, pl of its tokens matched (ending at pos + pl): stamped,
 * split when pl is short of it, its priority raised and its hit counted. Returns the
 * node now ending the matched part. */
static int32_t insert_visit(kvc_radix_cache *rc, int32_t c, int64_t pl, int64_t pos, uint64_t t, int32_t priority,
                            int64_t inserted_len) {
  rc->nodes[c].access = t;
  kvc__rx_heap_fix(rc, c); /* its key changed; a split below leaves it where it is */
  if (pl < rc->hot[c].len) c = kvc__rx_split(rc, c, (int32_t)pl);
  /* The priority goes to the part on the key's path only: the prompt's re-insert with
   * priority + 1 must leave the outputs' part below it evictable first. */
  if (priority > rc->nodes[c].priority) rc->nodes[c].priority = priority;
  /* A request counts each node once: only nodes ending past what it inserted before. */
  if (pos + pl > inserted_len) rc->nodes[c].hit_count++;
  kvc__rx_heap_fix(rc, c);
  return c;
}

static void insert_leaf(kvc_radix_cache *rc, const rx_apply_args *a, int64_t pos, int32_t *cur, size_t *d);

void kvc__rx_apply_path(kvc_radix_cache *rc, const rx_apply_args *a, int64_t prefix, size_t probed) {
  const uint64_t t = ++rc->clock;
  rc->nodes[0].access = t;
  const int32_t priority = a->priority;
  const int64_t inserted_len = a->inserted_len;
  int32_t cur = 0;
  int64_t pos = 0;
  size_t d = 0;
  for (; d < probed; d++) {
    const int32_t c = rc->path[d];
    const int64_t pl = KVC__MIN((int64_t)rc->hot[c].len, prefix - pos);
    const bool part = pl < rc->hot[c].len;
    cur = insert_visit(rc, c, pl, pos, t, priority, inserted_len);
    rc->path[d] = cur;
    pos += pl;
    if (part) {
      d++;
      break;
    }
  }
  insert_leaf(rc, a, pos, &cur, &d);
  *a->node = cur;
  if (a->depth) *a->depth = d;
}

void kvc__rx_apply_insert_with(kvc_radix_cache *rc, const rx_apply_args *a) {
  const int64_t ps = rc->ps, n = a->n;
  const uint64_t ns = a->ns;
  const int32_t *keys = a->keys;
  const int32_t priority = a->priority;
  const int64_t inserted_len = a->inserted_len;
  const uint64_t t = ++rc->clock;
  rx_node *root = &rc->nodes[0];
  root->access = t;
  int32_t cur = 0;
  int64_t pos = 0;
  size_t d = 0;
  while (pos < n) {
    int32_t c = lookup(rc, cur, ns, keys + pos);
    if (c == RX_NONE) break;
    const int64_t len = rc->hot[c].len;
    int64_t pl = common_pages(rx_keys(&rc->nodes[c]), keys + pos, KVC__MIN(len, n - pos), ps);
    cur = insert_visit(rc, c, pl, pos, t, priority, inserted_len);
    rc->path[d++] = cur;
    pos += pl;
    if (pl < len) break;
  }
  insert_leaf(rc, a, pos, &cur, &d);
  *a->node = cur;
  if (a->depth) *a->depth = d;
}

static void insert_leaf(kvc_radix_cache *rc, const rx_apply_args *a, int64_t pos, int32_t *cur_io, size_t *d) {
  const int64_t ps = rc->ps, n = a->n;
  int32_t cur = *cur_io;
  if (pos < n) {
    int32_t l = node_new(rc);
    rx_node *L = &rc->nodes[l];
    L->seg = a->leaf_seg;
    L->off = 0;
    rc->hot[l].len = (int32_t)(n - pos);
    L->run_first = a->leaf_run;
    L->ns = a->ns;
    L->priority = a->priority;
    L->hit_count = n > a->inserted_len;
    L->access = L->creation = ++rc->clock;
    sib_link(rc, cur, l);
    L->child_h = child_hash(cur, a->ns, rx_keys(L), ps);
    table_put(rc, L->child_h, cur, l);
    /* The caller marked the leaf's slots held when it validated them. */
    rc->evictable += n - pos;
    rc->swa_live += n - pos;
    kvc__rx_leaf_update(rc, cur);
    kvc__rx_leaf_update(rc, l);
    if (rc->events_on) kvc__rx_event_stored(rc, l);
    cur = l;
    rc->path[(*d)++] = cur;
  }
  *cur_io = cur;
}

/* --- Eviction -------------------------------------------------------------------------------- */

void kvc__rx_delete_leaf(kvc_radix_cache *rc, int32_t id) {
  rx_node *n = &rc->nodes[id];
  const int32_t parent = rc->hot[id].parent, len = rc->hot[id].len;
  if (rc->events_on) kvc__rx_event_removed(rc, id);
  if (n->mamba_slot && rc->on_delete_state) rc->on_delete_state(rc->comp_user, id);
  kvc__rx_heap_remove(rc, id);
  if (n->swa_lock != RX_SWA_TOMB) rc->swa_live -= len;
  if (rc->bound) { /* the victim's free (kvc__alloc_free_cached) cleared its marks */
  } else if (n->run_first >= 0) {
    kvc__rx_clear_pages(rc, n->run_first, n->run_first + len - 1);
  } else {
    kvc__rx_unmark(rc, rx_vals(n), len);
  }
  rc->evictable -= len;
  table_del(rc, id);
  sib_unlink(rc, id);
  seg_unref(rc, n->seg);
  node_release(rc, id);
  kvc__rx_leaf_update(rc, parent);
}

/* --- Audit and size ---------------------------------------------------------------------------- */

/* Held by the tree: its own byte, or for a bound cache a slot both the allocator and the
 * tree hold (exactly HELD | CACHED there). */
static bool audit_held(const kvc_radix_cache *rc, int64_t s) {
  if (!rc->bound) return rx_slot_held(rc, s);
  return s <= rc->bound->num_pages && rc->bound->state[s] == (KVC__PG_HELD | KVC__PG_CACHED);
}

kvc_status kvc__rx_audit(const kvc_radix_cache *rc, const char *fn) {
  int64_t ev = 0, pr = 0, live = 1, leaves = 0;
  int64_t held = 0;
  for (int32_t i = 1; i < rc->nodes_used; i++) {
    const rx_node *n = &rc->nodes[i];
    const rx_hot *h = &rc->hot[i];
    if (!n->seg) continue;
    live++;
    if (h->len <= 0 || h->len % rc->ps)
      return kvc__error(rc->ctx, KVC_ERR_INTERNAL, fn, "node %d has length %d", i, h->len);
    if (h->lock_ref < 0) return kvc__error(rc->ctx, KVC_ERR_INTERNAL, fn, "node %d lock %d", i, h->lock_ref);
    if (h->lock_ref) pr += h->len;
    else ev += h->len;
    const rx_node *p = &rc->nodes[h->parent];
    if (h->parent != 0 && !p->seg) return kvc__error(rc->ctx, KVC_ERR_INTERNAL, fn, "node %d: dead parent", i);
    if (h->parent != 0 && n->ns != p->ns) return kvc__error(rc->ctx, KVC_ERR_INTERNAL, fn, "node %d: namespace", i);
    if (h->lock_ref > rc->hot[h->parent].lock_ref && h->parent != 0)
      return kvc__error(rc->ctx, KVC_ERR_INTERNAL, fn, "node %d locked more than its parent", i);
    int32_t cnt = 0;
    for (int32_t c = n->first_child; c != RX_NONE; c = rc->nodes[c].next_sib) cnt++;
    if (cnt != h->nchild) return kvc__error(rc->ctx, KVC_ERR_INTERNAL, fn, "node %d child count", i);
    bool leaf = h->lock_ref == 0 && h->nchild == 0;
    leaves += leaf;
    if (leaf != (n->heap_pos != RX_NONE) || (leaf && rc->heap[n->heap_pos] != i))
      return kvc__error(rc->ctx, KVC_ERR_INTERNAL, fn, "node %d eviction heap membership", i);
    if (lookup(rc, h->parent, n->ns, rx_keys(n)) != i || n->child_h != child_hash(h->parent, n->ns, rx_keys(n), rc->ps))
      return kvc__error(rc->ctx, KVC_ERR_INTERNAL, fn, "node %d not found in the child index", i);
    const int64_t *v = rx_vals(n);
    for (int32_t k = 0; k < h->len; k++)
      if (v[k] < 1 || v[k] > rc->top_slot || !audit_held(rc, v[k]) || v[k] - v[k - k % rc->ps] != k % rc->ps ||
          (k % rc->ps == 0 && v[k] % rc->ps))
        return kvc__error(rc->ctx, KVC_ERR_INTERNAL, fn, "node %d slot %lld not a held page", i, (long long)v[k]);
    bool run = n->run_first >= 0;
    for (int32_t k = 0; k < h->len && run; k++) run = v[k] == n->run_first + k;
    if (n->run_first >= 0 && !run)
      return kvc__error(rc->ctx, KVC_ERR_INTERNAL, fn, "node %d: run of slots from %lld is not its values", i,
                        (long long)n->run_first);
    held += h->len / rc->ps;
  }
  int64_t bits = 0;
  for (size_t w = 0; w < rx_held_bytes(rc); w++) bits += rc->held[w] != 0;
  if (rc->bound) { /* its own bytes stay zero; the allocator's marks are the tree's slots */
    if (bits) return kvc__error(rc->ctx, KVC_ERR_INTERNAL, fn, "%lld held bytes set in a bound cache", (long long)bits);
    for (int64_t p = 1; p <= rc->bound->num_pages; p++) bits += (rc->bound->state[p] & KVC__PG_CACHED) != 0;
  }
  if (bits != held)
    return kvc__error(rc->ctx, KVC_ERR_INTERNAL, fn, "%lld held bits for %lld pages (a page twice?)", (long long)bits,
                      (long long)held);
  if (ev != rc->evictable || pr != rc->protected_ || live != rc->live_nodes || leaves != rc->heap_len ||
      (size_t)(live - 1) != rc->table_used)
    return kvc__error(rc->ctx, KVC_ERR_INTERNAL, fn,
                      "sizes: evictable %lld/%lld protected %lld/%lld nodes %lld/%d leaves %lld/%d", (long long)ev,
                      (long long)rc->evictable, (long long)pr, (long long)rc->protected_, (long long)live,
                      rc->live_nodes, (long long)leaves, rc->heap_len);
  return kvc__rx_heap_audit(rc, fn);
}

size_t kvc__rx_bytes(const kvc_radix_cache *rc) {
  return sizeof *rc + (size_t)rc->nodes_cap * (sizeof(rx_node) + sizeof(rx_hot) + sizeof(int32_t)) +
         rc->table_cap * sizeof(rx_slot) + (size_t)rc->seg_bytes + rx_held_bytes(rc) + rc->path_cap * 4 +
         rc->vec_cap * 20;
}

static rx_seg *seg_alloc(kvc_radix_cache *rc, const int32_t *keys, int64_t n) {
  size_t bytes;
  if (n <= 0 || n > INT32_MAX || !kvc__mul_size((size_t)n, 12, &bytes) || !kvc__add_size(bytes, sizeof(rx_seg), &bytes))
    return NULL;
  rx_seg *s = kvc__malloc(rc->ctx, bytes);
  if (!s) return NULL;
  s->refs = 1;
  s->len = n;
  memcpy(rx_seg_keys(s), keys, (size_t)n * sizeof *keys);
  rc->seg_bytes += kvc__rx_seg_bytes(n);
  return s;
}

rx_seg *kvc__rx_seg_new(kvc_radix_cache *rc, const int32_t *keys, const int64_t *vals, int64_t n) {
  rx_seg *s = seg_alloc(rc, keys, n);
  if (s) memcpy(rx_seg_vals(s), vals, (size_t)n * sizeof *vals);
  return s;
}

rx_seg *kvc__rx_seg_keys(kvc_radix_cache *rc, const int32_t *keys, int64_t n) { return seg_alloc(rc, keys, n); }

void kvc__rx_seg_drop(kvc_radix_cache *rc, rx_seg *s) {
  rc->seg_bytes -= kvc__rx_seg_bytes(s->len);
  kvc__free(rc->ctx, s);
}
