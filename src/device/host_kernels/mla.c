/* C reference of kernels/mla.cu and kernels/nsa_index.cu: the same arithmetic
 * (kernels/kvc_mla.h), element by element, in row order. */
#include "host_kernels.h"
#include "kvc_mla.h"

#include <string.h>

static uint32_t ld_raw(const unsigned char *p, int es) {
  uint32_t v = 0;
  if (es == 4) memcpy(&v, p, 4);
  else if (es == 2) {
    uint16_t h;
    memcpy(&h, p, 2);
    v = h;
  } else v = *p;
  return v;
}

static void st_raw(unsigned char *p, int es, uint32_t v) {
  if (es == 4) memcpy(p, &v, 4);
  else if (es == 2) {
    uint16_t h = (uint16_t)v;
    memcpy(p, &h, 2);
  } else *p = (unsigned char)v;
}

/* Address of element e of row i of the concatenated [nope | rope] view, or NULL. */
static unsigned char *part_addr(const kvc_p_mla *p, int64_t i, int64_t e, int es) {
  if (e < p->R) return p->nope ? KVC_HPTR(unsigned char *, p->nope) + (i * p->nope_stride + e) * es : NULL;
  return p->rope ? KVC_HPTR(unsigned char *, p->rope) + (i * p->rope_stride + (e - p->R)) * es : NULL;
}

static void rows_set(const kvc_p_mla *p) {
  const int ss = KVC_DT_BYTES(p->src_dt), ds = KVC_DT_BYTES(p->dst_dt);
  unsigned char *kv = KVC_HPTR(unsigned char *, p->kv);
  for (int64_t i = 0; i < p->n; i++) {
    const int64_t loc = kvc_load_index(p->loc, i, p->loc_i64);
    if (loc < 0 || loc >= p->num_rows) continue;
    for (int64_t e = 0; e < (int64_t)p->R + p->Q; e++) {
      uint32_t raw = ld_raw(part_addr(p, i, e, ss), ss);
      st_raw(kv + (loc * p->kv_stride + e) * ds, ds, kvc_convert_raw(raw, p->src_dt, p->dst_dt));
    }
  }
}

static void rows_get(const kvc_p_mla *p) {
  const int ss = KVC_DT_BYTES(p->src_dt), ds = KVC_DT_BYTES(p->dst_dt);
  const unsigned char *kv = KVC_HPTR(const unsigned char *, p->kv);
  for (int64_t i = 0; i < p->n; i++) {
    const int64_t loc = kvc_load_index(p->loc, i, p->loc_i64);
    const int ok = loc >= 0 && loc < p->num_rows;
    for (int64_t e = 0; e < (int64_t)p->R + p->Q; e++) {
      unsigned char *dst = part_addr(p, i, e, ds);
      if (!dst) continue;
      uint32_t v = ok ? kvc_convert_raw(ld_raw(kv + (loc * p->kv_stride + e) * ss, ss), p->src_dt, p->dst_dt) : 0;
      st_raw(dst, ds, v);
    }
  }
}

static void fp4_set(const kvc_p_mla *p) {
  const int ss = KVC_DT_BYTES(p->src_dt);
  const int64_t nb = ((int64_t)p->R + p->Q) / 16;
  for (int64_t i = 0; i < p->n; i++) {
    const int64_t loc = kvc_load_index(p->loc, i, p->loc_i64);
    if (loc < 0 || loc >= p->num_rows) continue;
    for (int64_t b = 0; b < nb; b++) {
      float v[16];
      for (int k = 0; k < 16; k++) v[k] = kvc_raw_to_f32(ld_raw(part_addr(p, i, 16 * b + k, ss), ss), p->src_dt);
      uint8_t packed[8];
      const uint8_t sb = kvc_fp4_quant16(v, packed);
      memcpy(KVC_HPTR(unsigned char *, p->kv) + loc * p->kv_stride + 8 * b, packed, 8);
      KVC_HPTR(unsigned char *, p->kv_scale)[loc * p->scale_stride + b] = sb;
    }
  }
}

