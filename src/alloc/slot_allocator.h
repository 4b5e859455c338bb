/*
 * slot_allocator.h — the one internal interface through which everything above the
 * allocators (flows, decode channel, prefix caches through the flows, canary mode)
 * hands out and takes back KV slots. Two implementations sit behind it:
 *
 *   slot_token.c  the token / paged kvc_allocator
 *   swa_slot.c    the SWA allocator (two kvc_allocators + the full->SWA mapping)
 *
 * A kvc__slot_allocator is a small value (ops table, implementation, observer) that
 * its user embeds; a call is one indirect jump into the implementation, which then
 * runs the same code as the public entry point (fast paths and the decode plan/commit
 * split included). What only one kind does stays behind the table: the SWA window
 * eviction (free_window), the SWA side's share of the capacity checks, the mapping the
 * decode channel's kernel writes.
 *
 * The observer (canary mode) is told of every free (by the implementation, which alone
 * knows which slots of which side a free released) and of every allocation (through
 * kvc__slot_announce once the user's step is final). Without one nothing extra runs.
 */
#ifndef KVC_SLOT_ALLOCATOR_H
#define KVC_SLOT_ALLOCATOR_H

#include "alloc.h"

typedef struct kvc__slot_allocator kvc__slot_allocator;

/* A free's arguments. `told` receives the observer's verdict on the released slots
 * (KVC_OK without one); the free itself is done whenever the call returns KVC_OK. */
typedef struct kvc__free_args {
  const int64_t *slots;
  size_t n;
  int64_t start_pos; /* free_segment only */
  kvc_stream stream;
  const char *fn; /* the entry point, for the observer's errors */
  kvc_status *told;
} kvc__free_args;

/* --- Observer ----------------------------------------------------------------------- */

/* Which slot space an event's slots index: the full side (every allocator has one) or
 * the SWA side of an SWA allocator. */
typedef enum kvc__slot_side { KVC__SIDE_FULL = 1, KVC__SIDE_SWA = 2 } kvc__slot_side;

typedef struct kvc__slot_event {
  kvc__slot_side side;
  /* The allocator of those slots' pages, whose still-held pages must be left alone
   * (NULL: every page the slots touch was released). */
  const kvc_allocator *owner;
  const int64_t *slots;
  size_t n;
  size_t of; /* SWA allocation events: how many full slots the n peers belong to */
  kvc_stream stream;
} kvc__slot_event;

typedef struct kvc__slot_observer {
  void *self;
  unsigned sides; /* KVC__SIDE_* bits the observer wants events of */
  /* Before an allocation of n slots: a host array for them (must not fail after it). */
  kvc_status (*reserve)(void *self, const char *fn, size_t n, int64_t **host);
  kvc_status (*allocated)(void *self, const kvc__slot_event *ev);
  kvc_status (*freed)(void *self, const kvc__slot_event *ev);
} kvc__slot_observer;

/* --- Operations --------------------------------------------------------------------- */

typedef struct kvc__slot_ops {
  kvc_status (*extend)(const kvc__slot_allocator *sa, const kvc__extend_args *x);
  kvc_status (*decode)(const kvc__slot_allocator *sa, const kvc__decode_args *x);
  /* decode split in two: plan validates, picks every slot and writes the payload
   * (nothing changes on failure); commit makes the plan the allocator's state and
   * returns the check-mode audit's verdict. bs == 0: both do nothing. */
  kvc_status (*decode_plan)(const kvc__slot_allocator *sa, const char *fn, const kvc__decode_args *x,
                            kvc__decode_plan *p);
  kvc_status (*decode_commit)(const kvc__slot_allocator *sa, const char *fn, const kvc__decode_args *x,
                              kvc__decode_plan *p);
  /* The flows' free: with an SWA allocator, slots whose SWA peer window eviction
   * already released give back only their full side. */
  kvc_status (*free)(const kvc__slot_allocator *sa, const kvc__free_args *x);
  kvc_status (*free_segment)(const kvc__slot_allocator *sa, const kvc__free_args *x);
  /* Window eviction: releases the SWA side of held full slots. NULL: no window. */
  kvc_status (*free_window)(const kvc__slot_allocator *sa, const kvc__free_args *x);
  kvc_status (*group_begin)(const kvc__slot_allocator *sa);
  kvc_status (*group_end)(const kvc__slot_allocator *sa);
  /* O(1) snapshot of the free lists. NULL: not offered (the SWA mapping has none). */
  kvc_status (*backup)(const kvc__slot_allocator *sa, kvc_allocator_state *out);
  kvc_status (*restore)(const kvc__slot_allocator *sa, const kvc_allocator_state *state);
  int64_t (*available)(const kvc__slot_allocator *sa);
  /* Whether `pages` new pages fit (on every side). */
  bool (*fits)(const kvc__slot_allocator *sa, int64_t pages);
  /* Whether a step of `tokens` needs the cache to evict, and how much of each side
   * (SGLang asks one pool for n, the SWA composite for each side's deficit). */
  bool (*evict_need)(const kvc__slot_allocator *sa, int64_t tokens, int64_t *full, int64_t *swa);
  /* Whether free_window releases the slots themselves rather than one side of them (a
   * pure-SWA pool: every layer SWA, one pool): the part of a request's row that window
   * eviction released is then not the request's any more (kvc__flow_row_dead). NULL: no. */
  bool (*window_frees_slots)(const kvc__slot_allocator *sa);
  /* Extra text for an out-of-memory message ("" or each side's availability). */
  void (*describe)(const kvc__slot_allocator *sa, char *buf, size_t cap);
  kvc_status (*check)(const kvc__slot_allocator *sa);
  /* The allocator whose held pages the flows' conservation audit counts. */
  const kvc_allocator *(*full)(const kvc__slot_allocator *sa);
  /* Observer support: reserve room to report n new slots; tell it of them. */
  kvc_status (*observe_reserve)(const kvc__slot_allocator *sa, const char *fn, size_t n);
  kvc_status (*announce)(const kvc__slot_allocator *sa, const int64_t *slots, size_t n, kvc_stream stream);
  /* A decode channel's binding: the allocator whose slots its kernel writes and the
   * device mapping it updates (*map NULL: none). NULL return: no channel possible. */
  kvc_allocator *(*channel)(const kvc__slot_allocator *sa, int64_t **map, int64_t *map_len);
} kvc__slot_ops;

