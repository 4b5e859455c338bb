/*
 * nccl_api.h — the part of NCCL's C API the transfer code uses, declared here from
 * NCCL's documentation (nccl.h is not needed to build), and the run-time loader.
 *
 * Types follow the documented ABI: ncclResult_t and ncclDataType_t are C enums (int),
 * ncclComm_t an opaque pointer, ncclUniqueId a struct of NCCL_UNIQUE_ID_BYTES (128)
 * chars passed by value, cudaStream_t the same handle as CUstream. The names carry our
 * prefix so that a translation unit including the real nccl.h too does not clash.
 */
#ifndef KVC_NCCL_API_H
#define KVC_NCCL_API_H

#include "../core/core.h"

typedef int kvc__nccl_result; /* ncclResult_t */
#define KVC__NCCL_SUCCESS 0
#define KVC__NCCL_INVALID_USAGE 5
#define KVC__NCCL_IN_PROGRESS 7 /* non-blocking communicators (NCCL >= 2.14) */

#define KVC__NCCL_INT8 0 /* ncclInt8 (== ncclChar): byte transfers */

#define KVC__NCCL_UNIQUE_ID_BYTES 128
typedef struct kvc__nccl_unique_id {
  char internal[KVC__NCCL_UNIQUE_ID_BYTES];
} kvc__nccl_unique_id;

typedef struct kvc__nccl_api {
  int version; /* ncclGetVersion */
  kvc__nccl_result (*get_version)(int *version);
  const char *(*get_error_string)(kvc__nccl_result result);
  const char *(*get_last_error)(void *comm); /* NCCL >= 2.13; may be NULL */
  kvc__nccl_result (*group_start)(void);
  kvc__nccl_result (*group_end)(void);
  kvc__nccl_result (*send)(const void *buf, size_t count, int datatype, int peer, void *comm, void *stream);
  kvc__nccl_result (*recv)(void *buf, size_t count, int datatype, int peer, void *comm, void *stream);
  /* Communicator set-up, for tests and benchmarks that make their own communicators. */
  kvc__nccl_result (*get_unique_id)(kvc__nccl_unique_id *id);
  kvc__nccl_result (*comm_init_rank)(void **comm, int nranks, kvc__nccl_unique_id id, int rank);
  kvc__nccl_result (*comm_destroy)(void *comm);
} kvc__nccl_api;

/** Loads NCCL once per process (libnccl.so.2, or $KVC_NCCL_LIB) and returns its table,
 *  or NULL with KVC_ERR_UNSUPPORTED recorded on ctx (may be NULL) and in *st. The table
 *  is written once under pthread_once and read-only afterwards. */
const kvc__nccl_api *kvc__nccl_load(const kvc_context *ctx, kvc_status *st);

/** "ncclX failed: <NCCL's error string> (<last error>)" recorded on ctx as KVC_ERR_CUDA. */
kvc_status kvc__nccl_fail(const kvc_context *ctx, const kvc__nccl_api *nccl, kvc__nccl_result r, void *comm,
                          const char *fn, const char *what);

#endif
