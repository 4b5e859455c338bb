/*
 * kvc_abi.h — parameter structs shared by the C wrappers (src/ops and the level-2 objects), the C
 * reference kernels (src/device/host_kernels) and the CUDA kernels (kernels/NAME.cu).
 *
 * Each kernel takes exactly one of these by value. Device addresses travel as uint64_t
 * so the layout is identical in C and CUDA; fields are ordered 8-byte first, then
 * 4-byte, and every struct is padded to a multiple of 8 (checked by static asserts in
 * src/ops/abi_check.c). Never reorder fields without bumping every user.
 */
#ifndef KVC_ABI_H
#define KVC_ABI_H

#ifdef __CUDACC_RTC__
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#else
#  include <stdint.h>
#endif

/* A function body shared by a kernel and its C twin (kvc_numeric.h, kvc_index.h):
 * inlined device code under NVRTC, a static inline function in C. */
#ifdef __CUDACC_RTC__
#  define KVC_HD __device__ __forceinline__
#else
#  define KVC_HD static inline
#endif

/* --- req_to_token.cu --------------------------------------------------------------- */

/* 48 bytes, the addresses first: on the H200 every thread of this kernel waits on its
 * parameter block, and a block reaching past c[0x0][0x240] put a second constant-cache
 * line on that path (0.04-0.09 us per launch in a graph: bench/NOTES-kernels.md). The
 * launcher refuses sizes beyond int32. */
typedef struct kvc_p_get_last_loc {
  uint64_t rows;        /* int32 or int64 [n] */
  uint64_t prefix_lens; /* int32 or int64 [n] */
  uint64_t table;       /* int32 [num_rows x row_stride] */
  uint64_t out;         /* same type as prefix_lens [n] */
  int32_t n, num_rows, row_stride;
  int32_t flags; /* KVC_LAST_LOC_ROWS_I64 | KVC_LAST_LOC_LENS_I64 */
} kvc_p_get_last_loc;

/* The index-type pair picks one of four entries (kvc_get_last_loc_r32_l32 ... _r64_l64,
 * in this order): types decided inside the kernel put a branch between the parameter
 * loads and the first global load, 0.05-0.08 us per launch on the H200. The twin reads
 * flags; the kernels have the types built in. */
#define KVC_LAST_LOC_ROWS_I64 1
#define KVC_LAST_LOC_LENS_I64 2
#define KVC_LAST_LOC_ONE 4       /* launcher only: n == 1 takes the one-thread _one entry */
#define KVC_LAST_LOC_THREADS 128 /* threads per block, one request each */

typedef struct kvc_p_write_req_to_token {
  uint64_t table;         /* int32 [num_rows x row_stride] */
  uint64_t rows;          /* int32 or int64 [n] */
  uint64_t prefix_ptrs;   /* uint64 [n] addresses of int64 vectors, or 0 */
  uint64_t prefix_lens;   /* lens type [n] */
  uint64_t seq_lens;      /* lens type [n] */
  uint64_t out_cache_loc; /* int64 [sum(seq - prefix)] */
  int64_t num_rows, row_stride, n;
  int32_t rows_i64, lens_i64;
} kvc_p_write_req_to_token;

/* --- alloc_fill.cu: SGLang's allocation kernels on device inputs ------------------- */

typedef struct kvc_p_extend_fill {
  uint64_t prefix_lens, seq_lens; /* lens type [n] */
  uint64_t last_loc;              /* int64 [n] */
  uint64_t free_pages;            /* int64 [num_free_pages] */
  uint64_t out;                   /* int64 [sum(seq - prefix)] */
  int64_t num_free_pages, page_size, n;
  int32_t lens_i64, pad_;
} kvc_p_extend_fill;

