/*
 * basic_alloc.c — a scheduler's view of the level-2 API: a request-to-token pool and a
 * paged allocator (page size 16) serving a few requests through prefill, decode and
 * release. Prints what each step did and checks everything is free at the end.
 *
 * Build: target kvc_example_basic. Runs on a GPU when one is usable, else on the host
 * backend (KVC_BACKEND=host forces it).
 */
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

/* No options: --help prints this to stdout and exits 0, anything else is an error. */
static void args(int argc, char **argv) {
  if (argc < 2) return;
  const int help = !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h");
  if (!help) fprintf(stderr, "%s: unknown argument '%s'\n", argv[0], argv[1]);
  fprintf(help ? stdout : stderr, "usage: kvc_example_basic\n"
                                  "  a request-to-token pool and a paged allocator serving a few requests\n"
                                  "  through prefill, decode and release; checks everything is free at the end.\n"
                                  "Backend: KVC_BACKEND=auto|host|cuda (auto: CUDA when a GPU is usable).\n");
  exit(help ? 0 : 2);
}

int main(int argc, char **argv) {
  args(argc, argv);
  kvc_context *ctx = NULL;
  CHECK(kvc_context_create(NULL, &ctx));
  printf("backend: %s\n", kvc_context_backend(ctx) == KVC_BACKEND_CUDA ? "cuda" : "host");

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
  printf("allocator: %lld tokens in pages of %d, %lld free\n", (long long)kvc_allocator_size(alloc),
         kvc_allocator_page_size(alloc), (long long)kvc_allocator_available_size(alloc));

  /* Prefill: four prompts of different lengths; rows 0 = "give me a row". */
  int32_t rows[NREQ] = {0, 0, 0, 0};
  int64_t prefix[NREQ] = {0, 0, 0, 0}, seq[NREQ] = {20, 5, 33, 16}, out[512];
  CHECK(kvc_req_to_token_pool_alloc(pool, NREQ, rows));
  int64_t *out_dev = NULL; /* out_cache_loc on the device, as an engine would pass to set_kv */
  CHECK(kvc_memory_alloc(ctx, sizeof out, (void **)&out_dev));
  CHECK(kvc_allocator_alloc_extend(alloc, NREQ, prefix, seq, NULL, pool, rows, NULL, out, out_dev, NULL));
  int64_t o = 0;
  for (int i = 0; i < NREQ; i++) {
    printf("prefill req %d: row %d, %lld tokens -> slots %lld..%lld\n", i, rows[i], (long long)seq[i],
           (long long)out[o], (long long)out[o + seq[i] - 1]);
    o += seq[i];
  }
  printf("free after prefill: %lld tokens\n", (long long)kvc_allocator_available_size(alloc));

  /* Decode: ten steps, one token per request; last_locs come from the pool's mirror. */
  for (int step = 0; step < 10; step++) {
    for (int i = 0; i < NREQ; i++) seq[i]++;
    CHECK(kvc_allocator_alloc_decode(alloc, NREQ, seq, NULL, pool, rows, out, out_dev, NULL));
    if (step == 0 || step == 9)
      printf("decode step %d: slots %lld %lld %lld %lld\n", step, (long long)out[0], (long long)out[1],
             (long long)out[2], (long long)out[3]);
  }

  /* Release: all finished requests in one free group (one sorted release). */
  CHECK(kvc_allocator_free_group_begin(alloc));
  for (int i = 0; i < NREQ; i++) {
    const int32_t *row = kvc_req_to_token_pool_row(pool, rows[i]);
    int64_t slots[256];
    for (int64_t k = 0; k < seq[i]; k++) slots[k] = row[k];
    CHECK(kvc_allocator_free(alloc, slots, (size_t)seq[i]));
    CHECK(kvc_req_to_token_pool_free(pool, rows[i]));
  }
  CHECK(kvc_allocator_free_group_end(alloc));
  CHECK(kvc_stream_synchronize(ctx, NULL));

  kvc_allocator_stats st;
  CHECK(kvc_allocator_get_stats(alloc, &st));
  CHECK(kvc_allocator_check(alloc));
  printf("released: %lld/%lld pages free, %d/%d rows free\n", (long long)st.free_pages, (long long)st.num_pages,
         kvc_req_to_token_pool_available(pool), kvc_req_to_token_pool_size(pool));
  int ok = st.free_pages == st.num_pages && st.held_pages == 0 &&
           kvc_req_to_token_pool_available(pool) == kvc_req_to_token_pool_size(pool);

  kvc_memory_free(ctx, out_dev);
  kvc_allocator_destroy(alloc);
  kvc_req_to_token_pool_destroy(pool);
  kvc_context_destroy(ctx);
  printf("%s\n", ok ? "OK: everything freed" : "FAILED: something leaked");
  return ok ? 0 : 1;
}
