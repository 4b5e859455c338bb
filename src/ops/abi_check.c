/* abi_check.c — the parameter structs must have the same layout in C and CUDA: 8-byte
 * multiples with no hidden padding the CUDA compiler could lay out differently. */
#include "kvc_abi.h"

#define KVC_ABI_ASSERT(T, bytes) _Static_assert(sizeof(T) == (bytes), #T " layout changed")
KVC_ABI_ASSERT(kvc_p_get_last_loc, 48);
KVC_ABI_ASSERT(kvc_p_write_req_to_token, 80);
KVC_ABI_ASSERT(kvc_p_extend_fill, 72);
KVC_ABI_ASSERT(kvc_p_decode_fill, 64);
KVC_ABI_ASSERT(kvc_p_decode_channel, 80);
KVC_ABI_ASSERT(kvc_plan_extend_desc, 32);
KVC_ABI_ASSERT(kvc_p_plan_extend, 80);
KVC_ABI_ASSERT(kvc_p_plan_decode, 56);
KVC_ABI_ASSERT(kvc_p_row_write, 32);
KVC_ABI_ASSERT(kvc_p_kv_rows, 152);
KVC_ABI_ASSERT(kvc_kv_seg, 96);
KVC_ABI_ASSERT(kvc_p_kv_move, 88 + 96 * KVC_MAX_SEGS);
KVC_ABI_ASSERT(kvc_p_kv_offload, 48 + 72 + 96 * KVC_MAX_SEGS);
KVC_ABI_ASSERT(kvc_p_mla, 120);
KVC_ABI_ASSERT(kvc_p_nsa_index_set, 64);
KVC_ABI_ASSERT(kvc_p_nsa_index_get, 104);
KVC_ABI_ASSERT(kvc_mamba_seg, 40);
KVC_ABI_ASSERT(kvc_p_mamba_rows, 56 + 72 + 40 * KVC_MAMBA_MAX_SEGS);
KVC_ABI_ASSERT(kvc_p_swa_map_write, 40);
KVC_ABI_ASSERT(kvc_p_swa_gather, 64);
KVC_ABI_ASSERT(kvc_canary_buf, 24);
KVC_ABI_ASSERT(kvc_p_canary, 32 + 24 * KVC_CANARY_MAX_BUFS);
