#!/usr/bin/env python3
"""summary.py DIR [SIDE...]: ranges (and medians) over the rounds of ab.sh's outputs,
per part-3 row: SWA and full evict us, per-call and per-token evict ratios, and the
match / insert / finished ratios, for the builds before and after."""
import glob, re, statistics, sys

d = sys.argv[1]
sides = sys.argv[2:] or ["half", "full"]
rat = re.compile(r"^ratio\s+(\w+)\s+p(\d+)\s+(\d+) swa/full: match ([\d.]+) insert ([\d.]+) finished ([\d.]+) "
                 r"evict ([\d.]+); evict per token ([\d.]+)")
ev = re.compile(r"^swa\s+(\w+) (swa|full) evict \(frees included\)\s+(\d+)\s+(\d+)\s+([\d.]+)")


def load(path):
    rows, us = {}, {}
    for line in open(path):
        m = rat.match(line)
        if m:
            rows[(m[1], int(m[2]), int(m[3]))] = [float(m[k]) for k in range(4, 9)]
        m = ev.match(line)
        if m:
            us[(m[1], int(m[3]), int(m[4]), m[2])] = float(m[5])
    return rows, us


def rng(v, med=False):
    s = f"{min(v):.2f}-{max(v):.2f}"
    return s + (f" ({statistics.median(v):.2f})" if med else "")


for side in sides:
    data = {}
    for b in ("before", "after"):
        files = sorted(glob.glob(f"{d}/{b}-{side}-*.txt"))
        data[b] = [load(f) for f in files]
    loads = [float(open(f).read().split()[0]) for f in glob.glob(f"{d}/*-{side}-*.load")]
    print(f"\n### SWA side {side}: {len(data['before'])} + {len(data['after'])} rounds, load average {min(loads):.2f}-{max(loads):.2f}\n")
    print("| trace | page | tree | SWA evict us, before | after | full evict us, before | after | SWA/full per call, before | after "
          "| per evicted token, before | after | match / insert / finished, after |")
    print("|" + "---|" * 13)
    for key in data["before"][0][0]:
        t, p, z = key
        cols = [t, str(p), f"10^{len(str(z)) - 1}"]
        for what in ("swa", "full"):
            for b in ("before", "after"):
                cols.append(rng([u[(t, p, z, what)] for _, u in data[b]]))
        for k, med in ((3, False), (4, True)):
            for b in ("before", "after"):
                cols.append(rng([r[key][k] for r, _ in data[b]], med))
        cols.append(" / ".join(rng([r[key][k] for r, _ in data["after"]]) for k in range(3)))
        print("| " + " | ".join(cols) + " |")
