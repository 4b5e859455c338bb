/*
 * nvrtc.c — run-time compilation of the kernels/ sources with NVRTC, loaded with dlopen.
 *
 * Lookup order: KVC_NVRTC_LIB; an NVRTC already loaded in the process (a host such as
 * PyTorch may have one); libnvrtc.so.13, .so.12, .so; the same under /usr/local/cuda.
 * Each compile fetches the log before acting on the result and destroys the program on
 * every path through one label.
 */
#define _GNU_SOURCE
#include "device.h"

#include <dlfcn.h>
#include "cuda_api.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NVRTC_SYMS(X)             \
  X(1, nvrtcVersion)              \
  X(1, nvrtcCreateProgram)        \
  X(1, nvrtcCompileProgram)       \
  X(1, nvrtcGetProgramLogSize)    \
  X(1, nvrtcGetProgramLog)        \
  X(1, nvrtcGetPTXSize)           \
  X(1, nvrtcGetPTX)               \
  X(1, nvrtcDestroyProgram)       \
  X(1, nvrtcGetErrorString)       \
  X(0, nvrtcGetCUBINSize)         \
  X(0, nvrtcGetCUBIN)             \
  X(0, nvrtcGetNumSupportedArchs) \
  X(0, nvrtcGetSupportedArchs)

static struct {
  kvc_status status;
  char error[512];
  void *lib;
  int version; /* major*1000 + minor*10 */
  int max_arch;
  int archs[64];
  int num_archs;
#define X(req, name) __typeof__(name) *name; /* NOLINT(bugprone-macro-parentheses): name is the member's declarator */
  NVRTC_SYMS(X)
#undef X
} nv;
static pthread_once_t nv_once = PTHREAD_ONCE_INIT;
static char nv_path[256];

