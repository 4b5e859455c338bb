"""DLPack producers: PyCapsules around DLManagedTensor / DLManagedTensorVersioned.

A consumer that passes max_version >= (1, 0) to __dlpack__ (NumPy >= 2, recent PyTorch)
gets a "dltensor_versioned" capsule (DLPack 1.x, writable: flags = 0); older consumers get
the legacy "dltensor" capsule (DLPack 0.8 DLManagedTensor).

No Python code runs when a tensor dies. The capsule's destructor is the library's
kvc_dlpack_capsule_destructor and the tensor's deleter its kvc_dlpack_relay_deleter
(src/kv/dlpack_capsule.c): plain C, so a consumer that refuses a capsule (NumPy with
bfloat16) raises its own error instead of a SystemError from a callback run on its
error path. The relay deleter runs the library export's own deleter and sets a flag;
this module polls those flags (sweep(): at every export, live_exports() and close() of a
handle) to drop its bookkeeping and the reference that keeps the owning pool alive, so a
pool closed while views exist is destroyed at the first sweep after the last view dies.

FP4 buffers export the way PyTorch exports float4_e2m1fn_x2: code float4_e2m1fn, bits 4,
lanes 2, one element per packed byte (the library's own export counts values, lanes 1).
"""
import ctypes
import threading
from ctypes import c_void_p

from . import _ffi

_NAME = b"dltensor"
_NAME_V = b"dltensor_versioned"
_capi = ctypes.PyDLL(None)  # own function objects: argtypes here do not leak elsewhere
_capsule_new = _capi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [c_void_p, ctypes.c_char_p, c_void_p]

_lib = _ffi.lib
_DESTRUCTOR = ctypes.cast(_lib.kvc_dlpack_capsule_destructor, c_void_p).value
_RELAY = ctypes.cast(_lib.kvc_dlpack_relay_deleter, c_void_p).value
_RELAY_V = ctypes.cast(_lib.kvc_dlpack_relay_deleter_versioned, c_void_p).value
_FLOAT4 = 17  # kDLFloat4_e2m1fn


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", c_void_p), ("deleter", c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _ffi.DLTensor)]


class Relay(ctypes.Structure):
    """kvc_dlpack_relay."""
    _fields_ = [("inner", c_void_p), ("inner_deleter", c_void_p), ("done", ctypes.c_int32),
                ("pad_", ctypes.c_int32)]


# Reentrant: a garbage-collection pass may run a handle's __del__ (close -> sweep) on this
# thread while it holds the lock (any allocation inside the locked region can start one).
# With a plain Lock that finalizer waited for its own thread forever (CI hung in
# test_dlpack). The locked regions below stay correct when re-entered: sweep iterates a
# snapshot and pops with a default.
_lock = threading.RLock()
_live = {}  # key -> (owner, relay, managed struct, keepalive)
_next_key = [1]


def sweep():
    """Drops the exports whose tensor was deleted (relay flag set) and releases their
    owners. Returns the number still alive."""
    with _lock:
        while True:  # list() of the items is no atomic snapshot: a finalizer run by a
            try:     # collection inside it can sweep (re-entering) and resize _live
                items = list(_live.items())
                break
            except RuntimeError:
                continue
        done = [key for key, entry in items if entry[1].done]
        entries = [e for e in (_live.pop(k, None) for k in done) if e is not None]
        alive = len(_live)
    for owner, _relay, _m, _keep in entries:
        if owner is not None:
            owner._release_export()
    return alive


def make_capsule(dl_tensor, owner, versioned, lib_tensor=None, keepalive=None):
    """A capsule for `dl_tensor` (copied into a managed struct owned here). With
    lib_tensor (a library DLManagedTensor*), its deleter runs when ours does."""
    sweep()
    relay = Relay()
    if lib_tensor:
        relay.inner = lib_tensor
        relay.inner_deleter = _ffi.DLManagedTensor.from_address(lib_tensor).deleter
    if versioned:
        m = DLManagedTensorVersioned()
        m.version.major, m.version.minor = 1, 0
        m.flags = 0
        m.deleter, name = _RELAY_V, _NAME_V
    else:
        m = _ffi.DLManagedTensor()
        m.deleter, name = _RELAY, _NAME
    ctypes.memmove(ctypes.addressof(m.dl_tensor), ctypes.addressof(dl_tensor),
                   ctypes.sizeof(_ffi.DLTensor))
    m.manager_ctx = ctypes.addressof(relay)
    keep = [keepalive]
    t = m.dl_tensor
    if t.dtype.code == _FLOAT4 and t.dtype.lanes == 1 and t.ndim >= 1:
        # PyTorch's float4_e2m1fn_x2: lanes 2, the last dimension in packed bytes.
        ndim = t.ndim
        shp = (ctypes.c_int64 * ndim)(*[t.shape[i] for i in range(ndim)])
        shp[ndim - 1] //= 2
        strides = (ctypes.c_int64 * ndim)()
        s = 1
        for i in range(ndim - 1, -1, -1):
            strides[i] = s
            s *= shp[i]
        t.dtype.lanes = 2
        t.shape = ctypes.cast(shp, ctypes.POINTER(ctypes.c_int64))
        t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
        keep.append((shp, strides))
    cap = _capsule_new(ctypes.addressof(m), name, _DESTRUCTOR)
    with _lock:
        key = _next_key[0]
        _next_key[0] += 1
        _live[key] = (owner, relay, m, keep)
    if owner is not None:
        owner._acquire_export()
    return cap


def capsule_from_library(lib_tensor, owner, versioned):
    """Wraps a DLManagedTensor* returned by kvc_kv_pool_export_dlpack."""
    t = _ffi.DLManagedTensor.from_address(lib_tensor)
    try:
        return make_capsule(t.dl_tensor, owner, versioned, lib_tensor=lib_tensor)
    except BaseException:
        ctypes.CFUNCTYPE(None, c_void_p)(t.deleter)(lib_tensor)
        raise


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
    return sweep()
