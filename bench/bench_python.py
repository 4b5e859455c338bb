#!/usr/bin/env python3
"""Host time of the Python binding next to the same C call, in one process (issue 16).

Each scheduler call is timed twice on the same objects, alternating round by round: once
through the binding (time.perf_counter_ns around the Python method) and once in C by
libkvc_pybench (bench/bench_python_helper.c: clock_gettime(CLOCK_MONOTONIC) around the
library call, called through ctypes, so only the library call itself is inside its
clock). Reported: median and p90 in microseconds and the binding/C ratio of the medians.

Scenarios (host backend unless --backend cuda):
  decode B      Flow.alloc_for_decode(RequestBatch) at batch B, one token per request,
                requests with 128-token prompts, 64 steps per round
  extend BxL    Flow.alloc_for_extend(RequestBatch) of B new requests of L tokens
  release 4096  Flow.release of one finished 4096-token request
  alloc_decode  Allocator.alloc_decode(seq_lens, out=...) at batch 256 from NumPy int64,
                a list, and torch CPU tensors when torch is installed (token allocator)

  python3 bench/bench_python.py [--backend host|cuda] [--rounds N] [--csv FILE]
  env: KVCACHE_LIB (library), KVCB_HELPER (libkvc_pybench.so; default: the library's
  build directory's bench/), KVCACHE_NO_FAST=1 (plain ctypes even when the optional
  _kvcfast extension is built)
"""
import argparse
import ctypes
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import kvcache as kvc  # noqa: E402

_ns = time.perf_counter_ns


def _helper():
    path = os.environ.get("KVCB_HELPER") or os.path.join(
        os.path.dirname(os.path.realpath(kvc.library_path)), "bench", "libkvc_pybench.so")
    if not os.path.exists(path):
        sys.exit("bench_python: %s not found (build the kvc_pybench target, or set "
                 "KVCB_HELPER)" % path)
    h = ctypes.CDLL(path)
    P, I64P = ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)
    h.kvcb_flow_decode.argtypes = [P, P, ctypes.c_size_t, ctypes.c_int32, P, I64P]
    h.kvcb_flow_extend.argtypes = [P, P, ctypes.c_size_t, P, I64P]
    h.kvcb_flow_release.argtypes = [P, P, ctypes.c_size_t, ctypes.c_int, I64P]
    h.kvcb_alloc_decode.argtypes = [P, ctypes.c_size_t, P, P, P, I64P]
    return h


def _stats(xs):
    xs = sorted(xs)
    return statistics.median(xs) / 1000.0, xs[int(0.9 * (len(xs) - 1))] / 1000.0


