"""SWARadixCache with SGLang's interface (mem_cache/swa_radix_cache.py, the seeds' era) over
kvcache's C SWA radix tree (kvc_swa_radix_cache, through kvcache.swa_radix)."""
import array
import ctypes

import kvcache as _kvc
from kvcache import swa_radix as _swa_radix

from . import _ops as T
from ._alloc import SWATokenToKVPoolAllocator
from ._cache import (DecLockRefResult, EvictResult, IncLockRefResult, InsertResult, MatchResult,
                     RadixCache, _PrefixCacheBase, _pop_committed)

lib = T.lib
# Our own function object (raw addresses; the binding's has POINTER argument types).
_match_fn = getattr(ctypes.CDLL(lib._name), "kvc_swa_radix_cache_match_prefix")
_match_fn.restype = ctypes.c_int
_match_fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]


class _MatchRaw(ctypes.Structure):
    """kvc_radix_match with the slots as a raw address."""
    _fields_ = [("len", ctypes.c_int64), ("slots", ctypes.c_void_p), ("node", ctypes.c_void_p),
                ("copied", ctypes.c_int32), ("reserved_i32_", ctypes.c_int32)]


_NAMES = ("req_to_token_pool", "token_to_kv_pool_allocator", "sliding_window_size", "page_size",
          "disable", "is_eagle")


def _swa_init_args(args, kwargs):
    """SWARadixCache(params: CacheInitParams) or the older
    SWARadixCache(req_to_token_pool, token_to_kv_pool_allocator, sliding_window_size,
    page_size, disable=False, is_eagle=False)."""
    if len(args) == 1 and not kwargs and hasattr(args[0], "token_to_kv_pool_allocator"):
        p = args[0]
        return {n: getattr(p, n, None) for n in _NAMES}
    vals = dict(zip(_NAMES, args))
    vals.update({k: v for k, v in kwargs.items() if k in _NAMES})
    return {n: vals.get(n) for n in _NAMES}


def _receipt(params):
    """The SWA receipt in a dec_lock_ref argument: DecLockRefParams / IncLockRefResult (its
    swa_uuid_for_lock), an int, or None (0: no SWA lock named)."""
    if params is None:
        return 0
    r = getattr(params, "swa_uuid_for_lock", params)
    return int(r) if r else 0


