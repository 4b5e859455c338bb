/*
 * serve.c — the main example: a continuous-batching scheduler loop in C that drives
 * kvcache end to end over a generated request trace.
 *
 * Each step: admit waiting requests by capacity (chunked prefill under a token budget),
 * allocate their KV (kvc_flow_alloc_for_extend), allocate one token for every decoding
 * request (kvc_flow_alloc_for_decode, retracting the newest request when memory runs
 * out), write real K/V rows into every layer with kvc_kv_pool_set_kv, release finished
 * requests (kvc_flow_release), keep multi-turn streaming sessions' KV between turns.
 * With --radix, prompts start with one of 8 shared system prompts and a radix prefix
 * cache (kvc_radix_cache, under the session cache) reuses their KV; the summary prints
 * the hit rate and the prefill tokens saved. With --swa the model is a hybrid SWA one
 * (SGLang's SWA path): every other layer is sliding-window attention (window 128) in an
 * SWA KV pool with an SWA allocator (the SWA side a quarter of the pool), and the prefix
 * cache is the SWA radix cache (tombstones, window-valid matches) on the same
 * shared-prefix trace; the summary prints its hit rate, the prefill tokens saved and
 * both components' cached tokens. With --hybrid, the model is a hybrid Mamba one (3
 * linear-attention / Mamba layers per full-attention layer): requests also hold Mamba
 * states (kvc_hybrid_req_pool with ping-pong track buffers, checkpointed by a copy launch
 * at chunk ends, the prompt end and every 64 decoded tokens), the prefix cache is the
 * Mamba radix cache (kvc_mamba_radix_cache), whose hits also copy the matched state into
 * the request's slot, and a request's first chunk stops at its branching length so that
 * shared prefixes get a state.
 * The model shape is Llama-3-8B's KV (32 layers, 8 KV heads x 128, bf16); on the host
 * backend the default is a smaller run. Prints a progress line and a summary with host
 * microseconds per step, and checks at the end that everything was freed.
 *
 *   kvc_example_serve [--requests N] [--seed S] [--check] [--layers L] [--page-size P]
 *                     [--pool-tokens T] [--max-running R] [--chunk C] [--sessions F]
 *                     [--radix] [--swa] [--hybrid] [--quiet]
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvcache.h"

/* --- Options ------------------------------------------------------------------------- */

typedef struct options {
  int requests, layers, page_size, max_running, chunk, quiet, check, radix, swa, hybrid;
  int64_t pool_tokens;
  double sessions;
  uint64_t seed;
} options;

static void usage(FILE *out, int code) {
  fprintf(out, "usage: kvc_example_serve [--requests N] [--seed S] [--check] [--layers L] [--page-size P]\n"
               "                         [--pool-tokens T] [--max-running R] [--chunk C] [--sessions F] [--radix]\n"
               "                         [--swa] [--hybrid] [--quiet]\n"
               "  --requests N     requests in the generated trace (default 2000 on CUDA, 300 on host)\n"
               "  --seed S         trace seed (default 42)\n"
               "  --check          check mode: audit conservation after every call (as KVC_CHECK=1)\n"
               "  --layers L       KV layers (default 32 on CUDA, 2 on host)\n"
               "  --page-size P    tokens per page (default 16)\n"
               "  --pool-tokens T  KV pool capacity in tokens (default 262144 on CUDA, 65536 on host)\n"
               "  --max-running R  largest running batch (default 256)\n"
               "  --chunk C        prefill chunk in tokens (default 8192)\n"
               "  --sessions F     fraction of requests that are multi-turn sessions, 0..1 (default 0.2)\n"
               "  --radix          radix prefix cache (shared-prefix trace; prints hit rate, prefill saved)\n"
               "  --swa            hybrid SWA model: every other layer sliding-window (128), SWA radix cache\n"
               "                   on the shared-prefix trace (prints hit rate, prefill saved)\n"
               "  --hybrid         hybrid Mamba model: 3 Mamba layers per KV layer, Mamba radix cache on the\n"
               "                   shared-prefix trace (prints hit rate, prefill saved)\n"
               "  --quiet          no per-step progress lines\n"
               "  --help           this text\n"
               "Backend: KVC_BACKEND=auto|host|cuda (auto: CUDA when a GPU is usable).\n");
  exit(code);
}

/* A whole-string number in [lo, hi], or an error naming the flag (exit 2): "abc", "12x",
 * "" and out-of-range values are refused, never read as 0 or a default. */
static long long parse_int(const char *flag, const char *v, long long lo, long long hi) {
  char *end = NULL;
  errno = 0;
  long long x = strtoll(v, &end, 0);
  if (errno || end == v || *end || x < lo || x > hi) {
    fprintf(stderr, "kvc_example_serve: %s wants an integer in [%lld, %lld], got '%s'\n", flag, lo, hi, v);
    exit(2);
  }
  return x;
}
static double parse_fraction(const char *flag, const char *v) {
  char *end = NULL;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !(x >= 0.0 && x <= 1.0)) {
    fprintf(stderr, "kvc_example_serve: %s wants a number in [0, 1], got '%s'\n", flag, v);
    exit(2);
  }
  return x;
}

/* --- Trace ---------------------------------------------------------------------------- */

