/*
 * Model-based test of the Mamba radix cache against a naive reference: a trie with one
 * entry per cached page (page size 1, or 2 with the hybrid pool's track buffers, by the
 * seed's parity; its first slot, its Mamba state or 0, the FULL and MAMBA lock counts and
 * the state's LRU stamp).
 * Random inserts (each donating a fresh state; in two of the six runs under a
 * max_states_per_path cap, whose shallow-first removals the reference replays), matches, locks (the lock call or the
 * prefix-cache adapter's node-only lock), unlocks and evictions of both components.
 * Checked at every step:
 *   - insert's prefix, the duplicates it frees, and whether it took the state (the node
 *     at the key's end had none);
 *   - match: length, slots and state equal the reference's deepest entry with a state on
 *     the path, the full-attention length its plain trie walk;
 *   - MAMBA eviction frees exactly the k least recently used unlocked states (k the
 *     number asked, or all there are); a state's KV goes with it only when its entry is an
 *     unlocked childless one, and then only unlocked entries without other states, whole
 *     subtrees;
 *   - full eviction frees unlocked whole subtrees and exactly the states on them;
 *   - the returned counts match the frees, the sizes of both components equal the
 *     reference's, the Mamba pool's available count conserves, and the audit passes.
 * Steps: 10^6 by default; MAMBA_MODEL_STEPS=<n> changes it; KVT_SEED fixes the seed.
 */
#include "harness.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define V 3        /* vocabulary: small, so keys share prefixes */
#define VP 9       /* pages of up to 2 tokens over it: the trie's child index */
#define MAXN 8192  /* reference trie entries */
#define SLOTS 4096 /* allocator slots 1..SLOTS-1 */
#define STATES 256 /* Mamba pool slots */
#define MAXKEY 24
#define MAXLOCK 8

typedef struct ref {
  int32_t child[MAXN][VP], parent[MAXN]; /* one entry per page (PS tokens) */
  int32_t nchild[MAXN];
  int64_t slot[MAXN]; /* the page's first slot */
  int32_t state[MAXN];
  uint64_t stamp[MAXN]; /* LRU stamp of the entry's state */
  int8_t used[MAXN];
  int32_t full_lock[MAXN], mamba_lock[MAXN];
  int32_t free_ids[MAXN], nfree;
  int32_t owner[SLOTS];      /* slot -> entry, 0 = not cached */
  int64_t free_slots[SLOTS]; /* free pages (first slots) */
  int32_t nslots;
  int32_t state_at[STATES + 1]; /* state -> entry */
  int64_t cached, states, prot;
  uint64_t clock;
} ref;

typedef struct lk {
  void *node;
  int adapter; /* taken through the prefix-cache adapter (sessions' node-only lock) */
  int32_t at;  /* reference entry of the node's last page */
} lk;

static ref R;
static lk L[MAXLOCK];
static kvc_prefix_cache PC;
static int nlk;
static int64_t PS;
static int32_t CAP; /* max_states_per_path, 0 = none */
static int64_t n_hit, n_ev, n_mev;
static kvc_mamba_pool *MP;

typedef struct logs {
  int64_t full[SLOTS * 2];
  size_t nfull;
} logs;
static logs G;

static kvc_status log_full(void *u, const int64_t *s, size_t n) {
  (void)u;
  for (size_t i = 0; i < n; i++) G.full[G.nfull++] = s[i];
  return KVC_OK;
}

#define FAIL(seed, step, ...)                                                              \
  do {                                                                                     \
    print_message("seed %llu step %lld: ", (unsigned long long)(seed), (long long)(step)); \
    fail_msg(__VA_ARGS__);                                                                 \
  } while (0)

/* The child index of the page at key[0:PS). */
static int32_t page_of(const int32_t *key) { return PS == 1 ? key[0] : key[0] * V + key[1]; }

static int32_t entry_new(int32_t parent, int32_t tok, int64_t slot) {
  const int32_t e = R.free_ids[--R.nfree];
  memset(R.child[e], 0, sizeof R.child[e]);
  R.parent[e] = parent;
  R.nchild[e] = 0;
  R.nchild[parent]++;
  R.slot[e] = slot;
  R.state[e] = 0;
  R.used[e] = 1;
  R.full_lock[e] = R.mamba_lock[e] = 0;
  R.child[parent][tok] = e;
  for (int64_t k = 0; k < PS; k++) R.owner[slot + k] = e;
  R.cached += PS;
  return e;
}

