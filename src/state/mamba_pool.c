/*
 * mamba_pool.c — SGLang's MambaPool (+ the newer MambaSlotAllocator's groups): recurrent
 * states of the linear-attention layers of hybrid models, one slot per request.
 *
 *   one device allocation (zero-filled at create), tensors 256-byte aligned:
 *
 *   [conv_0 (L, size+1, *c0)] [conv_1 ...] [temporal (L, size+1, t0,t1,t2)]   <- state
 *   [intermediate_ssm (L, spec+1, D, t0,t1,t2)] [intermediate_conv_i (L, spec+1, D, c0,c1)]
 *                                                                   ^ speculative only
 *   inside a tensor: layer l at base + l * rows * row_bytes, slot s at + s * row_bytes
 *
 *   host:  FIFO id ring (id_ring.h)   front -> [f f f f ...] <- free appends at the back
 *          flag[slot]  FREE | HELD | RESERVED (taken by an open alloc group) + marks
 *
 * Why the host owns the ids: SGLang keeps free_slots as a device tensor and pays a
 * concat launch per free and one zeroing scatter per tensor per alloc. Here alloc/free
 * decide ids on the host (same FIFO order, so the same ids as SGLang) and every
 * state-changing call is ONE launch over all state tensors and layers whose slot ids
 * ride in the kernel's parameter block (kvc__plan: inline up to 8000 ids, else one
 * staged upload). Frees are validated (SGLang accepts anything) so a double free is an
 * error, never a duplicated id in circulation.
 */
#include "mamba.h"

#include <string.h>

/* --- Audit ------------------------------------------------------------------------ */

static kvc_status audit(const kvc_mamba_pool *p, const char *fn) {
  int32_t held = 0, reserved = 0, free_flags = 0;
  if (p->flag[0] != 0) return kvc__error(p->ctx, KVC_ERR_INTERNAL, fn, "check: slot 0 flagged %u", p->flag[0]);
  for (int32_t s = 1; s <= p->size; s++) {
    uint8_t f = p->flag[s];
    if (f & (FL_MARK_DST | FL_MARK_SRC))
      return kvc__error(p->ctx, KVC_ERR_INTERNAL, fn, "check: slot %d left marked", s);
    if (f == FL_HELD) held++;
    else if (f == FL_RESERVED) reserved++;
    else if (f == 0) free_flags++;
    else return kvc__error(p->ctx, KVC_ERR_INTERNAL, fn, "check: slot %d flag %u", s, f);
  }
  const int64_t count = p->free_slots.count;
  if (free_flags != count || held + reserved + count != p->size)
    return kvc__error(p->ctx, KVC_ERR_INTERNAL, fn, "check: %d held + %d reserved + %lld free (flags %d) != %d", held,
                      reserved, (long long)count, free_flags, p->size);
  if (reserved != (p->in_group ? p->group_n - p->group_pos : 0))
    return kvc__error(p->ctx, KVC_ERR_INTERNAL, fn, "check: %d reserved slots, group holds %d", reserved,
                      p->in_group ? p->group_n - p->group_pos : 0);
  /* As many free flags as entries, and the ring's audit finds each entry free-flagged and
   * listed once: the ring holds exactly the free slots. */
  const kvc__ring_ids ids = {p->flag, (uint32_t)p->size, 0, FL_MARK_DST, "free list", "slot"};
  return kvc__ring_audit(p->ctx, fn, &p->free_slots, &ids);
}

static kvc_status finish(kvc_mamba_pool *p, const char *fn, kvc_status st) {
  if (st != KVC_OK || !kvc_context_check_mode(p->ctx)) return st;
  return audit(p, fn);
}

kvc_status kvc_mamba_pool_check(const kvc_mamba_pool *pool) {
  KVC_API_ENTRY();
  KVC__MAMBA_ENTRY(pool);
  return audit(pool, __func__);
}

/* --- Create / destroy -------------------------------------------------------------- */

