/*
 * session.c — streaming sessions (SGLang SessionAwareCache / SessionSlot).
 *
 * A session's request keeps its KV between turns: at finish the row, lengths and Mamba
 * slot move from the request into the session's slot (the request then holds nothing, so
 * release frees nothing); the next turn's match restores them into the new request, and
 * the row is reused as is. Everything else passes through to the inner cache.
 *
 *   slots: open-addressing table keyed by session id (0 = empty, tombstone = deleted)
 *
 * The table is sized by the live sessions, not by those ever created: a rehash (when
 * live + tombstones reach half of it) drops the tombstones and picks the capacity for
 * the live entries, and releasing shrinks it once live entries fill under 1/8. So memory
 * and the O(capacity) scans (held, cached_size) follow the sessions alive now.
 */
#include "../flow/flow.h"

#include <string.h>

#define KVC__SESSION_MAGIC 0x6b76632d73657373ull
#define TOMBSTONE UINT64_MAX

typedef struct session_slot {
  uint64_t id;
  int32_t req_row; /* 0 = holds nothing */
  int32_t mamba_slot;
  int32_t lent; /* restored into a running turn: its pages are counted by the request */
  int32_t track[2];
  int64_t committed, allocated, cache_protected_len, swa_evicted_seqlen;
  void *last_node; /* the first turn's cache node, locked by the inner cache */
} session_slot;

struct kvc_session_cache {
  uint64_t magic;
  kvc_context *ctx;
  kvc_prefix_cache inner;
  session_slot *slots;
  size_t cap, used; /* used counts live + tombstones */
  size_t live;      /* entries with a session id */
  int64_t ps;       /* the flow's page size, learned at the first finished request */
};

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

static session_slot *find(const kvc_session_cache *s, uint64_t id) {
  if (!id || id == TOMBSTONE) return NULL;
  for (size_t i = mix(id) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
    if (s->slots[i].id == id) return &s->slots[i];
    if (s->slots[i].id == 0) return NULL;
  }
}

#define MIN_SLOTS 64

/* The capacity for `live` entries: a power of two >= 4 x live, so that at least as many
 * inserts again fit before the next rehash. */
static size_t capacity_for(size_t live) {
  size_t cap = MIN_SLOTS;
  while (cap / 4 < live) cap *= 2;
  return cap;
}

/* Moves the live entries into a table of `cap` slots (tombstones dropped). False, with
 * nothing changed, when the table cannot be allocated. */
static bool move_to(kvc_session_cache *s, size_t cap) {
  session_slot *slots = kvc__calloc(s->ctx, cap, sizeof *slots);
  if (!slots) return false;
  size_t used = 0;
  for (size_t i = 0; i < s->cap; i++) {
    const uint64_t id = s->slots[i].id;
    if (!id || id == TOMBSTONE) continue;
    size_t j = mix(id) & (cap - 1);
    while (slots[j].id) j = (j + 1) & (cap - 1);
    slots[j] = s->slots[i];
    used++;
  }
  kvc__free(s->ctx, s->slots);
  s->slots = slots;
  s->cap = cap;
  s->used = used;
  return true;
}

static kvc_status insert(kvc_session_cache *s, uint64_t id, session_slot **out) {
  /* Never below half the current size: a table refilled right after a shrink would
   * otherwise rehash at every other insert. */
  if ((s->used + 1) * 2 > s->cap && !move_to(s, KVC__MAX(s->cap / 2, capacity_for(s->live + 1))))
    return kvc__error(s->ctx, KVC_ERR_HOST_OOM, __func__, "session table of %zu slots", capacity_for(s->live + 1));
  size_t i = mix(id) & (s->cap - 1);
  while (s->slots[i].id && s->slots[i].id != TOMBSTONE) i = (i + 1) & (s->cap - 1);
  if (s->slots[i].id == 0) s->used++;
  memset(&s->slots[i], 0, sizeof s->slots[i]);
  s->slots[i].id = id;
  s->live++;
  *out = &s->slots[i];
  return KVC_OK;
}

/* Deletes a found entry; shrinks the table when it has become mostly empty. A failed
 * shrink keeps the larger table (nothing is lost, the call still succeeds). */
