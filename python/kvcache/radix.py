"""kvcache.radix — SGLang's RadixCache (kvc_radix_cache) for the Python binding.

It declares its own ctypes prototypes for the radix section of include/kvcache.h over the
scaffolding it shares with kvcache.swa_radix and kvcache.mamba_radix (kvcache._tree_ffi:
the structs, conversions, config fill and dependency protocol), and otherwise uses only
the ``kvc_prefix_cache`` struct (``kvcache._ffi.PrefixCache``) and the context's error
check. RadixCache is also those trees' base: their C functions are its class attributes.

A RadixCache is usable as a Flow's cache (``kvc.Flow(ctx, pool, alloc, cache=radix)``):
release inserts finished requests, ``flow.cache_unfinished`` checkpoints chunks, and
allocation under pressure evicts through it. The tree needs each request's token ids:
``radix.bind(req, tokens)`` attaches them to a ReqState (kept until ``unbind``), and
``radix.match(req)`` does SGLang's match + admission for a new request.

Everything here is host-only; no call does device work.
"""
import ctypes
from ctypes import POINTER, byref, c_char_p, c_int, c_int32, c_int64, c_size_t, c_uint64, c_void_p

from . import _ffi
from ._tree_ffi import (POLICIES, REQ_OF, Config, Match, RadixReq, Stats, fill_config, fn, handle,
                        hold, i32, i64, release, slots)

__all__ = ["RadixCache", "RadixReq", "POLICIES"]

lib = _ffi.lib
# The name older callers (bench/python/bench_sglang_adapter.py) use.
_Match = Match

_P, _st = c_void_p, c_int
fn("kvc_radix_cache_create", _st, _P, POINTER(Config), POINTER(c_void_p))
fn("kvc_radix_cache_destroy", None, _P)
fn("kvc_radix_cache_as_prefix_cache", _ffi.PrefixCache, _P)
fn("kvc_radix_cache_match_prefix", _st, _P, c_uint64, POINTER(c_int32), c_int64, POINTER(Match))
fn("kvc_radix_cache_match_req", _st, _P, _P, POINTER(RadixReq))
fn("kvc_radix_cache_insert", _st, _P, _P, c_uint64, POINTER(c_int32), POINTER(c_int64), c_int64,
    c_int32, POINTER(c_int64))
fn("kvc_radix_cache_lock", _st, _P, _P)
fn("kvc_radix_cache_unlock", _st, _P, _P)
fn("kvc_radix_cache_evict", _st, _P, _P, c_int64, POINTER(c_int64))
fn("kvc_radix_cache_reset", _st, _P)
fn("kvc_radix_cache_bind_allocator", _st, _P, _P)
fn("kvc_radix_cache_sizes", _st, _P, POINTER(c_int64), POINTER(c_int64), POINTER(c_int64))
fn("kvc_radix_cache_stats", _st, _P, POINTER(Stats))
fn("kvc_radix_cache_dump", _st, _P, c_char_p, c_size_t, POINTER(c_size_t))
fn("kvc_radix_cache_check", _st, _P)


