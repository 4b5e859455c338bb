/*
 * test_flow_canary_swa.c — canary mode of SWA flows (kvc_flow_set_canary_swa) on both
 * backends: a flow over an SWA allocator guards both halves of a kvc_swa_kv_pool (full
 * layers at full slots, SWA layers at SWA slots). Steps that write real KV (set_kv at
 * every new slot, both halves), window eviction and releases pass their checks; a write
 * into a freed SWA or full row is named by the step that hands the slot out again; a
 * refill never touches a row still in use; refill failures keep the flow consistent.
 */
#include "harness.h"
#include "../kv/kv_test_util.h"

#include "core/fault.h"

/* At page size 1, releasing a request after window eviction frees full slots whose SWA
 * peers are gone; the flows free those through kvc__swa_allocator_free_evicted (their
 * full side only), which the release steps below exercise. */
#define ROW_BYTES 16 /* 1 head x 8 bf16 values, K and V alike, both halves */
#define KV_ROWS 1024 /* staging rows for set_kv */

static const int32_t g_full_ids[2] = {0, 2}, g_swa_ids[2] = {1, 3};

typedef struct world {
  kvc_req_to_token_pool *pool;
  kvc_swa_allocator *swa;
  kvc_swa_kv_pool *kv;
  kvc_kv_pool *full, *half; /* the pool's halves (borrowed) */
  kvc_flow *flow;
  kvc_decode_channel *ch;
  int64_t *out;        /* device out_cache_loc (the channel's out_device when ch) */
  void *k, *v;         /* device staging rows for set_kv */
  int32_t nfull, nswa; /* layers per side */
} world;

static kvc_req_state req0(int64_t seq) {
  kvc_req_state r;
  memset(&r, 0, sizeof r);
  r.seq_len = seq;
  return r;
}

/* A 4-row request pool (width 256), an SWA allocator (ps, size_full / size_swa), an SWA
 * KV pool of the same geometry with nfull full and nswa SWA layers (registered with the
 * allocator), and a flow with `window` (0: no eviction), through an SWA decode channel
 * when `channel`. The pool's halves are zero-filled: canary mode is not on yet. */
static void world_make(world *w, int32_t ps, int64_t size_full, int64_t size_swa, int32_t window, bool channel,
                       int32_t nfull, int32_t nswa) {
  memset(w, 0, sizeof *w);
  kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rc.size = 4;
  rc.max_context_len = 256;
  KVT_OK(kvc_req_to_token_pool_create(kvt_ctx, &rc, &w->pool));
  kvc_swa_allocator_config sc = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  sc.size_full = size_full;
  sc.size_swa = size_swa;
  sc.page_size = ps;
  KVT_OK(kvc_swa_allocator_create(kvt_ctx, &sc, &w->swa));
  kvc_swa_kv_pool_config kc = KVC_SWA_KV_POOL_CONFIG_INIT;
  kc.size_full = size_full;
  kc.size_swa = size_swa;
  kc.page_size = ps;
  kc.num_full_layers = nfull;
  kc.num_swa_layers = nswa;
  kc.head_num = 1;
  kc.head_dim = 8;
  kc.full_layer_ids = g_full_ids;
  kc.swa_layer_ids = g_swa_ids;
  KVT_OK(kvc_swa_kv_pool_create(kvt_ctx, &kc, &w->kv));
  KVT_OK(kvc_swa_kv_pool_register_allocator(w->kv, w->swa));
  w->full = kvc_swa_kv_pool_full(w->kv);
  w->half = kvc_swa_kv_pool_swa(w->kv);
  w->nfull = nfull;
  w->nswa = nswa;
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = ps;
  fc.req_pool = w->pool;
  fc.swa_allocator = w->swa;
  fc.sliding_window = window;
  KVT_OK(kvc_flow_create(kvt_ctx, &fc, &w->flow));
  w->out = kvt_dev_alloc(KV_ROWS * 8);
  if (channel) {
    KVT_OK(kvc_decode_channel_create_swa(w->swa, w->pool, 4, 256, w->out, &w->ch));
    KVT_OK(kvc_flow_set_decode_channel(w->flow, w->ch));
  }
  w->k = kvt_dev_alloc(KV_ROWS * ROW_BYTES);
  w->v = kvt_dev_alloc(KV_ROWS * ROW_BYTES);
}

static void world_free(world *w) {
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  kvt_digest_tables(w->pool, w->swa);
  kvc_flow_destroy(w->flow);
  kvc_decode_channel_destroy(w->ch);
  kvc_swa_kv_pool_destroy(w->kv);
  kvc_swa_allocator_destroy(w->swa);
  kvc_req_to_token_pool_destroy(w->pool);
  kvt_dev_free(w->out);
  kvt_dev_free(w->k);
  kvt_dev_free(w->v);
}

/* The model's writes: K and V rows of byte `b` for every layer of both halves at the n
 * new slots in w->out (SWA layers through the mapping, as the engine does). */