typedef struct rng {
  uint64_t s;
} rng;
static uint64_t next_u64(rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double uniform(rng *r) { return ((double)(next_u64(r) >> 11) + 0.5) / 9007199254740992.0; }
static double normal(rng *r) { return sqrt(-2.0 * log(uniform(r))) * cos(6.283185307179586 * uniform(r)); }
static int64_t lognormal(rng *r, double median, double sigma, int64_t lo, int64_t hi) {
  double v = median * exp(sigma * normal(r));
  return v < (double)lo ? lo : v > (double)hi ? hi : (int64_t)v;
}

typedef enum { R_PENDING, R_WAITING, R_RUNNING, R_DONE } rstate;

typedef struct request {
  kvc_req_state kv;  /* first: the radix cache's req_of finds rr from it */
  kvc_radix_req rr;  /* --radix: token ids (system prompt + random), kept for every turn */
  int sys;           /* --radix: its system prompt */
  int64_t radix_hit; /* --radix: tokens matched at its admission, counted once it is extended */
  int64_t branch;    /* --hybrid: where the first chunk stops to cache a state (SGLang
                        mamba_branching_seqlen), 0 = nowhere */
  bool radix_pending;
  int64_t arrival;   /* step at which it becomes visible */
  int64_t prompt;    /* tokens of this turn's prompt (incl. the session's history) */
  int64_t output;    /* tokens to generate this turn */
  int64_t generated; /* tokens generated so far this turn */
  int64_t filled;    /* prompt tokens whose KV exists (prefill progress) */
  int turns_left;    /* further turns of its session */
  rstate state;
} request;

/* --- Timing ---------------------------------------------------------------------------- */

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}
static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* --- The example ----------------------------------------------------------------------- */

static kvc_context *ctx;

/* --radix: the token ids of a request (a system prompt, then its own random tokens). */
enum { SYSTEM_PROMPTS = 8 };
static int32_t *sys_tokens[SYSTEM_PROMPTS];
static int64_t sys_len[SYSTEM_PROMPTS];
static kvc_radix_req *req_of(void *user, const kvc_req_state *kv) {
  (void)user;
  return &((request *)(uintptr_t)kv)->rr;
}
static int32_t *request_tokens(request *q, int64_t width, rng *r) {
  int32_t *t = malloc((size_t)width * sizeof *t);
  if (!t) exit(1);
  for (int64_t i = 0; i < width; i++)
    t[i] = i < sys_len[q->sys] ? sys_tokens[q->sys][i] : (int32_t)(next_u64(r) % 128000);
  return t;
}

#define CHECK(call)                                                                               \
  do {                                                                                            \
    kvc_status st_ = (call);                                                                      \
    if (st_ != KVC_OK) {                                                                          \
      fprintf(stderr, "%s:%d: %s -> %s\n  %s\n", __FILE__, __LINE__, #call, kvc_status_name(st_), \
              kvc_last_error(ctx));                                                               \
      exit(1);                                                                                    \
    }                                                                                             \
  } while (0)

/* --- Plain or SWA model (--swa) -------------------------------------------------------- */

static int64_t kv_available(const kvc_allocator *alloc, const kvc_swa_allocator *swa) {
  return swa ? kvc_swa_allocator_available_size(swa) : kvc_allocator_available_size(alloc);
}

/* One layer's K/V rows at the step's slots (an SWA layer's through the full->SWA mapping). */
static kvc_status set_kv(kvc_kv_pool *kv, kvc_swa_kv_pool *swa_kv, int layer, const int64_t *loc, size_t n,
                         const void *k, const void *v) {
  if (swa_kv)
    return kvc_swa_kv_pool_set_kv(swa_kv, layer, loc, NULL, KVC_INDEX_I64, n, k, v, KVC_DTYPE_BF16, 0, 0, NULL, 1.0f,
                                  NULL, 1.0f, NULL);
  return kvc_kv_pool_set_kv(kv, layer, loc, KVC_INDEX_I64, n, k, v, KVC_DTYPE_BF16, 0, 0, NULL, 1.0f, NULL, 1.0f, NULL);
}

/* A waiting request gives back its admission match's locks (it matches again later). */
static void unlock_admission(kvc_radix_cache *radix, kvc_swa_radix_cache *swar, request *q) {
  if (swar) CHECK(kvc_swa_radix_cache_unlock(swar, q->kv.cache_node, q->rr.swa_lock));
  else CHECK(kvc_radix_cache_unlock(radix, q->kv.cache_node));
  q->rr.swa_lock = 0;
  q->kv.cache_node = NULL;
}

/* --- Hybrid Mamba model (--hybrid) ------------------------------------------------------ */

static kvc_mamba_pool *mamba;
static kvc_hybrid_req_pool *hybrid;
static kvc_mamba_radix_cache *mradix;

/* A waiting request's admission match under --hybrid: its lock, and the Mamba slot a hit
 * forked for it (it matches again later). */
static void unlock_admission_mamba(request *q) {
  CHECK(kvc_mamba_radix_cache_unlock(mradix, q->kv.cache_node));
  if (q->kv.mamba_slot > 0 && !q->kv.req_row) {
    CHECK(kvc_mamba_pool_free(mamba, &q->kv.mamba_slot, 1));
    q->kv.mamba_slot = 0;
  }
  q->kv.cache_node = NULL;
}

