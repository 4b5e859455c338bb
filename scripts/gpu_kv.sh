#!/usr/bin/env bash
# Focused verification of the KV pool kernels on the GPU machine (after .gpu/remote has
# built build-gpu): the kv tests, memcheck and racecheck over the move test, bench_kv,
# and the move rows once more for the run-to-run spread. Logs go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
b=${BUILD_DIR:-build-gpu}
rc=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
echo "=== ctest (CUDA): kv, swa, ops"
ctest --test-dir "$b" --output-on-failure -R "kv|swa|ops|fault" -j 4 >"$OUT/ctest_kv.log" 2>&1 || rc=1
grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest_kv.log" | grep -v Passed | tail -15
echo "=== compute-sanitizer on test_kv_move"
for tool in memcheck racecheck; do
  timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 "$b/tests/kv/test_kv_move" cuda >"$OUT/san_$tool.log" 2>&1 \
    && echo "$tool: clean" || { rc=1; echo "$tool FAILED"; tail -25 "$OUT/san_$tool.log"; }
done
echo "=== bench_kv (set_kv + move)"
"$b/bench/kvc_bench_kv" --csv "$OUT/bench_kv.csv" | tee "$OUT/bench_kv.log" || rc=1
echo "=== bench_kv --move-only again (run-to-run spread)"
"$b/bench/kvc_bench_kv" --move-only | grep -E "^move" || rc=1
exit $rc
