/* test_mamba_pool.c — SGLang MambaPool: FIFO slot ids, checked frees, zero-on-alloc of
 * exactly the new rows, simultaneous copy_from, fork, alloc groups, descriptors, host
 * offload, layer translation; on CUDA every kernel is compared with the host twin. */
#include "harness.h"

static const int32_t kLayerIds[2] = {3, 7};

/* conv0 (6, 3) bf16 = 36-byte rows, conv1 (5, 2) bf16 = 20, temporal (2, 3, 4) f32 = 96 bytes. */
static kvc_mamba_pool *make_on(kvc_context *ctx, int32_t size, int32_t draft) {
  kvc_mamba_shape conv[2] = {{2, 0, {6, 3, 0}}, {2, 0, {5, 2, 0}}};
  kvc_mamba_pool_config c = KVC_MAMBA_POOL_CONFIG_INIT;
  c.size = size;
  c.num_layers = 2;
  c.num_conv = 2;
  c.layer_ids = kLayerIds;
  c.conv_shapes = conv;
  c.conv_dtype = KVC_DTYPE_BF16;
  c.temporal_dtype = KVC_DTYPE_F32;
  c.temporal_shape[0] = 2;
  c.temporal_shape[1] = 3;
  c.temporal_shape[2] = 4;
  c.spec_state_size = draft ? 3 : 0;
  c.num_draft_tokens = draft;
  kvc_mamba_pool *p = NULL;
  kvc_status st = kvc_mamba_pool_create(ctx, &c, &p);
  if (st != KVC_OK) fail_msg("create: %s", kvc_last_error(ctx));
  return p;
}
static kvc_mamba_pool *make_pool(int32_t size, int32_t draft) { return make_on(kvt_ctx, size, draft); }

/* --- Whole-pool images: every tensor, concatenated in describe_tensor order --------- */

typedef struct image {
  size_t bytes;
  unsigned char *data;
} image;

static kvc_mamba_tensor_desc tensor(const kvc_mamba_pool *p, int32_t i) {
  kvc_mamba_tensor_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  kvc_status st = kvc_mamba_pool_describe_tensor(p, i, &d);
  if (st != KVC_OK) fail_msg("describe_tensor %d", i);
  return d;
}

static image read_image(kvc_context *ctx, const kvc_mamba_pool *p) {
  image im = {0, NULL};
  for (int32_t i = 0; i < kvc_mamba_pool_num_tensors(p); i++) im.bytes += (size_t)tensor(p, i).total_bytes;
  im.data = malloc(im.bytes);
  size_t off = 0;
  for (int32_t i = 0; i < kvc_mamba_pool_num_tensors(p); i++) {
    kvc_mamba_tensor_desc d = tensor(p, i);
    kvt_d2h_on(ctx, im.data + off, d.data, (size_t)d.total_bytes);
    off += (size_t)d.total_bytes;
  }
  return im;
}

static void write_image(kvc_context *ctx, const kvc_mamba_pool *p, const image *im) {
  size_t off = 0;
  for (int32_t i = 0; i < kvc_mamba_pool_num_tensors(p); i++) {
    kvc_mamba_tensor_desc d = tensor(p, i);
    kvt_h2d_on(ctx, d.data, im->data + off, (size_t)d.total_bytes);
    off += (size_t)d.total_bytes;
  }
}

static image random_image(kvc_context *ctx, const kvc_mamba_pool *p, kvt_rng *r) {
  image im = read_image(ctx, p);
  for (size_t i = 0; i < im.bytes; i++) im.data[i] = (unsigned char)(kvt_next(r) | 1u); /* never 0 */
  write_image(ctx, p, &im);
  return im;
}

/* Pointer to row `slot` of state tensor `t`, layer `l` inside an image. */
static unsigned char *row_of(const kvc_mamba_pool *p, const image *im, int32_t t, int32_t l, int32_t slot) {
  size_t off = 0;
  for (int32_t i = 0; i < t; i++) off += (size_t)tensor(p, i).total_bytes;
  kvc_mamba_tensor_desc d = tensor(p, t);
  return im->data + off + (size_t)l * (size_t)d.bytes_per_layer + (size_t)slot * (size_t)d.bytes_per_slot;
}

