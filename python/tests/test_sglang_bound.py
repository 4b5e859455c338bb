"""kvcache.sglang.RadixCache bound to its TokenToKVPoolAllocator (page 1: the tree's held
marks in the allocator's slot states, kvc_radix_cache_bind_allocator): an eviction-heavy
SGLang-style run gives exactly what the unbound tree gives (matches, slots handed out,
sizes, free order); clear / reset / restore / frees of cached slots; who binds."""
import gc

import pytest

pytest.importorskip("numpy")

import kvcache as K  # noqa: E402
import kvcache.sglang as S  # noqa: E402
from kvcache.sglang import _ops as T  # noqa: E402


def L(x):
    return [int(v) for v in T.tolist(x)]


def world(bound, size=160, rows=6, width=128, need_sort=False, policy="lru", mp=None):
    pool = S.ReqToTokenPool(rows, width, "cpu", False)
    alloc = S.TokenToKVPoolAllocator(size, "float16", "cpu", None, need_sort)
    if not bound:
        mp.setattr(S.RadixCache, "bind_token_allocator", False)
    cache = S.RadixCache(S.CacheInitParams(pool, alloc, 1, eviction_policy=policy))
    if not bound:
        mp.undo()
    assert cache.bound is bound
    return pool, alloc, cache


def run_trace(pool, alloc, cache, seed):
    """Conversations that extend their previous turn, a shared system prompt, decode steps,
    retractions, releases inside free groups and explicit evictions, on a pool small enough
    that nearly every prefill evicts. Returns everything SGLang's caller sees."""
    import random
    rng = random.Random(seed)
    conv = [[1000 * c + i for i in range(8)] for c in range(5)]  # 8-token shared stem each
    system = list(range(7, 19))
    seen = []
    for step in range(300):
        c = rng.randrange(5)
        if len(conv[c]) > 90 or rng.random() < 0.05:
            conv[c] = [1000 * c + 500 + step] + system[:rng.randrange(len(system))]
        conv[c] = conv[c] + [rng.randrange(50) for _ in range(rng.randrange(3, 25))]
        toks = list(conv[c])
        r = S.Req(origin_input_ids=toks, fill_ids=list(toks))
        m = cache.match_prefix(S.MatchPrefixParams(key=S.RadixKey(toks[:-1])))
        r.prefix_indices, r.last_node = m.device_indices, m.last_device_node
        r.cache_protected_len = T.numel(m.device_indices)
        cache.inc_lock_ref(r.last_node)
        batch = S.ScheduleBatch([r], pool, cache)
        try:
            out = batch.prepare_for_extend()
        except RuntimeError:  # out of memory with everything locked: SGLang's error
            cache.dec_lock_ref(r.last_node)
            seen.append(("oom", step, alloc.available_size(), cache.total_size()))
            continue
        decode = rng.randrange(4)
        for _ in range(decode):
            batch.prepare_for_decode()
        kind = rng.random()
        if kind < 0.1:
            S.release_kv_cache(r, cache, is_insert=False)  # retraction: nothing cached
        elif kind < 0.25:
            alloc.free_group_begin()
            S.release_kv_cache(r, cache)
            alloc.free_group_end()
        else:
            S.release_kv_cache(r, cache)
        if rng.random() < 0.1:
            got = cache.evict(S.EvictParams(num_tokens=rng.randrange(1, 60))).num_tokens_evicted
        else:
            got = -1
        seen.append((L(m.device_indices), L(out), decode, got, alloc.available_size(),
                     cache.evictable_size(), cache.protected_size()))
    cache._tree.check()  # the C tree's audit (bound: against the allocator's marks)
    # Everything evicted, then the whole free list in its order (FIFO: victims' order too).
    total = cache.total_size()
    ev = cache.evict(S.EvictParams(num_tokens=total)).num_tokens_evicted if total else 0
    n = alloc.available_size()
    ring = L(alloc.alloc(n))
    alloc.free(T.host_i64(ring))
    seen.append((total, ev, n, ring))
    return seen


@pytest.mark.parametrize("need_sort", [False, True])
@pytest.mark.parametrize("policy", ["lru", "lfu", "fifo", "priority"])
def test_bound_trace_matches_unbound(monkeypatch, need_sort, policy):
    a = run_trace(*world(True, need_sort=need_sort, policy=policy, mp=monkeypatch), 11)
    b = run_trace(*world(False, need_sort=need_sort, policy=policy, mp=monkeypatch), 11)
    steps = [s for s in a[:-1] if s[0] != "oom"]
    assert sum(1 for s in steps if s[3] > 0) > 5  # explicit evictions ran
    assert sum(1 for s in steps if s[0]) > 50  # prefix hits
    assert a == b


