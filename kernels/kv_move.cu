/*
 * kv_move.cu — SGLang move_kv_cache in ONE launch across every buffer of a pool.
 *
 * Work unit: a TILE = (segment, layer, byte range [t*W, t*W + W) of the row); tiles are
 * numbered through cta_first[] (prefix sums of layers * tiles per segment). A tile's bytes
 * are touched by exactly one CTA, which moves the locs of the tile in chunks of p.chunk:
 * the source bytes of all the chunk's rows in the tile are copied to shared memory
 * (cp.async) and only after all of them have landed (wait + barrier) are the target rows
 * of that tile written. Tiles are disjoint (buffer, byte range) pairs, so when n <= chunk
 * (the host sizes W so that this holds whenever it can) the whole move is one
 * simultaneous copy: overlapping src/tgt sets, permutation cycles included, read the old
 * values. For larger n the chunks run in order inside each CTA, so a later chunk sees the
 * writes of earlier ones (SGLang's multi-launch semantics, deterministic).
 *
 * Persistent, pipelined grid: CTA b owns tiles b, b + gridDim.x, b + 2 gridDim.x, ... It
 * stages the chunk's slots once (shared by all its tiles) and keeps S tile buffers: while
 * the target rows of tile k are stored, the source rows of tiles k+1 .. k+S-1 are already
 * being read (different tiles never alias, so this keeps the per-tile read-before-write
 * order). S (1..4) is not a specialisation constant: the host passes exactly
 * chunk * (S * W + 8) bytes of dynamic shared memory and the kernel derives S from
 * %dynamic_smem_size, so one cubin per W serves every depth.
 *
 * Segments (kvc_kv_seg) describe a region across layers; each has its own access width
 * `vec`, dispatched once per tile. Slots outside [0, limit) are skipped.
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
KVC_DEVICE void kvc_mv_store(const kvc_mv_tile &t, int cnt, const int32_t *ssrc, const int32_t *stgt, const uint8_t *buf) {
  typedef typename mv_t<V>::T T;
  constexpr int WV = KVC_W / V;
  const int vlen = t.len / V, total = cnt * WV;
  const kvc_kv_seg &s = *t.s;
#pragma unroll 4
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int row = i / WV, v = i % WV;
    const int32_t src = ssrc[row], tgt = stgt[row];
    if (v >= vlen || src < 0 || tgt < 0 || src >= s.limit || tgt >= s.limit) continue;
    *reinterpret_cast<T *>(t.base + kvc_seg_offset(s, tgt) + v * V) = *reinterpret_cast<const T *>(buf + row * KVC_W + v * V);
  }
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

/* --- Direct path: disjoint src / tgt sets ------------------------------------------- */

/* Open-addressing set of int32 slots in shared memory (h entries, a power of two, -1 =
 * empty, load <= 1/2 so probes end). */
KVC_DEVICE uint32_t kvc_mv_hash(int32_t key, uint32_t mask) {
  return ((uint32_t)key * 0x9E3779B1u >> (32 - __popc(mask))) & mask; /* Fibonacci hashing: top bits */
}

KVC_DEVICE void kvc_mv_set_insert(int32_t *set, uint32_t mask, int32_t key) {
  for (uint32_t h = kvc_mv_hash(key, mask);; h = (h + 1) & mask) {
    const int32_t old = atomicCAS(set + h, -1, key);
    if (old == -1 || old == key) return;
  }
}

KVC_DEVICE bool kvc_mv_set_has(const int32_t *set, uint32_t mask, int32_t key) {
  for (uint32_t h = kvc_mv_hash(key, mask);; h = (h + 1) & mask) {
    const int32_t v = set[h];
    if (v == key) return true;
    if (v == -1) return false;
  }
}

/* Rows [r0, r0 + rows) of one tile, straight from source to target: KVC_MV_U accesses
 * per thread loaded before any is stored, so many loads are in flight per SM. */
#define KVC_MV_U 8
template <int V>
KVC_DEVICE void kvc_mv_direct(const kvc_mv_tile &t, const int32_t *asrc, const int32_t *atgt, int rows) {
  typedef typename mv_t<V>::T T;
  constexpr int WV = KVC_W / V;
  const int vlen = t.len / V, total = rows * WV;
  const kvc_kv_seg &s = *t.s;
  for (int base = threadIdx.x; base < total; base += blockDim.x * KVC_MV_U) {
    T buf[KVC_MV_U];
    T *dst[KVC_MV_U];
#pragma unroll
    for (int k = 0; k < KVC_MV_U; k++) {
      const int i = base + k * blockDim.x;
      dst[k] = nullptr;
      if (i < total) {
        const int row = i / WV, v = i % WV;
        const int32_t src = asrc[row], tgt = atgt[row];
        if (v < vlen && src >= 0 && tgt >= 0 && src < s.limit && tgt < s.limit) {
          buf[k] = *reinterpret_cast<const T *>(t.base + kvc_seg_offset(s, src) + v * V);
          dst[k] = reinterpret_cast<T *>(t.base + kvc_seg_offset(s, tgt) + v * V);
        }
      }
    }
#pragma unroll
    for (int k = 0; k < KVC_MV_U; k++)
      if (dst[k]) *dst[k] = buf[k];
  }
}

