/*
 * fuzz_allocator.c — libFuzzer harness: the input bytes drive a sequence of allocator and
 * req_to_token pool calls with arbitrary arguments (out-of-range, negative, duplicate,
 * misaligned and huge values, NULL pointers, calls in the wrong state) on the host
 * backend. After every call: no crash (ASan/UBSan watch), the status is a known code,
 * and kvc_allocator_check / kvc_req_to_token_pool_check / audit_device pass, and
 * free + deferred + held == num_pages.
 *
 * Input: byte 0 picks the geometry (kind, page size, need_sort), then one opcode byte and
 * its argument bytes per call.
 */
#include "fuzz_common.h"

static kvc_context *g_ctx;

#define MAXN 96
#define ROWS 6
#define WIDTH 48

static int64_t g_slots[4 * MAXN], g_out[4 * MAXN];
static int64_t *g_dout;

/* The counters' invariants; `s` is left holding the stats (the next call's "before"). */
static void counters(kvc_allocator *a, kvc_allocator_stats *sp) {
  kvc_allocator_stats s;
  FZ_AUDIT(kvc_allocator_get_stats(a, &s));
  *sp = s;
  if (s.free_pages + s.deferred_pages + s.held_pages != s.num_pages) abort();
  if (kvc_allocator_available_size(a) != (s.free_pages + s.deferred_pages) * kvc_allocator_page_size(a)) abort();
}

