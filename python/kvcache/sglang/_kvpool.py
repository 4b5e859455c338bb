"""KV pools with SGLang's signatures: MHA, MLA, NSA, HybridLinearKVPool, SWAKVPool.

Buffers are zero-copy views (DLPack) of kvcache's device buffers; writes are kvcache's
fused kernels (one launch for K and V, quantizing fp8 writes never modify the caller's
tensors, unlike SGLang's in-place division).
"""
import ctypes
from typing import List, Optional

import kvcache as _kvc
from kvcache import hybrid as _hybrid

from . import _ops as T
from ._ops import c_int32, c_int64, c_size_t, c_void_p, proto
from ._reqpool import contiguous_infos

lib = T.lib
_st = ctypes.c_int
proto("kvc_kv_pool_contiguous_infos", _st, c_void_p, c_void_p, c_size_t, ctypes.POINTER(c_size_t))
proto("kvc_swa_kv_pool_host_copy_bytes", _st, c_void_p, c_size_t, ctypes.POINTER(c_size_t),
      ctypes.POINTER(c_size_t))
proto("kvc_swa_kv_pool_copy_to_host", _st, c_void_p, c_void_p, c_size_t, c_void_p, c_void_p,
      c_void_p, c_void_p)
proto("kvc_swa_kv_pool_copy_from_host", _st, c_void_p, c_void_p, c_size_t, c_void_p, c_void_p,
      c_void_p, c_void_p)
proto("kvc_nsa_set_index_k", _st, c_void_p, c_int32, c_void_p, ctypes.c_int, c_size_t, c_void_p,
      c_void_p, c_void_p)
proto("kvc_nsa_get_index_k", _st, c_void_p, c_int32, c_int64, c_void_p, c_void_p, c_void_p,
      c_void_p)
proto("kvc_nsa_get_index_k_batch", _st, c_void_p, c_int32, c_size_t, c_void_p, c_int64, c_void_p,
      c_int64, c_int64, c_void_p, c_void_p, c_void_p)


def _layer_id(layer):
    return layer if isinstance(layer, int) else layer.layer_id


def _u8():
    return T.torch.uint8 if T.torch is not None else T.np.uint8


def _rows3(v):
    """SGLang's MLA layout (rows, 1, dim) of a (rows, dim) view (no copy)."""
    return v.reshape(v.shape[0], 1, v.shape[-1]) if len(v.shape) == 2 else v


def _flat(x):
    """x as one contiguous block (the pool's row width is checked by kvcache)."""
    if T.torch is not None and isinstance(x, T.torch.Tensor):
        return x.contiguous()
    return T.np.ascontiguousarray(x)


class _KVBase:
    """Shared by the SGLang KV pool classes: layer views, transfer registration, host
    offload and move, over one kvcache pool (self._pool)."""

    def _init_common(self, size, page_size, dtype, layer_num, device, start_layer, end_layer):
        self.size, self.page_size, self.dtype, self.device = size, page_size, dtype, device
        self.layer_num = layer_num
        self.start_layer = start_layer or 0
        self.end_layer = end_layer or layer_num - 1
        self._ctx = T.get_context(device)
        self._cuda = T.is_cuda(device)
        self.layer_transfer_counter = None
        s = str(dtype)
        self.store_dtype = _u8() if "float8" in s else dtype

    def register_layer_transfer_counter(self, layer_transfer_counter):
        self.layer_transfer_counter = layer_transfer_counter

    def _wait(self, layer_id):
        if self.layer_transfer_counter is not None:
            self.layer_transfer_counter.wait_until(layer_id - self.start_layer)

    def get_contiguous_buf_infos(self):
        """(data_ptrs, data_lens, item_lens): per registered buffer its address, bytes and
        bytes per page (MHA: K layers then V layers; MLA: one per layer)."""
        return contiguous_infos(lib.kvc_kv_pool_contiguous_infos, self._pool.handle)

    def get_kv_size_bytes(self):
        return self._pool.size_bytes()

    def move_kv_cache(self, tgt_loc, src_loc):
        if T.numel(tgt_loc):
            self._pool.move(tgt_loc if T.is_cuda(self.device) else T.host_i64(tgt_loc),
                            src_loc if T.is_cuda(self.device) else T.host_i64(src_loc),
                                stream=T.stream(self._cuda))

    def _loc(self, loc):
        if T.is_cuda(self.device):
            return loc
        return loc if loc.dtype in (T.I32, T.I64) else T.host_i64(loc)

    def get_cpu_copy(self, indices, mamba_indices=None):
        """Rows at indices of every layer into one host buffer (one launch; an opaque
        buffer for load_cpu_copy, not SGLang's nested per-layer lists)."""
        n = T.numel(indices)
        host = T.host_empty(max(self._pool.host_copy_bytes(n), 1), _u8())
        self._pool.copy_to_host(self._loc(indices), host, stream=T.stream(self._cuda))
        self._ctx.synchronize(T.stream(self._cuda))
        return host

    def load_cpu_copy(self, kv_cache_cpu, indices, mamba_indices=None):
        self._pool.copy_from_host(self._loc(indices), kv_cache_cpu, stream=T.stream(self._cuda))
        self._ctx.synchronize(T.stream(self._cuda))

    def maybe_get_custom_mem_pool(self):
        return None


