/* test_free_simd.c — the TOKEN frees' AVX-512 step against the scalar loops: two host
 * contexts, one with the vector path where this CPU has AVX-512 and one with KVC_SIMD=0,
 * get the same calls, and every status, message, free count and later alloc must agree.
 * Where the CPU lacks AVX-512 both sides run the scalar loops and the tests still pass;
 * ctest also runs this suite under KVC_SIMD=0 (tests/pool/CMakeLists.txt). */
#define _POSIX_C_SOURCE 200809L
#include "alloc/alloc.h"
#include "alloc_test_util.h"
#include "core/core.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct twin {
  kvc_context *ctx[2]; /* [0] vector where it can, [1] KVC_SIMD=0 */
  kvc_allocator *a[2];
} twin;

static kvc_context *host_context(bool simd) {
  const char *old = getenv("KVC_SIMD");
  char *keep = old ? strdup(old) : NULL;
  if (simd) {
    if (old) setenv("KVC_SIMD", old, 1); /* the run's own setting (ctest's KVC_SIMD=0 run) */
  } else {
    setenv("KVC_SIMD", "0", 1);
  }
  kvc_context_config c = KVC_CONTEXT_CONFIG_INIT;
  c.backend = KVC_BACKEND_HOST;
  kvc_context *ctx = NULL;
  const kvc_status st = kvc_context_create(&c, &ctx);
  if (keep) setenv("KVC_SIMD", keep, 1);
  else unsetenv("KVC_SIMD");
  free(keep);
  if (st != KVC_OK) fail_msg("kvc_context_create -> %s", kvc_status_name(st));
  return ctx;
}

static void twin_make(twin *t, int64_t size) {
  for (int s = 0; s < 2; s++) {
    t->ctx[s] = host_context(s == 0);
    t->a[s] = kvt_allocator_on(t->ctx[s], KVC_ALLOCATOR_TOKEN, size, 1, 0);
  }
  /* The scalar side never takes the vector step; the other one does exactly where the
   * CPU and the run's KVC_SIMD allow it. */
  assert_false(t->a[1]->simd_free);
  const char *env = getenv("KVC_SIMD");
  const bool off = env && (!strcmp(env, "0") || !strcasecmp(env, "off") || !strcasecmp(env, "false") ||
                           !strcasecmp(env, "no") || !*env);
  assert_int_equal(t->a[0]->simd_free, kvc__cpu_avx512() && kvc__cpu_amd() && !off);
}

static void twin_free(twin *t) {
  for (int s = 0; s < 2; s++) {
    kvc_allocator_destroy(t->a[s]);
    kvc_context_destroy(t->ctx[s]);
  }
}

/* One call on both sides: same status, same message, same free count, both audits pass. */
static kvc_status both_free(twin *t, const int64_t *v, size_t n) {
  const kvc_status s0 = kvc_allocator_free(t->a[0], v, n), s1 = kvc_allocator_free(t->a[1], v, n);
  assert_int_equal(s0, s1);
  if (s0 != KVC_OK) assert_string_equal(kvc_last_error(t->ctx[0]), kvc_last_error(t->ctx[1]));
  assert_int_equal(kvc_allocator_available_size(t->a[0]), kvc_allocator_available_size(t->a[1]));
  kvc_allocator_stats st0, st1;
  KVT_OK(kvc_allocator_get_stats(t->a[0], &st0));
  KVT_OK(kvc_allocator_get_stats(t->a[1], &st1));
  assert_int_equal(st0.group_pending, st1.group_pending);
  assert_int_equal(kvc_allocator_check(t->a[0]), KVC_OK);
  assert_int_equal(kvc_allocator_check(t->a[1]), KVC_OK);
  return s0;
}

/* k slots from both sides (they must be the same), into out. */
static void both_alloc(twin *t, int64_t k, int64_t *out, int64_t *tmp) {
  KVT_OK(kvc_allocator_alloc(t->a[0], k, out));
  KVT_OK(kvc_allocator_alloc(t->a[1], k, tmp));
  for (int64_t j = 0; j < k; j++)
    if (out[j] != tmp[j])
      fail_msg("alloc %lld: vector side %lld, scalar side %lld", (long long)j, (long long)out[j], (long long)tmp[j]);
}

