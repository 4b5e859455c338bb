/*
 * kvc_index.h — the per-token index rules a CUDA kernel and its C twin must agree on,
 * written once: NVRTC compiles this file into the kernels and the C compiler into the
 * host twins (src/device/host_kernels), as kvc_numeric.h does for element conversions.
 * A rule changed here changes both backends, so the GPU tests' oracle cannot drift.
 *
 * The rules are SGLang's (alloc_extend_kernel, alloc_decode_kernel, get_last_loc), for a
 * request with prefix length pre, new length seq, last_loc last and page size ps:
 *
 *   extend: ceil_pre = ceil(pre / ps) * ps
 *     position pos in [pre, ceil_pre)  -> last + 1 + (pos - pre)   (the prefix's page)
 *     position pos in [ceil_pre, seq)  -> page[k / ps] * ps + k % ps, k = pos - ceil_pre
 *     new pages taken                  =  ceil(seq / ps) - ceil(pre / ps)
 *   decode to length seq: a new page iff (seq - 1) % ps == 0 (slot page * ps),
 *     else last + 1
 *   last_loc: table[row][pre - 1], or -1 when pre == 0 or the entry is outside the table
 *
 * the planned decode entry (row, position, slot[, mapped value]) that the allocator's
 * decode plan and the decode channel apply alike, and the bounded lookup of an index map
 * (full->SWA translation, req->mamba).
 *
 * The slot arithmetic is written as macros, not KVC_HD functions, on purpose: NVRTC
 * schedules a loop that calls even a trivial __forceinline__ function differently from
 * the same expression written out (kvc_plan_extend's sm_90 code grew by 500 bytes when
 * its page-slot expression became a function), and moving the rules here must leave the
 * kernels' machine code as it was. Macro arguments are plain variables (some are
 * evaluated twice). Rules whose function form compiles to the same code stay functions.
 */
#ifndef KVC_INDEX_H
#define KVC_INDEX_H

#include "kvc_abi.h" /* KVC_HD */

#ifdef __CUDACC_RTC__
#  define KVC_IPTR(type, addr) reinterpret_cast<type>(addr)
#else
#  define KVC_IPTR(type, addr) ((type)(uintptr_t)(addr))
#endif

/* Element i of an int32 or int64 vector at device address base, as int64. */
KVC_HD int64_t kvc_load_index(uint64_t base, int64_t i, int is64) {
  return is64 ? KVC_IPTR(const int64_t *, base)[i] : (int64_t)KVC_IPTR(const int32_t *, base)[i];
}

/* --- Extend ------------------------------------------------------------------------ */

/* Whether a fill kernel gives a request new slots: it grows from a valid prefix. */
#define KVC_EXTEND_GROWS(pre, seq) ((seq) > (pre) && (pre) >= 0)

/* Tokens a req_to_token write covers: none when seq <= pre. */
#define KVC_EXTEND_LEN(pre, seq) ((seq) - (pre) > 0 ? (seq) - (pre) : 0)

/* First position of the request's new pages: the prefix rounded up to a page. */
#define KVC_EXTEND_CEIL_PRE(pre, ps) (((pre) + (ps)-1) / (ps) * (ps))

/* Pages an extend from pre to seq takes: ceil(seq / ps) - ceil(pre / ps). */
#define KVC_EXTEND_NEW_PAGES(pre, seq, ps) (((seq) + (ps)-1) / (ps) - ((pre) + (ps)-1) / (ps))

/* The slot of the token at position pos (>= pre) of an extend, in two cases:
 *   KVC_EXTEND_IN_PREFIX_PAGE(pos, ceil_pre): it continues the prefix's partial page, at
 *     KVC_SLOT_AFTER(last, pos - pre);
 *   otherwise, with k = pos - ceil_pre: offset k % ps of the request's new page number
 *     k / ps (0-based, in the order its pages were taken), at KVC_PAGE_SLOT(page id, k, ps).
 * KVC_SLOT_AFTER(last, 0) is also the slot of a decode step that needs no new page. */
#define KVC_EXTEND_IN_PREFIX_PAGE(pos, ceil_pre) ((pos) < (ceil_pre))
#define KVC_SLOT_AFTER(last, t) ((last) + 1 + (t))
#define KVC_PAGE_SLOT(page, k, ps) ((page) * (ps) + (k) % (ps))

/* --- Decode ------------------------------------------------------------------------ */

