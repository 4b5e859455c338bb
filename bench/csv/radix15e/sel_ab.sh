#!/usr/bin/env bash
# radix15e (copied from simd15): several kvc_bench_radix builds on one replay (KVB_TRACE_SEL, default the chat
# page-1 10^5 one) or the whole trace part (SEL=full), ROUNDS rounds (default 6), the
# order of the builds rotated each round. Each build: NAME=BINARY[:ENV=VALUE].
# Usage: sel_ab.sh OUTDIR NAME=BIN[:ENV=V] ...
set -euo pipefail
out=$1
shift
mkdir -p "$out"
rounds=${ROUNDS:-6}
sel=${SEL:-chat-1-100000}
n=$#
builds=("$@")
for r in $(seq 1 "$rounds"); do
  for k in $(seq 0 $((n - 1))); do
    spec=${builds[$(((k + r) % n))]}
    name=${spec%%=*}
    rest=${spec#*=}
    bin=${rest%%:*}
    envs=()
    [ "$rest" != "$bin" ] && envs=("${rest#*:}")
    cat /proc/loadavg >"$out/$name-$r.load"
    if [ "$sel" = full ]; then
      env "${envs[@]}" KVB_ONLY=trace nice "$bin" --csv "$out/$name-$r.csv" >"$out/$name-$r.txt"
    else
      env "${envs[@]}" KVB_ONLY=trace KVB_TRACE_SEL="$sel" nice "$bin" --csv "$out/$name-$r.csv" >"$out/$name-$r.txt"
    fi
  done
done
