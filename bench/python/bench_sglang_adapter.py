#!/usr/bin/env python3
"""Host time of kvcache.sglang (the SGLang drop-in) next to the C calls it wraps, in one
process, alternating round by round (issue 18).

Scenarios, each timed through the adapter with time.perf_counter_ns and through C:
  decode B=256      common.alloc_for_decode(batch, 1) (128-token prompts, 64 steps a
                    round) vs kvc_allocator_alloc_decode with the table write
                    (the call the adapter makes), and vs kvc_flow_alloc_for_decode
                    (the library's own scheduler step on a RequestBatch)
  extend 16x512     common.alloc_for_extend(batch) of 16 new 512-token requests vs
                    kvc_allocator_alloc_extend and kvc_flow_alloc_for_extend; "rows copy"
                    (CUDA) is the same call with req_pool_indices copied from the host
                    as before kvc_allocator_alloc_extend_ex wrote it in the launch, "rows
                    launch" (host) the launch route forced on; both alternate with the
                    default route in the same rounds
  release 4096      common.release_kv_cache(req, ChunkCache) of a 4096-token request vs
                    kvc_allocator_free of its slots and kvc_flow_release
  match             RadixCache.match_prefix(key) of a 1023-token key (the cached prompt
                    minus its last token), page 1 and 16, token_ids a list ("list": the
                    adapter converts it, about 4 ns a token) or an array('i') ("i32":
                    read in place), vs kvc_radix_cache_match_prefix on int32 tokens; a
                    repeated match hands out the result kept for that node ("new": the
                    kept results dropped before each call, so the tensor is built and,
                    on CUDA, copied to the device again)
  release radix     common.release_kv_cache(req, RadixCache) of a finished 4096-token
                    request (inserted as a new leaf) vs kvc_radix_cache_cache_finished_req
  alloc/free 256    TokenToKVPoolAllocator / Paged...(ps 16).alloc(256) and free() of it vs
                    kvc_allocator_alloc / kvc_allocator_free (no target in issue 18)
Then the host time of the framework operations the paths are built from (tensor from a
list, add with out=, a slice, an address, the stream lookup; on CUDA also an empty
device tensor and host->device copies with and without non_blocking).
C timings: "C(clock)" is clock_gettime around the library call inside C
(libkvc_pybench, bench/bench_python_helper.c); "C(ctypes)" is perf_counter_ns around a
ctypes call of the wrapped function from prepared arguments, minus the median cost of a
no-op ctypes call measured in the same run (so it estimates the library time alone).
Targets (issue 18, CUDA backend on an H200): decode <= 15 us, extend <= 30 us,
release <= 8 us, radix match <= 2x the C call.

  python3 bench/python/bench_sglang_adapter.py [--backend host|cuda] [--rounds N] [--csv F]
  (the CSV goes to $OUT or the temp directory without --csv; the target rows are printed
  again at the end, after the primitives)
  env: KVCACHE_LIB, KVCB_HELPER (libkvc_pybench.so, default: next to the library's
  bench/), KVCACHE_NO_FAST=1
"""
import argparse
import array
import ctypes
import os
import statistics
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
import kvcache as kvc  # noqa: E402
import kvcache.sglang as S  # noqa: E402
from kvcache.sglang import _ops as T, common as C  # noqa: E402

_ns = time.perf_counter_ns
lib = kvc._ffi.lib


def _helper():
    path = os.environ.get("KVCB_HELPER") or os.path.join(
        os.path.dirname(os.path.realpath(kvc.library_path)), "bench", "libkvc_pybench.so")
    if not os.path.exists(path):
        return None
    h = ctypes.CDLL(path)
    P, I64P = ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)
    h.kvcb_flow_decode.argtypes = [P, P, ctypes.c_size_t, ctypes.c_int32, P, I64P]
    h.kvcb_flow_extend.argtypes = [P, P, ctypes.c_size_t, P, I64P]
    h.kvcb_flow_release.argtypes = [P, P, ctypes.c_size_t, ctypes.c_int, I64P]
    return h


def med(xs):
    return statistics.median(xs) / 1000.0 if xs else float("nan")


def p90(xs):
    xs = sorted(xs)
    return xs[int(0.9 * (len(xs) - 1))] / 1000.0 if xs else float("nan")


