/*
 * hybrid_req_pool.c — SGLang's HybridReqToTokenPool (spec 3) by composition: a borrowed
 * kvc_req_to_token_pool and a borrowed kvc_mamba_pool, plus the mappings this object
 * owns, kept in ONE device allocation so every call is one launch:
 *
 *   device int32: [ req->mamba: size + 1 ][ req->track: (size + 1) x pp, row-major ]
 *   host mirror:  the same layout (authoritative; nothing is read back)
 *
 * alloc: validate -> Mamba capacity checked BEFORE any row is taken -> rows -> one
 * Mamba alloc for the whole batch (one zeroing launch by the Mamba pool; ids handed out
 * per request: running slot, then its track slots — spec 14) -> one mapping launch ->
 * commit. A failure after rows were taken (launch error) frees them again.
 */
#include "../alloc/alloc.h"
#include "../alloc/swa.h"

#include <string.h>

#define KVC__HYBRID_MAGIC 0x6b76632d68727021ull /* "kvc-hrp!" */

struct kvc_hybrid_req_pool {
  uint64_t magic;
  kvc_context *ctx;
  kvc_req_to_token_pool *rp;
  kvc_mamba_pool *mp;
  int32_t size, pp;
  bool track, lazy;
  int64_t len;   /* entries of the combined mapping */
  int32_t *hmap; /* host mirror */
  int32_t *dmap; /* device */
  size_t cap;    /* work space, requests */
  int32_t *rows, *ids;
  int64_t *widx, *wval;
  int32_t *wold; /* undo log of the last alloc: previous hmap values at widx[0:undo_w) */
  size_t undo_w;
  int64_t undo_need; /* Mamba slots that alloc took (ids[0:undo_need)) */
  bool undo_live;
  uint32_t *words;
  unsigned char *scratch;
  const kvc__kfunc *k_map[KVC__PLAN_INLINE_VARIANTS], *k_gather;
};

#define HYB_ENTRY(p) KVC_CHECK_HANDLE(p, KVC__HYBRID_MAGIC, "pool", "kvc_hybrid_req_pool")

static int64_t track_at(const kvc_hybrid_req_pool *p, int64_t row) { return (int64_t)(p->size + 1) + row * p->pp; }

void kvc_hybrid_req_pool_destroy(kvc_hybrid_req_pool *p) {
  if (!p || p->magic != KVC__HYBRID_MAGIC) return;
  kvc_context *ctx = p->ctx;
  kvc__dev_free(ctx, p->dmap);
  kvc__free(ctx, p->hmap);
  kvc__free(ctx, p->rows), kvc__free(ctx, p->ids), kvc__free(ctx, p->widx), kvc__free(ctx, p->wval);
  kvc__free(ctx, p->words), kvc__free(ctx, p->wold);
  kvc__free(ctx, p->scratch);
  p->magic = KVC__DEAD_MAGIC;
  kvc__free(ctx, p);
}

kvc_status kvc_hybrid_req_pool_create(kvc_context *ctx, const kvc_hybrid_req_pool_config *config,
                                      kvc_hybrid_req_pool **out) {
  KVC_API_ENTRY();
  kvc_hybrid_req_pool_config c = KVC_HYBRID_REQ_POOL_CONFIG_INIT;
  KVC__CREATE_CONFIG(ctx, config, out, &c, kvc_hybrid_req_pool_config);
  KVC_RETURN_IF(!c.req_pool || !c.mamba_pool, ctx, KVC_ERR_INVALID_ARGUMENT, "req_pool and mamba_pool are required");
  KVC_RETURN_IF(c.flags & ~(KVC_HYBRID_TRACK | KVC_HYBRID_LAZY), ctx, KVC_ERR_INVALID_ARGUMENT, "unknown flags 0x%x",
                c.flags);
  KVC_RETURN_IF((c.flags & KVC_HYBRID_LAZY) && !(c.flags & KVC_HYBRID_TRACK), ctx, KVC_ERR_INVALID_ARGUMENT,
                "KVC_HYBRID_LAZY needs KVC_HYBRID_TRACK");
  if (c.pp == 0) c.pp = 2;
  KVC_RETURN_IF(c.pp != 1 && c.pp != 2, ctx, KVC_ERR_INVALID_ARGUMENT, "pp %d must be 1 or 2", c.pp);
  const int32_t size = kvc_req_to_token_pool_size(c.req_pool);
  KVC_RETURN_IF(size < 1, ctx, KVC_ERR_INVALID_ARGUMENT, "req_pool is not a live pool");
  kvc_status st = KVC_OK;
  kvc_hybrid_req_pool *p = kvc__calloc(ctx, 1, sizeof *p);
  KVC_RETURN_IF(!p, ctx, KVC_ERR_HOST_OOM, "pool struct");
  p->magic = KVC__HYBRID_MAGIC;
  p->ctx = ctx;
  p->rp = c.req_pool;
  p->mp = c.mamba_pool;
  p->size = size;
  p->track = (c.flags & KVC_HYBRID_TRACK) != 0;
  p->lazy = (c.flags & KVC_HYBRID_LAZY) != 0;
  p->pp = c.pp;
  p->len = (int64_t)(size + 1) * (p->track ? 1 + p->pp : 1);
  p->hmap = kvc__calloc(ctx, (size_t)p->len, sizeof *p->hmap);
  p->scratch = kvc__malloc(ctx, KVC__PARAM_SCRATCH_BYTES);
  KVC_FAIL_GOTO(!p->hmap || !p->scratch, ctx, st, KVC_ERR_HOST_OOM, fail, "mirror / scratch");
  KVC_CHECK_GOTO(kvc__dev_alloc(ctx, (size_t)p->len * 4, (void **)&p->dmap), st, fail);
  KVC_CHECK_GOTO(kvc__dev_memset(ctx, p->dmap, 0, (size_t)p->len * 4, NULL), st, fail);
  KVC_CHECK_GOTO(kvc__dev_sync(ctx, NULL), st, fail);
  *out = p;
  return KVC_OK;
fail:
  kvc_hybrid_req_pool_destroy(p);
  return st;
}

