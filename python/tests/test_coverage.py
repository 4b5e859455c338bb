"""Issue 16 item 7: SWA allocators and KV pools, Mamba and hybrid pools, host offload,
prefix caches written in Python and the device-allocator hook, on the host backend."""
import numpy as np
import pytest

import kvcache as kvc


@pytest.fixture
def ctx():
    with kvc.Context(backend="host", check=True, disk_cache=False) as c:
        yield c


def test_kv_pool_host_offload_round_trip(ctx):
    pool = kvc.KVPool(ctx, 32, 2, dtype="float32", head_num=2, head_dim=4)
    loc = np.array([3, 7, 9])
    k = np.random.rand(3, 8).astype(np.float32)
    for layer in range(2):
        pool.set_kv(layer, loc, k + layer, k - layer)
    nbytes = pool.host_copy_bytes(3)
    assert nbytes == 3 * 2 * 2 * 8 * 4  # rows x layers x (K, V) x row floats x 4 bytes
    host = np.zeros(nbytes, np.uint8)
    pool.copy_to_host(loc, host)
    with pytest.raises(kvc.InvalidArgument, match="host has 383 bytes, 384 needed"):
        pool.copy_to_host(loc, np.zeros(nbytes - 1, np.uint8))
    ro = host.copy()
    ro.flags.writeable = False
    with pytest.raises(kvc.InvalidArgument, match="host is read-only"):
        pool.copy_to_host(loc, ro)
    pool.clear()
    new = np.array([11, 12, 13])
    pool.copy_from_host(new, ro)  # read-only is fine as a source
    kout, vout = np.zeros((3, 8), np.float32), np.zeros((3, 8), np.float32)
    pool.gather_kv(1, new, kout, vout)
    assert np.array_equal(kout, k + 1) and np.array_equal(vout, k - 1)


def _mamba(ctx, size=8):
    return kvc.MambaPool(ctx, size, 2, conv_shapes=[(4, 3)], temporal_shape=(2, 4, 8),
                         layer_ids=[1, 3], conv_dtype="float32", temporal_dtype="float32")


def test_mamba_pool(ctx):
    m = _mamba(ctx)
    assert m.size == 8 and m.available_size() == 8
    slots = m.alloc(3)
    assert slots == [1, 2, 3] and m.is_held(2)
    conv = np.from_dlpack(m.conv_buffer(3))
    temporal = np.from_dlpack(m.temporal_buffer(1))
    assert conv.shape == (9, 4, 3) and temporal.shape == (9, 2, 4, 8)
    conv[1] = 1.5
    temporal[1] = 2.5
    m.copy_from([1], np.array([2], np.int32))
    assert (conv[2] == 1.5).all()
    f = m.fork_from(1)
    assert f == 4 and (conv[4] == 1.5).all() and (temporal[4] == 2.5).all()
    with pytest.raises(kvc.InvalidArgument, match="src has 2 slots, dst 1"):
        m.copy_from([1, 2], [3])
    nbytes = m.host_copy_bytes(2)
    host = np.zeros(nbytes, np.uint8)
    m.copy_to_host([1, 4], host)
    with pytest.raises(kvc.InvalidArgument, match="host has"):
        m.copy_to_host([1, 4], np.zeros(nbytes - 8, np.uint8))
    m.clear_slots([1, 4])
    assert (conv[1] == 0).all() and (temporal[4] == 0).all()
    m.copy_from_host([1, 4], host)
    assert (conv[4] == 1.5).all() and (temporal[1] == 2.5).all()
    out = np.zeros(2, np.int32)
    assert m.alloc(2, out=out) is out and out.tolist() == [5, 6]
    m.free(out)
    m.free([1, 2, 3, 4])
    m.check()
    del conv, temporal


def test_hybrid_flow_assigns_and_returns_mamba_slots(ctx):
    rp = kvc.ReqToTokenPool(ctx, 4, 64)
    m = _mamba(ctx, 4)
    hyb = kvc.HybridReqToTokenPool(ctx, rp, m)
    rows, slots = hyb.alloc(1)
    assert rows[0] > 0 and slots[0] > 0 and hyb.mamba_slot(rows[0]) == slots[0]
    hyb.free_mamba_cache(rows[0])
    rp.free(rows[0])
    alloc = kvc.Allocator(ctx, 256, page_size=4)
    flow = kvc.Flow(ctx, rp, alloc, hybrid_req_pool=hyb)
    batch = kvc.RequestBatch(4)
    for n in (5, 9):
        batch.add(seq_len=n)
    flow.alloc_for_extend(batch)
    assert all(r.mamba_slot > 0 for r in batch) and m.available_size() == 2
    flow.alloc_for_decode(batch)
    flow.release(batch)
    assert m.available_size() == 4 and alloc.available_size() == 256
    flow.check()


