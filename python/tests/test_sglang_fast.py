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
