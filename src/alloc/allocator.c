/*
 * allocator.c — SGLang's TokenToKVPoolAllocator (TOKEN kind) and
 * PagedTokenToKVPoolAllocator (PAGED kind) on host metadata: create, alloc(n), frees,
 * free groups, need_sort merging, backup/restore, clear, stats. The batch calls
 * (alloc_extend / alloc_decode) are in allocator_plan.c; the ring and page states in
 * free_list.c.
 *
 * Every mutating call validates all of its input first and only then mutates, so an
 * error leaves the allocator byte-for-byte as it was. Marks set while validating (the
 * MARK bit of a page state) are always cleared before returning.
 *
 * Free groups (spec 4.1, 6.13) are recorded in one array of num_pages entries:
 *
 *   group[]:  [ free() pages, first-seen order ->      <- free_segment() pages ]
 *              0 .. group_free_n-1                     num_pages-group_seg_n .. num_pages-1
 *
 * a page is recorded at most once per group (PAGED free() dedups; anything else
 * recorded twice is misuse), so the two ends never meet.
 */
#include "alloc.h"

#include <string.h>
#if KVC__HAVE_AVX512
#  include <immintrin.h>
#endif

#define ALLOC_ENTRY(a) KVC_CHECK_HANDLE(a, KVC__ALLOCATOR_MAGIC, "alloc", "kvc_allocator")

/* --- Shared internals -------------------------------------------------------------- */

kvc_status kvc__alloc_finish(kvc_allocator *a, const char *fn, kvc_status st) {
  if (st != KVC_OK || !a->check) return st;
  return kvc__fl_audit(a, fn);
}

kvc_status kvc__alloc_batch_reserve(kvc_allocator *a, const char *fn, size_t n) {
  if (n <= a->batch_cap) return KVC_OK;
  size_t cap = KVC__MAX(n, 2 * a->batch_cap);
  if (cap < 64) cap = 64;
  size_t bytes;
  if (!kvc__mul_size(cap, sizeof(int64_t), &bytes))
    return kvc__error(a->ctx, KVC_ERR_INVALID_ARGUMENT, fn, "batch of %zu requests is too large", n);
  int64_t *last = kvc__malloc(a->ctx, bytes), *pages = kvc__malloc(a->ctx, bytes);
  if (!last || !pages) {
    kvc__free(a->ctx, last);
    kvc__free(a->ctx, pages);
    return kvc__error(a->ctx, KVC_ERR_HOST_OOM, fn, "per-batch work space for %zu requests", n);
  }
  kvc__free(a->ctx, a->b_last);
  kvc__free(a->ctx, a->b_pages);
  a->b_last = last;
  a->b_pages = pages;
  a->batch_cap = cap;
  return KVC_OK;
}

/* --- Create / destroy -------------------------------------------------------------- */

static void alloc_free_all(kvc_context *ctx, kvc_allocator *a) {
  kvc__ring_fini(ctx, &a->ring);
  kvc__free(ctx, a->state);
  kvc__free(ctx, a->deferred);
  kvc__free(ctx, a->group);
  kvc__free(ctx, a->saved);
  kvc__free(ctx, a->tmp_a);
  kvc__free(ctx, a->tmp_b);
  kvc__free(ctx, a->b_last);
  kvc__free(ctx, a->b_pages);
  kvc__free(ctx, a->scratch);
  kvc__free(ctx, a);
}

kvc_status kvc_allocator_create(kvc_context *ctx, const kvc_allocator_config *config, kvc_allocator **out) {
  KVC_API_ENTRY();
  kvc_allocator_config c = KVC_ALLOCATOR_CONFIG_INIT;
  KVC__CREATE_CONFIG(ctx, config, out, &c, kvc_allocator_config);
  KVC_RETURN_IF(c.kind != KVC_ALLOCATOR_TOKEN && c.kind != KVC_ALLOCATOR_PAGED, ctx, KVC_ERR_INVALID_ARGUMENT,
                "kind %d is not TOKEN or PAGED", (int)c.kind);
  KVC_RETURN_IF(c.page_size < 1, ctx, KVC_ERR_INVALID_ARGUMENT, "page_size %d must be >= 1", c.page_size);
  KVC_RETURN_IF(c.kind == KVC_ALLOCATOR_TOKEN && c.page_size != 1, ctx, KVC_ERR_INVALID_ARGUMENT,
                "page_size %d: the TOKEN kind has page_size 1", c.page_size);
  KVC_RETURN_IF(c.flags & ~(uint32_t)KVC_ALLOCATOR_NEED_SORT, ctx, KVC_ERR_INVALID_ARGUMENT, "unknown flags 0x%x",
                c.flags);
  KVC_RETURN_IF(c.size < c.page_size, ctx, KVC_ERR_INVALID_ARGUMENT, "size %lld must hold at least one page of %d",
                (long long)c.size, c.page_size);
  /* Slot ids (page 0 included) must fit the int32 req_to_token table. */
  KVC_RETURN_IF(c.size > (int64_t)INT32_MAX - c.page_size, ctx, KVC_ERR_INVALID_ARGUMENT,
                "size %lld + page_size %d must be < 2^31", (long long)c.size, c.page_size);

  kvc_status st = KVC_OK;
  kvc_allocator *a = kvc__calloc(ctx, 1, sizeof *a);
  KVC_RETURN_IF(!a, ctx, KVC_ERR_HOST_OOM, "allocator struct");
  a->ctx = ctx;
  a->kind = c.kind;
  a->ps = c.page_size;
  a->need_sort = (c.flags & KVC_ALLOCATOR_NEED_SORT) != 0;
  a->check = kvc_context_check_mode(ctx) != 0;
  a->simd = kvc__simd_avx512(ctx);
  /* AMD only: on the H200's Intel host the step made free 4096 (token) 30-40% slower in
   * both orders of one process, on the AMD development VM 11-25% faster (RESULTS, run 18). */
  a->simd_free = c.kind == KVC_ALLOCATOR_TOKEN && a->simd && kvc__cpu_amd();
  a->num_pages = c.size / c.page_size;
  a->ps_shift = (c.page_size & (c.page_size - 1)) ? -1 : __builtin_ctz((unsigned)c.page_size);
  KVC_CHECK_GOTO(kvc__ring_init(ctx, __func__, &a->ring, a->num_pages), st, fail);
  const size_t np = (size_t)a->num_pages, w = sizeof(uint32_t);
  /* TOKEN: padded to 2^k states for token_free_fast's range test. PAGED never takes that
   * path and keeps num_pages + 1 (a padded array moved its free 4096 by +3%: kvc_bench_ab). */
  a->state_mask = (uint64_t)np;
  if (c.kind == KVC_ALLOCATOR_TOKEN)
    for (a->state_mask = 1; a->state_mask < (uint64_t)np;) a->state_mask = 2 * a->state_mask + 1;
  a->state = kvc__malloc(ctx, (size_t)a->state_mask + 1);
  a->deferred = kvc__malloc(ctx, np * w);
  a->group = kvc__malloc(ctx, np * w);
  a->saved = kvc__malloc(ctx, np * w);
  a->tmp_a = kvc__malloc(ctx, np * w);
  a->tmp_b = kvc__malloc(ctx, np * w);
  a->scratch = kvc__malloc(ctx, KVC__PARAM_SCRATCH_BYTES);
  KVC_FAIL_GOTO(!a->state || !a->deferred || !a->group || !a->saved || !a->tmp_a || !a->tmp_b || !a->scratch, ctx, st,
                KVC_ERR_HOST_OOM, fail, "host metadata for %lld pages", (long long)a->num_pages);
  KVC_CHECK_GOTO(kvc__alloc_batch_reserve(a, __func__, 64), st, fail);
  memset(a->state + np + 1, KVC__PG_RESERVED, (size_t)a->state_mask - np); /* never written again */
  kvc__fl_reset(a);
  a->magic = KVC__ALLOCATOR_MAGIC;
  *out = a;
  return KVC_OK;
fail:
  alloc_free_all(ctx, a);
  return st;
}

