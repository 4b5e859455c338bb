/*
 * req_to_token_pool.c — SGLang's ReqToTokenPool: which request row holds which token
 * slots.
 *
 *   device table (int32, row-major, stride = max_context_len)      host
 *   row 0     [ padding: written only by padded CUDA-graph batches ]  mirror: same shape,
 *   row 1     [ slot slot slot ...                                  ]  what the library
 *   ...                                                                 wrote, so flows
 *   row size  [ ...                                                 ]  never read back
 *
 *   free rows: FIFO id ring (id_ring.h)  front -> [r_a r_b r_c ...] <- push back
 *
 * Rows are reused FIFO exactly as SGLang's `free_slots` list (pop front, append back),
 * which decides which row a request gets. Unlike SGLang, frees are checked against a
 * per-row held flag, so a double free or row 0 is an error instead of a duplicate row
 * in circulation.
 */
#include "alloc.h"

#include <stddef.h>
#include <string.h>

/* --- Handle checks ----------------------------------------------------------------- */

kvc_status kvc__req_pool_check_handle(const kvc_context *ctx, const char *fn, const kvc_req_to_token_pool *pool) {
  if (!pool) return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "req_pool is NULL");
  if (pool->magic != KVC__REQ_POOL_MAGIC)
    return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "req_pool is not a live kvc_req_to_token_pool");
  if (ctx && pool->ctx != ctx)
    return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "req_pool belongs to another context");
  return KVC_OK;
}

#define POOL_ENTRY(pool) KVC_CHECK_HANDLE(pool, KVC__REQ_POOL_MAGIC, "pool", "kvc_req_to_token_pool")

/* O(size) audit: the flags here, the free list against them in the ring's audit (which
 * sets and clears the MARK bit: const only in spirit). */
static kvc_status audit(const kvc_req_to_token_pool *p, const char *fn) {
  uint8_t *flag = p->rowflag;
  const int64_t count = p->free_rows.count;
  if (count < 0 || count > p->size)
    return kvc__error(p->ctx, KVC_ERR_INTERNAL, fn, "check: free count %lld outside [0, %d]", (long long)count,
                      p->size);
  if (flag[0] != 0) return kvc__error(p->ctx, KVC_ERR_INTERNAL, fn, "check: row 0 is flagged 0x%x", flag[0]);
  int32_t held = 0;
  for (int32_t r = 1; r <= p->size; r++) {
    if (flag[r] & ~(uint8_t)KVC__ROW_HELD)
      return kvc__error(p->ctx, KVC_ERR_INTERNAL, fn, "check: row %d has flags 0x%x", r, flag[r]);
    held += (flag[r] & KVC__ROW_HELD) != 0;
  }
  if (held + count != p->size)
    return kvc__error(p->ctx, KVC_ERR_INTERNAL, fn, "check: %d held + %lld free != %d rows", held, (long long)count,
                      p->size);
  const kvc__ring_ids ids = {flag, (uint32_t)p->size, 0, KVC__ROW_MARK, "free list", "row"};
  return kvc__ring_audit(p->ctx, fn, &p->free_rows, &ids);
}

static kvc_status pool_finish(kvc_req_to_token_pool *p, const char *fn, kvc_status st) {
  if (st != KVC_OK || !kvc_context_check_mode(p->ctx)) return st;
  return audit(p, fn);
}

kvc_status kvc_req_to_token_pool_check(const kvc_req_to_token_pool *p) {
  KVC_API_ENTRY();
  POOL_ENTRY(p);
  return audit(p, __func__);
}

