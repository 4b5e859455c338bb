#define _GNU_SOURCE
/*
 * nccl.c — NCCL loaded at run time (as libcuda is), and a transfer plan's two sides as
 * grouped point-to-point operations on the caller's communicator.
 *
 * KVC_NCCL_LIB is read here, once per process, rather than through the context options:
 * the library is process-wide state (one dlopen), so a per-context path could not be
 * honoured anyway.
 */
#include "nccl_api.h"
#include "transfer.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct {
  kvc__nccl_api api;
  void *lib;
  char error[512];
  bool ok;
} nccl;
static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;

/* POSIX lets dlsym's object pointer be converted to a function pointer through this
 * store; ISO C has no direct cast between the two. */
#define NCCL_SYM(field, name, required)                                    \
  do {                                                                     \
    *(void **)&nccl.api.field = dlsym(nccl.lib, name);                     \
    if (!nccl.api.field && (required)) {                                   \
      snprintf(nccl.error, sizeof nccl.error, "%s has no %s", path, name); \
      goto fail;                                                           \
    }                                                                      \
  } while (0)

static void nccl_load_once(void) {
  const char *env = getenv("KVC_NCCL_LIB");
  const char *path = env && env[0] ? env : "libnccl.so.2";
  nccl.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!nccl.lib) {
    const char *why = dlerror();
    snprintf(nccl.error, sizeof nccl.error, "cannot load %s (set KVC_NCCL_LIB): %s", path, why ? why : "?");
    return;
  }
  NCCL_SYM(get_version, "ncclGetVersion", 1);
  NCCL_SYM(get_error_string, "ncclGetErrorString", 1);
  NCCL_SYM(get_last_error, "ncclGetLastError", 0);
  NCCL_SYM(group_start, "ncclGroupStart", 1);
  NCCL_SYM(group_end, "ncclGroupEnd", 1);
  NCCL_SYM(send, "ncclSend", 1);
  NCCL_SYM(recv, "ncclRecv", 1);
  NCCL_SYM(get_unique_id, "ncclGetUniqueId", 1);
  NCCL_SYM(comm_init_rank, "ncclCommInitRank", 1);
  NCCL_SYM(comm_destroy, "ncclCommDestroy", 1);
  if (nccl.api.get_version(&nccl.api.version) != KVC__NCCL_SUCCESS) {
    snprintf(nccl.error, sizeof nccl.error, "ncclGetVersion failed in %s", path);
    goto fail;
  }
  nccl.ok = true;
  return;
fail:
  dlclose(nccl.lib);
  nccl.lib = NULL;
  memset(&nccl.api, 0, sizeof nccl.api);
}

const kvc__nccl_api *kvc__nccl_load(const kvc_context *ctx, kvc_status *st) {
  pthread_once(&nccl_once, nccl_load_once);
  if (!nccl.ok) {
    *st = kvc__error(ctx, KVC_ERR_UNSUPPORTED, "kvc__nccl_load", "%s", nccl.error);
    return NULL;
  }
  *st = KVC_OK;
  return &nccl.api;
}

kvc_status kvc__nccl_fail(const kvc_context *ctx, const kvc__nccl_api *api, kvc__nccl_result r, void *comm,
                          const char *fn, const char *what) {
  const char *text = api->get_error_string ? api->get_error_string(r) : NULL;
  const char *last = api->get_last_error ? api->get_last_error(comm) : NULL;
  return kvc__error(ctx, KVC_ERR_CUDA, fn, "%s failed: NCCL error %d: %s%s%s%s", what, r, text ? text : "?",
                    last && last[0] ? " (" : "", last && last[0] ? last : "", last && last[0] ? ")" : "");
}

kvc_status kvc_transfer_nccl_version(kvc_context *ctx, int *version) {
  KVC_ARG_NOT_NULL(ctx, version);
  kvc_status st;
  const kvc__nccl_api *api = kvc__nccl_load(ctx, &st);
  if (!api) return st;
  *version = api->version;
  return KVC_OK;
}