void kvc_allocator_destroy(kvc_allocator *a) {
  if (!a || a->magic != KVC__ALLOCATOR_MAGIC) return;
  a->magic = KVC__DEAD_MAGIC;
  alloc_free_all(a->ctx, a);
}

/* --- Queries ------------------------------------------------------------------------ */

int64_t kvc_allocator_available_size(const kvc_allocator *a) {
  if (!a || a->magic != KVC__ALLOCATOR_MAGIC) return 0;
  return (a->ring.count + a->deferred_count) * a->ps;
}

int64_t kvc_allocator_size(const kvc_allocator *a) {
  return (a && a->magic == KVC__ALLOCATOR_MAGIC) ? a->num_pages * a->ps : 0;
}

int32_t kvc_allocator_page_size(const kvc_allocator *a) { return (a && a->magic == KVC__ALLOCATOR_MAGIC) ? a->ps : 0; }

kvc_status kvc_allocator_get_stats(const kvc_allocator *a, kvc_allocator_stats *out) {
  KVC_API_ENTRY();
  ALLOC_ENTRY(a);
  KVC_RETURN_IF(!out, a->ctx, KVC_ERR_INVALID_ARGUMENT, "out is NULL");
  out->num_pages = a->num_pages;
  out->free_pages = a->ring.count;
  out->deferred_pages = a->deferred_count;
  out->held_pages = a->num_pages - a->ring.count - a->deferred_count;
  out->group_pending = a->group_free_n + a->group_seg_n;
  out->merges = a->merges;
  return KVC_OK;
}

kvc_status kvc_allocator_check(const kvc_allocator *a) {
  KVC_API_ENTRY();
  ALLOC_ENTRY(a);
  return kvc__fl_audit(a, __func__);
}

/* --- alloc(n) ----------------------------------------------------------------------- */

kvc_status kvc_allocator_alloc(kvc_allocator *a, int64_t n, int64_t *out_slots) {
  KVC_API_ENTRY();
  ALLOC_ENTRY(a);
  KVC_RETURN_IF(n < 0, a->ctx, KVC_ERR_INVALID_ARGUMENT, "n = %lld is negative", (long long)n);
  if (n == 0) return KVC_OK;
  KVC_RETURN_IF(!out_slots, a->ctx, KVC_ERR_INVALID_ARGUMENT, "out_slots is NULL for n = %lld", (long long)n);
  const int64_t ps = a->ps;
  KVC_RETURN_IF(n % ps != 0, a->ctx, KVC_ERR_INVALID_ARGUMENT, "n = %lld is not a multiple of page_size %lld",
                (long long)n, (long long)ps);
  const int64_t np = n / ps;
  /* SGLang merges before it finds a shortage and keeps the merge: so do we (the header
   * documents this one change a refused call makes), or later slots would differ. */
  if (np > a->ring.count) kvc__fl_merge(a);
  if (np > a->ring.count)
    return kvc__alloc_finish(a, __func__,
                             kvc__error(a->ctx, KVC_ERR_OUT_OF_SLOTS, __func__, "%lld pages needed, %lld free",
                                        (long long)np, (long long)a->ring.count));
  for (int64_t i = 0; i < np; i++) {
    int64_t base = (int64_t)kvc__ring_at(&a->ring, i) * ps;
    for (int64_t k = 0; k < ps; k++) out_slots[i * ps + k] = base + k;
  }
  kvc__fl_pop(a, np);
  return kvc__alloc_finish(a, __func__, KVC_OK);
}