static kvc_status validate(kvc_context *ctx, const kvc_mamba_pool_config *c) {
  KVC_RETURN_IF(c->size < 1 || c->size >= INT32_MAX - 1, ctx, KVC_ERR_INVALID_ARGUMENT, "size %d outside [1, 2^31 - 2)",
                c->size);
  KVC_RETURN_IF(c->num_layers < 1 || c->num_layers > 4096, ctx, KVC_ERR_INVALID_ARGUMENT,
                "num_layers %d outside [1, 4096]", c->num_layers);
  KVC_RETURN_IF(c->num_conv < 1 || c->num_conv > KVC_MAMBA_MAX_CONV, ctx, KVC_ERR_INVALID_ARGUMENT,
                "num_conv %d outside [1, %d]", c->num_conv, KVC_MAMBA_MAX_CONV);
  KVC_RETURN_IF(!c->conv_shapes, ctx, KVC_ERR_INVALID_ARGUMENT, "conv_shapes is NULL");
  const kvc_dtype dts[2] = {c->conv_dtype, c->temporal_dtype};
  for (int i = 0; i < 2; i++)
    KVC_RETURN_IF(kvc_dtype_size(dts[i]) == 0 || dts[i] == KVC_DTYPE_FP4_E2M1, ctx, KVC_ERR_INVALID_ARGUMENT,
                  "%s dtype %d not allowed", i ? "temporal" : "conv", (int)dts[i]);
  for (int i = 0; i < 3; i++)
    KVC_RETURN_IF(c->temporal_shape[i] < 1 || c->temporal_shape[i] > (1 << 24), ctx, KVC_ERR_INVALID_ARGUMENT,
                  "temporal_shape[%d] = %lld outside [1, 2^24]", i, (long long)c->temporal_shape[i]);
  KVC_RETURN_IF(c->spec_state_size < 0 || c->num_draft_tokens < 0, ctx, KVC_ERR_INVALID_ARGUMENT,
                "spec_state_size %d / num_draft_tokens %d negative", c->spec_state_size, c->num_draft_tokens);
  KVC_RETURN_IF(c->spec_state_size >= INT32_MAX - 1, ctx, KVC_ERR_INVALID_ARGUMENT, "spec_state_size too large");
  KVC_RETURN_IF(c->flags & ~KVC_MAMBA_POOL_NO_ZERO_ON_ALLOC, ctx, KVC_ERR_INVALID_ARGUMENT, "unknown flags 0x%x",
                c->flags);
  for (int i = 0; i < c->num_conv; i++) {
    const kvc_mamba_shape *s = &c->conv_shapes[i];
    KVC_RETURN_IF(s->ndim < 1 || s->ndim > 3, ctx, KVC_ERR_INVALID_ARGUMENT, "conv_shapes[%d].ndim %d outside [1, 3]",
                  i, s->ndim);
    KVC_RETURN_IF(c->num_draft_tokens > 0 && s->ndim < 2, ctx, KVC_ERR_INVALID_ARGUMENT,
                  "conv_shapes[%d] needs ndim >= 2 for the speculative conv windows", i);
    for (int d = 0; d < s->ndim; d++)
      KVC_RETURN_IF(s->dims[d] < 1 || s->dims[d] > (1 << 24), ctx, KVC_ERR_INVALID_ARGUMENT,
                    "conv_shapes[%d].dims[%d] = %lld outside [1, 2^24]", i, d, (long long)s->dims[d]);
  }
  if (c->layer_ids) {
    for (int i = 0; i < c->num_layers; i++) {
      KVC_RETURN_IF(c->layer_ids[i] < 0, ctx, KVC_ERR_INVALID_ARGUMENT, "layer_ids[%d] = %d is negative", i,
                    c->layer_ids[i]);
      for (int j = 0; j < i; j++)
        KVC_RETURN_IF(c->layer_ids[j] == c->layer_ids[i], ctx, KVC_ERR_INVALID_ARGUMENT,
                      "layer_ids[%d] and [%d] are both %d", j, i, c->layer_ids[i]);
    }
  }
  return KVC_OK;
}

