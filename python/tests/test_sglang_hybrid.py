"""kvcache.sglang: KV pools (MHA, MLA, NSA, HybridLinearKVPool, SWAKVPool), SWA allocator
with window eviction, Mamba pools and the hybrid request pool (host backend)."""
import pytest

np = pytest.importorskip("numpy")

import kvcache  # noqa: E402
import kvcache.sglang as S  # noqa: E402
from kvcache.sglang import _ops as T  # noqa: E402


def L(x):
    return [int(v) for v in T.tolist(x)]


def arr(values):
    return T.host_array(values)


def fl(shape, start=0.0):
    n = int(np.prod(shape))
    a = (np.arange(n, dtype=np.float32) + start).reshape(shape)
    return T.torch.from_numpy(a) if T.torch is not None else a


def npy(x):
    return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


class Layer:
    def __init__(self, layer_id):
        self.layer_id = layer_id


def test_mha_pool_buffers_writes_moves_offload():
    kv = S.MHATokenToKVPool(16, 4, "float32", head_num=2, head_dim=4, layer_num=3,
                            device="cpu", enable_memory_saver=False)
    assert len(kv.k_buffer) == 3 and tuple(kv.get_key_buffer(0).shape) == (20, 2, 4)
    k, v = fl((2, 2, 4)), fl((2, 2, 4), 100.0)
    kv.set_kv_buffer(Layer(1), arr([5, 9]), k, v)
    kb, vb = kv.get_kv_buffer(1)
    assert np.array_equal(npy(kb)[[5, 9]], npy(k)) and np.array_equal(npy(vb)[[5, 9]], npy(v))
    assert np.array_equal(npy(k), npy(fl((2, 2, 4))))           # inputs untouched
    kv.move_kv_cache(arr([6]), arr([9]))
    assert np.array_equal(npy(kv.get_key_buffer(1))[6], npy(k)[1])
    ptrs, lens, items = kv.get_contiguous_buf_infos()
    assert len(ptrs) == 6 and lens[0] == 20 * 8 * 4 and items[0] == 4 * 8 * 4
    assert kv.get_kv_size_bytes() == (3 * 20 * 32, 3 * 20 * 32)
    saved = kv.get_cpu_copy(arr([5, 9]))
    kv.load_cpu_copy(saved, arr([1, 2]))
    assert np.array_equal(npy(kv.get_value_buffer(1))[[1, 2]], npy(v))


def test_mla_and_nsa_pools():
    mla = S.MLATokenToKVPool(8, 1, "float32", kv_lora_rank=8, qk_rope_head_dim=4, layer_num=2,
                             device="cpu", enable_memory_saver=False)
    assert tuple(mla.get_key_buffer(1).shape) == (9, 1, 12)
    nope, rope = fl((3, 1, 8)), fl((3, 1, 4), 50.0)
    mla.set_mla_kv_buffer(Layer(1), arr([1, 2, 3]), nope, rope)
    n2, r2 = mla.get_mla_kv_buffer(Layer(1), arr([1, 2, 3]))
    assert np.array_equal(npy(n2), npy(nope)) and np.array_equal(npy(r2), npy(rope))
    assert np.array_equal(npy(mla.get_value_buffer(1))[1:4], npy(nope))
    assert len(mla.get_contiguous_buf_infos()[0]) == 2
    nsa = S.NSATokenToKVPool(128, 64, 512, "float8_e4m3fn", 64, 1, "cpu", index_head_dim=128,
                             enable_memory_saver=False, kv_cache_dim=656)
    assert tuple(nsa.get_key_buffer(0).shape) == (192, 1, 656)   # fp8 rows, stored as uint8
    ib = nsa.get_index_k_with_scale_buffer(0)
    assert tuple(ib.shape) == (3, 64 * 132)
    keys = np.arange(2 * 128, dtype=np.uint8).reshape(2, 128)
    scales = np.array([1.5, 2.5], dtype=np.float32)
    if T.torch is not None:
        keys, scales = T.torch.from_numpy(keys), T.torch.from_numpy(scales)
    nsa.set_index_k_scale_buffer(0, arr([64, 65]), keys, scales)
    got = nsa.get_index_k_continuous(0, 2, T.host_array([1], T.I32))
    assert np.array_equal(npy(got), npy(keys))
    s = nsa.get_index_k_scale_continuous(0, 2, T.host_array([1], T.I32))
    assert np.array_equal(npy(s).view(np.float32).reshape(-1), [1.5, 2.5])
    k, s = nsa.get_index_k_scale_buffer(0, T.host_array([2], T.I32),
                                        T.host_array([[1]], T.I32), 2, 2)
    assert np.array_equal(npy(k), npy(keys))


