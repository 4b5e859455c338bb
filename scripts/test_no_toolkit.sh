#!/usr/bin/env bash
# README's two commands on a machine without the CUDA toolkit (issue 13 #16), emulated by
# hiding the toolkit from CMake and from the run time: CUDA_HOME / CUDA_PATH unset, no
# CUDA directory on PATH, CMAKE_IGNORE_PATH over the toolkit's include directories, and
# KVC_NVRTC_LIB naming a library that does not exist (NVRTC is looked for under
# /usr/local/cuda too). Then: configure finds no toolkit header, the library (CUDA
# backend included, from src/device/cuda_api.h) builds with -Werror, every host test
# passes, CUDA variants and test_kernel_compile skip, and the serve example runs.
# Build trees: build-notoolkit, build-notoolkit-example (fresh each run).
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "test_no_toolkit: FAIL: $*" >&2; exit 1; }
ignore=""
for d in /usr/local/cuda* /opt/cuda* /usr/lib/cuda; do
  [ -d "$d/include" ] && ignore+="${ignore:+;}$d/include"
  if [ -d "$d/targets" ]; then
    for t in "$d"/targets/*/include; do ignore+="${ignore:+;}$t"; done
  fi
done
# Some images also link the toolkit's headers into a default include directory.
for d in /usr/local/include /usr/include; do
  [ -e "$d/cudaTypedefs.h" ] && ignore+="${ignore:+;}$d"
done
path=""
IFS=: read -r -a dirs <<<"$PATH"
for d in "${dirs[@]}"; do
  [[ $d == *cuda* ]] || path+="${path:+:}$d"
done
hidden=(env -u CUDA_HOME -u CUDA_PATH -u CUDAToolkit_ROOT -u CUDACXX PATH="$path"
        KVC_NVRTC_LIB=/nonexistent/libnvrtc.so)
rm -rf build-notoolkit build-notoolkit-example
"${hidden[@]}" BUILD_DIR=build-notoolkit CMAKE_ARGS="-DCMAKE_IGNORE_PATH=$ignore" \
  CTEST_ARGS="${CTEST_ARGS:-}" ./scripts/test.sh | tee build-notoolkit.log
cache=$(cat build-notoolkit/CMakeCache.txt)
[[ $cache == *"KVC_CUDA_INCLUDE_DIR:PATH=KVC_CUDA_INCLUDE_DIR-NOTFOUND"* ]] ||
  fail "configure still found CUDA toolkit headers (the toolkit was not hidden)"
log=$(cat build-notoolkit.log)
rm -f build-notoolkit.log
[[ $log != *test_cuda_api* ]] || fail "test_cuda_api ran without toolkit headers"
[[ $log == *"test_kernel_compile_host (Skipped)"* ]] || fail "test_kernel_compile did not skip without NVRTC"
[[ $log == *"test_core_cuda (Skipped)"* ]] || fail "CUDA test variants did not skip"
"${hidden[@]}" BUILD_DIR=build-notoolkit-example ./scripts/example.sh --requests 100 --quiet ||
  fail "scripts/example.sh without the toolkit"
echo "test_no_toolkit: OK (host backend built and tested with the CUDA toolkit hidden)"
