/*
 * dlpack_capsule.c — DLPack capsule plumbing for language bindings (the Python package),
 * in C so that nothing in it runs interpreter code.
 *
 * A binding hands out DLPack tensors inside PyCapsules. Two functions end such a
 * tensor's life, and either may run while the interpreter has an exception pending (a
 * consumer that refused the capsule, e.g. NumPy for bfloat16, drops it on its error
 * path): the capsule's destructor and the managed tensor's deleter. Written as
 * interpreter callbacks (ctypes), they clobber that exception and the consumer returns
 * NULL without one (SystemError). Here both are plain C:
 *   - kvc_dlpack_capsule_destructor: calls the tensor's deleter when the capsule dies
 *     unconsumed (still named "dltensor" / "dltensor_versioned"). The two PyCapsule
 *     functions it needs are looked up in the running process once (dlopen(NULL) +
 *     dlsym); neither runs Python code or touches the error state. The library does not
 *     link to Python: with no Python runtime in the process this does nothing.
 *   - kvc_dlpack_relay_deleter(_versioned): the deleter of a binding-owned tensor whose
 *     manager_ctx is a kvc_dlpack_relay: runs the wrapped tensor's own deleter (the
 *     library's export), then sets relay->done, which the binding polls to drop its
 *     bookkeeping (and the reference that keeps the pool alive) at its next call.
 */
#include "kvcache.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#if !defined(_WIN32)
#  include <dlfcn.h>
#endif

typedef int (*kvc__capsule_is_valid_fn)(void *capsule, const char *name);
typedef void *(*kvc__capsule_get_pointer_fn)(void *capsule, const char *name);

static kvc__capsule_is_valid_fn capsule_is_valid;
static kvc__capsule_get_pointer_fn capsule_get_pointer;
static pthread_once_t capsule_once = PTHREAD_ONCE_INIT;

static void capsule_resolve(void) {
#if !defined(_WIN32)
  void *self = dlopen(NULL, RTLD_NOW);
  if (!self) return;
  void *v = dlsym(self, "PyCapsule_IsValid");
  void *g = dlsym(self, "PyCapsule_GetPointer");
  if (v && g) {
    /* POSIX: object pointers from dlsym convert to function pointers. */
    *(void **)&capsule_is_valid = v;
    *(void **)&capsule_get_pointer = g;
  }
#endif
}

/* Layouts of DLManagedTensor (v0.8) and DLManagedTensorVersioned (v1.x) up to the
 * fields used here; the DLTensor part is not touched. */
typedef struct kvc__dl_tensor_head {
  void *data;
  int32_t device[2];
  int32_t ndim;
  uint8_t dtype[4];
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} kvc__dl_tensor_head;

typedef struct kvc__dl_managed {
  kvc__dl_tensor_head dl_tensor;
  void *manager_ctx;
  void (*deleter)(void *self);
} kvc__dl_managed;

typedef struct kvc__dl_managed_versioned {
  uint32_t version[2];
  void *manager_ctx;
  void (*deleter)(void *self);
  uint64_t flags;
  kvc__dl_tensor_head dl_tensor;
} kvc__dl_managed_versioned;

void kvc_dlpack_capsule_destructor(void *capsule) {
  pthread_once(&capsule_once, capsule_resolve);
  if (!capsule || !capsule_is_valid) return;
  if (capsule_is_valid(capsule, "dltensor")) {
    kvc__dl_managed *m = capsule_get_pointer(capsule, "dltensor");
    if (m && m->deleter) m->deleter(m);
  } else if (capsule_is_valid(capsule, "dltensor_versioned")) {
    kvc__dl_managed_versioned *m = capsule_get_pointer(capsule, "dltensor_versioned");
    if (m && m->deleter) m->deleter(m);
  }
  /* "used_dltensor[_versioned]": the consumer owns the tensor and calls the deleter. */
}

static void relay_finish(kvc_dlpack_relay *r) {
  if (!r) return;
  if (r->inner_deleter) r->inner_deleter(r->inner);
  r->inner_deleter = NULL;
  r->inner = NULL;
  r->done = 1;
}

void kvc_dlpack_relay_deleter(void *managed) {
  if (managed) relay_finish(((kvc__dl_managed *)managed)->manager_ctx);
}

void kvc_dlpack_relay_deleter_versioned(void *managed) {
  if (managed) relay_finish(((kvc__dl_managed_versioned *)managed)->manager_ctx);
}
