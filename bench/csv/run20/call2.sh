# Session 13 call 2: kvc_p_plan_extend back to 80 bytes (the zero region's count moves
# into the payload, tokens per block becomes a constant), against 72a1b2c (.gpu/base) and
# the 88-byte header of call 1 (.gpu/v88), in one process (kvc_bench_ab), both orders;
# the CUDA suites behind the changed kernel and memcheck; pytest on CUDA with tracebacks
# for the failures call 1 found.
set -uo pipefail
b=build-gpu
T0=$SECONDS
echo "=== host"; grep -m1 "model name" /proc/cpuinfo; nvidia-smi --query-gpu=name --format=csv,noheader
for v in base v88; do
  ( cmake -S .gpu/$v -B /tmp/b-$v -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_EXAMPLES=OFF \
      -DKVC_BUILD_STATIC=OFF -DKVC_INSTALL=OFF >/tmp/b-$v.log 2>&1 && cmake --build /tmp/b-$v -j 6 >>/tmp/b-$v.log 2>&1 || echo "$v build failed" ) &
done
echo "=== ctest"; timeout 300 ctest --test-dir $b --output-on-failure -j 6 > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|\(Failed\)|\*\*\*Failed" $OUT/ctest.log | head
echo "=== staged payloads"; KVC_INLINE_MAX_WORDS=0 timeout 120 ctest --test-dir $b -R "alloc|flow|swa|hybrid|radix" -j 6 2>&1 | grep -E "tests passed|\*\*\*Failed|\(Failed\)"
KVC_BACKEND=cuda BUILD_DIR=$b timeout 60 bash scripts/test_digest.sh 2>&1 | tail -1
for n in test_swa_allocator test_swa_radix test_flow_hybrid test_allocator test_flow; do
  t=$(find $b/tests -type f -name $n -print -quit)
  KVT_STEPS=300 timeout 100 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $t cuda > /tmp/san-$n.log 2>&1 && echo "memcheck clean: $n" || { echo "memcheck FAILED: $n"; tail -8 /tmp/san-$n.log; }; done
t=$(find $b/tests -type f -name test_swa_allocator -print -quit)
timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 $t cuda > /tmp/race.log 2>&1 && echo "racecheck clean: test_swa_allocator" || { echo "racecheck FAILED"; tail -8 /tmp/race.log; }
echo "   [$(( SECONDS - T0 )) s]"
export PYTHONUNBUFFERED=1
KVCACHE_LIB=$PWD/$b/libkvcache.so timeout 150 python3 -m pytest -q -rf --tb=short -p no:cacheprovider python/tests > $OUT/pytest.txt 2>&1; tail -3 $OUT/pytest.txt; grep -E "^FAILED" $OUT/pytest.txt
echo "   [$(( SECONDS - T0 )) s]"
wait
cp $b/libkvcache.so.0.1.0 /tmp/newc.so
AB=$b/bench/kvc_bench_ab
for pair in "/tmp/b-base/libkvcache.so $b/libkvcache.so" "$b/libkvcache.so /tmp/b-base/libkvcache.so" \
            "/tmp/b-v88/libkvcache.so $b/libkvcache.so" "$b/libkvcache.so /tmp/b-v88/libkvcache.so" \
            "$b/libkvcache.so /tmp/newc.so"; do
  echo "=== A B = $pair"; $AB $pair --reps 3000 2>&1 | tail -n +4 | head -4
done
echo "   [$(( SECONDS - T0 )) s]"
