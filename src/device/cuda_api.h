/*
 * cuda_api.h — the project's own declarations of the part of the CUDA driver API and of
 * NVRTC that cuda.c and nvrtc.c use, so the CUDA backend builds on a machine without the
 * CUDA toolkit (an engine's CPU CI, a laptop, a wheel built on a CPU host) and works on
 * any machine where a driver exists at run time. Nothing from the toolkit is linked:
 * libcuda.so.1 and libnvrtc are loaded with dlopen, and every driver entry point is
 * resolved through cuGetProcAddress at an explicit ABI version (cuda_syms.inc).
 *
 * Written from NVIDIA's documented API (CUDA Driver API and NVRTC reference manuals):
 * the same type names, the same enumerator values and, for each PFN_<name>_v<version>,
 * the signature of the entry point at that ABI version. Only what the library uses is
 * declared. Handles are pointers to incomplete structs with the driver's tag names,
 * CUdeviceptr is the 64-bit integer of the _v2 ABI, enumerations are C enums (int-sized).
 *
 * Everything is written once, in the lists below, so that it can be checked: on a
 * machine with the toolkit, tests/unit/test_cuda_api.c defines KVC_CUDA_API_LISTS_ONLY,
 * includes the toolkit's cuda.h / cudaTypedefs.h / nvrtc.h and expands the same lists
 * into static assertions against them (each type, each enumerator's value, each entry
 * point's function type). Outside that test, include this only from src/device/cuda.c and
 * src/device/nvrtc.c, never together with the toolkit's headers (the names are the same).
 */
#ifndef KVC_CUDA_API_H
#define KVC_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

/* --- Types: X(name, definition) ------------------------------------------------------- */

#define KVC_CUDA_TYPES(X)                                                              \
  X(cuuint64_t, uint64_t)                                                              \
  X(CUdeviceptr, unsigned long long) /* CUdeviceptr_v2: device addresses are 64-bit */ \
  X(CUdevice, int)                   /* a device ordinal handle */                     \
  X(CUcontext, struct CUctx_st *)                                                      \
  X(CUmodule, struct CUmod_st *)                                                       \
  X(CUfunction, struct CUfunc_st *)                                                    \
  X(CUstream, struct CUstream_st *)                                                    \
  X(CUevent, struct CUevent_st *)                                                      \
  X(CUarray, struct CUarray_st *) /* only as a (NULL) field of the copy descriptors */ \
  X(nvrtcProgram, struct _nvrtcProgram *)

/* --- Enumerations: X(enumerator, value), one list per enum type (only values used) ---- */

#define KVC_CUDA_RESULT_VALUES(X) /* CUresult */ \
  X(CUDA_SUCCESS, 0)                             \
  X(CUDA_ERROR_OUT_OF_MEMORY, 2)                 \
  X(CUDA_ERROR_NOT_READY, 600)                   \
  X(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, 704)
#define KVC_CUDA_DEVICE_ATTRIBUTE_VALUES(X) /* CUdevice_attribute */ \
  X(CU_DEVICE_ATTRIBUTE_MAX_PITCH, 11)                               \
  X(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 16)                    \
  X(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 38)                           \
  X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 75)                \
  X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 76)
#define KVC_CUDA_FUNCTION_ATTRIBUTE_VALUES(X) /* CUfunction_attribute */ \
  X(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 8)
#define KVC_CUDA_EVENT_FLAG_VALUES(X) /* CUevent_flags */ \
  X(CU_EVENT_DEFAULT, 0x0)                                \
  X(CU_EVENT_DISABLE_TIMING, 0x2)
#define KVC_CUDA_CAPTURE_STATUS_VALUES(X) /* CUstreamCaptureStatus */ \
  X(CU_STREAM_CAPTURE_STATUS_NONE, 0)                                 \
  X(CU_STREAM_CAPTURE_STATUS_ACTIVE, 1)                               \
  X(CU_STREAM_CAPTURE_STATUS_INVALIDATED, 2)
#define KVC_CUDA_PROC_FLAG_VALUES(X) /* CUdriverProcAddress_flags (passed as cuuint64_t) */ \
  X(CU_GET_PROC_ADDRESS_DEFAULT, 0)
#define KVC_CUDA_PROC_QUERY_VALUES(X) /* CUdriverProcAddressQueryResult */ \
  X(CU_GET_PROC_ADDRESS_SUCCESS, 0)                                        \
  X(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, 1)                               \
  X(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, 2)
