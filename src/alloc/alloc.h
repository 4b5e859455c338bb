/*
 * alloc.h — internal layout of the slot-allocation objects (req_to_token pool,
 * token/paged allocator) shared by the level-2 sources (src/alloc, src/state, the flows)
 * and the transfer layouts.
 * Nothing above the flows (and no public consumer) includes it; white-box tests may.
 *
 * Both objects keep their metadata on the host; the device only receives what the host
 * decided, through one planned launch per call (src/ops/plan.c).
 */
#ifndef KVC_POOL_H
#define KVC_POOL_H

#include "../ops/ops.h"
#include "id_ring.h"

#include <stdbool.h>

#define KVC__REQ_POOL_MAGIC 0x6b76632d72747021ull  /* "kvc-rtp!" */
#define KVC__ALLOCATOR_MAGIC 0x6b76632d616c6321ull /* "kvc-alc!" */
#define KVC__DEAD_MAGIC 0x6465616464656164ull

/* --- Request-to-token pool ---------------------------------------------------------- */

/* Per-row flags in `rowflag`. MARK is transient: set while one call checks a batch for
 * duplicate rows, always cleared before that call returns. */
#define KVC__ROW_HELD 0x1u
#define KVC__ROW_MARK 0x2u

struct kvc_req_to_token_pool {
  uint64_t magic;
  kvc_context *ctx;
  int32_t size;           /* usable rows 1..size */
  int32_t width;          /* max_context_len = row stride */
  int32_t *table;         /* device (size + 1) x width */
  int32_t *mirror;        /* host copy of every entry the library wrote */
  kvc__ring free_rows;    /* FIFO: pop at the front, free at the back (id_ring.h) */
  uint8_t *rowflag;       /* size + 1 */
  int32_t *row_buf;       /* width int32: narrowed slots for kvc_req_to_token_pool_write */
  unsigned char *scratch; /* KVC__PARAM_SCRATCH_BYTES parameter block */
  const kvc__kfunc *k_row[KVC__PLAN_INLINE_VARIANTS];
};

/** Validates a pool handle passed to another object's function `fn`. */
kvc_status kvc__req_pool_check_handle(const kvc_context *ctx, const char *fn, const kvc_req_to_token_pool *pool);

/** Undoes the row grants of one kvc_req_to_token_pool_alloc call whose later step failed:
 *  `rows` are the n rows that call handed out, in the order it handed them out. They go
 *  back to the front of the FIFO in that order, so the pool is as before the call (a plain
 *  free would append them at the back and change which rows later requests get). */
void kvc__req_pool_unalloc(kvc_req_to_token_pool *p, const int32_t *rows, size_t n);

/** The same for kvc_mamba_pool_alloc (slots in the order it returned them); a single
 *  slot handed out from the open alloc group goes back to the group (mamba_pool.c). */
void kvc__mamba_pool_unalloc(kvc_mamba_pool *p, const int32_t *slots, size_t n);

/** The context a live Mamba pool was created on, NULL for anything else (transfer
 *  layouts allocate and report errors through it; mamba_pool.c). */
kvc_context *kvc__mamba_pool_context(const kvc_mamba_pool *p);

/** Undoes the last kvc_hybrid_req_pool_alloc (no other call on the pool since): mapping
 *  entries back to their old values (one launch), its Mamba slots back to the front of
 *  the Mamba FIFO. The rows are NOT returned: the caller un-grants them with
 *  kvc__req_pool_unalloc. KVC_ERR_INTERNAL when there is nothing to undo. */
typedef struct kvc_hybrid_req_pool kvc_hybrid_req_pool;
kvc_status kvc__hybrid_req_pool_unalloc(kvc_hybrid_req_pool *p, kvc_stream stream);
/** Frees row's Mamba slots and clears every mapping entry of the row in ONE launch, except
 *  that slot `kept` (-1 none, 0 the running slot, 1 + k track entry k) is neither freed nor
 *  kept mapped: a prefix cache took it (kvc_mamba_radix_cache). MISUSE for a row without a
 *  Mamba slot; nothing changes on failure. */
kvc_status kvc__hybrid_req_pool_donate(kvc_hybrid_req_pool *p, int32_t row, int32_t kept, kvc_stream stream);

static inline bool kvc__req_pool_row_held(const kvc_req_to_token_pool *p, int64_t row) {
  return row >= 1 && row <= p->size && (p->rowflag[row] & KVC__ROW_HELD);
}