/* --- Frees -------------------------------------------------------------------------- */

static void unmark(kvc_allocator *a, const uint32_t *pages, int64_t n) {
  for (int64_t i = 0; i < n; i++) a->state[pages[i]] &= (uint8_t)~KVC__PG_MARK;
}

/* Page of one freed slot, or 0 with a MISUSE recorded (padding page or out of range). */
static uint32_t checked_page(kvc_allocator *a, const char *fn, const char *what, size_t i, int64_t slot,
                             kvc_status *st) {
  const int64_t ps = a->ps;
  if (slot < ps || slot >= (a->num_pages + 1) * ps) {
    *st = kvc__error(a->ctx, KVC_ERR_MISUSE, fn, "%s[%zu] = %lld is %s", what, i, (long long)slot,
                     (slot >= 0 && slot < ps) ? "in the padding page 0" : "out of range");
    return 0;
  }
  return (uint32_t)(slot / ps);
}

/* --- PAGED fast path for rows of whole pages ---------------------------------------- */

/* A chunk of ps slots lies in the page of its first slot s0 iff every slot agrees with s0
 * above the low `shift` bits: OR(slot ^ s0) >> shift == 0 (a negative slot differs from
 * s0 >= 0 in the sign bit). This test is most of a free's time (4096 slots for a
 * 4096-token request), so:
 *   - XOR against s0 and shift once, not a shift per slot;
 *   - explicit two-lane vectors (GNU C vector extension: SSE2 / NEON, or scalar pairs)
 *     with two accumulators: GCC turns a scalar OR reduction into one dependent chain,
 *     a cycle per slot, and does not vectorise it once the short loop is unrolled. */
typedef uint64_t u64x2 __attribute__((vector_size(16)));

/* OR over the chunk's slots of slot ^ s0, in two lanes; n a multiple of 4. memcpy is the
 * alignment- and aliasing-safe vector load. */
static inline u64x2 chunk_xor(const int64_t *v, int64_t n, uint64_t s0) {
  const u64x2 s = {s0, s0};
  u64x2 d0 = {0, 0}, d1 = {0, 0};
  for (int64_t j = 0; j < n; j += 4) {
    u64x2 x, y;
    memcpy(&x, v + j, sizeof x);
    memcpy(&y, v + j + 2, sizeof y);
    d0 |= x ^ s;
    d1 |= y ^ s;
  }
  return d0 | d1;
}

/* Consumes chunks of ps slots from slots[0] while they are whole pages in range that are
 * HELD (appended to v and marked) or already seen in this call or group (skipped), and
 * returns the number of slots consumed. v[0:*k) is then exactly what the slow loop would
 * have recorded for them, so the slow loop carries on from there (and reports any error).
 * Always inlined with a constant ps (see free_whole_pages): the chunk test unrolls fully
 * and the loop keeps its few variables in registers. */
static inline __attribute__((always_inline)) size_t whole_pages(kvc_allocator *a, const int64_t *slots, size_t n,
                                                                uint32_t *v, int64_t *k_io, const int64_t ps,
                                                                const int shift) {
  uint8_t *const state = a->state;
  const uint64_t slot_span = (uint64_t)(a->num_pages * ps);
  int64_t k = *k_io;
  size_t i = 0;
  for (; i + (size_t)ps <= n; i += (size_t)ps) {
    const uint64_t s0 = (uint64_t)slots[i];
    if (s0 - (uint64_t)ps >= slot_span) break; /* page 0, negative or past the end */
    u64x2 diff = {0, 0};
    if (ps % 4 == 0) {
      diff = chunk_xor(slots + i, ps, s0);
    } else {
      for (int64_t j = 0; j < ps; j++) diff[0] |= (uint64_t)slots[i + (size_t)j] ^ s0;
    }
    if ((diff[0] | diff[1]) >> shift) break;
    const uint32_t p = (uint32_t)(s0 >> shift);
    const uint8_t s = state[p];
    if (s & (KVC__PG_MARK | KVC__PG_GFREE)) continue; /* seen in this call / group: dedup */
    if ((s & (KVC__PG_STATE | KVC__PG_GSEG)) != KVC__PG_HELD) break;
    state[p] = (uint8_t)(s | KVC__PG_MARK);
    v[k++] = p;
  }
  *k_io = k;
  return i;
}

/* The usual page sizes get their own copy of the loop, other powers of two > 1 a generic
 * one. */
static size_t free_whole_pages(kvc_allocator *a, const int64_t *slots, size_t n, uint32_t *v, int64_t *k_io) {
  switch (a->ps) {
  case 16: return whole_pages(a, slots, n, v, k_io, 16, 4);
  case 32: return whole_pages(a, slots, n, v, k_io, 32, 5);
  case 64: return whole_pages(a, slots, n, v, k_io, 64, 6);
  case 128: return whole_pages(a, slots, n, v, k_io, 128, 7);
  default: return whole_pages(a, slots, n, v, k_io, a->ps, a->ps_shift);
  }
}

/* --- TOKEN fast path: validate and release in one pass ----------------------------- */

/* A TOKEN free outside a group and without need_sort appends its slots to the back of the
 * ring in call order, which lets validation and release share one pass: a slot is valid
 * iff its state is exactly HELD (MARK, GFREE and GSEG all unset: no earlier listing in
 * this call, no open group), and it is then set FREE at once and written past the ring's
 * tail. A repeat later in the call then reads FREE and fails like any double free. The
 * entries past the tail are not in the ring until count moves, and there are at most as
 * many as there were HELD slots (each was HELD when written), so they never reach a live
 * entry. On a failure the slots of [0, i) were all HELD: they become HELD again, and the
 * caller re-runs the checked loop, which reports the error exactly as before.
 *
 * Why: the checked loop marks in one pass and releases in a second one, through a->tmp_a,
 * with the allocator's fields reloaded after every byte store (~40 instructions per slot;
 * the issue 20 free of 4096 slots was 164 k instructions). This loop keeps everything in
 * locals: about 10 instructions per slot. Returns the slots consumed: n on success.
 *
 * `expect` is the state a slot must have: HELD for kvc_allocator_free, HELD | CACHED for
 * a bound radix cache's eviction (kvc__alloc_free_cached), whose check is then the same
 * one pass, with its cache mark cleared by the same store. Both call sites pass a
 * constant, and the function is inlined into each, so the plain free's code is as it was. */
