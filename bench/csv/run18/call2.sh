# Session 11 call 2: where the page-1 extend's host time goes on the H200 host (the diag
# with a no-launch row, perf if present), and the adapter with the in-place staged payload
# and no host copy of out_cache_loc, against the base's Python and library in turns.
set -uo pipefail
b=build-gpu
T0=$SECONDS
cc -O2 -g -Iinclude bench/diag/staged_payload.c -L$b -lkvcache -Wl,-rpath,$PWD/$b -o /tmp/sp
echo "=== staged_payload diag"; timeout 100 /tmp/sp 1000
echo "   [$(( SECONDS - T0 )) s]"
if command -v perf >/dev/null; then
  echo "=== perf of the diag's first shapes"
  timeout 60 perf record -q -o /tmp/perf.sp -g /tmp/sp 300 > /dev/null 2>&1
  perf report -i /tmp/perf.sp --no-children --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -40
else echo "no perf"; fi
echo "   [$(( SECONDS - T0 )) s]"
( cmake -S .gpu/base -B /tmp/bb -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_EXAMPLES=OFF -DKVC_BUILD_BENCH=OFF \
    -DKVC_BUILD_STATIC=OFF -DKVC_INSTALL=OFF -DKVC_BUILD_PYTHON_EXT=ON -DPython3_EXECUTABLE=$(command -v python3) >/tmp/bb.log 2>&1 && cmake --build /tmp/bb -j 8 >>/tmp/bb.log 2>&1 || { echo "base build failed"; tail -5 /tmp/bb.log; } )
echo "   [$(( SECONDS - T0 )) s]"
export PYTHONUNBUFFERED=1
for r in new base new base; do
  if [ $r = new ]; then (KVCACHE_LIB=$PWD/$b/libkvcache.so timeout 100 python3 bench/python/bench_sglang_adapter.py --backend cuda --rounds 6 2>&1 | sed -n '/=== issue 18/,$p' | sed "s/^/$r  /")
  else (cd .gpu/base && KVCACHE_LIB=/tmp/bb/libkvcache.so timeout 100 python3 bench/python/bench_sglang_adapter.py --backend cuda --rounds 6 2>&1 | sed -n '/=== issue 18/,$p' | sed "s/^/$r  /"); fi
  echo "   [$(( SECONDS - T0 )) s]"
done
