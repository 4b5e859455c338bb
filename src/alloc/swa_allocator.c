/*
 * swa_allocator.c — SGLang's SWATokenToKVPoolAllocator (spec 7) by composition: two
 * kvc_allocator objects and the full->SWA mapping.
 *
 *   host map (int32, authoritative)       device map (int64, for attention kernels)
 *   [ 0 | w1 | w2 | 0 | ... | w_f | -1 ]   same layout, written by ONE launch per call:
 *     index = full slot, value = SWA slot    alloc: (f, w) pairs or coalesced runs
 *     0 = no peer, last entry = -1           free:  zeroed runs of whole pages
 *
 * Every call validates first (ranges, held slots, peers, capacity of BOTH sides), then
 * applies. Allocation order: the SWA side (host only) is taken first under a backup,
 * then the full side (which writes out_cache_loc and req_to_token in its own launch);
 * a later failure restores both with the allocators' O(1) backup/restore, so the free
 * lists end exactly as before. The ids are the same as SGLang's: the two sides are
 * independent free lists fed with the same lengths.
 * Free: the device zero launch goes first (it is the only step that can fail after
 * validation), then the host frees, SWA side before the full side (spec 7.8).
 * Sub-allocator page states (pool.h) are read to validate frees up front.
 */
#include "swa.h"

#include <string.h>

#define KVC__SWA_MAGIC 0x6b76632d73776121ull /* "kvc-swa!" */

struct kvc_swa_allocator {
  uint64_t magic;
  kvc_context *ctx;
  int32_t ps;
  bool pure, ring, in_group;
  int64_t size_full, size_swa, ring_cost;
  kvc_allocator *full, *swa; /* pure: swa == full; ring: swa == NULL */
  kvc_req_to_token_pool *req_pool;
  int64_t map_len;
  int32_t *map;  /* host, map_len */
  int64_t *dmap; /* device, map_len */
  /* work space */
  size_t cap_tok;
  int64_t *f_buf, *w_buf;
  uint32_t *words;
  size_t cap_bs;
  int64_t *lastw;
  uint8_t *fmark, *smark; /* per page of each side: dedup within one call */
  int64_t *pages;         /* touched full pages (num full pages) */
  unsigned char *scratch;
  const kvc__kfunc *k_map[KVC__PLAN_INLINE_VARIANTS], *k_gather;
};

#define SWA_ENTRY(a) KVC_CHECK_HANDLE(a, KVC__SWA_MAGIC, "alloc", "kvc_swa_allocator")

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Whether the SWA side is an allocator of its own (a->swa non-NULL and != a->full): the
 * invariant of create, stated once (pure: swa == full; ring: swa == NULL). */
static bool has_swa_side(const kvc_swa_allocator *a) { return !a->pure && !a->ring; }

/* --- Shared kernel helpers (declared in swa.h) -------------------------------------- */

kvc_status kvc__swa_map_write(kvc_context *ctx, unsigned char *scratch, const kvc__kfunc **kcache, void *dst,
                              int dst_i64, int64_t dst_len, int mode, int64_t count, const uint32_t *words,
                              size_t nwords, kvc_stream stream) {
  if (count <= 0) return KVC_OK;
  KVC_RETURN_IF(count > INT32_MAX, ctx, KVC_ERR_INVALID_ARGUMENT, "%lld map items in one call exceed 2^31",
                (long long)count);
  if (!kcache[0]) KVC_FORWARD(kvc__plan_prefetch(ctx, &kvc__k_swa_map_write, NULL, kcache));
  kvc__plan plan;
  KVC_FORWARD(kvc__plan_begin(ctx, &plan, scratch, sizeof(kvc_p_swa_map_write), nwords));
  memcpy(plan.payload, words, nwords * 4);
  kvc_p_swa_map_write h;
  memset(&h, 0, sizeof h);
  h.dst = (uint64_t)(uintptr_t)dst;
  h.staged = plan.staged_dev;
  h.dst_len = dst_len;
  h.mode = mode;
  h.count = (int32_t)count;
  h.dst_i64 = dst_i64;
  const unsigned blocks = (unsigned)ceil_div(count, 8); /* one warp per item */
  return kvc__plan_launch(ctx, &plan, &kvc__k_swa_map_write, NULL, kcache, kvc__dim(blocks, 1, 1),
                          kvc__dim(256, 1, 1), stream, &h);
}

int64_t kvc__swa_build_pairs(const int64_t *idx, const int64_t *val, size_t n, uint32_t *words, int *mode,
                             size_t *nwords) {
  size_t runs = 0;
  for (size_t i = 0; i < n; i++) {
    const int64_t x = idx ? idx[i] : (int64_t)i;
    if (i == 0 || x != (idx ? idx[i - 1] : (int64_t)i - 1) + 1 || val[i] != val[i - 1] + 1) runs++;
  }
  if (3 * runs < 2 * n) {
    size_t r = 0;
    for (size_t i = 0; i < n; i++) {
      const int64_t x = idx ? idx[i] : (int64_t)i;
      if (i == 0 || x != (idx ? idx[i - 1] : (int64_t)i - 1) + 1 || val[i] != val[i - 1] + 1) {
        words[3 * r] = (uint32_t)x;
        words[3 * r + 1] = (uint32_t)val[i];
        words[3 * r + 2] = 0;
        r++;
      }
      words[3 * (r - 1) + 2]++;
    }
    *mode = KVC_SWA_MAP_RUNS;
    *nwords = 3 * runs;
    return (int64_t)runs;
  }
  for (size_t i = 0; i < n; i++) {
    words[2 * i] = (uint32_t)(idx ? idx[i] : (int64_t)i);
    words[2 * i + 1] = (uint32_t)val[i];
  }
  *mode = KVC_SWA_MAP_PAIRS;
  *nwords = 2 * n;
  return (int64_t)n;
}