kvc_status kvc_req_to_token_pool_audit_device(const kvc_req_to_token_pool *p, kvc_stream stream) {
  KVC_API_ENTRY();
  POOL_ENTRY(p);
  KVC_FORWARD(audit(p, __func__));
  kvc_context *ctx = p->ctx;
  const size_t row_bytes = (size_t)p->width * sizeof(int32_t);
  int32_t *buf = kvc__malloc(ctx, row_bytes);
  KVC_RETURN_IF(!buf, ctx, KVC_ERR_HOST_OOM, "row buffer of %zu bytes", row_bytes);
  kvc_status st = kvc__dev_sync(ctx, stream);
  for (int32_t r = 1; st == KVC_OK && r <= p->size; r++) {
    if (!(p->rowflag[r] & KVC__ROW_HELD)) continue;
    st = kvc__dev_d2h(ctx, buf, p->table + (size_t)r * (size_t)p->width, row_bytes, stream);
    if (st == KVC_OK) st = kvc__dev_sync(ctx, stream);
    if (st != KVC_OK) break;
    const int32_t *m = kvc__req_pool_mirror_row(p, r);
    if (memcmp(buf, m, row_bytes) != 0) {
      int32_t k = 0;
      while (k < p->width && buf[k] == m[k]) k++;
      st = kvc__error(ctx, KVC_ERR_INTERNAL, __func__, "row %d position %d: device %d, host mirror %d", r, k, buf[k],
                      m[k]);
    }
  }
  kvc__free(ctx, buf);
  return st;
}

static void reset_rows(kvc_req_to_token_pool *p) {
  kvc__ring_fill(&p->free_rows, p->size);
  memset(p->rowflag, 0, (size_t)p->size + 1);
}

/* --- Create / destroy -------------------------------------------------------------- */

/* The header's limit: 8 GiB of device table and as much host mirror. */
#define KVC__REQ_TABLE_MAX_ENTRIES ((size_t)1 << 31)

kvc_status kvc_req_to_token_pool_create(kvc_context *ctx, const kvc_req_to_token_pool_config *config,
                                        kvc_req_to_token_pool **out) {
  KVC_API_ENTRY();
  kvc_req_to_token_pool_config c = KVC_REQ_TO_TOKEN_POOL_CONFIG_INIT;
  KVC__CREATE_CONFIG(ctx, config, out, &c, kvc_req_to_token_pool_config);
  KVC_RETURN_IF(c.size < 1 || c.max_context_len < 1, ctx, KVC_ERR_INVALID_ARGUMENT,
                "size %d and max_context_len %d must be >= 1", c.size, c.max_context_len);
  KVC_RETURN_IF(c.size > INT32_MAX - 1, ctx, KVC_ERR_INVALID_ARGUMENT, "size %d too large", c.size);
  size_t entries, bytes;
  KVC_RETURN_IF(!kvc__mul_size((size_t)c.size + 1, (size_t)c.max_context_len, &entries) ||
                    entries > KVC__REQ_TABLE_MAX_ENTRIES || !kvc__mul_size(entries, sizeof(int32_t), &bytes),
                ctx, KVC_ERR_INVALID_ARGUMENT, "table of (size %d + 1) x max_context_len %d entries is over 2^31",
                c.size, c.max_context_len);

  kvc_status st = KVC_OK;
  kvc_req_to_token_pool *p = kvc__calloc(ctx, 1, sizeof *p);
  KVC_RETURN_IF(!p, ctx, KVC_ERR_HOST_OOM, "pool struct");
  p->ctx = ctx;
  p->size = c.size;
  p->width = c.max_context_len;
  KVC_CHECK_GOTO(kvc__ring_init(ctx, __func__, &p->free_rows, c.size), st, fail);
  p->rowflag = kvc__malloc(ctx, (size_t)c.size + 1);
  p->row_buf = kvc__malloc(ctx, (size_t)c.max_context_len * sizeof(int32_t));
  p->scratch = kvc__malloc(ctx, KVC__PARAM_SCRATCH_BYTES);
  p->mirror = kvc__calloc(ctx, entries, sizeof(int32_t));
  KVC_FAIL_GOTO(!p->rowflag || !p->row_buf || !p->scratch || !p->mirror, ctx, st, KVC_ERR_HOST_OOM, fail,
                "host metadata for %d rows x %d", c.size, c.max_context_len);
  void *table = NULL;
  KVC_CHECK_GOTO(kvc__dev_alloc(ctx, bytes, &table), st, fail);
  p->table = table;
  KVC_CHECK_GOTO(kvc__dev_memset(ctx, p->table, 0, bytes, NULL), st, fail);
  KVC_CHECK_GOTO(kvc__dev_sync(ctx, NULL), st, fail);
  reset_rows(p);
  p->magic = KVC__REQ_POOL_MAGIC;
  *out = p;
  return KVC_OK;
fail:
  kvc__dev_free(ctx, p->table);
  kvc__free(ctx, p->mirror);
  kvc__free(ctx, p->scratch);
  kvc__free(ctx, p->row_buf);
  kvc__free(ctx, p->rowflag);
  kvc__ring_fini(ctx, &p->free_rows);
  kvc__free(ctx, p);
  return st;
}

