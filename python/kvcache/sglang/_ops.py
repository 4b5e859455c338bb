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
        dev = host.to(_tdev(device), non_blocking=False)
        dev._kvc_host = host
        return dev

    def _tdev(device):
        d = _norm_device(device)
        return "cpu" if not d.startswith("cuda") else d

    def host_i64(x):
        """A contiguous host int64 tensor with x's values (x itself when it is one)."""
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

else:
    I64, I32 = np.int64, np.int32

    def empty(n, dtype, device="cpu"):
        return np.empty(n, dtype=dtype)

    def zeros(n, dtype, device="cpu"):
        return np.zeros(n, dtype=dtype)

    def ptr(x):
        return x.__array_interface__["data"][0]

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


def host_i64_ptr(x):
    """(keep, address) of x as host int64: lists go through array.array (C speed)."""
    if isinstance(x, list):
        a = array.array("q", x)
        return a, a.buffer_info()[0]
    h = host_i64(x)
    return h, ptr(h)


def from_address_i64(addr, n):
    """A new host int64 tensor with the n values at addr."""
    if n == 0:
        return host_empty(0)
    if torch is not None:
        t = torch.empty(n, dtype=I64)
        ctypes.memmove(t.data_ptr(), addr, 8 * n)
        return t
    return np.frombuffer((ctypes.c_int64 * n).from_address(addr), np.int64).copy()


def stream(cuda):
    """The CUDA stream kvcache's launches go to: torch's current stream on the CUDA
    backend (so they are ordered with the caller's torch work, as SGLang's own kernels
    are), None (the legacy default stream / no stream) otherwise."""
    if not cuda or torch is None:
        return None
    return torch.cuda.current_stream().cuda_stream or None


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

    __slots__ = ("device", "depth", "bufs", "ptrs", "i", "caps", "host", "host_ptr",
                 "host_cap")

    def __init__(self, device, depth=8):
        self.device, self.depth = device, depth
        self.bufs = [None] * depth
        self.ptrs = [0] * depth
        self.caps = [0] * depth
        self.i = 0
        self.host = None
        self.host_ptr = 0
        self.host_cap = 0

    def next(self, n):
        """(device tensor of n elements, its address, host tensor of n, its address);
        addresses are computed once per buffer (NumPy's are not free)."""
        i = self.i
        self.i = (i + 1) % self.depth
        if self.caps[i] < n:
            cap = max(n, 2 * self.caps[i], 256)
            self.bufs[i] = empty(cap, I64, self.device)
            self.ptrs[i] = ptr(self.bufs[i])
            self.caps[i] = cap
        if self.host_cap < n:
            self.host_cap = max(n, 2 * self.host_cap, 256)
            self.host = empty(self.host_cap, I64, "cpu")
            self.host_ptr = ptr(self.host)
        return self.bufs[i][:n], self.ptrs[i], self.host[:n], self.host_ptr


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