class MHATokenToKVPool(_KVBase):
    """SGLang MHATokenToKVPool: k_buffer[l] (size + page_size, head_num, head_dim) and
    v_buffer[l] views of kvcache's buffers (store_dtype uint8 for fp8 pools)."""

    def __init__(self, size: int, page_size: int, dtype, head_num: int, head_dim: int,
                 layer_num: int, device: str, enable_memory_saver: bool = False,
                 v_head_dim: Optional[int] = None, swa_head_num: Optional[int] = None,
                 swa_head_dim: Optional[int] = None, swa_v_head_dim: Optional[int] = None,
                 start_layer: Optional[int] = None, end_layer: Optional[int] = None,
                 enable_alt_stream: bool = True, enable_kv_cache_copy: bool = False):
        self._init_common(size, page_size, dtype, layer_num, device, start_layer, end_layer)
        self.head_num = swa_head_num if swa_head_num is not None else head_num
        self.head_dim = swa_head_dim if swa_head_dim is not None else head_dim
        self.v_head_dim = (swa_v_head_dim if swa_v_head_dim is not None else
                           v_head_dim if v_head_dim is not None else head_dim)
        self._pool = _kvc.KVPool(self._ctx, size, layer_num, "mha", T.dtype_name(dtype), page_size,
                                 self.head_num, self.head_dim, self.v_head_dim,
                                 start_layer=self.start_layer)
        self._views()
        self.row_dim = self.head_num * self.head_dim
        self.same_kv_dim = self.head_dim == self.v_head_dim

    def _views(self):
        s = self.start_layer
        self.k_buffer = [T.from_dlpack(self._pool.k_buffer(s + i, as_bytes=self._bytes()))
                         for i in range(self.layer_num)]
        self.v_buffer = [T.from_dlpack(self._pool.v_buffer(s + i, as_bytes=self._bytes()))
                         for i in range(self.layer_num)]

    def _bytes(self):
        return "float8" in str(self.dtype)

    def _get_key_buffer(self, layer_id):
        return self.k_buffer[layer_id - self.start_layer]

    def _get_value_buffer(self, layer_id):
        return self.v_buffer[layer_id - self.start_layer]

    def get_key_buffer(self, layer_id: int):
        self._wait(layer_id)
        return self._get_key_buffer(layer_id)

    def get_value_buffer(self, layer_id: int):
        self._wait(layer_id)
        return self._get_value_buffer(layer_id)

    def get_kv_buffer(self, layer_id: int):
        return self.get_key_buffer(layer_id), self.get_value_buffer(layer_id)

    def set_kv_buffer(self, layer, loc, cache_k, cache_v, k_scale=None, v_scale=None,
                      layer_id_override=None):
        """K[layer][loc[i]] = cache_k[i], V likewise, in one launch; a quantizing write
        divides by the scales without touching cache_k / cache_v."""
        lid = layer_id_override if layer_id_override is not None else _layer_id(layer)
        if layer_id_override is not None:
            lid += self.start_layer
        if T.numel(loc) == 0:
            return
        self._pool.set_kv(lid, self._loc(loc), _flat(cache_k), _flat(cache_v),
                          src_dtype=T.dtype_name(cache_k.dtype),
                          k_scale=1.0 if k_scale is None else float(k_scale),
                          v_scale=1.0 if v_scale is None else float(v_scale),
                              stream=T.stream(self._cuda))