static void write_kv(world *w, size_t n, uint8_t b) {
  if (n == 0) return;
  uint8_t *h = malloc(n * ROW_BYTES);
  memset(h, b, n * ROW_BYTES);
  kvt_h2d(w->k, h, n * ROW_BYTES);
  kvt_h2d(w->v, h, n * ROW_BYTES);
  free(h);
  for (int i = 0; i < w->nfull; i++)
    KVT_OK(kvc_swa_kv_pool_set_kv(w->kv, g_full_ids[i], w->out, NULL, KVC_INDEX_I64, n, w->k, w->v, KVC_DTYPE_BF16, 0,
                                  0, NULL, 1.0f, NULL, 1.0f, NULL));
  for (int i = 0; i < w->nswa; i++)
    KVT_OK(kvc_swa_kv_pool_set_kv(w->kv, g_swa_ids[i], w->out, NULL, KVC_INDEX_I64, n, w->k, w->v, KVC_DTYPE_BF16, 0, 0,
                                  NULL, 1.0f, NULL, 1.0f, NULL));
}

/* A write after free: one row of bytes 0x5A into K and V of local layer `layer` of `half`
 * at `slot` (a slot the flow freed). */
static void stray_write(world *w, kvc_kv_pool *half, int layer, int64_t slot) {
  int64_t *loc = kvt_dev_alloc(sizeof slot);
  kvt_h2d(loc, &slot, sizeof slot);
  uint8_t h[ROW_BYTES];
  memset(h, 0x5A, sizeof h);
  kvt_h2d(w->k, h, sizeof h);
  kvt_h2d(w->v, h, sizeof h);
  KVT_OK(kvc_kv_pool_set_kv(half, layer, loc, KVC_INDEX_I64, 1, w->k, w->v, KVC_DTYPE_BF16, 0, 0, NULL, 1.0f, NULL,
                            1.0f, NULL));
  kvt_dev_free(loc);
}

static kvc_status extend(world *w, kvc_req_state *const *reqs, size_t n, uint8_t b) {
  int64_t tokens = 0;
  for (size_t i = 0; i < n; i++) tokens += reqs[i]->seq_len - reqs[i]->prefix_len;
  kvc_status st = kvc_flow_alloc_for_extend(w->flow, reqs, n, w->out, NULL);
  kvt_digest_i64(st);
  kvt_digest_tables(w->pool, w->swa);
  if (st == KVC_OK) write_kv(w, (size_t)tokens, b);
  return st;
}

/* One decode step of `tokens` per request (the channel, when the world has one, takes
 * the one-token steps; its kernel is enqueued whatever the check said). */
static kvc_status decode(world *w, kvc_req_state *const *reqs, size_t n, int32_t tokens, uint8_t b) {
  const bool ch = w->ch && tokens == 1;
  kvc_status st = kvc_flow_alloc_for_decode(w->flow, reqs, n, tokens, ch ? NULL : w->out, NULL);
  kvt_digest_i64(st);
  kvt_digest_tables(w->pool, w->swa);
  if (ch && (st == KVC_OK || st == KVC_ERR_INTERNAL)) KVT_OK(kvc_decode_channel_enqueue(w->ch, NULL));
  if (st == KVC_OK) write_kv(w, n * (size_t)tokens, b);
  return st;
}

static int64_t slot_at(const world *w, const kvc_req_state *r, int64_t pos) {
  return kvc_req_to_token_pool_row(w->pool, r->req_row)[pos];
}
static int32_t peer(const world *w, int64_t full_slot) { return kvc_swa_allocator_mapping_host(w->swa)[full_slot]; }

/* Every row of both halves holds the marker (canary_check over all slots). */
static kvc_status all_rows_marked(world *w) {
  kvc_kv_pool *halves[2] = {w->full, w->half};
  int64_t size[2] = {kvc_swa_allocator_size_full(w->swa), kvc_swa_allocator_size_swa(w->swa)};
  for (int h = 0; h < 2; h++) {
    if (!halves[h]) continue;
    const int64_t rows = size[h] + kvc_swa_allocator_page_size(w->swa);
    int64_t *slots = malloc((size_t)rows * sizeof *slots);
    for (int64_t i = 0; i < rows; i++) slots[i] = i;
    kvc_status st = kvc_kv_pool_canary_check(halves[h], slots, (size_t)rows, NULL);
    free(slots);
    if (st != KVC_OK) return st;
  }
  return KVC_OK;
}

/* Every row no live request uses holds the marker: full slots outside the live requests'
 * rows [0, kv_allocated_len), SWA slots no mapping entry points to (free, window-evicted,
 * or unused in a held page). */
