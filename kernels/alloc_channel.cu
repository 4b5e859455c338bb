/*
 * alloc_channel.cu — the device half of kvc_decode_channel: applies the oldest decode
 * step the host has published and this kernel has not applied yet.
 *
 * The kernel's parameters never change (only addresses), so it can be captured once
 * into an engine's CUDA graph and replayed every step; the per-step data (row, position,
 * slot per request: kvc_decode_write's three-word form) lives in a ring of host memory
 * the GPU reads directly. Each execution
 * takes step `applied + 1` from ring slot (step - 1) % depth, checks that the host has
 * published it (the slot's step word, read with acquire semantics at system scope), writes
 * out_cache_loc and the req_to_token entries, and reports the step back to the host
 * (release store into host memory) so the host knows the ring slot may be reused.
 *
 * An execution that finds its step unpublished (the engine replayed before publishing)
 * writes the padding slot 0 into all of out_cache_loc, so the step's KV writes land in the
 * page that is never handed out instead of in live slots, records the step in host_state[1]
 * and leaves `applied` unchanged (the next execution applies that step).
 *
 * One CTA: the step is a few KB; the execution's time is the PCIe round trips.
 */
#include "common.cuh"

/* The slot's (step, n) header in one acquire load at system scope: the host writes n,
 * then release-stores step, so a matching step comes with its n (one PCIe round trip). */
KVC_DEVICE uint64_t kvc_ld_acquire_sys_u64(const uint32_t *p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

/* Tells the host the slot may be reused. Relaxed is enough: the host needs to know that
 * the payload reads are done (they were, before the barrier that precedes this store),
 * not to see the table writes, so no system-wide fence is paid here. */
KVC_DEVICE void kvc_st_relaxed_sys(uint32_t *p, uint32_t v) {
  asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/* Requests per pass: the pass's payload (3 or 4 words each) is first copied from host memory
 * into shared memory with 16-byte loads (few, wide PCIe reads), then applied. */
#define KVC_CH_PASS 1024
#define KVC_CH_STRIDE_MAX 4

extern "C" __global__ void __launch_bounds__(1024)
    kvc_decode_channel_apply(const __grid_constant__ kvc_p_decode_channel p) {
  __shared__ uint32_t s_step, s_n;
  __shared__ int s_ok;
  __shared__ __align__(16) uint32_t s_words[KVC_CH_STRIDE_MAX * KVC_CH_PASS];
  uint32_t *applied = kvc_ptr<uint32_t *>(p.applied);
  uint32_t *host_state = kvc_ptr<uint32_t *>(p.host_state);
  const uint32_t *ring = kvc_ptr<const uint32_t *>(p.ring);
  if (threadIdx.x == 0) {
    const uint32_t step = *applied + 1;
    const uint32_t *slot = ring + (size_t)((step - 1) % (uint32_t)p.depth) * (size_t)p.slot_words;
    const uint64_t head = kvc_ld_acquire_sys_u64(slot); /* little endian: step, then n */
    const uint32_t published = (uint32_t)head, n = (uint32_t)(head >> 32);
    s_ok = published == step && n <= (uint32_t)p.max_batch;
    s_n = s_ok ? n : 0;
    s_step = step;
  }
  __syncthreads();
  const int n = (int)s_n;
  /* 16-byte aligned: ring slots are multiples of 16 words after a 16-word state block */
  const uint32_t *w =
      ring + (size_t)((s_step - 1) % (uint32_t)p.depth) * (size_t)p.slot_words + KVC_CHANNEL_HEADER_WORDS;
  int64_t *out = p.out ? kvc_ptr<int64_t *>(p.out) : nullptr;
  int32_t *table = p.table ? kvc_ptr<int32_t *>(p.table) : nullptr;
  int64_t *map = p.map ? kvc_ptr<int64_t *>(p.map) : nullptr;
  const int stride = KVC_DECODE_ENTRY_WORDS(map, 0);
  for (int base = 0; base < n; base += KVC_CH_PASS) {
    const int cnt = n - base < KVC_CH_PASS ? n - base : KVC_CH_PASS;
    const int words = stride * cnt, vecs = (words + 3) / 4;
    /* cache-volatile loads: the ring slot held another step depth steps ago (reading up
     * to 3 words past the step's payload stays inside the slot, which is padded to 16) */
    const uint4 *src = reinterpret_cast<const uint4 *>(w + (size_t)stride * base);
    for (int v = threadIdx.x; v < vecs; v += blockDim.x) reinterpret_cast<uint4 *>(s_words)[v] = __ldcv(src + v);
    __syncthreads();
    for (int i = threadIdx.x; i < cnt; i += blockDim.x)
      kvc_decode_write(s_words + stride * i, base + i, out, table, p.row_stride, 0, map, p.map_len);
    __syncthreads(); /* s_words is refilled by the next pass */
  }
  if (out)
    for (int i = n + threadIdx.x; i < p.max_batch; i += blockDim.x) out[i] = 0;
  if (threadIdx.x == 0) { /* every payload word was read before the last barrier */
    if (s_ok) {
      *applied = s_step;
      kvc_st_relaxed_sys(host_state, s_step);
    } else if (host_state[1] == 0) {
      kvc_st_relaxed_sys(host_state + 1, s_step);
    }
  }
}