/* Every bad slot kind at every position of frees of 1..33 slots (so at every lane of up to
 * four vector steps of eight, and in the tails), the good slots a shuffled set of held
 * ones: each call is refused on both sides alike and changes nothing, which the good free
 * of the same slots after it, and the allocs that hand them out again, check. Sizes with
 * padding past num_pages (100) and without (127), with the ring's tail moved each round
 * so that frees run across its wrap. */
static void test_every_bad_slot_at_every_lane(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  const int64_t sizes[2] = {100, 127};
  for (int z = 0; z < 2; z++) {
    const int64_t np = sizes[z];
    int64_t mask = 1;
    while (mask < np) mask = 2 * mask + 1;
    twin t;
    twin_make(&t, np);
    int64_t held[128], tmp[128], v[40];
    both_alloc(&t, np, held, tmp);
    for (int64_t n = 1; n <= 33; n++) {
      /* Move the ring's tail: free and take back a few slots. */
      const int64_t shift = kvt_range(&r, 0, 7);
      if (shift) {
        assert_int_equal(both_free(&t, held + np - shift, (size_t)shift), KVC_OK);
        both_alloc(&t, shift, held + np - shift, tmp);
      }
      for (int64_t j = np - 1; j > 0; j--) { /* shuffle the held slots */
        const int64_t q = kvt_range(&r, 0, j), x = held[j];
        held[j] = held[q], held[q] = x;
      }
      /* Slots freed and not taken back: a "not held" case. */
      const int64_t nfree = 2, nh = np - nfree;
      assert_int_equal(both_free(&t, held + nh, nfree), KVC_OK);
      for (int64_t pos = 0; pos < n; pos++) {
        const int64_t bad[] = {np + 1, mask, mask + 1, (int64_t)1 << 32, 0, -1, INT64_MIN, INT64_MAX, held[nh]};
        const int nbad = (int)(sizeof bad / sizeof bad[0]);
        for (int b = 0; b < nbad + 3; b++) {
          memcpy(v, held, (size_t)n * sizeof *v);
          if (b < nbad) {
            if (bad[b] >= 1 && bad[b] <= np && b < nbad - 1) continue; /* no padding at 127 */
            v[pos] = bad[b];
          } else if (pos > 0) { /* a repeat: of the slot before, of the first of its step of 8, of any before */
            const int64_t q = b == nbad ? pos - 1 : b == nbad + 1 ? (pos / 8) * 8 : kvt_range(&r, 0, pos - 1);
            if (q >= pos) continue;
            v[pos] = v[q];
          } else {
            continue;
          }
          assert_int_equal(both_free(&t, v, (size_t)n), KVC_ERR_MISUSE);
        }
      }
      /* The refused slots are still held: a good free of them, then everything back. */
      assert_int_equal(both_free(&t, held, (size_t)n), KVC_OK);
      const int64_t avail = kvc_allocator_available_size(t.a[0]);
      int64_t got[128];
      both_alloc(&t, avail, got, tmp);
      /* The free list was [the two of nfree, then held[0, n)]: both sides' order. */
      for (int64_t j = 0; j < n; j++) assert_int_equal(got[nfree + j], held[j]);
      memcpy(held + nh, got, (size_t)nfree * sizeof *held);
      memcpy(held, got + nfree, (size_t)n * sizeof *held);
    }
    twin_free(&t);
  }
}

/* Random frees against a FIFO model on both sides, the ring wrapping many times: lengths
 * up to 80 (up to ten vector steps and a tail), one bad slot of a random kind at a random
 * position in half of them; every alloc is compared with the model. */