/* Fills tensor `t`: (L, rows, dims...) of dtype; false on byte overflow. */
static bool set_tensor(mamba_tensor *t, kvc_region_kind region, int32_t index, kvc_dtype dtype, int64_t L, int64_t rows,
                       const int64_t *dims, int nd) {
  t->region = region;
  t->index = index;
  t->dtype = dtype;
  t->ndim = 2 + nd;
  t->shape[0] = L;
  t->shape[1] = rows;
  size_t row = kvc_dtype_size(dtype), pitch, total;
  for (int d = 0; d < nd; d++) {
    t->shape[2 + d] = dims[d];
    if (!kvc__mul_size(row, (size_t)dims[d], &row)) return false;
  }
  if (!kvc__mul_size(row, (size_t)rows, &pitch) || !kvc__mul_size(pitch, (size_t)L, &total) ||
      total > (size_t)INT64_MAX / 2)
    return false;
  t->row_bytes = (int64_t)row;
  t->layer_pitch = (int64_t)pitch;
  t->rows = rows;
  return true;
}

static void reset_free(kvc_mamba_pool *p) {
  kvc__ring_fill(&p->free_slots, p->size);
  memset(p->flag, 0, (size_t)p->size + 1);
  p->in_group = false;
  p->group_n = p->group_pos = 0;
}

static void free_all(kvc_context *ctx, kvc_mamba_pool *p) {
  kvc__dev_free(ctx, p->mem);
  kvc__free(ctx, p->layer_ids);
  kvc__ring_fini(ctx, &p->free_slots);
  kvc__free(ctx, p->flag);
  kvc__free(ctx, p->group);
  kvc__free(ctx, p->tmp);
  kvc__free(ctx, p->scratch);
  kvc__free(ctx, p);
}

void kvc_mamba_pool_config_default(kvc_mamba_pool_config *config) {
  if (config) {
    kvc_mamba_pool_config c = KVC_MAMBA_POOL_CONFIG_INIT;
    *config = c;
  }
}

