"""Token, paged and SWA token-slot allocators with SGLang's signatures.

Allocation results are device int64 tensors (on the host backend: host tensors), None on
shortage. Inputs documented by SGLang as CPU mirrors (*_cpu) are read by pointer; device
inputs the allocator needs on the host (last_loc, indices to free) are taken from the host
copy kvcache attached to the tensors it produced, else copied once (one sync).
"""
import ctypes
import gc

import kvcache as _kvc
from kvcache import hybrid as _hybrid

from . import _ops as T
from ._ops import c_int64, c_size_t, c_void_p, proto

lib = T.lib
_st = ctypes.c_int
proto("kvc_swa_allocator_free_full", _st, c_void_p, c_void_p, c_size_t)
proto("kvc_swa_allocator_free_segment", _st, c_void_p, c_void_p, c_size_t, c_int64, c_void_p)
proto("kvc_swa_allocator_free_full_segment", _st, c_void_p, c_void_p, c_size_t, c_int64)
proto("kvc_swa_allocator_free_group_begin", _st, c_void_p)
proto("kvc_swa_allocator_free_group_end", _st, c_void_p)
proto("kvc_swa_allocator_clear", _st, c_void_p, c_void_p)
proto("kvc_swa_allocator_new_pages_available", ctypes.c_int, c_void_p, c_int64, c_int64)


