/*
 * kv_offload.cu — SGLang get_cpu_copy / load_cpu_copy as ONE kernel that reads or writes
 * the caller's pinned host memory directly (mapped through unified addressing), with no
 * device-wide synchronisation.
 *
 * Host layout: segment after segment (describe() order), within a segment layer after
 * layer, `count` rows of row_bytes each. Rows of a plain segment are slots loc[i]
 * (count = n); rows of a by_page segment (NSA index-K) are pages loc[j*ps]/ps
 * (count = ceil(n/ps)). One warp per host row, lanes striding over `vec`-byte vectors
 * so consecutive lanes touch consecutive host bytes (full PCIe write combining).
 * dir 0 (to host): an invalid slot gives a zero row; dir 1 (from host): it is skipped.
 */
#include "common.cuh"

template <int A> struct of_t;
template <> struct of_t<16> { typedef uint4 T; };
template <> struct of_t<8> { typedef uint2 T; };
template <> struct of_t<4> { typedef uint32_t T; };
template <> struct of_t<2> { typedef uint16_t T; };
template <> struct of_t<1> { typedef uint8_t T; };

template <int V> KVC_DEVICE void kvc_offload_row(uint8_t *dev, uint8_t *host, int64_t bytes, int dir, bool valid) {
  typedef typename of_t<V>::T T;
  const unsigned lane = threadIdx.x & 31u;
  for (int64_t o = (int64_t)lane * V; o < bytes; o += 32 * V) {
    if (dir == 0) {
      T v{};
      if (valid) v = *reinterpret_cast<const T *>(dev + o);
      *reinterpret_cast<T *>(host + o) = v;
    } else if (valid) {
      *reinterpret_cast<T *>(dev + o) = *reinterpret_cast<const T *>(host + o);
    }
  }
}

extern "C" __global__ void __launch_bounds__(256) kvc_kv_offload(const __grid_constant__ kvc_p_kv_offload p) {
  const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
  for (int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < p.total_rows; r += warps) {
    int g = 0;
    while (g + 1 < p.nseg && r >= p.row_first[g + 1]) g++;
    const kvc_kv_seg &s = p.seg[g];
    const int64_t local = r - p.row_first[g];
    const int64_t layer = local / s.count, i = local - layer * s.count;
    int64_t slot = kvc_load_index(p.loc, s.by_page ? i * s.page_size : i, p.loc_i64);
    /* by_page: the page of the run's first slot; rows are whole pages. The range check
     * comes first, one unsigned compare (a negative row is huge), and only an in-range
     * row is multiplied by its pitch: slot * pitch overflows for slots near INT64_MIN /
     * INT64_MAX (signed overflow is UB here as on the host). */
    const int64_t row = s.by_page ? (slot >= 0 ? slot / s.page_size : -1) : slot;
    const bool valid = (uint64_t)row < (uint64_t)s.limit;
    const int64_t off = valid ? row * (s.by_page ? s.page_pitch : s.slot_pitch) : 0;
    uint8_t *dev = kvc_ptr<uint8_t *>(s.base) + layer * s.layer_pitch + off;
    uint8_t *host = kvc_ptr<uint8_t *>(p.host) + s.host_off + local * s.row_bytes;
    switch (s.vec) {
    case 16: kvc_offload_row<16>(dev, host, s.row_bytes, p.dir, valid); break;
    case 8: kvc_offload_row<8>(dev, host, s.row_bytes, p.dir, valid); break;
    case 4: kvc_offload_row<4>(dev, host, s.row_bytes, p.dir, valid); break;
    case 2: kvc_offload_row<2>(dev, host, s.row_bytes, p.dir, valid); break;
    default: kvc_offload_row<1>(dev, host, s.row_bytes, p.dir, valid); break;
    }
  }
}
