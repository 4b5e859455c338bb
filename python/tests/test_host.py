"""Host-backend tests of the Python binding (NumPy for the DLPack views)."""
import gc

import numpy as np
import pytest

import kvcache as kvc


@pytest.fixture
def ctx():
    with kvc.Context(backend="host", check=True, disk_cache=False) as c:
        yield c


def test_version_and_context(ctx):
    assert kvc.version_number() == 100 * int(kvc.__version__.split(".")[1]) + \
        10000 * int(kvc.__version__.split(".")[0]) + int(kvc.__version__.split(".")[2])
    assert ctx.backend == "host"
    assert ctx.device == -1
    assert ctx.check_mode
    assert "host" in repr(ctx)


# --- Allocator fidelity ----------------------------------------------------------------


def _free_page_of(alloc, slot):
    alloc.free([slot])


def test_token_allocator_reuses_fifo(ctx):
    a = kvc.Allocator(ctx, 8)
    assert a.kind == "token"
    assert a.alloc(3) == [1, 2, 3]
    a.free([2, 1])
    assert a.alloc(6) == [4, 5, 6, 7, 8, 2]
    assert a.alloc(1) == [1]
    with pytest.raises(kvc.OutOfSlots):
        a.alloc(1)
    a.check()


def test_paged_free_prepends_sorted_unique(ctx):
    a = kvc.Allocator(ctx, 40, page_size=4)
    assert a.alloc(20) == list(range(4, 24))
    a.free([17, 8, 18, 9])  # pages {4, 2} -> front [2, 4]
    a.free([5])             # page 1 in front
    assert a.available_size() == 40 - 8
    assert a.alloc(16) == [4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27]
    with pytest.raises(kvc.InvalidArgument):
        a.alloc(6)  # SGLang silently floors


def test_extend_matches_spec_worked_example(ctx):
    """Spec 6.8: free list F = [7, 3, 9, 5, ...], page size 4; request A has a 6-token
    prefix (slots 4..9) and grows to 13, request B is new with 3 tokens."""
    a = kvc.Allocator(ctx, 48, page_size=4)
    a.alloc(48)  # hold every page
    for slot in (20, 36, 12, 28):  # frees go to the front: [7, 3, 9, 5]
        _free_page_of(a, slot)
    rp = kvc.ReqToTokenPool(ctx, 4, 16)
    rows = rp.alloc(2)
    prefix_a = [4, 5, 6, 7, 8, 9]
    dev = ctx.empty(10, "int64")
    out = a.alloc_extend([6, 0], [13, 3], req_pool=rp, req_rows=rows,
                         prefix_slots=[prefix_a, None], out_device=dev)
    want = [10, 11, 28, 29, 30, 31, 12, 36, 37, 38]
    assert out == want
    assert dev.tolist() == want
    assert np.from_dlpack(dev).tolist() == want
    table = np.from_dlpack(rp.table)
    assert table.shape == (5, 16) and table.dtype == np.int32
    assert table[rows[0], :13].tolist() == prefix_a + want[:7]
    assert table[rows[1], :3].tolist() == want[7:]
    assert rp.row(rows[0], 0, 13) == prefix_a + want[:7]
    # Free list is now [5].
    assert a.alloc(4) == [20, 21, 22, 23]
    del table
    gc.collect()


def test_extend_without_pool_needs_last_locs(ctx):
    a = kvc.Allocator(ctx, 48, page_size=4)
    a.alloc(48)
    for slot in (20, 36, 12, 28):
        _free_page_of(a, slot)
    with pytest.raises(kvc.InvalidArgument):
        a.alloc_extend([6, 0], [13, 3])
    assert a.alloc_extend([6, 0], [13, 3], last_locs=[9, -1]) == \
        [10, 11, 28, 29, 30, 31, 12, 36, 37, 38]


