"""kvcache.sglang scheduler functions (common.py) and prefix caches, driven through
SGLang-style call sequences on the host backend: prefill with cached prefixes, chunked
prefill, decode across page boundaries, retraction, release, out-of-memory."""
import pytest

np = pytest.importorskip("numpy")

import kvcache.sglang as S  # noqa: E402
from kvcache.sglang import _ops as T  # noqa: E402


def L(x):
    return [int(v) for v in T.tolist(x)]


def arr(values):
    return T.host_array(values)


def world(size=40, ps=4, rows=8, width=64, radix=False, need_sort=False):
    pool = S.ReqToTokenPool(rows, width, "cpu", False)
    if ps == 1:
        alloc = S.TokenToKVPoolAllocator(size, "float16", "cpu", None, need_sort)
    else:
        alloc = S.PagedTokenToKVPoolAllocator(size, ps, "float16", "cpu", None, need_sort)
    cls = S.RadixCache if radix else S.ChunkCache
    cache = cls(S.CacheInitParams(pool, alloc, ps))
    return pool, alloc, cache


def row(pool, req, n):
    return L(pool.req_to_token[req.req_pool_idx, :n])


def test_extend_worked_example_through_alloc_for_extend():
    pool, alloc, cache = world()
    alloc.alloc(36)
    for p in (5, 9, 3, 7):
        alloc.free(arr(list(range(4 * p, 4 * p + 4))))
    a = S.Req(fill_ids=list(range(13)), prefix_indices=arr([4, 5, 6, 7, 8, 9]))
    b = S.Req(fill_ids=list(range(3)))
    batch = S.ScheduleBatch([a, b], pool, cache)
    out = batch.prepare_for_extend()
    assert L(out) == [10, 11, 28, 29, 30, 31, 12, 36, 37, 38]
    assert (a.req_pool_idx, b.req_pool_idx) == (1, 2)
    assert L(batch.req_pool_indices) == [1, 2]
    # write_cache_indices' effect: prefix then new slots, in one call.
    assert row(pool, a, 13) == [4, 5, 6, 7, 8, 9, 10, 11, 28, 29, 30, 31, 12]
    assert row(pool, b, 3) == [36, 37, 38]


def test_decode_across_page_boundaries():
    pool, alloc, cache = world(size=64, ps=4)
    reqs = [S.Req(fill_ids=list(range(n))) for n in (3, 4, 5)]
    batch = S.ScheduleBatch(reqs, pool, cache)
    out = batch.prepare_for_extend()
    assert L(out) == [4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15, 16]
    steps = [L(batch.prepare_for_decode()) for _ in range(3)]
    # lengths 3/4/5 -> 4/5/6: r0 fills its page (7), r1 opens page 5 (20), r2 continues (17)
    assert steps[0] == [7, 20, 17]
    assert steps[1] == [24, 21, 18]       # r0 at 5 opens page 6 (24)
    assert steps[2] == [25, 22, 19]
    assert row(pool, reqs[0], 6) == [4, 5, 6, 7, 24, 25]
    assert row(pool, reqs[1], 7) == [8, 9, 10, 11, 20, 21, 22]
    for r in reqs:
        S.release_kv_cache(r, cache)
    assert alloc.available_size() == 64 and pool.available_size() == 8


def test_decode_token_allocator_and_rows_from_requests():
    pool, alloc, cache = world(size=16, ps=1)
    reqs = [S.Req(fill_ids=[1, 2]), S.Req(fill_ids=[3])]
    batch = S.ScheduleBatch(reqs, pool, cache)
    assert L(batch.prepare_for_extend()) == [1, 2, 3]
    batch.req_pool_indices = arr([r.req_pool_idx for r in reqs])  # a tensor kvcache did not make
    assert L(batch.prepare_for_decode()) == [4, 5]
    assert row(pool, reqs[0], 3) == [1, 2, 4]
    assert row(pool, reqs[1], 2) == [3, 5]
    with pytest.raises(ValueError):
        S.alloc_for_decode(batch, 2)


def test_chunked_prefill_chunk_cache():
    pool, alloc, cache = world(size=64, ps=4)
    r = S.Req(origin_input_ids=list(range(10)))
    r.fill_ids = r.origin_input_ids[:4]
    batch = S.ScheduleBatch([r], pool, cache)
    assert L(batch.prepare_for_extend()) == [4, 5, 6, 7]
    r.is_chunked = 1
    S.maybe_cache_unfinished_req(r, cache)
    assert L(r.prefix_indices) == [4, 5, 6, 7]
    row_before = r.req_pool_idx
    r.fill_ids = r.origin_input_ids[:10]
    out = batch.prepare_for_extend()
    assert r.req_pool_idx == row_before      # the chunked request keeps its row
    assert L(out) == [8, 9, 10, 11, 12, 13]
    assert row(pool, r, 10) == list(range(4, 14))
    r.is_chunked = 0
    S.release_kv_cache(r, cache)
    assert alloc.available_size() == 64


