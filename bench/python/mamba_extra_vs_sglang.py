#!/usr/bin/env python3
"""kvcache.sglang.MambaRadixCache with the Mamba extra buffer next to SGLang 0.5.23's own
UnifiedRadixCache (FULL + MAMBA components, enable_mamba_extra_buffer, page 4, two
ping-pong track slots) on the same call sequence, on the CPU.

SGLang's side is built by its own test kit (sglang.test.kits.unified_radix_cache's
build_fixture, get_device patched to "cpu") and driven as its scheduler does: a chunked
request checkpoints with cache.checkpoint(req, up_to=n), a finished one is released with
mem_cache_utils.finish_req (checkpoint, free the rest, unlock). kvcache's side is driven
through the seeds' interface (cache_unfinished_req, release_kv_cache). Each step prints,
for both, (full tokens cached, Mamba states cached, KV slots free, Mamba slots free, the
match length and mamba_branching_seqlen of every key seen so far) and whether they agree.
A second sequence (mamba_cache_chunk_size 8 on both sides, so the checkpoint grid is 8
tokens at page 4) makes a node with KV but no state, so that matches report a branching
point. SGLang's kit gives its
tree a token allocator (page 1 slots, page 4 tree) and kvcache a paged one: free counts
are compared in tokens.

Needs torch and sglang==0.5.23 installed (only for this comparison: kvcache.sglang never
imports sglang) and KVCACHE_LIB. Exit status 1 when any step differs."""
import os
import sys
import warnings
from array import array

warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import sglang.test.kits.unified_radix_cache.fixtures as F  # noqa: E402
from sglang.srt.managers.schedule_batch import Req as SReq  # noqa: E402
from sglang.srt.mem_cache.unified_cache.components import ComponentType  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.test.kits.unified_radix_cache.config import CacheConfig  # noqa: E402
from sglang.test.mem_cache_utils import finish_req  # noqa: E402

import kvcache.sglang as S  # noqa: E402
from kvcache.sglang import _ops as T  # noqa: E402

PS, KV, STATES, ROWS = 4, 256, 60, 10
F.get_device = lambda *a, **k: "cpu"


def handover(before, after, tree_state):
    """What a chunk checkpoint did to the request's track buffer, in terms both sides share
    (their slot numbers need not agree): the indices whose slot changed, whether the
    tree's state for the checkpoint is the slot that index held before (the hand-over)
    rather than a copy, and whether the new slot is one the request did not hold."""
    changed = [k for k in range(len(before)) if before[k] != after[k]]
    return ("track entries changed", changed,
            "tree state = former track slot", [tree_state == before[k] for k in changed],
            "fresh", [after[k] not in before for k in changed])


class Sgl:
    """SGLang 0.5.23's tree, its pools, and the requests by name."""

    def __init__(self, chunk=None):
        cfg = CacheConfig(page_size=PS, components=(ComponentType.FULL, ComponentType.MAMBA),
                          enable_mamba_extra_buffer=True, mamba_cache_size=STATES, kv_size=KV,
                          max_num_reqs=ROWS)
        self.cache, self.alloc, self.pool = F.build_fixture(cfg, mamba_cache_chunk_size=chunk)
        self.reqs = {}
        self.handover = None

    def start(self, name, tokens, n):
        req = SReq(rid=name, origin_input_text="", origin_input_ids=array("q", tokens),
                   sampling_params=SamplingParams(temperature=0, max_new_tokens=1))
        self.pool.alloc([req])
        req.output_ids = array("q")
        req.extra_key = None
        req.kv.cache_protected_len = 0
        req.last_node = self.cache.root_node_handle()
        req.lock = self.cache.lock(req.last_node)
        req.refresh_fill_ids()
        self.reqs[name] = req
        self.grow(name, n)

    def grow(self, name, n):
        """The request's KV grows to n tokens (an extend or decode step)."""
        req = self.reqs[name]
        have = req.kv.kv_allocated_len or 0
        idx = self.alloc.alloc(n - have)
        self.pool.write((req.kv.req_pool_idx, slice(have, n)), idx)
        req.kv.kv_committed_len = req.kv.kv_allocated_len = n

    def track(self, name, last, idx, prev):
        req = self.reqs[name]
        req.kv.mamba_last_track_seqlen = last
        req.kv.mamba_prev_track_seqlen = prev
        req.kv.mamba_last_track_idx = idx
        req.kv.mamba_next_track_idx = self.pool.get_mamba_ping_pong_other_idx(idx)

    def checkpoint(self, name, n):
        req = self.reqs[name]
        before = [int(x) for x in req.kv.mamba_ping_pong_track_buffer.tolist()]
        seqlen = req.kv.mamba_last_track_seqlen
        self.cache.checkpoint(req, up_to=n)
        after = [int(x) for x in req.kv.mamba_ping_pong_track_buffer.tolist()]
        r = F.match_prefix(self.cache, list(req.origin_input_ids[:seqlen]))
        st = self.cache.tree_core.get_component_device_value(r.best_match_node, ComponentType.MAMBA)
        self.handover = handover(before, after, int(st.view(-1)[0]))

    def finish(self, name):
        req = self.reqs.pop(name)
        finish_req(self.cache, req, req.kv.kv_committed_len)
        self.pool.free(req)

    def view(self, keys):
        c = self.cache
        full = c.full_evictable_size() + c.full_protected_size()
        states = c.mamba_evictable_size() + c.mamba_protected_size()
        m = [(r.device_prefix_len, r.mamba_branching_seqlen)
             for r in (F.match_prefix(c, k) for k in keys)]
        return (full, states, self.alloc.available_size(),
                self.pool.mamba_allocator.available_size(), m)