static inline int32_t *kvc__req_pool_mirror_row(const kvc_req_to_token_pool *p, int64_t row) {
  return p->mirror + (size_t)row * (size_t)p->width;
}

/* --- Allocator: ring of page ids and per-page states ------------------------------- */

/* Page state byte: the low two bits are the state, higher bits are marks. */
#define KVC__PG_FREE 0x0u     /* in the free ring */
#define KVC__PG_HELD 0x1u     /* handed out (possibly recorded by an open group) */
#define KVC__PG_DEFERRED 0x2u /* need_sort side list, not merged yet */
#define KVC__PG_RESERVED 0x3u /* page 0: padding, never free */
#define KVC__PG_STATE 0x3u
#define KVC__PG_GFREE 0x4u /* HELD and recorded by free() inside the open group */
#define KVC__PG_GSEG 0x8u  /* HELD and recorded by free_segment() inside the open group */
#define KVC__PG_MARK 0x10u /* transient: seen earlier in the current call */
/* HELD and held by the radix cache bound to this allocator (allocator_cache.c): only
 * that cache's eviction frees it (0x20 is allocator_check.c's transient mark). */
#define KVC__PG_CACHED 0x40u

/* The free ring is the id ring of id_ring.h (the req pool's and the Mamba pool's too):
 * pop at the front, PAGED frees at the front, TOKEN frees at the back. */

struct kvc_allocator {
  uint64_t magic;
  kvc_context *ctx;
  kvc_allocator_kind kind;
  int32_t ps;
  int ps_shift; /* log2(ps) when ps is a power of two (divisions on the free path), else -1 */
  bool need_sort;
  bool check;     /* audit after every mutating call */
  bool simd;      /* AVX-512 paths allowed (kvc__simd_avx512 at create): the decode step */
  bool simd_free; /* TOKEN and simd: the frees' AVX-512 step */
  int64_t num_pages;

  kvc__ring ring;
  /* num_pages + 1 states, then RESERVED padding up to state_mask + 1 bytes. TOKEN kind:
   * state_mask = 2^k - 1 >= num_pages, so that the free's range test of four slots is one
   * OR and one compare: a slot in (num_pages, state_mask] reads RESERVED, fails the state
   * test and is re-checked exactly by the per-slot loop (allocator.c, token_free_fast).
   * PAGED kind: state_mask = num_pages, no padding (that path is TOKEN only). */
  uint8_t *state;
  uint64_t state_mask;
  uint32_t *deferred;
  int64_t deferred_count;

  /* Open free group: free() records grow from group[0] upward, free_segment() records
   * from group[num_pages - 1] downward; a page is recorded at most once, so they never
   * meet. */
  bool in_group;
  uint32_t *group;
  int64_t group_free_n, group_seg_n;

  /* Live backup. `epoch` moves on every free, group boundary and clear. */
  uint64_t epoch;
  uint64_t backup_serial;
  bool backup_live;
  bool backup_saved; /* a merge rewrote the ring: saved[] holds the backup image */
  uint64_t b_head, b_epoch;
  int64_t b_count, b_deferred;
  uint32_t *saved; /* b_count free ids, then b_deferred deferred ids */

  uint64_t merges;
  uint32_t *tmp_a, *tmp_b; /* num_pages each: unique/sort work space */

  /* Per-batch work space of alloc_extend / alloc_decode, grown rarely. */
  size_t batch_cap;
  int64_t *b_last;  /* resolved last_loc (extend) / new slot (decode) per request */
  int64_t *b_pages; /* pages needed per request (extend) */

  unsigned char *scratch; /* KVC__PARAM_SCRATCH_BYTES parameter block */
  const kvc__kfunc *k_extend[KVC__PLAN_INLINE_VARIANTS], *k_decode[KVC__PLAN_INLINE_VARIANTS];

  /* The radix cache whose held marks live in the states (KVC__PG_CACHED), NULL none
   * (kvc_radix_cache_bind_allocator). Last: read by the bound eviction, restore and clear
   * only, and placed among the hot fields above it moved the ring across a cache line
   * (the paged extend ran 10-30% slower on the H200's host, bench/RESULTS.md run 19). */
  const void *cache_owner;
};

/* --- free_list.c ------------------------------------------------------------------- */

