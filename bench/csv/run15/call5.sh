# Session 8 call 5: the move's fused store-and-load as its own compiled variant (plain
# kernel unchanged from d21068c), CUDA tests and sanitizers on it, mid vs tree in turns.
set -uo pipefail
b=build-gpu
T0=$SECONDS
( cmake -S .gpu/mid -B /tmp/bm -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_EXAMPLES=OFF \
    -DKVC_BUILD_STATIC=OFF -DKVC_INSTALL=OFF >/tmp/bm.log 2>&1 && cmake --build /tmp/bm -j 6 --target kvcache kvc_bench_kv >>/tmp/bm.log 2>&1 || echo "mid build failed" ) &
echo "=== ctest (CUDA + host)"; timeout 300 ctest --test-dir $b --output-on-failure -j 4 > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|\(Failed\)|\*\*\*" $OUT/ctest.log | head
KVC_INLINE_MAX_WORDS=0 timeout 120 ctest --test-dir $b -R "kv_move|ops" 2>&1 | grep -E "tests passed|\*\*\*Failed|\(Failed\)"
t=$(find $b/tests -type f -name test_kv_move -print -quit)
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $t cuda > /tmp/mc.log 2>&1 && echo "memcheck clean: test_kv_move" || { echo "memcheck FAILED"; tail -5 /tmp/mc.log; }
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 $t cuda > /tmp/rc.log 2>&1 && echo "racecheck clean: test_kv_move" || { echo "racecheck FAILED"; tail -5 /tmp/rc.log; }
timeout 120 compute-sanitizer --tool synccheck --error-exitcode 9 $t cuda > /tmp/sc.log 2>&1 && echo "synccheck clean: test_kv_move" || { echo "synccheck FAILED"; tail -5 /tmp/sc.log; }
echo "   [$(( SECONDS - T0 )) s]"
wait
echo "=== move: mid (d21068c) and the tree in turns, 5 rounds"
for r in 1 2 3 4 5; do
  KVC_CACHE_DIR=/tmp/kvc-mid /tmp/bm/bench/kvc_bench_kv --move-only 2>&1 | grep -E "^move" | sed "s/^/mid $r  /"
  $b/bench/kvc_bench_kv --move-only 2>&1 | grep -E "^move" | sed "s/^/new $r  /"
done
echo "=== move cubins (registers / stack)"
for f in $(grep -l kvc_kv_move ${KVC_CACHE_DIR:-/nonexistent}/*.cubin 2>/dev/null); do tail -c +41 "$f" >/tmp/m.cubin && cuobjdump -res-usage /tmp/m.cubin 2>&1 | grep -A1 "kvc_kv_move" | tail -1; done
echo "   [$(( SECONDS - T0 )) s]"
