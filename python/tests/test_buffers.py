"""Buffer arguments (issue 16): zero-copy forms, out= outputs, and the checks that keep a
bad buffer from reaching C. Every entry point that takes a buffer has a test here that
would corrupt memory without the check (run under ASan by scripts/test_python_asan.sh).
Short buffers are fresh copies, never views into a larger array, so that ASan sees their
real bounds."""
import array

import numpy as np
import pytest

import kvcache as kvc


@pytest.fixture
def ctx():
    with kvc.Context(backend="host", check=True, disk_cache=False) as c:
        yield c


class FakeCuda:
    """Device memory as far as the binding can tell (__cuda_array_interface__)."""

    def __init__(self, n, typestr="<i8"):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": typestr,
                                         "data": (0x1000, False), "version": 3,
                                         "strides": None}


def _bad(match):
    return pytest.raises(kvc.InvalidArgument, match=match)


# --- zero-copy inputs and out= -----------------------------------------------------------


def test_alloc_out_numpy_is_written_in_place(ctx):
    a = kvc.Allocator(ctx, 32)
    out = np.zeros(4, np.int64)
    assert a.alloc(4, out=out) is out
    assert out.tolist() == [1, 2, 3, 4]
    with _bad("out must be int64"):
        a.alloc(2, out=np.zeros(2, np.int32))
    with _bad("out has room for 1 elements, 2 needed"):
        a.alloc(2, out=np.zeros(1, np.int64))
    with _bad("out is read-only"):
        ro = np.zeros(2, np.int64)
        ro.flags.writeable = False
        a.alloc(2, out=ro)
    with _bad("out must be C-contiguous"):
        a.alloc(2, out=np.zeros(4, np.int64)[::2])
    assert a.available_size() == 28  # nothing allocated by the refused calls
    a.free(out)  # NumPy int64 by pointer
    assert a.available_size() == 32


def test_every_buffer_form_frees(ctx):
    a = kvc.Allocator(ctx, 64)
    forms = [lambda s: s, tuple, lambda s: array.array("q", s), lambda s: np.array(s),
             lambda s: np.array(s, np.int32), lambda s: np.array(s)[::-1],
             lambda s: memoryview(array.array("q", s)), lambda s: array.array("i", s),
             lambda s: np.array(s).astype(">i8")]
    for form in forms:
        slots = a.alloc(3)
        a.free(form(slots))
        assert a.available_size() == 64, form
    with _bad("slots must hold integers"):
        a.free([1.5])
    with _bad("slots must be int64"):
        a.free(np.zeros(2, np.float32))
    with _bad("slots must be a contiguous int64 vector"):  # bytes are uint8 data
        a.free(bytes(array.array("q", [1])))


