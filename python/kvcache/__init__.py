"""kvcache — Python binding (ctypes, no compiled extension) for libkvcache.

SGLang-compatible KV-cache management: request-to-token pool, token/paged allocators,
KV pools whose buffers are DLPack tensors (torch.from_dlpack / numpy.from_dlpack, no
copy), scheduler flows (alloc_for_extend / alloc_for_decode / release) and streaming
sessions. See docs/porting.md for the SGLang -> kvcache mapping.

Vector and buffer arguments (slots, lengths, loc, k, v, out ...) accept a torch tensor,
a NumPy array, anything with the buffer protocol, ``__array_interface__``,
``__cuda_array_interface__`` or ``__dlpack__``, a :class:`DeviceBuffer` or
:class:`Tensor`, or a list; they go to C by pointer (lists and other integer widths are
converted once at C speed) after checks of length against what C reads or writes,
dtype, contiguity, host vs device memory and writability (_buf.py): a mismatch raises
InvalidArgument naming the argument. A raw int address is accepted unchecked (pass
``n`` and the index type explicitly). Calls returning slots take ``out=``. Persistent
batches: :class:`RequestBatch`. Streams: None (legacy default stream), an int handle, or
any object with ``.cuda_stream`` (torch.cuda.Stream).

Lifetime: objects hold references to what they depend on (a pool to its context, a
flow to its pools, a DLPack view to its pool), and ``close()`` (or leaving a ``with``
block) destroys the C object as soon as nothing alive depends on it any more.
"""
import array
import ctypes
import threading
from ctypes import byref, c_int, c_int32, c_int64, c_size_t, c_void_p

from . import _buf, _dlpack, _ffi
from ._ffi import lib

__all__ = [
    "__version__", "version", "version_number", "library_path", "fast_path",
    "KvcacheError", "InvalidArgument", "OutOfSlots", "HostOOM", "DeviceOOM", "CudaError",
    "NvrtcError", "NoDevice", "Unsupported", "Misuse", "VersionError", "InternalError",
    "KvcIOError", "Busy", "Context", "DeviceBuffer", "ReqToTokenPool", "Allocator", "KVPool",
    "Tensor", "ReqState", "RequestBatch", "Flow", "SessionCache", "DecodeChannel", "live_exports",
    "REQ_CHUNKED", "REQ_SKIP_CACHE_INSERT", "MambaPool", "HybridReqToTokenPool", "HybridKVPool",
    "SWAAllocator", "SWAKVPool", "PrefixCache", "DeviceAllocator", "TorchDeviceAllocator",
    "RadixCache", "SWARadixCache", "MambaRadixCache",
]

VERSION_NUMBER = lib.kvc_version_number()
__version__ = lib.kvc_version_string().decode()
library_path = _ffi.lib_path


def version():
    """The library's version string ("MAJOR.MINOR.PATCH")."""
    return lib.kvc_version_string().decode()


def version_number():
    """The library's KVC_VERSION_NUMBER (MAJOR*10000 + MINOR*100 + PATCH)."""
    return lib.kvc_version_number()


def live_exports():
    """Number of DLPack tensors handed out and not yet released."""
    return _dlpack.live_exports()


# --- Errors ----------------------------------------------------------------------------------


class KvcacheError(Exception):
    """A kvc_status other than KVC_OK. ``status`` is the int code, ``name`` its enum name
    ("ERR_OUT_OF_SLOTS"), ``message`` the detailed text of kvc_last_error()."""

    def __init__(self, status, message, func=None):
        self.status = int(status)
        self.name = lib.kvc_status_name(self.status).decode()
        self.message = message or lib.kvc_status_string(self.status).decode()
        self.func = func
        super().__init__("%s: %s" % (self.name, self.message))


class InvalidArgument(KvcacheError, ValueError):
    pass


class OutOfSlots(KvcacheError):
    pass


class HostOOM(KvcacheError, MemoryError):
    pass


class DeviceOOM(KvcacheError, MemoryError):
    pass


class CudaError(KvcacheError):
    pass


class NvrtcError(KvcacheError):
    pass


class NoDevice(KvcacheError):
    pass


class Unsupported(KvcacheError):
    pass


class Misuse(KvcacheError):
    pass


class VersionError(KvcacheError):
    pass


class InternalError(KvcacheError):
    pass


class KvcIOError(KvcacheError, OSError):
    pass


class Busy(KvcacheError):
    """The device is too many steps behind the host (decode channel): retry later."""


_ERRORS = {1: InvalidArgument, 2: OutOfSlots, 3: HostOOM, 4: DeviceOOM, 5: CudaError,
           6: NvrtcError, 7: NoDevice, 8: Unsupported, 9: Misuse, 10: VersionError,
           11: InternalError, 12: KvcIOError, 13: Busy}


def _raise(status, ctx_ptr, func=None):
    msg = lib.kvc_last_error(ctx_ptr)
    msg = msg.decode(errors="replace") if msg else ""
    raise _ERRORS.get(status, KvcacheError)(status, msg, func)


# --- Enums and conversions -------------------------------------------------------------------

_BACKENDS = {"auto": 0, "host": 1, "cuda": 2}
_BACKEND_NAMES = {v: k for k, v in _BACKENDS.items()}
_DTYPES = {"float32": 1, "f32": 1, "float16": 2, "f16": 2, "half": 2, "bfloat16": 3,
           "bf16": 3, "float8_e4m3fn": 4, "fp8_e4m3": 4, "float8_e5m2": 5, "fp8_e5m2": 5,
           "uint8": 6, "u8": 6, "int32": 7, "i32": 7, "int64": 8, "i64": 8, "uint64": 9,
           "fp4_e2m1": 10}
_DTYPE_NAMES = {1: "float32", 2: "float16", 3: "bfloat16", 4: "float8_e4m3fn",
                5: "float8_e5m2", 6: "uint8", 7: "int32", 8: "int64", 9: "uint64",
                10: "fp4_e2m1"}
_DL_DTYPES = {6: (1, 8, 1), 7: (0, 32, 1), 8: (0, 64, 1), 9: (1, 64, 1), 1: (2, 32, 1),
              2: (2, 16, 1), 3: (4, 16, 1)}
_KV_KINDS = {"mha": 0, "mha_noop": 1, "mha_fp4": 2, "mla": 3, "mla_fp4": 4, "nsa": 5}
_REGIONS = {"k": 0, "v": 1, "k_scale": 2, "v_scale": 3, "kv": 4, "kv_scale": 5, "index_k": 6}
_INDEX = {"int32": 0, "int64": 1}

REQ_CHUNKED = 0x1
REQ_SKIP_CACHE_INSERT = 0x2


def _dtype_code(d):
    """kvc_dtype from a name, an int code, a numpy dtype or a torch dtype."""
    if d is None:
        return None
    if isinstance(d, int):
        return d
    name = str(d).replace("torch.", "").replace("<class 'numpy.", "").rstrip("'>")
    try:
        return _DTYPES[name]
    except KeyError:
        raise InvalidArgument(1, "unsupported dtype %r" % (d,)) from None


def _ptr(x):
    """Address of a vector for the few calls that take one unchecked (a raw int, or any
    buffer form of _buf.describe). None -> None."""
    if x is None or isinstance(x, int):
        return x
    v = _buf_call("argument", _buf.describe, x)
    return v.ptr


def _buf_call(name, fn, *args, **kw):
    """Runs a _buf check; a mismatch becomes InvalidArgument naming the argument."""
    try:
        return fn(*args, **kw)
    except _buf.BufferArgError as e:
        raise InvalidArgument(1, "%s %s" % (name, e)) from None


def _index_type(x, explicit):
    if explicit is not None:
        return _INDEX[explicit] if isinstance(explicit, str) else int(explicit)
    v = None if isinstance(x, int) else _buf_call("loc", _buf.describe, x)
    code = None if v is None else v.dtype
    if code == 7:
        return 0
    if code == 8 or code is None:
        return 1
    raise InvalidArgument(1, "index vectors must be int32 or int64")


def _backend(ctx):
    """'host' or 'cuda:N' (cached per context): where _buf checks memory against."""
    b = getattr(ctx, "_backend_name", None)
    if b is None:
        b = ctx.backend
        b = ctx._backend_name = "host" if b != "cuda" else "cuda:%d" % ctx.device
    return b


