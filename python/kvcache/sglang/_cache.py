"""ChunkCache and RadixCache with SGLang's interfaces (BasePrefixCache subset)."""
import array
import ctypes
from dataclasses import dataclass
from typing import Any, Optional

import kvcache as _kvc
from kvcache import radix as _radix

from . import _ops as T
from ._ops import c_int, c_void_p, proto

lib = T.lib
proto("kvc_radix_cache_cache_finished_req", c_int, c_void_p, c_void_p, c_void_p, c_int)
proto("kvc_radix_cache_cache_unfinished_req", c_int, c_void_p, c_void_p, c_void_p)
# Our own function object (raw addresses for the tokens; the binding's has POINTER types).
_match_fn = getattr(ctypes.CDLL(lib._name), "kvc_radix_cache_match_prefix")
_match_fn.restype = c_int
_match_fn.argtypes = [c_void_p, ctypes.c_uint64, c_void_p, ctypes.c_int64, c_void_p]


class _MatchRaw(ctypes.Structure):
    """kvc_radix_match with the slots as a raw address."""
    _fields_ = [("len", ctypes.c_int64), ("slots", c_void_p), ("node", c_void_p),
                ("copied", ctypes.c_int32), ("reserved_i32_", ctypes.c_int32)]


@dataclass
class EvictParams:
    num_tokens: int = 0
    swa_num_tokens: int = 0
    mamba_num: int = 0


@dataclass
class EvictResult:
    num_tokens_evicted: int = 0
    swa_num_tokens_evicted: int = 0
    mamba_num_evicted: int = 0


@dataclass
class MatchResult:
    device_indices: Any
    last_device_node: Any
    last_host_node: Any
    host_hit_length: int = 0
    # MambaRadixCache's results also carry mamba_branching_seqlen (set per instance, so
    # that RadixCache's results, which _kvcfast builds, keep these four fields).


@dataclass
class RadixKey:
    token_ids: list
    extra_key: Optional[str] = None


@dataclass
class MatchPrefixParams:
    key: Any
    cow_mamba: bool = False  # MambaRadixCache: copy the matched state into req's own slot
    req: Any = None


@dataclass
class IncLockRefResult:
    swa_uuid_for_lock: Optional[int] = None


@dataclass
class DecLockRefParams:
    swa_uuid_for_lock: Optional[int] = None


@dataclass
class DecLockRefResult:
    pass


@dataclass
class InsertParams:
    key: Any
    value: Any = None
    prev_prefix_len: int = 0
    swa_evicted_seqlen: int = 0
    mamba_value: Any = None
    chunked: bool = False


@dataclass
class InsertResult:
    prefix_len: int = 0
    mamba_exist: bool = False


@dataclass
class CacheInitParams:
    """The fields of SGLang's CacheInitParams these caches read."""
    req_to_token_pool: Any
    token_to_kv_pool_allocator: Any
    page_size: int = 1
    disable: bool = False
    eviction_policy: str = "lru"
    sliding_window_size: Optional[int] = None
    is_eagle: bool = False
    enable_mamba_extra_buffer: bool = False
    # MambaRadixCache: SGLang's mamba_cache_chunk_size(), which SGLang reads from its server
    # args (max(the model's mamba_chunk_size, else FLA's 64, page_size)); None: that
    # default with FLA's 64.
    mamba_cache_chunk_size: Optional[int] = None


def _pop_committed(req):
    f = getattr(req, "pop_committed_kv_cache", None)
    return f() if f is not None else req.kv_committed_len


def _tokens_i32(a, b, n):
    """(a + b)[:n] as array('i') (the radix binding copies it in one memmove): converted in
    C by _kvcfast when a and b are lists (a 4096-token request: ~15 us instead of the
    ~450 us of a list and a ctypes array built element by element)."""
    fast = T.fast
    if fast is not None and type(a) is list and (b is None or type(b) is list):
        m = min(n, len(a) + (len(b) if b is not None else 0))
        out = array.array("i", bytes(4 * m))
        fast.fill_i32(out, a, b, m)
        return out
    if b is None:
        return array.array("i", list(a)[:n])
    return array.array("i", (list(a) + list(b))[:n])


