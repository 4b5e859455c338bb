/* C reference of kernels/req_to_token.cu. */
#include "host_kernels.h"

void kvc_host_get_last_loc(const void *params) {
  const kvc_p_get_last_loc *p = params;
  const int rows_i64 = (p->flags & KVC_LAST_LOC_ROWS_I64) != 0, lens_i64 = (p->flags & KVC_LAST_LOC_LENS_I64) != 0;
  for (int64_t i = 0; i < p->n; i++) {
    int64_t row = kvc_load_index(p->rows, i, rows_i64);
    int64_t pre = kvc_load_index(p->prefix_lens, i, lens_i64);
    const int64_t v = kvc_last_loc(KVC_HPTR(const int32_t *, p->table), p->num_rows, p->row_stride, row, pre);
    if (lens_i64) KVC_HPTR(int64_t *, p->out)[i] = v;
    else KVC_HPTR(int32_t *, p->out)[i] = (int32_t)v;
  }
}

void kvc_host_write_req_to_token(const void *params) {
  const kvc_p_write_req_to_token *p = params;
  int32_t *table = KVC_HPTR(int32_t *, p->table);
  const int64_t *loc = KVC_HPTR(const int64_t *, p->out_cache_loc);
  int64_t off = 0;
  for (int64_t r = 0; r < p->n; r++) {
    int64_t pre = kvc_load_index(p->prefix_lens, r, p->lens_i64);
    int64_t seq = kvc_load_index(p->seq_lens, r, p->lens_i64);
    int64_t e = KVC_EXTEND_LEN(pre, seq);
    int64_t row = kvc_load_index(p->rows, r, p->rows_i64);
    if (row >= 0 && row < p->num_rows) {
      int32_t *dst = table + row * p->row_stride;
      uint64_t src_addr = p->prefix_ptrs ? KVC_HPTR(const uint64_t *, p->prefix_ptrs)[r] : 0;
      if (src_addr && pre > 0) {
        const int64_t *src = KVC_HPTR(const int64_t *, src_addr);
        for (int64_t t = 0; t < pre && t < p->row_stride; t++) dst[t] = (int32_t)src[t];
      }
      for (int64_t t = 0; t < e; t++) {
        int64_t pos = pre + t;
        if (pos >= 0 && pos < p->row_stride) dst[pos] = (int32_t)loc[off + t];
      }
    }
    off += e;
  }
}

void kvc_host_row_write(const void *params) {
  const kvc_p_row_write *p = params;
  const uint32_t *w = p->staged ? KVC_HPTR(const uint32_t *, p->staged) : KVC_INLINE_PAYLOAD(p);
  int32_t *dst = KVC_HPTR(int32_t *, p->table) + p->offset;
  for (int32_t i = 0; i < p->n; i++) dst[i] = (int32_t)w[i];
}
