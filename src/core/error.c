/*
 * error.c — the detailed message of the last failure, per context and per thread.
 *
 * Each context keeps one slot per thread that ever failed on it; a context-less failure
 * (a create that failed) goes to one thread-local slot. So a thread may fail on any
 * number of contexts and each keeps its own text, and a pointer returned by
 * kvc_last_error(ctx) only ever shows ctx's messages for the thread that asked:
 *
 *   ctx->core.error_slots -> [thread 7 | msg] -> [thread 2 | msg] -> NULL
 *
 * The list is guarded by the context's error_lock; a slot's text is written and read
 * only by its own thread, so the text itself needs no lock. The creating thread's slot
 * is made at create, so the common one-thread use never allocates on an error path;
 * another thread's first failure allocates its slot (outside the context's accounting,
 * which tests compare across failed calls). Slots live until the context is destroyed.
 */
#include "core.h"

#include <stdio.h>
#include <string.h>

#define KVC__ERROR_BYTES 2048

struct kvc__error_slot {
  kvc__error_slot *next;
  uint64_t thread_id;
  char msg[KVC__ERROR_BYTES];
};

static atomic_uint_fast64_t next_thread_id = 1;
static _Thread_local uint64_t tls_thread_id;
static _Thread_local char tls_null_msg[KVC__ERROR_BYTES];
static _Thread_local const char *tls_api_func;
/* Where a message goes when its slot could not be allocated: never returned to callers
 * as a context's text, so no stale pointer shows another context's message. */
static _Thread_local char tls_lost_msg[KVC__ERROR_BYTES];
static _Thread_local uint64_t tls_lost_ctx_id; /* context whose last text was lost */
static const char lost_text[] = "kvcache: no host memory to record the error text";

static uint64_t this_thread(void) {
  if (tls_thread_id == 0) tls_thread_id = atomic_fetch_add(&next_thread_id, 1);
  return tls_thread_id;
}

/* The calling thread's slot on ctx, made when `create`; NULL when absent or out of
 * memory. The context is logically const here: the slots are bookkeeping. */
static kvc__error_slot *slot_of(const kvc_context *ctx, bool create) {
  kvc__core *core = kvc__core_of(ctx);
  const uint64_t me = this_thread();
  pthread_mutex_lock(&core->error_lock);
  kvc__error_slot *s = core->error_slots;
  while (s && s->thread_id != me) s = s->next;
  if (!s && create) {
    s = kvc__raw_alloc(core, sizeof *s);
    if (s) {
      s->thread_id = me;
      s->msg[0] = '\0';
      s->next = core->error_slots;
      core->error_slots = s;
    }
  }
  pthread_mutex_unlock(&core->error_lock);
  return s;
}

static char *message_buffer(const kvc_context *ctx, bool *lost) {
  *lost = false;
  if (!ctx) return tls_null_msg;
  kvc__error_slot *s = slot_of(ctx, true);
  if (s) return s->msg;
  *lost = true;
  tls_lost_ctx_id = kvc__core_of(ctx)->id;
  return tls_lost_msg;
}

kvc_status kvc__error_slots_init(kvc__core *core) {
  core->error_slots = NULL;
  if (pthread_mutex_init(&core->error_lock, NULL) != 0) return KVC_ERR_HOST_OOM;
  kvc__error_slot *s = kvc__raw_alloc(core, sizeof *s);
  if (!s) {
    pthread_mutex_destroy(&core->error_lock);
    return KVC_ERR_HOST_OOM;
  }
  s->next = NULL;
  s->thread_id = this_thread();
  s->msg[0] = '\0';
  core->error_slots = s;
  return KVC_OK;
}

void kvc__error_slots_fini(kvc__core *core) {
  for (kvc__error_slot *s = core->error_slots, *next; s; s = next) {
    next = s->next;
    kvc__raw_free(core, s);
  }
  core->error_slots = NULL;
  pthread_mutex_destroy(&core->error_lock);
}

/* --- Naming the public entry point ------------------------------------------------- */

kvc__api_scope kvc__api_enter(const char *func) {
  kvc__api_scope scope = {tls_api_func};
  if (!tls_api_func) tls_api_func = func;
  return scope;
}

void kvc__api_leave(const kvc__api_scope *scope) { tls_api_func = scope->outer; }

/* --- Recording --------------------------------------------------------------------- */

kvc_status kvc__verror(const kvc_context *ctx, kvc_status status, const char *func, const char *fmt, va_list ap) {
  bool lost;
  char *msg = message_buffer(ctx, &lost);
  const char *name = tls_api_func ? tls_api_func : func ? func : "kvcache";
  int n = snprintf(msg, KVC__ERROR_BYTES, "%s: ", name);
  if (n < 0) n = 0;
  /* ap comes va_start'ed from kvc__error; clang-tidy 14 forgets the va_start when another
   * file was analysed before this one in the same run (a false positive). */
  /* NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized): see above */
  if (n < KVC__ERROR_BYTES) vsnprintf(msg + n, KVC__ERROR_BYTES - (size_t)n, fmt, ap);
  if (ctx && kvc__core_of(ctx)->options.log_level >= KVC_LOG_DEBUG)
    fprintf(stderr, "kvcache: error %s: %s%s\n", kvc_status_name(status), msg, lost ? " (text not kept)" : "");
  return status;
}

kvc_status(kvc__error)(const kvc_context *ctx, kvc_status status, const char *func, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kvc_status st = kvc__verror(ctx, status, func, fmt, ap);
  va_end(ap);
  return st;
}

void kvc__error_append(const kvc_context *ctx, const char *text) {
  bool lost;
  char *msg = message_buffer(ctx, &lost);
  size_t len = strlen(msg);
  if (len + 1 < KVC__ERROR_BYTES) snprintf(msg + len, KVC__ERROR_BYTES - len, "%s", text);
}

kvc_status kvc__error_to_null(const kvc_context *ctx, kvc_status status) {
  const char *text = kvc_last_error(ctx);
  if (text != tls_null_msg) snprintf(tls_null_msg, sizeof tls_null_msg, "%s", text);
  return status;
}

const char *kvc_last_error(const kvc_context *ctx) {
  if (!ctx) return tls_null_msg;
  const kvc__error_slot *s = slot_of(ctx, false);
  if (s) return s->msg;
  return tls_lost_ctx_id == kvc__core_of(ctx)->id ? lost_text : "";
}
