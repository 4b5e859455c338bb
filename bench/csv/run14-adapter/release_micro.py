# host-only timing of release_kv_cache (ChunkCache, 4096 tokens): python3 release_micro.py <tree> <ps>
import sys, time, statistics
sys.path.insert(0, sys.argv[1] + "/python")
import kvcache.sglang as S
ps = int(sys.argv[2])
pool = S.ReqToTokenPool(4, 4096 + ps, "cpu")
alloc = (S.TokenToKVPoolAllocator(8192, "float16", "cpu", None, False) if ps == 1 else
         S.PagedTokenToKVPoolAllocator(8192, ps, "float16", "cpu", None, False))
cache = S.ChunkCache(pool, alloc, ps)
ts = []
for i in range(300):
    r = S.Req(fill_ids=list(range(4096)))
    S.ScheduleBatch([r], pool, cache).prepare_for_extend()
    r.kv_committed_len = r.kv_allocated_len = 4096
    t0 = time.perf_counter_ns(); S.release_kv_cache(r, cache); ts.append(time.perf_counter_ns() - t0)
print(sys.argv[1], ps, "%.2f" % (statistics.median(ts[50:]) / 1000))