def _named_args(args, kwargs, names):
    """A cache constructor's arguments by name: from CacheInitParams (one argument with a
    token_to_kv_pool_allocator: its fields, None where it has none) or from SGLang's older
    positional / keyword form (None where not given)."""
    if len(args) == 1 and not kwargs and hasattr(args[0], "token_to_kv_pool_allocator"):
        p = args[0]
        return {n: getattr(p, n, None) for n in names}
    vals = dict(zip(names, args))
    vals.update({k: v for k, v in kwargs.items() if k in names})
    return {n: vals.get(n) for n in names}


_RADIX_NAMES = ("req_to_token_pool", "token_to_kv_pool_allocator", "page_size", "disable",
                "eviction_policy")


def _init_args(args, kwargs):
    """(pool, allocator, page_size, disable, eviction_policy) of ChunkCache / RadixCache."""
    v = _named_args(args, kwargs, _RADIX_NAMES)
    ps = v["page_size"]
    return (v["req_to_token_pool"], v["token_to_kv_pool_allocator"], 1 if ps is None else ps,
            bool(v["disable"]), v["eviction_policy"] or "lru")


class _PrefixCacheBase:
    def _setup(self, req_to_token_pool, allocator, page_size):
        self.req_to_token_pool = req_to_token_pool
        self.token_to_kv_pool_allocator = allocator
        self.page_size = page_size
        self.device = req_to_token_pool.device
        self._empty = T.empty(0, T.I64, self.device)

    def is_chunk_cache(self):
        return False

    def supports_mamba(self):
        return False

    def supports_swa(self):
        return False

    def pretty_print(self):
        return ""

    def available_and_evictable_str(self):
        a = self.token_to_kv_pool_allocator.available_size()
        e = self.evictable_size()
        return "Available tokens: %d + evictable tokens: %d = %d\n" % (a, e, a + e)

    def _row_prefix(self, req, n):
        """req.prefix_indices = row[0:n) (a device tensor, host copy remembered: kvcache
        knows the row holds it, so the next extend does not rewrite it)."""
        h = self.req_to_token_pool.row_host(req.req_pool_idx, 0, n)
        dev = T.to_device(h, self.device) if T.is_cuda(self.device) else h
        req.prefix_indices = dev
        req._kvc_prefix = (dev, None)


class ChunkCache(_PrefixCacheBase):
    """SGLang ChunkCache (no prefix reuse): a finished request's committed KV goes back to
    the allocator, an unfinished (chunked) one keeps its row as its prefix."""

    def __init__(self, *args, **kwargs):
        pool, alloc, ps, _, _ = _init_args(args, kwargs)
        self._setup(pool, alloc, ps)

    def is_chunk_cache(self):
        return True

    def reset(self):
        pass

    def match_prefix(self, params=None, **kwargs):
        return MatchResult(device_indices=self._empty, last_device_node=None,
                           last_host_node=None)

    def cache_finished_req(self, req, is_insert: bool = True):
        committed = _pop_committed(req)
        if committed:
            self.token_to_kv_pool_allocator._free_row(
                self.req_to_token_pool, req.req_pool_idx, 0, committed,
                getattr(req, "swa_evicted_seqlen", 0) or 0)

    def cache_unfinished_req(self, req, chunked=False):
        self._row_prefix(req, len(req.fill_ids))

    def evict(self, params=None):
        return EvictResult()

    def inc_lock_ref(self, node):
        return 0

    def dec_lock_ref(self, node, swa_uuid_for_lock=None):
        return 0

    def evictable_size(self):
        return 0

    def protected_size(self):
        return 0

    def total_size(self):
        return 0