def test_decode_and_backup_restore(ctx):
    a = kvc.Allocator(ctx, 40, page_size=4)
    a.alloc(40)
    a.free([12])
    a.free([28])  # free list [7, 3]
    # new lengths [13, 7, 5]: requests 0 and 2 open a page, request 1 continues 25 -> 26
    assert a.alloc_decode([13, 7, 5], last_locs=[0, 25, 0]) == [28, 26, 12]
    a.free([28, 12])
    state = a.backup_state()
    a.alloc(4)
    a.restore_state(state)
    assert a.available_size() == 8
    a.free_group_begin()
    with pytest.raises(kvc.Misuse):
        a.free_group_begin()
    a.free_group_end()
    with a.free_group():
        pass


def test_decode_channel_matches_alloc_decode(ctx):
    pools = [kvc.ReqToTokenPool(ctx, 4, 32) for _ in range(2)]
    allocs = [kvc.Allocator(ctx, 64, page_size=4) for _ in range(2)]
    rows = [p.alloc([0, 0]) for p in pools]
    for a, p, r in zip(allocs, pools, rows):
        a.alloc_extend([0, 0], [3, 4], req_pool=p, req_rows=r)
    ch = kvc.DecodeChannel(allocs[0], pools[0], max_batch=2, depth=2)
    for seq in ([4, 5], [5, 6]):
        want = allocs[1].alloc_decode(seq, req_pool=pools[1], req_rows=rows[1])
        assert ch.alloc(seq, req_rows=rows[0]) == want
        ch.enqueue()
    assert ch.check() == (2, 2)
    assert pools[0].row(rows[0][1])[:6] == pools[1].row(rows[1][1])[:6]
    ch.alloc([6, 7], req_rows=rows[0])
    ch.alloc([7, 8], req_rows=rows[0])
    with pytest.raises(kvc.Busy):  # depth 2 published, none applied
        ch.alloc([8, 9], req_rows=rows[0])
    ch.close()


def test_flow_decode_through_a_channel(ctx):
    pool = kvc.ReqToTokenPool(ctx, 4, 64)
    alloc = kvc.Allocator(ctx, 256, page_size=4)
    flow = kvc.Flow(ctx, pool, alloc)
    out = kvc.DeviceBuffer(ctx, 8 * 8)
    ch = kvc.DecodeChannel(alloc, pool, max_batch=8, depth=4, out_device=out)
    flow.set_decode_channel(ch)
    reqs = [kvc.ReqState(seq_len=5), kvc.ReqState(seq_len=9)]
    flow.alloc_for_extend(reqs)
    for _ in range(3):
        assert flow.alloc_for_decode(reqs) is out
        ch.enqueue()
    assert [r.seq_len for r in reqs] == [8, 12]
    assert ch.check() == (3, 3)
    ch.close()  # still used by the flow: destroyed when the flow lets go of it
    assert ch._ptr is not None
    flow.set_decode_channel(None)
    assert ch._ptr is None
    flow.release(reqs)
    assert alloc.available_size() == 256


# --- Errors --------------------------------------------------------------------------------


def test_exceptions_carry_status_and_message(ctx):
    a = kvc.Allocator(ctx, 8)
    s = a.alloc(2)
    a.free(s)
    with pytest.raises(kvc.Misuse) as ei:
        a.free(s)  # double free
    e = ei.value
    assert isinstance(e, kvc.KvcacheError)
    assert e.status == 9 and e.name == "ERR_MISUSE"
    assert e.message and e.message == ctx.last_error
    assert "kvc_allocator_free" in e.message
    with pytest.raises(kvc.Misuse):
        a.free([0])  # the padding slot
    with pytest.raises(kvc.OutOfSlots) as ei:
        a.alloc(100)
    assert ei.value.status == 2
    with pytest.raises(kvc.InvalidArgument) as ei:
        kvc.Allocator(ctx, 0)
    assert ei.value.status == 1 and ei.value.message
    assert isinstance(ei.value, ValueError)


