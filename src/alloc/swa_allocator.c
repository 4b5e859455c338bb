/*
 * swa_allocator.c — SGLang's SWATokenToKVPoolAllocator (spec 7) by composition: two
 * kvc_allocator objects and the full->SWA mapping (layout in swa.h). This file: create /
 * destroy, queries, work space, alloc(n), groups, clear and the audit; the batch
 * allocations are in swa_batch.c, the frees in swa_free.c.
 *
 * Every call validates first (ranges, held slots, peers, capacity of BOTH sides), then
 * applies. Allocation order: the SWA side (host only) is taken first under a backup,
 * then the full side; a later failure restores both with the allocators' O(1)
 * backup/restore, so the free lists end exactly as before.
 */
#include "swa.h"
#include "slot_allocator.h"

#include <stdio.h>
#include <string.h>

/* --- Create / destroy --------------------------------------------------------------- */

void kvc_swa_allocator_destroy(kvc_swa_allocator *a) {
  if (!a || a->magic != KVC__SWA_MAGIC) return;
  kvc_context *ctx = a->ctx;
  kvc_allocator_destroy(a->full);
  if (a->swa != a->full) kvc_allocator_destroy(a->swa);
  kvc__dev_free(ctx, a->dmap);
  kvc__free(ctx, a->map);
  kvc__free(ctx, a->f_buf);
  kvc__free(ctx, a->w_buf);
  kvc__free(ctx, a->words);
  kvc__free(ctx, a->lastw);
  kvc__free(ctx, a->fmark);
  kvc__free(ctx, a->smark);
  kvc__free(ctx, a->pages);
  kvc__free(ctx, a->rel);
  kvc__free(ctx, a->scratch);
  kvc__free(ctx, a->obs_peers);
  kvc__free(ctx, a->pz);
  kvc__free(ctx, a->pz_page);
  a->magic = KVC__DEAD_MAGIC;
  kvc__free(ctx, a);
}

