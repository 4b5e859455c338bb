/*
 * allocator_plan.c — alloc_extend / alloc_decode: the host decides every slot, the
 * device gets one launch.
 *
 *   validate all requests ──> page need (exact, host) ──> merge trigger (SGLang's) ──>
 *   shortage? OUT_OF_SLOTS, nothing launched ──> plan payload from a peek at the ring
 *   ──> ONE launch (out_cache_loc + req_to_token rows) ──> commit: pop pages, out_host,
 *   req pool mirror
 *
 * SGLang launches its kernel first and checks capacity afterwards (its kernel may read
 * past the free list); here the host checks first, so a failure changes nothing. The
 * host state is committed only after the launch was accepted, so a launch error also
 * leaves the allocator unchanged.
 *
 * Extend payload (uint32 words, see kernels/alloc_plan.cu):
 *
 *   [ desc 0 | desc 1 | ... | desc n-1 ][ page list: the popped pages in free-list order ]
 *   [ prefix slots of the requests that copy a prefix, int32 ]
 *
 * Request i takes free-list entries [S_i, S_i + n_i) (spec 6.8): its full new pages in
 * list order, then its partial last page. The kernel needs only the request's own run,
 * so the descriptor carries S_i (page_begin) and O_i (out_offset) — no in-kernel scans.
 * The TOKEN kind uses the same kernel with page size 1 and the slots as the page list.
 */
#include "alloc.h"

#include <string.h>
#if KVC__HAVE_AVX512
#  include <immintrin.h>
#endif

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

#define ALLOC_ENTRY(a) KVC_CHECK_HANDLE(a, KVC__ALLOCATOR_MAGIC, "alloc", "kvc_allocator")

/* The page of `last` must be held by the caller (not free, deferred or freed in the open
 * group) and its in-page offset must be the one of token position `pos` (spec 6.6). */
static inline kvc_status check_last_loc(kvc_allocator *a, const char *fn, size_t i, int64_t last, int64_t pos) {
  const int64_t ps = a->ps;
  if (last < ps || last >= (a->num_pages + 1) * ps)
    return kvc__error(a->ctx, KVC_ERR_INVALID_ARGUMENT, fn, "request %zu: last_loc %lld is out of range [%lld, %lld)",
                      i, (long long)last, (long long)ps, (long long)(a->num_pages + 1) * (long long)ps);
  if (kvc__pg_mod(a, last) != kvc__pg_mod(a, pos))
    return kvc__error(a->ctx, KVC_ERR_INVALID_ARGUMENT, fn,
                      "request %zu: last_loc %lld sits at in-page offset %lld, token %lld needs offset %lld", i,
                      (long long)last, (long long)(last % ps), (long long)pos, (long long)(pos % ps));
  uint8_t s = a->state[kvc__pg_div(a, last)];
  if ((s & KVC__PG_STATE) != KVC__PG_HELD || (s & (KVC__PG_GFREE | KVC__PG_GSEG)))
    return kvc__error(a->ctx, KVC_ERR_MISUSE, fn, "request %zu: last_loc %lld is in page %lld, which is not held", i,
                      (long long)last, (long long)(last / ps));
  return KVC_OK;
}

/* Brings the mirror line of position s-2 of a row towards the cache (decode reads it). */
static inline void prefetch_mirror(const kvc_req_to_token_pool *rp, int32_t row, int64_t s) {
  if (row >= 1 && row <= rp->size && s >= 2 && s <= rp->width)
    __builtin_prefetch(kvc__req_pool_mirror_row(rp, row) + (s - 2), 1, 3);
}

/* Validates a request's row: held by the pool and not listed earlier in the batch. */
static kvc_status check_row(kvc_allocator *a, const char *fn, kvc_req_to_token_pool *rp, size_t i, int32_t row) {
  if (!kvc__req_pool_row_held(rp, row))
    return kvc__error(a->ctx, KVC_ERR_MISUSE, fn, "req_rows[%zu] = %d is not a held row of req_pool", i, row);
  if (rp->rowflag[row] & KVC__ROW_MARK)
    return kvc__error(a->ctx, KVC_ERR_MISUSE, fn, "req_rows[%zu] = %d is listed twice", i, row);
  rp->rowflag[row] |= KVC__ROW_MARK;
  return KVC_OK;
}

/* last_locs may be NULL only when a req_pool mirror can supply them, or when no
 * request continues a partial page (then no last_loc is read at all). */
static kvc_status no_last_loc(kvc_allocator *a, const char *fn, size_t i) {
  return kvc__error(a->ctx, KVC_ERR_INVALID_ARGUMENT, fn,
                    "request %zu continues a partial page but last_locs is NULL and there is no req_pool", i);
}

static void unmark_rows(kvc_req_to_token_pool *rp, const int32_t *rows, size_t n) {
  uint8_t *const flag = rp->rowflag; /* a local: the byte stores may alias rp->rowflag */
  const uint8_t keep = (uint8_t)~KVC__ROW_MARK;
  size_t j = 0;
  /* Four rows a step: the loop's own increment and test were half of its instructions
   * at batch 1024 (decode runs this after every step). */
  for (; j + 4 <= n; j += 4) {
    flag[rows[j]] &= keep;
    flag[rows[j + 1]] &= keep;
    flag[rows[j + 2]] &= keep;
    flag[rows[j + 3]] &= keep;
  }
  for (; j < n; j++) flag[rows[j]] &= keep;
}

static kvc_status check_common(kvc_allocator *a, const char *fn, size_t bs, kvc_req_to_token_pool *rp,
                               const int32_t *req_rows) {
  KVC_FORWARD(kvc__alloc_batch_reserve(a, fn, bs));
  if (bs > (size_t)1 << 24) return kvc__error(a->ctx, KVC_ERR_INVALID_ARGUMENT, fn, "batch_size %zu > 2^24", bs);
  if (rp) {
    KVC_FORWARD(kvc__req_pool_check_handle(a->ctx, fn, rp));
    if (!req_rows) return kvc__error(a->ctx, KVC_ERR_INVALID_ARGUMENT, fn, "req_rows is NULL with a req_pool");
  }
  return KVC_OK;
}

/* --- alloc_extend ------------------------------------------------------------------- */

/* Page size 1: the n new slots of a request are the ring entries from .. from + n - 1 in
 * order, so they are copied in (at most two) contiguous runs of the ring's buffer:
 * widened into out, as they are into the int32 mirror row. The page loop of the commit
 * below spends about 27 instructions a slot on pages of one slot (a loop per page of one
 * trip, twice); this is about 2 (callgrind, 16 x 512 at page 1: bench/RESULTS.md session 8). */
static void commit_run_ps1(const kvc__ring *r, int64_t from, int64_t n, int64_t *restrict out, int32_t *restrict mrow) {
  const uint32_t *restrict const buf = r->buf;
  uint64_t at = (r->head + (uint64_t)from) & r->mask;
  while (n > 0) {
    /* mask + 1 - at: the entries left before the buffer wraps; 0 only for a plain array
     * view (mask UINT64_MAX, at 0), which never wraps (as kvc__ring_copy). */
    const uint64_t room = r->mask + 1 - at;
    const int64_t run = (room == 0 || room > (uint64_t)n) ? n : (int64_t)room;
    const uint32_t *restrict const src = buf + at;
    if (out) {
      for (int64_t j = 0; j < run; j++) out[j] = (int64_t)src[j];
      out += run;
    }
    if (mrow) {
      memcpy(mrow, src, (size_t)run * sizeof *mrow); /* ids < 2^31: the same bits as int32 */
      mrow += run;
    }
    n -= run;
    at = 0;
  }
}

