"""MambaRadixCache with SGLang's interface (mem_cache/mamba_radix_cache.py, the seeds' era)
over kvcache's C Mamba radix tree (kvc_mamba_radix_cache, through kvcache.mamba_radix)."""
import array
import ctypes

import kvcache as _kvc
from kvcache import mamba_radix as _mamba_radix

from . import _ops as T
from ._cache import (DecLockRefResult, EvictParams, EvictResult, IncLockRefResult, InsertResult,
                     MatchResult, RadixCache, _PrefixCacheBase, _pop_committed)
from ._reqpool import HybridReqToTokenPool

lib = T.lib
T.proto("kvc_mamba_radix_cache_cache_finished_req", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
        ctypes.c_void_p, ctypes.c_int)
T.proto("kvc_mamba_radix_cache_cache_unfinished_req", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
        ctypes.c_void_p)
_match_fn = getattr(ctypes.CDLL(lib._name), "kvc_mamba_radix_cache_match_prefix")
_match_fn.restype = ctypes.c_int
_match_fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                      ctypes.c_void_p, ctypes.c_void_p]


class _MatchRaw(ctypes.Structure):
    """kvc_radix_match with the slots as a raw address."""
    _fields_ = [("len", ctypes.c_int64), ("slots", ctypes.c_void_p), ("node", ctypes.c_void_p),
                ("copied", ctypes.c_int32), ("reserved_i32_", ctypes.c_int32)]


_NAMES = ("req_to_token_pool", "token_to_kv_pool_allocator", "page_size", "disable",
          "enable_mamba_extra_buffer")


def _mamba_init_args(args, kwargs):
    """MambaRadixCache(params: CacheInitParams) or MambaRadixCache(req_to_token_pool,
    token_to_kv_pool_allocator, page_size, disable=False, enable_mamba_extra_buffer=False)."""
    if len(args) == 1 and not kwargs and hasattr(args[0], "token_to_kv_pool_allocator"):
        p = args[0]
        return {n: getattr(p, n, None) for n in _NAMES}
    vals = dict(zip(_NAMES, args))
    vals.update({k: v for k, v in kwargs.items() if k in _NAMES})
    return {n: vals.get(n) for n in _NAMES}


def _slot(x):
    """A Mamba slot given as an int, a 0-d / 1-element tensor or array."""
    if x is None:
        return 0
    if isinstance(x, int):
        return x
    return int(T.tolist(T.host_i64(x))[0])


