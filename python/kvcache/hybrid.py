"""Hybrid and sliding-window models: Mamba state pools, the hybrid request pool, SWA
allocators and SWA KV pools (SGLang MambaPool, HybridReqToTokenPool,
SWATokenToKVPoolAllocator, SWAKVPool). Buffer arguments are checked as everywhere in the
package (python/kvcache/_buf.py); exported from ``kvcache``.
"""
import contextlib
import ctypes
from ctypes import POINTER, Structure, byref, c_int, c_int32, c_int64, c_size_t, c_uint32, \
    c_uint64, c_void_p

from . import (InvalidArgument, KVPool, Tensor, VERSION_NUMBER, _bytes, _dtype_code, _ffi,
               _extend_total, _Handle, _idx_in, _in, _out, _stream)
from . import _buf

lib = _ffi.lib
_P = c_void_p
_st = c_int


class MambaShape(Structure):
    _fields_ = [("ndim", c_int32), ("pad_", c_int32), ("dims", c_int64 * 3)]


class MambaPoolConfig(Structure):
    _fields_ = [("struct_size", c_size_t), ("version", c_uint32), ("size", c_int32),
                ("num_layers", c_int32), ("num_conv", c_int32), ("layer_ids", _P),
                ("conv_shapes", _P), ("conv_dtype", c_int), ("temporal_dtype", c_int),
                ("temporal_shape", c_int64 * 3), ("spec_state_size", c_int32),
                ("num_draft_tokens", c_int32), ("flags", c_uint32), ("pad_", c_int32),
                ("reserved_", c_uint64 * 4)]


class HybridReqPoolConfig(Structure):
    _fields_ = [("struct_size", c_size_t), ("version", c_uint32), ("flags", c_uint32),
                ("pp", c_int32), ("pad_", c_int32), ("req_pool", _P), ("mamba_pool", _P),
                ("reserved_", c_uint64 * 4)]


class SwaAllocatorConfig(Structure):
    _fields_ = [("struct_size", c_size_t), ("version", c_uint32), ("flags", c_uint32),
                ("size_full", c_int64), ("size_swa", c_int64), ("page_size", c_int32),
                ("ring_size", c_int32), ("req_pool", _P), ("reserved_", c_uint64 * 4)]


class SwaKVPoolConfig(Structure):
    _fields_ = [("struct_size", c_size_t), ("version", c_uint32), ("dtype", c_int),
                ("size_full", c_int64), ("size_swa", c_int64), ("page_size", c_int32),
                ("num_full_layers", c_int32), ("num_swa_layers", c_int32),
                ("head_num", c_int32), ("head_dim", c_int32), ("v_head_dim", c_int32),
                ("swa_head_num", c_int32), ("swa_head_dim", c_int32),
                ("swa_v_head_dim", c_int32), ("pad_", c_int32), ("full_layer_ids", _P),
                ("swa_layer_ids", _P), ("translate_capacity", c_int64),
                ("reserved_", c_uint64 * 4)]


class HybridKVPoolConfig(Structure):
    _fields_ = [("struct_size", c_size_t), ("version", c_uint32), ("num_full_layers", c_int32),
                ("full_layer_ids", _P), ("kv", _P), ("mamba_pool", _P),
                ("reserved_", c_uint64 * 4)]


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_fn("kvc_mamba_pool_create", _st, _P, POINTER(MambaPoolConfig), POINTER(c_void_p))
_fn("kvc_mamba_pool_destroy", None, _P)
_fn("kvc_mamba_pool_size", c_int32, _P)
_fn("kvc_mamba_pool_available", c_int32, _P)
_fn("kvc_mamba_pool_is_held", c_int, _P, c_int32)
_fn("kvc_mamba_pool_alloc", _st, _P, c_size_t, _P, _P)
_fn("kvc_mamba_pool_free", _st, _P, _P, c_size_t)
_fn("kvc_mamba_pool_clear", _st, _P)
_fn("kvc_mamba_pool_clear_slots", _st, _P, _P, c_size_t, _P)
_fn("kvc_mamba_pool_copy_from", _st, _P, _P, _P, c_size_t, _P)
_fn("kvc_mamba_pool_fork_from", _st, _P, c_int32, POINTER(c_int32), _P)
_fn("kvc_mamba_pool_buffer", _st, _P, c_int, c_int32, c_int32, POINTER(_ffi.BufferDesc))
_fn("kvc_mamba_pool_host_copy_bytes", _st, _P, c_size_t, POINTER(c_size_t))
_fn("kvc_mamba_pool_copy_to_host", _st, _P, _P, c_size_t, _P, _P)
_fn("kvc_mamba_pool_copy_from_host", _st, _P, _P, c_size_t, _P, _P)
_fn("kvc_mamba_pool_check", _st, _P)
_fn("kvc_hybrid_req_pool_create", _st, _P, POINTER(HybridReqPoolConfig), POINTER(c_void_p))
_fn("kvc_hybrid_req_pool_destroy", None, _P)
_fn("kvc_hybrid_req_pool_pp", c_int32, _P)
_fn("kvc_hybrid_req_pool_alloc", _st, _P, c_size_t, _P, _P, _P, _P)
_fn("kvc_hybrid_req_pool_free_mamba_cache", _st, _P, c_int32, c_int32, _P)
_fn("kvc_hybrid_req_pool_mamba_slot", c_int32, _P, c_int32)
_fn("kvc_swa_allocator_create", _st, _P, POINTER(SwaAllocatorConfig), POINTER(c_void_p))
_fn("kvc_swa_allocator_destroy", None, _P)
for _name in ("available_size", "full_available_size", "swa_available_size", "size",
              "size_full", "size_swa", "mapping_length"):
    _fn("kvc_swa_allocator_" + _name, c_int64, _P)