/* The SWA allocator's queued zero runs (zero_count (idx, len) runs of whole pages, their
 * pages marked 1 in zero_pages) minus the free ring's first `pages` pages, which the
 * launch takes and writes whole itself (each slot its pair, or 0 past the request's end),
 * so that no zero and pair of one entry race. Writes them to dst (NULL: counts only) and
 * returns how many there are: at most zero_count + pages. */
static size_t zero_runs_minus_new(const kvc_allocator *a, const uint32_t *zero, size_t zero_count, uint8_t *zero_pages,
                                  int64_t pages, uint32_t *dst) {
  uint8_t hit = 0;
  for (int64_t k = 0; k < pages; k++) hit |= zero_pages[kvc__ring_at(&a->ring, k)];
  if (!hit) { /* the common case: the queue as it is */
    if (dst) memcpy(dst, zero, zero_count * 2 * sizeof *dst);
    return zero_count;
  }
  /* Mark the new pages 2 for the walk, split the runs around them, mark them back. */
  for (int64_t k = 0; k < pages; k++) {
    uint8_t *z = &zero_pages[kvc__ring_at(&a->ring, k)];
    if (*z) *z = 2;
  }
  const int64_t ps = a->ps;
  size_t n = 0;
  for (size_t i = 0; i < zero_count; i++) {
    const int64_t p0 = zero[2 * i] / ps, p1 = p0 + zero[2 * i + 1] / ps; /* whole pages */
    for (int64_t pg = p0; pg < p1;) {
      if (zero_pages[pg] == 2) {
        pg++;
        continue;
      }
      int64_t e = pg + 1;
      while (e < p1 && zero_pages[e] != 2) e++;
      if (dst) dst[2 * n] = (uint32_t)(pg * ps), dst[2 * n + 1] = (uint32_t)((e - pg) * ps);
      n++;
      pg = e;
    }
  }
  for (int64_t k = 0; k < pages; k++) {
    uint8_t *z = &zero_pages[kvc__ring_at(&a->ring, k)];
    if (*z) *z = 1;
  }
  return n;
}

/* Whether this extend's launch carries the SWA allocator's queued zero runs, and how
 * many runs it writes (zero_runs_minus_new over the extend's new pages). It does not
 * carry (false: the caller settles first) when a request continues a partial page that
 * is queued (rare: only a window free of held slots queues a held page), the payload
 * would pass 2^31 words, or at page size 1: there every new slot is a page to look up
 * and the runs split around them one by one, which on the H200's host made the flow's
 * next alloc_extend 10-16 us slower than the separate launch it saves (bench/RESULTS.md
 * run 20, call 3). With dst NULL it only counts (*runs); with dst it writes them. */
static bool zero_carry(const kvc_allocator *a, const kvc__extend_map *m, size_t bs, int64_t total_pages, size_t words0,
                       uint32_t *dst, size_t *runs) {
  *runs = 0;
  if (!m->zero_count || a->ps == 1 || m->zero_count > (size_t)(INT32_MAX / 8) || words0 > (size_t)(INT32_MAX / 2) ||
      total_pages > INT32_MAX / 8)
    return false;
  for (size_t i = 0; i < bs; i++)
    if (a->b_last[i] >= 0 && m->zero_pages[a->b_last[i] / a->ps]) return false;
  *runs = zero_runs_minus_new(a, m->zero, m->zero_count, m->zero_pages, total_pages, dst);
  return true;
}

/* alloc_extend, optionally (m) writing the SWA allocator's full->SWA mapping of every new
 * slot in the same launch. */