#define KVC_CUDA_MEMORY_TYPE_VALUES(X) /* CUmemorytype */ \
  X(CU_MEMORYTYPE_HOST, 0x1)                              \
  X(CU_MEMORYTYPE_DEVICE, 0x2)
#define KVC_NVRTC_RESULT_VALUES(X) /* nvrtcResult */ X(NVRTC_SUCCESS, 0)

/* X(type, tag, values list): every enum type above, for definition and checking. */
#define KVC_CUDA_ENUMS(X)                                                                            \
  X(CUresult, cudaError_enum, KVC_CUDA_RESULT_VALUES)                                                \
  X(CUdevice_attribute, CUdevice_attribute_enum, KVC_CUDA_DEVICE_ATTRIBUTE_VALUES)                   \
  X(CUfunction_attribute, CUfunction_attribute_enum, KVC_CUDA_FUNCTION_ATTRIBUTE_VALUES)             \
  X(CUevent_flags, CUevent_flags_enum, KVC_CUDA_EVENT_FLAG_VALUES)                                   \
  X(CUstreamCaptureStatus, CUstreamCaptureStatus_enum, KVC_CUDA_CAPTURE_STATUS_VALUES)               \
  X(CUdriverProcAddress_flags, CUdriverProcAddress_flags_enum, KVC_CUDA_PROC_FLAG_VALUES)            \
  X(CUdriverProcAddressQueryResult, CUdriverProcAddressQueryResult_enum, KVC_CUDA_PROC_QUERY_VALUES) \
  X(CUmemorytype, CUmemorytype_enum, KVC_CUDA_MEMORY_TYPE_VALUES)                                    \
  X(nvrtcResult, nvrtcResult_kvc_tag, KVC_NVRTC_RESULT_VALUES)

/* --- Copy descriptors: X(field type, field name), every field in declaration order ---- */
/* The strided copies of KV transfer (cuda.c: one cuMemcpy2DAsync / cuMemcpy3DPeerAsync per
 * page run across all layers). test_cuda_api checks each field's offset and type and the
 * struct's size against the toolkit's. */
/* clang-format off */
#define KVC_CUDA_MEMCPY2D_FIELDS(X)                                                         \
  X(size_t, srcXInBytes) X(size_t, srcY) X(CUmemorytype, srcMemoryType)                     \
  X(const void *, srcHost) X(CUdeviceptr, srcDevice) X(CUarray, srcArray) X(size_t, srcPitch) \
  X(size_t, dstXInBytes) X(size_t, dstY) X(CUmemorytype, dstMemoryType) X(void *, dstHost)  \
  X(CUdeviceptr, dstDevice) X(CUarray, dstArray) X(size_t, dstPitch)                        \
  X(size_t, WidthInBytes) X(size_t, Height)
#define KVC_CUDA_MEMCPY3D_PEER_FIELDS(X)                                                    \
  X(size_t, srcXInBytes) X(size_t, srcY) X(size_t, srcZ) X(size_t, srcLOD)                  \
  X(CUmemorytype, srcMemoryType) X(const void *, srcHost) X(CUdeviceptr, srcDevice)         \
  X(CUarray, srcArray) X(CUcontext, srcContext) X(size_t, srcPitch) X(size_t, srcHeight)    \
  X(size_t, dstXInBytes) X(size_t, dstY) X(size_t, dstZ) X(size_t, dstLOD)                  \
  X(CUmemorytype, dstMemoryType) X(void *, dstHost) X(CUdeviceptr, dstDevice)               \
  X(CUarray, dstArray) X(CUcontext, dstContext) X(size_t, dstPitch) X(size_t, dstHeight)    \
  X(size_t, WidthInBytes) X(size_t, Height) X(size_t, Depth)
/* clang-format on */
/* X(type, tag, fields list). */
#define KVC_CUDA_STRUCTS(X)                                    \
  X(CUDA_MEMCPY2D, CUDA_MEMCPY2D_st, KVC_CUDA_MEMCPY2D_FIELDS) \
  X(CUDA_MEMCPY3D_PEER, CUDA_MEMCPY3D_PEER_st, KVC_CUDA_MEMCPY3D_PEER_FIELDS)

