/*
 * nsa_index.cu — NSA indexer key pages (SGLang SetKAndS, GetK, GetS, GetKAndS).
 *
 *   page p (row p of the buffer, ps * 132 bytes):
 *   [ key t=0 (128 B) | key t=1 | ... | key t=ps-1 | scale 0 (f32) | ... | scale ps-1 ]
 *
 *   kvc_nsa_index_set   token loc[i] <- (index_k[i], scale[i]); page loc / ps
 *   kvc_nsa_index_get   packed outputs of a batch of sequences (or one sequence)
 *
 * Eight lanes per token: lane j moves key bytes [16j, 16j + 16) (in 16-, 4- or 1-byte
 * accesses, `vec`, chosen on the host from the alignment of every address), lane 0 also
 * the 4 scale bytes. No specialisation: lengths, page size and table width are run-time
 * values (SGLang recompiles GetK/GetS per seq_len and GetKAndS per table width).
 *
 * get: the per-sequence output offsets come from a block scan of seq_lens done by every
 * block, in chunks of KVC_SCAN_CHUNK sequences kept in shared memory; tokens of a chunk
 * are spread over all threads of the grid and find their sequence by binary search. So
 * long and short sequences balance across the grid, and the batch size is unbounded.
 * Bounds: tokens at or past max_seq_len, past seq_len_sum or whose page column is past
 * table_width are not written... except that a page id outside [0, pages) (or a column
 * past table_width) writes zeros for that token, so the output never holds stale bytes.
 */
#include "common.cuh"

#define KVC_IDX_DIM 128
#define KVC_SCAN_CHUNK 2048

/* Copies 16 bytes from s to d in accesses of `vec` bytes (16, 4 or 1). */
KVC_DEVICE void kvc_copy16(unsigned char *d, const unsigned char *s, int vec) {
  if (vec == 16) {
    *reinterpret_cast<uint4 *>(d) = *reinterpret_cast<const uint4 *>(s);
  } else if (vec == 4) {
#pragma unroll
    for (int k = 0; k < 4; k++) reinterpret_cast<uint32_t *>(d)[k] = reinterpret_cast<const uint32_t *>(s)[k];
  } else {
#pragma unroll
    for (int k = 0; k < 16; k++) d[k] = s[k];
  }
}

KVC_DEVICE void kvc_zero16(unsigned char *d, int vec) {
  if (vec == 16) {
    *reinterpret_cast<uint4 *>(d) = make_uint4(0, 0, 0, 0);
  } else if (vec == 4) {
#pragma unroll
    for (int k = 0; k < 4; k++) reinterpret_cast<uint32_t *>(d)[k] = 0;
  } else {
#pragma unroll
    for (int k = 0; k < 16; k++) d[k] = 0;
  }
}

/* Scale bytes are 4-aligned in pages; outputs may not be (vec 1). */
KVC_DEVICE void kvc_copy4(unsigned char *d, const unsigned char *s, int vec) {
  if (vec >= 4) *reinterpret_cast<uint32_t *>(d) = *reinterpret_cast<const uint32_t *>(s);
  else
    for (int k = 0; k < 4; k++) d[k] = s[k];
}

extern "C" __global__ void __launch_bounds__(256) kvc_nsa_index_set(const __grid_constant__ kvc_p_nsa_index_set p) {
  const int64_t g = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 3;
  const int j = (int)(threadIdx.x & 7u);
  if (g >= p.n) return;
  const int64_t loc = kvc_load_index(p.loc, g, p.loc_i64);
  if (loc < 0 || loc >= p.pages * p.page_size) return;
  const int64_t page = loc / p.page_size, off = loc - page * p.page_size;
  unsigned char *pg = kvc_ptr<unsigned char *>(p.buf) + page * p.page_size * (KVC_IDX_DIM + 4);
  kvc_copy16(pg + off * KVC_IDX_DIM + 16 * j, kvc_ptr<const unsigned char *>(p.index_k) + g * KVC_IDX_DIM + 16 * j,
             p.vec);
  if (j == 0) reinterpret_cast<float *>(pg + p.page_size * KVC_IDX_DIM)[off] = kvc_ptr<const float *>(p.scale)[g];
}