def test_alloc_decode_and_extend_outputs(ctx):
    a = kvc.Allocator(ctx, 64, page_size=4)
    rp = kvc.ReqToTokenPool(ctx, 4, 32)
    rows = np.array(rp.alloc(2), np.int32)
    out = np.zeros(7, np.int64)
    dev = ctx.empty(7, "int64")
    a.alloc_extend(np.zeros(2, np.int64), np.array([3, 4]), req_pool=rp, req_rows=rows,
                   out=out, out_device=dev)
    assert out.tolist() == dev.tolist() == [4, 5, 6, 8, 9, 10, 11]
    with _bad("out has room for 6 elements, 7 needed"):
        a.alloc_extend([0, 0], [3, 4], last_locs=[-1, -1], out=np.zeros(6, np.int64))
    with _bad("out_device has room for 6 elements, 7 needed"):
        a.alloc_extend([0, 0], [3, 4], last_locs=[-1, -1], out_device=ctx.empty(6, "int64"))
    with _bad("out_device must be int64"):
        a.alloc_extend([0, 0], [3, 4], last_locs=[-1, -1], out_device=ctx.empty(7, "int32"))
    with _bad(r"seq_lens\[1\] = 4 < prefix_lens\[1\] = 5"):
        a.alloc_extend([0, 5], [3, 4], last_locs=[-1, -1], out=np.zeros(8, np.int64))
    with _bad("prefix_lens has 1 entries, seq_lens 2"):
        a.alloc_extend([0], [3, 4])
    with _bad("last_locs has 1 elements, 2 needed"):
        a.alloc_extend([0, 0], [3, 4], last_locs=[-1])
    with _bad("req_rows has 1 elements, 2 needed"):
        a.alloc_extend([0, 0], [3, 4], req_pool=rp, req_rows=rows[:1].copy())
    with _bad(r"prefix_slots\[0\] has 2 elements, 3 needed"):
        a.alloc_extend([3, 0], [5, 4], req_pool=rp, req_rows=rows,
                       prefix_slots=[[4, 5], None])
    one = np.zeros(2, np.int64)
    assert a.alloc_decode(np.array([4, 5], np.int32), req_pool=rp, req_rows=rows,
                          out=one) is one
    assert one.tolist() == [7, 12]
    with _bad("out must be int64"):
        a.alloc_decode([5, 6], req_pool=rp, req_rows=rows, out=np.zeros(2, np.int32))
    with _bad("out has room for 1 elements, 2 needed"):
        a.alloc_decode([5, 6], req_pool=rp, req_rows=rows, out=np.zeros(1, np.int64))
    with _bad("out_device has room for 1 elements"):
        a.alloc_decode([5, 6], req_pool=rp, req_rows=rows, out_device=ctx.empty(1, "int64"))
    with _bad("req_rows must be int32"):
        a.alloc_decode([5, 6], req_pool=rp, req_rows=np.zeros(2, np.float32))
    a.check()


def test_host_vs_device_memory(ctx):
    a = kvc.Allocator(ctx, 16)
    with _bad("out_device must be host memory"):  # the host backend's "device" is host
        a.alloc_decode([1], last_locs=[0], out_device=FakeCuda(1))
    with _bad("seq_lens must be host memory"):
        a.alloc_decode(FakeCuda(1))
    pool = kvc.KVPool(ctx, 16, 1, dtype="float32", head_num=1, head_dim=4)
    with _bad("loc must be host memory"):
        pool.set_kv(0, FakeCuda(1), np.zeros((1, 4), np.float32), np.zeros((1, 4), np.float32))


def test_decode_channel_buffers(ctx):
    rp = kvc.ReqToTokenPool(ctx, 2, 16)
    a = kvc.Allocator(ctx, 32, page_size=4)
    with _bad("out_device has room for 2 elements, 4 needed"):
        kvc.DecodeChannel(a, rp, max_batch=4, depth=2, out_device=ctx.empty(2, "int64"))
    ch = kvc.DecodeChannel(a, rp, max_batch=4, depth=2)
    rows = rp.alloc(1)
    a.alloc_extend([0], [2], req_pool=rp, req_rows=rows)
    with _bad("out has room for 0 elements, 1 needed"):
        ch.alloc([3], req_rows=rows, out=np.zeros(0, np.int64))
    out = np.zeros(1, np.int64)
    assert ch.alloc(np.array([3]), req_rows=np.array(rows, np.int32), out=out) is out
    assert out.tolist() == [6]
    ch.enqueue()
    ch.close()


# --- KV pools ------------------------------------------------------------------------------