int32_t kvc_hybrid_req_pool_pp(const kvc_hybrid_req_pool *p) { return p && p->magic == KVC__HYBRID_MAGIC ? p->pp : 0; }

static kvc_status reserve(kvc_hybrid_req_pool *p, const char *fn, size_t n) {
  if (n <= p->cap) return KVC_OK;
  size_t cap = KVC__MAX(n, 2 * p->cap);
  cap = KVC__MAX(cap, (size_t)64);
  const size_t per = 1 + (size_t)p->pp;
  int32_t *rows = kvc__malloc(p->ctx, cap * 4), *ids = kvc__malloc(p->ctx, cap * per * 4);
  int64_t *wi = kvc__malloc(p->ctx, cap * per * 8), *wv = kvc__malloc(p->ctx, cap * per * 8);
  uint32_t *words = kvc__malloc(p->ctx, (3 * cap * per + 16) * 4);
  int32_t *wold = kvc__malloc(p->ctx, cap * per * 4);
  if (!rows || !ids || !wi || !wv || !words || !wold) {
    kvc__free(p->ctx, rows), kvc__free(p->ctx, ids), kvc__free(p->ctx, wi), kvc__free(p->ctx, wv);
    kvc__free(p->ctx, words), kvc__free(p->ctx, wold);
    return kvc__error(p->ctx, KVC_ERR_HOST_OOM, fn, "work space for %zu requests", n);
  }
  kvc__free(p->ctx, p->rows), kvc__free(p->ctx, p->ids), kvc__free(p->ctx, p->widx), kvc__free(p->ctx, p->wval);
  kvc__free(p->ctx, p->words), kvc__free(p->ctx, p->wold);
  p->rows = rows, p->ids = ids, p->widx = wi, p->wval = wv, p->words = words, p->wold = wold, p->cap = cap;
  p->undo_live = false; /* the work space moved */
  return KVC_OK;
}

/* One launch writing map[widx[i]] = wval[i], i < n. */
static kvc_status write_map(kvc_hybrid_req_pool *p, size_t n, kvc_stream stream) {
  const kvc__swa_map_dst d = {p->scratch, p->k_map, p->dmap, p->len, 0};
  const kvc__swa_map_items items = kvc__swa_build_pairs(p->widx, p->wval, n, p->words);
  return kvc__swa_map_write(p->ctx, &d, &items, stream);
}

static bool has_track(const kvc_hybrid_req_pool *p, const int32_t *v) {
  for (int32_t k = 0; k < p->pp; k++)
    if (v[k] > 0) return true;
  return false;
}

