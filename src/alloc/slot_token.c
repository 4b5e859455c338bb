/*
 * slot_token.c — the slot-allocator interface (slot_allocator.h) over a token / paged
 * kvc_allocator. Each operation is the public entry point (or the decode plan/commit
 * halves of allocator_plan.c); the observer hears of frees after they succeed, every
 * page they touched being released (the allocator frees whole pages).
 */
#include "slot_allocator.h"

#include <stdio.h>

static kvc_allocator *impl(const kvc__slot_allocator *sa) { return (kvc_allocator *)sa->impl; }

static kvc_status tok_extend(const kvc__slot_allocator *sa, const kvc__extend_args *x) {
  return kvc_allocator_alloc_extend_ex(impl(sa), x);
}

static kvc_status tok_decode(const kvc__slot_allocator *sa, const kvc__decode_args *x) {
  return kvc_allocator_alloc_decode(impl(sa), x->bs, x->seq_lens, x->last_locs, x->req_pool, x->rows, x->out_host,
                                    x->out_device, x->stream);
}

static kvc_status tok_decode_plan(const kvc__slot_allocator *sa, const char *fn, const kvc__decode_args *x,
                                  kvc__decode_plan *p) {
  p->need = 0;
  if (!x->bs) return KVC_OK;
  return kvc__alloc_decode_plan(impl(sa), fn, x, p->payload, 3, &p->need);
}

static kvc_status tok_decode_commit(const kvc__slot_allocator *sa, const char *fn, const kvc__decode_args *x,
                                    kvc__decode_plan *p) {
  if (!x->bs) return KVC_OK;
  return kvc__alloc_decode_finish(impl(sa), fn, x->bs, x->out_host, p->need);
}

static kvc_status tok_free(const kvc__slot_allocator *sa, const kvc__free_args *x) {
  KVC_FORWARD(kvc_allocator_free(impl(sa), x->slots, x->n));
  *x->told = kvc__slot_tell_freed(sa, KVC__SIDE_FULL, NULL, x->slots, x->n, x->stream);
  return KVC_OK;
}

static kvc_status tok_free_segment(const kvc__slot_allocator *sa, const kvc__free_args *x) {
  KVC_FORWARD(kvc_allocator_free_segment(impl(sa), x->slots, x->n, x->start_pos));
  *x->told = kvc__slot_tell_freed(sa, KVC__SIDE_FULL, NULL, x->slots, x->n, x->stream);
  return KVC_OK;
}

static kvc_status tok_group_begin(const kvc__slot_allocator *sa) { return kvc_allocator_free_group_begin(impl(sa)); }
static kvc_status tok_group_end(const kvc__slot_allocator *sa) { return kvc_allocator_free_group_end(impl(sa)); }

static kvc_status tok_backup(const kvc__slot_allocator *sa, kvc_allocator_state *out) {
  return kvc_allocator_backup_state(impl(sa), out);
}
static kvc_status tok_restore(const kvc__slot_allocator *sa, const kvc_allocator_state *state) {
  return kvc_allocator_restore_state(impl(sa), state);
}

static int64_t tok_available(const kvc__slot_allocator *sa) { return kvc_allocator_available_size(impl(sa)); }

static bool tok_fits(const kvc__slot_allocator *sa, int64_t pages) {
  return pages * impl(sa)->ps <= kvc_allocator_available_size(impl(sa));
}

static bool tok_evict_need(const kvc__slot_allocator *sa, int64_t tokens, int64_t *full, int64_t *swa) {
  *full = tokens; /* SGLang asks a single pool for n, not for the deficit */
  *swa = 0;
  return kvc_allocator_available_size(impl(sa)) < tokens;
}

static void tok_describe(const kvc__slot_allocator *sa, char *buf, size_t cap) {
  (void)sa;
  if (cap) buf[0] = '\0';
}

static kvc_status tok_check(const kvc__slot_allocator *sa) { return kvc_allocator_check(impl(sa)); }
static const kvc_allocator *tok_full(const kvc__slot_allocator *sa) { return impl(sa); }

static kvc_status tok_announce(const kvc__slot_allocator *sa, const int64_t *slots, size_t n, kvc_stream stream) {
  if (!(sa->obs->sides & KVC__SIDE_FULL)) return KVC_OK;
  const kvc__slot_event ev = {KVC__SIDE_FULL, impl(sa), slots, n, 0, stream};
  return sa->obs->allocated(sa->obs->self, &ev);
}

static kvc_allocator *tok_channel(const kvc__slot_allocator *sa, int64_t **map, int64_t *map_len) {
  *map = NULL;
  *map_len = 0;
  return impl(sa);
}

static const kvc__slot_ops token_ops = {
    .extend = tok_extend,
    .decode = tok_decode,
    .decode_plan = tok_decode_plan,
    .decode_commit = tok_decode_commit,
    .free = tok_free,
    .free_segment = tok_free_segment,
    .free_window = NULL,
    .group_begin = tok_group_begin,
    .group_end = tok_group_end,
    .backup = tok_backup,
    .restore = tok_restore,
    .available = tok_available,
    .fits = tok_fits,
    .evict_need = tok_evict_need,
    .describe = tok_describe,
    .check = tok_check,
    .full = tok_full,
    .observe_reserve = NULL,
    .announce = tok_announce,
    .channel = tok_channel,
};

kvc__slot_allocator kvc__slot_allocator_plain(kvc_allocator *a) {
  kvc__slot_allocator sa = {&token_ops, a, NULL};
  return sa;
}