class _TreeCache(_PrefixCacheBase):
    """What RadixCache, SWARadixCache and MambaRadixCache share over their C trees: the
    tree, the flow its frees go through, the reused ReqState and match struct, SGLang's
    key and namespace, the token scratch, the request binding and the two request-caching
    calls. A subclass sets _finished_fn / _unfinished_fn (its tree's
    kvc_*_cache_finished_req / _unfinished_req) and _priority (whether the binding
    carries req.priority), extends _bind with its own ReqState fields, and adds what the
    request keeps after a call."""

    _finished_fn = _unfinished_fn = None
    _priority = False

    def _attach(self, pool, alloc, page_size, tree, flow):
        """The constructor's common tail, over the tree and flow the subclass built."""
        self._setup(pool, alloc, page_size)
        self._tree = tree
        self._flow = flow
        self._fh = flow.handle
        self._th = tree.handle
        self._state = _kvc.ReqState()
        self._m = _MatchRaw()
        self._mref = ctypes.byref(self._m)
        self._maddr = ctypes.addressof(self._m)
        self._cuda = T.is_cuda(self.device)
        empty = T.host_empty(0)
        self._empty_match = T.to_device(empty, self.device) if self._cuda else empty

    @staticmethod
    def _key(params):
        key = getattr(params, "key", params)
        toks = getattr(key, "token_ids", key)
        extra = getattr(key, "extra_key", None)
        return toks, extra

    def _ns(self, extra):
        if extra is None:
            return 0
        return hash(extra) & 0xFFFFFFFFFFFFFFFF or 1

    _tok_cap = 0
    _tok_buf = _tok_ptr = None

    def _tokens(self, a, b, n):
        """(a + b)[:n] for _bind: with _kvcfast and lists, converted into the cache's reused
        int32 scratch and given as their count (the bind then copies nothing: a 4096-token
        release saves about 6 us of buffers), else an array('i') (_tokens_i32)."""
        fast = T.fast
        if fast is None or type(a) is not list or (b is not None and type(b) is not list):
            return _tokens_i32(a, b, n)
        m = max(min(n, len(a) + (len(b) if b is not None else 0)), 0)
        if self._tok_cap < m:
            cap = max(m, 2 * self._tok_cap, 1024)
            self._tok_buf = (ctypes.c_int32 * cap)()
            self._tok_ptr = ctypes.cast(self._tok_buf, ctypes.POINTER(ctypes.c_int32))
            self._tok_cap = cap
        if m:
            fast.fill_i32(self._tok_buf, a, b, m)
        return m

    _match_fn = None  # the tree's kvc_*_match_prefix with raw addresses
    _match_out = ()  # its output arguments after the kvc_radix_match (a hybrid tree's)

    def _match(self, toks, extra):
        """(length, address of the slots, node) of a match (no lock). The key's token_ids
        may be a list, an array('i'), or an int32 NumPy array / torch CPU tensor (read in
        place)."""
        if isinstance(toks, list):
            keep = array.array("i", toks)
            p, n = keep.buffer_info()
        elif isinstance(toks, array.array) and toks.typecode == "i":
            p, n = toks.buffer_info()
        else:
            keep = T.host_i32(toks)
            p, n = T.ptr(keep), T.numel(keep)
        m = self._m
        self._tree._check(self._match_fn(self._tree.handle, self._ns(extra), p, n, self._mref,
                                         *self._match_out))
        return m.len, m.slots, m.node

    def _bind(self, req, tokens, committed):
        """Binds the reused ReqState for one cache call (unbind after it): tokens an
        array('i') or, from _tokens, the count of those in the scratch. Returns the state
        and the tree's kvc_radix_req for it."""
        st = self._state
        ctypes.memset(ctypes.addressof(st), 0, ctypes.sizeof(st))
        st.req_row = req.req_pool_idx
        st.seq_len = committed
        st.kv_committed_len = committed
        st.kv_allocated_len = committed
        st.cache_protected_len = getattr(req, "cache_protected_len", 0) or 0
        st.cache_node = req.last_node
        ns = self._ns(getattr(req, "extra_key", None))
        priority = (getattr(req, "priority", 0) or 0) if self._priority else 0
        if type(tokens) is int:
            rr = self._tree._bind_borrowed(st, self._tok_ptr, self._tok_buf, tokens, ns, priority)
        else:
            rr = self._tree.bind(st, tokens, ns=ns, priority=priority)
        return st, rr

    def cache_finished_req(self, req, is_insert: bool = True):
        """Inserts [0, committed) floored to pages (duplicates and the unaligned tail
        freed; without is_insert frees [cache_protected_len, committed)), unlocks."""
        committed = _pop_committed(req)
        tokens = self._tokens(req.origin_input_ids, req.output_ids, committed)
        st, rr = self._bind(req, tokens, committed)
        try:
            self._tree._check(self._finished_fn(self._tree.handle, self._fh, ctypes.addressof(st),
                                                1 if is_insert else 0))
        finally:
            self._tree.unbind(st)
        req.last_node = None

    def cache_unfinished_req(self, req, chunked=False):
        """Inserts the filled tokens (page-floored), moves the lock to the new node and
        sets prefix_indices / cache_protected_len / last_node."""
        n = len(req.fill_ids)
        tokens = self._tokens(req.fill_ids, None, n)
        st, rr = self._bind(req, tokens, n)
        try:
            self._tree._check(self._unfinished_fn(self._tree.handle, self._fh, ctypes.addressof(st)))
        finally:
            self._tree.unbind(st)
        req.last_node = st.cache_node
        req.cache_protected_len = st.cache_protected_len
        self._row_prefix(req, n)


