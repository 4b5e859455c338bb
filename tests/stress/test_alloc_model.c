/*
 * test_alloc_model.c — seeded randomized model-based test of the level-2 allocators.
 *
 * A tiny reference model written straight from the spec prose (plain arrays, O(n)
 * memmoves, a qsort for "sorted unique"; it never calls the library) predicts every
 * output of long random sequences of alloc / alloc_extend / alloc_decode / free /
 * free_segment / groups / backup / restore / clear / merge, over random page sizes,
 * both kinds, need_sort on and off, and random batch shapes. After each op the exact
 * slots, the available size and the conservation counters must match; every 64 ops the
 * library's own audit runs; every N ops the device outputs and table rows are read back.
 *
 * Usage: test_alloc_model [host|cuda]; env KVT_SEED (printed), KVT_STEPS
 * (default 10^6 on host, 10^5 on cuda).
 */
#include "harness.h"

#define MAXP 512  /* model pages at most */
#define MAXREQ 24 /* req pool rows */
#define MAXB 8    /* batch size */

static uint64_t g_seed;
static long g_step;
static long g_oos, g_tokens;

#define CHECKF(cond, ...)                                                                                           \
  do {                                                                                                              \
    if (!(cond)) {                                                                                                  \
      char m_[512];                                                                                                 \
      snprintf(m_, sizeof m_, __VA_ARGS__);                                                                         \
      fail_msg("KVT_SEED=%llu step %ld: %s (%s)", (unsigned long long)g_seed, g_step, m_, kvc_last_error(kvt_ctx)); \
    }                                                                                                               \
  } while (0)
#define EXPECT_ST(expr, want)                                                                     \
  do {                                                                                            \
    kvc_status s_ = (expr);                                                                       \
    CHECKF(s_ == (want), "%s -> %s, want %s", #expr, kvc_status_name(s_), kvc_status_name(want)); \
  } while (0)

/* --- Reference model (spec sections 4-6, 14) ---------------------------------------- */

typedef struct model {
  int paged, need_sort;
  int64_t ps, np;
  int64_t fl[MAXP + 8], nfl;   /* free list, front first */
  int64_t def[MAXP + 8], ndef; /* need_sort side list */
  int in_group;
  int64_t gfree[MAXP * 128 + 8], ngfree; /* slots given to free() inside the group */
  int64_t gseg[MAXP + 8], ngseg;         /* pages given by free_segment() inside the group */
  int has_backup, backup_ok;
  int64_t bfl[MAXP + 8], nbfl, bdef[MAXP + 8], nbdef;
} model;

static int cmp64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return (a > b) - (a < b);
}

static void m_clear(model *m) {
  m->nfl = m->np;
  for (int64_t i = 0; i < m->np; i++) m->fl[i] = i + 1;
  m->ndef = 0;
  m->in_group = 0;
  m->ngfree = m->ngseg = 0;
  m->backup_ok = 0;
}

static void m_merge(model *m) {
  if (!m->ndef) return;
  memcpy(m->fl + m->nfl, m->def, (size_t)m->ndef * 8);
  m->nfl += m->ndef;
  m->ndef = 0;
  qsort(m->fl, (size_t)m->nfl, 8, cmp64);
}

static void m_pop(model *m, int64_t n, int64_t *pages) {
  memcpy(pages, m->fl, (size_t)n * 8);
  memmove(m->fl, m->fl + n, (size_t)(m->nfl - n) * 8);
  m->nfl -= n;
}

/* Release page ids (PAGED: prepend; TOKEN: append; need_sort: side list). */
static void m_release(model *m, const int64_t *pages, int64_t n) {
  if (m->need_sort) {
    memcpy(m->def + m->ndef, pages, (size_t)n * 8);
    m->ndef += n;
  } else if (m->paged) {
    memmove(m->fl + n, m->fl, (size_t)m->nfl * 8);
    memcpy(m->fl, pages, (size_t)n * 8);
    m->nfl += n;
  } else {
    memcpy(m->fl + m->nfl, pages, (size_t)n * 8);
    m->nfl += n;
  }
}

