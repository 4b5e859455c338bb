# Session 8 call 2: the merged tree (decode20, adapter18, hybrid17, radix15 + get_last_loc)
# verified on CUDA, and same-run A/B against 64fc8ff (.gpu/base: session 7's final tree).
set -uo pipefail
b=build-gpu
T0=$SECONDS
( cmake -S .gpu/base -B /tmp/bb -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_EXAMPLES=OFF \
    -DKVC_BUILD_STATIC=OFF -DKVC_INSTALL=OFF -DKVC_BUILD_PYTHON_EXT=ON -DPython3_EXECUTABLE=$(command -v python3) >/tmp/bb.log 2>&1 &&
  cmake --build /tmp/bb -j 6 >>/tmp/bb.log 2>&1 || echo "base build failed" ) &
git log --oneline -1 2>/dev/null || true
echo "=== ctest (CUDA + host)"; timeout 300 ctest --test-dir $b --output-on-failure -j 4 > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|\(Failed\)|\*\*\*" $OUT/ctest.log | head
echo "=== staged payloads"; KVC_INLINE_MAX_WORDS=0 timeout 120 ctest --test-dir $b -R "alloc|flow|pool|swa|hybrid|session|decode|ops|radix" -j 4 2>&1 | grep -E "tests passed|\*\*\*Failed|\(Failed\)"
KVC_BACKEND=cuda BUILD_DIR=$b timeout 60 bash scripts/test_digest.sh 2>&1 | tail -1
for n in test_ops test_allocator test_decode_channel test_swa_allocator test_flow_hybrid test_swa_radix test_radix_flow test_session test_flow; do
  t=$(find $b/tests -type f -name $n -print -quit); [ -n "$t" ] || { echo "no $n"; continue; }
  KVT_STEPS=300 timeout 90 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $t cuda > /tmp/san-$n.log 2>&1 && echo "memcheck clean: $n" || { echo "memcheck FAILED: $n"; tail -8 /tmp/san-$n.log; }; done
echo "   [$(( SECONDS - T0 )) s]"
export PYTHONUNBUFFERED=1
KVCACHE_LIB=$PWD/$b/libkvcache.so timeout 150 python3 -m pytest -q -rs -p no:cacheprovider python/tests 2>&1 | tail -2
KVCACHE_LIB=$PWD/$b/libkvcache.so KVCACHE_NO_FAST=1 timeout 150 python3 -m pytest -q -p no:cacheprovider python/tests 2>&1 | tail -1
for m in --radix --swa --hybrid; do echo "=== serve $m (CUDA)"; timeout 60 $b/examples/kvc_example_serve --requests 300 --check $m 2>&1 | tail -2; done
echo "   [$(( SECONDS - T0 )) s]"
wait; grep -E "rror" /tmp/bb.log | head -5
cp /tmp/bb/libkvcache.so /tmp/libbase.so; cp $b/libkvcache.so /tmp/libnew-copy.so
for pair in "base /tmp/libbase.so" "control /tmp/libnew-copy.so"; do set -- $pair
  echo "=== bench_ab: A = $1, B = new"; timeout 150 $b/bench/kvc_bench_ab $2 $PWD/$b/libkvcache.so --reps 3000 | tail -12; done
echo "=== bench_alloc (new): decode rows"; timeout 120 $b/bench/kvc_bench_alloc --quick | grep -E "alloc_decode .*(256|1024) |host half \(graph path\) .*(256|1024) |alloc_extend|free \(" | head -20
echo "   [$(( SECONDS - T0 )) s]"
for r in 1 2; do
  echo "=== adapter NEW round $r"; KVCACHE_LIB=$PWD/$b/libkvcache.so timeout 120 python3 bench/python/bench_sglang_adapter.py --backend cuda --rounds 5 --csv $OUT/adapter-new-$r.csv > /tmp/an.txt 2>&1; echo "rc=$?"; tail -14 /tmp/an.txt | cut -c1-160
  echo "=== adapter BASE round $r"; ( cd .gpu/base && KVCACHE_LIB=/tmp/bb/libkvcache.so timeout 120 python3 bench/python/bench_sglang_adapter.py --backend cuda --rounds 5 > /tmp/ab.txt 2>&1; echo "rc=$?"; tail -12 /tmp/ab.txt | cut -c1-160 )
done
KVCACHE_LIB=$PWD/$b/libkvcache.so timeout 60 python3 bench/python/adapter_match_steps.py --ps 16 --rounds 3 2>&1 | tail -6
echo "   [$(( SECONDS - T0 )) s]"
echo "=== ncu: the move at N = 1024 (first disjoint-set launch at that size) and the plain copy"
if command -v ncu >/dev/null; then
  timeout 150 ncu --kernel-name kvc_kv_move --launch-skip 706 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    $b/bench/kvc_bench_kv --move-only > $OUT/ncu_move1024.txt 2>&1; echo "ncu rc=$?"; grep -E "Block Size|Grid Size|DRAM Throughput|Memory Throughput|Duration|L2 Hit|Achieved Occupancy|Mem Busy|Max Bandwidth" $OUT/ncu_move1024.txt | head -20
fi
echo "   [$(( SECONDS - T0 )) s]"
