/*
 * Model-based test of the SWA radix cache against a naive reference: a trie with one
 * entry per cached page (page size 1 or 2 by the seed's parity; its first full slot,
 * tombstone flag, FULL and SWA lock counts).
 * Random inserts (with random swa_evicted_seqlen; an overlapped unlocked tombstone past it
 * is revived from the incoming slots, its old slots freed after the duplicates), matches,
 * locks, early SWA releases,
 * unlocks and evictions of both components. Checked at every step:
 *   - insert's prefix and the duplicates it frees;
 *   - match: length and slots equal the reference's deepest valid end, computed per
 *     page (a full window of live tokens since the last tombstone, or none seen);
 *   - eviction frees only what is allowed: full frees are unlocked and take whole
 *     subtrees, SWA releases are live tokens outside every lock's last window; the
 *     returned counts match the frees;
 *   - sizes of both components equal the reference's, and the audit passes.
 * The same over the PURE and RING kinds (kvc_swa_radix_kind): no tombstones, matches
 * not gated, no SWA locks; PURE evicts max(full, SWA) tokens and reports one pool's
 * sizes twice, RING frees nothing for SWA and reports no SWA sizes.
 * Steps: 10^6 by default for HYBRID, a fifth of that for each other kind;
 * SWA_MODEL_STEPS=<n> changes it; KVT_SEED fixes the seed.
 */
#include "harness.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define V 3        /* vocabulary: small, so keys share prefixes */
#define VP 9       /* pages of up to 2 tokens over it: the trie's child index */
#define MAXN 8192  /* reference trie entries */
#define SLOTS 4096 /* allocator slots 1..SLOTS-1 */
#define MAXKEY 24
#define MAXLOCK 8

typedef struct ref {
  int32_t child[MAXN][VP], parent[MAXN]; /* one entry per page (PS tokens) */
  int64_t slot[MAXN];                    /* the page's first slot */
  int8_t used[MAXN], tomb[MAXN];
  int32_t full_lock[MAXN], swa_lock[MAXN];
  int32_t free_ids[MAXN], nfree;
  int32_t owner[SLOTS];      /* slot -> entry, 0 = not cached */
  int64_t free_slots[SLOTS]; /* free pages (first slots) */
  int32_t nslots;
  int64_t cached, swa_cached;
} ref;

typedef struct lk {
  void *node;
  uint64_t receipt;
  int chain;  /* taken through the prefix-cache adapter (sessions' node-only lock) */
  int32_t at; /* reference entry of the node's last token */
} lk;

static ref R;
static lk L[MAXLOCK];
static kvc_prefix_cache PC;
static int nlk;
static int64_t W, PS;
static int32_t KIND; /* kvc_swa_radix_kind of the run */
static int64_t n_hit, n_ev, n_swaev, n_rev;

typedef struct logs {
  int64_t full[SLOTS * 2], swa[SLOTS * 2];
  size_t nfull, nswa;
} logs;
static logs G;

static kvc_status log_full(void *u, const int64_t *s, size_t n) {
  (void)u;
  for (size_t i = 0; i < n; i++) G.full[G.nfull++] = s[i];
  return KVC_OK;
}
static kvc_status log_swa(void *u, const int64_t *s, size_t n) {
  (void)u;
  for (size_t i = 0; i < n; i++) G.swa[G.nswa++] = s[i];
  return KVC_OK;
}

/* The child index of the page at key[0:PS). */
static int32_t page_of(const int32_t *key) { return PS == 1 ? key[0] : key[0] * V + key[1]; }

static int32_t entry_new(int32_t parent, int32_t tok, int64_t slot, bool tomb) {
  const int32_t e = R.free_ids[--R.nfree];
  memset(R.child[e], 0, sizeof R.child[e]);
  R.parent[e] = parent;
  R.slot[e] = slot;
  R.used[e] = 1;
  tomb = tomb && KIND == KVC_SWA_RADIX_HYBRID;
  R.tomb[e] = tomb;
  R.full_lock[e] = R.swa_lock[e] = 0;
  R.child[parent][tok] = e;
  for (int64_t k = 0; k < PS; k++) R.owner[slot + k] = e;
  R.cached += PS;
  R.swa_cached += tomb ? 0 : PS;
  return e;
}