def _in(ctx, name, x, n=None, dtypes=(8,), where="host"):
    """(ptr, count, keep) of an input vector (see _buf.vec_in)."""
    ints = dtypes[0] if dtypes[0] in (7, 8) else 8
    ptr, count, _, keep = _buf_call(name, _buf.vec_in, x, n, dtypes, where, _backend(ctx), ints)
    return ptr, count, keep


def _idx_in(ctx, name, x, n=None, loc_type=None):
    """(ptr, count, kvc_index_type, keep) of a device index vector (int32 or int64)."""
    if x is None:
        return None, 0, 1, None
    if isinstance(x, int):
        if n is None:
            raise InvalidArgument(1, "%s: n is required with a raw address" % name)
        return x, int(n), _index_type(x, loc_type), None
    want = (_INDEX[loc_type] if isinstance(loc_type, str) else loc_type) if loc_type is not None \
        else None
    dtypes = (7,) if want == 0 else (8,) if want == 1 else (8, 7)
    ptr, count, dt, keep = _buf_call(name, _buf.vec_in, x, n, dtypes, "device", _backend(ctx),
                                     dtypes[0])
    return ptr, count, (0 if dt == 7 else 1), keep


def _out(ctx, name, x, n, dtype=8, where="host"):
    """Address of an output vector with room for n elements of dtype (see _buf.vec_out)."""
    if x is None:
        return None
    return _buf_call(name, _buf.vec_out, x, n, dtype, where, _backend(ctx))[0]


def _bytes(ctx, name, x, nbytes, where="device", writable=False):
    if x is None:
        return None, None
    return _buf_call(name, _buf.bytes_in, x, nbytes, where, _backend(ctx), writable)


def _stream(s):
    """None, an int CUstream handle, or an object with .cuda_stream (torch.cuda.Stream)."""
    if s is None:
        return None
    if isinstance(s, int):
        return s or None
    h = getattr(s, "cuda_stream", None)
    if h is None:
        raise TypeError("stream must be None, an int handle or have .cuda_stream")
    return int(h) or None


_flow_decode = lib.kvc_flow_alloc_for_decode
_flow_release = lib.kvc_flow_release
_flow_extend = lib.kvc_flow_alloc_for_extend
# The per-step calls on a RequestBatch take only ints and None: the optional _kvcfast
# extension (cmake -DKVC_BUILD_PYTHON_EXT=ON) makes them without ctypes' conversions.
_fast = _ffi.fast
_batch_decode = _fast.flow_decode if _fast is not None else _flow_decode
_batch_release = _fast.flow_release if _fast is not None else _flow_release
_batch_extend = _fast.flow_extend if _fast is not None else _flow_extend
fast_path = _fast.path if _fast is not None else None


# --- Handle base ----------------------------------------------------------------------------


class _Handle:
    """Owns one C object. Destroyed once close() was requested (explicitly, by a ``with``
    block, by the parent's close, or by garbage collection) and no dependent object or
    DLPack view is alive."""

    _destroy_fn = None
    _lock = threading.RLock()

    def __init__(self, ptr, deps=()):
        self._ptr = ptr
        self._deps = [d for d in deps if d is not None]
        self._users = 0
        self._closing = False
        for d in self._deps:
            d._users += 1

    def _acquire_export(self):
        with _Handle._lock:
            self._users += 1

    def _release_export(self):
        with _Handle._lock:
            self._users -= 1
            self._maybe_destroy()

    def _maybe_destroy(self):
        if self._closing and self._users == 0 and self._ptr:
            ptr, self._ptr = self._ptr, None
            fn = type(self)._destroy_fn
            if fn is not None and lib is not None:
                fn(ptr)
            deps, self._deps = self._deps, []
            for d in deps:
                d._users -= 1
                d._maybe_destroy()

    def close(self):
        """Requests destruction (idempotent); the C object goes when nothing uses it."""
        if _dlpack is not None:
            _dlpack.sweep()  # views whose consumer let go since the last sweep
        with _Handle._lock:
            self._closing = True
            self._maybe_destroy()

    @property
    def closed(self):
        return self._closing

    @property
    def handle(self):
        """The C pointer (int). Raises Misuse after close()."""
        if self._closing or not self._ptr:
            raise Misuse(9, "%s is closed" % type(self).__name__)
        return self._ptr

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass


# --- Context ---------------------------------------------------------------------------------


