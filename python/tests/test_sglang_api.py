"""kvcache.sglang: the remaining declared methods, each exercised once (host backend)."""
import pytest

np = pytest.importorskip("numpy")

import kvcache.sglang as S  # noqa: E402
from kvcache.sglang import _ops as T  # noqa: E402


def L(x):
    return [int(v) for v in T.tolist(x)]


def arr(values):
    return T.host_array(values)


def fl(shape, start=0.0):
    a = (np.arange(int(np.prod(shape)), dtype=np.float32) + start).reshape(shape)
    return T.torch.from_numpy(a) if T.torch is not None else a


def npy(x):
    return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


class Layer:
    def __init__(self, layer_id):
        self.layer_id = layer_id


class Counter:
    def __init__(self):
        self.waited = []

    def wait_until(self, i):
        self.waited.append(i)


def test_allocator_helpers_and_kv_delegation():
    kv = S.MHATokenToKVPool(8, 1, "float32", 1, 4, 1, "cpu", False)
    a = S.TokenToKVPoolAllocator(8, "float32", "cpu", kv, need_sort=True)
    assert a.get_kvcache() is kv and a.debug_print() == ""
    x = a.alloc(4)
    assert a.translate_kv_indices_for_transfer(x) is x
    kv.set_kv_buffer(Layer(0), x[:2], fl((2, 1, 4)), fl((2, 1, 4), 10.0))
    saved = a.get_cpu_copy(x[:2])
    a.load_cpu_copy(saved, x[2:4])
    assert np.array_equal(npy(kv.get_key_buffer(0))[L(x[2:4])], npy(fl((2, 1, 4))))
    a.free_full(x[:1])
    a.merge_and_sort_free()
    assert a.available_size() == 5
    assert a.verify_byte_accounting() == []
    pool = S.ReqToTokenPool(2, 8, "cpu")
    cache = S.ChunkCache(pool, a, 1)
    a.evict_to_free_tokens(cache, 3)
    assert a.check_decode_capacity(5, cache) and not a.check_decode_capacity(6, cache)


def test_kv_pool_options_fp8_override_and_transfer_counter():
    kv = S.MHATokenToKVPool(8, 1, "float8_e4m3fn", 1, 16, 2, "cpu", False, start_layer=4)
    assert "uint8" in str(kv.store_dtype) and kv.start_layer == 4
    assert tuple(kv.get_key_buffer(5).shape) == (9, 16)       # fp8 rows as bytes
    k = fl((1, 1, 16), 1.0)
    before = npy(k).copy()
    kv.set_kv_buffer(None, arr([3]), k, k, k_scale=2.0, v_scale=2.0, layer_id_override=1)
    assert np.array_equal(npy(k), before)                     # scales do not touch inputs
    assert npy(kv.get_key_buffer(5))[3].any()
    c = Counter()
    kv.register_layer_transfer_counter(c)
    kv.get_kv_buffer(5)
    assert c.waited == [1, 1]
    assert kv.maybe_get_custom_mem_pool() is None
    kv.move_kv_cache(arr([]), arr([]))


def test_mla_whole_rows_and_hybrid_mla():
    mla = S.MLATokenToKVPool(8, 1, "float32", 4, 2, 1, "cpu", False)
    mla.set_kv_buffer(Layer(0), arr([2]), fl((1, 1, 6), 3.0), None)
    key, val = mla.get_kv_buffer(0)
    assert np.array_equal(npy(key)[2], npy(fl((1, 6), 3.0)))
    assert tuple(val.shape) == (9, 1, 4)
    hyb = S.HybridLinearKVPool(8, "float32", 1, 0, 0, [0, 2], False, "cpu", None, use_mla=True,
                               kv_lora_rank=4, qk_rope_head_dim=2)
    hyb.set_mla_kv_buffer(Layer(2), arr([1, 2]), fl((2, 1, 4)), fl((2, 1, 2), 7.0))
    nope, rope = hyb.get_mla_kv_buffer(Layer(2), arr([1, 2]))
    assert np.array_equal(npy(nope), npy(fl((2, 1, 4))))
    assert np.array_equal(npy(rope), npy(fl((2, 1, 2), 7.0)))
    hyb.move_kv_cache(arr([5]), arr([2]))
    assert np.array_equal(npy(hyb.get_key_buffer(2))[5], npy(hyb.get_key_buffer(2))[2])
    hyb.set_kv_buffer(Layer(0), arr([3]), fl((1, 1, 6), 1.0), None)
    assert tuple(hyb.get_value_buffer(0).shape) == (9, 1, 4)
    assert len(hyb.get_contiguous_buf_infos()[0]) == 2
    saved = hyb.get_cpu_copy(arr([3]))
    hyb.load_cpu_copy(saved, arr([4]))
    assert np.array_equal(npy(hyb.get_key_buffer(0))[4], npy(fl((1, 6), 1.0)))