typedef struct kvc_p_decode_fill {
  uint64_t seq_lens;   /* lens type [n] */
  uint64_t last_loc;   /* int32 or int64 [n] */
  uint64_t free_pages; /* int64 [num_free_pages] */
  uint64_t out;        /* int64 [n] */
  int64_t num_free_pages, page_size, n;
  int32_t lens_i64, last_i64;
} kvc_p_decode_fill;

/* --- alloc_plan.cu: the allocator's host-planned steps ----------------------------- */

/* Payload words live inline in the parameter struct (KVC_PLAN_INLINE_WORDS of them, a
 * compile-time variant) or, when larger, in a staged device buffer at `staged`. */
#define KVC_PLAN_EXTEND_DESC_WORDS 8
/* Tokens of one request a block of kvc_plan_extend covers (grid y = token tile). */
#define KVC_PLAN_EXTEND_TOKENS_PER_BLOCK 1024
typedef struct kvc_plan_extend_desc {
  int32_t row;        /* req_to_token row, or -1 when no table write */
  int32_t prefix_len; /* p */
  int32_t seq_len;    /* s */
  int32_t last_loc;   /* slot of token p-1, or -1 */
  int32_t out_offset; /* O_i into out */
  int32_t page_begin; /* index of the request's first new page in the page list */
  int32_t prefix_src; /* index of its prefix slots in the payload, or -1 */
  int32_t pad_;
} kvc_plan_extend_desc;

typedef struct kvc_p_plan_extend {
  uint64_t table;  /* int32 [.. x row_stride], or 0 */
  uint64_t out;    /* int64 [total], or 0 */
  uint64_t staged; /* uint32 payload in device memory, or 0 = inline */
  int64_t row_stride;
  int32_t n; /* requests */
  int32_t page_size;
  int32_t pages_at;     /* payload word index of the page list */
  int32_t prefix_at;    /* payload word index of prefix slots */
  int32_t zero_at;      /* with a map: 0, or the payload word index of the zero region:
                           its word count c, then c (idx, len) runs, map[idx + j] = 0, the
                           SWA allocator's queued frees' zeroes minus the new pages, which
                           blocks x >= n apply in any order with the pairs; zero_at != 0
                           also zeroes each request's last new page's unused tail (every
                           slot of a new page is then written once) */
  int32_t swa_pages_at; /* with a map: payload word index of the SWA page list, parallel
                           to the page list (descriptor word 7: the SWA last_loc) */
  uint64_t map;         /* int64 [map_len] full->SWA mapping, or 0 (SWA allocators) */
  int64_t map_len;
  uint64_t rows_out; /* int64 [n]: descriptor word 0 (the row) of each request, or 0 */
} kvc_p_plan_extend; /* followed in the parameter block by the inline payload words:
                        n descriptors, the page list, prefix slots[, SWA page list][,
                        zero region]. 80 bytes: with 88 the inline variants' launches
                        took 15-30% more host time on the H200 (bench/RESULTS.md run 20) */

typedef struct kvc_p_plan_decode {
  uint64_t table;  /* int32, or 0 */
  uint64_t out;    /* int64 [n], or 0 */
  uint64_t staged; /* payload in device memory, or 0 = inline */
  int64_t row_stride;
  uint64_t map;    /* int64 [map_len] full->SWA mapping, or 0 (SWA allocators) */
  int32_t map_len; /* the SWA allocator's mapping is below 2^31 entries */
  int32_t zero_at; /* > 0 (with a map): payload word of the SWA allocator's carried zero
                      runs: a count, then (idx, len) pairs; 0: none */
  int32_t n;
  int32_t table_len; /* > 0: entries (row * row_stride + position, slot), offsets outside
                        [0, table_len) skipped; 0: (row, position, slot), row < 0 skipped */
} kvc_p_plan_decode; /* followed by the inline payload: per request one entry of
                        KVC_DECODE_ENTRY_WORDS(map, table_len) words (kvc_index.h): 2 or 3,
                        plus the slot's mapped value with a map; then the zero runs */

