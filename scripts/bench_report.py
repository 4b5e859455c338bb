#!/usr/bin/env python3
"""Benchmark report: PNG plots from the CSVs the benchmarks write (bench/*.c --csv).

    scripts/bench_report.py [CSV_DIR | bench_csv.tgz | FILE.csv ...] [-o bench/plots]

Inputs: CSV files, a directory of them, or the bench_csv.tgz that scripts/gpu_bench.sh
leaves. Each file is recognised by its header:
  * kernel bandwidth (bench_kv: op,n,bytes,us,gbps,copy_gbps,...; bench_mla: op,n,op_us,
    op_gbs,copy_us,copy_gbs,...; bench_mamba: backend,slots_per_call,op,...,gbps,...):
    one PNG per file, one panel per op, achieved GB/s vs N against the plain-copy
    ceiling measured in the same run (dashed);
  * host time per scheduler step (bench_alloc, bench_swa: case,variant,batch,page_size,
    median_us,...): one PNG per file, one panel per case, median microseconds per call vs
    batch size, library (solid) vs naive (dashed), decode channel dotted / dash-dot, one
    colour per page size;
  * startup (bench_startup): a bar chart of context / kernel-load time, cold vs warm.
Writes <out>/<csv name>.png and prints what it wrote. Needs matplotlib (pip install
matplotlib). Numbers come only from the CSVs; nothing is computed but unit changes.
"""
import argparse
import collections
import csv
import io
import os
import sys
import tarfile

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def parse_csv(text):
    """Rows as dicts. Some benchmarks write free-text fields (bench_alloc's `variant`, e.g.
    "free (paged, checked)") without quoting; extra fields are joined back into the
    `variant` column (else the second one)."""
    lines = list(csv.reader(io.StringIO(text)))
    if not lines:
        return []
    header = lines[0]
    text_col = header.index("variant") if "variant" in header else 1
    rows = []
    for fields in lines[1:]:
        if not fields:
            continue
        extra = len(fields) - len(header)
        if extra > 0:
            fields = (fields[:text_col] + [",".join(fields[text_col:text_col + extra + 1])]
                      + fields[text_col + extra + 1:])
        rows.append(dict(zip(header, fields)))
    return rows


def read_inputs(paths):
    """{name: [row dicts]} from files, directories and .tgz archives."""
    out = {}
    for p in paths:
        if os.path.isdir(p):
            for f in sorted(os.listdir(p)):
                if f.endswith(".csv"):
                    out[f[:-4]] = parse_csv(open(os.path.join(p, f)).read())
        elif p.endswith((".tgz", ".tar.gz")):
            with tarfile.open(p) as tar:
                for m in tar.getmembers():
                    if m.isfile() and m.name.endswith(".csv"):
                        text = tar.extractfile(m).read().decode()
                        out[os.path.basename(m.name)[:-4]] = parse_csv(text)
        else:
            out[os.path.basename(p)[:-4]] = parse_csv(open(p).read())
    return out