kvc_status kvc__swa_gather(kvc_context *ctx, const kvc__kfunc **kf, const void *map, int map_i64, int64_t map_len,
                           const void *in, int in_i64, void *out, int out_i64, int64_t oob, size_t n,
                           kvc_stream stream) {
  if (n == 0) return KVC_OK;
  if (!*kf) KVC_FORWARD(kvc__kernel_get(ctx, &kvc__k_swa_gather, NULL, kf));
  kvc_p_swa_gather p;
  memset(&p, 0, sizeof p);
  p.map = (uint64_t)(uintptr_t)map;
  p.in = (uint64_t)(uintptr_t)in;
  p.out = (uint64_t)(uintptr_t)out;
  p.n = (int64_t)n;
  p.map_len = map_len;
  p.oob = oob;
  p.map_i64 = map_i64;
  p.in_i64 = in_i64;
  p.out_i64 = out_i64;
  return kvc__kernel_launch(ctx, *kf, kvc__dim((unsigned)ceil_div((int64_t)n, 256), 1, 1), kvc__dim(256, 1, 1), 0,
                            stream, &p, sizeof p);
}

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
  kvc__free(ctx, a->scratch);
  a->magic = KVC__DEAD_MAGIC;
  kvc__free(ctx, a);
}

kvc_status kvc_swa_allocator_create(kvc_context *ctx, const kvc_swa_allocator_config *config,
                                    kvc_swa_allocator **out) {
  KVC_API_ENTRY();
  KVC_RETURN_IF(!ctx, NULL, KVC_ERR_INVALID_ARGUMENT, "ctx is NULL");
  KVC_ARG_NOT_NULL(ctx, config);
  KVC_ARG_NOT_NULL(ctx, out);
  kvc_swa_allocator_config c = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  KVC_FORWARD(KVC__CONFIG_COPY(ctx, "config", &c, config, kvc_swa_allocator_config));
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
    a->ring_cost = ceil_div(c.ring_size, ps) * ps;
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
  KVC_FAIL_GOTO(!a->map || !a->fmark || !a->smark || !a->pages || !a->scratch, ctx, st, KVC_ERR_HOST_OOM, fail,
                "mapping / work space");
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

static int64_t full_free_pages(const kvc_swa_allocator *a) { return kvc_allocator_available_size(a->full) / a->ps; }
static int64_t swa_free_pages(const kvc_swa_allocator *a) {
  return a->ring ? INT64_MAX : kvc_allocator_available_size(a->swa) / a->ps;
}

int kvc_swa_allocator_new_pages_available(const kvc_swa_allocator *a, int64_t nf, int64_t ns) {
  if (!live(a)) return 0;
  return nf <= full_free_pages(a) && (a->ring || ns <= swa_free_pages(a));
}

const int64_t *kvc_swa_allocator_mapping_device(const kvc_swa_allocator *a) { return live(a) ? a->dmap : NULL; }
const int32_t *kvc_swa_allocator_mapping_host(const kvc_swa_allocator *a) { return live(a) ? a->map : NULL; }
int64_t kvc_swa_allocator_mapping_length(const kvc_swa_allocator *a) { return live(a) ? a->map_len : 0; }

kvc_status kvc_swa_allocator_translate_host(const kvc_swa_allocator *a, const int64_t *full, size_t n,
                                            int64_t *out) {
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

kvc_status kvc_swa_translate(kvc_context *ctx, const int64_t *mapping, int64_t mapping_len, const void *loc,
                             kvc_index_type loc_type, void *out, kvc_index_type out_type, size_t n,
                             kvc_stream stream) {
  KVC_API_ENTRY();
  KVC_RETURN_IF(!ctx, NULL, KVC_ERR_INVALID_ARGUMENT, "ctx is NULL");
  KVC_CHECK_INDEX_TYPE(ctx, loc_type);
  KVC_CHECK_INDEX_TYPE(ctx, out_type);
  if (!n) return KVC_OK;
  KVC_RETURN_IF(!mapping || !loc || !out, ctx, KVC_ERR_INVALID_ARGUMENT, "mapping, loc and out must be non-NULL");
  KVC_RETURN_IF(mapping_len < 1, ctx, KVC_ERR_INVALID_ARGUMENT, "mapping_len %lld < 1", (long long)mapping_len);
  const kvc__kfunc *kf = NULL;
  return kvc__swa_gather(ctx, &kf, mapping, 1, mapping_len, loc, loc_type == KVC_INDEX_I64, out,
                         out_type == KVC_INDEX_I64, -1, n, stream);
}

kvc_status kvc_swa_allocator_translate(const kvc_swa_allocator *ac, const void *loc, kvc_index_type loc_type,
                                       void *out, kvc_index_type out_type, size_t n, kvc_stream stream) {
  KVC_API_ENTRY();
  SWA_ENTRY(ac);
  kvc_swa_allocator *a = (kvc_swa_allocator *)ac; /* memoised kernel lookup only */
  KVC_CHECK_INDEX_TYPE(a->ctx, loc_type);
  KVC_CHECK_INDEX_TYPE(a->ctx, out_type);
  if (!n) return KVC_OK;
  KVC_RETURN_IF(!loc || !out, a->ctx, KVC_ERR_INVALID_ARGUMENT, "loc and out must be non-NULL");
  return kvc__swa_gather(a->ctx, &a->k_gather, a->dmap, 1, a->map_len, loc, loc_type == KVC_INDEX_I64, out,
                         out_type == KVC_INDEX_I64, -1, n, stream);
}

/* --- Work space --------------------------------------------------------------------- */

static kvc_status ensure_tok(kvc_swa_allocator *a, const char *fn, size_t n) {
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

static kvc_status ensure_bs(kvc_swa_allocator *a, const char *fn, size_t n) {
  if (n <= a->cap_bs) return KVC_OK;
  size_t cap = KVC__MAX(n, 2 * a->cap_bs);
  cap = KVC__MAX(cap, (size_t)256);
  int64_t *l = kvc__malloc(a->ctx, cap * 8);
  if (!l) return kvc__error(a->ctx, KVC_ERR_HOST_OOM, fn, "work space for %zu requests", n);
  kvc__free(a->ctx, a->lastw);
  a->lastw = l, a->cap_bs = cap;
  return KVC_OK;
}

/* Check-mode epilogue. */
static kvc_status finish(kvc_swa_allocator *a, kvc_status st) {
  if (st == KVC_OK && kvc_context_check_mode(a->ctx)) st = kvc_swa_allocator_check(a);
  return st;
}

/* Writes the new pairs mapping[f[i]] = w[i] to the device (one launch), then the host. */
static kvc_status map_set(kvc_swa_allocator *a, const int64_t *f, const int64_t *w, size_t n, kvc_stream stream) {
  if (!n) return KVC_OK;
  int mode;
  size_t nwords;
  int64_t items = kvc__swa_build_pairs(f, w, n, a->words, &mode, &nwords);
  KVC_FORWARD(kvc__swa_map_write(a->ctx, a->scratch, a->k_map, a->dmap, 1, a->map_len - 1, mode, items, a->words,
                                 nwords, stream));
  for (size_t i = 0; i < n; i++) a->map[f[i]] = (int32_t)w[i];
  return KVC_OK;
}

/* Out device vector: out_device[i] = f[i] (one launch). */
static kvc_status write_out(kvc_swa_allocator *a, int64_t *out_device, const int64_t *f, size_t n,
                            kvc_stream stream) {
  if (!out_device || !n) return KVC_OK;
  int mode;
  size_t nwords;
  int64_t items = kvc__swa_build_pairs(NULL, f, n, a->words, &mode, &nwords);
  return kvc__swa_map_write(a->ctx, a->scratch, a->k_map, out_device, 1, (int64_t)n, mode, items, a->words, nwords,
                            stream);
}

/* --- Allocation --------------------------------------------------------------------- */

kvc_status kvc_swa_allocator_alloc(kvc_swa_allocator *a, int64_t n, int64_t *out_host, int64_t *out_device,
                                   kvc_stream stream) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  kvc_context *ctx = a->ctx;
  KVC_RETURN_IF(a->ps != 1, ctx, KVC_ERR_UNSUPPORTED, "alloc(n) needs page_size 1 (use alloc_extend)");
  KVC_RETURN_IF(n < 0, ctx, KVC_ERR_INVALID_ARGUMENT, "n = %lld < 0", (long long)n);
  if (n == 0) return KVC_OK;
  KVC_RETURN_IF(n > full_free_pages(a) || (!a->pure && n > swa_free_pages(a)), ctx, KVC_ERR_OUT_OF_SLOTS,
                "%lld slots needed; %lld full and %lld SWA free", (long long)n, (long long)full_free_pages(a),
                (long long)(a->ring ? -1 : swa_free_pages(a)));
  KVC_FORWARD(ensure_tok(a, __func__, (size_t)n));
  kvc_status st;
  kvc_allocator_state bf, bs;
  if (a->pure || a->ring) {
    KVC_FORWARD(kvc_allocator_backup_state(a->full, &bf));
    KVC_FORWARD(kvc_allocator_alloc(a->full, n, a->f_buf));
    st = write_out(a, out_device, a->f_buf, (size_t)n, stream);
    if (st != KVC_OK) {
      kvc_allocator_restore_state(a->full, &bf);
      return st;
    }
  } else {
    KVC_FORWARD(kvc_allocator_backup_state(a->swa, &bs));
    KVC_FORWARD(kvc_allocator_alloc(a->swa, n, a->w_buf));
    kvc_allocator_backup_state(a->full, &bf);
    st = kvc_allocator_alloc(a->full, n, a->f_buf);
    if (st == KVC_OK) st = write_out(a, out_device, a->f_buf, (size_t)n, stream);
    if (st == KVC_OK) st = map_set(a, a->f_buf, a->w_buf, (size_t)n, stream);
    if (st != KVC_OK) {
      kvc_allocator_restore_state(a->full, &bf);
      kvc_allocator_restore_state(a->swa, &bs);
      return st;
    }
  }
  if (out_host) memcpy(out_host, a->f_buf, (size_t)n * 8);
  return finish(a, KVC_OK);
}

/* Full last_loc of request i (position pos), from last_locs, prefix slots or the mirror. */
static kvc_status resolve_last(kvc_swa_allocator *a, const char *fn, size_t i, int64_t pos, const int64_t *last_locs,
                               const int64_t *pre, kvc_req_to_token_pool *rp, const int32_t *rows, int64_t *out) {
  if (last_locs) {
    *out = last_locs[i];
  } else if (pre) {
    *out = pre[pos];
  } else {
    if (!rp || !rows)
      return kvc__error(a->ctx, KVC_ERR_INVALID_ARGUMENT, fn,
                        "request %zu continues a partial page but last_locs is NULL and there is no req_pool", i);
    const int32_t *row = kvc_req_to_token_pool_row(rp, rows[i]);
    if (!row || !kvc_req_to_token_pool_is_held(rp, rows[i]))
      return kvc__error(a->ctx, KVC_ERR_MISUSE, fn, "req_rows[%zu] = %d is not a held row of req_pool", i, rows[i]);
    if (pos >= kvc_req_to_token_pool_max_context_len(rp))
      return kvc__error(a->ctx, KVC_ERR_INVALID_ARGUMENT, fn, "request %zu: position %lld past the row", i,
                        (long long)pos);
    *out = row[pos];
  }
  if (*out < 1 || *out >= a->map_len - 1)
    return kvc__error(a->ctx, KVC_ERR_INVALID_ARGUMENT, fn, "request %zu: last_loc %lld is outside [1, %lld)", i,
                      (long long)*out, (long long)(a->map_len - 1));
  return KVC_OK;
}

/* SWA last_loc of a full last_loc: its peer, which must exist (else the SWA side would
 * write into padding page 0, spec 7.4). */
static kvc_status swa_peer(kvc_swa_allocator *a, const char *fn, size_t i, int64_t full_last, int64_t *out) {
  const int32_t w = a->map[full_last];
  if (w <= 0)
    return kvc__error(a->ctx, KVC_ERR_MISUSE, fn,
                      "request %zu: last_loc %lld has no SWA peer (mapping 0); its partial page was SWA-freed", i,
                      (long long)full_last);
  *out = w;
  return KVC_OK;
}

/* The two-sided commit shared by extend/decode/tail: SWA side first (host only, under a
 * backup), then the full side, then the mapping launch; any failure restores both. */
typedef kvc_status (*side_fn)(kvc_swa_allocator *a, void *args, bool full_side);

static kvc_status two_sided(kvc_swa_allocator *a, side_fn fn, void *args, const int64_t *map_f, size_t map_n,
                            kvc_stream stream) {
  kvc_allocator_state bs, bf;
  KVC_FORWARD(kvc_allocator_backup_state(a->swa, &bs));
  KVC_FORWARD(fn(a, args, false));
  kvc_status st = kvc_allocator_backup_state(a->full, &bf);
  if (st == KVC_OK) st = fn(a, args, true);
  if (st == KVC_OK) st = map_set(a, map_f, a->w_buf, map_n, stream);
  if (st != KVC_OK) {
    kvc_allocator_restore_state(a->full, &bf); /* MISUSE (no-op) if the full side never ran */
    kvc_allocator_restore_state(a->swa, &bs);
  }
  return st;
}

kvc_status kvc_swa_allocator_alloc_extend(kvc_swa_allocator *a, size_t bs, const int64_t *prefix_lens,
                                          const int64_t *seq_lens, const int64_t *last_locs,
                                          kvc_req_to_token_pool *rp, const int32_t *rows,
                                          const int64_t *const *prefix_slots, int64_t *out_host,
                                          int64_t *out_device, kvc_stream stream) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  kvc_context *ctx = a->ctx;
  KVC_RETURN_IF(a->pure, ctx, KVC_ERR_UNSUPPORTED, "the pure-SWA allocator has no alloc_extend (page_size 1)");
  if (bs == 0) return KVC_OK;
  KVC_RETURN_IF(!prefix_lens || !seq_lens, ctx, KVC_ERR_INVALID_ARGUMENT, "prefix_lens and seq_lens must be non-NULL");
  const int64_t ps = a->ps;
  int64_t need = 0, tokens = 0;
  for (size_t i = 0; i < bs; i++) {
    const int64_t p = prefix_lens[i], s = seq_lens[i];
    KVC_RETURN_IF(p < 0 || s < p || s > INT32_MAX, ctx, KVC_ERR_INVALID_ARGUMENT,
                  "request %zu: prefix_len %lld, seq_len %lld", i, (long long)p, (long long)s);
    need += ceil_div(s, ps) - ceil_div(p, ps);
    tokens += s - p;
  }
  KVC_RETURN_IF(need > full_free_pages(a) || (!a->ring && need > swa_free_pages(a)), ctx, KVC_ERR_OUT_OF_SLOTS,
                "%lld pages needed on each side; %lld full and %lld SWA free", (long long)need,
                (long long)full_free_pages(a), (long long)(a->ring ? -1 : swa_free_pages(a)));
  if (a->ring)
    return finish(a, kvc_allocator_alloc_extend(a->full, bs, prefix_lens, seq_lens, last_locs, rp, rows, prefix_slots,
                                                out_host, out_device, stream));
  KVC_FORWARD(ensure_tok(a, __func__, (size_t)tokens));
  KVC_FORWARD(ensure_bs(a, __func__, bs));
  for (size_t i = 0; i < bs; i++) {
    const int64_t p = prefix_lens[i], s = seq_lens[i];
    a->lastw[i] = -1;
    if (p % ps != 0 && s > p) {
      int64_t fl;
      const int64_t *pre = (prefix_slots && rp) ? prefix_slots[i] : NULL;
      KVC_FORWARD(resolve_last(a, __func__, i, p - 1, last_locs, pre, rp, rows, &fl));
      KVC_FORWARD(swa_peer(a, __func__, i, fl, &a->lastw[i]));
    }
  }
  /* The SWA side first (host only), then the full side's one launch, which also writes
   * the full->SWA mapping of the new slots (as alloc_decode does): one launch where
   * two_sided() takes two. A full-side failure changes nothing there, so only the SWA
   * side is rolled back. */
  kvc_allocator_state bsw;
  KVC_FORWARD(kvc_allocator_backup_state(a->swa, &bsw));
  KVC_FORWARD(kvc_allocator_alloc_extend(a->swa, bs, prefix_lens, seq_lens, a->lastw, NULL, NULL, NULL, a->w_buf, NULL,
                                         stream));
  const kvc__extend_map m = {a->dmap, a->map_len - 1, a->w_buf, a->lastw};
  kvc_status st = kvc__alloc_extend_mapped(a->full, "kvc_allocator_alloc_extend", bs, prefix_lens, seq_lens, last_locs,
                                           rp, rows, prefix_slots, a->f_buf, out_device, &m, stream);
  if (st != KVC_OK) {
    kvc_allocator_restore_state(a->swa, &bsw);
    return st;
  }
  for (int64_t t = 0; t < tokens; t++) a->map[a->f_buf[t]] = (int32_t)a->w_buf[t];
  if (out_host) memcpy(out_host, a->f_buf, (size_t)tokens * 8);
  return finish(a, KVC_OK);
}

/* alloc_decode's checks (spec: both sides or none) and, outside ring mode, each request's
 * SWA last_loc (lastw). Nothing changes. */
static kvc_status decode_prepare(kvc_swa_allocator *a, const char *fn, size_t bs, const int64_t *seq_lens,
                                 const int64_t *last_locs, kvc_req_to_token_pool *rp, const int32_t *rows) {
  kvc_context *ctx = a->ctx;
  if (!seq_lens) return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "seq_lens is NULL");
  const int64_t ps = a->ps;
  int64_t need = 0;
  for (size_t i = 0; i < bs; i++) {
    if (seq_lens[i] < 1 || seq_lens[i] > INT32_MAX)
      return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "seq_lens[%zu] = %lld", i, (long long)seq_lens[i]);
    need += (seq_lens[i] - 1) % ps == 0;
  }
  if (need > full_free_pages(a) || (!a->ring && need > swa_free_pages(a)))
    return kvc__error(ctx, KVC_ERR_OUT_OF_SLOTS, fn, "%lld new pages needed on each side; %lld full and %lld SWA free",
                      (long long)need, (long long)full_free_pages(a), (long long)(a->ring ? -1 : swa_free_pages(a)));
  if (a->ring) return KVC_OK;
  KVC_FORWARD(ensure_tok(a, fn, bs));
  KVC_FORWARD(ensure_bs(a, fn, bs));
  for (size_t i = 0; i < bs; i++) {
    a->lastw[i] = -1;
    if ((seq_lens[i] - 1) % ps != 0) {
      int64_t fl;
      KVC_FORWARD(resolve_last(a, fn, i, seq_lens[i] - 2, last_locs, NULL, rp, rows, &fl));
      KVC_FORWARD(swa_peer(a, fn, i, fl, &a->lastw[i]));
    }
  }
  return KVC_OK;
}

