"""kvcache.swa_radix: the SWA radix cache, standalone and as an SWA Flow's cache (host)."""
import pytest

import kvcache as kvc
from kvcache.swa_radix import SWARadixCache


@pytest.fixture
def ctx():
    c = kvc.Context(backend="host", check=True)
    yield c
    c.close()


def test_exported():
    assert kvc.SWARadixCache is SWARadixCache
    assert issubclass(kvc.SWARadixCache, kvc.RadixCache)


def test_window_rule_and_tombstones(ctx):
    # Window 4: [1..10] inserted with its SWA freed below 4 is a tombstone [1..4] and a
    # live [5..10]; a match is valid where >= 4 live tokens follow the tombstone.
    cache = SWARadixCache(ctx, num_slots=1024, sliding_window=4)
    t = list(range(1, 11))
    assert cache.insert(t, list(range(101, 111)), swa_evicted_seqlen=4) == 0
    s = cache.sizes()
    assert (s["cached"], s["swa_cached"], s["evictable"], s["swa_evictable"]) == (10, 6, 10, 6)
    n, slots, _ = cache.match_prefix(t)
    assert n == 10 and slots[-1] == 110
    assert cache.match_prefix(t[:8])[0] == 8   # 4 live tokens after the tombstone
    assert cache.match_prefix(t[:7])[0] == 0   # 3: no valid end but the root
    assert cache.match_prefix(t[:3])[0] == 0
    # A path without a tombstone is valid anywhere, shorter than a window included.
    assert cache.insert([50, 51, 52], [201, 202, 203]) == 0
    assert cache.match_prefix([50, 51])[0] == 2
    with pytest.raises(kvc.InvalidArgument):  # a negative evicted length: nothing changed
        cache.insert([80, 81], [301, 302], swa_evicted_seqlen=-1)
    assert cache.sizes()["cached"] == 13
    cache.check()
    with pytest.raises(NotImplementedError):
        cache.dump()
    cache.reset()
    assert cache.sizes()["cached"] == 0
    cache.close()


def test_locks_and_early_swa_release(ctx):
    # Nodes [1..3] [4..6] [7..9], window 4: a lock on the deepest pins FULL on all 9
    # tokens, SWA on the last two nodes (6 tokens: the first that cover 4).
    cache = SWARadixCache(ctx, num_slots=1024, sliding_window=4)
    t = list(range(1, 10))
    for k in (3, 6, 9):
        cache.insert(t[:k], list(range(101, 101 + k)))
    _, _, node = cache.match_prefix(t)
    r = cache.lock(node)
    assert r != 0
    s = cache.sizes()
    assert (s["protected"], s["swa_protected"], s["swa_evictable"]) == (9, 6, 3)
    r2 = cache.unlock_swa(node, r)
    assert r2 == 0
    s = cache.sizes()
    assert (s["protected"], s["swa_protected"]) == (9, 0)
    with pytest.raises(kvc.Misuse):  # the SWA part is released already
        cache.unlock(node, r)
    cache.unlock(node, r2)
    assert cache.sizes()["protected"] == 0
    with pytest.raises(kvc.Misuse):
        cache.unlock(node)
    cache.check()
    cache.reset()
    cache.close()


def _conserve(alloc, cache, held_full=0, held_swa=0):
    s = cache.sizes()
    assert alloc.full_available_size() + held_full + s["cached"] == alloc.size_full
    assert alloc.swa_available_size() + held_swa + s["swa_cached"] == alloc.size_swa
    alloc.check()
    cache.check()


