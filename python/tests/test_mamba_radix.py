"""kvcache.mamba_radix: the Mamba radix cache as a hybrid Flow's cache (host backend)."""
import pytest

import kvcache as kvc
from kvcache.mamba_radix import MambaRadixCache


@pytest.fixture
def ctx():
    c = kvc.Context(backend="host", check=True)
    yield c
    c.close()


def _world(ctx, states=8, track=False):
    rp = kvc.ReqToTokenPool(ctx, 4, 256)
    m = kvc.MambaPool(ctx, states, 2, conv_shapes=[(4, 3)], temporal_shape=(2, 4, 8), conv_dtype="float32",
                      temporal_dtype="float32")
    hyb = kvc.HybridReqToTokenPool(ctx, rp, m, track=track)
    return rp, m, hyb


def test_tree_rules(ctx):
    rp, m, hyb = _world(ctx)
    cache = MambaRadixCache(ctx, hyb, num_slots=1024)
    a, b = m.alloc(2)
    assert cache.insert(list(range(1, 9)), list(range(101, 109)), a) == (0, True)
    assert cache.insert([1, 2, 3, 4, 90, 91], [101, 102, 103, 104, 205, 206], b) == (4, True)
    n, slots, node, state, full = cache.match_prefix(list(range(1, 9)))
    assert (n, state, full) == (8, a, 8) and slots[-1] == 108
    n, _, _, state, full = cache.match_prefix([1, 2, 3, 4, 5, 6])  # no state at 4 or 6
    assert (n, state, full) == (0, 0, 6)
    cache.lock(node)
    s = cache.sizes()
    assert (s["protected"], s["mamba_protected"], s["mamba_cached"]) == (8, 1, 2)
    with pytest.raises(kvc.KvcacheError):
        cache.evict(0, None, mamba_num=1)  # no flow and no free_slots hook: refused
    cache.unlock(node)
    with pytest.raises(kvc.KvcacheError):
        cache.unlock(node)
    cache.check()
    cache.reset()
    m.free([a, b])
    cache.close()


def test_max_states_per_path(ctx):
    rp, m, hyb = _world(ctx)
    cache = MambaRadixCache(ctx, hyb, num_slots=1024, max_states_per_path=2)
    s0, s1, s2 = m.alloc(3)
    cache.insert([1, 2], [101, 102], s0)
    cache.insert([1, 2, 3, 4], [101, 102, 203, 204], s1)
    cache.insert([1, 2, 3, 4, 5, 6], [101, 102, 203, 204, 305, 306], s2)
    s = cache.sizes()
    assert (s["cached"], s["mamba_cached"]) == (6, 2)  # the shallowest state, s0, went
    assert m.available_size() == 6
    assert cache.match_prefix([1, 2])[3] == 0 and cache.match_prefix([1, 2, 3, 4])[3] == s1
    cache.check()
    cache.reset()
    m.free([s1, s2])
    cache.close()
    with pytest.raises(kvc.KvcacheError):
        MambaRadixCache(ctx, hyb, num_slots=1024, max_states_per_path=-1)


def test_hybrid_flow_reuses_prefix_and_state(ctx):
    rp, m, hyb = _world(ctx)
    alloc = kvc.Allocator(ctx, 256, page_size=1)
    cache = MambaRadixCache(ctx, hyb, num_slots=256)
    flow = kvc.Flow(ctx, rp, alloc, hybrid_req_pool=hyb, cache=cache)
    a = kvc.ReqState(seq_len=24)
    cache.bind(a, list(range(24)))
    assert cache.match(a, flow) == 0
    flow.alloc_for_extend([a])
    running = a.mamba_slot
    flow.release([a])  # the running state is donated for its 24 tokens
    s = cache.sizes()
    assert (s["cached"], s["mamba_cached"]) == (24, 1)
    assert cache.match_prefix(list(range(24)))[3] == running
    b = kvc.ReqState(seq_len=30)
    cache.bind(b, list(range(24)) + [500 + i for i in range(6)])
    assert cache.match(b, flow) == 24
    assert b.mamba_slot > 0 and b.mamba_slot != running  # a copy of the state
    flow.alloc_for_extend([b])
    flow.check([b])
    flow.release([b])
    flow.check()
    s = cache.sizes()
    assert cache.evict(s["cached"], flow, mamba_num=s["mamba_cached"]) == (30, 2)
    assert alloc.available_size() == 256 and m.available_size() == 8
    cache.unbind(a)
    cache.unbind(b)


def test_the_context_and_pools_outlive_the_tree():
    # The tree borrows the context and the hybrid pool (its destroy gives states back to
    # the Mamba pool): closing them first must leave them alive until the tree goes.
    c = kvc.Context(backend="host")
    rp, m, hyb = _world(c)
    cache = MambaRadixCache(c, hyb, num_slots=64)
    for h in (hyb, m, rp, c):
        h.close()
    assert c._ptr is not None and hyb._ptr is not None
    cache.close()
    assert c._ptr is None and hyb._ptr is None
