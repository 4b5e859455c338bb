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
  const char *defines[4];
} compile_case;

static const compile_case cases[] = {
    {"req_to_token.cu", {NULL}},
    {"req_to_token.cu", {"-DKVC_INLINE_WORDS=1000", NULL}},
    {"req_to_token.cu", {"-DKVC_INLINE_WORDS=8000", NULL}},
    {"alloc_fill.cu", {NULL}},
    {"alloc_plan.cu", {"-DKVC_INLINE_WORDS=1000", "-DKVC_PAGE_SIZE=16", NULL}},
    {"alloc_plan.cu", {"-DKVC_INLINE_WORDS=8000", "-DKVC_PAGE_SIZE=1", NULL}},
};

kvc_status kvc_compile_check(int sm, int *compiled) {
  KVC_RETURN_IF(sm < 50 || sm > 200, NULL, KVC_ERR_INVALID_ARGUMENT, "sm %d out of range", sm);
  int n = 0;
  for (size_t i = 0; i < KVC__ARRAY_LEN(cases); i++) {
    int nopt = 0;
    while (nopt < 4 && cases[i].defines[nopt]) nopt++;
    void *image = NULL;
    size_t bytes = 0;
    bool is_ptx = false;
    KVC_FORWARD(kvc__nvrtc_compile(NULL, cases[i].file, cases[i].defines, nopt, sm, false, &image, &bytes, &is_ptx));
    free(image);
    n++;
  }
  if (compiled) *compiled = n;
  return KVC_OK;
}

kvc_status kvc_context_precompile(kvc_context *ctx) {
  KVC_RETURN_IF(!ctx, NULL, KVC_ERR_INVALID_ARGUMENT, "ctx is NULL");
  const kvc__kernel_def *fixed[] = {&kvc__k_get_last_loc, &kvc__k_write_req_to_token, &kvc__k_extend_fill,
                                    &kvc__k_decode_fill};
  for (size_t i = 0; i < KVC__ARRAY_LEN(fixed); i++) {
    const kvc__kfunc *f;
    KVC_FORWARD(kvc__kernel_get(ctx, fixed[i], NULL, &f));
  }
  return KVC_OK;
}