def test_clear_reset_and_refused_frees(monkeypatch):
    pool, alloc, cache = world(True, size=64, mp=monkeypatch)
    r = S.Req(origin_input_ids=list(range(10)), fill_ids=list(range(10)))
    S.ScheduleBatch([r], pool, cache).prepare_for_extend()
    slots = L(pool.row_host(r.req_pool_idx, 0, 10))
    S.release_kv_cache(r, cache)
    assert cache.total_size() == 10 and alloc.available_size() == 54
    # SGLang-invalid: freeing a slot the tree holds, or clearing under the tree, raises
    # (SGLang would put it on its free list twice); nothing changed.
    with pytest.raises(K.Misuse):
        alloc.free(T.host_i64(slots[3:4]))
    with pytest.raises(K.Misuse):
        alloc.clear()
    assert alloc.available_size() == 54
    m = cache.match_prefix(S.MatchPrefixParams(key=S.RadixKey(list(range(10)))))
    assert L(m.device_indices) == slots
    # SGLang's flush_cache order: reset the tree, then clear the pools. Still bound after.
    cache.reset()
    assert cache.total_size() == 0
    pool.clear()
    alloc.clear()
    assert alloc.available_size() == 64
    r = S.Req(origin_input_ids=list(range(5)), fill_ids=list(range(5)))
    S.ScheduleBatch([r], pool, cache).prepare_for_extend()
    S.release_kv_cache(r, cache)
    s = L(cache.match_prefix(S.MatchPrefixParams(key=S.RadixKey(list(range(5))))).device_indices)
    with pytest.raises(K.Misuse):
        alloc.free(T.host_i64(s[:1]))
    # A backup, then slots handed out and cached since: restoring would free them under the
    # tree, refused; after a reset it goes through.
    state = alloc.backup_state()
    r = S.Req(origin_input_ids=list(range(50, 56)), fill_ids=list(range(50, 56)))
    S.ScheduleBatch([r], pool, cache).prepare_for_extend()
    S.release_kv_cache(r, cache)
    with pytest.raises(K.Misuse):
        alloc.restore_state(state)
    cache.reset()
    alloc.restore_state(state)
    # The unbound twin accepts the same invalid free (kvcache's unbound tree cannot see it).
    pool2, alloc2, cache2 = world(False, size=64, mp=monkeypatch)
    r = S.Req(origin_input_ids=list(range(10)), fill_ids=list(range(10)))
    S.ScheduleBatch([r], pool2, cache2).prepare_for_extend()
    s2 = L(pool2.row_host(r.req_pool_idx, 0, 10))
    S.release_kv_cache(r, cache2)
    alloc2.free(T.host_i64(s2[3:4]))


def test_dropped_bound_tree_lets_clear_and_a_new_tree_bind(monkeypatch):
    pool, alloc, cache = world(True, size=64, mp=monkeypatch)
    r = S.Req(origin_input_ids=list(range(10)), fill_ids=list(range(10)))
    S.ScheduleBatch([r], pool, cache).prepare_for_extend()
    S.release_kv_cache(r, cache)
    # A second tree over the same allocator while the first is alive stays unbound.
    other = S.RadixCache(pool, alloc, 1)
    assert other.bound is False
    del other
    # Dropped without reset (SGLang lets it go): clear() collects it and succeeds.
    gc.disable()
    try:
        del cache, r
        pool.clear()
        alloc.clear()
    finally:
        gc.enable()
    assert alloc.available_size() == 64
    fresh = S.RadixCache(pool, alloc, 1)
    assert fresh.bound is True


def test_allocator_outlives_the_bound_tree():
    pool = S.ReqToTokenPool(4, 64, "cpu", False)
    alloc = S.TokenToKVPoolAllocator(64, "float16", "cpu", None, False)
    cache = S.RadixCache(pool, alloc, 1)
    r = S.Req(origin_input_ids=list(range(20)), fill_ids=list(range(20)))
    S.ScheduleBatch([r], pool, cache).prepare_for_extend()
    S.release_kv_cache(r, cache)
    alloc._a.close()  # the tree holds the C allocator: not destroyed yet
    assert cache.evict(S.EvictParams(num_tokens=20)).num_tokens_evicted == 20
    assert alloc.available_size() == 64
    del cache, alloc, pool, r
    gc.collect()


def test_who_binds():
    pool = S.ReqToTokenPool(4, 64, "cpu", False)
    paged = S.PagedTokenToKVPoolAllocator(64, 4, "float16", "cpu", None, False)
    assert S.RadixCache(pool, paged, 4).bound is False  # page 4: never
    tok = S.TokenToKVPoolAllocator(64, "float16", "cpu", None, False)
    assert S.RadixCache(pool, tok, 1).bound is True
