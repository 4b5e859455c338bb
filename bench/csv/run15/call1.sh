# Session 8 call 1: get_last_loc's one-request entries and the batch-64 variants.
set -uo pipefail
b=build-gpu
( cmake -S .gpu/base -B /tmp/bb -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_BENCH=OFF -DKVC_BUILD_EXAMPLES=OFF -DKVC_BUILD_STATIC=OFF -DKVC_INSTALL=OFF >/tmp/bb.log 2>&1 && cmake --build /tmp/bb -j 8 >>/tmp/bb.log 2>&1 ) &
ctest --test-dir $b -R "ops|bad_input|abi|kernel_cache" 2>&1 | grep -E "tests passed|Failed|\*\*\*"
t=$(find $b/tests -type f -name test_ops -print -quit)
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $t cuda > /tmp/san.log 2>&1 && echo "memcheck clean: test_ops" || { echo "memcheck FAILED"; tail -8 /tmp/san.log; }
gcc -O2 -o /tmp/llh bench/diag/last_loc_graph.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64/stubs -lcuda 2>&1 | tail -3
/tmp/llh .gpu/llx > $OUT/last_loc_harness.txt 2>&1; echo "harness rc=$?"; cat $OUT/last_loc_harness.txt
wait
ls /tmp/bb/libkvcache.so >/dev/null || { tail -20 /tmp/bb.log; exit 1; }
timeout 300 python3 bench/python/bench_small_kernels.py --sglang-kernels .gpu/sglk/common.py --lib new=$b/libkvcache.so --lib base=/tmp/bb/libkvcache.so --rounds 7 --csv $OUT/small_kernels.csv 2>&1 | grep -v "^\s*$"
