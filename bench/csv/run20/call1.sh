# Session 13 call 1: the merged tree (swamatch17's one-walk SWA match, mamba18y's
# branching length and track-slot hand-over, lazyzero17's carried SWA map zeroes) on the
# H200 against 72a1b2c (.gpu/base, the session's start): tests, staged payloads,
# digests, memcheck and racecheck, the allocation path in one process (kvc_plan_extend's
# parameter block grew 80 -> 88 bytes), the SWA part on the CUDA backend (lazy / eager
# alternated in the same binary, base beside them; the `launch` rows: the floor of one
# launch and the first alloc_extend after a finish), the SWA part on the host backend
# (match ratios, base / new), pytest with torch on CUDA.
set -uo pipefail
b=build-gpu
T0=$SECONDS
echo "=== host"; grep -m1 "model name" /proc/cpuinfo; nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
( cmake -S .gpu/base -B /tmp/bb -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_EXAMPLES=OFF \
    -DKVC_BUILD_STATIC=OFF -DKVC_INSTALL=OFF >/tmp/bb.log 2>&1 && cmake --build /tmp/bb -j 6 >>/tmp/bb.log 2>&1 || echo "base build failed" ) &
echo "=== ctest (CUDA + host, with the KVC_SIMD=0 entries)"; timeout 300 ctest --test-dir $b --output-on-failure -j 6 > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|\(Failed\)|\*\*\*Failed" $OUT/ctest.log | head
echo "=== staged payloads"; KVC_INLINE_MAX_WORDS=0 timeout 120 ctest --test-dir $b -R "alloc|flow|swa|hybrid|session|decode|radix|ops|req|free" -j 6 2>&1 | grep -E "tests passed|\*\*\*Failed|\(Failed\)"
KVC_BACKEND=cuda BUILD_DIR=$b timeout 60 bash scripts/test_digest.sh 2>&1 | tail -1
KVC_SIMD=0 KVC_BACKEND=cuda BUILD_DIR=$b timeout 60 bash scripts/test_digest.sh 2>&1 | tail -1
echo "   [$(( SECONDS - T0 )) s]"
for n in test_swa_allocator test_swa_radix test_flow_hybrid test_mamba_radix test_allocator test_flow test_radix_flow test_decode_channel; do
  t=$(find $b/tests -type f -name $n -print -quit); [ -n "$t" ] || { echo "no $n"; continue; }
  KVT_STEPS=300 timeout 100 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $t cuda > /tmp/san-$n.log 2>&1 && echo "memcheck clean: $n" || { echo "memcheck FAILED: $n"; tail -8 /tmp/san-$n.log; }; done
for n in test_swa_allocator test_swa_radix; do
  t=$(find $b/tests -type f -name $n -print -quit)
  timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 $t cuda > /tmp/race-$n.log 2>&1 && echo "racecheck clean: $n" || { echo "racecheck FAILED: $n"; tail -8 /tmp/race-$n.log; }; done
echo "   [$(( SECONDS - T0 )) s]"
wait
cp $b/libkvcache.so.0.1.0 /tmp/newc.so
AB=$b/bench/kvc_bench_ab
echo "=== A = base, B = new";   $AB /tmp/bb/libkvcache.so $b/libkvcache.so --reps 3000 2>&1 | tail -n +4
echo "=== A = new, B = base";   $AB $b/libkvcache.so /tmp/bb/libkvcache.so --reps 3000 2>&1 | tail -n +4
echo "=== control: new / copy"; $AB $b/libkvcache.so /tmp/newc.so --reps 3000 2>&1 | tail -n +4
echo "   [$(( SECONDS - T0 )) s]"
echo "=== SWA part, CUDA backend, full SWA side: lazy / eager (new binary) / base in turns"
mkdir -p $OUT/swa
i=0
for m in lazy eager base eager lazy base lazy eager base eager lazy base; do
  i=$((i+1)); bin=$b/bench/kvc_bench_radix; e=0
  [ $m = eager ] && e=1; [ $m = base ] && bin=/tmp/bb/bench/kvc_bench_radix
  KVB_BACKEND=cuda KVB_SWA_SIDE=full KVB_ONLY=swa KVB_SWA_EAGER=$e timeout 60 $bin > $OUT/swa/cuda-r$i-$m.txt 2>&1
done
grep -hE "^(ratio|launch)" $OUT/swa/cuda-r1-lazy.txt $OUT/swa/cuda-r2-eager.txt $OUT/swa/cuda-r3-base.txt | head -80
echo "   [$(( SECONDS - T0 )) s]"
echo "=== SWA part, host backend, full SWA side: base / new in turns"
for r in 1 2 3; do for m in base new; do
  bin=$b/bench/kvc_bench_radix; [ $m = base ] && bin=/tmp/bb/bench/kvc_bench_radix
  KVB_SWA_SIDE=full KVB_ONLY=swa timeout 60 $bin > $OUT/swa/host-r$r-$m.txt 2>&1
done; done
grep -h "^ratio" $OUT/swa/host-r*-*.txt | wc -l
echo "   [$(( SECONDS - T0 )) s]"
export PYTHONUNBUFFERED=1
KVCACHE_LIB=$PWD/$b/libkvcache.so timeout 150 python3 -m pytest -q -rs -p no:cacheprovider python/tests 2>&1 | grep -E "passed|failed|FAILED|Error" | tail -6
KVCACHE_LIB=$PWD/$b/libkvcache.so KVCACHE_NO_FAST=1 timeout 100 python3 -m pytest -q -p no:cacheprovider python/tests 2>&1 | tail -1
echo "   [$(( SECONDS - T0 )) s]"
