#!/usr/bin/env bash
# The Python binding's tests against an AddressSanitizer build of libkvcache (issue 16):
# every buffer check in python/kvcache/_buf.py guards a C read or write, and a check that
# lets a short or mistyped buffer through shows up here as an ASan report, not as silent
# heap corruption. libasan is preloaded into the (uninstrumented) interpreter, leak
# detection is off (CPython keeps objects alive at exit), and PYTHONMALLOC=malloc routes
# Python's own small allocations (ctypes arrays, array.array) through malloc so ASan sees
# their bounds too. pytest runs with -s: its capture would swallow an ASan report.
#   scripts/test_python_asan.sh [pytest args...]   env: ASAN_BUILD_DIR (build-asan), PYTHON, CC
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
build=${ASAN_BUILD_DIR:-build-asan}
# The _kvcfast extension too (instrumented like the library): its entries take buffer
# objects and addresses from kvcache.sglang's hot paths, so the suite runs on it first and
# then once more on plain ctypes (KVCACHE_NO_FAST=1).
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DKVC_ENABLE_ASAN=ON -DKVC_BUILD_TESTS=OFF \
      -DKVC_BUILD_BENCH=OFF -DKVC_BUILD_EXAMPLES=OFF -DKVC_BUILD_PYTHON_EXT=ON >/dev/null
cmake --build "$build" -j "$(nproc)" --target kvcache kvc_pyext >/dev/null
asan=$("${CC:-cc}" -print-file-name=libasan.so)
if [ ! -e "$asan" ]; then
  echo "test_python_asan: libasan.so not found (${CC:-cc} -print-file-name)" >&2
  exit 1
fi
if ! "$py" -c 'import pytest, numpy' 2>/dev/null; then
  "$py" -m pip install --quiet pytest numpy 2>/dev/null ||
    "$py" -m pip install --quiet --break-system-packages pytest numpy
fi
echo "python (ASan): $("$py" --version 2>&1), library: $PWD/$build/libkvcache.so"
run() {
  LD_PRELOAD="$asan" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 PYTHONMALLOC=malloc \
    KVCACHE_LIB="$PWD/$build/libkvcache.so" "$@"
}
fast=$(run "$py" -c 'import sys; sys.path.insert(0, "python"); import kvcache; print(kvcache.fast_path or "")')
echo "fast path (ASan): ${fast:-none}"
run "$py" -m pytest -q -s -p no:cacheprovider python/tests "$@"
if [ -n "$fast" ]; then
  KVCACHE_NO_FAST=1 run "$py" -m pytest -q -s -p no:cacheprovider python/tests "$@"
fi