_fn("kvc_swa_allocator_page_size", c_int32, _P)
_fn("kvc_swa_allocator_mapping_host", POINTER(c_int32), _P)
_fn("kvc_swa_allocator_mapping_device", _P, _P)
_fn("kvc_swa_allocator_translate_host", _st, _P, _P, c_size_t, _P)
_fn("kvc_swa_allocator_alloc", _st, _P, c_int64, _P, _P, _P)
_fn("kvc_swa_allocator_alloc_extend", _st, _P, c_size_t, _P, _P, _P, _P, _P, _P, _P, _P, _P)
_fn("kvc_swa_allocator_alloc_extend_ex", _st, _P, POINTER(_ffi.ExtendArgs))
_fn("kvc_swa_allocator_alloc_decode", _st, _P, c_size_t, _P, _P, _P, _P, _P, _P, _P)
_fn("kvc_swa_allocator_free", _st, _P, _P, c_size_t, _P)
_fn("kvc_swa_allocator_free_swa", _st, _P, _P, c_size_t, _P)
_fn("kvc_swa_allocator_check", _st, _P)
_fn("kvc_swa_allocator_free_group_begin", _st, _P)
_fn("kvc_swa_allocator_free_group_end", _st, _P)
_fn("kvc_swa_allocator_defer_zero_begin", _st, _P)
_fn("kvc_swa_allocator_defer_zero_end", _st, _P, _P)
_fn("kvc_swa_allocator_zero_pending", c_int64, _P)
_fn("kvc_swa_allocator_zero_flush", _st, _P, _P)
_fn("kvc_swa_allocator_clear", _st, _P, _P)
_fn("kvc_swa_kv_pool_create", _st, _P, POINTER(SwaKVPoolConfig), POINTER(c_void_p))
_fn("kvc_swa_kv_pool_destroy", None, _P)
_fn("kvc_swa_kv_pool_full", _P, _P)
_fn("kvc_swa_kv_pool_swa", _P, _P)
_fn("kvc_swa_kv_pool_layer", _st, _P, c_int32, POINTER(c_int), POINTER(c_int32))
_fn("kvc_swa_kv_pool_register_allocator", _st, _P, _P)
_fn("kvc_swa_kv_pool_set_kv", _st, _P, c_int32, _P, _P, c_int, c_size_t, _P, _P, c_int, c_int64,
    c_int64, _P, ctypes.c_float, _P, ctypes.c_float, _P)
_fn("kvc_swa_kv_pool_move", _st, _P, _P, _P, c_int, c_size_t, _P)

_fn("kvc_hybrid_kv_pool_create", _st, _P, POINTER(HybridKVPoolConfig), POINTER(c_void_p))
_fn("kvc_hybrid_kv_pool_destroy", None, _P)
_fn("kvc_hybrid_kv_pool_full", _P, _P)
_fn("kvc_hybrid_kv_pool_layer", _st, _P, c_int32, POINTER(c_int32))

_CONV, _TEMPORAL = 7, 8


def _i32_out(n):
    return (c_int32 * max(n, 1))()


