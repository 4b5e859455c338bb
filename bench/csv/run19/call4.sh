# Session 12 call 4: the final tree (bind18 merged; the allocator's bound-cache field moved
# to the end of struct kvc_allocator) against 7fb479a (.gpu/pre: radix15e's layout, the
# field among the hot ones) and 8092a3c (.gpu/base): ctest, memcheck, the allocation path
# in one process in both orders, the adapter, pytest with torch on CUDA.
set -uo pipefail
b=build-gpu
T0=$SECONDS
echo "=== host"; grep -m1 "model name" /proc/cpuinfo; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for t in base pre; do ( cmake -S .gpu/$t -B /tmp/b$t -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_EXAMPLES=OFF \
    -DKVC_BUILD_STATIC=OFF -DKVC_INSTALL=OFF >/tmp/b$t.log 2>&1 && cmake --build /tmp/b$t -j 4 --target kvcache >>/tmp/b$t.log 2>&1 || echo "$t build failed" ) & done
echo "=== ctest (CUDA + host)"; timeout 300 ctest --test-dir $b --output-on-failure -j 6 > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|\(Failed\)|\*\*\*" $OUT/ctest.log | head
KVC_INLINE_MAX_WORDS=0 timeout 120 ctest --test-dir $b -R "alloc|flow|radix|session" -j 6 2>&1 | grep -E "tests passed|\*\*\*Failed|\(Failed\)"
KVC_BACKEND=cuda BUILD_DIR=$b timeout 60 bash scripts/test_digest.sh 2>&1 | tail -1
for n in test_allocator test_radix_flow test_flow test_session test_decode_channel; do
  t=$(find $b/tests -type f -name $n -print -quit); [ -n "$t" ] || { echo "no $n"; continue; }
  KVT_STEPS=300 timeout 100 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $t cuda > /tmp/san-$n.log 2>&1 && echo "memcheck clean: $n" || { echo "memcheck FAILED: $n"; tail -4 /tmp/san-$n.log; }; done
echo "   [$(( SECONDS - T0 )) s]"
wait
cp $b/libkvcache.so.0.1.0 /tmp/newc.so
AB=$b/bench/kvc_bench_ab
echo "=== A = pre, B = new";    $AB /tmp/bpre/libkvcache.so $b/libkvcache.so --reps 3000 2>&1 | tail -n +4
echo "=== A = new, B = pre";    $AB $b/libkvcache.so /tmp/bpre/libkvcache.so --reps 3000 2>&1 | tail -n +4
echo "=== A = base, B = new";   $AB /tmp/bbase/libkvcache.so $b/libkvcache.so --reps 3000 2>&1 | tail -n +4
echo "=== A = new, B = base";   $AB $b/libkvcache.so /tmp/bbase/libkvcache.so --reps 3000 2>&1 | tail -n +4
echo "=== control: new / copy"; $AB $b/libkvcache.so /tmp/newc.so --reps 3000 2>&1 | tail -n +4
echo "   [$(( SECONDS - T0 )) s]"
export PYTHONUNBUFFERED=1 KVCACHE_LIB=$PWD/$b/libkvcache.so
for r in 1 2; do timeout 120 python3 bench/python/bench_sglang_adapter.py --backend cuda --rounds 8 2>&1 | sed -n '/=== issue 18/,$p' | sed "s/^/pass$r  /"; done
timeout 150 python3 -m pytest -q -rs -p no:cacheprovider python/tests 2>&1 | grep -E "passed|failed|FAILED|Error" | tail -6
KVCACHE_NO_FAST=1 timeout 100 python3 -m pytest -q -p no:cacheprovider python/tests 2>&1 | tail -1
echo "   [$(( SECONDS - T0 )) s]"