def get_num_new_pages(seq_lens, page_size, prefix_lens=None, decode=False):
    """SGLang get_num_new_pages over CPU tensors (a Python int). decode=True counts
    seq % ps == 1, which is 0 for ps = 1 (SGLang's quirk, reproduced here)."""
    seq = T.host_i64(seq_lens)
    if decode:
        return int(((seq % page_size) == 1).sum())
    assert prefix_lens is not None, "prefix_lens is required unless decode=True"
    pre = T.host_i64(prefix_lens)
    return int(((seq + page_size - 1) // page_size - (pre + page_size - 1) // page_size).sum())


class _AllocatorBase:
    """What every SGLang token allocator has (BaseTokenToKVPoolAllocator)."""

    page_size = 1

    def _setup(self, size, page_size, dtype, device, kvcache):
        self._size = size
        self.page_size = page_size
        self.dtype = dtype
        self.device = device
        self._kvcache = kvcache
        self._ctx = T.get_context(device)
        self._cuda = T.is_cuda(device)
        self._one_len = (ctypes.c_int64 * 2)()  # [prefix 0, n] of _alloc_launch
        self._lens_addr = ctypes.addressof(self._one_len)

    @property
    def size(self):
        return self._size

    def debug_print(self):
        return ""

    def get_kvcache(self):
        return self._kvcache

    def translate_kv_indices_for_transfer(self, kv_indices):
        return kv_indices

    def _result(self, n):
        """(device tensor, its address or None, host tensor, its address) for n slots:
        fresh tensors (callers may keep them). On the host backend one tensor serves
        as both (C writes the host output only)."""
        host = T.new_host_i64(n)
        if not self._cuda:
            return host, None, host, T.ptr(host)
        dev = T.empty(n, T.I64, self.device)  # (no slice: n == 0 gives address 0)
        return dev, T.ptr(dev), host, T.ptr(host)

    def _device_result(self, dev, host):
        if T.is_cuda(self.device) and T.torch is not None:
            dev._kvc_host = host
        return dev

    def get_cpu_copy(self, indices, mamba_indices=None, req_pool_index=None):
        return self._kvcache.get_cpu_copy(indices)

    def load_cpu_copy(self, kv_cache_cpu, indices, mamba_indices=None, req_pool_index=None):
        return self._kvcache.load_cpu_copy(kv_cache_cpu, indices)

    def free_segments(self, segments):
        """SGLang free_segments: ascending (indices, start_pos) segments of one row;
        consecutive segments must not share a page."""
        ps = self.page_size
        prev_end = None
        for idx, start in segments:
            n = T.numel(idx)
            if n == 0:
                continue
            if prev_end is not None:
                assert start // ps > (prev_end - 1) // ps, "segments share a page"
            self.free_segment(idx, start_pos=start)
            prev_end = start + n

    def evict_to_free_tokens(self, tree_cache, num_tokens):
        from .common import evict_from_tree_cache
        evict_from_tree_cache(tree_cache, num_tokens)

    def check_decode_capacity(self, num_tokens, tree_cache):
        self.evict_to_free_tokens(tree_cache, num_tokens)
        return self.available_size() >= num_tokens

    def verify_byte_accounting(self):
        return []

    _swa_kind = False  # True: kvc_swa_allocator (the _kvcfast entries' `swa` flag)
    _free_cap = 0
    _free_buf = None
    _free_ptr = 0
    _row_flows = None

    def _free_row(self, req_to_token_pool, row, start, end, swa_evicted=0):
        """free(row[start:end)) read from the req pool's host mirror: two library calls
        (the row copy into a reused int64 scratch, the free), no device read. (SWA: the
        part below swa_evicted, whose SWA peers are gone, goes through free_full.)"""
        n = end - start
        if n <= 0:
            return
        p = self._scratch(n)
        f = self._row_flow(req_to_token_pool)
        fast = T.fast
        if fast is not None:  # both library calls in one extension call
            swa = self._swa_kind
            st = fast.free_row(swa, self._h, f[0], row, start, end, p,
                               T.stream(self._cuda) if swa else None)
            if st:
                self._ctx._check(st, "free")
            return
        check = self._ctx._check
        check(lib.kvc_flow_row_slots(f[0], row, start, end, p), "free")
        check(self._free_slots(p, n), "free")

    def _scratch(self, n):
        """Address of a reused host int64 scratch of at least n slots."""
        if self._free_cap < n:
            self._free_cap = max(n, 2 * self._free_cap, 4096)
            self._free_buf = T.host_empty(self._free_cap)
            self._free_ptr = T.ptr(self._free_buf)
        return self._free_ptr

    def _row_flow(self, req_to_token_pool):
        """(flow handle, flow, pool): a flow over (pool, allocator), only for
        kvc_flow_row_slots (reads a row of the pool's host mirror)."""
        flows = self._row_flows
        if flows is None:
            flows = self._row_flows = {}
        f = flows.get(id(req_to_token_pool))
        if f is None:
            fl = _kvc.Flow(self._ctx, req_to_token_pool._pool, self._a)
            f = flows[id(req_to_token_pool)] = (fl.handle, fl, req_to_token_pool)
        return f

    def _free_slots(self, p, n):
        return lib.kvc_allocator_free(self._h, p, n)


class TokenToKVPoolAllocator(_AllocatorBase):
    """SGLang TokenToKVPoolAllocator (page_size 1): slots 1..size, freed slots reused
    FIFO; need_sort defers frees and merges them sorted when an alloc runs short. kvcache
    rejects double frees, slot 0 and out-of-range slots (SGLang accepts them)."""

    def __init__(self, size: int, dtype=None, device: str = "cpu", kvcache=None,
                 need_sort: bool = False):
        self._setup(size, 1, dtype, device, kvcache)
        self._a = _kvc.Allocator(self._ctx, size, 1, "token", need_sort)
        self._h = self._a.handle
        self.need_sort = need_sort

    def available_size(self):
        return lib.kvc_allocator_available_size(self._h)

    def alloc(self, need_size: int):
        fast = T.fast
        if not self._cuda:  # host backend: one host result
            host = T.new_host_i64(need_size)
            st = fast.alloc(False, self._h, need_size, T.arg(host), None, None) \
                if fast is not None else lib.kvc_allocator_alloc(self._h, need_size, T.ptr(host))
            if st and T.status_ok_or_none(st, self._ctx, "alloc") is None:
                return None
            return host
        return self._alloc_launch(need_size)

    def _alloc_launch(self, n):
        """alloc(n) whose device result the library writes in its own launch on the
        current stream: kvc_allocator_alloc_extend of one request with no prefix and n
        new tokens (the same slots and merge trigger as kvc_allocator_alloc(n): TOKEN is
        alloc(sum) by definition, PAGED takes n / ps pages from the front, page-major),
        instead of a host result copied to the device by torch (a pageable copy, about
        6 us on the H200's host). A length that is not page-aligned goes to
        kvc_allocator_alloc, which refuses it as before. On the host backend the same
        call writes the host result only (tests run it there)."""
        if n <= 0 or n % self.page_size:
            dev, dptr, host, hptr = self._result(max(n, 0))
            st = lib.kvc_allocator_alloc(self._h, n, hptr)
            if st and T.status_ok_or_none(st, self._ctx, "alloc") is None:
                return None
            if dev is not host and n > 0:  # pragma: no cover - n > 0 here is refused above
                dev.copy_(host, non_blocking=True)
            return self._device_result(dev, host)
        dev, dptr, host, hptr = self._result(n)
        lens = self._one_len
        lens[1] = n
        a = self._lens_addr
        fast = T.fast
        if fast is not None:
            st = fast.alloc_extend(False, self._h, 1, a, a + 8, None, None, None, None, hptr,
                                   dptr, T.stream(self._cuda))
        else:
            st = lib.kvc_allocator_alloc_extend(self._h, 1, a, a + 8, None, None, None, None,
                                                hptr, dptr, T.stream(self._cuda))
        if st and T.status_ok_or_none(st, self._ctx, "alloc") is None:
            return None
        return self._device_result(dev, host)

    def alloc_extend(self, *args, **kwargs):
        raise NotImplementedError("alloc_extend is only for the paged allocator")

    def alloc_decode(self, *args, **kwargs):
        raise NotImplementedError("alloc_decode is only for the paged allocator")

    def free(self, free_index):
        idx = T.host_i64(free_index)
        n = T.numel(idx)
        if n:
            fast = T.fast
            st = fast.free(False, self._h, T.arg(idx), n, None) if fast is not None else \
                lib.kvc_allocator_free(self._h, T.ptr(idx), n)
            if st:
                self._ctx._check(st, "free")

    free_full = free

    def free_segment(self, free_index, start_pos=0):
        assert start_pos % self.page_size == 0, "start_pos must be page-aligned"
        idx = T.host_i64(free_index)
        n = T.numel(idx)
        if n:
            self._ctx._check(lib.kvc_allocator_free_segment(self._h, T.ptr(idx), n, start_pos))

    def free_group_begin(self):
        self._a.free_group_begin()

    def free_group_end(self):
        self._a.free_group_end()

    def merge_and_sort_free(self):
        self._a.merge_and_sort_free()

    def backup_state(self):
        return self._a.backup_state()

    def restore_state(self, state):
        self._a.restore_state(state)

    def clear(self):
        """Every slot free. Refused (Misuse) while a RadixCache bound to this allocator
        holds slots (reset the cache first, as SGLang's flush_cache does); a bound cache
        that nothing references any more but a reference cycle (an adapter cache dropped
        without reset) is collected first, since SGLang lets such a tree go."""
        try:
            self._a.clear()
        except _kvc.Misuse:
            gc.collect()  # a dropped bound tree's destroy gives its marks up
            self._a.clear()

    def resize(self, config):
        raise NotImplementedError("kvcache allocators have a fixed size: create a new one")


class PagedTokenToKVPoolAllocator(TokenToKVPoolAllocator):
    """SGLang PagedTokenToKVPoolAllocator: pages 1..size//ps, freed pages LIFO (front),
    sorted-unique per free. alloc(n) with n % ps != 0 raises (SGLang floors it)."""

    def __init__(self, size: int, page_size: int, dtype=None, device: str = "cpu",
                 kvcache=None, need_sort: bool = False):
        self._setup(size, page_size, dtype, device, kvcache)
        self._a = _kvc.Allocator(self._ctx, size, page_size, "paged", need_sort)
        self._h = self._a.handle
        self.num_pages = size // page_size
        self.need_sort = need_sort

    def get_num_new_pages(self, seq_lens, prefix_lens=None, decode=False):
        return get_num_new_pages(seq_lens, self.page_size, prefix_lens, decode)

    def alloc_extend(self, prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc,
                     extend_num_tokens: int, num_new_pages=None):
        pre = T.host_i64(prefix_lens_cpu)
        seq = T.host_i64(seq_lens_cpu)
        last = T.host_i64(last_loc)
        total = int((seq - pre).sum())
        if total != extend_num_tokens:
            raise ValueError("extend_num_tokens %d != sum(seq - prefix) %d" %
                             (extend_num_tokens, total))
        if num_new_pages is not None and num_new_pages != get_num_new_pages(
                seq, self.page_size, pre):
            raise ValueError("num_new_pages disagrees with the lengths")
        dev, dptr, host, hptr = self._result(total)
        st = self._extend(T.numel(seq), T.ptr(pre), T.ptr(seq), T.ptr(last), hptr, dptr)
        if T.status_ok_or_none(st, self._ctx, "alloc_extend") is None:
            return None
        return self._device_result(dev, host)

    def _extend(self, n, pre, seq, last, hptr, dptr):
        return lib.kvc_allocator_alloc_extend(self._h, n, pre, seq, last, None, None, None,
                                              hptr, dptr, T.stream(self._cuda))

    def alloc_decode(self, seq_lens, seq_lens_cpu, last_loc):
        seq = T.host_i64(seq_lens_cpu)
        last = T.host_i64(last_loc)
        n = T.numel(seq)
        dev, dptr, host, hptr = self._result(n)
        st = self._decode(n, T.ptr(seq), T.ptr(last), hptr, dptr)
        if T.status_ok_or_none(st, self._ctx, "alloc_decode") is None:
            return None
        return self._device_result(dev, host)

    def _decode(self, n, seq, last, hptr, dptr):
        return lib.kvc_allocator_alloc_decode(self._h, n, seq, last, None, None, hptr, dptr,
                                              T.stream(self._cuda))


class SWATokenToKVPoolAllocator(_AllocatorBase):
    """SGLang SWATokenToKVPoolAllocator over kvc_swa_allocator: a full and an SWA side
    paired by the full->SWA mapping (full_to_swa_index_mapping, a device view). Both
    sides succeed or nothing changes (SGLang leaks one side on a decode shortage)."""

    def __init__(self, size: int, size_swa: int, page_size: int, dtype=None,
                 device: str = "cpu", kvcache=None, need_sort: bool = False,
                 req_to_token_pool=None):
        self._setup(size, page_size, dtype, device, kvcache)
        self._a = _hybrid.SWAAllocator(self._ctx, size, size_swa, page_size, need_sort)
        self._h = self._a.handle
        self._size_full, self._size_swa = size, size_swa
        if kvcache is not None:
            kvcache._register_allocator(self)
        self.full_to_swa_index_mapping = T.from_dlpack(self._a.mapping_device)

    _swa_kind = True

    @property
    def size(self):
        return min(self._size_full, self._size_swa)

    @property
    def size_full(self):
        return self._size_full

    @property
    def size_swa(self):
        return self._size_swa

    def available_size(self):
        return lib.kvc_swa_allocator_available_size(self._h)

    def full_available_size(self):
        return lib.kvc_swa_allocator_full_available_size(self._h)

    def swa_available_size(self):
        return lib.kvc_swa_allocator_swa_available_size(self._h)

    def new_pages_available(self, num_full_pages, num_swa_pages):
        return bool(lib.kvc_swa_allocator_new_pages_available(self._h, num_full_pages,
                                                              num_swa_pages))

    def translate_loc_from_full_to_swa(self, kv_indices):
        """SWA slots (int32) of full slots (from the host mapping; -1 -> -1)."""
        idx = T.host_i64(kv_indices)
        n = T.numel(idx)
        out = T.host_empty(max(n, 1))
        self._ctx._check(lib.kvc_swa_allocator_translate_host(self._h, T.ptr(idx), n,
                                                              T.ptr(out)))
        res = out[:n].to(T.I32) if T.torch is not None else out[:n].astype(T.I32)
        return T.to_device(res, self.device) if T.is_cuda(self.device) else res

    def alloc(self, need_size: int):
        assert self.page_size == 1, "alloc is for page_size 1"
        dev, dptr, host, hptr = self._result(need_size)
        st = lib.kvc_swa_allocator_alloc(self._h, need_size, hptr, dptr,
                                         T.stream(self._cuda))
        if T.status_ok_or_none(st, self._ctx, "alloc") is None:
            return None
        return self._device_result(dev, host)

    def alloc_extend(self, prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc,
                     extend_num_tokens: int):
        assert self.page_size > 1, "alloc_extend is for page_size > 1"
        pre, seq = T.host_i64(prefix_lens_cpu), T.host_i64(seq_lens_cpu)
        last = T.host_i64(last_loc)
        total = int((seq - pre).sum())
        if total != extend_num_tokens:
            raise ValueError("extend_num_tokens %d != sum(seq - prefix) %d" %
                             (extend_num_tokens, total))
        dev, dptr, host, hptr = self._result(total)
        st = lib.kvc_swa_allocator_alloc_extend(self._h, T.numel(seq), T.ptr(pre), T.ptr(seq),
                                                T.ptr(last), None, None, None, hptr, dptr,
                                                T.stream(self._cuda))
        if T.status_ok_or_none(st, self._ctx, "alloc_extend") is None:
            return None
        return self._device_result(dev, host)

    def alloc_decode(self, seq_lens, seq_lens_cpu, last_loc):
        assert self.page_size > 1, "alloc_decode is for page_size > 1"
        seq, last = T.host_i64(seq_lens_cpu), T.host_i64(last_loc)
        n = T.numel(seq)
        dev, dptr, host, hptr = self._result(n)
        st = lib.kvc_swa_allocator_alloc_decode(self._h, n, T.ptr(seq), T.ptr(last), None, None,
                                                hptr, dptr, T.stream(self._cuda))
        if T.status_ok_or_none(st, self._ctx, "alloc_decode") is None:
            return None
        return self._device_result(dev, host)

    def _free_slots(self, p, n):
        return lib.kvc_swa_allocator_free(self._h, p, n, T.stream(self._cuda))

    def _free_row(self, req_to_token_pool, row, start, end, swa_evicted=0):
        """free_full for [start, swa_evicted) (SWA peers already released by the window
        eviction: SGLang's ps = 1 free would hit its "peer mapped" invariant there),
        free for the rest."""
        cut = min(max(swa_evicted, start), end)
        if cut > start:
            self.free_full(req_to_token_pool.row_host(row, start, cut))
        _AllocatorBase._free_row(self, req_to_token_pool, row, cut, end)

    def _free_call(self, fn, free_index, *extra):
        idx = T.host_i64(free_index)
        n = T.numel(idx)
        if n:
            self._ctx._check(fn(self._h, T.ptr(idx), n, *extra))

    def free(self, free_index):
        self._free_call(lib.kvc_swa_allocator_free, free_index, T.stream(self._cuda))

    def free_swa(self, free_index):
        self._free_call(lib.kvc_swa_allocator_free_swa, free_index, T.stream(self._cuda))

    def free_full(self, free_index):
        self._free_call(lib.kvc_swa_allocator_free_full, free_index)

    def free_segment(self, free_index, start_pos=0):
        assert start_pos % self.page_size == 0, "start_pos must be page-aligned"
        self._free_call(lib.kvc_swa_allocator_free_segment, free_index, start_pos,
                        T.stream(self._cuda))

    def free_full_segment(self, free_index, start_pos=0):
        self._free_call(lib.kvc_swa_allocator_free_full_segment, free_index, start_pos)

    def free_group_begin(self):
        self._ctx._check(lib.kvc_swa_allocator_free_group_begin(self._h))

    def free_group_end(self):
        self._ctx._check(lib.kvc_swa_allocator_free_group_end(self._h))

    def clear(self):
        self._ctx._check(lib.kvc_swa_allocator_clear(self._h, T.stream(self._cuda)))

    @property
    def swa_req_ring(self) -> bool:
        """False: kvcache has no per-request SWA ring mode (every SWA slot is pooled)."""
        return False

    @property
    def swa_ring_cost_tokens(self) -> int:
        return 0

    def set_full_to_swa_mapping(self, full_indices, swa_indices):
        raise NotImplementedError(
            "the full->SWA mapping is the allocator's own (host-authoritative, device copy "
            "written by its launches): pair slots through alloc / alloc_extend / alloc_decode")

    def clear_full_to_swa_mapping(self, full_indices):
        raise NotImplementedError(
            "the full->SWA mapping is the allocator's own: free_swa / free release pairs")

    def resize(self, config):
        raise NotImplementedError("kvcache allocators have a fixed size: create a new one")
