"""kvcache.swa_radix: SGLang's SWA radix cache (kvc_swa_radix_cache) as a Flow's cache for
models with sliding-window attention layers, host backend.

The radix tree of kvcache.radix with an SWA side on every node: a node's SWA KV is live,
or the node is a tombstone (its full slots cached, their SWA peers released). A match is
valid only where at least sliding_window live SWA tokens follow the last tombstone on
its path (a path without a tombstone is valid everywhere); the part of an inserted leaf
below the request's swa_evicted_seqlen becomes a tombstone; a lock pins the full side of
the whole path and the SWA side of the last window only, and the SWA part can be
released early; eviction takes a full and an SWA token count. Use as
``Flow(ctx, req_pool, swa_allocator, sliding_window=W, cache=SWARadixCache(ctx, ...))``
and ``bind`` each request's token ids before the flow calls the cache for it.

Everything here is host-only; the frees go through the flow's SWA allocator.
"""
import ctypes
from ctypes import POINTER, Structure, byref, c_int, c_int32, c_int64, c_size_t, c_uint32, c_uint64, c_void_p

from . import _ffi
from ._tree_ffi import FREE_FN, Config, Match, RadixReq, Stats, fn, handle, i32, i64, slots
from .radix import RadixCache

__all__ = ["SWARadixCache", "KINDS"]

lib = _ffi.lib

# kvc_swa_radix_kind: which kind of SWA allocator the cache serves.
KINDS = {"hybrid": 0, "pure": 1, "ring": 2}


class _SwaConfig(Structure):
    """kvc_swa_radix_cache_config, field for field."""
    _fields_ = [("struct_size", c_size_t), ("version", c_uint32), ("sliding_window", c_int32),
                ("radix", Config), ("free_swa_slots", FREE_FN), ("free_swa_user", c_void_p),
                ("kind", c_int32), ("flags", c_uint32), ("swa_allocator", c_void_p),
                ("swa_stream", c_void_p), ("reserved_", c_uint64 * 5)]


class _Sizes(Structure):
    """kvc_swa_radix_sizes."""
    _fields_ = [("evictable", c_int64), ("protected_size", c_int64), ("cached", c_int64),
                ("swa_evictable", c_int64), ("swa_protected", c_int64), ("swa_cached", c_int64),
                ("reserved_", c_int64 * 4)]


_P, _st = c_void_p, c_int
fn("kvc_swa_radix_cache_create", _st, _P, POINTER(_SwaConfig), POINTER(c_void_p))
fn("kvc_swa_radix_cache_destroy", None, _P)
fn("kvc_swa_radix_cache_as_prefix_cache", _ffi.PrefixCache, _P)
fn("kvc_swa_radix_cache_match_prefix", _st, _P, c_uint64, POINTER(c_int32), c_int64, POINTER(Match))
fn("kvc_swa_radix_cache_match_req", _st, _P, _P, POINTER(RadixReq))
fn("kvc_swa_radix_cache_insert", _st, _P, _P, c_uint64, POINTER(c_int32), POINTER(c_int64), c_int64, c_int64,
    POINTER(c_int64))
fn("kvc_swa_radix_cache_cache_finished_req", _st, _P, _P, _P, c_int)
fn("kvc_swa_radix_cache_cache_unfinished_req", _st, _P, _P, _P)
fn("kvc_swa_radix_cache_lock", _st, _P, _P, POINTER(c_uint64))
fn("kvc_swa_radix_cache_unlock_swa", _st, _P, _P, POINTER(c_uint64))
fn("kvc_swa_radix_cache_unlock", _st, _P, _P, c_uint64)
fn("kvc_swa_radix_cache_evict", _st, _P, _P, c_int64, c_int64, POINTER(c_int64), POINTER(c_int64))
fn("kvc_swa_radix_cache_reset", _st, _P)
fn("kvc_swa_radix_cache_sizes", _st, _P, POINTER(_Sizes))
fn("kvc_swa_radix_cache_stats", _st, _P, POINTER(Stats))
fn("kvc_swa_radix_cache_check", _st, _P)