def test_set_kv_and_gather_check_rows(ctx):
    pool = kvc.KVPool(ctx, 16, 1, dtype="float32", head_num=2, head_dim=4, v_head_dim=2)
    loc = np.array([3, 4, 5], np.int64)
    k = np.arange(24, dtype=np.float32).reshape(3, 8)
    v = np.arange(12, dtype=np.float32).reshape(3, 4)
    pool.set_kv(0, loc, k, v)
    with _bad("k has 92 bytes, 96 needed"):
        pool.set_kv(0, loc, k.ravel()[:23].copy(), v)
    with _bad("v has 32 bytes, 48 needed"):
        pool.set_kv(0, loc, k, v[:2].copy())
    with _bad("loc has 3 elements, 4 needed"):
        pool.set_kv(0, loc, k, v, n=4)
    with _bad("k has 96 bytes, 128 needed"):  # a stride past the buffer
        pool.set_kv(0, loc, k, v, k_stride=12)
    with _bad("k is float16 but the dtype argument says float32"):
        pool.set_kv(0, loc, k.astype(np.float16), v, src_dtype="float32")
    with _bad("k must be C-contiguous"):
        pool.set_kv(0, loc, np.zeros((3, 16), np.float32)[:, ::2], v)
    with _bad(r"loc must be int64 \(got float64\)"):
        pool.set_kv(0, loc.astype(np.float64), k, v)
    pool.set_kv(0, loc.astype(np.int32), k, v)  # int32 locs go by pointer
    kout, vout = np.zeros((3, 8), np.float32), np.zeros((3, 4), np.float32)
    pool.gather_kv(0, loc, kout, vout)
    assert (kout == k).all() and (vout == v).all()
    with _bad("k_out has 64 bytes, 96 needed"):
        pool.gather_kv(0, loc, np.zeros((2, 8), np.float32), vout)
    with _bad("v_out has 32 bytes, 48 needed"):
        pool.gather_kv(0, loc, kout, np.zeros((2, 4), np.float32))
    ro = np.zeros((3, 8), np.float32)
    ro.flags.writeable = False
    with _bad("k_out is read-only"):
        pool.gather_kv(0, loc, ro, vout)
    with _bad("k_scale_device has 0 elements, 1 needed"):
        pool.set_kv(0, loc, k, v, k_scale_device=np.zeros(0, np.float32))
    with _bad("src_loc has 2 elements, 3 needed"):
        pool.move(loc, loc[:2].copy())
    pool.move(np.array([9, 10, 11]), loc)
    pool.gather_kv(0, [9, 10, 11], kout, vout)
    assert (kout == k).all()


def test_mla_rows_checked(ctx):
    R, P = 8, 4
    pool = kvc.KVPool(ctx, 16, 1, kind="mla", dtype="float32", kv_lora_rank=R,
                      qk_rope_head_dim=P)
    loc = np.array([1, 2], np.int64)
    nope, rope = np.ones((2, R), np.float32), np.full((2, P), 2, np.float32)
    pool.set_mla_kv(0, loc, nope, rope)
    with _bad("rope has 16 bytes, 32 needed"):
        pool.set_mla_kv(0, loc, nope, rope[:1].copy())
    with _bad("nope has 32 bytes, 64 needed"):
        pool.set_mla_kv(0, loc, nope[:1].copy(), rope)
    n_out, r_out = np.zeros((2, R), np.float32), np.zeros((2, P), np.float32)
    pool.get_mla_kv(0, loc, n_out, r_out)
    assert (n_out == 1).all() and (r_out == 2).all()
    with _bad("rope_out has 16 bytes, 32 needed"):
        pool.get_mla_kv(0, loc, n_out, np.zeros((1, P), np.float32))
    with _bad("k has 48 bytes, 96 needed"):  # set_kv writes whole latent rows
        pool.set_kv(0, loc, np.zeros((1, R + P), np.float32))
    with _bad("k_out has 48 bytes, 96 needed"):
        pool.gather_kv(0, loc, np.zeros((1, R + P), np.float32))


# --- request pool, flows, memory helpers ------------------------------------------------------


def test_req_pool_alloc_out(ctx):
    rp = kvc.ReqToTokenPool(ctx, 4, 8)
    out = np.full(3, 7, np.int32)
    assert rp.alloc(2, out=out) is out and out.tolist() == [1, 2, 7]
    rows = np.array([2, 0], np.int32)  # keep row 2, take a new one, in place
    assert rp.alloc(rows, out=rows) is rows and rows.tolist() == [2, 3]
    with _bad("out has room for 1 elements, 2 needed"):
        rp.alloc(2, out=np.zeros(1, np.int32))
    with _bad("out must be int32"):
        rp.alloc(1, out=np.zeros(1, np.int64))
    assert rp.available == 1


