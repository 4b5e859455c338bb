"""kvcache.mamba_radix: SGLang's unified cache Mamba component (kvc_mamba_radix_cache) as a
Flow's cache for hybrid (Mamba) models, host backend.

The radix tree of kvcache.radix with one Mamba state slot per node: a match ends at the
deepest node with a state and copies it into the request's own slot (one launch), a
finished request donates its state (its running slot, or with track buffers its newest
fitting checkpoint, ``ReqState.mamba_track_seqlen``), and eviction takes a token count and
a state count. Use as ``Flow(..., hybrid_req_pool=hp, cache=MambaRadixCache(ctx, hp, ...))``
and ``bind`` each request's token ids before the flow calls the cache for it.
"""
import ctypes
from ctypes import POINTER, Structure, byref, c_int, c_int32, c_int64, c_size_t, c_uint32, c_uint64, c_void_p

from . import _ffi
from .radix import (POLICIES, RadixCache, RadixReq, _Config, _Match, _Stats, _handle, _hold, _i32, _i64,
                    _release, _REQ_OF)

lib = _ffi.lib


class _MambaConfig(Structure):
    """kvc_mamba_radix_cache_config, field for field."""
    _fields_ = [("struct_size", c_size_t), ("version", c_uint32), ("max_states_per_path", c_int32),
                ("radix", _Config),
                ("hybrid_req_pool", c_void_p), ("reserved_", c_uint64 * 8)]


class _Sizes(Structure):
    _fields_ = [("evictable", c_int64), ("protected_size", c_int64), ("cached", c_int64),
                ("mamba_evictable", c_int64), ("mamba_protected", c_int64), ("mamba_cached", c_int64),
                ("reserved_", c_int64 * 4)]


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_P, _st = c_void_p, c_int
_fn("kvc_mamba_radix_cache_create", _st, _P, POINTER(_MambaConfig), POINTER(c_void_p))
_fn("kvc_mamba_radix_cache_destroy", None, _P)
_fn("kvc_mamba_radix_cache_as_prefix_cache", _ffi.PrefixCache, _P)
_fn("kvc_mamba_radix_cache_match_prefix", _st, _P, c_uint64, POINTER(c_int32), c_int64, POINTER(_Match),
    POINTER(c_int32), POINTER(c_int64))
_fn("kvc_mamba_radix_cache_match_req", _st, _P, _P, _P, POINTER(RadixReq), _P)
_fn("kvc_mamba_radix_cache_insert", _st, _P, _P, c_uint64, POINTER(c_int32), POINTER(c_int64), c_int64, c_int32,
    POINTER(c_int64), POINTER(c_int))
_fn("kvc_mamba_radix_cache_lock", _st, _P, _P)
_fn("kvc_mamba_radix_cache_unlock", _st, _P, _P)
_fn("kvc_mamba_radix_cache_evict", _st, _P, _P, c_int64, c_int64, POINTER(c_int64), POINTER(c_int64))
_fn("kvc_mamba_radix_cache_reset", _st, _P)
_fn("kvc_mamba_radix_cache_sizes", _st, _P, POINTER(_Sizes))
_fn("kvc_mamba_radix_cache_stats", _st, _P, POINTER(_Stats))
_fn("kvc_mamba_radix_cache_check", _st, _P)


