#!/usr/bin/env python3
"""Where the adapter's alloc_for_extend spends its host time (issue 18 item 4): the
whole call next to the _kvcfast.extend_new call inside it (timed by a wrapper around
the module global), for 16 new 512-token requests at page 1 and 16, with the release
between calls untimed. Prints medians and p90 in us over the repetitions.

  python3 bench/diag/adapter_extend_parts.py [--backend host|cuda] [--reps N]
"""
import argparse
import os
import statistics
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
import kvcache.sglang as S  # noqa: E402
from kvcache.sglang import _ops as T, common as C  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--backend", default="host")
ap.add_argument("--reps", type=int, default=2000)
args = ap.parse_args()
dev = "cuda" if args.backend == "cuda" else "cpu"
_ns = time.perf_counter_ns
inner = []
real = C._EXTEND_NEW


def timed(*a):
    t0 = _ns()
    r = real(*a)
    inner.append(_ns() - t0)
    return r


def q(v, f):
    v = sorted(v)
    return v[min(len(v) - 1, int(f * len(v)))] / 1000.0


for ps in (1, 16):
    batch, length = 16, 512
    pool = S.ReqToTokenPool(batch, length + ps, dev)
    size = batch * (length + 2 * ps)
    alloc = (S.TokenToKVPoolAllocator(size, "float16", dev, None, False) if ps == 1 else
             S.PagedTokenToKVPoolAllocator(size, ps, "float16", dev, None, False))
    cache = S.ChunkCache(pool, alloc, ps)
    seqv = T.host_array([length] * batch)
    for mode in ("plain", "wrapped", "plain", "wrapped"):
        C._EXTEND_NEW = timed if mode == "wrapped" else real
        inner.clear()
        tot = []
        for r in range(args.reps + 200):
            reqs = [S.Req(fill_ids=list(range(length))) for _ in range(batch)]
            b = S.ScheduleBatch(reqs, pool, cache, device=dev)
            b.prefix_lens = [0] * batch
            b.extend_num_tokens = batch * length
            b.seq_lens_cpu = b.seq_lens = seqv
            t0 = _ns()
            S.alloc_for_extend(b)
            if r >= 200:
                tot.append(_ns() - t0)
            for x in reqs:
                x.kv_committed_len = x.kv_allocated_len = length
                S.release_kv_cache(x, cache)
        line = "ps=%-2d %-8s alloc_for_extend %7.2f (p90 %7.2f)" % (ps, mode, q(tot, .5), q(tot, .9))
        if inner:
            line += "   extend_new %7.2f (p90 %7.2f)   the rest %6.2f" % (
                q(inner[200:], .5), q(inner[200:], .9), q(tot, .5) - q(inner[200:], .5))
        print(line)
        sys.stdout.flush()
    C._EXTEND_NEW = real
