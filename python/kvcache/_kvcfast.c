/*
 * _kvcfast.c — optional CPython extension for the binding's per-step calls (issue 16).
 *
 * ctypes spends about 0.6-0.9 us converting arguments for each foreign call; on the host
 * backend a decode step at batch 256 costs the library itself about 2.5 us, so that is
 * most of the binding's overhead. This module calls the same library functions through
 * METH_FASTCALL wrappers instead. It does not link to libkvcache: bind() receives the
 * addresses of the functions from the ctypes handle the package already loaded, so both
 * paths run the very same library. Arguments are ints (addresses, counts) or None
 * (NULL), as the package passes them to ctypes; the kvc_status comes back as an int.
 * Built only with -DKVC_BUILD_PYTHON_EXT=ON (cmake/python_ext.cmake); the package uses
 * it when present next to the library and falls back to ctypes otherwise.
 * The second group of entries (bind_adapter() and after, issue 18) serves kvcache.sglang's
 * hot paths: the allocator, free, row and radix calls it makes per scheduler step. Their
 * address arguments also take buffer objects (NumPy arrays, array.array, ctypes arrays),
 * whose addresses cost NumPy about a microsecond to report through Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef int (*kvcf_decode_fn)(void *flow, void *reqs, size_t n, int32_t token_per_req, void *out, void *stream);
typedef int (*kvcf_extend_fn)(void *flow, void *reqs, size_t n, void *out, void *stream);
typedef int (*kvcf_release_fn)(void *flow, void *reqs, size_t n, int is_insert, void *stream);

static kvcf_decode_fn kvcf_decode;
static kvcf_extend_fn kvcf_extend;
static kvcf_release_fn kvcf_release;

static int kvcf_ptr(PyObject *o, void **out) {
  if (o == Py_None) {
    *out = NULL;
    return 0;
  }
  *out = PyLong_AsVoidPtr(o);
  return (*out == NULL && PyErr_Occurred()) ? -1 : 0;
}

static int kvcf_size(PyObject *o, size_t *out) {
  *out = PyLong_AsSize_t(o);
  return (*out == (size_t)-1 && PyErr_Occurred()) ? -1 : 0;
}

static int kvcf_nargs(Py_ssize_t got, Py_ssize_t want, const char *name) {
  if (got == want) return 0;
  PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, want, got);
  return -1;
}

static PyObject *kvcf_bind(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  void *d, *e, *r;
  (void)self;
  if (kvcf_nargs(nargs, 3, "bind") || kvcf_ptr(args[0], &d) || kvcf_ptr(args[1], &e) || kvcf_ptr(args[2], &r))
    return NULL;
  if (!d || !e || !r) {
    PyErr_SetString(PyExc_ValueError, "bind() needs three function addresses");
    return NULL;
  }
  /* POSIX: object pointers (the addresses ctypes gives) convert to function pointers. */
  *(void **)&kvcf_decode = d;
  *(void **)&kvcf_extend = e;
  *(void **)&kvcf_release = r;
  Py_RETURN_NONE;
}

static int kvcf_bound(void) {
  if (kvcf_decode) return 0;
  PyErr_SetString(PyExc_RuntimeError, "_kvcfast.bind() was not called");
  return -1;
}

/* flow_decode(flow, reqs, n, token_per_req, out, stream) -> kvc_status */
static PyObject *kvcf_flow_decode(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  void *flow, *reqs, *out, *stream;
  size_t n;
  long tpr;
  (void)self;
  if (kvcf_nargs(nargs, 6, "flow_decode") || kvcf_bound() || kvcf_ptr(args[0], &flow) || kvcf_ptr(args[1], &reqs) ||
      kvcf_size(args[2], &n) || kvcf_ptr(args[4], &out) || kvcf_ptr(args[5], &stream))
    return NULL;
  tpr = PyLong_AsLong(args[3]);
  if (tpr == -1 && PyErr_Occurred()) return NULL;
  if (tpr < INT32_MIN || tpr > INT32_MAX) {
    PyErr_SetString(PyExc_OverflowError, "token_per_req out of int32 range");
    return NULL;
  }
  return PyLong_FromLong(kvcf_decode(flow, reqs, n, (int32_t)tpr, out, stream));
}

/* flow_extend(flow, reqs, n, out, stream) -> kvc_status */
static PyObject *kvcf_flow_extend(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  void *flow, *reqs, *out, *stream;
  size_t n;
  (void)self;
  if (kvcf_nargs(nargs, 5, "flow_extend") || kvcf_bound() || kvcf_ptr(args[0], &flow) || kvcf_ptr(args[1], &reqs) ||
      kvcf_size(args[2], &n) || kvcf_ptr(args[3], &out) || kvcf_ptr(args[4], &stream))
    return NULL;
  return PyLong_FromLong(kvcf_extend(flow, reqs, n, out, stream));
}

/* flow_release(flow, reqs, n, is_insert, stream) -> kvc_status */
static PyObject *kvcf_flow_release(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  void *flow, *reqs, *stream;
  size_t n;
  int ins;
  (void)self;
  if (kvcf_nargs(nargs, 5, "flow_release") || kvcf_bound() || kvcf_ptr(args[0], &flow) || kvcf_ptr(args[1], &reqs) ||
      kvcf_size(args[2], &n) || kvcf_ptr(args[4], &stream))
    return NULL;
  ins = PyObject_IsTrue(args[3]);
  if (ins < 0) return NULL;
  return PyLong_FromLong(kvcf_release(flow, reqs, n, ins, stream));
}

/* --- the entry points of kvcache.sglang's hot paths (issue 18) ----------------------------
 * The adapter's allocator, free and radix calls, bound by bind_adapter() in the order of
 * kvcf_adapter_names (kvcache/sglang/_ops.py passes the same list). Each takes `swa`
 * (true: the kvc_swa_allocator variant) where both allocator kinds have the call. */
typedef int (*kvcf_adec_fn)(void *alloc, size_t n, const int64_t *seq, const int64_t *last, void *pool,
                            const int32_t *rows, int64_t *out_host, int64_t *out_dev, void *stream);
typedef int (*kvcf_aext_fn)(void *alloc, size_t n, const int64_t *pre, const int64_t *seq, const int64_t *last,
                            void *pool, const int32_t *rows, const int64_t *const *prefix, int64_t *out_host,
                            int64_t *out_dev, void *stream);
typedef int (*kvcf_free_fn)(void *alloc, const int64_t *slots, size_t n);
typedef int (*kvcf_swa_free_fn)(void *alloc, const int64_t *slots, size_t n, void *stream);
typedef int (*kvcf_row_slots_fn)(const void *flow, int32_t row, int64_t start, int64_t end, int64_t *out);
typedef int (*kvcf_row_free_fn)(void *pool, int32_t row);
typedef int (*kvcf_match_fn)(void *cache, uint64_t ns, const int32_t *tokens, int64_t n, void *out);
typedef int (*kvcf_alloc_fn)(void *alloc, int64_t n, int64_t *out);
typedef int (*kvcf_swa_alloc_fn)(void *alloc, int64_t n, int64_t *out_host, int64_t *out_dev, void *stream);
typedef int (*kvcf_rows_alloc_fn)(void *pool, size_t n, int32_t *rows);
/* kvc_allocator_alloc_extend_ex's argument struct, mirrored here because the extension does
 * not include kvcache.h (python/tests/test_sglang_fast.py checks the rows it writes). */
typedef struct kvcf_extend_args {
  size_t batch_size;
  const int64_t *prefix_lens, *seq_lens, *last_locs;
  void *req_pool;
  const int32_t *req_rows;
  const int64_t *const *prefix_slots;
  int64_t *out_host, *out_device, *rows_device;
  void *stream;
} kvcf_extend_args;
typedef int (*kvcf_aext_ex_fn)(void *alloc, const kvcf_extend_args *args);
typedef int (*kvcf_check_free_fn)(void *alloc, const int64_t *const *lists, const size_t *counts, size_t num_lists);
typedef int (*kvcf_row_held_fn)(const void *pool, int32_t row);