/** Every page free in ascending order, nothing deferred or recorded. */
void kvc__fl_reset(kvc_allocator *a);
/** Sorts a[0:n) ascending (distinct page ids) using a->tmp_b; O(n). */
void kvc__fl_sort(kvc_allocator *a, uint32_t *v, int64_t n);
/** Folds deferred pages into the ring and sorts it (saving the backup image first when a
 *  live backup would otherwise lose it). No-op without deferred pages. */
void kvc__fl_merge(kvc_allocator *a);
/** Releases pages (HELD, marks cleared): to the side list with need_sort, else to the
 *  front of the ring keeping their order (PAGED) or the back (TOKEN). */
void kvc__fl_release(kvc_allocator *a, const uint32_t *pages, int64_t n);
/** Pops n pages from the front, marking them HELD. */
void kvc__fl_pop(kvc_allocator *a, int64_t n);
/** Full audit; KVC_ERR_INTERNAL with a message naming `fn` when violated. */
kvc_status kvc__fl_audit(const kvc_allocator *a, const char *fn);

/* --- Batch call arguments (kvc_allocator_alloc_extend / _decode document each) ---- */

/* The extend's arguments are the public kvc_extend_args (kvc_allocator_alloc_extend_ex),
 * so the slot-allocator interface and the public entry carry one struct. */
typedef kvc_extend_args kvc__extend_args;

typedef struct kvc__decode_args {
  size_t bs;
  const int64_t *seq_lens, *last_locs;
  kvc_req_to_token_pool *req_pool;
  const int32_t *rows;
  int64_t *out_host, *out_device;
  kvc_stream stream;
} kvc__decode_args;

/* A decode step between its plan and its commit (the decode channel publishes the
 * payload in between; neither side of it can fail). */
typedef struct kvc__decode_plan {
  uint32_t *payload; /* in: 3 words per request (row, position, slot), 4 with an SWA mapping */
  int64_t need;      /* the implementation's: pages the plan takes */
} kvc__decode_plan;

/* --- allocator.c ------------------------------------------------------------------- */

/** Check-mode epilogue of a mutating call: passes `st` through, or the audit's failure. */
kvc_status kvc__alloc_finish(kvc_allocator *a, const char *fn, kvc_status st);
/** kvc_allocator_free's validation of slots[0:n) (named `what` in messages, `fn` the
 *  caller): every page it would release is marked KVC__PG_MARK and appended to
 *  v[*k_io ...] (*k_io advanced); pages already recorded by an open group are skipped as
 *  free() skips them. On a refusal the status and message free() would give, and *bad
 *  (when not NULL) the index of the refused slot; the marks of v[0:*k_io) are the
 *  caller's to clear either way. */
kvc_status kvc__alloc_free_validate(kvc_allocator *a, const char *fn, const char *what, const int64_t *slots, size_t n,
                                    uint32_t *v, int64_t *k_io, size_t *bad);

/** The release half of kvc_allocator_free for the k pages v[0:k) that its validation
 *  (or a caller's own, as strict) accepted and marked: recorded by the open group, or
 *  sorted (PAGED) and put on the free list, exactly as free() does; then the check-mode
 *  audit. v is reordered. */
kvc_status kvc__alloc_release(kvc_allocator *a, const char *fn, uint32_t *v, int64_t k);

/** Whether a live backup still needs the ring's image behind the head and past the tail:
 *  no free since the backup (its epoch), no merge that saved it. While it does, a free
 *  may not write ids past the tail before it commits (they would land on entries a
 *  restore brings back); the fused frees (token_free_fast, the SWA page-1 free) check. */
static inline bool kvc__alloc_ring_image_live(const kvc_allocator *a) {
  return a->backup_live && !a->backup_saved && a->epoch == a->b_epoch;
}

/** Makes the per-batch arrays hold at least n requests (HOST_OOM, nothing changed). */
kvc_status kvc__alloc_batch_reserve(kvc_allocator *a, const char *fn, size_t n);

/* Tables of fewer entries than this get the decode kernels' two-word payload entries
 * (table offset, slot): an offset then fits the uint32 word and the header's int32
 * table_len (kernels/kvc_index.h, kvc_decode_write). */
#define KVC__DECODE_TWO_WORD_LIMIT ((int64_t)1 << 31)

/** The decode kernels' table_len for a req_to_token table of rows x width entries:
 *  that count when it is below `limit` (at most KVC__DECODE_TWO_WORD_LIMIT; a parameter
 *  so that a test can move the boundary), else 0, the three-word form. Overflow-safe for
 *  any int64 arguments; a negative count is 0. */
