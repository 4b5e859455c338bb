#!/usr/bin/env python3
"""Summary of ab.sh's output: per row, the range of the per-round medians of each side
and their median ("lo-hi; med"), and after/before of the medians.
Usage: ab_summary.py DIR [sel|full]"""
import csv, glob, os, statistics, sys

d = sys.argv[1]
modes = sys.argv[2:] or ["sel", "full"]


def load(path):
    out = {}
    with open(path) as f:
        for r in csv.reader(f):
            if len(r) < 8 or r[0] not in ("trace", "split"):
                continue
            out[(r[1], int(r[2]), int(r[3]))] = float(r[4])
    return out


for mode in modes:
    sides = {}
    for side in ("before", "after"):
        runs = [load(p) for p in sorted(glob.glob(os.path.join(d, f"{side}-*-{mode}.csv")))]
        sides[side] = runs
    keys = sorted(set().union(*[set(r) for r in sides["before"]]), key=lambda k: (k[0].split()[0], k[1], k[2], k[0]))
    print(f"\n{mode}: {len(sides['before'])} / {len(sides['after'])} rounds")
    print("| row | page | capacity | before | after | after/before |")
    print("|---|---|---|---|---|---|")
    for k in keys:
        b = [r[k] for r in sides["before"] if k in r]
        a = [r[k] for r in sides["after"] if k in r]
        if not a or not b:
            continue
        mb, ma = statistics.median(b), statistics.median(a)
        print(f"| {k[0]} | {k[1]} | {k[2]} | {min(b):.2f}-{max(b):.2f}; {mb:.2f} | {min(a):.2f}-{max(a):.2f}; {ma:.2f} | {ma / mb:.2f} |")