/* --- alloc_channel.cu: decode steps published by the host, applied by a kernel that
 * may sit in a CUDA graph (kvc_decode_channel) ------------------------------------- */
#define KVC_CHANNEL_HEADER_WORDS 4 /* step, n, 2 reserved; then n x (row, position, slot[, peer]) */
typedef struct kvc_p_decode_channel {
  uint64_t ring;       /* host memory the device reads: depth slots of slot_words uint32 */
  uint64_t applied;    /* device uint32: steps applied so far */
  uint64_t host_state; /* host memory the device writes: [0] last step applied, [1] first
                          step an execution found unpublished (0 = none) */
  uint64_t table;      /* int32 req_to_token table, or 0 */
  uint64_t out;        /* int64 [max_batch] out_cache_loc, or 0 */
  int64_t row_stride;
  uint64_t map; /* int64 [map_len] full->SWA mapping (SWA allocators), or 0 */
  int64_t map_len;
  int32_t depth, slot_words;
  int32_t max_batch, pad_;
} kvc_p_decode_channel; /* payload words per request: (row, position, slot), plus the
                           slot's mapped value when map != 0: kvc_decode_write's
                           three-word form (its two-word one measured slower in the host
                           half: bench/RESULTS.md, session 8, decode20b) */

/* --- req_to_token.cu: write host-planned slots into one row ------------------------ */
typedef struct kvc_p_row_write {
  uint64_t table;  /* int32 */
  uint64_t staged; /* payload, or 0 = inline */
  int64_t offset;  /* row * row_stride + start */
  int32_t n;
  int32_t pad_;
} kvc_p_row_write; /* followed by the inline payload: n int32 slots */

/* Inline payload capacities (words) of the compiled variants; a plan larger than the
 * biggest goes through the staging buffer instead. Header + payload <= 32764 bytes. The
 * driver copies the whole parameter block per launch: on the H200 a 4 KB block costs
 * about 0.1-0.3 us over none, 8 KB 0.4-0.6, 16 KB 0.9-1.5, 32 KB 2.1-3.8 (bench_kv's raw
 * sweep), hence four sizes: a decode step at batch 1024 takes the 8 KB one in its two-word
 * form (8 KB of payload: req_to_token tables below 2^31 entries), the 16 KB one in the
 * three-word form (12 KB). */
#define KVC_INLINE_SMALL 1000
#define KVC_INLINE_MEDIUM 2048
#define KVC_INLINE_WIDE 4000
#define KVC_INLINE_LARGE 8000

/* --- kv_store.cu: KV row scatter/gather with conversion (set_kv, gather_kv, store_kv) -
 * "dense" = n caller rows indexed by i; "pool" = buffer rows indexed by slot loc[i]. A
 * store reads dense and writes pool; a gather (KVC_GATHER=1) the reverse. Strides are
 * bytes. Each thread handles KVC_ROWS_UNROLL(src chunk bytes, dst chunk bytes) chunks of
 * KVC_G elements, loading all before storing. */
typedef struct kvc_p_kv_rows {
  uint64_t k_dense, v_dense;
  uint64_t k_pool, v_pool;
  uint64_t k_pool_scale, v_pool_scale; /* FP4: scale rows (one byte per 16 values), else 0 */
  uint64_t loc;                        /* int32 or int64 [n] */
  uint64_t k_scale_ptr, v_scale_ptr;   /* store with conversion: device float, or 0 */
  int64_t n, rows;                     /* slots outside [0, rows) are skipped */
  int64_t k_dense_stride, v_dense_stride;
  int64_t k_pool_stride, v_pool_stride;
  int64_t k_scale_stride, v_scale_stride;
  float k_scale, v_scale; /* used when the pointer is 0 */
  int32_t loc_i64, pad_;
} kvc_p_kv_rows;

