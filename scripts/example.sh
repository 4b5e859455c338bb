#!/usr/bin/env bash
# Builds kvcache and runs the main example (CUDA backend when a GPU is usable, else host).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DKVC_WERROR=ON >/dev/null
cmake --build "$build" -j "$(nproc)" --target kvc_example_basic
"$build/examples/kvc_example_basic" "$@"
