#!/usr/bin/env bash
# Builds kvcache with ThreadSanitizer and runs the tests that use one context from
# several threads (tests/reliability/test_threads, tests/unit/test_core). Any report is a
# failure (halt_on_error). Host backend only: TSan does not see into the CUDA driver.
# Env: BUILD_DIR (default build-tsan), KVT_STEPS (default 2000).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-tsan}
targets=(test_threads test_core)
cmake -S . -B "$build" -DKVC_WERROR=ON -DKVC_BUILD_TESTS=ON -DKVC_ENABLE_TSAN=ON \
  -DKVC_BUILD_EXAMPLES=OFF -DKVC_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
for t in "${targets[@]}"; do
  bin=$(find "$build/tests" -type f -name "$t" -perm -u+x -print -quit)
  [ -n "$bin" ] || { echo "test_tsan: $t was not built" >&2; exit 1; }
  KVT_STEPS=${KVT_STEPS:-2000} "$bin" host
done
echo "ThreadSanitizer: clean"