def test_swa_allocator_and_flow_window_eviction(ctx):
    rp = kvc.ReqToTokenPool(ctx, 4, 128)
    swa = kvc.SWAAllocator(ctx, 512, 256, page_size=4)
    assert swa.size_full == 512 and swa.size_swa == 256 and swa.page_size == 4
    out = np.zeros(7, np.int64)
    swa.alloc_extend([0, 0], [3, 4], last_locs=[-1, -1], out=out)
    peers = swa.translate(out)
    assert all(p > 0 for p in peers) and swa.mapping()[out[0]] == peers[0]
    with pytest.raises(kvc.InvalidArgument, match="out has room for 6 elements, 7 needed"):
        swa.alloc_extend([0, 0], [3, 4], last_locs=[-1, -1], out=np.zeros(6, np.int64))
    swa.free(out)
    assert swa.full_available_size() == 512 and swa.swa_available_size() == 256
    flow = kvc.Flow(ctx, rp, swa, sliding_window=8)
    r = kvc.ReqState(seq_len=40)
    flow.alloc_for_extend([r])
    assert swa.swa_available_size() == 256 - 40
    for _ in range(16):
        flow.alloc_for_decode([r])
    # 56 tokens, window 8: the SWA pages of the first 40 went back, 16 tokens remain
    assert r.swa_evicted_seqlen == 40 and swa.swa_available_size() == 256 - 16
    assert swa.full_available_size() == 512 - 56
    flow.release([r])
    swa.check()
    assert swa.full_available_size() == 512 and swa.swa_available_size() == 256


def test_swa_kv_pool_routes_layers(ctx):
    pool = kvc.SWAKVPool(ctx, 64, 32, full_layer_ids=[0, 2], swa_layer_ids=[1], head_num=1,
                         head_dim=4, dtype="float32")
    assert pool.layer(1) == (True, 0) and pool.layer(2) == (False, 1)
    swa = kvc.SWAAllocator(ctx, 64, 32)
    pool.register_allocator(swa)
    full = swa.alloc(2)
    k = np.arange(8, dtype=np.float32).reshape(2, 4)
    pool.set_kv(1, np.array(full), k, k + 1)  # SWA layer: written at mapping[full]
    peers = swa.translate(full)
    v = np.from_dlpack(pool.swa.v_buffer(0)).reshape(-1, 4)
    assert np.array_equal(v[peers], k + 1)
    pool.set_kv(2, np.array(full), k, k)
    assert np.array_equal(np.from_dlpack(pool.full.k_buffer(1)).reshape(-1, 4)[full], k)
    with pytest.raises(kvc.InvalidArgument, match="k has 16 bytes, 32 needed"):
        pool.set_kv(1, np.array(full), k[:1].copy(), k)
    swa.free(full)
    pool.close()
    assert pool._ptr is not None  # the NumPy view of the SWA side keeps it
    del v
    assert kvc.live_exports() == 0
    pool.close()
    assert pool._ptr is None and pool.swa._ptr is None


def test_hybrid_kv_pool_translates_global_layers(ctx):
    m = _mamba(ctx)
    pool = kvc.HybridKVPool(ctx, 32, full_layer_ids=[0, 2], mamba_pool=m, dtype="float32",
                            head_num=1, head_dim=4)
    assert pool.layer(2) == 1
    with pytest.raises(kvc.InvalidArgument):
        pool.layer(1)  # a Mamba layer
    k = np.arange(8, dtype=np.float32).reshape(2, 4)
    pool.set_kv(2, [5, 6], k, k * 2)
    assert np.array_equal(np.from_dlpack(pool.k_buffer(2)).reshape(-1, 4)[5:7], k)
    kout, vout = np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float32)
    pool.gather_kv(2, [5, 6], kout, vout)
    assert np.array_equal(vout, k * 2)
    with pytest.raises(kvc.InvalidArgument, match="v_out has 16 bytes, 32 needed"):
        pool.gather_kv(2, [5, 6], kout, np.zeros((1, 4), np.float32))
    pool.close()
    assert pool.full._ptr is None and pool._ptr is None


