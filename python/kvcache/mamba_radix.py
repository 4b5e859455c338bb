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
from ._tree_ffi import Config, Match, RadixReq, Stats, fn, handle, i32, i64, slots
from .radix import RadixCache

lib = _ffi.lib


class _MambaConfig(Structure):
    """kvc_mamba_radix_cache_config, field for field."""
    _fields_ = [("struct_size", c_size_t), ("version", c_uint32), ("max_states_per_path", c_int32),
                ("radix", Config),
                ("hybrid_req_pool", c_void_p), ("reserved_", c_uint64 * 8)]


class _Sizes(Structure):
    _fields_ = [("evictable", c_int64), ("protected_size", c_int64), ("cached", c_int64),
                ("mamba_evictable", c_int64), ("mamba_protected", c_int64), ("mamba_cached", c_int64),
                ("reserved_", c_int64 * 4)]


_P, _st = c_void_p, c_int
fn("kvc_mamba_radix_cache_create", _st, _P, POINTER(_MambaConfig), POINTER(c_void_p))
fn("kvc_mamba_radix_cache_destroy", None, _P)
fn("kvc_mamba_radix_cache_as_prefix_cache", _ffi.PrefixCache, _P)
fn("kvc_mamba_radix_cache_match_prefix", _st, _P, c_uint64, POINTER(c_int32), c_int64, POINTER(Match),
    POINTER(c_int32), POINTER(c_int64))
fn("kvc_mamba_radix_cache_match_req", _st, _P, _P, _P, POINTER(RadixReq), _P)
fn("kvc_mamba_radix_cache_insert", _st, _P, _P, c_uint64, POINTER(c_int32), POINTER(c_int64), c_int64, c_int32,
    POINTER(c_int64), POINTER(c_int))
fn("kvc_mamba_radix_cache_lock", _st, _P, _P)
fn("kvc_mamba_radix_cache_unlock", _st, _P, _P)
fn("kvc_mamba_radix_cache_evict", _st, _P, _P, c_int64, c_int64, POINTER(c_int64), POINTER(c_int64))
fn("kvc_mamba_radix_cache_reset", _st, _P)
fn("kvc_mamba_radix_cache_sizes", _st, _P, POINTER(_Sizes))
fn("kvc_mamba_radix_cache_stats", _st, _P, POINTER(Stats))
fn("kvc_mamba_radix_cache_check", _st, _P)


class MambaRadixCache(RadixCache):
    """The Mamba radix cache over a HybridReqToTokenPool's Mamba pool (page_size > 1 needs the
    pool's track buffers). num_slots: the KV allocator's size; policy: one of POLICIES
    (the full-attention eviction order; states are evicted LRU); max_states_per_path: SGLang's
    mamba_max_states_per_path, 0 for no cap."""

    _create_fn = lib.kvc_mamba_radix_cache_create
    _destroy_fn = lib.kvc_mamba_radix_cache_destroy
    _as_prefix_fn = lib.kvc_mamba_radix_cache_as_prefix_cache
    _lock_fn = lib.kvc_mamba_radix_cache_lock
    _unlock_fn = lib.kvc_mamba_radix_cache_unlock
    _reset_fn = lib.kvc_mamba_radix_cache_reset
    _stats_fn = lib.kvc_mamba_radix_cache_stats
    _check_fn = lib.kvc_mamba_radix_cache_check

    def __init__(self, ctx, hybrid_req_pool, num_slots, page_size=1, policy="lru", slru_threshold=0,
                 max_states_per_path=0):
        cfg = _MambaConfig()
        cfg.struct_size = ctypes.sizeof(cfg)
        cfg.version = lib.kvc_version_number()
        cfg.max_states_per_path = max_states_per_path
        cfg.hybrid_req_pool = hybrid_req_pool.handle
        self._hybrid = hybrid_req_pool  # borrowed by the C object: kept alive with it
        self._create(ctx, cfg, cfg.radix, num_slots, page_size, policy, slru_threshold, hybrid_req_pool)

    def match(self, req, flow=None):
        """Match + admission of a new (bound) request: prefix_len, cache_protected_len, the
        prefix slots, cache_node (locked), and the matched state copied into
        req.mamba_slot (a new slot when it has none). Returns the matched length."""
        entry = self._reqs.get(ctypes.addressof(req))
        if entry is None:
            raise ValueError("bind() the request's tokens first")
        self._check(lib.kvc_mamba_radix_cache_match_req(self.handle, handle(flow), byref(req), byref(entry[0]),
                                                        None), "kvc_mamba_radix_cache_match_req")
        req._adopt_prefix(entry)
        return req.prefix_len

    def branching_len(self, req):
        """SGLang mamba_branching_seqlen of the request's last match (0 = none)."""
        return self._reqs[ctypes.addressof(req)][0].mamba_branching_len

    def match_prefix(self, tokens, ns=0):
        """(matched length, list of slots, node handle, state slot, full-attention length)."""
        arr, n = i32(tokens)
        m, s, full = Match(), c_int32(), c_int64()
        self._check(lib.kvc_mamba_radix_cache_match_prefix(self.handle, ns, arr, n, byref(m), byref(s), byref(full)))
        return m.len, slots(m), m.node, s.value, full.value

    def insert(self, tokens, slots, mamba_slot, flow=None, ns=0):
        """Insert with a donated state: (tokens already present, whether the tree took it)."""
        t, n = i32(tokens)
        sl, n2 = i64(slots)
        if n2 != n:
            raise ValueError("tokens and slots differ in length")
        p, taken = c_int64(), c_int()
        self._check(lib.kvc_mamba_radix_cache_insert(self.handle, handle(flow), ns, t, sl, n, mamba_slot, byref(p),
                                                     byref(taken)))
        return p.value, bool(taken.value)

    def evict(self, num_tokens, flow, mamba_num=0):
        """SGLang evict(EvictParams(num_tokens, mamba_num)): (tokens, states) freed."""
        e, m = c_int64(), c_int64()
        self._check(lib.kvc_mamba_radix_cache_evict(self.handle, handle(flow), num_tokens, mamba_num, byref(e),
                                                    byref(m)))
        return e.value, m.value

    def sizes(self):
        s = _Sizes()
        self._check(lib.kvc_mamba_radix_cache_sizes(self.handle, byref(s)))
        return {"evictable": s.evictable, "protected": s.protected_size, "cached": s.cached,
                "mamba_evictable": s.mamba_evictable, "mamba_protected": s.mamba_protected,
                "mamba_cached": s.mamba_cached}

    def dump(self):
        raise NotImplementedError("kvc_mamba_radix_cache has no dump")