static void fp4_get(const kvc_p_mla *p) {
  const int ds = KVC_DT_BYTES(p->dst_dt);
  const int64_t nb = ((int64_t)p->R + p->Q) / 16;
  for (int64_t i = 0; i < p->n; i++) {
    const int64_t loc = kvc_load_index(p->loc, i, p->loc_i64);
    const int ok = loc >= 0 && loc < p->num_rows;
    for (int64_t b = 0; b < nb; b++) {
      const unsigned char *data = ok ? KVC_HPTR(const unsigned char *, p->kv) + loc * p->kv_stride + 8 * b : NULL;
      const float s =
          ok ? kvc_fp4_scale_value(KVC_HPTR(const unsigned char *, p->kv_scale)[loc * p->scale_stride + b]) : 0.0f;
      for (int k = 0; k < 16; k++) {
        unsigned char *dst = part_addr(p, i, 16 * b + k, ds);
        if (!dst) continue;
        const float v = ok ? kvc_fp4_decode((uint8_t)((data[k >> 1] >> ((k & 1) * 4)) & 0xfu)) * s : 0.0f;
        st_raw(dst, ds, kvc_f32_to_raw(v, p->dst_dt));
      }
    }
  }
}

static void nsa_set(const kvc_p_mla *p) {
  const int ss = KVC_DT_BYTES(p->src_dt);
  for (int64_t i = 0; i < p->n; i++) {
    const int64_t loc = kvc_load_index(p->loc, i, p->loc_i64);
    if (loc < 0 || loc >= p->num_rows) continue;
    unsigned char *row = KVC_HPTR(unsigned char *, p->kv) + loc * p->kv_stride;
    const unsigned char *nope = KVC_HPTR(const unsigned char *, p->nope) + i * p->nope_stride * ss;
    for (int t = 0; t < KVC_NSA_NOPE / KVC_NSA_TILE; t++) {
      float y[KVC_NSA_TILE], amax = 0.0f;
      for (int k = 0; k < KVC_NSA_TILE; k++) {
        y[k] = kvc_raw_to_f32(ld_raw(nope + (t * KVC_NSA_TILE + k) * ss, ss), p->src_dt);
        amax = kvc_amax_step(amax, y[k]);
      }
      const float s = kvc_nsa_scale(amax), inv = kvc_nsa_inv(s);
      for (int k = 0; k < KVC_NSA_TILE; k++) row[t * KVC_NSA_TILE + k] = kvc_nsa_code(y[k], inv);
      memcpy(row + KVC_NSA_SCALE_AT + 4 * t, &s, 4);
    }
    const unsigned char *rope = KVC_HPTR(const unsigned char *, p->rope) + i * p->rope_stride * ss;
    for (int k = 0; k < KVC_NSA_ROPE; k++)
      st_raw(row + KVC_NSA_ROPE_AT + 2 * k, 2, kvc_convert_raw(ld_raw(rope + k * ss, ss), p->src_dt, KVC_DT_BF16));
  }
}

static void nsa_get(const kvc_p_mla *p) {
  const int ds = KVC_DT_BYTES(p->dst_dt);
  for (int64_t i = 0; i < p->n; i++) {
    const int64_t loc = kvc_load_index(p->loc, i, p->loc_i64);
    const int ok = loc >= 0 && loc < p->num_rows;
    const unsigned char *row = ok ? KVC_HPTR(const unsigned char *, p->kv) + loc * p->kv_stride : NULL;
    if (p->nope) {
      unsigned char *out = KVC_HPTR(unsigned char *, p->nope) + i * p->nope_stride * ds;
      for (int k = 0; k < KVC_NSA_NOPE; k++) {
        float v = 0.0f;
        if (ok) {
          float s;
          memcpy(&s, row + KVC_NSA_SCALE_AT + 4 * (k / KVC_NSA_TILE), 4);
          v = kvc_nsa_decode(row[k], s);
        }
        st_raw(out + k * ds, ds, kvc_f32_to_raw(v, p->dst_dt));
      }
    }
    if (p->rope) {
      unsigned char *out = KVC_HPTR(unsigned char *, p->rope) + i * p->rope_stride * ds;
      for (int k = 0; k < KVC_NSA_ROPE; k++) {
        const float v = ok ? kvc_bf16_to_f32((uint16_t)ld_raw(row + KVC_NSA_ROPE_AT + 2 * k, 2)) : 0.0f;
        st_raw(out + k * ds, ds, kvc_f32_to_raw(v, p->dst_dt));
      }
    }
  }
}