kvc_status kvc_swa_allocator_create(kvc_context *ctx, const kvc_swa_allocator_config *config, kvc_swa_allocator **out) {
  KVC_API_ENTRY();
  kvc_swa_allocator_config c = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  KVC__CREATE_CONFIG(ctx, config, out, &c, kvc_swa_allocator_config);
  const bool pure = (c.flags & KVC_SWA_PURE) != 0, ring = c.ring_size > 0;
  const int64_t ps = c.page_size;
  KVC_RETURN_IF(c.flags & ~(KVC_SWA_NEED_SORT | KVC_SWA_PURE), ctx, KVC_ERR_INVALID_ARGUMENT, "unknown flags 0x%x",
                c.flags);
  KVC_RETURN_IF(ps < 1, ctx, KVC_ERR_INVALID_ARGUMENT, "page_size %lld < 1", (long long)ps);
  KVC_RETURN_IF(pure && ps != 1, ctx, KVC_ERR_INVALID_ARGUMENT, "KVC_SWA_PURE needs page_size 1");
  KVC_RETURN_IF(pure && ring, ctx, KVC_ERR_INVALID_ARGUMENT, "KVC_SWA_PURE and ring_size are exclusive");
  KVC_RETURN_IF(c.ring_size < 0, ctx, KVC_ERR_INVALID_ARGUMENT, "ring_size %d < 0", c.ring_size);
  KVC_RETURN_IF(ring && !c.req_pool, ctx, KVC_ERR_INVALID_ARGUMENT, "ring mode needs req_pool");
  if (pure) c.size_full = c.size_swa;
  KVC_RETURN_IF(c.size_full < ps || (!ring && c.size_swa < ps), ctx, KVC_ERR_INVALID_ARGUMENT,
                "size_full %lld / size_swa %lld must be >= page_size %lld", (long long)c.size_full,
                (long long)c.size_swa, (long long)ps);
  /* ps <= INT32_MAX, so the limit is computed without overflow; the sizes are never added. */
  const int64_t size_limit = (int64_t)INT32_MAX - ps - 1;
  KVC_RETURN_IF(c.size_full >= size_limit || (!ring && c.size_swa >= size_limit), ctx, KVC_ERR_INVALID_ARGUMENT,
                "size_full %lld / size_swa %lld + page_size must stay below 2^31", (long long)c.size_full,
                (long long)c.size_swa);

  kvc_status st = KVC_OK;
  kvc_swa_allocator *a = kvc__calloc(ctx, 1, sizeof *a);
  KVC_RETURN_IF(!a, ctx, KVC_ERR_HOST_OOM, "allocator struct");
  a->magic = KVC__SWA_MAGIC;
  a->ctx = ctx;
  a->ps = (int32_t)ps;
  a->pure = pure;
  a->ring = ring;
  a->req_pool = c.req_pool;
  a->size_full = c.size_full;
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = ps == 1 ? KVC_ALLOCATOR_TOKEN : KVC_ALLOCATOR_PAGED;
  ac.page_size = (int32_t)ps;
  ac.flags = (c.flags & KVC_SWA_NEED_SORT) ? KVC_ALLOCATOR_NEED_SORT : 0u;
  ac.size = c.size_full;
  KVC_CHECK_GOTO(kvc_allocator_create(ctx, &ac, &a->full), st, fail);
  if (pure) {
    a->swa = a->full;
    a->size_swa = c.size_swa;
  } else if (ring) {
    a->ring_cost = kvc__swa_cdiv(c.ring_size, ps) * ps;
    a->size_swa = (int64_t)kvc_req_to_token_pool_available(c.req_pool) * a->ring_cost;
  } else {
    ac.size = c.size_swa;
    KVC_CHECK_GOTO(kvc_allocator_create(ctx, &ac, &a->swa), st, fail);
    a->size_swa = c.size_swa;
  }
  a->map_len = c.size_full + ps + 1;
  const int64_t fpages = c.size_full / ps + 1, spages = (ring ? 0 : c.size_swa / ps) + 1;
  a->map = kvc__calloc(ctx, (size_t)a->map_len, sizeof *a->map);
  a->fmark = kvc__calloc(ctx, (size_t)fpages, 1);
  a->smark = kvc__calloc(ctx, (size_t)spages, 1);
  a->pages = kvc__malloc(ctx, (size_t)fpages * sizeof *a->pages);
  a->scratch = kvc__malloc(ctx, KVC__PARAM_SCRATCH_BYTES);
  a->pz_page = kvc__calloc(ctx, (size_t)fpages + 1, 1); /* + 1: the map's last page may be partial */
  KVC_FAIL_GOTO(!a->map || !a->fmark || !a->smark || !a->pages || !a->scratch || !a->pz_page, ctx, st, KVC_ERR_HOST_OOM,
                fail, "mapping / work space");
  if (pure)
    for (int64_t i = 0; i < a->map_len - 1; i++) a->map[i] = (int32_t)i;
  a->map[a->map_len - 1] = -1;
  KVC_CHECK_GOTO(kvc__dev_alloc(ctx, (size_t)a->map_len * 8, (void **)&a->dmap), st, fail);
  {
    int64_t *tmp = kvc__malloc(ctx, (size_t)a->map_len * 8);
    KVC_FAIL_GOTO(!tmp, ctx, st, KVC_ERR_HOST_OOM, fail, "mapping upload buffer");
    for (int64_t i = 0; i < a->map_len; i++) tmp[i] = a->map[i];
    st = kvc__dev_h2d(ctx, a->dmap, tmp, (size_t)a->map_len * 8, NULL);
    if (st == KVC_OK) st = kvc__dev_sync(ctx, NULL);
    kvc__free(ctx, tmp);
    if (st != KVC_OK) goto fail;
  }
  *out = a;
  return KVC_OK;
fail:
  kvc_swa_allocator_destroy(a);
  return st;
}

/* --- Queries ------------------------------------------------------------------------ */

static bool live(const kvc_swa_allocator *a) { return a && a->magic == KVC__SWA_MAGIC; }
bool kvc__swa_allocator_live(const kvc_swa_allocator *a) { return live(a); }

const kvc_allocator *kvc_swa_allocator_full(const kvc_swa_allocator *a) { return live(a) ? a->full : NULL; }
const kvc_allocator *kvc_swa_allocator_swa(const kvc_swa_allocator *a) { return live(a) ? a->swa : NULL; }

