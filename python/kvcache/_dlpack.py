"""DLPack producers: PyCapsules around DLManagedTensor / DLManagedTensorVersioned.

A consumer that passes max_version >= (1, 0) to __dlpack__ (NumPy >= 2, recent PyTorch)
gets a "dltensor_versioned" capsule (DLPack 1.x, writable: flags = 0); older consumers get
the legacy "dltensor" capsule (DLPack 0.8 DLManagedTensor). Either way the tensor struct
handed out is owned here and copies the DLTensor of the library's export (whose shape and
strides arrays stay alive until our deleter runs the library's deleter).

A capsule never consumed calls our deleter from its destructor; a consumer renames it
"used_dltensor[_versioned]" and calls the deleter itself when its array dies. The deleter
also drops the reference that keeps the owning pool (and its memory) alive, so a view
never outlives its buffer.
"""
import ctypes
import threading
from ctypes import c_void_p

from . import _ffi

_NAME = b"dltensor"
_NAME_V = b"dltensor_versioned"
_pyapi = ctypes.pythonapi
_pyapi.PyCapsule_New.restype = ctypes.py_object
_pyapi.PyCapsule_New.argtypes = [c_void_p, ctypes.c_char_p, c_void_p]
_pyapi.PyCapsule_IsValid.restype = ctypes.c_int
_pyapi.PyCapsule_IsValid.argtypes = [c_void_p, ctypes.c_char_p]
_pyapi.PyCapsule_GetPointer.restype = c_void_p
_pyapi.PyCapsule_GetPointer.argtypes = [c_void_p, ctypes.c_char_p]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", c_void_p), ("deleter", c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _ffi.DLTensor)]


_lock = threading.Lock()
_live = {}  # key -> (owner, library tensor address or None, library deleter, keepalive)
_next_key = [1]
_CFN = ctypes.CFUNCTYPE(None, c_void_p)


def _release(key):
    with _lock:
        entry = _live.pop(key, None)
    if entry is None:
        return
    owner, lib_tensor, lib_deleter, _keep = entry
    if lib_tensor and lib_deleter:
        _CFN(lib_deleter)(lib_tensor)
    if owner is not None:
        owner._release_export()


@_CFN
def _deleter_legacy(managed):
    _release(_ffi.DLManagedTensor.from_address(managed).manager_ctx)


@_CFN
def _deleter_versioned(managed):
    _release(DLManagedTensorVersioned.from_address(managed).manager_ctx)


@_CFN
def _destructor_legacy(capsule):
    # Runs when the capsule dies; only an unconsumed capsule still owns its tensor.
    if _pyapi.PyCapsule_IsValid(capsule, _NAME):
        _deleter_legacy(_pyapi.PyCapsule_GetPointer(capsule, _NAME))


@_CFN
def _destructor_versioned(capsule):
    if _pyapi.PyCapsule_IsValid(capsule, _NAME_V):
        _deleter_versioned(_pyapi.PyCapsule_GetPointer(capsule, _NAME_V))


def _addr(f):
    return ctypes.cast(f, c_void_p).value


def make_capsule(dl_tensor, owner, versioned, lib_tensor=None, keepalive=None):
    """A capsule for `dl_tensor` (a DLTensor copied into a struct owned here). With
    lib_tensor (a library DLManagedTensor*), its deleter runs when the capsule's tensor is
    deleted."""
    lib_deleter = None
    if lib_tensor:
        lib_deleter = _ffi.DLManagedTensor.from_address(lib_tensor).deleter
    if versioned:
        m = DLManagedTensorVersioned()
        m.version.major, m.version.minor = 1, 0
        m.flags = 0
        deleter, destructor, name = _deleter_versioned, _destructor_versioned, _NAME_V
    else:
        m = _ffi.DLManagedTensor()
        deleter, destructor, name = _deleter_legacy, _destructor_legacy, _NAME
    ctypes.memmove(ctypes.addressof(m.dl_tensor), ctypes.addressof(dl_tensor),
                   ctypes.sizeof(_ffi.DLTensor))
    with _lock:
        key = _next_key[0]
        _next_key[0] += 1
        _live[key] = (owner, lib_tensor, lib_deleter, (m, keepalive))
    m.manager_ctx = key
    m.deleter = _addr(deleter)
    if owner is not None:
        owner._acquire_export()
    return _pyapi.PyCapsule_New(ctypes.addressof(m), name, _addr(destructor))


def capsule_from_library(lib_tensor, owner, versioned):
    """Wraps a DLManagedTensor* returned by kvc_kv_pool_export_dlpack."""
    t = _ffi.DLManagedTensor.from_address(lib_tensor)
    return make_capsule(t.dl_tensor, owner, versioned, lib_tensor=lib_tensor)


def capsule_from_pointer(data, shape, dl_dtype, device, owner, versioned):
    """A tensor for memory the library exposes only as a pointer (req_to_token table,
    memory helpers). `device` is (device_type, device_id); row-major, contiguous."""
    ndim = len(shape)
    shp = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides = (ctypes.c_int64 * max(ndim, 1))()
    s = 1
    for i in range(ndim - 1, -1, -1):
        strides[i] = s
        s *= shape[i]
    t = _ffi.DLTensor()
    t.data = data
    t.device.device_type, t.device.device_id = device
    t.ndim = ndim
    t.dtype.code, t.dtype.bits, t.dtype.lanes = dl_dtype
    t.shape = ctypes.cast(shp, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    return make_capsule(t, owner, versioned, keepalive=(shp, strides))


def live_exports():
    """Number of DLPack tensors handed out and not yet deleted."""
    with _lock:
        return len(_live)