static kvc_status free_rows_marked(world *w, kvc_req_state *const *live, size_t n) {
  const int64_t ps = kvc_swa_allocator_page_size(w->swa);
  const int64_t nf = kvc_swa_allocator_size_full(w->swa) + ps, ns = kvc_swa_allocator_size_swa(w->swa) + ps;
  uint8_t *used_f = calloc((size_t)nf, 1), *used_s = calloc((size_t)ns, 1);
  for (size_t i = 0; i < n; i++)
    for (int64_t p = 0; p < live[i]->kv_allocated_len; p++) used_f[slot_at(w, live[i], p)] = 1;
  const int32_t *map = kvc_swa_allocator_mapping_host(w->swa);
  for (int64_t f = 0; f < kvc_swa_allocator_mapping_length(w->swa) - 1; f++)
    if (map[f] > 0) used_s[map[f]] = 1;
  int64_t *slots = malloc((size_t)(nf > ns ? nf : ns) * sizeof *slots);
  kvc_status st = KVC_OK;
  for (int h = 0; h < 2 && st == KVC_OK; h++) {
    kvc_kv_pool *half = h ? w->half : w->full;
    const uint8_t *used = h ? used_s : used_f;
    size_t k = 0;
    for (int64_t x = ps; x < (h ? ns : nf); x++)
      if (!used[x]) slots[k++] = x;
    if (half) st = kvc_kv_pool_canary_check(half, slots, k, NULL);
  }
  free(slots), free(used_f), free(used_s);
  return st;
}

/* --- Steps pass ------------------------------------------------------------------------ */

/* Two requests extend, decode 40 steps (window eviction recycles the SWA side: 137 SWA
 * tokens go through 64 slots), take a two-token step, write KV at every new slot on both
 * halves; one is released and a third request takes every slot left, so the freed full
 * and SWA rows are handed out again: every check passes, and every row not in use holds
 * the marker. */
static void steps_pass(int32_t ps, bool channel) {
  world w;
  world_make(&w, ps, 256, 64, 8, channel, 2, 2);
  KVT_OK(kvc_flow_set_canary_swa(w.flow, w.kv));
  kvc_req_state a = req0(40), b = req0(13);
  kvc_req_state *both[] = {&a, &b};
  KVT_OK(extend(&w, both, 2, 0x21));
  for (int i = 0; i < 40; i++) {
    kvc_status st = decode(&w, both, 2, 1, (uint8_t)(0x30 + i));
    if (st != KVC_OK) fail_msg("ps %d step %d -> %s: %s", ps, i, kvc_status_name(st), kvc_last_error(kvt_ctx));
  }
  KVT_OK(decode(&w, both, 2, 2, 0x22));
  assert_int_equal(a.seq_len, 82);
  assert_int_equal(b.seq_len, 55);
  assert_true(a.swa_evicted_seqlen >= 56 && b.swa_evicted_seqlen >= 32); /* SWA rows were freed and reused */
  kvc_req_state *live[] = {&a, &b};
  KVT_OK(kvc_flow_check(w.flow, live, 2));
  KVT_OK(free_rows_marked(&w, live, 2)); /* the window-evicted SWA rows were refilled */
  kvc_req_state *one[] = {&a};
  KVT_OK(kvc_flow_release(w.flow, one, 1, 1, NULL));
  kvt_digest_tables(w.pool, w.swa);
  kvc_req_state c = req0(kvc_swa_allocator_available_size(w.swa));
  kvc_req_state *three[] = {&c};
  KVT_OK(extend(&w, three, 1, 0x23));
  assert_int_equal(kvc_swa_allocator_swa_available_size(w.swa) / ps, 0); /* every SWA page handed out */
  kvc_req_state *rest[] = {&b, &c};
  KVT_OK(kvc_flow_release(w.flow, rest, 2, 1, NULL));
  kvt_digest_tables(w.pool, w.swa);
  KVT_OK(kvc_flow_check(w.flow, NULL, 0));
  KVT_OK(kvc_swa_allocator_check(w.swa));
  assert_int_equal(kvc_swa_allocator_full_available_size(w.swa), 256);
  assert_int_equal(kvc_swa_allocator_swa_available_size(w.swa), 64);
  /* Every row is free again, so every row holds the marker: nothing freed was missed. */
  KVT_OK(all_rows_marked(&w));
  KVT_OK(kvc_flow_set_canary_swa(w.flow, NULL));
  world_free(&w);
}

static void test_swa_steps_pass_paged(void **state) {
  (void)state;
  steps_pass(4, false);
}
static void test_swa_steps_pass_token(void **state) {
  (void)state;
  steps_pass(1, false);
}
static void test_swa_steps_pass_through_a_channel(void **state) {
  (void)state;
  steps_pass(4, true);
}

/* --- Use after free ----------------------------------------------------------------- */

/* A request's SWA row at position 1 is freed by window eviction, then written; the step
 * that hands that SWA slot out again fails naming it (and the slot stays allocated). */