def _mamba_params():
    return S.MambaCacheParams(S.Mamba2StateShape(conv=[(4, 3)], temporal=(2, 2, 2)),
                              S.Mamba2StateDType(conv="float32", temporal="float32"))


def test_mamba_pool_fifo_zero_copy_fork():
    m = S.MambaPool(size=4, spec_state_size=0, cache_params=_mamba_params(),
                    mamba_layer_ids=[1, 3], device="cpu")
    ids = m.alloc(2)
    assert L(ids) == [1, 2] and m.available_size() == 2
    st = m.mamba2_layer_cache(3)
    assert tuple(st.conv[0].shape) == (5, 4, 3) and tuple(st.temporal.shape) == (5, 2, 2, 2)
    st.conv[0][1] = 7.0                       # write through the zero-copy view
    f = m.fork_from(arr([1]))
    assert L(f) == [3] and float(npy(m.mamba2_layer_cache(3).conv[0])[3].sum()) == 7.0 * 12
    m.free(arr([1]))
    assert L(m.alloc(1)) == [4]               # FIFO: 1 comes after 4
    assert L(m.alloc(1)) == [1]
    assert npy(st.conv[0])[1].sum() == 0      # zeroed on alloc
    assert m.alloc(1) is None
    assert m.fork_from(arr([2])) is None
    m.copy_from(arr([3]), arr([2]))
    assert float(npy(st.conv[0])[2].sum()) == 7.0 * 12
    ptrs, lens, items = m.get_contiguous_buf_infos()
    assert len(ptrs) == 4 and items[0] == 4 * 3 * 4
    assert m.get_state_dim_per_tensor() == [4, 4, 2, 2]
    saved = m.get_cpu_copy(arr([2]))
    m.free(arr([3]))
    m.load_cpu_copy(saved, arr([2]))
    m.clear()
    assert m.available_size() == 4


def _hybrid_pool(extra, overlap=True, size=4, mamba_size=12):
    return S.HybridReqToTokenPool(size=size, mamba_size=mamba_size, mamba_spec_state_size=0,
                                  max_context_len=32, device="cpu", enable_memory_saver=False,
                                  cache_params=_mamba_params(), mamba_layer_ids=[0, 2],
                                  enable_mamba_extra_buffer=extra,
                                  enable_overlap_schedule=overlap)


def test_hybrid_req_pool_slot_order_and_release():
    """spec 14: pp = 2 -> req0: state 1, ping-pong [2, 3]; req1: state 4, [5, 6]."""
    pool = _hybrid_pool(True)
    a, b = S.Req(), S.Req()
    assert pool.alloc([a, b]) == [1, 2]
    assert (a.mamba_pool_idx, b.mamba_pool_idx) == (1, 4)
    assert L(a.mamba_ping_pong_track_buffer) == [2, 3]
    assert L(b.mamba_ping_pong_track_buffer) == [5, 6]
    assert L(pool.get_mamba_indices(arr([2, 1, 0]))) == [4, 1, 0]
    assert L(pool.req_index_to_mamba_index_mapping) == [0, 1, 4, 0, 0]
    assert L(pool.req_index_to_mamba_ping_pong_track_buffer_mapping[1]) == [2, 3]
    assert pool.get_mamba_ping_pong_other_idx(0) == 1
    pool.free_mamba_cache(a, mamba_ping_pong_track_buffer_to_keep=0)
    assert a.mamba_pool_idx is None
    assert pool.mamba_allocator.available_size() == 12 - 6 + 2    # state 1 and track 3
    with pytest.raises(AssertionError):
        pool.free_mamba_cache(a)
    pool.free(a)
    pool.clear()
    assert pool.available_size() == 4 and pool.mamba_pool.available_size() == 12


def test_hybrid_flow_release_frees_mamba_and_shortage_rolls_back():
    pool = _hybrid_pool(False, size=4, mamba_size=2)
    alloc = S.TokenToKVPoolAllocator(32, "float32", "cpu", None, False)
    cache = S.ChunkCache(pool, alloc, 1)
    kv = S.HybridLinearKVPool(32, "float32", 1, 2, 4, full_attention_layer_ids=[1, 3],
                              enable_kvcache_transpose=False, device="cpu",
                              mamba_pool=pool.mamba_pool)
    reqs = [S.Req(fill_ids=[1, 2, 3]), S.Req(fill_ids=[4])]
    batch = S.ScheduleBatch(reqs, pool, cache)
    assert L(batch.prepare_for_extend()) == [1, 2, 3, 4]
    assert [r.mamba_pool_idx for r in reqs] == [1, 2]
    # Mamba slots exhausted: SGLang asserts after taking the rows; kvcache rolls back.
    c = S.Req(fill_ids=[5])
    with pytest.raises(RuntimeError, match="alloc_req_slots"):
        S.ScheduleBatch([c], pool, cache).prepare_for_extend()
    assert c.req_pool_idx is None and pool.available_size() == 2
    k, v = fl((4, 2, 4)), fl((4, 2, 4), 9.0)
    kv.set_kv_buffer(Layer(3), batch.out_cache_loc, k, v)
    assert np.array_equal(npy(kv.get_key_buffer(3))[1:5], npy(k))
    with pytest.raises(ValueError):
        kv.get_key_buffer(2)                  # a Mamba layer
    assert kv.get_v_head_dim() == 4
    assert len(kv.get_state_buf_infos()[0]) == 4
    for r in reqs:
        S.release_kv_cache(r, cache)
    assert pool.mamba_pool.available_size() == 2 and alloc.available_size() == 32


