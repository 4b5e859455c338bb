#!/usr/bin/env bash
# kvcache.sglang on the GPU machine (issue 18): the adapter's tests with PyTorch on the
# CUDA backend, then its benchmark (bench/python/bench_sglang_adapter.py --backend cuda),
# each with the _kvcfast extension and again on plain ctypes (KVCACHE_NO_FAST=1), and
# bench/python/adapter_extend_steps.py (the extend's steps, both req_pool_indices routes). When
# .gpu/ref holds an older tree (git archive <commit> | tar -x -C .gpu/ref), its benchmark
# runs too, against this build's library, for a same-session before/after. Logs and CSVs
# go to $OUT. Run after .gpu/remote built build-gpu with the extension:
#   CMAKE_ARGS="-DKVC_BUILD_PYTHON_EXT=ON -DPython3_EXECUTABLE=$(command -v python3)" \
#     bash .gpu/remote exec bash scripts/gpu_sglang_adapter.sh
# env: BUILD_DIR (build-gpu), ROUNDS (5)
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
b=${BUILD_DIR:-build-gpu}
rounds=${ROUNDS:-5}
export KVCACHE_LIB=$PWD/$b/libkvcache.so
rc=0
if ! ls "$b"/_kvcfast*.so >/dev/null 2>&1; then  # configured without the extension
  cmake -S . -B "$b" -DKVC_BUILD_PYTHON_EXT=ON -DPython3_EXECUTABLE="$(command -v python3)" \
    >"$OUT/pyext-configure.log" 2>&1 &&
    cmake --build "$b" -j "$(nproc)" --target kvcache kvc_pyext >"$OUT/pyext-build.log" 2>&1 || rc=1
fi
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())' || rc=1
for mode in ext ctypes; do
  nofast=0
  [ "$mode" = ctypes ] && nofast=1
  echo "=== python/tests -k sglang ($mode)"
  KVCACHE_NO_FAST=$nofast python3 -m pytest -q -p no:cacheprovider python/tests -k sglang \
    >"$OUT/sglang-tests-$mode.log" 2>&1 || rc=1
  tail -3 "$OUT/sglang-tests-$mode.log"
done
for mode in ext ctypes; do
  nofast=0
  [ "$mode" = ctypes ] && nofast=1
  echo "=== bench_sglang_adapter --backend cuda ($mode)"
  KVCACHE_NO_FAST=$nofast python3 bench/python/bench_sglang_adapter.py --backend cuda \
    --rounds "$rounds" --csv "$OUT/sglang-adapter-cuda-$mode.csv" \
    >"$OUT/sglang-adapter-cuda-$mode.txt" 2>&1 || rc=1
  cat "$OUT/sglang-adapter-cuda-$mode.txt"
done
echo "=== adapter_extend_steps (alloc_for_extend step by step, both req_pool_indices routes)"
python3 bench/python/adapter_extend_steps.py >"$OUT/adapter-extend-steps.txt" 2>&1 || rc=1
cat "$OUT/adapter-extend-steps.txt"
if [ -f .gpu/ref/bench/python/bench_sglang_adapter.py ]; then
  echo "=== the same benchmark from .gpu/ref (before), this build's library, with _kvcfast"
  python3 .gpu/ref/bench/python/bench_sglang_adapter.py --backend cuda --rounds "$rounds" \
    --csv "$OUT/sglang-adapter-cuda-ref.csv" >"$OUT/sglang-adapter-cuda-ref.txt" 2>&1 || rc=1
  cat "$OUT/sglang-adapter-cuda-ref.txt"
fi
exit $rc
