#!/usr/bin/env bash
# Embedding test (issue 13 #17): kvcache as a subproject and as a static-only install.
#  1. tests/embed/parent pulls this source tree in with FetchContent (SOURCE_DIR, no
#     network), twice: Debug + BUILD_SHARED_LIBS=OFF, and no build type +
#     BUILD_SHARED_LIBS=ON. The parent's configure checks its build type, kvcache's
#     flags (no -Werror), that no test / internal target exists and the library kind;
#     then it builds, the consumer runs, and `cmake --install` of the parent installs
#     the parent's program only (no kvcache install rules in a subproject).
#  2. A static-only install (BUILD_SHARED_LIBS=OFF at top level) exports kvcache::kvcache:
#     tests/install/consumer links it by that name with find_package, and runs.
# Everything lives in a temporary directory removed on exit. Host backend; no GPU needed.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-embed.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
jobs=$(nproc)
fail() { echo "test_embed: FAIL: $*" >&2; exit 1; }
step() { echo "-- $*"; }
version=$(sed -n 's/^#define KVC_VERSION_STRING "\(.*\)"/\1/p' "$src/include/kvcache.h")

run_consumer() { # label exe want_shared(0|1)
  local out deps
  out=$(KVC_LOG=error "$2") || fail "$1: consumer exited with $?"
  [[ $out == *"consumer OK: kvcache $version"* ]] || fail "$1: unexpected output: $out"
  deps=$(ldd "$2") || fail "$1: ldd"
  if [ "$3" = 1 ]; then
    [[ $deps == *libkvcache.so* ]] || fail "$1: want libkvcache.so loaded: $deps"
  else
    [[ $deps != *libkvcache* ]] || fail "$1: want no libkvcache.so: $deps"
  fi
  step "$1: $out"
}

# --- 1. FetchContent into a parent project --------------------------------------------
embed() { # label shared(ON|OFF) build_type
  local b=$tmp/parent-$1 log=$tmp/parent-$1.log
  local args=(-DKVC_SOURCE_DIR="$src" -DBUILD_SHARED_LIBS="$2")
  [ -n "$3" ] && args+=(-DCMAKE_BUILD_TYPE="$3")
  cmake -S "$src/tests/embed/parent" -B "$b" "${args[@]}" >"$log" 2>&1 || { cat "$log"; fail "$1: configure"; }
  cmake --build "$b" -j "$jobs" >>"$log" 2>&1 || { cat "$log"; fail "$1: build"; }
  local shared=0; [ "$2" = ON ] && shared=1
  run_consumer "FetchContent $1 (BUILD_SHARED_LIBS=$2, build type '${3}')" "$b/embed_consumer" $shared
  cmake --install "$b" --prefix "$tmp/prefix-$1" >>"$log" 2>&1 || { cat "$log"; fail "$1: install"; }
  local installed
  installed=$(cd "$tmp/prefix-$1" && find . -type f -o -type l)
  [ "$installed" = "./bin/embed_consumer" ] || fail "$1: the parent's install added kvcache files: $installed"
}
embed static OFF Debug
embed shared ON ""

# --- 2. Static-only install exports kvcache::kvcache -----------------------------------
b=$tmp/static-only
cmake -S "$src" -B "$b" -DBUILD_SHARED_LIBS=OFF -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_BENCH=OFF \
  -DKVC_BUILD_EXAMPLES=OFF >"$tmp/static.log" 2>&1 || { cat "$tmp/static.log"; fail "static-only configure"; }
cmake --build "$b" -j "$jobs" >>"$tmp/static.log" 2>&1 || { cat "$tmp/static.log"; fail "static-only build"; }
cmake --install "$b" --prefix "$tmp/prefix-static" >>"$tmp/static.log" 2>&1 || fail "static-only install"
sos=$(find "$tmp/prefix-static" -name 'libkvcache.so*')
[ -z "$sos" ] || fail "static-only install has a shared library: $sos"
c=$tmp/consumer-static-only
cmake -S "$src/tests/install/consumer" -B "$c" -DCMAKE_PREFIX_PATH="$tmp/prefix-static" \
  -DKVC_CONSUMER_STATIC=OFF >"$tmp/consumer.log" 2>&1 || { cat "$tmp/consumer.log"; fail "consumer configure (kvcache::kvcache)"; }
cmake --build "$c" >>"$tmp/consumer.log" 2>&1 || { cat "$tmp/consumer.log"; fail "consumer build"; }
run_consumer "static-only install, find_package kvcache::kvcache" "$c/consumer" 0
echo "test_embed: OK"
