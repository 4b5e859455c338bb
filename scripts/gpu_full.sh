#!/usr/bin/env bash
# One GPU session's worth of verification, run on the GPU machine from the project root
# after .gpu/remote has built build-gpu (e.g. `bash .gpu/remote exec bash scripts/gpu_full.sh`):
# CUDA tests (also with every payload forced through the staging ring), compute-sanitizer
# memcheck over every test binary and racecheck over the shared-memory kernels' tests,
# every benchmark, and the serve example with and without check mode. Logs go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
b=${BUILD_DIR:-build-gpu}
rc=0
grep -m1 "model name" /proc/cpuinfo || true
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
if [ "${PHASE:-all}" != "b" ]; then
echo "=== ctest (CUDA)"
ctest --test-dir "$b" --output-on-failure -j 4 >"$OUT/ctest.log" 2>&1 || rc=1
grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest.log" | grep -v Passed | tail -15
echo "=== ctest, payloads forced through staging (KVC_INLINE_MAX_WORDS=0)"
KVC_INLINE_MAX_WORDS=0 ctest --test-dir "$b" -R "alloc|flow|pool|swa|hybrid|session|mamba" -j 4 2>&1 | grep -E "tests passed|\*\*\*Failed" || rc=1
fi
if [ "${PHASE:-all}" != "a" ]; then
echo "=== compute-sanitizer memcheck"
san=0
# Every test binary that CTest runs on the CUDA backend (host-only binaries skip it).
gpu_tests=$(ctest --test-dir "$b" -N -L gpu | sed -n 's/^ *Test *#[0-9]*: *\(.*\)_cuda$/\1/p' | sort)
for name in $gpu_tests; do
  t=$(find "$b/tests" -type f -perm -u+x -name "$name" -print -quit)
  [ -n "$t" ] || { san=1; echo "memcheck: no binary for $name"; continue; }
  # API errors are not reported: the library checks every driver call's status and the
  # tests assert it, some tests provoke driver errors on purpose (a device OOM), and NCCL
  # probes its kernel images at init. Memory errors are what memcheck is run for here.
  KVT_STEPS=3000 timeout 300 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
    "$t" cuda >"$OUT/san.log" 2>&1 \
    || { san=1; echo "memcheck FAILED: $t"; tail -25 "$OUT/san.log"; }
done
echo "memcheck ran over: $(echo $gpu_tests | wc -w) binaries"
for t in "$b/tests/kv/test_kv_move" "$b/tests/mamba/test_mamba_pool" "$b/tests/unit/test_ops"; do
  timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 "$t" cuda >"$OUT/san.log" 2>&1 \
    || { san=1; echo "racecheck FAILED: $t"; tail -25 "$OUT/san.log"; }
done
echo "compute-sanitizer: $([ $san = 0 ] && echo clean || echo ERRORS)"
[ $san = 0 ] || rc=1
fi
[ "${PHASE:-all}" = "b" ] && exit $rc
echo "=== benchmarks"
bash scripts/gpu_bench.sh || rc=1
echo "=== host-backend allocation bench on this machine's CPU (for scale)"
"$b/bench/kvc_bench_alloc" --host --quick | grep -E "decode.*256|free" || true
echo "=== Python binding with PyTorch (DLPack on the GPU)"
KVCACHE_LIB=$PWD/$b/libkvcache.so python3 -m pytest -q -p no:cacheprovider python/tests 2>&1 | tail -5 || rc=1
echo "=== graph_decode example (the decode channel in a CUDA graph)"
"$b/examples/kvc_example_graph_decode" | tee "$OUT/graph_decode.log" || rc=1
echo "=== serve example"
"$b/examples/kvc_example_serve" --requests 2000 --quiet | tee "$OUT/serve.log" || rc=1
"$b/examples/kvc_example_serve" --requests 2000 --quiet --check | tee -a "$OUT/serve.log" || rc=1
exit $rc
