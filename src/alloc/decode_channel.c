/*
 * decode_channel.c — alloc_decode split for CUDA graphs: the host half publishes each
 * step into a ring of pinned host memory (no driver call), the device half is one
 * kernel with fixed parameters that the engine captures into its decode graph
 * (kernels/alloc_channel.cu).
 *
 *   host: kvc_decode_channel_alloc            device: each kernel execution
 *     slot free? (host_state[0] >= step-depth)    step = applied + 1
 *     validate, pick slots (sa.ops->decode_plan)   ring[step % depth].step == step ?
 *     write (row, pos, slot) x n, then n           yes: out, table; applied = step;
 *     release-store the slot's step word                host_state[0] = step
 *     commit the host state                        no:  out = 0 (padding slot);
 *                                                       host_state[1] = step
 *
 * Why a ring and not one buffer: the host prepares step k+1 while the GPU may still be
 * executing (or not yet have started) step k's graph. Ring slot reuse is checked against
 * the step the device reported, so the host never waits: `depth` steps ahead it gets
 * KVC_ERR_BUSY and nothing changes.
 */
#include "slot_allocator.h"

#include <string.h>

#define KVC__CHANNEL_MAGIC 0x6b76632d6368616eull /* "kvc-chan" */

struct kvc_decode_channel {
  uint64_t magic;
  kvc_context *ctx;
  kvc__slot_allocator sa; /* what plans and commits each step */
  kvc_allocator *alloc;   /* the allocator whose slots the kernel writes (an SWA one's full side) */
  kvc_req_to_token_pool *req_pool;
  uint32_t *host;        /* pinned: [0, 16) state words, then depth ring slots */
  uint32_t *applied_dev; /* device counter read and written only by the kernel */
  const kvc__kfunc *kernel;
  kvc_p_decode_channel params;
  uint32_t published; /* steps published so far */
};

#define STATE_WORDS 16 /* [0] applied, [1] first missed step; padded to 64 bytes */

static uint32_t *ring_slot(const kvc_decode_channel *ch, uint32_t step) {
  return ch->host + STATE_WORDS +
         (size_t)((step - 1) & ((uint32_t)ch->params.depth - 1)) * (size_t)ch->params.slot_words;
}

static kvc_status check_channel(const kvc_decode_channel *ch, const char *fn) {
  if (!ch || ch->magic != KVC__CHANNEL_MAGIC)
    return kvc__error(NULL, KVC_ERR_INVALID_ARGUMENT, fn, "channel is NULL or not a live kvc_decode_channel");
  return KVC_OK;
}

/* The first step an execution found unpublished, as an error (0: none). */
static kvc_status missed_step(const kvc_decode_channel *ch, const char *fn) {
  const uint32_t missed = __atomic_load_n(&ch->host[1], __ATOMIC_ACQUIRE);
  if (!missed) return KVC_OK;
  return kvc__error(ch->ctx, KVC_ERR_MISUSE, fn,
                    "a channel kernel execution found step %u unpublished (kernel run before "
                    "kvc_decode_channel_alloc; its out_cache_loc was set to the padding slot 0)",
                    missed);
}

/* Shared by both creates: `sa` plans the steps; its channel binding names the allocator
 * whose slots the kernel writes and the device full->SWA mapping to update (NULL: none). */
