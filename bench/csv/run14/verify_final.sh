# Session 7, final tree (after the src/cache dedupe): CUDA ctest, staged payloads, digests,
# memcheck on the radix tests, Python on CUDA.
set -uo pipefail
b=build-gpu
T0=$SECONDS
timeout 300 ctest --test-dir $b --output-on-failure -j 4 > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|\(Failed\)|\*\*\*" $OUT/ctest.log | head
KVC_INLINE_MAX_WORDS=0 timeout 120 ctest --test-dir $b -R "alloc|flow|pool|swa|hybrid|session|decode|ops|radix" -j 4 2>&1 | grep -E "tests passed|\*\*\*Failed|\(Failed\)"
KVC_BACKEND=cuda BUILD_DIR=$b timeout 60 bash scripts/test_digest.sh 2>&1 | tail -1
for n in test_radix_flow test_mamba_radix test_swa_radix test_session test_allocator; do
  t=$(find $b/tests -type f -name $n -print -quit); [ -n "$t" ] || { echo "no $n"; continue; }
  KVT_STEPS=300 timeout 90 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $t cuda > /tmp/san-$n.log 2>&1 && echo "memcheck clean: $n" || { echo "memcheck FAILED: $n"; tail -8 /tmp/san-$n.log; }; done
export KVCACHE_LIB=$PWD/$b/libkvcache.so PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -q -p no:cacheprovider python/tests 2>&1 | tail -1
git log --oneline -1 2>/dev/null || true
echo "   [$(( SECONDS - T0 )) s]"
