# Session 12 call 5: the final tree (bind18 merged: the SGLang adapter binds page-1 radix
# caches; test_radix_model's bound run): ctest, pytest with torch on CUDA, the adapter.
set -uo pipefail
b=build-gpu
T0=$SECONDS
echo "=== ctest (CUDA + host)"; timeout 300 ctest --test-dir $b --output-on-failure -j 8 > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|\(Failed\)|\*\*\*" $OUT/ctest.log | head
export PYTHONUNBUFFERED=1 KVCACHE_LIB=$PWD/$b/libkvcache.so
timeout 150 python3 -m pytest -q -rs -p no:cacheprovider python/tests 2>&1 | grep -E "passed|failed|FAILED|Error" | tail -6
KVCACHE_NO_FAST=1 timeout 100 python3 -m pytest -q -p no:cacheprovider python/tests 2>&1 | tail -1
timeout 120 python3 bench/python/bench_sglang_adapter.py --backend cuda --rounds 8 2>&1 | sed -n '/=== issue 18/,$p'
echo "   [$(( SECONDS - T0 )) s]"
