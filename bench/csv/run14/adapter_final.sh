# Session 7, last: the _kvcfast conversion change on Python 3.12 (its compact-int branch
# compiles only there), the Python tests on CUDA, and the adapter benchmark.
set -uo pipefail
b=build-gpu
export KVCACHE_LIB=$PWD/$b/libkvcache.so PYTHONUNBUFFERED=1
python3 --version
timeout 150 python3 -m pytest -q -p no:cacheprovider python/tests 2>&1 | tail -1
timeout 60 python3 bench/python/adapter_match_steps.py --ps 16 --rounds 3 2>&1 | tail -4
timeout 120 python3 bench/python/bench_sglang_adapter.py --backend cuda --rounds 5 --csv $OUT/adapter-final.csv > /tmp/an.txt 2>&1; echo "rc=$?"; tail -13 /tmp/an.txt | cut -c1-150
