/*
 * compile_check.c — builds every kernel source through NVRTC for a given architecture,
 * with representative specialisations, with no GPU or context. The kernel-compile test
 * (run in CI, which has the toolkit but no driver) calls it for sm_80 and sm_90.
 */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct compile_case {
  const char *file;
  const char *defines[8];
} compile_case;

static const compile_case cases[] = {
    /* kv_store.cu: copy (Llama-3-8B rows), bf16->e4m3 with K != V, f32->e5m2 narrow access,
     * FP4 write, FP4 gather, fp8 -> bf16 gather, 1-byte rows */
    {"kv_store.cu",
     {"-DKVC_GATHER=0", "-DKVC_SRC_DT=0", "-DKVC_DST_DT=0", "-DKVC_G=16", "-DKVC_KCH=128", "-DKVC_VCH=128",
      "-DKVC_AD=16", "-DKVC_AP=16"}},
    {"kv_store.cu",
     {"-DKVC_GATHER=0", "-DKVC_SRC_DT=3", "-DKVC_DST_DT=4", "-DKVC_G=8", "-DKVC_KCH=128", "-DKVC_VCH=64", "-DKVC_AD=16",
      "-DKVC_AP=8"}},
    {"kv_store.cu",
     {"-DKVC_GATHER=0", "-DKVC_SRC_DT=1", "-DKVC_DST_DT=5", "-DKVC_G=4", "-DKVC_KCH=30", "-DKVC_VCH=30", "-DKVC_AD=4",
      "-DKVC_AP=4"}},
    {"kv_store.cu",
     {"-DKVC_GATHER=0", "-DKVC_SRC_DT=3", "-DKVC_DST_DT=10", "-DKVC_G=16", "-DKVC_KCH=64", "-DKVC_VCH=64",
      "-DKVC_AD=16", "-DKVC_AP=8"}},
    {"kv_store.cu",
     {"-DKVC_GATHER=1", "-DKVC_SRC_DT=10", "-DKVC_DST_DT=1", "-DKVC_G=16", "-DKVC_KCH=64", "-DKVC_VCH=64",
      "-DKVC_AD=16", "-DKVC_AP=8"}},
    {"kv_store.cu",
     {"-DKVC_GATHER=1", "-DKVC_SRC_DT=4", "-DKVC_DST_DT=3", "-DKVC_G=8", "-DKVC_KCH=128", "-DKVC_VCH=128",
      "-DKVC_AD=16", "-DKVC_AP=8"}},
    {"kv_store.cu",
     {"-DKVC_GATHER=0", "-DKVC_SRC_DT=0", "-DKVC_DST_DT=0", "-DKVC_G=1", "-DKVC_KCH=1", "-DKVC_VCH=0", "-DKVC_AD=1",
      "-DKVC_AP=1"}},
    {"kv_move.cu", {"-DKVC_W=16", NULL}},
    {"kv_move.cu", {"-DKVC_W=32", NULL}},
    {"kv_move.cu", {"-DKVC_W=64", NULL}},
    {"kv_move.cu", {"-DKVC_W=128", NULL}},
    {"kv_move.cu", {"-DKVC_W=512", NULL}},
    {"kv_offload.cu", {NULL}},
    {"req_to_token.cu", {NULL}},
    {"req_to_token.cu", {"-DKVC_INLINE_WORDS=1000", NULL}},
    {"req_to_token.cu", {"-DKVC_INLINE_WORDS=8000", NULL}},
    {"alloc_fill.cu", {NULL}},
    {"alloc_plan.cu", {"-DKVC_INLINE_WORDS=1000", "-DKVC_PAGE_SIZE=16", NULL}},
    {"alloc_plan.cu", {"-DKVC_INLINE_WORDS=8000", "-DKVC_PAGE_SIZE=1", NULL}},
    {"alloc_plan.cu", {"-DKVC_INLINE_WORDS=2048", "-DKVC_PAGE_SIZE=64", NULL}},
    {"alloc_channel.cu", {NULL}},
    {"mla.cu", {"-DKVC_DIR=0", "-DKVC_MODE=0", "-DKVC_SRC=3", "-DKVC_DST=3"}},
    {"mla.cu", {"-DKVC_DIR=0", "-DKVC_MODE=0", "-DKVC_SRC=1", "-DKVC_DST=4"}},
    {"mla.cu", {"-DKVC_DIR=1", "-DKVC_R=96", "-DKVC_Q=32", "-DKVC_G=4"}},
    {"mla.cu", {"-DKVC_DIR=0", "-DKVC_MODE=1", "-DKVC_SRC=3", NULL}},
    {"mla.cu", {"-DKVC_DIR=1", "-DKVC_MODE=1", "-DKVC_DST=1", "-DKVC_G=2"}},
    {"mla.cu", {"-DKVC_DIR=0", "-DKVC_MODE=2", "-DKVC_SRC=3", NULL}},
    {"mla.cu", {"-DKVC_DIR=1", "-DKVC_MODE=2", "-DKVC_DST=1", NULL}},
    {"mla.cu", {"-DKVC_DIR=0", "-DKVC_G=1", "-DKVC_R=97", "-DKVC_Q=31"}},
    {"nsa_index.cu", {NULL}},
    {"swa.cu", {NULL}},
    {"swa.cu", {"-DKVC_INLINE_WORDS=8000", NULL}},
    {"mamba.cu", {"-DKVC_INLINE_WORDS=1000", "-DKVC_MAMBA_VEC=16", NULL}},
    {"mamba.cu", {"-DKVC_INLINE_WORDS=8000", "-DKVC_MAMBA_VEC=2", NULL}},
    {"canary.cu", {NULL}},
    {"canary.cu", {"-DKVC_INLINE_WORDS=1000", NULL}},
};

kvc_status kvc_compile_check(int sm, int *compiled) {
  KVC_API_ENTRY();
  KVC_RETURN_IF(sm < 50 || sm > 200, NULL, KVC_ERR_INVALID_ARGUMENT, "sm %d out of range", sm);
  int n = 0;
  for (size_t i = 0; i < KVC__ARRAY_LEN(cases); i++) {
    int nopt = 0;
    while (nopt < 8 && cases[i].defines[nopt]) nopt++;
    kvc__nvrtc_image img = {NULL, 0, false};
    KVC_FORWARD(kvc__nvrtc_compile(NULL, cases[i].file, cases[i].defines, nopt, sm, false, &img));
    free(img.data);
    n++;
  }
  if (compiled) *compiled = n;
  return KVC_OK;
}

kvc_status kvc_context_precompile(kvc_context *ctx) {
  KVC_API_ENTRY();
  KVC_RETURN_IF(!ctx, NULL, KVC_ERR_INVALID_ARGUMENT, "ctx is NULL");
  const kvc__kernel_def *fixed[] = {&kvc__k_get_last_loc[0], &kvc__k_get_last_loc[1], &kvc__k_get_last_loc[2],
                                    &kvc__k_get_last_loc[3], &kvc__k_get_last_loc[4], &kvc__k_get_last_loc[5],
                                    &kvc__k_get_last_loc[6], &kvc__k_get_last_loc[7], &kvc__k_write_req_to_token,
                                    &kvc__k_extend_fill,     &kvc__k_decode_fill};
  for (size_t i = 0; i < KVC__ARRAY_LEN(fixed); i++) {
    const kvc__kfunc *f;
    KVC_FORWARD(kvc__kernel_get(ctx, fixed[i], NULL, &f));
  }
  return KVC_OK;
}
