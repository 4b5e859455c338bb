/*
 * swa_batch.c — the SWA allocator's batch allocations (SGLang alloc_extend /
 * alloc_decode on both sides, spec 7): the SWA side (host only) is taken first under a
 * backup, then the full side, whose one launch also writes the full->SWA mapping of the
 * new slots; a later failure restores the SWA side with the allocators' O(1)
 * backup/restore, so the free lists end exactly as before. The ids are the same as
 * SGLang's: the two sides are independent free lists fed with the same lengths.
 */
#include "swa.h"

#include <string.h>

/* Full last_loc of request i (position pos), from last_locs, prefix slots or the mirror. */
static kvc_status resolve_last(kvc_swa_allocator *a, const char *fn, size_t i, int64_t pos, const int64_t *last_locs,
                               const int64_t *pre, kvc_req_to_token_pool *rp, const int32_t *rows, int64_t *out) {
  if (last_locs) {
    *out = last_locs[i];
  } else if (pre) {
    *out = pre[pos];
  } else {
    if (!rp || !rows)
      return kvc__error(a->ctx, KVC_ERR_INVALID_ARGUMENT, fn,
                        "request %zu continues a partial page but last_locs is NULL and there is no req_pool", i);
    const int32_t *row = kvc_req_to_token_pool_row(rp, rows[i]);
    if (!row || !kvc_req_to_token_pool_is_held(rp, rows[i]))
      return kvc__error(a->ctx, KVC_ERR_MISUSE, fn, "req_rows[%zu] = %d is not a held row of req_pool", i, rows[i]);
    if (pos >= kvc_req_to_token_pool_max_context_len(rp))
      return kvc__error(a->ctx, KVC_ERR_INVALID_ARGUMENT, fn, "request %zu: position %lld past the row", i,
                        (long long)pos);
    *out = row[pos];
  }
  if (*out < 1 || *out >= a->map_len - 1)
    return kvc__error(a->ctx, KVC_ERR_INVALID_ARGUMENT, fn, "request %zu: last_loc %lld is outside [1, %lld)", i,
                      (long long)*out, (long long)(a->map_len - 1));
  return KVC_OK;
}

/* SWA last_loc of a full last_loc: its peer, which must exist (else the SWA side would
 * write into padding page 0, spec 7.4). */
static kvc_status swa_peer(kvc_swa_allocator *a, const char *fn, size_t i, int64_t full_last, int64_t *out) {
  const int32_t w = a->map[full_last];
  if (w <= 0)
    return kvc__error(a->ctx, KVC_ERR_MISUSE, fn,
                      "request %zu: last_loc %lld has no SWA peer (mapping 0); its partial page was SWA-freed", i,
                      (long long)full_last);
  *out = w;
  return KVC_OK;
}

/* The two-sided commit shared by extend/decode/tail: SWA side first (host only, under a
 * backup), then the full side, then the mapping launch; any failure restores both. */
typedef kvc_status (*side_fn)(kvc_swa_allocator *a, void *args, bool full_side);

static kvc_status two_sided(kvc_swa_allocator *a, side_fn fn, void *args, const int64_t *map_f, size_t map_n,
                            kvc_stream stream) {
  kvc_allocator_state bs, bf;
  KVC_FORWARD(kvc_allocator_backup_state(a->swa, &bs));
  KVC_FORWARD(fn(a, args, false));
  kvc_status st = kvc_allocator_backup_state(a->full, &bf);
  if (st == KVC_OK) st = fn(a, args, true);
  if (st == KVC_OK) st = kvc__swa_map_set(a, map_f, a->w_buf, map_n, stream);
  if (st != KVC_OK) {
    kvc_allocator_restore_state(a->full, &bf); /* MISUSE (no-op) if the full side never ran */
    kvc_allocator_restore_state(a->swa, &bs);
  }
  return st;
}

/* The extend's settle of the queue when it cannot carry it (kvc__extend_map). */
static kvc_status settle_hook(void *user, kvc_stream stream) {
  return kvc__swa_zero_flush(user, "kvc_swa_allocator_alloc_extend", stream);
}

/* alloc_extend and alloc_extend_ex: args as kvc_extend_args (rows_device: written by the
 * full side's launch, with the slots and the mapping). */
