#!/usr/bin/env bash
# Same-run A/B of the allocation path, the serve example and the KV kernels against a
# reference tree, on the GPU machine after .gpu/remote has built build-gpu. The reference
# is `git archive <commit>` unpacked into REF (default .gpu/ref, carried with .gpu/):
#   bash .gpu/remote exec bash scripts/gpu_ab_alloc.sh
# Prints rows prefixed "ref" / "new"; ROUNDS (default 2) alternates them.
set -uo pipefail
b=${BUILD_DIR:-build-gpu}
ref=${REF:-.gpu/ref}
rm -rf ref-src && cp -r "$ref" ref-src
cmake -S ref-src -B build-ref -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF >/dev/null 2>&1 &&
  cmake --build build-ref -j "$(nproc)" --target kvc_bench_alloc kvc_example_serve kvc_bench_kv >/dev/null 2>&1 ||
  { echo "reference build failed"; exit 1; }
grep -m1 "model name" /proc/cpuinfo
for round in $(seq 1 "${ROUNDS:-2}"); do
  echo "=== round $round: bench_alloc --quick"
  for v in ref new; do
    d=build-ref; [ $v = new ] && d=$b
    KVC_CACHE_DIR=/tmp/kvc-$v "$d/bench/kvc_bench_alloc" --quick |
      grep -E "alloc_decode .*(256|1024) |host half \(graph path\) .*(256|1024) |alloc_extend|free \(" | sed "s/^/$v  /"
  done
  echo "=== round $round: serve (2000 requests)"
  for v in ref new; do
    d=build-ref; [ $v = new ] && d=$b
    KVC_CACHE_DIR=/tmp/kvc-$v "$d/examples/kvc_example_serve" --requests 2000 --quiet |
      grep -E "allocation calls|whole step" | sed "s/^/$v  /"
  done
done
echo "=== bench_kv --quick (move / set_kv against a plain copy)"
for v in new ref; do
  d=build-ref; [ $v = new ] && d=$b
  KVC_CACHE_DIR=/tmp/kvc-$v "$d/bench/kvc_bench_kv" --quick 2>&1 | grep -iE "move|set_kv|copy" | sed "s/^/$v  /"
done