static void m_free_now(model *m, const int64_t *slots, int64_t n) {
  if (!n) return;
  if (!m->paged) {
    m_release(m, slots, n);
    return;
  }
  int64_t *pg = malloc((size_t)n * 8), k = 0;
  for (int64_t i = 0; i < n; i++) pg[i] = slots[i] / m->ps;
  qsort(pg, (size_t)n, 8, cmp64);
  for (int64_t i = 0; i < n; i++)
    if (i == 0 || pg[i] != pg[i - 1]) pg[k++] = pg[i];
  m_release(m, pg, k);
  free(pg);
}

static void m_free(model *m, const int64_t *slots, int64_t n) {
  m->backup_ok = 0;
  if (m->in_group) {
    memcpy(m->gfree + m->ngfree, slots, (size_t)n * 8);
    m->ngfree += n;
  } else {
    m_free_now(m, slots, n);
  }
}

static void m_free_segment(model *m, const int64_t *slots, int64_t n) {
  if (!m->paged) {
    m_free(m, slots, n);
    return;
  }
  m->backup_ok = 0;
  int64_t reps[MAXP], k = 0;
  for (int64_t i = 0; i < n; i += m->ps) reps[k++] = slots[i] / m->ps;
  if (m->in_group) {
    memcpy(m->gseg + m->ngseg, reps, (size_t)k * 8);
    m->ngseg += k;
  } else {
    m_release(m, reps, k);
  }
}

static void m_group_end(model *m) {
  m->backup_ok = 0;
  m->in_group = 0;
  m_free_now(m, m->gfree, m->ngfree);
  if (m->ngseg) m_release(m, m->gseg, m->ngseg);
  m->ngfree = m->ngseg = 0;
}