kvc_status kvc_hybrid_req_pool_alloc(kvc_hybrid_req_pool *p, size_t n, int32_t *rows, int32_t *mamba_slots,
                                     int32_t *pp_slots, kvc_stream stream) {
  KVC_API_ENTRY();
  HYB_ENTRY(p);
  kvc_context *ctx = p->ctx;
  if (!n) return KVC_OK;
  KVC_RETURN_IF(!rows || !mamba_slots, ctx, KVC_ERR_INVALID_ARGUMENT, "rows and mamba_slots must be non-NULL");
  KVC_RETURN_IF(p->track && !pp_slots, ctx, KVC_ERR_INVALID_ARGUMENT, "pp_slots is required with track buffers");
  KVC_FORWARD(reserve(p, __func__, n));
  int64_t need = 0;
  for (size_t i = 0; i < n; i++) {
    if (mamba_slots[i] > 0) {
      KVC_RETURN_IF(!kvc_mamba_pool_is_held(p->mp, mamba_slots[i]), ctx, KVC_ERR_MISUSE,
                    "mamba_slots[%zu] = %d is not held by the Mamba pool", i, mamba_slots[i]);
    } else {
      need++;
    }
    if (p->track) {
      const int32_t *v = pp_slots + i * (size_t)p->pp;
      if (!has_track(p, v)) need += p->lazy ? 1 : p->pp;
      else
        for (int32_t k = 0; k < p->pp; k++)
          KVC_RETURN_IF(v[k] > 0 && !kvc_mamba_pool_is_held(p->mp, v[k]), ctx, KVC_ERR_MISUSE,
                        "pp_slots[%zu][%d] = %d is not held by the Mamba pool", i, k, v[k]);
    }
  }
  /* Capacity first, so a shortage never takes (and re-orders) req rows. */
  KVC_RETURN_IF(need > kvc_mamba_pool_available(p->mp), ctx, KVC_ERR_OUT_OF_SLOTS, "%lld Mamba slots needed, %d free",
                (long long)need, kvc_mamba_pool_available(p->mp));
  memcpy(p->rows, rows, n * 4);
  KVC_FORWARD(kvc_req_to_token_pool_alloc(p->rp, n, p->rows));
  kvc_status st = KVC_OK;
  if (need) st = kvc_mamba_pool_alloc(p->mp, (size_t)need, p->ids, stream);
  if (st != KVC_OK) goto rollback_rows;
  /* Hand the ids out and plan the mapping rows. */
  size_t w = 0;
  int64_t k_id = 0;
  for (size_t i = 0; i < n; i++) {
    const int32_t m = mamba_slots[i] > 0 ? mamba_slots[i] : p->ids[k_id++];
    p->widx[w] = p->rows[i], p->wval[w] = m, w++;
    if (p->track) {
      const int32_t *v = pp_slots + i * (size_t)p->pp;
      const bool fresh = !has_track(p, v);
      for (int32_t k = 0; k < p->pp; k++) {
        int32_t x = v[k];
        if (fresh) x = (!p->lazy || k == 0) ? p->ids[k_id++] : -1;
        p->widx[w] = track_at(p, p->rows[i]) + k, p->wval[w] = x, w++;
      }
    }
  }
  st = write_map(p, w, stream);
  if (st != KVC_OK) {
    if (need) kvc__mamba_pool_unalloc(p->mp, p->ids, (size_t)need);
    goto rollback_rows;
  }
  /* Commit, keeping an undo log for kvc__hybrid_req_pool_unalloc (flows). */
  for (size_t j = 0; j < w; j++) {
    p->wold[j] = p->hmap[p->widx[j]];
    p->hmap[p->widx[j]] = (int32_t)p->wval[j];
  }
  p->undo_w = w, p->undo_need = need, p->undo_live = true;
  for (size_t i = 0; i < n; i++) {
    rows[i] = p->rows[i];
    mamba_slots[i] = p->hmap[p->rows[i]];
    if (p->track) memcpy(pp_slots + i * (size_t)p->pp, p->hmap + track_at(p, p->rows[i]), (size_t)p->pp * 4);
  }
  return KVC_OK;
rollback_rows : {
  /* Un-grant the rows this call took, in grant order, so the FIFO is as before. */
  size_t taken = 0;
  for (size_t i = 0; i < n; i++)
    if (rows[i] == 0) p->rows[taken++] = p->rows[i];
  kvc__req_pool_unalloc(p->rp, p->rows, taken);
  return st;
}
}

kvc_status kvc__hybrid_req_pool_unalloc(kvc_hybrid_req_pool *p, kvc_stream stream) {
  if (!p->undo_live) return kvc__error(p->ctx, KVC_ERR_INTERNAL, __func__, "no alloc to undo");
  p->undo_live = false;
  /* Device mapping back to the old values first (the only step that can fail), then the
   * host mirror, the Mamba slots (to the front, in order) and the rows. */
  for (size_t j = 0; j < p->undo_w; j++) p->wval[j] = p->wold[j];
  KVC_FORWARD(write_map(p, p->undo_w, stream));
  for (size_t j = 0; j < p->undo_w; j++) p->hmap[p->widx[j]] = p->wold[j];
  if (p->undo_need) kvc__mamba_pool_unalloc(p->mp, p->ids, (size_t)p->undo_need);
  return KVC_OK;
}

