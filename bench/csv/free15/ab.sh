#!/usr/bin/env bash
# free15 A/B: the before and after kvc_bench_radix binaries (same bench source), alternated
# A B B A per pair of rounds, ROUNDS rounds of each (default 8), on the chat page-1 10^5
# replay alone (KVB_TRACE_SEL) and on the whole trace part (KVB_ONLY=trace).
# Usage: ab.sh BEFORE_BIN AFTER_BIN OUTDIR
set -euo pipefail
before=$1 after=$2 out=$3
mkdir -p "$out"
rounds=${ROUNDS:-8}
run() { # side round mode
  local bin=$before
  [ "$1" = after ] && bin=$after
  cat /proc/loadavg >"$out/$1-$2-$3.load"
  if [ "$3" = sel ]; then
    KVB_ONLY=trace KVB_TRACE_SEL=chat-1-100000 nice "$bin" --csv "$out/$1-$2-$3.csv" >"$out/$1-$2-$3.txt"
  else
    KVB_ONLY=trace nice "$bin" --csv "$out/$1-$2-$3.csv" >"$out/$1-$2-$3.txt"
  fi
}
for mode in sel full; do
  for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) = 1 ]; then run before "$r" "$mode"; run after "$r" "$mode"
    else run after "$r" "$mode"; run before "$r" "$mode"; fi
  done
done