static void assert_images_equal(const image *a, const image *b, const char *what) {
  assert_int_equal(a->bytes, b->bytes);
  for (size_t i = 0; i < a->bytes; i++)
    if (a->data[i] != b->data[i]) fail_msg("%s: images differ at byte %zu (%u vs %u)", what, i, a->data[i], b->data[i]);
}

/* Expected image after zeroing rows `slots` of every state tensor and layer. */
static void zero_rows(const kvc_mamba_pool *p, image *im, const int32_t *slots, size_t n) {
  int32_t nstate = kvc_mamba_pool_num_buffers(p) / kvc_mamba_pool_num_layers(p);
  for (int32_t t = 0; t < nstate; t++)
    for (int32_t l = 0; l < kvc_mamba_pool_num_layers(p); l++)
      for (size_t i = 0; i < n; i++) memset(row_of(p, im, t, l, slots[i]), 0, (size_t)tensor(p, t).bytes_per_slot);
}

/* Expected image after a simultaneous copy dst[i] = src[i]. */
static void copy_rows(const kvc_mamba_pool *p, image *im, const int32_t *src, const int32_t *dst, size_t n) {
  image old = {im->bytes, malloc(im->bytes)};
  memcpy(old.data, im->data, im->bytes);
  int32_t nstate = kvc_mamba_pool_num_buffers(p) / kvc_mamba_pool_num_layers(p);
  for (int32_t t = 0; t < nstate; t++)
    for (int32_t l = 0; l < kvc_mamba_pool_num_layers(p); l++)
      for (size_t i = 0; i < n; i++)
        memcpy(row_of(p, im, t, l, dst[i]), row_of(p, &old, t, l, src[i]), (size_t)tensor(p, t).bytes_per_slot);
  free(old.data);
}

/* --- Tests ------------------------------------------------------------------------- */

static void test_create_rejects_bad_config(void **state) {
  (void)state;
  kvc_mamba_shape conv = {2, 0, {4, 3, 0}};
  kvc_mamba_pool_config c = KVC_MAMBA_POOL_CONFIG_INIT;
  c.size = 4;
  c.num_layers = 1;
  c.num_conv = 1;
  c.conv_shapes = &conv;
  c.temporal_shape[0] = c.temporal_shape[1] = c.temporal_shape[2] = 2;
  kvc_mamba_pool *p = NULL;
  KVT_OK(kvc_mamba_pool_create(kvt_ctx, &c, &p));
  kvc_mamba_pool_destroy(p);
  p = NULL;
  c.size = 0;
  KVT_STATUS(kvc_mamba_pool_create(kvt_ctx, &c, &p), KVC_ERR_INVALID_ARGUMENT);
  c.size = 4;
  c.temporal_shape[1] = 0;
  KVT_STATUS(kvc_mamba_pool_create(kvt_ctx, &c, &p), KVC_ERR_INVALID_ARGUMENT);
  c.temporal_shape[1] = 2;
  c.num_conv = KVC_MAMBA_MAX_CONV + 1;
  KVT_STATUS(kvc_mamba_pool_create(kvt_ctx, &c, &p), KVC_ERR_INVALID_ARGUMENT);
  c.num_conv = 1;
  int32_t dup[2] = {5, 5};
  c.num_layers = 2;
  c.layer_ids = dup;
  KVT_STATUS(kvc_mamba_pool_create(kvt_ctx, &c, &p), KVC_ERR_INVALID_ARGUMENT);
  c.layer_ids = NULL;
  conv.ndim = 1;
  c.num_draft_tokens = 2;
  KVT_STATUS(kvc_mamba_pool_create(kvt_ctx, &c, &p), KVC_ERR_INVALID_ARGUMENT);
  c.num_draft_tokens = 0;
  c.struct_size = 8;
  KVT_STATUS(kvc_mamba_pool_create(kvt_ctx, &c, &p), KVC_ERR_VERSION);
  assert_null(p);
  kvc_mamba_pool_destroy(NULL);
}

