/*
 * twins.c — which C twin runs a kernel on the host backend, by the kernel's extern "C"
 * entry name. The launchers above the seam name only the CUDA kernel (kvc__kernel_def);
 * the kernel lookup (kcache.c) resolves the twin here once per specialisation, so a
 * launch pays no lookup. A kernel added to kernels/ needs its twin added here too (the
 * host backend reports a kernel without one as an internal error at lookup).
 */
#include "host_kernels.h"

#include <string.h>

#define TWIN(name, fn) \
  { name, fn, NULL }
#define TWIN_SPEC(name, fn) \
  { name, NULL, fn }

static const kvc__host_twin twins[] = {
    TWIN("kvc_get_last_loc_r32_l32", kvc_host_get_last_loc),
    TWIN("kvc_get_last_loc_r64_l32", kvc_host_get_last_loc),
    TWIN("kvc_get_last_loc_r32_l64", kvc_host_get_last_loc),
    TWIN("kvc_get_last_loc_r64_l64", kvc_host_get_last_loc),
    TWIN("kvc_get_last_loc_r32_l32_one", kvc_host_get_last_loc),
    TWIN("kvc_get_last_loc_r64_l32_one", kvc_host_get_last_loc),
    TWIN("kvc_get_last_loc_r32_l64_one", kvc_host_get_last_loc),
    TWIN("kvc_get_last_loc_r64_l64_one", kvc_host_get_last_loc),
    TWIN("kvc_write_req_to_token", kvc_host_write_req_to_token),
    TWIN("kvc_row_write", kvc_host_row_write),
    TWIN("kvc_alloc_extend_fill", kvc_host_alloc_extend_fill),
    TWIN("kvc_alloc_decode_fill", kvc_host_alloc_decode_fill),
    TWIN("kvc_plan_extend", kvc_host_plan_extend),
    TWIN("kvc_plan_decode", kvc_host_plan_decode),
    TWIN("kvc_decode_channel_apply", kvc_host_decode_channel_apply),
    TWIN_SPEC("kvc_kv_rows", kvc_host_kv_rows),
    TWIN("kvc_kv_move", kvc_host_kv_move),
    TWIN("kvc_kv_offload", kvc_host_kv_offload),
    TWIN("kvc_mla_set", kvc_host_mla_set),
    TWIN("kvc_mla_get", kvc_host_mla_get),
    TWIN("kvc_nsa_index_set", kvc_host_nsa_index_set),
    TWIN("kvc_nsa_index_get", kvc_host_nsa_index_get),
    TWIN("kvc_mamba_rows", kvc_host_mamba_rows),
    TWIN("kvc_mamba_copy_staged", kvc_host_mamba_copy_staged),
    TWIN("kvc_swa_map_write", kvc_host_swa_map_write),
    TWIN("kvc_swa_gather", kvc_host_swa_gather),
    TWIN("kvc_canary_fill", kvc_host_canary_fill),
    TWIN("kvc_canary_check", kvc_host_canary_check),
};

const kvc__host_twin *kvc__host_twin_find(const char *name) {
  for (size_t i = 0; i < sizeof twins / sizeof twins[0]; i++)
    if (!strcmp(twins[i].name, name)) return &twins[i];
  return NULL;
}

void kvc__host_twin_run(const kvc__host_twin *twin, const void *params, const kvc__spec *spec) {
  if (twin->run_spec) twin->run_spec(params, spec);
  else twin->run(params);
}

int64_t kvc__spec_value(const kvc__spec *spec, const char *name, int64_t fallback) {
  for (int i = 0; spec && i < spec->count; i++)
    if (!strcmp(spec->def[i].name, name)) return spec->def[i].value;
  return fallback;
}
