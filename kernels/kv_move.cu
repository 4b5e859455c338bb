/*
 * kv_move.cu — SGLang move_kv_cache in ONE launch across every buffer of a pool.
 *
 * Work unit: a TILE = (segment, layer, byte range [t*W, t*W + W) of the row); tiles are
 * numbered through cta_first[] (prefix sums of layers * tiles per segment). A tile's bytes
 * are touched by exactly one CTA, which moves the locs in chunks of p.chunk (SGLang's
 * 256 / 128): the source bytes of all the chunk's rows in the tile are copied to shared
 * memory (cp.async) and only after all of them have landed (wait + barrier) are the
 * target rows of that tile written. Tiles are disjoint (buffer, byte range) pairs, so
 * each chunk is one simultaneous copy (overlapping src/tgt sets, permutation cycles
 * included, read the old values), and the chunks run in order inside each CTA, so a
 * later chunk sees the writes of earlier ones — SGLang's sequence of launches.
 *
 * CTA b owns tiles b, b + gridDim.x, b + 2 gridDim.x, ... It stages the chunk's slots
 * once (shared by all its tiles) and keeps S = p.stages tile buffers: while the target
 * rows of tile k are stored, the source rows of tiles k+1 .. k+S-1 are already being read
 * (different tiles never alias, so this keeps the per-tile read-before-write order). S
 * (1..4) is a parameter, not a specialisation constant, so one cubin per W serves every
 * depth; the launch gives at least chunk * (S * W + 8) bytes of dynamic shared memory.
 *
 * Segments (kvc_kv_seg) describe a region across layers; each has its own access width
 * `vec`, dispatched once per tile. Slots outside [0, limit) are skipped.
 * Specialisation: KVC_W (tile bytes, 16..512, power of two), KVC_MOVE_FUSE (0 / 1).
 */
#include "common.cuh"

#ifndef KVC_W
#  define KVC_W 128
#endif
/* KVC_MOVE_FUSE = 1: the S = 1 path reads a CTA's next tile while writing this one (the
 * launcher's choice where few chunks run). A separate compiled variant, not a parameter:
 * with the fused loop in the same kernel the plain path took 40 registers instead of 38
 * and lost a point at N = 8192 (bench/NOTES-kernels.md, session 8). */
#ifndef KVC_MOVE_FUSE
#  define KVC_MOVE_FUSE 0
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

KVC_DEVICE void kvc_cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

/* Waits until at most `pending` (0..2) of this thread's newest cp.async groups are still
 * in flight. */
KVC_DEVICE void kvc_cp_wait(int pending) {
  if (pending >= 2) asm volatile("cp.async.wait_group 2;\n" ::: "memory");
  else if (pending == 1) asm volatile("cp.async.wait_group 1;\n" ::: "memory");
  else asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/* One tile: where its bytes are. */
struct kvc_mv_tile {
  const kvc_kv_seg *s;
  uint8_t *base; /* layer base */
  int64_t byte0;
  int len; /* bytes of the tile that exist in the row (<= KVC_W) */
};

KVC_DEVICE kvc_mv_tile kvc_mv_tile_of(const kvc_p_kv_move &p, int32_t t) {
  int g = 0;
  while (g + 1 < p.nseg && t >= p.cta_first[g + 1]) g++;
  const kvc_kv_seg &s = p.seg[g];
  const int32_t local = t - p.cta_first[g];
  const int32_t layer = local / s.tiles, tile = local - layer * s.tiles;
  kvc_mv_tile r;
  r.s = &s;
  r.byte0 = (int64_t)tile * KVC_W;
  r.len = layer < s.layers ? (int)(s.row_bytes - r.byte0 < KVC_W ? s.row_bytes - r.byte0 : KVC_W) : 0;
  r.base = kvc_ptr<uint8_t *>(s.base) + (int64_t)layer * s.layer_pitch + r.byte0;
  return r;
}

/* Reads the tile bytes of the cnt source rows into buf (cp.async; not yet committed). */
template <int V> KVC_DEVICE void kvc_mv_load(const kvc_mv_tile &t, int cnt, const int32_t *ssrc, uint8_t *buf) {
  constexpr int WV = KVC_W / V; /* vectors per row of a full tile (power of two) */
  const int vlen = t.len / V, total = cnt * WV;
  const kvc_kv_seg &s = *t.s;
#pragma unroll 4
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int row = i / WV, v = i % WV;
    const int32_t src = ssrc[row];
    if (v >= vlen || src < 0 || src >= s.limit) continue;
    kvc_async_copy<V>(buf + row * KVC_W + v * V, t.base + kvc_seg_offset(s, src) + v * V);
  }
}