kvc_status kvc_swa_allocator_alloc_decode(kvc_swa_allocator *a, size_t bs, const int64_t *seq_lens,
                                          const int64_t *last_locs, kvc_req_to_token_pool *rp, const int32_t *rows,
                                          int64_t *out_host, int64_t *out_device, kvc_stream stream) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  KVC_RETURN_IF(a->pure, a->ctx, KVC_ERR_UNSUPPORTED, "the pure-SWA allocator has no alloc_decode (page_size 1)");
  if (bs == 0) return KVC_OK;
  KVC_FORWARD(decode_prepare(a, __func__, bs, seq_lens, last_locs, rp, rows));
  if (a->ring)
    return finish(a, kvc_allocator_alloc_decode(a->full, bs, seq_lens, last_locs, rp, rows, out_host, out_device,
                                                stream));
  /* The SWA side first (host only: no table, no out_cache_loc), then the full side's one
   * launch, which also writes the full->SWA mapping of the new slots: one launch per step
   * where two_sided() takes two (the plan, then the mapping). */
  kvc_allocator_state bsw;
  KVC_FORWARD(kvc_allocator_backup_state(a->swa, &bsw));
  KVC_FORWARD(kvc_allocator_alloc_decode(a->swa, bs, seq_lens, a->lastw, NULL, NULL, a->w_buf, NULL, stream));
  /* A full-side failure changes nothing there (validation, or a launch error that it
   * undoes itself), so only the SWA side is rolled back. */
  kvc_status st = kvc__alloc_decode_mapped(a->full, "kvc_allocator_alloc_decode", bs, seq_lens, last_locs, rp, rows,
                                           a->f_buf, out_device, a->dmap, a->map_len - 1, a->w_buf, stream);
  if (st != KVC_OK) {
    kvc_allocator_restore_state(a->swa, &bsw);
    return st;
  }
  for (size_t i = 0; i < bs; i++) a->map[a->f_buf[i]] = (int32_t)a->w_buf[i];
  if (out_host) memcpy(out_host, a->f_buf, bs * 8);
  return finish(a, KVC_OK);
}

