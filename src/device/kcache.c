/*
 * kcache.c — compiled kernels per context: an in-memory table (hash of kernel name and
 * specialisation options -> loaded function) in front of an on-disk cubin cache.
 *
 * Disk entry: <cache_dir>/<key>.cubin =
 *   [ "KVCBIN01" | key u64 | payload bytes u64 | payload hash u64 | flags u64 ][ image ]
 * key = hash(kernel source, every kernels/ header, options, arch, NVRTC version, library
 * version). Written to a temporary file then renamed (atomic); entries that fail any
 * check are ignored (counted as disk_rejects) and rebuilt.
 */
#define _GNU_SOURCE
#include "context.h"
#include "host_kernels/host_kernels.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct kvc__kfunc {
  uint64_t hash;
  const kvc__kernel_def *def; /* lookup identity: (def, spec) */
  kvc__spec spec;
  char *key; /* "name -DA=1 ..." (logs, disk-cache key) */
  void *module;
  void *function;
  const kvc__host_twin *twin; /* host backend: the kernel's C twin */
  unsigned smem_set;
};

struct kvc__kcache {
  kvc__kfunc **slots; /* open addressing, power-of-two capacity */
  size_t cap, count;
  kvc_kernel_cache_stats stats;
};

typedef struct disk_header {
  char magic[8];
  uint64_t key, bytes, payload_hash, flags;
} disk_header;

kvc_status kvc__kcache_create(kvc_context *ctx) {
  kvc__kcache *kc = kvc__calloc(ctx, 1, sizeof *kc);
  if (!kc) return kvc__error(ctx, KVC_ERR_HOST_OOM, "kvc_context_create", "kernel cache");
  kc->cap = 64;
  kc->slots = kvc__calloc(ctx, kc->cap, sizeof(kvc__kfunc *)); /* a table of pointers */
  if (!kc->slots) {
    kvc__free(ctx, kc);
    return kvc__error(ctx, KVC_ERR_HOST_OOM, "kvc_context_create", "kernel cache");
  }
  ctx->kcache = kc;
  return KVC_OK;
}

void kvc__kcache_destroy(kvc_context *ctx) {
  kvc__kcache *kc = ctx->kcache;
  if (!kc) return;
  for (size_t i = 0; i < kc->cap; i++) {
    kvc__kfunc *f = kc->slots[i];
    if (!f) continue;
    if (f->module && ctx->cuda) kvc__cuda_module_unload(ctx, f->module);
    kvc__free(ctx, f->key);
    kvc__free(ctx, f);
  }
  kvc__free(ctx, kc->slots);
  kvc__free(ctx, kc);
  ctx->kcache = NULL;
}

kvc_status kvc__kcache_stats(kvc_context *ctx, kvc_kernel_cache_stats *out) {
  pthread_mutex_lock(&ctx->lock);
  *out = ctx->kcache->stats;
  pthread_mutex_unlock(&ctx->lock);
  return KVC_OK;
}

static kvc_status table_insert(kvc_context *ctx, kvc__kcache *kc, kvc__kfunc *f) {
  if ((kc->count + 1) * 2 > kc->cap) {
    size_t cap = kc->cap * 2;
    kvc__kfunc **slots = kvc__calloc(ctx, cap, sizeof(kvc__kfunc *));
    if (!slots) return kvc__error(ctx, KVC_ERR_HOST_OOM, "kvc__kernel_get", "kernel table");
    for (size_t i = 0; i < kc->cap; i++) {
      kvc__kfunc *g = kc->slots[i];
      if (!g) continue;
      size_t j = g->hash & (cap - 1);
      while (slots[j]) j = (j + 1) & (cap - 1);
      slots[j] = g;
    }
    kvc__free(ctx, kc->slots);
    kc->slots = slots;
    kc->cap = cap;
  }
  size_t j = f->hash & (kc->cap - 1);
  while (kc->slots[j]) j = (j + 1) & (kc->cap - 1);
  kc->slots[j] = f;
  kc->count++;
  return KVC_OK;
}