void kvc_req_to_token_pool_destroy(kvc_req_to_token_pool *p) {
  if (!p || p->magic != KVC__REQ_POOL_MAGIC) return;
  kvc_context *ctx = p->ctx;
  p->magic = KVC__DEAD_MAGIC;
  kvc__dev_free(ctx, p->table);
  kvc__free(ctx, p->mirror);
  kvc__free(ctx, p->scratch);
  kvc__free(ctx, p->row_buf);
  kvc__free(ctx, p->rowflag);
  kvc__ring_fini(ctx, &p->free_rows);
  kvc__free(ctx, p);
}

/* --- Rows -------------------------------------------------------------------------- */

kvc_status kvc_req_to_token_pool_alloc(kvc_req_to_token_pool *p, size_t n, int32_t *rows) {
  KVC_API_ENTRY();
  POOL_ENTRY(p);
  if (n == 0) return KVC_OK;
  KVC_RETURN_IF(!rows, p->ctx, KVC_ERR_INVALID_ARGUMENT, "rows is NULL for n = %zu", n);
  /* Validate every kept row (held, listed once) before taking anything. */
  size_t need = 0, i;
  kvc_status st = KVC_OK;
  for (i = 0; i < n; i++) {
    int32_t r = rows[i];
    if (r == 0) {
      need++;
      continue;
    }
    if (r < 0 || r > p->size) {
      st = kvc__error(p->ctx, KVC_ERR_MISUSE, __func__, "rows[%zu] = %d is out of range [1, %d]", i, r, p->size);
      break;
    }
    if (!(p->rowflag[r] & KVC__ROW_HELD)) {
      st = kvc__error(p->ctx, KVC_ERR_MISUSE, __func__, "rows[%zu] = %d is not a held row", i, r);
      break;
    }
    if (p->rowflag[r] & KVC__ROW_MARK) {
      st = kvc__error(p->ctx, KVC_ERR_MISUSE, __func__, "rows[%zu] = %d is listed twice", i, r);
      break;
    }
    p->rowflag[r] |= KVC__ROW_MARK;
  }
  for (size_t j = 0; j < i; j++)
    if (rows[j] > 0) p->rowflag[rows[j]] &= (uint8_t)~KVC__ROW_MARK;
  if (st != KVC_OK) return st;
  KVC_RETURN_IF(need > (size_t)p->free_rows.count, p->ctx, KVC_ERR_OUT_OF_SLOTS, "%zu rows needed, %lld free", need,
                (long long)p->free_rows.count);
  for (i = 0; i < n; i++)
    if (rows[i] == 0) rows[i] = (int32_t)kvc__ring_pop_front(&p->free_rows, p->rowflag, KVC__ROW_HELD);
  return pool_finish(p, __func__, KVC_OK);
}

void kvc__req_pool_unalloc(kvc_req_to_token_pool *p, const int32_t *rows, size_t n) {
  /* int32 rows read as uint32 (a permitted alias): a negative one is out of range. */
  kvc__ring_undo_take(&p->free_rows, (const uint32_t *)rows, (int64_t)n, p->rowflag, KVC__ROW_HELD, 0,
                      (uint32_t)p->size);
}