int64_t kvc_swa_allocator_full_available_size(const kvc_swa_allocator *a) {
  return live(a) ? kvc_allocator_available_size(a->full) : -1;
}
int64_t kvc_swa_allocator_swa_available_size(const kvc_swa_allocator *a) {
  if (!live(a)) return -1;
  if (a->ring) return (int64_t)kvc_req_to_token_pool_available(a->req_pool) * a->ring_cost;
  return kvc_allocator_available_size(a->swa);
}
int64_t kvc_swa_allocator_available_size(const kvc_swa_allocator *a) {
  if (!live(a)) return -1;
  const int64_t f = kvc_allocator_available_size(a->full);
  return a->ring ? f : KVC__MIN(f, kvc_allocator_available_size(a->swa));
}
int64_t kvc_swa_allocator_size(const kvc_swa_allocator *a) {
  return live(a) ? KVC__MIN(a->size_full, a->size_swa) : -1;
}
int64_t kvc_swa_allocator_size_full(const kvc_swa_allocator *a) { return live(a) ? a->size_full : -1; }
int64_t kvc_swa_allocator_size_swa(const kvc_swa_allocator *a) { return live(a) ? a->size_swa : -1; }
int32_t kvc_swa_allocator_page_size(const kvc_swa_allocator *a) { return live(a) ? a->ps : -1; }

int kvc_swa_allocator_new_pages_available(const kvc_swa_allocator *a, int64_t nf, int64_t ns) {
  if (!live(a)) return 0;
  return nf <= kvc__swa_full_free(a) && (a->ring || ns <= kvc__swa_swa_free(a));
}

const int64_t *kvc_swa_allocator_mapping_device(const kvc_swa_allocator *a) { return live(a) ? a->dmap : NULL; }
const int32_t *kvc_swa_allocator_mapping_host(const kvc_swa_allocator *a) { return live(a) ? a->map : NULL; }
int64_t kvc_swa_allocator_mapping_length(const kvc_swa_allocator *a) { return live(a) ? a->map_len : 0; }

kvc_status kvc_swa_allocator_translate_host(const kvc_swa_allocator *a, const int64_t *full, size_t n, int64_t *out) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  if (!n) return KVC_OK;
  KVC_RETURN_IF(!full || !out, a->ctx, KVC_ERR_INVALID_ARGUMENT, "full and out must be non-NULL");
  for (size_t i = 0; i < n; i++)
    KVC_RETURN_IF(full[i] < -1 || full[i] >= a->map_len - 1, a->ctx, KVC_ERR_INVALID_ARGUMENT,
                  "full[%zu] = %lld is outside [-1, %lld)", i, (long long)full[i], (long long)(a->map_len - 1));
  for (size_t i = 0; i < n; i++) out[i] = full[i] < 0 ? -1 : a->map[full[i]];
  return KVC_OK;
}

kvc_status kvc_swa_allocator_translate(const kvc_swa_allocator *ac, const void *loc, kvc_index_type loc_type, void *out,
                                       kvc_index_type out_type, size_t n, kvc_stream stream) {
  KVC_API_ENTRY();
  SWA_ENTRY(ac);
  kvc_swa_allocator *a = (kvc_swa_allocator *)ac; /* memoised kernel lookup only */
  KVC_CHECK_INDEX_TYPE(a->ctx, loc_type);
  KVC_CHECK_INDEX_TYPE(a->ctx, out_type);
  if (!n) return KVC_OK;
  KVC_RETURN_IF(!loc || !out, a->ctx, KVC_ERR_INVALID_ARGUMENT, "loc and out must be non-NULL");
  KVC_FORWARD(kvc__swa_zero_settle(a, __func__, stream)); /* a freed slot reads 0, as on the host */
  const kvc__swa_gather_args g = kvc__swa_translate_args(a->dmap, a->map_len, loc, loc_type, out, out_type, n);
  return kvc__swa_gather(a->ctx, &a->k_gather, &g, stream);
}

/* --- Work space --------------------------------------------------------------------- */