kvc_status kvc__swa_decode_publish(kvc_swa_allocator *a, const char *fn, size_t bs, const int64_t *seq_lens,
                                   const int64_t *last_locs, kvc_req_to_token_pool *rp, const int32_t *rows,
                                   uint32_t *payload, int64_t *out_host, kvc_status *audit) {
  *audit = KVC_OK;
  if (bs == 0) return KVC_OK;
  KVC_FORWARD(decode_prepare(a, fn, bs, seq_lens, last_locs, rp, rows));
  int64_t need = 0;
  if (a->ring) {
    KVC_FORWARD(kvc__alloc_decode_plan(a->full, fn, bs, seq_lens, last_locs, rp, rows, payload, 3, &need));
    *audit = finish(a, kvc__alloc_decode_finish(a->full, fn, bs, out_host, need));
    return KVC_OK;
  }
  kvc_allocator_state bsw;
  KVC_FORWARD(kvc_allocator_backup_state(a->swa, &bsw));
  KVC_FORWARD(kvc_allocator_alloc_decode(a->swa, bs, seq_lens, a->lastw, NULL, NULL, a->w_buf, NULL, NULL));
  kvc_status st = kvc__alloc_decode_plan(a->full, fn, bs, seq_lens, last_locs, rp, rows, payload, 4, &need);
  if (st != KVC_OK) {
    kvc_allocator_restore_state(a->swa, &bsw);
    return st;
  }
  for (size_t i = 0; i < bs; i++) payload[4 * i + 3] = (uint32_t)a->w_buf[i];
  st = kvc__alloc_decode_finish(a->full, fn, bs, a->f_buf, need);
  for (size_t i = 0; i < bs; i++) a->map[a->f_buf[i]] = (int32_t)a->w_buf[i];
  if (out_host) memcpy(out_host, a->f_buf, bs * 8);
  *audit = finish(a, st);
  return KVC_OK;
}

