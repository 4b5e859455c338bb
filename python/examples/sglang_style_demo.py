#!/usr/bin/env python3
"""A drop-in demo: the allocation sequence of an SGLang-style continuous-batching
scheduler (prefill batches through alloc_for_extend, one decode token per running request
through alloc_for_decode, finished requests through release_kv_cache) driven through the
kvcache binding, with every slot checked against the spec's allocator behaviour:

  * paged allocator: pages handed out from the front of the free list, page-major
    (page size 1: SGLang's token allocator, whose frees go to the back: FIFO reuse);
  * a request's first token opens a page, decode takes last_loc + 1 inside a page and the
    next free page (batch order) when (seq_len - 1) % page_size == 0;
  * release frees every page of the finished requests in one free group: deduplicated,
    sorted ascending and put at the FRONT of the free list (LIFO reuse);
  * conservation: free + held == capacity after every step; slot 0 / page 0 never used.

A small Python model of those rules predicts every slot; the demo asserts the library
hands out exactly those. Host backend by default (--backend cuda on a GPU).

    python3 python/examples/sglang_style_demo.py [--steps N] [--page-size P] [--seed S]
"""
import argparse
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import kvcache as kvc  # noqa: E402


class PagedModel:
    """The spec's paged allocator, as plain Python lists."""

    def __init__(self, size, ps):
        self.ps = ps
        self.free = list(range(1, size // ps + 1))

    def extend_new(self, seq_len):
        pages = (seq_len + self.ps - 1) // self.ps
        taken, self.free = self.free[:pages], self.free[pages:]
        return [p * self.ps + o for p in taken for o in range(self.ps)][:seq_len]

    def decode(self, seq_len, last_loc):
        if (seq_len - 1) % self.ps == 0:
            return self.free.pop(0) * self.ps
        return last_loc + 1

    def release(self, slots):
        if self.ps == 1:  # token allocator: freed slots go to the BACK, in order (FIFO)
            self.free = self.free + list(slots)
            return
        pages = sorted({s // self.ps for s in slots})
        self.free = pages + self.free


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="host", choices=["host", "cuda", "auto"])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--page-size", type=int, default=4)
    ap.add_argument("--pool-tokens", type=int, default=2048)
    ap.add_argument("--max-running", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    say = (lambda *a: None) if args.quiet else print
    rng = random.Random(args.seed)
    ps = args.page_size

    with kvc.Context(backend=args.backend, check=True) as ctx:
        req_pool = kvc.ReqToTokenPool(ctx, args.max_running, 1024)
        alloc = kvc.Allocator(ctx, args.pool_tokens, page_size=ps)  # SGLang Paged... allocator
        flow = kvc.Flow(ctx, req_pool, alloc)                       # ChunkCache
        model = PagedModel(args.pool_tokens, ps)
        capacity = alloc.available_size()
        running, waiting = [], []
        held = {}  # id(req) -> slots the model thinks it holds
        stats = {"extend": 0, "decode": 0, "release": 0, "retract": 0, "tokens": 0}
        say("kvcache %s (%s backend): page size %d, %d token slots, %d request rows"
            % (kvc.version(), ctx.backend, ps, capacity, args.max_running))
        for step in range(args.steps):
            # new arrivals: prompt length and output length
            for _ in range(rng.randint(0, 2)):
                waiting.append((rng.randint(1, 200), rng.randint(1, 60)))
            # 1) prefill: admit while rows and slots allow (SGLang's PrefillAdder, simplified)
            batch = []
            budget = alloc.available_size() - len(running) * ps  # keep a decode reserve
            while waiting and len(running) + len(batch) < args.max_running:
                prompt, out_len = waiting[0]
                need = (prompt + ps - 1) // ps * ps
                if need > budget:
                    break
                budget -= need
                waiting.pop(0)
                r = kvc.ReqState(seq_len=prompt)
                r.prompt, r.out_total, r.out_len = prompt, out_len, out_len
                batch.append(r)
            if batch:
                loc = flow.alloc_for_extend(batch).tolist()
                want = []
                for r in batch:
                    s = model.extend_new(r.seq_len)
                    held[id(r)] = list(s)
                    want += s
                assert loc == want, (step, loc, want)
                for r in batch:
                    assert req_pool.row(r.req_row, 0, r.seq_len) == held[id(r)]
                stats["extend"] += 1
                stats["tokens"] += len(loc)
                say("step %3d  extend  %2d reqs  %4d tokens  slots %s..." % (
                    step, len(batch), len(loc), loc[:6]))
                running += batch
            # 2) decode: one token per running request (not the ones just prefilled)
            dec = [r for r in running if r not in batch]
            # SGLang retracts the newest requests when decode would run out of memory:
            # released like finished ones, requeued at the front with their lengths.
            while dec:
                need = sum(ps for r in dec if r.seq_len % ps == 0)
                if need <= alloc.available_size():
                    break
                victim = dec.pop()
                flow.release([victim])
                model.release(held.pop(id(victim)))
                running.remove(victim)
                waiting.insert(0, (victim.prompt, victim.out_total))
                stats["retract"] += 1
                say("step %3d  retract 1 req" % step)
            if dec:
                want = [model.decode(r.seq_len + 1, held[id(r)][-1]) for r in dec]
                loc = flow.alloc_for_decode(dec).tolist()
                assert loc == want, (step, loc, want)
                for r, s in zip(dec, loc):
                    held[id(r)].append(s)
                    r.out_len -= 1
                stats["decode"] += 1
                stats["tokens"] += len(loc)
            # 3) release finished requests (one free group: sorted, deduplicated, to the front)
            done = [r for r in running if r.out_len <= 0]
            if done:
                freed = [s for r in done for s in held.pop(id(r))]
                flow.release(done)
                model.release(freed)
                running = [r for r in running if r.out_len > 0]
                stats["release"] += 1
                say("step %3d  release %2d reqs  %4d tokens  -> free pages front %s" % (
                    step, len(done), len(freed), model.free[:4]))
            # conservation and audit, every step
            in_use = sum(len(v) for v in held.values())
            pages_in_use = sum((len(v) + ps - 1) // ps for v in held.values())
            assert alloc.available_size() == capacity - pages_in_use * ps, step
            assert alloc.available_size() == len(model.free) * ps, step
            assert in_use <= capacity
            flow.check(running)
        flow.release(running)
        assert alloc.available_size() == capacity and req_pool.available == args.max_running
        print("sglang_style_demo: OK — %d steps, %d extend / %d decode / %d release calls, "
              "%d retractions, %d slots, every one as the spec predicts" % (
                  args.steps, stats["extend"], stats["decode"], stats["release"],
                  stats["retract"], stats["tokens"]))


if __name__ == "__main__":
    main()
