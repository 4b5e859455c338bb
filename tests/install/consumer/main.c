/*
 * main.c — a consumer of an installed kvcache (tests/install): checks that the header and
 * the library agree on the version, then runs a few allocator calls on the host backend.
 * Exit status 0 on success; prints what failed otherwise.
 */
#include <stdio.h>
#include <string.h>

#include <kvcache.h>

#define CHECK(expr)                                                                                                   \
  do {                                                                                                                \
    kvc_status st_ = (expr);                                                                                          \
    if (st_ != KVC_OK) {                                                                                              \
      fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #expr, kvc_status_name(st_), kvc_last_error(ctx)); \
      return 1;                                                                                                       \
    }                                                                                                                 \
  } while (0)

int main(void) {
  /* Header/library mismatch check, as every host should do at start-up. */
  if (kvc_version_number() != KVC_VERSION_NUMBER) {
    fprintf(stderr, "kvcache version mismatch: header %d, library %u\n", KVC_VERSION_NUMBER, kvc_version_number());
    return 1;
  }
  if (strcmp(kvc_version_string(), KVC_VERSION_STRING) != 0) {
    fprintf(stderr, "kvcache version string mismatch: %s vs %s\n", kvc_version_string(), KVC_VERSION_STRING);
    return 1;
  }

  kvc_context *ctx = NULL;
  kvc_context_config cc = KVC_CONTEXT_CONFIG_INIT;
  cc.backend = KVC_BACKEND_HOST;
  cc.flags = KVC_CONTEXT_CHECK | KVC_CONTEXT_NO_DISK_CACHE;
  CHECK(kvc_context_create(&cc, &ctx));

  kvc_allocator *a = NULL;
  kvc_allocator_config ac = KVC_ALLOCATOR_CONFIG_INIT;
  ac.kind = KVC_ALLOCATOR_PAGED;
  ac.size = 64;
  ac.page_size = 4;
  CHECK(kvc_allocator_create(ctx, &ac, &a));
  int64_t slots[8];
  CHECK(kvc_allocator_alloc(a, 8, slots));
  /* Pages 1 and 2, page-major: slots 4..11 (page 0 is padding). */
  for (int i = 0; i < 8; i++) {
    if (slots[i] != 4 + i) {
      fprintf(stderr, "slot %d = %lld, want %d\n", i, (long long)slots[i], 4 + i);
      return 1;
    }
  }
  CHECK(kvc_allocator_free(a, slots, 8));
  if (kvc_allocator_available_size(a) != 64) {
    fprintf(stderr, "available %lld, want 64\n", (long long)kvc_allocator_available_size(a));
    return 1;
  }
  /* Errors are statuses with a message, never a crash. */
  kvc_status st = kvc_allocator_free(a, slots, 1);
  if (st != KVC_ERR_MISUSE || kvc_last_error(ctx)[0] == '\0') {
    fprintf(stderr, "double free gave %s\n", kvc_status_name(st));
    return 1;
  }
  kvc_allocator_destroy(a);
  kvc_context_destroy(ctx);
  printf("consumer OK: kvcache %s (%u)\n", kvc_version_string(), kvc_version_number());
  return 0;
}