class _HybridTreeCache(_TreeCache):
    """What SWARadixCache and MambaRadixCache add alike: two components (full attention and
    _second, "swa" or "mamba"), so sizes come per component; a match that the subclass's
    C function fills (_match_fn, _match_out its extra output arguments); the root handle;
    SGLang's EvictParams; the refused single-component sizes."""

    _second = ""
    _total_name = ""  # the other component's count in SGLang's pretty_print line

    def _root(self):
        """root_node: the tree's root handle (what a miss returns)."""
        self._tree._check(self._match_fn(self._tree.handle, 0, None, 0, self._mref, *self._match_out))
        self.root_node = self._m.node

    def match_prefix(self, params=None, key=None, **kwargs):
        """MatchResult(device_indices = int64 slots of the longest valid prefix (page-floored),
        last_device_node = its node). No lock is taken. The key's token_ids may be a list,
        an array('i'), or an int32 NumPy array / torch CPU tensor."""
        k = params if params is not None else key
        k = getattr(k, "key", k)
        n, addr, node = self._match(getattr(k, "token_ids", k), getattr(k, "extra_key", None))
        if n == 0:
            return MatchResult(self._empty_match, node, node)
        host = T.host_from_bytes(T.copy_bytes(addr, 8 * n))
        dev = T.to_device(host, self.device) if self._cuda else host
        return MatchResult(dev, node, node)

    @staticmethod
    def _evict_counts(params, num_tokens, other, name):
        """(full tokens, the other component's count) of evict(EvictParams) or
        evict(num_tokens, other); name: EvictParams' field for the other one."""
        if params is not None and not isinstance(params, int):
            return params.num_tokens, getattr(params, name, 0)
        return (params if params is not None else (num_tokens or 0)), other

    def _evict_status(self, st):
        if st not in (0, 2):  # 2: nothing evictable (SGLang: evicts what it can)
            self._tree._check(st, "evict")

    def evictable_size(self):
        raise NotImplementedError("use full_evictable_size() and %s_evictable_size()" % self._second)

    def protected_size(self):
        raise NotImplementedError("use full_protected_size() and %s_protected_size()" % self._second)

    def full_evictable_size(self):
        return self._tree.sizes()["evictable"]

    def full_protected_size(self):
        return self._tree.sizes()["protected"]

    def total_size(self):
        """(full tokens cached, the other component's cached count)."""
        s = self._tree.sizes()
        return s["cached"], s[self._second + "_cached"]

    def sanity_check(self):
        """The C tree's audit of both components (kvc_*_radix_cache_check)."""
        self._tree.check()

    def pretty_print(self):
        """Prints (and returns) the totals line of SGLang's pretty_print (kvcache's hybrid
        trees have no node dump)."""
        full, other = self.total_size()
        s = "#full_tokens: %d, #%s: %d" % (full, self._total_name, other)
        print(s)
        return s

    def reset(self):
        """Drops every node without freeing slots or states (the pools are being cleared)."""
        self._tree.reset()
        self._root()


_FAST_MATCH = getattr(T.fast, "match_prefix", None) if T.fast is not None else None


