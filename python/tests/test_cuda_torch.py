"""CUDA-backend tests with PyTorch (run on the GPU machine). Skipped without torch, CUDA
or a usable kvcache CUDA context. Writes K/V from torch tensors on torch's current
stream and reads them back through zero-copy torch.from_dlpack views."""
import pytest

torch = pytest.importorskip("torch")
import kvcache as kvc  # noqa: E402

if not torch.cuda.is_available():
    pytest.skip("no CUDA device for torch", allow_module_level=True)


@pytest.fixture(scope="module")
def ctx():
    try:
        c = kvc.Context(backend="cuda", device=torch.cuda.current_device())
    except kvc.KvcacheError as e:  # no driver / NVRTC on this machine
        pytest.skip("kvcache CUDA context: %s" % e)
    yield c
    torch.cuda.synchronize()
    c.close()


def test_context_is_cuda(ctx):
    assert ctx.backend == "cuda" and ctx.device == torch.cuda.current_device()
    info = ctx.device_info()
    assert info["compute_major"] >= 7


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_set_kv_from_torch_reads_back_through_dlpack(ctx, dtype):
    L, H, D, size = 3, 4, 64, 1024
    pool = kvc.KVPool(ctx, size, L, kind="mha", dtype=str(dtype), head_num=H, head_dim=D)
    k_cache = torch.from_dlpack(pool.k_buffer(2))
    v_cache = torch.from_dlpack(pool.v_buffer(2))
    assert k_cache.is_cuda and k_cache.dtype == dtype and k_cache.shape == (size + 1, H, D)
    assert k_cache.data_ptr() == pool.describe()[2]["data"]  # K layer 2: same memory
    stream = torch.cuda.current_stream()
    n = 200
    loc = torch.randperm(size, device="cuda")[:n] + 1  # int64, distinct, no padding slot
    k = torch.randn(n, H, D, device="cuda", dtype=dtype)
    v = torch.randn(n, H, D, device="cuda", dtype=dtype)
    pool.set_kv(2, loc, k, v, stream=stream)
    torch.testing.assert_close(k_cache[loc], k, rtol=0, atol=0)
    torch.testing.assert_close(v_cache[loc], v, rtol=0, atol=0)
    # write through the view, read back with gather_kv (int32 loc)
    k_cache[7] = 1.5
    loc2 = torch.tensor([7, int(loc[0])], device="cuda", dtype=torch.int32)
    k_out = torch.empty(2, H, D, device="cuda", dtype=dtype)
    v_out = torch.empty(2, H, D, device="cuda", dtype=dtype)
    pool.gather_kv(2, loc2, k_out, v_out, stream=stream)
    assert (k_out[0] == 1.5).all()
    torch.testing.assert_close(k_out[1], k[0], rtol=0, atol=0)
    del k_cache, v_cache
    pool.close()


def test_fp8_pool_quantizes_bf16(ctx):
    H, D = 2, 128
    pool = kvc.KVPool(ctx, 256, 1, dtype="fp8_e4m3", head_num=H, head_dim=D)
    n = 32
    loc = torch.arange(1, n + 1, device="cuda")
    k = torch.randn(n, H, D, device="cuda", dtype=torch.bfloat16)
    pool.set_kv(0, loc, k, k, stream=torch.cuda.current_stream())
    raw = torch.from_dlpack(pool.k_buffer(0, as_bytes=True))
    assert raw.dtype == torch.uint8
    want = k.float().clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
    assert torch.equal(raw[1:n + 1].reshape(n, H, D), want)


def test_mla_pool_with_torch(ctx):
    R, Q, n = 512, 64, 100
    pool = kvc.KVPool(ctx, 4096, 2, kind="mla", dtype="bfloat16", kv_lora_rank=R,
                      qk_rope_head_dim=Q)
    loc = torch.randperm(4096, device="cuda")[:n] + 1
    nope = torch.randn(n, R, device="cuda", dtype=torch.bfloat16)
    rope = torch.randn(n, Q, device="cuda", dtype=torch.bfloat16)
    pool.set_mla_kv(1, loc, nope, rope, stream=torch.cuda.current_stream())
    kv = torch.from_dlpack(pool.kv_buffer(1)).reshape(4097, R + Q)
    assert torch.equal(kv[loc], torch.cat([nope, rope], dim=1))


def test_flow_writes_req_to_token_on_device(ctx):
    rp = kvc.ReqToTokenPool(ctx, 8, 256)
    a = kvc.Allocator(ctx, 4096, page_size=16)
    flow = kvc.Flow(ctx, rp, a)
    reqs = [kvc.ReqState(seq_len=37), kvc.ReqState(seq_len=5)]
    out = torch.empty(42, dtype=torch.int64, device="cuda")
    flow.alloc_for_extend(reqs, out_cache_loc=out, stream=torch.cuda.current_stream())
    table = torch.from_dlpack(rp.table)
    torch.cuda.current_stream().synchronize()
    assert table[reqs[0].req_row, :37].tolist() == out[:37].tolist()
    assert rp.row(reqs[0].req_row, 0, 37) == out[:37].tolist()
    dec = torch.empty(2, dtype=torch.int64, device="cuda")
    flow.alloc_for_decode(reqs, out_cache_loc=dec, stream=torch.cuda.current_stream())
    torch.cuda.current_stream().synchronize()
    assert table[reqs[1].req_row, 5].item() == dec[1].item()
    flow.release(reqs, stream=torch.cuda.current_stream())
    assert a.available_size() == 4096


# --- issue 16: buffer checks, persistent batches and FP4 DLPack on the CUDA backend --------


