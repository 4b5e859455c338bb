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
#define FZ_STATUS(st)                                                                      \
  do {                                                                                      \
    kvc_status fz_st_ = (st);                                                               \
    if (fz_st_ == KVC_ERR_INTERNAL || !strcmp(kvc_status_name(fz_st_), "invalid")) {        \
      fprintf(stderr, "%s:%d: status %s: %s\n", __FILE__, __LINE__, kvc_status_name(fz_st_), \
              kvc_last_error(g_ctx));                                                       \
      abort();                                                                              \
    }                                                                                       \
  } while (0)

#define FZ_AUDIT(expr)                                                                      \
  do {                                                                                      \
    kvc_status fz_st_ = (expr);                                                             \
    if (fz_st_ != KVC_OK) {                                                                 \
      fprintf(stderr, "%s:%d: audit %s: %s\n", __FILE__, __LINE__, #expr, kvc_last_error(g_ctx)); \
      abort();                                                                              \
    }                                                                                       \
  } while (0)

#endif
