/*
 * layout_codec.c — a transfer layout as bytes for another process, and back.
 *
 * Format 1, every field little-endian whatever the host (so the string can cross
 * machines), 64 + 48 x n bytes:
 *
 *   header  0 magic u64 "KVCXLAYT" | 8 format u32 | 12 kind u32 | 16 dtype u32
 *          20 page_size i32 | 24 backend u32 | 28 device i32 | 32 n u32 | 36 zero u32
 *          40 origin u64 | 48 zero u64 | 56 checksum u64
 *   region  0 kind u32 | 4 layer_id i32 | 8 index i32 | 12 device i32 | 16 dtype u32
 *          20 zero u32 | 24 base u64 | 32 page_bytes u64 | 40 pages u64
 *
 * The checksum is FNV-1a over the whole string with the checksum field taken as zero:
 * it catches truncation and corruption in transit, not tampering.
 */
#include "transfer.h"

#include <string.h>

#define CODEC_MAGIC 0x5441594c5843564bull /* "KVCXLAYT" read as little-endian u64 */
#define CODEC_FORMAT 1u
#define HEADER_BYTES 64u
#define REGION_BYTES 48u
#define CHECKSUM_AT 56u

static void put_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static uint64_t get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}
/* int32 fields as two's complement: int -> unsigned is defined modulo 2^32; the way
 * back goes through int64 to avoid the implementation-defined narrowing. */
static uint32_t from_i32(int32_t v) { return (uint32_t)v; }
static int32_t to_i32(uint32_t v) { return v <= INT32_MAX ? (int32_t)v : (int32_t)((int64_t)v - 4294967296LL); }

static uint64_t checksum(const unsigned char *buf, size_t bytes) {
  static const unsigned char zero[8] = {0};
  uint64_t h = kvc__hash(KVC__HASH_SEED, buf, CHECKSUM_AT);
  h = kvc__hash(h, zero, sizeof zero);
  return kvc__hash(h, buf + HEADER_BYTES, bytes - HEADER_BYTES);
}

kvc_status kvc_transfer_layout_serialize(const kvc_transfer_layout *layout, void *buf, size_t cap, size_t *bytes) {
  KVC_FORWARD(kvc__layout_check(layout, NULL, __func__));
  kvc_context *ctx = layout->ctx;
  KVC_ARG_NOT_NULL(ctx, bytes);
  /* n <= 2^16 regions: the size cannot overflow. */
  const size_t need = HEADER_BYTES + (size_t)layout->num_regions * REGION_BYTES;
  *bytes = need;
  if (cap == 0 && !buf) return KVC_OK;
  KVC_RETURN_IF(!buf || cap < need, ctx, KVC_ERR_INVALID_ARGUMENT, "buffer of %zu bytes, %zu needed", cap, need);
  unsigned char *p = buf;
  memset(p, 0, need);
  put_u64(p + 0, CODEC_MAGIC);
  put_u32(p + 8, CODEC_FORMAT);
  put_u32(p + 12, layout->kind);
  put_u32(p + 16, (uint32_t)layout->dtype);
  put_u32(p + 20, from_i32(layout->page_size));
  put_u32(p + 24, (uint32_t)layout->side.backend);
  put_u32(p + 28, from_i32(layout->side.device));
  put_u32(p + 32, (uint32_t)layout->num_regions);
  put_u64(p + 40, layout->side.origin);
  for (int32_t i = 0; i < layout->num_regions; i++) {
    const kvc_transfer_region_info *r = &layout->regions[i];
    unsigned char *q = p + HEADER_BYTES + (size_t)i * REGION_BYTES;
    put_u32(q + 0, (uint32_t)r->region);
    put_u32(q + 4, from_i32(r->layer_id));
    put_u32(q + 8, from_i32(r->index));
    put_u32(q + 12, from_i32(r->device));
    put_u32(q + 16, (uint32_t)r->dtype);
    put_u64(q + 24, r->base);
    put_u64(q + 32, (uint64_t)r->page_bytes);
    put_u64(q + 40, (uint64_t)r->pages);
  }
  put_u64(p + CHECKSUM_AT, checksum(p, need));
  return KVC_OK;
}

