"""Buffer arguments: zero-copy pointers with every check C relies on. Internal module.

describe(x) turns whatever the caller passed into a _View: address, element count, element
size and kvc_dtype, host or device memory, writability. Accepted, cheapest first:
DeviceBuffer / Tensor (the library's own), torch tensors, NumPy arrays and anything with
__array_interface__ (host) or __cuda_array_interface__ (device), __dlpack__ producers,
the buffer protocol (array.array, bytearray, memoryview, ctypes arrays), and lists or
tuples of ints, which are packed once by array.array (C speed, never element by element
in Python). A raw int address is taken on trust (the caller passes n; nothing can be
checked about memory we cannot see) and is the only unchecked form.

vec_in() / vec_out() then check a view against what C will read or write (count >= n,
dtype, contiguity, host vs device, writable) and raise InvalidArgument naming the
argument before any foreign call. Inputs of the wrong integer width on the host are
converted once (array.array, or numpy.astype for NumPy arrays); outputs never are.
"""
import array
import ctypes

_NP = None  # numpy module once an ndarray has been seen (never imported here otherwise)

# kvc_dtype <- NumPy / array-interface typestr
_TYPESTR = {"<i8": 8, "<i4": 7, "<f4": 1, "<f2": 2, "|u1": 6, "<u8": 9, "|i1": 6, "<u4": None,
            "<f8": None, "<i2": None, "<u2": None, "|b1": None}
# kvc_dtype <- buffer-protocol format (native, little-endian Linux)
_FORMAT = {"q": 8, "l": 8, "i": 7, "f": 1, "e": 2, "B": 6, "b": 6, "c": 6, "Q": 9, "L": 9,
           "<q": 8, "<l": 8, "<i": 7, "<f": 1, "<e": 2, "<Q": 9, "=q": 8, "=i": 7}
# kvc_dtype <- torch dtype name
_TORCH = {"torch.int64": 8, "torch.int32": 7, "torch.float32": 1, "torch.float16": 2,
          "torch.bfloat16": 3, "torch.float8_e4m3fn": 4, "torch.float8_e5m2": 5,
          "torch.uint8": 6, "torch.int8": 6, "torch.uint64": 9, "torch.float4_e2m1fn_x2": 10}
# kvc_dtype <- DLPack (code, bits)
_DL = {(0, 64): 8, (0, 32): 7, (2, 32): 1, (2, 16): 2, (4, 16): 3, (1, 8): 6, (0, 8): 6,
       (1, 64): 9, (17, 4): 10, (10, 8): 4, (11, 8): 5}
_SIZE = {1: 4, 2: 2, 3: 2, 4: 1, 5: 1, 6: 1, 7: 4, 8: 8, 9: 8, 10: 1}
_ARRAY_CODE = {8: "q", 7: "i"}

_pyapi = ctypes.PyDLL(None)  # own function objects (argtypes set here only)
_pyapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_pyapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_pyapi.PyCapsule_IsValid.restype = ctypes.c_int
_pyapi.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]


class BufferArgError(ValueError):
    """Raised here; the package re-raises it as InvalidArgument (naming the argument)."""


class _View:
    __slots__ = ("ptr", "count", "itemsize", "dtype", "device", "writable", "contiguous",
                 "keep", "dev_id")

    def __init__(self, ptr, count, itemsize, dtype, device, writable, contiguous, keep=None,
                 dev_id=None):
        self.ptr = ptr              # int address (0 for an empty buffer)
        self.count = count          # elements
        self.itemsize = itemsize    # bytes per element
        self.dtype = dtype          # kvc_dtype or None when unknown
        self.device = device        # "host" or "cuda"
        self.writable = writable
        self.contiguous = contiguous
        self.keep = keep            # what must stay alive while C uses ptr
        self.dev_id = dev_id        # CUDA ordinal when known (torch, DLPack), else None


def _c_contiguous(shape, strides, itemsize):
    if strides is None:
        return True
    expect = itemsize
    for dim, st in zip(reversed(shape), reversed(strides)):
        if dim != 1 and st != expect:
            return False
        expect *= dim
    return True