def _swa_world(ps=4, size=64, size_swa=32):
    pool = S.ReqToTokenPool(4, 64, "cpu")
    kv = S.SWAKVPool(size, size_swa, ps, "float32", 2, 4, swa_attention_layer_ids=[0, 2],
                     full_attention_layer_ids=[1], device="cpu")
    alloc = S.SWATokenToKVPoolAllocator(size, size_swa, ps, "float32", "cpu", kv, False)
    cache = S.ChunkCache(pool, alloc, ps)
    return pool, kv, alloc, cache


def test_swa_window_eviction_through_the_flows():
    pool, kv, alloc, cache = _swa_world()
    r = S.Req(fill_ids=list(range(18)))
    batch = S.ScheduleBatch([r], pool, cache, sliding_window_size=4)
    out = batch.prepare_for_extend()
    assert L(out) == list(range(4, 22))
    full_row = L(pool.req_to_token[r.req_pool_idx, :18])
    swa = L(alloc.translate_loc_from_full_to_swa(arr(full_row)))
    assert all(s > 0 for s in swa)
    assert alloc.full_available_size() == 64 - 20 and alloc.swa_available_size() == 32 - 20
    # Decode to 20: maybe_evict_swa frees the SWA pages below 20 - 4 - 4 = 12.
    batch.prepare_for_decode()
    batch.prepare_for_decode()
    assert r.swa_evicted_seqlen == 8           # at the second step: pre_len 19 -> floor(11)
    batch.prepare_for_decode()                 # pre_len 20 -> 12
    assert r.swa_evicted_seqlen == 12
    assert alloc.swa_available_size() == 32 - 24 + 12
    assert alloc.full_available_size() == 64 - 24
    assert L(alloc.translate_loc_from_full_to_swa(arr(full_row[:12]))) == [0] * 12
    assert L(alloc.translate_loc_from_full_to_swa(arr([-1]))) == [-1]
    # SWA layers write at mapping[loc]; the full layer at loc.
    loc = arr(full_row[12:14])
    kv.set_kv_buffer(Layer(0), loc, fl((2, 2, 4)), fl((2, 2, 4), 5.0))
    kv.set_kv_buffer(Layer(1), loc, fl((2, 2, 4), 1.0), fl((2, 2, 4), 6.0))
    w = L(alloc.translate_loc_from_full_to_swa(loc))
    assert np.array_equal(npy(kv.get_key_buffer(0))[w], npy(fl((2, 2, 4))))
    assert np.array_equal(npy(kv.get_key_buffer(1))[L(loc)], npy(fl((2, 2, 4), 1.0)))
    assert tuple(kv.get_key_buffer(2).shape) == (36, 2, 4)
    assert len(kv.get_contiguous_buf_infos()[0]) == 2
    assert len(kv.get_state_buf_infos()[0]) == 4
    S.release_kv_cache(r, cache)
    assert alloc.full_available_size() == 64 and alloc.swa_available_size() == 32


def test_swa_page_size_one_window_eviction_and_release():
    """ps = 1: the released request's evicted prefix goes through free_full (a plain free
    of a slot without an SWA peer is SGLang's "peer mapped" invariant violation)."""
    pool, kv, alloc, cache = _swa_world(ps=1, size=64, size_swa=32)
    r = S.Req(fill_ids=list(range(10)))
    batch = S.ScheduleBatch([r], pool, cache, sliding_window_size=4)
    assert L(batch.prepare_for_extend()) == list(range(1, 11))
    outs = [L(batch.prepare_for_decode()) for _ in range(3)]
    assert outs == [[11], [12], [13]]
    assert r.swa_evicted_seqlen == 7                 # pre_len 12 - window 4 - page 1
    assert alloc.swa_available_size() == 32 - 13 + 7
    with pytest.raises(kvcache.Misuse):              # SGLang's ps = 1 invariant
        alloc.free(arr([1]))
    S.release_kv_cache(r, cache)
    assert alloc.full_available_size() == 64 and alloc.swa_available_size() == 32


