#!/usr/bin/env bash
# KV transfer (issue 19) on the GPU machine, after .gpu/remote has built build-gpu:
#   1. the transfer and tensor-parallel tests on the CUDA backend (and host, for the
#      record); the NCCL variants print why they skip when NCCL is missing or refuses
#      two ranks on one device;
#   2. the same CUDA tests under compute-sanitizer memcheck (NCCL variants skipped there:
#      memcheck is for this library's copies, not NCCL's kernels);
#   3. the one-GPU benchmark (peer path, same device): 64 requests x 4096 tokens of
#      Llama-3-8B KV, page sizes 16 and 64, then a --quick run at page size 1.
# The two-GPU run (bench --gpus 2) needs nvidia-h200-x2 and is not part of this script.
# Logs and CSV go to $OUT. NCCL: libnccl.so.2 on the loader path, or KVC_NCCL_LIB.
set -uo pipefail
OUT=${OUT:-/tmp/out}
b=${BUILD_DIR:-build-gpu}
mkdir -p "$OUT"
rc=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
export NCCL_NVLS_ENABLE=0 # the machine's notes: NVLink multicast stays off
if [ -z "${KVC_NCCL_LIB:-}" ]; then
  # A pip-installed NCCL (nvidia-nccl-cu12) is common on these images; use it if found.
  cand=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib", "libnccl.so.2"))' 2>/dev/null || true)
  if [ -n "$cand" ] && [ -f "$cand" ]; then export KVC_NCCL_LIB=$cand; fi
fi
echo "KVC_NCCL_LIB=${KVC_NCCL_LIB:-<loader path: libnccl.so.2>}"

echo "=== ctest: transfer + tp (CUDA and host)"
ctest --test-dir "$b" --output-on-failure -R "transfer|tp_ranks" >"$OUT/ctest_transfer.log" 2>&1 || rc=1
grep -E "tests passed|Failed|Skipped|\*\*\*" "$OUT/ctest_transfer.log" | tail -12

echo "=== the CUDA variants verbosely (NCCL skip reasons, if any)"
for t in test_transfer_exec test_transfer_flows test_tp_ranks; do
  "$b/tests/transfer/$t" cuda >"$OUT/$t.cuda.log" 2>&1; r=$?
  [ $r -eq 0 ] || { rc=1; echo "$t: exit $r"; tail -30 "$OUT/$t.cuda.log"; }
  grep -E "SKIPPED|PASSED|FAILED|NCCL" "$OUT/$t.cuda.log" | sort | uniq -c
done

echo "=== compute-sanitizer memcheck (our copies; NCCL's own kernels are not under test here)"
for t in test_transfer_exec test_transfer_flows test_tp_ranks; do
  KVC_NCCL_LIB=/nonexistent/libnccl.so.2 timeout 600 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$b/tests/transfer/$t" cuda >"$OUT/memcheck_$t.log" 2>&1 \
    && echo "$t memcheck: clean" || { rc=1; echo "$t memcheck FAILED"; tail -30 "$OUT/memcheck_$t.log"; }
done

echo "=== bench_transfer, one GPU (peer path, same device)"
for ps in 16 64; do
  "$b/bench/kvc_bench_transfer" --page-size "$ps" --csv "$OUT/bench_transfer_ps$ps.csv" | tee "$OUT/bench_transfer_ps$ps.log" || rc=1
done
"$b/bench/kvc_bench_transfer" --quick --page-size 1 --csv "$OUT/bench_transfer_quick_ps1.csv" | tee "$OUT/bench_transfer_quick_ps1.log" || rc=1
exit $rc