kvc_status kvc_mamba_pool_create(kvc_context *ctx, const kvc_mamba_pool_config *config, kvc_mamba_pool **out) {
  KVC_API_ENTRY();
  kvc_mamba_pool_config c = KVC_MAMBA_POOL_CONFIG_INIT;
  KVC__CREATE_CONFIG(ctx, config, out, &c, kvc_mamba_pool_config);
  KVC_FORWARD(validate(ctx, &c));

  kvc_status st = KVC_OK;
  kvc_mamba_pool *p = kvc__calloc(ctx, 1, sizeof *p);
  KVC_RETURN_IF(!p, ctx, KVC_ERR_HOST_OOM, "pool struct");
  p->ctx = ctx;
  p->size = c.size;
  p->L = c.num_layers;
  p->num_conv = c.num_conv;
  p->flags = c.flags;
  p->layer_ids = kvc__malloc(ctx, sizeof(int32_t) * (size_t)c.num_layers);
  KVC_CHECK_GOTO(kvc__ring_init(ctx, __func__, &p->free_slots, c.size), st, fail);
  p->flag = kvc__malloc(ctx, (size_t)c.size + 1);
  p->group = kvc__malloc(ctx, sizeof(int32_t) * (size_t)c.size);
  p->tmp = kvc__malloc(ctx, sizeof(int32_t) * 2 * ((size_t)c.size + 1));
  p->scratch = kvc__malloc(ctx, KVC__PARAM_SCRATCH_BYTES);
  KVC_FAIL_GOTO(!p->layer_ids || !p->flag || !p->group || !p->tmp || !p->scratch, ctx, st, KVC_ERR_HOST_OOM, fail,
                "host metadata for %d slots", c.size);
  for (int32_t l = 0; l < c.num_layers; l++) p->layer_ids[l] = c.layer_ids ? c.layer_ids[l] : l;

  /* Geometry, in SGLang's field order. */
  const int64_t L = c.num_layers, rows = (int64_t)c.size + 1, srows = (int64_t)c.spec_state_size + 1;
  bool ok = true;
  int nt = 0;
  for (int i = 0; i < c.num_conv; i++)
    ok = ok && set_tensor(&p->t[nt++], KVC_REGION_MAMBA_CONV, i, c.conv_dtype, L, rows, c.conv_shapes[i].dims,
                          c.conv_shapes[i].ndim);
  ok = ok && set_tensor(&p->t[nt++], KVC_REGION_MAMBA_TEMPORAL, 0, c.temporal_dtype, L, rows, c.temporal_shape, 3);
  p->nstate = nt;
  if (c.num_draft_tokens > 0) {
    int64_t d[5] = {c.num_draft_tokens, c.temporal_shape[0], c.temporal_shape[1], c.temporal_shape[2], 0};
    ok = ok && set_tensor(&p->t[nt++], KVC_REGION_MAMBA_INTERMEDIATE_SSM, 0, c.temporal_dtype, L, srows, d, 4);
    for (int i = 0; i < c.num_conv; i++) {
      int64_t w[3] = {c.num_draft_tokens, c.conv_shapes[i].dims[0], c.conv_shapes[i].dims[1]};
      ok = ok && set_tensor(&p->t[nt++], KVC_REGION_MAMBA_INTERMEDIATE_CONV, i, c.conv_dtype, L, srows, w, 3);
    }
  }
  p->ntensors = nt;
  KVC_FAIL_GOTO(!ok, ctx, st, KVC_ERR_INVALID_ARGUMENT, fail, "tensor byte sizes overflow");
  size_t offs[KVC__MAMBA_MAX_TENSORS], off = 0;
  for (int i = 0; i < nt; i++) {
    size_t bytes = (size_t)p->t[i].layer_pitch * (size_t)L, end;
    KVC_FAIL_GOTO(!kvc__add_size(off, bytes, &end) || end > SIZE_MAX - 512, ctx, st, KVC_ERR_INVALID_ARGUMENT, fail,
                  "pool bytes overflow");
    offs[i] = off;
    off = (end + 255) & ~(size_t)255;
  }
  p->mem_bytes = off;
  p->vec = 16;
  for (int i = 0; i < p->nstate; i++)
    while (p->vec > 1 && (p->t[i].row_bytes % p->vec || p->t[i].layer_pitch % p->vec)) p->vec >>= 1;

  KVC_CHECK_GOTO(kvc__dev_alloc(ctx, off, &p->mem), st, fail);
  for (int i = 0; i < nt; i++) p->t[i].base = (unsigned char *)p->mem + offs[i];
  KVC_CHECK_GOTO(kvc__dev_memset(ctx, p->mem, 0, off, NULL), st, fail);
  KVC_CHECK_GOTO(kvc__mamba_ensure_kernels(p, 0, p->vec), st, fail);
  KVC_CHECK_GOTO(kvc__mamba_ensure_kernels(p, 1, p->vec), st, fail);
  KVC_CHECK_GOTO(kvc__dev_sync(ctx, NULL), st, fail);
  reset_free(p);
  p->magic = KVC__MAMBA_MAGIC;
  *out = p;
  return KVC_OK;
fail:
  free_all(ctx, p);
  return st;
}

void kvc_mamba_pool_destroy(kvc_mamba_pool *pool) {
  if (!kvc__mamba_live(pool)) return;
  pool->magic = 0;
  free_all(pool->ctx, pool);
}

/* --- Slot bookkeeping -------------------------------------------------------------- */

int32_t kvc_mamba_pool_size(const kvc_mamba_pool *pool) { return kvc__mamba_live(pool) ? pool->size : 0; }
int32_t kvc_mamba_pool_available(const kvc_mamba_pool *pool) {
  return kvc__mamba_live(pool) ? (int32_t)pool->free_slots.count : 0;
}
int kvc_mamba_pool_is_held(const kvc_mamba_pool *pool, int32_t slot) {
  return kvc__mamba_live(pool) && slot >= 1 && slot <= pool->size && (pool->flag[slot] & FL_HELD) ? 1 : 0;
}

static bool zero_on_alloc(const kvc_mamba_pool *p) { return !(p->flags & KVC_MAMBA_POOL_NO_ZERO_ON_ALLOC); }