/* The model checkpoints the running state of a request into its next ping-pong track slot
 * (a real copy launch), for its committed tokens floored to a page; the cache takes the
 * newest checkpoint that fits when the request finishes or between chunks. */
static void checkpoint(request *q, int64_t page) {
  if (!hybrid || q->kv.mamba_slot <= 0) return;
  const int k = q->kv.mamba_track_seqlen[0] > q->kv.mamba_track_seqlen[1] ? 1 : 0;
  const int64_t len = q->kv.kv_committed_len / page * page;
  if (len == 0 || q->kv.mamba_track[k] <= 0) return;
  CHECK(kvc_mamba_pool_copy_from(mamba, &q->kv.mamba_slot, &q->kv.mamba_track[k], 1, NULL));
  q->kv.mamba_track_seqlen[k] = len;
}

int main(int argc, char **argv) {
  options o = {0, 0, 16, 256, 8192, 0, 0, 0, 0, 0, 0, 0.2, 42}; /* 0: the backend's default */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) usage(stdout, 0);
    if (!strcmp(a, "--check")) {
      o.check = 1;
      continue;
    }
    if (!strcmp(a, "--quiet")) {
      o.quiet = 1;
      continue;
    }
    if (!strcmp(a, "--radix")) {
      o.radix = 1;
      continue;
    }
    if (!strcmp(a, "--swa")) { /* the shared-prefix trace of --radix, over the SWA cache */
      o.swa = o.radix = 1;
      continue;
    }
    if (!strcmp(a, "--hybrid")) { /* the shared-prefix trace of --radix, over the Mamba cache */
      o.hybrid = o.radix = 1;
      continue;
    }
    if (strncmp(a, "--", 2) || i + 1 >= argc) {
      fprintf(stderr, "kvc_example_serve: %s '%s'\n",
              i + 1 >= argc && !strncmp(a, "--", 2) ? "missing value for" : "unknown argument", a);
      usage(stderr, 2);
    }
    const char *v = argv[++i];
    if (!strcmp(a, "--requests")) o.requests = (int)parse_int(a, v, 1, 10000000);
    else if (!strcmp(a, "--seed")) o.seed = (uint64_t)parse_int(a, v, 0, INT64_MAX);
    else if (!strcmp(a, "--layers")) o.layers = (int)parse_int(a, v, 1, 1024);
    else if (!strcmp(a, "--page-size")) o.page_size = (int)parse_int(a, v, 1, 4096);
    else if (!strcmp(a, "--pool-tokens")) o.pool_tokens = parse_int(a, v, 1, INT64_C(1) << 40);
    else if (!strcmp(a, "--max-running")) o.max_running = (int)parse_int(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--chunk")) o.chunk = (int)parse_int(a, v, 1, 1 << 30);
    else if (!strcmp(a, "--sessions")) o.sessions = parse_fraction(a, v);
    else {
      fprintf(stderr, "kvc_example_serve: unknown option '%s'\n", a);
      usage(stderr, 2);
    }
  }
  if (o.swa && o.hybrid) {
    fprintf(stderr, "kvc_example_serve: --swa and --hybrid are two different models: choose one\n");
    usage(stderr, 2);
  }
  kvc_context_config cc = KVC_CONTEXT_CONFIG_INIT;
  if (o.check) cc.flags |= KVC_CONTEXT_CHECK;
  CHECK(kvc_context_create(&cc, &ctx));
  const int cuda = kvc_context_backend(ctx) == KVC_BACKEND_CUDA;
  if (!o.requests) o.requests = cuda ? 2000 : 300;
  if (!o.layers) o.layers = cuda ? 32 : 2;
  if (!o.pool_tokens) o.pool_tokens = cuda ? 262144 : 65536;
  o.check = kvc_context_check_mode(ctx) != 0; /* --check or KVC_CHECK=1 */
  kvc_device_info info;
  CHECK(kvc_context_device_info(ctx, &info));
  const int heads = 8, head_dim = 128, width = 16384;
  printf("kvcache serve example: backend %s (%s), %d requests, seed %llu, %d layers x %d heads x %d bf16, "
         "page %d, pool %lld tokens, check %s\n",
         cuda ? "cuda" : "host", info.name, o.requests, (unsigned long long)o.seed, o.layers, heads, head_dim,
         o.page_size, (long long)o.pool_tokens, o.check ? "on" : "off");

  /* --- Objects --- */
  kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rc.size = o.max_running + 64; /* sessions hold rows between turns */
  rc.max_context_len = width;
  kvc_req_to_token_pool *rows;
  CHECK(kvc_req_to_token_pool_create(ctx, &rc, &rows));
  kvc_allocator *alloc = NULL;
  kvc_kv_pool *kv = NULL;
  kvc_swa_allocator *swa = NULL; /* --swa: instead of alloc / kv */
  kvc_swa_kv_pool *swa_kv = NULL;
  const int32_t window = 128;
  const int64_t swa_tokens = (o.pool_tokens / 4 + o.page_size - 1) / o.page_size * o.page_size;
  int32_t *layer_ids = malloc((size_t)o.layers * sizeof *layer_ids);
  if (!o.swa) {
    kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
    ac.kind = o.page_size == 1 ? KVC_ALLOCATOR_TOKEN : KVC_ALLOCATOR_PAGED;
    ac.size = o.pool_tokens;
    ac.page_size = o.page_size;
    CHECK(kvc_allocator_create(ctx, &ac, &alloc));
    kvc_kv_pool_config kc = KVC_KV_POOL_CONFIG_INIT;
    kc.kind = KVC_KV_MHA;
    kc.size = o.pool_tokens;
    kc.page_size = o.page_size;
    kc.dtype = KVC_DTYPE_BF16;
    kc.layer_num = o.layers;
    kc.head_num = heads;
    kc.head_dim = head_dim;
    CHECK(kvc_kv_pool_create(ctx, &kc, &kv));
  } else { /* full layers 0, 2, 4, ...; SWA layers 1, 3, 5, ... */
    const int nfull = (o.layers + 1) / 2, nswa = o.layers / 2;
    for (int l = 0; l < o.layers; l++) layer_ids[(l & 1) ? nfull + l / 2 : l / 2] = l;
    kvc_swa_allocator_config sc = KVC_SWA_ALLOCATOR_CONFIG_INIT;
    sc.size_full = o.pool_tokens;
    sc.size_swa = swa_tokens;
    sc.page_size = o.page_size;
    CHECK(kvc_swa_allocator_create(ctx, &sc, &swa));
    kvc_swa_kv_pool_config kc = KVC_SWA_KV_POOL_CONFIG_INIT;
    kc.size_full = o.pool_tokens;
    kc.size_swa = swa_tokens;
    kc.page_size = o.page_size;
    kc.num_full_layers = nfull;
    kc.num_swa_layers = nswa;
    kc.head_num = heads;
    kc.head_dim = head_dim;
    kc.full_layer_ids = layer_ids;
    kc.swa_layer_ids = layer_ids + nfull;
    CHECK(kvc_swa_kv_pool_create(ctx, &kc, &swa_kv));
    CHECK(kvc_swa_kv_pool_register_allocator(swa_kv, swa));
  }
  kvc_radix_cache *radix = NULL;
  kvc_swa_radix_cache *swar = NULL;
  kvc_prefix_cache inner = kvc_chunk_cache();
  if (o.hybrid) { /* 3 Mamba layers per KV layer; slots for every row's running + 2 track
                     states, and 512 more for the cache */
    kvc_mamba_pool_config mc = KVC_MAMBA_POOL_CONFIG_INIT;
    kvc_mamba_shape conv = {2, 0, {4, cuda ? 1024 : 64, 0}};
    mc.size = 3 * rc.size + 512;
    mc.num_layers = 3 * o.layers;
    mc.num_conv = 1;
    mc.conv_shapes = &conv;
    mc.temporal_shape[0] = cuda ? 8 : 2;
    mc.temporal_shape[1] = cuda ? 64 : 16;
    mc.temporal_shape[2] = cuda ? 32 : 16;
    CHECK(kvc_mamba_pool_create(ctx, &mc, &mamba));
    kvc_hybrid_req_pool_config hc = KVC_HYBRID_REQ_POOL_CONFIG_INIT;
    hc.flags = KVC_HYBRID_TRACK;
    hc.req_pool = rows;
    hc.mamba_pool = mamba;
    CHECK(kvc_hybrid_req_pool_create(ctx, &hc, &hybrid));
    kvc_mamba_radix_cache_config mx = KVC_MAMBA_RADIX_CACHE_CONFIG_INIT;
    mx.radix.page_size = o.page_size;
    mx.radix.num_slots = o.pool_tokens;
    mx.radix.req_of = req_of;
    mx.hybrid_req_pool = hybrid;
    CHECK(kvc_mamba_radix_cache_create(ctx, &mx, &mradix));
    inner = kvc_mamba_radix_cache_as_prefix_cache(mradix);
    printf("hybrid model: %d Mamba layers, %d state slots\n", 3 * o.layers, mc.size);
  } else if (o.swa) {
    kvc_swa_radix_cache_config xc = KVC_SWA_RADIX_CACHE_CONFIG_INIT;
    xc.sliding_window = window;
    xc.radix.page_size = o.page_size;
    xc.radix.num_slots = o.pool_tokens;
    xc.radix.req_of = req_of;
    CHECK(kvc_swa_radix_cache_create(ctx, &xc, &swar));
    inner = kvc_swa_radix_cache_as_prefix_cache(swar);
  } else if (o.radix) {
    kvc_radix_cache_config xc = KVC_RADIX_CACHE_CONFIG_INIT;
    xc.page_size = o.page_size;
    xc.num_slots = o.pool_tokens;
    xc.req_of = req_of;
    CHECK(kvc_radix_cache_create(ctx, &xc, &radix));
    inner = kvc_radix_cache_as_prefix_cache(radix);
  }
  kvc_session_cache *sessions;
  CHECK(kvc_session_cache_create(ctx, &inner, &sessions));
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = o.page_size;
  fc.req_pool = rows;
  fc.allocator = alloc;
  fc.swa_allocator = swa;
  fc.sliding_window = o.swa ? window : 0;
  fc.cache = kvc_session_cache_as_prefix_cache(sessions);
  fc.hybrid_req_pool = hybrid;
  kvc_flow *flow;
  CHECK(kvc_flow_create(ctx, &fc, &flow));

  /* K/V source rows (random bf16) and the step's out_cache_loc, on the device. */
  const size_t row_bytes = (size_t)heads * head_dim * 2;
  const int64_t max_step_tokens = o.chunk + o.max_running;
  void *k_src, *v_src;
  int64_t *out_loc;
  CHECK(kvc_memory_alloc(ctx, row_bytes * (size_t)max_step_tokens, &k_src));
  CHECK(kvc_memory_alloc(ctx, row_bytes * (size_t)max_step_tokens, &v_src));
  CHECK(kvc_memory_alloc(ctx, sizeof(int64_t) * (size_t)max_step_tokens, (void **)&out_loc));
  {
    rng r = {o.seed ^ 0x5eed};
    uint16_t *h = malloc(row_bytes * (size_t)max_step_tokens);
    for (size_t i = 0; i < row_bytes / 2 * (size_t)max_step_tokens; i++)
      h[i] = (uint16_t)(0x3c00 | (next_u64(&r) & 0x3ff)); /* bf16-ish values in [1, 2) */
    CHECK(kvc_memcpy_h2d(ctx, k_src, h, row_bytes * (size_t)max_step_tokens, NULL));
    CHECK(kvc_memcpy_h2d(ctx, v_src, h, row_bytes * (size_t)max_step_tokens, NULL));
    CHECK(kvc_stream_synchronize(ctx, NULL));
    free(h);
  }

  /* --- Trace: arrivals over time, heavy-tailed lengths, some multi-turn sessions --- */
  rng r = {o.seed};
  for (int k = 0; o.radix && k < SYSTEM_PROMPTS; k++) {
    sys_len[k] = 256 + (int64_t)(next_u64(&r) % 1793); /* 256 .. 2048 tokens */
    sys_tokens[k] = malloc((size_t)sys_len[k] * sizeof(int32_t));
    for (int64_t i = 0; i < sys_len[k]; i++) sys_tokens[k][i] = (int32_t)(next_u64(&r) % 128000);
  }
  int64_t radix_prompt_tokens = 0, radix_hit_tokens = 0;
  request *reqs = calloc((size_t)o.requests, sizeof *reqs);
  double t = 0;
  for (int i = 0; i < o.requests; i++) {
    request *q = &reqs[i];
    t += -log(uniform(&r)) * 0.5; /* ~2 arrivals per step */
    q->arrival = (int64_t)t;
    q->prompt = lognormal(&r, 400, 1.0, 8, 6000);
    if (o.radix) { /* a shared system prompt, then the request's own part */
      q->sys = (int)(next_u64(&r) % SYSTEM_PROMPTS);
      q->prompt += sys_len[q->sys];
    }
    q->output = lognormal(&r, 120, 1.1, 1, 2000);
    if (uniform(&r) < o.sessions) {
      q->kv.session_id = (uint64_t)i + 1;
      q->turns_left = 1 + (int)(next_u64(&r) % 3);
    }
    q->state = R_PENDING;
  }

  request **live = calloc((size_t)o.requests, sizeof *live); /* waiting + running */
  kvc_req_state **batch = calloc((size_t)max_step_tokens + (size_t)o.requests, sizeof *batch);
  request **batch_req = calloc((size_t)max_step_tokens + (size_t)o.requests, sizeof *batch_req);
  kvc_req_state **live_kv = calloc((size_t)o.requests, sizeof *live_kv);
  size_t nlive = 0, next_arrival = 0, steps_cap = 1 << 16, nsteps = 0;
  double *step_us = malloc(steps_cap * sizeof(double)), *alloc_us = malloc(steps_cap * sizeof(double));
  int64_t served = 0, turns = 0, prefill_tokens = 0, decode_tokens = 0, retractions = 0, peak_used = 0;
  const int64_t capacity = swa ? kvc_swa_allocator_size_full(swa) : kvc_allocator_size(alloc);
  double t_start = now_us();

  for (int64_t step = 0;; step++) {
    /* Arrivals */
    while (next_arrival < (size_t)o.requests && reqs[next_arrival].arrival <= step) {
      reqs[next_arrival].state = R_WAITING;
      live[nlive++] = &reqs[next_arrival++];
    }
    if (next_arrival == (size_t)o.requests && nlive == 0) break;
    double t0 = now_us(), t_alloc = 0;

    /* Prefill: admit waiting requests in arrival order under the token budget. */
    size_t nb = 0;
    int64_t budget = o.chunk, running = 0;
    for (size_t i = 0; i < nlive; i++) running += live[i]->state == R_RUNNING && live[i]->filled == live[i]->prompt;
    for (size_t i = 0; i < nlive && budget > 0; i++) {
      request *q = live[i];
      if (q->state == R_RUNNING && q->filled < q->prompt) { /* continue a chunked prefill */
      } else if (q->state == R_WAITING) {
        if (q->arrival > step || running + (int64_t)nb >= o.max_running) continue;
        int64_t start = 0;
        int matched = 0;
        if (q->kv.session_id && q->kv.req_row) {
          start = q->kv.prefix_len; /* matched on an earlier step, then had to wait */
          matched = 1;
        } else if (q->kv.session_id) {
          CHECK(kvc_session_cache_match(sessions, &q->kv, q->prompt, &matched));
          if (matched) start = q->kv.prefix_len;
        }
        if ((radix || swar || mradix) && !matched) { /* the radix match + admission lock (SGLang match_prefix) */
          if (!q->rr.tokens) q->rr.tokens = request_tokens(q, width, &r);
          q->rr.num_tokens = q->rr.prompt_len = q->prompt;
          if (mradix) CHECK(kvc_mamba_radix_cache_match_req(mradix, flow, &q->kv, &q->rr, NULL));
          else if (swar) CHECK(kvc_swa_radix_cache_match_req(swar, &q->kv, &q->rr));
          else CHECK(kvc_radix_cache_match_req(radix, &q->kv, &q->rr));
          start = q->kv.prefix_len;
        }
        /* Keep room for one decode page per running request. */
        int64_t need = (q->prompt - start) + (running + 1) * o.page_size;
        if (kv_available(alloc, swa) < (need < o.chunk ? need : o.chunk) ||
            (!q->kv.req_row && kvc_req_to_token_pool_available(rows) == 0)) {
          if (q->kv.cache_node && !q->kv.req_row) { /* wait unmatched: match again when admitted */
            if (mradix) unlock_admission_mamba(q);
            else unlock_admission(radix, swar, q);
            q->kv.prefix_slots = NULL;
            q->kv.prefix_len = q->kv.cache_protected_len = 0;
          }
          break;
        }
        q->radix_pending = (radix || swar || mradix) && !matched;
        q->branch = mradix && !matched ? q->rr.mamba_branching_len : 0;
        q->radix_hit = start;
        q->filled = start;
        q->kv.prefix_len = start;
        q->state = R_RUNNING;
      } else {
        continue;
      }
      int64_t take = q->prompt - q->filled < budget ? q->prompt - q->filled : budget;
      if (q->branch > q->filled && q->filled + take > q->branch) take = q->branch - q->filled;
      q->kv.prefix_len = q->filled;
      q->kv.seq_len = q->filled + take;
      q->kv.flags = q->kv.seq_len < q->prompt ? KVC_REQ_CHUNKED : 0;
      budget -= take;
      batch[nb] = &q->kv;
      batch_req[nb++] = q;
    }
    if (nb) {
      double a0 = now_us();
      kvc_status st = kvc_flow_alloc_for_extend(flow, batch, nb, out_loc, NULL);
      t_alloc += now_us() - a0;
      if (st == KVC_ERR_OUT_OF_SLOTS) { /* admission was optimistic: put them back */
        for (size_t i = 0; i < nb; i++) {
          request *q = batch_req[i];
          if (q->kv.req_row && q->filled > 0) continue;
          q->state = R_WAITING;
          q->radix_pending = false;
          if (q->kv.cache_node && !q->kv.req_row) { /* its radix match is redone at admission */
            if (mradix) unlock_admission_mamba(q);
            else unlock_admission(radix, swar, q);
            q->kv.prefix_slots = NULL;
            q->kv.cache_protected_len = 0;
            q->filled = q->kv.prefix_len = 0;
          }
        }
        nb = 0;
      } else {
        CHECK(st);
        int64_t ntok = 0;
        for (size_t i = 0; i < nb; i++) ntok += batch[i]->seq_len - batch[i]->prefix_len;
        for (int l = 0; l < o.layers; l++) CHECK(set_kv(kv, swa_kv, l, out_loc, (size_t)ntok, k_src, v_src));
        prefill_tokens += ntok;
        for (size_t i = 0; i < nb; i++) {
          request *q = batch_req[i];
          if (q->radix_pending) radix_prompt_tokens += q->prompt, radix_hit_tokens += q->radix_hit;
          q->radix_pending = false;
          q->filled = q->kv.seq_len;
          if (q->filled < q->prompt) {
            q->rr.num_tokens = q->kv.kv_committed_len;
            checkpoint(q, o.page_size); /* the state at the chunk's end, for the cache */
            double a1 = now_us();
            CHECK(kvc_flow_cache_unfinished(flow, &q->kv));
            t_alloc += now_us() - a1;
          } else {
            q->generated = 1; /* the prefill produces the first token */
            checkpoint(q, o.page_size);
          }
        }
      }
    }

    /* Decode: every running request whose prompt is done and that did not prefill now. */
    size_t nd = 0;
    for (size_t i = 0; i < nlive; i++) {
      request *q = live[i];
      if (q->state != R_RUNNING || q->filled < q->prompt || q->generated >= q->output) continue;
      bool prefilled_now = false;
      for (size_t j = 0; j < nb && !prefilled_now; j++) prefilled_now = batch_req[j] == q;
      if (!prefilled_now) batch[nd] = &q->kv, batch_req[nd++] = q;
    }
    while (nd) {
      double a0 = now_us();
      kvc_status st = kvc_flow_alloc_for_decode(flow, batch, nd, 1, out_loc, NULL);
      t_alloc += now_us() - a0;
      if (st == KVC_OK) break;
      if (st != KVC_ERR_OUT_OF_SLOTS) CHECK(st);
      /* Retract the newest decoding request that is not in a streaming session (its KV
       * would belong to the session): free its KV, recompute it later. */
      size_t v = nd;
      while (v > 0 && batch_req[v - 1]->kv.session_id) v--;
      if (v == 0) {
        fprintf(stderr, "out of KV memory with only session requests running; use a larger --pool-tokens\n");
        return 1;
      }
      request *victim = batch_req[v - 1];
      batch[v - 1] = batch[nd - 1];
      batch_req[v - 1] = batch_req[nd - 1];
      nd--;
      kvc_req_state *one[] = {&victim->kv};
      victim->rr.num_tokens = victim->kv.kv_committed_len;
      double a1 = now_us();
      CHECK(kvc_flow_release(flow, one, 1, 0, NULL));
      t_alloc += now_us() - a1;
      victim->prompt += victim->generated;
      victim->output -= victim->generated;
      victim->generated = victim->filled = 0;
      victim->state = R_WAITING;
      retractions++;
    }
    if (nd) {
      for (int l = 0; l < o.layers; l++) CHECK(set_kv(kv, swa_kv, l, out_loc, nd, k_src, v_src));
      for (size_t i = 0; i < nd; i++)
        if (++batch_req[i]->generated % 64 == 0) checkpoint(batch_req[i], o.page_size);
      decode_tokens += (int64_t)nd;
    }

    /* Release finished turns in one call; sessions keep their KV for the next turn. */
    size_t nf = 0;
    for (size_t i = 0; i < nlive; i++) {
      request *q = live[i];
      if (q->state == R_RUNNING && q->filled == q->prompt && q->generated >= q->output) {
        q->rr.num_tokens = q->kv.kv_committed_len; /* prompt + outputs: the key to cache */
        batch[nf++] = &q->kv;
      }
    }
    if (nf) {
      double a0 = now_us();
      CHECK(kvc_flow_release(flow, batch, nf, 1, NULL));
      t_alloc += now_us() - a0;
    }
    size_t w = 0;
    for (size_t i = 0; i < nlive; i++) {
      request *q = live[i];
      if (q->state == R_RUNNING && q->filled == q->prompt && q->generated >= q->output) {
        turns++;
        int64_t next_prompt = q->prompt + q->output + lognormal(&r, 60, 0.8, 1, 1000);
        if (q->turns_left > 0 && next_prompt + 2000 < width) { /* history + a new prompt */
          q->turns_left--;
          q->prompt = next_prompt;
          q->output = lognormal(&r, 120, 1.1, 1, 2000);
          q->generated = q->filled = 0;
          q->arrival = step + 1 + (int64_t)(next_u64(&r) % 20);
          q->state = R_WAITING;
        } else {
          if (q->kv.session_id) {
            double a0 = now_us();
            CHECK(kvc_session_cache_release(sessions, flow, q->kv.session_id));
            t_alloc += now_us() - a0;
          }
          q->state = R_DONE;
          free((void *)q->rr.tokens);
          q->rr.tokens = NULL;
          served++;
          continue;
        }
      }
      live[w++] = q;
    }
    nlive = w;
    double t1 = now_us();
    if (nsteps == steps_cap) {
      steps_cap *= 2;
      step_us = realloc(step_us, steps_cap * sizeof(double));
      alloc_us = realloc(alloc_us, steps_cap * sizeof(double));
    }
    step_us[nsteps] = t1 - t0;
    alloc_us[nsteps++] = t_alloc;
    int64_t used = capacity - (swa ? kvc_swa_allocator_full_available_size(swa) : kvc_allocator_available_size(alloc));
    if (used > peak_used) peak_used = used;
    if (o.check) {
      size_t nk = 0;
      for (size_t i = 0; i < nlive; i++)
        if (live[i]->kv.req_row) live_kv[nk++] = &live[i]->kv; /* running, or a session turn matched while waiting */
      CHECK(kvc_flow_check(flow, live_kv, nk));
    }
    if (!o.quiet && step % 500 == 0)
      printf("step %6lld  running %4zu  served %5lld/%d  KV used %6.1f%%  alloc %6.1f us  step %7.1f us\n",
             (long long)step, nlive, (long long)served, o.requests, 100.0 * (double)used / (double)capacity, t_alloc,
             t1 - t0);
  }
  CHECK(kvc_stream_synchronize(ctx, NULL));
  double wall = (now_us() - t_start) * 1e-6;

  /* --- Summary and conservation --- */
  qsort(step_us, nsteps, sizeof(double), cmp_double);
  qsort(alloc_us, nsteps, sizeof(double), cmp_double);
  int64_t held = 0, held_reqs = 0;
  CHECK(kvc_session_cache_held(sessions, o.page_size, &held, NULL, &held_reqs));
  if (radix) { /* the tree's KV goes back too */
    int64_t cached = 0;
    CHECK(kvc_flow_check(flow, NULL, 0));
    CHECK(kvc_radix_cache_sizes(radix, NULL, NULL, &cached));
    printf("radix cache: hit rate %.3f (%lld of %lld prompt tokens of new requests reused), prefill tokens saved "
           "%lld; %lld tokens cached at the end\n",
           radix_prompt_tokens ? (double)radix_hit_tokens / (double)radix_prompt_tokens : 0.0,
           (long long)radix_hit_tokens, (long long)radix_prompt_tokens, (long long)radix_hit_tokens, (long long)cached);
    if (cached) CHECK(kvc_radix_cache_evict(radix, flow, cached, NULL));
  }
  if (mradix) { /* both components go back too */
    kvc_mamba_radix_sizes z;
    CHECK(kvc_flow_check(flow, NULL, 0));
    CHECK(kvc_mamba_radix_cache_sizes(mradix, &z));
    printf("mamba radix cache (%d Mamba layers, %d state slots): hit rate %.3f (%lld of %lld prompt tokens of new "
           "requests reused), prefill tokens saved %lld; cached at the end %lld tokens, %lld Mamba states\n",
           kvc_mamba_pool_num_layers(mamba), kvc_mamba_pool_size(mamba),
           radix_prompt_tokens ? (double)radix_hit_tokens / (double)radix_prompt_tokens : 0.0,
           (long long)radix_hit_tokens, (long long)radix_prompt_tokens, (long long)radix_hit_tokens,
           (long long)z.cached, (long long)z.mamba_cached);
    if (z.cached || z.mamba_cached)
      CHECK(kvc_mamba_radix_cache_evict(mradix, flow, z.cached, z.mamba_cached, NULL, NULL));
  }
  if (swar) { /* both components' KV goes back too */
    kvc_swa_radix_sizes z;
    CHECK(kvc_flow_check(flow, NULL, 0));
    CHECK(kvc_swa_radix_cache_sizes(swar, &z));
    printf("swa radix cache (window %d, layers alternate full/SWA, SWA pool %lld tokens): hit rate %.3f (%lld of %lld "
           "prompt tokens of new requests reused), prefill tokens saved %lld; cached at the end %lld full, %lld with "
           "live SWA\n",
           window, (long long)swa_tokens,
           radix_prompt_tokens ? (double)radix_hit_tokens / (double)radix_prompt_tokens : 0.0,
           (long long)radix_hit_tokens, (long long)radix_prompt_tokens, (long long)radix_hit_tokens,
           (long long)z.cached, (long long)z.swa_cached);
    if (z.cached || z.swa_cached) CHECK(kvc_swa_radix_cache_evict(swar, flow, z.cached, z.swa_cached, NULL, NULL));
  }
  int64_t avail = swa ? kvc_swa_allocator_full_available_size(swa) : kvc_allocator_available_size(alloc);
  int all_free = avail == capacity && kvc_req_to_token_pool_available(rows) == rc.size && held == 0 &&
                 (!swa || kvc_swa_allocator_swa_available_size(swa) == kvc_swa_allocator_size_swa(swa)) &&
                 (!mamba || kvc_mamba_pool_available(mamba) == kvc_mamba_pool_size(mamba));
  CHECK(kvc_flow_check(flow, NULL, 0));
  printf("served %lld requests (%lld turns), %lld prefill + %lld decode tokens, %lld retractions\n", (long long)served,
         (long long)turns, (long long)prefill_tokens, (long long)decode_tokens, (long long)retractions);
  printf("steps %zu in %.2f s: %.0f steps/s; peak KV use %lld / %lld tokens (%.1f%%)\n", nsteps, wall,
         (double)nsteps / wall, (long long)peak_used, (long long)capacity,
         100.0 * (double)peak_used / (double)capacity);
  printf("host us per step, allocation calls (flows): median %.2f  p99 %.2f\n", alloc_us[nsteps / 2],
         alloc_us[nsteps * 99 / 100]);
  printf("host us per step, whole step incl. %d-layer set_kv launches: median %.2f  p99 %.2f\n", o.layers,
         step_us[nsteps / 2], step_us[nsteps * 99 / 100]);
  printf("conservation: %s (available %lld of %lld tokens, %d of %d rows free, sessions hold %lld)\n",
         all_free ? "OK, everything freed" : "FAILED", (long long)avail, (long long)capacity,
         kvc_req_to_token_pool_available(rows), rc.size, (long long)held);

  kvc_memory_free(ctx, k_src);
  kvc_memory_free(ctx, v_src);
  kvc_memory_free(ctx, out_loc);
  kvc_flow_destroy(flow);
  kvc_session_cache_destroy(sessions);
  kvc_radix_cache_destroy(radix);
  kvc_swa_radix_cache_destroy(swar);
  kvc_mamba_radix_cache_destroy(mradix);
  kvc_hybrid_req_pool_destroy(hybrid);
  kvc_mamba_pool_destroy(mamba);
  for (int k = 0; k < SYSTEM_PROMPTS; k++) free(sys_tokens[k]);
  kvc_kv_pool_destroy(kv);
  kvc_allocator_destroy(alloc);
  kvc_swa_kv_pool_destroy(swa_kv);
  kvc_swa_allocator_destroy(swa);
  free(layer_ids);
  kvc_req_to_token_pool_destroy(rows);
  kvc_context_destroy(ctx);
  free(reqs);
  free(live);
  free(batch);
  free(batch_req);
  free(live_kv);
  free(step_us);
  free(alloc_us);
  return all_free && served == o.requests ? 0 : 1;
}
