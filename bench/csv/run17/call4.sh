# Session 10 call 4: the merged tree (group free, python scope bindings, free15, swa17c)
# on CUDA against f4e6232 (.gpu/base): tests, staged payloads, digests, sanitizers, the
# allocation path in one process, the SWA radix part on CUDA, the binding and adapter
# benches, Python with torch on CUDA. Everything goes to one log (the device tool returns
# a limited number of files).
set -uo pipefail
b=build-gpu
T0=$SECONDS
( cmake -S .gpu/base -B /tmp/bb -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_EXAMPLES=OFF \
    -DKVC_BUILD_STATIC=OFF -DKVC_INSTALL=OFF >/tmp/bb.log 2>&1 && cmake --build /tmp/bb -j 6 >>/tmp/bb.log 2>&1 || echo "base build failed" ) &
echo "=== ctest (CUDA + host)"; timeout 300 ctest --test-dir $b --output-on-failure -j 4 > /tmp/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|\(Failed\)|\*\*\*" /tmp/ctest.log | head
echo "=== staged payloads"; KVC_INLINE_MAX_WORDS=0 timeout 120 ctest --test-dir $b -R "alloc|flow|swa|hybrid|session|decode|radix" -j 4 2>&1 | grep -E "tests passed|\*\*\*Failed|\(Failed\)"
KVC_BACKEND=cuda BUILD_DIR=$b timeout 60 bash scripts/test_digest.sh 2>&1 | tail -1
echo "   [$(( SECONDS - T0 )) s]"
wait
cp $b/libkvcache.so.0.1.0 /tmp/newc.so
AB=$b/bench/kvc_bench_ab
echo "=== A = base, B = new";   $AB /tmp/bb/libkvcache.so $b/libkvcache.so --reps 3000 2>&1 | tail -n +4
echo "=== A = new, B = base";   $AB $b/libkvcache.so /tmp/bb/libkvcache.so --reps 3000 2>&1 | tail -n +4
echo "=== control: new / copy"; $AB $b/libkvcache.so /tmp/newc.so --reps 3000 2>&1 | tail -n +4
echo "   [$(( SECONDS - T0 )) s]"
echo "=== SWA radix part on CUDA, base / new / new / base"
for r in base new new base; do
  bin=$b/bench/kvc_bench_radix; [ $r = base ] && bin=/tmp/bb/bench/kvc_bench_radix
  KVB_BACKEND=cuda KVB_ONLY=swa timeout 90 $bin > /tmp/swa-$r.txt 2>&1; echo "$r rc=$?"
  grep -E "evict \(frees included\)|^ratio" /tmp/swa-$r.txt | cut -c1-160 | sed "s/^/$r  /"
done
echo "   [$(( SECONDS - T0 )) s]"
for n in test_allocator test_flow test_swa_allocator test_swa_radix test_radix_flow test_flow_hybrid test_session test_decode_channel; do
  t=$(find $b/tests -type f -name $n -print -quit); [ -n "$t" ] || { echo "no $n"; continue; }
  KVT_STEPS=300 timeout 120 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $t cuda > /tmp/san-$n.log 2>&1 && echo "memcheck clean: $n" || { echo "memcheck FAILED: $n"; tail -8 /tmp/san-$n.log; }; done
echo "   [$(( SECONDS - T0 )) s]"
export PYTHONUNBUFFERED=1
echo "=== binding bench (bench_python.py, CUDA)"
KVCACHE_LIB=$PWD/$b/libkvcache.so KVCB_HELPER=$PWD/$b/bench/libkvc_pybench.so timeout 120 python3 bench/bench_python.py --backend cuda --rounds 5 --csv /tmp/bp.csv 2>&1 | tail -25
echo "=== adapter bench (CUDA)"
KVCACHE_LIB=$PWD/$b/libkvcache.so timeout 120 python3 bench/python/bench_sglang_adapter.py --backend cuda --rounds 12 --csv /tmp/ad.csv 2>&1 | sed -n '/=== issue 18/,$p'
echo "   [$(( SECONDS - T0 )) s]"
KVCACHE_LIB=$PWD/$b/libkvcache.so timeout 150 python3 -m pytest -q -rs -p no:cacheprovider python/tests 2>&1 | grep -E "passed|failed|FAILED|Error" | tail -6
KVCACHE_LIB=$PWD/$b/libkvcache.so KVCACHE_NO_FAST=1 timeout 100 python3 -m pytest -q -p no:cacheprovider python/tests 2>&1 | tail -1
echo "   [$(( SECONDS - T0 )) s]"