class SWARadixCache(_PrefixCacheBase):
    """SGLang SWARadixCache (hybrid full + sliding-window attention models) over kvcache's
    SWA radix tree, with SGLang's SWATokenToKVPoolAllocator (kvcache.sglang's).

    Nodes are opaque handles of the C tree. A node's SWA side is live or the node is a
    tombstone; a match ends where a window of live SWA tokens does; locks pin the full
    side of the path and the SWA side of the last window (swa_uuid_for_lock names that
    SWA lock: pass it back to dec_lock_ref / dec_swa_lock_only)."""

    def __init__(self, *args, **kwargs):
        v = _swa_init_args(args, kwargs)
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
        self._setup(pool, alloc, ps)
        self.sliding_window_size = int(v["sliding_window_size"])
        self.disable = False
        self.is_eagle = False
        ctx = pool._ctx
        self._tree = _swa_radix.SWARadixCache(ctx, alloc.size_full, self.sliding_window_size, ps)
        self._flow = _kvc.Flow(ctx, pool._pool, alloc._a, cache=self._tree,
                               sliding_window=self.sliding_window_size)
        self._fh = self._flow.handle
        self._state = _kvc.ReqState()
        self._m = _MatchRaw()
        self._mref = ctypes.byref(self._m)
        self._cuda = T.is_cuda(self.device)
        empty = T.host_empty(0)
        self._empty_match = T.to_device(empty, self.device) if self._cuda else empty
        self._root()

    def _root(self):
        """root_node: the tree's root handle (what a miss returns)."""
        self._tree._check(_match_fn(self._tree.handle, 0, None, 0, self._mref))
        self.root_node = self._m.node

    # What the radix adapter does the same way: the key, its namespace, the request binding.
    _key = staticmethod(RadixCache._key)
    _ns = RadixCache._ns
    _tok_cap = 0
    _tok_buf = _tok_ptr = None
    _tokens = RadixCache._tokens

    def supports_swa(self):
        return True

    def swa_reprefill_tail_tokens(self):
        """0: kvcache's SWA pool is index-addressed (content-stable slots), never a
        per-request ring, so a matched window is safe to reuse."""
        return 0

    # --- matching --------------------------------------------------------------------------

    def match_prefix(self, params=None, key=None, **kwargs):
        """MatchResult(device_indices = int64 slots of the longest valid prefix: page-floored,
        ending where a window of live SWA tokens ends (or on a path without tombstones),
        last_device_node = its node). No lock is taken. The key's token_ids may be a list,
        an array('i'), or an int32 NumPy array / torch CPU tensor."""
        k = params if params is not None else key
        k = getattr(k, "key", k)
        toks = getattr(k, "token_ids", k)
        if isinstance(toks, list):
            keep = array.array("i", toks)
            p, n = keep.buffer_info()
        elif isinstance(toks, array.array) and toks.typecode == "i":
            p, n = toks.buffer_info()
        else:
            keep = T.host_i32(toks)
            p, n = T.ptr(keep), T.numel(keep)
        m = self._m
        self._tree._check(_match_fn(self._tree.handle, self._ns(getattr(k, "extra_key", None)), p, n,
                                    self._mref))
        node = m.node
        if m.len == 0:
            return MatchResult(self._empty_match, node, node)
        host = T.host_from_bytes(T.copy_bytes(m.slots, 8 * m.len))
        dev = T.to_device(host, self.device) if self._cuda else host
        return MatchResult(dev, node, node)

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
        st = self._state
        ctypes.memset(ctypes.addressof(st), 0, ctypes.sizeof(st))
        st.req_row = req.req_pool_idx
        st.seq_len = committed
        st.kv_committed_len = committed
        st.kv_allocated_len = committed
        st.cache_protected_len = getattr(req, "cache_protected_len", 0) or 0
        st.swa_evicted_seqlen = getattr(req, "swa_evicted_seqlen", 0) or 0
        st.swa_evict_floor = getattr(req, "swa_evict_floor", 0) or 0
        st.cache_node = req.last_node
        ns = self._ns(getattr(req, "extra_key", None))
        if type(tokens) is int:
            rr = self._tree._bind_borrowed(st, self._tok_ptr, self._tok_buf, tokens, ns)
        else:
            rr = self._tree.bind(st, tokens, ns=ns)
        released = getattr(req, "swa_prefix_lock_released", False)
        rr.swa_lock = 0 if released or req.last_node is None else \
            _receipt(getattr(req, "swa_uuid_for_lock", None))
        return st, rr

    def cache_finished_req(self, req, is_insert: bool = True):
        """Inserts [0, committed) floored to pages with req.swa_evicted_seqlen (the part
        below it a tombstone; duplicates and the unaligned tail freed; without is_insert
        frees [cache_protected_len, committed)), releases the request's locks."""
        committed = _pop_committed(req)
        tokens = self._tokens(req.origin_input_ids, req.output_ids, committed)
        st, rr = self._bind(req, tokens, committed)
        try:
            self._tree._check(lib.kvc_swa_radix_cache_cache_finished_req(
                self._tree.handle, self._fh, ctypes.addressof(st), 1 if is_insert else 0))
        finally:
            self._tree.unbind(st)
        req.last_node = None
        req.swa_uuid_for_lock = None
        if hasattr(req, "swa_prefix_lock_released"):
            req.swa_prefix_lock_released = False

    def cache_unfinished_req(self, req, chunked=False):
        """Checkpoints a chunked request: inserts the filled tokens (page-floored, with its
        swa_evicted_seqlen), writes the tree's slots into the row where duplicates were,
        moves the locks to the new node and sets prefix_indices / cache_protected_len /
        last_node / swa_uuid_for_lock."""
        n = len(req.fill_ids)
        tokens = self._tokens(req.fill_ids, None, n)
        st, rr = self._bind(req, tokens, n)
        try:
            self._tree._check(lib.kvc_swa_radix_cache_cache_unfinished_req(
                self._tree.handle, self._fh, ctypes.addressof(st)))
            receipt = rr.swa_lock
        finally:
            self._tree.unbind(st)
        req.last_node = st.cache_node
        req.cache_protected_len = st.cache_protected_len
        req.swa_uuid_for_lock = receipt or None
        if hasattr(req, "swa_prefix_lock_released"):
            req.swa_prefix_lock_released = False
        self._row_prefix(req, n)

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
        if params is not None and not isinstance(params, int):
            full, swa = params.num_tokens, getattr(params, "swa_num_tokens", 0)
        else:
            full = params if params is not None else (num_tokens or 0)
            swa = swa_num_tokens
        if not full and not swa:
            return EvictResult()
        e, s = ctypes.c_int64(), ctypes.c_int64()
        st = lib.kvc_swa_radix_cache_evict(self._tree.handle, self._fh, full, swa, ctypes.byref(e),
                                           ctypes.byref(s))
        if st not in (0, 2):  # 2: nothing evictable (SGLang: evicts what it can)
            self._tree._check(st, "evict")
        return EvictResult(num_tokens_evicted=e.value, swa_num_tokens_evicted=s.value)

    def evictable_size(self):
        raise NotImplementedError("use full_evictable_size() and swa_evictable_size()")

    def protected_size(self):
        raise NotImplementedError("use full_protected_size() and swa_protected_size()")

    def full_evictable_size(self):
        return self._tree.sizes()["evictable"]

    def swa_evictable_size(self):
        return self._tree.sizes()["swa_evictable"]

    def full_protected_size(self):
        return self._tree.sizes()["protected"]

    def swa_protected_size(self):
        return self._tree.sizes()["swa_protected"]

    def total_size(self):
        """(full tokens cached, SWA tokens cached: the non-tombstone ones)."""
        s = self._tree.sizes()
        return s["cached"], s["swa_cached"]

    def available_and_evictable_str(self):
        a = self.token_to_kv_pool_allocator
        fa, sa = a.full_available_size(), a.swa_available_size()
        fe, se = self.full_evictable_size(), self.swa_evictable_size()
        return ("Available full tokens: %d (full_available_size=%d + full_evictable_size=%d)\n"
                "Available swa tokens: %d (swa_available_size=%d + swa_evictable_size=%d)\n"
                "Full LRU list evictable size: %d\nSWA LRU list evictable size: %d\n"
                % (fa + fe, fa, fe, sa + se, sa, se, fe, se))

    def sanity_check(self):
        """The C tree's audit of both components (kvc_swa_radix_cache_check)."""
        self._tree.check()

    def pretty_print(self):
        """Prints (and returns) the totals line of SGLang's pretty_print (kvcache's SWA tree
        has no node dump)."""
        full, swa = self.total_size()
        s = "#full_tokens: %d, #swa_tokens: %d" % (full, swa)
        print(s)
        return s

    def reset(self):
        """Drops every node without freeing slots (the pools are being cleared)."""
        self._tree.reset()
        self._root()
