# Session 14 call 1: alloc_decode carrying the SWA allocator's queued map zeroes (main
# after 0f6b26a) on the H200 against 99a06e5 (.gpu/base, the session's start, built with
# this call's bench_swa.c so both sides time the same steps): ctest, staged payloads,
# digests, memcheck / racecheck on the suites the change reaches, kvc_bench_swa (the
# decode step after a queued free) base / new in turns, kvc_bench_ab both orders.
set -uo pipefail
b=build-gpu
T0=$SECONDS
echo "=== host"; grep -m1 "model name" /proc/cpuinfo; nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cp bench/bench_swa.c .gpu/base/bench/bench_swa.c
( cmake -S .gpu/base -B /tmp/bb -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_EXAMPLES=OFF \
    -DKVC_BUILD_STATIC=OFF -DKVC_INSTALL=OFF >/tmp/bb.log 2>&1 && cmake --build /tmp/bb -j 6 >>/tmp/bb.log 2>&1 || { echo "base build failed"; tail -20 /tmp/bb.log; } ) &
echo "=== ctest"; timeout 300 ctest --test-dir $b --output-on-failure -j 6 > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|\(Failed\)|\*\*\*Failed" $OUT/ctest.log | head
echo "=== staged payloads"; KVC_INLINE_MAX_WORDS=0 timeout 120 ctest --test-dir $b -R "alloc|flow|swa|hybrid|session|decode|radix|ops|req|free" -j 6 2>&1 | grep -E "tests passed|\*\*\*Failed|\(Failed\)"
KVC_BACKEND=cuda BUILD_DIR=$b timeout 60 bash scripts/test_digest.sh 2>&1 | tail -1
echo "   [$(( SECONDS - T0 )) s]"
for n in test_swa_allocator test_swa_radix test_flow_hybrid test_swa_model test_decode_channel test_ops; do
  t=$(find $b/tests -type f -name $n -print -quit); [ -n "$t" ] || { echo "no $n"; continue; }
  KVT_STEPS=300 timeout 100 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $t cuda > /tmp/san-$n.log 2>&1 && echo "memcheck clean: $n" || { echo "memcheck FAILED: $n"; tail -8 /tmp/san-$n.log; }; done
for n in test_swa_allocator test_swa_radix; do
  t=$(find $b/tests -type f -name $n -print -quit)
  timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 $t cuda > /tmp/race-$n.log 2>&1 && echo "racecheck clean: $n" || { echo "racecheck FAILED: $n"; tail -8 /tmp/race-$n.log; }; done
echo "   [$(( SECONDS - T0 )) s]"
wait
for r in 1 2 3; do for m in base new new base; do
  bin=$b/bench/kvc_bench_swa; [ $m = base ] && bin=/tmp/bb/bench/kvc_bench_swa
  echo "### round $r $m"; timeout 60 $bin 2>&1 | grep swa_decode
done; done
echo "   [$(( SECONDS - T0 )) s]"
cp $b/libkvcache.so.0.1.0 /tmp/newc.so
AB=$b/bench/kvc_bench_ab
echo "=== A = base, B = new"; $AB /tmp/bb/libkvcache.so $b/libkvcache.so --reps 3000 2>&1 | tail -n +4
echo "=== A = new, B = base"; $AB $b/libkvcache.so /tmp/bb/libkvcache.so --reps 3000 2>&1 | tail -n +4
echo "   [$(( SECONDS - T0 )) s]"
