# Session 10 call 1: issue 20 item 1 (a prefetch pass over the batch's mirror lines before
# the fused decode loop: off / read / write prefetch, same process A/B with a control) and
# issue 18 item 4 (the adapter bench on CUDA, unpinned and pinned to one core, with its
# framework primitives).
set -uo pipefail
b=build-gpu
T0=$SECONDS
for v in 0 1 2; do
  ( cmake -S . -B /tmp/pf$v -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_EXAMPLES=OFF \
      -DKVC_BUILD_STATIC=OFF -DKVC_INSTALL=OFF -DCMAKE_C_FLAGS=-DKVC_DECODE_PREFETCH_PASS=$v >/tmp/pf$v.log 2>&1 &&
    cmake --build /tmp/pf$v -j 5 --target kvcache >>/tmp/pf$v.log 2>&1 || echo "pf$v build failed" ) &
done
wait
cp /tmp/pf0/libkvcache.so.0.1.0 /tmp/pf0c.so
echo "   [$(( SECONDS - T0 )) s] variants built"
lscpu | grep -E "Model name|MHz|L2|L3" | head -5
AB=$b/bench/kvc_bench_ab
for r in 1 2; do
  echo "=== round $r: control (pf0 / copy of pf0)"; $AB /tmp/pf0/libkvcache.so /tmp/pf0c.so --reps 3000 2>&1 | grep -E "decode|channel"
  echo "=== round $r: off / prefetch-read pass";  $AB /tmp/pf0/libkvcache.so /tmp/pf1/libkvcache.so --reps 3000 2>&1 | grep -E "decode|channel"
  echo "=== round $r: off / prefetch-write pass"; $AB /tmp/pf0/libkvcache.so /tmp/pf2/libkvcache.so --reps 3000 2>&1 | grep -E "decode|channel"
done
echo "   [$(( SECONDS - T0 )) s]"
an() { KVCACHE_LIB=$PWD/$b/libkvcache.so timeout 200 $1 python3 bench/python/bench_sglang_adapter.py --backend cuda --rounds 12 --csv $OUT/adapter-$2.csv > $OUT/adapter-$2.txt 2>&1; echo "rc=$?"; grep -E "^(decode|extend|release|match)" $OUT/adapter-$2.txt | head -20 | cut -c1-110; sed -n '/^primitive/,/^===/p' $OUT/adapter-$2.txt; }
echo "=== adapter, unpinned"; an "" free1
echo "   [$(( SECONDS - T0 )) s]"
echo "=== adapter, taskset -c 6"; an "taskset -c 6" pin1
echo "   [$(( SECONDS - T0 )) s]"
