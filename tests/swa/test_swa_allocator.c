/* test_swa_allocator.c — SGLang's SWATokenToKVPoolAllocator (spec 7): mapping contents
 * (host and device), translation, window eviction, groups, tail allocation, ring and
 * pure modes, and transactional misuse/exhaustion. */
#include "../pool/alloc_test_util.h"
#include "alloc/swa.h"
#include "core/fault.h"

static kvc_swa_allocator *make_swa(int64_t full, int64_t swa, int32_t ps, uint32_t flags) {
  kvc_swa_allocator_config c = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  c.size_full = full;
  c.size_swa = swa;
  c.page_size = ps;
  c.flags = flags;
  kvc_swa_allocator *a = NULL;
  KVT_OK(kvc_swa_allocator_create(kvt_ctx, &c, &a));
  return a;
}

typedef struct snap {
  int64_t len, favail, savail;
  int32_t *map;
  kvc_allocator_stats fs, ss;
} snap;

static snap take(const kvc_swa_allocator *a) {
  snap s;
  memset(&s, 0, sizeof s);
  s.len = kvc_swa_allocator_mapping_length(a);
  s.map = malloc((size_t)s.len * 4);
  memcpy(s.map, kvc_swa_allocator_mapping_host(a), (size_t)s.len * 4);
  s.favail = kvc_swa_allocator_full_available_size(a);
  s.savail = kvc_swa_allocator_swa_available_size(a);
  KVT_OK(kvc_allocator_get_stats(kvc_swa_allocator_full(a), &s.fs));
  if (kvc_swa_allocator_swa(a)) KVT_OK(kvc_allocator_get_stats(kvc_swa_allocator_swa(a), &s.ss));
  return s;
}

static void expect_same(const kvc_swa_allocator *a, snap *s) {
  snap t = take(a);
  assert_memory_equal(s->map, t.map, (size_t)s->len * 4);
  assert_int_equal(s->favail, t.favail);
  assert_int_equal(s->savail, t.savail);
  assert_memory_equal(&s->fs, &t.fs, sizeof s->fs);
  assert_memory_equal(&s->ss, &t.ss, sizeof s->ss);
  kvt_expect_swa_mapping_synced(a);
  KVT_OK(kvc_swa_allocator_check(a));
  free(t.map);
  free(s->map);
}

/* Two requests just extended to seq0 and seq1 tokens: where the refused-step tests start. */
typedef struct two_reqs {
  kvc_swa_allocator *a;
  kvc_req_to_token_pool *rp;
  int32_t rows[2];
  int64_t out[8]; /* the extend's slots, then each later step's */
} two_reqs;

/* 16 full pages of 4 (plenty), `swa` SWA slots (the side the tests exhaust). */
static void two_reqs_open(two_reqs *t, int64_t swa, int64_t seq0, int64_t seq1) {
  assert_true(seq0 + seq1 <= 8);
  t->a = make_swa(64, swa, 4, 0);
  t->rp = kvt_req_pool(4, 64);
  t->rows[0] = t->rows[1] = 0;
  KVT_OK(kvc_req_to_token_pool_alloc(t->rp, 2, t->rows));
  const int64_t pre[2] = {0, 0}, seq[2] = {seq0, seq1};
  KVT_OK(kvc_swa_allocator_alloc_extend(t->a, 2, pre, seq, NULL, t->rp, t->rows, NULL, t->out, NULL, NULL));
}

static void two_reqs_close(two_reqs *t) {
  kvc_req_to_token_pool_destroy(t->rp);
  kvc_swa_allocator_destroy(t->a);
}

static void test_create_and_sizes(void **state) {
  (void)state;
  kvc_swa_allocator_config c = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  kvc_swa_allocator *a = NULL;
  c.size_full = 16, c.size_swa = 8, c.page_size = 0;
  KVT_STATUS(kvc_swa_allocator_create(kvt_ctx, &c, &a), KVC_ERR_INVALID_ARGUMENT);
  c.page_size = 4, c.flags = KVC_SWA_PURE;
  KVT_STATUS(kvc_swa_allocator_create(kvt_ctx, &c, &a), KVC_ERR_INVALID_ARGUMENT);
  c.flags = 0, c.ring_size = 8; /* ring without req pool */
  KVT_STATUS(kvc_swa_allocator_create(kvt_ctx, &c, &a), KVC_ERR_INVALID_ARGUMENT);
  assert_null(a);
  a = make_swa(64, 16, 4, 0);
  assert_int_equal(kvc_swa_allocator_size(a), 16);
  assert_int_equal(kvc_swa_allocator_size_full(a), 64);
  assert_int_equal(kvc_swa_allocator_available_size(a), 16);
  assert_int_equal(kvc_swa_allocator_full_available_size(a), 64);
  assert_int_equal(kvc_swa_allocator_mapping_length(a), 64 + 4 + 1);
  assert_int_equal(kvc_swa_allocator_mapping_host(a)[68], -1);
  assert_true(kvc_swa_allocator_new_pages_available(a, 16, 4));
  assert_false(kvc_swa_allocator_new_pages_available(a, 16, 5));
  kvt_expect_swa_mapping_synced(a);
  kvc_swa_allocator_destroy(a);
  kvc_swa_allocator_destroy(NULL);
}

/* ps = 1: alloc pairs FIFO slots of both sides; translate; peer invariants. */
static void test_token_alloc_mapping_and_translate(void **state) {
  (void)state;
  kvc_swa_allocator *a = make_swa(16, 8, 1, 0);
  int64_t f[4];
  int64_t *dout = kvt_dev_alloc(4 * 8);
  KVT_OK(kvc_swa_allocator_alloc(a, 4, f, dout, NULL));
  for (int i = 0; i < 4; i++) assert_int_equal(f[i], i + 1);
  int64_t back[4];
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  kvt_d2h(back, dout, sizeof back);
  assert_memory_equal(back, f, sizeof f);
  /* free 2 then alloc: full FIFO reuses 2 at the back; SWA also */
  int64_t two = 2;
  KVT_OK(kvc_swa_allocator_free(a, &two, 1, NULL));
  int64_t g[5];
  KVT_OK(kvc_swa_allocator_alloc(a, 5, g, NULL, NULL));
  const int64_t want_g[5] = {5, 6, 7, 8, 9};
  assert_memory_equal(g, want_g, sizeof g);
  const int32_t *m = kvc_swa_allocator_mapping_host(a);
  assert_int_equal(m[1], 1);
  assert_int_equal(m[2], 0);
  assert_int_equal(m[5], 5);
  assert_int_equal(m[8], 8);
  assert_int_equal(m[9], 2); /* SWA slot 2 came back at the end of the SWA FIFO */
  kvt_expect_swa_mapping_synced(a);
  /* translate on the device: -1 -> -1, out-of-range -> -1, int32 out */
  const int64_t q[5] = {-1, 9, 2, 1, 1000};
  int64_t *dq = kvt_dev_alloc(sizeof q);
  int32_t *dr = kvt_dev_alloc(5 * 4);
  kvt_h2d(dq, q, sizeof q);
  KVT_OK(kvc_swa_allocator_translate(a, dq, KVC_INDEX_I64, dr, KVC_INDEX_I32, 5, NULL));
  int32_t r[5];
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  kvt_d2h(r, dr, sizeof r);
  const int32_t want_r[5] = {-1, 2, 0, 1, -1};
  assert_memory_equal(r, want_r, sizeof r);
  int64_t h[4];
  KVT_OK(kvc_swa_allocator_translate_host(a, q, 4, h));
  for (int i = 0; i < 4; i++) assert_int_equal(h[i], want_r[i]);
  KVT_STATUS(kvc_swa_allocator_translate_host(a, q + 4, 1, h), KVC_ERR_INVALID_ARGUMENT);
  /* peer invariants */
  int64_t one = 1;
  snap s = take(a);
  KVT_STATUS(kvc_swa_allocator_free_full(a, &one, 1), KVC_ERR_MISUSE); /* peer released */
  expect_same(a, &s);
  KVT_OK(kvc_swa_allocator_free_swa(a, &one, 1, NULL));
  assert_int_equal(kvc_swa_allocator_mapping_host(a)[1], 0);
  s = take(a);
  KVT_STATUS(kvc_swa_allocator_free_swa(a, &one, 1, NULL), KVC_ERR_MISUSE); /* peer mapped */
  KVT_STATUS(kvc_swa_allocator_free(a, &one, 1, NULL), KVC_ERR_MISUSE);
  expect_same(a, &s);
  KVT_OK(kvc_swa_allocator_free_full(a, &one, 1));
  KVT_STATUS(kvc_swa_allocator_free_full(a, &one, 1), KVC_ERR_MISUSE); /* double free */
  int64_t zero = 0;
  KVT_STATUS(kvc_swa_allocator_free(a, &zero, 1, NULL), KVC_ERR_MISUSE);
  KVT_STATUS(kvc_swa_allocator_alloc_extend(a, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL), KVC_OK);
  KVT_OK(kvc_swa_allocator_check(a));
  kvt_dev_free(dout), kvt_dev_free(dq), kvt_dev_free(dr);
  kvc_swa_allocator_destroy(a);
}

