#!/usr/bin/env python3
"""rowsum.py: the instruction table of bench/RESULTS.md (session 12, swa17d) from
callgrind/{step4,final}/*-ir-ROW.txt (inclusive Ir of both caches' evict calls, rows.sh)
and callgrind/tokens-half.txt (evict calls and counted tokens per cache, a KVB_DBG run)."""
import re

dbg = [l.split() for l in open("callgrind/tokens-half.txt") if l.startswith("DBG")]
rows = [(t, p, z) for t in (1, 2) for p in (1, 16) for z in (0, 1, 2)]
calls = {}
for k, r in enumerate(rows):
    f, s = dbg[2 * k], dbg[2 * k + 1]
    assert f[1] == "full" and s[1] == "swa"
    calls[r] = (int(f[4]), int(f[6]), int(s[4]), int(s[6]))


def ir(path):
    out = {}
    for line in open(path):
        m = re.match(r"\s*([\d,]+) .*:(kvc_swa_radix_cache_evict|kvc_radix_cache_evict)$", line)
        if m:
            out["swa" if "swa" in m[2] else "full"] = int(m[1].replace(",", ""))
    return out


print("| trace | page | tree | SWA calls / tokens | full calls / tokens | SWA Ir, before | after (segments) | step of 4 (dropped) "
      "| full Ir | SWA/full Ir per token, before | after | SWA Ir per token, before / after / full |")
print("|" + "---|" * 12)
for r in rows:
    t, p, z = r
    key = f"{t},{p},{z}"
    b = ir(f"callgrind/step4/before-ir-{key}.txt")
    s4 = ir(f"callgrind/step4/after-ir-{key}.txt")
    a = ir(f"callgrind/final/after-ir-{key}.txt")
    fc, ft, sc, stok = calls[r]
    assert b["full"] == a["full"]
    fpt = b["full"] / ft
    print(f"| {['', 'sysprompt', 'pressure'][t]} | {p} | 10^{z + 4} | {sc} / {stok} | {fc} / {ft} | {b['swa'] / 1e6:.1f} M "
          f"| {a['swa'] / 1e6:.1f} M | {s4['swa'] / 1e6:.1f} M | {b['full'] / 1e6:.1f} M | {b['swa'] / stok / fpt:.2f} "
          f"| {a['swa'] / stok / fpt:.2f} | {b['swa'] / stok:.1f} / {a['swa'] / stok:.1f} / {fpt:.1f} |")
