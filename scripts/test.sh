#!/usr/bin/env bash
# Builds kvcache with warnings as errors and runs every test with CTest.
# Env: BUILD_DIR (default build), CMAKE_ARGS (extra configure flags), CTEST_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DKVC_WERROR=ON ${CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" ${CTEST_ARGS:-}