/* Writes the staged tile bytes to the cnt target rows. */
template <int V>
KVC_DEVICE void kvc_mv_store(const kvc_mv_tile &t, int cnt, const int32_t *ssrc, const int32_t *stgt,
                             const uint8_t *buf) {
  typedef typename mv_t<V>::T T;
  constexpr int WV = KVC_W / V;
  const int vlen = t.len / V, total = cnt * WV;
  const kvc_kv_seg &s = *t.s;
#pragma unroll 4
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int row = i / WV, v = i % WV;
    const int32_t src = ssrc[row], tgt = stgt[row];
    if (v >= vlen || src < 0 || tgt < 0 || src >= s.limit || tgt >= s.limit) continue;
    *reinterpret_cast<T *>(t.base + kvc_seg_offset(s, tgt) + v * V) =
        *reinterpret_cast<const T *>(buf + row * KVC_W + v * V);
  }
}

/* Stores tile t's staged bytes to its target rows and, in the same pass, reads tile u's
 * source rows into the buffer places just emptied (cp.async; not yet committed). Both
 * tiles have the same access width, so every thread reads and then refills exactly the
 * buffer bytes it loaded itself: no other thread touches them in between, and its own
 * load into a place issues only after the store that consumed the place's old value.
 * t and u are different tiles of the same chunk (disjoint byte ranges), so u's sources
 * may be read while t's targets are being written. */
template <int V>
KVC_DEVICE void kvc_mv_store_load(const kvc_mv_tile &t, const kvc_mv_tile &u, int cnt, const int32_t *ssrc,
                                  const int32_t *stgt, uint8_t *buf) {
  typedef typename mv_t<V>::T T;
  constexpr int WV = KVC_W / V;
  const int tlen = t.len / V, ulen = u.len / V, total = cnt * WV;
  const kvc_kv_seg &ts = *t.s, &us = *u.s;
#pragma unroll 1
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int row = i / WV, v = i % WV;
    const int32_t src = ssrc[row], tgt = stgt[row];
    uint8_t *const sm = buf + row * KVC_W + v * V;
    if (v < tlen && src >= 0 && tgt >= 0 && src < ts.limit && tgt < ts.limit)
      *reinterpret_cast<T *>(t.base + kvc_seg_offset(ts, tgt) + v * V) = *reinterpret_cast<const T *>(sm);
    if (v < ulen && src >= 0 && src < us.limit) kvc_async_copy<V>(sm, u.base + kvc_seg_offset(us, src) + v * V);
  }
}

/* kvc_mv_store_load for tiles t and u when their segments share an access width; false
 * (nothing done) when they do not. */
KVC_DEVICE bool kvc_mv_write_then_issue(const kvc_p_kv_move &p, int32_t t, int32_t u, int cnt, const int32_t *ssrc,
                                        const int32_t *stgt, uint8_t *buf) {
  const kvc_mv_tile a = kvc_mv_tile_of(p, t), b = kvc_mv_tile_of(p, u);
  if (a.s->vec != b.s->vec) return false;
  switch (a.s->vec) {
  case 16: kvc_mv_store_load<16>(a, b, cnt, ssrc, stgt, buf); break;
  case 8: kvc_mv_store_load<8>(a, b, cnt, ssrc, stgt, buf); break;
  case 4: kvc_mv_store_load<4>(a, b, cnt, ssrc, stgt, buf); break;
  case 2: kvc_mv_store_load<2>(a, b, cnt, ssrc, stgt, buf); break;
  default: kvc_mv_store_load<1>(a, b, cnt, ssrc, stgt, buf); break;
  }
  return true;
}

KVC_DEVICE void kvc_mv_issue(const kvc_p_kv_move &p, int32_t tile, int cnt, const int32_t *ssrc, uint8_t *buf) {
  const kvc_mv_tile t = kvc_mv_tile_of(p, tile);
  switch (t.s->vec) {
  case 16: kvc_mv_load<16>(t, cnt, ssrc, buf); break;
  case 8: kvc_mv_load<8>(t, cnt, ssrc, buf); break;
  case 4: kvc_mv_load<4>(t, cnt, ssrc, buf); break;
  case 2: kvc_mv_load<2>(t, cnt, ssrc, buf); break;
  default: kvc_mv_load<1>(t, cnt, ssrc, buf); break;
  }
}

KVC_DEVICE void kvc_mv_write(const kvc_p_kv_move &p, int32_t tile, int cnt, const int32_t *ssrc, const int32_t *stgt,
                             const uint8_t *buf) {
  const kvc_mv_tile t = kvc_mv_tile_of(p, tile);
  switch (t.s->vec) {
  case 16: kvc_mv_store<16>(t, cnt, ssrc, stgt, buf); break;
  case 8: kvc_mv_store<8>(t, cnt, ssrc, stgt, buf); break;
  case 4: kvc_mv_store<4>(t, cnt, ssrc, stgt, buf); break;
  case 2: kvc_mv_store<2>(t, cnt, ssrc, stgt, buf); break;
  default: kvc_mv_store<1>(t, cnt, ssrc, stgt, buf); break;
  }
}

