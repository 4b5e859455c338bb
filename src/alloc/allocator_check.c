/*
 * allocator_check.c — kvc_allocator_check_free(): would this sequence of frees succeed?
 *
 * A caller that must free several lists in turn (SGLang's release_kv_cache frees the
 * committed slots, then the over-allocated tail, as two frees because a paged free puts
 * its sorted pages in front of the free list and one merged free would order them
 * differently) cannot make the pair atomic with kvc_allocator_free alone: a refused second
 * free leaves the first one done. This check runs free()'s own validation
 * (kvc__alloc_free_validate) over each list, and between lists puts the pages a list
 * would release into the state that free would leave them in: FREE, or HELD | GFREE
 * inside an open group. So a later list gets exactly the verdict, and the message, that
 * its free after the earlier ones would get (a page freed twice is "not held", or in a
 * group skipped or "already freed in this group", as free() says), except that a refusal
 * of a page an earlier list released says so. Every page it touched was exactly HELD
 * before (that is what validation accepts), and goes back to HELD before the call
 * returns, on success and on failure: nothing changes.
 */
#include "alloc.h"

#include <stdio.h>

/* Set beside the simulated state of a page an earlier list released: validation reads
 * only the state, group and mark bits, and the message of a refusal can name the cause. */
#define CHECK_EARLIER 0x20u
_Static_assert((CHECK_EARLIER & (KVC__PG_STATE | KVC__PG_GFREE | KVC__PG_GSEG | KVC__PG_MARK)) == 0,
               "CHECK_EARLIER must be a state bit no one else uses");

kvc_status kvc_allocator_check_free(kvc_allocator *a, const int64_t *const *lists, const size_t *counts,
                                    size_t num_lists) {
  KVC_API_ENTRY();
  KVC_CHECK_HANDLE(a, KVC__ALLOCATOR_MAGIC, "alloc", "kvc_allocator");
  if (num_lists == 0) return KVC_OK;
  KVC_RETURN_IF(!lists || !counts, a->ctx, KVC_ERR_INVALID_ARGUMENT, "lists or counts is NULL for %zu lists",
                num_lists);
  /* A page is appended at most once per call (validation refuses or skips a page an
   * earlier list released), so the num_pages entries of tmp_a hold them all. */
  uint32_t *const v = a->tmp_a;
  uint8_t *const state = a->state;
  const uint8_t freed = (uint8_t)((a->in_group ? KVC__PG_HELD | KVC__PG_GFREE : KVC__PG_FREE) | CHECK_EARLIER);
  int64_t k = 0;
  kvc_status st = KVC_OK;
  for (size_t l = 0; l < num_lists && st == KVC_OK; l++) {
    if (counts[l] == 0) continue;
    if (!lists[l]) {
      st = kvc__error(a->ctx, KVC_ERR_INVALID_ARGUMENT, __func__, "lists[%zu] is NULL for counts[%zu] = %zu", l, l,
                      counts[l]);
      break;
    }
    char what[32];
    snprintf(what, sizeof what, "lists[%zu]", l);
    const int64_t k0 = k;
    size_t i = 0;
    st = kvc__alloc_free_validate(a, __func__, what, lists[l], counts[l], v, &k, &i);
    if (st == KVC_OK) {
      for (int64_t j = k0; j < k; j++) state[v[j]] = freed; /* as this list's free leaves it */
    } else if (i < counts[l]) {
      const int64_t slot = lists[l][i];
      const int64_t p = slot >= a->ps && slot < (a->num_pages + 1) * a->ps ? kvc__pg_div(a, slot) : 0;
      if (p && (state[p] & CHECK_EARLIER))
        st = kvc__error(a->ctx, KVC_ERR_MISUSE, __func__,
                        "%s[%zu] = %lld: %s %lld is freed by an earlier list (double free?)", what, i, (long long)slot,
                        a->kind == KVC_ALLOCATOR_PAGED ? "page" : "slot", (long long)p);
    }
  }
  for (int64_t j = 0; j < k; j++) state[v[j]] = KVC__PG_HELD;
  return st;
}