static kvc_status alloc_extend_impl(kvc_allocator *a, const char *fn, size_t bs, const int64_t *prefix_lens,
                                    const int64_t *seq_lens, const int64_t *last_locs, kvc_req_to_token_pool *rp,
                                    const int32_t *req_rows, const int64_t *const *prefix_slots, int64_t *out_host,
                                    int64_t *out_device, int64_t *rows_device, const kvc__extend_map *m,
                                    kvc_stream stream) {
  kvc_context *ctx = a->ctx;
  KVC_RETURN_IF(!prefix_lens || !seq_lens, ctx, KVC_ERR_INVALID_ARGUMENT, "prefix_lens and seq_lens must be non-NULL");
  KVC_RETURN_IF(prefix_slots && !rp, ctx, KVC_ERR_INVALID_ARGUMENT, "prefix_slots needs a req_pool to write into");
  KVC_RETURN_IF(rows_device && !rp, ctx, KVC_ERR_INVALID_ARGUMENT, "rows_device needs a req_pool (and its req_rows)");
  KVC_FORWARD(check_common(a, fn, bs, rp, req_rows));
  const bool paged = a->kind == KVC_ALLOCATOR_PAGED;
  const int64_t ps = a->ps;
  const int64_t width = rp ? rp->width : INT32_MAX;
  int64_t total_tokens = 0, total_pages = 0, prefix_words = 0, max_len = 1;
  kvc_status st = KVC_OK;
  size_t marked = 0;
  for (size_t i = 0; i < bs && st == KVC_OK; i++) {
    const int64_t p = prefix_lens[i], s = seq_lens[i];
    if (p < 0 || s < p) {
      st = kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn,
                      "request %zu: prefix_len %lld, seq_len %lld (need 0 <= prefix_len <= seq_len)", i, (long long)p,
                      (long long)s);
      break;
    }
    if (s > width) {
      st = kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "request %zu: seq_len %lld exceeds the row width %lld", i,
                      (long long)s, (long long)width);
      break;
    }
    int32_t row = -1;
    if (rp) {
      row = req_rows[i];
      if ((st = check_row(a, fn, rp, i, row)) != KVC_OK) break;
      marked++;
    }
    const int64_t *pre = (prefix_slots && p > 0) ? prefix_slots[i] : NULL;
    if (pre) {
      for (int64_t t = 0; t < p; t++)
        if (pre[t] < 0 || pre[t] > INT32_MAX) {
          st = kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "prefix_slots[%zu][%lld] = %lld is out of [0, 2^31)", i,
                          (long long)t, (long long)pre[t]);
          break;
        }
      if (st != KVC_OK) break;
      prefix_words += p;
      max_len = KVC__MAX(max_len, p);
    }
    int64_t last = -1;
    if (paged && kvc__pg_mod(a, p) != 0 && s > p) {
      if (!last_locs && !rp) {
        st = no_last_loc(a, fn, i);
        break;
      }
      last = last_locs ? last_locs[i] : pre ? pre[p - 1] : kvc__req_pool_mirror_row(rp, row)[p - 1];
      if ((st = check_last_loc(a, fn, i, last, p - 1)) != KVC_OK) break;
    }
    a->b_last[i] = last;
    a->b_pages[i] = paged ? kvc__pg_div(a, s + ps - 1) - kvc__pg_div(a, p + ps - 1) : s - p;
    total_pages += a->b_pages[i];
    total_tokens += s - p;
    max_len = KVC__MAX(max_len, s - p);
  }
  if (rp) unmark_rows(rp, req_rows, marked);
  if (st != KVC_OK) return st;
  KVC_RETURN_IF(total_tokens > INT32_MAX || prefix_words > INT32_MAX, ctx, KVC_ERR_INVALID_ARGUMENT,
                "%lld new tokens / %lld prefix slots in one batch exceed 2^31", (long long)total_tokens,
                (long long)prefix_words);

  /* SGLang's trigger (spec 14): paged uses a cheap upper bound and may merge early. */
  kvc__ring *r = &a->ring;
  if (paged ? (total_tokens / ps + (int64_t)bs + 1 > r->count) : (total_tokens > r->count)) kvc__fl_merge(a);
  if (total_pages > r->count)
    return kvc__alloc_finish(a, fn,
                             kvc__error(ctx, KVC_ERR_OUT_OF_SLOTS, fn, "%lld %s needed, %lld free",
                                        (long long)total_pages, paged ? "pages" : "slots", (long long)r->count));

  if (rp || out_device || m) {
    kvc__spec extra = {1, {{"KVC_PAGE_SIZE", ps}}};
    if (!a->k_extend[0]) KVC_FORWARD(kvc__plan_prefetch(ctx, &kvc__k_plan_extend, &extra, a->k_extend));
    const size_t desc_words = (size_t)bs * KVC_PLAN_EXTEND_DESC_WORDS;
    const size_t words0 = desc_words + (size_t)total_pages * (m ? 2 : 1) + (size_t)prefix_words;
    size_t zc = 0;
    const bool carry = m && zero_carry(a, m, bs, total_pages, words0, NULL, &zc);
    if (m && m->zero_count && !carry) KVC_FORWARD(m->settle(m->settle_user, stream)); /* alone, first */
    const size_t words = words0 + (carry ? 1 + 2 * zc : 0);                           /* zc < 2^30: no overflow */
    kvc__plan plan;
    KVC_FORWARD(kvc__plan_begin_mapped(ctx, &plan, a->scratch, sizeof(kvc_p_plan_extend), words));
    uint32_t *w = plan.payload;
    uint32_t *pages = w + desc_words;
    int32_t *pre_area = (int32_t *)(void *)(pages + total_pages);
    uint32_t *swa_pages = pages + total_pages + prefix_words; /* with m only */
    int64_t o = 0, pb = 0, pw = 0;
    for (size_t i = 0; i < bs; i++) {
      const int64_t p = prefix_lens[i], s = seq_lens[i];
      const int64_t *pre = (prefix_slots && p > 0) ? prefix_slots[i] : NULL;
      int32_t *d = (int32_t *)(void *)(w + i * KVC_PLAN_EXTEND_DESC_WORDS);
      d[0] = rp ? req_rows[i] : -1;
      d[1] = (int32_t)p;
      d[2] = (int32_t)s;
      d[3] = (int32_t)a->b_last[i];
      d[4] = (int32_t)o;
      d[5] = (int32_t)pb;
      d[6] = pre ? (int32_t)pw : -1;
      d[7] = m ? (int32_t)m->swa_last[i] : 0;
      if (m) { /* SWA page of new page k: that of its first token */
        const int64_t first = KVC__MIN(s, ceil_div(p, ps) * ps) - p;
        for (int64_t k = 0; k < a->b_pages[i]; k++)
          swa_pages[pb + k] = (uint32_t)(m->swa_slots[o + first + k * ps] / ps);
      }
      if (pre) {
        for (int64_t t = 0; t < p; t++) pre_area[pw + t] = (int32_t)pre[t];
        pw += p;
      }
      o += s - p;
      pb += a->b_pages[i];
    }
    if (total_pages) kvc__ring_copy(r, 0, total_pages, pages);
    kvc_p_plan_extend h;
    memset(&h, 0, sizeof h);
    h.table = rp ? (uint64_t)(uintptr_t)rp->table : 0;
    h.out = (uint64_t)(uintptr_t)out_device;
    h.staged = plan.staged_dev;
    h.row_stride = rp ? rp->width : 0;
    h.n = (int32_t)bs;
    h.page_size = (int32_t)ps;
    h.pages_at = (int32_t)desc_words;
    h.prefix_at = (int32_t)(desc_words + (size_t)total_pages);
    h.rows_out = (uint64_t)(uintptr_t)rows_device;
    if (m) {
      h.swa_pages_at = (int32_t)(desc_words + (size_t)total_pages + (size_t)prefix_words);
      h.map = (uint64_t)(uintptr_t)m->map;
      h.map_len = m->map_len;
    }
    if (carry) { /* zero_at != 0 also makes the kernel zero the new pages' unused tails */
      zero_carry(a, m, bs, total_pages, words0, w + words0 + 1, &zc);
      w[words0] = (uint32_t)zc;
      h.zero_at = (int32_t)words0; /* > 0: the descriptors come first */
    }
    unsigned tiles = (unsigned)ceil_div(max_len, KVC_PLAN_EXTEND_TOKENS_PER_BLOCK);
    /* Blocks past the requests zero the carried runs: 8 runs per block (a warp each). */
    const unsigned zblocks = zc ? (unsigned)KVC__MIN(ceil_div((int64_t)zc, 8), 4096) : 0u;
    KVC_FORWARD(kvc__plan_launch(ctx, &plan, &kvc__k_plan_extend, &extra, a->k_extend,
                                 kvc__dim((unsigned)bs + zblocks, tiles, 1), kvc__dim(256, 1, 1), stream, &h));
    if (carry) *m->zero_merged = true;
  }

  /* Commit: the same slots the kernel computes, for out_host and the mirror. */
  int64_t o = 0, pb = 0;
  for (size_t i = 0; i < bs; i++) {
    const int64_t p = prefix_lens[i], s = seq_lens[i];
    int32_t *mrow = rp ? kvc__req_pool_mirror_row(rp, req_rows[i]) : NULL;
    const int64_t *pre = (prefix_slots && p > 0) ? prefix_slots[i] : NULL;
    if (pre)
      for (int64_t t = 0; t < p; t++) mrow[t] = (int32_t)pre[t];
    int64_t *out = out_host ? out_host + o - p : NULL; /* indexed by position */
    if (ps == 1) {                                     /* no partial page to continue: every slot is a ring entry */
      commit_run_ps1(r, pb, s - p, out ? out + p : NULL, mrow ? mrow + p : NULL);
      o += s - p;
      pb += a->b_pages[i];
      continue;
    }
    int64_t pos = p;
    const int64_t part1_end = KVC__MIN(s, ceil_div(p, ps) * ps);
    for (int64_t slot = a->b_last[i] + 1; pos < part1_end; pos++, slot++) {
      if (out) out[pos] = slot;
      if (mrow) mrow[pos] = (int32_t)slot;
    }
    for (int64_t k = pb; pos < s; k++) {
      const int64_t base = (int64_t)kvc__ring_at(r, k) * ps;
      const int64_t e = KVC__MIN(s - pos, ps);
      if (out)
        for (int64_t j = 0; j < e; j++) out[pos + j] = base + j;
      if (mrow)
        for (int64_t j = 0; j < e; j++) mrow[pos + j] = (int32_t)(base + j);
      pos += e;
    }
    o += s - p;
    pb += a->b_pages[i];
  }
  kvc__fl_pop(a, total_pages);
  return kvc__alloc_finish(a, fn, KVC_OK);
}

kvc_status kvc_allocator_alloc_extend(kvc_allocator *a, size_t bs, const int64_t *prefix_lens, const int64_t *seq_lens,
                                      const int64_t *last_locs, kvc_req_to_token_pool *rp, const int32_t *req_rows,
                                      const int64_t *const *prefix_slots, int64_t *out_host, int64_t *out_device,
                                      kvc_stream stream) {
  KVC_API_ENTRY();
  ALLOC_ENTRY(a);
  if (bs == 0) return KVC_OK;
  return alloc_extend_impl(a, __func__, bs, prefix_lens, seq_lens, last_locs, rp, req_rows, prefix_slots, out_host,
                           out_device, NULL, NULL, stream);
}

