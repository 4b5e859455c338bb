/*
 * mamba.cu — Mamba state rows of kvc_mamba_pool, all state tensors and layers per launch.
 *
 *   kvc_mamba_rows         zero rows / copy rows (disjoint sets) / gather to host /
 *                          scatter from host; one CTA-iteration = one byte tile of one row
 *   kvc_mamba_copy_staged  copy with overlapping src/dst sets: a CTA owns (tensor, layer,
 *                          tile), stages the tile of every source row in shared memory
 *                          (dynamic: n * tile bytes), syncs, then writes every target:
 *                          all reads before any write
 *
 *   unit layout of kvc_mamba_rows within a segment (tiles of one row are adjacent, so
 *   consecutive CTAs stream consecutive bytes):
 *     u = ((layer * n) + i) * tiles + t      -> rows base + layer*pitch + id_i*row_bytes
 *
 * Accesses are KVC_MAMBA_VEC = `vec` bytes wide (16 when every address and length allows it); each
 * thread keeps 4 loads in flight before
 * storing (4 accesses per pass). Slot ids come from the parameter block (uniform per CTA: constant-bank
 * broadcast) or from a staged device buffer. Ids outside [0, slots) are skipped.
 */
#include "common.cuh"

/* Access width in bytes: a compile-time specialisation (one variant per width actually
 * used), because a run-time switch over all widths makes ptxas keep the worst case's
 * registers and spill. Must equal the `vec` field. */
#ifndef KVC_MAMBA_VEC
#  define KVC_MAMBA_VEC 16
#endif

struct kvc_mamba_params {
  kvc_p_mamba_rows h;
  uint32_t words[KVC_INLINE_WORDS];
};

template <int V> struct kvc_vt;
template <> struct kvc_vt<16> { typedef uint4 T; };
template <> struct kvc_vt<8> { typedef uint2 T; };
template <> struct kvc_vt<4> { typedef unsigned int T; };
template <> struct kvc_vt<2> { typedef unsigned short T; };
template <> struct kvc_vt<1> { typedef unsigned char T; };

template <typename T> KVC_DEVICE T kvc_zero_v();
template <> KVC_DEVICE uint4 kvc_zero_v<uint4>() { return make_uint4(0u, 0u, 0u, 0u); }
template <> KVC_DEVICE uint2 kvc_zero_v<uint2>() { return make_uint2(0u, 0u); }
template <> KVC_DEVICE unsigned int kvc_zero_v<unsigned int>() { return 0u; }
template <> KVC_DEVICE unsigned short kvc_zero_v<unsigned short>() { return 0; }
template <> KVC_DEVICE unsigned char kvc_zero_v<unsigned char>() { return 0; }

KVC_DEVICE int kvc_mamba_seg_of(const kvc_p_mamba_rows &h, int64_t u) {
  int s = 0;
  while (s + 1 < h.nseg && u >= h.unit_first[s + 1]) s++;
  return s;
}

