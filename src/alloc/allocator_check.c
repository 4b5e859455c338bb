/*
 * allocator_check.c — kvc_allocator_check_free(): would this sequence of frees succeed?
 *
 * A caller that must free several lists in turn (SGLang's release_kv_cache frees the
 * committed slots, then the over-allocated tail, as two frees because a paged free puts
 * its sorted pages in front of the free list and one merged free would order them
 * differently) cannot make the pair atomic with kvc_allocator_free alone: a refused second
 * free leaves the first one done. This check runs free()'s validation over every list as
 * if the earlier ones had been applied, and changes nothing, so the caller can check
 * first and then free knowing that neither call will be refused.
 *
 * Bits used while checking, both transient (cleared from every page touched before the
 * call returns, on success and on failure):
 *
 *   KVC__PG_MARK   the page was listed by the list being checked
 *   CHECK_EARLIER  the page was listed by an earlier list of this call
 *
 * What free() does with a repeat decides the verdict: TOKEN refuses every repeat (within a
 * list: "listed twice"; across lists the first free made the slot FREE, or GFREE in a
 * group); PAGED releases a page once per call (repeats within a list are fine), refuses
 * a page an earlier free released, but inside an open group accepts it again (the group
 * records it once, free() skips a GFREE page).
 */
#include "alloc.h"

#define CHECK_EARLIER 0x20u
_Static_assert((CHECK_EARLIER & (KVC__PG_STATE | KVC__PG_GFREE | KVC__PG_GSEG | KVC__PG_MARK)) == 0,
               "CHECK_EARLIER must be a state bit no one else uses");

/* One list, as free_impl validates it; the pages it marks are appended to v. */
static kvc_status check_list(kvc_allocator *a, size_t l, const int64_t *slots, size_t n, uint32_t *v, int64_t *k_io) {
  uint8_t *const state = a->state;
  const bool paged = a->kind == KVC_ALLOCATOR_PAGED;
  const int64_t ps = a->ps;
  const int shift = a->ps_shift; /* a division per slot would cost more than the check */
  int64_t k = *k_io;
  kvc_status st = KVC_OK;
  uint32_t prev = 0; /* page 0 is never valid, so the first slot is always looked at */
  for (size_t i = 0; i < n; i++) {
    const int64_t slot = slots[i];
    if (slot < ps || slot >= (a->num_pages + 1) * ps) {
      st = kvc__error(a->ctx, KVC_ERR_MISUSE, "kvc_allocator_check_free", "lists[%zu][%zu] = %lld is %s", l, i,
                      (long long)slot, (slot >= 0 && slot < ps) ? "in the padding page 0" : "out of range");
      break;
    }
    const uint32_t p = (uint32_t)(shift >= 0 ? slot >> shift : slot / ps);
    if (paged && p == prev) continue; /* the next slot of the same page, as free() skips it */
    prev = p;
    const uint8_t s = state[p];
    if (s & KVC__PG_MARK) {
      if (paged) continue;
      st = kvc__error(a->ctx, KVC_ERR_MISUSE, "kvc_allocator_check_free", "lists[%zu][%zu] = %lld is listed twice", l,
                      i, (long long)slot);
      break;
    }
    if (s & CHECK_EARLIER) {
      if (paged && a->in_group) continue;
      st = kvc__error(a->ctx, KVC_ERR_MISUSE, "kvc_allocator_check_free",
                      "lists[%zu][%zu] = %lld: %s %u is freed by an earlier list (double free?)", l, i, (long long)slot,
                      paged ? "page" : "slot", p);
      break;
    }
    if (paged && (s & KVC__PG_GFREE)) continue; /* recorded by this group already: free() skips it */
    if ((s & KVC__PG_STATE) != KVC__PG_HELD || (s & (KVC__PG_GFREE | KVC__PG_GSEG))) {
      st = kvc__error(a->ctx, KVC_ERR_MISUSE, "kvc_allocator_check_free",
                      "lists[%zu][%zu] = %lld: %s %u is %s (double free?)", l, i, (long long)slot,
                      paged ? "page" : "slot", p,
                      (s & (KVC__PG_GFREE | KVC__PG_GSEG)) ? "already freed in this group" : "not held");
      break;
    }
    state[p] = (uint8_t)(s | KVC__PG_MARK);
    v[k++] = p;
  }
  *k_io = k;
  return st;
}

kvc_status kvc_allocator_check_free(kvc_allocator *a, const int64_t *const *lists, const size_t *counts,
                                    size_t num_lists) {
  KVC_API_ENTRY();
  KVC_CHECK_HANDLE(a, KVC__ALLOCATOR_MAGIC, "alloc", "kvc_allocator");
  if (num_lists == 0) return KVC_OK;
  KVC_RETURN_IF(!lists || !counts, a->ctx, KVC_ERR_INVALID_ARGUMENT, "lists or counts is NULL for %zu lists",
                num_lists);
  /* Every page is marked at most once (a marked page is never appended again), so the
   * num_pages entries of tmp_a hold them all. */
  uint32_t *const v = a->tmp_a;
  uint8_t *const state = a->state;
  int64_t k = 0;
  kvc_status st = KVC_OK;
  for (size_t l = 0; l < num_lists && st == KVC_OK; l++) {
    if (counts[l] == 0) continue;
    if (!lists[l]) {
      st = kvc__error(a->ctx, KVC_ERR_INVALID_ARGUMENT, __func__, "lists[%zu] is NULL for counts[%zu] = %zu", l, l,
                      counts[l]);
      break;
    }
    const int64_t k0 = k;
    st = check_list(a, l, lists[l], counts[l], v, &k);
    if (st != KVC_OK) break;
    for (int64_t j = k0; j < k; j++) state[v[j]] = (uint8_t)((state[v[j]] & ~KVC__PG_MARK) | CHECK_EARLIER);
  }
  for (int64_t j = 0; j < k; j++) state[v[j]] = (uint8_t)(state[v[j]] & ~(KVC__PG_MARK | CHECK_EARLIER));
  return st;
}