/* A slot list that rises past the end and falls back below it: the page-1 fast path
 * took "first >= 1 and last < end" plus ascending-so-far as proof of range and read the
 * state of the huge slot (fuzz_flow, an ASan SEGV). Refused, nothing changed. */
static void test_free_rising_past_the_end_is_refused(void **state) {
  (void)state;
  kvc_swa_allocator *a = make_swa(16, 8, 1, 0);
  int64_t f[4];
  KVT_OK(kvc_swa_allocator_alloc(a, 4, f, NULL, NULL));
  snap s = take(a);
  const int64_t bad[3] = {1, (int64_t)1 << 40, 3};
  KVT_STATUS(kvc_swa_allocator_free(a, bad, 3, NULL), KVC_ERR_MISUSE);
  expect_same(a, &s); /* frees the snapshot */
  s = take(a);
  const int64_t bad_full[3] = {2, 17 + 4096, 4};
  KVT_STATUS(kvc_swa_allocator_free(a, bad_full, 3, NULL), KVC_ERR_MISUSE);
  expect_same(a, &s);
  KVT_OK(kvc_swa_allocator_free(a, f, 4, NULL));
  KVT_OK(kvc_swa_allocator_check(a));
  kvc_swa_allocator_destroy(a);
}

/* The one-pass free (issue 17: validation and release share one pass over the slots,
 * the state bytes marked as they go): every list the checked path refused is still
 * refused, with its message, after good slots were marked; nothing changes; a valid
 * free out of order puts both sides' slots at the back of their FIFOs in call order. */
