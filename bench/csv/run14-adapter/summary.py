#!/usr/bin/env python3
"""Medians of the run medians (and the fastest run) of before-/after-host-<mode>-N.csv in
the folder given (default: this script's, run14-adapter/; the final pass: final/)."""
import collections, csv, glob, os, statistics as st, sys
here = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
for mode in ("ext", "ctypes"):
    d = collections.defaultdict(lambda: collections.defaultdict(list))
    for side in ("before", "after"):
        for f in sorted(glob.glob(os.path.join(here, "%s-host-%s-*.csv" % (side, mode)))):
            for row in csv.DictReader(open(f)):
                d[row["scenario"]][side].append(float(row["adapter_us"]))
                d[row["scenario"]]["c"].append(float(row["c_ctypes_us"]))
    nb = len(glob.glob(os.path.join(here, "before-host-%s-*.csv" % mode)))
    na = len(glob.glob(os.path.join(here, "after-host-%s-*.csv" % mode)))
    print("== %s: %d before runs, %d after runs; median of run medians (fastest run), us" % (mode, nb, na))
    def fmt(x):
        return ("%.2f (%.2f)" % (st.median(x), min(x))) if x else "-"
    for k, v in d.items():
        print("%-28s before %-15s after %-15s C(ctypes) %s" % (k, fmt(v["before"]), fmt(v["after"]), fmt(v["c"])))