/* --- Driver entry points: X(name, abi_version, (parameters)), all returning CUresult -- */
/* abi_version is the CUDA version (major*1000 + minor*10) that introduced this ABI of the
 * entry point, the suffix of its PFN_<name>_v<version> type; cuda_syms.inc names the same
 * version. cuGetProcAddress itself is looked up by dlsym as cuGetProcAddress_v2. */

#define KVC_CUDA_DRIVER_FNS(X)                                                                                         \
  X(cuGetProcAddress, 12000,                                                                                           \
    (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)) \
  X(cuInit, 2000, (unsigned int Flags))                                                                                \
  X(cuDriverGetVersion, 2020, (int *driverVersion))                                                                    \
  X(cuDeviceGet, 2000, (CUdevice * device, int ordinal))                                                               \
  X(cuDeviceGetCount, 2000, (int *count))                                                                              \
  X(cuDeviceGetName, 2000, (char *name, int len, CUdevice dev))                                                        \
  X(cuDeviceGetAttribute, 2000, (int *pi, CUdevice_attribute attrib, CUdevice dev))                                    \
  X(cuDeviceTotalMem, 3020, (size_t * bytes, CUdevice dev))                                                            \
  X(cuDevicePrimaryCtxRetain, 7000, (CUcontext * pctx, CUdevice dev))                                                  \
  X(cuDevicePrimaryCtxRelease, 11000, (CUdevice dev))                                                                  \
  X(cuCtxGetCurrent, 4000, (CUcontext * pctx))                                                                         \
  X(cuCtxSetCurrent, 4000, (CUcontext ctx))                                                                            \
  X(cuCtxPushCurrent, 4000, (CUcontext ctx))                                                                           \
  X(cuCtxPopCurrent, 4000, (CUcontext * pctx))                                                                         \
  X(cuMemAlloc, 3020, (CUdeviceptr * dptr, size_t bytesize))                                                           \
  X(cuMemFree, 3020, (CUdeviceptr dptr))                                                                               \
  X(cuMemAllocHost, 3020, (void **pp, size_t bytesize))                                                                \
  X(cuMemFreeHost, 2000, (void *p))                                                                                    \
  X(cuMemHostGetDevicePointer, 3020, (CUdeviceptr * pdptr, void *p, unsigned int Flags))                               \
  X(cuMemcpyHtoDAsync, 3020, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream))         \
  X(cuMemcpyDtoHAsync, 3020, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream))               \
  X(cuMemcpyDtoDAsync, 3020, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream))       \
  X(cuMemcpyPeerAsync, 4000,                                                                                           \
    (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount,       \
     CUstream hStream))                                                                                                \
  X(cuMemcpy2DAsync, 3020, (const CUDA_MEMCPY2D *pCopy, CUstream hStream))                                             \
  X(cuMemcpy3DPeerAsync, 4000, (const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream))                                    \
  X(cuDeviceCanAccessPeer, 4000, (int *canAccessPeer, CUdevice dev, CUdevice peerDev))                                 \
  X(cuCtxEnablePeerAccess, 4000, (CUcontext peerContext, unsigned int Flags))                                          \
  X(cuMemsetD8Async, 3020, (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream))                      \
  X(cuStreamSynchronize, 2000, (CUstream hStream))                                                                     \
  X(cuStreamIsCapturing, 10000, (CUstream hStream, CUstreamCaptureStatus * captureStatus))                             \
  X(cuModuleLoadData, 2000, (CUmodule * module, const void *image))                                                    \
  X(cuModuleUnload, 2000, (CUmodule hmod))                                                                             \
  X(cuModuleGetFunction, 2000, (CUfunction * hfunc, CUmodule hmod, const char *name))                                  \
  X(cuLaunchKernel, 4000,                                                                                              \
    (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,        \
     unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,                    \
     void **kernelParams, void **extra))                                                                               \
  X(cuFuncSetAttribute, 9000, (CUfunction hfunc, CUfunction_attribute attrib, int value))                              \
  X(cuEventCreate, 2000, (CUevent * phEvent, unsigned int Flags))                                                      \
  X(cuEventRecord, 2000, (CUevent hEvent, CUstream hStream))                                                           \
  X(cuEventQuery, 2000, (CUevent hEvent))                                                                              \
  X(cuEventSynchronize, 2000, (CUevent hEvent))                                                                        \
  X(cuEventDestroy, 4000, (CUevent hEvent))                                                                            \
  X(cuGetErrorName, 6000, (CUresult error, const char **pStr))                                                         \
  X(cuGetErrorString, 6000, (CUresult error, const char **pStr))