def test_buffer_checks_on_cuda(ctx):
    pool = kvc.KVPool(ctx, 64, 1, dtype="bfloat16", head_num=2, head_dim=64)
    k = torch.zeros(4, 2, 64, device="cuda", dtype=torch.bfloat16)
    loc = torch.arange(1, 5, device="cuda")
    on_device = "must be CUDA device memory of the context's device"
    with pytest.raises(kvc.InvalidArgument, match="loc " + on_device):
        pool.set_kv(0, loc.cpu(), k, k)
    with pytest.raises(kvc.InvalidArgument, match="k " + on_device):
        pool.set_kv(0, loc, k.cpu(), k)
    with pytest.raises(kvc.InvalidArgument, match="v has 768 bytes, 1024 needed"):
        pool.set_kv(0, loc, k, k[:3].clone())
    with pytest.raises(kvc.InvalidArgument, match="k_out has 768 bytes, 1024 needed"):
        pool.gather_kv(0, loc, k[:3].clone(), k)
    pool.set_kv(0, loc, k, k, stream=torch.cuda.current_stream())
    rp = kvc.ReqToTokenPool(ctx, 4, 64)
    a = kvc.Allocator(ctx, 1024, page_size=16)
    flow = kvc.Flow(ctx, rp, a)
    reqs = [kvc.ReqState(seq_len=5)]
    with pytest.raises(kvc.InvalidArgument, match="out_cache_loc " + on_device):
        flow.alloc_for_extend(reqs, out_cache_loc=torch.zeros(5, dtype=torch.int64))
    with pytest.raises(kvc.InvalidArgument, match="out_cache_loc has room for 4 elements"):
        flow.alloc_for_extend(reqs, out_cache_loc=torch.zeros(4, dtype=torch.int64,
                                                                device="cuda"))
    with pytest.raises(kvc.InvalidArgument, match="seq_lens must be host memory"):
        a.alloc_decode(torch.tensor([2], device="cuda"))
    got = torch.zeros(1, dtype=torch.int64)
    # seq 17 opens a new page of 16 (last_loc unused), torch CPU tensors by pointer
    assert a.alloc_decode(torch.tensor([17]), last_locs=torch.tensor([0]), out=got) is got
    assert got.item() > 0
    torch.cuda.synchronize()


def test_request_batch_on_cuda(ctx):
    rp = kvc.ReqToTokenPool(ctx, 8, 256)
    a = kvc.Allocator(ctx, 4096, page_size=16)
    flow = kvc.Flow(ctx, rp, a)
    batch = kvc.RequestBatch(8)
    for n in (37, 5, 64):
        batch.add(seq_len=n)
    s = torch.cuda.current_stream()
    flow.alloc_for_extend(batch, stream=s)
    table = torch.from_dlpack(rp.table)
    for _ in range(3):
        out = torch.from_dlpack(flow.alloc_for_decode(batch, stream=s))
        s.synchronize()
        for i, r in enumerate(batch):
            assert table[r.req_row, r.seq_len - 1].item() == out[i].item()
    del out, table
    flow.release(batch, stream=s)
    batch.clear()
    assert a.available_size() == 4096


def test_fp4_buffer_imports_into_torch(ctx):
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("this torch has no float4_e2m1fn_x2")
    H, D = 2, 64
    pool = kvc.KVPool(ctx, 128, 1, kind="mha_fp4", dtype="bfloat16", head_num=H, head_dim=D)
    t = torch.from_dlpack(pool.k_buffer(0))
    assert t.is_cuda and t.dtype == torch.float4_e2m1fn_x2
    assert tuple(t.shape) == (129, H, D // 2) and t.data_ptr() == pool.describe(0)["data"]
    del t
    assert kvc.live_exports() == 0


def test_torch_caching_allocator_owns_the_kv_memory():
    hook = kvc.TorchDeviceAllocator()
    before = torch.cuda.memory_allocated()
    try:
        c = kvc.Context(backend="cuda", device=torch.cuda.current_device(),
                        device_allocator=hook)
    except kvc.KvcacheError as e:
        pytest.skip("kvcache CUDA context: %s" % e)
    pool = kvc.KVPool(c, 4096, 2, dtype="bfloat16", head_num=8, head_dim=128)
    k_bytes, v_bytes = pool.size_bytes()
    assert hook.live and torch.cuda.memory_allocated() - before >= k_bytes + v_bytes
    assert any(p <= pool.describe(0)["data"] < p + n for p, n in hook.live.items())
    pool.close()
    torch.cuda.synchronize()
    c.close()
    assert not hook.live and torch.cuda.memory_allocated() == before


def test_python_prefix_cache_and_mamba_on_cuda(ctx):
    rp = kvc.ReqToTokenPool(ctx, 4, 64)
    m = kvc.MambaPool(ctx, 4, 2, conv_shapes=[(8, 3)], temporal_shape=(2, 8, 16),
                      conv_dtype="bfloat16", temporal_dtype="float32")
    hyb = kvc.HybridReqToTokenPool(ctx, rp, m)
    alloc = kvc.Allocator(ctx, 256, page_size=16)

    class Keep(kvc.PrefixCache):

        def cache_finished_req(self, flow, req, is_insert):
            flow.free_slots(flow.row_slots(req.req_row, 0, req.kv_committed_len))

    flow = kvc.Flow(ctx, rp, alloc, cache=Keep(), hybrid_req_pool=hyb)
    batch = kvc.RequestBatch(2)
    batch.add(seq_len=20)
    s = torch.cuda.current_stream()
    flow.alloc_for_extend(batch, stream=s)
    conv = torch.from_dlpack(m.conv_buffer(0))
    assert conv.is_cuda and conv.dtype == torch.bfloat16 and conv.shape == (5, 8, 3)
    flow.release(batch, stream=s)
    torch.cuda.synchronize()
    assert alloc.available_size() == 256 and m.available_size() == 4
