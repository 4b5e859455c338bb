# Session 10 call 3: call 2's kvc_bench_ab part again (call 2 wrote too many files and its
# log did not come back): base f4e6232 against aa63d3a, both orders, and a control.
set -uo pipefail
b=build-gpu
( cmake -S .gpu/base -B /tmp/bb -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_EXAMPLES=OFF \
    -DKVC_BUILD_STATIC=OFF -DKVC_INSTALL=OFF >/tmp/bb.log 2>&1 && cmake --build /tmp/bb -j 8 --target kvcache >>/tmp/bb.log 2>&1 || echo "base build failed" )
cp $b/libkvcache.so.0.1.0 /tmp/newc.so
timeout 200 ctest --test-dir $b -R "allocator|flow|alloc_model|slot" -j 4 2>&1 | grep -E "tests passed|\(Failed\)|\*\*\*"
AB=$b/bench/kvc_bench_ab
echo "=== A = base, B = new";    $AB /tmp/bb/libkvcache.so $b/libkvcache.so --reps 3000 2>&1 | tail -n +4
echo "=== A = new, B = base";    $AB $b/libkvcache.so /tmp/bb/libkvcache.so --reps 3000 2>&1 | tail -n +4
echo "=== control: new / copy";  $AB $b/libkvcache.so /tmp/newc.so --reps 3000 2>&1 | tail -n +4
