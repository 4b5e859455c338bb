/*
 * pages.c — from a request's token slots (what the allocators and flows hand out and
 * keep on the host) to the page ids a transfer plan takes.
 */
#include "../core/core.h"

kvc_status kvc_transfer_pages_from_slots(const int64_t *slots, size_t n_tokens, int32_t page_size, int64_t *out_pages,
                                         size_t cap, size_t *n_pages) {
  KVC_RETURN_IF(!n_pages || (n_tokens && (!slots || !out_pages)), NULL, KVC_ERR_INVALID_ARGUMENT,
                "slots, out_pages or n_pages is NULL");
  KVC_RETURN_IF(page_size < 1, NULL, KVC_ERR_INVALID_ARGUMENT, "page_size %d < 1", page_size);
  const size_t ps = (size_t)page_size;
  const size_t pages = n_tokens / ps + (n_tokens % ps != 0);
  KVC_RETURN_IF(pages > cap, NULL, KVC_ERR_INVALID_ARGUMENT, "%zu pages do not fit in cap %zu", pages, cap);
  /* Validate everything first: a refused call writes nothing. */
  for (size_t i = 0; i < n_tokens; i++) {
    const int64_t first = slots[i - i % ps];
    if (slots[i] < 0 || first % page_size != 0 || slots[i] != first + (int64_t)(i % ps))
      return kvc__error(NULL, KVC_ERR_INVALID_ARGUMENT, __func__,
                        "slots[%zu] = %lld is not at offset %zu of the page of slots[%zu] = %lld (a paged "
                        "request keeps token i at offset i %% page_size)",
                        i, (long long)slots[i], i % ps, i - i % ps, (long long)first);
  }
  for (size_t k = 0; k < pages; k++) out_pages[k] = slots[k * ps] / page_size;
  *n_pages = pages;
  return KVC_OK;
}