kvc_status kvc_transfer_layout_deserialize(kvc_context *ctx, const void *buf, size_t bytes, kvc_transfer_layout **out) {
  KVC_RETURN_IF(!ctx, NULL, KVC_ERR_INVALID_ARGUMENT, "ctx is NULL");
  KVC_RETURN_IF(!buf || !out, ctx, KVC_ERR_INVALID_ARGUMENT, "buf or out is NULL");
  const unsigned char *p = buf;
  KVC_RETURN_IF(bytes < HEADER_BYTES || get_u64(p) != CODEC_MAGIC, ctx, KVC_ERR_INVALID_ARGUMENT,
                "%zu bytes are not a serialised transfer layout (magic)", bytes);
  KVC_RETURN_IF(get_u32(p + 8) != CODEC_FORMAT, ctx, KVC_ERR_VERSION, "layout format %u (this library reads %u)",
                get_u32(p + 8), CODEC_FORMAT);
  const uint32_t n = get_u32(p + 32);
  KVC_RETURN_IF(n < 1 || n > KVC__LAYOUT_MAX_REGIONS || bytes != HEADER_BYTES + (size_t)n * REGION_BYTES, ctx,
                KVC_ERR_INVALID_ARGUMENT, "%u regions in %zu bytes (truncated or corrupted)", n, bytes);
  KVC_RETURN_IF(get_u64(p + CHECKSUM_AT) != checksum(p, bytes), ctx, KVC_ERR_INVALID_ARGUMENT,
                "checksum mismatch (corrupted in transit)");
  const uint32_t backend = get_u32(p + 24);
  KVC_RETURN_IF(backend != KVC_BACKEND_HOST && backend != KVC_BACKEND_CUDA, ctx, KVC_ERR_INVALID_ARGUMENT,
                "backend %u unknown", backend);
  kvc_transfer_layout *l = kvc__layout_new(ctx, (int32_t)n);
  KVC_RETURN_IF(!l, ctx, KVC_ERR_HOST_OOM, "layout of %u regions", n);
  l->kind = get_u32(p + 12);
  l->dtype = (kvc_dtype)get_u32(p + 16);
  l->page_size = to_i32(get_u32(p + 20));
  l->side.backend = (kvc_backend)backend;
  l->side.device = to_i32(get_u32(p + 28));
  l->side.origin = get_u64(p + 40);
  kvc_status st = KVC_OK;
  for (uint32_t i = 0; i < n; i++) {
    const unsigned char *q = p + HEADER_BYTES + (size_t)i * REGION_BYTES;
    kvc_transfer_region_info *r = &l->regions[i];
    const uint64_t page_bytes = get_u64(q + 32), pages = get_u64(q + 40);
    KVC_FAIL_GOTO(page_bytes > INT64_MAX || pages > INT64_MAX, ctx, st, KVC_ERR_INVALID_ARGUMENT, fail,
                  "region %u: sizes beyond int64", i);
    r->region = (kvc_region_kind)get_u32(q + 0);
    r->layer_id = to_i32(get_u32(q + 4));
    r->index = to_i32(get_u32(q + 8));
    r->device = to_i32(get_u32(q + 12));
    r->dtype = (kvc_dtype)get_u32(q + 16);
    r->base = get_u64(q + 24);
    r->page_bytes = (int64_t)page_bytes;
    r->pages = (int64_t)pages;
  }
  KVC_CHECK_GOTO(kvc__layout_finish(l, __func__), st, fail);
  *out = l;
  return KVC_OK;
fail:
  kvc_transfer_layout_destroy(l);
  return st;
}
