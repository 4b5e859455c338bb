# Session 12 call 2: where the adapter's page-1 extend spends its host time on the H200's
# host (bench/diag/adapter_extend_parts.py), the adapter's targets (two passes) and the
# binding against the C calls it wraps (bench/bench_python.py), on 8092a3c's code.
set -uo pipefail
b=build-gpu
T0=$SECONDS
export PYTHONUNBUFFERED=1 KVCACHE_LIB=$PWD/$b/libkvcache.so
echo "=== host"; grep -m1 "model name" /proc/cpuinfo; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "=== adapter extend parts (CUDA)"; timeout 120 python3 bench/diag/adapter_extend_parts.py --backend cuda --reps 2000
echo "   [$(( SECONDS - T0 )) s]"
for r in 1 2; do timeout 120 python3 bench/python/bench_sglang_adapter.py --backend cuda --rounds 8 2>&1 | sed -n '/=== issue 18/,$p' | sed "s/^/pass$r  /"; done
echo "   [$(( SECONDS - T0 )) s]"
echo "=== binding vs C (CUDA)"; timeout 150 python3 bench/bench_python.py --backend cuda 2>&1 | tail -25
echo "=== adapter extend parts again (CUDA)"; timeout 120 python3 bench/diag/adapter_extend_parts.py --backend cuda --reps 2000
echo "   [$(( SECONDS - T0 )) s]"