static void window_use_after_free(int32_t ps, bool channel) {
  world w;
  world_make(&w, ps, 256, 64, 8, channel, 1, 2);
  KVT_OK(kvc_flow_set_canary_swa(w.flow, w.kv));
  kvc_req_state a = req0(40);
  kvc_req_state *one[] = {&a};
  KVT_OK(extend(&w, one, 1, 0x21));
  const int32_t s = peer(&w, slot_at(&w, &a, 1));
  assert_true(s > 0);
  /* The first decode step evicts [0, 28): position 1's SWA row is free. */
  KVT_OK(decode(&w, one, 1, 1, 0x31));
  assert_true(a.swa_evicted_seqlen > 1);
  assert_int_equal(peer(&w, slot_at(&w, &a, 1)), 0);
  stray_write(&w, w.half, 1, s);
  kvc_status st = KVC_OK;
  int steps = 0;
  while (st == KVC_OK && a.seq_len < 250) {
    st = decode(&w, one, 1, 1, (uint8_t)(0x40 + steps));
    steps++;
  }
  if (st != KVC_ERR_INTERNAL)
    fail_msg("ps %d: no step found the write into freed SWA slot %d (%d steps, %s)", ps, s, steps, kvc_status_name(st));
  /* The failed step handed out the full slot whose peer is s, and kept it. */
  assert_int_equal(peer(&w, slot_at(&w, &a, a.seq_len - 1)), s);
  /* The message names the call the scheduler made, not the canary check inside it. */
  char want[160];
  snprintf(want, sizeof want,
           "kvc_flow_alloc_for_decode: slot %d (request position 0) layer 1 region 0 byte 0 was "
           "written after it was freed (%d bytes differ) [SWA layers",
           s, 2 * ROW_BYTES);
  if (strncmp(kvc_last_error(kvt_ctx), want, strlen(want)))
    fail_msg("ps %d: message \"%s\", expected it to begin with \"%s\"", ps, kvc_last_error(kvt_ctx), want);
  kvc_req_state *live[] = {&a};
  KVT_OK(kvc_flow_check(w.flow, live, 1));
  KVT_OK(kvc_flow_release(w.flow, one, 1, 1, NULL));
  kvt_digest_tables(w.pool, w.swa);
  KVT_OK(kvc_flow_check(w.flow, NULL, 0));
  world_free(&w);
}

static void test_swa_write_after_window_eviction_is_found_paged(void **state) {
  (void)state;
  window_use_after_free(4, false);
}
static void test_swa_write_after_window_eviction_is_found_token(void **state) {
  (void)state;
  window_use_after_free(1, false);
}
static void test_swa_write_after_window_eviction_is_found_through_a_channel(void **state) {
  (void)state;
  window_use_after_free(4, true);
}

/* A released request's row is written (SWA half or full half); the next extend, which
 * takes every slot of both sides, fails naming it. */
static void release_use_after_free(int32_t ps, bool swa_side) {
  world w;
  world_make(&w, ps, 64, 64, 0, false, 2, 1);
  KVT_OK(kvc_flow_set_canary_swa(w.flow, w.kv));
  kvc_req_state a = req0(6);
  kvc_req_state *one[] = {&a};
  KVT_OK(extend(&w, one, 1, 0x21));
  const int64_t f = slot_at(&w, &a, 2);
  const int32_t s = peer(&w, f);
  KVT_OK(kvc_flow_release(w.flow, one, 1, 1, NULL));
  kvt_digest_tables(w.pool, w.swa);
  if (swa_side) stray_write(&w, w.half, 0, s);
  else stray_write(&w, w.full, 1, f);
  kvc_req_state b = req0(kvc_swa_allocator_available_size(w.swa));
  assert_int_equal(b.seq_len, 64);
  kvc_req_state *two[] = {&b};
  KVT_STATUS(kvc_flow_alloc_for_extend(w.flow, two, 1, w.out, NULL), KVC_ERR_INTERNAL);
  char want[96];
  snprintf(want, sizeof want, "slot %lld (request position ", swa_side ? (long long)s : (long long)f);
  const char *msg = kvc_last_error(kvt_ctx);
  if (!strstr(msg, want) || !strstr(msg, swa_side ? ") layer 0 region 0 byte 0" : ") layer 1 region 0 byte 0") ||
      (strstr(msg, "[SWA layers") != NULL) != swa_side)
    fail_msg("ps %d, %s half: message \"%s\"", ps, swa_side ? "SWA" : "full", msg);
  /* The request position is the slot's index among the step's new slots, on both halves. */
  int64_t i = 0;
  for (; i < 64; i++)
    if ((swa_side ? peer(&w, slot_at(&w, &b, i)) : slot_at(&w, &b, i)) == (swa_side ? s : f)) break;
  snprintf(want, sizeof want, "(request position %lld)", (long long)i);
  if (!strstr(msg, want)) fail_msg("ps %d: message \"%s\" lacks \"%s\"", ps, msg, want);
  KVT_OK(kvc_flow_release(w.flow, two, 1, 1, NULL));
  kvt_digest_tables(w.pool, w.swa);
  KVT_OK(kvc_flow_check(w.flow, NULL, 0));
  world_free(&w);
}

static void test_swa_write_after_release_is_found_swa_half(void **state) {
  (void)state;
  release_use_after_free(4, true);
  release_use_after_free(1, true);
}
static void test_swa_write_after_release_is_found_full_half(void **state) {
  (void)state;
  release_use_after_free(4, false);
  release_use_after_free(1, false);
}

