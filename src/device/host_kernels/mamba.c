/* C reference of kernels/mamba.cu: the same units, bounds and staging rules, byte-wise. */
#include "host_kernels.h"

#include <string.h>

static const uint32_t *mamba_ids(const kvc_p_mamba_rows *p) {
  return p->staged ? KVC_HPTR(const uint32_t *, p->staged) : KVC_INLINE_PAYLOAD(p);
}

void kvc_host_mamba_rows(const void *params) {
  const kvc_p_mamba_rows *p = params;
  const uint32_t *ids = mamba_ids(p);
  for (int s = 0; s < p->nseg; s++) {
    const kvc_mamba_seg *g = &p->seg[s];
    for (int64_t l = 0; l < g->layers; l++) {
      unsigned char *lb = KVC_HPTR(unsigned char *, g->base) + l * g->layer_pitch;
      for (int64_t i = 0; i < p->n; i++) {
        const int64_t row = l * p->n + i;
        if (p->mode == KVC_MAMBA_ZERO) {
          const int64_t id = ids[i];
          if (id < 0 || id >= p->slots) continue;
          memset(lb + id * g->row_bytes, 0, (size_t)g->row_bytes);
        } else if (p->mode == KVC_MAMBA_COPY) {
          const int64_t a = ids[i], b = ids[p->n + i];
          if (a < 0 || a >= p->slots || b < 0 || b >= p->slots) continue;
          /* Disjoint sets only (the host checked): order does not matter. */
          memmove(lb + b * g->row_bytes, lb + a * g->row_bytes, (size_t)g->row_bytes);
        } else {
          const int64_t id = ids[i];
          if (id < 0 || id >= p->slots) continue;
          unsigned char *host = KVC_HPTR(unsigned char *, p->host) + g->host_off + row * g->row_bytes;
          unsigned char *pool = lb + id * g->row_bytes;
          if (p->mode == KVC_MAMBA_TO_HOST) memcpy(host, pool, (size_t)g->row_bytes);
          else memcpy(pool, host, (size_t)g->row_bytes);
        }
      }
    }
  }
}

void kvc_host_mamba_copy_staged(const void *params) {
  const kvc_p_mamba_rows *p = params;
  const uint32_t *ids = mamba_ids(p);
  static _Thread_local unsigned char stage[KVC_MAMBA_STAGED_TILE_BYTES];
  for (int s = 0; s < p->nseg; s++) {
    const kvc_mamba_seg *g = &p->seg[s];
    for (int64_t l = 0; l < g->layers; l++) {
      unsigned char *lb = KVC_HPTR(unsigned char *, g->base) + l * g->layer_pitch;
      for (int64_t t = 0; t < g->tiles; t++) {
        const int64_t off = t * p->tile;
        const int64_t len = g->row_bytes - off < p->tile ? g->row_bytes - off : p->tile;
        for (int64_t i = 0; i < p->n; i++) {
          const int64_t a = ids[i];
          if (a >= 0 && a < p->slots) memcpy(stage + i * p->tile, lb + a * g->row_bytes + off, (size_t)len);
        }
        for (int64_t i = 0; i < p->n; i++) {
          const int64_t a = ids[i], b = ids[p->n + i];
          if (a < 0 || a >= p->slots || b < 0 || b >= p->slots) continue;
          memcpy(lb + b * g->row_bytes + off, stage + i * p->tile, (size_t)len);
        }
      }
    }
  }
}