class MambaPool(_Handle):
    """SGLang MambaPool: recurrent state slots 1..size (FIFO) with conv and temporal state
    tensors per layer. conv_shapes: per-slot shapes of the conv states (1-4 of them, 1-3
    dims each); temporal_shape: (heads, head_dim, state_size)."""

    _destroy_fn = staticmethod(lambda p: lib.kvc_mamba_pool_destroy(p))

    def __init__(self, ctx, size, num_layers, conv_shapes, temporal_shape, layer_ids=None,
                 conv_dtype="bfloat16", temporal_dtype="float32", spec_state_size=0,
                 num_draft_tokens=0, zero_on_alloc=True):
        cfg = MambaPoolConfig()
        cfg.struct_size, cfg.version = ctypes.sizeof(cfg), VERSION_NUMBER
        cfg.size, cfg.num_layers, cfg.num_conv = size, num_layers, len(conv_shapes)
        shapes = (MambaShape * max(len(conv_shapes), 1))()
        for i, s in enumerate(conv_shapes):
            s = tuple(s)
            if not 1 <= len(s) <= 3:
                raise InvalidArgument(1, "conv_shapes[%d] must have 1 to 3 dims" % i)
            shapes[i].ndim = len(s)
            for j, d in enumerate(s):
                shapes[i].dims[j] = d
        ids = None
        if layer_ids is not None:
            layer_ids = list(layer_ids)
            if len(layer_ids) != num_layers:
                raise InvalidArgument(1, "layer_ids has %d entries, num_layers is %d" %
                                      (len(layer_ids), num_layers))
            ids = (c_int32 * num_layers)(*layer_ids)
        cfg.layer_ids = ctypes.addressof(ids) if ids is not None else None
        cfg.conv_shapes = ctypes.addressof(shapes)
        cfg.conv_dtype, cfg.temporal_dtype = _dtype_code(conv_dtype), _dtype_code(temporal_dtype)
        for j, d in enumerate(temporal_shape):
            cfg.temporal_shape[j] = d
        cfg.spec_state_size, cfg.num_draft_tokens = spec_state_size, num_draft_tokens
        cfg.flags = 0 if zero_on_alloc else 0x1
        out = c_void_p()
        ctx._check(lib.kvc_mamba_pool_create(ctx.handle, byref(cfg), byref(out)),
                   "kvc_mamba_pool_create")
        self._ctx = ctx
        self.num_conv = len(conv_shapes)
        super().__init__(out.value, deps=(ctx,))

    def _check(self, st):
        self._ctx._check(st)

    @property
    def size(self):
        return lib.kvc_mamba_pool_size(self.handle)

    def available_size(self):
        return lib.kvc_mamba_pool_available(self.handle)

    def is_held(self, slot):
        return bool(lib.kvc_mamba_pool_is_held(self.handle, slot))

    def _slots(self, name, slots):
        return _in(self._ctx, name, slots, None, (7,), "host")

    def alloc(self, n, out=None, stream=None):
        """n slots (rows zeroed unless zero_on_alloc=False): a list, or `out` (host int32)."""
        if n < 0:
            raise InvalidArgument(1, "n must be >= 0")
        buf = _i32_out(n) if out is None else _out(self._ctx, "out", out, n, 7)
        self._check(lib.kvc_mamba_pool_alloc(self.handle, n, buf, _stream(stream)))
        return buf[:n] if out is None else out

    def free(self, slots):
        p, n, keep = self._slots("slots", slots)
        self._check(lib.kvc_mamba_pool_free(self.handle, p, n))

    def clear(self):
        self._check(lib.kvc_mamba_pool_clear(self.handle))

    def clear_slots(self, slots, stream=None):
        p, n, keep = self._slots("slots", slots)
        self._check(lib.kvc_mamba_pool_clear_slots(self.handle, p, n, _stream(stream)))

    def copy_from(self, src, dst, stream=None):
        """Rows dst[i] = rows src[i] of every state tensor and layer (one launch)."""
        sp, n, k1 = self._slots("src", src)
        dp, n2, k2 = self._slots("dst", dst)
        if n != n2:
            raise InvalidArgument(1, "src has %d slots, dst %d" % (n, n2))
        self._check(lib.kvc_mamba_pool_copy_from(self.handle, sp, dp, n, _stream(stream)))

    def fork_from(self, src, stream=None):
        slot = c_int32()
        self._check(lib.kvc_mamba_pool_fork_from(self.handle, src, byref(slot), _stream(stream)))
        return slot.value

    def buffer(self, region, layer_id, conv_index=0):
        """A DLPack-able Tensor of the 'conv' (conv_index) or 'temporal' state of a layer,
        shape (size + 1, *state shape)."""
        r = {"conv": _CONV, "temporal": _TEMPORAL}[region] if isinstance(region, str) \
            else int(region)
        d = _ffi.BufferDesc()
        d.struct_size, d.version = ctypes.sizeof(d), VERSION_NUMBER
        self._check(lib.kvc_mamba_pool_buffer(self.handle, r, conv_index, layer_id, byref(d)))
        return Tensor(self, d.data, tuple(d.shape[:d.ndim]), d.dtype)

    def conv_buffer(self, layer_id, conv_index=0):
        return self.buffer("conv", layer_id, conv_index)

    def temporal_buffer(self, layer_id):
        return self.buffer("temporal", layer_id)

    def host_copy_bytes(self, n):
        b = c_size_t()
        self._check(lib.kvc_mamba_pool_host_copy_bytes(self.handle, n, byref(b)))
        return b.value

    def copy_to_host(self, slots, host, stream=None):
        """Host offload (SGLang get_cpu_copy without syncs): rows `slots` of every state
        tensor into `host` (host_copy_bytes(n) bytes; pinned memory on CUDA)."""
        p, n, keep = self._slots("slots", slots)
        hp, _ = _bytes(self._ctx, "host", host, self.host_copy_bytes(n), "host", writable=True)
        self._check(lib.kvc_mamba_pool_copy_to_host(self.handle, p, n, hp, _stream(stream)))

    def copy_from_host(self, slots, host, stream=None):
        p, n, keep = self._slots("slots", slots)
        hp, _ = _bytes(self._ctx, "host", host, self.host_copy_bytes(n), "host")
        self._check(lib.kvc_mamba_pool_copy_from_host(self.handle, p, n, hp, _stream(stream)))

    def check(self):
        self._check(lib.kvc_mamba_pool_check(self.handle))


