#define _POSIX_C_SOURCE 200809L
/*
 * bench_transfer.c — moving the KV of many requests between two pools with a transfer
 * plan, next to a plain copy of the same bytes timed in the same run.
 *
 * Default workload: 64 requests x 4096 tokens of Llama-3-8B KV (32 layers, 8 KV heads x
 * 128, bf16: 128 KiB per token, 32 GiB in all), page size 16. The source side's pages
 * are consecutive per request (a fresh prefill allocator); the target side's are cut
 * into chunks of 1..16 pages and shuffled (a busy decode allocator), so the plan has
 * many runs. Reported: layout and plan build host time, the plan's runs and copies,
 * and per path the median time and bandwidth (bytes moved / time) of the plan and of
 * its baseline, plus the ratio.
 *
 *   --gpus 1 (default): both pools on GPU 0; the peer path (same-device copies) against
 *                       one cuMemcpy of the same total bytes as one block.
 *   --gpus 2:           (a) NCCL: a prefill process (rank 0, GPU 0) and a decode process
 *                       (rank 1, GPU 1), forked before any CUDA call, exchange their
 *                       layouts as bytes over a pipe, build the same plan and run
 *                       kvc_transfer_plan_send / _recv, against ncclSend/ncclRecv of one
 *                       contiguous buffer of the same bytes; (b) then, in the prefill
 *                       process, the peer path GPU 0 -> GPU 1 against one peer copy of
 *                       the same bytes. NCCL_NVLS_ENABLE=0 is set before NCCL starts.
 *
 * Every run checks the transfer bit for bit on sampled pages of every region (the
 * source is filled with a pattern whose period is no multiple of a page, so a page
 * landing in the wrong place is caught). Timing: CUDA events on one stream, 2 warm-up
 * repetitions, then --reps repetitions alternating plan and baseline, medians.
 */
#include "bench_util.h"

#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device/device.h"
#include "transfer/nccl_api.h"

typedef struct opts {
  int requests, tokens, ps, gpus, reps, max_chunk;
  const char *csv;
} opts;

typedef struct pools {
  kvc_context *ctx;
  kvc_kv_pool *pool;
  kvc_transfer_layout *layout;
} pools;

static kvb_cuda cu;
/* --host: the one-GPU path on the host backend (memcpy, wall-clock timing), to check
 * the benchmark's own logic where there is no GPU; its figures are not GPU figures. */
static int use_host;

/* Makes `device`'s primary context (the one the library uses) current on this thread,
 * so that streams and events created here belong to it and NCCL (through the CUDA
 * runtime) binds its rank to it. The retain is kept for the life of the process. */
static void make_current(int device) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  int (*device_get)(int *, int) = NULL;
  int (*retain)(void **, int) = NULL;
  int (*set_current)(void *) = NULL;
  if (lib) {
    *(void **)&device_get = dlsym(lib, "cuDeviceGet");
    *(void **)&retain = dlsym(lib, "cuDevicePrimaryCtxRetain");
    *(void **)&set_current = dlsym(lib, "cuCtxSetCurrent");
  }
  int dev = 0;
  void *pctx = NULL;
  if (!device_get || !retain || !set_current || device_get(&dev, device) || retain(&pctx, dev) || set_current(pctx)) {
    fprintf(stderr, "bench_transfer: cannot make device %d current\n", device);
    exit(1);
  }
}

static void die(const char *what) {
  fprintf(stderr, "bench_transfer: %s\n", what);
  exit(1);
}

static kvc_kv_pool_config llama_config(const opts *o) {
  kvc_kv_pool_config c = KVC_KV_POOL_CONFIG_INIT;
  c.kind = KVC_KV_MHA;
  c.dtype = KVC_DTYPE_BF16;
  c.head_num = 8;
  c.head_dim = 128;
  c.layer_num = 32;
  c.page_size = o->ps;
  c.size = (int64_t)o->requests * o->tokens;
  return c;
}

static void side_open(pools *s, int device, const opts *o) {
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  cfg.backend = use_host ? KVC_BACKEND_HOST : KVC_BACKEND_CUDA;
  cfg.device = device;
  KVB_CHECK(NULL, kvc_context_create(&cfg, &s->ctx));
  kvc_kv_pool_config c = llama_config(o);
  KVB_CHECK(s->ctx, kvc_kv_pool_create(s->ctx, &c, &s->pool));
  KVB_CHECK(s->ctx, kvc_transfer_layout_from_kv_pool(s->pool, &s->layout));
}