#define KVC_KV_ROWS_BLOCK 256
/* Chunks per thread: about 64 bytes of the wider side in flight per thread, at most 16. */
#define KVC_ROWS_UNROLL_W(w) ((w) >= 64 ? 1 : (w) <= 4 ? 16 : 64 / (w))
#define KVC_ROWS_UNROLL(sb, db) KVC_ROWS_UNROLL_W((sb) >= (db) ? (sb) : (db))

/* --- kv_move.cu / kv_offload.cu: segments of a pool -------------------------------- *
 * A segment is one region kind across all layers: the row of slot s in layer l starts at
 *   base + l * layer_pitch + (page_size ? (s / page_size) * page_pitch + page_off
 *                                         + (s % page_size) * slot_pitch
 *                                       : s * slot_pitch)
 * and is row_bytes long; slots must satisfy 0 <= s < limit. `vec` (1/2/4/8/16) divides
 * every address and length of the segment. */
#define KVC_MAX_SEGS 8
typedef struct kvc_kv_seg {
  uint64_t base;
  int64_t layer_pitch, row_bytes, slot_pitch, page_pitch, page_off, limit;
  uint64_t host_off;     /* offload: byte offset of this segment's rows in the host buffer */
  int64_t count;         /* offload: rows per layer in the host buffer (n, or pages) */
  int32_t layers, tiles; /* move: tiles = ceil(row_bytes / KVC_W) */
  int32_t page_size, vec;
  int32_t by_page, pad_; /* offload: rows are pages (loc[j * page_size] / page_size) */
} kvc_kv_seg;

/* kv_move.cu: CTA b owns (segment, layer, byte tile) found from cta_first[]; it moves
 * locs in chunks of `chunk` (all of them when n <= chunk: one simultaneous copy) through
 * `stages` shared-memory tile buffers. */
typedef struct kvc_p_kv_move {
  uint64_t tgt, src; /* int32 or int64 [n] */
  int64_t n;
  int32_t loc_i64, nseg;
  int32_t chunk, stages;
  int32_t cta_first[KVC_MAX_SEGS + 1];
  int32_t pad_;
  kvc_kv_seg seg[KVC_MAX_SEGS];
  uint64_t host_scratch; /* host twin only: chunk x widest row bytes, allocated by the
                            launcher so that a failed allocation is a status (0 on CUDA) */
} kvc_p_kv_move;

/* kv_offload.cu: one warp per (segment, layer, row) between the pool and mapped host
 * memory. dir 0: pool -> host (rows of invalid slots are zero-filled); 1: host -> pool
 * (invalid slots skipped). */
typedef struct kvc_p_kv_offload {
  uint64_t host, loc;
  int64_t n;
  int64_t total_rows; /* sum over segments of layers * count */
  int32_t loc_i64, nseg;
  int32_t dir, pad_;
  int64_t row_first[KVC_MAX_SEGS + 1];
  kvc_kv_seg seg[KVC_MAX_SEGS];
} kvc_p_kv_offload;

/* --- mla.cu: MLA / MLA-FP4 / NSA latent rows (kvc_set_mla_kv, kvc_get_mla_kv) ------- */

#define KVC_MLA_MODE_ROWS 0 /* [nope | rope] elements of dtype, converted element-wise */
#define KVC_MLA_MODE_FP4 1  /* packed e2m1 data rows + one scale byte per 16 values */
#define KVC_MLA_MODE_NSA 2  /* 656-byte rows: 512 e4m3 codes | 4 f32 scales | 64 bf16 */

/* One struct for both directions. set: nope/rope are the sources (src_dt), the buffer
 * holds dst_dt; get: the buffer holds src_dt (ROWS), nope/rope are outputs in dst_dt.
 * The CUDA kernels take mode, dtypes, R, Q and the vector group G as compile-time
 * specialisation (KVC_MODE, KVC_SRC, KVC_DST, KVC_R, KVC_Q, KVC_G); the fields repeat
 * them for the C twin. */