static void erase(kvc_session_cache *s, session_slot *x) {
  memset(x, 0, sizeof *x);
  x->id = TOMBSTONE;
  s->live--;
  if (s->cap > MIN_SLOTS && s->live * 8 < s->cap) (void)move_to(s, capacity_for(s->live));
}

/* --- Prefix-cache callbacks -------------------------------------------------------------- */

static int sc_is_chunk(void *self) {
  kvc_session_cache *s = self;
  return s->inner.is_chunk_cache ? s->inner.is_chunk_cache(s->inner.self) : 0;
}
static int sc_supports_mamba(void *self) {
  kvc_session_cache *s = self;
  return s->inner.supports_mamba ? s->inner.supports_mamba(s->inner.self) : 0;
}
static kvc_status sc_evict(void *self, kvc_flow *f, int64_t n, int64_t swa_n, int64_t mamba_n) {
  kvc_session_cache *s = self;
  return s->inner.evict ? s->inner.evict(s->inner.self, f, n, swa_n, mamba_n) : KVC_OK;
}
static int64_t sc_evictable(void *self) {
  kvc_session_cache *s = self;
  return s->inner.evictable_size ? s->inner.evictable_size(s->inner.self) : 0;
}
static int64_t sc_protected(void *self) {
  kvc_session_cache *s = self;
  return s->inner.protected_size ? s->inner.protected_size(s->inner.self) : 0;
}

/* Tokens whose pages the sessions hold, page-aligned per session. */
static int64_t held_tokens(const kvc_session_cache *s, int64_t ps, bool swa) {
  int64_t t = 0;
  for (size_t i = 0; i < s->cap; i++) {
    const session_slot *x = &s->slots[i];
    if (!x->id || x->id == TOMBSTONE || !x->req_row || x->lent) continue;
    int64_t floor = x->cache_protected_len;
    if (swa && x->swa_evicted_seqlen > floor) floor = x->swa_evicted_seqlen;
    t += kvc__ceil_align(x->allocated, ps) - floor;
  }
  return t;
}

static int64_t sc_cached(void *self) {
  kvc_session_cache *s = self;
  int64_t inner = s->inner.cached_size ? s->inner.cached_size(s->inner.self) : 0;
  return inner + held_tokens(s, s->ps, false);
}

static kvc_status sc_finished(void *self, kvc_flow *f, kvc_req_state *req, int is_insert) {
  kvc_session_cache *s = self;
  if (!req->session_id) {
    if (s->inner.cache_finished_req) return s->inner.cache_finished_req(s->inner.self, f, req, is_insert);
    return kvc__chunk_cache_finished(NULL, f, req, is_insert);
  }
  session_slot *x = find(s, req->session_id);
  KVC_RETURN_IF(x && x->req_row && x->req_row != req->req_row, s->ctx, KVC_ERR_MISUSE,
                "session %llu already holds row %d (match the new turn before finishing it)",
                (unsigned long long)req->session_id, x->req_row);
  /* The slot first (its only failure, HOST_OOM, then changes nothing). */
  bool first = x == NULL;
  if (first) KVC_FORWARD(insert(s, req->session_id, &x));
  /* Tokens allocated past the committed ones (speculative decoding): whole pages beyond
   * the committed page are freed, and the request's allocated length drops to the
   * committed one in every case, so the next turn continues exactly there (its first new
   * tokens reuse the rest of the committed page). SGLang keeps the tail with the slot and
   * the next turn overwrites those row entries (a leak). */
  int64_t keep = f->ps > 1 ? kvc__ceil_align(req->kv_committed_len, f->ps) : req->kv_committed_len;
  if (req->kv_allocated_len > keep) {
    kvc_status st = kvc_flow_row_slots(f, req->req_row, keep, req->kv_allocated_len, f->row_slots);
    if (st == KVC_OK) st = kvc_flow_free_slots(f, f->row_slots, (size_t)(req->kv_allocated_len - keep));
    if (st != KVC_OK) {
      if (first) erase(s, x);
      return st;
    }
  }
  if (req->kv_allocated_len > req->kv_committed_len) req->kv_allocated_len = req->kv_committed_len;
  s->ps = f->ps;
  x->lent = 0;
  x->req_row = req->req_row;
  x->mamba_slot = req->mamba_slot;
  x->track[0] = req->mamba_track[0];
  x->track[1] = req->mamba_track[1];
  x->committed = req->kv_committed_len;
  x->allocated = req->kv_allocated_len;
  x->swa_evicted_seqlen = req->swa_evicted_seqlen;
  if (first) {
    x->last_node = req->cache_node;
    x->cache_protected_len = req->cache_protected_len;
  }
  /* Ownership moves to the session: the release path frees nothing. */
  req->req_row = 0;
  req->mamba_slot = 0;
  req->mamba_track[0] = req->mamba_track[1] = 0;
  return KVC_OK;
}

