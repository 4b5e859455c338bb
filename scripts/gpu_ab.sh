#!/usr/bin/env bash
# Same-run A/B of one benchmark: the build in build-gpu against a reference tree in ./ref
# (e.g. `git archive <commit>` unpacked there), timed in turns, ROUNDS times (default 2).
# Run on the GPU machine after .gpu/remote has built build-gpu:
#   BENCH=kvc_bench_alloc FILTER='decode|extend' bash .gpu/remote exec bash scripts/gpu_ab.sh
set -uo pipefail
b=${BUILD_DIR:-build-gpu}
bench=${BENCH:?BENCH=kvc_bench_<name>}
rc=0
if [ -d ref ]; then
  cmake -S ref -B build-ref -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_EXAMPLES=OFF >/dev/null 2>&1 &&
    cmake --build build-ref --target "$bench" -j "$(nproc)" >/dev/null 2>&1 || { echo "reference build failed"; rc=1; }
fi
for round in $(seq 1 "${ROUNDS:-2}"); do
  echo "=== round $round"
  if [ -x "build-ref/bench/$bench" ]; then
    KVC_CACHE_DIR=/tmp/kvc-ref "build-ref/bench/$bench" ${ARGS:-} | grep -E "${FILTER:-.}" | sed 's/^/ref  /'
  fi
  "$b/bench/$bench" ${ARGS:-} | grep -E "${FILTER:-.}" | sed 's/^/new  /'
done
exit $rc