static void give_slot(int64_t s) { R.free_slots[R.nslots++] = s; }

static void ref_attach(int32_t e, int32_t s) {
  R.state[e] = s;
  R.state_at[s] = e;
  R.stamp[e] = ++R.clock;
  R.states++;
  R.prot += R.mamba_lock[e] > 0;
}

static void ref_drop_state(int32_t e) {
  R.prot -= R.mamba_lock[e] > 0;
  R.state_at[R.state[e]] = 0;
  R.state[e] = 0;
  R.states--;
}

/* SGLang _evict_excess_path_states after a state was attached to entry t: from the root
 * down, states of entries other than t that are MAMBA-unlocked and have exactly one child
 * go until the path holds CAP states (or none of those is left). Their entries keep the
 * KV; the cache must have freed exactly those states. */
static void ref_cap(int32_t t, uint64_t seed, int64_t step) {
  static int32_t path[MAXN];
  int32_t d = 0, held = 0;
  for (int32_t e = t; e; e = R.parent[e]) {
    path[d++] = e;
    held += R.state[e] != 0;
  }
  for (int32_t i = d - 1; i >= 0 && held > CAP; i--) {
    const int32_t e = path[i];
    if (e == t) break;
    if (!R.state[e] || R.mamba_lock[e] > 0 || R.nchild[e] != 1) continue;
    if (kvc_mamba_pool_is_held(MP, R.state[e]))
      FAIL(seed, step, "path cap %d: state %d of entry %d (depth %d) kept", CAP, R.state[e], e, d - i);
    ref_drop_state(e);
    held--;
  }
}

static void sizes_agree(kvc_mamba_radix_cache *c, uint64_t seed, int64_t step) {
  kvc_mamba_radix_sizes s;
  KVT_OK(kvc_mamba_radix_cache_sizes(c, &s));
  int64_t prot = R.prot;
  if ((step & 63) == 0) { /* the running count against a recount */
    prot = 0;
    for (int32_t e = 1; e < MAXN; e++) prot += R.used[e] && R.state[e] && R.mamba_lock[e] > 0;
    if (prot != R.prot)
      FAIL(seed, step, "reference protected count %lld, recount %lld", (long long)R.prot, (long long)prot);
  }
  if (s.cached != R.cached || s.mamba_cached != R.states || s.mamba_protected != prot)
    FAIL(seed, step, "sizes %lld/%lld/%lld, reference %lld/%lld/%lld", (long long)s.cached, (long long)s.mamba_cached,
         (long long)s.mamba_protected, (long long)R.cached, (long long)R.states, (long long)prot);
  if (kvc_mamba_pool_available(MP) + R.states != STATES)
    FAIL(seed, step, "Mamba pool: %d available + %lld cached != %d", kvc_mamba_pool_available(MP), (long long)R.states,
         STATES);
}

static void op_insert(kvc_mamba_radix_cache *c, kvt_rng *g, uint64_t seed, int64_t step) {
  int32_t key[MAXKEY];
  int64_t slots[MAXKEY];
  const int64_t n = kvt_range(g, 1, MAXKEY) / PS * PS;
  if (n == 0 || R.nslots < n / PS || R.nfree < n / PS || kvc_mamba_pool_available(MP) == 0) return;
  for (int64_t i = 0; i < n; i++) key[i] = (int32_t)kvt_range(g, 0, V - 1);
  for (int64_t i = 0; i < n; i += PS) {
    const int64_t base = R.free_slots[--R.nslots];
    for (int64_t k = 0; k < PS; k++) slots[i + k] = base + k;
  }
  int32_t ms = 0;
  KVT_OK(kvc_mamba_pool_alloc(MP, 1, &ms, NULL));
  int64_t want = 0;
  int32_t end = 0;
  for (; want < n && R.child[end][page_of(key + want)]; want += PS) end = R.child[end][page_of(key + want)];
  G.nfull = 0;
  int64_t prefix = -1;
  int taken = -1;
  KVT_OK(kvc_mamba_radix_cache_insert(c, NULL, 0, key, slots, n, ms, &prefix, &taken));
  if (prefix != want || (int64_t)G.nfull != want)
    FAIL(seed, step, "insert prefix %lld (%zu freed), reference %lld", (long long)prefix, G.nfull, (long long)want);
  for (int64_t i = 0; i < want; i++) {
    if (G.full[i] != slots[i]) FAIL(seed, step, "duplicate %lld", (long long)i);
    if (i % PS == 0) give_slot(slots[i]);
  }
  int32_t e = 0;
  for (int64_t i = 0; i < n; i += PS)
    e = i < want ? R.child[e][page_of(key + i)] : entry_new(e, page_of(key + i), slots[i]);
  const int want_taken = R.state[e] == 0;
  if (taken != want_taken) FAIL(seed, step, "insert took the state: %d, reference %d", taken, want_taken);
  if (want_taken) {
    ref_attach(e, ms);
    if (CAP > 0) ref_cap(e, seed, step);
  } else {
    R.stamp[e] = ++R.clock; /* mamba_exist refreshes the existing state */
    KVT_OK(kvc_mamba_pool_free(MP, &ms, 1));
  }
}