class HybridReqToTokenPool(_Handle):
    """SGLang HybridReqToTokenPool over a ReqToTokenPool and a MambaPool (both borrowed):
    one Mamba slot per request row, in a device req->mamba mapping. Pass it to
    Flow(..., hybrid_req_pool=...) for hybrid models."""

    _destroy_fn = staticmethod(lambda p: lib.kvc_hybrid_req_pool_destroy(p))

    def __init__(self, ctx, req_pool, mamba_pool, track=False, lazy=False, pp=2):
        cfg = HybridReqPoolConfig()
        cfg.struct_size, cfg.version = ctypes.sizeof(cfg), VERSION_NUMBER
        cfg.flags = (0x1 if track else 0) | (0x2 if lazy else 0)
        cfg.pp = pp
        cfg.req_pool, cfg.mamba_pool = req_pool.handle, mamba_pool.handle
        out = c_void_p()
        ctx._check(lib.kvc_hybrid_req_pool_create(ctx.handle, byref(cfg), byref(out)),
                   "kvc_hybrid_req_pool_create")
        self._ctx = ctx
        self.req_pool, self.mamba_pool, self.track = req_pool, mamba_pool, track
        super().__init__(out.value, deps=(ctx, req_pool, mamba_pool))

    @property
    def pp(self):
        return lib.kvc_hybrid_req_pool_pp(self.handle)

    def mamba_slot(self, row):
        return lib.kvc_hybrid_req_pool_mamba_slot(self.handle, row)

    def alloc(self, rows, mamba_slots=None, stream=None):
        """Rows and Mamba slots for len(rows) requests (entries <= 0 get new ones, as
        ReqToTokenPool.alloc). Returns (rows, mamba_slots) lists."""
        if isinstance(rows, int):
            rows = [0] * rows
        n = len(rows)
        r = (c_int32 * max(n, 1))(*rows)
        m = (c_int32 * max(n, 1))(*(mamba_slots if mamba_slots is not None else [0] * n))
        if mamba_slots is not None and len(mamba_slots) != n:
            raise InvalidArgument(1, "mamba_slots has %d entries, rows %d" %
                                  (len(mamba_slots), n))
        pp = (c_int32 * max(n * self.pp, 1))() if self.track else None
        self._ctx._check(lib.kvc_hybrid_req_pool_alloc(self.handle, n, r, m, pp,
                                                       _stream(stream)))
        return r[:n], m[:n]

    def free_mamba_cache(self, row, keep=-1, stream=None):
        self._ctx._check(lib.kvc_hybrid_req_pool_free_mamba_cache(self.handle, row, keep,
                                                                  _stream(stream)))


