/*
 * mamba_copy.c — the Mamba pool's state launches: zeroing, copies between slots, host
 * offload. Each is ONE launch over all state tensors and layers whose slot ids ride in
 * the kernel's parameter block (kvc__plan: inline up to 8000 ids, else one staged
 * upload).
 *
 * copy_from with overlapping src/dst sets must read every source before any target is
 * written. The host knows both sets, so it picks: disjoint -> the plain row copy (any
 * order is fine, full bandwidth); overlapping -> kvc_mamba_copy_staged, where one CTA
 * owns a (tensor, layer, byte tile) and stages that tile of all n sources in shared
 * memory before writing (n <= 2048 so that a tile is at least 16 bytes; 64 KB of tiles).
 */
#include "mamba.h"

#include <string.h>

extern const kvc__kernel_def kvc__k_mamba_rows;
extern const kvc__kernel_def kvc__k_mamba_copy_staged;

/* --- Launches ---------------------------------------------------------------------- */

static int vec_index(int vec) { return vec == 16 ? 4 : vec == 8 ? 3 : vec == 4 ? 2 : vec == 2 ? 1 : 0; }

/* Before any staging reservation: it holds the context lock, which a kernel lookup also
 * takes. */
kvc_status kvc__mamba_ensure_kernels(kvc_mamba_pool *p, int kernel, int vec) {
  const kvc__kfunc **kc = p->kc[kernel][vec_index(vec)];
  kvc__spec spec = {1, {{"KVC_MAMBA_VEC", vec}}};
  return kvc__plan_prefetch(p->ctx, kernel ? &kvc__k_mamba_copy_staged : &kvc__k_mamba_rows, &spec, kc);
}

kvc_status kvc__mamba_launch(kvc_mamba_pool *p, const kvc__mamba_op *op, kvc_stream stream) {
  const size_t n = op->n;
  if (n == 0) return KVC_OK;
  const bool staged_copy = op->staged_copy;
  const int32_t *const a = op->a, *const b = op->b;
  const int vec = op->vec;
  const int kernel = staged_copy ? 1 : 0;
  KVC_FORWARD(kvc__mamba_ensure_kernels(p, kernel, vec));
  kvc_p_mamba_rows h;
  memset(&h, 0, sizeof h);
  h.host = (uint64_t)(uintptr_t)op->host;
  h.n = (int64_t)n;
  h.slots = (int64_t)p->size + 1;
  h.mode = op->mode;
  h.nseg = p->nstate;
  h.vec = vec;
  if (staged_copy) {
    /* The widest power-of-two tile with n tiles in KVC_MAMBA_STAGED_TILE_BYTES (a
     * 256-pair copy stages 256-byte row pieces, like the KV move: three CTAs per
     * multiprocessor); at least 16 bytes, as n <= KVC__MAMBA_STAGED_MAX_PAIRS */
    h.tile = 16;
    while (h.tile < KVC_MAMBA_TILE && (int64_t)n * h.tile * 2 <= KVC_MAMBA_STAGED_TILE_BYTES) h.tile *= 2;
  } else {
    h.tile = KVC_MAMBA_TILE;
  }
  int64_t units = 0, host_off = 0;
  for (int s = 0; s < p->nstate; s++) {
    const mamba_tensor *t = &p->t[s];
    kvc_mamba_seg *g = &h.seg[s];
    g->base = (uint64_t)(uintptr_t)t->base;
    g->layer_pitch = t->layer_pitch;
    g->row_bytes = t->row_bytes;
    g->host_off = host_off;
    g->layers = p->L;
    g->tiles = (int32_t)((t->row_bytes + h.tile - 1) / h.tile);
    host_off += (int64_t)p->L * (int64_t)n * t->row_bytes;
    h.unit_first[s] = units;
    units += (int64_t)p->L * g->tiles * (staged_copy ? 1 : (int64_t)n);
  }
  h.unit_first[p->nstate] = units;
  const size_t words = b ? 2 * n : n;
  kvc__plan plan;
  KVC_FORWARD(kvc__plan_begin(p->ctx, &plan, p->scratch, sizeof h, words));
  for (size_t i = 0; i < n; i++) plan.payload[i] = (uint32_t)a[i];
  if (b)
    for (size_t i = 0; i < n; i++) plan.payload[n + i] = (uint32_t)b[i];
  h.staged = plan.staged_dev;
  kvc__spec extra = {0};
  extra.def[0].name = "KVC_MAMBA_VEC";
  extra.def[0].value = vec;
  extra.count = 1;
  int64_t grid = (int64_t)kvc__num_sms(p->ctx) * (staged_copy ? 4 : 8);
  if (grid > units) grid = units;
  const unsigned smem = staged_copy ? (unsigned)((int64_t)n * h.tile + 8 * (int64_t)n) : 0;
  return kvc__plan_launch_smem(p->ctx, &plan, kernel ? &kvc__k_mamba_copy_staged : &kvc__k_mamba_rows, &extra,
                               p->kc[kernel][vec_index(vec)], kvc__dim((unsigned)grid, 1, 1),
                               kvc__dim(KVC_MAMBA_BLOCK, 1, 1), smem, stream, &h);
}

static kvc_status check_ids(const kvc_mamba_pool *p, const char *fn, const char *what, const int32_t *ids, size_t n) {
  if (n && !ids) return kvc__error(p->ctx, KVC_ERR_INVALID_ARGUMENT, fn, "%s is NULL with n = %zu", what, n);
  for (size_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] > p->size)
      return kvc__error(p->ctx, KVC_ERR_INVALID_ARGUMENT, fn, "%s[%zu] = %d outside [0, %d]", what, i, ids[i], p->size);
  return KVC_OK;
}