template <int V> KVC_DEVICE void kvc_mamba_rows_impl(const kvc_mamba_params &p) {
  typedef typename kvc_vt<V>::T T;
  enum { PER = 4 }; /* 64 bytes in flight per thread at V = 16 (a 16 KB tile per pass) */
  const kvc_p_mamba_rows &h = p.h;
  const uint32_t *ids = h.staged ? kvc_ptr<const uint32_t *>(h.staged) : p.words;
  const int64_t total = h.unit_first[h.nseg];
  for (int64_t u = blockIdx.x; u < total; u += gridDim.x) {
    const int s = kvc_mamba_seg_of(h, u);
    const kvc_mamba_seg &g = h.seg[s];
    const int64_t v = u - h.unit_first[s];
    const int64_t t = v % g.tiles;
    const int64_t row = v / g.tiles; /* layer * n + i */
    const int64_t i = row % h.n, layer = row / h.n;
    const int64_t off = t * h.tile;
    int64_t len = g.row_bytes - off;
    if (len > h.tile) len = h.tile;
    const int64_t cnt = len / V;
    const int64_t layer_base = (int64_t)g.base + layer * g.layer_pitch;
    if (h.mode == KVC_MAMBA_ZERO) {
      const int64_t id = ids[i];
      if (id < 0 || id >= h.slots) continue;
      T *dst = reinterpret_cast<T *>(layer_base + id * g.row_bytes + off);
      for (int64_t k = threadIdx.x; k < cnt; k += KVC_MAMBA_BLOCK) dst[k] = kvc_zero_v<T>();
      continue;
    }
    const T *src;
    T *dst;
    if (h.mode == KVC_MAMBA_COPY) {
      const int64_t a = ids[i], b = ids[h.n + i];
      if (a < 0 || a >= h.slots || b < 0 || b >= h.slots) continue;
      src = reinterpret_cast<const T *>(layer_base + a * g.row_bytes + off);
      dst = reinterpret_cast<T *>(layer_base + b * g.row_bytes + off);
    } else {
      const int64_t id = ids[i];
      if (id < 0 || id >= h.slots) continue;
      const int64_t host_row = (int64_t)h.host + g.host_off + row * g.row_bytes + off;
      const int64_t pool_row = layer_base + id * g.row_bytes + off;
      if (h.mode == KVC_MAMBA_TO_HOST) {
        src = reinterpret_cast<const T *>(pool_row);
        dst = reinterpret_cast<T *>(host_row);
      } else {
        src = reinterpret_cast<const T *>(host_row);
        dst = reinterpret_cast<T *>(pool_row);
      }
    }
    /* Loads of a pass first (PER in flight per thread), then its stores. */
    for (int64_t base = threadIdx.x; base < cnt; base += (int64_t)PER * KVC_MAMBA_BLOCK) {
      T r[PER];
#pragma unroll
      for (int k = 0; k < PER; k++) {
        const int64_t e = base + (int64_t)k * KVC_MAMBA_BLOCK;
        if (e < cnt) r[k] = src[e];
      }
#pragma unroll
      for (int k = 0; k < PER; k++) {
        const int64_t e = base + (int64_t)k * KVC_MAMBA_BLOCK;
        if (e < cnt) dst[e] = r[k];
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(KVC_MAMBA_BLOCK)
    kvc_mamba_rows(const __grid_constant__ kvc_mamba_params p) {
  kvc_mamba_rows_impl<KVC_MAMBA_VEC>(p);
}

/* Overlapping copy: one unit = (tensor, layer, tile). The n pairs' ids are staged in
 * shared memory once per CTA (after the tile area: n src then n dst); per unit, the tile
 * of every source row goes to shared memory, then (after a barrier) to every target.
 * Both phases walk the flattened (pair, vector) space so all threads have work and each
 * keeps PER accesses in flight: walking pair by pair left most threads idle and paid one
 * memory latency per pair (4.6% of copy at 256 pairs). Dynamic shared memory: n * tile
 * bytes of tiles + 8 n bytes of ids. */
template <int V> KVC_DEVICE void kvc_mamba_staged_impl(const kvc_mamba_params &p, unsigned char *stage) {
  typedef typename kvc_vt<V>::T T;
  enum { PER = 4 };
  const kvc_p_mamba_rows &h = p.h;
  const uint32_t *ids = h.staged ? kvc_ptr<const uint32_t *>(h.staged) : p.words;
  const int64_t total = h.unit_first[h.nseg];
  const uint32_t n = (uint32_t)h.n, per_row = (uint32_t)(h.tile / V); /* staging stride per pair, in T */
  T *buf = reinterpret_cast<T *>(stage);
  int32_t *sid = reinterpret_cast<int32_t *>(stage + (size_t)n * h.tile);
  for (uint32_t i = threadIdx.x; i < 2 * n; i += KVC_MAMBA_BLOCK) {
    const uint32_t a = ids[i];
    sid[i] = a < (uint64_t)h.slots ? (int32_t)a : -1;
  }
  __syncthreads();
  for (int64_t u = blockIdx.x; u < total; u += gridDim.x) {
    const int s = kvc_mamba_seg_of(h, u);
    const kvc_mamba_seg &g = h.seg[s];
    const int64_t v = u - h.unit_first[s];
    const int64_t t = v % g.tiles, layer = v / g.tiles;
    const int64_t off = t * h.tile;
    int64_t len = g.row_bytes - off;
    if (len > h.tile) len = h.tile;
    const uint32_t cnt = (uint32_t)(len / V), work = n * cnt;
    const unsigned char *base = kvc_ptr<const unsigned char *>(g.base) + layer * g.layer_pitch + off;
    for (uint32_t e0 = threadIdx.x; e0 < work; e0 += PER * KVC_MAMBA_BLOCK) {
      T r[PER];
#pragma unroll
      for (int k = 0; k < PER; k++) {
        const uint32_t e = e0 + k * KVC_MAMBA_BLOCK, i = e / cnt, c = e - i * cnt;
        if (e < work && sid[i] >= 0) r[k] = reinterpret_cast<const T *>(base + (int64_t)sid[i] * g.row_bytes)[c];
      }
#pragma unroll
      for (int k = 0; k < PER; k++) {
        const uint32_t e = e0 + k * KVC_MAMBA_BLOCK, i = e / cnt, c = e - i * cnt;
        if (e < work && sid[i] >= 0) buf[i * per_row + c] = r[k];
      }
    }
    __syncthreads();
    unsigned char *wbase = const_cast<unsigned char *>(base);
    for (uint32_t e = threadIdx.x; e < work; e += KVC_MAMBA_BLOCK) {
      const uint32_t i = e / cnt, c = e - i * cnt;
      const int32_t a = sid[i], b = sid[n + i];
      if (a >= 0 && b >= 0) reinterpret_cast<T *>(wbase + (int64_t)b * g.row_bytes)[c] = buf[i * per_row + c];
    }
    __syncthreads(); /* the next unit reuses the stage */
  }
}

extern "C" __global__ void __launch_bounds__(KVC_MAMBA_BLOCK)
    kvc_mamba_copy_staged(const __grid_constant__ kvc_mamba_params p) {
  extern __shared__ __align__(16) unsigned char kvc_mamba_stage[];
  kvc_mamba_staged_impl<KVC_MAMBA_VEC>(p, kvc_mamba_stage);
}