static void test_fifo_order_matches_sglang(void **state) {
  (void)state;
  kvc_mamba_pool *p = make_pool(4, 0);
  int32_t a[3], b[3], c1;
  KVT_OK(kvc_mamba_pool_alloc(p, 3, a, NULL));
  assert_int_equal(a[0], 1);
  assert_int_equal(a[1], 2);
  assert_int_equal(a[2], 3);
  int32_t fr[2] = {2, 1};
  KVT_OK(kvc_mamba_pool_free(p, fr, 2)); /* free = [4, 2, 1] */
  KVT_OK(kvc_mamba_pool_alloc(p, 3, b, NULL));
  assert_int_equal(b[0], 4);
  assert_int_equal(b[1], 2);
  assert_int_equal(b[2], 1);
  assert_int_equal(kvc_mamba_pool_available(p), 0);
  KVT_STATUS(kvc_mamba_pool_alloc(p, 1, &c1, NULL), KVC_ERR_OUT_OF_SLOTS);
  KVT_OK(kvc_mamba_pool_alloc(p, 0, NULL, NULL));
  KVT_OK(kvc_mamba_pool_free(p, NULL, 0));
  KVT_OK(kvc_mamba_pool_clear(p));
  assert_int_equal(kvc_mamba_pool_available(p), 4);
  KVT_OK(kvc_mamba_pool_alloc(p, 1, &c1, NULL));
  assert_int_equal(c1, 1);
  KVT_OK(kvc_mamba_pool_check(p));
  kvc_mamba_pool_destroy(p);
}

static void test_misuse_leaves_pool_unchanged(void **state) {
  (void)state;
  kvc_mamba_pool *p = make_pool(5, 0);
  int32_t s[3];
  KVT_OK(kvc_mamba_pool_alloc(p, 3, s, NULL)); /* 1 2 3 held; free [4 5] */
  const int32_t bad[][2] = {{0, 1}, {1, 6}, {1, 4}, {2, 2}, {-1, 1}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    KVT_STATUS(kvc_mamba_pool_free(p, bad[i], 2), KVC_ERR_MISUSE);
    assert_int_equal(kvc_mamba_pool_available(p), 2);
    for (int32_t k = 1; k <= 3; k++) assert_true(kvc_mamba_pool_is_held(p, k));
    KVT_OK(kvc_mamba_pool_check(p));
  }
  int32_t two[2];
  KVT_STATUS(kvc_mamba_pool_alloc(p, 3, two, NULL), KVC_ERR_OUT_OF_SLOTS);
  KVT_OK(kvc_mamba_pool_alloc(p, 2, two, NULL));
  assert_int_equal(two[0], 4);
  assert_int_equal(two[1], 5);
  int32_t f1 = 1;
  KVT_OK(kvc_mamba_pool_free(p, &f1, 1));
  KVT_STATUS(kvc_mamba_pool_free(p, &f1, 1), KVC_ERR_MISUSE); /* double free */
  KVT_OK(kvc_mamba_pool_check(p));
  kvc_mamba_pool_destroy(p);
}

static void test_zero_on_alloc_zeroes_exactly_new_rows(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed()};
  kvc_mamba_pool *p = make_pool(5, 2);
  image zero = read_image(kvt_ctx, p);
  for (size_t i = 0; i < zero.bytes; i++) assert_int_equal(zero.data[i], 0); /* zero at create */
  free(zero.data);
  int32_t all[5];
  KVT_OK(kvc_mamba_pool_alloc(p, 5, all, NULL));
  image want = random_image(kvt_ctx, p, &r);
  int32_t fr[2] = {4, 2};
  KVT_OK(kvc_mamba_pool_free(p, fr, 2));
  int32_t got[2];
  KVT_OK(kvc_mamba_pool_alloc(p, 2, got, NULL));
  assert_int_equal(got[0], 4);
  assert_int_equal(got[1], 2);
  zero_rows(p, &want, got, 2); /* state tensors only: speculative rows keep their bytes */
  image now = read_image(kvt_ctx, p);
  assert_images_equal(&now, &want, "zero on alloc");
  /* clear_slots: any ids in [0, size], one launch. */
  int32_t cs[3] = {0, 5, 5};
  KVT_OK(kvc_mamba_pool_clear_slots(p, cs, 3, NULL));
  zero_rows(p, &want, cs, 3);
  free(now.data);
  now = read_image(kvt_ctx, p);
  assert_images_equal(&now, &want, "clear_slots");
  int32_t oor = 6;
  KVT_STATUS(kvc_mamba_pool_clear_slots(p, &oor, 1, NULL), KVC_ERR_INVALID_ARGUMENT);
  free(now.data);
  free(want.data);
  kvc_mamba_pool_destroy(p);
}