class MLATokenToKVPool(_KVBase):
    """SGLang MLATokenToKVPool: kv_buffer[l] (size + page_size, 1, kv_lora_rank +
    qk_rope_head_dim) views; get_mla_kv_buffer has no power-of-two restriction."""

    _kind = "mla"

    def __init__(self, size: int, page_size: int, dtype, kv_lora_rank: int,
                 qk_rope_head_dim: int, layer_num: int, device: str,
                 enable_memory_saver: bool = False, start_layer: Optional[int] = None,
                 end_layer: Optional[int] = None, use_nsa: bool = False,
                 override_kv_cache_dim: Optional[int] = None, **nsa):
        self._init_common(size, page_size, dtype, layer_num, device, start_layer, end_layer)
        self.kv_lora_rank, self.qk_rope_head_dim = kv_lora_rank, qk_rope_head_dim
        self.use_nsa = use_nsa
        self._pool = _kvc.KVPool(self._ctx, size, layer_num, self._kind, T.dtype_name(dtype),
                                 page_size, kv_lora_rank=kv_lora_rank,
                                 qk_rope_head_dim=qk_rope_head_dim, start_layer=self.start_layer,
                                 **nsa)
        s = self.start_layer
        self.kv_buffer = [_rows3(T.from_dlpack(self._pool.kv_buffer(s + i,
                                                                    as_bytes=self._bytes())))
                          for i in range(layer_num)]
        self.kv_cache_dim = self.kv_buffer[0].shape[-1]

    def _bytes(self):
        return "float8" in str(self.dtype)

    def get_key_buffer(self, layer_id: int):
        self._wait(layer_id)
        return self.kv_buffer[layer_id - self.start_layer]

    def get_value_buffer(self, layer_id: int):
        return self.get_key_buffer(layer_id)[..., :self.kv_lora_rank]

    def get_kv_buffer(self, layer_id: int):
        return self.get_key_buffer(layer_id), self.get_value_buffer(layer_id)

    def set_kv_buffer(self, layer, loc, cache_k, cache_v=None, k_scale=None, v_scale=None):
        if T.numel(loc):
            self._pool.set_kv(_layer_id(layer), self._loc(loc), _flat(cache_k),
                              src_dtype=T.dtype_name(cache_k.dtype), stream=T.stream(self._cuda))

    def set_mla_kv_buffer(self, layer, loc, cache_k_nope, cache_k_rope):
        if T.numel(loc):
            self._pool.set_mla_kv(_layer_id(layer), self._loc(loc), _flat(cache_k_nope),
                                  _flat(cache_k_rope), src_dtype=T.dtype_name(cache_k_nope.dtype),
                                      stream=T.stream(self._cuda))

    def get_mla_kv_buffer(self, layer, loc, dst_dtype=None):
        """(nope (N, 1, R), rope (N, 1, Q)) of rows loc, in dst_dtype (default: dtype)."""
        n = T.numel(loc)
        dt = T.fw_dtype(dst_dtype if dst_dtype is not None else self.dtype)
        nope = T.empty((n, 1, self.kv_lora_rank), dt, self.device)
        rope = T.empty((n, 1, self.qk_rope_head_dim), dt, self.device)
        if n:
            self._pool.get_mla_kv(_layer_id(layer), self._loc(loc), nope, rope,
                                  out_dtype=T.dtype_name(dt), stream=T.stream(self._cuda))
        return nope, rope


