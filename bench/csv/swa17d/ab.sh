#!/bin/bash
# ab.sh ROUNDS SIDE: part 3 (KVB_ONLY=swa) of the before and after builds in the order
# before, after, after, before, ... (ABBA), SIDE half or full (KVB_SWA_SIDE), with the load
# average before each run in <name>.load. Builds: /tmp/swa17d-pb (3d3dca5) and
# /tmp/swa17d-pa (the working tree), both with profiling-patch.diff (KVB_ROW unset here).
for ((r = 1; r <= $1; r++)); do
  if ((r % 2)); then order="before after"; else order="after before"; fi
  for b in $order; do
    d=/tmp/swa17d-pb; [ $b = after ] && d=/tmp/swa17d-pa
    cat /proc/loadavg > $b-$2-$r.load
    KVB_ONLY=swa KVB_SWA_SIDE=$2 nice $d/bench/kvc_bench_radix > $b-$2-$r.txt 2>&1
  done
done