kvc_status kvc__swa_ensure_tok(kvc_swa_allocator *a, const char *fn, size_t n) {
  if (n <= a->cap_tok) return KVC_OK;
  /* Three buffers of 8, 8 and 12 bytes per token: n stays far below SIZE_MAX / 16. */
  KVC_RETURN_IF(n > (size_t)PTRDIFF_MAX / 16, a->ctx, KVC_ERR_INVALID_ARGUMENT, "%zu tokens is too large", n);
  size_t cap = KVC__MAX(n, KVC__MIN(2 * a->cap_tok, (size_t)PTRDIFF_MAX / 16));
  cap = KVC__MAX(cap, (size_t)1024);
  int64_t *f = kvc__malloc(a->ctx, cap * 8), *w = kvc__malloc(a->ctx, cap * 8);
  uint32_t *words = kvc__malloc(a->ctx, (3 * cap + 16) * 4);
  if (!f || !w || !words) {
    kvc__free(a->ctx, f), kvc__free(a->ctx, w), kvc__free(a->ctx, words);
    return kvc__error(a->ctx, KVC_ERR_HOST_OOM, fn, "work space for %zu tokens", n);
  }
  kvc__free(a->ctx, a->f_buf), kvc__free(a->ctx, a->w_buf), kvc__free(a->ctx, a->words);
  a->f_buf = f, a->w_buf = w, a->words = words, a->cap_tok = cap;
  return KVC_OK;
}

kvc_status kvc__swa_ensure_bs(kvc_swa_allocator *a, const char *fn, size_t n) {
  if (n <= a->cap_bs) return KVC_OK;
  size_t cap = KVC__MAX(n, 2 * a->cap_bs);
  cap = KVC__MAX(cap, (size_t)256);
  int64_t *l = kvc__malloc(a->ctx, cap * 8);
  if (!l) return kvc__error(a->ctx, KVC_ERR_HOST_OOM, fn, "work space for %zu requests", n);
  kvc__free(a->ctx, a->lastw);
  a->lastw = l, a->cap_bs = cap;
  return KVC_OK;
}

/* Writes the new pairs mapping[f[i]] = w[i] to the device (one launch, which also carries
 * the queued zeroes unless a new slot lies on a queued page), then the host. */
kvc_status kvc__swa_map_set(kvc_swa_allocator *a, const int64_t *f, const int64_t *w, size_t n, kvc_stream stream) {
  if (!n) return KVC_OK;
  /* An overlap would race a zero against a pair: the queue goes first, alone (rare). */
  if (kvc__swa_zero_overlaps(a, f, n)) KVC_FORWARD(kvc__swa_zero_flush(a, "kvc_swa_allocator", stream));
  const kvc__swa_map_dst d = kvc__swa_dmap_dst(a);
  kvc__swa_map_items items = kvc__swa_build_pairs(f, w, n, a->words);
  items.zero = a->pz;
  items.zero_count = a->pz_items;
  KVC_FORWARD(kvc__swa_map_write(a->ctx, &d, &items, stream));
  kvc__swa_zero_done(a);
  for (size_t i = 0; i < n; i++) a->map[f[i]] = (int32_t)w[i];
  return KVC_OK;
}

/* --- Deferred device-map zeroes ------------------------------------------------------
 *
 * Why: a free zeroes its slots' device-map entries with one launch, and an eviction frees
 * victim by victim, so a call evicting k victims made k launches (a few us of host time
 * each on a GPU, more than the rest of the call). Inside a scope the frees do everything
 * else as before (same validation, same order, the host map zeroed, both free lists
 * released) and queue their zeroed runs; the scope's end launches them all at once.
 *
 * Safe because the queued entries are those of freed full slots, which nothing reads
 * (no live row holds them), and because nothing writes the device map after a queued
 * zero: every device-map write (alloc, alloc_extend, alloc_decode, the decode channel's
 * plan) and translate settle the queue first, so the zero of a slot always lands before
 * the pair of its next allocation, on the stream of that call.
 *
 * The failure rule: queueing cannot fail (a queue that cannot grow makes that free
 * launch its zero at once, after the queued ones, as outside a scope: a launch failure
 * there refuses that free, changing nothing, as always). The end's launch is the only
 * step that can fail once frees are done; then the frees stay done (the host state is
 * final and correct), the runs stay queued, and the next device-map write or end retries
 * them first (and fails, changing nothing, if the launch fails again). The status says
 * so in kvc_last_error(). */

void kvc__swa_zero_done(kvc_swa_allocator *a) {
  const int64_t ps = a->ps;
  for (size_t i = 0; i < a->pz_items; i++) {
    const int64_t lo = a->pz[2 * i] / ps, hi = ((int64_t)a->pz[2 * i] + a->pz[2 * i + 1] + ps - 1) / ps;
    memset(a->pz_page + lo, 0, (size_t)(hi - lo));
  }
  a->pz_items = 0;
}

