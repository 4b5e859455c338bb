"""In-process A/B: main's kvcache.sglang.common (loaded as a second module over the same
package, library and extension) vs this tree's, alternating call by call, with the C call
(kvc_allocator_alloc_extend / kvc_allocator_free through ctypes) in the same rounds."""
import os, sys, time, statistics, ctypes, types, importlib
sys.path.insert(0, "/work/wt-adapter18c/python")
import kvcache.sglang as S
from kvcache.sglang import _ops as T, common as NEW
ns = time.perf_counter_ns
lib = T.lib
def load_old():
    src = open(os.environ.get("OLD", "/work/main/python/kvcache/sglang/common.py")).read()
    m = types.ModuleType("kvcache.sglang._old_common")
    m.__package__ = "kvcache.sglang"
    m.__file__ = "old_common.py"
    exec(compile(src, "old_common.py", "exec"), m.__dict__)
    return m
OLD = load_old()
_junk = [T.host_empty(1 << 19), T.host_empty(1 << 19)] if os.environ.get("THRASH") else None
def thrash():
    if _junk is not None:
        _junk[0].copy_(_junk[1]) if T.torch is not None else T.np.copyto(_junk[0], _junk[1])
med = lambda x: statistics.median(x) / 1000
dev = "cpu"

def world(rows, width, size, ps, cache="chunk"):
    pool = S.ReqToTokenPool(rows, width, dev)
    alloc = S.TokenToKVPoolAllocator(size, "float16", dev, None, False) if ps == 1 else \
        S.PagedTokenToKVPoolAllocator(size, ps, "float16", dev, None, False)
    c = S.ChunkCache(pool, alloc, ps) if cache == "chunk" else S.RadixCache(pool, alloc, ps)
    return pool, alloc, c

def extend(ps, batch=16, length=512, reps=300, cache="chunk"):
    pool, alloc, c = world(batch, length + ps, batch * (length + 2 * ps), ps, cache)
    pre = T.host_array([0] * batch); seqv = T.host_array([length] * batch)
    rows32 = (ctypes.c_int32 * batch)(); prefix = (ctypes.c_void_p * batch)()
    out_h = T.host_empty(batch * length)
    res = {"old": [], "new": [], "C": []}
    base = 0
    for r in range(reps):
        order = ("old", "new", "C") if r % 2 == 0 else ("C", "new", "old")
        for mode in order:
            if cache == "chunk":
                reqs = [S.Req(fill_ids=list(range(length))) for _ in range(batch)]
            else:
                reqs = []
                for _ in range(batch):
                    base += length
                    t = list(range(base, base + length))
                    reqs.append(S.Req(origin_input_ids=t, fill_ids=list(t)))
            b = S.ScheduleBatch(reqs, pool, c, device=dev)
            b.prefix_lens = [0] * batch
            b.extend_num_tokens = batch * length
            b.seq_lens_cpu = b.seq_lens = seqv
            thrash()
            if mode == "C":
                S.alloc_req_slots(pool, reqs, c)
                for i, q in enumerate(reqs):
                    rows32[i] = q.req_pool_idx
                a1, a2, a3 = T.ptr(pre), T.ptr(seqv), T.ptr(out_h)
                t0 = ns()
                lib.kvc_allocator_alloc_extend(alloc._h, batch, a1, a2, None, pool._h, rows32, prefix, a3, None, None)
                res["C"].append(ns() - t0)
            else:
                f = (OLD if mode == "old" else NEW).alloc_for_extend
                t0 = ns(); f(b); res[mode].append(ns() - t0)
            for q in reqs:
                q.kv_committed_len = q.kv_allocated_len = length
                S.release_kv_cache(q, c)
            if cache != "chunk":
                c.evict(S.EvictParams(num_tokens=batch * length))
    return res

def release(ps, length=4096, reps=300, cache="chunk"):
    pool, alloc, c = world(1, length + ps, 2 * (length + 2 * ps), ps, cache)
    slots = T.host_empty(length)
    res = {"old": [], "new": [], "C": []}
    base = 0
    for r in range(reps):
        order = ("old", "new", "C") if r % 2 == 0 else ("C", "new", "old")
        for mode in order:
            base += length
            t = list(range(base, base + length))
            req = S.Req(origin_input_ids=t, fill_ids=list(t))
            S.ScheduleBatch([req], pool, c, device=dev).prepare_for_extend()
            thrash()
            if mode == "C":
                slots[:] = pool.row_host(req.req_pool_idx, 0, length)
                p = T.ptr(slots)
                t0 = ns(); lib.kvc_allocator_free(alloc._h, p, length); res["C"].append(ns() - t0)
                pool.free(req)
            else:
                f = (OLD if mode == "old" else NEW).release_kv_cache
                t0 = ns(); f(req, c); res[mode].append(ns() - t0)
            if cache != "chunk":
                c.evict(S.EvictParams(num_tokens=length))
    return res

def show(name, res):
    o, n, cc = med(res["old"]), med(res["new"]), med(res["C"])
    print("%-26s old %6.2f  new %6.2f  C(ctypes) %6.2f | overhead old %5.2f new %5.2f (%+.0f%%)" % (
        name, o, n, cc, o - cc, n - cc, 100 * ((n - cc) / (o - cc) - 1) if o != cc else 0))
    sys.stdout.flush()

what = os.environ.get("WHAT", "ext,rel").split(",")
for rep in range(int(os.environ.get("REP", "1"))):
    if "ext" in what:
        for ps in (1, 16): show("extend 16x512 ps=%d" % ps, extend(ps))
    if "rext" in what:
        for ps in (1, 16): show("extend radix ps=%d" % ps, extend(ps, reps=150, cache="radix"))
    if "rel" in what:
        for ps in (1, 16): show("release 4096 ps=%d" % ps, release(ps))
    if "rrel" in what:
        for ps in (1, 16): show("release radix ps=%d" % ps, release(ps, reps=150, cache="radix"))
