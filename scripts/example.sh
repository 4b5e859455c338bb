#!/usr/bin/env bash
# Builds kvcache and runs the main example: the CUDA backend when a GPU is usable, the
# host backend otherwise. Arguments are passed to the example (--help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-example}
cmake -S . -B "$build" -DKVC_WERROR=ON -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)" --target kvc_example_serve
"$build/examples/kvc_example_serve" "$@"