/* Overlapping copies at the sizes that change the staged kernel's tiling (the tile is the
 * widest power of two with n tiles in 64 KB): n = 2048 (the most pairs: 32-byte tiles),
 * 1000 (64), 64 and 5 (rows wider than a tile: several tiles per row), on 36/96-byte rows
 * (4-byte accesses) and on 8 KB / 4 KB rows (16-byte accesses). */
static void test_copy_from_overlapping_sizes(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed() + 9};
  kvc_mamba_shape wide[1] = {{2, 0, {64, 64, 0}}};
  for (int big = 0; big < 2; big++) {
    kvc_mamba_pool *p = make_on(kvt_ctx, 2100, 0);
    if (big) {
      kvc_mamba_pool_destroy(p);
      kvc_mamba_pool_config c = KVC_MAMBA_POOL_CONFIG_INIT;
      c.size = 2100;
      c.num_layers = 2;
      c.num_conv = 1;
      c.layer_ids = kLayerIds;
      c.conv_shapes = wide;
      c.conv_dtype = KVC_DTYPE_BF16;
      c.temporal_dtype = KVC_DTYPE_F32;
      c.temporal_shape[0] = 4, c.temporal_shape[1] = 16, c.temporal_shape[2] = 16;
      p = NULL;
      KVT_OK(kvc_mamba_pool_create(kvt_ctx, &c, &p));
    }
    image want = random_image(kvt_ctx, p, &r);
    static int32_t src[2048], dst[2048];
    const size_t sizes[4] = {2048, 1000, 64, 5};
    for (int k = 0; k < 4; k++) {
      const size_t n = sizes[k];
      for (size_t i = 0; i < n; i++) { /* a cycle over 1..n shifted by 7: every target a source */
        src[i] = (int32_t)(1 + i);
        dst[i] = (int32_t)(1 + (i + 7) % n);
      }
      KVT_OK(kvc_mamba_pool_copy_from(p, src, dst, n, NULL));
      copy_rows(p, &want, src, dst, n);
      image now = read_image(kvt_ctx, p);
      assert_images_equal(&now, &want, "overlapping copy (sizes)");
      free(now.data);
    }
    free(want.data);
    kvc_mamba_pool_destroy(p);
  }
}

static void test_copy_from_overlapping_is_simultaneous(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed() + 1};
  kvc_mamba_pool *p = make_pool(6, 1);
  image want = random_image(kvt_ctx, p, &r);
  /* swap 1<->2, rotate 3->4->5->3, identity 6->6 */
  int32_t src[6] = {1, 2, 3, 4, 5, 6}, dst[6] = {2, 1, 4, 5, 3, 6};
  KVT_OK(kvc_mamba_pool_copy_from(p, src, dst, 6, NULL));
  copy_rows(p, &want, src, dst, 6);
  image now = read_image(kvt_ctx, p);
  assert_images_equal(&now, &want, "overlapping copy");
  free(now.data);
  /* disjoint sets, duplicate sources allowed */
  int32_t s2[2] = {1, 1}, d2[2] = {5, 6};
  KVT_OK(kvc_mamba_pool_copy_from(p, s2, d2, 2, NULL));
  copy_rows(p, &want, s2, d2, 2);
  now = read_image(kvt_ctx, p);
  assert_images_equal(&now, &want, "disjoint copy");
  int32_t d3[2] = {4, 4};
  KVT_STATUS(kvc_mamba_pool_copy_from(p, s2, d3, 2, NULL), KVC_ERR_INVALID_ARGUMENT);
  int32_t d4[2] = {4, 7};
  KVT_STATUS(kvc_mamba_pool_copy_from(p, s2, d4, 2, NULL), KVC_ERR_INVALID_ARGUMENT);
  KVT_OK(kvc_mamba_pool_check(p));
  free(now.data);
  free(want.data);
  kvc_mamba_pool_destroy(p);
}

