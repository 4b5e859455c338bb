/*
 * kvc_abi.h — parameter structs shared by the C wrappers (src/ops, src/pool), the C
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
#include <stdint.h>
#endif

/* --- req_to_token.cu --------------------------------------------------------------- */

typedef struct kvc_p_get_last_loc {
  uint64_t table;       /* int32 [num_rows x row_stride] */
  uint64_t rows;        /* int32 or int64 [n] */
  uint64_t prefix_lens; /* int32 or int64 [n] */
  uint64_t out;         /* same type as prefix_lens [n] */
  int64_t num_rows, row_stride, n;
  int32_t rows_i64, lens_i64;
} kvc_p_get_last_loc;

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
typedef struct kvc_plan_extend_desc {
  int32_t row;         /* req_to_token row, or -1 when no table write */
  int32_t prefix_len;  /* p */
  int32_t seq_len;     /* s */
  int32_t last_loc;    /* slot of token p-1, or -1 */
  int32_t out_offset;  /* O_i into out */
  int32_t page_begin;  /* index of the request's first new page in the page list */
  int32_t prefix_src;  /* index of its prefix slots in the payload, or -1 */
  int32_t pad_;
} kvc_plan_extend_desc;

typedef struct kvc_p_plan_extend {
  uint64_t table;  /* int32 [.. x row_stride], or 0 */
  uint64_t out;    /* int64 [total], or 0 */
  uint64_t staged; /* uint32 payload in device memory, or 0 = inline */
  int64_t row_stride;
  int32_t n;          /* requests */
  int32_t page_size;
  int32_t pages_at;   /* payload word index of the page list */
  int32_t prefix_at;  /* payload word index of prefix slots */
  int32_t tokens_per_block;
  int32_t pad_;
} kvc_p_plan_extend; /* followed in the parameter block by the inline payload words:
                        n descriptors, the page list, prefix slots */

typedef struct kvc_p_plan_decode {
  uint64_t table;  /* int32, or 0 */
  uint64_t out;    /* int64 [n], or 0 */
  uint64_t staged; /* payload in device memory, or 0 = inline */
  int64_t row_stride;
  int32_t n;
  int32_t pad_;
} kvc_p_plan_decode; /* followed by the inline payload: 3 words per request (row,
                        position, slot) */

/* --- req_to_token.cu: write host-planned slots into one row ------------------------ */
typedef struct kvc_p_row_write {
  uint64_t table;  /* int32 */
  uint64_t staged; /* payload, or 0 = inline */
  int64_t offset;  /* row * row_stride + start */
  int32_t n;
  int32_t pad_;
} kvc_p_row_write; /* followed by the inline payload: n int32 slots */

/* Inline payload capacities (words) of the compiled variants; a plan larger than the
 * biggest goes through the staging buffer instead. Header + payload <= 32764 bytes. */
#define KVC_INLINE_SMALL 1000
#define KVC_INLINE_LARGE 8000

#endif /* KVC_ABI_H */