class Context(_Handle):
    """kvc_context: a backend ('auto', 'host' or 'cuda') and, for CUDA, a device's primary
    context (shared with PyTorch). check=True enables check mode (conservation audits)."""

    _destroy_fn = staticmethod(lambda p: lib.kvc_context_destroy(p))

    def __init__(self, backend="auto", device=0, check=False, disk_cache=True, cache_dir=None,
                 device_allocator=None):
        """device_allocator: a kvcache.DeviceAllocator (e.g. TorchDeviceAllocator(), so
        PyTorch's caching allocator owns the KV memory); None = cuMemAlloc/cuMemFree."""
        cfg = _ffi.ContextConfig()
        lib.kvc_context_config_default(byref(cfg))
        self._device_allocator = device_allocator
        if device_allocator is not None:
            cfg.device_allocator = device_allocator._struct()
        cfg.backend = _BACKENDS[backend] if isinstance(backend, str) else int(backend)
        cfg.device = device
        cfg.flags = (0x1 if check else 0) | (0 if disk_cache else 0x2)
        self._cache_dir = cache_dir.encode() if cache_dir else None
        cfg.cache_dir = self._cache_dir
        out = c_void_p()
        st = lib.kvc_context_create(byref(cfg), byref(out))
        if st:
            if device_allocator is not None:
                device_allocator._raise_pending()
            _raise(st, None, "kvc_context_create")
        super().__init__(out.value)

    def _check(self, st, func=None):
        if st:
            hook = self._device_allocator
            if hook is not None and hook._pending is not None:
                try:
                    _raise(st, self._ptr, func)
                except KvcacheError as e:
                    try:
                        hook._raise_pending()
                    except BaseException as orig:
                        raise orig from e
            _raise(st, self._ptr, func)

    @property
    def backend(self):
        """'host' or 'cuda' (the backend actually in use)."""
        return _BACKEND_NAMES[lib.kvc_context_backend(self.handle)]

    @property
    def device(self):
        """CUDA device ordinal, -1 on the host backend."""
        return lib.kvc_context_device(self.handle)

    @property
    def check_mode(self):
        return bool(lib.kvc_context_check_mode(self.handle))

    @property
    def last_error(self):
        """The calling thread's last error message on this context ("" if none)."""
        return lib.kvc_last_error(self.handle).decode(errors="replace")

    def device_info(self):
        info = _ffi.DeviceInfo()
        self._check(lib.kvc_context_device_info(self.handle, byref(info)))
        return {f: (getattr(info, f).decode() if f == "name" else getattr(info, f))
                for f, _ in _ffi.DeviceInfo._fields_}

    def precompile(self):
        self._check(lib.kvc_context_precompile(self.handle))

    # memory helpers
    def alloc(self, nbytes):
        """Device memory (host memory on the host backend) as a DeviceBuffer of bytes."""
        return DeviceBuffer(self, nbytes)

    def empty(self, shape, dtype="int64"):
        """A DeviceBuffer viewed as `shape` of `dtype` (contents undefined)."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        code = _dtype_code(dtype)
        n = 1
        for s in shape:
            n *= s
        nbytes = n * lib.kvc_dtype_size(code)
        buf = DeviceBuffer(self, max(nbytes, 8), shape=shape, dtype=code)
        buf.nbytes = nbytes
        return buf

    def memcpy_h2d(self, dst, src, nbytes, stream=None):
        """nbytes from host `src` to device `dst` (both checked for nbytes)."""
        d, _ = _bytes(self, "dst", dst, nbytes, "device", writable=True)
        s_, keep = _bytes(self, "src", src, nbytes, "host")
        self._check(lib.kvc_memcpy_h2d(self.handle, d, s_, nbytes, _stream(stream)))

    def memcpy_d2h(self, dst, src, nbytes, stream=None):
        d, _ = _bytes(self, "dst", dst, nbytes, "host", writable=True)
        s_, _ = _bytes(self, "src", src, nbytes, "device")
        self._check(lib.kvc_memcpy_d2h(self.handle, d, s_, nbytes, _stream(stream)))

    def memcpy_d2d(self, dst, src, nbytes, stream=None):
        d, _ = _bytes(self, "dst", dst, nbytes, "device", writable=True)
        s_, _ = _bytes(self, "src", src, nbytes, "device")
        self._check(lib.kvc_memcpy_d2d(self.handle, d, s_, nbytes, _stream(stream)))

    def memset(self, dst, value, nbytes, stream=None):
        d, _ = _bytes(self, "dst", dst, nbytes, "device", writable=True)
        self._check(lib.kvc_memset_d8(self.handle, d, value, nbytes, _stream(stream)))

    def synchronize(self, stream=None):
        """Waits for all work on `stream` (the only blocking call)."""
        self._check(lib.kvc_stream_synchronize(self.handle, _stream(stream)))

    def __repr__(self):
        if self._closing:
            return "<kvcache.Context closed>"
        return "<kvcache.Context backend=%s device=%d>" % (self.backend, self.device)


def _dl_device(ctx):
    dev = ctx.device
    return (2, dev) if dev >= 0 else (1, 0)


class Tensor:
    """A zero-copy view of library-owned memory: supports __dlpack__/__dlpack_device__,
    so numpy.from_dlpack(t) (host backend) and torch.from_dlpack(t) (CUDA) alias the
    buffer. The view keeps its owner (and its memory) alive while any consumer holds it."""

    def __init__(self, owner, ptr, shape, dtype, export=None):
        self._owner = owner
        self.ptr = ptr
        self.shape = tuple(shape)
        self.dtype = _DTYPE_NAMES.get(dtype, dtype)
        self._dtype_code = dtype
        self._export = export  # callable returning a DLManagedTensor* (library export)

    def _kvc_view(self):
        self._owner.handle  # raises when closed
        n = 1
        for d in self.shape:
            n *= d
        size = _buf._SIZE.get(self._dtype_code, 1)
        return _buf._View(self.ptr or 0, n, size, self._dtype_code,
                          "host" if _backend(self._owner._ctx) == "host" else "cuda", True,
                          True, self)

    def __dlpack_device__(self):
        return _dl_device(self._owner._ctx)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        # All library work is ordered on the caller's streams, and pool creation
        # synchronizes, so there is nothing of ours to order against `stream`.
        if copy:
            raise BufferError("kvcache views are zero-copy only")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError("kvcache views cannot be moved to another device")
        self._owner.handle  # raises when closed
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        if self._export is not None:
            return _dlpack.capsule_from_library(self._export(), self._owner, versioned)
        dl = _DL_DTYPES.get(self._dtype_code)
        if dl is None:
            raise BufferError("dtype %s has no DLPack mapping here" % self.dtype)
        return _dlpack.capsule_from_pointer(self.ptr, self.shape, dl,
                                            _dl_device(self._owner._ctx), self._owner, versioned)

    def __repr__(self):
        return "<kvcache.Tensor %s %s at 0x%x>" % (self.dtype, self.shape, self.ptr or 0)


class DeviceBuffer(_Handle):
    """kvc_memory_alloc memory (device memory on CUDA, host memory on the host backend)."""

    def __init__(self, ctx, nbytes, shape=None, dtype=None):
        self._untyped = dtype is None
        dtype = 6 if dtype is None else dtype
        out = c_void_p()
        ctx._check(lib.kvc_memory_alloc(ctx.handle, nbytes, byref(out)), "kvc_memory_alloc")
        self._ctx = ctx
        self.nbytes = nbytes
        self.shape = tuple(shape) if shape is not None else (nbytes,)
        self._dtype = dtype
        super().__init__(out.value, deps=(ctx,))

    def _maybe_destroy(self):
        if self._closing and self._users == 0 and self._ptr:
            lib.kvc_memory_free(self._ctx._ptr, self._ptr)
        super()._maybe_destroy()

    @property
    def ptr(self):
        return self.handle

    def _kvc_view(self):
        size = _buf._SIZE.get(self._dtype, 1)
        # Context.alloc's byte buffers are untyped (0): any dtype, counted in bytes.
        return _buf._View(self.handle, self.nbytes // size, size,
                          0 if self._untyped else self._dtype,
                          "host" if _backend(self._ctx) == "host" else "cuda", True, True, self)

    @property
    def dtype(self):
        return _DTYPE_NAMES[self._dtype]

    def __len__(self):
        return self.shape[0]

    def tensor(self):
        return Tensor(self, self.ptr, self.shape, self._dtype)

    def __dlpack__(self, **kw):
        return self.tensor().__dlpack__(**kw)

    def __dlpack_device__(self):
        return _dl_device(self._ctx)

    def copy_from_host(self, data, stream=None):
        """Uploads a bytes-like object or a list of ints of this buffer's dtype."""
        ints = self._dtype if self._dtype in (7, 8) else 8
        v = _buf_call("data", _buf.describe, data, ints)
        if v is None:
            raise InvalidArgument(1, "data must be a buffer or a list, not a raw address")
        if v.device != "host" or not v.contiguous:
            raise InvalidArgument(1, "data must be contiguous host memory")
        nbytes = v.count * v.itemsize
        if nbytes > self.nbytes:
            raise InvalidArgument(1, "data has %d bytes, the buffer %d" % (nbytes, self.nbytes))
        keep = v.keep
        self._ctx.memcpy_h2d(self, v.ptr or None, nbytes, stream) if nbytes else None
        if stream is not None:
            self._ctx.synchronize(stream)  # data may be pageable and temporary
        del keep

    def tolist(self, stream=None):
        """Synchronous readback as a list (int32/int64/uint8 buffers). Not for hot paths."""
        ct = {6: ctypes.c_uint8, 7: c_int32, 8: c_int64}[self._dtype]
        n = self.nbytes // ctypes.sizeof(ct)
        host = (ct * max(n, 1))()
        self._ctx.synchronize(stream)
        self._ctx.memcpy_d2h(ctypes.addressof(host), self.ptr, n * ctypes.sizeof(ct), stream)
        return list(host[:n])


# --- Request-to-token pool --------------------------------------------------------------------


class ReqToTokenPool(_Handle):
    """SGLang ReqToTokenPool: rows 1..size (row 0 is padding) of max_context_len int32
    slots on the device, with a host mirror."""

    _destroy_fn = staticmethod(lambda p: lib.kvc_req_to_token_pool_destroy(p))

    def __init__(self, ctx, size, max_context_len):
        cfg = _ffi.ReqToTokenPoolConfig(ctypes.sizeof(_ffi.ReqToTokenPoolConfig), VERSION_NUMBER,
                                        size, max_context_len)
        out = c_void_p()
        ctx._check(lib.kvc_req_to_token_pool_create(ctx.handle, byref(cfg), byref(out)),
                   "kvc_req_to_token_pool_create")
        self._ctx = ctx
        super().__init__(out.value, deps=(ctx,))

    def alloc(self, rows, out=None):
        """rows: an int n (n new rows) or a vector where entries > 0 are rows already held
        (kept) and 0 entries get the next free rows. Returns the rows: a list, or `out`
        (host int32, written in place; with an int n its first n entries are zeroed
        first). out=rows updates a writable int32 vector in place."""
        if isinstance(rows, int):
            if rows < 0:
                raise InvalidArgument(1, "rows must be >= 0")
            n = rows
            if out is not None:
                ptr = _out(self._ctx, "out", out, n, 7)
                ctypes.memset(ptr, 0, 4 * n) if n else None
                self._ctx._check(lib.kvc_req_to_token_pool_alloc(self.handle, n, ptr))
                return out
            buf = array.array("i", bytes(4 * n))
        elif out is not None:
            ptr, n, keep = _in(self._ctx, "rows", rows, None, (7,))
            dst = _out(self._ctx, "out", out, n, 7)
            if dst != ptr and n:
                ctypes.memmove(dst, ptr, 4 * n)
            self._ctx._check(lib.kvc_req_to_token_pool_alloc(self.handle, n, dst))
            return out
        else:
            buf = array.array("i", rows)  # C writes the rows in place
        n = len(buf)
        self._ctx._check(lib.kvc_req_to_token_pool_alloc(self.handle, n,
                                                         buf.buffer_info()[0] if n else None))
        return buf.tolist()

    def free(self, row):
        self._ctx._check(lib.kvc_req_to_token_pool_free(self.handle, row))

    def clear(self):
        self._ctx._check(lib.kvc_req_to_token_pool_clear(self.handle))

    @property
    def available(self):
        return lib.kvc_req_to_token_pool_available(self.handle)

    def available_size(self):
        return self.available

    def is_held(self, row):
        return bool(lib.kvc_req_to_token_pool_is_held(self.handle, row))

    @property
    def size(self):
        return lib.kvc_req_to_token_pool_size(self.handle)

    @property
    def max_context_len(self):
        return lib.kvc_req_to_token_pool_max_context_len(self.handle)

    def row(self, row, start=0, end=None, out=None):
        """Host mirror of row[start:end) (no device copy): a list, or written into `out`
        (host int32, at least end - start elements), which is returned."""
        p = lib.kvc_req_to_token_pool_row(self.handle, row)
        if not p:
            raise InvalidArgument(1, "row %d out of range" % row)
        width = self.max_context_len
        end = width if end is None else end
        if not 0 <= start <= end <= width:
            raise InvalidArgument(1, "row range [%d, %d) outside [0, %d)" % (start, end, width))
        if out is None:
            return p[start:end]
        dst = _out(self._ctx, "out", out, end - start, 7, "host")
        ctypes.memmove(dst, ctypes.addressof(p.contents) + 4 * start, 4 * (end - start))
        return out

    def write(self, row, start, slots, stream=None):
        """row[start : start + len(slots)) = slots (host int64), mirror and device."""
        ptr, n, keep = _in(self._ctx, "slots", slots)
        self._ctx._check(lib.kvc_req_to_token_pool_write(self.handle, row, start, ptr, n,
                                                         _stream(stream)))

    @property
    def table(self):
        """The device table, (size + 1, max_context_len) int32, as a DLPack-able Tensor."""
        return Tensor(self, lib.kvc_req_to_token_pool_table(self.handle),
                      (self.size + 1, self.max_context_len), 7)


