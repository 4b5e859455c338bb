"""kvcache.radix: SGLang's RadixCache as a Flow's cache (host backend)."""
import pytest

import kvcache as kvc
from kvcache.radix import RadixCache


@pytest.fixture
def ctx():
    c = kvc.Context(backend="host", check=True)
    yield c
    c.close()


def test_tree_operations(ctx):
    radix = RadixCache(ctx, num_slots=1024, page_size=1)
    assert radix.insert([1, 2, 3, 4], [11, 12, 13, 14]) == 0
    n, slots, node = radix.match_prefix([1, 2, 3, 9])
    assert (n, slots) == (3, [11, 12, 13])  # the match splits [1,2,3] | [4]
    assert radix.stats()["nodes"] == 2
    radix.lock(node)
    assert radix.sizes() == {"evictable": 1, "protected": 3, "cached": 4}
    radix.unlock(node)
    with pytest.raises(kvc.KvcacheError):
        radix.unlock(node)  # below zero: refused
    assert "len=3" in radix.dump()
    radix.check()
    radix.reset()
    assert radix.sizes()["cached"] == 0
    with pytest.raises(kvc.KvcacheError):
        radix.lock(node)  # a handle from before the reset
    radix.close()


def test_flow_reuses_a_shared_prefix(ctx):
    pool = kvc.ReqToTokenPool(ctx, 8, 512)
    alloc = kvc.Allocator(ctx, 1024, page_size=16)
    radix = RadixCache(ctx, num_slots=1024, page_size=16)
    flow = kvc.Flow(ctx, pool, alloc, cache=radix)
    system = list(range(1000, 1064))
    a = kvc.ReqState(seq_len=100)
    radix.bind(a, system + list(range(36)))
    assert radix.match(a) == 0
    flow.alloc_for_extend([a])
    a_slots = flow.row_slots(a.req_row, 0, 64)
    flow.release([a])  # cache_finished_req: 96 tokens (6 pages) go into the tree
    assert radix.sizes()["cached"] == 96
    b = kvc.ReqState(seq_len=80)
    radix.bind(b, system + list(range(500, 516)))
    assert radix.match(b) == 64  # the shared system prompt
    flow.alloc_for_extend([b])
    assert flow.row_slots(b.req_row, 0, 64) == a_slots
    flow.check([b])
    flow.release([b])
    flow.check()
    cached = radix.sizes()["cached"]
    assert radix.evict(cached, flow) == cached
    assert alloc.available_size() == 1024
    radix.unbind(a)
    radix.unbind(b)
    flow.close()
    radix.close()


def test_bound_allocator_refuses_freeing_a_cached_slot(ctx):
    pool = kvc.ReqToTokenPool(ctx, 8, 256)
    alloc = kvc.Allocator(ctx, 256, page_size=1)
    radix = RadixCache(ctx, num_slots=256, page_size=1)
    radix.bind_allocator(alloc)
    with pytest.raises(kvc.KvcacheError):
        radix.bind_allocator(alloc)  # bound already
    flow = kvc.Flow(ctx, pool, alloc, cache=radix)
    a = kvc.ReqState(seq_len=40)
    radix.bind(a, list(range(40)))
    radix.match(a)
    flow.alloc_for_extend([a])
    slots = flow.row_slots(a.req_row, 0, 40)
    flow.release([a])
    assert radix.sizes()["cached"] == 40
    with pytest.raises(kvc.KvcacheError, match="radix cache"):
        alloc.free(slots[:1])  # the tree holds it
    assert alloc.available_size() == 216
    assert radix.evict(40, flow) == 40
    assert alloc.available_size() == 256
    flow.check()
    radix.unbind(a)
    flow.close()
    alloc.close()  # the tree still holds it: destroyed after the tree
    radix.close()


def test_matched_request_moves_into_a_batch(ctx):
    """A radix match's prefix slots survive RequestBatch.add (the batch re-points at them)."""
    pool = kvc.ReqToTokenPool(ctx, 8, 512)
    alloc = kvc.Allocator(ctx, 1024, page_size=16)
    radix = RadixCache(ctx, num_slots=1024, page_size=16)
    flow = kvc.Flow(ctx, pool, alloc, cache=radix)
    a = kvc.ReqState(seq_len=80)
    radix.bind(a, list(range(80)))
    radix.match(a)
    flow.alloc_for_extend([a])
    a_slots = flow.row_slots(a.req_row, 0, 64)
    flow.release([a])
    b = kvc.ReqState(seq_len=80)
    radix.bind(b, list(range(64)) + list(range(900, 916)))
    assert radix.match(b) == 64
    assert b.prefix_slots == a_slots
    batch = kvc.RequestBatch(4)
    v = batch.add(b)
    radix.move(b, v)
    assert v.prefix_slots == b.prefix_slots
    flow.alloc_for_extend(batch)
    assert flow.row_slots(v.req_row, 0, 64) == a_slots
    flow.release(batch)
    flow.check()
    radix.unbind(v)
    flow.close()
    radix.close()


def test_the_context_outlives_the_tree():
    # A tree borrows its context: closing the context first (or the garbage collector
    # finalizing both in a cycle, in any order) must leave it alive until the tree goes.
    # Under an ASan build the old order was a heap-use-after-free in the tree's destroy.
    c = kvc.Context(backend="host")
    tree = RadixCache(c, 64)
    c.close()
    assert c._ptr is not None
    tree.close()
    assert c._ptr is None
