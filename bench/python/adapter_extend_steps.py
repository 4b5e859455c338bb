#!/usr/bin/env python3
"""Where kvcache.sglang's alloc_for_extend (16 x 512 new tokens, page 16 and 1) spends its
host time: the function's steps replayed one by one (the same calls, in its order), each
timed, next to the whole call. BACKEND=host for the host backend, else CUDA. Run from the
repository root with KVCACHE_LIB set (bench/RESULTS.md, run 13, issue 18).
Two routes for req_pool_indices, alternating call by call: "copy" (the rows widened on the
host, then tensor.to(device, non_blocking=True): the adapter before
kvc_allocator_alloc_extend_ex; on the host backend no copy) and "launch" (a slab view
the extend launch writes the rows into: the adapter's CUDA route now, forced on for the
host backend). Steps of the launch route are prefixed "L:"; "(real)" rows are the whole
alloc_for_extend on each route."""
import os
import statistics
import sys
import time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import kvcache.sglang as S
from kvcache.sglang import _ops as T, common as C
dev = "cpu" if os.environ.get("BACKEND") == "host" else "cuda:0"
ns = time.perf_counter_ns
for ps in (16, 1):
    bs, L = 16, 512
    pool = S.ReqToTokenPool(bs, L + ps, dev)
    alloc = (S.TokenToKVPoolAllocator(bs * (L + 2 * ps), "float16", dev, None, False) if ps == 1 else
             S.PagedTokenToKVPoolAllocator(bs * (L + 2 * ps), ps, "float16", dev, None, False))
    cache = S.ChunkCache(pool, alloc, ps)
    seqv = T.host_array([L] * bs)
    slab0 = C._hot(alloc).rows_slab  # the adapter's own route (CUDA: a slab, host: None)
    slab = slab0 if slab0 is not None else T.Slab(dev)
    st = {}
    def t(k, t0):
        st.setdefault(k, []).append((ns() - t0) / 1000)
    for r in range(120):
        reqs = [S.Req(fill_ids=list(range(L))) for _ in range(bs)]
        b = S.ScheduleBatch(reqs, pool, cache, device=dev)
        b.prefix_lens = [0] * bs
        b.extend_num_tokens = bs * L
        b.seq_lens_cpu = b.seq_lens = seqv
        T0 = ns()
        t0 = ns(); hot = C._hot(alloc); fast = T.fast
        pre = T.host_i64_arg(b.prefix_lens); seq = T.host_i64_arg(b.seq_lens_cpu); t("args", t0)
        t0 = ns(); rows = C.alloc_req_slots(pool, reqs, cache); t("alloc_req_slots", t0)
        t0 = ns(); C.evict_from_tree_cache(cache, bs * L + bs * ps); t("evict", t0)
        t0 = ns(); rows32 = pool.__dict__.pop("_last_rows", None); d, hp, dp = C._out(hot.ring_ext, bs * L, hot.cuda); t("out", t0)
        t0 = ns(); sm = T.stream(hot.cuda); t("stream", t0)
        if r % 2 == 0:  # the copy route
            t0 = ns(); s_ = fast.alloc_extend(hot.swa, alloc._h, bs, pre, seq, None, pool._h, rows32, None, hp, dp, sm); t("C alloc_extend", t0)
            t0 = ns(); rc = T.rows_i64(rows32, bs); t("rows_i64", t0)
            t0 = ns(); rd = T.to_device(rc, pool.device) if hot.cuda else rc; t("to_device", t0)
            t("TOTAL copy", T0)
        else:  # the launch route
            t0 = ns(); rd, rdp = slab.take(bs); t("L:slab take", t0)
            t0 = ns(); s_ = fast.alloc_extend(False, alloc._h, bs, pre, seq, None, pool._h, rows32, None, hp, dp, sm, rdp); t("L:C alloc_extend_ex", t0)
            t0 = ns(); rc = T.rows_i64(rows32, bs); t("L:rows_i64", t0)
            t0 = ns()
            if T.torch is not None:
                rd._kvc_host = rc
            t("L:setattr", t0)
            t("L:TOTAL launch", T0)
        assert s_ == 0
        T1 = ns()
        for q in reqs:
            q.kv_committed_len = q.kv_allocated_len = L
            S.release_kv_cache(q, cache)
        t("(release, untimed above)", T1)
        # the real call, for comparison
        reqs = [S.Req(fill_ids=list(range(L))) for _ in range(bs)]
        b = S.ScheduleBatch(reqs, pool, cache, device=dev)
        b.prefix_lens = [0] * bs; b.extend_num_tokens = bs * L; b.seq_lens_cpu = b.seq_lens = seqv
        hot.rows_slab = slab if r % 2 else None
        t0 = ns(); S.alloc_for_extend(b); t("alloc_for_extend (real, %s)" % ("launch" if r % 2 else "copy"), t0)
        hot.rows_slab = slab0
        for q in reqs:
            q.kv_committed_len = q.kv_allocated_len = L
            S.release_kv_cache(q, cache)
    print("ps", ps, "  ".join("%s %.2f" % (k, statistics.median(v[10:] or v)) for k, v in st.items()))