extern "C" __global__ void __launch_bounds__(256) kvc_nsa_index_get(const __grid_constant__ kvc_p_nsa_index_get p) {
  __shared__ int64_t incl[KVC_SCAN_CHUNK]; /* global inclusive end offset of each sequence */
  __shared__ int64_t warp_sums[32];
  const int j = (int)(threadIdx.x & 7u);
  const int64_t gid = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 3;
  const int64_t gstep = ((int64_t)gridDim.x * blockDim.x) >> 3;
  const int64_t page_bytes = p.page_size * (KVC_IDX_DIM + 4);
  unsigned char *out_k = kvc_ptr<unsigned char *>(p.out_k);
  unsigned char *out_s = kvc_ptr<unsigned char *>(p.out_s);
  int64_t running = 0; /* tokens of the sequences before the chunk */
  for (int64_t c0 = 0; c0 < p.batch; c0 += KVC_SCAN_CHUNK) {
    const int64_t cn = p.batch - c0 < KVC_SCAN_CHUNK ? p.batch - c0 : KVC_SCAN_CHUNK;
    /* Scan the chunk's lengths, blockDim at a time. */
    int64_t chunk_run = running;
    for (int64_t s0 = 0; s0 < cn; s0 += blockDim.x) {
      const int64_t k = s0 + threadIdx.x;
      int64_t len = 0;
      if (k < cn) {
        len = p.seq_lens ? (int64_t)kvc_ptr<const int32_t *>(p.seq_lens)[c0 + k] : p.single_len;
        if (len < 0) len = 0;
      }
      int64_t total;
      const int64_t v = kvc_block_inclusive_scan(len, warp_sums, &total);
      if (k < cn) incl[k] = chunk_run + v;
      chunk_run += total;
    }
    __syncthreads();
    const int64_t end = chunk_run < p.seq_len_sum ? chunk_run : p.seq_len_sum;
    for (int64_t g = running + gid; g < end; g += gstep) {
      /* First sequence of the chunk whose end offset is past g. */
      int64_t lo = 0, hi = cn - 1;
      while (lo < hi) {
        const int64_t mid = (lo + hi) >> 1;
        if (incl[mid] > g) hi = mid;
        else lo = mid + 1;
      }
      const int64_t b = c0 + lo;
      const int64_t len = p.seq_lens ? (int64_t)kvc_ptr<const int32_t *>(p.seq_lens)[b] : p.single_len;
      const int64_t t = g - (incl[lo] - len);
      if (t >= p.max_seq_len) continue;
      const int64_t col = t / p.page_size, off = t - col * p.page_size;
      int64_t page = -1;
      if (col < p.table_width) page = kvc_ptr<const int32_t *>(p.page_table)[b * p.table_width + col];
      if (page >= 0 && page < p.pages) {
        const unsigned char *pg = kvc_ptr<const unsigned char *>(p.buf) + page * page_bytes;
        if (out_k) kvc_copy16(out_k + g * KVC_IDX_DIM + 16 * j, pg + off * KVC_IDX_DIM + 16 * j, p.vec);
        if (out_s && j == 0) kvc_copy4(out_s + g * 4, pg + p.page_size * KVC_IDX_DIM + 4 * off, p.vec);
      } else {
        if (out_k) kvc_zero16(out_k + g * KVC_IDX_DIM + 16 * j, p.vec);
        if (out_s && j == 0)
          for (int k = 0; k < 4; k++) out_s[g * 4 + k] = 0;
      }
    }
    running = chunk_run;
    __syncthreads(); /* incl[] is rewritten by the next chunk */
  }
}
