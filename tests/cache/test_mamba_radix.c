/*
 * Mamba radix cache (SGLang's unified cache Mamba component) rules with worked examples:
 * a node holds at most one state and keeps it on a split, a match ends at the deepest
 * node with a state and copies it into the request's slot, insert attaches a donated
 * state or reports mamba_exist, MAMBA locks on the node only, the two evictions (a state
 * off an inner node, a leaf whole; full eviction takes states along), KV events naming
 * the component, bad input changing nothing, and the cache behind a hybrid flow (no track
 * buffers, and ping-pong track buffers) with conservation per component and sessions.
 */
#include "../flow/flow_util.h"
#include "core/fault.h"

typedef struct world {
  kvc_req_to_token_pool *rp;
  kvc_mamba_pool *mp;
  kvc_hybrid_req_pool *hp;
  kvc_mamba_radix_cache *c;
  int64_t freed[4096];
  size_t nfreed;
  int events[4][4]; /* [kind][component] */
} world;

static kvc_status log_free(void *user, const int64_t *s, size_t n) {
  world *w = user;
  for (size_t i = 0; i < n && w->nfreed < 4096; i++) w->freed[w->nfreed++] = s[i];
  return KVC_OK;
}

static void on_event(void *user, const kvc_radix_event *e) {
  world *w = user;
  w->events[e->kind][e->component]++;
}

typedef struct ereq {
  kvc_req_state st; /* first: req_of casts back */
  kvc_radix_req rr;
  int32_t toks[512];
} ereq;

static kvc_radix_req *req_of(void *user, const kvc_req_state *r) {
  (void)user;
  return &((ereq *)(uintptr_t)r)->rr;
}

static kvc_status chain_hash(void *user, uint64_t parent, int has_parent, uint64_t ns, const int32_t *t, int64_t n,
                             uint64_t *out) {
  (void)user;
  uint64_t h = parent * 31 + (uint64_t)has_parent + ns;
  for (int64_t i = 0; i < n; i++) h = h * 1000003u + (uint64_t)t[i];
  *out = h;
  return KVC_OK;
}

static void world_make(world *w, int32_t mamba_size, uint32_t flags, int32_t ps, int events) {
  memset(w, 0, sizeof *w);
  kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rc.size = 8;
  rc.max_context_len = 256;
  KVT_OK(kvc_req_to_token_pool_create(kvt_ctx, &rc, &w->rp));
  kvc_mamba_pool_config mc = KVC_MAMBA_POOL_CONFIG_INIT;
  kvc_mamba_shape conv = {2, 0, {8, 4, 0}};
  mc.size = mamba_size;
  mc.num_layers = 2;
  mc.num_conv = 1;
  mc.conv_shapes = &conv;
  mc.temporal_shape[0] = 2;
  mc.temporal_shape[1] = 4;
  mc.temporal_shape[2] = 4;
  KVT_OK(kvc_mamba_pool_create(kvt_ctx, &mc, &w->mp));
  kvc_hybrid_req_pool_config hc = KVC_HYBRID_REQ_POOL_CONFIG_INIT;
  hc.flags = flags;
  hc.req_pool = w->rp;
  hc.mamba_pool = w->mp;
  KVT_OK(kvc_hybrid_req_pool_create(kvt_ctx, &hc, &w->hp));
  kvc_mamba_radix_cache_config cc = KVC_MAMBA_RADIX_CACHE_CONFIG_INIT;
  cc.radix.page_size = ps;
  cc.radix.num_slots = 1 << 12;
  cc.radix.req_of = req_of;
  cc.radix.free_slots = log_free;
  cc.radix.free_user = w;
  /* A hash of the test's own: the default (XXH3) exists only where xxhash.h was found. */
  if (events) cc.radix.on_event = on_event, cc.radix.event_user = w, cc.radix.block_hash = chain_hash;
  cc.hybrid_req_pool = w->hp;
  KVT_OK(kvc_mamba_radix_cache_create(kvt_ctx, &cc, &w->c));
}

static void world_free(world *w) {
  kvc_mamba_radix_cache_destroy(w->c);
  kvc_hybrid_req_pool_destroy(w->hp);
  kvc_mamba_pool_destroy(w->mp);
  kvc_req_to_token_pool_destroy(w->rp);
}

static int32_t slot_new(world *w) {
  int32_t s = 0;
  KVT_OK(kvc_mamba_pool_alloc(w->mp, 1, &s, NULL));
  return s;
}

/* Inserts t[0:n) -> base.. with state s; returns whether the tree took s. */
static int put(world *w, const int32_t *t, int64_t n, int64_t base, int32_t s) {
  int64_t sl[512], prefix;
  int taken = -1;
  for (int64_t i = 0; i < n; i++) sl[i] = base + i;
  KVT_OK(kvc_mamba_radix_cache_insert(w->c, NULL, 0, t, sl, n, s, &prefix, &taken));
  KVT_OK(kvc_mamba_radix_cache_check(w->c));
  return taken;
}

static kvc_radix_match get(world *w, const int32_t *t, int64_t n, int32_t *state, int64_t *full) {
  kvc_radix_match m;
  KVT_OK(kvc_mamba_radix_cache_match_prefix(w->c, 0, t, n, &m, state, full));
  KVT_OK(kvc_mamba_radix_cache_check(w->c));
  return m;
}

static kvc_mamba_radix_sizes sizes(const world *w) {
  kvc_mamba_radix_sizes s;
  KVT_OK(kvc_mamba_radix_cache_sizes(w->c, &s));
  return s;
}

