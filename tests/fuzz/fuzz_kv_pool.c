/*
 * fuzz_kv_pool.c — libFuzzer harness for the KV pools' bad-input surface on the host
 * backend: kvc_kv_pool_create with hostile configs, and on valid pools of every kind
 * (MHA bf16 / fp8, FP4, MLA, MLA FP4, NSA, NoOp) set_kv, gather_kv, set_mla_kv /
 * get_mla_kv, move, host_copy_bytes / copy_to_host / copy_from_host, describe / buffer /
 * export_dlpack / contiguous_infos and clear, with hostile layer ids, slot values
 * (negative, past the pool, INT64_MIN/MAX), index types (including invalid ones), counts
 * (0, huge with NULL arrays), dtypes, strides and NULL pointers.
 *
 * Oracle: no sanitizer report (every library read or write stays inside memory it owns
 * or the harness handed it), every status is a known code and never KVC_ERR_INTERNAL, a
 * pool's geometry (size_bytes, buffer count, descriptors) never changes, and what
 * copy_to_host returns for n slots fits in host_copy_bytes(n).
 *
 * The harness keeps its side of every contract, so a report is the library's: caller
 * arrays are sized for MAXN int64 slots (so a slot array read as either index type stays
 * inside), source / output buffers for MAXN rows of the widest row at the largest stride
 * used, and counts above MAXN go only with NULL arrays. Hostile create configs keep their
 * positive sizes small (a valid huge pool would really be allocated); zero, negative and
 * extreme values, bad kinds, dtypes, flags, versions and reserved fields go through
 * (layer counts near INT32_MAX are issue 13 #3's own regression test).
 *
 * Pools are made once per configuration and reset (kvc_kv_pool_clear) before every input;
 * the reset is checked to leave every buffer zero, as a fresh create does.
 */
#include "fuzz_common.h"
#include "kv/dlpack_abi.h"

static kvc_context *g_ctx;
static int64_t *g_dout;

#define MAXN 24
#define ROWB 4096 /* bytes of the widest row of any configuration below, as f32 */
#define MAXSTRIDE 2

static int64_t g_loc[MAXN], g_loc2[MAXN]; /* device = host memory on this backend */
static float g_src[MAXN * MAXSTRIDE * ROWB / 4], g_src2[MAXN * MAXSTRIDE * ROWB / 4];
static float g_out[MAXN * ROWB / 4], g_out2[MAXN * ROWB / 4];
static uint8_t *g_host; /* copy_to_host target */
static size_t g_host_cap;

typedef struct geo {
  kvc_kv_pool_kind kind;
  kvc_dtype dtype;
  int32_t ps, layers, start, heads, dim, vdim, lora, rope;
} geo;
static const geo geos[] = {
    {KVC_KV_MHA, KVC_DTYPE_BF16, 1, 2, 0, 2, 16, 0, 0, 0},
    {KVC_KV_MHA, KVC_DTYPE_FP8_E4M3, 4, 2, 3, 1, 32, 16, 0, 0},
    {KVC_KV_MHA, KVC_DTYPE_F32, 16, 1, 0, 2, 8, 0, 0, 0},
    {KVC_KV_MHA_FP4, KVC_DTYPE_BF16, 1, 2, 0, 2, 32, 0, 0, 0},
    {KVC_KV_MLA, KVC_DTYPE_BF16, 1, 2, 1, 0, 0, 0, 64, 16},
    {KVC_KV_MLA_FP4, KVC_DTYPE_BF16, 1, 1, 0, 0, 0, 0, 64, 32},
    {KVC_KV_NSA, KVC_DTYPE_FP8_E4M3, 64, 1, 0, 0, 0, 0, 512, 64},
    {KVC_KV_NSA, KVC_DTYPE_BF16, 64, 1, 0, 0, 0, 0, 64, 64},
    {KVC_KV_MHA_NOOP, KVC_DTYPE_BF16, 1, 2, 0, 2, 16, 0, 0, 0},
};
#define NGEO (sizeof geos / sizeof geos[0])
#define POOL_SIZE 96