static kvc_status swa_extend(kvc_swa_allocator *a, const char *fn, const kvc_extend_args *args) {
  kvc_context *ctx = a->ctx;
  const size_t bs = args->batch_size;
  const int64_t *const prefix_lens = args->prefix_lens, *const seq_lens = args->seq_lens;
  const int64_t *const last_locs = args->last_locs, *const *const prefix_slots = args->prefix_slots;
  kvc_req_to_token_pool *const rp = args->req_pool;
  const int32_t *const rows = args->req_rows;
  int64_t *const out_host = args->out_host;
  const kvc_stream stream = args->stream;
  KVC_RETURN_IF(a->pure, ctx, KVC_ERR_UNSUPPORTED, "the pure-SWA allocator has no alloc_extend (page_size 1)");
  if (bs == 0) return KVC_OK;
  KVC_RETURN_IF(!prefix_lens || !seq_lens, ctx, KVC_ERR_INVALID_ARGUMENT, "prefix_lens and seq_lens must be non-NULL");
  /* Before the SWA side allocates (the full side would refuse it too, but after a
   * rollback). */
  KVC_RETURN_IF(args->rows_device && !rp, ctx, KVC_ERR_INVALID_ARGUMENT,
                "rows_device needs a req_pool (and its req_rows)");
  const int64_t ps = a->ps;
  int64_t need = 0, tokens = 0;
  for (size_t i = 0; i < bs; i++) {
    const int64_t p = prefix_lens[i], s = seq_lens[i];
    KVC_RETURN_IF(p < 0 || s < p || s > INT32_MAX, ctx, KVC_ERR_INVALID_ARGUMENT,
                  "request %zu: prefix_len %lld, seq_len %lld", i, (long long)p, (long long)s);
    need += kvc__swa_cdiv(s, ps) - kvc__swa_cdiv(p, ps);
    tokens += s - p;
  }
  KVC_RETURN_IF(need > kvc__swa_full_free(a) || (!a->ring && need > kvc__swa_swa_free(a)), ctx, KVC_ERR_OUT_OF_SLOTS,
                "%lld pages needed on each side; %lld full and %lld SWA free", (long long)need,
                (long long)kvc__swa_full_free(a), (long long)(a->ring ? -1 : kvc__swa_swa_free(a)));
  if (a->ring) return kvc__swa_finish(a, kvc_allocator_alloc_extend_ex(a->full, args));
  KVC_FORWARD(kvc__swa_ensure_tok(a, fn, (size_t)tokens));
  KVC_FORWARD(kvc__swa_ensure_bs(a, fn, bs));
  for (size_t i = 0; i < bs; i++) {
    const int64_t p = prefix_lens[i], s = seq_lens[i];
    a->lastw[i] = -1;
    if (p % ps != 0 && s > p) {
      int64_t fl;
      const int64_t *pre = (prefix_slots && rp) ? prefix_slots[i] : NULL;
      KVC_FORWARD(resolve_last(a, fn, i, p - 1, last_locs, pre, rp, rows, &fl));
      KVC_FORWARD(swa_peer(a, fn, i, fl, &a->lastw[i]));
    }
  }
  /* The SWA side first (host only), then the full side's one launch, which also writes
   * the full->SWA mapping of the new slots (as alloc_decode does): one launch where
   * two_sided() takes two. A full-side failure changes nothing there, so only the SWA
   * side is rolled back. */
  kvc_allocator_state bsw;
  KVC_FORWARD(kvc_allocator_backup_state(a->swa, &bsw));
  KVC_FORWARD(kvc_allocator_alloc_extend(a->swa, bs, prefix_lens, seq_lens, a->lastw, NULL, NULL, NULL, a->w_buf, NULL,
                                         stream));
  /* The queued zeroes ride in the same launch (or, on a page overlap, go first alone). */
  bool merged = false;
  const kvc__extend_map m = {a->dmap,     a->map_len - 1, a->w_buf,    a->lastw, a->pz,
                             a->pz_items, a->pz_page,     settle_hook, a,        &merged};
  kvc__extend_args x = *args;
  x.out_host = a->f_buf; /* the mapping is written from it below; out_host gets a copy */
  kvc_status st = kvc__alloc_extend_mapped(a->full, "kvc_allocator_alloc_extend", &x, &m);
  if (st != KVC_OK) {
    kvc_allocator_restore_state(a->swa, &bsw);
    return st;
  }
  if (merged) kvc__swa_zero_done(a);
  for (int64_t t = 0; t < tokens; t++) a->map[a->f_buf[t]] = (int32_t)a->w_buf[t];
  if (out_host) memcpy(out_host, a->f_buf, (size_t)tokens * 8);
  return kvc__swa_finish(a, KVC_OK);
}

