/*
 * fuzz_common.h — shared by the libFuzzer harnesses: a byte reader that turns the input
 * into call arguments, biased towards the interesting values (0, -1, boundaries, huge),
 * and the "misuse returns a status" check.
 */
#ifndef KVC_FUZZ_COMMON_H
#define KVC_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"

/* The harnesses' process-lifetime host-backend context and `bytes` of device output
 * (created on the first input, kept across inputs); aborts when either fails. */
static inline void fz_host_context(kvc_context **ctx, int64_t **dout, size_t bytes) {
  if (*ctx) return;
  kvc_context_config cfg = KVC_CONTEXT_CONFIG_INIT;
  cfg.backend = KVC_BACKEND_HOST;
  if (kvc_context_create(&cfg, ctx) != KVC_OK || kvc_memory_alloc(*ctx, bytes, (void **)dout) != KVC_OK) abort();
}

/* --- Pools reused across inputs ----------------------------------------------------------
 * Creating and destroying the pools for every input cost a fifth of each execution (ASan
 * allocations, fresh pages). The harnesses keep one pool per configuration for the whole
 * process and reset it before each input. A reset must leave exactly the state of a fresh
 * create, or an input would behave differently when run alone (a crash would not
 * reproduce): fz_fresh_* records the fresh state once, at create, and every reset is
 * compared against it (counters, allocation order of every page / row, table contents). */

/* An allocator's observable state: the counters (not the cumulative `merges`) and the
 * order in which a drain hands out its pages. Drains, then clears. */
typedef struct fz_alloc_sig {
  kvc_allocator_stats st;
  int64_t avail;
  int64_t order[1024];
} fz_alloc_sig;

static inline void fz_alloc_sig_take(kvc_allocator *a, fz_alloc_sig *sig) {
  memset(sig, 0, sizeof *sig);
  if (kvc_allocator_get_stats(a, &sig->st) != KVC_OK) abort();
  sig->st.merges = 0;
  sig->avail = kvc_allocator_available_size(a);
  if (sig->avail > (int64_t)(sizeof sig->order / sizeof sig->order[0])) abort();
  if (sig->avail && kvc_allocator_alloc(a, sig->avail, sig->order) != KVC_OK) abort();
  if (kvc_allocator_clear(a) != KVC_OK) abort();
}

/* Resets `a` (clear) and checks it against its fresh signature. */
static inline void fz_alloc_reset(kvc_allocator *a, const fz_alloc_sig *fresh) {
  static fz_alloc_sig now;
  if (kvc_allocator_clear(a) != KVC_OK) abort();
  fz_alloc_sig_take(a, &now);
  if (memcmp(&now, fresh, sizeof now)) {
    fprintf(stderr, "fuzz: kvc_allocator_clear did not restore the fresh state\n");
    abort();
  }
}

/* An SWA allocator's observable state: both sides' counters and available sizes (the
 * sub-allocators are read-only from outside) and the host full->SWA mapping. */
typedef struct fz_swa_sig {
  kvc_allocator_stats full, swa;
  int64_t avail, avail_full, avail_swa, map_len;
  int32_t map[1024];
} fz_swa_sig;

static inline void fz_swa_sig_take(kvc_swa_allocator *sa, fz_swa_sig *sig) {
  memset(sig, 0, sizeof *sig);
  if (kvc_allocator_get_stats(kvc_swa_allocator_full(sa), &sig->full) != KVC_OK ||
      kvc_allocator_get_stats(kvc_swa_allocator_swa(sa), &sig->swa) != KVC_OK)
    abort();
  sig->full.merges = sig->swa.merges = 0;
  sig->avail = kvc_swa_allocator_available_size(sa);
  sig->avail_full = kvc_swa_allocator_full_available_size(sa);
  sig->avail_swa = kvc_swa_allocator_swa_available_size(sa);
  sig->map_len = kvc_swa_allocator_mapping_length(sa);
  if (sig->map_len > 1024) abort();
  memcpy(sig->map, kvc_swa_allocator_mapping_host(sa), (size_t)sig->map_len * sizeof(int32_t));
}

static inline void fz_swa_reset(kvc_swa_allocator *sa, const fz_swa_sig *fresh) {
  static fz_swa_sig now;
  if (kvc_swa_allocator_clear(sa, NULL) != KVC_OK) abort();
  fz_swa_sig_take(sa, &now);
  if (memcmp(&now, fresh, sizeof now)) {
    fprintf(stderr, "fuzz: kvc_swa_allocator_clear did not restore the fresh state\n");
    abort();
  }
}

