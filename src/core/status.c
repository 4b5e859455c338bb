/*
 * status.c — version queries and every string table, generated from the X-macro lists in
 * kvcache.h so the enum and its names can never drift apart.
 */
#include "core.h"

unsigned kvc_version_number(void) { return KVC_VERSION_NUMBER; }
const char *kvc_version_string(void) { return KVC_VERSION_STRING; }

const char *kvc_status_string(kvc_status status) {
  switch (status) {
#define KVC_XX_STR_(name, value, text) \
  case KVC_##name: return text;
    KVC_STATUS_MAP(KVC_XX_STR_)
#undef KVC_XX_STR_
  default: return "unknown status";
  }
}

const char *kvc_status_name(kvc_status status) {
  switch (status) {
#define KVC_XX_NAME_(name, value, text) \
  case KVC_##name: return #name;
    KVC_STATUS_MAP(KVC_XX_NAME_)
#undef KVC_XX_NAME_
  default: return "UNKNOWN";
  }
}

size_t kvc_dtype_size(kvc_dtype dtype) {
  switch (dtype) {
  case KVC_DTYPE_F32:
  case KVC_DTYPE_I32: return 4;
  case KVC_DTYPE_F16:
  case KVC_DTYPE_BF16: return 2;
  case KVC_DTYPE_FP8_E4M3:
  case KVC_DTYPE_FP8_E5M2:
  case KVC_DTYPE_U8:
  case KVC_DTYPE_FP4_E2M1: return 1;
  case KVC_DTYPE_I64:
  case KVC_DTYPE_U64: return 8;
  default: return 0;
  }
}

const char *kvc_dtype_name(kvc_dtype dtype) {
  switch (dtype) {
  case KVC_DTYPE_F32: return "f32";
  case KVC_DTYPE_F16: return "f16";
  case KVC_DTYPE_BF16: return "bf16";
  case KVC_DTYPE_FP8_E4M3: return "fp8_e4m3";
  case KVC_DTYPE_FP8_E5M2: return "fp8_e5m2";
  case KVC_DTYPE_U8: return "u8";
  case KVC_DTYPE_I32: return "i32";
  case KVC_DTYPE_I64: return "i64";
  case KVC_DTYPE_U64: return "u64";
  case KVC_DTYPE_FP4_E2M1: return "fp4_e2m1";
  default: return "invalid";
  }
}