static inline int32_t kvc__decode_table_len(int64_t rows, int64_t width, int64_t limit) {
  int64_t entries;
  if (limit > KVC__DECODE_TWO_WORD_LIMIT) limit = KVC__DECODE_TWO_WORD_LIMIT;
  if (rows <= 0 || width <= 0 || __builtin_mul_overflow(rows, width, &entries) || entries >= limit) return 0;
  return (int32_t)entries;
}

/** kvc__decode_table_len of a req pool's device table ((size + 1) x width: row 0 is the
 *  padding row); 0 for NULL. */
static inline int32_t kvc__req_pool_table_len(const kvc_req_to_token_pool *rp) {
  return rp ? kvc__decode_table_len((int64_t)rp->size + 1, rp->width, KVC__DECODE_TWO_WORD_LIMIT) : 0;
}

/* alloc_decode in pieces (allocator_plan.c), shared by kvc_allocator_alloc_decode and
 * the decode channel. plan validates the batch, picks every slot, writes the kernel
 * payload (when not NULL: `stride` words per request: 2 = (table offset, slot), allowed
 * only when kvc__req_pool_table_len(req pool) > 0; 3 or 4 = (row, position, slot) first)
 * and the req pool mirror; nothing changes on failure. undo reverts a successful plan's mirror writes (the launch failed); finish
 * copies out_host and pops the pages taken. */
kvc_status kvc__alloc_decode_plan(kvc_allocator *a, const char *fn, const kvc__decode_args *x, uint32_t *payload,
                                  size_t stride, int64_t *need);
/* What alloc_extend needs to also write the SWA allocator's full->SWA mapping in its one
 * launch: map[slot] = swa_slots[t] for token t of the batch (out_host order), entries
 * outside [0, map_len) skipped. swa_slots must come from a paged allocator of the same
 * page size given swa_last[i] (-1: none) as request i's last_loc, so that every new full
 * page has one SWA page and the kernel derives SWA slots as it derives full ones. The
 * host copy of the map is the caller's. */
typedef struct kvc__extend_map {
  int64_t *map;
  int64_t map_len;
  const int64_t *swa_slots, *swa_last;
  /* The SWA allocator's queued zeroes (zero_count (idx, len) runs of whole pages; 0: none)
   * to carry in the same launch, minus the new pages (whose every slot the launch writes:
   * its pair, or 0 past the request's end); when a continued partial page is queued,
   * settle(user, stream) launches them alone first. *zero_merged is set true when the
   * launch carried them (the caller then empties its queue). */
  const uint32_t *zero;
  size_t zero_count;
  uint8_t *zero_pages; /* marked 2 for a moment while the new pages are filtered out */
  kvc_status (*settle)(void *user, kvc_stream stream);
  void *settle_user;
  bool *zero_merged;
} kvc__extend_map;
kvc_status kvc__alloc_extend_mapped(kvc_allocator *a, const char *fn, const kvc__extend_args *x,
                                    const kvc__extend_map *m);
/* alloc_decode that also writes map[slot] = vals[i] (int64 map, entries outside
 * [0, map_len) skipped, map_len <= INT32_MAX) for every new slot in the same launch: the
 * SWA allocator's full->SWA mapping. The host copy of the map is the caller's.
 * With zero_count > 0 the SWA allocator's queued zeroes (runs of whole pages, marked in
 * zero_pages) ride in the same launch, minus the `need` new pages the step takes (the
 * kernel writes those whole: the pair, then 0 past it); the caller has checked
 * kvc__alloc_decode_can_carry and counted need as the step does (seq_lens[i] - 1 a
 * multiple of the page size). *zero_merged is set true when the launch carried them. */
typedef struct kvc__decode_map {
  int64_t *map;
  int64_t map_len;
  const int64_t *vals;
  const uint32_t *zero;
  size_t zero_count;
  uint8_t *zero_pages; /* marked 2 for a moment while the new pages are filtered out */
  int64_t need;
  bool *zero_merged;
} kvc__decode_map;
kvc_status kvc__alloc_decode_mapped(kvc_allocator *a, const char *fn, const kvc__decode_args *x,
                                    const kvc__decode_map *m);
/* Whether an alloc_decode of bs requests can carry a zero queue of zero_count runs in its
 * launch: its new pages are then the free ring's first ones (no merge), and the payload's
 * word offsets stay below 2^31. */