struct kvc__slot_allocator {
  const kvc__slot_ops *ops;
  void *impl;                    /* kvc_allocator or kvc_swa_allocator */
  const kvc__slot_observer *obs; /* NULL: nobody listens */
};

/** The interface over a plain allocator (slot_token.c) and over an SWA allocator
 *  (swa_slot.c); the observer is left NULL. */
kvc__slot_allocator kvc__slot_allocator_plain(kvc_allocator *a);
kvc__slot_allocator kvc__slot_allocator_swa(kvc_swa_allocator *a);

/* --- Calls (what the users write) --------------------------------------------------- */

static inline kvc_status kvc__slot_extend(const kvc__slot_allocator *sa, const kvc__extend_args *x) {
  return sa->ops->extend(sa, x);
}
static inline kvc_status kvc__slot_decode(const kvc__slot_allocator *sa, const kvc__decode_args *x) {
  return sa->ops->decode(sa, x);
}
static inline kvc_status kvc__slot_free(const kvc__slot_allocator *sa, const kvc__free_args *x) {
  return sa->ops->free(sa, x);
}
static inline int64_t kvc__slot_available(const kvc__slot_allocator *sa) { return sa->ops->available(sa); }
static inline bool kvc__slot_fits(const kvc__slot_allocator *sa, int64_t pages) { return sa->ops->fits(sa, pages); }
static inline kvc_status kvc__slot_group_begin(const kvc__slot_allocator *sa) { return sa->ops->group_begin(sa); }
static inline kvc_status kvc__slot_group_end(const kvc__slot_allocator *sa) { return sa->ops->group_end(sa); }

/** Before an allocation the observer must hear of: *host is where the n new slots go
 *  (NULL without an observer, and then nothing is done). A failure changes nothing. */
static inline kvc_status kvc__slot_observe_reserve(const kvc__slot_allocator *sa, const char *fn, size_t n,
                                                   int64_t **host) {
  *host = NULL;
  if (!sa->obs) return KVC_OK;
  KVC_FORWARD(sa->obs->reserve(sa->obs->self, fn, n, host));
  return sa->ops->observe_reserve ? sa->ops->observe_reserve(sa, fn, n) : KVC_OK;
}

/** Tells the observer of the n slots an allocation returned in `slots` (the host array
 *  kvc__slot_observe_reserve gave); returns its verdict. */
static inline kvc_status kvc__slot_announce(const kvc__slot_allocator *sa, const int64_t *slots, size_t n,
                                            kvc_stream stream) {
  return sa->obs && slots ? sa->ops->announce(sa, slots, n, stream) : KVC_OK;
}

/** Whether `sa` and `other` are the same allocator. */
static inline bool kvc__slot_same(const kvc__slot_allocator *sa, const kvc__slot_allocator *other) {
  return sa->ops == other->ops && sa->impl == other->impl;
}

/* --- The decode channel's bindings (decode_channel.c) ------------------------------ */

/** Whether `ch` is a live channel over `sa` and `rp` (flows that route decode steps
 *  through one). */
bool kvc__decode_channel_binds(const kvc_decode_channel *ch, const kvc__slot_allocator *sa,
                               const kvc_req_to_token_pool *rp);
/** The channel's out_cache_loc array (its kernel writes it). */
int64_t *kvc__decode_channel_out(const kvc_decode_channel *ch);
/** KVC_OK when the channel can publish its next step now: no execution found its step
 *  unpublished (else KVC_ERR_MISUSE) and the ring slot is free (else KVC_ERR_BUSY). */
kvc_status kvc__decode_channel_ready(const kvc_decode_channel *ch, const char *fn);
/** Whether `a` is a live SWA allocator (swa_allocator.c). */
bool kvc__swa_allocator_live(const kvc_swa_allocator *a);

/* --- For the implementations -------------------------------------------------------- */

/** Tells the observer (when it wants `side`) of released slots; KVC_OK otherwise. */
static inline kvc_status kvc__slot_tell_freed(const kvc__slot_allocator *sa, kvc__slot_side side,
                                              const kvc_allocator *owner, const int64_t *slots, size_t n,
                                              kvc_stream stream) {
  if (!sa->obs || !(sa->obs->sides & (unsigned)side)) return KVC_OK;
  const kvc__slot_event ev = {side, owner, slots, n, 0, stream};
  return sa->obs->freed(sa->obs->self, &ev);
}

#endif