static kvcf_adec_fn kvcf_adec[2];
static kvcf_aext_fn kvcf_aext[2];
static kvcf_free_fn kvcf_free;
static kvcf_swa_free_fn kvcf_swa_free;
static kvcf_row_slots_fn kvcf_row_slots;
static kvcf_row_free_fn kvcf_row_free;
static kvcf_match_fn kvcf_match;
static kvcf_alloc_fn kvcf_alloc;
static kvcf_swa_alloc_fn kvcf_swa_alloc;
static kvcf_rows_alloc_fn kvcf_rows_alloc;
static kvcf_aext_ex_fn kvcf_aext_ex[2];
static kvcf_check_free_fn kvcf_check_free;
static kvcf_row_held_fn kvcf_row_held;

/* Token scratch of radix_match_list (grown, never shrunk; the GIL serializes its users). */
static int32_t *kvcf_tok;
static size_t kvcf_tok_cap;

#define KVCF_ADAPTER_FNS 16

static PyObject *kvcf_bind_adapter(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  void *a[KVCF_ADAPTER_FNS] = {NULL};
  (void)self;
  /* Fewer: an older adapter (a same-session before/after runs an older tree's Python on
   * this build): 12 never passes rows_dev, 13 has no check functions (release_row then
   * raises), 15 no SWA extend_ex (rows_dev with the SWA allocator then raises). */
  if (nargs < 12 || nargs > KVCF_ADAPTER_FNS) {
    PyErr_Format(PyExc_TypeError, "bind_adapter() takes 12 to %d arguments (%zd given)", KVCF_ADAPTER_FNS, nargs);
    return NULL;
  }
  for (Py_ssize_t i = 0; i < nargs; i++) {
    if (kvcf_ptr(args[i], &a[i])) return NULL;
    if (!a[i]) {
      PyErr_SetString(PyExc_ValueError, "bind_adapter() needs non-NULL function addresses");
      return NULL;
    }
  }
  /* POSIX: object pointers (the addresses ctypes gives) convert to function pointers. */
  *(void **)&kvcf_adec[0] = a[0];
  *(void **)&kvcf_adec[1] = a[1];
  *(void **)&kvcf_aext[0] = a[2];
  *(void **)&kvcf_aext[1] = a[3];
  *(void **)&kvcf_free = a[4];
  *(void **)&kvcf_swa_free = a[5];
  *(void **)&kvcf_row_slots = a[6];
  *(void **)&kvcf_row_free = a[7];
  *(void **)&kvcf_match = a[8];
  *(void **)&kvcf_alloc = a[9];
  *(void **)&kvcf_swa_alloc = a[10];
  *(void **)&kvcf_rows_alloc = a[11];
  *(void **)&kvcf_aext_ex[0] = a[12];
  *(void **)&kvcf_check_free = a[13];
  *(void **)&kvcf_row_held = a[14];
  *(void **)&kvcf_aext_ex[1] = a[15];
  Py_RETURN_NONE;
}

static int kvcf_adapter_bound(void) {
  if (kvcf_match) return 0;
  PyErr_SetString(PyExc_RuntimeError, "_kvcfast.bind_adapter() was not called");
  return -1;
}

/* An address argument of the adapter's entries: an int, None (NULL), or an object with
 * the buffer protocol (a NumPy array, array.array, ctypes array: its first byte; NumPy
 * refuses a non-contiguous array). The caller's argument keeps the memory alive. */
static int kvcf_addr(PyObject *o, void **out) {
  Py_buffer view;
  if (o == Py_None || PyLong_Check(o)) return kvcf_ptr(o, out);
  if (PyObject_GetBuffer(o, &view, PyBUF_SIMPLE) < 0) return -1;
  *out = view.buf;
  PyBuffer_Release(&view);
  return 0;
}

static int kvcf_flag(PyObject *o, int *out) {
  *out = PyObject_IsTrue(o);
  return *out < 0 ? -1 : 0;
}

static int kvcf_i64(PyObject *o, int64_t *out) {
  long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) return -1;
  *out = (int64_t)v;
  return 0;
}

static int kvcf_i32(PyObject *o, int32_t *out) {
  long v = PyLong_AsLong(o);
  if (v == -1 && PyErr_Occurred()) return -1;
  if (v < INT32_MIN || v > INT32_MAX) {
    PyErr_SetString(PyExc_OverflowError, "value out of int32 range");
    return -1;
  }
  *out = (int32_t)v;
  return 0;
}

/* alloc_decode(swa, alloc, n, seq, last, pool, rows, out_host, out_dev, stream, seq_src)
 * -> kvc_status. With seq_src (host int64), seq[i] = seq_src[i] + 1 first (the decode step's
 * new lengths, written into the caller's scratch `seq`). */
static PyObject *kvcf_alloc_decode(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  void *alloc, *seq, *last, *pool, *rows, *oh, *od, *stream, *src;
  size_t n;
  int swa;
  (void)self;
  if (kvcf_nargs(nargs, 11, "alloc_decode") || kvcf_adapter_bound() || kvcf_flag(args[0], &swa) ||
      kvcf_addr(args[1], &alloc) || kvcf_size(args[2], &n) || kvcf_addr(args[3], &seq) || kvcf_addr(args[4], &last) ||
      kvcf_addr(args[5], &pool) || kvcf_addr(args[6], &rows) || kvcf_addr(args[7], &oh) || kvcf_addr(args[8], &od) ||
      kvcf_addr(args[9], &stream) || kvcf_addr(args[10], &src))
    return NULL;
  if (src) {
    if (!seq) {
      PyErr_SetString(PyExc_ValueError, "alloc_decode(): seq_src needs a seq buffer");
      return NULL;
    }
    const int64_t *s = src;
    int64_t *d = seq;
    for (size_t i = 0; i < n; i++) d[i] = s[i] + 1;
  }
  return PyLong_FromLong(kvcf_adec[swa ? 1 : 0](alloc, n, seq, last, pool, rows, oh, od, stream));
}

/* alloc_extend's prefix_lens when given as a list (SGLang's batch.prefix_lens is one): its
 * first n ints as int64 in a scratch grown on demand (the GIL serializes its users; the
 * library reads it during the call only). Saves the adapter an array('q') per call. */
static int64_t *kvcf_lens;
static size_t kvcf_lens_cap;

static int kvcf_list_i64(PyObject *list, size_t n, void **out) {
  if (PyList_GET_SIZE(list) < (Py_ssize_t)n) {
    PyErr_SetString(PyExc_ValueError, "alloc_extend(): prefix_lens is shorter than the batch");
    return -1;
  }
  if (n > kvcf_lens_cap) {
    size_t cap = n > 2 * kvcf_lens_cap ? n : 2 * kvcf_lens_cap;
    int64_t *p = PyMem_RawRealloc(kvcf_lens, cap * sizeof *p);
    if (!p) {
      PyErr_NoMemory();
      return -1;
    }
    kvcf_lens = p;
    kvcf_lens_cap = cap;
  }
  for (size_t i = 0; i < n; i++)
    if (kvcf_i64(PyList_GET_ITEM(list, (Py_ssize_t)i), &kvcf_lens[i])) return -1;
  *out = kvcf_lens;
  return 0;
}

/* alloc_extend(swa, alloc, n, pre, seq, last, pool, rows, prefix, out_host, out_dev, stream
 * [, rows_dev]) -> kvc_status (prefix: the address of n host int64 pointers, or None; pre
 * may be a list of ints).
 * rows_dev (device int64 [n], or None): the rows as int64, written by the same launch
 * ([swa_]allocator_alloc_extend_ex). */
static PyObject *kvcf_alloc_extend(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  void *alloc, *pre, *seq, *last, *pool, *rows, *prefix, *oh, *od, *stream, *rd = NULL;
  size_t n;
  int swa;
  (void)self;
  if (nargs != 13 && kvcf_nargs(nargs, 12, "alloc_extend")) return NULL;
  if (kvcf_adapter_bound() || kvcf_flag(args[0], &swa) || kvcf_addr(args[1], &alloc) || kvcf_size(args[2], &n) ||
      (PyList_Check(args[3]) ? kvcf_list_i64(args[3], n, &pre) : kvcf_addr(args[3], &pre)) ||
      kvcf_addr(args[4], &seq) || kvcf_addr(args[5], &last) || kvcf_addr(args[6], &pool) || kvcf_addr(args[7], &rows) ||
      kvcf_addr(args[8], &prefix) || kvcf_addr(args[9], &oh) || kvcf_addr(args[10], &od) ||
      kvcf_addr(args[11], &stream) || (nargs == 13 && kvcf_addr(args[12], &rd)))
    return NULL;
  if (rd) {
    const kvcf_aext_ex_fn ex = kvcf_aext_ex[swa ? 1 : 0];
    if (!ex) {
      PyErr_SetString(PyExc_RuntimeError, swa ? "alloc_extend(): rows_dev with the SWA allocator needs bind_adapter() "
                                                "with 16 functions"
                                              : "alloc_extend(): rows_dev needs bind_adapter() with 13 functions");
      return NULL;
    }
    const kvcf_extend_args x = {n, pre, seq, last, pool, rows, (const int64_t *const *)prefix, oh, od, rd, stream};
    return PyLong_FromLong(ex(alloc, &x));
  }
  return PyLong_FromLong(
      kvcf_aext[swa ? 1 : 0](alloc, n, pre, seq, last, pool, rows, (const int64_t *const *)prefix, oh, od, stream));
}