/* Shared memory: [S][chunk x KVC_W tile bytes][chunk x int32 src slot][chunk x int32 tgt
 * slot]. Slots are staged once per chunk (coalesced, shared by every tile of the CTA) as
 * int32, -1 for values outside [0, 2^31); each tile applies its segment's [0, limit). */
/* (512, 3): at most 40 registers, so three 512-thread CTAs (W = 256, 66 KB of shared
 * memory each) always share a multiprocessor; one CTA's reads then overlap another's
 * writes. S comes in as a parameter because deriving it from %dynamic_smem_size (64-bit
 * division) pushed this kernel to 40 registers plus 24 bytes of spills inside the tile
 * loops; without them it takes 38 and moves 5-6 points closer to the copy
 * (bench/NOTES-kernels.md, session 3). */
extern "C" __global__ void __launch_bounds__(512, 3) kvc_kv_move(const __grid_constant__ kvc_p_kv_move p) {
  const int32_t ntiles = p.cta_first[p.nseg];
  const int32_t first = (int32_t)blockIdx.x, stride = (int32_t)gridDim.x;
  if (first >= ntiles) return;
  const int32_t mine = (ntiles - 1 - first) / stride + 1; /* tiles of this CTA */
  const int64_t per_buf = (int64_t)p.chunk * KVC_W;
  const int S = p.stages < 1 ? 1 : p.stages > 4 ? 4 : p.stages;
  int32_t *ssrc = reinterpret_cast<int32_t *>(kvc_move_smem + S * per_buf);
  int32_t *stgt = ssrc + p.chunk;
  for (int64_t c0 = 0; c0 < p.n; c0 += p.chunk) {
    const int cnt = (int)(p.n - c0 < p.chunk ? p.n - c0 : p.chunk);
    for (int i = threadIdx.x; i < cnt; i += blockDim.x) {
      const int64_t a = kvc_load_index(p.src, c0 + i, p.loc_i64), b = kvc_load_index(p.tgt, c0 + i, p.loc_i64);
      ssrc[i] = (a >= 0 && a <= 0x7fffffff) ? (int32_t)a : -1;
      stgt[i] = (b >= 0 && b <= 0x7fffffff) ? (int32_t)b : -1;
    }
    __syncthreads();
    if (S == 1 && KVC_MOVE_FUSE) {
      /* One buffer: the next tile of the chunk is read into it while this tile is being
       * written out of it (kvc_mv_store_load), so a CTA with several tiles overlaps its
       * own reads and writes; across chunks, and between tiles of different widths, the
       * stores finish (barrier) before the next reads. */
      kvc_mv_issue(p, first, cnt, ssrc, kvc_move_smem);
      kvc_cp_commit();
      for (int k = 0; k < mine; k++) {
        const int32_t t = first + k * stride;
        kvc_cp_wait(0);
        __syncthreads(); /* every source of tile t in this chunk has been read */
        if (k + 1 < mine && kvc_mv_write_then_issue(p, t, t + stride, cnt, ssrc, stgt, kvc_move_smem)) {
          kvc_cp_commit();
          continue;
        }
        kvc_mv_write(p, t, cnt, ssrc, stgt, kvc_move_smem);
        __syncthreads(); /* stores done: the buffer may be refilled in another layout */
        if (k + 1 < mine) {
          kvc_mv_issue(p, t + stride, cnt, ssrc, kvc_move_smem);
          kvc_cp_commit();
        }
      }
    } else if (S == 1) {
      for (int k = 0; k < mine; k++) {
        const int32_t t = first + k * stride;
        kvc_mv_issue(p, t, cnt, ssrc, kvc_move_smem);
        kvc_cp_commit();
        kvc_cp_wait(0);
        __syncthreads();
        kvc_mv_write(p, t, cnt, ssrc, stgt, kvc_move_smem);
        __syncthreads();
      }
    } else {
      for (int k = 0; k < S - 1; k++) {
        if (k < mine) kvc_mv_issue(p, first + k * stride, cnt, ssrc, kvc_move_smem + k * per_buf);
        kvc_cp_commit();
      }
      for (int k = 0; k < mine; k++) {
        /* groups committed: S - 1 + k; tile k is group k, so S - 2 newer ones may fly */
        kvc_cp_wait(S - 2);
        __syncthreads(); /* tile k visible to all; everyone is done storing tile k - 1 */
        const int kn = k + S - 1;
        if (kn < mine) kvc_mv_issue(p, first + kn * stride, cnt, ssrc, kvc_move_smem + (kn % S) * per_buf);
        kvc_cp_commit();
        kvc_mv_write(p, first + k * stride, cnt, ssrc, stgt, kvc_move_smem + (k % S) * per_buf);
      }
      kvc_cp_wait(0);
      __syncthreads(); /* stores done before the next chunk restages slots and rereads */
    }
  }
}
