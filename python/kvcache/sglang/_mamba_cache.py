"""MambaRadixCache with SGLang's interface (mem_cache/mamba_radix_cache.py, the seeds' era)
over kvcache's C Mamba radix tree (kvc_mamba_radix_cache, through kvcache.mamba_radix)."""
import ctypes
import math

import kvcache as _kvc
from kvcache import mamba_radix as _mamba_radix

from . import _ops as T
from ._cache import (DecLockRefResult, EvictParams, EvictResult, IncLockRefResult, InsertResult,
                     _HybridTreeCache, _named_args)
from ._reqpool import HybridReqToTokenPool, clear_track_fields

lib = T.lib
T.proto("kvc_mamba_radix_cache_cache_finished_req", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
        ctypes.c_void_p, ctypes.c_int)
T.proto("kvc_mamba_radix_cache_cache_unfinished_req", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
        ctypes.c_void_p)
T.proto("kvc_mamba_radix_cache_donate_unfinished_req", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
        ctypes.c_void_p)
_match_fn = getattr(ctypes.CDLL(lib._name), "kvc_mamba_radix_cache_match_prefix")
_match_fn.restype = ctypes.c_int
_match_fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                      ctypes.c_void_p, ctypes.c_void_p]


_NAMES = ("req_to_token_pool", "token_to_kv_pool_allocator", "page_size", "disable",
          "enable_mamba_extra_buffer", "mamba_cache_chunk_size")

# SGLang's fallback for mamba_cache_chunk_size when the model's config has no
# mamba_chunk_size: sglang.kernels.ops.attention.fla.chunk_delta_h.CHUNK_SIZE.
FLA_CHUNK_SIZE = 64


def checkpoint_grid(mamba_cache_chunk_size, page_size):
    """SGLang 0.5.23 mamba_checkpoint_grid(page): lcm(mamba_cache_chunk_size, page), the
    depths a Mamba checkpoint can land on. mamba_cache_chunk_size None: SGLang's default
    max(FLA_CHUNK_SIZE, page)."""
    cs = max(FLA_CHUNK_SIZE, page_size) if mamba_cache_chunk_size is None else mamba_cache_chunk_size
    if not isinstance(cs, int) or cs < 1:
        raise _kvc.InvalidArgument(1, "mamba_cache_chunk_size must be a positive int, got %r" % (cs,))
    return math.lcm(cs, page_size)


def _slot(x):
    """A Mamba slot given as an int, a 0-d / 1-element tensor or array."""
    if x is None:
        return 0
    if isinstance(x, int):
        return x
    return int(T.tolist(T.host_i64(x))[0])