def test_closed_objects_raise(ctx):
    a = kvc.Allocator(ctx, 8)
    a.close()
    with pytest.raises(kvc.Misuse):
        a.alloc(1)
    a.close()  # idempotent


# --- KV pools and DLPack -----------------------------------------------------------------


def test_dlpack_views_alias_pool_memory(ctx):
    L, H, D, size = 2, 2, 8, 64
    pool = kvc.KVPool(ctx, size, L, kind="mha", dtype="float32", head_num=H, head_dim=D)
    k_view = np.from_dlpack(pool.k_buffer(1))
    v_view = np.from_dlpack(pool.v_buffer(1))
    assert k_view.shape == (size + 1, H, D) and k_view.dtype == np.float32
    assert not k_view.any()
    rng = np.random.default_rng(0)
    loc = np.array([3, 17, 64], dtype=np.int64)
    k = rng.standard_normal((3, H, D), dtype=np.float32)
    v = rng.standard_normal((3, H, D), dtype=np.float32)
    # library write -> visible through the views (same memory)
    pool.set_kv(1, loc, k, v)
    np.testing.assert_array_equal(k_view[loc], k)
    np.testing.assert_array_equal(v_view[loc], v)
    assert not np.from_dlpack(pool.k_buffer(0)).any()  # other layer untouched
    # write through the views -> read back with gather_kv
    k_view[5] = 7.0
    v_view[5] = -3.0
    loc2 = np.array([5, 3], dtype=np.int32)
    k_out = np.zeros((2, H, D), np.float32)
    v_out = np.zeros((2, H, D), np.float32)
    pool.gather_kv(1, loc2, k_out, v_out)
    assert (k_out[0] == 7.0).all() and (v_out[0] == -3.0).all()
    np.testing.assert_array_equal(k_out[1], k[0])
    # move: one launch, all layers
    pool.move(np.array([9], np.int64), np.array([3], np.int64))
    np.testing.assert_array_equal(k_view[9], k[0])
    # views keep the pool alive after close()
    n = kvc.live_exports()
    pool.close()
    assert k_view[9].sum() == k[0].sum()
    del k_view, v_view
    gc.collect()
    assert kvc.live_exports() < n


def test_unconsumed_capsule_is_freed(ctx):
    pool = kvc.KVPool(ctx, 16, 1, dtype="float16", head_num=1, head_dim=8)
    gc.collect()
    before = kvc.live_exports()
    for kw in ({}, {"max_version": (1, 0)}):
        cap = pool.k_buffer(0).__dlpack__(**kw)
        assert kvc.live_exports() == before + 1
        del cap
        gc.collect()
        assert kvc.live_exports() == before
    pool.close()


def test_mla_pool(ctx):
    R, Q = 16, 8
    pool = kvc.KVPool(ctx, 32, 1, kind="mla", dtype="float32", kv_lora_rank=R,
                      qk_rope_head_dim=Q)
    kv = np.from_dlpack(pool.kv_buffer(0))
    assert kv.shape[0] == 33 and kv.size == 33 * (R + Q)
    loc = np.array([4, 7], np.int64)
    nope = np.arange(2 * R, dtype=np.float32).reshape(2, R)
    rope = -np.arange(2 * Q, dtype=np.float32).reshape(2, Q)
    pool.set_mla_kv(0, loc, nope, rope)
    rows = kv.reshape(33, R + Q)
    np.testing.assert_array_equal(rows[4], np.concatenate([nope[0], rope[0]]))
    n_out = np.zeros((2, R), np.float32)
    r_out = np.zeros((2, Q), np.float32)
    pool.get_mla_kv(0, loc, n_out, r_out)
    np.testing.assert_array_equal(n_out, nope)
    np.testing.assert_array_equal(r_out, rope)
    assert pool.describe(0)["shape"][0] == 33