# --- Allocators -------------------------------------------------------------------------------


def _extend_total(seq, pre):
    """Slots C writes for an extend batch: sum(seq - prefix), each term >= 0."""
    total = 0
    for i, (a, b) in enumerate(zip(seq, pre)):
        if a < b:
            raise InvalidArgument(1, "seq_lens[%d] = %d < prefix_lens[%d] = %d" % (i, a, i, b))
        total += a - b
    return total


class Allocator(_Handle):
    """SGLang TokenToKVPoolAllocator (kind 'token', FIFO reuse) or
    PagedTokenToKVPoolAllocator (kind 'paged', freed pages LIFO, sorted-unique)."""

    _destroy_fn = staticmethod(lambda p: lib.kvc_allocator_destroy(p))

    def __init__(self, ctx, size, page_size=1, kind=None, need_sort=False):
        if kind is None:
            kind = "token" if page_size == 1 else "paged"
        cfg = _ffi.AllocatorConfig(ctypes.sizeof(_ffi.AllocatorConfig), VERSION_NUMBER,
                                   {"token": 0, "paged": 1}[kind], size, page_size,
                                   0x1 if need_sort else 0)
        out = c_void_p()
        ctx._check(lib.kvc_allocator_create(ctx.handle, byref(cfg), byref(out)),
                   "kvc_allocator_create")
        self._ctx = ctx
        self.kind = kind
        super().__init__(out.value, deps=(ctx,))

    def _check(self, st):
        self._ctx._check(st)

    @property
    def page_size(self):
        return lib.kvc_allocator_page_size(self.handle)

    @property
    def size(self):
        return lib.kvc_allocator_size(self.handle)

    def available_size(self):
        return lib.kvc_allocator_available_size(self.handle)

    def stats(self):
        s = _ffi.AllocatorStats()
        self._check(lib.kvc_allocator_get_stats(self.handle, byref(s)))
        return {f: getattr(s, f) for f, _ in _ffi.AllocatorStats._fields_}

    def alloc(self, n, out=None):
        """n slots (a multiple of page_size) from the front of the free list: a list, or
        written into `out` (host int64, >= n elements), which is returned."""
        if n < 0:
            raise InvalidArgument(1, "n must be >= 0")
        if out is not None:
            self._check(lib.kvc_allocator_alloc(self.handle, n, _out(self._ctx, "out", out, n)))
            return out
        buf = (c_int64 * max(n, 1))()
        self._check(lib.kvc_allocator_alloc(self.handle, n, buf))
        return buf[:n]

    def _lens(self, prefix_lens, seq_lens, last_locs, req_rows):
        ctx = self._ctx
        seq, n, k1 = _in(ctx, "seq_lens", seq_lens)
        pre = k0 = None
        if prefix_lens is not None:
            pre, n0, k0 = _in(ctx, "prefix_lens", prefix_lens)
            if n0 != n:
                raise InvalidArgument(1, "prefix_lens has %d entries, seq_lens %d" % (n0, n))
        last, _, k2 = _in(ctx, "last_locs", last_locs, n) if last_locs is not None else \
            (None, 0, None)
        rows, _, k3 = _in(ctx, "req_rows", req_rows, n, (7,)) if req_rows is not None else \
            (None, 0, None)
        return pre, seq, last, rows, n, (k0, k1, k2, k3)

    def alloc_extend(self, prefix_lens, seq_lens, last_locs=None, req_pool=None, req_rows=None,
                     prefix_slots=None, out_device=None, stream=None, out=None):
        """SGLang alloc_extend. Returns the new slots (request order): a host list, or
        `out` (host int64) when given; with req_pool/req_rows also writes the
        req_to_token rows, with out_device (an int64 device vector) also the device copy,
        in the same launch. Lengths are int64 vectors of any buffer form (lists too)."""
        pre, seq, last, rows, n, keep = self._lens(prefix_lens, seq_lens, last_locs, req_rows)
        if n and not (pre and seq):
            raise InvalidArgument(1, "prefix_lens and seq_lens must be buffers, not addresses")
        pv = (c_int64 * n).from_address(pre) if n else ()
        sv = (c_int64 * n).from_address(seq) if n else ()
        total = _extend_total(sv, pv)
        ps = None
        if prefix_slots is not None:
            prefix_slots = list(prefix_slots)
            if len(prefix_slots) != n:
                raise InvalidArgument(1, "prefix_slots has %d entries, %d requests" %
                                      (len(prefix_slots), n))
            ps = (ctypes.POINTER(c_int64) * max(n, 1))()
            held = []
            for i, sl in enumerate(prefix_slots):
                if sl is not None:
                    p, _, k = _in(self._ctx, "prefix_slots[%d]" % i, sl, max(pv[i], 0))
                    held.append(k)
                    ps[i] = ctypes.cast(p, ctypes.POINTER(c_int64))
            keep = (keep, held)
        host = (c_int64 * max(total, 1))() if out is None else \
            _out(self._ctx, "out", out, total)
        self._check(lib.kvc_allocator_alloc_extend(
            self.handle, n, pre, seq, last, req_pool.handle if req_pool else None, rows, ps, host,
            _out(self._ctx, "out_device", out_device, total, 8, "device"), _stream(stream)))
        return host[:total] if out is None else out

    def alloc_decode(self, seq_lens, last_locs=None, req_pool=None, req_rows=None,
                     out_device=None, stream=None, out=None):
        """SGLang alloc_decode: one slot per request (seq_lens = lengths after the token).
        Returns a host list, or `out` (host int64, >= n elements) when given."""
        _, seq, last, rows, n, keep = self._lens(None, seq_lens, last_locs, req_rows)
        host = (c_int64 * max(n, 1))() if out is None else _out(self._ctx, "out", out, n)
        self._check(lib.kvc_allocator_alloc_decode(
            self.handle, n, seq, last, req_pool.handle if req_pool else None, rows, host,
            _out(self._ctx, "out_device", out_device, n, 8, "device"), _stream(stream)))
        return host[:n] if out is None else out

    def free(self, slots):
        """Frees host int64 slots (any buffer form)."""
        ptr, n, keep = _in(self._ctx, "slots", slots)
        self._check(lib.kvc_allocator_free(self.handle, ptr, n))

    def free_segment(self, slots, start_pos):
        ptr, n, keep = _in(self._ctx, "slots", slots)
        self._check(lib.kvc_allocator_free_segment(self.handle, ptr, n, start_pos))

    def free_group_begin(self):
        self._check(lib.kvc_allocator_free_group_begin(self.handle))

    def free_group_end(self):
        self._check(lib.kvc_allocator_free_group_end(self.handle))

    def free_group(self):
        """Context manager: ``with alloc.free_group(): ...`` batches the frees."""
        alloc = self

        class _Group:
            def __enter__(self_):
                alloc.free_group_begin()
                return alloc

            def __exit__(self_, *exc):
                alloc.free_group_end()

        return _Group()

    def merge_and_sort_free(self):
        self._check(lib.kvc_allocator_merge_and_sort_free(self.handle))

    def backup_state(self):
        s = _ffi.AllocatorState()
        self._check(lib.kvc_allocator_backup_state(self.handle, byref(s)))
        return s

    def restore_state(self, state):
        self._check(lib.kvc_allocator_restore_state(self.handle, byref(state)))

    def clear(self):
        self._check(lib.kvc_allocator_clear(self.handle))

    def check(self):
        self._check(lib.kvc_allocator_check(self.handle))


