"""Tensor plumbing of kvcache.sglang: torch when it is installed, NumPy otherwise.

Device tensors handed out are zero-copy views of kvcache's buffers (DLPack) or tensors of
the chosen framework the library wrote into by pointer; host ("*_cpu") tensors are read
by pointer. One kvcache Context per device string ("cpu" -> host backend, "cuda[:N]" ->
CUDA backend), created on first use; set_context() installs one of your own (tensor
parallelism: one per rank, in that rank's process).
"""
import array
import ctypes

import kvcache as _kvc

try:  # torch is optional: CI has NumPy only
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    torch = None
try:
    import numpy as np
except ImportError:  # pragma: no cover
    np = None

if torch is None and np is None:  # pragma: no cover
    raise ImportError("kvcache.sglang needs torch or numpy")

lib = _kvc._ffi.lib
_CONTEXTS = {}

# The hot paths' library calls through the optional _kvcfast extension (METH_FASTCALL:
# about 0.1 us an argument less than ctypes); None when it is absent, KVCACHE_NO_FAST=1,
# or older than these entry points. Order: _kvcfast.c's bind_adapter().
_ADAPTER_FNS = ("kvc_allocator_alloc_decode", "kvc_swa_allocator_alloc_decode",
                "kvc_allocator_alloc_extend", "kvc_swa_allocator_alloc_extend",
                "kvc_allocator_free", "kvc_swa_allocator_free", "kvc_flow_row_slots",
                "kvc_req_to_token_pool_free", "kvc_radix_cache_match_prefix",
                "kvc_allocator_alloc", "kvc_swa_allocator_alloc", "kvc_req_to_token_pool_alloc",
                "kvc_allocator_alloc_extend_ex", "kvc_allocator_check_free",
                "kvc_req_to_token_pool_is_held", "kvc_swa_allocator_alloc_extend_ex")
fast = _kvc._ffi.fast
if fast is not None and hasattr(fast, "bind_adapter"):
    try:
        fast.bind_adapter(*[ctypes.cast(getattr(lib, n), ctypes.c_void_p).value
                            for n in _ADAPTER_FNS])
    except TypeError:  # an extension built before the last entry: ctypes instead
        fast = None
else:
    fast = None


def _norm_device(device):
    d = str(device) if device is not None else "cpu"
    if d == "cuda":
        d = "cuda:0"
    return d


def is_cuda(device):
    return _norm_device(device).startswith("cuda")


def set_context(device, ctx):
    """Uses `ctx` (a kvcache.Context) for every object created on `device` from now on."""
    _CONTEXTS[_norm_device(device)] = ctx


def get_context(device):
    """The kvcache.Context objects created on `device` share (created on first use)."""
    d = _norm_device(device)
    ctx = _CONTEXTS.get(d)
    if ctx is None:
        if d.startswith("cuda"):
            ctx = _kvc.Context("cuda", device=int(d.split(":")[1]))
        else:
            ctx = _kvc.Context("host")
        _CONTEXTS[d] = ctx
    return ctx


# --- framework-neutral helpers ---------------------------------------------------------------

if torch is not None:
    I64, I32 = torch.int64, torch.int32

    def empty(n, dtype, device="cpu"):
        return torch.empty(n, dtype=dtype, device=_tdev(device))

    def zeros(n, dtype, device="cpu"):
        return torch.zeros(n, dtype=dtype, device=_tdev(device))

    def ptr(x):
        return x.data_ptr()

    arg = ptr  # a host tensor as a _kvcfast entry takes it: its address

    def from_dlpack(t):
        return torch.from_dlpack(t)

    def is_tensor(x):
        return isinstance(x, torch.Tensor)

    def numel(x):
        return x.numel()

    def host_array(values, dtype=None):
        return torch.tensor(values, dtype=dtype or I64)

    def to_device(host, device):
        """A device copy of a host tensor (the host tensor is remembered on it)."""
        if not is_cuda(device):
            return host.clone()
        # non_blocking: no stream synchronization (sglang-spec.md 16). The source is
        # pageable memory, which the driver stages before the call returns; it stays
        # alive as dev._kvc_host anyway.
        dev = host.to(_tdev(device), non_blocking=True)
        dev._kvc_host = host
        return dev

    def _tdev(device):
        d = _norm_device(device)
        return "cpu" if not d.startswith("cuda") else d

    _Tensor = torch.Tensor

    def host_from_bytes(buf):
        """A host int64 tensor over the bytes of `buf` (a bytearray; kept alive by it)."""
        return torch.frombuffer(buf, dtype=I64) if len(buf) else torch.empty(0, dtype=I64)

    def host_i64(x):
        """A contiguous host int64 tensor with x's values (x itself when it is one)."""
        if type(x) is _Tensor and not x.is_cuda and x.dtype is I64 and x.dim() == 1 \
                and x.is_contiguous():
            return x  # the common case first: no reshape (about 1.5 us a call)
        if isinstance(x, torch.Tensor):
            if x.is_cuda:
                h = getattr(x, "_kvc_host", None)
                if h is not None and h.numel() == x.numel():
                    return h
                x = x.cpu()  # a device tensor kvcache did not produce: one copy
            if x.dtype != I64 or not x.is_contiguous():
                x = x.to(I64).contiguous()
            return x.reshape(-1)
        if np is not None and isinstance(x, np.ndarray):
            return torch.from_numpy(np.ascontiguousarray(x, dtype=np.int64).reshape(-1))
        if isinstance(x, int) or (hasattr(x, "__index__") and not hasattr(x, "__len__")):
            return torch.tensor([int(x)], dtype=I64)
        return torch.tensor([int(v) for v in x], dtype=I64)

    def host_i32(x):
        if isinstance(x, torch.Tensor):
            if x.is_cuda:
                x = x.cpu()
            if x.dtype != I32 or not x.is_contiguous():
                x = x.to(I32).contiguous()
            return x.reshape(-1)
        return torch.tensor([int(v) for v in x], dtype=I32)

    def tolist(x):
        return x.tolist()

    def stack_rows(rows, dtype=None):
        return torch.tensor(rows, dtype=dtype or I64)

    def host_i64_arg(x):
        """x as the _kvcfast entries take a host int64 vector without a copy: a host int64
        contiguous tensor's address, a list as array('q'); None when x needs host_i64."""
        if isinstance(x, torch.Tensor):
            if x.dtype is I64 and not x.is_cuda and x.is_contiguous():
                return x.data_ptr()
            return None
        if isinstance(x, list):
            return array.array("q", x)
        return None