/* --- Disk -------------------------------------------------------------------------- */

static void mkdir_p(const char *dir) {
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s", dir);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    mkdir(tmp, 0755);
    *p = '/';
  }
  mkdir(tmp, 0755);
}

static void *disk_load(kvc_context *ctx, const char *path, uint64_t key, size_t *bytes) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return NULL;
  disk_header h;
  void *buf = NULL;
  bool ok = fread(&h, sizeof h, 1, fp) == 1 && !memcmp(h.magic, "KVCBIN01", 8) && h.key == key && h.bytes > 0 &&
            h.bytes < (1u << 30);
  if (ok) {
    buf = malloc(h.bytes + 1);
    ok = buf && fread(buf, 1, h.bytes, fp) == h.bytes && kvc__hash(KVC__HASH_SEED, buf, h.bytes) == h.payload_hash;
    if (ok) ((char *)buf)[h.bytes] = '\0';
  }
  fclose(fp);
  if (!ok) {
    free(buf);
    ctx->kcache->stats.disk_rejects++;
    kvc__log(ctx, KVC_LOG_INFO, "ignoring corrupt kernel cache entry %s", path);
    return NULL;
  }
  *bytes = h.bytes;
  return buf;
}

static void disk_store(kvc_context *ctx, const char *dir, const char *path, uint64_t key, const void *image,
                       size_t bytes, bool is_ptx) {
  mkdir_p(dir);
  char tmp[1024];
  static _Thread_local unsigned counter;
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", path, (long)getpid(), counter++);
  FILE *fp = fopen(tmp, "wb");
  if (!fp) {
    kvc__log(ctx, KVC_LOG_INFO, "kernel cache %s not writable: %s", dir, strerror(errno));
    return;
  }
  disk_header h;
  memcpy(h.magic, "KVCBIN01", 8);
  h.key = key;
  h.bytes = bytes;
  h.payload_hash = kvc__hash(KVC__HASH_SEED, image, bytes);
  h.flags = is_ptx;
  bool ok = fwrite(&h, sizeof h, 1, fp) == 1 && fwrite(image, 1, bytes, fp) == bytes;
  ok = (fclose(fp) == 0) && ok;
  if (!ok || rename(tmp, path) != 0) {
    unlink(tmp);
    kvc__log(ctx, KVC_LOG_INFO, "could not write kernel cache entry %s", path);
  }
}

static uint64_t headers_hash(void) {
  uint64_t h = KVC__HASH_SEED;
  for (size_t i = 0; i < kvc__embedded_count; i++) {
    const char *n = kvc__embedded_files[i].name;
    size_t len = strlen(n);
    if ((len > 4 && !strcmp(n + len - 4, ".cuh")) || (len > 2 && !strcmp(n + len - 2, ".h"))) {
      h = kvc__hash(h, n, len);
      h = kvc__hash(h, kvc__embedded_files[i].text, strlen(kvc__embedded_files[i].text));
    }
  }
  return h;
}

/* --- Lookup ------------------------------------------------------------------------ */

