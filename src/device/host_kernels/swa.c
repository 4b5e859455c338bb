/*
 * swa.c — C reference of kernels/swa.cu (map writes and index gathers).
 */
#include "host_kernels.h"

void kvc_host_swa_map_write(const void *params) {
  const kvc_p_swa_map_write *p = params;
  const uint32_t *w = p->staged ? KVC_HPTR(const uint32_t *, p->staged) : KVC_INLINE_PAYLOAD(p);
  for (int64_t item = 0; item < p->count; item++) {
    int64_t idx, val, len, step;
    if (p->mode == KVC_SWA_MAP_PAIRS) {
      idx = w[2 * item], val = (int64_t)(int32_t)w[2 * item + 1], len = 1, step = 0;
    } else if (p->mode == KVC_SWA_MAP_RUNS) {
      idx = w[3 * item], val = (int64_t)(int32_t)w[3 * item + 1], len = w[3 * item + 2], step = 1;
    } else {
      idx = w[2 * item], val = 0, len = w[2 * item + 1], step = 0;
    }
    for (int64_t j = 0; j < len; j++) {
      const int64_t d = idx + j;
      if (d < 0 || d >= p->dst_len) continue;
      if (p->dst_i64) KVC_HPTR(int64_t *, p->dst)[d] = val + step * j;
      else KVC_HPTR(int32_t *, p->dst)[d] = (int32_t)(val + step * j);
    }
  }
}

void kvc_host_swa_gather(const void *params) {
  const kvc_p_swa_gather *p = params;
  for (int64_t i = 0; i < p->n; i++) {
    const int64_t x = kvc_load_index(p->in, i, p->in_i64);
    const int64_t v = kvc_map_lookup(p->map, p->map_i64, p->map_len, x, p->oob);
    if (p->out_i64) KVC_HPTR(int64_t *, p->out)[i] = v;
    else KVC_HPTR(int32_t *, p->out)[i] = (int32_t)v;
  }
}
