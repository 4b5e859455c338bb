/*
 * host_kernels.h — the C reference of every CUDA kernel in kernels/. Each takes the same
 * parameter block (header struct followed by any inline payload) and runs the whole
 * grid sequentially. They are the host backend and the oracle of the GPU tests, so they
 * are written for clarity, with the same bounds rules as the kernels.
 */
#ifndef KVC_HOST_KERNELS_H
#define KVC_HOST_KERNELS_H

#include "kvc_abi.h"
#include "kvc_index.h" /* the index rules the kernels use, compiled here for the host */

#include <stddef.h>
#include <stdint.h>

#define KVC_HPTR(type, addr) ((type)(uintptr_t)(addr))

/* The inline payload that follows a header struct in a parameter block. */
#define KVC_INLINE_PAYLOAD(hdr) ((const uint32_t *)(const void *)((const char *)(hdr) + sizeof(*(hdr))))

void kvc_host_get_last_loc(const void *params);
void kvc_host_write_req_to_token(const void *params);
void kvc_host_row_write(const void *params);
void kvc_host_alloc_extend_fill(const void *params);
void kvc_host_alloc_decode_fill(const void *params);
void kvc_host_plan_extend(const void *params);
void kvc_host_plan_decode(const void *params);
void kvc_host_decode_channel_apply(const void *params);


/* kv_mha.c: KV row store/gather, move, offload. The row kernel's specialisation
 * (compile-time defines on CUDA) follows its kvc_p_kv_rows in the parameter block. */
typedef struct kvc_host_kv_spec {
  int32_t gather, src_dt, dst_dt, g, kch, vch;
} kvc_host_kv_spec;
void kvc_host_kv_rows(const void *params);
void kvc_host_kv_move(const void *params);
void kvc_host_kv_offload(const void *params);
void kvc_host_mla_set(const void *params);
void kvc_host_mla_get(const void *params);
void kvc_host_nsa_index_set(const void *params);
void kvc_host_nsa_index_get(const void *params);
void kvc_host_mamba_rows(const void *params);
void kvc_host_mamba_copy_staged(const void *params);

/* swa.c: full->SWA / hybrid index maps. */
void kvc_host_swa_map_write(const void *params);
void kvc_host_swa_gather(const void *params);

/* canary.c: debug canary rows of a KV pool. */
void kvc_host_canary_fill(const void *params);
void kvc_host_canary_check(const void *params);

#endif