def test_over_allocated_tail_freed_from_the_page_after_committed():
    """release_kv_cache frees [ceil_align(committed), allocated) after the cache took
    [0, committed) (speculative decoding over-allocates)."""
    pool, alloc, cache = world(size=64, ps=4)
    r = S.Req(fill_ids=list(range(13)))
    S.ScheduleBatch([r], pool, cache).prepare_for_extend()   # pages 1..4, 13 slots
    r.kv_committed_len = 6                                   # tokens 6..12 speculative
    S.release_kv_cache(r, cache)
    # ChunkCache freed row[0:6) (pages 1, 2); the tail from 8 freed pages 3, 4.
    assert alloc.available_size() == 64
    assert r.req_pool_idx is None and pool.available_size() == 8


def test_retraction_frees_everything_and_resumes():
    pool, alloc, cache = world(size=32, ps=4, radix=True)
    r = S.Req(origin_input_ids=list(range(9)), fill_ids=list(range(9)))
    batch = S.ScheduleBatch([r], pool, cache)
    batch.prepare_for_extend()
    batch.prepare_for_decode()
    assert alloc.available_size() == 32 - 12
    S.release_kv_cache(r, cache, is_insert=False)            # retract: nothing cached
    assert alloc.available_size() == 32 and cache.total_size() == 0
    r.prefix_indices = T.host_empty(0)
    batch = S.ScheduleBatch([r], pool, cache)
    batch.prepare_for_extend()                               # resumed from scratch
    assert r.kv_committed_len == 10


def test_prefill_with_cached_prefix_radix():
    pool, alloc, cache = world(size=64, ps=4, radix=True)
    a = S.Req(origin_input_ids=list(range(100, 110)), fill_ids=list(range(100, 110)))
    S.ScheduleBatch([a], pool, cache).prepare_for_extend()
    slots_a = row(pool, a, 10)
    S.release_kv_cache(a, cache)
    # 8 of 10 tokens cached (page-floored), the unaligned tail freed.
    assert cache.total_size() == 8 and cache.evictable_size() == 8
    assert alloc.available_size() == 64 - 8
    b = S.Req(origin_input_ids=list(range(100, 112)))
    b.fill_ids = list(b.origin_input_ids)
    m = cache.match_prefix(S.MatchPrefixParams(key=S.RadixKey(b.fill_ids[:-1])))
    assert L(m.device_indices) == slots_a[:8]
    b.prefix_indices, b.last_node = m.device_indices, m.last_device_node
    b.cache_protected_len = T.numel(m.device_indices)
    cache.inc_lock_ref(b.last_node)
    assert cache.protected_size() == 8 and cache.evictable_size() == 0
    out = S.ScheduleBatch([b], pool, cache).prepare_for_extend()
    assert T.numel(out) == 4
    assert row(pool, b, 8) == slots_a[:8]
    S.release_kv_cache(b, cache)
    assert cache.total_size() == 12 and cache.protected_size() == 0
    # Eviction under pressure: a 60-token request evicts the cached leaves.
    c = S.Req(origin_input_ids=list(range(60)), fill_ids=list(range(60)))
    S.ScheduleBatch([c], pool, cache).prepare_for_extend()
    assert cache.total_size() == 0
    # Out of memory after eviction: RuntimeError as in SGLang; the row stays taken.
    d = S.Req(fill_ids=list(range(20)))
    with pytest.raises(RuntimeError, match="Prefill out of memory"):
        S.ScheduleBatch([d], pool, cache).prepare_for_extend()
    assert d.req_pool_idx is not None


