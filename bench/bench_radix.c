/*
 * bench_radix.c — host microseconds of the radix prefix cache (SGLang RadixCache's
 * operations), median and p99 per call, and hit rates on generated traces.
 *
 * Part 1, the targets: match_prefix of a 4096-token request with a 3584-token cached
 * prefix (page 1 and 16; the prefix one node, and a path of 8 nodes that must be copied);
 * insert and cache_finished_req of 4096 tokens (page 16, 3584 already present / none);
 * evict(4096) from a 10^6-token tree; lock + unlock of a 32-node path. Trees are filled
 * with unrelated requests up to 10^4, 10^5 and 10^6 cached tokens.
 *
 * Part 2, trace replays through a flow (host backend; the flow's own work is not timed):
 * multi-turn chat (each turn extends the previous one), many requests sharing a few
 * 1-4k-token system prompts with distinct suffixes, and random prefixes under eviction
 * pressure (capacity well below the working set), at page 1, 16 and 64 and capacities of
 * 10^4, 10^5 and 10^6 tokens. Each radix call the flow makes is timed through a shim
 * kvc_prefix_cache; match_req and lock/unlock are timed directly.
 *
 * Floors, timed in the same run beside the operation they bound: for cache_finished_req,
 * a memcpy of the 49 KB a new 4096-token leaf holds (keys + slots) and a malloc + memcpy +
 * free of it; for the trace's match_req, a memcpy of the matched slots from the same
 * nodes' value arrays, as cold as the match finds them (alternate requests: the floor on
 * odd ones, found by a keys-only walk that leaves the values untouched, the match on
 * even ones). Eviction through a flow is split into the allocator's free of the victims
 * (timed inside the free hook) and the rest (the tree's share); in the trace replays the
 * split is timed on odd evictions and the whole call, its hook untimed, on even ones.
 * KVB_TRACE_SEL=<trace>-<page>-<capacity> runs that one replay (profiling; the others
 * only draw their requests, so it replays the same requests as a full run).
 *
 * KVB_TRACE_DUMP=DIR writes each replay's requests to DIR/<trace>-<page>-<capacity>.bin
 * (per request: int64 prompt length, int64 output length, int32 tokens[prompt + output]),
 * which bench/sglang_radix_ref.py --traces DIR replays through SGLang's own RadixCache.
 *
 * Part 3, SWA (section "swa"): the sysprompt and pressure traces replayed twice with the
 * same requests, once through the full-attention radix cache (token / paged allocator) and
 * once through the SWA radix cache (HYBRID: an SWA allocator with an SWA side of half the
 * capacity, window 128, so window eviction tombstones what falls behind and SWA eviction
 * runs under its own pressure), at the same capacities; match_req, the chunk checkpoint
 * (an insert), cache_finished_req and evict (the flow's callback, frees included) are
 * timed for both, and a "ratio" row gives SWA / full of the medians and the trees' sizes.
 *
 * Part 4, hybrid (Mamba) trees (section "hybrid"): match_prefix, insert, evict and
 * cache_finished_req on a kvc_mamba_radix_cache and a kvc_radix_cache holding the same
 * requests (10^4..10^6 tokens, page 16), the same call timed on both, with the ratio;
 * and the copy of a matched 6.2 MB state beside a memcpy of it.
 *
 * Usage: kvc_bench_radix [--quick] [--csv FILE]. Host backend unless KVB_BACKEND=cuda
 * (meant for part 3: the allocators' launches are then real, and their host time is in
 * the rows; the trees themselves are host-only). KVB_ONLY=<part> runs one part.
 * KVB_SWA_DEFER=0 runs part 3's SWA evict calls without the deferred-zero scope (one
 * device-mapping launch per victim, as before it existed): the A/B of that scope in one
 * binary, e.g. on a GPU. KVB_SWA_SIDE=full gives part 3's SWA allocator an SWA side as
 * large as its full side (the default is half, rounded down to pages): the SWA cache then
 * evicts for the same capacity as the full-attention cache, a like-for-like variant of the
 * rows (issue 17 item 6 asks for "the same tree sizes").
 */
#define _POSIX_C_SOURCE 200809L
#include "bench_util.h"
#include "cache/radix.h" /* internal: the keys-only walk and node values for the match floor */

#include <stdint.h>

#define MIN2(a, b) ((a) < (b) ? (a) : (b))

static kvc_context *ctx;
static FILE *csv;
static int quick;
static int swa_defer = 1; /* KVB_SWA_DEFER=0: part 3's evict calls without the one-launch scope */
static int swa_side_full; /* KVB_SWA_SIDE=full: part 3's SWA side as large as the full side */
static int swa_eager;     /* KVB_SWA_EAGER=1: part 3's SWA cache with KVC_SWA_RADIX_EAGER_ZERO */

/* --- Samples ---------------------------------------------------------------------------- */

typedef struct samples {
  double *t;
  int n, cap;
} samples;

/* When set: run_to_finish times each request's first allocation (the alloc_extend right
 * after the previous request's cache_finished_req, which carries its queued zeroes). */
static samples *first_alloc;

static void add(samples *s, double us) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 1024;
    s->t = realloc(s->t, (size_t)s->cap * sizeof *s->t);
    if (!s->t) exit(1);
  }
  s->t[s->n++] = us;
}

static void report(const char *section, const char *what, int ps, int64_t tree, samples *s, double hit) {
  if (s->n == 0) return;
  qsort(s->t, (size_t)s->n, sizeof *s->t, kvb_cmp_double);
  double med = s->t[s->n / 2], p99 = s->t[(int)((double)s->n * 0.99)];
  printf("%-9s %-44s %4d %8lld %9.3f %9.3f %7d", section, what, ps, (long long)tree, med, p99, s->n);
  if (hit >= 0) printf("  hit %.3f", hit);
  printf("\n");
  if (csv)
    fprintf(csv, "%s,\"%s\",%d,%lld,%.4f,%.4f,%d,%.4f\n", section, what, ps, (long long)tree, med, p99, s->n, hit);
  s->n = 0;
}

static uint64_t rng_s = 0x1234567;
static uint64_t rnd(void) {
  uint64_t z = (rng_s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static int64_t range(int64_t lo, int64_t hi) { return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1)); }

/* --- Part 1: standalone tree, frees counted by a no-op hook ------------------------------ */

static int64_t next_slot;
static kvc_status drop(void *user, const int64_t *slots, size_t n) {
  (void)slots;
  *(int64_t *)user += (int64_t)n;
  return KVC_OK;
}

/* Slot ids only grow here (nothing is reallocated), hence the large id space. */
static kvc_radix_cache *tree_make_slots(int ps, int64_t *dropped, int64_t num_slots) {
  kvc_radix_cache_config c = KVC_RADIX_CACHE_CONFIG_INIT;
  c.page_size = ps;
  c.num_slots = num_slots;
  c.free_slots = drop;
  c.free_user = dropped;
  kvc_radix_cache *rc;
  KVB_CHECK(ctx, kvc_radix_cache_create(ctx, &c, &rc));
  next_slot = 1;
  return rc;
}
static kvc_radix_cache *tree_make(int ps, int64_t *dropped) { return tree_make_slots(ps, dropped, (int64_t)1 << 26); }

/* Slots of a request are whole allocator pages: runs start page-aligned (64 covers all). */
static void align_slots(void) { next_slot = (next_slot + 63) / 64 * 64; }

static void put(kvc_radix_cache *rc, const int32_t *t, int64_t n) {
  static int64_t slots[1 << 14];
  align_slots();
  for (int64_t i = 0; i < n; i++) slots[i] = next_slot++;
  KVB_CHECK(ctx, kvc_radix_cache_insert(rc, NULL, 0, t, slots, n, 0, NULL));
}

/* Unrelated requests of 256..1024 random tokens until the tree holds `tokens`. */
static void fill(kvc_radix_cache *rc, int64_t tokens) {
  int32_t t[1024];
  int64_t cached = 0;
  while (cached < tokens) {
    int64_t n = range(256, 1024);
    for (int64_t i = 0; i < n; i++) t[i] = (int32_t)range(0, 1 << 30);
    put(rc, t, n);
    KVB_CHECK(ctx, kvc_radix_cache_sizes(rc, NULL, NULL, &cached));
  }
}

static void random_tokens(int32_t *t, int64_t n) {
  for (int64_t i = 0; i < n; i++) t[i] = (int32_t)range(0, 1 << 30);
}

static void bench_match(int ps, int64_t tree, int nodes) {
  int64_t dropped = 0;
  kvc_radix_cache *rc = tree_make(ps, &dropped);
  fill(rc, tree);
  enum { K = 16 };
  static int32_t q[K][4096];
  for (int k = 0; k < K; k++) {
    random_tokens(q[k], 4096);
    /* the 3584-token prefix as `nodes` inserts of growing length (a conversation) */
    for (int j = 1; j <= nodes; j++) put(rc, q[k], 3584 / nodes * j);
  }
  samples s = {0};
  const int reps = quick ? 2000 : 20000;
  for (int r = 0; r < reps; r++) {
    kvc_radix_match m;
    double t0 = kvb_now_us();
    KVB_CHECK(ctx, kvc_radix_cache_match_prefix(rc, 0, q[r % K], 4096, &m));
    add(&s, kvb_now_us() - t0);
    if (m.len != 3584) exit(3);
  }
  char what[96];
  snprintf(what, sizeof what, "match_prefix 4096 (3584 cached, %d node%s)", nodes, nodes > 1 ? "s" : "");
  report("target", what, ps, tree, &s, -1);
  kvc_radix_cache_destroy(rc);
  free(s.t);
}

/* Host bytes of a tree of `tree` tokens over an allocator of 2 x tree slots (the held
 * bitmap is sized by the allocator): the bound is 16 B per cached token + 128 B per node. */