class NSATokenToKVPool(MLATokenToKVPool):
    """SGLang NSATokenToKVPool: MLA rows plus per-layer index-key pages
    (index_k_with_scale_buffer[l], uint8 (pages, ps * (128 + 4)))."""

    _kind = "nsa"
    quant_block_size = 128

    def __init__(self, size: int, page_size: int, kv_lora_rank: int, dtype,
                 qk_rope_head_dim: int, layer_num: int, device: str, index_head_dim: int,
                 enable_memory_saver: bool = False, kv_cache_dim: Optional[int] = None,
                 start_layer: Optional[int] = None, end_layer: Optional[int] = None,
                 index_buf_size: Optional[int] = None):
        super().__init__(size, page_size, dtype, kv_lora_rank, qk_rope_head_dim, layer_num,
                         device, enable_memory_saver, start_layer, end_layer, use_nsa=True,
                         index_head_dim=index_head_dim, index_buf_size=index_buf_size or 0)
        self.index_head_dim = index_head_dim
        s = self.start_layer
        self.index_k_with_scale_buffer = [T.from_dlpack(self._pool.buffer("index_k", s + i))
                                          for i in range(layer_num)]

    def get_index_k_with_scale_buffer(self, layer_id: int):
        self._wait(layer_id)
        return self.index_k_with_scale_buffer[layer_id - self.start_layer]

    def get_contiguous_buf_infos(self):
        """The KV rows, one buffer per layer (as SGLang's NSA pool, which inherits MLA's);
        the index-key pages are get_state_buf_infos()'s."""
        p, l, i = _KVBase.get_contiguous_buf_infos(self)
        n = self.layer_num
        return p[:n], l[:n], i[:n]

    def get_state_buf_infos(self):
        """The index-key pages of every layer: (data_ptrs, data_lens, item_lens), item = one
        page (SGLang: index_k_with_scale_buffer[l], its first page's bytes)."""
        p, l, i = _KVBase.get_contiguous_buf_infos(self)
        n = self.layer_num
        return p[n:], l[n:], i[n:]

    def get_cpu_copy(self, indices):
        return _KVBase.get_cpu_copy(self, indices)

    def load_cpu_copy(self, kv_cache_cpu_dict, indices):
        """kv_cache_cpu_dict: what get_cpu_copy returned (SGLang's name; here one opaque
        host buffer, not a dict)."""
        return _KVBase.load_cpu_copy(self, kv_cache_cpu_dict, indices)

    def set_index_k_scale_buffer(self, layer_id: int, loc, index_k, index_k_scale):
        n = T.numel(loc)
        if n == 0:
            return
        lt = 0 if loc.dtype == T.I32 else 1
        k = _flat(index_k)
        s = _flat(index_k_scale)
        lp = loc if T.is_cuda(self.device) else T.host_i64(loc)
        self._ctx._check(lib.kvc_nsa_set_index_k(self._pool.handle, layer_id, T.ptr(lp), lt, n,
                                                 T.ptr(k), T.ptr(s), T.stream(self._cuda)))

    def _get_index(self, layer_id, seq_len, page_indices, want_k, want_s):
        pages = _i32(page_indices)
        k = T.empty((seq_len, 128), _u8(), self.device) if want_k else None
        s = T.empty((seq_len, 4), _u8(), self.device) if want_s else None
        self._ctx._check(lib.kvc_nsa_get_index_k(
            self._pool.handle, layer_id, seq_len, T.ptr(pages), T.ptr(k) if want_k else None,
            T.ptr(s) if want_s else None, T.stream(self._cuda)))
        return k, s

    def get_index_k_continuous(self, layer_id: int, seq_len: int, page_indices):
        self._wait(layer_id)
        return self._get_index(layer_id, seq_len, page_indices, True, False)[0]

    def get_index_k_scale_continuous(self, layer_id: int, seq_len: int, page_indices):
        self._wait(layer_id)
        return self._get_index(layer_id, seq_len, page_indices, False, True)[1]

    def get_index_k_scale_buffer(self, layer_id: int, seq_len_tensor, page_indices,
                                 seq_len_sum: int, max_seq_len: int):
        """(k (seq_len_sum, 128), scale (seq_len_sum, 4)) uint8 of a batch."""
        self._wait(layer_id)
        table = _i32(page_indices)
        seqs = _i32(seq_len_tensor)
        bs = T.numel(seqs)
        width = table.shape[1] if len(table.shape) == 2 else T.numel(table) // max(bs, 1)
        k = T.empty((seq_len_sum, 128), _u8(), self.device)
        s = T.empty((seq_len_sum, 4), _u8(), self.device)
        self._ctx._check(lib.kvc_nsa_get_index_k_batch(
            self._pool.handle, layer_id, bs, T.ptr(table), width, T.ptr(seqs), seq_len_sum,
            max_seq_len, T.ptr(k), T.ptr(s), T.stream(self._cuda)))
        return k, s