kvc_status kvc_allocator_alloc_extend_ex(kvc_allocator *a, const kvc_extend_args *x) {
  KVC_API_ENTRY();
  ALLOC_ENTRY(a);
  KVC_RETURN_IF(!x, a->ctx, KVC_ERR_INVALID_ARGUMENT, "args is NULL");
  if (x->batch_size == 0) return KVC_OK;
  return alloc_extend_impl(a, __func__, x->batch_size, x->prefix_lens, x->seq_lens, x->last_locs, x->req_pool,
                           x->req_rows, x->prefix_slots, x->out_host, x->out_device, x->rows_device, NULL, x->stream);
}

kvc_status kvc__alloc_extend_mapped(kvc_allocator *a, const char *fn, const kvc__extend_args *x,
                                    const kvc__extend_map *m) {
  if (x->batch_size == 0) return KVC_OK;
  return alloc_extend_impl(a, fn, x->batch_size, x->prefix_lens, x->seq_lens, x->last_locs, x->req_pool, x->req_rows,
                           x->prefix_slots, x->out_host, x->out_device, x->rows_device, m, x->stream);
}

/* --- alloc_decode ------------------------------------------------------------------- */

/* Validates request i of a decode batch (spec 6.7): seq_len range, row held and not
 * listed earlier (marked), and, when the token continues a page, its last_loc. Sets
 * *fresh (the token opens a page) and *last. */
static inline kvc_status decode_check_one(kvc_allocator *a, const char *fn, size_t i, const int64_t *seq_lens,
                                          const int64_t *last_locs, kvc_req_to_token_pool *rp, const int32_t *req_rows,
                                          int64_t width, bool *fresh, int64_t *last) {
  const int64_t s = seq_lens[i];
  if (s < 1 || s > width)
    return kvc__error(a->ctx, KVC_ERR_INVALID_ARGUMENT, fn, "request %zu: seq_len %lld is out of [1, %lld]", i,
                      (long long)s, (long long)width);
  if (rp) KVC_FORWARD(check_row(a, fn, rp, i, req_rows[i]));
  /* A new page iff (s-1) % ps == 0 — also for ps == 1, where SGLang's page counter
   * (seq % ps == 1) says 0 (spec 15.1 item 4); the TOKEN kind always takes a slot. */
  *fresh = a->kind != KVC_ALLOCATOR_PAGED || kvc__pg_mod(a, s - 1) == 0;
  *last = -1;
  if (*fresh) return KVC_OK;
  if (!last_locs && !rp) return no_last_loc(a, fn, i);
  *last = last_locs ? last_locs[i] : kvc__req_pool_mirror_row(rp, req_rows[i])[s - 2];
  return check_last_loc(a, fn, i, *last, s - 2);
}

/* The step's effects for request i once its slot is known: b_last, the payload entry
 * (when w: stride 2 (table offset, slot), else (row, position, slot)), and the mirror
 * entry (its old value kept in b_pages for kvc__alloc_decode_undo). */
static inline void decode_apply_one(kvc_allocator *a, size_t i, int64_t slot, const int64_t *seq_lens,
                                    kvc_req_to_token_pool *rp, const int32_t *req_rows, uint32_t *w, size_t stride) {
  a->b_last[i] = slot;
  if (w && stride == 2) {
    /* < 2^31 (kvc__alloc_decode_plan checked the table); UINT32_MAX: no table write */
    w[2 * i] = rp ? (uint32_t)((int64_t)req_rows[i] * rp->width + seq_lens[i] - 1) : UINT32_MAX;
    w[2 * i + 1] = (uint32_t)slot;
  } else if (w) {
    w[stride * i] = rp ? (uint32_t)req_rows[i] : UINT32_MAX; /* -1: no table write */
    w[stride * i + 1] = (uint32_t)(seq_lens[i] - 1);
    w[stride * i + 2] = (uint32_t)slot;
  }
  if (rp) {
    int32_t *m = kvc__req_pool_mirror_row(rp, req_rows[i]) + (seq_lens[i] - 1);
    a->b_pages[i] = *m;
    *m = (int32_t)slot;
  }
}

/* Puts back the mirror entries of requests [0, n) written by decode_apply_one. Reverse
 * order, so that the oldest value wins if two requests wrote one entry (they cannot:
 * rows are distinct, but the undo does not depend on it). */
static void decode_undo_mirror(kvc_allocator *a, size_t n, const int64_t *seq_lens, kvc_req_to_token_pool *rp,
                               const int32_t *req_rows) {
  if (!rp) return;
  for (size_t j = n; j-- > 0;) kvc__req_pool_mirror_row(rp, req_rows[j])[seq_lens[j] - 1] = (int32_t)a->b_pages[j];
}

/* Clears the marks of a batch whose request i failed: rows [0, i), and row i when its
 * own row check passed before a later check failed (a held row; a duplicate's mark is
 * the earlier request's and is cleared either way). */
static void unmark_failed(kvc_req_to_token_pool *rp, const int32_t *req_rows, size_t i) {
  if (!rp) return;
  unmark_rows(rp, req_rows, i);
  if (kvc__req_pool_row_held(rp, req_rows[i])) rp->rowflag[req_rows[i]] &= (uint8_t)~KVC__ROW_MARK;
}

/* The mirror rows are far apart (one per request, row width apart): the line holding
 * positions s-2 (read) and s-1 (written) is prefetched a few requests ahead, so the
 * misses overlap instead of stalling the loop one by one. */
enum { AHEAD = 8 };

/* A batch of at most ring.count requests (SGLang's merge trigger, bs > free pages, cannot
 * fire and capacity cannot run out): one pass validates each request, takes its slot
 * and applies it; a failure at request i undoes requests [0, i). */
static kvc_status decode_plan_one_pass(kvc_allocator *a, const char *fn, size_t bs, const int64_t *seq_lens,
                                       const int64_t *last_locs, kvc_req_to_token_pool *rp, const int32_t *req_rows,
                                       uint32_t *w, size_t stride, int64_t *need_out) {
  const kvc__ring *r = &a->ring;
  const int64_t ps = a->ps, width = rp ? rp->width : INT32_MAX;
  const bool pf = rp != NULL;
  int64_t k = 0;
  for (size_t j = 0; pf && j < bs && j < AHEAD; j++) prefetch_mirror(rp, req_rows[j], seq_lens[j]);
  for (size_t i = 0; i < bs; i++) {
    if (pf && i + AHEAD < bs) prefetch_mirror(rp, req_rows[i + AHEAD], seq_lens[i + AHEAD]);
    bool fresh = false;
    int64_t last = -1;
    kvc_status st = decode_check_one(a, fn, i, seq_lens, last_locs, rp, req_rows, width, &fresh, &last);
    if (st != KVC_OK) {
      decode_undo_mirror(a, i, seq_lens, rp, req_rows);
      unmark_failed(rp, req_rows, i);
      return st;
    }
    decode_apply_one(a, i, fresh ? (int64_t)kvc__ring_at(r, k++) * ps : last + 1, seq_lens, rp, req_rows, w, stride);
  }
  if (rp) unmark_rows(rp, req_rows, bs);
  *need_out = k;
  return KVC_OK;
}

/* --- The fused decode pass ---------------------------------------------------------- */