typedef struct pool_rec {
  kvc_kv_pool *p;
  size_t k_bytes, v_bytes;
  int32_t nbuf;
} pool_rec;

static void geometry(kvc_kv_pool *p, pool_rec *r) {
  FZ_AUDIT(kvc_kv_pool_size_bytes(p, &r->k_bytes, &r->v_bytes));
  r->nbuf = kvc_kv_pool_num_buffers(p);
}

/* Every buffer zero (host backend: device memory is host memory). */
static void require_zero(const kvc_kv_pool *p) {
  for (int32_t i = 0; i < kvc_kv_pool_num_buffers(p); i++) {
    kvc_buffer_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    FZ_AUDIT(kvc_kv_pool_describe(p, i, &d));
    const uint8_t *b = d.data;
    for (int64_t k = 0; b && k < d.total_bytes; k++)
      if (b[k]) {
        fprintf(stderr, "fuzz_kv_pool: buffer %d byte %lld is %u after a reset\n", i, (long long)k, b[k]);
        abort();
      }
  }
}

static kvc_kv_pool_config config_of(const geo *g) {
  kvc_kv_pool_config c = KVC_KV_POOL_CONFIG_INIT;
  c.kind = g->kind, c.dtype = g->dtype, c.size = POOL_SIZE, c.page_size = g->ps;
  c.layer_num = g->layers, c.start_layer = g->start, c.head_num = g->heads, c.head_dim = g->dim;
  c.v_head_dim = g->vdim, c.kv_lora_rank = g->lora, c.qk_rope_head_dim = g->rope;
  if (g->kind == KVC_KV_NSA) c.size = 128;
  return c;
}

static pool_rec *pool_for(size_t i) {
  static pool_rec pools[NGEO];
  pool_rec *r = &pools[i];
  if (!r->p) {
    kvc_kv_pool_config c = config_of(&geos[i]);
    kvc_status st = kvc_kv_pool_create(g_ctx, &c, &r->p);
    if (st != KVC_OK) {
      fprintf(stderr, "fuzz_kv_pool: geometry %zu: %s\n", i, kvc_last_error(g_ctx));
      abort();
    }
    geometry(r->p, r);
    require_zero(r->p); /* what a fresh create leaves, and what every reset must */
  }
  FZ_AUDIT(kvc_kv_pool_clear(r->p, NULL));
  require_zero(r->p);
  return r;
}

/* A slot value: mostly inside the pool, sometimes anything. */
static int64_t slot(fz *f) { return fz_int(f, POOL_SIZE + 64); }

static kvc_index_type index_type(fz *f) {
  uint8_t b = fz_u8(f);
  return (b & 7) == 7 ? (kvc_index_type)(int)(int8_t)fz_u8(f) : (kvc_index_type)(b & 1);
}

/* Fills `n` slots into `loc` as `t` (an invalid type: int64, the wider layout), any
 * int64 value included (slots near INT64_MIN / INT64_MAX once overflowed slot x pitch in
 * the offload kernels: corpus seed offload-slot-overflow). */
static void fill_loc(fz *f, int64_t *loc, size_t n, kvc_index_type t) {
  int32_t *l32 = (int32_t *)loc;
  for (size_t i = 0; i < n; i++) {
    int64_t s = slot(f);
    if (t == KVC_INDEX_I32) l32[i] = (int32_t)s;
    else loc[i] = s;
  }
}

static kvc_dtype dtype(fz *f) {
  uint8_t b = fz_u8(f);
  return (b & 15) == 15 ? (kvc_dtype)(int)(int8_t)fz_u8(f) : (kvc_dtype)(b % 11);
}

/* n for a call: <= MAXN with real arrays, or anything with NULL ones. */
static size_t count(fz *f, int *with_arrays) {
  uint8_t b = fz_u8(f);
  *with_arrays = (b & 7) != 0;
  if (*with_arrays) return (size_t)(fz_u8(f) % (MAXN + 1));
  switch (fz_u8(f) & 3) {
  case 0: return SIZE_MAX;
  case 1: return (size_t)1 << 62;
  case 2: return (size_t)fz_u32(f);
  default: return 1;
  }
}