typedef struct kvc_p_mla {
  uint64_t loc;      /* int32 or int64 [n] */
  uint64_t nope;     /* [n x nope_stride] elements */
  uint64_t rope;     /* [n x rope_stride] elements (0 when Q == 0; get: 0 = not wanted) */
  uint64_t kv;       /* rows (FP4: packed data rows) */
  uint64_t kv_scale; /* FP4 scale rows, else 0 */
  int64_t n, num_rows;
  int64_t nope_stride, rope_stride; /* elements of the nope/rope dtype */
  int64_t kv_stride;                /* ROWS: elements of the row dtype; FP4/NSA: bytes */
  int64_t scale_stride;             /* FP4 scale row bytes */
  int32_t loc_i64, mode, src_dt, dst_dt;
  int32_t R, Q, G, pad_;
} kvc_p_mla;

/* --- nsa_index.cu: NSA index-K pages (SetKAndS, GetK/GetS/GetKAndS) ---------------- */

/* Page p of a layer's index buffer = row p of page_bytes = ps * (128 + 4) bytes: token t
 * of the page has its 128 key bytes at t * 128 and its f32 scale at ps * 128 + 4 * t. */
typedef struct kvc_p_nsa_index_set {
  uint64_t loc;     /* int32 or int64 [n] */
  uint64_t index_k; /* uint8 [n x 128] */
  uint64_t scale;   /* f32 [n] */
  uint64_t buf;     /* index pages */
  int64_t n, pages, page_size;
  int32_t loc_i64;
  int32_t vec; /* bytes per key access: 16, 4 or 1 (alignment of every key address) */
} kvc_p_nsa_index_set;

/* GetKAndS; one sequence (GetK/GetS) is seq_lens == 0 with batch 1 and single_len. */
typedef struct kvc_p_nsa_index_get {
  uint64_t page_table; /* int32 [batch x table_width] */
  uint64_t seq_lens;   /* int32 [batch], or 0: one sequence of single_len */
  uint64_t out_k;      /* uint8 [seq_len_sum x 128], or 0 */
  uint64_t out_s;      /* uint8 [seq_len_sum x 4], or 0 */
  uint64_t buf;        /* index pages */
  int64_t batch, table_width, single_len, seq_len_sum, max_seq_len, pages, page_size;
  int32_t vec; /* as in kvc_p_nsa_index_set */
  int32_t pad_;
} kvc_p_nsa_index_get;

/* --- mamba.cu: Mamba state rows (zero on alloc, copy_from/fork, host offload) ------- *
 * A segment is one state tensor across its layers: the row of slot s in layer l is at
 * base + l * layer_pitch + s * row_bytes, row_bytes long. The slot ids (uint32) are the
 * payload after the header (inline, or staged at `staged`); copy: n src ids then n dst
 * ids. Work is cut into byte tiles of `tile` bytes; `vec` (16/8/4/2/1) divides every
 * address, pitch, tile and length (and, offloading, the host buffer and offsets).
 * kvc_mamba_rows: unit u of segment s (u - unit_first[s]) = ((layer * n) + i) * tiles + t:
 * one tile of one row; modes zero / copy (disjoint sets) / to host / from host.
 * kvc_mamba_copy_staged: unit = (layer * tiles + t): the CTA reads tile t of all n
 * source rows into dynamic shared memory (n * tile bytes, then 8 n bytes of ids), syncs,
 * then writes all n targets, which makes overlapping src/dst sets one simultaneous copy;
 * n <= KVC_MAMBA_STAGE_BYTES / 16. */