class MambaRadixCache(RadixCache):
    """The Mamba radix cache over a HybridReqToTokenPool's Mamba pool (page_size > 1 needs the
    pool's track buffers). num_slots: the KV allocator's size; policy: one of POLICIES
    (the full-attention eviction order; states are evicted LRU); max_states_per_path: SGLang's
    mamba_max_states_per_path, 0 for no cap."""

    def __init__(self, ctx, hybrid_req_pool, num_slots, page_size=1, policy="lru", slru_threshold=0,
                 max_states_per_path=0):
        if policy not in POLICIES:
            raise ValueError("policy must be one of %s" % ", ".join(POLICIES))
        self._ctx = ctx
        self._reqs = {}
        self._req_of_cb = _REQ_OF(self._req_of)
        cfg = _MambaConfig()
        cfg.struct_size = ctypes.sizeof(cfg)
        cfg.version = lib.kvc_version_number()
        cfg.max_states_per_path = max_states_per_path
        cfg.radix.struct_size = ctypes.sizeof(_Config)
        cfg.radix.version = cfg.version
        cfg.radix.page_size = page_size
        cfg.radix.policy = POLICIES[policy]
        cfg.radix.slru_threshold = slru_threshold
        cfg.radix.num_slots = num_slots
        cfg.radix.req_of = self._req_of_cb
        cfg.hybrid_req_pool = hybrid_req_pool.handle
        out = c_void_p()
        ctx._check(lib.kvc_mamba_radix_cache_create(ctx.handle, byref(cfg), byref(out)),
                   "kvc_mamba_radix_cache_create")
        self._ptr = out.value
        self._hybrid = hybrid_req_pool  # borrowed by the C object: kept alive with it
        self.page_size = page_size
        self._users = 0
        self._closing = False
        self._deps = _hold(ctx, hybrid_req_pool)

    def _prefix_cache(self):
        return lib.kvc_mamba_radix_cache_as_prefix_cache(self.handle)

    def _maybe_destroy(self):
        if self._closing and self._users == 0 and self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            lib.kvc_mamba_radix_cache_destroy(ptr)
            _release(self)

    def match(self, req, flow=None):
        """Match + admission of a new (bound) request: prefix_len, cache_protected_len, the
        prefix slots, cache_node (locked), and the matched state copied into
        req.mamba_slot (a new slot when it has none). Returns the matched length."""
        entry = self._reqs.get(ctypes.addressof(req))
        if entry is None:
            raise ValueError("bind() the request's tokens first")
        self._check(lib.kvc_mamba_radix_cache_match_req(self.handle, _handle(flow), byref(req), byref(entry[0]),
                                                        None), "kvc_mamba_radix_cache_match_req")
        req._adopt_prefix(entry)
        return req.prefix_len

    def branching_len(self, req):
        """SGLang mamba_branching_seqlen of the request's last match (0 = none)."""
        return self._reqs[ctypes.addressof(req)][0].mamba_branching_len

    def match_prefix(self, tokens, ns=0):
        """(matched length, list of slots, node handle, state slot, full-attention length)."""
        arr, n = _i32(tokens)
        m, s, full = _Match(), c_int32(), c_int64()
        self._check(lib.kvc_mamba_radix_cache_match_prefix(self.handle, ns, arr, n, byref(m), byref(s), byref(full)))
        return m.len, [m.slots[i] for i in range(m.len)], m.node, s.value, full.value

    def insert(self, tokens, slots, mamba_slot, flow=None, ns=0):
        """Insert with a donated state: (tokens already present, whether the tree took it)."""
        t, n = _i32(tokens)
        sl, n2 = _i64(slots)
        if n2 != n:
            raise ValueError("tokens and slots differ in length")
        p, taken = c_int64(), c_int()
        self._check(lib.kvc_mamba_radix_cache_insert(self.handle, _handle(flow), ns, t, sl, n, mamba_slot, byref(p),
                                                     byref(taken)))
        return p.value, bool(taken.value)

    def lock(self, node):
        self._check(lib.kvc_mamba_radix_cache_lock(self.handle, node))

    def unlock(self, node):
        self._check(lib.kvc_mamba_radix_cache_unlock(self.handle, node))

    def evict(self, num_tokens, flow, mamba_num=0):
        """SGLang evict(EvictParams(num_tokens, mamba_num)): (tokens, states) freed."""
        e, m = c_int64(), c_int64()
        self._check(lib.kvc_mamba_radix_cache_evict(self.handle, _handle(flow), num_tokens, mamba_num, byref(e),
                                                    byref(m)))
        return e.value, m.value

    def reset(self):
        self._check(lib.kvc_mamba_radix_cache_reset(self.handle))

    def sizes(self):
        s = _Sizes()
        self._check(lib.kvc_mamba_radix_cache_sizes(self.handle, byref(s)))
        return {"evictable": s.evictable, "protected": s.protected_size, "cached": s.cached,
                "mamba_evictable": s.mamba_evictable, "mamba_protected": s.mamba_protected,
                "mamba_cached": s.mamba_cached}

    def stats(self):
        s = _Stats()
        self._check(lib.kvc_mamba_radix_cache_stats(self.handle, byref(s)))
        return {"nodes": s.nodes, "leaves": s.leaves, "cached_tokens": s.cached_tokens, "bytes": s.bytes}

    def dump(self):
        raise NotImplementedError("kvc_mamba_radix_cache has no dump")

    def check(self):
        self._check(lib.kvc_mamba_radix_cache_check(self.handle))
