/*
 * mamba.h — the Mamba pool's layout, shared by its three sources: slot bookkeeping and
 * create (mamba_pool.c), the state launches (mamba_copy.c), descriptors (mamba_desc.c).
 * Nothing outside src/state/mamba_*.c includes it.
 */
#ifndef KVC_MAMBA_H
#define KVC_MAMBA_H

#include "../alloc/alloc.h"
#include "../ops/ops.h"

#define KVC__MAMBA_MAGIC 0x6b76632d6d616d21ull /* "kvc-mam!" */
#define KVC__MAMBA_MAX_TENSORS (2 * KVC_MAMBA_MAX_CONV + 2)
#define KVC__MAMBA_STAGED_MAX_PAIRS (KVC_MAMBA_STAGE_BYTES / 16)

/* flag[slot] bits */
#define FL_HELD 0x1u
#define FL_RESERVED 0x2u /* popped by an open alloc group, not handed out yet */
#define FL_MARK_DST 0x4u /* transient, within one call */
#define FL_MARK_SRC 0x8u

typedef struct mamba_tensor {
  kvc_region_kind region;
  int32_t index; /* conv list position */
  kvc_dtype dtype;
  int32_t ndim; /* with the L and row dims */
  int64_t shape[6];
  int64_t rows;        /* size + 1, or spec + 1 */
  int64_t row_bytes;   /* one slot of one layer */
  int64_t layer_pitch; /* rows * row_bytes */
  unsigned char *base;
} mamba_tensor;

struct kvc_mamba_pool {
  uint64_t magic;
  kvc_context *ctx;
  int32_t size, L, num_conv, nstate, ntensors;
  uint32_t flags;
  int32_t *layer_ids;
  mamba_tensor t[KVC__MAMBA_MAX_TENSORS];
  void *mem;
  size_t mem_bytes;
  int vec;              /* widest access dividing every state row and pitch */
  kvc__ring free_slots; /* FIFO: alloc at the front, free at the back (id_ring.h) */
  uint8_t *flag;        /* size + 1 */
  /* alloc group */
  bool in_group;
  int32_t *group;
  int32_t group_n, group_pos;
  int32_t *tmp; /* 2 * (size + 1): filtered copy pairs */
  unsigned char *scratch;
  const kvc__kfunc *kc[2][5][KVC__PLAN_INLINE_VARIANTS]; /* [kernel][log2 vec][variant] */
};

#define KVC__MAMBA_ENTRY(pool) KVC_CHECK_HANDLE(pool, KVC__MAMBA_MAGIC, "pool", "kvc_mamba_pool")

static inline bool kvc__mamba_live(const kvc_mamba_pool *p) { return p && p->magic == KVC__MAMBA_MAGIC; }

/* mamba_copy.c */

/** Resolves every inline variant of kernel 0 (row ops) or 1 (staged copy) for `vec`. */
kvc_status kvc__mamba_ensure_kernels(kvc_mamba_pool *p, int kernel, int vec);
/* One state operation over every state tensor and layer. */
typedef struct kvc__mamba_op {
  int mode;         /* KVC_MAMBA_ZERO / COPY / TO_HOST / FROM_HOST */
  bool staged_copy; /* the overlapping-copy kernel (COPY only) */
  const int32_t *a; /* the n ids (COPY: the sources) */
  const int32_t *b; /* COPY: the targets, b[i] <- a[i]; else NULL */
  size_t n;
  void *host; /* TO_HOST / FROM_HOST: the offload buffer */
  int vec;    /* access width: the pool's, or narrower for the host buffer */
} kvc__mamba_op;

/** One launch of `op` (n == 0: none). */
kvc_status kvc__mamba_launch(kvc_mamba_pool *p, const kvc__mamba_op *op, kvc_stream stream);

#endif /* KVC_MAMBA_H */