/* decode_plan_one_pass's work for a power-of-two page size and a source of last_locs
 * (the usual case: every engine step), written so that a request costs ~70 instructions
 * instead of ~125 (callgrind, issue 20, sessions 4 and 8):
 *   - every field lives in a local: the row-flag stores are bytes, which may alias
 *     anything, so a->ps, a->state, rp->mirror... were reloaded after each one;
 *   - the checks of a request fold into three predictable branches, the precise message
 *     being left to the checked code (below);
 *   - the page-boundary test is branch-free: a continuing request's last_loc and page
 *     state are read for every request (a fresh one's are in bounds: the mirror entry
 *     before its row, page 0 when out of range), and the slot is a select between the
 *     ring's next page and last_loc + 1. About 1 request in ps opens a page, in no
 *     pattern a predictor learns: a branch there cost a mispredict per fresh request;
 *   - the loop spills (more live values than registers): stores that a failure leaves
 *     harmless (payload row and position, the undo copy) come right after the row
 *     checks, so row and position die early; that took ~8 instructions per request,
 *     mostly stack reloads;
 *   - no software prefetch of the mirror lines: it cost ~10 instructions per request and
 *     bought nothing measurable, 8, 16 or 32 requests ahead it measured 1-17% slower
 *     (bench/RESULTS.md, issue 20), the out-of-order window overlapping those misses.
 * Returns the requests done; on a failure at i, rows [0, i) are marked (row i is not:
 * it is marked only once all of its checks passed) and their mirror entries written, as
 * decode_plan_one_pass leaves them. `stride` is a constant (0: no payload) at each call.
 * It starts at request i0 with k0 pages taken (decode_avx512 did [0, i0)). */
static inline __attribute__((always_inline)) size_t
decode_fused(kvc_allocator *a, size_t bs, const int64_t *seq_lens, const int64_t *last_locs, kvc_req_to_token_pool *rp,
             const int32_t *req_rows, uint32_t *w, const bool has_rp, const bool has_last, const size_t stride,
             const int shift, const uint32_t *next_pages, const size_t i0, const uint64_t k0, int64_t *need_out) {
  uint8_t *const flag = has_rp ? rp->rowflag : NULL;
  int32_t *const mirror = has_rp ? rp->mirror : NULL;
  const uint64_t width = has_rp ? (uint64_t)rp->width : INT32_MAX;
  const uint32_t nrows = has_rp ? (uint32_t)rp->size : 0;
  const uint8_t *const pstate = a->state;
  const uint64_t np = (uint64_t)a->num_pages;
  const uint64_t pmask = ((uint64_t)1 << shift) - 1;
  int64_t *const b_last = a->b_last, *const b_old = a->b_pages;
  uint64_t k = k0; /* next_pages[k]: the page the next fresh request takes */
  size_t i = i0;
  for (; i < bs; i++) {
    const uint64_t p = (uint64_t)seq_lens[i] - 1; /* the new token's position */
    if (p >= width) break;                        /* seq_len in [1, width] */
    uint8_t *fl = NULL;
    int32_t *m = NULL;
    if (has_rp) {
      const int32_t row = req_rows[i];
      if ((uint32_t)row - 1 >= nrows) break; /* row in [1, size] */
      fl = flag + row;
      if ((*fl & (KVC__ROW_HELD | KVC__ROW_MARK)) != KVC__ROW_HELD) break; /* not held, or listed earlier */
      m = mirror + (size_t)row * width + p; /* the new token's entry; m[-1] is last_loc's */
    }
    /* Stores that a later failure leaves harmless (the payload and b_old are scratch
     * until the call succeeds), made early so that row and p need no register below:
     * this loop spills. */
    if (stride == 2) { /* the table offset is the mirror's: < 2^31 entries (checked) */
      w[2 * i] = has_rp ? (uint32_t)(m - mirror) : UINT32_MAX;
    } else if (stride) {
      w[stride * i] = has_rp ? (uint32_t)req_rows[i] : UINT32_MAX; /* -1: no table write */
      w[stride * i + 1] = (uint32_t)p;
    }
    if (has_rp) b_old[i] = *m;
    const bool fresh = (p & pmask) == 0;
    /* p == 0 reads m[-1], the previous row's last entry (row >= 1): unused, in bounds. */
    const uint64_t last = (uint64_t)(has_last ? last_locs[i] : m[-1]);
    /* last in [ps, (num_pages + 1) ps) iff its page is in [1, num_pages]; else page 0,
     * which is RESERVED and fails the state test (a mask, not a select between two
     * pointers: one register fewer). */
    uint64_t page = last >> shift;
    page &= -(uint64_t)(page - 1 < np);
    /* A continuing token needs last at in-page offset p - 1 and its page held: both
     * tests in one word, zero when they pass. */
    const uint64_t bad =
        ((last ^ (p - 1)) & pmask) | ((pstate[page] & (KVC__PG_STATE | KVC__PG_GFREE | KVC__PG_GSEG)) ^ KVC__PG_HELD);
    if (!fresh & (bad != 0)) break;
    /* k <= i < bs: next_pages[k] exists even when unused. */
    const uint64_t next = (uint64_t)next_pages[k] << shift;
    const int64_t slot = (int64_t)(fresh ? next : last + 1);
    k += fresh;
    b_last[i] = slot;
    if (stride) w[stride * i + (stride == 2 ? 1 : 2)] = (uint32_t)slot;
    if (has_rp) {
      *fl |= KVC__ROW_MARK;
      *m = (int32_t)slot;
    }
  }
  *need_out = (int64_t)k;
  return i;
}

#if KVC__HAVE_AVX512
/* A failed step's marks, put back: a row is marked iff requests [0, i) list it (rows
 * repeated in [i, i + 8) were marked twice; a failure path, so the re-marking is O(i)). */
static void unmark_step(uint8_t *flag, const int32_t *req_rows, size_t i) {
  for (size_t j = i; j < i + 8; j++) flag[req_rows[j]] &= (uint8_t)~KVC__ROW_MARK;
  for (size_t j = 0; j < i; j++) flag[req_rows[j]] |= KVC__ROW_MARK;
}

/* Step i's positions, rows, mirror offsets and mirror pairs (m[-1], m) for the lanes
 * whose seq_len and row are in range (the mask returned; 0 past the batch). The step is
 * read while the one before it is being done, before that one has written its mirror
 * entries: a pair that it changes is a row listed in both steps, which fails step i's
 * mark test, and decode_fused reads it again; or, at a row's last position, the next
 * row's m[-1] read for a request at position 0, which opens a page and does not use it. */
static inline __attribute__((always_inline)) KVC__TARGET_AVX512 __mmask8
decode_avx512_read(const int64_t *seq_lens, const int32_t *req_rows, const int32_t *mirror, __m512i width,
                   __m256i nrows, size_t i, size_t bs, __m512i *p, __m256i *row, __m512i *at, __m512i *pair) {
  if (i + 8 > bs) {
    *p = *at = *pair = _mm512_setzero_si512();
    *row = _mm256_setzero_si256();
    return 0;
  }
  const __m512i one = _mm512_set1_epi64(1);
  *p = _mm512_sub_epi64(_mm512_loadu_si512(seq_lens + i), one);
  *row = _mm256_loadu_si256((const __m256i *)(const void *)(req_rows + i));
  const __mmask8 in =
      _mm512_cmplt_epu64_mask(*p, width) & _mm256_cmplt_epu32_mask(_mm256_sub_epi32(*row, _mm256_set1_epi32(1)), nrows);
  /* row and width < 2^31: the 32 x 32 -> 64-bit multiply is exact. */
  *at = _mm512_add_epi64(_mm512_mul_epu32(_mm512_cvtepu32_epi64(*row), width), *p);
  /* One 8-byte gather at m - 1 (row >= 1: at - 1 >= width - 1 >= 0, in the mirror) brings
   * m[-1], the last_loc when the mirror supplies it, and m, the undo copy. */
  *pair = _mm512_mask_i64gather_epi64(_mm512_setzero_si512(), in, _mm512_sub_epi64(*at, one), mirror, 4);
  return in;
}

