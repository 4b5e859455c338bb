/*
 * kv_move.cu — SGLang move_kv_cache in ONE launch across every buffer of a pool.
 *
 * CTA b owns one (segment, layer, byte tile [t*W, t*W + W) of the row). It moves the
 * locs in chunks of p.chunk: all source bytes of the chunk's rows in its tile are copied
 * to shared memory (cp.async), the CTA waits and synchronises, and only then are the
 * target rows written. CTAs own disjoint (buffer, byte range) pairs, so when n <= chunk
 * (the host sizes W so that n * W fits in shared memory whenever it can) the whole move
 * is one simultaneous copy: overlapping src/tgt sets, permutation cycles included, read
 * the old values. For larger n the chunks run in order inside each CTA, so a later chunk
 * sees the writes of earlier ones (SGLang's multi-launch semantics, deterministic).
 *
 * Segments (kvc_kv_seg) describe a region across layers; each has its own access width
 * `vec`, dispatched once per CTA. Slots outside [0, limit) are skipped.
 * Specialisation: KVC_W (tile bytes, 16..128, power of two).
 */
#include "common.cuh"

#ifndef KVC_W
#define KVC_W 128
#endif

extern __shared__ __align__(16) uint8_t kvc_move_smem[];

template <int A> struct mv_t;
template <> struct mv_t<16> { typedef uint4 T; };
template <> struct mv_t<8> { typedef uint2 T; };
template <> struct mv_t<4> { typedef uint32_t T; };
template <> struct mv_t<2> { typedef uint16_t T; };
template <> struct mv_t<1> { typedef uint8_t T; };

KVC_DEVICE int64_t kvc_seg_offset(const kvc_kv_seg &s, int64_t slot) {
  if (s.page_size) {
    const int64_t q = slot / s.page_size;
    return q * s.page_pitch + s.page_off + (slot - q * s.page_size) * s.slot_pitch;
  }
  return slot * s.slot_pitch;
}

template <int V> KVC_DEVICE void kvc_async_copy(uint8_t *sm, const uint8_t *g) {
  typedef typename mv_t<V>::T T;
  if constexpr (V >= 4) {
    const uint32_t sa = (uint32_t)__cvta_generic_to_shared(sm);
    if constexpr (V == 16) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(g) : "memory");
    else asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(sa), "l"(g), "n"(V) : "memory");
  } else {
    *reinterpret_cast<T *>(sm) = *reinterpret_cast<const T *>(g);
  }
}

/* Shared memory: [chunk x KVC_W tile bytes][chunk x int32 src slot][chunk x int32 tgt
 * slot]. The slots are staged first (coalesced, all in flight together) so that the
 * cp.async loop never waits on an index load. Slots are stored as int32 with -1 for
 * values outside [0, 2^31). */
template <int V>
KVC_DEVICE void kvc_move_tile(const kvc_p_kv_move &p, const kvc_kv_seg &s, uint8_t *layer_base, int64_t byte0,
                              int tile_len) {
  typedef typename mv_t<V>::T T;
  constexpr int WV = KVC_W / V; /* vectors per row of a full tile (power of two) */
  const int vlen = tile_len / V;
  int32_t *ssrc = reinterpret_cast<int32_t *>(kvc_move_smem + (int64_t)p.chunk * KVC_W);
  int32_t *stgt = ssrc + p.chunk;
  for (int64_t c0 = 0; c0 < p.n; c0 += p.chunk) {
    const int cnt = (int)(p.n - c0 < p.chunk ? p.n - c0 : p.chunk);
    for (int i = threadIdx.x; i < cnt; i += blockDim.x) {
      const int64_t a = kvc_load_index(p.src, c0 + i, p.loc_i64), b = kvc_load_index(p.tgt, c0 + i, p.loc_i64);
      ssrc[i] = (a >= 0 && a < s.limit) ? (int32_t)a : -1;
      stgt[i] = (b >= 0 && b < s.limit) ? (int32_t)b : -1;
    }
    __syncthreads();
    const int total = cnt * WV;
#pragma unroll 4
    for (int i = threadIdx.x; i < total; i += blockDim.x) {
      const int row = i / WV, v = i % WV;
      const int32_t src = ssrc[row];
      if (v >= vlen || src < 0) continue;
      kvc_async_copy<V>(kvc_move_smem + row * KVC_W + v * V, layer_base + kvc_seg_offset(s, src) + byte0 + v * V);
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    __syncthreads();
#pragma unroll 4
    for (int i = threadIdx.x; i < total; i += blockDim.x) {
      const int row = i / WV, v = i % WV;
      const int32_t src = ssrc[row], tgt = stgt[row];
      if (v >= vlen || src < 0 || tgt < 0) continue;
      *reinterpret_cast<T *>(layer_base + kvc_seg_offset(s, tgt) + byte0 + v * V) =
          *reinterpret_cast<const T *>(kvc_move_smem + row * KVC_W + v * V);
    }
    __syncthreads();
  }
}

extern "C" __global__ void __launch_bounds__(256) kvc_kv_move(const __grid_constant__ kvc_p_kv_move p) {
  const int32_t b = (int32_t)blockIdx.x;
  int g = 0;
  while (g + 1 < p.nseg && b >= p.cta_first[g + 1]) g++;
  const kvc_kv_seg &s = p.seg[g];
  const int32_t local = b - p.cta_first[g];
  const int32_t layer = local / s.tiles, tile = local - layer * s.tiles;
  if (layer >= s.layers) return;
  const int64_t byte0 = (int64_t)tile * KVC_W;
  const int tile_len = (int)(s.row_bytes - byte0 < KVC_W ? s.row_bytes - byte0 : KVC_W);
  uint8_t *base = kvc_ptr<uint8_t *>(s.base) + (int64_t)layer * s.layer_pitch;
  switch (s.vec) {
  case 16: kvc_move_tile<16>(p, s, base, byte0, tile_len); break;
  case 8: kvc_move_tile<8>(p, s, base, byte0, tile_len); break;
  case 4: kvc_move_tile<4>(p, s, base, byte0, tile_len); break;
  case 2: kvc_move_tile<2>(p, s, base, byte0, tile_len); break;
  default: kvc_move_tile<1>(p, s, base, byte0, tile_len); break;
  }
}
