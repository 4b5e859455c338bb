#!/usr/bin/env bash
# Python binding tests (python/tests) with pytest: host backend with NumPy everywhere; the
# CUDA + PyTorch tests run where torch and a GPU are present and are skipped otherwise.
# Builds the shared library when KVCACHE_LIB is unset and BUILD_DIR has none, installs
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
  export KVCACHE_LIB=$PWD/$build/libkvcache.so
fi
if ! "$py" -c 'import pytest, numpy' 2>/dev/null; then
  "$py" -m pip install --quiet pytest numpy 2>/dev/null ||
    "$py" -m pip install --quiet --break-system-packages pytest numpy
fi
echo "python: $("$py" --version 2>&1), library: $KVCACHE_LIB"
"$py" -m pytest -q python/tests "$@"
"$py" python/examples/sglang_style_demo.py --quiet