/* Frees the row's Mamba slots (running slot, track slots) in ONE mapping launch, except
 * `kept`: with `donate` the kept slot's entry is cleared too (its slot now belongs to a
 * prefix cache), else it stays mapped (SGLang's keep index). kept: -1 none, 0 the running
 * slot, 1 + k track entry k. */
static kvc_status release_row(kvc_hybrid_req_pool *p, int32_t row, int32_t kept, bool donate, kvc_stream stream) {
  kvc_context *ctx = p->ctx;
  KVC_FORWARD(reserve(p, __func__, 1));
  int32_t ids[3];
  size_t nid = 0, w = 0;
  if (kept != 0) ids[nid++] = p->hmap[row];
  p->widx[w] = row, p->wval[w] = 0, w++;
  if (p->track) {
    const int64_t t = track_at(p, row);
    for (int32_t k = 0; k < p->pp; k++) {
      if (p->hmap[t + k] <= 0) continue; /* lazy -1 / none */
      if (kept == 1 + k) {
        if (donate) p->widx[w] = t + k, p->wval[w] = p->lazy ? -1 : 0, w++;
        continue;
      }
      ids[nid++] = p->hmap[t + k];
      p->widx[w] = t + k, p->wval[w] = p->lazy ? -1 : 0, w++;
    }
  }
  for (size_t i = 0; i < nid; i++) {
    KVC_RETURN_IF(!kvc_mamba_pool_is_held(p->mp, ids[i]), ctx, KVC_ERR_MISUSE,
                  "row %d: Mamba slot %d is no longer held (freed behind this pool's back?)", row, ids[i]);
    /* A slot mapped twice (caller-provided slots at alloc / set_track_slot) would make
     * kvc_mamba_pool_free fail AFTER the device mapping was written (found by
     * tests/fuzz/fuzz_flow_hybrid): refuse it before any change. */
    for (size_t j = 0; j < i; j++)
      KVC_RETURN_IF(ids[j] == ids[i], ctx, KVC_ERR_MISUSE, "row %d maps Mamba slot %d twice", row, ids[i]);
  }
  KVC_FORWARD(write_map(p, w, stream));
  kvc_status st = nid ? kvc_mamba_pool_free(p->mp, ids, nid) : KVC_OK;
  if (st != KVC_OK) return st;
  for (size_t j = 0; j < w; j++) p->hmap[p->widx[j]] = (int32_t)p->wval[j];
  return KVC_OK;
}

kvc_status kvc_hybrid_req_pool_free_mamba_cache(kvc_hybrid_req_pool *p, int32_t row, int32_t keep, kvc_stream stream) {
  KVC_API_ENTRY();
  HYB_ENTRY(p);
  p->undo_live = false;
  kvc_context *ctx = p->ctx;
  KVC_RETURN_IF(row < 1 || row > p->size, ctx, KVC_ERR_INVALID_ARGUMENT, "row %d outside [1, %d]", row, p->size);
  KVC_RETURN_IF(p->hmap[row] <= 0, ctx, KVC_ERR_MISUSE, "row %d holds no Mamba slot", row);
  KVC_RETURN_IF(keep < -1 || keep >= p->pp || (keep >= 0 && !p->track), ctx, KVC_ERR_INVALID_ARGUMENT,
                "keep %d must be -1 or a track index < pp %d", keep, p->pp);
  /* pp 1 with a keep frees no track entry: the only one is kept. */
  return release_row(p, row, keep < 0 ? -1 : 1 + (p->pp == 1 ? 0 : keep), false, stream);
}

kvc_status kvc__hybrid_req_pool_donate(kvc_hybrid_req_pool *p, int32_t row, int32_t kept, kvc_stream stream) {
  HYB_ENTRY(p);
  p->undo_live = false;
  KVC_RETURN_IF(row < 1 || row > p->size || p->hmap[row] <= 0, p->ctx, KVC_ERR_MISUSE, "row %d holds no Mamba slot",
                row);
  KVC_RETURN_IF(kept < -1 || kept > (p->track ? p->pp : 0) || (kept > 0 && p->hmap[track_at(p, row) + kept - 1] <= 0),
                p->ctx, KVC_ERR_INVALID_ARGUMENT, "row %d: no Mamba slot %d to keep", row, kept);
  return release_row(p, row, kept, true, stream);
}

