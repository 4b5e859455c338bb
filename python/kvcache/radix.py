"""kvcache.radix — SGLang's RadixCache (kvc_radix_cache) for the Python binding.

Self-contained on purpose: it declares its own ctypes prototypes for the radix section of
include/kvcache.h and uses only the loaded library (``kvcache._ffi.lib``), the
``kvc_prefix_cache`` struct (``kvcache._ffi.PrefixCache``) and the context's error check,
so it can be re-wired after the binding's rewrite without touching its files.

A RadixCache is usable as a Flow's cache (``kvc.Flow(ctx, pool, alloc, cache=radix)``):
release inserts finished requests, ``flow.cache_unfinished`` checkpoints chunks, and
allocation under pressure evicts through it. The tree needs each request's token ids:
``radix.bind(req, tokens)`` attaches them to a ReqState (kept until ``unbind``), and
``radix.match(req)`` does SGLang's match + admission for a new request.

Everything here is host-only; no call does device work.
"""
import array
import ctypes
from ctypes import (CFUNCTYPE, POINTER, Structure, byref, c_char_p, c_int, c_int32, c_int64,
                    c_size_t, c_uint32, c_uint64, c_void_p)

from . import _ffi

__all__ = ["RadixCache", "RadixReq", "POLICIES"]

lib = _ffi.lib

POLICIES = {"lru": 0, "lfu": 1, "fifo": 2, "mru": 3, "filo": 4, "priority": 5, "slru": 6}


class RadixReq(Structure):
    """kvc_radix_req, field for field."""
    _fields_ = [("tokens", POINTER(c_int32)), ("num_tokens", c_int64), ("prompt_len", c_int64),
                ("ns", c_uint64), ("priority", c_int32), ("reserved_i32_", c_int32),
                ("inserted_len", c_int64), ("prefix_buf", POINTER(c_int64)),
                ("swa_lock", c_uint64), ("mamba_branching_len", c_int64)]


_REQ_OF = CFUNCTYPE(c_void_p, c_void_p, c_void_p)
_FREE_FN = CFUNCTYPE(c_int, c_void_p, POINTER(c_int64), c_size_t)


class _Config(Structure):
    """kvc_radix_cache_config, field for field."""
    _fields_ = [("struct_size", c_size_t), ("version", c_uint32), ("page_size", c_int32),
                ("policy", c_int), ("slru_threshold", c_int32), ("num_slots", c_int64),
                ("req_of", _REQ_OF), ("req_user", c_void_p), ("free_slots", _FREE_FN),
                ("free_user", c_void_p), ("on_event", c_void_p), ("event_user", c_void_p),
                ("block_hash", c_void_p), ("hash_user", c_void_p), ("reserved_", c_uint64 * 8)]


class _Match(Structure):
    _fields_ = [("len", c_int64), ("slots", POINTER(c_int64)), ("node", c_void_p),
                ("copied", c_int32), ("reserved_i32_", c_int32)]


class _Stats(Structure):
    _fields_ = [("nodes", c_int64), ("leaves", c_int64), ("cached_tokens", c_int64),
                ("bytes", c_int64), ("reserved_", c_int64 * 4)]


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_P, _st = c_void_p, c_int
_fn("kvc_radix_cache_create", _st, _P, POINTER(_Config), POINTER(c_void_p))
_fn("kvc_radix_cache_destroy", None, _P)
_fn("kvc_radix_cache_as_prefix_cache", _ffi.PrefixCache, _P)
_fn("kvc_radix_cache_match_prefix", _st, _P, c_uint64, POINTER(c_int32), c_int64, POINTER(_Match))
_fn("kvc_radix_cache_match_req", _st, _P, _P, POINTER(RadixReq))
_fn("kvc_radix_cache_insert", _st, _P, _P, c_uint64, POINTER(c_int32), POINTER(c_int64), c_int64,
    c_int32, POINTER(c_int64))
_fn("kvc_radix_cache_lock", _st, _P, _P)
_fn("kvc_radix_cache_unlock", _st, _P, _P)
_fn("kvc_radix_cache_evict", _st, _P, _P, c_int64, POINTER(c_int64))
_fn("kvc_radix_cache_reset", _st, _P)
_fn("kvc_radix_cache_bind_allocator", _st, _P, _P)
_fn("kvc_radix_cache_sizes", _st, _P, POINTER(c_int64), POINTER(c_int64), POINTER(c_int64))
_fn("kvc_radix_cache_stats", _st, _P, POINTER(_Stats))
_fn("kvc_radix_cache_dump", _st, _P, c_char_p, c_size_t, POINTER(c_size_t))
_fn("kvc_radix_cache_check", _st, _P)

_VERSION = lib.kvc_version_number()


def _i32(seq):
    if isinstance(seq, array.array) and seq.typecode == "i":  # a copy of the values
        n = len(seq)
        out = (c_int32 * max(n, 1))()
        if n:
            ctypes.memmove(out, seq.buffer_info()[0], 4 * n)
        return out, n
    seq = list(seq)
    return (c_int32 * max(len(seq), 1))(*seq), len(seq)


def _i64(seq):
    seq = list(seq)
    return (c_int64 * max(len(seq), 1))(*seq), len(seq)


