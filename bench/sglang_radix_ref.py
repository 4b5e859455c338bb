#!/usr/bin/env python3
"""SGLang's own RadixCache on the shapes of bench_radix's part 1, for a same-run comparison.

Runs on a CPU with torch and an unpacked sglang wheel on PYTHONPATH (it is not a
dependency of kvcache; scripts/bench_radix_vs_sglang.sh sets it up). The trees are built
as bench_radix.c builds them: unrelated requests of 256..1024 random tokens until the tree
holds 10^4 / 10^5 / 10^6 tokens, page-aligned slot runs, a mock allocator whose frees
cost nothing (SGLang's free of a CPU tensor is cheap next to the tree walk). Timed with
time.perf_counter_ns around the one call; median and p99 in microseconds.

  match_prefix 4096 (3584 cached, 1 / 8 nodes)      RadixCache.match_prefix
  insert 4096 (0 / 3584 present)                     RadixCache.insert
  cache_finished_req 4096 (0 / 3584 present)         RadixCache._insert_cache (the insert,
                                                     the duplicate free) + dec_lock_ref:
                                                     what release_kv_cache does per request
  evict 4096                                         RadixCache.evict (heap over all leaves)
  lock + unlock, 32-node path                        inc_lock_ref + dec_lock_ref

Usage: sglang_radix_ref.py [--quick] [--csv FILE]
"""
import argparse
import random
import statistics
import sys
import time
import types
from array import array

import torch
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey


class FreeCounter:
    """The allocator the tree frees into: counts tokens, as bench_radix's drop hook does."""

    device = "cpu"

    def __init__(self):
        self.freed = 0

    def free(self, idx):
        self.freed += len(idx)

    def free_segment(self, idx, start_pos=0):
        self.freed += len(idx)


class World:
    def __init__(self, page_size):
        self.alloc = FreeCounter()
        self.cache = RadixCache.create_simulated(mock_allocator=self.alloc, page_size=page_size)
        self.next_slot = 1
        self.rng = random.Random(0x1234567)

    def slots(self, n):
        self.next_slot = (self.next_slot + 63) // 64 * 64
        t = torch.arange(self.next_slot, self.next_slot + n, dtype=torch.int64)
        self.next_slot += n
        return t

    def tokens(self, n):
        r = self.rng.getrandbits
        return array("q", (r(30) for _ in range(n)))

    def put(self, toks):
        self.cache.insert(InsertParams(key=RadixKey(toks), value=self.slots(len(toks))))

    def fill(self, tokens):
        while self.cache.total_size() < tokens:
            self.put(self.tokens(self.rng.randint(256, 1024)))


def timed(fn, reps):
    out = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) / 1000.0)
    return out