def fnum(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def grid(n):
    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.8 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def bandwidth_series(rows):
    """{op: [(n, gbps, copy_gbps)]} for the three kernel CSV layouts."""
    series = collections.defaultdict(list)
    h = rows[0].keys()
    if "slots_per_call" in h:  # bench_mamba: the d2d row of each N is the ceiling
        ceil = {r["slots_per_call"]: fnum(r["gbps"]) for r in rows if r["op"].startswith("d2d")}
        for r in rows:
            if not r["op"].startswith("d2d"):
                series[r["op"]].append((fnum(r["slots_per_call"]), fnum(r["gbps"]),
                                        ceil.get(r["slots_per_call"], float("nan"))))
        return series, "slots per call"
    g, c = ("op_gbs", "copy_gbs") if "op_gbs" in h else ("gbps", "copy_gbps")
    for r in rows:
        if fnum(r.get(g)) > 0 and fnum(r.get(c)) > 0:  # skip host-time rows (bytes 0)
            series[r["op"]].append((fnum(r["n"]), fnum(r[g]), fnum(r[c])))
    return series, "N (rows per call)"


def plot_bandwidth(name, rows, out):
    series, xlabel = bandwidth_series(rows)
    if not series:
        return None
    fig, axes = grid(len(series))
    for ax, (op, pts) in zip(axes, sorted(series.items())):
        pts.sort()
        xs = [p[0] for p in pts]
        ax.plot(xs, [p[1] for p in pts], "o-", label=op)
        ax.plot(xs, [p[2] for p in pts], "k--", alpha=0.6, label="plain copy, same bytes")
        for x, y, cy in pts:
            if cy > 0:
                ax.annotate("%.0f%%" % (100 * y / cy), (x, y), textcoords="offset points",
                            xytext=(0, 6), ha="center", fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("GB/s")
        ax.set_title(op)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle("%s: achieved bandwidth vs the plain-copy ceiling" % name)
    fig.tight_layout()
    path = os.path.join(out, name + ".png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_host_step(name, rows, out):
    cases = collections.OrderedDict()
    for r in rows:
        if r["case"].endswith("_gpu"):  # GPU-time rows (bench_alloc channel_gpu): not host µs
            continue
        cases.setdefault(r["case"], []).append(r)
    fig, axes = grid(len(cases))
    for ax, (case, rs) in zip(axes, cases.items()):
        lines = collections.OrderedDict()
        for r in rs:
            lines.setdefault((r["variant"], r["page_size"]), []).append(
                (fnum(r["batch"]), fnum(r["median_us"])))
        page_sizes = sorted({k[1] for k in lines}, key=int)
        colors = {ps: "C%d" % i for i, ps in enumerate(page_sizes)}
        single_batch = all(len(v) == 1 for v in lines.values())
        for i, ((variant, ps), pts) in enumerate(lines.items()):
            pts.sort()
            naive = variant.startswith("naive")
            label = "%s, ps %s" % (variant, ps)
            if single_batch:  # one batch size: bars
                ax.bar(i, pts[0][1], color=colors[ps], alpha=0.5 if naive else 1.0,
                       hatch="//" if naive else None, label=label)
            else:
                # library solid, naive dashed, decode channel dotted (host half) or
                # dash-dot (host half + a plain launch)
                style = ("--" if naive else ":" if variant.endswith("(graph path)")
                         else "-." if variant.startswith("channel") else "-")
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style,
                        marker="o", color=colors[ps], label=label)
        if single_batch:
            ax.set_xticks([])
            ax.set_xlabel("batch %s" % rs[0]["batch"])
        else:
            ax.set_xscale("log", base=2)
            ax.set_xlabel("batch size (requests)")
            ax.set_yscale("log")
        ax.set_ylabel("host µs per call (median)")
        ax.set_title(case)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("%s: host microseconds per scheduler call, library (solid) vs naive (dashed)"
                 % name)
    fig.tight_layout()
    path = os.path.join(out, name + ".png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_startup(name, rows, out):
    fig, ax = plt.subplots(figsize=(6, 3.8))
    phases = [r["phase"] for r in rows]
    ctx_ms = [fnum(r["context_ms"]) for r in rows]
    k_ms = [fnum(r["kernels_ms"]) for r in rows]
    ax.bar(phases, ctx_ms, label="context create (ms)")
    ax.bar(phases, k_ms, bottom=ctx_ms, label="kernels: compile or disk load (ms)")
    ax.set_ylabel("ms")
    ax.set_title("%s (%s)" % (name, rows[0].get("device", "")))
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(out, name + ".png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_radix_vs_sglang(name, ours, theirs, out):
    """Radix cache against SGLang's RadixCache on the same shapes (bench_radix part 1 and
    bench/sglang_radix_ref.py): median us per call, log scale, at the largest tree."""
    key = lambda r: (r["what"], r["page_size"], r["tree_tokens"])
    theirs_by = {key(r): r for r in theirs}
    common = [r for r in ours if key(r) in theirs_by]
    if not common:
        return None
    top = max(int(r["tree_tokens"]) for r in common)
    common = [r for r in common if int(r["tree_tokens"]) == top]
    labels = ["%s, page %s" % (r["what"], r["page_size"]) for r in common]
    k = [fnum(r["median_us"]) for r in common]
    g = [fnum(theirs_by[key(r)]["median_us"]) for r in common]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(labels) + 1.6))
    y = list(range(len(labels)))
    ax.barh([i + 0.2 for i in y], g, height=0.4, label="SGLang 0.5.23 RadixCache", color="tab:gray")
    ax.barh([i - 0.2 for i in y], k, height=0.4, label="kvcache radix cache", color="tab:blue")
    for i in y:
        ax.text(g[i], i + 0.2, " %.0fx" % (g[i] / k[i]), va="center", fontsize=7)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("median host us per call (log)")
    ax.set_title("radix cache vs SGLang, same run, tree of %d tokens" % top, fontsize=9)
    ax.set_xlim(right=max(g) * 4)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.subplots_adjust(left=0.36)
    path = os.path.join(out, name + ".png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main():
    ap = argparse.ArgumentParser(description="PNG plots from benchmark CSVs")
    ap.add_argument("inputs", nargs="*", default=["bench_csv.tgz"])
    ap.add_argument("-o", "--out", default=os.path.join(os.path.dirname(__file__), "..",
                                                        "bench", "plots"))
    args = ap.parse_args()
    data = read_inputs(args.inputs)
    if not data:
        sys.exit("bench_report: no CSV found in %s" % args.inputs)
    os.makedirs(args.out, exist_ok=True)
    if "vs-sglang-kvcache" in data and "vs-sglang-sglang" in data:
        ours, theirs = data.pop("vs-sglang-kvcache"), data.pop("vs-sglang-sglang")
        path = plot_radix_vs_sglang("radix-vs-sglang", ours, theirs, args.out)
        if path:
            print("bench_report: wrote %s" % os.path.normpath(path))
    for name, rows in sorted(data.items()):
        if not rows:
            continue
        h = rows[0].keys()
        if "median_us" in h and "case" in h:
            path = plot_host_step(name, rows, args.out)
        elif "context_ms" in h:
            path = plot_startup(name, rows, args.out)
        elif "gbps" in h or "op_gbs" in h:
            path = plot_bandwidth(name, rows, args.out)
        else:
            print("bench_report: %s: unknown CSV layout, skipped" % name)
            continue
        if path:
            print("bench_report: wrote %s" % os.path.normpath(path))


if __name__ == "__main__":
    main()