kvc_status kvc_hybrid_req_pool_set_track_slot(kvc_hybrid_req_pool *p, int32_t row, int32_t index, int32_t slot,
                                              kvc_stream stream) {
  KVC_API_ENTRY();
  HYB_ENTRY(p);
  p->undo_live = false;
  kvc_context *ctx = p->ctx;
  KVC_RETURN_IF(!p->track, ctx, KVC_ERR_UNSUPPORTED, "the pool has no track buffers");
  KVC_RETURN_IF(row < 1 || row > p->size || index < 0 || index >= p->pp, ctx, KVC_ERR_INVALID_ARGUMENT,
                "row %d / index %d out of range", row, index);
  KVC_RETURN_IF(slot == 0 || slot < -1 || (slot > 0 && !kvc_mamba_pool_is_held(p->mp, slot)), ctx, KVC_ERR_MISUSE,
                "slot %d is neither -1 nor a held Mamba slot", slot);
  KVC_FORWARD(reserve(p, __func__, 1));
  p->widx[0] = track_at(p, row) + index, p->wval[0] = slot;
  KVC_FORWARD(write_map(p, 1, stream));
  p->hmap[p->widx[0]] = slot;
  return KVC_OK;
}

int32_t kvc_hybrid_req_pool_mamba_slot(const kvc_hybrid_req_pool *p, int32_t row) {
  if (!p || p->magic != KVC__HYBRID_MAGIC || row < 0 || row > p->size) return 0;
  return p->hmap[row];
}

const int32_t *kvc_hybrid_req_pool_track_slots(const kvc_hybrid_req_pool *p, int32_t row) {
  if (!p || p->magic != KVC__HYBRID_MAGIC || !p->track || row < 0 || row > p->size) return NULL;
  return p->hmap + track_at(p, row);
}

const int32_t *kvc_hybrid_req_pool_mapping(const kvc_hybrid_req_pool *p) {
  return p && p->magic == KVC__HYBRID_MAGIC ? p->dmap : NULL;
}

const int32_t *kvc_hybrid_req_pool_track_mapping(const kvc_hybrid_req_pool *p) {
  return p && p->magic == KVC__HYBRID_MAGIC && p->track ? p->dmap + (p->size + 1) : NULL;
}

kvc_status kvc_hybrid_req_pool_get_mamba_indices(const kvc_hybrid_req_pool *pc, const void *rows,
                                                 kvc_index_type rows_type, int32_t *out, size_t n, kvc_stream stream) {
  KVC_API_ENTRY();
  HYB_ENTRY(pc);
  kvc_hybrid_req_pool *p = (kvc_hybrid_req_pool *)pc; /* memoised kernel lookup only */
  KVC_CHECK_INDEX_TYPE(p->ctx, rows_type);
  if (!n) return KVC_OK;
  KVC_RETURN_IF(!rows || !out, p->ctx, KVC_ERR_INVALID_ARGUMENT, "rows and out must be non-NULL");
  const kvc__swa_gather_args g = {.map = p->dmap,
                                  .map_len = p->size + 1,
                                  .in = rows,
                                  .out = out,
                                  .n = n,
                                  .oob = 0,
                                  .in_i64 = rows_type == KVC_INDEX_I64};
  return kvc__swa_gather(p->ctx, &p->k_gather, &g, stream);
}

kvc_status kvc_hybrid_req_pool_clear(kvc_hybrid_req_pool *p, kvc_stream stream) {
  KVC_API_ENTRY();
  HYB_ENTRY(p);
  p->undo_live = false;
  KVC_FORWARD(kvc__dev_memset(p->ctx, p->dmap, 0, (size_t)p->len * 4, stream));
  kvc_status st = kvc_req_to_token_pool_clear(p->rp);
  KVC_CLEANUP_KEEP_FIRST(kvc_mamba_pool_clear(p->mp), st);
  memset(p->hmap, 0, (size_t)p->len * 4);
  return st;
}

kvc_req_to_token_pool *kvc_hybrid_req_pool_req_pool(const kvc_hybrid_req_pool *pool) {
  return pool && pool->magic == KVC__HYBRID_MAGIC ? pool->rp : NULL;
}

kvc_mamba_pool *kvc_hybrid_req_pool_mamba_pool(const kvc_hybrid_req_pool *pool) {
  return pool && pool->magic == KVC__HYBRID_MAGIC ? pool->mp : NULL;
}
