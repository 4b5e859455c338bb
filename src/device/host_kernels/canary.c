/* C reference of kernels/canary.cu. */
#include "host_kernels.h"

static const uint32_t *canary_words(const kvc_p_canary *p) {
  return p->staged ? KVC_HPTR(const uint32_t *, p->staged) : KVC_INLINE_PAYLOAD(p);
}

void kvc_host_canary_fill(const void *params) {
  const kvc_p_canary *p = params;
  const uint32_t *w = canary_words(p);
  for (int64_t i = 0; i < p->n; i++) {
    for (int32_t bi = 0; bi < p->nbuf; bi++) {
      const kvc_canary_buf *b = &p->buf[bi];
      int64_t slot = (int64_t)(int32_t)w[i];
      if (slot < 0 || slot >= b->rows) continue;
      unsigned char *row = KVC_HPTR(unsigned char *, b->base) + slot * b->row_bytes;
      for (int64_t t = 0; t < b->row_bytes; t++) row[t] = (unsigned char)KVC_CANARY_BYTE;
    }
  }
}

void kvc_host_canary_check(const void *params) {
  const kvc_p_canary *p = params;
  const uint32_t *w = canary_words(p);
  uint64_t *result = KVC_HPTR(uint64_t *, p->result);
  for (int64_t i = 0; i < p->n; i++) {
    for (int32_t bi = 0; bi < p->nbuf; bi++) {
      const kvc_canary_buf *b = &p->buf[bi];
      int64_t slot = (int64_t)(int32_t)w[i];
      if (slot < 0 || slot >= b->rows) continue;
      const unsigned char *row = KVC_HPTR(const unsigned char *, b->base) + slot * b->row_bytes;
      uint64_t bad = 0;
      for (int64_t t = 0; t < b->row_bytes; t++) bad += row[t] != (unsigned char)KVC_CANARY_BYTE;
      if (bad) {
        uint64_t rev = ~0ull - (uint64_t)(i * p->nbuf + bi);
        result[0] += bad;
        if (rev > result[1]) result[1] = rev;
      }
    }
  }
}