static kvc_status build(kvc_context *ctx, const kvc__kernel_def *def, const char **opts, int nopts, kvc__kfunc *f) {
  kvc__kcache *kc = ctx->kcache;
  const kvc__options *o = &kvc__core_of(ctx)->options;
  KVC_FORWARD(kvc__nvrtc_load(ctx, o->nvrtc_lib));
  const char *src = kvc__embedded_find(def->file);
  if (!src) return kvc__error(ctx, KVC_ERR_INTERNAL, "kvc__kernel_get", "no embedded %s", def->file);

  uint64_t key = kvc__hash(headers_hash(), src, strlen(src));
  key = kvc__hash(key, def->file, strlen(def->file));
  for (int i = 0; i < nopts; i++) key = kvc__hash(key, opts[i], strlen(opts[i]) + 1);
  int nvv = kvc__nvrtc_version();
  key = kvc__hash(key, &ctx->sm, sizeof ctx->sm);
  key = kvc__hash(key, &nvv, sizeof nvv);
  key = kvc__hash(key, KVC_VERSION_STRING, sizeof KVC_VERSION_STRING);
  char path[700];
  snprintf(path, sizeof path, "%s/%016llx.cubin", o->cache_dir, (unsigned long long)key);

  kvc_status st = KVC_OK;
  size_t bytes = 0;
  void *image = NULL;
  if (!o->no_disk_cache) {
    double t0 = kvc__now();
    image = disk_load(ctx, path, key, &bytes);
    if (image) {
      st = kvc__cuda_module_load(ctx, image, def->name, &f->module, &f->function);
      if (st == KVC_OK) {
        kc->stats.disk_hits++;
        kc->stats.load_seconds += kvc__now() - t0;
        free(image);
        return KVC_OK;
      }
      kc->stats.disk_rejects++;
      free(image);
      image = NULL;
    }
  }
  double t0 = kvc__now();
  kvc__nvrtc_image img = {NULL, 0, false};
  KVC_FORWARD(kvc__nvrtc_compile(ctx, def->file, opts, nopts, ctx->sm, o->dump_kernels, &img));
  image = img.data;
  bytes = img.bytes;
  const bool is_ptx = img.is_ptx;
  kc->stats.compiles++;
  kc->stats.compile_seconds += kvc__now() - t0;
  t0 = kvc__now();
  st = kvc__cuda_module_load(ctx, image, def->name, &f->module, &f->function);
  kc->stats.load_seconds += kvc__now() - t0;
  if (st == KVC_OK && !o->no_disk_cache) disk_store(ctx, o->cache_dir, path, key, image, bytes, is_ptx);
  free(image);
  return st;
}

/* Hash of (def, spec) without formatting anything: the hit path of every launch. Spec
 * names are compared by content, so equal specs built in different places match. */
static uint64_t spec_hash(const kvc__kernel_def *def, const kvc__spec *spec) {
  const uintptr_t def_id = (uintptr_t)def; /* the definition's address is its identity */
  uint64_t h = kvc__hash(KVC__HASH_SEED, &def_id, sizeof def_id);
  int n = spec ? spec->count : 0;
  h = kvc__hash(h, &n, sizeof n);
  for (int i = 0; i < n; i++) {
    h = kvc__hash(h, spec->def[i].name, strlen(spec->def[i].name));
    h = kvc__hash(h, &spec->def[i].value, sizeof spec->def[i].value);
  }
  return h;
}

static bool spec_equal(const kvc__kfunc *f, const kvc__kernel_def *def, const kvc__spec *spec) {
  int n = spec ? spec->count : 0;
  if (f->def != def || f->spec.count != n) return false;
  for (int i = 0; i < n; i++)
    if (f->spec.def[i].value != spec->def[i].value || strcmp(f->spec.def[i].name, spec->def[i].name) != 0) return false;
  return true;
}

