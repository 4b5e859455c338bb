#!/usr/bin/env python3
"""Host cost of kvcache.sglang's three radix adapters on the scheduler's per-request calls:
match_prefix (a 512-token hit), inc_lock_ref + dec_lock_ref, and cache_finished_req of a
request whose 511-token prefix is cached (one new token inserted). "mamba_extra" is the Mamba adapter with the extra buffer
(page 16, two track slots, the request's checkpoint at 496 tokens); it runs only when
CACHES names it (the tree before this session refused the extra buffer). Host backend;
KVCACHE_LIB names the library, PYTHONPATH (or KVC_PYTHON_DIR) the package tree to time, so
two trees can be compared on one library in alternated rounds. Prints one CSV line per
(cache, op): median and minimum microseconds over REPS timings of N calls each."""
import os
import statistics
import sys
import time

sys.path.insert(0, os.environ.get("KVC_PYTHON_DIR", os.path.join(os.path.dirname(
    os.path.abspath(__file__)), "..", "..", "python")))
import kvcache.sglang as S  # noqa: E402

N, REPS, LEN = 2000, 9, 512


def mamba_params():
    return S.MambaCacheParams(S.Mamba2StateShape(conv=[(4, 3)], temporal=(2, 2, 2)),
                              S.Mamba2StateDType(conv="float32", temporal="float32"))


def radix():
    pool = S.ReqToTokenPool(8, 2 * LEN, "cpu")
    alloc = S.TokenToKVPoolAllocator(1 << 16, "float32", "cpu", None, False)
    return pool, S.RadixCache(S.CacheInitParams(pool, alloc, 1)), {}


def swa():
    pool = S.ReqToTokenPool(8, 2 * LEN, "cpu")
    kv = S.SWAKVPool(1 << 16, 1 << 15, 1, "float32", 2, 4, swa_attention_layer_ids=[0, 2],
                     full_attention_layer_ids=[1], device="cpu")
    alloc = S.SWATokenToKVPoolAllocator(1 << 16, 1 << 15, 1, "float32", "cpu", kv, False)
    cache = S.SWARadixCache(S.CacheInitParams(pool, alloc, 1, sliding_window_size=128))
    return pool, cache, {"sliding_window_size": 128}


def mamba():
    pool = S.HybridReqToTokenPool(size=8, mamba_size=64, mamba_spec_state_size=0,
                                  max_context_len=2 * LEN, device="cpu", enable_memory_saver=False,
                                  cache_params=mamba_params(), mamba_layer_ids=[0, 2],
                                  enable_mamba_extra_buffer=False)
    alloc = S.TokenToKVPoolAllocator(1 << 16, "float32", "cpu", None, False)
    return pool, S.MambaRadixCache(S.CacheInitParams(pool, alloc, 1)), {}


def mamba_extra():
    pool = S.HybridReqToTokenPool(size=8, mamba_size=64, mamba_spec_state_size=0,
                                  max_context_len=2 * LEN, device="cpu", enable_memory_saver=False,
                                  cache_params=mamba_params(), mamba_layer_ids=[0, 2],
                                  enable_mamba_extra_buffer=True)
    alloc = S.PagedTokenToKVPoolAllocator(1 << 16, 16, "float32", "cpu", None, False)
    return pool, S.MambaRadixCache(S.CacheInitParams(pool, alloc, 16, enable_mamba_extra_buffer=True)), \
        {"track": LEN - 16}


def admit(cache, req, cow):
    key = (req.origin_input_ids + req.output_ids)[:-1]
    p = S.MatchPrefixParams(key=S.RadixKey(key), cow_mamba=True, req=req) if cow else \
        S.MatchPrefixParams(key=S.RadixKey(key))
    m = cache.match_prefix(p)
    req.prefix_indices = m.device_indices
    req.last_node = m.last_device_node
    cache.inc_lock_ref(req.last_node)
    req.cache_protected_len = len(S._ops.tolist(m.device_indices))
    req.fill_ids = list(req.origin_input_ids + req.output_ids)


def prepared(pool, cache, kw, tokens, cow):
    req = S.Req(origin_input_ids=list(tokens), output_ids=[])
    admit(cache, req, cow)
    kw = dict(kw)
    track = kw.pop("track", None)
    S.ScheduleBatch([req], pool, cache, **kw).prepare_for_extend()
    if track is not None:  # the forward's checkpoint, as SGLang's scheduler records it
        req.mamba_last_track_seqlen, req.mamba_last_track_idx = track, 0
        req.mamba_next_track_idx = 1
    return req


def run(name, make):
    pool, cache, kw = make()
    cow = name.startswith("mamba")
    base = list(range(1, LEN + 1))
    S.release_kv_cache(prepared(pool, cache, kw, base, cow), cache)
    key = S.MatchPrefixParams(key=S.RadixKey(base))
    node = cache.match_prefix(key).last_device_node
    out = {}
    for op in ("match_prefix", "lock_pair", "cache_finished_req"):
        ts = []
        for _ in range(REPS):
            if op == "match_prefix":
                t0 = time.perf_counter_ns()
                for _ in range(N):
                    cache.match_prefix(key)
                ts.append((time.perf_counter_ns() - t0) / N / 1000)
            elif op == "lock_pair":
                t0 = time.perf_counter_ns()
                for _ in range(N):
                    r = cache.inc_lock_ref(node)
                    cache.dec_lock_ref(node, r)
                ts.append((time.perf_counter_ns() - t0) / N / 1000)
            else:
                total = 0
                for i in range(N // 10):
                    # a new last token each time: one new leaf of 1 token under the prefix
                    req = prepared(pool, cache, kw, base[:-1] + [10 ** 6 + i], cow)
                    t0 = time.perf_counter_ns()
                    cache.cache_finished_req(req)
                    total += time.perf_counter_ns() - t0
                    pool.free(req)
                cache.evict(S.EvictParams(num_tokens=N))
                ts.append(total / (N // 10) / 1000)
        out[op] = ts
        print("%s,%s,%.3f,%.3f" % (name, op, statistics.median(ts), min(ts)), flush=True)
    return out


if __name__ == "__main__":
    print("cache,op,median_us,min_us")
    makers = {"radix": radix, "swa": swa, "mamba": mamba, "mamba_extra": mamba_extra}
    for name in os.environ.get("CACHES", "radix,swa,mamba").split(","):
        run(name, makers[name])
