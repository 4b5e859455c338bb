#!/usr/bin/env python3
"""Before / after table of kvc_bench_radix's trace rows over alternated rounds.

Reads DIR/{before,after}-<round>.csv and prints, per row of the trace part (section
trace or split), the range over the rounds of each binary's median and whether the
ranges are apart ("faster" / "slower": every after round beyond every before round).

Usage: radix_ab_traces.py DIR [--page P] [--all]   (default: rows whose ranges are apart)
"""
import csv
import glob
import os
import sys


def load(path):
    with open(path) as f:
        return {(r["what"], int(r["page_size"]), int(r["tree_tokens"])): (float(r["median_us"]), float(r["p99_us"]))
                for r in csv.DictReader(f) if r["section"] in ("trace", "split")}


def main():
    argv = sys.argv[1:]
    show_all = "--all" in argv
    page = None
    if "--page" in argv:
        page = int(argv[argv.index("--page") + 1])
    d = argv[0]
    rounds = sorted(os.path.basename(p)[len("before-"):-4] for p in glob.glob(os.path.join(d, "before-*.csv")))
    before = [load(os.path.join(d, f"before-{r}.csv")) for r in rounds]
    after = [load(os.path.join(d, f"after-{r}.csv")) for r in rounds]
    print(f"rounds: {', '.join(rounds)}")
    print("| row | page | capacity | before median | after median | before p99 | after p99 | |")
    print("|---|---|---|---|---|---|---|---|")
    for k in before[0]:
        if page is not None and k[1] != page:
            continue
        if not all(k in x for x in before + after):
            continue
        b = [x[k][0] for x in before]
        a = [x[k][0] for x in after]
        tag = "faster" if max(a) < min(b) else ("slower" if min(a) > max(b) else "")
        if not tag and not show_all:
            continue
        bp = [x[k][1] for x in before]
        ap = [x[k][1] for x in after]
        print(f"| {k[0]} | {k[1]} | {k[2]:,} | {min(b):.2f}-{max(b):.2f} | {min(a):.2f}-{max(a):.2f} | "
              f"{min(bp):.1f}-{max(bp):.1f} | {min(ap):.1f}-{max(ap):.1f} | {tag} |")


if __name__ == "__main__":
    main()
