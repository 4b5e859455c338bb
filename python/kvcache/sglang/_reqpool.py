"""ReqToTokenPool, MambaPool and HybridReqToTokenPool with SGLang's signatures."""
import ctypes
from dataclasses import dataclass, field
from typing import List, Optional

import kvcache as _kvc

from . import _ops as T
from ._ops import c_int32, c_size_t, c_void_p, proto

_st = ctypes.c_int
proto("kvc_hybrid_req_pool_get_mamba_indices", _st, c_void_p, c_void_p, ctypes.c_int, c_void_p,
      c_size_t, c_void_p)
proto("kvc_hybrid_req_pool_track_slots", ctypes.POINTER(c_int32), c_void_p, c_int32)
proto("kvc_hybrid_req_pool_mapping", c_void_p, c_void_p)
proto("kvc_hybrid_req_pool_track_mapping", c_void_p, c_void_p)
proto("kvc_hybrid_req_pool_clear", _st, c_void_p, c_void_p)
proto("kvc_hybrid_req_pool_set_track_slot", _st, c_void_p, c_int32, c_int32, c_int32, c_void_p)
proto("kvc_mamba_pool_contiguous_infos", _st, c_void_p, c_void_p, c_size_t,
      ctypes.POINTER(c_size_t))
proto("kvc_mamba_pool_state_dims", _st, c_void_p, c_void_p, c_size_t, ctypes.POINTER(c_size_t))
proto("kvc_mamba_pool_num_tensors", c_int32, c_void_p)
proto("kvc_mamba_pool_describe_tensor", _st, c_void_p, c_int32, c_void_p)


class _MambaTensorDesc(ctypes.Structure):
    """kvc_mamba_tensor_desc: a whole Mamba tensor (all layers)."""
    _fields_ = [("struct_size", c_size_t), ("version", ctypes.c_uint32),
                ("region", ctypes.c_int), ("index", c_int32), ("dtype", ctypes.c_int),
                ("ndim", c_int32), ("device", c_int32), ("data", c_void_p),
                ("shape", ctypes.c_int64 * 6), ("strides", ctypes.c_int64 * 6),
                ("bytes_per_layer", ctypes.c_int64), ("bytes_per_slot", ctypes.c_int64),
                ("total_bytes", ctypes.c_int64), ("sliceable_dim", ctypes.c_int64),
                ("reserved_", ctypes.c_uint64 * 4)]


class _ContiguousInfo(ctypes.Structure):
    _fields_ = [("base", c_void_p), ("bytes", c_size_t), ("bytes_per_page", c_size_t)]


def contiguous_infos(fn, handle):
    """(data_ptrs, data_lens, item_lens) of a kvc_*_contiguous_infos call."""
    count = c_size_t()
    fn(handle, None, 0, ctypes.byref(count))
    arr = (_ContiguousInfo * max(count.value, 1))()
    fn(handle, ctypes.cast(arr, c_void_p), count.value, ctypes.byref(count))
    n = count.value
    return ([arr[i].base or 0 for i in range(n)], [arr[i].bytes for i in range(n)],
            [arr[i].bytes_per_page for i in range(n)])


def clear_track_fields(req):
    """Forgets a request's track slots and checkpoints once they are freed or donated (newer
    SGLang's free_mamba_cache), so that a later alloc of the same request (a retracted one)
    gives it new track slots instead of naming freed ones."""
    req.mamba_ping_pong_track_buffer = None
    req.mamba_next_track_idx = None
    for name in ("mamba_last_track_idx", "mamba_last_track_seqlen", "mamba_prev_track_seqlen"):
        if hasattr(req, name):
            setattr(req, name, None)


def _req_row(req):
    r = req.req_pool_idx
    return 0 if r is None else int(r)


