/*
 * flow_window.c — SWA window eviction (SGLang free_swa_out_of_window_slots): before a
 * step, the SWA side of every page that has left a request's sliding window goes back,
 * through the slot allocator's free_window (only SWA allocators have one), while the
 * full slots stay in the row.
 */
#include "flow.h"

kvc_status kvc_flow_free_swa_out_of_window(kvc_flow *f, kvc_req_state *r, int64_t pre_len, kvc_stream stream) {
  KVC_API_ENTRY();
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  KVC_RETURN_IF(!f->sa.ops->free_window, f->ctx, KVC_ERR_UNSUPPORTED, "the flow has no SWA allocator");
  KVC_RETURN_IF(!r, f->ctx, KVC_ERR_INVALID_ARGUMENT, "req is NULL");
  const int64_t ps = f->ps;
  KVC_RETURN_IF(r->cache_protected_len < 0 || r->cache_protected_len % ps, f->ctx, KVC_ERR_INVALID_ARGUMENT,
                "cache_protected_len %lld must be page aligned", (long long)r->cache_protected_len);
  KVC_RETURN_IF(pre_len < 0 || pre_len > r->kv_allocated_len, f->ctx, KVC_ERR_INVALID_ARGUMENT,
                "pre_len %lld outside [0, kv_allocated_len %lld]", (long long)pre_len, (long long)r->kv_allocated_len);
  if (f->cfg.sliding_window <= 0) return KVC_OK;
  const int64_t floor = kvc__flow_window_lo(f, r);
  int64_t evicted = KVC__MAX(r->swa_evicted_seqlen, floor);
  /* One page of margin keeps the radix insert boundary from becoming an SWA tombstone. */
  int64_t threshold = pre_len - f->cfg.sliding_window - (f->cfg.swa_drop_page_margin ? 0 : ps);
  int64_t next = KVC__MAX(evicted, threshold);
  if (ps > 1) next = next / ps * ps;
  kvc_status st = KVC_OK;
  if (next > evicted) {
    const size_t m = (size_t)(next - evicted);
    KVC_FORWARD(kvc_flow_row_slots(f, r->req_row, evicted, next, f->row_slots));
    /* The eviction is done whatever the observer (canary mode's refill of the SWA pages
     * just released) returns, so the request records it first. */
    const kvc__free_args x = {f->row_slots, m, 0, stream, __func__, &st};
    KVC_FORWARD(f->sa.ops->free_window(&f->sa, &x));
    evicted = next;
  }
  r->swa_evicted_seqlen = evicted;
  return st;
}

kvc_status kvc__flow_evict_windows(kvc_flow *f, kvc_req_state *const *reqs, size_t n, bool decode, kvc_stream stream) {
  if (!f->sa.ops->free_window || f->cfg.sliding_window <= 0) return KVC_OK;
  for (size_t i = 0; i < n; i++) {
    kvc_req_state *r = reqs[i];
    if (!r->req_row) continue;
    int64_t pre = decode ? r->seq_len : r->prefix_len;
    if (pre > r->kv_allocated_len) pre = r->kv_allocated_len;
    KVC_FORWARD(kvc_flow_free_swa_out_of_window(f, r, pre, stream));
  }
  return KVC_OK;
}

kvc_status kvc__flow_free_window(kvc_flow *f, const int64_t *slots, size_t n) {
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  KVC_RETURN_IF(!f->sa.ops->free_window, f->ctx, KVC_ERR_UNSUPPORTED, "the flow has no SWA allocator");
  if (!n) return KVC_OK;
  kvc_status st = KVC_OK; /* the observer's verdict: the release is done either way */
  const kvc__free_args x = {slots, n, 0, f->stream, __func__, &st};
  KVC_FORWARD(f->sa.ops->free_window(&f->sa, &x));
  if (st != KVC_OK && f->releasing) { /* as kvc_flow_free_slots: reported after the release */
    if (f->release_late == KVC_OK) f->release_late = st;
    return KVC_OK;
  }
  return st;
}