# --- KV pools ----------------------------------------------------------------------------------


class DecodeChannel(_Handle):
    """alloc_decode split for CUDA graphs (kvc_decode_channel_*): alloc() is the host half
    (no driver call), enqueue(stream) the device half, which an engine captures once into
    its decode graph and replays every step."""

    _destroy_fn = staticmethod(lambda p: lib.kvc_decode_channel_destroy(p))

    def __init__(self, allocator, req_pool=None, max_batch=256, depth=8, out_device=None):
        out = c_void_p()
        allocator._check(lib.kvc_decode_channel_create(
            allocator.handle, req_pool.handle if req_pool else None, max_batch, depth,
            _out(allocator._ctx, "out_device", out_device, max_batch, 8, "device"), byref(out)))
        self._alloc = allocator
        self._req_pool = req_pool
        self._out_device = out_device
        super().__init__(out.value, deps=(allocator, req_pool))

    def alloc(self, seq_lens, req_rows=None, last_locs=None, out=None):
        """One decode step: the new slot per request (as Allocator.alloc_decode), published
        for the next kernel execution. A list, or `out` (host int64) when given."""
        _, seq, last, rows, n, keep = self._alloc._lens(None, seq_lens, last_locs, req_rows)
        host = (c_int64 * max(n, 1))() if out is None else _out(self._alloc._ctx, "out", out, n)
        self._alloc._check(lib.kvc_decode_channel_alloc(self.handle, n, seq, last, rows, host))
        return host[:n] if out is None else out

    def enqueue(self, stream=None):
        """One execution of the channel's kernel on `stream` (capturable)."""
        self._alloc._check(lib.kvc_decode_channel_enqueue(self.handle, _stream(stream)))

    def check(self):
        """(published, applied) steps; raises Misuse if an execution found no step."""
        pub, app = ctypes.c_uint64(), ctypes.c_uint64()
        self._alloc._check(lib.kvc_decode_channel_check(self.handle, byref(pub), byref(app)))
        return pub.value, app.value


class KVPool(_Handle):
    """SGLang MHATokenToKVPool (kind 'mha'), MLATokenToKVPool ('mla') and their FP4/NSA/
    NoOp variants. Buffers are exposed zero-copy: ``pool.k_buffer(layer)``,
    ``pool.v_buffer(layer)``, ``pool.kv_buffer(layer)`` return DLPack-able Tensors."""

    _destroy_fn = staticmethod(lambda p: lib.kvc_kv_pool_destroy(p))

    def __init__(self, ctx, size, layer_num, kind="mha", dtype="bfloat16", page_size=1,
                 head_num=0, head_dim=0, v_head_dim=0, kv_lora_rank=0, qk_rope_head_dim=0,
                 start_layer=0, index_head_dim=0, index_buf_size=0):
        cfg = _ffi.KVPoolConfig()
        cfg.struct_size = ctypes.sizeof(cfg)
        cfg.version = VERSION_NUMBER
        cfg.kind = _KV_KINDS[kind] if isinstance(kind, str) else int(kind)
        cfg.size, cfg.page_size, cfg.dtype = size, page_size, _dtype_code(dtype)
        cfg.layer_num, cfg.start_layer = layer_num, start_layer
        cfg.head_num, cfg.head_dim, cfg.v_head_dim = head_num, head_dim, v_head_dim
        cfg.kv_lora_rank, cfg.qk_rope_head_dim = kv_lora_rank, qk_rope_head_dim
        cfg.index_head_dim, cfg.index_buf_size = index_head_dim, index_buf_size
        out = c_void_p()
        ctx._check(lib.kvc_kv_pool_create(ctx.handle, byref(cfg), byref(out)), "kvc_kv_pool_create")
        self._ctx = ctx
        self.kind = kind
        self.dtype = _DTYPE_NAMES[cfg.dtype]
        self.start_layer = start_layer
        self.layer_num = layer_num
        k = cfg.kind
        if k in (0, 1, 2):  # MHA kinds: rows of head_num x head_dim (v: v_head_dim)
            self._rows = (head_num * head_dim, head_num * (v_head_dim or head_dim))
        else:  # MLA / NSA: one latent row, [nope | rope]
            self._rows = (kv_lora_rank + qk_rope_head_dim, 0)
        self._mla = (kv_lora_rank, qk_rope_head_dim)
        super().__init__(out.value, deps=(ctx,))

    def _check(self, st):
        self._ctx._check(st)

    def size_bytes(self):
        k, v = c_size_t(), c_size_t()
        self._check(lib.kvc_kv_pool_size_bytes(self.handle, byref(k), byref(v)))
        return k.value, v.value

    def clear(self, stream=None):
        self._check(lib.kvc_kv_pool_clear(self.handle, _stream(stream)))

    def _src_dtype(self, given, name, x):
        """kvc_dtype of a source/target buffer: `given` (checked against x's own dtype when
        x has one), else x's dtype."""
        v = None if x is None or isinstance(x, int) else _buf_call(name, _buf.describe, x)
        own = None if v is None else v.dtype
        if given is not None:
            code = _dtype_code(given)
            if own is not None and own != code and own != 6:  # uint8: raw bytes, any dtype
                raise InvalidArgument(1, "%s is %s but the dtype argument says %s" % (
                    name, _buf._NAMES.get(own), _buf._NAMES.get(code)))
            return code
        if own is None:
            raise InvalidArgument(1, "%s: pass the dtype argument (its dtype is unknown)" % name)
        return own

    @staticmethod
    def _row_bytes(n, row, stride, dtype):
        """Bytes C touches for n rows of `row` elements, `stride` elements apart (0 = row)."""
        if n == 0 or row == 0:
            return 0
        if stride and stride < row:
            raise InvalidArgument(1, "row stride %d below the row width %d" % (stride, row))
        return ((n - 1) * (stride or row) + row) * lib.kvc_dtype_size(dtype)

    def _rows_arg(self, name, x, n, row, stride, dtype, writable=False):
        if x is None:
            return None
        return _bytes(self._ctx, name, x, self._row_bytes(n, row, stride, dtype), "device",
                      writable)[0]

    def _scale_arg(self, name, x):
        if x is None:
            return None
        return _in(self._ctx, name, x, 1, (1,), "device")[0]

    def set_kv(self, layer_id, loc, k, v=None, src_dtype=None, n=None, loc_type=None,
               k_stride=0, v_stride=0, k_scale=1.0, v_scale=1.0, k_scale_device=None,
               v_scale_device=None, stream=None):
        """SGLang set_kv_buffer: K[layer][loc[i]] = k[i], V[layer][loc[i]] = v[i]. One launch.
        k / v must hold n rows of the pool's row width (strides in elements)."""
        src = self._src_dtype(src_dtype, "k", k)
        lp, n, lt, keep = _idx_in(self._ctx, "loc", loc, n, loc_type)
        rk, rv = self._rows
        kp = self._rows_arg("k", k, n, rk, k_stride, src)
        vp = self._rows_arg("v", v, n, rv, v_stride, src) if rv else _ptr(v)
        self._check(lib.kvc_kv_pool_set_kv(
            self.handle, layer_id, lp, lt, n, kp, vp, src, k_stride, v_stride,
            self._scale_arg("k_scale_device", k_scale_device), k_scale,
            self._scale_arg("v_scale_device", v_scale_device), v_scale, _stream(stream)))

    def gather_kv(self, layer_id, loc, k_out, v_out=None, out_dtype=None, n=None, loc_type=None,
                  stream=None):
        """Rows loc[i] of one layer into dense k_out / v_out (n rows each, writable),
        converted to out_dtype."""
        od = self._src_dtype(out_dtype, "k_out", k_out)
        lp, n, lt, keep = _idx_in(self._ctx, "loc", loc, n, loc_type)
        rk, rv = self._rows
        kp = self._rows_arg("k_out", k_out, n, rk, 0, od, True)
        vp = self._rows_arg("v_out", v_out, n, rv, 0, od, True) if rv else _ptr(v_out)
        self._check(lib.kvc_kv_pool_gather_kv(self.handle, layer_id, lp, lt, n, kp, vp, od,
                                              _stream(stream)))

    def set_mla_kv(self, layer_id, loc, nope, rope=None, src_dtype=None, n=None, loc_type=None,
                   nope_stride=0, rope_stride=0, stream=None):
        src = self._src_dtype(src_dtype, "nope", nope)
        lp, n, lt, keep = _idx_in(self._ctx, "loc", loc, n, loc_type)
        nope_w, rope_w = self._mla
        self._check(lib.kvc_kv_pool_set_mla_kv(
            self.handle, layer_id, lp, lt, n,
            self._rows_arg("nope", nope, n, nope_w, nope_stride, src),
            self._rows_arg("rope", rope, n, rope_w, rope_stride, src), src, nope_stride,
            rope_stride, _stream(stream)))

    def get_mla_kv(self, layer_id, loc, nope_out, rope_out=None, out_dtype=None, n=None,
                   loc_type=None, stream=None):
        od = self._src_dtype(out_dtype, "nope_out", nope_out)
        lp, n, lt, keep = _idx_in(self._ctx, "loc", loc, n, loc_type)
        nope_w, rope_w = self._mla
        self._check(lib.kvc_kv_pool_get_mla_kv(
            self.handle, layer_id, lp, lt, n,
            self._rows_arg("nope_out", nope_out, n, nope_w, 0, od, True),
            self._rows_arg("rope_out", rope_out, n, rope_w, 0, od, True), od, _stream(stream)))

    def move(self, tgt_loc, src_loc, n=None, loc_type=None, stream=None):
        """SGLang move_kv_cache: every layer/region row tgt[i] = row src[i], one launch."""
        tp, n, lt, k1 = _idx_in(self._ctx, "tgt_loc", tgt_loc, n, loc_type)
        sp, _, lt2, k2 = _idx_in(self._ctx, "src_loc", src_loc, n,
                                 loc_type if loc_type is not None else lt)
        self._check(lib.kvc_kv_pool_move(self.handle, tp, sp, lt, n, _stream(stream)))

    def host_copy_bytes(self, n):
        """Bytes copy_to_host needs for n slots (all layers and regions)."""
        b = c_size_t()
        self._check(lib.kvc_kv_pool_host_copy_bytes(self.handle, n, byref(b)))
        return b.value

    def copy_to_host(self, loc, host, n=None, loc_type=None, stream=None):
        """Host offload: rows loc[i] of every layer and region into `host` (writable host
        memory of host_copy_bytes(n) bytes; pinned, Context.pinned_empty, on CUDA), one
        launch; valid once `stream` reaches it."""
        lp, n, lt, keep = _idx_in(self._ctx, "loc", loc, n, loc_type)
        hp, _ = _bytes(self._ctx, "host", host, self.host_copy_bytes(n), "host", writable=True)
        self._check(lib.kvc_kv_pool_copy_to_host(self.handle, lp, lt, n, hp, _stream(stream)))

    def copy_from_host(self, loc, host, n=None, loc_type=None, stream=None):
        """The inverse scatter of copy_to_host (one launch)."""
        lp, n, lt, keep = _idx_in(self._ctx, "loc", loc, n, loc_type)
        hp, _ = _bytes(self._ctx, "host", host, self.host_copy_bytes(n), "host")
        self._check(lib.kvc_kv_pool_copy_from_host(self.handle, lp, lt, n, hp, _stream(stream)))

    @property
    def num_buffers(self):
        return lib.kvc_kv_pool_num_buffers(self.handle)

    @staticmethod
    def _desc_dict(d):
        return {"region": d.region, "layer_id": d.layer_id, "dtype": _DTYPE_NAMES.get(d.dtype),
                "device": d.device, "data": d.data or 0, "shape": tuple(d.shape[:d.ndim]),
                "strides": tuple(d.strides[:d.ndim]), "bytes_per_token": d.bytes_per_token,
                "bytes_per_page": d.bytes_per_page, "total_bytes": d.total_bytes}

    def describe(self, index=None):
        """Descriptor dict of buffer `index`, or a list of all of them."""
        if index is None:
            return [self.describe(i) for i in range(self.num_buffers)]
        d = _ffi.BufferDesc()
        d.struct_size = ctypes.sizeof(d)
        d.version = VERSION_NUMBER
        self._check(lib.kvc_kv_pool_describe(self.handle, index, byref(d)))
        return self._desc_dict(d)

    def buffer(self, region, layer_id, as_bytes=False):
        """A zero-copy DLPack-able Tensor of `region` ('k', 'v', 'kv', 'k_scale', ...) at
        global `layer_id` (exported through kvc_kv_pool_export_dlpack)."""
        r = _REGIONS[region] if isinstance(region, str) else int(region)
        d = _ffi.BufferDesc()
        d.struct_size = ctypes.sizeof(d)
        d.version = VERSION_NUMBER
        self._check(lib.kvc_kv_pool_buffer(self.handle, r, layer_id, byref(d)))
        h = self.handle

        def export():
            out = c_void_p()
            self._check(lib.kvc_kv_pool_export_dlpack(h, r, layer_id, 1 if as_bytes else 0,
                                                      byref(out)))
            return out.value

        shape = tuple(d.shape[:d.ndim])
        return Tensor(self, d.data, shape, 6 if as_bytes else d.dtype, export=export)

    def k_buffer(self, layer_id, **kw):
        return self.buffer("k", layer_id, **kw)

    def v_buffer(self, layer_id, **kw):
        return self.buffer("v", layer_id, **kw)

    def kv_buffer(self, layer_id, **kw):
        return self.buffer("kv", layer_id, **kw)