void kvc_host_mla_set(const void *params) {
  const kvc_p_mla *p = params;
  if (p->mode == KVC_MLA_MODE_FP4) fp4_set(p);
  else if (p->mode == KVC_MLA_MODE_NSA) nsa_set(p);
  else rows_set(p);
}

void kvc_host_mla_get(const void *params) {
  const kvc_p_mla *p = params;
  if (p->mode == KVC_MLA_MODE_FP4) fp4_get(p);
  else if (p->mode == KVC_MLA_MODE_NSA) nsa_get(p);
  else rows_get(p);
}

/* --- NSA index-K pages ------------------------------------------------------------- */

void kvc_host_nsa_index_set(const void *params) {
  const kvc_p_nsa_index_set *p = params;
  const int64_t page_bytes = p->page_size * (KVC_NSA_INDEX_DIM + 4);
  for (int64_t i = 0; i < p->n; i++) {
    const int64_t loc = kvc_load_index(p->loc, i, p->loc_i64);
    if (loc < 0 || loc >= p->pages * p->page_size) continue;
    const int64_t page = loc / p->page_size, off = loc % p->page_size;
    unsigned char *pg = KVC_HPTR(unsigned char *, p->buf) + page * page_bytes;
    memcpy(pg + off * KVC_NSA_INDEX_DIM, KVC_HPTR(const unsigned char *, p->index_k) + i * KVC_NSA_INDEX_DIM,
           KVC_NSA_INDEX_DIM);
    memcpy(pg + p->page_size * KVC_NSA_INDEX_DIM + 4 * off, KVC_HPTR(const float *, p->scale) + i, 4);
  }
}

void kvc_host_nsa_index_get(const void *params) {
  const kvc_p_nsa_index_get *p = params;
  const int64_t page_bytes = p->page_size * (KVC_NSA_INDEX_DIM + 4);
  unsigned char *out_k = KVC_HPTR(unsigned char *, p->out_k), *out_s = KVC_HPTR(unsigned char *, p->out_s);
  int64_t off = 0;
  for (int64_t b = 0; b < p->batch; b++) {
    int64_t len = p->seq_lens ? KVC_HPTR(const int32_t *, p->seq_lens)[b] : p->single_len;
    if (len < 0) len = 0;
    for (int64_t t = 0; t < len && t < p->max_seq_len && off + t < p->seq_len_sum; t++) {
      const int64_t g = off + t, col = t / p->page_size, in = t % p->page_size;
      const int64_t page =
          col < p->table_width ? KVC_HPTR(const int32_t *, p->page_table)[b * p->table_width + col] : -1;
      const int ok = page >= 0 && page < p->pages;
      const unsigned char *pg = ok ? KVC_HPTR(const unsigned char *, p->buf) + page * page_bytes : NULL;
      if (out_k) {
        if (ok) memcpy(out_k + g * KVC_NSA_INDEX_DIM, pg + in * KVC_NSA_INDEX_DIM, KVC_NSA_INDEX_DIM);
        else memset(out_k + g * KVC_NSA_INDEX_DIM, 0, KVC_NSA_INDEX_DIM);
      }
      if (out_s) {
        if (ok) memcpy(out_s + g * 4, pg + p->page_size * KVC_NSA_INDEX_DIM + 4 * in, 4);
        else memset(out_s + g * 4, 0, 4);
      }
    }
    off += len;
  }
}