/* A row stride: 0 (contiguous) for several rows (the harness cannot know every dtype's
 * row length to size a strided buffer); for one row any value, the library must reject
 * it or ignore it (only row 0 is read). */
static int64_t stride(fz *f, size_t n) {
  uint8_t b = fz_u8(f) & 7;
  if (n > 1 || b < 4) return 0;
  return b == 4 ? -1 : b == 5 ? INT64_MAX : b == 6 ? INT64_MIN : (int64_t)fz_u32(f);
}

static void hostile_create(fz *f) {
  kvc_kv_pool_config c = config_of(&geos[fz_u8(f) % NGEO]);
  for (int k = fz_u8(f) % 4; k >= 0; k--) {
    switch (fz_u8(f) % 14) {
    case 0: c.size = fz_int(f, 64); break;
    case 1: c.page_size = (int32_t)fz_int(f, 16); break;
    case 2: c.layer_num = (int32_t)fz_int(f, 4); break;
    case 3: c.start_layer = (int32_t)fz_int(f, 4); break;
    case 4: c.head_num = (int32_t)fz_int(f, 4); break;
    case 5: c.head_dim = (int32_t)fz_int(f, 64); break;
    case 6: c.v_head_dim = (int32_t)fz_int(f, 64); break;
    case 7: c.kv_lora_rank = (int32_t)fz_int(f, 512); break;
    case 8: c.qk_rope_head_dim = (int32_t)fz_int(f, 64); break;
    case 9: c.kind = (kvc_kv_pool_kind)(int)(int8_t)fz_u8(f); break;
    case 10: c.dtype = dtype(f); break;
    case 11: c.flags = fz_u32(f); break;
    case 12: c.reserved_[fz_u8(f) & 7] = fz_u32(f); break;
    default:
      if (fz_u8(f) & 1) c.version = fz_u32(f);
      else c.struct_size = (size_t)fz_int(f, (int64_t)sizeof c);
      break;
    }
  }
  /* Keep a valid pool small (a few MB at most: it is really allocated and zero-filled);
   * zero, negative and the INT32_MAX dims still go through. */
  if (c.size > 256) c.size = 256;
  if (c.layer_num > 4) c.layer_num = 4;                 /* INT32_MAX: issue 13 #3's own test */
  if (c.start_layer > 1 << 20) c.start_layer = 1 << 20; /* past INT32_MAX: the same */
  if (c.head_num > 4 && c.head_num < INT32_MAX) c.head_num = 4;
  if (c.head_dim > 128 && c.head_dim < INT32_MAX) c.head_dim = 128;
  if (c.v_head_dim > 128 && c.v_head_dim < INT32_MAX) c.v_head_dim = 128;
  if (c.kv_lora_rank > 512 && c.kv_lora_rank < INT32_MAX) c.kv_lora_rank = 512;
  if (c.qk_rope_head_dim > 128 && c.qk_rope_head_dim < INT32_MAX) c.qk_rope_head_dim = 128;
  if (c.page_size > 64 && c.page_size < INT32_MAX) c.page_size = 64;
  if (c.head_num == INT32_MAX) c.size = 1;        /* rejected, or tiny */
  kvc_kv_pool *p = (kvc_kv_pool *)(uintptr_t)0x1; /* must stay untouched on failure */
  kvc_status st = kvc_kv_pool_create(g_ctx, &c, &p);
  FZ_STATUS(st);
  if (st != KVC_OK) {
    if (p != (kvc_kv_pool *)(uintptr_t)0x1) {
      fprintf(stderr, "fuzz_kv_pool: failed create wrote *out\n");
      abort();
    }
    return;
  }
  require_zero(p);
  size_t kb, vb, hb;
  FZ_AUDIT(kvc_kv_pool_size_bytes(p, &kb, &vb));
  FZ_STATUS(kvc_kv_pool_host_copy_bytes(p, 1, &hb));
  kvc_kv_pool_destroy(p);
}