bool kvc__swa_channel_info(const kvc_swa_allocator *a, kvc_allocator **full, int64_t **dmap, int64_t *map_len) {
  if (!a || a->magic != KVC__SWA_MAGIC || a->pure) return false;
  *full = a->full;
  *dmap = a->ring ? NULL : a->dmap;
  *map_len = a->ring ? 0 : a->map_len - 1;
  return true;
}

typedef struct tail_args {
  int64_t p, s, last, tail;
  kvc_req_to_token_pool *rp;
  int32_t row;
  const int64_t *prefix_slots;
  int64_t *out_device;
  kvc_stream stream;
} tail_args;

static kvc_status tail_side(kvc_swa_allocator *a, void *vargs, bool full_side) {
  tail_args *t = vargs;
  if (full_side) {
    const int64_t *last = t->last >= 0 ? &t->last : NULL;
    const int64_t *const pre[1] = {t->prefix_slots};
    return kvc_allocator_alloc_extend(a->full, 1, &t->p, &t->s, last, t->rp, t->rp ? &t->row : NULL,
                                      t->prefix_slots ? pre : NULL, a->f_buf, t->out_device, t->stream);
  }
  if (t->tail == 0) return KVC_OK;
  const int64_t zero = 0, minus1 = -1;
  return kvc_allocator_alloc_extend(a->swa, 1, &zero, &t->tail, &minus1, NULL, NULL, NULL, a->w_buf, NULL, t->stream);
}

