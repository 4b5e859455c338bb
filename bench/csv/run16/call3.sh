# Session 9 call 3: the merged tree (swa17b, adapter18c, move20's test) on CUDA:
# ctest, same-run adapter A/B against 372a41e (.gpu/base), the SWA radix part on CUDA with
# and without the deferred map zero, move rows, sanitizers, Python on torch CUDA.
set -uo pipefail
b=build-gpu
T0=$SECONDS
( cmake -S .gpu/base -B /tmp/bb -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_EXAMPLES=OFF \
    -DKVC_BUILD_STATIC=OFF -DKVC_INSTALL=OFF -DKVC_BUILD_PYTHON_EXT=ON -DPython3_EXECUTABLE=$(command -v python3) >/tmp/bb.log 2>&1 &&
  cmake --build /tmp/bb -j 6 >>/tmp/bb.log 2>&1 || echo "base build failed" ) &
echo "=== ctest (CUDA + host)"; timeout 300 ctest --test-dir $b --output-on-failure -j 4 > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|\(Failed\)|\*\*\*" $OUT/ctest.log | head
echo "=== staged payloads"; KVC_INLINE_MAX_WORDS=0 timeout 120 ctest --test-dir $b -R "alloc|flow|swa|hybrid|session|decode|radix|kv_move" -j 4 2>&1 | grep -E "tests passed|\*\*\*Failed|\(Failed\)"
KVC_BACKEND=cuda BUILD_DIR=$b timeout 60 bash scripts/test_digest.sh 2>&1 | tail -1
echo "   [$(( SECONDS - T0 )) s]"
wait
an() { KVCACHE_LIB=$PWD/$b/libkvcache.so timeout 150 python3 bench/python/bench_sglang_adapter.py --backend cuda --rounds 5 --csv $OUT/adapter-new-$1.csv > /tmp/an.txt 2>&1; echo "rc=$?"; grep -E "^(decode|extend|release|match)" /tmp/an.txt | head -20 | cut -c1-100; }
ab() { ( cd .gpu/base && KVCACHE_LIB=/tmp/bb/libkvcache.so timeout 150 python3 bench/python/bench_sglang_adapter.py --backend cuda --rounds 5 --csv $OUT/adapter-base-$1.csv > /tmp/ab.txt 2>&1; echo "rc=$?"; grep -E "^(decode|extend|release|match)" /tmp/ab.txt | head -20 | cut -c1-100 ); }
echo "=== adapter BASE round 1"; ab 1
echo "=== adapter NEW round 1"; an 1
echo "=== adapter NEW round 2"; an 2
echo "=== adapter BASE round 2"; ab 2
echo "   [$(( SECONDS - T0 )) s]"
echo "=== SWA radix part on CUDA: deferred zero on / off in turns"
for r in 1 2 3 4; do
  if [ $((r % 2)) = 1 ]; then o="on off"; else o="off on"; fi
  for m in $o; do d=1; [ $m = off ] && d=0
    KVB_SWA_DEFER=$d KVB_BACKEND=cuda KVB_ONLY=swa timeout 60 $b/bench/kvc_bench_radix --csv $OUT/swa-cuda-$m-$r.csv > $OUT/swa-cuda-$m-$r.txt 2>&1; echo "$m $r rc=$?"
  done
done
grep -hE "evict \(frees included\)|^ratio" $OUT/swa-cuda-on-1.txt $OUT/swa-cuda-off-1.txt | cut -c1-150
echo "   [$(( SECONDS - T0 )) s]"
echo "=== move rows (kvc_bench_kv --move-only), 3 runs"
for r in 1 2 3; do $b/bench/kvc_bench_kv --move-only 2>&1 | grep -E "^move +(1024|8192)" | sed "s/^/new $r  /"; done
for n in test_swa_allocator test_swa_radix test_flow_hybrid test_kv_move test_decode_channel test_radix_flow test_session test_flow; do
  t=$(find $b/tests -type f -name $n -print -quit); [ -n "$t" ] || { echo "no $n"; continue; }
  KVT_STEPS=300 timeout 120 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $t cuda > /tmp/san-$n.log 2>&1 && echo "memcheck clean: $n" || { echo "memcheck FAILED: $n"; tail -8 /tmp/san-$n.log; }; done
t=$(find $b/tests -type f -name test_kv_move -print -quit); timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 $t cuda > /tmp/rc.log 2>&1 && echo "racecheck clean: test_kv_move" || { echo "racecheck FAILED"; tail -5 /tmp/rc.log; }
echo "   [$(( SECONDS - T0 )) s]"
export PYTHONUNBUFFERED=1
KVCACHE_LIB=$PWD/$b/libkvcache.so timeout 150 python3 -m pytest -q -rs -p no:cacheprovider python/tests 2>&1 | grep -E "passed|failed|FAILED|Error" | tail -6
KVCACHE_LIB=$PWD/$b/libkvcache.so KVCACHE_NO_FAST=1 timeout 100 python3 -m pytest -q -p no:cacheprovider python/tests 2>&1 | tail -1
echo "   [$(( SECONDS - T0 )) s]"
