#!/usr/bin/env bash
# host-backend before/after of issue 18's adapter pass (run14-adapter): alternating runs
set -uo pipefail
export KVCACHE_LIB=/tmp/a18_lib/libkvcache.so KVCB_HELPER=/tmp/a18_lib/bench/libkvc_pybench.so
o=/work/wt-adapter18/bench/csv/run14-adapter
for i in 1 2 3 4; do
  for side in before after; do
    d=/tmp/a18_ref; [ $side = after ] && d=/tmp/a18_new
    /tmp/sglvenv/bin/python $d/bench/python/bench_sglang_adapter.py --rounds 3 --csv $o/$side-host-ext-$i.csv > $o/$side-host-ext-$i.txt 2>&1
  done
done
for i in 1 2 3; do
  for side in before after; do
    d=/tmp/a18_ref; [ $side = after ] && d=/tmp/a18_new
    KVCACHE_NO_FAST=1 /tmp/sglvenv/bin/python $d/bench/python/bench_sglang_adapter.py --rounds 3 --csv $o/$side-host-ctypes-$i.csv > $o/$side-host-ctypes-$i.txt 2>&1
  done
done
for i in 1 2 3; do
  BACKEND=host /tmp/sglvenv/bin/python /tmp/a18_new/bench/python/adapter_extend_steps.py > $o/after-steps-host-$i.txt 2>&1
done
echo done > /tmp/a18_ab.done
#!/usr/bin/env bash
set -uo pipefail
export KVCACHE_LIB=/tmp/a18_lib/libkvcache.so KVCB_HELPER=/tmp/a18_lib/bench/libkvc_pybench.so
o=/work/wt-adapter18/bench/csv/run14-adapter
for i in 5 6 7 8 9 10; do
  for side in after before; do
    d=/tmp/a18_ref; [ $side = after ] && d=/tmp/a18_new
    /tmp/sglvenv/bin/python $d/bench/python/bench_sglang_adapter.py --rounds 3 --csv $o/$side-host-ext-$i.csv > $o/$side-host-ext-$i.txt 2>&1
  done
done
for i in 4 5 6; do
  for side in after before; do
    d=/tmp/a18_ref; [ $side = after ] && d=/tmp/a18_new
    KVCACHE_NO_FAST=1 /tmp/sglvenv/bin/python $d/bench/python/bench_sglang_adapter.py --rounds 3 --csv $o/$side-host-ctypes-$i.csv > $o/$side-host-ctypes-$i.txt 2>&1
  done
done
echo done > /tmp/a18_ab2.done