static void test_one_pass_free_refusals_and_order_page1(void **state) {
  (void)state;
  kvc_swa_allocator *a = make_swa(20, 18, 1, 0);
  int64_t f[6];
  KVT_OK(kvc_swa_allocator_alloc(a, 6, f, NULL, NULL)); /* full 1..6, SWA 1..6 */
  const struct {
    int64_t s[3];
    const char *says;
  } bad[] = {
      {{3, 1, 3}, "slots[2] = 3 is listed twice"},
      {{2, 5, 0}, "slots[2] = 0 is the padding page or out of range"},
      {{4, 2, 99}, "slots[2] = 99 is the padding page or out of range"},
      {{4, 2, -1}, "slots[2] = -1 is the padding page or out of range"},
      {{1, 2, 7}, "slots[2] = 7 is not held"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    snap s = take(a);
    KVT_STATUS(kvc_swa_allocator_free(a, bad[k].s, 3, NULL), KVC_ERR_MISUSE);
    if (!strstr(kvc_last_error(kvt_ctx), bad[k].says)) fail_msg("case %zu: %s", k, kvc_last_error(kvt_ctx));
    expect_same(a, &s);
    s = take(a);
    KVT_STATUS(kvc_swa_allocator_free_swa(a, bad[k].s, 3, NULL), KVC_ERR_MISUSE);
    expect_same(a, &s);
  }
  /* slot 6 loses its peer: a free listing it after good slots is refused, unmarked */
  KVT_OK(kvc_swa_allocator_free_swa(a, &f[5], 1, NULL));
  snap s = take(a);
  const int64_t peerless[2] = {1, 6};
  KVT_STATUS(kvc_swa_allocator_free(a, peerless, 2, NULL), KVC_ERR_MISUSE);
  expect_same(a, &s);
  KVT_OK(kvc_swa_allocator_free_full(a, &f[5], 1)); /* full FIFO 7..20, 6; SWA 7..18, 6 */
  const int64_t good[3] = {5, 2, 4};
  KVT_OK(kvc_swa_allocator_free(a, good, 3, NULL)); /* full ..., 6, 5, 2, 4; SWA the same */
  const int32_t *m = kvc_swa_allocator_mapping_host(a);
  for (int k = 0; k < 3; k++) assert_int_equal(m[good[k]], 0);
  kvt_expect_swa_mapping_synced(a);
  int64_t g[16];
  KVT_OK(kvc_swa_allocator_alloc(a, 14, g, NULL, NULL)); /* full 7..20; SWA 7..18, 6, 5 */
  assert_int_equal(m[19], 6);
  assert_int_equal(m[20], 5);
  KVT_OK(kvc_swa_allocator_alloc(a, 2, g, NULL, NULL)); /* full 6, 5; SWA 2, 4 */
  assert_int_equal(g[0], 6);
  assert_int_equal(g[1], 5);
  assert_int_equal(m[6], 2);
  assert_int_equal(m[5], 4);
  KVT_OK(kvc_swa_allocator_check(a));
  kvc_swa_allocator_destroy(a);
}

/* The same with pages: a page listed again later is released once (as the paged free
 * does), a page not held or a slot past the end is refused after good pages were
 * marked, and the released pages go to the front of both free lists sorted. */
static void test_one_pass_free_refusals_and_order_paged(void **state) {
  (void)state;
  two_reqs t;
  two_reqs_open(&t, 32, 4, 4); /* request 0: full page 1, request 1: page 2; SWA pages 1, 2 */
  const int64_t *o = t.out;
  const int64_t not_held[9] = {o[4], o[5], o[6], o[7], o[0], o[1], o[2], o[3], 4 * 15};
  const int64_t past_end[5] = {o[4], o[5], o[6], o[7], (int64_t)1 << 40};
  snap s = take(t.a);
  KVT_STATUS(kvc_swa_allocator_free(t.a, not_held, 9, NULL), KVC_ERR_MISUSE);
  if (!strstr(kvc_last_error(kvt_ctx), "slots[8] = 60 is not held")) fail_msg("%s", kvc_last_error(kvt_ctx));
  expect_same(t.a, &s);
  s = take(t.a);
  KVT_STATUS(kvc_swa_allocator_free_swa(t.a, past_end, 5, NULL), KVC_ERR_MISUSE);
  expect_same(t.a, &s);
  const int64_t f0 = kvc_swa_allocator_full_available_size(t.a), w0 = kvc_swa_allocator_swa_available_size(t.a);
  const int64_t twice[9] = {o[4], o[5], o[6], o[7], o[0], o[1], o[2], o[3], o[4]};
  KVT_OK(kvc_swa_allocator_free(t.a, twice, 9, NULL));
  assert_int_equal(kvc_swa_allocator_full_available_size(t.a), f0 + 8);
  assert_int_equal(kvc_swa_allocator_swa_available_size(t.a), w0 + 8);
  const int32_t *m = kvc_swa_allocator_mapping_host(t.a);
  for (int k = 0; k < 8; k++) assert_int_equal(m[o[k]], 0);
  kvt_expect_swa_mapping_synced(t.a);
  /* pages 2 then 1 were listed: sorted, so page 1 comes back first on both sides */
  const int64_t pre[1] = {0}, seq[1] = {4};
  int64_t out[4];
  KVT_OK(kvc_swa_allocator_alloc_extend(t.a, 1, pre, seq, NULL, t.rp, t.rows, NULL, out, NULL, NULL));
  assert_int_equal(out[0], 4);
  assert_int_equal(m[4] / 4, 1);
  KVT_OK(kvc_swa_allocator_check(t.a));
  two_reqs_close(&t);
}

/* Exhaustion on either side changes nothing (SGLang leaks in alloc_decode). */
static void test_out_of_slots_changes_nothing(void **state) {
  (void)state;
  two_reqs t;
  two_reqs_open(&t, 12, 5, 3); /* 3 SWA pages; the requests hold 2 + 1 pages */
  const int64_t want[8] = {4, 5, 6, 7, 8, 12, 13, 14};
  assert_memory_equal(t.out, want, 8 * 8);
  snap s = take(t.a);
  /* decode where request 0 opens a page: the full side has room, the SWA side none
   * (SGLang consumes the full page and leaks it): OUT_OF_SLOTS, nothing changed */
  const int64_t seq_bad[2] = {9, 4};
  int64_t last[2] = {8, 14};
  KVT_STATUS(kvc_swa_allocator_alloc_decode(t.a, 2, seq_bad, last, t.rp, t.rows, t.out, NULL, NULL),
             KVC_ERR_OUT_OF_SLOTS);
  expect_same(t.a, &s);
  /* both continue their pages: fine */
  const int64_t seq_d[2] = {6, 4};
  KVT_OK(kvc_swa_allocator_alloc_decode(t.a, 2, seq_d, NULL, t.rp, t.rows, t.out, NULL, NULL));
  assert_int_equal(t.out[0], 9);
  assert_int_equal(t.out[1], 15);
  s = take(t.a);
  const int64_t seq_e[1] = {9};
  int64_t pl[1] = {5};
  KVT_STATUS(kvc_swa_allocator_alloc_extend(t.a, 1, pl, seq_e, NULL, t.rp, t.rows, NULL, t.out, NULL, NULL),
             KVC_ERR_OUT_OF_SLOTS);
  expect_same(t.a, &s);
  two_reqs_close(&t);
}

/* A decode that the full side refuses after the SWA side has taken its pages (a row
 * listed twice, caught by the full side's row check): the SWA side is rolled back, the
 * mappings (host and device) and both sides are as before. */
static void test_decode_full_side_misuse_rolls_back_swa_side(void **state) {
  (void)state;
  two_reqs t;
  two_reqs_open(&t, 32, 4, 4); /* 8 SWA pages; one full page each */
  snap s = take(t.a);
  const int32_t twice[2] = {t.rows[0], t.rows[0]};
  const int64_t seq_d[2] = {5, 5}; /* each opens a page on both sides */
  KVT_STATUS(kvc_swa_allocator_alloc_decode(t.a, 2, seq_d, NULL, t.rp, twice, t.out, NULL, NULL), KVC_ERR_MISUSE);
  expect_same(t.a, &s);
  two_reqs_close(&t);
}

/* The same for alloc_extend, whose one launch also writes the mapping: a refused extend
 * leaves everything as it was; an extend that continues both requests' partial pages and
 * opens new ones maps every new slot to an SWA slot at the same in-page offset, on the
 * device as on the host. */
static void test_extend_rollback_and_mapped_partial_pages(void **state) {
  (void)state;
  two_reqs t;
  two_reqs_open(&t, 32, 5, 3); /* request 0 ends inside its 2nd page, request 1 inside its 1st */
  snap s = take(t.a);
  const int32_t twice[2] = {t.rows[0], t.rows[0]};
  const int64_t pre[2] = {5, 3}, seq[2] = {11, 9};
  int64_t out[16];
  KVT_STATUS(kvc_swa_allocator_alloc_extend(t.a, 2, pre, seq, NULL, t.rp, twice, NULL, out, NULL, NULL),
             KVC_ERR_MISUSE);
  expect_same(t.a, &s);
  int64_t *dout = kvt_dev_alloc(16 * 8);
  KVT_OK(kvc_swa_allocator_alloc_extend(t.a, 2, pre, seq, NULL, t.rp, t.rows, NULL, out, dout, NULL));
  int64_t dev[12];
  kvt_d2h(dev, dout, 12 * 8);
  assert_memory_equal(dev, out, 12 * 8);
  const int32_t *m = kvc_swa_allocator_mapping_host(t.a);
  for (int i = 0; i < 12; i++) {
    assert_true(m[out[i]] > 0);
    assert_int_equal(m[out[i]] % 4, out[i] % 4);
  }
  assert_int_equal(out[0], t.out[4] + 1); /* continues request 0's page */
  assert_int_equal(out[6], t.out[7] + 1); /* continues request 1's page */
  kvt_expect_swa_mapping_synced(t.a);
  kvt_dev_free(dout);
  two_reqs_close(&t);
}

/* Paged: extend + decode keep SWA offsets equal to full offsets; window eviction of whole
 * pages below a boundary; continued decode; freeing the partial page's peer breaks the
 * next decode (MISUSE, nothing changed). */
static void test_paged_window_eviction(void **state) {
  (void)state;
  const int32_t ps = 4;
  kvc_swa_allocator *a = make_swa(64, 32, ps, 0);
  kvc_req_to_token_pool *rp = kvt_req_pool(2, 64);
  int32_t row = 0;
  KVT_OK(kvc_req_to_token_pool_alloc(rp, 1, &row));
  const int64_t p0 = 0, s0 = 10;
  int64_t f[16];
  int64_t *dout = kvt_dev_alloc(16 * 8);
  KVT_OK(kvc_swa_allocator_alloc_extend(a, 1, &p0, &s0, NULL, rp, &row, NULL, f, dout, NULL));
  const int32_t *m = kvc_swa_allocator_mapping_host(a);
  for (int i = 0; i < 10; i++) {
    assert_int_equal(f[i] % ps, i % ps);
    assert_int_equal(m[f[i]] % ps, f[i] % ps);
    assert_true(m[f[i]] > 0);
  }
  kvt_expect_swa_mapping_synced(a);
  /* decode 6 tokens (seq 11..16): last_loc from the req pool mirror */
  for (int64_t seq = 11; seq <= 16; seq++) {
    int64_t o;
    KVT_OK(kvc_swa_allocator_alloc_decode(a, 1, &seq, NULL, rp, &row, &o, NULL, NULL));
    assert_int_equal(m[o] % ps, o % ps);
  }
  const int32_t *tr = kvc_req_to_token_pool_row(rp, row);
  int64_t slots[16];
  for (int i = 0; i < 16; i++) slots[i] = tr[i];
  /* evict tokens [0, 8): whole pages */
  const int64_t swa_before = kvc_swa_allocator_swa_available_size(a);
  KVT_OK(kvc_swa_allocator_free_swa(a, slots, 8, NULL));
  assert_int_equal(kvc_swa_allocator_swa_available_size(a), swa_before + 8);
  for (int i = 0; i < 8; i++) assert_int_equal(m[slots[i]], 0);
  for (int i = 8; i < 16; i++) assert_true(m[slots[i]] > 0);
  kvt_expect_swa_mapping_synced(a);
  /* second free_swa of the same pages (ps > 1): silently skipped, as SGLang */
  KVT_OK(kvc_swa_allocator_free_swa(a, slots, 8, NULL));
  assert_int_equal(kvc_swa_allocator_swa_available_size(a), swa_before + 8);
  /* continued decode: 17 opens a page, 18 continues */
  for (int64_t seq = 17; seq <= 18; seq++) {
    int64_t o;
    KVT_OK(kvc_swa_allocator_alloc_decode(a, 1, &seq, NULL, rp, &row, &o, NULL, NULL));
    assert_int_equal(m[o] % ps, o % ps);
  }
  /* SWA-free the current partial page, then decode continuing it: MISUSE, unchanged */
  int64_t last = kvc_req_to_token_pool_row(rp, row)[17];
  KVT_OK(kvc_swa_allocator_free_swa(a, &last, 1, NULL));
  snap s = take(a);
  int64_t seq = 19, o;
  KVT_STATUS(kvc_swa_allocator_alloc_decode(a, 1, &seq, NULL, rp, &row, &o, NULL, NULL), KVC_ERR_MISUSE);
  expect_same(a, &s);
  /* free_full of evicted slots works; of mapped slots it is "peer released" */
  KVT_OK(kvc_swa_allocator_free_full(a, slots, 8));
  s = take(a);
  KVT_STATUS(kvc_swa_allocator_free_full(a, slots + 8, 4), KVC_ERR_MISUSE);
  expect_same(a, &s);
  int64_t rest[10];
  for (int i = 0; i < 10; i++) rest[i] = kvc_req_to_token_pool_row(rp, row)[8 + i];
  KVT_OK(kvc_swa_allocator_free(a, rest, 10, NULL));
  assert_int_equal(kvc_swa_allocator_full_available_size(a), 64);
  assert_int_equal(kvc_swa_allocator_swa_available_size(a), 32);
  kvt_expect_swa_mapping_synced(a);
  KVT_OK(kvc_swa_allocator_check(a));
  kvt_dev_free(dout);
  kvc_req_to_token_pool_destroy(rp);
  kvc_swa_allocator_destroy(a);
}

/* Groups: SWA frees resolved at the call (mapping zeroed now), released sorted-unique at
 * group end before the full side; nesting is misuse. */
static void test_free_group_ordering(void **state) {
  (void)state;
  const int32_t ps = 2;
  kvc_swa_allocator *a = make_swa(16, 16, ps, 0);
  int64_t f[8];
  const int64_t pre[4] = {0, 0, 0, 0}, seq[4] = {2, 2, 2, 2};
  KVT_OK(kvc_swa_allocator_alloc_extend(a, 4, pre, seq, NULL, NULL, NULL, NULL, f, NULL, NULL));
  const int64_t want[8] = {2, 3, 4, 5, 6, 7, 8, 9};
  assert_memory_equal(f, want, sizeof want);
  KVT_OK(kvc_swa_allocator_free_group_begin(a));
  KVT_STATUS(kvc_swa_allocator_free_group_begin(a), KVC_ERR_MISUSE);
  int64_t x = 8, y = 2;
  KVT_OK(kvc_swa_allocator_free(a, &x, 1, NULL));
  assert_int_equal(kvc_swa_allocator_mapping_host(a)[8], 0); /* resolved now */
  KVT_OK(kvc_swa_allocator_free(a, &y, 1, NULL));
  KVT_STATUS(kvc_swa_allocator_free(a, &y, 1, NULL), KVC_ERR_MISUSE); /* recorded already */
  assert_int_equal(kvc_swa_allocator_full_available_size(a), 16 - 8); /* not released yet */
  KVT_OK(kvc_swa_allocator_free_group_end(a));
  KVT_STATUS(kvc_swa_allocator_free_group_end(a), KVC_ERR_MISUSE);
  assert_int_equal(kvc_swa_allocator_full_available_size(a), 12);
  /* paged LIFO: pages 1 and 4 (sorted) are at the front on both sides */
  const int64_t p1 = 0, s1 = 4;
  KVT_OK(kvc_swa_allocator_alloc_extend(a, 1, &p1, &s1, NULL, NULL, NULL, NULL, f, NULL, NULL));
  const int64_t want2[4] = {2, 3, 8, 9};
  assert_memory_equal(f, want2, sizeof want2);
  const int32_t *m = kvc_swa_allocator_mapping_host(a);
  assert_int_equal(m[2], 2);
  assert_int_equal(m[8], 8);
  kvt_expect_swa_mapping_synced(a);
  KVT_OK(kvc_swa_allocator_check(a));
  kvc_swa_allocator_destroy(a);
}

/* Tail allocation: SWA slots only for the tail, fresh page at offset 0. */
static void test_swa_tail(void **state) {
  (void)state;
  const int32_t ps = 4;
  kvc_swa_allocator *a = make_swa(64, 32, ps, 0);
  int64_t f[16];
  KVT_STATUS(kvc_swa_allocator_alloc_extend_swa_tail(a, 0, 10, -1, 11, NULL, 0, NULL, f, NULL, NULL),
             KVC_ERR_INVALID_ARGUMENT);
  KVT_OK(kvc_swa_allocator_alloc_extend_swa_tail(a, 0, 10, -1, 3, NULL, 0, NULL, f, NULL, NULL));
  const int32_t *m = kvc_swa_allocator_mapping_host(a);
  for (int i = 0; i < 7; i++) assert_int_equal(m[f[i]], 0);
  assert_int_equal(m[f[7]], 4); /* SWA page 1, offset 0 */
  assert_int_equal(m[f[8]], 5);
  assert_int_equal(m[f[9]], 6);
  assert_int_equal(kvc_swa_allocator_swa_available_size(a), 28);
  kvt_expect_swa_mapping_synced(a);
  KVT_OK(kvc_swa_allocator_alloc_extend_swa_tail(a, 0, 4, -1, 0, NULL, 0, NULL, f, NULL, NULL));
  assert_int_equal(kvc_swa_allocator_swa_available_size(a), 28);
  KVT_OK(kvc_swa_allocator_check(a));
  KVT_OK(kvc_swa_allocator_clear(a, NULL));
  assert_int_equal(kvc_swa_allocator_available_size(a), 32);
  for (int64_t i = 0; i < kvc_swa_allocator_mapping_length(a) - 1; i++) assert_int_equal(m[i], 0);
  kvt_expect_swa_mapping_synced(a);
  kvc_swa_allocator_destroy(a);
}

static void test_ring_and_pure(void **state) {
  (void)state;
  kvc_req_to_token_pool *rp = kvt_req_pool(4, 64);
  kvc_swa_allocator_config c = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  c.size_full = 64, c.size_swa = 8, c.page_size = 4, c.ring_size = 6, c.req_pool = rp;
  kvc_swa_allocator *a = NULL;
  KVT_OK(kvc_swa_allocator_create(kvt_ctx, &c, &a));
  assert_null(kvc_swa_allocator_swa(a));
  assert_int_equal(kvc_swa_allocator_size_swa(a), 4 * 8);
  assert_int_equal(kvc_swa_allocator_swa_available_size(a), 32);
  int32_t row = 0;
  KVT_OK(kvc_req_to_token_pool_alloc(rp, 1, &row));
  assert_int_equal(kvc_swa_allocator_swa_available_size(a), 24);
  const int64_t p = 0, s = 40;
  int64_t f[40];
  KVT_OK(kvc_swa_allocator_alloc_extend(a, 1, &p, &s, NULL, rp, &row, NULL, f, NULL, NULL));
  assert_int_equal(kvc_swa_allocator_available_size(a), 24);
  for (int i = 0; i < 40; i++) assert_int_equal(kvc_swa_allocator_mapping_host(a)[f[i]], 0);
  KVT_OK(kvc_swa_allocator_free(a, f, 40, NULL));
  assert_int_equal(kvc_swa_allocator_available_size(a), 64);
  kvc_swa_allocator_destroy(a);
  /* pure: identity mapping, one allocator */
  a = make_swa(0, 8, 1, KVC_SWA_PURE);
  assert_ptr_equal(kvc_swa_allocator_full(a), kvc_swa_allocator_swa(a));
  int64_t g[3];
  KVT_OK(kvc_swa_allocator_alloc(a, 3, g, NULL, NULL));
  const int64_t q[2] = {3, -1};
  int64_t t[2];
  KVT_OK(kvc_swa_allocator_translate_host(a, q, 2, t));
  assert_int_equal(t[0], 3);
  assert_int_equal(t[1], -1);
  kvt_expect_swa_mapping_synced(a);
  int64_t withpad[3] = {0, g[0], g[2]};
  KVT_OK(kvc_swa_allocator_free_full(a, withpad, 3)); /* no-op */
  assert_int_equal(kvc_swa_allocator_available_size(a), 5);
  KVT_OK(kvc_swa_allocator_free(a, withpad, 3, NULL)); /* 0 filtered */
  assert_int_equal(kvc_swa_allocator_available_size(a), 7);
  KVT_STATUS(kvc_swa_allocator_alloc_decode(a, 1, q, NULL, NULL, NULL, NULL, NULL, NULL), KVC_ERR_UNSUPPORTED);
  kvc_swa_allocator_destroy(a);
  kvc_req_to_token_pool_destroy(rp);
}

/* kvc_swa_allocator_alloc_extend_ex: the same slots, rows and mapping as the plain call on
 * a twin allocator, plus rows_device; refusals (NULL args, rows_device without a
 * req_pool) change nothing. Ring mode goes through the full side's extend_ex. */
static void extend_ex_case(int32_t ps, int64_t ring) {
  kvc_req_to_token_pool *rp = kvt_req_pool(4, 64), *rq = kvt_req_pool(4, 64);
  kvc_swa_allocator_config c = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  c.size_full = 64, c.size_swa = 32, c.page_size = ps, c.ring_size = ring;
  kvc_swa_allocator *a = NULL, *b = NULL;
  c.req_pool = rp;
  KVT_OK(kvc_swa_allocator_create(kvt_ctx, &c, &a));
  c.req_pool = rq;
  KVT_OK(kvc_swa_allocator_create(kvt_ctx, &c, &b));
  int32_t ra[3] = {0, 0, 0}, rb[3] = {0, 0, 0}, spare = 0;
  KVT_OK(kvc_req_to_token_pool_alloc(rp, 1, &spare)); /* rows then are not 1, 2, 3 */
  spare = 0;
  KVT_OK(kvc_req_to_token_pool_alloc(rq, 1, &spare));
  KVT_OK(kvc_req_to_token_pool_alloc(rp, 3, ra));
  KVT_OK(kvc_req_to_token_pool_alloc(rq, 3, rb));
  for (int step = 0; step < 2; step++) { /* the second step continues partial pages */
    const int64_t pre0[3] = {0, 0, 0}, seq0[3] = {5, 3, 6}, pre1[3] = {5, 3, 6}, seq1[3] = {7, 9, 6};
    const int64_t *pre = step ? pre1 : pre0, *seq = step ? seq1 : seq0;
    const int64_t n = step ? 6 : 14;
    int64_t ha[16], hb[16], back[16], rows_back[3] = {-1, -1, -1};
    int64_t *dev = kvt_dev_alloc(sizeof back), *rows_dev = kvt_dev_alloc(sizeof rows_back);
    kvc_extend_args x;
    memset(&x, 0, sizeof x);
    x.batch_size = 3, x.prefix_lens = pre, x.seq_lens = seq, x.out_host = ha, x.out_device = dev;
    x.rows_device = rows_dev;
    snap s0 = take(a);
    KVT_STATUS(kvc_swa_allocator_alloc_extend_ex(a, NULL), KVC_ERR_INVALID_ARGUMENT);
    KVT_STATUS(kvc_swa_allocator_alloc_extend_ex(NULL, &x), KVC_ERR_INVALID_ARGUMENT);
    KVT_STATUS(kvc_swa_allocator_alloc_extend_ex(a, &x), KVC_ERR_INVALID_ARGUMENT); /* no req_pool */
    expect_same(a, &s0);
    x.req_pool = rp, x.req_rows = ra;
    KVT_OK(kvc_swa_allocator_alloc_extend_ex(a, &x));
    KVT_OK(kvc_swa_allocator_alloc_extend(b, 3, pre, seq, NULL, rq, rb, NULL, hb, NULL, NULL));
    for (int64_t i = 0; i < n; i++) assert_int_equal(ha[i], hb[i]);
    KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
    kvt_d2h(back, dev, (size_t)n * 8);
    for (int64_t i = 0; i < n; i++) assert_int_equal(back[i], ha[i]);
    kvt_d2h(rows_back, rows_dev, sizeof rows_back);
    for (int i = 0; i < 3; i++) assert_int_equal(rows_back[i], ra[i]);
    assert_memory_equal(kvc_swa_allocator_mapping_host(a), kvc_swa_allocator_mapping_host(b),
                        (size_t)kvc_swa_allocator_mapping_length(a) * 4);
    for (int i = 0; i < 3; i++)
      assert_memory_equal(kvc_req_to_token_pool_row(rp, ra[i]), kvc_req_to_token_pool_row(rq, rb[i]), 9 * 4);
    kvt_expect_swa_mapping_synced(a);
    KVT_OK(kvc_swa_allocator_check(a));
    kvt_dev_free(dev);
    kvt_dev_free(rows_dev);
  }
  kvc_swa_allocator_destroy(a);
  kvc_swa_allocator_destroy(b);
  kvc_req_to_token_pool_destroy(rp);
  kvc_req_to_token_pool_destroy(rq);
}

static void test_extend_ex_writes_rows_device(void **state) {
  (void)state;
  extend_ex_case(1, 0);
  extend_ex_case(4, 0);
  extend_ex_case(4, 6);
}

/* --- Deferred device-mapping zeroes (kvc_swa_allocator_defer_zero_begin / _end) -------- */

static int64_t launches(void) { return kvc__fault_calls(kvt_ctx, KVC__FAULT_LAUNCH); }
static void count_launches(void) { kvc__fault_set(kvt_ctx, KVC__FAULT_LAUNCH, -1); } /* counter 0, unarmed */

/* The device mapping's entry i (synchronized read). */
static int64_t dmap_at(const kvc_swa_allocator *a, int64_t i) {
  int64_t v;
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  kvt_d2h(&v, kvc_swa_allocator_mapping_device(a) + i, 8);
  return v;
}

/* n slots of 64 full / 48 SWA of page size ps, from a fresh allocator: alloc(n) at page
 * 1, one request's extend otherwise (n a multiple of ps). */
static kvc_swa_allocator *fresh_with(int32_t ps, int64_t n, int64_t *slots) {
  kvc_swa_allocator *a = make_swa(64, 48, ps, 0);
  if (ps == 1) {
    KVT_OK(kvc_swa_allocator_alloc(a, n, slots, NULL, NULL));
  } else {
    const int64_t p0 = 0;
    KVT_OK(kvc_swa_allocator_alloc_extend(a, 1, &p0, &n, NULL, NULL, NULL, NULL, slots, NULL, NULL));
  }
  return a;
}

/* Everything left, in free-list order (both sides: the mapping of what comes out). */
static void drain(kvc_swa_allocator *a, int32_t ps, int64_t *out, int64_t *n) {
  *n = kvc_swa_allocator_available_size(a);
  if (ps == 1) {
    KVT_OK(kvc_swa_allocator_alloc(a, *n, out, NULL, NULL));
  } else {
    const int64_t p0 = 0;
    KVT_OK(kvc_swa_allocator_alloc_extend(a, 1, &p0, n, NULL, NULL, NULL, NULL, out, NULL, NULL));
  }
}

/* Three frees (free, free_swa, free) inside a scope launch nothing; its end launches once;
 * the host state after each free, the free lists' order and the final device mapping
 * are those of the same frees without a scope (three launches). */
static void defer_case(int32_t ps) {
  int64_t fa[24], fb[24];
  kvc_swa_allocator *a = fresh_with(ps, 24, fa), *b = fresh_with(ps, 24, fb);
  assert_memory_equal(fa, fb, sizeof fa);
  const int64_t peer0 = kvc_swa_allocator_mapping_host(a)[fa[0]];
  assert_true(peer0 > 0);
  count_launches();
  KVT_OK(kvc_swa_allocator_free(b, fb, 8, NULL));
  KVT_OK(kvc_swa_allocator_free_swa(b, fb + 8, 8, NULL));
  KVT_OK(kvc_swa_allocator_free(b, fb + 16, 8, NULL));
  assert_int_equal(launches(), 3);
  count_launches();
  KVT_OK(kvc_swa_allocator_defer_zero_begin(a));
  KVT_OK(kvc_swa_allocator_free(a, fa, 8, NULL));
  KVT_OK(kvc_swa_allocator_free_swa(a, fa + 8, 8, NULL));
  KVT_OK(kvc_swa_allocator_free(a, fa + 16, 8, NULL));
  assert_int_equal(launches(), 0);
  assert_int_equal(kvc_swa_allocator_mapping_host(a)[fa[0]], 0); /* the host map at once ... */
  assert_int_equal(dmap_at(a, fa[0]), peer0);                    /* ... the device at the end */
  assert_true(kvc_swa_allocator_zero_pending(a) > 0);
  assert_memory_equal(kvc_swa_allocator_mapping_host(a), kvc_swa_allocator_mapping_host(b),
                      (size_t)kvc_swa_allocator_mapping_length(a) * 4);
  KVT_OK(kvc_swa_allocator_check(a));
  KVT_OK(kvc_swa_allocator_defer_zero_end(a, NULL));
  assert_int_equal(launches(), 1);
  assert_int_equal(kvc_swa_allocator_zero_pending(a), 0);
  kvt_expect_swa_mapping_synced(a);
  int64_t ga[64], gb[64], na, nb;
  drain(a, ps, ga, &na);
  drain(b, ps, gb, &nb);
  assert_int_equal(na, nb);
  assert_memory_equal(ga, gb, (size_t)na * 8);
  assert_memory_equal(kvc_swa_allocator_mapping_host(a), kvc_swa_allocator_mapping_host(b),
                      (size_t)kvc_swa_allocator_mapping_length(a) * 4);
  kvt_expect_swa_mapping_synced(a);
  kvc_swa_allocator_destroy(a);
  kvc_swa_allocator_destroy(b);
}

static void test_deferred_zero_one_launch_same_order(void **state) {
  (void)state;
  defer_case(1);
  defer_case(4);
}

/* The end's launch fails: the frees stay done, the zero stays queued and says so; the
 * next mapping write retries it first (failing, changing nothing, while launches fail);
 * a free refused inside a scope queues nothing; scopes nest; end needs a begin. */
static void test_deferred_zero_failure_rule(void **state) {
  (void)state;
  int64_t f[8];
  kvc_swa_allocator *a = fresh_with(1, 8, f);
  KVT_STATUS(kvc_swa_allocator_defer_zero_end(a, NULL), KVC_ERR_MISUSE);
  KVT_OK(kvc_swa_allocator_defer_zero_begin(a));
  KVT_OK(kvc_swa_allocator_free(a, f, 2, NULL));
  KVT_OK(kvc_swa_allocator_free_swa(a, f + 2, 2, NULL));
  assert_int_equal(kvc_swa_allocator_zero_pending(a), 1); /* slots 1..4: one run */
  /* listed again: refused as outside a scope, nothing queued or released */
  KVT_STATUS(kvc_swa_allocator_free(a, f + 1, 1, NULL), KVC_ERR_MISUSE);
  KVT_STATUS(kvc_swa_allocator_free_swa(a, f + 3, 1, NULL), KVC_ERR_MISUSE);
  assert_int_equal(kvc_swa_allocator_zero_pending(a), 1);
  const int64_t fav = kvc_swa_allocator_full_available_size(a), sav = kvc_swa_allocator_swa_available_size(a);
  assert_int_equal(fav, 64 - 8 + 2);
  assert_int_equal(sav, 48 - 8 + 4);
  kvc__fault_set(kvt_ctx, KVC__FAULT_LAUNCH, 0);
  KVT_STATUS(kvc_swa_allocator_defer_zero_end(a, NULL), KVC_ERR_CUDA);
  if (!strstr(kvc_last_error(kvt_ctx), "the frees are done, the zero stays queued"))
    fail_msg("%s", kvc_last_error(kvt_ctx));
  assert_int_equal(kvc_swa_allocator_zero_pending(a), 1);
  assert_int_equal(kvc_swa_allocator_full_available_size(a), fav);
  assert_int_equal(kvc_swa_allocator_swa_available_size(a), sav);
  KVT_OK(kvc_swa_allocator_check(a));                                    /* the host state is final and consistent */
  KVT_STATUS(kvc_swa_allocator_defer_zero_end(a, NULL), KVC_ERR_MISUSE); /* the scope is closed */
  /* alloc writes the mapping: the queued zero goes first, and fails again */
  int64_t g[2];
  kvc__fault_set(kvt_ctx, KVC__FAULT_LAUNCH, 0);
  KVT_STATUS(kvc_swa_allocator_alloc(a, 2, g, NULL, NULL), KVC_ERR_CUDA);
  assert_int_equal(kvc_swa_allocator_zero_pending(a), 1);
  assert_int_equal(kvc_swa_allocator_full_available_size(a), fav);
  assert_int_equal(kvc_swa_allocator_swa_available_size(a), sav);
  /* a free outside a scope launches the queue before its own zero */
  kvc__fault_set(kvt_ctx, KVC__FAULT_LAUNCH, 0);
  KVT_STATUS(kvc_swa_allocator_free(a, f + 4, 1, NULL), KVC_ERR_CUDA);
  assert_int_equal(kvc_swa_allocator_full_available_size(a), fav);
  count_launches();
  KVT_OK(kvc_swa_allocator_alloc(a, 2, g, NULL, NULL));
  assert_int_equal(launches(), 1); /* the queued zero rides in the new pairs' launch */
  assert_int_equal(kvc_swa_allocator_zero_pending(a), 0);
  kvt_expect_swa_mapping_synced(a);
  /* nested: the inner end launches nothing */
  KVT_OK(kvc_swa_allocator_defer_zero_begin(a));
  KVT_OK(kvc_swa_allocator_defer_zero_begin(a));
  KVT_OK(kvc_swa_allocator_free(a, f + 4, 2, NULL));
  count_launches();
  KVT_OK(kvc_swa_allocator_defer_zero_end(a, NULL));
  assert_int_equal(launches(), 0);
  assert_int_equal(kvc_swa_allocator_zero_pending(a), 1);
  KVT_OK(kvc_swa_allocator_defer_zero_end(a, NULL));
  assert_int_equal(launches(), 1);
  kvt_expect_swa_mapping_synced(a);
  kvc__fault_reset(kvt_ctx);
  KVT_OK(kvc_swa_allocator_check(a));
  kvc_swa_allocator_destroy(a);
}

/* One allocation of `n` tokens (whole pages): alloc(n) (the map_set path, page 1 only) or
 * alloc_extend (the full side's plan kernel writes the pairs). */
static kvc_status alloc_n(kvc_swa_allocator *a, int32_t ps, bool extend, int64_t n, int64_t *out) {
  const int64_t p0 = 0;
  if (!extend && ps == 1) return kvc_swa_allocator_alloc(a, n, out, NULL, NULL);
  return kvc_swa_allocator_alloc_extend(a, 1, &p0, &n, NULL, NULL, NULL, NULL, out, NULL, NULL);
}

/* The queue rides in the next device-map write's launch (alloc(n)'s pair write, and the
 * plan kernel of alloc_extend at page > 1; at page 1 alloc_extend launches the queue
 * alone first), page 1 and 16: one launch with the queue as without it,
 * the device mapping equal to the host one after it. When the write's new slots are on a
 * queued page (the freed page comes straight back: both sides drained first), the queue
 * goes first alone (two launches) and the new pairs win. A failed merged launch changes
 * nothing (queue, sizes, mapping) and the retry carries it. The host twins apply the
 * carried zeroes after the pairs, so a missed overlap loses pairs here. */
static void test_zero_carried_by_next_write(void **state) {
  (void)state;
  for (int32_t ps = 1; ps <= 16; ps += 15)
    for (int extend = 0; extend < 2; extend++) {
      int64_t f[64], g[64], n;
      /* page 1: no overlap, the freed slot goes to the back of the token free list (SGLang
       * appends). Page 16: SGLang's paged free prepends, so the freed page comes straight
       * back: alloc_extend drops it from the carried runs (one launch). */
      kvc_swa_allocator *a = make_swa(1024, 1024, ps, 0);
      KVT_OK(alloc_n(a, ps, extend, 2 * ps, f));
      KVT_OK(kvc_swa_allocator_defer_zero_begin(a));
      KVT_OK(kvc_swa_allocator_free(a, f, (size_t)ps, NULL));
      assert_int_equal(kvc_swa_allocator_zero_pending(a), 1);
      KVT_OK(kvc_swa_allocator_check(a)); /* queued entries: host 0, pages marked */
      const int64_t fav = kvc_swa_allocator_full_available_size(a);
      kvc__fault_set(kvt_ctx, KVC__FAULT_LAUNCH, 0);
      KVT_STATUS(alloc_n(a, ps, extend, ps, g), KVC_ERR_CUDA);
      assert_int_equal(kvc_swa_allocator_zero_pending(a), 1);
      assert_int_equal(kvc_swa_allocator_full_available_size(a), fav);
      KVT_OK(kvc_swa_allocator_check(a));
      count_launches();
      KVT_OK(alloc_n(a, ps, extend, ps, g));
      assert_int_equal(launches(), ps == 1 && extend ? 2 : 1); /* page-1 alloc_extend: alone first */
      assert_int_equal(kvc_swa_allocator_zero_pending(a), 0);
      assert_int_equal(g[0] / ps != f[0] / ps, ps == 1);
      kvt_expect_swa_mapping_synced(a);
      count_launches();
      KVT_OK(kvc_swa_allocator_defer_zero_end(a, NULL));
      assert_int_equal(launches(), 0); /* nothing left to launch */
      kvc_swa_allocator_destroy(a);
      /* overlap: every page held, two freed and one allocated again at once, half used at
       * page 16 (its unused tail must read 0 too). alloc(n) launches the queue alone
       * first (two launches); alloc_extend drops the page from the carried runs (one). */
      a = make_swa(64, 64, ps, 0);
      drain(a, ps, f, &n);
      KVT_OK(kvc_swa_allocator_defer_zero_begin(a));
      KVT_OK(kvc_swa_allocator_free(a, f + 3 * ps, (size_t)ps, NULL));
      KVT_OK(kvc_swa_allocator_free(a, f + ps, (size_t)ps, NULL));
      assert_int_equal(kvc_swa_allocator_zero_pending(a), 2);
      const int64_t half = ps == 1 ? 1 : ps / 2;
      count_launches();
      KVT_OK(alloc_n(a, ps, extend, half, g));
      assert_true(g[0] / ps == f[ps] / ps || g[0] / ps == f[3 * ps] / ps); /* a queued page came back */
      assert_int_equal(launches(), ps == 1 ? 2 : 1);
      assert_int_equal(kvc_swa_allocator_zero_pending(a), 0);
      kvt_expect_swa_mapping_synced(a);
      KVT_OK(kvc_swa_allocator_check(a));
      KVT_OK(kvc_swa_allocator_defer_zero_end(a, NULL));
      /* zero_flush: one launch, then none */
      KVT_OK(kvc_swa_allocator_defer_zero_begin(a));
      KVT_OK(kvc_swa_allocator_free(a, g, (size_t)half, NULL));
      KVT_OK(kvc_swa_allocator_defer_zero_end(a, NULL)); /* launches: the public end is eager */
      KVT_OK(kvc_swa_allocator_defer_zero_begin(a));
      KVT_OK(kvc_swa_allocator_free(a, f, (size_t)ps, NULL));
      count_launches();
      kvc__fault_set(kvt_ctx, KVC__FAULT_LAUNCH, 0);
      KVT_STATUS(kvc_swa_allocator_zero_flush(a, NULL), KVC_ERR_CUDA);
      assert_int_equal(kvc_swa_allocator_zero_pending(a), 1);
      count_launches();
      KVT_OK(kvc_swa_allocator_zero_flush(a, NULL));
      KVT_OK(kvc_swa_allocator_zero_flush(a, NULL));
      assert_int_equal(launches(), 1);
      assert_int_equal(kvc_swa_allocator_zero_pending(a), 0);
      kvt_expect_swa_mapping_synced(a);
      KVT_OK(kvc_swa_allocator_defer_zero_end(a, NULL));
      KVT_OK(kvc_swa_allocator_check(a));
      kvc_swa_allocator_destroy(a);
    }
  kvc__fault_reset(kvt_ctx);
}

/* alloc_decode carries the queue in its one launch, at page 1 and 4, with the same slots
 * and host mapping as a twin that zeroes eagerly. At page 4 SGLang's paged free puts the
 * freed pages at the front of the free ring, so the request that opens a page takes a
 * queued one: the launch drops it from the runs and writes it whole (its pair, then 0
 * over the page's other slots; without that the device keeps their stale entries). At
 * page 1 the freed slots go to the back. A failed launch changes nothing (queue, sizes,
 * mapping, the rows' mirror) and the retry carries the queue; then nothing is left. */
static void test_zero_carried_by_decode(void **state) {
  (void)state;
  for (int32_t ps = 1; ps <= 4; ps += 3) {
    kvc_swa_allocator *a = make_swa(64, 64, ps, 0), *b = make_swa(64, 64, ps, 0);
    kvc_req_to_token_pool *ra = kvt_req_pool(4, 64), *rb = kvt_req_pool(4, 64);
    int32_t rows[3] = {0, 0, 0}, rows_b[3] = {0, 0, 0};
    KVT_OK(kvc_req_to_token_pool_alloc(ra, 3, rows));
    KVT_OK(kvc_req_to_token_pool_alloc(rb, 3, rows_b));
    /* request 0 opens a page at its next token, request 1 continues one (ps > 1),
     * request 2 is the victim: 3 pages */
    const int64_t pre[3] = {0, 0, 0}, seq[3] = {2 * ps, ps == 1 ? 2 : 2 * ps - 1, 3 * ps};
    int64_t fa[32], fb[32]; /* 27 slots at page 4 */
    KVT_OK(kvc_swa_allocator_alloc_extend(a, 3, pre, seq, NULL, ra, rows, NULL, fa, NULL, NULL));
    KVT_OK(kvc_swa_allocator_alloc_extend(b, 3, pre, seq, NULL, rb, rows_b, NULL, fb, NULL, NULL));
    const int64_t victim = seq[0] + seq[1];
    KVT_OK(kvc_swa_allocator_defer_zero_begin(a));
    KVT_OK(kvc_swa_allocator_free(a, fa + victim, (size_t)seq[2], NULL));
    KVT_OK(kvc_swa_allocator_free(b, fb + victim, (size_t)seq[2], NULL));
    assert_true(kvc_swa_allocator_zero_pending(a) > 0);
    const int64_t step[2] = {seq[0] + 1, seq[1] + 1};
    const int64_t fav = kvc_swa_allocator_full_available_size(a), sav = kvc_swa_allocator_swa_available_size(a);
    const int64_t pending = kvc_swa_allocator_zero_pending(a);
    int32_t mirror[2][16];
    for (int r = 0; r < 2; r++) memcpy(mirror[r], kvc_req_to_token_pool_row(ra, rows[r]), sizeof mirror[r]);
    int64_t oa[2], ob[2];
    kvc__fault_set(kvt_ctx, KVC__FAULT_LAUNCH, 0);
    KVT_STATUS(kvc_swa_allocator_alloc_decode(a, 2, step, NULL, ra, rows, oa, NULL, NULL), KVC_ERR_CUDA);
    assert_int_equal(kvc_swa_allocator_zero_pending(a), pending);
    assert_int_equal(kvc_swa_allocator_full_available_size(a), fav);
    assert_int_equal(kvc_swa_allocator_swa_available_size(a), sav);
    for (int r = 0; r < 2; r++)
      assert_memory_equal(mirror[r], kvc_req_to_token_pool_row(ra, rows[r]), sizeof mirror[r]);
    KVT_OK(kvc_swa_allocator_check(a));
    count_launches();
    KVT_OK(kvc_swa_allocator_alloc_decode(a, 2, step, NULL, ra, rows, oa, NULL, NULL));
    assert_int_equal(launches(), 1); /* the decode's own launch, carrying the queue */
    assert_int_equal(kvc_swa_allocator_zero_pending(a), 0);
    KVT_OK(kvc_swa_allocator_alloc_decode(b, 2, step, NULL, rb, rows_b, ob, NULL, NULL));
    assert_memory_equal(oa, ob, sizeof oa);
    assert_int_equal(oa[0] % ps, 0);
    if (ps > 1) { /* the opened page is one the victim gave back */
      bool queued = false;
      for (int64_t t = 0; t < seq[2]; t++) queued |= fa[victim + t] / ps == oa[0] / ps;
      assert_true(queued);
    }
    assert_memory_equal(kvc_swa_allocator_mapping_host(a), kvc_swa_allocator_mapping_host(b),
                        (size_t)kvc_swa_allocator_mapping_length(a) * 4);
    kvt_expect_swa_mapping_synced(a);
    kvt_expect_swa_mapping_synced(b);
    KVT_OK(kvc_swa_allocator_check(a));
    count_launches();
    KVT_OK(kvc_swa_allocator_defer_zero_end(a, NULL));
    assert_int_equal(launches(), 0); /* nothing left to launch */
    kvc_req_to_token_pool_destroy(ra);
    kvc_req_to_token_pool_destroy(rb);
    kvc_swa_allocator_destroy(a);
    kvc_swa_allocator_destroy(b);
  }
  kvc__fault_reset(kvt_ctx);
}

/* A FIFO model of both page-1 free lists and the mapping, for the direct free below. */
typedef struct fifo_model {
  int64_t q[2][256];
  size_t head[2], tail[2];
  int32_t map[64];
} fifo_model;

static void fm_push(fifo_model *m, int side, int64_t id) { m->q[side][m->tail[side]++ % 256] = id; }
static int64_t fm_pop(fifo_model *m, int side) { return m->q[side][m->head[side]++ % 256]; }

/* The page-1 free that validates and appends to both free lists in one pass (swa17c),
 * checked against the FIFO model while the two rings' tails wrap many times (20 full
 * slots in a ring of 32, 12 SWA slots in a ring of 16): every free puts its full slots
 * and its peers at the back in call order; a list refused after good slots (a repeat, a
 * slot not held, a peer freed by free_swa), a free whose zero launch fails outside a
 * scope (KVC_ERR_CUDA) and one inside a scope whose queue launches at the end change
 * nothing (mapping, both lists, device mapping) or are as documented; free_swa of a
 * peer then free_full keeps the order too. */
static void test_direct_free_page1_rings_wrap(void **state) {
  (void)state;
  kvc_swa_allocator *a = make_swa(20, 12, 1, 0);
  fifo_model m;
  memset(&m, 0, sizeof m);
  for (int64_t k = 1; k <= 20; k++) fm_push(&m, 0, k);
  for (int64_t k = 1; k <= 12; k++) fm_push(&m, 1, k);
  const int32_t *map = kvc_swa_allocator_mapping_host(a);
  uint64_t rng = 0x5eed;
  for (int round = 0; round < 60; round++) {
    const int64_t n = 3 + round % 7; /* up to 9 of the 12 SWA slots */
    int64_t f[16];
    KVT_OK(kvc_swa_allocator_alloc(a, n + 1, f, NULL, NULL));
    for (int64_t i = 0; i <= n; i++) {
      assert_int_equal(f[i], fm_pop(&m, 0));
      m.map[f[i]] = (int32_t)fm_pop(&m, 1);
      assert_int_equal(map[f[i]], m.map[f[i]]);
    }
    /* alloc leaves both sides' internal backups live until a free (their ring images
     * past the tails), and the direct free does not run then: this one goes first */
    KVT_OK(kvc_swa_allocator_free(a, f + n, 1, NULL));
    fm_push(&m, 0, f[n]);
    fm_push(&m, 1, m.map[f[n]]);
    m.map[f[n]] = 0;
    for (int64_t i = n - 1; i > 0; i--) { /* a free in scrambled order */
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      const int64_t j = (int64_t)((rng >> 33) % (uint64_t)(i + 1)), t = f[i];
      f[i] = f[j], f[j] = t;
    }
    snap s = take(a);
    int64_t bad[17];
    memcpy(bad, f, (size_t)n * sizeof *f);
    bad[n] = f[round % n]; /* listed twice, after n good slots */
    KVT_STATUS(kvc_swa_allocator_free(a, bad, (size_t)n + 1, NULL), KVC_ERR_MISUSE);
    expect_same(a, &s);
    s = take(a);
    bad[n] = 21; /* past the end */
    KVT_STATUS(kvc_swa_allocator_free_swa(a, bad, (size_t)n + 1, NULL), KVC_ERR_MISUSE);
    expect_same(a, &s);
    s = take(a);
    /* Extreme ids before the checks: the head's run sample must not overflow (the
     * fuzzer found INT64_MAX followed by anything: UBSan in fuzz_flow). */
    const int64_t extreme[3] = {INT64_MAX, INT64_MAX, INT64_MIN};
    KVT_STATUS(kvc_swa_allocator_free(a, extreme, 3, NULL), KVC_ERR_MISUSE);
    expect_same(a, &s);
    s = take(a);
    kvc__fault_set(kvt_ctx, KVC__FAULT_LAUNCH, 0); /* outside a scope: the zero launches now, and fails */
    KVT_STATUS(kvc_swa_allocator_free(a, f, (size_t)n, NULL), KVC_ERR_CUDA);
    kvc__fault_reset(kvt_ctx);
    expect_same(a, &s);
    if (round % 3 == 0) { /* the first slot's peer goes first (window eviction), then the rest */
      KVT_OK(kvc_swa_allocator_free_swa(a, f, 1, NULL));
      fm_push(&m, 1, m.map[f[0]]);
      m.map[f[0]] = 0;
      s = take(a);
      KVT_STATUS(kvc_swa_allocator_free(a, f, (size_t)n, NULL), KVC_ERR_MISUSE); /* f[0] has no peer */
      expect_same(a, &s);
      KVT_OK(kvc_swa_allocator_free_full(a, f, 1));
      fm_push(&m, 0, f[0]);
    }
    const int64_t *rest = round % 3 == 0 ? f + 1 : f;
    const size_t nr = (size_t)(round % 3 == 0 ? n - 1 : n);
    if (round % 2) KVT_OK(kvc_swa_allocator_defer_zero_begin(a));
    KVT_OK(kvc_swa_allocator_free(a, rest, nr, NULL));
    if (round % 2) KVT_OK(kvc_swa_allocator_defer_zero_end(a, NULL));
    for (size_t i = 0; i < nr; i++) {
      fm_push(&m, 0, rest[i]);
      fm_push(&m, 1, m.map[rest[i]]);
      m.map[rest[i]] = 0;
      assert_int_equal(map[rest[i]], 0);
    }
    kvt_expect_swa_mapping_synced(a);
    KVT_OK(kvc_swa_allocator_check(a));
    assert_int_equal(kvc_swa_allocator_full_available_size(a), 20);
    assert_int_equal(kvc_swa_allocator_swa_available_size(a), 12);
  }
  kvc_swa_allocator_destroy(a);
}

/* A corrupt mapping naming one SWA slot for two full slots (page 1): free and free_swa
 * refuse it before anything changes. The checked path used to zero both entries (host and
 * device) and only then meet the repeat in the SWA side's own free. */
static void test_repeated_peer_refused_unchanged(void **state) {
  (void)state;
  for (int which = 0; which < 2; which++) {
    kvc_swa_allocator *a = make_swa(16, 8, 1, 0);
    int64_t f[4];
    KVT_OK(kvc_swa_allocator_alloc(a, 4, f, NULL, NULL));
    KVT_OK(kvc_swa_allocator_free(a, f + 3, 1, NULL)); /* no live backup image: the direct pass runs first */
    snap s = take(a);
    const int32_t keep = a->map[f[2]];
    a->map[f[2]] = a->map[f[0]];
    const kvc_status st = which ? kvc_swa_allocator_free_swa(a, f, 3, NULL) : kvc_swa_allocator_free(a, f, 3, NULL);
    assert_int_equal(st, KVC_ERR_INTERNAL);
    assert_non_null(strstr(kvc_last_error(kvt_ctx), "as an earlier slot does"));
    a->map[f[2]] = keep;
    expect_same(a, &s);
    KVT_OK(kvc_swa_allocator_free(a, f, 3, NULL));
    kvc_swa_allocator_destroy(a);
  }
}

/* Queueing needs host memory: a failed allocation of the work space refuses the free
 * (HOST_OOM, nothing changed), one of the queue makes that free launch its own zero. */
static void test_deferred_zero_queue_oom_launches_instead(void **state) {
  (void)state;
  int launched = 0;
  for (int64_t at = 0;; at++) {
    int64_t f[8];
    kvc_swa_allocator *a = fresh_with(1, 8, f);
    KVT_OK(kvc_swa_allocator_defer_zero_begin(a));
    snap s = take(a);
    count_launches();
    kvc__fault_set(kvt_ctx, KVC__FAULT_HOST_ALLOC, at);
    const kvc_status st = kvc_swa_allocator_free(a, f, 4, NULL);
    const int64_t pending = kvc_swa_allocator_zero_pending(a), n_launch = launches();
    kvc__fault_set(kvt_ctx, KVC__FAULT_HOST_ALLOC, -1); /* (a reset would clear the launch count too) */
    if (st == KVC_OK) free(s.map);
    else assert_int_equal(st, KVC_ERR_HOST_OOM), expect_same(a, &s);
    if (st == KVC_OK && pending == 0) { /* the queue's allocation failed: launched at once */
      assert_int_equal(n_launch, 1);
      kvt_expect_swa_mapping_synced(a);
      launched++;
    }
    if (st == KVC_OK && pending == 1) assert_int_equal(n_launch, 0);
    KVT_OK(kvc_swa_allocator_defer_zero_end(a, NULL));
    kvt_expect_swa_mapping_synced(a);
    kvc_swa_allocator_destroy(a);
    if (st == KVC_OK && pending == 1) break; /* no fault left to hit */
  }
  assert_int_equal(launched, 1);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_create_and_sizes),
    cmocka_unit_test(test_token_alloc_mapping_and_translate),
    cmocka_unit_test(test_free_rising_past_the_end_is_refused),
    cmocka_unit_test(test_one_pass_free_refusals_and_order_page1),
    cmocka_unit_test(test_one_pass_free_refusals_and_order_paged),
    cmocka_unit_test(test_decode_full_side_misuse_rolls_back_swa_side),
    cmocka_unit_test(test_extend_rollback_and_mapped_partial_pages),
    cmocka_unit_test(test_out_of_slots_changes_nothing),
    cmocka_unit_test(test_paged_window_eviction),
    cmocka_unit_test(test_free_group_ordering),
    cmocka_unit_test(test_swa_tail),
    cmocka_unit_test(test_ring_and_pure),
    cmocka_unit_test(test_extend_ex_writes_rows_device),
    cmocka_unit_test(test_deferred_zero_one_launch_same_order),
    cmocka_unit_test(test_deferred_zero_failure_rule),
    cmocka_unit_test(test_zero_carried_by_next_write),
    cmocka_unit_test(test_zero_carried_by_decode),
    cmocka_unit_test(test_deferred_zero_queue_oom_launches_instead),
    cmocka_unit_test(test_direct_free_page1_rings_wrap),
    cmocka_unit_test(test_repeated_peer_refused_unchanged),
};
KVT_MAIN("swa_allocator", tests)
