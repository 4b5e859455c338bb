#!/usr/bin/env bash
# Python binding tests (python/tests) with pytest: host backend with NumPy everywhere; the
# CUDA + PyTorch tests run where torch and a GPU are present and are skipped otherwise.
# Builds the shared library when KVCACHE_LIB is unset and BUILD_DIR has none (and the
# optional _kvcfast extension when BUILD_DIR was configured with KVC_BUILD_PYTHON_EXT=ON:
# then the suite runs twice, with and without it), installs
# pytest and numpy with pip when missing (Debian: python3-pytest python3-numpy).
#   scripts/test_python.sh [pytest args...]     env: BUILD_DIR (default build), PYTHON
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
build=${BUILD_DIR:-build}
if [ -z "${KVCACHE_LIB:-}" ]; then
  if [ ! -f "$build/libkvcache.so" ]; then
    cmake -S . -B "$build" -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_BENCH=OFF -DKVC_BUILD_EXAMPLES=OFF >/dev/null
  fi
  cmake --build "$build" -j "$(nproc)" --target kvcache >/dev/null
  if grep -q '^KVC_BUILD_PYTHON_EXT:BOOL=ON' "$build/CMakeCache.txt"; then
    cmake --build "$build" -j "$(nproc)" --target kvc_pyext >/dev/null  # optional extension
  fi
  export KVCACHE_LIB=$PWD/$build/libkvcache.so
fi
if ! "$py" -c 'import pytest, numpy' 2>/dev/null; then
  "$py" -m pip install --quiet pytest numpy 2>/dev/null ||
    "$py" -m pip install --quiet --break-system-packages pytest numpy
fi
echo "python: $("$py" --version 2>&1), library: $KVCACHE_LIB"
"$py" -m pytest -q python/tests "$@"
fast=$("$py" -c 'import sys; sys.path.insert(0, "python"); import kvcache; print(kvcache.fast_path or "")')
if [ -n "$fast" ]; then  # the suite ran on the _kvcfast extension: once more on plain ctypes
  echo "again without $fast (KVCACHE_NO_FAST=1)"
  KVCACHE_NO_FAST=1 "$py" -m pytest -q python/tests "$@"
fi
"$py" python/examples/sglang_style_demo.py --quiet
