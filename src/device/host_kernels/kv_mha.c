/* C reference of kernels/kv_store.cu, kv_move.cu and kv_offload.cu. The row kernel's
 * specialisation constants (compile-time defines on CUDA) come from the kernel's spec,
 * which the launch hands to this twin with the parameter block. */
#include "host_kernels.h"
#include "kvc_numeric.h"

#include <stdlib.h>
#include <string.h>

#define DT_FP4 10

static int chunk_bytes(int dt, int g) {
  return dt == DT_FP4 ? g / 2 : dt == KVC_DT_F32 ? 4 * g : (dt == KVC_DT_F16 || dt == KVC_DT_BF16) ? 2 * g : g;
}

/* One chunk, same arithmetic as convert_chunk() in kv_store.cu. */
static void convert(int src_dt, int dst_dt, int g, int gather, const uint8_t *in, uint8_t in_scale, float div,
                    uint8_t *out, uint8_t *out_scale) {
  if (src_dt == dst_dt) {
    memcpy(out, in, (size_t)chunk_bytes(src_dt, g));
    return;
  }
  float f[16];
  if (src_dt == DT_FP4) {
    const float s = kvc_pow2f((int32_t)in_scale - 127);
    for (int e = 0; e < g; e++) f[e] = kvc_fp4_decode((uint8_t)((in[e / 2] >> (4 * (e & 1))) & 0xfu)) * s;
  } else {
    for (int e = 0; e < g; e++) f[e] = kvc_load_as_f32(in, e, src_dt);
  }
  if (!gather)
    for (int e = 0; e < g; e++) f[e] = f[e] / div;
  if (dst_dt == DT_FP4) {
    float amax = 0.0f;
    for (int e = 0; e < g; e++) {
      const float a = f[e] < 0.0f ? -f[e] : f[e];
      amax = a > amax ? a : amax;
    }
    const int32_t ex = kvc_fp4_block_exponent(amax);
    const float inv = kvc_pow2f(-ex);
    for (int j = 0; j < g / 2; j++)
      out[j] = (uint8_t)(kvc_fp4_encode(f[2 * j] * inv) | (kvc_fp4_encode(f[2 * j + 1] * inv) << 4));
    *out_scale = (uint8_t)(ex + 127);
  } else {
    for (int e = 0; e < g; e++) kvc_store_from_f32(out, e, dst_dt, f[e]);
  }
}

/* The row kernel's variant, as kv_store.cu's KVC_* defines. */
typedef struct kv_spec {
  int32_t gather, src_dt, dst_dt, g, kch, vch;
} kv_spec;

void kvc_host_kv_rows(const void *params, const kvc__spec *spec) {
  const kvc_p_kv_rows *p = params;
  const kv_spec vs = {(int32_t)kvc__spec_value(spec, "KVC_GATHER", 0), (int32_t)kvc__spec_value(spec, "KVC_SRC_DT", 0),
                      (int32_t)kvc__spec_value(spec, "KVC_DST_DT", 0), (int32_t)kvc__spec_value(spec, "KVC_G", 1),
                      (int32_t)kvc__spec_value(spec, "KVC_KCH", 0),    (int32_t)kvc__spec_value(spec, "KVC_VCH", 0)};
  const kv_spec *sp = &vs;
  const int sb = chunk_bytes(sp->src_dt, sp->g), db = chunk_bytes(sp->dst_dt, sp->g);
  float kdiv = 1.0f, vdiv = 1.0f;
  if (!sp->gather && sp->src_dt != sp->dst_dt) {
    kdiv = p->k_scale_ptr ? *KVC_HPTR(const float *, p->k_scale_ptr) : p->k_scale;
    vdiv = p->v_scale_ptr ? *KVC_HPTR(const float *, p->v_scale_ptr) : p->v_scale;
  }
  uint8_t in[64], out[64];
  for (int64_t i = 0; i < p->n; i++) {
    int64_t slot = kvc_load_index(p->loc, i, p->loc_i64);
    const int valid = slot >= 0 && slot < p->rows;
    for (int side = 0; side < 2; side++) {
      const int64_t nch = side ? sp->vch : sp->kch;
      /* No chunks on this side (no V region: MLA, MLA FP4, NSA; a K-only gather; an MLA
       * set_kv's ignored v): its addresses may be 0, so form no pointer from them. */
      if (nch == 0) continue;
      uint8_t *dense =
          KVC_HPTR(uint8_t *, side ? p->v_dense : p->k_dense) + i * (side ? p->v_dense_stride : p->k_dense_stride);
      uint8_t *pool = valid ? KVC_HPTR(uint8_t *, side ? p->v_pool : p->k_pool) +
                                  slot * (side ? p->v_pool_stride : p->k_pool_stride)
                            : NULL;
      uint8_t *pscale = valid && (side ? p->v_pool_scale : p->k_pool_scale)
                            ? KVC_HPTR(uint8_t *, side ? p->v_pool_scale : p->k_pool_scale) +
                                  slot * (side ? p->v_scale_stride : p->k_scale_stride)
                            : NULL;
      for (int64_t r = 0; r < nch; r++) {
        if (sp->gather) {
          if (!valid) {
            memset(dense + r * db, 0, (size_t)db);
            continue;
          }
          memcpy(in, pool + r * sb, (size_t)sb);
          convert(sp->src_dt, sp->dst_dt, sp->g, 1, in, pscale ? pscale[r] : 0, 1.0f, out, NULL);
          memcpy(dense + r * db, out, (size_t)db);
        } else {
          if (!valid) continue;
          uint8_t s = 0;
          memcpy(in, dense + r * sb, (size_t)sb);
          convert(sp->src_dt, sp->dst_dt, sp->g, 0, in, 0, side ? vdiv : kdiv, out, &s);
          memcpy(pool + r * db, out, (size_t)db);
          /* An FP4 pool always has its scale region (src/kv/kv_mha.c pool_side); like the
           * gather side above, only a present region is touched. */
          if (sp->dst_dt == DT_FP4 && pscale) pscale[r] = s;
        }
      }
    }
  }
}