/* free(swa, alloc, slots, n, stream) -> kvc_status (kvc_allocator_free ignores stream). */
static PyObject *kvcf_free_slots(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  void *alloc, *slots, *stream;
  size_t n;
  int swa;
  (void)self;
  if (kvcf_nargs(nargs, 5, "free") || kvcf_adapter_bound() || kvcf_flag(args[0], &swa) || kvcf_addr(args[1], &alloc) ||
      kvcf_addr(args[2], &slots) || kvcf_size(args[3], &n) || kvcf_addr(args[4], &stream))
    return NULL;
  return PyLong_FromLong(swa ? kvcf_swa_free(alloc, slots, n, stream) : kvcf_free(alloc, slots, n));
}

/* free_row(swa, alloc, flow, row, start, end, buf, stream) -> kvc_status: row[start:end)
 * of the flow's request-to-token mirror into buf (end - start int64), then free them. */
static PyObject *kvcf_free_row(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  void *alloc, *flow, *buf, *stream;
  int32_t row;
  int64_t start, end;
  int swa, st;
  (void)self;
  if (kvcf_nargs(nargs, 8, "free_row") || kvcf_adapter_bound() || kvcf_flag(args[0], &swa) ||
      kvcf_addr(args[1], &alloc) || kvcf_addr(args[2], &flow) || kvcf_i32(args[3], &row) || kvcf_i64(args[4], &start) ||
      kvcf_i64(args[5], &end) || kvcf_addr(args[6], &buf) || kvcf_addr(args[7], &stream))
    return NULL;
  st = kvcf_row_slots(flow, row, start, end, buf);
  if (st == 0 && end > start) {
    size_t n = (size_t)(end - start);
    st = swa ? kvcf_swa_free(alloc, buf, n, stream) : kvcf_free(alloc, buf, n);
  }
  return PyLong_FromLong(st);
}

/* The over-allocated tail of release_row, read before anything is freed (grown, never
 * shrunk; the GIL serializes its users). */
static int64_t *kvcf_tail;
static size_t kvcf_tail_cap;

/* release_row(alloc, flow, pool, row, committed, start, end, buf) -> kvc_status: a finished
 * request of a ChunkCache over a plain (non-SWA) allocator, as release_kv_cache does it in
 * three calls: free row[0:committed), free row[start:end) (the over-allocated tail), then
 * release the row. buf holds committed int64 (the tail goes to kvcf_tail; callers may pass
 * more, as the adapter's max(committed, end - start, 1) did). Two frees, not one, because
 * a paged free puts its sorted pages in front of the free list: one merged free would
 * order them differently from SGLang's two.
 * A failed call changes nothing: both slices are read (the tail into kvcf_tail), the row
 * and (when both slices are non-empty) kvc_allocator_check_free over the two lists are
 * checked, and only then freed, so a
 * refused tail (slots not held) cannot leave the committed slots freed and the request
 * half-released. A row not held is reported by kvc_req_to_token_pool_free itself (it
 * refuses and changes nothing), so the status and message are that call's.
 * kvcf_release_do: those steps (a kvc_status, or -1 with a Python error); release_row and
 * release_req are its Python entries. */
static int kvcf_release_do(void *alloc, void *flow, void *pool, int32_t row, int64_t committed, int64_t start,
                           int64_t end, int64_t *buf) {
  int st = 0;
  /* Unsigned difference: end - start in int64 may overflow for hostile values (the row
   * width check of kvc_flow_row_slots comes later). */
  const uint64_t span = start < end ? (uint64_t)end - (uint64_t)start : 0;
  if (span > (uint64_t)PY_SSIZE_T_MAX / sizeof(int64_t)) {
    PyErr_SetString(PyExc_OverflowError, "release_row(): tail too long");
    return -1;
  }
  const size_t nc = committed > 0 ? (size_t)committed : 0, nt = (size_t)span;
  if (nt > kvcf_tail_cap) {
    size_t cap = nt > 2 * kvcf_tail_cap ? nt : 2 * kvcf_tail_cap;
    int64_t *p = PyMem_RawRealloc(kvcf_tail, cap * sizeof *p);
    if (!p) {
      PyErr_NoMemory();
      return -1;
    }
    kvcf_tail = p;
    kvcf_tail_cap = cap;
  }
  if (nc) st = kvcf_row_slots(flow, row, 0, committed, buf);
  if (st == 0 && nt) st = kvcf_row_slots(flow, row, start, end, kvcf_tail);
  if (st == 0 && !kvcf_row_held(pool, row)) st = kvcf_row_free(pool, row); /* refused: its status */
  /* One list needs no check: a refused free changes nothing, and the row is known held.
   * The tail exists only after over-allocation, so the common release pays nothing. */
  if (st == 0 && nc && nt) {
    const int64_t *lists[2] = {buf, kvcf_tail};
    const size_t counts[2] = {nc, nt};
    st = kvcf_check_free(alloc, lists, counts, 2);
  }
  /* Checked: none of these is refused now (the row stays held across the frees). */
  if (st == 0 && nc) st = kvcf_free(alloc, buf, nc);
  if (st == 0 && nt) st = kvcf_free(alloc, kvcf_tail, nt);
  if (st == 0) st = kvcf_row_free(pool, row);
  return st;
}

static int kvcf_release_bound(void) {
  if (kvcf_check_free && kvcf_row_held) return 0;
  PyErr_SetString(PyExc_RuntimeError, "release_row() needs bind_adapter() with its check functions");
  return -1;
}

static PyObject *kvcf_release_row(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  void *alloc, *flow, *pool, *buf;
  int32_t row;
  int64_t committed, start, end;
  (void)self;
  if (kvcf_nargs(nargs, 8, "release_row") || kvcf_adapter_bound() || kvcf_addr(args[0], &alloc) ||
      kvcf_addr(args[1], &flow) || kvcf_addr(args[2], &pool) || kvcf_i32(args[3], &row) ||
      kvcf_i64(args[4], &committed) || kvcf_i64(args[5], &start) || kvcf_i64(args[6], &end) ||
      kvcf_addr(args[7], &buf) || kvcf_release_bound())
    return NULL;
  const int st = kvcf_release_do(alloc, flow, pool, row, committed, start, end, buf);
  return st < 0 ? NULL : PyLong_FromLong(st);
}

/* row_free(pool, row) -> kvc_status (kvc_req_to_token_pool_free). */
static PyObject *kvcf_row_free_py(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  void *pool;
  int32_t row;
  (void)self;
  if (kvcf_nargs(nargs, 2, "row_free") || kvcf_adapter_bound() || kvcf_addr(args[0], &pool) || kvcf_i32(args[1], &row))
    return NULL;
  return PyLong_FromLong(kvcf_row_free(pool, row));
}