class RadixCache(_TreeCache):
    """SGLang RadixCache (seed interface: match_prefix, cache_finished_req,
    cache_unfinished_req, evict, inc/dec_lock_ref) over kvcache's C radix tree. Token
    allocators (page_size 1) and paged allocators; nodes are opaque handles.

    At page 1 over a TokenToKVPoolAllocator the fresh tree is bound to the allocator
    (kvc_radix_cache_bind_allocator, see bind_token_allocator): its evictions free in one
    checked pass; matches, victims and the free order are the unbound tree's."""

    # Bind a page-1 tree to its 'token' allocator (False: the unbound tree, as before;
    # the tests build unbound twins with it). Binding also makes every other free of a
    # slot the tree holds, and clear() / restore_state() under it, raise Misuse (SGLang
    # would corrupt its free list there); SGLang's valid call sequences never do that.
    bind_token_allocator = True

    def __init__(self, *args, **kwargs):
        pool, alloc, ps, disable, policy = _init_args(args, kwargs)
        if disable:
            raise NotImplementedError("disable=True: use ChunkCache")
        if not hasattr(alloc, "_a") or not isinstance(alloc._a, _kvc.Allocator):
            raise NotImplementedError("RadixCache over an SWA allocator: use SWARadixCache "
                                      "(SGLang's SWA radix cache) or ChunkCache")
        ctx = pool._ctx
        tree = _radix.RadixCache(ctx, alloc.size, ps, policy)
        self.bound = self.bind_token_allocator and ps == 1 and alloc._a.kind == "token" \
            and self._bind_tree(tree, alloc._a)
        self._attach(pool, alloc, ps, tree, _kvc.Flow(ctx, pool._pool, alloc._a, cache=tree))
        self.root_node = None
        if T.fast is not None:
            self._match = self._match_fast
        self._same = T.fast.memeq if T.fast is not None else self._same_ctypes
        self._kept = getattr(T.fast, "radix_match_kept", None) if T.fast is not None else None
        self._results = {}
        # _kvcfast.match_prefix: the list-key path, MatchResult included, in one C call; it
        # builds the dataclass as its __init__ does (which a __post_init__ would change)
        # and hashes extra_key as _ns does (which a subclass may override).
        fast_ok = _FAST_MATCH is not None and not hasattr(MatchResult, "__post_init__") \
            and type(self)._ns is RadixCache._ns
        self._mc = (self._th, self._maddr, self._results, self._empty_match, MatchResult) \
            if fast_ok else None
        self._result_tokens = 0

    @staticmethod
    def _bind_tree(tree, allocator):
        """Binds the fresh tree to allocator; False (the tree stays unbound, as before) when
        the allocator is bound to another tree already (two caches over one allocator: one
        that was dropped but not yet collected, or a second one on purpose). The tree
        holds the allocator until it is destroyed, so the allocator outlives the binding."""
        try:
            tree.bind_allocator(allocator)
        except _kvc.Misuse:
            return False
        return True

    # --- matching ---------------------------------------------------------------------

    def match_prefix(self, params=None, key=None, **kwargs):
        """MatchResult(device_indices = int64 slots of the longest cached prefix (page-
        floored), last_device_node = its node). The key's token_ids may be a list, an
        array.array('i'), or an int32 NumPy array / torch CPU tensor (read in place)."""
        k = params if params is not None else key
        mc = self._mc
        if mc is not None:
            r = _FAST_MATCH(mc, k)
            if type(r) is MatchResult:  # kept, or a miss
                return r
            if r is not None:  # a failed match (status), or a new result to build
                if type(r) is int:
                    self._tree._check(r)
                n, addr, node = r
                return MatchResult(self._new_result(node, n, addr), node, node)
        k = getattr(k, "key", k)  # self._key(), inlined: this is a per-request call
        toks = getattr(k, "token_ids", k)
        if self._kept is not None and type(toks) is list:
            # SGLang's list key: the match and the kept-result check in one C call.
            extra = getattr(k, "extra_key", None)
            r = self._kept(self._th, 0 if extra is None else self._ns(extra), toks,
                           self._maddr, self._results)
            if type(r) is int:
                self._tree._check(r)
            n, addr, node, kept = r
            if kept is not None:
                return MatchResult(kept, node, node)
            if n == 0:
                return MatchResult(self._empty_match, node, node)
            return MatchResult(self._new_result(node, n, addr), node, node)
        n, addr, node = self._match(toks, getattr(k, "extra_key", None))
        if n == 0:  # a miss: one shared empty result (no copy, no device tensor built)
            return MatchResult(self._empty_match, node, node)
        ent = self._results.get((node, n))
        if ent is not None and self._same(addr, ent[0], 8 * n):
            return MatchResult(ent[1], node, node)
        return MatchResult(self._new_result(node, n, addr), node, node)

    # Match results, one per (node, length) matched: the tensor built for a match is
    # handed out again while the tree still holds the same slots there, which is checked
    # on every hit by comparing the tree's slots with the host copy the tensor was built
    # from (one memcmp; a node freed and its address reused, or values changed, miss).
    # So a hit costs no tensor creation and, on CUDA, no device allocation or copy. The
    # tensor is shared by every request that matched the same path: SGLang's callers only
    # read device_indices (it becomes req.prefix_indices, replaced, never written in
    # place); write into it only after clone(). At most _RESULT_TOKENS tokens are kept
    # (then the table starts afresh).
    _RESULT_TOKENS = 1 << 20

    def _same_ctypes(self, addr, buf, nbytes):
        return ctypes.string_at(addr, nbytes) == buf

    def _new_result(self, node, n, addr):
        buf = T.copy_bytes(addr, 8 * n)
        host = T.host_from_bytes(buf)
        dev = T.to_device(host, self.device) if self._cuda else host
        if self._result_tokens + n > self._RESULT_TOKENS:
            self._results.clear()
            self._result_tokens = 0
        self._results[(node, n)] = (buf, dev)
        self._result_tokens += n
        return dev

    def clear_match_results(self):
        """Drops the kept match results (their memory goes when no request holds them)."""
        self._results.clear()
        self._result_tokens = 0

    def _match_fast(self, toks, extra):
        """_match through _kvcfast: a list is converted in C (no array('i') built)."""
        ns = 0 if extra is None else self._ns(extra)
        fast = T.fast
        if type(toks) is list:
            st = fast.radix_match_list(self._th, ns, toks, self._maddr)
        elif isinstance(toks, array.array) and toks.typecode == "i":
            p, n = toks.buffer_info()
            st = fast.radix_match(self._th, ns, p, n, self._maddr)
        else:
            keep = T.host_i32(toks)
            st = fast.radix_match(self._th, ns, T.ptr(keep), T.numel(keep), self._maddr)
        if st:
            self._tree._check(st)
        m = self._m
        return m.len, m.slots, m.node

    def inc_lock_ref(self, node):
        self._tree.lock(node)
        return 0

    def dec_lock_ref(self, node, swa_uuid_for_lock=None):
        self._tree.unlock(node)
        return 0

    # --- caching requests ---------------------------------------------------------------

    _match_fn = _match_fn
    _finished_fn = lib.kvc_radix_cache_cache_finished_req
    _unfinished_fn = lib.kvc_radix_cache_cache_unfinished_req
    _priority = True

    def insert(self, key, value=None, priority=0):
        toks, extra = self._key(key)
        return self._tree.insert(toks, T.tolist(T.host_i64(value)), self._flow,
                                 ns=self._ns(extra), priority=priority)

    # --- eviction and sizes -------------------------------------------------------------

    def evict(self, params=None, num_tokens=None):
        n = params if isinstance(params, int) else \
            (num_tokens if params is None else params.num_tokens)
        if not n:
            return EvictResult()
        e = ctypes.c_int64()
        st = lib.kvc_radix_cache_evict(self._tree.handle, self._fh, n, ctypes.byref(e))
        if st not in (0, 2):  # 2: fewer evictable tokens than asked (SGLang: evicts what it can)
            self._tree._check(st, "evict")
        return EvictResult(num_tokens_evicted=e.value)

    def evictable_size(self):
        return self._tree.sizes()["evictable"]

    def protected_size(self):
        return self._tree.sizes()["protected"]

    def total_size(self):
        return self._tree.sizes()["cached"]

    def reset(self):
        self._tree.reset()
        self.clear_match_results()

    def pretty_print(self):
        s = self._tree.dump()
        print(s)
        return s