/* The checks both sides share; *api on success. */
static kvc_status side_ready(const kvc_transfer_plan *plan, bool sending, kvc_context *ctx, void *comm, int peer,
                             const char *fn, const kvc__nccl_api **api) {
  KVC_RETURN_IF(!ctx, NULL, KVC_ERR_INVALID_ARGUMENT, "ctx is NULL");
  KVC_RETURN_IF(!plan, ctx, KVC_ERR_INVALID_ARGUMENT, "plan is NULL");
  KVC_FORWARD(kvc__plan_check(plan, ctx, fn));
  const kvc__xfer_side *side = sending ? &plan->src : &plan->dst;
  KVC_RETURN_IF(!comm || peer < 0, ctx, KVC_ERR_INVALID_ARGUMENT, "nccl_comm is NULL or peer %d < 0", peer);
  KVC_RETURN_IF(kvc_context_backend(ctx) != KVC_BACKEND_CUDA, ctx, KVC_ERR_UNSUPPORTED,
                "NCCL needs the CUDA backend (use kvc_transfer_plan_copy_local on the host backend)");
  KVC_RETURN_IF(side->origin != kvc__transfer_origin(), ctx, KVC_ERR_MISUSE,
                "this side's layout was made in another process: its addresses are not valid here");
  KVC_RETURN_IF(side->backend != KVC_BACKEND_CUDA || side->device != kvc_context_device(ctx), ctx,
                KVC_ERR_INVALID_ARGUMENT, "this side's layout is memory of device %d, the context is device %d",
                side->device, kvc_context_device(ctx));
  kvc_status st;
  *api = kvc__nccl_load(ctx, &st);
  return st;
}

/* One grouped batch: a send or a receive per plan copy. The group is closed on every
 * path: NCCL keeps an open group per thread, which would swallow the caller's next
 * operations. */
static kvc_status run_group(const kvc_transfer_plan *plan, kvc_context *ctx, const kvc__nccl_api *api, bool sending,
                            void *comm, int peer, kvc_stream stream, const char *fn) {
  if (plan->num_copies == 0) return KVC_OK;
  kvc__nccl_result r = api->group_start();
  if (r != KVC__NCCL_SUCCESS) return kvc__nccl_fail(ctx, api, r, comm, fn, "ncclGroupStart");
  kvc_status st = KVC_OK;
  for (size_t i = 0; i < plan->num_copies && st == KVC_OK; i++) {
    const kvc__xfer_region *reg;
    uint64_t so, dof, bytes;
    kvc__plan_copy_at(plan, i, &reg, &so, &dof, &bytes);
    if (sending)
      r = api->send((const void *)(uintptr_t)(reg->src_base + so), (size_t)bytes, KVC__NCCL_INT8, peer, comm, stream);
    else r = api->recv((void *)(uintptr_t)(reg->dst_base + dof), (size_t)bytes, KVC__NCCL_INT8, peer, comm, stream);
    if (r != KVC__NCCL_SUCCESS) st = kvc__nccl_fail(ctx, api, r, comm, fn, sending ? "ncclSend" : "ncclRecv");
  }
  r = api->group_end();
  if (r != KVC__NCCL_SUCCESS && r != KVC__NCCL_IN_PROGRESS && st == KVC_OK)
    st = kvc__nccl_fail(ctx, api, r, comm, fn, "ncclGroupEnd");
  return st;
}

kvc_status kvc_transfer_plan_send(const kvc_transfer_plan *plan, kvc_context *ctx, void *nccl_comm, int peer,
                                  kvc_stream stream) {
  const kvc__nccl_api *api = NULL;
  KVC_FORWARD(side_ready(plan, true, ctx, nccl_comm, peer, __func__, &api));
  return run_group(plan, ctx, api, true, nccl_comm, peer, stream, __func__);
}

kvc_status kvc_transfer_plan_recv(const kvc_transfer_plan *plan, kvc_context *ctx, void *nccl_comm, int peer,
                                  kvc_stream stream) {
  const kvc__nccl_api *api = NULL;
  KVC_FORWARD(side_ready(plan, false, ctx, nccl_comm, peer, __func__, &api));
  return run_group(plan, ctx, api, false, nccl_comm, peer, stream, __func__);
}