static int m_alloc(model *m, int64_t n, int64_t *out) {
  int64_t np = n / m->ps, pages[MAXP];
  if (np > m->nfl) m_merge(m);
  if (np > m->nfl) return 0;
  m_pop(m, np, pages);
  for (int64_t i = 0; i < np; i++)
    for (int64_t k = 0; k < m->ps; k++) out[i * m->ps + k] = pages[i] * m->ps + k;
  return 1;
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Spec 6.6 / 6.8 (PAGED) and alloc(sum) split in order (TOKEN). */
static int m_extend(model *m, int bs, const int64_t *pre, const int64_t *seq, const int64_t *last, int64_t *out) {
  int64_t total = 0, need = 0;
  for (int i = 0; i < bs; i++) {
    total += seq[i] - pre[i];
    need += m->paged ? cdiv(seq[i], m->ps) - cdiv(pre[i], m->ps) : seq[i] - pre[i];
  }
  if (m->paged ? (total / m->ps + bs + 1 > m->nfl) : (total > m->nfl)) m_merge(m);
  if (need > m->nfl) return 0;
  const int64_t *F = m->fl;
  int64_t o = 0, S = 0;
  for (int i = 0; i < bs; i++) {
    int64_t p = pre[i], s = seq[i], ps = m->ps;
    if (!m->paged) {
      for (int64_t k = 0; k < s - p; k++) out[o + k] = F[S + k];
      o += s - p;
      S += s - p;
      continue;
    }
    int64_t n = cdiv(s, ps) - cdiv(p, ps);
    int64_t ceilp = cdiv(p, ps) * ps, floors = s / ps * ps;
    int64_t a = (s < ceilp ? s : ceilp) - p;
    for (int64_t k = 0; k < a; k++) out[o + k] = last[i] + 1 + k;
    if (p + a < s) {
      int64_t b = floors - ceilp;
      for (int64_t k = 0; k < b; k++) out[o + a + k] = F[S + k / ps] * ps + k % ps;
      int64_t c = s - floors;
      if (p + a + b < s)
        for (int64_t k = 0; k < c; k++) out[o + a + b + k] = F[S + n - 1] * ps + k;
    }
    o += s - p;
    S += n;
  }
  int64_t pages[MAXP + 8];
  m_pop(m, need, pages);
  return 1;
}

/* Spec 6.7 / 6.9, with the page counted correctly for ps = 1. */
static int m_decode(model *m, int bs, const int64_t *seq, const int64_t *last, int64_t *out) {
  int64_t need = 0;
  for (int i = 0; i < bs; i++) need += !m->paged || (seq[i] - 1) % m->ps == 0;
  if (bs > m->nfl) m_merge(m);
  if (need > m->nfl) return 0;
  int64_t S = 0;
  for (int i = 0; i < bs; i++) {
    if (!m->paged || (seq[i] - 1) % m->ps == 0) out[i] = m->fl[S++] * m->ps;
    else out[i] = last[i] + 1;
  }
  int64_t pages[MAXP];
  m_pop(m, need, pages);
  return 1;
}

/* --- Test-side requests ------------------------------------------------------------ */

typedef struct req {
  int live;
  int32_t row; /* 0: an orphan alloc(n) block */
  int64_t len;
  int64_t *slots;
} req;

typedef struct world {
  model m;
  kvc_allocator *a;
  kvc_req_to_token_pool *pool;
  int32_t width;
  req r[MAXREQ + 16];
  int nr;
  int32_t rows_fifo[MAXREQ + 8]; /* model of the req pool's free rows */
  int nrows;
  kvc_allocator_state backup;
  int64_t *dev_out;
  int64_t *scratch;
} world;

static void w_destroy(world *w) {
  kvc_allocator_destroy(w->a);
  kvc_req_to_token_pool_destroy(w->pool);
  for (int i = 0; i < MAXREQ + 16; i++) free(w->r[i].slots);
  if (w->dev_out) kvt_dev_free(w->dev_out);
  free(w->scratch);
  memset(w, 0, sizeof *w);
}

static void w_init(world *w, kvt_rng *g) {
  static const int32_t pss[6] = {1, 2, 4, 16, 64, 128};
  memset(w, 0, sizeof *w);
  model *m = &w->m;
  m->paged = kvt_range(g, 0, 3) != 0;
  m->ps = m->paged ? pss[kvt_range(g, 0, 5)] : 1;
  m->need_sort = (int)kvt_range(g, 0, 1);
  m->np = kvt_range(g, 4, m->ps >= 64 ? 48 : (m->ps == 1 ? 400 : 160));
  int64_t size = m->np * m->ps + kvt_range(g, 0, m->ps - 1); /* floor to pages */
  kvc_allocator_config c = KVC_ALLOCATOR_CONFIG_INIT;
  c.kind = m->paged ? KVC_ALLOCATOR_PAGED : KVC_ALLOCATOR_TOKEN;
  c.size = size;
  c.page_size = (int32_t)m->ps;
  c.flags = m->need_sort ? KVC_ALLOCATOR_NEED_SORT : 0;
  CHECKF(kvc_allocator_create(kvt_ctx, &c, &w->a) == KVC_OK, "create");
  w->width = (int32_t)(m->ps * 6 + 40);
  kvc_req_to_token_pool_config pc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  pc.size = MAXREQ;
  pc.max_context_len = w->width;
  CHECKF(kvc_req_to_token_pool_create(kvt_ctx, &pc, &w->pool) == KVC_OK, "pool create");
  for (int i = 0; i < MAXREQ + 16; i++) w->r[i].slots = malloc(sizeof(int64_t) * (size_t)(m->np * m->ps + 1));
  for (int i = 0; i < MAXREQ; i++) w->rows_fifo[i] = i + 1;
  w->nrows = MAXREQ;
  m_clear(m);
  w->dev_out = kvt_dev_alloc(sizeof(int64_t) * (size_t)(MAXB * w->width + 8));
  w->scratch = malloc(sizeof(int64_t) * (size_t)(m->np * m->ps + MAXB * w->width + 8));
}

static void check_counts(world *w) {
  kvc_allocator_stats st;
  CHECKF(kvc_allocator_get_stats(w->a, &st) == KVC_OK, "stats");
  kvt_digest_i64(st.free_pages);
  kvt_digest_i64(st.deferred_pages);
  kvt_digest_i64(kvc_allocator_available_size(w->a));
  CHECKF(st.free_pages == w->m.nfl && st.deferred_pages == w->m.ndef, "free %lld/%lld deferred %lld/%lld",
         (long long)st.free_pages, (long long)w->m.nfl, (long long)st.deferred_pages, (long long)w->m.ndef);
  CHECKF(st.free_pages + st.deferred_pages + st.held_pages == st.num_pages && st.num_pages == w->m.np, "conservation");
  CHECKF(kvc_allocator_available_size(w->a) == (w->m.nfl + w->m.ndef) * w->m.ps, "available size");
}

static void expect_same(const int64_t *got, const int64_t *want, int64_t n, const char *what) {
  kvt_digest(got, (size_t)n * sizeof *got);
  for (int64_t i = 0; i < n; i++)
    CHECKF(got[i] == want[i], "%s[%lld]: library %lld, model %lld", what, (long long)i, (long long)got[i],
           (long long)want[i]);
}

static int free_req_slot(world *w) {
  for (int i = 0; i < MAXREQ + 16; i++)
    if (!w->r[i].live) return i;
  return -1;
}

static void row_alloc(world *w, int32_t *row) {
  int32_t r = 0;
  CHECKF(kvc_req_to_token_pool_alloc(w->pool, 1, &r) == KVC_OK, "row alloc");
  kvt_digest(&r, sizeof r);
  CHECKF(r == w->rows_fifo[0], "row %d, model %d", r, w->rows_fifo[0]);
  memmove(w->rows_fifo, w->rows_fifo + 1, (size_t)(--w->nrows) * sizeof(int32_t));
  *row = r;
}

static void row_free(world *w, int32_t row) {
  CHECKF(kvc_req_to_token_pool_free(w->pool, row) == KVC_OK, "row free");
  w->rows_fifo[w->nrows++] = row;
}

/* --- Operations ------------------------------------------------------------------- */

static void op_extend(world *w, kvt_rng *g, int dev_check) {
  model *m = &w->m;
  int bs = (int)kvt_range(g, 1, MAXB), idx[MAXB], n = 0;
  int32_t rows[MAXB];
  int64_t pre[MAXB], seq[MAXB], last[MAXB], want[MAXB * 1024], *got = w->scratch;
  const int64_t *pslots[MAXB];
  int use_prefix = kvt_range(g, 0, 3) == 0, use_last = (int)kvt_range(g, 0, 1);
  for (int t = 0; t < bs; t++) {
    int pick = -1;
    if (kvt_range(g, 0, 1)) { /* continue a live request */
      int start = (int)kvt_range(g, 0, MAXREQ + 15);
      for (int k = 0; k < MAXREQ + 16; k++) {
        int i = (start + k) % (MAXREQ + 16);
        int dup = 0;
        for (int j = 0; j < n; j++) dup |= idx[j] == i;
        if (w->r[i].live && w->r[i].row && !dup && w->r[i].len < w->width) {
          pick = i;
          break;
        }
      }
    }
    if (pick < 0) {
      if (w->nrows == 0 || (pick = free_req_slot(w)) < 0) continue;
      w->r[pick].live = 1;
      w->r[pick].len = 0;
      row_alloc(w, &w->r[pick].row);
    }
    req *r = &w->r[pick];
    idx[n] = pick;
    rows[n] = r->row;
    pre[n] = r->len;
    int64_t room = w->width - r->len;
    int64_t cap = 3 * m->ps + 3;
    int64_t e = kvt_range(g, 0, room < cap ? room : cap);
    seq[n] = r->len + e;
    last[n] = r->len ? r->slots[r->len - 1] : -1;
    pslots[n] = use_prefix ? r->slots : NULL;
    n++;
  }
  if (!n) return;
  int ok = m_extend(m, n, pre, seq, last, want);
  kvc_status st = kvc_allocator_alloc_extend(w->a, (size_t)n, pre, seq, use_last ? last : NULL, w->pool, rows,
                                             use_prefix ? pslots : NULL, got, dev_check ? w->dev_out : NULL, NULL);
  kvt_digest_i64(st);
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += seq[i] - pre[i];
  if (!ok) {
    CHECKF(st == KVC_ERR_OUT_OF_SLOTS, "extend: want OUT_OF_SLOTS, got %s", kvc_status_name(st));
    g_oos++;
    for (int i = 0; i < n; i++)
      if (w->r[idx[i]].len == 0) {
        row_free(w, w->r[idx[i]].row);
        w->r[idx[i]].live = 0;
      }
    return;
  }
  CHECKF(st == KVC_OK, "extend -> %s", kvc_status_name(st));
  expect_same(got, want, total, "extend out");
  g_tokens += total;
  if (dev_check && total) {
    int64_t *back = malloc((size_t)total * 8);
    kvt_d2h(back, w->dev_out, (size_t)total * 8);
    expect_same(back, want, total, "extend out_device");
    free(back);
  }
  int64_t o = 0;
  for (int i = 0; i < n; i++) {
    req *r = &w->r[idx[i]];
    memcpy(r->slots + r->len, want + o, (size_t)(seq[i] - pre[i]) * 8);
    o += seq[i] - pre[i];
    r->len = seq[i];
  }
}

static void op_decode(world *w, kvt_rng *g, int dev_check) {
  model *m = &w->m;
  int bs = (int)kvt_range(g, 1, MAXB), idx[MAXB], n = 0;
  int32_t rows[MAXB];
  int64_t seq[MAXB], last[MAXB], want[MAXB], got[MAXB];
  int start = (int)kvt_range(g, 0, MAXREQ + 15);
  for (int k = 0; k < MAXREQ + 16 && n < bs; k++) {
    int i = (start + k) % (MAXREQ + 16);
    req *r = &w->r[i];
    if (!r->live || !r->row || r->len >= w->width) continue;
    idx[n] = i;
    rows[n] = r->row;
    seq[n] = r->len + 1;
    last[n] = r->len ? r->slots[r->len - 1] : -1;
    n++;
  }
  if (!n) return;
  int use_last = (int)kvt_range(g, 0, 1);
  int ok = m_decode(m, n, seq, last, want);
  kvc_status st = kvc_allocator_alloc_decode(w->a, (size_t)n, seq, use_last ? last : NULL, w->pool, rows, got,
                                             dev_check ? w->dev_out : NULL, NULL);
  kvt_digest_i64(st);
  if (!ok) {
    CHECKF(st == KVC_ERR_OUT_OF_SLOTS, "decode: want OUT_OF_SLOTS, got %s", kvc_status_name(st));
    g_oos++;
    return;
  }
  CHECKF(st == KVC_OK, "decode -> %s", kvc_status_name(st));
  expect_same(got, want, n, "decode out");
  g_tokens += n;
  if (dev_check) {
    int64_t back[MAXB];
    kvt_d2h(back, w->dev_out, (size_t)n * 8);
    expect_same(back, want, n, "decode out_device");
  }
  for (int i = 0; i < n; i++) {
    req *r = &w->r[idx[i]];
    r->slots[r->len++] = want[i];
  }
}

static void op_alloc(world *w, kvt_rng *g) {
  model *m = &w->m;
  int i = free_req_slot(w);
  if (i < 0) return;
  int64_t n = kvt_range(g, 0, 4) * m->ps;
  int64_t *want = w->r[i].slots, got[4 * 128 + 1];
  int ok = m_alloc(m, n, want);
  kvc_status st = kvc_allocator_alloc(w->a, n, got);
  kvt_digest_i64(st);
  if (!ok) {
    CHECKF(st == KVC_ERR_OUT_OF_SLOTS, "alloc(%lld): want OUT_OF_SLOTS", (long long)n);
    return;
  }
  CHECKF(st == KVC_OK, "alloc(%lld) -> %s", (long long)n, kvc_status_name(st));
  expect_same(got, want, n, "alloc");
  if (n == 0) return;
  w->r[i].live = 1;
  w->r[i].row = 0;
  w->r[i].len = n;
}

static int pick_live(world *w, kvt_rng *g) {
  int start = (int)kvt_range(g, 0, MAXREQ + 15);
  for (int k = 0; k < MAXREQ + 16; k++) {
    int i = (start + k) % (MAXREQ + 16);
    if (w->r[i].live) return i;
  }
  return -1;
}

/* Frees a request entirely (free or free_segment), or truncates its page-aligned tail. */
static void op_free(world *w, kvt_rng *g) {
  model *m = &w->m;
  int i = pick_live(w, g);
  if (i < 0) return;
  req *r = &w->r[i];
  int64_t from = 0;
  if (r->row && kvt_range(g, 0, 2) == 0) from = kvt_range(g, 0, r->len) / m->ps * m->ps;
  int64_t n = r->len - from;
  if (n > 0) {
    if (kvt_range(g, 0, 1) && r->row) {
      EXPECT_ST(kvc_allocator_free_segment(w->a, r->slots + from, (size_t)n, from), KVC_OK);
      m_free_segment(m, r->slots + from, n);
    } else {
      /* Shuffle a copy: free() must not depend on slot order (PAGED sorts). */
      int64_t *cp = w->scratch;
      memcpy(cp, r->slots + from, (size_t)n * 8);
      if (m->paged)
        for (int64_t k = n - 1; k > 0; k--) {
          int64_t j = kvt_range(g, 0, k), t = cp[k];
          cp[k] = cp[j];
          cp[j] = t;
        }
      EXPECT_ST(kvc_allocator_free(w->a, cp, (size_t)n), KVC_OK);
      m_free(m, cp, n);
    }
  }
  r->len = from;
  if (from == 0) {
    if (r->row) row_free(w, r->row);
    r->live = 0;
  }
}

static void op_misuse(world *w, kvt_rng *g) {
  model *m = &w->m;
  int64_t s;
  switch (kvt_range(g, 0, 3)) {
  case 0:
    s = kvt_range(g, 0, m->ps - 1);
    EXPECT_ST(kvc_allocator_free(w->a, &s, 1), KVC_ERR_MISUSE);
    break;
  case 1: /* a free page */
    if (!m->nfl) return;
    s = m->fl[kvt_range(g, 0, m->nfl - 1)] * m->ps + kvt_range(g, 0, m->ps - 1);
    EXPECT_ST(kvc_allocator_free(w->a, &s, 1), KVC_ERR_MISUSE);
    break;
  case 2:
    if (!m->in_group) EXPECT_ST(kvc_allocator_free_group_end(w->a), KVC_ERR_MISUSE);
    else EXPECT_ST(kvc_allocator_free_group_begin(w->a), KVC_ERR_MISUSE);
    break;
  default:
    if (w->m.has_backup && !w->m.backup_ok) EXPECT_ST(kvc_allocator_restore_state(w->a, &w->backup), KVC_ERR_MISUSE);
    break;
  }
}

static void op_backup_restore(world *w, kvt_rng *g) {
  model *m = &w->m;
  EXPECT_ST(kvc_allocator_backup_state(w->a, &w->backup), KVC_OK);
  m->has_backup = m->backup_ok = 1;
  memcpy(m->bfl, m->fl, (size_t)m->nfl * 8);
  m->nbfl = m->nfl;
  memcpy(m->bdef, m->def, (size_t)m->ndef * 8);
  m->nbdef = m->ndef;
  /* Speculative allocations, maybe a merge, then roll back (or keep). */
  int k = (int)kvt_range(g, 0, 3);
  for (int j = 0; j < k; j++) {
    int64_t n = kvt_range(g, 0, 3) * m->ps, tmp[3 * 128 + 1], want[3 * 128 + 1];
    int ok = m_alloc(m, n, want);
    kvc_status st = kvc_allocator_alloc(w->a, n, tmp);
    CHECKF(ok ? st == KVC_OK : st == KVC_ERR_OUT_OF_SLOTS, "speculative alloc");
    if (ok) expect_same(tmp, want, n, "speculative alloc");
    if (kvt_range(g, 0, 3) == 0) {
      EXPECT_ST(kvc_allocator_merge_and_sort_free(w->a), KVC_OK);
      m_merge(m);
    }
  }
  if (kvt_range(g, 0, 4)) {
    EXPECT_ST(kvc_allocator_restore_state(w->a, &w->backup), KVC_OK);
    memcpy(m->fl, m->bfl, (size_t)m->nbfl * 8);
    m->nfl = m->nbfl;
    memcpy(m->def, m->bdef, (size_t)m->nbdef * 8);
    m->ndef = m->nbdef;
  } /* else: the snapshot stays live (allocations do not invalidate it) */
}

static void op_clear(world *w) {
  EXPECT_ST(kvc_allocator_clear(w->a), KVC_OK);
  EXPECT_ST(kvc_req_to_token_pool_clear(w->pool), KVC_OK);
  m_clear(&w->m);
  for (int i = 0; i < MAXREQ + 16; i++) w->r[i].live = 0;
  for (int i = 0; i < MAXREQ; i++) w->rows_fifo[i] = i + 1;
  w->nrows = MAXREQ;
}

static void check_tables(world *w) {
  size_t bytes = sizeof(int32_t) * (size_t)(MAXREQ + 1) * (size_t)w->width;
  int32_t *t = malloc(bytes);
  kvt_d2h(t, kvc_req_to_token_pool_table(w->pool), bytes);
  for (int i = 0; i < MAXREQ + 16; i++) {
    req *r = &w->r[i];
    if (!r->live || !r->row) continue;
    const int32_t *mirror = kvc_req_to_token_pool_row(w->pool, r->row);
    kvt_digest(mirror, sizeof *mirror * (size_t)r->len);
    kvt_digest(t + (size_t)r->row * (size_t)w->width, sizeof *t * (size_t)r->len);
    for (int64_t k = 0; k < r->len; k++) {
      CHECKF(mirror[k] == r->slots[k], "row %d pos %lld: mirror %d, want %lld", r->row, (long long)k, mirror[k],
             (long long)r->slots[k]);
      CHECKF(t[(size_t)r->row * (size_t)w->width + (size_t)k] == r->slots[k], "row %d pos %lld: device %d", r->row,
             (long long)k, t[(size_t)r->row * (size_t)w->width + (size_t)k]);
    }
  }
  free(t);
}

static void test_random_sequences_match_model(void **state) {
  (void)state;
  g_seed = kvt_seed();
  const int cuda = kvc_context_backend(kvt_ctx) == KVC_BACKEND_CUDA;
  long steps = cuda ? 100000 : 1000000;
  const char *env = getenv("KVT_STEPS");
  if (env && *env) steps = strtol(env, NULL, 0);
  const int dev_every = cuda ? 97 : 997;
  kvt_rng g = {g_seed};
  world *w = calloc(1, sizeof *w);
  long per_world = 0;
  long counts[10] = {0};
  for (g_step = 0; g_step < steps; g_step++) {
    if (per_world == 0) {
      if (w->a) w_destroy(w);
      w_init(w, &g);
      per_world = kvt_range(&g, 2000, 30000);
    }
    per_world--;
    int dev_check = g_step % dev_every == 0;
    int op = (int)kvt_range(&g, 0, 99);
    /* Under pressure, free more often so most batches fit (and some still do not). */
    if ((w->m.nfl + w->m.ndef) * 4 < w->m.np && kvt_range(&g, 0, 1)) op = 70;
    if (op < 30) op_extend(w, &g, dev_check), counts[0]++;
    else if (op < 55) op_decode(w, &g, dev_check), counts[1]++;
    else if (op < 62) op_alloc(w, &g), counts[2]++;
    else if (op < 82) op_free(w, &g), counts[3]++;
    else if (op < 86) {
      counts[4]++;
      if (w->m.in_group) {
        EXPECT_ST(kvc_allocator_free_group_end(w->a), KVC_OK);
        m_group_end(&w->m);
      } else {
        EXPECT_ST(kvc_allocator_free_group_begin(w->a), KVC_OK);
        w->m.in_group = 1;
        w->m.backup_ok = 0;
      }
    } else if (op < 90) op_backup_restore(w, &g), counts[5]++;
    else if (op < 93) {
      EXPECT_ST(kvc_allocator_merge_and_sort_free(w->a), KVC_OK);
      m_merge(&w->m);
      counts[6]++;
    } else if (op < 98) op_misuse(w, &g), counts[7]++;
    else if (op < 99 && kvt_range(&g, 0, 9) == 0) op_clear(w), counts[8]++;
    check_counts(w);
    if (g_step % 64 == 0) CHECKF(kvc_allocator_check(w->a) == KVC_OK, "audit");
    if (dev_check) check_tables(w);
  }
  printf("[ MODEL    ] %ld steps: extend %ld decode %ld alloc %ld free %ld group %ld backup %ld merge %ld misuse %ld "
         "clear %ld; %ld tokens placed, %ld batches out of slots\n",
         steps, counts[0], counts[1], counts[2], counts[3], counts[4], counts[5], counts[6], counts[7], counts[8],
         g_tokens, g_oos);
  w_destroy(w);
  free(w);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_random_sequences_match_model),
};
KVT_MAIN("alloc_model", tests)
