"""Per-run pairs of bench_sglang_adapter.py --backend host (base = the adapter before
bind18, unbound; after = bound), run i of each in the order A B B A: the release radix
rows' adapter medians, the per-run ratio after / base, its median and range."""
import csv
import statistics
import sys

d = sys.argv[1] if len(sys.argv) > 1 else "bench/csv/bind18/adapter_ab"


def row(t, i, name):
    with open("%s/%s-%d.csv" % (d, t, i)) as f:
        for r in csv.DictReader(f):
            if r["scenario"] == name:
                return float(r["adapter_us"])


for name in ("release 4096 radix ps=1", "release 4096 radix ps=16"):
    b = [row("base", i, name) for i in range(8)]
    a = [row("after", i, name) for i in range(8)]
    q = sorted(x / y for x, y in zip(a, b))
    print("%s: base %.2f-%.2f; median %.2f us, after %.2f-%.2f; median %.2f us, "
          "after/base per run median %.3f, range %.3f-%.3f" %
          (name, min(b), max(b), statistics.median(b), min(a), max(a), statistics.median(a),
           statistics.median(q), q[0], q[-1]))
