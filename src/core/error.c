/*
 * error.c — the detailed message of the last failure, per context and per thread.
 *
 * Each thread keeps a few slots keyed by the context's unique id (not its address, which
 * a later context may reuse). A thread that touches more contexts than slots recycles the
 * oldest slot. No allocation, no locks: the slots are thread-local.
 */
#include "core.h"

#include <stdio.h>
#include <string.h>

#define KVC__ERROR_SLOTS 8
#define KVC__ERROR_BYTES 2048

typedef struct kvc__error_slot {
  uint64_t ctx_id; /* 0 = calls without a context */
  uint64_t stamp;
  char msg[KVC__ERROR_BYTES];
} kvc__error_slot;

static _Thread_local kvc__error_slot tls_slots[KVC__ERROR_SLOTS];
static _Thread_local uint64_t tls_stamp;
static _Thread_local int tls_used;

static uint64_t ctx_id_of(const kvc_context *ctx) { return ctx ? kvc__core_of(ctx)->id : 0; }

static kvc__error_slot *find_slot(uint64_t id, bool create) {
  for (int i = 0; i < tls_used; i++)
    if (tls_slots[i].ctx_id == id) return &tls_slots[i];
  if (!create) return NULL;
  kvc__error_slot *s;
  if (tls_used < KVC__ERROR_SLOTS) {
    s = &tls_slots[tls_used++];
  } else {
    s = &tls_slots[0];
    for (int i = 1; i < KVC__ERROR_SLOTS; i++)
      if (tls_slots[i].stamp < s->stamp) s = &tls_slots[i];
  }
  s->ctx_id = id;
  s->msg[0] = '\0';
  return s;
}

kvc_status kvc__verror(const kvc_context *ctx, kvc_status status, const char *func,
                       const char *fmt, va_list ap) {
  kvc__error_slot *s = find_slot(ctx_id_of(ctx), true);
  s->stamp = ++tls_stamp;
  int n = snprintf(s->msg, sizeof s->msg, "%s: ", func ? func : "kvcache");
  if (n < 0) n = 0;
  /* ap comes va_start'ed from kvc__error; clang-tidy 14 forgets the va_start when another
   * file was analysed before this one in the same run (a false positive). */
  /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): see above */
  if ((size_t)n < sizeof s->msg) vsnprintf(s->msg + n, sizeof s->msg - (size_t)n, fmt, ap);
  if (ctx && kvc__core_of(ctx)->options.log_level >= KVC_LOG_DEBUG)
    fprintf(stderr, "kvcache: error %s: %s\n", kvc_status_name(status), s->msg);
  return status;
}

kvc_status (kvc__error)(const kvc_context *ctx, kvc_status status, const char *func, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kvc_status st = kvc__verror(ctx, status, func, fmt, ap);
  va_end(ap);
  return st;
}

void kvc__error_append(const kvc_context *ctx, const char *text) {
  kvc__error_slot *s = find_slot(ctx_id_of(ctx), true);
  size_t len = strlen(s->msg);
  if (len + 1 < sizeof s->msg) snprintf(s->msg + len, sizeof s->msg - len, "%s", text);
}

const char *kvc_last_error(const kvc_context *ctx) {
  kvc__error_slot *s = find_slot(ctx_id_of(ctx), false);
  return s ? s->msg : "";
}