class MambaRadixCache(_HybridTreeCache):
    """SGLang MambaRadixCache (hybrid linear-attention / Mamba + full-attention models) over
    kvcache's Mamba radix tree, with the adapter's HybridReqToTokenPool and a token or paged
    allocator. A node holds at most one Mamba state slot (the state after exactly the
    tokens up to its end); a match ends at the deepest node with a state.

    Without the extra buffer (page size 1) a request caches its running state, for all its
    committed tokens. With it (enable_mamba_extra_buffer, the pool built with it too; any
    page size) a request caches a checkpoint from its ping-pong track slots: the scheduler
    sets req.mamba_last_track_seqlen (and with two track slots mamba_prev_track_seqlen) to
    the page-aligned tokens the newest (previous) checkpoint covers when a forward writes
    one, and the tree takes the newest that fits the committed tokens, caching that many
    tokens (SGLang's cache_len; the KV past it is freed at release)."""

    def __init__(self, *args, **kwargs):
        v = _named_args(args, kwargs, _NAMES)
        pool, alloc = v["req_to_token_pool"], v["token_to_kv_pool_allocator"]
        ps = v["page_size"] or 1
        if not isinstance(pool, HybridReqToTokenPool):
            raise _kvc.InvalidArgument(1, "MambaRadixCache needs a HybridReqToTokenPool")
        if not hasattr(alloc, "_a") or not isinstance(alloc._a, _kvc.Allocator):
            raise _kvc.InvalidArgument(1, "MambaRadixCache needs a TokenToKVPoolAllocator or a "
                                       "PagedTokenToKVPoolAllocator")
        if v["disable"]:
            raise NotImplementedError("disable=True: use ChunkCache")
        extra = v["enable_mamba_extra_buffer"]
        extra = bool(pool.enable_mamba_extra_buffer) if extra is None else bool(extra)
        if extra != bool(pool.enable_mamba_extra_buffer):
            # The checkpoints live in the pool's track slots: both sides must agree.
            raise _kvc.InvalidArgument(1, "enable_mamba_extra_buffer=%s, but the HybridReqToTokenPool "
                                       "was built with %s" % (extra, not extra))
        if not extra and ps != 1:
            raise _kvc.InvalidArgument(1, "page size must be 1 for MambaRadixCache without the "
                                       "extra buffer, got %d" % ps)
        if ps != getattr(alloc, "page_size", 1):
            raise _kvc.InvalidArgument(1, "page_size %d, the allocator's is %d" % (ps, alloc.page_size))
        self.disable = False
        self.enable_mamba_extra_buffer = extra
        self.mamba_checkpoint_grid = checkpoint_grid(v["mamba_cache_chunk_size"], ps)
        if extra:  # 0.5.23's chunk checkpoint: the track slot itself goes to the tree
            self._unfinished_fn = lib.kvc_mamba_radix_cache_donate_unfinished_req
        ctx = pool._ctx
        tree = _mamba_radix.MambaRadixCache(ctx, pool._hyb, alloc.size, ps)
        self._attach(pool, alloc, ps, tree, _kvc.Flow(ctx, pool._pool, alloc._a, cache=tree,
                                                      hybrid_req_pool=pool._hyb))
        self._ms = ctypes.c_int32()  # the matched node's state slot
        self._full = ctypes.c_int64()  # the full-attention match (SGLang full_kv_hit_length)
        self._match_out = (ctypes.byref(self._ms), ctypes.byref(self._full))
        self._root()

    _match_fn = _match_fn
    _finished_fn = lib.kvc_mamba_radix_cache_cache_finished_req
    _unfinished_fn = lib.kvc_mamba_radix_cache_cache_unfinished_req
    _second = "mamba"
    _total_name = "mamba_num"

    def supports_mamba(self):
        return True

    def match_prefix(self, params=None, key=None, **kwargs):
        """MatchResult(device_indices = the slots up to the deepest matched node that holds
        a Mamba state, last_device_node = that node, mamba_branching_seqlen). No lock is
        taken. With params.cow_mamba and params.req, that state is copied into the request's
        own Mamba slot (req.mamba_pool_idx; a new slot when it has none, evicting one
        unlocked state when the pool is empty, as SGLang).

        mamba_branching_seqlen is SGLang 0.5.23's (MambaComponent
        finalize_match_result_in_tree_core): the full-attention hit floored to the
        checkpoint grid (lcm(mamba_cache_chunk_size, page_size)) when that lies past the
        Mamba hit, else None; the scheduler tracks a checkpoint there so that the next
        request sharing the prefix finds a state at the branch point."""
        r = _HybridTreeCache.match_prefix(self, params, key)
        grid = self.mamba_checkpoint_grid
        aligned = self._full.value // grid * grid
        r.mamba_branching_seqlen = aligned if aligned > T.numel(r.device_indices) else None
        req = getattr(params, "req", None) if params is not None else kwargs.get("req")
        cow = getattr(params, "cow_mamba", False) if params is not None else kwargs.get("cow_mamba", False)
        state = self._ms.value
        if cow and req is not None and state:  # the slots are copied: eviction cannot change them
            self._cow(req, r.last_device_node, state)
        return r

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
        """The base binding with the request's Mamba slot and, with the extra buffer, its
        checkpoints (_bind_track)."""
        st, rr = _HybridTreeCache._bind(self, req, tokens, committed)
        st.mamba_slot = _slot(req.mamba_pool_idx)
        if self.enable_mamba_extra_buffer:
            self._bind_track(st, req)
        return st, rr

    def _bind_track(self, st, req):
        """st.mamba_track_seqlen[k] = the tokens the state in the request's track slot k
        covers (0: none): mamba_last_track_seqlen at the keep index (the pool's
        get_mamba_ping_pong_keep_idx: where the newest checkpoint was written) and, with two
        track slots, mamba_prev_track_seqlen at the other one. The tree checks that they are
        page-aligned (InvalidArgument otherwise)."""
        last = getattr(req, "mamba_last_track_seqlen", None)
        prev = getattr(req, "mamba_prev_track_seqlen", None)
        if last is None and prev is None:
            return
        pool = self.req_to_token_pool
        keep = pool.get_mamba_ping_pong_keep_idx(req)
        pp = pool.mamba_ping_pong_track_buffer_size
        if keep not in range(pp):
            raise _kvc.InvalidArgument(1, "the request's track index %r is outside [0, %d)" % (keep, pp))
        if last is not None:
            st.mamba_track_seqlen[keep] = int(last)
        if prev is not None and pp == 2:
            st.mamba_track_seqlen[1 - keep] = int(prev)

    def cache_finished_req(self, req, is_insert: bool = True):
        """Inserts [0, committed) with the request's running state donated to the node at
        its end (when that node has a state already the request's slot is freed instead),
        frees the duplicates, releases the lock and every other Mamba slot of the request
        (req.mamba_pool_idx = None). With the extra buffer the donated state is the newest
        checkpoint within the committed tokens (mamba_last_track_seqlen, else
        mamba_prev_track_seqlen; none: nothing is inserted), the key its tokens, the KV past
        them freed; the request's track fields are cleared (its slots went to the tree or
        back to the pool). Without is_insert (abort, retraction) frees [cache_protected_len,
        committed) and every Mamba slot of the request."""
        _HybridTreeCache.cache_finished_req(self, req, is_insert)
        req.mamba_pool_idx = None
        if self.enable_mamba_extra_buffer:
            clear_track_fields(req)

    def cache_unfinished_req(self, req, chunked=False):
        """Checkpoints a chunked request: its state is inserted with the tokens it covers,
        the tree's slots are written into the row where duplicates were, the lock moves to
        the new node; sets prefix_indices (the filled tokens' row) / cache_protected_len /
        last_node. Without the extra buffer the state is a copy of the running one (for all
        filled tokens) in a new slot. With it, as SGLang 0.5.23's
        donate_mamba_ping_pong_slot, the newest checkpoint's track slot itself goes to the
        tree (none: nothing is inserted) and req.mamba_ping_pong_track_buffer gets a fresh
        slot at that index (when the node already had a state the donated slot is freed);
        SGLang then forgets the checkpoints (mamba_last / prev_track_seqlen = None), and so
        does this."""
        _HybridTreeCache.cache_unfinished_req(self, req, chunked)
        if self.enable_mamba_extra_buffer:
            self._sync_track_buffer(req)
            req.mamba_last_track_seqlen = None
            if hasattr(req, "mamba_prev_track_seqlen"):
                req.mamba_prev_track_seqlen = None

    def _sync_track_buffer(self, req):
        """req.mamba_ping_pong_track_buffer[k] = the row's track entry k where the C call
        handed entry k's slot to the tree (in place, as SGLang's set_mamba_ping_pong_slot)."""
        buf = getattr(req, "mamba_ping_pong_track_buffer", None)
        if buf is None:
            return
        pool = self.req_to_token_pool
        row = lib.kvc_hybrid_req_pool_track_slots(pool._hyb.handle, int(req.req_pool_idx))
        old = T.tolist(T.host_i64(buf))
        # A CUDA buffer the pool made keeps its host copy (_kvc_host), which host_i64 reads
        # instead of the device: both get the new slot, or the next call sees the old one.
        mirror = getattr(buf, "_kvc_host", None)
        for k in range(pool.mamba_ping_pong_track_buffer_size):
            if int(row[k]) != int(old[k]):
                buf[k] = int(row[k])
                if mirror is not None:
                    mirror[k] = int(row[k])

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
        full, mn = self._evict_counts(params, num_tokens, mamba_num, "mamba_num")
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
        self._evict_status(st)
        return e.value, m.value

    def mamba_evictable_size(self):
        return self._tree.sizes()["mamba_evictable"]

    def mamba_protected_size(self):
        return self._tree.sizes()["mamba_protected"]

    def available_and_evictable_str(self):
        a = self.token_to_kv_pool_allocator.available_size()
        e = self.full_evictable_size()
        return ("Available full tokens: %d (full_available_size=%d + full_evictable_size=%d)\n"
                "Full LRU list evictable size: %d\n" % (a + e, a, e, e))
