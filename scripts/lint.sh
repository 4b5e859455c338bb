#!/usr/bin/env bash
# Static analysis gate: cppcheck (warning, performance, portability) over src/, with the
# committed suppressions in .cppcheck-suppressions; exit 1 on any finding.
# KVC_LINT_TIDY=1 also runs clang-tidy with .clang-tidy over src/ (a compile database is
# made in build-lint) and fails on any finding; CI sets it.
# First, a shell check needing no tools: no pipeline in scripts/ or .ci/ ends in a reader
# that may exit before its writer is done (grep -q, head): under pipefail the writer then
# dies of SIGPIPE and the pipeline is false at random (issue 13 #15).
set -euo pipefail
cd "$(dirname "$0")/.."
early_exit=$(grep -nE '\|[[:space:]]*(grep[[:space:]]+(-[A-Za-z]*q|--quiet)|head([[:space:]]|$))' \
  scripts/*.sh .ci/run | grep -vE '^[^:]+:[0-9]+:[[:space:]]*#' || true)
if [ -n "$early_exit" ]; then
  echo "$early_exit"
  echo "lint: pipelines ending in grep -q / head are flaky under pipefail (capture the output first)" >&2
  exit 1
fi
echo "shell pipelines clean"
# The library builds without the CUDA toolkit (src/device/cuda_api.h declares what it
# uses): no source but the toolkit cross-check test may include a toolkit header, and
# bench/diag/ (stand-alone diagnostics run by hand on a GPU machine, not built by CMake).
toolkit=$(grep -rnE '#[[:space:]]*include[[:space:]]*[<"](cuda|cudaTypedefs|nvrtc|cuda_runtime[a-z_]*)\.h[>"]' \
  src include tests bench examples | grep -v -e '^tests/unit/test_cuda_api.c:' -e '^bench/diag/' || true)
if [ -n "$toolkit" ]; then
  echo "$toolkit"
  echo "lint: toolkit headers included outside tests/unit/test_cuda_api.c (use src/device/cuda_api.h)" >&2
  exit 1
fi
echo "no toolkit header included"
# Every repository path the docs name exists (scripts/check_doc_paths.sh).
./scripts/check_doc_paths.sh
# Formatting: every tracked C / CUDA source is as the committed .clang-format lays it out
# (include/ has its own, narrower one). Fix with:
#   git ls-files '*.c' '*.h' '*.cu' | xargs clang-format -i
if ! command -v clang-format >/dev/null; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang-format >/dev/null
  else
    echo "clang-format is missing (apt-get install clang-format)" >&2; exit 1
  fi
fi
unformatted=()
while IFS= read -r f; do
  clang-format --style=file --dry-run -Werror "$f" >/dev/null 2>&1 || unformatted+=("$f")
done < <(git ls-files '*.c' '*.h' '*.cu')
if [ ${#unformatted[@]} -gt 0 ]; then
  printf '  %s\n' "${unformatted[@]}"
  echo "lint: ${#unformatted[@]} file(s) not formatted with .clang-format (clang-format -i FILE)" >&2
  exit 1
fi
echo "clang-format clean ($(clang-format --version | sed 's/.*version //'))"
if ! command -v cppcheck >/dev/null; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cppcheck >/dev/null
  else
    echo "cppcheck is missing (apt-get install cppcheck)" >&2
    exit 1
  fi
fi
echo "cppcheck $(cppcheck --version | awk '{print $2}')"
cppcheck --enable=warning,performance,portability --std=c11 --inline-suppr --quiet \
  --suppressions-list=.cppcheck-suppressions -I include -I src -I kernels -D__GNUC__ \
  --error-exitcode=1 src/
echo "cppcheck clean"
if [ "${KVC_LINT_TIDY:-0}" = 1 ]; then
  cmake -S . -B build-lint -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_BENCH=OFF \
    -DKVC_BUILD_EXAMPLES=OFF >/dev/null
  # One file per process: clang-tidy 14's analyzer carries state between files of one
  # invocation (a va_list finding appeared only after another file had been analysed).
  findings=$(find src -name '*.c' | sort | xargs -P "$(nproc)" -n 1 clang-tidy -p build-lint --quiet 2>/dev/null |
    grep -E "warning:|error:" | sort -u || true)
  if [ -n "$findings" ]; then
    echo "$findings"
    echo "clang-tidy: $(echo "$findings" | wc -l) finding(s)"
    exit 1
  fi
  echo "clang-tidy clean"
fi
