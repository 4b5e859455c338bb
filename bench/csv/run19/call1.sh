# Session 12 call 1: the move's cluster variants (KVC_MOVE_CLUSTER = 2 / 4 / 8 CTAs per
# tile) against the one-CTA kernel and against 8092a3c (.gpu/base), at N = 64, 1024, 8192;
# CUDA tests of every variant (test_kv_move_cuda_tune_*) and compute-sanitizer on them.
set -uo pipefail
b=build-gpu
T0=$SECONDS
echo "=== host"; grep -m1 "model name" /proc/cpuinfo; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
( cmake -S .gpu/base -B /tmp/bb -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_EXAMPLES=OFF \
    -DKVC_BUILD_STATIC=OFF -DKVC_INSTALL=OFF >/tmp/bb.log 2>&1 && cmake --build /tmp/bb -j 8 --target kvcache kvc_bench_kv >>/tmp/bb.log 2>&1 || echo "base build failed" ) &
echo "=== ctest kv_move (every variant) + kernel compile"; timeout 200 ctest --test-dir $b -R "kv_move|kernel_compile" --output-on-failure -j 6 > $OUT/ctest_move.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|\(Failed\)|\*\*\*|Passed" $OUT/ctest_move.log | head -20
t=$(find $b/tests -type f -name test_kv_move -print -quit)
for tune in "256,1,256,0,2" "256,1,128,0,4" "128,1,128,0,8"; do
  for tool in memcheck racecheck synccheck; do
    KVC_MOVE_TUNE=$tune timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $t cuda > /tmp/san.log 2>&1 && echo "$tool clean: test_kv_move tune $tune" || { echo "$tool FAILED tune $tune"; tail -6 /tmp/san.log; }
  done
done
echo "   [$(( SECONDS - T0 )) s]"
wait
B=$b/bench/kvc_bench_kv
echo "=== move: base, new (default), new with cluster shapes, in turns; 3 rounds"
for r in 1 2 3; do
  KVC_CACHE_DIR=/tmp/kvc-base /tmp/bb/bench/kvc_bench_kv --move-only 2>&1 | grep -E "^move" | sed "s/^/base r$r  /"
  KVC_CACHE_DIR=/tmp/kvc-new $B --move-only 2>&1 | grep -E "^move" | sed "s/^/new r$r  /"
  for tune in "256,1,256,0,2" "256,1,128,0,2" "256,1,256,0,4" "256,1,128,0,4" "256,1,128,0,8" "128,1,128,0,4" "512,1,256,0,2"; do
    KVC_CACHE_DIR=/tmp/kvc-new KVC_MOVE_TUNE=$tune $B --move-only 2>&1 | grep -E "^move" | sed "s/^/c$tune r$r  /"
  done
  echo "   [$(( SECONDS - T0 )) s]"
done
echo "=== move cubins (registers / stack)"
for f in $(grep -l kvc_kv_move /tmp/kvc-new/* 2>/dev/null | head -20); do tail -c +41 "$f" >/tmp/m.cubin && cuobjdump -res-usage /tmp/m.cubin 2>&1 | grep -A1 "kvc_kv_move" | tail -1; done
echo "   [$(( SECONDS - T0 )) s]"
