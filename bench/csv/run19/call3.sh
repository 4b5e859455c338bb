# Session 12 call 3: the merged tree (mamba18x's adapter fold and Mamba extra buffer,
# radix15e's eviction, swa17d's SWA free) on the H200 against 8092a3c (.gpu/base): tests
# (both SIMD settings), staged payloads, digests, memcheck, the allocation path in one
# process, the radix trace replays and the SWA part (host and CUDA backends) on this
# Intel host, the adapter, pytest with torch on CUDA. .gpu/swa512 is a scratch tree: the
# merged tree plus swa17d's untested AVX-512 step of the SWA free
# (bench/csv/swa17d/variants/avx512-step8-untested.diff, merged by hand onto the
# per-stretch loop, enabled on every AVX-512 CPU) - tested and timed here, not in main.
set -uo pipefail
b=build-gpu
T0=$SECONDS
echo "=== host"; grep -m1 "model name" /proc/cpuinfo; nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
( cmake -S .gpu/base -B /tmp/bb -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_EXAMPLES=OFF \
    -DKVC_BUILD_STATIC=OFF -DKVC_INSTALL=OFF -DKVC_BUILD_PYTHON_EXT=ON -DPython3_EXECUTABLE=$(command -v python3) >/tmp/bb.log 2>&1 && cmake --build /tmp/bb -j 6 >>/tmp/bb.log 2>&1 || echo "base build failed" ) &
( cmake -S .gpu/swa512 -B /tmp/bs -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_EXAMPLES=OFF -DKVC_BUILD_STATIC=OFF \
    -DKVC_INSTALL=OFF >/tmp/bs.log 2>&1 && cmake --build /tmp/bs -j 4 >>/tmp/bs.log 2>&1 || echo "swa512 build failed" ) &
echo "=== ctest (CUDA + host, with the KVC_SIMD=0 entries)"; timeout 300 ctest --test-dir $b --output-on-failure -j 6 > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|\(Failed\)|\*\*\*" $OUT/ctest.log | head
echo "=== staged payloads"; KVC_INLINE_MAX_WORDS=0 timeout 120 ctest --test-dir $b -R "alloc|flow|swa|hybrid|session|decode|radix|ops|req|free" -j 6 2>&1 | grep -E "tests passed|\*\*\*Failed|\(Failed\)"
KVC_BACKEND=cuda BUILD_DIR=$b timeout 60 bash scripts/test_digest.sh 2>&1 | tail -1
KVC_SIMD=0 KVC_BACKEND=cuda BUILD_DIR=$b timeout 60 bash scripts/test_digest.sh 2>&1 | tail -1
echo "   [$(( SECONDS - T0 )) s]"
for n in test_allocator test_flow test_radix_flow test_decode_channel test_swa_radix test_flow_hybrid test_session test_mamba_radix test_free_simd; do
  t=$(find $b/tests -type f -name $n -print -quit); [ -n "$t" ] || { echo "no $n"; continue; }
  KVT_STEPS=300 timeout 100 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $t cuda > /tmp/san-$n.log 2>&1 && echo "memcheck clean: $n" || { echo "memcheck FAILED: $n"; tail -8 /tmp/san-$n.log; }; done
echo "   [$(( SECONDS - T0 )) s]"
wait
echo "=== swa512 scratch: its tests (host, with the KVC_SIMD=0 entries) and the SWA CUDA suites"
timeout 200 ctest --test-dir /tmp/bs -R "swa|free_simd|free_steps|radix|hybrid" -j 6 2>&1 | grep -E "tests passed|\(Failed\)|\*\*\*Failed"
cp $b/libkvcache.so.0.1.0 /tmp/newc.so
AB=$b/bench/kvc_bench_ab
echo "=== A = base, B = new";   $AB /tmp/bb/libkvcache.so $b/libkvcache.so --reps 3000 2>&1 | tail -n +4
echo "=== A = new, B = base";   $AB $b/libkvcache.so /tmp/bb/libkvcache.so --reps 3000 2>&1 | tail -n +4
echo "=== control: new / copy"; $AB $b/libkvcache.so /tmp/newc.so --reps 3000 2>&1 | tail -n +4
echo "   [$(( SECONDS - T0 )) s]"
echo "=== radix trace replays (host backend), base / new / simd0 in turns"
for r in 1 2 3; do
  for v in base new simd0; do
    bin=$b/bench/kvc_bench_radix; [ $v = base ] && bin=/tmp/bb/bench/kvc_bench_radix
    if [ $v = simd0 ]; then KVC_SIMD=0 KVB_ONLY=trace timeout 30 $bin > /tmp/tr.txt 2>&1; else KVB_ONLY=trace timeout 30 $bin > /tmp/tr.txt 2>&1; fi
    grep -E "^(trace|split) .*evict" /tmp/tr.txt | sed "s/^/$v r$r  /"
  done
done
echo "   [$(( SECONDS - T0 )) s]"
echo "=== SWA part (issue 17 item 6): base / new, host and CUDA backends, half and full SWA side"
for r in 1 2 3; do
  for v in base new swa512; do
    bin=$b/bench/kvc_bench_radix; [ $v = base ] && bin=/tmp/bb/bench/kvc_bench_radix; [ $v = swa512 ] && bin=/tmp/bs/bench/kvc_bench_radix
    for be in host cuda; do for side in half full; do
      KVB_BACKEND=$be KVB_SWA_SIDE=$side KVB_ONLY=swa timeout 60 $bin 2>&1 | grep -E "^ratio" | sed "s/^/$v $be $side r$r  /"
    done; done
  done
done
echo "   [$(( SECONDS - T0 )) s]"
export PYTHONUNBUFFERED=1
for r in new base; do
  if [ $r = new ]; then (KVCACHE_LIB=$PWD/$b/libkvcache.so timeout 100 python3 bench/python/bench_sglang_adapter.py --backend cuda --rounds 8 2>&1 | sed -n '/=== issue 18/,$p' | sed "s/^/$r  /")
  else (cd .gpu/base && KVCACHE_LIB=/tmp/bb/libkvcache.so timeout 100 python3 bench/python/bench_sglang_adapter.py --backend cuda --rounds 8 2>&1 | sed -n '/=== issue 18/,$p' | sed "s/^/$r  /"); fi
done
echo "   [$(( SECONDS - T0 )) s]"
KVCACHE_LIB=$PWD/$b/libkvcache.so timeout 150 python3 -m pytest -q -rs -p no:cacheprovider python/tests 2>&1 | grep -E "passed|failed|FAILED|Error" | tail -6
KVCACHE_LIB=$PWD/$b/libkvcache.so KVCACHE_NO_FAST=1 timeout 100 python3 -m pytest -q -p no:cacheprovider python/tests 2>&1 | tail -1
echo "   [$(( SECONDS - T0 )) s]"