class ReqToTokenPool:
    """SGLang ReqToTokenPool over kvc_req_to_token_pool: rows 1..size, reused FIFO as in
    the seeds (newer SGLang reuses LIFO). ``req_to_token`` is a zero-copy view of the
    device table; write through ``write()`` (kvcache keeps a host mirror in step)."""

    def __init__(self, size: int, max_context_len: int, device: str,
                 enable_memory_saver: bool = False):
        self.size = size
        self.max_context_len = max_context_len
        self.device = device
        self._ctx = T.get_context(device)
        self._cuda = T.is_cuda(device)
        self._pool = _kvc.ReqToTokenPool(self._ctx, size, max_context_len)
        self._h = self._pool.handle
        self.req_to_token = T.from_dlpack(self._pool.table)
        self._mirror = self._host_mirror()

    def _host_mirror(self):
        """(size + 1, W) int32 view of the host mirror (read-only use)."""
        lib = T.lib
        w = self.max_context_len
        base = ctypes.addressof(lib.kvc_req_to_token_pool_row(self._h, 0).contents)
        last = ctypes.addressof(lib.kvc_req_to_token_pool_row(self._h, self.size).contents)
        if last != base + 4 * w * self.size:  # pragma: no cover - layout is one block today
            raise RuntimeError("kvcache's host mirror rows are not contiguous")
        arr = (ctypes.c_int32 * ((self.size + 1) * w)).from_address(base)
        if T.torch is not None:
            v = T.torch.frombuffer(arr, dtype=T.torch.int32)
        else:
            v = T.np.ctypeslib.as_array(arr)
        v = v.reshape(self.size + 1, w)
        self._mirror_keep = arr
        return v

    def row_host(self, row, start, end):
        """Host int64 copy of row[start:end) (from the mirror: no device read)."""
        v = self._mirror[row, start:end]
        return v.to(T.I64) if T.torch is not None else v.astype(T.I64)

    def write(self, indices, values):
        """req_to_token[indices] = values, indices = (row, slice or int) or (rows, cols)
        vectors; the device table and the host mirror both."""
        rows, cols = indices
        vals = T.host_i64(values)
        if isinstance(cols, slice) and not T.is_tensor(rows):
            start = cols.start or 0
            self._pool.write(int(rows), start, vals, stream=T.stream(self._cuda))
            return
        rows_l = T.tolist(T.host_i64(rows)) if not isinstance(rows, int) else [rows]
        cols_l = T.tolist(T.host_i64(cols)) if not isinstance(cols, int) else [cols]
        vl = T.tolist(vals)
        if len(rows_l) == 1 and len(cols_l) > 1:
            rows_l = rows_l * len(cols_l)
        if len(vl) == 1 and len(rows_l) > 1:
            vl = vl * len(rows_l)
        if not len(rows_l) == len(cols_l) == len(vl):
            raise ValueError("indices and values differ in length")
        for r, c, v in zip(rows_l, cols_l, vl):  # scatter: one C write per entry
            self._pool.write(r, c, [v], stream=T.stream(self._cuda))

    def available_size(self):
        return T.lib.kvc_req_to_token_pool_available(self._h)

    def _rows_of(self, reqs):
        """The int32 row vector C fills: kept rows, 0 for requests that need one."""
        vals = [r.req_pool_idx for r in reqs]
        rows = (ctypes.c_int32 * max(len(reqs), 1))()  # zeros: the common all-new batch
        if vals.count(None) != len(vals):
            for i, r in enumerate(reqs):
                row = vals[i]
                if row is not None:
                    assert getattr(r, "is_chunked", 0) > 0 or \
                        getattr(r, "kv_committed_len", 0) > 0, \
                        "reusing request must be chunked or have committed KV"
                    rows[i] = row
        return rows

    def alloc(self, reqs) -> Optional[List[int]]:
        """Rows for reqs (a request with req_pool_idx set keeps it); None when short
        (nothing changes). Sets req.req_pool_idx."""
        n = len(reqs)
        fast = T.fast
        if fast is not None and type(reqs) is list:  # all-new requests: one C call
            rows = (ctypes.c_int32 * max(n, 1))()
            st = fast.rows_alloc(self._h, reqs, rows)
            if st is not None:
                if st and T.status_ok_or_none(st, self._ctx, "ReqToTokenPool.alloc") is None:
                    return None
                self._last_rows = rows
                return rows[:n]
        rows = self._rows_of(reqs)
        st = T.lib.kvc_req_to_token_pool_alloc(self._h, n, rows)
        if T.status_ok_or_none(st, self._ctx, "ReqToTokenPool.alloc") is None:
            return None
        out = rows[:n]
        for r, row in zip(reqs, out):
            if r.req_pool_idx is None:
                r.req_pool_idx = row
        self._last_rows = rows  # the int32 vector, reused by alloc_for_extend's C call
        return out

    def free(self, req):
        assert req.req_pool_idx is not None, "request must have req_pool_idx"
        fast = T.fast
        row = int(req.req_pool_idx)
        st = fast.row_free(self._h, row) if fast is not None else \
            T.lib.kvc_req_to_token_pool_free(self._h, row)
        if st:
            self._ctx._check(st)
        req.req_pool_idx = None

    def clear(self):
        self._pool.clear()