def test_radix_chunked_prefill_and_duplicates():
    pool, alloc, cache = world(size=64, ps=1, radix=True)
    a = S.Req(origin_input_ids=list(range(6)), fill_ids=list(range(6)))
    S.ScheduleBatch([a], pool, cache).prepare_for_extend()
    S.release_kv_cache(a, cache)
    assert cache.total_size() == 6
    # b computes the same 6 tokens itself (no match taken), chunk by chunk.
    b = S.Req(origin_input_ids=list(range(8)))
    b.fill_ids = b.origin_input_ids[:6]
    batch = S.ScheduleBatch([b], pool, cache)
    batch.prepare_for_extend()
    b.is_chunked = 1
    before = alloc.available_size()
    S.maybe_cache_unfinished_req(b, cache)
    # b's duplicates went back to the allocator; its row now holds the tree's slots.
    assert alloc.available_size() == before + 6
    assert row(pool, b, 6) == row(pool, a, 6) if a.req_pool_idx else True
    assert L(b.prefix_indices) == L(cache.match_prefix(list(range(6))).device_indices)
    assert b.cache_protected_len == 6
    b.fill_ids = list(b.origin_input_ids)
    batch.prepare_for_extend()
    b.is_chunked = 0
    S.release_kv_cache(b, cache)
    assert cache.total_size() == 8
    assert cache.evict(S.EvictParams(num_tokens=8)).num_tokens_evicted == 8
    assert alloc.available_size() == 64


def test_skip_insert_and_evict_helpers():
    pool, alloc, cache = world(size=16, ps=1, radix=True)
    r = S.Req(origin_input_ids=[1, 2, 3], fill_ids=[1, 2, 3], skip_radix_cache_insert=True)
    S.ScheduleBatch([r], pool, cache).prepare_for_extend()
    S.maybe_cache_unfinished_req(r, cache)               # skipped
    S.release_kv_cache(r, cache)
    assert cache.total_size() == 0 and alloc.available_size() == 16
    S.evict_from_tree_cache(None, 5)
    S.evict_from_tree_cache(cache, 5)
    assert "Available tokens: 16" in S.available_and_evictable_str(cache)
    assert L(S.kv_to_page_indices(arr([8, 9, 10, 11, 20, 21]), 4)) == [2, 5]
    assert S.kv_to_page_num(5, 4) == 2 and S.page_align_floor(7, 4) == 4
    assert S.ceil_align(5, 4) == 8


def test_token_slot_helpers_raise_out_of_memory():
    pool, alloc, cache = world(size=8, ps=1)
    with pytest.raises(RuntimeError, match="Out of memory"):
        S.alloc_token_slots(cache, 9)
    out, state = S.alloc_token_slots(cache, 3, backup_state=True)
    assert L(out) == [1, 2, 3]
    palloc_world = world(size=8, ps=4)
    with pytest.raises(RuntimeError, match="Decode out of memory"):
        S.alloc_paged_token_slots_decode(palloc_world[2], arr([1, 1, 1]), arr([1, 1, 1]),
                                         arr([-1, -1, -1]))
    out = S.alloc_paged_token_slots_extend(palloc_world[2], arr([0]), arr([0]), arr([5]),
                                           arr([5]), arr([-1]), 5)
    assert L(out) == [4, 5, 6, 7, 8]


def test_get_last_loc_from_the_mirror():
    pool, alloc, cache = world(size=32, ps=4)
    r = S.Req(fill_ids=list(range(6)))
    S.ScheduleBatch([r], pool, cache).prepare_for_extend()
    rows, pre = arr([r.req_pool_idx, r.req_pool_idx]), arr([6, 0])
    assert L(S.get_last_loc(pool, rows, pre)) == [9, -1]
    assert L(S.get_last_loc(pool.req_to_token, rows, pre)) == [9, -1]   # SGLang's call


def test_decode_oom_leaves_state_unchanged():
    pool, alloc, cache = world(size=8, ps=4)
    reqs = [S.Req(fill_ids=list(range(4))), S.Req(fill_ids=list(range(4)))]
    batch = S.ScheduleBatch(reqs, pool, cache)
    batch.prepare_for_extend()
    with pytest.raises(RuntimeError, match="Decode out of memory"):
        batch.prepare_for_decode()
    assert alloc.available_size() == 0
    assert all(r.kv_allocated_len == 4 for r in reqs)


def test_filter_batch_rows_from_requests():
    pool, alloc, cache = world(size=64, ps=4)
    reqs = [S.Req(fill_ids=list(range(n))) for n in (2, 3, 4)]
    batch = S.ScheduleBatch(reqs, pool, cache)
    batch.prepare_for_extend()
    S.release_kv_cache(reqs[1], cache)
    batch.filter_batch([0, 2])
    out = batch.prepare_for_decode()
    assert L(out) == [6, 8]          # req 1's page 2 came back to the front (LIFO)
    assert row(pool, reqs[2], 5) == [12, 13, 14, 15, 8]