_Static_assert(KVC__PG_FREE == 0 && KVC__PG_HELD != 0, "token_free_fast: HELD ^ HELD must be FREE");

#if KVC__HAVE_AVX512
/* Eight slots a step for both TOKEN frees, where the CPU has AVX-512 (a->simd_free). A step is
 * written only when all eight pass: each slot is in [0, state_mask] (one unsigned compare
 * of the vector; the padding reads RESERVED and slot 0 page 0's state, neither HELD), no
 * slot repeats inside the step (vpconflictq), and every state is exactly HELD. Then the
 * narrowed ids go to out[] in one store and each state becomes `to`. A repeat across
 * steps reads the `to` an earlier step wrote, which is not HELD. The first step that
 * fails is left as it was, for the caller's scalar loops to re-run from there (and, for a
 * bad slot, for the checked loop to report): the states, the ids written and the count
 * consumed are those the scalar loops would have had.
 *
 * Why this shape: the scalar step must store each state before it loads the next, to see
 * a repeat; the conflict test makes that order unneeded, so the eight loads go first and
 * the slots stay in registers for the stores (about 5 instructions a slot against 10).
 * Measured on a Zen 5 host (bench/RESULTS.md, session 11): a 16-lane dword gather of the
 * states made free 4096 (token) 70-75% slower, its 4-byte windows waiting on the previous
 * step's byte stores when slots descend (windows below the slot fixed that case and were
 * then no faster than the scalar step); against the scalar loops, sixteen a step with
 * scalar loads was 8-20% faster (medians), this one 11-25%. Returns the slots consumed, a
 * multiple of 8. */
KVC__TARGET_AVX512 static size_t token_step8(uint8_t *state, uint32_t *out, const int64_t *slots, size_t m,
                                             uint64_t lim, unsigned expect, uint8_t to) {
  const __m512i vlim = _mm512_set1_epi64((long long)lim);
  size_t i = 0;
  for (; i + 8 <= m; i += 8) {
    const __m512i v = _mm512_loadu_si512(slots + i);
    if (_mm512_cmpgt_epu64_mask(v, vlim)) break; /* negative or past the padding */
    const __m512i rep = _mm512_conflict_epi64(v);
    const uint64_t s0 = (uint64_t)slots[i], s1 = (uint64_t)slots[i + 1], s2 = (uint64_t)slots[i + 2];
    const uint64_t s3 = (uint64_t)slots[i + 3], s4 = (uint64_t)slots[i + 4], s5 = (uint64_t)slots[i + 5];
    const uint64_t s6 = (uint64_t)slots[i + 6], s7 = (uint64_t)slots[i + 7];
    const unsigned bad =
        (((state[s0] ^ expect) | (state[s1] ^ expect)) | ((state[s2] ^ expect) | (state[s3] ^ expect))) |
        (((state[s4] ^ expect) | (state[s5] ^ expect)) | ((state[s6] ^ expect) | (state[s7] ^ expect)));
    if (bad | _mm512_test_epi64_mask(rep, rep)) break;
    _mm256_storeu_si256((__m256i *)(void *)(out + i), _mm512_cvtepi64_epi32(v));
    state[s0] = to, state[s1] = to, state[s2] = to, state[s3] = to;
    state[s4] = to, state[s5] = to, state[s6] = to, state[s7] = to;
  }
  return i;
}
#endif