static kvc_status channel_create(const char *fn, kvc__slot_allocator sa, kvc_req_to_token_pool *req_pool,
                                 size_t max_batch, unsigned depth, int64_t *out_device, kvc_decode_channel **out) {
  int64_t *map, map_len;
  kvc_allocator *alloc = sa.ops->channel(&sa, &map, &map_len);
  if (!alloc)
    return kvc__error(NULL, KVC_ERR_INVALID_ARGUMENT, fn,
                      "alloc is NULL, not a live kvc_swa_allocator, or a pure-SWA one (no alloc_decode)");
  kvc_context *ctx = alloc->ctx;
  if (req_pool) KVC_FORWARD(kvc__req_pool_check_handle(ctx, fn, req_pool));
  KVC_RETURN_IF(!req_pool && !out_device, ctx, KVC_ERR_INVALID_ARGUMENT,
                "req_pool and out_device are both NULL: the kernel would write nothing");
  KVC_RETURN_IF(max_batch < 1 || max_batch > ((size_t)1 << 20), ctx, KVC_ERR_INVALID_ARGUMENT,
                "max_batch %zu is out of [1, 2^20]", max_batch);
  KVC_RETURN_IF(depth < 2 || depth > 4096, ctx, KVC_ERR_INVALID_ARGUMENT, "depth %u is out of [2, 4096]", depth);
  uint32_t d = 2;
  while (d < depth) d *= 2; /* power of two: slot = step mod depth stays right across wrap */

  kvc_decode_channel *ch = kvc__calloc(ctx, 1, sizeof *ch);
  if (!ch) return kvc__error(ctx, KVC_ERR_HOST_OOM, fn, "%zu bytes", sizeof *ch);
  ch->ctx = ctx;
  ch->sa = sa;
  ch->alloc = alloc;
  ch->req_pool = req_pool;
  /* 16-word slots (16-byte loads of the payload, 8-byte header loads), with room for the
   * kernel's last 16-byte load to run 3 words past a full payload. */
  const size_t stride = map ? 4 : 3;
  const size_t slot_words = (KVC_CHANNEL_HEADER_WORDS + stride * max_batch + 3 + 15) / 16 * 16;
  const size_t host_bytes = (STATE_WORDS + (size_t)d * slot_words) * sizeof(uint32_t);
  kvc_status st = kvc__dev_pinned_alloc(ctx, host_bytes, (void **)&ch->host);
  if (st == KVC_OK) {
    memset(ch->host, 0, host_bytes); /* step words 0: nothing published */
    st = kvc__dev_alloc(ctx, 256, (void **)&ch->applied_dev);
  }
  if (st == KVC_OK) st = kvc__dev_memset(ctx, ch->applied_dev, 0, sizeof(uint32_t), NULL);
  if (st == KVC_OK) st = kvc__dev_sync(ctx, NULL);
  /* Resolve the kernel now: enqueue may run during stream capture, where compiling or
   * loading a module is not allowed. */
  if (st == KVC_OK) st = kvc__decode_channel_kernel(ctx, &ch->kernel);
  if (st != KVC_OK) {
    kvc__dev_pinned_free(ctx, ch->host);
    kvc__dev_free(ctx, ch->applied_dev);
    kvc__free(ctx, ch);
    return st;
  }
  kvc_p_decode_channel *p = &ch->params;
  p->ring = (uint64_t)(uintptr_t)(ch->host + STATE_WORDS);
  p->applied = (uint64_t)(uintptr_t)ch->applied_dev;
  p->host_state = (uint64_t)(uintptr_t)ch->host;
  p->table = req_pool ? (uint64_t)(uintptr_t)req_pool->table : 0;
  p->out = (uint64_t)(uintptr_t)out_device;
  p->row_stride = req_pool ? req_pool->width : 0;
  p->map = (uint64_t)(uintptr_t)map;
  p->map_len = map_len;
  p->depth = (int32_t)d;
  p->slot_words = (int32_t)slot_words;
  p->max_batch = (int32_t)max_batch;
  ch->magic = KVC__CHANNEL_MAGIC;
  *out = ch;
  return KVC_OK;
}

kvc_status kvc_decode_channel_create(kvc_allocator *alloc, kvc_req_to_token_pool *req_pool, size_t max_batch,
                                     unsigned depth, int64_t *out_device, kvc_decode_channel **out) {
  KVC_API_ENTRY();
  if (!out) return kvc__error(NULL, KVC_ERR_INVALID_ARGUMENT, __func__, "out is NULL");
  if (!alloc || alloc->magic != KVC__ALLOCATOR_MAGIC)
    return kvc__error(NULL, KVC_ERR_INVALID_ARGUMENT, __func__, "alloc is NULL or not a live kvc_allocator");
  return channel_create(__func__, kvc__slot_allocator_plain(alloc), req_pool, max_batch, depth, out_device, out);
}

kvc_status kvc_decode_channel_create_swa(kvc_swa_allocator *alloc, kvc_req_to_token_pool *req_pool, size_t max_batch,
                                         unsigned depth, int64_t *out_device, kvc_decode_channel **out) {
  KVC_API_ENTRY();
  if (!out) return kvc__error(NULL, KVC_ERR_INVALID_ARGUMENT, __func__, "out is NULL");
  if (!kvc__swa_allocator_live(alloc))
    return kvc__error(NULL, KVC_ERR_INVALID_ARGUMENT, __func__,
                      "alloc is NULL, not a live kvc_swa_allocator, or a pure-SWA one (no alloc_decode)");
  return channel_create(__func__, kvc__slot_allocator_swa(alloc), req_pool, max_batch, depth, out_device, out);
}

