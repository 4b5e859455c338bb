#!/bin/bash
# rows.sh BUILD OUTDIR: callgrind of each part-3 row alone (KVB_ROW, profiling-patch.diff),
# both caches' evict calls (--toggle-collect), inclusive Ir of each into OUTDIR/ir-ROW.txt.
mkdir -p "$2"
for t in 1 2; do for p in 1 16; do for z in 0 1 2; do
  r=$t,$p,$z
  KVB_ROW=$r KVB_ONLY=swa ${KVB_SIDE:+KVB_SWA_SIDE=$KVB_SIDE} nice valgrind --tool=callgrind --callgrind-out-file="$2/cg-$r.out" \
    --toggle-collect=kvc_swa_radix_cache_evict --toggle-collect=kvc_radix_cache_evict \
    "$1/bench/kvc_bench_radix" > "$2/row-$r.txt" 2>/dev/null
  callgrind_annotate --inclusive=yes "$2/cg-$r.out" 2>/dev/null | grep -E "kvc_swa_radix_cache_evict|kvc_radix_cache_evict" | grep -v "\[.*\].*\[" > "$2/ir-$r.txt"
done; done; done
