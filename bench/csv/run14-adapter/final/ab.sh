#!/usr/bin/env bash
set -uo pipefail
export KVCACHE_LIB=/tmp/a18_lib/libkvcache.so KVCB_HELPER=/tmp/a18_lib/bench/libkvc_pybench.so
o=${OUT_DIR:-/tmp/a18_final}
for i in 1 2 3 4 5 6 7 8 9 10; do
  for side in before after; do
    [ $((i % 2)) = 0 ] && side=$([ $side = before ] && echo after || echo before)
    d=/tmp/a18_ref; [ $side = after ] && d=/tmp/a18_new
    /tmp/sglvenv/bin/python $d/bench/python/bench_sglang_adapter.py --rounds 3 --csv $o/$side-host-ext-$i.csv > $o/$side-host-ext-$i.txt 2>&1
  done
done
for i in 1 2 3; do
  BACKEND=host /tmp/sglvenv/bin/python /tmp/a18_new/bench/python/adapter_extend_steps.py > $o/after-steps-host-$i.txt 2>&1
done
echo done > /tmp/a18_ab3.done
