# Session 11 call 1: the staged payload read in place (KVC_STAGING_MAPPED) on CUDA against
# 9914795 (.gpu/base): the host's AVX-512 flags, tests (plain, staged, staged+copy),
# digests, the diag of staged/inline launches, the allocation path in one process, and
# memcheck on the suites whose launches now read pinned memory.
set -uo pipefail
b=build-gpu
T0=$SECONDS
echo "=== host"; grep -m1 "model name" /proc/cpuinfo; echo "flags: $(grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
( cmake -S .gpu/base -B /tmp/bb -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_EXAMPLES=OFF \
    -DKVC_BUILD_STATIC=OFF -DKVC_INSTALL=OFF >/tmp/bb.log 2>&1 && cmake --build /tmp/bb -j 6 --target kvcache >>/tmp/bb.log 2>&1 || echo "base build failed" ) &
echo "=== ctest (CUDA + host)"; timeout 300 ctest --test-dir $b --output-on-failure -j 4 > /tmp/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|\(Failed\)|\*\*\*" /tmp/ctest.log | head
echo "=== staged payloads, read in place"; KVC_INLINE_MAX_WORDS=0 timeout 120 ctest --test-dir $b -R "alloc|flow|swa|hybrid|session|decode|radix|ops|req" -j 4 2>&1 | grep -E "tests passed|\*\*\*Failed|\(Failed\)"
echo "=== staged payloads, copied"; KVC_STAGING_MAPPED=0 KVC_INLINE_MAX_WORDS=0 timeout 120 ctest --test-dir $b -R "alloc|flow|swa|hybrid|session|decode|radix|ops|req" -j 4 2>&1 | grep -E "tests passed|\*\*\*Failed|\(Failed\)"
KVC_BACKEND=cuda BUILD_DIR=$b timeout 60 bash scripts/test_digest.sh 2>&1 | tail -1
KVC_INLINE_MAX_WORDS=0 KVC_BACKEND=cuda BUILD_DIR=$b timeout 60 bash scripts/test_digest.sh 2>&1 | tail -1
echo "   [$(( SECONDS - T0 )) s]"
cc -O2 -Iinclude bench/diag/staged_payload.c -L$b -lkvcache -Wl,-rpath,$PWD/$b -o /tmp/sp
echo "=== staged_payload diag, round 1"; timeout 120 /tmp/sp 1000
echo "   [$(( SECONDS - T0 )) s]"
wait
cp $b/libkvcache.so.0.1.0 /tmp/newc.so
AB=$b/bench/kvc_bench_ab
echo "=== A = base, B = new";   $AB /tmp/bb/libkvcache.so $b/libkvcache.so --reps 3000 2>&1 | tail -n +4
echo "=== A = new, B = base";   $AB $b/libkvcache.so /tmp/bb/libkvcache.so --reps 3000 2>&1 | tail -n +4
echo "=== control: new / copy"; $AB $b/libkvcache.so /tmp/newc.so --reps 3000 2>&1 | tail -n +4
echo "   [$(( SECONDS - T0 )) s]"
echo "=== staged_payload diag, round 2"; timeout 120 /tmp/sp 1000
echo "   [$(( SECONDS - T0 )) s]"
for n in test_allocator test_flow test_radix_flow test_decode_channel test_swa_allocator; do
  t=$(find $b/tests -type f -name $n -print -quit); [ -n "$t" ] || { echo "no $n"; continue; }
  KVC_INLINE_MAX_WORDS=0 KVT_STEPS=300 timeout 100 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $t cuda > /tmp/san-$n.log 2>&1 && echo "memcheck clean (staged, in place): $n" || { echo "memcheck FAILED: $n"; tail -8 /tmp/san-$n.log; }; done
echo "   [$(( SECONDS - T0 )) s]"