static void test_large_copy_uses_staged_payload(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed() + 2};
  const int32_t n = 2048;
  kvc_mamba_pool *p = make_pool(n + 1, 0);
  image want = random_image(kvt_ctx, p, &r);
  int32_t *src = malloc(sizeof(int32_t) * (n + 1)), *dst = malloc(sizeof(int32_t) * (n + 1));
  for (int32_t i = 0; i < n; i++) {
    src[i] = i + 1;
    dst[i] = i + 2; /* shift up by one: every source but the first is also a target */
  }
  KVT_OK(kvc_mamba_pool_copy_from(p, src, dst, (size_t)n, NULL));
  copy_rows(p, &want, src, dst, (size_t)n);
  image now = read_image(kvt_ctx, p);
  assert_images_equal(&now, &want, "2048-pair shift");
  src[n] = n + 1;
  dst[n] = 0;
  KVT_STATUS(kvc_mamba_pool_copy_from(p, src, dst, (size_t)n + 1, NULL), KVC_ERR_UNSUPPORTED);
  /* 9000 ids (> inline capacity): staged upload. */
  int32_t *ids = malloc(sizeof(int32_t) * 9000);
  for (int32_t i = 0; i < 9000; i++) ids[i] = (int32_t)kvt_range(&r, 0, n + 1);
  KVT_OK(kvc_mamba_pool_clear_slots(p, ids, 9000, NULL));
  zero_rows(p, &want, ids, 9000);
  free(now.data);
  now = read_image(kvt_ctx, p);
  assert_images_equal(&now, &want, "9000-id clear");
  free(ids);
  free(src);
  free(dst);
  free(now.data);
  free(want.data);
  kvc_mamba_pool_destroy(p);
}

static void test_fork_from(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed() + 3};
  kvc_mamba_pool *p = make_pool(3, 0);
  int32_t a[2];
  KVT_OK(kvc_mamba_pool_alloc(p, 2, a, NULL));
  image want = random_image(kvt_ctx, p, &r);
  int32_t f = 0;
  KVT_OK(kvc_mamba_pool_fork_from(p, 2, &f, NULL));
  assert_int_equal(f, 3);
  assert_true(kvc_mamba_pool_is_held(p, 3));
  copy_rows(p, &want, &a[1], &f, 1);
  image now = read_image(kvt_ctx, p);
  assert_images_equal(&now, &want, "fork");
  int32_t g = -5;
  KVT_STATUS(kvc_mamba_pool_fork_from(p, 1, &g, NULL), KVC_ERR_OUT_OF_SLOTS);
  assert_int_equal(g, -5);
  KVT_STATUS(kvc_mamba_pool_fork_from(p, 4, &g, NULL), KVC_ERR_INVALID_ARGUMENT);
  KVT_OK(kvc_mamba_pool_check(p));
  free(now.data);
  free(want.data);
  kvc_mamba_pool_destroy(p);
}