class RadixCache:
    """SGLang RadixCache over the host slots of a flow's allocator.

    ctx: a kvcache.Context; page_size: the flow's; num_slots: the allocator's size;
    policy: one of POLICIES. Use as ``Flow(..., cache=radix)``; ``bind`` each request's
    token ids before the flow calls the cache for it.
    """

    # The tree's C functions; a hybrid tree's module sets its own (same signatures).
    _create_fn = lib.kvc_radix_cache_create
    _destroy_fn = lib.kvc_radix_cache_destroy
    _as_prefix_fn = lib.kvc_radix_cache_as_prefix_cache
    _lock_fn = lib.kvc_radix_cache_lock
    _unlock_fn = lib.kvc_radix_cache_unlock
    _reset_fn = lib.kvc_radix_cache_reset
    _stats_fn = lib.kvc_radix_cache_stats
    _check_fn = lib.kvc_radix_cache_check

    def __init__(self, ctx, num_slots, page_size=1, policy="lru", slru_threshold=0):
        cfg = Config()
        self._create(ctx, cfg, cfg, num_slots, page_size, policy, slru_threshold)

    def _create(self, ctx, cfg, radix_cfg, num_slots, page_size, policy, slru_threshold, *deps):
        """Fills radix_cfg (cfg itself, or the FULL part of a hybrid tree's cfg whose own
        fields the caller set), creates the tree with _create_fn and counts it as a user of
        ctx and deps (objects its C side borrows, kept alive with it)."""
        req_of = REQ_OF(self._req_of)
        fill_config(radix_cfg, page_size, policy, slru_threshold, num_slots, req_of)
        self._ctx = ctx
        self._reqs = {}  # address of a ReqState -> (RadixReq, token array, prefix buffer)
        self._req_of_cb = req_of  # kept alive: the C tree calls it
        out = c_void_p()
        name = self._create_fn.__name__
        ctx._check(self._create_fn(ctx.handle, byref(cfg), byref(out)), name)
        self._ptr = out.value
        self.page_size = page_size
        # The binding's dependency protocol (kvcache._Handle): a Flow using this cache
        # counts itself in _users, and the tree is destroyed only once closed and unused.
        self._users = 0
        self._closing = False
        self._deps = hold(ctx, *deps)

    # The flows call this (through C) for every request they hand to the cache.
    def _req_of(self, user, req_addr):
        entry = self._reqs.get(req_addr)
        return ctypes.addressof(entry[0]) if entry else None

    @property
    def handle(self):
        if self._closing or self._ptr is None:
            raise ValueError("the RadixCache is closed")
        return self._ptr

    def _prefix_cache(self):
        return self._as_prefix_fn(self.handle)

    def _check(self, st, func=None):
        self._ctx._check(st, func)

    def _maybe_destroy(self):
        if self._closing and self._users == 0 and self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            self._destroy_fn(ptr)
            release(self)

    def close(self):
        """Frees the tree once no Flow uses it (its cached slots are not given back: evict
        first, or reset the allocator)."""
        self._closing = True
        self._maybe_destroy()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- Requests ------------------------------------------------------------------------

    def bind(self, req, tokens, ns=0, priority=0, prompt_len=None):
        """Attaches a request's token ids (prompt + outputs so far; call again as they grow)
        to its ReqState. ns: namespace id (SGLang extra_key / cache_salt), 0 = none."""
        arr, n = i32(tokens)
        old = self._reqs.get(ctypes.addressof(req))
        rr = old[0] if old else RadixReq()
        rr.tokens = ctypes.cast(arr, POINTER(c_int32))
        rr.num_tokens = n
        rr.prompt_len = n if prompt_len is None else prompt_len
        rr.ns = ns
        rr.priority = priority
        buf = (c_int64 * max(n, 1))()
        rr.prefix_buf = ctypes.cast(buf, POINTER(c_int64))
        self._reqs[ctypes.addressof(req)] = (rr, arr, buf)
        return rr

    def _bind_borrowed(self, req, tokens, keep, n, ns=0, priority=0):
        """bind() for one cache call that never matches (kvcache.sglang's
        cache_finished_req / cache_unfinished_req, unbind() right after): tokens is a
        POINTER(c_int32) to n token ids that the caller (keep: their buffer) leaves
        unchanged until unbind(); nothing is copied, no prefix buffer is made (NULL: only
        a match uses it), and one RadixReq of the tree is reused, so the binding is the
        only one made this way at a time."""
        rr = self._borrowed_rr
        if rr is None:
            rr = self._borrowed_rr = RadixReq()
        else:
            ctypes.memset(ctypes.addressof(rr), 0, ctypes.sizeof(rr))
        rr.tokens = tokens
        rr.num_tokens = rr.prompt_len = n
        rr.ns = ns
        rr.priority = priority
        self._reqs[ctypes.addressof(req)] = (rr, keep, None)
        return rr

    _borrowed_rr = None

    def move(self, src, dst):
        """Moves a binding to a copy of the request (RequestBatch.add / remove copy the
        ReqState into or out of the batch; the cache finds a request by its address)."""
        entry = self._reqs.pop(ctypes.addressof(src), None)
        if entry is None:
            raise ValueError("src is not bound")
        self._reqs[ctypes.addressof(dst)] = entry

    def unbind(self, req):
        self._reqs.pop(ctypes.addressof(req), None)

    def match(self, req):
        """SGLang match + admission of a new (bound) request: sets prefix_len,
        cache_protected_len, the prefix slots (written into the row by alloc_for_extend)
        and cache_node, and locks the node. Returns the matched length."""
        entry = self._reqs.get(ctypes.addressof(req))
        if entry is None:
            raise ValueError("bind() the request's tokens first")
        self._check(lib.kvc_radix_cache_match_req(self.handle, byref(req), byref(entry[0])),
                    "kvc_radix_cache_match_req")
        req._adopt_prefix(entry)
        return req.prefix_len

    # --- Tree operations -----------------------------------------------------------------

    def match_prefix(self, tokens, ns=0):
        """SGLang match_prefix (no lock): (matched length, list of slots, node handle)."""
        arr, n = i32(tokens)
        m = Match()
        self._check(lib.kvc_radix_cache_match_prefix(self.handle, ns, arr, n, byref(m)))
        return m.len, slots(m), m.node

    def insert(self, tokens, slots, flow=None, ns=0, priority=0):
        """SGLang insert; the duplicates are freed through `flow`. Returns the number of
        tokens already present."""
        t, n = i32(tokens)
        s, ns_ = i64(slots)
        if ns_ != n:
            raise ValueError("tokens and slots differ in length")
        p = c_int64()
        self._check(lib.kvc_radix_cache_insert(self.handle, handle(flow), ns, t, s, n, priority, byref(p)))
        return p.value

    def lock(self, node):
        self._check(self._lock_fn(self.handle, node))

    def unlock(self, node):
        self._check(self._unlock_fn(self.handle, node))

    def evict(self, num_tokens, flow):
        """Evicts at least num_tokens (whole leaves, policy order) through the flow."""
        e = c_int64()
        self._check(lib.kvc_radix_cache_evict(self.handle, handle(flow), num_tokens, byref(e)))
        return e.value

    def reset(self):
        """Drops every node without freeing slots (the pools are being cleared)."""
        self._check(self._reset_fn(self.handle))

    def bind_allocator(self, allocator):
        """kvc_radix_cache_bind_allocator: keeps the tree's held marks in the allocator's own
        slot states (page 1, a 'token' Allocator of num_slots slots, the tree empty), so an
        eviction touches one byte per freed slot; every other free of that allocator then
        refuses a cached slot. The tree holds the allocator until the tree is closed."""
        self._check(lib.kvc_radix_cache_bind_allocator(self.handle, allocator.handle),
                    "kvc_radix_cache_bind_allocator")
        self._deps += hold(allocator)

    def sizes(self):
        e, p, c = c_int64(), c_int64(), c_int64()
        self._check(lib.kvc_radix_cache_sizes(self.handle, byref(e), byref(p), byref(c)))
        return {"evictable": e.value, "protected": p.value, "cached": c.value}

    def stats(self):
        s = Stats()
        self._check(self._stats_fn(self.handle, byref(s)))
        return {"nodes": s.nodes, "leaves": s.leaves, "cached_tokens": s.cached_tokens, "bytes": s.bytes}

    def dump(self):
        need = c_size_t()
        self._check(lib.kvc_radix_cache_dump(self.handle, None, 0, byref(need)))
        buf = ctypes.create_string_buffer(need.value)
        self._check(lib.kvc_radix_cache_dump(self.handle, buf, need.value, None))
        return buf.value.decode()

    def check(self):
        self._check(self._check_fn(self.handle))
