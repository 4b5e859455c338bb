/*
 * kernels.c — the table of every kernel: CUDA entry, source file, host twin. The
 * compile check walks it with representative specialisations.
 */
#include "../device/host_kernels/host_kernels.h"
#include "ops.h"

const kvc__kernel_def kvc__k_get_last_loc = {"kvc_get_last_loc", "req_to_token.cu", kvc_host_get_last_loc};
const kvc__kernel_def kvc__k_write_req_to_token = {"kvc_write_req_to_token", "req_to_token.cu", kvc_host_write_req_to_token};
const kvc__kernel_def kvc__k_row_write = {"kvc_row_write", "req_to_token.cu", kvc_host_row_write};
const kvc__kernel_def kvc__k_extend_fill = {"kvc_alloc_extend_fill", "alloc_fill.cu", kvc_host_alloc_extend_fill};
const kvc__kernel_def kvc__k_decode_fill = {"kvc_alloc_decode_fill", "alloc_fill.cu", kvc_host_alloc_decode_fill};
const kvc__kernel_def kvc__k_plan_extend = {"kvc_plan_extend", "alloc_plan.cu", kvc_host_plan_extend};
const kvc__kernel_def kvc__k_plan_decode = {"kvc_plan_decode", "alloc_plan.cu", kvc_host_plan_decode};
const kvc__kernel_def kvc__k_decode_channel = {"kvc_decode_channel_apply", "alloc_channel.cu",
                                                kvc_host_decode_channel_apply};
const kvc__kernel_def kvc__k_kv_rows = {"kvc_kv_rows", "kv_store.cu", kvc_host_kv_rows};
const kvc__kernel_def kvc__k_kv_move = {"kvc_kv_move", "kv_move.cu", kvc_host_kv_move};
const kvc__kernel_def kvc__k_kv_offload = {"kvc_kv_offload", "kv_offload.cu", kvc_host_kv_offload};
const kvc__kernel_def kvc__k_mla_set = {"kvc_mla_set", "mla.cu", kvc_host_mla_set};
const kvc__kernel_def kvc__k_mla_get = {"kvc_mla_get", "mla.cu", kvc_host_mla_get};
const kvc__kernel_def kvc__k_nsa_index_set = {"kvc_nsa_index_set", "nsa_index.cu", kvc_host_nsa_index_set};
const kvc__kernel_def kvc__k_nsa_index_get = {"kvc_nsa_index_get", "nsa_index.cu", kvc_host_nsa_index_get};
const kvc__kernel_def kvc__k_mamba_rows = {"kvc_mamba_rows", "mamba.cu", kvc_host_mamba_rows};
const kvc__kernel_def kvc__k_mamba_copy_staged = {"kvc_mamba_copy_staged", "mamba.cu", kvc_host_mamba_copy_staged};
const kvc__kernel_def kvc__k_swa_map_write = {"kvc_swa_map_write", "swa.cu", kvc_host_swa_map_write};
const kvc__kernel_def kvc__k_swa_gather = {"kvc_swa_gather", "swa.cu", kvc_host_swa_gather};
const kvc__kernel_def kvc__k_canary_fill = {"kvc_canary_fill", "canary.cu", kvc_host_canary_fill};
const kvc__kernel_def kvc__k_canary_check = {"kvc_canary_check", "canary.cu", kvc_host_canary_check};
