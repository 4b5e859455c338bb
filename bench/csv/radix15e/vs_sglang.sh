#!/usr/bin/env bash
# radix15e (from simd15): free15's vs_sglang.sh with two kvcache builds. Each round runs the whole kvcache
# trace part of BEFORE, then of AFTER, then SGLang 0.5.23's RadixCache on the ONLY replays
# (the same requests: the traces dumped by KVB_TRACE_DUMP), ROUNDS times (default 3).
# Usage: vs_sglang.sh BEFORE_BIN AFTER_BIN SGL_PYTHON SGL_SRC OUTDIR
set -euo pipefail
before=$1 after=$2 py=$3 src=$4 out=$5
only=${ONLY:-chat-1-100000,chat-1-10000,pressure-1-10000,pressure-1-100000}
mkdir -p "$out"
traces=$(mktemp -d)
trap 'rm -rf "$traces"' EXIT
KVB_ONLY=trace KVB_TRACE_DUMP="$traces" "$after" >/dev/null
for i in $(seq 1 "${ROUNDS:-3}"); do
  for side in before after; do
    bin=$before
    [ $side = after ] && bin=$after
    cat /proc/loadavg >"$out/kvcache-$side-$i.load"
    KVB_ONLY=trace nice "$bin" --csv "$out/kvcache-$side-$i.csv" >"$out/kvcache-$side-$i.txt"
  done
  cat /proc/loadavg >"$out/sglang-$i.load"
  PYTHONPATH="$src" PYTHONWARNINGS=ignore nice "$py" bench/sglang_radix_ref.py --traces "$traces" --only "$only" \
    --csv "$out/sglang-$i.csv" >"$out/sglang-$i.txt"
done
