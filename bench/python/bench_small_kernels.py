#!/usr/bin/env python3
"""GPU time of the two small req_to_token kernels against SGLang's Triton kernels.

Issue 20 item 2: kvc_get_last_loc and kvc_write_req_to_token against SGLang's
get_last_loc_kernel and write_req_to_token_pool_triton, each measured as a captured CUDA
graph of G launches (launch gaps excluded), beside a graph of G empty kernels: the
per-kernel figure is graph time / G, and "over empty" subtracts the empty graph's.

SGLang is not a dependency: pass the path of its kernel file (sglang/kernels/ops/memory/
common.py from the sglang 0.5.23 wheel; it imports only torch and triton). One or more
libkvcache builds are compared in the same process (--lib LABEL=PATH, repeatable), every
configuration timed in turns, ROUNDS times; the table reports the median of the rounds
and the fastest round. Every kvcache output is compared with Triton's first (bit-exact).

  python3 bench/python/bench_small_kernels.py --sglang-kernels PATH/common.py \
      --lib new=build-gpu/libkvcache.so [--lib ref=build-ref/libkvcache.so] [--csv F]
"""
import argparse
import ctypes
import importlib.util
import os
import statistics
import sys
from ctypes import byref, c_int, c_int64, c_size_t, c_void_p

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from kvcache import _ffi  # noqa: E402  (struct layouts only; every call goes to the --lib builds)

I64 = 1  # KVC_INDEX_I64


@triton.jit
def _empty_kernel(x):
    pass


def load_sglang(path):
    spec = importlib.util.spec_from_file_location("sglang_memory_common", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Kvc:
    """One libkvcache build: its own CDLL and a CUDA context on torch's device."""

    def __init__(self, label, path):
        self.label = label
        self.lib = ctypes.CDLL(os.path.abspath(path))
        L = self.lib
        L.kvc_context_config_default.argtypes = [c_void_p]
        L.kvc_context_create.argtypes = [c_void_p, c_void_p]
        L.kvc_context_create.restype = c_int
        L.kvc_get_last_loc.argtypes = [c_void_p, c_void_p, c_int64, c_int64, c_void_p, c_int, c_void_p, c_int,
                                       c_void_p, c_size_t, c_void_p]
        L.kvc_get_last_loc.restype = c_int
        L.kvc_write_req_to_token.argtypes = [c_void_p, c_void_p, c_int64, c_int64, c_void_p, c_int, c_void_p,
                                             c_void_p, c_void_p, c_int, c_void_p, c_size_t, c_void_p]
        L.kvc_write_req_to_token.restype = c_int
        L.kvc_context_precompile.argtypes = [c_void_p]
        cfg = _ffi.ContextConfig()
        L.kvc_context_config_default(byref(cfg))
        cfg.backend = 2  # cuda
        cfg.device = torch.cuda.current_device()
        out = c_void_p()
        st = L.kvc_context_create(byref(cfg), byref(out))
        if st:
            raise RuntimeError(f"{label}: kvc_context_create failed ({st})")
        self.ctx = out.value

    def check(self, st, what):
        if st:
            raise RuntimeError(f"{self.label}: {what} returned {st}")


def graph_us(fn, launches, replays, rounds_inner=5):
    """Per-launch microseconds of a graph of `launches` calls of fn, median of a few timings."""
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        for _ in range(launches):
            fn()
    torch.cuda.synchronize()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds_inner):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(replays):
            g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0 / (replays * launches))
    del g
    return statistics.median(times)


def last_loc_case(bs, width, rows_total, dev):
    g = torch.Generator(device="cpu").manual_seed(bs)
    table = torch.randint(0, 1 << 20, (rows_total, width), dtype=torch.int32, generator=g).to(dev)
    rows = torch.randperm(rows_total, generator=g)[:bs].to(torch.int64).to(dev)
    pre = torch.randint(0, width, (bs,), dtype=torch.int64, generator=g)
    pre[::7] = 0  # some requests without a prefix: -1
    return table, rows, pre.to(dev)