static void test_alloc_groups(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed() + 4};
  kvc_mamba_pool *p = make_pool(6, 0);
  image want = random_image(kvt_ctx, p, &r);
  KVT_STATUS(kvc_mamba_pool_alloc_group_end(p), KVC_ERR_MISUSE);
  KVT_OK(kvc_mamba_pool_alloc_group_begin(p, 3, NULL)); /* reserves 1 2 3, zeroed */
  KVT_STATUS(kvc_mamba_pool_alloc_group_begin(p, 1, NULL), KVC_ERR_MISUSE);
  int32_t z[3] = {1, 2, 3};
  zero_rows(p, &want, z, 3);
  image now = read_image(kvt_ctx, p);
  assert_images_equal(&now, &want, "group zeroing");
  assert_int_equal(kvc_mamba_pool_available(p), 3);
  int32_t s, two[2];
  KVT_OK(kvc_mamba_pool_alloc(p, 1, &s, NULL));
  assert_int_equal(s, 1);
  int32_t rsv = 2;
  KVT_STATUS(kvc_mamba_pool_free(p, &rsv, 1), KVC_ERR_MISUSE); /* reserved, not held */
  KVT_OK(kvc_mamba_pool_alloc(p, 2, two, NULL));               /* n > 1 bypasses the reservation */
  assert_int_equal(two[0], 4);
  assert_int_equal(two[1], 5);
  KVT_OK(kvc_mamba_pool_alloc(p, 1, &s, NULL));
  assert_int_equal(s, 2);
  KVT_OK(kvc_mamba_pool_check(p));
  KVT_OK(kvc_mamba_pool_alloc_group_end(p)); /* 3 back at the end: free [6, 3] */
  KVT_OK(kvc_mamba_pool_alloc(p, 2, two, NULL));
  assert_int_equal(two[0], 6);
  assert_int_equal(two[1], 3);
  /* A group larger than what is free reserves nothing. */
  int32_t f = 6;
  KVT_OK(kvc_mamba_pool_free(p, &f, 1));
  KVT_OK(kvc_mamba_pool_alloc_group_begin(p, 2, NULL));
  assert_int_equal(kvc_mamba_pool_available(p), 1);
  KVT_OK(kvc_mamba_pool_alloc(p, 1, &s, NULL));
  assert_int_equal(s, 6);
  KVT_OK(kvc_mamba_pool_alloc_group_end(p));
  KVT_OK(kvc_mamba_pool_check(p));
  free(now.data);
  free(want.data);
  kvc_mamba_pool_destroy(p);
}

static void test_descriptors_and_layers(void **state) {
  (void)state;
  kvc_mamba_pool *p = make_pool(4, 2);
  assert_int_equal(kvc_mamba_pool_num_tensors(p), 6); /* conv0 conv1 temporal issm iconv0 iconv1 */
  assert_int_equal(kvc_mamba_pool_num_buffers(p), 6); /* 3 state tensors x 2 layers */
  kvc_mamba_tensor_desc t = tensor(p, 0);
  assert_int_equal(t.region, KVC_REGION_MAMBA_CONV);
  assert_int_equal(t.ndim, 4);
  assert_int_equal(t.shape[0], 2);
  assert_int_equal(t.shape[1], 5);
  assert_int_equal(t.shape[2], 6);
  assert_int_equal(t.shape[3], 3);
  assert_int_equal(t.strides[1], 18);
  assert_int_equal(t.bytes_per_slot, 36);
  assert_int_equal(t.bytes_per_layer, 180);
  assert_int_equal(t.dtype, KVC_DTYPE_BF16);
  t = tensor(p, 2);
  assert_int_equal(t.region, KVC_REGION_MAMBA_TEMPORAL);
  assert_int_equal(t.ndim, 5);
  assert_int_equal(t.bytes_per_slot, 96);
  assert_int_equal(t.sliceable_dim, 2);
  t = tensor(p, 3);
  assert_int_equal(t.region, KVC_REGION_MAMBA_INTERMEDIATE_SSM);
  assert_int_equal(t.ndim, 6);
  assert_int_equal(t.shape[1], 4); /* spec_state_size + 1 */
  assert_int_equal(t.shape[2], 2); /* D */
  assert_int_equal(t.bytes_per_slot, 2 * 96);
  t = tensor(p, 5);
  assert_int_equal(t.region, KVC_REGION_MAMBA_INTERMEDIATE_CONV);
  assert_int_equal(t.index, 1);
  assert_int_equal(t.ndim, 5);
  assert_int_equal(t.shape[3], 5);
  assert_int_equal(t.shape[4], 2);
  kvc_buffer_desc b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  KVT_OK(kvc_mamba_pool_buffer(p, KVC_REGION_MAMBA_TEMPORAL, 0, 7, &b));
  assert_int_equal(b.layer_id, 7);
  assert_int_equal(b.ndim, 4);
  assert_int_equal(b.shape[0], 5);
  assert_int_equal(b.shape[3], 4);
  assert_int_equal(b.bytes_per_token, 96);
  assert_int_equal(b.total_bytes, 5 * 96);
  kvc_mamba_tensor_desc tt = tensor(p, 2);
  assert_ptr_equal(b.data, (unsigned char *)tt.data + tt.bytes_per_layer);
  KVT_STATUS(kvc_mamba_pool_buffer(p, KVC_REGION_MAMBA_TEMPORAL, 0, 4, &b), KVC_ERR_INVALID_ARGUMENT);
  KVT_STATUS(kvc_mamba_pool_buffer(p, KVC_REGION_K, 0, 3, &b), KVC_ERR_INVALID_ARGUMENT);
  KVT_OK(kvc_mamba_pool_describe(p, 1, &b));
  assert_int_equal(b.region, KVC_REGION_MAMBA_CONV);
  assert_int_equal(b.layer_id, 7);
  kvc_contiguous_info info[8];
  size_t count = 0;
  KVT_OK(kvc_mamba_pool_contiguous_infos(p, info, 8, &count));
  assert_int_equal(count, 6);
  assert_int_equal(info[2].bytes, 5 * 20); /* conv1 layer 0: 5 rows x 10 bf16 */
  assert_int_equal(info[2].bytes_per_page, 20);
  int64_t dims[8];
  KVT_OK(kvc_mamba_pool_state_dims(p, dims, 8, &count));
  assert_int_equal(count, 6); /* speculative tensors excluded (quirk 10) */
  assert_int_equal(dims[0], 6);
  assert_int_equal(dims[2], 5);
  assert_int_equal(dims[5], 2);
  size_t sb = 0, xb = 0;
  KVT_OK(kvc_mamba_pool_memory_bytes(p, &sb, &xb));
  assert_int_equal(sb, 2 * 5 * (36 + 20 + 96));
  int32_t idx = -1;
  KVT_OK(kvc_mamba_pool_layer_index(p, 7, &idx));
  assert_int_equal(idx, 1);
  KVT_STATUS(kvc_mamba_pool_layer_index(p, 5, &idx), KVC_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvc_mamba_pool_layer_id(p, 0), 3);
  assert_int_equal(kvc_mamba_pool_layer_id(p, 2), -1);
  kvc_mamba_pool_destroy(p);
}