static inline bool kvc__alloc_decode_can_carry(const kvc_allocator *a, size_t bs, size_t zero_count) {
  return (int64_t)bs <= a->ring.count && bs <= (size_t)(INT32_MAX / 16) && zero_count <= (size_t)(INT32_MAX / 8);
}
void kvc__alloc_decode_undo(kvc_allocator *a, size_t bs, const int64_t *seq_lens, kvc_req_to_token_pool *rp,
                            const int32_t *req_rows);
kvc_status kvc__alloc_decode_finish(kvc_allocator *a, const char *fn, size_t bs, int64_t *out_host, int64_t need);

/** Whether `page` is handed out and not taken back, nor recorded by an open free group:
 *  its slots may hold live KV. The one reading of the page states outside the allocator
 *  (SWA validation, canary refills), inline because SWA frees run it per slot. */
static inline bool kvc__alloc_page_held(const kvc_allocator *a, int64_t page) {
  if (page < 1 || page > a->num_pages) return false;
  const uint8_t s = a->state[page];
  return (s & KVC__PG_STATE) == KVC__PG_HELD && !(s & (KVC__PG_GFREE | KVC__PG_GSEG));
}
static inline int64_t kvc__alloc_num_pages(const kvc_allocator *a) { return a->num_pages; }

/* --- allocator_cache.c: a bound radix cache's held marks in the page states ---------- */

/* A radix cache at page 1 bound to a TOKEN allocator (kvc_radix_cache_bind_allocator)
 * keeps its "held by the cache" mark as KVC__PG_CACHED on the slot's own state byte
 * instead of in a byte array of its own. An eviction then reads and writes one byte per
 * slot, not one in each array: the validated free of its victims checks the state is
 * exactly HELD | CACHED, which says both that the allocator handed the slot out and that
 * the cache holds it, and its store of FREE clears the cache's mark too. Every other free
 * refuses a CACHED slot (the fast paths accept exactly HELD only, the checked loop says
 * why), so a slot the cache holds cannot be freed behind its back. */

/** Binds a TOKEN allocator to `owner` (INVALID_ARGUMENT for a PAGED one, MISUSE when it
 *  is bound already; nothing changes on failure). */
kvc_status kvc__alloc_bind_cache(kvc_allocator *a, const void *owner, const char *fn);
/** Unbinds it from `owner` (no-op when bound to another or to none). No CACHED state may
 *  be left: the cache unmarks its slots first. */
void kvc__alloc_unbind_cache(kvc_allocator *a, const void *owner);
/** Marks slots[0:n) CACHED, in order, while each is exactly HELD (handed out, not CACHED,
 *  not recorded by an open group) and in [1, num_pages]; a repeat reads the CACHED its
 *  first listing wrote and stops there. Returns how many were marked (n: all); the caller
 *  unmarks those on a failure. */
size_t kvc__alloc_cache_mark(kvc_allocator *a, const int64_t *slots, size_t n);
/** Clears the CACHED mark of slots[0:n) (all marked): they stay HELD. */
void kvc__alloc_cache_unmark(kvc_allocator *a, const int64_t *slots, size_t n);
/** Whether slot s is in [1, num_pages] and CACHED. */
static inline bool kvc__alloc_slot_cached(const kvc_allocator *a, int64_t s) {
  return s >= 1 && s <= a->num_pages && (a->state[s] & KVC__PG_CACHED);
}
/** Whether any of the ids[0:n) (page ids in [1, num_pages]) is CACHED. */
bool kvc__alloc_any_cached(const kvc_allocator *a, const uint32_t *ids, int64_t n);
/** The bound cache's free of its victims' slots (allocator.c): each must be exactly
 *  HELD | CACHED; they are released as kvc_allocator_free releases HELD slots (same ring
 *  order, groups, need_sort and live backups honoured), in one pass when no group is open
 *  and nothing is deferred. MISUSE naming the first bad slot otherwise, nothing changed. */
kvc_status kvc__alloc_free_cached(kvc_allocator *a, const char *fn, const int64_t *slots, size_t n);

/* Page arithmetic without a division when the page size is a power of two (the hot
 * paths run it per request and per slot). */
static inline int64_t kvc__pg_div(const kvc_allocator *a, int64_t x) {
  return a->ps_shift >= 0 ? x >> a->ps_shift : x / a->ps;
}
static inline int64_t kvc__pg_mod(const kvc_allocator *a, int64_t x) {
  return a->ps_shift >= 0 ? x & (a->ps - 1) : x % a->ps;
}

#endif /* KVC_POOL_H */