static void side_close(pools *s) {
  kvc_transfer_layout_destroy(s->layout);
  kvc_kv_pool_destroy(s->pool);
  kvc_context_destroy(s->ctx);
}

static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Source: pages 1..n in order. Target: 1..n cut into chunks of 1..max_chunk, shuffled.
 * Deterministic, so the two processes of --gpus 2 compute the same lists. */
static void page_lists(const opts *o, int64_t **src, int64_t **dst, size_t *n) {
  const size_t pages = (size_t)o->requests * (size_t)((o->tokens + o->ps - 1) / o->ps);
  int64_t *s = malloc(pages * sizeof *s), *d = malloc(pages * sizeof *d);
  int64_t *starts = malloc(pages * sizeof *starts), *lens = malloc(pages * sizeof *lens);
  if (!s || !d || !starts || !lens) die("out of host memory");
  uint64_t seed = 42;
  size_t chunks = 0;
  for (size_t p = 0; p < pages;) {
    size_t len = 1 + (size_t)(rng_next(&seed) % (uint64_t)o->max_chunk);
    if (p + len > pages) len = pages - p;
    starts[chunks] = (int64_t)p + 1, lens[chunks] = (int64_t)len, chunks++;
    p += len;
  }
  for (size_t i = chunks; i > 1; i--) {
    size_t j = (size_t)(rng_next(&seed) % i);
    int64_t t = starts[i - 1];
    starts[i - 1] = starts[j], starts[j] = t;
    t = lens[i - 1], lens[i - 1] = lens[j], lens[j] = t;
  }
  size_t k = 0;
  for (size_t c = 0; c < chunks; c++)
    for (int64_t q = 0; q < lens[c]; q++) d[k++] = starts[c] + q;
  for (size_t i = 0; i < pages; i++) s[i] = (int64_t)i + 1;
  free(starts);
  free(lens);
  *src = s, *dst = d, *n = pages;
}

/* The pattern byte at offset `off` of region `r`: period 2^20 + 4099 (odd, so no
 * multiple of a page), shifted per region so that two regions never match. */
#define PATTERN_PERIOD ((1u << 20) + 4099u)
static uint8_t *pattern_block(void) {
  uint8_t *b = malloc(2u * PATTERN_PERIOD);
  if (!b) die("out of host memory");
  uint64_t seed = 7;
  for (size_t i = 0; i < PATTERN_PERIOD; i++) b[i] = b[i + PATTERN_PERIOD] = (uint8_t)rng_next(&seed);
  return b;
}

static void fill_source(pools *s) {
  uint8_t *pat = pattern_block();
  /* chunk is a multiple of nothing in particular: segments of up to one period are
   * copied from the doubled pattern at the right phase. */
  const size_t chunk = (size_t)64 << 20;
  uint8_t *host = NULL;
  KVB_CHECK(s->ctx, kvc_host_pinned_alloc(s->ctx, chunk, (void **)&host));
  for (int32_t r = 0; r < kvc_transfer_layout_num_regions(s->layout); r++) {
    kvc_transfer_region_info ri;
    KVB_CHECK(s->ctx, kvc_transfer_layout_region(s->layout, r, &ri));
    const size_t bytes = (size_t)(ri.pages * ri.page_bytes);
    for (size_t off = 0; off < bytes; off += chunk) {
      const size_t n = bytes - off < chunk ? bytes - off : chunk;
      for (size_t i = 0; i < n;) {
        const size_t phase = (off + i + (size_t)r * 1237u) % PATTERN_PERIOD;
        const size_t len = n - i < PATTERN_PERIOD ? n - i : PATTERN_PERIOD;
        memcpy(host + i, pat + phase, len);
        i += len;
      }
      KVB_CHECK(s->ctx, kvc_memcpy_h2d(s->ctx, (uint8_t *)(uintptr_t)ri.base + off, host, n, NULL));
      KVB_CHECK(s->ctx, kvc_stream_synchronize(s->ctx, NULL));
    }
  }
  kvc_host_pinned_free(s->ctx, host);
  free(pat);
}

