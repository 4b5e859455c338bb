/*
 * dlpack_abi.h — the DLPack v0.8 C ABI (DLManagedTensor), written here from the public
 * DLPack specification so the library needs no dlpack.h. Only the subset we export.
 */
#ifndef KVC_DLPACK_ABI_H
#define KVC_DLPACK_ABI_H

#include <stdint.h>

enum { KVC_DL_CPU = 1, KVC_DL_CUDA = 2 }; /* DLDeviceType */
enum {
  KVC_DL_INT = 0,
  KVC_DL_UINT = 1,
  KVC_DL_FLOAT = 2,
  KVC_DL_BFLOAT = 4,
  KVC_DL_FLOAT8_E4M3FN = 10,
  KVC_DL_FLOAT8_E5M2 = 12,
  KVC_DL_FLOAT4_E2M1FN = 17
}; /* DLDataTypeCode (the float8/float4 codes are DLPack >= 1.1) */

typedef struct kvc_dl_device {
  int32_t device_type;
  int32_t device_id;
} kvc_dl_device;

typedef struct kvc_dl_dtype {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} kvc_dl_dtype;

typedef struct kvc_dl_tensor {
  void *data;
  kvc_dl_device device;
  int32_t ndim;
  kvc_dl_dtype dtype;
  int64_t *shape;
  int64_t *strides; /* elements */
  uint64_t byte_offset;
} kvc_dl_tensor;

typedef struct kvc_dl_managed_tensor {
  kvc_dl_tensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct kvc_dl_managed_tensor *self);
} kvc_dl_managed_tensor;

#endif