def test_req_pool_row_bounds_and_write(ctx):
    rp = kvc.ReqToTokenPool(ctx, 2, 8)
    row = rp.alloc(1)[0]
    rp.write(row, 0, np.array([5, 6, 7]))
    assert rp.row(row, 0, 3) == [5, 6, 7]
    out = np.zeros(3, np.int32)
    assert rp.row(row, 0, 3, out=out) is out and out.tolist() == [5, 6, 7]
    with _bad(r"row range \[0, 9\) outside \[0, 8\)"):
        rp.row(row, 0, 9)
    with _bad(r"row range \[4, 2\)"):
        rp.row(row, 4, 2)
    with _bad("out has room for 2 elements, 3 needed"):
        rp.row(row, 0, 3, out=np.zeros(2, np.int32))
    with _bad("out must be int32"):
        rp.row(row, 0, 3, out=np.zeros(3, np.int64))
    with pytest.raises(kvc.InvalidArgument):  # past the row: refused by C, nothing written
        rp.write(row, 6, [1, 2, 3])


def test_flow_out_cache_loc_checked(ctx):
    rp = kvc.ReqToTokenPool(ctx, 4, 64)
    a = kvc.Allocator(ctx, 256, page_size=4)
    flow = kvc.Flow(ctx, rp, a)
    reqs = [kvc.ReqState(seq_len=5), kvc.ReqState(seq_len=9)]
    with _bad("out_cache_loc has room for 13 elements, 14 needed"):
        flow.alloc_for_extend(reqs, out_cache_loc=ctx.empty(13, "int64"))
    with _bad("out_cache_loc must be int64"):
        flow.alloc_for_extend(reqs, out_cache_loc=np.zeros(14, np.int32))
    assert rp.available == 4  # refused before C took rows
    out = np.zeros(14, np.int64)
    assert flow.alloc_for_extend(reqs, out_cache_loc=out) is out
    assert flow.row_slots(reqs[0].req_row, 0, 5) == out[:5].tolist()
    with _bad("out has room for 4 elements, 5 needed"):
        flow.row_slots(reqs[0].req_row, 0, 5, out=np.zeros(4, np.int64))
    with _bad("out_cache_loc has room for 1 elements, 2 needed"):
        flow.alloc_for_decode(reqs, out_cache_loc=np.zeros(1, np.int64))
    with _bad("out_cache_loc has room for 3 elements, 4 needed"):
        flow.alloc_for_decode(reqs, token_per_req=2, out_cache_loc=np.zeros(3, np.int64))
    d = flow.alloc_for_decode(reqs, out_cache_loc=np.zeros(2, np.int64))
    assert d.tolist() == [out[4] + 1, out[13] + 1]  # both continue their pages
    assert reqs[0].seq_len == 6
    flow.release(reqs)
    with _bad("reqs.0. is int, not a ReqState"):
        flow.release([1])
    with _bad("seq_len 2 < prefix_len 3"):
        flow.alloc_for_extend([kvc.ReqState(seq_len=9), kvc.ReqState(seq_len=2, prefix_len=3)],
                              out_cache_loc=np.zeros(8, np.int64))
    g = kvc.ReqState(seq_len=3)
    assert len(flow.alloc_for_extend(r for r in [g]).tolist()) == 3  # any iterable
    flow.release([g])
    p = kvc.ReqState(seq_len=6, prefix_len=4)
    p.prefix_slots = [1, 2]
    with _bad(r"reqs\[0\].prefix_slots has 2 slots, prefix_len is 4"):
        flow.alloc_for_extend([p])
    flow.check()