class Kvc:
    """kvcache.sglang's MambaRadixCache and pools, the same requests by name."""

    def __init__(self, chunk=None):
        p = S.MambaCacheParams(S.Mamba2StateShape(conv=[(4, 3)], temporal=(2, 2, 2)),
                               S.Mamba2StateDType(conv="float32", temporal="float32"))
        self.pool = S.HybridReqToTokenPool(size=ROWS, mamba_size=STATES, mamba_spec_state_size=0,
                                           max_context_len=512, device="cpu",
                                           enable_memory_saver=False, cache_params=p,
                                           mamba_layer_ids=[0, 2], enable_mamba_extra_buffer=True)
        self.alloc = S.PagedTokenToKVPoolAllocator(KV, PS, "float32", "cpu", None, False)
        self.cache = S.MambaRadixCache(S.CacheInitParams(self.pool, self.alloc, PS,
                                                         enable_mamba_extra_buffer=True,
                                                         mamba_cache_chunk_size=chunk))
        self.reqs = {}
        self.handover = None

    def start(self, name, tokens, n):
        req = S.Req(origin_input_ids=list(tokens))
        self.pool.alloc([req])
        req.last_node = self.cache.root_node
        self.cache.inc_lock_ref(req.last_node)
        self.reqs[name] = req
        self.grow(name, n)

    def grow(self, name, n):
        req = self.reqs[name]
        have = req.kv_allocated_len
        need = -(-n // PS) * PS - -(-have // PS) * PS  # whole pages, as a paged extend takes
        if need:
            idx = T.tolist(self.alloc.alloc(need))
            self.pool.write((req.req_pool_idx, slice(-(-have // PS) * PS, -(-n // PS) * PS)),
                            T.host_array(idx))
        req.kv_committed_len = req.kv_allocated_len = n
        req.fill_ids = list(req.origin_input_ids[:n])

    def track(self, name, last, idx, prev):
        req = self.reqs[name]
        req.mamba_last_track_seqlen, req.mamba_prev_track_seqlen = last, prev
        req.mamba_last_track_idx = idx
        req.mamba_next_track_idx = self.pool.get_mamba_ping_pong_other_idx(idx)

    def checkpoint(self, name, n):
        req = self.reqs[name]
        before = [int(x) for x in T.tolist(req.mamba_ping_pong_track_buffer)]
        seqlen = req.mamba_last_track_seqlen
        self.cache.cache_unfinished_req(req)
        after = [int(x) for x in T.tolist(req.mamba_ping_pong_track_buffer)]
        self.cache.match_prefix(S.MatchPrefixParams(key=S.RadixKey(list(req.origin_input_ids[:seqlen]))))
        self.handover = handover(before, after, self.cache._ms.value)

    def finish(self, name):
        S.release_kv_cache(self.reqs.pop(name), self.cache)

    def view(self, keys):
        c = self.cache
        full, states = c.total_size()
        m = [(T.numel(r.device_indices), r.mamba_branching_seqlen)
             for r in (c.match_prefix(S.MatchPrefixParams(key=S.RadixKey(list(k)))) for k in keys)]
        # The paged allocator's partly used pages count as free tokens on SGLang's side.
        return (full, states, self.alloc.available_size(), self.pool.mamba_pool.available_size(), m)


def steps():
    a = list(range(1, 13))
    b = list(range(200, 224))
    c = list(range(300, 312))
    d = list(range(400, 411))
    e = list(range(1, 9)) + list(range(500, 508))
    return [
        ("A finished: 12 tokens, newest checkpoint 8 (index 0), previous 4", a, [
            ("start", "A", a, 12), ("track", "A", 8, 0, 4), ("finish", "A")]),
        ("B chunk 1: 16 of 24 tokens, checkpoint 12 -> cache_unfinished_req", b, [
            ("start", "B", b, 16), ("track", "B", 12, 0, None), ("checkpoint", "B", 16)]),
        ("B finished: 24 tokens, checkpoint 20 (index 1)", b, [
            ("grow", "B", 24), ("track", "B", 20, 1, None), ("finish", "B")]),
        ("C finished, overshoot: 12 tokens, newest 16 (index 1), previous 8", c, [
            ("start", "C", c, 12), ("track", "C", 16, 1, 8), ("finish", "C")]),
        ("D finished without a checkpoint: 11 tokens", d, [
            ("start", "D", d, 11), ("finish", "D")]),
        ("E finished: shares A's 8 tokens, checkpoint 16 (index 1), previous 4", e, [
            ("start", "E", e, 16), ("track", "E", 16, 1, 4), ("finish", "E")]),
        ("evict 1 Mamba state", None, [("evict", 0, 1)]),
        ("evict 8 full tokens", None, [("evict", 8, 0)]),
    ]


def branching_steps():
    """Grid 8 (mamba_cache_chunk_size 8, page 4): A caches 16 tokens with a state, B shares
    A's first 12 and splits A's node there (the upper 12 tokens have KV, no state)."""
    a = list(range(1, 17))
    b = list(range(1, 13)) + list(range(600, 612))
    c = list(range(1, 13)) + list(range(700, 712))  # never cached: only matched
    d = list(range(1, 17)) + list(range(800, 808))
    return [
        ("A finished: 16 tokens, checkpoint 16", a, [
            ("start", "A", a, 16), ("track", "A", 16, 0, None), ("finish", "A")]),
        ("B finished: shares A's 12 tokens, checkpoint 24", b, [
            ("start", "B", b, 24), ("track", "B", 24, 0, None), ("finish", "B")]),
        ("match C (A's 12 tokens, then new) and D (A's 16, then new)", c, []),
        ("(D)", d, []),
        ("evict 1 Mamba state (B's: matching D refreshed A's)", None, [("evict", 0, 1)]),
    ]


def apply(world, op):
    if op[0] == "evict":
        world.cache.evict(S.EvictParams(num_tokens=op[1], mamba_num=op[2]) if isinstance(world, Kvc)
                          else __import__("sglang.srt.mem_cache.base_prefix_cache",
                                          fromlist=["EvictParams"]).EvictParams(
                              num_tokens=op[1], mamba_num=op[2]))
    else:
        getattr(world, op[0])(*op[1:])


def run(sgl, kvc, seq):
    keys, bad = [], 0
    print("step | SGLang 0.5.23 (full, states, kv free, mamba free, [(match, branching)]) | "
          "kvcache | same")
    for title, key, ops in seq:
        if key is not None:
            keys.append(key)
        for op in ops:
            apply(sgl, op)
            apply(kvc, op)
        vs, vk = sgl.view(keys), kvc.view(keys)
        if sgl.handover or kvc.handover:  # a chunk checkpoint: the request's side too
            vs, vk = vs + (sgl.handover,), vk + (kvc.handover,)
            sgl.handover = kvc.handover = None
        same = vs == vk
        bad += not same
        print("%s | %s | %s | %s" % (title, vs, vk, "yes" if same else "NO"))
    kvc.cache.sanity_check()
    return bad


def main():
    print("# sequence 1: default mamba_cache_chunk_size (max(64, page) = 64)")
    bad = run(Sgl(), Kvc(), steps())
    print("# sequence 2: mamba_cache_chunk_size 8 (checkpoint grid 8)")
    bad += run(Sgl(8), Kvc(8), branching_steps())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