/* decode_fused for eight requests a step (issue 20 item 1: the scalar loop runs ~65
 * instructions a request and is bound by their throughput). A step is taken only when
 * all eight requests pass every check of decode_fused; otherwise the loop stops at the
 * step's first request, having changed nothing for it, and decode_fused goes on from
 * there request by request, so that where it stops and what it leaves are its own.
 *   - the range tests come first (unsigned compares, as in decode_fused): every later
 *     read is in bounds once they pass;
 *   - the step's reads are made one step ahead (decode_avx512_read): in the same step,
 *     the gather's L2 latency held up the step;
 *   - the row flags are tested and marked one request after another by scalar code: a
 *     row listed twice, in the step or before it, is seen marked (no conflict test);
 *   - the fresh requests take the next pages in lane order: an expanding load.
 * The page states are eight byte inserts and the mirror entries eight scalar stores: on
 * the development VM's AMD EPYC (Zen 4), a gather of the states and a scatter of the
 * entries made the step slower than the scalar loop (kvc_bench_ab, bench/RESULTS.md
 * session 11). Only rp != NULL, a payload of 2 or 3 words and a power-of-two page
 * (decode_plan_fast checks). */
static inline __attribute__((always_inline)) KVC__TARGET_AVX512 size_t
decode_avx512_body(kvc_allocator *a, size_t bs, const int64_t *seq_lens, const int64_t *last_locs,
                   kvc_req_to_token_pool *rp, const int32_t *req_rows, uint32_t *w, const bool has_last,
                   const size_t stride, const uint32_t *next_pages, int64_t *need_out) {
  uint8_t *const flag = rp->rowflag;
  int32_t *const mirror = rp->mirror;
  const uint8_t *const pstate = a->state;
  int64_t *const b_last = a->b_last, *const b_old = a->b_pages;
  const __m512i width = _mm512_set1_epi64(rp->width);
  const __m256i nrows = _mm256_set1_epi32(rp->size);
  const __m512i np = _mm512_set1_epi64(a->num_pages);
  const __m128i shift = _mm_cvtsi32_si128(a->ps_shift);
  const __m512i pmask = _mm512_set1_epi64(((int64_t)1 << a->ps_shift) - 1);
  const __m512i one = _mm512_set1_epi64(1);
  const __m128i pg_bits = _mm_set1_epi8(KVC__PG_STATE | KVC__PG_GFREE | KVC__PG_GSEG);
  const __m128i pg_held = _mm_set1_epi8(KVC__PG_HELD);
  /* Stride 3: dword t of the step's 24 is (row, position, slot)[t % 3] of request t / 3,
   * taken from [rows | positions] (0-15) and [slots] (16-23). */
  const __m512i lay0 = _mm512_setr_epi32(0, 8, 16, 1, 9, 17, 2, 10, 18, 3, 11, 19, 4, 12, 20, 5);
  const __m512i lay1 = _mm512_setr_epi32(13, 21, 6, 14, 22, 7, 15, 23, 0, 0, 0, 0, 0, 0, 0, 0);
  uint64_t k = 0;
  size_t i = 0;
  __m512i p, at, pair;
  __m256i row;
  __mmask8 in = decode_avx512_read(seq_lens, req_rows, mirror, width, nrows, 0, bs, &p, &row, &at, &pair);
  for (; i + 8 <= bs && in == 0xFF; i += 8) {
    __m512i p1, at1, pair1;
    __m256i row1;
    const __mmask8 in1 =
        decode_avx512_read(seq_lens, req_rows, mirror, width, nrows, i + 8, bs, &p1, &row1, &at1, &pair1);
    unsigned all = 0xFF, any = 0;
    for (size_t j = 0; j < 8; j++) {
      uint8_t *const f = flag + req_rows[i + j];
      const unsigned x = *f;
      *f = (uint8_t)(x | KVC__ROW_MARK);
      all &= x;
      any |= x;
    }
    const __m512i old = _mm512_srai_epi64(pair, 32);
    const __m512i last =
        has_last ? _mm512_loadu_si512(last_locs + i) : _mm512_srai_epi64(_mm512_slli_epi64(pair, 32), 32);
    const __mmask8 fresh = _mm512_testn_epi64_mask(p, pmask);
    const __m512i page = _mm512_srl_epi64(last, shift);
    __mmask8 cont = _mm512_mask_cmplt_epu64_mask((__mmask8)~fresh, _mm512_sub_epi64(page, one), np);
    cont = _mm512_mask_testn_epi64_mask(cont, _mm512_xor_si512(last, _mm512_sub_epi64(p, one)), pmask);
    /* Page 0 (RESERVED, in bounds) for the lanes that need no state: masked off below. */
    uint64_t pg[8];
    _mm512_storeu_si512(pg, _mm512_maskz_mov_epi64(cont, page));
    __m128i st = _mm_cvtsi32_si128(pstate[pg[0]]);
    st = _mm_insert_epi8(st, pstate[pg[1]], 1);
    st = _mm_insert_epi8(st, pstate[pg[2]], 2);
    st = _mm_insert_epi8(st, pstate[pg[3]], 3);
    st = _mm_insert_epi8(st, pstate[pg[4]], 4);
    st = _mm_insert_epi8(st, pstate[pg[5]], 5);
    st = _mm_insert_epi8(st, pstate[pg[6]], 6);
    st = _mm_insert_epi8(st, pstate[pg[7]], 7);
    const __mmask8 held = (__mmask8)_mm_mask_cmpeq_epi8_mask(cont, _mm_and_si128(st, pg_bits), pg_held);
    if (!(all & KVC__ROW_HELD) || (any & KVC__ROW_MARK) || (__mmask8)(fresh | held) != 0xFF) {
      unmark_step(flag, req_rows, i);
      break;
    }
    /* k + popcount(fresh) <= i + 8 <= bs: the expanding load reads only entries that
     * exist (next_pages has bs); its masked-off lanes read nothing. */
    const __m512i next = _mm512_cvtepu32_epi64(_mm256_maskz_expandloadu_epi32(fresh, next_pages + k));
    const __m512i slot = _mm512_mask_blend_epi64(fresh, _mm512_add_epi64(last, one), _mm512_sll_epi64(next, shift));
    k += (uint64_t)__builtin_popcount(fresh);
    _mm512_storeu_si512(b_last + i, slot);
    _mm512_storeu_si512(b_old + i, old);
    const __m256i slot32 = _mm512_cvtepi64_epi32(slot);
    if (stride == 2) { /* (table offset, slot): the offset in the even dwords, the slot in the odd */
      _mm512_storeu_si512(w + 2 * i, _mm512_mask_blend_epi32(0xAAAA, at, _mm512_slli_epi64(slot, 32)));
    } else {
      const __m512i rp32 = _mm512_inserti64x4(_mm512_castsi256_si512(row), _mm512_cvtepi64_epi32(p), 1);
      const __m512i s32 = _mm512_castsi256_si512(slot32);
      _mm512_storeu_si512(w + 3 * i, _mm512_permutex2var_epi32(rp32, lay0, s32));
      _mm256_storeu_si256((__m256i *)(void *)(w + 3 * i + 16),
                          _mm512_castsi512_si256(_mm512_permutex2var_epi32(rp32, lay1, s32)));
    }
    uint64_t ats[8];
    uint32_t sl[8];
    _mm512_storeu_si512(ats, at);
    _mm256_storeu_si256((__m256i *)(void *)sl, slot32);
    for (size_t j = 0; j < 8; j++) mirror[ats[j]] = (int32_t)sl[j];
    p = p1, row = row1, at = at1, pair = pair1, in = in1;
  }
  *need_out = (int64_t)k;
  return i;
}