static void give_slot(int64_t s) { R.free_slots[R.nslots++] = s; }

static void sizes_agree(kvc_swa_radix_cache *c, uint64_t seed, int64_t step) {
  kvc_swa_radix_sizes s;
  KVT_OK(kvc_swa_radix_cache_sizes(c, &s));
  const int64_t swa = KIND == KVC_SWA_RADIX_RING ? 0 : R.swa_cached;
  if (s.cached != R.cached || s.swa_cached != swa || (KIND == KVC_SWA_RADIX_PURE && s.swa_evictable != s.evictable))
    fail_msg("seed %llu step %lld: sizes %lld/%lld, reference %lld/%lld", (unsigned long long)seed, (long long)step,
             (long long)s.cached, (long long)s.swa_cached, (long long)R.cached, (long long)R.swa_cached);
}

static void op_insert(kvc_swa_radix_cache *c, kvt_rng *g, uint64_t seed, int64_t step) {
  int32_t key[MAXKEY];
  int64_t slots[MAXKEY];
  const int64_t n = kvt_range(g, 1, MAXKEY) / PS * PS;
  if (n == 0 || R.nslots < n / PS || R.nfree < n / PS) return;
  for (int64_t i = 0; i < n; i++) key[i] = (int32_t)kvt_range(g, 0, V - 1);
  for (int64_t i = 0; i < n; i += PS) {
    const int64_t base = R.free_slots[--R.nslots];
    for (int64_t k = 0; k < PS; k++) slots[i + k] = base + k;
  }
  const int64_t ev = kvt_range(g, 0, 2) || KIND == KVC_SWA_RADIX_PURE ? 0 : kvt_range(g, 0, n) / PS * PS;
  int64_t want = 0;
  int32_t pe[MAXKEY];
  for (int32_t e = 0; want < n && R.child[e][page_of(key + want)]; want += PS)
    e = pe[want / PS] = R.child[e][page_of(key + want)];
  /* Revival (HYBRID): an overlapped page that is an unlocked tombstone at or past ev takes
   * the incoming slots; its old ones are freed after the duplicates of the others. */
  bool rev[MAXKEY];
  for (int64_t i = 0; i < want; i += PS)
    rev[i / PS] = KIND == KVC_SWA_RADIX_HYBRID && R.tomb[pe[i / PS]] && !R.full_lock[pe[i / PS]] && i >= ev;
  int64_t expect[MAXKEY], ne = 0;
  for (int64_t i = 0; i < want; i++)
    if (!rev[i / PS]) expect[ne++] = slots[i];
  for (int64_t i = 0; i < want; i++)
    if (rev[i / PS]) expect[ne++] = R.slot[pe[i / PS]] + i % PS;
  G.nfull = 0;
  int64_t prefix = -1;
  KVT_OK(kvc_swa_radix_cache_insert(c, NULL, 0, key, slots, n, ev, &prefix));
  if (prefix != want || (int64_t)G.nfull != want)
    fail_msg("seed %llu step %lld: insert prefix %lld (%zu freed), reference %lld", (unsigned long long)seed,
             (long long)step, (long long)prefix, G.nfull, (long long)want);
  for (int64_t i = 0; i < want; i++)
    if (G.full[i] != expect[i])
      fail_msg("seed %llu step %lld: free %lld is slot %lld, reference %lld (duplicates, then revived pages' old "
               "slots)",
               (unsigned long long)seed, (long long)step, (long long)i, (long long)G.full[i], (long long)expect[i]);
  for (int64_t i = 0; i < want; i += PS) {
    const int32_t e = pe[i / PS];
    if (!rev[i / PS]) {
      give_slot(slots[i]);
      continue;
    }
    give_slot(R.slot[e]);
    for (int64_t k = 0; k < PS; k++) R.owner[R.slot[e] + k] = 0, R.owner[slots[i] + k] = e;
    R.slot[e] = slots[i];
    R.tomb[e] = 0;
    R.swa_cached += PS;
    n_rev++;
  }
  int32_t e = 0;
  for (int64_t i = 0; i < n; i += PS)
    e = i < want ? R.child[e][page_of(key + i)] : entry_new(e, page_of(key + i), slots[i], i < ev);
}

