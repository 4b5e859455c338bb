/*
 * graph_decode.c — decode steps with no kernel launch on the scheduler path: the
 * decode channel's kernel is captured once into a CUDA graph (where an engine's decode
 * forward would also live), and every step is one host call plus one graph replay.
 *
 *   once:      kvc_decode_channel_create, capture kvc_decode_channel_enqueue in a graph
 *   per step:  kvc_decode_channel_alloc (host only)  ->  graph replay (the engine's)
 *
 * The example drives the graph through the CUDA driver API, loaded with dlopen as the
 * library itself does (no toolkit needed to build it). On the host backend, or without
 * the driver, it enqueues the channel's kernel directly instead: same results, no graph.
 * At the end the device's req_to_token rows are compared with the host mirror.
 *
 * Build: target kvc_example_graph_decode.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"

#define CHECK(call)                                                                                                   \
  do {                                                                                                                \
    kvc_status st_ = (call);                                                                                          \
    if (st_ != KVC_OK) {                                                                                              \
      fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, kvc_status_name(st_), kvc_last_error(ctx)); \
      exit(1);                                                                                                        \
    }                                                                                                                 \
  } while (0)

#define NREQ 4
#define STEPS 12

/* The few driver entry points a graph needs (CUresult is an int; 0 = success). */
typedef struct graph_api {
  int (*stream_create)(void **stream, unsigned flags);
  int (*begin_capture)(void *stream, int mode);
  int (*end_capture)(void *stream, void **graph);
  int (*instantiate)(void **exec, void *graph, unsigned long long flags);
  int (*launch)(void *exec, void *stream);
  int (*synchronize)(void *stream);
} graph_api;

static int load_graph_api(graph_api *g) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return 0;
  *(void **)&g->stream_create = dlsym(lib, "cuStreamCreate");
  *(void **)&g->begin_capture = dlsym(lib, "cuStreamBeginCapture_v2");
  *(void **)&g->end_capture = dlsym(lib, "cuStreamEndCapture");
  *(void **)&g->instantiate = dlsym(lib, "cuGraphInstantiateWithFlags");
  *(void **)&g->launch = dlsym(lib, "cuGraphLaunch");
  *(void **)&g->synchronize = dlsym(lib, "cuStreamSynchronize");
  return g->stream_create && g->begin_capture && g->end_capture && g->instantiate && g->launch && g->synchronize;
}

/* No options: --help prints this to stdout and exits 0, anything else is an error. */
static void args(int argc, char **argv) {
  if (argc < 2) return;
  const int help = !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h");
  if (!help) fprintf(stderr, "%s: unknown argument '%s'\n", argv[0], argv[1]);
  fprintf(help ? stdout : stderr, "usage: kvc_example_graph_decode\n"
                                  "  decode steps through the decode channel, its kernel captured in a CUDA\n"
                                  "  graph on a GPU (enqueued directly on the host backend); checks the device rows.\n"
                                  "Backend: KVC_BACKEND=auto|host|cuda (auto: CUDA when a GPU is usable).\n");
  exit(help ? 0 : 2);
}