void kvc_decode_channel_destroy(kvc_decode_channel *ch) {
  if (!ch || ch->magic != KVC__CHANNEL_MAGIC) return;
  kvc_context *ctx = ch->ctx;
  ch->magic = 0;
  kvc__dev_pinned_free(ctx, ch->host);
  kvc__dev_free(ctx, ch->applied_dev);
  kvc__free(ctx, ch);
}

kvc_status kvc_decode_channel_enqueue(kvc_decode_channel *ch, kvc_stream stream) {
  KVC_API_ENTRY();
  KVC_FORWARD(check_channel(ch, __func__));
  return kvc__decode_channel_launch(ch->ctx, ch->kernel, &ch->params, stream);
}

kvc_status kvc__decode_channel_ready(const kvc_decode_channel *ch, const char *fn) {
  KVC_FORWARD(missed_step(ch, fn));
  const uint32_t step = ch->published + 1;
  const uint32_t applied = __atomic_load_n(&ch->host[0], __ATOMIC_ACQUIRE);
  /* The slot held step - depth: reusable once the device has applied that step. */
  const uint32_t depth = (uint32_t)ch->params.depth;
  if ((int32_t)(step - depth - applied) > 0)
    return kvc__error(ch->ctx, KVC_ERR_BUSY, fn,
                      "the device has applied step %u, the host is publishing step %u (depth %u): "
                      "the channel's kernel has not run for the earlier steps",
                      applied, step, depth);
  return KVC_OK;
}

kvc_status kvc_decode_channel_alloc(kvc_decode_channel *ch, size_t bs, const int64_t *seq_lens,
                                    const int64_t *last_locs, const int32_t *req_rows, int64_t *out_host) {
  KVC_API_ENTRY();
  KVC_FORWARD(check_channel(ch, __func__));
  kvc_allocator *a = ch->alloc;
  KVC_RETURN_IF(a->magic != KVC__ALLOCATOR_MAGIC, ch->ctx, KVC_ERR_MISUSE, "the channel's allocator was destroyed");
  KVC_RETURN_IF(bs > (size_t)ch->params.max_batch, ch->ctx, KVC_ERR_INVALID_ARGUMENT,
                "batch_size %zu > the channel's max_batch %d", bs, ch->params.max_batch);
  KVC_FORWARD(kvc__decode_channel_ready(ch, __func__));
  const uint32_t step = ch->published + 1;
  uint32_t *slot = ring_slot(ch, step);
  const kvc__decode_args x = {bs, seq_lens, last_locs, ch->req_pool, req_rows, out_host, NULL, NULL};
  kvc__decode_plan plan = {slot + KVC_CHANNEL_HEADER_WORDS, 0};
  KVC_FORWARD(ch->sa.ops->decode_plan(&ch->sa, __func__, &x, &plan));
  slot[1] = (uint32_t)bs;
  /* Last: a kernel that sees this step number sees the payload and n written above. */
  __atomic_store_n(&slot[0], step, __ATOMIC_RELEASE);
  ch->published = step;
  /* The plan is published: the step is the allocator's state whatever the audit says. */
  return ch->sa.ops->decode_commit(&ch->sa, __func__, &x, &plan);
}

kvc_status kvc_decode_channel_check(const kvc_decode_channel *ch, uint64_t *published, uint64_t *applied) {
  KVC_API_ENTRY();
  KVC_FORWARD(check_channel(ch, __func__));
  if (published) *published = ch->published;
  if (applied) *applied = __atomic_load_n(&ch->host[0], __ATOMIC_ACQUIRE);
  return missed_step(ch, __func__);
}

bool kvc__decode_channel_binds(const kvc_decode_channel *ch, const kvc__slot_allocator *sa,
                               const kvc_req_to_token_pool *rp) {
  return ch && ch->magic == KVC__CHANNEL_MAGIC && ch->req_pool == rp && kvc__slot_same(&ch->sa, sa);
}

int64_t *kvc__decode_channel_out(const kvc_decode_channel *ch) { return (int64_t *)(uintptr_t)ch->params.out; }
