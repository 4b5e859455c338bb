#!/usr/bin/env bash
# Runs every benchmark on the GPU machine (after `bash .gpu/remote exec ...` built
# build-gpu) and leaves one log and one tarball of CSVs in $OUT.
#   bash .gpu/remote exec bash scripts/gpu_bench.sh [--quick]
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/csv"
b=${BUILD_DIR:-build-gpu}/bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader
rc=0
for x in startup alloc kv mla mamba swa; do
  exe="$b/kvc_bench_$x"
  [ -x "$exe" ] || continue
  echo "=== kvc_bench_$x"
  "$exe" --csv "$OUT/csv/bench_$x.csv" "$@" || rc=1
done
tar -C "$OUT" -czf "$OUT/bench_csv.tgz" csv && rm -rf "$OUT/csv"
exit $rc