kvc_status kvc_swa_allocator_alloc_extend_swa_tail(kvc_swa_allocator *a, int64_t p, int64_t s, int64_t last_loc,
                                                   int64_t tail, kvc_req_to_token_pool *rp, int32_t row,
                                                   const int64_t *prefix_slots, int64_t *out_host,
                                                   int64_t *out_device, kvc_stream stream) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  kvc_context *ctx = a->ctx;
  KVC_RETURN_IF(a->pure, ctx, KVC_ERR_UNSUPPORTED, "the pure-SWA allocator has no alloc_extend_swa_tail");
  KVC_RETURN_IF(p < 0 || s < p || s > INT32_MAX, ctx, KVC_ERR_INVALID_ARGUMENT, "prefix_len %lld, seq_len %lld",
                (long long)p, (long long)s);
  KVC_RETURN_IF(tail < 0 || tail > s - p, ctx, KVC_ERR_INVALID_ARGUMENT, "swa_tail_len %lld outside [0, %lld]",
                (long long)tail, (long long)(s - p));
  const int64_t ps = a->ps, nf = ceil_div(s, ps) - ceil_div(p, ps), ns = ceil_div(tail, ps);
  KVC_RETURN_IF(!kvc_swa_allocator_new_pages_available(a, nf, ns), ctx, KVC_ERR_OUT_OF_SLOTS,
                "%lld full / %lld SWA pages needed; %lld / %lld free", (long long)nf, (long long)ns,
                (long long)full_free_pages(a), (long long)(a->ring ? -1 : swa_free_pages(a)));
  const int32_t *rows = rp ? &row : NULL;
  if (a->ring) {
    const int64_t *const pre[1] = {prefix_slots};
    return finish(a, kvc_allocator_alloc_extend(a->full, 1, &p, &s, last_loc >= 0 ? &last_loc : NULL, rp, rows,
                                                prefix_slots ? pre : NULL, out_host, out_device, stream));
  }
  KVC_FORWARD(ensure_tok(a, __func__, (size_t)(s - p)));
  tail_args t = {p, s, last_loc, tail, rp, row, prefix_slots, out_device, stream};
  KVC_FORWARD(two_sided(a, tail_side, &t, a->f_buf + (s - p - tail), (size_t)tail, stream));
  if (out_host) memcpy(out_host, a->f_buf, (size_t)(s - p) * 8);
  return finish(a, KVC_OK);
}

/* --- Free --------------------------------------------------------------------------- */

static bool page_held(const kvc_allocator *al, int64_t page) {
  if (page < 1 || page > al->num_pages) return false;
  const uint8_t s = al->state[page];
  return (s & KVC__PG_STATE) == KVC__PG_HELD && !(s & (KVC__PG_GFREE | KVC__PG_GSEG));
}

/* Validates full slots: range and held (ps == 1: no duplicates). */
static kvc_status check_full_slots(kvc_swa_allocator *a, const char *fn, const int64_t *slots, size_t n) {
  kvc_status st = KVC_OK;
  size_t marked = 0;
  for (size_t i = 0; i < n; i++) {
    const int64_t x = slots[i];
    if (x < a->ps || x >= (a->full->num_pages + 1) * a->ps) {
      st = kvc__error(a->ctx, KVC_ERR_MISUSE, fn, "slots[%zu] = %lld is the padding page or out of range", i,
                      (long long)x);
      break;
    }
    if (!page_held(a->full, x / a->ps)) {
      st = kvc__error(a->ctx, KVC_ERR_MISUSE, fn, "slots[%zu] = %lld is not held (double free?)", i, (long long)x);
      break;
    }
    if (a->ps == 1) {
      if (a->fmark[x]) {
        st = kvc__error(a->ctx, KVC_ERR_MISUSE, fn, "slots[%zu] = %lld is listed twice", i, (long long)x);
        break;
      }
      a->fmark[x] = 1;
      marked = i + 1;
    }
  }
  for (size_t i = 0; i < marked; i++) a->fmark[slots[i]] = 0;
  return st;
}

/* Plans the SWA half of a free of validated full slots: a->w_buf[0:*nw) the SWA slots to
 * release (call order for ps 1), a->pages[0:*np) the distinct full pages (ps > 1) or
 * slots (ps 1) whose entries are zeroed. Fails (nothing changed) on a peer that is not
 * held, and with ps 1 on a missing peer unless `unmapped_ok` (the flows' release after
 * window eviction: those slots release only their full side). */
