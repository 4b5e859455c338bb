#!/usr/bin/env bash
# Same-run A/B of the move kernel (bench/NOTES-kernels.md): the build in build-gpu against
# a reference tree in ./ref (e.g. `git archive <commit>` unpacked there), both timed in
# turns, twice (VARIANTS="W,S[,threads[,one]] ..." adds rows with those KVC_MOVE_TUNE
# shapes), then the
# resource usage of both builds' move cubins from their kernel caches. Run on the GPU
# machine after .gpu/remote has built build-gpu, with KVC_CACHE_DIR set:
#   bash .gpu/remote exec bash scripts/gpu_move_ab.sh
set -uo pipefail
b=${BUILD_DIR:-build-gpu}
rc=0
if [ -d ref ]; then
  cmake -S ref -B build-ref -DCMAKE_BUILD_TYPE=Release -DKVC_BUILD_TESTS=OFF -DKVC_BUILD_EXAMPLES=OFF >/dev/null 2>&1 &&
    cmake --build build-ref --target kvc_bench_kv -j "$(nproc)" >/dev/null 2>&1 || { echo "reference build failed"; rc=1; }
fi
row() { # label, then env assignments, then the binary
  local label=$1; shift
  env "$@" --move-only | grep -E "^move" | sed "s/^/$label  /"
}
for round in 1 2; do
  echo "=== round $round"
  [ -x build-ref/bench/kvc_bench_kv ] && row "ref      " KVC_CACHE_DIR=/tmp/kvc-ref build-ref/bench/kvc_bench_kv
  row "new      " "$b/bench/kvc_bench_kv"
  for v in ${VARIANTS:-}; do row "$(printf '%-9s' "$v")" KVC_MOVE_TUNE="$v" "$b/bench/kvc_bench_kv"; done
done
if command -v cuobjdump >/dev/null; then
  echo "=== move cubins: registers, stack, shared memory (ref, then new)"
  for d in /tmp/kvc-ref "${KVC_CACHE_DIR:-/nonexistent}"; do
    for f in $(grep -l kvc_kv_move "$d"/*.cubin 2>/dev/null); do # 40-byte KVCBIN01 header, then the image
      tail -c +41 "$f" >/tmp/ab.cubin && cuobjdump -res-usage /tmp/ab.cubin 2>&1 | grep -A1 "kvc_kv_move" | tail -1
    done
  done
fi
exit $rc