#define KVC_MAMBA_MAX_SEGS 8
#define KVC_MAMBA_TILE 16384
#define KVC_MAMBA_STAGE_BYTES 32768       /* 16 bytes x the most pairs of an overlapping copy */
#define KVC_MAMBA_STAGED_TILE_BYTES 65536 /* n x tile of an overlapping copy, at most */
#define KVC_MAMBA_BLOCK 256
#define KVC_MAMBA_ZERO 0
#define KVC_MAMBA_COPY 1
#define KVC_MAMBA_TO_HOST 2
#define KVC_MAMBA_FROM_HOST 3
typedef struct kvc_mamba_seg {
  uint64_t base;
  int64_t layer_pitch, row_bytes;
  int64_t host_off; /* offload: byte offset of this segment's rows in the host buffer */
  int32_t layers, tiles;
} kvc_mamba_seg;

typedef struct kvc_p_mamba_rows {
  uint64_t staged; /* payload in device memory, or 0 = inline */
  uint64_t host;   /* offload: host buffer (device-accessible address) */
  int64_t n;       /* ids (pairs when copying) */
  int64_t tile;    /* bytes */
  int64_t slots;   /* rows per layer (size + 1): ids outside [0, slots) are skipped */
  int32_t mode, nseg;
  int32_t vec, pad_;
  int64_t unit_first[KVC_MAMBA_MAX_SEGS + 1];
  kvc_mamba_seg seg[KVC_MAMBA_MAX_SEGS];
} kvc_p_mamba_rows; /* followed by the inline payload words */

/* --- swa.cu: full->SWA and hybrid index maps (src/alloc/swa_allocator.c ...) -------- */
#define KVC_SWA_MAP_PAIRS 0 /* payload (idx, val): map[idx] = (int32)val */
#define KVC_SWA_MAP_RUNS 1  /* payload (idx, val, len): map[idx + j] = val + j */
#define KVC_SWA_MAP_ZERO 2  /* payload (idx, len): map[idx + j] = 0 */
typedef struct kvc_p_swa_map_write {
  uint64_t dst;    /* int32 or int64 [dst_len] */
  uint64_t staged; /* payload in device memory, or 0 = inline */
  int64_t dst_len;
  int32_t mode, count; /* count = items, zero_count of them first */
  int32_t dst_i64;
  int32_t zero_count;  /* leading ZERO items (idx, len) before the count - zero_count items
                         of `mode`: the SWA allocator's queued zeroes merged into its next
                         write; they never overlap that write's entries (the host checks) */
} kvc_p_swa_map_write; /* followed by the inline payload words */

typedef struct kvc_p_swa_gather {
  uint64_t map, in, out;   /* map: int32/int64 [map_len]; in, out: int32/int64 [n] */
  int64_t n, map_len, oob; /* oob: value for in[i] outside [0, map_len) */
  int32_t map_i64, in_i64, out_i64, pad_;
} kvc_p_swa_gather;

/* --- canary.cu: debug canary rows (kvc_kv_pool_canary_fill / _check) --------------- *
 * Unit u = i * nbuf + b: row payload[i] (int32 slot ids, inline or staged) of buffer b.
 * Fill writes KVC_CANARY_BYTE into every byte of the row; check counts the bytes that
 * differ into result[0] and records the lowest violating unit as result[1] =
 * max(UINT64_MAX - u) (result zeroed before the launch). Rows are accessed 16 bytes at
 * a time when row_bytes % 16 == 0 (bases are 256-aligned), else byte by byte. Slots
 * outside [0, rows) of a buffer are skipped. */
#define KVC_CANARY_MAX_BUFS 256
#define KVC_CANARY_BYTE 0xCB
typedef struct kvc_canary_buf {
  uint64_t base;
  int64_t row_bytes, rows;
} kvc_canary_buf;

typedef struct kvc_p_canary {
  uint64_t staged; /* payload in device memory, or 0 = inline */
  uint64_t result; /* check: uint64 [2] (count, reversed first unit); fill: 0 */
  int64_t n;       /* slots */
  int32_t nbuf, pad_;
  kvc_canary_buf buf[KVC_CANARY_MAX_BUFS];
} kvc_p_canary; /* followed by the inline payload: n int32 slots */

#endif /* KVC_ABI_H */