static kvc_status plan_swa_free(kvc_swa_allocator *a, const char *fn, const int64_t *slots, size_t n,
                                bool unmapped_ok, int64_t *nw, int64_t *np) {
  const int64_t ps = a->ps;
  int64_t w_n = 0, p_n = 0;
  kvc_status st = KVC_OK;
  if (ps == 1) {
    for (size_t i = 0; i < n && st == KVC_OK; i++) {
      const int32_t w = a->map[slots[i]];
      if (w <= 0 && unmapped_ok) continue; /* its entry is 0 already */
      if (w <= 0)
        st = kvc__error(a->ctx, KVC_ERR_MISUSE, fn,
                        "peer mapped: slots[%zu] = %lld has no SWA peer (already SWA-freed; use free_full)", i,
                        (long long)slots[i]);
      else if (!page_held(a->swa, w))
        st = kvc__error(a->ctx, KVC_ERR_INTERNAL, fn, "slots[%zu] = %lld maps to SWA slot %d, which is not held", i,
                        (long long)slots[i], w);
      a->w_buf[w_n++] = w;
      a->pages[p_n++] = slots[i];
    }
  } else {
    for (size_t i = 0; i < n && st == KVC_OK; i++) {
      const int64_t pg = slots[i] / ps;
      if (a->fmark[pg]) continue;
      a->fmark[pg] = 1;
      a->pages[p_n++] = pg;
      for (int64_t j = 0; j < ps; j++) {
        const int64_t fs = pg * ps + j;
        const int32_t w = a->map[fs];
        if (w <= 0) continue;
        if (!page_held(a->swa, w / ps)) {
          st = kvc__error(a->ctx, KVC_ERR_INTERNAL, fn, "full slot %lld maps to SWA slot %d, which is not held",
                          (long long)fs, w);
          break;
        }
        if (a->smark[w / ps]) continue;
        a->smark[w / ps] = 1;
        a->w_buf[w_n++] = w;
      }
    }
    for (int64_t i = 0; i < p_n; i++) a->fmark[a->pages[i]] = 0;
    for (int64_t i = 0; i < w_n; i++) a->smark[a->w_buf[i] / ps] = 0;
  }
  *nw = w_n;
  *np = p_n;
  return st;
}

/* Zeroes the planned entries: device (one launch of runs), then host. */
static kvc_status zero_entries(kvc_swa_allocator *a, int64_t np, kvc_stream stream) {
  const int64_t ps = a->ps;
  /* Runs of consecutive pages (ps > 1) or slots (ps 1), in plan order. */
  int64_t items = 0;
  for (int64_t i = 0; i < np; i++) {
    const int64_t start = a->pages[i] * ps;
    if (items && (int64_t)a->words[2 * (items - 1)] + (int64_t)a->words[2 * (items - 1) + 1] == start) {
      a->words[2 * (items - 1) + 1] += (uint32_t)ps;
      continue;
    }
    a->words[2 * items] = (uint32_t)start;
    a->words[2 * items + 1] = (uint32_t)ps;
    items++;
  }
  KVC_FORWARD(kvc__swa_map_write(a->ctx, a->scratch, a->k_map, a->dmap, 1, a->map_len - 1, KVC_SWA_MAP_ZERO, items,
                                 a->words, (size_t)(2 * items), stream));
  for (int64_t i = 0; i < np; i++) memset(a->map + a->pages[i] * ps, 0, (size_t)ps * sizeof *a->map);
  return KVC_OK;
}

/* free_swa of validated slots (not pure, not ring). */
static kvc_status do_free_swa(kvc_swa_allocator *a, const char *fn, const int64_t *slots, size_t n,
                              bool unmapped_ok, kvc_stream stream) {
  int64_t nw, np;
  size_t tokens;
  KVC_RETURN_IF(!kvc__mul_size(n, (size_t)a->ps, &tokens), a->ctx, KVC_ERR_INVALID_ARGUMENT,
                "%zu slots x page_size %d overflows", n, a->ps);
  KVC_FORWARD(ensure_tok(a, fn, tokens));
  KVC_FORWARD(plan_swa_free(a, fn, slots, n, unmapped_ok, &nw, &np));
  KVC_FORWARD(zero_entries(a, np, stream));
  /* Cannot fail: every peer was checked held and listed once. */
  return kvc_allocator_free(a->swa, a->w_buf, (size_t)nw);
}

/* Pure: free the slots > 0 (SGLang filters). */
static kvc_status pure_free(kvc_swa_allocator *a, const char *fn, const int64_t *slots, size_t n) {
  KVC_FORWARD(ensure_tok(a, fn, n));
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (slots[i] > 0) a->f_buf[m++] = slots[i];
  return finish(a, kvc_allocator_free(a->full, a->f_buf, m));
}

kvc_status kvc_swa_allocator_free_swa(kvc_swa_allocator *a, const int64_t *slots, size_t n, kvc_stream stream) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  if (!n) return KVC_OK;
  KVC_ARG_NOT_NULL(a->ctx, slots);
  if (a->pure) return pure_free(a, __func__, slots, n);
  KVC_FORWARD(check_full_slots(a, __func__, slots, n));
  if (a->ring) return KVC_OK; /* the mapping is never written in ring mode */
  return finish(a, do_free_swa(a, __func__, slots, n, false, stream));
}

static kvc_status check_released(kvc_swa_allocator *a, const char *fn, const int64_t *slots, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (a->map[slots[i]] != 0)
      return kvc__error(a->ctx, KVC_ERR_MISUSE, fn,
                        "peer released: slots[%zu] = %lld still maps to SWA slot %d (use free, or free_swa first)", i,
                        (long long)slots[i], a->map[slots[i]]);
  return KVC_OK;
}

kvc_status kvc_swa_allocator_free_full(kvc_swa_allocator *a, const int64_t *slots, size_t n) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  if (!n || a->pure) return KVC_OK;
  KVC_ARG_NOT_NULL(a->ctx, slots);
  KVC_FORWARD(check_full_slots(a, __func__, slots, n));
  KVC_FORWARD(check_released(a, __func__, slots, n));
  return finish(a, kvc_allocator_free(a->full, slots, n));
}