int main(int argc, char **argv) {
  args(argc, argv);
  kvc_context *ctx = NULL;
  CHECK(kvc_context_create(NULL, &ctx));
  const int cuda = kvc_context_backend(ctx) == KVC_BACKEND_CUDA;

  kvc_req_to_token_pool_config pc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  pc.size = 8;
  pc.max_context_len = 256;
  kvc_req_to_token_pool *pool = NULL;
  CHECK(kvc_req_to_token_pool_create(ctx, &pc, &pool));
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = KVC_ALLOCATOR_PAGED;
  ac.page_size = 16;
  ac.size = 64 * 16;
  kvc_allocator *alloc = NULL;
  CHECK(kvc_allocator_create(ctx, &ac, &alloc));

  /* out_cache_loc lives at a fixed address, as a graph needs: max_batch entries. */
  int64_t *out_dev = NULL;
  CHECK(kvc_memory_alloc(ctx, 512 * sizeof(int64_t), (void **)&out_dev));
  int32_t rows[NREQ] = {0, 0, 0, 0};
  int64_t prefix[NREQ] = {0, 0, 0, 0}, seq[NREQ] = {20, 5, 33, 16}, out[512];
  CHECK(kvc_req_to_token_pool_alloc(pool, NREQ, rows));
  CHECK(kvc_allocator_alloc_extend(alloc, NREQ, prefix, seq, NULL, pool, rows, NULL, out, out_dev, NULL));

  /* The channel: up to 8 requests per step, the host at most 4 steps ahead of the GPU. */
  kvc_decode_channel *ch = NULL;
  CHECK(kvc_decode_channel_create(alloc, pool, 8, 4, out_dev, &ch));

  graph_api g;
  void *stream = NULL, *graph = NULL, *exec = NULL;
  const int graphs = cuda && load_graph_api(&g);
  if (graphs) {
    CHECK(kvc_stream_synchronize(ctx, NULL)); /* the prefill before the graph's stream */
    if (g.stream_create(&stream, 0) || g.begin_capture(stream, 1 /* thread-local */)) {
      fprintf(stderr, "could not start a stream capture\n");
      return 1;
    }
    CHECK(kvc_decode_channel_enqueue(ch, stream)); /* ...an engine captures its forward here too */
    if (g.end_capture(stream, &graph) || g.instantiate(&exec, graph, 0)) {
      fprintf(stderr, "could not capture or instantiate the graph\n");
      return 1;
    }
    printf("captured the channel's kernel in a CUDA graph\n");
  } else {
    printf("backend %s: enqueuing the channel's kernel directly (no graph)\n", cuda ? "cuda" : "host");
  }

  for (int step = 0; step < STEPS; step++) {
    for (int i = 0; i < NREQ; i++) seq[i]++;
    /* Host half: validation, slots, host state, the step into pinned memory. No driver
     * call. KVC_ERR_BUSY: the GPU is 4 steps behind (this loop has no forward pass to
     * wait for, unlike an engine's, which reads each step's logits): wait, then retry. */
    kvc_status st = kvc_decode_channel_alloc(ch, NREQ, seq, NULL, rows, out);
    if (st == KVC_ERR_BUSY) {
      if (graphs ? g.synchronize(stream) != 0 : kvc_stream_synchronize(ctx, NULL) != KVC_OK) return 1;
      st = kvc_decode_channel_alloc(ch, NREQ, seq, NULL, rows, out);
    }
    CHECK(st);
    if (step < 2 || step == STEPS - 1)
      printf("decode step %2d: slots %lld %lld %lld %lld\n", step, (long long)out[0], (long long)out[1],
             (long long)out[2], (long long)out[3]);
    /* Device half: the graph replay writes out_cache_loc and the req_to_token entries. */
    if (graphs) {
      if (g.launch(exec, stream)) {
        fprintf(stderr, "graph launch failed\n");
        return 1;
      }
    } else {
      CHECK(kvc_decode_channel_enqueue(ch, NULL));
    }
  }
  if (graphs && g.synchronize(stream)) {
    fprintf(stderr, "stream synchronize failed\n");
    return 1;
  }
  CHECK(kvc_stream_synchronize(ctx, NULL));

  uint64_t published = 0, applied = 0;
  CHECK(kvc_decode_channel_check(ch, &published, &applied));
  CHECK(kvc_req_to_token_pool_audit_device(pool, NULL)); /* device rows == host mirror */
  printf("%llu steps published, %llu applied; device req_to_token rows match the host mirror\n",
         (unsigned long long)published, (unsigned long long)applied);

  /* Release everything; the channel goes first (no execution is pending any more). */
  kvc_decode_channel_destroy(ch);
  CHECK(kvc_allocator_free_group_begin(alloc));
  for (int i = 0; i < NREQ; i++) {
    int64_t slots[256];
    const int32_t *row = kvc_req_to_token_pool_row(pool, rows[i]);
    for (int64_t k = 0; k < seq[i]; k++) slots[k] = row[k];
    CHECK(kvc_allocator_free(alloc, slots, (size_t)seq[i]));
    CHECK(kvc_req_to_token_pool_free(pool, rows[i]));
  }
  CHECK(kvc_allocator_free_group_end(alloc));
  const int ok =
      published == STEPS && applied == STEPS && kvc_allocator_available_size(alloc) == kvc_allocator_size(alloc);
  kvc_memory_free(ctx, out_dev);
  kvc_allocator_destroy(alloc);
  kvc_req_to_token_pool_destroy(pool);
  kvc_context_destroy(ctx);
  printf("%s\n", ok ? "OK: every step applied, everything freed" : "FAILED");
  return ok ? 0 : 1;
}