static inline __attribute__((always_inline)) size_t token_free_fast(kvc_allocator *a, const int64_t *slots, size_t n,
                                                                    const unsigned expect) {
  uint8_t *const state = a->state;
  uint32_t *const buf = a->ring.buf;
  const uint64_t mask = a->ring.mask, tail = a->ring.head + (uint64_t)a->ring.count;
  const uint64_t np = (uint64_t)a->num_pages;
  size_t i = 0;
  /* Ids are written past the tail as they are validated, so a free that fails halfway
   * leaves junk there. That is harmless unless a live backup still needs the ring's
   * image: entries popped since the backup sit behind the head, and once the ring has
   * wrapped the slots past the tail are those entries, which restore brings back (the
   * fuzzer found a restore after a refused free handing out a slot twice). Then the ids
   * go in only after the whole call validated. */
  const bool image_live = kvc__alloc_ring_image_live(a);
  /* Four slots a step, one branch for their range checks and one for their states, the
   * ids written without the ring's wrap mask up to where it wraps: the per-slot loop below
   * is ~14 instructions a slot with two branches, and a radix eviction at page 1 frees
   * ~1,100-2,300 slots a call. Each state is read after the previous slot's store, so a
   * repeat inside the four still reads FREE; when any of the four fails, their bytes are
   * put back in reverse order (exactly as they were, a repeat included) and the per-slot
   * loop re-runs them to find the failing one.
   *
   * The range test is one OR of the four slots against state_mask (2^k - 1 >= num_pages;
   * a negative slot has its top bits set): a slot in (num_pages, state_mask] passes it
   * but reads a RESERVED padding byte, as slot 0 reads page 0's, so the state test fails
   * the step and the per-slot loop reports it as before. Each byte is XORed with HELD in
   * place: a HELD byte becomes FREE (0), and the value written is the one tested, so the
   * test is an OR of the four and nothing is copied; anything else leaves a non-zero
   * value, and a repeat inside the four reads the FREE its first listing wrote. XOR
   * undoes itself, so the put-back XORs the four again in reverse order. Against four
   * range compares and a test that copied each byte before its XOR (kept for the
   * put-back): ~10 instructions a slot instead of ~13 (objdump of the loop). */
  if (!image_live) {
    const uint64_t at = tail & mask, room = mask + 1 - at, lim = a->state_mask;
    const size_t m = n < room ? n : (size_t)room;
    uint32_t *const w = buf + at;
#if KVC__HAVE_AVX512
    if (a->simd_free) i = token_step8(state, w, slots, m, lim, expect, KVC__PG_FREE);
#endif
    for (; i + 4 <= m; i += 4) {
      const uint64_t s0 = (uint64_t)slots[i], s1 = (uint64_t)slots[i + 1];
      const uint64_t s2 = (uint64_t)slots[i + 2], s3 = (uint64_t)slots[i + 3];
      if (((s0 | s1) | (s2 | s3)) > lim) break; /* negative or past the padding */
      const unsigned x0 = state[s0] ^ expect;
      state[s0] = (uint8_t)x0;
      const unsigned x1 = state[s1] ^ expect;
      state[s1] = (uint8_t)x1;
      const unsigned x2 = state[s2] ^ expect;
      state[s2] = (uint8_t)x2;
      const unsigned x3 = state[s3] ^ expect;
      state[s3] = (uint8_t)x3;
      if ((x0 | x1) | (x2 | x3)) {
        state[s3] ^= (uint8_t)expect;
        state[s2] ^= (uint8_t)expect;
        state[s1] ^= (uint8_t)expect;
        state[s0] ^= (uint8_t)expect;
        break;
      }
      w[i] = (uint32_t)s0;
      w[i + 1] = (uint32_t)s1;
      w[i + 2] = (uint32_t)s2;
      w[i + 3] = (uint32_t)s3;
    }
  }
  if (!image_live) {
    for (; i < n; i++) {
      const uint64_t slot = (uint64_t)slots[i];
      if (slot - 1 >= np || state[slot] != expect) break; /* slot 0, negative, past the end, not held */
      state[slot] = KVC__PG_FREE;
      buf[(tail + i) & mask] = (uint32_t)slot;
    }
  } else {
    for (; i < n; i++) {
      const uint64_t slot = (uint64_t)slots[i];
      if (slot - 1 >= np || state[slot] != expect) break;
      state[slot] = KVC__PG_FREE;
    }
    if (i == n)
      for (size_t j = 0; j < n; j++) buf[(tail + j) & mask] = (uint32_t)slots[j];
  }
  if (i == n) {
    a->ring.count += (int64_t)n;
    return n;
  }
  for (size_t j = 0; j < i; j++) state[slots[j]] = (uint8_t)expect;
  return i;
}

/* A TOKEN free inside an open group records its slots: each must be exactly HELD (no
 * MARK, GFREE or GSEG: not listed earlier in this call or group), becomes HELD | GFREE
 * and is appended to the group's free part, in call order. That is what the checked loop
 * and kvc__alloc_release do for a TOKEN slot, in one pass over locals instead of two with
 * the fields reloaded after each byte store: about 10 instructions a slot instead of ~40
 * (a flow releasing one 4096-token request spent 172 k of its 248 k instructions there;
 * bench/RESULTS.md session 10). A repeat later in the call reads HELD | GFREE and stops
 * the pass. On a failure at i the slots of [0, i) are put back to HELD, nothing is
 * recorded, and the caller runs the checked loop, which reports the error as before.
 * Returns the slots consumed: n on success. */
static size_t token_group_free_fast(kvc_allocator *a, const int64_t *slots, size_t n) {
  uint8_t *const state = a->state;
  uint32_t *const g = a->group + a->group_free_n;
  const uint64_t np = (uint64_t)a->num_pages;
  const unsigned rec = KVC__PG_HELD | KVC__PG_GFREE;
  size_t i = 0;
#if KVC__HAVE_AVX512
  if (a->simd_free) i = token_step8(state, g, slots, n, a->state_mask, KVC__PG_HELD, (uint8_t)rec);
#endif
  /* Four slots a step, as token_free_fast: a repeat inside the four reads the state its
   * earlier copy wrote; a failing step puts its bytes back in reverse order. The step is
   * written out twice on purpose: one always-inline helper for both loops (token_free_fast's
   * XOR in place, with the written state a parameter) compiled to other register choices
   * and measured slower in both, free 4096 (token) +7-10% and flow release 4096 at page 1
   * +4-6% (kvc_bench_ab, same process, both orders; session 10 review). */
  for (; i + 4 <= n; i += 4) {
    const uint64_t s0 = (uint64_t)slots[i], s1 = (uint64_t)slots[i + 1];
    const uint64_t s2 = (uint64_t)slots[i + 2], s3 = (uint64_t)slots[i + 3];
    if (((s0 - 1 >= np) | (s1 - 1 >= np)) | ((s2 - 1 >= np) | (s3 - 1 >= np))) break;
    const unsigned t0 = state[s0];
    state[s0] = (uint8_t)rec;
    const unsigned t1 = state[s1];
    state[s1] = (uint8_t)rec;
    const unsigned t2 = state[s2];
    state[s2] = (uint8_t)rec;
    const unsigned t3 = state[s3];
    state[s3] = (uint8_t)rec;
    if (((t0 ^ KVC__PG_HELD) | (t1 ^ KVC__PG_HELD)) | ((t2 ^ KVC__PG_HELD) | (t3 ^ KVC__PG_HELD))) {
      state[s3] = (uint8_t)t3;
      state[s2] = (uint8_t)t2;
      state[s1] = (uint8_t)t1;
      state[s0] = (uint8_t)t0;
      break;
    }
    g[i] = (uint32_t)s0;
    g[i + 1] = (uint32_t)s1;
    g[i + 2] = (uint32_t)s2;
    g[i + 3] = (uint32_t)s3;
  }
  for (; i < n; i++) {
    const uint64_t slot = (uint64_t)slots[i];
    if (slot - 1 >= np || state[slot] != KVC__PG_HELD) break;
    state[slot] = (uint8_t)rec;
    g[i] = (uint32_t)slot;
  }
  if (i == n) {
    a->group_free_n += (int64_t)n;
    return n;
  }
  for (size_t j = 0; j < i; j++) state[slots[j]] = KVC__PG_HELD;
  return i;
}