static void bench_memory(int ps, int64_t tree) {
  int64_t dropped = 0;
  kvc_radix_cache *rc = tree_make_slots(ps, &dropped, 2 * tree); /* fill() wastes unaligned tails */
  fill(rc, tree);
  kvc_radix_stats st;
  KVB_CHECK(ctx, kvc_radix_cache_stats(rc, &st));
  const int64_t bound = 16 * st.cached_tokens + 128 * st.nodes;
  printf("memory    page %2d: %lld tokens in %lld nodes: %lld bytes = %.2f B/token; bound %lld (%s)\n", ps,
         (long long)st.cached_tokens, (long long)st.nodes, (long long)st.bytes,
         (double)st.bytes / (double)st.cached_tokens, (long long)bound, st.bytes <= bound ? "within" : "EXCEEDED");
  if (csv)
    fprintf(csv, "memory,\"bytes (%lld nodes; bound %lld)\",%d,%lld,%lld,%lld,1,-1\n", (long long)st.nodes,
            (long long)bound, ps, (long long)st.cached_tokens, (long long)st.bytes, (long long)bound);
  kvc_radix_cache_destroy(rc);
}

static void bench_insert(int ps, int64_t tree, int64_t present) {
  int64_t dropped = 0;
  kvc_radix_cache *rc = tree_make(ps, &dropped);
  fill(rc, tree);
  static int32_t q[4096];
  static int64_t slots[4096];
  samples s = {0};
  const int reps = quick ? 500 : 5000;
  for (int r = 0; r < reps; r++) {
    random_tokens(q, 4096);
    if (present) put(rc, q, present);
    align_slots();
    for (int i = 0; i < 4096; i++) slots[i] = next_slot++;
    double t0 = kvb_now_us();
    KVB_CHECK(ctx, kvc_radix_cache_insert(rc, NULL, 0, q, slots, 4096, 0, NULL));
    add(&s, kvb_now_us() - t0);
    KVB_CHECK(ctx, kvc_radix_cache_evict(rc, NULL, 4096, NULL)); /* keep the size (LRU: this one) */
  }
  char what[96];
  snprintf(what, sizeof what, "insert 4096 (%lld present)", (long long)present);
  report("target", what, ps, tree, &s, -1);
  kvc_radix_cache_destroy(rc);
  free(s.t);
}

static void bench_evict(int ps, int64_t tree) {
  int64_t dropped = 0;
  kvc_radix_cache *rc = tree_make(ps, &dropped);
  fill(rc, tree);
  samples s = {0};
  const int reps = quick ? 500 : 5000;
  for (int r = 0; r < reps; r++) {
    double t0 = kvb_now_us();
    KVB_CHECK(ctx, kvc_radix_cache_evict(rc, NULL, 4096, NULL));
    add(&s, kvb_now_us() - t0);
    fill(rc, tree); /* refill (not timed) */
  }
  report("target", "evict 4096", ps, tree, &s, -1);
  kvc_radix_cache_destroy(rc);
  free(s.t);
}

static void bench_lock(int64_t tree) {
  int64_t dropped = 0;
  kvc_radix_cache *rc = tree_make(16, &dropped);
  fill(rc, tree);
  static int32_t q[32 * 64];
  random_tokens(q, 32 * 64);
  for (int j = 1; j <= 32; j++) put(rc, q, 64 * j); /* a 32-node path */
  kvc_radix_match m;
  KVB_CHECK(ctx, kvc_radix_cache_match_prefix(rc, 0, q, 32 * 64, &m));
  samples s = {0};
  const int reps = quick ? 20000 : 200000;
  for (int r = 0; r < reps; r++) {
    double t0 = kvb_now_us();
    KVB_CHECK(ctx, kvc_radix_cache_lock(rc, m.node));
    KVB_CHECK(ctx, kvc_radix_cache_unlock(rc, m.node));
    add(&s, kvb_now_us() - t0);
  }
  report("target", "lock + unlock, 32-node path", 16, tree, &s, -1);
  kvc_radix_cache_destroy(rc);
  free(s.t);
}

/* cache_finished_req of a 4096-token request (present tokens matched from the tree first)
 * through a flow whose allocator holds every cached slot; the row is freed untimed. */
static kvc_radix_req *req_of(void *user, const kvc_req_state *r);
typedef struct ereq {
  kvc_req_state st;
  kvc_radix_req rr;
  int32_t *toks;
} ereq;

/* A radix cache behind a flow over a real allocator (token kind at page 1, paged
 * otherwise) of tree + 65536 slots, and a small request pool of rows of max_ctx tokens:
 * the setup of the benchmarks whose frees go back to an allocator. */
typedef struct flow_world {
  kvc_radix_cache *rc;
  kvc_req_to_token_pool *pool;
  kvc_allocator *alloc;
  kvc_flow *flow;
} flow_world;

static flow_world flow_world_make(int ps, int64_t tree, int32_t max_ctx, kvc_radix_req_fn req_fn,
                                  kvc_radix_free_fn free_fn, void *free_user) {
  flow_world w;
  const int64_t cap = tree + 65536;
  kvc_radix_cache_config rcfg = KVC_RADIX_CACHE_CONFIG_INIT;
  rcfg.page_size = ps;
  rcfg.num_slots = cap;
  rcfg.req_of = req_fn;
  rcfg.free_slots = free_fn; /* used only by calls given no flow */
  rcfg.free_user = free_user;
  KVB_CHECK(ctx, kvc_radix_cache_create(ctx, &rcfg, &w.rc));
  kvc_req_to_token_pool_config qc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  qc.size = 4;
  qc.max_context_len = max_ctx;
  KVB_CHECK(ctx, kvc_req_to_token_pool_create(ctx, &qc, &w.pool));
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = ps == 1 ? KVC_ALLOCATOR_TOKEN : KVC_ALLOCATOR_PAGED;
  ac.size = cap;
  ac.page_size = ps;
  KVB_CHECK(ctx, kvc_allocator_create(ctx, &ac, &w.alloc));
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = ps;
  fc.req_pool = w.pool;
  fc.allocator = w.alloc;
  fc.cache = kvc_radix_cache_as_prefix_cache(w.rc);
  KVB_CHECK(ctx, kvc_flow_create(ctx, &fc, &w.flow));
  return w;
}

/* Unrelated 256..1024-token requests (whole pages of 16) with allocator slots until the
 * tree holds `tree` tokens (not timed). */
static void flow_world_fill(flow_world *w, int64_t tree) {
  static int32_t q[1024];
  static int64_t slots[1024];
  for (int64_t cached = 0; cached < tree;) {
    int64_t n = range(16, 64) * 16;
    random_tokens(q, n);
    KVB_CHECK(ctx, kvc_allocator_alloc(w->alloc, (size_t)n, slots));
    KVB_CHECK(ctx, kvc_radix_cache_insert(w->rc, w->flow, 0, q, slots, n, 0, NULL));
    KVB_CHECK(ctx, kvc_radix_cache_sizes(w->rc, NULL, NULL, &cached));
  }
}

static void flow_world_free(flow_world *w) {
  KVB_CHECK(ctx, kvc_flow_check(w->flow, NULL, 0));
  kvc_flow_destroy(w->flow);
  kvc_allocator_destroy(w->alloc);
  kvc_req_to_token_pool_destroy(w->pool);
  kvc_radix_cache_destroy(w->rc);
}

static void bench_finished(int ps, int64_t tree, int64_t present) {
  flow_world w = flow_world_make(ps, tree, 4096 + 64, req_of, NULL, NULL);
  flow_world_fill(&w, tree);
  static int32_t q[4096];
  static int64_t slots[4096], out[4096];
  samples s = {0}, f_copy = {0}, f_malloc = {0}, f_cold = {0};
  const int reps = quick ? 300 : 3000;
  const size_t leaf_bytes = 4096 * (sizeof(int64_t) + sizeof(int32_t));
  static unsigned char leaf_buf[4096 * 12];
  /* 64 rotating destinations (3 MB): written once per 64 repetitions, so as cold as the
   * memory a new segment gets (freed by evictions long after it was last touched) */
  enum { COLD = 64 };
  static unsigned char cold_buf[COLD][4096 * 12];
  memset(cold_buf, 1, sizeof cold_buf); /* faulted in here, not in the timed copies */
  ereq e;
  e.toks = q;
  for (int r = 0; r < reps; r++) {
    random_tokens(q, 4096);
    if (present) {
      KVB_CHECK(ctx, kvc_allocator_alloc(w.alloc, (size_t)present, slots));
      KVB_CHECK(ctx, kvc_radix_cache_insert(w.rc, w.flow, 0, q, slots, present, 0, NULL));
    }
    memset(&e.st, 0, sizeof e.st);
    memset(&e.rr, 0, sizeof e.rr);
    e.rr.tokens = q;
    e.rr.num_tokens = e.rr.prompt_len = 4096;
    KVB_CHECK(ctx, kvc_radix_cache_match_req(w.rc, &e.st, &e.rr));
    e.st.seq_len = 4096;
    kvc_req_state *one[] = {&e.st};
    KVB_CHECK(ctx, kvc_flow_alloc_for_extend(w.flow, one, 1, out, NULL));
    double t0 = kvb_now_us();
    KVB_CHECK(ctx, kvc_radix_cache_cache_finished_req(w.rc, w.flow, &e.st, 1));
    add(&s, kvb_now_us() - t0);
    if (!present) { /* the floors of a new 49 KB leaf: its bytes copied, and allocated too */
      t0 = kvb_now_us();
      memcpy(leaf_buf, out, 4096 * sizeof(int64_t));
      memcpy(leaf_buf + 4096 * sizeof(int64_t), q, 4096 * sizeof(int32_t));
      __asm__ volatile("" : : "r"(leaf_buf) : "memory"); /* the copy is not elided */
      add(&f_copy, kvb_now_us() - t0);
      unsigned char *cb = cold_buf[r % COLD];
      t0 = kvb_now_us();
      memcpy(cb, out, 4096 * sizeof(int64_t));
      memcpy(cb + 4096 * sizeof(int64_t), q, 4096 * sizeof(int32_t));
      __asm__ volatile("" : : "r"(cb) : "memory");
      add(&f_cold, kvb_now_us() - t0);
      t0 = kvb_now_us();
      unsigned char *m = malloc(leaf_bytes);
      if (!m) exit(1);
      memcpy(m, out, 4096 * sizeof(int64_t));
      memcpy(m + 4096 * sizeof(int64_t), q, 4096 * sizeof(int32_t));
      __asm__ volatile("" : : "r"(m) : "memory"); /* the copy is not elided */
      free(m);
      add(&f_malloc, kvb_now_us() - t0);
    }
    KVB_CHECK(ctx, kvc_req_to_token_pool_free(w.pool, e.st.req_row));
    KVB_CHECK(ctx, kvc_radix_cache_evict(w.rc, w.flow, 4096, NULL)); /* keep the size */
  }
  flow_world_free(&w);
  char what[96];
  snprintf(what, sizeof what, "cache_finished_req 4096 (%lld present)", (long long)present);
  report("target", what, ps, tree, &s, -1);
  report("floor", "memcpy 49152 B (a 4096-token leaf)", ps, tree, &f_copy, -1);
  report("floor", "malloc + memcpy + free 49152 B", ps, tree, &f_malloc, -1);
  report("floor", "memcpy 49152 B into a cold buffer", ps, tree, &f_cold, -1);
  free(s.t), free(f_copy.t), free(f_malloc.t), free(f_cold.t);
}

