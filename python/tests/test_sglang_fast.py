"""kvcache.sglang's hot paths through the _kvcfast entry points (issue 18) and through
ctypes give the same results; the entries refuse what ctypes / array('i') refuse. Runs on
whichever path the session has (scripts/test_python.sh runs the suite on both)."""
import array

import pytest

pytest.importorskip("numpy")

import kvcache.sglang as S  # noqa: E402
from kvcache.sglang import _ops as T  # noqa: E402


def L(x):
    return [int(v) for v in T.tolist(x)]


def world(ps=1, rows=4, width=64, size=256):
    pool = S.ReqToTokenPool(rows, width, "cpu")
    if ps == 1:
        alloc = S.TokenToKVPoolAllocator(size, "float16", "cpu", None, False)
    else:
        alloc = S.PagedTokenToKVPoolAllocator(size, ps, "float16", "cpu", None, False)
    return pool, alloc


@pytest.mark.parametrize("ps", [1, 4])
def test_match_keys_agree_and_miss_is_empty(ps):
    pool, alloc = world(ps)
    cache = S.RadixCache(pool, alloc, ps)
    toks = list(range(100, 120))
    r = S.Req(origin_input_ids=toks, fill_ids=list(toks))
    S.ScheduleBatch([r], pool, cache).prepare_for_extend()
    slots = L(pool.row_host(r.req_pool_idx, 0, 20))
    S.release_kv_cache(r, cache)
    keys = [toks[:-1], array.array("i", toks[:-1]), T.host_i32(toks[:-1])]
    got = [cache.match_prefix(S.MatchPrefixParams(S.RadixKey(k))) for k in keys]
    want = slots[:(19 // ps) * ps]
    for m in got:
        assert L(m.device_indices) == want
        assert m.last_device_node == got[0].last_device_node
    miss = cache.match_prefix(S.MatchPrefixParams(S.RadixKey([7, 8, 9])))
    assert T.numel(miss.device_indices) == 0 and miss.device_indices.dtype == T.I64
    # a hit after a miss is a fresh tensor, not the shared empty one
    again = cache.match_prefix(S.MatchPrefixParams(S.RadixKey(toks[:-1])))
    assert L(again.device_indices) == want


def test_match_list_refuses_what_array_i_refuses():
    pool, alloc = world()
    cache = S.RadixCache(pool, alloc, 1)
    with pytest.raises(OverflowError):
        cache.match_prefix(S.MatchPrefixParams(S.RadixKey([1, 2 ** 31])))
    with pytest.raises(TypeError):
        cache.match_prefix(S.MatchPrefixParams(S.RadixKey([1, 2.5])))
    # numpy integers in a list are integers (__index__), as for array('i')
    assert T.numel(cache.match_prefix(
        S.MatchPrefixParams(S.RadixKey([T.np.int64(3), 4]))).device_indices) == 0


def test_decode_seq_lens_dtypes_and_free_misuse():
    """alloc_for_decode with int64 seq_lens_cpu (fast: +1 inside the call) and with an
    int32 vector (the framework add) writes the same table entries; a double free through
    the fused free_row raises as through ctypes."""
    import kvcache
    results = []
    for dt in (T.I64, T.I32):
        pool, alloc = world(rows=2, width=16, size=64)
        cache = S.ChunkCache(pool, alloc, 1)
        reqs = [S.Req(fill_ids=list(range(5))), S.Req(fill_ids=list(range(3)))]
        b = S.ScheduleBatch(reqs, pool, cache)
        b.prepare_for_extend()
        seq = b.seq_lens_cpu
        b.seq_lens_cpu = seq.to(dt) if T.torch is not None else seq.astype(dt)
        out = S.alloc_for_decode(b, 1)
        results.append((L(out), [L(pool.row_host(q.req_pool_idx, 0, 6)) for q in reqs]))
        slots = pool.row_host(reqs[1].req_pool_idx, 0, 3)
        alloc.free(slots)
        with pytest.raises(kvcache.KvcacheError):
            alloc.free(slots)
        with pytest.raises(kvcache.KvcacheError):
            alloc._free_row(pool, reqs[1].req_pool_idx, 0, 3)
        pool.free(reqs[1])
        with pytest.raises(AssertionError):
            pool.free(reqs[1])
    assert results[0] == results[1]


def test_extend_with_prefix_slots_and_kept_rows():
    """alloc_for_extend with one request bringing prefix slots (a radix hit) and one new
    request: the prefix is written into the row (prefix pointer array built lazily)."""
    pool, alloc = world(rows=4, width=32, size=128)
    cache = S.RadixCache(pool, alloc, 1)
    toks = list(range(10))
    r0 = S.Req(origin_input_ids=toks, fill_ids=list(toks))
    S.ScheduleBatch([r0], pool, cache).prepare_for_extend()
    first = L(pool.row_host(r0.req_pool_idx, 0, 10))
    S.release_kv_cache(r0, cache)
    m = cache.match_prefix(S.MatchPrefixParams(S.RadixKey(toks[:9])))
    r1 = S.Req(origin_input_ids=toks, fill_ids=list(toks), prefix_indices=m.device_indices)
    r2 = S.Req(fill_ids=list(range(50, 54)))
    b = S.ScheduleBatch([r2, r1], pool, cache)
    b.prepare_for_extend()
    assert L(pool.row_host(r1.req_pool_idx, 0, 9)) == first[:9]
    assert L(b.out_cache_loc)[:4] == L(pool.row_host(r2.req_pool_idx, 0, 4))


def test_rows_alloc_new_kept_and_short():
    """ReqToTokenPool.alloc: all-new requests (one C call on the fast path), a batch
    with a kept row (the Python path), and a shortage (None, nothing set)."""
    pool = S.ReqToTokenPool(3, 8, "cpu")
    a, b = S.Req(), S.Req()
    assert pool.alloc([a, b]) == [1, 2] and (a.req_pool_idx, b.req_pool_idx) == (1, 2)
    a.kv_committed_len = 4
    c = S.Req()
    assert pool.alloc([a, c]) == [1, 3] and c.req_pool_idx == 3
    d, e = S.Req(), S.Req()
    assert pool.alloc([d, e]) is None and d.req_pool_idx is None and e.req_pool_idx is None
    assert pool.available_size() == 0


@pytest.mark.parametrize("kind", [list, tuple])
def test_radix_finished_and_unfinished_tokens(kind):
    """cache_unfinished_req / cache_finished_req take the request's token ids as lists
    (converted in C on the fast path) or any sequence (array('i')); the tree then matches
    the same prefix either way."""
    pool, alloc = world(1, rows=2, width=64, size=128)
    cache = S.RadixCache(pool, alloc, 1)
    toks = list(range(300, 340))
    r = S.Req(origin_input_ids=kind(toks[:30]), fill_ids=list(toks[:30]))
    S.ScheduleBatch([r], pool, cache).prepare_for_extend()
    r.fill_ids = kind(r.fill_ids) if kind is tuple else r.fill_ids
    cache.cache_unfinished_req(r)
    assert r.cache_protected_len == 30 and T.numel(r.prefix_indices) == 30
    r.output_ids = kind(toks[30:35])  # not committed: only [0, 30) is inserted
    S.release_kv_cache(r, cache)
    m = cache.match_prefix(S.MatchPrefixParams(S.RadixKey(toks[:29])))
    assert T.numel(m.device_indices) == 29
    assert cache.total_size() == 30


@pytest.mark.parametrize("ps", [1, 4])
def test_match_results_kept_only_while_the_tree_holds_them(ps):
    """A repeated match hands out the result kept for its node; once the tree's slots
    there change (evicted, re-cached at other slots) the next match builds a new one with
    the new slots, never the kept values (issue 18 item 4's per-path results)."""
    pool, alloc = world(ps, size=256)
    cache = S.RadixCache(pool, alloc, ps)
    toks = list(range(300, 320))
    key = S.MatchPrefixParams(S.RadixKey(toks[:-1]))
    want_len = (19 // ps) * ps

    def cache_once():
        r = S.Req(origin_input_ids=toks, fill_ids=list(toks))
        S.ScheduleBatch([r], pool, cache).prepare_for_extend()
        slots = L(pool.row_host(r.req_pool_idx, 0, want_len))
        S.release_kv_cache(r, cache)
        return slots

    first = cache_once()
    a = cache.match_prefix(key).device_indices
    b = cache.match_prefix(key).device_indices
    assert L(a) == L(b) == first
    assert b is a  # kept and checked: no new tensor
    # evict, take the freed slots (paged frees go to the front) so that the request
    # cached again lands elsewhere
    cache.evict(S.EvictParams(num_tokens=256))
    assert T.numel(cache.match_prefix(key).device_indices) == 0
    hold = alloc.alloc(32)
    second = cache_once()
    assert second != first
    c = cache.match_prefix(key).device_indices
    assert L(c) == second and L(a) == first  # the old tensor keeps its values
    alloc.free(hold)
    cache.reset()
    assert T.numel(cache.match_prefix(key).device_indices) == 0


@pytest.mark.parametrize("ps,need_sort", [(1, False), (1, True), (4, False), (4, True)])
def test_alloc_launch_route_matches_alloc(ps, need_sort):
    """The CUDA backend's alloc (the library writes the device result: alloc_extend of one
    request) hands out exactly what kvc_allocator_alloc hands out, with the same None on
    shortage and the same refusal of a length that is not page-aligned; here on the host
    backend, where the same call writes the host result only."""
    import kvcache

    def make():
        if ps == 1:
            return S.TokenToKVPoolAllocator(64, "float16", "cpu", None, need_sort)
        return S.PagedTokenToKVPoolAllocator(64, ps, "float16", "cpu", None, need_sort)

    a, b = make(), make()
    steps = [8, 4, ("free", 0), 12, ("free", 2), 16, 40, 4, ("free", 1), 24, 0]
    got_a, got_b = [], []
    for s in steps:
        if isinstance(s, tuple):
            i = s[1]
            a.free(got_a[i])
            b.free(got_b[i])
            continue
        x, y = a._alloc_launch(s), b.alloc(s)
        assert (x is None) == (y is None)
        if x is not None:
            assert L(x) == L(y) and x.dtype == T.I64
        got_a.append(x)
        got_b.append(y)
        assert a.available_size() == b.available_size()
    if ps > 1:
        with pytest.raises(kvcache.KvcacheError):
            a._alloc_launch(ps + 1)
        with pytest.raises(kvcache.KvcacheError):
            b.alloc(ps + 1)


def test_fresh_host_vectors():
    """The helpers behind the fresh result vectors (views of new bytearrays)."""
    if T.fast is not None:
        assert T.fast.memeq(b"abcd", bytearray(b"abcd"), 4)
        assert not T.fast.memeq(b"abcd", bytearray(b"abce"), 4)
        assert T.fast.memeq(None, None, 0)
        with pytest.raises(ValueError):
            T.fast.copy_bytes(None, 8)
        with pytest.raises(ValueError):
            T.fast.widen_i32(None, 2)
    src = T.host_array([5, -1, 7, 2 ** 40])
    got = T.from_address_i64(T.ptr(src), 4)
    assert L(got) == [5, -1, 7, 2 ** 40]
    src[0] = 9
    assert L(got)[0] == 5  # a copy
    assert T.numel(T.from_address_i64(0, 0)) == 0
    z = T.new_host_i64(3)
    assert T.numel(z) == 3 and z.dtype == T.I64
    z[1] = 4
    assert L(z)[1] == 4
    assert T.numel(T.new_host_i64(0)) == 0
    import ctypes
    rows = (ctypes.c_int32 * 4)(3, 1, 2 ** 31 - 1, 0)
    r = T.rows_i64(rows, 3)
    assert L(r) == [3, 1, 2 ** 31 - 1] and r.dtype == T.I64
    assert T.numel(T.rows_i64(rows, 0)) == 0


def test_extend_rows_cpu_is_int64_of_the_rows():
    pool, alloc = world(rows=4, width=16, size=64)
    cache = S.ChunkCache(pool, alloc, 1)
    reqs = [S.Req(fill_ids=list(range(n))) for n in (3, 5)]
    b = S.ScheduleBatch(reqs, pool, cache)
    b.prefix_lens = [0, 0]
    b.extend_num_tokens = 8
    b.seq_lens_cpu = b.seq_lens = T.host_array([3, 5])
    out, rows_dev, rows_cpu = S.alloc_for_extend(b)
    assert rows_cpu.dtype == T.I64 and L(rows_cpu) == [q.req_pool_idx for q in reqs]
    assert L(rows_dev) == L(rows_cpu)


def test_token_list_conversion_in_place_and_general():
    """The list -> int32 conversion (one-digit ints read in place, the rest through
    PyLong_AsLong) gives what array('i') gives, and refuses what it refuses."""
    if T.fast is None:
        pytest.skip("the _kvcfast extension is not in use")
    vals = [0, 1, -1, 5, -5, 2 ** 30 - 1, -(2 ** 30) + 1, 2 ** 30, -(2 ** 30), 2 ** 30 + 7,
            2 ** 31 - 1, -(2 ** 31), True, T.np.int32(9), T.np.int64(-9)]
    out = array.array("i", bytes(4 * len(vals)))
    T.fast.fill_i32(out, vals, None, len(vals))
    assert list(out) == list(array.array("i", [int(v) for v in vals]))
    for bad in (2 ** 31, -(2 ** 31) - 1, 2 ** 40):
        with pytest.raises(OverflowError):
            T.fast.fill_i32(array.array("i", [0]), [bad], None, 1)
    with pytest.raises(TypeError):
        T.fast.fill_i32(array.array("i", [0]), [1.0], None, 1)


def test_token_list_conversion_blocks_and_a_list_that_shrinks():
    """Four compact ints at a time, then item by item from the first block that is not all
    compact; a token whose __index__ empties the list mid-conversion raises instead of
    reading past the list's new end."""
    if T.fast is None:
        pytest.skip("the _kvcfast extension is not in use")
    vals = list(range(-500, 501)) + [2 ** 30 + 3, 7, -(2 ** 31), 11, 12]
    out = array.array("i", bytes(4 * len(vals)))
    T.fast.fill_i32(out, vals, None, len(vals))
    assert list(out) == vals

    class Shrinker:
        def __init__(self, lst):
            self.lst = lst

        def __index__(self):
            del self.lst[:]
            return 5

    toks = list(range(8))
    toks += [Shrinker(toks), 9, 10, 11]
    with pytest.raises(RuntimeError, match="shrank"):
        T.fast.fill_i32(array.array("i", bytes(4 * 12)), toks, None, 12)


def swa_world(ps, rows=16, width=16, size=512):
    pool = S.ReqToTokenPool(rows, width, "cpu")
    kv = S.SWAKVPool(size, size, ps, "float32", 1, 4, swa_attention_layer_ids=[1],
                     full_attention_layer_ids=[0], device="cpu")
    return pool, S.SWATokenToKVPoolAllocator(size, size, ps, "float32", "cpu", kv, False)


@pytest.mark.parametrize("swa", [False, True])
@pytest.mark.parametrize("ps", [1, 4])
def test_extend_rows_written_by_the_launch_into_fresh_slab_vectors(ps, swa):
    """The CUDA path of alloc_for_extend ([swa_]allocator_alloc_extend_ex writes
    req_pool_indices into a slab vector), forced onto the host backend: the vector holds
    the rows as int64, carries the host rows, and a kept one is never written by later
    calls, also across a slab change (capacity 8, batches of 3). The SWA allocator takes
    the same route (session 8: it copied the rows before)."""
    from kvcache.sglang import common
    pool, alloc = swa_world(ps) if swa else world(ps=ps, rows=16, width=16, size=512)
    cache = S.ChunkCache(pool, alloc, ps)
    common._hot(alloc).rows_slab = T.Slab("cpu", cap=8)
    kept = []
    for step in range(5):
        reqs = [S.Req(fill_ids=list(range(n))) for n in (3, 5, 2)]
        b = S.ScheduleBatch(reqs, pool, cache)
        b.prefix_lens = [0, 0, 0]
        b.extend_num_tokens = 10
        b.seq_lens_cpu = b.seq_lens = T.host_array([3, 5, 2])
        out, rows_dev, rows_cpu = S.alloc_for_extend(b)
        assert L(rows_dev) == L(rows_cpu) == [q.req_pool_idx for q in reqs]
        assert rows_dev.dtype == T.I64
        assert T.torch is None or rows_dev._kvc_host is rows_cpu
        assert L(out) == [v for q, n in zip(reqs, (3, 5, 2))
                          for v in L(pool.row_host(q.req_pool_idx, 0, n))]
        kept.append((rows_dev, L(rows_cpu)))
        if step % 2:
            for q in reqs:
                S.release_kv_cache(q, cache)
    for t, want in kept:
        assert L(t) == want


def test_extend_rows_entry_refuses_bad_arity():
    if T.fast is None:
        pytest.skip("ctypes session: no _kvcfast entry")
    with pytest.raises(TypeError):
        T.fast.alloc_extend(*([None] * 11))
    with pytest.raises(TypeError):
        T.fast.alloc_extend(*([None] * 14))


@pytest.mark.parametrize("ps", [1, 4])
def test_swa_extend_rows_device_refusal_changes_nothing(ps):
    """kvc_swa_allocator_alloc_extend_ex with rows_device and no req_pool is refused before
    either side allocates (through the entry the adapter uses)."""
    pool, alloc = swa_world(ps)
    rows_dev = T.host_empty(1)
    pre, seq = T.host_array([0]), T.host_array([5])
    full, swa = alloc.full_available_size(), alloc.swa_available_size()
    if T.fast is not None:
        # The entry takes host vectors as the adapter passes them (T.host_i64_arg: an
        # address under torch, the array itself under NumPy) and rows_device as an address.
        st = T.fast.alloc_extend(True, alloc._h, 1, T.host_i64_arg(pre), T.host_i64_arg(seq), None, None,
                                 None, None, None, None, None, T.ptr(rows_dev))
    else:
        from kvcache.sglang import common
        hot = common._hot(alloc)
        st = common._extend_ex(hot, alloc._h, 1, T.ptr(pre), T.ptr(seq), None,
                               (T.ctypes.c_int32 * 1)(0), None, None, None, T.ptr(rows_dev))
    assert st == 1  # KVC_ERR_INVALID_ARGUMENT
    assert (alloc.full_available_size(), alloc.swa_available_size()) == (full, swa)


@pytest.mark.parametrize("ps", [1, 4])
def test_chunk_cache_release_fused_matches_the_general_path(ps):
    """release_kv_cache on a ChunkCache over a plain allocator (one _kvcfast call when the
    extension is in use) frees the same slots in the same order as the general path
    (cache_finished_req, the tail free, the row release): committed lengths inside a
    page, over-allocated tails, a request without a tail; then a row freed twice raises
    on both."""
    from kvcache.sglang import common

    def run(general):
        pool, alloc = world(ps=ps, rows=8, width=64, size=512)
        cache = S.ChunkCache(pool, alloc, ps)
        if general:
            cache._kvc_release = False
        reqs = [S.Req(fill_ids=list(range(n))) for n in (13, 9, 20)]
        b = S.ScheduleBatch(reqs, pool, cache)
        b.prepare_for_extend()
        for q, (c, a) in zip(reqs, ((10, 13), (9, 9), (6, 20))):
            q.kv_committed_len, q.kv_allocated_len = c, a
        rows = [q.req_pool_idx for q in reqs]
        for q in (reqs[1], reqs[0], reqs[2]):
            S.release_kv_cache(q, cache)
            assert q.req_pool_idx is None
        assert alloc.available_size() == 512
        order = L(alloc.alloc(alloc.available_size()))
        again = S.Req(fill_ids=[1])
        again.req_pool_idx = rows[0]
        with pytest.raises(Exception) as e:
            S.release_kv_cache(again, cache)
        return order, rows, type(e.value), common._release_plan(cache) if not general else None

    fused, general = run(False), run(True)
    assert fused[:3] == general[:3]
    assert bool(fused[3]) == (T.fast is not None)


def test_list_key_kept_lookup_agrees_with_the_other_keys():
    """The list-key match (with _kvcfast: the match and the kept-result check in one C
    call) and an array('i') key hand out the same kept tensor; extra_key namespaces the
    list path too; a miss is the shared empty result."""
    pool, alloc = world(4, size=256)
    cache = S.RadixCache(pool, alloc, 4)
    toks = list(range(500, 517))
    r = S.Req(origin_input_ids=toks, fill_ids=list(toks))
    S.ScheduleBatch([r], pool, cache).prepare_for_extend()
    S.release_kv_cache(r, cache)
    a = cache.match_prefix(S.MatchPrefixParams(S.RadixKey(toks[:-1])))
    b = cache.match_prefix(S.MatchPrefixParams(S.RadixKey(array.array("i", toks[:-1]))))
    c = cache.match_prefix(S.MatchPrefixParams(S.RadixKey(toks[:-1])))
    assert T.numel(a.device_indices) == 16
    assert b.device_indices is a.device_indices and c.device_indices is a.device_indices
    assert a.last_device_node == b.last_device_node == c.last_device_node
    other = cache.match_prefix(S.MatchPrefixParams(S.RadixKey(toks[:-1], extra_key="x")))
    miss = cache.match_prefix(S.MatchPrefixParams(S.RadixKey([1, 2, 3, 4, 5])))
    assert T.numel(other.device_indices) == 0 and miss.device_indices is other.device_indices


def test_extend_prefix_lens_list_read_in_c():
    """alloc_for_extend with batch.prefix_lens a list (as SGLang's): the fast call reads
    the list itself; the same slots as a tensor of the lengths; a non-integer or a short
    list is refused before anything is allocated."""
    def run(pre):
        pool, alloc = world(ps=4, rows=4, width=32, size=128)
        cache = S.ChunkCache(pool, alloc, 4)
        reqs = [S.Req(fill_ids=list(range(n))) for n in (3, 6)]
        b = S.ScheduleBatch(reqs, pool, cache)
        b.prefix_lens = pre
        b.extend_num_tokens = 9
        b.seq_lens_cpu = b.seq_lens = T.host_array([3, 6])
        return L(S.alloc_for_extend(b)[0]), alloc, pool, cache
    assert run([0, 0])[0] == run(T.host_array([0, 0]))[0]
    if T.fast is None:
        pytest.skip("ctypes session: no _kvcfast entry")
    pool, alloc = world(ps=4, rows=4, width=32, size=128)
    free = alloc.available_size()
    for bad, exc in (([0, 0.5], TypeError), ([0], ValueError)):
        with pytest.raises(exc):
            T.fast.alloc_extend(False, alloc._h, 2, bad, T.host_i64_arg(T.host_array([3, 6])),
                                None, None, None, None, None, None, None)
    assert alloc.available_size() == free


@pytest.mark.parametrize("ps", [1, 4])
def test_chunk_cache_release_refused_changes_nothing(ps):
    """A fused release (_kvcfast.release_row) whose tail free would be refused (tail slots
    not held: row entries past what was allocated) changes nothing: the committed slots
    stay held and the row stays held, so the corrected call releases everything. The old
    entry freed the committed slots first and left the request half-released."""
    from kvcache.sglang import common
    if T.fast is None:
        pytest.skip("the fused release is the _kvcfast path")
    pool, alloc = world(ps=ps, rows=4, width=64, size=256)
    cache = S.ChunkCache(pool, alloc, ps)
    req = S.Req(fill_ids=list(range(13)))
    S.ScheduleBatch([req], pool, cache).prepare_for_extend()
    row, avail = req.req_pool_idx, alloc.available_size()
    req.kv_committed_len, req.kv_allocated_len = 10, 16  # row[13:16) was never allocated
    with pytest.raises(Exception, match="padding page 0"):
        S.release_kv_cache(req, cache)
    assert alloc.available_size() == avail
    assert req.req_pool_idx == row and pool.available_size() == 3
    assert T.lib.kvc_allocator_check(alloc._h) == 0  # the audit: no mark left behind
    req.kv_allocated_len = 13
    S.release_kv_cache(req, cache)
    assert alloc.available_size() == 256 and pool.available_size() == 4
    # Slots held but the row released already (its mirror still names them): refused by
    # the row release's own check before anything is freed.
    other = S.Req(fill_ids=list(range(5)))
    S.ScheduleBatch([other], pool, cache).prepare_for_extend()
    got, row = alloc.available_size(), other.req_pool_idx
    assert T.lib.kvc_req_to_token_pool_free(pool._h, row) == 0
    _, (ah, fh, ph, _) = common._release_plan(cache)
    assert T.fast.release_row(ah, fh, ph, row, 5, 5, 5, alloc._scratch(8)) != 0
    assert alloc.available_size() == got


@pytest.mark.parametrize("ps", [1, 4])
def test_match_prefix_entry_agrees_with_the_python_path(ps):
    """RadixCache.match_prefix through _kvcfast.match_prefix (list and int32 buffer keys,
    MatchResult built in C) gives what the Python path gives with the entry switched off:
    equal MatchResults (all four fields, also in vars()), the same kept tensor, extra_key
    namespaces, a miss is the shared empty result, keys given as a RadixKey or the bare
    tokens; other tokens (a tuple) take the general path; a bad tuple raises."""
    if T.fast is None or not hasattr(T.fast, "match_prefix"):
        pytest.skip("ctypes session: no _kvcfast entry")
    pool, alloc = world(ps, size=256)
    cache = S.RadixCache(pool, alloc, ps)
    assert cache._mc is not None
    toks = list(range(300, 321))
    r = S.Req(origin_input_ids=toks, fill_ids=list(toks))
    S.ScheduleBatch([r], pool, cache).prepare_for_extend()
    S.release_kv_cache(r, cache)
    keys = [S.MatchPrefixParams(S.RadixKey(toks[:-1])), S.RadixKey(array.array("i", toks[:-1])),
            S.MatchPrefixParams(S.RadixKey(T.host_i32(toks[:-1]))), toks[:-1],
            S.MatchPrefixParams(S.RadixKey(toks[:-1], extra_key="ns")),
            S.MatchPrefixParams(S.RadixKey([9, 9, 9])), S.MatchPrefixParams(S.RadixKey([]))]
    fast = [cache.match_prefix(k) for k in keys]
    fast_again = cache.match_prefix(keys[0])
    mc, cache._mc = cache._mc, None
    slow = [cache.match_prefix(k) for k in keys]
    cache._mc = mc
    for f, s in zip(fast, slow):
        assert type(f) is S.MatchResult and vars(f).keys() == vars(s).keys()
        assert L(f.device_indices) == L(s.device_indices)
        assert f.last_device_node == s.last_device_node == f.last_host_node
        assert f.host_hit_length == s.host_hit_length == 0
    assert len(L(fast[0].device_indices)) == (20 // ps) * ps
    assert fast_again.device_indices is fast[0].device_indices  # kept, built once
    assert all(f.device_indices is fast[0].device_indices for f in fast[1:4])
    assert fast[4].device_indices is fast[5].device_indices is fast[6].device_indices  # empty
    assert T.fast.match_prefix(cache._mc, tuple(toks[:-1])) is None  # general path's
    assert L(cache.match_prefix(tuple(toks[:-1])).device_indices) == L(fast[0].device_indices)
    with pytest.raises(TypeError):
        T.fast.match_prefix((1, 2), keys[0])
    with pytest.raises(TypeError):  # a token that is not an int, as array('i') refuses
        cache.match_prefix(S.RadixKey([1, "x"]))


def test_match_prefix_entry_off_for_a_subclass_with_its_own_namespace():
    """A subclass that overrides _ns keeps the Python path (the C entry hashes as _ns)."""
    class Own(S.RadixCache):
        def _ns(self, extra):
            return 7

    pool, alloc = world(1, size=64)
    assert Own(pool, alloc, 1)._mc is None


def _new_batch(pool, cache, lens, reqs=None):
    reqs = reqs or [S.Req(fill_ids=list(range(n))) for n in lens]
    b = S.ScheduleBatch(reqs, pool, cache)
    b.prefix_lens = [0] * len(reqs)
    b.extend_num_tokens = sum(lens)
    b.seq_lens_cpu = b.seq_lens = T.host_array(list(lens))
    return b, reqs


@pytest.mark.parametrize("ps", [1, 4])
def test_extend_new_matches_the_step_by_step_path(ps, monkeypatch):
    """alloc_for_extend of new requests through _kvcfast.extend_new (rows, req_pool_idx,
    the extend and the int64 rows in one call) hands out the same slots, rows and table
    entries as the steps one by one (the entry switched off), over a sequence of batches
    with releases in between, a batch with a kept row (the general path) included."""
    from kvcache.sglang import common

    def run(fused):
        if not fused:
            monkeypatch.setattr(common, "_EXTEND_NEW", None)
        pool, alloc = world(ps=ps, rows=6, width=64, size=256)
        cache = S.ChunkCache(pool, alloc, ps)
        got = []
        live = []
        for lens in ((5, 9, 3), (12,), (7, 1)):
            b, reqs = _new_batch(pool, cache, lens)
            out, rows_dev, rows_cpu = S.alloc_for_extend(b)
            assert L(rows_dev) == L(rows_cpu) == [q.req_pool_idx for q in reqs]
            assert rows_cpu.dtype == T.I64
            got.append((L(out), L(rows_cpu),
                        [L(pool.row_host(q.req_pool_idx, 0, n)) for q, n in zip(reqs, lens)]))
            for q, n in zip(reqs, lens):
                q.kv_committed_len = q.kv_allocated_len = n
            live += reqs
            S.release_kv_cache(live.pop(0), cache)
        kept = live[0]  # a chunked continuation: its row is kept
        kept.is_chunked = 1
        b, reqs = _new_batch(pool, cache, (4,))
        b.reqs = [kept] + reqs
        n0 = kept.kv_committed_len
        kept.prefix_indices = pool.row_host(kept.req_pool_idx, 0, n0)
        kept.fill_ids = list(range(n0 + 2))
        b.prefix_lens = [n0, 0]
        b.extend_num_tokens = 6
        b.seq_lens_cpu = b.seq_lens = T.host_array([n0 + 2, 4])
        out, _, rows_cpu = S.alloc_for_extend(b)
        got.append((L(out), L(rows_cpu), L(pool.row_host(kept.req_pool_idx, 0, n0 + 2))))
        return got, alloc.available_size(), pool.available_size()

    assert run(True) == run(False)


def test_extend_new_failures_change_nothing_or_keep_the_rows():
    """The fused extend's failures as SGLang's steps leave them: rows short -> RuntimeError,
    nothing taken; KV short -> RuntimeError, the rows stay with the requests; a prefix
    shorter than its length -> ValueError after the rows are taken (as the general path);
    a request refusing its req_pool_idx -> its error (fused: the rows given back)."""
    pool, alloc = world(ps=1, rows=2, width=32, size=16)
    cache = S.ChunkCache(pool, alloc, 1)
    b, reqs = _new_batch(pool, cache, (2, 2, 2))
    with pytest.raises(RuntimeError, match="alloc_req_slots"):
        S.alloc_for_extend(b)
    assert all(q.req_pool_idx is None for q in reqs)
    assert pool.available_size() == 2 and alloc.available_size() == 16
    b, reqs = _new_batch(pool, cache, (10, 10))
    with pytest.raises(RuntimeError, match="Prefill out of memory"):
        S.alloc_for_extend(b)
    assert [q.req_pool_idx for q in reqs] == [1, 2] and pool.available_size() == 0
    assert alloc.available_size() == 16
    for q in reqs:
        pool.free(q)
    b, reqs = _new_batch(pool, cache, (3, 4))
    b.prefix_lens = [0, 2]  # prefix_indices of reqs[1] is empty
    with pytest.raises(ValueError, match="prefix_indices"):
        S.alloc_for_extend(b)
    assert reqs[1].req_pool_idx is not None and pool.available_size() == 0
    for q in reqs:
        pool.free(q)

    class Refusing(S.Req):
        def __setattr__(self, name, value):
            if name == "req_pool_idx" and value is not None:
                raise AttributeError("no row for me")
            object.__setattr__(self, name, value)

    good = S.Req(fill_ids=[1, 2])
    b, reqs = _new_batch(pool, cache, (2, 2), reqs=[good, Refusing(fill_ids=[1, 2])])
    with pytest.raises(AttributeError, match="no row for me"):
        S.alloc_for_extend(b)
    assert alloc.available_size() == 16
    if T.fast is not None and hasattr(T.fast, "extend_new"):  # (the steps keep good's row)
        assert good.req_pool_idx is None and pool.available_size() == 2
        with pytest.raises(TypeError):
            T.fast.extend_new(False, alloc._h, pool._h, [], None, None, None, None, None, None,
                              None)


class _Plain:
    """A request with the lengths and no pop methods (a duck-typed Req)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


@pytest.mark.parametrize("ps", [1, 4])
def test_release_req_reads_what_the_python_path_reads(ps):
    """The fused ChunkCache release (_kvcfast.release_req) takes the lengths from the pop
    methods when the request has them and from kv_committed_len / kv_allocated_len
    otherwise, accepts any 2-sequence from pop_overallocated_kv_cache, and frees what the
    general path frees; on the fused path a bad pop result raises with nothing freed."""
    def run(general):
        pool, alloc = world(ps=ps, rows=4, width=64, size=256)
        cache = S.ChunkCache(pool, alloc, ps)
        if general:
            cache._kvc_release = False
        reqs = [S.Req(fill_ids=list(range(n))) for n in (13, 20, 6)]
        S.ScheduleBatch(reqs, pool, cache).prepare_for_extend()
        plain = _Plain(req_pool_idx=reqs[0].req_pool_idx, kv_committed_len=10,
                       kv_allocated_len=13)
        S.release_kv_cache(plain, cache)
        assert plain.req_pool_idx is None
        listed = reqs[1]
        listed.pop_overallocated_kv_cache = lambda: [6, 20]
        listed.kv_committed_len = 6
        bad = reqs[2]
        held = (alloc.available_size(), pool.available_size(), bad.req_pool_idx)
        if not general and T.fast is not None:  # (the general path frees committed first)
            for res, msg in (((1, 2, 3), "too many values"), ((1,), "not enough values")):
                bad.pop_overallocated_kv_cache = lambda: res
                with pytest.raises(ValueError, match=msg):
                    S.release_kv_cache(bad, cache)
                assert (alloc.available_size(), pool.available_size(),
                        bad.req_pool_idx) == held
        bad.pop_overallocated_kv_cache = lambda: (6, 6)
        S.release_kv_cache(bad, cache)
        S.release_kv_cache(listed, cache)
        return held, L(alloc.alloc(alloc.available_size())), pool.available_size()

    fused, general = run(False), run(True)
    assert fused == general


@pytest.mark.parametrize("ps", [1, 4])
def test_radix_bind_from_the_token_scratch_matches_the_copying_bind(ps):
    """cache_finished_req / cache_unfinished_req bind the tokens from the cache's reused
    int32 scratch (lists with _kvcfast: nothing copied, the scratch grown for a longer
    request) and give the same tree as the copying bind of an array('i')."""
    from kvcache.sglang import _cache

    def run(copying):
        pool, alloc = world(ps, rows=4, width=128, size=512)
        cache = S.RadixCache(pool, alloc, ps)
        if copying:
            cache._tokens = _cache._tokens_i32
        for n, base in ((9, 0), (40, 0), (1200 // 16, 1000), (23, 5000)):
            toks = list(range(base, base + n))
            r = S.Req(origin_input_ids=toks[:n - 3], fill_ids=list(toks[:n - 3]))
            S.ScheduleBatch([r], pool, cache).prepare_for_extend()
            cache.cache_unfinished_req(r)
            r.output_ids = toks[n - 3:]
            r.kv_committed_len = n - 3
            S.release_kv_cache(r, cache)
        keys = [S.MatchPrefixParams(S.RadixKey(list(range(b, b + k))))
                for b, k in ((0, 40), (1000, 75), (5000, 23), (7, 3))]
        got = [L(cache.match_prefix(k).device_indices) for k in keys]
        return got, cache.total_size(), alloc.available_size()

    fused = run(False)
    assert [len(g) for g in fused[0]] == [(k - 3) // ps * ps for k in (40, 75, 23)] + [0]
    assert fused == run(True)
