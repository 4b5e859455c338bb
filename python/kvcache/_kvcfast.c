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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <stdint.h>

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

static PyMethodDef kvcf_methods[] = {{"bind", (PyCFunction)(void (*)(void))kvcf_bind, METH_FASTCALL,
                                      "bind(decode, extend, release): the library's function addresses"},
                                     {"flow_decode", (PyCFunction)(void (*)(void))kvcf_flow_decode, METH_FASTCALL,
                                      "kvc_flow_alloc_for_decode(flow, reqs, n, token_per_req, out, stream)"},
                                     {"flow_extend", (PyCFunction)(void (*)(void))kvcf_flow_extend, METH_FASTCALL,
                                      "kvc_flow_alloc_for_extend(flow, reqs, n, out, stream)"},
                                     {"flow_release", (PyCFunction)(void (*)(void))kvcf_flow_release, METH_FASTCALL,
                                      "kvc_flow_release(flow, reqs, n, is_insert, stream)"},
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
