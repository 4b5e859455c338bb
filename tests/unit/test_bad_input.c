/* Hostile sizes, versioned structs, index types and error names at the public surface
 * (issue 13 items 1-3, 11-14): each call here must fail with nothing changed and a
 * message that names the function the caller called. */
#include "harness.h"

#include "core/fault.h"

#include <limits.h>
#include <stdbool.h>

#define LEN(a) (sizeof(a) / sizeof((a)[0]))

static bool names_a_helper(const char *word, size_t len) {
  static const char *const helpers[] = {"validate", "offload", "channel_create", "build", "check"};
  if (len >= 4 && !strncmp(word, "kvc_", 4)) return true;
  if (len >= 5 && !strncmp(word + len - 5, "_impl", 5)) return true;
  for (size_t i = 0; i < LEN(helpers); i++)
    if (strlen(helpers[i]) == len && !strncmp(word, helpers[i], len)) return true;
  return false;
}

/* The message begins with "<func>: " and names no function (public or helper) after. */
static void assert_named_by(const char *func) {
  const char *msg = kvc_last_error(kvt_ctx);
  const size_t len = strlen(func);
  if (strncmp(msg, func, len) != 0 || strncmp(msg + len, ": ", 2) != 0)
    fail_msg("message \"%s\" should begin with \"%s: \"", msg, func);
  for (const char *c = strstr(msg + len + 2, ": "); c; c = strstr(c + 2, ": ")) {
    const char *w = c;
    while (w > msg && (w[-1] == '_' || (w[-1] >= 'a' && w[-1] <= 'z') || (w[-1] >= '0' && w[-1] <= '9'))) w--;
    if (names_a_helper(w, (size_t)(c - w)))
      fail_msg("message \"%s\" names \"%.*s\" after \"%s: \"", msg, (int)(c - w), w, func);
  }
}

/* --- Item 1: range checks that cannot wrap ----------------------------------------- */

static void test_req_pool_write_range_check_does_not_wrap(void **state) {
  (void)state;
  kvc_req_to_token_pool_config rc = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  rc.size = 2;
  rc.max_context_len = 16;
  kvc_req_to_token_pool *rp;
  KVT_OK(kvc_req_to_token_pool_create(kvt_ctx, &rc, &rp));
  int32_t row = 0;
  KVT_OK(kvc_req_to_token_pool_alloc(rp, 1, &row));
  int64_t slots[4] = {1, 2, 3, 4};
  KVT_OK(kvc_req_to_token_pool_write(rp, row, 0, slots, 4, NULL));
  /* start + n wraps to a small number: the old check passed and the copy ran past the row. */
  KVT_STATUS(kvc_req_to_token_pool_write(rp, row, 1, slots, SIZE_MAX, NULL), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_req_to_token_pool_write(rp, row, 16, slots, SIZE_MAX - 14, NULL), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_req_to_token_pool_write(rp, row, 13, slots, 4, NULL), KVC_ERR_INVALID_ARGUMENT);
  KVT_OK(kvc_req_to_token_pool_write(rp, row, 12, slots, 4, NULL)); /* exactly to the end */
  const int32_t *mirror = kvc_req_to_token_pool_row(rp, row);
  for (int i = 0; i < 4; i++) assert_int_equal(mirror[i], slots[i]);
  for (int i = 4; i < 12; i++) assert_int_equal(mirror[i], 0);
  kvc_req_to_token_pool_destroy(rp);
}