def test_memory_helpers_checked(ctx):
    buf = ctx.alloc(16)
    host = np.arange(4, dtype=np.int32)
    ctx.memcpy_h2d(buf, host, 16)
    back = np.zeros(4, np.int32)
    ctx.memcpy_d2h(back, buf, 16)
    assert back.tolist() == [0, 1, 2, 3]
    with _bad("src has 16 bytes, 32 needed"):
        ctx.memcpy_h2d(ctx.alloc(32), host, 32)
    with _bad("dst has 16 bytes, 32 needed"):
        ctx.memcpy_d2h(np.zeros(4, np.int32), ctx.alloc(32), 32)
    with _bad("dst has 16 bytes, 17 needed"):
        ctx.memcpy_d2d(buf, ctx.alloc(32), 17)
    with _bad("dst has 16 bytes, 64 needed"):
        ctx.memset(buf, 0, 64)
    with _bad("dst is read-only"):
        ctx.memcpy_d2h(bytes(16), buf, 16)
    with _bad("data has 24 bytes, the buffer 16"):
        buf.copy_from_host(np.zeros(3, np.int64))
    i64 = ctx.empty(2, "int64")
    i64.copy_from_host([7, 8])
    assert i64.tolist() == [7, 8]


# --- persistent batches -----------------------------------------------------------------------


def _world(ctx, page_size=4):
    rp = kvc.ReqToTokenPool(ctx, 16, 256)
    a = kvc.Allocator(ctx, 2048, page_size=page_size)
    return rp, a, kvc.Flow(ctx, rp, a)


def test_batch_matches_lists(ctx):
    rp1, a1, f1 = _world(ctx)
    rp2, a2, f2 = _world(ctx)
    lens = [5, 9, 3, 12]
    lst = [kvc.ReqState(seq_len=n) for n in lens]
    batch = kvc.RequestBatch(8)
    views = [batch.add(seq_len=n) for n in lens]
    assert len(batch) == 4 and list(batch) == views
    assert f1.alloc_for_extend(lst).tolist() == f2.alloc_for_extend(batch).tolist()
    for _ in range(6):
        want = f1.alloc_for_decode(lst).tolist()
        got = f2.alloc_for_decode(batch)
        assert got is batch.out_cache_loc and got.tolist() == want
    assert [r.seq_len for r in batch] == [r.seq_len for r in lst]
    # a request leaves (order kept), one joins
    f1.release([lst[1]])
    gone = batch.remove(views[1])
    f2.release([gone])
    assert gone.req_row == 0 and len(batch) == 3
    assert [r.seq_len for r in batch] == [11, 9, 18]
    lst = [lst[0], lst[2], lst[3], kvc.ReqState(seq_len=7)]
    batch.add(seq_len=7)
    f1.alloc_for_extend([lst[3]])
    f2.alloc_for_extend([batch[3]])
    out = np.zeros(8, np.int64)
    want = f1.alloc_for_decode(lst, token_per_req=2).tolist()
    assert f2.alloc_for_decode(batch, token_per_req=2, out_cache_loc=out) is out
    assert out.tolist() == want
    f1.release(lst)
    f2.release(batch)
    batch.clear()
    assert len(batch) == 0
    f1.check()
    f2.check()
    assert a1.available_size() == a2.available_size() == 2048


def test_batch_capacity_prefix_and_membership(ctx):
    rp, a, flow = _world(ctx, page_size=1)
    batch = kvc.RequestBatch(2)
    r = batch.add(seq_len=4)
    batch.add(kvc.ReqState(seq_len=3))
    with _bad("batch is full"):
        batch.add()
    with _bad("request is not in this batch"):
        kvc.RequestBatch(1).remove(r)
    flow.alloc_for_extend(batch)
    gone = batch.remove(r)
    flow.release([gone])  # the copy is a full ReqState
    assert gone.req_row == 0
    n = batch.add(seq_len=6, prefix_len=4)
    n.prefix_slots = np.array([1, 2, 3])  # one short of prefix_len
    with _bad("reqs.prefix_slots has 3 slots, prefix_len is 4"):
        flow.alloc_for_extend(batch)
    n.prefix_slots = None
    n.prefix_len = 0
    flow.alloc_for_extend([n])
    flow.check(list(batch))
    flow.release(batch)
    batch.clear()
    flow.check()