/* The reference's match of key[0:n) (page-floored): *full the plain walk, returns the
 * deepest entry with a state (0 = none) and its length in *len. */
static int32_t ref_match(const int32_t *key, int64_t n, int32_t *path, int64_t *len, int64_t *full) {
  int32_t e = 0, best = 0;
  n = n / PS * PS;
  *len = 0;
  int64_t i = 0;
  for (; i < n && R.child[e][page_of(key + i)]; i += PS) {
    e = R.child[e][page_of(key + i)];
    path[i / PS] = e;
    if (R.state[e]) best = e, *len = i + PS;
  }
  *full = i;
  return best;
}

static void op_match(kvc_mamba_radix_cache *c, kvt_rng *g, uint64_t seed, int64_t step, bool lock) {
  int32_t key[MAXKEY], path[MAXKEY];
  const int64_t n = kvt_range(g, 1, MAXKEY);
  for (int64_t i = 0; i < n; i++) key[i] = (int32_t)kvt_range(g, 0, V - 1);
  int64_t want, full_want;
  const int32_t at = ref_match(key, n, path, &want, &full_want);
  kvc_radix_match m;
  int32_t s = -1;
  int64_t full = -1;
  KVT_OK(kvc_mamba_radix_cache_match_prefix(c, 0, key, n, &m, &s, &full));
  if (m.len != want || full != full_want || s != (at ? R.state[at] : 0))
    FAIL(seed, step, "match %lld (full %lld, state %d), reference %lld (full %lld, state %d)", (long long)m.len,
         (long long)full, s, (long long)want, (long long)full_want, at ? R.state[at] : 0);
  for (int64_t i = 0; i < want; i++)
    if (m.slots[i] != R.slot[path[i / PS]] + i % PS) FAIL(seed, step, "match slot %lld", (long long)i);
  if (at) R.stamp[at] = ++R.clock;
  n_hit += want > 0;
  if (!lock || want == 0 || nlk == MAXLOCK) return;
  lk *l = &L[nlk++];
  l->node = m.node;
  l->at = at;
  l->adapter = kvt_range(g, 0, 3) == 0;
  if (l->adapter) PC.inc_lock_ref(PC.self, m.node);
  else KVT_OK(kvc_mamba_radix_cache_lock(c, m.node));
  for (int32_t x = at; x; x = R.parent[x]) R.full_lock[x]++;
  R.prot += R.mamba_lock[at]++ == 0 && R.state[at];
}

static void op_unlock(kvc_mamba_radix_cache *c, kvt_rng *g) {
  if (!nlk) return;
  const int i = (int)kvt_range(g, 0, nlk - 1);
  lk *l = &L[i];
  if (l->adapter) PC.dec_lock_ref(PC.self, l->node); /* a refusal would show in the sizes */
  else KVT_OK(kvc_mamba_radix_cache_unlock(c, l->node));
  for (int32_t x = l->at; x; x = R.parent[x]) R.full_lock[x]--;
  R.prot -= --R.mamba_lock[l->at] == 0 && R.state[l->at];
  L[i] = L[--nlk];
}

/* The states the reference holds that the pool no longer does: into gone[], by entry. */
static int32_t states_gone(int32_t *gone) {
  int32_t k = 0;
  for (int32_t s = 1; s <= STATES; s++)
    if (R.state_at[s] && !kvc_mamba_pool_is_held(MP, s)) gone[k++] = R.state_at[s];
  return k;
}

static int cmp_stamp(const void *a, const void *b) {
  const uint64_t x = R.stamp[*(const int32_t *)a], y = R.stamp[*(const int32_t *)b];
  return (x > y) - (x < y);
}