/* Target page dst[i] of sampled pairs equals what the source page held. */
static int verify(pools *dst, const int64_t *sp, const int64_t *dp, size_t n) {
  uint8_t *pat = pattern_block();
  int bad = 0;
  uint64_t seed = 99;
  for (int32_t r = 0; r < kvc_transfer_layout_num_regions(dst->layout); r++) {
    kvc_transfer_region_info ri;
    KVB_CHECK(dst->ctx, kvc_transfer_layout_region(dst->layout, r, &ri));
    if (ri.page_bytes > (int64_t)PATTERN_PERIOD) die("pages larger than the pattern period: lower --page-size");
    uint8_t *got = malloc((size_t)ri.page_bytes);
    for (int k = 0; k < 16; k++) {
      const size_t i = (size_t)(rng_next(&seed) % n);
      KVB_CHECK(dst->ctx, kvc_memcpy_d2h(dst->ctx, got, (uint8_t *)(uintptr_t)ri.base + dp[i] * ri.page_bytes,
                                         (size_t)ri.page_bytes, NULL));
      KVB_CHECK(dst->ctx, kvc_stream_synchronize(dst->ctx, NULL));
      const size_t base = (size_t)sp[i] * (size_t)ri.page_bytes + (size_t)r * 1237u;
      if (memcmp(got, pat + base % PATTERN_PERIOD, (size_t)ri.page_bytes)) bad++;
    }
    free(got);
  }
  free(pat);
  return bad;
}

static double median(double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, kvb_cmp_double);
  return t[n / 2];
}

/* Plan build: layout and plan host time, medians over 11 builds. */
static kvc_transfer_plan *build_plan(kvc_context *ctx, const kvc_transfer_layout *src, const kvc_transfer_layout *dst,
                                     const int64_t *sp, const int64_t *dp, size_t n, double *plan_us) {
  double t[11];
  kvc_transfer_plan *plan = NULL;
  for (int i = 0; i < 11; i++) {
    kvc_transfer_plan_destroy(plan);
    double t0 = kvb_now_us();
    KVB_CHECK(ctx, kvc_transfer_plan_create(ctx, src, dst, sp, dp, n, &plan));
    t[i] = kvb_now_us() - t0;
  }
  *plan_us = median(t, 11);
  return plan;
}

static void report(FILE *csv, const opts *o, const char *path, const kvc_transfer_plan *plan, double plan_us,
                   double plan_ms, double base_ms, const char *baseline, int bad) {
  const double gb = (double)kvc_transfer_plan_total_bytes(plan) / 1e9;
  printf("%-6s plan build %9.1f us | runs %7zu copies %8zu | plan %8.3f ms %7.1f GB/s | %-22s %8.3f ms %7.1f GB/s "
         "| ratio %.3f | check %s\n",
         path, plan_us, kvc_transfer_plan_num_runs(plan), kvc_transfer_plan_num_copies(plan), plan_ms,
         gb / (plan_ms * 1e-3), baseline, base_ms, gb / (base_ms * 1e-3), base_ms / plan_ms,
         bad ? "FAILED" : "bit-exact");
  if (csv)
    fprintf(csv, "%s,%d,%d,%d,%.1f,%zu,%zu,%.4f,%.2f,\"%s\",%.4f,%.2f,%.4f,%d\n", path, o->requests, o->tokens, o->ps,
            plan_us, kvc_transfer_plan_num_runs(plan), kvc_transfer_plan_num_copies(plan), plan_ms,
            gb / (plan_ms * 1e-3), baseline, base_ms, gb / (base_ms * 1e-3), base_ms / plan_ms, bad);
}

/* Times `reps` alternations of two operations on `stream` (2 warm-up rounds first);
 * medians in ms. The second one runs last. */