def _handle(x):
    return getattr(x, "handle", None) if x is not None else None


def _hold(*deps):
    """Counts the tree as a user of the objects its C side borrows (the context, pools), so
    that closing them, or the garbage collector finalizing a cycle in any order, destroys
    them only after the tree: kvcache._Handle's protocol."""
    from . import _Handle
    with _Handle._lock:
        for d in deps:
            d._users += 1
    return list(deps)


def _release(tree):
    deps, tree._deps = getattr(tree, "_deps", []), []
    for d in deps:
        d._users -= 1
        d._maybe_destroy()


class RadixCache:
    """SGLang RadixCache over the host slots of a flow's allocator.

    ctx: a kvcache.Context; page_size: the flow's; num_slots: the allocator's size;
    policy: one of POLICIES. Use as ``Flow(..., cache=radix)``; ``bind`` each request's
    token ids before the flow calls the cache for it.
    """

    def __init__(self, ctx, num_slots, page_size=1, policy="lru", slru_threshold=0):
        if policy not in POLICIES:
            raise ValueError("policy must be one of %s" % ", ".join(POLICIES))
        self._ctx = ctx
        self._reqs = {}  # address of a ReqState -> (RadixReq, token array, prefix buffer)
        self._req_of_cb = _REQ_OF(self._req_of)
        cfg = _Config()
        cfg.struct_size = ctypes.sizeof(cfg)
        cfg.version = _VERSION
        cfg.page_size = page_size
        cfg.policy = POLICIES[policy]
        cfg.slru_threshold = slru_threshold
        cfg.num_slots = num_slots
        cfg.req_of = self._req_of_cb
        out = c_void_p()
        ctx._check(lib.kvc_radix_cache_create(ctx.handle, byref(cfg), byref(out)), "kvc_radix_cache_create")
        self._ptr = out.value
        self.page_size = page_size
        # The binding's dependency protocol (kvcache._Handle): a Flow using this cache
        # counts itself in _users, and the tree is destroyed only once closed and unused.
        self._users = 0
        self._closing = False
        self._deps = _hold(ctx)

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
        return lib.kvc_radix_cache_as_prefix_cache(self.handle)

    def _check(self, st, func=None):
        self._ctx._check(st, func)

    def _maybe_destroy(self):
        if self._closing and self._users == 0 and self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            lib.kvc_radix_cache_destroy(ptr)
            _release(self)

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
        arr, n = _i32(tokens)
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
        arr, n = _i32(tokens)
        m = _Match()
        self._check(lib.kvc_radix_cache_match_prefix(self.handle, ns, arr, n, byref(m)))
        return m.len, [m.slots[i] for i in range(m.len)], m.node

    def insert(self, tokens, slots, flow=None, ns=0, priority=0):
        """SGLang insert; the duplicates are freed through `flow`. Returns the number of
        tokens already present."""
        t, n = _i32(tokens)
        s, ns_ = _i64(slots)
        if ns_ != n:
            raise ValueError("tokens and slots differ in length")
        p = c_int64()
        self._check(lib.kvc_radix_cache_insert(self.handle, _handle(flow), ns, t, s, n, priority, byref(p)))
        return p.value

    def lock(self, node):
        self._check(lib.kvc_radix_cache_lock(self.handle, node))

    def unlock(self, node):
        self._check(lib.kvc_radix_cache_unlock(self.handle, node))

    def evict(self, num_tokens, flow):
        """Evicts at least num_tokens (whole leaves, policy order) through the flow."""
        e = c_int64()
        self._check(lib.kvc_radix_cache_evict(self.handle, _handle(flow), num_tokens, byref(e)))
        return e.value

    def reset(self):
        """Drops every node without freeing slots (the pools are being cleared)."""
        self._check(lib.kvc_radix_cache_reset(self.handle))

    def bind_allocator(self, allocator):
        """kvc_radix_cache_bind_allocator: keeps the tree's held marks in the allocator's own
        slot states (page 1, a 'token' Allocator of num_slots slots, the tree empty), so an
        eviction touches one byte per freed slot; every other free of that allocator then
        refuses a cached slot. The tree holds the allocator until the tree is closed."""
        self._check(lib.kvc_radix_cache_bind_allocator(self.handle, allocator.handle),
                    "kvc_radix_cache_bind_allocator")
        self._deps += _hold(allocator)

    def sizes(self):
        e, p, c = c_int64(), c_int64(), c_int64()
        self._check(lib.kvc_radix_cache_sizes(self.handle, byref(e), byref(p), byref(c)))
        return {"evictable": e.value, "protected": p.value, "cached": c.value}

    def stats(self):
        s = _Stats()
        self._check(lib.kvc_radix_cache_stats(self.handle, byref(s)))
        return {"nodes": s.nodes, "leaves": s.leaves, "cached_tokens": s.cached_tokens, "bytes": s.bytes}

    def dump(self):
        need = c_size_t()
        self._check(lib.kvc_radix_cache_dump(self.handle, None, 0, byref(need)))
        buf = ctypes.create_string_buffer(need.value)
        self._check(lib.kvc_radix_cache_dump(self.handle, buf, need.value, None))
        return buf.value.decode()

    def check(self):
        self._check(lib.kvc_radix_cache_check(self.handle))