/* A req-to-token pool back to its fresh state: every row's host mirror and device row
 * zero (clear leaves the tables as they are, so each row is taken and zeroed first), rows
 * free in order 1..size. Checked: available == size, mirror and table zero, order. */
static inline void fz_req_pool_reset(kvc_req_to_token_pool *rp, int32_t rows, int32_t width) {
  static int32_t got[64];
  static int64_t zeros[4096];
  if (rows > 64 || width > 4096) abort();
  if (kvc_req_to_token_pool_clear(rp) != KVC_OK) abort();
  memset(got, 0, sizeof got);
  if (kvc_req_to_token_pool_alloc(rp, (size_t)rows, got) != KVC_OK) abort();
  const int32_t *table = kvc_req_to_token_pool_table(rp); /* host backend: host memory */
  for (int32_t i = 0; i < rows; i++) {
    if (got[i] != i + 1) abort(); /* fresh order: 1..size */
    /* Rows the last input left zero (mirror and table) need no write; checked below. */
    const int32_t *m = kvc_req_to_token_pool_row(rp, got[i]);
    int dirty = 0;
    for (int32_t t = 0; t < width && !dirty; t++) dirty = m[t] || table[(int64_t)got[i] * width + t];
    if (dirty && kvc_req_to_token_pool_write(rp, got[i], 0, zeros, (size_t)width, NULL) != KVC_OK) abort();
  }
  if (kvc_req_to_token_pool_clear(rp) != KVC_OK || kvc_req_to_token_pool_available(rp) != rows) abort();
  for (int64_t i = 0; i < (int64_t)(rows + 1) * width; i++)
    if (table[i]) abort();
  for (int32_t r = 1; r <= rows; r++) {
    const int32_t *m = kvc_req_to_token_pool_row(rp, r);
    for (int32_t t = 0; t < width; t++)
      if (m[t]) abort();
  }
}

/* Full O(pool) audits run after every FZ_AUDIT_EVERY-th call that returned OK and at the
 * end of each input; every call in between gets the O(1) counter checks of its harness
 * (and a refused call, its fingerprint unchanged). Whatever a call broke stays broken
 * until the next full audit, at the latest the one at the end of the input, so the input
 * still fails; it reports a few calls later (FZ_TRACE shows the step). */
#ifndef FZ_AUDIT_EVERY
#  define FZ_AUDIT_EVERY 8
#endif

typedef struct fz {
  const uint8_t *p;
  size_t n;
} fz;

static inline uint8_t fz_u8(fz *f) {
  if (!f->n) return 0;
  f->n--;
  return *f->p++;
}
static inline uint32_t fz_u32(fz *f) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v = v << 8 | fz_u8(f);
  return v;
}
/* An int64 argument: mostly small, sometimes a boundary or garbage. */
static inline int64_t fz_int(fz *f, int64_t typical) {
  uint8_t sel = fz_u8(f);
  switch (sel & 15) {
  case 0: return 0;
  case 1: return -1;
  case 2: return typical;
  case 3: return typical < INT64_MAX ? typical + 1 : typical;
  case 4: return INT64_MAX;
  case 5: return INT64_MIN;
  case 6: return INT32_MAX;
  case 7: return (int64_t)fz_u32(f) - INT32_MAX;
  default: return typical > 0 ? (int64_t)(fz_u8(f) % ((uint64_t)typical + 2)) : fz_u8(f);
  }
}

/* Every status must be a known code; an INTERNAL error means an audit failed. */
#define FZ_STATUS(st)                                                                                                \
  do {                                                                                                               \
    kvc_status fz_st_ = (st);                                                                                        \
    if (fz_st_ == KVC_ERR_INTERNAL || !strcmp(kvc_status_name(fz_st_), "invalid")) {                                 \
      fprintf(stderr, "%s:%d: status %s: %s\n", __FILE__, __LINE__, kvc_status_name(fz_st_), kvc_last_error(g_ctx)); \
      abort();                                                                                                       \
    }                                                                                                                \
  } while (0)

#define FZ_AUDIT(expr)                                                                            \
  do {                                                                                            \
    kvc_status fz_st_ = (expr);                                                                   \
    if (fz_st_ != KVC_OK) {                                                                       \
      fprintf(stderr, "%s:%d: audit %s: %s\n", __FILE__, __LINE__, #expr, kvc_last_error(g_ctx)); \
      abort();                                                                                    \
    }                                                                                             \
  } while (0)

#endif