static bool nv_resolve(void *handle) {
#define X(req, name)                                  \
  nv.name = (__typeof__(name) *)dlsym(handle, #name); \
  if ((req) && !nv.name) return false;
  NVRTC_SYMS(X)
#undef X
  return true;
}

static void nv_load_once(void) {
  static const char *candidates[] = {"libnvrtc.so.13",
                                     "libnvrtc.so.12",
                                     "libnvrtc.so",
                                     "/usr/local/cuda/lib64/libnvrtc.so.13",
                                     "/usr/local/cuda/lib64/libnvrtc.so.12",
                                     "/usr/local/cuda/lib64/libnvrtc.so"};
  bool ok = false;
  if (nv_path[0]) {
    nv.lib = dlopen(nv_path, RTLD_NOW | RTLD_LOCAL);
    ok = nv.lib && nv_resolve(nv.lib);
  } else if (dlsym(RTLD_DEFAULT, "nvrtcCompileProgram")) {
    ok = nv_resolve(RTLD_DEFAULT);
  }
  for (size_t i = 0; !ok && !nv_path[0] && i < KVC__ARRAY_LEN(candidates); i++) {
    nv.lib = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
    if (nv.lib && nv_resolve(nv.lib)) ok = true;
    else if (nv.lib) dlclose(nv.lib), nv.lib = NULL;
  }
  if (!ok) {
    nv.status = KVC_ERR_NO_DEVICE;
    snprintf(nv.error, sizeof nv.error, "NVRTC not found (%s); set KVC_NVRTC_LIB",
             nv_path[0] ? nv_path : "libnvrtc.so.13/.12/.so");
    if (nv.lib) dlclose(nv.lib);
    nv.lib = NULL;
    return;
  }
  int major = 0, minor = 0;
  nv.nvrtcVersion(&major, &minor);
  nv.version = major * 1000 + minor * 10;
  if (nv.nvrtcGetNumSupportedArchs && nv.nvrtcGetSupportedArchs) {
    int n = 0;
    nv.nvrtcGetNumSupportedArchs(&n);
    if (n > 0 && n <= (int)KVC__ARRAY_LEN(nv.archs)) {
      nv.nvrtcGetSupportedArchs(nv.archs);
      nv.num_archs = n;
      for (int i = 0; i < n; i++) nv.max_arch = KVC__MAX(nv.max_arch, nv.archs[i]);
    }
  }
  nv.status = KVC_OK;
}

kvc_status kvc__nvrtc_load(const kvc_context *ctx, const char *override_path) {
  if (override_path && override_path[0] && !nv_path[0]) snprintf(nv_path, sizeof nv_path, "%s", override_path);
  pthread_once(&nv_once, nv_load_once);
  if (nv.status != KVC_OK) return kvc__error(ctx, nv.status, "kvc__nvrtc_load", "%s", nv.error);
  return KVC_OK;
}

int kvc__nvrtc_version(void) { return nv.status == KVC_OK ? nv.version : 0; }

static bool arch_supported(int sm) {
  if (!nv.num_archs) return true; /* old NVRTC: assume yes, it will say otherwise */
  for (int i = 0; i < nv.num_archs; i++)
    if (nv.archs[i] == sm) return true;
  return false;
}

static bool is_header(const char *name) {
  size_t n = strlen(name);
  return (n > 4 && !strcmp(name + n - 4, ".cuh")) || (n > 2 && !strcmp(name + n - 2, ".h"));
}

static void dump_source(const char *file, const char *src, const char *const *opts, int n) {
  fprintf(stderr, "kvcache: ---- %s (options:", file);
  for (int i = 0; i < n; i++) fprintf(stderr, " %s", opts[i]);
  fprintf(stderr, ")\n");
  int line = 1;
  const char *p = src;
  while (*p) {
    const char *e = strchr(p, '\n');
    int len = e ? (int)(e - p) : (int)strlen(p);
    fprintf(stderr, "%5d  %.*s\n", line++, len, p);
    if (!e) break;
    p = e + 1;
  }
}

kvc_status kvc__nvrtc_compile(const kvc_context *ctx, const char *file, const char *const *options, int num_options,
                              int sm, bool dump_on_error, kvc__nvrtc_image *out) {
  KVC_FORWARD(kvc__nvrtc_load(ctx, NULL));
  if (ctx) {
    kvc__core *core = kvc__core_of(ctx);
    if (kvc__fault_hit(&core->fault.compiles, &core->fault.compile_fail_at))
      return kvc__error(ctx, KVC_ERR_NVRTC, "kvc__nvrtc_compile", "injected compile failure (%s)", file);
  }
  const char *src = kvc__embedded_find(file);
  if (!src) return kvc__error(ctx, KVC_ERR_INTERNAL, "kvc__nvrtc_compile", "no embedded source %s", file);

  const char *hdr_src[32], *hdr_name[32];
  int nh = 0;
  for (size_t i = 0; i < kvc__embedded_count && nh < 32; i++) {
    if (!is_header(kvc__embedded_files[i].name)) continue;
    hdr_src[nh] = kvc__embedded_files[i].text;
    hdr_name[nh] = kvc__embedded_files[i].name;
    nh++;
  }

  bool cubin = nv.nvrtcGetCUBIN && arch_supported(sm);
  int arch = sm;
  if (!cubin && nv.max_arch && arch > nv.max_arch) arch = nv.max_arch;
  char arch_opt[48];
  snprintf(arch_opt, sizeof arch_opt, cubin ? "--gpu-architecture=sm_%d" : "--gpu-architecture=compute_%d", arch);
  const char *opts[48];
  int no = 0;
  opts[no++] = arch_opt;
  opts[no++] = "-std=c++17";
  opts[no++] = "--device-as-default-execution-space";
  for (int i = 0; i < num_options && no < 48; i++) opts[no++] = options[i];

  kvc_status st = KVC_OK;
  nvrtcProgram prog = NULL;
  char *log = NULL;
  nvrtcResult r = nv.nvrtcCreateProgram(&prog, src, file, nh, hdr_src, hdr_name);
  if (r != NVRTC_SUCCESS) {
    st = kvc__error(ctx, KVC_ERR_NVRTC, "kvc__nvrtc_compile", "nvrtcCreateProgram(%s): %s", file,
                    nv.nvrtcGetErrorString(r));
    goto cleanup;
  }
  nvrtcResult cr = nv.nvrtcCompileProgram(prog, no, opts);
  size_t log_size = 0;
  nv.nvrtcGetProgramLogSize(prog, &log_size);
  if (log_size > 1) {
    log = malloc(log_size);
    if (log) nv.nvrtcGetProgramLog(prog, log);
  }
  if (cr != NVRTC_SUCCESS) {
    st = kvc__error(ctx, KVC_ERR_NVRTC, "kvc__nvrtc_compile", "%s for %s failed: %s\n", file, arch_opt,
                    nv.nvrtcGetErrorString(cr));
    if (log) kvc__error_append(ctx, log);
    if (dump_on_error) dump_source(file, src, opts, no);
    goto cleanup;
  }
  size_t n = 0;
  if (cubin) r = nv.nvrtcGetCUBINSize(prog, &n);
  else r = nv.nvrtcGetPTXSize(prog, &n);
  if (r != NVRTC_SUCCESS || n == 0) {
    st = kvc__error(ctx, KVC_ERR_NVRTC, "kvc__nvrtc_compile", "no code for %s", file);
    goto cleanup;
  }
  void *buf = malloc(n);
  if (!buf) {
    st = kvc__error(ctx, KVC_ERR_HOST_OOM, "kvc__nvrtc_compile", "%zu bytes of code", n);
    goto cleanup;
  }
  r = cubin ? nv.nvrtcGetCUBIN(prog, buf) : nv.nvrtcGetPTX(prog, buf);
  if (r != NVRTC_SUCCESS) {
    free(buf);
    st = kvc__error(ctx, KVC_ERR_NVRTC, "kvc__nvrtc_compile", "fetching code: %s", nv.nvrtcGetErrorString(r));
    goto cleanup;
  }
  out->data = buf;
  out->bytes = n;
  out->is_ptx = !cubin;
cleanup:
  free(log);
  if (prog) nv.nvrtcDestroyProgram(&prog);
  return st;
}

int kvc__spec_options(const kvc__spec *spec, char *buf, size_t cap, const char **opts, int max_opts) {
  int n = 0;
  size_t used = 0;
  for (int i = 0; spec && i < spec->count && n < max_opts; i++) {
    int w = snprintf(buf + used, cap - used, "-D%s=%lld", spec->def[i].name, (long long)spec->def[i].value);
    if (w < 0 || (size_t)w >= cap - used) break;
    opts[n++] = buf + used;
    used += (size_t)w + 1;
  }
  return n;
}

const char *kvc__embedded_find(const char *name) {
  for (size_t i = 0; i < kvc__embedded_count; i++)
    if (!strcmp(kvc__embedded_files[i].name, name)) return kvc__embedded_files[i].text;
  return NULL;
}