/* The victims' frees of an eviction, timed: the radix cache is given no flow, so it frees
 * through its config hook, which frees through the flow as the flow path would
 * (kvc_flow_free_slots) and sums the time spent there: the allocator's share. */
typedef struct timed_free {
  kvc_flow *flow;
  double us;
  int64_t calls, tokens; /* victims freed and their tokens, over the run */
  bool untimed;          /* this eviction's frees are not timed (no clock pair per victim) */
} timed_free;

static kvc_status timed_flow_free(void *user, const int64_t *slots, size_t n) {
  timed_free *tf = user;
  if (tf->untimed) {
    tf->calls++;
    tf->tokens += (int64_t)n;
    return kvc_flow_free_slots(tf->flow, slots, n);
  }
  double t0 = kvb_now_us();
  kvc_status st = kvc_flow_free_slots(tf->flow, slots, n);
  tf->us += kvb_now_us() - t0;
  tf->calls++;
  tf->tokens += (int64_t)n;
  return st;
}

/* evict(4096) from a 10^6-token tree through a flow: the victims' slots go back to a real
 * allocator (the cost SGLang's eviction figure includes). */
static void bench_evict_flow(int ps, int64_t tree) {
  timed_free tf0 = {NULL, 0, 0, 0, false};
  flow_world w = flow_world_make(ps, tree, 1024, NULL, timed_flow_free, &tf0);
  tf0.flow = w.flow;
  samples s = {0}, s_alloc = {0}, s_tree = {0};
  const int reps = quick ? 500 : 5000;
  for (int r = 0; r <= reps; r++) {
    flow_world_fill(&w, tree);
    if (r == reps) break;
    double t0 = kvb_now_us();
    KVB_CHECK(ctx, kvc_radix_cache_evict(w.rc, w.flow, 4096, NULL));
    add(&s, kvb_now_us() - t0);
    flow_world_fill(&w, tree);
    /* the same eviction with its frees timed apart (alternate repetitions) */
    tf0.us = 0;
    t0 = kvb_now_us();
    KVB_CHECK(ctx, kvc_radix_cache_evict(w.rc, NULL, 4096, NULL));
    const double dt = kvb_now_us() - t0;
    add(&s_alloc, tf0.us);
    add(&s_tree, dt - tf0.us);
  }
  flow_world_free(&w);
  report("target", "evict 4096 through a flow (allocator free)", ps, tree, &s, -1);
  report("split", "evict 4096 through a flow: allocator's free", ps, tree, &s_alloc, -1);
  report("split", "evict 4096 through a flow: the rest (tree)", ps, tree, &s_tree, -1);
  free(s.t), free(s_alloc.t), free(s_tree.t);
}

/* --- Part 2: trace replays through a flow -------------------------------------------------- */

static kvc_radix_req *req_of(void *user, const kvc_req_state *r) {
  (void)user;
  return &((ereq *)(uintptr_t)r)->rr;
}

/* The two shims' (radix and SWA) finished / unfinished callbacks: the inner cache's
 * call, its wall clock (and only its) added to `into`. */
static kvc_status timed_finished(const kvc_prefix_cache *inner, samples *into, kvc_flow *f, kvc_req_state *r, int ins) {
  double t0 = kvb_now_us();
  kvc_status st = inner->cache_finished_req(inner->self, f, r, ins);
  add(into, kvb_now_us() - t0);
  return st;
}
static kvc_status timed_unfinished(const kvc_prefix_cache *inner, samples *into, kvc_flow *f, kvc_req_state *r) {
  double t0 = kvb_now_us();
  kvc_status st = inner->cache_unfinished_req(inner->self, f, r);
  add(into, kvb_now_us() - t0);
  return st;
}

/* The shim: the radix callbacks the flow makes, timed. */
typedef struct shim {
  kvc_prefix_cache inner;
  kvc_radix_cache *rc;
  timed_free tf; /* the victims' frees of an eviction (the allocator's share) */
  samples finished, unfinished, evict, evict_alloc, evict_tree;
  int64_t evictions; /* all of them: even ones feed the evict row, odd ones the split */
  /* Page 1: the cache is bound to the flow's allocator (kvc_radix_cache_bind_allocator;
   * KVB_RADIX_BIND=0 leaves it unbound). Its evictions then free through the flow in one
   * pass, not through the hook, so there is no split: even evictions are timed (the evict
   * row, the same calls as unbound), odd ones run untimed, and the victims are counted
   * from the node count around each call, outside the timing. */
  bool bound;
  int64_t victims, tokens;
} shim;

static kvc_status sh_finished(void *self, kvc_flow *f, kvc_req_state *r, int ins) {
  shim *s = self;
  return timed_finished(&s->inner, &s->finished, f, r, ins);
}
static kvc_status sh_unfinished(void *self, kvc_flow *f, kvc_req_state *r) {
  shim *s = self;
  return timed_unfinished(&s->inner, &s->unfinished, f, r);
}
/* What the radix cache's kvc_prefix_cache evict does (evict max(n, swa_n), nothing
 * evictable is no error), but with no flow given, so that the victims are freed through
 * the timed hook (which frees through this flow): the allocator's share, timed apart.
 * The split takes a clock pair per victim (3-4 a call, ~0.1 us in all), which the whole
 * call's figure should not carry: even evictions time the whole call with the hook
 * untimed (the evict row), odd ones time the split (the two split rows). */
static kvc_status sh_evict(void *self, kvc_flow *f, int64_t n, int64_t swa, int64_t mamba) {
  shim *s = self;
  (void)mamba;
  int64_t evictable;
  KVB_CHECK(ctx, kvc_radix_cache_sizes(s->rc, &evictable, NULL, NULL));
  const int64_t want = n > swa ? n : swa;
  const bool split = (s->evictions++ & 1) != 0;
  s->tf.flow = f;
  s->tf.us = 0;
  s->tf.untimed = !split;
  kvc_status st = KVC_OK;
  if (s->bound) {
    kvc_radix_stats before, after;
    int64_t done = 0;
    KVB_CHECK(ctx, kvc_radix_cache_stats(s->rc, &before));
    double t0 = kvb_now_us();
    if (want > 0 && evictable > 0) st = kvc_radix_cache_evict(s->rc, f, want, &done);
    const double dt = kvb_now_us() - t0;
    KVB_CHECK(ctx, kvc_radix_cache_stats(s->rc, &after));
    s->victims += before.nodes - after.nodes;
    s->tokens += done;
    if (!split) add(&s->evict, dt);
    return st;
  }
  double t0 = kvb_now_us();
  if (want > 0 && evictable > 0) st = kvc_radix_cache_evict(s->rc, NULL, want, NULL);
  const double dt = kvb_now_us() - t0;
  if (split) {
    add(&s->evict_alloc, s->tf.us);
    add(&s->evict_tree, dt - s->tf.us);
  } else {
    add(&s->evict, dt);
  }
  return st;
}
static int64_t sh_evictable(void *self) { return ((shim *)self)->inner.evictable_size(((shim *)self)->inner.self); }
static int64_t sh_protected(void *self) { return ((shim *)self)->inner.protected_size(((shim *)self)->inner.self); }
static int64_t sh_cached(void *self) { return ((shim *)self)->inner.cached_size(((shim *)self)->inner.self); }
static int sh_zero(void *self) {
  (void)self;
  return 0;
}

enum { TRACE_CHAT, TRACE_SYSPROMPT, TRACE_PRESSURE };
static const char *trace_name[] = {"chat", "sysprompt", "pressure"};

#define MAXLEN 8192
#define CONVS 64

/* Builds request i of a trace into t (returns its prompt length; *out = output tokens). */
static int64_t make_request(int trace, int64_t cap, int32_t *t, int64_t *out, int32_t conv_toks[][MAXLEN],
                            int64_t *conv_len, int32_t sys[][4096], const int64_t *sys_len) {
  *out = range(32, 128);
  if (trace == TRACE_CHAT) { /* a conversation's next turn: its history + a new message */
    int c = (int)range(0, CONVS - 1);
    int64_t msg = range(64, 256);
    if (conv_len[c] + msg + *out > MIN2(MAXLEN, cap / 8)) conv_len[c] = 0; /* a new conversation */
    memcpy(t, conv_toks[c], (size_t)conv_len[c] * 4);
    random_tokens(t + conv_len[c], msg + *out);
    int64_t prompt = conv_len[c] + msg;
    memcpy(conv_toks[c], t, (size_t)(prompt + *out) * 4); /* the reply joins the history */
    conv_len[c] = prompt + *out;
    return prompt;
  }
  if (trace == TRACE_SYSPROMPT) { /* one of 4 system prompts + a distinct question */
    int k = (int)range(0, 3);
    int64_t q = range(64, 512), sl = MIN2(sys_len[k], cap / 8);
    memcpy(t, sys[k], (size_t)sl * 4);
    random_tokens(t + sl, q + *out);
    return sl + q;
  }
  /* random prefixes under pressure: one of cap / 128 random stems (a working set of about
   * 8x the capacity), drawn with a skew (the smaller of two uniform draws), any prefix of
   * it, + a random suffix */
  const int64_t stems = cap / 128;
  uint64_t stem = (uint64_t)MIN2(range(0, stems - 1), range(0, stems - 1));
  int64_t len = range(64, MIN2(2048, cap / 8)), sfx = range(16, 256);
  uint64_t save = rng_s;
  rng_s = stem * 7919 + 17;
  random_tokens(t, len);
  rng_s = save;
  random_tokens(t + len, sfx + *out);
  return len + sfx;
}