def _i32(x):
    if T.torch is not None and isinstance(x, T.torch.Tensor):
        return x.to(T.I32).contiguous()
    return T.np.ascontiguousarray(x, dtype=T.np.int32)


class HybridLinearKVPool(_KVBase):
    """SGLang HybridLinearKVPool: a KV pool for the full-attention layers (global ids)
    next to the hybrid req pool's MambaPool."""

    def __init__(self, size: int, dtype, page_size: int, head_num: int, head_dim: int,
                 full_attention_layer_ids: List[int], enable_kvcache_transpose: bool,
                 device: str, mamba_pool, enable_memory_saver: bool = False,
                 use_mla: bool = False, kv_lora_rank: int = None, qk_rope_head_dim: int = None,
                 start_layer: Optional[int] = None):
        assert not enable_kvcache_transpose, "enable_kvcache_transpose must be False"
        ids = list(full_attention_layer_ids)
        self._init_common(size, page_size, dtype, len(ids), device, start_layer, None)
        self.head_num, self.head_dim = head_num, head_dim
        self.use_mla = use_mla
        self.mamba_pool = mamba_pool
        self.full_attention_layer_id_mapping = {lid: i for i, lid in enumerate(ids)}
        self._hyb = _hybrid.HybridKVPool(
            self._ctx, size, ids, mamba_pool._pool if mamba_pool is not None else None,
            kind="mla" if use_mla else "mha", dtype=T.dtype_name(dtype), page_size=page_size,
            head_num=head_num or 0, head_dim=head_dim or 0, kv_lora_rank=kv_lora_rank or 0,
            qk_rope_head_dim=qk_rope_head_dim or 0)
        self._pool = self._hyb.full
        self.kv_lora_rank = kv_lora_rank
        if use_mla:
            self._bufs = [(_rows3(T.from_dlpack(self._pool.kv_buffer(i))),)
                          for i in range(len(ids))]
        else:
            self._bufs = [(T.from_dlpack(self._pool.k_buffer(i)),
                           T.from_dlpack(self._pool.v_buffer(i))) for i in range(len(ids))]

    def _transfer_full_attention_id(self, layer_id: int):
        if layer_id not in self.full_attention_layer_id_mapping:
            raise ValueError("layer_id=%d not in full attention layers: %s" %
                             (layer_id, list(self.full_attention_layer_id_mapping)))
        return self.full_attention_layer_id_mapping[layer_id]

    def get_state_buf_infos(self):
        return self.mamba_pool.get_contiguous_buf_infos()

    def load_cpu_copy(self, cache_cpu, indices, mamba_indices=None):
        return _KVBase.load_cpu_copy(self, cache_cpu, indices, mamba_indices)

    def get_state_dim_per_tensor(self):
        return self.mamba_pool.get_state_dim_per_tensor()

    def get_key_buffer(self, layer_id: int):
        self._wait(layer_id)
        return self._bufs[self._transfer_full_attention_id(layer_id)][0]

    def get_value_buffer(self, layer_id: int):
        self._wait(layer_id)
        b = self._bufs[self._transfer_full_attention_id(layer_id)]
        return b[0][..., :self.kv_lora_rank] if self.use_mla else b[1]

    def get_kv_buffer(self, layer_id: int):
        return self.get_key_buffer(layer_id), self.get_value_buffer(layer_id)

    def get_v_head_dim(self):
        return self.get_value_buffer(next(iter(self.full_attention_layer_id_mapping))).shape[-1]

    def set_kv_buffer(self, layer, loc, cache_k, cache_v, k_scale=None, v_scale=None):
        if T.numel(loc) == 0:
            return
        i = self._transfer_full_attention_id(_layer_id(layer))
        self._pool.set_kv(i, self._loc(loc), _flat(cache_k),
                          None if self.use_mla else _flat(cache_v),
                          src_dtype=T.dtype_name(cache_k.dtype),
                          k_scale=1.0 if k_scale is None else float(k_scale),
                          v_scale=1.0 if v_scale is None else float(v_scale),
                              stream=T.stream(self._cuda))

    def set_mla_kv_buffer(self, layer, loc, cache_k_nope, cache_k_rope):
        i = self._transfer_full_attention_id(_layer_id(layer))
        if T.numel(loc):
            self._pool.set_mla_kv(i, self._loc(loc), _flat(cache_k_nope), _flat(cache_k_rope),
                                  src_dtype=T.dtype_name(cache_k_nope.dtype),
                                      stream=T.stream(self._cuda))

    def get_mla_kv_buffer(self, layer, loc, dst_dtype=None):
        i = self._transfer_full_attention_id(_layer_id(layer))
        n = T.numel(loc)
        dt = T.fw_dtype(dst_dtype if dst_dtype is not None else self.dtype)
        nope = T.empty((n, 1, self.kv_lora_rank), dt, self.device)
        rope = T.empty((n, 1, self._pool._mla[1]), dt, self.device)
        if n:
            self._pool.get_mla_kv(i, self._loc(loc), nope, rope, out_dtype=T.dtype_name(dt),
                stream=T.stream(self._cuda))
        return nope, rope


