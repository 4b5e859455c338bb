#!/usr/bin/env python3
"""(radix15e: copied from simd15.) Paired summary of sel_ab.sh's output: per row and build, the median over rounds of the
build's median divided by the BASE build's median in the same round, with the range of
those per-round ratios (each round runs every build back to back, so a slow phase of the
shared host moves both sides of a ratio).
Usage: paired_summary.py DIR BASE [GREP]"""
import csv, glob, os, re, statistics, sys

d, base = sys.argv[1], sys.argv[2]
pat = re.compile(sys.argv[3] if len(sys.argv) > 3 else "evict")
runs = {}
for p in sorted(glob.glob(os.path.join(d, "*.csv"))):
    name, rnd = os.path.basename(p)[:-4].rsplit("-", 1)
    with open(p) as f:
        for r in csv.reader(f):
            if len(r) < 8 or r[0] not in ("trace", "split") or not pat.search(r[1]):
                continue
            runs.setdefault(name, {}).setdefault(int(rnd), {})[(r[1], int(r[2]), int(r[3]))] = float(r[4])
names = [n for n in runs if n != base]
keys = sorted(set().union(*[set(v) for v in runs[base].values()]), key=lambda k: (k[0].split()[0], k[1], k[2], k[0]))
print("| row | page | capacity | " + " | ".join(f"{n} / {base}" for n in names) + " |")
print("|---|---|---|" + "---|" * len(names))
for k in keys:
    cells = []
    for n in names:
        q = [runs[n][r][k] / runs[base][r][k] for r in runs[n] if r in runs[base] and k in runs[n][r] and k in runs[base][r]]
        cells.append(f"{statistics.median(q):.2f} ({min(q):.2f}-{max(q):.2f})" if q else "-")
    print(f"| {k[0]} | {k[1]} | {k[2]} | " + " | ".join(cells) + " |")
