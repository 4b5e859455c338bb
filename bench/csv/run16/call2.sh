# Session 9 call 2: the move's cross-chunk fused loop (.gpu/new = branch move20 working
# tree) against main (372a41e, build-gpu): CUDA tests + sanitizers on test_kv_move, then
# the move in turns, 10 rounds each, and KVC_MOVE_TUNE variants of the new build.
set -uo pipefail
b=build-gpu
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
lscpu | grep -E "Model name|L2|L3|^CPU\(s\)" | head -5
( cmake -S .gpu/new -B /tmp/bn -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_EXAMPLES=OFF >/tmp/bn.log 2>&1 && cmake --build /tmp/bn -j 12 --target kvcache kvc_bench_kv test_kv_move >>/tmp/bn.log 2>&1 || { echo "new build failed"; tail -30 /tmp/bn.log; } )
echo "   [$(( SECONDS - T0 )) s] built"
t=$(find /tmp/bn/tests -type f -name test_kv_move -print -quit)
export KVC_CACHE_DIR=/tmp/kvc-new
timeout 200 $t cuda 2>&1 | tail -6
KVC_INLINE_MAX_WORDS=0 timeout 120 $t cuda 2>&1 | grep -E "PASSED|FAILED" | head -3
timeout 200 $t host 2>&1 | grep -E "PASSED|FAILED|SKIPPED" | head -3
timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 $t cuda > /tmp/mc.log 2>&1 && echo "memcheck clean: test_kv_move" || { echo "memcheck FAILED"; tail -15 /tmp/mc.log; }
timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 $t cuda > /tmp/rc.log 2>&1 && echo "racecheck clean: test_kv_move" || { echo "racecheck FAILED"; tail -15 /tmp/rc.log; }
timeout 300 compute-sanitizer --tool synccheck --error-exitcode 9 $t cuda > /tmp/sc.log 2>&1 && echo "synccheck clean: test_kv_move" || { echo "synccheck FAILED"; tail -15 /tmp/sc.log; }
echo "   [$(( SECONDS - T0 )) s] tests"
echo "=== move: base (372a41e) and new in turns, 10 rounds"
for r in 1 2 3 4 5 6; do
  if [ $((r % 2)) = 1 ]; then o="base new"; else o="new base"; fi
  for who in $o; do
    if [ $who = base ]; then KVC_CACHE_DIR=/tmp/kvc-base $b/bench/kvc_bench_kv --move-only 2>&1 | grep -E "^move" | sed "s/^/base $r  /"
    else /tmp/bn/bench/kvc_bench_kv --move-only 2>&1 | grep -E "^move" | sed "s/^/new $r  /"; fi
  done
done
echo "   [$(( SECONDS - T0 )) s]"
echo "=== variants of new (KVC_MOVE_TUNE), 3 rounds"
for r in 1 2 3; do
  for v in 256,1,0,0,2 256,1,256,0,1; do
    KVC_MOVE_TUNE=$v /tmp/bn/bench/kvc_bench_kv --move-only 2>&1 | grep -E "^move" | sed "s/^/$v $r  /"
  done
done
echo "=== move cubins (registers / stack)"
for d in /tmp/kvc-base /tmp/kvc-new; do for f in $(grep -l kvc_kv_move $d/*.cubin 2>/dev/null); do tail -c +41 "$f" >/tmp/m.cubin && echo "$d $(cuobjdump -res-usage /tmp/m.cubin 2>&1 | grep -A1 kvc_kv_move | tail -1)"; done; done
echo "   [$(( SECONDS - T0 )) s]"