kvc_status kvc_swa_allocator_alloc_extend(kvc_swa_allocator *a, size_t bs, const int64_t *prefix_lens,
                                          const int64_t *seq_lens, const int64_t *last_locs, kvc_req_to_token_pool *rp,
                                          const int32_t *rows, const int64_t *const *prefix_slots, int64_t *out_host,
                                          int64_t *out_device, kvc_stream stream) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  const kvc_extend_args x = {.batch_size = bs,
                             .prefix_lens = prefix_lens,
                             .seq_lens = seq_lens,
                             .last_locs = last_locs,
                             .req_pool = rp,
                             .req_rows = rows,
                             .prefix_slots = prefix_slots,
                             .out_host = out_host,
                             .out_device = out_device,
                             .stream = stream};
  return swa_extend(a, __func__, &x);
}

kvc_status kvc_swa_allocator_alloc_extend_ex(kvc_swa_allocator *a, const kvc_extend_args *args) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  KVC_RETURN_IF(!args, a->ctx, KVC_ERR_INVALID_ARGUMENT, "args is NULL");
  return swa_extend(a, __func__, args);
}

/* alloc_decode's checks (spec: both sides or none) and, outside ring mode, each request's
 * SWA last_loc (lastw). Nothing changes. */
static kvc_status decode_prepare(kvc_swa_allocator *a, const char *fn, size_t bs, const int64_t *seq_lens,
                                 const int64_t *last_locs, kvc_req_to_token_pool *rp, const int32_t *rows,
                                 int64_t *need_out) {
  kvc_context *ctx = a->ctx;
  if (!seq_lens) return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "seq_lens is NULL");
  const int64_t ps = a->ps;
  int64_t need = 0;
  for (size_t i = 0; i < bs; i++) {
    if (seq_lens[i] < 1 || seq_lens[i] > INT32_MAX)
      return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "seq_lens[%zu] = %lld", i, (long long)seq_lens[i]);
    need += (seq_lens[i] - 1) % ps == 0;
  }
  if (need_out) *need_out = need;
  if (need > kvc__swa_full_free(a) || (!a->ring && need > kvc__swa_swa_free(a)))
    return kvc__error(ctx, KVC_ERR_OUT_OF_SLOTS, fn, "%lld new pages needed on each side; %lld full and %lld SWA free",
                      (long long)need, (long long)kvc__swa_full_free(a),
                      (long long)(a->ring ? -1 : kvc__swa_swa_free(a)));
  if (a->ring) return KVC_OK;
  KVC_FORWARD(kvc__swa_ensure_tok(a, fn, bs));
  KVC_FORWARD(kvc__swa_ensure_bs(a, fn, bs));
  for (size_t i = 0; i < bs; i++) {
    a->lastw[i] = -1;
    if ((seq_lens[i] - 1) % ps != 0) {
      int64_t fl;
      KVC_FORWARD(resolve_last(a, fn, i, seq_lens[i] - 2, last_locs, NULL, rp, rows, &fl));
      KVC_FORWARD(swa_peer(a, fn, i, fl, &a->lastw[i]));
    }
  }
  return KVC_OK;
}

