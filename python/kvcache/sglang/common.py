"""The scheduler functions of SGLang's mem_cache/common.py over kvcache.

Hot paths (alloc_for_decode, alloc_for_extend, release_kv_cache) make one library call for
the allocation AND the req_to_token writes (SGLang: several kernels plus Python loops; with
_kvcfast, alloc_for_extend of new requests takes their rows in the same extension call),
with preallocated outputs: the out_cache_loc returned by alloc_for_extend /
alloc_for_decode is a view of one of 8 rotating buffers per allocator and call kind,
valid until 7 more calls of that kind (clone it to keep it longer).

Duck-typed inputs (what is read; SGLang's own Req / ScheduleBatch qualify):
  Req: req_pool_idx (int or None), prefix_indices (int64 tensor), fill_ids,
       origin_input_ids, output_ids, kv_committed_len, kv_allocated_len, is_chunked,
       cache_protected_len, last_node, swa_evicted_seqlen, swa_evict_floor,
       mamba_pool_idx, skip_radix_cache_insert, extra_key, pop_committed_kv_cache() and
       pop_overallocated_kv_cache() (when present; else the lengths are read).
  ScheduleBatch: reqs, prefix_lens, extend_num_tokens, seq_lens_cpu (host int64),
       req_pool_indices (device; its host copy is taken from the tensor alloc_for_extend
       returned, else from the requests), req_to_token_pool, tree_cache,
       model_config.is_encoder_decoder + encoder_lens (optional), maybe_evict_swa()
       (optional). As in SGLang, the caller advances seq_lens / kv_*_len.
"""
import ctypes

from . import _ops as T
from ._alloc import (PagedTokenToKVPoolAllocator, SWATokenToKVPoolAllocator,
                     TokenToKVPoolAllocator)
from ._cache import ChunkCache, EvictParams
from ._reqpool import HybridReqToTokenPool, ReqToTokenPool

lib = T.lib
_ffi = T._kvc._ffi

MAMBA_STATE_PER_REQ_PREFIX_CACHE = 3
MAMBA_STATE_PER_REQ_PREFIX_CACHE_LAZY = 2
MAMBA_STATE_PER_REQ_NO_CACHE = 1


def kv_to_page_indices(kv_indices, page_size: int):
    if page_size == 1:
        return kv_indices
    return kv_indices[::page_size] // page_size


def kv_to_page_num(num_kv_indices: int, page_size: int):
    return (num_kv_indices + page_size - 1) // page_size


