/*
 * host_kernels.h — the C reference of every CUDA kernel in kernels/. Each takes the same
 * parameter block (header struct followed by any inline payload) and runs the whole
 * grid sequentially. They are the host backend and the oracle of the GPU tests, so they
 * are written for clarity, with the same bounds rules as the kernels; the index rules
 * are the kernels' own (kernels/kvc_index.h). Only src/device includes this header: the
 * kernel launch (kcache.c) finds a twin by the kernel's entry name (twins.c).
 */
#ifndef KVC_HOST_KERNELS_H
#define KVC_HOST_KERNELS_H

#include "../device.h"
#include "kvc_abi.h"
#include "kvc_index.h" /* the index rules the kernels use, compiled here for the host */

#include <stddef.h>
#include <stdint.h>

#define KVC_HPTR(type, addr) ((type)(uintptr_t)(addr))

/* The inline payload that follows a header struct in a parameter block. */
#define KVC_INLINE_PAYLOAD(hdr) ((const uint32_t *)(const void *)((const char *)(hdr) + sizeof(*(hdr))))

/* A kernel's twin: `run` from the parameter block alone, or, for a kernel specialised at
 * compile time on CUDA, `run_spec`, which also gets the specialisation (-D values). */
typedef struct kvc__host_twin {
  const char *name; /* the CUDA entry name */
  void (*run)(const void *params);
  void (*run_spec)(const void *params, const kvc__spec *spec);
} kvc__host_twin;

/** The twin of kernel entry `name`, or NULL. */
const kvc__host_twin *kvc__host_twin_find(const char *name);
/** Runs `twin` on `params` with the kernel's specialisation `spec`. */
void kvc__host_twin_run(const kvc__host_twin *twin, const void *params, const kvc__spec *spec);
/** The value of define `name` in `spec`, or `fallback` when it is absent. */
int64_t kvc__spec_value(const kvc__spec *spec, const char *name, int64_t fallback);

void kvc_host_get_last_loc(const void *params);
void kvc_host_write_req_to_token(const void *params);
void kvc_host_row_write(const void *params);
void kvc_host_alloc_extend_fill(const void *params);
void kvc_host_alloc_decode_fill(const void *params);
void kvc_host_plan_extend(const void *params);
void kvc_host_plan_decode(const void *params);
void kvc_host_decode_channel_apply(const void *params);

/* kv_mha.c: KV row store/gather, move, offload. The row kernel reads its variant
 * (KVC_GATHER, KVC_SRC_DT, KVC_DST_DT, KVC_G, KVC_KCH, KVC_VCH) from the spec. */
void kvc_host_kv_rows(const void *params, const kvc__spec *spec);
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