class SWARadixCache(RadixCache):
    """The SWA radix cache over a flow's kvcache.SWAAllocator.

    ctx: a kvcache.Context; num_slots: the allocator's full size (size_full);
    sliding_window: the model's window in tokens (the flow's sliding_window); page_size:
    the allocator's; policy: one of POLICIES (the full eviction order; SWA eviction is
    LRU); kind: "hybrid" (an SWAAllocator in pool mode), "pure" (pure=True) or "ring"
    (ring_size > 0), the allocator's kind (kvc_swa_radix_kind says what caching means for
    each)."""

    _create_fn = lib.kvc_swa_radix_cache_create
    _destroy_fn = lib.kvc_swa_radix_cache_destroy
    _as_prefix_fn = lib.kvc_swa_radix_cache_as_prefix_cache
    _reset_fn = lib.kvc_swa_radix_cache_reset
    _stats_fn = lib.kvc_swa_radix_cache_stats
    _check_fn = lib.kvc_swa_radix_cache_check

    def __init__(self, ctx, num_slots, sliding_window, page_size=1, policy="lru", slru_threshold=0,
                 kind="hybrid"):
        if kind not in KINDS:
            raise ValueError("kind must be one of %s" % ", ".join(KINDS))
        cfg = _SwaConfig()
        cfg.struct_size = ctypes.sizeof(cfg)
        cfg.version = lib.kvc_version_number()
        cfg.sliding_window = sliding_window
        cfg.kind = KINDS[kind]
        self.sliding_window = sliding_window
        self.kind = kind
        self._create(ctx, cfg, cfg.radix, num_slots, page_size, policy, slru_threshold)

    def _rr(self, req):
        entry = self._reqs.get(ctypes.addressof(req))
        if entry is None:
            raise ValueError("bind() the request's tokens first")
        return entry

    # --- Requests --------------------------------------------------------------------------

    def match(self, req):
        """Match + admission of a new (bound) request with the window rule: prefix_len,
        cache_protected_len, the prefix slots, cache_node (FULL-locked) and the SWA lock of
        its last window (swa_lock(req)). Returns the matched length."""
        entry = self._rr(req)
        self._check(lib.kvc_swa_radix_cache_match_req(self.handle, byref(req), byref(entry[0])),
                    "kvc_swa_radix_cache_match_req")
        req._adopt_prefix(entry)
        return req.prefix_len

    def swa_lock(self, req):
        """The SWA lock receipt the bound request holds (0 = none)."""
        return self._rr(req)[0].swa_lock

    def set_swa_lock(self, req, receipt):
        """Sets the bound request's SWA receipt (a lock taken with lock(), 0 = none)."""
        self._rr(req)[0].swa_lock = receipt or 0

    def cache_finished_req(self, req, flow, is_insert=True):
        """SGLang cache_finished_req of a bound request through `flow`: drops its FULL and SWA
        locks, inserts [0, kv_committed_len) floored to pages with its swa_evicted_seqlen
        (tombstones below it), frees what the tree does not take."""
        rr = self._rr(req)[0]
        self._check(lib.kvc_swa_radix_cache_cache_finished_req(self.handle, handle(flow), byref(req),
                                                               1 if is_insert else 0),
                    "kvc_swa_radix_cache_cache_finished_req")
        return rr.swa_lock

    def cache_unfinished_req(self, req, flow):
        """SGLang cache_unfinished_req (chunked prefill checkpoint) through `flow`: inserts the
        committed tokens, writes the tree's slots into the row where duplicates were, moves
        the locks to the new node. Returns the new SWA receipt (0: none held)."""
        rr = self._rr(req)[0]
        self._check(lib.kvc_swa_radix_cache_cache_unfinished_req(self.handle, handle(flow), byref(req)),
                    "kvc_swa_radix_cache_cache_unfinished_req")
        return rr.swa_lock

    # --- Tree operations -------------------------------------------------------------------

    def match_prefix(self, tokens, ns=0):
        """Match with the window rule (no lock): (matched length, list of slots, node)."""
        arr, n = i32(tokens)
        m = Match()
        self._check(lib.kvc_swa_radix_cache_match_prefix(self.handle, ns, arr, n, byref(m)))
        return m.len, slots(m), m.node

    def insert(self, tokens, slots, flow=None, ns=0, swa_evicted_seqlen=0):
        """Insert; the new leaf's part below swa_evicted_seqlen (page aligned) is a
        tombstone, overlapped unlocked tombstones past it are revived from `slots`;
        duplicates are freed through `flow`. Returns the number of tokens already present."""
        t, n = i32(tokens)
        s, n2 = i64(slots)
        if n2 != n:
            raise ValueError("tokens and slots differ in length")
        p = c_int64()
        self._check(lib.kvc_swa_radix_cache_insert(self.handle, handle(flow), ns, t, s, n, swa_evicted_seqlen,
                                                   byref(p)))
        return p.value

    def lock(self, node):
        """FULL lock of node's path, SWA lock of its last window: returns the SWA receipt."""
        r = c_uint64()
        self._check(lib.kvc_swa_radix_cache_lock(self.handle, node, byref(r)))
        return r.value

    def unlock_swa(self, node, receipt):
        """Releases only the SWA part of a lock early (SGLang dec_swa_lock_only). Returns 0,
        the receipt that is left (pass it to unlock)."""
        r = c_uint64(receipt or 0)
        self._check(lib.kvc_swa_radix_cache_unlock_swa(self.handle, node, byref(r)))
        return r.value

    def unlock(self, node, receipt=0):
        """Releases the FULL lock and, with a receipt other than 0, the SWA lock it names."""
        self._check(lib.kvc_swa_radix_cache_unlock(self.handle, node, receipt or 0))

    def evict(self, num_tokens, flow, swa_num_tokens=0):
        """SGLang evict(EvictParams(num_tokens, swa_num_tokens)): (full, SWA) tokens freed."""
        e, s = c_int64(), c_int64()
        self._check(lib.kvc_swa_radix_cache_evict(self.handle, handle(flow), num_tokens, swa_num_tokens, byref(e),
                                                  byref(s)))
        return e.value, s.value

    def sizes(self):
        s = _Sizes()
        self._check(lib.kvc_swa_radix_cache_sizes(self.handle, byref(s)))
        return {"evictable": s.evictable, "protected": s.protected_size, "cached": s.cached,
                "swa_evictable": s.swa_evictable, "swa_protected": s.swa_protected, "swa_cached": s.swa_cached}

    def dump(self):
        raise NotImplementedError("kvc_swa_radix_cache has no dump")