static void test_offload_round_trip(void **state) {
  (void)state;
  kvt_rng r = {kvt_seed() + 5};
  kvc_mamba_pool *p = make_pool(5, 0);
  image want = random_image(kvt_ctx, p, &r);
  int32_t slots[3] = {4, 1, 4};
  size_t bytes = 0;
  KVT_OK(kvc_mamba_pool_host_copy_bytes(p, 3, &bytes));
  assert_int_equal(bytes, 3 * 2 * (36 + 20 + 96));
  unsigned char *host = NULL;
  KVT_OK(kvc_host_pinned_alloc(kvt_ctx, bytes, (void **)&host));
  memset(host, 0xA5, bytes);
  KVT_OK(kvc_mamba_pool_copy_to_host(p, slots, 3, host, NULL));
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  size_t off = 0;
  for (int32_t t = 0; t < 3; t++)
    for (int32_t l = 0; l < 2; l++)
      for (int i = 0; i < 3; i++) {
        size_t rb = (size_t)tensor(p, t).bytes_per_slot;
        assert_memory_equal(host + off, row_of(p, &want, t, l, slots[i]), rb);
        off += rb;
      }
  assert_int_equal(off, bytes);
  int32_t z[2] = {4, 1};
  KVT_OK(kvc_mamba_pool_clear_slots(p, z, 2, NULL));
  KVT_OK(kvc_mamba_pool_copy_from_host(p, slots, 3, host, NULL));
  image now = read_image(kvt_ctx, p);
  assert_images_equal(&now, &want, "offload round trip");
  KVT_STATUS(kvc_mamba_pool_copy_to_host(p, slots, 3, NULL, NULL), KVC_ERR_INVALID_ARGUMENT);
  kvc_host_pinned_free(kvt_ctx, host);
  free(now.data);
  free(want.data);
  kvc_mamba_pool_destroy(p);
}