/* The floor of match_req: the slots it returns, memcpy'd from the same nodes' value
 * arrays. The nodes are found by a keys-only walk, untimed; it reads the keys and the
 * nodes (which the match also reads) but no value, so the copy meets them as cold as the
 * match would. Returns us. */
static double match_floor(kvc_radix_cache *rc, const kvc_radix_req *rr, int64_t *buf) {
  const int64_t n = (rr->num_tokens > 1 ? rr->num_tokens - 1 : 0) / rc->ps * rc->ps;
  if (n == 0) return 0;
  KVB_CHECK(ctx, kvc__rx_reserve(rc, "match_floor", (size_t)n));
  size_t depth;
  const int64_t matched = kvc__rx_probe_path(rc, rr->ns, rr->tokens, n, &depth);
  const double t0 = kvb_now_us();
  int64_t at = 0;
  for (size_t i = 0; i < depth; i++) {
    const int32_t x = rc->path[i];
    const int64_t len = MIN2((int64_t)rc->hot[x].len, matched - at);
    memcpy(buf + at, rx_vals(&rc->nodes[x]), (size_t)len * sizeof *buf);
    at += len;
  }
  __asm__ volatile("" : : "r"(buf) : "memory");
  return kvb_now_us() - t0;
}

/* The rest of a matched request's life in both replays: its prompt in chunks of up to 2048
 * page-aligned tokens (SGLang's chunked prefill), each but the last checkpointed, the
 * outn output tokens in one step, then the release (insert). Not timed here: the shims
 * time the cache's share of it. */
static void run_to_finish(kvc_flow *flow, ereq *e, int64_t prompt, int64_t outn, int ps, int64_t *out) {
  kvc_req_state *one[] = {&e->st};
  int64_t end = prompt + outn;
  e->rr.num_tokens = end;
  while (e->st.prefix_len < end) {
    int64_t next = e->st.prefix_len + 2048 < prompt ? (e->st.prefix_len + 2048) / ps * ps : end;
    e->st.seq_len = next;
    const bool first = e->st.req_row == 0; /* no row yet: the request's first allocation */
    const double t0 = kvb_now_us();
    KVB_CHECK(ctx, kvc_flow_alloc_for_extend(flow, one, 1, out, NULL));
    if (first_alloc && first) add(first_alloc, kvb_now_us() - t0);
    if (next < end) KVB_CHECK(ctx, kvc_flow_cache_unfinished(flow, &e->st));
    else e->st.prefix_len = end;
  }
  KVB_CHECK(ctx, kvc_flow_release(flow, one, 1, 1, NULL));
}

/* KVB_TRACE_SEL=<trace>-<page>-<capacity> (e.g. chat-1-10000, profiling): the other
 * replays only draw their requests, so that the selected one replays the very requests it
 * replays in a full run (the generator's state runs on from one replay to the next). */
static bool replay_skipped(int trace, int ps, int64_t cap) {
  const char *sel = getenv("KVB_TRACE_SEL");
  if (!sel) return false;
  char name[64];
  snprintf(name, sizeof name, "%s-%d-%lld", trace_name[trace], ps, (long long)cap);
  if (!strcmp(sel, name)) return false;
  static int32_t conv[CONVS][MAXLEN], sys[4][4096], t[MAXLEN + 512];
  static int64_t conv_len[CONVS];
  int64_t sys_len[4] = {1024, 2048, 3072, 4096}, outn;
  memset(conv_len, 0, sizeof conv_len);
  for (int k = 0; k < 4; k++) random_tokens(sys[k], sys_len[k]);
  for (int i = 0; i < (quick ? 300 : 3000); i++) make_request(trace, cap, t, &outn, conv, conv_len, sys, sys_len);
  return true;
}

static void replay(int trace, int ps, int64_t cap) {
  if (replay_skipped(trace, ps, cap)) return;
  kvc_radix_cache_config rcfg = KVC_RADIX_CACHE_CONFIG_INIT;
  rcfg.page_size = ps;
  rcfg.num_slots = cap;
  rcfg.req_of = req_of;
  shim sh;
  memset(&sh, 0, sizeof sh);
  rcfg.free_slots = timed_flow_free; /* evictions only (sh_evict): every other call gets the flow */
  rcfg.free_user = &sh.tf;
  kvc_radix_cache *rc;
  KVB_CHECK(ctx, kvc_radix_cache_create(ctx, &rcfg, &rc));
  sh.rc = rc;
  sh.inner = kvc_radix_cache_as_prefix_cache(rc);
  kvc_prefix_cache pc;
  memset(&pc, 0, sizeof pc);
  pc.self = &sh;
  pc.is_chunk_cache = sh_zero;
  pc.supports_mamba = sh_zero;
  pc.evict = sh_evict;
  pc.evictable_size = sh_evictable;
  pc.protected_size = sh_protected;
  pc.cached_size = sh_cached;
  pc.cache_finished_req = sh_finished;
  pc.cache_unfinished_req = sh_unfinished;
  kvc_req_to_token_pool_config qc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  qc.size = 4;
  qc.max_context_len = MAXLEN + 512;
  kvc_req_to_token_pool *pool;
  KVB_CHECK(ctx, kvc_req_to_token_pool_create(ctx, &qc, &pool));
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = ps == 1 ? KVC_ALLOCATOR_TOKEN : KVC_ALLOCATOR_PAGED;
  ac.size = cap;
  ac.page_size = ps;
  kvc_allocator *alloc;
  KVB_CHECK(ctx, kvc_allocator_create(ctx, &ac, &alloc));
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = ps;
  fc.req_pool = pool;
  fc.allocator = alloc;
  fc.cache = pc;
  kvc_flow *flow;
  KVB_CHECK(ctx, kvc_flow_create(ctx, &fc, &flow));
  const char *bind = getenv("KVB_RADIX_BIND");
  sh.bound = ps == 1 && !(bind && !strcmp(bind, "0"));
  if (sh.bound) KVB_CHECK(ctx, kvc_radix_cache_bind_allocator(rc, alloc));
  int64_t *out = malloc((MAXLEN + 512) * sizeof *out);
  static int32_t conv[CONVS][MAXLEN], sys[4][4096];
  static int64_t conv_len[CONVS];
  int64_t sys_len[4] = {1024, 2048, 3072, 4096};
  memset(conv_len, 0, sizeof conv_len);
  for (int k = 0; k < 4; k++) random_tokens(sys[k], sys_len[k]);
  ereq e;
  e.toks = malloc((MAXLEN + 512) * sizeof *e.toks);
  samples match = {0}, lock = {0}, floor = {0};
  int64_t *floor_buf = malloc((MAXLEN + 512) * sizeof *floor_buf);
  if (!floor_buf) exit(1);
  int64_t prompt_total = 0, hit_total = 0;
  const int nreq = quick ? 300 : 3000;
  FILE *dump = NULL;
  if (getenv("KVB_TRACE_DUMP")) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s-%d-%lld.bin", getenv("KVB_TRACE_DUMP"), trace_name[trace], ps, (long long)cap);
    dump = fopen(path, "wb");
    if (!dump) exit(1);
  }
  for (int i = 0; i < nreq; i++) {
    int64_t outn;
    int64_t prompt = make_request(trace, cap, e.toks, &outn, conv, conv_len, sys, sys_len);
    if (dump) {
      const int64_t hdr[2] = {prompt, outn};
      if (fwrite(hdr, sizeof hdr, 1, dump) != 1 ||
          fwrite(e.toks, sizeof *e.toks, (size_t)(prompt + outn), dump) != (size_t)(prompt + outn))
        exit(1);
    }
    memset(&e.st, 0, sizeof e.st);
    memset(&e.rr, 0, sizeof e.rr);
    e.rr.tokens = e.toks;
    e.rr.num_tokens = prompt;
    e.rr.prompt_len = prompt;
    double t0;
    if (i & 1) { /* the floor, then the same match untimed */
      add(&floor, match_floor(rc, &e.rr, floor_buf));
      KVB_CHECK(ctx, kvc_radix_cache_match_req(rc, &e.st, &e.rr));
    } else {
      t0 = kvb_now_us();
      KVB_CHECK(ctx, kvc_radix_cache_match_req(rc, &e.st, &e.rr));
      add(&match, kvb_now_us() - t0);
    }
    if (e.st.cache_node) { /* lock + unlock of the admitted node (net nothing) */
      t0 = kvb_now_us();
      KVB_CHECK(ctx, kvc_radix_cache_lock(rc, e.st.cache_node));
      KVB_CHECK(ctx, kvc_radix_cache_unlock(rc, e.st.cache_node));
      add(&lock, kvb_now_us() - t0);
    }
    prompt_total += prompt;
    hit_total += e.st.prefix_len;
    /* The request finishes with prompt + output tokens. */
    run_to_finish(flow, &e, prompt, outn, ps, out);
  }
  if (dump && fclose(dump)) exit(1);
  KVB_CHECK(ctx, kvc_flow_check(flow, NULL, 0));
  double hit = (double)hit_total / (double)prompt_total;
  char what[64];
  snprintf(what, sizeof what, "%s match_req", trace_name[trace]);
  report("trace", what, ps, cap, &match, hit);
  snprintf(what, sizeof what, "%s match floor: memcpy of the slots", trace_name[trace]);
  report("floor", what, ps, cap, &floor, hit);
  snprintf(what, sizeof what, "%s lock+unlock", trace_name[trace]);
  report("trace", what, ps, cap, &lock, hit);
  snprintf(what, sizeof what, "%s cache_finished_req", trace_name[trace]);
  report("trace", what, ps, cap, &sh.finished, hit);
  snprintf(what, sizeof what, "%s cache_unfinished_req", trace_name[trace]);
  report("trace", what, ps, cap, &sh.unfinished, hit);
  if (sh.evictions)
    printf("          %s: %lld evictions, %.1f victims and %.0f tokens per eviction%s\n", trace_name[trace],
           (long long)sh.evictions, (double)(sh.tf.calls + sh.victims) / (double)sh.evictions,
           (double)(sh.tf.tokens + sh.tokens) / (double)sh.evictions, sh.bound ? " (bound allocator)" : "");
  snprintf(what, sizeof what, "%s evict", trace_name[trace]);
  report("trace", what, ps, cap, &sh.evict, hit);
  snprintf(what, sizeof what, "%s evict: allocator's free", trace_name[trace]);
  report("split", what, ps, cap, &sh.evict_alloc, hit);
  snprintf(what, sizeof what, "%s evict: the rest (tree)", trace_name[trace]);
  report("split", what, ps, cap, &sh.evict_tree, hit);
  printf("          %s: %lld prompt tokens, %lld from the cache (prefill saved)\n", trace_name[trace],
         (long long)prompt_total, (long long)hit_total);
  free(match.t), free(lock.t), free(floor.t), free(sh.finished.t), free(sh.unfinished.t), free(sh.evict.t);
  free(sh.evict_alloc.t), free(sh.evict_tree.t), free(floor_buf);
  free(e.toks);
  free(out);
  kvc_flow_destroy(flow);
  kvc_radix_cache_destroy(rc); /* before the allocator it may be bound to */
  kvc_allocator_destroy(alloc);
  kvc_req_to_token_pool_destroy(pool);
}

