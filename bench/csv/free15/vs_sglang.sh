#!/usr/bin/env bash
# free15: kvcache (whole trace part) and SGLang 0.5.23's RadixCache on the same requests,
# alternated ROUNDS times (default 3); SGLang replays only the ONLY replays.
# Usage: vs_sglang.sh KVC_BENCH_RADIX SGL_PYTHON SGL_SRC OUTDIR
set -euo pipefail
bin=$1 py=$2 src=$3 out=$4
only=${ONLY:-chat-1-100000,chat-1-10000,pressure-1-10000,pressure-1-100000}
mkdir -p "$out"
traces=$(mktemp -d)
trap 'rm -rf "$traces"' EXIT
KVB_ONLY=trace KVB_TRACE_DUMP="$traces" "$bin" >/dev/null
for i in $(seq 1 "${ROUNDS:-3}"); do
  cat /proc/loadavg >"$out/kvcache-$i.load"
  KVB_ONLY=trace nice "$bin" --csv "$out/kvcache-$i.csv" >"$out/kvcache-$i.txt"
  cat /proc/loadavg >"$out/sglang-$i.load"
  PYTHONPATH="$src" PYTHONWARNINGS=ignore nice "$py" bench/sglang_radix_ref.py --traces "$traces" --only "$only" \
    --csv "$out/sglang-$i.csv" >"$out/sglang-$i.txt"
done