/* --- NVRTC entry points: X(return type, name, (parameters)) --------------------------- */

#define KVC_NVRTC_FNS(X)                                                                                 \
  X(const char *, nvrtcGetErrorString, (nvrtcResult result))                                             \
  X(nvrtcResult, nvrtcVersion, (int *major, int *minor))                                                 \
  X(nvrtcResult, nvrtcGetNumSupportedArchs, (int *numArchs))                                             \
  X(nvrtcResult, nvrtcGetSupportedArchs, (int *supportedArchs))                                          \
  X(nvrtcResult, nvrtcCreateProgram,                                                                     \
    (nvrtcProgram * prog, const char *src, const char *name, int numHeaders, const char *const *headers, \
     const char *const *includeNames))                                                                   \
  X(nvrtcResult, nvrtcDestroyProgram, (nvrtcProgram * prog))                                             \
  X(nvrtcResult, nvrtcCompileProgram, (nvrtcProgram prog, int numOptions, const char *const *options))   \
  X(nvrtcResult, nvrtcGetPTXSize, (nvrtcProgram prog, size_t * ptxSizeRet))                              \
  X(nvrtcResult, nvrtcGetPTX, (nvrtcProgram prog, char *ptx))                                            \
  X(nvrtcResult, nvrtcGetCUBINSize, (nvrtcProgram prog, size_t * cubinSizeRet))                          \
  X(nvrtcResult, nvrtcGetCUBIN, (nvrtcProgram prog, char *cubin))                                        \
  X(nvrtcResult, nvrtcGetProgramLogSize, (nvrtcProgram prog, size_t * logSizeRet))                       \
  X(nvrtcResult, nvrtcGetProgramLog, (nvrtcProgram prog, char *log))

/* --- The declarations ----------------------------------------------------------------- */

#ifndef KVC_CUDA_API_LISTS_ONLY

_Static_assert(sizeof(void *) == 8, "the CUDA backend supports 64-bit targets only (CUdeviceptr is 64-bit)");
#  ifdef _WIN32
#    define KVC_CUDAAPI __stdcall
#  else
#    define KVC_CUDAAPI
#  endif

#  define KVC_CUDA_TYPEDEF_(name, definition) typedef definition name;
KVC_CUDA_TYPES(KVC_CUDA_TYPEDEF_)
#  undef KVC_CUDA_TYPEDEF_

#  define KVC_CUDA_ENUMERATOR_(name, value) name = (value),
/* The arguments are a tag, a declarator and a list macro: they cannot be parenthesized. */
#  define KVC_CUDA_ENUM_(type, tag, values) \
    typedef enum tag { values(KVC_CUDA_ENUMERATOR_) } type; /* NOLINT(bugprone-macro-parentheses) */
KVC_CUDA_ENUMS(KVC_CUDA_ENUM_)
#  undef KVC_CUDA_ENUM_
#  undef KVC_CUDA_ENUMERATOR_
#  define KVC_CUDA_MEMBER_(type, name) type name;
#  define KVC_CUDA_STRUCT_(type, tag, fields) \
    typedef struct tag {                      \
      fields(KVC_CUDA_MEMBER_)                \
    } type; /* NOLINT(bugprone-macro-parentheses) */
KVC_CUDA_STRUCTS(KVC_CUDA_STRUCT_)
#  undef KVC_CUDA_STRUCT_
#  undef KVC_CUDA_MEMBER_

#  define KVC_CUDA_PFN_(name, version, params)             \
    typedef CUresult(KVC_CUDAAPI *PFN_##name##_v##version) \
        params; /* NOLINT(bugprone-macro-parentheses): a parameter list */
KVC_CUDA_DRIVER_FNS(KVC_CUDA_PFN_)
#  undef KVC_CUDA_PFN_

/* Prototypes, so that nvrtc.c types its dlsym'd table with __typeof__; nothing references
 * them, so no symbol is linked. */
#  define KVC_NVRTC_PROTO_(ret, name, params) ret name params;
KVC_NVRTC_FNS(KVC_NVRTC_PROTO_)
#  undef KVC_NVRTC_PROTO_

#endif /* KVC_CUDA_API_LISTS_ONLY */
#endif
