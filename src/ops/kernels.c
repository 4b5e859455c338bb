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