/* --- Part 3: SWA hybrid traces beside the full-attention cache ---------------------------- */

/* The flow's callbacks of either cache, timed around the cache's own adapter (evict
 * included its frees through the flow). */
typedef struct gshim {
  kvc_prefix_cache inner;
  kvc_radix_cache *rc;     /* the full-attention cache, or */
  kvc_swa_radix_cache *sc; /* the SWA cache (its SWA tokens count as evicted too) */
  kvc_swa_allocator *sa;
  timed_free tf; /* eviction's frees, timed: the allocator's share */
  samples finished, unfinished, evict, evict_tree;
  double evict_us, evict_tree_us;
  int64_t evict_tokens; /* full tokens freed + SWA tokens released */
} gshim;

/* The SWA cache's SWA-side frees of an eviction, straight to the allocator, timed. */
static kvc_status gs_free_swa(void *user, const int64_t *slots, size_t n) {
  gshim *s = user;
  double t0 = kvb_now_us();
  kvc_status st = kvc_swa_allocator_free_swa(s->sa, slots, n, NULL);
  s->tf.us += kvb_now_us() - t0;
  return st;
}

static int64_t swa_cached_of(const gshim *s) {
  kvc_swa_radix_sizes z = {0};
  if (s->sc) KVB_CHECK(ctx, kvc_swa_radix_cache_sizes(s->sc, &z));
  return z.swa_cached;
}

static kvc_status gs_finished(void *self, kvc_flow *f, kvc_req_state *r, int ins) {
  gshim *s = self;
  return timed_finished(&s->inner, &s->finished, f, r, ins);
}
static kvc_status gs_unfinished(void *self, kvc_flow *f, kvc_req_state *r) {
  gshim *s = self;
  return timed_unfinished(&s->inner, &s->unfinished, f, r);
}
static kvc_status gs_evict(void *self, kvc_flow *f, int64_t n, int64_t swa, int64_t mamba) {
  gshim *s = self;
  (void)mamba;
  const int64_t c0 = s->inner.cached_size(s->inner.self), w0 = swa_cached_of(s);
  /* As the adapters' evict (nothing evictable is no error), but without the flow, so
   * that the victims' frees go through the timed hooks (which free through this flow,
   * and the SWA sides straight to the allocator): the allocator's share timed apart. */
  s->tf.flow = f;
  s->tf.us = 0;
  kvc_status st;
  double t0 = kvb_now_us();
  if (s->sc) st = kvc_swa_radix_cache_evict(s->sc, NULL, n, swa, NULL, NULL);
  else st = kvc_radix_cache_evict(s->rc, NULL, n > swa ? n : swa, NULL);
  const double dt = kvb_now_us() - t0;
  if (st == KVC_ERR_OUT_OF_SLOTS) st = KVC_OK;
  add(&s->evict, dt);
  add(&s->evict_tree, dt - s->tf.us);
  s->evict_us += dt;
  s->evict_tree_us += dt - s->tf.us;
  s->evict_tokens += c0 - s->inner.cached_size(s->inner.self) + w0 - swa_cached_of(s);
  return st;
}
static int64_t gs_evictable(void *self) { return ((gshim *)self)->inner.evictable_size(((gshim *)self)->inner.self); }
static int64_t gs_protected(void *self) { return ((gshim *)self)->inner.protected_size(((gshim *)self)->inner.self); }
static int64_t gs_cached(void *self) { return ((gshim *)self)->inner.cached_size(((gshim *)self)->inner.self); }

typedef struct swa_run {
  double first_alloc; /* median us of each request's first alloc_extend */
  double match, ckpt, finished, evict, evict_tree, evict_per_token,
      tree_per_token; /* medians, us; us per token (all, the tree's share) */
  int64_t nodes_sum, cached_sum, samples, hit, prompt;
} swa_run;

static double median_of(samples *s) {
  if (s->n == 0) return 0;
  qsort(s->t, (size_t)s->n, sizeof *s->t, kvb_cmp_double);
  return s->t[s->n / 2];
}

/* One replay of `trace` (requests from a fixed seed) through the full cache (swa 0) or
 * the SWA cache (swa 1); the rows are reported, the medians returned in *out. */
static void replay_one(int trace, int ps, int64_t cap, int use_swa, swa_run *out) {
  const int32_t window = 128;
  kvc_radix_cache *rc = NULL;
  kvc_swa_radix_cache *sc = NULL;
  gshim sh;
  memset(&sh, 0, sizeof sh);
  kvc_req_to_token_pool_config qc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  qc.size = 4;
  qc.max_context_len = MAXLEN + 512;
  kvc_req_to_token_pool *pool;
  KVB_CHECK(ctx, kvc_req_to_token_pool_create(ctx, &qc, &pool));
  kvc_allocator *alloc = NULL;
  kvc_swa_allocator *sa = NULL;
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  if (use_swa) {
    kvc_swa_allocator_config ac = KVC_SWA_ALLOCATOR_CONFIG_INIT;
    ac.size_full = cap;
    ac.size_swa = swa_side_full ? cap : cap / 2 / ps * ps;
    ac.page_size = ps;
    KVB_CHECK(ctx, kvc_swa_allocator_create(ctx, &ac, &sa));
    sh.sa = sa;
    fc.swa_allocator = sa;
    fc.sliding_window = window;
  } else {
    kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
    ac.kind = ps == 1 ? KVC_ALLOCATOR_TOKEN : KVC_ALLOCATOR_PAGED;
    ac.size = cap;
    ac.page_size = ps;
    KVB_CHECK(ctx, kvc_allocator_create(ctx, &ac, &alloc));
    fc.allocator = alloc;
  }
  if (use_swa) {
    kvc_swa_radix_cache_config c = KVC_SWA_RADIX_CACHE_CONFIG_INIT;
    c.sliding_window = window;
    c.radix.page_size = ps;
    c.radix.num_slots = cap;
    c.radix.req_of = req_of;
    c.radix.free_slots = timed_flow_free;
    c.radix.free_user = &sh.tf;
    c.free_swa_slots = gs_free_swa;
    c.free_swa_user = &sh;
    c.swa_allocator = swa_defer ? sa : NULL; /* the hooks' allocator: each evict call zeroes its mapping once */
    c.flags = swa_eager ? KVC_SWA_RADIX_EAGER_ZERO : 0u;
    KVB_CHECK(ctx, kvc_swa_radix_cache_create(ctx, &c, &sc));
    sh.inner = kvc_swa_radix_cache_as_prefix_cache(sc);
    sh.sc = sc;
  } else {
    kvc_radix_cache_config c = KVC_RADIX_CACHE_CONFIG_INIT;
    c.page_size = ps;
    c.num_slots = cap;
    c.req_of = req_of;
    c.free_slots = timed_flow_free;
    c.free_user = &sh.tf;
    KVB_CHECK(ctx, kvc_radix_cache_create(ctx, &c, &rc));
    sh.inner = kvc_radix_cache_as_prefix_cache(rc);
    sh.rc = rc;
  }
  kvc_prefix_cache pc = sh.inner;
  pc.self = &sh;
  pc.evict = gs_evict;
  pc.evictable_size = gs_evictable;
  pc.protected_size = gs_protected;
  pc.cached_size = gs_cached;
  pc.cache_finished_req = gs_finished;
  pc.cache_unfinished_req = gs_unfinished;
  fc.page_size = ps;
  fc.req_pool = pool;
  fc.cache = pc;
  kvc_flow *flow;
  KVB_CHECK(ctx, kvc_flow_create(ctx, &fc, &flow));
  int64_t *out_loc = NULL; /* out_cache_loc is device memory (host memory on the host backend) */
  KVB_CHECK(ctx, kvc_memory_alloc(ctx, (MAXLEN + 512) * sizeof *out_loc, (void **)&out_loc));
  static int32_t conv[CONVS][MAXLEN], sys[4][4096];
  static int64_t conv_len[CONVS];
  int64_t sys_len[4] = {1024, 2048, 3072, 4096};
  memset(conv_len, 0, sizeof conv_len);
  rng_s = 0x5ca1ab1e; /* the same requests for both caches */
  for (int k = 0; k < 4; k++) random_tokens(sys[k], sys_len[k]);
  ereq e;
  e.toks = malloc((MAXLEN + 512) * sizeof *e.toks);
  if (!out_loc || !e.toks) exit(1);
  samples match = {0}, first = {0};
  first_alloc = &first;
  memset(out, 0, sizeof *out);
  const int nreq = quick ? 300 : 3000;
  for (int i = 0; i < nreq; i++) {
    int64_t outn;
    int64_t prompt = make_request(trace, cap, e.toks, &outn, conv, conv_len, sys, sys_len);
    memset(&e.st, 0, sizeof e.st);
    memset(&e.rr, 0, sizeof e.rr);
    e.rr.tokens = e.toks;
    e.rr.num_tokens = prompt;
    e.rr.prompt_len = prompt;
    double t0 = kvb_now_us();
    if (use_swa) KVB_CHECK(ctx, kvc_swa_radix_cache_match_req(sc, &e.st, &e.rr));
    else KVB_CHECK(ctx, kvc_radix_cache_match_req(rc, &e.st, &e.rr));
    add(&match, kvb_now_us() - t0);
    out->prompt += prompt;
    out->hit += e.st.prefix_len;
    run_to_finish(flow, &e, prompt, outn, ps, out_loc); /* the SWA flow evicts the window before each step */
    kvc_radix_stats st;
    if (use_swa) KVB_CHECK(ctx, kvc_swa_radix_cache_stats(sc, &st));
    else KVB_CHECK(ctx, kvc_radix_cache_stats(rc, &st));
    out->nodes_sum += (int64_t)st.nodes;
    out->cached_sum += gs_cached(&sh);
    out->samples++;
  }
  KVB_CHECK(ctx, kvc_flow_check(flow, NULL, 0));
  const char *who = use_swa ? "swa" : "full";
  const double hit = out->prompt ? (double)out->hit / (double)out->prompt : 0;
  out->match = median_of(&match);
  out->ckpt = median_of(&sh.unfinished);
  out->finished = median_of(&sh.finished);
  out->evict = median_of(&sh.evict);
  out->evict_tree = median_of(&sh.evict_tree);
  out->evict_per_token = sh.evict_tokens ? sh.evict_us / (double)sh.evict_tokens : 0;
  first_alloc = NULL;
  out->first_alloc = median_of(&first);
  out->tree_per_token = sh.evict_tokens ? sh.evict_tree_us / (double)sh.evict_tokens : 0;
  char what[64];
  snprintf(what, sizeof what, "%s %s match_req", trace_name[trace], who);
  report("swa", what, ps, cap, &match, hit);
  snprintf(what, sizeof what, "%s %s insert (chunk checkpoint)", trace_name[trace], who);
  report("swa", what, ps, cap, &sh.unfinished, hit);
  snprintf(what, sizeof what, "%s %s cache_finished_req", trace_name[trace], who);
  report("swa", what, ps, cap, &sh.finished, hit);
  snprintf(what, sizeof what, "%s %s evict (frees included)", trace_name[trace], who);
  report("swa", what, ps, cap, &sh.evict, hit);
  snprintf(what, sizeof what, "%s %s evict: the rest (tree)", trace_name[trace], who);
  report("swa", what, ps, cap, &sh.evict_tree, hit);
  snprintf(what, sizeof what, "%s %s first alloc_extend after a finish", trace_name[trace], who);
  report("swa", what, ps, cap, &first, hit);
  free(first.t);
  free(match.t), free(sh.finished.t), free(sh.unfinished.t), free(sh.evict.t), free(sh.evict_tree.t);
  free(e.toks);
  kvc_memory_free(ctx, out_loc);
  kvc_flow_destroy(flow);
  kvc_allocator_destroy(alloc);
  kvc_swa_allocator_destroy(sa);
  kvc_req_to_token_pool_destroy(pool);
  kvc_radix_cache_destroy(rc);
  kvc_swa_radix_cache_destroy(sc);
}

