#!/usr/bin/env bash
# The Python package as users get it (issue 16): builds the wheel from this checkout with
# pip (scikit-build-core runs CMake; only PyPI is needed), installs it into a fresh
# virtual environment, checks `import kvcache` with no KVCACHE_LIB and that the library
# is the bundled one, then runs python/tests against the installed package (the tests
# are copied out of the tree so the checkout's python/ is not importable).
#   scripts/test_wheel.sh            env: PYTHON (python3), KEEP=1 keeps the temp dir
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvc-wheel.XXXXXX")
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$tmp"' EXIT
unset KVCACHE_LIB
echo "== wheel (pip wheel ., scikit-build-core + CMake)"
"$py" -m pip wheel --quiet --no-deps -w "$tmp/dist" . >"$tmp/wheel.log" 2>&1 ||
  { tail -40 "$tmp/wheel.log"; echo "test_wheel: wheel build failed" >&2; exit 1; }
whl=$(ls "$tmp"/dist/kvcache-*.whl)
echo "   $(basename "$whl"): $("$py" -m zipfile -l "$whl" | awk 'NR>1 {print $1}' | tr '\n' ' ')"
echo "== fresh venv, pip install the wheel"
"$py" -m venv "$tmp/venv"
vpy=$tmp/venv/bin/python
"$vpy" -m pip install --quiet "$whl" pytest numpy
cd "$tmp"  # away from the checkout: nothing in-tree on sys.path
"$vpy" -c 'import kvcache, os; print("   import kvcache", kvcache.__version__, "->", kvcache.library_path); assert kvcache.library_path.startswith(os.path.dirname(kvcache.__file__))'
"$vpy" -c 'import kvcache; print("   per-step calls:", kvcache.fast_path); assert kvcache.fast_path, "the wheel ships _kvcfast"'
echo "== python/tests against the installed package"
mkdir -p "$tmp/src/python" "$tmp/src/include"
cp -r "$OLDPWD/python/tests" "$tmp/src/python/tests"
cp "$OLDPWD/include/kvcache.h" "$tmp/src/include/"  # test_abi compiles against the header
KVCACHE_TEST_INSTALLED=1 "$vpy" -m pytest -q -rs -p no:cacheprovider "$tmp/src/python/tests"
echo "WHEEL OK"
