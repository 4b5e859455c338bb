# Session 8 call 4 (final tree): CUDA tests, sanitizers, Python on CUDA, and the move's
# launcher split (fused store-and-load only for n <= 8 chunks) against d21068c in turns.
set -uo pipefail
b=build-gpu
T0=$SECONDS
( cmake -S .gpu/mid -B /tmp/bm -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_EXAMPLES=OFF \
    -DKVC_BUILD_STATIC=OFF -DKVC_INSTALL=OFF >/tmp/bm.log 2>&1 && cmake --build /tmp/bm -j 6 --target kvcache kvc_bench_kv >>/tmp/bm.log 2>&1 || echo "mid build failed" ) &
echo "=== ctest (CUDA + host)"; timeout 300 ctest --test-dir $b --output-on-failure -j 4 > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|\(Failed\)|\*\*\*" $OUT/ctest.log | head
echo "=== staged payloads"; KVC_INLINE_MAX_WORDS=0 timeout 120 ctest --test-dir $b -R "alloc|flow|pool|swa|hybrid|session|decode|ops|radix|mamba" -j 4 2>&1 | grep -E "tests passed|\*\*\*Failed|\(Failed\)"
KVC_BACKEND=cuda BUILD_DIR=$b timeout 60 bash scripts/test_digest.sh 2>&1 | tail -1
for n in test_ops test_kv_move test_allocator test_decode_channel test_mamba_radix test_swa_radix test_radix_flow test_session; do
  t=$(find $b/tests -type f -name $n -print -quit); [ -n "$t" ] || { echo "no $n"; continue; }
  KVT_STEPS=300 timeout 90 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $t cuda > /tmp/san-$n.log 2>&1 && echo "memcheck clean: $n" || { echo "memcheck FAILED: $n"; tail -8 /tmp/san-$n.log; }; done
t=$(find $b/tests -type f -name test_kv_move -print -quit); timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 $t cuda > /tmp/rc.log 2>&1 && echo "racecheck clean: test_kv_move" || { echo "racecheck FAILED"; tail -5 /tmp/rc.log; }
echo "   [$(( SECONDS - T0 )) s]"
export PYTHONUNBUFFERED=1
KVCACHE_LIB=$PWD/$b/libkvcache.so timeout 150 python3 -m pytest -q -rs -p no:cacheprovider python/tests 2>&1 | grep -E "passed|failed|FAILED|Error" | tail -4
for m in --radix --swa --hybrid; do echo "=== serve $m (CUDA)"; timeout 60 $b/examples/kvc_example_serve --requests 300 --check $m 2>&1 | tail -1; done
echo "   [$(( SECONDS - T0 )) s]"
wait
echo "=== move: mid (d21068c) and the tree in turns, 5 rounds"
for r in 1 2 3 4 5; do
  KVC_CACHE_DIR=/tmp/kvc-mid /tmp/bm/bench/kvc_bench_kv --move-only 2>&1 | grep -E "^move" | sed "s/^/mid $r  /"
  $b/bench/kvc_bench_kv --move-only 2>&1 | grep -E "^move" | sed "s/^/new $r  /"
done
echo "   [$(( SECONDS - T0 )) s]"