/* Zeroes the first n ids of the ring (not popped yet). */
static kvc_status zero_front(kvc_mamba_pool *p, size_t n, kvc_stream stream) {
  if (!zero_on_alloc(p) || n == 0) return KVC_OK;
  int32_t *ids = p->tmp;
  kvc__ring_copy(&p->free_slots, 0, (int64_t)n, (uint32_t *)ids);
  const kvc__mamba_op op = {.mode = KVC_MAMBA_ZERO, .a = ids, .n = n, .vec = p->vec};
  return kvc__mamba_launch(p, &op, stream);
}

kvc_status kvc_mamba_pool_alloc(kvc_mamba_pool *pool, size_t n, int32_t *out_slots, kvc_stream stream) {
  KVC_API_ENTRY();
  KVC__MAMBA_ENTRY(pool);
  if (n == 0) return KVC_OK;
  KVC_RETURN_IF(!out_slots, pool->ctx, KVC_ERR_INVALID_ARGUMENT, "out_slots is NULL");
  if (n == 1 && pool->in_group && pool->group_pos < pool->group_n) {
    int32_t s = pool->group[pool->group_pos++];
    pool->flag[s] = FL_HELD;
    out_slots[0] = s;
    return finish(pool, __func__, KVC_OK);
  }
  if (n > (size_t)pool->free_slots.count)
    return kvc__error(pool->ctx, KVC_ERR_OUT_OF_SLOTS, __func__, "%zu slots requested, %lld free", n,
                      (long long)pool->free_slots.count);
  KVC_FORWARD(zero_front(pool, n, stream));
  kvc__ring_take(&pool->free_slots, (int64_t)n, (uint32_t *)out_slots, pool->flag, FL_HELD);
  return finish(pool, __func__, KVC_OK);
}

void kvc__mamba_pool_unalloc(kvc_mamba_pool *p, const int32_t *slots, size_t n) {
  /* A single slot taken from the open alloc group goes back to the group. */
  if (n == 1 && p->in_group && p->group_pos > 0 && p->group[p->group_pos - 1] == slots[0] &&
      p->flag[slots[0]] == FL_HELD) {
    p->flag[slots[0]] = FL_RESERVED;
    p->group_pos--;
    return;
  }
  kvc__ring_undo_take(&p->free_slots, (const uint32_t *)slots, (int64_t)n, p->flag, FL_HELD, 0, (uint32_t)p->size);
}

kvc_status kvc_mamba_pool_free(kvc_mamba_pool *pool, const int32_t *slots, size_t n) {
  KVC_API_ENTRY();
  KVC__MAMBA_ENTRY(pool);
  if (n == 0) return KVC_OK;
  KVC_RETURN_IF(!slots, pool->ctx, KVC_ERR_INVALID_ARGUMENT, "slots is NULL");
  kvc_status st = KVC_OK;
  size_t i = 0;
  for (; i < n; i++) {
    int32_t s = slots[i];
    if (s < 1 || s > pool->size) {
      st = kvc__error(pool->ctx, KVC_ERR_MISUSE, __func__, "slots[%zu] = %d %s", i, s,
                      s == 0 ? "is the padding slot" : "is out of range");
      break;
    }
    if (pool->flag[s] & FL_MARK_DST) {
      st = kvc__error(pool->ctx, KVC_ERR_MISUSE, __func__, "slots[%zu] = %d listed twice", i, s);
      break;
    }
    if (!(pool->flag[s] & FL_HELD)) {
      st = kvc__error(pool->ctx, KVC_ERR_MISUSE, __func__, "slots[%zu] = %d is not held (%s)", i, s,
                      pool->flag[s] & FL_RESERVED ? "reserved by the open alloc group" : "double free");
      break;
    }
    pool->flag[s] |= FL_MARK_DST;
  }
  for (size_t j = 0; j < i; j++) pool->flag[slots[j]] &= (uint8_t)~FL_MARK_DST;
  if (st != KVC_OK) return st;
  kvc__ring_push_back(&pool->free_slots, (const uint32_t *)slots, (int64_t)n, pool->flag, 0);
  return finish(pool, __func__, KVC_OK);
}

