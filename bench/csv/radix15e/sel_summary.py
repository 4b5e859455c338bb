#!/usr/bin/env python3
"""(radix15e: copied from simd15.) Summary of sel_ab.sh's output: per row (evict and its split, or the rows matching
GREP), per build the range of the per-round medians and their median ("lo-hi; med").
Usage: sel_summary.py DIR [GREP]"""
import csv, glob, os, re, statistics, sys

d = sys.argv[1]
pat = re.compile(sys.argv[2] if len(sys.argv) > 2 else "evict")
runs = {}
for p in sorted(glob.glob(os.path.join(d, "*.csv"))):
    name = os.path.basename(p).rsplit("-", 1)[0]
    with open(p) as f:
        for r in csv.reader(f):
            if len(r) < 8 or r[0] not in ("trace", "split") or not pat.search(r[1]):
                continue
            runs.setdefault(name, {}).setdefault((r[1], int(r[2]), int(r[3])), []).append(float(r[4]))
names = list(runs)
keys = sorted(set().union(*[set(v) for v in runs.values()]), key=lambda k: (k[0].split()[0], k[1], k[2], k[0]))
print("| row | page | capacity | " + " | ".join(names) + " |")
print("|---|---|---|" + "---|" * len(names))
for k in keys:
    cells = []
    for n in names:
        v = runs[n].get(k, [])
        cells.append(f"{min(v):.2f}-{max(v):.2f}; {statistics.median(v):.2f} ({len(v)})" if v else "-")
    print(f"| {k[0]} | {k[1]} | {k[2]} | " + " | ".join(cells) + " |")
