/* test_swa_model.c — randomized model-based test of the SWA allocator (and, through the
 * hybrid req pool, the Mamba slots): long random sequences of extend / chunked extend /
 * decode / window eviction / release (plain or inside a free group) / clear against a
 * tiny reference model. After every step: conservation per side (full tokens held =
 * pages of live requests; SWA = pages not evicted; Mamba = live requests), every new
 * slot was free in the model, every SWA peer is unique and in-page offsets mirror.
 * Failures of capacity must change nothing. Periodically: the library's O(size) audit
 * and the device mapping against the host mapping.
 * Steps: env KVT_STEPS (default 10^6 on host, 10^5 on CUDA). Seed: KVT_SEED. */
#include "harness.h"

#define MAXREQ 48
#define WIDTH 512

typedef struct mreq {
  int32_t row;
  int32_t mamba;
  int64_t len, evicted;
} mreq;

typedef struct model {
  kvc_swa_allocator *a;
  kvc_req_to_token_pool *rp;
  kvc_hybrid_req_pool *hp; /* NULL when no Mamba pool is available */
  kvc_mamba_pool *mp;
  int32_t ps;
  int64_t size_full, size_swa;
  mreq req[MAXREQ];
  int nreq;
  uint8_t *full_owned, *swa_owned; /* per slot */
  uint64_t seed;
  long step;
  long n_alloc, n_oos, n_evict, n_release;
} model;

#define MFAIL(m, ...)                                                                                      \
  do {                                                                                                     \
    char msg_[512];                                                                                        \
    snprintf(msg_, sizeof msg_, __VA_ARGS__);                                                              \
    fail_msg("seed %llu step %ld ps %d: %s (%s)", (unsigned long long)(m)->seed, (m)->step, (m)->ps, msg_, \
             kvc_last_error(kvt_ctx));                                                                     \
  } while (0)

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static const int32_t *row_of(model *m, const mreq *r) { return kvc_req_to_token_pool_row(m->rp, r->row); }

static void check_conservation(model *m) {
  int64_t full_pages = 0, swa_pages = 0;
  for (int i = 0; i < m->nreq; i++) {
    full_pages += cdiv(m->req[i].len, m->ps);
    swa_pages += cdiv(m->req[i].len, m->ps) - m->req[i].evicted / m->ps;
  }
  const int64_t fa = kvc_swa_allocator_full_available_size(m->a), sa = kvc_swa_allocator_swa_available_size(m->a);
  const int64_t fs = kvc_allocator_size(kvc_swa_allocator_full(m->a));
  const int64_t ss = kvc_allocator_size(kvc_swa_allocator_swa(m->a));
  kvt_digest_i64(fa);
  kvt_digest_i64(sa);
  if (fa != fs - full_pages * m->ps)
    MFAIL(m, "full available %lld, model %lld", (long long)fa, (long long)(fs - full_pages * m->ps));
  if (sa != ss - swa_pages * m->ps)
    MFAIL(m, "swa available %lld, model %lld", (long long)sa, (long long)(ss - swa_pages * m->ps));
  if (m->hp && kvc_mamba_pool_available(m->mp) != kvc_mamba_pool_size(m->mp) - m->nreq)
    MFAIL(m, "mamba available %d, model %d", kvc_mamba_pool_available(m->mp), kvc_mamba_pool_size(m->mp) - m->nreq);
  if (kvc_req_to_token_pool_available(m->rp) != kvc_req_to_token_pool_size(m->rp) - m->nreq)
    MFAIL(m, "req rows available %d", kvc_req_to_token_pool_available(m->rp));
}

/* New slots [from, to) of request r: free in the model before, peers unique + mirrored. */
static void claim(model *m, mreq *r, int64_t from, int64_t to) {
  const int32_t *row = row_of(m, r);
  const int32_t *map = kvc_swa_allocator_mapping_host(m->a);
  for (int64_t t = from; t < to; t++) {
    const int64_t f = row[t];
    if (f <= 0 || f >= m->size_full + m->ps) MFAIL(m, "slot %lld out of range", (long long)f);
    if (m->full_owned[f]) MFAIL(m, "full slot %lld handed out twice", (long long)f);
    m->full_owned[f] = 1;
    const int32_t w = map[f];
    kvt_digest_i64(f);
    kvt_digest(&w, sizeof w);
    if (w <= 0) MFAIL(m, "new full slot %lld has no SWA peer", (long long)f);
    if (m->swa_owned[w]) MFAIL(m, "SWA slot %d handed out twice", w);
    if (w % m->ps != f % m->ps) MFAIL(m, "offset mismatch %lld -> %d", (long long)f, w);
    m->swa_owned[w] = 1;
  }
}