class RecordingCache(kvc.PrefixCache):
    """Keeps every finished request's slots (no reuse) and frees them on evict."""

    def __init__(self):
        self.held = []
        self.calls = []

    def cache_finished_req(self, flow, req, is_insert):
        self.calls.append(("finished", req.kv_committed_len, is_insert))
        if req.kv_committed_len:
            self.held.extend(flow.row_slots(req.req_row, 0, req.kv_committed_len))

    def evict(self, flow, num_tokens, swa_num_tokens, mamba_num):
        self.calls.append(("evict", num_tokens))
        take, self.held = self.held[:num_tokens], self.held[num_tokens:]
        flow.free_slots(take)

    def cached_size(self):
        return len(self.held)

    def evictable_size(self):
        return len(self.held)


def test_python_prefix_cache(ctx):
    rp = kvc.ReqToTokenPool(ctx, 4, 64)
    alloc = kvc.Allocator(ctx, 32)
    cache = RecordingCache()
    flow = kvc.Flow(ctx, rp, alloc, cache=cache)
    r = kvc.ReqState(seq_len=20)
    flow.alloc_for_extend([r])
    flow.release([r])
    assert cache.calls == [("finished", 20, True)] and len(cache.held) == 20
    assert flow.available()["cached"] == 20 and alloc.available_size() == 12
    flow.check()  # free + held + cached == size, with the Python cache's count
    big = kvc.ReqState(seq_len=30)
    flow.alloc_for_extend([big])  # needs eviction from the Python cache
    assert cache.calls[1][0] == "evict" and cache.held == []  # all 20 went back
    flow.release([big], is_insert=False)
    flow.check()


class FailingCache(kvc.PrefixCache):
    def cache_finished_req(self, flow, req, is_insert):
        raise KeyError("radix node missing")


def test_python_cache_errors_propagate(ctx):
    rp = kvc.ReqToTokenPool(ctx, 4, 64)
    alloc = kvc.Allocator(ctx, 32)
    flow = kvc.Flow(ctx, rp, alloc, cache=FailingCache())
    r = kvc.ReqState(seq_len=5)
    flow.alloc_for_extend([r])
    with pytest.raises(KeyError, match="radix node missing") as e:
        flow.release([r])
    assert isinstance(e.value.__cause__, kvc.KvcacheError)
    assert r.req_row != 0  # untouched: the release can be retried
    flow.cache = None


class RecordingDeviceAllocator(kvc.DeviceAllocator):
    def __init__(self):
        self.calls = 0

    def alloc(self, nbytes, device, stream):
        self.calls += 1
        raise AssertionError("the host backend never calls the device hook")

    def free(self, ptr, device, stream):
        self.calls += 1


def test_device_allocator_hook_is_accepted_on_host():
    hook = RecordingDeviceAllocator()
    with kvc.Context(backend="host", device_allocator=hook) as c:
        kvc.KVPool(c, 16, 1, dtype="float32", head_num=1, head_dim=4).close()
    assert hook.calls == 0


def test_swa_allocator_deferred_zero_free_group_and_clear(ctx):
    swa = kvc.SWAAllocator(ctx, 64, 32)
    full = swa.alloc(6)
    peers = swa.translate(full)
    assert all(p > 0 for p in peers) and swa.zero_pending() == 0
    with pytest.raises(kvc.Misuse, match="no deferred-zero scope is open"):
        swa.defer_zero_end()
    with swa.deferred_zero():
        swa.free(full[:2])
        with swa.deferred_zero():  # nested: only the outermost end launches
            swa.free(full[2:4])
        queued = swa.zero_pending()
        assert queued > 0  # the device mapping lags; the host one is zeroed at once
        assert all(swa.mapping()[s] == 0 for s in full[:4])
        swa.zero_flush()  # launched now, inside the scope: nothing left for its end
        assert swa.zero_pending() == 0
    assert swa.zero_pending() == 0
    assert swa.full_available_size() == 64 - 2 and swa.swa_available_size() == 32 - 2
    swa.check()
    # A free group holds the frees back until its end (SGLang free_group_begin / end).
    with swa.free_group():
        swa.free(full[4:])
        assert swa.full_available_size() == 64 - 2
    assert swa.full_available_size() == 64 and swa.swa_available_size() == 32
    with pytest.raises(kvc.Misuse):
        swa.free_group_end()
    swa.alloc(5)
    swa.clear()
    assert swa.full_available_size() == 64 and swa.swa_available_size() == 32
    swa.check()