static kvc_status sc_unfinished(void *self, kvc_flow *f, kvc_req_state *req) {
  kvc_session_cache *s = self;
  if (req->session_id) {
    if (req->flags & KVC_REQ_CHUNKED) {
      /* Between chunks of a session turn: the row is the prefix, no tree insert. */
      req->prefix_slots = NULL;
      req->prefix_len = req->kv_committed_len;
      return KVC_OK;
    }
    if (find(s, req->session_id)) return KVC_OK;
  }
  if (s->inner.cache_unfinished_req) return s->inner.cache_unfinished_req(s->inner.self, f, req);
  return kvc__chunk_cache_unfinished(NULL, f, req);
}

static void sc_inc(void *self, void *node) {
  kvc_session_cache *s = self;
  if (s->inner.inc_lock_ref && node) s->inner.inc_lock_ref(s->inner.self, node);
}
static void sc_dec(void *self, void *node) {
  kvc_session_cache *s = self;
  if (s->inner.dec_lock_ref && node) s->inner.dec_lock_ref(s->inner.self, node);
}

/* --- Public --------------------------------------------------------------------------------- */

kvc_status kvc_session_cache_create(kvc_context *ctx, const kvc_prefix_cache *inner, kvc_session_cache **out) {
  KVC_API_ENTRY();
  KVC_RETURN_IF(!ctx, NULL, KVC_ERR_INVALID_ARGUMENT, "ctx is NULL");
  KVC_RETURN_IF(!out, ctx, KVC_ERR_INVALID_ARGUMENT, "out is NULL");
  kvc_session_cache *s = kvc__calloc(ctx, 1, sizeof *s);
  KVC_RETURN_IF(!s, ctx, KVC_ERR_HOST_OOM, "session cache");
  s->magic = KVC__SESSION_MAGIC;
  s->ctx = ctx;
  s->inner = inner ? *inner : kvc_chunk_cache();
  s->cap = MIN_SLOTS;
  s->ps = 1;
  s->slots = kvc__calloc(ctx, s->cap, sizeof *s->slots);
  if (!s->slots) {
    kvc__free(ctx, s);
    return kvc__error(ctx, KVC_ERR_HOST_OOM, __func__, "session slots");
  }
  *out = s;
  return KVC_OK;
}

void kvc_session_cache_destroy(kvc_session_cache *s) {
  if (!s || s->magic != KVC__SESSION_MAGIC) return;
  s->magic = 0;
  kvc__free(s->ctx, s->slots);
  kvc__free(s->ctx, s);
}

kvc_prefix_cache kvc_session_cache_as_prefix_cache(kvc_session_cache *s) {
  kvc_prefix_cache c;
  memset(&c, 0, sizeof c);
  c.self = s;
  c.is_chunk_cache = sc_is_chunk;
  c.supports_mamba = sc_supports_mamba;
  c.evict = sc_evict;
  c.evictable_size = sc_evictable;
  c.protected_size = sc_protected;
  c.cached_size = sc_cached;
  c.cache_finished_req = sc_finished;
  c.cache_unfinished_req = sc_unfinished;
  c.inc_lock_ref = sc_inc;
  c.dec_lock_ref = sc_dec;
  return c;
}

static kvc_status check(const kvc_session_cache *s, const char *fn) {
  if (!s || s->magic != KVC__SESSION_MAGIC)
    return kvc__error(NULL, KVC_ERR_INVALID_ARGUMENT, fn, "not a live session cache");
  return KVC_OK;
}

