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

Trace replays (--traces DIR): the requests kvc_bench_radix's part 2 generated, read from
the files its KVB_TRACE_DUMP=DIR run wrote (so both sides replay the same tokens), through
SGLang's RadixCache over SGLang's own CPU allocators (TokenToKVPoolAllocator at page 1,
PagedTokenToKVPoolAllocator otherwise, need_sort as the scheduler builds them, capacity
as the C flow's) and a request-to-token row, calling what SGLang's scheduler calls per
request, in the order bench_radix's flow calls them:

  match_req                 the key (prompt minus its last token, page-aligned by the
                            tree), match_prefix, lock (inc_lock_ref) of the matched node and
                            prefix_device_indices (the matched slots, a torch.cat over the path)
  lock+unlock               inc_lock_ref + dec_lock_ref of the admitted node
  evict                     RadixCache.evict for the same n the C flow asks (extend tokens,
                            + one page when paged, when the allocator holds fewer), the
                            allocator's free_segment of the victims included
  cache_unfinished_req      checkpoint(req, up_to=chunk end): chunked prefill, 2048-token chunks
  cache_finished_req        checkpoint(req, up_to=prompt + output) + free of the row's
                            unaligned tail + unlock: release_kv_cache's cache work

Usage: sglang_radix_ref.py [--quick] [--csv FILE] [--traces DIR [--max-requests N]]
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


def report(rows, what, ps, tree, samples, section="sglang", hit=-1.0):
    samples.sort()
    med = samples[len(samples) // 2]
    p99 = samples[int(len(samples) * 0.99)]
    print(f"{section:<9} {what:<44} {ps:4d} {tree:8d} {med:9.3f} {p99:9.3f} {len(samples):7d}", flush=True)
    rows.append(f'{section},"{what}",{ps},{tree},{med:.4f},{p99:.4f},{len(samples)},{hit:.4f}')


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


class Row:
    """ReqToTokenPool's row table (int32, as SGLang's) and its write()."""

    def __init__(self, width):
        self.req_to_token = torch.zeros((2, width), dtype=torch.int32)

    def write(self, idx, values):
        self.req_to_token[idx] = values


def read_trace(path, limit):
    import numpy as np

    raw = np.fromfile(path, dtype=np.int32)
    reqs, at = [], 0
    while at < len(raw) and len(reqs) < limit:
        prompt = int(raw[at : at + 2].view(np.int64)[0])
        outn = int(raw[at + 2 : at + 4].view(np.int64)[0])
        at += 4
        reqs.append((prompt, outn, array("q", raw[at : at + prompt + outn].astype(np.int64).tobytes())))
        at += prompt + outn
    return reqs


def replay(rows, path, trace, ps, cap, limit):
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator

    reqs = read_trace(path, limit)
    if ps == 1:
        alloc = TokenToKVPoolAllocator(cap, torch.int64, "cpu", None, True)
    else:
        alloc = PagedTokenToKVPoolAllocator(cap, ps, torch.int64, "cpu", None, True)
    cache = RadixCache.create_simulated(mock_allocator=alloc, page_size=ps)
    pool = Row(8192 + 512)
    cache.req_to_token_pool = pool
    row = pool.req_to_token[1]
    s = {k: [] for k in ("match_req", "lock+unlock", "cache_finished_req", "cache_unfinished_req", "evict")}
    now = time.perf_counter_ns
    prompt_total = hit_total = 0

    def evict(n):
        if alloc.available_size() < n and cache.evictable_size() > 0:
            t0 = now()
            cache.evict(EvictParams(num_tokens=n))
            s["evict"].append((now() - t0) / 1000.0)

    for prompt, outn, toks in reqs:
        end = prompt + outn
        kv = types.SimpleNamespace(
            req_pool_idx=1, cache_inserted_len=0, cache_protected_len=0, swa_evict_floor=0,
            get_evicted_seqlen=lambda c: 0, swa_dead_lo=lambda p: 0)
        req = types.SimpleNamespace(kv=kv, extra_key=None, cache_salt=None, priority=None,
                                    origin_input_ids=toks[:prompt], full_untruncated_fill_ids=toks,
                                    lock=None, last_node=None)
        t0 = now()
        m = cache.match_prefix(MatchPrefixParams(key=RadixKey(toks[: prompt - 1])))
        req.lock = cache.lock(m.last_device_node)
        pl = m.device_prefix_len
        prefix = cache.path_device_indices(m.last_device_node)[:pl]
        s["match_req"].append((now() - t0) / 1000.0)
        req.last_node = m.last_device_node
        if pl:
            t0 = now()
            cache.inc_lock_ref(m.last_device_node)
            cache.dec_lock_ref(m.last_device_node)
            s["lock+unlock"].append((now() - t0) / 1000.0)
            row[:pl] = prefix
        kv.cache_protected_len = pl
        prompt_total += prompt
        hit_total += pl
        while pl < end:
            nxt = (pl + 2048) // ps * ps if pl + 2048 < prompt else end
            ext = nxt - pl
            evict(ext if ps == 1 else ext + ps)
            got = alloc.alloc(ext if ps == 1 else (ext + ps - 1) // ps * ps)
            if got is None:
                sys.exit(f"{path}: out of memory allocating {ext}")
            row[pl:nxt] = got[:ext]
            if nxt < end:
                t0 = now()
                cache.checkpoint(req, up_to=nxt)
                s["cache_unfinished_req"].append((now() - t0) / 1000.0)
            pl = nxt
        t0 = now()
        cache.checkpoint(req, up_to=end)
        cache.free_kv_row(kv, [(kv.cache_protected_len, end)])
        cache.unlock(req.lock)
        s["cache_finished_req"].append((now() - t0) / 1000.0)
        req.lock = None
    hit = hit_total / prompt_total
    for k, v in s.items():
        if v:
            report(rows, f"{trace} {k}", ps, cap, v, section="trace", hit=hit)
    print(f"          {trace}: {prompt_total} prompt tokens, {hit_total} from the cache (prefill saved), "
          f"{len(reqs)} requests", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--csv")
    ap.add_argument("--traces", help="replay the traces kvc_bench_radix dumped here (KVB_TRACE_DUMP)")
    ap.add_argument("--max-requests", type=int, default=1 << 30)
    ap.add_argument("--only", help="comma-separated trace-page-capacity names (default: all)")
    a = ap.parse_args()
    if a.traces:
        import os

        rows = []
        print(f"{'section':<9} {'what':<44} {'ps':>4} {'tree':>8} {'median':>9} {'p99':>9} {'n':>7}")
        for trace in ("chat", "sysprompt", "pressure"):
            for ps in (1, 16, 64):
                for cap in (10_000, 100_000, 1_000_000):
                    name = f"{trace}-{ps}-{cap}"
                    if a.only and name not in a.only.split(","):
                        continue
                    path = os.path.join(a.traces, name + ".bin")
                    if os.path.exists(path):
                        replay(rows, path, trace, ps, cap, a.max_requests)
        if a.csv:
            with open(a.csv, "w") as f:
                f.write("section,what,page_size,tree_tokens,median_us,p99_us,count,hit_rate\n")
                f.write("\n".join(rows) + "\n")
        return
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
