#!/usr/bin/env python3
"""Per-trace table of kvcache vs SGLang 0.5.23's RadixCache on the same trace replays.

Reads bench/csv/radix/vs-sglang-traces/{kvcache,sglang}-<round>.csv (kvc_bench_radix's
trace part and bench/sglang_radix_ref.py --traces, run alternately) and prints, per trace,
page size, capacity and operation: each side's median over the rounds (range), the call
counts, and the per-round ratio SGLang median / kvcache median (range). A row is "ok"
when every round's ratio is >= 20 (issue 15's rule).

Usage: radix_vs_sglang_traces.py [DIR] [--rounds 1,2,3]
"""
import csv
import glob
import os
import sys

OPS = ("match_req", "lock+unlock", "cache_unfinished_req", "cache_finished_req", "evict")


def load(path):
    out = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            if r["section"] != "trace":
                continue
            trace, op = r["what"].split(" ", 1)
            out[(trace, int(r["page_size"]), int(r["tree_tokens"]), op)] = (float(r["median_us"]), int(r["count"]),
                                                                            float(r["hit_rate"]))
    return out


def rng(v, fmt):
    lo, hi = min(v), max(v)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else (fmt + "-" + fmt).format(lo, hi)


def main():
    argv = sys.argv[1:]
    only = None
    if "--rounds" in argv:
        i = argv.index("--rounds")
        only = argv[i + 1].split(",")
        del argv[i : i + 2]
    d = argv[0] if argv else os.path.join(os.path.dirname(__file__), "csv/radix/vs-sglang-traces")
    rounds = sorted({os.path.basename(p)[len("kvcache-"):-4] for p in glob.glob(os.path.join(d, "kvcache-*.csv"))})
    rounds = [r for r in rounds if os.path.exists(os.path.join(d, f"sglang-{r}.csv")) and (not only or r in only)]
    kv = [load(os.path.join(d, f"kvcache-{r}.csv")) for r in rounds]
    sg = [load(os.path.join(d, f"sglang-{r}.csv")) for r in rounds]
    print(f"rounds: {', '.join(rounds)}")
    print("| trace | page | capacity | operation | calls (kvc / sgl) | kvcache median us | SGLang median us | SGLang / kvcache | >= 20x |")
    print("|---|---|---|---|---|---|---|---|---|")
    for trace in ("chat", "sysprompt", "pressure"):
        for ps in (1, 16, 64):
            for cap in (10_000, 100_000, 1_000_000):
                for op in OPS:
                    k = (trace, ps, cap, op)
                    if not all(k in x for x in kv) or not all(k in x for x in sg):
                        continue
                    km = [x[k][0] for x in kv]
                    sm = [x[k][0] for x in sg]
                    if min(km) <= 0:
                        continue
                    ratio = [s / c for s, c in zip(sm, km)]
                    calls = f"{kv[0][k][1]} / {sg[0][k][1]}"
                    ok = "yes" if min(ratio) >= 20 else ("no" if max(ratio) < 20 else "some rounds")
                    print(f"| {trace} | {ps} | {cap:,} | {op} | {calls} | {rng(km, '{:.2f}')} | {rng(sm, '{:.1f}')} | "
                          f"{rng(ratio, '{:.0f}')}x | {ok} |")


if __name__ == "__main__":
    main()