bool kvc__swa_zero_overlaps(const kvc_swa_allocator *a, const int64_t *f, size_t n) {
  if (!a->pz_items) return false;
  const int64_t ps = a->ps;
  uint8_t hit = 0; /* no early exit: a branch-free OR over a new batch's few pages */
  if (ps == 1)
    for (size_t i = 0; i < n; i++) hit |= a->pz_page[f[i]];
  else
    for (size_t i = 0; i < n; i++) hit |= a->pz_page[f[i] / ps];
  return hit != 0;
}

void kvc__swa_defer_zero_leave(kvc_swa_allocator *a) {
  if (a->defer) a->defer--;
}

kvc_status kvc__swa_zero_flush(kvc_swa_allocator *a, const char *fn, kvc_stream stream) {
  if (!a->pz_items) return KVC_OK;
  const kvc__swa_map_dst d = kvc__swa_dmap_dst(a);
  const kvc__swa_map_items zero = {a->pz, 2 * a->pz_items, (int64_t)a->pz_items, KVC_SWA_MAP_ZERO, NULL, 0};
  const kvc_status st = kvc__swa_map_write(a->ctx, &d, &zero, stream);
  if (st == KVC_OK) {
    kvc__swa_zero_done(a);
    return KVC_OK;
  }
  char why[192]; /* the launcher's message, before this one replaces it */
  snprintf(why, sizeof why, "%s", kvc_last_error(a->ctx));
  return kvc__error(a->ctx, st, fn,
                    "the device mapping's deferred zero of %zu runs (freed slots) was not launched: %s; the frees "
                    "are done, the zero stays queued for the next device-map write or defer_zero_end",
                    a->pz_items, why);
}

/* Room for `more` queued runs; false (nothing changed, no error recorded) when the queue
 * cannot grow: the caller then launches instead of queueing. */
static bool pz_reserve(kvc_swa_allocator *a, size_t more) {
  if (more > SIZE_MAX / 16 - a->pz_items) return false;
  const size_t need = a->pz_items + more; /* below SIZE_MAX / 16: the bytes below cannot overflow */
  if (need <= a->pz_cap) return true;
  size_t cap = KVC__MAX(need, (size_t)256);
  if (a->pz_cap <= SIZE_MAX / 32) cap = KVC__MAX(cap, 2 * a->pz_cap);
  cap = KVC__MIN(cap, SIZE_MAX / 16);
  uint32_t *p = kvc__malloc(a->ctx, cap * 2 * sizeof *p);
  if (!p) return false;
  if (a->pz_items) memcpy(p, a->pz, a->pz_items * 2 * sizeof *p);
  kvc__free(a->ctx, a->pz);
  a->pz = p;
  a->pz_cap = cap;
  return true;
}

kvc_status kvc__swa_zero_runs(kvc_swa_allocator *a, const char *fn, const uint32_t *runs, size_t items,
                              kvc_stream stream) {
  if (!items) return KVC_OK;
  /* A queue that cannot grow is no failure of the free: it launches as outside a scope. */
  if (!a->defer || !pz_reserve(a, items)) {
    KVC_FORWARD(kvc__swa_zero_settle(a, fn, stream)); /* queued ones first: in launch order */
    const kvc__swa_map_dst d = kvc__swa_dmap_dst(a);
    const kvc__swa_map_items zero = {runs, 2 * items, (int64_t)items, KVC_SWA_MAP_ZERO, NULL, 0};
    return kvc__swa_map_write(a->ctx, &d, &zero, stream);
  }
  const int64_t ps = a->ps;
  for (size_t r = 0; r < items; r++) /* runs are whole pages (swa_free.c) */
    memset(a->pz_page + runs[2 * r] / ps, 1, (size_t)((runs[2 * r + 1] + ps - 1) / ps));
  size_t k = a->pz_items, i = 0;
  /* Consecutive victims are often neighbours: their runs join (fewer items to launch). */
  if (k && a->pz[2 * k - 2] + a->pz[2 * k - 1] == runs[0]) a->pz[2 * k - 1] += runs[1], i = 1;
  memcpy(a->pz + 2 * k, runs + 2 * i, (items - i) * 2 * sizeof *runs);
  a->pz_items = k + items - i;
  return KVC_OK;
}

kvc_status kvc_swa_allocator_defer_zero_begin(kvc_swa_allocator *a) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  KVC_RETURN_IF(a->defer == UINT32_MAX, a->ctx, KVC_ERR_MISUSE, "deferred-zero scopes nested %u deep", a->defer);
  a->defer++;
  return KVC_OK;
}

