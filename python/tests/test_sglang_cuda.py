"""kvcache.sglang on the CUDA backend with torch: device tensors are torch CUDA tensors
(zero-copy views of kvcache's buffers, or tensors it wrote by pointer) and the worked
examples of sglang-spec.md give the same slots as on the host. Skipped without torch, a
GPU or a CUDA-capable library."""
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device for torch", allow_module_level=True)

import kvcache  # noqa: E402

try:
    _ctx = kvcache.Context("cuda", device=0)
except kvcache.KvcacheError as e:  # library built without / unable to reach CUDA
    pytest.skip("kvcache CUDA backend unavailable: %s" % e, allow_module_level=True)

import kvcache.sglang as S  # noqa: E402

S.set_context("cuda:0", _ctx)
DEV = "cuda"


def L(x):
    return [int(v) for v in x.tolist()]


def dev(values):
    return torch.tensor(values, dtype=torch.int64, device=DEV)


def cpu(values):
    return torch.tensor(values, dtype=torch.int64)


def world(size=40, ps=4, radix=False):
    pool = S.ReqToTokenPool(8, 64, DEV, False)
    if ps == 1:
        alloc = S.TokenToKVPoolAllocator(size, torch.bfloat16, DEV, None, False)
    else:
        alloc = S.PagedTokenToKVPoolAllocator(size, ps, torch.bfloat16, DEV, None, False)
    cache = (S.RadixCache if radix else S.ChunkCache)(S.CacheInitParams(pool, alloc, ps))
    return pool, alloc, cache


def test_paged_worked_examples_on_the_gpu():
    pool, alloc, cache = world()
    alloc.alloc(36)
    for p in (5, 9, 3, 7):
        alloc.free(dev(list(range(4 * p, 4 * p + 4))))       # device tensors: one copy
    out = alloc.alloc_extend(dev([6, 0]), cpu([6, 0]), dev([13, 3]), cpu([13, 3]),
                             dev([9, -1]), 10)
    assert out.is_cuda and out.dtype == torch.int64
    assert L(out) == [10, 11, 28, 29, 30, 31, 12, 36, 37, 38]
    alloc.free(out)                                          # host copy remembered: no sync
    # SGLang's paged free releases every page the slots touch: pages 7, 3, 9 and also page
    # 2, which slots 10 and 11 share with the request's prefix. Free list [5, 10] + 4 pages.
    assert alloc.available_size() == 4 * 6


def test_flows_write_the_device_table():
    pool, alloc, cache = world(size=64)
    assert pool.req_to_token.is_cuda and pool.req_to_token.dtype == torch.int32
    reqs = [S.Req(fill_ids=list(range(n))) for n in (3, 4, 5)]
    batch = S.ScheduleBatch(reqs, pool, cache, device=DEV)
    out = batch.prepare_for_extend()
    assert out.is_cuda and L(out) == [4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15, 16]
    assert batch.req_pool_indices.is_cuda
    d = batch.prepare_for_decode()
    torch.cuda.synchronize()
    assert L(d) == [7, 20, 17]
    assert L(pool.req_to_token[reqs[1].req_pool_idx, :5]) == [8, 9, 10, 11, 20]
    for r in reqs:
        S.release_kv_cache(r, cache)
    assert alloc.available_size() == 64


def test_radix_prefix_on_the_gpu():
    pool, alloc, cache = world(size=64, radix=True)
    a = S.Req(origin_input_ids=list(range(10)), fill_ids=list(range(10)))
    S.ScheduleBatch([a], pool, cache, device=DEV).prepare_for_extend()
    slots = L(pool.req_to_token[a.req_pool_idx, :8])
    S.release_kv_cache(a, cache)
    b = S.Req(origin_input_ids=list(range(12)), fill_ids=list(range(12)))
    m = cache.match_prefix(S.MatchPrefixParams(S.RadixKey(b.fill_ids[:-1])))
    assert m.device_indices.is_cuda and L(m.device_indices) == slots
    b.prefix_indices, b.last_node, b.cache_protected_len = m.device_indices, m.last_device_node, 8
    cache.inc_lock_ref(b.last_node)
    S.ScheduleBatch([b], pool, cache, device=DEV).prepare_for_extend()
    torch.cuda.synchronize()
    assert L(pool.req_to_token[b.req_pool_idx, :8]) == slots
    S.release_kv_cache(b, cache)


def test_mha_pool_torch_views_and_bf16_writes():
    kv = S.MHATokenToKVPool(16, 4, torch.bfloat16, 2, 8, 2, DEV, False)
    k = torch.randn(3, 2, 8, dtype=torch.bfloat16, device=DEV)
    v = torch.randn(3, 2, 8, dtype=torch.bfloat16, device=DEV)
    loc = dev([4, 5, 9])
    kv.set_kv_buffer(type("Layer", (), {"layer_id": 1})(), loc, k, v)
    torch.cuda.synchronize()
    kb, vb = kv.get_kv_buffer(1)
    assert kb.is_cuda and kb.dtype == torch.bfloat16
    assert torch.equal(kb[loc], k) and torch.equal(vb[loc], v)
    kv.move_kv_cache(dev([1]), dev([9]))
    torch.cuda.synchronize()
    assert torch.equal(kb[1], k[2])
    ptrs, lens, items = kv.get_contiguous_buf_infos()
    assert ptrs[0] == kv.get_key_buffer(0).data_ptr() and items[0] == 4 * 2 * 8 * 2
    assert ptrs[3] == kv.get_value_buffer(1).data_ptr() and len(ptrs) == 4