/* --- State operations -------------------------------------------------------------- */

kvc_status kvc_mamba_pool_clear_slots(kvc_mamba_pool *pool, const int32_t *slots, size_t n, kvc_stream stream) {
  KVC_API_ENTRY();
  KVC__MAMBA_ENTRY(pool);
  if (n == 0) return KVC_OK;
  KVC_FORWARD(check_ids(pool, __func__, "slots", slots, n));
  const kvc__mamba_op op = {.mode = KVC_MAMBA_ZERO, .a = slots, .n = n, .vec = pool->vec};
  return kvc__mamba_launch(pool, &op, stream);
}

kvc_status kvc_mamba_pool_copy_from(kvc_mamba_pool *pool, const int32_t *src, const int32_t *dst, size_t n,
                                    kvc_stream stream) {
  KVC_API_ENTRY();
  KVC__MAMBA_ENTRY(pool);
  if (n == 0) return KVC_OK;
  KVC_FORWARD(check_ids(pool, __func__, "src", src, n));
  KVC_FORWARD(check_ids(pool, __func__, "dst", dst, n));
  /* Mark targets (rejecting duplicates), drop identity pairs, then look for sources
   * that are also targets. Marks are cleared before returning on every path. */
  kvc_status st = KVC_OK;
  size_t i = 0, m = 0;
  for (; i < n; i++) {
    if (pool->flag[dst[i]] & FL_MARK_DST) {
      st = kvc__error(pool->ctx, KVC_ERR_INVALID_ARGUMENT, __func__, "dst[%zu] = %d listed twice", i, dst[i]);
      break;
    }
    pool->flag[dst[i]] |= FL_MARK_DST;
  }
  bool overlap = false;
  if (st == KVC_OK) {
    int32_t *a = pool->tmp, *b = pool->tmp + (pool->size + 1);
    for (size_t j = 0; j < n; j++) {
      if (src[j] == dst[j]) continue;
      overlap = overlap || (pool->flag[src[j]] & FL_MARK_DST);
      a[m] = src[j];
      b[m] = dst[j];
      m++;
    }
  }
  for (size_t j = 0; j < i; j++) pool->flag[dst[j]] &= (uint8_t)~FL_MARK_DST;
  if (st != KVC_OK || m == 0) return st;
  KVC_RETURN_IF(overlap && m > KVC__MAMBA_STAGED_MAX_PAIRS, pool->ctx, KVC_ERR_UNSUPPORTED,
                "%zu overlapping pairs: at most %d per call (split into disjoint calls)", m,
                KVC__MAMBA_STAGED_MAX_PAIRS);
  const kvc__mamba_op op = {.mode = KVC_MAMBA_COPY,
                            .staged_copy = overlap,
                            .a = pool->tmp,
                            .b = pool->tmp + (pool->size + 1),
                            .n = m,
                            .vec = pool->vec};
  return kvc__mamba_launch(pool, &op, stream);
}

/* --- Host offload ------------------------------------------------------------------ */

kvc_status kvc_mamba_pool_host_copy_bytes(const kvc_mamba_pool *pool, size_t n, size_t *bytes) {
  KVC_API_ENTRY();
  KVC__MAMBA_ENTRY(pool);
  KVC_RETURN_IF(!bytes, pool->ctx, KVC_ERR_INVALID_ARGUMENT, "bytes is NULL");
  size_t per = 0, total = 0, tensor;
  bool fits = true;
  for (int s = 0; s < pool->nstate && fits; s++)
    fits = kvc__mul_size((size_t)pool->t[s].row_bytes, (size_t)pool->L, &tensor) && kvc__add_size(per, tensor, &per);
  KVC_RETURN_IF(!fits || !kvc__mul_size(per, n, &total), pool->ctx, KVC_ERR_INVALID_ARGUMENT, "n = %zu overflows", n);
  *bytes = total;
  return KVC_OK;
}

static kvc_status offload(kvc_mamba_pool *pool, const char *fn, int mode, const int32_t *slots, size_t n, void *host,
                          kvc_stream stream) {
  if (n == 0) return KVC_OK;
  KVC_RETURN_IF(!host, pool->ctx, KVC_ERR_INVALID_ARGUMENT, "host is NULL");
  KVC_FORWARD(check_ids(pool, fn, "slots", slots, n));
  KVC_RETURN_IF(n > (size_t)INT32_MAX, pool->ctx, KVC_ERR_INVALID_ARGUMENT, "n = %zu too large", n);
  int vec = pool->vec;
  while (vec > 1 && ((uintptr_t)host % (uintptr_t)vec)) vec >>= 1;
  const kvc__mamba_op op = {.mode = mode, .a = slots, .n = n, .host = host, .vec = vec};
  return kvc__mamba_launch(pool, &op, stream);
}

kvc_status kvc_mamba_pool_copy_to_host(kvc_mamba_pool *pool, const int32_t *slots, size_t n, void *host,
                                       kvc_stream stream) {
  KVC_API_ENTRY();
  KVC__MAMBA_ENTRY(pool);
  return offload(pool, __func__, KVC_MAMBA_TO_HOST, slots, n, host, stream);
}

kvc_status kvc_mamba_pool_copy_from_host(kvc_mamba_pool *pool, const int32_t *slots, size_t n, const void *host,
                                         kvc_stream stream) {
  KVC_API_ENTRY();
  KVC__MAMBA_ENTRY(pool);
  return offload(pool, __func__, KVC_MAMBA_FROM_HOST, slots, n, (void *)(uintptr_t)host, stream);
}