typedef void (*op_fn)(void *arg);
static void time_pair(void *stream, int reps, op_fn first_op, op_fn second_op, void *arg, double *first_ms,
                      double *second_ms) {
  void *e0 = NULL, *e1 = NULL;
  if (!use_host && (cu.event_create(&e0, 0) || cu.event_create(&e1, 0))) die("cuEventCreate");
  double *tp = malloc((size_t)reps * sizeof *tp), *tb = malloc((size_t)reps * sizeof *tb);
  for (int i = -2; i < reps; i++) {
    for (int which = 0; which < 2; which++) {
      float ms = 0;
      const double t0 = kvb_now_us();
      if (!use_host) cu.event_record(e0, stream);
      (which ? second_op : first_op)(arg);
      if (use_host) ms = (float)((kvb_now_us() - t0) * 1e-3);
      else if (cu.event_record(e1, stream) || cu.event_sync(e1) || cu.elapsed(&ms, e0, e1)) die("event timing");
      if (i >= 0) (which ? tb : tp)[i] = ms;
    }
  }
  *first_ms = median(tp, reps);
  *second_ms = median(tb, reps);
  free(tp);
  free(tb);
  if (!use_host) cu.event_destroy(e0), cu.event_destroy(e1);
}

/* --- Peer path (one process; one GPU or two) --------------------------------------- */

typedef struct peer_arg {
  const kvc_transfer_plan *plan;
  pools *src, *dst;
  void *stream;
} peer_arg;

static void peer_plan_op(void *a) {
  peer_arg *p = a;
  KVB_CHECK(p->dst->ctx, kvc_transfer_plan_copy_local(p->plan, p->src->ctx, p->dst->ctx, p->stream));
}

/* The same bytes as one block, through the same seam primitive the plan's copies use
 * (a device-to-device copy on one GPU, cuMemcpyPeerAsync between two): from the first
 * region of the source pool's single allocation to the first of the target's (both
 * allocations span at least the plan's bytes). */
static void peer_base_op(void *a) {
  peer_arg *p = a;
  kvc_transfer_region_info s, d;
  KVB_CHECK(p->src->ctx, kvc_transfer_layout_region(p->src->layout, 0, &s));
  KVB_CHECK(p->dst->ctx, kvc_transfer_layout_region(p->dst->layout, 0, &d));
  KVB_CHECK(p->dst->ctx,
            kvc__dev_copy_peer(p->dst->ctx, (void *)(uintptr_t)d.base, p->src->ctx, (const void *)(uintptr_t)s.base,
                               (size_t)kvc_transfer_plan_total_bytes(p->plan), p->stream));
}

static int run_peer(const opts *o, pools *src, pools *dst, FILE *csv) {
  int64_t *sp, *dp;
  size_t n;
  page_lists(o, &sp, &dp, &n);
  fill_source(src);
  double plan_us;
  kvc_transfer_plan *plan = build_plan(src->ctx, src->layout, dst->layout, sp, dp, n, &plan_us);
  void *stream = NULL;
  KVB_CHECK(dst->ctx, kvc__dev_enable_peer_access(dst->ctx, src->ctx)); /* for the baseline too */
  if (!use_host) {
    make_current(kvc_context_device(dst->ctx)); /* the stream belongs to the target's device */
    if (cu.stream_create(&stream, 1)) die("cuStreamCreate");
  }
  peer_arg arg = {plan, src, dst, stream};
  /* The plan runs last so the target holds its result for the check. */
  double plan_ms, base_ms;
  time_pair(stream, o->reps, peer_base_op, peer_plan_op, &arg, &base_ms, &plan_ms);
  KVB_CHECK(dst->ctx, kvc_stream_synchronize(dst->ctx, stream));
  const int bad = verify(dst, sp, dp, n);
  report(csv, o, o->gpus == 1 ? "peer1" : "peer2", plan, plan_us, plan_ms, base_ms,
         o->gpus == 1 ? "cuMemcpyDtoD one block" : "cuMemcpyPeer one block", bad);
  if (stream) cu.stream_destroy(stream);
  kvc_transfer_plan_destroy(plan);
  free(sp);
  free(dp);
  return bad;
}

/* --- NCCL path (two processes, --gpus 2) ------------------------------------------- */