kvc_status kvc_swa_allocator_alloc_decode(kvc_swa_allocator *a, size_t bs, const int64_t *seq_lens,
                                          const int64_t *last_locs, kvc_req_to_token_pool *rp, const int32_t *rows,
                                          int64_t *out_host, int64_t *out_device, kvc_stream stream) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  KVC_RETURN_IF(a->pure, a->ctx, KVC_ERR_UNSUPPORTED, "the pure-SWA allocator has no alloc_decode (page_size 1)");
  if (bs == 0) return KVC_OK;
  int64_t need;
  KVC_FORWARD(decode_prepare(a, __func__, bs, seq_lens, last_locs, rp, rows, &need));
  if (a->ring)
    return kvc__swa_finish(
        a, kvc_allocator_alloc_decode(a->full, bs, seq_lens, last_locs, rp, rows, out_host, out_device, stream));
  /* The SWA side first (host only: no table, no out_cache_loc), then the full side's one
   * launch, which also writes the full->SWA mapping of the new slots: one launch per step
   * where two_sided() takes two (the plan, then the mapping). */
  /* The queued zeroes ride in that launch too, minus the step's new pages (a paged free
   * puts a page at the front of the free ring: the next page-opening decode takes it),
   * which the kernel writes whole. A continued page is never queued here: its last
   * slot's mapping was checked nonzero above, and a queue holds whole pages. */
  const bool carry = a->pz_items && kvc__alloc_decode_can_carry(a->full, bs, a->pz_items);
  if (!carry) KVC_FORWARD(kvc__swa_zero_settle(a, __func__, stream)); /* queued zeroes land before the new pairs */
  kvc_allocator_state bsw;
  KVC_FORWARD(kvc_allocator_backup_state(a->swa, &bsw));
  KVC_FORWARD(kvc_allocator_alloc_decode(a->swa, bs, seq_lens, a->lastw, NULL, NULL, a->w_buf, NULL, stream));
  /* A full-side failure changes nothing there (validation, or a launch error that it
   * undoes itself), so only the SWA side is rolled back; the queue stays. */
  bool merged = false;
  const kvc__decode_args x = {bs, seq_lens, last_locs, rp, rows, a->f_buf, out_device, stream};
  const kvc__decode_map m = {a->dmap,    a->map_len - 1, a->w_buf, a->pz, carry ? a->pz_items : 0,
                             a->pz_page, need,           &merged};
  kvc_status st = kvc__alloc_decode_mapped(a->full, "kvc_allocator_alloc_decode", &x, &m);
  if (st != KVC_OK) {
    kvc_allocator_restore_state(a->swa, &bsw);
    return st;
  }
  if (merged) kvc__swa_zero_done(a);
  for (size_t i = 0; i < bs; i++) a->map[a->f_buf[i]] = (int32_t)a->w_buf[i];
  if (out_host) memcpy(out_host, a->f_buf, bs * 8);
  return kvc__swa_finish(a, KVC_OK);
}

kvc_status kvc__swa_decode_plan(kvc_swa_allocator *a, const char *fn, const kvc__decode_args *x, kvc__decode_plan *p) {
  const size_t bs = x->bs;
  uint32_t *payload = p->payload;
  p->need = 0;
  if (bs == 0) return KVC_OK;
  KVC_FORWARD(decode_prepare(a, fn, bs, x->seq_lens, x->last_locs, x->req_pool, x->rows, NULL));
  if (a->ring) return kvc__alloc_decode_plan(a->full, fn, x, payload, 3, &p->need);
  /* The channel's launch writes the new pairs: queued zeroes (only after a failed
   * defer_zero_end or inside an open scope) go before it, on the same stream. */
  KVC_FORWARD(kvc__swa_zero_settle(a, fn, x->stream));
  kvc_allocator_state bsw;
  KVC_FORWARD(kvc_allocator_backup_state(a->swa, &bsw));
  KVC_FORWARD(kvc_allocator_alloc_decode(a->swa, bs, x->seq_lens, a->lastw, NULL, NULL, a->w_buf, NULL, NULL));
  kvc_status st = kvc__alloc_decode_plan(a->full, fn, x, payload, 4, &p->need);
  if (st != KVC_OK) {
    kvc_allocator_restore_state(a->swa, &bsw);
    return st;
  }
  for (size_t i = 0; i < bs; i++) payload[4 * i + 3] = (uint32_t)a->w_buf[i];
  return KVC_OK;
}