else:
    I64, I32 = np.int64, np.int32

    def empty(n, dtype, device="cpu"):
        return np.empty(n, dtype=dtype)

    def zeros(n, dtype, device="cpu"):
        return np.zeros(n, dtype=dtype)

    def ptr(x):
        return x.__array_interface__["data"][0]

    def arg(x):
        """A host array as a _kvcfast entry takes it: the array itself (buffer protocol;
        its address through __array_interface__ costs about a microsecond)."""
        return x

    def from_dlpack(t):
        return np.from_dlpack(t)

    def is_tensor(x):
        return isinstance(x, np.ndarray)

    def numel(x):
        return x.size

    def host_array(values, dtype=None):
        return np.array(values, dtype=dtype or I64)

    def to_device(host, device):
        if is_cuda(device):
            raise RuntimeError("CUDA tensors need torch")
        return host.copy()

    def host_from_bytes(buf):
        """A host int64 array over the bytes of `buf` (a bytearray; kept alive by it)."""
        return np.frombuffer(buf, dtype=np.int64)

    def host_i64(x):
        if isinstance(x, np.ndarray):
            if x.dtype != np.int64 or not x.flags.c_contiguous:
                x = np.ascontiguousarray(x, dtype=np.int64)
            return x.reshape(-1)
        if isinstance(x, (int, np.integer)):
            return np.array([x], dtype=np.int64)
        return np.array(list(x), dtype=np.int64)

    def host_i32(x):
        if isinstance(x, np.ndarray):
            return np.ascontiguousarray(x, dtype=np.int32).reshape(-1)
        return np.array(list(x), dtype=np.int32)

    def tolist(x):
        return x.tolist()

    def stack_rows(rows, dtype=None):
        return np.array(rows, dtype=dtype or I64)

    _I64D = np.dtype(np.int64)

    def host_i64_arg(x):
        """x as the _kvcfast entries take a host int64 vector without a copy: a C-contiguous
        int64 array itself (buffer protocol), a list as array('q'); None when x needs
        host_i64."""
        if isinstance(x, np.ndarray):
            return x if x.dtype is _I64D and x.flags.c_contiguous else None
        if isinstance(x, list):
            return array.array("q", x)
        return None


def host_i64_ptr(x):
    """(keep, address) of x as host int64: lists go through array.array (C speed)."""
    if isinstance(x, list):
        a = array.array("q", x)
        return a, a.buffer_info()[0]
    h = host_i64(x)
    return h, ptr(h)


def copy_bytes(addr, nbytes):
    """A new bytearray with the nbytes of host memory at addr (one C call with _kvcfast)."""
    if fast is not None:
        return fast.copy_bytes(addr, nbytes)
    return bytearray(ctypes.string_at(addr, nbytes)) if nbytes else bytearray()


def from_address_i64(addr, n):
    """A new host int64 tensor with the n values at addr: a view of a bytearray copy
    (torch.frombuffer / np.frombuffer: about 1 us, a torch.empty plus a copy about 2.5)."""
    if n == 0:
        return host_empty(0)
    return host_from_bytes(copy_bytes(addr, 8 * n))