kvc_status kvc_swa_allocator_defer_zero_end(kvc_swa_allocator *a, kvc_stream stream) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  KVC_RETURN_IF(!a->defer, a->ctx, KVC_ERR_MISUSE, "no deferred-zero scope is open");
  if (--a->defer) return KVC_OK; /* an inner scope: the outermost end launches */
  return kvc__swa_zero_flush(a, __func__, stream);
}

int64_t kvc_swa_allocator_zero_pending(const kvc_swa_allocator *a) { return live(a) ? (int64_t)a->pz_items : -1; }

kvc_status kvc_swa_allocator_zero_flush(kvc_swa_allocator *a, kvc_stream stream) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  return kvc__swa_zero_flush(a, __func__, stream);
}

/* Out device vector: out_device[i] = f[i] (one launch). */
kvc_status kvc__swa_write_out(kvc_swa_allocator *a, int64_t *out_device, const int64_t *f, size_t n,
                              kvc_stream stream) {
  if (!out_device || !n) return KVC_OK;
  const kvc__swa_map_dst d = {a->scratch, a->k_map, out_device, (int64_t)n, 1};
  const kvc__swa_map_items items = kvc__swa_build_pairs(NULL, f, n, a->words);
  return kvc__swa_map_write(a->ctx, &d, &items, stream);
}

/* --- alloc(n) ---------------------------------------------------------------------- */

kvc_status kvc_swa_allocator_alloc(kvc_swa_allocator *a, int64_t n, int64_t *out_host, int64_t *out_device,
                                   kvc_stream stream) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  kvc_context *ctx = a->ctx;
  KVC_RETURN_IF(a->ps != 1, ctx, KVC_ERR_UNSUPPORTED, "alloc(n) needs page_size 1 (use alloc_extend)");
  KVC_RETURN_IF(n < 0, ctx, KVC_ERR_INVALID_ARGUMENT, "n = %lld < 0", (long long)n);
  if (n == 0) return KVC_OK;
  KVC_RETURN_IF(n > kvc__swa_full_free(a) || (!a->pure && n > kvc__swa_swa_free(a)), ctx, KVC_ERR_OUT_OF_SLOTS,
                "%lld slots needed; %lld full and %lld SWA free", (long long)n, (long long)kvc__swa_full_free(a),
                (long long)(a->ring ? -1 : kvc__swa_swa_free(a)));
  KVC_FORWARD(kvc__swa_ensure_tok(a, __func__, (size_t)n));
  kvc_status st;
  kvc_allocator_state bf, bs;
  if (a->pure || a->ring) {
    KVC_FORWARD(kvc_allocator_backup_state(a->full, &bf));
    KVC_FORWARD(kvc_allocator_alloc(a->full, n, a->f_buf));
    st = kvc__swa_write_out(a, out_device, a->f_buf, (size_t)n, stream);
    if (st != KVC_OK) {
      kvc_allocator_restore_state(a->full, &bf);
      return st;
    }
  } else {
    KVC_FORWARD(kvc_allocator_backup_state(a->swa, &bs));
    KVC_FORWARD(kvc_allocator_alloc(a->swa, n, a->w_buf));
    kvc_allocator_backup_state(a->full, &bf);
    st = kvc_allocator_alloc(a->full, n, a->f_buf);
    if (st == KVC_OK) st = kvc__swa_write_out(a, out_device, a->f_buf, (size_t)n, stream);
    if (st == KVC_OK) st = kvc__swa_map_set(a, a->f_buf, a->w_buf, (size_t)n, stream);
    if (st != KVC_OK) {
      kvc_allocator_restore_state(a->full, &bf);
      kvc_allocator_restore_state(a->swa, &bs);
      return st;
    }
  }
  if (out_host) memcpy(out_host, a->f_buf, (size_t)n * 8);
  return kvc__swa_finish(a, KVC_OK);
}

kvc_status kvc_swa_allocator_free_group_begin(kvc_swa_allocator *a) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  KVC_RETURN_IF(a->in_group, a->ctx, KVC_ERR_MISUSE, "a free group is already open (groups do not nest)");
  KVC_FORWARD(kvc_allocator_free_group_begin(a->full));
  if (kvc__swa_has_side(a)) {
    kvc_status st = kvc_allocator_free_group_begin(a->swa);
    if (st != KVC_OK) {
      kvc_allocator_free_group_end(a->full);
      return st;
    }
  }
  a->in_group = true;
  return KVC_OK;
}