# --- Flows and sessions -------------------------------------------------------------------------


class ReqState(ctypes.Structure):
    """kvc_req_state, field for field: the per-request state flows read and write (embed
    one in your request object). Set seq_len / prefix_len (and prefix_slots for a prefix
    cache match) before each step."""

    _fields_ = [("req_row", c_int32), ("mamba_slot", c_int32), ("mamba_track", c_int32 * 2),
                ("flags", ctypes.c_uint32), ("pad_", c_int32), ("seq_len", c_int64),
                ("prefix_len", c_int64), ("_prefix_slots", ctypes.POINTER(c_int64)),
                ("kv_committed_len", c_int64), ("kv_allocated_len", c_int64),
                ("cache_protected_len", c_int64), ("swa_evict_floor", c_int64),
                ("swa_evicted_seqlen", c_int64), ("session_id", ctypes.c_uint64),
                ("cache_node", c_void_p), ("mamba_track_seqlen", c_int64 * 2),
                ("reserved_", ctypes.c_uint64 * 2)]

    @property
    def prefix_slots(self):
        """The slots C will read (prefix_slots[:n] as given), as a list; None when unset."""
        if getattr(self, "_prefix_keep", None) is None or not self._prefix_slots:
            return None
        return self._prefix_slots[: getattr(self, "_prefix_n", 0)]

    @prefix_slots.setter
    def prefix_slots(self, slots):
        """Host int64 slots of a prefix-cache match (any buffer form; lists are packed
        once). The flows read prefix_len of them: checked before each extend."""
        batch = getattr(self, "_batch", None)
        if slots is None:
            self._prefix_keep = None
            self._prefix_n = 0
            self._prefix_slots = None
            if batch is not None:
                batch._prefixed.pop(id(self), None)
            return
        v = _buf_call("prefix_slots", _buf.describe, slots)
        if v is None or v.device != "host" or v.dtype != 8 or not v.contiguous:
            ptr, n, keep = _in(_NoCtx, "prefix_slots", slots)
            v = _buf._View(ptr, n, 8, 8, "host", True, True, keep)
        self._prefix_keep = v.keep
        self._prefix_n = v.count
        self._prefix_slots = ctypes.cast(v.ptr, ctypes.POINTER(c_int64)) if v.ptr else None
        if batch is not None:
            batch._prefixed[id(self)] = self

    def _adopt_prefix(self, keep):
        """A prefix cache in C wrote prefix_slots / prefix_len itself (a radix match): the
        slots it points at are valid for prefix_len entries while `keep` lives."""
        if not self._prefix_slots:
            self._prefix_keep, self._prefix_n = None, 0
            return
        n = max(self.prefix_len, 0)
        view = (c_int64 * max(n, 1)).from_address(ctypes.addressof(self._prefix_slots.contents))
        view._owner = keep  # the slots live as long as the view (batch add/remove re-point at it)
        self._prefix_keep, self._prefix_n = view, n
        batch = getattr(self, "_batch", None)
        if batch is not None:
            batch._prefixed[id(self)] = self

    def _check_prefix(self, name):
        if self._prefix_slots and self.prefix_len > getattr(self, "_prefix_n", 0):
            raise InvalidArgument(1, "%s.prefix_slots has %d slots, prefix_len is %d" % (
                name, getattr(self, "_prefix_n", 0), self.prefix_len))

    def __repr__(self):
        return ("ReqState(row=%d, seq_len=%d, prefix_len=%d, committed=%d, allocated=%d, "
                "session=%d)" % (self.req_row, self.seq_len, self.prefix_len,
                                 self.kv_committed_len, self.kv_allocated_len, self.session_id))