kvc_status kvc__alloc_free_validate(kvc_allocator *a, const char *fn, const char *what, const int64_t *slots, size_t n,
                                    uint32_t *v, int64_t *k_io, size_t *bad) {
  const bool paged = a->kind == KVC_ALLOCATOR_PAGED;
  int64_t k = *k_io;
  kvc_status st = KVC_OK;
  const int64_t ps = a->ps, slot_span = a->num_pages * ps;
  const int shift = a->ps_shift;
  uint32_t prev = 0;
  size_t i = 0;
  if (paged && shift >= 0 && ps > 1) i = free_whole_pages(a, slots, n, v, &k); /* rows of whole pages */
  for (; i < n; i++) {
    const int64_t slot = slots[i];
    uint32_t p;
    if (((uint64_t)slot - (uint64_t)ps) >= (uint64_t)slot_span) { /* page 0, negative or past the end */
      checked_page(a, fn, what, i, slot, &st);
      break;
    }
    p = (uint32_t)(shift >= 0 ? slot >> shift : slot / ps);
    if (paged && p == prev) continue; /* the common case: the next slot of the same page */
    prev = p;
    uint8_t s = a->state[p];
    if (s & KVC__PG_MARK) {
      if (paged) continue; /* several slots of one page: released once */
      st = kvc__error(a->ctx, KVC_ERR_MISUSE, fn, "%s[%zu] = %lld is listed twice", what, i, (long long)slots[i]);
      break;
    }
    if (paged && (s & KVC__PG_GFREE)) continue; /* already recorded by this group: dedup */
    if (s & KVC__PG_CACHED) {
      st = kvc__error(a->ctx, KVC_ERR_MISUSE, fn,
                      "%s[%zu] = %lld: slot %u is held by the radix cache bound to this allocator (evict it there)",
                      what, i, (long long)slots[i], p);
      break;
    }
    if ((s & KVC__PG_STATE) != KVC__PG_HELD || (s & (KVC__PG_GFREE | KVC__PG_GSEG))) {
      st = kvc__error(a->ctx, KVC_ERR_MISUSE, fn, "%s[%zu] = %lld: %s %u is %s (double free?)", what, i,
                      (long long)slots[i], paged ? "page" : "slot", p,
                      (s & (KVC__PG_GFREE | KVC__PG_GSEG)) ? "already freed in this group" : "not held");
      break;
    }
    a->state[p] = (uint8_t)(s | KVC__PG_MARK);
    v[k++] = p;
  }
  *k_io = k;
  if (bad) *bad = i;
  return st;
}

kvc_status kvc__alloc_release(kvc_allocator *a, const char *fn, uint32_t *v, int64_t k) {
  a->epoch++;
  /* The marks are cleared by the state writes below (no separate pass). */
  if (a->in_group) {
    uint8_t *const state = a->state; /* locals: byte stores may alias the fields */
    uint32_t *const g = a->group + a->group_free_n;
    for (int64_t j = 0; j < k; j++) {
      state[v[j]] = (uint8_t)((state[v[j]] & ~KVC__PG_MARK) | KVC__PG_GFREE);
      g[j] = v[j];
    }
    a->group_free_n += k;
  } else {
    if (a->kind == KVC_ALLOCATOR_PAGED) kvc__fl_sort(a, v, k);
    kvc__fl_release(a, v, k);
  }
  return kvc__alloc_finish(a, fn, KVC_OK);
}

static kvc_status free_impl(kvc_allocator *a, const char *fn, const int64_t *slots, size_t n) {
  if (n == 0) return KVC_OK;
  if (!slots) return kvc__error(a->ctx, KVC_ERR_INVALID_ARGUMENT, fn, "slots is NULL for n = %zu", n);
  if (a->kind == KVC_ALLOCATOR_TOKEN && !a->in_group && !a->need_sort &&
      token_free_fast(a, slots, n, KVC__PG_HELD) == n) {
    a->epoch++;
    return kvc__alloc_finish(a, fn, KVC_OK);
  }
  if (a->kind == KVC_ALLOCATOR_TOKEN && a->in_group && token_group_free_fast(a, slots, n) == n) {
    a->epoch++;
    return kvc__alloc_finish(a, fn, KVC_OK);
  }
  uint32_t *v = a->tmp_a;
  int64_t k = 0;
  const kvc_status st = kvc__alloc_free_validate(a, fn, "slots", slots, n, v, &k, NULL);
  if (st != KVC_OK) {
    unmark(a, v, k);
    return st;
  }
  return kvc__alloc_release(a, fn, v, k);
}

/* The slots of a bound radix cache's victims (alloc.h). The common case (no open group,
 * nothing deferred) is token_free_fast expecting HELD | CACHED: one pass that checks, frees
 * and clears the cache's mark. Otherwise each slot's mark is cleared first (all must be
 * exactly HELD | CACHED) and free_impl releases them as any free of HELD slots, which keeps
 * the group's records and the deferred list exactly as kvc_allocator_free would; when that
 * free fails, the marks are put back. Nothing changes on a failure. */
