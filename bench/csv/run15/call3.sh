# Session 8 call 3: the final merged tree (decode20b's two-word decode payload, the
# release_row fix) on CUDA, and same-run A/B: base = 64fc8ff (session 7), mid = d21068c
# (before decode20b), control = a copy of the tree.
set -uo pipefail
b=build-gpu
T0=$SECONDS
( cmake -S .gpu/base -B /tmp/bb -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_EXAMPLES=OFF \
    -DKVC_BUILD_STATIC=OFF -DKVC_INSTALL=OFF -DKVC_BUILD_PYTHON_EXT=ON -DPython3_EXECUTABLE=$(command -v python3) >/tmp/bb.log 2>&1 &&
  cmake --build /tmp/bb -j 5 >>/tmp/bb.log 2>&1 || echo "base build failed"
  cmake -S .gpu/mid -B /tmp/bm -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_EXAMPLES=OFF \
    -DKVC_BUILD_STATIC=OFF -DKVC_INSTALL=OFF >/tmp/bm.log 2>&1 && cmake --build /tmp/bm -j 5 --target kvcache kvc_bench_kv >>/tmp/bm.log 2>&1 || echo "mid build failed" ) &
echo "=== ctest (CUDA + host)"; timeout 300 ctest --test-dir $b --output-on-failure -j 4 > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|\(Failed\)|\*\*\*" $OUT/ctest.log | head
echo "=== staged payloads"; KVC_INLINE_MAX_WORDS=0 timeout 120 ctest --test-dir $b -R "alloc|flow|pool|swa|hybrid|session|decode|ops|radix" -j 4 2>&1 | grep -E "tests passed|\*\*\*Failed|\(Failed\)"
KVC_BACKEND=cuda BUILD_DIR=$b timeout 60 bash scripts/test_digest.sh 2>&1 | tail -1
for n in test_ops test_kv_move test_allocator test_decode_channel test_alloc_model test_flow test_swa_allocator test_flow_hybrid; do
  t=$(find $b/tests -type f -name $n -print -quit); [ -n "$t" ] || { echo "no $n"; continue; }
  KVT_STEPS=300 timeout 90 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $t cuda > /tmp/san-$n.log 2>&1 && echo "memcheck clean: $n" || { echo "memcheck FAILED: $n"; tail -8 /tmp/san-$n.log; }; done
for n in test_ops test_kv_move; do t=$(find $b/tests -type f -name $n -print -quit); timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 $t cuda > /tmp/rc.log 2>&1 && echo "racecheck clean: $n" || { echo "racecheck FAILED: $n"; tail -5 /tmp/rc.log; }; done
echo "   [$(( SECONDS - T0 )) s]"
export PYTHONUNBUFFERED=1
KVCACHE_LIB=$PWD/$b/libkvcache.so timeout 150 python3 -m pytest -q -rs -p no:cacheprovider python/tests 2>&1 | grep -E "passed|failed|FAILED|Error" | tail -4
KVCACHE_LIB=$PWD/$b/libkvcache.so KVCACHE_NO_FAST=1 timeout 150 python3 -m pytest -q -p no:cacheprovider python/tests 2>&1 | tail -1
echo "   [$(( SECONDS - T0 )) s]"
wait
cp /tmp/bb/libkvcache.so /tmp/libbase.so; cp /tmp/bm/libkvcache.so /tmp/libmid.so; cp $b/libkvcache.so /tmp/libnew-copy.so
for pair in "base /tmp/libbase.so" "mid /tmp/libmid.so" "control /tmp/libnew-copy.so"; do set -- $pair
  echo "=== bench_ab: A = $1, B = new"; timeout 150 $b/bench/kvc_bench_ab $2 $PWD/$b/libkvcache.so --reps 3000 | tail -12; done
echo "=== move: mid (d21068c) and new in turns, 5 rounds (kvc_bench_kv --move-only)"
for r in 1 2 3 4 5; do
  KVC_CACHE_DIR=/tmp/kvc-mid /tmp/bm/bench/kvc_bench_kv --move-only 2>&1 | grep -E "^move" | sed "s/^/mid $r  /"
  $b/bench/kvc_bench_kv --move-only 2>&1 | grep -E "^move" | sed "s/^/new $r  /"
done
echo "   [$(( SECONDS - T0 )) s]"
echo "(bench_alloc skipped: bench_ab has the rows)"
echo "   [$(( SECONDS - T0 )) s]"
an() { KVCACHE_LIB=$PWD/$b/libkvcache.so timeout 120 python3 bench/python/bench_sglang_adapter.py --backend cuda --rounds 5 --csv $OUT/adapter-new-$1.csv > /tmp/an.txt 2>&1; echo "rc=$?"; grep -E "^(decode|extend|release|match)" /tmp/an.txt | cut -c1-100; }
ab() { ( cd .gpu/base && KVCACHE_LIB=/tmp/bb/libkvcache.so timeout 120 python3 bench/python/bench_sglang_adapter.py --backend cuda --rounds 5 > /tmp/ab.txt 2>&1; echo "rc=$?"; grep -E "^(decode|extend|release|match)" /tmp/ab.txt | cut -c1-100 ); }
echo "=== adapter BASE round 1"; ab
echo "=== adapter NEW round 1"; an 1
echo "=== adapter NEW round 2"; an 2
echo "=== adapter BASE round 2"; ab
KVCACHE_LIB=$PWD/$b/libkvcache.so timeout 60 python3 bench/python/adapter_match_steps.py --ps 16 --rounds 3 2>&1 | tail -4
echo "   [$(( SECONDS - T0 )) s]"