/* Speculative decoding: a request whose KV was written past kv_committed_len inside its
 * last committed page. The release frees [0, committed) and the page-aligned tail, so
 * the slots of that page past committed are not listed, yet the allocator releases the
 * whole page on both sides: their (written) rows are refilled too, and a request that
 * takes every slot passes its check. */
static void test_swa_release_refills_whole_pages_past_committed(void **state) {
  (void)state;
  world w;
  world_make(&w, 4, 64, 64, 0, false, 1, 1);
  KVT_OK(kvc_flow_set_canary_swa(w.flow, w.kv));
  kvc_req_state a = req0(7);
  kvc_req_state *one[] = {&a};
  KVT_OK(extend(&w, one, 1, 0x21));
  a.kv_committed_len = 5; /* positions 5 and 6 hold draft KV (written) */
  KVT_OK(kvc_flow_release(w.flow, one, 1, 1, NULL));
  kvt_digest_tables(w.pool, w.swa);
  kvc_req_state b = req0(64);
  kvc_req_state *two[] = {&b};
  KVT_OK(extend(&w, two, 1, 0x22));
  KVT_OK(kvc_flow_release(w.flow, two, 1, 1, NULL));
  kvt_digest_tables(w.pool, w.swa);
  KVT_OK(all_rows_marked(&w));
  world_free(&w);
}

/* --- Live rows are never refilled -------------------------------------------------- */

/* Reads K and V of every layer of a half (NULL: nothing) into one host buffer. */
static uint8_t *snapshot(kvc_kv_pool *p, int layers, size_t *bytes) {
  size_t total = 0, one = 0;
  for (int l = 0; l < layers; l++) total += 2 * (size_t)kvt_buf(p, KVC_REGION_K, l).total_bytes;
  uint8_t *h = malloc(total);
  size_t off = 0;
  for (int l = 0; l < layers; l++)
    for (int r = 0; r < 2; r++) {
      uint8_t *b = kvt_read_buf(p, r ? KVC_REGION_V : KVC_REGION_K, l, &one);
      memcpy(h + off, b, one);
      off += one;
      free(b);
    }
  *bytes = total;
  return h;
}

/* Window eviction (the explicit call and the one inside a decode step) between two live
 * requests whose pages interleave, after the SWA side has wrapped (full and SWA slot ids
 * differ): the full half does not change at all, and in the SWA half exactly the rows of
 * the released SWA pages change, to the marker. */
static void refill_spares_live_rows(int32_t ps) {
  world w;
  world_make(&w, ps, 256, 64, 8, false, 1, 1);
  KVT_OK(kvc_flow_set_canary_swa(w.flow, w.kv));
  kvc_req_state a = req0(22), b = req0(9);
  kvc_req_state *both[] = {&a, &b};
  KVT_OK(extend(&w, both, 2, 0x21));
  for (int i = 0; i < 30; i++) KVT_OK(decode(&w, both, 2, 1, (uint8_t)(0x30 + i)));
  assert_int_equal(a.seq_len, 52);
  assert_int_equal(b.seq_len, 39); /* b's last page is partly used (ps 4) */
  int64_t differ = 0;
  for (int64_t p = a.swa_evicted_seqlen; p < a.seq_len; p++)
    differ += slot_at(&w, &a, p) != peer(&w, slot_at(&w, &a, p));
  assert_true(differ > 0);
  for (int round = 0; round < 2; round++) {
    /* The SWA slots the eviction is to release: a's peers in [evicted, 52 - 8 - ps). */
    const int64_t from = a.swa_evicted_seqlen, to = (a.seq_len - 8 - ps) / ps * ps;
    assert_true(to > from);
    uint8_t *freed = calloc((size_t)kvc_swa_allocator_size_swa(w.swa) + (size_t)ps, 1);
    for (int64_t p = from; p < to; p++) {
      const int32_t s = peer(&w, slot_at(&w, &a, p));
      assert_true(s > 0);
      for (int64_t j = 0; j < ps; j++) freed[s / ps * ps + j] = 1; /* whole SWA pages */
    }
    size_t fb, sb, fb2, sb2;
    uint8_t *f0 = snapshot(w.full, 1, &fb), *s0 = snapshot(w.half, 1, &sb);
    if (round == 0) {
      KVT_OK(kvc_flow_free_swa_out_of_window(w.flow, &a, a.seq_len, NULL));
    } else {
      /* Inside a step: the new slots' rows change too (write_kv); leave them out. */
      kvc_req_state *one[] = {&a};
      a.seq_len = a.kv_allocated_len;
      KVT_OK(kvc_flow_alloc_for_decode(w.flow, one, 1, 1, w.out, NULL));
    }
    assert_int_equal(a.swa_evicted_seqlen, to);
    KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
    uint8_t *f1 = snapshot(w.full, 1, &fb2), *s1 = snapshot(w.half, 1, &sb2);
    assert_int_equal(fb, fb2);
    assert_int_equal(sb, sb2);
    const int64_t new_full = round ? slot_at(&w, &a, a.seq_len - 1) : -1;
    const int64_t new_swa = round ? peer(&w, new_full) : -1;
    const size_t frows = fb / 2 / ROW_BYTES, srows = sb / 2 / ROW_BYTES;
    for (size_t off = 0; off < fb; off++) {
      const int64_t row = (int64_t)((off / ROW_BYTES) % frows);
      if (row != new_full && f1[off] != f0[off])
        fail_msg("ps %d round %d: full row %lld byte changed (%#x -> %#x)", ps, round, (long long)row, f0[off],
                 f1[off]);
    }
    int64_t refilled = 0;
    for (size_t off = 0; off < sb; off++) {
      const int64_t row = (int64_t)((off / ROW_BYTES) % srows);
      if (row == new_swa) continue; /* handed out again by this step: marker, checked */
      if (freed[row]) {
        if (s1[off] != 0xCB) fail_msg("ps %d round %d: released SWA row %lld not refilled", ps, round, (long long)row);
        refilled += s0[off] != 0xCB;
      } else if (s1[off] != s0[off]) {
        fail_msg("ps %d round %d: SWA row %lld changed but was not released (%#x -> %#x)", ps, round, (long long)row,
                 s0[off], s1[off]);
      }
    }
    assert_true(refilled > 0); /* the released rows held KV before */
    free(f0), free(s0), free(f1), free(s1), free(freed);
    if (round == 0) { /* advance to the next page boundary for the in-step round */
      kvc_req_state *one[] = {&a};
      while ((a.seq_len - 8 - ps) / ps * ps == a.swa_evicted_seqlen) KVT_OK(decode(&w, one, 1, 1, 0x50));
      /* decode() evicted at pre_len seq_len - 1: one more step evicts the next page. */
      a.seq_len = a.kv_allocated_len;
    }
  }
  kvc_req_state *live[] = {&a, &b};
  KVT_OK(kvc_flow_check(w.flow, live, 2));
  KVT_OK(free_rows_marked(&w, live, 2));
  KVT_OK(kvc_flow_release(w.flow, both, 2, 1, NULL));
  kvt_digest_tables(w.pool, w.swa);
  KVT_OK(all_rows_marked(&w));
  world_free(&w);
}

