/*
 * kernels.c — the table of every kernel: CUDA entry name and source file. The host
 * backend finds each kernel's C twin by the entry name (src/device/host_kernels/twins.c),
 * so nothing here depends on the backend.
 */
#include "ops.h"

/* Indexed by KVC_LAST_LOC_ROWS_I64 | KVC_LAST_LOC_LENS_I64 | KVC_LAST_LOC_ONE
 * (kernels/kvc_abi.h). */
const kvc__kernel_def kvc__k_get_last_loc[8] = {
    {"kvc_get_last_loc_r32_l32", "req_to_token.cu"},     {"kvc_get_last_loc_r64_l32", "req_to_token.cu"},
    {"kvc_get_last_loc_r32_l64", "req_to_token.cu"},     {"kvc_get_last_loc_r64_l64", "req_to_token.cu"},
    {"kvc_get_last_loc_r32_l32_one", "req_to_token.cu"}, {"kvc_get_last_loc_r64_l32_one", "req_to_token.cu"},
    {"kvc_get_last_loc_r32_l64_one", "req_to_token.cu"}, {"kvc_get_last_loc_r64_l64_one", "req_to_token.cu"}};
const kvc__kernel_def kvc__k_write_req_to_token = {"kvc_write_req_to_token", "req_to_token.cu"};
const kvc__kernel_def kvc__k_row_write = {"kvc_row_write", "req_to_token.cu"};
const kvc__kernel_def kvc__k_extend_fill = {"kvc_alloc_extend_fill", "alloc_fill.cu"};
const kvc__kernel_def kvc__k_decode_fill = {"kvc_alloc_decode_fill", "alloc_fill.cu"};
const kvc__kernel_def kvc__k_plan_extend = {"kvc_plan_extend", "alloc_plan.cu"};
const kvc__kernel_def kvc__k_plan_decode = {"kvc_plan_decode", "alloc_plan.cu"};
const kvc__kernel_def kvc__k_decode_channel = {"kvc_decode_channel_apply", "alloc_channel.cu"};
const kvc__kernel_def kvc__k_kv_rows = {"kvc_kv_rows", "kv_store.cu"};
const kvc__kernel_def kvc__k_kv_move = {"kvc_kv_move", "kv_move.cu"};
const kvc__kernel_def kvc__k_kv_offload = {"kvc_kv_offload", "kv_offload.cu"};
const kvc__kernel_def kvc__k_mla_set = {"kvc_mla_set", "mla.cu"};
const kvc__kernel_def kvc__k_mla_get = {"kvc_mla_get", "mla.cu"};
const kvc__kernel_def kvc__k_nsa_index_set = {"kvc_nsa_index_set", "nsa_index.cu"};
const kvc__kernel_def kvc__k_nsa_index_get = {"kvc_nsa_index_get", "nsa_index.cu"};
const kvc__kernel_def kvc__k_mamba_rows = {"kvc_mamba_rows", "mamba.cu"};
const kvc__kernel_def kvc__k_mamba_copy_staged = {"kvc_mamba_copy_staged", "mamba.cu"};
const kvc__kernel_def kvc__k_swa_map_write = {"kvc_swa_map_write", "swa.cu"};
const kvc__kernel_def kvc__k_swa_gather = {"kvc_swa_gather", "swa.cu"};
const kvc__kernel_def kvc__k_canary_fill = {"kvc_canary_fill", "canary.cu"};
const kvc__kernel_def kvc__k_canary_check = {"kvc_canary_check", "canary.cu"};

/* Every definition above, for checks that must cover all kernels (test_ops: each has a
 * host twin). */
const kvc__kernel_def *const kvc__kernel_table[] = {
    &kvc__k_get_last_loc[0], &kvc__k_get_last_loc[1], &kvc__k_get_last_loc[2],
    &kvc__k_get_last_loc[3], &kvc__k_get_last_loc[4], &kvc__k_get_last_loc[5],
    &kvc__k_get_last_loc[6], &kvc__k_get_last_loc[7], &kvc__k_write_req_to_token,
    &kvc__k_row_write,       &kvc__k_extend_fill,     &kvc__k_decode_fill,
    &kvc__k_plan_extend,     &kvc__k_plan_decode,     &kvc__k_decode_channel,
    &kvc__k_kv_rows,         &kvc__k_kv_move,         &kvc__k_kv_offload,
    &kvc__k_mla_set,         &kvc__k_mla_get,         &kvc__k_nsa_index_set,
    &kvc__k_nsa_index_get,   &kvc__k_mamba_rows,      &kvc__k_mamba_copy_staged,
    &kvc__k_swa_map_write,   &kvc__k_swa_gather,      &kvc__k_canary_fill,
    &kvc__k_canary_check,
};
const size_t kvc__kernel_table_len = sizeof kvc__kernel_table / sizeof kvc__kernel_table[0];