/* radix_match(cache, ns, tokens, n, out) -> kvc_status (tokens: address of n int32). */
static PyObject *kvcf_radix_match(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  void *cache, *tokens, *out;
  unsigned long long ns;
  int64_t n;
  (void)self;
  if (kvcf_nargs(nargs, 5, "radix_match") || kvcf_adapter_bound() || kvcf_addr(args[0], &cache)) return NULL;
  ns = PyLong_AsUnsignedLongLong(args[1]);
  if (ns == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
  if (kvcf_addr(args[2], &tokens) || kvcf_i64(args[3], &n) || kvcf_addr(args[4], &out)) return NULL;
  return PyLong_FromLong(kvcf_match(cache, (uint64_t)ns, tokens, n, out));
}

/* Converts the ints of `list` into out[0:n) (int32; OverflowError outside int32, TypeError
 * for a non-integer, as array('i')). */
/* An exact int of one digit ("compact") read in place, without a function call: *out set,
 * 1 returned; 0 for anything else (then the general path converts it). A digit is 30 bits
 * (15 on some builds), so a compact value always fits int32: no range check. CPython 3.12+
 * (lv_tag through PyUnstable_Long_IsCompact / _CompactValue) and 3.11 (ob_size in {-1, 0,
 * 1} times the digit: 0 for zero whatever its digit holds); older versions always take the
 * general path. A token list's conversion is most of a list-key match (issue 18 item 4,
 * bench/python/adapter_match_steps.py): about 1.5 ns a token this way, 26 through
 * array('i', list). */
static inline int kvcf_small_int(PyObject *v, int32_t *out) {
#if PY_VERSION_HEX >= 0x030C0000
  if (Py_IS_TYPE(v, &PyLong_Type) && PyUnstable_Long_IsCompact((PyLongObject *)v)) {
    *out = (int32_t)PyUnstable_Long_CompactValue((PyLongObject *)v);
    return 1;
  }
#elif PY_VERSION_HEX >= 0x030B0000
  if (Py_IS_TYPE(v, &PyLong_Type)) {
    const Py_ssize_t size = Py_SIZE(v);
    if ((size_t)(size + 1) <= 2u) {
      *out = (int32_t)(size * (Py_ssize_t)((PyLongObject *)v)->ob_digit[0]);
      return 1;
    }
  }
#else
  (void)v;
  (void)out;
#endif
  return 0;
}

static int kvcf_list_i32(PyObject *list, int32_t *out, Py_ssize_t n) {
  PyObject *const *items = ((PyListObject *)list)->ob_item;
  Py_ssize_t i = 0;
  /* Four at a time while all four are compact: the common case without a per-item exit. */
  for (; i + 4 <= n; i += 4) {
    int32_t v0 = 0, v1 = 0, v2 = 0, v3 = 0;
    if (!(kvcf_small_int(items[i], &v0) & kvcf_small_int(items[i + 1], &v1) & kvcf_small_int(items[i + 2], &v2) &
          kvcf_small_int(items[i + 3], &v3)))
      break;
    out[i] = v0, out[i + 1] = v1, out[i + 2] = v2, out[i + 3] = v3;
  }
  /* Item by item from the list itself: a general conversion may run __index__, which may
   * resize the list. */
  for (; i < n; i++) {
    if (i >= PyList_GET_SIZE(list)) {
      PyErr_SetString(PyExc_RuntimeError, "the token list shrank while it was converted");
      return -1;
    }
    PyObject *v = PyList_GET_ITEM(list, i);
    if (kvcf_small_int(v, &out[i])) continue;
    if (!PyLong_Check(v) && !PyIndex_Check(v)) {
      PyErr_Format(PyExc_TypeError, "token %zd is not an integer", i);
      return -1;
    }
    if (kvcf_i32(v, &out[i])) return -1;
  }
  return 0;
}

/* radix_match_list(cache, ns, tokens, out) -> kvc_status: tokens a list of ints, converted
 * to int32 (OverflowError outside int32, TypeError for a non-integer, as array('i')). */
static PyObject *kvcf_radix_match_list(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  void *cache, *out;
  unsigned long long ns;
  PyObject *list;
  Py_ssize_t n;
  (void)self;
  if (kvcf_nargs(nargs, 4, "radix_match_list") || kvcf_adapter_bound() || kvcf_addr(args[0], &cache)) return NULL;
  ns = PyLong_AsUnsignedLongLong(args[1]);
  if (ns == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
  list = args[2];
  if (!PyList_Check(list)) {
    PyErr_SetString(PyExc_TypeError, "radix_match_list() needs a list of tokens");
    return NULL;
  }
  if (kvcf_addr(args[3], &out)) return NULL;
  n = PyList_GET_SIZE(list);
  if ((size_t)n > kvcf_tok_cap) {
    size_t cap = (size_t)n > 2 * kvcf_tok_cap ? (size_t)n : 2 * kvcf_tok_cap;
    int32_t *p = PyMem_RawRealloc(kvcf_tok, cap * sizeof *p);
    if (!p) return PyErr_NoMemory();
    kvcf_tok = p;
    kvcf_tok_cap = cap;
  }
  if (kvcf_list_i32(list, kvcf_tok, n)) return NULL;
  return PyLong_FromLong(kvcf_match(cache, (uint64_t)ns, kvcf_tok, (int64_t)n, out));
}

/* radix_match_kept(cache, ns, tokens, out, results) -> (len, slots, node, kept): radix_match_list,
 * then RadixCache's kept-result lookup in C: results maps (node, len) to (bytearray of the
 * slots the tensor was built from, tensor); kept is that tensor when the tree still holds
 * exactly those slots, else None. Saves the adapter the reads of the kvc_radix_match
 * fields through ctypes, the key tuple and the memeq call per match (a list key is what
 * SGLang's scheduler passes). out: the kvc_radix_match the call fills (its layout is
 * mirrored here: len, slots, node). */
typedef struct kvcf_match_out {
  int64_t len;
  const int64_t *slots;
  void *node;
  int32_t copied, reserved_;
} kvcf_match_out;

/* After a successful match into m: *node = the matched node as an int (None at the root;
 * a new reference), *kept = the kept tensor of (node, len) in results when its slots are
 * still exactly the tree's, else None (borrowed). 0, or -1 with a Python error. */
static int kvcf_kept_lookup(const kvcf_match_out *m, PyObject *results, PyObject **node, PyObject **kept) {
  PyObject *key, *ent, *len;
  *kept = Py_None;
  *node = m->node ? PyLong_FromVoidPtr(m->node) : Py_NewRef(Py_None);
  if (!*node) return -1;
  if (m->len <= 0) return 0;
  len = PyLong_FromLongLong((long long)m->len);
  key = len ? PyTuple_Pack(2, *node, len) : NULL;
  Py_XDECREF(len);
  if (!key) goto fail;
  ent = PyDict_GetItemWithError(results, key); /* borrowed */
  Py_DECREF(key);
  if (!ent && PyErr_Occurred()) goto fail;
  if (ent && PyTuple_Check(ent) && PyTuple_GET_SIZE(ent) == 2 && PyByteArray_Check(PyTuple_GET_ITEM(ent, 0))) {
    PyObject *buf = PyTuple_GET_ITEM(ent, 0);
    if (PyByteArray_GET_SIZE(buf) == (Py_ssize_t)(8 * m->len) &&
        memcmp(PyByteArray_AS_STRING(buf), m->slots, (size_t)(8 * m->len)) == 0)
      *kept = PyTuple_GET_ITEM(ent, 1);
  }
  return 0;
fail:
  Py_CLEAR(*node);
  return -1;
}

static PyObject *kvcf_radix_match_kept(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  kvcf_match_out *m;
  PyObject *res, *node, *kept;
  if (kvcf_nargs(nargs, 5, "radix_match_kept")) return NULL;
  if (!PyDict_Check(args[4])) {
    PyErr_SetString(PyExc_TypeError, "radix_match_kept() needs a dict of kept results");
    return NULL;
  }
  res = kvcf_radix_match_list(self, args, 4);
  if (!res) return NULL;
  long st = PyLong_AsLong(res);
  Py_DECREF(res);
  if (st == -1 && PyErr_Occurred()) return NULL;
  if (st != 0) return PyLong_FromLong(st); /* the caller raises from the status */
  if (kvcf_addr(args[3], (void **)&m) || kvcf_kept_lookup(m, args[4], &node, &kept)) return NULL;
  return Py_BuildValue("(LKNO)", (long long)m->len, (unsigned long long)(uintptr_t)m->slots, node, kept);
}

/* match_prefix(mc, params) -> MatchResult, (len, slots, node), a kvc_status int, or None:
 * RadixCache.match_prefix in one call (issue 18 item 4: the Python around radix_match_kept,
 * its attribute walk and the dataclass __init__, was about as long as the match). mc is
 * the cache's tuple (tree handle, address of its kvc_radix_match, kept-results dict, empty
 * result, MatchResult class), built once. params: SGLang's MatchPrefixParams, a RadixKey,
 * or the tokens (key = getattr(params, "key", params), tokens = getattr(key, "token_ids",
 * key), extra_key hashed as the adapter's _ns does). Tokens: a list (converted as
 * radix_match_list does), or a C-contiguous buffer of int32 (format "i": array('i'), a NumPy
 * int32 vector; read in place). Returns None for other tokens (the caller's general path),
 * a status on a failed match (the caller raises), MatchResult(kept or empty, node, node)
 * when no new tensor is needed, else (len, slots, node) for the caller to build it. The
 * MatchResult is made as the dataclass' __init__ makes it (object.__new__, then its four
 * fields set in order); the caller passes the class only if it has no __post_init__. */
static PyObject *kvcf_s_key, *kvcf_s_tokens, *kvcf_s_extra, *kvcf_s_f[4], *kvcf_zero, *kvcf_no_args;

static int kvcf_opt_attr(PyObject *o, PyObject *name, PyObject **out) {
#if PY_VERSION_HEX >= 0x030D0000
  return PyObject_GetOptionalAttr(o, name, out);
#else
  return _PyObject_LookupAttr(o, name, out);
#endif
}

static int kvcf_match_names(void) {
  static const char *const f[4] = {"device_indices", "last_device_node", "last_host_node", "host_hit_length"};
  if (kvcf_no_args) return 0;
  if (!(kvcf_s_key = PyUnicode_InternFromString("key")) || !(kvcf_s_tokens = PyUnicode_InternFromString("token_ids")) ||
      !(kvcf_s_extra = PyUnicode_InternFromString("extra_key")) || !(kvcf_zero = PyLong_FromLong(0)))
    return -1;
  for (int i = 0; i < 4; i++)
    if (!(kvcf_s_f[i] = PyUnicode_InternFromString(f[i]))) return -1;
  return (kvcf_no_args = PyTuple_New(0)) ? 0 : -1;
}

static PyObject *kvcf_match_result(PyObject *cls, PyObject *indices, PyObject *node) {
  PyTypeObject *t = (PyTypeObject *)cls;
  PyObject *r = t->tp_new(t, kvcf_no_args, NULL);
  if (!r) return NULL;
  PyObject *const v[4] = {indices, node, node, kvcf_zero};
  for (int i = 0; i < 4; i++)
    if (PyObject_SetAttr(r, kvcf_s_f[i], v[i]) < 0) {
      Py_DECREF(r);
      return NULL;
    }
  return r;
}

/* The tokens of a match_prefix key: 1 (a list, converted into kvcf_tok), 2 (an int32
 * buffer, *view held), 0 (neither: the caller's general path), -1 (a Python error). */
static int kvcf_key_tokens(PyObject *toks, const int32_t **p, Py_ssize_t *n, Py_buffer *view) {
  if (PyList_CheckExact(toks)) {
    *n = PyList_GET_SIZE(toks);
    if ((size_t)*n > kvcf_tok_cap) {
      size_t cap = (size_t)*n > 2 * kvcf_tok_cap ? (size_t)*n : 2 * kvcf_tok_cap;
      int32_t *q = PyMem_RawRealloc(kvcf_tok, cap * sizeof *q);
      if (!q) {
        PyErr_NoMemory();
        return -1;
      }
      kvcf_tok = q;
      kvcf_tok_cap = cap;
    }
    if (kvcf_list_i32(toks, kvcf_tok, *n)) return -1;
    *p = kvcf_tok;
    return 1;
  }
  if (!PyObject_CheckBuffer(toks)) return 0;
  if (PyObject_GetBuffer(toks, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
    PyErr_Clear(); /* not one this path reads: the general path decides */
    return 0;
  }
  const char *f = view->format ? view->format : "B";
  if (view->itemsize != 4 || view->ndim != 1 || (strcmp(f, "i") && strcmp(f, "@i") && strcmp(f, "=i"))) {
    PyBuffer_Release(view);
    return 0;
  }
  *p = view->buf;
  *n = view->shape[0];
  return 2;
}

static PyObject *kvcf_match_prefix(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  PyObject *mc, *k, *toks, *extra = NULL, *node, *kept, *out;
  Py_buffer view;
  const int32_t *tp = NULL;
  Py_ssize_t nt = 0;
  uint64_t ns = 0;
  void *cache;
  kvcf_match_out *m;
  (void)self;
  if (kvcf_nargs(nargs, 2, "match_prefix") || kvcf_adapter_bound() || kvcf_match_names()) return NULL;
  mc = args[0];
  if (!PyTuple_Check(mc) || PyTuple_GET_SIZE(mc) != 5 || !PyDict_Check(PyTuple_GET_ITEM(mc, 2)) ||
      !PyType_Check(PyTuple_GET_ITEM(mc, 4))) {
    PyErr_SetString(PyExc_TypeError, "match_prefix() needs the cache's 5-tuple");
    return NULL;
  }
  if (kvcf_addr(PyTuple_GET_ITEM(mc, 0), &cache) || kvcf_addr(PyTuple_GET_ITEM(mc, 1), (void **)&m)) return NULL;
  if (kvcf_opt_attr(args[1], kvcf_s_key, &k) < 0) return NULL;
  if (!k) k = Py_NewRef(args[1]);
  if (kvcf_opt_attr(k, kvcf_s_tokens, &toks) < 0) {
    Py_DECREF(k);
    return NULL;
  }
  if (!toks) toks = Py_NewRef(k);
  if (toks != k && kvcf_opt_attr(k, kvcf_s_extra, &extra) < 0) {
    Py_DECREF(k);
    Py_DECREF(toks);
    return NULL;
  }
  Py_DECREF(k);
  if (extra && extra != Py_None) { /* the adapter's _ns: hash(extra) & (2^64 - 1) or 1 */
    const Py_hash_t h = PyObject_Hash(extra);
    if (h == -1) {
      Py_DECREF(extra);
      Py_DECREF(toks);
      return NULL;
    }
    ns = (uint64_t)h;
    if (!ns) ns = 1;
  }
  Py_XDECREF(extra);
  const int kind = kvcf_key_tokens(toks, &tp, &nt, &view);
  int st = kind > 0 ? kvcf_match(cache, ns, tp, (int64_t)nt, m) : 0;
  if (kind == 2) PyBuffer_Release(&view);
  Py_DECREF(toks);
  if (kind < 0) return NULL;
  if (kind == 0) Py_RETURN_NONE;
  if (st != 0) return PyLong_FromLong(st); /* the caller raises from the status */
  if (kvcf_kept_lookup(m, PyTuple_GET_ITEM(mc, 2), &node, &kept)) return NULL;
  if (kept != Py_None) out = kvcf_match_result(PyTuple_GET_ITEM(mc, 4), kept, node);
  else if (m->len == 0) out = kvcf_match_result(PyTuple_GET_ITEM(mc, 4), PyTuple_GET_ITEM(mc, 3), node);
  else out = Py_BuildValue("(LKO)", (long long)m->len, (unsigned long long)(uintptr_t)m->slots, node);
  Py_DECREF(node);
  return out;
}

/* alloc(swa, alloc, n, out_host, out_dev, stream) -> kvc_status (kvc_allocator_alloc
 * writes out_host only and ignores out_dev / stream). */
static PyObject *kvcf_alloc_slots(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  void *alloc, *oh, *od, *stream;
  int64_t n;
  int swa;
  (void)self;
  if (kvcf_nargs(nargs, 6, "alloc") || kvcf_adapter_bound() || kvcf_flag(args[0], &swa) || kvcf_addr(args[1], &alloc) ||
      kvcf_i64(args[2], &n) || kvcf_addr(args[3], &oh) || kvcf_addr(args[4], &od) || kvcf_addr(args[5], &stream))
    return NULL;
  return PyLong_FromLong(swa ? kvcf_swa_alloc(alloc, n, oh, od, stream) : kvcf_alloc(alloc, n, oh));
}

/* rows_alloc(pool, reqs, rows) -> kvc_status, or None when some request already has a
 * req_pool_idx (the caller's Python path checks those). reqs: a list of n requests; rows:
 * a writable buffer of at least n int32. All-new requests: rows zeroed, one
 * kvc_req_to_token_pool_alloc, then req.req_pool_idx = rows[i] for each (as
 * ReqToTokenPool.alloc does, without a Python attribute walk). */
static PyObject *kvcf_s_row; /* "req_pool_idx", interned once */

static PyObject *kvcf_rows_alloc_py(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  void *pool;
  PyObject *reqs;
  Py_buffer view;
  Py_ssize_t n;
  int st;
  (void)self;
  if (kvcf_nargs(nargs, 3, "rows_alloc") || kvcf_adapter_bound() || kvcf_addr(args[0], &pool)) return NULL;
  reqs = args[1];
  if (!PyList_Check(reqs)) {
    PyErr_SetString(PyExc_TypeError, "rows_alloc() needs a list of requests");
    return NULL;
  }
  if (!kvcf_s_row && !(kvcf_s_row = PyUnicode_InternFromString("req_pool_idx"))) return NULL;
  n = PyList_GET_SIZE(reqs);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *v = PyObject_GetAttr(PyList_GET_ITEM(reqs, i), kvcf_s_row);
    if (!v) return NULL;
    Py_DECREF(v); /* only compared with None */
    if (v != Py_None) Py_RETURN_NONE;
  }
  if (PyObject_GetBuffer(args[2], &view, PyBUF_WRITABLE) < 0) return NULL;
  if (view.len < (Py_ssize_t)((size_t)n * sizeof(int32_t))) {
    PyBuffer_Release(&view);
    PyErr_SetString(PyExc_ValueError, "rows_alloc(): rows buffer shorter than the requests");
    return NULL;
  }
  int32_t *rows = view.buf;
  memset(rows, 0, (size_t)n * sizeof *rows);
  st = kvcf_rows_alloc(pool, (size_t)n, rows);
  for (Py_ssize_t i = 0; st == 0 && i < n; i++) {
    PyObject *v = PyLong_FromLong(rows[i]);
    if (!v || PyObject_SetAttr(PyList_GET_ITEM(reqs, i), kvcf_s_row, v) < 0) {
      Py_XDECREF(v);
      PyBuffer_Release(&view);
      return NULL;
    }
    Py_DECREF(v);
  }
  PyBuffer_Release(&view);
  return PyLong_FromLong(st);
}

/* extend_new(swa, alloc, pool, reqs, pre, seq, prefix, out_host, out_dev, stream, rows_dev)
 * -> bytearray, (stage, status) or None: alloc_for_extend of a batch of new requests in
 * one call (issue 18 item 4: the Python around rows_alloc, alloc_extend and widen_i32 was
 * about a third of the adapter's extend). reqs: a non-empty list of requests; the other
 * arguments as alloc_extend's (pre may be a list; rows_dev None: no rows written by the
 * launch). None when some request already has a req_pool_idx: nothing is done (the
 * caller's general path takes the kept rows). Otherwise kvc_req_to_token_pool_alloc of
 * len(reqs) rows, req.req_pool_idx set on each, the extend with those rows, and the rows as
 * a bytearray of int64 (req_pool_indices_cpu). A refused row alloc returns (0, status)
 * and changes nothing; a refused extend returns (1, status), the rows kept by the requests
 * (as SGLang's alloc_for_extend leaves them). Every argument is converted and the result
 * allocated before the rows are taken; a request that refuses its req_pool_idx gets the
 * rows given back and the earlier requests' req_pool_idx reset to None. */
static int32_t *kvcf_rows32; /* the rows, int32, for the library call (GIL-serialized) */
static size_t kvcf_rows32_cap;

/* After a failed req.req_pool_idx write at i: the earlier requests back to None, every
 * row given back; the pending exception kept. */
static void kvcf_rows_undo(PyObject *reqs, Py_ssize_t i, void *pool, const int32_t *rows, Py_ssize_t n) {
#if PY_VERSION_HEX >= 0x030C0000
  PyObject *exc = PyErr_GetRaisedException();
#else
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
#endif
  for (Py_ssize_t j = 0; j < i; j++)
    if (PyObject_SetAttr(PyTuple_GET_ITEM(reqs, j), kvcf_s_row, Py_None) < 0) PyErr_Clear();
  for (Py_ssize_t j = 0; j < n; j++) (void)kvcf_row_free(pool, rows[j]);
#if PY_VERSION_HEX >= 0x030C0000
  PyErr_SetRaisedException(exc);
#else
  PyErr_Restore(et, ev, tb);
#endif
}

static PyObject *kvcf_extend_new(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  void *alloc, *pool, *pre, *seq, *prefix, *oh, *od, *stream, *rd;
  PyObject *reqs, *out = NULL, *res = NULL;
  Py_ssize_t n, i;
  int swa, st;
  (void)self;
  if (kvcf_nargs(nargs, 11, "extend_new") || kvcf_adapter_bound()) return NULL;
  if (!PyList_Check(args[3]) || PyList_GET_SIZE(args[3]) == 0) {
    PyErr_SetString(PyExc_TypeError, "extend_new() needs a non-empty list of requests");
    return NULL;
  }
  if (!kvcf_s_row && !(kvcf_s_row = PyUnicode_InternFromString("req_pool_idx"))) return NULL;
  /* A snapshot: an attribute read may run Python code that changes the list. */
  if (!(reqs = PyList_AsTuple(args[3]))) return NULL;
  n = PyTuple_GET_SIZE(reqs);
  for (i = 0; i < n; i++) {
    PyObject *v = PyObject_GetAttr(PyTuple_GET_ITEM(reqs, i), kvcf_s_row);
    if (!v) goto done;
    Py_DECREF(v); /* only compared with None */
    if (v != Py_None) {
      res = Py_NewRef(Py_None);
      goto done;
    }
  }
  if (kvcf_flag(args[0], &swa) || kvcf_addr(args[1], &alloc) || kvcf_addr(args[2], &pool) ||
      (PyList_Check(args[4]) ? kvcf_list_i64(args[4], (size_t)n, &pre) : kvcf_addr(args[4], &pre)) ||
      kvcf_addr(args[5], &seq) || kvcf_addr(args[6], &prefix) || kvcf_addr(args[7], &oh) || kvcf_addr(args[8], &od) ||
      kvcf_addr(args[9], &stream) || kvcf_addr(args[10], &rd))
    goto done;
  const kvcf_aext_ex_fn ex = kvcf_aext_ex[swa ? 1 : 0];
  if (rd && !ex) {
    PyErr_SetString(PyExc_RuntimeError, "extend_new(): rows_dev needs bind_adapter() with the extend_ex functions");
    goto done;
  }
  if ((size_t)n > kvcf_rows32_cap) {
    size_t cap = (size_t)n > 2 * kvcf_rows32_cap ? (size_t)n : 2 * kvcf_rows32_cap;
    int32_t *p = PyMem_RawRealloc(kvcf_rows32, cap * sizeof *p);
    if (!p) {
      PyErr_NoMemory();
      goto done;
    }
    kvcf_rows32 = p;
    kvcf_rows32_cap = cap;
  }
  if (!(out = PyByteArray_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t)))) goto done;
  int32_t *rows = kvcf_rows32;
  memset(rows, 0, (size_t)n * sizeof *rows);
  st = kvcf_rows_alloc(pool, (size_t)n, rows);
  if (st) {
    res = Py_BuildValue("(ii)", 0, st);
    goto done;
  }
  for (i = 0; i < n; i++) {
    PyObject *v = PyLong_FromLong(rows[i]);
    if (!v || PyObject_SetAttr(PyTuple_GET_ITEM(reqs, i), kvcf_s_row, v) < 0) {
      Py_XDECREF(v);
      kvcf_rows_undo(reqs, i, pool, rows, n);
      goto done;
    }
    Py_DECREF(v);
  }
  const int64_t *const *pfx = prefix;
  if (rd) {
    const kvcf_extend_args x = {(size_t)n, pre, seq, NULL, pool, rows, pfx, oh, od, rd, stream};
    st = ex(alloc, &x);
  } else {
    st = kvcf_aext[swa ? 1 : 0](alloc, (size_t)n, pre, seq, NULL, pool, rows, pfx, oh, od, stream);
  }
  if (st) {
    res = Py_BuildValue("(ii)", 1, st);
    goto done;
  }
  int64_t *d = (int64_t *)(void *)PyByteArray_AS_STRING(out);
  for (i = 0; i < n; i++) d[i] = rows[i];
  res = out;
  out = NULL;
done:
  Py_XDECREF(out);
  Py_DECREF(reqs);
  return res;
}