static int64_t seg_offset(const kvc_kv_seg *s, int64_t slot) {
  if (s->page_size) {
    int64_t q = slot / s->page_size;
    return q * s->page_pitch + s->page_off + (slot - q * s->page_size) * s->slot_pitch;
  }
  return slot * s->slot_pitch;
}

/* Move: per (segment, layer), chunk by chunk: gather all sources, then scatter. */
void kvc_host_kv_move(const void *params) {
  const kvc_p_kv_move *p = params;
  int64_t max_row = 0;
  for (int g = 0; g < p->nseg; g++) max_row = p->seg[g].row_bytes > max_row ? p->seg[g].row_bytes : max_row;
  const int64_t chunk = p->n < p->chunk ? p->n : p->chunk;
  if (chunk <= 0 || max_row <= 0) return;              /* nothing to copy */
  uint8_t *tmp = KVC_HPTR(uint8_t *, p->host_scratch); /* chunk x max_row bytes (kv_move.c) */
  for (int g = 0; g < p->nseg; g++) {
    const kvc_kv_seg *s = &p->seg[g];
    for (int32_t l = 0; l < s->layers; l++) {
      uint8_t *base = KVC_HPTR(uint8_t *, s->base) + (int64_t)l * s->layer_pitch;
      for (int64_t c0 = 0; c0 < p->n; c0 += p->chunk) {
        const int64_t cnt = p->n - c0 < p->chunk ? p->n - c0 : p->chunk;
        for (int64_t i = 0; i < cnt; i++) {
          int64_t src = kvc_load_index(p->src, c0 + i, p->loc_i64);
          if (src >= 0 && src < s->limit)
            memcpy(tmp + i * s->row_bytes, base + seg_offset(s, src), (size_t)s->row_bytes);
        }
        for (int64_t i = 0; i < cnt; i++) {
          int64_t src = kvc_load_index(p->src, c0 + i, p->loc_i64);
          int64_t tgt = kvc_load_index(p->tgt, c0 + i, p->loc_i64);
          if (src < 0 || src >= s->limit || tgt < 0 || tgt >= s->limit) continue;
          memcpy(base + seg_offset(s, tgt), tmp + i * s->row_bytes, (size_t)s->row_bytes);
        }
      }
    }
  }
}

void kvc_host_kv_offload(const void *params) {
  const kvc_p_kv_offload *p = params;
  for (int g = 0; g < p->nseg; g++) {
    const kvc_kv_seg *s = &p->seg[g];
    for (int64_t l = 0; l < s->layers; l++) {
      for (int64_t i = 0; i < s->count; i++) {
        int64_t slot = kvc_load_index(p->loc, s->by_page ? i * s->page_size : i, p->loc_i64);
        /* Range check first, in unsigned (a negative slot is huge), then the offset: a
         * slot near INT64_MIN / INT64_MAX times the pitch would overflow, and only an
         * in-range slot's row offset is known to fit. Same as kernels/kv_offload.cu. */
        const int64_t row = s->by_page ? (slot >= 0 ? slot / s->page_size : -1) : slot;
        const int valid = (uint64_t)row < (uint64_t)s->limit;
        const int64_t off = valid ? row * (s->by_page ? s->page_pitch : s->slot_pitch) : 0;
        uint8_t *dev = KVC_HPTR(uint8_t *, s->base) + l * s->layer_pitch + off;
        uint8_t *host = KVC_HPTR(uint8_t *, p->host) + s->host_off + (l * s->count + i) * s->row_bytes;
        if (p->dir == 0) {
          if (valid) memcpy(host, dev, (size_t)s->row_bytes);
          else memset(host, 0, (size_t)s->row_bytes);
        } else if (valid) {
          memcpy(dev, host, (size_t)s->row_bytes);
        }
      }
    }
  }
}