def write_case(bs, pre_len, ext_len, width, dev):
    g = torch.Generator(device="cpu").manual_seed(bs * 7919 + pre_len)
    rows_total = max(bs, 1024)
    table = torch.zeros((rows_total, width), dtype=torch.int32, device=dev)
    rows = torch.randperm(rows_total, generator=g)[:bs].to(torch.int64).to(dev)
    pre = torch.full((bs,), pre_len, dtype=torch.int64, device=dev)
    seq = torch.full((bs,), pre_len + ext_len, dtype=torch.int64, device=dev)
    ext = seq - pre
    loc = torch.randint(1, 1 << 24, (bs * ext_len,), dtype=torch.int64, generator=g).to(dev)
    prefix = torch.randint(1, 1 << 24, (max(bs * pre_len, 1),), dtype=torch.int64, generator=g).to(dev)
    ptrs = torch.tensor([prefix.data_ptr() + 8 * i * pre_len for i in range(bs)], dtype=torch.uint64).to(dev)
    return table, rows, pre, seq, ext, loc, ptrs, prefix


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sglang-kernels", required=True)
    ap.add_argument("--lib", action="append", required=True, help="LABEL=PATH of a libkvcache.so")
    ap.add_argument("--launches", type=int, default=64)
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--csv")
    ap.add_argument("--eager-only", action="store_true",
                    help="run every configuration 5 times outside a graph and stop (for a profiler)")
    ap.add_argument("--dump-ptx", help="write the PTX of SGLang's two Triton kernels to this directory")
    a = ap.parse_args()
    dev = torch.device("cuda")
    sg = load_sglang(a.sglang_kernels)
    libs = [Kvc(*spec.split("=", 1)) for spec in a.lib]
    print("device:", torch.cuda.get_device_name(), "| triton", triton.__version__, "| torch", torch.__version__)
    stream_of = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731

    cases = []  # (kernel, shape, {label: fn})
    width = 4096 + 64
    for bs in (1, 64, 256, 1024):
        table, rows, pre = last_loc_case(bs, width, 2048, dev)
        res = {"triton": torch.empty_like(pre)}
        grid = (triton.cdiv(bs, 256),)

        def tri(table=table, rows=rows, pre=pre, out=res["triton"], grid=grid, bs=bs):
            sg.get_last_loc_kernel[grid](table, rows, pre, out, bs, table.stride(0), 256)

        fns = {"triton": tri}
        for k in libs:
            out = torch.empty_like(pre)
            res[k.label] = out

            def kv(k=k, table=table, rows=rows, pre=pre, out=out, bs=bs):
                k.check(k.lib.kvc_get_last_loc(k.ctx, table.data_ptr(), table.shape[0], table.stride(0),
                                               rows.data_ptr(), I64, pre.data_ptr(), I64, out.data_ptr(), bs,
                                               stream_of()), "kvc_get_last_loc")
            fns[k.label] = kv
        for f in fns.values():
            f()
        torch.cuda.synchronize()
        for k in libs:
            if not torch.equal(res[k.label], res["triton"]):
                raise SystemExit(f"get_last_loc bs={bs}: {k.label} differs from SGLang's kernel")
        cases.append(("get_last_loc", f"batch {bs}", fns))

    for bs, pl, el in ((16, 0, 512), (64, 0, 256), (64, 1024, 256), (256, 2048, 1), (1024, 1024, 16)):
        w = max(pl + el, 64)
        tables = {}
        args = write_case(bs, pl, el, w, dev)
        _, rows, pre, seq, ext, loc, ptrs, _prefix = args
        tables["triton"] = args[0]

        def tri(t=tables["triton"], rows=rows, ptrs=ptrs, pre=pre, seq=seq, ext=ext, loc=loc, bs=bs):
            sg.write_req_to_token_pool_triton[(bs,)](t, rows, ptrs, pre, seq, ext, loc, t.shape[1])

        fns = {"triton": tri}
        for k in libs:
            t = torch.zeros_like(tables["triton"])
            tables[k.label] = t

            def kv(k=k, t=t, rows=rows, ptrs=ptrs, pre=pre, seq=seq, loc=loc, bs=bs):
                k.check(k.lib.kvc_write_req_to_token(k.ctx, t.data_ptr(), t.shape[0], t.stride(0), rows.data_ptr(),
                                                     I64, ptrs.data_ptr(), pre.data_ptr(), seq.data_ptr(), I64,
                                                     loc.data_ptr(), bs, stream_of()), "kvc_write_req_to_token")
            fns[k.label] = kv
        for f in fns.values():
            f()
        torch.cuda.synchronize()
        for k in libs:
            if not torch.equal(tables[k.label], tables["triton"]):
                raise SystemExit(f"write_req_to_token {bs}x({pl}+{el}): {k.label} differs from SGLang's kernel")
        shape = f"{bs} x {el}" if pl == 0 else f"{bs} x ({pl} + {el})"
        cases.append(("write_req_to_token", shape, fns))

    if a.dump_ptx:  # what Triton generated, to compare with kernels/req_to_token.cu
        os.makedirs(a.dump_ptx, exist_ok=True)
        for kernel, _shape, fns in (cases[0], cases[4]):
            try:
                compiled = next(iter(getattr(sg, "get_last_loc_kernel" if kernel == "get_last_loc"
                                             else "write_req_to_token_pool_triton").device_caches[0][0].values()))
                with open(os.path.join(a.dump_ptx, kernel + ".ptx"), "w") as f:
                    f.write(compiled.asm["ptx"])
            except Exception as e:  # the cache layout differs between Triton versions
                print(f"no PTX for {kernel}: {e!r}")
    dummy = torch.empty(1, device=dev)
    if a.eager_only:
        for _kernel, _shape, fns in cases:
            for f in fns.values():
                for _ in range(5):
                    f()
        torch.cuda.synchronize()
        return
    empty = {"empty": lambda: _empty_kernel[(1,)](dummy)}
    samples = {}
    for r in range(a.rounds):
        # Rotate the order of the configurations each round so no build always runs first.
        for kernel, shape, fns in [("empty kernel", "grid 1", empty)] + cases:
            labels = list(fns)
            labels = labels[r % len(labels):] + labels[: r % len(labels)]
            for lab in labels:
                samples.setdefault((kernel, shape, lab), []).append(graph_us(fns[lab], a.launches, a.replays))
    floor = statistics.median(samples[("empty kernel", "grid 1", "empty")])
    labels = ["triton"] + [k.label for k in libs]
    print(f"\nGPU us per kernel, graph of {a.launches} launches x {a.replays} replays; median of {a.rounds} rounds "
          f"(fastest round); empty-kernel graph: {floor:.3f} us per launch")
    head = f"{'kernel':<20} {'shape':<18}" + "".join(f" {lab:>16}" for lab in labels)
    head += "".join(f" {lab + '/triton':>14}" for lab in labels[1:])
    print(head)
    rows_csv = ["kernel,shape,impl,median_us,min_us,over_empty_us"]
    for kernel, shape, fns in cases:
        line = f"{kernel:<20} {shape:<18}"
        med = {}
        for lab in labels:
            v = samples[(kernel, shape, lab)]
            med[lab] = statistics.median(v)
            line += f" {med[lab]:7.3f} ({min(v):6.3f})"
            rows_csv.append(f"{kernel},{shape},{lab},{med[lab]:.4f},{min(v):.4f},{med[lab] - floor:.4f}")
        for lab in labels[1:]:
            line += f" {med[lab] / med['triton']:13.2f}x"
        print(line)
    rows_csv.append(f"empty kernel,grid 1,empty,{floor:.4f},{min(samples[('empty kernel', 'grid 1', 'empty')]):.4f},0")
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("\n".join(rows_csv) + "\n")


if __name__ == "__main__":
    main()