/* release_req(plan, req) -> kvc_status, or None when req.req_pool_idx is None (nothing
 * read further; the caller's general path). release_kv_cache of a ChunkCache over a plain
 * allocator in one call (issue 18 item 4), as the adapter's Python did it around
 * release_row: committed = req.pop_committed_kv_cache() (req.kv_committed_len without
 * it), (start, end) = req.pop_overallocated_kv_cache() (the two lengths without it),
 * start rounded up to the page, then release_row's steps with the committed slots in a
 * scratch of the extension, and req.req_pool_idx = None once they succeeded. plan: the
 * cache's (allocator, flow, pool handles, page size), built once. */
static PyObject *kvcf_s_pop_c, *kvcf_s_pop_o, *kvcf_s_kvc, *kvcf_s_kva;
static int64_t *kvcf_rel_buf; /* the committed slots (grown, never shrunk; GIL-serialized) */
static size_t kvcf_rel_cap;

/* req.<name>() when req has it (*done = 1), else *done = 0; NULL with a Python error. */
static PyObject *kvcf_call_opt(PyObject *req, PyObject *name, int *done) {
  PyObject *f, *r;
  *done = 0;
  if (kvcf_opt_attr(req, name, &f) < 0) return NULL;
  if (!f) return Py_NewRef(Py_None);
  r = PyObject_CallNoArgs(f);
  Py_DECREF(f);
  *done = r != NULL;
  return r;
}

