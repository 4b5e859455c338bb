"""Prefix caches written in Python (the kvc_prefix_cache callbacks), and the device-memory
hook that lets PyTorch's caching allocator own the library's device memory.

Both install ctypes callbacks the library calls during a Python-initiated library call
(never on a consumer's error path). A callback that raises does not lose the exception:
it is stored, the callback reports failure to C (a kvc_status of KVC_ERR_INTERNAL, 0 for a
size, NULL for an allocation), and the binding re-raises the original exception when the
library call returns (from Flow's methods; from the Context call that allocated).
"""
import ctypes
import weakref
from ctypes import c_int, c_int64, c_size_t, c_void_p

from . import _ffi

_ERR = 11  # KVC_ERR_INTERNAL: "the cache's callback failed"; the real error is re-raised

_IS = ctypes.CFUNCTYPE(c_int, c_void_p)
_EVICT = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_int64, c_int64, c_int64)
_SIZE = ctypes.CFUNCTYPE(c_int64, c_void_p)
_FINISHED = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p, c_int)
_UNFINISHED = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p)
_LOCK = ctypes.CFUNCTYPE(None, c_void_p, c_void_p)


class PrefixCache:
    """Base class of a prefix cache implemented in Python (SGLang BasePrefixCache subset).

    Override what your cache does; a method left as here keeps the library's default for
    that callback (no Python call at all): is_chunk_cache / supports_mamba False, evict a
    no-op, sizes 0, cache_finished_req frees [0, kv_committed_len) of the request's row,
    cache_unfinished_req a no-op. Callbacks get the Flow (its free_slots / row_slots are
    the calls a cache makes) and the request as a ReqState view of the library's struct
    (writes go to the request itself). Pass an instance as Flow(..., cache=...); one
    cache may serve several flows."""

    is_chunk_cache = False
    supports_mamba = False

    def evict(self, flow, num_tokens, swa_num_tokens, mamba_num):
        """Free up to these numbers of full tokens, SWA tokens and Mamba slots."""

    def evictable_size(self):
        return 0

    def protected_size(self):
        return 0

    def cached_size(self):
        """Tokens whose KV the cache holds (free + held + cached = size is audited)."""
        return 0

    def cache_finished_req(self, flow, req, is_insert):
        """Take ownership of [0, req.kv_committed_len) of a finished request."""

    def cache_unfinished_req(self, flow, req):
        """Between chunks of a chunked prefill."""

    def inc_lock_ref(self, node):
        pass

    def dec_lock_ref(self, node):
        pass

    # --- plumbing -------------------------------------------------------------------

    def _overrides(self, name):
        return getattr(type(self), name) is not getattr(PrefixCache, name)

    def _prefix_cache(self):
        """The kvc_prefix_cache struct (callbacks kept alive by this object)."""
        if getattr(self, "_struct", None) is not None:
            return self._struct
        self._flows = weakref.WeakValueDictionary()
        self._pending = None
        s = _ffi.PrefixCache()
        keep = []

        def install(field, proto, fn):
            cb = proto(fn)
            keep.append(cb)
            setattr(s, field, ctypes.cast(cb, c_void_p).value)

        if type(self).is_chunk_cache is not PrefixCache.is_chunk_cache:
            install("is_chunk_cache", _IS, lambda _s: 1 if self.is_chunk_cache else 0)
        if type(self).supports_mamba is not PrefixCache.supports_mamba:
            install("supports_mamba", _IS, lambda _s: 1 if self.supports_mamba else 0)
        if self._overrides("evict"):
            install("evict", _EVICT, lambda _s, f, a, b, c: self._call_status(
                self.evict, self._flow(f), a, b, c))
        for name in ("evictable_size", "protected_size", "cached_size"):
            if self._overrides(name):
                install(name, _SIZE, self._size_cb(getattr(self, name)))
        if self._overrides("cache_finished_req"):
            install("cache_finished_req", _FINISHED, lambda _s, f, r, ins: self._call_status(
                self.cache_finished_req, self._flow(f), self._req(r), bool(ins)))
        if self._overrides("cache_unfinished_req"):
            install("cache_unfinished_req", _UNFINISHED, lambda _s, f, r: self._call_status(
                self.cache_unfinished_req, self._flow(f), self._req(r)))
        if self._overrides("inc_lock_ref"):
            install("inc_lock_ref", _LOCK, lambda _s, n: self._call_void(self.inc_lock_ref, n))
        if self._overrides("dec_lock_ref"):
            install("dec_lock_ref", _LOCK, lambda _s, n: self._call_void(self.dec_lock_ref, n))
        self._callbacks = keep
        self._struct = s
        return s

    def _bind_flow(self, flow):
        self._flows[flow._ptr] = flow

    def _flow(self, ptr):
        return self._flows.get(ptr)

    @staticmethod
    def _req(ptr):
        from . import ReqState
        return ReqState.from_address(ptr)

    def _store(self, e):
        if self._pending is None:
            self._pending = e

    def _call_status(self, fn, *args):
        try:
            fn(*args)
            return 0
        except BaseException as e:  # re-raised by the flow call that got here
            self._store(e)
            return _ERR

    def _call_void(self, fn, *args):
        try:
            fn(*args)
        except BaseException as e:
            self._store(e)

    def _size_cb(self, fn):
        def cb(_s):
            try:
                return int(fn())
            except BaseException as e:
                self._store(e)
                return 0
        return cb

    def _raise_pending(self):
        e, self._pending = self._pending, None
        if e is not None:
            raise e


