/*
 * kv_move_direct.cu — kvc_kv_pool_move_disjoint: row tgt[i] = row src[i] for every
 * segment (region across layers) of a pool, in ONE launch, WITHOUT shared-memory staging.
 * The caller guarantees that no slot is both a source and a target (and no target
 * repeats), so every byte written is read by nobody and rows may be streamed directly.
 * If the guarantee is violated the result is unspecified, but every access still stays
 * inside the rows [0, limit) of the pool's segments (memory-safe).
 *
 * Parameter block: kvc_p_kv_move (the segment description kv_move.c builds) with
 * seg[g].tiles = rows per warp task (R, a power of two in 1..32, R * row_bytes / vec <
 * 2^30); chunk, cta_first unused.
 *
 * Work: segment g has layers * n rows (row = layer * n + i) grouped into warp TASKS of R
 * consecutive locs of one layer: tasks_g = layers * ceil(n / R). Warps walk the tasks of
 * all segments grid-stride (persistent grid). In a task, lane j < R loads slot pair j,
 * checks it against [0, limit), and writes the two row addresses (0 = skip) to the warp's
 * shared slots; then the lanes walk the task's (row, unit) pairs, unit fastest
 * (consecutive lanes = consecutive units of a row: coalesced), KVC_MD_U units per lane
 * per batch, all U loads issued before the U stores. A unit is one access of the
 * segment's `vec` width (16 bytes for every 16-byte-aligned region: K/V rows of real
 * models; 1..8 only for odd rows), dispatched once per task; vec divides row_bytes.
 */
#include "common.cuh"

#ifndef KVC_MD_U
#define KVC_MD_U 4 /* 16-byte units per lane in flight */
#endif
#define KVC_MD_THREADS 256
#define KVC_MD_WARPS (KVC_MD_THREADS / 32)

template <int A> struct md_t;
template <> struct md_t<16> { typedef uint4 T; };
template <> struct md_t<8> { typedef uint2 T; };
template <> struct md_t<4> { typedef uint32_t T; };
template <> struct md_t<2> { typedef uint16_t T; };
template <> struct md_t<1> { typedef uint8_t T; };

KVC_DEVICE int64_t kvc_md_offset(const kvc_kv_seg &s, int64_t slot) {
  if (s.page_size) {
    const int64_t q = slot / s.page_size;
    return q * s.page_pitch + s.page_off + (slot - q * s.page_size) * s.slot_pitch;
  }
  return slot * s.slot_pitch;
}

/* Copies the units of one task: rows [0, rows) of the warp's slot table, cpr = row_bytes
 * / V units (accesses of V bytes) each. */
template <int V> KVC_DEVICE void kvc_md_copy(const ulonglong2 *tab, int rows, int32_t cpr, int lane) {
  typedef typename md_t<V>::T T;
  const int total = rows * cpr;
  const int qr = 32 / cpr, rr = 32 - qr * cpr; /* a step of 32 units in (row, unit) */
  int row = lane / cpr;
  int c = lane - row * cpr;
  for (int base = 0; base < total; base += 32 * KVC_MD_U) {
    T buf[KVC_MD_U];
    T *dst[KVC_MD_U];
#pragma unroll
    for (int k = 0; k < KVC_MD_U; k++) {
      dst[k] = nullptr;
      if (base + k * 32 + lane < total) {
        const ulonglong2 e = tab[row];
        if (e.y) {
          dst[k] = reinterpret_cast<T *>(e.y) + c;
          buf[k] = __ldg(reinterpret_cast<const T *>(e.x) + c);
        }
      }
      c += rr;
      row += qr;
      if (c >= cpr) c -= cpr, row++;
    }
#pragma unroll
    for (int k = 0; k < KVC_MD_U; k++)
      if (dst[k]) *dst[k] = buf[k];
  }
}

extern "C" __global__ void __launch_bounds__(KVC_MD_THREADS) kvc_kv_move_direct(const __grid_constant__ kvc_p_kv_move p) {
  /* Per warp: up to 32 rows as {source address, target address (0 = skip)}. */
  __shared__ ulonglong2 tab_all[KVC_MD_WARPS][32];
  const int lane = (int)(threadIdx.x & 31u), warp = (int)(threadIdx.x >> 5);
  ulonglong2 *tab = tab_all[warp];
  const int64_t n = p.n;
  const int64_t nwarps = (int64_t)gridDim.x * (blockDim.x >> 5);
  for (int64_t t = (int64_t)blockIdx.x * (blockDim.x >> 5) + warp;; t += nwarps) {
    /* Find the task's segment (at most KVC_MAX_SEGS steps, warp-uniform). */
    int g = 0;
    int64_t rem = t, blocks = 0;
    int lg = 0;
    for (; g < p.nseg; g++) {
      lg = __ffs(p.seg[g].tiles) - 1; /* R = 2^lg */
      blocks = (n + (1ll << lg) - 1) >> lg;
      const int64_t tasks = blocks * p.seg[g].layers;
      if (rem < tasks) break;
      rem -= tasks;
    }
    if (g >= p.nseg) return;
    const kvc_kv_seg &s = p.seg[g];
    const int64_t layer = rem / blocks, blk = rem - layer * blocks;
    const int64_t i0 = blk << lg;
    const int rows = (int)(n - i0 < (1ll << lg) ? n - i0 : (1ll << lg));
    __syncwarp(); /* the previous task's readers are done with tab */
    if (lane < rows) {
      const int64_t a = kvc_load_index(p.src, i0 + lane, p.loc_i64), b = kvc_load_index(p.tgt, i0 + lane, p.loc_i64);
      ulonglong2 e = make_ulonglong2(0, 0);
      if (a >= 0 && a < s.limit && b >= 0 && b < s.limit) {
        const uint64_t lb = s.base + (uint64_t)(layer * s.layer_pitch);
        e.x = lb + (uint64_t)kvc_md_offset(s, a);
        e.y = lb + (uint64_t)kvc_md_offset(s, b);
      }
      tab[lane] = e;
    }
    __syncwarp();
    const int v = s.vec;
    const int32_t cpr = (int32_t)(s.row_bytes / v); /* vec divides row_bytes */
    switch (v) {
    case 16: kvc_md_copy<16>(tab, rows, cpr, lane); break;
    case 8: kvc_md_copy<8>(tab, rows, cpr, lane); break;
    case 4: kvc_md_copy<4>(tab, rows, cpr, lane); break;
    case 2: kvc_md_copy<2>(tab, rows, cpr, lane); break;
    default: kvc_md_copy<1>(tab, rows, cpr, lane); break;
    }
  }
}
