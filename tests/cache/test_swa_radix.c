/*
 * SWA radix cache (SGLang's unified cache SWA component) rules with worked examples: the
 * window match rule, tombstones from swa_evicted_seqlen, FULL locks on the path and SWA
 * locks on the last window (early release, splits under a lock), the two evictions
 * (tombstone an inner node, a leaf cascades, childless tombstone chains go), bad input
 * changing nothing, and the cache behind a flow with an SWA allocator (SWA pool mode),
 * with conservation per component.
 */
#include "../flow/flow_util.h"
#include "../pool/alloc_test_util.h"
#include "core/fault.h"

/* Frees the cache makes without a flow: full slots and SWA sides, in order. */
typedef struct swalog {
  int64_t full[4096], swa[4096];
  size_t nfull, nswa;
} swalog;

static kvc_status log_full(void *user, const int64_t *s, size_t n) {
  swalog *l = user;
  for (size_t i = 0; i < n && l->nfull < 4096; i++) l->full[l->nfull++] = s[i];
  return KVC_OK;
}
static kvc_status log_swa(void *user, const int64_t *s, size_t n) {
  swalog *l = user;
  for (size_t i = 0; i < n && l->nswa < 4096; i++) l->swa[l->nswa++] = s[i];
  return KVC_OK;
}

static kvc_swa_radix_cache *make(int32_t window, int32_t ps, swalog *log) {
  kvc_swa_radix_cache_config c = KVC_SWA_RADIX_CACHE_CONFIG_INIT;
  c.sliding_window = window;
  c.radix.page_size = ps;
  c.radix.num_slots = 1 << 12;
  c.radix.free_slots = log_full;
  c.radix.free_user = log;
  c.free_swa_slots = log_swa;
  c.free_swa_user = log;
  kvc_swa_radix_cache *sc = NULL;
  KVT_OK(kvc_swa_radix_cache_create(kvt_ctx, &c, &sc));
  return sc;
}

/* Inserts tokens[0:n) -> slots base, base + 1, ...; returns the prefix found. */
static int64_t put(kvc_swa_radix_cache *c, const int32_t *t, int64_t n, int64_t base, int64_t evicted) {
  int64_t s[512], prefix = -1;
  for (int64_t i = 0; i < n; i++) s[i] = base + i;
  KVT_OK(kvc_swa_radix_cache_insert(c, NULL, 0, t, s, n, evicted, &prefix));
  KVT_OK(kvc_swa_radix_cache_check(c));
  return prefix;
}

static kvc_radix_match get(kvc_swa_radix_cache *c, const int32_t *t, int64_t n) {
  kvc_radix_match m;
  KVT_OK(kvc_swa_radix_cache_match_prefix(c, 0, t, n, &m));
  KVT_OK(kvc_swa_radix_cache_check(c));
  return m;
}

static kvc_swa_radix_sizes sizes(const kvc_swa_radix_cache *c) {
  kvc_swa_radix_sizes s;
  KVT_OK(kvc_swa_radix_cache_sizes(c, &s));
  return s;
}

