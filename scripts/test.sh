#!/usr/bin/env bash
# Builds kvcache with warnings as errors and runs every test with CTest.
# Installs cmocka (and xxhash.h) from Debian's packages when missing (needs root and apt-get).
# Env: BUILD_DIR (default build), CMAKE_ARGS (extra configure flags), CTEST_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f /usr/include/cmocka.h ] && [ -z "${CMAKE_PREFIX_PATH:-}" ]; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq libcmocka-dev >/dev/null
  else
    echo "cmocka is missing: install libcmocka-dev" >&2
    exit 1
  fi
fi
# xxhash.h (header-only XXH3) gives the radix cache its default KV-event block hash.
if [ ! -f /usr/include/xxhash.h ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq libxxhash-dev >/dev/null
fi
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DKVC_WERROR=ON -DKVC_BUILD_TESTS=ON ${CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" ${CTEST_ARGS:-}
# Bit-identity of the allocators' outputs with the recorded digests (about 5 s).
BUILD_DIR="$build" ./scripts/test_digest.sh