kvc_status kvc_mamba_pool_alloc_group_begin(kvc_mamba_pool *pool, size_t k, kvc_stream stream) {
  KVC_API_ENTRY();
  KVC__MAMBA_ENTRY(pool);
  KVC_RETURN_IF(pool->in_group, pool->ctx, KVC_ERR_MISUSE, "an alloc group is already open");
  if (k > 0 && k <= (size_t)pool->free_slots.count) {
    KVC_FORWARD(zero_front(pool, k, stream));
    kvc__ring_take(&pool->free_slots, (int64_t)k, (uint32_t *)pool->group, pool->flag, FL_RESERVED);
    pool->group_n = (int32_t)k;
  } else {
    pool->group_n = 0;
  }
  pool->group_pos = 0;
  pool->in_group = true;
  return finish(pool, __func__, KVC_OK);
}

kvc_status kvc_mamba_pool_alloc_group_end(kvc_mamba_pool *pool) {
  KVC_API_ENTRY();
  KVC__MAMBA_ENTRY(pool);
  KVC_RETURN_IF(!pool->in_group, pool->ctx, KVC_ERR_MISUSE, "no alloc group is open");
  kvc__ring_push_back(&pool->free_slots, (const uint32_t *)pool->group + pool->group_pos,
                      pool->group_n - pool->group_pos, pool->flag, 0);
  pool->in_group = false;
  pool->group_n = pool->group_pos = 0;
  return finish(pool, __func__, KVC_OK);
}

kvc_status kvc_mamba_pool_clear(kvc_mamba_pool *pool) {
  KVC_API_ENTRY();
  KVC__MAMBA_ENTRY(pool);
  reset_free(pool);
  return finish(pool, __func__, KVC_OK);
}

kvc_status kvc_mamba_pool_fork_from(kvc_mamba_pool *pool, int32_t src, int32_t *out_slot, kvc_stream stream) {
  KVC_API_ENTRY();
  KVC__MAMBA_ENTRY(pool);
  KVC_RETURN_IF(!out_slot, pool->ctx, KVC_ERR_INVALID_ARGUMENT, "out_slot is NULL");
  KVC_RETURN_IF(src < 0 || src > pool->size, pool->ctx, KVC_ERR_INVALID_ARGUMENT, "src %d outside [0, %d]", src,
                pool->size);
  const bool from_group = pool->in_group && pool->group_pos < pool->group_n;
  KVC_RETURN_IF(!from_group && pool->free_slots.count < 1, pool->ctx, KVC_ERR_OUT_OF_SLOTS, "no free slot");
  const int32_t dst = from_group ? pool->group[pool->group_pos] : (int32_t)kvc__ring_at(&pool->free_slots, 0);
  /* alloc(1) would zero dst and copy_from overwrites every row it zeroed: one launch.
   * src == dst (forking a free slot that is next in line) degenerates to the zeroing. */
  if (src == dst) {
    const kvc__mamba_op zero = {.mode = KVC_MAMBA_ZERO, .a = &dst, .n = 1, .vec = pool->vec};
    if (zero_on_alloc(pool) && !from_group) KVC_FORWARD(kvc__mamba_launch(pool, &zero, stream));
  } else {
    const kvc__mamba_op copy = {.mode = KVC_MAMBA_COPY, .a = &src, .b = &dst, .n = 1, .vec = pool->vec};
    KVC_FORWARD(kvc__mamba_launch(pool, &copy, stream));
  }
  if (from_group) pool->group_pos++;
  else kvc__ring_pop_front(&pool->free_slots, pool->flag, FL_HELD);
  pool->flag[dst] = FL_HELD;
  *out_slot = dst;
  return finish(pool, __func__, KVC_OK);
}

kvc_context *kvc__mamba_pool_context(const kvc_mamba_pool *p) { return kvc__mamba_live(p) ? p->ctx : NULL; }