@dataclass
class Mamba2StateShape:
    """SGLang cache_params.shape: conv (a list of per-slot shapes), temporal."""
    conv: list
    temporal: tuple


@dataclass
class Mamba2StateDType:
    conv: object = "bfloat16"
    temporal: object = "float32"


@dataclass
class MambaCacheParams:
    """The subset of SGLang's BaseLinearStateParams that MambaPool reads."""
    shape: Mamba2StateShape
    dtype: Mamba2StateDType = field(default_factory=Mamba2StateDType)


class MambaPool:
    """SGLang MambaPool over kvc_mamba_pool: state slots 1..size, FIFO, zeroed on alloc.
    alloc/fork_from return device int64 tensors (None when short)."""

    @dataclass
    class State:
        conv: list
        temporal: object

    @dataclass
    class SpeculativeState(State):
        intermediate_ssm: object = None
        intermediate_conv_window: list = None

    def __init__(self, *, size: int, spec_state_size: int, cache_params, mamba_layer_ids,
                 device: str, enable_memory_saver: bool = False,
                 speculative_num_draft_tokens: Optional[int] = None):
        self.size = size
        self.device = device
        self._ctx = T.get_context(device)
        self._cuda = T.is_cuda(device)
        conv = [tuple(s) for s in cache_params.shape.conv]
        self.mamba_layer_ids = list(mamba_layer_ids)
        self._pool = _kvc.MambaPool(
            self._ctx, size, len(self.mamba_layer_ids), conv, tuple(cache_params.shape.temporal),
            layer_ids=self.mamba_layer_ids, conv_dtype=T.dtype_name(cache_params.dtype.conv),
            temporal_dtype=T.dtype_name(cache_params.dtype.temporal),
            spec_state_size=spec_state_size if speculative_num_draft_tokens else 0,
            num_draft_tokens=speculative_num_draft_tokens or 0)
        self.num_conv = len(conv)
        self._layers = {}

    def available_size(self):
        return self._pool.available_size()

    def alloc(self, need_size: int):
        host = T.host_empty(max(need_size, 1), T.I32)
        st = T.lib.kvc_mamba_pool_alloc(self._pool.handle, need_size, T.ptr(host),
                                        T.stream(self._cuda))
        if T.status_ok_or_none(st, self._ctx, "MambaPool.alloc") is None:
            return None
        h = host[:need_size].to(T.I64) if T.torch is not None else host[:need_size].astype(T.I64)
        return T.to_device(h, self.device)

    def free(self, free_index):
        ids = T.host_i32(T.host_i64(free_index))
        if T.numel(ids):
            self._pool.free(ids)

    def clear(self):
        self._pool.clear()

    def copy_from(self, src_index, dst_index):
        self._pool.copy_from(T.host_i32(T.host_i64(src_index)), T.host_i32(T.host_i64(dst_index)),
                             stream=T.stream(self._cuda))

    def fork_from(self, src_index):
        src = int(T.tolist(T.host_i64(src_index))[0])
        try:
            slot = self._pool.fork_from(src, stream=T.stream(self._cuda))
        except _kvc.OutOfSlots:
            return None
        return T.to_device(T.host_array([slot]), self.device)

    def mamba2_layer_cache(self, layer_id: int):
        """State(conv=[per conv shape (size + 1, *shape)], temporal=(size + 1, *t)) of a
        global layer id: zero-copy views."""
        st = self._layers.get(layer_id)
        if st is None:
            st = MambaPool.State(
                conv=[T.from_dlpack(self._pool.conv_buffer(layer_id, i))
                      for i in range(self.num_conv)],
                temporal=T.from_dlpack(self._pool.temporal_buffer(layer_id)))
            self._layers[layer_id] = st
        return st

    def _whole_tensors(self):
        """Every whole tensor (all layers) in SGLang's field order, zero-copy."""
        h = self._pool.handle
        out = []
        for i in range(T.lib.kvc_mamba_pool_num_tensors(h)):
            d = _MambaTensorDesc()
            d.struct_size, d.version = ctypes.sizeof(d), _kvc.VERSION_NUMBER
            self._ctx._check(T.lib.kvc_mamba_pool_describe_tensor(h, i, ctypes.byref(d)))
            out.append(T.from_dlpack(_kvc.Tensor(self._pool, d.data,
                                                 tuple(d.shape[:d.ndim]), d.dtype)))
        return out

    def get_speculative_mamba2_params_all_layers(self):
        """SpeculativeState(conv=[(L, size + 1, *c)], temporal, intermediate_ssm,
        intermediate_conv_window=[...]): the whole tensors, zero-copy. As in SGLang, only
        for a pool made with speculative draft tokens (AssertionError otherwise)."""
        ts = self._whole_tensors()
        k = self.num_conv
        assert len(ts) > k + 1, "the Mamba pool has no speculative state"
        return MambaPool.SpeculativeState(conv=ts[:k], temporal=ts[k],
                                          intermediate_ssm=ts[k + 1],
                                          intermediate_conv_window=ts[k + 2:])

    def get_contiguous_buf_infos(self):
        return contiguous_infos(T.lib.kvc_mamba_pool_contiguous_infos, self._pool.handle)

    def get_state_dim_per_tensor(self):
        count = c_size_t()
        T.lib.kvc_mamba_pool_state_dims(self._pool.handle, None, 0, ctypes.byref(count))
        arr = (ctypes.c_int64 * max(count.value, 1))()
        self._ctx._check(T.lib.kvc_mamba_pool_state_dims(self._pool.handle, arr, count.value,
                                                         ctypes.byref(count)))
        return arr[:count.value]

    def get_cpu_copy(self, indices):
        """Host copy of the states at indices: an opaque host buffer for load_cpu_copy
        (kvcache's one-launch gather, not SGLang's nested tensor lists)."""
        ids = T.host_i32(T.host_i64(indices))
        n = T.numel(ids)
        host = T.host_empty(max(self._pool.host_copy_bytes(n), 1), T.torch.uint8 if T.torch
                            else T.np.uint8)
        self._pool.copy_to_host(ids, host, stream=T.stream(self._cuda))
        self._ctx.synchronize(T.stream(self._cuda))
        return host

    def load_cpu_copy(self, mamba_cache_cpu, indices):
        self._pool.copy_from_host(T.host_i32(T.host_i64(indices)), mamba_cache_cpu,
            stream=T.stream(self._cuda))
        self._ctx.synchronize(T.stream(self._cuda))