/* Whether the step to length seq starts a page (ps == 1: every step does); its slot is
 * then page * ps, else KVC_SLOT_AFTER(last, 0). */
#define KVC_DECODE_NEW_PAGE(seq, ps) ((seq) >= 1 && ((seq)-1) % (ps) == 0)

/* Words of one planned decode entry. Two forms, chosen per launch by the header's
 * table_len (kvc_abi.h):
 *   table_len > 0: (table offset row * row_stride + position, slot), the form of a
 *     req_to_token table of fewer than 2^31 entries: two words, so a step of 1024
 *     requests (8 KB) fits the 8 KB parameter block instead of the 16 KB one;
 *   table_len == 0: (row, position, slot), for larger tables (or none);
 * plus, in either form, the slot's full->SWA mapping value when the allocator fuses its
 * mapping write in (map non-zero). */
#define KVC_DECODE_ENTRY_WORDS(map, table_len) (((map) ? 4 : 3) - ((table_len) > 0))

/* Request i's writes of one planned decode step from its entry e: out_cache_loc, the
 * req_to_token table and, when map is given, the full->SWA mapping. Every index read
 * from the payload is bounded: a table offset outside [0, table_len) (two-word form; the
 * host writes UINT32_MAX for "no table write") or a row < 0 (three-word form) writes no
 * table entry, a slot outside [0, map_len) no mapping entry. Any of out, table, map may
 * be NULL. table_len is uniform across the launch: the branch on it does not diverge. */
KVC_HD void kvc_decode_write(const uint32_t *e, int i, int64_t *out, int32_t *table, int64_t row_stride,
                             int32_t table_len, int64_t *map, int64_t map_len) {
  const bool two = table_len > 0;
  const int32_t slot = (int32_t)e[two ? 1 : 2];
  if (out) out[i] = slot;
  if (table) {
    if (two) {
      if (e[0] < (uint32_t)table_len) table[e[0]] = slot;
    } else {
      const int32_t row = (int32_t)e[0], pos = (int32_t)e[1];
      if (row >= 0) table[(int64_t)row * row_stride + pos] = slot;
    }
  }
  if (map && slot >= 0 && slot < map_len) map[slot] = (int32_t)e[two ? 2 : 3];
}

/* A mapped decode entry e (row, position, slot, value) whose slot opened a page of ps
 * slots (slot % ps == 0: a continued page's next slot never is) zeroes the page's other
 * mapping entries, those outside [0, map_len) skipped: the launch that carries the SWA
 * allocator's queued zeroes writes its new pages whole. */
KVC_HD void kvc_decode_zero_tail(const uint32_t *e, uint32_t ps, int64_t *map, int64_t map_len) {
  const int64_t slot = (int32_t)e[2];
  if (slot < 0 || ps == 0 || slot % ps) return;
  for (int64_t j = slot + 1; j < slot + ps && j < map_len; j++) map[j] = 0;
}

/* --- req_to_token ------------------------------------------------------------------ */

/* SGLang get_last_loc for one request: the table entry it reads (the slot of token
 * pre - 1), or -1 when there is none (no prefix, or outside the table). Two unsigned
 * compares stand for 0 <= row < num_rows and 1 <= pre <= row_stride: they sit between
 * the kernel's two dependent loads. */
KVC_HD int64_t kvc_last_loc_entry(int64_t num_rows, int64_t row_stride, int64_t row, int64_t pre) {
  const bool in = (uint64_t)row < (uint64_t)num_rows && (uint64_t)pre - 1u < (uint64_t)row_stride;
  return in ? row * row_stride + pre - 1 : -1;
}

KVC_HD int64_t kvc_last_loc(const int32_t *table, int64_t num_rows, int64_t row_stride, int64_t row, int64_t pre) {
  const int64_t at = kvc_last_loc_entry(num_rows, row_stride, row, pre);
  return at >= 0 ? (int64_t)table[at] : -1;
}

/* --- Index maps (swa.cu: full->SWA, req->mamba) ----------------------------------- */

/* out[i] of a map gather: map[x] for x in [0, map_len), else `oob`. */
KVC_HD int64_t kvc_map_lookup(uint64_t map, int is64, int64_t map_len, int64_t x, int64_t oob) {
  return x >= 0 && x < map_len ? kvc_load_index(map, x, is64) : oob;
}

#endif