def test_swa_pool_extras():
    kv = S.SWAKVPool(16, 8, 1, "float32", 1, 4, swa_attention_layer_ids=[1],
                     full_attention_layer_ids=[0], device="cpu")
    alloc = S.SWATokenToKVPoolAllocator(16, 8, 1, "float32", "cpu", kv, False)
    assert (alloc.size, alloc.size_full, alloc.size_swa) == (8, 16, 8)
    f = alloc.alloc(2)
    assert L(kv.translate_loc_from_full_to_swa(f)) == [1, 2]
    kv.invalidate_loc_cache()
    kv.set_kv_buffer(Layer(1), f, fl((2, 1, 4)), fl((2, 1, 4), 5.0))
    kv.move_kv_cache(arr([f[1]]), arr([f[0]]))
    _, v = kv.get_kv_buffer(1)
    assert np.array_equal(npy(v)[2].reshape(-1), npy(fl((4,), 5.0)))
    assert kv.get_kv_size_bytes() == (17 * 16 + 9 * 16, 17 * 16 + 9 * 16)
    saved = kv.get_cpu_copy(f)                 # both slots have SWA peers 1, 2
    assert L(saved["swa_mask"]) == [1, 1]
    g = alloc.alloc(2)                          # full 3, 4 / SWA 3, 4
    alloc.free_swa(g[1:])                       # slot 4 loses its SWA peer
    kv.load_cpu_copy(saved, g)
    _, v = kv.get_kv_buffer(1)
    assert np.array_equal(npy(v)[3].reshape(-1), npy(fl((4,), 5.0)))   # SWA row restored
    assert np.array_equal(npy(kv.get_key_buffer(0))[L(g)], npy(kv.get_key_buffer(0))[L(f)])
    with pytest.raises(ValueError):
        kv.load_cpu_copy(saved, g[:1])
    alloc.free_full(g[1:])
    alloc.free(g[:1])
    alloc.free_swa(f)
    alloc.free_full_segment(f, start_pos=0)
    assert alloc.full_available_size() == 16 and alloc.debug_print() == ""


def test_hybrid_pool_views():
    params = S.MambaCacheParams(S.Mamba2StateShape(conv=[(2, 3), (4,)], temporal=(1, 2, 2)),
                                S.Mamba2StateDType("float32", "float32"))
    pool = S.HybridReqToTokenPool(size=2, mamba_size=4, mamba_spec_state_size=0,
                                  max_context_len=8, device="cpu", enable_memory_saver=False,
                                  cache_params=params, mamba_layer_ids=[1],
                                  enable_mamba_extra_buffer=False, enable_overlap_schedule=False)
    assert pool.mamba_ping_pong_track_buffer_size == 1
    assert pool.get_mamba_ping_pong_other_idx(0) == 0
    st = pool.mamba2_layer_cache(1)
    assert len(st.conv) == 2 and tuple(st.conv[1].shape) == (5, 4)
    assert len(pool.get_state_buf_infos()[0]) == 3
    assert pool.get_state_dim_per_tensor() == [2, 4, 1]
    r = S.Req()
    pool.alloc([r])
    with pytest.raises(AssertionError):
        pool.free_mamba_cache(r, mamba_ping_pong_track_buffer_to_keep=2)
    pool.free_mamba_cache(r)
    assert pool.mamba_pool.available_size() == 4


def test_chunk_and_radix_cache_surface():
    pool = S.ReqToTokenPool(4, 32, "cpu")
    alloc = S.TokenToKVPoolAllocator(32, "float32", "cpu", None, False)
    chunk = S.ChunkCache(pool, alloc, 1)
    m = chunk.match_prefix(S.MatchPrefixParams(S.RadixKey([1, 2])))
    assert T.numel(m.device_indices) == 0 and m.last_device_node is None
    assert chunk.evict(S.EvictParams(4)).num_tokens_evicted == 0
    assert (chunk.evictable_size(), chunk.protected_size(), chunk.total_size()) == (0, 0, 0)
    assert chunk.inc_lock_ref(None) == 0 and chunk.dec_lock_ref(None) == 0
    assert not chunk.supports_mamba() and not chunk.supports_swa() and chunk.pretty_print() == ""
    chunk.reset()
    radix = S.RadixCache(pool, alloc, 1)
    assert not radix.is_chunk_cache()
    slots = alloc.alloc(3)
    assert radix.insert(S.RadixKey([5, 6, 7]), slots) == 0
    assert radix.insert([5, 6, 7], alloc.alloc(3)) == 3           # duplicates freed
    assert alloc.available_size() == 29 and radix.total_size() == 3
    m = radix.match_prefix(key=S.RadixKey([5, 6, 7, 8]))
    assert L(m.device_indices) == L(slots)
    radix.inc_lock_ref(m.last_device_node)
    assert radix.evict(3).num_tokens_evicted == 0                   # locked
    radix.dec_lock_ref(m.last_device_node)
    assert "5" in radix.pretty_print() or radix.pretty_print() != ""
    ns = radix.match_prefix(S.RadixKey([5, 6, 7], extra_key="lora-a"))
    assert T.numel(ns.device_indices) == 0                          # another namespace
    radix.reset()
    assert radix.total_size() == 0
    with pytest.raises(NotImplementedError):
        S.RadixCache(pool, alloc, 1, disable=True)
    swa_kv = S.SWAKVPool(8, 8, 1, "float32", 1, 4, [1], [0], device="cpu")
    with pytest.raises(NotImplementedError):
        S.RadixCache(pool, S.SWATokenToKVPoolAllocator(8, 8, 1, None, "cpu", swa_kv, False), 1)


def test_release_without_row_and_encoder_decoder_decode():
    pool = S.ReqToTokenPool(4, 32, "cpu")
    alloc = S.TokenToKVPoolAllocator(32, "float32", "cpu", None, False)
    cache = S.ChunkCache(pool, alloc, 1)
    with pytest.raises(AssertionError):                   # only a Mamba tree frees early
        S.release_kv_cache(S.Req(), cache)

    class Cfg:
        is_encoder_decoder = True

    r = S.Req(fill_ids=[1, 2, 3])
    batch = S.ScheduleBatch([r], pool, cache)
    batch.prepare_for_extend()
    batch.model_config = Cfg()
    batch.encoder_lens = arr([5])
    out = S.alloc_for_decode(batch, 1)
    assert L(out) == [4]
    assert L(pool.req_to_token[r.req_pool_idx, 8:9]) == [4]    # encoder_len + seq_len