kvc_status kvc_swa_allocator_free_group_end(kvc_swa_allocator *a) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  KVC_RETURN_IF(!a->in_group, a->ctx, KVC_ERR_MISUSE, "no free group is open");
  a->in_group = false;
  kvc_status st = KVC_OK;
  if (kvc__swa_has_side(a)) st = kvc_allocator_free_group_end(a->swa); /* SWA releases first (7.8) */
  KVC_CLEANUP_KEEP_FIRST(kvc_allocator_free_group_end(a->full), st);
  return kvc__swa_finish(a, st);
}

kvc_status kvc_swa_allocator_clear(kvc_swa_allocator *a, kvc_stream stream) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  if (!a->pure) KVC_FORWARD(kvc__dev_memset(a->ctx, a->dmap, 0, (size_t)(a->map_len - 1) * 8, stream));
  kvc_status st = kvc_allocator_clear(a->full);
  if (kvc__swa_has_side(a)) KVC_CLEANUP_KEEP_FIRST(kvc_allocator_clear(a->swa), st);
  if (!a->pure) memset(a->map, 0, (size_t)(a->map_len - 1) * sizeof *a->map);
  kvc__swa_zero_done(a); /* the device memset zeroed every queued entry too */
  a->in_group = false;
  return kvc__swa_finish(a, st);
}

kvc_status kvc_swa_allocator_check(const kvc_swa_allocator *a) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  KVC_FORWARD(kvc_allocator_check(a->full));
  if (kvc__swa_has_side(a)) KVC_FORWARD(kvc_allocator_check(a->swa));
  KVC_RETURN_IF(a->map[a->map_len - 1] != -1, a->ctx, KVC_ERR_INTERNAL, "mapping's last entry is %d, not -1",
                a->map[a->map_len - 1]);
  if (a->pure || a->ring) return KVC_OK;
  const int64_t ps = a->ps;
  /* The queue (device entries not zeroed yet): host entries already 0, pages marked. */
  for (size_t i = 0; i < a->pz_items; i++) {
    const int64_t lo = a->pz[2 * i], len = a->pz[2 * i + 1];
    KVC_RETURN_IF(lo < 0 || len < 1 || lo + len > a->map_len - 1, a->ctx, KVC_ERR_INTERNAL,
                  "queued zero %zu [%lld, +%lld) is outside the mapping", i, (long long)lo, (long long)len);
    for (int64_t f = lo; f < lo + len; f++)
      KVC_RETURN_IF(a->map[f] != 0 || !a->pz_page[f / ps], a->ctx, KVC_ERR_INTERNAL,
                    "queued zero of full slot %lld: host mapping %d, page mark %d", (long long)f, a->map[f],
                    a->pz_page[f / ps]);
  }
  uint8_t *seen = kvc__calloc(a->ctx, (size_t)(a->size_swa + ps + 1), 1);
  KVC_RETURN_IF(!seen, a->ctx, KVC_ERR_HOST_OOM, "audit bitmap");
  kvc_status st = KVC_OK;
  for (int64_t f = 0; f < a->map_len - 1 && st == KVC_OK; f++) {
    const int32_t w = a->map[f];
    if (w == 0) continue;
    if (w < 0 || w >= (kvc__alloc_num_pages(a->swa) + 1) * ps)
      st = kvc__error(a->ctx, KVC_ERR_INTERNAL, __func__, "mapping[%lld] = %d is out of range", (long long)f, w);
    else if (!kvc__alloc_page_held(a->full, f / ps))
      st = kvc__error(a->ctx, KVC_ERR_INTERNAL, __func__, "mapping[%lld] = %d but full slot %lld is not held",
                      (long long)f, w, (long long)f);
    else if (!kvc__alloc_page_held(a->swa, w / ps))
      st = kvc__error(a->ctx, KVC_ERR_INTERNAL, __func__, "mapping[%lld] = %d but that SWA slot is not held",
                      (long long)f, w);
    else if (seen[w]) st = kvc__error(a->ctx, KVC_ERR_INTERNAL, __func__, "SWA slot %d is mapped twice", w);
    else seen[w] = 1;
  }
  kvc__free(a->ctx, seen);
  return st;
}