class DeviceAllocator:
    """The context's device-memory hook (kvc_device_allocator): every device allocation
    the library makes for the context (pool buffers, scratch) goes through alloc(bytes,
    device, stream) -> int address (256-byte aligned) and free(ptr, device, stream).
    Pass an instance as Context(..., device_allocator=...). Unused on the host backend."""

    def alloc(self, nbytes, device, stream):
        raise NotImplementedError

    def free(self, ptr, device, stream):
        raise NotImplementedError

    def _struct(self):
        if getattr(self, "_cstruct", None) is not None:
            return self._cstruct
        self._pending = None

        def a(_o, nbytes, device, stream):
            try:
                return int(self.alloc(nbytes, device, stream or 0)) or None
            except BaseException as e:
                if self._pending is None:
                    self._pending = e
                return None

        def f(_o, ptr, device, stream):
            try:
                self.free(ptr, device, stream or 0)
            except BaseException as e:
                if self._pending is None:
                    self._pending = e

        self._cbs = (ctypes.CFUNCTYPE(c_void_p, c_void_p, c_size_t, c_int, c_void_p)(a),
                     ctypes.CFUNCTYPE(None, c_void_p, c_void_p, c_int, c_void_p)(f))
        s = _ffi.DeviceAllocator()
        s.alloc = ctypes.cast(self._cbs[0], c_void_p).value
        s.free = ctypes.cast(self._cbs[1], c_void_p).value
        self._cstruct = s
        return s

    def _raise_pending(self):
        e, self._pending = getattr(self, "_pending", None), None
        if e is not None:
            raise e


class TorchDeviceAllocator(DeviceAllocator):
    """PyTorch's CUDA caching allocator owns the library's device memory
    (torch.cuda.caching_allocator_alloc / _delete), so torch.cuda.memory_allocated() and
    memory profiling see the KV pools, as engines expect. `live` maps address -> bytes."""

    def __init__(self):
        import torch
        self._torch = torch
        self.live = {}

    def alloc(self, nbytes, device, stream):
        ptr = self._torch.cuda.caching_allocator_alloc(nbytes, device, stream or None)
        self.live[ptr] = nbytes
        return ptr

    def free(self, ptr, device, stream):
        self.live.pop(ptr, None)
        self._torch.cuda.caching_allocator_delete(ptr)
