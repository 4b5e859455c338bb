/*
 * kv_offload.c — host offload of a pool's rows (SGLang get_cpu_copy / load_cpu_copy)
 * without device-wide synchronisation: ONE kernel reads the slots' rows of every buffer
 * and writes them straight into the caller's pinned host memory (device-mapped through
 * unified addressing), and one kernel scatters them back. Stream-ordered: the host data
 * is valid once `stream` reaches the launch (the caller records an event or syncs).
 *
 * Host buffer layout (kvc_kv_pool_host_copy_bytes bytes):
 *
 *   for each buffer in describe() order (region kind, then layer):
 *     plain regions:  n rows of row_bytes          (row i = slot loc[i])
 *     NSA INDEX_K:    ceil(n/ps) pages of ps*132 B (page j = loc[j*ps] / ps)
 *
 * As SGLang (9.7), the index pages assume loc is page-aligned and page-contiguous
 * (runs of ps slots starting at a page boundary): page j is taken from loc[j*ps]. Rows of
 * invalid slots are zero-filled on the way out and skipped on the way in.
 *
 * The host memory must be pinned (kvc_host_pinned_alloc, or any page-locked memory
 * mapped into the device's address space under UVA). This file lays out the segments and
 * the host buffer; the launcher is src/ops/kv_segments.c (kernels/kv_offload.cu), its
 * kernel memoised in pool->kfunc[KVC__KV_MEMO_OFFLOAD].
 */
#include "kv_segments.h"

#include <string.h>

static kvc_status build(kvc_kv_pool *pool, const char *fn, size_t n, uint64_t host, kvc_p_kv_offload *p,
                        size_t *bytes) {
  memset(p, 0, sizeof *p);
  const int ns = kvc__kv_pool_segments(pool, fn, true, p->seg);
  if (ns < 0) return KVC_ERR_INTERNAL;
  KVC_RETURN_IF(n > (size_t)INT64_MAX, pool->ctx, KVC_ERR_INVALID_ARGUMENT, "n = %zu is too large", n);
  size_t off = 0;
  int64_t rows = 0;
  for (int i = 0; i < ns; i++) {
    kvc_kv_seg *s = &p->seg[i];
    const size_t ps = (size_t)s->page_size;
    s->count = s->by_page ? (int64_t)(n / ps + (n % ps != 0)) : (int64_t)n;
    s->host_off = off;
    p->row_first[i] = rows;
    int64_t seg_rows;
    size_t seg_bytes;
    KVC_RETURN_IF(!kvc__mul_i64(s->layers, s->count, &seg_rows) || !kvc__add_i64(rows, seg_rows, &rows) ||
                      !kvc__mul_size((size_t)seg_rows, (size_t)s->row_bytes, &seg_bytes) ||
                      !kvc__add_size(off, seg_bytes, &off),
                  pool->ctx, KVC_ERR_INVALID_ARGUMENT, "host copy of n = %zu slots overflows the size range", n);
    uint64_t v[3] = {(uint64_t)s->vec, host + s->host_off, (uint64_t)s->row_bytes};
    s->vec = kvc__align16(v, 3);
  }
  p->row_first[ns] = rows;
  p->nseg = ns;
  p->total_rows = rows;
  *bytes = off;
  return KVC_OK;
}

kvc_status kvc_kv_pool_host_copy_bytes(const kvc_kv_pool *pool, size_t n, size_t *bytes) {
  KVC_API_ENTRY();
  KVC_FORWARD(kvc__kv_pool_check(pool, __func__));
  KVC_RETURN_IF(!bytes, pool->ctx, KVC_ERR_INVALID_ARGUMENT, "bytes is NULL");
  KVC_RETURN_IF(pool->cfg.kind == KVC_KV_MHA_NOOP, pool->ctx, KVC_ERR_UNSUPPORTED, "a NoOp pool has no KV storage");
  kvc_p_kv_offload p;
  return build((kvc_kv_pool *)pool, __func__, n, 0, &p, bytes);
}

static kvc_status offload(kvc_kv_pool *pool, const char *fn, const void *loc, kvc_index_type loc_type, size_t n,
                          const void *host, int dir, kvc_stream stream) {
  KVC_FORWARD(kvc__kv_pool_check(pool, fn));
  kvc_context *ctx = pool->ctx;
  KVC_RETURN_IF(pool->cfg.kind == KVC_KV_MHA_NOOP, ctx, KVC_ERR_UNSUPPORTED, "a NoOp pool has no KV storage");
  KVC_CHECK_INDEX_TYPE(ctx, loc_type);
  if (n == 0) return KVC_OK;
  KVC_RETURN_IF(!loc || !host, ctx, KVC_ERR_INVALID_ARGUMENT, "loc and host must be non-NULL for n = %zu", n);
  kvc_p_kv_offload p;
  size_t bytes;
  KVC_FORWARD(build(pool, fn, n, KVC__ADDR(host), &p, &bytes));
  p.host = KVC__ADDR(host);
  p.loc = KVC__ADDR(loc);
  p.n = (int64_t)n;
  p.loc_i64 = loc_type == KVC_INDEX_I64;
  p.dir = dir;
  return kvc__kv_offload_launch(ctx, &p, &pool->kfunc[KVC__KV_MEMO_OFFLOAD], stream);
}

kvc_status kvc_kv_pool_copy_to_host(kvc_kv_pool *pool, const void *loc, kvc_index_type loc_type, size_t n, void *host,
                                    kvc_stream stream) {
  KVC_API_ENTRY();
  return offload(pool, __func__, loc, loc_type, n, host, 0, stream);
}

kvc_status kvc_kv_pool_copy_from_host(kvc_kv_pool *pool, const void *loc, kvc_index_type loc_type, size_t n,
                                      const void *host, kvc_stream stream) {
  KVC_API_ENTRY();
  return offload(pool, __func__, loc, loc_type, n, host, 1, stream);
}