/* The launch floor, measured beside the ratios: median host us of the cheapest launch
 * through the library's device layer on the same (default) stream, a one-entry
 * kvc_swa_translate (one gather kernel), without synchronizing. */
static double launch_floor_us(void) {
  int64_t *buf = NULL; /* [0, 2): the map, [2]: the loc, [3]: the out */
  KVB_CHECK(ctx, kvc_memory_alloc(ctx, 4 * sizeof *buf, (void **)&buf));
  const int64_t zeros[4] = {0};
  KVB_CHECK(ctx, kvc_memcpy_h2d(ctx, buf, zeros, sizeof zeros, NULL));
  samples t = {0};
  for (int i = 0; i < 2000; i++) {
    const double t0 = kvb_now_us();
    KVB_CHECK(ctx, kvc_swa_translate(ctx, buf, 2, buf + 2, KVC_INDEX_I64, buf + 3, KVC_INDEX_I64, 1, NULL));
    add(&t, kvb_now_us() - t0);
  }
  KVB_CHECK(ctx, kvc_stream_synchronize(ctx, NULL));
  const double m = median_of(&t);
  free(t.t);
  kvc_memory_free(ctx, buf);
  return m;
}

static void replay_swa(int trace, int ps, int64_t cap) {
  swa_run f, w;
  replay_one(trace, ps, cap, 0, &f);
  replay_one(trace, ps, cap, 1, &w);
  const double floor_us = launch_floor_us();
  printf("launch    %-9s p%-2d %7lld floor %.2f us (one-entry translate); first alloc_extend after a finish: swa %.2f "
         "/ full %.2f us (%s)\n",
         trace_name[trace], ps, (long long)cap, floor_us, w.first_alloc, f.first_alloc, swa_eager ? "eager" : "lazy");
  if (csv)
    fprintf(csv, "launch,\"%s floor first_alloc_swa first_alloc_full %s\",%d,%lld,%.4f,%.4f,%.4f\n", trace_name[trace],
            swa_eager ? "eager" : "lazy", ps, (long long)cap, floor_us, w.first_alloc, f.first_alloc);
  const double q[6][2] = {{w.match, f.match},
                          {w.ckpt, f.ckpt},
                          {w.finished, f.finished},
                          {w.evict, f.evict},
                          {w.evict_per_token, f.evict_per_token},
                          {w.tree_per_token, f.tree_per_token}};
  double r[6];
  for (int k = 0; k < 6; k++) r[k] = q[k][1] > 0 ? q[k][0] / q[k][1] : 0;
  const int64_t m = w.samples ? w.samples : 1, mf = f.samples ? f.samples : 1;
  printf("ratio     %-9s p%-2d %7lld swa/full: match %.2f insert %.2f finished %.2f evict %.2f; evict per token %.2f, "
         "its tree share per token %.2f (%.4f / %.4f us); mean tree %lld / %lld tokens, %lld / %lld nodes; hit %.3f / "
         "%.3f\n",
         trace_name[trace], ps, (long long)cap, r[0], r[1], r[2], r[3], r[4], r[5], w.tree_per_token, f.tree_per_token,
         (long long)(w.cached_sum / m), (long long)(f.cached_sum / mf), (long long)(w.nodes_sum / m),
         (long long)(f.nodes_sum / mf), w.prompt ? (double)w.hit / (double)w.prompt : 0,
         f.prompt ? (double)f.hit / (double)f.prompt : 0);
  if (csv)
    fprintf(csv,
            "ratio,\"%s swa/full: match insert finished evict evict_per_token tree_per_token\",%d,%lld,%.4f,%.4f,%.4f,"
            "%.4f,%.4f,%.4f\n",
            trace_name[trace], ps, (long long)cap, r[0], r[1], r[2], r[3], r[4], r[5]);
}

/* --- Part 4: hybrid (Mamba) trees beside full-attention ones ----------------------------- */
/*
 * The same inserts go into a kvc_radix_cache and a kvc_mamba_radix_cache (page 16, a hybrid
 * pool with ping-pong track buffers; every insert donates a state, so each request's end
 * has one); each row times the same call on both trees, alternating, and reports both
 * and their ratio. The Mamba pool's states are tiny here (the tree's work is timed, not
 * the copy); the state copy of a matched request is timed apart with a realistic state
 * size, beside a memcpy of the same bytes.
 */
typedef struct hyb_world {
  kvc_radix_cache *rc;
  kvc_mamba_radix_cache *mc;
  kvc_req_to_token_pool *rp;
  kvc_mamba_pool *mp;
  kvc_hybrid_req_pool *hp;
  int64_t next_full, next_mamba, dropped; /* slot ids of each tree only grow */
} hyb_world;

static void hyb_make(hyb_world *w, int32_t states, const kvc_mamba_shape *conv, const int64_t *temporal, int32_t layers,
                     int64_t num_slots) {
  memset(w, 0, sizeof *w);
  kvc_radix_cache_config c = KVC_RADIX_CACHE_CONFIG_INIT;
  c.page_size = 16;
  c.num_slots = num_slots;
  c.free_slots = drop;
  c.free_user = &w->dropped;
  KVB_CHECK(ctx, kvc_radix_cache_create(ctx, &c, &w->rc));
  kvc_req_to_token_pool_config qc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  qc.size = 4;
  qc.max_context_len = 4096 + 64;
  KVB_CHECK(ctx, kvc_req_to_token_pool_create(ctx, &qc, &w->rp));
  kvc_mamba_pool_config pc = KVC_MAMBA_POOL_CONFIG_INIT;
  pc.size = states;
  pc.num_layers = layers;
  pc.num_conv = 1;
  pc.conv_shapes = conv;
  pc.conv_dtype = KVC_DTYPE_BF16;
  pc.temporal_dtype = KVC_DTYPE_F32;
  memcpy(pc.temporal_shape, temporal, sizeof pc.temporal_shape);
  pc.flags = KVC_MAMBA_POOL_NO_ZERO_ON_ALLOC;
  KVB_CHECK(ctx, kvc_mamba_pool_create(ctx, &pc, &w->mp));
  kvc_hybrid_req_pool_config hc = KVC_HYBRID_REQ_POOL_CONFIG_INIT;
  hc.flags = KVC_HYBRID_TRACK;
  hc.req_pool = w->rp;
  hc.mamba_pool = w->mp;
  KVB_CHECK(ctx, kvc_hybrid_req_pool_create(ctx, &hc, &w->hp));
  kvc_mamba_radix_cache_config mc = KVC_MAMBA_RADIX_CACHE_CONFIG_INIT;
  mc.radix = c;
  mc.hybrid_req_pool = w->hp;
  KVB_CHECK(ctx, kvc_mamba_radix_cache_create(ctx, &mc, &w->mc));
  w->next_full = w->next_mamba = 64;
}

static void hyb_free(hyb_world *w) {
  kvc_radix_cache_destroy(w->rc);
  kvc_mamba_radix_cache_destroy(w->mc);
  kvc_hybrid_req_pool_destroy(w->hp);
  kvc_mamba_pool_destroy(w->mp);
  kvc_req_to_token_pool_destroy(w->rp);
}