class SWAAllocator(_Handle):
    """SGLang SWATokenToKVPoolAllocator: a full and an SWA allocator paired by the
    full->SWA mapping. Pass it to Flow(ctx, req_pool, swa_allocator, sliding_window=...)
    in place of an Allocator."""

    _destroy_fn = staticmethod(lambda p: lib.kvc_swa_allocator_destroy(p))
    _is_swa = True

    def __init__(self, ctx, size_full, size_swa, page_size=1, need_sort=False, pure=False,
                 ring_size=0, req_pool=None):
        cfg = SwaAllocatorConfig()
        cfg.struct_size, cfg.version = ctypes.sizeof(cfg), VERSION_NUMBER
        cfg.flags = (0x1 if need_sort else 0) | (0x2 if pure else 0)
        cfg.size_full, cfg.size_swa, cfg.page_size = size_full, size_swa, page_size
        cfg.ring_size = ring_size
        cfg.req_pool = req_pool.handle if req_pool is not None else None
        out = c_void_p()
        ctx._check(lib.kvc_swa_allocator_create(ctx.handle, byref(cfg), byref(out)),
                   "kvc_swa_allocator_create")
        self._ctx = ctx
        super().__init__(out.value, deps=(ctx, req_pool))

    def _check(self, st):
        self._ctx._check(st)

    page_size = property(lambda self: lib.kvc_swa_allocator_page_size(self.handle))
    size = property(lambda self: lib.kvc_swa_allocator_size(self.handle))
    size_full = property(lambda self: lib.kvc_swa_allocator_size_full(self.handle))
    size_swa = property(lambda self: lib.kvc_swa_allocator_size_swa(self.handle))

    def available_size(self):
        return lib.kvc_swa_allocator_available_size(self.handle)

    def full_available_size(self):
        return lib.kvc_swa_allocator_full_available_size(self.handle)

    def swa_available_size(self):
        return lib.kvc_swa_allocator_swa_available_size(self.handle)

    def mapping(self):
        """The host full->SWA mapping as a list (a copy; for tests and debugging)."""
        p = lib.kvc_swa_allocator_mapping_host(self.handle)
        return p[:lib.kvc_swa_allocator_mapping_length(self.handle)]

    @property
    def mapping_device(self):
        """The device mapping (int64) as a DLPack-able Tensor."""
        return Tensor(self, lib.kvc_swa_allocator_mapping_device(self.handle),
                      (lib.kvc_swa_allocator_mapping_length(self.handle),), 8)

    def translate(self, full, out=None):
        """SWA slots of host full slots (host mapping): a list, or `out` (host int64)."""
        p, n, keep = _in(self._ctx, "full", full)
        buf = (c_int64 * max(n, 1))() if out is None else _out(self._ctx, "out", out, n)
        self._check(lib.kvc_swa_allocator_translate_host(self.handle, p, n, buf))
        return buf[:n] if out is None else out

    def alloc(self, n, out=None, out_device=None, stream=None):
        buf = (c_int64 * max(n, 1))() if out is None else _out(self._ctx, "out", out, n)
        self._check(lib.kvc_swa_allocator_alloc(
            self.handle, n, buf, _out(self._ctx, "out_device", out_device, n, 8, "device"),
            _stream(stream)))
        return buf[:n] if out is None else out

    def alloc_extend(self, prefix_lens, seq_lens, last_locs=None, req_pool=None, req_rows=None,
                     out=None, out_device=None, stream=None):
        """As Allocator.alloc_extend, both sides (no prefix_slots here)."""
        ctx = self._ctx
        seq, n, k1 = _in(ctx, "seq_lens", seq_lens)
        pre, n0, k0 = _in(ctx, "prefix_lens", prefix_lens)
        if n0 != n:
            raise InvalidArgument(1, "prefix_lens has %d entries, seq_lens %d" % (n0, n))
        last, _, k2 = _in(ctx, "last_locs", last_locs, n) if last_locs is not None else \
            (None, 0, None)
        rows, _, k3 = _in(ctx, "req_rows", req_rows, n, (7,)) if req_rows is not None else \
            (None, 0, None)
        sv = (c_int64 * n).from_address(seq) if n else ()
        pv = (c_int64 * n).from_address(pre) if n else ()
        total = _extend_total(sv, pv)
        buf = (c_int64 * max(total, 1))() if out is None else _out(ctx, "out", out, total)
        self._check(lib.kvc_swa_allocator_alloc_extend(
            self.handle, n, pre, seq, last, req_pool.handle if req_pool else None, rows, None,
            buf, _out(ctx, "out_device", out_device, total, 8, "device"), _stream(stream)))
        return buf[:total] if out is None else out

    def alloc_decode(self, seq_lens, last_locs=None, req_pool=None, req_rows=None, out=None,
                     out_device=None, stream=None):
        ctx = self._ctx
        seq, n, k1 = _in(ctx, "seq_lens", seq_lens)
        last, _, k2 = _in(ctx, "last_locs", last_locs, n) if last_locs is not None else \
            (None, 0, None)
        rows, _, k3 = _in(ctx, "req_rows", req_rows, n, (7,)) if req_rows is not None else \
            (None, 0, None)
        buf = (c_int64 * max(n, 1))() if out is None else _out(ctx, "out", out, n)
        self._check(lib.kvc_swa_allocator_alloc_decode(
            self.handle, n, seq, last, req_pool.handle if req_pool else None, rows, buf,
            _out(ctx, "out_device", out_device, n, 8, "device"), _stream(stream)))
        return buf[:n] if out is None else out

    def free(self, slots, stream=None):
        p, n, keep = _in(self._ctx, "slots", slots)
        self._check(lib.kvc_swa_allocator_free(self.handle, p, n, _stream(stream)))

    def free_swa(self, slots, stream=None):
        p, n, keep = _in(self._ctx, "slots", slots)
        self._check(lib.kvc_swa_allocator_free_swa(self.handle, p, n, _stream(stream)))

    def check(self):
        self._check(lib.kvc_swa_allocator_check(self.handle))

    def free_group_begin(self):
        """Opens a free group on both sides (SGLang free_group_begin): the frees until
        free_group_end are released together. Misuse when one is open."""
        self._check(lib.kvc_swa_allocator_free_group_begin(self.handle))

    def free_group_end(self):
        self._check(lib.kvc_swa_allocator_free_group_end(self.handle))

    @contextlib.contextmanager
    def free_group(self):
        """with swa.free_group(): frees released together at the end."""
        self.free_group_begin()
        try:
            yield self
        finally:
            self.free_group_end()

    def defer_zero_begin(self):
        """Opens a deferred-zero scope (kvc_swa_allocator_defer_zero_begin): the frees
        until the outermost defer_zero_end queue their device-mapping zeroes, which end
        launches as one. Scopes nest."""
        self._check(lib.kvc_swa_allocator_defer_zero_begin(self.handle))

    def defer_zero_end(self, stream=None):
        """Closes the scope; the outermost end launches the queue on `stream`. A failed
        launch raises CudaError with the frees done and the zeroes still queued (the next
        mapping write retries them)."""
        self._check(lib.kvc_swa_allocator_defer_zero_end(self.handle, _stream(stream)))

    @contextlib.contextmanager
    def deferred_zero(self, stream=None):
        """with swa.deferred_zero(stream): the frees inside make one mapping launch."""
        self.defer_zero_begin()
        try:
            yield self
        finally:
            self.defer_zero_end(stream)

    def zero_flush(self, stream=None):
        """Launches the queued device-mapping zeroes now (kvc_swa_allocator_zero_flush):
        call it before reading freed slots' entries of the device mapping, which an SWA
        radix cache's calls leave queued for the next allocation."""
        self._check(lib.kvc_swa_allocator_zero_flush(self.handle, _stream(stream)))

    def zero_pending(self):
        """Queued device-mapping zero runs (0: the device mapping is current)."""
        return lib.kvc_swa_allocator_zero_pending(self.handle)

    def clear(self, stream=None):
        """Both sides free again, groups closed, the mapping zeroed (host and device)."""
        self._check(lib.kvc_swa_allocator_clear(self.handle, _stream(stream)))