def test_swa_and_hybrid_on_the_gpu():
    pool = S.ReqToTokenPool(4, 64, DEV)
    kv = S.SWAKVPool(64, 32, 4, torch.bfloat16, 2, 8, swa_attention_layer_ids=[0],
                     full_attention_layer_ids=[1], device=DEV)
    alloc = S.SWATokenToKVPoolAllocator(64, 32, 4, torch.bfloat16, DEV, kv, False)
    cache = S.ChunkCache(pool, alloc, 4)
    r = S.Req(fill_ids=list(range(18)))
    batch = S.ScheduleBatch([r], pool, cache, device=DEV, sliding_window_size=4)
    batch.prepare_for_extend()
    for _ in range(3):
        batch.prepare_for_decode()
    assert r.swa_evicted_seqlen == 12
    assert alloc.full_to_swa_index_mapping.is_cuda
    torch.cuda.synchronize()
    row = pool.req_to_token[r.req_pool_idx, :12].to(torch.int64)
    assert int(alloc.full_to_swa_index_mapping[row].abs().sum()) == 0
    S.release_kv_cache(r, cache)
    assert alloc.swa_available_size() == 32
    params = S.MambaCacheParams(S.Mamba2StateShape(conv=[(4, 3)], temporal=(2, 2, 2)),
                                S.Mamba2StateDType(torch.bfloat16, torch.float32))
    hp = S.HybridReqToTokenPool(size=4, mamba_size=8, mamba_spec_state_size=0,
                                max_context_len=32, device=DEV, enable_memory_saver=False,
                                cache_params=params, mamba_layer_ids=[0],
                                enable_mamba_extra_buffer=True)
    a, b = S.Req(), S.Req()
    hp.alloc([a, b])
    torch.cuda.synchronize()
    assert (a.mamba_pool_idx, b.mamba_pool_idx) == (1, 4)
    idx = hp.get_mamba_indices(torch.tensor([1, 2], dtype=torch.int64, device=DEV))
    assert idx.is_cuda and L(idx) == [1, 4]


def test_alloc_result_written_by_the_library_launch():
    """alloc() on CUDA: the device result comes from the library's own launch (alloc_extend
    of one request), the host copy rides along; token and paged, and the refusals."""
    for ps in (1, 4):
        pool, alloc, cache = world(size=64, ps=ps)
        twin = (S.TokenToKVPoolAllocator(64, torch.bfloat16, "cpu", None, False) if ps == 1
                else S.PagedTokenToKVPoolAllocator(64, ps, torch.bfloat16, "cpu", None, False))
        outs = []
        for n in (8, 16, 4):
            x, y = alloc.alloc(n), twin.alloc(n)
            torch.cuda.synchronize()
            assert x.is_cuda and x.dtype == torch.int64 and L(x) == L(y)
            assert L(x._kvc_host) == L(y)
            outs.append(x)
        alloc.free(outs[1])
        twin.free(cpu(L(outs[1])))
        assert L(alloc.alloc(16)) == L(twin.alloc(16))
        assert alloc.alloc(1024) is None
        assert alloc.alloc(0).numel() == 0
        if ps > 1:
            with pytest.raises(kvcache.KvcacheError):
                alloc.alloc(ps + 1)


def test_match_results_kept_on_the_device():
    pool, alloc, cache = world(size=64, radix=True)
    a = S.Req(origin_input_ids=list(range(10)), fill_ids=list(range(10)))
    S.ScheduleBatch([a], pool, cache, device=DEV).prepare_for_extend()
    slots = L(pool.req_to_token[a.req_pool_idx, :8])
    S.release_kv_cache(a, cache)
    key = S.MatchPrefixParams(S.RadixKey(list(range(9))))
    m1, m2 = cache.match_prefix(key), cache.match_prefix(key)
    assert m1.device_indices.is_cuda and m2.device_indices is m1.device_indices
    assert L(m2.device_indices) == slots and L(m1.device_indices._kvc_host) == slots
    cache.clear_match_results()
    m3 = cache.match_prefix(key)
    assert m3.device_indices is not m1.device_indices and L(m3.device_indices) == slots


def test_extend_rows_written_by_the_launch():
    """req_pool_indices on the device comes from the extend launch (rows_device of
    kvc_allocator_alloc_extend_ex, a fresh slab vector): the rows as int64, carrying the
    host rows, and a kept one unchanged by later extends (also across a slab change)."""
    from kvcache.sglang import _ops as T, common
    pool = S.ReqToTokenPool(16, 64, DEV, False)
    alloc = S.PagedTokenToKVPoolAllocator(1024, 4, torch.bfloat16, DEV, None, False)
    cache = S.ChunkCache(S.CacheInitParams(pool, alloc, 4))
    common._hot(alloc).rows_slab = T.Slab(DEV, cap=8)
    kept = []
    for step in range(5):
        reqs = [S.Req(fill_ids=list(range(n))) for n in (3, 5, 2)]
        batch = S.ScheduleBatch(reqs, pool, cache, device=DEV)
        batch.prepare_for_extend()
        rd = batch.req_pool_indices
        assert rd.is_cuda and rd.dtype == torch.int64
        torch.cuda.synchronize()
        assert L(rd) == [q.req_pool_idx for q in reqs] == L(rd._kvc_host)
        kept.append((rd, L(rd)))
        if step % 2:
            for q in reqs:
                S.release_kv_cache(q, cache)
    torch.cuda.synchronize()
    for t, want in kept:
        assert L(t) == want
