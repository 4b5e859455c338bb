# rowsum.py BEFORE_DIR AFTER_DIR: per row, Ir of both caches' evict calls (callgrind, inclusive),
# calls and evicted tokens (the bench's KVB_DBG line), SWA/full Ir per call and per token.
import re, sys, os
names = {1: 'sysprompt', 2: 'pressure'}
def load(d, r):
    ir = {}
    for l in open(os.path.join(d, 'ir-%s.txt' % r)):
        m = re.match(r'([\d,]+) \(.*\)\s+/\S+:(kvc_swa_radix_cache_evict|kvc_radix_cache_evict)$', l.strip())
        if m and m.group(2) not in ir: ir[m.group(2)] = int(m.group(1).replace(',', ''))
    dbg = {}
    for l in open(os.path.join(d, 'row-%s.txt' % r)):
        m = re.match(r'DBG (\w+) evict calls (\d+) full victims (\d+) full tok (\d+) swa frees (\d+) swa tok (\d+) evict_tokens (\d+)', l)
        if m: dbg[m.group(1)] = [int(x) for x in m.groups()[1:]]
    return ir, dbg
print('| trace | page | tree | SWA evict calls / tokens | full evict calls / tokens | SWA Ir per call, before | after | full Ir per call | SWA/full Ir per call, before | after | SWA Ir per token, before | after | full Ir per token | SWA/full Ir per token, before | after |')
print('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|')
for t in (1, 2):
    for p in (1, 16):
        for z, tree in enumerate(('10^4', '10^5', '10^6')):
            r = '%d,%d,%d' % (t, p, z)
            (ib, db), (ia, da) = load(sys.argv[1], r), load(sys.argv[2], r)
            sc, st = da['swa'][0], da['swa'][5]
            fc, ft = da['full'][0], da['full'][5]
            assert db['swa'][0] == sc and db['swa'][5] == st
            swb, swa_, fu = ib['kvc_swa_radix_cache_evict'], ia['kvc_swa_radix_cache_evict'], ia['kvc_radix_cache_evict']
            print('| %s | %d | %s | %d / %d | %d / %d | %.1f k | %.1f k | %.1f k | %.2f | %.2f | %.1f | %.1f | %.1f | %.2f | %.2f |' % (
                names[t], p, tree, sc, st, fc, ft, swb / sc / 1e3, swa_ / sc / 1e3, fu / fc / 1e3,
                (swb / sc) / (fu / fc), (swa_ / sc) / (fu / fc), swb / st, swa_ / st, fu / ft,
                (swb / st) / (fu / ft), (swa_ / st) / (fu / ft)))