class Bench:
    def __init__(self, args):
        self.args = args
        self.h = _helper()
        self.ctx = kvc.Context(backend=args.backend, disk_cache=True)
        self.rows = []

    def report(self, name, py, c, target=None):
        pm, p9 = _stats(py)
        cm, c9 = _stats(c)
        ratio = pm / cm
        verdict = "" if target is None else ("ok" if ratio <= target else "MISS")
        self.rows.append((name, pm, p9, cm, c9, ratio, target, verdict))
        print("%-28s %9.2f %9.2f %9.2f %9.2f %7.2fx %s" % (
            name, pm, p9, cm, c9, ratio,
            "" if target is None else "(target <= %.1fx: %s)" % (target, verdict)))
        sys.stdout.flush()

    def _world(self, batch, ctxlen, page_size):
        rp = kvc.ReqToTokenPool(self.ctx, batch, ctxlen)
        alloc = kvc.Allocator(self.ctx, batch * ctxlen + 4 * page_size, page_size=page_size)
        return rp, alloc, kvc.Flow(self.ctx, rp, alloc)

    def decode(self, batch, page_size=1, prompt=128, steps=64):
        rp, alloc, flow = self._world(batch, prompt + steps + page_size, page_size)
        reqs = kvc.RequestBatch(batch)
        for _ in range(batch):
            reqs.add()
        out = self.ctx.empty(batch, "int64")
        fh, pp, h = flow.handle, reqs._pp, self.h
        ns = ctypes.c_int64()
        py, c = [], []
        for r in range(self.args.rounds):
            for via_c in ((False, True) if r % 2 == 0 else (True, False)):
                for q in reqs:
                    q.seq_len, q.prefix_len = prompt, 0
                flow.alloc_for_extend(reqs)
                if via_c:
                    for _ in range(steps):
                        st = h.kvcb_flow_decode(fh, pp, batch, 1, out.ptr, ns)
                        if st:
                            sys.exit("C decode failed: %d" % st)
                        c.append(ns.value)
                else:
                    for _ in range(steps):
                        t0 = _ns()
                        flow.alloc_for_decode(reqs)
                        py.append(_ns() - t0)
                flow.release(reqs)
        self.report("decode B=%d ps=%d" % (batch, page_size), py, c,
                    {256: 1.5, 1024: 1.3}.get(batch))
        flow.close()

    def extend(self, batch, length, page_size=1, reps=None):
        reps = reps or max(self.args.rounds * 8, 40)
        rp, alloc, flow = self._world(batch, length + page_size, page_size)
        reqs = kvc.RequestBatch(batch)
        for _ in range(batch):
            reqs.add()
        out = self.ctx.empty(batch * length, "int64")
        fh, pp, h = flow.handle, reqs._pp, self.h
        ns = ctypes.c_int64()
        py, c = [], []
        for r in range(reps):
            for via_c in ((False, True) if r % 2 == 0 else (True, False)):
                for q in reqs:
                    q.seq_len, q.prefix_len = length, 0
                if via_c:
                    st = h.kvcb_flow_extend(fh, pp, batch, out.ptr, ns)
                    if st:
                        sys.exit("C extend failed: %d" % st)
                    c.append(ns.value)
                else:
                    t0 = _ns()
                    flow.alloc_for_extend(reqs)
                    py.append(_ns() - t0)
                flow.release(reqs)
        self.report("extend %dx%d ps=%d" % (batch, length, page_size), py, c, 1.5)
        flow.close()

    def release(self, length=4096, page_size=1, reps=None):
        reps = reps or max(self.args.rounds * 8, 40)
        rp, alloc, flow = self._world(1, length + page_size, page_size)
        reqs = kvc.RequestBatch(1)
        q = reqs.add()
        fh, pp, h = flow.handle, reqs._pp, self.h
        ns = ctypes.c_int64()
        py, c = [], []
        for r in range(reps):
            for via_c in ((False, True) if r % 2 == 0 else (True, False)):
                q.seq_len, q.prefix_len = length, 0
                flow.alloc_for_extend(reqs)
                if via_c:
                    st = h.kvcb_flow_release(fh, pp, 1, 1, ns)
                    if st:
                        sys.exit("C release failed: %d" % st)
                    c.append(ns.value)
                else:
                    t0 = _ns()
                    flow.release(reqs)
                    py.append(_ns() - t0)
        self.report("release %d ps=%d" % (length, page_size), py, c, 1.5)
        flow.close()

    def alloc_decode(self, batch=256, reps=None):
        reps = reps or max(self.args.rounds * 20, 100)
        alloc = kvc.Allocator(self.ctx, 4 * batch)
        seq = [2] * batch
        forms = [("list", seq)]
        try:
            import numpy as np
            forms.append(("numpy", np.array(seq, np.int64)))
            out = np.zeros(batch, np.int64)
        except ImportError:
            out = (ctypes.c_int64 * batch)()
        try:
            import torch
            forms.append(("torch cpu", torch.tensor(seq, dtype=torch.int64)))
        except ImportError:
            pass
        c_seq = (ctypes.c_int64 * batch)(*seq)
        c_out = (ctypes.c_int64 * batch)()
        ns = ctypes.c_int64()
        state = alloc.backup_state()
        for name, x in forms:
            py, c = [], []
            for r in range(reps):
                for via_c in ((False, True) if r % 2 == 0 else (True, False)):
                    if via_c:
                        self.h.kvcb_alloc_decode(alloc.handle, batch, c_seq, None, c_out, ns)
                        c.append(ns.value)
                    else:
                        t0 = _ns()
                        alloc.alloc_decode(x, out=out)
                        py.append(_ns() - t0)
                    alloc.restore_state(state)
            self.report("alloc_decode B=%d %s" % (batch, name), py, c)
        alloc.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="host")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--csv")
    args = ap.parse_args()
    b = Bench(args)
    print("kvcache %s, %s backend, Python %s, library %s, per-step calls via %s" % (
        kvc.__version__, b.ctx.backend, sys.version.split()[0], kvc.library_path,
        "the _kvcfast extension" if kvc.fast_path else "ctypes"))
    print("%-28s %9s %9s %9s %9s %8s" % ("us per call", "py med", "py p90", "C med", "C p90",
                                         "py/C"))
    for batch in (256, 1024):
        b.decode(batch, page_size=1)
        b.decode(batch, page_size=16)
    b.extend(16, 512)
    b.extend(64, 256)
    b.extend(16, 512, page_size=16)
    b.release(4096)
    b.release(4096, page_size=16)
    b.alloc_decode(256)
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("name,py_median_us,py_p90_us,c_median_us,c_p90_us,ratio,target,verdict\n")
            for row in b.rows:
                f.write("%s,%.3f,%.3f,%.3f,%.3f,%.3f,%s,%s\n" % (
                    row[0], row[1], row[2], row[3], row[4], row[5],
                    "" if row[6] is None else row[6], row[7]))
    b.ctx.close()


if __name__ == "__main__":
    main()