def report(rows, what, ps, tree, samples):
    samples.sort()
    med = samples[len(samples) // 2]
    p99 = samples[int(len(samples) * 0.99)]
    print(f"sglang    {what:<44} {ps:4d} {tree:8d} {med:9.3f} {p99:9.3f} {len(samples):7d}", flush=True)
    rows.append(f'sglang,"{what}",{ps},{tree},{med:.4f},{p99:.4f},{len(samples)},-1.0000')


def bench_match(rows, ps, tree, nodes, reps):
    w = World(ps)
    w.fill(tree)
    qs = []
    for _ in range(16):
        q = w.tokens(4096)
        for j in range(1, nodes + 1):
            w.put(q[: 3584 // nodes * j])
        qs.append(RadixKey(q))
    i = [0]

    def one():
        r = w.cache.match_prefix(MatchPrefixParams(key=qs[i[0] % 16]))
        i[0] += 1
        if r.device_prefix_len != 3584:
            sys.exit(f"match {r.device_prefix_len} != 3584")

    s = timed(one, reps)
    report(rows, f"match_prefix 4096 (3584 cached, {nodes} node{'s' if nodes > 1 else ''})", ps, tree, s)


def bench_insert(rows, ps, tree, present, reps):
    w = World(ps)
    w.fill(tree)
    s = []
    for _ in range(reps):
        q = w.tokens(4096)
        if present:
            w.put(q[:present])
        key, val = RadixKey(q), w.slots(4096)
        t0 = time.perf_counter_ns()
        w.cache.insert(InsertParams(key=key, value=val))
        s.append((time.perf_counter_ns() - t0) / 1000.0)
        w.cache.evict(EvictParams(num_tokens=4096))
    report(rows, f"insert 4096 ({present} present)", ps, tree, s)


def bench_finished(rows, ps, tree, present, reps):
    """release_kv_cache's per-request cache work: _insert_cache (insert of the page-aligned
    committed tokens read from the request's row, free of the duplicates) + dec_lock_ref."""
    w = World(ps)
    w.fill(tree)
    w.cache.req_to_token_pool = types.SimpleNamespace(req_to_token=torch.zeros((2, 4096 + 64), dtype=torch.int32))
    s = []
    for _ in range(reps):
        q = w.tokens(4096)
        if present:
            w.put(q[:present])
        m = w.cache.match_prefix(MatchPrefixParams(key=RadixKey(q)))
        w.cache.inc_lock_ref(m.last_device_node)
        row = w.cache.req_to_token_pool.req_to_token[1]
        prefix = w.cache.path_device_indices(m.last_device_node) if m.device_prefix_len else None
        if prefix is not None:
            row[: len(prefix)] = prefix
        row[m.device_prefix_len : 4096] = w.slots(4096 - m.device_prefix_len)
        req = types.SimpleNamespace(
            kv=types.SimpleNamespace(req_pool_idx=1, cache_inserted_len=0, cache_protected_len=m.device_prefix_len),
            extra_key=None, cache_salt=None, priority=None, origin_input_ids=q)
        t0 = time.perf_counter_ns()
        w.cache._insert_cache(req, q)
        w.cache.dec_lock_ref(m.last_device_node)
        s.append((time.perf_counter_ns() - t0) / 1000.0)
        w.cache.evict(EvictParams(num_tokens=4096))
    report(rows, f"cache_finished_req 4096 ({present} present)", ps, tree, s)


def bench_evict(rows, ps, tree, reps):
    w = World(ps)
    s = []
    for _ in range(reps):
        w.fill(tree)
        t0 = time.perf_counter_ns()
        w.cache.evict(EvictParams(num_tokens=4096))
        s.append((time.perf_counter_ns() - t0) / 1000.0)
    report(rows, "evict 4096", ps, tree, s)


def bench_lock(rows, tree, reps):
    w = World(16)
    w.fill(tree)
    q = w.tokens(32 * 64)
    for j in range(1, 33):
        w.put(q[: 64 * j])
    node = w.cache.match_prefix(MatchPrefixParams(key=RadixKey(q))).last_device_node

    def one():
        w.cache.inc_lock_ref(node)
        w.cache.dec_lock_ref(node)

    report(rows, "lock + unlock, 32-node path", 16, tree, timed(one, reps))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--csv")
    a = ap.parse_args()
    q = a.quick
    rows = []
    trees = (10_000, 100_000) if q else (10_000, 100_000, 1_000_000)
    print(f"{'section':<9} {'what':<44} {'ps':>4} {'tree':>8} {'median':>9} {'p99':>9} {'n':>7}")
    for tree in trees:
        for ps in (1, 16, 64):
            for nodes in (1, 8):
                bench_match(rows, ps, tree, nodes, 300 if q else 2000)
        for present in (0, 3584):
            bench_insert(rows, 16, tree, present, 50 if q else 300)
            bench_finished(rows, 16, tree, present, 50 if q else 300)
        bench_lock(rows, tree, 1000 if q else 20000)
    for ps in (1, 16):
        bench_evict(rows, ps, trees[-1], 20 if q else 100)
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("section,what,page_size,tree_tokens,median_us,p99_us,count,hit_rate\n")
            f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