static void write_all(int fd, const void *buf, size_t n) {
  for (const char *p = buf; n;) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) die("pipe write");
    p += w, n -= (size_t)w;
  }
}
static void read_all(int fd, void *buf, size_t n) {
  for (char *p = buf; n;) {
    ssize_t r = read(fd, p, n);
    if (r <= 0) die("pipe read");
    p += r, n -= (size_t)r;
  }
}
static void send_layout(int fd, const kvc_transfer_layout *l, kvc_context *ctx) {
  size_t bytes = 0;
  KVB_CHECK(ctx, kvc_transfer_layout_serialize(l, NULL, 0, &bytes));
  void *buf = malloc(bytes);
  KVB_CHECK(ctx, kvc_transfer_layout_serialize(l, buf, bytes, &bytes));
  uint64_t n64 = bytes;
  write_all(fd, &n64, sizeof n64);
  write_all(fd, buf, bytes);
  free(buf);
}
static kvc_transfer_layout *recv_layout(int fd, kvc_context *ctx) {
  uint64_t n64 = 0;
  read_all(fd, &n64, sizeof n64);
  if (n64 > ((uint64_t)1 << 24)) die("layout too large");
  void *buf = malloc((size_t)n64);
  read_all(fd, buf, (size_t)n64);
  kvc_transfer_layout *l = NULL;
  KVB_CHECK(ctx, kvc_transfer_layout_deserialize(ctx, buf, (size_t)n64, &l));
  free(buf);
  return l;
}

typedef struct nccl_arg {
  const kvc__nccl_api *nccl;
  const kvc_transfer_plan *plan;
  pools *me;
  void *comm, *stream;
  int rank;
} nccl_arg;

static void nccl_plan_op(void *a) {
  nccl_arg *p = a;
  KVB_CHECK(p->me->ctx, p->rank == 0 ? kvc_transfer_plan_send(p->plan, p->me->ctx, p->comm, 1, p->stream)
                                     : kvc_transfer_plan_recv(p->plan, p->me->ctx, p->comm, 0, p->stream));
}

static void nccl_base_op(void *a) {
  nccl_arg *p = a;
  kvc_transfer_region_info r;
  KVB_CHECK(p->me->ctx, kvc_transfer_layout_region(p->me->layout, 0, &r));
  const size_t bytes = (size_t)kvc_transfer_plan_total_bytes(p->plan);
  kvc__nccl_result res =
      p->rank == 0 ? p->nccl->send((const void *)(uintptr_t)r.base, bytes, KVC__NCCL_INT8, 1, p->comm, p->stream)
                   : p->nccl->recv((void *)(uintptr_t)r.base, bytes, KVC__NCCL_INT8, 0, p->comm, p->stream);
  if (res != KVC__NCCL_SUCCESS) die(p->nccl->get_error_string(res));
}

/* One side of the two-process run; rank 0 reports. to/from: pipes to the peer. */
static int nccl_side(const opts *o, int rank, int to, int from, FILE *csv) {
  pools me;
  side_open(&me, rank, o);
  kvc_status st;
  const kvc__nccl_api *nccl = kvc__nccl_load(me.ctx, &st);
  if (!nccl) die(kvc_last_error(me.ctx));
  kvc__nccl_unique_id id;
  if (rank == 0) {
    if (nccl->get_unique_id(&id) != KVC__NCCL_SUCCESS) die("ncclGetUniqueId");
    write_all(to, &id, sizeof id);
    send_layout(to, me.layout, me.ctx);
  } else {
    read_all(from, &id, sizeof id);
  }
  /* Rank 0 sent first, so rank 1 reads before it writes: no deadlock. */
  kvc_transfer_layout *peer = recv_layout(from, me.ctx);
  if (rank == 1) send_layout(to, me.layout, me.ctx);
  int64_t *sp, *dp;
  size_t n;
  page_lists(o, &sp, &dp, &n);
  if (rank == 0) fill_source(&me);
  double plan_us;
  kvc_transfer_plan *plan = rank == 0 ? build_plan(me.ctx, me.layout, peer, sp, dp, n, &plan_us)
                                      : build_plan(me.ctx, peer, me.layout, sp, dp, n, &plan_us);
  void *comm = NULL, *stream = NULL;
  make_current(rank);
  if (nccl->comm_init_rank(&comm, 2, id, rank) != KVC__NCCL_SUCCESS) die("ncclCommInitRank");
  if (cu.stream_create(&stream, 1)) die("cuStreamCreate");
  nccl_arg arg = {nccl, plan, &me, comm, stream, rank};
  double plan_ms, base_ms;
  /* Both ranks run the same alternation; the receiver's times are reported (they
   * include the few microseconds by which the sender may start later: the host loops
   * resynchronise at every repetition through the transfers themselves). */
  time_pair(stream, o->reps, nccl_base_op, nccl_plan_op, &arg, &base_ms, &plan_ms);
  KVB_CHECK(me.ctx, kvc_stream_synchronize(me.ctx, stream));
  int bad = 0;
  if (rank == 1) {
    bad = verify(&me, sp, dp, n);
    double r[2] = {plan_ms, base_ms};
    write_all(to, r, sizeof r);
    write_all(to, &bad, sizeof bad);
  } else {
    double r[2];
    read_all(from, r, sizeof r);
    read_all(from, &bad, sizeof bad);
    report(csv, o, "nccl2", plan, plan_us, r[0], r[1], "ncclSend/Recv one block", bad);
  }
  cu.stream_destroy(stream);
  nccl->comm_destroy(comm);
  kvc_transfer_plan_destroy(plan);
  kvc_transfer_layout_destroy(peer);
  free(sp);
  free(dp);
  side_close(&me);
  return bad;
}

