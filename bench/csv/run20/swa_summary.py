#!/usr/bin/env python3
"""Summarises a run 20 swa_all.txt (kvc_bench_radix KVB_ONLY=swa logs, lazy / eager):
per replay, ranges of the SWA/full ratios and the launch rows. Usage: swa_summary.py FILE"""
import collections
import re
import statistics as st
import sys

d = collections.defaultdict(list)
cur = None
for line in open(sys.argv[1]):
    if line.startswith('### '):
        cur = line.split('-')[-1].strip()[:-4]
        continue
    m = re.match(r'ratio\s+(\w+)\s+p(\d+)\s+(\d+) swa/full: match ([\d.]+) insert ([\d.]+) finished ([\d.]+) '
                 r'evict ([\d.]+); evict per token ([\d.]+)', line)
    if m:
        k = (m.group(1), m.group(2), m.group(3))
        for i, nm in [(4, 'match'), (6, 'finished'), (8, 'evtok')]:
            d[k + (nm, cur)].append(float(m.group(i)))
    m = re.match(r'launch\s+(\w+)\s+p(\d+)\s+(\d+) floor ([\d.]+) us.*swa ([\d.]+) / full ([\d.]+) us', line)
    if m:
        k = (m.group(1), m.group(2), m.group(3))
        d[k + ('floor', cur)].append(float(m.group(4)))
        d[k + ('first_swa', cur)].append(float(m.group(5)))
        d[k + ('first_full', cur)].append(float(m.group(6)))


def r(v):
    return "%.2f-%.2f" % (min(v), max(v)) if v else "-"


def med(v):
    return "%.1f" % st.median(v) if v else "-"


keys = sorted(set(k[:3] for k in d), key=lambda k: (k[0], int(k[1]), int(k[2])))
print("| trace | page | tree | match, lazy | finished, lazy | eager | evict/token, lazy | eager | launch floor us "
      "| first alloc_extend us: SWA lazy / SWA eager / full |")
print("|---|---|---|---|---|---|---|---|---|---|")
for k in keys:
    def g(n, mode):
        return d.get(k + (n, mode), [])
    print(f"| {k[0]} | {k[1]} | {int(k[2]):,} | {r(g('match', 'lazy'))} | {r(g('finished', 'lazy'))} | "
          f"{r(g('finished', 'eager'))} | {r(g('evtok', 'lazy'))} | {r(g('evtok', 'eager'))} | "
          f"{r(g('floor', 'lazy') + g('floor', 'eager'))} | {med(g('first_swa', 'lazy'))} / "
          f"{med(g('first_swa', 'eager'))} / {med(g('first_full', 'lazy') + g('first_full', 'eager'))} |")