static int kvcf_attr_i64(PyObject *o, PyObject *name, int64_t *out) {
  PyObject *v = PyObject_GetAttr(o, name);
  if (!v) return -1;
  const int bad = kvcf_i64(v, out);
  Py_DECREF(v);
  return bad;
}

/* (start, end) of pop_overallocated_kv_cache's result: unpacked as `start, end = r`. */
static int kvcf_unpack2(PyObject *r, int64_t *a, int64_t *b) {
  PyObject *t = PyTuple_CheckExact(r) ? Py_NewRef(r) : PySequence_Tuple(r);
  int bad;
  if (!t) return -1;
  if (PyTuple_GET_SIZE(t) != 2) {
    if (PyTuple_GET_SIZE(t) < 2)
      PyErr_Format(PyExc_ValueError, "not enough values to unpack (expected 2, got %zd)", PyTuple_GET_SIZE(t));
    else PyErr_SetString(PyExc_ValueError, "too many values to unpack (expected 2)");
    Py_DECREF(t);
    return -1;
  }
  bad = kvcf_i64(PyTuple_GET_ITEM(t, 0), a) || kvcf_i64(PyTuple_GET_ITEM(t, 1), b);
  Py_DECREF(t);
  return bad ? -1 : 0;
}

static PyObject *kvcf_release_req(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  void *alloc, *flow, *pool;
  PyObject *plan, *req, *v, *r;
  int32_t row;
  int64_t committed, start, end, ps;
  int done, st;
  (void)self;
  if (kvcf_nargs(nargs, 2, "release_req") || kvcf_adapter_bound() || kvcf_release_bound()) return NULL;
  plan = args[0];
  req = args[1];
  if (!PyTuple_Check(plan) || PyTuple_GET_SIZE(plan) != 4) {
    PyErr_SetString(PyExc_TypeError, "release_req() needs the cache's 4-tuple");
    return NULL;
  }
  if (kvcf_addr(PyTuple_GET_ITEM(plan, 0), &alloc) || kvcf_addr(PyTuple_GET_ITEM(plan, 1), &flow) ||
      kvcf_addr(PyTuple_GET_ITEM(plan, 2), &pool) || kvcf_i64(PyTuple_GET_ITEM(plan, 3), &ps))
    return NULL;
  if (ps < 1) {
    PyErr_SetString(PyExc_ValueError, "release_req(): page size < 1");
    return NULL;
  }
  if (!kvcf_s_row && !(kvcf_s_row = PyUnicode_InternFromString("req_pool_idx"))) return NULL;
  if (!kvcf_s_pop_c && (!(kvcf_s_pop_c = PyUnicode_InternFromString("pop_committed_kv_cache")) ||
                        !(kvcf_s_pop_o = PyUnicode_InternFromString("pop_overallocated_kv_cache")) ||
                        !(kvcf_s_kvc = PyUnicode_InternFromString("kv_committed_len")) ||
                        !(kvcf_s_kva = PyUnicode_InternFromString("kv_allocated_len")))) {
    Py_CLEAR(kvcf_s_pop_c);
    return NULL;
  }
  if (!(v = PyObject_GetAttr(req, kvcf_s_row))) return NULL;
  if (v == Py_None) return v;
  st = kvcf_i32(v, &row);
  Py_DECREF(v);
  if (st) return NULL;
  /* The steps in the adapter's order: pop_committed_kv_cache, then the over-allocation. */
  if (!(r = kvcf_call_opt(req, kvcf_s_pop_c, &done))) return NULL;
  st = done ? kvcf_i64(r, &committed) : kvcf_attr_i64(req, kvcf_s_kvc, &committed);
  Py_DECREF(r);
  if (st) return NULL;
  if (!(r = kvcf_call_opt(req, kvcf_s_pop_o, &done))) return NULL;
  st = done ? kvcf_unpack2(r, &start, &end)
            : (kvcf_attr_i64(req, kvcf_s_kvc, &start) || kvcf_attr_i64(req, kvcf_s_kva, &end));
  Py_DECREF(r);
  if (st) return NULL;
  if (ps > 1) { /* -(-start // ps) * ps: start rounded up to the page */
    int64_t q = start / ps + (start % ps > 0);
    if (__builtin_mul_overflow(q, ps, &start)) {
      PyErr_SetString(PyExc_OverflowError, "release_req(): start out of int64 range");
      return NULL;
    }
  }
  const size_t nc = committed > 0 ? (size_t)committed : 0;
  if (nc > kvcf_rel_cap) {
    if (nc > (size_t)PY_SSIZE_T_MAX / sizeof(int64_t)) return PyErr_NoMemory();
    size_t cap = nc > 2 * kvcf_rel_cap ? nc : 2 * kvcf_rel_cap;
    int64_t *p = PyMem_RawRealloc(kvcf_rel_buf, cap * sizeof *p);
    if (!p) return PyErr_NoMemory();
    kvcf_rel_buf = p;
    kvcf_rel_cap = cap;
  }
  st = kvcf_release_do(alloc, flow, pool, row, committed, start, end, kvcf_rel_buf);
  if (st < 0) return NULL;
  if (st == 0 && PyObject_SetAttr(req, kvcf_s_row, Py_None) < 0) return NULL;
  return PyLong_FromLong(st);
}