kvc_status kvc__swa_decode_commit(kvc_swa_allocator *a, const char *fn, const kvc__decode_args *x,
                                  const kvc__decode_plan *p) {
  const size_t bs = x->bs;
  int64_t *out_host = x->out_host;
  const int64_t need = p->need;
  if (bs == 0) return KVC_OK;
  if (a->ring) return kvc__swa_finish(a, kvc__alloc_decode_finish(a->full, fn, bs, out_host, need));
  /* w_buf still holds the plan's SWA slots: nothing ran on this allocator in between. */
  kvc_status st = kvc__alloc_decode_finish(a->full, fn, bs, a->f_buf, need);
  for (size_t i = 0; i < bs; i++) a->map[a->f_buf[i]] = (int32_t)a->w_buf[i];
  if (out_host) memcpy(out_host, a->f_buf, bs * 8);
  return kvc__swa_finish(a, st);
}

typedef struct tail_args {
  int64_t p, s, last, tail;
  kvc_req_to_token_pool *rp;
  int32_t row;
  const int64_t *prefix_slots;
  int64_t *out_device;
  kvc_stream stream;
} tail_args;

static kvc_status tail_side(kvc_swa_allocator *a, void *vargs, bool full_side) {
  tail_args *t = vargs;
  if (full_side) {
    const int64_t *last = t->last >= 0 ? &t->last : NULL;
    const int64_t *const pre[1] = {t->prefix_slots};
    return kvc_allocator_alloc_extend(a->full, 1, &t->p, &t->s, last, t->rp, t->rp ? &t->row : NULL,
                                      t->prefix_slots ? pre : NULL, a->f_buf, t->out_device, t->stream);
  }
  if (t->tail == 0) return KVC_OK;
  const int64_t zero = 0, minus1 = -1;
  return kvc_allocator_alloc_extend(a->swa, 1, &zero, &t->tail, &minus1, NULL, NULL, NULL, a->w_buf, NULL, t->stream);
}

kvc_status kvc_swa_allocator_alloc_extend_swa_tail(kvc_swa_allocator *a, int64_t p, int64_t s, int64_t last_loc,
                                                   int64_t tail, kvc_req_to_token_pool *rp, int32_t row,
                                                   const int64_t *prefix_slots, int64_t *out_host, int64_t *out_device,
                                                   kvc_stream stream) {
  KVC_API_ENTRY();
  SWA_ENTRY(a);
  kvc_context *ctx = a->ctx;
  KVC_RETURN_IF(a->pure, ctx, KVC_ERR_UNSUPPORTED, "the pure-SWA allocator has no alloc_extend_swa_tail");
  KVC_RETURN_IF(p < 0 || s < p || s > INT32_MAX, ctx, KVC_ERR_INVALID_ARGUMENT, "prefix_len %lld, seq_len %lld",
                (long long)p, (long long)s);
  KVC_RETURN_IF(tail < 0 || tail > s - p, ctx, KVC_ERR_INVALID_ARGUMENT, "swa_tail_len %lld outside [0, %lld]",
                (long long)tail, (long long)(s - p));
  const int64_t ps = a->ps, nf = kvc__swa_cdiv(s, ps) - kvc__swa_cdiv(p, ps), ns = kvc__swa_cdiv(tail, ps);
  KVC_RETURN_IF(!kvc_swa_allocator_new_pages_available(a, nf, ns), ctx, KVC_ERR_OUT_OF_SLOTS,
                "%lld full / %lld SWA pages needed; %lld / %lld free", (long long)nf, (long long)ns,
                (long long)kvc__swa_full_free(a), (long long)(a->ring ? -1 : kvc__swa_swa_free(a)));
  const int32_t *rows = rp ? &row : NULL;
  if (a->ring) {
    const int64_t *const pre[1] = {prefix_slots};
    return kvc__swa_finish(a, kvc_allocator_alloc_extend(a->full, 1, &p, &s, last_loc >= 0 ? &last_loc : NULL, rp, rows,
                                                         prefix_slots ? pre : NULL, out_host, out_device, stream));
  }
  KVC_FORWARD(kvc__swa_ensure_tok(a, __func__, (size_t)(s - p)));
  tail_args t = {p, s, last_loc, tail, rp, row, prefix_slots, out_device, stream};
  KVC_FORWARD(two_sided(a, tail_side, &t, a->f_buf + (s - p - tail), (size_t)tail, stream));
  if (out_host) memcpy(out_host, a->f_buf, (size_t)(s - p) * 8);
  return kvc__swa_finish(a, KVC_OK);
}
