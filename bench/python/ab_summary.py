#!/usr/bin/env python3
"""Summary of an alternated A/B run of tree_cache_timeit.py (lines "TAG,round,cache,op,
median_us,min_us"): per (cache, op) and side, the median and range of the rounds' medians
and the median of the rounds' minimums (the less load-sensitive figure on a shared
machine), with B over A for both."""
import statistics
import sys
from collections import defaultdict

runs, mins = defaultdict(list), defaultdict(list)
for line in open(sys.argv[1]):
    f = line.strip().split(",")
    if len(f) != 6 or f[2] == "cache":
        continue
    runs[(f[2], f[3], f[0])].append(float(f[4]))
    mins[(f[2], f[3], f[0])].append(float(f[5]))
print("| cache | op | A median (range) us | B median (range) us | B/A | A min | B min | B/A min |")
print("|---|---|---|---|---|---|---|---|")
for cache, op in dict.fromkeys((k[0], k[1]) for k in runs):
    a, b = runs[(cache, op, "A")], runs[(cache, op, "B")]
    ma, mb = statistics.median(a), statistics.median(b)
    na = statistics.median(mins[(cache, op, "A")])
    nb = statistics.median(mins[(cache, op, "B")])
    print("| %s | %s | %.2f (%.2f-%.2f) | %.2f (%.2f-%.2f) | %.3f | %.2f | %.2f | %.3f |"
          % (cache, op, ma, min(a), max(a), mb, min(b), max(b), mb / ma, na, nb, nb / na))