kvc_status kvc__kernel_get(kvc_context *ctx, const kvc__kernel_def *def, const kvc__spec *spec,
                           const kvc__kfunc **out) {
  if (spec && (spec->count < 0 || spec->count > 8))
    return kvc__error(ctx, KVC_ERR_INTERNAL, "kvc__kernel_get", "spec of %d defines for %s", spec->count, def->name);
  const uint64_t h = spec_hash(def, spec);
  pthread_mutex_lock(&ctx->lock);
  kvc__kcache *kc = ctx->kcache;
  for (size_t j = h & (kc->cap - 1); kc->slots[j]; j = (j + 1) & (kc->cap - 1)) {
    kvc__kfunc *f = kc->slots[j];
    if (f->hash == h && spec_equal(f, def, spec)) {
      kc->stats.memory_hits++;
      *out = f;
      pthread_mutex_unlock(&ctx->lock);
      return KVC_OK;
    }
  }
  pthread_mutex_unlock(&ctx->lock);

  /* Miss: format the options and the key, then build under the lock (re-checking, as
   * another thread may have built it meanwhile). */
  char optbuf[512];
  const char *opts[8];
  int nopts = kvc__spec_options(spec, optbuf, sizeof optbuf, opts, 8);
  char key[640];
  size_t at = (size_t)snprintf(key, sizeof key, "%s", def->name);
  for (int i = 0; i < nopts && at < sizeof key; i++) at += (size_t)snprintf(key + at, sizeof key - at, " %s", opts[i]);
  if (at >= sizeof key) return kvc__error(ctx, KVC_ERR_INTERNAL, "kvc__kernel_get", "spec too long for %s", def->name);

  kvc_status st = KVC_OK;
  pthread_mutex_lock(&ctx->lock);
  for (size_t j = h & (kc->cap - 1); kc->slots[j]; j = (j + 1) & (kc->cap - 1)) {
    kvc__kfunc *f = kc->slots[j];
    if (f->hash == h && spec_equal(f, def, spec)) {
      *out = f;
      pthread_mutex_unlock(&ctx->lock);
      return KVC_OK;
    }
  }
  kvc__kfunc *f = kvc__calloc(ctx, 1, sizeof *f);
  char *kcopy = f ? kvc__malloc(ctx, at + 1) : NULL;
  if (!kcopy) {
    kvc__free(ctx, f);
    pthread_mutex_unlock(&ctx->lock);
    return kvc__error(ctx, KVC_ERR_HOST_OOM, "kvc__kernel_get", "kernel entry");
  }
  memcpy(kcopy, key, at + 1);
  f->hash = h;
  f->def = def;
  if (spec) f->spec = *spec;
  f->key = kcopy;
  if (ctx->backend == KVC_BACKEND_CUDA) {
    st = build(ctx, def, opts, nopts, f);
  } else {
    f->twin = kvc__host_twin_find(def->name);
    if (!f->twin) st = kvc__error(ctx, KVC_ERR_INTERNAL, "kvc__kernel_get", "no host twin for %s", def->name);
  }
  if (st == KVC_OK) st = table_insert(ctx, kc, f);
  if (st != KVC_OK) {
    if (f->module) kvc__cuda_module_unload(ctx, f->module);
    kvc__free(ctx, kcopy);
    kvc__free(ctx, f);
  } else {
    *out = f;
  }
  pthread_mutex_unlock(&ctx->lock);
  return st;
}

kvc_status kvc__kernel_twin_scratch(kvc_context *ctx, const char *fn, const char *what, size_t count, size_t size,
                                    void **out) {
  *out = NULL;
  if (ctx->backend != KVC_BACKEND_HOST) return KVC_OK;
  size_t bytes;
  if (!kvc__mul_size(count, size, &bytes))
    return kvc__error(ctx, KVC_ERR_INVALID_ARGUMENT, fn, "%s of %zu x %zu bytes overflows", what, count, size);
  *out = kvc__malloc(ctx, bytes);
  if (!*out) return kvc__error(ctx, KVC_ERR_HOST_OOM, fn, "%s of %zu bytes", what, bytes);
  return KVC_OK;
}

kvc_status kvc__kernel_launch(kvc_context *ctx, const kvc__kfunc *f, kvc__dim3 grid, kvc__dim3 block,
                              unsigned smem_bytes, kvc_stream stream, const void *params, size_t params_bytes) {
  kvc__core *core = kvc__core_of(ctx);
  if (kvc__fault_hit(&core->fault.launches, &core->fault.launch_fail_at))
    return kvc__error(ctx, KVC_ERR_CUDA, "kvc__kernel_launch", "injected launch failure (%s)", f->key);
  if (params_bytes > ctx->max_param_bytes)
    return kvc__error(ctx, KVC_ERR_INTERNAL, "kvc__kernel_launch", "%zu parameter bytes for %s", params_bytes, f->key);
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return KVC_OK;
  if (ctx->backend == KVC_BACKEND_HOST) {
    kvc__host_twin_run(f->twin, params, &f->spec);
    return KVC_OK;
  }
  return kvc__cuda_launch(ctx, f->function, (unsigned *)&f->smem_set, grid, block, smem_bytes, stream, params);
}