/* One body per form (last_locs or the mirror, 2 or 3 words): the flags become constants. */
static KVC__TARGET_AVX512 size_t decode_avx512(kvc_allocator *a, size_t bs, const int64_t *seq_lens,
                                               const int64_t *last_locs, kvc_req_to_token_pool *rp,
                                               const int32_t *req_rows, uint32_t *w, size_t stride,
                                               const uint32_t *next_pages, int64_t *need_out) {
  if (!last_locs && stride == 2)
    return decode_avx512_body(a, bs, seq_lens, NULL, rp, req_rows, w, false, 2, next_pages, need_out);
  if (!last_locs) return decode_avx512_body(a, bs, seq_lens, NULL, rp, req_rows, w, false, 3, next_pages, need_out);
  if (stride == 2)
    return decode_avx512_body(a, bs, seq_lens, last_locs, rp, req_rows, w, true, 2, next_pages, need_out);
  return decode_avx512_body(a, bs, seq_lens, last_locs, rp, req_rows, w, true, 3, next_pages, need_out);
}
#endif

/* decode_plan_one_pass through decode_fused where it applies. A failure there is undone
 * and the batch re-run by decode_plan_one_pass, which then fails the same way with its
 * precise message (the fused checks are exactly its checks), or, were they ever
 * stricter, succeeds: either way the result is decode_plan_one_pass's. */
static kvc_status decode_plan_fast(kvc_allocator *a, const char *fn, size_t bs, const int64_t *seq_lens,
                                   const int64_t *last_locs, kvc_req_to_token_pool *rp, const int32_t *req_rows,
                                   uint32_t *w, size_t stride, int64_t *need_out) {
  if (a->ps_shift < 0 || (!last_locs && !rp))
    return decode_plan_one_pass(a, fn, bs, seq_lens, last_locs, rp, req_rows, w, stride, need_out);
  int64_t k = 0;
  size_t done;
  /* The next bs ring entries as one array: in place unless they wrap around the buffer
   * (then copied to tmp_a, num_pages >= ring.count >= bs entries). */
  const kvc__ring *r = &a->ring;
  const uint64_t at = r->head & r->mask;
  const uint32_t *next = r->buf + at;
  if (at + bs > r->mask + 1) {
    kvc__ring_copy(r, 0, (int64_t)bs, a->tmp_a);
    next = a->tmp_a;
  }
  /* Whole steps of eight through the vector path where the allocator took it at create;
   * decode_fused goes on from the first request it did not do (in its generic copy: the
   * specialised ones below keep i0 = k0 = 0 constant, the scalar path's code unchanged). */
  size_t i0 = 0;
#if KVC__HAVE_AVX512
  if (a->simd && rp && w && (stride == 2 || stride == 3) && bs >= 8)
    i0 = decode_avx512(a, bs, seq_lens, last_locs, rp, req_rows, w, stride, next, &k);
#endif
  /* Constant flags for an engine's step (a req pool, last_locs from its mirror, a payload
   * of 2, 3 or 4 words, page 16 or 64): fewer live values, so the loop's locals stay in
   * registers. */
  const int sh = a->ps_shift;
  if (i0) /* the vector path's last requests (fewer than 8), or the step it refused */
    done = decode_fused(a, bs, seq_lens, last_locs, rp, req_rows, w, true, last_locs != NULL, stride, sh, next, i0,
                        (uint64_t)k, &k);
  else if (rp && !last_locs && w && stride == 2 && sh == 4)
    done = decode_fused(a, bs, seq_lens, NULL, rp, req_rows, w, true, false, 2, 4, next, 0, 0, &k);
  else if (rp && !last_locs && w && stride == 2 && sh == 6)
    done = decode_fused(a, bs, seq_lens, NULL, rp, req_rows, w, true, false, 2, 6, next, 0, 0, &k);
  else if (rp && !last_locs && w && stride == 2)
    done = decode_fused(a, bs, seq_lens, NULL, rp, req_rows, w, true, false, 2, sh, next, 0, 0, &k);
  else if (rp && !last_locs && w && stride == 3 && sh == 4)
    done = decode_fused(a, bs, seq_lens, NULL, rp, req_rows, w, true, false, 3, 4, next, 0, 0, &k);
  else if (rp && !last_locs && w && stride == 3 && sh == 6)
    done = decode_fused(a, bs, seq_lens, NULL, rp, req_rows, w, true, false, 3, 6, next, 0, 0, &k);
  else if (rp && !last_locs && w && stride == 3)
    done = decode_fused(a, bs, seq_lens, NULL, rp, req_rows, w, true, false, 3, sh, next, 0, 0, &k);
  else if (rp && !last_locs && w && stride == 4)
    done = decode_fused(a, bs, seq_lens, NULL, rp, req_rows, w, true, false, 4, sh, next, 0, 0, &k);
  else
    done = decode_fused(a, bs, seq_lens, last_locs, rp, req_rows, w, rp != NULL, last_locs != NULL, w ? stride : 0, sh,
                        next, 0, 0, &k);
  if (done == bs) {
    if (rp) unmark_rows(rp, req_rows, bs);
    *need_out = k;
    return KVC_OK;
  }
  decode_undo_mirror(a, done, seq_lens, rp, req_rows);
  if (rp) unmark_rows(rp, req_rows, done);
  return decode_plan_one_pass(a, fn, bs, seq_lens, last_locs, rp, req_rows, w, stride, need_out);
}

/* Larger batches: validation first (nothing changes on failure), then SGLang's merge
 * trigger and the capacity check, then the slots. */
static kvc_status decode_plan_checked(kvc_allocator *a, const char *fn, size_t bs, const int64_t *seq_lens,
                                      const int64_t *last_locs, kvc_req_to_token_pool *rp, const int32_t *req_rows,
                                      uint32_t *w, size_t stride, int64_t *need_out) {
  const int64_t width = rp ? rp->width : INT32_MAX;
  int64_t need = 0;
  for (size_t i = 0; i < bs; i++) {
    bool fresh = false;
    int64_t last = -1;
    kvc_status st = decode_check_one(a, fn, i, seq_lens, last_locs, rp, req_rows, width, &fresh, &last);
    if (st != KVC_OK) {
      unmark_failed(rp, req_rows, i);
      return st;
    }
    a->b_last[i] = last;
    a->b_pages[i] = fresh;
    need += fresh;
  }
  if (rp) unmark_rows(rp, req_rows, bs);
  kvc__ring *r = &a->ring;
  if ((int64_t)bs > r->count) kvc__fl_merge(a);
  if (need > r->count)
    return kvc__alloc_finish(a, fn,
                             kvc__error(a->ctx, KVC_ERR_OUT_OF_SLOTS, fn, "%lld %s needed, %lld free", (long long)need,
                                        a->kind == KVC_ALLOCATOR_PAGED ? "pages" : "slots", (long long)r->count));
  for (size_t i = 0, k = 0; i < bs; i++) {
    const int64_t slot = a->b_pages[i] ? (int64_t)kvc__ring_at(r, (int64_t)k++) * a->ps : a->b_last[i] + 1;
    decode_apply_one(a, i, slot, seq_lens, rp, req_rows, w, stride);
  }
  *need_out = need;
  return KVC_OK;
}