class SWAKVPool(_KVBase):
    """SGLang SWAKVPool: full_kv_pool for the full layers, swa_kv_pool for the sliding-
    window layers (global layer ids), SWA writes at mapping[loc]."""

    def __init__(self, size: int, size_swa: int, page_size: int, dtype, head_num: int,
                 head_dim: int, swa_attention_layer_ids: List[int],
                 full_attention_layer_ids: List[int], enable_kvcache_transpose: bool = False,
                 device: str = "cpu", token_to_kv_pool_class=None, v_head_dim=None,
                 swa_head_num=None, swa_head_dim=None, swa_v_head_dim=None, **kwargs):
        assert token_to_kv_pool_class in (None, MHATokenToKVPool), \
            "kvcache's SWAKVPool holds MHA pools"
        self._init_common(size, page_size, dtype, len(full_attention_layer_ids) +
                          len(swa_attention_layer_ids), device, 0, None)
        self.size_swa = size_swa
        self._swa = _hybrid.SWAKVPool(
            self._ctx, size, size_swa, full_attention_layer_ids, swa_attention_layer_ids,
            head_num, head_dim, v_head_dim or 0, swa_head_num or 0, swa_head_dim or 0,
            swa_v_head_dim or 0, T.dtype_name(dtype), page_size)
        self._pool = self._swa.full
        self.full_kv_pool, self.swa_kv_pool = self._swa.full, self._swa.swa
        self.layers_mapping = {}
        for lid in list(full_attention_layer_ids) + list(swa_attention_layer_ids):
            is_swa, idx = self._swa.layer(lid)
            side = self._swa.swa if is_swa else self._swa.full
            self.layers_mapping[lid] = (idx, is_swa, T.from_dlpack(side.k_buffer(idx)),
                                        T.from_dlpack(side.v_buffer(idx)))
        self._allocator = None

    def _register_allocator(self, allocator):
        self._swa.register_allocator(allocator._a)
        self._allocator = allocator

    def translate_loc_from_full_to_swa(self, kv_indices):
        return self._allocator.translate_loc_from_full_to_swa(kv_indices)

    def invalidate_loc_cache(self):
        """No memo to drop: kvcache translates per call (SGLang keys a memo on storage
        address + length, which can return stale results)."""

    def get_key_buffer(self, layer_id: int):
        self._wait(layer_id)
        return self.layers_mapping[layer_id][2]

    def get_value_buffer(self, layer_id: int):
        self._wait(layer_id)
        return self.layers_mapping[layer_id][3]

    def get_kv_buffer(self, layer_id: int):
        return self.get_key_buffer(layer_id), self.get_value_buffer(layer_id)

    def set_kv_buffer(self, layer, loc, cache_k, cache_v, k_scale=None, v_scale=None,
                      layer_id_override=None):
        """loc holds FULL slots; SWA layers are written at mapping[loc]."""
        if T.numel(loc):
            self._swa.set_kv(_layer_id(layer), self._loc(loc), _flat(cache_k), _flat(cache_v),
                             src_dtype=T.dtype_name(cache_k.dtype),
                             k_scale=1.0 if k_scale is None else float(k_scale),
                             v_scale=1.0 if v_scale is None else float(v_scale),
                                 stream=T.stream(self._cuda))

    def move_kv_cache(self, tgt_loc, src_loc):
        if T.numel(tgt_loc):
            self._swa.move(self._loc(tgt_loc), self._loc(src_loc), stream=T.stream(self._cuda))

    def get_kv_size_bytes(self):
        fk, fv = self._swa.full.size_bytes() if self._swa.full else (0, 0)
        sk, sv = self._swa.swa.size_bytes() if self._swa.swa else (0, 0)
        return fk + sk, fv + sv

    def get_state_buf_infos(self):
        return contiguous_infos(lib.kvc_kv_pool_contiguous_infos, self._swa.swa.handle)

    def get_cpu_copy(self, indices, mamba_indices=None, req_pool_index=None):
        """{"full", "swa", "swa_mask"}: the full rows of every slot, the SWA rows of the
        slots that still have an SWA peer (mask from the host mapping), one gather per
        pool (SGLang syncs and reads the mapping from the device)."""
        idx = T.host_i64(indices)
        n = T.numel(idx)
        fb, sb = c_size_t(), c_size_t()
        self._ctx._check(lib.kvc_swa_kv_pool_host_copy_bytes(self._swa.handle, n,
                                                             ctypes.byref(fb), ctypes.byref(sb)))
        full = T.host_empty(max(fb.value, 1), _u8())
        swa = T.host_empty(max(sb.value, 1), _u8())
        mask = T.host_empty(max(n, 1), _u8())
        self._ctx._check(lib.kvc_swa_kv_pool_copy_to_host(
            self._swa.handle, T.ptr(idx), n, T.ptr(full), T.ptr(swa), T.ptr(mask),
            T.stream(self._cuda)))
        self._ctx.synchronize(T.stream(self._cuda))
        return {"full": full, "swa": swa, "swa_mask": mask[:n]}

    def load_cpu_copy(self, kv_cache_cpu, indices, mamba_indices=None, req_pool_index=None):
        """The inverse at new full slots: SWA rows only where the saved mask and the new
        slot's SWA peer both exist."""
        idx = T.host_i64(indices)
        n = T.numel(idx)
        d = kv_cache_cpu
        if T.numel(d["swa_mask"]) != n:
            raise ValueError("the copy holds %d slots, indices %d" % (T.numel(d["swa_mask"]), n))
        self._ctx._check(lib.kvc_swa_kv_pool_copy_from_host(
            self._swa.handle, T.ptr(idx), n, T.ptr(d["full"]), T.ptr(d["swa"]),
            T.ptr(d["swa_mask"]), T.stream(self._cuda)))
        self._ctx.synchronize(T.stream(self._cuda))