class _NoCtx:
    """Stands for a context where only host memory is involved."""
    _backend_name = "host"


def _req_array(reqs):
    if type(reqs) is RequestBatch:
        return reqs._ptrs, reqs._n
    reqs = list(reqs)
    arr = (c_void_p * max(len(reqs), 1))()
    for i, r in enumerate(reqs):
        if not isinstance(r, ReqState):
            raise InvalidArgument(1, "reqs[%d] is %s, not a ReqState" % (i, type(r).__name__))
        arr[i] = ctypes.addressof(r)
    return arr, len(reqs)


class RequestBatch:
    """A persistent batch: up to `capacity` requests whose kvc_req_state structs live in
    one C-contiguous array owned here, with the pointer array the flows take kept in
    batch order between steps. add() and remove() update both in place (a removal
    shifts the later pointers down with one memmove), so a step through
    Flow.alloc_for_decode(batch) is one foreign call with no per-request Python work.

    Each request is a ReqState view of its entry (stable while it is in the batch; set
    its fields as on any ReqState). The batch also owns the decode output vector
    (``out_cache_loc``), sized for capacity x token_per_req on first use."""

    def __init__(self, capacity):
        if capacity < 1:
            raise InvalidArgument(1, "capacity must be >= 1")
        self.capacity = int(capacity)
        self._states = (ReqState * self.capacity)()
        self._ptrs = (c_void_p * self.capacity)()
        self._pp = ctypes.addressof(self._ptrs)
        self._base = ctypes.addressof(self._states)
        self._size = ctypes.sizeof(ReqState)
        self._views = [None] * self.capacity   # entry index -> ReqState view
        self._order = []                       # batch order -> entry index
        self._free = list(range(self.capacity - 1, -1, -1))
        self._n = 0
        self._prefixed = {}                    # views with prefix_slots set
        self._out = [None, None]  # (ctx, DeviceBuffer, capacity) for decode / extend

    def __len__(self):
        return self._n

    def __iter__(self):
        views = self._views
        return iter([views[e] for e in self._order])

    def __getitem__(self, i):
        return self._views[self._order[i]]

    def add(self, req=None, **fields):
        """A new request at the end of the batch: a copy of `req` (a ReqState, with its
        prefix_slots) and/or the given fields (seq_len=..., prefix_len=..., ...). Returns
        its ReqState view. Raises InvalidArgument when the batch is full."""
        if not self._free:
            raise InvalidArgument(1, "batch is full (capacity %d)" % self.capacity)
        e = self._free.pop()
        view = ReqState.from_address(self._base + e * self._size)
        ctypes.memset(ctypes.addressof(view), 0, self._size)
        view._batch = self
        view._entry = e
        if req is not None:
            ctypes.memmove(ctypes.addressof(view), ctypes.addressof(req), self._size)
            view._prefix_slots = None
            if getattr(req, "_prefix_keep", None) is not None:
                view.prefix_slots = req._prefix_keep
        for k, val in fields.items():
            setattr(view, k, val)
        self._views[e] = view
        self._ptrs[self._n] = ctypes.addressof(view)
        self._order.append(e)
        self._n += 1
        return view

    def remove(self, req):
        """Takes `req` (a view from add()) out of the batch, keeping the order of the
        others; returns a standalone ReqState copy of its final state."""
        e = getattr(req, "_entry", None)
        if getattr(req, "_batch", None) is not self or self._views[e] is not req:
            raise InvalidArgument(1, "request is not in this batch")
        i = self._order.index(e)
        tail = self._n - i - 1
        if tail:
            step = ctypes.sizeof(c_void_p)
            ctypes.memmove(self._pp + i * step, self._pp + (i + 1) * step, tail * step)
        del self._order[i]
        self._n -= 1
        self._ptrs[self._n] = None
        copy = ReqState()
        ctypes.memmove(ctypes.addressof(copy), ctypes.addressof(req), self._size)
        if getattr(req, "_prefix_keep", None) is not None:
            copy.prefix_slots = req._prefix_keep
        self._prefixed.pop(id(req), None)
        req._batch = None
        self._views[e] = None
        self._free.append(e)
        return copy

    def clear(self):
        """Removes every request."""
        for e in list(self._order):
            self.remove(self._views[e])

    def _step_out(self, which, ctx, count):
        """The batch-owned int64 output vector `which` (0: decode, 1: extend), grown (to
        at least twice the old size) only when a step needs more; its shape and nbytes
        are set to this step's `count`."""
        o = self._out[which]
        if o is None or o[0] is not ctx or o[2] < count:
            cap = max(count, self.capacity, 2 * o[2] if o is not None else 0)
            buf = ctx.empty(cap, "int64")
            o = self._out[which] = (ctx, buf, cap)
        buf = o[1]
        buf.shape = (count,)
        buf.nbytes = 8 * count
        return buf

    @property
    def out_cache_loc(self):
        """The batch-owned output of the last decode step (None before the first); the
        last extend step's is extend_out_cache_loc. Each is rewritten by the next step
        of its kind."""
        return None if self._out[0] is None else self._out[0][1]

    @property
    def extend_out_cache_loc(self):
        return None if self._out[1] is None else self._out[1][1]


class SessionCache(_Handle):
    """SGLang SessionAwareCache over the built-in chunk cache: requests with a session_id
    keep their KV between turns."""

    _destroy_fn = staticmethod(lambda p: lib.kvc_session_cache_destroy(p))

    def __init__(self, ctx):
        inner = lib.kvc_chunk_cache()
        out = c_void_p()
        ctx._check(lib.kvc_session_cache_create(ctx.handle, byref(inner), byref(out)),
                   "kvc_session_cache_create")
        self._ctx = ctx
        super().__init__(out.value, deps=(ctx,))

    def _prefix_cache(self):
        return lib.kvc_session_cache_as_prefix_cache(self.handle)

    def match(self, req, num_tokens):
        """match_prefix for a streaming request; True when the session held KV."""
        m = c_int()
        self._ctx._check(lib.kvc_session_cache_match(self.handle, byref(req), num_tokens, byref(m)))
        return bool(m.value)

    def release(self, flow, session_id):
        """Ends a session: frees its slots, its row and its Mamba slot."""
        self._ctx._check(lib.kvc_session_cache_release(self.handle, flow.handle, session_id))

    def held(self, page_size=1):
        t, s, r = c_int64(), c_int64(), c_int64()
        self._ctx._check(lib.kvc_session_cache_held(self.handle, page_size, byref(t), byref(s),
                                                    byref(r)))
        return {"tokens": t.value, "swa_tokens": s.value, "requests": r.value}

    def reset(self):
        lib.kvc_session_cache_reset(self.handle)