static void unclaim_swa(model *m, const int32_t *row, int64_t from, int64_t to, const int32_t *map_before) {
  for (int64_t t = from; t < to; t++) m->swa_owned[map_before[row[t]]] = 0;
}

static int32_t *save_map(model *m) {
  const int64_t n = kvc_swa_allocator_mapping_length(m->a);
  int32_t *c = malloc((size_t)n * 4);
  memcpy(c, kvc_swa_allocator_mapping_host(m->a), (size_t)n * 4);
  return c;
}

static void expect_unchanged(model *m, const int32_t *map_before, int64_t fa, int64_t sa) {
  const int64_t n = kvc_swa_allocator_mapping_length(m->a);
  if (memcmp(map_before, kvc_swa_allocator_mapping_host(m->a), (size_t)n * 4)) MFAIL(m, "mapping changed on failure");
  if (fa != kvc_swa_allocator_full_available_size(m->a) || sa != kvc_swa_allocator_swa_available_size(m->a))
    MFAIL(m, "availability changed on failure");
}

static void op_new(model *m, kvt_rng *g) {
  if (m->nreq == MAXREQ) return;
  mreq *r = &m->req[m->nreq];
  r->row = 0, r->mamba = 0, r->len = 0, r->evicted = 0;
  kvc_status st;
  if (m->hp) st = kvc_hybrid_req_pool_alloc(m->hp, 1, &r->row, &r->mamba, NULL, NULL);
  else st = kvc_req_to_token_pool_alloc(m->rp, 1, &r->row);
  if (st == KVC_ERR_OUT_OF_SLOTS) return;
  if (st != KVC_OK) MFAIL(m, "row alloc: %s", kvc_status_name(st));
  kvt_digest(&r->row, sizeof r->row);
  kvt_digest(&r->mamba, sizeof r->mamba);
  const int64_t p = 0, s = kvt_range(g, 1, 160);
  int32_t *before = save_map(m);
  const int64_t fa = kvc_swa_allocator_full_available_size(m->a), sa = kvc_swa_allocator_swa_available_size(m->a);
  st = kvc_swa_allocator_alloc_extend(m->a, 1, &p, &s, NULL, m->rp, &r->row, NULL, NULL, NULL, NULL);
  m->nreq++;
  if (st == KVC_ERR_OUT_OF_SLOTS) {
    expect_unchanged(m, before, fa, sa);
  } else if (st != KVC_OK) {
    MFAIL(m, "extend: %s", kvc_status_name(st));
  } else {
    claim(m, r, 0, s);
    r->len = s;
    m->n_alloc++;
  }
  free(before);
}

static void op_extend(model *m, kvt_rng *g) {
  if (!m->nreq) return;
  mreq *r = &m->req[kvt_range(g, 0, m->nreq - 1)];
  const int64_t p = r->len, s = (p + 64 < WIDTH ? p + kvt_range(g, 1, 64) : WIDTH);
  if (s == p || (p % m->ps && p - 1 < r->evicted)) return;
  int32_t *before = save_map(m);
  const int64_t fa = kvc_swa_allocator_full_available_size(m->a), sa = kvc_swa_allocator_swa_available_size(m->a);
  kvc_status st = kvc_swa_allocator_alloc_extend(m->a, 1, &p, &s, NULL, m->rp, &r->row, NULL, NULL, NULL, NULL);
  if (st == KVC_ERR_OUT_OF_SLOTS) expect_unchanged(m, before, fa, sa);
  else if (st != KVC_OK) MFAIL(m, "chunk extend: %s", kvc_status_name(st));
  else {
    claim(m, r, p, s);
    r->len = s;
  }
  free(before);
}