static void op_evict(kvc_mamba_radix_cache *c, kvt_rng *g, uint64_t seed, int64_t step, int64_t full_n) {
  const int64_t mamba_n = full_n == 0 ? kvt_range(g, 1, 6) : kvt_range(g, 0, 1) ? kvt_range(g, 0, 6) : 0;
  /* Before: the unlocked states in LRU order (what a MAMBA-only eviction must take). */
  static int32_t order[STATES];
  int32_t nord = 0;
  for (int32_t s = 1; s <= STATES; s++)
    if (R.state_at[s] && R.mamba_lock[R.state_at[s]] == 0) order[nord++] = R.state_at[s];
  qsort(order, (size_t)nord, sizeof *order, cmp_stamp);
  G.nfull = 0;
  int64_t ev = -1, mev = -1;
  kvc_status st = kvc_mamba_radix_cache_evict(c, NULL, full_n, mamba_n, &ev, &mev);
  if (st == KVC_ERR_OUT_OF_SLOTS) {
    if (G.nfull || (full_n > 0 && R.cached > 0 && nlk == 0) || (mamba_n > 0 && nord > 0))
      FAIL(seed, step, "OUT_OF_SLOTS with %lld cached, %d unlocked states", (long long)R.cached, nord);
    return;
  }
  KVT_OK(st);
  static int32_t gone[STATES];
  const int32_t ngone = states_gone(gone);
  n_ev += (int64_t)G.nfull;
  n_mev += ngone;
  if (mev != ngone || ev != (int64_t)G.nfull)
    FAIL(seed, step, "evicted %lld tokens / %lld states, freed %zu / %d", (long long)ev, (long long)mev, G.nfull,
         ngone);
  if (full_n == 0) { /* exactly the LRU-most unlocked states */
    const int32_t k = (int32_t)(mamba_n < nord ? mamba_n : nord);
    if (ngone != k)
      FAIL(seed, step, "MAMBA eviction of %lld freed %d states, %d unlocked", (long long)mamba_n, ngone, nord);
    for (int32_t i = 0; i < k; i++)
      if (kvc_mamba_pool_is_held(MP, R.state[order[i]]))
        FAIL(seed, step, "state of entry %d (LRU rank %d) kept", order[i], i);
  }
  /* Every full free: unlocked, its subtree freed too. */
  for (size_t i = 0; i < G.nfull; i++) {
    const int32_t e = R.owner[G.full[i]];
    if (!e || R.full_lock[e]) FAIL(seed, step, "full free of slot %lld", (long long)G.full[i]);
    R.used[e] = 0;
  }
  for (size_t i = 0; i < G.nfull; i++) {
    const int32_t e = R.owner[G.full[i]];
    for (int t = 0; t < VP; t++)
      if (R.child[e][t] && R.used[R.child[e][t]])
        FAIL(seed, step, "freed slot %lld keeps a cached child", (long long)G.full[i]);
  }
  /* A freed entry's state is freed; a kept state's entry either kept its KV, or (MAMBA
   * eviction of a state) the state was on an entry that kept children or locks. */
  for (int32_t i = 0; i < ngone; i++) {
    const int32_t e = gone[i];
    if (R.used[e] && R.nchild[e] == 0 && R.full_lock[e] == 0)
      FAIL(seed, step, "state of unlocked childless entry %d freed without its KV", e);
    if (R.mamba_lock[e]) FAIL(seed, step, "state of MAMBA-locked entry %d freed", e);
  }
  for (size_t i = 0; i < G.nfull; i++) {
    const int32_t e = R.owner[G.full[i]];
    if (G.full[i] != R.slot[e]) continue;
    if (R.state[e] && kvc_mamba_pool_is_held(MP, R.state[e]))
      FAIL(seed, step, "entry %d freed, its state %d kept", e, R.state[e]);
  }
  for (int32_t i = 0; i < ngone; i++) ref_drop_state(gone[i]);
  for (size_t i = 0; i < G.nfull; i++) {
    const int64_t s = G.full[i];
    const int32_t e = R.owner[s];
    if (s != R.slot[e]) continue; /* a page once, at its first slot (a page is freed whole) */
    R.cached -= PS;
    for (int t = 0; t < VP; t++)
      if (R.child[R.parent[e]][t] == e) R.child[R.parent[e]][t] = 0;
    R.nchild[R.parent[e]]--;
    for (int64_t k = 0; k < PS; k++) R.owner[s + k] = 0;
    R.free_ids[R.nfree++] = e;
    give_slot(s);
  }
}