kvc_status kvc_req_to_token_pool_free(kvc_req_to_token_pool *p, int32_t row) {
  KVC_API_ENTRY();
  POOL_ENTRY(p);
  KVC_RETURN_IF(row == 0, p->ctx, KVC_ERR_MISUSE, "row 0 is the padding row");
  KVC_RETURN_IF(row < 0 || row > p->size, p->ctx, KVC_ERR_MISUSE, "row %d is out of range [1, %d]", row, p->size);
  KVC_RETURN_IF(!(p->rowflag[row] & KVC__ROW_HELD), p->ctx, KVC_ERR_MISUSE, "row %d is not held (double free?)", row);
  const uint32_t id = (uint32_t)row;
  kvc__ring_push_back(&p->free_rows, &id, 1, p->rowflag, 0);
  return pool_finish(p, __func__, KVC_OK);
}

kvc_status kvc_req_to_token_pool_clear(kvc_req_to_token_pool *p) {
  KVC_API_ENTRY();
  POOL_ENTRY(p);
  reset_rows(p);
  return pool_finish(p, __func__, KVC_OK);
}

int32_t kvc_req_to_token_pool_available(const kvc_req_to_token_pool *p) {
  return (p && p->magic == KVC__REQ_POOL_MAGIC) ? (int32_t)p->free_rows.count : 0;
}

int kvc_req_to_token_pool_is_held(const kvc_req_to_token_pool *p, int32_t row) {
  return (p && p->magic == KVC__REQ_POOL_MAGIC) ? (int)kvc__req_pool_row_held(p, row) : 0;
}

int32_t *kvc_req_to_token_pool_table(const kvc_req_to_token_pool *p) {
  return (p && p->magic == KVC__REQ_POOL_MAGIC) ? p->table : NULL;
}

int32_t kvc_req_to_token_pool_size(const kvc_req_to_token_pool *p) {
  return (p && p->magic == KVC__REQ_POOL_MAGIC) ? p->size : 0;
}

int32_t kvc_req_to_token_pool_max_context_len(const kvc_req_to_token_pool *p) {
  return (p && p->magic == KVC__REQ_POOL_MAGIC) ? p->width : 0;
}

const int32_t *kvc_req_to_token_pool_row(const kvc_req_to_token_pool *p, int32_t row) {
  if (!p || p->magic != KVC__REQ_POOL_MAGIC || row < 0 || row > p->size) return NULL;
  return kvc__req_pool_mirror_row(p, row);
}

kvc_status kvc_req_to_token_pool_write(kvc_req_to_token_pool *p, int32_t row, int32_t start, const int64_t *slots,
                                       size_t n, kvc_stream stream) {
  KVC_API_ENTRY();
  POOL_ENTRY(p);
  KVC_RETURN_IF(row < 0 || row > p->size, p->ctx, KVC_ERR_INVALID_ARGUMENT, "row %d is out of range [1, %d]", row,
                p->size);
  KVC_RETURN_IF(!kvc__req_pool_row_held(p, row), p->ctx, KVC_ERR_MISUSE, "row %d is not held", row);
  KVC_RETURN_IF(start < 0 || !kvc__range_fits((uint64_t)start, n, (uint64_t)p->width), p->ctx, KVC_ERR_INVALID_ARGUMENT,
                "range [%d, %d + %zu) leaves the row of %d positions", start, start, n, p->width);
  if (n == 0) return KVC_OK;
  KVC_RETURN_IF(!slots, p->ctx, KVC_ERR_INVALID_ARGUMENT, "slots is NULL for n = %zu", n);
  for (size_t i = 0; i < n; i++) {
    KVC_RETURN_IF(slots[i] < 0 || slots[i] > INT32_MAX, p->ctx, KVC_ERR_INVALID_ARGUMENT,
                  "slots[%zu] = %lld is out of range [0, 2^31)", i, (long long)slots[i]);
    p->row_buf[i] = (int32_t)slots[i];
  }
  if (!p->k_row[0]) KVC_FORWARD(kvc__plan_prefetch(p->ctx, &kvc__k_row_write, NULL, p->k_row));
  int64_t offset = (int64_t)row * p->width + start;
  KVC_FORWARD(kvc__row_write(p->ctx, p->scratch, p->k_row, p->table, offset, p->row_buf, n, stream));
  memcpy(kvc__req_pool_mirror_row(p, row) + start, p->row_buf, n * sizeof(int32_t));
  return KVC_OK;
}