static void audit(kvc_allocator *a, kvc_req_to_token_pool *rp) {
  FZ_AUDIT(kvc_allocator_check(a));
  FZ_AUDIT(kvc_req_to_token_pool_audit_device(rp, NULL)); /* includes _check */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_host_context(&g_ctx, &g_dout, 4 * MAXN * 8);
  fz f = {data, size};
  const uint8_t geo = fz_u8(&f);
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  static const int32_t pss[4] = {1, 2, 4, 3};
  ac.page_size = pss[geo & 3];
  ac.kind = ac.page_size == 1 && (geo & 4) ? KVC_ALLOCATOR_TOKEN : KVC_ALLOCATOR_PAGED;
  ac.flags = (geo & 8) ? KVC_ALLOCATOR_NEED_SORT : 0;
  ac.size = 64 + (geo >> 4) * 7;
  /* One allocator per geometry byte and one req pool, made on first use and reset before
   * every input (fuzz_common.h: checked against their fresh state). */
  static kvc_allocator *pools[256];
  static fz_alloc_sig fresh[256];
  static kvc_req_to_token_pool *rp;
  kvc_allocator *a = pools[geo];
  if (!a) {
    if (kvc_allocator_create(g_ctx, &ac, &pools[geo]) != KVC_OK) abort();
    a = pools[geo];
    fz_alloc_sig_take(a, &fresh[geo]);
  }
  fz_alloc_reset(a, &fresh[geo]);
  if (!rp) {
    kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
    rc.size = ROWS, rc.max_context_len = WIDTH;
    if (kvc_req_to_token_pool_create(g_ctx, &rc, &rp) != KVC_OK) abort();
  }
  fz_req_pool_reset(rp, ROWS, WIDTH);
  const int64_t ps = ac.page_size, np = ac.size / ps;
  int64_t held[4 * MAXN]; /* slots handed out, as a pool of plausible arguments */
  size_t nheld = 0;
  kvc_allocator_state bk;
  memset(&bk, 0, sizeof bk);

  unsigned oks = 0;
  kvc_allocator_stats now;
  counters(a, &now);
  for (int step = 0; step < 256 && f.n; step++) {
    const uint8_t op = fz_u8(&f);
    kvc_status st = KVC_OK;
    const kvc_allocator_stats s0 = now; /* taken after the previous call */
    const int32_t rows0 = kvc_req_to_token_pool_available(rp);
    switch (op % 16) {
    case 0: { /* alloc(n) */
      int64_t n = fz_int(&f, 2 * ps);
      if (n > 0 && n <= MAXN) {
        st = kvc_allocator_alloc(a, n, g_out);
        if (st == KVC_OK)
          for (int64_t i = 0; i < n && nheld < 4 * MAXN; i++) held[nheld++] = g_out[i];
      } else {
        st = kvc_allocator_alloc(a, n, (fz_u8(&f) & 1) ? NULL : g_out);
      }
      break;
    }
    case 1: { /* free of arbitrary or held slots (duplicates, padding, out of range) */
      size_t n = fz_u8(&f) % 9;
      for (size_t i = 0; i < n; i++) {
        uint8_t k = fz_u8(&f);
        g_slots[i] = (k & 1) && nheld ? held[k % nheld] : fz_int(&f, np * ps);
      }
      const int64_t *list = (fz_u8(&f) & 7) ? g_slots : NULL;
      if (n > 1 && (fz_u8(&f) & 1)) {
        /* Two frees in turn, checked first: kvc_allocator_check_free's verdict must be the
         * pair's (OK iff both succeed, else the first refusal's status). */
        const size_t cut = fz_u8(&f) % (n + 1);
        const int64_t *lists[2] = {list, list ? list + cut : NULL};
        const size_t counts[2] = {cut, n - cut};
        const kvc_status chk = kvc_allocator_check_free(a, lists, counts, 2);
        st = kvc_allocator_free(a, lists[0], counts[0]);
        if (st == KVC_OK) {
          st = kvc_allocator_free(a, lists[1], counts[1]);
          if (chk != st) abort();
          /* A refused second free after a first that freed: the pair did change the pools
           * (the harness' refused-call check is for one call), so the op counts as done. */
          st = KVC_OK;
        } else if (chk != st) {
          abort();
        }
      } else {
        st = kvc_allocator_free(a, list, n);
      }
      if (st == KVC_OK) nheld = 0; /* forget: some are free now */
      break;
    }
    case 2: { /* free_segment of a row */
      int32_t row = (int32_t)fz_int(&f, ROWS);
      int64_t start = fz_int(&f, ps), n = fz_u8(&f) % 20;
      const int32_t *m = kvc_req_to_token_pool_row(rp, row);
      if (m && start >= 0 && start <= WIDTH && start + n <= WIDTH) {
        for (int64_t i = 0; i < n; i++) g_slots[i] = m[start + i];
        st = kvc_allocator_free_segment(a, g_slots, (size_t)n, start);
        if (st == KVC_OK) nheld = 0;
      } else {
        st = kvc_allocator_free_segment(a, g_slots, (size_t)n, start);
      }
      break;
    }
    case 3: st = kvc_allocator_free_group_begin(a); break;
    case 4: st = kvc_allocator_free_group_end(a); break;
    case 5: st = kvc_allocator_merge_and_sort_free(a); break;
    case 6: st = kvc_allocator_backup_state(a, &bk); break;
    case 7: {
      kvc_allocator_state s = bk;
      if (fz_u8(&f) == 0xff) s.opaque_[fz_u8(&f) & 3] ^= fz_u32(&f); /* forged */
      st = kvc_allocator_restore_state(a, &s);
      if (st == KVC_OK) nheld = 0;
      break;
    }
    case 8:
      st = kvc_allocator_clear(a);
      nheld = 0;
      break;
    case 9: { /* req pool alloc with kept / new / bogus rows */
      int32_t rows[4];
      size_t n = fz_u8(&f) % 5;
      for (size_t i = 0; i < n; i++) rows[i] = (fz_u8(&f) & 1) ? 0 : (int32_t)fz_int(&f, ROWS);
      st = kvc_req_to_token_pool_alloc(rp, n, rows);
      break;
    }
    case 10: st = kvc_req_to_token_pool_free(rp, (int32_t)fz_int(&f, ROWS)); break;
    case 11: { /* alloc_extend with rows, lengths, last_locs and prefix slots from the input */
      size_t bs = fz_u8(&f) % 4;
      int64_t pre[4], seq[4], last[4];
      int32_t rows[4];
      const int64_t *pslots[4] = {NULL, NULL, NULL, NULL};
      for (size_t i = 0; i < bs; i++) {
        rows[i] = (int32_t)fz_int(&f, ROWS);
        const int32_t *m = kvc_req_to_token_pool_row(rp, rows[i] > 0 && rows[i] <= ROWS ? rows[i] : 1);
        pre[i] = fz_int(&f, 8);
        seq[i] = (fz_u8(&f) & 3) ? (pre[i] >= 0 && pre[i] < WIDTH ? pre[i] + fz_u8(&f) % 16 : 3) : fz_int(&f, WIDTH);
        last[i] = (fz_u8(&f) & 1) && pre[i] > 0 && pre[i] <= WIDTH ? m[pre[i] - 1] : fz_int(&f, np * ps);
        if ((fz_u8(&f) & 7) == 0 && pre[i] > 0 && pre[i] <= WIDTH) {
          for (int64_t t = 0; t < pre[i]; t++) g_slots[i * WIDTH + t] = m[t];
          pslots[i] = g_slots + i * WIDTH;
        }
      }
      const uint8_t mode = fz_u8(&f);
      int64_t tokens = 0;
      for (size_t i = 0; i < bs; i++)
        tokens += pre[i] >= 0 && seq[i] > pre[i] && seq[i] - pre[i] < MAXN ? seq[i] - pre[i] : MAXN;
      int64_t *oh = tokens <= 4 * MAXN && (mode & 4) ? g_out : NULL;
      int64_t *od = tokens <= 4 * MAXN && (mode & 8) ? g_dout : NULL;
      st = kvc_allocator_alloc_extend(a, bs, pre, seq, (mode & 1) ? last : NULL, (mode & 2) ? rp : NULL, rows,
                                      (mode & 16) ? pslots : NULL, oh, od, NULL);
      break;
    }
    case 12: { /* alloc_decode */
      size_t bs = fz_u8(&f) % 4;
      int64_t seq[4], last[4];
      int32_t rows[4];
      for (size_t i = 0; i < bs; i++) {
        rows[i] = (int32_t)fz_int(&f, ROWS);
        seq[i] = fz_int(&f, 12);
        last[i] = fz_int(&f, np * ps);
      }
      const uint8_t mode = fz_u8(&f);
      st = kvc_allocator_alloc_decode(a, bs, seq, (mode & 1) ? last : NULL, (mode & 2) ? rp : NULL, rows,
                                      (mode & 4) ? g_out : NULL, (mode & 8) ? g_dout : NULL, NULL);
      break;
    }
    case 13: { /* req pool write */
      int32_t row = (int32_t)fz_int(&f, ROWS), start = (int32_t)fz_int(&f, 8);
      size_t n = fz_u8(&f) % 12;
      for (size_t i = 0; i < n; i++) g_slots[i] = fz_int(&f, 200);
      st = kvc_req_to_token_pool_write(rp, row, start, g_slots, n, NULL);
      break;
    }
    case 14: st = kvc_req_to_token_pool_clear(rp); break;
    case 15: { /* NULL / dead handles and junk sizes: must be statuses */
      FZ_STATUS(kvc_allocator_alloc(NULL, 1, g_out));
      FZ_STATUS(kvc_allocator_free(NULL, g_slots, 1));
      FZ_STATUS(kvc_req_to_token_pool_alloc(NULL, 1, NULL));
      FZ_STATUS(kvc_allocator_get_stats(a, NULL));
      kvc_allocator_config bad = ac;
      bad.size = fz_int(&f, 1 << 12), bad.page_size = (int32_t)fz_int(&f, 64);
      if (bad.size > (1 << 12) && bad.size < INT32_MAX) bad.size = 1 << 12; /* valid but slow */
      kvc_allocator *b = NULL;
      if (kvc_allocator_create(g_ctx, &bad, &b) == KVC_OK) {
        FZ_AUDIT(kvc_allocator_check(b));
        kvc_allocator_destroy(b);
      }
      break;
    }
    }
    FZ_STATUS(st);
    /* Counters after every call (O(1)); a refused call leaves the allocator's counters
     * and the req pool's free rows unchanged; the full audits after every
     * FZ_AUDIT_EVERY-th call that changed state (OK) and at the end: anything a call
     * broke is caught by the next full audit. */
    counters(a, &now);
    if (st != KVC_OK) {
      /* (free vs deferred may shift: a need_sort alloc short of pages merges first.) */
      if (now.held_pages != s0.held_pages || now.free_pages + now.deferred_pages != s0.free_pages + s0.deferred_pages ||
          kvc_req_to_token_pool_available(rp) != rows0) {
        fprintf(stderr, "step %d op %d: refused call (%s: %s) changed the pools\n", step, op % 16, kvc_status_name(st),
                kvc_last_error(g_ctx));
        abort();
      }
    }
    if (st == KVC_OK && ++oks % FZ_AUDIT_EVERY == 0) audit(a, rp);
  }
  audit(a, rp);
  return 0; /* the pools live on; the next input resets them */
}