static const int32_t T[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

/* Window 4. [1..10] inserted with swa_evicted_seqlen 4: a tombstone [1..4] and a live
 * [5..10]. A match is valid where >= 4 live tokens follow the last tombstone. */
static void test_match_needs_a_window_after_the_last_tombstone(void **state) {
  (void)state;
  swalog log = {0};
  kvc_swa_radix_cache *c = make(4, 1, &log);
  assert_int_equal(put(c, T, 10, 101, 4), 0);
  kvc_swa_radix_sizes s = sizes(c);
  assert_int_equal(s.cached, 10);
  assert_int_equal(s.swa_cached, 6);
  kvc_radix_match m = get(c, T, 10);
  assert_int_equal(m.len, 10);
  assert_int_equal(m.slots[9], 110);
  m = get(c, T, 8); /* 4 live after the tombstone: valid (the walk splits at 8) */
  assert_int_equal(m.len, 8);
  m = get(c, T, 7); /* 3 live: not a window; the tombstone itself is not either: root */
  assert_int_equal(m.len, 0);
  m = get(c, T, 3); /* inside the tombstone */
  assert_int_equal(m.len, 0);
  /* A path with no tombstone is valid anywhere, shorter than a window included. */
  const int32_t u[] = {50, 51, 52};
  assert_int_equal(put(c, u, 3, 201, 0), 0);
  assert_int_equal(get(c, u, 2).len, 2);
  /* Two tombstones: the deepest valid end may lie before the last one. [1..4] tomb,
   * [5..8] live, then a new branch [9',10'] tomb (inserted past the window), [11'] live. */
  const int32_t v[] = {1, 2, 3, 4, 5, 6, 7, 8, 90, 91, 92};
  assert_int_equal(put(c, v, 11, 301, 10), 8);
  m = get(c, v, 11);
  assert_int_equal(m.len, 8); /* one live token after the second tombstone */
  assert_int_equal(m.slots[7], 108);
  kvc_swa_radix_cache_destroy(c);
}

/* A match stamps only up to its valid end: the nodes it walks past keep the ticks they
 * had, so they stay first in the SWA LRU (SGLang 0.5.23's unified core). Window 4: A =
 * [1..4] live, then [1..10] with swa_evicted_seqlen 8 puts a tombstone B = [5..8] and a
 * live leaf C = [9, 10] under it; X = [50..54] comes last. A match of [1..10] is valid at
 * A only: A is stamped, B and C are not, so the first SWA victim is C (older than X),
 * not X (what it would be had the walk stamped C). */
static void test_match_keeps_ticks_past_its_valid_end(void **state) {
  (void)state;
  swalog log = {0};
  kvc_swa_radix_cache *c = make(4, 1, &log);
  assert_int_equal(put(c, T, 4, 101, 0), 0);
  assert_int_equal(put(c, T, 10, 201, 8), 4); /* [5..8] -> 205.., a tombstone; [9, 10] live */
  const int32_t x[] = {50, 51, 52, 53, 54};
  assert_int_equal(put(c, x, 5, 301, 0), 0);
  assert_int_equal(sizes(c).swa_cached, 4 + 2 + 5);
  kvc_radix_match m = get(c, T, 10);
  assert_int_equal(m.len, 4); /* two live tokens after the tombstone: not a window */
  assert_int_equal(m.slots[3], 104);
  int64_t ev, sev;
  const size_t before = log.nfull; /* the insert's duplicates 201..204 */
  KVT_OK(kvc_swa_radix_cache_evict(c, NULL, 0, 1, &ev, &sev));
  /* A leaf's SWA eviction frees it whole (both sides through the full hook), and the
   * tombstone B above it, childless now, goes with it. */
  assert_int_equal(sev, 2);
  assert_int_equal(ev, 6);
  assert_int_equal((int)(log.nfull - before), 6);
  assert_int_equal(log.full[before], 209); /* C, not X's 301 */
  assert_int_equal(get(c, x, 5).len, 5);
  KVT_OK(kvc_swa_radix_cache_check(c));
  kvc_swa_radix_cache_destroy(c);
}

/* The out-of-window part of a new leaf is a tombstone; what was present is untouched;
 * evicted past the key makes the whole new part a tombstone. */
static void test_insert_tombstones_the_out_of_window_part(void **state) {
  (void)state;
  swalog log = {0};
  kvc_swa_radix_cache *c = make(4, 2, &log);
  assert_int_equal(put(c, T, 6, 100, 0), 0); /* slots 100.. are page aligned */
  assert_int_equal(sizes(c).swa_cached, 6);
  /* Extends [1..6] to [1..12] with SWA freed below 8: the new [7..12] has [7,8] tomb. */
  int64_t sl[12];
  for (int i = 0; i < 12; i++) sl[i] = 200 + i;
  int64_t prefix;
  KVT_OK(kvc_swa_radix_cache_insert(c, NULL, 0, T, sl, 12, 8, &prefix));
  assert_int_equal(prefix, 6);
  assert_int_equal((int)log.nfull, 6); /* the duplicates of [1..6] */
  kvc_swa_radix_sizes s = sizes(c);
  assert_int_equal(s.cached, 12);
  assert_int_equal(s.swa_cached, 10);
  kvc_radix_stats st;
  KVT_OK(kvc_swa_radix_cache_stats(c, &st));
  /* [1,2] [3..6] (the first leaf's live part capped at one page-aligned window: SGLang's
   * _maybe_split_leaf_for_swa_lock), [7,8] tombstone, [9..12] */
  assert_int_equal(st.nodes, 4);
  /* Window 4 after the [7,8] tombstone: valid at 12 only. */
  assert_int_equal(get(c, T, 12).len, 12);
  assert_int_equal(get(c, T, 10).len, 6);
  const int32_t w[] = {70, 71, 72, 73};
  int64_t ws[] = {300, 301, 302, 303};
  KVT_OK(kvc_swa_radix_cache_insert(c, NULL, 0, w, ws, 4, 6, &prefix)); /* all out of window */
  s = sizes(c);
  assert_int_equal(s.cached, 16);
  assert_int_equal(s.swa_cached, 10);
  assert_int_equal(get(c, w, 4).len, 0);
  /* A misaligned evicted length is refused, nothing changed. */
  const int32_t x[] = {80, 81};
  int64_t xs[] = {400, 401};
  KVT_STATUS(kvc_swa_radix_cache_insert(c, NULL, 0, x, xs, 2, 1, &prefix), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_swa_radix_cache_insert(c, NULL, 0, x, xs, 2, -2, &prefix), KVC_ERR_INVALID_ARGUMENT);
  assert_int_equal(sizes(c).cached, 16);
  KVT_OK(kvc_swa_radix_cache_check(c));
  kvc_swa_radix_cache_destroy(c);
}

/* Nodes of 3 tokens: [1..3] [4..6] [7..9]. Window 4: a lock on the deepest locks FULL on
 * all 9 tokens and SWA on the two last nodes (6 tokens, the first that cover 4). */
static void test_locks_full_path_swa_last_window(void **state) {
  (void)state;
  swalog log = {0};
  kvc_swa_radix_cache *c = make(4, 1, &log);
  put(c, T, 3, 101, 0);
  put(c, T, 6, 101, 0);
  put(c, T, 9, 101, 0);
  kvc_radix_match m = get(c, T, 9);
  uint64_t r = 0;
  KVT_OK(kvc_swa_radix_cache_lock(c, m.node, &r));
  assert_true(r != 0);
  kvc_swa_radix_sizes s = sizes(c);
  assert_int_equal(s.protected_size, 9);
  assert_int_equal(s.swa_protected, 6);
  assert_int_equal(s.swa_evictable, 3);
  /* A match ending inside a locked node splits it: both halves keep the lock. */
  assert_int_equal(get(c, T, 5).len, 5);
  s = sizes(c);
  assert_int_equal(s.protected_size, 9);
  assert_int_equal(s.swa_protected, 6);
  /* Early SWA release: FULL stays. */
  uint64_t r2 = r;
  KVT_OK(kvc_swa_radix_cache_unlock_swa(c, m.node, &r2));
  assert_int_equal(r2, 0);
  s = sizes(c);
  assert_int_equal(s.swa_protected, 0);
  assert_int_equal(s.protected_size, 9);
  KVT_STATUS(kvc_swa_radix_cache_unlock(c, m.node, r), KVC_ERR_MISUSE); /* SWA released already */
  KVT_OK(kvc_swa_radix_cache_unlock(c, m.node, r2));
  s = sizes(c);
  assert_int_equal(s.protected_size, 0);
  KVT_STATUS(kvc_swa_radix_cache_unlock(c, m.node, 0), KVC_ERR_MISUSE);
  /* A lock that reaches the root before a window: receipt uuid 0, released whole. */
  m = get(c, T, 3);
  KVT_OK(kvc_swa_radix_cache_lock(c, m.node, &r));
  assert_int_equal(sizes(c).swa_protected, 3);
  KVT_OK(kvc_swa_radix_cache_unlock(c, m.node, r));
  assert_int_equal(sizes(c).swa_protected, 0);
  KVT_OK(kvc_swa_radix_cache_check(c));
  kvc_swa_radix_cache_destroy(c);
}

/* Inner node A [1..4] with leaves B [5..8] and C [20..23]; window 4. */
static kvc_swa_radix_cache *abc(swalog *log, kvc_radix_match *mc) {
  kvc_swa_radix_cache *c = make(4, 1, log);
  put(c, T, 8, 101, 0);
  const int32_t y[] = {1, 2, 3, 4, 20, 21, 22, 23};
  int64_t ys[8] = {101, 102, 103, 104, 201, 202, 203, 204};
  int64_t prefix;
  KVT_OK(kvc_swa_radix_cache_insert(c, NULL, 0, y, ys, 8, 0, &prefix));
  *mc = get(c, y, 8);
  return c;
}

/* SWA eviction with C locked: B (an unlocked leaf) goes whole, A (full-locked through C)
 * becomes a tombstone; C stays valid (4 live tokens after A). Then with C unlocked, C goes
 * and takes the childless tombstone A with it. */
static void test_swa_eviction_tombstones_and_cascades(void **state) {
  (void)state;
  swalog log = {0};
  kvc_radix_match mc;
  kvc_swa_radix_cache *c = abc(&log, &mc);
  uint64_t r;
  KVT_OK(kvc_swa_radix_cache_lock(c, mc.node, &r));
  assert_int_equal(sizes(c).swa_protected, 4); /* C alone covers the window */
  int64_t ev, sev;
  KVT_OK(kvc_swa_radix_cache_evict(c, NULL, 0, 100, &ev, &sev));
  assert_int_equal(sev, 8);
  assert_int_equal(ev, 4);
  assert_int_equal((int)log.nfull, 4);
  assert_int_equal(log.full[0], 105); /* B */
  assert_int_equal((int)log.nswa, 4);
  assert_int_equal(log.swa[0], 101); /* A's SWA side */
  kvc_swa_radix_sizes s = sizes(c);
  assert_int_equal(s.cached, 8);
  assert_int_equal(s.swa_cached, 4);
  const int32_t y[] = {1, 2, 3, 4, 20, 21, 22, 23};
  assert_int_equal(get(c, y, 8).len, 8);
  assert_int_equal(get(c, T, 8).len, 0);
  KVT_STATUS(kvc_swa_radix_cache_evict(c, NULL, 0, 4, &ev, &sev), KVC_ERR_OUT_OF_SLOTS); /* all locked */
  KVT_OK(kvc_swa_radix_cache_unlock(c, mc.node, r));
  KVT_OK(kvc_swa_radix_cache_evict(c, NULL, 0, 1, &ev, &sev));
  assert_int_equal(sev, 4);
  assert_int_equal(ev, 8); /* C, then the tombstone chain A */
  assert_int_equal((int)log.nfull, 12);
  assert_int_equal(log.full[8], 101);
  s = sizes(c);
  assert_int_equal(s.cached, 0);
  assert_int_equal(s.swa_cached, 0);
  KVT_OK(kvc_swa_radix_cache_check(c));
  kvc_swa_radix_cache_destroy(c);
}

/* Full eviction frees leaves whole, counting their live SWA side; the childless
 * tombstones above a victim go with it, full tokens only, in the same call (SGLang's
 * _iteratively_delete_tombstone_leaf: no leaf is left a tombstone), whatever was asked. */
static void test_full_eviction_counts_both_components(void **state) {
  (void)state;
  swalog log = {0};
  kvc_swa_radix_cache *c = make(4, 1, &log);
  put(c, T, 8, 101, 4); /* tomb [1..4], live [5..8] */
  int64_t ev, sev;
  KVT_OK(kvc_swa_radix_cache_evict(c, NULL, 1, 0, &ev, &sev));
  assert_int_equal(ev, 8);
  assert_int_equal(sev, 4);
  assert_int_equal((int)log.nswa, 0); /* the SWA side goes with the full free */
  assert_int_equal((int)log.nfull, 8);
  assert_int_equal(log.full[0], 105); /* the leaf, then the tombstone */
  assert_int_equal(log.full[4], 101);
  assert_int_equal(sizes(c).cached, 0);
  KVT_STATUS(kvc_swa_radix_cache_evict(c, NULL, 1, 1, &ev, &sev), KVC_ERR_OUT_OF_SLOTS);
  /* A locked tombstone stays: [1..4] tomb with [5..8] and [20..23] below it; [20..23]
   * locked, so evicting [5..8] leaves the tombstone (it has a child). */
  put(c, T, 8, 201, 4);
  const int32_t y[] = {1, 2, 3, 4, 20, 21, 22, 23};
  int64_t ys[8] = {401, 402, 403, 404, 301, 302, 303, 304}, prefix; /* 401..: duplicates */
  KVT_OK(kvc_swa_radix_cache_insert(c, NULL, 0, y, ys, 8, 4, &prefix));
  kvc_radix_match m = get(c, y, 8);
  assert_int_equal(m.len, 8);
  uint64_t r;
  KVT_OK(kvc_swa_radix_cache_lock(c, m.node, &r));
  KVT_OK(kvc_swa_radix_cache_evict(c, NULL, 1, 0, &ev, &sev));
  assert_int_equal(ev, 4);
  assert_int_equal(sizes(c).cached, 8);
  KVT_OK(kvc_swa_radix_cache_unlock(c, m.node, r));
  KVT_OK(kvc_swa_radix_cache_evict(c, NULL, 1, 0, &ev, &sev));
  assert_int_equal(ev, 8);
  assert_int_equal(sizes(c).cached, 0);
  KVT_OK(kvc_swa_radix_cache_check(c));
  kvc_swa_radix_cache_destroy(c);
}

static void test_bad_input_changes_nothing(void **state) {
  (void)state;
  swalog log = {0};
  kvc_swa_radix_cache_config cfg = KVC_SWA_RADIX_CACHE_CONFIG_INIT;
  cfg.radix.num_slots = 64;
  kvc_swa_radix_cache *c = NULL;
  KVT_STATUS(kvc_swa_radix_cache_create(kvt_ctx, &cfg, &c), KVC_ERR_INVALID_ARGUMENT); /* window 0 */
  cfg.sliding_window = 4;
  cfg.struct_size = 8;
  KVT_STATUS(kvc_swa_radix_cache_create(kvt_ctx, &cfg, &c), KVC_ERR_VERSION);
  assert_null(c);
  KVT_STATUS(kvc_swa_radix_cache_check(NULL), KVC_ERR_INVALID_ARGUMENT);
  kvc_radix_match mc;
  c = abc(&log, &mc);
  const kvc_swa_radix_sizes before = sizes(c);
  uint64_t r;
  KVT_STATUS(kvc_swa_radix_cache_lock(c, (void *)&log, &r), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_swa_radix_cache_lock(c, mc.node, NULL), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_swa_radix_cache_evict(c, NULL, -1, 0, NULL, NULL), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_swa_radix_cache_unlock_swa(c, mc.node, &(uint64_t){3}), KVC_ERR_MISUSE);
  /* A receipt of another path is refused, and the FULL lock is left as it was. */
  KVT_OK(kvc_swa_radix_cache_lock(c, mc.node, &r));
  kvc_radix_match mb = get(c, T, 8);
  uint64_t rb;
  KVT_OK(kvc_swa_radix_cache_lock(c, mb.node, &rb));
  KVT_STATUS(kvc_swa_radix_cache_unlock(c, mc.node, rb), KVC_ERR_MISUSE);
  KVT_OK(kvc_swa_radix_cache_unlock(c, mb.node, rb));
  KVT_OK(kvc_swa_radix_cache_unlock(c, mc.node, r));
  kvc_swa_radix_sizes after = sizes(c);
  assert_memory_equal(&before, &after, sizeof before);
  /* A lock whose window holds a tombstone is not a valid end: refused. */
  put(c, T, 12, 501, 12); /* [9..12] tomb under B */
  kvc_radix_match mt;
  KVT_OK(kvc_swa_radix_cache_match_prefix(c, 0, T, 12, &mt));
  assert_int_equal(mt.len, 8);
  KVT_OK(kvc_swa_radix_cache_check(c));
  kvc_swa_radix_cache_destroy(c);
}

typedef struct evlog {
  int kind[64], component[64];
  size_t pages[64];
  int n;
} evlog;

static void on_event(void *user, const kvc_radix_event *e) {
  evlog *l = user;
  if (l->n == 64) return;
  l->kind[l->n] = e->kind;
  l->component[l->n] = e->component;
  l->pages[l->n++] = e->kind == KVC_RADIX_BLOCK_REMOVED ? e->num_hashes : 1;
}

static kvc_status sum_hash(void *user, uint64_t parent, int has_parent, uint64_t ns, const int32_t *t, int64_t n,
                           uint64_t *out) {
  (void)user;
  uint64_t h = parent * 31 + (uint64_t)has_parent + ns;
  for (int64_t i = 0; i < n; i++) h = h * 1000003u + (uint64_t)t[i];
  *out = h;
  return KVC_OK;
}

/* Window 2, page 2: [1..6] inserted with 2 tokens out of window stores 3 blocks, then
 * says the first block's SWA side is removed; SWA eviction of the inner part says the
 * same; deleting a node removes its blocks (component ALL). */
static void test_kv_events_name_the_component(void **state) {
  (void)state;
  swalog log = {0};
  evlog ev = {0};
  kvc_swa_radix_cache_config cfg = KVC_SWA_RADIX_CACHE_CONFIG_INIT;
  cfg.sliding_window = 2;
  cfg.radix.page_size = 2;
  cfg.radix.num_slots = 256;
  cfg.radix.free_slots = log_full;
  cfg.radix.free_user = &log;
  cfg.radix.on_event = on_event;
  cfg.radix.event_user = &ev;
  cfg.radix.block_hash = sum_hash;
  cfg.free_swa_slots = log_swa;
  cfg.free_swa_user = &log;
  kvc_swa_radix_cache *c;
  KVT_OK(kvc_swa_radix_cache_create(kvt_ctx, &cfg, &c));
  put(c, T, 6, 10, 2);
  assert_int_equal(ev.n, 4);
  for (int i = 0; i < 3; i++) assert_int_equal(ev.kind[i], KVC_RADIX_BLOCK_STORED);
  assert_int_equal(ev.component[0], KVC_RADIX_COMPONENT_ALL);
  assert_int_equal(ev.kind[3], KVC_RADIX_BLOCK_REMOVED);
  assert_int_equal(ev.component[3], KVC_RADIX_COMPONENT_SWA);
  assert_int_equal(ev.pages[3], 1);
  const int32_t y[] = {1, 2, 3, 4, 40, 41};
  int64_t ys[] = {10, 11, 12, 13, 100, 101}, prefix;
  KVT_OK(kvc_swa_radix_cache_insert(c, NULL, 0, y, ys, 6, 0, &prefix)); /* [3,4] inner now */
  assert_int_equal(ev.n, 5);
  kvc_radix_match m = get(c, y, 6);
  uint64_t r;
  KVT_OK(kvc_swa_radix_cache_lock(c, m.node, &r));
  int64_t e1, e2;
  KVT_OK(kvc_swa_radix_cache_evict(c, NULL, 0, 100, &e1, &e2));
  /* [5,6] deleted (ALL), [3,4] inner tombstone (SWA) */
  assert_int_equal(ev.n, 7);
  int all = 0, swa = 0;
  for (int i = 5; i < 7; i++) {
    assert_int_equal(ev.kind[i], KVC_RADIX_BLOCK_REMOVED);
    all += ev.component[i] == KVC_RADIX_COMPONENT_ALL;
    swa += ev.component[i] == KVC_RADIX_COMPONENT_SWA;
  }
  assert_int_equal(all, 1);
  assert_int_equal(swa, 1);
  KVT_OK(kvc_swa_radix_cache_unlock(c, m.node, r));
  KVT_OK(kvc_swa_radix_cache_check(c));
  kvc_swa_radix_cache_destroy(c);
}

/* --- Behind a flow ----------------------------------------------------------------------- */

typedef struct ereq {
  kvc_req_state st;
  kvc_radix_req rr;
  int32_t toks[512];
} ereq;

static kvc_radix_req *req_of(void *user, const kvc_req_state *r) {
  (void)user;
  return &((ereq *)(uintptr_t)r)->rr;
}

/* free + held by live requests + cached == capacity, for FULL and for SWA. */
static void conserve(kvc_flow *flow, kvc_req_state *live, kvc_swa_allocator *a, kvc_swa_radix_cache *c,
                     int64_t held_full, int64_t held_swa) {
  kvc_req_state *lv[] = {live};
  KVT_OK(kvc_flow_check(flow, lv, live ? 1 : 0));
  const kvc_swa_radix_sizes s = sizes(c);
  assert_int_equal(kvc_swa_allocator_full_available_size(a) + held_full + s.cached, kvc_swa_allocator_size_full(a));
  assert_int_equal(kvc_swa_allocator_swa_available_size(a) + held_swa + s.swa_cached, kvc_swa_allocator_size_swa(a));
  KVT_OK(kvc_swa_allocator_check(a));
  KVT_OK(kvc_swa_radix_cache_check(c));
}

/* The flow tests' pools: an 8-row request pool of 256 tokens, an SWA allocator of 256
 * FULL and 96 SWA slots, and a cache over it with the given window. */
static void swa_pools_make(int32_t window, kvc_req_to_token_pool **pool, kvc_swa_allocator **a,
                           kvc_swa_radix_cache **c) {
  kvc_req_to_token_pool_config rcfg = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rcfg.size = 8;
  rcfg.max_context_len = 256;
  KVT_OK(kvc_req_to_token_pool_create(kvt_ctx, &rcfg, pool));
  kvc_swa_allocator_config ac = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  ac.size_full = 256;
  ac.size_swa = 96;
  KVT_OK(kvc_swa_allocator_create(kvt_ctx, &ac, a));
  kvc_swa_radix_cache_config cc = KVC_SWA_RADIX_CACHE_CONFIG_INIT;
  cc.sliding_window = window;
  cc.radix.num_slots = kvc_swa_allocator_size_full(*a);
  cc.radix.req_of = req_of;
  KVT_OK(kvc_swa_radix_cache_create(kvt_ctx, &cc, c));
}

/* Destroys what swa_pools_make made, in the reverse order of creation. */
static void swa_pools_free(kvc_req_to_token_pool *pool, kvc_swa_allocator *a, kvc_swa_radix_cache *c) {
  kvc_swa_radix_cache_destroy(c);
  kvc_swa_allocator_destroy(a);
  kvc_req_to_token_pool_destroy(pool);
}

static void flow_run(void) {
  const int32_t window = 8;
  kvc_req_to_token_pool *pool;
  kvc_swa_allocator *a;
  kvc_swa_radix_cache *c;
  swa_pools_make(window, &pool, &a, &c);
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = 1;
  fc.req_pool = pool;
  fc.swa_allocator = a;
  fc.sliding_window = window;
  fc.cache = kvc_swa_radix_cache_as_prefix_cache(c);
  kvc_flow *flow;
  KVT_OK(kvc_flow_create(kvt_ctx, &fc, &flow));
  int64_t *out = kvt_dev_alloc(1024 * sizeof(int64_t));
  static ereq e[6];
  /* Request 0: a 16-token prompt, 24 decoded. Requests 1..5: its 40 tokens + 8 of their
   * own as the prompt, 24 decoded. Window eviction leaves request 0's first 31 tokens
   * tombstones (the window plus SGLang's page of margin stays live), so the 40 tokens
   * are a valid match: 9 live tokens after the tombstone. */
  for (int i = 0; i < 6; i++) {
    memset(&e[i], 0, sizeof e[i]);
    for (int k = 0; k < 96; k++) e[i].toks[k] = k < 40 ? k : 1000 * (i + 1) + k;
    const int prompt = i ? 48 : 16;
    e[i].rr.tokens = e[i].toks;
    e[i].rr.num_tokens = prompt;
    e[i].rr.prompt_len = prompt;
    e[i].st.seq_len = prompt;
    KVT_OK(kvc_swa_radix_cache_match_req(c, &e[i].st, &e[i].rr));
    assert_int_equal(e[i].st.prefix_len, i ? 40 : 0);
    kvc_req_state *one[] = {&e[i].st};
    KVT_OK(kvc_flow_alloc_for_extend(flow, one, 1, out, NULL));
    for (int step = 0; step < 24; step++) {
      KVT_OK(kvc_flow_alloc_for_decode(flow, one, 1, 1, out, NULL));
      e[i].rr.num_tokens++;
    }
    e[i].st.kv_committed_len = e[i].st.seq_len;
    /* held by the request: its row past the tree's part; SWA: the live window. */
    const int64_t own = e[i].st.seq_len - e[i].st.cache_protected_len;
    const int64_t own_swa =
        e[i].st.seq_len - (e[i].st.swa_evicted_seqlen > e[i].st.cache_protected_len ? e[i].st.swa_evicted_seqlen
                                                                                    : e[i].st.cache_protected_len);
    conserve(flow, &e[i].st, a, c, own, own_swa);
    KVT_OK(kvc_flow_release(flow, one, 1, 1, NULL));
    conserve(flow, NULL, a, c, 0, 0);
    assert_true(sizes(c).swa_cached < sizes(c).cached); /* out-of-window parts are tombstones */
  }
  kvc_swa_radix_sizes s = sizes(c);
  KVT_OK(kvc_swa_radix_cache_evict(c, flow, s.cached, s.swa_cached, NULL, NULL));
  conserve(flow, NULL, a, c, 0, 0);
  assert_int_equal(sizes(c).cached, 0);
  kvc_flow_destroy(flow);
  kvt_dev_free(out);
  swa_pools_free(pool, a, c);
}

/* A streaming session over the SWA cache: turn 1 matches a cached request's 40 tokens
 * (their SWA chain locked with the FULL path), the session keeps the row and the lock
 * across turns, SWA eviction cannot take the locked window, and the session's release
 * gives every lock back. */
static void test_sessions_over_swa_radix(void **state) {
  (void)state;
  kvc_req_to_token_pool *pool;
  kvc_swa_allocator *a;
  kvc_swa_radix_cache *c;
  swa_pools_make(8, &pool, &a, &c);
  kvc_prefix_cache inner = kvc_swa_radix_cache_as_prefix_cache(c);
  kvc_session_cache *sc;
  KVT_OK(kvc_session_cache_create(kvt_ctx, &inner, &sc));
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.req_pool = pool;
  fc.swa_allocator = a;
  fc.sliding_window = 8;
  fc.cache = kvc_session_cache_as_prefix_cache(sc);
  kvc_flow *flow;
  KVT_OK(kvc_flow_create(kvt_ctx, &fc, &flow));
  int64_t *out = kvt_dev_alloc(1024 * sizeof(int64_t));
  static ereq x, t1, t2;
  ereq *all[] = {&x, &t1, &t2};
  for (int i = 0; i < 3; i++) {
    memset(all[i], 0, sizeof *all[i]);
    for (int k = 0; k < 128; k++) all[i]->toks[k] = k < 40 ? k : 7000 + k;
    all[i]->rr.tokens = all[i]->toks;
  }
  x.rr.num_tokens = x.st.seq_len = 40; /* a plain request caches 40 tokens */
  kvc_req_state *one[] = {&x.st};
  KVT_OK(kvc_swa_radix_cache_match_req(c, &x.st, &x.rr));
  KVT_OK(kvc_flow_alloc_for_extend(flow, one, 1, out, NULL));
  KVT_OK(kvc_flow_release(flow, one, 1, 1, NULL));
  t1.rr.num_tokens = t1.st.seq_len = 48;
  t1.st.session_id = 9;
  int matched;
  KVT_OK(kvc_session_cache_match(sc, &t1.st, 48, &matched));
  assert_int_equal(matched, 0);
  KVT_OK(kvc_swa_radix_cache_match_req(c, &t1.st, &t1.rr));
  assert_int_equal(t1.st.prefix_len, 40);
  one[0] = &t1.st;
  KVT_OK(kvc_flow_alloc_for_extend(flow, one, 1, out, NULL));
  KVT_OK(kvc_flow_release(flow, one, 1, 1, NULL)); /* the session keeps row and lock */
  KVT_OK(kvc_flow_check(flow, NULL, 0));
  kvc_swa_radix_sizes s = sizes(c);
  assert_int_equal(s.protected_size, 40);
  assert_true(s.swa_protected >= 8);
  int64_t e1, e2;
  kvc_status st = kvc_swa_radix_cache_evict(c, flow, 0, 1000, &e1, &e2);
  assert_true(st == KVC_OK || st == KVC_ERR_OUT_OF_SLOTS);
  assert_int_equal(sizes(c).swa_protected, s.swa_protected);
  t2.rr.num_tokens = t2.st.seq_len = 60; /* turn 2 continues the session's row */
  t2.st.session_id = 9;
  KVT_OK(kvc_session_cache_match(sc, &t2.st, 60, &matched));
  assert_int_equal(matched, 1);
  one[0] = &t2.st;
  KVT_OK(kvc_flow_alloc_for_extend(flow, one, 1, out, NULL));
  KVT_OK(kvc_flow_release(flow, one, 1, 1, NULL));
  KVT_OK(kvc_session_cache_release(sc, flow, 9));
  s = sizes(c);
  assert_int_equal(s.protected_size, 0);
  assert_int_equal(s.swa_protected, 0);
  KVT_OK(kvc_flow_check(flow, NULL, 0));
  KVT_OK(kvc_swa_radix_cache_evict(c, flow, s.cached, s.swa_cached, NULL, NULL));
  conserve(flow, NULL, a, c, 0, 0);
  assert_int_equal(kvc_swa_allocator_full_available_size(a), kvc_swa_allocator_size_full(a));
  kvc_flow_destroy(flow);
  kvt_dev_free(out);
  kvc_session_cache_destroy(sc);
  swa_pools_free(pool, a, c);
}

static void test_flow_with_swa_allocator(void **state) {
  (void)state;
  flow_run();
}

/* --- One device-mapping launch per evict call ------------------------------------------- */

/* A flow world whose cache also has hooks (evict without a flow: full slots through the
 * flow, SWA sides straight to the allocator, as the radix bench does) and knows their
 * allocator (config.swa_allocator). */
typedef struct zworld {
  kvc_req_to_token_pool *pool;
  kvc_swa_allocator *a;
  kvc_swa_radix_cache *c;
  kvc_flow *flow;
  int64_t *out;
  int64_t frees; /* hook calls */
} zworld;

static kvc_status z_free_full(void *user, const int64_t *s, size_t n) {
  zworld *w = user;
  w->frees++;
  return kvc_flow_free_slots(w->flow, s, n);
}
static kvc_status z_free_swa(void *user, const int64_t *s, size_t n) {
  zworld *w = user;
  w->frees++;
  return kvc_swa_allocator_free_swa(w->a, s, n, NULL);
}

/* Six requests with distinct prompts after a shared 8 tokens (window 8, page 1), each
 * decoded 24 tokens and released into the tree: leaves and tombstones to evict. */
static void zworld_make(zworld *w, uint32_t flags) {
  memset(w, 0, sizeof *w);
  kvc_req_to_token_pool_config rcfg = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rcfg.size = 8;
  rcfg.max_context_len = 256;
  KVT_OK(kvc_req_to_token_pool_create(kvt_ctx, &rcfg, &w->pool));
  kvc_swa_allocator_config ac = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  ac.size_full = 512;
  ac.size_swa = 256;
  KVT_OK(kvc_swa_allocator_create(kvt_ctx, &ac, &w->a));
  kvc_swa_radix_cache_config cc = KVC_SWA_RADIX_CACHE_CONFIG_INIT;
  cc.sliding_window = 8;
  cc.radix.num_slots = 512;
  cc.radix.req_of = req_of;
  cc.radix.free_slots = z_free_full;
  cc.radix.free_user = w;
  cc.free_swa_slots = z_free_swa;
  cc.free_swa_user = w;
  cc.swa_allocator = w->a;
  cc.flags = flags;
  KVT_OK(kvc_swa_radix_cache_create(kvt_ctx, &cc, &w->c));
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = 1;
  fc.req_pool = w->pool;
  fc.swa_allocator = w->a;
  fc.sliding_window = 8;
  fc.cache = kvc_swa_radix_cache_as_prefix_cache(w->c);
  KVT_OK(kvc_flow_create(kvt_ctx, &fc, &w->flow));
  w->out = kvt_dev_alloc(1024 * sizeof(int64_t));
  static ereq e[6];
  for (int i = 0; i < 6; i++) {
    memset(&e[i], 0, sizeof e[i]);
    for (int k = 0; k < 96; k++) e[i].toks[k] = k < 8 ? k : 1000 * (i + 1) + k;
    e[i].rr.tokens = e[i].toks;
    e[i].rr.num_tokens = 32;
    e[i].rr.prompt_len = 32;
    e[i].st.seq_len = 32;
    KVT_OK(kvc_swa_radix_cache_match_req(w->c, &e[i].st, &e[i].rr));
    kvc_req_state *one[] = {&e[i].st};
    KVT_OK(kvc_flow_alloc_for_extend(w->flow, one, 1, w->out, NULL));
    for (int step = 0; step < 24; step++) {
      KVT_OK(kvc_flow_alloc_for_decode(w->flow, one, 1, 1, w->out, NULL));
      e[i].rr.num_tokens++;
    }
    e[i].st.kv_committed_len = e[i].st.seq_len;
    KVT_OK(kvc_flow_release(w->flow, one, 1, 1, NULL));
  }
}

static void zworld_free(zworld *w) {
  kvc_flow_destroy(w->flow);
  kvt_dev_free(w->out);
  swa_pools_free(w->pool, w->a, w->c);
}

/* After an evict call (lazy default): nothing launched, the zeroes queued (host mapping
 * final); with EAGER_ZERO one launch and nothing queued. Either way a flush leaves the
 * device mapping equal to the host one. */
static void expect_after_evict(zworld *w, int eager) {
  assert_int_equal(kvc__fault_calls(kvt_ctx, KVC__FAULT_LAUNCH), eager ? 1 : 0);
  assert_int_equal(kvc_swa_allocator_zero_pending(w->a) > 0, !eager);
  KVT_OK(kvc_swa_allocator_check(w->a)); /* the queue agrees with the host mapping */
  KVT_OK(kvc_swa_allocator_zero_flush(w->a, NULL));
  kvt_expect_swa_mapping_synced(w->a);
}

/* An evict call of several victims (SWA ones, then full leaves; through the hooks, then
 * through the flow) launches nothing by default (one launch with EAGER_ZERO, one per
 * victim's free before the scope existed), and conserves both components. */
static void test_evict_zeroes_the_mapping_once(void **state) {
  (void)state;
  for (int k = 0; k < 4; k++) {
    const int via_flow = k & 1, eager = k >> 1;
    zworld w;
    zworld_make(&w, eager ? KVC_SWA_RADIX_EAGER_ZERO : 0);
    kvc_flow *fl = via_flow ? w.flow : NULL;
    kvc_swa_radix_sizes s = sizes(w.c);
    assert_true(s.cached > 64 && s.swa_cached > 8);
    w.frees = 0;
    kvc__fault_set(kvt_ctx, KVC__FAULT_LAUNCH, -1);
    int64_t ev, swa_ev;
    KVT_OK(kvc_swa_radix_cache_evict(w.c, fl, s.cached / 2, 0, &ev, NULL)); /* full leaves, SWA sides too */
    assert_true(ev >= s.cached / 2 && ev < s.cached);
    if (!via_flow) assert_true(w.frees >= 2);
    expect_after_evict(&w, eager);
    conserve(w.flow, NULL, w.a, w.c, 0, 0);
    s = sizes(w.c);
    assert_true(s.swa_cached > 0);
    w.frees = 0;
    kvc__fault_set(kvt_ctx, KVC__FAULT_LAUNCH, -1);
    KVT_OK(kvc_swa_radix_cache_evict(w.c, fl, 0, s.swa_cached, &ev, &swa_ev)); /* SWA eviction of the rest */
    assert_int_equal(swa_ev, s.swa_cached);
    if (!via_flow) assert_true(w.frees >= 2);
    expect_after_evict(&w, eager);
    conserve(w.flow, NULL, w.a, w.c, 0, 0);
    assert_int_equal(sizes(w.c).cached, 0);
    zworld_free(&w);
  }
}

/* The end's launch fails: the call reports it after its victims were evicted and freed
 * (conservation holds, the host mapping is final), the zero stays queued, and the next
 * allocation through the flow launches it first. */
static void test_evict_deferred_zero_failure(void **state) {
  (void)state;
  zworld w;
  zworld_make(&w, KVC_SWA_RADIX_EAGER_ZERO);
  const kvc_swa_radix_sizes s = sizes(w.c);
  kvc__fault_set(kvt_ctx, KVC__FAULT_LAUNCH, 0); /* the first launch is the end's */
  int64_t ev = -1, swa_ev = -1;
  KVT_STATUS(kvc_swa_radix_cache_evict(w.c, w.flow, s.cached, s.swa_cached, &ev, &swa_ev), KVC_ERR_CUDA);
  kvc__fault_reset(kvt_ctx);
  if (!strstr(kvc_last_error(kvt_ctx), "stays queued")) fail_msg("%s", kvc_last_error(kvt_ctx));
  assert_int_equal(ev, s.cached);
  assert_int_equal(sizes(w.c).cached, 0);
  assert_true(kvc_swa_allocator_zero_pending(w.a) > 0);
  conserve(w.flow, NULL, w.a, w.c, 0, 0);
  /* a new request's allocation writes the mapping: the queued zero goes first */
  static ereq e;
  memset(&e, 0, sizeof e);
  for (int k = 0; k < 32; k++) e.toks[k] = 7000 + k;
  e.rr.tokens = e.toks;
  e.rr.num_tokens = 32;
  e.rr.prompt_len = 32;
  e.st.seq_len = 32;
  KVT_OK(kvc_swa_radix_cache_match_req(w.c, &e.st, &e.rr));
  kvc_req_state *one[] = {&e.st};
  KVT_OK(kvc_flow_alloc_for_extend(w.flow, one, 1, w.out, NULL));
  assert_int_equal(kvc_swa_allocator_zero_pending(w.a), 0);
  kvt_expect_swa_mapping_synced(w.a);
  e.st.kv_committed_len = e.st.seq_len;
  KVT_OK(kvc_flow_release(w.flow, one, 1, 1, NULL));
  conserve(w.flow, NULL, w.a, w.c, 0, 0);
  zworld_free(&w);
}

/* The lazy default: an evict queues the zeroes and launches nothing; the next allocation
 * through the flow launches them (at page 1 alone, before its own launches: alloc_extend
 * carries them at page size > 1 only, see test_swa_allocator) or, when that launch fails,
 * changes nothing and keeps the queue; the device mapping then equals the host one. */
static void test_evict_zero_rides_the_next_alloc(void **state) {
  (void)state;
  zworld w;
  zworld_make(&w, 0);
  static ereq e[2];
  kvc_req_state *one[2];
  for (int r = 0; r < 2; r++) {
    memset(&e[r], 0, sizeof e[r]);
    for (int k = 0; k < 32; k++) e[r].toks[k] = 9000 + 100 * r + k;
    e[r].rr.tokens = e[r].toks;
    e[r].rr.num_tokens = 32;
    e[r].rr.prompt_len = 32;
    e[r].st.seq_len = 32;
    KVT_OK(kvc_swa_radix_cache_match_req(w.c, &e[r].st, &e[r].rr));
    one[r] = &e[r].st;
  }
  /* the launches of one allocation without a queue */
  kvc__fault_set(kvt_ctx, KVC__FAULT_LAUNCH, -1);
  KVT_OK(kvc_flow_alloc_for_extend(w.flow, one, 1, w.out, NULL));
  const int64_t base = kvc__fault_calls(kvt_ctx, KVC__FAULT_LAUNCH);
  const kvc_swa_radix_sizes s = sizes(w.c);
  kvc__fault_set(kvt_ctx, KVC__FAULT_LAUNCH, -1);
  int64_t ev;
  KVT_OK(kvc_swa_radix_cache_evict(w.c, w.flow, s.cached / 2, 0, &ev, NULL));
  assert_int_equal(kvc__fault_calls(kvt_ctx, KVC__FAULT_LAUNCH), 0);
  const int64_t queued = kvc_swa_allocator_zero_pending(w.a);
  assert_true(queued > 0);
  const int64_t fav = kvc_swa_allocator_full_available_size(w.a);
  const int64_t with_queue = base + 1;           /* page 1: the queue's own launch first */
  kvc__fault_set(kvt_ctx, KVC__FAULT_LAUNCH, 0); /* that launch fails: nothing changed */
  KVT_STATUS(kvc_flow_alloc_for_extend(w.flow, one + 1, 1, w.out, NULL), KVC_ERR_CUDA);
  assert_int_equal(kvc_swa_allocator_zero_pending(w.a), queued);
  assert_int_equal(kvc_swa_allocator_full_available_size(w.a), fav);
  KVT_OK(kvc_swa_allocator_check(w.a));
  kvc__fault_set(kvt_ctx, KVC__FAULT_LAUNCH, -1);
  KVT_OK(kvc_flow_alloc_for_extend(w.flow, one + 1, 1, w.out, NULL));
  assert_int_equal(kvc__fault_calls(kvt_ctx, KVC__FAULT_LAUNCH), with_queue);
  assert_int_equal(kvc_swa_allocator_zero_pending(w.a), 0);
  kvt_expect_swa_mapping_synced(w.a);
  for (int r = 0; r < 2; r++) e[r].st.kv_committed_len = e[r].st.seq_len;
  KVT_OK(kvc_flow_release(w.flow, one, 2, 1, NULL));
  conserve(w.flow, NULL, w.a, w.c, 0, 0);
  kvc__fault_reset(kvt_ctx);
  zworld_free(&w);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_match_needs_a_window_after_the_last_tombstone),
    cmocka_unit_test(test_insert_tombstones_the_out_of_window_part),
    cmocka_unit_test(test_match_keeps_ticks_past_its_valid_end),
    cmocka_unit_test(test_locks_full_path_swa_last_window),
    cmocka_unit_test(test_swa_eviction_tombstones_and_cascades),
    cmocka_unit_test(test_full_eviction_counts_both_components),
    cmocka_unit_test(test_bad_input_changes_nothing),
    cmocka_unit_test(test_kv_events_name_the_component),
    cmocka_unit_test(test_flow_with_swa_allocator),
    cmocka_unit_test(test_sessions_over_swa_radix),
    cmocka_unit_test(test_evict_zeroes_the_mapping_once),
    cmocka_unit_test(test_evict_deferred_zero_failure),
    cmocka_unit_test(test_evict_zero_rides_the_next_alloc),
};
KVT_MAIN("swa_radix", tests)