static void test_swa_refill_spares_live_rows_paged(void **state) {
  (void)state;
  refill_spares_live_rows(4);
}
static void test_swa_refill_spares_live_rows_token(void **state) {
  (void)state;
  refill_spares_live_rows(1);
}

/* --- Enabling, arguments ------------------------------------------------------------ */

static void test_swa_enable_fills_both_halves_and_validates(void **state) {
  (void)state;
  world w;
  world_make(&w, 4, 64, 32, 8, false, 1, 1);
  KVT_STATUS(all_rows_marked(&w), KVC_ERR_INTERNAL); /* zero-filled until enabled */
  /* kvc_flow_set_canary refuses SWA flows and points to the SWA call. */
  KVT_STATUS(kvc_flow_set_canary(w.flow, w.full), KVC_ERR_UNSUPPORTED);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "kvc_flow_set_canary_swa"));
  KVT_STATUS(kvc_flow_set_canary_swa(NULL, w.kv), KVC_ERR_INVALID_ARGUMENT);
  /* Mismatched halves: smaller than the allocator's side, or another page size. */
  world m;
  world_make(&m, 4, 64, 16, 0, false, 1, 1); /* SWA half too small */
  KVT_STATUS(kvc_flow_set_canary_swa(w.flow, m.kv), KVC_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "SWA-layer pool"));
  world_free(&m);
  world_make(&m, 4, 32, 32, 0, false, 1, 1); /* full half too small */
  KVT_STATUS(kvc_flow_set_canary_swa(w.flow, m.kv), KVC_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "full-layer pool"));
  world_free(&m);
  world_make(&m, 2, 64, 32, 0, false, 1, 1); /* page size 2 */
  KVT_STATUS(kvc_flow_set_canary_swa(w.flow, m.kv), KVC_ERR_INVALID_ARGUMENT);
  world_free(&m);
  KVT_STATUS(all_rows_marked(&w), KVC_ERR_INTERNAL); /* failed calls filled nothing */
  KVT_OK(kvc_flow_set_canary_swa(w.flow, NULL));     /* off: fine when already off */
  KVT_OK(kvc_flow_set_canary_swa(w.flow, w.kv));
  KVT_OK(all_rows_marked(&w));
  world_free(&w);

  /* A flow without an SWA allocator: the SWA call is refused, pointing to the other. */
  kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rc.size = 2, rc.max_context_len = 64;
  kvc_req_to_token_pool *rp;
  KVT_OK(kvc_req_to_token_pool_create(kvt_ctx, &rc, &rp));
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = KVC_ALLOCATOR_PAGED, ac.size = 64, ac.page_size = 4;
  kvc_allocator *al;
  KVT_OK(kvc_allocator_create(kvt_ctx, &ac, &al));
  kvc_flow_config fc = KVC_FLOW_CONFIG_INIT;
  fc.page_size = 4, fc.req_pool = rp, fc.allocator = al;
  kvc_flow *fl;
  KVT_OK(kvc_flow_create(kvt_ctx, &fc, &fl));
  world_make(&m, 4, 64, 64, 0, false, 1, 1);
  KVT_STATUS(kvc_flow_set_canary_swa(fl, m.kv), KVC_ERR_UNSUPPORTED);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "kvc_flow_set_canary "));
  kvc_flow_destroy(fl);
  kvc_allocator_destroy(al);

  /* Pure-SWA and ring-mode allocators: not covered. */
  kvc_swa_allocator_config sc = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  sc.size_full = 64, sc.size_swa = 64, sc.page_size = 1, sc.flags = KVC_SWA_PURE;
  for (int ring = 0; ring < 2; ring++) {
    if (ring) sc.flags = 0, sc.page_size = 4, sc.ring_size = 8, sc.req_pool = rp;
    kvc_swa_allocator *sa;
    KVT_OK(kvc_swa_allocator_create(kvt_ctx, &sc, &sa));
    fc.page_size = sc.page_size, fc.allocator = NULL, fc.swa_allocator = sa;
    KVT_OK(kvc_flow_create(kvt_ctx, &fc, &fl));
    KVT_STATUS(kvc_flow_set_canary_swa(fl, m.kv), KVC_ERR_UNSUPPORTED);
    assert_non_null(strstr(kvc_last_error(kvt_ctx), ring ? "ring-mode" : "pure"));
    kvc_flow_destroy(fl);
    kvc_swa_allocator_destroy(sa);
  }
  world_free(&m);
  kvc_req_to_token_pool_destroy(rp);
}