class Bench:
    def __init__(self, args):
        self.args = args
        self.dev = "cpu" if args.backend == "host" else "cuda:0"
        self.ctx = S.get_context(self.dev)
        self.h = _helper()
        self.rows = []
        noop = []
        f = lib.kvc_allocator_available_size
        a = kvc.Allocator(self.ctx, 16)
        hd = a.handle
        for _ in range(2000):
            t0 = _ns()
            f(hd)
            noop.append(_ns() - t0)
        self.ctypes_ns = statistics.median(noop)
        self.keep = a
        self.head = ("backend %s, fast path %s, adapter entries %s, torch %s, ctypes call "
                     "overhead %.2f us (subtracted from C(ctypes))" % (
                         args.backend, kvc.fast_path or "none",
                         "on" if T.fast is not None else "OFF (ctypes)",
                         T.torch.__version__ if T.torch is not None else "none (NumPy)",
                         self.ctypes_ns / 1000))
        print(self.head)
        print("%-22s %9s %9s %10s %10s %8s  %s" % ("scenario", "adapter", "p90", "C(ctypes)",
                                                   "C(clock)", "ratio", "target"))

    def report(self, name, py, c_ctypes, c_clock, target, kind):
        pm = med(py)
        cc = max(med(c_ctypes) - self.ctypes_ns / 1000, 0.01) if c_ctypes else float("nan")
        ck = med(c_clock)
        ref = ck if c_clock else cc
        ratio = pm / ref if ref == ref else float("nan")
        if kind == "us":
            ok = "ok" if pm <= target else "MISS"
            tgt = "<= %g us: %s" % (target, ok)
        elif kind is None:
            tgt = "-"
        else:
            ok = "ok" if ratio <= target else "MISS"
            tgt = "<= %gx C: %s" % (target, ok)
        self.rows.append((name, pm, p90(py), cc, ck, ratio, tgt))
        print("%-22s %9.2f %9.2f %10.2f %10.2f %7.2fx  %s" % (name, pm, p90(py), cc, ck, ratio,
                                                               tgt))
        sys.stdout.flush()

    def _world(self, rows, width, size, ps):
        pool = S.ReqToTokenPool(rows, width, self.dev)
        if ps == 1:
            alloc = S.TokenToKVPoolAllocator(size, "float16", self.dev, None, False)
        else:
            alloc = S.PagedTokenToKVPoolAllocator(size, ps, "float16", self.dev, None, False)
        return pool, alloc, S.ChunkCache(pool, alloc, ps)

    def _flow(self, rows, width, size, ps):
        rp = kvc.ReqToTokenPool(self.ctx, rows, width)
        al = kvc.Allocator(self.ctx, size, page_size=ps)
        return kvc.Flow(self.ctx, rp, al)

    def decode(self, batch=256, ps=1, prompt=128, steps=64):
        width, size = prompt + steps + ps, batch * (prompt + steps + 2 * ps)
        pool, alloc, cache = self._world(batch, width, size, ps)
        flow = self._flow(batch, width, size, ps)
        rb = kvc.RequestBatch(batch)
        for _ in range(batch):
            rb.add()
        fout = self.ctx.empty(batch, "int64")
        seq = T.host_empty(batch)
        rows32 = T.host_empty(batch, T.I32)
        out_h = T.host_empty(batch)
        out_d = T.empty(batch, T.I64, self.dev) if T.is_cuda(self.dev) else None
        od = T.ptr(out_d) if out_d is not None else None
        ns = ctypes.c_int64()
        py, cc, ck = [], [], []
        fn = lib.kvc_allocator_alloc_decode
        for r in range(self.args.rounds):
            for mode in ((0, 1, 2) if r % 2 == 0 else (2, 1, 0)):
                if mode == 2:
                    if self.h is None:
                        continue
                    for q in rb:
                        q.seq_len, q.prefix_len = prompt, 0
                    flow.alloc_for_extend(rb)
                    for _ in range(steps):
                        self.h.kvcb_flow_decode(flow.handle, rb._pp, batch, 1, fout.ptr, ns)
                        ck.append(ns.value)
                    flow.release(rb)
                    continue
                reqs = [S.Req(fill_ids=list(range(prompt))) for _ in range(batch)]
                b = S.ScheduleBatch(reqs, pool, cache, device=self.dev)
                b.prepare_for_extend()
                s = b.seq_lens_cpu
                for i, q in enumerate(reqs):
                    rows32[i] = q.req_pool_idx
                for _ in range(steps):
                    if mode == 0:
                        t0 = _ns()
                        S.alloc_for_decode(b, 1)
                        py.append(_ns() - t0)
                    else:
                        if T.torch is not None:
                            T.torch.add(s, 1, out=seq)
                        else:
                            T.np.add(s, 1, out=seq)
                        a1, a2 = T.ptr(seq), T.ptr(rows32)
                        a3 = T.ptr(out_h) if od is None else None  # as the adapter: one output
                        sm = T.stream(T.is_cuda(self.dev))
                        t0 = _ns()  # the adapter's call: its output, its stream
                        fn(alloc._h, batch, a1, None, pool._h, a2, a3, od, sm)
                        cc.append(_ns() - t0)
                    s += 1
                    for q in reqs:
                        q.kv_committed_len += 1
                        q.kv_allocated_len += 1
                for q in reqs:
                    S.release_kv_cache(q, cache)
        self.report("decode B=%d ps=%d" % (batch, ps), py, cc, ck, 15, "us")

    def extend(self, batch=16, length=512, ps=1, reps=None):
        reps = reps or max(self.args.rounds * 8, 40)
        width, size = length + ps, batch * (length + 2 * ps)
        pool, alloc, cache = self._world(batch, width, size, ps)
        flow = self._flow(batch, width, size, ps)
        rb = kvc.RequestBatch(batch)
        for _ in range(batch):
            rb.add()
        fout = self.ctx.empty(batch * length, "int64")
        ns = ctypes.c_int64()
        pre = T.host_array([0] * batch)
        seqv = T.host_array([length] * batch)
        rows32 = (ctypes.c_int32 * batch)()
        prefix = (ctypes.c_void_p * batch)()
        out_h = T.host_empty(batch * length)
        out_d = T.empty(batch * length, T.I64, self.dev) if T.is_cuda(self.dev) else None
        od = T.ptr(out_d) if out_d is not None else None
        py, cc, ck, alt = [], [], [], []
        fn = lib.kvc_allocator_alloc_extend
        # The other req_pool_indices route, alternating with the default in the same run
        # (a same-process before/after): on CUDA the host->device copy of the rows that
        # the adapter made before kvc_allocator_alloc_extend_ex, on the host backend the
        # slab route forced on (its cost there; by default the host returns rows_cpu).
        hot = C._hot(alloc)
        routes = (hot.rows_slab, None if hot.rows_slab is not None else T.Slab(self.dev))
        alt_name = "copy" if hot.rows_slab is not None else "launch"
        for r in range(reps):
            for mode in ((0, 1, 2, 3) if r % 2 == 0 else (3, 2, 1, 0)):
                if mode == 2:
                    if self.h is None:
                        continue
                    for q in rb:
                        q.seq_len, q.prefix_len = length, 0
                    self.h.kvcb_flow_extend(flow.handle, rb._pp, batch, fout.ptr, ns)
                    ck.append(ns.value)
                    flow.release(rb)
                    continue
                reqs = [S.Req(fill_ids=list(range(length))) for _ in range(batch)]
                b = S.ScheduleBatch(reqs, pool, cache, device=self.dev)
                b.prefix_lens = [0] * batch
                b.extend_num_tokens = batch * length
                b.seq_lens_cpu = b.seq_lens = seqv
                if mode in (0, 3):
                    hot.rows_slab = routes[mode // 3]
                    t0 = _ns()
                    S.alloc_for_extend(b)
                    (alt if mode else py).append(_ns() - t0)
                    hot.rows_slab = routes[0]
                else:
                    S.alloc_req_slots(pool, reqs, cache)
                    for i, q in enumerate(reqs):
                        rows32[i] = q.req_pool_idx
                    a1, a2 = T.ptr(pre), T.ptr(seqv)
                    a3 = T.ptr(out_h) if od is None else None  # as the adapter: one output
                    sm = T.stream(T.is_cuda(self.dev))
                    t0 = _ns()  # the adapter's call: its output, its stream
                    fn(alloc._h, batch, a1, a2, None, pool._h, rows32, prefix, a3, od, sm)
                    cc.append(_ns() - t0)
                for q in reqs:
                    q.kv_committed_len = q.kv_allocated_len = length
                    S.release_kv_cache(q, cache)
        self.report("extend %dx%d ps=%d" % (batch, length, ps), py, cc, ck, 30, "us")
        self.report("extend ps=%d rows %s" % (ps, alt_name), alt, cc, ck, 30, None)

    def release(self, length=4096, ps=1, reps=None):
        reps = reps or max(self.args.rounds * 8, 40)
        pool, alloc, cache = self._world(1, length + ps, length + 2 * ps, ps)
        flow = self._flow(1, length + ps, length + 2 * ps, ps)
        rb = kvc.RequestBatch(1)
        q = rb.add()
        ns = ctypes.c_int64()
        py, cc, ck = [], [], []
        slots = T.host_empty(length)
        fn = lib.kvc_allocator_free
        for r in range(reps):
            for mode in ((0, 1, 2) if r % 2 == 0 else (2, 1, 0)):
                if mode == 2:
                    if self.h is None:
                        continue
                    q.seq_len, q.prefix_len = length, 0
                    flow.alloc_for_extend(rb)
                    self.h.kvcb_flow_release(flow.handle, rb._pp, 1, 1, ns)
                    ck.append(ns.value)
                    continue
                req = S.Req(fill_ids=list(range(length)))
                S.ScheduleBatch([req], pool, cache, device=self.dev).prepare_for_extend()
                if mode == 0:
                    t0 = _ns()
                    S.release_kv_cache(req, cache)
                    py.append(_ns() - t0)
                else:
                    slots[:] = pool.row_host(req.req_pool_idx, 0, length)
                    p = T.ptr(slots)
                    t0 = _ns()
                    fn(alloc._h, p, length)
                    cc.append(_ns() - t0)
                    pool.free(req)
        self.report("release %d ps=%d" % (length, ps), py, cc, ck, 8, "us")

    def radix_release(self, length=4096, ps=1, reps=None):
        """release_kv_cache(req, RadixCache) of a finished request with distinct tokens
        (its [0, len) inserted as a new leaf, then evicted outside the timing), vs
        kvc_radix_cache_cache_finished_req on a bound ReqState (ctypes)."""
        reps = reps or max(self.args.rounds * 8, 40)
        pool, alloc, _ = self._world(1, length + ps, 2 * (length + ps), ps)
        cache = S.RadixCache(pool, alloc, ps)
        fn = lib.kvc_radix_cache_cache_finished_req
        py, cc = [], []
        base = 0
        for r in range(reps):
            for via_c in ((False, True) if r % 2 == 0 else (True, False)):
                base += length
                toks = list(range(base, base + length))
                req = S.Req(origin_input_ids=toks, fill_ids=list(toks))
                S.ScheduleBatch([req], pool, cache, device=self.dev).prepare_for_extend()
                if via_c:
                    st, _ = cache._bind(req, array.array("i", toks), length)
                    t0 = _ns()
                    fn(cache._tree.handle, cache._fh, ctypes.addressof(st), 1)
                    cc.append(_ns() - t0)
                    cache._tree.unbind(st)
                    pool.free(req)
                else:
                    t0 = _ns()
                    S.release_kv_cache(req, cache)
                    py.append(_ns() - t0)
                cache.evict(S.EvictParams(num_tokens=length))
        self.report("release %d radix ps=%d" % (length, ps), py, cc, [], None, None)

    def radix_match(self, length=1024, ps=1, reps=None, key_kind="list", fresh=False):
        reps = reps or max(self.args.rounds * 20, 200)
        pool, alloc, _ = self._world(4, length + ps, 4 * (length + ps), ps)
        cache = S.RadixCache(pool, alloc, ps)
        toks = list(range(1000, 1000 + length))
        r = S.Req(origin_input_ids=toks, fill_ids=list(toks))
        S.ScheduleBatch([r], pool, cache, device=self.dev).prepare_for_extend()
        S.release_kv_cache(r, cache)
        ids = toks[:-1] if key_kind == "list" else array.array("i", toks[:-1])
        key = S.MatchPrefixParams(S.RadixKey(ids))
        c_toks = (ctypes.c_int32 * length)(*toks)
        m = kvc.radix._Match()
        fn, th = lib.kvc_radix_cache_match_prefix, cache._tree.handle
        py, cc = [], []
        for i in range(reps):
            for via_c in ((False, True) if i % 2 == 0 else (True, False)):
                if via_c:
                    t0 = _ns()
                    fn(th, 0, c_toks, length - 1, ctypes.byref(m))
                    cc.append(_ns() - t0)
                else:
                    if fresh:  # no kept result: the tensor is built (and copied) again
                        cache.clear_match_results()
                    t0 = _ns()
                    res = cache.match_prefix(key)
                    py.append(_ns() - t0)
        assert T.numel(res.device_indices) == m.len
        if fresh:
            self.report("match %d ps=%d %s new" % (length, ps, key_kind), py, cc, [], None,
                        None)
        else:
            self.report("match %d ps=%d %s" % (length, ps, key_kind), py, cc, [], 2, "x")


    def alloc_free(self, n=256, ps=1, reps=None):
        """The allocator-level calls (SGLang's alloc_token_slots / free paths):
        alloc(n) returning a fresh tensor (on CUDA: the device result written by the
        library's launch), then
        free(that tensor) (its host copy is read, no device read)."""
        reps = reps or max(self.args.rounds * 20, 200)
        _, alloc, _ = self._world(1, 16, 4 * n, ps)
        out_h = T.host_empty(n)
        pa, pf = [], []
        ca, cf = [], []
        fa, ff = lib.kvc_allocator_alloc, lib.kvc_allocator_free
        a1 = ctypes.cast(T.ptr(out_h), ctypes.POINTER(ctypes.c_int64))
        for i in range(reps):
            for via_c in ((False, True) if i % 2 == 0 else (True, False)):
                if via_c:
                    t0 = _ns()
                    fa(alloc._h, n, a1)
                    t1 = _ns()
                    ff(alloc._h, a1, n)
                    t2 = _ns()
                    ca.append(t1 - t0)
                    cf.append(t2 - t1)
                else:
                    t0 = _ns()
                    out = alloc.alloc(n)
                    t1 = _ns()
                    alloc.free(out)
                    t2 = _ns()
                    pa.append(t1 - t0)
                    pf.append(t2 - t1)
        self.report("alloc %d ps=%d" % (n, ps), pa, ca, [], None, None)
        self.report("free %d ps=%d" % (n, ps), pf, cf, [], None, None)

    def primitives(self):
        """Host time of the framework operations the adapter's paths are made of, on
        this backend (what the scenarios above spend outside the library)."""
        dev = self.dev
        cuda = T.is_cuda(dev)
        h16 = T.host_array(list(range(16)))
        s256 = T.host_array(list(range(256)))
        o256 = T.host_empty(256)
        big = T.empty(4096, T.I64, dev)
        ops = [("host_array(16 ints)", lambda: T.host_array([1] * 16)),
               ("add(256, 1, out=)", (lambda: T.torch.add(s256, 1, out=o256))
                if T.torch is not None else (lambda: T.np.add(s256, 1, out=o256))),
               ("slice [:256]", lambda: big[:256]),
               ("ptr()", lambda: T.ptr(s256)),
               ("stream()", lambda: T.stream(cuda))]
        if cuda:
            torch = T.torch
            ops += [("current_stream().cuda_stream",
                     lambda: torch.cuda.current_stream().cuda_stream),
                    ("empty(256) on device", lambda: torch.empty(256, dtype=T.I64, device=dev)),
                    ("to(dev, non_blocking=True)", lambda: h16.to(dev, non_blocking=True)),
                    ("to(dev) (synchronizes)", lambda: h16.to(dev))]
        print("%-30s %9s" % ("primitive (%s)" % self.args.backend, "median us"))
        for name, f in ops:
            xs = []
            for _ in range(2000):
                t0 = _ns()
                f()
                xs.append(_ns() - t0)
            print("%-30s %9.2f" % (name, med(xs)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="host", choices=("host", "cuda"))
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--csv")
    args = ap.parse_args()
    if not args.csv:  # always a CSV: $OUT (the GPU machine's result folder) or the temp dir
        import tempfile
        args.csv = os.path.join(os.environ.get("OUT") or tempfile.gettempdir(),
                                "sglang-adapter-%s-%s.csv" % (
                                    args.backend, "ext" if T.fast is not None else "ctypes"))
    b = Bench(args)
    for ps in (1, 16):
        b.decode(256, ps)
    for ps in (1, 16):
        b.extend(16, 512, ps)
    for ps in (1, 16):
        b.release(4096, ps)
    for ps in (1, 16):
        b.radix_release(4096, ps)
    for ps in (1, 16):
        for kind in ("list", "i32"):
            b.radix_match(1024, ps, key_kind=kind)
    b.radix_match(1024, 16, key_kind="i32", fresh=True)
    b.alloc_free(256, 1)
    b.alloc_free(256, 16)
    b.primitives()
    with open(args.csv, "w") as f:
        f.write("scenario,adapter_us,adapter_p90_us,c_ctypes_us,c_clock_us,ratio,target\n")
        for row in b.rows:
            f.write("%s,%.3f,%.3f,%.3f,%.3f,%.3f,%s\n" % row)
    # Issue 18 item 4's rows again, last, so that a tail of the output always has them.
    print("=== issue 18 item 4 targets (median us; CSV: %s)" % args.csv)
    print(b.head)
    print("%-22s %9s %10s %10s %8s  %s" % ("scenario", "adapter", "C(ctypes)", "C(clock)",
                                           "ratio", "target"))
    for name, pm, _, cc, ck, ratio, tgt in b.rows:
        if tgt != "-":
            print("%-22s %9.2f %10.2f %10.2f %7.2fx  %s" % (name, pm, cc, ck, ratio, tgt))


if __name__ == "__main__":
    main()