def test_bad_set_kv_raises(ctx):
    pool = kvc.KVPool(ctx, 16, 1, dtype="float32", head_num=1, head_dim=4)
    with pytest.raises(kvc.InvalidArgument):
        pool.set_kv(5, np.array([1], np.int64), np.zeros((1, 4), np.float32),
                    np.zeros((1, 4), np.float32))


# --- Flows and sessions --------------------------------------------------------------------


def test_flow_round_trip(ctx):
    ps = 4
    rp = kvc.ReqToTokenPool(ctx, 8, 64)
    a = kvc.Allocator(ctx, 256, page_size=ps)
    with kvc.Flow(ctx, rp, a) as flow:
        total = a.available_size()
        reqs = [kvc.ReqState(seq_len=5), kvc.ReqState(seq_len=9)]
        out = flow.alloc_for_extend(reqs)
        slots = out.tolist()
        assert slots == list(range(4, 9)) + list(range(12, 21))
        for r in reqs:
            assert r.req_row > 0 and r.kv_allocated_len == r.seq_len == r.kv_committed_len
        assert rp.row(reqs[0].req_row, 0, 5) == slots[:5]
        # decode three steps
        for step in range(3):
            out = flow.alloc_for_decode(reqs)
            dec = out.tolist()
            assert dec[0] == rp.row(reqs[0].req_row)[reqs[0].seq_len - 1]
        assert [r.seq_len for r in reqs] == [8, 12]
        flow.check(reqs)
        assert flow.available()["available"] == total - 2 * 4 - 3 * 4
        flow.release(reqs)
        assert a.available_size() == total
        assert rp.available == 8
        flow.check()


def test_flow_out_of_slots_is_transactional(ctx):
    rp = kvc.ReqToTokenPool(ctx, 4, 64)
    a = kvc.Allocator(ctx, 16, page_size=4)
    flow = kvc.Flow(ctx, rp, a)
    big = kvc.ReqState(seq_len=40)
    with pytest.raises(kvc.OutOfSlots) as ei:
        flow.alloc_for_extend([big])
    assert ei.value.message
    assert big.req_row == 0 and rp.available == 4 and a.available_size() == 16


def test_session_keeps_kv_between_turns(ctx):
    rp = kvc.ReqToTokenPool(ctx, 4, 64)
    a = kvc.Allocator(ctx, 128, page_size=1)
    sessions = kvc.SessionCache(ctx)
    flow = kvc.Flow(ctx, rp, a, cache=sessions)
    r = kvc.ReqState(seq_len=6, session_id=7)
    flow.alloc_for_extend([r])
    flow.alloc_for_decode([r])
    flow.release([r])
    held = sessions.held()
    assert held["requests"] == 1 and held["tokens"] > 0
    # next turn: restore the row and lengths
    r2 = kvc.ReqState(session_id=7)
    assert sessions.match(r2, 10)
    assert r2.req_row != 0 and r2.prefix_len > 0
    r2.seq_len = 10
    flow.alloc_for_extend([r2])
    flow.release([r2])
    sessions.release(flow, 7)
    assert a.available_size() == 128 and rp.available == 4


def test_streams_accept_handles(ctx):
    class FakeStream:
        cuda_stream = 0

    a = kvc.Allocator(ctx, 16)
    rp = kvc.ReqToTokenPool(ctx, 2, 8)
    rows = rp.alloc(1)
    a.alloc_extend([0], [3], req_pool=rp, req_rows=rows, stream=FakeStream())
    a.alloc_decode([4], req_pool=rp, req_rows=rows, stream=0)
    with pytest.raises(TypeError):
        a.alloc_decode([5], req_pool=rp, req_rows=rows, stream="s")


def test_context_close_with_live_children():
    ctx = kvc.Context(backend="host")
    a = kvc.Allocator(ctx, 8)
    ctx.close()  # deferred: a still uses it
    assert a.alloc(1) == [1]
    a.close()    # now both go
    assert ctx._ptr is None