/* A pool with SWA layers only (no full half) guards the side it has. */
static void test_swa_pool_without_full_layers(void **state) {
  (void)state;
  world w;
  world_make(&w, 4, 64, 64, 0, false, 0, 1);
  assert_null(w.full);
  KVT_OK(kvc_flow_set_canary_swa(w.flow, w.kv));
  kvc_req_state a = req0(10);
  kvc_req_state *one[] = {&a};
  KVT_OK(extend(&w, one, 1, 0x21));
  const int32_t s = peer(&w, slot_at(&w, &a, 9));
  KVT_OK(kvc_flow_release(w.flow, one, 1, 1, NULL));
  kvt_digest_tables(w.pool, w.swa);
  stray_write(&w, w.half, 0, s);
  kvc_req_state b = req0(64);
  kvc_req_state *two[] = {&b};
  KVT_STATUS(kvc_flow_alloc_for_extend(w.flow, two, 1, w.out, NULL), KVC_ERR_INTERNAL);
  char want[64];
  snprintf(want, sizeof want, "slot %d (request position ", s);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), want));
  KVT_OK(kvc_flow_release(w.flow, two, 1, 1, NULL));
  kvt_digest_tables(w.pool, w.swa);
  world_free(&w);
}

/* --- Refill failures ------------------------------------------------------------------ */

/* Launch N of a release fails, for every N until none does: the batch stops at the
 * request it hits, as the non-SWA canary mode does — a refill that fails after its free is
 * reported once its request is completely released — and releasing the batch again
 * finishes it without freeing anything twice. */
static void test_swa_refill_failure_in_release_is_reported_late(void **state) {
  (void)state;
  /* Which launch fails, and so what the loop sees, depends on how many launches a step
   * makes, not on the slots: kept out of the output digest. */
  const int digest_on = kvt_digest_on;
  kvt_digest_on = 0;
  int late = 0;
  for (int64_t n = 0;; n++) {
    if (n > 64) fail_msg("no success after 64 injected launch failures");
    world w;
    world_make(&w, 4, 64, 64, 0, false, 1, 1);
    KVT_OK(kvc_flow_set_canary_swa(w.flow, w.kv));
    kvc_req_state a = req0(10), b = req0(7);
    kvc_req_state *both[] = {&a, &b};
    KVT_OK(extend(&w, both, 2, 0x21));
    kvc_req_state a0 = a, b0 = b;
    kvc__fault_set(kvt_ctx, KVC__FAULT_LAUNCH, n);
    const kvc_status st = kvc_flow_release(w.flow, both, 2, 1, NULL);
    kvc__fault_reset(kvt_ctx);
    if (st == KVC_OK) {
      world_free(&w);
      break;
    }
    assert_int_equal(st, KVC_ERR_CUDA);
    /* a first: untouched (its free failed), or released; b untouched unless a is. */
    const bool a_done = a.req_row == 0, b_done = b.req_row == 0;
    if (!a_done) assert_memory_equal(&a, &a0, sizeof a);
    if (!b_done) assert_memory_equal(&b, &b0, sizeof b);
    if (!a_done && b_done) fail_msg("N=%lld: b released after a failed", (long long)n);
    late += b_done; /* both released, yet failed: b's refill failed after its free */
    kvc_req_state *live[] = {&a, &b};
    KVT_OK(kvc_flow_check(w.flow, live, 2));
    KVT_OK(kvc_swa_allocator_check(w.swa));
    KVT_OK(kvc_flow_release(w.flow, both, 2, 1, NULL)); /* retry: finishes, frees nothing twice */
    kvt_digest_tables(w.pool, w.swa);
    KVT_OK(kvc_flow_check(w.flow, NULL, 0));
    assert_int_equal(kvc_swa_allocator_full_available_size(w.swa), 64);
    assert_int_equal(kvc_swa_allocator_swa_available_size(w.swa), 64);
    world_free(&w);
  }
  assert_true(late > 0); /* some failure hit a refill after its free */
  kvt_digest_on = digest_on;
}