/* The reference's deepest valid end of key[0:n) (page-floored): entries along the path,
 * one per page, in path[]. */
static int64_t ref_match(const int32_t *key, int64_t n, int32_t *path) {
  bool seen = false;
  int64_t since = 0, best = 0;
  int32_t e = 0;
  n = n / PS * PS;
  for (int64_t i = 0; i < n && R.child[e][page_of(key + i)]; i += PS) {
    e = R.child[e][page_of(key + i)];
    path[i / PS] = e;
    if (R.tomb[e]) seen = true, since = 0;
    else since += PS;
    if (!seen || since >= W || KIND != KVC_SWA_RADIX_HYBRID) best = i + PS;
  }
  return best;
}

static void op_match(kvc_swa_radix_cache *c, kvt_rng *g, uint64_t seed, int64_t step, bool lock) {
  int32_t key[MAXKEY], path[MAXKEY];
  const int64_t n = kvt_range(g, 1, MAXKEY);
  for (int64_t i = 0; i < n; i++) key[i] = (int32_t)kvt_range(g, 0, V - 1);
  const int64_t want = ref_match(key, n, path);
  kvc_radix_match m;
  KVT_OK(kvc_swa_radix_cache_match_prefix(c, 0, key, n, &m));
  if (m.len != want)
    fail_msg("seed %llu step %lld: match %lld, reference %lld", (unsigned long long)seed, (long long)step,
             (long long)m.len, (long long)want);
  for (int64_t i = 0; i < want; i++)
    if (m.slots[i] != R.slot[path[i / PS]] + i % PS)
      fail_msg("seed %llu step %lld: match slot %lld", (unsigned long long)seed, (long long)step, (long long)i);
  n_hit += want > 0;
  if (!lock || want == 0 || nlk == MAXLOCK) return;
  lk *l = &L[nlk++];
  l->node = m.node;
  l->at = path[(want - 1) / PS];
  l->chain = kvt_range(g, 0, 3) == 0;
  if (l->chain) {
    PC.inc_lock_ref(PC.self, m.node);
    l->receipt = KIND == KVC_SWA_RADIX_HYBRID ? 3 : 0; /* the chain receipt */
  } else {
    KVT_OK(kvc_swa_radix_cache_lock(c, m.node, &l->receipt));
    if (KIND != KVC_SWA_RADIX_HYBRID && l->receipt)
      fail_msg("seed %llu step %lld: an SWA receipt from a kind without SWA locks", (unsigned long long)seed,
               (long long)step);
  }
  int64_t k = 0;
  bool chain_on = true;
  for (int32_t x = l->at; x; x = R.parent[x], k++) {
    R.full_lock[x]++;
    chain_on = chain_on && !R.tomb[x];
    if (l->receipt && (l->chain ? chain_on : k * PS < W)) R.swa_lock[x]++;
  }
}

static void ref_swa_release(const lk *l) {
  int64_t k = 0;
  for (int32_t x = l->at; x && (l->chain ? !R.tomb[x] : k * PS < W); x = R.parent[x], k++) R.swa_lock[x]--;
}

static void op_unlock(kvc_swa_radix_cache *c, kvt_rng *g) {
  if (!nlk) return;
  const int i = (int)kvt_range(g, 0, nlk - 1);
  lk *l = &L[i];
  if (l->receipt && kvt_range(g, 0, 1)) { /* early SWA release */
    KVT_OK(kvc_swa_radix_cache_unlock_swa(c, l->node, &l->receipt));
    ref_swa_release(l);
    return;
  }
  if (l->chain && (l->receipt || KIND != KVC_SWA_RADIX_HYBRID))
    PC.dec_lock_ref(PC.self, l->node); /* logs, never fails silently: sizes */
  else KVT_OK(kvc_swa_radix_cache_unlock(c, l->node, l->receipt));
  if (l->receipt) ref_swa_release(l);
  for (int32_t x = l->at; x; x = R.parent[x]) R.full_lock[x]--;
  L[i] = L[--nlk];
}