static int run_two_gpus(const opts *o, FILE *csv) {
  int down[2], up[2]; /* down: rank 0 -> 1, up: rank 1 -> 0 */
  if (pipe(down) || pipe(up)) die("pipe");
  fflush(stdout);
  pid_t child = fork(); /* before any CUDA call in either process */
  if (child < 0) die("fork");
  if (child == 0) {
    close(down[1]), close(up[0]);
    if (!kvb_cuda_load(&cu)) die("libcuda entry points");
    _exit(nccl_side(o, 1, up[1], down[0], NULL) ? 1 : 0);
  }
  close(down[0]), close(up[1]);
  if (!kvb_cuda_load(&cu)) die("libcuda entry points");
  int bad = nccl_side(o, 0, down[1], up[0], csv);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status)) bad = 1;
  pools a, b;
  side_open(&a, 0, o);
  side_open(&b, 1, o);
  bad |= run_peer(o, &a, &b, csv);
  side_close(&a);
  side_close(&b);
  return bad;
}

int main(int argc, char **argv) {
  opts o = {64, 4096, 16, 1, 10, 16, NULL};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--requests") && i + 1 < argc) o.requests = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) o.tokens = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--page-size") && i + 1 < argc) o.ps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--gpus") && i + 1 < argc) o.gpus = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) o.reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--max-chunk") && i + 1 < argc) o.max_chunk = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--csv") && i + 1 < argc) o.csv = argv[++i];
    else if (!strcmp(argv[i], "--quick")) o.requests = 8, o.tokens = 1024, o.reps = 5;
    else if (!strcmp(argv[i], "--host")) use_host = 1;
    else {
      fprintf(stderr,
              "usage: %s [--requests N] [--tokens N] [--page-size N] [--gpus 1|2] [--reps N] [--max-chunk N] "
              "[--csv FILE] [--quick] [--host]\n",
              argv[0]);
      return 2;
    }
  }
  if (o.requests < 1 || o.tokens < 1 || o.ps < 1 || o.reps < 1 || o.max_chunk < 1 || (o.gpus != 1 && o.gpus != 2) ||
      (use_host && o.gpus != 1)) {
    fprintf(stderr, "bench_transfer: bad option values\n");
    return 2;
  }
  /* NVLink SHARP (multicast) stays off on these machines; NCCL reads it at init. */
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  FILE *csv = o.csv ? fopen(o.csv, "w") : NULL;
  if (o.csv && !csv) die("cannot open the CSV file");
  if (csv)
    fprintf(csv, "path,requests,tokens,page_size,plan_build_us,runs,copies,plan_ms,plan_gbps,baseline,baseline_ms,"
                 "baseline_gbps,baseline_over_plan,bad_pages\n");
  printf("# %d requests x %d tokens, Llama-3-8B KV (32 layers, 8 x 128 bf16), page size %d, target chunks 1..%d "
         "pages, %d reps\n",
         o.requests, o.tokens, o.ps, o.max_chunk, o.reps);
  int bad;
  if (o.gpus == 2) {
    bad = run_two_gpus(&o, csv);
  } else {
    if (!use_host && !kvb_cuda_load(&cu))
      die("libcuda.so.1 not usable (the benchmark needs a GPU; --host for a CPU check)");
    pools a, b;
    side_open(&a, 0, &o);
    side_open(&b, 0, &o);
    bad = run_peer(&o, &a, &b, csv);
    side_close(&a);
    side_close(&b);
  }
  if (csv) fclose(csv);
  return bad ? 1 : 0;
}