/* When p.direct_rows > 0 the host has reserved room for all n slot pairs plus a set of
 * p.direct_set entries. Every CTA checks (redundantly, a few microseconds) whether any
 * target slot is also the source of another pair. If none is, no row the move writes is
 * read by it, so every order of the copies gives the simultaneous-copy result (also
 * across chunks): rows are streamed directly in units of direct_rows rows of one tile.
 * Returns false (nothing written) when the sets overlap; the staged path then runs. */
KVC_DEVICE bool kvc_mv_try_direct(const kvc_p_kv_move &p) {
  const int n = (int)p.n;
  int32_t *asrc = reinterpret_cast<int32_t *>(kvc_move_smem), *atgt = asrc + n, *set = atgt + n;
  const uint32_t mask = (uint32_t)p.direct_set - 1;
  for (int i = threadIdx.x; i < p.direct_set; i += blockDim.x) set[i] = -1;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t a = kvc_load_index(p.src, i, p.loc_i64), b = kvc_load_index(p.tgt, i, p.loc_i64);
    asrc[i] = (a >= 0 && a <= 0x7fffffff) ? (int32_t)a : -1;
    atgt[i] = (b >= 0 && b <= 0x7fffffff) ? (int32_t)b : -1;
  }
  __syncthreads();
  /* A pair copying a row onto itself reads what it writes; only other pairs' sources
   * matter. Out-of-range slots move nothing and are left out. */
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    if (asrc[i] >= 0 && atgt[i] >= 0 && asrc[i] != atgt[i]) kvc_mv_set_insert(set, mask, asrc[i]);
  __syncthreads();
  int hit = 0;
  for (int i = threadIdx.x; i < n && !hit; i += blockDim.x)
    if (asrc[i] >= 0 && atgt[i] >= 0 && kvc_mv_set_has(set, mask, atgt[i])) hit = 1;
  if (__syncthreads_or(hit)) return false;
  const int32_t ntiles = p.cta_first[p.nseg];
  const int32_t per_tile = (int32_t)((p.n + p.direct_rows - 1) / p.direct_rows);
  const int64_t units = (int64_t)ntiles * per_tile;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int32_t tile = (int32_t)(u / per_tile);
    const int r0 = (int)(u - (int64_t)tile * per_tile) * p.direct_rows;
    const int rows = n - r0 < p.direct_rows ? n - r0 : p.direct_rows;
    const kvc_mv_tile t = kvc_mv_tile_of(p, tile);
    switch (t.s->vec) {
    case 16: kvc_mv_direct<16>(t, asrc + r0, atgt + r0, rows); break;
    case 8: kvc_mv_direct<8>(t, asrc + r0, atgt + r0, rows); break;
    case 4: kvc_mv_direct<4>(t, asrc + r0, atgt + r0, rows); break;
    case 2: kvc_mv_direct<2>(t, asrc + r0, atgt + r0, rows); break;
    default: kvc_mv_direct<1>(t, asrc + r0, atgt + r0, rows); break;
    }
  }
  return true;
}

/* Shared memory: [S][chunk x KVC_W tile bytes][chunk x int32 src slot][chunk x int32 tgt
 * slot]. Slots are staged once per chunk (coalesced, shared by every tile of the CTA) as
 * int32, -1 for values outside [0, 2^31); each tile applies its segment's [0, limit). */
extern "C" __global__ void __launch_bounds__(512) kvc_kv_move(const __grid_constant__ kvc_p_kv_move p) {
  const int32_t ntiles = p.cta_first[p.nseg];
  const int32_t first = (int32_t)blockIdx.x, stride = (int32_t)gridDim.x;
  if (first >= ntiles) return;
  if (p.direct_rows > 0 && kvc_mv_try_direct(p)) return;
  const int32_t mine = (ntiles - 1 - first) / stride + 1; /* tiles of this CTA */
  uint32_t dyn;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
  const int64_t per_buf = (int64_t)p.chunk * KVC_W;
  int S = (int)(((int64_t)dyn / p.chunk - 8) / KVC_W);
  S = S < 1 ? 1 : S > 4 ? 4 : S;
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
    if (S == 1) {
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