static void test_get_last_loc_refuses_a_table_too_large_to_index(void **state) {
  (void)state;
  int32_t *table = kvt_dev_alloc(64 * sizeof(int32_t));
  int64_t *idx = kvt_dev_alloc(2 * sizeof(int64_t));
  int64_t *out = kvt_dev_alloc(2 * sizeof(int64_t));
  KVT_STATUS(kvc_get_last_loc(kvt_ctx, table, INT64_MAX / 2, 4, idx, KVC_INDEX_I64, idx, KVC_INDEX_I64, out, 2, NULL),
             KVC_ERR_INVALID_ARGUMENT);
  assert_named_by("kvc_get_last_loc");
  /* The kernel indexes in int32 (its 48-byte parameter block): sizes past it are refused. */
  KVT_STATUS(
      kvc_get_last_loc(kvt_ctx, table, (int64_t)INT32_MAX + 1, 1, idx, KVC_INDEX_I64, idx, KVC_INDEX_I64, out, 2, NULL),
      KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(
      kvc_get_last_loc(kvt_ctx, table, 1, (int64_t)INT32_MAX + 1, idx, KVC_INDEX_I64, idx, KVC_INDEX_I64, out, 2, NULL),
      KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(
      kvc_get_last_loc(kvt_ctx, table, 4, 4, idx, KVC_INDEX_I64, idx, KVC_INDEX_I64, out, (size_t)INT32_MAX + 1, NULL),
      KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_write_req_to_token(kvt_ctx, table, (int64_t)1 << 40, (int64_t)1 << 30, idx, KVC_INDEX_I64, NULL, idx,
                                    idx, KVC_INDEX_I64, out, 2, NULL),
             KVC_ERR_INVALID_ARGUMENT);
  kvt_dev_free(table);
  kvt_dev_free(idx);
  kvt_dev_free(out);
}

/* --- Item 2: host copy sizes ------------------------------------------------------- */

static kvc_kv_pool *small_mha_pool(int layers, int ps) {
  kvc_kv_pool_config c = KVC_KV_POOL_CONFIG_INIT;
  c.kind = KVC_KV_MHA;
  c.dtype = KVC_DTYPE_BF16;
  c.head_num = 2;
  c.head_dim = 8;
  c.size = 64;
  c.layer_num = layers;
  c.page_size = ps;
  kvc_kv_pool *p = NULL;
  KVT_OK(kvc_kv_pool_create(kvt_ctx, &c, &p));
  return p;
}

static void test_row_copies_refuse_strides_that_overflow(void **state) {
  (void)state;
  kvc_kv_pool *p = small_mha_pool(1, 1);
  int64_t *loc = kvt_dev_alloc(4 * sizeof(int64_t));
  const int64_t locs[4] = {1, 2, 3, 4};
  kvt_h2d(loc, locs, sizeof locs);
  uint16_t *k = kvt_dev_alloc(4 * 16 * 2), *v = kvt_dev_alloc(4 * 16 * 2);
  /* stride x element size, then n x stride bytes: each used to overflow int64 */
  KVT_STATUS(kvc_kv_pool_set_kv(p, 0, loc, KVC_INDEX_I64, 2, k, v, KVC_DTYPE_BF16, INT64_MAX / 2, 0, NULL, 1.0f, NULL,
                                1.0f, NULL),
             KVC_ERR_INVALID_ARGUMENT);
  assert_named_by("kvc_kv_pool_set_kv");
  KVT_STATUS(kvc_kv_pool_set_kv(p, 0, loc, KVC_INDEX_I64, 2, k, v, KVC_DTYPE_BF16, 0, INT64_MAX / 3, NULL, 1.0f, NULL,
                                1.0f, NULL),
             KVC_ERR_INVALID_ARGUMENT);
  /* one row with an extreme stride (fuzz_kv_pool's set-kv-stride-overflow seed):
   * INT64_MAX x 2 bytes overflows, INT64_MIN is negative; both refused */
  const int64_t extreme[] = {INT64_MAX, INT64_MIN};
  for (size_t i = 0; i < LEN(extreme); i++) {
    KVT_STATUS(kvc_kv_pool_set_kv(p, 0, loc, KVC_INDEX_I64, 1, k, v, KVC_DTYPE_BF16, extreme[i], 0, NULL, 1.0f, NULL,
                                  1.0f, NULL),
               KVC_ERR_INVALID_ARGUMENT);
    KVT_STATUS(kvc_kv_pool_set_kv(p, 0, loc, KVC_INDEX_I64, 1, k, v, KVC_DTYPE_BF16, 0, extreme[i], NULL, 1.0f, NULL,
                                  1.0f, NULL),
               KVC_ERR_INVALID_ARGUMENT);
  }
  KVT_OK(kvc_kv_pool_set_kv(p, 0, loc, KVC_INDEX_I64, 2, k, v, KVC_DTYPE_BF16, 0, 0, NULL, 1.0f, NULL, 1.0f, NULL));
  uint8_t *cache = kvt_dev_alloc(16 * 32);
  /* 4 rows of a 2^62-byte stride: past INT64_MAX (a representable stride is the caller's) */
  KVT_STATUS(
      kvc_store_kv(kvt_ctx, cache, NULL, 0, 0, 16, k, NULL, INT64_MAX / 2, 0, 32, 0, loc, KVC_INDEX_I64, 4, NULL),
      KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(
      kvc_store_kv(kvt_ctx, cache, NULL, INT64_MAX / 4, 0, 16, k, NULL, 0, 0, 32, 0, loc, KVC_INDEX_I64, 2, NULL),
      KVC_ERR_INVALID_ARGUMENT);
  assert_named_by("kvc_store_kv");
  KVT_OK(kvc_store_kv(kvt_ctx, cache, NULL, 0, 0, 16, k, NULL, 0, 0, 32, 0, loc, KVC_INDEX_I64, 2, NULL));
  kvt_dev_free(cache);
  kvt_dev_free(k);
  kvt_dev_free(v);
  kvt_dev_free(loc);
  kvc_kv_pool_destroy(p);
}

static void test_host_copy_bytes_refuses_counts_that_overflow(void **state) {
  (void)state;
  kvc_kv_pool *p = small_mha_pool(2, 4);
  size_t bytes = 12345;
  KVT_OK(kvc_kv_pool_host_copy_bytes(p, 3, &bytes));
  assert_int_equal(bytes, 3 * 2 * 2 * (2 * 8 * 2)); /* n x layers x (K, V) x row bytes */
  const size_t huge[] = {(size_t)1 << 62, SIZE_MAX, SIZE_MAX / 64 + 1};
  for (size_t i = 0; i < LEN(huge); i++) {
    bytes = 12345;
    KVT_STATUS(kvc_kv_pool_host_copy_bytes(p, huge[i], &bytes), KVC_ERR_INVALID_ARGUMENT);
    assert_int_equal(bytes, 12345);
    assert_named_by("kvc_kv_pool_host_copy_bytes");
  }
  kvc_kv_pool_destroy(p);

  kvc_swa_kv_pool_config sc = KVC_SWA_KV_POOL_CONFIG_INIT;
  const int32_t full_ids[] = {0}, swa_ids[] = {1};
  sc.size_full = 64;
  sc.size_swa = 32;
  sc.page_size = 1;
  sc.num_full_layers = 1;
  sc.num_swa_layers = 1;
  sc.full_layer_ids = full_ids;
  sc.swa_layer_ids = swa_ids;
  sc.head_num = 2;
  sc.head_dim = 8;
  kvc_swa_kv_pool *sp = NULL;
  KVT_OK(kvc_swa_kv_pool_create(kvt_ctx, &sc, &sp));
  size_t fb = 7, sb = 9;
  KVT_STATUS(kvc_swa_kv_pool_host_copy_bytes(sp, (size_t)1 << 62, &fb, &sb), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_swa_kv_pool_host_copy_bytes(sp, SIZE_MAX, &fb, &sb), KVC_ERR_INVALID_ARGUMENT);
  assert_int_equal(fb, 7);
  assert_int_equal(sb, 9);
  assert_named_by("kvc_swa_kv_pool_host_copy_bytes");
  KVT_OK(kvc_swa_kv_pool_host_copy_bytes(sp, 5, &fb, &sb));
  assert_int_equal(fb, 5 * 2 * 32);
  kvc_swa_kv_pool_destroy(sp);
}

/* --- Item 4 and 13: move --------------------------------------------------------- */

static void test_move_scratch_failure_is_host_oom_with_nothing_moved(void **state) {
  (void)state;
  kvc_kv_pool *p = small_mha_pool(1, 1);
  kvc_buffer_desc k;
  k.struct_size = sizeof k;
  KVT_OK(kvc_kv_pool_buffer(p, KVC_REGION_K, 0, &k));
  const size_t row = 2 * 8 * 2, bytes = 8 * row;
  uint8_t before[8 * 32], after[8 * 32];
  for (size_t i = 0; i < bytes; i++) before[i] = (uint8_t)(i * 7 + 1);
  kvt_h2d(k.data, before, bytes);
  int64_t *tgt = kvt_dev_alloc(2 * sizeof(int64_t)), *src = tgt + 1;
  const int64_t locs[2] = {2, 5};
  kvt_h2d(tgt, locs, sizeof locs);
  KVT_OK(kvc_kv_pool_move(p, tgt, tgt, KVC_INDEX_I64, 1, NULL)); /* row 2 onto itself: compiles the kernel */
  if (kvc_context_backend(kvt_ctx) == KVC_BACKEND_HOST) {
    /* With the kernel cached, the host twin's one-chunk buffer is the move's only allocation. */
    kvc__fault_set(kvt_ctx, KVC__FAULT_HOST_ALLOC, 0);
    kvc_status st = kvc_kv_pool_move(p, tgt, src, KVC_INDEX_I64, 1, NULL);
    kvc__fault_reset(kvt_ctx);
    KVT_STATUS(st, KVC_ERR_HOST_OOM);
    assert_named_by("kvc_kv_pool_move");
    kvt_d2h(after, k.data, bytes);
    assert_memory_equal(before, after, bytes);
  }
  KVT_OK(kvc_kv_pool_move(p, tgt, src, KVC_INDEX_I64, 1, NULL));
  kvt_d2h(after, k.data, bytes);
  assert_memory_equal(after + 2 * row, before + 5 * row, row);
  KVT_STATUS(kvc_kv_pool_move(p, NULL, src, KVC_INDEX_I64, 1, NULL), KVC_ERR_INVALID_ARGUMENT);
  kvc_kv_pool_destroy(p);

  kvc_kv_pool_config c = KVC_KV_POOL_CONFIG_INIT;
  c.kind = KVC_KV_MHA_NOOP;
  c.dtype = KVC_DTYPE_BF16;
  c.head_num = 1;
  c.head_dim = 8;
  c.size = 16;
  c.layer_num = 1;
  c.page_size = 1;
  KVT_OK(kvc_kv_pool_create(kvt_ctx, &c, &p));
  KVT_OK(kvc_kv_pool_move(p, tgt, src, KVC_INDEX_I64, 1, NULL));
  KVT_OK(kvc_kv_pool_move(p, NULL, NULL, KVC_INDEX_I64, 0, NULL));
  KVT_STATUS(kvc_kv_pool_move(p, NULL, src, KVC_INDEX_I64, 1, NULL), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_kv_pool_move(p, tgt, NULL, KVC_INDEX_I64, 3, NULL), KVC_ERR_INVALID_ARGUMENT);
  kvc_kv_pool_destroy(p);
  kvt_dev_free(tgt);
}

/* --- Item 3: create bounds that used to overflow ----------------------------------- */

static void test_creates_refuse_sizes_that_overflow_their_bound_checks(void **state) {
  (void)state;
  kvc_swa_allocator_config sc = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  sc.size_full = INT64_MAX;
  sc.size_swa = 64;
  sc.page_size = 1;
  kvc_swa_allocator *sa = (kvc_swa_allocator *)&sa, *const sa_sentinel = sa;
  KVT_STATUS(kvc_swa_allocator_create(kvt_ctx, &sc, &sa), KVC_ERR_INVALID_ARGUMENT);
  sc.size_full = 64;
  sc.size_swa = INT64_MAX;
  KVT_STATUS(kvc_swa_allocator_create(kvt_ctx, &sc, &sa), KVC_ERR_INVALID_ARGUMENT);
  sc.page_size = INT32_MAX;
  sc.size_swa = INT64_MAX - 1;
  KVT_STATUS(kvc_swa_allocator_create(kvt_ctx, &sc, &sa), KVC_ERR_INVALID_ARGUMENT);
  assert_ptr_equal(sa, sa_sentinel);

  kvc_kv_pool_config c = KVC_KV_POOL_CONFIG_INIT;
  c.kind = KVC_KV_MHA;
  c.dtype = KVC_DTYPE_BF16;
  c.head_num = 1;
  c.head_dim = 8;
  c.size = 16;
  c.page_size = 1;
  kvc_kv_pool *p = (kvc_kv_pool *)&p, *const p_sentinel = p;
  const int32_t bad[][2] = {{INT32_MAX, 2}, {INT32_MAX - 1, 2}, {1, INT32_MAX}, {0, INT32_MAX}, {0, 1025}};
  for (size_t i = 0; i < LEN(bad); i++) {
    c.start_layer = bad[i][0];
    c.layer_num = bad[i][1];
    KVT_STATUS(kvc_kv_pool_create(kvt_ctx, &c, &p), KVC_ERR_INVALID_ARGUMENT);
    assert_named_by("kvc_kv_pool_create");
  }
  assert_ptr_equal(p, p_sentinel);
  c.start_layer = INT32_MAX - 2;
  c.layer_num = 2; /* the last layer id is INT32_MAX - 1: fits */
  KVT_OK(kvc_kv_pool_create(kvt_ctx, &c, &p));
  kvc_kv_pool_destroy(p);
}

/* --- Item 11 and 13: one versioned-struct check for every create ------------------- */

typedef kvc_status (*create_fn)(void *config);
typedef struct create_case {
  const char *name;
  size_t config_bytes, reserved_at;
  void (*init)(void *config);
  create_fn create;
} create_case;

static void *created; /* what a create wrote to *out (must stay the sentinel) */
static char sentinel_target;

#define CREATE_CASE(obj, TYPE, INIT)                         \
  static void init_##obj(void *config) {                     \
    TYPE c = INIT;                                           \
    memcpy(config, &c, sizeof c);                            \
  }                                                          \
  static kvc_status create_##obj(void *config) {             \
    kvc_##obj *o = (kvc_##obj *)(void *)&sentinel_target;    \
    kvc_status st = kvc_##obj##_create(kvt_ctx, config, &o); \
    created = o;                                             \
    if (st == KVC_OK) kvc_##obj##_destroy(o);                \
    return st;                                               \
  }

CREATE_CASE(req_to_token_pool, kvc_req_to_token_pool_config, KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT)
CREATE_CASE(allocator, kvc_allocator_config, KVC_ALLOCATOR_CONFIG_INIT)
CREATE_CASE(kv_pool, kvc_kv_pool_config, KVC_KV_POOL_CONFIG_INIT)
CREATE_CASE(mamba_pool, kvc_mamba_pool_config, KVC_MAMBA_POOL_CONFIG_INIT)
CREATE_CASE(swa_allocator, kvc_swa_allocator_config, KVC_SWA_ALLOCATOR_CONFIG_INIT)
CREATE_CASE(swa_kv_pool, kvc_swa_kv_pool_config, KVC_SWA_KV_POOL_CONFIG_INIT)
CREATE_CASE(hybrid_req_pool, kvc_hybrid_req_pool_config, KVC_HYBRID_REQ_POOL_CONFIG_INIT)
CREATE_CASE(hybrid_kv_pool, kvc_hybrid_kv_pool_config, KVC_HYBRID_KV_POOL_CONFIG_INIT)
CREATE_CASE(flow, kvc_flow_config, KVC_FLOW_CONFIG_INIT)

#define CASE(obj, TYPE) \
  { "kvc_" #obj "_create", sizeof(TYPE), offsetof(TYPE, reserved_), init_##obj, create_##obj }

static void test_every_create_checks_struct_size_version_and_reserved(void **state) {
  (void)state;
  const create_case cases[] = {
      CASE(req_to_token_pool, kvc_req_to_token_pool_config),
      CASE(allocator, kvc_allocator_config),
      CASE(kv_pool, kvc_kv_pool_config),
      CASE(mamba_pool, kvc_mamba_pool_config),
      CASE(swa_allocator, kvc_swa_allocator_config),
      CASE(swa_kv_pool, kvc_swa_kv_pool_config),
      CASE(hybrid_req_pool, kvc_hybrid_req_pool_config),
      CASE(hybrid_kv_pool, kvc_hybrid_kv_pool_config),
      CASE(flow, kvc_flow_config),
  };
  for (size_t i = 0; i < LEN(cases); i++) {
    const create_case *k = &cases[i];
    unsigned char cfg[512];
    assert_true(k->config_bytes + 16 <= sizeof cfg);
    size_t size;
    uint32_t version;
    /* Too small, too large (a newer minor's struct), another major, reserved word set. */
    const size_t sizes[] = {8, k->reserved_at - 1, k->config_bytes + 8};
    for (size_t j = 0; j < LEN(sizes); j++) {
      memset(cfg, 0, sizeof cfg);
      k->init(cfg);
      size = sizes[j];
      memcpy(cfg, &size, sizeof size);
      kvc_status st = k->create(cfg);
      if (st != KVC_ERR_VERSION) fail_msg("%s with struct_size %zu -> %s", k->name, size, kvc_status_name(st));
      assert_ptr_equal(created, &sentinel_target);
      assert_named_by(k->name);
    }
    k->init(cfg);
    version = 2 * 10000 + KVC_VERSION_NUMBER % 10000;
    memcpy(cfg + sizeof(size_t), &version, sizeof version);
    if (KVC_VERSION_MAJOR != 2) {
      kvc_status st = k->create(cfg);
      if (st != KVC_ERR_VERSION) fail_msg("%s with version %u -> %s", k->name, version, kvc_status_name(st));
      assert_ptr_equal(created, &sentinel_target);
    }
    k->init(cfg);
    const uint64_t one = 1;
    memcpy(cfg + k->config_bytes - sizeof one, &one, sizeof one);
    kvc_status st = k->create(cfg);
    if (st != KVC_ERR_INVALID_ARGUMENT || !strstr(kvc_last_error(kvt_ctx), "reserved_"))
      fail_msg("%s with the last reserved_ word set -> %s (%s)", k->name, kvc_status_name(st), kvc_last_error(kvt_ctx));
    assert_ptr_equal(created, &sentinel_target);
    assert_named_by(k->name);
  }
}

static void test_mla_buffer_reserved_words_must_be_zero(void **state) {
  (void)state;
  uint8_t *rows = kvt_dev_alloc(16 * 64 * 2);
  int64_t *loc = kvt_dev_alloc(sizeof(int64_t));
  uint16_t *nope = kvt_dev_alloc(64 * 2);
  kvt_poison(rows, 16 * 64 * 2);
  kvc_mla_buffer buf = KVC_MLA_BUFFER_INIT;
  buf.format = KVC_MLA_ROWS;
  buf.data = rows;
  buf.num_rows = 16;
  buf.dtype = KVC_DTYPE_BF16;
  buf.kv_lora_rank = 64;
  buf.qk_rope_head_dim = 0;
  const int64_t one = 3;
  kvt_h2d(loc, &one, sizeof one);
  kvc_mla_buffer bad = buf;
  bad.reserved_[2] = 5;
  KVT_STATUS(kvc_set_mla_kv(kvt_ctx, &bad, loc, KVC_INDEX_I64, 1, nope, NULL, KVC_DTYPE_BF16, 0, 0, NULL),
             KVC_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvc_last_error(kvt_ctx), "reserved_[2]"));
  assert_named_by("kvc_set_mla_kv");
  uint8_t after[16 * 64 * 2];
  kvt_d2h(after, rows, sizeof after);
  for (size_t i = 0; i < sizeof after; i++) assert_int_equal(after[i], 0xA5);
  KVT_OK(kvc_set_mla_kv(kvt_ctx, &buf, loc, KVC_INDEX_I64, 1, nope, NULL, KVC_DTYPE_BF16, 0, 0, NULL));
  kvt_dev_free(rows);
  kvt_dev_free(loc);
  kvt_dev_free(nope);
}

/* --- Item 12: index types ---------------------------------------------------------- */

static void test_unknown_index_types_are_refused(void **state) {
  (void)state;
  const kvc_index_type bad = (kvc_index_type)2;
  int32_t *table = kvt_dev_alloc(4 * 8 * sizeof(int32_t));
  int64_t *v = kvt_dev_alloc(4 * sizeof(int64_t));
  int64_t *out = kvt_dev_alloc(4 * sizeof(int64_t));
  const int64_t host_v[4] = {1, 1, 1, 1};
  kvt_h2d(v, host_v, sizeof host_v);
  KVT_OK(kvc_get_last_loc(kvt_ctx, table, 4, 8, v, KVC_INDEX_I64, v, KVC_INDEX_I64, out, 1, NULL));
  KVT_STATUS(kvc_get_last_loc(kvt_ctx, table, 4, 8, v, bad, v, KVC_INDEX_I64, out, 1, NULL), KVC_ERR_INVALID_ARGUMENT);
  assert_named_by("kvc_get_last_loc");
  KVT_STATUS(kvc_get_last_loc(kvt_ctx, table, 4, 8, v, KVC_INDEX_I64, v, (kvc_index_type)-1, out, 1, NULL),
             KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_write_req_to_token(kvt_ctx, table, 4, 8, v, bad, NULL, v, v, KVC_INDEX_I64, out, 1, NULL),
             KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_alloc_extend_fill(kvt_ctx, v, v, bad, v, v, 1, 1, out, 1, NULL), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_alloc_decode_fill(kvt_ctx, v, KVC_INDEX_I64, v, bad, v, 1, 1, out, 1, NULL), KVC_ERR_INVALID_ARGUMENT);
  assert_named_by("kvc_alloc_decode_fill");
  const int64_t *mapping = v;
  KVT_STATUS(kvc_swa_translate(kvt_ctx, mapping, 4, v, bad, out, KVC_INDEX_I64, 1, NULL), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_swa_translate(kvt_ctx, mapping, 4, v, KVC_INDEX_I64, out, bad, 1, NULL), KVC_ERR_INVALID_ARGUMENT);
  assert_named_by("kvc_swa_translate");

  kvc_swa_allocator_config sc = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  sc.size_full = 64;
  sc.size_swa = 32;
  kvc_swa_allocator *sa;
  KVT_OK(kvc_swa_allocator_create(kvt_ctx, &sc, &sa));
  KVT_STATUS(kvc_swa_allocator_translate(sa, v, bad, out, KVC_INDEX_I64, 1, NULL), KVC_ERR_INVALID_ARGUMENT);
  assert_named_by("kvc_swa_allocator_translate");
  kvc_swa_allocator_destroy(sa);

  kvc_kv_pool *p = small_mha_pool(1, 1);
  KVT_STATUS(kvc_kv_pool_move(p, v, v, bad, 1, NULL), KVC_ERR_INVALID_ARGUMENT);
  assert_named_by("kvc_kv_pool_move");
  KVT_STATUS(kvc_kv_pool_copy_to_host(p, v, bad, 1, out, NULL), KVC_ERR_INVALID_ARGUMENT);
  assert_named_by("kvc_kv_pool_copy_to_host");
  kvc_kv_pool_destroy(p);
  kvt_dev_free(table);
  kvt_dev_free(v);
  kvt_dev_free(out);
}

/* --- Item 14: messages name the public function ------------------------------------ */

static void test_errors_found_by_helpers_name_the_public_function(void **state) {
  (void)state;
  kvc_kv_pool_config c = KVC_KV_POOL_CONFIG_INIT;
  c.kind = KVC_KV_MHA;
  c.size = 0; /* refused inside the pool's validation helper */
  kvc_kv_pool *p;
  KVT_STATUS(kvc_kv_pool_create(kvt_ctx, &c, &p), KVC_ERR_INVALID_ARGUMENT);
  assert_named_by("kvc_kv_pool_create");

  void *mem = NULL;
  KVT_STATUS(kvc_memory_alloc(kvt_ctx, SIZE_MAX - 16, &mem),
             kvc_context_backend(kvt_ctx) == KVC_BACKEND_CUDA ? KVC_ERR_DEVICE_OOM : KVC_ERR_HOST_OOM);
  assert_null(mem);
  assert_named_by("kvc_memory_alloc");

  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = KVC_ALLOCATOR_PAGED;
  ac.size = 64;
  ac.page_size = 4;
  kvc_allocator *a;
  KVT_OK(kvc_allocator_create(kvt_ctx, &ac, &a));
  const int64_t pre[1] = {0}, seq[1] = {3}, last[1] = {-1};
  int64_t host_out[8];
  KVT_STATUS(kvc_allocator_alloc_extend(a, 1, pre, NULL, last, NULL, NULL, NULL, host_out, NULL, NULL),
             KVC_ERR_INVALID_ARGUMENT);
  assert_named_by("kvc_allocator_alloc_extend");
  (void)seq;
  kvc_decode_channel *ch = (kvc_decode_channel *)(void *)&sentinel_target;
  KVT_STATUS(kvc_decode_channel_create(a, NULL, 0, 4, NULL, &ch), KVC_ERR_INVALID_ARGUMENT);
  assert_named_by("kvc_decode_channel_create");
  assert_ptr_equal(ch, &sentinel_target); /* item 9: *out untouched on failure */
  kvc_allocator_destroy(a);

  kvc_swa_allocator_config sc = KVC_SWA_ALLOCATOR_CONFIG_INIT;
  sc.size_full = 64;
  sc.size_swa = 32;
  kvc_swa_allocator *sa;
  KVT_OK(kvc_swa_allocator_create(kvt_ctx, &sc, &sa));
  const int64_t not_held[1] = {5};
  KVT_STATUS(kvc_swa_allocator_free(sa, not_held, 1, NULL), KVC_ERR_MISUSE);
  assert_named_by("kvc_swa_allocator_free");
  ch = (kvc_decode_channel *)(void *)&sentinel_target;
  KVT_STATUS(kvc_decode_channel_create_swa(sa, NULL, 1u << 30, 4, NULL, &ch), KVC_ERR_INVALID_ARGUMENT);
  assert_named_by("kvc_decode_channel_create_swa");
  assert_ptr_equal(ch, &sentinel_target);
  kvc_swa_allocator_destroy(sa);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_req_pool_write_range_check_does_not_wrap),
    cmocka_unit_test(test_get_last_loc_refuses_a_table_too_large_to_index),
    cmocka_unit_test(test_host_copy_bytes_refuses_counts_that_overflow),
    cmocka_unit_test(test_row_copies_refuse_strides_that_overflow),
    cmocka_unit_test(test_move_scratch_failure_is_host_oom_with_nothing_moved),
    cmocka_unit_test(test_creates_refuse_sizes_that_overflow_their_bound_checks),
    cmocka_unit_test(test_every_create_checks_struct_size_version_and_reserved),
    cmocka_unit_test(test_mla_buffer_reserved_words_must_be_zero),
    cmocka_unit_test(test_unknown_index_types_are_refused),
    cmocka_unit_test(test_errors_found_by_helpers_name_the_public_function),
};

KVT_MAIN("bad_input", tests)