def page_align_floor(length: int, page_size: int) -> int:
    return (length // page_size) * page_size


def ceil_align(length: int, page_size: int) -> int:
    return -(-length // page_size) * page_size


def get_last_loc(req_to_token, req_pool_indices_tensor, prefix_lens_tensor):
    """last_loc[i] = req_to_token[rows[i], prefix_lens[i] - 1], -1 for an empty prefix
    (int64). Given the ReqToTokenPool itself, read from its host mirror (no device
    read); given the req_to_token tensor (SGLang's call), a gather on that tensor.
    (Parameter names as SGLang's, so keyword calls work.)"""
    req_pool_indices, prefix_lens = req_pool_indices_tensor, prefix_lens_tensor
    mirror = getattr(req_to_token, "_mirror", None)
    if mirror is not None:
        rows = T.tolist(T.host_i64(req_pool_indices))
        pre = T.tolist(T.host_i64(prefix_lens))
        return T.host_array([int(mirror[r, p - 1]) if p > 0 else -1 for r, p in zip(rows, pre)])
    pre = prefix_lens
    col = pre - 1
    col = col * (col >= 0)                       # column 0 where the prefix is empty
    got = req_to_token[req_pool_indices, col]
    if T.torch is not None:
        return T.torch.where(pre > 0, got.to(T.I64), T.torch.full_like(pre, -1))
    return T.np.where(pre > 0, got.astype(T.I64), -1)


def available_and_evictable_str(tree_cache) -> str:
    return tree_cache.available_and_evictable_str()


def _evict_params(tree_cache, num_tokens):
    """What evict_from_tree_cache(tree_cache, num_tokens) passes to tree_cache.evict, None
    when it evicts nothing (it only reads sizes)."""
    if tree_cache is None or tree_cache.is_chunk_cache():
        return None
    allocator = tree_cache.token_to_kv_pool_allocator
    if isinstance(allocator, SWATokenToKVPoolAllocator):
        full, swa = allocator.full_available_size(), allocator.swa_available_size()
        if full < num_tokens or swa < num_tokens:
            return EvictParams(num_tokens=max(0, num_tokens - full),
                               swa_num_tokens=max(0, num_tokens - swa))
    elif allocator.available_size() < num_tokens:
        return EvictParams(num_tokens=num_tokens)
    return None


def evict_from_tree_cache(tree_cache, num_tokens: int):
    params = _evict_params(tree_cache, num_tokens)
    if params is not None:
        tree_cache.evict(params)


def _oom(kind, num_tokens, tree_cache):
    msg = ("%s. Try to lower your batch size.\nTry to allocate %d tokens.\n%s" %
           (kind, num_tokens, available_and_evictable_str(tree_cache)))
    raise RuntimeError(msg)


def alloc_token_slots(tree_cache, num_tokens: int, backup_state: bool = False):
    allocator = tree_cache.token_to_kv_pool_allocator
    evict_from_tree_cache(tree_cache, num_tokens)
    state = allocator.backup_state() if backup_state else None
    out = allocator.alloc(num_tokens)
    if out is None:
        _oom("Out of memory", num_tokens, tree_cache)
    return (out, state) if backup_state else out


def alloc_paged_token_slots_extend(tree_cache, prefix_lens, prefix_lens_cpu, seq_lens,
                                   seq_lens_cpu, last_loc, extend_num_tokens: int,
                                   backup_state: bool = False, **kwargs):
    allocator = tree_cache.token_to_kv_pool_allocator
    evict_from_tree_cache(tree_cache, extend_num_tokens +
                          T.numel(seq_lens_cpu) * allocator.page_size)
    state = allocator.backup_state() if backup_state else None
    out = allocator.alloc_extend(prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc,
                                 extend_num_tokens)
    if out is None:
        _oom("Prefill out of memory", extend_num_tokens, tree_cache)
    return (out, state) if backup_state else out


def alloc_paged_token_slots_decode(tree_cache, seq_lens, seq_lens_cpu, last_loc,
                                   token_per_req: int = 1, **kwargs):
    allocator = tree_cache.token_to_kv_pool_allocator
    evict_from_tree_cache(tree_cache, T.numel(seq_lens_cpu) * allocator.page_size)
    out = allocator.alloc_decode(seq_lens, seq_lens_cpu, last_loc)
    if out is None:
        _oom("Decode out of memory", T.numel(seq_lens_cpu) * token_per_req, tree_cache)
    return out


def alloc_req_slots(req_to_token_pool, reqs, tree_cache):
    num_reqs = len(reqs)
    if isinstance(req_to_token_pool, HybridReqToTokenPool):
        avail = req_to_token_pool.mamba_allocator.available_size()
        mamba_tree = tree_cache is not None and tree_cache.supports_mamba()
        if mamba_tree:
            factor = (MAMBA_STATE_PER_REQ_PREFIX_CACHE_LAZY
                      if req_to_token_pool.enable_mamba_extra_buffer_lazy
                      else MAMBA_STATE_PER_REQ_PREFIX_CACHE)
        else:
            factor = MAMBA_STATE_PER_REQ_NO_CACHE
        need = num_reqs * factor
        if avail < need and mamba_tree:
            tree_cache.evict(EvictParams(num_tokens=0, mamba_num=need - avail))
    rows = req_to_token_pool.alloc(reqs)
    if rows is None:
        _rows_oom(req_to_token_pool, num_reqs)
    return rows


def _rows_oom(req_to_token_pool, num_reqs):
    raise RuntimeError("alloc_req_slots runs out of memory. Please set a smaller number "
                       "for `--max-running-requests`. available_size=%d, num_reqs=%d" %
                       (req_to_token_pool.available_size(), num_reqs))


# --- the fused hot paths --------------------------------------------------------------------


class _Hot:
    """Per-allocator preallocated state of the hot paths."""

    def __init__(self, allocator):
        dev = allocator.device
        self.ring_ext = T.OutRing(dev, 8)
        self.ring_dec = T.OutRing(dev, 8)
        self.cap = 0
        self.seq = None
        self.swa = isinstance(allocator, SWATokenToKVPoolAllocator)
        self.cuda = T.is_cuda(dev)
        # CUDA: req_pool_indices is written by the extend launch itself
        # ([swa_]allocator_alloc_extend_ex's rows_device) into fresh slab vectors.
        self.rows_slab = T.Slab(dev) if self.cuda else None
        self.ext_args = None  # the ctypes path's kvc_extend_args, built on first use
        if self.swa:
            self.decode_fn = lib.kvc_swa_allocator_alloc_decode
            self.extend_fn = lib.kvc_swa_allocator_alloc_extend
            self.extend_ex_fn = lib.kvc_swa_allocator_alloc_extend_ex
        else:
            self.decode_fn = lib.kvc_allocator_alloc_decode
            self.extend_fn = lib.kvc_allocator_alloc_extend
            self.extend_ex_fn = lib.kvc_allocator_alloc_extend_ex

    def seq_reserve(self, n):
        """Grows the host int64 scratch of the new lengths to n (its address: seq_ptr)."""
        if self.cap < n:
            self.cap = max(n, 2 * self.cap, 256)
            self.seq = T.host_empty(self.cap)
            self.seq_ptr = T.ptr(self.seq)

    def seq_buf(self, n):
        self.seq_reserve(n)
        return self.seq[:n]


def _hot(allocator):
    h = allocator.__dict__.get("_kvc_hot")
    if h is None:
        h = allocator._kvc_hot = _Hot(allocator)
    return h


def _rows_host(batch, reqs):
    """Host int32 rows of the batch (cached per req_pool_indices tensor object)."""
    src = batch.req_pool_indices
    cached = batch.__dict__.get("_kvc_rows") if hasattr(batch, "__dict__") else None
    if cached is not None and cached[0] is src:
        return cached[1], cached[2]
    h = None
    if src is not None and not (T.torch is not None and getattr(src, "is_cuda", False)):
        h = src
    elif src is not None:
        h = getattr(src, "_kvc_host", None)
    rows = T.host_i32(h) if h is not None else T.host_i32([r.req_pool_idx for r in reqs])
    p = T.ptr(rows)
    try:
        batch._kvc_rows = (src, rows, p)
    except AttributeError:
        pass
    return rows, p


def _out(ring, n, cuda):
    """(out tensor, out_host address, out_device address) for a library call: the device
    output only (nothing reads a host copy; writing 8 bytes a slot into one cost the call
    time), or, on the host backend, the one buffer as the host output."""
    dev, dptr = ring.next_out(n)
    if not cuda:
        return dev, dptr, None
    return dev, None, dptr


def alloc_for_decode(batch, token_per_req: int):
    """One new token per request: out_cache_loc (device int64) and row[seq_len] = slot,
    in one library call. Raises RuntimeError when out of memory (after eviction)."""
    if token_per_req != 1:
        raise ValueError("alloc_for_decode supports token_per_req == 1 only (SGLang's "
                         "table write takes one position per request)")
    ev = getattr(batch, "maybe_evict_swa", None)
    if ev is not None:
        ev()
    tree = batch.tree_cache
    allocator = tree.token_to_kv_pool_allocator
    pool = batch.req_to_token_pool
    hot = _hot(allocator)
    seq_cpu = batch.seq_lens_cpu
    bs = T.numel(seq_cpu)
    evict_from_tree_cache(tree, bs if tree.page_size == 1 else bs * tree.page_size)
    reqs = batch.reqs
    rows, rows_ptr = _rows_host(batch, reqs)
    mc = getattr(batch, "model_config", None)
    encdec = mc is not None and getattr(mc, "is_encoder_decoder", False)
    src = T.host_i64_arg(seq_cpu) if T.fast is not None and not encdec else None
    if src is not None:  # seq = seq_cpu + 1 inside the fast call (no slice built)
        hot.seq_reserve(bs)
    else:
        seq = hot.seq_buf(bs)
        if T.torch is not None:
            T.torch.add(seq_cpu, 1, out=seq)
        else:
            T.np.add(seq_cpu, 1, out=seq)
    if encdec:
        return _decode_encoder_decoder(batch, allocator, pool, rows, seq, bs)
    dev, hptr, dptr = _out(hot.ring_dec, bs, hot.cuda)
    if src is not None:
        st = T.fast.alloc_decode(hot.swa, allocator._h, bs, hot.seq_ptr, None, pool._h, rows_ptr,
                                 hptr, dptr, T.stream(hot.cuda), src)
    else:
        st = hot.decode_fn(allocator._h, bs, hot.seq_ptr, None, pool._h, rows_ptr, hptr, dptr,
                           T.stream(hot.cuda))
    if st:
        if st == 2:
            _oom("Decode out of memory", bs * token_per_req, tree)
        allocator._ctx._check(st, "alloc_for_decode")
    return dev


def _decode_encoder_decoder(batch, allocator, pool, rows, seq, bs):
    """Encoder-decoder models: the new token goes to row[encoder_len + seq_len]."""
    out = alloc_paged_token_slots_decode(
        batch.tree_cache, seq, seq, get_last_loc(pool, rows, seq - 1)) \
        if batch.tree_cache.page_size > 1 else alloc_token_slots(batch.tree_cache, bs)
    enc = T.tolist(T.host_i64(batch.encoder_lens))
    old = T.tolist(seq - 1)
    slots = T.tolist(T.host_i64(out))
    for r, e, s, v in zip(T.tolist(rows), enc, old, slots):
        pool._pool.write(int(r), int(e + s), [v])
    return out


def _prefix_ptr(req, n):
    """Host address of req.prefix_indices[0:n), or None when the row holds it already."""
    p = req.prefix_indices
    mark = req.__dict__.get("_kvc_prefix") if hasattr(req, "__dict__") else None
    if mark is not None and mark[0] is p:
        return None
    h = T.host_i64(p)
    if T.numel(h) < n:
        raise ValueError("req.prefix_indices has %d slots, prefix_len is %d" % (T.numel(h), n))
    req._kvc_prefix_keep = h
    return T.ptr(h)


def _prefix_array(reqs, pl, bs):
    """The prefix slot pointers of alloc_extend (a ctypes array of bs addresses), None
    when no request brings prefix slots (the same as all-NULL)."""
    prefix = None
    # any() of a list runs in C: a batch without cached prefixes skips the Python loop
    for i, p in (enumerate(pl) if type(pl) is not list or any(pl) else ()):
        if p > 0:
            a = _prefix_ptr(reqs[i], int(p))
            if a is not None:
                if prefix is None:
                    prefix = (ctypes.c_void_p * max(bs, 1))()
                prefix[i] = a
    return prefix


_EXTEND_NEW = getattr(T.fast, "extend_new", None)


def alloc_for_extend(batch):
    """Rows for new requests, KV slots for the extend tokens, and the req_to_token rows
    (prefix + new slots) in one library call. Returns (out_cache_loc,
    req_pool_indices_device, req_pool_indices_cpu); RuntimeError when out of memory (the
    rows taken stay with the requests, as in SGLang).
    A batch of new requests on a plain ReqToTokenPool, with nothing to evict, takes one
    _kvcfast call (extend_new: the rows, req.req_pool_idx, the extend and the int64 rows);
    the others (kept rows, a hybrid pool, an eviction first, no extension) take the steps
    one by one, in SGLang's order."""
    ev = getattr(batch, "maybe_evict_swa", None)
    if ev is not None:
        ev()
    reqs = batch.reqs
    bs = len(reqs)
    tree = batch.tree_cache
    allocator = tree.token_to_kv_pool_allocator
    pool = batch.req_to_token_pool
    hot = allocator.__dict__.get("_kvc_hot") or _hot(allocator)
    fast = T.fast
    pl = batch.prefix_lens
    if fast is not None:  # the fast call takes buffer objects as they are, and a list
        pre_keep = pre_ptr = pl if type(pl) is list else T.host_i64_arg(pl)
        seq_keep = seq_ptr = T.host_i64_arg(batch.seq_lens_cpu)
    if fast is None or pre_ptr is None or seq_ptr is None:
        fast = None
        pre_keep, pre_ptr = T.host_i64_ptr(pl)
        seq_keep, seq_ptr = T.host_i64_ptr(batch.seq_lens_cpu)
    n = batch.extend_num_tokens
    need = n if tree.page_size == 1 else n + bs * tree.page_size
    out = rows_dev = rdptr = None
    slab = hot.rows_slab
    if fast is not None and _EXTEND_NEW is not None and bs and type(reqs) is list \
            and type(pool) is ReqToTokenPool and _evict_params(tree, need) is None:
        # Nothing would be evicted between the rows and the extend: one call. The prefix
        # pointers come first here; an error there is raised below, after the rows are
        # taken, as on the general path.
        if type(pl) is list and not any(pl):  # (no call for the common batch)
            prefix = None
        else:
            try:
                prefix = _prefix_array(reqs, pl, bs)
            except Exception:
                prefix = False
        if prefix is not False:
            out = dev, hptr, dptr = _out(hot.ring_ext, n, hot.cuda)
            if slab is not None:  # req_pool_indices (device) written by the same launch
                rows_dev, rdptr = slab.take(bs)
            r = _EXTEND_NEW(hot.swa, allocator._h, pool._h, reqs, pre_ptr, seq_ptr, prefix,
                            hptr, dptr, T.stream(hot.cuda), rdptr)
            if r is not None:  # None: a request has its row (the general path below)
                if type(r) is tuple:
                    if r[0] == 0:  # the rows: nothing changed
                        if r[1] == 2:
                            _rows_oom(pool, bs)
                        pool._ctx._check(r[1], "ReqToTokenPool.alloc")
                    if r[1] == 2:
                        _oom("Prefill out of memory", n, tree)
                    allocator._ctx._check(r[1], "alloc_for_extend")
                return _extend_result(hot, pool, dev, rows_dev, T.host_from_bytes(r))
    rows = alloc_req_slots(pool, reqs, tree)
    evict_from_tree_cache(tree, need)
    prefix = _prefix_array(reqs, pl, bs)
    rows32 = pool.__dict__.pop("_last_rows", None)  # what alloc() just filled
    if rows32 is None:
        rows32 = (ctypes.c_int32 * max(bs, 1))(*rows)
    dev, hptr, dptr = out if out is not None else _out(hot.ring_ext, n, hot.cuda)
    if slab is not None:  # req_pool_indices (device) written by the same launch
        if rdptr is None:
            rows_dev, rdptr = slab.take(bs)
        if fast is not None:
            st = fast.alloc_extend(hot.swa, allocator._h, bs, pre_ptr, seq_ptr, None, pool._h,
                                   rows32, prefix, hptr, dptr, T.stream(hot.cuda), rdptr)
        else:
            st = _extend_ex(hot, allocator._h, bs, pre_ptr, seq_ptr, pool._h, rows32, prefix,
                            hptr, dptr, rdptr)
    elif fast is not None:
        st = fast.alloc_extend(hot.swa, allocator._h, bs, pre_ptr, seq_ptr, None, pool._h, rows32,
                               prefix, hptr, dptr, T.stream(hot.cuda))
    else:
        st = hot.extend_fn(allocator._h, bs, pre_ptr, seq_ptr, None, pool._h, rows32, prefix,
                           hptr, dptr, T.stream(hot.cuda))
    if st:
        if st == 2:
            _oom("Prefill out of memory", n, tree)
        allocator._ctx._check(st, "alloc_for_extend")
    # req_pool_indices_cpu: a fresh int64 vector (the batch keeps it; widened from the
    # int32 rows in one C call, about 1 us instead of torch.tensor(list)'s 4).
    return _extend_result(hot, pool, dev, rows_dev, T.rows_i64(rows32, bs))


def _extend_result(hot, pool, dev, rows_dev, rows_cpu):
    """alloc_for_extend's (out_cache_loc, req_pool_indices, req_pool_indices_cpu). The
    device rows came from the launch (slab; the host backend has none: one vector); the
    device tensor carries the host one (_kvc_host), so later steps never read the
    device."""
    if rows_dev is not None:
        if T.torch is not None:  # (NumPy: host backend only, where only tests use a slab)
            rows_dev._kvc_host = rows_cpu
    elif hot.cuda:  # (no slab: only where a caller replaced it)
        rows_dev = T.to_device(rows_cpu, pool.device)
    else:
        rows_dev = rows_cpu
    return dev, rows_dev, rows_cpu


def _extend_ex(hot, alloc_h, bs, pre_ptr, seq_ptr, pool_h, rows32, prefix, hptr, dptr, rdptr):
    """[swa_]allocator_alloc_extend_ex through ctypes (no _kvcfast): one reused args struct."""
    x = hot.ext_args
    if x is None:
        x = hot.ext_args = _ffi.ExtendArgs()
    x.batch_size = bs
    x.prefix_lens, x.seq_lens, x.last_locs = pre_ptr, seq_ptr, None
    x.req_pool = pool_h
    x.req_rows = ctypes.addressof(rows32)
    x.prefix_slots = ctypes.addressof(prefix) if prefix is not None else None
    x.out_host, x.out_device, x.rows_device = hptr, dptr, rdptr
    x.stream = T.stream(hot.cuda)
    return hot.extend_ex_fn(alloc_h, ctypes.byref(x))


def _release_plan(tree_cache):
    """What the fused release needs for this cache, or False where the general path must
    run (kept on the cache: its pool and allocator never change). Only the exact classes:
    a subclass may override cache_finished_req or free."""
    plan = False
    alloc = tree_cache.token_to_kv_pool_allocator
    pool = tree_cache.req_to_token_pool
    if T.fast is not None and hasattr(T.fast, "release_req") and type(tree_cache) is ChunkCache \
            and type(pool) is ReqToTokenPool \
            and type(alloc) in (TokenToKVPoolAllocator, PagedTokenToKVPoolAllocator):
        plan = (alloc, (alloc._h, alloc._row_flow(pool)[0], pool._h, tree_cache.page_size))
    try:
        tree_cache._kvc_release = plan
    except AttributeError:
        pass
    return plan


def release_kv_cache(req, tree_cache, is_insert: bool = True):
    rel = tree_cache.__dict__.get("_kvc_release") if hasattr(tree_cache, "__dict__") else None
    if rel is None:
        rel = _release_plan(tree_cache)
    if rel:
        # ChunkCache over a plain allocator: the request's pops, cache_finished_req's
        # free, the tail free and the row release in one extension call (the steps and
        # their order as below); None when the request has no row.
        st = T.fast.release_req(rel[1], req)
        if st is not None:
            if st:
                rel[0]._ctx._check(st, "release_kv_cache")
            return
    pool = tree_cache.req_to_token_pool
    if req.req_pool_idx is None:
        assert tree_cache.supports_mamba(), "Only MambaRadixCache allow freeing before alloc"
        if getattr(req, "mamba_pool_idx", None) is not None:
            pool.mamba_allocator.free(T.host_i64(req.mamba_pool_idx))
            req.mamba_pool_idx = None
        return
    tree_cache.cache_finished_req(
        req, is_insert=is_insert and not getattr(req, "skip_radix_cache_insert", False))
    if req.req_pool_idx is None:  # a streaming session kept the request's KV
        return
    pop = getattr(req, "pop_overallocated_kv_cache", None)
    start, end = pop() if pop is not None else (req.kv_committed_len, req.kv_allocated_len)
    ps = tree_cache.page_size
    if ps > 1:
        start = -(-start // ps) * ps
    if start < end:
        tree_cache.token_to_kv_pool_allocator._free_row(pool, req.req_pool_idx, start, end)
    if isinstance(pool, HybridReqToTokenPool) and not tree_cache.supports_mamba():
        assert req.mamba_pool_idx is not None, \
            "mamba state is freed while the tree cache does not manage mamba states"
        pool.free_mamba_cache(req)
    pool.free(req)


def maybe_cache_unfinished_req(req, tree_cache, **kwargs):
    if getattr(req, "skip_radix_cache_insert", False):
        return
    tree_cache.cache_unfinished_req(req, **kwargs)


def free_swa_out_of_window_slots(req, pre_len: int, *, sliding_window_size: int,
                                 page_size: int, req_to_token_pool, token_to_kv_pool_allocator,
                                 drop_page_margin: bool = False) -> None:
    """Frees the SWA peers of whole pages that left the window (never below
    cache_protected_len / swa_evict_floor); advances req.swa_evicted_seqlen."""
    assert req.cache_protected_len % page_size == 0, "cache_protected_len must be page aligned"
    floor = max(req.cache_protected_len, getattr(req, "swa_evict_floor", 0) or 0)
    if page_size > 1 and floor > req.cache_protected_len:
        floor = ceil_align(floor, page_size)
    req.swa_evicted_seqlen = max(req.swa_evicted_seqlen, floor)
    threshold = pre_len - sliding_window_size - (0 if drop_page_margin else page_size)
    new = max(req.swa_evicted_seqlen, threshold)
    if page_size > 1:
        new = page_align_floor(new, page_size)
    if new > req.swa_evicted_seqlen:
        slots = req_to_token_pool.row_host(req.req_pool_idx, req.swa_evicted_seqlen, new)
        token_to_kv_pool_allocator.free_swa(slots)
        req.swa_evicted_seqlen = new