static void op_decode(model *m, kvt_rng *g) {
  if (!m->nreq) return;
  int32_t rows[MAXREQ];
  int64_t seq[MAXREQ];
  int idx[MAXREQ];
  size_t bs = 0;
  for (int i = 0; i < m->nreq; i++) {
    mreq *r = &m->req[i];
    if (r->len == 0 || r->len >= WIDTH || kvt_range(g, 0, 3) == 0) continue;
    rows[bs] = r->row, seq[bs] = r->len + 1, idx[bs] = i;
    bs++;
  }
  if (!bs) return;
  int32_t *before = save_map(m);
  const int64_t fa = kvc_swa_allocator_full_available_size(m->a), sa = kvc_swa_allocator_swa_available_size(m->a);
  int64_t out[MAXREQ];
  kvc_status st = kvc_swa_allocator_alloc_decode(m->a, bs, seq, NULL, m->rp, rows, out, NULL, NULL);
  kvt_digest_i64(st);
  if (st == KVC_ERR_OUT_OF_SLOTS) expect_unchanged(m, before, fa, sa), m->n_oos++;
  else if (st != KVC_OK) MFAIL(m, "decode: %s", kvc_status_name(st));
  else
    for (size_t j = 0; j < bs; j++) {
      mreq *r = &m->req[idx[j]];
      if (row_of(m, r)[r->len] != out[j]) MFAIL(m, "decode out %lld != table", (long long)out[j]);
      claim(m, r, r->len, r->len + 1);
      r->len++;
    }
  free(before);
}

/* Window eviction (spec 12.8 with margin): free_swa of whole pages below len - window - ps. */
static void op_evict(model *m, kvt_rng *g) {
  if (!m->nreq) return;
  mreq *r = &m->req[kvt_range(g, 0, m->nreq - 1)];
  const int64_t window = kvt_range(g, 1, 64);
  int64_t nw = (r->len - window - m->ps) / m->ps * m->ps;
  if (nw <= r->evicted) return;
  int64_t slots[WIDTH];
  const int32_t *row = row_of(m, r);
  for (int64_t t = r->evicted; t < nw; t++) slots[t - r->evicted] = row[t];
  int32_t *before = save_map(m);
  KVT_OK(kvc_swa_allocator_free_swa(m->a, slots, (size_t)(nw - r->evicted), NULL));
  unclaim_swa(m, row, r->evicted, nw, before);
  free(before);
  r->evicted = nw;
  m->n_evict++;
}

static void release(model *m, int i) {
  mreq *r = &m->req[i];
  const int32_t *row = row_of(m, r);
  int64_t slots[WIDTH];
  for (int64_t t = 0; t < r->len; t++) slots[t] = row[t];
  int32_t *before = save_map(m);
  if (m->ps == 1 && r->evicted) KVT_OK(kvc_swa_allocator_free_full(m->a, slots, (size_t)r->evicted));
  const int64_t from = m->ps == 1 ? r->evicted : 0;
  if (r->len > from) KVT_OK(kvc_swa_allocator_free(m->a, slots + from, (size_t)(r->len - from), NULL));
  unclaim_swa(m, row, r->evicted, r->len, before);
  for (int64_t t = 0; t < r->len; t++) m->full_owned[row[t]] = 0;
  free(before);
  if (m->hp) KVT_OK(kvc_hybrid_req_pool_free_mamba_cache(m->hp, r->row, -1, NULL));
  KVT_OK(kvc_req_to_token_pool_free(m->rp, r->row));
  m->req[i] = m->req[--m->nreq];
  m->n_release++;
}

static void op_release(model *m, kvt_rng *g) {
  if (!m->nreq) return;
  const int group = (int)kvt_range(g, 0, 1);
  if (group) KVT_OK(kvc_swa_allocator_free_group_begin(m->a));
  int k = (int)kvt_range(g, 1, 3);
  while (k-- && m->nreq) release(m, (int)kvt_range(g, 0, m->nreq - 1));
  if (group) KVT_OK(kvc_swa_allocator_free_group_end(m->a));
}

static void audit(model *m) {
  kvc_status st = kvc_swa_allocator_check(m->a);
  if (st != KVC_OK) MFAIL(m, "audit: %s", kvc_status_name(st));
  const int64_t n = kvc_swa_allocator_mapping_length(m->a);
  int64_t *d = malloc((size_t)n * 8);
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  kvt_d2h(d, kvc_swa_allocator_mapping_device(m->a), (size_t)n * 8);
  kvt_digest(d, (size_t)n * 8);
  const int32_t *h = kvc_swa_allocator_mapping_host(m->a);
  for (int64_t i = 0; i < n; i++)
    if (d[i] != h[i]) MFAIL(m, "device mapping[%lld] = %lld, host %d", (long long)i, (long long)d[i], h[i]);
  free(d);
}