kvc_status kvc_session_cache_match(kvc_session_cache *s, kvc_req_state *req, int64_t num_tokens, int *matched) {
  KVC_API_ENTRY();
  KVC_FORWARD(check(s, __func__));
  KVC_RETURN_IF(!req || !matched, s->ctx, KVC_ERR_INVALID_ARGUMENT, "req or matched is NULL");
  KVC_RETURN_IF(num_tokens < 0, s->ctx, KVC_ERR_INVALID_ARGUMENT, "num_tokens %lld < 0", (long long)num_tokens);
  *matched = 0;
  session_slot *x = req->session_id ? find(s, req->session_id) : NULL;
  if (!x || !x->req_row) return KVC_OK;
  /* Restore (the slot keeps its copy: a retried request gets the same state). */
  req->req_row = x->req_row;
  req->mamba_slot = x->mamba_slot;
  req->mamba_track[0] = x->track[0];
  req->mamba_track[1] = x->track[1];
  req->kv_committed_len = x->committed;
  req->kv_allocated_len = x->allocated;
  req->swa_evicted_seqlen = x->swa_evicted_seqlen;
  req->cache_protected_len = x->cache_protected_len;
  req->cache_node = x->last_node;
  int64_t cap = num_tokens - 1 > 0 ? num_tokens - 1 : 0;
  req->prefix_len = x->committed < cap ? x->committed : cap;
  req->prefix_slots = NULL;
  x->lent = 1;
  *matched = 1;
  return KVC_OK;
}

kvc_status kvc_session_cache_release(kvc_session_cache *s, kvc_flow *f, uint64_t session_id) {
  KVC_API_ENTRY();
  KVC_FORWARD(check(s, __func__));
  KVC_FORWARD(kvc__flow_check_handle(f, __func__));
  session_slot *x = find(s, session_id);
  KVC_RETURN_IF(!x, s->ctx, KVC_ERR_INVALID_ARGUMENT, "no session %llu", (unsigned long long)session_id);
  KVC_RETURN_IF(x->lent, s->ctx, KVC_ERR_MISUSE,
                "session %llu has a turn running (its row is lent to a request): finish or release it first",
                (unsigned long long)session_id);
  if (x->req_row) {
    /* Reachable only when the engine freed the row behind the session (e.g. a stale
     * request state naming it): misuse, not an internal error. */
    KVC_RETURN_IF(!kvc_req_to_token_pool_is_held(f->cfg.req_pool, x->req_row), s->ctx, KVC_ERR_MISUSE,
                  "session %llu holds row %d which the pool does not hold (freed behind the session?)",
                  (unsigned long long)session_id, x->req_row);
    int64_t start = x->cache_protected_len, end = x->allocated;
    if (start < end) {
      KVC_FORWARD(kvc_flow_row_slots(f, x->req_row, start, end, f->row_slots));
      KVC_FORWARD(kvc_flow_free_slots(f, f->row_slots, (size_t)(end - start)));
    }
    /* SGLang forgets the session's Mamba state here (spec 15.6); it is returned. */
    kvc_req_state tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.req_row = x->req_row;
    tmp.mamba_slot = x->mamba_slot;
    f->stream = NULL;
    KVC_FORWARD(kvc__flow_free_mamba(f, &tmp));
    KVC_FORWARD(kvc_req_to_token_pool_free(f->cfg.req_pool, x->req_row));
  }
  if (x->last_node && s->inner.dec_lock_ref) s->inner.dec_lock_ref(s->inner.self, x->last_node);
  erase(s, x);
  return KVC_OK;
}

kvc_status kvc_session_cache_held(const kvc_session_cache *s, int64_t page_size, int64_t *held, int64_t *held_swa,
                                  int64_t *reqs) {
  KVC_API_ENTRY();
  KVC_FORWARD(check(s, __func__));
  KVC_RETURN_IF(page_size < 1, s->ctx, KVC_ERR_INVALID_ARGUMENT, "page_size %lld < 1", (long long)page_size);
  if (held) *held = held_tokens(s, page_size, false);
  if (held_swa) *held_swa = held_tokens(s, page_size, true);
  if (reqs) {
    int64_t n = 0;
    for (size_t i = 0; i < s->cap; i++) n += s->slots[i].id && s->slots[i].id != TOMBSTONE && s->slots[i].req_row;
    *reqs = n;
  }
  return KVC_OK;
}

void kvc_session_cache_reset(kvc_session_cache *s) {
  if (!s || s->magic != KVC__SESSION_MAGIC) return;
  memset(s->slots, 0, s->cap * sizeof *s->slots);
  s->used = 0;
  s->live = 0;
}