/* Inserts t[0:n) into both trees (the Mamba one with a new state); *ft / *mt (may be NULL)
 * get the two calls' times. */
static void hyb_put(hyb_world *w, const int32_t *t, int64_t n, double *ft, double *mt) {
  static int64_t slots[1 << 13];
  w->next_full = (w->next_full + 63) / 64 * 64;
  for (int64_t i = 0; i < n; i++) slots[i] = w->next_full++;
  double t0 = kvb_now_us();
  KVB_CHECK(ctx, kvc_radix_cache_insert(w->rc, NULL, 0, t, slots, n, 0, NULL));
  if (ft) *ft = kvb_now_us() - t0;
  w->next_mamba = (w->next_mamba + 63) / 64 * 64;
  for (int64_t i = 0; i < n; i++) slots[i] = w->next_mamba++;
  int32_t st = 0;
  KVB_CHECK(ctx, kvc_mamba_pool_alloc(w->mp, 1, &st, NULL));
  int taken = 0;
  t0 = kvb_now_us();
  KVB_CHECK(ctx, kvc_mamba_radix_cache_insert(w->mc, NULL, 0, t, slots, n, st, NULL, &taken));
  if (mt) *mt = kvb_now_us() - t0;
  if (!taken) KVB_CHECK(ctx, kvc_mamba_pool_free(w->mp, &st, 1));
}

static void hyb_fill(hyb_world *w, int64_t tokens) {
  int32_t t[1024];
  for (int64_t cached = 0; cached < tokens;) {
    int64_t n = range(16, 64) * 16;
    random_tokens(t, n);
    hyb_put(w, t, n, NULL, NULL);
    KVB_CHECK(ctx, kvc_radix_cache_sizes(w->rc, NULL, NULL, &cached));
  }
}

static void hyb_report(const char *what, int64_t tree, samples *f, samples *m) {
  char name[96];
  snprintf(name, sizeof name, "%s: full attention", what);
  qsort(f->t, (size_t)f->n, sizeof *f->t, kvb_cmp_double);
  qsort(m->t, (size_t)m->n, sizeof *m->t, kvb_cmp_double);
  const double ratio = m->t[m->n / 2] / f->t[f->n / 2];
  report("hybrid", name, 16, tree, f, -1);
  snprintf(name, sizeof name, "%s: Mamba (x%.2f)", what, ratio);
  report("hybrid", name, 16, tree, m, -1);
  free(f->t), free(m->t);
}

static const kvc_mamba_shape tiny_conv = {1, 0, {4, 0, 0}};
static const int64_t tiny_temporal[3] = {1, 1, 4};

static void bench_hybrid(int64_t tree) {
  hyb_world w;
  hyb_make(&w, 16384, &tiny_conv, tiny_temporal, 1, (int64_t)1 << 26);
  hyb_fill(&w, tree);
  samples fm = {0}, mm = {0}, fi = {0}, mi = {0}, fe = {0}, me = {0};
  /* match_prefix of 4096 with a 3584-token prefix cached as 8 growing inserts */
  enum { K = 16 };
  static int32_t q[K][4096];
  for (int k = 0; k < K; k++) {
    random_tokens(q[k], 4096);
    for (int j = 1; j <= 8; j++) hyb_put(&w, q[k], 3584 / 8 * j, NULL, NULL);
  }
  const int reps = quick ? 2000 : 20000;
  for (int r = 0; r < reps; r++) {
    kvc_radix_match m;
    int32_t st;
    double t0 = kvb_now_us();
    KVB_CHECK(ctx, kvc_radix_cache_match_prefix(w.rc, 0, q[r % K], 4096, &m));
    add(&fm, kvb_now_us() - t0);
    if (m.len != 3584) exit(3);
    t0 = kvb_now_us();
    KVB_CHECK(ctx, kvc_mamba_radix_cache_match_prefix(w.mc, 0, q[r % K], 4096, &m, &st, NULL));
    add(&mm, kvb_now_us() - t0);
    if (m.len != 3584 || !st) exit(3);
  }
  hyb_report("match_prefix 4096 (3584 cached, 8 nodes)", tree, &fm, &mm);
  /* insert of 4096 with 3584 present, then evict 4096 to keep the size (LRU: this one) */
  const int ireps = quick ? 500 : 5000;
  static int32_t t[4096];
  for (int r = 0; r < ireps; r++) {
    random_tokens(t, 4096);
    hyb_put(&w, t, 3584, NULL, NULL);
    double ft, mt;
    hyb_put(&w, t, 4096, &ft, &mt);
    add(&fi, ft);
    add(&mi, mt);
    double t0 = kvb_now_us();
    KVB_CHECK(ctx, kvc_radix_cache_evict(w.rc, NULL, 4096, NULL));
    add(&fe, kvb_now_us() - t0);
    t0 = kvb_now_us();
    KVB_CHECK(ctx, kvc_mamba_radix_cache_evict(w.mc, NULL, 4096, 0, NULL, NULL));
    add(&me, kvb_now_us() - t0);
    hyb_fill(&w, tree); /* refill (not timed) */
  }
  hyb_report("insert 4096 (3584 present)", tree, &fi, &mi);
  hyb_report("evict 4096", tree, &fe, &me);
  hyb_free(&w);
}

/* cache_finished_req of a 4096-token request (3584 present) through a flow: the radix
 * cache behind a plain flow, the Mamba one behind a hybrid flow (the request donates its
 * track checkpoint of 4096 tokens; the hybrid pool's mapping launch is part of the call). */
static void bench_hybrid_finished(int64_t tree) {
  hyb_world w;
  hyb_make(&w, 16384, &tiny_conv, tiny_temporal, 1, (int64_t)1 << 26);
  kvc_mamba_radix_cache_destroy(w.mc);
  kvc_radix_cache_destroy(w.rc);
  const int64_t cap = tree + 65536;
  kvc_radix_cache_config c = KVC_RADIX_CACHE_CONFIG_INIT;
  c.page_size = 16;
  c.num_slots = cap;
  c.req_of = req_of;
  KVB_CHECK(ctx, kvc_radix_cache_create(ctx, &c, &w.rc));
  kvc_mamba_radix_cache_config mc = KVC_MAMBA_RADIX_CACHE_CONFIG_INIT;
  mc.radix = c;
  mc.hybrid_req_pool = w.hp;
  KVB_CHECK(ctx, kvc_mamba_radix_cache_create(ctx, &mc, &w.mc));
  kvc_req_to_token_pool_config qc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  qc.size = 4;
  qc.max_context_len = 4096 + 64;
  kvc_req_to_token_pool *fpool;
  KVB_CHECK(ctx, kvc_req_to_token_pool_create(ctx, &qc, &fpool));
  kvc_allocator *fa, *ma;
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = KVC_ALLOCATOR_PAGED;
  ac.size = cap;
  ac.page_size = 16;
  KVB_CHECK(ctx, kvc_allocator_create(ctx, &ac, &fa));
  KVB_CHECK(ctx, kvc_allocator_create(ctx, &ac, &ma));
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = 16;
  fc.req_pool = fpool;
  fc.allocator = fa;
  fc.cache = kvc_radix_cache_as_prefix_cache(w.rc);
  kvc_flow *ff, *mf;
  KVB_CHECK(ctx, kvc_flow_create(ctx, &fc, &ff));
  fc.req_pool = w.rp;
  fc.allocator = ma;
  fc.hybrid_req_pool = w.hp;
  fc.cache = kvc_mamba_radix_cache_as_prefix_cache(w.mc);
  KVB_CHECK(ctx, kvc_flow_create(ctx, &fc, &mf));
  static int32_t q[4096];
  static int64_t slots[4096], out[4096];
  int64_t cached = 0;
  while (cached < tree) { /* the same unrelated requests in both, allocator slots */
    int64_t n = range(16, 64) * 16;
    random_tokens(q, n);
    KVB_CHECK(ctx, kvc_allocator_alloc(fa, (size_t)n, slots));
    KVB_CHECK(ctx, kvc_radix_cache_insert(w.rc, ff, 0, q, slots, n, 0, NULL));
    KVB_CHECK(ctx, kvc_allocator_alloc(ma, (size_t)n, slots));
    int32_t st;
    int taken;
    KVB_CHECK(ctx, kvc_mamba_pool_alloc(w.mp, 1, &st, NULL));
    KVB_CHECK(ctx, kvc_mamba_radix_cache_insert(w.mc, mf, 0, q, slots, n, st, NULL, &taken));
    if (!taken) KVB_CHECK(ctx, kvc_mamba_pool_free(w.mp, &st, 1));
    KVB_CHECK(ctx, kvc_radix_cache_sizes(w.rc, NULL, NULL, &cached));
  }
  samples fs = {0}, ms = {0};
  const int reps = quick ? 300 : 3000;
  ereq e;
  e.toks = q;
  for (int r = 0; r < reps; r++) {
    random_tokens(q, 4096);
    for (int side = 0; side < 2; side++) {
      kvc_flow *flow = side ? mf : ff;
      kvc_allocator *a = side ? ma : fa;
      KVB_CHECK(ctx, kvc_allocator_alloc(a, 3584, slots));
      if (side) {
        int32_t st;
        int taken;
        KVB_CHECK(ctx, kvc_mamba_pool_alloc(w.mp, 1, &st, NULL));
        KVB_CHECK(ctx, kvc_mamba_radix_cache_insert(w.mc, flow, 0, q, slots, 3584, st, NULL, &taken));
        if (!taken) KVB_CHECK(ctx, kvc_mamba_pool_free(w.mp, &st, 1));
      } else {
        KVB_CHECK(ctx, kvc_radix_cache_insert(w.rc, flow, 0, q, slots, 3584, 0, NULL));
      }
      memset(&e.st, 0, sizeof e.st);
      memset(&e.rr, 0, sizeof e.rr);
      e.rr.tokens = q;
      e.rr.num_tokens = e.rr.prompt_len = 4096;
      if (side) KVB_CHECK(ctx, kvc_mamba_radix_cache_match_req(w.mc, flow, &e.st, &e.rr, NULL));
      else KVB_CHECK(ctx, kvc_radix_cache_match_req(w.rc, &e.st, &e.rr));
      e.st.seq_len = 4096;
      kvc_req_state *one[] = {&e.st};
      KVB_CHECK(ctx, kvc_flow_alloc_for_extend(flow, one, 1, out, NULL));
      e.st.mamba_track_seqlen[0] = 4096; /* the model's checkpoint at the end */
      double t0 = kvb_now_us();
      if (side) KVB_CHECK(ctx, kvc_mamba_radix_cache_cache_finished_req(w.mc, flow, &e.st, 1));
      else KVB_CHECK(ctx, kvc_radix_cache_cache_finished_req(w.rc, flow, &e.st, 1));
      add(side ? &ms : &fs, kvb_now_us() - t0);
      KVB_CHECK(ctx, kvc_req_to_token_pool_free(side ? w.rp : fpool, e.st.req_row));
      if (side) KVB_CHECK(ctx, kvc_mamba_radix_cache_evict(w.mc, flow, 4096, 0, NULL, NULL));
      else KVB_CHECK(ctx, kvc_radix_cache_evict(w.rc, flow, 4096, NULL)); /* keep the size */
    }
  }
  KVB_CHECK(ctx, kvc_flow_check(ff, NULL, 0));
  KVB_CHECK(ctx, kvc_flow_check(mf, NULL, 0));
  hyb_report("cache_finished_req 4096 (3584 present)", tree, &fs, &ms);
  kvc_flow_destroy(ff);
  kvc_flow_destroy(mf);
  kvc_allocator_destroy(fa);
  kvc_allocator_destroy(ma);
  kvc_req_to_token_pool_destroy(fpool);
  hyb_free(&w);
}

