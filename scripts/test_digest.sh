#!/usr/bin/env bash
# Proves that a refactor left the allocators' outputs bit-identical: runs the model-based
# and flow tests on the host backend with fixed seeds and step counts and KVT_DIGEST=1
# (each folds every slot, row and mapping the library handed it into one 64-bit hash,
# tests/harness.h), then compares the digests with tests/model_digests.txt.
# Usage: scripts/test_digest.sh [--update]   (--update rewrites the expected file; do it
# only on a commit whose outputs are the reference).
# Env: BUILD_DIR (default build; built here if needed).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
expected=tests/model_digests.txt
update=0
if [ "${1:-}" = "--update" ]; then update=1; elif [ -n "${1:-}" ]; then
  echo "usage: $0 [--update]" >&2
  exit 2
fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DKVC_WERROR=ON -DKVC_BUILD_TESTS=ON >/dev/null
fi
targets="test_alloc_model test_swa_model test_radix_model test_flow_hybrid test_flow_canary_swa"
# shellcheck disable=SC2086
cmake --build "$build" -j 2 --target $targets >/dev/null

# name, binary, seed, steps (steps keep the whole run well under 20 s).
runs="alloc_model stress/test_alloc_model 20261201 200000
swa_model swa/test_swa_model 7 200000
radix_model cache/test_radix_model 11 200000
flow_hybrid flow/test_flow_hybrid 0 0
flow_canary_swa flow/test_flow_canary_swa 0 0"

actual=$(mktemp)
errs=$(mktemp)
trap 'rm -f "$actual" "$errs"' EXIT
while read -r name bin seed steps; do
  # The digest line is on stdout; cmocka's report on stderr must not split it.
  log=$(KVT_DIGEST=1 KVT_SEED="$seed" KVT_STEPS="$steps" "$build/tests/$bin" host 2>"$errs") || {
    printf '%s\n' "$log" >&2
    cat "$errs" >&2
    echo "test_digest: $bin failed" >&2
    exit 1
  }
  line=$(printf '%s\n' "$log" | sed -n 's/^\[ DIGEST   \] [^ ]* \(0x[0-9a-f]*\)$/\1/p')
  if [ -z "$line" ]; then
    echo "test_digest: $bin printed no digest" >&2
    exit 1
  fi
  printf '%s seed=%s steps=%s %s\n' "$name" "$seed" "$steps" "$line" >>"$actual"
done <<<"$runs"

if [ "$update" = 1 ]; then
  cp "$actual" "$expected"
  echo "test_digest: wrote $expected"
  cat "$expected"
  exit 0
fi
if ! diff -u "$expected" "$actual"; then
  echo "test_digest: outputs differ from $expected (see the diff above)" >&2
  exit 1
fi
echo "test_digest: all $(wc -l <"$expected") digests match"