/* fill_i32(dst, a, b, n) -> None: dst[0:n) = (a + b)[0:n) as int32, a and b lists (b may
 * be None), n <= len(a) + len(b); dst a writable buffer of at least 4 n bytes (an
 * array('i') of n). A request's token ids for the radix cache without a Python list. */
static PyObject *kvcf_fill_i32(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  PyObject *a, *b;
  Py_buffer view;
  Py_ssize_t n, na, nb;
  int bad;
  (void)self;
  if (kvcf_nargs(nargs, 4, "fill_i32")) return NULL;
  a = args[1];
  b = args[2];
  if (!PyList_Check(a) || (b != Py_None && !PyList_Check(b))) {
    PyErr_SetString(PyExc_TypeError, "fill_i32() needs lists of tokens");
    return NULL;
  }
  n = PyLong_AsSsize_t(args[3]);
  if (n == -1 && PyErr_Occurred()) return NULL;
  na = PyList_GET_SIZE(a);
  nb = b == Py_None ? 0 : PyList_GET_SIZE(b);
  if (n < 0 || n > na + nb) {
    PyErr_SetString(PyExc_ValueError, "fill_i32(): n outside [0, len(a) + len(b)]");
    return NULL;
  }
  if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) return NULL;
  if (view.len < (Py_ssize_t)((size_t)n * sizeof(int32_t))) {
    PyBuffer_Release(&view);
    PyErr_SetString(PyExc_ValueError, "fill_i32(): dst shorter than n int32");
    return NULL;
  }
  int32_t *dst = view.buf;
  Py_ssize_t ka = n < na ? n : na;
  bad = kvcf_list_i32(a, dst, ka) || (n > ka && kvcf_list_i32(b, dst + ka, n - ka));
  PyBuffer_Release(&view);
  if (bad) return NULL;
  Py_RETURN_NONE;
}

