#!/usr/bin/env python3
"""kvcache.sglang.RadixCache at page 1, bound to its TokenToKVPoolAllocator (the default)
against unbound (RadixCache.bind_token_allocator = False), in one process, alternating
round by round (A B B A ...). Host backend. Two timings a round per mode:

  evict 10^5    tree_cache.evict(EvictParams(num_tokens=K)) on a tree of ~10^5 tokens
                (200 requests of 512 distinct tokens, inserted through insert(), their
                slots from an allocator whose free list was shuffled first, as a server's
                is after a while; then calls of K = 2048 tokens, 4 victims each, until
                the tree is empty; per call; three trees a round)
  release radix common.release_kv_cache(req, RadixCache) of a finished 4096-token request
                inserted as a new leaf (bench_sglang_adapter.py's "release radix" row:
                the request's prefill and the leaf's eviction outside the timing)

Prints one line per (round, mode, op): median and minimum us of the round's calls; then
per op the per-round ratio bound / unbound of the medians: median and range.
  python3 bench/python/bound_radix_timeit.py [--rounds N]   env: KVCACHE_LIB
"""
import argparse
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import kvcache.sglang as S  # noqa: E402

_ns = time.perf_counter_ns
REQS, LEN, K = 200, 512, 2048


def make(bound, size, width):
    S.RadixCache.bind_token_allocator = bound
    try:
        pool = S.ReqToTokenPool(4, width, "cpu")
        alloc = S.TokenToKVPoolAllocator(size, "float32", "cpu", None, False)
        cache = S.RadixCache(S.CacheInitParams(pool, alloc, 1))
    finally:
        S.RadixCache.bind_token_allocator = True
    assert cache.bound is bound
    return pool, alloc, cache


def evict_round(bound, base):
    size = REQS * LEN + 1024
    pool, alloc, cache = make(bound, size, 1024)
    order = list(range(1, size + 1))
    random.Random(base).shuffle(order)
    alloc.alloc(size)
    alloc.free(S._ops.host_i64(order))  # FIFO: handed out in this order from now on
    for i in range(REQS):
        toks = list(range(base + i * LEN, base + (i + 1) * LEN))
        cache.insert(S.RadixKey(toks), alloc.alloc(LEN))
    assert cache.total_size() == REQS * LEN
    out = []
    while cache.total_size():
        p = S.EvictParams(num_tokens=K)
        t0 = _ns()
        cache.evict(p)
        out.append(_ns() - t0)
    return out


def release_round(bound, base, reps=40, length=4096):
    pool, alloc, cache = make(bound, length + 1, 2 * (length + 1))
    out = []
    for r in range(reps):
        toks = list(range(base + r * length, base + (r + 1) * length))
        req = S.Req(origin_input_ids=toks, fill_ids=list(toks))
        S.ScheduleBatch([req], pool, cache).prepare_for_extend()
        t0 = _ns()
        S.release_kv_cache(req, cache)
        out.append(_ns() - t0)
        cache.evict(S.EvictParams(num_tokens=length))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    print("round,mode,op,calls,median_us,min_us")
    base = 0
    med = {}
    for r in range(args.rounds):
        order = (True, False) if r % 2 == 0 else (False, True)
        for bound in order:
            for op, fn, trees in (("evict 1e5", evict_round, 3),
                                  ("release radix", release_round, 1)):
                xs = []
                for _ in range(trees):
                    base += 1 << 20
                    xs += fn(bound, base)
                med[r, bound, op] = m = statistics.median(xs) / 1e3
                print("%d,%s,%s,%d,%.3f,%.3f" % (r, "bound" if bound else "unbound", op,
                                                 len(xs), m, min(xs) / 1e3), flush=True)
    for op in ("evict 1e5", "release radix"):
        q = sorted(med[r, True, op] / med[r, False, op] for r in range(args.rounds))
        print("# %s bound/unbound per round: median %.3f, range %.3f-%.3f" %
              (op, statistics.median(q), q[0], q[-1]))


if __name__ == "__main__":
    main()