/* Launch N of a decode step whose window eviction refills fails: the eviction that was
 * done stays recorded (swa_evicted_seqlen), and the retried step succeeds. */
static void test_swa_refill_failure_in_window_eviction_keeps_state(void **state) {
  (void)state;
  /* Which launch fails, and so what the loop sees, depends on how many launches a step
   * makes, not on the slots: kept out of the output digest. */
  const int digest_on = kvt_digest_on;
  kvt_digest_on = 0;
  int recorded = 0;
  for (int64_t n = 0;; n++) {
    if (n > 64) fail_msg("no success after 64 injected launch failures");
    world w;
    world_make(&w, 4, 256, 64, 8, false, 1, 1);
    KVT_OK(kvc_flow_set_canary_swa(w.flow, w.kv));
    kvc_req_state a = req0(40);
    kvc_req_state *one[] = {&a};
    KVT_OK(extend(&w, one, 1, 0x21));
    kvc__fault_set(kvt_ctx, KVC__FAULT_LAUNCH, n);
    const kvc_status st = kvc_flow_alloc_for_decode(w.flow, one, 1, 1, w.out, NULL);
    kvc__fault_reset(kvt_ctx);
    if (st == KVC_OK) {
      world_free(&w);
      break;
    }
    assert_int_equal(st, KVC_ERR_CUDA);
    /* The eviction either did not happen or is recorded; the mapping agrees. */
    if (a.swa_evicted_seqlen == 28) {
      recorded++;
      for (int64_t p = 0; p < 28; p++) assert_int_equal(peer(&w, slot_at(&w, &a, p)), 0);
    } else {
      assert_int_equal(a.swa_evicted_seqlen, 0);
      assert_true(peer(&w, slot_at(&w, &a, 0)) > 0);
    }
    KVT_OK(kvc_swa_allocator_check(w.swa));
    kvc_req_state *live[] = {&a};
    KVT_OK(kvc_flow_check(w.flow, live, 1));
    /* The retry evicts nothing twice. A refill that failed left its released rows
     * without the marker: the check may then name one of them (the price of the
     * failure), and only in that case. */
    const bool unmarked = a.swa_evicted_seqlen == 28 && a.seq_len == 40;
    a.seq_len = a.kv_allocated_len;
    const kvc_status st2 = kvc_flow_alloc_for_decode(w.flow, one, 1, 1, w.out, NULL);
    if (st2 != KVC_OK && !(unmarked && st2 == KVC_ERR_INTERNAL))
      fail_msg("N=%lld: retry -> %s: %s", (long long)n, kvc_status_name(st2), kvc_last_error(kvt_ctx));
    assert_int_equal(a.swa_evicted_seqlen, 28);
    KVT_OK(kvc_flow_release(w.flow, one, 1, 1, NULL));
    kvt_digest_tables(w.pool, w.swa);
    KVT_OK(kvc_flow_check(w.flow, NULL, 0));
    world_free(&w);
  }
  assert_true(recorded > 0);
  kvt_digest_on = digest_on;
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_swa_steps_pass_paged),
    cmocka_unit_test(test_swa_steps_pass_token),
    cmocka_unit_test(test_swa_steps_pass_through_a_channel),
    cmocka_unit_test(test_swa_write_after_window_eviction_is_found_paged),
    cmocka_unit_test(test_swa_write_after_window_eviction_is_found_token),
    cmocka_unit_test(test_swa_write_after_window_eviction_is_found_through_a_channel),
    cmocka_unit_test(test_swa_write_after_release_is_found_swa_half),
    cmocka_unit_test(test_swa_write_after_release_is_found_full_half),
    cmocka_unit_test(test_swa_release_refills_whole_pages_past_committed),
    cmocka_unit_test(test_swa_refill_spares_live_rows_paged),
    cmocka_unit_test(test_swa_refill_spares_live_rows_token),
    cmocka_unit_test(test_swa_enable_fills_both_halves_and_validates),
    cmocka_unit_test(test_swa_pool_without_full_layers),
    cmocka_unit_test(test_swa_refill_failure_in_release_is_reported_late),
    cmocka_unit_test(test_swa_refill_failure_in_window_eviction_keeps_state),
};

KVT_MAIN("flow_canary_swa", tests)