static kvc_status decode_plan(kvc_allocator *a, const char *fn, size_t bs, const int64_t *seq_lens,
                              const int64_t *last_locs, kvc_req_to_token_pool *rp, const int32_t *req_rows,
                              uint32_t *payload, size_t stride, int64_t *need) {
  if (!seq_lens) return kvc__error(a->ctx, KVC_ERR_INVALID_ARGUMENT, fn, "seq_lens is NULL");
  KVC_FORWARD(check_common(a, fn, bs, rp, req_rows));
  if ((int64_t)bs <= a->ring.count)
    return decode_plan_fast(a, fn, bs, seq_lens, last_locs, rp, req_rows, payload, stride, need);
  return decode_plan_checked(a, fn, bs, seq_lens, last_locs, rp, req_rows, payload, stride, need);
}

kvc_status kvc__alloc_decode_plan(kvc_allocator *a, const char *fn, const kvc__decode_args *x, uint32_t *payload,
                                  size_t stride, int64_t *need) {
  /* The two-word entries' offsets are 32-bit: a table of 2^31 entries or more would
   * truncate them. The callers choose the form from the same test; this is its guard. */
  if (payload && stride == 2 && x->req_pool && !kvc__req_pool_table_len(x->req_pool))
    return kvc__error(a->ctx, KVC_ERR_INTERNAL, fn, "two-word decode payload for a table of 2^31 entries or more");
  return decode_plan(a, fn, x->bs, x->seq_lens, x->last_locs, x->req_pool, x->rows, payload, stride, need);
}

void kvc__alloc_decode_undo(kvc_allocator *a, size_t bs, const int64_t *seq_lens, kvc_req_to_token_pool *rp,
                            const int32_t *req_rows) {
  decode_undo_mirror(a, bs, seq_lens, rp, req_rows);
}

kvc_status kvc__alloc_decode_finish(kvc_allocator *a, const char *fn, size_t bs, int64_t *out_host, int64_t need) {
  if (out_host) memcpy(out_host, a->b_last, bs * sizeof(int64_t));
  kvc__fl_pop(a, need);
  return kvc__alloc_finish(a, fn, KVC_OK);
}

/* alloc_decode, optionally writing map[slot] = map_vals[i] for every new slot in the same
 * launch (the SWA allocator's full->SWA mapping). */
static kvc_status alloc_decode_impl(kvc_allocator *a, const char *fn, size_t bs, const int64_t *seq_lens,
                                    const int64_t *last_locs, kvc_req_to_token_pool *rp, const int32_t *req_rows,
                                    int64_t *out_host, int64_t *out_device, int64_t *map, int64_t map_len,
                                    const int64_t *map_vals, const kvc__decode_map *mz, kvc_stream stream) {
  kvc_context *ctx = a->ctx;
  int64_t need = 0;
  if (!rp && !out_device && !map) {
    KVC_FORWARD(decode_plan(a, fn, bs, seq_lens, last_locs, rp, req_rows, NULL, 3, &need));
    return kvc__alloc_decode_finish(a, fn, bs, out_host, need);
  }
  /* Two words per request where the table's offsets fit (8 KB at batch 1024: the 8 KB
   * parameter block instead of the 16 KB one). The mapped form keeps (row, position,
   * slot, value): three words would still need the 16 KB block at batch 1024. */
  const int32_t table_len = map ? 0 : kvc__req_pool_table_len(rp);
  const size_t stride = map ? 4 : table_len ? 2 : 3;
  /* Carried zeroes (the caller checked kvc__alloc_decode_can_carry): after the entries,
   * the page size, then the runs minus the step's new pages (count, pairs), whose unused
   * slots the kernel zeroes itself. The new pages are the ring's first `need`. */
  const bool carry = mz && mz->zero_count;
  const size_t zc = carry ? zero_runs_minus_new(a, mz->zero, mz->zero_count, mz->zero_pages, mz->need, NULL) : 0;
  if (!a->k_decode[0]) KVC_FORWARD(kvc__plan_prefetch(ctx, &kvc__k_plan_decode, NULL, a->k_decode));
  kvc__plan plan;
  KVC_FORWARD(kvc__plan_begin_mapped(ctx, &plan, a->scratch, sizeof(kvc_p_plan_decode),
                                     stride * bs + (carry ? 2 + 2 * zc : 0)));
  kvc_status st = decode_plan(a, fn, bs, seq_lens, last_locs, rp, req_rows, plan.payload, stride, &need);
  if (st == KVC_OK && carry && need != mz->need) {
    kvc__alloc_decode_undo(a, bs, seq_lens, rp, req_rows);
    st = kvc__error(ctx, KVC_ERR_INTERNAL, fn, "the step takes %lld new pages, its caller counted %lld",
                    (long long)need, (long long)mz->need);
  }
  if (st != KVC_OK) {
    kvc__plan_cancel(ctx, &plan);
    return st;
  }
  if (map)
    for (size_t i = 0; i < bs; i++) plan.payload[4 * i + 3] = (uint32_t)map_vals[i];
  if (carry) {
    plan.payload[stride * bs] = (uint32_t)a->ps;
    plan.payload[stride * bs + 1] = (uint32_t)zc;
    zero_runs_minus_new(a, mz->zero, mz->zero_count, mz->zero_pages, need, plan.payload + stride * bs + 2);
  }
  kvc_p_plan_decode h;
  memset(&h, 0, sizeof h);
  h.table = rp ? (uint64_t)(uintptr_t)rp->table : 0;
  h.out = (uint64_t)(uintptr_t)out_device;
  h.staged = plan.staged_dev;
  h.row_stride = rp ? rp->width : 0;
  h.map = (uint64_t)(uintptr_t)map;
  h.map_len = (int32_t)map_len;
  h.zero_at = carry ? (int32_t)(stride * bs + 1) : 0; /* > 0: bs > 0 */
  h.n = (int32_t)bs;
  h.table_len = table_len;
  /* Blocks past the requests zero the carried runs: 8 runs per block (32 threads each). */
  const unsigned zblocks = zc ? (unsigned)KVC__MIN((zc + 7) / 8, (size_t)4096) : 0u;
  st = kvc__plan_launch(ctx, &plan, &kvc__k_plan_decode, NULL, a->k_decode,
                        kvc__dim((unsigned)((bs + 255) / 256) + zblocks, 1, 1), kvc__dim(256, 1, 1), stream, &h);
  if (st != KVC_OK) {
    kvc__alloc_decode_undo(a, bs, seq_lens, rp, req_rows);
    return st;
  }
  if (carry) *mz->zero_merged = true;
  return kvc__alloc_decode_finish(a, fn, bs, out_host, need);
}

kvc_status kvc_allocator_alloc_decode(kvc_allocator *a, size_t bs, const int64_t *seq_lens, const int64_t *last_locs,
                                      kvc_req_to_token_pool *rp, const int32_t *req_rows, int64_t *out_host,
                                      int64_t *out_device, kvc_stream stream) {
  KVC_API_ENTRY();
  ALLOC_ENTRY(a);
  if (bs == 0) return KVC_OK;
  return alloc_decode_impl(a, __func__, bs, seq_lens, last_locs, rp, req_rows, out_host, out_device, NULL, 0, NULL,
                           NULL, stream);
}

kvc_status kvc__alloc_decode_mapped(kvc_allocator *a, const char *fn, const kvc__decode_args *x,
                                    const kvc__decode_map *m) {
  if (x->bs == 0) return KVC_OK;
  return alloc_decode_impl(a, fn, x->bs, x->seq_lens, x->last_locs, x->req_pool, x->rows, x->out_host, x->out_device,
                           m->map, m->map_len, m->vals, m, x->stream);
}
