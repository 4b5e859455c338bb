# Session 7: verification of the merged tree (issues 15, 17, 18, 20) and issue 18's adapter
# figures, before (.gpu/base = 8b18ae3, its own library and Python) / after, alternated.
set -uo pipefail
b=build-gpu
T0=$SECONDS
( cmake -S .gpu/base -B /tmp/bb -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_BENCH=OFF -DKVC_BUILD_EXAMPLES=OFF \
    -DKVC_BUILD_STATIC=OFF -DKVC_INSTALL=OFF -DKVC_BUILD_PYTHON_EXT=ON -DPython3_EXECUTABLE=$(command -v python3) >/tmp/bb.log 2>&1 &&
  cmake --build /tmp/bb -j 6 >>/tmp/bb.log 2>&1 || echo "base build failed" ) &
echo "=== ctest (CUDA + host)"; timeout 300 ctest --test-dir $b --output-on-failure -j 4 > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|\(Failed\)|\*\*\*" $OUT/ctest.log | head
echo "=== staged payloads"; KVC_INLINE_MAX_WORDS=0 timeout 120 ctest --test-dir $b -R "alloc|flow|pool|swa|hybrid|session|decode|ops|radix" -j 4 2>&1 | grep -E "tests passed|\*\*\*Failed|\(Failed\)"
KVC_BACKEND=cuda BUILD_DIR=$b timeout 60 bash scripts/test_digest.sh 2>&1 | tail -1
for n in test_ops test_allocator test_decode_channel test_radix_flow test_swa_radix test_swa_radix_kinds test_mamba_radix test_flow_hybrid test_swa_allocator test_session; do
  t=$(find $b/tests -type f -name $n -print -quit); [ -n "$t" ] || { echo "no $n"; continue; }
  KVT_STEPS=300 timeout 90 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $t cuda > /tmp/san-$n.log 2>&1 && echo "memcheck clean: $n" || { echo "memcheck FAILED: $n"; tail -8 /tmp/san-$n.log; }; done
echo "   [$(( SECONDS - T0 )) s]"
export KVCACHE_LIB=$PWD/$b/libkvcache.so PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -q -rs -p no:cacheprovider python/tests 2>&1 | tail -3
KVCACHE_NO_FAST=1 timeout 150 python3 -m pytest -q -p no:cacheprovider python/tests 2>&1 | tail -1
for m in --radix --swa --hybrid; do echo "=== serve $m (CUDA)"; timeout 60 $b/examples/kvc_example_serve --requests 300 --check $m 2>&1 | tail -2; done
echo "   [$(( SECONDS - T0 )) s]"
wait; cat /tmp/bb.log | grep -E "rror" | head -5
for r in 1 2; do
  echo "=== adapter NEW round $r"; KVCACHE_LIB=$PWD/$b/libkvcache.so timeout 120 python3 bench/python/bench_sglang_adapter.py --backend cuda --rounds 5 --csv $OUT/adapter-new-$r.csv > /tmp/an.txt 2>&1; echo "rc=$?"; tail -14 /tmp/an.txt | cut -c1-150
  echo "=== adapter BASE round $r"; ( cd .gpu/base && KVCACHE_LIB=/tmp/bb/libkvcache.so timeout 120 python3 bench/python/bench_sglang_adapter.py --backend cuda --rounds 5 > /tmp/ab.txt 2>&1; echo "rc=$?"; tail -12 /tmp/ab.txt | cut -c1-150 )
done
echo "   [$(( SECONDS - T0 )) s]"