static kvc_mamba_pool *try_mamba(void) {
  kvc_mamba_pool_config c = KVC_MAMBA_POOL_CONFIG_INIT;
  kvc_mamba_shape conv = {2, 0, {4, 8, 0}};
  c.size = MAXREQ;
  c.num_layers = 2;
  c.num_conv = 1;
  c.conv_shapes = &conv;
  c.temporal_shape[0] = 2, c.temporal_shape[1] = 4, c.temporal_shape[2] = 4;
  kvc_mamba_pool *p = NULL;
  if (kvc_mamba_pool_create(kvt_ctx, &c, &p) != KVC_OK) return NULL;
  return p;
}

static void run_model(int32_t ps, uint32_t flags, long steps, uint64_t seed) {
  model m;
  memset(&m, 0, sizeof m);
  m.ps = ps, m.seed = seed;
  m.size_full = 4096, m.size_swa = ps == 1 ? 700 : 1024;
  kvc_swa_allocator_config c = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  c.size_full = m.size_full, c.size_swa = m.size_swa, c.page_size = ps, c.flags = flags;
  KVT_OK(kvc_swa_allocator_create(kvt_ctx, &c, &m.a));
  kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rc.size = MAXREQ - 8, rc.max_context_len = WIDTH;
  KVT_OK(kvc_req_to_token_pool_create(kvt_ctx, &rc, &m.rp));
  m.mp = try_mamba();
  if (m.mp) {
    kvc_hybrid_req_pool_config hc = KVC_HYBRID_REQ_POOL_CONFIG_INIT;
    hc.req_pool = m.rp, hc.mamba_pool = m.mp;
    KVT_OK(kvc_hybrid_req_pool_create(kvt_ctx, &hc, &m.hp));
  }
  m.full_owned = calloc((size_t)(m.size_full + ps + 1), 1);
  m.swa_owned = calloc((size_t)(m.size_swa + ps + 1), 1);
  kvt_rng g = {seed ^ (uint64_t)ps * 0x9e37ull};
  for (m.step = 0; m.step < steps; m.step++) {
    const int64_t r = kvt_range(&g, 0, 99);
    if (r < 15) op_new(&m, &g);
    else if (r < 30) op_extend(&m, &g);
    else if (r < 70) op_decode(&m, &g);
    else if (r < 85) op_evict(&m, &g);
    else if (r < 99) op_release(&m, &g);
    else {
      while (m.nreq) release(&m, m.nreq - 1);
      KVT_OK(kvc_swa_allocator_clear(m.a, NULL));
    }
    check_conservation(&m);
    if (m.step % 20000 == 0) audit(&m);
  }
  audit(&m);
  printf("[ MODEL    ] ps %d flags %u: %ld steps ok (seed %llu; %ld new, %ld decode shortages, %ld evictions, "
         "%ld releases, mamba %s)\n",
         ps, flags, steps, (unsigned long long)seed, m.n_alloc, m.n_oos, m.n_evict, m.n_release, m.hp ? "on" : "off");
  free(m.full_owned), free(m.swa_owned);
  kvc_hybrid_req_pool_destroy(m.hp);
  kvc_mamba_pool_destroy(m.mp);
  kvc_req_to_token_pool_destroy(m.rp);
  kvc_swa_allocator_destroy(m.a);
}

static void test_swa_model(void **state) {
  (void)state;
  long steps = strcmp(kvt_backend_name, "host") == 0 ? 1000000 : 100000;
  const char *e = getenv("KVT_STEPS");
  if (e) steps = atol(e);
  const uint64_t seed = kvt_seed();
  const int32_t pss[4] = {1, 2, 4, 16};
  for (int i = 0; i < 4; i++) run_model(pss[i], i == 2 ? KVC_SWA_NEED_SORT : 0u, steps / 4, seed + (uint64_t)i);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_swa_model),
};
KVT_MAIN("swa_model", tests)
