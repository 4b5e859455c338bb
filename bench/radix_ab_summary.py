#!/usr/bin/env python3
"""Summarizes bench/csv/radix/ab-{before,after}-{1,2,3}.csv (kvc_bench_radix run before and
after, alternately, three rounds) as markdown: per row, the three runs' medians and p99s
(min-max over the rounds), before and after. Rows only one side has show '-' on the other.

Usage: python3 bench/radix_ab_summary.py [DIR] > table.md
"""
import csv
import sys
from pathlib import Path


def load(path):
    rows = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            if r["section"] == "memory":
                continue
            key = (r["section"], r["what"], int(r["page_size"]), int(r["tree_tokens"]))
            rows[key] = (float(r["median_us"]), float(r["p99_us"]), r["hit_rate"])
    return rows


def span(vals):
    lo, hi = min(vals), max(vals)
    return f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}"


def main():
    d = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/csv/radix")
    runs = {s: [load(d / f"ab-{s}-{i}.csv") for i in (1, 2, 3)] for s in ("before", "after")}
    keys = list(runs["after"][0].keys())
    keys += [k for k in runs["before"][0] if k not in runs["after"][0]]
    print("| section | operation | page | tree | before median | before p99 | after median | after p99 |")
    print("|---|---|---|---|---|---|---|---|")
    for k in keys:
        cells = []
        for s in ("before", "after"):
            got = [r[k] for r in runs[s] if k in r]
            if len(got) == 3:
                cells += [span([g[0] for g in got]), span([g[1] for g in got])]
            else:
                cells += ["-", "-"]
        print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