class _BorrowedKVPool(KVPool):
    _destroy_fn = None  # the owner destroys it


def _borrowed_kv_pool(owner, ptr, head_num, head_dim, v_head_dim, dtype):
    """A KVPool view of a pool owned by `owner` (an SWAKVPool side): buffers, describe,
    set_kv/gather_kv with the usual checks; destroyed with its owner, never by itself."""
    p = _BorrowedKVPool.__new__(_BorrowedKVPool)
    p._ctx = owner._ctx
    p.kind, p.dtype = "mha", dtype
    p._rows = (head_num * head_dim, head_num * (v_head_dim or head_dim))
    p._mla = (0, 0)
    p.start_layer, p.layer_num = 0, 0
    _Handle.__init__(p, ptr, deps=(owner,))
    return p


class SWAKVPool(_Handle):
    """SGLang SWAKVPool: a full pool for full_layer_ids and an SWA pool for
    swa_layer_ids, addressed by global layer id. register_allocator(swa_allocator) before
    SWA-layer writes; .full and .swa are the two KVPools (buffers, describe)."""

    _destroy_fn = staticmethod(lambda p: lib.kvc_swa_kv_pool_destroy(p))

    def __init__(self, ctx, size_full, size_swa, full_layer_ids, swa_layer_ids, head_num,
                 head_dim, v_head_dim=0, swa_head_num=0, swa_head_dim=0, swa_v_head_dim=0,
                 dtype="bfloat16", page_size=1, translate_capacity=0):
        full_layer_ids, swa_layer_ids = list(full_layer_ids), list(swa_layer_ids)
        cfg = SwaKVPoolConfig()
        cfg.struct_size, cfg.version = ctypes.sizeof(cfg), VERSION_NUMBER
        cfg.dtype = _dtype_code(dtype)
        cfg.size_full, cfg.size_swa, cfg.page_size = size_full, size_swa, page_size
        cfg.num_full_layers, cfg.num_swa_layers = len(full_layer_ids), len(swa_layer_ids)
        cfg.head_num, cfg.head_dim, cfg.v_head_dim = head_num, head_dim, v_head_dim
        cfg.swa_head_num, cfg.swa_head_dim = swa_head_num, swa_head_dim
        cfg.swa_v_head_dim = swa_v_head_dim
        fl = (c_int32 * max(len(full_layer_ids), 1))(*full_layer_ids)
        sl = (c_int32 * max(len(swa_layer_ids), 1))(*swa_layer_ids)
        cfg.full_layer_ids, cfg.swa_layer_ids = ctypes.addressof(fl), ctypes.addressof(sl)
        cfg.translate_capacity = translate_capacity
        out = c_void_p()
        ctx._check(lib.kvc_swa_kv_pool_create(ctx.handle, byref(cfg), byref(out)),
                   "kvc_swa_kv_pool_create")
        self._ctx = ctx
        self._allocator = None
        super().__init__(out.value, deps=(ctx,))
        name = _buf._NAMES[cfg.dtype]
        f, s = lib.kvc_swa_kv_pool_full(self._ptr), lib.kvc_swa_kv_pool_swa(self._ptr)
        self.full = _borrowed_kv_pool(self, f, head_num, head_dim, v_head_dim, name) if f else None
        self.swa = _borrowed_kv_pool(self, s, swa_head_num or head_num,
                                     swa_head_dim or head_dim,
                                     swa_v_head_dim or v_head_dim or swa_head_dim or head_dim,
                                     name) if s else None

    def _check(self, st):
        self._ctx._check(st)

    def close(self):
        """Closes the .full/.swa views too (each goes once its DLPack exports are gone),
        then the pool, which is destroyed when nothing uses it any more."""
        for view in (getattr(self, "full", None), getattr(self, "swa", None)):
            if view is not None:
                view.close()
        super().close()

    def layer(self, layer_id):
        """(is_swa, index in that side's pool) of a global layer id."""
        is_swa, idx = c_int(), c_int32()
        self._check(lib.kvc_swa_kv_pool_layer(self.handle, layer_id, byref(is_swa), byref(idx)))
        return bool(is_swa.value), idx.value

    def register_allocator(self, swa_allocator):
        self._check(lib.kvc_swa_kv_pool_register_allocator(self.handle, swa_allocator.handle))
        with _Handle._lock:
            old, self._allocator = self._allocator, swa_allocator
            swa_allocator._users += 1
            self._deps.append(swa_allocator)
            if old is not None:
                self._deps.remove(old)
                old._users -= 1
        if old is not None:
            old._maybe_destroy()

    def set_kv(self, layer_id, loc, k, v, swa_loc=None, src_dtype=None, n=None, loc_type=None,
               k_stride=0, v_stride=0, k_scale=1.0, v_scale=1.0, stream=None):
        """set_kv_buffer at a global layer: `loc` holds FULL slots; an SWA layer writes at
        swa_loc (already translated) or at mapping[loc]. k / v are checked against the
        layer's side's row width."""
        is_swa, _ = self.layer(layer_id)
        side = self.swa if is_swa else self.full
        src = side._src_dtype(src_dtype, "k", k)
        lp, n, lt, keep = _idx_in(self._ctx, "loc", loc, n, loc_type)
        sp = None
        if swa_loc is not None:
            sp, _, lt2, k2 = _idx_in(self._ctx, "swa_loc", swa_loc, n, lt)
            if lt2 != lt:
                raise InvalidArgument(1, "swa_loc must have loc's index type")
        rk, rv = side._rows
        kp = side._rows_arg("k", k, n, rk, k_stride, src)
        vp = side._rows_arg("v", v, n, rv, v_stride, src)
        self._check(lib.kvc_swa_kv_pool_set_kv(
            self.handle, layer_id, lp, sp, lt, n, kp, vp, src, k_stride, v_stride, None,
            k_scale, None, v_scale, _stream(stream)))

    def move(self, tgt_loc, src_loc, n=None, loc_type=None, stream=None):
        tp, n, lt, k1 = _idx_in(self._ctx, "tgt_loc", tgt_loc, n, loc_type)
        sp, _, lt2, k2 = _idx_in(self._ctx, "src_loc", src_loc, n, lt)
        self._check(lib.kvc_swa_kv_pool_move(self.handle, tp, sp, lt, n, _stream(stream)))


