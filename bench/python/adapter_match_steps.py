#!/usr/bin/env python3
"""Where kvcache.sglang's RadixCache.match_prefix spends its time with a list key.

Issue 18 item 4 compares the adapter's match of a 1024-token request (a Python list of
1023 ints as the key) with the C call through ctypes. This prints, per round, the median
host microseconds of: the adapter call; the _kvcfast call it makes (the list converted to
int32 in C, then the match); the same _kvcfast match on an int32 array (no conversion);
the standard library's own conversion, array('i', list); and an empty timed interval.

  KVCACHE_LIB=build/libkvcache.so python3 bench/python/adapter_match_steps.py [--ps 16]
Needs the _kvcfast extension (cmake -DKVC_BUILD_PYTHON_EXT=ON) and PyTorch or NumPy.
"""
import argparse
import array
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from kvcache import sglang as S  # noqa: E402
from kvcache.sglang import _ops as T  # noqa: E402


def median_us(fn, reps):
    ns = time.perf_counter_ns
    v = []
    for _ in range(reps):
        t0 = ns()
        fn()
        v.append(ns() - t0)
    return statistics.median(v) / 1000.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ps", type=int, default=16)
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=4000)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    if T.fast is None:
        sys.exit("the _kvcfast extension is not loaded (build it, unset KVCACHE_NO_FAST)")
    n, ps = a.length, a.ps
    pool = S.ReqToTokenPool(4, n + ps, a.device)
    if ps == 1:
        alloc = S.TokenToKVPoolAllocator(4 * (n + ps), "float16", a.device, None, False)
    else:
        alloc = S.PagedTokenToKVPoolAllocator(4 * (n + ps), ps, "float16", a.device, None, False)
    cache = S.RadixCache(pool, alloc, ps)
    toks = list(range(1000, 1000 + n))
    r = S.Req(origin_input_ids=toks, fill_ids=list(toks))
    S.ScheduleBatch([r], pool, cache, device=a.device).prepare_for_extend()
    S.release_kv_cache(r, cache)
    ids = toks[:-1]
    key = S.MatchPrefixParams(S.RadixKey(ids))
    fast, th, out = T.fast, cache._th, cache._maddr
    a32 = array.array("i", ids)
    p, k = a32.buffer_info()
    print("match of %d tokens (key %d), page %d, device %s: median host us" % (n, n - 1, ps, a.device))
    for rnd in range(a.rounds):
        print("round %d  adapter %.2f  _kvcfast list %.2f  _kvcfast int32 %.2f  array('i', list) %.2f  "
              "empty %.2f" % (rnd,
                              median_us(lambda: cache.match_prefix(key), a.reps),
                              median_us(lambda: fast.radix_match_list(th, 0, ids, out), a.reps),
                              median_us(lambda: fast.radix_match(th, 0, p, k, out), a.reps),
                              median_us(lambda: array.array("i", ids), a.reps),
                              median_us(lambda: None, a.reps)))


if __name__ == "__main__":
    main()