def test_swa_allocator_direct_calls():
    pool, kv, alloc, cache = _swa_world(ps=1, size=16, size_swa=8)
    f = alloc.alloc(3)
    assert L(f) == [1, 2, 3]
    assert L(alloc.translate_loc_from_full_to_swa(f)) == [1, 2, 3]
    assert alloc.alloc(6) is None                 # SWA side short: nothing taken
    assert alloc.available_size() == 5
    alloc.free_swa(arr([1]))
    with pytest.raises(kvcache.Misuse):           # SWA peer already released
        alloc.free_swa(arr([1]))
    alloc.free_full(arr([1]))
    alloc.free_group_begin()
    alloc.free(arr([2]))
    alloc.free(arr([3]))
    alloc.free_group_end()
    assert alloc.full_available_size() == 16 and alloc.swa_available_size() == 8
    assert L(alloc.full_to_swa_index_mapping)[-1] == -1
    # Paged SWA: both sides, same lengths; decode shortage leaves both sides unchanged.
    pool, kv, alloc, cache = _swa_world(ps=4, size=16, size_swa=8)
    out = alloc.alloc_extend(arr([0]), arr([0]), arr([5]), arr([5]), arr([-1]), 5)
    assert L(out) == [4, 5, 6, 7, 8]
    assert alloc.new_pages_available(1, 0) is True
    assert alloc.alloc_decode(arr([9]), arr([9]), arr([12])) is None   # SWA has no page
    assert alloc.full_available_size() == 8 and alloc.swa_available_size() == 0
    alloc.free_segment(out, start_pos=0)
    assert alloc.swa_available_size() == 8
    alloc.clear()
    assert alloc.full_available_size() == 16


def test_seed_interface_gaps_closed():
    """Issue 18 item 1 review: methods of the seeds' classes that were missing or named
    their parameters differently."""
    m = S.MambaPool(size=4, spec_state_size=2, cache_params=_mamba_params(),
                    mamba_layer_ids=[1, 3], device="cpu", speculative_num_draft_tokens=3)
    sp = m.get_speculative_mamba2_params_all_layers()
    assert isinstance(sp, S.MambaPool.SpeculativeState)
    assert tuple(sp.conv[0].shape) == (2, 5, 4, 3) and tuple(sp.temporal.shape) == (2, 5, 2, 2, 2)
    assert tuple(sp.intermediate_ssm.shape)[:3] == (2, 3, 3)
    assert len(sp.intermediate_conv_window) == 1
    # the whole conv tensor aliases the per-layer view: layer index 1 is global layer 3
    sp.conv[0][1, 2] = 5.0
    assert float(npy(m.mamba2_layer_cache(3).conv[0])[2].sum()) == 5.0 * 12
    plain = S.MambaPool(size=4, spec_state_size=0, cache_params=_mamba_params(),
                        mamba_layer_ids=[1], device="cpu")
    with pytest.raises(AssertionError):
        plain.get_speculative_mamba2_params_all_layers()
    h = _hybrid_pool(False)
    seen = []

    class Counter:
        def wait_until(self, i):
            seen.append(i)

    h.register_layer_transfer_counter(Counter())
    h.mamba2_layer_cache(2)
    assert seen == [2]
    # NSA: KV rows in get_contiguous_buf_infos, index-key pages in get_state_buf_infos
    nsa = S.NSATokenToKVPool(128, 64, 512, "float8_e4m3fn", 64, 2, "cpu", index_head_dim=128,
                             enable_memory_saver=False, kv_cache_dim=656)
    kv_p, kv_l, kv_i = nsa.get_contiguous_buf_infos()
    ix_p, ix_l, ix_i = nsa.get_state_buf_infos()
    assert len(kv_p) == 2 and len(ix_p) == 2 and not set(kv_p) & set(ix_p)
    assert ix_i[0] == 64 * 132 and ix_l[0] == 3 * 64 * 132
    saved = nsa.get_cpu_copy(arr([64]))
    nsa.load_cpu_copy(kv_cache_cpu_dict=saved, indices=arr([128]))
    # SWA allocator: no request ring; the mapping is the allocator's own
    a = S.SWATokenToKVPoolAllocator(16, 8, 1, "float16", "cpu", None, False)
    assert a.swa_req_ring is False and a.swa_ring_cost_tokens == 0
    for call in (lambda: a.set_full_to_swa_mapping(arr([1]), arr([1])),
                 lambda: a.clear_full_to_swa_mapping(arr([1])), lambda: a.resize(None)):
        with pytest.raises(NotImplementedError):
            call()
    # get_last_loc with SGLang's keyword names
    pool = S.ReqToTokenPool(2, 8, "cpu")
    assert L(S.get_last_loc(pool.req_to_token, req_pool_indices_tensor=arr([1]),
                            prefix_lens_tensor=arr([0]))) == [-1]