/* The defects this harness found first (NULL + offset for an absent V side in the row
 * kernels' host twin, slot x pitch overflow in copy_to_host / copy_from_host, set_kv's
 * stride x element size, host_copy_bytes of 2^62 slots) are fixed; the inputs that
 * found them are seeds in tests/fuzz/corpus/fuzz_kv_pool (kv-rows-..., ...-overflow),
 * and nothing is kept out of the inputs for them any more (tests/fuzz/README.md). */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_host_context(&g_ctx, &g_dout, 64);
  if (!g_host) {
    g_host_cap = (size_t)MAXN * 64 * 1024;
    g_host = malloc(g_host_cap);
    if (!g_host) abort();
  }
  fz f = {data, size};
  const size_t gi = fz_u8(&f) % NGEO;
  pool_rec *r = pool_for(gi);
  kvc_kv_pool *p = r->p;
  const geo *g = &geos[gi];
  const int32_t layer0 = g->start;

  for (int step = 0; step < 64 && f.n; step++) {
    const uint8_t op = fz_u8(&f);
    kvc_status st = KVC_OK;
    int arrays;
    const int32_t layer = (fz_u8(&f) & 3) ? layer0 + fz_u8(&f) % (g->layers + 1) : (int32_t)fz_int(&f, layer0);
    switch (op % 12) {
    case 0: { /* set_kv */
      size_t n = count(&f, &arrays);
      kvc_index_type t = index_type(&f);
      if (arrays) fill_loc(&f, g_loc, n, t);
      const uint8_t m = fz_u8(&f);
      st = kvc_kv_pool_set_kv(p, layer, arrays ? g_loc : NULL, t, n, (arrays && !(m & 1)) ? g_src : NULL,
                              (arrays && !(m & 2)) ? g_src2 : NULL, dtype(&f), stride(&f, n), stride(&f, n), NULL,
                              (m & 16) ? 0.5f : 1.0f, NULL, 1.0f, NULL);
      break;
    }
    case 1: { /* gather_kv */
      size_t n = count(&f, &arrays);
      kvc_index_type t = index_type(&f);
      if (arrays) fill_loc(&f, g_loc, n, t);
      const uint8_t m = fz_u8(&f);
      st = kvc_kv_pool_gather_kv(p, layer, arrays ? g_loc : NULL, t, n, (arrays && !(m & 1)) ? g_out : NULL,
                                 (arrays && !(m & 2)) ? g_out2 : NULL, dtype(&f), NULL);
      break;
    }
    case 2: { /* set_mla_kv */
      size_t n = count(&f, &arrays);
      kvc_index_type t = index_type(&f);
      if (arrays) fill_loc(&f, g_loc, n, t);
      const uint8_t m = fz_u8(&f);
      st = kvc_kv_pool_set_mla_kv(p, layer, arrays ? g_loc : NULL, t, n, (arrays && !(m & 1)) ? g_src : NULL,
                                  (arrays && !(m & 2)) ? g_src2 : NULL, dtype(&f), stride(&f, n), stride(&f, n), NULL);
      break;
    }
    case 3: { /* get_mla_kv */
      size_t n = count(&f, &arrays);
      kvc_index_type t = index_type(&f);
      if (arrays) fill_loc(&f, g_loc, n, t);
      const uint8_t m = fz_u8(&f);
      st = kvc_kv_pool_get_mla_kv(p, layer, arrays ? g_loc : NULL, t, n, (arrays && !(m & 1)) ? g_out : NULL,
                                  (arrays && !(m & 2)) ? g_out2 : NULL, dtype(&f), NULL);
      break;
    }
    case 4: { /* move: overlapping, duplicate, out-of-range pairs */
      size_t n = count(&f, &arrays);
      kvc_index_type t = index_type(&f);
      if (arrays) fill_loc(&f, g_loc, n, t), fill_loc(&f, g_loc2, n, t);
      const uint8_t m = fz_u8(&f);
      st = kvc_kv_pool_move(p, (arrays && !(m & 1)) ? g_loc : NULL, (arrays && !(m & 2)) ? g_loc2 : NULL, t, n, NULL);
      break;
    }
    case 5: { /* host_copy_bytes, then a round trip through host memory of that size */
      size_t n = count(&f, &arrays), bytes = 0;
      st = kvc_kv_pool_host_copy_bytes(p, n, &bytes);
      FZ_STATUS(st);
      if (st != KVC_OK || !arrays || bytes >= g_host_cap) break;
      kvc_index_type t = index_type(&f);
      fill_loc(&f, g_loc, n, t);
      /* the library may write exactly `bytes`: a canary past them must survive */
      g_host[bytes] = 0xA5;
      st = kvc_kv_pool_copy_to_host(p, g_loc, t, n, g_host, NULL);
      if (g_host[bytes] != 0xA5) {
        fprintf(stderr, "fuzz_kv_pool: copy_to_host wrote past host_copy_bytes(%zu) = %zu\n", n, bytes);
        abort();
      }
      if (st == KVC_OK && (fz_u8(&f) & 1)) {
        FZ_STATUS(st);
        fill_loc(&f, g_loc, n, t);
        st = kvc_kv_pool_copy_from_host(p, g_loc, t, n, g_host, NULL);
      }
      break;
    }
    case 6: { /* copy_to_host / from_host with NULL or hostile arguments */
      size_t n = count(&f, &arrays);
      kvc_index_type t = index_type(&f);
      FZ_STATUS(kvc_kv_pool_copy_to_host(p, NULL, t, n, g_host, NULL));
      st = kvc_kv_pool_copy_from_host(p, arrays ? g_loc : NULL, t, n ? n : 1, NULL, NULL);
      break;
    }
    case 7: { /* descriptors and DLPack with hostile indices */
      kvc_buffer_desc d;
      memset(&d, 0, sizeof d);
      d.struct_size = (fz_u8(&f) & 7) ? sizeof d : (size_t)fz_u8(&f);
      FZ_STATUS(kvc_kv_pool_describe(p, (int32_t)fz_int(&f, r->nbuf), &d));
      const kvc_region_kind region = (kvc_region_kind)(int)(int8_t)(fz_u8(&f) % 13 - 1);
      FZ_STATUS(kvc_kv_pool_buffer(p, region, layer, &d));
      void *tensor = NULL;
      st = kvc_kv_pool_export_dlpack(p, region, layer, fz_u8(&f) & 1, &tensor);
      if (st == KVC_OK) {
        kvc_dl_managed_tensor *t = tensor;
        if (!t || !t->deleter) abort();
        t->deleter(t);
      }
      break;
    }
    case 8: { /* contiguous_infos with any capacity */
      static kvc_contiguous_info infos[64];
      size_t cap = fz_u8(&f) % 65, cnt = 0;
      st = kvc_kv_pool_contiguous_infos(p, (fz_u8(&f) & 3) ? infos : NULL, cap, &cnt);
      break;
    }
    case 9: st = kvc_kv_pool_clear(p, NULL); break;
    case 10: hostile_create(&f); break;
    default: { /* NULL pools and NULL outputs */
      size_t bytes;
      FZ_STATUS(kvc_kv_pool_set_kv(NULL, layer, g_loc, KVC_INDEX_I64, 1, g_src, g_src2, g->dtype, 0, 0, NULL, 1.0f,
                                   NULL, 1.0f, NULL));
      FZ_STATUS(kvc_kv_pool_move(NULL, g_loc, g_loc2, KVC_INDEX_I64, 1, NULL));
      FZ_STATUS(kvc_kv_pool_host_copy_bytes(NULL, 1, &bytes));
      FZ_STATUS(kvc_kv_pool_host_copy_bytes(p, 1, NULL));
      FZ_STATUS(kvc_kv_pool_size_bytes(NULL, &bytes, &bytes));
      FZ_STATUS(kvc_kv_pool_clear(NULL, NULL));
      st = kvc_kv_pool_contiguous_infos(p, NULL, 0, NULL);
      break;
    }
    }
    FZ_STATUS(st);
  }
  /* The geometry never changes, whatever the calls did. */
  pool_rec now = *r;
  geometry(p, &now);
  if (now.k_bytes != r->k_bytes || now.v_bytes != r->v_bytes || now.nbuf != r->nbuf) {
    fprintf(stderr, "fuzz_kv_pool: pool geometry changed\n");
    abort();
  }
  return 0;
}