/* CUDA only: a random op sequence on both backends from the same random image. */
static void test_cuda_matches_host_twin(void **state) {
  (void)state;
  kvt_require_cuda();
  kvt_rng r = {kvt_seed() + 6};
  kvc_mamba_pool *d = make_on(kvt_ctx, 300, 2), *h = make_on(kvt_host, 300, 2);
  image im = random_image(kvt_ctx, d, &r);
  write_image(kvt_host, h, &im);
  for (int step = 0; step < 40; step++) {
    int op = (int)kvt_range(&r, 0, 3);
    int32_t a[64], b[64], sd, sh;
    size_t n = (size_t)kvt_range(&r, 1, 64);
    if (op == 0 && kvc_mamba_pool_available(h) >= (int32_t)n) {
      KVT_OK(kvc_mamba_pool_alloc(d, n, a, NULL));
      KVT_OK(kvc_mamba_pool_alloc(h, n, b, NULL));
      assert_memory_equal(a, b, n * 4);
    } else if (op == 1) { /* overlapping or not, distinct targets */
      for (size_t i = 0; i < n; i++) {
        a[i] = (int32_t)kvt_range(&r, 0, 300);
        b[i] = (int32_t)(1 + (step * 37 + (int)i) % 300); /* distinct for i < 300 */
      }
      KVT_OK(kvc_mamba_pool_copy_from(d, a, b, n, NULL));
      KVT_OK(kvc_mamba_pool_copy_from(h, a, b, n, NULL));
    } else if (op == 2 && kvc_mamba_pool_available(h) > 0) {
      int32_t src = (int32_t)kvt_range(&r, 1, 300);
      KVT_OK(kvc_mamba_pool_fork_from(d, src, &sd, NULL));
      KVT_OK(kvc_mamba_pool_fork_from(h, src, &sh, NULL));
      assert_int_equal(sd, sh);
    } else {
      for (size_t i = 0; i < n; i++) a[i] = (int32_t)kvt_range(&r, 0, 300);
      KVT_OK(kvc_mamba_pool_clear_slots(d, a, n, NULL));
      KVT_OK(kvc_mamba_pool_clear_slots(h, a, n, NULL));
    }
  }
  image got = read_image(kvt_ctx, d), ref = read_image(kvt_host, h);
  assert_images_equal(&got, &ref, "cuda vs host twin");
  /* Offload into poisoned pinned memory on both. */
  int32_t slots[7] = {5, 9, 300, 0, 17, 9, 44};
  size_t bytes = 0;
  KVT_OK(kvc_mamba_pool_host_copy_bytes(d, 7, &bytes));
  unsigned char *hd = NULL, *hh = malloc(bytes);
  KVT_OK(kvc_host_pinned_alloc(kvt_ctx, bytes, (void **)&hd));
  memset(hd, 0xA5, bytes);
  memset(hh, 0x5A, bytes);
  KVT_OK(kvc_mamba_pool_copy_to_host(d, slots, 7, hd, NULL));
  KVT_OK(kvc_mamba_pool_copy_to_host(h, slots, 7, hh, NULL));
  KVT_OK(kvc_stream_synchronize(kvt_ctx, NULL));
  assert_memory_equal(hd, hh, bytes);
  kvc_host_pinned_free(kvt_ctx, hd);
  free(hh);
  free(got.data);
  free(ref.data);
  free(im.data);
  kvc_mamba_pool_destroy(d);
  kvc_mamba_pool_destroy(h);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_create_rejects_bad_config),
    cmocka_unit_test(test_fifo_order_matches_sglang),
    cmocka_unit_test(test_misuse_leaves_pool_unchanged),
    cmocka_unit_test(test_zero_on_alloc_zeroes_exactly_new_rows),
    cmocka_unit_test(test_copy_from_overlapping_is_simultaneous),
    cmocka_unit_test(test_copy_from_overlapping_sizes),
    cmocka_unit_test(test_large_copy_uses_staged_payload),
    cmocka_unit_test(test_fork_from),
    cmocka_unit_test(test_alloc_groups),
    cmocka_unit_test(test_descriptors_and_layers),
    cmocka_unit_test(test_offload_round_trip),
    cmocka_unit_test(test_cuda_matches_host_twin),
};

KVT_MAIN("mamba_pool", tests)