/* The copy of a matched state into the request's slot (match_req: one launch of the Mamba
 * pool's copy kernel) with a realistic state: 24 Mamba layers of a conv state (4 x 1024
 * bf16) and an SSM state (16 x 64 x 64 f32), 6.2 MB a slot; beside a memcpy of the same
 * bytes (host backend: the kernel's host twin does the copy). */
static void bench_hybrid_copy(void) {
  hyb_world w;
  const kvc_mamba_shape conv = {2, 0, {4, 1024, 0}};
  const int64_t temporal[3] = {16, 64, 64};
  const int32_t layers = 24;
  hyb_make(&w, 8, &conv, temporal, layers, 1 << 16);
  static int32_t q[1024];
  random_tokens(q, 1024);
  hyb_put(&w, q, 512, NULL, NULL);
  size_t state_bytes = 0, spec = 0;
  KVB_CHECK(ctx, kvc_mamba_pool_memory_bytes(w.mp, &state_bytes, &spec));
  const size_t slot_bytes = state_bytes / 9; /* size + 1 rows */
  unsigned char *a = malloc(slot_bytes), *b = malloc(slot_bytes);
  if (!a || !b) exit(1);
  memset(a, 1, slot_bytes), memset(b, 2, slot_bytes);
  samples s = {0}, f = {0};
  const int reps = quick ? 50 : 500;
  ereq e;
  e.toks = q;
  int32_t own = 0;
  KVB_CHECK(ctx, kvc_mamba_pool_alloc(w.mp, 1, &own, NULL));
  for (int r = 0; r < reps; r++) {
    memset(&e.st, 0, sizeof e.st);
    memset(&e.rr, 0, sizeof e.rr);
    e.rr.tokens = q;
    e.rr.num_tokens = 1024;
    e.st.mamba_slot = own;
    double t0 = kvb_now_us();
    KVB_CHECK(ctx, kvc_mamba_radix_cache_match_req(w.mc, NULL, &e.st, &e.rr, NULL));
    KVB_CHECK(ctx, kvc_stream_synchronize(ctx, NULL));
    add(&s, kvb_now_us() - t0);
    if (e.st.prefix_len != 512) exit(3);
    KVB_CHECK(ctx, kvc_mamba_radix_cache_unlock(w.mc, e.st.cache_node));
    t0 = kvb_now_us();
    memcpy(b, a, slot_bytes);
    __asm__ volatile("" : : "r"(b) : "memory");
    add(&f, kvb_now_us() - t0);
  }
  qsort(s.t, (size_t)s.n, sizeof *s.t, kvb_cmp_double);
  qsort(f.t, (size_t)f.n, sizeof *f.t, kvb_cmp_double);
  char what[96];
  snprintf(what, sizeof what, "match_req + state copy %zu B (%.1f GB/s)", slot_bytes,
           (double)slot_bytes / s.t[s.n / 2] * 1e-3);
  report("hybrid", what, 16, 512, &s, -1);
  snprintf(what, sizeof what, "memcpy %zu B (%.1f GB/s)", slot_bytes, (double)slot_bytes / f.t[f.n / 2] * 1e-3);
  report("floor", what, 16, 512, &f, -1);
  free(s.t), free(f.t), free(a), free(b);
  KVB_CHECK(ctx, kvc_mamba_pool_free(w.mp, &own, 1));
  hyb_free(&w);
}

int main(int argc, char **argv) {
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  const char *csv_path = NULL;
  if (kvb_parse_args(argc, argv, &cfg, &quick, &csv_path)) return 2;
  /* The radix caches are host-only, so the host backend is the default; KVB_BACKEND=cuda
   * runs the allocators' launches for real (meant for part 3, KVB_ONLY=swa: the SWA
   * frees' device-mapping launches in the evict rows' host time). */
  const char *backend = getenv("KVB_BACKEND");
  if (backend && strcmp(backend, "host") && strcmp(backend, "cuda")) {
    fprintf(stderr, "KVB_BACKEND=%s: host (default) or cuda\n", backend);
    return 2;
  }
  cfg.backend = backend && !strcmp(backend, "cuda") ? KVC_BACKEND_CUDA : KVC_BACKEND_HOST;
  const char *only = getenv("KVB_ONLY"); /* profiling: run one part (match, insert, finished, lock, evict, trace) */
  if (cfg.backend == KVC_BACKEND_CUDA && (!only || strcmp(only, "swa"))) {
    /* the other parts hand host buffers to the flows as device vectors */
    fprintf(stderr, "KVB_BACKEND=cuda needs KVB_ONLY=swa\n");
    return 2;
  }
  const char *side = getenv("KVB_SWA_SIDE");
  if (side && strcmp(side, "half") && strcmp(side, "full")) {
    fprintf(stderr, "KVB_SWA_SIDE=%s: half (default) or full\n", side);
    return 2;
  }
  swa_side_full = side && !strcmp(side, "full");
  KVB_CHECK(NULL, kvc_context_create(&cfg, &ctx));
  const char *defer = getenv("KVB_SWA_DEFER"), *eager = getenv("KVB_SWA_EAGER");
  swa_defer = !defer || strcmp(defer, "0");
  swa_eager = eager && !strcmp(eager, "1");
  printf("SWA cache zeroes: %s\n", swa_eager ? "eager (KVB_SWA_EAGER=1: one launch at each call's end)"
                                             : "lazy (carried by the next allocation's launch)");
  printf("backend %s, SWA evict scope %s, part 3's SWA side %s\n",
         kvc_context_backend(ctx) == KVC_BACKEND_CUDA ? "cuda" : "host",
         swa_defer ? "on" : "off (KVB_SWA_DEFER=0: a device-mapping launch per victim)",
         swa_side_full ? "as large as the full side (KVB_SWA_SIDE=full)" : "half the full side");
  if (csv_path) {
    csv = fopen(csv_path, "w");
    if (!csv) return 1;
    fprintf(csv, "section,what,page_size,tree_tokens,median_us,p99_us,count,hit_rate\n");
  }
  printf("%-9s %-44s %4s %8s %9s %9s %7s\n", "section", "operation", "page", "tree", "median_us", "p99_us", "count");
  { /* what one timed interval costs: the split rows' tree share holds one per victim */
    samples t = {0};
    for (int r = 0; r < 100000; r++) {
      double t0 = kvb_now_us();
      add(&t, kvb_now_us() - t0);
    }
    report("floor", "an empty timed interval (two clock reads)", 0, 0, &t, -1);
    free(t.t);
  }
  const int64_t sizes[3] = {10000, 100000, 1000000};
#define PART(name) (!only || !strcmp(only, name))
  for (int z = 0; z < 3; z++) {
    if (PART("match")) {
      bench_match(16, sizes[z], 1);
      bench_match(16, sizes[z], 8);
      bench_match(1, sizes[z], 1);
      bench_match(1, sizes[z], 8);
    }
    if (PART("insert")) {
      bench_insert(16, sizes[z], 3584);
      bench_insert(16, sizes[z], 0);
    }
    if (PART("finished")) {
      bench_finished(16, sizes[z], 3584);
      bench_finished(16, sizes[z], 0);
    }
    if (PART("lock")) bench_lock(sizes[z]);
  }
  if (PART("memory"))
    for (int p = 0; p < 3; p++) bench_memory((int[]){1, 16, 64}[p], 1000000);
  if (PART("evict")) {
    bench_evict(16, 1000000);
    bench_evict(1, 1000000);
    bench_evict_flow(16, 1000000);
    bench_evict_flow(1, 1000000);
  }
  if (PART("hybrid")) {
    for (int z = 0; z < 3; z++) bench_hybrid(sizes[z]);
    for (int z = 0; z < 3; z++) bench_hybrid_finished(sizes[z]);
    bench_hybrid_copy();
  }
  for (int trace = 0; trace < 3 && PART("trace"); trace++)
    for (int p = 0; p < 3; p++)
      for (int z = 0; z < 3; z++) {
        const int pss[3] = {1, 16, 64};
        /* pressure: capacity well below the working set (4096 stems x up to 2k tokens) */
        replay(trace, pss[p], sizes[z]);
      }
  for (int trace = TRACE_SYSPROMPT; trace <= TRACE_PRESSURE && PART("swa"); trace++)
    for (int p = 0; p < 2; p++)
      for (int z = 0; z < 3; z++) replay_swa(trace, (int[]){1, 16}[p], sizes[z]);
  if (csv) fclose(csv);
  kvc_context_destroy(ctx);
  return 0;
}