class Flow(_Handle):
    """The per-step scheduler calls of SGLang's mem_cache/common.py over a request pool,
    a token/paged allocator and a prefix cache (None = ChunkCache, or a SessionCache)."""

    _destroy_fn = staticmethod(lambda p: lib.kvc_flow_destroy(p))

    def __init__(self, ctx, req_pool, allocator, cache=None, spec_num_steps=0, spec_topk=0,
                 spec_num_draft_tokens=0, spec_keeps_draft_kv=False, hybrid_req_pool=None,
                 sliding_window=0, swa_drop_page_margin=False):
        """allocator: an Allocator, or an SWAAllocator for SWA models (then
        sliding_window > 0 enables window eviction). hybrid_req_pool: a
        HybridReqToTokenPool over req_pool (hybrid Mamba models). cache: None (chunk
        cache), a SessionCache, or a Python PrefixCache subclass (kvcache.PrefixCache)."""
        cfg = _ffi.FlowConfig()
        cfg.struct_size = ctypes.sizeof(cfg)
        cfg.version = VERSION_NUMBER
        cfg.page_size = allocator.page_size
        cfg.req_pool = req_pool.handle
        if getattr(allocator, "_is_swa", False):
            cfg.swa_allocator = allocator.handle
        else:
            cfg.allocator = allocator.handle
        if hybrid_req_pool is not None:
            cfg.hybrid_req_pool = hybrid_req_pool.handle
        cfg.sliding_window = sliding_window
        cfg.swa_drop_page_margin = 1 if swa_drop_page_margin else 0
        if cache is not None:
            cfg.cache = cache._prefix_cache()
        cfg.spec_num_steps, cfg.spec_topk = spec_num_steps, spec_topk
        cfg.spec_num_draft_tokens = spec_num_draft_tokens
        cfg.spec_keeps_draft_kv = 1 if spec_keeps_draft_kv else 0
        out = c_void_p()
        ctx._check(lib.kvc_flow_create(ctx.handle, byref(cfg), byref(out)), "kvc_flow_create")
        self._ctx = ctx
        self.req_pool, self.allocator, self.cache = req_pool, allocator, cache
        self._channel = None
        self._pycache = cache if hasattr(cache, "_raise_pending") else None
        super().__init__(out.value, deps=(ctx, req_pool, allocator, hybrid_req_pool,
                                          cache if isinstance(cache, _Handle) else None))
        if cache is not None and hasattr(cache, "_bind_flow"):
            cache._bind_flow(self)

    def _check(self, st):
        pc = self._pycache
        if pc is not None and pc._pending is not None:
            try:
                self._ctx._check(st)
            except KvcacheError as e:
                try:
                    pc._raise_pending()
                except BaseException as orig:  # the callback's own exception
                    raise orig from e
            pc._raise_pending()
        self._ctx._check(st)

    def free_slots(self, slots):
        """Frees host slots through the flow's allocator (for PrefixCache callbacks)."""
        ptr, n, keep = _in(self._ctx, "slots", slots)
        self._check(lib.kvc_flow_free_slots(self.handle, ptr, n))

    def _out_arg(self, count, out):
        if out is None:
            return self._ctx.empty(count, "int64")
        _out(self._ctx, "out_cache_loc", out, count, 8, "device")
        return out

    def alloc_for_extend(self, reqs, out_cache_loc=None, stream=None):
        """SGLang alloc_for_extend for a RequestBatch or a list of ReqState. Returns
        out_cache_loc (device int64, the new slots in request order): the one passed in
        (checked for sum(seq_len - prefix_len) entries), the batch's own
        extend_out_cache_loc for a RequestBatch, or else a new DeviceBuffer."""
        if type(reqs) is RequestBatch:
            arr, n = reqs._ptrs, reqs._n
            views = [reqs._views[e] for e in reqs._order]
            for r in reqs._prefixed.values():
                r._check_prefix("reqs")
        else:
            views = reqs = list(reqs)
            arr, n = _req_array(views)
            for i, r in enumerate(views):
                r._check_prefix("reqs[%d]" % i)
        total = 0
        for r in views:  # C writes seq_len - prefix_len slots per request
            d = r.seq_len - r.prefix_len
            if d < 0:
                raise InvalidArgument(1, "a request has seq_len %d < prefix_len %d" %
                                      (r.seq_len, r.prefix_len))
            total += d
        if out_cache_loc is None and type(reqs) is RequestBatch:
            out = reqs._step_out(1, self._ctx, total)
            ptr = out._ptr
        else:
            out = self._out_arg(total, out_cache_loc)
            ptr = _ptr(out)
        if type(reqs) is RequestBatch:
            st = _batch_extend(self.handle, reqs._pp, n, ptr, _stream(stream))
        else:
            st = _flow_extend(self.handle, arr, n, ptr, _stream(stream))
        if st or self._pycache is not None:
            self._check(st)
        return out

    def set_decode_channel(self, channel):
        """Routes one-token decode steps through a DecodeChannel over this flow's allocator
        and req pool (None: back to plain launches)."""
        self._check(lib.kvc_flow_set_decode_channel(self.handle, channel.handle if channel else None))
        # The flow depends on the channel (its C side holds the pointer) until replaced or
        # destroyed: a dependency released like the flow's others.
        old = self._channel
        with _Handle._lock:
            if channel is not None:
                channel._users += 1
                self._deps.append(channel)
            if old is not None:
                self._deps.remove(old)
                old._users -= 1
        if old is not None:
            old._maybe_destroy()
        self._channel = channel

    def alloc_for_decode(self, reqs, token_per_req=1, out_cache_loc=None, stream=None):
        """SGLang alloc_for_decode; seq_len is the length before the step. reqs: a
        RequestBatch (one foreign call; the new slots go to the batch's own
        out_cache_loc unless one is passed) or a list of ReqState. With a decode channel
        (one token per request) the channel's kernel writes its own out_device, which is
        what this returns."""
        fp = self._ptr
        if self._closing or not fp:
            raise Misuse(9, "Flow is closed")
        if type(reqs) is RequestBatch:
            arr, n = reqs._pp, reqs._n
            if out_cache_loc is None and self._channel is None:
                # The hot path: checks that cannot fail for the batch's own vector are
                # skipped; what remains is one foreign call.
                count = n * token_per_req
                o = reqs._out[0]
                if o is None or o[0] is not self._ctx or o[2] < count:
                    out = reqs._step_out(0, self._ctx, count)
                else:
                    out = o[1]
                    out.shape = (count,)
                    out.nbytes = 8 * count
                st = _batch_decode(fp, arr, n, token_per_req, out._ptr,
                                   None if stream is None else _stream(stream))
                if st or self._pycache is not None:
                    self._check(st)
                return out
        else:
            arr, n = _req_array(reqs)
        channel = self._channel
        if channel is not None and token_per_req == 1:
            self._check(_flow_decode(fp, arr, n, 1, None, _stream(stream)))
            return channel._out_device
        if out_cache_loc is None and type(reqs) is RequestBatch:
            out = reqs._step_out(0, self._ctx, n * token_per_req)
            ptr = out._ptr
        else:
            out = self._out_arg(n * token_per_req, out_cache_loc)
            ptr = _ptr(out)
        self._check(_flow_decode(fp, arr, n, token_per_req, ptr, _stream(stream)))
        return out

    def release(self, reqs, is_insert=True, stream=None):
        """SGLang release_kv_cache for finished requests (one free group): a list of
        ReqState or a RequestBatch (all its requests; remove them afterwards)."""
        fp = self._ptr
        if self._closing or not fp:
            raise Misuse(9, "Flow is closed")
        if type(reqs) is RequestBatch:
            st = _batch_release(fp, reqs._pp, reqs._n, 1 if is_insert else 0,
                                None if stream is None else _stream(stream))
        else:
            arr, n = _req_array(reqs)
            st = _flow_release(fp, arr, n, 1 if is_insert else 0, _stream(stream))
        if st or self._pycache is not None:
            self._check(st)

    def cache_unfinished(self, req):
        self._check(lib.kvc_flow_cache_unfinished(self.handle, byref(req)))

    def evict(self, num_tokens):
        self._check(lib.kvc_flow_evict(self.handle, num_tokens))

    def available(self):
        """dict(available, evictable, protected, cached) in tokens."""
        v = [c_int64() for _ in range(4)]
        self._check(lib.kvc_flow_available(self.handle, *[byref(x) for x in v]))
        return dict(zip(("available", "evictable", "protected", "cached"), [x.value for x in v]))

    def row_slots(self, row, start, end, out=None):
        """row[start:end) of the request-to-token mirror as int64: a list, or written into
        `out` (host int64, >= end - start elements), which is returned."""
        if not 0 <= start <= end:
            raise InvalidArgument(1, "bad range [%d, %d)" % (start, end))
        if out is not None:
            self._check(lib.kvc_flow_row_slots(self.handle, row, start, end,
                                               _out(self._ctx, "out", out, end - start)))
            return out
        buf = (c_int64 * max(end - start, 1))()
        self._check(lib.kvc_flow_row_slots(self.handle, row, start, end, buf))
        return buf[:end - start]

    def check(self, live=()):
        arr, n = _req_array(live)
        self._check(lib.kvc_flow_check(self.handle, arr, n))


from .hybrid import (HybridKVPool, HybridReqToTokenPool, MambaPool, SWAAllocator,  # noqa: E402
                     SWAKVPool)
from .prefix import DeviceAllocator, PrefixCache, TorchDeviceAllocator  # noqa: E402
# The radix prefix caches (modules kvcache.radix, kvcache.swa_radix, kvcache.mamba_radix).
from .radix import RadixCache  # noqa: E402
from .swa_radix import SWARadixCache  # noqa: E402
from .mamba_radix import MambaRadixCache  # noqa: E402
