"""kvcache.sglang — SGLang's mem_cache interfaces over kvcache (a drop-in; never imports
sglang). See docs/sglang.md.

Classes: ReqToTokenPool, HybridReqToTokenPool, MambaPool, TokenToKVPoolAllocator,
PagedTokenToKVPoolAllocator, SWATokenToKVPoolAllocator, MHATokenToKVPool,
MLATokenToKVPool, NSATokenToKVPool, HybridLinearKVPool, SWAKVPool, ChunkCache,
RadixCache, SWARadixCache, MambaRadixCache. Scheduler functions (mem_cache/common.py): alloc_for_extend,
alloc_for_decode, release_kv_cache, evict_from_tree_cache, maybe_cache_unfinished_req and
their helpers, in ``kvcache.sglang.common`` and re-exported here.

Tensors are torch tensors when torch is installed, NumPy arrays otherwise (host backend
only). Device tensors are zero-copy views of kvcache's buffers or tensors the library
wrote by pointer; *_cpu tensors are read by pointer. Shortage gives None where SGLang
gives None; RuntimeError from the scheduler functions as in SGLang; misuse SGLang would
let corrupt state (double free, slot 0, a kept row not held, ...) raises a
kvcache.KvcacheError instead.

Req and ScheduleBatch below are minimal reference types with exactly the attributes the
functions read (SGLang's own Req / ScheduleBatch work as they are).
"""
from dataclasses import dataclass, field
from typing import Any, List, Optional

from . import _ops as _T
from ._alloc import (PagedTokenToKVPoolAllocator, SWATokenToKVPoolAllocator,
                     TokenToKVPoolAllocator, get_num_new_pages)
from ._cache import (CacheInitParams, ChunkCache, DecLockRefParams, DecLockRefResult, EvictParams,
                     EvictResult, IncLockRefResult, InsertParams, InsertResult, MatchPrefixParams,
                     MatchResult, RadixCache, RadixKey)
from ._kvpool import (HybridLinearKVPool, MHATokenToKVPool, MLATokenToKVPool,
                      NSATokenToKVPool, SWAKVPool)
from ._ops import get_context, set_context
from ._swa_cache import SWARadixCache
from ._mamba_cache import MambaRadixCache
from ._reqpool import (HybridReqToTokenPool, Mamba2StateDType, Mamba2StateShape,
                       MambaCacheParams, MambaPool, ReqToTokenPool)
from .common import (alloc_for_decode, alloc_for_extend, alloc_paged_token_slots_decode,
                     alloc_paged_token_slots_extend, alloc_req_slots, alloc_token_slots,
                     available_and_evictable_str, ceil_align, evict_from_tree_cache,
                     free_swa_out_of_window_slots, get_last_loc, kv_to_page_indices,
                     kv_to_page_num, maybe_cache_unfinished_req, page_align_floor,
                     release_kv_cache)

__all__ = [
    "ReqToTokenPool", "HybridReqToTokenPool", "MambaPool", "MambaCacheParams",
    "Mamba2StateShape", "Mamba2StateDType", "TokenToKVPoolAllocator",
    "PagedTokenToKVPoolAllocator", "SWATokenToKVPoolAllocator", "get_num_new_pages",
    "MHATokenToKVPool", "MLATokenToKVPool", "NSATokenToKVPool", "HybridLinearKVPool",
    "SWAKVPool", "ChunkCache", "RadixCache", "SWARadixCache", "MambaRadixCache",
    "CacheInitParams", "EvictParams",
    "EvictResult", "IncLockRefResult", "DecLockRefParams", "DecLockRefResult", "InsertParams",
    "InsertResult",
    "MatchPrefixParams", "MatchResult", "RadixKey", "get_context", "set_context",
    "alloc_for_extend", "alloc_for_decode", "release_kv_cache", "evict_from_tree_cache",
    "maybe_cache_unfinished_req", "alloc_req_slots", "alloc_token_slots",
    "alloc_paged_token_slots_extend", "alloc_paged_token_slots_decode",
    "free_swa_out_of_window_slots", "available_and_evictable_str", "kv_to_page_indices",
    "kv_to_page_num", "page_align_floor", "ceil_align", "get_last_loc", "Req",
    "ScheduleBatch",
]

torch = _T.torch