kvc_status kvc_swa_allocator_free(kvc_swa_allocator *a, const int64_t *slots, size_t n, kvc_stream stream) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  if (!n) return KVC_OK;
  KVC_ARG_NOT_NULL(a->ctx, slots);
  if (a->pure) return pure_free(a, __func__, slots, n);
  KVC_FORWARD(check_full_slots(a, __func__, slots, n));
  if (!a->ring) KVC_FORWARD(do_free_swa(a, __func__, slots, n, false, stream));
  return finish(a, kvc_allocator_free(a->full, slots, n));
}

kvc_status kvc__swa_allocator_free_evicted(kvc_swa_allocator *a, const int64_t *slots, size_t n, kvc_stream stream) {
  SWA_ENTRY(a);
  if (!n) return KVC_OK;
  KVC_ARG_NOT_NULL(a->ctx, slots);
  if (a->pure) return pure_free(a, "kvc_swa_allocator_free", slots, n);
  KVC_FORWARD(check_full_slots(a, "kvc_swa_allocator_free", slots, n));
  if (!a->ring) KVC_FORWARD(do_free_swa(a, "kvc_swa_allocator_free", slots, n, true, stream));
  return finish(a, kvc_allocator_free(a->full, slots, n));
}

kvc_status kvc_swa_allocator_free_segment(kvc_swa_allocator *a, const int64_t *slots, size_t n, int64_t start_pos,
                                          kvc_stream stream) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  if (!n) return KVC_OK;
  KVC_ARG_NOT_NULL(a->ctx, slots);
  if (a->pure) return pure_free(a, __func__, slots, n);
  KVC_RETURN_IF(start_pos < 0 || start_pos % a->ps != 0, a->ctx, KVC_ERR_INVALID_ARGUMENT,
                "start_pos %lld is not page-aligned", (long long)start_pos);
  KVC_FORWARD(check_full_slots(a, __func__, slots, n));
  if (!a->ring) KVC_FORWARD(do_free_swa(a, __func__, slots, n, false, stream));
  return finish(a, kvc_allocator_free_segment(a->full, slots, n, start_pos));
}

kvc_status kvc_swa_allocator_free_full_segment(kvc_swa_allocator *a, const int64_t *slots, size_t n,
                                               int64_t start_pos) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  if (!n || a->pure) return KVC_OK;
  KVC_ARG_NOT_NULL(a->ctx, slots);
  KVC_FORWARD(check_full_slots(a, __func__, slots, n));
  KVC_FORWARD(check_released(a, __func__, slots, n));
  return finish(a, kvc_allocator_free_segment(a->full, slots, n, start_pos));
}

kvc_status kvc_swa_allocator_free_group_begin(kvc_swa_allocator *a) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  KVC_RETURN_IF(a->in_group, a->ctx, KVC_ERR_MISUSE, "a free group is already open (groups do not nest)");
  KVC_FORWARD(kvc_allocator_free_group_begin(a->full));
  if (has_swa_side(a)) {
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
  if (has_swa_side(a)) st = kvc_allocator_free_group_end(a->swa); /* SWA releases first (7.8) */
  KVC_CLEANUP_KEEP_FIRST(kvc_allocator_free_group_end(a->full), st);
  return finish(a, st);
}

kvc_status kvc_swa_allocator_clear(kvc_swa_allocator *a, kvc_stream stream) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  if (!a->pure) KVC_FORWARD(kvc__dev_memset(a->ctx, a->dmap, 0, (size_t)(a->map_len - 1) * 8, stream));
  kvc_status st = kvc_allocator_clear(a->full);
  if (has_swa_side(a)) KVC_CLEANUP_KEEP_FIRST(kvc_allocator_clear(a->swa), st);
  if (!a->pure) memset(a->map, 0, (size_t)(a->map_len - 1) * sizeof *a->map);
  a->in_group = false;
  return finish(a, st);
}

kvc_status kvc_swa_allocator_check(const kvc_swa_allocator *a) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  KVC_FORWARD(kvc_allocator_check(a->full));
  if (has_swa_side(a)) KVC_FORWARD(kvc_allocator_check(a->swa));
  KVC_RETURN_IF(a->map[a->map_len - 1] != -1, a->ctx, KVC_ERR_INTERNAL, "mapping's last entry is %d, not -1",
                a->map[a->map_len - 1]);
  if (a->pure || a->ring) return KVC_OK;
  const int64_t ps = a->ps;
  uint8_t *seen = kvc__calloc(a->ctx, (size_t)(a->size_swa + ps + 1), 1);
  KVC_RETURN_IF(!seen, a->ctx, KVC_ERR_HOST_OOM, "audit bitmap");
  kvc_status st = KVC_OK;
  for (int64_t f = 0; f < a->map_len - 1 && st == KVC_OK; f++) {
    const int32_t w = a->map[f];
    if (w == 0) continue;
    if (w < 0 || w >= (a->swa->num_pages + 1) * ps)
      st = kvc__error(a->ctx, KVC_ERR_INTERNAL, __func__, "mapping[%lld] = %d is out of range", (long long)f, w);
    else if (!page_held(a->full, f / ps))
      st = kvc__error(a->ctx, KVC_ERR_INTERNAL, __func__, "mapping[%lld] = %d but full slot %lld is not held",
                      (long long)f, w, (long long)f);
    else if (!page_held(a->swa, w / ps))
      st = kvc__error(a->ctx, KVC_ERR_INTERNAL, __func__, "mapping[%lld] = %d but that SWA slot is not held",
                      (long long)f, w);
    else if (seen[w])
      st = kvc__error(a->ctx, KVC_ERR_INTERNAL, __func__, "SWA slot %d is mapped twice", w);
    else
      seen[w] = 1;
  }
  kvc__free(a->ctx, seen);
  return st;
}
