#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz) with clang + ASan + UBSan in build-fuzz and
# runs each for a bounded time, starting from the seed corpus in tests/fuzz/corpus/<name>
# (new inputs go to build-fuzz/corpus/<name>; crashes to build-fuzz/crash-*).
# Env: FUZZ_SECONDS (default 60 per harness), FUZZ_RUNS (optional -runs limit),
#      FUZZ_JOBS (parallel fuzzing processes per harness, default 1), BUILD_DIR,
#      FUZZ_HARNESSES (default: fuzz_allocator fuzz_flow fuzz_flow_hybrid fuzz_kv_pool fuzz_radix
#      fuzz_swa_radix fuzz_mamba_radix).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-fuzz}
secs=${FUZZ_SECONDS:-60}
CC=${CC:-clang}
cc_version=$("$CC" --version 2>/dev/null) || cc_version=""
[[ ${cc_version,,} == *clang* ]] || CC=clang
cmake -S . -B "$build" -DCMAKE_C_COMPILER="$CC" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVC_BUILD_FUZZ=ON \
  -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_BENCH=OFF -DKVC_BUILD_EXAMPLES=OFF -DKVC_BUILD_SHARED=OFF -DKVC_WERROR=ON >/dev/null
harnesses=(${FUZZ_HARNESSES:-fuzz_allocator fuzz_flow fuzz_flow_hybrid fuzz_kv_pool fuzz_radix fuzz_swa_radix fuzz_mamba_radix})
cmake --build "$build" -j "$(nproc)" --target "${harnesses[@]}"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for h in "${harnesses[@]}"; do
  mkdir -p "$build/corpus/$h"
  args=(-max_total_time="$secs" -max_len=4096 -timeout=10 -print_final_stats=1 -artifact_prefix="$build/")
  [ -n "${FUZZ_RUNS:-}" ] && args+=(-runs="$FUZZ_RUNS")
  [ "${FUZZ_JOBS:-1}" != 1 ] && args+=(-jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS")
  echo "== $h (${secs}s)"
  rc=0
  "$build/tests/fuzz/$h" "${args[@]}" "$build/corpus/$h" "tests/fuzz/corpus/$h" >"$build/$h.log" 2>&1 || rc=$?
  grep -E "^#[0-9]+ +(DONE|pulse)|cov:|stat::|ERROR|SUMMARY|runtime error|audit|status" "$build/$h.log" | tail -12 || true
  [ "$rc" = 0 ] || { echo "$h FAILED (rc $rc; log $build/$h.log, input $build/crash-*)"; exit 1; }
done
echo "fuzz OK"
