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