static void test_random_frees_match_the_model(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  const int64_t np = 200;
  twin t;
  twin_make(&t, np);
  int64_t *fifo = malloc(8 * (size_t)np * sizeof *fifo);
  int64_t held[200], got[200], tmp[200], v[81];
  assert_non_null(fifo);
  int64_t head = 0, tail = 0, nheld = 0;
  for (int64_t s = 1; s <= np; s++) fifo[tail++] = s;
  for (int it = 0; it < 3000; it++) {
    if (tail - head > 0 && (nheld < 16 || kvt_range(&r, 0, 2) == 0)) {
      const int64_t k = kvt_range(&r, 1, tail - head < 80 ? tail - head : 80);
      both_alloc(&t, k, got, tmp);
      for (int64_t j = 0; j < k; j++) {
        assert_int_equal(got[j], fifo[head + j]);
        held[nheld++] = got[j];
      }
      head += k;
      if (head > np) {
        memmove(fifo, fifo + head, (size_t)(tail - head) * sizeof *fifo);
        tail -= head, head = 0;
      }
      continue;
    }
    for (int64_t j = nheld - 1; j > 0; j--) {
      const int64_t q = kvt_range(&r, 0, j), x = held[j];
      held[j] = held[q], held[q] = x;
    }
    const int64_t k = kvt_range(&r, 1, nheld < 80 ? nheld : 80);
    memcpy(v, held, (size_t)k * sizeof *v);
    if (kvt_range(&r, 0, 1)) {
      const int64_t pos = kvt_range(&r, 0, k - 1);
      switch (kvt_range(&r, 0, 4)) {
      case 0: v[pos] = pos ? v[kvt_range(&r, 0, pos - 1)] : 0; break; /* a repeat, or slot 0 */
      case 1: v[pos] = tail > head ? fifo[head] : -1; break;          /* a free slot */
      case 2: v[pos] = np + kvt_range(&r, 1, 300); break;             /* padding or past */
      case 3: v[pos] = -kvt_range(&r, 1, 3); break;                   /* negative */
      default: v[pos] = kvt_range(&r, 0, 1) ? INT64_MIN : INT64_MAX; break;
      }
      assert_int_equal(both_free(&t, v, (size_t)k), KVC_ERR_MISUSE);
      assert_int_equal(kvc_allocator_available_size(t.a[0]), tail - head);
      continue;
    }
    assert_int_equal(both_free(&t, v, (size_t)k), KVC_OK);
    for (int64_t j = 0; j < k; j++) fifo[tail++] = v[j];
    memmove(held, held + k, (size_t)(nheld - k) * sizeof *held);
    nheld -= k;
  }
  free(fifo);
  twin_free(&t);
}

/* Inside a free group the TOKEN free records its slots instead: the same cases (a repeat
 * inside a step and across steps, across calls of the group, a bad slot at each lane of
 * two steps), then the group's end and the allocs that follow agree on both sides. */
static void test_group_frees_match(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  const int64_t np = 100;
  twin t;
  twin_make(&t, np);
  int64_t held[100], tmp[100], v[40];
  both_alloc(&t, np, held, tmp);
  for (int round = 0; round < 6; round++) {
    KVT_OK(kvc_allocator_free_group_begin(t.a[0]));
    KVT_OK(kvc_allocator_free_group_begin(t.a[1]));
    for (int64_t j = np - 1; j > 0; j--) {
      const int64_t q = kvt_range(&r, 0, j), x = held[j];
      held[j] = held[q], held[q] = x;
    }
    assert_int_equal(both_free(&t, held, 17), KVC_OK); /* recorded: a repeat across calls below */
    const int64_t n = 32;
    for (int64_t pos = 0; pos < n; pos++) {
      const int64_t bad[] = {np + 1, 127, 0, -1, INT64_MIN, held[0], held[16]};
      for (size_t b = 0; b < sizeof bad / sizeof bad[0] + 1; b++) {
        memcpy(v, held + 17, (size_t)n * sizeof *v);
        if (b < sizeof bad / sizeof bad[0]) v[pos] = bad[b];
        else if (pos > 0) v[pos] = v[kvt_range(&r, 0, pos - 1)];
        else continue;
        assert_int_equal(both_free(&t, v, (size_t)n), KVC_ERR_MISUSE);
      }
    }
    assert_int_equal(both_free(&t, held + 17, (size_t)n), KVC_OK);
    KVT_OK(kvc_allocator_free_group_end(t.a[0]));
    KVT_OK(kvc_allocator_free_group_end(t.a[1]));
    both_alloc(&t, 17 + n, held, tmp);
  }
  twin_free(&t);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_every_bad_slot_at_every_lane),
    cmocka_unit_test(test_random_frees_match_the_model),
    cmocka_unit_test(test_group_frees_match),
};
KVT_MAIN("free_simd", tests)