def new_host_i64(n):
    """A fresh writable host int64 vector of n, content undefined: with torch a view of a
    new bytearray (about 1 us; torch.empty and a slice about 4), with NumPy np.empty."""
    if n <= 0:
        return host_empty(0)
    if torch is None:
        return np.empty(n, np.int64)
    return host_from_bytes(bytearray(8 * n))


def rows_i64(rows32, n):
    """Host int64 vector of the first n int32 of rows32 (a ctypes int32 array)."""
    if fast is not None:
        return host_from_bytes(fast.widen_i32(rows32, n))
    return host_array(rows32[:n])


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) if torch is not None else None
_cur_device = getattr(torch._C, "_cuda_getDevice", None) if torch is not None else None
_stream_warm = False


def stream(cuda):
    """The CUDA stream kvcache's launches go to: torch's current stream on the CUDA
    backend (so they are ordered with the caller's torch work, as SGLang's own kernels
    are), None (the legacy default stream / no stream) otherwise. After the first call
    (torch.cuda.current_stream(), which initializes CUDA) the same handle is read through
    torch._C._cuda_getCurrentRawStream (what torch's own generated code uses): no Stream
    object is built per call."""
    global _stream_warm
    if not cuda or torch is None:
        return None
    if _stream_warm:
        return _raw_stream(_cur_device()) or None
    s = torch.cuda.current_stream().cuda_stream or None
    _stream_warm = _raw_stream is not None and _cur_device is not None
    return s


def host_empty(n, dtype=None):
    return empty(n, dtype or I64, "cpu")


def fw_dtype(dtype):
    """The framework's dtype object of a torch / numpy dtype or a name ("float32")."""
    if isinstance(dtype, str):
        name = dtype.replace("torch.", "")
        return getattr(torch, name) if torch is not None else np.dtype(name)
    return dtype


def dtype_name(dtype):
    """kvcache's dtype name of a torch / numpy dtype or a name."""
    s = str(dtype).replace("torch.", "")
    return {"float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2"}.get(s, s)


class OutRing:
    """Preallocated int64 output vectors of one call kind, handed out in turn: a result
    stays valid for the next `depth - 1` calls of the same kind (the overlap scheduler
    keeps one step's out_cache_loc while the next is allocated). Each grows (doubling)
    only when a call needs more."""

    __slots__ = ("device", "depth", "bufs", "ptrs", "i", "caps", "views", "view_n")

    def __init__(self, device, depth=8):
        self.device, self.depth = device, depth
        self.bufs = [None] * depth
        self.ptrs = [0] * depth
        self.caps = [0] * depth
        self.i = 0
        self.views = [None] * depth
        self.view_n = [-1] * depth

    def next_out(self, n):
        """(device tensor of n elements, its address). No host copy of the slots is
        asked of the library: nothing reads one (on the host backend the device tensor is
        host memory). The view of a buffer is reused while n repeats
        (a decode batch keeps its size for many steps; slicing a torch tensor costs about
        a microsecond)."""
        i = self.i
        self.i = (i + 1) % self.depth
        if self.caps[i] < n:
            cap = max(n, 2 * self.caps[i], 256)
            self.bufs[i] = empty(cap, I64, self.device)
            self.ptrs[i] = ptr(self.bufs[i])
            self.caps[i] = cap
            self.view_n[i] = -1
        if self.view_n[i] != n:
            self.views[i] = self.bufs[i][:n]
            self.view_n[i] = n
        return self.views[i], self.ptrs[i]


class Slab:
    """Fresh int64 device vectors carved one after another out of preallocated slabs, for
    results the caller may keep indefinitely (alloc_for_extend's req_pool_indices: a batch
    keeps it for its life). A slab is never reused: each handed-out vector is a view that
    keeps its slab alive, and a full slab is replaced by a new one, so no later call
    writes into memory a kept vector shows (unlike OutRing). Costs one slice per call
    instead of an allocation and a host-to-device copy."""

    __slots__ = ("device", "cap", "buf", "base", "used")

    def __init__(self, device, cap=1 << 14):
        self.device, self.cap = device, cap
        self.buf, self.base, self.used = None, 0, cap

    def take(self, n):
        """(a fresh device int64 vector of n elements, its address)."""
        if self.used + n > self.cap:
            self.cap = max(self.cap, n)
            self.buf = empty(self.cap, I64, self.device)
            self.base = ptr(self.buf)
            self.used = 0
        u = self.used
        self.used = u + n
        return self.buf[u:u + n], self.base + 8 * u


def status_ok_or_none(st, ctx, func):
    """None for KVC_ERR_OUT_OF_SLOTS (SGLang returns None on shortage), raises others."""
    if st == 0:
        return True
    if st == 2:
        return None
    ctx._check(st, func)
    return True


def proto(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


c_void_p, c_int, c_int32, c_int64, c_size_t = (ctypes.c_void_p, ctypes.c_int, ctypes.c_int32,
                                               ctypes.c_int64, ctypes.c_size_t)