static void op_evict(kvc_swa_radix_cache *c, kvt_rng *g, uint64_t seed, int64_t step, int64_t full_n) {
  const int64_t swa_n = kvt_range(g, 0, 1) ? kvt_range(g, 0, 60) : 0;
  G.nfull = G.nswa = 0;
  int64_t ev = -1, sev = -1;
  kvc_swa_radix_sizes before;
  KVT_OK(kvc_swa_radix_cache_sizes(c, &before));
  kvc_status st = kvc_swa_radix_cache_evict(c, NULL, full_n, swa_n, &ev, &sev);
  if (st == KVC_ERR_OUT_OF_SLOTS) return;
  KVT_OK(st);
  if (KIND != KVC_SWA_RADIX_HYBRID && G.nswa)
    fail_msg("seed %llu step %lld: %zu SWA releases by a kind without an SWA component", (unsigned long long)seed,
             (long long)step, G.nswa);
  /* PURE: max(full_n, swa_n) tokens of leaves, or every unlocked one (whole subtrees). */
  const int64_t want = full_n > swa_n ? full_n : swa_n;
  if (KIND == KVC_SWA_RADIX_PURE && ev < (want < before.evictable ? want : before.evictable))
    fail_msg("seed %llu step %lld: PURE evicted %lld of max(%lld, %lld)", (unsigned long long)seed, (long long)step,
             (long long)ev, (long long)full_n, (long long)swa_n);
  n_ev += (int64_t)G.nfull;
  n_swaev += (int64_t)G.nswa;
  /* SWA releases first (a node tombstoned, then deleted by a cascade, appears in both). */
  for (size_t i = 0; i < G.nswa; i++) {
    const int32_t e = R.owner[G.swa[i]];
    if (!e || G.swa[i] != R.slot[e] + (int64_t)(i % (size_t)PS))
      fail_msg("seed %llu step %lld: SWA release of slot %lld: not a whole cached page", (unsigned long long)seed,
               (long long)step, (long long)G.swa[i]);
    if (G.swa[i] != R.slot[e]) continue; /* a page once */
    if (!e || R.tomb[e] || R.swa_lock[e])
      fail_msg("seed %llu step %lld: SWA release of slot %lld (entry %d, tomb %d, swa lock %d)",
               (unsigned long long)seed, (long long)step, (long long)G.swa[i], e, e ? R.tomb[e] : -1,
               e ? R.swa_lock[e] : -1);
    R.tomb[e] = 1;
    R.swa_cached -= PS;
  }
  int64_t swa_with_full = 0;
  for (size_t i = 0; i < G.nfull; i++) {
    const int32_t e = R.owner[G.full[i]];
    if (!e || R.full_lock[e])
      fail_msg("seed %llu step %lld: full free of slot %lld", (unsigned long long)seed, (long long)step,
               (long long)G.full[i]);
    R.used[e] = 0; /* children checked below: every freed entry's subtree is freed */
  }
  for (size_t i = 0; i < G.nfull; i++) {
    const int32_t e = R.owner[G.full[i]];
    for (int t = 0; t < VP; t++)
      if (R.child[e][t] && R.used[R.child[e][t]])
        fail_msg("seed %llu step %lld: freed slot %lld keeps a cached child", (unsigned long long)seed, (long long)step,
                 (long long)G.full[i]);
  }
  for (size_t i = 0; i < G.nfull; i++) {
    const int64_t s = G.full[i];
    const int32_t e = R.owner[s];
    if (s != R.slot[e]) continue; /* a page once, at its first slot (a page is freed whole) */
    swa_with_full += R.tomb[e] ? 0 : PS;
    R.swa_cached -= R.tomb[e] ? 0 : PS;
    R.cached -= PS;
    for (int t = 0; t < VP; t++)
      if (R.child[R.parent[e]][t] == e) R.child[R.parent[e]][t] = 0;
    for (int64_t k = 0; k < PS; k++) R.owner[s + k] = 0;
    R.free_ids[R.nfree++] = e;
    give_slot(s);
  }
  if (KIND == KVC_SWA_RADIX_RING) swa_with_full = 0; /* the rings are the rows' */
  if (ev != (int64_t)G.nfull || sev != (int64_t)G.nswa + swa_with_full)
    fail_msg("seed %llu step %lld: evicted %lld/%lld, freed %zu full %zu SWA + %lld", (unsigned long long)seed,
             (long long)step, (long long)ev, (long long)sev, G.nfull, G.nswa, (long long)swa_with_full);
}