def _prod(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _from_iface(x, iface, device):
    typestr = iface["typestr"]
    dtype = _TYPESTR.get(typestr)
    itemsize = int(typestr[2:]) if typestr[2:].isdigit() else 1
    shape = tuple(iface["shape"])
    ptr, readonly = iface["data"] if iface.get("data") is not None else (0, False)
    return _View(ptr or 0, _prod(shape), itemsize, dtype, device, not readonly,
                 _c_contiguous(shape, iface.get("strides"), itemsize), x)


def _from_dlpack(x):
    try:
        cap = x.__dlpack__()
    except TypeError:
        return None
    if not _pyapi.PyCapsule_IsValid(cap, b"dltensor"):
        return None
    # Read the DLTensor in place; the capsule stays unconsumed (its producer's destructor
    # frees it when `keep` goes), so no ownership moves to us.
    from ._ffi import DLManagedTensor
    m = DLManagedTensor.from_address(_pyapi.PyCapsule_GetPointer(cap, b"dltensor"))
    t = m.dl_tensor
    shape = tuple(t.shape[i] for i in range(t.ndim))
    itemsize = max(t.dtype.bits * t.dtype.lanes // 8, 1)
    strides = None
    if t.strides:
        strides = tuple(t.strides[i] * itemsize for i in range(t.ndim))
    dev = {1: "host", 3: "host", 2: "cuda", 13: "cuda"}.get(t.device.device_type, "other")
    return _View((t.data or 0) + t.byte_offset, _prod(shape), itemsize,
                 _DL.get((t.dtype.code, t.dtype.bits)), dev, True,
                 _c_contiguous(shape, strides, itemsize), cap,
                 t.device.device_id if dev == "cuda" else None)


def _from_buffer(x):
    try:
        mv = memoryview(x)
    except TypeError:
        return None
    fmt = mv.format
    dtype = _FORMAT.get(fmt)
    if not mv.c_contiguous:
        return _View(0, mv.nbytes // mv.itemsize, mv.itemsize, dtype, "host", not mv.readonly,
                     False, mv)
    if mv.nbytes == 0:
        return _View(0, 0, mv.itemsize, dtype, "host", not mv.readonly, True, mv)
    if mv.readonly:
        if isinstance(x, bytes):
            ptr = ctypes.cast(ctypes.c_char_p(x), ctypes.c_void_p).value
            keep = x
        else:  # no address for a read-only export without NumPy: one C-speed copy
            keep = (ctypes.c_char * mv.nbytes).from_buffer_copy(mv)
            ptr = ctypes.addressof(keep)
        return _View(ptr, mv.nbytes // mv.itemsize, mv.itemsize, dtype, "host", False, True,
                     keep)
    keep = (ctypes.c_char * mv.nbytes).from_buffer(mv.cast("B"))
    return _View(ctypes.addressof(keep), mv.nbytes // mv.itemsize, mv.itemsize, dtype, "host",
                 True, True, keep)


def _d_list(x, ints):
    try:
        a = array.array(_ARRAY_CODE[ints], x)
    except (TypeError, OverflowError) as e:
        raise BufferArgError("must hold integers (%s)" % e) from None
    addr = a.buffer_info()[0] if len(a) else 0
    return _View(addr, len(a), a.itemsize, ints, "host", True, True, a)


def _d_array(x, ints):
    addr, n = x.buffer_info()
    return _View(addr if n else 0, n, x.itemsize, _FORMAT.get(x.typecode), "host", True, True,
                 x)


_NP_CHAR = {"q": 8, "l": 8, "i": 7, "f": 1, "e": 2, "B": 6, "b": 6, "Q": 9, "L": 9}


def _d_numpy(x, ints):
    flags = x.flags
    dt = x.dtype
    if flags.c_contiguous and flags.writeable and x.size and dt.isnative:
        # The cheap address of a writable contiguous array (no interface dict).
        ptr = ctypes.addressof(ctypes.c_char.from_buffer(x))
        return _View(ptr, x.size, dt.itemsize, _NP_CHAR.get(dt.char), "host", True, True, x)
    return _from_iface(x, x.__array_interface__, "host")


def _d_torch(x, ints):
    dev = "cuda" if x.is_cuda else ("host" if x.device.type == "cpu" else "other")
    return _View(x.data_ptr(), x.numel(), x.element_size(), _TORCH.get(str(x.dtype)), dev,
                 True, x.is_contiguous(), x, x.get_device() if dev == "cuda" else None)


_FAST = {list: _d_list, tuple: _d_list, range: _d_list, array.array: _d_array}


def describe(x, ints=8):
    """_View of x, or None for a raw int address. `ints`: the kvc_dtype lists and tuples
    are packed as (8 = int64, 7 = int32)."""
    t = type(x)
    fast = _FAST.get(t)
    if fast is not None:
        return fast(x, ints)
    if t is int:
        return None
    own = getattr(x, "_kvc_view", None)
    if own is not None:  # DeviceBuffer / Tensor
        return own()
    mod = t.__module__
    if mod == "numpy" and hasattr(x, "__array_interface__") and hasattr(x, "flags"):
        global _NP
        _NP = _NP or __import__("numpy")
        if t is _NP.ndarray:
            _FAST[t] = _d_numpy
        return _d_numpy(x, ints)
    if mod == "torch" and hasattr(x, "data_ptr"):
        _FAST[t] = _d_torch
        return _d_torch(x, ints)
    iface = getattr(x, "__cuda_array_interface__", None)
    if iface is not None:
        return _from_iface(x, iface, "cuda")
    iface = getattr(x, "__array_interface__", None)
    if iface is not None:
        return _from_iface(x, iface, "host")
    if hasattr(x, "__dlpack__"):
        v = _from_dlpack(x)
        if v is not None:
            return v
    v = _from_buffer(x)
    if v is not None:
        return v
    raise BufferArgError("cannot take a buffer of %s" % t.__name__)


def _untyped(v, dtype):
    """A view of untyped bytes (dtype 0: Context.alloc buffers) read as `dtype`."""
    size = _SIZE[dtype]
    return _View(v.ptr, v.count * v.itemsize // size, size, dtype, v.device, v.writable,
                 v.contiguous, v.keep)


def _where_ok(view, where, backend):
    """where: 'host' (host memory the library reads or writes itself) or 'device' (memory
    kernels touch: device memory on CUDA, host memory on the host backend). backend:
    'host' or 'cuda:N' (the context's device)."""
    if where == "host" or backend == "host":
        return view.device == "host"
    return view.device == "cuda" and (view.dev_id is None or
                                      "cuda:%d" % view.dev_id == backend)


def _got(v):
    return v.device if v.dev_id is None else "%s:%d" % (v.device, v.dev_id)


def _mem_name(where, backend):
    if where == "host" or backend == "host":
        return "host memory"
    return "CUDA device memory of the context's device (%s)" % backend


def vec_in(x, n, dtypes, where, backend, ints=8, convert=True):
    """(ptr, count, dtype, keep) of an input vector. dtypes: allowed kvc_dtypes (the first
    is the conversion target). n: elements C reads (None: the whole buffer)."""
    if x is None:
        return None, 0, None, None
    v = describe(x, ints)
    if v is None:
        if n is None:
            raise BufferArgError("n is required with a raw address")
        return x, int(n), None, None
    if not _where_ok(v, where, backend):
        raise BufferArgError("must be %s (got %s memory)" % (_mem_name(where, backend),
                                                             _got(v)))
    if v.dtype == 0:
        v = _untyped(v, dtypes[0])
    if v.dtype not in dtypes or not v.contiguous:
        if not convert or v.device != "host":
            if not v.contiguous:
                raise BufferArgError("must be C-contiguous")
            raise BufferArgError("must be %s (got %s)" % (
                " or ".join(_NAMES[d] for d in dtypes), _NAMES.get(v.dtype, "unknown dtype")))
        v = _convert(x, v, dtypes[0])
    count = v.count
    if n is not None:
        n = int(n)
        if n < 0:
            raise BufferArgError("n must be >= 0")
        if count < n:
            raise BufferArgError("has %d elements, %d needed" % (count, n))
        count = n
    return v.ptr, count, v.dtype, v.keep


def _convert(x, v, target):
    """One C-speed conversion of a host input to contiguous `target` integers."""
    if target not in _ARRAY_CODE:
        raise BufferArgError("must be %s (got %s)" % (_NAMES[target], _NAMES.get(v.dtype, "?")))
    mod = type(x).__module__
    if v.dtype not in (None, 6, 7, 8, 9) and mod not in ("numpy", "torch"):
        raise BufferArgError("must be %s (got %s)" % (_NAMES[target], _NAMES.get(v.dtype)))
    if mod == "numpy":
        if x.dtype.kind not in "iu":  # integers only: never truncate floats silently
            raise BufferArgError("must be %s (got %s)" % (_NAMES[target], x.dtype))
        a = _NP.ascontiguousarray(x, dtype=_NP.int64 if target == 8 else _NP.int32)
        return describe(a)
    if mod == "torch":
        import torch
        if x.is_floating_point() or x.is_complex():
            raise BufferArgError("must be %s (got %s)" % (_NAMES[target], x.dtype))
        t = x.detach().to(dtype=torch.int64 if target == 8 else torch.int32).contiguous()
        return describe(t)
    if v.itemsize in (4, 8) and v.dtype in (7, 8) and v.contiguous and v.ptr:
        src = (ctypes.c_int64 if v.itemsize == 8 else ctypes.c_int32) * v.count
        a = array.array(_ARRAY_CODE[target], src.from_address(v.ptr))
        return describe(a)
    raise BufferArgError("must be a contiguous %s vector (got %s)" % (
        _NAMES[target], _NAMES.get(v.dtype, "unknown dtype")))


def vec_out(x, n, dtype, where, backend, name_itemsize=None):
    """(ptr, view) of an output vector C writes n elements of `dtype` into. dtype None:
    any dtype, n counts bytes."""
    v = describe(x)
    if v is None:
        return x, None
    if not _where_ok(v, where, backend):
        raise BufferArgError("must be %s (got %s memory)" % (_mem_name(where, backend),
                                                             _got(v)))
    if not v.writable:
        raise BufferArgError("is read-only")
    if not v.contiguous:
        raise BufferArgError("must be C-contiguous")
    if dtype is not None and v.dtype == 0:
        v = _untyped(v, dtype)
    if dtype is not None and v.dtype != dtype:
        raise BufferArgError("must be %s (got %s)" % (_NAMES[dtype],
                                                      _NAMES.get(v.dtype, "unknown dtype")))
    have = v.count if dtype is not None else v.count * v.itemsize
    if have < n:
        raise BufferArgError("has room for %d %s, %d needed" % (
            have, "elements" if dtype is not None else "bytes", n))
    return v.ptr, v


def bytes_in(x, nbytes, where, backend, writable=False):
    """(ptr, view) of a buffer C reads (or writes) nbytes of, any dtype."""
    v = describe(x)
    if v is None:
        return x, None
    if not _where_ok(v, where, backend):
        raise BufferArgError("must be %s (got %s memory)" % (_mem_name(where, backend),
                                                             _got(v)))
    if not v.contiguous:
        raise BufferArgError("must be C-contiguous")
    if writable and not v.writable:
        raise BufferArgError("is read-only")
    have = v.count * v.itemsize
    if have < nbytes:
        raise BufferArgError("has %d bytes, %d needed" % (have, nbytes))
    return v.ptr, v


_NAMES = {None: "unknown dtype", 0: "untyped bytes", 1: "float32", 2: "float16", 3: "bfloat16",
          4: "float8_e4m3fn", 5: "float8_e5m2", 6: "uint8", 7: "int32", 8: "int64",
          9: "uint64", 10: "fp4_e2m1"}
