"""SWARadixCache with SGLang's interface (mem_cache/swa_radix_cache.py, the seeds' era) over
kvcache's C SWA radix tree (kvc_swa_radix_cache, through kvcache.swa_radix)."""
import ctypes

import kvcache as _kvc
from kvcache import swa_radix as _swa_radix

from . import _ops as T
from ._alloc import SWATokenToKVPoolAllocator
from ._cache import (DecLockRefResult, EvictResult, IncLockRefResult, InsertResult, _HybridTreeCache,
                     _named_args)

lib = T.lib
# Our own function object (raw addresses; the binding's has POINTER argument types).
_match_fn = getattr(ctypes.CDLL(lib._name), "kvc_swa_radix_cache_match_prefix")
_match_fn.restype = ctypes.c_int
_match_fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]


_NAMES = ("req_to_token_pool", "token_to_kv_pool_allocator", "sliding_window_size", "page_size",
          "disable", "is_eagle")


def _receipt(params):
    """The SWA receipt in a dec_lock_ref argument: DecLockRefParams / IncLockRefResult (its
    swa_uuid_for_lock), an int, or None (0: no SWA lock named)."""
    if params is None:
        return 0
    r = getattr(params, "swa_uuid_for_lock", params)
    return int(r) if r else 0


class SWARadixCache(_HybridTreeCache):
    """SGLang SWARadixCache (hybrid full + sliding-window attention models) over kvcache's
    SWA radix tree, with SGLang's SWATokenToKVPoolAllocator (kvcache.sglang's).

    Nodes are opaque handles of the C tree. A node's SWA side is live or the node is a
    tombstone; a match ends where a window of live SWA tokens does; locks pin the full
    side of the path and the SWA side of the last window (swa_uuid_for_lock names that
    SWA lock: pass it back to dec_lock_ref / dec_swa_lock_only)."""

    def __init__(self, *args, **kwargs):
        v = _named_args(args, kwargs, _NAMES)
        pool, alloc = v["req_to_token_pool"], v["token_to_kv_pool_allocator"]
        ps = v["page_size"] or 1
        if not isinstance(alloc, SWATokenToKVPoolAllocator):
            raise _kvc.InvalidArgument(1, "SWARadixCache needs an SWATokenToKVPoolAllocator")
        if v["sliding_window_size"] is None or v["sliding_window_size"] < 1:
            raise _kvc.InvalidArgument(1, "sliding_window_size must be set for SWARadixCache")
        if v["disable"]:
            raise NotImplementedError("disable=True: use ChunkCache")
        if v["is_eagle"]:
            raise NotImplementedError("is_eagle (bigram keys) is not provided by kvcache's radix tree")
        if ps != alloc.page_size:
            raise _kvc.InvalidArgument(1, "page_size %d, the allocator's is %d" % (ps, alloc.page_size))
        self.sliding_window_size = int(v["sliding_window_size"])
        self.disable = False
        self.is_eagle = False
        ctx = pool._ctx
        tree = _swa_radix.SWARadixCache(ctx, alloc.size_full, self.sliding_window_size, ps)
        self._attach(pool, alloc, ps, tree, _kvc.Flow(ctx, pool._pool, alloc._a, cache=tree,
                                                      sliding_window=self.sliding_window_size))
        self._root()

    _match_fn = _match_fn
    _finished_fn = lib.kvc_swa_radix_cache_cache_finished_req
    _unfinished_fn = lib.kvc_swa_radix_cache_cache_unfinished_req
    _second = "swa"
    _total_name = "swa_tokens"

    def supports_swa(self):
        return True

    def swa_reprefill_tail_tokens(self):
        """0: kvcache's SWA pool is index-addressed (content-stable slots), never a
        per-request ring, so a matched window is safe to reuse."""
        return 0

    # --- locks -----------------------------------------------------------------------------

    def inc_lock_ref(self, node):
        """Full lock of node and its ancestors, SWA lock of the nodes covering the last
        sliding_window tokens: IncLockRefResult(swa_uuid_for_lock = the SWA lock's receipt;
        None for the root)."""
        r = self._tree.lock(node)
        return IncLockRefResult(swa_uuid_for_lock=r or None)

    def dec_lock_ref(self, node, params=None, skip_swa=False):
        """Releases the full lock and the SWA lock params.swa_uuid_for_lock names (skip_swa:
        the SWA part was released already, by dec_swa_lock_only)."""
        self._tree.unlock(node, 0 if skip_swa else _receipt(params))
        return DecLockRefResult()

    def dec_swa_lock_only(self, node, swa_uuid_for_lock=None):
        """Releases only the SWA part of a lock (the full side stays protected): the SWA
        LRU may evict that window afterwards. Pass skip_swa=True to the later dec_lock_ref."""
        r = _receipt(swa_uuid_for_lock)
        if not r and node != self.root_node:
            raise _kvc.InvalidArgument(1, "dec_swa_lock_only: swa_uuid_for_lock (inc_lock_ref's "
                                       "receipt) is required")
        self._tree.unlock_swa(node, r)

    # --- caching requests ------------------------------------------------------------------

    def _bind(self, req, tokens, committed):
        """The base binding with the request's SWA fields and the SWA lock it holds (none
        once released early by dec_swa_lock_only)."""
        st, rr = _HybridTreeCache._bind(self, req, tokens, committed)
        st.swa_evicted_seqlen = getattr(req, "swa_evicted_seqlen", 0) or 0
        st.swa_evict_floor = getattr(req, "swa_evict_floor", 0) or 0
        self._rr = rr
        released = getattr(req, "swa_prefix_lock_released", False)
        rr.swa_lock = 0 if released or req.last_node is None else \
            _receipt(getattr(req, "swa_uuid_for_lock", None))
        return st, rr

    def cache_finished_req(self, req, is_insert: bool = True):
        """Inserts [0, committed) floored to pages with req.swa_evicted_seqlen (the part
        below it a tombstone; duplicates and the unaligned tail freed; without is_insert
        frees [cache_protected_len, committed)), releases the request's locks."""
        _HybridTreeCache.cache_finished_req(self, req, is_insert)
        req.swa_uuid_for_lock = None
        if hasattr(req, "swa_prefix_lock_released"):
            req.swa_prefix_lock_released = False

    def cache_unfinished_req(self, req, chunked=False):
        """Checkpoints a chunked request: inserts the filled tokens (page-floored, with its
        swa_evicted_seqlen), writes the tree's slots into the row where duplicates were,
        moves the locks to the new node and sets prefix_indices / cache_protected_len /
        last_node / swa_uuid_for_lock."""
        _HybridTreeCache.cache_unfinished_req(self, req, chunked)
        req.swa_uuid_for_lock = self._rr.swa_lock or None  # the call's receipt (rr outlives unbind)
        if hasattr(req, "swa_prefix_lock_released"):
            req.swa_prefix_lock_released = False

    def insert(self, params=None, value=None, prev_prefix_len=0, swa_evicted_seqlen=0, key=None):
        """insert(InsertParams(key, value, prev_prefix_len, swa_evicted_seqlen)) or
        insert(key, value, ...): InsertResult(prefix_len = key tokens already cached). The
        overlapped duplicates are freed; the new leaf's part below swa_evicted_seqlen is a
        tombstone. value (the slots) is required; prev_prefix_len must be 0 (the request
        paths are cache_finished_req / cache_unfinished_req)."""
        if params is not None and hasattr(params, "prev_prefix_len") and hasattr(params, "value"):
            key, value = params.key, params.value
            prev_prefix_len, swa_evicted_seqlen = params.prev_prefix_len, params.swa_evicted_seqlen
        elif params is not None:
            key = params
        if value is None:
            raise _kvc.InvalidArgument(1, "insert: value (the KV slots) is required")
        if prev_prefix_len:
            raise _kvc.InvalidArgument(1, "insert: prev_prefix_len must be 0 (checkpoint requests "
                                       "with cache_unfinished_req / cache_finished_req)")
        toks, extra = self._key(key)
        ps = self.page_size
        n = len(toks) // ps * ps
        slots = T.tolist(T.host_i64(value))[:n]
        if len(slots) < n:
            raise _kvc.InvalidArgument(1, "insert: %d slots for %d key tokens" % (len(slots), n))
        p = self._tree.insert(list(toks)[:n], slots, self._flow, ns=self._ns(extra),
                              swa_evicted_seqlen=swa_evicted_seqlen or 0)
        return InsertResult(prefix_len=p)

    # --- eviction and sizes ----------------------------------------------------------------

    def evict(self, params=None, num_tokens=None, swa_num_tokens=0):
        """EvictParams(num_tokens, swa_num_tokens): full eviction of unlocked leaves (LRU)
        until num_tokens full tokens are freed, then SWA eviction (SWA LRU: an inner or
        full-locked node becomes a tombstone, a leaf goes) until swa_num_tokens SWA tokens
        are freed in all. EvictResult(num_tokens_evicted, swa_num_tokens_evicted)."""
        full, swa = self._evict_counts(params, num_tokens, swa_num_tokens, "swa_num_tokens")
        if not full and not swa:
            return EvictResult()
        e, s = ctypes.c_int64(), ctypes.c_int64()
        st = lib.kvc_swa_radix_cache_evict(self._tree.handle, self._fh, full, swa, ctypes.byref(e),
                                           ctypes.byref(s))
        self._evict_status(st)
        return EvictResult(num_tokens_evicted=e.value, swa_num_tokens_evicted=s.value)

    def swa_evictable_size(self):
        return self._tree.sizes()["swa_evictable"]

    def swa_protected_size(self):
        return self._tree.sizes()["swa_protected"]

    def available_and_evictable_str(self):
        a = self.token_to_kv_pool_allocator
        fa, sa = a.full_available_size(), a.swa_available_size()
        fe, se = self.full_evictable_size(), self.swa_evictable_size()
        return ("Available full tokens: %d (full_available_size=%d + full_evictable_size=%d)\n"
                "Available swa tokens: %d (swa_available_size=%d + swa_evictable_size=%d)\n"
                "Full LRU list evictable size: %d\nSWA LRU list evictable size: %d\n"
                % (fa + fe, fa, fe, sa + se, sa, se, fe, se))