static void run(uint64_t seed, int64_t steps, int32_t cap) {
  kvt_rng g = {seed};
  CAP = cap;
  memset(&R, 0, sizeof R);
  nlk = 0;
  for (int32_t i = MAXN - 1; i >= 1; i--) R.free_ids[R.nfree++] = i;
  PS = (int64_t)(seed & 1) + 1;
  for (int64_t s = (SLOTS / PS - 1) * PS; s >= PS; s -= PS) give_slot(s);
  kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rc.size = 4;
  rc.max_context_len = 64;
  kvc_req_to_token_pool *rp;
  KVT_OK(kvc_req_to_token_pool_create(kvt_ctx, &rc, &rp));
  kvc_mamba_pool_config mc = KVC_MAMBA_POOL_CONFIG_INIT;
  kvc_mamba_shape conv = {1, 0, {4, 0, 0}};
  mc.size = STATES;
  mc.num_layers = 1;
  mc.num_conv = 1;
  mc.conv_shapes = &conv;
  mc.temporal_shape[0] = mc.temporal_shape[1] = mc.temporal_shape[2] = 1;
  mc.flags = KVC_MAMBA_POOL_NO_ZERO_ON_ALLOC;
  KVT_OK(kvc_mamba_pool_create(kvt_ctx, &mc, &MP));
  kvc_hybrid_req_pool_config hc = KVC_HYBRID_REQ_POOL_CONFIG_INIT;
  hc.flags = PS > 1 ? KVC_HYBRID_TRACK : 0;
  hc.req_pool = rp;
  hc.mamba_pool = MP;
  kvc_hybrid_req_pool *hp;
  KVT_OK(kvc_hybrid_req_pool_create(kvt_ctx, &hc, &hp));
  kvc_mamba_radix_cache_config cfg = KVC_MAMBA_RADIX_CACHE_CONFIG_INIT;
  cfg.radix.num_slots = SLOTS - PS;
  cfg.radix.page_size = (int32_t)PS;
  cfg.radix.free_slots = log_full;
  cfg.hybrid_req_pool = hp;
  cfg.max_states_per_path = cap;
  kvc_mamba_radix_cache *c;
  KVT_OK(kvc_mamba_radix_cache_create(kvt_ctx, &cfg, &c));
  PC = kvc_mamba_radix_cache_as_prefix_cache(c);
  for (int64_t step = 0; step < steps; step++) {
    const int64_t op = kvt_range(&g, 0, 99);
    if (R.cached > 1500 || R.nslots < MAXKEY) op_evict(c, &g, seed, step, 300);
    else if (op < 35) op_insert(c, &g, seed, step);
    else if (op < 75) op_match(c, &g, seed, step, op < 50);
    else if (op < 92) op_unlock(c, &g);
    else op_evict(c, &g, seed, step, op < 96 ? 0 : kvt_range(&g, 1, 20));
    sizes_agree(c, seed, step);
    if ((step & 63) == 0) KVT_OK(kvc_mamba_radix_cache_check(c));
  }
  while (nlk) op_unlock(c, &g);
  KVT_OK(kvc_mamba_radix_cache_check(c));
  kvc_mamba_radix_sizes z;
  KVT_OK(kvc_mamba_radix_cache_sizes(c, &z));
  if (z.protected_size || z.mamba_protected)
    fail_msg("seed %llu: locks left after every unlock: %lld tokens, %lld states", (unsigned long long)seed,
             (long long)z.protected_size, (long long)z.mamba_protected);
  if (getenv("MAMBA_MODEL_VERBOSE"))
    print_message("PS %lld: %lld hits, %lld full frees, %lld states freed\n", (long long)PS, (long long)n_hit,
                  (long long)n_ev, (long long)n_mev);
  kvc_mamba_radix_cache_destroy(c);
  kvc_hybrid_req_pool_destroy(hp);
  kvc_mamba_pool_destroy(MP);
  kvc_req_to_token_pool_destroy(rp);
}

static void test_mamba_radix_matches_the_reference(void **state) {
  (void)state;
  const char *env = getenv("MAMBA_MODEL_STEPS");
  const int64_t steps = env ? atoll(env) : 1000000;
  const uint64_t seed = kvt_seed();
  /* Runs 0-3 without a path cap; 4-5 with caps of 1-3 states (both page sizes). */
  for (int k = 0; k < 6; k++) run(seed + (uint64_t)k, steps / 6, k < 4 ? 0 : 1 + (int32_t)((seed + (uint64_t)k) % 3));
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_mamba_radix_matches_the_reference),
};
KVT_MAIN("mamba_radix_model", tests)
