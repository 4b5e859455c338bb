/*
 * options.c — every environment option in one descriptor table (mimalloc's options[]).
 * Read once per context at create; precedence: explicit config, then env, then default.
 */
#include "core.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef enum { OPT_BOOL, OPT_SIZE, OPT_STRING, OPT_LOG, OPT_BACKEND } opt_kind;

typedef struct opt_desc {
  const char *name; /* env name without the KVC_ prefix */
  opt_kind kind;
  size_t offset;
  size_t cap; /* for strings */
} opt_desc;

#define OPT(name, kind, field, cap) \
  { name, kind, offsetof(kvc__options, field), cap }
static const opt_desc options[] = {
    OPT("LOG", OPT_LOG, log_level, 0),
    OPT("CHECK", OPT_BOOL, check, 0),
    OPT("CANARY", OPT_BOOL, canary, 0),
    OPT("DUMP_KERNELS", OPT_BOOL, dump_kernels, 0),
    OPT("NO_DISK_CACHE", OPT_BOOL, no_disk_cache, 0),
    OPT("BACKEND", OPT_BACKEND, backend, 0),
    OPT("STAGING_BYTES", OPT_SIZE, staging_bytes, 0),
    OPT("STAGING_MAPPED", OPT_BOOL, staging_mapped, 0),
    OPT("SIMD", OPT_BOOL, simd, 0),
    OPT("INLINE_MAX_WORDS", OPT_SIZE, inline_max_words, 0),
    OPT("CACHE_DIR", OPT_STRING, cache_dir, sizeof(((kvc__options *)0)->cache_dir)),
    OPT("NVRTC_LIB", OPT_STRING, nvrtc_lib, sizeof(((kvc__options *)0)->nvrtc_lib)),
    OPT("CUDA_LIB", OPT_STRING, cuda_lib, sizeof(((kvc__options *)0)->cuda_lib)),
};

static int parse_bool(const char *v, bool *out) {
  static const char *yes[] = {"1", "true", "yes", "on"}, *no[] = {"0", "false", "no", "off", ""};
  for (size_t i = 0; i < KVC__ARRAY_LEN(yes); i++)
    if (!strcasecmp(v, yes[i])) return *out = true, 0;
  for (size_t i = 0; i < KVC__ARRAY_LEN(no); i++)
    if (!strcasecmp(v, no[i])) return *out = false, 0;
  return -1;
}

static int parse_size(const char *v, int64_t *out) {
  char *end;
  long long n = strtoll(v, &end, 10);
  if (end == v || n < 0) return -1;
  switch (toupper((unsigned char)*end)) {
  case 'K':
    n <<= 10;
    end++;
    break;
  case 'M':
    n <<= 20;
    end++;
    break;
  case 'G':
    n <<= 30;
    end++;
    break;
  default: break;
  }
  if (*end == 'B' || *end == 'b') end++;
  if (*end) return -1;
  *out = n;
  return 0;
}

static void set_default_cache_dir(kvc__options *o) {
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (xdg && *xdg) snprintf(o->cache_dir, sizeof o->cache_dir, "%s/kvcache", xdg);
  else if (home && *home) snprintf(o->cache_dir, sizeof o->cache_dir, "%s/.cache/kvcache", home);
  else snprintf(o->cache_dir, sizeof o->cache_dir, "/tmp/kvcache-cache");
}

void kvc__options_load(kvc__options *o) {
  memset(o, 0, sizeof *o);
  o->log_level = KVC_LOG_WARN;
  o->backend = -1;
  o->staging_bytes = 8 << 20;
  o->inline_max_words = 8000;
  o->simd = true;
  o->staging_mapped = true;
  set_default_cache_dir(o);
  for (size_t i = 0; i < KVC__ARRAY_LEN(options); i++) {
    char env[64];
    snprintf(env, sizeof env, "KVC_%s", options[i].name);
    const char *v = getenv(env);
    if (!v) continue;
    char *field = (char *)o + options[i].offset;
    int bad = 0;
    switch (options[i].kind) {
    case OPT_BOOL: bad = parse_bool(v, (bool *)field); break;
    case OPT_SIZE: bad = parse_size(v, (int64_t *)field); break;
    case OPT_STRING:
      if (strlen(v) >= options[i].cap) bad = -1;
      else memcpy(field, v, strlen(v) + 1);
      break;
    case OPT_LOG: {
      static const char *names[] = {"error", "warn", "info", "debug"};
      bad = -1;
      for (int l = 0; l < 4; l++)
        if (!strcasecmp(v, names[l])) *(int *)field = l, bad = 0;
      break;
    }
    case OPT_BACKEND:
      if (!strcasecmp(v, "auto")) *(int *)field = KVC_BACKEND_AUTO;
      else if (!strcasecmp(v, "host")) *(int *)field = KVC_BACKEND_HOST;
      else if (!strcasecmp(v, "cuda")) *(int *)field = KVC_BACKEND_CUDA;
      else bad = -1;
      break;
    }
    if (bad) fprintf(stderr, "kvcache: warning: ignoring bad value %s='%s'\n", env, v);
  }
}

void kvc__options_print(const kvc__options *o, int level) {
  if (level < KVC_LOG_INFO) return;
  fprintf(stderr,
          "kvcache: options: log=%d check=%d dump_kernels=%d no_disk_cache=%d backend=%d "
          "staging_bytes=%lld staging_mapped=%d inline_max_words=%lld simd=%d cache_dir='%s' nvrtc_lib='%s' "
          "cuda_lib='%s'\n",
          o->log_level, o->check, o->dump_kernels, o->no_disk_cache, o->backend, (long long)o->staging_bytes,
          o->staging_mapped, (long long)o->inline_max_words, o->simd, o->cache_dir, o->nvrtc_lib, o->cuda_lib);
}