kvc_status kvc__alloc_free_cached(kvc_allocator *a, const char *fn, const int64_t *slots, size_t n) {
  if (n == 0) return KVC_OK;
  const unsigned cached = KVC__PG_HELD | KVC__PG_CACHED;
  if (!a->in_group && !a->need_sort && token_free_fast(a, slots, n, cached) == n) {
    a->epoch++;
    return kvc__alloc_finish(a, fn, KVC_OK);
  }
  uint8_t *const state = a->state;
  const uint64_t np = (uint64_t)a->num_pages;
  size_t i = 0;
  for (; i < n; i++) {
    const uint64_t slot = (uint64_t)slots[i];
    if (slot - 1 >= np || state[slot] != cached) break; /* a repeat reads the HELD its first listing left */
    state[slot] = KVC__PG_HELD;
  }
  kvc_status st = KVC_OK;
  if (i < n)
    st = kvc__error(a->ctx, KVC_ERR_MISUSE, fn,
                    "slot %lld (victim slot %zu of %zu) is not held by both this allocator and its bound radix cache "
                    "(freed behind the cache's back, or listed twice)",
                    (long long)slots[i], i, n);
  else st = free_impl(a, fn, slots, n);
  if (st != KVC_OK)
    for (size_t j = 0; j < i; j++) state[slots[j]] = (uint8_t)cached;
  return st;
}

kvc_status kvc_allocator_free(kvc_allocator *a, const int64_t *slots, size_t n) {
  KVC_API_ENTRY();
  ALLOC_ENTRY(a);
  return free_impl(a, __func__, slots, n);
}

kvc_status kvc_allocator_free_segment(kvc_allocator *a, const int64_t *slots, size_t n, int64_t start_pos) {
  KVC_API_ENTRY();
  ALLOC_ENTRY(a);
  KVC_RETURN_IF(start_pos < 0 || start_pos % a->ps != 0, a->ctx, KVC_ERR_INVALID_ARGUMENT,
                "start_pos %lld is not a non-negative multiple of page_size %d", (long long)start_pos, a->ps);
  if (a->kind == KVC_ALLOCATOR_TOKEN) {
    /* SGLang's base free_segment: after the alignment assert it is plain free(). */
    return free_impl(a, __func__, slots, n);
  }
  if (n == 0) return KVC_OK;
  KVC_RETURN_IF(!slots, a->ctx, KVC_ERR_INVALID_ARGUMENT, "slots is NULL for n = %zu", n);
  const size_t ps = (size_t)a->ps;
  uint32_t *v = a->tmp_a;
  int64_t k = 0;
  kvc_status st = KVC_OK;
  for (size_t c = 0; c < n && st == KVC_OK; c += ps) {
    uint32_t p = checked_page(a, __func__, "slots", c, slots[c], &st);
    if (!p) break;
    /* A row's tokens inside one page are consecutive, so every slot of the chunk must
     * lie in the representative's page; anything else is not a row segment. */
    size_t end = KVC__MIN(n, c + ps);
    for (size_t j = c + 1; j < end; j++) {
      if (slots[j] < 0 || slots[j] / (int64_t)ps != (int64_t)p) {
        st = kvc__error(a->ctx, KVC_ERR_MISUSE, __func__,
                        "slots[%zu] = %lld is not in page %u of slots[%zu]: not a page-aligned row segment", j,
                        (long long)slots[j], p, c);
        break;
      }
    }
    if (st != KVC_OK) break;
    uint8_t s = a->state[p];
    if ((s & KVC__PG_MARK) || (s & KVC__PG_STATE) != KVC__PG_HELD || (s & (KVC__PG_GFREE | KVC__PG_GSEG))) {
      st = kvc__error(a->ctx, KVC_ERR_MISUSE, __func__, "slots[%zu] = %lld: page %u is %s", c, (long long)slots[c], p,
                      (s & KVC__PG_MARK)                     ? "listed twice in this segment"
                      : (s & (KVC__PG_GFREE | KVC__PG_GSEG)) ? "already freed in this group"
                                                             : "not held (double free?)");
      break;
    }
    a->state[p] = (uint8_t)(s | KVC__PG_MARK);
    v[k++] = p;
  }
  unmark(a, v, k);
  if (st != KVC_OK) return st;
  a->epoch++;
  if (a->in_group) {
    for (int64_t i = 0; i < k; i++) {
      a->state[v[i]] |= KVC__PG_GSEG;
      a->group[a->num_pages - 1 - a->group_seg_n++] = v[i];
    }
  } else {
    kvc__fl_release(a, v, k);
  }
  return kvc__alloc_finish(a, __func__, KVC_OK);
}

/* --- Groups ------------------------------------------------------------------------- */

kvc_status kvc_allocator_free_group_begin(kvc_allocator *a) {
  KVC_API_ENTRY();
  ALLOC_ENTRY(a);
  KVC_RETURN_IF(a->in_group, a->ctx, KVC_ERR_MISUSE, "a free group is already open (groups do not nest)");
  a->in_group = true;
  a->group_free_n = a->group_seg_n = 0;
  a->epoch++;
  return kvc__alloc_finish(a, __func__, KVC_OK);
}

