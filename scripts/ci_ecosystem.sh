#!/usr/bin/env bash
# CI for the ecosystem pieces (issue 8), no GPU needed: the install-and-consume test, the
# embedding test (FetchContent, static-only install), the Doxygen reference (no warnings
# allowed), and the Python binding's pytest suite plus the SGLang-style demo on the host
# backend, the same tests against an ASan build of the library, and against the wheel
# installed into a fresh venv. Installs what it needs: doxygen and pkg-config
# from Debian (apt-get, when root), pytest and numpy with pip.
#   scripts/ci_ecosystem.sh          env: BUILD_DIR (default build-eco), PYTHON
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v cc >/dev/null || need+=(gcc)
command -v doxygen >/dev/null || need+=(doxygen)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v python3 >/dev/null || need+=(python3 python3-pip)
if [ ${#need[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "ci_ecosystem: missing ${need[*]} (install them)" >&2
    exit 1
  fi
fi
build=${BUILD_DIR:-build-eco}

echo "== library (shared + static; the Python extension where Python.h is installed)"
pyext=OFF
python3 -c 'import os, sysconfig; raise SystemExit(not os.path.exists(
    os.path.join(sysconfig.get_paths()["include"], "Python.h")))' && pyext=ON
cmake -S . -B "$build" -DKVC_WERROR=ON -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_BENCH=OFF \
      -DKVC_BUILD_EXAMPLES=OFF -DKVC_BUILD_PYTHON_EXT=$pyext >/dev/null
cmake --build "$build" -j "$(nproc)" --target kvcache kvcache_static >/dev/null

echo "== install and consume (find_package + pkg-config)"
./scripts/test_install.sh "$build"

echo "== embedding (FetchContent into a parent project; static-only install)"
./scripts/test_embed.sh

echo "== API docs (doxygen, warnings are errors)"
./scripts/docs.sh

echo "== Python binding (pytest, host backend) + SGLang-style demo"
BUILD_DIR=$build ./scripts/test_python.sh

echo "== Python binding against an ASan build of the library (buffer checks)"
ASAN_BUILD_DIR=$build-asan ./scripts/test_python_asan.sh

echo "== Python package: wheel (pyproject.toml, scikit-build-core), clean venv, tests"
./scripts/test_wheel.sh

echo "ECOSYSTEM CI OK"