class HybridReqToTokenPool(ReqToTokenPool):
    """SGLang HybridReqToTokenPool: ReqToTokenPool + a MambaPool; alloc gives every new
    request a Mamba slot (and, with enable_mamba_extra_buffer, its ping-pong track slots).
    kvcache rolls back instead of asserting when Mamba slots run short (returns None)."""

    def __init__(self, *, size: int, mamba_size: int, mamba_spec_state_size: int,
                 max_context_len: int, device: str, enable_memory_saver: bool, cache_params,
                 mamba_layer_ids, enable_mamba_extra_buffer: bool,
                 speculative_num_draft_tokens: int = None, enable_overlap_schedule: bool = True,
                 start_layer: Optional[int] = None):
        super().__init__(size, max_context_len, device, enable_memory_saver)
        self.mamba_ping_pong_track_buffer_size = 2 if enable_overlap_schedule else 1
        self.enable_mamba_extra_buffer = enable_mamba_extra_buffer
        self.enable_mamba_extra_buffer_lazy = False
        self.start_layer = start_layer or 0
        self.layer_transfer_counter = None
        self.mamba_pool = MambaPool(size=mamba_size, spec_state_size=mamba_spec_state_size,
                                    cache_params=cache_params, mamba_layer_ids=mamba_layer_ids,
                                    device=device,
                                    speculative_num_draft_tokens=speculative_num_draft_tokens)
        self.mamba_allocator = self.mamba_pool  # newer SGLang's name for the slot owner
        self.mamba_map = {lid: i for i, lid in enumerate(mamba_layer_ids)}
        self._hyb = _kvc.HybridReqToTokenPool(self._ctx, self._pool, self.mamba_pool._pool,
                                              track=enable_mamba_extra_buffer,
                                              pp=self.mamba_ping_pong_track_buffer_size)
        n = size + 1
        self.req_index_to_mamba_index_mapping = self._dev_view(
            T.lib.kvc_hybrid_req_pool_mapping(self._hyb.handle), (n,))
        if enable_mamba_extra_buffer:
            self.req_index_to_mamba_ping_pong_track_buffer_mapping = self._dev_view(
                T.lib.kvc_hybrid_req_pool_track_mapping(self._hyb.handle),
                (n, self.mamba_ping_pong_track_buffer_size))

    def _dev_view(self, addr, shape):
        return T.from_dlpack(_kvc.Tensor(self._hyb, addr, shape, 7))

    def alloc(self, reqs) -> Optional[List[int]]:
        n = len(reqs)
        rows = self._rows_of(reqs)
        mamba = (ctypes.c_int32 * max(n, 1))(*[
            0 if r.mamba_pool_idx is None else int(T.tolist(T.host_i64(r.mamba_pool_idx))[0])
            for r in reqs])
        pp = self.mamba_ping_pong_track_buffer_size
        track = None
        if self.enable_mamba_extra_buffer:
            vals = []
            for r in reqs:
                b = getattr(r, "mamba_ping_pong_track_buffer", None)
                vals += [0] * pp if b is None else T.tolist(T.host_i64(b))
            track = (ctypes.c_int32 * max(n * pp, 1))(*vals)
        st = T.lib.kvc_hybrid_req_pool_alloc(self._hyb.handle, n, rows, mamba, track,
                                             T.stream(self._cuda))
        if T.status_ok_or_none(st, self._ctx, "HybridReqToTokenPool.alloc") is None:
            return None
        out = rows[:n]
        self._last_rows = rows
        for i, r in enumerate(reqs):
            r.req_pool_idx = out[i]
            if r.mamba_pool_idx is None:
                r.mamba_pool_idx = mamba[i]
            if track is not None and getattr(r, "mamba_ping_pong_track_buffer", None) is None:
                r.mamba_ping_pong_track_buffer = T.to_device(
                    T.host_array(track[i * pp:(i + 1) * pp]), self.device)
                r.mamba_next_track_idx = 0
        return out

    def get_mamba_indices(self, req_indices):
        """mapping[req_indices] as a device int32 tensor (one gather launch)."""
        rows = req_indices
        n = T.numel(rows)
        out = T.empty(max(n, 1), T.I32, self.device)
        lt = 0 if rows.dtype == T.I32 else 1
        if not T.is_cuda(self.device) or T.torch is None:
            rows = T.host_i64(rows) if lt == 1 else rows
        self._ctx._check(T.lib.kvc_hybrid_req_pool_get_mamba_indices(
            self._hyb.handle, T.ptr(rows), lt, T.ptr(out), n, T.stream(self._cuda)))
        return out[:n]

    def mamba2_layer_cache(self, layer_id: int):
        assert layer_id in self.mamba_map
        if self.layer_transfer_counter is not None:
            self.layer_transfer_counter.wait_until(layer_id - self.start_layer)
        return self.mamba_pool.mamba2_layer_cache(layer_id)

    def register_layer_transfer_counter(self, layer_transfer_counter):
        self.layer_transfer_counter = layer_transfer_counter

    def get_speculative_mamba2_params_all_layers(self):
        return self.mamba_pool.get_speculative_mamba2_params_all_layers()

    def get_state_buf_infos(self):
        return self.mamba_pool.get_contiguous_buf_infos()

    def get_state_dim_per_tensor(self):
        return self.mamba_pool.get_state_dim_per_tensor()

    def get_mamba_ping_pong_other_idx(self, mamba_next_track_idx: int) -> int:
        if self.mamba_ping_pong_track_buffer_size == 2:
            return 1 - mamba_next_track_idx
        return mamba_next_track_idx

    def get_mamba_ping_pong_keep_idx(self, req) -> int:
        """The track index holding the request's newest checkpoint: mamba_last_track_idx
        (newer SGLang) when set, else the other index of mamba_next_track_idx (the seeds)."""
        last = getattr(req, "mamba_last_track_idx", None)
        if last is not None:
            return int(last)
        return self.get_mamba_ping_pong_other_idx(getattr(req, "mamba_next_track_idx", None) or 0)

    def free_mamba_cache(self, req, mamba_ping_pong_track_buffer_to_keep: Optional[int] = None):
        assert req.mamba_pool_idx is not None, "double free? mamba_index is None"
        keep = -1 if mamba_ping_pong_track_buffer_to_keep is None else \
            int(mamba_ping_pong_track_buffer_to_keep)
        if keep != -1:
            assert keep in (0, 1), "mamba_ping_pong_track_buffer_to_keep must be 0 or 1"
            if self.mamba_ping_pong_track_buffer_size == 1:
                assert keep == 0, "keep must be 0 when the ping-pong buffer size is 1"
        self._ctx._check(T.lib.kvc_hybrid_req_pool_free_mamba_cache(
            self._hyb.handle, _req_row(req), keep, T.stream(self._cuda)))
        req.mamba_pool_idx = None
        if self.enable_mamba_extra_buffer:
            clear_track_fields(req)

    def clear(self):
        self._ctx._check(T.lib.kvc_hybrid_req_pool_clear(self._hyb.handle,
                                                         T.stream(self._cuda)))