def test_flow_window_eviction_then_reuse(ctx):
    # Window 8, page 1. Request a: 16-token prompt, 24 decoded; its out-of-window SWA KV
    # is freed as it decodes, so at release its first tokens are tombstones. Request b
    # (a's 40 tokens + 8 of its own) still matches all 40: >= 8 live tokens end there.
    rp = kvc.ReqToTokenPool(ctx, 8, 256)
    alloc = kvc.SWAAllocator(ctx, 256, 96)
    cache = SWARadixCache(ctx, num_slots=256, sliding_window=8)
    flow = kvc.Flow(ctx, rp, alloc, cache=cache, sliding_window=8)
    toks = list(range(40))
    a = kvc.ReqState(seq_len=16)
    cache.bind(a, toks[:16])
    assert cache.match(a) == 0
    flow.alloc_for_extend([a])
    for i in range(24):
        flow.alloc_for_decode([a])
        cache.bind(a, toks[:17 + i])
    a.kv_committed_len = a.seq_len
    assert a.seq_len == 40 and a.swa_evicted_seqlen > 0
    _conserve(alloc, cache, 40, 40 - a.swa_evicted_seqlen)
    evicted = a.swa_evicted_seqlen
    flow.release([a])
    _conserve(alloc, cache)
    s = cache.sizes()
    assert (s["cached"], s["swa_cached"]) == (40, 40 - evicted)
    b = kvc.ReqState(seq_len=48)
    cache.bind(b, toks + [1000 + i for i in range(8)])
    assert cache.match(b) == 40
    assert cache.swa_lock(b) != 0
    s = cache.sizes()
    # The insert capped the leaf's live part at one window (a split at 32): the SWA lock
    # pins that last node, 8 tokens.
    assert (s["protected"], s["swa_protected"]) == (40, 8)
    flow.alloc_for_extend([b])
    b.kv_committed_len = b.seq_len
    flow.check([b])
    flow.release([b])
    _conserve(alloc, cache)
    assert cache.swa_lock(b) == 0
    s = cache.sizes()
    assert cache.evict(s["cached"], flow, s["swa_cached"]) == (48, 48 - evicted)
    _conserve(alloc, cache)
    assert cache.sizes()["cached"] == 0
    cache.unbind(a)
    cache.unbind(b)


def test_swa_eviction_tombstones_an_inner_node(ctx):
    rp = kvc.ReqToTokenPool(ctx, 4, 64)
    alloc = kvc.SWAAllocator(ctx, 64, 64)
    cache = SWARadixCache(ctx, num_slots=64, sliding_window=4)
    flow = kvc.Flow(ctx, rp, alloc, cache=cache, sliding_window=4)
    f = alloc.alloc(12)
    fl = [int(x) for x in f]
    # Inner A [1..4] with leaves B [5..8] and C [20..23].
    cache.insert([1, 2, 3, 4, 5, 6, 7, 8], fl[:8], flow)
    cache.insert([1, 2, 3, 4, 20, 21, 22, 23], fl[:4] + fl[8:12], flow)
    _conserve(alloc, cache)
    # C's path locked (SWA: C alone covers the window). SWA eviction in LRU order: B, an
    # unlocked leaf, goes whole (4 full + 4 SWA); A, full-locked through C, becomes a
    # tombstone (4 SWA). C stays a valid match: 4 live tokens after A.
    y = [1, 2, 3, 4, 20, 21, 22, 23]
    _, _, nc = cache.match_prefix(y)
    r = cache.lock(nc)
    assert cache.sizes()["swa_protected"] == 4
    assert cache.evict(0, flow, 100) == (4, 8)
    s = cache.sizes()
    assert (s["cached"], s["swa_cached"]) == (8, 4)
    _conserve(alloc, cache)
    assert cache.match_prefix(y)[0] == 8
    assert cache.match_prefix([1, 2, 3, 4, 5, 6, 7, 8])[0] == 0
    with pytest.raises(kvc.OutOfSlots):  # everything left is locked
        cache.evict(0, flow, 4)
    cache.unlock(nc, r)
    # C goes, and takes the childless tombstone A with it.
    assert cache.evict(0, flow, 1) == (8, 4)
    _conserve(alloc, cache)
    assert alloc.full_available_size() == 64 and alloc.swa_available_size() == 64
