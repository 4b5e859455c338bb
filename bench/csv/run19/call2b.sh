# Session 12 call 2b: mamba18x merged (Python only: the adapter fold, the Mamba extra
# buffer): ctest and the Python suite with torch on CUDA, the new extra-buffer tests shown.
set -uo pipefail
b=build-gpu
T0=$SECONDS
echo "=== ctest"; timeout 300 ctest --test-dir $b -j 8 > $OUT/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|\(Failed\)|\*\*\*" $OUT/ctest.log | head
export KVCACHE_LIB=$PWD/$b/libkvcache.so
timeout 100 python3 -m pytest -q -rs -p no:cacheprovider python/tests/test_sglang_mamba_extra.py -v 2>&1 | grep -E "PASS|FAIL|ERROR|SKIP|passed|failed" | tail -30
timeout 150 python3 -m pytest -q -rs -p no:cacheprovider python/tests 2>&1 | grep -E "passed|failed|FAILED|Error" | tail -6
KVCACHE_NO_FAST=1 timeout 100 python3 -m pytest -q -p no:cacheprovider python/tests 2>&1 | tail -1
echo "   [$(( SECONDS - T0 )) s]"
