# Session 10 call 2: the TOKEN group free (aa63d3a) against f4e6232 (.gpu/base) on the
# CUDA backend: kvc_bench_ab both orders and a control, the adapter bench in turns
# (its release C(clock) column is kvc_flow_release), and the allocator / flow tests.
set -uo pipefail
b=build-gpu
T0=$SECONDS
( cmake -S .gpu/base -B /tmp/bb -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_EXAMPLES=OFF \
    -DKVC_BUILD_STATIC=OFF -DKVC_INSTALL=OFF -DKVC_BUILD_PYTHON_EXT=ON -DPython3_EXECUTABLE=$(command -v python3) >/tmp/bb.log 2>&1 &&
  cmake --build /tmp/bb -j 8 >>/tmp/bb.log 2>&1 || echo "base build failed" )
cp $b/libkvcache.so.0.1.0 /tmp/newc.so
echo "   [$(( SECONDS - T0 )) s] base built"
timeout 200 ctest --test-dir $b -R "allocator|flow|alloc_model|slot" -j 4 2>&1 | grep -E "tests passed|\(Failed\)|\*\*\*"
AB=$b/bench/kvc_bench_ab
echo "=== A = base, B = new";    $AB /tmp/bb/libkvcache.so $b/libkvcache.so --reps 3000 2>&1 | tail -n +4
echo "=== A = new, B = base";    $AB $b/libkvcache.so /tmp/bb/libkvcache.so --reps 3000 2>&1 | tail -n +4
echo "=== control: new / copy";  $AB $b/libkvcache.so /tmp/newc.so --reps 3000 2>&1 | tail -n +4
echo "   [$(( SECONDS - T0 )) s]"
an() { KVCACHE_LIB=$PWD/$b/libkvcache.so timeout 150 python3 bench/python/bench_sglang_adapter.py --backend cuda --rounds 12 --csv $OUT/adapter-new-$1.csv > $OUT/adapter-new-$1.txt 2>&1; echo "rc=$?"; sed -n '/=== issue 18/,$p' $OUT/adapter-new-$1.txt; grep -E "^release" $OUT/adapter-new-$1.txt | head -4; }
ab() { ( cd .gpu/base && KVCACHE_LIB=/tmp/bb/libkvcache.so timeout 150 python3 bench/python/bench_sglang_adapter.py --backend cuda --rounds 12 --csv $OUT/adapter-base-$1.csv > $OUT/adapter-base-$1.txt 2>&1; echo "rc=$?"; sed -n '/=== issue 18/,$p' $OUT/adapter-base-$1.txt; grep -E "^release" $OUT/adapter-base-$1.txt | head -4 ); }
echo "=== adapter BASE 1"; ab 1
echo "=== adapter NEW 1"; an 1
echo "=== adapter NEW 2"; an 2
echo "=== adapter BASE 2"; ab 2
echo "   [$(( SECONDS - T0 )) s]"