class HybridKVPool(_Handle):
    """SGLang HybridLinearKVPool: a KV pool for the full-attention layers of a hybrid
    model (global ids full_layer_ids), next to a borrowed MambaPool (may be None). KV
    arguments as KVPool (kind, dtype, head_num, ...); every call takes a GLOBAL layer id,
    translated to the full pool's layer and then checked and run exactly as KVPool's.
    .full is that KVPool (local layer ids 0..n-1)."""

    _destroy_fn = staticmethod(lambda p: lib.kvc_hybrid_kv_pool_destroy(p))

    def __init__(self, ctx, size, full_layer_ids, mamba_pool=None, kind="mha",
                 dtype="bfloat16", page_size=1, head_num=0, head_dim=0, v_head_dim=0,
                 kv_lora_rank=0, qk_rope_head_dim=0):
        from . import _KV_KINDS
        full_layer_ids = list(full_layer_ids)
        kv = _ffi.KVPoolConfig()
        kv.struct_size, kv.version = ctypes.sizeof(kv), VERSION_NUMBER
        kv.kind = _KV_KINDS[kind] if isinstance(kind, str) else int(kind)
        kv.size, kv.page_size, kv.dtype = size, page_size, _dtype_code(dtype)
        kv.layer_num = len(full_layer_ids)
        kv.head_num, kv.head_dim, kv.v_head_dim = head_num, head_dim, v_head_dim
        kv.kv_lora_rank, kv.qk_rope_head_dim = kv_lora_rank, qk_rope_head_dim
        ids = (c_int32 * max(len(full_layer_ids), 1))(*full_layer_ids)
        cfg = HybridKVPoolConfig()
        cfg.struct_size, cfg.version = ctypes.sizeof(cfg), VERSION_NUMBER
        cfg.num_full_layers = len(full_layer_ids)
        cfg.full_layer_ids, cfg.kv = ctypes.addressof(ids), ctypes.addressof(kv)
        cfg.mamba_pool = mamba_pool.handle if mamba_pool is not None else None
        out = c_void_p()
        ctx._check(lib.kvc_hybrid_kv_pool_create(ctx.handle, byref(cfg), byref(out)),
                   "kvc_hybrid_kv_pool_create")
        self._ctx = ctx
        self.mamba_pool = mamba_pool
        super().__init__(out.value, deps=(ctx, mamba_pool))
        full = _BorrowedKVPool.__new__(_BorrowedKVPool)
        full._ctx, full.kind, full.dtype = ctx, kind, _buf._NAMES[kv.dtype]
        full.start_layer, full.layer_num = 0, len(full_layer_ids)
        if kv.kind in (0, 1, 2):
            full._rows = (head_num * head_dim, head_num * (v_head_dim or head_dim))
        else:
            full._rows = (kv_lora_rank + qk_rope_head_dim, 0)
        full._mla = (kv_lora_rank, qk_rope_head_dim)
        _Handle.__init__(full, lib.kvc_hybrid_kv_pool_full(self._ptr), deps=(self,))
        self.full = full

    def close(self):
        """Closes the .full view too, then the pool (destroyed once nothing uses it)."""
        full = getattr(self, "full", None)
        if full is not None:
            full.close()
        super().close()

    def layer(self, layer_id):
        """The full pool's layer of a global full-attention layer id."""
        idx = c_int32()
        self._ctx._check(lib.kvc_hybrid_kv_pool_layer(self.handle, layer_id, byref(idx)))
        return idx.value

    def set_kv(self, layer_id, *args, **kw):
        self.full.set_kv(self.layer(layer_id), *args, **kw)

    def gather_kv(self, layer_id, *args, **kw):
        self.full.gather_kv(self.layer(layer_id), *args, **kw)

    def set_mla_kv(self, layer_id, *args, **kw):
        self.full.set_mla_kv(self.layer(layer_id), *args, **kw)

    def get_mla_kv(self, layer_id, *args, **kw):
        self.full.get_mla_kv(self.layer(layer_id), *args, **kw)

    def move(self, *args, **kw):
        self.full.move(*args, **kw)

    def buffer(self, region, layer_id, **kw):
        return self.full.buffer(region, self.layer(layer_id), **kw)

    def k_buffer(self, layer_id, **kw):
        return self.buffer("k", layer_id, **kw)

    def v_buffer(self, layer_id, **kw):
        return self.buffer("v", layer_id, **kw)