class MambaRadixCache(_PrefixCacheBase):
    """SGLang MambaRadixCache (hybrid linear-attention / Mamba + full-attention models) over
    kvcache's Mamba radix tree, with the adapter's HybridReqToTokenPool and a token or paged
    allocator. A node holds at most one Mamba state slot (the state after exactly the
    tokens up to its end); a match ends at the deepest node with a state."""

    def __init__(self, *args, **kwargs):
        v = _mamba_init_args(args, kwargs)
        pool, alloc = v["req_to_token_pool"], v["token_to_kv_pool_allocator"]
        ps = v["page_size"] or 1
        if not isinstance(pool, HybridReqToTokenPool):
            raise _kvc.InvalidArgument(1, "MambaRadixCache needs a HybridReqToTokenPool")
        if not hasattr(alloc, "_a") or not isinstance(alloc._a, _kvc.Allocator):
            raise _kvc.InvalidArgument(1, "MambaRadixCache needs a TokenToKVPoolAllocator or a "
                                       "PagedTokenToKVPoolAllocator")
        if v["disable"]:
            raise NotImplementedError("disable=True: use ChunkCache")
        if v["enable_mamba_extra_buffer"] or pool.enable_mamba_extra_buffer:
            raise NotImplementedError("enable_mamba_extra_buffer (track / ping-pong checkpoints) is "
                                      "not provided by kvcache.sglang's MambaRadixCache")
        if ps != 1:
            raise _kvc.InvalidArgument(1, "page size must be 1 for MambaRadixCache without the "
                                       "extra buffer, got %d" % ps)
        self._setup(pool, alloc, ps)
        self.disable = False
        self.enable_mamba_extra_buffer = False
        ctx = pool._ctx
        self._tree = _mamba_radix.MambaRadixCache(ctx, pool._hyb, alloc.size, ps)
        self._flow = _kvc.Flow(ctx, pool._pool, alloc._a, cache=self._tree, hybrid_req_pool=pool._hyb)
        self._fh = self._flow.handle
        self._state = _kvc.ReqState()
        self._m = _MatchRaw()
        self._mref = ctypes.byref(self._m)
        self._ms = ctypes.c_int32()
        self._mfull = ctypes.c_int64()
        self._cuda = T.is_cuda(self.device)
        empty = T.host_empty(0)
        self._empty_match = T.to_device(empty, self.device) if self._cuda else empty
        self._root()

    def _root(self):
        self._tree._check(_match_fn(self._tree.handle, 0, None, 0, self._mref, None, None))
        self.root_node = self._m.node

    _key = staticmethod(RadixCache._key)
    _ns = RadixCache._ns
    _tok_cap = 0
    _tok_buf = _tok_ptr = None
    _tokens = RadixCache._tokens

    def supports_mamba(self):
        return True

    # --- matching --------------------------------------------------------------------------

    def _walk(self, k):
        """(length, slots address, node, state slot of the node) of a match (no lock)."""
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
                                    self._mref, ctypes.byref(self._ms), ctypes.byref(self._mfull)))
        return m.len, m.slots, m.node, self._ms.value

    def match_prefix(self, params=None, key=None, **kwargs):
        """MatchResult(device_indices = the slots up to the deepest matched node that holds
        a Mamba state, last_device_node = that node). No lock is taken. With
        params.cow_mamba and params.req, that state is copied into the request's own Mamba
        slot (req.mamba_pool_idx; a new slot when it has none, evicting one unlocked state
        when the pool is empty, as SGLang)."""
        k = params if params is not None else key
        n, addr, node, state = self._walk(k)
        host = T.host_from_bytes(T.copy_bytes(addr, 8 * n)) if n else None
        req = getattr(params, "req", None) if params is not None else kwargs.get("req")
        cow = getattr(params, "cow_mamba", False) if params is not None else kwargs.get("cow_mamba", False)
        if cow and req is not None and state:
            self._cow(req, node, state)
        if not n:
            return MatchResult(self._empty_match, node, node)
        dev = T.to_device(host, self.device) if self._cuda else host
        return MatchResult(dev, node, node)

    def _cow(self, req, node, state):
        mp = self.req_to_token_pool.mamba_pool
        src = T.host_array([state])
        if req.mamba_pool_idx is None:
            dst = mp.fork_from(src)
            if dst is None:  # the pool is empty: one unlocked state goes (not this one)
                self._tree.lock(node)
                try:
                    self.evict(EvictParams(num_tokens=0, mamba_num=1))
                finally:
                    self._tree.unlock(node)
                dst = mp.fork_from(src)
                if dst is None:
                    raise _kvc.OutOfSlots(2, "MambaRadixCache.match_prefix: no Mamba slot for the "
                                          "matched state")
            req.mamba_pool_idx = _slot(dst)
        else:
            mp.copy_from(src, T.host_array([_slot(req.mamba_pool_idx)]))

    # --- locks -----------------------------------------------------------------------------

    def inc_lock_ref(self, node):
        """Full lock of node and its ancestors, Mamba lock of the node's state."""
        self._tree.lock(node)
        return IncLockRefResult()

    def dec_lock_ref(self, node, params=None):
        self._tree.unlock(node)
        return DecLockRefResult()

    # --- caching requests ------------------------------------------------------------------

    def _bind(self, req, tokens, committed):
        st = self._state
        ctypes.memset(ctypes.addressof(st), 0, ctypes.sizeof(st))
        st.req_row = req.req_pool_idx
        st.seq_len = committed
        st.kv_committed_len = committed
        st.kv_allocated_len = committed
        st.cache_protected_len = getattr(req, "cache_protected_len", 0) or 0
        st.cache_node = req.last_node
        st.mamba_slot = _slot(req.mamba_pool_idx)
        ns = self._ns(getattr(req, "extra_key", None))
        if type(tokens) is int:
            self._tree._bind_borrowed(st, self._tok_ptr, self._tok_buf, tokens, ns)
        else:
            self._tree.bind(st, tokens, ns=ns)
        return st

    def cache_finished_req(self, req, is_insert: bool = True):
        """Inserts [0, committed) with the request's running state donated to the node at
        its end (when that node has a state already the request's slot is freed instead),
        frees the duplicates, releases the lock and every other Mamba slot of the request
        (req.mamba_pool_idx = None). Without is_insert (abort) frees [cache_protected_len,
        committed) and the request's Mamba slot."""
        committed = _pop_committed(req)
        tokens = self._tokens(req.origin_input_ids, req.output_ids, committed)
        st = self._bind(req, tokens, committed)
        try:
            self._tree._check(lib.kvc_mamba_radix_cache_cache_finished_req(
                self._tree.handle, self._fh, ctypes.addressof(st), 1 if is_insert else 0))
        finally:
            self._tree.unbind(st)
        req.last_node = None
        req.mamba_pool_idx = None

    def cache_unfinished_req(self, req, chunked=False):
        """Checkpoints a chunked request: a copy of its running state goes into a new slot
        and is inserted with the filled tokens, the tree's slots are written into the row
        where duplicates were, the lock moves to the new node; sets prefix_indices /
        cache_protected_len / last_node."""
        n = len(req.fill_ids)
        tokens = self._tokens(req.fill_ids, None, n)
        st = self._bind(req, tokens, n)
        try:
            self._tree._check(lib.kvc_mamba_radix_cache_cache_unfinished_req(
                self._tree.handle, self._fh, ctypes.addressof(st)))
        finally:
            self._tree.unbind(st)
        req.last_node = st.cache_node
        req.cache_protected_len = st.cache_protected_len
        self._row_prefix(req, n)

    def insert(self, params=None, value=None, mamba_value=None, prev_prefix_len=0, key=None):
        """insert(InsertParams(key, value, mamba_value, prev_prefix_len=0)):
        InsertResult(prefix_len, mamba_exist). The tree takes the state slot mamba_value
        for the node at the key's end unless it has one (mamba_exist: the caller keeps its
        slot); the overlapped duplicates of value are freed."""
        if params is not None and hasattr(params, "mamba_value") and hasattr(params, "value"):
            key, value, mamba_value = params.key, params.value, params.mamba_value
            prev_prefix_len = params.prev_prefix_len
        elif params is not None:
            key = params
        if value is None or mamba_value is None:
            raise _kvc.InvalidArgument(1, "insert: value (the KV slots) and mamba_value are required")
        if prev_prefix_len:
            raise _kvc.InvalidArgument(1, "insert: prev_prefix_len must be 0 (cache requests with "
                                       "cache_finished_req / cache_unfinished_req)")
        toks, extra = self._key(key)
        slots = T.tolist(T.host_i64(value))
        n = len(toks)
        if len(slots) < n:
            raise _kvc.InvalidArgument(1, "insert: %d slots for %d key tokens" % (len(slots), n))
        p, taken = self._tree.insert(list(toks), slots[:n], _slot(mamba_value), self._flow,
                                     ns=self._ns(extra))
        return InsertResult(prefix_len=p, mamba_exist=not taken)

    # --- eviction and sizes ----------------------------------------------------------------

    def evict(self, params=None, num_tokens=None, mamba_num=0):
        """EvictParams(num_tokens, mamba_num): full eviction of unlocked leaves (their
        states with them) until num_tokens, then Mamba states in LRU order until mamba_num
        (a childless node goes whole, others keep their KV).
        EvictResult(num_tokens_evicted, mamba_num_evicted)."""
        if params is not None and not isinstance(params, int):
            full, mn = params.num_tokens, getattr(params, "mamba_num", 0)
        else:
            full = params if params is not None else (num_tokens or 0)
            mn = mamba_num
        # Two library calls, as SGLang's evict_full then evict_mamba: each reports its own
        # count (the states a full eviction frees with its leaves do not count toward
        # mamba_num, the KV a Mamba eviction frees with a whole node is not counted).
        done_full = self._evict(full, 0)[0] if full else 0
        done_mamba = self._evict(0, mn)[1] if mn else 0
        return EvictResult(num_tokens_evicted=done_full, mamba_num_evicted=done_mamba)

    def _evict(self, full, mn):
        e, m = ctypes.c_int64(), ctypes.c_int64()
        st = lib.kvc_mamba_radix_cache_evict(self._tree.handle, self._fh, full, mn, ctypes.byref(e),
                                             ctypes.byref(m))
        if st not in (0, 2):  # 2: nothing evictable (SGLang: evicts what it can)
            self._tree._check(st, "evict")
        return e.value, m.value

    def evictable_size(self):
        raise NotImplementedError("use full_evictable_size() and mamba_evictable_size()")

    def protected_size(self):
        raise NotImplementedError("use full_protected_size() and mamba_protected_size()")

    def full_evictable_size(self):
        return self._tree.sizes()["evictable"]

    def mamba_evictable_size(self):
        return self._tree.sizes()["mamba_evictable"]

    def full_protected_size(self):
        return self._tree.sizes()["protected"]

    def mamba_protected_size(self):
        return self._tree.sizes()["mamba_protected"]

    def total_size(self):
        """(full tokens cached, Mamba states cached)."""
        s = self._tree.sizes()
        return s["cached"], s["mamba_cached"]

    def available_and_evictable_str(self):
        a = self.token_to_kv_pool_allocator.available_size()
        e = self.full_evictable_size()
        return ("Available full tokens: %d (full_available_size=%d + full_evictable_size=%d)\n"
                "Full LRU list evictable size: %d\n" % (a + e, a, e, e))

    def sanity_check(self):
        """The C tree's audit of both components (kvc_mamba_radix_cache_check)."""
        self._tree.check()

    def pretty_print(self):
        """Prints (and returns) SGLang's totals line (kvcache's tree has no node dump)."""
        full, states = self.total_size()
        s = "#full_tokens: %d, #mamba_num: %d" % (full, states)
        print(s)
        return s

    def reset(self):
        """Drops every node without freeing KV slots or states (the pools are cleared)."""
        self._tree.reset()
        self._root()