static void run(uint64_t seed, int64_t steps, int32_t kind) {
  kvt_rng g = {seed};
  KIND = kind;
  memset(&R, 0, sizeof R);
  nlk = 0;
  for (int32_t i = MAXN - 1; i >= 1; i--) R.free_ids[R.nfree++] = i;
  PS = (int64_t)(seed & 1) + 1;
  for (int64_t s = (SLOTS / PS - 1) * PS; s >= PS; s -= PS) give_slot(s);
  W = kvt_range(&g, 1, 6);
  kvc_swa_radix_cache_config cfg = KVC_SWA_RADIX_CACHE_CONFIG_INIT;
  cfg.sliding_window = (int32_t)W;
  cfg.radix.num_slots = SLOTS - PS;
  cfg.radix.page_size = (int32_t)PS;
  cfg.radix.free_slots = log_full;
  cfg.free_swa_slots = log_swa;
  cfg.kind = kind;
  kvc_swa_radix_cache *c;
  KVT_OK(kvc_swa_radix_cache_create(kvt_ctx, &cfg, &c));
  PC = kvc_swa_radix_cache_as_prefix_cache(c);
  for (int64_t step = 0; step < steps; step++) {
    const int64_t op = kvt_range(&g, 0, 99);
    if (R.cached > 1500 || R.nslots < MAXKEY) op_evict(c, &g, seed, step, 300);
    else if (op < 35) op_insert(c, &g, seed, step);
    else if (op < 75) op_match(c, &g, seed, step, op < 50);
    else if (op < 95) op_unlock(c, &g);
    else op_evict(c, &g, seed, step, kvt_range(&g, 0, 20));
    sizes_agree(c, seed, step);
    if ((step & 63) == 0) KVT_OK(kvc_swa_radix_cache_check(c));
  }
  while (nlk) op_unlock(c, &g);
  KVT_OK(kvc_swa_radix_cache_check(c));
  kvc_swa_radix_sizes z;
  KVT_OK(kvc_swa_radix_cache_sizes(c, &z));
  if (z.protected_size || z.swa_protected)
    fail_msg("seed %llu: locks left after every unlock: %lld full, %lld SWA tokens", (unsigned long long)seed,
             (long long)z.protected_size, (long long)z.swa_protected);
  if (getenv("SWA_MODEL_VERBOSE"))
    print_message("W %lld: %lld hits, %lld full frees, %lld SWA releases, %lld pages revived\n", (long long)W,
                  (long long)n_hit, (long long)n_ev, (long long)n_swaev, (long long)n_rev);
  kvc_swa_radix_cache_destroy(c);
}

static void test_swa_radix_matches_the_reference(void **state) {
  (void)state;
  const char *env = getenv("SWA_MODEL_STEPS");
  const int64_t steps = env ? atoll(env) : 1000000;
  const uint64_t seed = kvt_seed();
  for (int k = 0; k < 4; k++) run(seed + (uint64_t)k, steps / 4, KVC_SWA_RADIX_HYBRID);
  for (int k = 0; k < 2; k++) {
    run(seed + 4 + (uint64_t)k, steps / 10, KVC_SWA_RADIX_PURE);
    run(seed + 6 + (uint64_t)k, steps / 10, KVC_SWA_RADIX_RING);
  }
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_swa_radix_matches_the_reference),
};
KVT_MAIN("swa_radix_model", tests)
