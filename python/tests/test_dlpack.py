"""DLPack exports (issue 16): capsules die in C, a refusing consumer keeps its own error,
views keep their pool alive and let it go, FP4 exports as PyTorch's float4_e2m1fn_x2."""
import ctypes
import gc
import os
import subprocess
import sys

import numpy as np
import pytest

import kvcache as kvc
from kvcache import _ffi

_capi = ctypes.PyDLL(None)
_get = _capi.PyCapsule_GetPointer
_get.restype = ctypes.c_void_p
_get.argtypes = [ctypes.py_object, ctypes.c_char_p]


@pytest.fixture
def ctx():
    with kvc.Context(backend="host", disk_cache=False) as c:
        yield c


def test_refused_capsule_raises_the_consumers_error(ctx):
    pool = kvc.KVPool(ctx, 16, 1, dtype="bfloat16", head_num=1, head_dim=8)
    for _ in range(3):
        with pytest.raises(Exception) as e:
            np.from_dlpack(pool.k_buffer(0))  # NumPy has no bfloat16
        assert not isinstance(e.value, SystemError), e.value
    assert kvc.live_exports() == 0
    pool.close()
    assert pool._ptr is None  # destroyed, not held by a leaked export


_FINALIZER_IN_LOCK = r"""
import gc, numpy as np, kvcache as kvc
from kvcache import _dlpack
with kvc.Context(backend="host", disk_cache=False) as ctx:
    with _dlpack._lock:
        pool = kvc.KVPool(ctx, 16, 1, dtype="float32", head_num=1, head_dim=4)
        view = np.from_dlpack(pool.k_buffer(0))  # an export made inside the region
        cycle = [pool]
        cycle.append(cycle)  # only the collector frees it: __del__ runs from gc
        del view, pool, cycle
        gc.collect()
    assert kvc.live_exports() == 0
print("finished")
"""


def test_finalizer_run_inside_the_export_lock_does_not_deadlock():
    """A garbage-collection pass can start at any allocation, also while this thread holds
    the export bookkeeping's lock; the handles it finalizes close (and sweep) re-entrantly.
    CI hung here for 80 minutes with a non-reentrant lock. In a child process, so that a
    deadlock fails this test instead of hanging the suite."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(kvc.__file__)),
                                         env.get("PYTHONPATH", "")])
    try:
        r = subprocess.run([sys.executable, "-c", _FINALIZER_IN_LOCK], env=env,
                           capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("a handle's finalizer deadlocked on the export lock")
    assert r.returncode == 0 and "finished" in r.stdout, r.stderr


def test_unconsumed_capsules_are_released(ctx):
    pool = kvc.KVPool(ctx, 16, 1, dtype="float32", head_num=1, head_dim=4)
    t = pool.k_buffer(0)
    caps = [t.__dlpack__(), t.__dlpack__(max_version=(1, 0))]
    assert kvc.live_exports() == 2
    del caps
    assert kvc.live_exports() == 0
    pool.close()
    assert pool._ptr is None


def test_view_keeps_pool_until_it_dies(ctx):
    pool = kvc.KVPool(ctx, 16, 1, dtype="float32", head_num=1, head_dim=4)
    k = np.from_dlpack(pool.k_buffer(0))
    k[3] = 2.5
    out = np.zeros((1, 4), np.float32)
    pool.gather_kv(0, [3], out, np.zeros((1, 4), np.float32))
    assert (out == 2.5).all()
    pool.close()
    assert pool._ptr is not None and kvc.live_exports() == 1
    del k
    gc.collect()
    assert kvc.live_exports() == 0 and pool._ptr is None
    rp = kvc.ReqToTokenPool(ctx, 2, 4)  # pointer exports (no library tensor) too
    table = np.from_dlpack(rp.table)
    assert table.shape == (3, 4)
    rp.close()
    del table
    assert kvc.live_exports() == 0 and rp._ptr is None


def _capsule_dtype(cap, name):
    m = _ffi.DLManagedTensor.from_address(_get(cap, name))
    t = m.dl_tensor
    return (t.dtype.code, t.dtype.bits, t.dtype.lanes), [t.shape[i] for i in range(t.ndim)]


def test_fp4_exports_as_torch_packed_e2m1(ctx):
    H, D, size = 2, 32, 16
    pool = kvc.KVPool(ctx, size, 1, kind="mha_fp4", dtype="bfloat16", head_num=H, head_dim=D)
    d = pool.describe(0)
    cap = pool.k_buffer(0).__dlpack__()
    dtype, shape = _capsule_dtype(cap, b"dltensor")
    assert dtype == (17, 4, 2)  # kDLFloat4_e2m1fn, 4 bits x 2 lanes: float4_e2m1fn_x2
    assert shape == [size + 1, H, D // 2] == list(d["shape"])  # packed bytes, not values
    del cap
    assert kvc.live_exports() == 0
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("this torch has no float4_e2m1fn_x2")
    t = torch.from_dlpack(pool.k_buffer(0))
    assert t.dtype == torch.float4_e2m1fn_x2 and t.data_ptr() == d["data"]
    assert tuple(t.shape) == (size + 1, H, D // 2)


def test_torch_cpu_arguments_by_pointer(ctx):
    torch = pytest.importorskip("torch")
    a = kvc.Allocator(ctx, 64)
    out = torch.zeros(4, dtype=torch.int64)
    assert a.alloc(4, out=out) is out and out.tolist() == [1, 2, 3, 4]
    a.free(out.to(torch.int32))  # converted once
    with pytest.raises(kvc.InvalidArgument, match="out must be int64"):
        a.alloc(2, out=torch.zeros(2, dtype=torch.int32))
    with pytest.raises(kvc.InvalidArgument, match="out must be C-contiguous"):
        a.alloc(2, out=torch.zeros(4, dtype=torch.int64)[::2])
    pool = kvc.KVPool(ctx, 16, 1, dtype="float32", head_num=1, head_dim=4)
    with pytest.raises(kvc.InvalidArgument, match="k has 16 bytes, 32 needed"):
        pool.set_kv(0, torch.tensor([1, 2]), torch.zeros(1, 4), torch.zeros(2, 4))
    k = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    pool.set_kv(0, torch.tensor([1, 2]), k, k)
    assert torch.equal(torch.from_dlpack(pool.k_buffer(0))[1:3].reshape(2, 4), k)