kvc_status kvc_allocator_free_group_end(kvc_allocator *a) {
  KVC_API_ENTRY();
  ALLOC_ENTRY(a);
  KVC_RETURN_IF(!a->in_group, a->ctx, KVC_ERR_MISUSE, "no free group is open");
  a->epoch++;
  a->in_group = false;
  uint32_t *g = a->group;
  const int64_t nf = a->group_free_n, ns = a->group_seg_n;
  a->group_free_n = a->group_seg_n = 0;
  /* One free() over the concatenation: PAGED sorts (unique already), TOKEN keeps order.
   * The release writes every recorded page's state (FREE, or DEFERRED with need_sort),
   * which clears GFREE; the sort does not read the states. */
  if (a->kind == KVC_ALLOCATOR_PAGED) kvc__fl_sort(a, g, nf);
  kvc__fl_release(a, g, nf);
  if (ns) {
    uint32_t *v = a->tmp_a;
    for (int64_t i = 0; i < ns; i++) {
      v[i] = g[a->num_pages - 1 - i];
      a->state[v[i]] &= (uint8_t)~KVC__PG_GSEG;
    }
    kvc__fl_release(a, v, ns);
  }
  return kvc__alloc_finish(a, __func__, KVC_OK);
}

kvc_status kvc_allocator_merge_and_sort_free(kvc_allocator *a) {
  KVC_API_ENTRY();
  ALLOC_ENTRY(a);
  kvc__fl_merge(a);
  return kvc__alloc_finish(a, __func__, KVC_OK);
}

/* --- Backup / restore --------------------------------------------------------------- */

/* Whether an id popped since the backup (ring positions [from, to)) is CACHED. */
static bool restore_pops_cached(const kvc_allocator *a, uint64_t from, uint64_t to) {
  if (!a->cache_owner) return false;
  for (uint64_t h = from; h != to; h++)
    if (a->state[a->ring.buf[h & a->ring.mask]] & KVC__PG_CACHED) return true;
  return false;
}

static uint64_t alloc_tag(const kvc_allocator *a) { return KVC__ALLOCATOR_MAGIC ^ (uint64_t)(uintptr_t)a; }

kvc_status kvc_allocator_backup_state(kvc_allocator *a, kvc_allocator_state *out) {
  KVC_API_ENTRY();
  ALLOC_ENTRY(a);
  KVC_RETURN_IF(!out, a->ctx, KVC_ERR_INVALID_ARGUMENT, "out is NULL");
  a->backup_serial++;
  a->backup_live = true;
  a->backup_saved = false;
  a->b_head = a->ring.head;
  a->b_count = a->ring.count;
  a->b_deferred = a->deferred_count;
  a->b_epoch = a->epoch;
  out->opaque_[0] = alloc_tag(a);
  out->opaque_[1] = a->backup_serial;
  out->opaque_[2] = a->b_head;
  out->opaque_[3] = (uint64_t)a->b_count;
  return KVC_OK;
}

kvc_status kvc_allocator_restore_state(kvc_allocator *a, const kvc_allocator_state *state) {
  KVC_API_ENTRY();
  ALLOC_ENTRY(a);
  KVC_RETURN_IF(!state, a->ctx, KVC_ERR_INVALID_ARGUMENT, "state is NULL");
  KVC_RETURN_IF(state->opaque_[0] != alloc_tag(a), a->ctx, KVC_ERR_MISUSE, "state was not taken from this allocator");
  KVC_RETURN_IF(!a->backup_live || state->opaque_[1] != a->backup_serial, a->ctx, KVC_ERR_MISUSE,
                "state is not the live snapshot (a later backup or a clear replaced it)");
  KVC_RETURN_IF(a->epoch != a->b_epoch, a->ctx, KVC_ERR_MISUSE,
                "a free, free group or clear happened since the backup; restoring would lose those frees");
  kvc__ring *r = &a->ring;
  /* A slot handed out since the backup and cached by a bound radix cache would become free
   * while the cache lists it. */
  const bool cached =
      a->backup_saved ? kvc__alloc_any_cached(a, a->saved, a->b_count) : restore_pops_cached(a, a->b_head, r->head);
  KVC_RETURN_IF(cached, a->ctx, KVC_ERR_MISUSE,
                "a slot handed out since the backup is held by the bound radix cache: evict or reset it first");
  if (a->backup_saved) {
    /* A merge rewrote the ring: rebuild the backup's lists from the saved image. Pages
     * not in it were held at the backup and still are (no free since). */
    memcpy(r->buf, a->saved, (size_t)a->b_count * sizeof(uint32_t));
    memcpy(a->deferred, a->saved + a->b_count, (size_t)a->b_deferred * sizeof(uint32_t));
    for (int64_t i = 0; i < a->b_count; i++) a->state[a->saved[i]] = KVC__PG_FREE;
    for (int64_t i = 0; i < a->b_deferred; i++) a->state[a->deferred[i]] = KVC__PG_DEFERRED;
    r->head = 0;
    a->deferred_count = a->b_deferred;
    a->b_head = 0;
    a->backup_saved = false;
  } else {
    /* Only pops happened: the popped ids are still in the buffer in front of head. */
    for (uint64_t h = a->b_head; h != r->head; h++) a->state[r->buf[h & r->mask]] = KVC__PG_FREE;
    r->head = a->b_head;
  }
  r->count = a->b_count;
  return kvc__alloc_finish(a, __func__, KVC_OK);
}

kvc_status kvc_allocator_clear(kvc_allocator *a) {
  KVC_API_ENTRY();
  ALLOC_ENTRY(a);
  /* A bound radix cache's marks would vanish while its nodes still list the slots, which
   * a later insert could then cache twice. The scan costs what the reset costs anyway. */
  if (a->cache_owner)
    for (int64_t p = 1; p <= a->num_pages; p++)
      KVC_RETURN_IF(a->state[p] & KVC__PG_CACHED, a->ctx, KVC_ERR_MISUSE,
                    "slot %lld is held by the radix cache bound to this allocator: reset that cache first",
                    (long long)p);
  kvc__fl_reset(a);
  a->epoch++;
  a->backup_live = false;
  a->backup_saved = false;
  return kvc__alloc_finish(a, __func__, KVC_OK);
}
