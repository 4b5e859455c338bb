#!/usr/bin/env bash
# Install-and-consume test (issue 8): installs kvcache into a temporary prefix, checks the
# layout (header, shared library with SONAME and version, static library, CMake package,
# pkg-config file), then builds and runs tests/install/consumer four ways: find_package
# shared and static, pkg-config shared and static. Host backend only; no GPU needed.
#   scripts/test_install.sh [BUILD_DIR]
# With BUILD_DIR (CTest passes its own), that already-built tree is installed; without,
# the library alone is configured and built in build-install (tests, bench off).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-}
if [ -z "$build" ]; then
  build=$src/build-install
  cmake -S "$src" -B "$build" -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_BENCH=OFF -DKVC_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$build" -j "$(nproc)" --target kvcache kvcache_static >/dev/null
fi
build=$(cd "$build" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

fail() { echo "test_install: FAIL: $*" >&2; exit 1; }
step() { echo "-- $*"; }

step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null

# --- Layout ------------------------------------------------------------------------------
# No pipeline into a reader that exits early (grep with -q, head) anywhere in this script: under pipefail the reader
# exiting early makes the writer fail with SIGPIPE and the pipeline false (issue 13 #15).
# Every output that is tested is captured first, then matched.
sos=$(find "$prefix" -name 'libkvcache.so.*.*.*' -type f)
so=${sos%%$'\n'*}
[ -n "$so" ] || fail "no versioned libkvcache.so.X.Y.Z installed"
libdir=$(dirname "$so")
version=$(sed -n 's/^#define KVC_VERSION_STRING "\(.*\)"/\1/p' "$src/include/kvcache.h")
major=${version%%.*}
[ -f "$prefix/include/kvcache.h" ] || fail "include/kvcache.h missing"
[ "$(basename "$so")" = "libkvcache.so.$version" ] || fail "$so does not carry version $version"
[ -L "$libdir/libkvcache.so.$major" ] || fail "SONAME link libkvcache.so.$major missing"
[ -L "$libdir/libkvcache.so" ] || fail "development link libkvcache.so missing"
[ -f "$libdir/libkvcache.a" ] || fail "static libkvcache.a missing"
soname=$(objdump -p "$so" | awk '$1 == "SONAME" {print $2}')
[ "$soname" = "libkvcache.so.$major" ] || fail "SONAME is '$soname', want libkvcache.so.$major"
for f in kvcacheConfig.cmake kvcacheConfigVersion.cmake kvcacheTargets.cmake; do
  [ -f "$libdir/cmake/kvcache/$f" ] || fail "$libdir/cmake/kvcache/$f missing"
done
pc=$libdir/pkgconfig/kvcache.pc
[ -f "$pc" ] || fail "$pc missing"
# Only kvc_* symbols are exported (version script + -fvisibility=hidden).
syms=$(nm -D --defined-only "$so")
bad=$(awk '$2 ~ /^[TDBR]$/ && $3 !~ /^kvc_/ {print $3}' <<<"$syms")
[ -z "$bad" ] || fail "non-kvc_ symbols exported: $bad"
step "layout OK: $(basename "$so") SONAME $soname, $(grep -c ' T kvc_' <<<"$syms") kvc_* functions"

run_consumer() { # name exe
  local out
  out=$(KVC_LOG=error "$2") || fail "$1: consumer exited with $?"
  [[ $out == *"consumer OK: kvcache $version"* ]] || fail "$1: unexpected output: $out"
  step "$1: $out"
}

# --- find_package(kvcache) ---------------------------------------------------------------
for kind in shared static; do
  b=$tmp/consumer-cmake-$kind
  static=OFF; [ "$kind" = static ] && static=ON
  cmake -S "$src/tests/install/consumer" -B "$b" -DCMAKE_PREFIX_PATH="$prefix" \
        -DKVC_CONSUMER_STATIC=$static -DCMAKE_BUILD_TYPE=Release >"$tmp/cfg-$kind.log" 2>&1 ||
    { cat "$tmp/cfg-$kind.log"; fail "find_package configure ($kind)"; }
  cmake --build "$b" >"$tmp/build-$kind.log" 2>&1 || { cat "$tmp/build-$kind.log"; fail "find_package build ($kind)"; }
  deps=$(ldd "$b/consumer") || fail "ldd $b/consumer"
  if [ "$kind" = static ]; then
    [[ $deps != *libkvcache* ]] || fail "static consumer links libkvcache.so: $deps"
  else
    [[ $deps == *"libkvcache.so.$major => $libdir"* ]] ||
      { echo "$deps" >&2; readelf -d "$b/consumer" >&2; fail "shared consumer does not load $libdir"; }
  fi
  run_consumer "find_package $kind" "$b/consumer"
done

# --- pkg-config -----------------------------------------------------------------------------
if command -v pkg-config >/dev/null; then
  export PKG_CONFIG_PATH=$libdir/pkgconfig
  [ "$(pkg-config --modversion kvcache)" = "$version" ] || fail "pkg-config --modversion"
  cflags=$(pkg-config --cflags kvcache)
  cc=${CC:-cc}
  # shellcheck disable=SC2046,SC2086
  $cc -std=c11 -Wall -Wextra -Werror $cflags "$src/tests/install/consumer/main.c" -o "$tmp/pc-shared" \
      $(pkg-config --libs kvcache) -Wl,-rpath,"$libdir" || fail "pkg-config shared build"
  run_consumer "pkg-config shared" "$tmp/pc-shared"
  # Static: the archive by path plus Libs.private (pkg-config --static).
  libs_static=$(pkg-config --static --libs-only-l kvcache)
  libs_static=${libs_static//-lkvcache/}
  # shellcheck disable=SC2086
  $cc -std=c11 -Wall -Wextra -Werror $cflags "$src/tests/install/consumer/main.c" -o "$tmp/pc-static" \
      $(pkg-config --libs-only-L kvcache) -Wl,-Bstatic -lkvcache -Wl,-Bdynamic $libs_static ||
    fail "pkg-config static build"
  deps=$(ldd "$tmp/pc-static") || fail "ldd $tmp/pc-static"
  [[ $deps != *libkvcache* ]] || fail "pkg-config static consumer links libkvcache.so: $deps"
  run_consumer "pkg-config static" "$tmp/pc-static"
else
  step "pkg-config not installed: pkg-config builds skipped"
fi
echo "test_install: OK"
