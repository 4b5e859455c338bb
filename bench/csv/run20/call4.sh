# Session 13 call 4: call 3 plus alloc_extend at page 1 launching the SWA zero queue alone
# first (no carry at page 1): ctest, memcheck, pytest on CUDA, the SWA part on CUDA, and
# the allocation path against 72a1b2c (.gpu/base) in one process.
set -uo pipefail
b=build-gpu
T0=$SECONDS
( cmake -S .gpu/base -B /tmp/b-base -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_EXAMPLES=OFF \
    -DKVC_BUILD_STATIC=OFF -DKVC_INSTALL=OFF >/tmp/b-base.log 2>&1 && cmake --build /tmp/b-base -j 6 >>/tmp/b-base.log 2>&1 || echo "base build failed" ) &
echo "=== ctest"; timeout 300 ctest --test-dir $b --output-on-failure -j 6 > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|\(Failed\)|\*\*\*Failed" $OUT/ctest.log | head
KVC_BACKEND=cuda BUILD_DIR=$b timeout 60 bash scripts/test_digest.sh 2>&1 | tail -1
t=$(find $b/tests -type f -name test_mamba_radix -print -quit)
KVT_STEPS=300 timeout 100 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $t cuda > /tmp/san.log 2>&1 && echo "memcheck clean: test_mamba_radix" || { echo "memcheck FAILED"; tail -8 /tmp/san.log; }
echo "   [$(( SECONDS - T0 )) s]"
export PYTHONUNBUFFERED=1
KVCACHE_LIB=$PWD/$b/libkvcache.so timeout 150 python3 -m pytest -q -rf --tb=short -p no:cacheprovider python/tests > $OUT/pytest.txt 2>&1; tail -1 $OUT/pytest.txt; grep -E "^FAILED" $OUT/pytest.txt
KVCACHE_LIB=$PWD/$b/libkvcache.so KVCACHE_NO_FAST=1 timeout 100 python3 -m pytest -q -rf -p no:cacheprovider python/tests 2>&1 | tail -1
echo "   [$(( SECONDS - T0 )) s]"
mkdir -p $OUT/swa; i=0
for m in lazy eager eager lazy; do
  i=$((i+1)); e=0; [ $m = eager ] && e=1
  KVB_BACKEND=cuda KVB_SWA_SIDE=full KVB_ONLY=swa KVB_SWA_EAGER=$e timeout 60 $b/bench/kvc_bench_radix > $OUT/swa/cuda-r$i-$m.txt 2>&1
done
for f in $OUT/swa/*; do echo "### $(basename $f)"; cat $f; done > $OUT/swa_all.txt; rm -rf $OUT/swa
echo "   [$(( SECONDS - T0 )) s]"
wait
AB=$b/bench/kvc_bench_ab
echo "=== A = base, B = new"; $AB /tmp/b-base/libkvcache.so $b/libkvcache.so --reps 3000 2>&1 | tail -n +4
echo "=== A = new, B = base"; $AB $b/libkvcache.so /tmp/b-base/libkvcache.so --reps 3000 2>&1 | tail -n +4
echo "   [$(( SECONDS - T0 )) s]"