static const int32_t T[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

/* [1..8] with state A, then [1..4, 90, 91] with B: the split at 4 leaves A on [5..8]
 * (the lower node, the exact prefix it belongs to) and no state on [1..4]. A match of
 * [1..6] (the walk splits [5..8] at 6) has no state at 4 or 6: the root. [1..8] -> A. */
static void test_split_keeps_the_state_on_the_lower_node(void **state) {
  (void)state;
  world w;
  world_make(&w, 8, 0, 1, 0);
  const int32_t A = slot_new(&w), B = slot_new(&w);
  assert_int_equal(put(&w, T, 8, 101, A), 1);
  const int32_t u[] = {1, 2, 3, 4, 90, 91};
  assert_int_equal(put(&w, u, 6, 201, B), 1);
  int32_t s = -1;
  int64_t full = -1;
  kvc_radix_match m = get(&w, T, 8, &s, &full);
  assert_int_equal(m.len, 8);
  assert_int_equal(s, A);
  assert_int_equal(full, 8);
  assert_int_equal(m.slots[7], 108);
  m = get(&w, T, 6, &s, &full);
  assert_int_equal(m.len, 0);
  assert_int_equal(s, 0);
  assert_int_equal(full, 6); /* the full-attention hit is still reported */
  kvc_radix_stats st;
  KVT_OK(kvc_mamba_radix_cache_stats(w.c, &st));
  assert_int_equal(st.nodes, 4); /* [1..4] [5,6] [7,8] [90,91] */
  m = get(&w, T, 8, &s, &full);  /* A is on [7,8] now: still the 8-token state */
  assert_int_equal(m.len, 8);
  assert_int_equal(s, A);
  int32_t ns = -1;
  KVT_OK(kvc_mamba_radix_cache_node_state(w.c, m.node, &ns));
  assert_int_equal(ns, A);
  kvc_mamba_radix_sizes z = sizes(&w);
  assert_int_equal(z.cached, 10);
  assert_int_equal(z.mamba_cached, 2);
  assert_int_equal(z.mamba_evictable, 2);
  world_free(&w);
}

/* States at 4 (A) and 8 (B) on one path: a match of 7 tokens ends at 4 with A; an insert
 * onto an existing node without a state attaches it; onto one with a state it does not
 * (mamba_exist: the caller keeps its slot). */
static void test_match_ends_at_the_deepest_state_and_insert_attaches(void **state) {
  (void)state;
  world w;
  world_make(&w, 8, 0, 1, 0);
  const int32_t A = slot_new(&w), B = slot_new(&w), C = slot_new(&w);
  assert_int_equal(put(&w, T, 8, 101, B), 1);
  assert_int_equal(put(&w, T, 4, 901, A), 1); /* splits [1..8] at 4: [1..4] gets A */
  assert_int_equal(w.nfreed, 4);              /* the 4 incoming duplicates */
  int32_t s;
  int64_t full;
  kvc_radix_match m = get(&w, T, 7, &s, &full);
  assert_int_equal(m.len, 4);
  assert_int_equal(s, A);
  assert_int_equal(full, 7);
  assert_int_equal(put(&w, T, 4, 101, C), 0); /* [1..4] has A: C stays the caller's */
  assert_int_equal(kvc_mamba_pool_is_held(w.mp, C), 1);
  assert_int_equal(sizes(&w).mamba_cached, 2);
  m = get(&w, T, 16, &s, &full); /* past the tree: the deepest state is B at 8 */
  assert_int_equal(m.len, 8);
  assert_int_equal(s, B);
  assert_int_equal(full, 8);
  KVT_OK(kvc_mamba_pool_free(w.mp, &C, 1));
  world_free(&w);
}

/* MAMBA locks on the node only; MAMBA eviction in LRU order: an inner node keeps its KV
 * (an event with component MAMBA), a leaf goes whole (component ALL); a locked state is
 * skipped; full eviction takes the states of the leaves it deletes. */
static void test_locks_and_both_evictions(void **state) {
  (void)state;
  world w;
  world_make(&w, 8, 0, 1, 1);
  const int32_t A = slot_new(&w), B = slot_new(&w), C = slot_new(&w);
  const int32_t u[] = {1, 2, 3, 4, 50, 51};
  assert_int_equal(put(&w, T, 4, 101, A), 1); /* [1..4] A (inner once u and T8 hang) */
  assert_int_equal(put(&w, T, 8, 101, B), 1); /* [5..8] B */
  assert_int_equal(put(&w, u, 6, 301, C), 1); /* [50,51] C */
  assert_int_equal(w.events[KVC_RADIX_BLOCK_STORED][KVC_RADIX_COMPONENT_ALL], 10); /* one per page (token) */
  int32_t s;
  int64_t full;
  kvc_radix_match m = get(&w, T, 8, &s, &full); /* B most recent */
  assert_int_equal(s, B);
  KVT_OK(kvc_mamba_radix_cache_lock(w.c, m.node));
  kvc_mamba_radix_sizes z = sizes(&w);
  assert_int_equal(z.mamba_protected, 1); /* the node only, not A on its path */
  assert_int_equal(z.protected_size, 8);  /* FULL: the whole path */
  assert_int_equal(z.mamba_evictable, 2);
  /* LRU: A (inserted first), C, B (matched). A is inner: its state goes, its KV stays. */
  int64_t ev = -1, mev = -1;
  KVT_OK(kvc_mamba_radix_cache_evict(w.c, NULL, 0, 1, &ev, &mev));
  assert_int_equal(ev, 0);
  assert_int_equal(mev, 1);
  assert_int_equal(kvc_mamba_pool_is_held(w.mp, A), 0);
  assert_int_equal(w.events[KVC_RADIX_BLOCK_REMOVED][KVC_RADIX_COMPONENT_MAMBA], 1);
  z = sizes(&w);
  assert_int_equal(z.cached, 10);
  assert_int_equal(z.mamba_cached, 2);
  assert_int_equal(get(&w, T, 4, &s, &full).len, 0); /* no state at 4 any more */
  /* Next: C, a leaf: deleted whole (its 2 tokens freed); B is locked: skipped. */
  w.nfreed = 0; /* (the 4 duplicates of u's insert) */
  KVT_OK(kvc_mamba_radix_cache_evict(w.c, NULL, 0, 5, &ev, &mev));
  assert_int_equal(ev, 2);
  assert_int_equal(mev, 1);
  assert_int_equal(w.nfreed, 2);
  assert_int_equal(w.freed[0], 305);
  assert_int_equal(w.events[KVC_RADIX_BLOCK_REMOVED][KVC_RADIX_COMPONENT_ALL], 1);
  KVT_STATUS(kvc_mamba_radix_cache_evict(w.c, NULL, 0, 1, &ev, &mev), KVC_ERR_OUT_OF_SLOTS);
  KVT_OK(kvc_mamba_radix_cache_unlock(w.c, m.node));
  KVT_STATUS(kvc_mamba_radix_cache_unlock(w.c, m.node), KVC_ERR_MISUSE);
  /* Full eviction of everything: B goes with its leaf. */
  KVT_OK(kvc_mamba_radix_cache_evict(w.c, NULL, 100, 0, &ev, &mev));
  assert_int_equal(ev, 8);
  assert_int_equal(mev, 1);
  assert_int_equal(kvc_mamba_pool_available(w.mp), 8);
  z = sizes(&w);
  assert_int_equal(z.cached + z.mamba_cached, 0);
  KVT_OK(kvc_mamba_radix_cache_check(w.c));
  world_free(&w);
}

/* [1..8] A, then [1..4, 90, 91] B: [1..4] (no state) above A's [5..8] and B's [90,91].
 * Either eviction deleting a leaf deletes the ancestors left childless without a state
 * (SGLang's _iteratively_delete_tombstone_leaf), their KV counted: no stateless leaf. */
static void test_evictions_drop_stateless_ancestors(void **state) {
  (void)state;
  const int32_t u[] = {1, 2, 3, 4, 90, 91};
  for (int mamba = 0; mamba < 2; mamba++) {
    world w;
    world_make(&w, 8, 0, 1, 0);
    const int32_t A = slot_new(&w), B = slot_new(&w);
    assert_int_equal(put(&w, T, 8, 101, A), 1);
    assert_int_equal(put(&w, u, 6, 201, B), 1);
    assert_int_equal(sizes(&w).cached, 10);
    int64_t ev = -1, mev = -1;
    /* A's leaf first (LRU); [1..4] still has B below it. */
    KVT_OK(kvc_mamba_radix_cache_evict(w.c, NULL, mamba ? 0 : 1, mamba ? 1 : 0, &ev, &mev));
    assert_int_equal(ev, 4);
    assert_int_equal(mev, 1);
    assert_int_equal(sizes(&w).cached, 6);
    /* B's leaf, then [1..4], childless and stateless now. */
    KVT_OK(kvc_mamba_radix_cache_evict(w.c, NULL, mamba ? 0 : 1, mamba ? 1 : 0, &ev, &mev));
    assert_int_equal(ev, 6);
    assert_int_equal(mev, 1);
    kvc_mamba_radix_sizes z = sizes(&w);
    assert_int_equal(z.cached + z.mamba_cached, 0);
    assert_int_equal(w.nfreed, 4 + 10); /* u's 4 duplicates, then every cached token */
    assert_int_equal(kvc_mamba_pool_available(w.mp), 8);
    KVT_OK(kvc_mamba_radix_cache_check(w.c));
    world_free(&w);
  }
}

/* Bad input: clear statuses, nothing changed. */
static void test_bad_input_changes_nothing(void **state) {
  (void)state;
  world w;
  world_make(&w, 4, 0, 1, 0);
  const int32_t A = slot_new(&w);
  assert_int_equal(put(&w, T, 4, 101, A), 1);
  int64_t sl[8] = {201, 202, 203, 204, 205, 206, 207, 208};
  KVT_STATUS(kvc_mamba_radix_cache_insert(w.c, NULL, 0, T, sl, 8, A, NULL, NULL), KVC_ERR_MISUSE); /* the tree's */
  KVT_STATUS(kvc_mamba_radix_cache_insert(w.c, NULL, 0, T, sl, 8, 3, NULL, NULL), KVC_ERR_MISUSE); /* not held */
  KVT_STATUS(kvc_mamba_radix_cache_insert(w.c, NULL, 0, T, sl, 8, 9, NULL, NULL), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_mamba_radix_cache_insert(w.c, NULL, 0, T, sl, -1, 2, NULL, NULL), KVC_ERR_INVALID_ARGUMENT);
  const int32_t B = slot_new(&w);
  sl[5] = 102; /* a slot the tree holds */
  KVT_STATUS(kvc_mamba_radix_cache_insert(w.c, NULL, 0, T, sl, 8, B, NULL, NULL), KVC_ERR_MISUSE);
  KVT_STATUS(kvc_mamba_radix_cache_evict(w.c, NULL, -1, 0, NULL, NULL), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_mamba_radix_cache_unlock(w.c, (void *)&w), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_mamba_radix_cache_match_prefix(w.c, 0, T, 4, NULL, NULL, NULL), KVC_ERR_INVALID_ARGUMENT);
  kvc_mamba_radix_sizes z = sizes(&w);
  assert_int_equal(z.cached, 4);
  assert_int_equal(z.mamba_cached, 1);
  assert_int_equal(kvc_mamba_pool_is_held(w.mp, B), 1);
  assert_int_equal(w.nfreed, 0);
  KVT_OK(kvc_mamba_radix_cache_check(w.c));
  /* Config errors. */
  kvc_mamba_radix_cache_config cc = KVC_MAMBA_RADIX_CACHE_CONFIG_INIT;
  cc.radix.num_slots = 64;
  kvc_mamba_radix_cache *x = NULL;
  KVT_STATUS(kvc_mamba_radix_cache_create(kvt_ctx, &cc, &x), KVC_ERR_INVALID_ARGUMENT); /* no hybrid pool */
  cc.hybrid_req_pool = w.hp;
  cc.radix.page_size = 4;
  KVT_STATUS(kvc_mamba_radix_cache_create(kvt_ctx, &cc, &x), KVC_ERR_INVALID_ARGUMENT); /* page 4 w/o track */
  cc.struct_size = 8;
  KVT_STATUS(kvc_mamba_radix_cache_create(kvt_ctx, &cc, &x), KVC_ERR_VERSION);
  assert_null(x);
  kvc_mamba_radix_cache_destroy(NULL);
  KVT_OK(kvc_mamba_pool_free(w.mp, &B, 1));
  world_free(&w);
}

/* Row `s` of layer 0's temporal state, as bytes. */
static void state_rw(world *w, int32_t s, unsigned char *buf, int write) {
  kvc_buffer_desc b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  KVT_OK(kvc_mamba_pool_buffer(w->mp, KVC_REGION_MAMBA_TEMPORAL, 0, 0, &b));
  unsigned char *row = (unsigned char *)b.data + (size_t)s * (size_t)b.bytes_per_token;
  if (write) kvt_h2d(row, buf, (size_t)b.bytes_per_token);
  else kvt_d2h(buf, row, (size_t)b.bytes_per_token);
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
}

/* match_req copies the matched state into the request's slot: a new one (fork) when it
 * has none, its own when it has one; the lock is on the matched node. A pool with no free
 * slot evicts one unlocked state first. */
static void test_match_req_copies_the_state(void **state) {
  (void)state;
  world w;
  world_make(&w, 3, 0, 1, 0);
  const int32_t A = slot_new(&w), B = slot_new(&w);
  unsigned char pat[128], got[128];
  for (int i = 0; i < 128; i++) pat[i] = (unsigned char)(i * 7 + 3);
  state_rw(&w, A, pat, 1);
  assert_int_equal(put(&w, T, 8, 101, A), 1);
  const int32_t u[] = {70, 71, 72};
  assert_int_equal(put(&w, u, 3, 401, B), 1);
  static ereq e;
  memset(&e, 0, sizeof e);
  memcpy(e.toks, T, sizeof T);
  e.rr.tokens = e.toks;
  e.rr.num_tokens = 12;
  const int32_t X = slot_new(&w); /* the pool is full now */
  assert_int_equal(kvc_mamba_pool_available(w.mp), 0);
  /* A slot that is the tree's is refused. */
  e.st.mamba_slot = A;
  KVT_STATUS(kvc_mamba_radix_cache_match_req(w.c, NULL, &e.st, &e.rr, NULL), KVC_ERR_MISUSE);
  e.st.mamba_slot = X;
  KVT_OK(kvc_mamba_radix_cache_match_req(w.c, NULL, &e.st, &e.rr, NULL));
  assert_int_equal(e.st.prefix_len, 8);
  assert_int_equal(e.st.mamba_slot, X);
  state_rw(&w, X, got, 0);
  assert_memory_equal(got, pat, 128);
  kvc_mamba_radix_sizes z = sizes(&w);
  assert_int_equal(z.mamba_protected, 1);
  assert_int_equal(z.protected_size, 8);
  KVT_OK(kvc_mamba_radix_cache_unlock(w.c, e.st.cache_node));
  KVT_OK(kvc_mamba_pool_free(w.mp, &X, 1));
  /* Without a slot: fork; then, with the pool empty again, B (unlocked, LRU) is evicted
   * (a leaf: its KV through the hook) to fork for a second request. */
  static ereq f;
  memset(&f, 0, sizeof f);
  memcpy(f.toks, T, sizeof T);
  f.rr.tokens = f.toks;
  f.rr.num_tokens = 9;
  e.st.cache_node = NULL;
  e.st.mamba_slot = 0;
  KVT_OK(kvc_mamba_radix_cache_match_req(w.c, NULL, &e.st, &e.rr, NULL));
  assert_int_equal(e.st.mamba_slot, X); /* the freed slot, from the FIFO */
  state_rw(&w, e.st.mamba_slot, got, 0);
  assert_memory_equal(got, pat, 128);
  KVT_OK(kvc_mamba_radix_cache_match_req(w.c, NULL, &f.st, &f.rr, NULL));
  assert_int_equal(f.st.mamba_slot, B);
  assert_int_equal(w.nfreed, 3); /* B's leaf [70..72] */
  state_rw(&w, B, got, 0);
  assert_memory_equal(got, pat, 128);
  z = sizes(&w);
  assert_int_equal(z.mamba_cached, 1);
  assert_int_equal(z.mamba_protected, 1); /* two locks on A's node */
  /* Nothing left to evict: OUT_OF_SLOTS, nothing changed. */
  static ereq g;
  memset(&g, 0, sizeof g);
  memcpy(g.toks, T, sizeof T);
  g.rr.tokens = g.toks;
  g.rr.num_tokens = 9;
  KVT_STATUS(kvc_mamba_radix_cache_match_req(w.c, NULL, &g.st, &g.rr, NULL), KVC_ERR_OUT_OF_SLOTS);
  assert_null(g.st.cache_node);
  assert_int_equal(sizes(&w).protected_size, 8);
  KVT_OK(kvc_mamba_radix_cache_unlock(w.c, e.st.cache_node));
  KVT_OK(kvc_mamba_radix_cache_unlock(w.c, f.st.cache_node));
  assert_int_equal(sizes(&w).mamba_protected, 0);
  KVT_OK(kvc_mamba_radix_cache_check(w.c));
  world_free(&w);
}

/* Conservation per component: KV free + held by requests + cached == capacity, Mamba
 * available + held by requests + mamba_cached == pool size. */
static void conserve(world *w, kvc_flow *flow, kvc_allocator *a, kvc_req_state *live, int64_t held_kv,
                     int64_t held_mamba) {
  kvc_req_state *lv[] = {live};
  KVT_OK(kvc_flow_check(flow, lv, live ? 1 : 0));
  const kvc_mamba_radix_sizes s = sizes(w);
  assert_int_equal(kvc_allocator_available_size(a) + held_kv + s.cached, kvc_allocator_size(a));
  assert_int_equal(kvc_mamba_pool_available(w->mp) + held_mamba + s.mamba_cached, kvc_mamba_pool_size(w->mp));
  KVT_OK(kvc_mamba_radix_cache_check(w->c));
}

static kvc_flow *flow_make(world *w, kvc_allocator **a, int32_t ps, int64_t tokens, const kvc_prefix_cache *pc) {
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = ps > 1 ? KVC_ALLOCATOR_PAGED : KVC_ALLOCATOR_TOKEN;
  ac.size = tokens;
  ac.page_size = ps;
  KVT_OK(kvc_allocator_create(kvt_ctx, &ac, a));
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = ps;
  fc.req_pool = w->rp;
  fc.allocator = *a;
  fc.hybrid_req_pool = w->hp;
  fc.cache = *pc;
  kvc_flow *flow;
  KVT_OK(kvc_flow_create(kvt_ctx, &fc, &flow));
  return flow;
}

/* world_make's pools with a cache for a flow: 256 slots of page size ps, freed through the
 * flow (no free_slots hook, no events). */
static void flow_world_make(world *w, int32_t mamba_size, uint32_t flags, int32_t ps) {
  world_make(w, mamba_size, flags, ps, 0);
  kvc_mamba_radix_cache_destroy(w->c);
  kvc_mamba_radix_cache_config cc = KVC_MAMBA_RADIX_CACHE_CONFIG_INIT;
  cc.radix.page_size = ps;
  cc.radix.num_slots = 256;
  cc.radix.req_of = req_of;
  cc.hybrid_req_pool = w->hp;
  KVT_OK(kvc_mamba_radix_cache_create(kvt_ctx, &cc, &w->c));
}

/* Destroys what a flow test made: the flow, its output buffer and allocator, the world. */
static void flow_world_free(world *w, kvc_flow *flow, int64_t *out, kvc_allocator *a) {
  kvc_flow_destroy(flow);
  kvt_dev_free(out);
  kvc_allocator_destroy(a);
  world_free(w);
}

/* The flow tests' world: flow_world_make's pools and cache, a flow over 256 slots of page
 * size ps with the Mamba cache as its prefix cache, and an output buffer for the slots. */
static kvc_flow *flow_test_make(world *w, int32_t mamba_size, uint32_t flags, int32_t ps, kvc_allocator **a,
                                int64_t **out) {
  flow_world_make(w, mamba_size, flags, ps);
  const kvc_prefix_cache pc = kvc_mamba_radix_cache_as_prefix_cache(w->c); /* flow_make copies it */
  kvc_flow *flow = flow_make(w, a, ps, 256, &pc);
  *out = kvt_dev_alloc(1024 * sizeof(int64_t));
  return flow;
}

/* A request over the tokens 1..64 (the flow tests' shared prompt), num_tokens of them in
 * its radix request and seq_len in its state; everything else zero. */
static void ereq_counting(ereq *e, int64_t num_tokens, int64_t seq_len) {
  memset(e, 0, sizeof *e);
  for (int k = 0; k < 64; k++) e->toks[k] = k + 1;
  e->rr.tokens = e->toks;
  e->rr.num_tokens = num_tokens;
  e->st.seq_len = seq_len;
}

/* A hybrid flow without track buffers: a finished request donates its running state for
 * its committed tokens; the next request with that prefix matches it (prefix_len, the
 * state copied into its own slot), and so on; everything is conserved per component. */
static void test_flow_donates_the_running_state(void **state) {
  (void)state;
  world w;
  kvc_allocator *a;
  int64_t *out;
  kvc_flow *flow = flow_test_make(&w, 8, 0, 1, &a, &out);
  static ereq e[5];
  for (int i = 0; i < 5; i++) {
    memset(&e[i], 0, sizeof e[i]);
    for (int k = 0; k < 96; k++) e[i].toks[k] = k < 20 ? k : 1000 * (i + 1) + k;
    const int prompt = i ? 28 : 12;
    e[i].rr.tokens = e[i].toks;
    e[i].rr.num_tokens = prompt;
    e[i].st.seq_len = prompt;
    KVT_OK(kvc_mamba_radix_cache_match_req(w.c, flow, &e[i].st, &e[i].rr, NULL));
    /* Request 0 caches 20 tokens (12 + 8 decoded); the others find them. */
    assert_int_equal(e[i].st.prefix_len, i ? 20 : 0);
    assert_int_equal(e[i].st.mamba_slot > 0, i > 0);
    kvc_req_state *one[] = {&e[i].st};
    KVT_OK(kvc_flow_alloc_for_extend(flow, one, 1, out, NULL));
    const int32_t running = e[i].st.mamba_slot;
    assert_true(running > 0);
    for (int step = 0; step < 8; step++) {
      KVT_OK(kvc_flow_alloc_for_decode(flow, one, 1, 1, out, NULL));
      e[i].rr.num_tokens++;
    }
    conserve(&w, flow, a, &e[i].st, e[i].st.seq_len - e[i].st.cache_protected_len, 1);
    KVT_OK(kvc_flow_release(flow, one, 1, 1, NULL));
    conserve(&w, flow, a, NULL, 0, 0);
    /* The running slot is now the state of the request's last node. */
    int32_t s;
    kvc_radix_match m;
    KVT_OK(kvc_mamba_radix_cache_match_prefix(w.c, 0, e[i].toks, i ? 36 : 20, &m, &s, NULL));
    assert_int_equal(m.len, i ? 36 : 20);
    assert_int_equal(s, running);
    assert_int_equal(e[i].st.mamba_slot, 0);
  }
  kvc_mamba_radix_sizes z = sizes(&w);
  assert_int_equal(z.mamba_cached, 5);
  assert_int_equal(z.cached, 20 + 4 * 16);
  /* A sixth request extends request 4's 36 tokens: its match forks request 4's state
   * (1 slot), then its row needs 3 Mamba slots free (SGLang's factor with pp 2) and 2 are:
   * the flow asks the cache for 1 state, and the LRU one goes (request 1's leaf, whole). */
  static ereq f;
  memset(&f, 0, sizeof f);
  memcpy(f.toks, e[4].toks, 36 * sizeof(int32_t));
  for (int k = 36; k < 44; k++) f.toks[k] = 7000 + k;
  f.rr.tokens = f.toks;
  f.rr.num_tokens = 44;
  f.st.seq_len = 44;
  KVT_OK(kvc_mamba_radix_cache_match_req(w.c, flow, &f.st, &f.rr, NULL));
  assert_int_equal(f.st.prefix_len, 36);
  kvc_req_state *one[] = {&f.st};
  KVT_OK(kvc_flow_alloc_for_extend(flow, one, 1, out, NULL));
  z = sizes(&w);
  assert_int_equal(z.mamba_cached, 4);
  assert_int_equal(z.cached, 20 + 3 * 16);
  kvc_radix_match m1;
  int64_t full1;
  KVT_OK(kvc_mamba_radix_cache_match_prefix(w.c, 0, e[1].toks, 36, &m1, NULL, &full1));
  assert_int_equal(full1, 20); /* request 1's own 16 tokens are gone */
  conserve(&w, flow, a, &f.st, 8, 1);
  /* Abort: nothing inserted, every slot back. */
  KVT_OK(kvc_flow_release(flow, one, 1, 0, NULL));
  conserve(&w, flow, a, NULL, 0, 0);
  KVT_OK(kvc_mamba_radix_cache_evict(w.c, flow, z.cached, z.mamba_cached, NULL, NULL));
  conserve(&w, flow, a, NULL, 0, 0);
  assert_int_equal(kvc_mamba_pool_available(w.mp), 8);
  assert_int_equal(kvc_allocator_available_size(a), 256);
  flow_world_free(&w, flow, out, a);
}

/* A chunked request (no track buffers): between chunks a copy of its running state is
 * inserted for the committed tokens (one fork), the lock moves there, and the next
 * request sharing the first chunk matches it with mamba_branching_len 0; a request that
 * shares more KV than states gets the branching length. */
static void test_chunks_cache_a_copy_of_the_state(void **state) {
  (void)state;
  world w;
  kvc_allocator *a;
  int64_t *out;
  kvc_flow *flow = flow_test_make(&w, 8, 0, 1, &a, &out);
  static ereq e, f;
  ereq_counting(&e, 40, 16);
  e.st.flags = KVC_REQ_CHUNKED;
  KVT_OK(kvc_mamba_radix_cache_match_req(w.c, flow, &e.st, &e.rr, NULL));
  kvc_req_state *one[] = {&e.st};
  KVT_OK(kvc_flow_alloc_for_extend(flow, one, 1, out, NULL));
  unsigned char pat[128], got[128];
  for (int i = 0; i < 128; i++) pat[i] = (unsigned char)(255 - i);
  state_rw(&w, e.st.mamba_slot, pat, 1); /* "the model" wrote the running state */
  e.rr.num_tokens = 16;
  KVT_OK(kvc_flow_cache_unfinished(flow, &e.st));
  assert_int_equal(e.st.cache_protected_len, 16);
  assert_int_equal(e.st.prefix_len, 16);
  kvc_mamba_radix_sizes z = sizes(&w);
  assert_int_equal(z.mamba_cached, 1);
  assert_int_equal(z.mamba_protected, 1); /* the lock moved to the new node */
  int32_t s;
  kvc_radix_match m;
  KVT_OK(kvc_mamba_radix_cache_match_prefix(w.c, 0, e.toks, 16, &m, &s, NULL));
  assert_int_equal(m.len, 16);
  assert_true(s > 0 && s != e.st.mamba_slot);
  state_rw(&w, s, got, 0);
  assert_memory_equal(got, pat, 128);
  conserve(&w, flow, a, &e.st, 0, 1);
  /* The second chunk, then the release (the running state for all 40). */
  e.rr.num_tokens = 40;
  e.st.prefix_len = 16;
  e.st.seq_len = 40;
  e.st.flags = 0;
  KVT_OK(kvc_flow_alloc_for_extend(flow, one, 1, out, NULL));
  KVT_OK(kvc_flow_release(flow, one, 1, 1, NULL));
  conserve(&w, flow, a, NULL, 0, 0);
  assert_int_equal(sizes(&w).mamba_cached, 2);
  /* A request sharing 30 tokens: Mamba hit 16, full hit 30: branching at 30. */
  memset(&f, 0, sizeof f);
  for (int k = 0; k < 64; k++) f.toks[k] = k < 30 ? k + 1 : 500 + k;
  f.rr.tokens = f.toks;
  f.rr.num_tokens = 50;
  KVT_OK(kvc_mamba_radix_cache_match_req(w.c, flow, &f.st, &f.rr, NULL));
  assert_int_equal(f.st.prefix_len, 16);
  assert_int_equal(f.rr.mamba_branching_len, 30);
  state_rw(&w, f.st.mamba_slot, got, 0);
  assert_memory_equal(got, pat, 128);
  KVT_OK(kvc_mamba_radix_cache_unlock(w.c, f.st.cache_node));
  KVT_OK(kvc_mamba_pool_free(w.mp, &f.st.mamba_slot, 1));
  z = sizes(&w);
  KVT_OK(kvc_mamba_radix_cache_evict(w.c, flow, z.cached, z.mamba_cached, NULL, NULL));
  conserve(&w, flow, a, NULL, 0, 0);
  assert_int_equal(kvc_mamba_pool_available(w.mp), 8);
  flow_world_free(&w, flow, out, a);
}

/* Failures: a failed copy launch in match_req and a failed mapping launch in an abort
 * change nothing; a failed mapping launch after a finished request's insert leaves the KV
 * cached, the request holding it (locked, cache_protected_len) with every Mamba slot, and
 * a second release finishes the job; a failed host allocation in the insert changes
 * nothing. Conservation holds after each. */
static void test_failures_change_nothing(void **state) {
  (void)state;
  world w;
  kvc_allocator *a;
  int64_t *out;
  kvc_flow *flow = flow_test_make(&w, 8, 0, 1, &a, &out);
  static ereq e, f;
  ereq_counting(&e, 20, 20);
  kvc_req_state *one[] = {&e.st};
  KVT_OK(kvc_mamba_radix_cache_match_req(w.c, flow, &e.st, &e.rr, NULL));
  KVT_OK(kvc_flow_alloc_for_extend(flow, one, 1, out, NULL));
  /* The finished request's mapping launch fails after its insert. */
  kvc__fault_set(kvt_ctx, KVC__FAULT_LAUNCH, 0);
  KVT_STATUS(kvc_flow_release(flow, one, 1, 1, NULL), KVC_ERR_CUDA);
  kvc__fault_reset(kvt_ctx);
  assert_int_equal(e.st.cache_protected_len, 20);
  assert_non_null(e.st.cache_node);
  assert_true(e.st.mamba_slot > 0);
  kvc_mamba_radix_sizes z = sizes(&w);
  assert_int_equal(z.cached, 20);
  assert_int_equal(z.protected_size, 20);
  assert_int_equal(z.mamba_cached, 0);
  conserve(&w, flow, a, &e.st, 0, 1);
  const int32_t running = e.st.mamba_slot;
  KVT_OK(kvc_flow_release(flow, one, 1, 1, NULL));
  conserve(&w, flow, a, NULL, 0, 0);
  z = sizes(&w);
  assert_int_equal(z.cached, 20);
  assert_int_equal(z.mamba_cached, 1);
  assert_int_equal(z.protected_size, 0);
  int32_t s;
  kvc_radix_match m;
  KVT_OK(kvc_mamba_radix_cache_match_prefix(w.c, 0, e.toks, 20, &m, &s, NULL));
  assert_int_equal(s, running);
  /* match_req's fork launch fails: nothing changed. */
  memset(&f, 0, sizeof f);
  memcpy(f.toks, e.toks, sizeof e.toks);
  f.rr.tokens = f.toks;
  f.rr.num_tokens = 30;
  f.st.seq_len = 30;
  const int32_t avail = kvc_mamba_pool_available(w.mp);
  kvc__fault_set(kvt_ctx, KVC__FAULT_LAUNCH, 0);
  KVT_STATUS(kvc_mamba_radix_cache_match_req(w.c, flow, &f.st, &f.rr, NULL), KVC_ERR_CUDA);
  kvc__fault_reset(kvt_ctx);
  assert_null(f.st.cache_node);
  assert_int_equal(f.st.mamba_slot, 0);
  assert_int_equal(kvc_mamba_pool_available(w.mp), avail);
  z = sizes(&w);
  assert_int_equal(z.protected_size + z.mamba_protected, 0);
  conserve(&w, flow, a, NULL, 0, 0);
  KVT_OK(kvc_mamba_radix_cache_match_req(w.c, flow, &f.st, &f.rr, NULL));
  assert_int_equal(f.st.prefix_len, 20);
  one[0] = &f.st;
  KVT_OK(kvc_flow_alloc_for_extend(flow, one, 1, out, NULL));
  /* An abort whose mapping launch fails: nothing changed; the retry finishes. */
  kvc__fault_set(kvt_ctx, KVC__FAULT_LAUNCH, 0);
  KVT_STATUS(kvc_flow_release(flow, one, 1, 0, NULL), KVC_ERR_CUDA);
  kvc__fault_reset(kvt_ctx);
  assert_int_equal(f.st.cache_protected_len, 20);
  conserve(&w, flow, a, &f.st, 10, 1);
  /* A finished request whose insert cannot allocate: nothing changed. */
  f.rr.num_tokens = 30;
  kvc__fault_set(kvt_ctx, KVC__FAULT_HOST_ALLOC, 0);
  const kvc_status st = kvc_flow_release(flow, one, 1, 1, NULL);
  kvc__fault_reset(kvt_ctx);
  assert_int_equal(st, KVC_ERR_HOST_OOM);
  assert_int_equal(sizes(&w).cached, 20);
  conserve(&w, flow, a, &f.st, 10, 1);
  KVT_OK(kvc_flow_release(flow, one, 1, 1, NULL));
  conserve(&w, flow, a, NULL, 0, 0);
  assert_int_equal(sizes(&w).cached, 30);
  z = sizes(&w);
  KVT_OK(kvc_mamba_radix_cache_evict(w.c, flow, z.cached, z.mamba_cached, NULL, NULL));
  assert_int_equal(kvc_mamba_pool_available(w.mp), 8);
  assert_int_equal(kvc_allocator_available_size(a), 256);
  flow_world_free(&w, flow, out, a);
}

static void world_cap(world *w, int32_t mamba_size, int32_t cap) {
  world_make(w, mamba_size, 0, 1, 1);
  kvc_mamba_radix_cache_destroy(w->c);
  kvc_mamba_radix_cache_config cc = KVC_MAMBA_RADIX_CACHE_CONFIG_INIT;
  cc.max_states_per_path = cap;
  cc.radix.num_slots = 1 << 12;
  cc.radix.free_slots = log_free;
  cc.radix.free_user = w;
  cc.radix.on_event = on_event, cc.radix.event_user = w, cc.radix.block_hash = chain_hash;
  cc.hybrid_req_pool = w->hp;
  KVT_OK(kvc_mamba_radix_cache_create(kvt_ctx, &cc, &w->c));
}

/* The state of the node ending at n (0: none; the match then ends above n). */
static int32_t state_at(world *w, int64_t n) {
  int32_t s;
  kvc_radix_match m;
  KVT_OK(kvc_mamba_radix_cache_match_prefix(w->c, 0, T, n, &m, NULL, NULL));
  KVT_OK(kvc_mamba_radix_cache_node_state(w->c, m.node, &s));
  return m.len == n ? s : 0;
}

/* max_states_per_path 2 (SGLang's worked example): states at 2 (S0), 4 (S1), 6 (S2) on
 * one chain; attaching S2 makes three on the path, so the shallowest, S0, goes: its node
 * keeps its KV (an event with component MAMBA), S0 goes back to the pool. A cap of 0 is no
 * cap; a negative one is refused. */
static void test_path_cap_takes_the_shallowest_state(void **state) {
  (void)state;
  world w;
  world_cap(&w, 8, 2);
  const int32_t S0 = slot_new(&w), S1 = slot_new(&w), S2 = slot_new(&w);
  assert_int_equal(put(&w, T, 2, 101, S0), 1);
  assert_int_equal(put(&w, T, 4, 201, S1), 1);
  assert_int_equal(sizes(&w).mamba_cached, 2);
  assert_int_equal(w.events[KVC_RADIX_BLOCK_REMOVED][KVC_RADIX_COMPONENT_MAMBA], 0);
  assert_int_equal(put(&w, T, 6, 301, S2), 1);
  const kvc_mamba_radix_sizes z = sizes(&w);
  assert_int_equal(z.mamba_cached, 2);
  assert_int_equal(z.cached, 6); /* every node keeps its KV */
  assert_int_equal(kvc_mamba_pool_is_held(w.mp, S0), 0);
  assert_int_equal(state_at(&w, 2), 0);
  assert_int_equal(state_at(&w, 4), S1);
  assert_int_equal(state_at(&w, 6), S2);
  assert_int_equal(w.events[KVC_RADIX_BLOCK_REMOVED][KVC_RADIX_COMPONENT_MAMBA], 1);
  world_free(&w);
  world_cap(&w, 8, 0); /* no cap: all three stay */
  const int32_t A = slot_new(&w), B = slot_new(&w), C = slot_new(&w);
  put(&w, T, 2, 101, A), put(&w, T, 4, 201, B), put(&w, T, 6, 301, C);
  assert_int_equal(sizes(&w).mamba_cached, 3);
  kvc_mamba_radix_cache_config cc = KVC_MAMBA_RADIX_CACHE_CONFIG_INIT;
  cc.max_states_per_path = -1;
  cc.hybrid_req_pool = w.hp;
  kvc_mamba_radix_cache *bad = NULL;
  KVT_STATUS(kvc_mamba_radix_cache_create(kvt_ctx, &cc, &bad), KVC_ERR_INVALID_ARGUMENT);
  assert_null(bad);
  world_free(&w);
}

/* The cap is soft (SGLang's second example, cap 1): forks, MAMBA-locked nodes and the node
 * just attached to keep their states. [1,2] S0 is a fork ([3,4] and [50,51] below it),
 * [3,4] S1 is MAMBA-locked; attaching S3 at 8 takes only S2 at 6, leaving three states on
 * the path. */
static void test_path_cap_is_soft(void **state) {
  (void)state;
  world w;
  world_cap(&w, 8, 1);
  const int32_t SF = slot_new(&w), S0 = slot_new(&w), S1 = slot_new(&w), S2 = slot_new(&w), S3 = slot_new(&w);
  const int32_t f[] = {1, 2, 50, 51};
  assert_int_equal(put(&w, f, 4, 501, SF), 1);
  assert_int_equal(put(&w, T, 2, 101, S0), 1); /* splits [1,2,50,51]: one state on each path */
  assert_int_equal(put(&w, T, 4, 201, S1), 1); /* [1,2] is a fork now: nothing goes */
  assert_int_equal(sizes(&w).mamba_cached, 3);
  kvc_radix_match m;
  KVT_OK(kvc_mamba_radix_cache_match_prefix(w.c, 0, T, 4, &m, NULL, NULL));
  KVT_OK(kvc_mamba_radix_cache_lock(w.c, m.node));
  assert_int_equal(put(&w, T, 6, 301, S2), 1); /* S0 fork, S1 locked, S2 the tail */
  assert_int_equal(sizes(&w).mamba_cached, 4);
  assert_int_equal(put(&w, T, 8, 401, S3), 1);
  assert_int_equal(sizes(&w).mamba_cached, 4);
  assert_int_equal(kvc_mamba_pool_is_held(w.mp, S2), 0);
  assert_int_equal(state_at(&w, 2), S0);
  assert_int_equal(state_at(&w, 4), S1);
  assert_int_equal(state_at(&w, 6), 0);
  assert_int_equal(state_at(&w, 8), S3);
  KVT_OK(kvc_mamba_radix_cache_unlock(w.c, m.node));
  KVT_OK(kvc_mamba_radix_cache_check(w.c));
  world_free(&w);
}

/* A failed copy launch in match_req changes nothing: not the tree (the walk would split
 * [5..8] at 6), not the LRU order of the states (the match would refresh A), not the
 * pool (with no free slot, match_req would evict one state and fork into its slot).
 * [1..4] holds A, [5..8] B, B the most recently used; the request's own slot R is the
 * pool's last. Then the LRU end is still A: a MAMBA eviction of one state takes A (an
 * inner node: its KV stays), not B. */
static void test_failed_match_launch_changes_nothing(void **state) {
  (void)state;
  world w;
  world_make(&w, 3, 0, 1, 0);
  const int32_t A = slot_new(&w), B = slot_new(&w), R = slot_new(&w);
  assert_int_equal(put(&w, T, 8, 101, B), 1);
  assert_int_equal(put(&w, T, 4, 901, A), 1); /* [1..4] A, [5..8] B */
  int32_t s;
  (void)get(&w, T, 8, &s, NULL); /* B most recent, A the LRU end */
  assert_int_equal(s, B);
  static ereq e;
  memset(&e, 0, sizeof e);
  const int32_t q[] = {1, 2, 3, 4, 5, 6, 77, 78};
  memcpy(e.toks, q, sizeof q);
  e.rr.tokens = e.toks;
  e.rr.num_tokens = 8; /* 7 matched: [1..6], the walk would split [5..8] */
  e.st.seq_len = 8;
  kvc_radix_stats st;
  for (int own = 1; own >= 0; own--) { /* copy into the request's slot, then evict + fork */
    e.st.mamba_slot = own ? R : 0;
    const size_t freed = w.nfreed;
    kvc__fault_set(kvt_ctx, KVC__FAULT_LAUNCH, 0);
    KVT_STATUS(kvc_mamba_radix_cache_match_req(w.c, NULL, &e.st, &e.rr, NULL), KVC_ERR_CUDA);
    kvc__fault_reset(kvt_ctx);
    assert_null(e.st.cache_node);
    assert_int_equal(e.st.mamba_slot, own ? R : 0);
    assert_int_equal(e.st.prefix_len, 0);
    KVT_OK(kvc_mamba_radix_cache_stats(w.c, &st));
    assert_int_equal(st.nodes, 2);
    const kvc_mamba_radix_sizes z = sizes(&w);
    assert_int_equal(z.cached, 8);
    assert_int_equal(z.mamba_cached, 2);
    assert_int_equal(z.protected_size + z.mamba_protected, 0);
    assert_int_equal(kvc_mamba_pool_available(w.mp), 0);
    assert_int_equal(w.nfreed, freed);
    KVT_OK(kvc_mamba_radix_cache_check(w.c));
  }
  int64_t ev = -1, mev = -1;
  KVT_OK(kvc_mamba_radix_cache_evict(w.c, NULL, 0, 1, &ev, &mev));
  assert_int_equal(ev, 0); /* A's node is inner: it keeps its KV */
  assert_int_equal(mev, 1);
  (void)get(&w, T, 8, &s, NULL);
  assert_int_equal(s, B);
  (void)get(&w, T, 4, &s, NULL);
  assert_int_equal(s, 0);
  KVT_OK(kvc_mamba_pool_free(w.mp, &R, 1));
  world_free(&w);
}

/* With no free Mamba slot, match_req evicts the LRU state other than the matched one and
 * forks into its slot: [1..4] A (matched), [5..8] B (the victim, a leaf once the walk
 * splits it at 6: its [7, 8] goes whole); the request holds B's slot with A's state. */
static void test_match_evicts_into_the_victim_slot(void **state) {
  (void)state;
  world w;
  world_make(&w, 2, 0, 1, 0);
  const int32_t A = slot_new(&w), B = slot_new(&w);
  assert_int_equal(put(&w, T, 8, 101, B), 1);
  assert_int_equal(put(&w, T, 4, 901, A), 1);
  int32_t s;
  (void)get(&w, T, 8, &s, NULL);
  static ereq e;
  memset(&e, 0, sizeof e);
  const int32_t q[] = {1, 2, 3, 4, 5, 6, 77, 78};
  memcpy(e.toks, q, sizeof q);
  e.rr.tokens = e.toks;
  e.rr.num_tokens = 8;
  e.st.seq_len = 8;
  const size_t freed = w.nfreed;
  KVT_OK(kvc_mamba_radix_cache_match_req(w.c, NULL, &e.st, &e.rr, NULL));
  assert_int_equal(e.st.prefix_len, 4);
  assert_int_equal(e.st.mamba_slot, B);
  assert_int_equal(w.nfreed, freed + 2); /* [7, 8]'s KV */
  assert_int_equal(w.freed[freed], 107);
  const kvc_mamba_radix_sizes z = sizes(&w);
  assert_int_equal(z.cached, 6);
  assert_int_equal(z.mamba_cached, 1);
  assert_int_equal(z.mamba_protected, 1);
  assert_int_equal(kvc_mamba_pool_available(w.mp), 0);
  KVT_OK(kvc_mamba_radix_cache_unlock(w.c, e.st.cache_node));
  KVT_OK(kvc_mamba_pool_free(w.mp, &e.st.mamba_slot, 1));
  (void)A;
  world_free(&w);
}

/* Ping-pong track buffers (page 4): the finished request donates the newest track slot
 * whose checkpoint fits its committed tokens; the KV past the checkpoint is freed. */
static void test_flow_donates_a_track_checkpoint(void **state) {
  (void)state;
  world w;
  kvc_allocator *a;
  int64_t *out;
  kvc_flow *flow = flow_test_make(&w, 12, KVC_HYBRID_TRACK, 4, &a, &out);
  static ereq e;
  ereq_counting(&e, 30, 30);
  KVT_OK(kvc_mamba_radix_cache_match_req(w.c, flow, &e.st, &e.rr, NULL));
  kvc_req_state *one[] = {&e.st};
  KVT_OK(kvc_flow_alloc_for_extend(flow, one, 1, out, NULL));
  assert_true(e.st.mamba_track[0] > 0 && e.st.mamba_track[1] > 0);
  const int32_t t0 = e.st.mamba_track[0], t1 = e.st.mamba_track[1];
  conserve(&w, flow, a, &e.st, 32, 3);
  /* The engine checkpointed 24 tokens in track 1 and, later, 32 in track 0 (past the 30
   * committed: an overshoot). The fit is track 1 with 24 tokens. */
  e.st.mamba_track_seqlen[0] = 32;
  e.st.mamba_track_seqlen[1] = 24;
  e.st.mamba_track_seqlen[1] = 23; /* not page-aligned: refused, nothing changed */
  KVT_STATUS(kvc_flow_release(flow, one, 1, 1, NULL), KVC_ERR_INVALID_ARGUMENT);
  conserve(&w, flow, a, &e.st, 32, 3);
  e.st.mamba_track_seqlen[1] = 24;
  KVT_OK(kvc_flow_release(flow, one, 1, 1, NULL));
  conserve(&w, flow, a, NULL, 0, 0);
  kvc_mamba_radix_sizes z = sizes(&w);
  assert_int_equal(z.cached, 24);
  assert_int_equal(z.mamba_cached, 1);
  int32_t s;
  kvc_radix_match m;
  KVT_OK(kvc_mamba_radix_cache_match_prefix(w.c, 0, e.toks, 30, &m, &s, NULL));
  assert_int_equal(m.len, 24);
  assert_int_equal(s, t1);
  assert_int_equal(kvc_mamba_pool_is_held(w.mp, t0), 0);
  /* No checkpoint fits: nothing is cached, every slot goes back. */
  static ereq f;
  memset(&f, 0, sizeof f);
  for (int k = 0; k < 64; k++) f.toks[k] = 100 + k;
  f.rr.tokens = f.toks;
  f.rr.num_tokens = 10;
  f.st.seq_len = 10;
  KVT_OK(kvc_mamba_radix_cache_match_req(w.c, flow, &f.st, &f.rr, NULL));
  one[0] = &f.st;
  KVT_OK(kvc_flow_alloc_for_extend(flow, one, 1, out, NULL));
  f.st.mamba_track_seqlen[0] = 12;
  KVT_OK(kvc_flow_release(flow, one, 1, 1, NULL));
  conserve(&w, flow, a, NULL, 0, 0);
  assert_int_equal(sizes(&w).cached, 24);
  flow_world_free(&w, flow, out, a);
}

/* The chunk checkpoint handed over (kvc_mamba_radix_cache_donate_unfinished_req, SGLang
 * 0.5.23's donate_mamba_ping_pong_slot): the tree takes the checkpoint's track slot itself,
 * no state is copied, and the request's track entry gets a fresh slot; the Mamba pool
 * loses one slot, as with the copy. A second chunk ending at the same node (a state there
 * already) gives the donated slot back. Without track buffers the call is refused. */
static void test_chunk_checkpoint_hands_over_the_track_slot(void **state) {
  (void)state;
  world w;
  kvc_allocator *a;
  int64_t *out;
  kvc_flow *flow = flow_test_make(&w, 12, KVC_HYBRID_TRACK, 4, &a, &out);
  static ereq e;
  ereq_counting(&e, 40, 16);
  e.st.flags = KVC_REQ_CHUNKED;
  KVT_OK(kvc_mamba_radix_cache_match_req(w.c, flow, &e.st, &e.rr, NULL));
  kvc_req_state *one[] = {&e.st};
  KVT_OK(kvc_flow_alloc_for_extend(flow, one, 1, out, NULL));
  const int32_t t0 = e.st.mamba_track[0], t1 = e.st.mamba_track[1];
  unsigned char pat[128], got[128];
  for (int i = 0; i < 128; i++) pat[i] = (unsigned char)(3 * i + 1);
  state_rw(&w, t1, pat, 1); /* the forward checkpointed 12 tokens into track 1 */
  e.st.mamba_track_seqlen[1] = 12;
  const int64_t avail = kvc_mamba_pool_available(w.mp);
  e.rr.num_tokens = 16;
  KVT_OK(kvc_mamba_radix_cache_donate_unfinished_req(w.c, flow, &e.st));
  assert_int_equal(e.st.cache_protected_len, 12);
  assert_int_equal(e.st.prefix_len, 16);
  assert_int_equal(e.st.mamba_track[0], t0);
  const int32_t fresh = e.st.mamba_track[1];
  assert_true(fresh > 0 && fresh != t1 && fresh != t0 && fresh != e.st.mamba_slot);
  assert_int_equal(kvc_hybrid_req_pool_track_slots(w.hp, e.st.req_row)[1], fresh);
  assert_int_equal(kvc_mamba_pool_available(w.mp), avail - 1);
  int32_t s;
  kvc_radix_match m;
  KVT_OK(kvc_mamba_radix_cache_match_prefix(w.c, 0, e.toks, 16, &m, &s, NULL));
  assert_int_equal(m.len, 12);
  assert_int_equal(s, t1); /* the track slot itself, not a copy */
  state_rw(&w, s, got, 0);
  assert_memory_equal(got, pat, 128);
  assert_int_equal(sizes(&w).mamba_protected, 1); /* the lock moved to the new node */
  conserve(&w, flow, a, &e.st, 16 - 12, 3);
  /* Nothing new past cache_protected_len: nothing is inserted, no slot changes hands. */
  KVT_OK(kvc_mamba_radix_cache_donate_unfinished_req(w.c, flow, &e.st));
  assert_int_equal(e.st.mamba_track[1], fresh);
  assert_int_equal(kvc_mamba_pool_available(w.mp), avail - 1);
  /* The release: the running state and both track slots go back (no checkpoint fits). */
  e.st.mamba_track_seqlen[1] = 0;
  KVT_OK(kvc_flow_release(flow, one, 1, 1, NULL));
  conserve(&w, flow, a, NULL, 0, 0);
  assert_int_equal(sizes(&w).mamba_cached, 1);
  /* Without track buffers: refused, nothing changed. */
  world v;
  kvc_allocator *b;
  int64_t *out2;
  kvc_flow *flow2 = flow_test_make(&v, 8, 0, 1, &b, &out2);
  static ereq f;
  ereq_counting(&f, 40, 16);
  f.st.flags = KVC_REQ_CHUNKED;
  KVT_OK(kvc_mamba_radix_cache_match_req(v.c, flow2, &f.st, &f.rr, NULL));
  one[0] = &f.st;
  KVT_OK(kvc_flow_alloc_for_extend(flow2, one, 1, out2, NULL));
  KVT_STATUS(kvc_mamba_radix_cache_donate_unfinished_req(v.c, flow2, &f.st), KVC_ERR_UNSUPPORTED);
  assert_int_equal(sizes(&v).mamba_cached, 0);
  KVT_OK(kvc_flow_release(flow2, one, 1, 0, NULL));
  flow_world_free(&v, flow2, out2, b);
  flow_world_free(&w, flow, out, a);
}

/* A streaming session over the Mamba cache: its first turn matches a cached request
 * (FULL path + MAMBA node locked), the session keeps row, Mamba slot and lock between
 * turns, MAMBA eviction cannot take the locked state, and the release gives all back. */
static void test_sessions_over_mamba_radix(void **state) {
  (void)state;
  world w;
  flow_world_make(&w, 6, 0, 1);
  const kvc_prefix_cache inner = kvc_mamba_radix_cache_as_prefix_cache(w.c);
  kvc_session_cache *sc;
  KVT_OK(kvc_session_cache_create(kvt_ctx, &inner, &sc));
  const kvc_prefix_cache pc = kvc_session_cache_as_prefix_cache(sc);
  kvc_allocator *a;
  kvc_flow *flow = flow_make(&w, &a, 1, 256, &pc);
  int64_t *out = kvt_dev_alloc(1024 * sizeof(int64_t));
  static ereq x, t1;
  memset(&x, 0, sizeof x);
  for (int k = 0; k < 40; k++) x.toks[k] = k + 1;
  x.rr.tokens = x.toks;
  x.rr.num_tokens = 16;
  x.st.seq_len = 16;
  kvc_req_state *one[] = {&x.st};
  KVT_OK(kvc_mamba_radix_cache_match_req(w.c, flow, &x.st, &x.rr, NULL));
  KVT_OK(kvc_flow_alloc_for_extend(flow, one, 1, out, NULL));
  KVT_OK(kvc_flow_release(flow, one, 1, 1, NULL)); /* 16 tokens + a state cached */
  memset(&t1, 0, sizeof t1);
  for (int k = 0; k < 40; k++) t1.toks[k] = k + 1;
  t1.rr.tokens = t1.toks;
  t1.rr.num_tokens = 24;
  t1.st.seq_len = 24;
  t1.st.session_id = 9;
  KVT_OK(kvc_mamba_radix_cache_match_req(w.c, flow, &t1.st, &t1.rr, NULL));
  assert_int_equal(t1.st.prefix_len, 16);
  one[0] = &t1.st;
  KVT_OK(kvc_flow_alloc_for_extend(flow, one, 1, out, NULL));
  KVT_OK(kvc_flow_release(flow, one, 1, 1, NULL)); /* the session keeps row and lock */
  KVT_OK(kvc_flow_check(flow, NULL, 0));
  assert_int_equal(sizes(&w).mamba_protected, 1);
  int64_t ev, mev;
  KVT_STATUS(kvc_mamba_radix_cache_evict(w.c, flow, 0, 10, &ev, &mev), KVC_ERR_OUT_OF_SLOTS);
  KVT_OK(kvc_session_cache_release(sc, flow, 9));
  KVT_OK(kvc_flow_check(flow, NULL, 0));
  kvc_mamba_radix_sizes z = sizes(&w);
  assert_int_equal(z.mamba_protected + z.protected_size, 0);
  assert_int_equal(kvc_mamba_pool_available(w.mp) + z.mamba_cached, 6);
  KVT_OK(kvc_mamba_radix_cache_evict(w.c, flow, z.cached, z.mamba_cached, NULL, NULL));
  assert_int_equal(kvc_mamba_pool_available(w.mp), 6);
  assert_int_equal(kvc_allocator_available_size(a), 256);
  kvc_flow_destroy(flow);
  kvt_dev_free(out);
  kvc_allocator_destroy(a);
  kvc_session_cache_destroy(sc);
  world_free(&w);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_split_keeps_the_state_on_the_lower_node),
    cmocka_unit_test(test_match_ends_at_the_deepest_state_and_insert_attaches),
    cmocka_unit_test(test_locks_and_both_evictions),
    cmocka_unit_test(test_evictions_drop_stateless_ancestors),
    cmocka_unit_test(test_bad_input_changes_nothing),
    cmocka_unit_test(test_match_req_copies_the_state),
    cmocka_unit_test(test_flow_donates_the_running_state),
    cmocka_unit_test(test_flow_donates_a_track_checkpoint),
    cmocka_unit_test(test_chunk_checkpoint_hands_over_the_track_slot),
    cmocka_unit_test(test_chunks_cache_a_copy_of_the_state),
    cmocka_unit_test(test_failures_change_nothing),
    cmocka_unit_test(test_path_cap_takes_the_shallowest_state),
    cmocka_unit_test(test_path_cap_is_soft),
    cmocka_unit_test(test_failed_match_launch_changes_nothing),
    cmocka_unit_test(test_match_evicts_into_the_victim_slot),
    cmocka_unit_test(test_sessions_over_mamba_radix),
};
KVT_MAIN("mamba_radix", tests)