/* memcpy(dst, src, nbytes) -> None: host memory to host memory. */
static PyObject *kvcf_memcpy(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  void *dst, *src;
  size_t nb;
  (void)self;
  if (kvcf_nargs(nargs, 3, "memcpy") || kvcf_addr(args[0], &dst) || kvcf_addr(args[1], &src) || kvcf_size(args[2], &nb))
    return NULL;
  if (nb) {
    if (!dst || !src) {
      PyErr_SetString(PyExc_ValueError, "memcpy() of NULL");
      return NULL;
    }
    memcpy(dst, src, nb);
  }
  Py_RETURN_NONE;
}

/* copy_bytes(src, nbytes) -> bytearray: a new bytearray with the nbytes at src (host). The
 * adapter's fresh host result vectors are torch.frombuffer / np.frombuffer views of these:
 * one allocation and one memcpy, about a third of a torch.empty. */
static PyObject *kvcf_copy_bytes(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  void *src;
  size_t nb;
  (void)self;
  if (kvcf_nargs(nargs, 2, "copy_bytes") || kvcf_addr(args[0], &src) || kvcf_size(args[1], &nb)) return NULL;
  if (nb > (size_t)PY_SSIZE_T_MAX) return PyErr_NoMemory();
  if (nb && !src) {
    PyErr_SetString(PyExc_ValueError, "copy_bytes() of NULL");
    return NULL;
  }
  return PyByteArray_FromStringAndSize(nb ? (const char *)src : NULL, (Py_ssize_t)nb);
}

/* widen_i32(src, n) -> bytearray of n int64: the n int32 at src (a buffer or an address),
 * widened (request rows as SGLang's int64 req_pool_indices). */
static PyObject *kvcf_widen_i32(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  void *src;
  size_t n;
  PyObject *out;
  (void)self;
  if (kvcf_nargs(nargs, 2, "widen_i32") || kvcf_addr(args[0], &src) || kvcf_size(args[1], &n)) return NULL;
  if (n > (size_t)PY_SSIZE_T_MAX / sizeof(int64_t)) return PyErr_NoMemory();
  if (n && !src) {
    PyErr_SetString(PyExc_ValueError, "widen_i32() of NULL");
    return NULL;
  }
  out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(n * sizeof(int64_t)));
  if (!out) return NULL;
  int64_t *d = (int64_t *)(void *)PyByteArray_AS_STRING(out);
  const int32_t *s = src;
  for (size_t i = 0; i < n; i++) d[i] = s[i];
  return out;
}

/* memeq(a, b, nbytes) -> bool: memcmp(a, b, nbytes) == 0 (host; buffers or addresses). */
static PyObject *kvcf_memeq(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  void *a, *b;
  size_t nb;
  (void)self;
  if (kvcf_nargs(nargs, 3, "memeq") || kvcf_addr(args[0], &a) || kvcf_addr(args[1], &b) || kvcf_size(args[2], &nb))
    return NULL;
  if (nb && (!a || !b)) {
    PyErr_SetString(PyExc_ValueError, "memeq() of NULL");
    return NULL;
  }
  if (nb == 0 || memcmp(a, b, nb) == 0) Py_RETURN_TRUE;
  Py_RETURN_FALSE;
}

static PyMethodDef kvcf_methods[] = {
    {"bind", (PyCFunction)(void (*)(void))kvcf_bind, METH_FASTCALL,
     "bind(decode, extend, release): the library's function addresses"},
    {"flow_decode", (PyCFunction)(void (*)(void))kvcf_flow_decode, METH_FASTCALL,
     "kvc_flow_alloc_for_decode(flow, reqs, n, token_per_req, out, stream)"},
    {"flow_extend", (PyCFunction)(void (*)(void))kvcf_flow_extend, METH_FASTCALL,
     "kvc_flow_alloc_for_extend(flow, reqs, n, out, stream)"},
    {"flow_release", (PyCFunction)(void (*)(void))kvcf_flow_release, METH_FASTCALL,
     "kvc_flow_release(flow, reqs, n, is_insert, stream)"},
    {"bind_adapter", (PyCFunction)(void (*)(void))kvcf_bind_adapter, METH_FASTCALL,
     "bind_adapter(*addresses): kvcache.sglang's library functions"},
    {"alloc_decode", (PyCFunction)(void (*)(void))kvcf_alloc_decode, METH_FASTCALL,
     "[swa_]allocator_alloc_decode (seq = seq_src + 1 first when given)"},
    {"alloc_extend", (PyCFunction)(void (*)(void))kvcf_alloc_extend, METH_FASTCALL, "[swa_]allocator_alloc_extend"},
    {"free", (PyCFunction)(void (*)(void))kvcf_free_slots, METH_FASTCALL,
     "[swa_]allocator_free(swa, alloc, slots, n, stream)"},
    {"release_row", (PyCFunction)(void (*)(void))kvcf_release_row, METH_FASTCALL,
     "ChunkCache release: free committed, free the tail, release the row"},
    {"release_req", (PyCFunction)(void (*)(void))kvcf_release_req, METH_FASTCALL,
     "release_kv_cache of a ChunkCache request: its pops, release_row, req_pool_idx = None"},
    {"free_row", (PyCFunction)(void (*)(void))kvcf_free_row, METH_FASTCALL,
     "flow_row_slots into buf, then [swa_]allocator_free of them"},
    {"row_free", (PyCFunction)(void (*)(void))kvcf_row_free_py, METH_FASTCALL, "req_to_token_pool_free(pool, row)"},
    {"radix_match", (PyCFunction)(void (*)(void))kvcf_radix_match, METH_FASTCALL,
     "radix_cache_match_prefix(cache, ns, tokens, n, out)"},
    {"radix_match_list", (PyCFunction)(void (*)(void))kvcf_radix_match_list, METH_FASTCALL,
     "radix_cache_match_prefix of a list of int tokens"},
    {"radix_match_kept", (PyCFunction)(void (*)(void))kvcf_radix_match_kept, METH_FASTCALL,
     "radix_match_list, then the kept result of (node, len) when its slots are unchanged"},
    {"match_prefix", (PyCFunction)(void (*)(void))kvcf_match_prefix, METH_FASTCALL,
     "RadixCache.match_prefix of a list key: a MatchResult, or what the caller completes"},
    {"alloc", (PyCFunction)(void (*)(void))kvcf_alloc_slots, METH_FASTCALL,
     "[swa_]allocator_alloc(swa, alloc, n, out_host, out_dev, stream)"},
    {"rows_alloc", (PyCFunction)(void (*)(void))kvcf_rows_alloc_py, METH_FASTCALL,
     "req_to_token_pool_alloc for all-new requests, req_pool_idx set"},
    {"extend_new", (PyCFunction)(void (*)(void))kvcf_extend_new, METH_FASTCALL,
     "alloc_for_extend of new requests: rows_alloc, the extend, the rows as int64"},
    {"fill_i32", (PyCFunction)(void (*)(void))kvcf_fill_i32, METH_FASTCALL,
     "fill_i32(dst, a, b, n): dst[0:n) = (a + b)[0:n) as int32"},
    {"memcpy", (PyCFunction)(void (*)(void))kvcf_memcpy, METH_FASTCALL, "memcpy(dst, src, nbytes) of host memory"},
    {"copy_bytes", (PyCFunction)(void (*)(void))kvcf_copy_bytes, METH_FASTCALL,
     "copy_bytes(src, nbytes) -> a new bytearray of the nbytes at src"},
    {"widen_i32", (PyCFunction)(void (*)(void))kvcf_widen_i32, METH_FASTCALL,
     "widen_i32(src, n) -> bytearray of the n int32 at src as int64"},
    {"memeq", (PyCFunction)(void (*)(void))kvcf_memeq, METH_FASTCALL, "memeq(a, b, nbytes) -> memcmp == 0"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef kvcf_module = {PyModuleDef_HEAD_INIT,
                                         "_kvcfast",
                                         "Fast per-step calls for kvcache (optional).",
                                         -1,
                                         kvcf_methods,
                                         NULL,
                                         NULL,
                                         NULL,
                                         NULL};

PyMODINIT_FUNC PyInit__kvcfast(void);
PyMODINIT_FUNC PyInit__kvcfast(void) { return PyModule_Create(&kvcf_module); }