@dataclass(eq=False)
class Req:
    """The request fields kvcache.sglang reads and writes (SGLang's Req has them all)."""
    origin_input_ids: List[int] = field(default_factory=list)
    output_ids: List[int] = field(default_factory=list)
    fill_ids: List[int] = field(default_factory=list)
    req_pool_idx: Optional[int] = None
    prefix_indices: Any = None
    extend_input_len: int = 0
    kv_committed_len: int = 0
    kv_allocated_len: int = 0
    is_chunked: int = 0
    cache_protected_len: int = 0
    last_node: Any = None
    swa_evicted_seqlen: int = 0
    swa_evict_floor: int = 0
    swa_uuid_for_lock: Optional[int] = None
    swa_prefix_lock_released: bool = False
    mamba_pool_idx: Any = None
    mamba_ping_pong_track_buffer: Any = None
    mamba_next_track_idx: int = 0
    # The extra buffer's checkpoints (set by the scheduler when a forward wrote a track slot):
    # tokens the newest (and, with two track slots, the previous) checkpoint covers, and the
    # track index of the newest (newer SGLang; None: the other index of mamba_next_track_idx).
    mamba_last_track_seqlen: Optional[int] = None
    mamba_prev_track_seqlen: Optional[int] = None
    mamba_last_track_idx: Optional[int] = None
    skip_radix_cache_insert: bool = False
    extra_key: Optional[str] = None
    priority: int = 0

    def __post_init__(self):
        if self.prefix_indices is None:
            self.prefix_indices = _T.host_empty(0)

    def pop_committed_kv_cache(self):
        return self.kv_committed_len

    def pop_overallocated_kv_cache(self):
        return self.kv_committed_len, self.kv_allocated_len


@dataclass(eq=False)
class ScheduleBatch:
    """The batch fields the scheduler functions read. prepare_for_extend() /
    prepare_for_decode() do the bookkeeping SGLang's ScheduleBatch does around them
    (lengths, fill_ids, kv_committed_len / kv_allocated_len), for tests and demos."""
    reqs: List[Req]
    req_to_token_pool: Any
    tree_cache: Any
    device: str = "cpu"
    prefix_lens: List[int] = field(default_factory=list)
    extend_lens: List[int] = field(default_factory=list)
    extend_num_tokens: int = 0
    seq_lens: Any = None
    seq_lens_cpu: Any = None
    req_pool_indices: Any = None
    out_cache_loc: Any = None
    sliding_window_size: int = 0

    @property
    def token_to_kv_pool_allocator(self):
        return self.tree_cache.token_to_kv_pool_allocator

    def prepare_for_extend(self):
        """Extend every request to len(fill_ids); its prefix = prefix_indices."""
        for r in self.reqs:
            n = _T.numel(r.prefix_indices)
            r.extend_input_len = len(r.fill_ids) - n
        self.prefix_lens = [_T.numel(r.prefix_indices) for r in self.reqs]
        self.extend_lens = [r.extend_input_len for r in self.reqs]
        self.extend_num_tokens = sum(self.extend_lens)
        seq = _T.host_array([len(r.fill_ids) for r in self.reqs])
        self.seq_lens_cpu = seq
        self.seq_lens = _T.to_device(seq, self.device) if _T.is_cuda(self.device) else seq
        out, rows_dev, rows_cpu = alloc_for_extend(self)
        self.out_cache_loc = out
        self.req_pool_indices = rows_dev
        for r in self.reqs:
            r.kv_committed_len = r.kv_allocated_len = len(r.fill_ids)
        return out

    def prepare_for_decode(self):
        """One decode step: alloc_for_decode, then each request grows by one token
        (token id = its length, for tests)."""
        out = alloc_for_decode(self, 1)
        self.out_cache_loc = out
        for r in self.reqs:
            r.output_ids.append(len(r.fill_ids))
            r.fill_ids.append(len(r.fill_ids))
            r.kv_committed_len += 1
            r.kv_allocated_len += 1
        seq = _T.host_array([len(r.fill_ids) for r in self.reqs])
        self.seq_lens_cpu = seq
        self.seq_lens = _T.to_device(seq, self.device) if _T.is_cuda(self.device) else seq
        return out

    def maybe_evict_swa(self):
        """SWA window eviction for every request at its current length (open point
        15.2-1 of the spec: the believed behaviour)."""
        if not self.sliding_window_size:
            return
        alloc = self.tree_cache.token_to_kv_pool_allocator
        for r in self.reqs:
            if r.req_pool_idx is None:
                continue
            free_swa_out_of_window_slots(
                r, r.kv_committed_len, sliding_window_size=self.sliding_window_size,
                page_size=self.tree_cache.page_size, req_to_token_pool=self.req_to_token_pool,
                token_to_kv_pool_allocator=alloc)

    def filter_batch(self, keep):
        """Keeps the requests at positions `keep` (new req_pool_indices tensor)."""
        self.reqs = [self.reqs[i] for i in keep]
        rows = _T.host_array([r.req_pool_idx for r in self.reqs])
        self.req_pool_indices = _T.to_device(rows, self.device) if _T.is_cuda(self.device) \
            else rows
        seq = _T.host_array([len(r.fill_ids) for r in self.reqs])
        self.seq_lens_cpu = seq
        self.seq_lens = _T.to_device(seq, self.device) if _T.is_cuda(self.device) else seq
