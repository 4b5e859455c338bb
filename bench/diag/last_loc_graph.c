/* Diagnostic: GPU time per get_last_loc variant, each captured as a graph of G launches
 * (issue 20 item 2; RESULTS run 14). Not built by CMake. On a GPU machine:
 *   python3 /path/to/nvrtc-compile variants.cu -> variants.cubin (sm_90), the library's
 *   kernels/req_to_token.cu -> lib_r2t.cubin, and optionally SGLang's Triton PTX of
 *   get_last_loc_kernel (bench_small_kernels.py --dump-ptx, batch 1) through ptxas ->
 *   triton_b1.cubin; then  gcc -O2 harness.c -I$CUDA/include -lcuda && ./a.out DIR  */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define CK(x)                                                       \
  do {                                                              \
    CUresult r_ = (x);                                              \
    if (r_) {                                                       \
      const char *s;                                                \
      cuGetErrorString(r_, &s);                                     \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s); \
      exit(1);                                                      \
    }                                                               \
  } while (0)
typedef long long i64;
struct P {
  unsigned long long table, rows, pre, out;
  i64 num_rows, row_stride, n;
  int r64, l64;
};
enum { G = 64, REPLAYS = 30, ROUNDS = 7, NV = 33 };
static CUstream st;
static CUmodule mv, ml, mt;
typedef struct {
  const char *name;
  CUfunction f;
  int kind;
} V; /* kind: 0 struct 1-per-thread(block 128), 1 mimic, 2 mimic_chk, 3 empty, 4 struct 2-per-thread, 5 triton, 6 struct 1-per 256 */
static CUdeviceptr dtable, drows, dpre, dout;
static i64 nrows = 4096, width = 4096 + 64;
static float run(V *v, int n) {
  struct P p = {dtable, drows, dpre, dout, nrows, width, n, 1, 1};
  int stride32 = (int)width, n32 = n;
  void *a_mimic[] = {&dtable, &drows, &dpre, &dout, &stride32, &n32};
  void *a_chk[] = {&dtable, &drows, &dpre, &dout, &nrows, &width, &p.n};
  CUdeviceptr z = 0;
  int one = 1;
  void *a_tr[] = {&dtable, &drows, &dpre, &dout, &stride32, &z, &z};
  (void)one;
  void *a_s[] = {&p};
  struct {
    CUdeviceptr r, q, t, o;
    int n, nr, st, fl;
  } k32 = {drows, dpre, dtable, dout, n32, (int)nrows, stride32, 3};
  struct {
    CUdeviceptr r, q, t, o;
    i64 n, nr, st;
    int fl, pad;
  } k64 = {drows, dpre, dtable, dout, n, nrows, width, 3, 0};
  void *a_k32[] = {&k32}, *a_k64[] = {&k64};
  struct {
    CUdeviceptr t, r, q, o;
    int s, n;
  } ps = {dtable, drows, dpre, dout, stride32, n32};
  void *a_ps[] = {&ps};
  i64 x = 0, y = 1, zz = 2;
  void *a_pad[] = {&dtable, &drows, &dpre, &dout, &stride32, &n32, &x, &y, &zz};
  CUgraph g;
  CUgraphExec ge;
  CK(cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_GLOBAL));
  for (int i = 0; i < G; i++) {
    unsigned gx;
    unsigned bx;
    void **args;
    switch (v->kind) {
    case 0:
      gx = (n + 127) / 128;
      bx = 128;
      args = a_s;
      break;
    case 6:
      gx = (n + 255) / 256;
      bx = 256;
      args = a_s;
      break;
    case 1:
      gx = (n + 255) / 256;
      bx = 128;
      args = a_mimic;
      break;
    case 2:
      gx = (n + 255) / 256;
      bx = 128;
      args = a_chk;
      break;
    case 3:
      gx = 1;
      bx = 128;
      args = NULL;
      break;
    case 4:
      gx = (n + 255) / 256;
      bx = 128;
      args = a_s;
      break;
    case 7:
      gx = (n + 255) / 256;
      bx = 128;
      args = a_ps;
      break;
    case 8:
      gx = (n + 255) / 256;
      bx = 128;
      args = a_pad;
      break;
    case 9:
      gx = (n + 255) / 256;
      bx = 128;
      args = a_k32;
      break;
    case 10:
      gx = (n + 255) / 256;
      bx = 128;
      args = a_k64;
      break;
    case 11:
      gx = (n + 127) / 128;
      bx = 128;
      args = a_k32;
      break;
    case 12: /* one request, one thread (the library's _one entries) */
      gx = 1;
      bx = 1;
      args = a_k32;
      break;
    case 13:
      gx = (n + 63) / 64;
      bx = 64;
      args = a_k32;
      break;
    default:
      gx = 1;
      bx = 128;
      args = a_tr;
      break;
    }
    CK(cuLaunchKernel(v->f, gx, 1, 1, bx, 1, 1, 0, st, args, NULL));
  }
  CK(cuStreamEndCapture(st, &g));
  CK(cuGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < 3; i++) CK(cuGraphLaunch(ge, st));
  CK(cuStreamSynchronize(st));
  CUevent a, b;
  CK(cuEventCreate(&a, 0));
  CK(cuEventCreate(&b, 0));
  CK(cuEventRecord(a, st));
  for (int i = 0; i < REPLAYS; i++) CK(cuGraphLaunch(ge, st));
  CK(cuEventRecord(b, st));
  CK(cuEventSynchronize(b));
  float ms;
  CK(cuEventElapsedTime(&ms, a, b));
  cuEventDestroy(a);
  cuEventDestroy(b);
  cuGraphExecDestroy(ge);
  cuGraphDestroy(g);
  return ms * 1000.f / (REPLAYS * G);
}
static int cmpf(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}
int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : ".";
  char path[512];
  CUdevice d;
  CUcontext c;
  CK(cuInit(0));
  CK(cuDeviceGet(&d, 0));
  CK(cuDevicePrimaryCtxRetain(&c, d));
  CK(cuCtxSetCurrent(c));
  CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  snprintf(path, sizeof path, "%s/variants.cubin", dir);
  CK(cuModuleLoad(&mv, path));
  snprintf(path, sizeof path, "%s/lib_r2t.cubin", dir);
  CK(cuModuleLoad(&ml, path));
  snprintf(path, sizeof path, "%s/triton_b1.cubin", dir);
  const int have_triton = cuModuleLoad(&mt, path) == CUDA_SUCCESS;
  V vs[NV] = {
      {"empty", 0, 3},      {"library", 0, 11},  {"triton(b1)", 0, 5}, {"mimic", 0, 1},        {"mimic_chk", 0, 2},
      {"s1", 0, 0},         {"s1_ldg", 0, 0},    {"s1_val", 0, 0},     {"s2", 0, 4},           {"s2_ldg", 0, 4},
      {"library_b", 0, 11}, {"c1", 0, 0},        {"c2", 0, 4},         {"c3_ldg", 0, 0},       {"c4_clamp", 0, 0},
      {"c5_u32", 0, 0},     {"m_s", 0, 7},       {"m_pad", 0, 8},      {"c7", 0, 4},           {"c8_sep", 0, 2},
      {"c9_tstruct", 0, 4}, {"c10_byval", 0, 4}, {"k1_32", 0, 9},      {"k2_64", 0, 10},       {"k3_32_1pt", 0, 11},
      {"k4_64_dyn", 0, 10}, {"k5_32_dyn", 0, 9}, {"k6_pred", 0, 11},   {"lib_one(b1)", 0, 12}, {"k7_u32", 0, 11},
      {"k8_clamp", 0, 11},  {"k9_min", 0, 11},   {"k3_blk64", 0, 13}};
  const char *fn[NV] = {"k_empty",
                        "kvc_get_last_loc_r64_l64",
                        "get_last_loc_kernel",
                        "lt_mimic",
                        "lt_mimic_chk",
                        "lt_s1",
                        "lt_s1_ldg",
                        "lt_s1_val",
                        "lt_s2",
                        "lt_s2_ldg",
                        "kvc_get_last_loc_r64_l64",
                        "lt_c1",
                        "lt_c2",
                        "lt_c3",
                        "lt_c4",
                        "lt_c5",
                        "m_s",
                        "m_pad",
                        "c7",
                        "c8",
                        "c9",
                        "c10",
                        "k1",
                        "k2",
                        "k3",
                        "k4",
                        "k5",
                        "k6",
                        "kvc_get_last_loc_r64_l64_one",
                        "k7",
                        "k8",
                        "k9",
                        "k3"};
  for (int i = 0; i < NV; i++) {
    if (i == 2 && !have_triton) {
      vs[i].f = vs[0].f;
      vs[i].name = "(no triton)";
      continue;
    }
    CK(cuModuleGetFunction(&vs[i].f, i == 1 || i == 10 || i == 28 ? ml : i == 2 ? mt : mv, fn[i]));
  }
  size_t tb = (size_t)nrows * width * 4;
  CK(cuMemAlloc(&dtable, tb));
  CK(cuMemAlloc(&drows, 1024 * 8));
  CK(cuMemAlloc(&dpre, 1024 * 8));
  CK(cuMemAlloc(&dout, 1024 * 8));
  int *ht = malloc(tb);
  for (size_t i = 0; i < (size_t)nrows * width; i++) ht[i] = (int)(i * 2654435761u >> 12);
  CK(cuMemcpyHtoD(dtable, ht, tb));
  free(ht);
  i64 hr[1024], hp[1024];
  unsigned s = 12345;
  for (int i = 0; i < 1024; i++) {
    s = s * 1103515245u + 12345u;
    hr[i] = (i * 37) % nrows;
    hp[i] = i % 7 == 0 ? 0 : (s >> 8) % width;
  }
  CK(cuMemcpyHtoD(drows, hr, sizeof hr));
  CK(cuMemcpyHtoD(dpre, hp, sizeof hp));
  int batches[] = {1, 64, 256, 1024};
  /* correctness: every variant's output equals the host's */
  for (int bi = 0; bi < 4; bi++)
    for (int v = 1; v < NV; v++) {
      int n = batches[bi];
      if ((v == 2 || v == 28) && n != 1) continue;
      CK(cuMemsetD8(dout, 0x55, 1024 * 8));
      run(&vs[v], n);
      CK(cuStreamSynchronize(st));
      i64 ho[1024];
      CK(cuMemcpyDtoH(ho, dout, n * 8));
      for (int i = 0; i < n; i++) {
        i64 want = hp[i] > 0 ? (i64)(int)(((size_t)hr[i] * width + hp[i] - 1) * 2654435761u >> 12) : -1;
        if (ho[i] != want) {
          printf("MISMATCH %s n=%d i=%d got %lld want %lld\n", vs[v].name, n, i, ho[i], want);
          break;
        }
      }
    }
  printf("us per kernel, graph of %d launches x %d replays, median of %d interleaved rounds (min)\n%-12s", G, REPLAYS,
         ROUNDS, "variant");
  for (int bi = 0; bi < 4; bi++) printf("   batch %-12d", batches[bi]);
  printf("\n");
  static float t[NV][4][ROUNDS];
  for (int r = 0; r < ROUNDS; r++)
    for (int bi = 0; bi < 4; bi++)
      for (int v = 0; v < NV; v++) {
        if ((v == 2 || v == 28) && batches[bi] != 1) continue;
        t[v][bi][r] = run(&vs[v], batches[bi]);
      }
  for (int v = 0; v < NV; v++) {
    printf("%-12s", vs[v].name);
    for (int bi = 0; bi < 4; bi++) {
      if ((v == 2 || v == 28) && batches[bi] != 1) {
        printf("   %-18s", "-");
        continue;
      }
      qsort(t[v][bi], ROUNDS, sizeof(float), cmpf);
      printf("   %6.3f (%6.3f)    ", t[v][bi][ROUNDS / 2], t[v][bi][0]);
    }
    printf("\n");
  }
  return 0;
}
